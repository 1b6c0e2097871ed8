/*
 * clustertest.c - several agent nodes on one real store (see
 * clustertest.h).
 */
#include "tests/lib/clustertest.h"

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
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/lib/clock.h"
#include "tests/lib/httpc.h"

#define LOCK_PATH "/tmp/spoa-ratelimit-test_cluster.lock"

struct ct_node ct_nodes[CT_NODES];
size_t ct_nodes_up = CT_NODES;
struct ct_lat ct_lat_all;
bool ct_admission_exact;
int64_t ct_degraded;
struct redis_server ct_redis_srv;
struct pg_server ct_pg_srv;
int64_t ct_down_at, ct_up_at;

static bool redis_started, pg_created;
static int lock_fd = -1;
static char json[2048];

/* ---------------------------------------------------------------- nodes */

const char *ct_node_log(size_t n)
{
	static char tail[4000];

	agentproc_log_tail(&ct_nodes[n].a, tail, sizeof(tail));
	return tail;
}

size_t ct_log_count(size_t n, const char *needle)
{
	return agentproc_log_lines(&ct_nodes[n].a, needle, NULL);
}

void ct_node_start_with(size_t n, const char *cfg, const char *workers, size_t conns)
{
	const char *const args[] = { "-w", workers, NULL };
	struct ct_node *nd = &ct_nodes[n];

	if (!agentproc_available())
		cr_skip_test("agent binary %s not built ($AGENT)", agentproc_binary());
	cr_assert(agentproc_start(&nd->a, cfg, args, CT_START_MS) == 0,
		  "starting node %zu: %s\n--- log ---\n%s", n, nd->a.err, ct_node_log(n));
	nd->started = true;
	for (size_t c = 0; c < conns && c < CT_CONNS; c++)
		nd->fd[c] = sp_open(nd->a.port);
}

void ct_node_start(size_t n, const char *cfg)
{
	ct_node_start_with(n, cfg, "2", CT_CONNS);
}

void ct_nodes_start(size_t count, const char *cfg)
{
	for (size_t n = 0; n < count && n < CT_NODES; n++)
		ct_node_start(n, cfg);
}

void ct_node_close_conns(size_t n)
{
	for (size_t c = 0; c < CT_CONNS; c++) {
		if (ct_nodes[n].fd[c] >= 0)
			close(ct_nodes[n].fd[c]);
		ct_nodes[n].fd[c] = -1;
	}
}

void ct_node_stop(size_t n)
{
	struct ct_node *nd = &ct_nodes[n];
	bool crash;
	int st;

	if (!nd->started)
		return;
	nd->started = false;
	ct_node_close_conns(n);
	st = agentproc_stop(&nd->a, 10000, false);
	crash = agentproc_log_has_crash(&nd->a);
	cr_expect(!crash, "node %zu's log holds a sanitizer report or a respawn:\n%s", n,
		  ct_node_log(n));
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "node %zu: exit status %#x after SIGTERM (log %s)", n, (unsigned)st,
		  nd->a.log_path);
	if (!crash && WIFEXITED(st) && WEXITSTATUS(st) == 0 && !getenv("CLUSTER_KEEP_LOGS"))
		agentproc_stop(&nd->a, 0, true);
	else
		cr_log_warn("node %zu: log kept in %s", n, nd->a.log_path);
}

long long ct_node_metric(size_t n, const char *sample)
{
	return httpc_metric(ct_nodes[n].a.http_port, sample, CT_IO_MS);
}

void ct_wait_nodes(size_t want)
{
	static const char sample[] = "spoa_ratelimit_store_nodes{namespace=\"default\"} ";
	int64_t t0 = test_now_ms();
	bool all;

	do {
		test_sleep_ms(100);
		all = true;
		for (size_t n = 0; n < ct_nodes_up; n++)
			all = all && ct_node_metric(n, sample) == (long long)want;
	} while (!all && test_now_ms() - t0 < 10000);
	for (size_t n = 0; n < ct_nodes_up; n++)
		cr_assert_eq(ct_node_metric(n, sample), (long long)want, "node %zu counts %lld nodes",
			     n, ct_node_metric(n, sample));
}

void ct_store_back(const struct ct_store *st)
{
	if (st == &ct_redis)
		cr_assert(redis_server_restart(&ct_redis_srv, CT_STORE_MS) == 0,
			  "restart redis-server: %s", ct_redis_srv.err);
	else
		cr_assert(pg_server_start(&ct_pg_srv, CT_STORE_MS) == 0, "postgres: %s",
			  ct_pg_srv.err);
}

void ct_wait_store_down(void)
{
	static const char sample[] = "spoa_ratelimit_store_up{namespace=\"default\"} ";
	int64_t t0 = test_now_ms();
	bool all;

	do {
		test_sleep_ms(100);
		all = true;
		for (size_t n = 0; n < ct_nodes_up; n++)
			all = all && ct_node_metric(n, sample) == 0;
	} while (!all && test_now_ms() - t0 < 5000);
	cr_assert(all, "the nodes did not see their store go within 5 s");
}

void ct_wait_store_decides(unsigned w, int64_t limit)
{
	int64_t t0 = test_now_ms(), saved = ct_degraded;
	char key[64];

	for (size_t n = 0; n < ct_nodes_up; n++)
		for (size_t c = 0; c < CT_CONNS; c++) {
			int64_t before;

			if (ct_nodes[n].fd[c] < 0)
				continue;
			do {
				sp_key(key, sizeof(key), "probe");
				before = ct_degraded;
				(void)ct_limit_hit(n, c, key, w, limit);
				if (ct_degraded == before)
					break;
				test_sleep_ms(100);
			} while (test_now_ms() - t0 < 10000);
			cr_assert(ct_degraded == before, "node %zu, connection %zu: answers still "
				  "degraded after 10 s (the store never answered):\n%s", n, c,
				  ct_node_log(n));
		}
	ct_degraded = saved;
}

/* ---------------------------------------------------------------- configs */

const char *ct_with_http(const char *cfg)
{
	static char out[2048 + 64];

	snprintf(out, sizeof(out), "{\"http_listen\":\"127.0.0.1:@HTTP_PORT@\",%s", cfg + 1);
	return out;
}

const char *ct_with_admin(const char *cfg)
{
	static char out[2048 + 128];

	snprintf(out, sizeof(out), "{\"http_listen\":\"127.0.0.1:@HTTP_PORT@\","
		 "\"http_admin_token\":\"adm1n-t0ken\",%s", cfg + 1);
	return out;
}

const char *ct_with_admission(const char *cfg, const char *how)
{
	static char out[2048 + 64];
	const char *p = strstr(cfg, "\"sync_rate\":");

	cr_assert_not_null(p);
	snprintf(out, sizeof(out), "%.*s\"admission\":\"%s\",%s", (int)(p - cfg), cfg, how, p);
	return out;
}

unsigned ct_window(void)
{
	return test_window_pick(3600, 120);
}

/* ---------------------------------------------------------------- hits */

void ct_lat_add(struct ct_lat *l, int64_t us)
{
	size_t bin = (size_t)(us / 100);

	l->n++;
	if (us > l->max_us)
		l->max_us = us;
	if (us > (int64_t)CT_ACK_BOUND_MS * 1000)
		l->over_bound++;
	l->bins[bin < CT_LAT_BINS ? bin : CT_LAT_BINS - 1]++;
}

/* The q-quantile (0..1) in ms, to the 0.1 ms bin. */
static double lat_quantile(const struct ct_lat *l, double q)
{
	uint64_t want = (uint64_t)ceil(q * (double)l->n), seen = 0;

	for (size_t i = 0; i < CT_LAT_BINS; i++) {
		seen += l->bins[i];
		if (seen >= want && seen > 0)
			return (double)(i + 1) / 10.0;
	}
	return (double)l->max_us / 1000.0;
}

void ct_lat_report(const char *what, const struct ct_lat *l)
{
	cr_log_info("%s: %llu ACKs, p50 %.1f ms, p99 %.1f ms, p99.9 %.1f ms, max %.1f ms, "
		    "%llu over %d ms", what, (unsigned long long)l->n, lat_quantile(l, 0.5),
		    lat_quantile(l, 0.99), lat_quantile(l, 0.999), (double)l->max_us / 1000.0,
		    (unsigned long long)l->over_bound, CT_ACK_BOUND_MS);
}

int ct_notify(int fd, const char *key, unsigned w, int64_t cost, int64_t *rate, int64_t *us)
{
	static struct rawspop_actions acts;
	struct sp_msg m = { .key = key, .window = w, .has_cost = true, .cost = cost };
	int64_t t0 = test_now_us();
	uint64_t sid;
	int rc;

	if (sp_try_send(fd, &m, &sid) < 0)
		return -1;
	rc = sp_try_ack(fd, sid, CT_IO_MS, &acts);
	*us = test_now_us() - t0;
	return rc < 0 ? -1 : sp_try_rate(&acts, rate);
}

void ct_hit(size_t n, size_t c, const char *key, unsigned w, struct ct_lat *l)
{
	int64_t rate, us;

	cr_assert(ct_notify(ct_nodes[n].fd[c], key, w, 1, &rate, &us) == 0,
		  "hit on node %zu conn %zu: %s", n, c, sp_err);
	ct_lat_add(l, us);
}

int64_t ct_rate(size_t n, const char *key, unsigned w)
{
	int64_t rate, us;

	cr_assert(ct_notify(ct_nodes[n].fd[0], key, w, 0, &rate, &us) == 0,
		  "read on node %zu: %s", n, sp_err);
	ct_lat_add(&ct_lat_all, us);
	return rate;
}

void ct_spread_hits(const char *key, unsigned w, size_t hits, struct ct_lat *l)
{
	for (size_t i = 0; i < hits; i++)
		ct_hit(i % CT_NODES, (i / CT_NODES) % CT_CONNS, key, w, l);
}

int ct_limit_send(int fd, const char *key, unsigned w, int64_t limit, uint64_t *sid)
{
	struct sp_msg m = { .key = key, .window = w, .limit = limit,
			    .admission = ct_admission_exact ? "exact" : NULL };

	return sp_try_send(fd, &m, sid);
}

int ct_limit_ack(int fd)
{
	static struct rawspop_actions acts;
	const struct rawspop_action *v;

	if (sp_try_ack(fd, 0, CT_IO_MS, &acts) < 0)
		return -1;
	v = rawspop_var_find(&acts, "degraded");
	ct_degraded += v && v->value.type == RAWSPOP_T_BOOL && v->value.b;
	v = rawspop_var_find(&acts, "exceeded");
	if (!v || v->value.type != RAWSPOP_T_BOOL) {
		snprintf(sp_err, sizeof(sp_err), "ACK without a boolean exceeded");
		return -1;
	}
	return v->value.b ? 0 : 1;
}

int ct_limit_hit(size_t n, size_t c, const char *key, unsigned w, int64_t limit)
{
	uint64_t sid;
	int a;

	cr_assert(ct_limit_send(ct_nodes[n].fd[c], key, w, limit, &sid) == 0, "node %zu: %s", n,
		  sp_err);
	a = ct_limit_ack(ct_nodes[n].fd[c]);
	cr_assert(a >= 0, "node %zu: %s", n, sp_err);
	return a;
}

int ct_rate_ack(int fd, int64_t *rate)
{
	static struct rawspop_actions acts;

	if (sp_try_ack(fd, 0, CT_IO_MS, &acts) < 0)
		return -1;
	return sp_try_rate(&acts, rate);
}

const char *const ct_pattern_names[CT_PATTERN_COUNT] = {
	[CT_PARALLEL] = "parallel", [CT_ROUND_ROBIN] = "round-robin",
	[CT_PACED] = "paced ~110/s per node",
};

int64_t ct_admit(enum ct_pattern p, const char *key, unsigned w, int64_t limit, size_t hits)
{
	int64_t admitted = 0, t0 = test_now_us();
	uint64_t sid;

	if (p == CT_PARALLEL) {
		/* Every node's share goes out before any answer is read. */
		for (size_t i = 0; i < hits / CT_NODES; i++)
			for (size_t n = 0; n < CT_NODES; n++)
				cr_assert(ct_limit_send(ct_nodes[n].fd[i % CT_CONNS], key, w, limit,
							&sid) == 0, "%s", sp_err);
		for (size_t i = 0; i < hits / CT_NODES; i++)
			for (size_t n = 0; n < CT_NODES; n++) {
				int a = ct_limit_ack(ct_nodes[n].fd[i % CT_CONNS]);

				cr_assert(a >= 0, "node %zu hit %zu: %s", n, i, sp_err);
				admitted += a;
			}
		return admitted;
	}
	for (size_t i = 0; i < hits; i++) {
		if (p == CT_PACED) {
			/* ~110 hits/s per node: one every 1/330 s overall. */
			int64_t due = t0 + (int64_t)i * 1000000 / (110 * CT_NODES);
			int64_t now = test_now_us();

			if (due > now)
				test_sleep_us(due - now);
		}
		admitted += ct_limit_hit(i % CT_NODES, (i / CT_NODES) % CT_CONNS, key, w, limit);
	}
	return admitted;
}

/* ---------------------------------------------------------------- Redis */

static void redis_up(unsigned flags)
{
	if (!redis_server_available())
		cr_skip_test("redis-server is not installed");
	memset(&ct_redis_srv, 0, sizeof(ct_redis_srv));
	if (flags & CT_PERSISTENT) {
		/* Every write on disk before its reply: a SIGKILLed server
		 * comes back with everything it confirmed, so "nothing
		 * lost" is about the agent, not about the store. */
		ct_redis_srv.extra[0] = "--appendonly";
		ct_redis_srv.extra[1] = "yes";
		ct_redis_srv.extra[2] = "--appendfsync";
		ct_redis_srv.extra[3] = "always";
	}
	cr_assert(redis_server_start(&ct_redis_srv, CT_STORE_MS) == 0, "redis-server: %s",
		  ct_redis_srv.err);
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
	snprintf(dir, sizeof(dir), "%s", ct_redis_srv.dir);
	redis_server_stop(&ct_redis_srv, 3000);
	/* Redis 7 keeps its AOF in a subdirectory, which redis_server_stop()
	 * (files only) leaves behind, and the directory with it. */
	if (dir[0] && access(dir, F_OK) == 0)
		nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static void redis_pause(void)
{
	ct_down_at = test_now_ms();
	cr_assert(redis_server_pause(&ct_redis_srv) == 0, "SIGSTOP redis-server");
}

static void redis_resume(void)
{
	cr_assert(redis_server_resume(&ct_redis_srv) == 0, "SIGCONT redis-server");
	ct_up_at = test_now_ms();
}

static void redis_gone(void)
{
	ct_down_at = test_now_ms();
	cr_assert(redis_server_kill(&ct_redis_srv) == 0, "kill redis-server");
}

static const char *redis_cfg(unsigned w, double rate, int timeout_ms)
{
	snprintf(json, sizeof(json),
		 "{\"log_level\":\"info\",\"namespaces\":[{\"name\":\"default\","
		 "\"window_sizes\":[%u],\"sync_rate\":%g,\"strategy\":\"redis\","
		 "\"strategy_opts\":{\"host\":\"127.0.0.1\",\"port\":%d,\"timeout_ms\":%d}}]}",
		 w, rate, ct_redis_srv.port, timeout_ms);
	return json;
}

/* The field `key` summed over every hash "rl:{<ns>:<bucket>}:<w>:<start>"
 * (one, in practice). */
static double redis_total(const char *ns, const char *key, unsigned w)
{
	char pattern[128], cursor[32] = "0";
	double sum = 0;

	snprintf(pattern, sizeof(pattern), "rl:{%s:*}:%u:*", ns, w);
	do {
		redisReply *rep = redis_server_command(&ct_redis_srv, "SCAN %s MATCH %s COUNT 1000",
						       cursor, pattern);

		if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2) {
			if (rep)
				freeReplyObject(rep);
			return -1;
		}
		snprintf(cursor, sizeof(cursor), "%s", rep->element[0]->str);
		for (size_t i = 0; i < rep->element[1]->elements; i++) {
			redisReply *v = redis_server_command(&ct_redis_srv, "HGET %s %s",
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

long long ct_redis_agent_cost(long long *server, long long *usec)
{
	/* Not hget or hgetall: the agents' sync and admissions never send
	 * them (only the library's fetch does), the scripts run them. hmget:
	 * the reads of sync cycles, and one inside each push script call that
	 * writes (INFO cannot tell them apart): counted, an upper bound. */
	static const char *const sent[] = { "evalsha", "eval", "hmget", "script|load", "auth",
					    "select", "ping" };
	redisReply *rep = redis_server_command(&ct_redis_srv, "INFO commandstats");
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
	rep = redis_server_command(&ct_redis_srv, "INFO stats");
	cr_assert(rep && rep->type == REDIS_REPLY_STRING, "INFO stats");
	p = strstr(rep->str, "total_commands_processed:");
	*server = p ? atoll(p + strlen("total_commands_processed:")) : 0;
	freeReplyObject(rep);
	return n;
}

static long long redis_cost(long long *inner)
{
	long long srv, n = ct_redis_agent_cost(&srv, NULL);

	*inner = srv - n;
	return n;
}

const struct ct_store ct_redis = {
	.name = "redis",
	.up = redis_up,
	.pause = redis_pause,
	.resume = redis_resume,
	.gone = redis_gone,
	.cfg = redis_cfg,
	.timeout_ms = 100,
	.total = redis_total,
	.cost = redis_cost,
	.cost_unit = "commands",
};

/* ---------------------------------------------------------------- PostgreSQL */

/* The data directory of the binary's template cluster (ct_main names its
 * directory in CT_PG_TEMPLATE): made by the first test that needs it,
 * under a lock (the tests of test_forget.c run two at a time). Returns
 * 0, or -1 (no template: the caller runs initdb). */
static int pg_template(char *data, size_t len)
{
	const char *dir = getenv("CT_PG_TEMPLATE");
	char path[PG_SERVER_PATH_MAX + 32];
	struct pg_server tpl;
	int fd, rc = 0;

	if (!dir || !*dir)
		return -1;
	snprintf(data, len, "%s/tpl/data", dir);
	snprintf(path, sizeof(path), "%s/lock", dir);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	while (flock(fd, LOCK_EX) < 0 && errno == EINTR)
		;
	snprintf(path, sizeof(path), "%s/tpl/data/PG_VERSION", dir);
	if (access(path, F_OK) != 0) {
		snprintf(path, sizeof(path), "%s/tpl", dir);
		if (pg_server_create(&tpl, NULL) < 0) {
			cr_log_warn("template cluster: %s", tpl.err);
			rc = -1;
		} else if (rename(tpl.dir, path) < 0) {
			cr_log_warn("template cluster: rename %s: %s", tpl.dir, strerror(errno));
			pg_server_destroy(&tpl);
			rc = -1;
		}
	}
	close(fd);
	return rc;
}

static void pg_up(unsigned flags)
{
	char tpl[PG_SERVER_PATH_MAX + 16], out[1024];
	bool have_tpl;

	if (!pg_server_available())
		cr_skip_test("PostgreSQL is not installed (%s)", pg_server_bindir());
	have_tpl = pg_template(tpl, sizeof(tpl)) == 0;
	cr_assert(pg_server_create(&ct_pg_srv, have_tpl ? tpl : NULL) == 0, "initdb: %s",
		  ct_pg_srv.err);
	pg_created = true;
	if (flags & CT_STATEMENTS) {
		ct_pg_srv.extra[0] = "-c";
		ct_pg_srv.extra[1] = "shared_preload_libraries=pg_stat_statements";
	}
	cr_assert(pg_server_start(&ct_pg_srv, CT_STORE_MS) == 0, "postgres: %s", ct_pg_srv.err);
	if (flags & CT_STATEMENTS)
		cr_assert_geq(pg_server_query(ct_pg_srv.conninfo, "CREATE EXTENSION "
					      "pg_stat_statements", out, sizeof(out)), 0, "%s",
			      out);
}

static void pg_down(void)
{
	if (!pg_created)
		return;
	pg_created = false;
	pg_server_destroy(&ct_pg_srv);
}

static void pg_pause(void)
{
	ct_down_at = test_now_ms();
	cr_assert(pg_server_pause(&ct_pg_srv) == 0, "SIGSTOP postgres: %s", ct_pg_srv.err);
}

static void pg_resume(void)
{
	cr_assert(pg_server_resume(&ct_pg_srv) == 0, "SIGCONT postgres: %s", ct_pg_srv.err);
	ct_up_at = test_now_ms();
}

static void pg_gone(void)
{
	ct_down_at = test_now_ms();
	cr_assert_eq(pg_server_stop(&ct_pg_srv, 10000), 0);
}

static const char *pg_cfg(unsigned w, double rate, int timeout_ms)
{
	snprintf(json, sizeof(json),
		 "{\"log_level\":\"info\",\"namespaces\":[{\"name\":\"default\","
		 "\"window_sizes\":[%u],\"sync_rate\":%g,\"strategy\":\"postgres\","
		 "\"strategy_opts\":{\"conninfo\":\"host=127.0.0.1 port=%d dbname=postgres "
		 "user=postgres\",\"table\":\"" CT_PG_TABLE "\",\"timeout_ms\":%d}}]}",
		 w, rate, ct_pg_srv.port, timeout_ms);
	return json;
}

/* Keys and namespaces here are [a-z0-9-], safe inside a literal. -1: no
 * table yet, or an error. */
static double pg_total(const char *ns, const char *key, unsigned w)
{
	char sql[512], out[64];

	snprintf(sql, sizeof(sql),
		 "SELECT coalesce(sum(count), 0) FROM " CT_PG_TABLE " WHERE namespace = '%s' "
		 "AND key = convert_to('%s', 'UTF8') AND window_size = %u", ns, key, w);
	if (pg_server_query(ct_pg_srv.conninfo, sql, out, sizeof(out)) < 0)
		return -1;
	return strtod(out, NULL);
}

/* Statements the agents ran (pg_stat_statements: each execution of a
 * prepared statement is a call), the test's own queries of the
 * statistics left out. */
static long long pg_cost(long long *inner)
{
	char out[64];

	*inner = 0;
	cr_assert_geq(pg_server_query(ct_pg_srv.conninfo, "SELECT coalesce(sum(calls), 0) FROM "
				      "pg_stat_statements WHERE query NOT LIKE "
				      "'%pg_stat_statements%'", out, sizeof(out)), 0, "%s", out);
	return atoll(out);
}

static void pg_cost_report(void)
{
	char out[1024];

	cr_assert_geq(pg_server_query(ct_pg_srv.conninfo, "SELECT string_agg(calls || ' x ' || "
				      "left(regexp_replace(query, '\\s+', ' ', 'g'), 48), "
				      "' | ' ORDER BY calls DESC) FROM pg_stat_statements "
				      "WHERE query NOT LIKE '%pg_stat_statements%'", out,
				      sizeof(out)), 0, "%s", out);
	cr_log_info("statements so far: %s", out);
}

const struct ct_store ct_postgres = {
	.name = "postgres",
	.up = pg_up,
	.pause = pg_pause,
	.resume = pg_resume,
	.gone = pg_gone,
	.cfg = pg_cfg,
	.timeout_ms = 300,
	.total = pg_total,
	.cost = pg_cost,
	.cost_report = pg_cost_report,
	.cost_unit = "statements",
};

/* ---------------------------------------------------------------- load */

size_t ct_load_events(int run_ms, int per_s, int at1_ms, ct_event_fn ev1, int at2_ms,
		      ct_event_fn ev2, void (*one)(size_t i, void *arg), void *arg)
{
	int64_t t0 = test_now_ms();
	bool did1 = false, did2 = false;
	size_t sent = 0;

	for (;;) {
		int64_t el = test_now_ms() - t0;

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
			int64_t now = test_now_ms();

			if (due > now)
				test_sleep_ms((int)(due - now));
		}
	}
	return sent;
}

struct key_load {
	const char *key;
	unsigned w;
	struct ct_lat *l;
};

/* Hit i of a key_load: round-robin over the nodes and their connections. */
static void key_load_one(size_t i, void *arg)
{
	const struct key_load *kl = arg;

	ct_hit(i % CT_NODES, (i / CT_NODES) % CT_CONNS, kl->key, kl->w, kl->l);
}

size_t ct_load_hits(const char *key, unsigned w, int run_ms, int per_s, int at1_ms,
		    ct_event_fn ev1, int at2_ms, ct_event_fn ev2, struct ct_lat *l)
{
	struct key_load kl = { .key = key, .w = w, .l = l };

	return ct_load_events(run_ms, per_s, at1_ms, ev1, at2_ms, ev2, key_load_one, &kl);
}

int64_t ct_wait_converged(const char *key, unsigned w, int64_t want, ct_total_fn total,
			  int timeout_ms, int64_t rates[CT_NODES], double *seen)
{
	int64_t t0 = test_now_ms();

	for (;;) {
		bool all = true;

		for (size_t n = 0; n < ct_nodes_up; n++) {
			rates[n] = ct_rate(n, key, w);
			all = all && rates[n] == want;
		}
		*seen = total("default", key, w);
		if (all && *seen == (double)want)
			return test_now_ms() - t0;
		if (test_now_ms() - t0 >= timeout_ms)
			return -1;
		test_sleep_ms(20);
	}
}

/* ---------------------------------------------------------------- fixture */

void ct_init(void)
{
	for (size_t n = 0; n < CT_NODES; n++)
		for (size_t c = 0; c < CT_CONNS; c++)
			ct_nodes[n].fd[c] = -1;
	signal(SIGPIPE, SIG_IGN);
}

void ct_setup(void)
{
	lock_fd = open(LOCK_PATH, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
	if (lock_fd >= 0)
		while (flock(lock_fd, LOCK_EX) < 0 && errno == EINTR)
			;
	ct_init();
}

void ct_teardown(void)
{
	for (size_t n = 0; n < CT_NODES; n++)
		ct_node_stop(n);
	redis_down();
	pg_down();
	if (lock_fd >= 0)
		close(lock_fd);
	lock_fd = -1;
}

int ct_main(int argc, char *argv[])
{
	struct criterion_test_set *tests = criterion_initialize();
	char dir[] = "/tmp/ct-pgtpl-XXXXXX";
	bool have_dir;
	int result = 0;

	/* Readable by the postgres user, who copies the template under root. */
	have_dir = mkdtemp(dir) && chmod(dir, 0755) == 0;
	if (have_dir)
		setenv("CT_PG_TEMPLATE", dir, 1);
	if (criterion_handle_args(argc, argv, true))
		result = !criterion_run_all_tests(tests);
	criterion_finalize(tests);
	if (have_dir)
		nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return result;
}
