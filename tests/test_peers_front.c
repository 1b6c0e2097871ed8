/*
 * test_peers_front.c - the peers front (agent/peers_front.c,
 * agent/peers_push.c) against a node the test plays with the codec
 * (agent/peers_wire.h), over a socket to the agent it runs: the hello and
 * its answers (200 and our resync request, 503 to a node that calls
 * another name, 501 / 502 to a bad hello), the resync both ways, an update
 * counted, acknowledged and pushed back into the into table (SWITCH and
 * DEFINE as HAProxy needs them), a state sent again or after a reconnect
 * counted once, tables the agent refuses (another period, unknown ones:
 * no acknowledgement), the bounds on a broken or hostile node (a hello
 * never finished, a message over the size limit, a malformed one, more
 * new keys than peers.node_keys), heartbeats. Real HAProxy nodes are
 * tests/e2e/peers_cluster.sh's.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/peers_wire.h"
#include "tests/lib/agenttest.h"
#include "tests/lib/clock.h"

#define FAR_MS 10000            /* a failure bound: nothing here takes a second */
#define W      600              /* the namespace's window: no window ends in a test */

/* "@HTTP_PORT@" is agentproc's second free port: the peers listener here. */
static const char agent_cfg[] =
	"{ \"frame_timeout_ms\": 300, \"log_level\": \"debug\","
	"  \"peers\": { \"listen\": \"127.0.0.1:@HTTP_PORT@\", \"name\": \"agg\","
	"              \"node_keys\": 16 },"
	"  \"namespaces\": [ { \"name\": \"api\", \"window_sizes\": [600],"
	"    \"haproxy_tables\": { \"from\": \"req_local\", \"into\": \"rl/req_cluster\" } } ] }";

/* The test's node: a socket to the agent and what it read. */
struct node {
	int fd;
	uint8_t in[1 << 17];
	size_t len;
	bool closed;
};

static void start(void)
{
	test_agent_start1(agent_cfg);
}

static void stop(void)
{
	test_agent_stop();
}

static void node_open(struct node *n)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)test_agent.http_port) };

	memset(n, 0, sizeof(*n));
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	n->fd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(n->fd, 0);
	cr_assert_eq(connect(n->fd, (struct sockaddr *)&a, sizeof(a)), 0, "%s", strerror(errno));
}

static void node_close(struct node *n)
{
	close(n->fd);
}

static void node_send(struct node *n, const void *p, size_t len)
{
	cr_assert_eq(send(n->fd, p, len, MSG_NOSIGNAL), (ssize_t)len, "%s", strerror(errno));
}

static void node_sendw(struct node *n, const struct peers_wire_writer *w)
{
	node_send(n, w->buf, w->len);
}

/* Reads what comes within wait_ms into n->in. false: nothing came. */
static bool node_read(struct node *n, int wait_ms)
{
	struct pollfd p = { .fd = n->fd, .events = POLLIN };

	if (n->closed || poll(&p, 1, wait_ms) <= 0)
		return false;
	ssize_t r = recv(n->fd, n->in + n->len, sizeof(n->in) - n->len, 0);
	if (r <= 0) {
		n->closed = true;
		return false;
	}
	n->len += (size_t)r;
	return true;
}

static void node_consume(struct node *n, size_t k)
{
	memmove(n->in, n->in + k, n->len - k);
	n->len -= k;
}

/* The status line answering our hello. */
static unsigned node_status(struct node *n)
{
	unsigned st = 0;
	enum peers_wire_err err;
	int64_t end = test_now_ms() + FAR_MS;
	int rc;

	while ((rc = peers_wire_status_decode(n->in, n->len, &st, &err)) == 0 && test_now_ms() < end)
		node_read(n, 100);
	cr_assert_gt(rc, 0, "a status line: %d (%s), %zu bytes", rc, peers_wire_err_str(err), n->len);
	node_consume(n, (size_t)rc);
	return st;
}

/* The next message of a kind among `want` (a bit per kind), heartbeats
 * and the kinds not wanted skipped; copied to m (payload into buf).
 * false when none comes within wait_ms. */
static bool node_next(struct node *n, uint32_t want, int wait_ms, struct peers_wire_msg *m,
		      uint8_t *buf)
{
	int64_t end = test_now_ms() + wait_ms;

	for (;;) {
		enum peers_wire_err err;
		int rc = peers_wire_msg_decode(n->in, n->len, PEERS_WIRE_MSG_MAX, m, &err);
		cr_assert_geq(rc, 0, "a message from the agent: %s", peers_wire_err_str(err));
		if (rc > 0) {
			bool wanted = want & (1u << m->kind);
			if (wanted && m->len)
				memcpy(buf, m->payload, m->len);
			m->payload = buf;
			node_consume(n, (size_t)rc);
			if (wanted)
				return true;
			continue;
		}
		if (test_now_ms() >= end || !node_read(n, (int)(end - test_now_ms())))
			return false;
	}
}

#define K(kind) (1u << PEERS_WIRE_MSG_##kind)

static void node_hello(struct node *n, const char *callee, const char *caller)
{
	char h[256];
	int k = snprintf(h, sizeof(h), "HAProxyS 2.1\n%s\n%s 4242 1\n", callee, caller);

	node_send(n, h, (size_t)k);
}

/* A table of ours: ip keys, http_req_rate over period ms. */
static struct peers_wire_table table(uint64_t id, const char *name, uint32_t period)
{
	struct peers_wire_table t = {
		.id = id, .name = { name, strlen(name) }, .key_type = PEERS_WIRE_KEY_IPV4,
		.key_len = 4, .data = PEERS_WIRE_DT_BIT(PEERS_WIRE_DT_HTTP_REQ_RATE),
		.has_expire = true, .expire = 60000,
	};
	t.period[PEERS_WIRE_DT_HTTP_REQ_RATE] = period;
	return t;
}

static void node_define(struct node *n, const struct peers_wire_table *t)
{
	uint8_t b[256];
	struct peers_wire_writer w;

	peers_wire_writer_init(&w, b, sizeof(b));
	cr_assert_eq(peers_wire_encode_define(&w, t), 0);
	node_sendw(n, &w);
}

static void node_ctrl(struct node *n, enum peers_wire_msg_kind kind)
{
	uint8_t b[2];
	struct peers_wire_writer w;

	peers_wire_writer_init(&w, b, sizeof(b));
	cr_assert_eq(peers_wire_encode_ctrl(&w, kind), 0);
	node_sendw(n, &w);
}

/* An update of t, update id id, key a.b.c.d, rate (age, curr, prev). */
static void node_update(struct node *n, const struct peers_wire_table *t, uint32_t id,
			const uint8_t ip[4], uint64_t age, uint64_t curr, uint64_t prev)
{
	static struct peers_wire_update u;
	uint8_t b[128];
	struct peers_wire_writer w;

	u.has_id = true;
	u.id = id;
	u.key.ptr = ip;
	u.key.len = 4;
	u.f[PEERS_WIRE_DT_HTTP_REQ_RATE] = (struct peers_wire_freq){ age, curr, prev };
	peers_wire_writer_init(&w, b, sizeof(b));
	cr_assert_eq(peers_wire_encode_update(&w, t, &u), 0);
	node_sendw(n, &w);
}

static const uint8_t ip1[4] = { 192, 0, 2, 1 };
static struct peers_wire_table from, into;

/* A node "nodeA" up: hello, 200 and the agent's resync request; ours
 * answered at once (00 01: it knows no into table yet); our dump (the
 * DEFINEs of both tables, from last: the updates that follow are its)
 * confirmed (00 03), then the agent's DEFINE of the into table, as ours. */
static void node_up(struct node *n, const char *caller)
{
	struct peers_wire_msg m;
	static uint8_t buf[PEERS_WIRE_MSG_MAX];
	struct peers_wire_table t;
	enum peers_wire_err err;

	from = table(3, "/req_local", W * 1000);
	into = table(4, "/req_cluster", W * 1000);
	node_open(n);
	node_hello(n, "agg", caller);
	cr_assert_eq(node_status(n), 200);
	cr_assert(node_next(n, K(RESYNCREQ), FAR_MS, &m, buf), "the agent asks for our tables");
	node_ctrl(n, PEERS_WIRE_MSG_RESYNCREQ);
	cr_assert(node_next(n, K(RESYNCFINISHED), FAR_MS, &m, buf), "our request answered");
	node_define(n, &into);
	node_define(n, &from);          /* the current table: our updates follow */
	node_ctrl(n, PEERS_WIRE_MSG_RESYNCFINISHED);
	cr_assert(node_next(n, K(RESYNCCONFIRM), FAR_MS, &m, buf), "our dump confirmed");
	cr_assert(node_next(n, K(DEFINE), FAR_MS, &m, buf), "the agent defines the into table");
	cr_assert_gt(peers_wire_define_decode(m.payload, m.len, &t, &err), 0);
	cr_assert_eq(t.name.len, 12);
	cr_assert_eq(memcmp(t.name.ptr, "/req_cluster", 12), 0);
	cr_assert_eq(t.key_type, PEERS_WIRE_KEY_IPV4);
	cr_assert_eq(t.data, PEERS_WIRE_DT_BIT(PEERS_WIRE_DT_HTTP_REQ_RATE));
}

/* The next push of the into table: its curr (prev must be 0 here). */
static uint64_t node_pushed(struct node *n)
{
	struct peers_wire_msg m;
	static uint8_t buf[PEERS_WIRE_MSG_MAX];
	static struct peers_wire_update u;
	enum peers_wire_err err;
	struct peers_wire_table t = into;

	cr_assert(node_next(n, K(UPDATE), FAR_MS, &m, buf), "a push");
	cr_assert_gt(peers_wire_update_decode(m.type, m.payload, m.len, &t, &u, &err), 0, "%s",
		     peers_wire_err_str(err));
	cr_assert_eq(u.key.len, 4);
	cr_assert_eq(memcmp(u.key.ptr, ip1, 4), 0);
	cr_assert_lt(u.f[PEERS_WIRE_DT_HTTP_REQ_RATE].age, (uint64_t)W * 1000);
	cr_assert_eq(u.f[PEERS_WIRE_DT_HTTP_REQ_RATE].prev, 0);
	return u.f[PEERS_WIRE_DT_HTTP_REQ_RATE].curr;
}

/* The next ACK: its table id and update id. */
static void node_acked(struct node *n, uint64_t table_id, uint32_t id)
{
	struct peers_wire_msg m;
	static uint8_t buf[PEERS_WIRE_MSG_MAX];
	enum peers_wire_err err;
	uint64_t t;
	uint32_t got;

	cr_assert(node_next(n, K(ACK), FAR_MS, &m, buf), "an ack");
	cr_assert_gt(peers_wire_ack_decode(m.payload, m.len, &t, &got, &err), 0);
	cr_assert_eq(t, table_id);
	cr_assert_eq(got, id);
}

TestSuite(peers_front, .init = start, .fini = stop, .timeout = 60);

/* A node's update is counted, acknowledged, and pushed back into its into
 * table; the same state again, or after a reconnect, counts nothing
 * more; a later one adds what it holds more. */
Test(peers_front, an_update_counted_acknowledged_pushed_once)
{
	struct node n;

	node_up(&n, "nodeA");
	node_update(&n, &from, 1, ip1, 10, 3, 0);
	node_acked(&n, 3, 1);
	cr_assert_eq(node_pushed(&n), 3);
	node_update(&n, &from, 2, ip1, 10, 3, 0);
	node_acked(&n, 3, 2);
	node_close(&n);

	node_up(&n, "nodeA");
	cr_assert_eq(node_pushed(&n), 3, "taught on the new session: counted once");
	node_update(&n, &from, 7, ip1, 40, 3, 0);
	node_acked(&n, 3, 7);
	node_update(&n, &from, 8, ip1, 50, 5, 0);
	node_acked(&n, 3, 8);
	uint64_t v = node_pushed(&n);
	cr_assert_eq(v, 5, "3 then 2 more, whatever was sent again: %llu", (unsigned long long)v);
	node_close(&n);
}

/* Two nodes' parts add up, and each session gets the sum. */
Test(peers_front, two_nodes_add_up)
{
	struct node a, b;

	node_up(&a, "nodeA");
	node_up(&b, "nodeB");
	node_update(&a, &from, 1, ip1, 10, 4, 0);
	node_acked(&a, 3, 1);
	cr_assert_eq(node_pushed(&a), 4);
	node_update(&b, &from, 1, ip1, 10, 6, 0);
	node_acked(&b, 3, 1);
	uint64_t v = 0;
	for (int i = 0; i < 3 && v != 10; i++)
		v = node_pushed(&a);
	cr_assert_eq(v, 10, "node A reads both parts");
	node_close(&a);
	node_close(&b);
}

/* A node that calls another name is told so (503) and closed; a bad hello
 * gets its status (501, 502). */
Test(peers_front, a_wrong_hello_gets_its_status)
{
	static const struct {
		const char *hello;
		unsigned status;
	} cases[] = {
		{ "HAProxyS 2.1\nother\nnodeA 1 1\n", 503 },
		{ "HAProxyS 3.0\nagg\nnodeA 1 1\n", 502 },
		{ "HTTP/1.1 200\nagg\nnodeA 1 1\n", 501 },
		{ "HAProxyS 2.1\nagg\nnodeA\n", 501 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct node n;
		node_open(&n);
		node_send(&n, cases[i].hello, strlen(cases[i].hello));
		cr_assert_eq(node_status(&n), cases[i].status, "%s", cases[i].hello);
		int64_t end = test_now_ms() + FAR_MS;
		while (!n.closed && test_now_ms() < end)
			node_read(&n, 100);
		cr_assert(n.closed, "closed after %u", cases[i].status);
		node_close(&n);
	}
	cr_assert_geq(agentproc_log_lines(&test_agent, "answered 503", "peers.name"), 1);
}

/* A node that never finishes its hello is cut after frame_timeout_ms; one
 * that sends a message over HAProxy's size limit is told (01 01) and cut;
 * a malformed one (01 00) too. */
Test(peers_front, broken_nodes_are_cut)
{
	struct node n;
	struct peers_wire_msg m;
	static uint8_t buf[PEERS_WIRE_MSG_MAX];

	node_open(&n);
	node_send(&n, "HAProxyS 2.1\nagg\n", 17);
	int64_t t0 = test_now_ms();
	while (!n.closed && test_now_ms() - t0 < FAR_MS)
		node_read(&n, 100);
	cr_assert(n.closed, "a hello never finished is cut");
	cr_log_info("cut after %lld ms (frame_timeout_ms 300)", (long long)(test_now_ms() - t0));
	node_close(&n);

	node_up(&n, "nodeA");
	static const uint8_t big[] = { 0x0a, 0x80, 0xf8, 0xff, 0x07 };   /* length 18664 */
	node_send(&n, big, sizeof(big));
	cr_assert(node_next(&n, K(ERR_SIZELIMIT), FAR_MS, &m, buf), "01 01");
	node_close(&n);

	node_up(&n, "nodeA");
	static const uint8_t cut[] = { 0x0a, 0x80, 0x03, 0x00, 0x00, 0x00 };  /* no key */
	node_define(&n, &from);
	node_send(&n, cut, sizeof(cut));
	cr_assert(node_next(&n, K(ERR_PROTOCOL), FAR_MS, &m, buf), "01 00");
	node_close(&n);
}

/* Tables the agent does not count are ignored, as HAProxy ignores them:
 * one no namespace names, one of another period (said in the log); their
 * updates are never acknowledged, and the session goes on. */
Test(peers_front, tables_not_counted_are_never_acknowledged)
{
	struct node n;
	struct peers_wire_msg m;
	static uint8_t buf[PEERS_WIRE_MSG_MAX];
	struct peers_wire_table other = table(9, "/unknown", 10000);
	struct peers_wire_table wrong = table(3, "/req_local", 10000);

	node_up(&n, "nodeA");
	node_define(&n, &other);
	node_update(&n, &other, 1, ip1, 10, 3, 0);
	node_define(&n, &wrong);
	node_update(&n, &wrong, 1, ip1, 10, 3, 0);
	cr_assert_not(node_next(&n, K(ACK) | K(UPDATE), 500, &m, buf), "no ack, nothing pushed");
	cr_assert_geq(agentproc_log_lines(&test_agent, "over 10000 ms", "window is 600 s"), 1);
	node_define(&n, &from);
	node_update(&n, &from, 5, ip1, 10, 2, 0);
	node_acked(&n, 3, 5);
	cr_assert_eq(node_pushed(&n), 2, "the session went on");
	node_close(&n);
}

/* A node may bring at most peers.node_keys (16) new keys a window: the
 * 17th is not counted, and its acknowledgements stop. */
Test(peers_front, a_node_brings_at_most_node_keys_new_keys)
{
	struct node n;
	struct peers_wire_msg m;
	static uint8_t buf[PEERS_WIRE_MSG_MAX];
	int acks = 0;

	enum peers_wire_err err;
	uint64_t t;
	uint32_t id = 0;

	node_up(&n, "nodeA");
	node_define(&n, &from);
	for (uint32_t k = 1; k <= 16; k++) {
		uint8_t ip[4] = { 10, 0, 0, (uint8_t)k };
		node_update(&n, &from, k, ip, 10, 1, 0);
	}
	while (id < 16 && node_next(&n, K(ACK), FAR_MS, &m, buf))
		cr_assert_gt(peers_wire_ack_decode(m.payload, m.len, &t, &id, &err), 0);
	cr_assert_eq(id, 16, "16 new keys counted and acknowledged");
	for (uint32_t k = 17; k <= 20; k++) {
		uint8_t ip[4] = { 10, 0, 0, (uint8_t)k };
		node_update(&n, &from, k, ip, 10, 1, 0);
	}
	while (node_next(&n, K(ACK), 500, &m, buf))
		acks++;
	cr_assert_eq(acks, 0, "the 17th is not counted: no more acks");
	cr_assert_geq(agentproc_log_lines(&test_agent, "peers.node_keys", NULL), 1);
	node_close(&n);
}

/* A quiet session gets heartbeats (HAProxy closes after 5 s of silence). */
Test(peers_front, heartbeats_keep_a_quiet_session)
{
	struct node n;
	struct peers_wire_msg m;
	static uint8_t buf[PEERS_WIRE_MSG_MAX];

	node_up(&n, "nodeA");
	int64_t t0 = test_now_ms();
	cr_assert(node_next(&n, K(HEARTBEAT), FAR_MS, &m, buf), "a heartbeat");
	cr_log_info("a heartbeat after %lld ms", (long long)(test_now_ms() - t0));
	node_close(&n);
}
