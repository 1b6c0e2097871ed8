/*
 * bench_sync_redis.c - one sync cycle of the Redis strategy: push_diffs of
 * N counters (every diff non-zero, so every counter is written) with the
 * totals coming back in the same round trip, for N = 1k, 10k, 100k; then
 * get_counters of the whole namespace (the fetch of the sync loop) for
 * comparison. Prints ms per cycle and counters per second (best and
 * median of REPS cycles, after one warm-up cycle that creates the fields),
 * and the CPU time one cycle costs the client (this process) and, when the
 * bench started the server itself, the server (/proc/<pid>/stat, 10 ms
 * ticks): on a shared machine the CPU times say more than the wall clock.
 * Every push carries a fresh token, as the agent's sync loop's do (one
 * token key per script call); BENCH_NO_TOKEN=1 pushes without.
 *
 *   bench_sync_redis [reps]
 *
 * Runs against the redis-server on 127.0.0.1:$REDIS_PORT if set, else
 * starts its own (Debian's redis-server, no persistence) on a free
 * loopback port in a temporary directory and stops it by pid. Exits 1 if
 * a total came out wrong or an operation failed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "strategies/strategy.h"

#define REPS_DEFAULT 5
#define REPS_MAX 50
#define START 1700000040        /* a 60 s window start */

static struct ev_loop *loop;
static pid_t server_pid;
static char server_dir[64];

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

/* utime + stime of our redis-server, in seconds; -1 if unknown. */
static double server_cpu(void)
{
	char path[64], buf[1024], *p;
	unsigned long ut, st;
	size_t n;
	FILE *f;

	if (server_pid <= 0)
		return -1;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)server_pid);
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

/* ------------------------------------------------------------------ */
/* Our own redis-server                                               */
/* ------------------------------------------------------------------ */

static int free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static int pings(int port)
{
	struct timeval tv = { .tv_sec = 1 };
	redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
	redisReply *r;
	int ok = 0;

	if (c && !c->err && (r = redisCommand(c, "PING")) != NULL) {
		ok = r->type == REDIS_REPLY_STATUS;
		freeReplyObject(r);
	}
	if (c)
		redisFree(c);
	return ok;
}

static void stop_server(void)
{
	char path[128];

	if (server_pid > 0) {
		kill(server_pid, SIGTERM);
		for (int i = 0; i < 200 && waitpid(server_pid, NULL, WNOHANG) == 0; i++)
			usleep(10000);
		kill(server_pid, SIGKILL);
		waitpid(server_pid, NULL, 0);
		server_pid = 0;
	}
	if (server_dir[0]) {
		snprintf(path, sizeof(path), "%s/redis.log", server_dir);
		unlink(path);
		rmdir(server_dir);
	}
}

static int start_server(void)
{
	char port_s[16], log[128];
	int port = free_port();

	snprintf(server_dir, sizeof(server_dir), "/tmp/bench_redis.XXXXXX");
	if (port < 0 || mkdtemp(server_dir) == NULL)
		return -1;
	snprintf(port_s, sizeof(port_s), "%d", port);
	snprintf(log, sizeof(log), "%s/redis.log", server_dir);
	server_pid = fork();
	if (server_pid < 0)
		return -1;
	if (server_pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execlp("redis-server", "redis-server", "--port", port_s, "--bind", "127.0.0.1",
		       "--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", server_dir,
		       (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 500; i++) {
		if (waitpid(server_pid, NULL, WNOHANG) == server_pid) {
			server_pid = 0;
			return -1;
		}
		if (pings(port))
			return port;
		usleep(10000);
	}
	return -1;
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
	double t[REPS_MAX], f[REPS_MAX], c0, s0, c1, s1;
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
	s0 = server_cpu();
	for (int i = 0; i < reps; i++) {
		t[i] = cycle(s, b, n);
		if (t[i] < 0)
			goto fail;
	}
	c1 = self_cpu();
	s1 = server_cpu();
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
	if (s0 >= 0 && s1 >= 0)
		printf(", server %6.1f ms", (s1 - s0) * 1e3 / reps);
	printf(" | get_counters: best %6.2f ms, %8.0f rows/s\n", f[0] * 1e3, (double)n / f[0]);
	goto out;
fail:
	rc = -1;
out:
	free(b);
	free(keys);
	return rc;
}

int main(int argc, char **argv)
{
	static const size_t ns[] = { 1000, 10000, 100000 };
	int reps = argc > 1 ? atoi(argv[1]) : REPS_DEFAULT;
	const char *env = getenv("REDIS_PORT");
	int port = env ? atoi(env) : start_server();
	char opts[128], err[256];
	struct strategy *s;
	int rc = 0;
	double end;

	signal(SIGPIPE, SIG_IGN);      /* as the agent does */
	if (reps < 1 || reps > REPS_MAX)
		reps = REPS_DEFAULT;
	if (port <= 0) {
		fprintf(stderr, "bench_sync_redis: cannot start redis-server\n");
		stop_server();
		return 1;
	}
	loop = ev_loop_new(EVFLAG_AUTO);
	/* a generous timeout: this measures throughput, not failure handling */
	snprintf(opts, sizeof(opts), "{\"port\": %d, \"timeout_ms\": 10000}", port);
	s = redis_strategy.create(loop, opts, err, sizeof(err));
	if (s == NULL) {
		fprintf(stderr, "bench_sync_redis: %s\n", err);
		stop_server();
		return 1;
	}
	end = mono() + 5;
	while (!redis_strategy.ready(s) && mono() < end)
		ev_run(loop, EVRUN_NOWAIT);
	if (!redis_strategy.ready(s)) {
		fprintf(stderr, "bench_sync_redis: not connected\n");
		rc = 1;
	}
	printf("redis strategy, one sync cycle, 127.0.0.1:%d, %d reps, %s\n", port, reps,
	       getenv("BENCH_NO_TOKEN") && strcmp(getenv("BENCH_NO_TOKEN"), "1") == 0
		       ? "no push token" : "a push token per cycle");
	for (size_t i = 0; rc == 0 && i < sizeof(ns) / sizeof(ns[0]); i++)
		if (bench(s, ns[i], reps) < 0)
			rc = 1;
	redis_strategy.destroy(s);
	ev_loop_destroy(loop);
	stop_server();
	return rc;
}
