/*
 * test_grpc.c - the gRPC front (agent/grpc_front.c, grpc_call.c;
 * docs/ENVOY.md, "The gRPC front") through real clients: Debian's
 * python3-grpcio (tests/lib/grpc_client.py), nghttp2-client's nghttp and
 * h2load, frames written by hand where a moment must be exact
 * (tests/lib/h2raw.py): decisions, several descriptors as one, hits_addend
 * 0, overrides, health, errors, deadlines, GOAWAY on reload and stop,
 * 1,000 streams on one connection, the counters shared with the HTTP
 * front and labelled by front. Hostile peers: tests/test_grpc_abuse.c.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/lib/agenttest.h"
#include "tests/lib/clock.h"
#include "tests/lib/grpctest.h"
#include "tests/lib/httpc.h"

#define RLS_PATH "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
#define ONE(k, v) "{\"domain\":\"edge\",\"descriptors\":[{\"entries\":[{\"key\":\"" k "\",\"value\":\"" v "\"}]}]}"

static void start(void)
{
	gt_start("");
	/* The hour's windows: what a test counts stays in one. */
	test_window_room(3600, 120000);
}

static const char *rls(const char *json)
{
	return gt_client("rls '%s'", json);
}

Test(decide, a_limit_counts_then_denies, .init = start, .fini = gt_stop, .timeout = 120)
{
	const char *r;

	for (int i = 0; i < 3; i++) {
		r = rls(ONE("ip", "10.0.0.1"));
		cr_assert(strstr(r, "OK {\"overall_code\":\"OK\""), "call %d: %s", i, r);
		cr_assert(strstr(r, "\"requests_per_unit\":3,\"unit\":\"HOUR\""), "%s", r);
		if (i < 2)
			cr_assert_eq(gt_num(r, "\"limit_remaining\":"), 2 - i, "%s", r);
		cr_assert(strstr(r, "\"key\":\"ratelimit-policy\""), "%s", r);
	}
	r = rls(ONE("ip", "10.0.0.1"));
	cr_assert(strstr(r, "\"overall_code\":\"OVER_LIMIT\""), "%s", r);
	cr_assert(strstr(r, "\"raw_body\""), "a problem document: %s", r);
	cr_assert(strstr(r, "\"key\":\"retry-after\""), "%s", r);
	/* Another key of the same descriptor counts on its own. */
	r = rls(ONE("ip", "10.0.0.2"));
	cr_assert_eq(gt_num(r, "\"limit_remaining\":"), 2, "%s", r);
}

/* Two descriptors are one decision: the one over its limit denies, and
 * (count_denied false) the other is not charged. */
Test(decide, several_descriptors_are_one_decision, .init = start, .fini = gt_stop, .timeout = 120)
{
	const char *both = "{\"domain\":\"edge\",\"descriptors\":["
			   "{\"entries\":[{\"key\":\"ip\",\"value\":\"10.1.0.1\"}]},"
			   "{\"entries\":[{\"key\":\"user\",\"value\":\"ann\"}]}]}";
	const char *r;

	for (int i = 0; i < 3; i++)
		cr_assert(strstr(rls(ONE("ip", "10.1.0.1")), "\"overall_code\":\"OK\""));
	r = rls(both);
	cr_assert(strstr(r, "\"overall_code\":\"OVER_LIMIT\""), "%s", r);
	cr_assert(strstr(r, "\"statuses\":[{\"code\":\"OVER_LIMIT\""), "in order: %s", r);
	/* user ann: nothing charged by the denied request. */
	r = rls(ONE("user", "ann"));
	cr_assert_eq(gt_num(r, "\"limit_remaining\":"), 4, "%s", r);
}

Test(decide, hits_addend_zero_checks_only, .init = start, .fini = gt_stop, .timeout = 120)
{
	const char *peek = "{\"domain\":\"edge\",\"descriptors\":[{\"entries\":[{\"key\":\"user\","
			   "\"value\":\"bob\"}],\"hits_addend\":0}]}";
	const char *two = "{\"domain\":\"edge\",\"hits_addend\":2,\"descriptors\":[{\"entries\":"
			  "[{\"key\":\"user\",\"value\":\"bob\"}]}]}";
	const char *r;

	r = rls(two);
	cr_assert_eq(gt_num(r, "\"limit_remaining\":"), 3, "%s", r);
	for (int i = 0; i < 3; i++) {
		r = rls(peek);
		cr_assert_eq(gt_num(r, "\"limit_remaining\":"), 3, "a check counts nothing: %s", r);
	}
	r = rls(ONE("user", "bob"));
	cr_assert_eq(gt_num(r, "\"limit_remaining\":"), 2, "%s", r);
}

/* The descriptor's limit override lowers the tree's (caller_limit lower). */
Test(decide, an_override_lowers_the_limit, .init = start, .fini = gt_stop, .timeout = 120)
{
	const char *low = "{\"domain\":\"edge\",\"descriptors\":[{\"entries\":[{\"key\":\"user\","
			  "\"value\":\"cy\"}],\"limit\":{\"requests_per_unit\":1,\"unit\":\"HOUR\"}}]}";
	const char *r;

	r = rls(low);
	cr_assert(strstr(r, "\"overall_code\":\"OK\""), "%s", r);
	cr_assert(strstr(r, "\"requests_per_unit\":1"), "%s", r);
	r = rls(low);
	cr_assert(strstr(r, "\"overall_code\":\"OVER_LIMIT\""), "%s", r);
}

/* A hit over gRPC is a hit of the same key for every front: the HTTP
 * front reads what gRPC counted; hits_total is labelled by front. */
Test(decide, the_counters_are_every_fronts, .init = start, .fini = gt_stop, .timeout = 120)
{
	struct httpc_resp resp;
	const char *why;

	for (int i = 0; i < 2; i++)
		cr_assert(strstr(rls(ONE("ip", "10.2.0.1")), "\"overall_code\":\"OK\""));
	cr_assert_eq(httpc_get(gt_http_port, "/ratelimit?namespace=edge&key=ip%3D10.2.0.1"
			       "&window=3600&cost=0", NULL, &resp, 10000, &why), 0, "%s", why);
	cr_assert_eq(resp.status, 200, "%s", resp.body);
	cr_assert_eq(httpc_body_num(&resp, "rate"), 2, "%s", resp.body);
	const char *m = gt_run("curl -s http://127.0.0.1:%d/metrics | grep -E "
			       "'^spoa_ratelimit_(hits_total\\{namespace=\"edge\",front=\"grpc\"|"
			       "connections\\{front=\"grpc\")'", gt_http_port);
	cr_assert(strstr(m, "front=\"grpc\"} 2"), "%s", m);
	cr_assert(strstr(m, "connections{front=\"grpc\"}"), "%s", m);
}

/* The start-up warning of a namespace whose windows have no limit (for
 * HTTP checks that name one) is not said of a domain's namespace, whose
 * limits are its YAML's; it is of a plain one. */
Test(config, no_limit_warning_not_for_a_domain, .fini = gt_stop, .timeout = 60)
{
	static const char yaml[] = "domain: edge\n"
				   "descriptors:\n"
				   "  - {key: ip, rate_limit: {unit: hour, requests_per_unit: 3}}\n";

	gt_start_yaml(yaml, "\"namespaces\": [{\"name\": \"edge\"},"
			    " {\"name\": \"plain\", \"window_sizes\": [60]}]");
	/* At least once: a start retried on another port (the first one
	 * taken meanwhile) writes the same log again. */
	cr_assert_geq(agentproc_log_lines(&test_agent, "\"plain\" configures no limit", NULL), 1,
		      "%s", test_agent_log_tail());
	cr_assert_eq(agentproc_log_lines(&test_agent, "\"edge\" configures no limit", NULL), 0,
		     "%s", test_agent_log_tail());
}

Test(health, serving_and_unknown_services, .init = start, .fini = gt_stop, .timeout = 60)
{
	cr_assert_str_eq(gt_client("health"), "OK {\"status\":\"SERVING\"}\n");
	cr_assert_str_eq(gt_client("health envoy.service.ratelimit.v3.RateLimitService"),
			 "OK {\"status\":\"SERVING\"}\n");
	cr_assert(strstr(gt_client("health some.Other"), "ERR NOT_FOUND"));
}

Test(errors, what_is_not_a_good_call, .init = start, .fini = gt_stop, .timeout = 60)
{
	const char *r;

	r = gt_client("raw /no.Such/Method 00");
	cr_assert(strstr(r, "ERR UNIMPLEMENTED"), "%s", r);
	r = gt_client("raw /grpc.health.v1.Health/Watch 00");
	cr_assert(strstr(r, "ERR UNIMPLEMENTED"), "%s", r);
	r = gt_client("raw " RLS_PATH " 0aff");
	cr_assert(strstr(r, "ERR INTERNAL"), "bytes protobuf cannot read: %s", r);
	r = gt_client("rls '{\"domain\":\"edge\"}'");
	cr_assert(strstr(r, "ERR UNKNOWN rate limit descriptor list must not be empty"), "%s", r);
	/* A message over 64 KiB. */
	r = gt_client("raw " RLS_PATH " @100000");
	cr_assert(strstr(r, "ERR RESOURCE_EXHAUSTED"), "%s", r);
	/* Not gRPC: 415, 405 (nghttp shows the status). */
	r = gt_run("nghttp -v -H 'content-type: text/plain' -d /dev/null "
		   "http://127.0.0.1:%d" RLS_PATH " 2>&1 | grep -c ':status: 415'", gt_grpc_port);
	cr_assert_eq(atoi(r), 1, "%s", r);
	r = gt_run("nghttp -v -H 'content-type: application/grpc' "
		   "http://127.0.0.1:%d" RLS_PATH " 2>&1 | grep -c ':status: 405'", gt_grpc_port);
	cr_assert_eq(atoi(r), 1, "%s", r);
	cr_assert(strstr(gt_client("health"), "SERVING"), "the connection's calls go on");
}

/* grpc-timeout passes while the decision is held (delay_max_ms, until the
 * 10 s window ends): DEADLINE_EXCEEDED from the agent, at once (nghttp
 * shows the trailers the agent sent; grpcio would end the call itself). */
Test(deadline, a_held_decision_past_its_timeout, .init = start, .fini = gt_stop, .timeout = 120)
{
	const char *body = "/tmp/grpctest-slow.bin", *r;
	int64_t t0;

	gt_body(body, ONE("slow", "s1"));
	test_window_room(10, 5000);
	r = rls(ONE("slow", "s1"));
	cr_assert(strstr(r, "\"overall_code\":\"OK\""), "%s", r);
	t0 = test_now_ms();
	r = gt_run("nghttp -v -H ':method: POST' -H 'content-type: application/grpc' "
		   "-H 'te: trailers' -H 'grpc-timeout: 300m' -d %s http://127.0.0.1:%d" RLS_PATH
		   " 2>&1 | grep -E 'grpc-(status|message)'", body, gt_grpc_port);
	cr_assert(strstr(r, "grpc-status: 4"), "%s", r);
	cr_assert(strstr(r, "grpc-message: deadline exceeded"), "%s", r);
	/* Far bound: long before the window ends and the decision comes. */
	cr_assert_lt(test_now_ms() - t0, 9000);
	remove(body);
}

/* A reload's GOAWAY: the calls go on, on new connections, none lost. */
Test(goaway, on_reload_the_calls_go_on, .init = start, .fini = gt_stop, .timeout = 120)
{
	const char *r = gt_client("reload 150 %d", (int)test_agent.pid);

	cr_assert(strstr(r, "ok=150 over=0 err=0"), "%s", r);
	/* The first connection, then one after each of the two reloads. */
	cr_assert_geq(agentproc_log_lines(&test_agent, "grpc connection", "accepted"), 3,
		      "%s", test_agent_log_tail());
}

/* SIGTERM: GOAWAY naming the call already open, which is answered
 * (NOT_SERVING: the worker stops). */
Test(goaway, on_stop_open_calls_finish, .init = start, .fini = gt_stop, .timeout = 120)
{
	const char *r = gt_raw("drain %d", (int)test_agent.pid);

	cr_assert(strstr(r, "goaway=0 last=1 data=00000000020802"), "%s", r);
	cr_assert_eq(agentproc_wait(&test_agent, 20000), 0, "the agent stops");
}

/* 1,000 streams at once on one connection (h2load), every call answered;
 * hits_total counts each. */
Test(streams, a_thousand_on_one_connection, .init = start, .fini = gt_stop, .timeout = 180)
{
	const char *body = "/tmp/grpctest-h2load.bin", *r;

	gt_body(body, "{\"domain\":\"edge\",\"descriptors\":[{\"entries\":[{\"key\":\"user\","
		      "\"value\":\"load\"}],\"hits_addend\":0}]}");
	r = gt_run("h2load -n 5000 -c 1 -m 1000 -d %s -H 'content-type: application/grpc' "
		   "-H 'te: trailers' http://127.0.0.1:%d" RLS_PATH " 2>&1", body, gt_grpc_port);
	cr_assert(strstr(r, "5000 succeeded, 0 failed, 0 errored"), "%s", r);
	cr_assert(strstr(r, "status codes: 5000 2xx"), "%s", r);
	r = gt_run("curl -s http://127.0.0.1:%d/metrics | grep "
		   "'^spoa_ratelimit_hits_total{namespace=\"edge\",front=\"grpc\"'", gt_http_port);
	cr_assert(strstr(r, "} 5000"), "%s", r);
	remove(body);
}
