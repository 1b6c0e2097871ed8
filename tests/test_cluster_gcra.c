/*
 * test_cluster_gcra.c - GCRA across a cluster (docs/CLUSTER.md, "GCRA
 * across a cluster"): three agent nodes on one real store (Redis or
 * PostgreSQL: CT_STORE_TEST runs each case for both), one namespace with
 * `"algorithm": "gcra"`, 10 hits per 1 s, a burst of 5.
 *
 *   - the store holds the one TAT and moves it (a Redis script, a
 *     PostgreSQL statement): 60 hits at once spread over the three nodes
 *     admit the burst once, 5 (+-1), not 5 per node;
 *   - the rate is the configured one across the nodes (the store's step
 *     on the window, not the table's period);
 *   - while the store is away each node admits on its share of the rate
 *     and the burst (max(5 / 3, 1) at once, 10 / 3 a second), and says
 *     so (degraded): the three together stay near the burst; once it is
 *     back those hits are in its TAT (pushed by the sync cycles);
 *   - a hit the store admitted for a request another limit denies is
 *     given back in the store's TAT (a negative diff);
 *   - PostgreSQL's TAT rows are purged once behind the clock, never
 *     while ahead of it;
 *   - GET /keys on a node that never saw a key reads its TAT from the
 *     store (the hits in its bucket).
 *
 * A burst takes time on two busy cores, and GCRA refills while it goes:
 * the counts are asserted against the burst plus what the rate gave back
 * during the burst as measured (10 a second), never against a time.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/lib/clock.h"
#include "tests/lib/clustertest.h"
#include "tests/lib/httpc.h"

TestSuite(cluster, .init = ct_setup, .fini = ct_teardown, .timeout = 60);

#define GCRA_WINDOW 1
#define GCRA_LIMIT  10
#define GCRA_BURST  5
#define GCRA_HITS   60

/* The store's namespace as a gcra one: limit per window w, burst 5,
 * sync_rate 0.1 s (the heartbeat's, the store checks' and the pushes' of
 * hits admitted while the store was away; every hit the node's copy
 * admits is the store's step). A static buffer. */
static const char *gcra_cfg_of(const struct ct_store *st, int timeout_ms, unsigned w, int limit)
{
	static char out[2048 + 128];
	const char *cfg = ct_with_admin(st->cfg(w, 0.1, timeout_ms));
	const char *p = strstr(cfg, "\"sync_rate\":");

	cr_assert_not_null(p);
	snprintf(out, sizeof(out), "%.*s\"algorithm\":\"gcra\",\"limit\":%d,\"burst\":%d,%s",
		 (int)(p - cfg), cfg, limit, GCRA_BURST, p);
	return out;
}

/* limit 10 per 1 s, burst 5. */
static const char *gcra_cfg(const struct ct_store *st, int timeout_ms)
{
	return gcra_cfg_of(st, timeout_ms, GCRA_WINDOW, GCRA_LIMIT);
}

/* How far key's TAT (window w) runs ahead of the store's clock, in
 * seconds, read straight from the store; -1 when it holds none (or one
 * behind its clock), or does not answer. */
static double gcra_store_ahead(const struct ct_store *st, const char *key, unsigned w)
{
	char sql[512], out[64] = "";

	if (st == &ct_redis) {
		redisReply *t = redis_server_command(&ct_redis_srv, "TIME");
		redisReply *v = redis_server_command(&ct_redis_srv, "GET rl:{default:%u}:g:%u:%s",
						     redis_server_bucket(key, strlen(key)), w, key);
		double ahead = -1;

		if (t && t->type == REDIS_REPLY_ARRAY && t->elements == 2 && v &&
		    v->type == REDIS_REPLY_STRING)
			ahead = strtod(v->str, NULL) - (strtod(t->element[0]->str, NULL) +
							 strtod(t->element[1]->str, NULL) / 1e6);
		if (t)
			freeReplyObject(t);
		if (v)
			freeReplyObject(v);
		return ahead > 0 ? ahead : -1;
	}
	snprintf(sql, sizeof(sql),
		 "SELECT count - extract(epoch FROM clock_timestamp()) FROM " CT_PG_TABLE
		 " WHERE namespace = 'default' AND key = convert_to('%s', 'UTF8') AND "
		 "window_size = %u AND window_start = -1", key, w);
	if (pg_server_query(ct_pg_srv.conninfo, sql, out, sizeof(out)) != 1)
		return -1;
	double ahead = strtod(out, NULL);
	return ahead > 0 ? ahead : -1;
}

/* GCRA_HITS hits of a new key sent at once over the nodes: how many were
 * admitted, and in *ms how long the burst took (the first send to the
 * last answer). */
static int64_t gcra_burst(const char *what, int64_t *ms)
{
	char key[64];
	int64_t t0, got;

	sp_key(key, sizeof(key), what);
	ct_degraded = 0;
	t0 = test_now_ms();
	got = ct_admit(CT_PARALLEL, key, GCRA_WINDOW, GCRA_LIMIT, GCRA_HITS);
	*ms = test_now_ms() - t0;
	return got;
}

/* What the rate gives back while a burst of ms goes: 10 a second. */
static int64_t gcra_refill(int64_t ms)
{
	return ms * GCRA_LIMIT / (1000 * GCRA_WINDOW);
}

/* The target of issue 32: three nodes on the store, 60 hits at once spread
 * over them admit 5 (+-1), the burst once. Before, a gcra namespace with a
 * store was refused at load; with each node on its own TAT it would admit
 * 15. */
CT_STORE_TEST(gcra_burst_once_across_nodes)
{
	int64_t ms, got;

	st->up(0);
	ct_nodes_start(CT_NODES, gcra_cfg(st, 1000));
	ct_wait_nodes(CT_NODES);
	got = gcra_burst("gcra", &ms);
	cr_log_info("%s: %d nodes, limit %d per %d s, burst %d, %d hits at once: %lld admitted "
		    "in %lld ms (%lld degraded)", st->name, CT_NODES, GCRA_LIMIT, GCRA_WINDOW,
		    GCRA_BURST, GCRA_HITS, (long long)got, (long long)ms, (long long)ct_degraded);
	cr_expect_eq(ct_degraded, 0, "%s: %lld answers degraded with the store up", st->name,
		     (long long)ct_degraded);
	/* Decided by the store's step, each admitted hit (no grants). */
	long long by_store = 0;
	for (size_t n = 0; n < CT_NODES; n++)
		by_store += ct_node_metric(n, "spoa_ratelimit_admissions_total{namespace=\"default\","
					   "by=\"store\"} ");
	cr_expect_geq(by_store, got, "%s: %lld decided by the store, %lld admitted", st->name,
		      by_store, (long long)got);
	cr_expect(got >= GCRA_BURST - 1 && got <= GCRA_BURST + 1 + gcra_refill(ms),
		  "%s: %lld admitted of %d at once in %lld ms, burst %d", st->name, (long long)got,
		  GCRA_HITS, (long long)ms, GCRA_BURST);
}

/* GET /keys of a node that never saw the key reads the store's TAT: 3
 * hits on node 0 (limit 10 per 60 s: T = 6 s, burst 5), node 1 answers
 * 3 hits in the key's bucket (less what 6 s each gave back since). */
CT_STORE_TEST(gcra_keys_read_the_store)
{
	char key[64], target[128];
	struct httpc_resp r;
	const char *why = NULL;

	st->up(0);
	ct_nodes_up = 2;
	ct_nodes_start(2, gcra_cfg_of(st, 1000, 60, 10));
	ct_wait_nodes(2);
	sp_key(key, sizeof(key), "gcra-keys");
	for (int i = 0; i < 3; i++)
		cr_assert(ct_limit_hit(0, 0, key, 60, 10), "%s: hit %d admitted", st->name, i);
	snprintf(target, sizeof(target), "/keys?namespace=default&key=%s", key);
	cr_assert_eq(httpc_get(ct_nodes[1].a.http_port, target, CT_ADMIN, &r, 5000, &why), 0,
		     "%s", why);
	cr_assert_eq(r.status, 200, "%s", r.body);
	const char *store = strstr(r.body, "\"store\":{\"count\":");
	cr_assert_not_null(store, "%s: %s", st->name, r.body);
	double hits = strtod(store + strlen("\"store\":{\"count\":"), NULL);
	cr_assert(hits > 2 && hits <= 3.0001, "%s: the store's bucket holds %g hits: %s",
		  st->name, hits, r.body);
}

/* The rate across the nodes is the configured one: after the burst, half
 * a second gives back 5 hits' worth (T = 0.1 s), so the next 60 hits at
 * once admit 5 (+-1), what the rate gave back meanwhile, as measured.
 * Before, the store's step took the table's period (window x burst) for
 * the window: T was 0.5 s, and the second burst admitted 1. */
CT_STORE_TEST(gcra_rate_across_nodes)
{
	char key[64];
	int64_t got, got2, t0, ms, since_end, all;

	st->up(0);
	ct_nodes_start(CT_NODES, gcra_cfg(st, 1000));
	ct_wait_nodes(CT_NODES);
	sp_key(key, sizeof(key), "gcra-rate");
	ct_degraded = 0;
	t0 = test_now_ms();
	got = ct_admit(CT_PARALLEL, key, GCRA_WINDOW, GCRA_LIMIT, GCRA_HITS);
	ms = test_now_ms() - t0;
	test_sleep_ms(500);
	since_end = test_now_ms() - t0 - ms;
	got2 = ct_admit(CT_PARALLEL, key, GCRA_WINDOW, GCRA_LIMIT, GCRA_HITS);
	all = test_now_ms() - t0;
	cr_log_info("%s: %lld admitted in %lld ms, %lld ms later %lld more (%lld degraded)",
		    st->name, (long long)got, (long long)ms, (long long)since_end,
		    (long long)got2, (long long)ct_degraded);
	int64_t lo = gcra_refill(since_end) < GCRA_BURST ? gcra_refill(since_end) : GCRA_BURST;
	cr_expect(got >= GCRA_BURST - 1 && got2 >= lo - 1 &&
		  got + got2 <= GCRA_BURST + 1 + gcra_refill(all),
		  "%s: %lld then %lld admitted, %lld ms apart", st->name, (long long)got,
		  (long long)got2, (long long)since_end);
}

/* The store away: each node on its share, max(5 / 3, 1) = 1 hit at once
 * and 10 / 3 a second, saying degraded. 60 hits at once admit about 3 (each
 * node its one), never the 15 of three whole bursts. */
CT_STORE_TEST(gcra_store_gone_nodes_keep_to_their_shares)
{
	int64_t ms, got;

	st->up(0);
	ct_nodes_start(CT_NODES, gcra_cfg(st, 50));
	ct_wait_nodes(CT_NODES);
	st->gone();
	ct_wait_store_down();
	got = gcra_burst("gcra-away", &ms);
	cr_log_info("%s gone: %d nodes, burst %d, %d hits at once: %lld admitted in %lld ms "
		    "(%lld degraded)", st->name, CT_NODES, GCRA_BURST, GCRA_HITS, (long long)got,
		    (long long)ms, (long long)ct_degraded);
	cr_expect(got >= CT_NODES - 1 && got <= GCRA_BURST + 1 + gcra_refill(ms),
		  "%s gone: %lld admitted of %d at once in %lld ms", st->name, (long long)got,
		  GCRA_HITS, (long long)ms);
	cr_expect_gt(ct_degraded, GCRA_HITS / 2, "%s gone: %lld answers said degraded", st->name,
		     (long long)ct_degraded);
}

/* A rate limiter loses no count: the hits each node admitted on its
 * share while the store was away reach the store's TAT once it is back
 * (the sync cycles' TAT steps of cost 0 carrying them as a diff), so the
 * next burst across the nodes admits what the rate left, not one more
 * burst. 10 per 30 s (T = 3 s), burst 5: away, each node admits one hit
 * (its share: 9 s of a 15 s bucket); back, the store's TAT runs about 9 s
 * ahead, and 60 hits at once admit 2 (5 - 3), not 5. Before, the store
 * held no TAT for the key (and admitted 5). */
CT_STORE_TEST(gcra_hits_while_away_reach_the_store)
{
	const unsigned w = 30;
	const double T = 3.0;
	char key[64];
	int64_t got, ms, t0;
	double ahead = -1;

	st->up(0);
	ct_nodes_start(CT_NODES, gcra_cfg_of(st, st->timeout_ms, w, GCRA_LIMIT));
	ct_wait_nodes(CT_NODES);
	st->gone();
	ct_wait_store_down();
	sp_key(key, sizeof(key), "away");
	ct_degraded = 0;
	got = ct_admit(CT_PARALLEL, key, w, GCRA_LIMIT, GCRA_HITS);
	cr_log_info("%s gone: %lld admitted of %d at once (%lld degraded)", st->name,
		    (long long)got, GCRA_HITS, (long long)ct_degraded);
	cr_assert_eq(got, CT_NODES, "%s gone: one hit per node (its share)", st->name);
	ct_store_back(st);
	ct_wait_store_decides(w, GCRA_LIMIT);
	/* The pushes: a sync cycle (0.1 s) once each node's store is back. */
	for (t0 = test_now_ms(); test_now_ms() - t0 < 10000; test_sleep_ms(50))
		if ((ahead = gcra_store_ahead(st, key, w)) > 0)
			break;
	cr_assert_gt(ahead, 0, "%s: no TAT in the store for the %lld hits admitted while it "
		     "was away", st->name, (long long)got);
	t0 = test_now_ms();
	ct_degraded = 0;
	got = ct_admit(CT_PARALLEL, key, w, GCRA_LIMIT, GCRA_HITS);
	ms = test_now_ms() - t0;
	cr_log_info("%s back: its TAT %.2f s ahead; %d hits at once: %lld admitted in %lld ms "
		    "(%lld degraded)", st->name, ahead, GCRA_HITS, (long long)got, (long long)ms,
		    (long long)ct_degraded);
	/* 3 hits of 3 s, less the time the pushes took to be read. */
	cr_expect_geq(ahead, 2 * T, "%s: the store's TAT %.2f s ahead, for 3 hits of %g s",
		      st->name, ahead, T);
	cr_expect_eq(ct_degraded, 0, "%s: %lld answers degraded", st->name,
		     (long long)ct_degraded);
	cr_expect_leq(got, (int64_t)((GCRA_BURST * T - ahead + ms / 1000.0) / T) + 1,
		      "%s: %lld admitted with the TAT %.2f s ahead (burst %d of %g s)", st->name,
		      (long long)got, ahead, GCRA_BURST, T);
}

/* Several limits, one decision: a request another limit denies gives
 * back, in the store's TAT too, the GCRA hit the store had admitted for
 * it. Each request is a gcra message (6 per window: T = window / 6, burst 5) and
 * a window message of namespace "ip" on the same store (limit 2), both
 * exact and count_denied false, 10 at once on one connection: the store
 * decides both parts of each; gcra admits 5, the window 2, so 3 requests
 * admitted by gcra are denied and their hits given back (a negative diff,
 * pushed with the next sync cycle): the store's TAT ends 2 hits (2 T)
 * ahead of the first hit, not 5. Before, only the node's copy got them
 * back. */
CT_STORE_TEST(gcra_hit_given_back_in_the_store)
{
	/* A window that stays current (the ip limit's), T = w / 6. */
	const unsigned w = ct_window();
	const double T = w / 6.0;
	char cfg[4096], key[64], ip[64];
	int64_t admitted = 0;
	double ahead = -1, t_first;

	st->up(0);
	/* st's namespace twice: "default" as gcra, "ip" a window counter. */
	const char *base = st->cfg(w, 0.1, 1000);
	const char *nsd = strstr(base, "{\"name\":\"default\",");
	cr_assert_not_null(nsd);
	const char *rest = nsd + strlen("{\"name\":\"default\",");
	int restlen = (int)strlen(rest) - 2;        /* without the closing "]}" */
	snprintf(cfg, sizeof(cfg),
		 "{\"log_level\":\"info\",\"namespaces\":["
		 "{\"name\":\"default\",\"algorithm\":\"gcra\",\"limit\":6,\"burst\":%d,"
		 "\"admission\":\"exact\",\"count_denied\":false,%.*s,"
		 "{\"name\":\"ip\",\"admission\":\"exact\",\"count_denied\":false,%.*s]}",
		 GCRA_BURST, restlen, rest, restlen, rest);
	ct_node_start(0, cfg);
	sp_key(key, sizeof(key), "given");
	sp_key(ip, sizeof(ip), "ip");
	t_first = (double)test_now_ms() / 1000.0;
	rawspop_buf_reset(&sp_wb);
	for (int i = 0; i < 10; i++) {
		struct sp_msg m[2] = {
			{ .msg = "ratelimit-key", .key = key, .window = w, .limit = 6 },
			{ .msg = "ratelimit-ip", .key = ip, .window = w, .limit = 2, .ns = "ip" },
		};
		sp_put_notify(sp_next_sid, 1, m, 2);
		sp_next_sid += 2;
	}
	sp_send(ct_nodes[0].fd[0]);
	for (int i = 0; i < 10; i++) {
		int r = ct_limit_ack(ct_nodes[0].fd[0]);
		cr_assert(r >= 0, "ack %d: %s", i, sp_err);
		admitted += r;
	}
	cr_assert_eq(admitted, 2, "the window's limit decides");
	/* The give-backs: a sync cycle (0.1 s) later. */
	for (int64_t t0 = test_now_ms(); test_now_ms() - t0 < 10000; test_sleep_ms(100)) {
		ahead = gcra_store_ahead(st, key, w);
		if (ahead > 0 && ahead + (double)test_now_ms() / 1000.0 - t_first < 2.5 * T)
			break;
	}
	double tat = ahead + (double)test_now_ms() / 1000.0 - t_first;
	cr_log_info("%s: 10 requests, 2 admitted: the store's TAT %.1f s past the first hit "
		    "(T %g s)", st->name, tat, T);
	cr_expect(ahead > 0 && tat < 2.5 * T && tat > 1.5 * T,
		  "%s: the store's TAT %.1f s past the first hit: %g hits, for 2 admitted",
		  st->name, tat, tat / T);
}

/* The rows of one key of "default" in the PostgreSQL table (window 60). */
static int gcra_pg_rows(const char *key, const char *where)
{
	char sql[512], out[64];

	snprintf(sql, sizeof(sql), "SELECT count(*) FROM " CT_PG_TABLE " WHERE namespace = "
		 "'default' AND key = convert_to('%s', 'UTF8') AND window_size = 60 AND %s", key,
		 where);
	cr_assert_eq(pg_server_query(ct_pg_srv.conninfo, sql, out, sizeof(out)), 1, "%s", out);
	return atoi(out);
}

/* PostgreSQL's TAT rows (window_start -1) expire as old window rows do,
 * in the periodic purge (purge_interval_s, 1 s here): a row whose TAT
 * fell behind the server's clock goes, one still ahead of it stays (it is
 * what keeps the key denied). A window row of 1970 tells when a purge
 * ran. Before, the purge took every TAT row, live ones too (-1 is below
 * every cutoff): a key over its limit got a whole burst again. */
Test(cluster, postgres_gcra_tat_rows_expire)
{
	char key[64], sql[512], out[128];
	const char *g, *t;
	static char cfg[4096];

	ct_postgres.up(0);
	g = gcra_cfg_of(&ct_postgres, 1000, 60, 1);     /* T = 60 s, burst 5 */
	t = strstr(g, "\"timeout_ms\":");
	cr_assert_not_null(t);
	snprintf(cfg, sizeof(cfg), "%.*s\"purge_interval_s\":1,%s", (int)(t - g), g, t);
	ct_node_start(0, cfg);
	sp_key(key, sizeof(key), "live");
	for (int i = 0; i < GCRA_BURST; i++)       /* the burst: the TAT 300 s ahead */
		cr_assert_eq(ct_limit_hit(0, 0, key, 60, 1), 1, "hit %d", i);
	cr_assert_eq(gcra_pg_rows(key, "window_start = -1"), 1, "the store's TAT row");
	snprintf(sql, sizeof(sql), "INSERT INTO " CT_PG_TABLE " (namespace, key, window_start, "
		 "window_size, count) VALUES ('default', convert_to('old-tat', 'UTF8'), -1, 60, "
		 "1000), ('default', convert_to('old-window', 'UTF8'), 0, 60, 1)");
	cr_assert_geq(pg_server_query(ct_pg_srv.conninfo, sql, out, sizeof(out)), 0, "%s", out);
	int64_t t0 = test_now_ms();
	while (gcra_pg_rows("old-window", "true") > 0 && test_now_ms() - t0 < 10000)
		test_sleep_ms(100);
	cr_assert_eq(gcra_pg_rows("old-window", "true"), 0, "no purge within 10 s");
	cr_expect_eq(gcra_pg_rows("old-tat", "true"), 0, "a TAT behind the clock is purged");
	cr_expect_eq(gcra_pg_rows(key, "window_start = -1"), 1,
		     "a TAT ahead of the clock stays (the key is over its limit)");
	cr_expect_eq(ct_limit_hit(0, 0, key, 60, 1), 0, "and the key is still denied");
}

int main(int argc, char *argv[])
{
	return ct_main(argc, argv);
}
