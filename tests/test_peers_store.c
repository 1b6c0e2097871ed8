/*
 * test_peers_store.c - agents that count HAProxy nodes (the peers front,
 * docs/PEERS.md) and share one real store, Redis or PostgreSQL
 * (docs/PEERS.md, "Several agents"): the agents and the stores are
 * tests/lib/clustertest.h's, the nodes are played with the codec
 * (tests/lib/peernode.h); a case written for both stores (CT_STORE_TEST)
 * is two tests, cluster::redis_... and cluster::postgres_....
 *
 *   - two agents, a node each: each node's part counted by its agent,
 *     their sum in the store, and pushed to both nodes;
 *   - an agent restarted without a state file: its node's dump (the
 *     states it counted before, into the store) counts nothing twice, and
 *     what the node counts next is added.
 *
 * Real HAProxy nodes on Redis: tests/e2e/peers_store.sh.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <stdio.h>
#include <string.h>

#include "tests/lib/clock.h"
#include "tests/lib/clustertest.h"
#include "tests/lib/peernode.h"

TestSuite(cluster, .init = ct_setup, .fini = ct_teardown, .timeout = 90);

#define SYNC   0.05             /* the agents' sync_rate (s) */
#define KEY    "192.0.2.1"

static const uint8_t ip1[4] = { 192, 0, 2, 1 };

/* The store's configuration of one namespace "default" (st->cfg) as a
 * peers namespace: the peers front on @HTTP_PORT@ (agentproc's second
 * port), haproxy_tables req_local into req_cluster. */
static const char *peers_cfg(const struct ct_store *st, unsigned w)
{
	static char out[4096];
	const char *cfg = st->cfg(w, SYNC, 1000);
	const char *ns = strstr(cfg, "{\"name\":\"default\",");

	cr_assert(cfg[0] == '{' && ns, "%s", cfg);
	ns += strlen("{\"name\":\"default\",");
	snprintf(out, sizeof(out),
		 "{\"peers\":{\"listen\":\"127.0.0.1:@HTTP_PORT@\",\"name\":\"agg\",\"push_ms\":20},"
		 "%.*s\"haproxy_tables\":{\"from\":\"req_local\",\"into\":\"req_cluster\"},%s",
		 (int)(ns - cfg - 1), cfg + 1, ns);
	return out;
}

static struct peers_wire_table from, into;

/* Node `name` up on agent n (a dump of its key ip1 at (age, curr) when
 * curr > 0: timed updates, as HAProxy dumps). */
static void node_up(struct pn_node *nd, size_t n, const char *name, unsigned w, uint64_t age,
		    uint64_t curr)
{
	from = pn_table(3, "/req_local", w * 1000);
	into = pn_table(4, "/req_cluster", w * 1000);
	pn_up_begin(nd, ct_nodes[n].a.http_port, name, &from, &into);
	if (curr > 0)
		pn_update(nd, &from, 1, ip1, age, curr, 0, true);
	pn_up_end(nd, &into);
}

/* Until node nd is pushed want for ip1 (curr + prev), or 10 s: the last
 * value pushed. */
static uint64_t wait_pushed(struct pn_node *nd, uint64_t want)
{
	int64_t end = test_now_ms() + 10000;
	uint64_t got = 0;

	while (got != want && test_now_ms() < end) {
		struct peers_wire_freq f = pn_pushed(nd, &into, ip1, PN_FAR_MS);
		got = f.curr + f.prev;
	}
	return got;
}

/* Until the store holds want for ip1, or 10 s: what it holds. */
static double wait_store(const struct ct_store *st, unsigned w, double want)
{
	int64_t end = test_now_ms() + 10000;
	double got = -1;

	while ((got = st->total("default", KEY, w)) != want && test_now_ms() < end)
		test_sleep_ms(50);
	return got;
}

/* The store up, agents 0 and 1 on it, node A up on agent 0 and node B on
 * agent 1 (empty dumps); their first updates of ip1: mine and theirs. */
static void two_agents(const struct ct_store *st, unsigned w, struct pn_node *a,
		       struct pn_node *b, uint64_t mine, uint64_t theirs)
{
	st->up(0);
	ct_node_start_with(0, peers_cfg(st, w), "2", 0);
	ct_node_start_with(1, peers_cfg(st, w), "2", 0);
	node_up(a, 0, "nodeA", w, 0, 0);
	node_up(b, 1, "nodeB", w, 0, 0);
	pn_update(a, &from, 1, ip1, 10, mine, 0, false);
	pn_update(b, &from, 1, ip1, 10, theirs, 0, false);
}

/* Two agents, one node each: node A counts 4 on agent 0, node B 6 on
 * agent 1. The store holds 10, and both nodes are pushed 10: each agent's
 * sum is every agent's, through the store. */
CT_STORE_TEST(two_agents_add_up)
{
	struct pn_node a, b;
	unsigned w = ct_window();

	two_agents(st, w, &a, &b, 4, 6);
	cr_assert_eq(wait_store(st, w, 10), 10);
	cr_assert_eq(wait_pushed(&a, 10), 10, "node A is pushed both parts");
	cr_assert_eq(wait_pushed(&b, 10), 10, "node B is pushed both parts");
	pn_close(&a);
	pn_close(&b);
}

/* Node A counts 5 on agent 0, which is stopped (its final flush: the
 * store holds 5) and started again without a state file: its table knows
 * nothing of node A's part. Node A comes back and dumps its state (5):
 * taken as counted, the store still holds 5, not 10; its next state (7)
 * adds 2, and node B, on agent 1, is pushed 7 + its own 1. */
CT_STORE_TEST(an_agent_restarted_afresh_counts_nothing_twice)
{
	struct pn_node a, b;
	unsigned w = ct_window();

	two_agents(st, w, &a, &b, 5, 1);
	cr_assert_eq(wait_store(st, w, 6), 6);
	pn_close(&a);
	ct_node_stop(0);
	cr_assert_eq(st->total("default", KEY, w), 6, "the final flush lost nothing");

	ct_node_start_with(0, peers_cfg(st, w), "2", 0);
	node_up(&a, 0, "nodeA", w, 2000, 5);
	/* Some sync cycles of both agents: nothing more may come. */
	test_sleep_ms((int)(10 * SYNC * 1000));
	cr_assert_eq(st->total("default", KEY, w), 6, "node A's dump counted again");
	pn_update(&a, &from, 2, ip1, 2100, 7, 0, false);
	cr_assert_eq(wait_store(st, w, 8), 8);
	cr_assert_eq(wait_pushed(&b, 8), 8, "node B is pushed every part once");
	cr_assert_eq(wait_pushed(&a, 8), 8, "node A too");
	pn_close(&a);
	pn_close(&b);
}

int main(int argc, char *argv[])
{
	return ct_main(argc, argv);
}
