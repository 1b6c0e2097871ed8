/*
 * test_cluster_scale.c - two agent nodes on a Redis Cluster or behind
 * Sentinel (issue 11), syncing every 0.1 s, hits alternating between them
 * at 2,000 a second while the store changes under them: a slot range
 * resharded, a master killed and its replica promoted, a SENTINEL
 * FAILOVER. Afterwards the store holds every hit exactly once and both
 * nodes read it, and no ACK waited for the store. The nodes and the SPOP
 * client are tests/lib/clustertest.h's, the Redis topologies
 * tests/lib/redis_cluster.h's and tests/lib/redis_sentinel.h's.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tests/lib/clock.h"
#include "tests/lib/clustertest.h"
#include "tests/lib/redis_cluster.h"
#include "tests/lib/redis_sentinel.h"

#define SCALE_NODES   2
#define SCALE_SYNC    0.1
#define SCALE_RUN_MS  5000
#define SCALE_AT_MS   1000
#define SCALE_RATE    2000      /* hits per second over the nodes */

static struct redis_cluster rcl;          /* Redis Cluster cases */
static bool rcl_up;
static struct redis_sentinels rsn;        /* Sentinel cases */
static bool rsn_up;

static void teardown(void)
{
	ct_teardown();
	if (rcl_up)
		redis_cluster_stop(&rcl);
	if (rsn_up)
		redis_sentinels_stop(&rsn);
}

TestSuite(cluster, .init = ct_setup, .fini = teardown, .timeout = 60);

static const char *cfg_scale(unsigned w, const char *opts)
{
	static char json[2048];

	snprintf(json, sizeof(json),
		 "{\"log_level\":\"info\",\"namespaces\":[{\"name\":\"default\","
		 "\"window_sizes\":[%u],\"sync_rate\":%g,\"strategy\":\"redis\","
		 "\"strategy_opts\":{%s,\"timeout_ms\":1000}}]}", w, SCALE_SYNC, opts);
	return json;
}

/* The hash of key's current window in w (the layout of strategies/redis.c). */
static int scale_hash(char *out, size_t len, const char *key, unsigned w)
{
	time_t now = time(NULL);

	return snprintf(out, len, "rl:{default:%u}:%u:%lld", redis_server_bucket(key, strlen(key)),
			w, (long long)(now - now % w));
}

static double rcl_total(const char *ns, const char *key, unsigned w)
{
	char h[128];
	int len = scale_hash(h, sizeof(h), key, w);
	double v = redis_cluster_hget(&rcl, h, (size_t)len, key, strlen(key));

	(void)ns;
	return isnan(v) ? -1 : v;
}

static double rsn_total(const char *ns, const char *key, unsigned w)
{
	char h[128];
	int len = scale_hash(h, sizeof(h), key, w);
	double v = redis_server_hget(&rsn.data[rsn.master], h, (size_t)len, key, strlen(key));

	(void)ns;
	return isnan(v) ? -1 : v;
}

/* The load of a case: hits alternating over the SCALE_NODES nodes at
 * SCALE_RATE, kept going while an event blocks (scale_hits_for). */
static struct {
	const char *key;
	unsigned w;
	struct ct_lat *l;
	int64_t t0;
	size_t sent;
} sl;

/* Sends the hits due for ms more. */
static void scale_hits_for(int ms)
{
	int64_t end = test_now_ms() + ms;

	while (test_now_ms() < end) {
		int64_t due, now;

		ct_hit(sl.sent % SCALE_NODES, (sl.sent / SCALE_NODES) % CT_CONNS, sl.key, sl.w, sl.l);
		sl.sent++;
		due = sl.t0 + (int64_t)((double)sl.sent * 1000.0 / SCALE_RATE);
		now = test_now_ms();
		if (due > now)
			test_sleep_ms((int)(due - now < end - now ? due - now : end - now));
		cr_assert(test_now_ms() - sl.t0 < 60000, "the event did not end within 60 s");
	}
}

/* The load for SCALE_RUN_MS; at SCALE_AT_MS `event` runs (it may send
 * hits itself: scale_hits_for), then `poll` every 100 ms of hits until it
 * says done. Returns the hits sent. */
static size_t scale_load(const char *key, unsigned w, void (*event)(void),
			 bool (*poll)(void), struct ct_lat *l)
{
	bool done = poll == NULL;

	sl.key = key;
	sl.w = w;
	sl.l = l;
	sl.sent = 0;
	sl.t0 = test_now_ms();
	scale_hits_for(SCALE_AT_MS);
	event();
	while (!done) {
		scale_hits_for(100);
		done = poll();
	}
	if (test_now_ms() - sl.t0 < SCALE_RUN_MS)
		scale_hits_for((int)(SCALE_RUN_MS - (test_now_ms() - sl.t0)));
	return sl.sent;
}

static void scale_check(const char *what, const char *key, unsigned w, size_t sent,
			ct_total_fn total_fn, struct ct_lat *l)
{
	int64_t rates[CT_NODES], ms;
	double total;

	ct_lat_report(what, l);
	cr_expect(l->over_bound == 0, "%s: %llu ACK(s) later than %d ms (max %.1f ms)", what,
		  (unsigned long long)l->over_bound, CT_ACK_BOUND_MS, (double)l->max_us / 1000.0);
	ct_nodes_up = SCALE_NODES;
	ms = ct_wait_converged(key, w, (int64_t)sent, total_fn, 15000, rates, &total);
	cr_log_info("%s: %zu hits; converged %lld ms after the load ended; store total %g",
		    what, sent, (long long)ms, total);
	cr_assert(ms >= 0, "%s: not converged within 15 s: node rates %lld %lld, store total %g, "
		  "sent %zu (%+g)", what, (long long)rates[0], (long long)rates[1], total, sent,
		  total - (double)sent);
}

static void scale_nodes(unsigned w, const char *opts)
{
	ct_nodes_start(SCALE_NODES, cfg_scale(w, opts));
}

static char scale_key[64];
static unsigned scale_slot;

static void rcl_up_with(size_t replicas, unsigned w, const char *extra)
{
	char seeds[256], opts[512], tag[64];
	int len;

	if (!redis_server_available())
		cr_skip_test("redis-server is not installed");
	cr_assert_eq(redis_cluster_start(&rcl, 3, replicas, 20000), 0, "cluster: %s", rcl.err);
	rcl_up = true;
	redis_cluster_seeds(&rcl, seeds, sizeof(seeds));
	snprintf(opts, sizeof(opts), "\"cluster_nodes\":%s%s", seeds, extra);
	scale_nodes(w, opts);
	sp_key(scale_key, sizeof(scale_key), "scale");
	len = snprintf(tag, sizeof(tag), "{default:%u}",
		       redis_server_bucket(scale_key, strlen(scale_key)));
	scale_slot = (unsigned)redis_cluster_keyslot(&rcl, tag, (size_t)len);
}

/* The key's slot and 99 around it move to the next master, each slot
 * with keys held half-migrated a while (ASK, TRYAGAIN for the agents). */
static void ev_reshard_pump(void *arg, int ms)
{
	(void)arg;
	scale_hits_for(ms);
}

static void ev_reshard(void)
{
	int from = redis_cluster_owner(&rcl, scale_slot);
	unsigned lo = scale_slot > 50 ? scale_slot - 50 : 0;
	unsigned hi = lo + 99 < 16383 ? lo + 99 : 16383;

	ct_down_at = test_now_ms();
	cr_assert(from >= 0, "no owner for slot %u", scale_slot);
	cr_assert_eq(redis_cluster_migrate(&rcl, lo, hi, (size_t)(from + 1) % 3, ev_reshard_pump,
					   NULL), 0, "%s", rcl.err);
	ct_up_at = test_now_ms();
	cr_log_info("resharded slots %u-%u (the key's %u) from master %d in %lld ms", lo, hi,
		    scale_slot, from, (long long)(ct_up_at - ct_down_at));
}

Test(cluster, redis_cluster_resharding_while_two_agents_sync)
{
	static struct ct_lat l;
	unsigned w = ct_window();
	size_t sent;

	rcl_up_with(0, w, "");
	sent = scale_load(scale_key, w, ev_reshard, NULL, &l);
	scale_check("redis cluster, resharding", scale_key, w, sent, rcl_total, &l);
	cr_log_info("the servers answered MOVED %lld, ASK %lld, TRYAGAIN %lld times",
		    redis_cluster_errorstat(&rcl, "MOVED"), redis_cluster_errorstat(&rcl, "ASK"),
		    redis_cluster_errorstat(&rcl, "TRYAGAIN"));
	cr_assert_gt(redis_cluster_errorstat(&rcl, "MOVED"), 0, "no push was redirected");
}

static int killed_master, promoted;
static bool restarted;

static void ev_kill_owner(void)
{
	killed_master = redis_cluster_owner(&rcl, scale_slot);
	ct_down_at = test_now_ms();
	cr_assert(killed_master >= 0, "no owner for slot %u", scale_slot);
	promoted = redis_cluster_kill(&rcl, (size_t)killed_master);
	cr_assert(promoted >= 0, "%s", rcl.err);
}

/* Promoted? Then the old master comes back as its replica (wait_replicas
 * 1 needs one), and once it is in sync the event is over. */
static bool ev_kill_done(void)
{
	if (!restarted) {
		if (!redis_cluster_promoted(&rcl, (size_t)promoted))
			return false;
		ct_up_at = test_now_ms();
		cr_log_info("master %d (the key's slot %u) killed; its replica promoted after %lld "
			    "ms", killed_master, scale_slot, (long long)(ct_up_at - ct_down_at));
		cr_assert_eq(redis_server_restart(&rcl.srv[killed_master], 20000), 0, "%s",
			     rcl.srv[killed_master].err);
		restarted = true;
		return false;
	}
	if (!redis_cluster_in_sync(&rcl, (size_t)killed_master))
		return false;
	cr_log_info("the old master is the new one's replica, in sync, %lld ms after the kill",
		    (long long)(test_now_ms() - ct_down_at));
	return true;
}

Test(cluster, redis_cluster_master_killed_under_load)
{
	static struct ct_lat l;
	unsigned w = ct_window();
	size_t sent;

	rcl_up_with(1, w, ",\"wait_replicas\":1");
	sent = scale_load(scale_key, w, ev_kill_owner, ev_kill_done, &l);
	scale_check("redis cluster, master killed", scale_key, w, sent, rcl_total, &l);
}

static void ev_sentinel_failover(void)
{
	ct_down_at = test_now_ms();
	cr_assert_eq(redis_sentinels_failover_start(&rsn), 0, "%s", rsn.err);
}

static int64_t next_poll_ms;

static bool ev_sentinel_done(void)
{
	if (test_now_ms() < next_poll_ms)
		return false;
	next_poll_ms = test_now_ms() + 100;
	if (!redis_sentinels_failover_done(&rsn))
		return false;
	ct_up_at = test_now_ms();
	cr_log_info("SENTINEL FAILOVER over (sentinels agree, old master in sync) after %lld ms",
		    (long long)(ct_up_at - ct_down_at));
	return true;
}

Test(cluster, redis_sentinel_failover_under_load)
{
	static struct ct_lat l;
	unsigned w = ct_window();
	char nodes_json[128], opts[256];
	size_t sent;

	if (!redis_sentinels_available())
		cr_skip_test("redis-server or redis-sentinel is not installed");
	cr_assert_eq(redis_sentinels_start(&rsn, 20000), 0, "%s", rsn.err);
	rsn_up = true;
	redis_sentinels_nodes(&rsn, nodes_json, sizeof(nodes_json));
	snprintf(opts, sizeof(opts), "\"sentinel\":{\"master\":\"mymaster\",\"nodes\":%s},"
		 "\"wait_replicas\":1", nodes_json);
	scale_nodes(w, opts);
	sp_key(scale_key, sizeof(scale_key), "sentinel");
	sent = scale_load(scale_key, w, ev_sentinel_failover, ev_sentinel_done, &l);
	cr_assert_eq(rsn.master, 1, "the replica is the master now");
	scale_check("redis sentinel, SENTINEL FAILOVER", scale_key, w, sent, rsn_total, &l);
}
