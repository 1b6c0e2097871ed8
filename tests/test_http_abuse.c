/*
 * test_http_abuse.c - the HTTP front as a trust boundary, against the real
 * agent ($AGENT): each case is a way a caller of the HTTP port got past a
 * limit or turned one on someone else, as a security review of 1c87543
 * reproduced it, and each fails on that code.
 *
 *   auth       no http_token, a wrong one: 401, nothing counted, no count
 *              disclosed; /healthz open, /metrics behind the token on ask;
 *              http_admin_token: a trusted caller
 *   keys       X-RateLimit-Key / -Namespace taken as opaque bytes: "&",
 *              "%", "=" and spaces are part of the key, not arguments
 *   limits     the configured limit holds whatever limit a request names;
 *              limit=0 pins no table entry; a cost over max_cost is a 400;
 *              where no limit is configured a caller names none (issue
 *              28: HAProxy's new keys then found the table full), and no
 *              cost empties a key in one request (HTTP or SPOP)
 *   admission  an HTTP caller cannot switch exact cluster admission off
 *              unless the namespace lets it (caller_admission)
 *   starve     HTTP peers holding connections (idle, busy or sending their
 *              heads slowly) cannot keep HAProxy's SPOP connections or new
 *              checks out
 *   unix_front the HTTP front on a unix socket, its mode from listen_mode
 *
 * Latencies are printed (cr_log_info), never asserted: the bounds below
 * are failure bounds, far above what the agent takes.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "tests/lib/agenttest.h"
#include "tests/lib/clock.h"
#include "tests/lib/httpc.h"
#include "tests/lib/rawspop.h"
#include "tests/lib/redis_server.h"
#include "tests/lib/spoptest.h"

#define IO_MS    3000
#define TOKEN    "t0k3n-for-the-checks"
#define AUTH     "Authorization: Bearer " TOKEN "\r\n"
#define ADMIN    "Authorization: Bearer adm1n-t0k3n\r\n"

static double now_s(void)
{
	return (double)test_now_us() / 1e6;
}

/* GET target with extra header lines (each ending with CRLF), on a new
 * connection. */
static void get(const char *target, const char *headers, struct httpc_resp *r)
{
	const char *why = "";

	cr_assert(httpc_get(test_agent.http_port, target, headers, r, IO_MS, &why) == 0,
		  "GET %s: %s\n%s", target, why, test_agent_log_tail());
}

/* The rate of key in ns (window 60) read with cost 0, with the token. */
static long long rate_of(const char *ns, const char *key)
{
	char target[512];
	struct httpc_resp r;

	snprintf(target, sizeof(target), "/ratelimit?namespace=%s&key=%s&window=60&cost=0", ns,
		 key);
	get(target, AUTH, &r);
	cr_assert(r.status == 200 || r.status == 429, "%s: %s", target, r.body);
	return httpc_body_num(&r, "rate");
}

/* GET target with headers: a 400 whose body holds want. */
static void expect_400(const char *target, const char *headers, const char *want)
{
	struct httpc_resp r;

	get(target, headers, &r);
	cr_assert_eq(r.status, 400, "%s: %d %s", target, r.status, r.body);
	cr_assert_not_null(strstr(r.body, want), "%s: %s", target, r.body);
}

/* A check as HAProxy sends it: NOTIFY ratelimit(namespace ns, key,
 * window 60, limit unless < 0, cost unless < 0) on fd. Returns whether
 * the ACK says exceeded; its error variable goes to err ("" without). */
static bool spop_check(int fd, const char *ns, const char *key, int64_t limit, int64_t cost,
		       char err[RAWSPOP_STR_MAX])
{
	static struct rawspop_actions acts;
	struct sp_msg m = { .ns = ns, .key = key, .window = 60, .limit = limit >= 0 ? limit : 0,
			    .has_cost = cost >= 0, .cost = cost };
	const struct rawspop_action *e;

	cr_assert(limit != 0, "limit 0 is left out of the message: say -1");
	sp_notify1(fd, &m, &acts);
	e = sp_var(&acts, "error");
	snprintf(err, RAWSPOP_STR_MAX, "%s", e ? e->value.s : "");
	return sp_var(&acts, "exceeded") && sp_var_bool(&acts, "exceeded");
}

/* ------------------------------------------------------------------ auth */

static const char auth_json[] =
	"{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"http_token\": \"" TOKEN "\","
	" \"namespaces\": [{\"name\": \"default\", \"window_sizes\": [60], \"limit\": 3},"
	" {\"name\": \"per-ip\", \"window_sizes\": [60], \"limit\": 100}]}";

Test(auth, checks_need_the_token, .fini = test_agent_stop, .timeout = 60)
{
	static const char *const wrong[] = {
		"",                                                 /* none */
		"Authorization: Bearer t0k3n-for-the-check\r\n",    /* a prefix */
		"Authorization: Bearer t0k3n-for-the-checks2\r\n",  /* longer */
		"Authorization: Bearer T0K3N-FOR-THE-CHECKS\r\n",   /* case */
		"Authorization: Basic dDBrM246\r\n",                /* another scheme */
		"Authorization: " TOKEN "\r\n",                     /* no scheme */
		"X-Token: " TOKEN "\r\n",
	};
	struct httpc_resp r;
	char v[128];

	test_agent_start1(auth_json);
	for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++) {
		get("/ratelimit?key=victim&window=60&cost=2", wrong[i], &r);
		cr_assert_eq(r.status, 401, "case %zu: %d %s", i, r.status, r.body);
		cr_assert_str_eq(httpc_header(&r, "WWW-Authenticate", v, sizeof(v)),
				 "Bearer realm=\"spoa-ratelimit\"");
		cr_assert_null(strstr(r.body, "rate"), "no count disclosed: %s", r.body);
		cr_assert_str_empty(httpc_header(&r, "RateLimit", v, sizeof(v)));
	}
	cr_assert_eq(rate_of("default", "victim"), 0, "a refused check counts nothing");
	/* The scheme is case-insensitive (RFC 9110), the token is not. */
	get("/ratelimit?key=victim&window=60", "Authorization: bearer " TOKEN "\r\n", &r);
	cr_assert_eq(r.status, 200, "%s", r.body);
	cr_assert_eq(httpc_body_num(&r, "rate"), 1);
	/* Two Authorization fields: a bad request. */
	get("/ratelimit?key=victim&window=60", AUTH AUTH, &r);
	cr_assert_eq(r.status, 400, "%s", r.body);
	/* /healthz and /metrics stay open (http_metrics_token is off). */
	get("/healthz", NULL, &r);
	cr_assert_eq(r.status, 200);
	get("/metrics", NULL, &r);
	cr_assert_eq(r.status, 200);
}

Test(auth, metrics_behind_the_token_on_ask, .fini = test_agent_stop, .timeout = 60)
{
	struct httpc_resp r;

	test_agent_start1("{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"http_token\": \"" TOKEN "\","
		   " \"http_metrics_token\": true}");
	get("/metrics", NULL, &r);
	cr_assert_eq(r.status, 401);
	get("/metrics", AUTH, &r);
	cr_assert_eq(r.status, 200);
	get("/healthz", NULL, &r);
	cr_assert_eq(r.status, 200, "health checks stay open");
}

/* A check with http_admin_token is a trusted caller's (it was a 401):
 * it names a limit and a cost where no limit is configured, as HAProxy
 * does; the checks' token does not. */
Test(auth, the_admin_token_is_a_trusted_caller, .fini = test_agent_stop, .timeout = 60)
{
	struct httpc_resp r;

	test_agent_start1("{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"http_token\": \"" TOKEN "\","
			  " \"http_admin_token\": \"adm1n-t0k3n\","
			  " \"namespaces\": [{\"name\": \"default\", \"window_sizes\": [60]}]}");
	/* The checks' token: untrusted. */
	expect_400("/ratelimit?key=t&window=60&limit=2", AUTH, "caller_limit");
	expect_400("/ratelimit?key=t&window=60&cost=2", AUTH, "cost over max_cost");
	for (int n = 1; n <= 3; n++) {
		get("/ratelimit?key=t&window=60&limit=2", ADMIN, &r);
		cr_assert_eq(r.status, n <= 2 ? 200 : 429, "hit %d: %d %s", n, r.status, r.body);
		cr_assert_eq(httpc_body_num(&r, "limit"), 2);
	}
	get("/ratelimit?key=u&window=60&cost=5", ADMIN, &r);
	cr_assert_eq(r.status, 200, "no limit: a trusted caller's cost: %s", r.body);
	cr_assert_eq(httpc_body_num(&r, "rate"), 5);
	get("/ratelimit?key=u&window=60", "Authorization: Bearer adm1n-t0k3\r\n", &r);
	cr_assert_eq(r.status, 401, "%s", r.body);
}

/* ------------------------------------------------------------------ keys */

/* A key in X-RateLimit-Key is the bytes it holds: the review's API keys
 * that rewrote the query ("k2&cost=0" counted nothing, "k4&limit=1000000"
 * raised the limit, "k5&namespace=per-ip" moved the hit, "k3%zz" was a
 * 400 that nginx failed open on) are each counted as themselves. */
Test(keys, header_keys_are_opaque, .fini = test_agent_stop, .timeout = 60)
{
	static const struct {
		const char *key;         /* as the header carries it */
		const char *query;       /* the same key percent-encoded */
	} keys[] = {
		{ "k2&cost=0", "k2%26cost%3D0" },
		{ "k3%zz", "k3%25zz" },
		{ "k4&limit=1000000", "k4%26limit%3D1000000" },
		{ "k5&namespace=per-ip", "k5%26namespace%3Dper-ip" },
		{ "a key with spaces = yes", "a%20key%20with%20spaces%20%3D%20yes" },
	};
	struct httpc_resp r;
	char h[256];

	test_agent_start1(auth_json);
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		snprintf(h, sizeof(h), AUTH "X-RateLimit-Key: %s\r\n", keys[i].key);
		for (int n = 1; n <= 5; n++) {
			get("/ratelimit?window=60", h, &r);
			cr_assert_eq(r.status, n <= 3 ? 200 : 429, "%s hit %d: %d %s", keys[i].key, n,
				     r.status, r.body);
			cr_assert_eq(httpc_body_num(&r, "rate"), n, "%s: %s", keys[i].key, r.body);
			cr_assert_eq(httpc_body_num(&r, "limit"), 3);
			cr_assert_not_null(strstr(r.body, "\"namespace\":\"default\""), "%s", r.body);
		}
		cr_assert_eq(rate_of("default", keys[i].query), 5, "%s", keys[i].key);
	}
	cr_assert_eq(rate_of("per-ip", "k5"), 0);
	cr_assert_eq(rate_of("default", "k2"), 0);
	/* The namespace may come as a field too. */
	get("/ratelimit?window=60", AUTH "X-RateLimit-Key: 10.0.0.1\r\n"
				    "X-RateLimit-Namespace: per-ip\r\n", &r);
	cr_assert_eq(r.status, 200, "%s", r.body);
	cr_assert_eq(httpc_body_num(&r, "limit"), 100);
	cr_assert_eq(rate_of("per-ip", "10.0.0.1"), 1);
	/* Given twice (field and query, or two fields): a bad request. */
	get("/ratelimit?window=60&key=x", AUTH "X-RateLimit-Key: x\r\n", &r);
	cr_assert_eq(r.status, 400, "%s", r.body);
	get("/ratelimit?window=60&namespace=per-ip",
	    AUTH "X-RateLimit-Key: x\r\nX-RateLimit-Namespace: per-ip\r\n", &r);
	cr_assert_eq(r.status, 400, "%s", r.body);
	get("/ratelimit?window=60", AUTH "X-RateLimit-Key: x\r\nX-RateLimit-Key: y\r\n", &r);
	cr_assert_eq(r.status, 400, "%s", r.body);
	cr_assert_eq(rate_of("default", "x"), 0);
	/* An empty field is an empty key: a bad request, never a pass. */
	get("/ratelimit?window=60", AUTH "X-RateLimit-Key:\r\n", &r);
	cr_assert_eq(r.status, 400, "%s", r.body);
}

/* ---------------------------------------------------------------- limits */

Test(limits, the_configured_limit_holds, .fini = test_agent_stop, .timeout = 60)
{
	struct httpc_resp r;

	test_agent_start1(auth_json);
	/* A caller may lower the limit, never raise it. */
	for (int n = 1; n <= 4; n++) {
		get("/ratelimit?key=u&window=60&limit=1000000", AUTH, &r);
		cr_assert_eq(r.status, n <= 3 ? 200 : 429, "hit %d: %s", n, r.body);
		cr_assert_eq(httpc_body_num(&r, "limit"), 3);
	}
	get("/ratelimit?key=v&window=60&limit=1", AUTH, &r);
	cr_assert_eq(r.status, 200);
	get("/ratelimit?key=v&window=60&limit=1", AUTH, &r);
	cr_assert_eq(r.status, 429, "lowered to 1: %s", r.body);
	/* A cost that would lock anyone out for a window: refused, nothing
	 * counted (max_cost defaults to half the limit, at least 1). */
	get("/ratelimit?key=w&window=60&cost=999999999999", AUTH, &r);
	cr_assert_eq(r.status, 400, "%s", r.body);
	cr_assert_not_null(strstr(r.body, "max_cost"), "%s", r.body);
	get("/ratelimit?key=w&window=60&cost=2", AUTH, &r);
	cr_assert_eq(r.status, 400, "%s", r.body);
	cr_assert_eq(rate_of("default", "w"), 0);
	get("/ratelimit?key=w&window=60&cost=1", AUTH, &r);
	cr_assert_eq(r.status, 200, "a cost up to half the limit (3: 1): %s", r.body);
}

/* Issue 28: in a namespace without a configured limit, 300 HTTP checks
 * with limit=0 (anyone: no http_token), each a new key over the limit it
 * named, pinned the namespace's share (such a key is never evicted), and
 * HAProxy's new keys then found no room: error "counter table full",
 * passed uncounted. Now each check is refused (400, the reason naming
 * the namespace and caller_limit), nothing counted, and HAProxy's new
 * key with limit 3 gets exactly 3. */
Test(limits, no_callers_limit_where_none_is_configured, .fini = test_agent_stop, .timeout = 120)
{
	struct httpc_buf *b = calloc(1, sizeof(*b));
	struct httpc_resp r;
	char req[512], err[RAWSPOP_STR_MAX];
	const char *why = "";
	int fd, admitted = 0;

	test_agent_start1("{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"max_keys\": 64,"
			  " \"namespaces\": [{\"name\": \"default\", \"window_sizes\": [60]}]}");
	fd = rawspop_connect(test_agent.http_port, IO_MS);
	cr_assert(fd >= 0);
	for (int i = 0; i < 300; i++) {
		int n = snprintf(req, sizeof(req), "GET /ratelimit?key=pin-%d&window=60&limit=0"
				 " HTTP/1.1\r\nHost: t\r\n\r\n", i);
		cr_assert_eq(httpc_send(fd, req, (size_t)n), 0);
		cr_assert_eq(httpc_read(fd, b, &r, IO_MS, &why), 0, "%s", why);
		cr_assert_eq(r.status, 400, "check %d: %d %s", i, r.status, r.body);
		cr_assert_not_null(strstr(r.body, "\\\"default\\\""), "%s", r.body);
		cr_assert_not_null(strstr(r.body, "caller_limit"), "%s", r.body);
	}
	close(fd);
	cr_assert_eq(rate_of("default", "pin-0"), 0, "nothing counted");
	fd = sp_open(test_agent.port);
	for (int i = 1; i <= 5; i++) {
		bool exceeded = spop_check(fd, "default", "haproxy-new", 3, -1, err);
		cr_assert_str_empty(err, "hit %d: %s", i, err);
		cr_assert_eq(exceeded, i > 3, "hit %d", i);
		admitted += !exceeded;
	}
	cr_assert_eq(admitted, 3);
	close(fd);
	free(b);
}

/* cost=1e12 over HTTP locked any key of a namespace without a limit out
 * for a window; a cost up to the limit emptied a key in one request. The
 * default max_cost is now max(1, floor(limit / 2)) for each limit (1
 * for an untrusted caller without one), over HTTP and SPOP alike; a
 * namespace's own max_cost still wins. */
Test(limits, no_cost_empties_a_key, .fini = test_agent_stop, .timeout = 60)
{
	struct httpc_resp r;
	char err[RAWSPOP_STR_MAX];
	int fd;

	test_agent_start1("{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"http_token\": \"" TOKEN "\","
			  " \"namespaces\": [{\"name\": \"default\", \"window_sizes\": [60]},"
			  " {\"name\": \"api\", \"window_sizes\": [60], \"limit\": 10},"
			  " {\"name\": \"bulk\", \"window_sizes\": [60], \"limit\": 10,"
			  " \"max_cost\": 10}]}");
	/* No limit: an HTTP caller's cost is at most 1. */
	expect_400("/ratelimit?key=victim&window=60&cost=999999999999", AUTH, "cost over max_cost");
	expect_400("/ratelimit?key=victim&window=60&cost=2", AUTH, "cost over max_cost");
	cr_assert_eq(rate_of("default", "victim"), 0, "nothing counted");
	fd = sp_open(test_agent.port);
	for (int i = 1; i <= 3; i++) {
		cr_assert_not(spop_check(fd, "default", "victim", 3, -1, err), "hit %d", i);
		cr_assert_str_empty(err);
	}
	/* Limit 10: at most 5, over HTTP and over SPOP. */
	expect_400("/ratelimit?namespace=api&key=a&window=60&cost=6", AUTH, "cost over max_cost");
	cr_assert_not(spop_check(fd, "api", "a", -1, 6, err));
	cr_assert_str_eq(err, "cost over max_cost");
	cr_assert_not(spop_check(fd, "api", "a", 4, 3, err), "a lower limit (4): at most 2");
	cr_assert_str_eq(err, "cost over max_cost");
	cr_assert_eq(rate_of("api", "a"), 0, "nothing counted");
	get("/ratelimit?namespace=api&key=a&window=60&cost=5", AUTH, &r);
	cr_assert_eq(r.status, 200, "%s", r.body);
	cr_assert_not(spop_check(fd, "api", "a", -1, 5, err), "5 + 5: at the limit");
	cr_assert_str_empty(err);
	cr_assert(spop_check(fd, "api", "a", -1, 1, err), "two requests at least to reach it");
	/* max_cost set: for everyone. */
	get("/ratelimit?namespace=bulk&key=b&window=60&cost=10", AUTH, &r);
	cr_assert_eq(r.status, 200, "%s", r.body);
	get("/ratelimit?namespace=bulk&key=b&window=60", AUTH, &r);
	cr_assert_eq(r.status, 429, "%s", r.body);
	close(fd);
}

/* 3,000 requests with limit=0 filled a namespace's share with entries
 * protected from eviction (each over the limit it named): a new key then
 * found no room and passed unlimited. The configured limit (3) decides
 * protection: a new key still gets exactly 3. */
Test(limits, limit_zero_pins_nothing, .fini = test_agent_stop, .timeout = 120)
{
	struct httpc_buf *b = calloc(1, sizeof(*b));
	struct httpc_resp r;
	char req[512];
	const char *why = "";
	int fd, allowed = 0, errors = 0;

	test_agent_start1("{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"http_token\": \"" TOKEN "\","
		   " \"max_keys\": 64, \"namespaces\": ["
		   "{\"name\": \"default\", \"window_sizes\": [60], \"limit\": 3, \"max_keys\": 40},"
		   "{\"name\": \"other\", \"window_sizes\": [60]}]}");
	fd = rawspop_connect(test_agent.http_port, IO_MS);
	cr_assert(fd >= 0);
	for (int i = 0; i < 3000; i++) {
		int n = snprintf(req, sizeof(req), "GET /ratelimit?key=pin-%d&window=60&limit=0"
				 " HTTP/1.1\r\nHost: t\r\n" AUTH "\r\n", i);
		cr_assert_eq(httpc_send(fd, req, (size_t)n), 0);
		cr_assert_eq(httpc_read(fd, b, &r, IO_MS, &why), 0, "%s", why);
		cr_assert_eq(r.status, 429, "request %d: %d %s", i, r.status, r.body);
	}
	close(fd);
	for (int i = 0; i < 10; i++) {
		get("/ratelimit?key=newcomer&window=60", AUTH, &r);
		allowed += r.status == 200;
		errors += strstr(r.body, "error") != NULL;
	}
	cr_assert_eq(errors, 0, "a new key found room");
	cr_assert_eq(allowed, 3);
	free(b);
}

/* ------------------------------------------------------------- admission */

static struct redis_server redis;

static void stop_all(void)
{
	test_agent_stop();
	redis_server_stop(&redis, 5000);
}

/* spoa_ratelimit_admissions_total of ns, all `by` together. */
static long admissions(const char *ns)
{
	struct httpc_buf *b = calloc(1, sizeof(*b));
	char pat[128];
	long sum = 0;
	int fd = rawspop_connect(test_agent.http_port, IO_MS);

	cr_assert(fd >= 0);
	httpc_send(fd, "GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", 53);
	while (httpc_fill(fd, b, b->len + 1, IO_MS))
		;
	close(fd);
	b->data[b->len] = '\0';
	snprintf(pat, sizeof(pat), "spoa_ratelimit_admissions_total{namespace=\"%s\",by=\"", ns);
	for (const char *p = strstr(b->data, pat); p; p = strstr(p + 1, pat)) {
		const char *v = strchr(p, ' ');
		if (v)
			sum += strtol(v + 1, NULL, 10);
	}
	free(b);
	return sum;
}

/* admission=local turned exact cluster admission off for anyone on the
 * HTTP port; now only a namespace with caller_admission honours it. */
Test(admission, http_callers_cannot_switch_exact_off, .fini = stop_all, .timeout = 60)
{
	char json[1024], target[128];
	struct httpc_resp r;

	if (!redis_server_available())
		cr_skip_test("redis-server not installed");
	cr_assert_eq(redis_server_start(&redis, 10000), 0);
	snprintf(json, sizeof(json),
		 "{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"http_token\": \"" TOKEN "\","
		 " \"namespaces\": ["
		 "{\"name\": \"exact\", \"window_sizes\": [60], \"limit\": 1000, \"sync_rate\": 0.1,"
		 " \"strategy\": \"redis\", \"strategy_opts\": {\"port\": %d}},"
		 "{\"name\": \"trusting\", \"window_sizes\": [60], \"limit\": 1000, \"sync_rate\": 0.1,"
		 " \"strategy\": \"redis\", \"strategy_opts\": {\"port\": %d},"
		 " \"caller_admission\": true}]}", redis.port, redis.port);
	test_agent_start1(json);
	for (int i = 0; i < 5; i++) {
		snprintf(target, sizeof(target),
			 "/ratelimit?namespace=exact&key=k%d&window=60&admission=local", i);
		get(target, AUTH, &r);
		cr_assert_eq(r.status, 200, "%s", r.body);
		snprintf(target, sizeof(target),
			 "/ratelimit?namespace=trusting&key=k%d&window=60&admission=local", i);
		get(target, AUTH, &r);
		cr_assert_eq(r.status, 200, "%s", r.body);
	}
	cr_assert_eq(admissions("exact"), 5, "admission=local was ignored: exact admissions");
	cr_assert_eq(admissions("trusting"), 0, "caller_admission honours it");
}

/* ---------------------------------------------------------------- starve */

#define ATTACKERS 60

/* HTTP peers that hold connections: each sends a request (or a header
 * line of a head it never ends, when slow) every period, reads what
 * comes, and reconnects when the agent closes it. */
struct attack {
	int fd[ATTACKERS];
	double last[ATTACKERS];
	int n;
	bool slow;
	double period;
	int reconnects;
};

static void attack_tick(struct attack *a)
{
	double t = now_s();
	char junk[4096];

	for (int i = 0; i < a->n; i++) {
		if (a->fd[i] < 0) {
			a->fd[i] = rawspop_connect(test_agent.http_port, IO_MS);
			a->reconnects++;
			a->last[i] = 0;
			if (a->fd[i] < 0)
				continue;
		}
		struct pollfd pfd = { .fd = a->fd[i], .events = POLLIN };
		if (poll(&pfd, 1, 0) == 1) {
			ssize_t k = recv(a->fd[i], junk, sizeof(junk), MSG_DONTWAIT);
			if (k == 0 || (k < 0 && errno != EAGAIN)) {
				close(a->fd[i]);
				a->fd[i] = -1;
				continue;
			}
		}
		if (t - a->last[i] < a->period)
			continue;
		const char *msg = a->slow ? (a->last[i] == 0 ? "GET /healthz HTTP/1.1\r\nHost: a\r\n"
							     : "X-Slow: 1\r\n")
					  : "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n";
		if (send(a->fd[i], msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT) < 0 &&
		    errno != EAGAIN) {
			close(a->fd[i]);
			a->fd[i] = -1;
			continue;
		}
		a->last[i] = t;
	}
}

static void attack_start(struct attack *a, int n, bool slow, double period)
{
	memset(a, 0, sizeof(*a));
	a->n = n;
	a->slow = slow;
	a->period = period;
	for (int i = 0; i < n; i++)
		a->fd[i] = -1;
	/* A second of attack: every connection made, the agent at its caps. */
	for (double end = now_s() + 1.0; now_s() < end;) {
		attack_tick(a);
		test_sleep_ms(20);
	}
	a->reconnects = 0;
}

static void attack_stop(struct attack *a)
{
	for (int i = 0; i < a->n; i++)
		if (a->fd[i] >= 0)
			close(a->fd[i]);
}

/* Waits for fd to be readable while the attack goes on; the seconds it
 * took, or -1 after IO_MS. */
static double wait_readable(struct attack *a, int fd)
{
	double t0 = now_s();

	while (now_s() - t0 < IO_MS / 1000.0) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		if (poll(&pfd, 1, 5) == 1)
			return now_s() - t0;
		attack_tick(a);
	}
	return -1;
}

/* An SPOP HELLO and a new HTTP check while the attack goes on: both are
 * answered (the failure bound is IO_MS; what they took is printed). */
static void served_under_attack(struct attack *a, const char *what)
{
	struct rawspop_hello_opts o = rawspop_hello_defaults();
	struct httpc_buf *b = calloc(1, sizeof(*b));
	struct httpc_resp r;
	const char *why = "";
	double t0 = now_s();

	for (int round = 0; round < 3; round++) {
		int fd = sp_connect(test_agent.port);
		rawspop_buf_reset(&sp_wb);
		rawspop_hello(&sp_wb, &o);
		t0 = now_s();
		sp_send(fd);
		double took = wait_readable(a, fd);
		cr_assert(took >= 0, "%s: no AGENT-HELLO within %d ms\n%s", what, IO_MS, test_agent_log_tail());
		sp_read(fd, &sp_fr, IO_MS);
		sp_check_agent_hello(&sp_fr, o.max_frame_size);
		cr_log_info("%s: SPOP HELLO answered in %.1f ms", what, (now_s() - t0) * 1000);
		close(fd);

		int h = rawspop_connect(test_agent.http_port, IO_MS);
		cr_assert(h >= 0);
		t0 = now_s();
		static const char check[] = "GET /ratelimit?key=fresh&window=60 HTTP/1.1\r\n"
					    "Host: t\r\n\r\n";
		cr_assert_eq(httpc_send(h, check, sizeof(check) - 1), 0);
		took = wait_readable(a, h);
		cr_assert(took >= 0, "%s: no answer to a new check within %d ms\n%s", what, IO_MS,
			  test_agent_log_tail());
		b->len = 0;
		cr_assert_eq(httpc_read(h, b, &r, IO_MS, &why), 0, "%s", why);
		cr_assert_eq(r.status, 200, "%s", r.body);
		cr_log_info("%s: new HTTP check answered in %.1f ms", what, (now_s() - t0) * 1000);
		close(h);
	}
	free(b);
}

/* Only keys 1c87543 knew: the same file shows the old code failing. */
static const char starve_json[] =
	"{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\","
	" \"max_connections\": 8, \"max_buffer_memory\": 1048576, \"frame_timeout_ms\": 10000,"
	" \"namespaces\": [{\"name\": \"default\", \"window_sizes\": [60]}]}";

/* 60 HTTP peers each sending a request every 200 ms: before, every held
 * connection had a request within the last second, none could give way,
 * and HAProxy's HELLO waited forever. */
Test(starve, busy_http_peers, .fini = test_agent_stop, .timeout = 60)
{
	struct attack *a = calloc(1, sizeof(*a));

	test_agent_start1(starve_json);
	attack_start(a, ATTACKERS, false, 0.2);
	served_under_attack(a, "60 HTTP peers, a request each every 200 ms");
	attack_stop(a);
	free(a);
}

/* 60 HTTP peers that connect and send nothing. */
Test(starve, idle_http_peers, .fini = test_agent_stop, .timeout = 60)
{
	struct attack *a = calloc(1, sizeof(*a));

	test_agent_start1(starve_json);
	attack_start(a, ATTACKERS, false, 3600);
	served_under_attack(a, "60 idle HTTP peers");
	attack_stop(a);
	free(a);
}

/* 8 peers sending a head a line at a time: before, a connection in the
 * middle of a head was never evictable, and 8 of them kept every slot
 * until frame_timeout_ms (10 s here). */
Test(starve, slow_heads, .fini = test_agent_stop, .timeout = 60)
{
	struct attack *a = calloc(1, sizeof(*a));

	test_agent_start1(starve_json);
	attack_start(a, 8, true, 0.3);
	served_under_attack(a, "8 slow heads");
	attack_stop(a);
	free(a);
}

/* A head that never ends is closed frame_timeout_ms after its first byte,
 * whatever it keeps sending; so is a body that trickles. */
Test(starve, a_trickling_request_is_cut, .fini = test_agent_stop, .timeout = 60)
{
	struct httpc_buf *b = calloc(1, sizeof(*b));
	struct httpc_resp r;
	const char *why = "";

	test_agent_start1("{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"frame_timeout_ms\": 300}");
	int fd = rawspop_connect(test_agent.http_port, IO_MS);
	cr_assert(fd >= 0);
	httpc_send(fd, "GET /healthz HTTP/1.1\r\nHost: a\r\n", 33);
	double t0 = now_s();
	bool closed = false;
	while (!closed && now_s() - t0 < IO_MS / 1000.0) {
		test_sleep_ms(50);
		if (send(fd, "X: 1\r\n", 6, MSG_NOSIGNAL) < 0)
			closed = true;
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		if (poll(&pfd, 1, 0) == 1)
			closed = true;
	}
	cr_assert(closed, "a head kept trickling for %d ms", IO_MS);
	cr_assert_eq(httpc_read(fd, b, &r, IO_MS, &why), 0, "%s", why);
	cr_assert_eq(r.status, 408);
	cr_log_info("a trickling head: 408 after %.0f ms", (now_s() - t0) * 1000);
	close(fd);

	/* A body announced and sent a byte at a time. */
	fd = rawspop_connect(test_agent.http_port, IO_MS);
	cr_assert(fd >= 0);
	static const char head[] = "GET /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 4000\r\n\r\n";
	httpc_send(fd, head, sizeof(head) - 1);
	b->len = 0;
	cr_assert_eq(httpc_read(fd, b, &r, IO_MS, &why), 0, "%s", why);
	cr_assert_eq(r.status, 200);
	t0 = now_s();
	closed = false;
	while (!closed && now_s() - t0 < IO_MS / 1000.0) {
		test_sleep_ms(50);
		if (send(fd, "x", 1, MSG_NOSIGNAL) < 0)
			closed = true;
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		char c;
		if (poll(&pfd, 1, 0) == 1 && recv(fd, &c, 1, MSG_DONTWAIT) <= 0)
			closed = true;
	}
	cr_assert(closed, "a body kept trickling for %d ms", IO_MS);
	close(fd);
	free(b);
}

/* ------------------------------------------------------------------ unix */

/* The HTTP front on a unix socket (nginx: proxy_pass http://unix:...),
 * with listen_mode: only the socket's owner and group may connect. */
Test(unix_front, http_listen_on_a_unix_socket, .fini = test_agent_stop, .timeout = 60)
{
	char json[512], path[108];
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct httpc_buf *b = calloc(1, sizeof(*b));
	struct httpc_resp r;
	struct stat st;
	const char *why = "";

	snprintf(path, sizeof(path), "/tmp/test_http_abuse-%d.sock", (int)getpid());
	snprintf(json, sizeof(json),
		 "{\"http_listen\": \"unix:%s\", \"listen_mode\": \"0600\","
		 " \"http_token\": \"" TOKEN "\"}", path);
	test_agent_start1(json);
	cr_assert_eq(stat(path, &st), 0, "%s: %s", path, strerror(errno));
	cr_assert(S_ISSOCK(st.st_mode));
	cr_assert_eq(st.st_mode & 0777, 0600, "mode %o", st.st_mode & 0777);
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	cr_assert(fd >= 0);
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sun, sizeof(sun)), 0, "%s", strerror(errno));
	static const char req[] = "GET /ratelimit?key=u&window=3600 HTTP/1.1\r\nHost: t\r\n" AUTH
				  "Connection: close\r\n\r\n";
	cr_assert_eq(httpc_send(fd, req, sizeof(req) - 1), 0);
	cr_assert_eq(httpc_read(fd, b, &r, IO_MS, &why), 0, "%s", why);
	cr_assert_eq(r.status, 200, "%s", r.body);
	cr_assert_eq(httpc_body_num(&r, "rate"), 1);
	close(fd);
	free(b);
}
