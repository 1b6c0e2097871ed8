/*
 * stores.c - see stores.h.
 */
#include "tests/lib/stores.h"
#include "tests/lib/storetest.h"

#include <criterion/criterion.h>
#include <libpq-fe.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ENV_REDIS    "ST_REDIS_PORT"
#define ENV_CLUSTER  "ST_CLUSTER_PORTS"
#define ENV_PG       "ST_PG_CONNINFO"
#define ENV_PG_TPL   "ST_PG_TEMPLATE"

static const struct store *cur;     /* the store of the running test */
static char space[64];              /* the case's key prefix / table */

/* The test's servers, from the environment main() set (or the case's
 * own), and a connection to each for looking into them. */
static struct redis_server rsrv[REDIS_CLUSTER_MAX];
static redisContext *rctx[REDIS_CLUSTER_MAX];
static size_t nrsrv;
static const char *pg_conninfo;
static PGconn *pgc;

/* Closes the connections that look into the store. */
static void look_close(void)
{
	for (size_t i = 0; i < REDIS_CLUSTER_MAX; i++) {
		if (rctx[i])
			redisFree(rctx[i]);
		rctx[i] = NULL;
	}
	if (pgc)
		PQfinish(pgc);
	pgc = NULL;
}

/* ---------------------------------------------------------- Redis */

static void redis_env(const char *var)
{
	const char *v = getenv(var);

	cr_assert(v && *v, "no %s: the server did not start (see the runner's output)", var);
	nrsrv = 0;
	while (*v && nrsrv < REDIS_CLUSTER_MAX) {
		memset(&rsrv[nrsrv], 0, sizeof(rsrv[nrsrv]));
		rsrv[nrsrv++].port = atoi(v);
		v += strcspn(v, ",");
		v += *v == ',';
	}
}

static void redis_opts(char *out, size_t len)
{
	snprintf(out, len, "{\"port\": %d, \"timeout_ms\": %d, \"prefix\": \"%s\"}", rsrv[0].port,
		 STORE_TIMEOUT_MS, space);
}

static void redis_dead_opts(char *out, size_t len)
{
	snprintf(out, len, "{\"port\": 1, \"timeout_ms\": 50}");
}

static void cluster_opts(char *out, size_t len)
{
	int n = snprintf(out, len, "{\"timeout_ms\": %d, \"prefix\": \"%s\", \"cluster_nodes\": [",
			 STORE_TIMEOUT_MS, space);

	for (size_t i = 0; i < nrsrv; i++)
		n += snprintf(out + n, len - (size_t)n, "%s\"127.0.0.1:%d\"", i ? ", " : "",
			      rsrv[i].port);
	snprintf(out + n, len - (size_t)n, "]}");
}

static void cluster_dead_opts(char *out, size_t len)
{
	snprintf(out, len, "{\"cluster_nodes\": [\"127.0.0.1:1\"], \"timeout_ms\": 50}");
}

/* "<space>:{<ns>:<bucket>}:<kind><size>:<start>", the strategy's layout
 * (strategies/redis.c; a namespace starting with '}' gets a mark). */
static int redis_hash(char *out, size_t len, const char *ns, const char *key, size_t key_len,
		      const char *kind, uint32_t size, int64_t start)
{
	return snprintf(out, len, "%s:{%s%s:%u}:%s%u:%lld", space, ns[0] == '}' ? "\x01" : "", ns,
			redis_server_bucket(key, key_len), kind, size, (long long)start);
}

/* The connection to server i, made at the first call. */
static redisContext *rconn(size_t i)
{
	if (!rctx[i])
		cr_assert_not_null(rctx[i] = redis_server_connect(&rsrv[i]), "%s", rsrv[i].err);
	return rctx[i];
}

/* A command on server i (connected again if the connection broke); the
 * reply, asserted. */
static redisReply *rcmd(size_t i, int argc, const char **argv, const size_t *lens)
{
	redisReply *rep = NULL;

	for (int tries = 0; tries < 2 && !rep; tries++) {
		rep = redisCommandArgv(rconn(i), argc, argv, lens);
		if (!rep) {
			redisFree(rctx[i]);
			rctx[i] = NULL;
		}
	}
	cr_assert_not_null(rep, "%s on server %zu", argv[0], i);
	return rep;
}

/* HGET on whichever server holds the hash (the others answer MOVED);
 * NAN if none has the field. */
static double redis_look(bool reserved, const char *ns, const char *key, size_t key_len,
			 uint32_t size, int64_t start)
{
	char h[256];
	const char *argv[3] = { "HGET", h, key };
	size_t lens[3] = { 4, 0, key_len };
	double v = NAN;

	lens[1] = (size_t)redis_hash(h, sizeof(h), ns, key, key_len, reserved ? "r:" : "", size,
				     start);
	for (size_t i = 0; i < nrsrv; i++) {
		redisReply *rep = rcmd(i, 3, argv, lens);

		if (rep->type == REDIS_REPLY_STRING)
			v = strtod(rep->str, NULL);
		freeReplyObject(rep);
	}
	return v;
}

/* Over every key of the case's space on every server: the keys, the
 * token keys, or the fields of the counters' hashes of namespace ns (their
 * number, or the sum of their values). */
static double redis_tally(enum tally what, const char *ns)
{
	double n = 0, sum = 0;
	char pattern[80], tag[128];
	size_t taglen = 0;

	snprintf(pattern, sizeof(pattern), "%s:*", space);
	if (ns)
		taglen = (size_t)snprintf(tag, sizeof(tag), "%s:{%s%s:", space,
					  ns[0] == '}' ? "\x01" : "", ns);
	for (size_t i = 0; i < nrsrv; i++) {
		redisContext *c = rconn(i);
		char cursor[32] = "0";

		do {
			redisReply *rep = redisCommand(c, "SCAN %s MATCH %s COUNT 1000", cursor,
						       pattern);

			cr_assert(rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2, "SCAN");
			snprintf(cursor, sizeof(cursor), "%s", rep->element[0]->str);
			for (size_t k = 0; k < rep->element[1]->elements; k++) {
				const redisReply *key = rep->element[1]->element[k];
				const char *rest = strstr(key->str, "}:");
				bool counter, token;

				if (what == T_OBJECTS) {
					n++;
					continue;
				}
				token = rest && strncmp(rest + 2, "tok:", 4) == 0;
				counter = rest && !token && strncmp(rest + 2, "r:", 2) != 0 &&
					  strstr(key->str, ":nodes}") == NULL;
				if (what == T_TOKENS) {
					n += token;
					continue;
				}
				if (!counter || (ns && (key->len < taglen ||
							memcmp(key->str, tag, taglen) != 0)))
					continue;
				redisReply *vals = redisCommand(c, "HVALS %b", key->str, key->len);

				cr_assert(vals && vals->type == REDIS_REPLY_ARRAY, "HVALS");
				n += (double)vals->elements;
				for (size_t v = 0; v < vals->elements; v++)
					sum += strtod(vals->element[v]->str, NULL);
				freeReplyObject(vals);
			}
			freeReplyObject(rep);
		} while (strcmp(cursor, "0") != 0);
	}
	return what == T_TOTAL ? sum : n;
}

/* ---------------------------------------------------------- PostgreSQL */

static void pg_opts(char *out, size_t len)
{
	snprintf(out, len, "{\"conninfo\": \"%s\", \"table\": \"%s\", \"timeout_ms\": %d}",
		 pg_conninfo, space, STORE_TIMEOUT_MS);
}

static void pg_dead_opts(char *out, size_t len)
{
	snprintf(out, len, "{\"conninfo\": \"host=127.0.0.1 port=1\", \"timeout_ms\": 200}");
}

/* The first column of the first row of sql (a printf format), or NAN
 * when there is no row or it is NULL. */
static double pg_value(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static double pg_value(const char *fmt, ...)
{
	PGresult *res;
	char *sql;
	va_list ap;
	double v = NAN;

	va_start(ap, fmt);
	cr_assert_geq(vasprintf(&sql, fmt, ap), 0);
	va_end(ap);
	if (!pgc || PQstatus(pgc) != CONNECTION_OK) {
		if (pgc)
			PQfinish(pgc);
		pgc = PQconnectdb(pg_conninfo);
		cr_assert_eq(PQstatus(pgc), CONNECTION_OK, "%s", PQerrorMessage(pgc));
	}
	res = PQexec(pgc, sql);
	cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%.200s: %s", sql,
		     PQerrorMessage(pgc));
	if (PQntuples(res) > 0 && !PQgetisnull(res, 0, 0))
		v = strtod(PQgetvalue(res, 0, 0), NULL);
	PQclear(res);
	free(sql);
	return v;
}

/* bytes as a bytea literal's text: \x<hex> (malloc'd) */
static char *pg_hex(const char *p, size_t n)
{
	char *h = malloc(2 * n + 3);

	cr_assert_not_null(h);
	strcpy(h, "\\x");
	for (size_t i = 0; i < n; i++)
		sprintf(h + 2 + 2 * i, "%02x", (unsigned char)p[i]);
	return h;
}

static double pg_look(bool reserved, const char *ns, const char *key, size_t key_len,
		      uint32_t size, int64_t start)
{
	char *hns = pg_hex(ns, strlen(ns)), *hkey = pg_hex(key, key_len);
	double v = pg_value("SELECT %s FROM %s WHERE namespace = convert_from('%s'::bytea, "
			    "'UTF8') AND key = '%s'::bytea AND window_size = %u AND "
			    "window_start = %lld", reserved ? "reserved" : "count", space, hns, hkey, size,
			    (long long)start);

	free(hns);
	free(hkey);
	return v;
}

static double pg_of_ns(const char *what, const char *ns)
{
	char *hns = pg_hex(ns, strlen(ns));
	double v = pg_value("SELECT %s FROM %s WHERE namespace = convert_from('%s'::bytea, "
			    "'UTF8')", what, space, hns);

	free(hns);
	return v;
}

static double pg_tally(enum tally what, const char *ns)
{
	switch (what) {
	case T_COUNTERS:
		return pg_of_ns("count(*)", ns);
	case T_TOTAL:
		return pg_of_ns("coalesce(sum(count), 0)", ns);
	case T_OBJECTS:
		return pg_value("SELECT count(*) FROM %s", space);
	case T_TOKENS:
		return pg_value("SELECT count(*) FROM %s_tokens", space);
	}
	return NAN;
}

/* ---------------------------------------------------------- own servers */

static struct redis_server own_redis;
static struct pg_server own_pg;
static bool own_running;

static void redis_own_up(void)
{
	memset(&own_redis, 0, sizeof(own_redis));
	cr_assert_eq(redis_server_start(&own_redis, 5000), 0, "redis-server: %s", own_redis.err);
}

static void redis_own_opts(char *out, size_t len)
{
	snprintf(out, len, "{\"port\": %d, \"timeout_ms\": %d, \"prefix\": \"%s\"}",
		 own_redis.port, cur->own_timeout_ms, space);
}

static int redis_own_pause(bool pause)
{
	return pause ? redis_server_pause(&own_redis) : redis_server_resume(&own_redis);
}

static int redis_own_gone(void)
{
	return redis_server_kill(&own_redis);
}

static int redis_own_back(void)
{
	int rc = redis_server_restart(&own_redis, 5000);

	cr_assert_eq(rc, 0, "%s", own_redis.err);
	return rc;
}

static void redis_own_down(void)
{
	redis_server_stop(&own_redis, 2000);
}

static void pg_own_up(void)
{
	const char *tpl = getenv(ENV_PG_TPL);

	cr_assert(tpl && *tpl, "no template cluster");
	memset(&own_pg, 0, sizeof(own_pg));
	cr_assert_eq(pg_server_create(&own_pg, tpl), 0, "%s", own_pg.err);
	cr_assert_eq(pg_server_start(&own_pg, 20000), 0, "%s", own_pg.err);
}

static void pg_own_opts(char *out, size_t len)
{
	snprintf(out, len, "{\"conninfo\": \"%s\", \"table\": \"%s\", \"timeout_ms\": %d}",
		 own_pg.conninfo, space, cur->own_timeout_ms);
}

static int pg_own_pause(bool pause)
{
	return pause ? pg_server_pause(&own_pg) : pg_server_resume(&own_pg);
}

static int pg_own_gone(void)
{
	return pg_server_stop(&own_pg, 5000);
}

static int pg_own_back(void)
{
	int rc = pg_server_start(&own_pg, 20000);

	cr_assert_eq(rc, 0, "%s", own_pg.err);
	return rc;
}

static void pg_own_down(void)
{
	pg_server_destroy(&own_pg);
}

/* ---------------------------------------------------------- local */

static void local_opts(char *out, size_t len)
{
	snprintf(out, len, "{}");
}

/* ---------------------------------------------------------- the table */

const struct store redis_store = {
	.name = "redis", .ops = &redis_strategy,
	.opts = redis_opts, .dead_opts = redis_dead_opts,
	.bad_opts = "{\"bogus\": 1}", .bad_opts_says = "bogus: unknown option",
	.refusal = "not connected",
	.look = redis_look, .tally = redis_tally,
	.remote = true, .dups_in_order = true,
	.says_size0 = "window size 0", .says_not_finite = "not finite",
	.own_up = redis_own_up, .own_opts = redis_own_opts, .own_pause = redis_own_pause,
	.own_gone = redis_own_gone, .own_back = redis_own_back, .own_down = redis_own_down,
	.own_timeout_ms = 100, .early_s = 0.01, .notice_s = 0.5, .reconnect_s = 5,
	.lost_says = "connection lost",
};

const struct store cluster_store = {
	.name = "redis_cluster", .ops = &redis_strategy,
	.opts = cluster_opts, .dead_opts = cluster_dead_opts,
	.bad_opts = "{\"cluster_nodes\": []}",
	.bad_opts_says = "cluster_nodes: expected an array of 1 to",
	.refusal = "not connected", .refusal_why = ":1",
	.look = redis_look, .tally = redis_tally,
	.remote = true, .dups_in_order = true,
	.says_size0 = "window size 0", .says_not_finite = "not finite",
};

const struct store pg_store = {
	.name = "postgres", .ops = &postgres_strategy,
	.opts = pg_opts, .dead_opts = pg_dead_opts,
	.bad_opts = "{\"colour\": 1}", .bad_opts_says = "colour",
	.refusal = "not connected", .refusal_why = "refused",
	.look = pg_look, .tally = pg_tally,
	.remote = true, .store_clock = true, .keeps_empty_reservation = true,
	.may_take_while_away = true, .destroy_fails_the_next = true, .key_max = 2048,
	.size_asked_twice_once = true,
	.says_size0 = "window size out of range", .says_not_finite = "not a finite number",
	.own_up = pg_own_up, .own_opts = pg_own_opts, .own_pause = pg_own_pause,
	.own_gone = pg_own_gone, .own_back = pg_own_back, .own_down = pg_own_down,
	.own_timeout_ms = 300, .early_s = 0.02, .notice_s = 2, .reconnect_s = 6,
	.durable = true, .timeout_says_only = true, .lost_says = "terminating connection",
	.resend_may_wait = true,
};

const struct store local_store = {
	.name = "local", .ops = &local_strategy,
	.opts = local_opts, .dead_opts = local_opts,
	.bad_opts = "{\"port\": 1}", .bad_opts_says = "the local strategy takes no strategy_opts",
	.refusal = "the local strategy keeps no central store",
};

void store_on(const struct store *st, const char *name)
{
	cur = st;
	/* a table name, "<name>_tokens" too: at most 63 bytes */
	cr_assert_leq(strlen(name), 56, "a case name is a table name: %s", name);
	snprintf(space, sizeof(space), "%s", name);
	if (st == &redis_store)
		redis_env(ENV_REDIS);
	else if (st == &cluster_store)
		redis_env(ENV_CLUSTER);
	else if (st == &pg_store)
		cr_assert((pg_conninfo = getenv(ENV_PG)) && *pg_conninfo,
			  "no PostgreSQL server (see the runner's output)");
	st_setup(st->ops);
}

void store_off(void)
{
	st_teardown();
	look_close();
	if (own_running)
		cur->own_down();
	own_running = false;
}

/* An instance in the case's space, ready. */
struct strategy *store_mk(void)
{
	char json[512];

	cur->opts(json, sizeof(json));
	return st_create_ready(10, "%s", json);
}

/* The case's own server started, and an instance on it, ready. */
struct strategy *store_own_mk(void)
{
	char json[512];

	cur->own_up();
	own_running = true;
	look_close();
	if (cur == &redis_store) {
		rsrv[0] = own_redis;
		nrsrv = 1;
	} else {
		pg_conninfo = own_pg.conninfo;
	}
	cur->own_opts(json, sizeof(json));
	return st_create_ready(6, "%s", json);
}

void store_servers_start(struct store_servers *sv, const char *who)
{
	char ports[128];

	memset(sv, 0, sizeof(*sv));
	if (!redis_server_available()) {
		fprintf(stderr, "%s: redis-server is not installed\n", who);
	} else if (redis_server_start(&sv->redis, 10000) < 0) {
		fprintf(stderr, "%s: redis-server: %s\n", who, sv->redis.err);
	} else {
		sv->have_redis = true;
		snprintf(ports, sizeof(ports), "%d", sv->redis.port);
		setenv(ENV_REDIS, ports, 1);
		if (redis_cluster_start(&sv->cluster, 3, 0, 30000) < 0) {
			fprintf(stderr, "%s: cluster: %s\n", who, sv->cluster.err);
		} else {
			sv->have_cluster = true;
			snprintf(ports, sizeof(ports), "%d,%d,%d", sv->cluster.srv[0].port,
				 sv->cluster.srv[1].port, sv->cluster.srv[2].port);
			setenv(ENV_CLUSTER, ports, 1);
		}
	}
	if (pg_server_start_shared(&sv->tpl, &sv->pg, who) == 0) {
		setenv(ENV_PG, sv->pg.conninfo, 1);
		setenv(ENV_PG_TPL, sv->tpl.data, 1);
	}
}

void store_servers_stop(struct store_servers *sv)
{
	pg_server_destroy(&sv->pg);
	pg_server_destroy(&sv->tpl);
	if (sv->have_cluster)
		redis_cluster_stop(&sv->cluster);
	if (sv->have_redis)
		redis_server_stop(&sv->redis, 2000);
}

int store_main(int argc, char *argv[], const char *who)
{
	struct criterion_test_set *tests = criterion_initialize();
	struct store_servers sv;
	int result = 0;

	if (criterion_handle_args(argc, argv, true)) {
		store_servers_start(&sv, who);
		result = !criterion_run_all_tests(tests);
		store_servers_stop(&sv);
	}
	criterion_finalize(tests);
	return result;
}
