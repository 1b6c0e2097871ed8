/*
 * test_cluster.c - several agent nodes sharing one real store (Redis or
 * PostgreSQL), driven over SPOP by our own client (tests/lib/rawspop.c).
 *
 * A node is one agent process tree (master + 2 workers) on its own port;
 * every test starts its own store and nodes and stops them by pid. What is
 * checked is the contract of agent/sync.h:
 *   - convergence: after hits spread over the nodes, every node reads the
 *     cluster total within a few sync periods, and the store holds it;
 *   - answers never wait for the store: while the store is down (Redis
 *     SIGKILLed, then restarted on its port) or paused (SIGSTOP, Redis and
 *     PostgreSQL), every NOTIFY is ACKed within ACK_BOUND_MS, and once it
 *     is back the diffs counted meanwhile reach it exactly once: nothing
 *     lost, nothing counted twice, even when a paused store applies late
 *     the pushes that timed out (the resend carries the same token);
 *   - SIGTERM: the master pushes what is left before exiting, and gives up
 *     within its bound when the store answers nothing;
 *   - an operator's view (GET /keys, ctl keys) holds the store's count of
 *     a key on any node, read when asked, or says that the store is away;
 *   - every node exits 0 on SIGTERM, with no sanitizer report or worker
 *     respawn in its log (checked when each test stops its nodes).
 * Measured figures (convergence time, ACK latency quantiles, what was
 * counted twice) are printed with cr_log_info (--verbose shows them).
 *
 * Keys are fresh random strings. The window size is picked per test so
 * that the test cannot cross a window boundary (pick_window()): a window
 * change would move hits into a "previous" window and the exact equalities
 * below would not hold.
 *
 * The tests of this file take a lock file in turn (even under --jobs N):
 * their time bounds assume they do not share the two cores with another
 * cluster of agents.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/lib/agentproc.h"
#include "tests/lib/httpc.h"
#include "tests/lib/pg_server.h"
#include "tests/lib/rawspop.h"
#include "tests/lib/redis_cluster.h"
#include "tests/lib/redis_sentinel.h"
#include "tests/lib/redis_server.h"

#define NODES          3
#define CONNS          4        /* connections per node (spread over workers) */
#define START_MS       15000    /* agent start (sanitized) */
#define STORE_MS       10000    /* store start */
#define IO_MS          2000     /* read timeout of one ACK (the bound is below) */
#define ACK_BOUND_MS   250      /* every ACK within this, store up or not */
#define SYNC_RATE      0.5      /* seconds */
#define WINDOW_MARGIN  120      /* seconds a test may last inside one window */
#define LOCK_PATH      "/tmp/spoa-ratelimit-test_cluster.lock"
#define PG_TABLE       "rl_cluster"

struct node {
	struct agentproc a;
	int fd[CONNS];
	bool started;
};

/* Latencies of ACKs, in microseconds; a histogram in 100 us steps. */
#define LAT_BINS 4000           /* up to 400 ms; later ones go to the last bin */
struct lat {
	uint64_t n;
	int64_t max_us;
	uint64_t over_bound;        /* ACKs later than ACK_BOUND_MS */
	uint64_t bins[LAT_BINS];
};

/* One test per process (Criterion forks), so file statics are private. */
static struct node nodes[NODES];
static struct redis_server redis;
static bool redis_started;
static struct pg_server pg;
static bool pg_created;
static struct redis_cluster rcl;          /* Redis Cluster cases */
static bool rcl_up;
static struct redis_sentinels rsn;        /* Sentinel cases */
static bool rsn_up;
static size_t nodes_up = NODES;           /* nodes wait_converged() reads */
static int lock_fd = -1;
static struct rawspop_buf wb;
static struct rawspop_frame fr;
static struct rawspop_actions acts;
static uint64_t next_sid = 1;
static char errbuf[512];
static struct lat lat_all;

/* ---------------------------------------------------------------- time */

static int64_t mono_ms(void)
{
	return rawspop_now_ms();
}

static int64_t mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* A window size (seconds) whose current window still has WINDOW_MARGIN
 * seconds to run: 3600, or the first size above it that does. Windows
 * start at multiples of their size (agent/window.h), so the same size is
 * current on every node. */
static unsigned pick_window(void)
{
	time_t now = time(NULL);
	unsigned w = 3600;

	while (w - (unsigned)(now % w) < WINDOW_MARGIN)
		w++;
	return w;
}

/* A fresh random key: prefix + 16 hex digits. */
static void rand_key(char *out, size_t len, const char *prefix)
{
	uint64_t r = 0;

	if (getrandom(&r, sizeof(r), 0) != sizeof(r))
		r = (uint64_t)mono_us() ^ ((uint64_t)getpid() << 32);
	snprintf(out, len, "%s-%016llx", prefix, (unsigned long long)r);
}

static void lat_add(struct lat *l, int64_t us)
{
	size_t bin = (size_t)(us / 100);

	l->n++;
	if (us > l->max_us)
		l->max_us = us;
	if (us > (int64_t)ACK_BOUND_MS * 1000)
		l->over_bound++;
	l->bins[bin < LAT_BINS ? bin : LAT_BINS - 1]++;
}

/* The q-quantile (0..1) in ms, to the 0.1 ms bin. */
static double lat_quantile(const struct lat *l, double q)
{
	uint64_t want = (uint64_t)ceil(q * (double)l->n), seen = 0;

	for (size_t i = 0; i < LAT_BINS; i++) {
		seen += l->bins[i];
		if (seen >= want && seen > 0)
			return (double)(i + 1) / 10.0;
	}
	return (double)l->max_us / 1000.0;
}

static void lat_report(const char *what, const struct lat *l)
{
	cr_log_info("%s: %llu ACKs, p50 %.1f ms, p99 %.1f ms, p99.9 %.1f ms, max %.1f ms, "
		    "%llu over %d ms", what, (unsigned long long)l->n, lat_quantile(l, 0.5),
		    lat_quantile(l, 0.99), lat_quantile(l, 0.999), (double)l->max_us / 1000.0,
		    (unsigned long long)l->over_bound, ACK_BOUND_MS);
}

/* ---------------------------------------------------------------- SPOP */

static void conn_hello(int fd)
{
	struct rawspop_hello_opts o = rawspop_hello_defaults();
	enum rawspop_read_res r;

	rawspop_buf_reset(&wb);
	rawspop_hello(&wb, &o);
	cr_assert(rawspop_send_buf(fd, &wb) == 0, "send HELLO: %s", strerror(errno));
	r = rawspop_read_frame(fd, &fr, IO_MS);
	cr_assert(r == RAWSPOP_READ_FRAME && fr.type == RAWSPOP_AGENT_HELLO,
		  "expected AGENT-HELLO, got read result %d type %u", (int)r, fr.type);
}

/* Sends NOTIFY ratelimit(key, window, cost) as stream *sid. Returns 0, or
 * -1 with errbuf set. */
static int notify_send(int fd, const char *key, unsigned window, int64_t cost, uint64_t *sid)
{
	size_t start;

	*sid = next_sid++;
	rawspop_buf_reset(&wb);
	start = rawspop_notify_begin(&wb, *sid, 1);
	rawspop_msg(&wb, "ratelimit", 3);
	rawspop_arg_str(&wb, "key", key);
	rawspop_arg_int(&wb, "window", window);
	rawspop_arg_int(&wb, "cost", cost);
	rawspop_frame_end(&wb, start);
	if (rawspop_send_buf(fd, &wb) < 0) {
		snprintf(errbuf, sizeof(errbuf), "send NOTIFY: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* Reads the ACK of stream sid within wait_ms. Returns 0 with its rate in
 * *rate, or -1 with errbuf set (also when the ACK sets `error`). */
static int notify_ack(int fd, uint64_t sid, int wait_ms, int64_t *rate)
{
	const struct rawspop_action *v;
	enum rawspop_read_res r;

	r = rawspop_read_frame(fd, &fr, wait_ms);
	if (r != RAWSPOP_READ_FRAME) {
		snprintf(errbuf, sizeof(errbuf), "no ACK within %d ms (read result %d)", wait_ms,
			 (int)r);
		return -1;
	}
	if (fr.type != RAWSPOP_ACK || fr.stream_id != sid || fr.frame_id != 1) {
		snprintf(errbuf, sizeof(errbuf), "expected ACK %llu/1, got type %u ids %llu/%llu",
			 (unsigned long long)sid, fr.type, (unsigned long long)fr.stream_id,
			 (unsigned long long)fr.frame_id);
		return -1;
	}
	if (rawspop_decode_actions(&fr, &acts, errbuf, sizeof(errbuf)) < 0)
		return -1;
	v = rawspop_var_find(&acts, "error");
	if (v) {
		snprintf(errbuf, sizeof(errbuf), "ACK sets error \"%s\"", v->value.s);
		return -1;
	}
	v = rawspop_var_find(&acts, "rate");
	if (!v || !rawspop_is_int(v->value.type)) {
		snprintf(errbuf, sizeof(errbuf), "ACK without an integer rate");
		return -1;
	}
	*rate = v->value.i;
	return 0;
}

/* One NOTIFY ratelimit(key, window, cost) and its ACK. Returns 0 with the
 * ACK's rate in *rate and the round trip in *us, or -1 with errbuf set. */
static int notify(int fd, const char *key, unsigned window, int64_t cost, int64_t *rate,
		  int64_t *us)
{
	int64_t t0 = mono_us();
	uint64_t sid;
	int rc;

	if (notify_send(fd, key, window, cost, &sid) < 0)
		return -1;
	rc = notify_ack(fd, sid, IO_MS, rate);
	*us = mono_us() - t0;
	return rc;
}

/* A hit (cost 1) on connection c of node n; the ACK's latency goes to l. */
static void hit(size_t n, size_t c, const char *key, unsigned window, struct lat *l)
{
	int64_t rate, us;

	cr_assert(notify(nodes[n].fd[c], key, window, 1, &rate, &us) == 0,
		  "hit on node %zu conn %zu: %s", n, c, errbuf);
	lat_add(l, us);
}

/* The rate node n reads for key (cost 0: read without counting). */
static int64_t node_rate(size_t n, const char *key, unsigned window)
{
	int64_t rate, us;

	cr_assert(notify(nodes[n].fd[0], key, window, 0, &rate, &us) == 0,
		  "read on node %zu: %s", n, errbuf);
	lat_add(&lat_all, us);
	return rate;
}

/* ---------------------------------------------------------------- nodes */

static const char *node_log(size_t n)
{
	static char tail[4000];

	agentproc_log_tail(&nodes[n].a, tail, sizeof(tail));
	return tail;
}

/* Lines of node n's log holding needle. */
static size_t log_count(size_t n, const char *needle)
{
	char line[4096];
	size_t count = 0;
	FILE *f;

	if (!nodes[n].a.log_path[0] || !(f = fopen(nodes[n].a.log_path, "r")))
		return 0;
	while (fgets(line, sizeof(line), f))
		count += strstr(line, needle) != NULL;
	fclose(f);
	return count;
}

/* Starts node n with config json (2 workers) and opens its connections. */
static void node_start(size_t n, const char *json)
{
	static const char *const args[] = { "-w", "2", NULL };
	struct node *nd = &nodes[n];

	if (!agentproc_available())
		cr_skip_test("agent binary %s not built ($AGENT)", agentproc_binary());
	cr_assert(agentproc_start(&nd->a, json, args, START_MS) == 0,
		  "starting node %zu: %s\n--- log ---\n%s", n, nd->a.err, node_log(n));
	nd->started = true;
	for (size_t c = 0; c < CONNS; c++) {
		nd->fd[c] = rawspop_connect(nd->a.port, IO_MS);
		cr_assert(nd->fd[c] >= 0, "connect to node %zu: %s", n, strerror(errno));
		conn_hello(nd->fd[c]);
	}
}

static void node_close_conns(size_t n)
{
	for (size_t c = 0; c < CONNS; c++) {
		if (nodes[n].fd[c] >= 0)
			close(nodes[n].fd[c]);
		nodes[n].fd[c] = -1;
	}
}

/* Stops node n (SIGTERM, the master's final flush included) and checks
 * its exit status and log. Keeps the log when something is wrong. */
static void node_stop(size_t n)
{
	struct node *nd = &nodes[n];
	bool crash;
	int st;

	if (!nd->started)
		return;
	nd->started = false;
	node_close_conns(n);
	st = agentproc_stop(&nd->a, 10000, false);
	crash = agentproc_log_has_crash(&nd->a);
	cr_expect(!crash, "node %zu's log holds a sanitizer report or a respawn:\n%s", n,
		  node_log(n));
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "node %zu: exit status %#x after SIGTERM (log %s)", n, (unsigned)st,
		  nd->a.log_path);
	if (!crash && WIFEXITED(st) && WEXITSTATUS(st) == 0 && !getenv("CLUSTER_KEEP_LOGS"))
		agentproc_stop(&nd->a, 0, true);
	else
		cr_log_warn("node %zu: log kept in %s", n, nd->a.log_path);
}

/* ---------------------------------------------------------------- stores */

static void redis_up(bool persistent)
{
	if (!redis_server_available())
		cr_skip_test("redis-server is not installed");
	memset(&redis, 0, sizeof(redis));
	if (persistent) {
		/* Every write on disk before its reply: a SIGKILLed server
		 * comes back with everything it confirmed, so "nothing
		 * lost" is about the agent, not about the store. */
		redis.extra[0] = "--appendonly";
		redis.extra[1] = "yes";
		redis.extra[2] = "--appendfsync";
		redis.extra[3] = "always";
	}
	cr_assert(redis_server_start(&redis, STORE_MS) == 0, "redis-server: %s", redis.err);
	redis_started = true;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)ftw;
	if (flag == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

static void redis_down(void)
{
	char dir[REDIS_SERVER_PATH_MAX];

	if (!redis_started)
		return;
	redis_started = false;
	snprintf(dir, sizeof(dir), "%s", redis.dir);
	redis_server_stop(&redis, 3000);
	/* Redis 7 keeps its AOF in a subdirectory, which redis_server_stop()
	 * (files only) leaves behind, and the directory with it. */
	if (dir[0] && access(dir, F_OK) == 0)
		nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

/* The store's total of key in window size w: the field `key` summed over
 * every hash "rl:{default:<bucket>}:<w>:<start>" (one, in practice).
 * Returns -1 if Redis does not answer. */
static double redis_total_ns(const char *ns, const char *key, unsigned w)
{
	char pattern[128], cursor[32] = "0";
	double sum = 0;

	snprintf(pattern, sizeof(pattern), "rl:{%s:*}:%u:*", ns, w);
	do {
		redisReply *rep = redis_server_command(&redis, "SCAN %s MATCH %s COUNT 1000",
						       cursor, pattern);

		if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2) {
			if (rep)
				freeReplyObject(rep);
			return -1;
		}
		snprintf(cursor, sizeof(cursor), "%s", rep->element[0]->str);
		for (size_t i = 0; i < rep->element[1]->elements; i++) {
			redisReply *v = redis_server_command(&redis, "HGET %s %s",
							     rep->element[1]->element[i]->str, key);

			if (!v) {
				freeReplyObject(rep);
				return -1;
			}
			if (v->type == REDIS_REPLY_STRING)
				sum += strtod(v->str, NULL);
			else if (v->type == REDIS_REPLY_INTEGER)
				sum += (double)v->integer;
			freeReplyObject(v);
		}
		freeReplyObject(rep);
	} while (strcmp(cursor, "0") != 0);
	return sum;
}

static double redis_total(const char *key, unsigned w)
{
	return redis_total_ns("default", key, w);
}

static void pg_up(void)
{
	if (!pg_server_available())
		cr_skip_test("PostgreSQL is not installed (%s)", pg_server_bindir());
	cr_assert(pg_server_create(&pg, NULL) == 0, "initdb: %s", pg.err);
	pg_created = true;
	cr_assert(pg_server_start(&pg, STORE_MS) == 0, "postgres: %s", pg.err);
}

static void pg_down(void)
{
	if (!pg_created)
		return;
	pg_created = false;
	pg_server_destroy(&pg);
}

/* The table's total of key in window size w, or -1 (no table yet, or an
 * error). Keys here are [a-z0-9-], safe inside a literal. */
static double pg_total(const char *key, unsigned w)
{
	char sql[512], out[64];

	snprintf(sql, sizeof(sql),
		 "SELECT coalesce(sum(count), 0) FROM " PG_TABLE " WHERE namespace = 'default' "
		 "AND key = convert_to('%s', 'UTF8') AND window_size = %u", key, w);
	if (pg_server_query(pg.conninfo, sql, out, sizeof(out)) < 0)
		return -1;
	return strtod(out, NULL);
}

/* ---------------------------------------------------------------- configs */

static char json[2048];

/* Configs with the store timeout the case needs: short where the test is
 * about a store that is down or paused (answers must not wait), long where
 * it is about exact counts (a sanitized agent on a busy machine must not
 * fall back to its local count for want of time). */
static const char *cfg_redis_t(unsigned w, double rate, int timeout_ms)
{
	snprintf(json, sizeof(json),
		 "{\"log_level\":\"info\",\"namespaces\":[{\"name\":\"default\","
		 "\"window_sizes\":[%u],\"sync_rate\":%g,\"strategy\":\"redis\","
		 "\"strategy_opts\":{\"host\":\"127.0.0.1\",\"port\":%d,\"timeout_ms\":%d}}]}",
		 w, rate, redis.port, timeout_ms);
	return json;
}

static const char *cfg_redis(unsigned w, double rate)
{
	return cfg_redis_t(w, rate, 100);
}

static const char *cfg_pg_t(unsigned w, double rate, int timeout_ms)
{
	snprintf(json, sizeof(json),
		 "{\"log_level\":\"info\",\"namespaces\":[{\"name\":\"default\","
		 "\"window_sizes\":[%u],\"sync_rate\":%g,\"strategy\":\"postgres\","
		 "\"strategy_opts\":{\"conninfo\":\"host=127.0.0.1 port=%d dbname=postgres "
		 "user=postgres\",\"table\":\"" PG_TABLE "\",\"timeout_ms\":%d}}]}",
		 w, rate, pg.port, timeout_ms);
	return json;
}

static const char *cfg_pg(unsigned w, double rate)
{
	return cfg_pg_t(w, rate, 300);
}

/* ---------------------------------------------------------------- fixture */

static void setup(void)
{
	lock_fd = open(LOCK_PATH, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
	if (lock_fd >= 0)
		while (flock(lock_fd, LOCK_EX) < 0 && errno == EINTR)
			;
	for (size_t n = 0; n < NODES; n++)
		for (size_t c = 0; c < CONNS; c++)
			nodes[n].fd[c] = -1;
	signal(SIGPIPE, SIG_IGN);
}

static void teardown(void)
{
	for (size_t n = 0; n < NODES; n++)
		node_stop(n);
	redis_down();
	pg_down();
	if (rcl_up)
		redis_cluster_stop(&rcl);
	if (rsn_up)
		redis_sentinels_stop(&rsn);
	if (lock_fd >= 0)
		close(lock_fd);
}

TestSuite(cluster, .init = setup, .fini = teardown, .timeout = 60);

/* ---------------------------------------------------------------- checks */

typedef double (*store_total_fn)(const char *key, unsigned w);

/* Polls until every node reads `want` for key and the store holds it, or
 * until timeout_ms. Returns the ms it took, or -1 on timeout (the last
 * values seen are in rates[] and *total). */
static int64_t wait_converged(const char *key, unsigned w, int64_t want, store_total_fn total_fn,
			      int timeout_ms, int64_t rates[NODES], double *total)
{
	int64_t t0 = mono_ms();

	for (;;) {
		bool all = true;

		for (size_t n = 0; n < nodes_up; n++) {
			rates[n] = node_rate(n, key, w);
			all = all && rates[n] == want;
		}
		*total = total_fn(key, w);
		if (all && *total == (double)want)
			return mono_ms() - t0;
		if (mono_ms() - t0 >= timeout_ms)
			return -1;
		sleep_ms(20);
	}
}

/* Sends hits round-robin over every connection of every node. */
static void spread_hits(const char *key, unsigned w, size_t hits, struct lat *l)
{
	for (size_t i = 0; i < hits; i++)
		hit(i % NODES, (i / NODES) % CONNS, key, w, l);
}

static void converge_case(const char *store, store_total_fn total_fn, unsigned w)
{
	const size_t hits = 900;
	int64_t rates[NODES], ms, budget_ms = (int64_t)(3 * SYNC_RATE * 1000);
	double total;
	char key[64];

	rand_key(key, sizeof(key), "conv");
	spread_hits(key, w, hits, &lat_all);
	/* Each node counted its third; the others' come through the store. */
	ms = wait_converged(key, w, (int64_t)hits, total_fn, (int)budget_ms, rates, &total);
	cr_log_info("%s: %zu hits over %d nodes x %d connections, window %u s: converged in "
		    "%lld ms (sync_rate %g s)", store, hits, NODES, CONNS, w, (long long)ms,
		    SYNC_RATE);
	lat_report(store, &lat_all);
	cr_assert(ms >= 0,
		  "%s: not converged within 3 x sync_rate (%lld ms): node rates %lld %lld %lld, "
		  "store total %g, want %zu", store, (long long)budget_ms, (long long)rates[0],
		  (long long)rates[1], (long long)rates[2], total, hits);
	/* And it stays so (no late push adds anything). */
	sleep_ms((int)(2 * SYNC_RATE * 1000));
	for (size_t n = 0; n < NODES; n++)
		cr_expect_eq(node_rate(n, key, w), (int64_t)hits, "node %zu drifted after converging",
			     n);
	total = total_fn(key, w);
	cr_expect(total == (double)hits, "%s total drifted to %g after converging (want %zu)",
		  store, total, hits);
}

/* ---------------------------------------------------------------- tests */

Test(cluster, redis_three_nodes_converge)
{
	unsigned w = pick_window();

	redis_up(false);
	for (size_t n = 0; n < NODES; n++)
		node_start(n, cfg_redis(w, SYNC_RATE));
	converge_case("redis", redis_total, w);
}

Test(cluster, postgres_three_nodes_converge)
{
	unsigned w = pick_window();

	pg_up();
	for (size_t n = 0; n < NODES; n++)
		node_start(n, cfg_pg(w, SYNC_RATE));
	converge_case("postgres", pg_total, w);
}

/* sync_rate 0: each hit is applied in the store before its ACK, so every
 * answer, on whichever node, is the exact cluster count so far. */
static void synchronous_case(const char *store, store_total_fn total_fn, unsigned w)
{
	const size_t hits = 300;
	int64_t rate, us;
	char key[64];

	rand_key(key, sizeof(key), "sync0");
	for (size_t i = 0; i < hits; i++) {
		size_t n = i % NODES, c = (i / NODES) % CONNS;
		cr_assert(notify(nodes[n].fd[c], key, w, 1, &rate, &us) == 0,
			  "hit %zu on node %zu: %s", i + 1, n, errbuf);
		lat_add(&lat_all, us);
		cr_assert_eq(rate, (int64_t)(i + 1), "%s: hit %zu on node %zu answered rate %lld",
			     store, i + 1, n, (long long)rate);
	}
	/* Reads (cost 0) on every node: the same exact total. */
	for (size_t n = 0; n < NODES; n++)
		cr_assert_eq(node_rate(n, key, w), (int64_t)hits, "%s: node %zu reads a wrong total",
			     store, n);
	cr_assert(total_fn(key, w) == (double)hits, "%s: store total %g, want %zu", store,
		  total_fn(key, w), hits);
	lat_report(store, &lat_all);
}

Test(cluster, redis_synchronous_exact)
{
	unsigned w = pick_window();

	redis_up(false);
	for (size_t n = 0; n < NODES; n++)
		node_start(n, cfg_redis_t(w, 0, 5000));
	synchronous_case("redis sync_rate 0", redis_total, w);
}

Test(cluster, postgres_synchronous_exact)
{
	unsigned w = pick_window();

	pg_up();
	for (size_t n = 0; n < NODES; n++)
		node_start(n, cfg_pg_t(w, 0, 5000));
	synchronous_case("postgres sync_rate 0", pg_total, w);
}

/* Runs one(i, arg) for i = 0, 1, ... for `run_ms`, at about `per_s` per
 * second (0: as fast as the round trips allow); at `at1_ms` then `at2_ms`
 * the callbacks run (store down / back). Returns how many ran. */
typedef void (*store_event_fn)(void);

static size_t load_events(int run_ms, int per_s, int at1_ms, store_event_fn ev1, int at2_ms,
			  store_event_fn ev2, void (*one)(size_t i, void *arg), void *arg)
{
	int64_t t0 = mono_ms();
	bool did1 = false, did2 = false;
	size_t sent = 0;

	for (;;) {
		int64_t el = mono_ms() - t0;

		if (el >= run_ms)
			break;
		if (!did1 && el >= at1_ms) {
			did1 = true;
			ev1();
		}
		if (!did2 && el >= at2_ms) {
			did2 = true;
			ev2();
		}
		one(sent, arg);
		sent++;
		if (per_s > 0) {
			int64_t due = t0 + (int64_t)((double)sent * 1000.0 / per_s);
			int64_t now = mono_ms();

			if (due > now)
				sleep_ms((int)(due - now));
		}
	}
	return sent;
}

struct key_load {
	const char *key;
	unsigned w;
	struct lat *l;
};

/* Hit i of a key_load: round-robin over the nodes and their connections. */
static void key_load_one(size_t i, void *arg)
{
	const struct key_load *kl = arg;

	hit(i % NODES, (i / NODES) % CONNS, kl->key, kl->w, kl->l);
}

/* Hits of one key under load_events(); ACK latencies go to l. */
static size_t load_with_events(const char *key, unsigned w, int run_ms, int per_s, int at1_ms,
			       store_event_fn ev1, int at2_ms, store_event_fn ev2, struct lat *l)
{
	struct key_load kl = { .key = key, .w = w, .l = l };

	return load_events(run_ms, per_s, at1_ms, ev1, at2_ms, ev2, key_load_one, &kl);
}

static int64_t ev_time0;
static int64_t ev_down_at, ev_up_at;

static void ev_redis_kill(void)
{
	ev_down_at = mono_ms();
	cr_assert(redis_server_kill(&redis) == 0, "kill redis-server");
}

static void ev_redis_restart(void)
{
	cr_assert(redis_server_restart(&redis, STORE_MS) == 0, "restart redis-server: %s",
		  redis.err);
	ev_up_at = mono_ms();
}

static void ev_redis_pause(void)
{
	ev_down_at = mono_ms();
	cr_assert(redis_server_pause(&redis) == 0, "SIGSTOP redis-server");
}

static void ev_redis_resume(void)
{
	cr_assert(redis_server_resume(&redis) == 0, "SIGCONT redis-server");
	ev_up_at = mono_ms();
}

#define OUTAGE_RUN_MS   8000
#define OUTAGE_DOWN_MS  2000
#define OUTAGE_UP_MS    5000
#define OUTAGE_RATE     2000    /* hits per second over the cluster */

Test(cluster, redis_killed_and_restarted_under_load)
{
	static struct lat l;
	unsigned w = pick_window();
	int64_t rates[NODES], ms;
	double total;
	char key[64];
	size_t sent;

	redis_up(true);
	for (size_t n = 0; n < NODES; n++)
		node_start(n, cfg_redis(w, SYNC_RATE));
	rand_key(key, sizeof(key), "kill");
	ev_time0 = mono_ms();
	sent = load_with_events(key, w, OUTAGE_RUN_MS, OUTAGE_RATE, OUTAGE_DOWN_MS, ev_redis_kill,
				OUTAGE_UP_MS, ev_redis_restart, &l);
	cr_log_info("redis kill/restart: %zu hits in %d ms; Redis down %lld ms (killed at %lld "
		    "ms, answering again at %lld ms)", sent, OUTAGE_RUN_MS,
		    (long long)(ev_up_at - ev_down_at), (long long)(ev_down_at - ev_time0),
		    (long long)(ev_up_at - ev_time0));
	lat_report("ACKs during the outage run", &l);
	cr_expect(l.over_bound == 0, "%llu ACK(s) later than %d ms (max %.1f ms)",
		  (unsigned long long)l.over_bound, ACK_BOUND_MS, (double)l.max_us / 1000.0);
	/* Reconnect backoff tops out at 2 s, then a sync period or two.
	 * Exactly `sent`: pushes in flight when Redis died were lost with
	 * their connection and pushed again. The only way to count one twice
	 * would be a SIGKILL between Redis writing a push to its AOF and
	 * sending the reply, a window of microseconds. */
	ms = wait_converged(key, w, (int64_t)sent, redis_total, 8000, rates, &total);
	cr_log_info("redis kill/restart: converged %lld ms after the load ended (Redis back "
		    "for %lld ms); store total %g, sent %zu", (long long)ms,
		    (long long)(mono_ms() - ev_up_at), total, sent);
	cr_assert(ms >= 0,
		  "not converged within 8 s: node rates %lld %lld %lld, Redis total %g, sent %zu "
		  "(%+g)", (long long)rates[0], (long long)rates[1], (long long)rates[2], total,
		  sent, total - (double)sent);
}

#define PAUSE_RUN_MS   7000
#define PAUSE_DOWN_MS  1500
#define PAUSE_UP_MS    4500

static void ev_pg_pause(void)
{
	ev_down_at = mono_ms();
	cr_assert(pg_server_pause(&pg) == 0, "SIGSTOP postgres: %s", pg.err);
}

static void ev_pg_resume(void)
{
	cr_assert(pg_server_resume(&pg) == 0, "SIGCONT postgres: %s", pg.err);
	ev_up_at = mono_ms();
}

/* Hits flow while the store is paused (SIGSTOP: connections stay open,
 * nothing answers) for 3 s. Answers must not wait for it; once resumed,
 * every hit is in the store exactly once: the pushes that timed out are
 * applied by the store on SIGCONT, and their resends carry the same token,
 * so they add nothing again (agent/sync.c, strategies/strategy.h). */
static void pause_case(const char *store, store_total_fn total_fn, unsigned w,
		       store_event_fn pause_fn, store_event_fn resume_fn)
{
	static struct lat l;
	int64_t rates[NODES], ms = -1, t0, stable_since;
	double total = -1, last = -2, excess;
	char key[64];
	size_t sent;

	rand_key(key, sizeof(key), "pause");
	ev_time0 = mono_ms();
	sent = load_with_events(key, w, PAUSE_RUN_MS, OUTAGE_RATE, PAUSE_DOWN_MS, pause_fn,
				PAUSE_UP_MS, resume_fn, &l);
	cr_log_info("%s SIGSTOP/SIGCONT: %zu hits in %d ms; store paused %lld ms", store, sent,
		    PAUSE_RUN_MS, (long long)(ev_up_at - ev_down_at));
	lat_report("ACKs during the pause run", &l);
	cr_expect(l.over_bound == 0, "%llu ACK(s) later than %d ms (max %.1f ms)",
		  (unsigned long long)l.over_bound, ACK_BOUND_MS, (double)l.max_us / 1000.0);

	/* Until the store stops moving for two periods and every node reads
	 * what it holds. */
	t0 = stable_since = mono_ms();
	while (mono_ms() - t0 < 8000) {
		bool agree = true;

		total = total_fn(key, w);
		for (size_t n = 0; n < NODES; n++) {
			rates[n] = node_rate(n, key, w);
			agree = agree && (double)rates[n] == total;
		}
		if (total != last) {
			last = total;
			stable_since = mono_ms();
		}
		/* Equal, not only still: a hit pushed twice is taken back by
		 * a later cycle (a call in doubt, agent/sync.c). */
		if (agree && total == (double)sent &&
		    mono_ms() - stable_since >= (int64_t)(2 * SYNC_RATE * 1000)) {
			ms = stable_since - t0;
			break;
		}
		sleep_ms(20);
	}
	excess = total - (double)sent;
	cr_log_info("%s SIGSTOP/SIGCONT: settled %lld ms after the load ended; store total %g, "
		    "sent %zu, counted twice %g", store, (long long)ms, total, sent, excess);
	cr_log_info("%s SIGSTOP/SIGCONT: pushes that timed out, per node: %zu %zu %zu", store,
		    log_count(0, "timeout"), log_count(1, "timeout"), log_count(2, "timeout"));
	cr_assert(excess >= 0, "%s: hits lost: store total %g < sent %zu", store, total, sent);
	cr_assert(excess == 0, "%s: %g hits counted twice after the pause (exactly once "
		  "expected: resends carry the same token)", store, excess);
	cr_assert(ms >= 0, "%s: not settled within 8 s: node rates %lld %lld %lld, store total %g, "
		  "sent %zu", store, (long long)rates[0], (long long)rates[1], (long long)rates[2],
		  total, sent);
}

Test(cluster, redis_paused_answers_do_not_wait)
{
	unsigned w = pick_window();

	redis_up(false);
	for (size_t n = 0; n < NODES; n++)
		node_start(n, cfg_redis(w, SYNC_RATE));
	pause_case("redis", redis_total, w, ev_redis_pause, ev_redis_resume);
}

Test(cluster, postgres_paused_answers_do_not_wait)
{
	unsigned w = pick_window();

	pg_up();
	for (size_t n = 0; n < NODES; n++)
		node_start(n, cfg_pg(w, SYNC_RATE));
	pause_case("postgres", pg_total, w, ev_pg_pause, ev_pg_resume);
}

/* The same with sync_rate 0: a push that timed out is sent again with its
 * token, and what the store counted for it is taken back from the diff
 * the node kept (agent/sync.c, calls in doubt): exactly once too. */
Test(cluster, redis_synchronous_paused_counts_once)
{
	unsigned w = pick_window();

	redis_up(false);
	for (size_t n = 0; n < NODES; n++)
		node_start(n, cfg_redis(w, 0));
	pause_case("redis sync_rate 0", redis_total, w, ev_redis_pause, ev_redis_resume);
}

Test(cluster, postgres_synchronous_paused_counts_once)
{
	unsigned w = pick_window();

	pg_up();
	for (size_t n = 0; n < NODES; n++)
		node_start(n, cfg_pg_t(w, 0, 100));
	pause_case("postgres sync_rate 0", pg_total, w, ev_pg_pause, ev_pg_resume);
}

/* sync_rate 0 on a node whose store is still connecting (its first
 * connection, here held back by pausing the store before the node
 * starts): the hit waits for the connection and is answered with the
 * store's total, not with the node's own count; when the attempt fails
 * instead (timeout_ms), the answer is local and the hit reaches the store
 * once it is back. */
typedef const char *(*cfg_fn)(unsigned w, double rate, int timeout_ms);

static void first_connection_case(const char *store, cfg_fn cfg, store_event_fn pause_fn,
				  store_event_fn resume_fn, store_total_fn total_fn, unsigned w)
{
	int64_t rate, t0, waited;
	uint64_t sid;
	char key[64];
	int early;

	rand_key(key, sizeof(key), "first");
	node_start(0, cfg(w, 0, 5000));
	for (int64_t i = 1; i <= 5; i++) {
		cr_assert(notify(nodes[0].fd[0], key, w, 1, &rate, &(int64_t){ 0 }) == 0,
			  "hit %lld on node 0: %s", (long long)i, errbuf);
		cr_assert_eq(rate, i);
	}

	/* Node 1 starts while the store answers nothing: its workers'
	 * connections wait (timeout_ms 5000). */
	pause_fn();
	node_start(1, cfg(w, 0, 5000));
	t0 = mono_ms();
	cr_assert(notify_send(nodes[1].fd[0], key, w, 1, &sid) == 0, "%s", errbuf);
	struct pollfd pfd = { .fd = nodes[1].fd[0], .events = POLLIN };
	early = poll(&pfd, 1, 500);
	resume_fn();
	cr_assert(notify_ack(nodes[1].fd[0], sid, 5000, &rate) == 0, "node 1: %s", errbuf);
	waited = mono_ms() - t0;
	cr_log_info("%s sync_rate 0, store connecting: the first hit was answered %lld ms after "
		    "it was sent (store paused for 500 ms)", store, (long long)waited);
	cr_expect_eq(early, 0, "%s: the ACK came while the store was still paused", store);
	cr_expect_eq(rate, 6, "%s: node 1's first hit, sent while its store was connecting, "
		     "answered rate %lld (6 = the store's total; 1 = its own count)", store,
		     (long long)rate);
	cr_assert_eq(total_fn(key, w), 6.0);

	/* An attempt that fails (timeout_ms 300 while paused): the answer is
	 * local, and the hit is pushed once the store is back. */
	pause_fn();
	node_start(2, cfg(w, 0, 300));
	t0 = mono_ms();
	cr_assert(notify(nodes[2].fd[0], key, w, 1, &rate, &(int64_t){ 0 }) == 0, "node 2: %s",
		  errbuf);
	waited = mono_ms() - t0;
	cr_log_info("%s sync_rate 0, connection attempt failing: answered after %lld ms, rate %lld",
		    store, (long long)waited, (long long)rate);
	cr_expect_eq(rate, 1, "%s: node 2 answered from its own count", store);
	resume_fn();
	for (t0 = mono_ms(); total_fn(key, w) != 7.0 && mono_ms() - t0 < 10000;)
		sleep_ms(50);
	cr_assert_eq(total_fn(key, w), 7.0, "%s: node 2's hit reached the store once", store);
}

Test(cluster, redis_synchronous_waits_for_the_first_connection)
{
	redis_up(false);
	first_connection_case("redis", cfg_redis_t, ev_redis_pause, ev_redis_resume, redis_total,
			      pick_window());
}

Test(cluster, postgres_synchronous_waits_for_the_first_connection)
{
	pg_up();
	first_connection_case("postgres", cfg_pg_t, ev_pg_pause, ev_pg_resume, pg_total,
			      pick_window());
}

/* Hits on one node, then SIGTERM before its first sync period ends: the
 * master's final flush must bring them to the store. */
static void flush_case(const char *store, const char *cfg, store_total_fn total_fn, unsigned w)
{
	const size_t hits = 500;
	char key[64];
	double total = -1;
	int64_t t0, exit_ms;
	int st;

	node_start(0, cfg);
	rand_key(key, sizeof(key), "flush");
	t0 = mono_ms();
	for (size_t i = 0; i < hits; i++)
		hit(0, i % CONNS, key, w, &lat_all);
	node_close_conns(0);
	cr_assert(agentproc_signal(&nodes[0].a, SIGTERM) == 0, "SIGTERM");
	cr_assert(agentproc_wait(&nodes[0].a, 10000) == 0, "%s: node not gone 10 s after SIGTERM",
		  store);
	exit_ms = mono_ms() - t0;
	st = nodes[0].a.exit_status;
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit status %#x", (unsigned)st);
	total = total_fn(key, w);
	cr_log_info("%s SIGTERM flush: %zu hits, then SIGTERM; exited %lld ms after the first hit; "
		    "store total %g", store, hits, (long long)exit_ms, total);
	{
		char tail[4000];

		agentproc_log_tail(&nodes[0].a, tail, sizeof(tail));
		cr_assert(total == (double)hits, "%s total %g after SIGTERM, want %zu\n--- log ---\n%s",
			  store, total, hits, tail);
		/* The hits took a few ms of a 5 s period: the periodic cycle
		 * (random phase) almost never ran after the last of them, so
		 * the final flush is what pushed them. */
		cr_expect(strstr(tail, "final flush: 1 of 1 counter(s) pushed"),
			  "no final flush in the log:\n%s", tail);
	}
}

Test(cluster, redis_sigterm_flushes)
{
	unsigned w = pick_window();

	redis_up(false);
	flush_case("redis", cfg_redis(w, 5), redis_total, w);
}

Test(cluster, postgres_sigterm_flushes)
{
	unsigned w = pick_window();

	pg_up();
	flush_case("postgres", cfg_pg(w, 5), pg_total, w);
}

/* SIGTERM while the store answers nothing: the final flush gives up after
 * its bound (3 s, agent/master.c) and the agent still exits cleanly; the
 * diffs it could not push are reported in its log. */
Test(cluster, sigterm_flush_bounded_when_store_paused)
{
	unsigned w = pick_window();
	int64_t t_term, exit_ms;
	char key[64], tail[4000];
	int st;

	redis_up(false);
	node_start(0, cfg_redis(w, 5));
	rand_key(key, sizeof(key), "stuck");
	for (size_t i = 0; i < 100; i++)
		hit(0, i % CONNS, key, w, &lat_all);
	cr_assert(redis_server_pause(&redis) == 0, "SIGSTOP redis-server");
	node_close_conns(0);
	t_term = mono_ms();
	cr_assert(agentproc_signal(&nodes[0].a, SIGTERM) == 0, "SIGTERM");
	cr_assert(agentproc_wait(&nodes[0].a, 15000) == 0, "node not gone 15 s after SIGTERM");
	exit_ms = mono_ms() - t_term;
	st = nodes[0].a.exit_status;
	agentproc_log_tail(&nodes[0].a, tail, sizeof(tail));
	cr_log_info("SIGTERM with the store paused: exited after %lld ms", (long long)exit_ms);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit status %#x", (unsigned)st);
	cr_expect(exit_ms <= 3000 + 1500, "exit took %lld ms; the flush is bounded to 3 s\n%s",
		  (long long)exit_ms, tail);
	cr_expect(strstr(tail, "could not be pushed"), "no report of the unpushed diffs:\n%s",
		  tail);
	redis_server_resume(&redis);
}

/* ---------------------------------------------------------------- admission */

/* How many hits a cluster admits on one key past its limit (issue 9):
 * three nodes, sync_rate 0.1 s, a limit of 100 per window, 600 hits in
 * three patterns. Each node decides from the total it last read plus its
 * own hits, so today the cluster admits more than the limit; what it may
 * never do is admit less than the limit (nothing is lost) or more than
 * the limit per node (each node alone stops at it). The counts go to the
 * log; the target of issue 9 (at most limit + 1 %) is not reached yet. */
#define ADMIT_LIMIT   100
#define ADMIT_HITS    600
#define ADMIT_SYNC    0.1
#define ADMIT_BURST   (ADMIT_HITS / NODES)

/* cfg (one namespace) with "admission": how. */
static const char *with_admission(const char *cfg, const char *how)
{
	static char out[2048];
	const char *p = strstr(cfg, "\"sync_rate\":");

	cr_assert_not_null(p);
	snprintf(out, sizeof(out), "%.*s\"admission\":\"%s\",%s", (int)(p - cfg), cfg, how, p);
	return out;
}

static int64_t degraded_seen;      /* ACKs with degraded=true */
static bool admission_arg_exact;   /* NOTIFYs carry admission="exact" */

enum admit_pattern {
	ADMIT_PARALLEL = 0,      /* every node's hits in flight at once */
	ADMIT_ROUND_ROBIN,       /* one at a time, node after node, full speed */
	ADMIT_PACED,             /* one at a time, ~110 hits/s per node */
	ADMIT_PATTERN_COUNT
};

static const char *const admit_names[ADMIT_PATTERN_COUNT] = {
	[ADMIT_PARALLEL] = "parallel", [ADMIT_ROUND_ROBIN] = "round-robin",
	[ADMIT_PACED] = "paced ~110/s per node",
};

/* Sends NOTIFY ratelimit(key, window, limit) as stream *sid. */
static int limit_send(int fd, const char *key, unsigned window, int64_t limit, uint64_t *sid)
{
	size_t start;

	*sid = next_sid++;
	rawspop_buf_reset(&wb);
	start = rawspop_notify_begin(&wb, *sid, 1);
	rawspop_msg(&wb, "ratelimit", admission_arg_exact ? 4 : 3);
	rawspop_arg_str(&wb, "key", key);
	rawspop_arg_int(&wb, "window", window);
	rawspop_arg_int(&wb, "limit", limit);
	if (admission_arg_exact)
		rawspop_arg_str(&wb, "admission", "exact");
	rawspop_frame_end(&wb, start);
	if (rawspop_send_buf(fd, &wb) < 0) {
		snprintf(errbuf, sizeof(errbuf), "send NOTIFY: %s", strerror(errno));
		return -1;
	}
	return 0;
}


/* Reads one ACK on fd, whichever stream it answers (ACKs that waited for
 * the store may come out of order): 1 admitted, 0 denied, -1 bad. */
static int any_limit_ack(int fd)
{
	const struct rawspop_action *v;
	enum rawspop_read_res r = rawspop_read_frame(fd, &fr, IO_MS);

	if (r != RAWSPOP_READ_FRAME || fr.type != RAWSPOP_ACK) {
		snprintf(errbuf, sizeof(errbuf), "no ACK (read result %d, type %u)", (int)r,
			 fr.type);
		return -1;
	}
	if (rawspop_decode_actions(&fr, &acts, errbuf, sizeof(errbuf)) < 0)
		return -1;
	v = rawspop_var_find(&acts, "degraded");
	degraded_seen += v && v->value.type == RAWSPOP_T_BOOL && v->value.b;
	v = rawspop_var_find(&acts, "exceeded");
	if (!v || v->value.type != RAWSPOP_T_BOOL) {
		snprintf(errbuf, sizeof(errbuf), "ACK without a boolean exceeded");
		return -1;
	}
	return v->value.b ? 0 : 1;
}

static int64_t admitted_count(enum admit_pattern p, const char *key, unsigned w)
{
	int64_t admitted = 0;

	if (p == ADMIT_PARALLEL) {
		uint64_t sid;

		/* Every node's share goes out before any answer is read. */
		for (size_t i = 0; i < ADMIT_BURST; i++)
			for (size_t n = 0; n < NODES; n++)
				cr_assert(limit_send(nodes[n].fd[i % CONNS], key, w, ADMIT_LIMIT,
						     &sid) == 0, "%s", errbuf);
		for (size_t i = 0; i < ADMIT_BURST; i++)
			for (size_t n = 0; n < NODES; n++) {
				int a = any_limit_ack(nodes[n].fd[i % CONNS]);
				cr_assert(a >= 0, "node %zu hit %zu: %s", n, i, errbuf);
				admitted += a;
			}
		return admitted;
	}
	int64_t t0 = mono_us();
	for (size_t i = 0; i < ADMIT_HITS; i++) {
		size_t n = i % NODES;
		uint64_t sid;
		int a;

		if (p == ADMIT_PACED) {
			/* ~110 hits/s per node: one every 1/330 s overall. */
			int64_t due = t0 + (int64_t)i * 1000000 / (110 * NODES), now = mono_us();
			if (due > now)
				usleep((useconds_t)(due - now));
		}
		cr_assert(limit_send(nodes[n].fd[(i / NODES) % CONNS], key, w, ADMIT_LIMIT, &sid) == 0,
			  "%s", errbuf);
		a = any_limit_ack(nodes[n].fd[(i / NODES) % CONNS]);
		cr_assert(a >= 0, "node %zu hit %zu: %s", n, i, errbuf);
		admitted += a;
	}
	return admitted;
}

/* The three patterns on fresh keys. exact: the target of issue 9, the
 * limit within 1 % (and no answer degraded: the store is up); else the
 * bounds that hold for local admission. */
static void admission_case(const char *store, unsigned w, bool exact)
{
	for (int p = 0; p < ADMIT_PATTERN_COUNT; p++) {
		char key[64];
		int64_t got;

		rand_key(key, sizeof(key), "admit");
		degraded_seen = 0;
		got = admitted_count((enum admit_pattern)p, key, w);
		cr_log_info("%s, admission %s, sync_rate %g s, limit %d, %d hits over %d nodes, "
			    "%s: %lld admitted (%lld answers degraded)", store,
			    exact ? "exact" : "local", ADMIT_SYNC, ADMIT_LIMIT, ADMIT_HITS, NODES,
			    admit_names[p], (long long)got, (long long)degraded_seen);
		if (exact) {
			cr_expect(got >= ADMIT_LIMIT * 95 / 100 && got <= ADMIT_LIMIT + ADMIT_LIMIT / 100,
				  "%s, %s: %lld admitted, limit %d", store, admit_names[p],
				  (long long)got, ADMIT_LIMIT);
			cr_expect_eq(degraded_seen, 0, "%s, %s: %lld answers degraded", store,
				     admit_names[p], (long long)degraded_seen);
			continue;
		}
		cr_expect(got >= ADMIT_LIMIT, "%s, %s: %lld admitted, fewer than the limit %d",
			  store, admit_names[p], (long long)got, ADMIT_LIMIT);
		cr_expect(got <= (int64_t)NODES * ADMIT_LIMIT,
			  "%s, %s: %lld admitted, more than the limit on every node", store,
			  admit_names[p], (long long)got);
	}
}

Test(cluster, redis_admission_measured)
{
	unsigned w = pick_window();

	redis_up(false);
	for (size_t n = 0; n < NODES; n++)
		node_start(n, with_admission(cfg_redis_t(w, ADMIT_SYNC, 1000), "local"));
	admission_case("redis", w, false);
}

Test(cluster, postgres_admission_measured)
{
	unsigned w = pick_window();

	pg_up();
	for (size_t n = 0; n < NODES; n++)
		node_start(n, with_admission(cfg_pg_t(w, ADMIT_SYNC, 1000), "local"));
	admission_case("postgres", w, false);
}

/* ---------------------------------------------------------------- batching */

/* Script calls Redis has served so far (INFO commandstats). */
static long long redis_script_calls(void)
{
	redisReply *rep = redis_server_command(&redis, "INFO commandstats");
	long long calls = 0;
	const char *p;

	cr_assert(rep && rep->type == REDIS_REPLY_STRING, "INFO commandstats");
	for (const char *name = "cmdstat_evalsha:calls="; name; name = NULL)
		if ((p = strstr(rep->str, name)))
			calls += atoll(p + strlen(name));
	if ((p = strstr(rep->str, "cmdstat_eval:calls=")))
		calls += atoll(p + strlen("cmdstat_eval:calls="));
	freeReplyObject(rep);
	return calls;
}

/* sync_rate 0: hits that arrive together leave together. 50 NOTIFYs of
 * one key written at once on one connection cost a couple of script calls,
 * not 50, and every ACK still carries the exact running total. */
Test(cluster, redis_synchronous_hits_arriving_together_are_one_push)
{
	enum { BURST = 50 };
	unsigned w = pick_window();
	uint64_t sids[BURST];
	long long before, after;
	char key[64];

	redis_up(false);
	node_start(0, cfg_redis_t(w, 0, 5000));
	rand_key(key, sizeof(key), "burst");
	before = redis_script_calls();
	/* One write of every frame: the agent reads them together. */
	rawspop_buf_reset(&wb);
	for (int i = 0; i < BURST; i++) {
		size_t start;

		sids[i] = next_sid++;
		start = rawspop_notify_begin(&wb, sids[i], 1);
		rawspop_msg(&wb, "ratelimit", 2);
		rawspop_arg_str(&wb, "key", key);
		rawspop_arg_int(&wb, "window", w);
		rawspop_frame_end(&wb, start);
	}
	cr_assert(rawspop_send_buf(nodes[0].fd[0], &wb) == 0, "send: %s", strerror(errno));
	for (int i = 0; i < BURST; i++) {
		int64_t rate;

		cr_assert(notify_ack(nodes[0].fd[0], sids[i], IO_MS, &rate) == 0, "ACK %d: %s", i,
			  errbuf);
		cr_assert_eq(rate, i + 1, "hit %d answered rate %lld", i + 1, (long long)rate);
	}
	after = redis_script_calls();
	cr_log_info("%d hits arriving together: %lld script calls", BURST, after - before);
	cr_assert_leq(after - before, 5, "%lld script calls for %d hits arriving together",
		      after - before, BURST);
}

/* ---------------------------------------------------------------- nodes */

/* GET /metrics of node n's HTTP front: the value of one sample, or -1. */
static long long node_metric(size_t n, const char *sample)
{
	static char page[1 << 16];
	size_t len = 0;
	int fd = rawspop_connect(nodes[n].a.http_port, IO_MS);
	const char *req = "GET /metrics HTTP/1.0\r\n\r\n", *p;

	cr_assert(fd >= 0, "connect to node %zu's HTTP front: %s", n, strerror(errno));
	cr_assert(rawspop_send(fd, req, strlen(req)) == 0);
	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t k;

		if (poll(&pfd, 1, IO_MS) != 1 || len + 1 >= sizeof(page))
			break;
		k = recv(fd, page + len, sizeof(page) - 1 - len, 0);
		if (k <= 0)
			break;
		len += (size_t)k;
	}
	close(fd);
	page[len] = '\0';
	p = strstr(page, sample);
	return p ? atoll(p + strlen(sample)) : -1;
}

/* cfg with the HTTP front on (for /metrics). */
static const char *with_http(const char *cfg)
{
	static char out[2048 + 64];

	snprintf(out, sizeof(out), "{\"http_listen\":\"127.0.0.1:@HTTP_PORT@\",%s", cfg + 1);
	return out;
}

/* Each node says it is there once a second (its heartbeat): the store
 * counts three, every node knows it (store_nodes on /metrics), and a node
 * that stops is no longer counted after three seconds. */
static void nodes_case(const char *cfg)
{
	static const char sample[] = "spoa_ratelimit_store_nodes{namespace=\"default\"} ";
	int64_t t0;
	bool all;

	for (size_t n = 0; n < NODES; n++)
		node_start(n, with_http(cfg));
	t0 = mono_ms();
	do {
		sleep_ms(100);
		all = true;
		for (size_t n = 0; n < NODES; n++)
			all = all && node_metric(n, sample) == NODES;
	} while (!all && mono_ms() - t0 < 5000);
	for (size_t n = 0; n < NODES; n++)
		cr_assert_eq(node_metric(n, sample), NODES, "node %zu counts %lld nodes", n,
			     node_metric(n, sample));
	node_stop(2);
	t0 = mono_ms();
	while (node_metric(0, sample) != NODES - 1 && mono_ms() - t0 < 5000)
		sleep_ms(100);
	cr_assert_eq(node_metric(0, sample), NODES - 1, "a stopped node still counted after %lld ms",
		     (long long)(mono_ms() - t0));
}

Test(cluster, redis_nodes_count_each_other)
{
	redis_up(false);
	nodes_case(cfg_redis_t(pick_window(), 0.1, 1000));
}

Test(cluster, postgres_nodes_count_each_other)
{
	pg_up();
	nodes_case(cfg_pg_t(pick_window(), 0.1, 1000));
}

/* ---------------------------------------------------------------- exact admission */

static const char *with_exact(const char *cfg)
{
	return with_admission(cfg, "exact");
}

Test(cluster, redis_admission_exact)
{
	unsigned w = pick_window();

	redis_up(false);
	for (size_t n = 0; n < NODES; n++)
		node_start(n, with_exact(cfg_redis_t(w, ADMIT_SYNC, 1000)));
	admission_case("redis", w, true);
}

Test(cluster, postgres_admission_exact)
{
	unsigned w = pick_window();

	pg_up();
	for (size_t n = 0; n < NODES; n++)
		node_start(n, with_exact(cfg_pg_t(w, ADMIT_SYNC, 1000)));
	admission_case("postgres", w, true);
}

/* Commands the agents sent to Redis (INFO commandstats): script calls and
 * the few direct commands. What a script runs inside is the server's work
 * for that one command, not a round trip; *server gets the server's own
 * count (total_commands_processed), scripts' insides included; *usec (if
 * not NULL) the microseconds Redis spent in the agents' commands, what
 * runs inside the scripts included. */
static long long redis_agent_cost(long long *server, long long *usec)
{
	/* Not hget or hgetall: the agents' sync and admissions never send
	 * them (only the library's fetch does), the scripts run them. hmget:
	 * the reads of sync cycles, and one inside each push script call that
	 * writes (INFO cannot tell them apart): counted, an upper bound. */
	static const char *const sent[] = { "evalsha", "eval", "hmget", "script|load", "auth",
					    "select", "ping" };
	redisReply *rep = redis_server_command(&redis, "INFO commandstats");
	long long n = 0, us = 0;
	const char *p;

	cr_assert(rep && rep->type == REDIS_REPLY_STRING, "INFO commandstats");
	for (size_t i = 0; i < sizeof(sent) / sizeof(sent[0]); i++) {
		char name[64];

		snprintf(name, sizeof(name), "cmdstat_%s:calls=", sent[i]);
		if ((p = strstr(rep->str, name))) {
			n += atoll(p + strlen(name));
			if ((p = strstr(p, ",usec=")))
				us += atoll(p + strlen(",usec="));
		}
	}
	freeReplyObject(rep);
	if (usec)
		*usec = us;
	rep = redis_server_command(&redis, "INFO stats");
	cr_assert(rep && rep->type == REDIS_REPLY_STRING, "INFO stats");
	p = strstr(rep->str, "total_commands_processed:");
	*server = p ? atoll(p + strlen("total_commands_processed:")) : 0;
	freeReplyObject(rep);
	return n;
}

static long long redis_agent_commands(long long *server)
{
	return redis_agent_cost(server, NULL);
}

/* What the agents cost a store so far: commands (Redis) or statements
 * (PostgreSQL) they sent; *inner what the store ran inside them (Redis
 * scripts), or 0. */
typedef long long (*store_cost_fn)(long long *inner);

static long long redis_far_cost(long long *inner)
{
	long long srv, n = redis_agent_commands(&srv);

	*inner = srv - n;
	return n;
}

/* Statements the agents ran on PostgreSQL (pg_stat_statements: each
 * execution of a prepared statement is a call), the test's own queries of
 * the statistics left out. */
static long long pg_far_cost(long long *inner)
{
	char out[64];

	*inner = 0;
	cr_assert_geq(pg_server_query(pg.conninfo, "SELECT coalesce(sum(calls), 0) FROM "
				      "pg_stat_statements WHERE query NOT LIKE "
				      "'%pg_stat_statements%'", out, sizeof(out)), 0, "%s", out);
	return atoll(out);
}

/* 3,000 hits on a fresh key with a limit of LIMIT, `depth` at a time on
 * each node (waiting for their answers), round-robin over the nodes.
 * Returns the hits admitted; *cmds what the agents cost the store. */
static int64_t far_hits(const char *store, store_cost_fn cost, unsigned w, size_t depth,
			long long *cmds)
{
	enum { HITS = 3000, LIMIT = 1000000 };
	long long before, after, in_before, in_after;
	int64_t admitted = 0, t0 = mono_us();
	char key[64];

	rand_key(key, sizeof(key), "far");
	before = cost(&in_before);
	for (size_t i = 0; i < HITS / NODES; i += depth) {
		uint64_t sid;

		for (size_t n = 0; n < NODES; n++)
			for (size_t k = 0; k < depth && i + k < HITS / NODES; k++)
				cr_assert(limit_send(nodes[n].fd[0], key, w, LIMIT, &sid) == 0, "%s",
					  errbuf);
		for (size_t n = 0; n < NODES; n++)
			for (size_t k = 0; k < depth && i + k < HITS / NODES; k++) {
				int a = any_limit_ack(nodes[n].fd[0]);
				cr_assert(a >= 0, "node %zu: %s", n, errbuf);
				admitted += a;
			}
	}
	after = cost(&in_after);
	*cmds = after - before;
	cr_log_info("%s: %d hits far from a limit of %d over %d nodes, %zu at a time per node, "
		    "in %.2f s: %lld %s from the agents (%lld more run inside them)", store, HITS,
		    LIMIT, NODES, depth, (double)(mono_us() - t0) / 1e6, *cmds,
		    cost == pg_far_cost ? "statements" : "commands", in_after - in_before);
	return admitted;
}

/* Far from its limit a key costs no store round trip per hit (issue 9):
 * 3,000 hits on a key with a limit of 1,000,000 over three nodes (admission
 * "auto", exact here) cost at most 300 Redis commands, sync cycles and
 * heartbeats included, and every hit is admitted: one hit at a time per
 * node, and eight.
 *
 * What they cost is per sync cycle, not per hit: a grant is twice the
 * node's demand in the last cycle, and the hits sent together when one
 * runs out go to the store (`depth` admissions per node, three statements
 * each with PostgreSQL). So the cycle is FAR_SYNC (1 s), not 0.1 s: on a
 * busy machine where the 3,000 hits took 1.09 s (ten cycles of small
 * grants) PostgreSQL counted 554 statements. */
#define FAR_SYNC 1.0

Test(cluster, redis_far_from_the_limit_costs_no_round_trip_per_hit)
{
	static const size_t depths[] = { 1, 8 };
	unsigned w = pick_window();

	redis_up(false);
	for (size_t n = 0; n < NODES; n++)
		node_start(n, cfg_redis_t(w, FAR_SYNC, 1000));
	for (size_t i = 0; i < sizeof(depths) / sizeof(depths[0]); i++) {
		long long cmds;

		cr_assert_eq(far_hits("redis", redis_far_cost, w, depths[i], &cmds), 3000);
		cr_expect_leq(cmds, 300, "%lld commands for 3000 hits far from the limit, %zu at a "
			      "time", cmds, depths[i]);
	}
}

/* The same with PostgreSQL (issue 18): at most 300 statements (an
 * admission is two or three: its token, its row, the decision; a sync
 * cycle's push chunk two, a read one, a heartbeat one), counted by
 * pg_stat_statements in the test's own server. */
Test(cluster, postgres_far_from_the_limit_costs_no_round_trip_per_hit)
{
	static const size_t depths[] = { 1, 8 };
	unsigned w = pick_window();
	char out[1024];

	if (!pg_server_available())
		cr_skip_test("PostgreSQL is not installed (%s)", pg_server_bindir());
	cr_assert(pg_server_create(&pg, NULL) == 0, "initdb: %s", pg.err);
	pg_created = true;
	pg.extra[0] = "-c";
	pg.extra[1] = "shared_preload_libraries=pg_stat_statements";
	cr_assert(pg_server_start(&pg, STORE_MS) == 0, "postgres: %s", pg.err);
	cr_assert_geq(pg_server_query(pg.conninfo, "CREATE EXTENSION pg_stat_statements", out,
				      sizeof(out)), 0, "%s", out);
	for (size_t n = 0; n < NODES; n++)
		node_start(n, cfg_pg_t(w, FAR_SYNC, 1000));
	for (size_t i = 0; i < sizeof(depths) / sizeof(depths[0]); i++) {
		long long stmts;

		cr_assert_eq(far_hits("postgres", pg_far_cost, w, depths[i], &stmts), 3000);
		cr_assert_geq(pg_server_query(pg.conninfo, "SELECT string_agg(calls || ' x ' || "
					      "left(regexp_replace(query, '\\s+', ' ', 'g'), 48), "
					      "' | ' ORDER BY calls DESC) FROM pg_stat_statements "
					      "WHERE query NOT LIKE '%pg_stat_statements%'", out,
					      sizeof(out)), 0, "%s", out);
		cr_log_info("statements so far: %s", out);
		cr_expect_leq(stmts, 300, "%lld statements for 3000 hits far from the limit, %zu "
			      "at a time", stmts, depths[i]);
		cr_expect_gt(stmts, 0, "nothing counted: is pg_stat_statements on?");
	}
}

/* What an idle node costs the store (issue 18): with one key known,
 * sync_rate 0.1 s, one namespace, each node sends one read of its key per
 * cycle (10 a second) and one heartbeat a second (an EVALSHA, not an EVAL
 * of the script's text): at most 12 commands a second per node, counted
 * by Redis over 5 s. The Redis CPU it costs (commandstats usec) is
 * logged, not asserted: it depends on the machine. */
#define IDLE_SECONDS 5

Test(cluster, redis_idle_node_costs_at_most_12_commands_a_second)
{
	unsigned w = pick_window();
	long long c0, c1, u0, u1, srv;
	int64_t t0, t1;
	char key[64];
	uint64_t sid;

	redis_up(false);
	for (size_t n = 0; n < NODES; n++)
		node_start(n, cfg_redis_t(w, ADMIT_SYNC, 1000));
	rand_key(key, sizeof(key), "idle");
	for (size_t n = 0; n < NODES; n++) {
		cr_assert(limit_send(nodes[n].fd[0], key, w, 1000000, &sid) == 0, "%s", errbuf);
		cr_assert(any_limit_ack(nodes[n].fd[0]) == 1, "node %zu: %s", n, errbuf);
	}
	/* The key's first admission, seeds and first heartbeats done. */
	sleep_ms(1500);
	c0 = redis_agent_cost(&srv, &u0);
	t0 = mono_us();
	sleep_ms(IDLE_SECONDS * 1000);
	c1 = redis_agent_cost(&srv, &u1);
	t1 = mono_us();
	double secs = (double)(t1 - t0) / 1e6;
	double per = (double)(c1 - c0) / NODES / secs;
	cr_log_info("idle, one key, sync_rate %g s: %lld commands from %d nodes in %.2f s: %.1f "
		    "per node and second, Redis CPU %.3f ms per node and second (%.1f us per "
		    "command)", ADMIT_SYNC, c1 - c0, NODES, secs, per,
		    (double)(u1 - u0) / 1000.0 / NODES / secs,
		    c1 > c0 ? (double)(u1 - u0) / (double)(c1 - c0) : 0.0);
	cr_assert_leq(per, 12.0, "%.1f commands per idle node and second", per);
	cr_assert_geq(per, 1.0, "%.1f commands per node and second: are the nodes syncing?", per);
}

/* Reads one ACK on fd, whichever stream it answers: its rate in *rate.
 * Returns 0, or -1 with errbuf set. */
static int any_rate_ack(int fd, int64_t *rate)
{
	const struct rawspop_action *v;
	enum rawspop_read_res r = rawspop_read_frame(fd, &fr, IO_MS);

	if (r != RAWSPOP_READ_FRAME || fr.type != RAWSPOP_ACK) {
		snprintf(errbuf, sizeof(errbuf), "no ACK (read result %d, type %u)", (int)r,
			 fr.type);
		return -1;
	}
	if (rawspop_decode_actions(&fr, &acts, errbuf, sizeof(errbuf)) < 0)
		return -1;
	v = rawspop_var_find(&acts, "rate");
	if (!v || !rawspop_is_int(v->value.type)) {
		snprintf(errbuf, sizeof(errbuf), "ACK without an integer rate");
		return -1;
	}
	*rate = v->value.i;
	return 0;
}

/* Answers report hits, not headroom (issue 18): a key with a limit of
 * 1e9 on two nodes (admission auto: exact, grants of 1e9 / 64 / nodes at
 * first). Bursts written at once on each node (one admission asks a
 * grant, the others of the burst go to the store meanwhile), then hits one
 * at a time on either node: no answer says more than the hits made so far
 * (on the old code the store counted the grants as hits and answers said
 * 15,625,000 and more). A few sync cycles later, every node's answer is
 * the cluster's hits, within 2. */
#define HUGE_LIMIT  1000000000LL
#define HUGE_BURST  20
#define HUGE_SINGLE 100

static void huge_limit_case(const char *store)
{
	unsigned w = pick_window();
	int64_t sent = 0, rate, worst = 0;
	char key[64];
	uint64_t sid;

	rand_key(key, sizeof(key), "huge");
	for (size_t n = 0; n < 2; n++) {
		for (int i = 0; i < HUGE_BURST; i++)
			cr_assert(limit_send(nodes[n].fd[0], key, w, HUGE_LIMIT, &sid) == 0, "%s",
				  errbuf);
		sent += HUGE_BURST;
		for (int i = 0; i < HUGE_BURST; i++) {
			cr_assert(any_rate_ack(nodes[n].fd[0], &rate) == 0, "node %zu: %s", n,
				  errbuf);
			cr_assert_leq(rate, sent, "%s: node %zu's burst answered rate %lld after %lld "
				      "hits", store, n, (long long)rate, (long long)sent);
			worst = rate > worst ? rate : worst;
		}
	}
	for (int i = 0; i < HUGE_SINGLE; i++) {
		size_t n = (size_t)i % 2;

		cr_assert(limit_send(nodes[n].fd[1], key, w, HUGE_LIMIT, &sid) == 0, "%s", errbuf);
		sent++;
		cr_assert(any_rate_ack(nodes[n].fd[1], &rate) == 0, "node %zu: %s", n, errbuf);
		cr_assert_leq(rate, sent, "%s: node %zu answered rate %lld after %lld hits", store,
			      n, (long long)rate, (long long)sent);
		worst = rate > worst ? rate : worst;
	}
	cr_log_info("%s, limit %lld, two nodes: %lld hits, the highest rate answered %lld",
		    store, HUGE_LIMIT, (long long)sent, (long long)worst);
	/* Every grant hit reported spent by its node's sync cycles (once a
	 * second: agent/sync.c, SYNC_SPENT_PERIOD). */
	sleep_ms(1500);
	for (size_t n = 0; n < 2; n++) {
		cr_assert(limit_send(nodes[n].fd[2], key, w, HUGE_LIMIT, &sid) == 0, "%s", errbuf);
		sent++;
		cr_assert(any_rate_ack(nodes[n].fd[2], &rate) == 0, "node %zu: %s", n, errbuf);
		cr_log_info("%s: then node %zu answered %lld after %lld hits", store, n,
			    (long long)rate, (long long)sent);
		cr_assert(rate <= sent && rate >= sent - 2, "%s: node %zu answered %lld after %lld "
			  "hits", store, n, (long long)rate, (long long)sent);
	}
}

Test(cluster, redis_answers_report_hits_not_grants)
{
	unsigned w = pick_window();

	redis_up(false);
	for (size_t n = 0; n < 2; n++)
		node_start(n, cfg_redis_t(w, ADMIT_SYNC, 1000));
	huge_limit_case("redis");
}

Test(cluster, postgres_answers_report_hits_not_grants)
{
	unsigned w = pick_window();

	pg_up();
	for (size_t n = 0; n < 2; n++)
		node_start(n, cfg_pg_t(w, ADMIT_SYNC, 1000));
	huge_limit_case("postgres");
}

/* Exact admissions while the store is paused (SIGSTOP: connections stay
 * open, the calls are received and applied on SIGCONT): the admissions
 * the store did not answer within timeout_ms are decided by the nodes
 * (degraded) and counted there; the store applies them late. Each is
 * sent again with its token, and what the store counted for it is taken
 * back from the node's diff: every hit is in the store exactly once.
 * Keys are few and their limit far (every hit admitted), so most hits
 * come from grants and the rest go to the store, as at the limit. */
#define PAUSE_ADM_KEYS 12
#define PAUSE_ADM_LIMIT 5000   /* per key: far (about 1,200 hits each), small grants */

struct adm_load {
	char keys[PAUSE_ADM_KEYS][64];
	size_t sent[PAUSE_ADM_KEYS];
	unsigned w;
	int64_t admitted;
};

/* Admission i of an adm_load: keys, nodes and connections in turn. */
static void adm_load_one(size_t i, void *arg)
{
	struct adm_load *al = arg;
	size_t n = i % NODES, c = (i / NODES) % CONNS, k = i % PAUSE_ADM_KEYS;
	uint64_t sid;
	int a;

	cr_assert(limit_send(nodes[n].fd[c], al->keys[k], al->w, PAUSE_ADM_LIMIT, &sid) == 0,
		  "%s", errbuf);
	a = any_limit_ack(nodes[n].fd[c]);
	cr_assert(a >= 0, "node %zu: %s", n, errbuf);
	al->admitted += a;
	al->sent[k]++;
}

static void admission_pause_case(const char *store, store_total_fn total_fn,
				 store_event_fn pause_fn, store_event_fn resume_fn, unsigned w)
{
	static struct adm_load al;
	size_t all;
	int64_t admitted;
	double total = 0, last = -1;
	bool equal = false;

	memset(&al, 0, sizeof(al));
	al.w = w;
	for (size_t k = 0; k < PAUSE_ADM_KEYS; k++)
		rand_key(al.keys[k], sizeof(al.keys[k]), "admpause");
	degraded_seen = 0;
	all = load_events(PAUSE_RUN_MS, OUTAGE_RATE, PAUSE_DOWN_MS, pause_fn, PAUSE_UP_MS,
			  resume_fn, adm_load_one, &al);
	admitted = al.admitted;
	cr_log_info("%s, admission exact, paused %lld ms: %zu hits, %lld admitted, %lld decided "
		    "by the nodes alone (degraded)", store, (long long)(ev_up_at - ev_down_at), all,
		    (long long)admitted, (long long)degraded_seen);
	cr_assert_eq(admitted, (int64_t)all, "a limit of %d: every hit admitted", PAUSE_ADM_LIMIT);
	cr_assert_gt(degraded_seen, 0, "no admission waited for the paused store: the test "
		     "shows nothing");
	/* Until the store holds what was sent: grants given back, corrections
	 * pushed (a few sync cycles). */
	for (int64_t s0 = mono_ms(); mono_ms() - s0 < 10000;) {
		total = 0;
		for (size_t k = 0; k < PAUSE_ADM_KEYS; k++)
			total += total_fn(al.keys[k], w);
		if (total == (double)all && last == total) {
			equal = true;
			break;
		}
		last = total;
		sleep_ms(300);
	}
	cr_log_info("%s, admission exact: store total %g for %zu hits (%+g)", store, total, all,
		    total - (double)all);
	cr_assert(equal, "%s: the store holds %g for %zu hits (%+g): each hit exactly once "
		  "expected", store, total, all, total - (double)all);
	for (size_t k = 0; k < PAUSE_ADM_KEYS; k++)
		cr_assert_eq(total_fn(al.keys[k], w), (double)al.sent[k], "%s: %s", store,
			     al.keys[k]);
}

Test(cluster, redis_admission_paused_counts_once)
{
	unsigned w = pick_window();

	redis_up(false);
	for (size_t n = 0; n < NODES; n++)
		node_start(n, with_exact(cfg_redis_t(w, ADMIT_SYNC, 100)));
	admission_pause_case("redis", redis_total, ev_redis_pause, ev_redis_resume, w);
}

Test(cluster, postgres_admission_paused_counts_once)
{
	unsigned w = pick_window();

	pg_up();
	for (size_t n = 0; n < NODES; n++)
		node_start(n, with_exact(cfg_pg_t(w, ADMIT_SYNC, 300)));
	admission_pause_case("postgres", pg_total, ev_pg_pause, ev_pg_resume, w);
}

/* The store down: an exact admission is decided from the node's view
 * (fail-open, degraded=true on the ACK), the hits counted there and the
 * limit still applies to what the node sees. */
Test(cluster, redis_admission_exact_store_down_decides_locally)
{
	unsigned w = pick_window();
	char key[64];
	int64_t admitted = 0;

	redis_up(false);
	node_start(0, with_exact(cfg_redis_t(w, ADMIT_SYNC, 100)));
	redis_down();
	rand_key(key, sizeof(key), "down");
	degraded_seen = 0;
	for (int i = 0; i < 10; i++) {
		uint64_t sid;
		int a;

		cr_assert(limit_send(nodes[0].fd[0], key, w, 5, &sid) == 0, "%s", errbuf);
		a = any_limit_ack(nodes[0].fd[0]);
		cr_assert(a >= 0, "hit %d: %s", i, errbuf);
		admitted += a;
	}
	cr_assert_eq(admitted, 5, "the node's share (alone: the whole limit) still limits");
	/* Every answer was decided on the node's share without asking the
	 * store, and says so. */
	cr_assert_eq(degraded_seen, 10, "%lld answers degraded", (long long)degraded_seen);
	/* The log says what happened, in which namespace. */
	{
		static char tail[8192];

		sleep_ms(200);
		agentproc_log_tail(&nodes[0].a, tail, sizeof(tail));
		cr_assert(strstr(tail, "namespace default: redis store: ") ||
			  strstr(tail, "namespace \"default\": the store did not decide an admission ("),
			  "the log names the namespace and what happened: %s", tail);
	}
}

/* ---------------------------------------------------------------- store away */

/* Issue 18: while the store is away, each node admits for a key at most
 * its share of what the cluster had left when it last heard from the
 * store: (limit - known) / nodes. Three nodes, limit 100, the store
 * killed: 600 hits on a new key admit 85..101 (each node ~33), round-robin
 * and in parallel; a key with 50 hits before the kill ends within 85..101
 * in all. Before, each node admitted the whole limit: 300, and 190-200. */
static void wait_nodes(size_t want)
{
	static const char sample[] = "spoa_ratelimit_store_nodes{namespace=\"default\"} ";
	int64_t t0 = mono_ms();
	bool all;

	do {
		sleep_ms(100);
		all = true;
		for (size_t n = 0; n < NODES; n++)
			all = all && node_metric(n, sample) == (long long)want;
	} while (!all && mono_ms() - t0 < 10000);
	for (size_t n = 0; n < NODES; n++)
		cr_assert_eq(node_metric(n, sample), (long long)want, "node %zu counts %lld nodes", n,
			     node_metric(n, sample));
}

/* Until every node's metrics say the store is away (store_up 0). */
static void wait_store_down(void)
{
	static const char sample[] = "spoa_ratelimit_store_up{namespace=\"default\"} ";
	int64_t t0 = mono_ms();
	bool all;

	do {
		sleep_ms(100);
		all = true;
		for (size_t n = 0; n < NODES; n++)
			all = all && node_metric(n, sample) == 0;
	} while (!all && mono_ms() - t0 < 5000);
	cr_assert(all, "the nodes did not see their store go within 5 s");
}

static int64_t admit_pattern(enum admit_pattern p, const char *key, unsigned w, size_t hits)
{
	int64_t admitted = 0;
	uint64_t sid;

	if (p == ADMIT_PARALLEL) {
		for (size_t i = 0; i < hits / NODES; i++)
			for (size_t n = 0; n < NODES; n++)
				cr_assert(limit_send(nodes[n].fd[i % CONNS], key, w, ADMIT_LIMIT,
						     &sid) == 0, "%s", errbuf);
		for (size_t i = 0; i < hits / NODES; i++)
			for (size_t n = 0; n < NODES; n++) {
				int a = any_limit_ack(nodes[n].fd[i % CONNS]);
				cr_assert(a >= 0, "node %zu hit %zu: %s", n, i, errbuf);
				admitted += a;
			}
		return admitted;
	}
	for (size_t i = 0; i < hits; i++) {
		size_t n = i % NODES, c = (i / NODES) % CONNS;
		int a;

		cr_assert(limit_send(nodes[n].fd[c], key, w, ADMIT_LIMIT, &sid) == 0, "%s", errbuf);
		a = any_limit_ack(nodes[n].fd[c]);
		cr_assert(a >= 0, "node %zu hit %zu: %s", n, i, errbuf);
		admitted += a;
	}
	return admitted;
}

static void store_away_case(const char *store, store_event_fn kill_fn, unsigned w)
{
	char warm[64], key[64];
	int64_t before, after;

	wait_nodes(NODES);
	rand_key(warm, sizeof(warm), "warm");
	before = admit_pattern(ADMIT_ROUND_ROBIN, warm, w, 50);
	cr_assert_eq(before, 50);
	/* Every node reads the key's total once (a sync cycle or two). */
	sleep_ms(400);
	kill_fn();
	/* The nodes notice (their connections drop): what this test measures
	 * is the shares; hits already in flight to the store when it went
	 * are the bound's own term (docs/CLUSTER.md). */
	wait_store_down();
	for (int p = ADMIT_PARALLEL; p <= ADMIT_ROUND_ROBIN; p++) {
		int64_t got;

		rand_key(key, sizeof(key), "away");
		degraded_seen = 0;
		got = admit_pattern((enum admit_pattern)p, key, w, ADMIT_HITS);
		cr_log_info("%s killed, %d nodes, limit %d, a new key, %d hits, %s: %lld admitted "
			    "(%lld answers degraded)", store, NODES, ADMIT_LIMIT, ADMIT_HITS,
			    admit_names[p], (long long)got, (long long)degraded_seen);
		cr_expect(got >= 85 && got <= ADMIT_LIMIT + 1, "%s, %s: %lld admitted, limit %d",
			  store, admit_names[p], (long long)got, ADMIT_LIMIT);
		/* Decided on the shares, and saying so (a first few may still have
		 * been the store's, before the node noticed it going). */
		cr_expect_gt(degraded_seen, ADMIT_HITS / 2, "%s: %lld answers said degraded", store,
			     (long long)degraded_seen);
	}
	after = admit_pattern(ADMIT_ROUND_ROBIN, warm, w, ADMIT_HITS);
	cr_log_info("%s killed, a key with %lld hits before: %lld more admitted, %lld in all",
		    store, (long long)before, (long long)after, (long long)(before + after));
	cr_expect(before + after >= 85 && before + after <= ADMIT_LIMIT + 1,
		  "%s: %lld admitted in all, limit %d", store, (long long)(before + after),
		  ADMIT_LIMIT);
}

/* Far from the limit the nodes hold grants of the store: while it is
 * away, a node spends its grant or its share, not both. Limit 1,000, 300
 * hits before the kill (grants given out), 3,000 after: 1,000 in all at
 * most (+1 %). */
static int64_t limit_hits(const char *key, unsigned w, int64_t limit, size_t hits)
{
	int64_t admitted = 0;

	for (size_t i = 0; i < hits; i++) {
		size_t n = i % NODES, c = (i / NODES) % CONNS;
		uint64_t sid;
		int a;

		cr_assert(limit_send(nodes[n].fd[c], key, w, limit, &sid) == 0, "%s", errbuf);
		a = any_limit_ack(nodes[n].fd[c]);
		cr_assert(a >= 0, "node %zu hit %zu: %s", n, i, errbuf);
		admitted += a;
	}
	return admitted;
}

Test(cluster, redis_killed_nodes_spend_a_grant_or_a_share)
{
	unsigned w = pick_window();
	char key[64];

	redis_up(false);
	for (size_t n = 0; n < NODES; n++)
		node_start(n, with_http(cfg_redis_t(w, ADMIT_SYNC, 50)));
	wait_nodes(NODES);
	rand_key(key, sizeof(key), "granted");
	int64_t before = limit_hits(key, w, 1000, 300);
	cr_assert_eq(before, 300);
	sleep_ms(400);
	ev_redis_kill();
	wait_store_down();
	degraded_seen = 0;
	int64_t after = limit_hits(key, w, 1000, 3000);
	cr_log_info("redis killed, limit 1000, 300 hits before (grants out), 3000 after: %lld "
		    "more admitted, %lld in all (%lld degraded)", (long long)after,
		    (long long)(before + after), (long long)degraded_seen);
	cr_expect(before + after >= 850 && before + after <= 1010, "%lld admitted in all",
		  (long long)(before + after));
}

/* Several limits, one decision, decided by the store (issue 22): every
 * request carries a per-IP message (namespace "ip") and a per-key one
 * ("default"), both under exact admission with count_denied false, over
 * three nodes. Each limit holds within N + 1 %, and a request one limit
 * denies spends nothing of the other: the store's per-IP count is the
 * requests admitted, not the requests made. */
static int two_limits_send(int fd, const char *ip, const char *key, unsigned w, int64_t ip_lim,
			   int64_t key_lim, uint64_t *sid)
{
	size_t start;

	*sid = next_sid++;
	rawspop_buf_reset(&wb);
	start = rawspop_notify_begin(&wb, *sid, 1);
	rawspop_msg(&wb, "ratelimit-ip", 4);
	rawspop_arg_str(&wb, "key", ip);
	rawspop_arg_int(&wb, "window", w);
	rawspop_arg_int(&wb, "limit", ip_lim);
	rawspop_arg_str(&wb, "namespace", "ip");
	rawspop_msg(&wb, "ratelimit-key", 3);
	rawspop_arg_str(&wb, "key", key);
	rawspop_arg_int(&wb, "window", w);
	rawspop_arg_int(&wb, "limit", key_lim);
	rawspop_frame_end(&wb, start);
	return rawspop_send_buf(fd, &wb);
}

static void two_limits_case(unsigned w, int64_t ip_lim, int64_t key_lim, size_t hits)
{
	char ip[64], key[64];
	int64_t admitted = 0;
	double ip_total = -1, key_total = -1;

	rand_key(ip, sizeof(ip), "ip");
	rand_key(key, sizeof(key), "key");
	for (size_t i = 0; i < hits; i++) {
		size_t n = i % NODES, c = (i / NODES) % CONNS;
		uint64_t sid;

		cr_assert(two_limits_send(nodes[n].fd[c], ip, key, w, ip_lim, key_lim, &sid) == 0);
		int a = any_limit_ack(nodes[n].fd[c]);
		cr_assert(a >= 0, "node %zu hit %zu: %s", n, i, errbuf);
		admitted += a;
	}
	int64_t lim = ip_lim < key_lim ? ip_lim : key_lim;
	/* What the store holds once the take-backs are pushed (a sync or two)
	 * and the grant hits reported (once a second). */
	for (int64_t t0 = mono_ms(); mono_ms() - t0 < 6000; sleep_ms(300)) {
		ip_total = redis_total_ns("ip", ip, w);
		key_total = redis_total(key, w);
		if (fabs(ip_total - (double)admitted) <= 1 && fabs(key_total - (double)admitted) <= 1)
			break;
	}
	cr_log_info("two limits (ip %lld, key %lld), %zu requests over %d nodes, exact, "
		    "count_denied false: %lld admitted; the store holds %g per IP, %g per key",
		    (long long)ip_lim, (long long)key_lim, hits, NODES, (long long)admitted, ip_total,
		    key_total);
	cr_expect(admitted >= lim * 95 / 100 && admitted <= lim + lim / 100 + NODES,
		  "%lld admitted, limits %lld and %lld", (long long)admitted, (long long)ip_lim,
		  (long long)key_lim);
	cr_expect(ip_total >= (double)admitted - 1 && ip_total <= (double)admitted + 1,
		  "per IP %g in the store for %lld admitted", ip_total, (long long)admitted);
	cr_expect(key_total >= (double)admitted - 1 && key_total <= (double)admitted + 1,
		  "per key %g in the store for %lld admitted", key_total, (long long)admitted);
}

Test(cluster, redis_two_limits_one_decision)
{
	unsigned w = pick_window();
	char cfg[2048];

	redis_up(false);
	snprintf(cfg, sizeof(cfg),
		 "{\"log_level\":\"info\",\"namespaces\":["
		 "{\"name\":\"default\",\"window_sizes\":[%u],\"sync_rate\":0.1,"
		 "\"strategy\":\"redis\",\"admission\":\"exact\",\"count_denied\":false,"
		 "\"strategy_opts\":{\"port\":%d,\"timeout_ms\":1000}},"
		 "{\"name\":\"ip\",\"window_sizes\":[%u],\"sync_rate\":0.1,"
		 "\"strategy\":\"redis\",\"admission\":\"exact\",\"count_denied\":false,"
		 "\"strategy_opts\":{\"port\":%d,\"timeout_ms\":1000}}]}",
		 w, redis.port, w, redis.port);
	for (size_t n = 0; n < NODES; n++)
		node_start(n, cfg);
	two_limits_case(w, 100, 50, 300);    /* the per-key limit decides */
	two_limits_case(w, 40, 100, 300);    /* the per-IP one */
}

/* The metrics an alert needs move when the store goes (issue 23): paused
 * (pushes sent and not confirmed: sync_cycles_total{result="failed"}),
 * then killed (cycles due while it is away: result="skipped"), with
 * admissions decided on the node's share (admissions_total{by="degraded"}),
 * hits waiting for it (store_pending_hits) and store_up 0. */
static void hits_for(unsigned w, const char *key, int ms)
{
	int64_t t0 = mono_ms();

	while (mono_ms() - t0 < ms) {
		uint64_t sid;

		cr_assert(limit_send(nodes[0].fd[0], key, w, 1000000, &sid) == 0, "%s", errbuf);
		cr_assert(any_limit_ack(nodes[0].fd[0]) >= 0, "%s", errbuf);
		sleep_ms(5);
	}
}

Test(cluster, redis_outage_moves_the_alert_metrics)
{
	static const char failed[] = "spoa_ratelimit_sync_cycles_total{namespace=\"default\","
				     "result=\"failed\"} ";
	static const char skipped[] = "spoa_ratelimit_sync_cycles_total{namespace=\"default\","
				      "result=\"skipped\"} ";
	static const char degraded[] = "spoa_ratelimit_admissions_total{namespace=\"default\","
				       "by=\"degraded\"} ";
	static const char pending[] = "spoa_ratelimit_store_pending_hits{namespace=\"default\"} ";
	static const char up[] = "spoa_ratelimit_store_up{namespace=\"default\"} ";
	unsigned w = pick_window();
	char key[64];

	redis_up(false);
	node_start(0, with_http(cfg_redis_t(w, ADMIT_SYNC, 100)));
	rand_key(key, sizeof(key), "alert");
	hits_for(w, key, 300);
	cr_assert_eq(node_metric(0, failed), 0);
	cr_assert_eq(node_metric(0, skipped), 0);
	cr_assert_eq(node_metric(0, degraded), 0);
	ev_redis_pause();
	hits_for(w, key, 1000);
	long long f = node_metric(0, failed);
	ev_redis_resume();
	sleep_ms(500);
	ev_redis_kill();
	hits_for(w, key, 1000);
	long long sk = node_metric(0, skipped), dg = node_metric(0, degraded);
	long long pd = node_metric(0, pending), u = node_metric(0, up);
	cr_log_info("paused 1 s: %lld cycles failed; killed 1 s: %lld skipped, %lld admissions "
		    "degraded, %lld hits pending, store_up %lld", f, sk, dg, pd, u);
	cr_expect_gt(f, 0, "pushes sent to a paused store count as failed");
	cr_expect_gt(sk, 0, "cycles due while the store is away count as skipped");
	cr_expect_gt(dg, 0, "admissions decided on the share count as degraded");
	cr_expect_gt(pd, 0, "hits waiting for the store");
	cr_expect_eq(u, 0);
}

static void ev_pg_stop(void)
{
	cr_assert_eq(pg_server_stop(&pg, 10000), 0);
}

Test(cluster, redis_killed_nodes_keep_to_their_shares)
{
	unsigned w = pick_window();

	redis_up(false);
	for (size_t n = 0; n < NODES; n++)
		node_start(n, with_http(cfg_redis_t(w, ADMIT_SYNC, 50)));
	store_away_case("redis", ev_redis_kill, w);
}

Test(cluster, postgres_stopped_nodes_keep_to_their_shares)
{
	unsigned w = pick_window();

	pg_up();
	for (size_t n = 0; n < NODES; n++)
		node_start(n, with_http(cfg_pg_t(w, ADMIT_SYNC, 50)));
	store_away_case("postgres", ev_pg_stop, w);
}

/* sync_rate 0: the same shares once the store is away. */
Test(cluster, redis_killed_synchronous_nodes_keep_to_their_shares)
{
	unsigned w = pick_window();

	redis_up(false);
	for (size_t n = 0; n < NODES; n++)
		node_start(n, with_http(cfg_redis_t(w, 0, 50)));
	store_away_case("redis (sync_rate 0)", ev_redis_kill, w);
}

Test(cluster, postgres_stopped_synchronous_nodes_keep_to_their_shares)
{
	unsigned w = pick_window();

	pg_up();
	for (size_t n = 0; n < NODES; n++)
		node_start(n, with_http(cfg_pg_t(w, 0, 50)));
	store_away_case("postgres (sync_rate 0)", ev_pg_stop, w);
}

/* The same, asked per request (argument admission="exact") of nodes whose
 * namespace admits locally. */
Test(cluster, redis_admission_exact_per_request)
{
	unsigned w = pick_window();

	redis_up(false);
	for (size_t n = 0; n < NODES; n++)
		node_start(n, with_admission(cfg_redis_t(w, ADMIT_SYNC, 1000), "local"));
	admission_arg_exact = true;
	admission_case("redis", w, true);
}

/* A reload that changes a syncing namespace (sync_rate, the store's
 * options) loses no hit and counts none twice: hits before, during and
 * after the SIGHUP all reach Redis once, and the node counts on. */
Test(cluster, reload_restarts_the_sync_losing_nothing)
{
	unsigned w = pick_window();
	char key[64], json2[1024];
	int64_t rate = 0;
	FILE *f;

	redis_up(false);
	node_start(0, cfg_redis(w, 0.2));
	rand_key(key, sizeof(key), "reload");
	for (int i = 0; i < 300; i++) {
		uint64_t sid;

		if (i == 100) {
			/* Another sync_rate and timeout, one more namespace. */
			snprintf(json2, sizeof(json2),
				 "{\"log_level\":\"debug\",\"namespaces\":[{\"name\":\"other\","
				 "\"window_sizes\":[60]},{\"name\":\"default\","
				 "\"window_sizes\":[%u],\"sync_rate\":0.1,\"strategy\":\"redis\","
				 "\"strategy_opts\":{\"host\":\"127.0.0.1\",\"port\":%d,"
				 "\"timeout_ms\":500}}]}", w, redis.port);
			cr_assert_not_null(f = fopen(nodes[0].a.cfg_path, "w"));
			fputs(json2, f);
			fclose(f);
			cr_assert_eq(agentproc_signal(&nodes[0].a, SIGHUP), 0);
		}
		cr_assert(notify_send(nodes[0].fd[i % CONNS], key, w, 1, &sid) == 0, "%s", errbuf);
		cr_assert(notify_ack(nodes[0].fd[i % CONNS], sid, IO_MS, &rate) == 0, "hit %d: %s",
			  i, errbuf);
		cr_assert_eq(rate, i + 1, "hit %d: the node counts on", i);
		if (i >= 100 && i < 200)
			usleep(2000);
	}
	double total = -1;
	for (int i = 0; i < 100 && (total = redis_total(key, w)) != 300; i++)
		usleep(50000);
	cr_assert_eq(total, 300, "Redis holds every hit once: %g\n%s", total, node_log(0));
	cr_assert_not_null(strstr(node_log(0), "reloaded"), "%s", node_log(0));
}

/* ------------------------------------------------- GET /keys, ctl keys */

/* Issue 28, finding 4: an operator's view does not depend on the node.
 * Node 0 counts 8 hits of a key; once its sync has pushed them (the store
 * holds 8: waited for, not slept), node 1, which never saw the key,
 * answers GET /keys with the store's 8, read when asked and marked so
 * ("store":{"current":8,...,"read_at"}), next to its own view
 * ("seen":false, count and cluster 0); ctl keys prints it. With the store
 * away (away_fn: Redis killed, PostgreSQL paused past its timeout_ms) the
 * answer says so ("store":{"error"}) and still holds the node's view.
 * Before: node 1 answered "cluster":0 and nothing else. */
#define KEYS_ADMIN "Authorization: Bearer adm1n-t0ken\r\n"
#define KEYS_IO_MS 10000          /* a far bound: a read ends within timeout_ms */

static const char *with_admin(const char *cfg)
{
	static char out[2048 + 128];

	snprintf(out, sizeof(out), "{\"http_listen\":\"127.0.0.1:@HTTP_PORT@\","
		 "\"http_admin_token\":\"adm1n-t0ken\",%s", cfg + 1);
	return out;
}

/* GET /keys?key=key on node n. */
static void node_keys(size_t n, const char *key, struct httpc_resp *r)
{
	char target[128];
	const char *why = "";

	snprintf(target, sizeof(target), "/keys?key=%s", key);
	cr_assert(httpc_get(nodes[n].a.http_port, target, KEYS_ADMIN, r, KEYS_IO_MS, &why) == 0,
		  "GET %s on node %zu: %s", target, n, why);
	cr_assert_eq(r->status, 200, "node %zu: %s", n, r->body);
	cr_log_info("node %zu: %s", n, r->body);
}

/* `spoa-ratelimit ctl keys default key` against node n, its output in out. */
static void node_ctl_keys(size_t n, const char *key, char *out, size_t cap)
{
	char cmd[1024];

	snprintf(cmd, sizeof(cmd), "%s ctl -c %s keys default %s 2>&1", agentproc_binary(),
		 nodes[n].a.cfg_path, key);
	FILE *f = popen(cmd, "r");
	cr_assert_not_null(f);
	size_t len = fread(out, 1, cap - 1, f);
	out[len] = '\0';
	cr_assert_eq(pclose(f), 0, "%s", out);
	cr_log_info("ctl keys on node %zu:\n%s", n, out);
}

static void keys_case(const char *store, const char *cfg, unsigned w, store_total_fn total_fn,
		      store_event_fn away_fn)
{
	struct httpc_resp r;
	char key[64], want[128], out[4096];
	int64_t t0;
	double total = -1;

	node_start(0, with_admin(cfg));
	node_start(1, with_admin(cfg));
	rand_key(key, sizeof(key), "keys");
	for (size_t i = 0; i < 8; i++)
		hit(0, i % CONNS, key, w, &lat_all);
	t0 = mono_ms();
	while ((total = total_fn(key, w)) != 8 && mono_ms() - t0 < 10000)
		sleep_ms(10);
	cr_assert_eq(total, 8, "%s: node 0's sync did not push its 8 hits: the store holds %g",
		     store, total);
	time_t before = time(NULL);
	node_keys(1, key, &r);
	cr_log_info("%s: node 1 reads 8 from the store %lld ms after node 0's hits (sync_rate %g)",
		    store, (long long)(mono_ms() - t0), SYNC_RATE);
	snprintf(want, sizeof(want), "{\"window\":%u,\"count\":0,\"cluster\":0,", w);
	cr_assert_not_null(strstr(r.body, want), "node 1's own view: %s", r.body);
	cr_assert_not_null(strstr(r.body, "\"seen\":false,\"store\":{\"current\":8,\"previous\":0,"
				  "\"rate\":8,\"read_at\":"), "%s", r.body);
	long long at = httpc_body_num(&r, "read_at");
	cr_assert(at >= (long long)before - 1 && at <= (long long)time(NULL) + 1,
		  "read_at %lld, asked at %lld", at, (long long)before);
	/* Node 0, which counted them: its view and the store agree. */
	node_keys(0, key, &r);
	snprintf(want, sizeof(want), "{\"window\":%u,\"count\":8,\"cluster\":8,", w);
	cr_assert_not_null(strstr(r.body, want), "%s", r.body);
	cr_assert_not_null(strstr(r.body, "\"seen\":true,\"store\":{\"current\":8,"), "%s", r.body);
	node_ctl_keys(1, key, out, sizeof(out));
	snprintf(want, sizeof(want), "%7us %12s %12s", w, "-", "-");
	cr_assert_not_null(strstr(out, want), "node 1 holds no counter: %s", out);
	cr_assert_not_null(strstr(out, "store, read at "), "%s", out);
	snprintf(want, sizeof(want), "%7us %12d %12d %12d\n", w, 8, 0, 8);
	cr_assert_not_null(strstr(out, want), "%s", out);

	/* The store away: said so, the node's view answered all the same. */
	away_fn();
	node_keys(1, key, &r);
	snprintf(want, sizeof(want), "{\"window\":%u,\"count\":0,\"cluster\":0,", w);
	cr_assert_not_null(strstr(r.body, want), "%s", r.body);
	cr_assert_not_null(strstr(r.body, "\"seen\":false,\"store\":{\"error\":\""), "%s", r.body);
	node_ctl_keys(1, key, out, sizeof(out));
	cr_assert_not_null(strstr(out, "store: away ("), "%s", out);
}

Test(cluster, redis_keys_read_the_store_on_any_node)
{
	unsigned w = pick_window();

	redis_up(false);
	keys_case("redis", cfg_redis_t(w, SYNC_RATE, 1000), w, redis_total, ev_redis_kill);
}

Test(cluster, postgres_keys_read_the_store_on_any_node)
{
	unsigned w = pick_window();

	pg_up();
	keys_case("postgres", cfg_pg_t(w, SYNC_RATE, 1000), w, pg_total, ev_pg_pause);
	ev_pg_resume();
}

/* ------------------------------------------- Redis Cluster and Sentinel */

/* Two agents on a Redis Cluster or behind Sentinel (issue 11), syncing
 * every 0.1 s, hits alternating between them at OUTAGE_RATE while the
 * store changes under them: a slot range resharded, a master killed and
 * its replica promoted, a SENTINEL FAILOVER. Afterwards the store holds
 * every hit exactly once and both nodes read it. */
#define SCALE_NODES   2
#define SCALE_SYNC    0.1
#define SCALE_RUN_MS  5000
#define SCALE_AT_MS   1000

static const char *cfg_scale(unsigned w, const char *opts)
{
	snprintf(json, sizeof(json),
		 "{\"log_level\":\"info\",\"namespaces\":[{\"name\":\"default\","
		 "\"window_sizes\":[%u],\"sync_rate\":%g,\"strategy\":\"redis\","
		 "\"strategy_opts\":{%s,\"timeout_ms\":1000}}]}", w, SCALE_SYNC, opts);
	return json;
}

/* The hash of key's current window in w (the layout of strategies/redis.c). */
static int scale_hash(char *out, size_t len, const char *key, unsigned w)
{
	time_t now = time(NULL);

	return snprintf(out, len, "rl:{default:%u}:%u:%lld", redis_server_bucket(key, strlen(key)),
			w, (long long)(now - now % w));
}

static double rcl_total(const char *key, unsigned w)
{
	char h[128];
	int len = scale_hash(h, sizeof(h), key, w);
	double v = redis_cluster_hget(&rcl, h, (size_t)len, key, strlen(key));

	return isnan(v) ? -1 : v;
}

static double rsn_total(const char *key, unsigned w)
{
	char h[128];
	int len = scale_hash(h, sizeof(h), key, w);
	double v = redis_server_hget(&rsn.data[rsn.master], h, (size_t)len, key, strlen(key));

	return isnan(v) ? -1 : v;
}

/* The load of a case: hits alternating over the SCALE_NODES nodes at
 * OUTAGE_RATE, kept going while an event blocks (scale_hits_for). */
static struct {
	const char *key;
	unsigned w;
	struct lat *l;
	int64_t t0;
	size_t sent;
} sl;

/* Sends the hits due for ms more. */
static void scale_hits_for(int ms)
{
	int64_t end = mono_ms() + ms;

	while (mono_ms() < end) {
		int64_t due, now;

		hit(sl.sent % SCALE_NODES, (sl.sent / SCALE_NODES) % CONNS, sl.key, sl.w, sl.l);
		sl.sent++;
		due = sl.t0 + (int64_t)((double)sl.sent * 1000.0 / OUTAGE_RATE);
		now = mono_ms();
		if (due > now)
			sleep_ms((int)(due - now < end - now ? due - now : end - now));
		cr_assert(mono_ms() - sl.t0 < 60000, "the event did not end within 60 s");
	}
}

/* The load for SCALE_RUN_MS; at SCALE_AT_MS `event` runs (it may send
 * hits itself: scale_hits_for), then `poll` every 100 ms of hits until it
 * says done. Returns the hits sent. */
static size_t scale_load(const char *key, unsigned w, void (*event)(void),
			 bool (*poll)(void), struct lat *l)
{
	bool done = poll == NULL;

	sl.key = key;
	sl.w = w;
	sl.l = l;
	sl.sent = 0;
	sl.t0 = mono_ms();
	scale_hits_for(SCALE_AT_MS);
	event();
	while (!done) {
		scale_hits_for(100);
		done = poll();
	}
	if (mono_ms() - sl.t0 < SCALE_RUN_MS)
		scale_hits_for((int)(SCALE_RUN_MS - (mono_ms() - sl.t0)));
	return sl.sent;
}

static void scale_check(const char *what, const char *key, unsigned w, size_t sent,
			store_total_fn total_fn, struct lat *l)
{
	int64_t rates[NODES], ms;
	double total;

	lat_report(what, l);
	cr_expect(l->over_bound == 0, "%s: %llu ACK(s) later than %d ms (max %.1f ms)", what,
		  (unsigned long long)l->over_bound, ACK_BOUND_MS, (double)l->max_us / 1000.0);
	nodes_up = SCALE_NODES;
	ms = wait_converged(key, w, (int64_t)sent, total_fn, 15000, rates, &total);
	cr_log_info("%s: %zu hits; converged %lld ms after the load ended; store total %g",
		    what, sent, (long long)ms, total);
	cr_assert(ms >= 0, "%s: not converged within 15 s: node rates %lld %lld, store total %g, "
		  "sent %zu (%+g)", what, (long long)rates[0], (long long)rates[1], total, sent,
		  total - (double)sent);
}

static void scale_nodes(unsigned w, const char *opts)
{
	for (size_t n = 0; n < SCALE_NODES; n++)
		node_start(n, cfg_scale(w, opts));
}

static char scale_key[64];
static unsigned scale_slot;

static void rcl_up_with(size_t replicas, unsigned w, const char *extra)
{
	char seeds[256], opts[512];

	if (!redis_server_available())
		cr_skip_test("redis-server is not installed");
	cr_assert_eq(redis_cluster_start(&rcl, 3, replicas, 20000), 0, "cluster: %s", rcl.err);
	rcl_up = true;
	redis_cluster_seeds(&rcl, seeds, sizeof(seeds));
	snprintf(opts, sizeof(opts), "\"cluster_nodes\":%s%s", seeds, extra);
	scale_nodes(w, opts);
	rand_key(scale_key, sizeof(scale_key), "scale");
	{
		char tag[64];
		int len = snprintf(tag, sizeof(tag), "{default:%u}",
				   redis_server_bucket(scale_key, strlen(scale_key)));

		scale_slot = (unsigned)redis_cluster_keyslot(&rcl, tag, (size_t)len);
	}
}

/* The key's slot and 99 around it move to the next master, each slot
 * with keys held half-migrated a while (ASK, TRYAGAIN for the agents). */
static void ev_reshard_pump(void *arg, int ms)
{
	(void)arg;
	scale_hits_for(ms);
}

static void ev_reshard(void)
{
	int from = redis_cluster_owner(&rcl, scale_slot);
	unsigned lo = scale_slot > 50 ? scale_slot - 50 : 0;
	unsigned hi = lo + 99 < 16383 ? lo + 99 : 16383;

	ev_down_at = mono_ms();
	cr_assert(from >= 0, "no owner for slot %u", scale_slot);
	cr_assert_eq(redis_cluster_migrate(&rcl, lo, hi, (size_t)(from + 1) % 3, ev_reshard_pump,
					   NULL), 0, "%s", rcl.err);
	ev_up_at = mono_ms();
	cr_log_info("resharded slots %u-%u (the key's %u) from master %d in %lld ms", lo, hi,
		    scale_slot, from, (long long)(ev_up_at - ev_down_at));
}

Test(cluster, redis_cluster_resharding_while_two_agents_sync)
{
	static struct lat l;
	unsigned w = pick_window();
	size_t sent;

	rcl_up_with(0, w, "");
	sent = scale_load(scale_key, w, ev_reshard, NULL, &l);
	scale_check("redis cluster, resharding", scale_key, w, sent, rcl_total, &l);
	cr_log_info("the servers answered MOVED %lld, ASK %lld, TRYAGAIN %lld times",
		    redis_cluster_errorstat(&rcl, "MOVED"), redis_cluster_errorstat(&rcl, "ASK"),
		    redis_cluster_errorstat(&rcl, "TRYAGAIN"));
	cr_assert_gt(redis_cluster_errorstat(&rcl, "MOVED"), 0, "no push was redirected");
}

static int killed_master, promoted;
static bool restarted;

static void ev_kill_owner(void)
{
	killed_master = redis_cluster_owner(&rcl, scale_slot);
	ev_down_at = mono_ms();
	cr_assert(killed_master >= 0, "no owner for slot %u", scale_slot);
	promoted = redis_cluster_kill(&rcl, (size_t)killed_master);
	cr_assert(promoted >= 0, "%s", rcl.err);
}

/* Promoted? Then the old master comes back as its replica (wait_replicas
 * 1 needs one), and once it is in sync the event is over. */
static bool ev_kill_done(void)
{
	if (!restarted) {
		if (!redis_cluster_promoted(&rcl, (size_t)promoted))
			return false;
		ev_up_at = mono_ms();
		cr_log_info("master %d (the key's slot %u) killed; its replica promoted after %lld "
			    "ms", killed_master, scale_slot, (long long)(ev_up_at - ev_down_at));
		cr_assert_eq(redis_server_restart(&rcl.srv[killed_master], 20000), 0, "%s",
			     rcl.srv[killed_master].err);
		restarted = true;
		return false;
	}
	if (!redis_cluster_in_sync(&rcl, (size_t)killed_master))
		return false;
	cr_log_info("the old master is the new one's replica, in sync, %lld ms after the kill",
		    (long long)(mono_ms() - ev_down_at));
	return true;
}

Test(cluster, redis_cluster_master_killed_under_load)
{
	static struct lat l;
	unsigned w = pick_window();
	size_t sent;

	rcl_up_with(1, w, ",\"wait_replicas\":1");
	sent = scale_load(scale_key, w, ev_kill_owner, ev_kill_done, &l);
	scale_check("redis cluster, master killed", scale_key, w, sent, rcl_total, &l);
}

static void ev_sentinel_failover(void)
{
	ev_down_at = mono_ms();
	cr_assert_eq(redis_sentinels_failover_start(&rsn), 0, "%s", rsn.err);
}

static int64_t next_poll_ms;

static bool ev_sentinel_done(void)
{
	if (mono_ms() < next_poll_ms)
		return false;
	next_poll_ms = mono_ms() + 100;
	if (!redis_sentinels_failover_done(&rsn))
		return false;
	ev_up_at = mono_ms();
	cr_log_info("SENTINEL FAILOVER over (sentinels agree, old master in sync) after %lld ms",
		    (long long)(ev_up_at - ev_down_at));
	return true;
}

Test(cluster, redis_sentinel_failover_under_load)
{
	static struct lat l;
	unsigned w = pick_window();
	char nodes_json[128], opts[256];
	size_t sent;

	if (!redis_sentinels_available())
		cr_skip_test("redis-server or redis-sentinel is not installed");
	cr_assert_eq(redis_sentinels_start(&rsn, 20000), 0, "%s", rsn.err);
	rsn_up = true;
	redis_sentinels_nodes(&rsn, nodes_json, sizeof(nodes_json));
	snprintf(opts, sizeof(opts), "\"sentinel\":{\"master\":\"mymaster\",\"nodes\":%s},"
		 "\"wait_replicas\":1", nodes_json);
	scale_nodes(w, opts);
	rand_key(scale_key, sizeof(scale_key), "sentinel");
	sent = scale_load(scale_key, w, ev_sentinel_failover, ev_sentinel_done, &l);
	cr_assert_eq(rsn.master, 1, "the replica is the master now");
	scale_check("redis sentinel, SENTINEL FAILOVER", scale_key, w, sent, rsn_total, &l);
}
