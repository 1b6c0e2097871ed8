/*
 * test_redis.c - the Redis strategy (strategies/redis.c) against a real
 * redis-server started per test on a free loopback port: options, push
 * totals (integral, decimal, read-only, duplicates, 10k batch), two nodes
 * summing up, TTLs, binary and long keys, the bucketed key layout,
 * get_counters / get_window / purge, AUTH + SELECT, unix sockets, bad
 * reply shapes, NOSCRIPT, destroy with operations pending (also from
 * inside a callback), and failure: a stopped (SIGSTOP) or killed server -
 * also in the middle of a 100k batch - makes operations fail within
 * timeout_ms + slack, ready() goes false, and the strategy reconnects by
 * itself once the server is back; an operation queued behind a big batch
 * that keeps answering is not timed out. The loop is driven with
 * ev_run(EVRUN_ONCE) under a deadline; elapsed times are the loop's clock.
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

#define OPS (&redis_strategy)
#define START60 1700000040          /* a 60 s window start */
#define NOW60 (START60 + 30)

static struct redis_server srv;
static struct ev_loop *loop;
static ev_timer tick;

static void tick_cb(struct ev_loop *l, ev_timer *w, int revents)
{
	(void)l;
	(void)w;
	(void)revents;
}

static void setup_loop(void)
{
	loop = ev_loop_new(EVFLAG_AUTO);
	cr_assert_not_null(loop);
	/* keeps ev_run(EVRUN_ONCE) from sleeping past a deadline */
	ev_timer_init(&tick, tick_cb, 0.01, 0.01);
	ev_timer_start(loop, &tick);
	ev_unref(loop);
}

static void setup(void)
{
	/* hiredis writes with write(2): a dead server means SIGPIPE, which
	 * the agent ignores too (agent/master.c) */
	signal(SIGPIPE, SIG_IGN);
	memset(&srv, 0, sizeof(srv));
	cr_assert(redis_server_available(), "redis-server is not installed");
	cr_assert_eq(redis_server_start(&srv, 5000), 0, "redis-server: %s", srv.err);
	setup_loop();
}

static void teardown(void)
{
	if (loop) {
		ev_ref(loop);
		ev_timer_stop(loop, &tick);
		ev_loop_destroy(loop);
		loop = NULL;
	}
	redis_server_stop(&srv, 2000);
}

TestSuite(redis, .init = setup, .fini = teardown, .timeout = 60);

static double now_s(void)
{
	ev_now_update(loop);
	return ev_now(loop);
}

/* Runs the loop until *flag or the deadline; returns *flag. */
static bool run_until(const bool *flag, double secs)
{
	double end = now_s() + secs;

	while (!*flag && now_s() < end)
		ev_run(loop, EVRUN_ONCE);
	return *flag;
}

static void run_for(double secs)
{
	double end = now_s() + secs;

	while (now_s() < end)
		ev_run(loop, EVRUN_ONCE);
}

static bool wait_ready(struct strategy *s, bool want, double secs)
{
	double end = now_s() + secs;

	while (OPS->ready(s) != want && now_s() < end)
		ev_run(loop, EVRUN_ONCE);
	return OPS->ready(s) == want;
}

/* ------------------------------------------------------------------ */
/* Results                                                            */
/* ------------------------------------------------------------------ */

struct row_copy {
	char key[64];
	size_t key_len;
	int64_t start;
	uint32_t size;
	double count;
};

struct res {
	bool done;
	int calls;
	int status;
	char err[STRATEGY_ERR_MAX];
	double at;                  /* loop time of the callback */
	struct row_copy rows[64];
	size_t nrows;
	/* for destroy_from_callback */
	struct strategy *destroy_me;
};

static void done_cb(void *arg, int status, const char *errstr)
{
	struct res *r = arg;

	r->calls++;
	r->done = true;
	r->status = status;
	r->at = now_s();
	snprintf(r->err, sizeof(r->err), "%s", errstr ? errstr : "");
	if (r->destroy_me) {
		struct strategy *s = r->destroy_me;

		r->destroy_me = NULL;
		OPS->destroy(s);
	}
}

static void rows_cb(void *arg, int status, const char *errstr, const struct strategy_row *rows,
		    size_t n)
{
	struct res *r = arg;

	r->calls++;
	r->done = true;
	r->status = status;
	snprintf(r->err, sizeof(r->err), "%s", errstr ? errstr : "");
	r->nrows = n;
	for (size_t i = 0; i < n && i < 64; i++) {
		size_t len = rows[i].key_len;

		/* long keys: only their length is kept */
		memcpy(r->rows[i].key, rows[i].key, len < sizeof(r->rows[i].key) ? len : 0);
		r->rows[i].key_len = rows[i].key_len;
		r->rows[i].start = rows[i].start;
		r->rows[i].size = rows[i].size;
		r->rows[i].count = rows[i].count;
	}
}

static struct strategy *mk_opts(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Creates an instance from printf-formatted options; @PORT@-free. */
static struct strategy *mk_opts(const char *fmt, ...)
{
	char json[512], err[256] = "";
	struct strategy *s;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(json, sizeof(json), fmt, ap);
	va_end(ap);
	s = OPS->create(loop, json, err, sizeof(err));
	cr_assert_not_null(s, "create(%s): %s", json, err);
	return s;
}

/* An instance on the test's server, connected. */
static struct strategy *mk(int timeout_ms)
{
	struct strategy *s = mk_opts("{\"port\": %d, \"timeout_ms\": %d}", srv.port, timeout_ms);

	cr_assert(wait_ready(s, true, 3.0), "not ready after 3 s");
	return s;
}

static struct strategy_counter ctr(const char *ns, const char *key, size_t key_len, int64_t start,
				   uint32_t size, double diff)
{
	return (struct strategy_counter){ .ns = ns, .ns_len = strlen(ns), .key = key,
					  .key_len = key_len, .start = start, .size = size,
					  .diff = diff, .total = NAN, .ok = false };
}

#define C(ns, key, start, size, diff) ctr((ns), (key), strlen(key), (start), (size), (diff))

/* push_diffs with a token (NULL = none), checked to start without calling
 * back, run to completion. */
static void push_tok(struct strategy *s, struct strategy_counter *b, size_t n, const char *token,
		     struct res *r)
{
	char err[STRATEGY_ERR_MAX] = "";

	memset(r, 0, sizeof(*r));
	cr_assert_eq(OPS->push_diffs(s, b, n, token, done_cb, r, err), 0, "push_diffs: %s", err);
	cr_assert_eq(r->calls, 0, "callback ran inside push_diffs");
	cr_assert(run_until(&r->done, 5.0), "push did not complete");
	cr_assert_eq(r->calls, 1);
}

static void push(struct strategy *s, struct strategy_counter *b, size_t n, struct res *r)
{
	push_tok(s, b, n, NULL, r);
}

static void push_tok_ok(struct strategy *s, struct strategy_counter *b, size_t n,
			const char *token)
{
	struct res r;

	push_tok(s, b, n, token, &r);
	cr_assert_eq(r.status, 0, "push failed: %s", r.err);
	for (size_t i = 0; i < n; i++)
		cr_assert(b[i].ok, "counter %zu not ok", i);
}

static void push_ok(struct strategy *s, struct strategy_counter *b, size_t n)
{
	push_tok_ok(s, b, n, NULL);
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

static void expect_bad_opts(const char *json, const char *needle)
{
	char err[256] = "";
	struct strategy *s = OPS->create(loop, json, err, sizeof(err));

	cr_assert_null(s, "create(%s) accepted", json);
	cr_assert(strstr(err, needle) != NULL, "create(%s): error \"%s\" lacks \"%s\"", json, err,
		  needle);
}

Test(redis, options_errors_name_the_option)
{
	expect_bad_opts("{\"port\": \"6379\"}", "port: expected an integer from 1 to 65535");
	expect_bad_opts("{\"port\": 0}", "port: expected an integer from 1 to 65535, got 0");
	expect_bad_opts("{\"port\": 70000}", "port");
	expect_bad_opts("{\"port\": 6379.5}", "port");
	expect_bad_opts("{\"host\": 5}", "host: expected a string");
	expect_bad_opts("{\"host\": \"redis.example.com\"}", "host: expected an IPv4 or IPv6");
	expect_bad_opts("{\"host\": \"\"}", "host");
	expect_bad_opts("{\"socket\": \"\"}", "socket");
	expect_bad_opts("{\"socket\": \"/tmp/r.sock\", \"port\": 1}", "socket: cannot be combined");
	expect_bad_opts("{\"password\": 12}", "password: expected a string");
	expect_bad_opts("{\"db\": -1}", "db: expected an integer from 0");
	expect_bad_opts("{\"db\": \"1\"}", "db");
	expect_bad_opts("{\"timeout_ms\": 0}", "timeout_ms: expected an integer from 1");
	expect_bad_opts("{\"timeout_ms\": true}", "timeout_ms");
	expect_bad_opts("{\"prefix\": \"\"}", "prefix");
	expect_bad_opts("{\"prefix\": \"a{b\"}", "prefix: expected a string without '{'");
	expect_bad_opts("{\"bogus\": 1}", "bogus: unknown option");
	expect_bad_opts("{\"port\": 1, \"port\": 2}", "strategy_opts: invalid JSON");
	expect_bad_opts("[1, 2]", "expected a JSON object");
	expect_bad_opts("{\"port\": ", "invalid JSON at line 1");
}

Test(redis, options_valid_and_defaults)
{
	struct strategy *s;
	char err[256] = "";

	s = OPS->create(loop, NULL, err, sizeof(err));
	cr_assert_not_null(s, "%s", err);
	OPS->destroy(s);
	s = mk_opts("{\"host\": \"::1\", \"port\": %d, \"db\": 0, \"timeout_ms\": 250, "
		    "\"prefix\": \"x:y\", \"password\": \"p\"}", srv.port);
	OPS->destroy(s);
	s = mk_opts("{\"host\": \"localhost\", \"port\": %d}", srv.port);
	cr_assert(wait_ready(s, true, 3.0));
	OPS->destroy(s);
}

/* ------------------------------------------------------------------ */
/* Push                                                               */
/* ------------------------------------------------------------------ */

Test(redis, push_new_counters_returns_diffs)
{
	struct strategy *s = mk(1000);
	struct strategy_counter b[] = {
		C("ns", "alice", START60, 60, 1),
		C("ns", "bob", START60, 60, 2),
		C("ns", "carol", START60, 60, 3.5),
		C("ns", "dave", START60, 60, -4),
	};

	push_ok(s, b, 4);
	cr_assert_float_eq(b[0].total, 1, 0);
	cr_assert_float_eq(b[1].total, 2, 0);
	cr_assert_float_eq(b[2].total, 3.5, 0);
	cr_assert_float_eq(b[3].total, -4, 0);
	cr_assert_float_eq(stored("ns", "bob", 3, 60, START60), 2, 0);
	cr_assert_float_eq(stored("ns", "carol", 5, 60, START60), 3.5, 0);
	OPS->destroy(s);
}

Test(redis, second_push_adds_decimals)
{
	struct strategy *s = mk(1000);
	struct strategy_counter a[] = { C("ns", "k", START60, 60, 0.5),
					C("ns", "x", START60, 60, 0.1) };
	struct strategy_counter b[] = { C("ns", "k", START60, 60, 0.25),
					C("ns", "x", START60, 60, 0.2) };
	struct strategy_counter c[] = { C("ns", "k", START60, 60, 7) };

	push_ok(s, a, 2);
	push_ok(s, b, 2);
	cr_assert_eq(b[0].total, 0.75);
	cr_assert_eq(b[1].total, 0.1 + 0.2, "%.17g", b[1].total);   /* exact, in double */
	push_ok(s, c, 1);
	cr_assert_eq(c[0].total, 7.75);
	cr_assert_eq(stored("ns", "k", 1, 60, START60), 7.75);
	OPS->destroy(s);
}

Test(redis, zero_diff_reads_without_creating)
{
	struct strategy *s = mk(1000);
	struct strategy_counter r0[] = { C("ns", "ghost", START60, 60, 0) };
	struct strategy_counter w[] = { C("ns", "k1", START60, 60, 5) };
	struct strategy_counter r1[] = { C("ns", "k1", START60, 60, 0),
					 C("ns", "k2", START60, 60, 0) };

	push_ok(s, r0, 1);
	cr_assert_eq(r0[0].total, 0);
	cr_assert_eq(redis_server_integer(&srv, "DBSIZE"), 0, "a read created a key");

	push_ok(s, w, 1);
	cr_assert_eq(redis_server_integer(&srv, "DBSIZE"), 1);
	push_ok(s, r1, 2);
	cr_assert_eq(r1[0].total, 5);
	cr_assert_eq(r1[1].total, 0);
	cr_assert(isnan(stored("ns", "k2", 2, 60, START60)), "k2 was created by a read");
	cr_assert_eq(redis_server_integer(&srv, "DBSIZE"), 1);
	OPS->destroy(s);
}

Test(redis, two_nodes_sum_up)
{
	struct strategy *n1 = mk(1000), *n2 = mk(1000);
	struct strategy_counter a[] = { C("ns", "k", START60, 60, 1),
					C("ns", "j", START60, 60, 10) };
	struct strategy_counter b[] = { C("ns", "k", START60, 60, 2),
					C("ns", "j", START60, 60, 20) };
	struct res ra = { 0 }, rb = { 0 };
	char err[STRATEGY_ERR_MAX];

	/* both in flight at once */
	cr_assert_eq(OPS->push_diffs(n1, a, 2, NULL, done_cb, &ra, err), 0, "%s", err);
	cr_assert_eq(OPS->push_diffs(n2, b, 2, NULL, done_cb, &rb, err), 0, "%s", err);
	cr_assert(run_until(&ra.done, 5.0) && run_until(&rb.done, 5.0));
	cr_assert_eq(ra.status, 0, "%s", ra.err);
	cr_assert_eq(rb.status, 0, "%s", rb.err);
	cr_assert_eq(fmax(a[0].total, b[0].total), 3);
	cr_assert(fmin(a[0].total, b[0].total) == 1 || fmin(a[0].total, b[0].total) == 2);
	cr_assert_eq(fmax(a[1].total, b[1].total), 30);

	/* each node reads the cluster total */
	{
		struct strategy_counter q1 = C("ns", "k", START60, 60, 0);
		struct strategy_counter q2 = C("ns", "j", START60, 60, 0);
		struct res r1 = { 0 }, r2 = { 0 };

		cr_assert_eq(OPS->get_window(n1, &q1, done_cb, &r1, err), 0, "%s", err);
		cr_assert_eq(OPS->get_window(n2, &q2, done_cb, &r2, err), 0, "%s", err);
		cr_assert(run_until(&r1.done, 5.0) && run_until(&r2.done, 5.0));
		cr_assert(q1.ok && q2.ok);
		cr_assert_eq(q1.total, 3);
		cr_assert_eq(q2.total, 30);
	}
	OPS->destroy(n1);
	OPS->destroy(n2);
}

Test(redis, ttl_is_at_least_twice_the_window)
{
	struct strategy *s = mk(1000);
	struct strategy_counter b[] = { C("ns", "k", START60, 60, 1),
					C("ns", "k", 1699999200, 3600, 1),
					C("ns", "k", 1700000070, 1, 1) };
	char h[128];
	static const uint32_t sizes[] = { 60, 3600, 1 };
	static const int64_t starts[] = { START60, 1699999200, 1700000070 };

	push_ok(s, b, 3);
	for (int i = 0; i < 3; i++) {
		long long ttl;

		hash_name(h, sizeof(h), "rl", "ns", "k", 1, sizes[i], starts[i]);
		ttl = redis_server_integer(&srv, "TTL %s", h);
		cr_assert_geq(ttl, 2LL * sizes[i], "TTL of %s is %lld", h, ttl);
		cr_assert_leq(ttl, 2LL * sizes[i] + 60, "TTL of %s is %lld", h, ttl);
	}
	OPS->destroy(s);
}

Test(redis, binary_and_long_keys)
{
	struct strategy *s = mk(1000);
	static char longkey[10000];
	static const char odd[] = "{}\r\n\xff:*";
	struct strategy_counter b[6];
	struct strategy_counter again[6];
	static const uint32_t sizes[] = { 60 };
	struct res r = { 0 };
	char err[STRATEGY_ERR_MAX];

	memset(longkey, 'x', sizeof(longkey));
	b[0] = ctr("ns", "a\0b", 3, START60, 60, 1);
	b[1] = ctr("ns", "a\0c", 3, START60, 60, 2);
	b[2] = ctr("ns", "a", 1, START60, 60, 4);
	b[3] = ctr("ns", "", 0, START60, 60, 8);
	b[4] = ctr("ns", longkey, sizeof(longkey), START60, 60, 16);
	b[5] = ctr("ns", odd, sizeof(odd) - 1, START60, 60, 32);
	push_ok(s, b, 6);
	memcpy(again, b, sizeof(b));
	push_ok(s, again, 6);
	for (int i = 0; i < 6; i++)
		cr_assert_eq(again[i].total, 2 * b[i].diff, "key %d: %g", i, again[i].total);
	cr_assert_eq(stored("ns", "a\0b", 3, 60, START60), 2);
	cr_assert_eq(stored("ns", longkey, sizeof(longkey), 60, START60), 32);

	/* get_counters hands back the exact bytes (long key excluded: the
	 * test copies at most 64 bytes per key, so it is checked by length) */
	cr_assert_eq(OPS->get_counters(s, "ns", 2, sizes, 1, NOW60, rows_cb, &r, err), 0, "%s",
		     err);
	cr_assert(run_until(&r.done, 5.0));
	cr_assert_eq(r.status, 0, "%s", r.err);
	cr_assert_eq(r.nrows, 6);
	for (int i = 0; i < 6; i++) {
		bool found = false;

		for (size_t j = 0; j < r.nrows; j++) {
			if (r.rows[j].key_len != b[i].key_len)
				continue;
			if (i != 4 && memcmp(r.rows[j].key, b[i].key, b[i].key_len) != 0)
				continue;
			cr_assert_eq(r.rows[j].count, 2 * b[i].diff);
			found = true;
		}
		cr_assert(found, "key %d not returned", i);
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
		b[i] = C("spread", keys[i], START60, 60, 1);
	}
	push_ok(s, b, N);
	n = redis_server_count_keys(&srv, "rl:{spread:*");
	cr_assert_gt(n, 32, "one namespace landed in %ld Redis keys", n);
	cr_assert_leq(n, 64);
	cr_assert_eq(redis_server_integer(&srv, "DBSIZE"), n);
	OPS->destroy(s);
}

/* A counter present twice in one batch adds up in order; 2500 copies in
 * one hash also span two script calls (REDIS_CHUNK_MAX). */
Test(redis, duplicates_in_one_batch_add_up)
{
	struct strategy *s = mk(2000);
	enum { N = 2500 };
	static struct strategy_counter b[N];

	for (int i = 0; i < N; i++)
		b[i] = C("ns", "hot", START60, 60, i % 5 == 4 ? 0 : 1);
	push_ok(s, b, N);
	for (int i = 0, want = 0; i < N; i++) {
		want += i % 5 == 4 ? 0 : 1;
		cr_assert_eq(b[i].total, want, "position %d: %g, want %d", i, b[i].total, want);
	}
	cr_assert_eq(stored("ns", "hot", 3, 60, START60), N - N / 5);
	OPS->destroy(s);
}

Test(redis, batch_of_10k_counters)
{
	struct strategy *s = mk(2000);
	enum { N = 10000 };
	static char keys[N][24];
	static struct strategy_counter b[N];

	for (int i = 0; i < N; i++) {
		snprintf(keys[i], sizeof(keys[i]), "user-%d", i);
		b[i] = C(i % 3 ? "api" : "web", keys[i], i % 2 ? START60 : START60 - 60, 60,
			 (i % 10) * 0.5 + 1);
	}
	push_ok(s, b, N);
	for (int i = 0; i < N; i++)
		cr_assert_eq(b[i].total, b[i].diff, "counter %d: %g", i, b[i].total);
	push_ok(s, b, N);
	for (int i = 0; i < N; i++)
		cr_assert_eq(b[i].total, 2 * b[i].diff, "counter %d: %g", i, b[i].total);
	for (int i = 0; i < N; i += 997)
		cr_assert_eq(stored(b[i].ns, keys[i], strlen(keys[i]), 60, b[i].start),
			     2 * b[i].diff);
	OPS->destroy(s);
}

/* ------------------------------------------------------------------ */
/* get_counters, get_window, purge                                    */
/* ------------------------------------------------------------------ */

static const struct row_copy *find_row(const struct res *r, const char *key, int64_t start,
				       uint32_t size)
{
	for (size_t i = 0; i < r->nrows; i++)
		if (r->rows[i].key_len == strlen(key) &&
		    memcmp(r->rows[i].key, key, strlen(key)) == 0 && r->rows[i].start == start &&
		    r->rows[i].size == size)
			return &r->rows[i];
	return NULL;
}

Test(redis, get_counters_current_and_previous_windows_only)
{
	struct strategy *s = mk(1000);
	const int64_t cur60 = START60, prev60 = START60 - 60, old60 = START60 - 120;
	const int64_t cur3600 = 1699999200, prev3600 = cur3600 - 3600, old3600 = cur3600 - 7200;
	struct strategy_counter b[] = {
		C("a", "k1", cur60, 60, 1),
		C("a", "k1", prev60, 60, 2),
		C("a", "k1", old60, 60, 4),          /* too old */
		C("a", "k2", cur3600, 3600, 8),
		C("a", "k2", prev3600, 3600, 16),
		C("a", "k3", old3600, 3600, 32),     /* too old */
		C("b", "k1", cur60, 60, 64),         /* other namespace */
		C("a", "k1", 1700000070, 10, 128),   /* size not asked */
		C("a", "k4", cur60, 60, 0.5),
	};
	static const uint32_t sizes[] = { 60, 3600 };
	struct res r = { 0 };
	char err[STRATEGY_ERR_MAX];
	const struct row_copy *row;

	push_ok(s, b, sizeof(b) / sizeof(b[0]));
	cr_assert_eq(OPS->get_counters(s, "a", 1, sizes, 2, NOW60, rows_cb, &r, err), 0, "%s", err);
	cr_assert_eq(r.calls, 0, "callback inside get_counters");
	cr_assert(run_until(&r.done, 5.0));
	cr_assert_eq(r.status, 0, "%s", r.err);
	cr_assert_eq(r.nrows, 5, "%zu rows", r.nrows);
	cr_assert((row = find_row(&r, "k1", cur60, 60)) && row->count == 1);
	cr_assert((row = find_row(&r, "k1", prev60, 60)) && row->count == 2);
	cr_assert((row = find_row(&r, "k2", cur3600, 3600)) && row->count == 8);
	cr_assert((row = find_row(&r, "k2", prev3600, 3600)) && row->count == 16);
	cr_assert((row = find_row(&r, "k4", cur60, 60)) && row->count == 0.5);

	/* an empty namespace: one call back with no rows */
	memset(&r, 0, sizeof(r));
	cr_assert_eq(OPS->get_counters(s, "none", 4, sizes, 2, NOW60, rows_cb, &r, err), 0, "%s",
		     err);
	cr_assert(run_until(&r.done, 5.0));
	cr_assert_eq(r.status, 0);
	cr_assert_eq(r.nrows, 0);
	cr_assert_eq(r.calls, 1);
	OPS->destroy(s);
}

Test(redis, get_window_reads_one_counter)
{
	struct strategy *s = mk(1000);
	struct strategy_counter b[] = { C("ns", "k", START60, 60, 2.5) };
	struct strategy_counter q = C("ns", "k", START60, 60, 0);
	struct strategy_counter miss = C("ns", "nope", START60, 60, 0);
	struct res r = { 0 };
	char err[STRATEGY_ERR_MAX];

	push_ok(s, b, 1);
	cr_assert_eq(OPS->get_window(s, &q, done_cb, &r, err), 0, "%s", err);
	cr_assert_eq(r.calls, 0);
	cr_assert(run_until(&r.done, 5.0));
	cr_assert_eq(r.status, 0, "%s", r.err);
	cr_assert(q.ok);
	cr_assert_eq(q.total, 2.5);

	memset(&r, 0, sizeof(r));
	cr_assert_eq(OPS->get_window(s, &miss, done_cb, &r, err), 0, "%s", err);
	cr_assert(run_until(&r.done, 5.0));
	cr_assert_eq(r.status, 0, "%s", r.err);
	cr_assert(miss.ok);
	cr_assert_eq(miss.total, 0);
	cr_assert_eq(redis_server_integer(&srv, "DBSIZE"), 1);
	OPS->destroy(s);
}

Test(redis, purge_completes_with_zero_later)
{
	struct strategy *s = mk(1000);
	static const uint32_t sizes[] = { 60 };
	struct res r = { 0 };
	char err[STRATEGY_ERR_MAX];

	cr_assert_eq(OPS->purge(s, "ns", 2, sizes, 1, NOW60, done_cb, &r, err), 0, "%s", err);
	cr_assert_eq(r.calls, 0, "callback inside purge");
	cr_assert(run_until(&r.done, 2.0));
	cr_assert_eq(r.status, 0);
	cr_assert_eq(r.calls, 1);
	OPS->destroy(s);
}

Test(redis, concurrent_operations_all_complete)
{
	struct strategy *s = mk(1000);
	struct strategy_counter b[] = { C("ns", "k", START60, 60, 1) };
	struct strategy_counter q = C("ns", "k", START60, 60, 0);
	static const uint32_t sizes[] = { 60 };
	struct res r1 = { 0 }, r2 = { 0 }, r3 = { 0 }, r4 = { 0 };
	char err[STRATEGY_ERR_MAX];

	cr_assert_eq(OPS->push_diffs(s, b, 1, NULL, done_cb, &r1, err), 0);
	cr_assert_eq(OPS->get_window(s, &q, done_cb, &r2, err), 0);
	cr_assert_eq(OPS->get_counters(s, "ns", 2, sizes, 1, NOW60, rows_cb, &r3, err), 0);
	cr_assert_eq(OPS->push_diffs(s, b, 0, NULL, done_cb, &r4, err), 0);      /* empty batch */
	cr_assert(run_until(&r1.done, 5) && run_until(&r2.done, 5) && run_until(&r3.done, 5) &&
		  run_until(&r4.done, 5));
	cr_assert(r1.status == 0 && r2.status == 0 && r3.status == 0 && r4.status == 0);
	cr_assert_eq(b[0].total, 1);
	cr_assert_eq(q.total, 1);       /* pipelined after the push */
	cr_assert_eq(r3.nrows, 1);
	OPS->destroy(s);
}

Test(redis, invalid_arguments_are_refused_at_once)
{
	struct strategy *s = mk(1000);
	struct strategy_counter b[] = { C("ns", "k", START60, 0, 1) };
	struct strategy_counter nan_diff[] = { C("ns", "k", START60, 60, NAN) };
	static const uint32_t zero[] = { 0 };
	struct res r = { 0 };
	char err[STRATEGY_ERR_MAX] = "";

	cr_assert_eq(OPS->push_diffs(s, b, 1, NULL, done_cb, &r, err), -1);
	cr_assert(strstr(err, "window size 0"), "%s", err);
	cr_assert_eq(OPS->push_diffs(s, nan_diff, 1, NULL, done_cb, &r, err), -1);
	cr_assert(strstr(err, "not finite"), "%s", err);
	cr_assert_eq(OPS->get_counters(s, "ns", 2, zero, 1, NOW60, rows_cb, &r, err), -1);
	run_for(0.05);
	cr_assert_eq(r.calls, 0);
	OPS->destroy(s);
}

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
	struct strategy_counter b[] = { C("ns", "k", START60, 60, 1) };
	struct res r = { 0 };
	char err[STRATEGY_ERR_MAX] = "";
	redisReply *rep;

	restart_with(extra, "s3cret");
	s = mk_opts("{\"port\": %d, \"password\": \"s3cret\", \"db\": 3}", srv.port);
	cr_assert(wait_ready(s, true, 3.0));
	push_ok(s, b, 1);
	cr_assert_eq(redis_server_integer(&srv, "DBSIZE"), 0, "written to db 0");
	rep = redis_server_command(&srv, "EVAL %s 0",
				   "redis.call('SELECT', 3) return redis.call('DBSIZE')");
	cr_assert(rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1);
	freeReplyObject(rep);

	bad = mk_opts("{\"port\": %d, \"password\": \"wrong\"}", srv.port);
	run_for(0.3);
	cr_assert(!OPS->ready(bad));
	cr_assert_eq(OPS->push_diffs(bad, b, 1, NULL, done_cb, &r, err), -1);
	cr_assert(strstr(err, "not connected") && strstr(err, "WRONGPASS"), "%s", err);
	OPS->destroy(bad);
	OPS->destroy(s);
}

Test(redis, unix_socket)
{
	static char path[128];
	static const char *extra[] = { "--unixsocket", path, "--unixsocketperm", "700", NULL };
	struct strategy *s;
	struct strategy_counter b[] = { C("ns", "k", START60, 60, 3) };

	snprintf(path, sizeof(path), "/tmp/rl-test-%d.sock", (int)getpid());
	restart_with(extra, "");
	s = mk_opts("{\"socket\": \"%s\"}", path);
	cr_assert(wait_ready(s, true, 3.0));
	push_ok(s, b, 1);
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
	struct strategy_counter b[] = { C("ns", "k", START60, 60, 1) };
	struct strategy_counter g[] = { C("ns", "g", START60, 60, 1) };
	struct strategy_counter q = C("ns", "g", START60, 60, 0);
	struct strategy_counter other[] = { C("other", "k", START60, 60, 1) };
	static const uint32_t sizes[] = { 60 };
	struct res r;
	char h[128], err[STRATEGY_ERR_MAX];

	/* the hash of "k" is a string */
	hash_name(h, sizeof(h), "rl", "ns", "k", 1, 60, START60);
	freeReplyObject(redis_server_command(&srv, "SET %s oops", h));
	push(s, b, 1, &r);
	cr_assert_eq(r.status, -1);
	cr_assert(strstr(r.err, "WRONGTYPE"), "%s", r.err);
	cr_assert(!b[0].ok);

	/* a field that is no number */
	hash_name(h, sizeof(h), "rl", "ns", "g", 1, 60, START60);
	freeReplyObject(redis_server_command(&srv, "HSET %s g abc", h));
	push(s, g, 1, &r);
	cr_assert_eq(r.status, -1);
	cr_assert(strstr(r.err, "not a number"), "%s", r.err);
	memset(&r, 0, sizeof(r));
	cr_assert_eq(OPS->get_window(s, &q, done_cb, &r, err), 0);
	cr_assert(run_until(&r.done, 5.0));
	cr_assert_eq(r.status, -1);
	cr_assert(!q.ok);
	memset(&r, 0, sizeof(r));
	cr_assert_eq(OPS->get_counters(s, "ns", 2, sizes, 1, NOW60, rows_cb, &r, err), 0);
	cr_assert(run_until(&r.done, 5.0));
	cr_assert_eq(r.status, -1);
	/* the first failure wins: the string hash or the garbage field */
	cr_assert(strstr(r.err, "expected a number") || strstr(r.err, "WRONGTYPE"), "%s", r.err);

	/* still connected and usable */
	cr_assert(OPS->ready(s));
	push_ok(s, other, 1);
	cr_assert_eq(other[0].total, 1);
	OPS->destroy(s);
}

Test(redis, script_flush_falls_back_to_eval)
{
	struct strategy *s = mk(1000);
	struct strategy_counter b[] = { C("ns", "k", START60, 60, 1),
					C("ns", "j", START60, 60, 2) };

	push_ok(s, b, 2);
	freeReplyObject(redis_server_command(&srv, "SCRIPT FLUSH"));
	push_ok(s, b, 2);
	cr_assert_eq(b[0].total, 2);
	cr_assert_eq(b[1].total, 4);
	push_ok(s, b, 2);       /* EVAL cached it again */
	cr_assert_eq(b[1].total, 6);
	OPS->destroy(s);
}

/* ------------------------------------------------------------------ */
/* Failure and recovery                                               */
/* ------------------------------------------------------------------ */

#define TIMEOUT_MS 100
#define SLACK_S 0.2

Test(redis, stopped_server_times_out_then_recovers)
{
	struct strategy *s = mk(TIMEOUT_MS);
	struct strategy_counter b[] = { C("ns", "k", START60, 60, 1) };
	struct res r = { 0 };
	char err[STRATEGY_ERR_MAX] = "";
	double t0;

	push_ok(s, b, 1);
	cr_assert_eq(redis_server_pause(&srv), 0);

	t0 = now_s();
	cr_assert_eq(OPS->push_diffs(s, b, 1, NULL, done_cb, &r, err), 0, "%s", err);
	cr_assert(run_until(&r.done, 3.0));
	cr_assert_eq(r.status, -1);
	cr_assert(strstr(r.err, "timeout"), "%s", r.err);
	cr_assert(!b[0].ok);
	cr_assert_leq(r.at - t0, TIMEOUT_MS / 1000.0 + SLACK_S, "failed after %.3f s", r.at - t0);
	cr_assert_geq(r.at - t0, TIMEOUT_MS / 1000.0 - 0.01, "failed early, after %.3f s",
		      r.at - t0);
	cr_assert(!OPS->ready(s));
	cr_log_info("stopped server: \"%s\" after %.3f s", r.err, r.at - t0);

	/* while it is stopped: refused at once, and reconnect attempts time out */
	cr_assert_eq(OPS->push_diffs(s, b, 1, NULL, done_cb, &r, err), -1);
	cr_assert(strstr(err, "not connected"), "%s", err);
	run_for(0.5);
	cr_assert(!OPS->ready(s));

	cr_assert_eq(redis_server_resume(&srv), 0);
	cr_assert(wait_ready(s, true, 5.0), "no reconnect after SIGCONT");
	push_ok(s, b, 1);
	/* the timed-out push may or may not have been applied */
	cr_assert(b[0].total == 2 || b[0].total == 3, "total %g", b[0].total);
	OPS->destroy(s);
}

Test(redis, killed_server_fails_fast_then_reconnects_after_restart)
{
	struct strategy *s = mk(TIMEOUT_MS);
	struct strategy_counter b[] = { C("ns", "k", START60, 60, 1) };
	struct res r = { 0 };
	char err[STRATEGY_ERR_MAX] = "";
	double t0;

	push_ok(s, b, 1);
	cr_assert_eq(redis_server_kill(&srv), 0);

	/* the loop has not seen the close yet: the op starts, then fails */
	t0 = now_s();
	cr_assert_eq(OPS->push_diffs(s, b, 1, NULL, done_cb, &r, err), 0, "%s", err);
	cr_assert(run_until(&r.done, 3.0));
	cr_assert_eq(r.status, -1);
	cr_assert(strstr(r.err, "connection lost") || strstr(r.err, "timeout"), "%s", r.err);
	cr_assert_leq(r.at - t0, TIMEOUT_MS / 1000.0 + SLACK_S, "failed after %.3f s", r.at - t0);
	cr_assert(wait_ready(s, false, 0.5));
	cr_log_info("killed server: \"%s\" after %.3f s", r.err, r.at - t0);

	cr_assert_eq(OPS->push_diffs(s, b, 1, NULL, done_cb, &r, err), -1);
	cr_assert(strstr(err, "not connected"), "%s", err);
	run_for(0.3);       /* a few refused attempts, backing off */

	cr_assert_eq(redis_server_restart(&srv, 5000), 0, "%s", srv.err);
	cr_assert(wait_ready(s, true, 5.0), "no reconnect after restart");
	push_ok(s, b, 1);
	cr_assert_eq(b[0].total, 1, "a fresh server starts from 0");
	OPS->destroy(s);
}

Test(redis, no_server_is_not_ready_and_refuses)
{
	struct strategy *s;
	struct strategy_counter b[] = { C("ns", "k", START60, 60, 1) };
	struct strategy_counter q = C("ns", "k", START60, 60, 0);
	static const uint32_t sizes[] = { 60 };
	struct res r = { 0 };
	char err[STRATEGY_ERR_MAX] = "";
	int port = srv.port;

	redis_server_stop(&srv, 2000);
	s = mk_opts("{\"port\": %d, \"timeout_ms\": 50}", port);
	run_for(0.3);
	cr_assert(!OPS->ready(s));
	cr_assert_eq(OPS->push_diffs(s, b, 1, NULL, done_cb, &r, err), -1);
	cr_assert(strstr(err, "not connected"), "%s", err);
	cr_assert_eq(OPS->get_window(s, &q, done_cb, &r, err), -1);
	cr_assert_eq(OPS->get_counters(s, "ns", 2, sizes, 1, NOW60, rows_cb, &r, err), -1);
	cr_assert_eq(r.calls, 0);
	/* purge needs no connection */
	cr_assert_eq(OPS->purge(s, "ns", 2, sizes, 1, NOW60, done_cb, &r, err), 0);
	cr_assert(run_until(&r.done, 1.0));
	cr_assert_eq(r.status, 0);
	OPS->destroy(s);

	/* destroyed while a connection attempt is in progress */
	s = mk_opts("{\"port\": %d}", port);
	OPS->destroy(s);
}

Test(redis, destroy_fails_pending_operations_first)
{
	struct strategy *s = mk(1000);
	struct strategy_counter b[] = { C("ns", "k", START60, 60, 1) };
	static const uint32_t sizes[] = { 60 };
	struct res r1 = { 0 }, r2 = { 0 }, r3 = { 0 };
	char err[STRATEGY_ERR_MAX] = "";

	cr_assert_eq(OPS->push_diffs(s, b, 1, NULL, done_cb, &r1, err), 0);
	cr_assert_eq(OPS->get_counters(s, "ns", 2, sizes, 1, NOW60, rows_cb, &r2, err), 0);
	cr_assert_eq(OPS->purge(s, "ns", 2, sizes, 1, NOW60, done_cb, &r3, err), 0);
	OPS->destroy(s);
	cr_assert_eq(r1.calls, 1);
	cr_assert_eq(r1.status, -1);
	cr_assert(strstr(r1.err, "destroyed"), "%s", r1.err);
	cr_assert(!b[0].ok);
	cr_assert_eq(r2.calls, 1);
	cr_assert_eq(r2.status, -1);
	cr_assert_eq(r3.calls, 1);
	run_for(0.05);      /* nothing left on the loop calls back again */
	cr_assert_eq(r1.calls + r2.calls + r3.calls, 3);
}

Test(redis, destroy_from_inside_a_callback)
{
	struct strategy *s = mk(1000);
	struct strategy_counter a[] = { C("ns", "k", START60, 60, 1) };
	struct strategy_counter b[] = { C("ns", "j", START60, 60, 1) };
	struct res r1 = { 0 }, r2 = { 0 };
	char err[STRATEGY_ERR_MAX] = "";

	r1.destroy_me = s;
	cr_assert_eq(OPS->push_diffs(s, a, 1, NULL, done_cb, &r1, err), 0);
	cr_assert_eq(OPS->push_diffs(s, b, 1, NULL, done_cb, &r2, err), 0);
	cr_assert(run_until(&r1.done, 5.0));
	cr_assert_eq(r1.status, 0, "%s", r1.err);
	/* the second one was finished or failed by destroy, exactly once */
	cr_assert_eq(r2.calls, 1);
	run_for(0.05);
	cr_assert_eq(r1.calls, 1);
	cr_assert_eq(r2.calls, 1);
}

/* A small operation pipelined behind a big batch waits longer than
 * timeout_ms in total, but the connection keeps answering: no timeout. */
Test(redis, queued_behind_a_big_batch_is_not_a_timeout)
{
	struct strategy *s = mk(TIMEOUT_MS);
	enum { N = 200000 };
	static char keys[N][12];
	static struct strategy_counter b[N];
	struct strategy_counter q = C("big", "k1", START60, 60, 0);
	struct res ra = { 0 }, rb = { 0 };
	char err[STRATEGY_ERR_MAX] = "";
	double t0;

	for (int i = 0; i < N; i++) {
		snprintf(keys[i], sizeof(keys[i]), "k%d", i);
		b[i] = C("big", keys[i], START60, 60, 1);
	}
	cr_assert_eq(OPS->push_diffs(s, b, N, NULL, done_cb, &ra, err), 0, "%s", err);
	t0 = now_s();
	cr_assert_eq(OPS->get_window(s, &q, done_cb, &rb, err), 0, "%s", err);
	cr_assert(run_until(&rb.done, 20.0));
	cr_assert(run_until(&ra.done, 20.0));
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
	struct res r = { 0 };
	char err[STRATEGY_ERR_MAX] = "";
	double t0;
	size_t ok = 0;

	for (int i = 0; i < N; i++) {
		snprintf(keys[i], sizeof(keys[i]), "k%d", i);
		b[i] = C("mid", keys[i], START60, 60, 1);
	}
	cr_assert_eq(OPS->push_diffs(s, b, N, NULL, done_cb, &r, err), 0, "%s", err);
	run_for(0.02);
	cr_assert_eq(redis_server_kill(&srv), 0);
	t0 = now_s();
	cr_assert(run_until(&r.done, 3.0));
	cr_assert_eq(r.status, -1, "the batch finished before the kill");
	cr_assert_leq(r.at - t0, TIMEOUT_MS / 1000.0 + SLACK_S, "failed after %.3f s", r.at - t0);
	for (int i = 0; i < N; i++)
		ok += b[i].ok;
	cr_assert_lt(ok, (size_t)N, "every counter reported applied by a failed push");
	cr_log_info("killed mid-batch: \"%s\" after %.3f s", r.err, r.at - t0);

	cr_assert_eq(redis_server_restart(&srv, 5000), 0, "%s", srv.err);
	cr_assert(wait_ready(s, true, 5.0), "no reconnect after restart");
	push_ok(s, b, 10);
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

Test(redis, token_same_batch_twice_adds_once)
{
	struct strategy *s = mk(1000);
	struct strategy_counter b[] = {
		C("ns", "alice", START60, 60, 1),
		C("ns", "bob", START60, 60, 2.5),
		C("ns", "alice", START60 - 60, 60, -1),
		C("other", "carol", START60, 60, 4),
		C("ns", "dave", START60, 60, 0),        /* read only */
	};
	enum { N = sizeof(b) / sizeof(b[0]) };
	double first[N];
	long long ttl;

	push_tok_ok(s, b, N, "node1-7-0-42");
	for (int i = 0; i < N; i++) {
		cr_assert_eq(b[i].total, b[i].diff, "counter %d: %g", i, b[i].total);
		first[i] = b[i].total;
		b[i].total = NAN;
	}
	/* the same batch again, same token: nothing added, the totals back */
	push_tok_ok(s, b, N, "node1-7-0-42");
	for (int i = 0; i < N; i++)
		cr_assert_eq(b[i].total, first[i], "counter %d: %g, want %g", i, b[i].total,
			     first[i]);
	cr_assert_eq(stored("ns", "alice", 5, 60, START60), 1);
	cr_assert_eq(stored("ns", "bob", 3, 60, START60), 2.5);
	cr_assert_eq(stored("ns", "alice", 5, 60, START60 - 60), -1);
	cr_assert_eq(stored("other", "carol", 5, 60, START60), 4);
	cr_assert(isnan(stored("ns", "dave", 4, 60, START60)), "a read created a field");

	/* one token key per script call that wrote (4 hashes written, the
	 * read-only call on dave's hash wrote nothing), remembered 600 s */
	{
		long ntok = redis_server_count_keys(&srv, "rl:{*}:tok:*");
		int writers = 0;
		char h[5][128];

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
		cr_assert_eq(ntok, writers, "%ld token keys, want %d", ntok, writers);
	}
	ttl = token_key_ttl();
	cr_assert(ttl > STRATEGY_TOKEN_TTL - 10 && ttl <= STRATEGY_TOKEN_TTL, "token TTL %lld",
		  ttl);

	/* later pushes without a token add as usual */
	push_ok(s, b, N);
	cr_assert_eq(b[0].total, 2);
	cr_assert_eq(b[1].total, 5);
	OPS->destroy(s);
}

Test(redis, token_different_tokens_add_twice)
{
	struct strategy *s = mk(1000);
	struct strategy_counter b[] = { C("ns", "k", START60, 60, 1),
					C("ns", "j", START60, 60, 0.25),
					C("ns", "k", START60, 60, 2) };     /* same field twice */

	push_tok_ok(s, b, 3, "t1");
	cr_assert_eq(b[0].total, 1);
	cr_assert_eq(b[2].total, 3);
	push_tok_ok(s, b, 3, "t2");
	cr_assert_eq(b[0].total, 4);
	cr_assert_eq(b[1].total, 0.5);
	cr_assert_eq(b[2].total, 6);
	/* t1 again: already applied, returns the current totals */
	push_tok_ok(s, b, 3, "t1");
	cr_assert_eq(b[0].total, 6, "%g", b[0].total);
	cr_assert_eq(b[1].total, 0.5);
	cr_assert_eq(b[2].total, 6);
	cr_assert_eq(stored("ns", "k", 1, 60, START60), 6);
	cr_assert_eq(stored("ns", "j", 1, 60, START60), 0.5);
	OPS->destroy(s);
}

Test(redis, token_null_behaves_as_before)
{
	struct strategy *s = mk(1000);
	struct strategy_counter b[] = { C("ns", "k", START60, 60, 1),
					C("ns", "j", START60, 60, 2) };
	static const char max_tok[] =
		"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
	static const char long_tok[] =
		"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdefX";
	struct res r = { 0 };
	char err[STRATEGY_ERR_MAX] = "";
	long long keys;

	push_ok(s, b, 2);
	push_ok(s, b, 2);
	cr_assert_eq(b[0].total, 2);
	cr_assert_eq(b[1].total, 4);
	cr_assert_eq(redis_server_count_keys(&srv, "rl:{*}:tok:*"), 0, "a token key without token");
	keys = redis_server_integer(&srv, "DBSIZE");

	/* token length: 1 to STRATEGY_TOKEN_MAX bytes */
	cr_assert_eq(sizeof(max_tok) - 1, STRATEGY_TOKEN_MAX);
	cr_assert_eq(OPS->push_diffs(s, b, 2, long_tok, done_cb, &r, err), -1);
	cr_assert(strstr(err, "token"), "%s", err);
	cr_assert_eq(OPS->push_diffs(s, b, 2, "", done_cb, &r, err), -1);
	cr_assert(strstr(err, "token"), "%s", err);
	run_for(0.05);
	cr_assert_eq(r.calls, 0);
	push_tok_ok(s, b, 2, max_tok);
	push_tok_ok(s, b, 2, max_tok);
	cr_assert_eq(b[0].total, 3);
	cr_assert_eq(b[1].total, 6);
	cr_assert_gt(redis_server_integer(&srv, "DBSIZE"), keys);

	/* an empty batch with a token completes */
	push_tok_ok(s, b, 0, "t");
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
		b[i] = C("ns", "hot", START60, 60, 1);
	for (int i = 0; i < T; i++)
		tw[i] = C("ns", "twin", START60, 60, 1);

	/* both calls applied; the first confirmed, the second not: resend it */
	push_tok_ok(s, b, N, "a");
	cr_assert_eq(b[N - 1].total, N);
	push_tok_ok(s, b + 2000, N - 2000, "a");
	for (int i = 2000; i < N; i++)
		cr_assert_eq(b[i].total, N, "position %d: %g", i, b[i].total);
	/* the second confirmed, the first not (it failed): resend it */
	push_tok_ok(s, b, 2000, "a");
	cr_assert_eq(b[0].total, N, "%g", b[0].total);
	push_tok_ok(s, b, N, "a");          /* nothing confirmed: resend all */
	cr_assert_eq(stored("ns", "hot", 3, 60, START60), N);

	/* only the second call was applied the first time (the first failed
	 * with an error): the resend of everything adds the first only */
	push_tok_ok(s, b + 2000, N - 2000, "b");
	cr_assert_eq(b[N - 1].total, N + 500);
	push_tok_ok(s, b, N, "b");
	want = 2 * N;
	cr_assert_eq(stored("ns", "hot", 3, 60, START60), want);
	cr_assert_eq(b[N - 1].total, want);
	cr_assert_eq(b[0].total, N + 500 + 1, "%g", b[0].total);

	/* two calls with identical contents: the first confirmed, the second
	 * applied but not confirmed, then resent */
	push_tok_ok(s, tw, T, "c");
	cr_assert_eq(tw[T - 1].total, T);
	push_tok_ok(s, tw + 2000, 2000, "c");
	cr_assert_eq(tw[T - 1].total, T);
	push_tok_ok(s, tw, T, "c");
	cr_assert_eq(stored("ns", "twin", 4, 60, START60), T);
	/* the first confirmed, the second not applied (its id is the one a
	 * push of 2000 copies has): the resend adds it once */
	push_tok_ok(s, tw + 2000, 2000, "d");
	cr_assert_eq(tw[3999].total, T + 2000);
	push_tok_ok(s, tw + 2000, 2000, "d");
	cr_assert_eq(tw[3999].total, T + 2000);
	/* a new token: both identical calls add */
	push_tok_ok(s, tw, T, "e");
	cr_assert_eq(tw[T - 1].total, 2 * T + 2000);
	cr_assert_eq(stored("ns", "twin", 4, 60, START60), 2 * T + 2000);
	OPS->destroy(s);
}

/* The first try times out while the server is stopped: its calls sit in
 * the server's socket buffer. After SIGCONT the server runs some or all
 * of them (the client has closed that connection); the resend with the
 * same token, after reconnecting, counts every counter exactly once. */
Test(redis, token_resend_after_timeout_counts_each_once)
{
	struct strategy *s = mk(TIMEOUT_MS);
	enum { K = 1500, H = 2500, N = K + H };
	static char keys[K][12];
	static struct strategy_counter b[N], rs[N];
	struct res r = { 0 };
	char err[STRATEGY_ERR_MAX] = "";
	size_t ok = 0, nrs = 0;
	int applied = 0;
	double hot;

	for (int i = 0; i < K; i++) {
		snprintf(keys[i], sizeof(keys[i]), "u%d", i);
		b[i] = C(i % 2 ? "stuck" : "held", keys[i], START60, 60, i % 7 + 1);
	}
	for (int i = K; i < N; i++)
		b[i] = C("stuck", "hot", START60, 60, 1);

	cr_assert_eq(redis_server_pause(&srv), 0);
	cr_assert_eq(OPS->push_diffs(s, b, N, "stuck-1", done_cb, &r, err), 0, "%s", err);
	cr_assert(run_until(&r.done, 3.0));
	cr_assert_eq(r.status, -1);
	cr_assert(strstr(r.err, "timeout"), "%s", r.err);
	cr_assert_eq(redis_server_resume(&srv), 0);
	cr_assert(wait_ready(s, true, 5.0), "no reconnect after SIGCONT");

	/* what the server did with the stuck calls (for the log) */
	for (int i = 0; i < K; i++)
		applied += !isnan(stored(b[i].ns, keys[i], strlen(keys[i]), 60, START60));
	hot = stored("stuck", "hot", 3, 60, START60);
	cr_log_info("after SIGCONT the stuck push had applied %d of %d keys, hot = %g", applied,
		    K, isnan(hot) ? 0 : hot);

	/* resend what was not confirmed, as the sync loop does */
	for (int i = 0; i < N; i++) {
		ok += b[i].ok;
		if (!b[i].ok)
			rs[nrs++] = b[i];
	}
	cr_assert_eq(ok + nrs, (size_t)N);
	push_tok_ok(s, rs, nrs, "stuck-1");
	for (size_t i = 0; i < nrs; i++)
		if (strcmp(rs[i].key, "hot") != 0)
			cr_assert_eq(rs[i].total, rs[i].diff, "%s: total %g, want %g", rs[i].key,
				     rs[i].total, rs[i].diff);
	for (int i = 0; i < K; i++) {
		double v = stored(b[i].ns, keys[i], strlen(keys[i]), 60, START60);

		cr_assert_eq(v, b[i].diff, "%s counted %g times", keys[i], v / b[i].diff);
	}
	cr_assert_eq(stored("stuck", "hot", 3, 60, START60), H);
	cr_assert_eq(rs[nrs - 1].total, H);

	/* and once more (a second timeout that was in fact applied) */
	push_tok_ok(s, rs, nrs, "stuck-1");
	cr_assert_eq(stored("stuck", "hot", 3, 60, START60), H);
	cr_assert_eq(stored("held", "u0", 2, 60, START60), 1);
	OPS->destroy(s);
}

/* ------------------------------------------------------------------ */
/* Admission (issue 9): the store decides, atomically                 */
/* ------------------------------------------------------------------ */

static struct strategy_admit adm(const char *key, int64_t start, double diff, double cost,
				 double limit, double weight, bool count_denied)
{
	return (struct strategy_admit){ .ns = "ns", .ns_len = 2, .key = key, .key_len = strlen(key),
					.start = start, .size = 60, .diff = diff, .cost = cost,
					.limit = limit, .weight = weight,
					.count_denied = count_denied };
}

static void admit_tok(struct strategy *s, struct strategy_admit *a, size_t n, const char *token)
{
	char err[STRATEGY_ERR_MAX] = "";
	struct res r;

	memset(&r, 0, sizeof(r));
	cr_assert_eq(OPS->admit(s, a, n, token, done_cb, &r, err), 0, "admit: %s", err);
	cr_assert_eq(r.calls, 0, "callback ran inside admit");
	cr_assert(run_until(&r.done, 5.0), "admit did not complete");
	cr_assert_eq(r.status, 0, "admit failed: %s", r.err);
	for (size_t i = 0; i < n; i++)
		cr_assert(a[i].ok, "admission %zu not decided", i);
}

/* Up to the limit admitted, then not; the node's diff goes in whatever
 * the decision; a denied hit counts only with count_denied. */
Test(redis, admit_up_to_the_limit)
{
	struct strategy *s = mk(1000);
	struct strategy_admit a;

	a = adm("k", START60, 3, 1, 5, 0, false);     /* 3 + 1 <= 5 */
	admit_tok(s, &a, 1, NULL);
	cr_assert(a.admitted);
	cr_assert_eq(a.current, 4);
	cr_assert_eq(a.previous, 0);
	a = adm("k", START60, 0, 1, 5, 0, false);     /* 4 + 1 <= 5 */
	admit_tok(s, &a, 1, NULL);
	cr_assert(a.admitted);
	cr_assert_eq(a.current, 5);
	a = adm("k", START60, 0, 1, 5, 0, false);     /* 5 + 1 > 5: not counted */
	admit_tok(s, &a, 1, NULL);
	cr_assert(!a.admitted);
	cr_assert_eq(a.current, 5);
	a = adm("k", START60, 2, 1, 5, 0, true);      /* the diff goes in, and the hit */
	admit_tok(s, &a, 1, NULL);
	cr_assert(!a.admitted);
	cr_assert_eq(a.current, 8);
	cr_assert_eq(stored("ns", "k", 1, 60, START60), 8);
	OPS->destroy(s);
}

/* The sliding window as the library computes it: current + previous x
 * weight; decimal costs. */
Test(redis, admit_sliding_window_and_decimals)
{
	struct strategy *s = mk(1000);
	struct strategy_counter prev = C("ns", "w", START60 - 60, 60, 40);
	struct strategy_admit a;

	push_ok(s, &prev, 1);
	/* 0 + 40 x 0.25 + 0.5 = 10.5 <= 10.5 */
	a = adm("w", START60, 0, 0.5, 10.5, 0.25, false);
	admit_tok(s, &a, 1, NULL);
	cr_assert(a.admitted);
	cr_assert_eq(a.previous, 40);
	cr_assert_eq(a.current, 0.5);
	/* 0.5 + 10 + 0.25 > 10.5 */
	a = adm("w", START60, 0, 0.25, 10.5, 0.25, false);
	admit_tok(s, &a, 1, NULL);
	cr_assert(!a.admitted);
	cr_assert_eq(a.current, 0.5);
	/* a smaller weight (later in the window) lets it through */
	a = adm("w", START60, 0, 0.25, 10.5, 0.2, false);
	admit_tok(s, &a, 1, NULL);
	cr_assert(a.admitted);
	cr_assert_eq(a.current, 0.75);
	OPS->destroy(s);
}

/* One round trip for a batch; each admission sees the ones before it. */
Test(redis, admit_batch_in_order)
{
	struct strategy *s = mk(1000);
	struct strategy_admit a[4] = {
		adm("b", START60, 0, 1, 2, 0, false), adm("b", START60, 0, 1, 2, 0, false),
		adm("b", START60, 0, 1, 2, 0, false), adm("c", START60, 1, 1, 2, 0, false),
	};

	admit_tok(s, a, 4, NULL);
	cr_assert(a[0].admitted && a[1].admitted && !a[2].admitted && a[3].admitted);
	cr_assert_eq(a[1].current, 2);
	cr_assert_eq(a[2].current, 2);
	cr_assert_eq(a[3].current, 2);
	OPS->destroy(s);
}

/* With a token, an admission resent (its answer lost) is not applied
 * twice and gets the same decision back; another token is a new one. */
Test(redis, admit_token_applies_once)
{
	struct strategy *s = mk(1000);
	struct strategy_admit a[2] = { adm("t", START60, 2, 1, 3, 0, false),
				       adm("t", START60, 0, 1, 3, 0, false) };

	admit_tok(s, a, 2, "node1:7");
	cr_assert(a[0].admitted && !a[1].admitted);
	cr_assert_eq(a[1].current, 3);
	a[0] = adm("t", START60, 2, 1, 3, 0, false);
	a[1] = adm("t", START60, 0, 1, 3, 0, false);
	admit_tok(s, a, 2, "node1:7");
	cr_assert(a[0].admitted && !a[1].admitted, "the recorded decisions come back");
	cr_assert_eq(a[0].current, 3, "nothing added twice");
	cr_assert_eq(stored("ns", "t", 1, 60, START60), 3);
	a[0] = adm("t", START60, 0, 1, 3, 0, true);
	admit_tok(s, a, 1, "node1:8");
	cr_assert(!a[0].admitted);
	cr_assert_eq(a[0].current, 4);
	OPS->destroy(s);
}

/* After SCRIPT FLUSH the admission is resent as EVAL. */
Test(redis, admit_script_flush_falls_back_to_eval)
{
	struct strategy *s = mk(1000);
	struct strategy_admit a = adm("f", START60, 0, 1, 10, 0, false);

	admit_tok(s, &a, 1, NULL);
	freeReplyObject(redis_server_command(&srv, "SCRIPT FLUSH"));
	a = adm("f", START60, 0, 1, 10, 0, false);
	admit_tok(s, &a, 1, NULL);
	cr_assert(a.admitted);
	cr_assert_eq(a.current, 2);
	OPS->destroy(s);
}

static struct strategy_admit grant_adm(double cost, double limit, double weight, double want,
				       unsigned nodes)
{
	struct strategy_admit a = adm("g", START60, 0, cost, limit, weight, false);

	a.want = want;
	a.nodes = nodes;
	return a;
}

/* The reservation of (ns, key) in the 60 s window starting at start: the
 * grants the store gave and nodes have not reported spent or given back,
 * in its own hash; NAN if none. */
static double reserved(const char *ns, const char *key, int64_t start)
{
	char h[256];
	redisReply *rep;
	double v = NAN;

	snprintf(h, sizeof(h), "rl:{%s:%u}:r:60:%lld", ns,
		 redis_server_bucket(key, strlen(key)), (long long)start);
	rep = redis_server_command(&srv, "HGET %s %s", h, key);
	cr_assert_not_null(rep, "%s", srv.err);
	if (rep->type == REDIS_REPLY_STRING)
		v = strtod(rep->str, NULL);
	freeReplyObject(rep);
	return v;
}

/* Grants (docs/CLUSTER.md, "Exact at the limit"): an admitted hit also
 * gets min(want, headroom / (2 * nodes)) in whole costs, reserved at once
 * apart from the count (which holds hits: what current says), and counted
 * against the limit; none when refused, without nodes or want, or under
 * one cost; a resend with the same token gets the same grant and adds
 * nothing. */
Test(redis, admit_grants_share_the_headroom)
{
	struct strategy *s = mk(1000);
	struct strategy_admit a = grant_adm(1, 100, 0, 1000, 3);

	admit_tok(s, &a, 1, NULL);
	cr_assert(a.admitted);
	cr_assert_eq(a.grant, 16, "(100 - 1) / 6 = 16.5, in whole costs: %g", a.grant);
	cr_assert_eq(a.current, 1, "hits, not the grant: %g", a.current);
	cr_assert_eq(reserved("ns", "g", START60), 16);
	a = grant_adm(1, 100, 0, 1000, 3);
	admit_tok(s, &a, 1, "n1:1");
	cr_assert_eq(a.grant, 13, "(100 - 2 - 16) / 6: %g", a.grant);
	cr_assert_eq(a.current, 2);
	a = grant_adm(1, 100, 0, 1000, 3);
	admit_tok(s, &a, 1, "n1:1");
	cr_assert(a.admitted);
	cr_assert_eq(a.grant, 13, "a resend gets the recorded grant: %g", a.grant);
	cr_assert_eq(a.current, 2, "and adds nothing");
	cr_assert_eq(reserved("ns", "g", START60), 29);
	a = grant_adm(1, 100, 0, 4, 3);
	admit_tok(s, &a, 1, NULL);
	cr_assert_eq(a.grant, 4, "want caps it");
	cr_assert_eq(a.current, 3);
	a = grant_adm(1, 100, 0, 1000, 0);
	admit_tok(s, &a, 1, NULL);
	cr_assert(a.admitted);
	cr_assert_eq(a.grant, 0, "no nodes, no grant");
	a = grant_adm(1, 100, 0, 0, 3);
	admit_tok(s, &a, 1, NULL);
	cr_assert_eq(a.grant, 0, "no want, no grant");
	a = grant_adm(2.5, 100, 0, 1000, 1);
	admit_tok(s, &a, 1, NULL);
	cr_assert_eq(a.grant, 27.5, "(100 - 5 - 33 - 2.5) / 2 = 29.75, in costs of 2.5: %g",
		     a.grant);
	cr_assert_eq(a.current, 7.5);
	a = grant_adm(30, 100, 0, 1000, 1);
	admit_tok(s, &a, 1, NULL);
	cr_assert(a.admitted, "7.5 hits + 60.5 reserved + 30 <= 100");
	cr_assert_eq(a.grant, 0, "(100 - 98) / 2 is under one cost");
	a = grant_adm(3, 100, 0, 1000, 1);
	admit_tok(s, &a, 1, NULL);
	cr_assert(!a.admitted, "37.5 hits + 60.5 reserved + 3 > 100");
	cr_assert_eq(a.grant, 0, "refused: no grant");
	cr_assert_eq(a.current, 37.5);
	cr_assert_eq(stored("ns", "g", 1, 60, START60), 37.5);
	cr_assert_eq(reserved("ns", "g", START60), 60.5);
	OPS->destroy(s);
}

/* The previous window weighs on the headroom of a grant, its reservation
 * with it. */
Test(redis, admit_grant_counts_the_previous_window)
{
	struct strategy *s = mk(1000);
	struct strategy_admit a = adm("g", START60 - 60, 30, 0, 1000, 0, false);

	a.want = 10;
	a.nodes = 1;
	a.cost = 1;
	admit_tok(s, &a, 1, NULL);
	cr_assert_eq(a.grant, 10);
	cr_assert_eq(a.current, 31, "30 + the hit");
	a = grant_adm(1, 100, 0.5, 1000, 2);
	admit_tok(s, &a, 1, NULL);
	cr_assert(a.admitted);
	cr_assert_eq(a.previous, 31, "hits");
	cr_assert_eq(a.grant, 19, "(100 - 1 - (31 + 10) * 0.5) / 4 = 19.6: %g", a.grant);
	cr_assert_eq(a.current, 1);
	OPS->destroy(s);
}

/* A push's grant hits spent (strategy.h) go from the reservation to the
 * count; a grant returned leaves the reservation, the count does not
 * move. A reservation never goes below 0. With a token, applied once. */
Test(redis, push_spent_and_returned_grants)
{
	struct strategy *s = mk(1000);
	struct strategy_admit a = grant_adm(1, 1000, 0, 100, 1);
	struct strategy_counter b[2];

	admit_tok(s, &a, 1, NULL);
	cr_assert_eq(a.grant, 100);
	cr_assert_eq(reserved("ns", "g", START60), 100);
	/* 30 of the grant spent: reported with a push */
	b[0] = C("ns", "g", START60, 60, 0);
	b[0].spent = 30;
	push_tok_ok(s, b, 1, "u:1");
	cr_assert_eq(b[0].total, 31);
	push_tok_ok(s, b, 1, "u:1");
	cr_assert_eq(b[0].total, 31, "a resend adds nothing");
	cr_assert_eq(reserved("ns", "g", START60), 70);
	/* 5 more spent, the 65 left returned, 2 local hits */
	b[0] = C("ns", "g", START60, 60, 2);
	b[0].spent = 5;
	b[0].returned = 65;
	push_tok_ok(s, b, 1, "u:2");
	cr_assert_eq(b[0].total, 38, "1 + 30 + 5 + 2");
	cr_assert(isnan(reserved("ns", "g", START60)), "nothing reserved: the field is gone");
	/* more than is reserved: the reservation stays at 0 */
	b[0] = C("ns", "g", START60, 60, 0);
	b[0].spent = 4;
	b[1] = C("ns", "g", START60, 60, 0);
	push_tok_ok(s, b, 2, NULL);
	cr_assert_eq(b[0].total, 42);
	cr_assert_eq(b[1].total, 42, "the same field twice in a call adds up in order");
	cr_assert(isnan(reserved("ns", "g", START60)));
	OPS->destroy(s);
}

/* Refused at once: bad numbers; the store down. */
Test(redis, admit_refuses_bad_arguments)
{
	struct strategy *s = mk(1000);
	struct strategy_admit a = adm("x", START60, 0, -1, 10, 0, false);
	char err[STRATEGY_ERR_MAX] = "";
	struct res r = { 0 };

	cr_assert_eq(OPS->admit(s, &a, 1, NULL, done_cb, &r, err), -1);
	cr_assert(strstr(err, "admission 0") != NULL, "%s", err);
	a = adm("x", START60, 0, 1, 10, 1.5, false);
	cr_assert_eq(OPS->admit(s, &a, 1, NULL, done_cb, &r, err), -1);
	a = adm("x", START60, NAN, 1, 10, 0, false);
	cr_assert_eq(OPS->admit(s, &a, 1, NULL, done_cb, &r, err), -1);
	run_for(0.05);
	cr_assert_eq(r.calls, 0);
	OPS->destroy(s);
}

/* ------------------------------------------------------------------ */
/* Heartbeats: the nodes of a namespace                               */
/* ------------------------------------------------------------------ */

static unsigned beat(struct strategy *s, const char *ns, const char *node, double now, double ttl)
{
	char err[STRATEGY_ERR_MAX] = "";
	unsigned active = 0;
	struct res r;

	memset(&r, 0, sizeof(r));
	cr_assert_eq(OPS->heartbeat(s, ns, strlen(ns), node, strlen(node), now, ttl, &active,
				    done_cb, &r, err), 0, "heartbeat: %s", err);
	cr_assert_eq(r.calls, 0, "callback ran inside heartbeat");
	cr_assert(run_until(&r.done, 5.0), "heartbeat did not complete");
	cr_assert_eq(r.status, 0, "heartbeat failed: %s", r.err);
	return active;
}

Test(redis, heartbeat_counts_the_nodes_seen_within_ttl)
{
	struct strategy *s = mk(1000);
	redisReply *rep;

	cr_assert_eq(beat(s, "ns", "a", 1000, 3), 1);
	cr_assert_eq(beat(s, "ns", "b", 1001, 3), 2);
	cr_assert_eq(beat(s, "other", "c", 1001, 3), 1, "namespaces are apart");
	cr_assert_eq(beat(s, "ns", "a", 1004.5, 3), 1, "b, silent for 3.5 s, no longer counts");
	cr_assert_eq(beat(s, "ns", "b", 1005, 3), 2);
	/* A node silent for a day is forgotten. */
	cr_assert_eq(beat(s, "ns", "a", 1000 + 90000, 3), 1);
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

	cr_assert_eq(beat(s, "ns", "a", 1000, 3), 1);
	cr_assert_eq(beat(s, "ns", "b", 1001, 3), 2);
	cr_assert_eq(cmd_calls("evalsha") - sha0, 2, "two heartbeats, two EVALSHA");
	cr_assert_eq(cmd_calls("eval") - eval0, 0, "no EVAL of the script's text");
	freeReplyObject(redis_server_command(&srv, "SCRIPT FLUSH"));
	cr_assert_eq(beat(s, "ns", "a", 1002, 3), 2);
	cr_assert_eq(cmd_calls("eval") - eval0, 1, "NOSCRIPT: one EVAL");
	OPS->destroy(s);
}

/* A call whose diffs are all 0 (an idle key's read, every sync cycle) is
 * a plain HMGET: no script, no token key; a call with one diff is the
 * script. The totals are the same either way. */
Test(redis, reads_are_hmget_not_a_script)
{
	struct strategy *s = mk(1000);
	struct strategy_counter b[3];
	long long sha0, hm0;

	b[0] = C("ns", "r1", START60, 60, 5);
	b[1] = C("ns", "r2", START60, 60, 2.5);
	push_tok_ok(s, b, 2, "w:1");
	sha0 = cmd_calls("evalsha");
	hm0 = cmd_calls("hmget");
	b[0] = C("ns", "r1", START60, 60, 0);
	b[1] = C("ns", "r2", START60, 60, 0);
	b[2] = C("ns", "absent", START60, 60, 0);
	push_tok_ok(s, b, 3, "w:2");
	cr_assert_eq(b[0].total, 5);
	cr_assert_eq(b[1].total, 2.5);
	cr_assert_eq(b[2].total, 0, "a field never written reads 0");
	cr_assert_eq(cmd_calls("evalsha"), sha0, "no script for reads");
	cr_assert_geq(cmd_calls("hmget") - hm0, 1, "the reads are HMGET");
	cr_assert(isnan(stored("ns", "absent", 6, 60, START60)), "nothing created");
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
			a[i] = adm("five", START60, 0, 1, 3, 0, false);
		a[5] = adm("other", START60 - 60, 0, 2, 10, 0, false);
		a[6] = adm("other", START60, 0, 2, 10, 0.5, false);
		for (int i = 7; i < N; i++) {
			snprintf(keys[i], sizeof(keys[i]), "k%d", i);
			a[i] = adm(keys[i], START60, 0, 1, 100, 0, false);
		}
		sha0 = cmd_calls("evalsha");
		admit_tok(s, a, N, "one:1");
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
