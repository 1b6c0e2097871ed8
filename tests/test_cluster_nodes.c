/*
 * test_cluster_nodes.c - what agent nodes sharing one real store (Redis or
 * PostgreSQL) know of each other and of their store, and what they do
 * while it is away. The nodes, the stores and the SPOP client are
 * tests/lib/clustertest.h's; a case written for both stores
 * (CT_STORE_TEST) is two tests, cluster::redis_... and
 * cluster::postgres_....
 *
 *   - heartbeats: the store counts the nodes, each node knows the count
 *     (store_nodes on /metrics), a node that stops is dropped;
 *   - the store away (issue 18): each node admits at most its share of
 *     what the cluster had left, and spends a grant or a share, not both;
 *   - the metrics an alert needs move when the store goes (issue 23);
 *   - an operator's view (GET /keys, ctl keys) holds the store's count of
 *     a key on any node, read when asked, or says that the store is away
 *     (issue 28).
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tests/lib/clock.h"
#include "tests/lib/clustertest.h"
#include "tests/lib/httpc.h"

TestSuite(cluster, .init = ct_setup, .fini = ct_teardown, .timeout = 60);

#define ADMIT_SYNC  0.1
#define ADMIT_LIMIT 100
#define ADMIT_HITS  600

/* ---------------------------------------------------------------- heartbeats */

/* Each node says it is there once a second (its heartbeat): the store
 * counts three, every node knows it (store_nodes on /metrics), and a node
 * that stops is no longer counted after three seconds. */
CT_STORE_TEST(nodes_count_each_other)
{
	static const char sample[] = "spoa_ratelimit_store_nodes{namespace=\"default\"} ";
	int64_t t0;

	st->up(0);
	ct_nodes_start(CT_NODES, ct_with_http(st->cfg(ct_window(), 0.1, 1000)));
	ct_wait_nodes(CT_NODES);
	ct_node_stop(2);
	t0 = test_now_ms();
	while (ct_node_metric(0, sample) != CT_NODES - 1 && test_now_ms() - t0 < 5000)
		test_sleep_ms(100);
	cr_assert_eq(ct_node_metric(0, sample), CT_NODES - 1,
		     "a stopped node still counted after %lld ms", (long long)(test_now_ms() - t0));
}

/* ---------------------------------------------------------------- the store away */

/* While the store is away, each node admits for a key at most its share
 * of what the cluster had left when it last heard from the store:
 * (limit - known) / nodes. Three nodes, limit 100, the store gone (Redis
 * SIGKILLed, PostgreSQL shut down): 600 hits on a new key admit 85..101
 * (each node ~33), round-robin and in parallel; a key with 50 hits before
 * it went ends within 85..101 in all. Before, each node admitted the whole
 * limit: 300, and 190-200. */
static void store_away_case(const struct ct_store *st, const char *what, unsigned w)
{
	char warm[64], key[64];
	int64_t before, after;

	ct_wait_nodes(CT_NODES);
	sp_key(warm, sizeof(warm), "warm");
	before = ct_admit(CT_ROUND_ROBIN, warm, w, ADMIT_LIMIT, 50);
	cr_assert_eq(before, 50);
	/* Every node reads the key's total once (a sync cycle or two). */
	test_sleep_ms(400);
	st->gone();
	/* The nodes notice (their connections drop): what this test measures
	 * is the shares; hits already in flight to the store when it went
	 * are the bound's own term (docs/CLUSTER.md). */
	ct_wait_store_down();
	for (int p = CT_PARALLEL; p <= CT_ROUND_ROBIN; p++) {
		int64_t got;

		sp_key(key, sizeof(key), "away");
		ct_degraded = 0;
		got = ct_admit((enum ct_pattern)p, key, w, ADMIT_LIMIT, ADMIT_HITS);
		cr_log_info("%s gone, %d nodes, limit %d, a new key, %d hits, %s: %lld admitted "
			    "(%lld answers degraded)", what, CT_NODES, ADMIT_LIMIT, ADMIT_HITS,
			    ct_pattern_names[p], (long long)got, (long long)ct_degraded);
		/* Over the limit (seen once under heavy load, PostgreSQL,
		 * parallel): what each node knew of the cluster says whose
		 * share was off. */
		for (size_t n = 0; got > ADMIT_LIMIT + 1 && n < CT_NODES; n++)
			cr_log_warn("%s, %s: node %zu: store_nodes %lld, admissions degraded %lld, "
				    "store_up %lld", what, ct_pattern_names[p], n,
				    ct_node_metric(n, "spoa_ratelimit_store_nodes{namespace=\"default\"} "),
				    ct_node_metric(n, "spoa_ratelimit_admissions_total{namespace=\"default\","
						   "by=\"degraded\"} "),
				    ct_node_metric(n, "spoa_ratelimit_store_up{namespace=\"default\"} "));
		cr_expect(got >= 85 && got <= ADMIT_LIMIT + 1, "%s, %s: %lld admitted, limit %d",
			  what, ct_pattern_names[p], (long long)got, ADMIT_LIMIT);
		/* Decided on the shares, and saying so (a first few may still have
		 * been the store's, before the node noticed it going). */
		cr_expect_gt(ct_degraded, ADMIT_HITS / 2, "%s: %lld answers said degraded", what,
			     (long long)ct_degraded);
	}
	after = ct_admit(CT_ROUND_ROBIN, warm, w, ADMIT_LIMIT, ADMIT_HITS);
	cr_log_info("%s gone, a key with %lld hits before: %lld more admitted, %lld in all",
		    what, (long long)before, (long long)after, (long long)(before + after));
	cr_expect(before + after >= 85 && before + after <= ADMIT_LIMIT + 1,
		  "%s: %lld admitted in all, limit %d", what, (long long)(before + after),
		  ADMIT_LIMIT);
}

CT_STORE_TEST(store_gone_nodes_keep_to_their_shares)
{
	unsigned w = ct_window();

	st->up(0);
	ct_nodes_start(CT_NODES, ct_with_http(st->cfg(w, ADMIT_SYNC, 50)));
	store_away_case(st, st->name, w);
}

/* sync_rate 0: the same shares once the store is away. */
CT_STORE_TEST(store_gone_synchronous_nodes_keep_to_their_shares)
{
	unsigned w = ct_window();
	char what[64];

	st->up(0);
	ct_nodes_start(CT_NODES, ct_with_http(st->cfg(w, 0, 50)));
	snprintf(what, sizeof(what), "%s (sync_rate 0)", st->name);
	store_away_case(st, what, w);
}

/* Far from the limit the nodes hold grants of the store: while it is
 * away, a node spends its grant or its share, not both. Limit 1,000, 300
 * hits before the kill (grants given out), 3,000 after: 1,000 in all at
 * most (+1 %). */
Test(cluster, redis_killed_nodes_spend_a_grant_or_a_share)
{
	unsigned w = ct_window();
	char key[64];

	ct_redis.up(0);
	ct_nodes_start(CT_NODES, ct_with_http(ct_redis.cfg(w, ADMIT_SYNC, 50)));
	ct_wait_nodes(CT_NODES);
	sp_key(key, sizeof(key), "granted");
	int64_t before = ct_admit(CT_ROUND_ROBIN, key, w, 1000, 300);
	cr_assert_eq(before, 300);
	test_sleep_ms(400);
	ct_redis.gone();
	ct_wait_store_down();
	ct_degraded = 0;
	int64_t after = ct_admit(CT_ROUND_ROBIN, key, w, 1000, 3000);
	cr_log_info("redis killed, limit 1000, 300 hits before (grants out), 3000 after: %lld "
		    "more admitted, %lld in all (%lld degraded)", (long long)after,
		    (long long)(before + after), (long long)ct_degraded);
	cr_expect(before + after >= 850 && before + after <= 1010, "%lld admitted in all",
		  (long long)(before + after));
}

/* The metrics an alert needs move when the store goes (issue 23): paused
 * (pushes sent and not confirmed: sync_cycles_total{result="failed"}),
 * then killed (cycles due while it is away: result="skipped"), with
 * admissions decided on the node's share (admissions_total{by="degraded"}),
 * hits waiting for it (store_pending_hits) and store_up 0. */
static void hits_for(unsigned w, const char *key, int ms)
{
	int64_t t0 = test_now_ms();

	while (test_now_ms() - t0 < ms) {
		ct_limit_hit(0, 0, key, w, 1000000);
		test_sleep_ms(5);
	}
}

Test(cluster, redis_outage_moves_the_alert_metrics)
{
	static const char failed[] = "spoa_ratelimit_sync_cycles_total{namespace=\"default\","
				     "result=\"failed\"} ";
	static const char skipped[] = "spoa_ratelimit_sync_cycles_total{namespace=\"default\","
				      "result=\"skipped\"} ";
	static const char degraded[] = "spoa_ratelimit_admissions_total{namespace=\"default\","
				       "by=\"degraded\"} ";
	static const char pending[] = "spoa_ratelimit_store_pending_hits{namespace=\"default\"} ";
	static const char up[] = "spoa_ratelimit_store_up{namespace=\"default\"} ";
	unsigned w = ct_window();
	char key[64], fresh[64];

	ct_redis.up(0);
	ct_node_start(0, ct_with_http(ct_redis.cfg(w, ADMIT_SYNC, 100)));
	sp_key(key, sizeof(key), "alert");
	sp_key(fresh, sizeof(fresh), "alert-new");
	hits_for(w, key, 300);
	cr_assert_eq(ct_node_metric(0, failed), 0);
	cr_assert_eq(ct_node_metric(0, skipped), 0);
	cr_assert_eq(ct_node_metric(0, degraded), 0);
	ct_redis.pause();
	hits_for(w, key, 1000);
	long long f = ct_node_metric(0, failed);
	ct_redis.resume();
	test_sleep_ms(500);
	ct_redis.gone();
	/* The key's hits may all come from a grant the node still holds
	 * (far from the limit: "a grant or a share, not both"): a key it
	 * holds none for is decided on the share, degraded. */
	hits_for(w, key, 500);
	hits_for(w, fresh, 500);
	long long sk = ct_node_metric(0, skipped), dg = ct_node_metric(0, degraded);
	long long pd = ct_node_metric(0, pending), u = ct_node_metric(0, up);
	cr_log_info("paused 1 s: %lld cycles failed; killed 1 s: %lld skipped, %lld admissions "
		    "degraded, %lld hits pending, store_up %lld", f, sk, dg, pd, u);
	cr_expect_gt(f, 0, "pushes sent to a paused store count as failed");
	cr_expect_gt(sk, 0, "cycles due while the store is away count as skipped");
	cr_expect_gt(dg, 0, "admissions decided on the share count as degraded");
	cr_expect_gt(pd, 0, "hits waiting for the store");
	cr_expect_eq(u, 0);
}

/* ------------------------------------------------- GET /keys, ctl keys */

/* Issue 28, finding 4: an operator's view does not depend on the node.
 * Node 0 counts 8 hits of a key; once its sync has pushed them (the store
 * holds 8: waited for, not slept), node 1, which never saw the key,
 * answers GET /keys with the store's 8, read when asked and marked so
 * ("store":{"current":8,...,"read_at"}), next to its own view
 * ("seen":false, count and cluster 0); ctl keys prints it. With the store
 * away the answer says so ("store":{"error"}) and still holds the node's
 * view: paused past its timeout_ms (the read times out), then gone (the
 * connection drops). Before: node 1 answered "cluster":0 and nothing
 * else. */
#define KEYS_IO_MS 10000          /* a far bound: a read ends within timeout_ms */

/* GET /keys?key=key on node n. */
static void node_keys(size_t n, const char *key, struct httpc_resp *r)
{
	char target[128];
	const char *why = "";

	snprintf(target, sizeof(target), "/keys?key=%s", key);
	cr_assert(httpc_get(ct_nodes[n].a.http_port, target, CT_ADMIN, r, KEYS_IO_MS, &why) == 0,
		  "GET %s on node %zu: %s", target, n, why);
	cr_assert_eq(r->status, 200, "node %zu: %s", n, r->body);
	cr_log_info("node %zu: %s", n, r->body);
}

/* `spoa-ratelimit ctl keys default key` against node n, its output in out. */
static void node_ctl_keys(size_t n, const char *key, char *out, size_t cap)
{
	char cmd[1024];

	snprintf(cmd, sizeof(cmd), "%s ctl -c %s keys default %s 2>&1", agentproc_binary(),
		 ct_nodes[n].a.cfg_path, key);
	FILE *f = popen(cmd, "r");
	cr_assert_not_null(f);
	size_t len = fread(out, 1, cap - 1, f);
	out[len] = '\0';
	cr_assert_eq(pclose(f), 0, "%s", out);
	cr_log_info("ctl keys on node %zu:\n%s", n, out);
}

/* The store away: said so, the node's view answered all the same. */
static void keys_say_away(const char *key, unsigned w, const char *how)
{
	struct httpc_resp r;
	char want[128], out[4096];

	node_keys(1, key, &r);
	snprintf(want, sizeof(want), "{\"window\":%u,\"count\":0,\"cluster\":0,", w);
	cr_assert_not_null(strstr(r.body, want), "store %s: %s", how, r.body);
	cr_assert_not_null(strstr(r.body, "\"seen\":false,\"store\":{\"error\":\""),
			   "store %s: %s", how, r.body);
	node_ctl_keys(1, key, out, sizeof(out));
	cr_assert_not_null(strstr(out, "store: away ("), "store %s: %s", how, out);
}

CT_STORE_TEST(keys_read_the_store_on_any_node)
{
	unsigned w = ct_window();
	const char *cfg;
	struct httpc_resp r;
	char key[64], want[128], out[4096];
	int64_t t0;
	double total = -1;

	st->up(0);
	cfg = ct_with_admin(st->cfg(w, CT_SYNC_RATE, 1000));
	ct_node_start(0, cfg);
	ct_node_start(1, cfg);
	sp_key(key, sizeof(key), "keys");
	for (size_t i = 0; i < 8; i++)
		ct_hit(0, i % CT_CONNS, key, w, &ct_lat_all);
	t0 = test_now_ms();
	while ((total = st->total("default", key, w)) != 8 && test_now_ms() - t0 < 10000)
		test_sleep_ms(10);
	cr_assert_eq(total, 8, "%s: node 0's sync did not push its 8 hits: the store holds %g",
		     st->name, total);
	time_t before = time(NULL);
	node_keys(1, key, &r);
	cr_log_info("%s: node 1 reads 8 from the store %lld ms after node 0's hits (sync_rate %g)",
		    st->name, (long long)(test_now_ms() - t0), CT_SYNC_RATE);
	snprintf(want, sizeof(want), "{\"window\":%u,\"count\":0,\"cluster\":0,", w);
	cr_assert_not_null(strstr(r.body, want), "node 1's own view: %s", r.body);
	cr_assert_not_null(strstr(r.body, "\"seen\":false,\"store\":{\"current\":8,\"previous\":0,"
				  "\"rate\":8,\"read_at\":"), "%s", r.body);
	long long at = httpc_body_num(&r, "read_at");
	cr_assert(at >= (long long)before - 1 && at <= (long long)time(NULL) + 1,
		  "read_at %lld, asked at %lld", at, (long long)before);
	/* Node 0, which counted them: its view and the store agree. */
	node_keys(0, key, &r);
	snprintf(want, sizeof(want), "{\"window\":%u,\"count\":8,\"cluster\":8,", w);
	cr_assert_not_null(strstr(r.body, want), "%s", r.body);
	cr_assert_not_null(strstr(r.body, "\"seen\":true,\"store\":{\"current\":8,"), "%s", r.body);
	node_ctl_keys(1, key, out, sizeof(out));
	snprintf(want, sizeof(want), "%7us %12s %12s", w, "-", "-");
	cr_assert_not_null(strstr(out, want), "node 1 holds no counter: %s", out);
	cr_assert_not_null(strstr(out, "store, read at "), "%s", out);
	snprintf(want, sizeof(want), "%7us %12d %12d %12d\n", w, 8, 0, 8);
	cr_assert_not_null(strstr(out, want), "%s", out);

	st->pause();
	keys_say_away(key, w, "paused");
	st->gone();
	keys_say_away(key, w, "gone");
}

int main(int argc, char *argv[])
{
	return ct_main(argc, argv);
}
