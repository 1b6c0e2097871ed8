/*
 * test_cluster_admission.c - how many hits a cluster of agent nodes admits
 * on one key past its limit, and what that costs the store (Redis or
 * PostgreSQL; issues 9, 18, 22). The nodes, the stores and the SPOP client
 * are tests/lib/clustertest.h's; a case written for both stores
 * (CT_STORE_TEST) is two tests, cluster::redis_... and
 * cluster::postgres_....
 *
 *   - admission "local": each node decides from the total it last read
 *     plus its own hits (at least the limit, at most the limit per node);
 *     "exact": the store decides near the limit, within 1 %;
 *   - far from the limit a key costs no store round trip per hit (grants),
 *     and an idle node a dozen commands a second; answers report hits,
 *     not grants;
 *   - a store paused under exact admission: the nodes decide (degraded),
 *     and every hit reaches the store exactly once;
 *   - several limits in one decision, decided by the store.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tests/lib/clock.h"
#include "tests/lib/clustertest.h"

TestSuite(cluster, .init = ct_setup, .fini = ct_teardown, .timeout = 60);

/* ---------------------------------------------------------------- at the limit */

/* Three nodes, sync_rate 0.1 s, a limit of 100 per window, 600 hits in
 * the three patterns of ct_admit, on fresh keys. exact: the target of
 * issue 9, the limit within 1 % (and no answer degraded: the store is
 * up); local: what may never happen is that the cluster admits less than
 * the limit (nothing is lost) or more than the limit per node (each node
 * alone stops at it). */
#define ADMIT_LIMIT   100
#define ADMIT_HITS    600
#define ADMIT_SYNC    0.1
/* The store's timeout_ms: a failure bound. "No answer degraded" means the
 * store decided every hit; with 1 s, a loaded machine (make test beside a
 * build) had PostgreSQL answer 36 of 600 later than that and the agent
 * decide them itself, as it should: the store was not away, only slow. */
#define ADMIT_TIMEOUT_MS 5000

static void admission_case(const char *store, unsigned w, bool exact)
{
	for (int p = 0; p < CT_PATTERN_COUNT; p++) {
		char key[64];
		int64_t got;

		sp_key(key, sizeof(key), "admit");
		ct_degraded = 0;
		got = ct_admit((enum ct_pattern)p, key, w, ADMIT_LIMIT, ADMIT_HITS);
		cr_log_info("%s, admission %s, sync_rate %g s, limit %d, %d hits over %d nodes, "
			    "%s: %lld admitted (%lld answers degraded)", store,
			    exact ? "exact" : "local", ADMIT_SYNC, ADMIT_LIMIT, ADMIT_HITS, CT_NODES,
			    ct_pattern_names[p], (long long)got, (long long)ct_degraded);
		if (exact) {
			cr_expect(got >= ADMIT_LIMIT * 95 / 100 && got <= ADMIT_LIMIT + ADMIT_LIMIT / 100,
				  "%s, %s: %lld admitted, limit %d", store, ct_pattern_names[p],
				  (long long)got, ADMIT_LIMIT);
			cr_expect_eq(ct_degraded, 0, "%s, %s: %lld answers degraded; node 0's log:\n%s",
				     store, ct_pattern_names[p], (long long)ct_degraded, ct_node_log(0));
			continue;
		}
		cr_expect(got >= ADMIT_LIMIT, "%s, %s: %lld admitted, fewer than the limit %d",
			  store, ct_pattern_names[p], (long long)got, ADMIT_LIMIT);
		cr_expect(got <= (int64_t)CT_NODES * ADMIT_LIMIT,
			  "%s, %s: %lld admitted, more than the limit on every node", store,
			  ct_pattern_names[p], (long long)got);
	}
}

CT_STORE_TEST(admission_measured)
{
	unsigned w = ct_window();

	st->up(0);
	ct_nodes_start(CT_NODES, ct_with_admission(st->cfg(w, ADMIT_SYNC, ADMIT_TIMEOUT_MS), "local"));
	admission_case(st->name, w, false);
}

CT_STORE_TEST(admission_exact)
{
	unsigned w = ct_window();

	st->up(0);
	ct_nodes_start(CT_NODES, ct_with_admission(st->cfg(w, ADMIT_SYNC, ADMIT_TIMEOUT_MS), "exact"));
	ct_wait_store_decides(w, ADMIT_LIMIT);
	admission_case(st->name, w, true);
}

/* The same, asked per request (argument admission="exact") of nodes whose
 * namespace admits locally. */
Test(cluster, redis_admission_exact_per_request)
{
	unsigned w = ct_window();

	ct_redis.up(0);
	ct_nodes_start(CT_NODES, ct_with_admission(ct_redis.cfg(w, ADMIT_SYNC, ADMIT_TIMEOUT_MS), "local"));
	ct_admission_exact = true;
	ct_wait_store_decides(w, ADMIT_LIMIT);
	admission_case("redis", w, true);
}

/* ---------------------------------------------------------------- far from it */

/* 3,000 hits on a fresh key with a limit of LIMIT, `depth` at a time on
 * each node (waiting for their answers), round-robin over the nodes.
 * Returns the hits admitted; *cost what the agents cost the store. */
static int64_t far_hits(const struct ct_store *st, unsigned w, size_t depth, long long *cost)
{
	enum { HITS = 3000, LIMIT = 1000000 };
	long long before, after, in_before, in_after;
	int64_t admitted = 0, t0 = test_now_us();
	char key[64];

	sp_key(key, sizeof(key), "far");
	before = st->cost(&in_before);
	for (size_t i = 0; i < HITS / CT_NODES; i += depth) {
		uint64_t sid;

		for (size_t n = 0; n < CT_NODES; n++)
			for (size_t k = 0; k < depth && i + k < HITS / CT_NODES; k++)
				cr_assert(ct_limit_send(ct_nodes[n].fd[0], key, w, LIMIT, &sid) == 0,
					  "%s", sp_err);
		for (size_t n = 0; n < CT_NODES; n++)
			for (size_t k = 0; k < depth && i + k < HITS / CT_NODES; k++) {
				int a = ct_limit_ack(ct_nodes[n].fd[0]);

				cr_assert(a >= 0, "node %zu: %s", n, sp_err);
				admitted += a;
			}
	}
	after = st->cost(&in_after);
	*cost = after - before;
	cr_log_info("%s: %d hits far from a limit of %d over %d nodes, %zu at a time per node, "
		    "in %.2f s: %lld %s from the agents (%lld more run inside them)", st->name, HITS,
		    LIMIT, CT_NODES, depth, (double)(test_now_us() - t0) / 1e6, *cost, st->cost_unit,
		    in_after - in_before);
	return admitted;
}

/* Far from its limit a key costs no store round trip per hit (issues 9,
 * 18): 3,000 hits on a key with a limit of 1,000,000 over three nodes
 * (admission "auto", exact here) cost at most 300 Redis commands or
 * PostgreSQL statements (pg_stat_statements in the test's own server),
 * sync cycles and heartbeats included, and every hit is admitted: one hit
 * at a time per node, and eight.
 *
 * What they cost is per sync cycle, not per hit: a grant is twice the
 * node's demand in the last cycle, and the hits sent together when one
 * runs out go to the store (`depth` admissions per node, three statements
 * each with PostgreSQL: its token, its row, the decision; a sync cycle's
 * push chunk two, a read one, a heartbeat one). So the cycle is FAR_SYNC
 * (1 s), not 0.1 s: on a busy machine where the 3,000 hits took 1.09 s
 * (ten cycles of small grants) PostgreSQL counted 554 statements. */
#define FAR_SYNC 1.0

CT_STORE_TEST(far_from_the_limit_costs_no_round_trip_per_hit)
{
	static const size_t depths[] = { 1, 8 };
	unsigned w = ct_window();

	st->up(CT_STATEMENTS);
	ct_nodes_start(CT_NODES, st->cfg(w, FAR_SYNC, 1000));
	for (size_t i = 0; i < sizeof(depths) / sizeof(depths[0]); i++) {
		long long cost;

		cr_assert_eq(far_hits(st, w, depths[i], &cost), 3000);
		if (st->cost_report)
			st->cost_report();
		cr_expect_leq(cost, 300, "%lld %s for 3000 hits far from the limit, %zu at a time",
			      cost, st->cost_unit, depths[i]);
		cr_expect_gt(cost, 0, "nothing counted: are the %s counted?", st->cost_unit);
	}
}

/* What an idle node costs the store (issue 18): with one key known,
 * sync_rate 0.1 s, one namespace, each node sends one read of its key per
 * cycle (10 a second), one heartbeat a second (an EVALSHA, not an EVAL
 * of the script's text) and, since issue 33, one read of the namespace's
 * limits per key a second (the cycle that begins a new second): 12 in
 * all, at most 13 commands a second per node (the same margin as
 * before), counted by Redis over 5 s. The Redis CPU it costs (commandstats usec) is
 * logged, not asserted: it depends on the machine. */
#define IDLE_SECONDS 5

Test(cluster, redis_idle_node_costs_at_most_13_commands_a_second)
{
	unsigned w = ct_window();
	long long c0, c1, u0, u1, srv;
	int64_t t0, t1;
	char key[64];

	ct_redis.up(0);
	ct_nodes_start(CT_NODES, ct_redis.cfg(w, ADMIT_SYNC, 1000));
	sp_key(key, sizeof(key), "idle");
	for (size_t n = 0; n < CT_NODES; n++)
		cr_assert(ct_limit_hit(n, 0, key, w, 1000000) == 1, "node %zu", n);
	/* The key's first admission, seeds and first heartbeats done. */
	test_sleep_ms(1500);
	c0 = ct_redis_agent_cost(&srv, &u0);
	t0 = test_now_us();
	test_sleep_ms(IDLE_SECONDS * 1000);
	c1 = ct_redis_agent_cost(&srv, &u1);
	t1 = test_now_us();
	double secs = (double)(t1 - t0) / 1e6;
	double per = (double)(c1 - c0) / CT_NODES / secs;
	cr_log_info("idle, one key, sync_rate %g s: %lld commands from %d nodes in %.2f s: %.1f "
		    "per node and second, Redis CPU %.3f ms per node and second (%.1f us per "
		    "command)", ADMIT_SYNC, c1 - c0, CT_NODES, secs, per,
		    (double)(u1 - u0) / 1000.0 / CT_NODES / secs,
		    c1 > c0 ? (double)(u1 - u0) / (double)(c1 - c0) : 0.0);
	cr_assert_leq(per, 13.0, "%.1f commands per idle node and second", per);
	cr_assert_geq(per, 1.0, "%.1f commands per node and second: are the nodes syncing?", per);
}

/* Answers report hits, not headroom (issue 18): a key with a limit of
 * 1e9 on two nodes (admission auto: exact, grants of 1e9 / 64 / nodes at
 * first). Bursts written at once on each node (one admission asks a
 * grant, the others of the burst go to the store meanwhile), then hits one
 * at a time on either node: no answer says more than the hits made so far
 * (on the old code the store counted the grants as hits and answers said
 * 15,625,000 and more). A few sync cycles later, every node's answer is
 * the cluster's hits, within 2. */
#define HUGE_LIMIT  1000000000LL
#define HUGE_BURST  20
#define HUGE_SINGLE 100

CT_STORE_TEST(answers_report_hits_not_grants)
{
	unsigned w = ct_window();
	int64_t sent = 0, rate, worst = 0;
	char key[64];
	uint64_t sid;

	st->up(0);
	ct_nodes_start(2, st->cfg(w, ADMIT_SYNC, 1000));
	sp_key(key, sizeof(key), "huge");
	for (size_t n = 0; n < 2; n++) {
		for (int i = 0; i < HUGE_BURST; i++)
			cr_assert(ct_limit_send(ct_nodes[n].fd[0], key, w, HUGE_LIMIT, &sid) == 0,
				  "%s", sp_err);
		sent += HUGE_BURST;
		for (int i = 0; i < HUGE_BURST; i++) {
			cr_assert(ct_rate_ack(ct_nodes[n].fd[0], &rate) == 0, "node %zu: %s", n,
				  sp_err);
			cr_assert_leq(rate, sent, "%s: node %zu's burst answered rate %lld after %lld "
				      "hits", st->name, n, (long long)rate, (long long)sent);
			worst = rate > worst ? rate : worst;
		}
	}
	for (int i = 0; i < HUGE_SINGLE; i++) {
		size_t n = (size_t)i % 2;

		cr_assert(ct_limit_send(ct_nodes[n].fd[1], key, w, HUGE_LIMIT, &sid) == 0, "%s",
			  sp_err);
		sent++;
		cr_assert(ct_rate_ack(ct_nodes[n].fd[1], &rate) == 0, "node %zu: %s", n, sp_err);
		cr_assert_leq(rate, sent, "%s: node %zu answered rate %lld after %lld hits",
			      st->name, n, (long long)rate, (long long)sent);
		worst = rate > worst ? rate : worst;
	}
	cr_log_info("%s, limit %lld, two nodes: %lld hits, the highest rate answered %lld",
		    st->name, HUGE_LIMIT, (long long)sent, (long long)worst);
	/* Every grant hit reported spent by its node's sync cycles (once a
	 * second: agent/sync.c, SYNC_SPENT_PERIOD). */
	test_sleep_ms(1500);
	for (size_t n = 0; n < 2; n++) {
		cr_assert(ct_limit_send(ct_nodes[n].fd[2], key, w, HUGE_LIMIT, &sid) == 0, "%s",
			  sp_err);
		sent++;
		cr_assert(ct_rate_ack(ct_nodes[n].fd[2], &rate) == 0, "node %zu: %s", n, sp_err);
		cr_log_info("%s: then node %zu answered %lld after %lld hits", st->name, n,
			    (long long)rate, (long long)sent);
		cr_assert(rate <= sent && rate >= sent - 2, "%s: node %zu answered %lld after %lld "
			  "hits", st->name, n, (long long)rate, (long long)sent);
	}
}

/* ---------------------------------------------------------------- the store away */

/* Exact admissions while the store is paused (SIGSTOP: connections stay
 * open, the calls are received and applied on SIGCONT): the admissions
 * the store did not answer within timeout_ms are decided by the nodes
 * (degraded) and counted there; the store applies them late. Each is
 * sent again with its token, and what the store counted for it is taken
 * back from the node's diff: every hit is in the store exactly once.
 * Keys are few and their limit far (every hit admitted), so most hits
 * come from grants and the rest go to the store, as at the limit. */
#define PAUSE_RUN_MS    7000
#define PAUSE_DOWN_MS   1500
#define PAUSE_UP_MS     4500
#define PAUSE_RATE      2000    /* admissions per second over the cluster */
#define PAUSE_ADM_KEYS  12
#define PAUSE_ADM_LIMIT 5000    /* per key: far (about 1,200 hits each), small grants */

struct adm_load {
	char keys[PAUSE_ADM_KEYS][64];
	size_t sent[PAUSE_ADM_KEYS];
	unsigned w;
	int64_t admitted;
};

/* Admission i of an adm_load: keys, nodes and connections in turn. */
static void adm_load_one(size_t i, void *arg)
{
	struct adm_load *al = arg;
	size_t k = i % PAUSE_ADM_KEYS;

	al->admitted += ct_limit_hit(i % CT_NODES, (i / CT_NODES) % CT_CONNS, al->keys[k], al->w,
				     PAUSE_ADM_LIMIT);
	al->sent[k]++;
}

CT_STORE_TEST(admission_paused_counts_once)
{
	static struct adm_load al;
	unsigned w = ct_window();
	double total = 0, last = -1;
	bool equal = false;
	size_t all;

	st->up(0);
	ct_nodes_start(CT_NODES,
		       ct_with_admission(st->cfg(w, ADMIT_SYNC, st->timeout_ms), "exact"));
	memset(&al, 0, sizeof(al));
	al.w = w;
	for (size_t k = 0; k < PAUSE_ADM_KEYS; k++)
		sp_key(al.keys[k], sizeof(al.keys[k]), "admpause");
	ct_degraded = 0;
	all = ct_load_events(PAUSE_RUN_MS, PAUSE_RATE, PAUSE_DOWN_MS, st->pause, PAUSE_UP_MS,
			     st->resume, adm_load_one, &al);
	cr_log_info("%s, admission exact, paused %lld ms: %zu hits, %lld admitted, %lld decided "
		    "by the nodes alone (degraded)", st->name, (long long)(ct_up_at - ct_down_at),
		    all, (long long)al.admitted, (long long)ct_degraded);
	cr_assert_eq(al.admitted, (int64_t)all, "a limit of %d: every hit admitted",
		     PAUSE_ADM_LIMIT);
	cr_assert_gt(ct_degraded, 0, "no admission waited for the paused store: the test "
		     "shows nothing");
	/* Until the store holds what was sent: grants given back, corrections
	 * pushed (a few sync cycles). */
	for (int64_t s0 = test_now_ms(); test_now_ms() - s0 < 10000;) {
		total = 0;
		for (size_t k = 0; k < PAUSE_ADM_KEYS; k++)
			total += st->total("default", al.keys[k], w);
		if (total == (double)all && last == total) {
			equal = true;
			break;
		}
		last = total;
		test_sleep_ms(300);
	}
	cr_log_info("%s, admission exact: store total %g for %zu hits (%+g)", st->name, total, all,
		    total - (double)all);
	cr_assert(equal, "%s: the store holds %g for %zu hits (%+g): each hit exactly once "
		  "expected", st->name, total, all, total - (double)all);
	for (size_t k = 0; k < PAUSE_ADM_KEYS; k++)
		cr_assert_eq(st->total("default", al.keys[k], w), (double)al.sent[k], "%s: %s",
			     st->name, al.keys[k]);
}

/* The store down: an exact admission is decided from the node's view
 * (fail-open, degraded=true on the ACK), the hits counted there and the
 * limit still applies to what the node sees. */
Test(cluster, redis_admission_exact_store_down_decides_locally)
{
	static char tail[8192];
	unsigned w = ct_window();
	char key[64];
	int64_t admitted = 0;

	ct_redis.up(0);
	ct_node_start(0, ct_with_admission(ct_redis.cfg(w, ADMIT_SYNC, 100), "exact"));
	ct_redis.gone();
	sp_key(key, sizeof(key), "down");
	ct_degraded = 0;
	for (int i = 0; i < 10; i++)
		admitted += ct_limit_hit(0, 0, key, w, 5);
	cr_assert_eq(admitted, 5, "the node's share (alone: the whole limit) still limits");
	/* Every answer was decided on the node's share without asking the
	 * store, and says so. */
	cr_assert_eq(ct_degraded, 10, "%lld answers degraded", (long long)ct_degraded);
	/* The log says what happened, in which namespace. */
	test_sleep_ms(200);
	agentproc_log_tail(&ct_nodes[0].a, tail, sizeof(tail));
	cr_assert(strstr(tail, "namespace default: redis store: ") ||
		  strstr(tail, "namespace \"default\": the store did not decide an admission ("),
		  "the log names the namespace and what happened: %s", tail);
}

/* ---------------------------------------------------------------- several limits */

/* Several limits, one decision, decided by the store (issue 22): every
 * request carries a per-IP message (namespace "ip") and a per-key one
 * ("default"), both under exact admission with count_denied false, over
 * three nodes. Each limit holds within N + 1 %, and a request one limit
 * denies spends nothing of the other: the store's per-IP count is the
 * requests admitted, not the requests made. */
static void two_limits_case(unsigned w, int64_t ip_lim, int64_t key_lim, size_t hits)
{
	char ip[64], key[64];
	int64_t admitted = 0;
	double ip_total = -1, key_total = -1;

	sp_key(ip, sizeof(ip), "ip");
	sp_key(key, sizeof(key), "key");
	for (size_t i = 0; i < hits; i++) {
		size_t n = i % CT_NODES, c = (i / CT_NODES) % CT_CONNS;
		struct sp_msg m[2] = {
			{ .msg = "ratelimit-ip", .key = ip, .window = w, .limit = ip_lim, .ns = "ip" },
			{ .msg = "ratelimit-key", .key = key, .window = w, .limit = key_lim },
		};

		rawspop_buf_reset(&sp_wb);
		sp_put_notify(sp_next_sid, 1, m, 2);
		sp_next_sid += 2;
		sp_send(ct_nodes[n].fd[c]);
		int a = ct_limit_ack(ct_nodes[n].fd[c]);
		cr_assert(a >= 0, "node %zu hit %zu: %s", n, i, sp_err);
		admitted += a;
	}
	int64_t lim = ip_lim < key_lim ? ip_lim : key_lim;
	/* What the store holds once the take-backs are pushed (a sync or two)
	 * and the grant hits reported (once a second). */
	for (int64_t t0 = test_now_ms(); test_now_ms() - t0 < 6000; test_sleep_ms(300)) {
		ip_total = ct_redis.total("ip", ip, w);
		key_total = ct_redis.total("default", key, w);
		if (fabs(ip_total - (double)admitted) <= 1 && fabs(key_total - (double)admitted) <= 1)
			break;
	}
	cr_log_info("two limits (ip %lld, key %lld), %zu requests over %d nodes, exact, "
		    "count_denied false: %lld admitted; the store holds %g per IP, %g per key",
		    (long long)ip_lim, (long long)key_lim, hits, CT_NODES, (long long)admitted,
		    ip_total, key_total);
	cr_expect(admitted >= lim * 95 / 100 && admitted <= lim + lim / 100 + CT_NODES,
		  "%lld admitted, limits %lld and %lld", (long long)admitted, (long long)ip_lim,
		  (long long)key_lim);
	cr_expect(ip_total >= (double)admitted - 1 && ip_total <= (double)admitted + 1,
		  "per IP %g in the store for %lld admitted", ip_total, (long long)admitted);
	cr_expect(key_total >= (double)admitted - 1 && key_total <= (double)admitted + 1,
		  "per key %g in the store for %lld admitted", key_total, (long long)admitted);
}

Test(cluster, redis_two_limits_one_decision)
{
	unsigned w = ct_window();
	char cfg[2048];

	ct_redis.up(0);
	snprintf(cfg, sizeof(cfg),
		 "{\"log_level\":\"info\",\"namespaces\":["
		 "{\"name\":\"default\",\"window_sizes\":[%u],\"sync_rate\":0.1,"
		 "\"strategy\":\"redis\",\"admission\":\"exact\",\"count_denied\":false,"
		 "\"strategy_opts\":{\"port\":%d,\"timeout_ms\":1000}},"
		 "{\"name\":\"ip\",\"window_sizes\":[%u],\"sync_rate\":0.1,"
		 "\"strategy\":\"redis\",\"admission\":\"exact\",\"count_denied\":false,"
		 "\"strategy_opts\":{\"port\":%d,\"timeout_ms\":1000}}]}",
		 w, ct_redis_srv.port, w, ct_redis_srv.port);
	ct_nodes_start(CT_NODES, cfg);
	two_limits_case(w, 100, 50, 300);    /* the per-key limit decides */
	two_limits_case(w, 40, 100, 300);    /* the per-IP one */
}

int main(int argc, char *argv[])
{
	return ct_main(argc, argv);
}
