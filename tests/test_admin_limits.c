/*
 * test_admin_limits.c - limits per key set at run time over the HTTP
 * front (docs/HTTP.md, "Limits per key") against the real agent
 * ($AGENT), local namespaces: PUT a key's limit below and above the
 * namespace's and the checks follow it (a caller's own still lowers it),
 * GET it (one key, or the namespace's in pages), DELETE it; the bound per
 * namespace (a full one refuses, clearly); /metrics counts them; the
 * state file keeps them across a restart; hostile input (tokens, bad
 * numbers, unknown namespaces and windows, other methods, a key over 104
 * bytes: its digest, as everywhere). Namespaces that sync: test_forget.c's
 * neighbour, tests/test_cluster_limits.c.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/lib/agenttest.h"
#include "tests/lib/clock.h"
#include "tests/lib/httpc.h"

#define IO_MS    5000
#define ADMIN    "Authorization: Bearer adm1n-t0ken\r\n"
#define CHECK    "Authorization: Bearer ch3ck-t0ken\r\n"

static const char json[] =
	"{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"http_token\": \"ch3ck-t0ken\","
	" \"http_admin_token\": \"adm1n-t0ken\", \"namespaces\": ["
	"{\"name\": \"default\", \"window_sizes\": [60, 3600], \"limit\": {\"60\": 5}},"
	"{\"name\": \"solo\", \"window_sizes\": [60], \"limit\": 5,"
	" \"max_limit_overrides\": 12}]}";

/* One request, its answer in *r. */
static void req(const char *method, const char *target, const char *headers,
		struct httpc_resp *r)
{
	const char *why = "";

	cr_assert(httpc_request(test_agent.http_port, method, target, headers, r, IO_MS, &why) == 0,
		  "%s %s: %s\n%s", method, target, why, test_agent_log_tail());
}

/* req() that must answer status. */
static void expect(const char *method, const char *target, int status, struct httpc_resp *r)
{
	req(method, target, ADMIN, r);
	cr_assert_eq(r->status, status, "%s %s: %d %s", method, target, r->status, r->body);
}

/* A check of key in window 60 of ns (extra: more arguments): its status. */
static int hit(const char *ns, const char *key, const char *extra)
{
	char t[1024];
	struct httpc_resp r;

	snprintf(t, sizeof(t), "/ratelimit?namespace=%s&key=%s&window=60%s", ns, key, extra);
	req("GET", t, CHECK, &r);
	cr_assert(r.status == 200 || r.status == 429, "%s: %d %s", t, r.status, r.body);
	return r.status;
}

/* n checks of key: how many were admitted. */
static int admitted(const char *ns, const char *key, int n)
{
	int ok = 0;

	for (int i = 0; i < n; i++)
		ok += hit(ns, key, "") == 200;
	return ok;
}

/* A sample of /metrics (its text up to the value). */
static long long metric(const char *sample)
{
	long long v = httpc_metric(test_agent.http_port, sample, IO_MS);

	cr_assert_geq(v, 0, "no %s in /metrics", sample);
	return v;
}

TestSuite(admin_limits, .fini = test_agent_stop, .timeout = 120);

/* A key's own limit replaces the namespace's, below or above it, in its
 * window only; a caller's own limit still lowers it; DELETE gives the
 * namespace's back, the count kept. */
Test(admin_limits, a_key_s_limit_below_and_above)
{
	struct httpc_resp r;

	test_agent_start1(json);
	test_window_room(60, 20000);
	expect("PUT", "/limits?key=low&window=60&limit=2", 200, &r);
	cr_assert_str_eq(r.body, "{\"namespace\":\"default\",\"key\":\"low\",\"window\":60,"
			 "\"limit\":2,\"store\":\"none\"}\n");
	expect("PUT", "/limits?key=high&window=60&limit=8", 200, &r);
	cr_assert_eq(admitted("default", "low", 4), 2, "its own limit, lower");
	cr_assert_eq(admitted("default", "high", 10), 8, "its own limit, higher");
	cr_assert_eq(admitted("default", "other", 7), 5, "another key: the namespace's");
	/* The answer says which limit it was decided against. */
	req("GET", "/ratelimit?key=high&window=60&cost=0", CHECK, &r);
	cr_assert_eq(httpc_body_num(&r, "limit"), 8, "%s", r.body);
	/* Another window of the key has the namespace's (none here). */
	expect("GET", "/limits?key=low", 200, &r);
	cr_assert_str_eq(r.body, "{\"namespace\":\"default\",\"key\":\"low\",\"limits\":"
			 "[{\"window\":60,\"limit\":2}]}\n");
	expect("GET", "/keys?key=low", 200, &r);
	cr_assert_not_null(strstr(r.body, "\"limit\":2,\"remaining\":0"), "%s", r.body);
	/* A caller's own limit lowers it (caller_limit "lower"). */
	expect("PUT", "/limits?key=lowered&window=60&limit=10", 200, &r);
	cr_assert_eq(hit("default", "lowered", "&limit=1"), 200);
	cr_assert_eq(hit("default", "lowered", "&limit=1"), 429);
	cr_assert_eq(hit("default", "lowered", ""), 200, "10 without it");
	/* Replaced: the new one at once. */
	expect("PUT", "/limits?key=low&window=60&limit=6", 200, &r);
	cr_assert_eq(admitted("default", "low", 4), 2, "4 counted, 6 allowed");
	/* Removed: the namespace's 5 again, the count (6 admitted, 2 denied,
	 * counted) kept. */
	expect("DELETE", "/limits?key=low&window=60", 200, &r);
	cr_assert_not_null(strstr(r.body, "\"removed\":true"), "%s", r.body);
	expect("DELETE", "/limits?key=low&window=60", 200, &r);
	cr_assert_not_null(strstr(r.body, "\"removed\":false"), "%s", r.body);
	cr_assert_eq(hit("default", "low", ""), 429);
	expect("GET", "/limits?key=low", 200, &r);
	cr_assert_not_null(strstr(r.body, "\"limits\":[]"), "%s", r.body);
	/* 0 is a limit: nothing admitted. */
	expect("PUT", "/limits?key=zero&window=60&limit=0", 200, &r);
	cr_assert_eq(admitted("default", "zero", 2), 0);
}

/* max_limit_overrides bounds a namespace: one more is refused with a
 * message that names the bound, a replacement is not; /metrics counts
 * them (no key in a label); GET lists them in pages. */
Test(admin_limits, bounded_counted_paged)
{
	struct httpc_resp r;
	char t[256], seen[12] = { 0 };

	test_agent_start1(json);
	for (int i = 0; i < 12; i++) {
		snprintf(t, sizeof(t), "/limits?namespace=solo&key=t%02d&limit=%d", i, 100 + i);
		expect("PUT", t, 200, &r);
	}
	expect("PUT", "/limits?namespace=solo&key=t12&limit=1", 409, &r);
	cr_assert_str_eq(r.body, "{\"error\":\"namespace holds max_limit_overrides (12) limits "
			 "per key already: remove one (DELETE /limits) or raise "
			 "max_limit_overrides\"}\n");
	expect("PUT", "/limits?namespace=solo&key=t03&limit=7", 200, &r);
	cr_assert_eq(metric("spoa_ratelimit_limit_overrides{namespace=\"solo\"} "), 12);
	cr_assert_eq(metric("spoa_ratelimit_limit_overrides_max{namespace=\"solo\"} "), 12);
	cr_assert_eq(metric("spoa_ratelimit_limit_overrides{namespace=\"default\"} "), 0);
	cr_assert_eq(metric("spoa_ratelimit_limit_overrides_max{namespace=\"default\"} "), 1024);
	/* Pages of 5: 5, 5, 2, each key once. */
	long long after = 0;
	int pages = 0, total = 0;
	do {
		snprintf(t, sizeof(t), "/limits?namespace=solo&n=5%s%lld", after ? "&after=" : "&n=",
			 after ? after : 5);
		expect("GET", t, 200, &r);
		cr_assert_not_null(strstr(r.body, "\"count\":12,\"max\":12"), "%s", r.body);
		for (const char *p = r.body; (p = strstr(p, "{\"key\":\"t")); p++) {
			int id = atoi(p + 9);
			cr_assert(id >= 0 && id < 12 && !seen[id], "t%02d: %s", id, r.body);
			seen[id] = 1;
			total++;
		}
		after = strstr(r.body, "\"next\":") ? httpc_body_num(&r, "next") : 0;
		pages++;
	} while (after > 0 && pages < 10);
	cr_assert_eq(total, 12);
	cr_assert_eq(pages, 3);
	cr_assert_not_null(strstr(r.body, "{\"key\":\"t") ? r.body : "", "%s", r.body);
	/* Room again after a removal. */
	expect("DELETE", "/limits?namespace=solo&key=t00", 200, &r);
	cr_assert_eq(metric("spoa_ratelimit_limit_overrides{namespace=\"solo\"} "), 11);
	expect("PUT", "/limits?namespace=solo&key=t12&limit=1", 200, &r);
}

/* The admin token only; every argument checked; nothing changed by a
 * refusal; a key over 104 bytes is its digest, as for the checks. */
Test(admin_limits, hostile_input)
{
	struct httpc_resp r;
	static const struct {
		const char *method, *target;
		int status;
		const char *why;
	} bad[] = {
		{ "PUT", "/limits?window=60&limit=1", 400, "missing key" },
		{ "PUT", "/limits?key=&window=60&limit=1", 400, "empty key" },
		{ "PUT", "/limits?key=k&window=60", 400, "missing limit" },
		{ "PUT", "/limits?key=k&window=60&limit=x", 400, "bad limit" },
		{ "PUT", "/limits?key=k&window=60&limit=-1", 400, "bad limit" },
		{ "PUT", "/limits?key=k&window=60&limit=", 400, "bad limit" },
		{ "PUT", "/limits?key=k&window=60&limit=1000000000001", 400, "bad limit" },
		{ "PUT", "/limits?key=k&window=60&limit=99999999999999999999999", 400, "bad limit" },
		{ "PUT", "/limits?key=k&window=60&limit=1e3", 400, "bad limit" },
		{ "PUT", "/limits?key=k&window=61&limit=1", 400, "bad window" },
		{ "PUT", "/limits?key=k&window=0&limit=1", 400, "bad window" },
		{ "PUT", "/limits?key=k&window=6O&limit=1", 400, "bad window" },
		{ "PUT", "/limits?key=k&limit=1", 400, "missing window" },
		{ "DELETE", "/limits?key=k", 400, "missing window" },
		{ "PUT", "/limits?key=k%zz&window=60&limit=1", 400, "percent" },
		{ "GET", "/limits?n=0", 400, "bad n" },
		{ "GET", "/limits?after=-1", 400, "bad after" },
		{ "PUT", "/limits?namespace=nope&key=k&window=60&limit=1", 404, "unknown namespace" },
		{ "GET", "/limits?namespace=nope", 404, "unknown namespace" },
		{ "PATCH", "/limits?key=k", 405, "method not allowed" },
		{ "POST", "/limits?key=k", 405, "method not allowed" },
		{ "PUT", "/keys?key=k", 405, "method not allowed" },
		{ "PUT", "/ratelimit?key=k", 405, "method not allowed" },
	};

	test_agent_start1(json);
	test_window_room(60, 20000);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		req(bad[i].method, bad[i].target, ADMIN, &r);
		cr_assert_eq(r.status, bad[i].status, "%s %s: %d %s", bad[i].method, bad[i].target,
			     r.status, r.body);
		cr_assert_not_null(strstr(r.body, bad[i].why), "%s %s: %s", bad[i].method,
				   bad[i].target, r.body);
	}
	req("PUT", "/limits?namespace=solo&key=k&limit=1", NULL, &r);
	cr_assert_eq(r.status, 401, "%s", r.body);
	cr_assert_not_null(strstr(r.headers, "WWW-Authenticate: Bearer"), "%s", r.headers);
	req("PUT", "/limits?namespace=solo&key=k&limit=1", CHECK, &r);
	cr_assert_eq(r.status, 403, "the checks' token does not open it: %s", r.body);
	req("DELETE", "/limits?namespace=solo&key=k", CHECK, &r);
	cr_assert_eq(r.status, 403, "%s", r.body);
	req("GET", "/limits?namespace=solo", NULL, &r);
	cr_assert_eq(r.status, 401, "%s", r.body);
	expect("GET", "/limits?namespace=solo", 200, &r);
	cr_assert_not_null(strstr(r.body, "\"count\":0,"), "nothing was set: %s", r.body);

	/* 300 bytes of key: stored as its digest, which the checks use too. */
	char key[301], t[1024];
	memset(key, 'L', 300);
	key[300] = '\0';
	snprintf(t, sizeof(t), "/limits?namespace=solo&key=%s&limit=1", key);
	expect("PUT", t, 200, &r);
	cr_assert_eq(admitted("solo", key, 3), 1);
	key[299] = 'M';
	cr_assert_eq(admitted("solo", key, 3), 3, "another long key: the namespace's 5");
	expect("GET", "/limits?namespace=solo", 200, &r);
	cr_assert_not_null(strstr(r.body, "{\"key\":\"#"), "listed as its digest: %s", r.body);
	cr_assert_null(strstr(r.body, "LLLL"), "%s", r.body);
	/* Bytes of every kind in a key, escaped in the answer. */
	expect("PUT", "/limits?namespace=solo&key=q%22b%5Cs%01%FF&limit=3", 200, &r);
	cr_assert_not_null(strstr(r.body, "\"key\":\"q\\\"b\\\\s\\u0001\\u00ff\""), "%s", r.body);
}

/* ctl limits set|get|rm: the same through the command line, with the
 * config file's address and token. */
Test(admin_limits, ctl_limits)
{
	char out[8192];

	test_agent_start1(json);
	cr_assert_eq(test_agent_ctl("limits set default customer-42 1000 60", out, sizeof(out)), 0,
		     "%s", out);
	cr_assert_str_eq(out, "namespace default, key customer-42, window 60 s: limit 1000\n");
	cr_assert_eq(test_agent_ctl("limits set solo bot-7 5", out, sizeof(out)), 0, "%s", out);
	cr_assert_eq(test_agent_ctl("limits set solo '\"q\\x01\"' 6", out, sizeof(out)), 0,
		     "%s", out);
	cr_assert_not_null(strstr(out, "key \"q\\x01\", window 60 s: limit 6"), "%s", out);
	cr_assert_eq(test_agent_ctl("limits get default customer-42", out, sizeof(out)), 0, "%s",
		     out);
	cr_assert_not_null(strstr(out, "customer-42                                    60"
				  "           1000\n"), "%s", out);
	cr_assert_eq(test_agent_ctl("limits get solo", out, sizeof(out)), 0, "%s", out);
	cr_assert_not_null(strstr(out, "namespace solo: 2 limit(s) per key of at most 12\n"),
			   "%s", out);
	cr_assert_not_null(strstr(out, "bot-7 "), "%s", out);
	cr_assert_not_null(strstr(out, "\"q\\x01\" "), "printed as it is read: %s", out);
	cr_assert_eq(test_agent_ctl("--json limits get solo bot-7", out, sizeof(out)), 0, "%s",
		     out);
	cr_assert_str_eq(out, "{\"namespace\":\"solo\",\"key\":\"bot-7\",\"limits\":"
			 "[{\"window\":60,\"limit\":5}]}\n");
	cr_assert_eq(test_agent_ctl("limits rm solo bot-7", out, sizeof(out)), 0, "%s", out);
	cr_assert_str_eq(out, "namespace solo, key bot-7, window 60 s: back to the namespace's "
			 "limit\n");
	cr_assert_eq(test_agent_ctl("limits rm solo bot-7", out, sizeof(out)), 0, "%s", out);
	cr_assert_not_null(strstr(out, "had no limit of its own"), "%s", out);
	/* Refusals: the agent's reason, exit status 1; usage: 2. */
	cr_assert_eq(test_agent_ctl("limits set default k 5", out, sizeof(out)), 1, "%s", out);
	cr_assert_not_null(strstr(out, "400: missing window (the namespace has several)"), "%s",
			   out);
	cr_assert_eq(test_agent_ctl("limits set solo k x", out, sizeof(out)), 1, "%s", out);
	cr_assert_not_null(strstr(out, "bad limit"), "%s", out);
	cr_assert_eq(test_agent_ctl("limits frob solo", out, sizeof(out)), 2, "%s", out);
	cr_assert_eq(test_agent_ctl("limits set solo", out, sizeof(out)), 2, "%s", out);
	cr_assert_not_null(strstr(out, "limits set NAMESPACE KEY LIMIT [WINDOW]"), "%s", out);
}

/* Without http_admin_token the endpoint is not there. */
Test(admin_limits, off_without_its_token)
{
	struct httpc_resp r;

	test_agent_start1("{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"namespaces\": ["
			  "{\"name\": \"default\", \"window_sizes\": [60], \"limit\": 5}]}");
	req("PUT", "/limits?key=k&limit=1", NULL, &r);
	cr_assert_eq(r.status, 404, "%s", r.body);
	req("GET", "/limits", NULL, &r);
	cr_assert_eq(r.status, 404, "%s", r.body);
}

/* A local namespace's limits are in the state file: a restarted agent
 * decides against them still. */
Test(admin_limits, kept_across_a_restart)
{
	char dir[] = "/tmp/test_admin_limits-XXXXXX", cfg[1024], path[128];
	struct httpc_resp r;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(cfg, sizeof(cfg),
		 "{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"http_token\": \"ch3ck-t0ken\","
		 " \"http_admin_token\": \"adm1n-t0ken\", \"state_file\": \"%s/state\","
		 " \"max_keys\": 1000, \"namespaces\": [{\"name\": \"solo\", \"window_sizes\": [60],"
		 " \"limit\": 5, \"max_limit_overrides\": 12}]}", dir);
	test_agent_start1(cfg);
	test_window_room(60, 30000);
	expect("PUT", "/limits?namespace=solo&key=two&limit=2", 200, &r);
	expect("PUT", "/limits?namespace=solo&key=nine&limit=9", 200, &r);
	cr_assert_eq(agentproc_stop(&test_agent, 10000, false), 0, "exit 0 on SIGTERM");
	test_agent_start1(cfg);
	expect("GET", "/limits?namespace=solo&key=two", 200, &r);
	cr_assert_not_null(strstr(r.body, "{\"window\":60,\"limit\":2}"), "%s", r.body);
	cr_assert_eq(metric("spoa_ratelimit_limit_overrides{namespace=\"solo\"} "), 2);
	cr_assert_eq(admitted("solo", "two", 4), 2);
	cr_assert_eq(admitted("solo", "nine", 10), 9);
	cr_assert_eq(agentproc_stop(&test_agent, 10000, false), 0);
	snprintf(path, sizeof(path), "%s/state", dir);
	unlink(path);
	rmdir(dir);
}
