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
 * new keys than peers.node_keys), heartbeats; a busy node's updates
 * read in gulps and answered with a push and an ack per push_ms; the
 * front's metrics (an
 * agent of their own: clustertest's node 0). Real HAProxy nodes are
 * tests/e2e/peers_cluster.sh's.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "agent/peers_wire.h"
#include "tests/lib/agenttest.h"
#include "tests/lib/clock.h"
#include "tests/lib/clustertest.h"
#include "tests/lib/peernode.h"
#include "tests/lib/port.h"

#define FAR_MS PN_FAR_MS
#define W      600              /* the namespace's window: no window ends in a test */

/* "@HTTP_PORT@" is agentproc's second free port: the peers listener here. */
static const char agent_cfg[] =
	"{ \"frame_timeout_ms\": 300, \"log_level\": \"debug\","
	"  \"peers\": { \"listen\": \"127.0.0.1:@HTTP_PORT@\", \"name\": \"agg\","
	"              \"node_keys\": 16 },"
	"  \"namespaces\": [ { \"name\": \"api\", \"window_sizes\": [600],"
	"    \"haproxy_tables\": { \"from\": \"req_local\", \"into\": \"rl/req_cluster\" } } ] }";

static void start(void)
{
	test_agent_start1(agent_cfg);
}

static void stop(void)
{
	test_agent_stop();
}

static const uint8_t ip1[4] = { 192, 0, 2, 1 };
static struct peers_wire_table from, into;

/* A node up (tests/lib/peernode.h) with req_local (from: its updates
 * follow) and req_cluster (into), an empty dump; the agent's DEFINE of
 * into read. */
static void node_up(struct pn_node *n, const char *caller)
{
	from = pn_table(3, "/req_local", W * 1000);
	into = pn_table(4, "/req_cluster", W * 1000);
	pn_up_begin(n, test_agent.http_port, caller, &from, &into);
	pn_up_end(n, &into);
}

/* An update of `from` (not timed) for key ip. */
static void node_update(struct pn_node *n, const struct peers_wire_table *t, uint32_t id,
			const uint8_t ip[4], uint64_t age, uint64_t curr, uint64_t prev)
{
	pn_update(n, t, id, ip, age, curr, prev, false);
}

/* The next push of the into table for ip1: its curr (prev must be 0 here). */
static uint64_t node_pushed(struct pn_node *n)
{
	struct peers_wire_freq f = pn_pushed(n, &into, ip1, FAR_MS);

	cr_assert_lt(f.age, (uint64_t)W * 1000);
	cr_assert_eq(f.prev, 0);
	return f.curr;
}

TestSuite(peers_front, .init = start, .fini = stop, .timeout = 60);

/* A node's update is counted, acknowledged, and pushed back into its into
 * table; the same state again, or after a reconnect, counts nothing
 * more; a later one adds what it holds more. */
Test(peers_front, an_update_counted_acknowledged_pushed_once)
{
	struct pn_node n;

	node_up(&n, "nodeA");
	node_update(&n, &from, 1, ip1, 10, 3, 0);
	pn_acked(&n, 3, 1);
	cr_assert_eq(node_pushed(&n), 3);
	node_update(&n, &from, 2, ip1, 10, 3, 0);
	pn_acked(&n, 3, 2);
	pn_close(&n);

	node_up(&n, "nodeA");
	cr_assert_eq(node_pushed(&n), 3, "taught on the new session: counted once");
	node_update(&n, &from, 7, ip1, 40, 3, 0);
	pn_acked(&n, 3, 7);
	node_update(&n, &from, 8, ip1, 50, 5, 0);
	pn_acked(&n, 3, 8);
	uint64_t v = node_pushed(&n);
	cr_assert_eq(v, 5, "3 then 2 more, whatever was sent again: %llu", (unsigned long long)v);
	pn_close(&n);
}

/* Two nodes' parts add up, and each session gets the sum. */
Test(peers_front, two_nodes_add_up)
{
	struct pn_node a, b;

	node_up(&a, "nodeA");
	node_up(&b, "nodeB");
	node_update(&a, &from, 1, ip1, 10, 4, 0);
	pn_acked(&a, 3, 1);
	cr_assert_eq(node_pushed(&a), 4);
	node_update(&b, &from, 1, ip1, 10, 6, 0);
	pn_acked(&b, 3, 1);
	uint64_t v = 0;
	for (int i = 0; i < 3 && v != 10; i++)
		v = node_pushed(&a);
	cr_assert_eq(v, 10, "node A reads both parts");
	pn_close(&a);
	pn_close(&b);
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
		struct pn_node n;
		pn_open(&n, test_agent.http_port);
		pn_send(&n, cases[i].hello, strlen(cases[i].hello));
		cr_assert_eq(pn_status(&n), cases[i].status, "%s", cases[i].hello);
		int64_t end = test_now_ms() + FAR_MS;
		while (!n.closed && test_now_ms() < end)
			pn_read(&n, 100);
		cr_assert(n.closed, "closed after %u", cases[i].status);
		pn_close(&n);
	}
	cr_assert_geq(agentproc_log_lines(&test_agent, "answered 503", "peers.name"), 1);
}

/* A node that never finishes its hello is cut after frame_timeout_ms; one
 * that sends a message over HAProxy's size limit is told (01 01) and cut;
 * a malformed one (01 00) too. */
Test(peers_front, broken_nodes_are_cut)
{
	struct pn_node n;
	struct peers_wire_msg m;
	static uint8_t buf[PEERS_WIRE_MSG_MAX];

	pn_open(&n, test_agent.http_port);
	pn_send(&n, "HAProxyS 2.1\nagg\n", 17);
	int64_t t0 = test_now_ms();
	while (!n.closed && test_now_ms() - t0 < FAR_MS)
		pn_read(&n, 100);
	cr_assert(n.closed, "a hello never finished is cut");
	cr_log_info("cut after %lld ms (frame_timeout_ms 300)", (long long)(test_now_ms() - t0));
	pn_close(&n);

	node_up(&n, "nodeA");
	static const uint8_t big[] = { 0x0a, 0x80, 0xf8, 0xff, 0x07 };   /* length 18664 */
	pn_send(&n, big, sizeof(big));
	cr_assert(pn_next(&n, PN_K(ERR_SIZELIMIT), FAR_MS, &m, buf), "01 01");
	pn_close(&n);

	node_up(&n, "nodeA");
	static const uint8_t cut[] = { 0x0a, 0x80, 0x03, 0x00, 0x00, 0x00 };  /* no key */
	pn_define(&n, &from);
	pn_send(&n, cut, sizeof(cut));
	cr_assert(pn_next(&n, PN_K(ERR_PROTOCOL), FAR_MS, &m, buf), "01 00");
	pn_close(&n);
}

/* Tables the agent does not count are ignored, as HAProxy ignores them:
 * one no namespace names, one of another period (said in the log); their
 * updates are never acknowledged, and the session goes on. */
Test(peers_front, tables_not_counted_are_never_acknowledged)
{
	struct pn_node n;
	struct peers_wire_msg m;
	static uint8_t buf[PEERS_WIRE_MSG_MAX];
	struct peers_wire_table other = pn_table(9, "/unknown", 10000);
	struct peers_wire_table wrong = pn_table(3, "/req_local", 10000);

	node_up(&n, "nodeA");
	pn_define(&n, &other);
	node_update(&n, &other, 1, ip1, 10, 3, 0);
	pn_define(&n, &wrong);
	node_update(&n, &wrong, 1, ip1, 10, 3, 0);
	cr_assert_not(pn_next(&n, PN_K(ACK) | PN_K(UPDATE), 500, &m, buf), "no ack, nothing pushed");
	cr_assert_geq(agentproc_log_lines(&test_agent, "over 10000 ms", "window is 600 s"), 1);
	pn_define(&n, &from);
	node_update(&n, &from, 5, ip1, 10, 2, 0);
	pn_acked(&n, 3, 5);
	cr_assert_eq(node_pushed(&n), 2, "the session went on");
	pn_close(&n);
}

/* A node may bring at most peers.node_keys (16) new keys a window: the
 * 17th is not counted, and its acknowledgements stop. */
Test(peers_front, a_node_brings_at_most_node_keys_new_keys)
{
	struct pn_node n;
	struct peers_wire_msg m;
	static uint8_t buf[PEERS_WIRE_MSG_MAX];
	int acks = 0;

	enum peers_wire_err err;
	uint64_t t;
	uint32_t id = 0;

	node_up(&n, "nodeA");
	pn_define(&n, &from);
	for (uint32_t k = 1; k <= 16; k++) {
		uint8_t ip[4] = { 10, 0, 0, (uint8_t)k };
		node_update(&n, &from, k, ip, 10, 1, 0);
	}
	while (id < 16 && pn_next(&n, PN_K(ACK), FAR_MS, &m, buf))
		cr_assert_gt(peers_wire_ack_decode(m.payload, m.len, &t, &id, &err), 0);
	cr_assert_eq(id, 16, "16 new keys counted and acknowledged");
	for (uint32_t k = 17; k <= 20; k++) {
		uint8_t ip[4] = { 10, 0, 0, (uint8_t)k };
		node_update(&n, &from, k, ip, 10, 1, 0);
	}
	while (pn_next(&n, PN_K(ACK), 500, &m, buf))
		acks++;
	cr_assert_eq(acks, 0, "the 17th is not counted: no more acks");
	cr_assert_geq(agentproc_log_lines(&test_agent, "peers.node_keys", NULL), 1);
	pn_close(&n);
}

/* A quiet session gets heartbeats (HAProxy closes after 5 s of silence). */
Test(peers_front, heartbeats_keep_a_quiet_session)
{
	struct pn_node n;
	struct peers_wire_msg m;
	static uint8_t buf[PEERS_WIRE_MSG_MAX];

	node_up(&n, "nodeA");
	int64_t t0 = test_now_ms();
	cr_assert(pn_next(&n, PN_K(HEARTBEAT), FAR_MS, &m, buf), "a heartbeat");
	cr_log_info("a heartbeat after %lld ms", (long long)(test_now_ms() - t0));
	pn_close(&n);
}

/* ------------------------------------------------------------------- busy */

/* A node under load (docs/PEERS.md, "Pushing the sums"): an agent whose
 * walk runs every 1000 ms. */
static const char busy_cfg[] =
	"{ \"log_level\": \"debug\","
	"  \"peers\": { \"listen\": \"127.0.0.1:@HTTP_PORT@\", \"name\": \"agg\","
	"              \"push_ms\": 1000 },"
	"  \"namespaces\": [ { \"name\": \"api\", \"window_sizes\": [600],"
	"    \"haproxy_tables\": { \"from\": \"req_local\", \"into\": \"rl/req_cluster\" } } ] }";

static void busy_start(void)
{
	test_agent_start1(busy_cfg);
}

TestSuite(peers_busy, .init = busy_start, .fini = stop, .timeout = 60);

/* A node trickles: n updates of ip1, one every 5 ms, each its own write
 * (as HAProxy sends one each time its peers task runs while a key is
 * busy), the i-th with i events. */
static void trickle(struct pn_node *n, uint32_t count)
{
	for (uint32_t i = 1; i <= count; i++) {
		node_update(n, &from, i, ip1, 5 * i, i, 0);
		test_sleep_ms(5);
	}
}

/* What comes back until the push of count events and the ack of id count
 * are in (FAR_MS): the pushes and acks counted into *pushes and *acks. */
static void trickled_back(struct pn_node *n, uint32_t count, unsigned *pushes, unsigned *acks)
{
	struct peers_wire_msg m;
	static uint8_t buf[PEERS_WIRE_MSG_MAX];
	static struct peers_wire_update u;
	enum peers_wire_err err;
	struct peers_wire_table t = into;
	uint32_t last_curr = 0, last_ack = 0;
	int64_t end = test_now_ms() + FAR_MS;

	*pushes = *acks = 0;
	while ((last_curr != count || last_ack != count) && test_now_ms() < end) {
		if (!pn_next(n, PN_K(UPDATE) | PN_K(ACK), (int)(end - test_now_ms()), &m, buf))
			break;
		if (m.kind == PEERS_WIRE_MSG_ACK) {
			uint64_t tid;
			cr_assert_gt(peers_wire_ack_decode(m.payload, m.len, &tid, &last_ack, &err), 0);
			(*acks)++;
			continue;
		}
		cr_assert_gt(peers_wire_update_decode(m.type, m.payload, m.len, &t, &u, &err), 0,
			     "%s", peers_wire_err_str(err));
		last_curr = (uint32_t)u.f[PEERS_WIRE_DT_HTTP_REQ_RATE].curr;
		(*pushes)++;
	}
	cr_assert_eq(last_curr, count, "the last push holds every event");
	cr_assert_eq(last_ack, count, "the last ack, the last id");
}

/* read() calls the agent's worker made so far (/proc/PID/io: syscr). */
static unsigned long long worker_reads(void)
{
	pid_t w[4];
	char path[64], line[128];
	unsigned long long v = 0;

	cr_assert_eq(agentproc_children(test_agent.pid, w, 4), 1, "one worker");
	snprintf(path, sizeof(path), "/proc/%d/io", (int)w[0]);
	FILE *f = fopen(path, "r");
	cr_assert(f, "%s", path);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "syscr: %llu", &v) == 1)
			break;
	fclose(f);
	return v;
}

/* A busy node's first update gets its push and ack at once, the rest are
 * held for the walk: a few pushes and acks for 60 updates, not one each. */
Test(peers_busy, a_trickle_gets_a_push_and_an_ack_per_push_ms)
{
	enum { N = 60 };
	struct pn_node n;
	unsigned pushes, acks;

	node_up(&n, "nodeA");
	trickle(&n, N);
	trickled_back(&n, N, &pushes, &acks);
	cr_log_info("%d updates: %u pushes, %u acks", N, pushes, acks);
	cr_assert_leq(pushes, 8, "%u pushes for %d updates", pushes, N);
	cr_assert_leq(acks, 8, "%u acks for %d updates", acks, N);
	pn_close(&n);
}

/* A trickling node is read in gulps (a pause of push_ms / 5 after a read
 * that follows another closely): a few reads for 60 updates, not one (and
 * the one that finds nothing more) each. */
Test(peers_busy, a_trickle_is_read_in_gulps)
{
	enum { N = 60 };
	struct pn_node n;
	unsigned pushes, acks;

	node_up(&n, "nodeA");
	unsigned long long r0 = worker_reads();
	trickle(&n, N);
	trickled_back(&n, N, &pushes, &acks);
	unsigned long long reads = worker_reads() - r0;
	cr_log_info("%d updates: %llu reads", N, reads);
	cr_assert_leq(reads, 30, "%llu reads for %d updates", reads, N);
	pn_close(&n);
}

/* ---------------------------------------------------------------- metrics */

/* The front's metrics (docs/METRICS.md), on an agent of its own: a
 * clustertest node (GET /metrics on its HTTP front), its peers listener on
 * a port the test picks. */
TestSuite(peers_metrics, .init = ct_setup, .fini = ct_teardown, .timeout = 60);

/* Until node 0's sample reads want (10 s): what it read. */
static long long metric_is(const char *sample, long long want)
{
	int64_t end = test_now_ms() + FAR_MS;
	long long v;

	while ((v = ct_node_metric(0, sample)) != want && test_now_ms() < end)
		test_sleep_ms(50);
	return v;
}

/* A node up, an update counted and pushed back, a table definition the
 * namespace names refused (another period), updates of tables nobody
 * counts refused, the node's copy of our sums (an into table's entries)
 * not; the node gone. */
Test(peers_metrics, the_front_counts_sessions_updates_refusals_pushes)
{
	char cfg[1024];
	int port = test_port(0);
	struct pn_node n;
	struct peers_wire_table wrong = pn_table(9, "/req_local", 10000);
	struct peers_wire_table other = pn_table(10, "/other", W * 1000);

	cr_assert_gt(port, 0);
	snprintf(cfg, sizeof(cfg),
		 "{ \"http_listen\": \"127.0.0.1:@HTTP_PORT@\","
		 "  \"peers\": { \"listen\": \"127.0.0.1:%d\", \"name\": \"agg\" },"
		 "  \"namespaces\": [ { \"name\": \"api\", \"window_sizes\": [600],"
		 "    \"haproxy_tables\": { \"from\": \"req_local\", \"into\": \"req_cluster\" } } ] }",
		 port);
	ct_node_start_with(0, cfg, "1", 0);
	cr_assert_eq(ct_node_metric(0, "\nspoa_ratelimit_peers_last_update_timestamp_seconds "), 0);
	from = pn_table(3, "/req_local", W * 1000);
	into = pn_table(4, "/req_cluster", W * 1000);
	pn_up_begin(&n, port, "nodeA", &from, &into);
	pn_up_end(&n, &into);
	cr_assert_eq(metric_is("\nspoa_ratelimit_peers_nodes ", 1), 1);

	node_update(&n, &from, 1, ip1, 10, 3, 0);
	pn_acked(&n, 3, 1);
	cr_assert_eq(node_pushed(&n), 3);
	pn_define(&n, &into);
	node_update(&n, &into, 1, ip1, 10, 3, 0);           /* our sum, learned */
	pn_define(&n, &wrong);
	node_update(&n, &wrong, 2, ip1, 10, 3, 0);
	pn_define(&n, &other);
	node_update(&n, &other, 1, ip1, 10, 3, 0);
	pn_define(&n, &from);
	node_update(&n, &from, 3, ip1, 20, 4, 0);
	pn_acked(&n, 3, 3);

	cr_assert_eq(metric_is("spoa_ratelimit_peers_updates_total{namespace=\"api\"} ", 2), 2);
	cr_assert_eq(ct_node_metric(0, "spoa_ratelimit_peers_updates_refused_total{reason=\"refused\"} "),
		     1, "the wrong table's");
	cr_assert_eq(ct_node_metric(0, "spoa_ratelimit_peers_updates_refused_total{reason=\"unknown\"} "),
		     1, "the unknown one's, not our sum's");
	cr_assert_eq(ct_node_metric(0, "spoa_ratelimit_peers_updates_refused_total{reason=\"room\"} "),
		     0);
	cr_assert_geq(metric_is("spoa_ratelimit_peers_pushes_total{namespace=\"api\"} ", 2), 2);
	cr_assert_gt(ct_node_metric(0, "\nspoa_ratelimit_peers_last_update_timestamp_seconds "), 0);
	pn_close(&n);
	cr_assert_eq(metric_is("\nspoa_ratelimit_peers_nodes ", 0), 0);
}
