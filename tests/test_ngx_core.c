/*
 * test_ngx_core.c - unit tests of the nginx module's SPOP client core
 * (agent/nginx_module/spoa_client.c), outside nginx: the HELLO it sends, the
 * handshake, NOTIFYs as the agent decodes them (hostile keys stay one
 * argument), ACKs matched by stream and frame id (late ones dropped,
 * pipelined ones in any order, fed byte by byte), the bounds (frame size,
 * out buffer, streams), the agent's DISCONNECT and malformed input; keys
 * sized to the agent's max-frame-size (whole when the NOTIFY fits, the
 * longest digested until it does, never over the frame) and their digest
 * (the agent's own, under the secret's key). Built with the project's
 * flags, run under ASan and UBSan by make test.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/nginx_module/spoa_client.h"
#include "agent/ratelimit.h"

/* The digest key of the test's connections. */
static const uint8_t fx_key[16] = "0123456789abcdef";

struct fx {
	struct sc_conn c;
	uint8_t in[SC_IN_SIZE];
	uint8_t out[SC_OUT_SIZE];
	struct sc_slot slots[SC_SLOTS];
};

static struct fx *fx_new(uint32_t nslots)
{
	struct fx *f = calloc(1, sizeof(*f));
	cr_assert(f);
	sc_conn_init(&f->c, f->in, sizeof(f->in), f->out, sizeof(f->out), f->slots, nslots, fx_key);
	return f;
}

/* Everything queued for the socket, copied to buf (cap bytes) and marked written. */
static size_t drain_out(struct fx *f, uint8_t *buf, size_t cap)
{
	const uint8_t *p;
	size_t n = sc_out_pending(&f->c, &p);
	cr_assert_leq(n, cap);
	memcpy(buf, p, n);
	sc_out_done(&f->c, n);
	return n;
}

/* Bytes from the agent, as a socket would hand them (in one piece or
 * several, as the room allows). */
static void feed(struct fx *f, const uint8_t *p, size_t n)
{
	while (n > 0) {
		uint8_t *dst;
		size_t room = sc_in_room(&f->c, &dst);
		cr_assert_gt(room, 0);
		if (room > n)
			room = n;
		memcpy(dst, p, room);
		sc_in_add(&f->c, room);
		p += room;
		n -= room;
	}
}

static void agent_hello(struct fx *f, uint32_t max_frame, const char *caps)
{
	uint8_t buf[512];
	struct spop_writer w;
	struct sc_event ev;

	spop_writer_init(&w, buf, sizeof(buf));
	cr_assert_eq(spop_encode_agent_hello(&w, max_frame, caps), 0);
	feed(f, buf, w.len);
	cr_assert_eq(sc_next(&f->c, &ev), 1);
	cr_assert_eq(ev.type, SC_EV_READY);
	cr_assert_eq(f->c.state, SC_READY);
	cr_assert_eq(sc_next(&f->c, &ev), 0);
}

/* A connection past its handshake, at the agent's max_frame. */
static struct fx *ready_at(uint32_t max_frame)
{
	struct fx *f = fx_new(SC_SLOTS);
	uint8_t buf[512];

	sc_conn_start(&f->c);
	drain_out(f, buf, sizeof(buf));
	agent_hello(f, max_frame, "pipelining");
	return f;
}

static struct fx *ready(void)
{
	return ready_at(SC_FRAME_SIZE);
}

/* An ACK frame: set-var txn for each (name, value) given. */
struct var {
	const char *name;
	struct spop_data v;
};

static size_t ack(uint8_t *buf, size_t cap, uint64_t sid, uint64_t fid, const struct var *v,
		  size_t n)
{
	struct spop_writer w;
	size_t start;

	spop_writer_init(&w, buf, cap);
	start = spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FL_FIN, sid, fid);
	for (size_t i = 0; i < n; i++)
		spop_put_set_var(&w, SPOP_SCOPE_TXN, v[i].name, strlen(v[i].name), &v[i].v);
	cr_assert_eq(spop_frame_end(&w, start, SPOP_DEFAULT_FRAME_SIZE), 0);
	return w.len;
}

static struct spop_data d_int(int64_t x)
{
	struct spop_data d = { .type = SPOP_DATA_INT64 };
	d.v.i = x;
	return d;
}

static struct spop_data d_bool(bool b)
{
	struct spop_data d = { .type = SPOP_DATA_BOOL };
	d.v.b = b;
	return d;
}

static struct spop_data d_str(const char *s)
{
	struct spop_data d = { .type = SPOP_DATA_STRING };
	d.v.str.ptr = s;
	d.v.str.len = strlen(s);
	return d;
}

static struct spop_str S(const char *s)
{
	struct spop_str x = { s, s ? strlen(s) : 0 };
	return x;
}

/* ---- what the agent decodes of a NOTIFY ---- */

struct arg {
	char name[16];
	enum spop_data_type type;
	uint64_t u;
	char str[2048];
	size_t len;
};

struct msg {
	char name[32];
	unsigned nargs;
	struct arg args[8];
};

struct notify {
	uint64_t sid, fid;
	size_t nmsgs;
	struct msg msgs[4];
};

/* Decodes one NOTIFY from p with the codec, as the agent does; returns
 * the bytes it took. */
static size_t decode_notify(const uint8_t *p, size_t len, struct notify *n)
{
	struct spop_frame fr;
	enum spop_err err;
	struct spop_cursor c, a;
	struct spop_msg m;
	struct spop_kv kv;
	int rc = spop_frame_decode(p, len, SPOP_DEFAULT_FRAME_SIZE, &fr, &err);

	cr_assert_gt(rc, 0, "a whole, valid frame");
	cr_assert_eq(fr.type, SPOP_FRAME_NOTIFY);
	cr_assert(fr.flags & SPOP_FL_FIN);
	memset(n, 0, sizeof(*n));
	n->sid = fr.stream_id;
	n->fid = fr.frame_id;
	spop_cursor_init(&c, fr.payload, fr.payload_len);
	while (spop_msg_next(&c, &m) == 1) {
		cr_assert_lt(n->nmsgs, sizeof(n->msgs) / sizeof(n->msgs[0]));
		struct msg *x = &n->msgs[n->nmsgs++];
		cr_assert_lt(m.name.len, sizeof(x->name));
		memcpy(x->name, m.name.ptr, m.name.len);
		x->nargs = m.nargs;
		spop_args_init(&a, &m);
		for (unsigned i = 0; spop_args_next(&a, &kv) == 1; i++) {
			struct arg *y = &x->args[i];
			cr_assert_lt(kv.name.len, sizeof(y->name));
			memcpy(y->name, kv.name.ptr, kv.name.len);
			y->type = kv.value.type;
			if (kv.value.type == SPOP_DATA_STRING) {
				cr_assert_leq(kv.value.v.str.len, sizeof(y->str));
				memcpy(y->str, kv.value.v.str.ptr, kv.value.v.str.len);
				y->len = kv.value.v.str.len;
			} else {
				cr_assert(spop_data_uint(&kv.value, &y->u));
			}
		}
	}
	cr_assert_eq(c.err, SPOP_ERR_NONE);
	return (size_t)rc;
}

static const struct arg *find_arg(const struct msg *m, const char *name)
{
	for (unsigned i = 0; i < m->nargs; i++)
		if (strcmp(m->args[i].name, name) == 0)
			return &m->args[i];
	return NULL;
}

/* ---- handshake ---- */

Test(hello, the_haproxy_hello_offers_2_0_our_frame_size_and_pipelining)
{
	struct fx *f = fx_new(SC_SLOTS);
	uint8_t buf[512];
	struct spop_frame fr;
	struct spop_hello h;
	enum spop_err err;
	size_t n;

	cr_assert_eq(f->c.state, SC_DOWN);
	sc_conn_start(&f->c);
	cr_assert_eq(f->c.state, SC_HELLO);
	n = drain_out(f, buf, sizeof(buf));
	cr_assert_eq(spop_frame_decode(buf, n, SPOP_DEFAULT_FRAME_SIZE, &fr, &err), (int)n);
	cr_assert_eq(fr.type, SPOP_FRAME_HAPROXY_HELLO);
	cr_assert_eq(spop_hello_decode(fr.payload, fr.payload_len, &h, &err), 0);
	cr_assert(spop_version_supported(h.supported_versions, "2.0"));
	cr_assert_eq(h.max_frame_size, SC_FRAME_SIZE);
	cr_assert(spop_has_capability(h.capabilities, "pipelining"));
	cr_assert_not(h.healthcheck);
	free(f);
}

Test(hello, no_notify_before_the_agent_hello)
{
	struct fx *f = fx_new(SC_SLOTS);
	struct sc_limit l = { .key = S("k"), .window = S("1") };
	uint32_t slot;

	cr_assert_eq(sc_send(&f->c, &l, 1, f, &slot), SC_NOT_READY);
	sc_conn_start(&f->c);
	cr_assert_eq(sc_send(&f->c, &l, 1, f, &slot), SC_NOT_READY);
	cr_assert_not(sc_can_send(&f->c));
	free(f);
}

Test(hello, the_agent_frame_size_applies)
{
	struct fx *f = fx_new(SC_SLOTS);
	uint8_t buf[512];

	sc_conn_start(&f->c);
	drain_out(f, buf, sizeof(buf));
	agent_hello(f, 1024, "pipelining");
	cr_assert_eq(f->c.max_frame, 1024);
	cr_assert_eq(f->c.max_inflight, SC_SLOTS);
	free(f);
}

Test(hello, without_pipelining_one_stream_at_a_time)
{
	struct fx *f = fx_new(SC_SLOTS);
	uint8_t buf[512];
	struct sc_limit l = { .key = S("k"), .window = S("1") };
	uint32_t s1, s2;

	sc_conn_start(&f->c);
	drain_out(f, buf, sizeof(buf));
	agent_hello(f, SC_FRAME_SIZE, "");
	cr_assert_eq(sc_send(&f->c, &l, 1, f, &s1), SC_SENT);
	cr_assert_not(sc_can_send(&f->c));
	cr_assert_eq(sc_send(&f->c, &l, 1, f, &s2), SC_BUSY);
	sc_cancel(&f->c, s1);
	cr_assert_eq(sc_send(&f->c, &l, 1, f, &s2), SC_SENT);
	free(f);
}

static void hello_refused(uint32_t max_frame, const char *version, enum spop_err want)
{
	struct fx *f = fx_new(SC_SLOTS);
	uint8_t buf[512];
	struct spop_writer w;
	struct sc_event ev;
	size_t start;

	sc_conn_start(&f->c);
	drain_out(f, buf, sizeof(buf));
	spop_writer_init(&w, buf, sizeof(buf));
	start = spop_frame_begin(&w, SPOP_FRAME_AGENT_HELLO, SPOP_FL_FIN, 0, 0);
	spop_put_kv_str(&w, "version", version, strlen(version));
	spop_put_kv_uint32(&w, "max-frame-size", max_frame);
	spop_put_kv_str(&w, "capabilities", "pipelining", 10);
	cr_assert_eq(spop_frame_end(&w, start, 512), 0);
	feed(f, buf, w.len);
	cr_assert_eq(sc_next(&f->c, &ev), -1);
	cr_assert_eq(f->c.err, want);
	cr_assert(f->c.why);
	free(f);
}

Test(hello, refused_without_2_0_or_with_a_frame_size_out_of_bounds)
{
	hello_refused(SC_FRAME_SIZE, "1.0", SPOP_ERR_BAD_VSN);
	hello_refused(255, "2.0", SPOP_ERR_BAD_FRAME_SIZE);
	hello_refused(SC_FRAME_SIZE + 1, "2.0", SPOP_ERR_BAD_FRAME_SIZE);
}

Test(hello, a_second_agent_hello_is_an_error)
{
	struct fx *f = ready();
	uint8_t buf[512];
	struct spop_writer w;
	struct sc_event ev;

	spop_writer_init(&w, buf, sizeof(buf));
	cr_assert_eq(spop_encode_agent_hello(&w, SC_FRAME_SIZE, "pipelining"), 0);
	feed(f, buf, w.len);
	cr_assert_eq(sc_next(&f->c, &ev), -1);
	cr_assert_eq(f->c.err, SPOP_ERR_INVALID);
	free(f);
}

/* ---- NOTIFY ---- */

Test(notify, one_limit_is_one_message_with_typed_arguments)
{
	struct fx *f = ready();
	struct sc_limit l = { .key = S("10.0.0.1"), .window = S("60"), .limit = S("100"),
			      .ns = S("per-ip"), .cost = S("0.5") };
	uint8_t buf[4096];
	static struct notify n;
	uint32_t slot;
	size_t len;

	cr_assert_eq(sc_send(&f->c, &l, 1, f, &slot), SC_SENT);
	cr_assert_eq(f->c.inflight, 1);
	len = drain_out(f, buf, sizeof(buf));
	cr_assert_eq(decode_notify(buf, len, &n), len);
	cr_assert_eq(n.sid, slot);
	cr_assert_eq(n.fid, f->slots[slot].gen);
	cr_assert_eq(n.nmsgs, 1);
	cr_assert_str_eq(n.msgs[0].name, "ratelimit");
	cr_assert_eq(n.msgs[0].nargs, 5);
	const struct arg *a = find_arg(&n.msgs[0], "key");
	cr_assert(a && a->type == SPOP_DATA_STRING && a->len == 8 && memcmp(a->str, "10.0.0.1", 8) == 0);
	a = find_arg(&n.msgs[0], "window");
	cr_assert(a && a->type == SPOP_DATA_UINT64 && a->u == 60);
	a = find_arg(&n.msgs[0], "limit");
	cr_assert(a && a->type == SPOP_DATA_UINT64 && a->u == 100);
	a = find_arg(&n.msgs[0], "namespace");
	cr_assert(a && a->type == SPOP_DATA_STRING && strcmp(a->str, "per-ip") == 0);
	a = find_arg(&n.msgs[0], "cost");
	cr_assert(a && a->type == SPOP_DATA_STRING && strcmp(a->str, "0.5") == 0,
		  "a decimal cost goes as a string, the agent reads it");
	free(f);
}

/* A limit with a lease is a `release` message (docs/PROTOCOL.md,
 * "Leases"): its key, window, namespace and lease, no limit nor cost. */
Test(notify, a_limit_with_a_lease_is_a_release)
{
	struct fx *f = ready();
	const char *id = "00000000000000000000000000000001";
	struct sc_limit l[2] = {
		{ .key = S("10.0.0.1"), .window = S("1"), .limit = S("3"), .ns = S("inflight"),
		  .cost = S("1"), .lease = S(id) },
		{ .key = S("k2"), .window = S("60"), .limit = S("100") },
	};
	uint8_t buf[4096];
	static struct notify n;
	uint32_t slot;
	size_t len;

	cr_assert_eq(sc_send(&f->c, l, 2, f, &slot), SC_SENT);
	len = drain_out(f, buf, sizeof(buf));
	cr_assert_eq(decode_notify(buf, len, &n), len);
	cr_assert_eq(n.nmsgs, 2);
	cr_assert_str_eq(n.msgs[0].name, "release");
	cr_assert_eq(n.msgs[0].nargs, 4);
	const struct arg *a = find_arg(&n.msgs[0], "lease");
	cr_assert(a && a->type == SPOP_DATA_STRING && a->len == 32 && memcmp(a->str, id, 32) == 0);
	a = find_arg(&n.msgs[0], "namespace");
	cr_assert(a && strcmp(a->str, "inflight") == 0);
	cr_assert_null(find_arg(&n.msgs[0], "limit"));
	cr_assert_null(find_arg(&n.msgs[0], "cost"));
	cr_assert_str_eq(n.msgs[1].name, "ratelimit", "a limit without a lease: as ever");
	free(f);
}

/* A limit with a reservation is a `settle` message (docs/PROTOCOL.md,
 * "Costs known after the response"): the reservation and the actual
 * cost, no limit; a limit that reserves carries reserve=1. */
Test(notify, a_limit_with_a_reservation_is_a_settle)
{
	struct fx *f = ready();
	const char *id = "0102abcdef";
	struct sc_limit l[2] = {
		{ .key = S("acme"), .window = S("60"), .limit = S("1000"), .ns = S("llm"),
		  .cost = S("120"), .reservation = S(id) },
		{ .key = S("acme"), .window = S("60"), .ns = S("llm"), .cost = S("1000"),
		  .reserve = true },
	};
	uint8_t buf[4096];
	static struct notify n;
	uint32_t slot;
	size_t len;

	cr_assert_eq(sc_send(&f->c, l, 2, f, &slot), SC_SENT);
	len = drain_out(f, buf, sizeof(buf));
	cr_assert_eq(decode_notify(buf, len, &n), len);
	cr_assert_eq(n.nmsgs, 2);
	cr_assert_str_eq(n.msgs[0].name, "settle");
	const struct arg *a = find_arg(&n.msgs[0], "reservation");
	cr_assert(a && a->type == SPOP_DATA_STRING && a->len == strlen(id));
	a = find_arg(&n.msgs[0], "cost");
	cr_assert(a && a->type == SPOP_DATA_UINT64 && a->u == 120);
	cr_assert_null(find_arg(&n.msgs[0], "limit"));
	cr_assert_null(find_arg(&n.msgs[0], "reserve"));
	cr_assert_str_eq(n.msgs[1].name, "ratelimit");
	a = find_arg(&n.msgs[1], "reserve");
	cr_assert(a && a->type == SPOP_DATA_UINT64 && a->u == 1);
	free(f);
}

Test(notify, several_limits_one_notify_empty_keys_skipped)
{
	struct fx *f = ready();
	struct sc_limit l[4] = {
		{ .key = S("a"), .window = S("1"), .limit = S("10") },
		{ .key = S(""), .window = S("60"), .limit = S("5") },   /* empty: skipped */
		{ .key = { NULL, 0 }, .window = S("60") },              /* no key: skipped */
		{ .key = S("b"), .window = S("3600"), .ns = S("per-key") },
	};
	uint8_t buf[4096];
	static struct notify n;
	uint32_t slot;
	size_t len;

	cr_assert_eq(sc_count(l, 4), 2);
	cr_assert_eq(sc_send(&f->c, l, 4, f, &slot), SC_SENT);
	len = drain_out(f, buf, sizeof(buf));
	decode_notify(buf, len, &n);
	cr_assert_eq(n.nmsgs, 2);
	cr_assert_eq(n.msgs[0].nargs, 3);
	cr_assert_eq(find_arg(&n.msgs[0], "limit")->u, 10);
	cr_assert_eq(n.msgs[1].nargs, 3);
	cr_assert_eq(find_arg(&n.msgs[1], "window")->u, 3600);
	cr_assert_str_eq(find_arg(&n.msgs[1], "namespace")->str, "per-key");
	cr_assert_null(find_arg(&n.msgs[1], "limit"));
	cr_assert_eq(f->c.inflight, 1, "one decision, one stream");
	free(f);
}

Test(notify, all_keys_empty_sends_nothing)
{
	struct fx *f = ready();
	struct sc_limit l[2] = { { .key = S(""), .window = S("1") }, { .key = S(""), .window = S("2") } };
	const uint8_t *p;
	uint32_t slot;

	cr_assert_eq(sc_send(&f->c, l, 2, f, &slot), SC_NOTHING);
	cr_assert_eq(sc_out_pending(&f->c, &p), 0);
	cr_assert_eq(f->c.inflight, 0);
	free(f);
}

Test(notify, a_hostile_key_stays_one_argument)
{
	struct fx *f = ready();
	/* What a client may put in a header, including what the agent's
	 * other arguments are called and bytes of the framing itself. */
	static const char hostile[] = "k&cost=0&limit=1000000\x03" "key\x08\x01x\x00\r\nnamespace=other";
	struct sc_limit l = { .key = { hostile, sizeof(hostile) - 1 }, .window = S("1"), .limit = S("10") };
	uint8_t buf[4096];
	static struct notify n;
	uint32_t slot;
	size_t len;

	cr_assert_eq(sc_send(&f->c, &l, 1, f, &slot), SC_SENT);
	len = drain_out(f, buf, sizeof(buf));
	cr_assert_eq(decode_notify(buf, len, &n), len);
	cr_assert_eq(n.nmsgs, 1);
	cr_assert_eq(n.msgs[0].nargs, 3);
	const struct arg *a = find_arg(&n.msgs[0], "key");
	cr_assert_eq(a->len, sizeof(hostile) - 1);
	cr_assert_eq(memcmp(a->str, hostile, a->len), 0);
	cr_assert_eq(find_arg(&n.msgs[0], "limit")->u, 10);
	cr_assert_null(find_arg(&n.msgs[0], "cost"));
	cr_assert_null(find_arg(&n.msgs[0], "namespace"));
	free(f);
}

Test(notify, numbers_only_when_they_are_digits)
{
	struct fx *f = ready();
	struct sc_limit l = { .key = S("k"), .window = S("1x"), .limit = S("99999999999999999999"),
			      .cost = S("-1") };
	uint8_t buf[4096];
	static struct notify n;
	uint32_t slot;

	cr_assert_eq(sc_send(&f->c, &l, 1, f, &slot), SC_SENT);
	decode_notify(buf, drain_out(f, buf, sizeof(buf)), &n);
	cr_assert_eq(find_arg(&n.msgs[0], "window")->type, SPOP_DATA_STRING);
	cr_assert_eq(find_arg(&n.msgs[0], "limit")->type, SPOP_DATA_STRING, "20 digits: a string");
	cr_assert_eq(find_arg(&n.msgs[0], "cost")->type, SPOP_DATA_STRING);
	free(f);
}

Test(notify, too_big_for_the_frame_is_refused_not_cut)
{
	struct fx *f = ready_at(1024);
	static char ns[1100], key[2000];
	struct sc_limit l = { .key = { key, sizeof(key) }, .window = S("1"), .ns = { ns, sizeof(ns) } };
	uint32_t slot;
	const uint8_t *p;

	memset(ns, 'n', sizeof(ns));
	memset(key, 'x', sizeof(key));
	/* The operator's value alone is over the frame: no digest helps. */
	cr_assert_eq(sc_send(&f->c, &l, 1, f, &slot), SC_TOO_BIG);
	cr_assert_eq(sc_out_pending(&f->c, &p), 0, "nothing of it queued");
	cr_assert_eq(f->c.inflight, 0);
	l.ns.len = 900;
	cr_assert_eq(sc_send(&f->c, &l, 1, f, &slot), SC_SENT);
	free(f);
}

Test(notify, more_than_32_limits_is_too_big)
{
	struct fx *f = ready();
	struct sc_limit l[SC_MAX_LIMITS + 1];
	uint32_t slot;

	for (size_t i = 0; i < SC_MAX_LIMITS + 1; i++)
		l[i] = (struct sc_limit){ .key = S("k"), .window = S("1") };
	cr_assert_eq(sc_send(&f->c, l, SC_MAX_LIMITS + 1, f, &slot), SC_TOO_BIG);
	cr_assert_eq(sc_send(&f->c, l, SC_MAX_LIMITS, f, &slot), SC_SENT);
	free(f);
}

Test(notify, a_full_out_buffer_is_busy_then_takes_it_once_written)
{
	struct fx *f = ready();
	static char key[8000];
	struct sc_limit l = { .key = { key, sizeof(key) }, .window = S("1") };
	uint32_t slot;
	int sent = 0;
	const uint8_t *p;
	size_t n;

	memset(key, 'k', sizeof(key));
	while (sc_send(&f->c, &l, 1, f, &slot) == SC_SENT)
		sent++;
	cr_assert_eq(sent, (int)(SC_OUT_SIZE / (sizeof(key) + 30)), "as many as the buffer holds");
	cr_assert_eq(sc_send(&f->c, &l, 1, f, &slot), SC_BUSY);
	/* Part written: the rest moves to the front, room again. */
	n = sc_out_pending(&f->c, &p);
	sc_out_done(&f->c, n / 2);
	cr_assert_eq(sc_send(&f->c, &l, 1, f, &slot), SC_SENT);
	free(f);
}

Test(notify, streams_run_out_then_come_back)
{
	struct fx *f = fx_new(4);
	uint8_t buf[4096];
	struct sc_limit l = { .key = S("k"), .window = S("1") };
	uint32_t slot[5];

	sc_conn_start(&f->c);
	drain_out(f, buf, sizeof(buf));
	agent_hello(f, SC_FRAME_SIZE, "pipelining");
	for (int i = 0; i < 4; i++)
		cr_assert_eq(sc_send(&f->c, &l, 1, &slot[i], &slot[i]), SC_SENT);
	cr_assert_not(sc_can_send(&f->c));
	cr_assert_eq(sc_send(&f->c, &l, 1, &slot[4], &slot[4]), SC_BUSY);
	sc_cancel(&f->c, slot[2]);
	cr_assert_eq(sc_send(&f->c, &l, 1, &slot[4], &slot[4]), SC_SENT);
	cr_assert_eq(slot[4], slot[2], "the freed stream is taken again");
	free(f);
}

/* ---- ACK ---- */

Test(ack, matched_by_stream_and_frame_id_with_the_variables)
{
	struct fx *f = ready();
	struct sc_limit l = { .key = S("k"), .window = S("60"), .limit = S("5") };
	uint8_t buf[4096];
	static struct notify n;
	struct sc_event ev;
	uint32_t slot;
	int user;
	struct var v[] = {
		{ "exceeded", d_bool(true) }, { "rate", d_int(6) }, { "remaining", d_int(0) },
		{ "reset", d_int(42) }, { "limit", d_int(5) }, { "window", d_int(60) },
		{ "retry_after", d_int(7) }, { "degraded", d_bool(true) },
		{ "rate_other", d_int(99) }, { "error", d_str("bad\r\nthing\x01") },
	};

	cr_assert_eq(sc_send(&f->c, &l, 1, &user, &slot), SC_SENT);
	decode_notify(buf, drain_out(f, buf, sizeof(buf)), &n);
	feed(f, buf, ack(buf, sizeof(buf), n.sid, n.fid, v, sizeof(v) / sizeof(v[0])));
	cr_assert_eq(sc_next(&f->c, &ev), 1);
	cr_assert_eq(ev.type, SC_EV_ACK);
	cr_assert_eq(ev.user, &user);
	cr_assert_eq(ev.result.has, SC_HAS_EXCEEDED | SC_HAS_RATE | SC_HAS_REMAINING | SC_HAS_RESET |
		     SC_HAS_LIMIT | SC_HAS_WINDOW | SC_HAS_RETRY_AFTER | SC_HAS_ERROR);
	cr_assert(ev.result.exceeded);
	cr_assert(ev.result.degraded);
	cr_assert_eq(ev.result.rate, 6);
	cr_assert_eq(ev.result.remaining, 0);
	cr_assert_eq(ev.result.reset, 42);
	cr_assert_eq(ev.result.limit, 5);
	cr_assert_eq(ev.result.window, 60);
	cr_assert_eq(ev.result.retry_after, 7);
	cr_assert_eq(ev.result.error_len, 11);
	cr_assert_eq(memcmp(ev.result.error, "bad??thing?", 11), 0, "control bytes never reach nginx");
	cr_assert_eq(f->c.inflight, 0);
	cr_assert_eq(sc_next(&f->c, &ev), 0);
	free(f);
}

/* An ACK's `lease` (a concurrency limit's) is kept for the release. */
Test(ack, the_lease_is_kept)
{
	struct fx *f = ready();
	struct sc_limit l = { .key = S("k"), .window = S("1"), .ns = S("inflight") };
	uint8_t buf[4096];
	static struct notify n;
	struct sc_event ev;
	uint32_t slot;
	int user;
	struct var v[] = { { "exceeded", d_bool(false) },
			   { "lease", d_str("0123456789abcdef0123456789abcdef") } };

	cr_assert_eq(sc_send(&f->c, &l, 1, &user, &slot), SC_SENT);
	decode_notify(buf, drain_out(f, buf, sizeof(buf)), &n);
	feed(f, buf, ack(buf, sizeof(buf), n.sid, n.fid, v, sizeof(v) / sizeof(v[0])));
	cr_assert_eq(sc_next(&f->c, &ev), 1);
	cr_assert(ev.result.has & SC_HAS_LEASE);
	cr_assert_eq(ev.result.lease_len, 32);
	cr_assert_eq(memcmp(ev.result.lease, "0123456789abcdef0123456789abcdef", 32), 0);
	free(f);
}

/* An ACK's `reservation` is kept for the settle. */
Test(ack, the_reservation_is_kept)
{
	struct fx *f = ready();
	struct sc_limit l = { .key = S("k"), .window = S("60"), .ns = S("llm"), .reserve = true };
	uint8_t buf[4096];
	static struct notify n;
	struct sc_event ev;
	uint32_t slot;
	int user;
	struct var v[] = { { "exceeded", d_bool(false) }, { "reservation", d_str("01abcdef") } };

	cr_assert_eq(sc_send(&f->c, &l, 1, &user, &slot), SC_SENT);
	decode_notify(buf, drain_out(f, buf, sizeof(buf)), &n);
	feed(f, buf, ack(buf, sizeof(buf), n.sid, n.fid, v, sizeof(v) / sizeof(v[0])));
	cr_assert_eq(sc_next(&f->c, &ev), 1);
	cr_assert(ev.result.has & SC_HAS_RESERVATION);
	cr_assert_eq(ev.result.reservation_len, 8);
	cr_assert_eq(memcmp(ev.result.reservation, "01abcdef", 8), 0);
	free(f);
}

Test(ack, a_long_error_is_cut)
{
	struct fx *f = ready();
	struct sc_limit l = { .key = S("k"), .window = S("1") };
	char long_error[300];
	uint8_t buf[4096];
	struct sc_event ev;
	uint32_t slot;

	memset(long_error, 'e', sizeof(long_error) - 1);
	long_error[sizeof(long_error) - 1] = '\0';
	struct var v[] = { { "error", d_str(long_error) } };
	cr_assert_eq(sc_send(&f->c, &l, 1, f, &slot), SC_SENT);
	drain_out(f, buf, sizeof(buf));
	feed(f, buf, ack(buf, sizeof(buf), slot, f->slots[slot].gen, v, 1));
	cr_assert_eq(sc_next(&f->c, &ev), 1);
	cr_assert_eq(ev.result.error_len, SC_ERROR_MAX);
	cr_assert_eq(ev.result.has, SC_HAS_ERROR);
	free(f);
}

Test(ack, pipelined_answered_in_any_order_byte_by_byte)
{
	struct fx *f = ready();
	enum { N = 50 };
	int users[N];
	uint32_t slots[N];
	uint8_t notify[64 * 1024], acks[64 * 1024];
	size_t nlen, alen = 0, off = 0;
	uint64_t sid[N], fid[N];
	bool seen[N] = { false };
	int got = 0;

	for (int i = 0; i < N; i++) {
		char key[16];
		snprintf(key, sizeof(key), "k%d", i);
		struct sc_limit l = { .key = S(key), .window = S("1") };
		cr_assert_eq(sc_send(&f->c, &l, 1, &users[i], &slots[i]), SC_SENT);
	}
	cr_assert_eq(f->c.inflight, N);
	nlen = drain_out(f, notify, sizeof(notify));
	for (int i = 0; i < N; i++) {
		struct spop_frame fr;
		enum spop_err err;
		int rc = spop_frame_decode(notify + off, nlen - off, SPOP_DEFAULT_FRAME_SIZE, &fr, &err);
		cr_assert_gt(rc, 0);
		cr_assert_eq(fr.type, SPOP_FRAME_NOTIFY);
		sid[i] = fr.stream_id;
		fid[i] = fr.frame_id;
		off += (size_t)rc;
	}
	cr_assert_eq(off, nlen, "N frames back to back");
	/* ACKs in reverse order, each with its request's number as rate. */
	for (int i = N - 1; i >= 0; i--) {
		struct var v[] = { { "exceeded", d_bool(false) }, { "rate", d_int(i) } };
		alen += ack(acks + alen, sizeof(acks) - alen, sid[i], fid[i], v, 2);
	}
	for (size_t b = 0; b < alen; b++) {
		struct sc_event ev;
		int rc;
		feed(f, acks + b, 1);
		while ((rc = sc_next(&f->c, &ev)) == 1) {
			int i = (int)((int *)ev.user - users);
			cr_assert(i >= 0 && i < N && !seen[i]);
			cr_assert_eq(ev.result.rate, (uint64_t)i, "each ACK to its own request");
			seen[i] = true;
			got++;
		}
		cr_assert_eq(rc, 0);
	}
	cr_assert_eq(got, N);
	cr_assert_eq(f->c.inflight, 0);
	free(f);
}

Test(ack, a_late_ack_of_a_request_that_gave_up_is_dropped)
{
	struct fx *f = ready();
	struct sc_limit l = { .key = S("k"), .window = S("1") };
	uint8_t buf[4096];
	static struct notify old, fresh;
	struct sc_event ev;
	int a, b;
	uint32_t s1, s2;
	struct var late[] = { { "exceeded", d_bool(true) } };
	struct var ok[] = { { "exceeded", d_bool(false) } };
	size_t len;

	cr_assert_eq(sc_send(&f->c, &l, 1, &a, &s1), SC_SENT);
	decode_notify(buf, drain_out(f, buf, sizeof(buf)), &old);
	sc_cancel(&f->c, s1);                   /* timed out */
	cr_assert_eq(sc_send(&f->c, &l, 1, &b, &s2), SC_SENT);
	cr_assert_eq(s2, s1, "the stream is reused");
	decode_notify(buf, drain_out(f, buf, sizeof(buf)), &fresh);
	cr_assert_eq(fresh.sid, old.sid);
	cr_assert_neq(fresh.fid, old.fid, "with another frame-id");
	/* The late ACK (exceeded) then the fresh one (not exceeded). */
	len = ack(buf, sizeof(buf), old.sid, old.fid, late, 1);
	len += ack(buf + len, sizeof(buf) - len, fresh.sid, fresh.fid, ok, 1);
	feed(f, buf, len);
	cr_assert_eq(sc_next(&f->c, &ev), 1);
	cr_assert_eq(ev.user, &b);
	cr_assert_not(ev.result.exceeded, "b gets its own answer, not a's");
	cr_assert_eq(sc_next(&f->c, &ev), 0);
	/* A second ACK for b: dropped too. */
	feed(f, buf, ack(buf, sizeof(buf), fresh.sid, fresh.fid, late, 1));
	cr_assert_eq(sc_next(&f->c, &ev), 0);
	free(f);
}

static void collect(void *user, void *arg)
{
	int *count = arg;
	*(int *)user = 1;
	(*count)++;
}

Test(ack, fail_all_hands_back_every_stream_in_flight)
{
	struct fx *f = ready();
	struct sc_limit l = { .key = S("k"), .window = S("1") };
	int users[10] = { 0 }, count = 0;
	uint32_t slot;
	uint8_t buf[4096];
	struct sc_event ev;
	struct var v[] = { { "exceeded", d_bool(false) } };

	for (int i = 0; i < 10; i++)
		cr_assert_eq(sc_send(&f->c, &l, 1, &users[i], &slot), SC_SENT);
	sc_cancel(&f->c, 3);
	sc_conn_stop(&f->c);
	sc_fail_all(&f->c, collect, &count);
	cr_assert_eq(count, 9);
	for (int i = 0; i < 10; i++)
		cr_assert_eq(users[i], i == 3 ? 0 : 1);
	cr_assert_eq(f->c.inflight, 0);
	/* A new socket: the old streams' ACKs never match. */
	sc_conn_start(&f->c);
	drain_out(f, buf, sizeof(buf));
	agent_hello(f, SC_FRAME_SIZE, "pipelining");
	cr_assert_eq(sc_send(&f->c, &l, 1, &users[0], &slot), SC_SENT);
	feed(f, buf, ack(buf, sizeof(buf), slot, f->slots[slot].gen - 1, v, 1));
	cr_assert_eq(sc_next(&f->c, &ev), 0);
	free(f);
}

/* ---- the connection fails ---- */

static void expect_fail(struct fx *f, const uint8_t *p, size_t n, enum spop_err want)
{
	struct sc_event ev;

	feed(f, p, n);
	cr_assert_eq(sc_next(&f->c, &ev), -1);
	cr_assert_eq(f->c.err, want, "err %d, want %d (%s)", f->c.err, want, f->c.why);
	cr_assert(f->c.why);
}

Test(fail, agent_disconnect_says_why)
{
	struct fx *f = ready();
	uint8_t buf[512];
	struct spop_writer w;

	spop_writer_init(&w, buf, sizeof(buf));
	cr_assert_eq(spop_encode_agent_disconnect(&w, SPOP_ERR_TOO_BIG, "too big \x01"), 0);
	expect_fail(f, buf, w.len, SPOP_ERR_TOO_BIG);
	cr_assert_str_eq(f->c.detail, "too big ?");
	cr_assert(f->c.by_agent);
	free(f);
}

Test(fail, bad_frames_close_the_connection)
{
	struct fx *f;
	uint8_t buf[64];
	struct spop_writer w;
	size_t start;

	/* A length over our max-frame-size, refused on its 4 bytes. */
	f = ready();
	expect_fail(f, (const uint8_t *)"\x00\x01\x00\x00", 4, SPOP_ERR_TOO_BIG);
	free(f);
	/* A frame type a client does not take (a NOTIFY). */
	f = ready();
	spop_writer_init(&w, buf, sizeof(buf));
	start = spop_frame_begin(&w, SPOP_FRAME_NOTIFY, SPOP_FL_FIN, 0, 0);
	cr_assert_eq(spop_frame_end(&w, start, 64), 0);
	expect_fail(f, buf, w.len, SPOP_ERR_INVALID);
	free(f);
	/* Without FIN. */
	f = ready();
	spop_writer_init(&w, buf, sizeof(buf));
	start = spop_frame_begin(&w, SPOP_FRAME_ACK, 0, 0, 1);
	cr_assert_eq(spop_frame_end(&w, start, 64), 0);
	expect_fail(f, buf, w.len, SPOP_ERR_FRAG_NOT_SUPPORTED);
	free(f);
	/* A stream id we never used. */
	f = ready();
	spop_writer_init(&w, buf, sizeof(buf));
	start = spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FL_FIN, SC_SLOTS, 1);
	cr_assert_eq(spop_frame_end(&w, start, 64), 0);
	expect_fail(f, buf, w.len, SPOP_ERR_FRAMEID_NOTFOUND);
	free(f);
	/* An ACK before the AGENT-HELLO. */
	f = fx_new(SC_SLOTS);
	sc_conn_start(&f->c);
	spop_writer_init(&w, buf, sizeof(buf));
	start = spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FL_FIN, 0, 1);
	cr_assert_eq(spop_frame_end(&w, start, 64), 0);
	expect_fail(f, buf, w.len, SPOP_ERR_INVALID);
	free(f);
	/* A malformed action list in an ACK. */
	f = ready();
	spop_writer_init(&w, buf, sizeof(buf));
	start = spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FL_FIN, 0, 1);
	spop_put_u8(&w, SPOP_ACT_SET_VAR);
	spop_put_u8(&w, 3);
	spop_put_u8(&w, SPOP_SCOPE_TXN);
	spop_put_varint(&w, 200);   /* a name longer than the frame */
	cr_assert_eq(spop_frame_end(&w, start, 64), 0);
	expect_fail(f, buf, w.len, SPOP_ERR_INVALID);
	free(f);
}

Test(fail, disconnect_is_queued_for_the_agent)
{
	struct fx *f = ready();
	uint8_t buf[512];
	struct spop_frame fr;
	struct spop_disconnect d;
	enum spop_err err;
	size_t n;

	cr_assert_eq(sc_disconnect(&f->c, SPOP_ERR_TIMEOUT), 0);
	n = drain_out(f, buf, sizeof(buf));
	cr_assert_eq(spop_frame_decode(buf, n, SPOP_DEFAULT_FRAME_SIZE, &fr, &err), (int)n);
	cr_assert_eq(fr.type, SPOP_FRAME_HAPROXY_DISCONNECT);
	cr_assert_eq(spop_disconnect_decode(fr.payload, fr.payload_len, &d, &err), 0);
	cr_assert_eq(d.status_code, SPOP_ERR_TIMEOUT);
	free(f);
}

/* Random bytes from the "agent": never a crash or an overread (ASan),
 * never an event for a stream not in flight. */
Test(fail, random_input_is_survived)
{
	struct sc_limit l = { .key = S("k"), .window = S("1") };
	uint32_t seed = 12345;
	uint8_t junk[4096];

	for (int round = 0; round < 300; round++) {
		struct fx *f = ready();
		int user = 0;
		uint32_t slot;
		struct sc_event ev;
		int rc = 0;

		cr_assert_eq(sc_send(&f->c, &l, 1, &user, &slot), SC_SENT);
		for (size_t i = 0; i < sizeof(junk); i++) {
			seed = seed * 1103515245u + 12345u;
			junk[i] = (uint8_t)(seed >> 16);
		}
		/* Sometimes a plausible header: small length, ACK, FIN, stream 0. */
		if (round % 2) {
			junk[0] = 0; junk[1] = 0; junk[2] = 0; junk[3] = (uint8_t)(7 + round % 40);
			junk[4] = SPOP_FRAME_ACK; junk[5] = 0; junk[6] = 0; junk[7] = 0; junk[8] = 1;
			junk[9] = (uint8_t)slot; junk[10] = (uint8_t)(round % 3);
		}
		for (size_t off = 0; off < sizeof(junk) && rc >= 0; off += 97) {
			feed(f, junk + off, sizeof(junk) - off < 97 ? sizeof(junk) - off : 97);
			while ((rc = sc_next(&f->c, &ev)) == 1)
				cr_assert_eq(ev.user, &user);
		}
		free(f);
	}
}

/* ---- keys sized to the frame, their digest ---- */

/* The keys of one NOTIFY in buf, as the agent reads them: views into buf. */
struct sent {
	size_t frame_len;            /* the frame's LENGTH */
	size_t n;
	struct spop_str key[SC_MAX_LIMITS];
};

static void sent_keys(const uint8_t *buf, size_t len, uint32_t max_frame, struct sent *out)
{
	struct spop_frame fr;
	enum spop_err err;
	struct spop_cursor c, a;
	struct spop_msg m;
	struct spop_kv kv;

	cr_assert_eq(spop_frame_decode(buf, len, max_frame, &fr, &err), (int)len,
		     "one whole frame within the agent's max-frame-size (%u)", max_frame);
	out->frame_len = len - SPOP_LEN_SIZE;
	out->n = 0;
	spop_cursor_init(&c, fr.payload, fr.payload_len);
	while (spop_msg_next(&c, &m) == 1) {
		cr_assert_lt(out->n, SC_MAX_LIMITS);
		spop_args_init(&a, &m);
		while (spop_args_next(&a, &kv) == 1)
			if (kv.name.len == 3 && memcmp(kv.name.ptr, "key", 3) == 0)
				out->key[out->n] = kv.value.v.str;
		out->n++;
	}
	cr_assert_eq(c.err, SPOP_ERR_NONE);
}

/* Sends l[0..n) on f, reads back its keys; the stream is given back. */
static enum sc_send_rc send_keys(struct fx *f, const struct sc_limit *l, size_t n,
				 uint8_t *buf, size_t cap, struct sent *out)
{
	uint32_t slot;
	enum sc_send_rc rc = sc_send(&f->c, l, n, f, &slot);

	if (rc == SC_SENT) {
		sent_keys(buf, drain_out(f, buf, cap), f->c.max_frame, out);
		sc_cancel(&f->c, slot);
	}
	return rc;
}

static bool key_is(struct spop_str k, const char *p, size_t len)
{
	return k.len == len && memcmp(k.ptr, p, len) == 0;
}

static bool key_is_digest_of(struct spop_str k, const uint8_t dkey[16], const char *p, size_t len)
{
	char d[SC_DIGEST_LEN];

	hash_digest(dkey, p, len, d);
	return key_is(k, d, sizeof(d));
}

Test(keys, whole_when_the_notify_fits)
{
	static char key[16370];
	static uint8_t buf[SC_IN_SIZE];
	struct sc_limit l = { .key = { key, 970 }, .window = S("60"), .limit = S("10") };
	struct sent s;
	struct fx *f = ready_at(1024);

	memset(key, 'k', sizeof(key));
	cr_assert_eq(send_keys(f, &l, 1, buf, sizeof(buf), &s), SC_SENT);
	cr_assert(key_is(s.key[0], key, 970), "970 bytes fit a 1024-byte frame: whole (%zu)",
		  s.key[0].len);
	free(f);
	/* The agent's default frame: a key of 8000 bytes fits (nginx's
	 * largest header line by default), one of 16370 does not. */
	f = ready();
	l.key.len = 8000;
	cr_assert_eq(send_keys(f, &l, 1, buf, sizeof(buf), &s), SC_SENT);
	cr_assert(key_is(s.key[0], key, 8000));
	l.key.len = 16370;
	cr_assert_eq(send_keys(f, &l, 1, buf, sizeof(buf), &s), SC_SENT);
	cr_assert(key_is_digest_of(s.key[0], fx_key, key, 16370));
	free(f);
}

/* The case: a 1,000-byte key, the agent at max_frame_size 1024.
 * Before, the module sent it whole, over the frame: no decision. */
Test(keys, digested_when_the_notify_would_not_fit)
{
	static char key[1000];
	static uint8_t buf[2048];
	struct sc_limit l = { .key = { key, sizeof(key) }, .window = S("60"), .limit = S("10"),
			      .ns = S("per-key") };
	struct sent s;
	struct fx *f = ready_at(1024);

	memset(key, 'a', sizeof(key));
	cr_assert_eq(send_keys(f, &l, 1, buf, sizeof(buf), &s), SC_SENT);
	cr_assert_eq(s.n, 1);
	cr_assert(key_is_digest_of(s.key[0], fx_key, key, sizeof(key)), "sent as its digest");
	cr_assert_eq(s.key[0].ptr[0], '#');
	cr_assert_leq(s.frame_len, 1024);
	free(f);
}

Test(keys, the_longest_are_digested_until_it_fits)
{
	static char a[600], b[500], c[600];
	static uint8_t buf[2048];
	struct sc_limit l[3] = {
		{ .key = { a, sizeof(a) }, .window = S("1") },
		{ .key = { b, sizeof(b) }, .window = S("1") },
		{ .key = S("short"), .window = S("1") },
	};
	struct sent s;
	struct fx *f = ready_at(1024);

	memset(a, 'a', sizeof(a));
	memset(b, 'b', sizeof(b));
	memset(c, 'c', sizeof(c));
	cr_assert_eq(send_keys(f, l, 3, buf, sizeof(buf), &s), SC_SENT);
	cr_assert(key_is_digest_of(s.key[0], fx_key, a, sizeof(a)), "the longest: digested");
	cr_assert(key_is(s.key[1], b, sizeof(b)), "then it fits: the next stays whole");
	cr_assert(key_is(s.key[2], "short", 5));
	/* Two of 600 and one of 500: the two longest go (the first of equals
	 * first), the 500 bytes fit beside their digests. */
	l[1].key = (struct spop_str){ c, sizeof(c) };
	l[2].key = (struct spop_str){ b, sizeof(b) };
	cr_assert_eq(send_keys(f, l, 3, buf, sizeof(buf), &s), SC_SENT);
	cr_assert(key_is_digest_of(s.key[0], fx_key, a, sizeof(a)));
	cr_assert(key_is_digest_of(s.key[1], fx_key, c, sizeof(c)));
	cr_assert(key_is(s.key[2], b, sizeof(b)));
	free(f);
}

/* Sizes of every kind against the agent's frame sizes, its smallest
 * (256) included: a NOTIFY is never over the frame; its keys are whole
 * when the whole NOTIFY fits, else every digested key is at least as long
 * as every key left whole (longer than a digest); it is refused only when
 * it cannot fit with every key digested (sc_notify_need over the frame),
 * and always sent when sc_notify_need is within it. */
Test(keys, never_over_the_negotiated_frame)
{
	static const uint32_t frames[] = { 256, 300, 512, 1024, 2500, 4096, 16380 };
	static char key[SC_MAX_LIMITS][9000];
	static uint8_t buf[SC_IN_SIZE];
	struct sc_limit l[SC_MAX_LIMITS];
	uint64_t seed = 42;
	size_t sent = 0, refused = 0, digested = 0, whole_long = 0;

	for (size_t i = 0; i < SC_MAX_LIMITS; i++)
		memset(key[i], (int)('a' + i % 26), sizeof(key[i]));
	for (size_t fi = 0; fi < sizeof(frames) / sizeof(frames[0]); fi++) {
		struct fx *f = ready_at(frames[fi]);

		for (int round = 0; round < 300; round++) {
			size_t n;
			uint32_t lens[SC_MAX_LIMITS];
			struct sent s;

			seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
			n = 1 + (seed >> 33) % (round < 150 ? 4 : SC_MAX_LIMITS);
			for (size_t i = 0; i < n; i++) {
				seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
				/* Short, near a digest's length, long, very long. */
				switch ((seed >> 20) % 4) {
				case 0: lens[i] = 1 + (seed >> 40) % 40; break;
				case 1: lens[i] = 30 + (seed >> 40) % 8; break;
				case 2: lens[i] = 40 + (seed >> 40) % 1200; break;
				default: lens[i] = 1 + (seed >> 40) % 9000; break;
				}
				l[i] = (struct sc_limit){ .key = { key[i], lens[i] }, .window = S("3600"),
							  .limit = S("1000") };
				if (i % 3 == 1)
					l[i].ns = S("per-key");
				if (i % 5 == 2)
					l[i].cost = S("0.5");
			}
			size_t need = sc_notify_need(l, n);
			enum sc_send_rc rc = send_keys(f, l, n, buf, sizeof(buf), &s);

			if (rc == SC_TOO_BIG) {
				cr_assert_gt(need, frames[fi], "refused only when it cannot fit");
				refused++;
				continue;
			}
			cr_assert_eq(rc, SC_SENT, "frame %u, %zu limits: need %zu", frames[fi], n, need);
			cr_assert_eq(s.n, n);
			cr_assert_leq(s.frame_len, frames[fi]);
			sent++;
			size_t min_dig = SIZE_MAX, max_whole_long = 0, nd = 0;
			for (size_t i = 0; i < n; i++) {
				if (key_is(s.key[i], key[i], lens[i])) {
					if (lens[i] > SC_DIGEST_LEN && lens[i] > max_whole_long)
						max_whole_long = lens[i];
					continue;
				}
				cr_assert(key_is_digest_of(s.key[i], fx_key, key[i], lens[i]),
					  "a key goes whole or as its digest");
				cr_assert_gt(lens[i], SC_DIGEST_LEN, "only a key longer than a digest");
				if (lens[i] < min_dig)
					min_dig = lens[i];
				nd++;
			}
			cr_assert_geq(min_dig, max_whole_long, "the longest are digested first");
			if (nd == 0)
				whole_long += max_whole_long > 0;
			digested += nd;
		}
		free(f);
	}
	cr_assert_gt(sent, 1000);
	cr_assert_gt(refused, 0, "the smallest frames refuse many limits");
	cr_assert_gt(digested, 100);
	cr_assert_gt(whole_long, 100, "long keys go whole when they fit");
}

/* A key digested only when the whole NOTIFY is over the frame: the same
 * request whole one byte below, digested one byte above. */
Test(keys, whole_up_to_the_last_byte_of_the_frame)
{
	static char key[2000];
	static uint8_t buf[4096];
	struct sc_limit l = { .key = { key, 100 }, .window = S("60") };
	struct sent s;
	struct fx *f = ready_at(1024);
	size_t len;

	memset(key, 'z', sizeof(key));
	cr_assert_eq(send_keys(f, &l, 1, buf, sizeof(buf), &s), SC_SENT);
	/* The frame without its key's bytes, then the longest whole key. */
	len = 1024 - (s.frame_len - 100);
	/* (a key's length prefix grows from 1 to 2 bytes at 240) */
	len -= 1;
	l.key.len = len;
	cr_assert_eq(send_keys(f, &l, 1, buf, sizeof(buf), &s), SC_SENT);
	cr_assert(key_is(s.key[0], key, len), "%zu bytes: whole", len);
	cr_assert_eq(s.frame_len, 1024, "the frame is full");
	l.key.len = len + 1;
	cr_assert_eq(send_keys(f, &l, 1, buf, sizeof(buf), &s), SC_SENT);
	cr_assert(key_is_digest_of(s.key[0], fx_key, key, len + 1), "one byte more: digested");
	free(f);
}

/* What fits the agent's smallest max_frame_size (256, its configuration's
 * lower bound) and what SC_MAX_LIMITS limits need, with every key digested
 * (docs/NGINX.md quotes these). */
Test(keys, the_worst_case_against_the_smallest_frame)
{
	static char key[5000];
	static uint8_t buf[SC_IN_SIZE];
	struct sc_limit l[SC_MAX_LIMITS];
	struct sent s;
	struct fx *f = ready_at(SPOP_MIN_FRAME_SIZE);

	memset(key, 'w', sizeof(key));
	for (size_t i = 0; i < SC_MAX_LIMITS; i++)
		l[i] = (struct sc_limit){ .key = { key, sizeof(key) }, .window = S("3600"),
					  .limit = S("1000") };
	cr_assert_leq(sc_notify_need(l, 3), SPOP_MIN_FRAME_SIZE);
	cr_assert_gt(sc_notify_need(l, 4), SPOP_MIN_FRAME_SIZE);
	cr_assert_eq(send_keys(f, l, 3, buf, sizeof(buf), &s), SC_SENT,
		     "3 limits of key, window and limit fit 256 bytes, every key digested");
	cr_assert_eq(send_keys(f, l, 4, buf, sizeof(buf), &s), SC_TOO_BIG);
	/* Each 70 bytes (name and NB-ARGS 11, key 39, window 11, limit 9),
	 * the frame's metadata at most 15. */
	cr_assert_eq(sc_notify_need(l, SC_MAX_LIMITS), 32 * 70 + 15,
		     "32 such limits: %zu bytes", sc_notify_need(l, SC_MAX_LIMITS));
	free(f);
	f = ready_at((uint32_t)sc_notify_need(l, SC_MAX_LIMITS));
	cr_assert_eq(send_keys(f, l, SC_MAX_LIMITS, buf, sizeof(buf), &s), SC_SENT);
	for (size_t i = 0; i < SC_MAX_LIMITS; i++)
		cr_assert(key_is_digest_of(s.key[i], fx_key, key, sizeof(key)));
	free(f);
}

/* The module's digest under spoa_ratelimit_key_secret S is the agent's
 * stored form of the same key under key_secret S (rl_stored_key: one
 * function, agent/hash.c), and the agent digests it again when it comes
 * as a key (it starts with '#'): a client sending that text, or the
 * 41-byte '#' + SHA-1 literal the module used to send, names neither the
 * key nor its digest. */
Test(keys, the_digest_is_the_agents_under_the_same_secret)
{
	static const char secret[] = "a secret of the operator's, 32 b";
	static char key[2000];
	static uint8_t buf[2048];
	/* 2000 x's through sha1sum: what the module sent for this key before */
	static const char sha1_literal[] = "#8e894dd1aef94637f347af568e934075a69d1b79";
	char err[256], stored[RL_STORED_KEY_MAX], again[RL_STORED_KEY_MAX];
	uint8_t dkey[16];
	struct sc_limit l = { .key = { key, sizeof(key) }, .window = S("60") };
	struct sent s;
	struct rl *rl = rl_new("test_ngx_core", 64, err, sizeof(err));
	struct fx *f;

	cr_assert(rl, "%s", err);
	rl_set_key_secret(rl, secret, sizeof(secret) - 1);
	memset(key, 'x', sizeof(key));
	hash_digest_key(secret, sizeof(secret) - 1, dkey);
	f = fx_new(SC_SLOTS);
	sc_conn_init(&f->c, f->in, sizeof(f->in), f->out, sizeof(f->out), f->slots, SC_SLOTS, dkey);
	sc_conn_start(&f->c);
	drain_out(f, buf, sizeof(buf));
	agent_hello(f, 1024, "pipelining");
	cr_assert_eq(send_keys(f, &l, 1, buf, sizeof(buf), &s), SC_SENT);

	cr_assert_eq(rl_stored_key(rl, key, sizeof(key), stored), SC_DIGEST_LEN);
	cr_assert(key_is(s.key[0], stored, SC_DIGEST_LEN),
		  "the module's digest is the agent's for the same secret");
	cr_assert_eq(rl_stored_key(rl, s.key[0].ptr, s.key[0].len, again), SC_DIGEST_LEN);
	cr_assert_neq(memcmp(again, stored, SC_DIGEST_LEN), 0, "the agent digests it again");
	cr_assert_not(key_is(s.key[0], sha1_literal, sizeof(sha1_literal) - 1),
		      "not the old SHA-1 form");
	cr_assert_eq(rl_stored_key(rl, sha1_literal, sizeof(sha1_literal) - 1, again), SC_DIGEST_LEN);
	cr_assert_neq(memcmp(again, s.key[0].ptr, SC_DIGEST_LEN), 0);
	cr_assert(s.key[0].ptr[0] == '#' && s.key[0].len == 33);
	rl_free(rl);
	free(f);
}

/* Another digest key (another secret, or the random one of another
 * configuration), another digest; the same key, the same digest. */
Test(keys, the_digest_depends_on_the_digest_key)
{
	static const uint8_t other[16] = "fedcba9876543210";
	static char key[3000];
	static uint8_t buf[2048];
	struct sc_limit l = { .key = { key, sizeof(key) }, .window = S("60") };
	struct sent s1, s2;
	char d1[SC_DIGEST_LEN];
	struct fx *f = ready_at(1024), *g = fx_new(SC_SLOTS);

	memset(key, 'q', sizeof(key));
	sc_conn_init(&g->c, g->in, sizeof(g->in), g->out, sizeof(g->out), g->slots, SC_SLOTS, other);
	sc_conn_start(&g->c);
	drain_out(g, buf, sizeof(buf));
	agent_hello(g, 1024, "pipelining");
	cr_assert_eq(send_keys(f, &l, 1, buf, sizeof(buf), &s1), SC_SENT);
	memcpy(d1, s1.key[0].ptr, sizeof(d1));
	cr_assert_eq(send_keys(f, &l, 1, buf, sizeof(buf), &s1), SC_SENT);
	cr_assert(key_is(s1.key[0], d1, sizeof(d1)), "the same key, the same digest");
	cr_assert_eq(send_keys(g, &l, 1, buf, sizeof(buf), &s2), SC_SENT);
	cr_assert(key_is_digest_of(s2.key[0], other, key, sizeof(key)));
	cr_assert_not(key_is(s2.key[0], d1, sizeof(d1)), "another digest key, another digest");
	free(f);
	free(g);
}
