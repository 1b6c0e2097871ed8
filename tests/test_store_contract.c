/*
 * test_store_contract.c - the contract of strategies/strategy.h, written
 * once and run against every store's ops table: Redis (one server), Redis
 * Cluster (three masters), PostgreSQL, and the local strategy where it
 * applies (its ops table, and refusing at once what it cannot do).
 *
 * A case is written once, as a function of the store's fixture (struct
 * store, tests/lib/stores.h: how to make an instance, how to look into
 * the store behind the strategy's back, a server of the case's own, and
 * the few ways stores may differ that strategy.h leaves open, each named
 * there). CONTRACT() defines one Criterion test per (case, store):
 * contract_redis::push_returns_totals,
 * contract_redis_cluster::push_returns_totals,
 * contract_postgres::push_returns_totals; CONTRACT_ALL() adds the local
 * strategy (contract_local::...), CONTRACT_OWN() is for the stores whose
 * server a case pauses or stops (Redis, PostgreSQL).
 *
 * One server per store for the whole binary, started by main() before
 * Criterion runs the tests; each case has its own space on it: its own
 * key prefix (Redis) or table (PostgreSQL), named after the case. What
 * only one store does (key layout, scripts, NOSCRIPT, Cluster redirections
 * and failover, tables and SQL, the pool, what a server does with work
 * sent before it stopped) is tested in that store's file.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <ev.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strategies/strategy.h"
#include "tests/lib/storetest.h"
#include "tests/lib/stores.h"

#define START60 1700000040          /* a 60 s window start */
#define NOW60   (START60 + 30)

static const struct store *f;       /* the store of the running test */

TestSuite(contract_redis, .fini = store_off, .timeout = 60);
TestSuite(contract_redis_cluster, .fini = store_off, .timeout = 60);
TestSuite(contract_postgres, .fini = store_off, .timeout = 60);
TestSuite(contract_local, .fini = store_off, .timeout = 60);

static const struct strategy_ops *ops(void)
{
	return f->ops;
}

static long counters(const char *ns)
{
	return (long)f->tally(T_COUNTERS, ns);
}

static long objects(void)
{
	return (long)f->tally(T_OBJECTS, NULL);
}

static long tokens(void)
{
	return (long)f->tally(T_TOKENS, NULL);
}

/* A counter's count in the store (NAN: none). */
static double stored(const char *ns, const char *key, size_t key_len, uint32_t size,
		     int64_t start)
{
	return f->look(false, ns, key, key_len, size, start);
}

/* ------------------------------------------------------------------ */
/* The ops table, and a store away                                    */
/* ------------------------------------------------------------------ */

/* Every operation is there (admit and heartbeat for a central store
 * only: without them the caller decides locally), found by its name;
 * check_opts refuses what create refuses, with the same words. */
CONTRACT_ALL(ops_table_is_whole)
{
	char err[256] = "", opts[512];
	struct strategy *s;

	cr_assert_eq(strategy_find(ops()->name), ops(), "%s", ops()->name);
	cr_assert(ops()->check_opts && ops()->create && ops()->destroy && ops()->push_diffs &&
		  ops()->get_counters && ops()->get_window && ops()->purge && ops()->ready &&
		  ops()->connecting);
	cr_assert_eq(ops()->admit != NULL, f->remote, "admit");
	cr_assert_eq(ops()->heartbeat != NULL, f->remote, "heartbeat");
	cr_assert_eq(ops()->limit_set != NULL, f->remote, "limit_set");
	cr_assert_eq(ops()->limits_read != NULL, f->remote, "limits_read");
	f->opts(opts, sizeof(opts));
	cr_assert_eq(ops()->check_opts(opts, err, sizeof(err)), 0, "%s: %s", opts, err);
	cr_assert_eq(ops()->check_opts(f->bad_opts, err, sizeof(err)), -1, "%s", f->bad_opts);
	cr_assert(strstr(err, f->bad_opts_says), "check_opts(%s): %s", f->bad_opts, err);
	st_expect_bad_opts(f->bad_opts, f->bad_opts_says);
	s = ops()->create(st_loop, NULL, err, sizeof(err));
	cr_assert_not_null(s, "the defaults: %s", err);
	ops()->destroy(s);
}

/* An operation while nobody answers: refused at once with the reason, no
 * callback ever (or, where a store may take it while reconnecting,
 * failed within its timeout); not ready; destroy at any point. */
CONTRACT_ALL(unreachable_store_refuses_at_once)
{
	struct strategy_counter b[] = { ST_C("ns", "k", START60, 60, 1) };
	struct strategy_counter q = ST_C("ns", "k", START60, 60, 0);
	struct strategy_admit a = st_adm("k", START60, 0, 1, 10, 0, false);
	static const uint32_t sizes[] = { 60 };
	char json[256], err[STRATEGY_ERR_MAX] = "";
	struct st_res r[4] = { 0 };
	int rc[4];
	struct strategy *s;

	f->dead_opts(json, sizeof(json));
	s = st_create("%s", json);
	st_run_for(0.3);
	cr_assert(!ops()->ready(s));
	rc[0] = ops()->push_diffs(s, b, 1, NULL, st_done_cb, &r[0], err);
	if (rc[0] == -1) {
		cr_assert(strstr(err, f->refusal), "%s", err);
		cr_assert(!f->refusal_why || strstr(err, f->refusal_why), "no reason: %s", err);
	}
	rc[1] = ops()->get_window(s, &q, st_done_cb, &r[1], err);
	rc[2] = ops()->get_counters(s, "ns", 2, sizes, 1, NOW60, st_rows_cb, &r[2], err);
	rc[3] = ops()->admit ? ops()->admit(s, &a, 1, NULL, st_done_cb, &r[3], err) : -1;
	for (int i = 0; i < 4; i++)
		cr_assert_eq(r[i].calls, 0, "operation %d called back inside a call", i);
	for (int i = 0; i < 4; i++) {
		if (rc[i] == 0) {
			cr_assert(f->may_take_while_away, "operation %d taken while away", i);
			cr_assert(st_run_until(&r[i].done, 1.0), "operation %d: no failure in time", i);
			cr_assert_eq(r[i].status, -1);
		} else {
			cr_assert_eq(rc[i], -1);
		}
	}
	cr_assert(!b[0].ok && !q.ok && !a.ok);
	st_run_for(0.05);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(r[i].calls, rc[i] == 0, "operation %d", i);
	ops()->destroy(s);

	/* destroyed while a connection attempt is in progress */
	s = st_create("%s", json);
	ops()->destroy(s);
}

/* ------------------------------------------------------------------ */
/* Push                                                               */
/* ------------------------------------------------------------------ */

/* New counters: each total is its diff (integral, decimal, negative; two
 * window sizes), and that is what the store holds. */
CONTRACT(push_returns_totals)
{
	struct strategy *s = store_mk();
	struct strategy_counter b[] = {
		ST_C("ns", "alice", START60, 60, 1),
		ST_C("ns", "bob", START60, 60, 2),
		ST_C("ns", "carol", START60, 60, 3.5),
		ST_C("ns", "dave", START60, 60, -4),
		ST_C("ns", "alice", 1699999200, 3600, 3),
	};
	enum { N = sizeof(b) / sizeof(b[0]) };

	st_push_ok(s, b, N, NULL);
	for (int i = 0; i < N; i++) {
		cr_assert_eq(b[i].total, b[i].diff, "counter %d: %g", i, b[i].total);
		cr_assert_eq(stored("ns", b[i].key, b[i].key_len, b[i].size, b[i].start),
			     b[i].diff, "counter %d", i);
	}
	cr_assert_eq(counters("ns"), N);
	ops()->destroy(s);
}

/* A second push adds; decimals add exactly as doubles do. */
CONTRACT(second_push_adds_decimals)
{
	struct strategy *s = store_mk();
	struct strategy_counter a[] = { ST_C("ns", "k", START60, 60, 0.5),
					ST_C("ns", "x", START60, 60, 0.1) };
	struct strategy_counter b[] = { ST_C("ns", "k", START60, 60, 0.25),
					ST_C("ns", "x", START60, 60, 0.2) };
	struct strategy_counter c[] = { ST_C("ns", "k", START60, 60, 7) };

	st_push_ok(s, a, 2, NULL);
	cr_assert_eq(a[0].total, 0.5);
	st_push_ok(s, b, 2, NULL);
	cr_assert_eq(b[0].total, 0.75);
	cr_assert_eq(b[1].total, 0.1 + 0.2, "%.17g", b[1].total);   /* exact, in double */
	st_push_ok(s, c, 1, NULL);
	cr_assert_eq(c[0].total, 7.75);
	cr_assert_eq(stored("ns", "k", 1, 60, START60), 7.75);
	ops()->destroy(s);
}

/* A diff of 0 only reads: a counter never written reads 0 and is not
 * created. */
CONTRACT(zero_diff_reads_without_creating)
{
	struct strategy *s = store_mk();
	struct strategy_counter r0[] = { ST_C("ns", "ghost", START60, 60, 0) };
	struct strategy_counter w[] = { ST_C("ns", "k1", START60, 60, 5) };
	struct strategy_counter r1[] = { ST_C("ns", "k1", START60, 60, 0),
					 ST_C("ns", "k2", START60, 60, 0) };

	st_push_ok(s, r0, 1, NULL);
	cr_assert_eq(r0[0].total, 0);
	cr_assert_eq(objects(), 0, "a read created something");
	st_push_ok(s, w, 1, NULL);
	cr_assert_eq(objects(), 1);
	st_push_ok(s, r1, 2, NULL);
	cr_assert_eq(r1[0].total, 5);
	cr_assert_eq(r1[1].total, 0);
	cr_assert(isnan(stored("ns", "k2", 2, 60, START60)), "k2 was created by a read");
	cr_assert_eq(objects(), 1);
	ops()->destroy(s);
}

/* Reads with a token (every sync cycle reads its idle keys so) answer
 * the same totals as a push and create nothing. */
CONTRACT(reads_with_a_token_answer_totals)
{
	struct strategy *s = store_mk();
	struct strategy_counter b[3];

	b[0] = ST_C("ns", "r1", START60, 60, 5);
	b[1] = ST_C("ns", "r2", START60, 60, 2.5);
	st_push_ok(s, b, 2, "w:1");
	b[0] = ST_C("ns", "r1", START60, 60, 0);
	b[1] = ST_C("ns", "r2", START60, 60, 0);
	b[2] = ST_C("ns", "absent", START60, 60, 0);
	st_push_ok(s, b, 3, "w:2");
	cr_assert_eq(b[0].total, 5);
	cr_assert_eq(b[1].total, 2.5);
	cr_assert_eq(b[2].total, 0, "a field never written reads 0");
	cr_assert(isnan(stored("ns", "absent", 6, 60, START60)), "nothing created");
	st_push_ok(s, b, 3, "w:2");
	cr_assert_eq(b[0].total, 5, "a read resent reads again");
	ops()->destroy(s);
}

/* Two nodes (instances) add up, one after the other and at once, and
 * each reads the cluster's total. */
CONTRACT(two_nodes_sum_up)
{
	struct strategy *n1 = store_mk(), *n2 = store_mk();
	struct strategy_counter a[] = { ST_C("ns", "k", START60, 60, 1),
					ST_C("ns", "j", START60, 60, 10) };
	struct strategy_counter b[] = { ST_C("ns", "j", START60, 60, 20),
					ST_C("ns", "k", START60, 60, 2) };
	struct strategy_counter q1 = ST_C("ns", "k", START60, 60, 0);
	struct strategy_counter q2 = ST_C("ns", "j", START60, 60, 99);  /* the diff is ignored */
	struct st_res ra = { 0 }, rb = { 0 };
	char err[STRATEGY_ERR_MAX];

	st_push_ok(n1, a, 2, NULL);
	st_push_ok(n2, b, 2, NULL);
	cr_assert_eq(b[0].total, 30);
	cr_assert_eq(b[1].total, 3);
	/* both in flight at once, the same counters in opposite orders */
	cr_assert_eq(ops()->push_diffs(n1, a, 2, NULL, st_done_cb, &ra, err), 0, "%s", err);
	cr_assert_eq(ops()->push_diffs(n2, b, 2, NULL, st_done_cb, &rb, err), 0, "%s", err);
	cr_assert(st_run_until(&ra.done, ST_WAIT_S) && st_run_until(&rb.done, ST_WAIT_S));
	cr_assert_eq(ra.status, 0, "%s", ra.err);
	cr_assert_eq(rb.status, 0, "%s", rb.err);
	cr_assert_eq(fmax(a[0].total, b[1].total), 6);
	cr_assert(fmin(a[0].total, b[1].total) == 4 || fmin(a[0].total, b[1].total) == 5);
	cr_assert_eq(fmax(a[1].total, b[0].total), 60);
	/* each node reads the cluster total */
	cr_assert_eq(st_get_ok(n1, &q1), 6);
	cr_assert_eq(st_get_ok(n2, &q2), 60);
	ops()->destroy(n1);
	ops()->destroy(n2);
}

/* Keys are bytes: NULs, quotes, backslashes, braces, separators, bytes
 * that are not UTF-8, every byte value, 10,000 of them where the store
 * takes so long a key (PostgreSQL refuses one over 2048 bytes at once); a
 * namespace with quotes and braces. They come back byte-exact, a second
 * push finds the same counters. */
CONTRACT(keys_round_trip_byte_exact)
{
	static char long_key[2000], longer_key[10000];
	static const struct {
		const char *k;
		size_t n;
	} keys[] = {
		{ "a\0b", 3 },       { "a\0c", 3 },      { "a", 1 },
		{ "\0", 1 },         { "", 0 },          { "'", 1 },
		{ "''; DROP TABLE t_keys; --", 25 },     { "\\", 1 },
		{ "\\x41", 4 },      { "\\\\", 2 },      { ",", 1 },
		{ "{a,b}", 5 },      { "{", 1 },         { "}", 1 },
		{ "\"", 1 },         { "NULL", 4 },      { "\xff\xfe\x80", 3 },
		{ "caf\xc3\xa9", 5 }, { " spaced ", 8 }, { "a\nb\tc\r", 6 },
		{ "{}\r\n\xff:*", 7 }, { long_key, sizeof(long_key) },
		{ longer_key, sizeof(longer_key) },
	};
	enum { NKEYS = sizeof(keys) / sizeof(keys[0]) };
	const char *ns = "ns 'quoted' \"x\" \\ {,} caf\xc3\xa9";
	static const uint32_t sizes[] = { 60 };
	struct strategy *s = store_mk();
	struct strategy_counter c[NKEYS], again[NKEYS];
	static struct st_rows rows;
	size_t nkeys = NKEYS;       /* the longer key last: where the store takes it */
	struct st_res refused = { 0 };
	char err[STRATEGY_ERR_MAX] = "";

	for (size_t i = 0; i < sizeof(long_key); i++)
		long_key[i] = (char)(i * 7 + 3);     /* every byte value, NULs included */
	memset(longer_key, 'x', sizeof(longer_key));
	for (size_t i = 0; i < NKEYS; i++)
		c[i] = st_ctr(ns, keys[i].k, keys[i].n, START60, 60, (double)(i + 1));
	if (f->key_max && f->key_max < sizeof(longer_key)) {
		cr_assert_eq(ops()->push_diffs(s, c, NKEYS, NULL, st_done_cb, &refused, err), -1);
		cr_assert(strstr(err, "key longer than"), "%s", err);
		st_run_for(0.05);
		cr_assert_eq(refused.calls, 0);
		nkeys--;
	}
	st_push_ok(s, c, nkeys, NULL);
	for (size_t i = 0; i < nkeys; i++)
		cr_assert_eq(c[i].total, (double)(i + 1), "key %zu: %g", i, c[i].total);
	cr_assert_eq(counters(ns), (long)nkeys);
	for (size_t i = 0; i < nkeys; i++)
		cr_assert_eq(stored(ns, keys[i].k, keys[i].n, 60, START60), (double)(i + 1),
			     "key %zu", i);
	cr_assert_eq(st_fetch_ok(s, ns, sizes, 1, NOW60, &rows), nkeys);
	for (size_t i = 0; i < nkeys; i++) {
		const struct st_row *r = st_find_row(&rows, keys[i].k, keys[i].n, START60, 60);

		cr_assert_not_null(r, "key %zu not returned", i);
		cr_assert_eq(r->count, (double)(i + 1), "key %zu", i);
	}
	/* A second push finds the same counters (no new ones). */
	memcpy(again, c, sizeof(c));
	st_push_ok(s, again, nkeys, NULL);
	for (size_t i = 0; i < nkeys; i++)
		cr_assert_eq(again[i].total, 2 * c[i].diff, "key %zu: %g", i, again[i].total);
	cr_assert_eq(stored(ns, "a\0b", 3, 60, START60), 2);
	cr_assert_eq(stored(ns, keys[nkeys - 1].k, keys[nkeys - 1].n, 60, START60),
		     2.0 * nkeys);
	cr_assert_eq(counters(ns), (long)nkeys);
	ops()->destroy(s);
}

/* A counter present several times in one batch adds up: the store holds
 * the sum, and each occurrence gets the running total (Redis) or the
 * batch's final one (PostgreSQL merges them). 2500 copies of one counter
 * span more than one call or chunk of a store. */
CONTRACT(duplicates_in_one_batch_add_up)
{
	enum { N = 2500 };
	struct strategy *s = store_mk();
	struct strategy_counter c[4] = {
		ST_C("ns", "k", START60, 60, 1),
		ST_C("ns", "other", START60, 60, 0),
		ST_C("ns", "k", START60, 60, 2),
		ST_C("ns", "k", START60, 60, 0),
	};
	static struct strategy_counter b[N];

	st_push_ok(s, c, 4, NULL);
	cr_assert_eq(c[0].total, f->dups_in_order ? 1 : 3);
	cr_assert_eq(c[2].total, 3);
	cr_assert_eq(c[3].total, 3);
	cr_assert_eq(c[1].total, 0);
	for (int i = 0; i < N; i++)
		b[i] = ST_C("ns", "hot", START60, 60, i % 5 == 4 ? 0 : 1);
	st_push_ok(s, b, N, NULL);
	for (int i = 0, want = 0; i < N; i++) {
		want += i % 5 == 4 ? 0 : 1;
		cr_assert_eq(b[i].total, f->dups_in_order ? want : N - N / 5,
			     "position %d: %g, want %d", i, b[i].total, want);
	}
	cr_assert_eq(stored("ns", "hot", 3, 60, START60), N - N / 5);
	ops()->destroy(s);
}

/* The rows of a get_counters, each checked to hold want. */
struct all_rows {
	struct st_res r;
	double want;
	size_t bad;
};

static void all_rows_cb(void *arg, int status, const char *errstr,
			const struct strategy_row *rows, size_t n)
{
	struct all_rows *a = arg;

	for (size_t i = 0; i < n; i++)
		a->bad += rows[i].count != a->want;
	st_rows_cb(&a->r, status, errstr, rows, n);
}

/* Two nodes push the same 5000 counters in opposite orders, at once,
 * three times: every counter holds the sum (no deadlock, nothing lost),
 * and whoever pushed last saw it. */
CONTRACT(concurrent_overlapping_pushes_sum)
{
	enum { N = 5000, ROUNDS = 3 };
	struct strategy *n1 = store_mk(), *n2 = store_mk();
	static struct strategy_counter a[N], b[N];
	static char keys[N][16];
	static const uint32_t sizes[] = { 60 };
	struct all_rows all = { .want = 9 };
	char err[STRATEGY_ERR_MAX];

	for (size_t i = 0; i < N; i++) {
		int n = snprintf(keys[i], 16, "k%zu", i);

		a[i] = st_ctr("ov", keys[i], (size_t)n, START60, 60, 1);
		b[N - 1 - i] = st_ctr("ov", keys[i], (size_t)n, START60, 60, 2);
	}
	for (int r = 0; r < ROUNDS; r++) {
		struct st_res d1 = { 0 }, d2 = { 0 };

		cr_assert_eq(ops()->push_diffs(n1, a, N, NULL, st_done_cb, &d1, err), 0, "%s", err);
		cr_assert_eq(ops()->push_diffs(n2, b, N, NULL, st_done_cb, &d2, err), 0, "%s", err);
		cr_assert(st_run_until(&d1.done, ST_WAIT_S) && st_run_until(&d2.done, ST_WAIT_S));
		cr_assert(d1.status == 0 && d2.status == 0, "%s / %s", d1.err, d2.err);
	}
	cr_assert_eq(counters("ov"), N);
	cr_assert_eq(f->tally(T_TOTAL, "ov"), 9.0 * N);
	cr_assert_eq(ops()->get_counters(n1, "ov", 2, sizes, 1, NOW60, all_rows_cb, &all, err), 0,
		     "%s", err);
	cr_assert(st_run_until(&all.r.done, ST_WAIT_S));
	cr_assert_eq(all.r.status, 0, "%s", all.r.err);
	cr_assert_eq(all.r.nrows, N);
	cr_assert_eq(all.bad, 0, "%zu counters do not hold 9", all.bad);
	cr_assert(a[0].total == 9 || b[N - 1].total == 9);
	ops()->destroy(n1);
	ops()->destroy(n2);
}

/* 10,000 counters of two namespaces and two windows in one push, twice. */
CONTRACT(batch_of_10k_counters)
{
	enum { N = 10000 };
	struct strategy *s = store_mk();
	static char keys[N][24];
	static struct strategy_counter b[N];
	double t0 = st_now();

	for (int i = 0; i < N; i++) {
		snprintf(keys[i], sizeof(keys[i]), "user-%d", i);
		b[i] = ST_C(i % 3 ? "api" : "web", keys[i], i % 2 ? START60 : START60 - 60, 60,
			    (i % 10) * 0.5 + 1);
	}
	st_push_ok(s, b, N, NULL);
	for (int i = 0; i < N; i++)
		cr_assert_eq(b[i].total, b[i].diff, "counter %d: %g", i, b[i].total);
	st_push_ok(s, b, N, NULL);
	for (int i = 0; i < N; i++)
		cr_assert_eq(b[i].total, 2 * b[i].diff, "counter %d: %g", i, b[i].total);
	cr_log_info("%s: 2 x 10k pushes: %.0f ms", f->name, (st_now() - t0) * 1000);
	for (int i = 0; i < N; i += 997)
		cr_assert_eq(stored(b[i].ns, keys[i], strlen(keys[i]), 60, b[i].start),
			     2 * b[i].diff);
	cr_assert_eq(counters("api") + counters("web"), N);
	ops()->destroy(s);
}

/* ------------------------------------------------------------------ */
/* get_counters, get_window, purge                                    */
/* ------------------------------------------------------------------ */

/* The current and previous windows of the sizes asked, of the namespace
 * asked; nothing older, newer, of another size or namespace (one whose
 * name starts with it included); a size asked twice, once (where the
 * store merges them). An empty namespace: one call back, no rows. */
CONTRACT(get_counters_current_and_previous_windows_only)
{
	struct strategy *s = store_mk();
	const int64_t cur60 = START60, prev60 = START60 - 60, old60 = START60 - 120;
	const int64_t cur3600 = 1699999200, prev3600 = cur3600 - 3600, old3600 = cur3600 - 7200;
	struct strategy_counter b[] = {
		ST_C("a", "k1", cur60, 60, 1),
		ST_C("a", "k1", prev60, 60, 2),
		ST_C("a", "k1", old60, 60, 4),          /* too old */
		ST_C("a", "k1", cur60 + 60, 60, 512),   /* next */
		ST_C("a", "k2", cur3600, 3600, 8),
		ST_C("a", "k2", prev3600, 3600, 16),
		ST_C("a", "k3", old3600, 3600, 32),     /* too old */
		ST_C("b", "k1", cur60, 60, 64),         /* other namespace */
		ST_C("ab", "k1", cur60, 60, 256),       /* a namespace it starts */
		ST_C("a", "k1", 1700000070, 10, 128),   /* size not asked */
		ST_C("a", "k4", cur60, 60, 0.5),
	};
	static const uint32_t sizes[] = { 60, 3600, 60 };
	static struct st_rows rows;
	const struct st_row *row;

	st_push_ok(s, b, sizeof(b) / sizeof(b[0]), NULL);
	cr_assert_eq(st_fetch_ok(s, "a", sizes, f->size_asked_twice_once ? 3 : 2, NOW60, &rows), 5,
		     "%zu rows", rows.n);
	cr_assert((row = st_find_row(&rows, "k1", 2, cur60, 60)) && row->count == 1);
	cr_assert((row = st_find_row(&rows, "k1", 2, prev60, 60)) && row->count == 2);
	cr_assert((row = st_find_row(&rows, "k2", 2, cur3600, 3600)) && row->count == 8);
	cr_assert((row = st_find_row(&rows, "k2", 2, prev3600, 3600)) && row->count == 16);
	cr_assert((row = st_find_row(&rows, "k4", 2, cur60, 60)) && row->count == 0.5);
	cr_assert_eq(st_fetch_ok(s, "none", sizes, 2, NOW60, &rows), 0);
	ops()->destroy(s);
}

/* One counter, its diff ignored; one never written reads 0 (ok) and is
 * not created; two at once. */
CONTRACT(get_window_reads_one_counter)
{
	struct strategy *s = store_mk();
	struct strategy_counter b[] = { ST_C("ns", "k", START60, 60, 2.5) };
	struct strategy_counter q = ST_C("ns", "k", START60, 60, 123);
	struct strategy_counter miss = ST_C("ns", "nope", START60, 60, 1);
	struct st_res r1 = { 0 }, r2 = { 0 };
	char err[STRATEGY_ERR_MAX];

	st_push_ok(s, b, 1, NULL);
	cr_assert_eq(st_get_ok(s, &q), 2.5);
	q = ST_C("ns", "k", START60, 60, 0);
	cr_assert_eq(ops()->get_window(s, &q, st_done_cb, &r1, err), 0, "%s", err);
	cr_assert_eq(ops()->get_window(s, &miss, st_done_cb, &r2, err), 0, "%s", err);
	cr_assert_eq(r1.calls + r2.calls, 0, "callback inside get_window");
	cr_assert(st_run_until(&r1.done, ST_WAIT_S) && st_run_until(&r2.done, ST_WAIT_S));
	cr_assert(r1.status == 0 && r2.status == 0, "%s / %s", r1.err, r2.err);
	cr_assert(q.ok && miss.ok);
	cr_assert_eq(q.total, 2.5);
	cr_assert_eq(miss.total, 0);
	cr_assert_eq(objects(), 1, "get_window wrote");
	ops()->destroy(s);
}

/* purge completes once, outside the call, and keeps the windows that
 * still matter (the current and previous ones, other sizes). */
CONTRACT(purge_completes_and_keeps_what_matters)
{
	struct strategy *s = store_mk();
	struct strategy_counter b[] = {
		ST_C("ns", "k", START60, 60, 1),
		ST_C("ns", "k", START60 - 60, 60, 2),
		ST_C("ns", "k", START60 - 120, 3600, 4),
	};
	static const uint32_t sizes[] = { 60 };
	struct st_res r = { 0 };
	char err[STRATEGY_ERR_MAX];

	st_push_ok(s, b, 3, NULL);
	cr_assert_eq(ops()->purge(s, "ns", 2, sizes, 1, NOW60, st_done_cb, &r, err), 0, "%s", err);
	cr_assert_eq(r.calls, 0, "callback inside purge");
	cr_assert(st_run_until(&r.done, ST_WAIT_S));
	cr_assert_eq(r.status, 0, "%s", r.err);
	st_run_for(0.05);
	cr_assert_eq(r.calls, 1);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(stored("ns", "k", 1, b[i].size, b[i].start), b[i].diff, "%d", i);
	ops()->destroy(s);
}

/* Operations in flight together all complete, each once, none inside
 * its call, in the order they were asked (a read after a push sees it);
 * an empty batch completes too. */
CONTRACT(concurrent_operations_all_complete)
{
	struct strategy *s = store_mk();
	struct strategy_counter b[] = { ST_C("ns", "k", START60, 60, 1) };
	struct strategy_counter q = ST_C("ns", "k", START60, 60, 0);
	static const uint32_t sizes[] = { 60 };
	struct st_res r1 = { 0 }, r2 = { 0 }, r3 = { 0 }, r4 = { 0 }, r5 = { 0 };
	char err[STRATEGY_ERR_MAX];

	cr_assert_eq(ops()->push_diffs(s, b, 1, NULL, st_done_cb, &r1, err), 0, "%s", err);
	cr_assert_eq(ops()->get_window(s, &q, st_done_cb, &r2, err), 0, "%s", err);
	cr_assert_eq(ops()->get_counters(s, "ns", 2, sizes, 1, NOW60, st_rows_cb, &r3, err), 0,
		     "%s", err);
	cr_assert_eq(ops()->push_diffs(s, b, 0, NULL, st_done_cb, &r4, err), 0, "%s", err);
	cr_assert_eq(ops()->push_diffs(s, NULL, 0, NULL, st_done_cb, &r5, err), 0, "%s", err);
	cr_assert(!r1.done && !r2.done && !r3.done && !r4.done && !r5.done,
		  "callback ran inside the call");
	cr_assert(st_run_until(&r3.done, ST_WAIT_S));
	cr_assert(r1.done, "operations out of order");
	cr_assert(st_run_until(&r1.done, ST_WAIT_S) && st_run_until(&r2.done, ST_WAIT_S) &&
		  st_run_until(&r4.done, ST_WAIT_S) && st_run_until(&r5.done, ST_WAIT_S));
	cr_assert(r1.status == 0 && r2.status == 0 && r3.status == 0 && r4.status == 0 &&
		  r5.status == 0);
	cr_assert_eq(b[0].total, 1);
	cr_assert_eq(q.total, 1);       /* after the push */
	cr_assert_eq(r3.nrows, 1);
	st_run_for(0.05);
	cr_assert(r1.calls == 1 && r2.calls == 1 && r3.calls == 1 && r4.calls == 1 &&
		  r5.calls == 1);
	ops()->destroy(s);
}

/* Arguments no store can take: refused at once with the reason, no
 * callback ever. */
CONTRACT(invalid_arguments_are_refused_at_once)
{
	struct strategy *s = store_mk();
	struct strategy_counter b[] = { ST_C("ns", "k", START60, 0, 1) };
	struct strategy_counter nan_diff[] = { ST_C("ns", "k", START60, 60, NAN) };
	static const uint32_t zero[] = { 0 };
	struct st_res r = { 0 };
	char err[STRATEGY_ERR_MAX] = "";

	cr_assert_eq(ops()->push_diffs(s, b, 1, NULL, st_done_cb, &r, err), -1);
	cr_assert(strstr(err, f->says_size0), "%s", err);
	cr_assert_eq(ops()->push_diffs(s, nan_diff, 1, NULL, st_done_cb, &r, err), -1);
	cr_assert(strstr(err, f->says_not_finite), "%s", err);
	cr_assert_eq(ops()->get_counters(s, "ns", 2, zero, 1, NOW60, st_rows_cb, &r, err), -1);
	st_run_for(0.05);
	cr_assert_eq(r.calls, 0);
	ops()->destroy(s);
}

/* ------------------------------------------------------------------ */
/* Destroy                                                            */
/* ------------------------------------------------------------------ */

/* destroy fails what is pending, each callback once and before destroy
 * returns, the counters of a failed push not ok; nothing calls back
 * later. Twice: with nothing sent yet, and after one loop iteration
 * (something may be in flight, or even done). */
CONTRACT(destroy_fails_pending_operations_first)
{
	struct strategy *s = store_mk();
	struct strategy_counter b[] = { ST_C("ns", "k", START60, 60, 1) };
	struct strategy_counter c[3] = { ST_C("ns", "a", START60, 60, 1),
					 ST_C("ns", "b", START60, 60, 1),
					 ST_C("ns", "c", START60, 60, 1) };
	static const uint32_t sizes[] = { 60 };
	struct st_res r1 = { 0 }, r2 = { 0 }, r3 = { 0 }, d[3] = { 0 }, rows = { 0 };
	char err[STRATEGY_ERR_MAX] = "";

	cr_assert_eq(ops()->push_diffs(s, b, 1, NULL, st_done_cb, &r1, err), 0, "%s", err);
	cr_assert_eq(ops()->get_counters(s, "ns", 2, sizes, 1, NOW60, st_rows_cb, &r2, err), 0,
		     "%s", err);
	cr_assert_eq(ops()->purge(s, "ns", 2, sizes, 1, NOW60, st_done_cb, &r3, err), 0, "%s", err);
	ops()->destroy(s);
	cr_assert_eq(r1.calls, 1);
	cr_assert_eq(r1.status, -1);
	cr_assert(strstr(r1.err, "destroyed"), "%s", r1.err);
	cr_assert(!b[0].ok);
	cr_assert_eq(r2.calls, 1);
	cr_assert_eq(r2.status, -1);
	cr_assert_eq(r3.calls, 1);
	st_run_for(0.05);      /* nothing left on the loop calls back again */
	cr_assert_eq(r1.calls + r2.calls + r3.calls, 3);

	s = store_mk();
	for (int i = 0; i < 3; i++)
		cr_assert_eq(ops()->push_diffs(s, &c[i], 1, NULL, st_done_cb, &d[i], err), 0, "%s",
			     err);
	cr_assert_eq(ops()->get_counters(s, "ns", 2, sizes, 1, NOW60, st_rows_cb, &rows, err), 0,
		     "%s", err);
	ev_run(st_loop, EVRUN_NOWAIT);  /* the first one is likely in flight now */
	ops()->destroy(s);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(d[i].calls, 1, "callback %d not run once by destroy", i);
		if (d[i].status != 0)
			cr_assert(!c[i].ok);
	}
	cr_assert_eq(rows.calls, 1);
	cr_assert_eq(rows.status, -1);
	st_run_for(0.05);      /* nothing fires on the freed instance (ASan) */
	cr_assert_eq(d[0].calls + d[1].calls + d[2].calls + rows.calls, 4);
}

/* destroy from inside a callback: that callback's operation completed;
 * the next one is finished or failed by destroy, exactly once. */
CONTRACT(destroy_from_inside_a_callback)
{
	struct strategy *s = store_mk();
	struct strategy_counter a[] = { ST_C("ns", "k", START60, 60, 1) };
	struct strategy_counter b[] = { ST_C("ns", "j", START60, 60, 1) };
	struct st_res r1 = { 0 }, r2 = { 0 };
	char err[STRATEGY_ERR_MAX] = "";

	r1.destroy_me = s;
	cr_assert_eq(ops()->push_diffs(s, a, 1, NULL, st_done_cb, &r1, err), 0, "%s", err);
	cr_assert_eq(ops()->push_diffs(s, b, 1, NULL, st_done_cb, &r2, err), 0, "%s", err);
	cr_assert(st_run_until(&r1.done, ST_WAIT_S));
	cr_assert_eq(r1.status, 0, "%s", r1.err);
	cr_assert_eq(r2.calls, 1);
	if (f->destroy_fails_the_next)
		cr_assert_eq(r2.status, -1);
	if (r2.status != 0)
		cr_assert(!b[0].ok);
	st_run_for(0.05);
	cr_assert_eq(r1.calls, 1);
	cr_assert_eq(r2.calls, 1);
}

/* ------------------------------------------------------------------ */
/* Push tokens: a push carrying a token is applied at most once       */
/* ------------------------------------------------------------------ */

/* The same batch twice with one token: added once, the totals come back
 * the second time; a read in it creates nothing. A batch of 5000 (several
 * calls or chunks of a store) with a duplicate, twice more. Pushes
 * without a token add as before. */
CONTRACT(token_same_batch_twice_adds_once)
{
	enum { N = 5000 };
	struct strategy *s = store_mk();
	enum { NB = ST_TOKEN_BATCH };
	struct strategy_counter b[NB];
	double first[NB], want = 0;
	char(*keys)[16];
	struct strategy_counter *c = st_batch("ts", N, START60, &keys);

	st_token_batch(b, START60);
	st_push_ok(s, b, NB, "node1-7-0-42");
	for (int i = 0; i < NB; i++) {
		cr_assert_eq(b[i].total, b[i].diff, "counter %d: %g", i, b[i].total);
		first[i] = b[i].total;
		b[i].total = NAN;
	}
	st_push_ok(s, b, NB, "node1-7-0-42");
	for (int i = 0; i < NB; i++)
		cr_assert_eq(b[i].total, first[i], "counter %d: %g, want %g", i, b[i].total,
			     first[i]);
	cr_assert_eq(stored("ns", "alice", 5, 60, START60), 1);
	cr_assert_eq(stored("ns", "bob", 3, 60, START60), 2.5);
	cr_assert_eq(stored("ns", "alice", 5, 60, START60 - 60), -1);
	cr_assert_eq(stored("other", "carol", 5, 60, START60), 4);
	cr_assert(isnan(stored("ns", "dave", 4, 60, START60)), "a read created a counter");
	cr_assert_gt(tokens(), 0, "no token remembered");
	/* later pushes without a token add as usual */
	st_push_ok(s, b, NB, NULL);
	cr_assert_eq(b[0].total, 2);
	cr_assert_eq(b[1].total, 5);

	c[N - 1] = c[0];        /* a duplicate: counted twice, once */
	st_push_ok(s, c, N, "push-1");
	cr_assert_eq(c[0].total, f->dups_in_order ? 1 : 2);
	cr_assert_eq(c[N - 1].total, 2);
	cr_assert_eq(c[1].total, 2);
	for (int again = 0; again < 2; again++) {
		for (size_t i = 0; i < N; i++)
			c[i].total = -1;
		st_push_ok(s, c, N, "push-1");
		for (size_t i = 0; i < N; i++)
			cr_assert_eq(c[i].total, i == 0 || i == N - 1 ? 2 : (double)(1 + i % 3),
				     "counter %zu: %g", i, c[i].total);
	}
	cr_assert_eq(counters("ts"), N - 1);
	for (size_t i = 0; i < N - 1; i++)
		want += 1 + i % 3;
	cr_assert_eq(f->tally(T_TOTAL, "ts"), want + 1, "and the twin");
	ops()->destroy(s);
	free(c);
	free(keys);
}

/* Another token is another push; an old one again returns the current
 * totals and adds nothing. */
CONTRACT(token_different_tokens_add_twice)
{
	struct strategy *s = store_mk();
	struct strategy_counter b[] = { ST_C("ns", "k", START60, 60, 1),
					ST_C("ns", "j", START60, 60, 0.25),
					ST_C("ns", "k", START60, 60, 2),     /* same counter twice */
					ST_C("ns", "z", START60, 60, 0) };   /* a read */

	st_push_ok(s, b, 4, "t1");
	cr_assert_eq(b[0].total, f->dups_in_order ? 1 : 3);
	cr_assert_eq(b[2].total, 3);
	st_push_ok(s, b, 4, "t2");
	cr_assert_eq(b[0].total, f->dups_in_order ? 4 : 6);
	cr_assert_eq(b[1].total, 0.5);
	cr_assert_eq(b[2].total, 6);
	cr_assert_eq(b[3].total, 0);
	/* t1 again: already applied, returns the current totals */
	st_push_ok(s, b, 4, "t1");
	cr_assert_eq(b[0].total, 6, "%g", b[0].total);
	cr_assert_eq(b[1].total, 0.5);
	cr_assert_eq(b[2].total, 6);
	cr_assert_eq(stored("ns", "k", 1, 60, START60), 6);
	cr_assert_eq(stored("ns", "j", 1, 60, START60), 0.5);
	cr_assert_eq(counters("ns"), 2, "a read created a counter");
	ops()->destroy(s);
}

/* Without a token every push adds and no token is kept; a token is 1 to
 * STRATEGY_TOKEN_MAX bytes (refused at once otherwise, no callback); an
 * empty batch with a token completes. */
CONTRACT(token_null_behaves_as_before)
{
	struct strategy *s = store_mk();
	struct strategy_counter b[] = { ST_C("ns", "k", START60, 60, 1),
					ST_C("ns", "j", START60, 60, 2) };
	static const char max_tok[] =
		"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
	static const char long_tok[] =
		"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdefX";
	struct st_res r = { 0 };
	char err[STRATEGY_ERR_MAX] = "";

	st_push_ok(s, b, 2, NULL);
	st_push_ok(s, b, 2, NULL);
	cr_assert_eq(b[0].total, 2);
	cr_assert_eq(b[1].total, 4);
	cr_assert_eq(tokens(), 0, "a token kept without a token");
	cr_assert_eq(sizeof(max_tok) - 1, STRATEGY_TOKEN_MAX);
	cr_assert_eq(ops()->push_diffs(s, b, 2, long_tok, st_done_cb, &r, err), -1);
	cr_assert(strstr(err, "token"), "%s", err);
	cr_assert_eq(ops()->push_diffs(s, b, 2, "", st_done_cb, &r, err), -1);
	cr_assert(strstr(err, "token"), "%s", err);
	st_run_for(0.05);
	cr_assert_eq(r.calls, 0);
	st_push_ok(s, b, 2, max_tok);
	st_push_ok(s, b, 2, max_tok);
	cr_assert_eq(b[0].total, 3);
	cr_assert_eq(b[1].total, 6);
	cr_assert_gt(tokens(), 0);
	st_push_ok(s, b, 0, "t");
	ops()->destroy(s);
}

/* ------------------------------------------------------------------ */
/* Admission (issue 9): the store decides, atomically                 */
/* ------------------------------------------------------------------ */

/* Up to the limit admitted, then not; the node's diff goes in whatever
 * the decision; a denied hit counts only with count_denied. */
CONTRACT(admit_up_to_the_limit)
{
	struct strategy *s = store_mk();
	struct strategy_admit a;

	a = st_adm("k", START60, 3, 1, 5, 0, false);     /* 3 + 1 <= 5 */
	st_admit_ok(s, &a, 1, NULL);
	cr_assert(a.admitted);
	cr_assert_eq(a.current, 4);
	cr_assert_eq(a.previous, 0);
	a = st_adm("k", START60, 0, 1, 5, 0, false);     /* 4 + 1 <= 5 */
	st_admit_ok(s, &a, 1, NULL);
	cr_assert(a.admitted);
	cr_assert_eq(a.current, 5);
	a = st_adm("k", START60, 0, 1, 5, 0, false);     /* 5 + 1 > 5: not counted */
	st_admit_ok(s, &a, 1, NULL);
	cr_assert(!a.admitted);
	cr_assert_eq(a.current, 5);
	a = st_adm("k", START60, 2, 1, 5, 0, true);      /* the diff goes in, and the hit */
	st_admit_ok(s, &a, 1, NULL);
	cr_assert(!a.admitted);
	cr_assert_eq(a.current, 8);
	cr_assert_eq(stored("ns", "k", 1, 60, START60), 8);
	ops()->destroy(s);
}

/* The sliding window as the library computes it: current + previous x
 * weight; decimal costs. */
CONTRACT(admit_sliding_window_and_decimals)
{
	struct strategy *s = store_mk();
	struct strategy_counter prev = ST_C("ns", "w", START60 - 60, 60, 40);
	struct strategy_admit a;

	st_push_ok(s, &prev, 1, NULL);
	/* 0 + 40 x 0.25 + 0.5 = 10.5 <= 10.5 */
	a = st_adm("w", START60, 0, 0.5, 10.5, 0.25, false);
	st_admit_ok(s, &a, 1, NULL);
	cr_assert(a.admitted);
	cr_assert_eq(a.previous, 40);
	cr_assert_eq(a.current, 0.5);
	/* 0.5 + 10 + 0.25 > 10.5 */
	a = st_adm("w", START60, 0, 0.25, 10.5, 0.25, false);
	st_admit_ok(s, &a, 1, NULL);
	cr_assert(!a.admitted);
	cr_assert_eq(a.current, 0.5);
	/* a smaller weight (later in the window) lets it through */
	a = st_adm("w", START60, 0, 0.25, 10.5, 0.2, false);
	st_admit_ok(s, &a, 1, NULL);
	cr_assert(a.admitted);
	cr_assert_eq(a.current, 0.75);
	ops()->destroy(s);
}

/* One round trip for a batch; each admission sees the ones before it. */
CONTRACT(admit_batch_in_order)
{
	struct strategy *s = store_mk();
	struct strategy_admit a[4] = {
		st_adm("b", START60, 0, 1, 2, 0, false), st_adm("b", START60, 0, 1, 2, 0, false),
		st_adm("b", START60, 0, 1, 2, 0, false), st_adm("c", START60, 1, 1, 2, 0, false),
	};

	st_admit_ok(s, a, 4, NULL);
	cr_assert(a[0].admitted && a[1].admitted && !a[2].admitted && a[3].admitted);
	cr_assert_eq(a[1].current, 2);
	cr_assert_eq(a[2].current, 2);
	cr_assert_eq(a[3].current, 2);
	ops()->destroy(s);
}

/* With a token, an admission resent (its answer lost) is not applied
 * twice and gets the same decision back; another token is a new one. */
CONTRACT(admit_token_applies_once)
{
	struct strategy *s = store_mk();
	struct strategy_admit a[2] = { st_adm("t", START60, 2, 1, 3, 0, false),
				       st_adm("t", START60, 0, 1, 3, 0, false) };

	st_admit_ok(s, a, 2, "node1:7");
	cr_assert(a[0].admitted && !a[1].admitted);
	cr_assert_eq(a[1].current, 3);
	a[0] = st_adm("t", START60, 2, 1, 3, 0, false);
	a[1] = st_adm("t", START60, 0, 1, 3, 0, false);
	st_admit_ok(s, a, 2, "node1:7");
	cr_assert(a[0].admitted && !a[1].admitted, "the recorded decisions come back");
	cr_assert_eq(a[0].current, 3, "nothing added twice");
	cr_assert_eq(stored("ns", "t", 1, 60, START60), 3);
	a[0] = st_adm("t", START60, 0, 1, 3, 0, true);
	st_admit_ok(s, a, 1, "node1:8");
	cr_assert(!a[0].admitted);
	cr_assert_eq(a[0].current, 4);
	ops()->destroy(s);
}

static struct strategy_admit grant_adm(double cost, double limit, double weight, double want,
				       unsigned nodes)
{
	struct strategy_admit a = st_adm("g", START60, 0, cost, limit, weight, false);

	a.want = want;
	a.nodes = nodes;
	return a;
}

static double reserved_g(void)
{
	return f->look(true, "ns", "g", 1, 60, START60);
}

/* Grants (docs/CLUSTER.md, "Exact at the limit"): an admitted hit also
 * gets min(want, headroom / (2 * nodes)) in whole costs, reserved at once
 * apart from the count (which holds hits: what current, get_window and
 * get_counters say), and counted against the limit; none when refused,
 * without nodes or want, or under one cost; a resend with the same token
 * gets the same grant and adds nothing. */
CONTRACT(admit_grants_share_the_headroom)
{
	struct strategy *s = store_mk();
	struct strategy_admit a = grant_adm(1, 100, 0, 1000, 3);
	struct strategy_counter q = ST_C("ns", "g", START60, 60, 0);
	static const uint32_t sizes[] = { 60 };
	static struct st_rows rows;

	st_admit_ok(s, &a, 1, NULL);
	cr_assert(a.admitted);
	cr_assert_eq(a.grant, 16, "(100 - 1) / 6 = 16.5, in whole costs: %g", a.grant);
	cr_assert_eq(a.current, 1, "hits, not the grant: %g", a.current);
	cr_assert_eq(reserved_g(), 16);
	a = grant_adm(1, 100, 0, 1000, 3);
	st_admit_ok(s, &a, 1, "n1:1");
	cr_assert_eq(a.grant, 13, "(100 - 2 - 16) / 6: %g", a.grant);
	cr_assert_eq(a.current, 2);
	a = grant_adm(1, 100, 0, 1000, 3);
	st_admit_ok(s, &a, 1, "n1:1");
	cr_assert(a.admitted);
	cr_assert_eq(a.grant, 13, "a resend gets the recorded grant: %g", a.grant);
	cr_assert_eq(a.current, 2, "and adds nothing");
	cr_assert_eq(reserved_g(), 29);
	a = grant_adm(1, 100, 0, 4, 3);
	st_admit_ok(s, &a, 1, NULL);
	cr_assert_eq(a.grant, 4, "want caps it");
	cr_assert_eq(a.current, 3);
	a = grant_adm(1, 100, 0, 1000, 0);
	st_admit_ok(s, &a, 1, NULL);
	cr_assert(a.admitted);
	cr_assert_eq(a.grant, 0, "no nodes, no grant");
	a = grant_adm(1, 100, 0, 0, 3);
	st_admit_ok(s, &a, 1, NULL);
	cr_assert_eq(a.grant, 0, "no want, no grant");
	a = grant_adm(2.5, 100, 0, 1000, 1);
	st_admit_ok(s, &a, 1, NULL);
	cr_assert_eq(a.grant, 27.5, "(100 - 5 - 33 - 2.5) / 2 = 29.75, in costs of 2.5: %g",
		     a.grant);
	cr_assert_eq(a.current, 7.5);
	a = grant_adm(30, 100, 0, 1000, 1);
	st_admit_ok(s, &a, 1, NULL);
	cr_assert(a.admitted, "7.5 hits + 60.5 reserved + 30 <= 100");
	cr_assert_eq(a.grant, 0, "(100 - 98) / 2 is under one cost");
	a = grant_adm(3, 100, 0, 1000, 1);
	st_admit_ok(s, &a, 1, NULL);
	cr_assert(!a.admitted, "37.5 hits + 60.5 reserved + 3 > 100");
	cr_assert_eq(a.grant, 0, "refused: no grant");
	cr_assert_eq(a.current, 37.5);
	cr_assert_eq(stored("ns", "g", 1, 60, START60), 37.5);
	cr_assert_eq(reserved_g(), 60.5);
	/* answers are hits */
	cr_assert_eq(st_get_ok(s, &q), 37.5, "get_window counts a reservation");
	cr_assert_eq(st_fetch_ok(s, "ns", sizes, 1, NOW60, &rows), 1);
	cr_assert_eq(rows.r[0].count, 37.5, "get_counters counts a reservation");
	ops()->destroy(s);
}

/* The previous window weighs on the headroom of a grant, its reservation
 * with it. */
CONTRACT(admit_grant_counts_the_previous_window)
{
	struct strategy *s = store_mk();
	struct strategy_admit a = st_adm("g", START60 - 60, 30, 1, 1000, 0, false);

	a.want = 10;
	a.nodes = 1;
	st_admit_ok(s, &a, 1, NULL);
	cr_assert_eq(a.grant, 10);
	cr_assert_eq(a.current, 31, "30 + the hit");
	a = grant_adm(1, 100, 0.5, 1000, 2);
	st_admit_ok(s, &a, 1, NULL);
	cr_assert(a.admitted);
	cr_assert_eq(a.previous, 31, "hits");
	cr_assert_eq(a.grant, 19, "(100 - 1 - (31 + 10) * 0.5) / 4 = 19.6: %g", a.grant);
	cr_assert_eq(a.current, 1);
	ops()->destroy(s);
}

/* A push's grant hits spent (strategy.h) go from the reservation to the
 * count; a grant returned leaves the reservation, the count does not
 * move. A reservation never goes below 0. With a token, applied once. */
CONTRACT(push_spent_and_returned_grants)
{
	struct strategy *s = store_mk();
	struct strategy_admit a = grant_adm(1, 1000, 0, 100, 1);
	struct strategy_counter b[2];

	st_admit_ok(s, &a, 1, NULL);
	cr_assert_eq(a.grant, 100);
	cr_assert_eq(reserved_g(), 100);
	/* 30 of the grant spent: reported with a push */
	b[0] = ST_C("ns", "g", START60, 60, 0);
	b[0].spent = 30;
	st_push_ok(s, b, 1, "u:1");
	cr_assert_eq(b[0].total, 31);
	st_push_ok(s, b, 1, "u:1");
	cr_assert_eq(b[0].total, 31, "a resend adds nothing");
	cr_assert_eq(reserved_g(), 70);
	/* 5 more spent, the 65 left returned, 2 local hits */
	b[0] = ST_C("ns", "g", START60, 60, 2);
	b[0].spent = 5;
	b[0].returned = 65;
	st_push_ok(s, b, 1, "u:2");
	cr_assert_eq(b[0].total, 38, "1 + 30 + 5 + 2");
	if (f->keeps_empty_reservation)
		cr_assert_eq(reserved_g(), 0);
	else
		cr_assert(isnan(reserved_g()), "nothing reserved: the reservation is gone");
	/* more than is reserved: the reservation stays at 0 */
	b[0] = ST_C("ns", "g", START60, 60, 0);
	b[0].spent = 4;
	b[1] = ST_C("ns", "g", START60, 60, 0);
	st_push_ok(s, b, 2, NULL);
	cr_assert_eq(b[0].total, 42);
	cr_assert_eq(b[1].total, 42, "the same counter twice in a push adds up in order");
	if (f->keeps_empty_reservation)
		cr_assert_eq(reserved_g(), 0);
	else
		cr_assert(isnan(reserved_g()));
	ops()->destroy(s);
}

/* Refused at once: bad numbers. */
CONTRACT(admit_refuses_bad_arguments)
{
	struct strategy *s = store_mk();
	struct strategy_admit a = st_adm("x", START60, 0, -1, 10, 0, false);
	char err[STRATEGY_ERR_MAX] = "";
	struct st_res r = { 0 };

	cr_assert_eq(ops()->admit(s, &a, 1, NULL, st_done_cb, &r, err), -1);
	cr_assert(strstr(err, "admission 0") != NULL, "%s", err);
	a = st_adm("x", START60, 0, 1, 10, 1.5, false);
	cr_assert_eq(ops()->admit(s, &a, 1, NULL, st_done_cb, &r, err), -1);
	a = st_adm("x", START60, NAN, 1, 10, 0, false);
	cr_assert_eq(ops()->admit(s, &a, 1, NULL, st_done_cb, &r, err), -1);
	st_run_for(0.05);
	cr_assert_eq(r.calls, 0);
	ops()->destroy(s);
}

/* ------------------------------------------------------------------ */
/* Heartbeats: the nodes of a namespace                               */
/* ------------------------------------------------------------------ */

/* The nodes that said so within ttl, itself included, per namespace.
 * A store that counts with its own clock (PostgreSQL) is given real
 * seconds; the others the node's clock, which the test moves. Nodes are
 * not counters. */
CONTRACT(heartbeat_counts_the_nodes_seen_within_ttl)
{
	struct strategy *s = store_mk();
	const double ttl = f->store_clock ? 1 : 3, gap = f->store_clock ? 1.3 : 3.5;
	double t = 1000;
	static const uint32_t sizes[] = { 60 };

	cr_assert_eq(st_beat(s, "ns", "a", t, ttl), 1);
	t += f->store_clock ? 0 : 1;
	cr_assert_eq(st_beat(s, "ns", "b", t, ttl), 2);
	cr_assert_eq(st_beat(s, "other", "c", t, ttl), 1, "namespaces are apart");
	cr_assert_eq(st_beat(s, "ns", "a", t, ttl), 2);
	if (f->store_clock)
		st_run_for(gap);
	t += gap;
	cr_assert_eq(st_beat(s, "ns", "a", t, ttl), 1, "b, silent for %g s, no longer counts",
		     gap);
	t += f->store_clock ? 0 : 0.5;
	cr_assert_eq(st_beat(s, "ns", "b", t, ttl), 2);
	cr_assert_eq(counters("ns") + counters("other"), 0);
	cr_assert_eq(st_fetch_ok(s, "ns", sizes, 1, NOW60, NULL), 0);
	ops()->destroy(s);
}

/* ------------------------------------------------------------------ */
/* A store that stops answering, or goes and comes back               */
/* ------------------------------------------------------------------ */

#define SLACK_S 0.2                 /* how late a timeout may fire */

/* While away: an operation is refused at once as not connected, or where
 * a store may take it while reconnecting, fails within timeout_ms. */
static void refused_while_away(int rc, struct st_res *r, const char *err, double t0)
{
	if (rc == -1) {
		cr_assert(strstr(err, "not connected"), "%s", err);
		return;
	}
	cr_assert(f->may_take_while_away, "taken while the store is away");
	cr_assert(st_run_until(&r->done, 5.0));
	cr_assert_eq(r->status, -1);
	cr_assert_leq(st_now() - t0, f->own_timeout_ms / 1000.0 + SLACK_S);
}

/* A store that stops answering (SIGSTOP): the operation in flight fails
 * within timeout_ms with a timeout, its counters not ok, the instance not
 * ready; meanwhile operations are refused (or fail in time); once it
 * answers again the instance reconnects by itself, and the push that
 * timed out may or may not have been applied. */
CONTRACT_OWN(paused_store_times_out_then_recovers)
{
	const double t = f->own_timeout_ms / 1000.0;
	struct strategy *s = store_own_mk();
	struct strategy_counter b[] = { ST_C("ns", "k", START60, 60, 1) };
	static const uint32_t sizes[] = { 60 };
	struct st_res r = { 0 }, w[2] = { 0 };
	char err[STRATEGY_ERR_MAX] = "";
	double t0;
	int rc;

	st_push_ok(s, b, 1, NULL);
	cr_assert_eq(f->own_pause(true), 0);
	t0 = st_now();
	cr_assert_eq(ops()->push_diffs(s, b, 1, NULL, st_done_cb, &r, err), 0, "%s", err);
	cr_assert(st_run_until(&r.done, 5.0), "no callback while paused");
	cr_assert_eq(r.status, -1);
	if (f->timeout_says_only)
		cr_assert_str_eq(r.err, "timeout");
	cr_assert(strstr(r.err, "timeout"), "%s", r.err);
	cr_assert(!b[0].ok);
	cr_assert_leq(r.at - t0, t + SLACK_S, "failed after %.3f s", r.at - t0);
	cr_assert_geq(r.at - t0, t - f->early_s, "failed early, after %.3f s", r.at - t0);
	cr_assert(!ops()->ready(s));
	cr_log_info("%s paused: \"%s\" after %.3f s, timeout_ms %d", f->name, r.err, r.at - t0,
		    f->own_timeout_ms);

	/* while it is stopped, reconnect attempts time out */
	st_run_for(0.1);
	t0 = st_now();
	rc = ops()->push_diffs(s, b, 1, NULL, st_done_cb, &w[0], err);
	refused_while_away(rc, &w[0], err, t0);
	t0 = st_now();
	rc = ops()->get_counters(s, "ns", 2, sizes, 1, NOW60, st_rows_cb, &w[1], err);
	refused_while_away(rc, &w[1], err, t0);
	st_run_for(0.5);
	cr_assert(!ops()->ready(s));

	cr_assert_eq(f->own_pause(false), 0);
	t0 = st_now();
	cr_assert(st_wait_ready(s, true, f->reconnect_s), "no reconnection after SIGCONT");
	cr_log_info("%s: ready again %.0f ms after SIGCONT", f->name, (st_now() - t0) * 1000);
	b[0].diff = 2;
	st_push_ok(s, b, 1, NULL);
	cr_assert(b[0].total == 3 || b[0].total == 4, "total %g", b[0].total);
	ops()->destroy(s);
}

/* A store that goes (killed, or shut down) and comes back on its port,
 * twice: an operation taken before the loop saw it go fails within
 * timeout_ms; that it went is seen (not ready), with an operation or
 * without; operations are refused meanwhile (or fail in time); the
 * instance reconnects by itself, and the counts are the store's (a
 * Redis without persistence starts from 0). */
CONTRACT_OWN(gone_store_fails_then_reconnects)
{
	const double t = f->own_timeout_ms / 1000.0;
	struct strategy *s = store_own_mk();
	struct strategy_counter b[] = { ST_C("ns", "k", START60, 60, 1) };
	struct st_res r = { 0 }, w = { 0 };
	char err[STRATEGY_ERR_MAX] = "";
	double t0, end;
	int rc;

	st_push_ok(s, b, 1, NULL);
	cr_assert_eq(f->own_gone(), 0);
	/* the loop has not seen it go yet: the operation starts, then fails */
	t0 = st_now();
	cr_assert_eq(ops()->push_diffs(s, b, 1, NULL, st_done_cb, &r, err), 0, "%s", err);
	cr_assert(st_run_until(&r.done, 3.0));
	cr_assert_eq(r.status, -1);
	cr_assert(strstr(r.err, f->lost_says) || strstr(r.err, "timeout"), "%s", r.err);
	cr_assert_leq(r.at - t0, t + SLACK_S, "failed after %.3f s", r.at - t0);
	cr_assert(st_wait_ready(s, false, f->notice_s));
	cr_log_info("%s gone: \"%s\" after %.3f s", f->name, r.err, r.at - t0);
	t0 = st_now();
	rc = ops()->push_diffs(s, b, 1, NULL, st_done_cb, &w, err);
	refused_while_away(rc, &w, err, t0);
	st_run_for(0.3);       /* a few refused attempts, backing off */
	f->own_back();
	cr_assert(st_wait_ready(s, true, f->reconnect_s), "no reconnection after restart");
	st_push_ok(s, b, 1, NULL);
	cr_assert_eq(b[0].total, f->durable ? 2 : 1, "%g", b[0].total);

	/* again, seen without any operation */
	cr_assert_eq(f->own_gone(), 0);
	end = st_now() + f->notice_s;
	while (ops()->ready(s) && st_now() < end)
		ev_run(st_loop, EVRUN_ONCE);
	cr_assert(!ops()->ready(s), "still ready with the server gone");
	memset(&w, 0, sizeof(w));
	t0 = st_now();
	rc = ops()->push_diffs(s, b, 1, NULL, st_done_cb, &w, err);
	refused_while_away(rc, &w, err, t0);
	st_run_for(0.3);
	f->own_back();
	cr_assert(st_wait_ready(s, true, f->reconnect_s), "no reconnection after restart");
	b[0].diff = 2;
	st_push_ok(s, b, 1, NULL);
	cr_assert_eq(b[0].total, f->durable ? 4 : 2, "%g", b[0].total);
	ops()->destroy(s);
}

/* The first try of a push with a token times out while the store is
 * stopped: what it sent sits in the server's socket buffer, and the
 * server runs some or all of it once it goes on (its client gone by
 * then). Resent as the sync loop does (the counters not confirmed, the
 * same token, until all are: PostgreSQL's resend may wait on the stuck
 * transaction's locks past its timeout) after reconnecting, every counter
 * is counted exactly once; and once more (a second timeout that was in
 * fact applied) adds nothing.
 * 1500 keys of two namespaces and 2500 copies of one (several calls or
 * chunks of a store). */
/* Pushes the counters of b[0..n) not confirmed yet with token, as the
 * sync loop does: again (once ready) while a try times out, ten tries at
 * most; asserts they all are confirmed. Returns the tries. */
static int push_until_confirmed(struct strategy *s, struct strategy_counter *b, size_t n,
				const char *token)
{
	struct strategy_counter *rs = calloc(n, sizeof(*rs));
	size_t *idx = calloc(n, sizeof(*idx)), nrs;
	struct st_res r = { 0 };
	int tries = 0;

	cr_assert(rs && idx);
	do {
		nrs = 0;
		for (size_t i = 0; i < n; i++)
			if (!b[i].ok) {
				idx[nrs] = i;
				rs[nrs++] = b[i];
			}
		cr_assert(st_wait_ready(s, true, f->reconnect_s), "no reconnection");
		st_push(s, rs, nrs, token, &r);
		for (size_t i = 0; i < nrs; i++)
			b[idx[i]] = rs[i];
		cr_assert(r.status == 0 || strstr(r.err, "timeout"), "resend: %s", r.err);
	} while (r.status != 0 && ++tries < 10);
	cr_assert_eq(r.status, 0, "tried %d times: %s", tries + 1, r.err);
	for (size_t i = 0; i < n; i++)
		cr_assert(b[i].ok, "counter %zu not confirmed", i);
	free(rs);
	free(idx);
	return tries + 1;
}

CONTRACT_OWN(token_resend_after_a_timeout_counts_each_once)
{
	enum { K = 1500, H = 2500, N = K + H };
	struct strategy *s = store_own_mk();
	static char keys[K][12];
	static struct strategy_counter b[N], first[N];
	struct st_res r = { 0 };
	char err[STRATEGY_ERR_MAX] = "";
	size_t ok = 0, nfirst = 0;
	int applied = 0, tries;
	double hot;

	for (int i = 0; i < K; i++) {
		snprintf(keys[i], sizeof(keys[i]), "u%d", i);
		b[i] = ST_C(i % 2 ? "stuck" : "held", keys[i], START60, 60, i % 7 + 1);
	}
	for (int i = K; i < N; i++)
		b[i] = ST_C("stuck", "hot", START60, 60, 1);

	cr_assert_eq(f->own_pause(true), 0);
	cr_assert_eq(ops()->push_diffs(s, b, N, "stuck-1", st_done_cb, &r, err), 0, "%s", err);
	cr_assert(st_run_until(&r.done, 5.0));
	cr_assert_eq(r.status, -1);
	cr_assert(strstr(r.err, "timeout"), "%s", r.err);
	cr_assert_eq(f->own_pause(false), 0);
	cr_assert(st_wait_ready(s, true, f->reconnect_s), "no reconnection after SIGCONT");

	/* what the server did with the stuck push so far (for the log) */
	for (int i = 0; i < K; i++)
		applied += !isnan(stored(b[i].ns, keys[i], strlen(keys[i]), 60, START60));
	hot = stored("stuck", "hot", 3, 60, START60);
	cr_log_info("%s: after SIGCONT the stuck push had applied %d of %d keys, hot = %g",
		    f->name, applied, K, isnan(hot) ? 0 : hot);

	/* resend what was not confirmed, as the sync loop does */
	for (int i = 0; i < N; i++) {
		ok += b[i].ok;
		if (!b[i].ok)
			first[nfirst++] = b[i];
	}
	cr_assert_eq(ok + nfirst, (size_t)N);
	tries = push_until_confirmed(s, b, N, "stuck-1");
	cr_log_info("%s: confirmed after %d resend(s)", f->name, tries);
	cr_assert(tries == 1 || f->resend_may_wait, "%d resends", tries);
	for (size_t i = 0; i < N; i++) {
		if (strcmp(b[i].key, "hot") != 0)
			cr_assert_eq(b[i].total, b[i].diff, "%s: total %g, want %g", b[i].key,
				     b[i].total, b[i].diff);
	}
	for (int i = 0; i < K; i++) {
		double v = stored(b[i].ns, keys[i], strlen(keys[i]), 60, START60);

		cr_assert_eq(v, b[i].diff, "%s counted %g times", keys[i], v / b[i].diff);
	}
	cr_assert_eq(stored("stuck", "hot", 3, 60, START60), H);
	cr_assert_eq(b[N - 1].total, H);

	/* and once more (a second timeout that was in fact applied) */
	tries = push_until_confirmed(s, first, nfirst, "stuck-1");
	cr_log_info("%s: once more, confirmed after %d tries", f->name, tries);
	cr_assert(tries == 1 || f->resend_may_wait, "%d tries", tries);
	cr_assert_eq(stored("stuck", "hot", 3, 60, START60), H);
	cr_assert_eq(stored("held", "u0", 2, 60, START60), 1);
	ops()->destroy(s);
}

/* ------------------------------------------------------------------ */
/* The servers, one per store for the whole binary                    */
/* ------------------------------------------------------------------ */

int main(int argc, char *argv[])
{
	return store_main(argc, argv, "test_store_contract");
}
