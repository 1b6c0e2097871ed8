/*
 * test_algo_gcra.c - GCRA (agent/algo_gcra.c, `"algorithm": "gcra"`):
 * bursts and the rate at fixed clocks through the decision layer (the
 * library takes `now`), the answers (remaining, reset, retry_after), the
 * TAT carried from one slot's period to the next, a hit taken back, a
 * read that counts nothing, processes racing on one key; the configuration's checks of `algorithm`
 * and `burst`; and the target of issue 32 once through the SPOP and the
 * HTTP fronts of a real agent.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/algo.h"
#include "agent/config.h"
#include "agent/decide.h"
#include "agent/ns.h"
#include "agent/ratelimit.h"
#include "tests/lib/agenttest.h"
#include "tests/lib/clock.h"
#include "tests/lib/httpc.h"
#include "tests/lib/rawspop.h"
#include "tests/lib/rltest.h"
#include "tests/lib/spoptest.h"

static struct config cfg;
static struct rl *rl;
static struct decide dec;

/* "burst": limit 10 per 1 s, burst 5; "slow": 10 per 60 s, burst 5;
 * "one": 10 per 1 s, burst by default (1); "pair": a gcra and a window
 * limit decided together (two namespaces, one batch); "fast": 1e9 per
 * 1 s, burst 5; "race": 10 per 1 s, burst 50. */
static const char cfg_json[] =
	"{\"max_keys\": 64, \"namespaces\": ["
	"{\"name\": \"burst\", \"window_sizes\": [1], \"algorithm\": \"gcra\", \"limit\": 10,"
	" \"burst\": 5},"
	"{\"name\": \"slow\", \"window_sizes\": [60], \"algorithm\": \"gcra\", \"limit\": 10,"
	" \"burst\": 5},"
	"{\"name\": \"one\", \"window_sizes\": [1], \"algorithm\": \"gcra\", \"limit\": 10},"
	"{\"name\": \"win\", \"window_sizes\": [60], \"limit\": 1, \"count_denied\": false},"
	"{\"name\": \"pair\", \"window_sizes\": [60], \"algorithm\": \"gcra\", \"limit\": 10,"
	" \"burst\": 3, \"count_denied\": false},"
	"{\"name\": \"fast\", \"window_sizes\": [1], \"algorithm\": \"gcra\","
	" \"limit\": 1000000000, \"burst\": 5},"
	"{\"name\": \"race\", \"window_sizes\": [1], \"algorithm\": \"gcra\", \"limit\": 10,"
	" \"burst\": 50}]}";

/* A fixed clock well inside a period of every namespace here (periods of
 * 5, 60, 1 and 180 s start at multiples of their size). */
#define T0 1800000000.0

static void setup(void)
{
	rl = rltest_new("test_algo_gcra", cfg_json, &cfg);
	decide_init(&dec, rl);
}

static void teardown(void)
{
	decide_free(&dec);
	rl_free(rl);
	config_free(&cfg);
}

TestSuite(gcra, .init = setup, .fini = teardown);

/* One hit of key in namespace ns at now, decided. */
static void hit(const char *ns, const char *key, double cost, double now, struct rl_decision *r)
{
	struct rl_request rq = { .ns = ns, .ns_len = strlen(ns), .key = key,
				 .key_len = strlen(key), .cost = cost,
				 .window_type = DECIDE_WT_DEFAULT };

	decide_one(&dec, &rq, now, r);
	cr_assert_null(r->error, "%s", r->error);
}

/* n hits at now: how many were admitted. */
static int burst_of(const char *ns, const char *key, int n, double now)
{
	struct rl_decision r;
	int admitted = 0;

	for (int i = 0; i < n; i++) {
		hit(ns, key, 1, now, &r);
		admitted += !r.exceeded;
	}
	return admitted;
}

/* Issue 32's target on one node: limit 10 per 1 s, burst 5: 20 hits at
 * once admit 5; 0.5 s later (5 hits' worth of rate) 5 more at once admit
 * 5; then the rate alone: one hit each 0.1 s. */
Test(gcra, burst_then_rate)
{
	cr_assert_eq(burst_of("burst", "k", 20, T0), 5);
	cr_assert_eq(burst_of("burst", "k", 5, T0 + 0.5), 5);
	cr_assert_eq(burst_of("burst", "k", 1, T0 + 0.5), 0);
	for (int i = 1; i <= 10; i++)
		cr_assert_eq(burst_of("burst", "k", 3, T0 + 0.5 + 0.1 * i), 1, "step %d", i);
	/* Another key is its own bucket. */
	cr_assert_eq(burst_of("burst", "other", 20, T0), 5);
}

/* Burst 1 by default: hits 0.1 s apart all pass, 0.05 s apart every
 * other one. */
Test(gcra, default_burst_is_one)
{
	for (int i = 0; i < 10; i++)
		cr_assert_eq(burst_of("one", "a", 1, T0 + 0.1 * i), 1, "hit %d", i);
	int admitted = 0;
	for (int i = 0; i < 20; i++)
		admitted += burst_of("one", "b", 1, T0 + 0.05 * i);
	cr_assert_eq(admitted, 10);
}

/* limit 10 per 60 s (a hit's cost: 6 s), burst 5: remaining counts down
 * the burst, reset is when the bucket is empty again, a denied hit's
 * retry_after is when it would fit, rate the hits in the bucket. */
Test(gcra, answers)
{
	struct rl_decision r;

	for (int i = 1; i <= 5; i++) {
		hit("slow", "k", 1, T0, &r);
		cr_assert(!r.exceeded, "hit %d", i);
		cr_assert_eq(r.remaining, 5 - i, "hit %d", i);
		cr_assert_eq(r.rate, i, "hit %d", i);
		cr_assert_eq(r.reset, 6 * i, "hit %d", i);
		cr_assert_eq(r.limit, 10);
	}
	hit("slow", "k", 1, T0, &r);
	cr_assert(r.exceeded);
	cr_assert_eq(r.remaining, 0);
	cr_assert_eq(r.retry_after, 6);
	cr_assert_eq(r.reset, 30, "a denied hit moves nothing");
	/* 13 s later two hits' worth came back (and 1 s of the third). */
	hit("slow", "k", 0, T0 + 13, &r);
	cr_assert(!r.exceeded);
	cr_assert_eq(r.remaining, 2);
	cr_assert_eq(r.reset, 17);
	hit("slow", "k", 3, T0 + 13, &r);
	cr_assert(r.exceeded, "3 do not fit where 2 and 1/6 do");
	cr_assert_eq(r.retry_after, 5);
	hit("slow", "k", 2, T0 + 13, &r);
	cr_assert(!r.exceeded);
	cr_assert_eq(r.remaining, 0);
}

/* While the store is away (RL_ADMIT_DEGRADED, 3 nodes) a hit costs the
 * node's share, 3 x T = 18 s of "slow" (10 per 60 s, burst 5), and the
 * node's copy runs at most max(5, 3) x 18 / 3 = 30 s ahead: one hit at
 * once, the second denied, and it fits 6 s later (18 + 18 - 6 <= 30),
 * not 2 s later as the whole rate's T would say; the bucket is empty
 * after 18 s. The answers are built from the hit's view as decide.c's
 * finish() does. */
Test(gcra, degraded_times_are_of_the_nodes_share)
{
	int ns = rl_namespace_index(rl, "slow", 4);
	struct rl_result res;
	struct algo_answer a;

	cr_assert_geq(ns, 0);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(rl_hit_degraded(rl, ns, "away", 4, 60, 1, 0, T0, 10, false, 3, &res), 0);
		cr_assert_eq(res.counted, i == 0, "hit %d", i);
	}
	struct algo_view v = { .current = res.current, .previous = res.previous,
			       .weight = res.weight, .cost = 1, .cap = res.cap, .limit = 10,
			       .window = 60, .has_limit = true, .counted = res.counted };
	algo_of(NS_ALGO_GCRA)->answer(&v, T0, &a);
	cr_assert(a.exceeded);
	cr_assert_eq(a.retry_after, 6, "retry_after %lld: of the node's share",
		     (long long)a.retry_after);
	cr_assert_eq(a.reset, 18, "reset %lld", (long long)a.reset);
	/* And 6 s later it does fit. */
	cr_assert_eq(rl_hit_degraded(rl, ns, "away", 4, 60, 1, 0, T0 + 6, 10, false, 3, &res), 0);
	cr_assert(res.counted);
}

/* At the highest rates (1e9 a second: a hit's time far below the clock's
 * resolution) the burst still holds: 20 at once admit 5, not 20. */
Test(gcra, burst_holds_at_the_highest_rates)
{
	struct rl_request rq = { .ns = "fast", .ns_len = 4, .key = "f", .key_len = 1, .cost = 1,
				 .window_type = DECIDE_WT_DEFAULT };
	struct rl_decision r;
	int admitted = 0;

	for (int i = 0; i < 20; i++) {
		decide_one(&dec, &rq, T0, &r);
		cr_assert_null(r.error, "%s", r.error);
		admitted += !r.exceeded;
	}
	cr_assert_eq(admitted, 5);
}

/* A read (cost 0) answers the bucket without counting: a key never seen
 * has its whole burst. */
Test(gcra, read_counts_nothing)
{
	struct rl_decision r;

	for (int i = 0; i < 3; i++) {
		hit("burst", "r", 0, T0, &r);
		cr_assert(!r.exceeded);
		cr_assert_eq(r.remaining, 5);
		cr_assert_eq(r.rate, 0);
	}
	cr_assert_eq(burst_of("burst", "r", 20, T0), 5);
}

/* The slots of "burst" last window x burst = 5 s: a key's TAT carries
 * from one slot's period to the next (a burst just before the boundary
 * still holds just after it), and a key idle for longer starts afresh. */
Test(gcra, tat_carries_over_the_slot_period)
{
	double edge = T0 + 5;         /* T0 is a multiple of 5: the next period */

	cr_assert_eq(burst_of("burst", "e", 20, edge - 0.05), 5);
	cr_assert_eq(burst_of("burst", "e", 3, edge), 0, "0.05 s: not a hit's worth");
	cr_assert_eq(burst_of("burst", "e", 3, edge + 0.05), 1);
	cr_assert_eq(burst_of("burst", "e", 20, edge + 20), 5);
}

/* A decision of two limits: the window limit denies, so the gcra hit of
 * the same decision is taken back (count_denied false) and its burst is
 * whole again. */
Test(gcra, taken_back_when_another_limit_denies)
{
	struct rl_request rq[2] = {
		{ .ns = "win", .ns_len = 3, .key = "t", .key_len = 1, .cost = 1,
		  .window_type = DECIDE_WT_DEFAULT },
		{ .ns = "pair", .ns_len = 4, .key = "t", .key_len = 1, .cost = 1,
		  .window_type = DECIDE_WT_DEFAULT },
	};
	struct rl_decision parts[4], r;

	decide_batch(&dec, rq, 2, T0, parts, 4);     /* the window's one hit */
	for (int i = 0; i < 4; i++) {
		size_t np = decide_batch(&dec, rq, 2, T0, parts, 4);
		cr_assert_eq(np, 2);
		cr_assert(parts[0].exceeded, "the window denies");
	}
	hit("pair", "t", 0, T0, &r);
	cr_assert_eq(r.remaining, 2, "only the first decision's gcra hit stands");
}

/* Lock-free in the shared table: 4 processes, 100 hits each of one key at
 * the same moment, admit the burst (50) between them, not one more. */
Test(gcra, racing_processes_admit_the_burst_once)
{
	int ns = rl_namespace_index(rl, "race", 4);
	pid_t pid[4];
	int total = 0;

	cr_assert_geq(ns, 0);
	for (int p = 0; p < 4; p++) {
		pid[p] = fork();
		cr_assert_geq(pid[p], 0);
		if (pid[p] == 0) {
			struct rl_result res;
			int admitted = 0;
			for (int i = 0; i < 100; i++) {
				if (rl_hit(rl, ns, "k", 1, 1, 1, RL_WEIGHT_AUTO, T0, 10, true, &res) < 0)
					_exit(255);
				admitted += res.counted;
			}
			_exit(admitted);
		}
	}
	for (int p = 0; p < 4; p++) {
		int st;
		cr_assert_eq(waitpid(pid[p], &st, 0), pid[p]);
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 255, "child %d: %d", p, st);
		total += WEXITSTATUS(st);
	}
	cr_assert_eq(total, 50);
}

/* ---- the configuration ---- */

static void expect_refused(const char *ns_json, const char *field, const char *what)
{
	char path[] = "/tmp/test_algo_gcra_XXXXXX";
	int fd = mkstemp(path);
	struct config c;
	struct config_err err;
	char json[1024];

	cr_assert(fd >= 0);
	snprintf(json, sizeof(json), "{\"namespaces\": [%s]}", ns_json);
	cr_assert_eq(write(fd, json, strlen(json)), (ssize_t)strlen(json));
	close(fd);
	config_defaults(&c);
	int rc = config_load(&c, path, &err);
	unlink(path);
	cr_assert_eq(rc, -1, "%s: accepted", ns_json);
	cr_assert_not_null(strstr(err.path, field), "%s: path %s, %s", ns_json, err.path, err.msg);
	cr_assert_not_null(strstr(err.msg, what), "%s: %s", ns_json, err.msg);
	config_free(&c);
}

Test(gcra_config, keys_checked)
{
	expect_refused("{\"window_sizes\": [1], \"algorithm\": \"leaky\"}", "algorithm",
		       "\"gcra\"");
	expect_refused("{\"window_sizes\": [1], \"algorithm\": \"token_bucket\", \"limit\": 1}",
		       "algorithm", "\"gcra\": \"burst\" its capacity");
	expect_refused("{\"window_sizes\": [1], \"limit\": 5, \"burst\": 3}", "burst",
		       "only with");
	expect_refused("{\"window_sizes\": [1], \"algorithm\": \"gcra\"}", "limit",
		       "needs a limit");
	expect_refused("{\"window_sizes\": [1], \"algorithm\": \"gcra\", \"limit\": 5, "
		       "\"burst\": 0}", "burst", "");
	expect_refused("{\"window_sizes\": [86400], \"algorithm\": \"gcra\", \"limit\": 5, "
		       "\"burst\": 400}", "burst", "365 days");
	/* With a store the store moves the TAT (test_cluster_gcra.c): at
	 * sync_rate 0 or under admission "local" nothing would. */
	expect_refused("{\"window_sizes\": [1], \"algorithm\": \"gcra\", \"limit\": 5, "
		       "\"sync_rate\": 0, \"strategy\": \"redis\"}", "sync_rate",
		       "decides every hit there");
	expect_refused("{\"window_sizes\": [1], \"algorithm\": \"gcra\", \"limit\": 5, "
		       "\"sync_rate\": 1, \"strategy\": \"redis\", \"admission\": \"local\"}",
		       "admission", "no sum");
	expect_refused("{\"window_sizes\": [1], \"algorithm\": \"gcra\", \"limit\": 5, "
		       "\"delay_max_ms\": 100}", "delay_max_ms", "gcra");
}

Test(gcra_config, parsed, .init = setup, .fini = teardown)
{
	int ns = rl_namespace_index(rl, "burst", 5);
	const struct ns_def *d = rl_namespace_def(rl, ns);

	cr_assert_not_null(d);
	cr_assert_eq(d->algorithm, NS_ALGO_GCRA);
	cr_assert_eq(ns_burst(d), 5);
	d = rl_namespace_def(rl, rl_namespace_index(rl, "one", 3));
	cr_assert_eq(ns_burst(d), 1);
	d = rl_namespace_def(rl, rl_namespace_index(rl, "win", 3));
	cr_assert_eq(d->algorithm, NS_ALGO_WINDOW);
}

/* ---- through the fronts of a real agent ---- */

#define IO_MS 5000

static const char front_json[] =
	"{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"http_admin_token\": \"adm1n-t0ken\","
	" \"namespaces\": ["
	"{\"name\": \"default\", \"window_sizes\": [60]},"
	"{\"name\": \"burst\", \"window_sizes\": [1], \"algorithm\": \"gcra\", \"limit\": 10,"
	" \"burst\": 5},"
	"{\"name\": \"slow\", \"window_sizes\": [60], \"algorithm\": \"gcra\", \"limit\": 10,"
	" \"burst\": 5}]}";

/* One request on a fresh HTTP connection to the test agent. */
static void http_once(const char *head, struct httpc_resp *r)
{
	static struct httpc_buf rb;
	const char *why = "";
	int fd = rawspop_connect(test_agent.http_port, IO_MS);

	cr_assert(fd >= 0);
	rb.len = 0;
	cr_assert_eq(rawspop_send(fd, head, strlen(head)), 0);
	cr_assert_eq(httpc_read(fd, &rb, r, IO_MS, &why), 0, "%s", why);
	close(fd);
}

/* n NOTIFYs of key sent at once, then their ACKs: how many were admitted. */
static int spop_burst(int fd, const char *key, int n)
{
	static struct rawspop_actions acts;
	struct sp_msg m = { .key = key, .ns = "burst" };
	uint64_t sid[32];
	int admitted = 0;

	for (int i = 0; i < n; i++)
		cr_assert_eq(sp_try_send(fd, &m, &sid[i]), 0);
	for (int i = 0; i < n; i++) {
		cr_assert_eq(sp_try_ack(fd, 0, IO_MS, &acts), 0);
		sp_expect_no_error(&acts);
		admitted += !sp_var_bool(&acts, "exceeded");
	}
	return admitted;
}

/* 20 hits at once admit 5 (one more if the 20 took over 0.1 s on a busy
 * machine); 0.5 s later 5 more at once admit 5 (4 if the first burst
 * admitted 6). */
Test(gcra_fronts, spop, .fini = test_agent_stop, .timeout = 60)
{
	char key[48];

	test_agent_start1(front_json);
	int fd = sp_agent_conn();
	sp_key(key, sizeof(key), "gcra");
	int first = spop_burst(fd, key, 20);
	cr_assert(first >= 5 && first <= 6, "20 at once admitted %d", first);
	test_sleep_ms(500);
	int second = spop_burst(fd, key, 5);
	cr_assert(second >= 4 && second <= 5, "5 more 0.5 s later admitted %d", second);
	close(fd);
}

Test(gcra_fronts, http, .fini = test_agent_stop, .timeout = 60)
{
	static struct httpc_buf rb;
	struct httpc_resp r;
	char req[256], key[48];
	const char *why = "";
	int admitted[2] = { 0, 0 }, n[2] = { 20, 5 };

	test_agent_start1(front_json);
	sp_key(key, sizeof(key), "gcra");
	for (int round = 0; round < 2; round++) {
		int fd = rawspop_connect(test_agent.http_port, IO_MS);
		cr_assert(fd >= 0);
		rb.len = 0;
		/* Pipelined: one write, the answers in order. */
		char all[8192] = "";
		for (int i = 0; i < n[round]; i++) {
			snprintf(req, sizeof(req), "GET /ratelimit?namespace=burst&key=%s HTTP/1.1\r\n"
				 "Host: t\r\n\r\n", key);
			strcat(all, req);
		}
		cr_assert_eq(rawspop_send(fd, all, strlen(all)), 0);
		for (int i = 0; i < n[round]; i++) {
			cr_assert_eq(httpc_read(fd, &rb, &r, IO_MS, &why), 0, "%s", why);
			cr_assert(r.status == 200 || r.status == 429, "%d %s", r.status, r.body);
			admitted[round] += r.status == 200;
			if (r.status == 429)
				cr_assert_eq(httpc_body_num(&r, "retry_after"), 1, "%s", r.body);
		}
		close(fd);
		if (round == 0)
			test_sleep_ms(500);
	}
	cr_assert(admitted[0] >= 5 && admitted[0] <= 6, "20 at once admitted %d", admitted[0]);
	cr_assert(admitted[1] >= 4 && admitted[1] <= 5, "5 more 0.5 s later admitted %d",
		  admitted[1]);
}

/* GET /keys shows a gcra key's bucket: the hits in it (a little less than
 * 3, 6 s a hit), what it may still send at once, when it is empty. */
Test(gcra_fronts, admin_keys, .fini = test_agent_stop, .timeout = 60)
{
	struct httpc_resp r;
	char key[48], req[256];

	test_agent_start1(front_json);
	sp_key(key, sizeof(key), "gcra");
	snprintf(req, sizeof(req), "GET /ratelimit?namespace=slow&key=%s HTTP/1.1\r\nHost: t\r\n"
		 "Connection: close\r\n\r\n", key);
	for (int i = 0; i < 3; i++) {
		http_once(req, &r);
		cr_assert_eq(r.status, 200, "%d %s", r.status, r.body);
	}
	snprintf(req, sizeof(req), "GET /keys?namespace=slow&key=%s HTTP/1.1\r\nHost: t\r\n"
		 "Authorization: Bearer adm1n-t0ken\r\nConnection: close\r\n\r\n", key);
	http_once(req, &r);
	cr_assert_eq(r.status, 200, "%d %s", r.status, r.body);
	cr_assert_eq(httpc_body_num(&r, "remaining"), 2, "%s", r.body);
	cr_assert_eq(httpc_body_num(&r, "limit"), 10, "%s", r.body);
	long long reset = httpc_body_num(&r, "reset");
	cr_assert(reset >= 12 && reset <= 18, "%s", r.body);
	cr_assert_not_null(strstr(r.body, "\"count\":2."), "%s", r.body);
}
