/*
 * test_redis.c - what only the Redis strategy (strategies/redis.c) does,
 * against a real redis-server started per test on a free loopback port
 * (the contract every store keeps is in test_store_contract.c): options,
 * TTLs, the bucketed key layout, token keys, AUTH + SELECT, unix sockets,
 * bad reply shapes, NOSCRIPT (pushes, admissions, heartbeats), reads as
 * HMGET, admissions as one script call, purge without a connection, and
 * failure (a server paused or killed under an instance is in the
 * contract): a server killed in the middle of a 100k batch fails it fast,
 * confirming only the calls that completed, and the strategy reconnects
 * by itself once the server is back; an operation queued behind a big
 * batch that keeps answering is not timed out; a resend of the calls a
 * push did not confirm after a failure counts each once (after a
 * timeout: the contract). The loop is driven with ev_run(EVRUN_ONCE) under a deadline;
 * elapsed times are the loop's clock.
 */
#include <criterion/criterion.h>
#include <ev.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "strategies/strategy.h"
#include "tests/lib/redis_server.h"
#include "tests/lib/storetest.h"

#define OPS (&redis_strategy)
#define START60 1700000040          /* a 60 s window start */
#define NOW60 (START60 + 30)

static struct redis_server srv;

static void setup(void)
{
	memset(&srv, 0, sizeof(srv));
	st_setup(OPS);
	cr_assert(redis_server_available(), "redis-server is not installed");
	cr_assert_eq(redis_server_start(&srv, 5000), 0, "redis-server: %s", srv.err);
}

static void teardown(void)
{
	st_teardown();
	redis_server_stop(&srv, 2000);
}

TestSuite(redis, .init = setup, .fini = teardown, .timeout = 60);

/* An instance on the test's server, connected. */
static struct strategy *mk(int timeout_ms)
{
	return st_create_ready(3.0, "{\"port\": %d, \"timeout_ms\": %d}", srv.port, timeout_ms);
}

static void hash_name(char *out, size_t outlen, const char *prefix, const char *ns,
		      const char *key, size_t key_len, uint32_t size, int64_t start)
{
	snprintf(out, outlen, "%s:{%s:%u}:%u:%lld", prefix, ns, redis_server_bucket(key, key_len), size,
		 (long long)start);
}

/* HGET of a counter straight from Redis, or NAN if missing. */
static double stored(const char *ns, const char *key, size_t key_len, uint32_t size,
		     int64_t start)
{
	char h[256];
	const char *argv[3];
	size_t lens[3];
	redisReply *rep;
	double v = NAN;

	hash_name(h, sizeof(h), "rl", ns, key, key_len, size, start);
	argv[0] = "HGET";
	lens[0] = 4;
	argv[1] = h;
	lens[1] = strlen(h);
	argv[2] = key;
	lens[2] = key_len;
	rep = redis_server_commandargv(&srv, 3, argv, lens);
	cr_assert_not_null(rep, "%s", srv.err);
	if (rep->type == REDIS_REPLY_STRING)
		v = strtod(rep->str, NULL);
	freeReplyObject(rep);
	return v;
}

/* ------------------------------------------------------------------ */
/* Options                                                            */
/* ------------------------------------------------------------------ */

Test(redis, options_errors_name_the_option)
{
	st_expect_bad_opts("{\"port\": \"6379\"}", "port: expected an integer from 1 to 65535");
	st_expect_bad_opts("{\"port\": 0}", "port: expected an integer from 1 to 65535, got 0");
	st_expect_bad_opts("{\"port\": 70000}", "port");
	st_expect_bad_opts("{\"port\": 6379.5}", "port");
	st_expect_bad_opts("{\"host\": 5}", "host: expected a string");
	st_expect_bad_opts("{\"host\": \"redis.example.com\"}", "host: expected an IPv4 or IPv6");
	st_expect_bad_opts("{\"host\": \"\"}", "host");
	st_expect_bad_opts("{\"socket\": \"\"}", "socket");
	st_expect_bad_opts("{\"socket\": \"/tmp/r.sock\", \"port\": 1}", "socket: cannot be combined");
	st_expect_bad_opts("{\"password\": 12}", "password: expected a string");
	st_expect_bad_opts("{\"db\": -1}", "db: expected an integer from 0");
	st_expect_bad_opts("{\"db\": \"1\"}", "db");
	st_expect_bad_opts("{\"timeout_ms\": 0}", "timeout_ms: expected an integer from 1");
	st_expect_bad_opts("{\"timeout_ms\": true}", "timeout_ms");
	st_expect_bad_opts("{\"prefix\": \"\"}", "prefix");
	st_expect_bad_opts("{\"prefix\": \"a{b\"}", "prefix: expected a string without '{'");
	st_expect_bad_opts("{\"bogus\": 1}", "bogus: unknown option");
	st_expect_bad_opts("{\"port\": 1, \"port\": 2}", "strategy_opts: invalid JSON");
	st_expect_bad_opts("[1, 2]", "expected a JSON object");
	st_expect_bad_opts("{\"port\": ", "invalid JSON at line 1");
}

Test(redis, options_valid_and_defaults)
{
	struct strategy *s;
	char err[256] = "";

	s = OPS->create(st_loop, NULL, err, sizeof(err));
	cr_assert_not_null(s, "%s", err);
	OPS->destroy(s);
	s = st_create("{\"host\": \"::1\", \"port\": %d, \"db\": 0, \"timeout_ms\": 250, "
		    "\"prefix\": \"x:y\", \"password\": \"p\"}", srv.port);
	OPS->destroy(s);
	s = st_create("{\"host\": \"localhost\", \"port\": %d}", srv.port);
	cr_assert(st_wait_ready(s, true, 3.0));
	OPS->destroy(s);
}

/* ------------------------------------------------------------------ */
/* Push                                                               */
/* ------------------------------------------------------------------ */

Test(redis, ttl_is_at_least_twice_the_window)
{
	struct strategy *s = mk(1000);
	struct strategy_counter b[] = { ST_C("ns", "k", START60, 60, 1),
					ST_C("ns", "k", 1699999200, 3600, 1),
					ST_C("ns", "k", 1700000070, 1, 1) };
	char h[128];
	static const uint32_t sizes[] = { 60, 3600, 1 };
	static const int64_t starts[] = { START60, 1699999200, 1700000070 };

	st_push_ok(s, b, 3, NULL);
	for (int i = 0; i < 3; i++) {
		long long ttl;

		hash_name(h, sizeof(h), "rl", "ns", "k", 1, sizes[i], starts[i]);
		ttl = redis_server_integer(&srv, "TTL %s", h);
		cr_assert_geq(ttl, 2LL * sizes[i], "TTL of %s is %lld", h, ttl);
		cr_assert_leq(ttl, 2LL * sizes[i] + 60, "TTL of %s is %lld", h, ttl);
	}
	OPS->destroy(s);
}

Test(redis, namespace_spreads_over_many_redis_keys)
{
	struct strategy *s = mk(2000);
	enum { N = 1000 };
	static char keys[N][16];
	static struct strategy_counter b[N];
	long n;

	for (int i = 0; i < N; i++) {
		snprintf(keys[i], sizeof(keys[i]), "10.0.%d.%d", i / 256, i % 256);
		b[i] = ST_C("spread", keys[i], START60, 60, 1);
	}
	st_push_ok(s, b, N, NULL);
	n = redis_server_count_keys(&srv, "rl:{spread:*");
	cr_assert_gt(n, 32, "one namespace landed in %ld Redis keys", n);
	cr_assert_leq(n, 64);
	cr_assert_eq(redis_server_integer(&srv, "DBSIZE"), n);
	OPS->destroy(s);
}

/* ------------------------------------------------------------------ */
/* get_counters, get_window, purge                                    */
/* ------------------------------------------------------------------ */

/* ------------------------------------------------------------------ */
/* Connection options                                                 */
/* ------------------------------------------------------------------ */

static void restart_with(const char *const *extra, const char *password)
{
	redis_server_stop(&srv, 2000);
	memset(&srv, 0, sizeof(srv));
	for (int i = 0; extra[i]; i++)
		srv.extra[i] = extra[i];
	snprintf(srv.password, sizeof(srv.password), "%s", password);
	cr_assert_eq(redis_server_start(&srv, 5000), 0, "%s", srv.err);
}

Test(redis, auth_and_select_db)
{
	static const char *const extra[] = { "--requirepass", "s3cret", NULL };
	struct strategy *s, *bad;
	struct strategy_counter b[] = { ST_C("ns", "k", START60, 60, 1) };
	struct st_res r = { 0 };
	char err[STRATEGY_ERR_MAX] = "";
	redisReply *rep;

	restart_with(extra, "s3cret");
	s = st_create("{\"port\": %d, \"password\": \"s3cret\", \"db\": 3}", srv.port);
	cr_assert(st_wait_ready(s, true, 3.0));
	st_push_ok(s, b, 1, NULL);
	cr_assert_eq(redis_server_integer(&srv, "DBSIZE"), 0, "written to db 0");
	rep = redis_server_command(&srv, "EVAL %s 0",
				   "redis.call('SELECT', 3) return redis.call('DBSIZE')");
	cr_assert(rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1);
	freeReplyObject(rep);

	bad = st_create("{\"port\": %d, \"password\": \"wrong\"}", srv.port);
	st_run_for(0.3);
	cr_assert(!OPS->ready(bad));
	cr_assert_eq(OPS->push_diffs(bad, b, 1, NULL, st_done_cb, &r, err), -1);
	cr_assert(strstr(err, "not connected") && strstr(err, "WRONGPASS"), "%s", err);
	OPS->destroy(bad);
	OPS->destroy(s);
}

Test(redis, unix_socket)
{
	static char path[128];
	static const char *extra[] = { "--unixsocket", path, "--unixsocketperm", "700", NULL };
	struct strategy *s;
	struct strategy_counter b[] = { ST_C("ns", "k", START60, 60, 3) };

	snprintf(path, sizeof(path), "/tmp/rl-test-%d.sock", (int)getpid());
	restart_with(extra, "");
	s = st_create("{\"socket\": \"%s\"}", path);
	cr_assert(st_wait_ready(s, true, 3.0));
	st_push_ok(s, b, 1, NULL);
	cr_assert_eq(b[0].total, 3);
	OPS->destroy(s);
	unlink(path);
}

/* ------------------------------------------------------------------ */
/* Bad replies                                                        */
/* ------------------------------------------------------------------ */

Test(redis, wrong_types_and_garbage_values_fail_cleanly)
{
	struct strategy *s = mk(1000);
	struct strategy_counter b[] = { ST_C("ns", "k", START60, 60, 1) };
	struct strategy_counter g[] = { ST_C("ns", "g", START60, 60, 1) };
	struct strategy_counter q = ST_C("ns", "g", START60, 60, 0);
	struct strategy_counter other[] = { ST_C("other", "k", START60, 60, 1) };
	static const uint32_t sizes[] = { 60 };
	struct st_res r;
	char h[128], err[STRATEGY_ERR_MAX];

	/* the hash of "k" is a string */
	hash_name(h, sizeof(h), "rl", "ns", "k", 1, 60, START60);
	freeReplyObject(redis_server_command(&srv, "SET %s oops", h));
	st_push(s, b, 1, NULL, &r);
	cr_assert_eq(r.status, -1);
	cr_assert(strstr(r.err, "WRONGTYPE"), "%s", r.err);
	cr_assert(!b[0].ok);

	/* a field that is no number */
	hash_name(h, sizeof(h), "rl", "ns", "g", 1, 60, START60);
	freeReplyObject(redis_server_command(&srv, "HSET %s g abc", h));
	st_push(s, g, 1, NULL, &r);
	cr_assert_eq(r.status, -1);
	cr_assert(strstr(r.err, "not a number"), "%s", r.err);
	memset(&r, 0, sizeof(r));
	cr_assert_eq(OPS->get_window(s, &q, st_done_cb, &r, err), 0);
	cr_assert(st_run_until(&r.done, 5.0));
	cr_assert_eq(r.status, -1);
	cr_assert(!q.ok);
	memset(&r, 0, sizeof(r));
	cr_assert_eq(OPS->get_counters(s, "ns", 2, sizes, 1, NOW60, st_rows_cb, &r, err), 0);
	cr_assert(st_run_until(&r.done, 5.0));
	cr_assert_eq(r.status, -1);
	/* the first failure wins: the string hash or the garbage field */
	cr_assert(strstr(r.err, "expected a number") || strstr(r.err, "WRONGTYPE"), "%s", r.err);

	/* still connected and usable */
	cr_assert(OPS->ready(s));
	st_push_ok(s, other, 1, NULL);
	cr_assert_eq(other[0].total, 1);
	OPS->destroy(s);
}

Test(redis, script_flush_falls_back_to_eval)
{
	struct strategy *s = mk(1000);
	struct strategy_counter b[] = { ST_C("ns", "k", START60, 60, 1),
					ST_C("ns", "j", START60, 60, 2) };

	st_push_ok(s, b, 2, NULL);
	freeReplyObject(redis_server_command(&srv, "SCRIPT FLUSH"));
	st_push_ok(s, b, 2, NULL);
	cr_assert_eq(b[0].total, 2);
	cr_assert_eq(b[1].total, 4);
	st_push_ok(s, b, 2, NULL);       /* EVAL cached it again */
	cr_assert_eq(b[1].total, 6);
	OPS->destroy(s);
}

/* ------------------------------------------------------------------ */
/* Failure and recovery                                               */
/* ------------------------------------------------------------------ */

#define TIMEOUT_MS 100
#define SLACK_S 0.2

/* With no server, operations are refused (test_store_contract.c) but
 * purge, which Redis does by expiry, completes. */
Test(redis, no_server_purge_needs_no_connection)
{
	struct strategy *s;
	static const uint32_t sizes[] = { 60 };
	struct st_res r = { 0 };
	char err[STRATEGY_ERR_MAX] = "";
	int port = srv.port;

	redis_server_stop(&srv, 2000);
	s = st_create("{\"port\": %d, \"timeout_ms\": 50}", port);
	st_run_for(0.3);
	cr_assert(!OPS->ready(s));
	cr_assert_eq(OPS->purge(s, "ns", 2, sizes, 1, NOW60, st_done_cb, &r, err), 0, "%s", err);
	cr_assert_eq(r.calls, 0, "callback inside purge");
	cr_assert(st_run_until(&r.done, 1.0));
	cr_assert_eq(r.status, 0);
	OPS->destroy(s);
}

/* A small operation pipelined behind a big batch waits longer than
 * timeout_ms in total, but the connection keeps answering: no timeout. */
Test(redis, queued_behind_a_big_batch_is_not_a_timeout)
{
	struct strategy *s = mk(TIMEOUT_MS);
	enum { N = 200000 };
	static char keys[N][12];
	static struct strategy_counter b[N];
	struct strategy_counter q = ST_C("big", "k1", START60, 60, 0);
	struct st_res ra = { 0 }, rb = { 0 };
	char err[STRATEGY_ERR_MAX] = "";
	double t0;

	for (int i = 0; i < N; i++) {
		snprintf(keys[i], sizeof(keys[i]), "k%d", i);
		b[i] = ST_C("big", keys[i], START60, 60, 1);
	}
	cr_assert_eq(OPS->push_diffs(s, b, N, NULL, st_done_cb, &ra, err), 0, "%s", err);
	t0 = st_now();
	cr_assert_eq(OPS->get_window(s, &q, st_done_cb, &rb, err), 0, "%s", err);
	cr_assert(st_run_until(&rb.done, 20.0));
	cr_assert(st_run_until(&ra.done, 20.0));
	cr_assert_eq(ra.status, 0, "%s", ra.err);
	cr_assert_eq(rb.status, 0, "%s", rb.err);
	cr_assert_eq(q.total, 1);
	if (rb.at - t0 <= TIMEOUT_MS / 1000.0)
		cr_log_info("the batch took only %.3f s: nothing shown", rb.at - t0);
	else
		cr_log_info("get_window waited %.3f s behind the batch", rb.at - t0);
	OPS->destroy(s);
}

/* The server dies in the middle of a big batch: the batch fails fast, the
 * counters reported ok are only those of script calls that completed (not
 * the whole batch), and the instance comes back with the server. */
Test(redis, server_killed_mid_batch)
{
	struct strategy *s = mk(TIMEOUT_MS);
	enum { N = 100000 };
	static char keys[N][12];
	static struct strategy_counter b[N];
	struct st_res r = { 0 };
	char err[STRATEGY_ERR_MAX] = "";
	double t0;
	size_t ok = 0;

	for (int i = 0; i < N; i++) {
		snprintf(keys[i], sizeof(keys[i]), "k%d", i);
		b[i] = ST_C("mid", keys[i], START60, 60, 1);
	}
	cr_assert_eq(OPS->push_diffs(s, b, N, NULL, st_done_cb, &r, err), 0, "%s", err);
	st_run_for(0.02);
	cr_assert_eq(redis_server_kill(&srv), 0);
	t0 = st_now();
	cr_assert(st_run_until(&r.done, 3.0));
	cr_assert_eq(r.status, -1, "the batch finished before the kill");
	cr_assert_leq(r.at - t0, TIMEOUT_MS / 1000.0 + SLACK_S, "failed after %.3f s", r.at - t0);
	for (int i = 0; i < N; i++)
		ok += b[i].ok;
	cr_assert_lt(ok, (size_t)N, "every counter reported applied by a failed push");
	cr_log_info("killed mid-batch: \"%s\" after %.3f s", r.err, r.at - t0);

	cr_assert_eq(redis_server_restart(&srv, 5000), 0, "%s", srv.err);
	cr_assert(st_wait_ready(s, true, 5.0), "no reconnect after restart");
	st_push_ok(s, b, 10, NULL);
	OPS->destroy(s);
}

/* ------------------------------------------------------------------ */
/* Push tokens: a push carrying a token is applied at most once       */
/* ------------------------------------------------------------------ */

/* TTL of one token key (there must be one), or LLONG_MIN. */
static long long token_key_ttl(void)
{
	redisReply *rep = redis_server_command(&srv, "KEYS %s", "rl:{*}:tok:*");
	long long ttl = LLONG_MIN;

	cr_assert_not_null(rep, "%s", srv.err);
	if (rep->type == REDIS_REPLY_ARRAY && rep->elements > 0)
		ttl = redis_server_integer(&srv, "TTL %b", rep->element[0]->str,
					   rep->element[0]->len);
	freeReplyObject(rep);
	return ttl;
}

/* Push tokens in Redis (their contract: test_store_contract.c): one token
 * key per script call that wrote (4 hashes written, the read-only call on
 * dave's hash wrote nothing), remembered STRATEGY_TOKEN_TTL seconds; the
 * same batch again with the token writes none. */
Test(redis, token_keys_one_per_call_that_wrote)
{
	struct strategy *s = mk(1000);
	enum { N = ST_TOKEN_BATCH };
	struct strategy_counter b[N];
	long long ttl;
	int writers = 0;
	char h[N][128];

	st_token_batch(b, START60);
	st_push_ok(s, b, N, "node1-7-0-42");
	st_push_ok(s, b, N, "node1-7-0-42");
	for (int i = 0; i < N; i++)
		hash_name(h[i], sizeof(h[i]), "rl", b[i].ns, b[i].key, b[i].key_len, 60,
			  b[i].start);
	for (int i = 0; i < N; i++) {
		bool seen = false;

		if (b[i].diff == 0)
			continue;
		for (int j = 0; j < i; j++)
			seen |= b[j].diff != 0 && strcmp(h[i], h[j]) == 0;
		writers += !seen;
	}
	cr_assert_eq(redis_server_count_keys(&srv, "rl:{*}:tok:*"), writers, "want %d", writers);
	ttl = token_key_ttl();
	cr_assert(ttl > STRATEGY_TOKEN_TTL - 10 && ttl <= STRATEGY_TOKEN_TTL, "token TTL %lld",
		  ttl);
	OPS->destroy(s);
}

/* A resend carries only the counters of the calls that were not confirmed
 * (whole calls, same order): whichever of the calls the first try applied,
 * the resend adds the others and only them. One hash with 2500 counters
 * is two calls (2000 + 500); 4000 copies of one counter are two calls
 * with the very same contents. */
Test(redis, token_resend_of_unconfirmed_calls_adds_each_once)
{
	struct strategy *s = mk(2000);
	enum { N = 2500, T = 4000 };
	static struct strategy_counter b[N], tw[T];
	double want;

	for (int i = 0; i < N; i++)
		b[i] = ST_C("ns", "hot", START60, 60, 1);
	for (int i = 0; i < T; i++)
		tw[i] = ST_C("ns", "twin", START60, 60, 1);

	/* both calls applied; the first confirmed, the second not: resend it */
	st_push_ok(s, b, N, "a");
	cr_assert_eq(b[N - 1].total, N);
	st_push_ok(s, b + 2000, N - 2000, "a");
	for (int i = 2000; i < N; i++)
		cr_assert_eq(b[i].total, N, "position %d: %g", i, b[i].total);
	/* the second confirmed, the first not (it failed): resend it */
	st_push_ok(s, b, 2000, "a");
	cr_assert_eq(b[0].total, N, "%g", b[0].total);
	st_push_ok(s, b, N, "a");          /* nothing confirmed: resend all */
	cr_assert_eq(stored("ns", "hot", 3, 60, START60), N);

	/* only the second call was applied the first time (the first failed
	 * with an error): the resend of everything adds the first only */
	st_push_ok(s, b + 2000, N - 2000, "b");
	cr_assert_eq(b[N - 1].total, N + 500);
	st_push_ok(s, b, N, "b");
	want = 2 * N;
	cr_assert_eq(stored("ns", "hot", 3, 60, START60), want);
	cr_assert_eq(b[N - 1].total, want);
	cr_assert_eq(b[0].total, N + 500 + 1, "%g", b[0].total);

	/* two calls with identical contents: the first confirmed, the second
	 * applied but not confirmed, then resent */
	st_push_ok(s, tw, T, "c");
	cr_assert_eq(tw[T - 1].total, T);
	st_push_ok(s, tw + 2000, 2000, "c");
	cr_assert_eq(tw[T - 1].total, T);
	st_push_ok(s, tw, T, "c");
	cr_assert_eq(stored("ns", "twin", 4, 60, START60), T);
	/* the first confirmed, the second not applied (its id is the one a
	 * push of 2000 copies has): the resend adds it once */
	st_push_ok(s, tw + 2000, 2000, "d");
	cr_assert_eq(tw[3999].total, T + 2000);
	st_push_ok(s, tw + 2000, 2000, "d");
	cr_assert_eq(tw[3999].total, T + 2000);
	/* a new token: both identical calls add */
	st_push_ok(s, tw, T, "e");
	cr_assert_eq(tw[T - 1].total, 2 * T + 2000);
	cr_assert_eq(stored("ns", "twin", 4, 60, START60), 2 * T + 2000);
	OPS->destroy(s);
}

/* ------------------------------------------------------------------ */
/* Admission (issue 9): the store decides, atomically                 */
/* ------------------------------------------------------------------ */

/* After SCRIPT FLUSH the admission is resent as EVAL. */
Test(redis, admit_script_flush_falls_back_to_eval)
{
	struct strategy *s = mk(1000);
	struct strategy_admit a = st_adm("f", START60, 0, 1, 10, 0, false);

	st_admit_ok(s, &a, 1, NULL);
	freeReplyObject(redis_server_command(&srv, "SCRIPT FLUSH"));
	a = st_adm("f", START60, 0, 1, 10, 0, false);
	st_admit_ok(s, &a, 1, NULL);
	cr_assert(a.admitted);
	cr_assert_eq(a.current, 2);
	OPS->destroy(s);
}

/* ------------------------------------------------------------------ */
/* Heartbeats: the nodes of a namespace                               */
/* ------------------------------------------------------------------ */

/* The nodes of a namespace (the contract: test_store_contract.c) are a
 * hash; a node silent for a day is dropped from it. */
Test(redis, heartbeat_forgets_a_node_silent_for_a_day)
{
	struct strategy *s = mk(1000);
	redisReply *rep;

	cr_assert_eq(st_beat(s, "ns", "a", 1000, 3), 1);
	cr_assert_eq(st_beat(s, "ns", "b", 1001, 3), 2);
	cr_assert_eq(st_beat(s, "ns", "a", 1000 + 90000, 3), 1);
	rep = redis_server_command(&srv, "HLEN rl:{ns:nodes}");
	cr_assert(rep && rep->type == REDIS_REPLY_INTEGER);
	cr_assert_eq(rep->integer, 1, "b dropped");
	freeReplyObject(rep);
	OPS->destroy(s);
}

/* The calls of one command so far (INFO commandstats), 0 if never. */
static long long cmd_calls(const char *cmd)
{
	redisReply *rep = redis_server_command(&srv, "INFO commandstats");
	char name[64];
	long long n = 0;
	const char *p;

	cr_assert(rep && rep->type == REDIS_REPLY_STRING, "INFO commandstats");
	snprintf(name, sizeof(name), "cmdstat_%s:calls=", cmd);
	if ((p = strstr(rep->str, name)))
		n = atoll(p + strlen(name));
	freeReplyObject(rep);
	return n;
}

/* A heartbeat is an EVALSHA of the script loaded at connect (an EVAL of
 * its text costs Redis about three times as much CPU); after SCRIPT FLUSH
 * it is resent as EVAL, once, and counts as before. */
Test(redis, heartbeat_is_evalsha_and_survives_a_script_flush)
{
	struct strategy *s = mk(1000);
	long long eval0 = cmd_calls("eval"), sha0 = cmd_calls("evalsha");

	cr_assert_eq(st_beat(s, "ns", "a", 1000, 3), 1);
	cr_assert_eq(st_beat(s, "ns", "b", 1001, 3), 2);
	cr_assert_eq(cmd_calls("evalsha") - sha0, 2, "two heartbeats, two EVALSHA");
	cr_assert_eq(cmd_calls("eval") - eval0, 0, "no EVAL of the script's text");
	freeReplyObject(redis_server_command(&srv, "SCRIPT FLUSH"));
	cr_assert_eq(st_beat(s, "ns", "a", 1002, 3), 2);
	cr_assert_eq(cmd_calls("eval") - eval0, 1, "NOSCRIPT: one EVAL");
	OPS->destroy(s);
}

/* A call whose diffs are all 0 (an idle key's read, every sync cycle) is
 * a plain HMGET: no script, no token key; a call with one diff is the
 * script. The totals are the same either way. */
Test(redis, reads_are_hmget_not_a_script)
{
	struct strategy *s = mk(1000);
	struct strategy_counter b[ST_TOKEN_BATCH];
	long long sha0, hm0;

	st_token_batch(b, START60);
	st_push_ok(s, b, ST_TOKEN_BATCH, "w:1");
	sha0 = cmd_calls("evalsha");
	hm0 = cmd_calls("hmget");
	for (int i = 0; i < ST_TOKEN_BATCH; i++)
		b[i].diff = 0;
	st_push_ok(s, b, ST_TOKEN_BATCH, "w:2");
	cr_assert_eq(b[0].total, 1);
	cr_assert_eq(b[1].total, 2.5);
	cr_assert_eq(b[4].total, 0, "a field never written reads 0");
	cr_assert_eq(cmd_calls("evalsha"), sha0, "no script for reads");
	cr_assert_geq(cmd_calls("hmget") - hm0, 1, "the reads are HMGET");
	cr_assert(isnan(stored("ns", "dave", 4, 60, START60)), "nothing created");
	OPS->destroy(s);
}

/* The admissions of one admit() are one script call on a single server,
 * whatever their keys, windows and number (up to 256 a call), decided in
 * their order: of 5 admissions of a key with a limit of 3, the first 3
 * are admitted, each answer the count after it; keys of other buckets
 * and windows in the same call. A resend with the token returns the
 * same decisions and adds nothing. */
Test(redis, admissions_of_one_call_are_one_script_call)
{
	enum { N = 300 };
	static struct strategy_admit a[N];
	static char keys[N][16];
	struct strategy *s = mk(1000);
	long long sha0;

	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < 5; i++)
			a[i] = st_adm("five", START60, 0, 1, 3, 0, false);
		a[5] = st_adm("other", START60 - 60, 0, 2, 10, 0, false);
		a[6] = st_adm("other", START60, 0, 2, 10, 0.5, false);
		for (int i = 7; i < N; i++) {
			snprintf(keys[i], sizeof(keys[i]), "k%d", i);
			a[i] = st_adm(keys[i], START60, 0, 1, 100, 0, false);
		}
		sha0 = cmd_calls("evalsha");
		st_admit_ok(s, a, N, "one:1");
		cr_assert_eq(cmd_calls("evalsha") - sha0, 2, "%d admissions: 2 calls (256 a call)",
			     N);
		for (int i = 0; i < 5; i++) {
			cr_assert_eq(a[i].admitted, i < 3, "round %d, admission %d", round, i);
			cr_assert_eq(a[i].current, round == 0 ? (i < 3 ? i + 1 : 3) : 3,
				     "round %d, admission %d: %g", round, i, a[i].current);
		}
		cr_assert(a[5].admitted && a[6].admitted);
		cr_assert_eq(a[6].previous, 2, "the previous window, written by the same call");
		cr_assert_eq(a[6].current, 2);
		for (int i = 7; i < N; i++)
			cr_assert(a[i].admitted && a[i].current == 1, "%s: %g", keys[i], a[i].current);
		cr_assert_eq(stored("ns", "five", 4, 60, START60), 3, "round %d", round);
	}
	OPS->destroy(s);
}
