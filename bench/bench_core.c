/*
 * bench_core.c - microbenchmark of the counting core (agent/ratelimit.c
 * over agent/shm.h): nanoseconds per rl_hit() - one increment plus the
 * sliding or fixed rate it returns - for a hot key, for 1k / 100k / 1M
 * distinct keys, for two processes on one hot key (checking that no update
 * was lost), and the shared memory used per (key, window).
 *
 *   bench_core [scale]     scale (default 1) multiplies iteration counts
 *
 * Time is passed explicitly (fixed inside one window) so the numbers are
 * the table's, not the clock's; rl_now() is measured apart. Each figure is
 * the best of three runs (shared machines are noisy). Two calibration
 * lines give this machine's price of one uncontended CAS and of one
 * dependent random memory access over a table-sized buffer, the two
 * floors under the hot-key and the 1M-key numbers. Prints one line per
 * case; exits 1 if a count came out wrong.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/atomics.h"
#include "agent/ratelimit.h"
#include "agent/shm.h"

#define NOW   1700000010.0	/* 30 s into a 60 s window */
#define KEYW  24
#define REPS  3

enum { NS_LOCAL = 0, NS_SYNC = 1 };

static int failures;

static double mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Namespace 0 "default": local only (sync_rate < 0, one atomic per hit);
 * namespace 1 "sync": keeps diffs for a sync loop (two atomics). */
static struct rl *mk(size_t max_keys)
{
	static const uint32_t sizes[] = { 60 };
	struct ns_def local = { .window_sizes = { sizes[0] }, .n_window_sizes = 1,
				.sync_rate = -1 };
	struct ns_def sync = { .name = "sync", .window_sizes = { sizes[0] }, .n_window_sizes = 1,
			       .sync_rate = 1, .strategy = "redis" };
	char err[256];
	struct rl *rl = rl_new("bench", max_keys, err, sizeof(err));

	if (!rl || rl_new_namespace(rl, &local, err, sizeof(err)) < 0 ||
	    rl_new_namespace(rl, &sync, err, sizeof(err)) < 0) {
		fprintf(stderr, "bench_core: %s\n", err);
		exit(2);
	}
	return rl;
}

static void check(const char *what, double got, double want)
{
	if (got != want) {
		printf("  FAILED %s: %.17g, want %.17g\n", what, got, want);
		failures++;
	}
}

static double min2(double a, double b)
{
	return a < b ? a : b;
}

/* n hits on one key; weight < 0 sliding, 0 fixed. Returns ns per hit. */
static double run_hot(struct rl *rl, int ns, const char *key, long n, double weight)
{
	struct rl_result r;
	size_t len = strlen(key);
	double t0 = mono();

	for (long i = 0; i < n; i++)
		if (rl_hit(rl, ns, key, len, 60, 1, weight, NOW, -1, true, &r) < 0) {
			failures++;
			break;
		}
	return (mono() - t0) * 1e9 / (double)n;
}

static void bench_hot(long n)
{
	struct rl *rl = mk(1024);
	double sl = 1e9, fx = 1e9, sy = 1e9, total = 0;
	struct rl_result r;

	/* a previous window, so the sliding read finds two slots */
	for (int i = 0; i < 100; i++) {
		rl_hit(rl, NS_LOCAL, "hot", 3, 60, 1, -1, NOW - 60, -1, true, &r);
		rl_hit(rl, NS_SYNC, "hot", 3, 60, 1, -1, NOW - 60, -1, true, &r);
	}
	run_hot(rl, NS_LOCAL, "hot", n / 10, -1);	/* warm up */
	for (int rep = 0; rep < REPS; rep++) {
		sl = min2(sl, run_hot(rl, NS_LOCAL, "hot", n, -1));
		fx = min2(fx, run_hot(rl, NS_LOCAL, "hot", n, 0.0));
		sy = min2(sy, run_hot(rl, NS_SYNC, "hot", n, -1));
	}
	total = (double)(n / 10) + 2.0 * REPS * (double)n;
	printf("hot key, 1 process, sliding      %7.1f ns/hit\n", sl);
	printf("hot key, 1 process, fixed        %7.1f ns/hit\n", fx);
	printf("hot key, 1 process, sliding+diff %7.1f ns/hit  (namespace that syncs)\n", sy);
	rl_hit(rl, NS_LOCAL, "hot", 3, 60, 0, 0.0, NOW, -1, true, &r);
	check("hot count", r.current, total);
	rl_free(rl);
}

static void bench_two_procs(long n)
{
	double best = 1e9;
	struct rl_result r;
	pid_t pid[2];

	for (int rep = 0; rep < REPS; rep++) {
		struct rl *rl = mk(1024);
		double t0, dt;

		t0 = mono();
		for (int p = 0; p < 2; p++) {
			pid[p] = fork();
			if (pid[p] < 0) {
				perror("fork");
				exit(2);
			}
			if (pid[p] == 0) {
				run_hot(rl, NS_SYNC, "hot", n, -1);
				_exit(failures ? 1 : 0);
			}
		}
		for (int p = 0; p < 2; p++) {
			int st;

			waitpid(pid[p], &st, 0);
			if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
				failures++;
		}
		dt = mono() - t0;
		best = min2(best, dt);
		rl_hit(rl, NS_SYNC, "hot", 3, 60, 0, -1, NOW, -1, true, &r);
		check("2-process count (lost update?)", r.current, 2.0 * (double)n);
		rl_free(rl);
	}
	printf("hot key, 2 processes, sliding    %7.1f ns/hit per process "
	       "(%.1f ns aggregate), count %.0f of %.0f\n",
	       best * 1e9 / (double)n, best * 1e9 / (2.0 * (double)n), r.current, 2.0 * (double)n);
}

/* Keys "user:<n>", pre-formatted. */
static char *mk_keys(long nkeys)
{
	char *keys = malloc((size_t)nkeys * KEYW);

	if (!keys)
		exit(2);
	for (long i = 0; i < nkeys; i++)
		snprintf(keys + i * KEYW, KEYW, "user:%ld", i * 7919 + 13);
	return keys;
}

static double pass(struct rl *rl, const char *keys, long nkeys, long n, double now,
		   double weight)
{
	struct rl_result r;
	double t0 = mono();
	long k = 0;

	for (long i = 0; i < n; i++) {
		const char *key = keys + k * KEYW;

		if (rl_hit(rl, NS_LOCAL, key, strlen(key), 60, 1, weight, now, -1, true, &r) < 0)
			failures++;
		if (++k == nkeys)
			k = 0;
	}
	return (mono() - t0) * 1e9 / (double)n;
}

static void bench_keys(long nkeys, long n)
{
	/* a sliding window keeps a current and a previous window per key */
	size_t max_keys = (size_t)nkeys * 2;
	struct rl *rl = mk(max_keys);
	char *keys = mk_keys(nkeys);
	double ins, sl = 1e9, fx = 1e9;
	struct rl_result r;
	long rounds = n / nkeys > 0 ? n / nkeys : 1;

	pass(rl, keys, nkeys, nkeys, NOW - 60, -1);	/* previous window */
	ins = pass(rl, keys, nkeys, nkeys, NOW, -1);	/* inserts the current one */
	for (int rep = 0; rep < REPS; rep++) {
		sl = min2(sl, pass(rl, keys, nkeys, rounds * nkeys, NOW, -1));
		fx = min2(fx, pass(rl, keys, nkeys, rounds * nkeys, NOW, 0.0));
	}
	printf("%7ld keys: sliding %6.1f  fixed %6.1f  first hit (insert) %6.1f ns/hit; "
	       "%zu MB shm, %.0f B per configured (key, window)\n",
	       nkeys, sl, fx, ins, shm_bytes(rl_shm(rl)) >> 20,
	       (double)shm_bytes(rl_shm(rl)) / (double)max_keys);
	rl_hit(rl, NS_LOCAL, keys, strlen(keys), 60, 0, 0.0, NOW, -1, true, &r);
	check("per-key count", r.current, 1.0 + 2.0 * REPS * (double)rounds);
	check("full events", (double)rl_full_events(rl), 0);
	free(keys);
	rl_free(rl);
}

static void bench_clock(long n)
{
	double best = 1e9, s = 0;

	for (int rep = 0; rep < REPS; rep++) {
		double t0 = mono();

		for (long i = 0; i < n; i++)
			s += rl_now();
		best = min2(best, (mono() - t0) * 1e9 / (double)n);
	}
	printf("rl_now()                         %7.1f ns/call%s\n", best, s > 0 ? "" : " ");
}

/* This machine's floors: one uncontended CAS-add on a double, and one
 * dependent random read in a buffer of `bytes` (a pointer chase, so no two
 * misses overlap - as in one hit on a cold key). */
static void calibrate(size_t bytes, long n)
{
	_Atomic uint64_t cell = 0;
	double t0, cas = 1e9, chase = 1e9;
	size_t nlines = bytes / 64;
	uint64_t *buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	uint64_t x = 88172645463325252ULL, idx = 0;

	for (int rep = 0; rep < REPS; rep++) {
		t0 = mono();
		for (long i = 0; i < n; i++)
			atomics_add_double(&cell, 1.0);
		cas = min2(cas, (mono() - t0) * 1e9 / (double)n);
	}
	if (buf == MAP_FAILED) {
		printf("calibration: uncontended CAS %.1f ns\n", cas);
		return;
	}
	/* a random cyclic permutation of the lines, each pointing to the next */
	{
		uint32_t *perm = malloc(nlines * sizeof(*perm));

		if (!perm)
			exit(2);
		for (size_t i = 0; i < nlines; i++)
			perm[i] = (uint32_t)i;
		for (size_t i = nlines - 1; i > 0; i--) {
			size_t j;
			uint32_t tmp;

			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			j = x % (i + 1);
			tmp = perm[i], perm[i] = perm[j], perm[j] = tmp;
		}
		for (size_t i = 0; i < nlines; i++)
			buf[(size_t)perm[i] * 8] = perm[(i + 1) % nlines];
		free(perm);
	}
	for (int rep = 0; rep < REPS; rep++) {
		t0 = mono();
		for (long i = 0; i < n; i++)
			idx = buf[idx * 8];
		chase = min2(chase, (mono() - t0) * 1e9 / (double)n);
	}
	printf("calibration: uncontended CAS %.1f ns; dependent random read in %zu MB %.1f ns%s\n",
	       cas, bytes >> 20, chase, idx == (uint64_t)-1 ? " " : "");
	munmap(buf, bytes);
}

/* A full table (issue 7): nkeys keys fill max_keys = nkeys, then as many
 * new keys again, each evicting the least used entry of a sample. */
static void bench_full(long nkeys)
{
	static const uint32_t sizes[] = { 60 };
	struct ns_def o = { .window_sizes = { sizes[0] }, .n_window_sizes = 1, .sync_rate = -1 };
	char err[256];
	struct rl *rl = rl_new("bench", (size_t)nkeys, err, sizeof(err));
	char *keys = mk_keys(2 * nkeys);
	struct rl_ns_stats st;
	double fill, evict, again;

	if (!rl || rl_new_namespace(rl, &o, err, sizeof(err)) < 0) {
		fprintf(stderr, "bench_core: %s\n", err);
		exit(2);
	}
	fill = pass(rl, keys, nkeys, nkeys, NOW, -1);
	evict = pass(rl, keys + nkeys * KEYW, nkeys, nkeys, NOW, -1);
	/* the first half again: evicted by the second, they evict in turn */
	again = pass(rl, keys, nkeys, nkeys, NOW, -1);
	rl_ns_stats(rl, 0, &st);
	printf("%7ld keys, full table: fill %6.1f  new key evicting %6.1f  (again %6.1f) "
	       "ns/insert; %llu evicted, %llu refused, %lld live\n",
	       nkeys, fill, evict, again, (unsigned long long)st.evicted,
	       (unsigned long long)st.refused, (long long)st.live);
	check("refused on a full table", (double)st.refused, 0);
	check("live entries at max_keys", (double)st.live, (double)nkeys);
	free(keys);
	rl_free(rl);
}

int main(int argc, char **argv)
{
	double scale = argc > 1 ? atof(argv[1]) : 1.0;
	double t0 = mono();

	if (scale <= 0) {
		fprintf(stderr, "usage: bench_core [scale]\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("bench_core: slot %zu B (+2 B probe bound per slot); table load <= 3/4 at max_keys; "
	       "keys benches use max_keys = 2 x keys (current + previous window)\n",
	       sizeof(struct shm_slot));
	calibrate((size_t)347 << 20, (long)(2e6 * scale));
	bench_hot((long)(3e6 * scale));
	bench_two_procs((long)(3e6 * scale));
	bench_keys(1000, (long)(3e6 * scale));
	bench_keys(100000, (long)(3e6 * scale));
	bench_keys(1000000, (long)(2e6 * scale));
	bench_full(1000000);
	bench_clock((long)(1e6 * scale));
	printf("bench_core: %.1f s%s\n", mono() - t0, failures ? ", FAILED checks" : "");
	return failures ? 1 : 0;
}
