/*
 * test_cluster_limits.c - limits per key set at run time on a namespace
 * that syncs (docs/CLUSTER.md, "Limits per key"): two agents ($AGENT) on
 * one real store, Redis and PostgreSQL (CT_STORE_TEST: cluster::redis_...,
 * cluster::postgres_...), driven over their HTTP fronts.
 *
 *   - the target: a key's limit PUT to 2 on node 1 (the
 *     namespace's is 100); node 2 has it within about one sync period
 *     (the time is reported, a far failure bound asserted) and admits the
 *     key twice, then denies it; after a restart of both agents the
 *     override still holds (read back from the store at their first
 *     sync cycle: a key never hit admits 2 then is denied);
 *   - a DELETE on node 2 reaches node 1 the same way, and a replaced
 *     limit too;
 *   - the store bounds a namespace as the nodes do (max_limit_overrides):
 *     a PUT of one more is refused (409) with the same message;
 *   - a store that is gone takes nothing: 503, nothing changed on the
 *     node either.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/lib/clock.h"
#include "tests/lib/clustertest.h"
#include "tests/lib/httpc.h"

#define IO_MS       5000
#define DEADLINE_MS 10000       /* failure bound of every wait (expected: ~ a sync period) */
#define LIMIT       100

TestSuite(cluster, .init = ct_setup, .fini = ct_teardown, .timeout = 120);

/* The store's configuration with a limit of LIMIT, at most `most`
 * overrides, the HTTP front and the admin token. */
static const char *cfg(const struct ct_store *st, unsigned w, int most)
{
	static char out[4096];
	const char *base = st->cfg(w, CT_SYNC_RATE, 1000);
	const char *p = strstr(base, "\"name\":\"default\",");

	cr_assert_not_null(p);
	p += strlen("\"name\":\"default\",");
	snprintf(out, sizeof(out), "%.*s\"limit\":%d,\"max_limit_overrides\":%d,%s",
		 (int)(p - base), base, LIMIT, most, p);
	return ct_with_admin(out);
}

static void req(size_t n, const char *method, const char *target, struct httpc_resp *r)
{
	const char *why = "";

	cr_assert(httpc_request(ct_nodes[n].a.http_port, method, target, CT_ADMIN, r, IO_MS,
				&why) == 0, "%s %s on node %zu: %s\n%s", method, target, n, why,
		  ct_node_log(n));
}

/* A check of key on node n: 200 or 429. */
static int hit(size_t n, const char *key, unsigned w)
{
	char t[256];
	struct httpc_resp r;

	snprintf(t, sizeof(t), "/ratelimit?key=%s&window=%u", key, w);
	req(n, "GET", t, &r);
	cr_assert(r.status == 200 || r.status == 429, "hit on node %zu: %d %s", n, r.status,
		  r.body);
	return r.status;
}

/* Until GET /limits of key on node n holds want ("[]": none); returns
 * the ms it took, fails past DEADLINE_MS. */
static int64_t wait_limits(size_t n, const char *key, const char *want)
{
	int64_t t0 = test_now_ms();
	char t[256];
	struct httpc_resp r;

	snprintf(t, sizeof(t), "/limits?key=%s", key);
	for (;;) {
		req(n, "GET", t, &r);
		cr_assert_eq(r.status, 200, "%s", r.body);
		if (strstr(r.body, want))
			return test_now_ms() - t0;
		cr_assert(test_now_ms() - t0 < DEADLINE_MS, "node %zu: %s after %d ms, not %s\n%s",
			  n, r.body, DEADLINE_MS, want, ct_node_log(n));
		test_sleep_ms(20);
	}
}

static void put(size_t n, const char *key, unsigned w, int limit, int status)
{
	char t[256];
	struct httpc_resp r;

	snprintf(t, sizeof(t), "/limits?key=%s&window=%u&limit=%d", key, w, limit);
	req(n, "PUT", t, &r);
	cr_assert_eq(r.status, status, "PUT %s on node %zu: %d %s", t, n, r.status, r.body);
	if (status == 200)
		cr_assert_not_null(strstr(r.body, "\"store\":\"stored\""), "%s", r.body);
}

static void start_two(const struct ct_store *st, unsigned w, int most)
{
	ct_nodes_up = 2;
	for (size_t n = 0; n < 2; n++)
		ct_node_start_with(n, cfg(st, w, most), "2", 0);
}

CT_STORE_TEST(limit_per_key_on_every_node)
{
	unsigned w = ct_window();
	char key[64], kept[64], want[64];
	struct httpc_resp r;

	st->up(0);
	start_two(st, w, 16);
	sp_key(key, sizeof(key), "tenant");
	sp_key(kept, sizeof(kept), "kept");
	snprintf(want, sizeof(want), "{\"window\":%u,\"limit\":2}", w);

	put(0, key, w, 2, 200);
	put(0, kept, w, 2, 200);
	int64_t took = wait_limits(1, key, want);
	cr_log_info("%s: node 2 has the key's limit %lld ms after node 1's PUT was answered "
		    "(sync_rate %g s)", st->name, (long long)took, CT_SYNC_RATE);
	cr_expect_leq(took, (int64_t)(2 * CT_SYNC_RATE * 1000) + 500,
		      "within about one sync period (took %lld ms)", (long long)took);
	cr_assert_eq(hit(1, key, w), 200);
	cr_assert_eq(hit(1, key, w), 200);
	cr_assert_eq(hit(1, key, w), 429, "node 2 denies the third: the key's limit is 2");
	cr_assert_eq(hit(0, key, w), 429, "and so does node 1");

	/* Both agents restarted: the store's overrides are read back. */
	ct_node_stop(0);
	ct_node_stop(1);
	start_two(st, w, 16);
	took = wait_limits(1, kept, want);
	wait_limits(0, kept, want);
	cr_log_info("%s: after a restart, node 2 had it again after %lld ms", st->name,
		    (long long)took);
	cr_assert_eq(hit(1, kept, w), 200);
	cr_assert_eq(hit(0, kept, w), 200);
	cr_assert_eq(hit(1, kept, w), 429, "the override still holds after the restart");
	cr_assert_eq(hit(1, key, w), 429);

	/* A replacement and a removal travel the same way. */
	snprintf(want, sizeof(want), "{\"window\":%u,\"limit\":5}", w);
	put(1, kept, w, 5, 200);
	wait_limits(0, kept, want);
	char t[256];
	snprintf(t, sizeof(t), "/limits?key=%s&window=%u", key, w);
	req(1, "DELETE", t, &r);
	cr_assert_eq(r.status, 200, "%s", r.body);
	cr_assert_not_null(strstr(r.body, "\"store\":\"stored\""), "%s", r.body);
	wait_limits(0, key, "\"limits\":[]");
	cr_assert_eq(hit(0, key, w), 200, "the namespace's limit (100) again");
	cr_assert_eq(ct_node_metric(0, "spoa_ratelimit_limit_overrides{namespace=\"default\"} "), 1);
}

/* The store refuses one more than max_limit_overrides, whichever node
 * asks: node 2 has not read node 1's yet when it is asked. */
CT_STORE_TEST(limit_per_key_bounded_in_the_store)
{
	unsigned w = ct_window();
	char key[64];
	struct httpc_resp r;

	st->up(0);
	start_two(st, w, 2);
	for (int i = 0; i < 2; i++) {
		snprintf(key, sizeof(key), "b%d", i);
		put(0, key, w, 1, 200);
	}
	put(0, "b2", w, 1, 409);
	/* Node 2 may not have read them yet: the store says no. */
	put(1, "b3", w, 1, 409);
	put(1, "b0", w, 7, 200);
	char t[256];
	snprintf(t, sizeof(t), "/limits?key=b3&window=%u&limit=1", w);
	req(1, "PUT", t, &r);
	cr_assert_not_null(strstr(r.body, "max_limit_overrides (2)"), "%s", r.body);
}

/* The store gone: a PUT or DELETE is refused (503), this node keeps
 * what it had. */
CT_STORE_TEST(limit_per_key_store_gone)
{
	unsigned w = ct_window();
	char t[256];
	struct httpc_resp r;

	st->up(0);
	start_two(st, w, 16);
	put(0, "kept", w, 3, 200);
	wait_limits(0, "kept", "\"limit\":3");
	st->gone();
	snprintf(t, sizeof(t), "/limits?key=new&window=%u&limit=1", w);
	req(0, "PUT", t, &r);
	cr_assert_eq(r.status, 503, "%s", r.body);
	cr_assert_not_null(strstr(r.body, "the store did not take it, nothing changed"), "%s",
			   r.body);
	snprintf(t, sizeof(t), "/limits?key=kept&window=%u", w);
	req(0, "DELETE", t, &r);
	cr_assert_eq(r.status, 503, "%s", r.body);
	wait_limits(0, "new", "\"limits\":[]");
	wait_limits(0, "kept", "\"limit\":3");
}

int main(int argc, char *argv[])
{
	return ct_main(argc, argv);
}
