/*
 * test_cluster_concurrency.c - a concurrency limit across a cluster
 * (docs/CLUSTER.md, "Concurrency across a cluster"): three agent nodes on
 * one real store (Redis or PostgreSQL: CT_STORE_TEST runs each case for
 * both), one namespace with `"algorithm": "concurrency"`, limit 3.
 *
 *   - the store keeps the key's leases by id (a sorted set, a table's
 *     rows) and decides every acquire: acquires spread over the three
 *     nodes admit 3 in all; a release on any node, the one that took the
 *     lease or another, frees it once;
 *   - leases expire after lease_ms cluster-wide, and a node killed with
 *     leases (SIGKILL, nothing given back) loses them within lease_ms;
 *   - while the store is away each node admits within its share (limit /
 *     nodes, at least 1), degraded; a release sent meanwhile reaches the
 *     store once it is back, and so do the leases taken on the shares
 *     (those given back meanwhile never).
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/lib/clock.h"
#include "tests/lib/clustertest.h"
#include "tests/lib/httpc.h"
#include "tests/lib/rawspop.h"

TestSuite(cluster, .init = ct_setup, .fini = ct_teardown, .timeout = 90);

#define CONC_LIMIT 3
#define CONC_HITS  30
#define LEASE_LEN  32

/* The store's namespace as a concurrency one: limit 3, leases of lease_ms,
 * sync_rate 0.1 s (the heartbeat's), the HTTP front with the admin token.
 * A static buffer. */
static const char *conc_cfg(const struct ct_store *st, int timeout_ms, unsigned lease_ms)
{
	static char out[2048 + 128];
	const char *cfg = ct_with_admin(st->cfg(1, 0.1, timeout_ms));
	/* PostgreSQL purges every second (expired lease rows). */
	static char opts[2048 + 64];
	const char *t = strstr(cfg, "\"timeout_ms\":");
	if (strcmp(st->name, "postgres") == 0 && t) {
		snprintf(opts, sizeof(opts), "%.*s\"purge_interval_s\":1,%s", (int)(t - cfg), cfg, t);
		cfg = opts;
	}
	const char *p = strstr(cfg, "\"sync_rate\":");

	cr_assert_not_null(p);
	snprintf(out, sizeof(out), "%.*s\"algorithm\":\"concurrency\",\"limit\":%d,"
		 "\"lease_ms\":%u,%s", (int)(p - cfg), cfg, CONC_LIMIT, lease_ms, p);
	return out;
}

/* An acquire of key on connection c of node n: admitted or not; its lease
 * in lease (LEASE_LEN + 1 bytes, "" when denied); *degraded when the
 * answer says so. */
static bool conc_acquire(size_t n, size_t c, const char *key, char *lease, bool *degraded)
{
	struct rawspop_actions acts;
	struct sp_msg m = { .key = key, .ns = "default" };

	sp_notify1(ct_nodes[n].fd[c], &m, &acts);
	sp_expect_no_error(&acts);
	bool admitted = !sp_var_bool(&acts, "exceeded");
	const struct rawspop_action *l = sp_var(&acts, "lease");
	cr_assert_eq(l != NULL, admitted, "node %zu: a lease iff admitted", n);
	lease[0] = '\0';
	if (l) {
		cr_assert_eq(l->value.s_len, LEASE_LEN, "%s", l->value.s);
		memcpy(lease, l->value.s, LEASE_LEN);
		lease[LEASE_LEN] = '\0';
	}
	if (degraded)
		*degraded = sp_var(&acts, "degraded") && sp_var_bool(&acts, "degraded");
	return admitted;
}

/* A `release` of lease on node n: `released`. */
static bool conc_release(size_t n, const char *key, const char *lease)
{
	struct rawspop_actions acts;
	struct sp_msg m = { .msg = "release", .key = key, .ns = "default", .lease = lease };

	sp_notify1(ct_nodes[n].fd[0], &m, &acts);
	sp_expect_no_error(&acts);
	return sp_var_bool(&acts, "released");
}

/* Three nodes on st, up, leases of 60 s, the store's timeout that of a
 * case about a store away, every worker's store answering. */
static void conc_nodes_up(const struct ct_store *st)
{
	st->up(0);
	ct_nodes_start(CT_NODES, conc_cfg(st, st->timeout_ms, 60000));
	ct_wait_nodes(CT_NODES);
	ct_wait_store_decides(1, CONC_LIMIT);
}

/* hits acquires of key, round-robin over the nodes and their connections:
 * how many were admitted (leases kept in leases[], up to max) and how many
 * answers said degraded. */
static int conc_spread(const char *key, int hits, char (*leases)[LEASE_LEN + 1], int max,
		       int *degraded)
{
	int admitted = 0;

	*degraded = 0;
	for (int i = 0; i < hits; i++) {
		char lease[LEASE_LEN + 1];
		bool d = false;

		if (conc_acquire((size_t)i % CT_NODES, ((size_t)i / CT_NODES) % CT_CONNS, key, lease,
				 &d)) {
			if (admitted < max)
				strcpy(leases[admitted], lease);
			admitted++;
		}
		*degraded += d;
	}
	return admitted;
}

/* The first acquire of key on node n admitted, tried every 50 ms: the ms
 * it took (asserted within 10 s: a failure bound only). */
static int64_t conc_wait_admitted(size_t n, const char *key, char *lease)
{
	int64_t t0 = test_now_ms();

	while (!conc_acquire(n, 0, key, lease, NULL)) {
		cr_assert(test_now_ms() - t0 < 10000, "node %zu: no acquire admitted in 10 s", n);
		test_sleep_ms(50);
	}
	return test_now_ms() - t0;
}

/* Issue 32's target: three nodes on the store, at most 3 in flight
 * cluster-wide. 30 acquires spread over the nodes admit 3, each decided
 * by the store, one after the other and all at once; a release through another node than the one that took
 * the lease frees it, once (the same release again frees nothing); a
 * release through the node that took it frees it too. Before, a
 * concurrency namespace with a store was refused at load; with each node
 * on its own count it would admit 9. */
CT_STORE_TEST(concurrency_at_most_limit_across_nodes)
{
	char key[64], leases[CONC_HITS][LEASE_LEN + 1], lease[LEASE_LEN + 1];
	int degraded;

	st->up(0);
	ct_nodes_start(CT_NODES, conc_cfg(st, 1000, 60000));
	ct_wait_nodes(CT_NODES);
	ct_wait_store_decides(1, CONC_LIMIT);
	sp_key(key, sizeof(key), "conc");
	int got = conc_spread(key, CONC_HITS, leases, CONC_HITS, &degraded);
	cr_log_info("%s: %d nodes, limit %d, %d acquires spread: %d admitted (%d degraded)",
		    st->name, CT_NODES, CONC_LIMIT, CONC_HITS, got, degraded);
	cr_expect_eq(degraded, 0, "%s: %d answers degraded with the store up", st->name, degraded);
	cr_assert_eq(got, CONC_LIMIT, "%s: %d admitted of %d acquires over %d nodes", st->name, got,
		     CONC_HITS, CT_NODES);
	long long by_store = 0;
	for (size_t n = 0; n < CT_NODES; n++)
		by_store += ct_node_metric(n, "spoa_ratelimit_admissions_total{namespace=\"default\","
					   "by=\"store\"} ");
	cr_expect_geq(by_store, CONC_HITS, "%s: %lld decided by the store", st->name, by_store);
	/* GET /keys: node 0's own lease (the first acquire's), and the
	 * store's leases in flight, every node's (read by a lease step). */
	char target[128];
	struct httpc_resp r;
	const char *why = NULL;
	snprintf(target, sizeof(target), "/keys?namespace=default&key=%s", key);
	cr_assert_eq(httpc_get(ct_nodes[0].a.http_port, target, CT_ADMIN, &r, 5000, &why), 0,
		     "%s", why);
	cr_assert_eq(r.status, 200, "%s", r.body);
	cr_expect_eq(httpc_body_num(&r, "in_flight"), 1, "%s", r.body);
	cr_expect(strstr(r.body, "\"store\":{\"in_flight\":3,\"expires_in\":"), "%s: %s",
		  st->name, r.body);
	/* At once: every node's acquires sent before any answer is read
	 * (several of one key in one store call, one transaction each). */
	char burst[64];
	sp_key(burst, sizeof(burst), "conc-burst");
	ct_degraded = 0;
	int64_t at_once = ct_admit(CT_PARALLEL, burst, 1, CONC_LIMIT, CONC_HITS);
	cr_log_info("%s: %d acquires at once over %d nodes: %lld admitted (%lld degraded)",
		    st->name, CONC_HITS, CT_NODES, (long long)at_once, (long long)ct_degraded);
	cr_assert_eq(at_once, CONC_LIMIT, "%s: %lld admitted of %d acquires at once", st->name,
		     (long long)at_once, CONC_HITS);

	/* leases[0] was taken on node 0: released through node 1. */
	/* A release reaches the store with its node's next loop iteration,
	 * not before its answer: the acquire after it is tried until the
	 * store has it. */
	cr_assert(conc_release(1, key, leases[0]), "%s: a release through another node", st->name);
	conc_wait_admitted(2, key, lease);
	cr_assert(!conc_acquire(0, 1, key, lease, NULL), "%s: and one only", st->name);
	/* The same release again, through a third node: nothing more freed
	 * (given the time to reach the store that a wrong free would need). */
	(void)conc_release(2, key, leases[0]);
	test_sleep_ms(300);
	cr_assert(!conc_acquire(1, 2, key, lease, NULL), "%s: a lease released twice freed two",
		  st->name);
	/* leases[1] (node 1's) through node 1. */
	cr_assert(conc_release(1, key, leases[1]), "%s: a release through its node", st->name);
	conc_wait_admitted(0, key, lease);
	cr_assert(!conc_acquire(2, 2, key, lease, NULL), "%s: 3 in flight again", st->name);
}

#define DEAD_LEASE_MS 2000

/* Leases expire cluster-wide after lease_ms (2000); a node killed with its
 * leases (SIGKILL: nothing given back) loses them within lease_ms too:
 * the others are denied while they live, admitted once they expired. */
CT_STORE_TEST(concurrency_dead_node_leases_expire)
{
	char key[64], lease[LEASE_LEN + 1];

	st->up(0);
	ct_nodes_start(CT_NODES, conc_cfg(st, 1000, DEAD_LEASE_MS));
	ct_wait_nodes(CT_NODES);
	ct_wait_store_decides(1, CONC_LIMIT);
	sp_key(key, sizeof(key), "dead");
	int64_t t0 = test_now_ms();
	for (int i = 0; i < CONC_LIMIT; i++)
		cr_assert(conc_acquire(0, (size_t)i % CT_CONNS, key, lease, NULL),
			  "%s: node 0's acquire %d", st->name, i);
	/* Node 0 dies with its 3 leases: its workers and master killed. */
	pid_t kids[16];
	size_t nk = agentproc_children(ct_nodes[0].a.pid, kids, 16);
	for (size_t i = 0; i < nk; i++)
		kill(kids[i], SIGKILL);
	agentproc_signal(&ct_nodes[0].a, SIGKILL);
	agentproc_wait(&ct_nodes[0].a, 5000);
	ct_node_close_conns(0);
	ct_nodes[0].started = false;
	agentproc_stop(&ct_nodes[0].a, 0, true);
	/* While they live (a far bound: a machine that took longer to get
	 * here than their life has nothing to check). */
	bool denied = !conc_acquire(1, 0, key, lease, NULL);
	if (test_now_ms() - t0 < DEAD_LEASE_MS / 2)
		cr_assert(denied, "%s: node 0's leases still held", st->name);
	int64_t ms = conc_wait_admitted(1, key, lease);
	cr_log_info("%s: node 0 killed with %d leases of %d ms: an acquire on node 1 admitted "
		    "%lld ms later", st->name, CONC_LIMIT, DEAD_LEASE_MS, (long long)ms);
	/* All three expired: three in flight again, node 1's and node 2's. */
	cr_assert(conc_acquire(2, 0, key, lease, NULL), "%s: the second", st->name);
	cr_assert(conc_acquire(2, 1, key, lease, NULL), "%s: the third", st->name);
	cr_assert(!conc_acquire(1, 1, key, lease, NULL), "%s: not a fourth", st->name);
	/* And leases nobody gives back expire too (the nodes alive). */
	conc_wait_admitted(2, key, lease);
	if (strcmp(st->name, "postgres") != 0)
		return;
	/* PostgreSQL: the expired lease rows of a key nobody takes a lease
	 * of any more go with the periodic purge (purge_interval_s 1). */
	char sql[256], out[64];
	int64_t t1 = test_now_ms();
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM " CT_PG_TABLE " WHERE namespace = "
		 "'default' AND window_size < 0");
	do {
		test_sleep_ms(200);
		cr_assert_geq(pg_server_query(ct_pg_srv.conninfo, sql, out, sizeof(out)), 0, "%s",
			      out);
	} while (atoll(out) > 0 && test_now_ms() - t1 < 10000);
	cr_assert_eq(atoll(out), 0, "%s: %s lease rows left 10 s after they expired", st->name,
		     out);
}

/* The store away: each node on its share, max(3 / 3, 1) = 1 lease of the
 * key at a time, degraded: 30 acquires spread admit 3, not 9. A release
 * of a lease taken from the store, sent while it is paused, reaches it
 * once it answers again: an acquire is admitted by the store then. */
CT_STORE_TEST(concurrency_store_away_shares_and_late_release)
{
	char key[64], leases[CONC_HITS][LEASE_LEN + 1], lease[LEASE_LEN + 1];
	int degraded;

	conc_nodes_up(st);
	sp_key(key, sizeof(key), "late");
	cr_assert_eq(conc_spread(key, CONC_LIMIT, leases, CONC_LIMIT, &degraded), CONC_LIMIT);
	st->pause();
	cr_assert(conc_release(1, key, leases[0]), "%s: released while the store is paused",
		  st->name);
	st->resume();
	int64_t ms = conc_wait_admitted(2, key, lease);
	cr_log_info("%s: a release sent while the store was paused freed its lease %lld ms after "
		    "it was resumed", st->name, (long long)ms);
	cr_assert(!conc_acquire(0, 0, key, lease, NULL), "%s: 3 in flight again", st->name);

	st->gone();
	ct_wait_store_down();
	sp_key(key, sizeof(key), "away");
	int got = conc_spread(key, CONC_HITS, leases, CONC_HITS, &degraded);
	cr_log_info("%s gone: %d nodes, limit %d, %d acquires spread: %d admitted (%d degraded)",
		    st->name, CT_NODES, CONC_LIMIT, CONC_HITS, got, degraded);
	cr_expect(got >= 1 && got <= CONC_LIMIT, "%s gone: %d admitted", st->name, got);
	cr_expect_gt(degraded, CONC_HITS / 2, "%s gone: %d answers said degraded", st->name,
		     degraded);
}

/* The leases in flight of key in the store. */
static long long store_leases(const struct ct_store *st, const char *key)
{
	char sql[512], out[64];
	long long n = 0;

	if (st == &ct_redis) {
		redisReply *r = redis_server_command(&ct_redis_srv, "KEYS *}:c:*:%s", key);
		cr_assert_not_null(r);
		for (size_t i = 0; i < r->elements; i++) {
			redisReply *z = redis_server_command(&ct_redis_srv, "ZCARD %s",
							     r->element[i]->str);
			cr_assert_not_null(z);
			n += z->integer;
			freeReplyObject(z);
		}
		freeReplyObject(r);
		return n;
	}
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM " CT_PG_TABLE " WHERE window_size < 0"
		 " AND position(convert_to('%s', 'UTF8') in key) > 0"
		 " AND count > extract(epoch FROM clock_timestamp())", key);
	cr_assert_eq(pg_server_query(ct_pg_srv.conninfo, sql, out, sizeof(out)), 1, "%s", out);
	return atoll(out);
}

/* Leases taken on the nodes' shares while the store was gone reach it
 * once it is back: the store, back, counts them (it denies a fourth of
 * limit 3); one given back meanwhile was never sent (a fourth is admitted
 * once the store has the others only). */
CT_STORE_TEST(concurrency_leases_taken_while_away_reach_the_store)
{
	char key[64], leases[CONC_HITS][LEASE_LEN + 1], lease[LEASE_LEN + 1];
	int degraded;

	conc_nodes_up(st);
	st->gone();
	ct_wait_store_down();
	sp_key(key, sizeof(key), "away");
	/* One acquire per node: each within its share (limit 3, 3 nodes). */
	int got = conc_spread(key, CT_NODES, leases, CT_NODES, &degraded);
	cr_assert_eq(got, CT_NODES, "%s gone: %d of %d admitted on the shares", st->name, got,
		     CT_NODES);
	cr_assert_eq(degraded, CT_NODES, "%s gone: every answer degraded", st->name);
	/* Node 1's given back while the store is away: never sent. */
	cr_assert(conc_release(1, key, leases[1]), "%s: released while away", st->name);
	ct_store_back(st);
	ct_wait_store_decides(1, CONC_LIMIT);
	/* The store gets the two kept (of nodes 0 and 2), not the one given
	 * back; then one more is admitted, through any node, and no other
	 * (the store decides: 3 in flight). */
	int64_t t0 = test_now_ms();
	long long held;
	while ((held = store_leases(st, key)) != 2 && test_now_ms() - t0 < 10000)
		test_sleep_ms(50);
	cr_assert_eq(held, 2, "%s back: the store holds %lld of the leases taken while it was "
		     "away, want 2", st->name, held);
	bool deg = true;
	cr_assert(conc_acquire(1, 0, key, lease, &deg) && !deg,
		  "%s back: a third admitted by the store", st->name);
	for (size_t n = 0; n < CT_NODES; n++)
		cr_assert(!conc_acquire(n, 0, key, lease, &deg) && !deg,
			  "%s back: node %zu denied, the store counts the leases taken while it "
			  "was away", st->name, n);
}

int main(int argc, char *argv[])
{
	return ct_main(argc, argv);
}
