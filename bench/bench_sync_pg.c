/*
 * bench_sync_pg.c - one sync cycle of the PostgreSQL strategy: push_diffs
 * of N counters (every diff non-zero, so every row is upserted, totals
 * coming back in the same round trip) then get_counters of the namespace
 * (the fetch of the sync loop), for N = 1k, 10k, 100k. Prints, per N, the
 * first cycle (rows inserted) and the best and median of REPS further
 * cycles (rows updated): ms for the push, the fetch and the whole cycle,
 * and rows per second over the cycle.
 *
 *   bench_sync_pg [reps]
 *
 * Runs against $PG_CONNINFO if set (table "bench_sync_pg", dropped first),
 * else starts its own PostgreSQL 15 (tests/lib/pg_server.c: initdb into a
 * temporary directory, a free loopback port, stopped by pid), durable
 * (fsync on) unless PG_BENCH_FSYNC=off. PG_BENCH_POOL sets the strategy's
 * pool_size (default: the strategy's). Every push carries a new token, as the
 * agent's do (PG_BENCH_TOKENS=off: none, the old path). Exits 1 if a total came out wrong
 * or an operation failed.
 */
#include <ev.h>
#include <stdio.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "strategies/strategy.h"

/* The Makefile links bench programs with the library only, not with the
 * test helpers: compile the server helper in. */
#include "tests/lib/pg_server.c"

#define REPS_DEFAULT 5
#define REPS_MAX 50
#define START 1700000040 /* a 60 s window start */
#define TABLE "bench_sync_pg"

static struct ev_loop *loop;

static double mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU time of this process (the strategy's side of the work), seconds. */
static double cpu(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

struct res {
	bool done;
	int status;
	char err[STRATEGY_ERR_MAX];
	size_t nrows;
	double sum;
};

static void done_cb(void *arg, int status, const char *errstr)
{
	struct res *r = arg;

	r->done = true;
	r->status = status;
	snprintf(r->err, sizeof(r->err), "%s", errstr ? errstr : "");
}

static void rows_cb(void *arg, int status, const char *errstr, const struct strategy_row *rows,
		    size_t n)
{
	struct res *r = arg;

	r->done = true;
	r->status = status;
	r->nrows = n;
	for (size_t i = 0; i < n; i++)
		r->sum += rows[i].count;
	snprintf(r->err, sizeof(r->err), "%s", errstr ? errstr : "");
}

static void wait_done(struct res *r)
{
	while (!r->done)
		ev_run(loop, EVRUN_ONCE);
}

struct timing {
	double push;
	double fetch;
	double cycle;
	double cpu;    /* ours, during the cycle */
};

/* One push + fetch; fills t. Returns 0 or -1. */
static int cycle(struct strategy *s, struct strategy_counter *b, size_t n, const char *ns,
		 double want, struct timing *t)
{
	static const uint32_t sizes[] = { 60 };
	struct res p = { 0 }, f = { 0 };
	char err[STRATEGY_ERR_MAX];
	double t0, c0, t1;
	static unsigned long long seq;
	char tok[STRATEGY_TOKEN_MAX];
	const char *token = NULL;
	const char *env = getenv("PG_BENCH_TOKENS");

	if (!env || strcmp(env, "off") != 0) {
		snprintf(tok, sizeof(tok), "bench-%ld-%llu", (long)getpid(), ++seq);
		token = tok;
	}
	t0 = mono();
	c0 = cpu();
	if (postgres_strategy.push_diffs(s, b, n, token, done_cb, &p, err) < 0) {
		fprintf(stderr, "push_diffs: %s\n", err);
		return -1;
	}
	wait_done(&p);
	if (p.status < 0) {
		fprintf(stderr, "push_diffs: %s\n", p.err);
		return -1;
	}
	t1 = mono();
	if (postgres_strategy.get_counters(s, ns, strlen(ns), sizes, 1, START + 30, rows_cb, &f,
					   err) < 0) {
		fprintf(stderr, "get_counters: %s\n", err);
		return -1;
	}
	wait_done(&f);
	t->push = t1 - t0;
	t->fetch = mono() - t1;
	t->cycle = t->push + t->fetch;
	t->cpu = cpu() - c0;
	if (f.status < 0 || f.nrows != n) {
		fprintf(stderr, "get_counters: %s (%zu rows, want %zu)\n", f.err, f.nrows, n);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		if (!b[i].ok || b[i].total != want) {
			fprintf(stderr, "counter %zu: total %g, want %g\n", i, b[i].total, want);
			return -1;
		}
	}
	if (f.sum != want * (double)n) {
		fprintf(stderr, "get_counters: sum %g, want %g\n", f.sum, want * (double)n);
		return -1;
	}
	return 0;
}

static int cmp_cycle(const void *a, const void *b)
{
	double x = ((const struct timing *)a)->cycle, y = ((const struct timing *)b)->cycle;

	return (x > y) - (x < y);
}

static void report(const char *what, size_t n, const struct timing *t)
{
	printf("  %-7s push %8.2f ms  fetch %7.2f ms  cycle %8.2f ms  %7.0f rows/s  "
	       "client CPU %7.2f ms\n",
	       what, t->push * 1e3, t->fetch * 1e3, t->cycle * 1e3, (double)n / t->cycle,
	       t->cpu * 1e3);
}

static int bench(struct strategy *s, size_t n, int reps)
{
	struct strategy_counter *b = calloc(n, sizeof(*b));
	char *keys = malloc(n * 16);
	struct timing first, t[REPS_MAX];
	char ns[32];
	int rc = 0;

	if (!b || !keys) {
		rc = -1;
		goto out;
	}
	snprintf(ns, sizeof(ns), "bench%zu", n);
	for (size_t i = 0; i < n; i++) {
		char *k = keys + i * 16;
		int len = snprintf(k, 16, "10.%zu.%zu.%zu", (i >> 16) & 255, (i >> 8) & 255,
				   i & 255);

		b[i] = (struct strategy_counter){ .ns = ns, .ns_len = strlen(ns), .key = k,
						  .key_len = (size_t)len, .start = START,
						  .size = 60, .diff = 1 };
	}
	if (cycle(s, b, n, ns, 1, &first) < 0) {
		rc = -1;
		goto out;
	}
	for (int i = 0; i < reps; i++) {
		if (cycle(s, b, n, ns, 2 + i, &t[i]) < 0) {
			rc = -1;
			goto out;
		}
	}
	qsort(t, (size_t)reps, sizeof(t[0]), cmp_cycle);
	printf("%zu counters:\n", n);
	report("insert", n, &first);
	report("best", n, &t[0]);
	report("median", n, &t[reps / 2]);
out:
	free(b);
	free(keys);
	return rc;
}

int main(int argc, char **argv)
{
	static const size_t sizes[] = { 1000, 10000, 100000 };
	int reps = argc > 1 ? atoi(argv[1]) : REPS_DEFAULT;
	const char *env = getenv("PG_CONNINFO"), *fs = getenv("PG_BENCH_FSYNC");
	const char *pool = getenv("PG_BENCH_POOL");
	char pool_opt[64] = "";
	struct pg_server srv = { 0 };
	const char *conninfo = env;
	char opts[512], err[STRATEGY_ERR_MAX], out[256];
	struct strategy *s;
	double end;
	int rc = 0;

	if (reps < 1 || reps > REPS_MAX)
		reps = REPS_DEFAULT;
	if (!conninfo || !*conninfo) {
		if (pg_server_create(&srv, NULL) < 0) {
			fprintf(stderr, "bench_sync_pg: %s\n", srv.err);
			pg_server_destroy(&srv);
			return 1;
		}
		srv.durable = !(fs && !strcmp(fs, "off"));
		if (pg_server_start(&srv, 30000) < 0) {
			fprintf(stderr, "bench_sync_pg: %s\n", srv.err);
			pg_server_destroy(&srv);
			return 1;
		}
		conninfo = srv.conninfo;
	}
	pg_server_query(conninfo, "DROP TABLE IF EXISTS " TABLE, out, sizeof(out));
	loop = ev_loop_new(EVFLAG_AUTO);
	/* The default timeout (500 ms of silence) holds for these sizes. */
	if (pool && *pool)
		snprintf(pool_opt, sizeof(pool_opt), ", \"pool_size\": %d", atoi(pool));
	snprintf(opts, sizeof(opts), "{\"conninfo\": \"%s\", \"table\": \"" TABLE "\"%s}",
		 conninfo, pool_opt);
	s = postgres_strategy.create(loop, opts, err, sizeof(err));
	if (!s) {
		fprintf(stderr, "bench_sync_pg: %s\n", err);
		pg_server_destroy(&srv);
		return 1;
	}
	end = mono() + 10;
	while (!postgres_strategy.ready(s) && mono() < end)
		ev_run(loop, EVRUN_NOWAIT);
	if (!postgres_strategy.ready(s)) {
		fprintf(stderr, "bench_sync_pg: not connected\n");
		rc = 1;
	}
	pg_server_query(conninfo, "SHOW fsync", out, sizeof(out));
	printf("postgres strategy, one sync cycle (push_diffs + get_counters), %s, fsync=%s, "
	       "pool_size %s, %d reps\n", env && *env ? "PG_CONNINFO" : "own server", out,
	       pool && *pool ? pool : "default (2)", reps);
	for (size_t i = 0; rc == 0 && i < sizeof(sizes) / sizeof(sizes[0]); i++)
		if (bench(s, sizes[i], reps) < 0)
			rc = 1;
	postgres_strategy.destroy(s);
	ev_loop_destroy(loop);
	pg_server_query(conninfo, "DROP TABLE IF EXISTS " TABLE, out, sizeof(out));
	pg_server_destroy(&srv);
	return rc;
}
