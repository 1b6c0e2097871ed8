/*
 * test_postgres.c - the PostgreSQL strategy (strategies/postgres.c)
 * against a real server: options, table creation, upserts and their
 * totals, reads that create nothing, several nodes summing, byte-exact
 * keys, window selection, purge (asked for and periodic), a paused and a
 * restarted server, a big batch, push tokens (applied at most once, also
 * across a timeout on a paused server; old ones purged), and the async
 * contract (no callback inside the starting call, bounded queue, destroy
 * from anywhere).
 *
 * main() makes one template cluster and starts one shared server from a
 * copy of it before Criterion forks the tests (which find them through
 * PG_TEST_CONNINFO / PG_TEST_TEMPLATE); each test uses its own table.
 * Tests that pause or stop the server start their own copy.
 */
#include <criterion/criterion.h>
#include <ev.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "strategies/strategy.h"
#include "tests/lib/pg_server.h"

#define ENV_CONNINFO "PG_TEST_CONNINFO"
#define ENV_TEMPLATE "PG_TEST_TEMPLATE"

static const struct strategy_ops *const ops = &postgres_strategy;

/* ------------------------------------------------------------------------
 * Loop helpers: every wait is bounded; a ticking timer makes EVRUN_ONCE
 * return at least every 5 ms.
 */
static struct ev_loop *loop;
static ev_timer tick;

static void on_tick(struct ev_loop *l, ev_timer *w, int revents)
{
	(void)l;
	(void)w;
	(void)revents;
}

static void loop_setup(void)
{
	loop = ev_loop_new(EVFLAG_AUTO);
	cr_assert_not_null(loop);
	ev_timer_init(&tick, on_tick, 0.005, 0.005);
	ev_timer_start(loop, &tick);
}

static void loop_teardown(void)
{
	if (!loop)
		return;
	ev_timer_stop(loop, &tick);
	ev_loop_destroy(loop);
	loop = NULL;
}

static double mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Runs the loop until *flag or ms elapse. Returns *flag. */
static bool run_until(const bool *flag, int ms)
{
	double end = mono() + ms / 1000.0;

	while (!*flag && mono() < end)
		ev_run(loop, EVRUN_ONCE);
	return *flag;
}

static void run_for(int ms)
{
	bool never = false;

	run_until(&never, ms);
}

static bool wait_ready(struct strategy *s, int ms)
{
	double end = mono() + ms / 1000.0;

	while (!ops->ready(s) && mono() < end)
		ev_run(loop, EVRUN_ONCE);
	return ops->ready(s);
}

static const char *shared_conninfo(void)
{
	const char *ci = getenv(ENV_CONNINFO);

	cr_assert(ci && *ci, "no shared PostgreSQL server (see the runner's output)");
	return ci;
}

static struct strategy *make(const char *conninfo, const char *table, const char *extra)
{
	char opts[1024], err[STRATEGY_ERR_MAX] = "";
	struct strategy *s;

	snprintf(opts, sizeof(opts), "{\"conninfo\": \"%s\", \"table\": \"%s\"%s%s}", conninfo,
		 table, extra ? ", " : "", extra ? extra : "");
	s = ops->create(loop, opts, err, sizeof(err));
	cr_assert_not_null(s, "create(%s): %s", opts, err);
	return s;
}

/* An instance on the shared server, ready. */
static struct strategy *make_ready(const char *table, const char *extra)
{
	struct strategy *s = make(shared_conninfo(), table, extra);

	cr_assert(wait_ready(s, 5000), "not ready after 5 s");
	return s;
}

static int query(const char *sql, char *out, size_t outlen)
{
	return pg_server_query(shared_conninfo(), sql, out, outlen);
}

static long long query_int(const char *sql)
{
	char out[256];

	cr_assert_geq(query(sql, out, sizeof(out)), 0, "%s: %s", sql, out);
	return atoll(out);
}

/* ------------------------------------------------------------------------
 * Callback recorders.
 */
struct done {
	bool called;
	int status;
	char err[STRATEGY_ERR_MAX];
	double at;     /* mono() at the call */
	int calls;
};

static void on_done(void *arg, int status, const char *errstr)
{
	struct done *d = arg;

	d->called = true;
	d->calls++;
	d->status = status;
	d->at = mono();
	snprintf(d->err, sizeof(d->err), "%s", errstr ? errstr : "");
}

#define ROWS_MAX 64
#define ROW_KEY_MAX 2048

struct rows {
	bool called;
	int status;
	char err[STRATEGY_ERR_MAX];
	size_t n;
	struct {
		char key[ROW_KEY_MAX];
		size_t key_len;
		int64_t start;
		uint32_t size;
		double count;
	} r[ROWS_MAX];
};

static void on_rows(void *arg, int status, const char *errstr, const struct strategy_row *rows,
		    size_t n)
{
	struct rows *d = arg;

	d->called = true;
	d->status = status;
	snprintf(d->err, sizeof(d->err), "%s", errstr ? errstr : "");
	d->n = n;
	for (size_t i = 0; i < n && i < ROWS_MAX; i++) {
		cr_assert_leq(rows[i].key_len, ROW_KEY_MAX);
		memcpy(d->r[i].key, rows[i].key, rows[i].key_len);
		d->r[i].key_len = rows[i].key_len;
		d->r[i].start = rows[i].start;
		d->r[i].size = rows[i].size;
		d->r[i].count = rows[i].count;
	}
}

/* Finds a row by key and start; -1 if absent. */
static int find_row(const struct rows *d, const char *key, size_t key_len, int64_t start,
		    uint32_t size)
{
	for (size_t i = 0; i < d->n && i < ROWS_MAX; i++)
		if (d->r[i].key_len == key_len && !memcmp(d->r[i].key, key, key_len) &&
		    d->r[i].start == start && d->r[i].size == size)
			return (int)i;
	return -1;
}

static struct strategy_counter counter(const char *ns, const char *key, size_t key_len,
				       int64_t start, uint32_t size, double diff)
{
	return (struct strategy_counter){ .ns = ns, .ns_len = strlen(ns), .key = key,
					  .key_len = key_len, .start = start, .size = size,
					  .diff = diff };
}

/* Pushes and waits; asserts the push succeeded. */
static void push_ok(struct strategy *s, struct strategy_counter *c, size_t n)
{
	struct done d = { 0 };
	char err[STRATEGY_ERR_MAX] = "";

	cr_assert_eq(ops->push_diffs(s, c, n, NULL, on_done, &d, err), 0, "push refused: %s", err);
	cr_assert(run_until(&d.called, 10000), "push: no callback");
	cr_assert_eq(d.status, 0, "push failed: %s", d.err);
	for (size_t i = 0; i < n; i++)
		cr_assert(c[i].ok, "counter %zu not ok", i);
}

static void fetch_ok(struct strategy *s, const char *ns, const uint32_t *sizes, size_t nsizes,
		     int64_t now, struct rows *d)
{
	char err[STRATEGY_ERR_MAX] = "";

	memset(d, 0, sizeof(*d));
	cr_assert_eq(ops->get_counters(s, ns, strlen(ns), sizes, nsizes, now, on_rows, d, err), 0,
		     "get_counters refused: %s", err);
	cr_assert(run_until(&d->called, 5000), "get_counters: no callback");
	cr_assert_eq(d->status, 0, "get_counters failed: %s", d->err);
}

#define EQ(x, want)                                                               \
	do {                                                                      \
		double got_ = (x);                                                \
		cr_assert(fabs(got_ - (want)) <= 1e-9, "%s = %.17g, want %.17g", #x, \
			  got_, (double)(want));                                  \
	} while (0)

TestSuite(postgres, .init = loop_setup, .fini = loop_teardown, .timeout = 60);

/* ------------------------------------------------------------------------
 * Options.
 */
static void expect_refused(const char *json, const char *names)
{
	char err[STRATEGY_ERR_MAX] = "";
	struct strategy *s = ops->create(loop, json, err, sizeof(err));

	if (s)
		ops->destroy(s);
	cr_assert_null(s, "accepted: %s", json);
	cr_assert(strstr(err, names), "error for %s does not name \"%s\": %s", json, names, err);
}

Test(postgres, options_errors)
{
	char long_table[80];

	expect_refused("{\"colour\": 1}", "colour");
	expect_refused("{\"table\": \"Upper\"}", "table");
	expect_refused("{\"table\": \"9lives\"}", "table");
	expect_refused("{\"table\": \"a\\\"; drop table x; --\"}", "table");
	expect_refused("{\"table\": \"\"}", "table");
	expect_refused("{\"table\": 3}", "table");
	memset(long_table, 'a', 64);
	long_table[64] = '\0';
	{
		char json[160];

		snprintf(json, sizeof(json), "{\"table\": \"%s\"}", long_table);
		expect_refused(json, "table");
		long_table[63] = '\0'; /* 63 is the longest valid name */
		snprintf(json, sizeof(json), "{\"table\": \"%s\", \"conninfo\": \"host=127.0.0.1 "
					     "port=1\"}", long_table);
		{
			char err[STRATEGY_ERR_MAX];
			struct strategy *s = ops->create(loop, json, err, sizeof(err));

			cr_assert_not_null(s, "63-character table refused: %s", err);
			ops->destroy(s);
		}
	}
	expect_refused("{\"timeout_ms\": 0}", "timeout_ms");
	expect_refused("{\"timeout_ms\": \"500\"}", "timeout_ms");
	expect_refused("{\"timeout_ms\": 1.5}", "timeout_ms");
	expect_refused("{\"purge_interval_s\": -1}", "purge_interval_s");
	expect_refused("{\"pool_size\": 0}", "pool_size");
	expect_refused("{\"pool_size\": 9}", "pool_size");
	expect_refused("{\"conninfo\": 5}", "conninfo");
	expect_refused("{\"conninfo\": \"host='unterminated\"}", "conninfo");
	expect_refused("{\"conninfo\": \"nosuchkey=1\"}", "conninfo");
	expect_refused("{\"conninfo\": \"host=db.example.com\"}", "conninfo");
	expect_refused("{\"table\": ", "JSON");
	expect_refused("[1]", "object");

	/* Defaults and an explicit full set are accepted (nothing listens
	 * on port 1: creating does not need the store). */
	{
		char err[STRATEGY_ERR_MAX] = "";
		struct strategy *s = ops->create(loop, NULL, err, sizeof(err));

		cr_assert_not_null(s, "defaults refused: %s", err);
		ops->destroy(s);
		s = ops->create(loop,
				"{\"conninfo\": \"host=127.0.0.1 port=1 dbname=x\", \"table\": "
				"\"_t1\", \"timeout_ms\": 100, \"purge_interval_s\": 0, "
				"\"pool_size\": 8}",
				err, sizeof(err));
		cr_assert_not_null(s, "full set refused: %s", err);
		ops->destroy(s);
		s = ops->create(loop, "{\"conninfo\": \"hostaddr=127.0.0.1 host=db.example.com "
				      "port=1\"}", err, sizeof(err));
		cr_assert_not_null(s, "hostaddr refused: %s", err);
		ops->destroy(s);
	}
}

/* libpq closes its socket and opens another while connecting when the
 * first host of a list refuses: the adapter must follow (pg_ev_resync). */
Test(postgres, connects_through_a_host_list)
{
	char ci[512];
	const char *port = strstr(shared_conninfo(), "port=");
	struct strategy *s;
	struct strategy_counter c = counter("ns", "k", 1, 60, 60, 1);

	cr_assert_not_null(port);
	snprintf(ci, sizeof(ci), "host=127.0.0.1,127.0.0.1 port=1,%d dbname=postgres user=postgres",
		 atoi(port + 5));
	/* Set-up (probe, create, prepare) on a busy machine can take a
	 * while: the point is only that the second host is reached. */
	s = make(ci, "t_hostlist", "\"timeout_ms\": 5000");
	cr_assert(wait_ready(s, 8000), "not ready through the second host");
	push_ok(s, &c, 1);
	ops->destroy(s);
}

/* ------------------------------------------------------------------------
 * Table and counters.
 */
Test(postgres, table_created_if_missing)
{
	struct strategy *s, *s2;
	char out[256];

	cr_assert_eq(query_int("SELECT count(*) FROM pg_class WHERE relname = 't_created'"), 0);
	s = make_ready("t_created", NULL);
	cr_assert_eq(query_int("SELECT count(*) FROM pg_class WHERE relname = 't_created'"), 1);
	cr_assert_eq(query_int("SELECT count(*) FROM pg_indexes WHERE tablename = 't_created' "
			       "AND indexdef LIKE '%(namespace, window_start)%'"), 1);
	cr_assert_eq(query_int("SELECT count(*) FROM pg_indexes WHERE tablename = 't_created' "
			       "AND indexdef LIKE '%(namespace, window_size, window_start, key)%'"),
		     1);
	cr_assert_eq(query("SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), "
			   "', ' ORDER BY attnum) FROM pg_attribute WHERE attrelid = "
			   "'t_created'::regclass AND attnum > 0",
			   out, sizeof(out)),
		     1);
	cr_assert_str_eq(out, "namespace text, key bytea, window_start bigint, window_size "
			      "integer, count double precision, reserved double precision");
	/* A second instance finds it and works with it. */
	s2 = make_ready("t_created", NULL);
	ops->destroy(s2);
	ops->destroy(s);
}

/* A table of an earlier version (no reservations' column) gets it, its
 * rows kept, reserving nothing. */
Test(postgres, table_of_an_earlier_version_gets_the_reserved_column)
{
	struct strategy *s;
	struct strategy_counter c[1] = { counter("ns", "old", 3, 600, 60, 2) };
	char out[256];

	cr_assert_geq(query("CREATE TABLE t_old (namespace text NOT NULL, key bytea NOT NULL,"
			    " window_start bigint NOT NULL, window_size integer NOT NULL,"
			    " count double precision NOT NULL,"
			    " PRIMARY KEY (namespace, window_size, window_start, key));"
			    " INSERT INTO t_old VALUES ('ns', 'old', 600, 60, 5)", out, sizeof(out)),
		      0, "%s", out);
	s = make_ready("t_old", NULL);
	push_ok(s, c, 1);
	EQ(c[0].total, 7);
	cr_assert_eq(query_int("SELECT count(*) FROM t_old WHERE reserved = 0"), 1);
	ops->destroy(s);
}

Test(postgres, push_returns_totals_equal_to_diffs)
{
	struct strategy *s = make_ready("t_first_push", NULL);
	struct strategy_counter c[3] = {
		counter("ns", "k1", 2, 600, 60, 1),
		counter("ns", "k2", 2, 600, 60, 2.5),
		counter("ns", "k1", 2, 600, 3600, 3),
	};

	push_ok(s, c, 3);
	EQ(c[0].total, 1);
	EQ(c[1].total, 2.5);
	EQ(c[2].total, 3);
	cr_assert_eq(query_int("SELECT count(*) FROM t_first_push"), 3);
	ops->destroy(s);
}

Test(postgres, second_push_adds)
{
	struct strategy *s = make_ready("t_second_push", NULL);
	struct strategy_counter a = counter("ns", "k", 1, 120, 60, 0.5);
	struct strategy_counter b = counter("ns", "k", 1, 120, 60, 0.25);

	push_ok(s, &a, 1);
	EQ(a.total, 0.5);
	push_ok(s, &b, 1);
	EQ(b.total, 0.75);
	ops->destroy(s);
}

Test(postgres, duplicates_in_one_batch_are_merged)
{
	struct strategy *s = make_ready("t_dups", NULL);
	struct strategy_counter c[4] = {
		counter("ns", "k", 1, 120, 60, 1),
		counter("ns", "other", 5, 120, 60, 0),
		counter("ns", "k", 1, 120, 60, 2),
		counter("ns", "k", 1, 120, 60, 0),
	};

	push_ok(s, c, 4);
	EQ(c[0].total, 3);
	EQ(c[2].total, 3);
	EQ(c[3].total, 3);
	EQ(c[1].total, 0);
	ops->destroy(s);
}

Test(postgres, zero_diff_reads_without_creating_rows)
{
	struct strategy *s = make_ready("t_zero", NULL);
	struct strategy_counter r = counter("ns", "absent", 6, 120, 60, 0);
	struct strategy_counter w = counter("ns", "present", 7, 120, 60, 2);
	struct strategy_counter r2 = counter("ns", "present", 7, 120, 60, 0);

	push_ok(s, &r, 1);
	EQ(r.total, 0);
	cr_assert_eq(query_int("SELECT count(*) FROM t_zero"), 0);
	push_ok(s, &w, 1);
	push_ok(s, &r2, 1);
	EQ(r2.total, 2);
	cr_assert_eq(query_int("SELECT count(*) FROM t_zero"), 1);
	/* +1 and -1 in one batch: a read, not an insert. */
	{
		struct strategy_counter c[2] = { counter("ns", "net0", 4, 120, 60, 1),
						 counter("ns", "net0", 4, 120, 60, -1) };

		push_ok(s, c, 2);
		EQ(c[0].total, 0);
		cr_assert_eq(query_int("SELECT count(*) FROM t_zero"), 1);
	}
	ops->destroy(s);
}

Test(postgres, two_nodes_sum)
{
	struct strategy *n1 = make_ready("t_nodes", NULL);
	struct strategy *n2 = make_ready("t_nodes", NULL);
	struct strategy_counter a[2] = { counter("ns", "x", 1, 60, 60, 1),
					 counter("ns", "y", 1, 60, 60, 10) };
	struct strategy_counter b[2] = { counter("ns", "y", 1, 60, 60, 20),
					 counter("ns", "x", 1, 60, 60, 2) };
	struct strategy_counter g = counter("ns", "x", 1, 60, 60, 99);
	struct done d1 = { 0 }, d2 = { 0 };
	char err[STRATEGY_ERR_MAX];

	push_ok(n1, a, 2);
	push_ok(n2, b, 2);
	EQ(b[1].total, 3);
	EQ(b[0].total, 30);
	/* Concurrent pushes of the same counters (in opposite orders). */
	a[0].diff = a[1].diff = 1;
	b[0].diff = b[1].diff = 1;
	cr_assert_eq(ops->push_diffs(n1, a, 2, NULL, on_done, &d1, err), 0, "%s", err);
	cr_assert_eq(ops->push_diffs(n2, b, 2, NULL, on_done, &d2, err), 0, "%s", err);
	cr_assert(run_until(&d1.called, 5000) && run_until(&d2.called, 5000));
	cr_assert(d1.status == 0 && d2.status == 0, "%s / %s", d1.err, d2.err);
	{
		struct done dg = { 0 };

		cr_assert_eq(ops->get_window(n1, &g, on_done, &dg, err), 0, "%s", err);
		cr_assert(run_until(&dg.called, 5000));
		cr_assert_eq(dg.status, 0, "%s", dg.err);
	}
	cr_assert(g.ok);
	EQ(g.total, 5);
	ops->destroy(n1);
	ops->destroy(n2);
}

Test(postgres, keys_round_trip_byte_exact)
{
	static char long_key[2000];
	static const struct {
		const char *k;
		size_t n;
	} keys[] = {
		{ "a\0b", 3 },       { "\0", 1 },        { "", 0 },
		{ "'", 1 },          { "''; DROP TABLE t_keys; --", 25 },
		{ "\\", 1 },         { "\\x41", 4 },     { "\\\\", 2 },
		{ ",", 1 },          { "{a,b}", 5 },     { "{", 1 },
		{ "}", 1 },          { "\"", 1 },        { "NULL", 4 },
		{ "\xff\xfe\x80", 3 }, { "caf\xc3\xa9", 5 }, { " spaced ", 8 },
		{ "a\nb\tc\r", 6 },  { long_key, sizeof(long_key) },
	};
	enum { NKEYS = sizeof(keys) / sizeof(keys[0]) };
	const char *ns = "ns 'quoted' \"x\" \\ {,} caf\xc3\xa9";
	struct strategy *s = make_ready("t_keys", NULL);
	struct strategy_counter c[NKEYS];
	struct rows d;
	uint32_t size = 60;

	for (size_t i = 0; i < sizeof(long_key); i++)
		long_key[i] = (char)(i * 7 + 3); /* every byte value, NULs included */
	for (size_t i = 0; i < NKEYS; i++)
		c[i] = counter(ns, keys[i].k, keys[i].n, 6000, size, (double)(i + 1));
	push_ok(s, c, NKEYS);
	for (size_t i = 0; i < NKEYS; i++)
		EQ(c[i].total, (double)(i + 1));
	cr_assert_eq(query_int("SELECT count(*) FROM t_keys"), NKEYS);
	cr_assert_eq(query_int("SELECT count(*) FROM t_keys WHERE key = '\\x610062'::bytea "
			       "AND count = 1"),
		     1);
	cr_assert_eq(query_int("SELECT count(*) FROM t_keys WHERE key = '\\x5c'::bytea "
			       "AND count = 6"),
		     1);
	cr_assert_eq(query_int("SELECT max(length(key)) FROM t_keys"), sizeof(long_key));

	fetch_ok(s, ns, &size, 1, 6000 + 30, &d);
	cr_assert_eq(d.n, NKEYS);
	for (size_t i = 0; i < NKEYS; i++) {
		int j = find_row(&d, keys[i].k, keys[i].n, 6000, size);

		cr_assert_geq(j, 0, "key %zu not returned", i);
		EQ(d.r[j].count, (double)(i + 1));
	}
	/* A second push finds the same rows (no new ones). */
	push_ok(s, c, NKEYS);
	EQ(c[NKEYS - 1].total, 2.0 * NKEYS);
	cr_assert_eq(query_int("SELECT count(*) FROM t_keys"), NKEYS);
	ops->destroy(s);
}

Test(postgres, get_counters_returns_current_and_previous_windows)
{
	struct strategy *s = make_ready("t_fetch", NULL);
	const int64_t now = 100000 + 30; /* 100000 = 1666 * 60 + 40 */
	const int64_t cur60 = now - now % 60, cur3600 = now - now % 3600;
	struct strategy_counter c[] = {
		counter("a", "k", 1, cur60, 60, 1),              /* current */
		counter("a", "k", 1, cur60 - 60, 60, 2),         /* previous */
		counter("a", "k", 1, cur60 - 120, 60, 4),        /* too old */
		counter("a", "k", 1, cur60 + 60, 60, 8),         /* next */
		counter("a", "k2", 2, cur3600, 3600, 16),        /* current */
		counter("a", "k2", 2, cur3600 - 3600, 3600, 32), /* previous */
		counter("a", "k", 1, cur60, 30, 64),             /* size not asked */
		counter("b", "k", 1, cur60, 60, 128),            /* other namespace */
		counter("ab", "k", 1, cur60, 60, 256),           /* prefix namespace */
	};
	uint32_t sizes[] = { 60, 3600, 60 };
	struct rows d;

	push_ok(s, c, sizeof(c) / sizeof(c[0]));
	fetch_ok(s, "a", sizes, 3, now, &d);
	cr_assert_eq(d.n, 4, "%zu rows", d.n);
	EQ(d.r[find_row(&d, "k", 1, cur60, 60)].count, 1);
	EQ(d.r[find_row(&d, "k", 1, cur60 - 60, 60)].count, 2);
	EQ(d.r[find_row(&d, "k2", 2, cur3600, 3600)].count, 16);
	EQ(d.r[find_row(&d, "k2", 2, cur3600 - 3600, 3600)].count, 32);
	/* An unknown namespace has no rows. */
	fetch_ok(s, "zzz", sizes, 2, now, &d);
	cr_assert_eq(d.n, 0);
	ops->destroy(s);
}

Test(postgres, get_window)
{
	struct strategy *s = make_ready("t_get", NULL);
	struct strategy_counter w = counter("ns", "k", 1, 600, 60, 4.5);
	struct strategy_counter g = counter("ns", "k", 1, 600, 60, 123); /* diff ignored */
	struct strategy_counter m = counter("ns", "missing", 7, 600, 60, 1);
	struct done d = { 0 }, dm = { 0 };
	char err[STRATEGY_ERR_MAX];

	push_ok(s, &w, 1);
	cr_assert_eq(ops->get_window(s, &g, on_done, &d, err), 0, "%s", err);
	cr_assert_eq(ops->get_window(s, &m, on_done, &dm, err), 0, "%s", err);
	cr_assert(run_until(&d.called, 5000) && run_until(&dm.called, 5000));
	cr_assert(d.status == 0 && dm.status == 0, "%s / %s", d.err, dm.err);
	cr_assert(g.ok && m.ok);
	EQ(g.total, 4.5);
	EQ(m.total, 0);
	cr_assert_eq(query_int("SELECT count(*) FROM t_get"), 1, "get_window wrote");
	ops->destroy(s);
}

Test(postgres, purge_deletes_old_windows_only)
{
	struct strategy *s = make_ready("t_purge", NULL);
	const int64_t now = 60000 + 10;
	struct strategy_counter c[] = {
		counter("a", "k", 1, 60000, 60, 1),        /* current: kept */
		counter("a", "k", 1, 60000 - 60, 60, 1),   /* previous: kept */
		counter("a", "k", 1, 60000 - 120, 60, 1),  /* older: deleted */
		counter("a", "k", 1, 60000 - 600, 60, 1),  /* older: deleted */
		counter("a", "k", 1, 60000 - 120, 3600, 1), /* other size: kept */
		counter("b", "k", 1, 60000 - 600, 60, 1),  /* other namespace: kept */
	};
	uint32_t sizes[] = { 60 };
	struct done d = { 0 };
	char err[STRATEGY_ERR_MAX];

	push_ok(s, c, sizeof(c) / sizeof(c[0]));
	cr_assert_eq(ops->purge(s, "a", 1, sizes, 1, now, on_done, &d, err), 0, "%s", err);
	cr_assert(run_until(&d.called, 5000));
	cr_assert_eq(d.status, 0, "%s", d.err);
	cr_assert_eq(query_int("SELECT count(*) FROM t_purge"), 4);
	cr_assert_eq(query_int("SELECT count(*) FROM t_purge WHERE namespace = 'a' AND "
			       "window_size = 60 AND window_start < 60000 - 60"),
		     0);
	ops->destroy(s);
}

Test(postgres, periodic_purge)
{
	struct strategy *s = make_ready("t_maint", "\"purge_interval_s\": 1");
	const int64_t now = (int64_t)time(NULL);
	const int64_t cur = now - now % 60;
	struct strategy_counter c[] = {
		counter("m", "k", 1, cur, 60, 1),
		counter("m", "k", 1, cur - 600, 60, 1),
		counter("m", "k", 1, cur - 6000, 60, 1),
	};

	push_ok(s, c, 3);
	cr_assert_eq(query_int("SELECT count(*) FROM t_maint"), 3);
	run_for(1600);
	cr_assert_eq(query_int("SELECT count(*) FROM t_maint"), 1, "old windows not purged");
	ops->destroy(s);
}

Test(postgres, batch_of_10k)
{
	enum { N = 10000 };
	struct strategy *s = make_ready("t_10k", NULL);
	struct strategy_counter *c = calloc(N, sizeof(*c));
	char(*keys)[16] = calloc(N, 16);
	double t0;

	cr_assert(c && keys);
	for (size_t i = 0; i < N; i++) {
		int n = snprintf(keys[i], 16, "k%zu", i);

		c[i] = counter("big", keys[i], (size_t)n, 600, 60, (double)(i % 7) + 1);
	}
	t0 = mono();
	push_ok(s, c, N);
	for (size_t i = 0; i < N; i++)
		EQ(c[i].total, (double)(i % 7) + 1);
	push_ok(s, c, N);
	for (size_t i = 0; i < N; i++)
		EQ(c[i].total, 2.0 * ((double)(i % 7) + 1));
	cr_log_info("2 x 10k pushes: %.0f ms", (mono() - t0) * 1000);
	cr_assert_eq(query_int("SELECT count(*) FROM t_10k"), N);
	ops->destroy(s);
	free(c);
	free(keys);
}

Test(postgres, concurrent_overlapping_pushes_sum)
{
	enum { N = 5000, ROUNDS = 3 };
	struct strategy *n1 = make_ready("t_overlap", NULL);
	struct strategy *n2 = make_ready("t_overlap", NULL);
	struct strategy_counter *a = calloc(N, sizeof(*a)), *b = calloc(N, sizeof(*b));
	char(*keys)[16] = calloc(N, 16);
	char err[STRATEGY_ERR_MAX];

	cr_assert(a && b && keys);
	for (size_t i = 0; i < N; i++) {
		int n = snprintf(keys[i], 16, "k%zu", i);

		/* the same counters, in opposite orders */
		a[i] = counter("ov", keys[i], (size_t)n, 600, 60, 1);
		b[N - 1 - i] = counter("ov", keys[i], (size_t)n, 600, 60, 2);
	}
	for (int r = 0; r < ROUNDS; r++) {
		struct done d1 = { 0 }, d2 = { 0 };

		cr_assert_eq(ops->push_diffs(n1, a, N, NULL, on_done, &d1, err), 0, "%s", err);
		cr_assert_eq(ops->push_diffs(n2, b, N, NULL, on_done, &d2, err), 0, "%s", err);
		cr_assert(run_until(&d1.called, 20000) && run_until(&d2.called, 20000));
		cr_assert(d1.status == 0 && d2.status == 0, "%s / %s", d1.err, d2.err);
	}
	cr_assert_eq(query_int("SELECT count(*) FROM t_overlap WHERE count = 9"), N);
	/* Whoever pushed last saw the final total. */
	cr_assert(a[0].total == 9 || b[N - 1].total == 9);
	ops->destroy(n1);
	ops->destroy(n2);
	free(a);
	free(b);
	free(keys);
}

/* Each chunk of a push is its own transaction: when one fails, the
 * counters of the chunks that committed come back ok with their totals,
 * the others not, and the push fails. (The strategy uses the table made
 * here, which refuses one key.) */
Test(postgres, failed_chunk_fails_the_push_and_only_its_counters)
{
	enum { N = 5000 };
	struct strategy *s;
	struct strategy_counter *c = calloc(N + 1, sizeof(*c));
	char(*keys)[16] = calloc(N, 16);
	struct done d = { 0 };
	char out[256], err[STRATEGY_ERR_MAX];
	size_t ok = 0;

	cr_assert(c && keys);
	cr_assert_eq(query("CREATE TABLE t_chunkfail (namespace text NOT NULL, key bytea NOT NULL, "
			   "window_start bigint NOT NULL, window_size integer NOT NULL, "
			   "count double precision NOT NULL CHECK (key <> '\\x7a626164'::bytea), "
			   "PRIMARY KEY (namespace, window_size, window_start, key))",
			   out, sizeof(out)),
		     0, "%s", out);
	s = make_ready("t_chunkfail", NULL);
	for (size_t i = 0; i < N; i++) {
		int n = snprintf(keys[i], 16, "k%05zu", i);

		c[i] = counter("cf", keys[i], (size_t)n, 600, 60, 1);
	}
	c[N] = counter("cf", "zbad", 4, 600, 60, 1); /* sorts last: the last chunk */
	cr_assert_eq(ops->push_diffs(s, c, N + 1, NULL, on_done, &d, err), 0, "%s", err);
	cr_assert(run_until(&d.called, 10000));
	cr_assert_eq(d.status, -1);
	cr_assert(strstr(d.err, "check constraint"), "%s", d.err);
	for (size_t i = 0; i <= N; i++) {
		if (c[i].ok) {
			ok++;
			EQ(c[i].total, 1);
		}
	}
	cr_assert(!c[N].ok);
	cr_assert(ok > 0 && ok < N, "%zu ok", ok);
	cr_assert_eq(query_int("SELECT count(*) FROM t_chunkfail"), (long long)ok);
	/* The key that failed fails alone next time. */
	memset(&d, 0, sizeof(d));
	cr_assert_eq(ops->push_diffs(s, c, N, NULL, on_done, &d, err), 0, "%s", err);
	cr_assert(run_until(&d.called, 10000));
	cr_assert_eq(d.status, 0, "%s", d.err);
	ops->destroy(s);
	free(c);
	free(keys);
}

/* Results of a shape we do not expect (here: a table made by someone else
 * with other column types) are errors, never misread. */
Test(postgres, unexpected_result_types_are_errors)
{
	struct strategy *s;
	struct strategy_counter c = counter("ns", "k", 1, 60, 60, 1);
	struct done d = { 0 };
	struct rows r;
	char out[256], err[STRATEGY_ERR_MAX];
	uint32_t size = 60;

	cr_assert_eq(query("CREATE TABLE t_types (namespace text NOT NULL, key bytea NOT NULL, "
			   "window_start integer NOT NULL, window_size integer NOT NULL, "
			   "count numeric NOT NULL, "
			   "PRIMARY KEY (namespace, window_size, window_start, key))",
			   out, sizeof(out)),
		     0, "%s", out);
	s = make_ready("t_types", NULL);
	cr_assert_eq(ops->push_diffs(s, &c, 1, NULL, on_done, &d, err), 0, "%s", err);
	cr_assert(run_until(&d.called, 5000));
	cr_assert_eq(d.status, -1);
	cr_assert(strstr(d.err, "shape"), "%s", d.err);
	cr_assert(!c.ok);
	memset(&r, 0, sizeof(r));
	cr_assert_eq(ops->get_counters(s, "ns", 2, &size, 1, 60, on_rows, &r, err), 0, "%s", err);
	cr_assert(run_until(&r.called, 5000));
	cr_assert_eq(r.status, -1);
	cr_assert(strstr(r.err, "shape"), "%s", r.err);
	/* The connection stays usable. */
	cr_assert(ops->ready(s));
	ops->destroy(s);
}

/* The pool: pool_size connections (named spoa-ratelimit unless conninfo
 * says otherwise), and a big push spread over them gives the same totals
 * as one connection. */
Test(postgres, pool_sizes)
{
	enum { N = 12000 };
	struct strategy_counter *c = calloc(N, sizeof(*c));
	char(*keys)[16] = calloc(N, 16);
	char ci[512];

	cr_assert(c && keys);
	for (size_t i = 0; i < N; i++) {
		int n = snprintf(keys[i], 16, "p%zu", i);

		c[i] = counter("pool", keys[i], (size_t)n, 600, 60, 1);
	}
	for (int pool = 1; pool <= 3; pool++) {
		char extra[64], sql[256];
		struct strategy *s;

		snprintf(ci, sizeof(ci), "%s application_name=t_pool_%d", shared_conninfo(), pool);
		snprintf(extra, sizeof(extra), "\"pool_size\": %d", pool);
		s = make(ci, "t_pool", extra);
		cr_assert(wait_ready(s, 5000));
		run_for(100); /* every connection set up */
		snprintf(sql, sizeof(sql), "SELECT count(*) FROM pg_stat_activity WHERE "
					   "application_name = 't_pool_%d'", pool);
		cr_assert_eq(query_int(sql), pool);
		push_ok(s, c, N);
		for (size_t i = 0; i < N; i++)
			EQ(c[i].total, pool);
		ops->destroy(s);
	}
	{
		struct strategy *s = make_ready("t_pool", NULL);

		run_for(100);
		cr_assert_eq(query_int("SELECT count(*) FROM pg_stat_activity WHERE "
				       "application_name = 'spoa-ratelimit' "
				       "AND query LIKE '%t_pool%'"),
			     2);
		ops->destroy(s);
	}
	free(c);
	free(keys);
}

/* ------------------------------------------------------------------------
 * The asynchronous contract.
 */
Test(postgres, callbacks_never_run_inside_the_call)
{
	struct strategy *s = make_ready("t_async", NULL);
	struct strategy_counter c = counter("ns", "k", 1, 60, 60, 1);
	struct strategy_counter bad = counter("ns", "k", 1, 60, 0, 1);
	struct done d = { 0 };
	struct rows r = { 0 };
	char err[STRATEGY_ERR_MAX] = "";
	uint32_t size = 60;

	cr_assert_eq(ops->push_diffs(s, &c, 1, NULL, on_done, &d, err), 0, "%s", err);
	cr_assert_eq(ops->get_counters(s, "ns", 2, &size, 1, 60, on_rows, &r, err), 0, "%s", err);
	cr_assert(!d.called && !r.called, "callback ran inside the call");
	cr_assert(run_until(&r.called, 5000));
	cr_assert(d.called, "operations out of order");
	cr_assert_eq(r.n, 1);
	/* Refused at once: -1 and errstr, never a callback. */
	memset(&d, 0, sizeof(d));
	cr_assert_eq(ops->push_diffs(s, &bad, 1, NULL, on_done, &d, err), -1);
	cr_assert(strstr(err, "size"), "%s", err);
	run_for(50);
	cr_assert(!d.called);
	/* An empty batch completes too. */
	cr_assert_eq(ops->push_diffs(s, NULL, 0, NULL, on_done, &d, err), 0, "%s", err);
	cr_assert(!d.called);
	cr_assert(run_until(&d.called, 5000));
	cr_assert_eq(d.status, 0);
	ops->destroy(s);
}

Test(postgres, queue_is_bounded)
{
	enum { N = 100 };
	struct strategy *s = make_ready("t_queue", NULL);
	struct strategy_counter c[N];
	struct done d[N];
	char err[STRATEGY_ERR_MAX];
	int accepted = 0, refused = 0;

	memset(d, 0, sizeof(d));
	for (int i = 0; i < N; i++) {
		c[i] = counter("ns", "k", 1, 60, 60, 1);
		if (ops->push_diffs(s, &c[i], 1, NULL, on_done, &d[i], err) == 0) {
			accepted++;
		} else {
			refused++;
			cr_assert(strstr(err, "queue full"), "%s", err);
		}
	}
	cr_assert(accepted >= 8 && refused > 0, "accepted %d refused %d", accepted, refused);
	for (int i = 0; i < accepted; i++) {
		cr_assert(run_until(&d[i].called, 10000));
		cr_assert_eq(d[i].status, 0, "%s", d[i].err);
		EQ(c[i].total, i + 1);
	}
	ops->destroy(s);
}

Test(postgres, destroy_fails_pending_operations)
{
	struct strategy *s = make_ready("t_destroy", NULL);
	struct strategy_counter c[3] = { counter("ns", "a", 1, 60, 60, 1),
					 counter("ns", "b", 1, 60, 60, 1),
					 counter("ns", "c", 1, 60, 60, 1) };
	struct done d[3] = { 0 };
	struct rows r = { 0 };
	uint32_t size = 60;
	char err[STRATEGY_ERR_MAX];

	for (int i = 0; i < 3; i++)
		cr_assert_eq(ops->push_diffs(s, &c[i], 1, NULL, on_done, &d[i], err), 0, "%s", err);
	cr_assert_eq(ops->get_counters(s, "ns", 2, &size, 1, 60, on_rows, &r, err), 0, "%s", err);
	ev_run(loop, EVRUN_NOWAIT); /* the first one is likely in flight now */
	ops->destroy(s);
	for (int i = 0; i < 3; i++) {
		cr_assert(d[i].called, "callback %d not run by destroy", i);
		cr_assert_eq(d[i].calls, 1);
		if (d[i].status != 0)
			cr_assert(!c[i].ok);
	}
	cr_assert(r.called && r.status == -1);
	run_for(50); /* nothing fires on the freed instance (ASan) */
}

struct self_destroy {
	struct strategy *s;
	int calls;
	struct done second;
};

static void destroy_in_cb(void *arg, int status, const char *errstr)
{
	struct self_destroy *sd = arg;

	(void)status;
	(void)errstr;
	sd->calls++;
	ops->destroy(sd->s); /* the second operation fails inside this call */
}

Test(postgres, destroy_from_inside_a_callback)
{
	struct self_destroy sd = { 0 };
	struct strategy_counter a = counter("ns", "a", 1, 60, 60, 1);
	struct strategy_counter b = counter("ns", "b", 1, 60, 60, 1);
	char err[STRATEGY_ERR_MAX];
	double end;

	sd.s = make_ready("t_selfdestroy", NULL);
	cr_assert_eq(ops->push_diffs(sd.s, &a, 1, NULL, destroy_in_cb, &sd, err), 0, "%s", err);
	cr_assert_eq(ops->push_diffs(sd.s, &b, 1, NULL, on_done, &sd.second, err), 0, "%s", err);
	end = mono() + 5;
	while (!sd.calls && mono() < end)
		ev_run(loop, EVRUN_ONCE);
	cr_assert_eq(sd.calls, 1);
	cr_assert(sd.second.called && sd.second.status == -1);
	run_for(50);
}

Test(postgres, refused_at_once_while_down)
{
	struct strategy *s = make("host=127.0.0.1 port=1", "t_down", "\"timeout_ms\": 200");
	struct strategy_counter c = counter("ns", "k", 1, 60, 60, 1);
	struct done d = { 0 };
	char err[STRATEGY_ERR_MAX] = "";
	int rc = 0;

	run_for(100); /* the first attempt fails (connection refused) */
	cr_assert(!ops->ready(s));
	rc = ops->push_diffs(s, &c, 1, NULL, on_done, &d, err);
	if (rc == 0) { /* caught during a reconnect attempt: fails in time */
		cr_assert(run_until(&d.called, 1000));
		cr_assert_eq(d.status, -1);
	} else {
		cr_assert(strstr(err, "not connected"), "%s", err);
		cr_assert(strstr(err, "refused"), "%s", err);
	}
	cr_assert(!d.called || rc == 0);
	ops->destroy(s);
}

Test(postgres, table_of_another_shape_is_an_error_value)
{
	struct strategy *s;
	struct strategy_counter c = counter("ns", "k", 1, 60, 60, 1);
	struct done d = { 0 };
	char out[256], err[STRATEGY_ERR_MAX] = "";

	cr_assert_eq(query("CREATE TABLE t_shape (namespace text, other int)", out, sizeof(out)),
		     0, "%s", out);
	s = make(shared_conninfo(), "t_shape", NULL);
	run_for(300);
	cr_assert(!ops->ready(s));
	if (ops->push_diffs(s, &c, 1, NULL, on_done, &d, err) == 0) {
		cr_assert(run_until(&d.called, 2000));
		snprintf(err, sizeof(err), "%s", d.err);
	}
	cr_assert(strstr(err, "column"), "error does not say why: %s", err);
	ops->destroy(s);
}

/* ------------------------------------------------------------------------
 * Push tokens: a push is applied at most once per token.
 */

/* Pushes with token and waits; returns the status (the callback ran). */
static int push_tok(struct strategy *s, struct strategy_counter *c, size_t n, const char *token,
		    struct done *d)
{
	char err[STRATEGY_ERR_MAX] = "";

	memset(d, 0, sizeof(*d));
	cr_assert_eq(ops->push_diffs(s, c, n, token, on_done, d, err), 0, "push refused: %s", err);
	cr_assert(run_until(&d->called, 20000), "push: no callback");
	return d->status;
}

/* n counters "k00000".. in namespace ns, counter i with diff 1 + i % 3. */
static struct strategy_counter *tok_batch(const char *ns, size_t n, char (**keys)[16])
{
	struct strategy_counter *c = calloc(n, sizeof(*c));

	*keys = calloc(n, 16);
	cr_assert(c && *keys);
	for (size_t i = 0; i < n; i++) {
		int len = snprintf((*keys)[i], 16, "k%05zu", i);

		c[i] = counter(ns, (*keys)[i], (size_t)len, 600, 60, (double)(1 + i % 3));
	}
	return c;
}

Test(postgres, token_same_batch_twice_adds_once)
{
	enum { N = 5000 }; /* 3 chunks */
	struct strategy *s = make_ready("t_tok_same", NULL);
	char(*keys)[16];
	struct strategy_counter *c = tok_batch("ts", N, &keys);
	struct done d;

	c[N - 1] = c[0]; /* a duplicate: merged, counted twice, once */
	cr_assert_eq(push_tok(s, c, N, "push-1", &d), 0, "%s", d.err);
	for (size_t i = 0; i < N; i++)
		cr_assert(c[i].ok);
	EQ(c[0].total, 2);
	EQ(c[1].total, 2);
	cr_assert_eq(query_int("SELECT count(*) FROM t_tok_same_tokens"), 3);
	for (int again = 0; again < 2; again++) {
		for (size_t i = 0; i < N; i++)
			c[i].total = -1;
		cr_assert_eq(push_tok(s, c, N, "push-1", &d), 0, "%s", d.err);
		for (size_t i = 0; i < N; i++) {
			cr_assert(c[i].ok, "counter %zu not ok", i);
			EQ(c[i].total, i == 0 || i == N - 1 ? 2 : (double)(1 + i % 3));
		}
	}
	cr_assert_eq(query_int("SELECT count(*) FROM t_tok_same"), N - 1);
	cr_assert_eq(query_int("SELECT sum(count)::bigint FROM t_tok_same"),
		     query_int("SELECT sum(1 + i % 3) FROM generate_series(0, 4998) i") + 1);
	cr_assert_eq(query_int("SELECT count(*) FROM t_tok_same_tokens"), 3);
	ops->destroy(s);
	free(c);
	free(keys);
}

Test(postgres, token_different_tokens_add_twice)
{
	struct strategy *s = make_ready("t_tok_diff", NULL);
	struct strategy_counter c[] = {
		counter("td", "a", 1, 600, 60, 1),
		counter("td", "b", 1, 600, 60, 2.5),
		counter("td", "z", 1, 600, 60, 0), /* a read: no token needed */
	};
	struct done d;

	cr_assert_eq(push_tok(s, c, 3, "A", &d), 0, "%s", d.err);
	cr_assert_eq(push_tok(s, c, 3, "B", &d), 0, "%s", d.err);
	cr_assert(c[0].ok && c[1].ok && c[2].ok);
	EQ(c[0].total, 2);
	EQ(c[1].total, 5);
	EQ(c[2].total, 0);
	cr_assert_eq(push_tok(s, c, 3, "A", &d), 0, "%s", d.err);
	EQ(c[0].total, 2);
	EQ(c[1].total, 5);
	cr_assert_eq(query_int("SELECT count(*) FROM t_tok_diff"), 2, "a read created a row");
	ops->destroy(s);
}

Test(postgres, token_null_as_before)
{
	struct strategy *s = make_ready("t_tok_null", NULL);
	struct strategy_counter c = counter("tn", "k", 1, 600, 60, 1);
	struct done d;
	char err[STRATEGY_ERR_MAX];
	char big[STRATEGY_TOKEN_MAX + 2];

	cr_assert_eq(push_tok(s, &c, 1, NULL, &d), 0, "%s", d.err);
	cr_assert_eq(push_tok(s, &c, 1, NULL, &d), 0, "%s", d.err);
	cr_assert(c.ok);
	EQ(c.total, 2);
	cr_assert_eq(query_int("SELECT count(*) FROM t_tok_null_tokens"), 0);
	/* Tokens of at most STRATEGY_TOKEN_MAX bytes, not empty. */
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	cr_assert_eq(ops->push_diffs(s, &c, 1, big, on_done, &d, err), -1);
	cr_assert(strstr(err, "token"), "%s", err);
	cr_assert_eq(ops->push_diffs(s, &c, 1, "", on_done, &d, err), -1);
	big[STRATEGY_TOKEN_MAX] = '\0';
	cr_assert_eq(push_tok(s, &c, 1, big, &d), 0, "%s", d.err);
	EQ(c.total, 3);
	ops->destroy(s);
}

Test(postgres, token_purge_deletes_old_tokens)
{
	struct strategy *s = make_ready("t_tok_purge", NULL);
	struct strategy_counter c = counter("tp", "k", 1, 600, 60, 1);
	struct strategy_counter c2 = counter("tp", "k2", 2, 600, 60, 1);
	uint32_t size = 60;
	struct done d;
	char err[STRATEGY_ERR_MAX];

	cr_assert_eq(push_tok(s, &c, 1, "old", &d), 0, "%s", d.err);
	cr_assert_eq(push_tok(s, &c2, 1, "new", &d), 0, "%s", d.err);
	cr_assert_eq(query_int("SELECT count(*) FROM t_tok_purge_tokens"), 2);
	cr_assert_eq(query_int("WITH u AS (UPDATE t_tok_purge_tokens SET at = now() - interval "
			       "'601 seconds' WHERE token LIKE 'old:%' RETURNING 1) "
			       "SELECT count(*) FROM u"),
		     1);
	memset(&d, 0, sizeof(d));
	cr_assert_eq(ops->purge(s, "tp", 2, &size, 1, 600 + 30, on_done, &d, err), 0, "%s", err);
	cr_assert(run_until(&d.called, 5000));
	cr_assert_eq(d.status, 0, "%s", d.err);
	cr_assert_eq(query_int("SELECT count(*) FROM t_tok_purge_tokens WHERE token LIKE 'old:%'"),
		     0, "old token kept");
	cr_assert_eq(query_int("SELECT count(*) FROM t_tok_purge_tokens WHERE token LIKE 'new:%'"),
		     1, "recent token deleted");
	/* Forgotten: the same token applies again; the kept one does not. */
	cr_assert_eq(push_tok(s, &c, 1, "old", &d), 0, "%s", d.err);
	EQ(c.total, 2);
	cr_assert_eq(push_tok(s, &c2, 1, "new", &d), 0, "%s", d.err);
	EQ(c2.total, 1);
	ops->destroy(s);
}

/* A failed chunk rolls its token back; the caller resends the counters
 * that were not confirmed, with the same token: the same chunks come out
 * (confirmed ones are not resent), the failed one applies once it can,
 * and a resend of everything adds nothing. */
Test(postgres, token_resend_of_unconfirmed_counters)
{
	enum { N = 5000 };
	struct strategy *s;
	char(*keys)[16];
	struct strategy_counter *c = tok_batch("tr", N + 1, &keys), *r = calloc(N + 1, sizeof(*r));
	struct done d;
	char out[256];
	size_t nr = 0;

	cr_assert(r);
	cr_assert_eq(query("CREATE TABLE t_tok_resend (namespace text NOT NULL, key bytea NOT NULL, "
			   "window_start bigint NOT NULL, window_size integer NOT NULL, "
			   "count double precision NOT NULL CONSTRAINT no_zbad "
			   "CHECK (key <> '\\x7a626164'::bytea), "
			   "PRIMARY KEY (namespace, window_size, window_start, key))",
			   out, sizeof(out)),
		     0, "%s", out);
	s = make_ready("t_tok_resend", NULL);
	c[N] = counter("tr", "zbad", 4, 600, 60, 1); /* sorts last: the last chunk */
	/* Shuffled a bit: the batch's order is not the store's. */
	for (size_t i = 0; i + 7 < N; i += 7) {
		struct strategy_counter t = c[i];

		c[i] = c[i + 5];
		c[i + 5] = t;
	}
	cr_assert_eq(push_tok(s, c, N + 1, "resend", &d), -1);
	for (size_t i = 0; i <= N; i++)
		if (!c[i].ok)
			r[nr++] = c[i];
	cr_assert(nr > 1 && nr < N, "%zu unconfirmed", nr);
	cr_assert_eq(push_tok(s, r, nr, "resend", &d), -1, "the check still fails");
	cr_assert_eq(query("ALTER TABLE t_tok_resend DROP CONSTRAINT no_zbad", out, sizeof(out)), 0,
		     "%s", out);
	for (size_t i = 0; i < nr; i++)
		r[i].ok = false;
	cr_assert_eq(push_tok(s, r, nr, "resend", &d), 0, "%s", d.err);
	for (size_t i = 0; i < nr; i++)
		cr_assert(r[i].ok);
	/* Everything again, same token: every chunk is known. */
	cr_assert_eq(push_tok(s, c, N + 1, "resend", &d), 0, "%s", d.err);
	for (size_t i = 0; i <= N; i++) {
		cr_assert(c[i].ok);
		EQ(c[i].total, c[i].diff);
	}
	cr_assert_eq(query_int("SELECT count(*) FROM t_tok_resend WHERE CASE WHEN key = 'zbad' "
			       "THEN count = 1 ELSE count = 1 + "
			       "(substr(convert_from(key, 'UTF8'), 2)::int % 3) END"),
		     N + 1);
	ops->destroy(s);
	free(c);
	free(r);
	free(keys);
}

/* ------------------------------------------------------------------------
 * A store that stops answering, or goes away and comes back.
 */
static struct pg_server own;

/* Test .init/.fini run inside the suite's (the loop exists already). */
static void own_start(void)
{
	const char *tpl = getenv(ENV_TEMPLATE);

	cr_assert(tpl && *tpl, "no template cluster");
	cr_assert_eq(pg_server_create(&own, tpl), 0, "%s", own.err);
	cr_assert_eq(pg_server_start(&own, 20000), 0, "%s", own.err);
}

static void own_stop(void)
{
	pg_server_destroy(&own);
}

Test(postgres, paused_server_times_out_then_recovers, .init = own_start, .fini = own_stop)
{
	const int timeout_ms = 300;
	struct strategy *s = make(own.conninfo, "t_pause", "\"timeout_ms\": 300");
	struct strategy_counter c = counter("ns", "k", 1, 60, 60, 1);
	struct done d = { 0 };
	char err[STRATEGY_ERR_MAX];
	double t0;

	cr_assert(wait_ready(s, 5000));
	push_ok(s, &c, 1);
	cr_assert_eq(pg_server_pause(&own), 0);
	t0 = mono();
	cr_assert_eq(ops->push_diffs(s, &c, 1, NULL, on_done, &d, err), 0, "%s", err);
	cr_assert(run_until(&d.called, 5000), "no callback while paused");
	cr_assert_eq(d.status, -1);
	cr_assert_str_eq(d.err, "timeout");
	cr_assert_leq(d.at - t0, (timeout_ms + 200) / 1000.0, "failed after %.0f ms",
		      (d.at - t0) * 1000);
	cr_assert_geq(d.at - t0, (timeout_ms - 20) / 1000.0, "failed early: %.0f ms",
		      (d.at - t0) * 1000);
	cr_log_info("paused store: push failed (\"%s\") after %.0f ms, timeout_ms %d", d.err,
		    (d.at - t0) * 1000, timeout_ms);
	cr_assert(!c.ok);
	cr_assert(!ops->ready(s));
	/* Submitted while connecting to the paused server: queued, then
	 * failed by its own timer. */
	run_for(100);
	{
		struct rows r = { 0 };
		uint32_t size = 60;
		int rc = ops->get_counters(s, "ns", 2, &size, 1, 60, on_rows, &r, err);

		t0 = mono();
		if (rc == 0) {
			cr_assert(run_until(&r.called, 5000));
			cr_assert_eq(r.status, -1);
			cr_assert_leq(mono() - t0, (timeout_ms + 200) / 1000.0);
		} else {
			cr_assert(strstr(err, "not connected"), "%s", err);
		}
	}
	run_for(500); /* reconnect attempts against the paused server fail */
	cr_assert(!ops->ready(s));
	cr_assert_eq(pg_server_resume(&own), 0);
	t0 = mono();
	cr_assert(wait_ready(s, 6000), "no reconnection after SIGCONT");
	cr_log_info("ready again %.0f ms after SIGCONT", (mono() - t0) * 1000);
	c.diff = 2;
	push_ok(s, &c, 1);
	/* The timed-out push may or may not have been applied: 1 + 2 (+1). */
	cr_assert(c.total == 3 || c.total == 4, "total %g", c.total);
	ops->destroy(s);
}

Test(postgres, restarted_server_reconnects, .init = own_start, .fini = own_stop)
{
	struct strategy *s = make(own.conninfo, "t_restart", "\"timeout_ms\": 300");
	struct strategy_counter c = counter("ns", "k", 1, 60, 60, 1);
	struct done d = { 0 };
	char err[STRATEGY_ERR_MAX];
	double end;

	cr_assert(wait_ready(s, 5000));
	push_ok(s, &c, 1);
	cr_assert_eq(pg_server_stop(&own, 5000), 0);
	/* The loss is noticed without any operation. */
	end = mono() + 2;
	while (ops->ready(s) && mono() < end)
		ev_run(loop, EVRUN_ONCE);
	cr_assert(!ops->ready(s), "still ready with the server stopped");
	if (ops->push_diffs(s, &c, 1, NULL, on_done, &d, err) == 0) {
		cr_assert(run_until(&d.called, 1000));
		cr_assert_eq(d.status, -1);
	}
	run_for(300);
	cr_assert_eq(pg_server_start(&own, 20000), 0, "%s", own.err);
	cr_assert(wait_ready(s, 6000), "no reconnection after restart");
	c.diff = 2;
	push_ok(s, &c, 1);
	EQ(c.total, 3);
	ops->destroy(s);
}

/* Reads an integer from the own server. */
static long long own_int(const char *sql)
{
	char out[256];

	cr_assert_geq(pg_server_query(own.conninfo, sql, out, sizeof(out)), 0, "%s: %s", sql, out);
	return atoll(out);
}

/* A push times out on a paused server; resumed, the server commits what
 * it had (its client is gone by then); the push resent with the same
 * token counts every counter once. Twice: once after the stuck backends
 * ended, once racing them. */
Test(postgres, token_resend_after_timeout_counts_once, .init = own_start, .fini = own_stop)
{
	struct strategy *s = make(own.conninfo, "t_tok_pause", "\"timeout_ms\": 300");
	struct strategy_counter c[] = {
		counter("tq", "a", 1, 600, 60, 10),
		counter("tq", "b", 1, 600, 60, 10),
		counter("tq", "c", 1, 600, 60, 10),
	};
	const char *tokens[] = { "pause-1", "pause-2" };
	double want[3] = { 10, 10, 10 };
	struct done d;

	cr_assert(wait_ready(s, 5000));
	cr_assert_eq(push_tok(s, c, 3, NULL, &d), 0, "%s", d.err);
	for (int round = 0; round < 2; round++) {
		char pids[256], sql[512];

		cr_assert_geq(pg_server_query(own.conninfo,
					      "SELECT string_agg(pid::text, ',') FROM "
					      "pg_stat_activity WHERE application_name = "
					      "'spoa-ratelimit'",
					      pids, sizeof(pids)),
			      0, "%s", pids);
		for (int i = 0; i < 3; i++)
			c[i].diff = i + 1;
		cr_assert_eq(pg_server_pause(&own), 0);
		cr_assert_eq(push_tok(s, c, 3, tokens[round], &d), -1);
		cr_assert_str_eq(d.err, "timeout");
		cr_assert(!c[0].ok && !c[1].ok && !c[2].ok);
		run_for(100);
		cr_assert_eq(pg_server_resume(&own), 0);
		if (round == 0) {
			/* Let the stuck backends run what they had and end. */
			double end = mono() + 5;

			snprintf(sql, sizeof(sql),
				 "SELECT count(*) FROM pg_stat_activity WHERE pid IN (%s)", pids);
			while (own_int(sql) > 0 && mono() < end)
				usleep(20000);
			cr_assert_eq(own_int(sql), 0, "the stuck backends did not end");
			snprintf(sql, sizeof(sql),
				 "SELECT count(*) FROM t_tok_pause_tokens WHERE token LIKE '%s:%%'",
				 tokens[round]);
			cr_assert_eq(own_int(sql), 1, "the stuck push was not committed");
			cr_assert_eq(own_int("SELECT sum(count)::bigint FROM t_tok_pause"),
				     (long long)(want[0] + want[1] + want[2] + 6));
		}
		cr_assert(wait_ready(s, 6000), "no reconnection after SIGCONT");
		cr_assert_eq(push_tok(s, c, 3, tokens[round], &d), 0, "%s", d.err);
		for (int i = 0; i < 3; i++) {
			want[i] += i + 1;
			cr_assert(c[i].ok);
			EQ(c[i].total, want[i]);
		}
		/* Once more: nothing added. */
		cr_assert_eq(push_tok(s, c, 3, tokens[round], &d), 0, "%s", d.err);
		for (int i = 0; i < 3; i++)
			EQ(c[i].total, want[i]);
		cr_assert_eq(own_int("SELECT sum(count)::bigint FROM t_tok_pause"),
			     (long long)(want[0] + want[1] + want[2]));
	}
	ops->destroy(s);
}

/* ------------------------------------------------------------------------
 * One template cluster and one shared server for the whole binary.
 */
int main(int argc, char *argv[])
{
	struct criterion_test_set *tests = criterion_initialize();
	struct pg_server tpl = { 0 }, shared = { 0 };
	bool have = false;
	int result = 0;

	if (criterion_handle_args(argc, argv, true)) {
		if (!pg_server_available()) {
			fprintf(stderr, "test_postgres: PostgreSQL not found in %s\n",
				pg_server_bindir());
		} else if (pg_server_create(&tpl, NULL) < 0) {
			fprintf(stderr, "test_postgres: initdb: %s\n", tpl.err);
		} else if (pg_server_create(&shared, tpl.data) < 0 ||
			   pg_server_start(&shared, 30000) < 0) {
			fprintf(stderr, "test_postgres: server: %s\n", shared.err);
		} else {
			have = true;
			setenv(ENV_CONNINFO, shared.conninfo, 1);
			setenv(ENV_TEMPLATE, tpl.data, 1);
		}
		result = !criterion_run_all_tests(tests);
		if (!have)
			result = 1;
	}
	pg_server_destroy(&shared);
	pg_server_destroy(&tpl);
	criterion_finalize(tests);
	return result;
}

/* ------------------------------------------------------------------------
 * Admission (issue 9): the store decides, atomically.
 */
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
	struct done d = { 0 };
	char err[STRATEGY_ERR_MAX] = "";

	cr_assert_eq(ops->admit(s, a, n, token, on_done, &d, err), 0, "admit refused: %s", err);
	cr_assert_eq(d.calls, 0, "callback ran inside admit");
	cr_assert(run_until(&d.called, 10000), "admit: no callback");
	cr_assert_eq(d.status, 0, "admit failed: %s", d.err);
	for (size_t i = 0; i < n; i++)
		cr_assert(a[i].ok, "admission %zu not decided", i);
}

Test(postgres, admit_up_to_the_limit)
{
	struct strategy *s = make_ready("t_admit_limit", NULL);
	struct strategy_admit a;

	a = adm("k", 600, 3, 1, 5, 0, false);       /* 3 + 1 <= 5 */
	admit_tok(s, &a, 1, NULL);
	cr_assert(a.admitted);
	EQ(a.current, 4);
	EQ(a.previous, 0);
	a = adm("k", 600, 0, 1, 5, 0, false);
	admit_tok(s, &a, 1, NULL);
	cr_assert(a.admitted);
	EQ(a.current, 5);
	a = adm("k", 600, 0, 1, 5, 0, false);       /* over: not counted */
	admit_tok(s, &a, 1, NULL);
	cr_assert(!a.admitted);
	EQ(a.current, 5);
	a = adm("k", 600, 2, 1, 5, 0, true);        /* the diff goes in, and the hit */
	admit_tok(s, &a, 1, NULL);
	cr_assert(!a.admitted);
	EQ(a.current, 8);
	cr_assert_eq(query_int("SELECT count FROM t_admit_limit WHERE key = 'k'"), 8);
	ops->destroy(s);
}

Test(postgres, admit_sliding_window_and_decimals)
{
	struct strategy *s = make_ready("t_admit_sliding", NULL);
	struct strategy_counter prev = counter("ns", "w", 1, 540, 60, 40);
	struct strategy_admit a;

	push_ok(s, &prev, 1);
	a = adm("w", 600, 0, 0.5, 10.5, 0.25, false);  /* 0 + 10 + 0.5 <= 10.5 */
	admit_tok(s, &a, 1, NULL);
	cr_assert(a.admitted);
	EQ(a.previous, 40);
	EQ(a.current, 0.5);
	a = adm("w", 600, 0, 0.25, 10.5, 0.25, false); /* 0.5 + 10 + 0.25 > 10.5 */
	admit_tok(s, &a, 1, NULL);
	cr_assert(!a.admitted);
	EQ(a.current, 0.5);
	a = adm("w", 600, 0, 0.25, 10.5, 0.2, false);
	admit_tok(s, &a, 1, NULL);
	cr_assert(a.admitted);
	EQ(a.current, 0.75);
	ops->destroy(s);
}

Test(postgres, admit_batch_in_order)
{
	struct strategy *s = make_ready("t_admit_batch", NULL);
	struct strategy_admit a[4] = {
		adm("b", 600, 0, 1, 2, 0, false), adm("b", 600, 0, 1, 2, 0, false),
		adm("b", 600, 0, 1, 2, 0, false), adm("c", 600, 1, 1, 2, 0, false),
	};

	admit_tok(s, a, 4, NULL);
	cr_assert(a[0].admitted && a[1].admitted && !a[2].admitted && a[3].admitted);
	EQ(a[1].current, 2);
	EQ(a[2].current, 2);
	EQ(a[3].current, 2);
	ops->destroy(s);
}

Test(postgres, admit_token_applies_once)
{
	struct strategy *s = make_ready("t_admit_token", NULL);
	struct strategy_admit a[2] = { adm("t", 600, 2, 1, 3, 0, false),
				       adm("t", 600, 0, 1, 3, 0, false) };

	admit_tok(s, a, 2, "node1:7");
	cr_assert(a[0].admitted && !a[1].admitted);
	EQ(a[1].current, 3);
	a[0] = adm("t", 600, 2, 1, 3, 0, false);
	a[1] = adm("t", 600, 0, 1, 3, 0, false);
	admit_tok(s, a, 2, "node1:7");
	cr_assert(a[0].admitted && !a[1].admitted, "the recorded decisions come back");
	EQ(a[0].current, 3);
	cr_assert_eq(query_int("SELECT count FROM t_admit_token WHERE key = 't'"), 3);
	a[0] = adm("t", 600, 0, 1, 3, 0, true);
	admit_tok(s, a, 1, "node1:8");
	cr_assert(!a[0].admitted);
	EQ(a[0].current, 4);
	ops->destroy(s);
}

static struct strategy_admit grant_adm(double cost, double limit, double weight, double want,
				       unsigned nodes)
{
	struct strategy_admit a = adm("g", 600, 0, cost, limit, weight, false);

	a.want = want;
	a.nodes = nodes;
	return a;
}

/* Grants (docs/CLUSTER.md, "Exact at the limit"): an admitted hit also
 * gets min(want, headroom / (2 * nodes)) in whole costs, reserved at once
 * apart from the count (which holds hits: what current says), and counted
 * against the limit; none when refused, without nodes or want, or under
 * one cost; a resend with the same token gets the same grant and adds
 * nothing. */
Test(postgres, admit_grants_share_the_headroom)
{
	struct strategy *s = make_ready("t_admit_grant", NULL);
	struct strategy_admit a = grant_adm(1, 100, 0, 1000, 3);

	admit_tok(s, &a, 1, NULL);
	cr_assert(a.admitted);
	cr_assert_eq(a.grant, 16, "(100 - 1) / 6 = 16.5, in whole costs: %g", a.grant);
	cr_assert_eq(a.current, 1, "hits, not the grant: %g", a.current);
	a = grant_adm(1, 100, 0, 1000, 3);
	admit_tok(s, &a, 1, "n1:1");
	cr_assert_eq(a.grant, 13, "(100 - 2 - 16) / 6: %g", a.grant);
	cr_assert_eq(a.current, 2);
	a = grant_adm(1, 100, 0, 1000, 3);
	admit_tok(s, &a, 1, "n1:1");
	cr_assert(a.admitted);
	cr_assert_eq(a.grant, 13, "a resend gets the recorded grant: %g", a.grant);
	cr_assert_eq(a.current, 2, "and adds nothing");
	cr_assert_eq(query_int("SELECT reserved FROM t_admit_grant WHERE key = 'g'"), 29);
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
	cr_assert_eq(query_int("SELECT count * 2 FROM t_admit_grant WHERE key = 'g' AND "
			       "window_start = 600"), 75);
	cr_assert_eq(query_int("SELECT reserved * 2 FROM t_admit_grant WHERE key = 'g' AND "
			       "window_start = 600"), 121);
	ops->destroy(s);
}

/* The previous window weighs on the headroom of a grant, its reservation
 * with it. */
Test(postgres, admit_grant_counts_the_previous_window)
{
	struct strategy *s = make_ready("t_admit_grant_prev", NULL);
	struct strategy_admit a = adm("g", 600 - 60, 30, 1, 1000, 0, false);

	a.want = 10;
	a.nodes = 1;
	admit_tok(s, &a, 1, NULL);
	cr_assert_eq(a.grant, 10);
	cr_assert_eq(a.current, 31, "30 + the hit");
	a = grant_adm(1, 100, 0.5, 1000, 2);
	admit_tok(s, &a, 1, NULL);
	cr_assert(a.admitted);
	cr_assert_eq(a.previous, 31, "hits");
	cr_assert_eq(a.grant, 19, "(100 - 1 - (31 + 10) * 0.5) / 4 = 19.6: %g", a.grant);
	cr_assert_eq(a.current, 1);
	ops->destroy(s);
}

/* A push's grant hits spent (strategy.h) go from the reservation to the
 * count; a grant returned leaves the reservation, the count does not
 * move. A reservation never goes below 0. With a token, applied once. */
Test(postgres, push_spent_and_returned_grants)
{
	struct strategy *s = make_ready("t_unreserve", NULL);
	struct strategy_admit a = grant_adm(1, 1000, 0, 100, 1);
	struct strategy_counter b[2];
	struct done d;

	admit_tok(s, &a, 1, NULL);
	cr_assert_eq(a.grant, 100);
	b[0] = counter("ns", "g", 1, 600, 60, 0);
	b[0].spent = 30;
	cr_assert_eq(push_tok(s, b, 1, "u:1", &d), 0, "%s", d.err);
	EQ(b[0].total, 31);
	cr_assert_eq(push_tok(s, b, 1, "u:1", &d), 0, "%s", d.err);
	EQ(b[0].total, 31);
	cr_assert_eq(query_int("SELECT reserved FROM t_unreserve WHERE key = 'g'"), 70);
	b[0] = counter("ns", "g", 1, 600, 60, 2);
	b[0].spent = 5;
	b[0].returned = 65;
	cr_assert_eq(push_tok(s, b, 1, "u:2", &d), 0, "%s", d.err);
	EQ(b[0].total, 38);
	cr_assert_eq(query_int("SELECT reserved FROM t_unreserve WHERE key = 'g'"), 0);
	b[0] = counter("ns", "g", 1, 600, 60, 0);
	b[0].spent = 4;
	b[1] = counter("ns", "g", 1, 600, 60, 0);
	push_ok(s, b, 2);
	EQ(b[0].total, 42);
	EQ(b[1].total, 42);
	cr_assert_eq(query_int("SELECT reserved FROM t_unreserve WHERE key = 'g'"), 0);
	ops->destroy(s);
}

Test(postgres, admit_refuses_bad_arguments)
{
	struct strategy *s = make_ready("t_admit_bad", NULL);
	struct strategy_admit a = adm("x", 600, 0, -1, 10, 0, false);
	struct done d = { 0 };
	char err[STRATEGY_ERR_MAX] = "";

	cr_assert_eq(ops->admit(s, &a, 1, NULL, on_done, &d, err), -1);
	cr_assert(strstr(err, "admission 0") != NULL, "%s", err);
	a = adm("x", 600, 0, 1, 10, 1.5, false);
	cr_assert_eq(ops->admit(s, &a, 1, NULL, on_done, &d, err), -1);
	a = adm("x", 600, NAN, 1, 10, 0, false);
	cr_assert_eq(ops->admit(s, &a, 1, NULL, on_done, &d, err), -1);
	run_for(50);
	cr_assert_eq(d.calls, 0);
	ops->destroy(s);
}

/* ------------------------------------------------------------------------
 * Heartbeats: the nodes of a namespace.
 */
static unsigned beat(struct strategy *s, const char *ns, const char *node, double now, double ttl)
{
	struct done d = { 0 };
	char err[STRATEGY_ERR_MAX] = "";
	unsigned active = 0;

	cr_assert_eq(ops->heartbeat(s, ns, strlen(ns), node, strlen(node), now, ttl, &active,
				    on_done, &d, err), 0, "heartbeat refused: %s", err);
	cr_assert_eq(d.calls, 0, "callback ran inside heartbeat");
	cr_assert(run_until(&d.called, 10000), "heartbeat: no callback");
	cr_assert_eq(d.status, 0, "heartbeat failed: %s", d.err);
	return active;
}

Test(postgres, heartbeat_counts_the_nodes_seen_within_ttl)
{
	struct strategy *s = make_ready("t_nodes", NULL);
	uint32_t sizes[1] = { 60 };
	struct rows rows;

	/* PostgreSQL counts with its own clock: ttl in real seconds. */
	cr_assert_eq(beat(s, "ns", "a", 0, 1), 1);
	cr_assert_eq(beat(s, "ns", "b", 0, 1), 2);
	cr_assert_eq(beat(s, "other", "c", 0, 1), 1, "namespaces are apart");
	cr_assert_eq(beat(s, "ns", "a", 0, 1), 2);
	run_for(1300);
	cr_assert_eq(beat(s, "ns", "a", 0, 1), 1, "b, silent for 1.3 s, no longer counts");
	cr_assert_eq(beat(s, "ns", "b", 0, 1), 2);
	/* Not counters: the counters table holds none of it. */
	cr_assert_eq(query_int("SELECT count(*) FROM t_nodes"), 0);
	fetch_ok(s, "ns", sizes, 1, 1000, &rows);
	cr_assert_eq(rows.n, 0);
	ops->destroy(s);
}
