/*
 * test_store_contract.c - the contract of strategies/strategy.h, written
 * once and run against every store's ops table: Redis (one server), Redis
 * Cluster (three masters), PostgreSQL, and the local strategy where it
 * applies (its ops table, and refusing at once what it cannot do).
 *
 * A case is a function of the store's fixture (struct store): how to make
 * an instance, and how to look into the store behind the strategy's back
 * (a counter's count and reservation, how many counters, records and
 * tokens it holds), with the few ways stores may differ that strategy.h
 * leaves open, each named in the fixture (the totals of a counter twice in
 * one batch, the heartbeat's clock, an empty reservation, an operation
 * taken while reconnecting, the longest key, a window size asked twice,
 * the words of a refusal). CONTRACT() defines one Criterion test per
 * (case, store): contract_redis::push_returns_totals,
 * contract_postgres::push_returns_totals, ...; CONTRACT_ALL() adds the
 * local strategy (contract_local::...).
 *
 * One server per store for the whole binary, started by main() before
 * Criterion runs the tests (each in its own process: they find the
 * servers through ST_* environment variables); each case has its own
 * space on it: its own key prefix (Redis) or table (PostgreSQL), named
 * after the case; the cases that pause or stop a server start one of
 * their own (Redis, PostgreSQL). What only one store does (key layout,
 * scripts, NOSCRIPT, Cluster redirections and failover, tables and SQL,
 * the pool, what a server does with work sent before it stopped) is
 * tested in that store's file.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <ev.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "strategies/strategy.h"
#include "tests/lib/pg_server.h"
#include "tests/lib/redis_cluster.h"
#include "tests/lib/redis_server.h"
#include "tests/lib/storetest.h"

#define ENV_REDIS    "ST_REDIS_PORT"
#define ENV_CLUSTER  "ST_CLUSTER_PORTS"
#define ENV_PG       "ST_PG_CONNINFO"
#define ENV_PG_TPL   "ST_PG_TEMPLATE"

#define START60 1700000040          /* a 60 s window start */
#define NOW60   (START60 + 30)
#define TIMEOUT_MS 5000             /* timeouts are not what these cases test */

/* ------------------------------------------------------------------ */
/* Fixtures                                                           */
/* ------------------------------------------------------------------ */

enum tally { T_COUNTERS, T_TOTAL, T_OBJECTS, T_TOKENS };

struct store {
	const char *name;
	const struct strategy_ops *ops;
	/* Options of an instance in the case's space; of one whose store
	 * nobody answers. */
	void (*opts)(char *out, size_t len);
	void (*dead_opts)(char *out, size_t len);
	/* options create() and check_opts() refuse, and what they say */
	const char *bad_opts, *bad_opts_says;
	/* what a refusal while the store is away says, and why (NULL: not
	 * checked) */
	const char *refusal, *refusal_why;
	/* Straight from the store, in the case's space: a counter's count,
	 * or with reserved its reservation (NAN: none); a number (enum
	 * tally) of the counters of a namespace or the sum of their counts,
	 * of the records of any kind (Redis keys, rows of the table), of the
	 * tokens remembered. */
	double (*look)(bool reserved, const char *ns, const char *key, size_t key_len,
		       uint32_t size, int64_t start);
	double (*tally)(enum tally what, const char *ns);
	/* The ways stores may differ: */
	bool remote;                /* a central store: admit, heartbeat */
	bool dups_in_order;         /* a counter twice in a batch: each gets the running
				       total (else each the batch's final total) */
	bool store_clock;           /* heartbeats count with the store's clock */
	bool keeps_empty_reservation; /* a reservation back at 0 stays (else it is gone) */
	bool may_take_while_away;   /* an operation may be taken while reconnecting, then
				       fail in time (else refused at once) */
	bool destroy_fails_the_next; /* destroyed from a callback, the next operation
					fails (else it may have completed) */
	size_t key_max;             /* the longest key taken (0: no limit) */
	bool size_asked_twice_once; /* get_counters: a size asked twice answers once
				       (Redis answers its rows twice) */
	/* what a refusal of a window size 0, of a diff not finite says */
	const char *says_size0, *says_not_finite;
	/* A server of the case's own, for the cases that stop it (NULL: the
	 * store has none here): started; an instance on it with timeout_ms
	 * own_timeout_ms; paused (SIGSTOP) or resumed; gone (SIGKILL, or a
	 * fast shutdown) and back on its port; stopped and removed. */
	void (*own_up)(void);
	void (*own_opts)(char *out, size_t len);
	int (*own_pause)(bool pause);
	int (*own_gone)(void);
	int (*own_back)(void);
	void (*own_down)(void);
	int own_timeout_ms;
	double early_s;             /* a timeout may fire this much early (timer slack) */
	double notice_s;            /* the longest to see a server gone */
	double reconnect_s;         /* the longest to reconnect once it answers */
	bool durable;               /* counts survive the server going */
	bool timeout_says_only;     /* a timeout's error is "timeout", nothing more */
	const char *lost_says;      /* an operation in flight when the server went */
	bool resend_may_wait;       /* a resend after a timeout may wait on the stuck
				       push's locks past timeout_ms (else it goes through) */
};

static const struct store *f;       /* the store of the running test */
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
		 TIMEOUT_MS, space);
}

static void redis_dead_opts(char *out, size_t len)
{
	snprintf(out, len, "{\"port\": 1, \"timeout_ms\": 50}");
}

static void cluster_opts(char *out, size_t len)
{
	int n = snprintf(out, len, "{\"timeout_ms\": %d, \"prefix\": \"%s\", \"cluster_nodes\": [",
			 TIMEOUT_MS, space);

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
		 pg_conninfo, space, TIMEOUT_MS);
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
		 own_redis.port, f->own_timeout_ms, space);
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
		 own_pg.conninfo, space, f->own_timeout_ms);
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

static const struct store redis_store = {
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

static const struct store cluster_store = {
	.name = "redis_cluster", .ops = &redis_strategy,
	.opts = cluster_opts, .dead_opts = cluster_dead_opts,
	.bad_opts = "{\"cluster_nodes\": []}",
	.bad_opts_says = "cluster_nodes: expected an array of 1 to",
	.refusal = "not connected", .refusal_why = ":1",
	.look = redis_look, .tally = redis_tally,
	.remote = true, .dups_in_order = true,
	.says_size0 = "window size 0", .says_not_finite = "not finite",
};

static const struct store pg_store = {
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

static const struct store local_store = {
	.name = "local", .ops = &local_strategy,
	.opts = local_opts, .dead_opts = local_opts,
	.bad_opts = "{\"port\": 1}", .bad_opts_says = "the local strategy takes no strategy_opts",
	.refusal = "the local strategy keeps no central store",
};

static void on(const struct store *st, const char *name)
{
	f = st;
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

static void off(void)
{
	st_teardown();
	look_close();
	if (own_running)
		f->own_down();
	own_running = false;
}

TestSuite(contract_redis, .fini = off, .timeout = 60);
TestSuite(contract_redis_cluster, .fini = off, .timeout = 60);
TestSuite(contract_postgres, .fini = off, .timeout = 60);
TestSuite(contract_local, .fini = off, .timeout = 60);

#define ON(suite, store, c)                                                    \
	Test(suite, c) {                                                       \
		on(&store, #c);                                                \
		c();                                                           \
	}

/* A case of the stores that keep counters (all but local). */
#define CONTRACT(c)                                                            \
	static void c(void);                                                   \
	ON(contract_redis, redis_store, c)                                     \
	ON(contract_redis_cluster, cluster_store, c)                           \
	ON(contract_postgres, pg_store, c)                                     \
	static void c(void)

/* A case of the stores that have a server of its own here (Redis,
 * PostgreSQL: a cluster is not stopped whole). */
#define CONTRACT_OWN(c)                                                        \
	static void c(void);                                                   \
	ON(contract_redis, redis_store, c)                                     \
	ON(contract_postgres, pg_store, c)                                     \
	static void c(void)

/* A case of every store, local included. */
#define CONTRACT_ALL(c)                                                        \
	static void c(void);                                                   \
	ON(contract_redis, redis_store, c)                                     \
	ON(contract_redis_cluster, cluster_store, c)                           \
	ON(contract_postgres, pg_store, c)                                     \
	ON(contract_local, local_store, c)                                     \
	static void c(void)

/* An instance in the case's space, ready. */
static struct strategy *mk(void)
{
	char json[512];

	f->opts(json, sizeof(json));
	return st_create_ready(10, "%s", json);
}

static const struct strategy_ops *ops(void)
{
	return f->ops;
}

/* The case's own server started, and an instance on it, ready. */
static struct strategy *own_mk(void)
{
	char json[512];

	f->own_up();
	own_running = true;
	look_close();
	if (f == &redis_store) {
		rsrv[0] = own_redis;
		nrsrv = 1;
	} else {
		pg_conninfo = own_pg.conninfo;
	}
	f->own_opts(json, sizeof(json));
	return st_create_ready(6, "%s", json);
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
	struct strategy *s = mk();
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
	struct strategy *s = mk();
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
	struct strategy *s = mk();
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
	struct strategy *s = mk();
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
	struct strategy *n1 = mk(), *n2 = mk();
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
	struct strategy *s = mk();
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
	struct strategy *s = mk();
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
	struct strategy *n1 = mk(), *n2 = mk();
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
	struct strategy *s = mk();
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
	struct strategy *s = mk();
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
	struct strategy *s = mk();
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
	struct strategy *s = mk();
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
	struct strategy *s = mk();
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
	struct strategy *s = mk();
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
	struct strategy *s = mk();
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

	s = mk();
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
	struct strategy *s = mk();
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
	struct strategy *s = mk();
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
	struct strategy *s = mk();
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
	struct strategy *s = mk();
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
	struct strategy *s = mk();
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
	struct strategy *s = mk();
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
	struct strategy *s = mk();
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
	struct strategy *s = mk();
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
	struct strategy *s = mk();
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
	struct strategy *s = mk();
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
	struct strategy *s = mk();
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
	struct strategy *s = mk();
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
	struct strategy *s = mk();
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
	struct strategy *s = own_mk();
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
	struct strategy *s = own_mk();
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
	struct strategy *s = own_mk();
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
	struct criterion_test_set *tests = criterion_initialize();
	struct redis_server redis = { 0 };
	struct redis_cluster cluster = { 0 };
	struct pg_server tpl = { 0 }, pg = { 0 };
	bool have_cluster = false;
	char ports[128];
	int result = 0;

	if (criterion_handle_args(argc, argv, true)) {
		if (!redis_server_available())
			fprintf(stderr, "test_store_contract: redis-server is not installed\n");
		else if (redis_server_start(&redis, 10000) < 0)
			fprintf(stderr, "test_store_contract: redis-server: %s\n", redis.err);
		else {
			snprintf(ports, sizeof(ports), "%d", redis.port);
			setenv(ENV_REDIS, ports, 1);
			if (redis_cluster_start(&cluster, 3, 0, 30000) < 0) {
				fprintf(stderr, "test_store_contract: cluster: %s\n", cluster.err);
			} else {
				have_cluster = true;
				snprintf(ports, sizeof(ports), "%d,%d,%d", cluster.srv[0].port,
					 cluster.srv[1].port, cluster.srv[2].port);
				setenv(ENV_CLUSTER, ports, 1);
			}
		}
		if (pg_server_start_shared(&tpl, &pg, "test_store_contract") == 0) {
			setenv(ENV_PG, pg.conninfo, 1);
			setenv(ENV_PG_TPL, tpl.data, 1);
		}
		result = !criterion_run_all_tests(tests);
	}
	pg_server_destroy(&pg);
	pg_server_destroy(&tpl);
	if (have_cluster)
		redis_cluster_stop(&cluster);
	redis_server_stop(&redis, 2000);
	criterion_finalize(tests);
	return result;
}
