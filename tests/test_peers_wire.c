/*
 * test_peers_wire.c - the peers protocol codec (agent/peers_wire.{h,c}):
 * the byte-level captures between HAProxy 2.6.12 and 3.4.0 of
 * ../shared/reference/peers-protocol-notes.md (section 8), decoded and
 * encoded back to the same bytes; every input whole, one byte at a time
 * and truncated, each placed right before a PROT_NONE page so that a read
 * one byte too far crashes the test; hostile input (lying lengths, huge
 * varints, unknown types, over-long keys). The codec with real HAProxy
 * peers: tests/test_peers_haproxy.c.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "agent/peers_wire.h"
#include "tests/lib/guard.h"

/* A byte string literal and its length. */
#define B(s) ((const uint8_t *)(s)), (sizeof(s) - 1)
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* ---- the captures (notes, section 8) ---- */

static const char cap_hello[] = "HAProxyS 2.1\nA\nB 13489 1\n";
static const char cap_status_resync[] = "200\n\x00\x00";

/* req_cluster: ip, 60 s, http_req_rate(10s); table id 4 */
static const char cap_def_req[] =
	"\x0a\x82\x19" "\x04" "\x0c" "/req_cluster" "\x04" "\x04" "\xf0\x31" "\xf0\x97\x1c"
	"\x0a" "\xf0\xe2\x03";
/* t_misc: string len 16, 30 s, gpt0 gpc0 gpc0_rate(1s) conn_cnt conn_rate(5s)
 * http_req_cnt bytes_in_rate(1s); table id 3 */
static const char cap_def_misc[] =
	"\x0a\x82\x1b" "\x03" "\x07" "/t_misc" "\x06" "\x11" "\xfe\x94\x07" "\xf0\xc4\x0d"
	"\x03" "\xf8\x2f" "\x05" "\xf8\xa9\x01" "\x0e" "\xf8\x2f";
/* t_arr: integer, 30 s, gpt(2) gpc(2) gpc_rate(2,1s); table id 2 */
static const char cap_def_arr[] =
	"\x0a\x82\x19" "\x02" "\x06" "/t_arr" "\x02" "\x04" "\xf0\xf1\xfe\x6e" "\xf0\xc4\x0d"
	"\x16\x02" "\x17\x02" "\x18\x02\xf8\x2f";
/* t6: ipv6, 30 s, conn_cnt; table id 1 */
static const char cap_def_t6[] =
	"\x0a\x82\x0b" "\x01" "\x03" "/t6" "\x05" "\x10" "\x10" "\xf0\xc4\x0d";

/* req_cluster updates: 2.6.12 (id 4, age 12, curr 2) and 3.4.0 (id 1) */
static const char cap_upd_req26[] =
	"\x0a\x80\x0b" "\x00\x00\x00\x04" "\x7f\x00\x00\x01" "\x0c\x02\x00";
static const char cap_upd_req34[] =
	"\x0a\x80\x0b" "\x00\x00\x00\x01" "\x7f\x00\x00\x01" "\x01\x01\x00";
static const char cap_ack[] = "\x0a\x84\x05" "\x04" "\x00\x00\x00\x04";
static const char cap_upd_misc[] =
	"\x0a\x80\x1d" "\x00\x00\x00\x05" "\x0b" "example.org" "\x07" "\x01" "\x01\x01\x00"
	"\x01" "\x01\x01\x00" "\x01" "\x01\x4e\x00";
static const char cap_upd_arr[] =
	"\x0a\x80\x16" "\x00\x00\x00\x01" "\x00\x00\x00\x2a" "\x05\x00" "\x00\x01"
	"\xff\xf6\xf6\xfe\x7e\x00\x00" "\x01\x01\x00";
/* timed: id 20, expire 59057 ms, 127.0.0.1, age 1042, curr 10 */
static const char cap_upd_timed[] =
	"\x0a\x85\x10" "\x00\x00\x00\x14" "\x00\x00\xe6\xb1" "\x7f\x00\x00\x01" "\xf2\x32\x0a\x00";

/* ---- guard page (tests/lib/guard.h) ----
 *
 * One mapping per test process: 64 KiB of data, then a page nobody may
 * read. at_guard() copies its bytes so that they end right at that page.
 */

#define GUARD_DATA (64u * 1024u)

static const uint8_t *at_guard(const void *src, size_t n)
{
	static struct guard g;

	if (!g.base)
		guard_init(&g, GUARD_DATA);
	cr_assert(n <= GUARD_DATA);
	/* memmove: src may be a part of the guarded bytes themselves. */
	if (n)
		memmove(g.limit - n, src, n);
	return g.limit - n;
}

Test(guard, a_read_past_the_input_crashes, .signal = SIGSEGV)
{
	const volatile uint8_t *p = at_guard("ab", 2);

	signal(SIGSEGV, SIG_DFL);
	(void)p[2];
}

/* ---- helpers ---- */

static struct peers_wire_str S(const char *s)
{
	return (struct peers_wire_str){ .ptr = s, .len = strlen(s) };
}

static bool str_is(struct peers_wire_str s, const char *lit)
{
	return s.len == strlen(lit) && memcmp(s.ptr, lit, s.len) == 0;
}

/* Decodes the one message that is all of raw[0..n), guarded; its payload
 * stays valid until the next at_guard(). */
static void msg_whole(const uint8_t *raw, size_t n, struct peers_wire_msg *m)
{
	enum peers_wire_err err = PEERS_WIRE_ERR_NONE;
	const uint8_t *p = at_guard(raw, n);

	cr_assert_eq(peers_wire_msg_decode(p, n, PEERS_WIRE_MSG_MAX, m, &err), (int)n,
		     "err %s", peers_wire_err_str(err));
}

static void define_of(const uint8_t *raw, size_t n, struct peers_wire_table *t)
{
	struct peers_wire_msg m;
	enum peers_wire_err err = PEERS_WIRE_ERR_NONE;

	msg_whole(raw, n, &m);
	cr_assert_eq(m.kind, PEERS_WIRE_MSG_DEFINE);
	cr_assert_eq(peers_wire_define_decode(m.payload, m.len, t, &err), (int)m.len,
		     "err %s", peers_wire_err_str(err));
}

static void update_of(const uint8_t *raw, size_t n, const struct peers_wire_table *t,
		      struct peers_wire_update *u)
{
	struct peers_wire_msg m;
	enum peers_wire_err err = PEERS_WIRE_ERR_NONE;

	msg_whole(raw, n, &m);
	cr_assert_eq(peers_wire_update_decode(m.type, m.payload, m.len, t, u, &err), (int)m.len,
		     "err %s", peers_wire_err_str(err));
	cr_assert_eq(u->trailing, 0);
}

/* Encoding what was decoded gives the capture back, byte for byte. */
static void encodes_to(int (*enc)(struct peers_wire_writer *, const struct peers_wire_table *,
				  const struct peers_wire_update *),
		       const struct peers_wire_table *t, const struct peers_wire_update *u,
		       const uint8_t *raw, size_t n)
{
	uint8_t buf[512];
	struct peers_wire_writer w;

	peers_wire_writer_init(&w, buf, sizeof(buf));
	cr_assert_eq(enc(&w, t, u), 0);
	cr_assert_eq(w.len, n, "%zu bytes, want %zu", w.len, n);
	cr_assert_arr_eq(buf, raw, n);
	/* one byte short of any room it needs: refused, nothing left behind */
	for (size_t cap = 0; cap < n; cap++) {
		memset(buf, 0xee, sizeof(buf));
		peers_wire_writer_init(&w, buf, cap);
		cr_assert_eq(enc(&w, t, u), -1, "cap %zu", cap);
		cr_assert_eq(w.len, 0, "cap %zu", cap);
	}
}

static int enc_define(struct peers_wire_writer *w, const struct peers_wire_table *t,
		      const struct peers_wire_update *u)
{
	(void)u;
	return peers_wire_encode_define(w, t);
}

/* ---- tables ---- */

Test(tables, names_and_reactions)
{
	cr_assert_str_eq(peers_wire_msg_str(PEERS_WIRE_MSG_DEFINE), "define");
	cr_assert_str_eq(peers_wire_msg_str(PEERS_WIRE_MSG_UNKNOWN), "unknown");
	cr_assert_str_eq(peers_wire_msg_str((enum peers_wire_msg_kind)99), "unknown");
	cr_assert_eq(peers_wire_msg_kind(0x0a, 0x84), PEERS_WIRE_MSG_ACK);
	cr_assert_eq(peers_wire_msg_kind(0x00, 0x04), PEERS_WIRE_MSG_HEARTBEAT);
	cr_assert_eq(peers_wire_msg_kind(0x01, 0x01), PEERS_WIRE_MSG_ERR_SIZELIMIT);
	cr_assert_eq(peers_wire_msg_kind(0x00, 0x05), PEERS_WIRE_MSG_UNKNOWN);
	cr_assert_eq(peers_wire_msg_kind(0x0a, 0x87), PEERS_WIRE_MSG_UNKNOWN);
	cr_assert_str_eq(peers_wire_dt_str(PEERS_WIRE_DT_HTTP_REQ_RATE), "http_req_rate");
	cr_assert_str_eq(peers_wire_dt_str(26), "glitch_rate");
	cr_assert_str_eq(peers_wire_dt_str(27), "unknown");
	cr_assert_eq(peers_wire_dt_enc(PEERS_WIRE_DT_GPC_RATE), PEERS_WIRE_ENC_ARRAY_FREQ);
	cr_assert_eq(peers_wire_dt_enc(PEERS_WIRE_DT_SERVER_ID), PEERS_WIRE_ENC_SINT);
	cr_assert_eq(peers_wire_dt_enc(PEERS_WIRE_DT_BYTES_IN_CNT), PEERS_WIRE_ENC_ULL);
	cr_assert_eq(PEERS_WIRE_DT_COUNT, 27);
	cr_assert_str_eq(peers_wire_err_str((enum peers_wire_err)1000), "unknown error");
	cr_assert(peers_wire_err_ignorable(PEERS_WIRE_ERR_KEY_TYPE));
	cr_assert(peers_wire_err_ignorable(PEERS_WIRE_ERR_PARAMS));
	cr_assert(!peers_wire_err_ignorable(PEERS_WIRE_ERR_TRUNCATED));
	cr_assert_eq(peers_wire_err_status(PEERS_WIRE_ERR_HELLO_PROTO), 501);
	cr_assert_eq(peers_wire_err_status(PEERS_WIRE_ERR_HELLO_PEER), 501);
	cr_assert_eq(peers_wire_err_status(PEERS_WIRE_ERR_HELLO_VERSION), 502);
	cr_assert_eq(peers_wire_err_status(PEERS_WIRE_ERR_TRUNCATED), 0);
}

/* ---- varints ---- */

static const struct {
	uint64_t v;
	const char *b;
	size_t n;
} varints[] = {
	{ 0, "\x00", 1 },
	{ 239, "\xef", 1 },
	{ 240, "\xf0\x00", 2 },
	{ 1000, "\xf8\x2f", 2 },
	{ 2287, "\xff\x7f", 2 },
	{ 2288, "\xf0\x80\x00", 3 },
	{ 5000, "\xf8\xa9\x01", 3 },
	{ 10000, "\xf0\xe2\x03", 3 },
	{ 16958, "\xfe\x94\x07", 3 },
	{ 30000, "\xf0\xc4\x0d", 3 },
	{ 60000, "\xf0\x97\x1c", 3 },
	{ 264431, "\xff\xff\x7f", 3 },
	{ 264432, "\xf0\x80\x80\x00", 4 },
	{ 531821057, "\xf1\x91\xdd\xeb\x0e", 5 },
	{ 4294951007u, "\xff\xf6\xf6\xfe\x7e", 5 },
	{ UINT32_MAX, "\xff\xf0\xfe\xfe\x7e", 5 },
	{ UINT64_MAX, "\xff\xf0\xfe\xfe\xfe\xfe\xfe\xfe\xfe\x0e", 10 },
};

Test(varint, vectors_of_the_notes_both_ways)
{
	for (size_t i = 0; i < NELEM(varints); i++) {
		uint8_t buf[16];
		uint64_t v = 1;
		enum peers_wire_err err = PEERS_WIRE_ERR_NONE;
		const uint8_t *p = at_guard(varints[i].b, varints[i].n);

		cr_assert_eq(peers_wire_varint_decode(p, varints[i].n, &v, &err), (int)varints[i].n,
			     "vector %zu", i);
		cr_assert_eq(v, varints[i].v, "vector %zu", i);
		for (size_t k = 0; k < varints[i].n; k++) {
			p = at_guard(varints[i].b, k);
			cr_assert_eq(peers_wire_varint_decode(p, k, &v, &err), 0, "vector %zu, %zu bytes", i, k);
		}
		cr_assert_eq(peers_wire_varint_size(varints[i].v), varints[i].n);
		cr_assert_eq(peers_wire_varint_encode(buf, sizeof(buf), varints[i].v), varints[i].n);
		cr_assert_arr_eq(buf, varints[i].b, varints[i].n);
		cr_assert_eq(peers_wire_varint_encode(buf, varints[i].n - 1, varints[i].v), 0);
	}
}

Test(varint, over_ten_bytes_or_64_bits_is_malformed)
{
	uint64_t v;
	enum peers_wire_err err = PEERS_WIRE_ERR_NONE;
	/* an 11th byte */
	const uint8_t *p = at_guard("\xff\xf0\xfe\xfe\xfe\xfe\xfe\xfe\xfe\x8e\x00", 11);

	cr_assert_eq(peers_wire_varint_decode(p, 11, &v, &err), -1);
	cr_assert_eq(err, PEERS_WIRE_ERR_VARINT);
	/* 2^64 - 1 plus one */
	err = PEERS_WIRE_ERR_NONE;
	p = at_guard("\xf0\xf1\xfe\xfe\xfe\xfe\xfe\xfe\xfe\x0e", 10);
	cr_assert_eq(peers_wire_varint_decode(p, 10, &v, &err), -1);
	cr_assert_eq(err, PEERS_WIRE_ERR_VARINT);
	/* a last byte carrying bits past 64 */
	err = PEERS_WIRE_ERR_NONE;
	p = at_guard("\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 10);
	cr_assert_eq(peers_wire_varint_decode(p, 10, &v, &err), -1);
	cr_assert_eq(err, PEERS_WIRE_ERR_VARINT);
}

Test(varint, every_value_size_boundary_round_trips)
{
	uint64_t edges[] = { 240, 2288, 264432, 33818864, 4328786160ull, 554084600048ull };

	for (size_t i = 0; i < NELEM(edges); i++) {
		for (int d = -1; d <= 0; d++) {
			uint64_t v = edges[i] + (uint64_t)(int64_t)d, back;
			uint8_t buf[16];
			size_t n = peers_wire_varint_encode(buf, sizeof(buf), v);

			cr_assert_eq(n, i + 1 + (d == 0), "%llu", (unsigned long long)v);
			cr_assert_eq(peers_wire_varint_decode(buf, n, &back, NULL), (int)n);
			cr_assert_eq(back, v);
		}
	}
}

/* ---- hello and status ---- */

Test(hello, capture_whole_and_every_prefix)
{
	struct peers_wire_hello h;
	enum peers_wire_err err = PEERS_WIRE_ERR_NONE;
	size_t n = sizeof(cap_hello) - 1;
	const uint8_t *p = at_guard(cap_hello, n);

	cr_assert_eq(peers_wire_hello_decode(p, n, &h, &err), (int)n);
	cr_assert_eq(h.major, 2);
	cr_assert_eq(h.minor, 1);
	cr_assert(str_is(h.callee, "A"));
	cr_assert(str_is(h.caller, "B"));
	cr_assert(str_is(h.rest, "13489 1"));
	for (size_t k = 0; k < n; k++) {
		p = at_guard(cap_hello, k);
		cr_assert_eq(peers_wire_hello_decode(p, k, &h, &err), 0, "%zu bytes", k);
	}
}

Test(hello, crlf_minor_zero_and_the_messages_after_it_are_kept)
{
	static const char in[] = "HAProxyS 2.0\r\nA\r\nagg 1 1\r\n\x00\x04";
	struct peers_wire_hello h;
	const uint8_t *p = at_guard(in, sizeof(in) - 1);

	cr_assert_eq(peers_wire_hello_decode(p, sizeof(in) - 1, &h, NULL), (int)sizeof(in) - 3);
	cr_assert_eq(h.minor, 0);
	cr_assert(str_is(h.callee, "A"));
	cr_assert(str_is(h.caller, "agg"));
	cr_assert(str_is(h.rest, "1 1"));
}

/* What HAProxy answers to each (notes 1.2), told as soon as the line that
 * is wrong is in. */
Test(hello, statuses_of_bad_hellos)
{
	static const struct {
		const char *in;
		enum peers_wire_err err;
		unsigned status;
	} bad[] = {
		{ "HAProxyS 3.0\n", PEERS_WIRE_ERR_HELLO_VERSION, 502 },
		{ "HAProxyS 2.2\n", PEERS_WIRE_ERR_HELLO_VERSION, 502 },
		{ "HAProxyS 2.1x\n", PEERS_WIRE_ERR_HELLO_VERSION, 502 },
		{ "HAProxyS 2\n", PEERS_WIRE_ERR_HELLO_VERSION, 502 },
		{ "HAProxyS .1\n", PEERS_WIRE_ERR_HELLO_VERSION, 502 },
		{ "HAProxyS 99999999999.1\n", PEERS_WIRE_ERR_HELLO_VERSION, 502 },
		{ "HAProxyS2.1\n", PEERS_WIRE_ERR_HELLO_PROTO, 501 },
		{ "haproxys 2.1\n", PEERS_WIRE_ERR_HELLO_PROTO, 501 },
		{ "GET / HTTP/1.1\n", PEERS_WIRE_ERR_HELLO_PROTO, 501 },
		{ "HAProxyS 2.1\nA\nagg\n", PEERS_WIRE_ERR_HELLO_PEER, 501 },
		{ "HAProxyS 2.1\nA\n\n", PEERS_WIRE_ERR_HELLO_PEER, 501 },
	};

	for (size_t i = 0; i < NELEM(bad); i++) {
		struct peers_wire_hello h;
		enum peers_wire_err err = PEERS_WIRE_ERR_NONE;
		size_t n = strlen(bad[i].in);
		const uint8_t *p = at_guard(bad[i].in, n);

		cr_assert_eq(peers_wire_hello_decode(p, n, &h, &err), -1, "%zu", i);
		cr_assert_eq(err, bad[i].err, "%zu: %s", i, peers_wire_err_str(err));
		cr_assert_eq(peers_wire_err_status(err), bad[i].status, "%zu", i);
	}
}

Test(hello, a_line_without_end_is_refused_at_the_limit)
{
	static uint8_t in[15 + PEERS_WIRE_LINE_MAX];
	enum peers_wire_err err = PEERS_WIRE_ERR_NONE;
	struct peers_wire_hello h;
	const uint8_t *p;

	memset(in, 'x', sizeof(in));
	memcpy(in, "HAProxyS 2.1\nA\n", 15);
	/* line 3 of PEERS_WIRE_LINE_MAX bytes without LF: still "need more"
	 * one byte before, refused at it */
	p = at_guard(in, 15 + PEERS_WIRE_LINE_MAX - 1);
	cr_assert_eq(peers_wire_hello_decode(p, 15 + PEERS_WIRE_LINE_MAX - 1, &h, &err), 0);
	p = at_guard(in, 15 + PEERS_WIRE_LINE_MAX);
	cr_assert_eq(peers_wire_hello_decode(p, 15 + PEERS_WIRE_LINE_MAX, &h, &err), -1);
	cr_assert_eq(err, PEERS_WIRE_ERR_LINE);
	/* the same line ending in LF at the limit is a line */
	in[15 + PEERS_WIRE_LINE_MAX - 1] = '\n';
	in[20] = ' ';
	p = at_guard(in, 15 + PEERS_WIRE_LINE_MAX);
	cr_assert_eq(peers_wire_hello_decode(p, 15 + PEERS_WIRE_LINE_MAX, &h, &err),
		     (int)(15 + PEERS_WIRE_LINE_MAX));
	cr_assert_eq(h.caller.len, 5);
}

Test(hello, encoder_is_what_haproxy_writes)
{
	uint8_t buf[128];
	struct peers_wire_writer w;
	struct peers_wire_hello h;

	peers_wire_writer_init(&w, buf, sizeof(buf));
	cr_assert_eq(peers_wire_encode_hello(&w, 1, S("A"), S("B"), 13489), 0);
	cr_assert_eq(w.len, sizeof(cap_hello) - 1);
	cr_assert_arr_eq(buf, cap_hello, w.len);
	cr_assert_eq(peers_wire_hello_decode(buf, w.len, &h, NULL), (int)w.len);
	/* refused: names HAProxy could not read back, minor 2 */
	peers_wire_writer_init(&w, buf, sizeof(buf));
	cr_assert_eq(peers_wire_encode_hello(&w, 1, S("A\nB"), S("B"), 1), -1);
	cr_assert_eq(peers_wire_encode_hello(&w, 1, S("A"), S("B C"), 1), -1);
	cr_assert_eq(peers_wire_encode_hello(&w, 1, S(""), S("B"), 1), -1);
	cr_assert_eq(peers_wire_encode_hello(&w, 1, S("A"), S("B\r"), 1), -1);
	cr_assert_eq(peers_wire_encode_hello(&w, 2, S("A"), S("B"), 1), -1);
	cr_assert_eq(w.len, 0);
	for (size_t cap = 0; cap < sizeof(cap_hello) - 1; cap++) {
		peers_wire_writer_init(&w, buf, cap);
		cr_assert_eq(peers_wire_encode_hello(&w, 1, S("A"), S("B"), 13489), -1);
		cr_assert_eq(w.len, 0);
	}
}

Test(status, the_200_and_the_resync_request_in_one_read)
{
	unsigned st = 0;
	struct peers_wire_msg m;
	const uint8_t *p = at_guard(cap_status_resync, 6);

	cr_assert_eq(peers_wire_status_decode(p, 6, &st, NULL), 4);
	cr_assert_eq(st, 200);
	cr_assert_eq(peers_wire_msg_decode(p + 4, 2, PEERS_WIRE_MSG_MAX, &m, NULL), 2);
	cr_assert_eq(m.kind, PEERS_WIRE_MSG_RESYNCREQ);
	for (size_t k = 0; k < 4; k++) {
		p = at_guard(cap_status_resync, k);
		cr_assert_eq(peers_wire_status_decode(p, k, &st, NULL), 0, "%zu bytes", k);
	}
}

Test(status, every_code_and_what_is_not_one)
{
	static const char *const bad[] = { "\n", "20a\n", "2000\n", " 200\n", "-200\n", "200 OK\n" };
	uint8_t buf[8];
	struct peers_wire_writer w;
	unsigned st;
	enum peers_wire_err err;

	for (unsigned code = 100; code <= 999; code++) {
		peers_wire_writer_init(&w, buf, sizeof(buf));
		cr_assert_eq(peers_wire_encode_status(&w, code), 0);
		cr_assert_eq(peers_wire_status_decode(buf, w.len, &st, NULL), 4);
		cr_assert_eq(st, code);
	}
	cr_assert_eq(peers_wire_status_decode(B("503\r\n"), &st, NULL), 5);
	cr_assert_eq(st, 503);
	for (size_t i = 0; i < NELEM(bad); i++) {
		err = PEERS_WIRE_ERR_NONE;
		cr_assert_eq(peers_wire_status_decode((const uint8_t *)bad[i], strlen(bad[i]), &st, &err), -1,
			     "%s", bad[i]);
		cr_assert_eq(err, PEERS_WIRE_ERR_STATUS);
	}
	peers_wire_writer_init(&w, buf, 3);
	cr_assert_eq(peers_wire_encode_status(&w, 200), -1);
	cr_assert_eq(w.len, 0);
	peers_wire_writer_init(&w, buf, sizeof(buf));
	cr_assert_eq(peers_wire_encode_status(&w, 99), -1);
	cr_assert_eq(peers_wire_encode_status(&w, 1000), -1);
}

/* ---- message headers ---- */

/* A session's bytes after the hello, as HAProxy 2.6 and 3.4 sent them. */
static const char *const stream_msgs[] = {
	"\x00\x00", cap_def_t6, cap_def_arr, cap_def_misc, cap_def_req, "\x00\x02",
	"\x00\x03", cap_upd_req26, cap_ack, cap_upd_misc, cap_upd_arr, cap_upd_timed, "\x00\x04",
	"\x01\x00",
};
static const size_t stream_lens[] = {
	2, sizeof(cap_def_t6) - 1, sizeof(cap_def_arr) - 1, sizeof(cap_def_misc) - 1,
	sizeof(cap_def_req) - 1, 2, 2, sizeof(cap_upd_req26) - 1, sizeof(cap_ack) - 1,
	sizeof(cap_upd_misc) - 1, sizeof(cap_upd_arr) - 1, sizeof(cap_upd_timed) - 1, 2, 2,
};
static const enum peers_wire_msg_kind stream_kinds[] = {
	PEERS_WIRE_MSG_RESYNCREQ, PEERS_WIRE_MSG_DEFINE, PEERS_WIRE_MSG_DEFINE,
	PEERS_WIRE_MSG_DEFINE, PEERS_WIRE_MSG_DEFINE, PEERS_WIRE_MSG_RESYNCPARTIAL,
	PEERS_WIRE_MSG_RESYNCCONFIRM, PEERS_WIRE_MSG_UPDATE, PEERS_WIRE_MSG_ACK,
	PEERS_WIRE_MSG_UPDATE, PEERS_WIRE_MSG_UPDATE, PEERS_WIRE_MSG_UPDATE_TIMED,
	PEERS_WIRE_MSG_HEARTBEAT, PEERS_WIRE_MSG_ERR_PROTOCOL,
};

/* Reads messages off in[0..n) as a reader of a socket would, with `step`
 * bytes arriving at a time (0: all at once); returns how many it read
 * whole and checks their kinds and sizes. */
static size_t read_stream(const uint8_t *in, size_t n, size_t step)
{
	size_t have = step ? 0 : n, off = 0, count = 0;

	for (;;) {
		struct peers_wire_msg m;
		enum peers_wire_err err = PEERS_WIRE_ERR_NONE;
		const uint8_t *p = at_guard(in + off, have - off);
		int r = peers_wire_msg_decode(p, have - off, PEERS_WIRE_MSG_MAX, &m, &err);

		cr_assert_geq(r, 0, "%s", peers_wire_err_str(err));
		if (r > 0) {
			cr_assert_lt(count, NELEM(stream_kinds));
			cr_assert_eq(m.kind, stream_kinds[count], "message %zu", count);
			cr_assert_eq((size_t)r, stream_lens[count], "message %zu", count);
			count++;
			off += (size_t)r;
			continue;
		}
		if (have == n)
			break;
		have = have + step < n ? have + step : n;
	}
	return count;
}

Test(msg, a_session_whole_byte_by_byte_and_in_chunks)
{
	uint8_t in[1024];
	size_t n = 0;

	for (size_t i = 0; i < NELEM(stream_msgs); i++) {
		memcpy(in + n, stream_msgs[i], stream_lens[i]);
		n += stream_lens[i];
	}
	cr_assert_eq(read_stream(in, n, 0), NELEM(stream_msgs));
	cr_assert_eq(read_stream(in, n, 1), NELEM(stream_msgs));
	cr_assert_eq(read_stream(in, n, 7), NELEM(stream_msgs));
	/* truncated anywhere: the messages before the cut, then "need more" */
	for (size_t cut = 0; cut < n; cut++) {
		size_t whole = 0, count = 0;

		while (count < NELEM(stream_msgs) && whole + stream_lens[count] <= cut)
			whole += stream_lens[count++];
		cr_assert_eq(read_stream(in, cut, 0), count, "cut at %zu", cut);
	}
}

Test(msg, controls_and_errors_encode_as_two_bytes)
{
	static const enum peers_wire_msg_kind kinds[] = {
		PEERS_WIRE_MSG_RESYNCREQ, PEERS_WIRE_MSG_RESYNCFINISHED, PEERS_WIRE_MSG_RESYNCPARTIAL,
		PEERS_WIRE_MSG_RESYNCCONFIRM, PEERS_WIRE_MSG_HEARTBEAT, PEERS_WIRE_MSG_ERR_PROTOCOL,
		PEERS_WIRE_MSG_ERR_SIZELIMIT,
	};
	static const char *const bytes[] = {
		"\x00\x00", "\x00\x01", "\x00\x02", "\x00\x03", "\x00\x04", "\x01\x00", "\x01\x01",
	};
	uint8_t buf[4];
	struct peers_wire_writer w;
	struct peers_wire_msg m;

	for (size_t i = 0; i < NELEM(kinds); i++) {
		peers_wire_writer_init(&w, buf, sizeof(buf));
		cr_assert_eq(peers_wire_encode_ctrl(&w, kinds[i]), 0);
		cr_assert_eq(w.len, 2);
		cr_assert_arr_eq(buf, bytes[i], 2);
		msg_whole(buf, 2, &m);
		cr_assert_eq(m.kind, kinds[i]);
		cr_assert_null(m.payload);
		peers_wire_writer_init(&w, buf, 1);
		cr_assert_eq(peers_wire_encode_ctrl(&w, kinds[i]), -1);
		cr_assert_eq(w.len, 0);
	}
	peers_wire_writer_init(&w, buf, sizeof(buf));
	cr_assert_eq(peers_wire_encode_ctrl(&w, PEERS_WIRE_MSG_UPDATE), -1);
	cr_assert_eq(peers_wire_encode_ctrl(&w, PEERS_WIRE_MSG_UNKNOWN), -1);
	cr_assert_eq(peers_wire_encode_ctrl(&w, PEERS_WIRE_MSG_COUNT), -1);
	cr_assert_eq(w.len, 0);
}

Test(msg, lying_and_huge_lengths)
{
	struct peers_wire_msg m;
	enum peers_wire_err err;
	const uint8_t *p;

	/* a length past what arrived: need more, however much arrives short of it */
	p = at_guard("\x0a\x80\xf0\x10" "abc", 7);
	cr_assert_eq(peers_wire_msg_decode(p, 7, PEERS_WIRE_MSG_MAX, &m, NULL), 0);
	/* over the limit: refused from its length alone, body never awaited */
	err = PEERS_WIRE_ERR_NONE;
	p = at_guard("\x0a\x80\xf0\xf0\x08", 5);   /* 20464 */
	cr_assert_eq(peers_wire_msg_decode(p, 5, PEERS_WIRE_MSG_MAX, &m, &err), -1);
	cr_assert_eq(err, PEERS_WIRE_ERR_TOO_BIG);
	err = PEERS_WIRE_ERR_NONE;
	p = at_guard("\x0a\x80\x0b", 3);
	cr_assert_eq(peers_wire_msg_decode(p, 3, 10, &m, &err), -1);
	cr_assert_eq(err, PEERS_WIRE_ERR_TOO_BIG);
	/* a 5-byte length (2^32 - 1) is a length, and too big */
	err = PEERS_WIRE_ERR_NONE;
	p = at_guard("\x0a\x80\xff\xf0\xfe\xfe\x7e", 7);
	cr_assert_eq(peers_wire_msg_decode(p, 7, PEERS_WIRE_MSG_MAX, &m, &err), -1);
	cr_assert_eq(err, PEERS_WIRE_ERR_TOO_BIG);
	/* a length still going on at its 5th byte: malformed, not "need more" */
	err = PEERS_WIRE_ERR_NONE;
	p = at_guard("\x0a\x80\xff\xff\xff\xff\xff", 7);
	cr_assert_eq(peers_wire_msg_decode(p, 7, PEERS_WIRE_MSG_MAX, &m, &err), -1);
	cr_assert_eq(err, PEERS_WIRE_ERR_LENGTH);
	p = at_guard("\x0a\x80\xff\xff\xff\xff", 6);
	cr_assert_eq(peers_wire_msg_decode(p, 6, PEERS_WIRE_MSG_MAX, &m, &err), 0);
	/* the length limit is inclusive */
	p = at_guard("\x0a\x80\x03" "abc", 6);
	cr_assert_eq(peers_wire_msg_decode(p, 6, 3, &m, NULL), 6);
	cr_assert_eq(m.len, 3);
	cr_assert_eq(m.payload, p + 3);
}

Test(msg, reserved_and_unknown_classes_and_types)
{
	struct peers_wire_msg m;
	enum peers_wire_err err = PEERS_WIRE_ERR_NONE;
	const uint8_t *p;

	p = at_guard("\xff\x00", 2);
	cr_assert_eq(peers_wire_msg_decode(p, 2, PEERS_WIRE_MSG_MAX, &m, &err), -1);
	cr_assert_eq(err, PEERS_WIRE_ERR_RESERVED);
	p = at_guard("\xff\x80", 2);
	cr_assert_eq(peers_wire_msg_decode(p, 2, PEERS_WIRE_MSG_MAX, &m, &err), -1);
	/* unknown: skipped by their length when they have one */
	p = at_guard("\x00\x09", 2);
	cr_assert_eq(peers_wire_msg_decode(p, 2, PEERS_WIRE_MSG_MAX, &m, NULL), 2);
	cr_assert_eq(m.kind, PEERS_WIRE_MSG_UNKNOWN);
	p = at_guard("\x0a\x90\x02xy", 5);
	cr_assert_eq(peers_wire_msg_decode(p, 5, PEERS_WIRE_MSG_MAX, &m, NULL), 5);
	cr_assert_eq(m.kind, PEERS_WIRE_MSG_UNKNOWN);
	cr_assert_eq(m.len, 2);
	p = at_guard("\x07\xc1\x01z", 4);
	cr_assert_eq(peers_wire_msg_decode(p, 4, PEERS_WIRE_MSG_MAX, &m, NULL), 4);
	cr_assert_eq(m.cls, 7);
	cr_assert_eq(m.type, 0xc1);
	/* a stick-table type without bit 7 has no length: 2 bytes */
	p = at_guard("\x0a\x01", 2);
	cr_assert_eq(peers_wire_msg_decode(p, 2, PEERS_WIRE_MSG_MAX, &m, NULL), 2);
	cr_assert_eq(peers_wire_msg_decode(p, 1, PEERS_WIRE_MSG_MAX, &m, NULL), 0);
}

/* ---- table definitions ---- */

Test(define, captures_decode_to_what_the_nodes_declared)
{
	struct peers_wire_table t;

	define_of(B(cap_def_req), &t);
	cr_assert_eq(t.id, 4);
	cr_assert(str_is(t.name, "/req_cluster"));
	cr_assert_eq(t.key_type, PEERS_WIRE_KEY_IPV4);
	cr_assert_eq(t.key_len, 4);
	cr_assert_eq(t.data, PEERS_WIRE_DT_BIT(PEERS_WIRE_DT_HTTP_REQ_RATE));
	cr_assert(t.has_expire);
	cr_assert_eq(t.expire, 60000);
	cr_assert_eq(t.period[PEERS_WIRE_DT_HTTP_REQ_RATE], 10000);

	define_of(B(cap_def_misc), &t);
	cr_assert_eq(t.id, 3);
	cr_assert(str_is(t.name, "/t_misc"));
	cr_assert_eq(t.key_type, PEERS_WIRE_KEY_STRING);
	cr_assert_eq(t.key_len, 17);
	cr_assert_eq(t.data, 16958);
	cr_assert_eq(t.expire, 30000);
	cr_assert_eq(t.period[PEERS_WIRE_DT_GPC0_RATE], 1000);
	cr_assert_eq(t.period[PEERS_WIRE_DT_CONN_RATE], 5000);
	cr_assert_eq(t.period[PEERS_WIRE_DT_BYTES_IN_RATE], 1000);

	define_of(B(cap_def_arr), &t);
	cr_assert_eq(t.id, 2);
	cr_assert_eq(t.key_type, PEERS_WIRE_KEY_INTEGER);
	cr_assert_eq(t.key_len, 4);
	cr_assert_eq(t.data, 0x1c00000);
	cr_assert_eq(t.nbelem[PEERS_WIRE_DT_GPT], 2);
	cr_assert_eq(t.nbelem[PEERS_WIRE_DT_GPC], 2);
	cr_assert_eq(t.nbelem[PEERS_WIRE_DT_GPC_RATE], 2);
	cr_assert_eq(t.period[PEERS_WIRE_DT_GPC_RATE], 1000);
	cr_assert_eq(t.period[PEERS_WIRE_DT_GPT], 0);

	define_of(B(cap_def_t6), &t);
	cr_assert_eq(t.id, 1);
	cr_assert(str_is(t.name, "/t6"));
	cr_assert_eq(t.key_type, PEERS_WIRE_KEY_IPV6);
	cr_assert_eq(t.key_len, 16);
	cr_assert_eq(t.data, PEERS_WIRE_DT_BIT(PEERS_WIRE_DT_CONN_CNT));
}

Test(define, captures_encode_back_byte_for_byte)
{
	const struct {
		const char *raw;
		size_t n;
	} caps[] = {
		{ cap_def_req, sizeof(cap_def_req) - 1 }, { cap_def_misc, sizeof(cap_def_misc) - 1 },
		{ cap_def_arr, sizeof(cap_def_arr) - 1 }, { cap_def_t6, sizeof(cap_def_t6) - 1 },
	};

	for (size_t i = 0; i < NELEM(caps); i++) {
		struct peers_wire_table t;
		uint8_t copy[64];

		memcpy(copy, caps[i].raw, caps[i].n);
		define_of(copy, caps[i].n, &t);
		encodes_to(enc_define, &t, NULL, copy, caps[i].n);
	}
}

/* Cut anywhere: malformed before the end of the bitfield; after it, the
 * DEFINE of an older sender (no expire, no params) unless it holds an
 * array; params cut short: HAProxy ignores the DEFINE. */
Test(define, truncated_at_every_byte)
{
	const struct {
		const char *raw;
		size_t n, bitfield_end, expire_end;
		bool arrays;
	} caps[] = {
		{ cap_def_req, sizeof(cap_def_req) - 1, 18, 21, false },
		{ cap_def_misc, sizeof(cap_def_misc) - 1, 14, 17, false },
		{ cap_def_arr, sizeof(cap_def_arr) - 1, 14, 17, true },
		{ cap_def_t6, sizeof(cap_def_t6) - 1, 8, 11, false },
	};

	for (size_t i = 0; i < NELEM(caps); i++) {
		const uint8_t *payload = (const uint8_t *)caps[i].raw + 3;
		size_t len = caps[i].n - 3;

		for (size_t cut = 0; cut < len; cut++) {
			struct peers_wire_table t;
			enum peers_wire_err err = PEERS_WIRE_ERR_NONE;
			const uint8_t *p = at_guard(payload, cut);
			int r = peers_wire_define_decode(p, cut, &t, &err);

			if (cut < caps[i].bitfield_end) {
				cr_assert_eq(r, -1, "table %zu cut %zu", i, cut);
				cr_assert(!peers_wire_err_ignorable(err), "table %zu cut %zu: %s", i, cut,
					  peers_wire_err_str(err));
			} else if (cut < caps[i].expire_end && !caps[i].arrays) {
				cr_assert_eq(r, (int)caps[i].bitfield_end, "table %zu cut %zu", i, cut);
				cr_assert(!t.has_expire);
			} else {
				cr_assert_eq(r, -1, "table %zu cut %zu", i, cut);
				cr_assert_eq(err, PEERS_WIRE_ERR_PARAMS, "table %zu cut %zu: %s", i, cut,
					     peers_wire_err_str(err));
			}
		}
	}
}

static int define_payload(const uint8_t *raw, size_t n, struct peers_wire_table *t,
			  enum peers_wire_err *err)
{
	*err = PEERS_WIRE_ERR_NONE;
	return peers_wire_define_decode(at_guard(raw, n), n, t, err);
}

#define DEFINE_FAILS(raw, want_err, ignorable)                                           \
	do {                                                                                 \
		struct peers_wire_table t_;                                                  \
		enum peers_wire_err e_;                                                      \
		cr_assert_eq(define_payload(B(raw), &t_, &e_), -1, "%s", #raw);              \
		cr_assert_eq(e_, want_err, "%s: %s", #raw, peers_wire_err_str(e_));          \
		cr_assert_eq(peers_wire_err_ignorable(e_), ignorable, "%s", #raw);           \
		if (ignorable)                                                               \
			cr_assert_eq(t_.id, 9, "the id to unbind is known");                 \
	} while (0)

Test(define, hostile_definitions)
{
	/* what HAProxy ignores, the table id known */
	DEFINE_FAILS("\x09\x02/t\x03\x04\x00", PEERS_WIRE_ERR_KEY_TYPE, true);
	DEFINE_FAILS("\x09\x02/t\x09", PEERS_WIRE_ERR_KEY_TYPE, true);
	DEFINE_FAILS("\x09\x02/t\xf0\xf0\x01\x04\x00", PEERS_WIRE_ERR_KEY_TYPE, true);
	DEFINE_FAILS("\x09\x02/t\x04\x10\x00", PEERS_WIRE_ERR_KEY_LEN, true);
	DEFINE_FAILS("\x09\x02/t\x05\x04\x00", PEERS_WIRE_ERR_KEY_LEN, true);
	DEFINE_FAILS("\x09\x02/t\x02\x08\x00", PEERS_WIRE_ERR_KEY_LEN, true);
	DEFINE_FAILS("\x09\x02/t\x06\x00\x00", PEERS_WIRE_ERR_KEY_LEN, true);
	DEFINE_FAILS("\x09\x02/t\x07\xf1\xf0\x07\x00", PEERS_WIRE_ERR_KEY_LEN, true);   /* 16385 */
	/* gpc(n) in an old-style DEFINE: no count to read its values with */
	DEFINE_FAILS("\x09\x02/t\x04\x04\xf0\xf1\xfe\x1e", PEERS_WIRE_ERR_PARAMS, true);
	/* params: the type's bit again, or HAProxy ignores it */
	DEFINE_FAILS("\x09\x02/t\x04\x04\xf0\x31\x00\x09\xf8\x2f", PEERS_WIRE_ERR_PARAMS, true);
	DEFINE_FAILS("\x09\x02/t\x04\x04\xf0\xf1\xfe\x1e\x00\x16\x02", PEERS_WIRE_ERR_PARAMS, true);
	DEFINE_FAILS("\x09\x02/t\x04\x04\xf0\xf1\xfe\x1e\x00\x17\x65", PEERS_WIRE_ERR_ARRAY_SIZE, true);
	DEFINE_FAILS("\x09\x02/t\x04\x04\xf0\xf1\xfe\x1e\x00\x17", PEERS_WIRE_ERR_PARAMS, true);
	DEFINE_FAILS("\x09\x02/t\x04\x04\xf0\x31\x00\x0a\xff\xff\xff\xff\x7f",
		     PEERS_WIRE_ERR_RANGE, true);
	DEFINE_FAILS("\x09\x02/t\x04\x04\x00\xff\xff\xff\xff\x7f", PEERS_WIRE_ERR_RANGE, true);
	/* what ends the session */
	DEFINE_FAILS("\x09\x00\x04\x04\x00", PEERS_WIRE_ERR_TRUNCATED, false);
	DEFINE_FAILS("\x09\x02/t", PEERS_WIRE_ERR_TRUNCATED, false);
	DEFINE_FAILS("\x09\xff\xff\xff\x7f/t\x04\x04\x00", PEERS_WIRE_ERR_TRUNCATED, false);
	DEFINE_FAILS("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01\x02/t\x04\x04\x00",
		     PEERS_WIRE_ERR_VARINT, false);
	DEFINE_FAILS("\x09\x02/t\x04\x04\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
		     PEERS_WIRE_ERR_VARINT, false);
}

Test(define, unknown_types_and_newer_fields_are_kept_for_later)
{
	struct peers_wire_table t;
	enum peers_wire_err err;
	/* http_req_rate(10s) and bits 27 and 40 (no HAProxy has them yet):
	 * their params come last and are left unread */
	static const char newer[] = "\x01\x02/t\x04\x04\x00\x00" "\x99\x98";
	uint64_t want = PEERS_WIRE_DT_BIT(10) | PEERS_WIRE_DT_BIT(27) | PEERS_WIRE_DT_BIT(40);
	uint8_t vb[16];
	size_t vn = peers_wire_varint_encode(vb, sizeof(vb), want);
	char buf[64];
	size_t n = 0;

	memcpy(buf, "\x01\x02/t\x04\x04", 6);
	n = 6;
	memcpy(buf + n, vb, vn);
	n += vn;
	memcpy(buf + n, "\x00\x0a\xf0\xe2\x03\x1b\x42\x28\x43", 9);
	n += 9;
	cr_assert_eq(define_payload((const uint8_t *)buf, n, &t, &err), (int)(n - 4));
	cr_assert_eq(t.data, want);
	cr_assert_eq(t.period[10], 10000);
	/* a field after the params (none here): skipped, as HAProxy does */
	cr_assert_eq(define_payload(B(newer), &t, &err), 8);
	cr_assert(t.has_expire);
	cr_assert_eq(t.expire, 0);
	/* such a table cannot be encoded: the codec would not know how */
	uint8_t out[64];
	struct peers_wire_writer w;

	define_payload((const uint8_t *)buf, n, &t, &err);
	peers_wire_writer_init(&w, out, sizeof(out));
	cr_assert_eq(peers_wire_encode_define(&w, &t), -1);
	cr_assert_eq(w.len, 0);
}

Test(define, the_largest_arrays_and_every_type)
{
	struct peers_wire_table t = {
		.id = 300, .name = S("/all"), .key_type = PEERS_WIRE_KEY_STRING, .key_len = 33,
		.data = PEERS_WIRE_DT_KNOWN, .has_expire = true, .expire = 86400000,
	}, back;
	uint8_t buf[256];
	struct peers_wire_writer w;
	struct peers_wire_msg m;

	for (unsigned i = 0; i < PEERS_WIRE_DT_COUNT; i++) {
		t.period[i] = peers_wire_dt_enc(i) == PEERS_WIRE_ENC_FREQ ||
					      peers_wire_dt_enc(i) == PEERS_WIRE_ENC_ARRAY_FREQ
				      ? 1000u * (i + 1)
				      : 0;
		t.nbelem[i] = peers_wire_dt_enc(i) == PEERS_WIRE_ENC_ARRAY_UINT ||
					      peers_wire_dt_enc(i) == PEERS_WIRE_ENC_ARRAY_FREQ
				      ? PEERS_WIRE_ARRAY_MAX
				      : 0;
	}
	peers_wire_writer_init(&w, buf, sizeof(buf));
	cr_assert_eq(peers_wire_encode_define(&w, &t), 0);
	msg_whole(buf, w.len, &m);
	cr_assert_eq(peers_wire_define_decode(m.payload, m.len, &back, NULL), (int)m.len);
	cr_assert_eq(back.id, 300);
	cr_assert(str_is(back.name, "/all"));
	cr_assert_eq(back.data, t.data);
	cr_assert_eq(back.expire, t.expire);
	cr_assert_arr_eq(back.period, t.period, sizeof(t.period));
	cr_assert_arr_eq(back.nbelem, t.nbelem, sizeof(t.nbelem));
	/* refused: one more element, an empty name, an ip key of 5 bytes */
	t.nbelem[PEERS_WIRE_DT_GPC] = PEERS_WIRE_ARRAY_MAX + 1;
	cr_assert_eq(peers_wire_encode_define(&w, &t), -1);
	t.nbelem[PEERS_WIRE_DT_GPC] = 1;
	t.name = S("");
	cr_assert_eq(peers_wire_encode_define(&w, &t), -1);
	t.name = S("/t");
	t.key_type = PEERS_WIRE_KEY_IPV4;
	t.key_len = 5;
	cr_assert_eq(peers_wire_encode_define(&w, &t), -1);
	t.key_len = 4;
	t.has_expire = false;   /* arrays need params */
	cr_assert_eq(peers_wire_encode_define(&w, &t), -1);
}

/* ---- updates ---- */

Test(update, captures_of_both_versions)
{
	struct peers_wire_table t;
	static struct peers_wire_update u;

	define_of(B(cap_def_req), &t);
	update_of(B(cap_upd_req26), &t, &u);
	cr_assert(u.has_id && !u.timed);
	cr_assert_eq(u.id, 4);
	cr_assert_eq(u.key.len, 4);
	cr_assert_arr_eq(u.key.ptr, "\x7f\x00\x00\x01", 4);
	cr_assert_eq(u.decoded, PEERS_WIRE_DT_BIT(PEERS_WIRE_DT_HTTP_REQ_RATE));
	cr_assert_eq(u.f[PEERS_WIRE_DT_HTTP_REQ_RATE].age, 12);
	cr_assert_eq(u.f[PEERS_WIRE_DT_HTTP_REQ_RATE].curr, 2);
	cr_assert_eq(u.f[PEERS_WIRE_DT_HTTP_REQ_RATE].prev, 0);
	encodes_to(peers_wire_encode_update, &t, &u, B(cap_upd_req26));
	update_of(B(cap_upd_req34), &t, &u);
	cr_assert_eq(u.id, 1);
	cr_assert_eq(u.f[PEERS_WIRE_DT_HTTP_REQ_RATE].curr, 1);
	encodes_to(peers_wire_encode_update, &t, &u, B(cap_upd_req34));

	update_of(B(cap_upd_timed), &t, &u);
	cr_assert(u.has_id && u.timed);
	cr_assert_eq(u.id, 20);
	cr_assert_eq(u.expire, 59057);
	cr_assert_eq(u.f[PEERS_WIRE_DT_HTTP_REQ_RATE].age, 1042);
	cr_assert_eq(u.f[PEERS_WIRE_DT_HTTP_REQ_RATE].curr, 10);
	encodes_to(peers_wire_encode_update, &t, &u, B(cap_upd_timed));

	define_of(B(cap_def_misc), &t);
	update_of(B(cap_upd_misc), &t, &u);
	cr_assert_eq(u.id, 5);
	cr_assert_eq(u.key.len, 11);
	cr_assert_arr_eq(u.key.ptr, "example.org", 11);
	cr_assert_eq(u.u[PEERS_WIRE_DT_GPT0], 7);
	cr_assert_eq(u.u[PEERS_WIRE_DT_GPC0], 1);
	cr_assert_eq(u.f[PEERS_WIRE_DT_GPC0_RATE].curr, 1);
	cr_assert_eq(u.u[PEERS_WIRE_DT_CONN_CNT], 1);
	cr_assert_eq(u.f[PEERS_WIRE_DT_CONN_RATE].curr, 1);
	cr_assert_eq(u.u[PEERS_WIRE_DT_HTTP_REQ_CNT], 1);
	cr_assert_eq(u.f[PEERS_WIRE_DT_BYTES_IN_RATE].age, 1);
	cr_assert_eq(u.f[PEERS_WIRE_DT_BYTES_IN_RATE].curr, 78);
	encodes_to(peers_wire_encode_update, &t, &u, B(cap_upd_misc));

	define_of(B(cap_def_arr), &t);
	update_of(B(cap_upd_arr), &t, &u);
	cr_assert_eq(u.key.integer, 42);
	cr_assert_eq(u.gpt[0], 5);
	cr_assert_eq(u.gpt[1], 0);
	cr_assert_eq(u.gpc[0], 0);
	cr_assert_eq(u.gpc[1], 1);
	cr_assert_eq(u.gpc_rate[0].age, 4294951007u);
	cr_assert_eq(u.gpc_rate[0].curr, 0);
	cr_assert_eq(u.gpc_rate[1].age, 1);
	cr_assert_eq(u.gpc_rate[1].curr, 1);
	encodes_to(peers_wire_encode_update, &t, &u, B(cap_upd_arr));
}

/* An update has nothing optional: cut anywhere, it is malformed. */
Test(update, truncated_at_every_byte)
{
	const struct {
		const char *def, *upd;
		size_t dn, un;
	} caps[] = {
		{ cap_def_req, cap_upd_req26, sizeof(cap_def_req) - 1, sizeof(cap_upd_req26) - 1 },
		{ cap_def_req, cap_upd_timed, sizeof(cap_def_req) - 1, sizeof(cap_upd_timed) - 1 },
		{ cap_def_misc, cap_upd_misc, sizeof(cap_def_misc) - 1, sizeof(cap_upd_misc) - 1 },
		{ cap_def_arr, cap_upd_arr, sizeof(cap_def_arr) - 1, sizeof(cap_upd_arr) - 1 },
	};
	static struct peers_wire_update u;

	for (size_t i = 0; i < NELEM(caps); i++) {
		struct peers_wire_table t;

		define_of((const uint8_t *)caps[i].def, caps[i].dn, &t);
		for (size_t cut = 0; cut < caps[i].un - 3; cut++) {
			enum peers_wire_err err = PEERS_WIRE_ERR_NONE;
			const uint8_t *p = at_guard(caps[i].upd + 3, cut);

			cr_assert_eq(peers_wire_update_decode((uint8_t)caps[i].upd[1], p, cut, &t, &u, &err),
				     -1, "capture %zu cut %zu", i, cut);
			cr_assert_eq(err, PEERS_WIRE_ERR_TRUNCATED, "capture %zu cut %zu", i, cut);
		}
	}
}

static struct peers_wire_table table_of(enum peers_wire_key_type kt, uint32_t key_len, uint64_t data)
{
	return (struct peers_wire_table){
		.id = 7, .name = { "/t", 2 }, .key_type = kt, .key_len = key_len, .data = data,
		.has_expire = true, .expire = 60000,
	};
}

/* Encodes u for t, decodes it back into *back; returns the message's size. */
static size_t through_the_wire(const struct peers_wire_table *t, const struct peers_wire_update *u,
			       struct peers_wire_update *back)
{
	static uint8_t buf[8192];
	struct peers_wire_writer w;
	struct peers_wire_msg m;
	enum peers_wire_err err = PEERS_WIRE_ERR_NONE;

	peers_wire_writer_init(&w, buf, sizeof(buf));
	cr_assert_eq(peers_wire_encode_update(&w, t, u), 0);
	msg_whole(buf, w.len, &m);
	cr_assert_eq(peers_wire_update_decode(m.type, m.payload, m.len, t, back, &err), (int)m.len,
		     "%s", peers_wire_err_str(err));
	cr_assert_eq(back->has_id, u->has_id);
	cr_assert_eq(back->timed, u->timed);
	return w.len;
}

Test(update, incremental_and_timed_types)
{
	struct peers_wire_table t = table_of(PEERS_WIRE_KEY_IPV4, 4, PEERS_WIRE_DT_BIT(PEERS_WIRE_DT_GPC0));
	static struct peers_wire_update u, back;
	static const uint8_t want[4][2] = { { 0x81, 0 }, { 0x86, 0 }, { 0x80, 0 }, { 0x85, 0 } };

	u.key = (struct peers_wire_key){ .ptr = (const uint8_t *)"\x0a\x00\x00\x01", .len = 4 };
	u.id = 0x01020304;
	u.expire = 5000;
	u.u[PEERS_WIRE_DT_GPC0] = 3;
	for (int i = 0; i < 4; i++) {
		uint8_t buf[32];
		struct peers_wire_writer w;

		u.has_id = i >= 2;
		u.timed = i % 2;
		peers_wire_writer_init(&w, buf, sizeof(buf));
		cr_assert_eq(peers_wire_encode_update(&w, &t, &u), 0);
		cr_assert_eq(buf[0], 0x0a);
		cr_assert_eq(buf[1], want[i][0]);
		cr_assert_eq(w.len, 3u + (u.has_id ? 4 : 0) + (u.timed ? 4 : 0) + 4 + 1);
		through_the_wire(&t, &u, &back);
		cr_assert_eq(back.id, u.has_id ? u.id : 0);
		cr_assert_eq(back.expire, u.timed ? 5000 : 0);
		cr_assert_eq(back.u[PEERS_WIRE_DT_GPC0], 3);
	}
}

Test(update, every_data_type_and_key_type)
{
	static const struct {
		enum peers_wire_key_type kt;
		uint32_t key_len;
		const char *key;
		size_t n;
	} keys[] = {
		{ PEERS_WIRE_KEY_STRING, 33, "192.0.2.1/api-key-0123", 22 },
		{ PEERS_WIRE_KEY_STRING, 2, "", 0 },
		{ PEERS_WIRE_KEY_IPV4, 4, "\xc0\x00\x02\x01", 4 },
		{ PEERS_WIRE_KEY_IPV6, 16, "\x20\x01\x0d\xb8\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01", 16 },
		{ PEERS_WIRE_KEY_INTEGER, 4, NULL, 0 },
		{ PEERS_WIRE_KEY_BINARY, 8, "\x01\x02\x00\x04\x05\x06\x07\x08", 8 },
	};
	static struct peers_wire_update u, back;

	for (size_t k = 0; k < NELEM(keys); k++) {
		struct peers_wire_table t = table_of(keys[k].kt, keys[k].key_len, PEERS_WIRE_DT_KNOWN);

		t.nbelem[PEERS_WIRE_DT_GPT] = 3;
		t.nbelem[PEERS_WIRE_DT_GPC] = PEERS_WIRE_ARRAY_MAX;
		t.nbelem[PEERS_WIRE_DT_GPC_RATE] = 2;
		memset(&u, 0, sizeof(u));
		u.has_id = true;
		u.id = UINT32_MAX;
		u.key.ptr = (const uint8_t *)keys[k].key;
		u.key.len = keys[k].n;
		u.key.integer = 0xfedcba98;
		for (unsigned i = 0; i < PEERS_WIRE_DT_COUNT; i++) {
			u.u[i] = (uint64_t)i * 1000003u;
			u.f[i] = (struct peers_wire_freq){ UINT32_MAX - i, i + 240, (uint64_t)i << 20 };
		}
		u.u[PEERS_WIRE_DT_SERVER_ID] = (uint64_t)(int64_t)-2;     /* a signed int: 10 bytes */
		u.u[PEERS_WIRE_DT_BYTES_IN_CNT] = UINT64_C(1) << 40;       /* 64-bit counters */
		u.server_key = (struct peers_wire_dict){ true, 128, true, { "srv1", 4 } };
		for (unsigned i = 0; i < PEERS_WIRE_ARRAY_MAX; i++) {
			u.gpt[i] = i + 1;
			u.gpc[i] = i * i;
			u.gpc_rate[i] = (struct peers_wire_freq){ i, i + 1, i + 2 };
		}
		through_the_wire(&t, &u, &back);
		cr_assert_eq(back.decoded, PEERS_WIRE_DT_KNOWN);
		cr_assert_eq(back.id, UINT32_MAX);
		if (keys[k].kt == PEERS_WIRE_KEY_INTEGER) {
			cr_assert_eq(back.key.integer, 0xfedcba98);
			cr_assert_arr_eq(back.key.ptr, "\xfe\xdc\xba\x98", 4);
		} else {
			cr_assert_eq(back.key.len, keys[k].n, "key %zu", k);
			cr_assert(keys[k].n == 0 || memcmp(back.key.ptr, keys[k].key, keys[k].n) == 0);
		}
		for (unsigned i = 0; i < PEERS_WIRE_DT_COUNT; i++) {
			enum peers_wire_enc e = peers_wire_dt_enc(i);

			if (e == PEERS_WIRE_ENC_FREQ)
				cr_assert_arr_eq(&back.f[i], &u.f[i], sizeof(u.f[i]), "type %u", i);
			else if (e <= PEERS_WIRE_ENC_ULL)
				cr_assert_eq(back.u[i], u.u[i], "type %u", i);
		}
		cr_assert(back.server_key.present && back.server_key.has_value);
		cr_assert_eq(back.server_key.id, 128);
		cr_assert(str_is(back.server_key.value, "srv1"));
		cr_assert_arr_eq(back.gpt, u.gpt, 3 * sizeof(u.gpt[0]));
		cr_assert_arr_eq(back.gpc, u.gpc, sizeof(u.gpc));
		cr_assert_arr_eq(back.gpc_rate, u.gpc_rate, 2 * sizeof(u.gpc_rate[0]));
	}
}

Test(update, keys_haproxy_cuts_or_pads)
{
	struct peers_wire_table t = table_of(PEERS_WIRE_KEY_STRING, 5, 0);   /* len 4 */
	static struct peers_wire_update u, back;
	uint8_t buf[64];
	struct peers_wire_writer w;

	/* over-long: it goes whole, it reads back as HAProxy keeps it */
	u.has_id = true;
	u.key = (struct peers_wire_key){ .ptr = (const uint8_t *)"example.org", .len = 11 };
	cr_assert_eq(through_the_wire(&t, &u, &back), 3 + 4 + 1 + 11);
	cr_assert_eq(back.key.len, 4);
	cr_assert_arr_eq(back.key.ptr, "exam", 4);
	/* binary: shorter keys are zero-padded, longer ones refused */
	t = table_of(PEERS_WIRE_KEY_BINARY, 6, 0);
	u.key = (struct peers_wire_key){ .ptr = (const uint8_t *)"ab", .len = 2 };
	through_the_wire(&t, &u, &back);
	cr_assert_eq(back.key.len, 6);
	cr_assert_arr_eq(back.key.ptr, "ab\0\0\0\0", 6);
	peers_wire_writer_init(&w, buf, sizeof(buf));
	u.key.ptr = (const uint8_t *)"abcdefg";
	u.key.len = 7;
	cr_assert_eq(peers_wire_encode_update(&w, &t, &u), -1);
	/* addresses are their size */
	t = table_of(PEERS_WIRE_KEY_IPV6, 16, 0);
	u.key.len = 4;
	cr_assert_eq(peers_wire_encode_update(&w, &t, &u), -1);
	cr_assert_eq(w.len, 0);
}

static int update_payload(uint8_t type, const uint8_t *raw, size_t n,
			  const struct peers_wire_table *t, struct peers_wire_update *u,
			  enum peers_wire_err *err)
{
	*err = PEERS_WIRE_ERR_NONE;
	return peers_wire_update_decode(type, at_guard(raw, n), n, t, u, err);
}

Test(update, hostile_updates)
{
	struct peers_wire_table t = table_of(PEERS_WIRE_KEY_STRING, 33,
					     PEERS_WIRE_DT_BIT(PEERS_WIRE_DT_SERVER_KEY));
	static struct peers_wire_update u;
	enum peers_wire_err err;

	/* a key length past the payload: malformed (HAProxy would read on) */
	cr_assert_eq(update_payload(0x80, B("\x00\x00\x00\x01\xf0\x10" "abc"), &t, &u, &err), -1);
	cr_assert_eq(err, PEERS_WIRE_ERR_TRUNCATED);
	cr_assert_eq(update_payload(0x81, B("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"), &t, &u, &err), -1);
	cr_assert_eq(err, PEERS_WIRE_ERR_VARINT);
	/* server_key: none, an id alone, an id and a name */
	cr_assert_eq(update_payload(0x81, B("\x01k\x00"), &t, &u, &err), 3);
	cr_assert(!u.server_key.present);
	cr_assert_eq(update_payload(0x81, B("\x01k\x01\x05"), &t, &u, &err), 4);
	cr_assert(u.server_key.present && !u.server_key.has_value);
	cr_assert_eq(u.server_key.id, 5);
	cr_assert_eq(update_payload(0x81, B("\x01k\x04\x05\x02s1"), &t, &u, &err), 7);
	cr_assert(str_is(u.server_key.value, "s1"));
	/* ids 0 and 129, a name longer or shorter than its room, a room past
	 * the payload */
	cr_assert_eq(update_payload(0x81, B("\x01k\x01\x00"), &t, &u, &err), -1);
	cr_assert_eq(err, PEERS_WIRE_ERR_DICT);
	cr_assert_eq(update_payload(0x81, B("\x01k\x02\xf0\x01"), &t, &u, &err), -1);
	cr_assert_eq(err, PEERS_WIRE_ERR_DICT);
	cr_assert_eq(update_payload(0x81, B("\x01k\x04\x05\x03s1"), &t, &u, &err), -1);
	cr_assert_eq(err, PEERS_WIRE_ERR_DICT);
	cr_assert_eq(update_payload(0x81, B("\x01k\x05\x05\x02s1x"), &t, &u, &err), -1);
	cr_assert_eq(err, PEERS_WIRE_ERR_DICT);
	cr_assert_eq(update_payload(0x81, B("\x01k\x09\x05\x02s1"), &t, &u, &err), -1);
	cr_assert_eq(err, PEERS_WIRE_ERR_TRUNCATED);
	/* not an update; a table no DEFINE could give */
	cr_assert_eq(update_payload(0x82, B("\x01k\x00"), &t, &u, &err), -1);
	cr_assert_eq(err, PEERS_WIRE_ERR_MSG_TYPE);
	t = table_of(PEERS_WIRE_KEY_STRING, 33, PEERS_WIRE_DT_BIT(PEERS_WIRE_DT_GPC));
	t.nbelem[PEERS_WIRE_DT_GPC] = PEERS_WIRE_ARRAY_MAX + 1;
	cr_assert_eq(update_payload(0x81, B("\x01k\x00"), &t, &u, &err), -1);
	cr_assert_eq(err, PEERS_WIRE_ERR_ARRAY_SIZE);
	t = table_of((enum peers_wire_key_type)3, 4, 0);
	cr_assert_eq(update_payload(0x81, B("\x01k\x00"), &t, &u, &err), -1);
	cr_assert_eq(err, PEERS_WIRE_ERR_KEY_TYPE);
}

Test(update, unknown_types_and_trailing_bytes_are_skipped)
{
	/* conn_cnt, then bit 27 (a type newer than this codec): what follows
	 * conn_cnt is left, as a 2.6 node leaves the glitch types of 3.x */
	struct peers_wire_table t = table_of(PEERS_WIRE_KEY_IPV4, 4,
					     PEERS_WIRE_DT_BIT(PEERS_WIRE_DT_CONN_CNT) |
						     PEERS_WIRE_DT_BIT(27));
	static struct peers_wire_update u;
	enum peers_wire_err err;

	cr_assert_eq(update_payload(0x80, B("\x00\x00\x00\x02\x7f\x00\x00\x01\x05\x01\x02\x03"), &t,
				    &u, &err),
		     9);
	cr_assert_eq(u.decoded, PEERS_WIRE_DT_BIT(PEERS_WIRE_DT_CONN_CNT));
	cr_assert_eq(u.trailing, 3);
	cr_assert_eq(u.u[PEERS_WIRE_DT_CONN_CNT], 5);
	t.data = PEERS_WIRE_DT_BIT(PEERS_WIRE_DT_CONN_CNT);
	cr_assert_eq(update_payload(0x80, B("\x00\x00\x00\x02\x7f\x00\x00\x01\x05\x01"), &t, &u, &err), 9);
	cr_assert_eq(u.trailing, 1);
}

/* ---- acks and switches ---- */

Test(ack, capture_and_truncations)
{
	struct peers_wire_msg m;
	uint64_t table = 0;
	uint32_t id = 0;
	uint8_t buf[16];
	struct peers_wire_writer w;
	enum peers_wire_err err;

	msg_whole(B(cap_ack), &m);
	cr_assert_eq(m.kind, PEERS_WIRE_MSG_ACK);
	cr_assert_eq(peers_wire_ack_decode(m.payload, m.len, &table, &id, NULL), 5);
	cr_assert_eq(table, 4);
	cr_assert_eq(id, 4);
	peers_wire_writer_init(&w, buf, sizeof(buf));
	cr_assert_eq(peers_wire_encode_ack(&w, 4, 4), 0);
	cr_assert_eq(w.len, sizeof(cap_ack) - 1);
	cr_assert_arr_eq(buf, cap_ack, w.len);
	for (size_t cut = 0; cut < 5; cut++) {
		err = PEERS_WIRE_ERR_NONE;
		cr_assert_eq(peers_wire_ack_decode(at_guard(cap_ack + 3, cut), cut, &table, &id, &err), -1);
		cr_assert_eq(err, PEERS_WIRE_ERR_TRUNCATED);
	}
	/* a 3.4 ack after incremental updates: the id as it came */
	cr_assert_eq(peers_wire_ack_decode(B("\x01\x01\x00\x00\x02"), &table, &id, NULL), 5);
	cr_assert_eq(id, 0x01000002);
	for (size_t cap = 0; cap < sizeof(cap_ack) - 1; cap++) {
		peers_wire_writer_init(&w, buf, cap);
		cr_assert_eq(peers_wire_encode_ack(&w, 4, 4), -1);
		cr_assert_eq(w.len, 0);
	}
}

Test(ack, switch_message)
{
	struct peers_wire_msg m;
	uint64_t table = 0;
	uint8_t buf[16];
	struct peers_wire_writer w;
	enum peers_wire_err err = PEERS_WIRE_ERR_NONE;

	peers_wire_writer_init(&w, buf, sizeof(buf));
	cr_assert_eq(peers_wire_encode_switch(&w, 1000), 0);
	cr_assert_eq(w.len, 5);
	cr_assert_arr_eq(buf, "\x0a\x83\x02\xf8\x2f", 5);
	msg_whole(buf, w.len, &m);
	cr_assert_eq(m.kind, PEERS_WIRE_MSG_SWITCH);
	cr_assert_eq(peers_wire_switch_decode(m.payload, m.len, &table, NULL), 2);
	cr_assert_eq(table, 1000);
	cr_assert_eq(peers_wire_switch_decode(at_guard("\xf8", 1), 1, &table, &err), -1);
	cr_assert_eq(err, PEERS_WIRE_ERR_TRUNCATED);
}

Test(encode, a_long_payload_gets_a_longer_length_and_the_limit_holds)
{
	struct peers_wire_table t = table_of(PEERS_WIRE_KEY_STRING, PEERS_WIRE_MSG_MAX, 0);
	static struct peers_wire_update u, back;
	static char key[PEERS_WIRE_MSG_MAX];
	static uint8_t buf[PEERS_WIRE_MSG_MAX + 16];
	struct peers_wire_writer w;

	memset(key, 'k', sizeof(key));
	u.has_id = true;
	u.key.ptr = (const uint8_t *)key;
	/* 4 + 1 + 234 = 239 bytes of payload: a 1-byte length; one more: 2 */
	u.key.len = 234;
	cr_assert_eq(through_the_wire(&t, &u, &back), 2 + 1 + 239);
	u.key.len = 235;
	cr_assert_eq(through_the_wire(&t, &u, &back), 2 + 2 + 240);
	cr_assert_eq(back.key.len, 235);
	/* 4 + 3 + len = PEERS_WIRE_MSG_MAX exactly, then one byte over */
	u.key.len = PEERS_WIRE_MSG_MAX - 7;
	peers_wire_writer_init(&w, buf, sizeof(buf));
	cr_assert_eq(peers_wire_encode_update(&w, &t, &u), 0);
	cr_assert_eq(w.len, 2 + 3 + PEERS_WIRE_MSG_MAX);
	u.key.len++;
	peers_wire_writer_init(&w, buf, sizeof(buf));
	cr_assert_eq(peers_wire_encode_update(&w, &t, &u), -1);
	cr_assert_eq(w.len, 0);
	/* a message after another keeps it */
	u.key.len = 300;
	peers_wire_writer_init(&w, buf, 2 + (2 + 2 + 4 + 2 + 300) + 2);
	cr_assert_eq(peers_wire_encode_ctrl(&w, PEERS_WIRE_MSG_HEARTBEAT), 0);
	cr_assert_eq(peers_wire_encode_update(&w, &t, &u), 0);
	cr_assert_eq(peers_wire_encode_ctrl(&w, PEERS_WIRE_MSG_HEARTBEAT), 0);
	cr_assert_eq(peers_wire_encode_ctrl(&w, PEERS_WIRE_MSG_HEARTBEAT), -1);
	cr_assert_arr_eq(buf, "\x00\x04\x0a\x80", 4);
}
