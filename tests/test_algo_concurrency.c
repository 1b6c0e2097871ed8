/*
 * test_algo_concurrency.c - the concurrency limit (agent/algo_concurrency.c,
 * `"algorithm": "concurrency"`): leases taken and given back at fixed
 * clocks through the decision layer (the library takes `now`), a release
 * that frees its own lease once (twice, forged, expired, another key's:
 * nothing), a release without an id, the answers (remaining, reset,
 * retry_after, lease), leases expiring lease_ms after they were taken, a
 * lease of a denied decision given back, processes racing on one key; the
 * configuration's checks of `algorithm` and `lease_ms`. The fronts:
 * tests/test_algo_concurrency_fronts.c.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "agent/config.h"
#include "agent/decide.h"
#include "agent/ns.h"
#include "agent/ratelimit.h"
#include "tests/lib/rltest.h"

static struct config cfg;
static struct rl *rl;
static struct decide dec;

/* "c3": 3 in flight, leases of 1 s; "long": 3 in flight, lease_ms by
 * default (60 s); "odd": 2 in flight, leases of 1.5 s (periods of 2 s);
 * "win": a window limit of 1, to deny a decision of two namespaces;
 * "race": 50 in flight. */
static const char cfg_json[] =
	"{\"max_keys\": 256, \"namespaces\": ["
	"{\"name\": \"c3\", \"algorithm\": \"concurrency\", \"limit\": 3, \"lease_ms\": 1000},"
	"{\"name\": \"long\", \"algorithm\": \"concurrency\", \"limit\": 3},"
	"{\"name\": \"odd\", \"algorithm\": \"concurrency\", \"limit\": 2, \"lease_ms\": 1500},"
	"{\"name\": \"win\", \"window_sizes\": [60], \"limit\": 1},"
	"{\"name\": \"race\", \"algorithm\": \"concurrency\", \"limit\": 50, \"lease_ms\": 5000}]}";

/* A fixed clock at the start of a period of every namespace here. */
#define T0 1800000000.0

static void setup(void)
{
	rl = rltest_new("test_algo_concurrency", cfg_json, &cfg);
	decide_init(&dec, rl);
}

static void teardown(void)
{
	decide_free(&dec);
	rl_free(rl);
	config_free(&cfg);
}

TestSuite(concurrency, .init = setup, .fini = teardown);

static struct rl_request req(const char *ns, const char *key, double cost)
{
	return (struct rl_request){ .ns = ns, .ns_len = strlen(ns), .key = key,
				    .key_len = strlen(key), .cost = cost,
				    .window_type = DECIDE_WT_DEFAULT };
}

/* One acquire (cost 1) or read (0) of key at now; its lease id in lease
 * (when given: "" when it took none). */
static void hit(const char *ns, const char *key, double cost, double now, struct rl_decision *r,
		char *lease)
{
	struct rl_request rq = req(ns, key, cost);
	char id[ALGO_LEASE_LEN + 1];

	decide_one(&dec, &rq, now, r);
	cr_assert_null(r->error, "%s", r->error);
	size_t n = decide_lease_text(r, id);
	cr_assert_eq(n > 0, r->counted && cost > 0, "a lease iff taken");
	cr_assert(n == 0 || (n == ALGO_LEASE_LEN && strspn(id, "0123456789abcdef") == n), "%s", id);
	if (lease)
		strcpy(lease, id);
}

/* n acquires at now: how many were admitted; their leases in leases[]
 * (the admitted ones, in order). */
static int acquire(const char *ns, const char *key, int n, double now,
		   char leases[][ALGO_LEASE_LEN + 1])
{
	struct rl_decision r;
	char id[ALGO_LEASE_LEN + 1];
	int admitted = 0;

	for (int i = 0; i < n; i++) {
		hit(ns, key, 1, now, &r, id);
		if (!r.exceeded && leases)
			strcpy(leases[admitted], id);
		admitted += !r.exceeded;
	}
	return admitted;
}

/* A release of key's lease id (NULL: none) at now: 1 freed, 0 not. */
static int release(const char *ns, const char *key, const char *id, double now)
{
	struct rl_request rq = req(ns, key, 0);
	const char *why = NULL;
	int rc = decide_release(&dec, &rq, id, id ? strlen(id) : 0, now, &why);

	cr_assert_geq(rc, 0, "%s", why);
	return rc;
}

/* Issue 32's target on one node: limit 3: 5 acquires admit 3; one
 * release admits one more; with lease_ms 1000 and no releases, 1.5 s
 * later 3 admit again. */
Test(concurrency, target)
{
	char l[5][ALGO_LEASE_LEN + 1];

	cr_assert_eq(acquire("c3", "k", 5, T0, l), 3);
	cr_assert_eq(release("c3", "k", l[1], T0 + 0.1), 1);
	cr_assert_eq(acquire("c3", "k", 2, T0 + 0.1, NULL), 1);
	cr_assert_eq(acquire("c3", "k", 5, T0 + 1.5, NULL), 3);
	/* Another key holds its own leases. */
	cr_assert_eq(acquire("c3", "other", 5, T0 + 1.5, NULL), 3);
}

/* Leases taken late in a period expire lease_ms later, in the next one:
 * 0.9 s after the first, 3 still held; 1.1 s after, none. */
Test(concurrency, leases_expire_after_lease_ms)
{
	cr_assert_eq(acquire("c3", "e", 3, T0 + 0.6, NULL), 3);
	cr_assert_eq(acquire("c3", "e", 1, T0 + 1.5, NULL), 0, "0.9 s: all held");
	cr_assert_eq(acquire("c3", "e", 4, T0 + 1.7, NULL), 3, "1.1 s: all expired");
	/* lease_ms 60000 by default: 59 s later, still held. */
	cr_assert_eq(acquire("long", "e", 3, T0, NULL), 3);
	cr_assert_eq(acquire("long", "e", 1, T0 + 59, NULL), 0);
	cr_assert_eq(acquire("long", "e", 3, T0 + 61, NULL), 3);
}

/* A release frees its own lease once: sent twice, the second frees
 * nothing; a forged id, a well-formed one with a wrong MAC, another
 * key's, or garbage frees nothing. */
Test(concurrency, release_once)
{
	char l[3][ALGO_LEASE_LEN + 1], o[1][ALGO_LEASE_LEN + 1], forged[ALGO_LEASE_LEN + 1];

	cr_assert_eq(acquire("c3", "r", 3, T0, l), 3);
	cr_assert_eq(acquire("c3", "s", 1, T0, o), 1);
	cr_assert(strcmp(l[0], l[1]) && strcmp(l[1], l[2]) && strcmp(l[0], l[2]), "distinct ids");
	cr_assert_eq(release("c3", "r", l[0], T0 + 0.1), 1);
	cr_assert_eq(release("c3", "r", l[0], T0 + 0.1), 0, "released already");
	cr_assert_eq(acquire("c3", "r", 3, T0 + 0.1, NULL), 1, "one freed, not two");
	/* The id of a lease with another number, its MAC kept. */
	strcpy(forged, l[1]);
	forged[15] = forged[15] == '0' ? '7' : '0';
	cr_assert_eq(release("c3", "r", forged, T0 + 0.2), 0);
	strcpy(forged, l[1]);
	forged[31] = forged[31] == '0' ? '1' : '0';
	cr_assert_eq(release("c3", "r", forged, T0 + 0.2), 0);
	cr_assert_eq(release("c3", "r", o[0], T0 + 0.2), 0, "another key's lease");
	cr_assert_eq(release("c3", "r", "nonsense", T0 + 0.2), 0);
	cr_assert_eq(release("c3", "r", "zz000000000000000000000000000000", T0 + 0.2), 0);
	cr_assert_eq(acquire("c3", "r", 1, T0 + 0.2, NULL), 0, "nothing was freed");
	cr_assert_eq(release("c3", "r", l[2], T0 + 0.3), 1);
	cr_assert_eq(acquire("c3", "r", 2, T0 + 0.3, NULL), 1);
}

/* A release without an id gives back one lease of the key, whichever;
 * none in flight: nothing. */
Test(concurrency, release_without_id)
{
	cr_assert_eq(release("c3", "n", NULL, T0), 0);
	cr_assert_eq(acquire("c3", "n", 3, T0, NULL), 3);
	cr_assert_eq(release("c3", "n", NULL, T0 + 0.2), 1);
	cr_assert_eq(acquire("c3", "n", 2, T0 + 0.2, NULL), 1);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(release("c3", "n", NULL, T0 + 0.3), 1, "release %d", i);
	cr_assert_eq(release("c3", "n", NULL, T0 + 0.3), 0, "none left");
	cr_assert_eq(acquire("c3", "n", 4, T0 + 0.3, NULL), 3);
}

/* A lease released after it expired frees nothing: not another lease
 * taken since in its slot's period (leases of 1.5 s, periods of 2 s). */
Test(concurrency, expired_lease_frees_nothing)
{
	char l[2][ALGO_LEASE_LEN + 1];

	cr_assert_eq(acquire("odd", "x", 2, T0, l), 2);
	cr_assert_eq(acquire("odd", "x", 2, T0 + 1.8, NULL), 2, "1.8 s: expired");
	cr_assert_eq(release("odd", "x", l[0], T0 + 1.9), 0);
	cr_assert_eq(acquire("odd", "x", 1, T0 + 1.9, NULL), 0, "both new leases held");
}

/* remaining: the leases left; reset and a denied hit's retry_after: when
 * the oldest lease in flight expires; rate: the leases in flight. */
Test(concurrency, answers)
{
	struct rl_decision r;

	hit("long", "a", 0, T0, &r, NULL);
	cr_assert(!r.exceeded);
	cr_assert_eq(r.remaining, 3);
	cr_assert_eq(r.rate, 0);
	for (int i = 1; i <= 3; i++) {
		hit("long", "a", 1, T0 + 10 * (i - 1), &r, NULL);
		cr_assert(!r.exceeded, "hit %d", i);
		cr_assert_eq(r.remaining, 3 - i, "hit %d", i);
		cr_assert_eq(r.rate, i, "hit %d", i);
		cr_assert_eq(r.limit, 3);
	}
	/* The leases of one period (60 s) expire with its newest (its time
	 * kept to a 511th of the period, rounded up). */
	cr_assert(r.reset >= 60 && r.reset <= 61, "T0's period's leases expire 60 s after T0 + "
		  "20: %lld", (long long)r.reset);
	hit("long", "a", 1, T0 + 25, &r, NULL);
	cr_assert(r.exceeded);
	cr_assert_eq(r.remaining, 0);
	cr_assert(r.retry_after >= 55 && r.retry_after <= 56, "%lld", (long long)r.retry_after);
	/* The next period's lease expires after those of the one before. */
	cr_assert_eq(acquire("long", "b", 2, T0 + 50, NULL), 2);
	hit("long", "b", 1, T0 + 70, &r, NULL);
	cr_assert(!r.exceeded);
	cr_assert(r.reset >= 40 && r.reset <= 41, "the oldest, taken at T0 + 50, expires at T0 + "
		  "110: %lld", (long long)r.reset);
	hit("long", "a", 0, T0 + 25, &r, NULL);
	cr_assert(!r.exceeded, "a read is never over");
	cr_assert_eq(r.remaining, 0);
	cr_assert_eq(r.rate, 3);
}

/* A decision of two limits that the window limit denies: the lease of
 * the same decision is given back (never answered), whatever
 * count_denied. */
Test(concurrency, lease_of_a_denied_decision_given_back)
{
	struct rl_request rq[2] = { req("win", "t", 1), req("c3", "t", 1) };
	struct rl_decision parts[4];
	char id[ALGO_LEASE_LEN + 1];

	decide_batch(&dec, rq, 2, T0, parts, 4);     /* the window's one hit */
	for (int i = 0; i < 4; i++) {
		size_t np = decide_batch(&dec, rq, 2, T0, parts, 4);
		cr_assert_eq(np, 2);
		cr_assert(parts[0].exceeded, "the window denies");
		cr_assert_eq(decide_lease_text(&parts[1], id), 0, "no lease answered");
	}
	cr_assert_eq(acquire("c3", "t", 3, T0, NULL), 2, "only the first decision's lease stands");
}

/* Lock-free in the shared table: 4 processes, 100 acquires each of one
 * key at one moment, admit the limit (50) between them, not one more;
 * their ids are all distinct and each frees its lease. */
Test(concurrency, racing_processes_admit_the_limit_once)
{
	int ns = rl_namespace_index(rl, "race", 4);

	cr_assert_geq(ns, 0);
	cr_assert_eq(rltest_race(rl, ns, "k", 4, 100, T0, 50), 50);
	cr_assert_eq(acquire("race", "k", 1, T0, NULL), 0);
	cr_assert_eq(release("race", "k", NULL, T0), 1);
	cr_assert_eq(acquire("race", "k", 2, T0, NULL), 1);
}

/* A release in a namespace without leases, or of an unknown one, is an
 * error, not "nothing freed". */
Test(concurrency, release_errors)
{
	struct rl_request rq = req("win", "k", 0);
	const char *why = NULL;

	cr_assert_eq(decide_release(&dec, &rq, NULL, 0, T0, &why), -1);
	cr_assert_str_eq(why, "not a concurrency namespace");
	rq = req("nope", "k", 0);
	cr_assert_eq(decide_release(&dec, &rq, NULL, 0, T0, &why), -1);
	cr_assert_str_eq(why, "unknown namespace");
	rq = req("c3", "", 0);
	cr_assert_eq(decide_release(&dec, &rq, NULL, 0, T0, &why), -1);
	cr_assert_str_eq(why, "empty key");
}

/* ---- the configuration ---- */

#define expect_refused rltest_ns_refused

Test(concurrency_config, keys_checked)
{
	expect_refused("{\"window_sizes\": [1], \"algorithm\": \"leases\"}", "algorithm",
		       "\"concurrency\"");
	expect_refused("{\"window_sizes\": [1], \"limit\": 5, \"lease_ms\": 1000}", "lease_ms",
		       "only with");
	expect_refused("{\"algorithm\": \"concurrency\"}", "limit", "needs a limit");
	expect_refused("{\"algorithm\": \"concurrency\", \"limit\": 3, \"lease_ms\": 0}",
		       "lease_ms", "");
	expect_refused("{\"algorithm\": \"concurrency\", \"limit\": 3, \"lease_ms\": 86400001}",
		       "lease_ms", "");
	expect_refused("{\"algorithm\": \"concurrency\", \"limit\": 4194304}", "limit",
		       "at most 4194303");
	expect_refused("{\"algorithm\": \"concurrency\", \"window_sizes\": [1, 60], \"limit\": 3}",
		       "window_sizes", "one window size");
	/* With a store the store keeps the leases (test_cluster_concurrency.c):
	 * at sync_rate 0 or under admission "local" nothing would. */
	expect_refused("{\"algorithm\": \"concurrency\", \"limit\": 3, \"sync_rate\": 0, "
		       "\"strategy\": \"redis\"}", "sync_rate", "decides every hit there");
	expect_refused("{\"algorithm\": \"concurrency\", \"limit\": 3, \"sync_rate\": 1, "
		       "\"strategy\": \"redis\", \"admission\": \"local\"}", "admission",
		       "a lease is no sum");
	expect_refused("{\"algorithm\": \"concurrency\", \"limit\": 3, \"delay_max_ms\": 100}",
		       "delay_max_ms", "concurrency");
}

Test(concurrency_config, parsed, .init = setup, .fini = teardown)
{
	const struct ns_def *d = rl_namespace_def(rl, rl_namespace_index(rl, "c3", 2));

	cr_assert_not_null(d);
	cr_assert_eq(d->algorithm, NS_ALGO_CONCURRENCY);
	cr_assert_eq(ns_lease_ms(d), 1000);
	cr_assert_eq(d->n_window_sizes, 1, "a window by default");
	d = rl_namespace_def(rl, rl_namespace_index(rl, "long", 4));
	cr_assert_eq(ns_lease_ms(d), 60000);
}
