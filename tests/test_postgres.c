/*
 * test_postgres.c - what only the PostgreSQL strategy (strategies/
 * postgres.c) does, against a real server (the contract every store keeps
 * is in test_store_contract.c): options, the host list, the table made,
 * or upgraded, or of another shape, merged duplicates, purge (asked for
 * and periodic; tokens too), the pool, chunks as transactions (a failed
 * one, its token rolled back and resent), results of an unexpected type,
 * the bounded queue, and a push that timed out on a paused server resent
 * with its token (counted once; a server paused or gone under an instance
 * is in the contract).
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
#include "tests/lib/storetest.h"

#define ENV_CONNINFO "PG_TEST_CONNINFO"
#define ENV_TEMPLATE "PG_TEST_TEMPLATE"

static const struct strategy_ops *const ops = &postgres_strategy;

static const char *shared_conninfo(void)
{
	const char *ci = getenv(ENV_CONNINFO);

	cr_assert(ci && *ci, "no shared PostgreSQL server (see the runner's output)");
	return ci;
}

static struct strategy *make(const char *conninfo, const char *table, const char *extra)
{
	return st_create("{\"conninfo\": \"%s\", \"table\": \"%s\"%s%s}", conninfo, table,
			 extra ? ", " : "", extra ? extra : "");
}

/* An instance on the shared server, ready. */
static struct strategy *make_ready(const char *table, const char *extra)
{
	struct strategy *s = make(shared_conninfo(), table, extra);

	cr_assert(st_wait_ready(s, true, 5), "not ready after 5 s");
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

static void setup(void)
{
	st_setup(ops);
}

static void teardown(void)
{
	st_teardown();
}

#define EQ(x, want)                                                               \
	do {                                                                      \
		double got_ = (x);                                                \
		cr_assert(fabs(got_ - (want)) <= 1e-9, "%s = %.17g, want %.17g", #x, \
			  got_, (double)(want));                                  \
	} while (0)

TestSuite(postgres, .init = setup, .fini = teardown, .timeout = 60);

/* ------------------------------------------------------------------------
 * Options.
 */
Test(postgres, options_errors)
{
	char long_table[80];

	st_expect_bad_opts("{\"colour\": 1}", "colour");
	st_expect_bad_opts("{\"table\": \"Upper\"}", "table");
	st_expect_bad_opts("{\"table\": \"9lives\"}", "table");
	st_expect_bad_opts("{\"table\": \"a\\\"; drop table x; --\"}", "table");
	st_expect_bad_opts("{\"table\": \"\"}", "table");
	st_expect_bad_opts("{\"table\": 3}", "table");
	memset(long_table, 'a', 64);
	long_table[64] = '\0';
	{
		char json[160];

		snprintf(json, sizeof(json), "{\"table\": \"%s\"}", long_table);
		st_expect_bad_opts(json, "table");
		long_table[63] = '\0'; /* 63 is the longest valid name */
		snprintf(json, sizeof(json), "{\"table\": \"%s\", \"conninfo\": \"host=127.0.0.1 "
					     "port=1\"}", long_table);
		{
			char err[STRATEGY_ERR_MAX];
			struct strategy *s = ops->create(st_loop, json, err, sizeof(err));

			cr_assert_not_null(s, "63-character table refused: %s", err);
			ops->destroy(s);
		}
	}
	st_expect_bad_opts("{\"timeout_ms\": 0}", "timeout_ms");
	st_expect_bad_opts("{\"timeout_ms\": \"500\"}", "timeout_ms");
	st_expect_bad_opts("{\"timeout_ms\": 1.5}", "timeout_ms");
	st_expect_bad_opts("{\"purge_interval_s\": -1}", "purge_interval_s");
	st_expect_bad_opts("{\"pool_size\": 0}", "pool_size");
	st_expect_bad_opts("{\"pool_size\": 9}", "pool_size");
	st_expect_bad_opts("{\"conninfo\": 5}", "conninfo");
	st_expect_bad_opts("{\"conninfo\": \"host='unterminated\"}", "conninfo");
	st_expect_bad_opts("{\"conninfo\": \"nosuchkey=1\"}", "conninfo");
	st_expect_bad_opts("{\"conninfo\": \"host=db.example.com\"}", "conninfo");
	st_expect_bad_opts("{\"table\": ", "JSON");
	st_expect_bad_opts("[1]", "object");

	/* Defaults and an explicit full set are accepted (nothing listens
	 * on port 1: creating does not need the store). */
	{
		char err[STRATEGY_ERR_MAX] = "";
		struct strategy *s = ops->create(st_loop, NULL, err, sizeof(err));

		cr_assert_not_null(s, "defaults refused: %s", err);
		ops->destroy(s);
		s = ops->create(st_loop,
				"{\"conninfo\": \"host=127.0.0.1 port=1 dbname=x\", \"table\": "
				"\"_t1\", \"timeout_ms\": 100, \"purge_interval_s\": 0, "
				"\"pool_size\": 8}",
				err, sizeof(err));
		cr_assert_not_null(s, "full set refused: %s", err);
		ops->destroy(s);
		s = ops->create(st_loop, "{\"conninfo\": \"hostaddr=127.0.0.1 host=db.example.com "
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
	struct strategy_counter c = st_ctr("ns", "k", 1, 60, 60, 1);

	cr_assert_not_null(port);
	snprintf(ci, sizeof(ci), "host=127.0.0.1,127.0.0.1 port=1,%d dbname=postgres user=postgres",
		 atoi(port + 5));
	/* Set-up (probe, create, prepare) on a busy machine can take a
	 * while: the point is only that the second host is reached. */
	s = make(ci, "t_hostlist", "\"timeout_ms\": 5000");
	cr_assert(st_wait_ready(s, true, 8), "not ready through the second host");
	st_push_ok(s, &c, 1, NULL);
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
			      "integer, count double precision, reserved double precision, "
			      "reset boolean");
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
	struct strategy_counter c[1] = { st_ctr("ns", "old", 3, 600, 60, 2) };
	char out[256];

	cr_assert_geq(query("CREATE TABLE t_old (namespace text NOT NULL, key bytea NOT NULL,"
			    " window_start bigint NOT NULL, window_size integer NOT NULL,"
			    " count double precision NOT NULL,"
			    " PRIMARY KEY (namespace, window_size, window_start, key));"
			    " INSERT INTO t_old VALUES ('ns', 'old', 600, 60, 5)", out, sizeof(out)),
		      0, "%s", out);
	s = make_ready("t_old", NULL);
	st_push_ok(s, c, 1, NULL);
	EQ(c[0].total, 7);
	cr_assert_eq(query_int("SELECT count(*) FROM t_old WHERE reserved = 0"), 1);
	/* ... and the forgotten windows' mark (forget), unset. */
	cr_assert_eq(query_int("SELECT count(*) FROM t_old WHERE NOT reset"), 1);
	ops->destroy(s);
}

/* Duplicates of a batch are merged before the upsert (reads: the
 * contract, test_store_contract.c): +1 and -1 of one counter in one batch
 * are a read, not an insert. */
Test(postgres, net_zero_in_one_batch_is_a_read)
{
	struct strategy *s = make_ready("t_zero", NULL);
	struct strategy_counter w = st_ctr("ns", "present", 7, 120, 60, 2);
	struct strategy_counter c[2] = { st_ctr("ns", "net0", 4, 120, 60, 1),
					 st_ctr("ns", "net0", 4, 120, 60, -1) };

	st_push_ok(s, &w, 1, NULL);
	cr_assert_eq(query_int("SELECT count(*) FROM t_zero"), 1);
	st_push_ok(s, c, 2, NULL);
	EQ(c[0].total, 0);
	EQ(c[1].total, 0);
	cr_assert_eq(query_int("SELECT count(*) FROM t_zero"), 1);
	ops->destroy(s);
}

Test(postgres, purge_deletes_old_windows_only)
{
	struct strategy *s = make_ready("t_purge", NULL);
	const int64_t now = 60000 + 10;
	struct strategy_counter c[] = {
		st_ctr("a", "k", 1, 60000, 60, 1),        /* current: kept */
		st_ctr("a", "k", 1, 60000 - 60, 60, 1),   /* previous: kept */
		st_ctr("a", "k", 1, 60000 - 120, 60, 1),  /* older: deleted */
		st_ctr("a", "k", 1, 60000 - 600, 60, 1),  /* older: deleted */
		st_ctr("a", "k", 1, 60000 - 120, 3600, 1), /* other size: kept */
		st_ctr("b", "k", 1, 60000 - 600, 60, 1),  /* other namespace: kept */
	};
	uint32_t sizes[] = { 60 };
	struct st_res d = { 0 };
	char err[STRATEGY_ERR_MAX];

	st_push_ok(s, c, sizeof(c) / sizeof(c[0]), NULL);
	cr_assert_eq(ops->purge(s, "a", 1, sizes, 1, now, st_done_cb, &d, err), 0, "%s", err);
	cr_assert(st_run_until(&d.done, 5));
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
		st_ctr("m", "k", 1, cur, 60, 1),
		st_ctr("m", "k", 1, cur - 600, 60, 1),
		st_ctr("m", "k", 1, cur - 6000, 60, 1),
	};

	st_push_ok(s, c, 3, NULL);
	cr_assert_eq(query_int("SELECT count(*) FROM t_maint"), 3);
	st_run_for(1.6);
	cr_assert_eq(query_int("SELECT count(*) FROM t_maint"), 1, "old windows not purged");
	ops->destroy(s);
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
	struct st_res d = { 0 };
	char out[256];
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

		c[i] = st_ctr("cf", keys[i], (size_t)n, 600, 60, 1);
	}
	c[N] = st_ctr("cf", "zbad", 4, 600, 60, 1); /* sorts last: the last chunk */
	st_push(s, c, N + 1, NULL, &d);
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
	st_push(s, c, N, NULL, &d);
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
	struct strategy_counter c = st_ctr("ns", "k", 1, 60, 60, 1);
	struct st_res d = { 0 };
	struct st_res r;
	char out[256], err[STRATEGY_ERR_MAX];
	uint32_t size = 60;

	cr_assert_eq(query("CREATE TABLE t_types (namespace text NOT NULL, key bytea NOT NULL, "
			   "window_start integer NOT NULL, window_size integer NOT NULL, "
			   "count numeric NOT NULL, "
			   "PRIMARY KEY (namespace, window_size, window_start, key))",
			   out, sizeof(out)),
		     0, "%s", out);
	s = make_ready("t_types", NULL);
	cr_assert_eq(ops->push_diffs(s, &c, 1, NULL, st_done_cb, &d, err), 0, "%s", err);
	cr_assert(st_run_until(&d.done, 5));
	cr_assert_eq(d.status, -1);
	cr_assert(strstr(d.err, "shape"), "%s", d.err);
	cr_assert(!c.ok);
	memset(&r, 0, sizeof(r));
	cr_assert_eq(ops->get_counters(s, "ns", 2, &size, 1, 60, st_rows_cb, &r, err), 0, "%s", err);
	cr_assert(st_run_until(&r.done, 5));
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

		c[i] = st_ctr("pool", keys[i], (size_t)n, 600, 60, 1);
	}
	for (int pool = 1; pool <= 3; pool++) {
		char extra[64], sql[256];
		struct strategy *s;

		snprintf(ci, sizeof(ci), "%s application_name=t_pool_%d", shared_conninfo(), pool);
		snprintf(extra, sizeof(extra), "\"pool_size\": %d", pool);
		s = make(ci, "t_pool", extra);
		cr_assert(st_wait_ready(s, true, 5));
		st_run_for(0.1); /* every connection set up */
		snprintf(sql, sizeof(sql), "SELECT count(*) FROM pg_stat_activity WHERE "
					   "application_name = 't_pool_%d'", pool);
		cr_assert_eq(query_int(sql), pool);
		st_push_ok(s, c, N, NULL);
		for (size_t i = 0; i < N; i++)
			EQ(c[i].total, pool);
		ops->destroy(s);
	}
	{
		struct strategy *s = make_ready("t_pool", NULL);

		st_run_for(0.1);
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
Test(postgres, queue_is_bounded)
{
	enum { N = 100 };
	struct strategy *s = make_ready("t_queue", NULL);
	struct strategy_counter c[N];
	struct st_res d[N];
	char err[STRATEGY_ERR_MAX];
	int accepted = 0, refused = 0;

	memset(d, 0, sizeof(d));
	for (int i = 0; i < N; i++) {
		c[i] = st_ctr("ns", "k", 1, 60, 60, 1);
		if (ops->push_diffs(s, &c[i], 1, NULL, st_done_cb, &d[i], err) == 0) {
			accepted++;
		} else {
			refused++;
			cr_assert(strstr(err, "queue full"), "%s", err);
		}
	}
	cr_assert(accepted >= 8 && refused > 0, "accepted %d refused %d", accepted, refused);
	for (int i = 0; i < accepted; i++) {
		cr_assert(st_run_until(&d[i].done, 10));
		cr_assert_eq(d[i].status, 0, "%s", d[i].err);
		EQ(c[i].total, i + 1);
	}
	ops->destroy(s);
}

Test(postgres, table_of_another_shape_is_an_error_value)
{
	struct strategy *s;
	struct strategy_counter c = st_ctr("ns", "k", 1, 60, 60, 1);
	struct st_res d = { 0 };
	char out[256], err[STRATEGY_ERR_MAX] = "";

	cr_assert_eq(query("CREATE TABLE t_shape (namespace text, other int)", out, sizeof(out)),
		     0, "%s", out);
	s = make(shared_conninfo(), "t_shape", NULL);
	st_run_for(0.3);
	cr_assert(!ops->ready(s));
	if (ops->push_diffs(s, &c, 1, NULL, st_done_cb, &d, err) == 0) {
		cr_assert(st_run_until(&d.done, 2));
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
		    struct st_res *d)
{
	st_push(s, c, n, token, d);
	return d->status;
}

/* Push tokens in PostgreSQL (their contract: test_store_contract.c): one
 * row of the tokens table per chunk that wrote, whatever the resends. */
Test(postgres, token_rows_one_per_chunk)
{
	enum { N = 5000 }; /* 3 chunks */
	struct strategy *s = make_ready("t_tok_same", NULL);
	char(*keys)[16];
	struct strategy_counter *c = st_batch("ts", N, 600, &keys);

	c[N - 1] = c[0]; /* a duplicate: merged */
	st_push_ok(s, c, N, "push-1");
	cr_assert_eq(query_int("SELECT count(*) FROM t_tok_same_tokens"), 3);
	st_push_ok(s, c, N, "push-1");
	st_push_ok(s, c, N, "push-1");
	cr_assert_eq(query_int("SELECT count(*) FROM t_tok_same_tokens"), 3);
	cr_assert_eq(query_int("SELECT sum(count)::bigint FROM t_tok_same"),
		     query_int("SELECT sum(1 + i % 3) FROM generate_series(0, 4998) i") + 1);
	ops->destroy(s);
	free(c);
	free(keys);
}

Test(postgres, token_purge_deletes_old_tokens)
{
	struct strategy *s = make_ready("t_tok_purge", NULL);
	struct strategy_counter c = st_ctr("tp", "k", 1, 600, 60, 1);
	struct strategy_counter c2 = st_ctr("tp", "k2", 2, 600, 60, 1);
	uint32_t size = 60;
	struct st_res d;
	char err[STRATEGY_ERR_MAX];

	cr_assert_eq(push_tok(s, &c, 1, "old", &d), 0, "%s", d.err);
	cr_assert_eq(push_tok(s, &c2, 1, "new", &d), 0, "%s", d.err);
	cr_assert_eq(query_int("SELECT count(*) FROM t_tok_purge_tokens"), 2);
	cr_assert_eq(query_int("WITH u AS (UPDATE t_tok_purge_tokens SET at = now() - interval "
			       "'601 seconds' WHERE token LIKE 'old:%' RETURNING 1) "
			       "SELECT count(*) FROM u"),
		     1);
	memset(&d, 0, sizeof(d));
	cr_assert_eq(ops->purge(s, "tp", 2, &size, 1, 600 + 30, st_done_cb, &d, err), 0, "%s", err);
	cr_assert(st_run_until(&d.done, 5));
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
	struct strategy_counter *c = st_batch("tr", N + 1, 600, &keys), *r = calloc(N + 1, sizeof(*r));
	struct st_res d;
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
	c[N] = st_ctr("tr", "zbad", 4, 600, 60, 1); /* sorts last: the last chunk */
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
 * A push that timed out on a paused server (the server paused or gone
 * under an instance: test_store_contract.c).
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
		st_ctr("tq", "a", 1, 600, 60, 10),
		st_ctr("tq", "b", 1, 600, 60, 10),
		st_ctr("tq", "c", 1, 600, 60, 10),
	};
	const char *tokens[] = { "pause-1", "pause-2" };
	double want[3] = { 10, 10, 10 };
	struct st_res d;

	cr_assert(st_wait_ready(s, true, 5));
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
		st_run_for(0.1);
		cr_assert_eq(pg_server_resume(&own), 0);
		if (round == 0) {
			/* Let the stuck backends run what they had and end. */
			double end = st_now() + 5;

			snprintf(sql, sizeof(sql),
				 "SELECT count(*) FROM pg_stat_activity WHERE pid IN (%s)", pids);
			while (own_int(sql) > 0 && st_now() < end)
				usleep(20000);
			cr_assert_eq(own_int(sql), 0, "the stuck backends did not end");
			snprintf(sql, sizeof(sql),
				 "SELECT count(*) FROM t_tok_pause_tokens WHERE token LIKE '%s:%%'",
				 tokens[round]);
			cr_assert_eq(own_int(sql), 1, "the stuck push was not committed");
			cr_assert_eq(own_int("SELECT sum(count)::bigint FROM t_tok_pause"),
				     (long long)(want[0] + want[1] + want[2] + 6));
		}
		cr_assert(st_wait_ready(s, true, 6), "no reconnection after SIGCONT");
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
	int result = 0;

	if (criterion_handle_args(argc, argv, true)) {
		bool have = pg_server_start_shared(&tpl, &shared, "test_postgres") == 0;

		if (have) {
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
