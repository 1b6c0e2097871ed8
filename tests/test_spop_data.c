/*
 * test_spop_data.c - unit tests of the SPOP codec (spop/), its smallest
 * pieces: the tables of names, varints, typed data; and the guard page
 * the decoders' tests rely on.
 *
 * Every decoder is fed its input whole and then every prefix of it, the
 * bytes placed right before a PROT_NONE guard page (tests/lib/guard.h) so
 * that reading one byte too far crashes the test instead of passing
 * silently; the vectors are tests/lib/spopvec.h's (the captures and
 * constructed frames of docs/reference spop-protocol-notes.md).
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "spop/spop.h"
#include "tests/lib/guard.h"
#include "tests/lib/spopvec.h"

/* ---- guard page ---- */

Test(guard, catches_overread, .signal = SIGSEGV)
{
	struct guard g;
	const volatile uint8_t *p;

	guard_init(&g, 16);
	p = guard_put(&g, "abcd", 4);
	signal(SIGSEGV, SIG_DFL);   /* die of it, even under ASan */
	(void)p[4];
}

/* ---- tables ---- */

Test(tables, err_str)
{
	cr_assert_str_eq(spop_err_str(SPOP_ERR_NONE), "normal");
	cr_assert_str_eq(spop_err_str(SPOP_ERR_IO), "I/O error");
	cr_assert_str_eq(spop_err_str(SPOP_ERR_TOO_BIG), "frame is too big");
	cr_assert_str_eq(spop_err_str(SPOP_ERR_RES), "resource allocation error");
	cr_assert_str_eq(spop_err_str(SPOP_ERR_UNKNOWN), "an unknown error occurred");
	cr_assert_str_eq(spop_err_str((enum spop_err)42), "unknown error");
	cr_assert_str_eq(spop_err_str((enum spop_err)-1), "unknown error");
}

Test(tables, frame_type_str)
{
	cr_assert_str_eq(spop_frame_type_str(SPOP_FRAME_HAPROXY_HELLO), "haproxy-hello");
	cr_assert_str_eq(spop_frame_type_str(SPOP_FRAME_NOTIFY), "notify");
	cr_assert_str_eq(spop_frame_type_str(SPOP_FRAME_ACK), "ack");
	cr_assert_str_eq(spop_frame_type_str(SPOP_FRAME_AGENT_DISCONNECT), "agent-disconnect");
	cr_assert_str_eq(spop_frame_type_str((enum spop_frame_type)4), "unknown");
	cr_assert_str_eq(spop_frame_type_str((enum spop_frame_type)255), "unknown");
}

/* ---- varints ---- */

struct varint_vec {
	uint64_t v;
	const char *bytes;
	size_t len;
};

static const struct varint_vec varint_vecs[] = {
	{ 0,            "\x00", 1 },
	{ 239,          "\xef", 1 },
	{ 240,          "\xf0\x00", 2 },
	{ 300,          "\xfc\x03", 2 },
	{ 2287,         "\xff\x7f", 2 },
	{ 2288,         "\xf0\x80\x00", 3 },
	{ 5000,         "\xf8\xa9\x01", 3 },
	{ 16380,        "\xfc\xf0\x06", 3 },
	{ UINT32_MAX,   "\xff\xf0\xfe\xfe\x7e", 5 },
	{ UINT64_MAX,   "\xff\xf0\xfe\xfe\xfe\xfe\xfe\xfe\xfe\x0e", 10 },
};

Test(varint, worked_examples_decode)
{
	struct guard g;

	guard_init(&g, 16);
	for (size_t i = 0; i < sizeof(varint_vecs) / sizeof(varint_vecs[0]); i++) {
		const struct varint_vec *t = &varint_vecs[i];
		const uint8_t *p = guard_put(&g, t->bytes, t->len);
		uint64_t v = 0;
		enum spop_err err = SPOP_ERR_NONE;

		cr_assert_eq(spop_varint_decode(p, t->len, &v, &err), (int)t->len, "vec %zu", i);
		cr_assert_eq(v, t->v, "vec %zu: %llu", i, (unsigned long long)v);
		/* trailing bytes are not consumed */
		uint8_t buf[16];
		memcpy(buf, t->bytes, t->len);
		buf[t->len] = 0x42;
		cr_assert_eq(spop_varint_decode(buf, t->len + 1, &v, &err), (int)t->len);
		/* every proper prefix asks for more, without over-reading */
		for (size_t k = 0; k < t->len; k++) {
			p = guard_put(&g, t->bytes, k);
			cr_assert_eq(spop_varint_decode(p, k, &v, &err), 0, "vec %zu prefix %zu", i, k);
		}
	}
	guard_fini(&g);
}

Test(varint, worked_examples_encode)
{
	for (size_t i = 0; i < sizeof(varint_vecs) / sizeof(varint_vecs[0]); i++) {
		const struct varint_vec *t = &varint_vecs[i];
		uint8_t buf[16];

		memset(buf, 0xAA, sizeof(buf));
		cr_assert_eq(spop_varint_size(t->v), t->len, "vec %zu", i);
		cr_assert_eq(spop_varint_encode(buf, sizeof(buf), t->v), t->len, "vec %zu", i);
		cr_assert_arr_eq(buf, t->bytes, t->len, "vec %zu", i);
		cr_assert_eq(buf[t->len], 0xAA, "vec %zu wrote past its size", i);
		/* exact capacity is enough, one less is not and writes nothing */
		cr_assert_eq(spop_varint_encode(buf, t->len, t->v), t->len);
		memset(buf, 0xAA, sizeof(buf));
		cr_assert_eq(spop_varint_encode(buf, t->len - 1, t->v), 0);
		cr_assert_eq(buf[0], 0xAA);
	}
}

Test(varint, size_boundaries)
{
	/* table of SPOE.txt 3.1, then one more 7-bit group per byte */
	static const uint64_t first[] = { 0, 240, 2288, 264432, 33818864, 4328786160ull };

	for (size_t n = 1; n < sizeof(first) / sizeof(first[0]); n++) {
		cr_assert_eq(spop_varint_size(first[n] - 1), n, "size of %llu",
			     (unsigned long long)(first[n] - 1));
		cr_assert_eq(spop_varint_size(first[n]), n + 1, "size of %llu",
			     (unsigned long long)first[n]);
	}
}

Test(varint, round_trip)
{
	uint64_t x = 0x9E3779B97F4A7C15ull;

	for (int i = 0; i < 200000; i++) {
		uint64_t v, out = 0;
		uint8_t buf[SPOP_VARINT_MAX];
		size_t n;
		enum spop_err err;

		if (i < 64 * 3) {   /* 2^k - 1, 2^k, 2^k + 1 */
			v = ((uint64_t)1 << (i / 3)) + (uint64_t)(i % 3) - 1;
		} else {            /* xorshift, with a random bit length */
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			v = x >> (x & 63);
		}
		n = spop_varint_encode(buf, sizeof(buf), v);
		cr_assert(n >= 1 && n <= SPOP_VARINT_MAX);
		cr_assert_eq(n, spop_varint_size(v));
		cr_assert_eq(spop_varint_decode(buf, n, &out, &err), (int)n);
		cr_assert_eq(out, v, "%llu -> %llu", (unsigned long long)v, (unsigned long long)out);
	}
}

Test(varint, too_long_or_overflowing)
{
	uint64_t v;
	enum spop_err err;
	struct guard g;
	const uint8_t *p;

	guard_init(&g, 32);
	/* 11 bytes: the 10th still has its continuation bit */
	p = guard_put(&g, BYTES("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x00"));
	err = SPOP_ERR_NONE;
	cr_assert_eq(spop_varint_decode(p, 11, &v, &err), -1);
	cr_assert_eq(err, SPOP_ERR_INVALID);
	/* ... which is known from the first 10 bytes already */
	p = guard_put(&g, BYTES("\xf0\x80\x80\x80\x80\x80\x80\x80\x80\x80"));
	err = SPOP_ERR_NONE;
	cr_assert_eq(spop_varint_decode(p, 10, &v, &err), -1);
	cr_assert_eq(err, SPOP_ERR_INVALID);
	/* 2^64 - 1 + 2^60: the 10th byte's bits do not fit */
	p = guard_put(&g, BYTES("\xff\xf0\xfe\xfe\xfe\xfe\xfe\xfe\xfe\x0f"));
	err = SPOP_ERR_NONE;
	cr_assert_eq(spop_varint_decode(p, 10, &v, &err), -1);
	cr_assert_eq(err, SPOP_ERR_INVALID);
	/* a 10th byte worth 2^64 on its own, the others at their minimum */
	p = guard_put(&g, BYTES("\xf0\x80\x80\x80\x80\x80\x80\x80\x80\x10"));
	err = SPOP_ERR_NONE;
	cr_assert_eq(spop_varint_decode(p, 10, &v, &err), -1);
	cr_assert_eq(err, SPOP_ERR_INVALID);
	/* the smallest 10-byte value is fine: 240 + sum(128 << (4 + 7k)) */
	p = guard_put(&g, BYTES("\xf0\x80\x80\x80\x80\x80\x80\x80\x80\x00"));
	cr_assert_eq(spop_varint_decode(p, 10, &v, &err), 10);
	cr_assert_eq(spop_varint_size(v), 10);
	/* the largest 10th byte with the others at their max: carry out */
	p = guard_put(&g, BYTES("\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f"));
	err = SPOP_ERR_NONE;
	cr_assert_eq(spop_varint_decode(p, 10, &v, &err), -1);
	cr_assert_eq(err, SPOP_ERR_INVALID);
	/* sum overflow with a 10th byte that fits the shift: 0x0f << 60 plus
	 * the rest at max exceeds 2^64 - 1 */
	p = guard_put(&g, BYTES("\xff\xff\xff\xff\xff\xff\xff\xff\xff\x0f"));
	err = SPOP_ERR_NONE;
	cr_assert_eq(spop_varint_decode(p, 10, &v, &err), -1);
	/* a NULL err is allowed */
	cr_assert_eq(spop_varint_decode(p, 10, &v, NULL), -1);
	guard_fini(&g);
}

Test(varint, truncated_needs_more)
{
	uint64_t v;
	enum spop_err err = SPOP_ERR_NONE;
	struct guard g;

	guard_init(&g, 16);
	cr_assert_eq(spop_varint_decode(guard_put(&g, "", 0), 0, &v, &err), 0);
	cr_assert_eq(spop_varint_decode(guard_put(&g, BYTES("\xfc")), 1, &v, &err), 0);
	cr_assert_eq(spop_varint_decode(guard_put(&g, BYTES("\xff\xf0")), 2, &v, &err), 0);
	cr_assert_eq(spop_varint_decode(guard_put(&g, BYTES("\xff\xf0\xfe\xfe\xfe\xfe\xfe\xfe\xfe")),
					 9, &v, &err), 0);
	cr_assert_eq(err, SPOP_ERR_NONE);
	guard_fini(&g);
}

/* ---- typed data ---- */
/* Encodes d, checks the bytes when `want` is given, decodes them back from
 * before the guard page and checks every proper prefix asks for more. */
static void data_round_trip(const struct spop_data *d, const uint8_t *want, size_t want_len)
{
	uint8_t buf[512];
	struct spop_writer w;
	struct spop_data out;
	enum spop_err err = SPOP_ERR_NONE;
	struct guard g;
	const uint8_t *p;

	spop_writer_init(&w, buf, sizeof(buf));
	spop_put_data(&w, d);
	cr_assert(!w.overflow);
	if (want) {
		cr_assert_eq(w.len, want_len, "type %d: %zu bytes", d->type, w.len);
		cr_assert_arr_eq(buf, want, want_len, "type %d bytes", d->type);
	}
	guard_init(&g, w.len);
	p = guard_put(&g, buf, w.len);
	memset(&out, 0x5A, sizeof(out));
	cr_assert_eq(spop_data_decode(p, w.len, &out, &err), (int)w.len, "type %d", d->type);
	cr_assert(data_eq(d, &out), "type %d differs after a round trip", d->type);
	if (d->type == SPOP_DATA_STRING || d->type == SPOP_DATA_BINARY)
		cr_assert(out.v.str.len == 0 || (const uint8_t *)out.v.str.ptr > p,
			  "decoded strings are views into the input");
	for (size_t k = 0; k < w.len; k++) {
		p = guard_put(&g, buf, k);
		cr_assert_eq(spop_data_decode(p, k, &out, &err), 0, "type %d prefix %zu", d->type, k);
	}
	guard_fini(&g);
}

Test(data, null_and_bool)
{
	struct spop_data d = { .type = SPOP_DATA_NULL };

	data_round_trip(&d, BYTES("\x00"));
	d.type = SPOP_DATA_BOOL;
	d.v.b = true;
	data_round_trip(&d, BYTES("\x11"));
	d.v.b = false;
	data_round_trip(&d, BYTES("\x01"));
}

Test(data, integers)
{
	struct spop_data d;

	d = mk_int(SPOP_DATA_INT32, 0);
	data_round_trip(&d, BYTES("\x02\x00"));
	d = mk_int(SPOP_DATA_INT32, 300);
	data_round_trip(&d, BYTES("\x02\xfc\x03"));
	d = mk_int(SPOP_DATA_INT32, INT32_MAX);
	data_round_trip(&d, NULL, 0);
	d = mk_int(SPOP_DATA_INT32, INT32_MIN);
	data_round_trip(&d, NULL, 0);
	d = mk_uint(SPOP_DATA_UINT32, 16380);
	data_round_trip(&d, BYTES("\x03\xfc\xf0\x06"));
	d = mk_uint(SPOP_DATA_UINT32, UINT32_MAX);
	data_round_trip(&d, BYTES("\x03\xff\xf0\xfe\xfe\x7e"));
	d = mk_int(SPOP_DATA_INT64, 150);
	data_round_trip(&d, BYTES("\x04\x96"));
	/* negative: two's complement cast to 64 bits, a 10-byte varint */
	d = mk_int(SPOP_DATA_INT64, -1);
	data_round_trip(&d, BYTES("\x04\xff\xf0\xfe\xfe\xfe\xfe\xfe\xfe\xfe\x0e"));
	d = mk_int(SPOP_DATA_INT64, INT64_MIN);
	data_round_trip(&d, NULL, 0);
	d = mk_int(SPOP_DATA_INT64, INT64_MAX);
	data_round_trip(&d, NULL, 0);
	d = mk_int(SPOP_DATA_INT64, -12345);
	data_round_trip(&d, NULL, 0);
	d = mk_uint(SPOP_DATA_UINT64, UINT64_MAX);
	data_round_trip(&d, BYTES("\x05\xff\xf0\xfe\xfe\xfe\xfe\xfe\xfe\xfe\x0e"));
	d = mk_uint(SPOP_DATA_UINT64, 0);
	data_round_trip(&d, BYTES("\x05\x00"));
}

Test(data, addresses)
{
	struct spop_data d = { .type = SPOP_DATA_IPV4 };
	static const uint8_t v6[16] = { 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0,
					0, 0, 0, 0, 0, 0, 0xff, 0x01 };

	memcpy(d.v.ipv4, "\xc0\x00\x02\x01", 4);
	data_round_trip(&d, BYTES("\x06\xc0\x00\x02\x01"));
	d.type = SPOP_DATA_IPV6;
	memcpy(d.v.ipv6, v6, 16);
	data_round_trip(&d, BYTES("\x07" "\x20\x01\x0d\xb8\x00\x00\x00\x00"
				  "\x00\x00\x00\x00\x00\x00\xff\x01"));
}

Test(data, strings)
{
	static char big[300];
	struct spop_data d;

	d = mk_str(SPOP_DATA_STRING, "", 0);
	data_round_trip(&d, BYTES("\x08\x00"));
	d = mk_str(SPOP_DATA_STRING, NULL, 0);
	data_round_trip(&d, BYTES("\x08\x00"));
	d = mk_str(SPOP_DATA_STRING, "abc", 3);
	data_round_trip(&d, BYTES("\x08\x03" "abc"));
	d = mk_str(SPOP_DATA_BINARY, "\x00\x01\x00\xff", 4);
	data_round_trip(&d, BYTES("\x09\x04" "\x00\x01\x00\xff"));
	d = mk_str(SPOP_DATA_BINARY, "", 0);
	data_round_trip(&d, BYTES("\x09\x00"));
	/* a length of two varint bytes */
	memset(big, 'x', sizeof(big));
	big[17] = '\0';
	d = mk_str(SPOP_DATA_STRING, big, sizeof(big));
	data_round_trip(&d, NULL, 0);
}

Test(data, flags_and_reserved_types)
{
	struct spop_data out;
	enum spop_err err;
	uint8_t b;

	/* the high nibble of non-bool types is ignored */
	cr_assert_eq(spop_data_decode(BYTES("\xf0"), &out, &err), 1);
	cr_assert_eq(out.type, SPOP_DATA_NULL);
	cr_assert_eq(spop_data_decode(BYTES("\x31"), &out, &err), 1);
	cr_assert_eq(out.type, SPOP_DATA_BOOL);
	cr_assert(out.v.b);
	cr_assert_eq(spop_data_decode(BYTES("\x21"), &out, &err), 1);
	cr_assert(!out.v.b);
	for (b = 10; b < 16; b++) {
		uint8_t in[4] = { b, 0, 0, 0 };

		err = SPOP_ERR_NONE;
		cr_assert_eq(spop_data_decode(in, sizeof(in), &out, &err), -1, "type %u", b);
		cr_assert_eq(err, SPOP_ERR_INVALID);
		in[0] = (uint8_t)(b | 0x10);
		cr_assert_eq(spop_data_decode(in, sizeof(in), &out, &err), -1, "type %u", b);
	}
}

Test(data, malformed_lengths)
{
	struct spop_data out;
	enum spop_err err = SPOP_ERR_NONE;

	/* a string announcing more bytes than given: need more */
	cr_assert_eq(spop_data_decode(BYTES("\x08\x05" "abc"), &out, &err), 0);
	/* a string whose length cannot be returned as an int: malformed */
	cr_assert_eq(spop_data_decode(BYTES("\x08\xff\xf0\xfe\xfe\xfe\xfe\xfe\xfe\xfe\x0e" "x"),
				      &out, &err), -1);
	cr_assert_eq(err, SPOP_ERR_INVALID);
	/* a malformed varint in an integer */
	err = SPOP_ERR_NONE;
	cr_assert_eq(spop_data_decode(BYTES("\x04\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x00"),
				      &out, &err), -1);
	cr_assert_eq(err, SPOP_ERR_INVALID);
}
