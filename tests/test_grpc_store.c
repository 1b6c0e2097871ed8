/*
 * test_grpc_store.c - the gRPC front with its store away (docs/ENVOY.md,
 * "Deadlines"; issue 31: "with Redis stopped, every ShouldRateLimit
 * answered within its deadline, none waits for the store's timeout"): a
 * domain synced to a real redis-server (tests/lib/redis_server.h) at
 * sync_rate 0, and one with exact admission, the server SIGSTOPped (its
 * connections stay open, nothing answers), calls whose grpc-timeout
 * (200 ms) is far below the store's timeout_ms (10 s), written by
 * tests/lib/h2raw.py (a client that never ends a call itself): each is
 * answered OK or OVER_LIMIT on the node's share of the limit, none
 * DEADLINE_EXCEEDED; once the store answers again, it holds each admitted
 * hit once.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/lib/agenttest.h"
#include "tests/lib/clock.h"
#include "tests/lib/grpctest.h"
#include "tests/lib/httpc.h"
#include "tests/lib/redis_server.h"

#define ADMIN "Authorization: Bearer adm1n-t0ken\r\n"
#define ONE(v) "{\"domain\":\"edge\",\"descriptors\":[{\"entries\":[{\"key\":\"ip\",\"value\":\"" v "\"}]}]}"

static const char yaml[] =
	"domain: edge\n"
	"descriptors:\n"
	"  - {key: ip, rate_limit: {unit: hour, requests_per_unit: 5}}\n";

static struct redis_server redis;

/* The agent with "edge" synced to the test's redis-server as ns_opts say
 * (sync_rate, admission), timeout_ms 10 s, the admin token for GET /keys. */
static void start(const char *ns_opts)
{
	char members[1024];

	if (!redis_server_available())
		cr_skip_test("no redis-server");
	cr_assert(redis_server_start(&redis, 10000) == 0, "%s", redis.err);
	snprintf(members, sizeof(members),
		 "\"http_admin_token\": \"adm1n-t0ken\", \"namespaces\": [{\"name\": \"edge\","
		 " \"count_denied\": false, %s, \"strategy\": \"redis\", \"strategy_opts\":"
		 " {\"host\": \"127.0.0.1\", \"port\": %d, \"timeout_ms\": 10000}}]",
		 ns_opts, redis.port);
	gt_start_yaml(yaml, members);
	/* The hour's window: what a test counts stays in one. */
	test_window_room(3600, 120000);
}

static void stop(void)
{
	if (redis.paused)
		redis_server_resume(&redis);
	gt_stop();
	redis_server_stop(&redis, 5000);
}

/* The store's count of ip=V once this node has pushed all it counted
 * (GET /keys: unpushed 0, the store read); -1 when it never is (30 s). */
static long long store_count(const char *v)
{
	char target[256];
	struct httpc_resp r;
	const char *why, *st;

	snprintf(target, sizeof(target), "/keys?namespace=edge&key=ip%%3D%s", v);
	for (int i = 0; i < 300; i++) {
		cr_assert_eq(httpc_get(gt_http_port, target, ADMIN, &r, 10000, &why), 0, "%s", why);
		cr_assert_eq(r.status, 200, "%s", r.body);
		st = strstr(r.body, "\"store\":{\"current\":");
		if (st && httpc_body_num(&r, "unpushed") == 0)
			return strtoll(st + strlen("\"store\":{\"current\":"), NULL, 10);
		usleep(100000);
	}
	return -1;
}

/* Eight calls with the store paused: the limit's five OK, three
 * OVER_LIMIT, each before its 200 ms; the store then holds five. */
static void paused_calls_answered(void)
{
	const char *r, *hex;
	int64_t t0;

	/* Once through the store: connected. */
	r = gt_client("rls '%s'", ONE("10.0.0.1"));
	cr_assert(strstr(r, "\"overall_code\":\"OK\""), "%s", r);
	hex = gt_run(GT_PY " tests/lib/rls_pb.py encode request '%s'", ONE("10.0.0.9"));
	char msg[1024];
	snprintf(msg, sizeof(msg), "%.*s", (int)strspn(hex, "0123456789abcdef"), hex);
	cr_assert(redis_server_pause(&redis) == 0, "SIGSTOP redis-server");
	t0 = test_now_ms();
	r = gt_raw("calls 8 200m %s", msg);
	cr_log_info("8 calls of 200 ms, the store paused: %lld ms", (long long)(test_now_ms() - t0));
	cr_assert(strstr(r, "ok=5 over=3 err=0"), "%s\n%s", r, test_agent_log_tail());
	/* Far bound: none waited for the store's 10 s. */
	cr_assert_lt(test_now_ms() - t0, 8 * 5000);
	cr_assert(redis_server_resume(&redis) == 0);
	cr_assert_eq(store_count("10.0.0.9"), 5, "%s", test_agent_log_tail());
	cr_assert_eq(store_count("10.0.0.1"), 1);
}

Test(store_paused, sync_rate_0_answers_before_the_deadline, .fini = stop, .timeout = 180)
{
	start("\"sync_rate\": 0");
	paused_calls_answered();
}

Test(store_paused, exact_admission_answers_before_the_deadline, .fini = stop, .timeout = 180)
{
	start("\"sync_rate\": 0.5, \"admission\": \"exact\"");
	paused_calls_answered();
}
