/*
 * test_rls_decide.c - Envoy's rate limit service decided
 * (agent/rls_decide.h) on the real library and decision layer, over a
 * configuration read from our own envoyproxy/ratelimit YAML: decisions,
 * several descriptors as one decision, hits_addend (0: check only),
 * overrides and caller_limit, shadow_mode, unlimited, replaces, the
 * response's statuses, headers and problem body, and the refusals.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "agent/config.h"
#include "agent/decide.h"
#include "agent/ratelimit.h"
#include "agent/rls_decide.h"
#include "tests/lib/rltest.h"

#define NOW 6000000.0   /* a multiple of 60 and 90: a window start */

static struct config cfg;
static struct rl *rl;
static struct decide dec;
static struct rls_call call;
static struct rls_response resp;
static char dir[] = "/tmp/rlsdecideXXXXXX";

static const char edge_yaml[] =
	"domain: edge\n"
	"descriptors:\n"
	"  - {key: ip, rate_limit: {unit: minute, requests_per_unit: 3}}\n"
	"  - {key: user, rate_limit: {unit: minute, requests_per_unit: 5}}\n"
	"  - {key: vip, rate_limit: {unit: minute, requests_per_unit: 100, name: vip}}\n"
	"  - {key: promo, rate_limit: {unit: minute, requests_per_unit: 1000,\n"
	"                             replaces: [{name: vip}]}}\n"
	"  - {key: shadow, shadow_mode: true, rate_limit: {unit: minute, requests_per_unit: 1}}\n"
	"  - {key: free, rate_limit: {unlimited: true}}\n"
	"  - {key: odd, rate_limit: {window: 90, requests_per_unit: 2, window_type: fixed}}\n"
	"  - {key: files, value: f/*, share_threshold: true,\n"
	"     rate_limit: {unit: minute, requests_per_unit: 2}}\n"
	"  - {key: tier, rate_limit: {unit: minute, requests_per_unit: 10}}\n";
static const char any_yaml[] =
	"domain: anyd\ndescriptors:\n  - {key: tier, rate_limit: {unit: minute, requests_per_unit: 10}}\n";
static const char none_yaml[] =
	"domain: noned\ndescriptors:\n  - {key: tier, rate_limit: {unit: minute, requests_per_unit: 10}}\n";

static void put(const char *name, const char *text)
{
	char f[128];
	FILE *out;

	snprintf(f, sizeof(f), "%s/%s", dir, name);
	out = fopen(f, "w");
	cr_assert_not_null(out);
	fputs(text, out);
	fclose(out);
}

static void setup(void)
{
	char json[512];

	cr_assert_not_null(mkdtemp(dir));
	put("edge.yaml", edge_yaml);
	put("any.yaml", any_yaml);
	put("none.yaml", none_yaml);
	snprintf(json, sizeof(json),
		 "{\"envoy_config\": \"%s\", \"namespaces\": ["
		 "{\"name\": \"edge\", \"count_denied\": false},"
		 "{\"name\": \"anyd\", \"caller_limit\": \"any\"},"
		 "{\"name\": \"noned\", \"caller_limit\": \"none\"},"
		 "{\"name\": \"plain\", \"window_sizes\": [60]}]}", dir);
	rl = rltest_new("test_rls_decide", json, &cfg);
	decide_init(&dec, rl);
}

static void teardown(void)
{
	char cmd[64];

	decide_free(&dec);
	rl_free(rl);
	config_free(&cfg);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
	memcpy(dir + strlen(dir) - 6, "XXXXXX", 6);
}

TestSuite(rls, .init = setup, .fini = teardown);

/* ---- requests ---- */

static struct rls_descriptor descs[RLS_DESCRIPTORS_MAX + 1];
static struct rls_entry entries[2 * (RLS_DESCRIPTORS_MAX + 1)];
static char texts[RLS_DESCRIPTORS_MAX + 1][64];

/* A request of domain with descriptors given as "k=v" or "k=v,k2=v2". */
static struct rls_request request(const char *domain, const char *const *d, size_t n)
{
	struct rls_request rq = { .domain = { domain, strlen(domain) }, .descriptors = descs,
				  .max_descriptors = RLS_DESCRIPTORS_MAX + 1, .entries = entries,
				  .max_entries = 2 * (RLS_DESCRIPTORS_MAX + 1) };

	memset(descs, 0, sizeof(descs));
	for (size_t i = 0; i < n; i++) {
		char *t = texts[i], *save = NULL;

		snprintf(t, sizeof(texts[i]), "%s", d[i]);
		descs[i].entries = &entries[rq.n_entries];
		for (char *e = strtok_r(t, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
			char *eq = strchr(e, '=');

			*eq = '\0';
			entries[rq.n_entries++] = (struct rls_entry){ { e, strlen(e) },
								      { eq + 1, strlen(eq + 1) } };
			descs[i].n_entries++;
		}
	}
	rq.n_descriptors = n;
	return rq;
}

static struct decide_owner owner;

/* Both steps at time now; the answer in resp. Returns rls_decide_*'s -1 or 0. */
static int ask_at(const struct rls_request *rq, bool trusted, double now)
{
	size_t np = 0;
	struct decide_pending *p;

	if (rls_decide_requests(&call, rl, rq, trusted, 0) < 0)
		return -1;
	if (call.nrq == 0)
		return rls_decide_answer(&call, NULL, 0, &resp);
	p = decide_run(&dec, call.rq, call.nrq, now, call.parts, RLS_DECIDE_BATCH, &np, &owner);
	cr_assert_null(p, "local namespaces decide at once");
	return rls_decide_answer(&call, call.parts, np, &resp);
}

static int ask(const struct rls_request *rq)
{
	return ask_at(rq, true, NOW + 1);
}

static const char *header(const char *key)
{
	static char v[RLS_DECIDE_FIELD];

	for (size_t i = 0; i < resp.n_response_headers; i++)
		if (resp.response_headers[i].key.len == strlen(key) &&
		    memcmp(resp.response_headers[i].key.ptr, key, strlen(key)) == 0) {
			snprintf(v, sizeof(v), "%.*s", (int)resp.response_headers[i].value.len,
				 resp.response_headers[i].value.ptr);
			return v;
		}
	return NULL;
}

/* ---- decisions ---- */

Test(rls, one_descriptor_counted_then_over_limit)
{
	static const char *const d[] = { "ip=10.0.0.1" };
	struct rls_request rq = request("edge", d, 1);

	for (int i = 0; i < 3; i++) {
		cr_assert_eq(ask(&rq), 0, "%s", call.why);
		cr_assert_eq(resp.overall_code, RLS_CODE_OK);
		cr_assert_eq(resp.n_statuses, 1);
		cr_assert_eq(resp.statuses[0].code, RLS_CODE_OK);
		cr_assert(resp.statuses[0].has_current_limit);
		cr_assert_eq(resp.statuses[0].current_limit.requests_per_unit, 3);
		cr_assert_eq(resp.statuses[0].current_limit.unit, RLS_UNIT_MINUTE);
		cr_assert_eq(resp.statuses[0].limit_remaining, (uint32_t)(2 - i));
		cr_assert(resp.statuses[0].has_duration_until_reset);
		cr_assert(resp.statuses[0].reset_seconds >= 1 && resp.statuses[0].reset_seconds <= 60);
		cr_assert_eq(resp.raw_body.len, 0);
		cr_assert_null(header("retry-after"));
	}
	cr_assert_str_eq(header("ratelimit-policy"), "\"edge\";q=3;w=60");
	cr_assert(strncmp(header("ratelimit"), "\"edge\";r=0;t=", 13) == 0, "%s", header("ratelimit"));
	cr_assert_eq(ask(&rq), 0);
	cr_assert_eq(resp.overall_code, RLS_CODE_OVER_LIMIT);
	cr_assert_eq(resp.statuses[0].code, RLS_CODE_OVER_LIMIT);
	cr_assert_eq(resp.statuses[0].limit_remaining, 0);
	cr_assert_not_null(header("retry-after"));
	cr_assert_geq(atoi(header("retry-after")), 1);
	cr_assert_str_eq(header("content-type"), "application/problem+json");
	cr_assert_not_null(memmem(resp.raw_body.ptr, resp.raw_body.len, "quota-exceeded", 14));
	cr_assert_not_null(memmem(resp.raw_body.ptr, resp.raw_body.len,
				  "\"violated-policies\":[\"edge\"]", 28));
	cr_assert_not_null(memmem(resp.raw_body.ptr, resp.raw_body.len, "\"status\":429", 12));
	/* another value of the key counts on its own */
	static const char *const d2[] = { "ip=10.0.0.2" };
	rq = request("edge", d2, 1);
	cr_assert_eq(ask(&rq), 0);
	cr_assert_eq(resp.overall_code, RLS_CODE_OK);
}

/* Every descriptor is one decision: with count_denied false, a request
 * one of them denies charges none of them. */
Test(rls, several_descriptors_one_decision)
{
	static const char *const both[] = { "shadow=x", "ip=a", "user=u" };
	static const char *const user[] = { "user=u" };
	struct rls_request rq;

	for (int i = 0; i < 3; i++) {
		rq = request("edge", both + 1, 2);
		cr_assert_eq(ask(&rq), 0);
		cr_assert_eq(resp.overall_code, RLS_CODE_OK);
	}
	cr_assert_str_eq(header("ratelimit-policy"), "\"edge-0\";q=3;w=60, \"edge-1\";q=5;w=60");
	rq = request("edge", both + 1, 2);
	cr_assert_eq(ask(&rq), 0);
	cr_assert_eq(resp.overall_code, RLS_CODE_OVER_LIMIT);
	cr_assert_eq(resp.statuses[0].code, RLS_CODE_OVER_LIMIT);
	cr_assert_eq(resp.statuses[1].code, RLS_CODE_OK);
	cr_assert_not_null(memmem(resp.raw_body.ptr, resp.raw_body.len,
				  "\"violated-policies\":[\"edge-0\"]", 30));
	/* user=u was charged 3 times, not 4 */
	rq = request("edge", user, 1);
	cr_assert_eq(ask(&rq), 0);
	cr_assert_eq(resp.statuses[0].limit_remaining, 1, "5 - 3 - this one");
	/* the statuses follow the descriptors, uncounted ones included */
	rq = request("edge", both, 3);
	cr_assert_eq(ask(&rq), 0);
	cr_assert_eq(resp.n_statuses, 3);
	cr_assert_eq(resp.statuses[1].code, RLS_CODE_OVER_LIMIT);
	cr_assert_str_eq(header("ratelimit-policy"),
			 "\"edge-0\";q=1;w=60, \"edge-1\";q=3;w=60, \"edge-2\";q=5;w=60");
}

Test(rls, hits_addend_per_request_per_descriptor_and_zero)
{
	static const char *const d[] = { "user=h", "tier=h" };
	struct rls_request rq = request("edge", d, 2);

	rq.hits_addend = 2;                       /* both charged 2 */
	descs[1].has_hits_addend = true;          /* tier: check only */
	descs[1].hits_addend = 0;
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(ask(&rq), 0);
		cr_assert_eq(resp.statuses[1].limit_remaining, 10, "a check counts nothing");
	}
	cr_assert_eq(resp.overall_code, RLS_CODE_OVER_LIMIT, "2 + 2 + 2 > 5");
	cr_assert_eq(resp.statuses[0].code, RLS_CODE_OVER_LIMIT);
	/* unset: 1 */
	static const char *const t[] = { "tier=h" };
	rq = request("edge", t, 1);
	cr_assert_eq(ask(&rq), 0);
	cr_assert_eq(resp.statuses[0].limit_remaining, 9);
	/* a per-descriptor addend over the request's, and past the limit:
	 * over it, not refused (no max_cost) */
	rq = request("edge", t, 1);
	rq.hits_addend = 1;
	descs[0].has_hits_addend = true;
	descs[0].hits_addend = 50;
	cr_assert_eq(ask(&rq), 0, "%s", call.why);
	cr_assert_eq(resp.overall_code, RLS_CODE_OVER_LIMIT);
	descs[0].hits_addend = 2000000000000ull;
	cr_assert_eq(ask(&rq), -1);
	cr_assert_eq(call.status, RLS_GRPC_INVALID_ARGUMENT);
}

/* ---- overrides and caller_limit ---- */

static uint32_t override_limit(const char *domain, const char *desc, uint32_t rpu, int unit,
			       bool trusted, int *rc)
{
	const char *const d[] = { desc };
	struct rls_request rq = request(domain, d, 1);

	descs[0].has_limit = true;
	descs[0].limit_requests_per_unit = rpu;
	descs[0].limit_unit = unit;
	*rc = ask_at(&rq, trusted, NOW + 1);
	return *rc == 0 && resp.statuses[0].has_current_limit
	       ? resp.statuses[0].current_limit.requests_per_unit : 0;
}

Test(rls, overrides_and_caller_limit)
{
	int rc;

	/* "lower" (edge): the smaller of the two, in the same window */
	cr_assert_eq(override_limit("edge", "tier=a", 2, RLS_UNIT_MINUTE, false, &rc), 2);
	cr_assert_eq(override_limit("edge", "tier=b", 50, RLS_UNIT_MINUTE, false, &rc), 10);
	/* "any": the override */
	cr_assert_eq(override_limit("anyd", "tier=c", 50, RLS_UNIT_MINUTE, false, &rc), 50);
	/* "none": the tree's */
	cr_assert_eq(override_limit("noned", "tier=d", 2, RLS_UNIT_MINUTE, false, &rc), 10);
	/* no limit in the tree: a trusted caller's override counts, under
	 * its entries' key */
	cr_assert_eq(override_limit("edge", "nomatch=x", 1, RLS_UNIT_MINUTE, true, &rc), 1);
	cr_assert_eq(resp.overall_code, RLS_CODE_OK);
	cr_assert_eq(override_limit("edge", "nomatch=x", 1, RLS_UNIT_MINUTE, true, &rc), 1);
	cr_assert_eq(resp.overall_code, RLS_CODE_OVER_LIMIT);
	/* ... an untrusted one's is refused, unless caller_limit "any" */
	cr_assert_eq(override_limit("edge", "nomatch=y", 1, RLS_UNIT_MINUTE, false, &rc), 0);
	cr_assert_eq(rc, -1);
	cr_assert_eq(call.status, RLS_GRPC_INVALID_ARGUMENT);
	cr_assert_eq(override_limit("anyd", "nomatch=y", 7, RLS_UNIT_MINUTE, false, &rc), 7);
	/* a plain namespace (no tree) takes a trusted override */
	cr_assert_eq(override_limit("plain", "k=v", 4, RLS_UNIT_MINUTE, true, &rc), 4);
	/* an override in a window the namespace does not have: the part's error */
	override_limit("edge", "tier=e", 5, RLS_UNIT_HOUR, true, &rc);
	cr_assert_eq(rc, -1);
	cr_assert_eq(call.status, RLS_GRPC_INVALID_ARGUMENT);
	cr_assert_not_null(call.why);
	/* no unit */
	override_limit("edge", "tier=e", 5, RLS_UNIT_UNKNOWN, true, &rc);
	cr_assert_eq(rc, -1);
	/* an override is never shadow: shadow=x overridden to 1 denies */
	cr_assert_eq(override_limit("edge", "shadow=o", 1, RLS_UNIT_MINUTE, true, &rc), 1);
	cr_assert_eq(override_limit("edge", "shadow=o", 1, RLS_UNIT_MINUTE, true, &rc), 1);
	cr_assert_eq(resp.overall_code, RLS_CODE_OVER_LIMIT);
}

/* ---- shadow, unlimited, replaces ---- */

Test(rls, shadow_mode_counts_and_never_denies)
{
	static const char *const d[] = { "shadow=s", "user=s" };
	struct rls_request rq;

	for (int i = 0; i < 4; i++) {
		rq = request("edge", d, 2);
		cr_assert_eq(ask(&rq), 0);
		cr_assert_eq(resp.overall_code, RLS_CODE_OK, "request %d", i);
		cr_assert_eq(resp.statuses[0].code, RLS_CODE_OK);
		cr_assert_eq(resp.statuses[1].limit_remaining, (uint32_t)(4 - i),
			     "the other descriptor is counted, shadow over or not");
	}
	cr_assert_null(header("retry-after"));
}

Test(rls, unlimited_and_unmatched)
{
	static const char *const d[] = { "free=x", "nothing=y", "ip=1,deeper=2" };
	struct rls_request rq = request("edge", d, 3);

	cr_assert_eq(ask(&rq), 0);
	cr_assert_eq(call.nrq, 0, "nothing to count");
	cr_assert_eq(resp.overall_code, RLS_CODE_OK);
	cr_assert_eq(resp.statuses[0].limit_remaining, UINT32_MAX);
	cr_assert(!resp.statuses[0].has_current_limit);
	cr_assert_eq(resp.statuses[1].limit_remaining, 0);
	cr_assert(!resp.statuses[1].has_current_limit && !resp.statuses[2].has_current_limit);
	cr_assert_eq(resp.n_response_headers, 0);
}

Test(rls, replaces_drops_the_named_limit)
{
	static const char *const d[] = { "vip=1", "promo=1" };
	static const char *const alone[] = { "vip=1" };
	struct rls_request rq = request("edge", d, 2);

	cr_assert_eq(ask(&rq), 0);
	cr_assert(!resp.statuses[0].has_current_limit, "vip replaced by promo");
	cr_assert_eq(resp.statuses[1].current_limit.requests_per_unit, 1000);
	rq = request("edge", alone, 1);
	cr_assert_eq(ask(&rq), 0);
	cr_assert_eq(resp.statuses[0].current_limit.requests_per_unit, 100);
	cr_assert_eq(resp.statuses[0].limit_remaining, 99, "not counted while replaced");
	cr_assert_eq(resp.statuses[0].current_limit.name.len, 3);
	cr_assert_eq(memcmp(resp.statuses[0].current_limit.name.ptr, "vip", 3), 0);
}

/* ---- keys and windows ---- */

Test(rls, share_threshold_and_window_extension)
{
	static const char *const a[] = { "files=f/a" }, *const b[] = { "files=f/b" };
	static const char *const odd[] = { "odd=1" };
	struct rls_request rq;

	rq = request("edge", a, 1);
	cr_assert_eq(ask(&rq), 0);
	rq = request("edge", b, 1);
	cr_assert_eq(ask(&rq), 0);
	cr_assert_eq(resp.statuses[0].limit_remaining, 0, "f/a and f/b share one counter");
	rq = request("edge", odd, 1);
	cr_assert_eq(ask(&rq), 0);
	cr_assert_eq(resp.statuses[0].current_limit.unit, RLS_UNIT_UNKNOWN, "90 s is no unit");
	cr_assert_str_eq(header("ratelimit-policy"), "\"edge\";q=2;w=90");
	cr_assert_leq(resp.statuses[0].reset_seconds, 90);
}

/* ---- refusals and bounds ---- */

Test(rls, unknown_domain_and_refusals)
{
	static const char *const d[] = { "ip=1" };
	struct rls_request rq = request("nowhere", d, 1);

	cr_assert_eq(ask(&rq), 0);
	cr_assert_eq(resp.overall_code, RLS_CODE_OK, "an unknown domain limits nothing");
	cr_assert_eq(resp.n_statuses, 1);
	rq = request("", d, 1);
	cr_assert_eq(ask(&rq), -1);
	cr_assert_eq(call.status, RLS_GRPC_UNKNOWN);
	cr_assert_str_eq(call.why, "rate limit domain must not be empty");
	rq = request("edge", d, 0);
	cr_assert_eq(ask(&rq), -1);
	cr_assert_str_eq(call.why, "rate limit descriptor list must not be empty");
}

/* 64 descriptors may come; 32 of them may be counted in one decision. */
Test(rls, thirty_two_counted_of_sixty_four)
{
	const char *d[RLS_DESCRIPTORS_MAX];
	char text[RLS_DESCRIPTORS_MAX][16];
	struct rls_request rq;

	for (size_t i = 0; i < RLS_DESCRIPTORS_MAX; i++) {
		snprintf(text[i], sizeof(text[i]), i < 32 ? "user=%zu" : "free=%zu", i);
		d[i] = text[i];
	}
	rq = request("edge", d, RLS_DESCRIPTORS_MAX);
	cr_assert_eq(ask(&rq), 0, "%s", call.why);
	cr_assert_eq(call.nrq, 32);
	cr_assert_eq(resp.n_statuses, 64);
	snprintf(text[40], sizeof(text[40]), "ip=40");
	rq = request("edge", d, RLS_DESCRIPTORS_MAX);
	cr_assert_eq(ask(&rq), -1);
	cr_assert_eq(call.status, RLS_GRPC_RESOURCE_EXHAUSTED);
	/* nothing of the refused request was counted */
	static const char *const one[] = { "user=0" };
	rq = request("edge", one, 1);
	cr_assert_eq(ask(&rq), 0);
	cr_assert_eq(resp.statuses[0].limit_remaining, 3, "5 - the first request - this one");
}

/* The answer is a RateLimitResponse protobuf reads back. */
Test(rls, the_answer_encodes)
{
	static const char *const d[] = { "ip=e", "free=e" };
	struct rls_request rq = request("edge", d, 2);
	uint8_t buf[16384];
	struct pb_writer w = { .buf = buf, .cap = sizeof(buf) };
	struct rls_status st[4];
	struct rls_header h[8], rh[2];
	struct rls_response back = { .statuses = st, .max_statuses = 4, .response_headers = h,
				     .max_response_headers = 8, .request_headers = rh,
				     .max_request_headers = 2 };
	enum rls_err err;

	for (int i = 0; i < 4; i++)
		cr_assert_eq(ask(&rq), 0);
	cr_assert_eq(rls_response_encode(&w, &resp), 0);
	cr_assert_eq(rls_response_decode(buf, w.len, &back, &err), 0, "%s", rls_err_str(err));
	cr_assert_eq(back.overall_code, RLS_CODE_OVER_LIMIT);
	cr_assert_eq(back.n_statuses, 2);
	cr_assert_eq(back.statuses[1].limit_remaining, UINT32_MAX);
	cr_assert_eq(back.n_response_headers, 4);
	cr_assert_eq(back.raw_body.len, resp.raw_body.len);
}
