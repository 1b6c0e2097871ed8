/*
 * bench_sync_redis.c - one sync cycle of the Redis strategy: push_diffs of
 * N counters (every diff non-zero, so every counter is written) with the
 * totals coming back in the same round trip, for N = 1k, 10k, 100k; then
 * get_counters of the whole namespace (the fetch of the sync loop) for
 * comparison. Prints ms per cycle and counters per second (best and
 * median of REPS cycles, after one warm-up cycle that creates the fields),
 * and the CPU time one cycle costs the client (this process) and, when the
 * bench started the servers itself, the servers (/proc/<pid>/stat, 10 ms
 * ticks: all of them, and the busiest): on a shared machine the CPU times
 * say more than the wall clock. Every push carries a fresh token, as the
 * agent's sync loop's do (one token key per script call); BENCH_NO_TOKEN=1
 * pushes without.
 *
 *   bench_sync_redis [reps]
 *
 * Two stores in the same run: one redis-server, then a Redis Cluster of
 * three masters (strategy_opts.cluster_nodes; BENCH_NO_CLUSTER=1 skips
 * it), both Debian's redis-server without persistence on free loopback
 * ports, started and stopped by pid (tests/lib/redis_server.c,
 * tests/lib/redis_cluster.c). With $REDIS_PORT set, the single server is
 * that one instead. Exits 1 if a total came out wrong or an operation
 * failed.
 */
#include <errno.h>
#include <ev.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "strategies/strategy.h"
#include "tests/lib/redis_cluster.h"
#include "tests/lib/redis_server.h"

#define REPS_DEFAULT 5
#define REPS_MAX 50
#define START 1700000040        /* a 60 s window start */
#define SERVERS_MAX 8

static struct ev_loop *loop;
static pid_t server_pid[SERVERS_MAX];   /* the servers whose CPU is counted */
static size_t nservers;

static double mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double self_cpu(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* utime + stime of one server, in seconds; -1 if unknown. */
static double pid_cpu(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long ut, st;
	size_t n;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (f == NULL)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')');
	/* after "pid (comm)": state is field 3, utime 14, stime 15 */
	if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
				&ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* CPU seconds of every server (out[i]); -1 in out[0] if unknown. */
static void server_cpu(double *out)
{
	out[0] = -1;
	for (size_t i = 0; i < nservers; i++)
		out[i] = pid_cpu(server_pid[i]);
}

/* ------------------------------------------------------------------ */
/* Driving the strategy                                               */
/* ------------------------------------------------------------------ */

struct res {
	bool done;
	int status;
	char err[STRATEGY_ERR_MAX];
	size_t nrows;
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

	(void)rows;
	r->done = true;
	r->status = status;
	r->nrows = n;
	snprintf(r->err, sizeof(r->err), "%s", errstr ? errstr : "");
}

static void wait_done(struct res *r)
{
	while (!r->done)
		ev_run(loop, EVRUN_ONCE);
}

/* One push+read cycle, with a fresh push token as the sync loop uses
 * (BENCH_NO_TOKEN=1: without, for comparison); returns seconds, or -1. */
static double cycle(struct strategy *s, struct strategy_counter *b, size_t n)
{
	static unsigned long long seq;
	static int no_token = -1;
	struct res r = { 0 };
	char err[STRATEGY_ERR_MAX], token[STRATEGY_TOKEN_MAX];
	double t0;

	if (no_token < 0)
		no_token = getenv("BENCH_NO_TOKEN") && strcmp(getenv("BENCH_NO_TOKEN"), "1") == 0;
	snprintf(token, sizeof(token), "bench-%d-%llu", (int)getpid(), ++seq);
	t0 = mono();
	if (redis_strategy.push_diffs(s, b, n, no_token ? NULL : token, done_cb, &r, err) < 0) {
		fprintf(stderr, "push_diffs: %s\n", err);
		return -1;
	}
	wait_done(&r);
	if (r.status < 0) {
		fprintf(stderr, "push_diffs: %s\n", r.err);
		return -1;
	}
	return mono() - t0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static int bench(struct strategy *s, size_t n, int reps)
{
	struct strategy_counter *b = calloc(n, sizeof(*b));
	char *keys = malloc(n * 16);
	char ns[32];
	double t[REPS_MAX], f[REPS_MAX], c0, c1, s0[SERVERS_MAX], s1[SERVERS_MAX];
	double all = 0, busiest = 0;
	static const uint32_t sizes[] = { 60 };
	int rc = 0;

	if (b == NULL || keys == NULL)
		return -1;
	snprintf(ns, sizeof(ns), "bench%zu", n);
	for (size_t i = 0; i < n; i++) {
		char *k = keys + i * 16;
		int len = snprintf(k, 16, "10.%zu.%zu.%zu", (i >> 16) & 255, (i >> 8) & 255,
				   i & 255);

		b[i] = (struct strategy_counter){ .ns = ns, .ns_len = strlen(ns), .key = k,
						  .key_len = (size_t)len, .start = START,
						  .size = 60, .diff = 1 };
	}
	if (cycle(s, b, n) < 0)         /* warm-up: creates the fields */
		goto fail;
	c0 = self_cpu();
	server_cpu(s0);
	for (int i = 0; i < reps; i++) {
		t[i] = cycle(s, b, n);
		if (t[i] < 0)
			goto fail;
	}
	c1 = self_cpu();
	server_cpu(s1);
	for (size_t i = 0; i < n; i++) {
		if (!b[i].ok || b[i].total != 1 + reps) {
			fprintf(stderr, "counter %zu: total %g, want %d\n", i, b[i].total,
				1 + reps);
			goto fail;
		}
	}
	for (int i = 0; i < reps; i++) {
		struct res r = { 0 };
		char err[STRATEGY_ERR_MAX];
		double t0 = mono();

		if (redis_strategy.get_counters(s, ns, strlen(ns), sizes, 1, START + 30, rows_cb,
						&r, err) < 0) {
			fprintf(stderr, "get_counters: %s\n", err);
			goto fail;
		}
		wait_done(&r);
		f[i] = mono() - t0;
		if (r.status < 0 || r.nrows != n) {
			fprintf(stderr, "get_counters: %s (%zu rows, want %zu)\n", r.err, r.nrows,
				n);
			goto fail;
		}
	}
	qsort(t, (size_t)reps, sizeof(t[0]), cmp_double);
	qsort(f, (size_t)reps, sizeof(f[0]), cmp_double);
	printf("push+read %6zu counters: best %7.2f ms, median %7.2f ms, %8.0f counters/s;"
	       " cpu/cycle client %6.2f ms", n, t[0] * 1e3, t[reps / 2] * 1e3, (double)n / t[0],
	       (c1 - c0) * 1e3 / reps);
	for (size_t i = 0; i < nservers && s0[0] >= 0; i++) {
		double d = s1[i] - s0[i];

		all += d;
		busiest = d > busiest ? d : busiest;
	}
	if (nservers == 1 && s0[0] >= 0)
		printf(", server %6.1f ms", all * 1e3 / reps);
	else if (nservers > 1 && s0[0] >= 0)
		printf(", servers %6.1f ms (busiest %5.1f)", all * 1e3 / reps, busiest * 1e3 / reps);
	printf(" | get_counters: best %6.2f ms, %8.0f rows/s\n", f[0] * 1e3, (double)n / f[0]);
	goto out;
fail:
	rc = -1;
out:
	free(b);
	free(keys);
	return rc;
}

/* Runs the three sizes against the store of opts; returns 0 or -1. */
static int bench_store(const char *what, const char *opts, int reps)
{
	static const size_t ns[] = { 1000, 10000, 100000 };
	char err[256];
	struct strategy *s = redis_strategy.create(loop, opts, err, sizeof(err));
	int rc = 0;
	double end;

	if (s == NULL) {
		fprintf(stderr, "bench_sync_redis: %s\n", err);
		return -1;
	}
	end = mono() + 10;
	while (!redis_strategy.ready(s) && mono() < end)
		ev_run(loop, EVRUN_NOWAIT);
	if (!redis_strategy.ready(s)) {
		fprintf(stderr, "bench_sync_redis: %s: not connected\n", what);
		rc = -1;
	}
	printf("redis strategy, one sync cycle, %s, %d reps, %s\n", what, reps,
	       getenv("BENCH_NO_TOKEN") && strcmp(getenv("BENCH_NO_TOKEN"), "1") == 0
		       ? "no push token" : "a push token per cycle");
	for (size_t i = 0; rc == 0 && i < sizeof(ns) / sizeof(ns[0]); i++)
		if (bench(s, ns[i], reps) < 0)
			rc = -1;
	redis_strategy.destroy(s);
	return rc;
}

int main(int argc, char **argv)
{
	static struct redis_server one;
	static struct redis_cluster cl;
	int reps = argc > 1 ? atoi(argv[1]) : REPS_DEFAULT;
	const char *env = getenv("REDIS_PORT");
	char opts[512], what[320], seeds[256];
	int rc = 0;

	signal(SIGPIPE, SIG_IGN);      /* as the agent does */
	if (reps < 1 || reps > REPS_MAX)
		reps = REPS_DEFAULT;
	loop = ev_loop_new(EVFLAG_AUTO);
	/* a generous timeout: this measures throughput, not failure handling */
	if (env) {
		one.port = atoi(env);
	} else if (redis_server_start(&one, 10000) < 0) {
		fprintf(stderr, "bench_sync_redis: redis-server: %s\n", one.err);
		return 1;
	} else {
		server_pid[nservers++] = one.pid;
	}
	snprintf(opts, sizeof(opts), "{\"port\": %d, \"timeout_ms\": 10000}", one.port);
	snprintf(what, sizeof(what), "one redis-server, 127.0.0.1:%d", one.port);
	if (bench_store(what, opts, reps) < 0)
		rc = 1;
	redis_server_stop(&one, 2000);
	nservers = 0;

	if (rc == 0 && !(getenv("BENCH_NO_CLUSTER") && strcmp(getenv("BENCH_NO_CLUSTER"), "1") == 0)) {
		if (redis_cluster_start(&cl, 3, 0, 30000) < 0) {
			fprintf(stderr, "bench_sync_redis: cluster: %s\n", cl.err);
			return 1;
		}
		for (size_t i = 0; i < cl.n; i++)
			server_pid[nservers++] = cl.srv[i].pid;
		redis_cluster_seeds(&cl, seeds, sizeof(seeds));
		snprintf(opts, sizeof(opts), "{\"cluster_nodes\": %s, \"timeout_ms\": 10000}",
			 seeds);
		snprintf(what, sizeof(what), "Redis Cluster of 3 masters, seeds %s", seeds);
		if (bench_store(what, opts, reps) < 0)
			rc = 1;
		redis_cluster_stop(&cl);
	}
	ev_loop_destroy(loop);
	return rc;
}
