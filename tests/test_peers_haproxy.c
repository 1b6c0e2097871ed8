/*
 * test_peers_haproxy.c - the peers protocol codec (agent/peers_wire.h)
 * with real peers: HAProxy 2.6 (Debian's) and 3.4
 * (../shared/peers/haproxy-3.4, or $HAPROXY3).
 *
 * HAProxy ("hap") lists the test ("agg") as a peer of a section with a
 * table of each key type that its requests track (t_*), and one of each
 * that nothing tracks (s_*): the test reads what the requests made in the
 * UPDATEs HAProxy pushes, then pushes s_* tables of its own and reads them
 * back in HAProxy's answer and on its stats socket. The session is driven
 * with the codec alone: hello, 200, the resync request answered, heartbeats,
 * confirms.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/peers_wire.h"
#include "tests/lib/clock.h"
#include "tests/lib/haproxyproc.h"
#include "tests/lib/httpc.h"
#include "tests/lib/port.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static struct peers_wire_str S(const char *s)
{
	return (struct peers_wire_str){ .ptr = s, .len = strlen(s) };
}

#define FAR_MS 20000   /* a failure bound: nothing here should take a second */

/* HAProxy's log, named by the failures (a test that fails leaves it). */
static const char *hap_log = "";

static const char peer_cfg[] =
	"global\n"
	"    nbthread 1\n"
	"    stats socket @SOCK@ level admin\n"
	"defaults\n"
	"    mode http\n"
	"    timeout client 10s\n"
	"    timeout server 10s\n"
	"    timeout connect 2s\n"
	"peers pp\n"
	"    peer hap 127.0.0.1:@PORT1@\n"
	"    peer agg 127.0.0.1:@AGG@\n"
	"    table t_ip type ip size 1k expire 60s store http_req_rate(10s),http_req_cnt,"
	"conn_rate(10s),conn_cnt,gpc0,gpc0_rate(10s),bytes_in_rate(10s)\n"
	"    table t_v6 type ipv6 size 1k expire 60s store http_req_cnt,http_req_rate(10s)\n"
	"    table t_int type integer size 1k expire 60s store gpc(2),gpc_rate(2,10s),http_req_cnt\n"
	"    table t_str type string len 32 size 1k expire 60s store http_req_cnt,"
	"http_req_rate(10s),gpt0\n"
	"    table s_ip type ip size 1k expire 60s store http_req_cnt,http_req_rate(10s)\n"
	"    table s_v6 type ipv6 size 1k expire 60s store http_req_cnt,http_req_rate(10s)\n"
	"    table s_int type integer size 1k expire 60s store http_req_cnt,http_req_rate(10s)\n"
	"    table s_str type string len 32 size 1k expire 60s store http_req_cnt,http_req_rate(10s)\n"
	"frontend fe\n"
	"    bind 127.0.0.1:@PORT0@\n"
	"    http-request return status 200 content-type text/plain lf-string "
	"\"ip=%[src,table_http_req_rate(pp/s_ip)]/%[src,table_http_req_cnt(pp/s_ip)] "
	"v6=%[req.hdr_ip(x-v6),table_http_req_rate(pp/s_v6)]/%[req.hdr_ip(x-v6),table_http_req_cnt(pp/s_v6)] "
	"int=%[req.hdr_val(x-int),table_http_req_rate(pp/s_int)]/%[req.hdr_val(x-int),table_http_req_cnt(pp/s_int)] "
	"str=%[req.hdr(x-str),table_http_req_rate(pp/s_str)]/%[req.hdr(x-str),table_http_req_cnt(pp/s_str)]\" "
	"if { path /read }\n"
	"    http-request track-sc0 req.hdr(x-str) table pp/t_str if { req.hdr(x-str) -m found }\n"
	"    http-request sc-set-gpt0(0) 7 if { req.hdr(x-str) -m found }\n"
	"    http-request track-sc0 src table pp/t_ip unless { req.hdr(x-str) -m found }\n"
	"    http-request sc-inc-gpc0(0) unless { req.hdr(x-str) -m found }\n"
	"    http-request track-sc1 req.hdr_ip(x-v6) table pp/t_v6 if { req.hdr(x-v6) -m found }\n"
	"    http-request track-sc2 req.hdr_val(x-int) table pp/t_int if { req.hdr(x-int) -m found }\n"
	"    http-request sc-inc-gpc(1,2) if { req.hdr(x-int) -m found }\n"
	"    http-request return status 200 content-type text/plain string ok\n";

/* The latest update of each key HAProxy pushed (copied: the session's
 * buffer moves). */
struct seen {
	char table[32];
	uint8_t key[64];
	size_t key_len;
	struct peers_wire_update u;
};

/* A table HAProxy defined on the session, its name copied. */
struct bound {
	char name[32];
	struct peers_wire_table t;
};

struct peer_sess {
	int fd;
	uint8_t in[65536];
	size_t len;
	int64_t sent_ms;
	struct bound tables[16];
	size_t ntables;
	int cur;                   /* the table of the updates, -1: none */
	uint32_t last_id;
	struct seen seen[16];
	size_t nseen;
	uint64_t acked[8];         /* the last id HAProxy acked per table id of ours */
	unsigned resync_requests, confirms, heartbeats;
	char hello_callee[32], hello_caller[32];
};

static void sess_send(struct peer_sess *s, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t k = send(s->fd, p, n, MSG_NOSIGNAL);

		if (k < 0 && errno == EINTR)
			continue;
		cr_assert_gt(k, 0, "send to HAProxy: %s", strerror(errno));
		p += k;
		n -= (size_t)k;
	}
	s->sent_ms = test_now_ms();
}

static void sess_send_writer(struct peer_sess *s, const struct peers_wire_writer *w)
{
	sess_send(s, w->buf, w->len);
}

static void sess_ctrl(struct peer_sess *s, enum peers_wire_msg_kind kind)
{
	uint8_t b[2];
	struct peers_wire_writer w;

	peers_wire_writer_init(&w, b, sizeof(b));
	cr_assert_eq(peers_wire_encode_ctrl(&w, kind), 0);
	sess_send_writer(s, &w);
}

/* Reads what arrived within wait_ms into s->in; false on EOF. */
static bool sess_read(struct peer_sess *s, int wait_ms)
{
	struct pollfd pfd = { .fd = s->fd, .events = POLLIN };
	ssize_t n;

	if (poll(&pfd, 1, wait_ms) <= 0)
		return true;
	n = recv(s->fd, s->in + s->len, sizeof(s->in) - s->len, 0);
	if (n < 0 && errno == EINTR)
		return true;
	if (n <= 0)
		return false;
	s->len += (size_t)n;
	return true;
}

static void sess_consume(struct peer_sess *s, size_t n)
{
	memmove(s->in, s->in + n, s->len - n);
	s->len -= n;
}

static struct seen *seen_slot(struct peer_sess *s, const char *table, const uint8_t *key, size_t n)
{
	for (size_t i = 0; i < s->nseen; i++)
		if (strcmp(s->seen[i].table, table) == 0 && s->seen[i].key_len == n &&
		    memcmp(s->seen[i].key, key, n) == 0)
			return &s->seen[i];
	cr_assert_lt(s->nseen, NELEM(s->seen));
	cr_assert_lt(strlen(table), sizeof(s->seen[0].table));
	memcpy(s->seen[s->nseen].table, table, strlen(table) + 1);
	cr_assert_leq(n, sizeof(s->seen[0].key));
	memcpy(s->seen[s->nseen].key, key, n);
	s->seen[s->nseen].key_len = n;
	return &s->seen[s->nseen++];
}

static void sess_define(struct peer_sess *s, const struct peers_wire_msg *m)
{
	struct peers_wire_table t;
	enum peers_wire_err err = PEERS_WIRE_ERR_NONE;
	struct bound *b = NULL;

	cr_assert_gt(peers_wire_define_decode(m->payload, m->len, &t, &err), 0, "DEFINE: %s",
		     peers_wire_err_str(err));
	for (size_t i = 0; i < s->ntables; i++)
		if (s->tables[i].t.id == t.id)
			b = &s->tables[i];
	if (!b) {
		cr_assert_lt(s->ntables, NELEM(s->tables));
		b = &s->tables[s->ntables++];
	}
	cr_assert_lt(t.name.len, sizeof(b->name));
	memcpy(b->name, t.name.ptr, t.name.len);
	b->name[t.name.len] = '\0';
	b->t = t;
	b->t.name = (struct peers_wire_str){ b->name, t.name.len };
	s->cur = (int)(b - s->tables);
}

static void sess_update(struct peer_sess *s, const struct peers_wire_msg *m)
{
	static struct peers_wire_update u;
	enum peers_wire_err err = PEERS_WIRE_ERR_NONE;
	struct bound *b;
	struct seen *slot;

	cr_assert_geq(s->cur, 0, "an update before any DEFINE");
	b = &s->tables[s->cur];
	cr_assert_gt(peers_wire_update_decode(m->type, m->payload, m->len, &b->t, &u, &err), 0,
		     "UPDATE of %s: %s", b->name, peers_wire_err_str(err));
	s->last_id = u.has_id ? u.id : s->last_id + 1;
	slot = seen_slot(s, b->name, u.key.ptr, u.key.len);
	slot->u = u;
	slot->u.key.ptr = slot->key;
}

/* Handles one message; answers what HAProxy waits for. */
static void sess_handle(struct peer_sess *s, const struct peers_wire_msg *m)
{
	uint64_t table;
	uint32_t id;

	switch (m->kind) {
	case PEERS_WIRE_MSG_RESYNCREQ:
		/* nothing to teach: done at once, or it pushes nothing */
		s->resync_requests++;
		sess_ctrl(s, PEERS_WIRE_MSG_RESYNCFINISHED);
		break;
	case PEERS_WIRE_MSG_RESYNCFINISHED:
	case PEERS_WIRE_MSG_RESYNCPARTIAL:
		sess_ctrl(s, PEERS_WIRE_MSG_RESYNCCONFIRM);
		break;
	case PEERS_WIRE_MSG_RESYNCCONFIRM:
		s->confirms++;
		break;
	case PEERS_WIRE_MSG_HEARTBEAT:
		s->heartbeats++;
		break;
	case PEERS_WIRE_MSG_DEFINE:
		sess_define(s, m);
		break;
	case PEERS_WIRE_MSG_UPDATE:
	case PEERS_WIRE_MSG_INCUPDATE:
	case PEERS_WIRE_MSG_UPDATE_TIMED:
	case PEERS_WIRE_MSG_INCUPDATE_TIMED:
		sess_update(s, m);
		break;
	case PEERS_WIRE_MSG_ACK:
		cr_assert_gt(peers_wire_ack_decode(m->payload, m->len, &table, &id, NULL), 0);
		if (table < NELEM(s->acked))
			s->acked[table] = id;
		break;
	case PEERS_WIRE_MSG_ERR_PROTOCOL:
	case PEERS_WIRE_MSG_ERR_SIZELIMIT:
		cr_assert_fail("HAProxy says our message was wrong: %s", peers_wire_msg_str(m->kind));
		break;
	default:
		break;
	}
}

/* Reads and handles messages for up to wait_ms, with a heartbeat after a
 * second of silence from us (HAProxy drops a peer silent for 5 s). */
static void sess_pump(struct peer_sess *s, int wait_ms)
{
	int64_t end = test_now_ms() + wait_ms;

	do {
		struct peers_wire_msg m;
		enum peers_wire_err err = PEERS_WIRE_ERR_NONE;
		int r;

		if (test_now_ms() - s->sent_ms >= 1000)
			sess_ctrl(s, PEERS_WIRE_MSG_HEARTBEAT);
		while ((r = peers_wire_msg_decode(s->in, s->len, PEERS_WIRE_MSG_MAX, &m, &err)) > 0) {
			sess_handle(s, &m);
			sess_consume(s, (size_t)r);
		}
		cr_assert_geq(r, 0, "from HAProxy: %s", peers_wire_err_str(err));
		cr_assert(sess_read(s, 20), "HAProxy closed the peer session (%s)", hap_log);
	} while (test_now_ms() < end);
}

/* Accepts HAProxy's connection, reads its hello, answers 200. */
static void sess_open(struct peer_sess *s, int lfd)
{
	struct pollfd pfd = { .fd = lfd, .events = POLLIN };
	struct peers_wire_hello h;
	enum peers_wire_err err = PEERS_WIRE_ERR_NONE;
	uint8_t b[8];
	struct peers_wire_writer w;
	int r;

	memset(s, 0, sizeof(*s));
	s->cur = -1;
	cr_assert_eq(poll(&pfd, 1, FAR_MS), 1, "HAProxy never called (%s)", hap_log);
	s->fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	cr_assert_geq(s->fd, 0);
	while ((r = peers_wire_hello_decode(s->in, s->len, &h, &err)) == 0)
		cr_assert(sess_read(s, FAR_MS) && s->len > 0, "no hello");
	cr_assert_gt(r, 0, "hello: %s", peers_wire_err_str(err));
	cr_assert_eq(h.major, 2);
	cr_assert_eq(h.minor, 1);
	snprintf(s->hello_callee, sizeof(s->hello_callee), "%.*s", (int)h.callee.len, h.callee.ptr);
	snprintf(s->hello_caller, sizeof(s->hello_caller), "%.*s", (int)h.caller.len, h.caller.ptr);
	sess_consume(s, (size_t)r);
	peers_wire_writer_init(&w, b, sizeof(b));
	cr_assert_eq(peers_wire_encode_status(&w, PEERS_WIRE_STATUS_OK), 0);
	sess_send_writer(s, &w);
}

static const struct bound *sess_table(const struct peer_sess *s, const char *name)
{
	for (size_t i = 0; i < s->ntables; i++)
		if (strcmp(s->tables[i].name, name) == 0)
			return &s->tables[i];
	return NULL;
}

/* Pumps until HAProxy pushed an update of (table, key) whose dt counter
 * reached want; returns it. */
static const struct peers_wire_update *sess_wait(struct peer_sess *s, const char *table,
						 const void *key, size_t n, unsigned dt, uint64_t want)
{
	int64_t end = test_now_ms() + FAR_MS;

	for (;;) {
		for (size_t i = 0; i < s->nseen; i++) {
			const struct seen *e = &s->seen[i];

			if (strcmp(e->table, table) == 0 && e->key_len == n && memcmp(e->key, key, n) == 0 &&
			    e->u.u[dt] == want)
				return &e->u;
		}
		cr_assert_lt(test_now_ms(), end, "no update of %s with %s = %llu (%s)", table,
			     peers_wire_dt_str(dt), (unsigned long long)want, hap_log);
		sess_pump(s, 50);
	}
}

static void request(struct peer_sess *s, int port, const char *target, const char *headers,
		    struct httpc_resp *r)
{
	const char *why = NULL;

	cr_assert_eq(httpc_get(port, target, headers, r, FAR_MS, &why), 0, "GET %s: %s", target, why);
	cr_assert_eq(r->status, 200);
	sess_pump(s, 0);
}

/* Pushes a table of ours (id), one key, http_req_cnt and http_req_rate
 * (age 0: the period starts now). */
static void push(struct peer_sess *s, uint64_t id, const char *name, enum peers_wire_key_type kt,
		 uint32_t key_len, struct peers_wire_key key, uint64_t cnt, uint64_t rate)
{
	static struct peers_wire_update u;
	struct peers_wire_table t = {
		.id = id, .name = S(name), .key_type = kt, .key_len = key_len,
		.data = PEERS_WIRE_DT_BIT(PEERS_WIRE_DT_HTTP_REQ_CNT) |
			PEERS_WIRE_DT_BIT(PEERS_WIRE_DT_HTTP_REQ_RATE),
		.has_expire = true, .expire = 60000,
	};
	uint8_t buf[256];
	struct peers_wire_writer w;

	t.period[PEERS_WIRE_DT_HTTP_REQ_RATE] = 10000;
	memset(&u, 0, sizeof(u));
	u.has_id = true;
	u.id = 1;
	u.key = key;
	u.u[PEERS_WIRE_DT_HTTP_REQ_CNT] = cnt;
	u.f[PEERS_WIRE_DT_HTTP_REQ_RATE] = (struct peers_wire_freq){ 0, rate, 0 };
	peers_wire_writer_init(&w, buf, sizeof(buf));
	cr_assert_eq(peers_wire_encode_define(&w, &t), 0);
	cr_assert_eq(peers_wire_encode_update(&w, &t, &u), 0);
	sess_send_writer(s, &w);
}

static int listen_loopback(int *port)
{
	struct sockaddr_in sa;
	socklen_t sl = sizeof(sa);
	int fd = test_loopback_socket(&sa, 0);

	cr_assert_geq(fd, 0);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(fd, 8), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	*port = ntohs(sa.sin_port);
	return fd;
}

static void check_define(const struct peer_sess *s, const char *name, enum peers_wire_key_type kt,
			 uint32_t key_len, uint64_t data)
{
	const struct bound *b = sess_table(s, name);

	cr_assert_not_null(b, "no DEFINE of %s", name);
	cr_assert_eq(b->t.key_type, kt, "%s", name);
	cr_assert_eq(b->t.key_len, key_len, "%s", name);
	cr_assert_eq(b->t.data, data, "%s", name);
	cr_assert_eq(b->t.expire, 60000, "%s", name);
	for (unsigned i = 0; i < PEERS_WIRE_DT_COUNT; i++) {
		enum peers_wire_enc e = peers_wire_dt_enc(i);

		if ((data & PEERS_WIRE_DT_BIT(i)) &&
		    (e == PEERS_WIRE_ENC_FREQ || e == PEERS_WIRE_ENC_ARRAY_FREQ))
			cr_assert_eq(b->t.period[i], 10000, "%s: %s", name, peers_wire_dt_str(i));
	}
}

#define DT(x) PEERS_WIRE_DT_BIT(PEERS_WIRE_DT_##x)

static void exchange_tables_with(int major)
{
	static struct peer_sess s;
	const char *bin = haproxyproc_binary(major);
	struct haproxyproc h;
	char agg[16], out[4096];
	const char *const vars[] = { "@AGG@", agg, NULL };
	const char *const args[] = { "-L", "hap", NULL };
	struct httpc_resp r;
	const struct peers_wire_update *u;
	static const uint8_t v6a[16] = { 0x20, 0x01, 0x0d, 0xb8, [15] = 1 };
	static const uint8_t v6b[16] = { 0x20, 0x01, 0x0d, 0xb8, [15] = 2 };
	int lport, lfd, i, st;

	if (!bin)
		cr_skip_test("no HAProxy %d.x here (%s)", major,
			     major == 2 ? "$HAPROXY, haproxy" : "$HAPROXY3, ../shared/peers/haproxy-3.4/haproxy");
	lfd = listen_loopback(&lport);
	snprintf(agg, sizeof(agg), "%d", lport);
	cr_assert_eq(haproxyproc_start(&h, bin, peer_cfg, vars, args, FAR_MS), 0, "%s", h.err);
	hap_log = h.log_path;
	sess_open(&s, lfd);
	cr_assert_str_eq(s.hello_callee, "agg");
	cr_assert_str_eq(s.hello_caller, "hap");

	/* HAProxy to us: 4 plain requests, 2 with an IPv6 key, 3 with an
	 * integer key (all 9 tracked by source too), 3 with a string key */
	for (i = 0; i < 4; i++)
		request(&s, h.port[0], "/", NULL, &r);
	for (i = 0; i < 2; i++)
		request(&s, h.port[0], "/", "x-v6: 2001:db8::1\r\n", &r);
	for (i = 0; i < 3; i++)
		request(&s, h.port[0], "/", "x-int: 42\r\n", &r);
	for (i = 0; i < 3; i++)
		request(&s, h.port[0], "/", "x-str: alpha\r\n", &r);

	u = sess_wait(&s, "/t_ip", "\x7f\x00\x00\x01", 4, PEERS_WIRE_DT_HTTP_REQ_CNT, 9);
	cr_assert_eq(u->u[PEERS_WIRE_DT_GPC0], 9);
	cr_assert_eq(u->f[PEERS_WIRE_DT_HTTP_REQ_RATE].curr + u->f[PEERS_WIRE_DT_HTTP_REQ_RATE].prev, 9);
	cr_assert_eq(u->f[PEERS_WIRE_DT_GPC0_RATE].curr + u->f[PEERS_WIRE_DT_GPC0_RATE].prev, 9);
	check_define(&s, "/t_ip", PEERS_WIRE_KEY_IPV4, 4,
		     DT(HTTP_REQ_RATE) | DT(HTTP_REQ_CNT) | DT(CONN_RATE) | DT(CONN_CNT) | DT(GPC0) |
			     DT(GPC0_RATE) | DT(BYTES_IN_RATE));

	u = sess_wait(&s, "/t_v6", v6a, 16, PEERS_WIRE_DT_HTTP_REQ_CNT, 2);
	cr_assert_eq(u->f[PEERS_WIRE_DT_HTTP_REQ_RATE].curr + u->f[PEERS_WIRE_DT_HTTP_REQ_RATE].prev, 2);
	check_define(&s, "/t_v6", PEERS_WIRE_KEY_IPV6, 16, DT(HTTP_REQ_CNT) | DT(HTTP_REQ_RATE));

	u = sess_wait(&s, "/t_int", "\x00\x00\x00\x2a", 4, PEERS_WIRE_DT_HTTP_REQ_CNT, 3);
	cr_assert_eq(u->key.integer, 42);
	cr_assert_eq(u->gpc[0], 0);
	cr_assert_eq(u->gpc[1], 3);
	cr_assert_eq(u->gpc_rate[1].curr + u->gpc_rate[1].prev, 3);
	cr_assert_eq(u->gpc_rate[0].curr + u->gpc_rate[0].prev, 0);
	check_define(&s, "/t_int", PEERS_WIRE_KEY_INTEGER, 4, DT(GPC) | DT(GPC_RATE) | DT(HTTP_REQ_CNT));
	cr_assert_eq(sess_table(&s, "/t_int")->t.nbelem[PEERS_WIRE_DT_GPC], 2);
	cr_assert_eq(sess_table(&s, "/t_int")->t.nbelem[PEERS_WIRE_DT_GPC_RATE], 2);

	u = sess_wait(&s, "/t_str", "alpha", 5, PEERS_WIRE_DT_HTTP_REQ_CNT, 3);
	cr_assert_eq(u->u[PEERS_WIRE_DT_GPT0], 7);
	cr_assert_eq(u->f[PEERS_WIRE_DT_HTTP_REQ_RATE].curr + u->f[PEERS_WIRE_DT_HTTP_REQ_RATE].prev, 3);
	check_define(&s, "/t_str", PEERS_WIRE_KEY_STRING, 33,
		     DT(HTTP_REQ_CNT) | DT(HTTP_REQ_RATE) | DT(GPT0));

	/* us to HAProxy: a table of each key type; HAProxy acks each, then
	 * shows the values in its answer and on its stats socket */
	push(&s, 1, "/s_ip", PEERS_WIRE_KEY_IPV4, 4,
	     (struct peers_wire_key){ (const uint8_t *)"\x7f\x00\x00\x01", 4, 0 }, 7, 42);
	push(&s, 2, "/s_v6", PEERS_WIRE_KEY_IPV6, 16, (struct peers_wire_key){ v6b, 16, 0 }, 8, 43);
	push(&s, 3, "/s_int", PEERS_WIRE_KEY_INTEGER, 4, (struct peers_wire_key){ NULL, 0, 7 }, 9, 44);
	push(&s, 4, "/s_str", PEERS_WIRE_KEY_STRING, 33,
	     (struct peers_wire_key){ (const uint8_t *)"beta", 4, 0 }, 10, 45);
	for (int64_t end = test_now_ms() + FAR_MS;
	     !(s.acked[1] == 1 && s.acked[2] == 1 && s.acked[3] == 1 && s.acked[4] == 1);) {
		cr_assert_lt(test_now_ms(), end, "HAProxy did not ack our updates: %llu %llu %llu %llu (%s)",
			     (unsigned long long)s.acked[1], (unsigned long long)s.acked[2],
			     (unsigned long long)s.acked[3], (unsigned long long)s.acked[4], hap_log);
		sess_pump(&s, 50);
	}
	request(&s, h.port[0], "/read", "x-v6: 2001:db8::2\r\nx-int: 7\r\nx-str: beta\r\n", &r);
	cr_assert_str_eq(r.body, "ip=42/7 v6=43/8 int=44/9 str=45/10", "HAProxy %d.x answered %s", major,
			 r.body);
	cr_assert_gt(haproxyproc_cli(&h, "show table pp/s_ip", out, sizeof(out), FAR_MS), 0);
	cr_assert(strstr(out, "key=127.0.0.1") && strstr(out, "http_req_cnt=7") &&
			  strstr(out, "http_req_rate(10000)=42"),
		  "show table pp/s_ip: %s", out);

	/* idle: HAProxy's heartbeat comes after 3 s, ours keep the session */
	for (int64_t end = test_now_ms() + FAR_MS; s.heartbeats == 0;) {
		cr_assert_lt(test_now_ms(), end, "no heartbeat from HAProxy");
		sess_pump(&s, 100);
	}
	cr_log_info("HAProxy %d.x: %u resync requests, %u confirms, %u heartbeats", major,
		    s.resync_requests, s.confirms, s.heartbeats);
	sess_pump(&s, 0);
	close(s.fd);
	close(lfd);
	st = haproxyproc_stop(&h, 5000, false);
	cr_assert(WIFEXITED(st) || (WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM), "HAProxy ended with status %d", st);
}

Test(real_peer, haproxy_2_6_pushes_its_tables_and_takes_ours, .timeout = 120)
{
	exchange_tables_with(2);
}

Test(real_peer, haproxy_3_4_pushes_its_tables_and_takes_ours, .timeout = 120)
{
	exchange_tables_with(3);
}
