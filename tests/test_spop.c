/*
 * test_spop.c - unit tests of the SPOP codec (spop/).
 *
 * Test vectors are the real captures and constructed frames of
 * docs/reference spop-protocol-notes.md (sections 1.3-1.8). Every decoder is
 * fed its input whole and then every prefix of it, the bytes placed right
 * before a PROT_NONE guard page so that reading one byte too far crashes
 * the test instead of passing silently.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* MAP_ANONYMOUS */
#endif
#include <criterion/criterion.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "spop/spop.h"

/* A byte string literal and its length (without the literal's NUL).
 * Hex escapes are closed by splitting the literal: "\x0f" "check". */
#define BYTES(s) ((const uint8_t *)(s)), (sizeof(s) - 1)

/* ---- test vectors (notes 1.5-1.8) ---- */

#define UUID "4f2c1a9e-3b7d-4e8a-9c61-0d5e2f7a8b13"

/* HAProxy 2.x HAPROXY-HELLO, LENGTH 129 (0x81). */
static const char hello_129[] =
	"\x00\x00\x00\x81"
	"\x01" "\x00\x00\x00\x01" "\x00" "\x00"
	"\x12" "supported-versions" "\x08" "\x03" "2.0"
	"\x0e" "max-frame-size" "\x03" "\xfc\xf0\x06"
	"\x0c" "capabilities" "\x08" "\x10" "pipelining,async"
	"\x09" "engine-id" "\x08" "\x24" UUID;

/* Real NOTIFY (spoa-example), LENGTH 30. */
static const char notify_30[] =
	"\x00\x00\x00\x1e"
	"\x03" "\x00\x00\x00\x01" "\x14" "\x01"
	"\x0f" "check-client-ip" "\x01"
	"\x00" "\x06" "\x7f\x00\x00\x01";

/* Constructed NOTIFY check-rate(key="abc", ip=192.0.2.1), LENGTH 36. */
static const char notify_rate[] =
	"\x00\x00\x00\x24"
	"\x03" "\x00\x00\x00\x01" "\x14" "\x01"
	"\x0a" "check-rate" "\x02"
	"\x03" "key" "\x08" "\x03" "abc"
	"\x02" "ip" "\x06" "\xc0\x00\x02\x01";

/* Constructed ACK: set-var txn rate=150 (INT64), set-var txn blocked=true.
 * LENGTH 29 (0x1d) adds up. 150 < 240 is the one varint byte 0x96; a
 * "96 01" (as LEB128 would write 150) would make LENGTH 30 and decode as
 * rate=150 followed by a malformed action 0x01 0x01. */
static const char ack_29[] =
	"\x00\x00\x00\x1d"
	"\x67" "\x00\x00\x00\x01" "\x14" "\x01"
	"\x01\x03\x02" "\x04" "rate" "\x04" "\x96"
	"\x01\x03\x02" "\x07" "blocked" "\x11";

/* Constructed AGENT-HELLO, LENGTH 64 (0x40). */
static const char agent_hello_64[] =
	"\x00\x00\x00\x40"
	"\x65" "\x00\x00\x00\x01" "\x00" "\x00"
	"\x07" "version" "\x08" "\x03" "2.0"
	"\x0e" "max-frame-size" "\x03" "\xfc\xf0\x06"
	"\x0c" "capabilities" "\x08" "\x0a" "pipelining";

/* Real HAPROXY-DISCONNECT (spoa-mirror #17), LENGTH 40 (0x28). */
static const char disconnect_40[] =
	"\x00\x00\x00\x28"
	"\x02" "\x00\x00\x00\x01" "\x00" "\x00"
	"\x0b" "status-code" "\x03" "\x01"
	"\x07" "message" "\x08" "\x09" "I/O error";

/* ---- guard page ---- */

struct guard {
	uint8_t *base;
	size_t size;
	uint8_t *limit;   /* first byte of the PROT_NONE page */
};

static void guard_init(struct guard *g, size_t max)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	size_t data = (max + pg - 1) / pg * pg;

	if (data == 0)
		data = pg;
	g->size = data + pg;
	g->base = mmap(NULL, g->size, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert(g->base != MAP_FAILED);
	cr_assert_eq(mprotect(g->base + data, pg, PROT_NONE), 0);
	g->limit = g->base + data;
}

static void guard_fini(struct guard *g)
{
	munmap(g->base, g->size);
}

/* Copies n bytes of src so that they end exactly at the guard page. */
static const uint8_t *guard_put(struct guard *g, const void *src, size_t n)
{
	uint8_t *p = g->limit - n;

	if (n)
		memcpy(p, src, n);
	return p;
}

Test(guard, catches_overread, .signal = SIGSEGV)
{
	struct guard g;
	const volatile uint8_t *p;

	guard_init(&g, 16);
	p = guard_put(&g, "abcd", 4);
	signal(SIGSEGV, SIG_DFL);   /* die of it, even under ASan */
	(void)p[4];
}

/* ---- helpers ---- */

static struct spop_str S(const char *s)
{
	struct spop_str r = { s, strlen(s) };
	return r;
}

static bool str_eq(struct spop_str s, const char *lit)
{
	return s.len == strlen(lit) && memcmp(s.ptr, lit, s.len) == 0;
}

static bool data_eq(const struct spop_data *a, const struct spop_data *b)
{
	if (a->type != b->type)
		return false;
	switch (a->type) {
	case SPOP_DATA_NULL:
		return true;
	case SPOP_DATA_BOOL:
		return a->v.b == b->v.b;
	case SPOP_DATA_INT32:
	case SPOP_DATA_INT64:
		return a->v.i == b->v.i;
	case SPOP_DATA_UINT32:
	case SPOP_DATA_UINT64:
		return a->v.u == b->v.u;
	case SPOP_DATA_IPV4:
		return memcmp(a->v.ipv4, b->v.ipv4, 4) == 0;
	case SPOP_DATA_IPV6:
		return memcmp(a->v.ipv6, b->v.ipv6, 16) == 0;
	case SPOP_DATA_STRING:
	case SPOP_DATA_BINARY:
		return a->v.str.len == b->v.str.len &&
		       (a->v.str.len == 0 || memcmp(a->v.str.ptr, b->v.str.ptr, a->v.str.len) == 0);
	default:
		return false;
	}
}

/* Decodes the whole frame `raw` (n bytes) from before the guard page;
 * the frame must be exactly n bytes. */
static void decode_whole(struct guard *g, const uint8_t *raw, size_t n, struct spop_frame *f)
{
	enum spop_err err = SPOP_ERR_NONE;
	const uint8_t *p = guard_put(g, raw, n);

	cr_assert_eq(spop_frame_decode(p, n, SPOP_DEFAULT_FRAME_SIZE, f, &err), (int)n,
		     "err %d", err);
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

static struct spop_data mk_int(enum spop_data_type t, int64_t i)
{
	struct spop_data d = { .type = t };
	d.v.i = i;
	return d;
}

static struct spop_data mk_uint(enum spop_data_type t, uint64_t u)
{
	struct spop_data d = { .type = t };
	d.v.u = u;
	return d;
}

static struct spop_data mk_str(enum spop_data_type t, const char *p, size_t n)
{
	struct spop_data d = { .type = t };
	d.v.str.ptr = p;
	d.v.str.len = n;
	return d;
}

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

/* ---- frames ---- */

struct capture {
	const char *name;
	const uint8_t *bytes;
	size_t len;
};

#define CAPTURE(a) { #a, (const uint8_t *)(a), sizeof(a) - 1 }
static const struct capture captures[] = {
	CAPTURE(hello_129), CAPTURE(notify_30), CAPTURE(notify_rate),
	CAPTURE(ack_29), CAPTURE(agent_hello_64), CAPTURE(disconnect_40),
};
#define NCAPTURES (sizeof(captures) / sizeof(captures[0]))

Test(frame, capture_lengths_add_up)
{
	for (size_t i = 0; i < NCAPTURES; i++) {
		uint32_t flen = 0;

		cr_assert_eq(spop_frame_peek_len(captures[i].bytes, captures[i].len, &flen), 0);
		cr_assert_eq((size_t)flen + 4, captures[i].len, "%s", captures[i].name);
	}
	cr_assert_eq(sizeof(hello_129) - 1, 4 + 129);
	cr_assert_eq(sizeof(notify_30) - 1, 4 + 30);
	cr_assert_eq(sizeof(disconnect_40) - 1, 4 + 40);
}

Test(frame, headers_of_captures)
{
	struct guard g;
	struct spop_frame f;

	guard_init(&g, 256);
	decode_whole(&g, BYTES(hello_129), &f);
	cr_assert_eq(f.type, SPOP_FRAME_HAPROXY_HELLO);
	cr_assert_eq(f.flags, SPOP_FL_FIN);
	cr_assert_eq(f.stream_id, 0);
	cr_assert_eq(f.frame_id, 0);
	cr_assert_eq(f.payload_len, 129 - 7);
	cr_assert_eq(f.payload, g.limit - (129 - 7));

	decode_whole(&g, BYTES(notify_30), &f);
	cr_assert_eq(f.type, SPOP_FRAME_NOTIFY);
	cr_assert_eq(f.flags, SPOP_FL_FIN);
	cr_assert_eq(f.stream_id, 20);
	cr_assert_eq(f.frame_id, 1);
	cr_assert_eq(f.payload_len, 30 - 7);

	decode_whole(&g, BYTES(ack_29), &f);
	cr_assert_eq(f.type, SPOP_FRAME_ACK);
	cr_assert_eq(f.stream_id, 20);
	cr_assert_eq(f.frame_id, 1);

	decode_whole(&g, BYTES(agent_hello_64), &f);
	cr_assert_eq(f.type, SPOP_FRAME_AGENT_HELLO);

	decode_whole(&g, BYTES(disconnect_40), &f);
	cr_assert_eq(f.type, SPOP_FRAME_HAPROXY_DISCONNECT);
	cr_assert_eq(f.payload_len, 40 - 7);
	guard_fini(&g);
}

Test(frame, every_prefix_needs_more)
{
	struct guard g;
	struct spop_frame f;
	enum spop_err err;

	guard_init(&g, 256);
	for (size_t i = 0; i < NCAPTURES; i++) {
		const struct capture *c = &captures[i];

		for (size_t k = 0; k < c->len; k++) {
			const uint8_t *p = guard_put(&g, c->bytes, k);

			err = SPOP_ERR_NONE;
			cr_assert_eq(spop_frame_decode(p, k, SPOP_DEFAULT_FRAME_SIZE, &f, &err), 0,
				     "%s prefix %zu", c->name, k);
			cr_assert_eq(err, SPOP_ERR_NONE);
		}
		decode_whole(&g, c->bytes, c->len, &f);
	}
	guard_fini(&g);
}

Test(frame, back_to_back)
{
	uint8_t buf[256];
	size_t n1 = sizeof(notify_30) - 1, n2 = sizeof(ack_29) - 1;
	struct spop_frame f;
	enum spop_err err;

	memcpy(buf, notify_30, n1);
	memcpy(buf + n1, ack_29, n2);
	cr_assert_eq(spop_frame_decode(buf, n1 + n2, 16380, &f, &err), (int)n1);
	cr_assert_eq(f.type, SPOP_FRAME_NOTIFY);
	cr_assert_eq(f.payload + f.payload_len, buf + n1);
	cr_assert_eq(spop_frame_decode(buf + n1, n2, 16380, &f, &err), (int)n2);
	cr_assert_eq(f.type, SPOP_FRAME_ACK);
}

Test(frame, too_big_before_the_body)
{
	struct guard g;
	struct spop_frame f;
	enum spop_err err;
	const uint8_t *p;

	guard_init(&g, 16);
	/* only the 4 length bytes are there */
	p = guard_put(&g, BYTES("\x00\x00\x01\x01"));
	err = SPOP_ERR_NONE;
	cr_assert_eq(spop_frame_decode(p, 4, 256, &f, &err), -1);
	cr_assert_eq(err, SPOP_ERR_TOO_BIG);
	p = guard_put(&g, BYTES("\xff\xff\xff\xff"));
	err = SPOP_ERR_NONE;
	cr_assert_eq(spop_frame_decode(p, 4, 16380, &f, &err), -1);
	cr_assert_eq(err, SPOP_ERR_TOO_BIG);
	/* even when the limit itself would allow it, 4 + LENGTH must fit an int */
	err = SPOP_ERR_NONE;
	cr_assert_eq(spop_frame_decode(p, 4, SIZE_MAX, &f, &err), -1);
	cr_assert_eq(err, SPOP_ERR_TOO_BIG);
	p = guard_put(&g, BYTES("\x7f\xff\xff\xfc"));
	cr_assert_eq(spop_frame_decode(p, 4, SIZE_MAX, &f, &err), -1);
	/* INT_MAX - 4 is still allowed: need more */
	p = guard_put(&g, BYTES("\x7f\xff\xff\xfb"));
	cr_assert_eq(spop_frame_decode(p, 4, SIZE_MAX, &f, &err), 0);
	/* fewer than 4 bytes: need more, whatever they are */
	p = guard_put(&g, BYTES("\xff\xff\xff"));
	cr_assert_eq(spop_frame_decode(p, 3, 256, &f, &err), 0);
	guard_fini(&g);
}

Test(frame, too_short_lengths)
{
	struct guard g;
	struct spop_frame f;
	enum spop_err err;
	uint8_t buf[4 + 8] = { 0 };

	guard_init(&g, 64);
	for (uint8_t l = 0; l < SPOP_MIN_FRAME_LEN; l++) {
		buf[3] = l;
		/* with the length alone, and with the whole (short) body */
		for (size_t n = 4; n <= 4 + (size_t)l; n += l ? l : 1) {
			const uint8_t *p = guard_put(&g, buf, n);

			err = SPOP_ERR_NONE;
			cr_assert_eq(spop_frame_decode(p, n, 16380, &f, &err), -1, "length %u", l);
			cr_assert_eq(err, SPOP_ERR_INVALID, "length %u", l);
		}
	}
	/* 7 is the smallest frame: type, flags, two one-byte ids */
	buf[3] = 7;
	cr_assert_eq(spop_frame_decode(guard_put(&g, buf, 11), 11, 16380, &f, &err), 11);
	cr_assert_eq(f.payload_len, 0);
	guard_fini(&g);
}

Test(frame, max_size_boundary)
{
	static uint8_t buf[4 + 16381];
	struct guard g;
	struct spop_frame f;
	enum spop_err err;
	const uint8_t *p;

	memset(buf, 0, sizeof(buf));
	buf[4] = SPOP_FRAME_NOTIFY;
	buf[8] = 1;   /* FIN */
	/* LENGTH == max: accepted */
	buf[2] = 16380 >> 8;
	buf[3] = 16380 & 0xff;
	guard_init(&g, sizeof(buf));
	p = guard_put(&g, buf, 4 + 16380);
	cr_assert_eq(spop_frame_decode(p, 4 + 16380, 16380, &f, &err), 4 + 16380);
	cr_assert_eq(f.payload_len, 16380 - 7);
	/* LENGTH == max + 1: refused */
	buf[2] = 16381 >> 8;
	buf[3] = 16381 & 0xff;
	p = guard_put(&g, buf, 4 + 16381);
	err = SPOP_ERR_NONE;
	cr_assert_eq(spop_frame_decode(p, 4 + 16381, 16380, &f, &err), -1);
	cr_assert_eq(err, SPOP_ERR_TOO_BIG);
	/* the minimum max-frame-size, 256 */
	buf[2] = 1;
	buf[3] = 0;
	p = guard_put(&g, buf, 4 + 256);
	cr_assert_eq(spop_frame_decode(p, 4 + 256, 256, &f, &err), 4 + 256);
	guard_fini(&g);
}

Test(frame, ids_must_stay_inside_the_frame)
{
	struct guard g;
	struct spop_frame f;
	enum spop_err err;
	const uint8_t *p;

	guard_init(&g, 64);
	/* LENGTH 7 but the stream-id takes 2 bytes: the frame-id would be the
	 * byte after the frame, which is there but does not count */
	p = guard_put(&g, BYTES("\x00\x00\x00\x07" "\x03" "\x00\x00\x00\x01" "\xfc\x03" "\x01" "\x00"));
	err = SPOP_ERR_NONE;
	cr_assert_eq(spop_frame_decode(p, 13, 16380, &f, &err), -1);
	cr_assert_eq(err, SPOP_ERR_INVALID);
	/* the stream-id itself runs past the frame */
	p = guard_put(&g, BYTES("\x00\x00\x00\x07" "\x03" "\x00\x00\x00\x01" "\xff" "\xff" "\x00\x00"));
	err = SPOP_ERR_NONE;
	cr_assert_eq(spop_frame_decode(p, 13, 16380, &f, &err), -1);
	cr_assert_eq(err, SPOP_ERR_INVALID);
	/* a stream-id of 11 bytes */
	p = guard_put(&g, BYTES("\x00\x00\x00\x11" "\x03" "\x00\x00\x00\x01"
				"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01" "\x01"));
	err = SPOP_ERR_NONE;
	cr_assert_eq(spop_frame_decode(p, 21, 16380, &f, &err), -1);
	cr_assert_eq(err, SPOP_ERR_INVALID);
	/* the largest ids fit */
	p = guard_put(&g, BYTES("\x00\x00\x00\x19" "\x03" "\x00\x00\x00\x03"
				"\xff\xf0\xfe\xfe\xfe\xfe\xfe\xfe\xfe\x0e"
				"\xff\xf0\xfe\xfe\xfe\xfe\xfe\xfe\xfe\x0e"));
	cr_assert_eq(spop_frame_decode(p, 29, 16380, &f, &err), 29);
	cr_assert_eq(f.stream_id, UINT64_MAX);
	cr_assert_eq(f.frame_id, UINT64_MAX);
	cr_assert_eq(f.flags, SPOP_FL_FIN | SPOP_FL_ABORT);
	cr_assert_eq(f.payload_len, 0);
	guard_fini(&g);
}

Test(frame, flags_are_big_endian_and_type_unchecked)
{
	struct spop_frame f;
	enum spop_err err;

	cr_assert_eq(spop_frame_decode(BYTES("\x00\x00\x00\x07" "\x2a" "\x80\x00\x00\x02" "\x00\x00"),
				       256, &f, &err), 11);
	cr_assert_eq((int)f.type, 42);
	cr_assert_eq(f.flags, 0x80000002u);
}

Test(frame, peek_len)
{
	uint32_t l = 0;

	cr_assert_eq(spop_frame_peek_len(BYTES("\x00\x00\x00"), &l), -1);
	cr_assert_eq(spop_frame_peek_len(BYTES("\x01\x02\x03\x04"), &l), 0);
	cr_assert_eq(l, 0x01020304u);
}

/* ---- payload cursors ---- */

/* One step of a list cursor; the message step also walks the arguments. */
typedef int (*step_fn)(struct spop_cursor *c);

static int step_msg(struct spop_cursor *c)
{
	struct spop_msg m;
	struct spop_cursor a;
	struct spop_kv kv;
	unsigned n = 0;
	int r = spop_msg_next(c, &m);

	if (r <= 0)
		return r;
	spop_args_init(&a, &m);
	while ((r = spop_args_next(&a, &kv)) > 0)
		n++;
	cr_assert_eq(r, 0, "arguments of a validated message cannot fail");
	cr_assert_eq(n, m.nargs);
	cr_assert_eq(a.p, m.args + m.args_len, "args_len is exact");
	return 1;
}

static int step_kv(struct spop_cursor *c)
{
	struct spop_kv kv;

	return spop_kv_next(c, &kv);
}

static int step_action(struct spop_cursor *c)
{
	enum spop_action_type t;
	enum spop_scope s;
	struct spop_str name;
	struct spop_data v;

	return spop_action_next(c, &t, &s, &name, &v);
}

/* Runs `step` over every prefix of a (valid, complete) payload, placed
 * before the guard page: a prefix ending on an item boundary is a shorter
 * valid list; any other is -1 / SPOP_ERR_INVALID after the items it holds. */
static void check_payload_prefixes(const char *what, const uint8_t *payload, size_t len,
				   step_fn step)
{
	size_t bounds[300], nb = 0, k, i, expect;
	struct spop_cursor c;
	struct guard g;
	int r;

	spop_cursor_init(&c, payload, len);
	bounds[nb++] = 0;
	while ((r = step(&c)) > 0) {
		cr_assert(nb < 300);
		bounds[nb++] = (size_t)(c.p - payload);
	}
	cr_assert_eq(r, 0, "%s: whole payload", what);
	cr_assert_eq(bounds[nb - 1], len, "%s: whole payload consumed", what);

	guard_init(&g, len);
	for (k = 0; k <= len; k++) {
		const uint8_t *p = guard_put(&g, payload, k);
		bool on_bound = false;
		unsigned n = 0;

		for (i = 0, expect = 0; i < nb; i++) {
			if (bounds[i] == k)
				on_bound = true;
			if (bounds[i] > 0 && bounds[i] <= k)
				expect++;
		}
		spop_cursor_init(&c, p, k);
		while ((r = step(&c)) > 0)
			n++;
		cr_assert_eq(n, expect, "%s prefix %zu: %u items", what, k, n);
		if (on_bound) {
			cr_assert_eq(r, 0, "%s prefix %zu", what, k);
		} else {
			cr_assert_eq(r, -1, "%s prefix %zu", what, k);
			cr_assert_eq(c.err, SPOP_ERR_INVALID);
		}
	}
	guard_fini(&g);
}

Test(cursor, notify_capture)
{
	struct guard g;
	struct spop_frame f;
	struct spop_cursor c, a;
	struct spop_msg m;
	struct spop_kv kv;

	guard_init(&g, 64);
	decode_whole(&g, BYTES(notify_30), &f);
	spop_cursor_init(&c, f.payload, f.payload_len);
	cr_assert_eq(spop_msg_next(&c, &m), 1);
	cr_assert(str_eq(m.name, "check-client-ip"));
	cr_assert_eq(m.nargs, 1);
	cr_assert_eq(m.args_len, 6);
	spop_args_init(&a, &m);
	cr_assert_eq(spop_args_next(&a, &kv), 1);
	cr_assert_eq(kv.name.len, 0, "unnamed argument");
	cr_assert_eq(kv.value.type, SPOP_DATA_IPV4);
	cr_assert_arr_eq(kv.value.v.ipv4, "\x7f\x00\x00\x01", 4);
	cr_assert_eq(spop_args_next(&a, &kv), 0);
	cr_assert_eq(spop_msg_next(&c, &m), 0);
	cr_assert_eq(spop_msg_next(&c, &m), 0, "the end stays the end");
	check_payload_prefixes("notify_30", f.payload, f.payload_len, step_msg);
	guard_fini(&g);
}

Test(cursor, notify_constructed)
{
	struct guard g;
	struct spop_frame f;
	struct spop_cursor c, a;
	struct spop_msg m;
	struct spop_kv kv;

	guard_init(&g, 64);
	decode_whole(&g, BYTES(notify_rate), &f);
	spop_cursor_init(&c, f.payload, f.payload_len);
	cr_assert_eq(spop_msg_next(&c, &m), 1);
	cr_assert(str_eq(m.name, "check-rate"));
	cr_assert_eq(m.nargs, 2);
	spop_args_init(&a, &m);
	cr_assert_eq(spop_args_next(&a, &kv), 1);
	cr_assert(str_eq(kv.name, "key"));
	cr_assert_eq(kv.value.type, SPOP_DATA_STRING);
	cr_assert(str_eq(kv.value.v.str, "abc"));
	cr_assert_eq(spop_args_next(&a, &kv), 1);
	cr_assert(str_eq(kv.name, "ip"));
	cr_assert_eq(kv.value.type, SPOP_DATA_IPV4);
	cr_assert_arr_eq(kv.value.v.ipv4, "\xc0\x00\x02\x01", 4);
	cr_assert_eq(spop_args_next(&a, &kv), 0);
	cr_assert_eq(spop_msg_next(&c, &m), 0);
	check_payload_prefixes("notify_rate", f.payload, f.payload_len, step_msg);
	guard_fini(&g);
}

Test(cursor, ack_capture)
{
	struct guard g;
	struct spop_frame f;
	struct spop_cursor c;
	enum spop_action_type t;
	enum spop_scope s;
	struct spop_str name;
	struct spop_data v;

	guard_init(&g, 64);
	decode_whole(&g, BYTES(ack_29), &f);
	spop_cursor_init(&c, f.payload, f.payload_len);
	cr_assert_eq(spop_action_next(&c, &t, &s, &name, &v), 1);
	cr_assert_eq(t, SPOP_ACT_SET_VAR);
	cr_assert_eq(s, SPOP_SCOPE_TXN);
	cr_assert(str_eq(name, "rate"));
	cr_assert_eq(v.type, SPOP_DATA_INT64);
	cr_assert_eq(v.v.i, 150);
	cr_assert_eq(spop_action_next(&c, &t, &s, &name, &v), 1);
	cr_assert_eq(t, SPOP_ACT_SET_VAR);
	cr_assert(str_eq(name, "blocked"));
	cr_assert_eq(v.type, SPOP_DATA_BOOL);
	cr_assert(v.v.b);
	cr_assert_eq(spop_action_next(&c, &t, &s, &name, &v), 0);
	check_payload_prefixes("ack_29", f.payload, f.payload_len, step_action);
	guard_fini(&g);
}

Test(cursor, hello_and_disconnect_kv_lists)
{
	struct guard g;
	struct spop_frame f;

	guard_init(&g, 256);
	decode_whole(&g, BYTES(hello_129), &f);
	check_payload_prefixes("hello_129", f.payload, f.payload_len, step_kv);
	decode_whole(&g, BYTES(agent_hello_64), &f);
	check_payload_prefixes("agent_hello_64", f.payload, f.payload_len, step_kv);
	decode_whole(&g, BYTES(disconnect_40), &f);
	check_payload_prefixes("disconnect_40", f.payload, f.payload_len, step_kv);
	guard_fini(&g);
}

Test(cursor, empty_payloads)
{
	struct spop_cursor c;
	struct spop_msg m;
	struct spop_kv kv;

	spop_cursor_init(&c, NULL, 0);
	cr_assert_eq(spop_msg_next(&c, &m), 0);
	cr_assert_eq(spop_kv_next(&c, &kv), 0);
	cr_assert_eq(step_action(&c), 0);
	cr_assert_eq(spop_args_next(&c, &kv), 0);
}

Test(cursor, many_messages_all_types_and_255_args)
{
	static uint8_t buf[16384];
	struct spop_writer w;
	struct spop_cursor c, a;
	struct spop_msg m;
	struct spop_kv kv;
	char name[8];
	struct spop_data vals[SPOP_DATA_TYPE_COUNT];
	unsigned i;

	vals[0] = (struct spop_data){ .type = SPOP_DATA_NULL };
	vals[1] = (struct spop_data){ .type = SPOP_DATA_BOOL, .v.b = true };
	vals[2] = mk_int(SPOP_DATA_INT32, -7);
	vals[3] = mk_uint(SPOP_DATA_UINT32, 4000000000u);
	vals[4] = mk_int(SPOP_DATA_INT64, INT64_MIN);
	vals[5] = mk_uint(SPOP_DATA_UINT64, UINT64_MAX);
	vals[6] = (struct spop_data){ .type = SPOP_DATA_IPV4 };
	memcpy(vals[6].v.ipv4, "\x0a\x00\x00\x01", 4);
	vals[7] = (struct spop_data){ .type = SPOP_DATA_IPV6 };
	memset(vals[7].v.ipv6, 0xfe, 16);
	vals[8] = mk_str(SPOP_DATA_STRING, "héllo", strlen("héllo"));
	vals[9] = mk_str(SPOP_DATA_BINARY, "\x00\x00", 2);

	spop_writer_init(&w, buf, sizeof(buf));
	/* message "a" with 255 arguments cycling through every type */
	spop_put_msg(&w, "a", 1, 255);
	for (i = 0; i < 255; i++) {
		int n = snprintf(name, sizeof(name), "%u", i);

		spop_put_str(&w, name, (size_t)n);
		spop_put_data(&w, &vals[i % SPOP_DATA_TYPE_COUNT]);
	}
	/* message with no argument, then one with an empty name */
	spop_put_msg(&w, "empty", 5, 0);
	spop_put_msg(&w, "", 0, 1);
	spop_put_str(&w, "", 0);
	spop_put_data(&w, &vals[8]);
	cr_assert(!w.overflow);

	spop_cursor_init(&c, buf, w.len);
	cr_assert_eq(spop_msg_next(&c, &m), 1);
	cr_assert(str_eq(m.name, "a"));
	cr_assert_eq(m.nargs, 255);
	spop_args_init(&a, &m);
	for (i = 0; i < 255; i++) {
		cr_assert_eq(spop_args_next(&a, &kv), 1, "arg %u", i);
		snprintf(name, sizeof(name), "%u", i);
		cr_assert(str_eq(kv.name, name));
		cr_assert(data_eq(&kv.value, &vals[i % SPOP_DATA_TYPE_COUNT]), "arg %u", i);
	}
	cr_assert_eq(spop_args_next(&a, &kv), 0);
	cr_assert_eq(spop_msg_next(&c, &m), 1);
	cr_assert(str_eq(m.name, "empty"));
	cr_assert_eq(m.nargs, 0);
	cr_assert_eq(m.args_len, 0);
	cr_assert_eq(spop_msg_next(&c, &m), 1);
	cr_assert_eq(m.name.len, 0);
	cr_assert_eq(m.nargs, 1);
	cr_assert_eq(spop_msg_next(&c, &m), 0);
	check_payload_prefixes("255 args", buf, w.len, step_msg);
}

Test(cursor, msg_validates_every_argument)
{
	struct spop_cursor c;
	struct spop_msg m;

	/* second argument has a reserved type */
	spop_cursor_init(&c, BYTES("\x01" "m" "\x02" "\x00" "\x00" "\x00" "\x0c"));
	cr_assert_eq(spop_msg_next(&c, &m), -1);
	cr_assert_eq(c.err, SPOP_ERR_INVALID);
	/* the cursor did not move past the failing message */
	cr_assert_eq(c.p[0], 0x01);
	/* NB-ARGS announces one more argument than there is */
	spop_cursor_init(&c, BYTES("\x01" "m" "\x02" "\x00" "\x00"));
	cr_assert_eq(spop_msg_next(&c, &m), -1);
	/* the name runs past the end */
	spop_cursor_init(&c, BYTES("\x05" "m"));
	cr_assert_eq(spop_msg_next(&c, &m), -1);
	/* NB-ARGS is missing */
	spop_cursor_init(&c, BYTES("\x01" "m"));
	cr_assert_eq(spop_msg_next(&c, &m), -1);
	cr_assert_eq(c.err, SPOP_ERR_INVALID);
}

Test(cursor, kv_errors)
{
	struct spop_cursor c;
	struct spop_kv kv;

	/* a name without value */
	spop_cursor_init(&c, BYTES("\x01" "k"));
	cr_assert_eq(spop_kv_next(&c, &kv), -1);
	cr_assert_eq(c.err, SPOP_ERR_INVALID);
	/* a string value running past the payload */
	spop_cursor_init(&c, BYTES("\x01" "k" "\x08\x04" "abc"));
	cr_assert_eq(spop_kv_next(&c, &kv), -1);
	/* a truncated varint name length */
	spop_cursor_init(&c, BYTES("\xfc"));
	cr_assert_eq(spop_kv_next(&c, &kv), -1);
	/* a name length of 2^64 - 1 */
	spop_cursor_init(&c, BYTES("\xff\xf0\xfe\xfe\xfe\xfe\xfe\xfe\xfe\x0e" "\x00"));
	cr_assert_eq(spop_kv_next(&c, &kv), -1);
}

Test(cursor, actions)
{
	struct spop_cursor c;
	enum spop_action_type t;
	enum spop_scope s;
	struct spop_str name;
	struct spop_data v;

	/* unset-var sess.x: value reported as NULL */
	spop_cursor_init(&c, BYTES("\x02\x02\x01" "\x01" "x"));
	v.type = SPOP_DATA_STRING;
	cr_assert_eq(spop_action_next(&c, &t, &s, &name, &v), 1);
	cr_assert_eq(t, SPOP_ACT_UNSET_VAR);
	cr_assert_eq(s, SPOP_SCOPE_SESS);
	cr_assert(str_eq(name, "x"));
	cr_assert_eq(v.type, SPOP_DATA_NULL);
	cr_assert_eq(spop_action_next(&c, &t, &s, &name, &v), 0);
	/* set-var with a NULL value (HAProxy unsets the variable) */
	spop_cursor_init(&c, BYTES("\x01\x03\x04" "\x01" "x" "\x00"));
	cr_assert_eq(spop_action_next(&c, &t, &s, &name, &v), 1);
	cr_assert_eq(s, SPOP_SCOPE_RES);
	cr_assert_eq(v.type, SPOP_DATA_NULL);
	/* unknown action type */
	spop_cursor_init(&c, BYTES("\x03\x00"));
	cr_assert_eq(spop_action_next(&c, &t, &s, &name, &v), -1);
	cr_assert_eq(c.err, SPOP_ERR_INVALID);
	/* wrong NB-ARGS */
	spop_cursor_init(&c, BYTES("\x01\x02\x02" "\x01" "x" "\x00"));
	cr_assert_eq(spop_action_next(&c, &t, &s, &name, &v), -1);
	spop_cursor_init(&c, BYTES("\x02\x03\x02" "\x01" "x"));
	cr_assert_eq(spop_action_next(&c, &t, &s, &name, &v), -1);
	/* scope out of range */
	spop_cursor_init(&c, BYTES("\x02\x02\x05" "\x01" "x"));
	cr_assert_eq(spop_action_next(&c, &t, &s, &name, &v), -1);
	/* set-var without its value */
	spop_cursor_init(&c, BYTES("\x01\x03\x02" "\x01" "x"));
	cr_assert_eq(spop_action_next(&c, &t, &s, &name, &v), -1);
	/* only the action type */
	spop_cursor_init(&c, BYTES("\x01"));
	cr_assert_eq(spop_action_next(&c, &t, &s, &name, &v), -1);
	cr_assert_eq(c.err, SPOP_ERR_INVALID);
}

/* ---- HELLO ---- */

Test(hello, capture)
{
	struct guard g;
	struct spop_frame f;
	struct spop_hello h;
	enum spop_err err = SPOP_ERR_NONE;

	guard_init(&g, 256);
	decode_whole(&g, BYTES(hello_129), &f);
	cr_assert_eq(spop_hello_decode(f.payload, f.payload_len, &h, &err), 0, "err %d", err);
	cr_assert(h.has_versions && h.has_max_frame_size && h.has_capabilities);
	cr_assert(str_eq(h.supported_versions, "2.0"));
	cr_assert_eq(h.max_frame_size, 16380);
	cr_assert(str_eq(h.capabilities, "pipelining,async"));
	cr_assert(str_eq(h.engine_id, UUID));
	cr_assert(!h.healthcheck);
	cr_assert(spop_version_supported(h.supported_versions, "2.0"));
	cr_assert(spop_has_capability(h.capabilities, "pipelining"));
	cr_assert(spop_has_capability(h.capabilities, "async"));
	cr_assert(!spop_has_capability(h.capabilities, "fragmentation"));
	guard_fini(&g);
}

Test(hello, agent_hello_capture)
{
	struct guard g;
	struct spop_frame f;
	struct spop_hello h;
	enum spop_err err = SPOP_ERR_NONE;

	guard_init(&g, 256);
	decode_whole(&g, BYTES(agent_hello_64), &f);
	cr_assert_eq(spop_hello_decode(f.payload, f.payload_len, &h, &err), 0, "err %d", err);
	cr_assert(str_eq(h.supported_versions, "2.0"), "\"version\" fills supported_versions");
	cr_assert_eq(h.max_frame_size, 16380);
	cr_assert(str_eq(h.capabilities, "pipelining"));
	cr_assert_eq(h.engine_id.len, 0);
	guard_fini(&g);
}

Test(hello, every_prefix)
{
	struct guard g;
	struct spop_frame f;
	struct spop_hello h;
	enum spop_err err;
	/* item boundaries of the hello_129 payload */
	static const size_t bounds[] = { 0, 24, 43, 74, 122 };

	uint8_t payload[122];

	guard_init(&g, 256);
	decode_whole(&g, BYTES(hello_129), &f);
	cr_assert_eq(f.payload_len, sizeof(payload));
	memcpy(payload, f.payload, sizeof(payload));   /* the guard area gets reused */
	for (size_t k = 0; k <= sizeof(payload); k++) {
		const uint8_t *p = guard_put(&g, payload, k);
		bool on_bound = false;

		for (size_t i = 0; i < sizeof(bounds) / sizeof(bounds[0]); i++)
			on_bound |= bounds[i] == k;
		err = SPOP_ERR_NONE;
		int r = spop_hello_decode(p, k, &h, &err);
		if (!on_bound) {
			cr_assert_eq(r, -1, "prefix %zu", k);
			cr_assert_eq(err, SPOP_ERR_INVALID, "prefix %zu", k);
		} else if (k < 24) {
			cr_assert_eq(err, SPOP_ERR_NO_VSN);
		} else if (k < 43) {
			cr_assert_eq(err, SPOP_ERR_NO_FRAME_SIZE);
		} else if (k < 74) {
			cr_assert_eq(err, SPOP_ERR_NO_CAP);
		} else {
			cr_assert_eq(r, 0, "prefix %zu", k);
		}
	}
	guard_fini(&g);
}

/* Builds a HELLO payload from (name, value) items. */
struct item {
	const char *name;
	struct spop_data v;
};

static int hello_of(const struct item *items, size_t n, struct spop_hello *h,
		    enum spop_err *err)
{
	static uint8_t buf[1024];
	struct spop_writer w;

	spop_writer_init(&w, buf, sizeof(buf));
	for (size_t i = 0; i < n; i++) {
		spop_put_str(&w, items[i].name, strlen(items[i].name));
		spop_put_data(&w, &items[i].v);
	}
	cr_assert(!w.overflow);
	*err = SPOP_ERR_NONE;
	return spop_hello_decode(buf, w.len, h, err);
}

#define VSTR(s) mk_str(SPOP_DATA_STRING, s, strlen(s))

Test(hello, mandatory_items_in_order)
{
	struct spop_hello h;
	enum spop_err err;
	struct item it[4] = {
		{ "supported-versions", VSTR("2.0") },
		{ "max-frame-size", mk_uint(SPOP_DATA_UINT32, 16380) },
		{ "capabilities", VSTR("") },
		{ "healthcheck", { .type = SPOP_DATA_BOOL, .v.b = true } },
	};

	cr_assert_eq(hello_of(it, 4, &h, &err), 0);
	cr_assert(h.healthcheck);
	cr_assert(h.has_capabilities);
	cr_assert_eq(h.capabilities.len, 0, "empty capabilities of a health check");
	cr_assert_eq(hello_of(it, 0, &h, &err), -1);
	cr_assert_eq(err, SPOP_ERR_NO_VSN);
	cr_assert_eq(hello_of(it + 1, 3, &h, &err), -1);
	cr_assert_eq(err, SPOP_ERR_NO_VSN, "version is reported first");
	cr_assert_eq(hello_of(it + 2, 2, &h, &err), -1);
	cr_assert_eq(err, SPOP_ERR_NO_VSN);
	it[1].name = "x";
	cr_assert_eq(hello_of(it, 4, &h, &err), -1);
	cr_assert_eq(err, SPOP_ERR_NO_FRAME_SIZE);
	it[1].name = "max-frame-size";
	it[2].name = "y";
	cr_assert_eq(hello_of(it, 4, &h, &err), -1);
	cr_assert_eq(err, SPOP_ERR_NO_CAP);
}

Test(hello, names_match_exactly)
{
	struct spop_hello h;
	enum spop_err err;
	struct item it[] = {
		{ "supported-versions-x", VSTR("9.9") },
		{ "supported-versions", VSTR("2.0") },
		{ "max-frame-sizes", mk_uint(SPOP_DATA_UINT32, 1) },
		{ "max-frame", mk_uint(SPOP_DATA_UINT32, 2) },
		{ "max-frame-size", mk_uint(SPOP_DATA_UINT32, 4096) },
		{ "capabilitiesX", VSTR("bad") },
		{ "capabilities", VSTR("pipelining") },
		{ "Capabilities", VSTR("bad2") },
		{ "versions", VSTR("bad3") },
		{ "healthcheck2", { .type = SPOP_DATA_BOOL, .v.b = true } },
		{ "unknown", mk_uint(SPOP_DATA_UINT64, 7) },
	};

	cr_assert_eq(hello_of(it, sizeof(it) / sizeof(it[0]), &h, &err), 0);
	cr_assert(str_eq(h.supported_versions, "2.0"));
	cr_assert_eq(h.max_frame_size, 4096);
	cr_assert(str_eq(h.capabilities, "pipelining"));
	cr_assert(!h.healthcheck);

	/* a prefix of the name alone is not the item */
	struct item only_prefix[] = {
		{ "supported-versions", VSTR("2.0") },
		{ "max-frame", mk_uint(SPOP_DATA_UINT32, 4096) },
		{ "capabilities", VSTR("") },
	};
	cr_assert_eq(hello_of(only_prefix, 3, &h, &err), -1);
	cr_assert_eq(err, SPOP_ERR_NO_FRAME_SIZE);
}

Test(hello, item_types)
{
	struct spop_hello h;
	enum spop_err err;
	struct item it[] = {
		{ "supported-versions", VSTR("2.0") },
		{ "max-frame-size", mk_uint(SPOP_DATA_UINT32, 16380) },
		{ "capabilities", VSTR("pipelining") },
	};
	static const enum spop_data_type int_types[] = {
		SPOP_DATA_INT32, SPOP_DATA_UINT32, SPOP_DATA_INT64, SPOP_DATA_UINT64,
	};

	/* any integer type for max-frame-size */
	for (size_t i = 0; i < 4; i++) {
		it[1].v = mk_uint(int_types[i], 9000);
		cr_assert_eq(hello_of(it, 3, &h, &err), 0, "type %d", int_types[i]);
		cr_assert_eq(h.max_frame_size, 9000);
	}
	/* a negative one is as good as missing */
	it[1].v = mk_int(SPOP_DATA_INT32, -1);
	cr_assert_eq(hello_of(it, 3, &h, &err), -1);
	cr_assert_eq(err, SPOP_ERR_NO_FRAME_SIZE);
	it[1].v = mk_int(SPOP_DATA_INT64, INT64_MIN);
	cr_assert_eq(hello_of(it, 3, &h, &err), -1);
	cr_assert_eq(err, SPOP_ERR_NO_FRAME_SIZE);
	/* a string is not a size */
	it[1].v = VSTR("16380");
	cr_assert_eq(hello_of(it, 3, &h, &err), -1);
	cr_assert_eq(err, SPOP_ERR_NO_FRAME_SIZE);
	it[1].v = mk_uint(SPOP_DATA_UINT32, 16380);
	/* versions and capabilities must be STRING */
	it[0].v = mk_str(SPOP_DATA_BINARY, "2.0", 3);
	cr_assert_eq(hello_of(it, 3, &h, &err), -1);
	cr_assert_eq(err, SPOP_ERR_NO_VSN);
	it[0].v = VSTR("2.0");
	it[2].v = (struct spop_data){ .type = SPOP_DATA_NULL };
	cr_assert_eq(hello_of(it, 3, &h, &err), -1);
	cr_assert_eq(err, SPOP_ERR_NO_CAP);
}

Test(hello, malformed)
{
	struct spop_hello h;
	enum spop_err err = SPOP_ERR_NONE;

	/* a well-formed mandatory item then garbage: INVALID wins */
	cr_assert_eq(spop_hello_decode(BYTES("\x07" "version" "\x08\x03" "2.0" "\x01" "x" "\x0d"),
				       &h, &err), -1);
	cr_assert_eq(err, SPOP_ERR_INVALID);
}

/* ---- lists ---- */

Test(lists, version_supported)
{
	cr_assert(spop_version_supported(S("2.0"), "2.0"));
	cr_assert(spop_version_supported(S(" 1.0 , 2.0"), "2.0"));
	cr_assert(spop_version_supported(S("1.0,\t2.0\t"), "2.0"));
	cr_assert(spop_version_supported(S("2.00"), "2.0"));
	cr_assert(spop_version_supported(S("2.0"), "2.000"));
	cr_assert(spop_version_supported(S("02.0"), "2.0"));
	cr_assert(!spop_version_supported(S("1.0"), "2.0"));
	cr_assert(!spop_version_supported(S("2.1"), "2.0"));
	cr_assert(!spop_version_supported(S("20"), "2.0"));
	cr_assert(!spop_version_supported(S("2.0a"), "2.0"));
	cr_assert(!spop_version_supported(S("2 .0"), "2.0"));
	cr_assert(!spop_version_supported(S(".0"), "0.0"));
	cr_assert(!spop_version_supported(S("2."), "2.0"));
	cr_assert(!spop_version_supported(S("1.0 2.0"), "2.0"));
	cr_assert(!spop_version_supported(S(""), "2.0"));
	cr_assert(!spop_version_supported(S(","), "2.0"));
	cr_assert(!spop_version_supported((struct spop_str){ NULL, 0 }, "2.0"));
	cr_assert(!spop_version_supported(S("2.0"), "x"));
	cr_assert(!spop_version_supported(S("2.1000"), "3.0"), "minor over 999 is invalid");
	cr_assert(!spop_version_supported(S("99999999999999999999.0"), "2.0"));
	/* a list that is not NUL-terminated is read up to its length only */
	struct spop_str cut = { "1.0,2.0", 3 };
	cr_assert(!spop_version_supported(cut, "2.0"));
	cr_assert(spop_version_supported(cut, "1.0"));
}

Test(lists, has_capability)
{
	cr_assert(spop_has_capability(S("pipelining"), "pipelining"));
	cr_assert(spop_has_capability(S("pipelining,async"), "async"));
	cr_assert(spop_has_capability(S(" pipelining , async "), "pipelining"));
	cr_assert(spop_has_capability(S("\tasync\t,pipelining"), "async"));
	cr_assert(spop_has_capability(S(",,pipelining,"), "pipelining"));
	cr_assert(!spop_has_capability(S("pipelining2"), "pipelining"));
	cr_assert(!spop_has_capability(S("pipe"), "pipelining"));
	cr_assert(!spop_has_capability(S("xpipelining"), "pipelining"));
	cr_assert(!spop_has_capability(S("pipe lining"), "pipelining"));
	cr_assert(!spop_has_capability(S("Pipelining"), "pipelining"));
	cr_assert(!spop_has_capability(S(""), "pipelining"));
	cr_assert(!spop_has_capability((struct spop_str){ NULL, 0 }, "pipelining"));
	cr_assert(!spop_has_capability(S("a,,b"), ""));
	struct spop_str cut = { "async,pipelining", 9 };
	cr_assert(!spop_has_capability(cut, "pipelining"));
	cr_assert(spop_has_capability(cut, "async"));
}

/* ---- DISCONNECT ---- */

Test(disconnect, capture)
{
	struct guard g;
	struct spop_frame f;
	struct spop_disconnect d;
	enum spop_err err = SPOP_ERR_NONE;

	guard_init(&g, 64);
	decode_whole(&g, BYTES(disconnect_40), &f);
	cr_assert_eq(spop_disconnect_decode(f.payload, f.payload_len, &d, &err), 0);
	cr_assert(d.has_status_code);
	cr_assert_eq(d.status_code, SPOP_ERR_IO);
	cr_assert(str_eq(d.message, "I/O error"));
	/* every non-boundary prefix is malformed */
	uint8_t payload[33];
	cr_assert_eq(f.payload_len, sizeof(payload));
	memcpy(payload, f.payload, sizeof(payload));   /* the guard area gets reused */
	for (size_t k = 0; k < sizeof(payload); k++) {
		const uint8_t *p = guard_put(&g, payload, k);
		int r = spop_disconnect_decode(p, k, &d, &err);

		if (k == 0 || k == 14)
			cr_assert_eq(r, 0, "prefix %zu", k);
		else
			cr_assert_eq(r, -1, "prefix %zu", k);
	}
	guard_fini(&g);
}

Test(disconnect, missing_and_odd_items)
{
	struct spop_disconnect d;
	enum spop_err err = SPOP_ERR_NONE;

	cr_assert_eq(spop_disconnect_decode(BYTES("\x07" "message" "\x08\x02" "hi"), &d, &err), 0);
	cr_assert(!d.has_status_code);
	cr_assert(str_eq(d.message, "hi"));
	/* INT64 status accepted, out-of-range or negative ignored */
	cr_assert_eq(spop_disconnect_decode(BYTES("\x0b" "status-code" "\x04\x63"), &d, &err), 0);
	cr_assert(d.has_status_code);
	cr_assert_eq(d.status_code, 99);
	cr_assert_eq(spop_disconnect_decode(BYTES("\x0b" "status-code" "\x05"
						  "\xff\xf0\xfe\xfe\xfe\xfe\xfe\xfe\xfe\x0e"), &d, &err), 0);
	cr_assert(!d.has_status_code);
	cr_assert_eq(spop_disconnect_decode(BYTES("\x0b" "status-code" "\x02"
						  "\xff\xf0\xfe\xfe\xfe\xfe\xfe\xfe\xfe\x0e"), &d, &err), 0);
	cr_assert(!d.has_status_code);
	cr_assert_eq(spop_disconnect_decode(BYTES("\x0b" "status-code" "\x0c"), &d, &err), -1);
	cr_assert_eq(err, SPOP_ERR_INVALID);
	cr_assert_eq(spop_disconnect_decode(NULL, 0, &d, &err), 0);
}

/* ---- encoders ---- */

Test(encode, agent_hello_is_byte_exact)
{
	uint8_t buf[128];
	struct spop_writer w;
	struct spop_hello h;
	struct spop_frame f;
	enum spop_err err;

	spop_writer_init(&w, buf, sizeof(buf));
	cr_assert_eq(spop_encode_agent_hello(&w, 16380, "pipelining"), 0);
	cr_assert(!w.overflow);
	cr_assert_eq(w.len, sizeof(agent_hello_64) - 1);
	cr_assert_arr_eq(buf, agent_hello_64, w.len);
	cr_assert_eq(spop_frame_decode(buf, w.len, 16380, &f, &err), (int)w.len);
	cr_assert_eq(spop_hello_decode(f.payload, f.payload_len, &h, &err), 0);
	cr_assert_eq(h.max_frame_size, 16380);
}

Test(encode, haproxy_hello_is_byte_exact)
{
	uint8_t buf[256];
	struct spop_writer w;
	struct spop_hello h;
	struct spop_frame f;
	enum spop_err err;

	spop_writer_init(&w, buf, sizeof(buf));
	cr_assert_eq(spop_encode_haproxy_hello(&w, "2.0", 16380, "pipelining,async", false, UUID), 0);
	cr_assert_eq(w.len, sizeof(hello_129) - 1);
	cr_assert_arr_eq(buf, hello_129, w.len);

	/* a health-check HELLO decodes back */
	spop_writer_init(&w, buf, sizeof(buf));
	cr_assert_eq(spop_encode_haproxy_hello(&w, NULL, 256, NULL, true, NULL), 0);
	cr_assert_eq(spop_frame_decode(buf, w.len, 256, &f, &err), (int)w.len);
	cr_assert_eq(f.type, SPOP_FRAME_HAPROXY_HELLO);
	cr_assert_eq(f.flags, SPOP_FL_FIN);
	cr_assert_eq(spop_hello_decode(f.payload, f.payload_len, &h, &err), 0);
	cr_assert(h.healthcheck);
	cr_assert(str_eq(h.supported_versions, SPOP_VERSION));
	cr_assert_eq(h.max_frame_size, 256);
	cr_assert_eq(h.capabilities.len, 0);
	cr_assert_eq(h.engine_id.len, 0);
}

Test(encode, disconnects)
{
	uint8_t buf[512];
	struct spop_writer w;
	struct spop_frame f;
	struct spop_disconnect d;
	enum spop_err err;
	char longmsg[400];

	spop_writer_init(&w, buf, sizeof(buf));
	cr_assert_eq(spop_encode_haproxy_disconnect(&w, SPOP_ERR_IO, NULL), 0);
	cr_assert_eq(w.len, sizeof(disconnect_40) - 1);
	cr_assert_arr_eq(buf, disconnect_40, w.len);

	spop_writer_init(&w, buf, sizeof(buf));
	cr_assert_eq(spop_encode_agent_disconnect(&w, SPOP_ERR_BAD_VSN, "no 2.0 here"), 0);
	cr_assert_eq(spop_frame_decode(buf, w.len, 256, &f, &err), (int)w.len);
	cr_assert_eq(f.type, SPOP_FRAME_AGENT_DISCONNECT);
	cr_assert_eq(spop_disconnect_decode(f.payload, f.payload_len, &d, &err), 0);
	cr_assert_eq(d.status_code, SPOP_ERR_BAD_VSN);
	cr_assert(str_eq(d.message, "no 2.0 here"));

	/* a long message is cut so that the frame fits 256 bytes */
	memset(longmsg, 'm', sizeof(longmsg) - 1);
	longmsg[sizeof(longmsg) - 1] = '\0';
	spop_writer_init(&w, buf, sizeof(buf));
	cr_assert_eq(spop_encode_agent_disconnect(&w, SPOP_ERR_UNKNOWN, longmsg), 0);
	cr_assert_leq(w.len, 4 + SPOP_MIN_FRAME_SIZE);
	cr_assert_eq(spop_frame_decode(buf, w.len, SPOP_MIN_FRAME_SIZE, &f, &err), (int)w.len);
	cr_assert_eq(spop_disconnect_decode(f.payload, f.payload_len, &d, &err), 0);
	cr_assert_eq(d.status_code, 99);
	cr_assert_gt(d.message.len, 200);
	cr_assert_leq(d.message.len, 255);
}

Test(encode, notify_and_ack_are_byte_exact)
{
	uint8_t buf[128];
	struct spop_writer w;
	struct spop_data v;
	size_t start;

	spop_writer_init(&w, buf, sizeof(buf));
	start = spop_frame_begin(&w, SPOP_FRAME_NOTIFY, SPOP_FL_FIN, 20, 1);
	cr_assert_eq(start, 0);
	spop_put_msg(&w, "check-rate", 10, 2);
	spop_put_str(&w, "key", 3);
	v = VSTR("abc");
	spop_put_data(&w, &v);
	spop_put_str(&w, "ip", 2);
	v = (struct spop_data){ .type = SPOP_DATA_IPV4 };
	memcpy(v.v.ipv4, "\xc0\x00\x02\x01", 4);
	spop_put_data(&w, &v);
	cr_assert_eq(spop_frame_end(&w, start, 16380), 0);
	cr_assert_eq(w.len, sizeof(notify_rate) - 1);
	cr_assert_arr_eq(buf, notify_rate, w.len);

	spop_writer_init(&w, buf, sizeof(buf));
	start = spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FL_FIN, 20, 1);
	v = mk_int(SPOP_DATA_INT64, 150);
	spop_put_set_var(&w, SPOP_SCOPE_TXN, "rate", 4, &v);
	v = (struct spop_data){ .type = SPOP_DATA_BOOL, .v.b = true };
	spop_put_set_var(&w, SPOP_SCOPE_TXN, "blocked", 7, &v);
	cr_assert_eq(spop_frame_end(&w, start, 16380), 0);
	cr_assert_eq(w.len, sizeof(ack_29) - 1);
	cr_assert_arr_eq(buf, ack_29, w.len);

	/* the one-arg notify capture, and an unset-var */
	spop_writer_init(&w, buf, sizeof(buf));
	start = spop_frame_begin(&w, SPOP_FRAME_NOTIFY, SPOP_FL_FIN, 20, 1);
	spop_put_msg(&w, "check-client-ip", 15, 1);
	spop_put_str(&w, "", 0);
	v = (struct spop_data){ .type = SPOP_DATA_IPV4 };
	memcpy(v.v.ipv4, "\x7f\x00\x00\x01", 4);
	spop_put_data(&w, &v);
	cr_assert_eq(spop_frame_end(&w, start, 16380), 0);
	cr_assert_arr_eq(buf, notify_30, sizeof(notify_30) - 1);

	spop_writer_init(&w, buf, sizeof(buf));
	spop_put_unset_var(&w, SPOP_SCOPE_SESS, "x", 1);
	cr_assert_eq(w.len, 5);
	cr_assert_arr_eq(buf, "\x02\x02\x01\x01" "x", 5);
	spop_writer_init(&w, buf, sizeof(buf));
	spop_put_kv_bool(&w, "b", false);
	spop_put_kv_uint32(&w, "u", 300);
	cr_assert_arr_eq(buf, "\x01" "b" "\x01" "\x01" "u" "\x03\xfc\x03", 8);
}

Test(encode, tiny_capacity_overflows_and_rolls_back)
{
	uint8_t buf[256], ref[256];
	struct spop_writer w;
	size_t need, prior = sizeof(disconnect_40) - 1;

	spop_writer_init(&w, ref, sizeof(ref));
	cr_assert_eq(spop_encode_agent_hello(&w, 16380, "pipelining"), 0);
	need = w.len;

	for (size_t cap = 0; cap < need; cap++) {
		spop_writer_init(&w, cap ? buf : NULL, cap);
		cr_assert_eq(spop_encode_agent_hello(&w, 16380, "pipelining"), -1, "cap %zu", cap);
		cr_assert_eq(w.len, 0, "cap %zu: rolled back", cap);
		cr_assert(!w.overflow, "cap %zu: overflow cleared", cap);
	}
	spop_writer_init(&w, buf, need);
	cr_assert_eq(spop_encode_agent_hello(&w, 16380, "pipelining"), 0);
	cr_assert_eq(w.len, need);

	/* after a first frame, a second that does not fit leaves the first intact */
	for (size_t cap = prior; cap < prior + need; cap++) {
		spop_writer_init(&w, buf, cap);
		cr_assert_eq(spop_encode_haproxy_disconnect(&w, SPOP_ERR_IO, "I/O error"), 0);
		cr_assert_eq(spop_encode_agent_hello(&w, 16380, "pipelining"), -1, "cap %zu", cap);
		cr_assert_eq(w.len, prior);
		cr_assert(!w.overflow);
		cr_assert_arr_eq(buf, disconnect_40, prior);
		/* and something smaller may be written instead */
		if (cap - prior >= 4 + 7) {
			size_t s = spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FL_FIN, 1, 1);
			cr_assert_eq(spop_frame_end(&w, s, 256), 0);
			cr_assert_eq(w.len, prior + 11);
		}
	}
}

Test(encode, overflow_sticks)
{
	uint8_t buf[10];
	struct spop_writer w;

	memset(buf, 0, sizeof(buf));
	spop_writer_init(&w, buf, sizeof(buf));
	spop_put_bytes(&w, "12345678", 8);
	cr_assert(!w.overflow);
	spop_put_bytes(&w, "abcde", 5);
	cr_assert(w.overflow);
	cr_assert_eq(w.len, 8);
	spop_put_u8(&w, 'z');      /* would fit, but the writer has overflowed */
	spop_put_varint(&w, 1);
	spop_put_str(&w, "", 0);
	cr_assert_eq(w.len, 8);
	cr_assert_eq(buf[8], 0);
	cr_assert(w.overflow);
}

Test(encode, frame_limits)
{
	static uint8_t buf[1024];
	static char pad[600];
	struct spop_writer w;
	size_t s;

	/* LENGTH over max_frame_size: removed */
	spop_writer_init(&w, buf, sizeof(buf));
	s = spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FL_FIN, 1, 1);
	spop_put_bytes(&w, pad, 250);   /* LENGTH 7 + 250 */
	cr_assert_eq(spop_frame_end(&w, s, 256), -1);
	cr_assert_eq(w.len, 0);
	cr_assert(!w.overflow);
	/* LENGTH == max_frame_size: kept */
	s = spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FL_FIN, 1, 1);
	spop_put_bytes(&w, pad, 256 - 7);
	cr_assert_eq(spop_frame_end(&w, s, 256), 0, "LENGTH == max is allowed");
	cr_assert_eq(w.len, 4 + 256);
	cr_assert_arr_eq(buf, "\x00\x00\x01\x00", 4);
	s = spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FL_FIN, 1, 1);
	cr_assert_eq(s, 4 + 256);
	spop_put_bytes(&w, pad, 256 - 6);
	cr_assert_eq(spop_frame_end(&w, s, 256), -1, "LENGTH == max + 1");
	cr_assert_eq(w.len, 4 + 256);
	cr_assert(!w.overflow);

	/* never a LENGTH below 7, never 0 */
	spop_writer_init(&w, buf, sizeof(buf));
	spop_put_bytes(&w, "ab", 2);
	cr_assert_eq(spop_frame_end(&w, 0, 256), -1);
	cr_assert_eq(w.len, 0);
	cr_assert_eq(spop_frame_end(&w, 0, 256), -1);
	/* a start beyond the end removes nothing */
	spop_put_bytes(&w, "ab", 2);
	cr_assert_eq(spop_frame_end(&w, 100, 256), -1);
	cr_assert_eq(w.len, 2);
}

Test(encode, caller_errors_poison_the_frame)
{
	uint8_t buf[64];
	struct spop_writer w;
	struct spop_data bad = { .type = SPOP_DATA_TYPE_COUNT };
	size_t s;

	spop_writer_init(&w, buf, sizeof(buf));
	s = spop_frame_begin(&w, SPOP_FRAME_NOTIFY, SPOP_FL_FIN, 1, 1);
	spop_put_msg(&w, "m", 1, 256);
	cr_assert(w.overflow);
	cr_assert_eq(spop_frame_end(&w, s, 256), -1);
	cr_assert_eq(w.len, 0);

	s = spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FL_FIN, 1, 1);
	spop_put_set_var(&w, SPOP_SCOPE_TXN, "v", 1, &bad);
	cr_assert(w.overflow);
	cr_assert_eq(spop_frame_end(&w, s, 256), -1);
	cr_assert_eq(w.len, 0);
}

Test(encode, frame_header)
{
	uint8_t buf[64];
	struct spop_writer w;
	struct spop_frame f;
	enum spop_err err;
	size_t s;

	spop_writer_init(&w, buf, sizeof(buf));
	s = spop_frame_begin(&w, SPOP_FRAME_ACK, 0x01020303u, UINT64_MAX, 300);
	cr_assert_eq(spop_frame_end(&w, s, 256), 0);
	cr_assert_eq(spop_frame_decode(buf, w.len, 256, &f, &err), (int)w.len);
	cr_assert_eq(f.type, SPOP_FRAME_ACK);
	cr_assert_eq(f.flags, 0x01020303u);
	cr_assert_eq(f.stream_id, UINT64_MAX);
	cr_assert_eq(f.frame_id, 300);
	cr_assert_eq(f.payload_len, 0);
	cr_assert_arr_eq(buf + 5, "\x01\x02\x03\x03", 4);
}
