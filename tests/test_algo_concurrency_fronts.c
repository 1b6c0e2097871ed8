/*
 * test_algo_concurrency_fronts.c - the concurrency limit (issue 32)
 * through the fronts of a real agent: SPOP (the variable `lease`, the
 * message `release` with its id, without one, with HAProxy's NULL of a
 * request that took none), HTTP (the lease in X-RateLimit-Lease and the
 * body, POST /release), leases expiring lease_ms after they were taken,
 * and GET /keys showing the leases in flight. The library's side:
 * tests/test_algo_concurrency.c.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tests/lib/agenttest.h"
#include "tests/lib/clock.h"
#include "tests/lib/httpc.h"
#include "tests/lib/rawspop.h"
#include "tests/lib/spoptest.h"

#define IO_MS 5000
#define LEASE_LEN 32

/* "c3": 3 in flight per key, leases of 60 s (none expires in a test);
 * "short": 3 in flight, leases of 1 s. */
static const char front_json[] =
	"{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"http_admin_token\": \"adm1n-t0ken\","
	" \"namespaces\": ["
	"{\"name\": \"default\", \"window_sizes\": [60]},"
	"{\"name\": \"c3\", \"algorithm\": \"concurrency\", \"limit\": 3},"
	"{\"name\": \"short\", \"algorithm\": \"concurrency\", \"limit\": 3, \"lease_ms\": 1000}]}";

/* An acquire of key in ns over SPOP: admitted or not; its lease in lease
 * (LEASE_LEN + 1 bytes: "" when denied). */
static bool spop_acquire(int fd, const char *ns, const char *key, char *lease)
{
	struct rawspop_actions acts;
	struct sp_msg m = { .key = key, .ns = ns };

	sp_notify1(fd, &m, &acts);
	sp_expect_no_error(&acts);
	bool admitted = !sp_var_bool(&acts, "exceeded");
	const struct rawspop_action *l = sp_var(&acts, "lease");
	cr_assert_eq(l != NULL, admitted, "a lease iff admitted");
	lease[0] = '\0';
	if (l) {
		cr_assert_eq(l->value.s_len, LEASE_LEN, "%s", l->value.s);
		strcpy(lease, l->value.s);
	}
	return admitted;
}

/* A `release` message: lease the id, "" for HAProxy's NULL (a variable
 * not set), NULL for no lease argument. Returns `released`. */
static bool spop_release(int fd, const char *ns, const char *key, const char *lease)
{
	struct rawspop_actions acts;
	struct sp_msg m = { .msg = "release", .key = key, .ns = ns,
			    .lease = lease && lease[0] ? lease : NULL,
			    .lease_null = lease && !lease[0] };

	sp_notify1(fd, &m, &acts);
	sp_expect_no_error(&acts);
	return sp_var_bool(&acts, "released");
}

/* Issue 32's target over SPOP: 5 acquires admit 3; one release (its
 * lease id, as HAProxy sends var(txn.ratelimit.lease) back) admits one
 * more; the same release again frees nothing; a request that took no
 * lease (NULL) frees nothing; a release without a lease frees one. */
Test(concurrency_fronts, spop, .fini = test_agent_stop, .timeout = 60)
{
	char key[48], lease[5][LEASE_LEN + 1];
	int admitted = 0;

	test_agent_start1(front_json);
	int fd = sp_agent_conn();
	sp_key(key, sizeof(key), "conc");
	for (int i = 0; i < 5; i++)
		admitted += spop_acquire(fd, "c3", key, lease[i]);
	cr_assert_eq(admitted, 3);
	cr_assert(strcmp(lease[0], lease[1]) && strcmp(lease[1], lease[2]));
	cr_assert(spop_release(fd, "c3", key, lease[1]));
	cr_assert(!spop_release(fd, "c3", key, lease[1]), "released twice");
	cr_assert(!spop_release(fd, "c3", key, ""), "a request without a lease");
	cr_assert(spop_acquire(fd, "c3", key, lease[3]), "one more admitted");
	cr_assert(!spop_acquire(fd, "c3", key, lease[4]));
	cr_assert(spop_release(fd, "c3", key, NULL), "without an id: any one");
	cr_assert(spop_acquire(fd, "c3", key, lease[4]));
	/* Errors: an unknown namespace, a namespace without leases. */
	struct rawspop_actions acts;
	struct sp_msg bad = { .msg = "release", .key = key, .ns = "nope", .lease = lease[0] };
	sp_notify1(fd, &bad, &acts);
	sp_expect_error(&acts, "unknown namespace");
	bad.ns = "default";
	sp_notify1(fd, &bad, &acts);
	sp_expect_error(&acts, "not a concurrency namespace");
	close(fd);
}

/* With lease_ms 1000 and no releases, 1.5 s later 3 admit again. */
Test(concurrency_fronts, spop_leases_expire, .fini = test_agent_stop, .timeout = 60)
{
	char key[48], lease[LEASE_LEN + 1];
	int admitted = 0;

	test_agent_start1(front_json);
	int fd = sp_agent_conn();
	sp_key(key, sizeof(key), "conc");
	for (int i = 0; i < 4; i++)
		admitted += spop_acquire(fd, "short", key, lease);
	cr_assert_eq(admitted, 3);
	test_sleep_ms(1500);
	admitted = 0;
	for (int i = 0; i < 4; i++)
		admitted += spop_acquire(fd, "short", key, lease);
	cr_assert_eq(admitted, 3);
	close(fd);
}

/* One request to the test agent's HTTP front (method "GET" or "POST",
 * with an empty body), the admin token when admin. */
static void http_once(const char *method, const char *target, bool admin, struct httpc_resp *r)
{
	const char *why = "";
	char headers[128];

	snprintf(headers, sizeof(headers), "%s%s",
		 admin ? "Authorization: Bearer adm1n-t0ken\r\n" : "",
		 strcmp(method, "POST") == 0 ? "Content-Length: 0\r\n" : "");
	cr_assert_eq(httpc_request(test_agent.http_port, method, target, headers, r, IO_MS, &why),
		     0, "%s", why);
}

/* POST /release of key's lease (NULL: none): its status, `released` in
 * *released. */
static int http_release(const char *key, const char *lease, bool *released)
{
	struct httpc_resp r;
	char target[256];

	snprintf(target, sizeof(target), "/release?namespace=c3&key=%s%s%s", key,
		 lease ? "&lease=" : "", lease ? lease : "");
	http_once("POST", target, false, &r);
	*released = strstr(r.body, "\"released\":true") != NULL;
	return r.status;
}

/* Over HTTP: the lease in X-RateLimit-Lease and the body; POST /release
 * frees it once; GET /keys shows the leases in flight. */
Test(concurrency_fronts, http, .fini = test_agent_stop, .timeout = 60)
{
	struct httpc_resp r;
	char req[256], key[48], lease[3][LEASE_LEN + 1], body_lease[64];
	int admitted = 0;
	bool released;

	test_agent_start1(front_json);
	sp_key(key, sizeof(key), "conc");
	snprintf(req, sizeof(req), "/ratelimit?namespace=c3&key=%s", key);
	for (int i = 0; i < 5; i++) {
		http_once("GET", req, false, &r);
		cr_assert(r.status == 200 || r.status == 429, "%d %s", r.status, r.body);
		if (r.status != 200) {
			cr_assert_str_empty(httpc_header(&r, "X-RateLimit-Lease", body_lease,
							 sizeof(body_lease)), "%s", r.headers);
			continue;
		}
		cr_assert_eq(strlen(httpc_header(&r, "X-RateLimit-Lease", lease[admitted],
						 LEASE_LEN + 1)), LEASE_LEN, "%s", r.headers);
		snprintf(body_lease, sizeof(body_lease), "\"lease\":\"%s\"", lease[admitted]);
		cr_assert_not_null(strstr(r.body, body_lease), "%s", r.body);
		admitted++;
	}
	cr_assert_eq(admitted, 3);
	snprintf(req, sizeof(req), "/keys?namespace=c3&key=%s", key);
	http_once("GET", req, true, &r);
	cr_assert_eq(httpc_body_num(&r, "in_flight"), 3, "%s", r.body);
	cr_assert_eq(httpc_body_num(&r, "remaining"), 0, "%s", r.body);

	cr_assert_eq(http_release(key, lease[0], &released), 200);
	cr_assert(released);
	cr_assert_eq(http_release(key, lease[0], &released), 200);
	cr_assert(!released, "released twice");
	cr_assert_eq(http_release(key, "", &released), 200);
	cr_assert(!released, "an empty lease: a request that took none");
	http_once("GET", req, true, &r);
	cr_assert_eq(httpc_body_num(&r, "in_flight"), 2, "%s", r.body);
	cr_assert_eq(http_release(key, NULL, &released), 200);
	cr_assert(released, "without a lease: any one");
	http_once("GET", req, true, &r);
	cr_assert_eq(httpc_body_num(&r, "in_flight"), 1, "%s", r.body);

	/* GET is not a release; a release names a concurrency namespace. */
	snprintf(req, sizeof(req), "/release?namespace=c3&key=%s", key);
	http_once("GET", req, false, &r);
	cr_assert_eq(r.status, 405);
	snprintf(req, sizeof(req), "/release?namespace=default&key=%s", key);
	http_once("POST", req, false, &r);
	cr_assert_eq(r.status, 400, "%s", r.body);
}
