/*
 * test_decide.c - the decision layer (agent/decide.h) without any front:
 * requests built by hand, decisions checked field by field. Counting and
 * limits, reads, sliding and fixed windows at explicit times, the errors
 * and which one wins, the namespace defaults, on_table_full "deny", the
 * fold of several decisions into one answer, that local namespaces
 * never wait for a store, and the limits of the configuration (what a
 * caller's limit may change, max_cost, eviction protection).
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/config.h"
#include "agent/decide.h"
#include "agent/ratelimit.h"
#include "tests/lib/rltest.h"

static struct config cfg;
static struct rl *rl;
static struct decide dec;

/* "default" (1, 60, 3600), "api" (60 only), "login" (60, fixed, deny when
 * full, a share of 16 keys), "trial" (60, shadow, 8 keys), max_keys 64;
 * then namespaces with configured limits, and "open" (none, but
 * caller_limit "any"). */
static const char cfg_json[] =
	"{\"max_keys\": 64, \"namespaces\": ["
	"{\"name\": \"default\", \"window_sizes\": [1, 60, 3600]},"
	"{\"name\": \"api\", \"window_sizes\": [60]},"
	"{\"name\": \"login\", \"window_sizes\": [60], \"window_type\": \"fixed\","
	" \"on_table_full\": \"deny\", \"max_keys\": 16},"
	"{\"name\": \"trial\", \"window_sizes\": [60], \"shadow\": true, \"max_keys\": 8},"
	"{\"name\": \"conf\", \"window_sizes\": [1, 60], \"limit\": {\"1\": 2, \"60\": 5}},"
	"{\"name\": \"tier\", \"window_sizes\": [60], \"limit\": 10, \"caller_limit\": \"any\"},"
	"{\"name\": \"strict\", \"window_sizes\": [60], \"limit\": 3, \"caller_limit\": \"none\","
	" \"max_cost\": 2.5},"
	"{\"name\": \"pinned\", \"window_sizes\": [60], \"limit\": 3, \"max_keys\": 8},"
	"{\"name\": \"stack\", \"window_sizes\": [1, 60], \"window_type\": \"fixed\","
	" \"limit\": {\"1\": 3, \"60\": 5}, \"count_denied\": false},"
	"{\"name\": \"perip\", \"window_sizes\": [60], \"count_denied\": false},"
	"{\"name\": \"perkey\", \"window_sizes\": [60], \"count_denied\": false},"
	"{\"name\": \"open\", \"window_sizes\": [60], \"caller_limit\": \"any\"}]}";

static void setup(void)
{
	rl = rltest_new("test_decide", cfg_json, &cfg);
	decide_init(&dec, rl);
}

static void teardown(void)
{
	decide_free(&dec);
	rl_free(rl);
	config_free(&cfg);
}

TestSuite(decide, .init = setup, .fini = teardown);

/* A request for key in ns (NULL: default) with window w and cost. */
static struct rl_request req(const char *ns, const char *key, uint32_t w, double cost)
{
	return (struct rl_request){
		.ns = ns, .ns_len = ns ? strlen(ns) : 0, .key = key, .key_len = key ? strlen(key) : 0,
		.window = w, .cost = cost, .window_type = DECIDE_WT_DEFAULT,
	};
}

static struct rl_decision decide(const struct rl_request *rq, double now)
{
	struct rl_decision d;

	memset(&d, 0, sizeof(d));
	decide_one(&dec, rq, now, &d);
	return d;
}

/* 6000000 is a multiple of 1, 60 and 3600: a window start for each. */
#define T0 6000000.0

Test(decide, counts_and_limits)
{
	struct rl_request rq = req("api", "alice", 60, 1);

	rq.has_limit = true;
	rq.limit = 3;
	for (int i = 1; i <= 5; i++) {
		struct rl_decision d = decide(&rq, T0 + 15);

		cr_assert_null(d.error, "hit %d: %s", i, d.error);
		cr_assert_eq(d.rate, i);
		cr_assert(d.has_limit);
		cr_assert_eq(d.limit, 3);
		cr_assert_eq(d.window, 60);
		cr_assert_eq(d.exceeded, i > 3, "hit %d", i);
		cr_assert_eq(d.remaining, i > 3 ? 0 : 3 - i);
		cr_assert_eq(d.reset, 45, "reset %lld", (long long)d.reset);
		if (i > 3)
			cr_assert_geq(d.retry_after, 1);
		cr_assert_not(d.sync0);
	}
	cr_assert_not(decide_needs_store(&(struct rl_decision){ .sync0 = false }, 1));
	/* Another key, and the same key in another namespace, are apart. */
	cr_assert_eq(decide(&(struct rl_request){ .ns = "api", .ns_len = 3, .key = "bob",
						  .key_len = 3, .window = 60, .cost = 1 }, T0 + 15).rate,
		     1);
	struct rl_request other = req(NULL, "alice", 60, 1);
	cr_assert_eq(decide(&other, T0 + 15).rate, 1);
}

Test(decide, reads_and_costs)
{
	struct rl_request rq = req(NULL, "k", 3600, 2.5);

	cr_assert_eq(decide(&rq, T0 + 1).rate, 3);     /* 2.5 shown as its ceiling */
	cr_assert_eq(decide(&rq, T0 + 1).rate, 5);
	rq.cost = 0;
	for (int i = 0; i < 3; i++)
		cr_assert_eq(decide(&rq, T0 + 1).rate, 5, "a read does not count");
	/* Without a limit: no exceeded, no remaining. */
	struct rl_decision d = decide(&rq, T0 + 1);
	cr_assert_not(d.has_limit);
	cr_assert_not(d.exceeded);
	cr_assert_eq(d.remaining, 0);
}

Test(decide, sliding_and_fixed)
{
	struct rl_request rq = req("api", "s", 60, 1);

	for (int i = 0; i < 10; i++)
		decide(&rq, T0 - 30);   /* the previous window */
	rq.cost = 0;
	/* 30 s into the current window: weight (60 - 30) / 60 = 0.5. */
	cr_assert_eq(decide(&rq, T0 + 30).rate, 5);
	rq.window_type = DECIDE_WT_FIXED;
	cr_assert_eq(decide(&rq, T0 + 30).rate, 0);
	rq.window_type = DECIDE_WT_SLIDING;
	cr_assert_eq(decide(&rq, T0 + 45).rate, 3);     /* 10 * 0.25 = 2.5 -> 3 */

	/* "login" is fixed by default; a request may ask for sliding. */
	struct rl_request lg = req("login", "s", 60, 1);
	for (int i = 0; i < 10; i++)
		decide(&lg, T0 - 30);
	lg.cost = 0;
	cr_assert_eq(decide(&lg, T0 + 30).rate, 0);
	lg.window_type = DECIDE_WT_SLIDING;
	cr_assert_eq(decide(&lg, T0 + 30).rate, 5);
}

Test(decide, window_defaults)
{
	/* "api" has one window: window 0 means it. */
	struct rl_decision d = decide(&(struct rl_request){ .ns = "api", .ns_len = 3, .key = "w",
							    .key_len = 1, .cost = 1 }, T0);
	cr_assert_null(d.error, "%s", d.error);
	cr_assert_eq(d.window, 60);
	/* "default" has three: a window must be named. */
	struct rl_request rq = req(NULL, "w", 0, 1);
	cr_assert_str_eq(decide(&rq, T0).error, "missing window");
	rq.window = 61;
	cr_assert_str_eq(decide(&rq, T0).error, "bad window");
}

Test(decide, errors_and_which_wins)
{
	struct rl_request rq = req("nope", NULL, 61, 1);

	rq.key_error = "bad key type";
	cr_assert_str_eq(decide(&rq, T0).error, "unknown namespace");
	rq.ns = NULL;
	cr_assert_str_eq(decide(&rq, T0).error, "bad window");
	rq.window = 60;
	cr_assert_str_eq(decide(&rq, T0).error, "bad key type");
	rq.key_error = NULL;
	cr_assert_str_eq(decide(&rq, T0).error, "missing key");
	rq.key = "";
	cr_assert_str_eq(decide(&rq, T0).error, "empty key");
	rq.key = "x";
	rq.key_len = 1;
	cr_assert_null(decide(&rq, T0).error);
	/* An error counts nothing. */
	rq.cost = 0;
	cr_assert_eq(decide(&rq, T0).rate, 1);
}

/* The request's label (the front's name for it) is the decision's, also
 * when the decision is an error. */
Test(decide, label_is_kept)
{
	struct rl_request rq = req(NULL, "l", 60, 1);
	struct rl_decision d;

	memset(&d, 0, sizeof(d));
	snprintf(rq.label, sizeof(rq.label), "perip");
	decide_one(&dec, &rq, T0, &d);
	cr_assert_str_eq(d.label, "perip");
	rq.ns = "nope";
	rq.ns_len = 4;
	decide_one(&dec, &rq, T0, &d);
	cr_assert_str_eq(d.label, "perip");
	cr_assert_str_eq(d.error, "unknown namespace");
}

/* "login" never evicts: once its share is full, a new key is refused and
 * denied (exceeded with an error); other namespaces still count. */
Test(decide, table_full_deny)
{
	struct rl_decision d = { 0 };
	char key[32];
	int i;

	for (i = 0; i < 1000; i++) {
		snprintf(key, sizeof(key), "user-%d", i);
		struct rl_request rq = req("login", key, 60, 1);
		d = decide(&rq, T0);
		if (d.error)
			break;
	}
	cr_assert_lt(i, 1000, "the share never filled");
	cr_assert_geq(i, 16, "refused after %d keys, below the share", i);
	cr_assert_str_eq(d.error, "counter table full");
	cr_assert(d.exceeded, "deny: a refused key is denied");
	cr_assert_eq(d.retry_after, 1);
	struct rl_request known = req("login", "user-0", 60, 1);
	cr_assert_null(decide(&known, T0).error, "a known key is still counted");
	struct rl_request elsewhere = req("api", "newcomer", 60, 1);
	cr_assert_null(decide(&elsewhere, T0).error, "another namespace still has room");
}

Test(decide, fold)
{
	struct rl_decision res[3] = {
		{ .has_limit = true, .limit = 10, .rate = 2, .remaining = 8, .window = 60 },
		{ .has_limit = true, .limit = 5, .rate = 4, .remaining = 1, .window = 1 },
		{ .error = "bad cost" },
	};
	struct rl_decision out;
	const char *error;

	decide_fold(res, 3, &out, &error);
	cr_assert_not(out.exceeded);
	cr_assert_eq(out.remaining, 1);
	cr_assert_eq(out.window, 1, "the plain variables are the most restrictive's");
	cr_assert_str_eq(error, "bad cost");

	res[0].exceeded = true;
	res[0].remaining = 0;
	res[0].retry_after = 7;
	res[2] = (struct rl_decision){ .error = "counter table full", .exceeded = true,
				       .retry_after = 9 };
	decide_fold(res, 3, &out, &error);
	cr_assert(out.exceeded);
	cr_assert_eq(out.window, 60);
	cr_assert_eq(out.retry_after, 9, "the longest retry_after of all");
	cr_assert_eq(out.remaining, 0);
	cr_assert_str_eq(error, "counter table full");

	cr_assert(decide_more_restrictive(&res[0], &res[1]));
	cr_assert_not(decide_more_restrictive(&res[1], &res[0]));
	cr_assert_not(decide_more_restrictive(&res[2], &res[1]), "errors rank last");
}

/* A shadow namespace counts and decides as usual but never denies: what
 * it would deny is answered allowed, with shadow_exceeded (and no
 * retry_after); folded with an enforcing namespace, that one still
 * denies. */
Test(decide, shadow_never_denies)
{
	struct rl_request rq = req("trial", "alice", 60, 1);
	struct rl_decision d, both[2], out;
	const char *error;

	rq.has_limit = true;
	rq.limit = 3;
	for (int i = 1; i <= 6; i++) {
		d = decide(&rq, T0 + 15);
		cr_assert_null(d.error);
		cr_assert(d.shadow);
		cr_assert_eq(d.rate, i, "counted as usual");
		cr_assert_not(d.exceeded, "hit %d: never denied", i);
		cr_assert_eq(d.shadow_exceeded, i > 3, "hit %d", i);
		cr_assert_eq(d.remaining, i > 3 ? 0 : 3 - i);
		cr_assert_eq(d.retry_after, 0);
	}
	both[0] = d;
	struct rl_request api = req("api", "alice", 60, 1);
	api.has_limit = true;
	api.limit = 0;
	both[1] = decide(&api, T0 + 15);
	cr_assert(both[1].exceeded && !both[1].shadow);
	decide_fold(both, 2, &out, &error);
	cr_assert(out.exceeded, "the enforcing namespace denies");
	cr_assert(out.shadow_exceeded);
	decide_fold(both, 1, &out, &error);
	cr_assert(!out.exceeded && out.shadow_exceeded);
}

/* n hits of key in ns, window w, with the caller's limit when lim >= 0;
 * the last decision. */
static struct rl_decision hits(const char *ns, const char *key, uint32_t w, int64_t lim, int n)
{
	struct rl_request rq = req(ns, key, w, 1);
	struct rl_decision d = { 0 };

	rq.has_limit = lim >= 0;
	rq.limit = lim >= 0 ? lim : 0;
	for (int i = 0; i < n; i++)
		d = decide(&rq, T0 + 15);
	return d;
}

Test(decide, configured_limits)
{
	/* No limit in the request: the configuration's, per window. */
	struct rl_decision d = hits("conf", "a", 1, -1, 2);
	cr_assert(d.has_limit);
	cr_assert_eq(d.limit, 2);
	cr_assert_not(d.exceeded);
	cr_assert(hits("conf", "a", 1, -1, 1).exceeded);
	d = hits("conf", "a", 60, -1, 5);
	cr_assert_eq(d.limit, 5);
	cr_assert_not(d.exceeded);
	cr_assert(hits("conf", "a", 60, -1, 1).exceeded);
	/* caller_limit "lower" (the default): a caller may lower it... */
	d = hits("conf", "b", 60, 1, 2);
	cr_assert_eq(d.limit, 1);
	cr_assert(d.exceeded);
	/* ... never raise it. */
	d = hits("conf", "c", 60, 1000000, 6);
	cr_assert_eq(d.limit, 5);
	cr_assert(d.exceeded);
	/* "any": the caller's limit replaces it (tiers from an HAProxy map). */
	d = hits("tier", "premium", 60, 1000, 11);
	cr_assert_eq(d.limit, 1000);
	cr_assert_not(d.exceeded);
	cr_assert_eq(hits("tier", "free", 60, -1, 1).limit, 10);
	/* "none": ignored either way. */
	cr_assert_eq(hits("strict", "x", 60, 0, 1).limit, 3);
	cr_assert_not(hits("strict", "y", 60, 1000, 3).exceeded);
	cr_assert(hits("strict", "y", 60, 1000, 1).exceeded);
	/* No configured limit: the caller's, as before. */
	d = hits("api", "z", 60, 7, 1);
	cr_assert_eq(d.limit, 7);
	cr_assert_not(hits("api", "z2", 60, -1, 1).has_limit);
}

/* The default max_cost: half of each limit a request is decided against
 * (at least 1), so that no request reaches a limit of 2 or more alone;
 * without a limit, 1 for an untrusted caller. An explicit max_cost wins. */
Test(decide, max_cost)
{
	struct rl_request rq = req("conf", "big", 60, 3);

	/* Limit 5 (window 60): at most 2. */
	struct rl_decision d = decide(&rq, T0 + 15);
	cr_assert_str_eq(d.error, "cost over max_cost");
	rq.cost = 0;
	cr_assert_eq(decide(&rq, T0 + 15).rate, 0, "nothing was counted");
	rq.cost = 2;
	d = decide(&rq, T0 + 15);
	cr_assert_null(d.error);
	cr_assert_eq(d.rate, 2);
	/* Limit 2 (window 1): 1; a caller's lower limit is the one decided
	 * against (10 in "tier" lowered to 2 by "any": 1). */
	rq = req("conf", "big", 1, 2);
	cr_assert_str_eq(decide(&rq, T0 + 15).error, "cost over max_cost");
	rq = req("tier", "big", 60, 2);
	rq.has_limit = true;
	rq.limit = 2;
	cr_assert_str_eq(decide(&rq, T0 + 15).error, "cost over max_cost");
	rq.limit = 4;
	cr_assert_null(decide(&rq, T0 + 15).error);
	/* Set: 2.5 in "strict", above its default (1 for limit 3). */
	rq = req("strict", "big", 60, 2.6);
	cr_assert_str_eq(decide(&rq, T0 + 15).error, "cost over max_cost");
	rq.cost = 2.5;
	rq.untrusted = true;
	cr_assert_null(decide(&rq, T0 + 15).error, "max_cost set: for everyone");
	/* Without any limit: a trusted caller's cost is its own, an
	 * untrusted caller's at most 1. */
	rq = req("api", "big", 60, 999999999999.0);
	cr_assert_null(decide(&rq, T0 + 15).error);
	rq = req("api", "lock", 60, 2);
	rq.untrusted = true;
	cr_assert_str_eq(decide(&rq, T0 + 15).error, "cost over max_cost");
	rq.cost = 999999999999.0;
	cr_assert_str_eq(decide(&rq, T0 + 15).error, "cost over max_cost");
	rq.cost = 1;
	cr_assert_eq(decide(&rq, T0 + 15).rate, 1, "the refused ones counted nothing");
}

/* An untrusted caller (HTTP) names a limit only where the namespace
 * configures one, or where its caller_limit is "any": elsewhere the
 * request is refused with the reason, nothing counted. Trusted callers
 * (SPOP) name any. */
Test(decide, untrusted_callers_name_no_limit_where_none_is_configured)
{
	struct rl_request rq = req("api", "pin", 60, 1);
	struct rl_decision d;

	rq.untrusted = true;
	rq.has_limit = true;
	rq.limit = 0;
	d = decide(&rq, T0 + 15);
	cr_assert_not_null(d.error);
	cr_assert_not(d.refused, "the request's fault, not the table's");
	cr_assert_not_null(strstr(d.error, "\"api\""), "%s", d.error);
	cr_assert_not_null(strstr(d.error, "caller_limit"), "%s", d.error);
	struct rl_request read = req("api", "pin", 60, 0);
	cr_assert_eq(decide(&read, T0 + 15).rate, 0, "nothing counted");
	/* Without a limit it is counted, as before. */
	rq.has_limit = false;
	d = decide(&rq, T0 + 15);
	cr_assert_null(d.error);
	cr_assert_not(d.has_limit);
	/* Where one is configured, it may lower it ("conf", caller_limit
	 * "lower"); caller_limit "any" lets it name one anywhere. */
	rq = req("conf", "low", 60, 1);
	rq.untrusted = rq.has_limit = true;
	rq.limit = 1;
	cr_assert_eq(decide(&rq, T0 + 15).limit, 1);
	rq = req("open", "named", 60, 1);
	rq.untrusted = rq.has_limit = true;
	rq.limit = 7;
	d = decide(&rq, T0 + 15);
	cr_assert_null(d.error, "%s", d.error);
	cr_assert_eq(d.limit, 7);
	/* A trusted caller names any. */
	rq = req("api", "pin", 60, 1);
	rq.has_limit = true;
	rq.limit = 0;
	d = decide(&rq, T0 + 15);
	cr_assert_null(d.error);
	cr_assert(d.exceeded);
}

/* A part that is refused (caller_limit, max_cost) refuses the whole
 * decision before anything is counted: the other windows of a request,
 * the other requests of a NOTIFY. */
Test(decide, a_refused_part_refuses_the_decision)
{
	struct rl_decision parts[DECIDE_MAX_BATCH], one;
	const char *err;

	/* "conf": limits 2 (1 s) and 5 (60 s); cost 2 fits 60 s, not 1 s. */
	struct rl_request rq = req("conf", "whole", 0, 2);
	size_t np = decide_batch(&dec, &rq, 1, T0 + 15, parts, DECIDE_MAX_BATCH);
	cr_assert(decide_request_result(parts, np, 0, &one, &err));
	cr_assert_str_eq(err, "cost over max_cost");
	struct rl_request read = req("conf", "whole", 60, 0);
	cr_assert_eq(decide(&read, T0 + 15).rate, 0, "not counted in the 60 s window");
	/* Two requests: one refused, the other not counted either. */
	struct rl_request two[2] = { req("api", "10.0.0.9", 60, 1), req("api", "bob", 60, 1) };
	two[1].untrusted = two[1].has_limit = true;
	np = decide_batch(&dec, two, 2, T0 + 15, parts, DECIDE_MAX_BATCH);
	cr_assert_eq(np, 2);
	for (size_t i = 0; i < 2; i++) {
		cr_assert(decide_request_result(parts, np, i, &one, &err));
		cr_assert_not_null(err, "request %zu", i);
		cr_assert_not_null(strstr(err, "caller_limit"), "%s", err);
	}
	read = req("api", "10.0.0.9", 60, 0);
	cr_assert_eq(decide(&read, T0 + 15).rate, 0, "the other request counted nothing");
	/* Without the refused part, both count. */
	two[1].has_limit = false;
	np = decide_batch(&dec, two, 2, T0 + 15, parts, DECIDE_MAX_BATCH);
	cr_assert(decide_request_result(parts, np, 0, &one, &err));
	cr_assert_null(err);
	cr_assert_eq(decide(&read, T0 + 15).rate, 1);
}

/* A request that names a lower limit must not protect its entry from
 * eviction: 3,000 one-hit keys with limit 0 (each over that limit) fill
 * the table, and a new key still gets exactly its configured 3. */
Test(decide, a_callers_limit_pins_no_entry)
{
	char key[32];

	for (int i = 0; i < 3000; i++) {
		snprintf(key, sizeof(key), "pin-%d", i);
		struct rl_decision d = hits("pinned", key, 60, 0, 1);
		cr_assert(d.exceeded || d.error, "limit 0 denies");
	}
	int allowed = 0;
	for (int i = 0; i < 10; i++) {
		struct rl_decision d = hits("pinned", "newcomer", 60, -1, 1);
		cr_assert_null(d.error, "hit %d: %s", i, d.error);
		allowed += !d.exceeded;
	}
	cr_assert_eq(allowed, 3);
	/* A key over the configured limit stays protected. */
	hits("pinned", "abuser", 60, -1, 5);
	for (int i = 0; i < 3000; i++) {
		snprintf(key, sizeof(key), "flood-%d", i);
		hits("pinned", key, 60, -1, 1);
	}
	cr_assert(hits("pinned", "abuser", 60, -1, 1).exceeded, "its count was not flushed");
}

/* Several limits, one decision: fixed windows of 1 s (limit 3) and 60 s
 * (limit 5), count_denied false, 10 requests naming no window in one
 * second and 10 in the next: 3 then 2 admitted, and the 60 s count is
 * what was admitted (the requests the 1 s limit denied spent nothing). */
Test(decide, several_windows_one_decision)
{
	struct rl_decision parts[DECIDE_MAX_BATCH], one;
	const char *err;
	int admitted[2] = { 0, 0 };

	for (int s = 0; s < 2; s++)
		for (int i = 0; i < 10; i++) {
			struct rl_request rq = req("stack", "k", 0, 1);
			size_t np = decide_batch(&dec, &rq, 1, T0 + s + 0.5, parts, DECIDE_MAX_BATCH);

			cr_assert_eq(np, 2, "one part per configured limit");
			cr_assert(decide_request_result(parts, np, 0, &one, &err));
			cr_assert_null(err);
			admitted[s] += !one.exceeded;
		}
	cr_assert_eq(admitted[0], 3);
	cr_assert_eq(admitted[1], 2);
	struct rl_request read = req("stack", "k", 60, 0);
	cr_assert_eq(decide(&read, T0 + 1.5).rate, 5, "only admitted requests counted");
}

/* A long key is digested once on a decision's way, whatever the parts:
 * checked against two windows (two hits), and denied by one of them
 * (both parts taken back, count_denied false), or as one part. */
Test(decide, a_long_key_is_digested_once_per_decision)
{
	struct rl_decision parts[DECIDE_MAX_BATCH], one;
	const char *err;
	char key[150];
	int admitted = 0;

	memset(key, 'k', sizeof(key) - 1);
	key[sizeof(key) - 1] = '\0';
	for (int i = 0; i < 5; i++) {
		struct rl_request rq = req("stack", key, 0, 1);
		uint64_t before = rl_digests();
		size_t np = decide_batch(&dec, &rq, 1, T0 + 0.5, parts, DECIDE_MAX_BATCH);

		cr_assert_eq(rl_digests() - before, 1, "decision %d: digested %llu times", i,
			     (unsigned long long)(rl_digests() - before));
		cr_assert_eq(np, 2);
		cr_assert(decide_request_result(parts, np, 0, &one, &err));
		admitted += !one.exceeded;
	}
	cr_assert_eq(admitted, 3, "the 1 s limit, then denied and taken back");
	struct rl_request read = req("stack", key, 60, 0);
	uint64_t before = rl_digests();
	cr_assert_eq(decide(&read, T0 + 0.5).rate, 3, "the denied ones were taken back");
	cr_assert_eq(rl_digests() - before, 1);
}

/* Two requests of one NOTIFY (per IP limit 100, per key limit 5),
 * count_denied false: 8 decisions leave 5 per IP. */
Test(decide, two_requests_one_decision)
{
	struct rl_decision parts[DECIDE_MAX_BATCH];

	for (int i = 1; i <= 8; i++) {
		struct rl_request rq[2] = { req("perip", "10.0.0.1", 60, 1),
					    req("perkey", "alice", 60, 1) };
		rq[0].has_limit = rq[1].has_limit = true;
		rq[0].limit = 100;
		rq[1].limit = 5;
		size_t np = decide_batch(&dec, rq, 2, T0 + 15, parts, DECIDE_MAX_BATCH);
		cr_assert_eq(np, 2);
		cr_assert_eq(parts[1].exceeded, i > 5, "decision %d", i);
		cr_assert_not(parts[0].exceeded);
		cr_assert_eq(parts[0].counted, i <= 5, "decision %d: the per-IP hit", i);
	}
	struct rl_request read = req("perip", "10.0.0.1", 60, 0);
	cr_assert_eq(decide(&read, T0 + 15).rate, 5);
	/* count_denied true (default): counted in all, as before. */
	for (int i = 0; i < 8; i++) {
		struct rl_request rq[2] = { req("api", "10.0.0.2", 60, 1),
					    req("perkey", "bob", 60, 1) };
		rq[0].has_limit = rq[1].has_limit = true;
		rq[0].limit = 100;
		rq[1].limit = 5;
		decide_batch(&dec, rq, 2, T0 + 15, parts, DECIDE_MAX_BATCH);
	}
	struct rl_request read2 = req("api", "10.0.0.2", 60, 0);
	cr_assert_eq(decide(&read2, T0 + 15).rate, 8);
}
