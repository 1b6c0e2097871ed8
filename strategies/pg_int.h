/*
 * pg_int.h - what the files of the PostgreSQL strategy share, and nobody
 * else (the sync loop knows strategy.h only). One job per file, in levels:
 *
 *   1  postgres.c     the ops table, create / destroy, the operations
 *                     (checked, planned: a push sorted, merged and cut in
 *                     chunks) handed to the queue
 *   2  pg_opts.c      strategy_opts, the names derived from the table's
 *      pg_queue.c     the operations' FIFO and the dispatch (one at a time,
 *                     a push's chunks over every ready connection); every
 *                     libev callback of the strategy enters here
 *   3  pg_pool.c      a connection: set up, its results read, lost
 *   4  pg_send.c      the statements of an operation queued in a pipeline
 *      pg_result.c    a result checked and read into its operation
 *   5  pg_op.c        an operation made, failed, delivered, freed
 *   6  pg_sql.c       the SQL text: statements, set-up, templates
 *   7  pg_value.c     binary parameters and results (most inline, below),
 *                     error text, token hashes; pg_ev.c the libev adapter
 *
 * A file calls only files of the levels below its own: no circle (the
 * libev callbacks, which start everything, live on level 2).
 */
#ifndef PG_INT_H
#define PG_INT_H

#include <ev.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "strategies/pg_ev.h"
#include "strategies/store.h"
#include "strategies/strategy.h"

#define PG_QUEUE_MAX         64       /* operations queued or in flight */
#define PG_POOL_MAX          8
#define PG_CONN_DEPTH        2        /* push chunks in flight per connection */
#define PG_IDENT_MAX         63       /* NAMEDATALEN - 1 */
#define PG_SEEN_MAX          64       /* namespaces remembered for the purge */
#define PG_SEEN_SIZES        16       /* window sizes per namespace */

/* Type OIDs, fixed in the system catalog (pg_type.dat). */
enum pg_oid {
	PG_OID_BOOL = 16,
	PG_OID_BYTEA = 17,
	PG_OID_INT8 = 20,
	PG_OID_INT4 = 23,
	PG_OID_TEXT = 25,
	PG_OID_FLOAT8 = 701,
	PG_OID_BYTEA_ARRAY = 1001,
	PG_OID_INT4_ARRAY = 1007,
	PG_OID_TEXT_ARRAY = 1009,
	PG_OID_INT8_ARRAY = 1016,
	PG_OID_FLOAT8_ARRAY = 1022,
};

/* The prepared statements (pg_sql.c). "@T@" is replaced by the quoted
 * table name, nothing else is ever put into SQL text. */
enum pg_stmt {
	PG_STMT_UPSERT = 0,
	PG_STMT_READ,
	PG_STMT_FETCH,
	PG_STMT_PURGE,
	PG_STMT_TOKEN,
	PG_STMT_UPSERT_TOK,
	PG_STMT_PURGE_TOK,
	PG_STMT_ADMIT_ROW,
	PG_STMT_ADMIT,
	PG_STMT_ADMIT_TOK,
	PG_STMT_GCRA,
	PG_STMT_GCRA_TOK,
	PG_STMT_LEASE_ROW,
	PG_STMT_LEASE,
	PG_STMT_NODES,
	PG_STMT_FORGET,
	PG_STMT_LIMIT_SET,
	PG_STMT_LIMITS_READ,
	PG_STMT_COUNT
};

#define PG_PARAMS_MAX 12          /* parameters of one statement */

struct pg_stmt_def {
	const char *name;
	const char *sql;
	int nparams;
	Oid types[PG_PARAMS_MAX];
};

enum pg_state {
	PG_ST_DOWN = 0,   /* no connection; the reconnect timer is armed */
	PG_ST_CONNECTING, /* PQconnectPoll() steps */
	PG_ST_SETUP,      /* probe / create table / prepare */
	PG_ST_READY,      /* usable */
	PG_ST_COUNT
};

enum pg_op_kind {
	PG_OP_PUSH = 0, /* push_diffs */
	PG_OP_GET,      /* get_window: a push of one, read only */
	PG_OP_FETCH,    /* get_counters */
	PG_OP_PURGE,    /* purge */
	PG_OP_MAINT,    /* periodic purge, no callback */
	PG_OP_PROBE,    /* set-up of one connection: does the table exist? */
	PG_OP_CREATE,   /* set-up: create it if not, prepare statements */
	PG_OP_ADMIT,    /* admit: one transaction per admission */
	PG_OP_NODES,    /* heartbeat */
	PG_OP_FORGET,   /* forget: its token, then rl_forget, one transaction */
	PG_OP_LIMIT_SET,   /* limit_set: rl_limit_set */
	PG_OP_LIMITS_READ, /* limits_read: rl_limits_read */
	PG_OP_COUNT
};

/* A growable byte buffer for binary parameters. */
struct pg_buf {
	char *p;
	size_t len;
	size_t cap;
	bool oom;
};

/* One distinct counter of a push: members order[first .. first+nmemb). */
struct pg_group {
	const struct strategy_counter *c;
	size_t first;
	size_t nmemb;
	double diff;
	double spent, returned;   /* grants', merged */
	double total;
	bool reset;               /* its row is marked reset */
	bool got;                 /* a row came back */
	bool committed;           /* its chunk's transaction committed */
};

/* One statement (and transaction) of a push: groups idx[lo..hi) of the
 * upsert or the read list. */
struct pg_chunk {
	bool upsert;
	bool tok;                 /* an upsert of a push with a token */
	bool got_flag;            /* tok: the token statement's result came */
	size_t lo;
	size_t hi;
	bool got_result;          /* its rows were read */
	bool failed;
	bool done;                /* its Sync arrived, or never will */
};

struct pg;

struct pg_op {
	struct store_op base;     /* done queue, silence timer (store.h) */
	struct pg_op *prev;
	struct pg_op *next;
	struct pg *s;
	enum pg_op_kind kind;
	bool queued;              /* in the FIFO */
	int status;               /* its outcome, once finished */
	strategy_done_cb done_cb;
	strategy_rows_cb rows_cb;
	void *arg;
	unsigned nerrors;         /* failures seen */
	bool failed;
	char err[STRATEGY_ERR_MAX];

	/* Everything but PUSH and GET: sent whole on one connection. */
	bool started;
	bool ended;               /* last Sync arrived, or its connection died */
	size_t nstmts;            /* statements sent */
	size_t nres;              /* statement results received */
	size_t nsyncs;            /* Syncs sent */
	size_t nsynced;           /* Syncs received */

	/* PUSH, GET: chunks spread over the pool. */
	bool has_token;
	size_t token_len;
	char token[STRATEGY_TOKEN_MAX];
	struct strategy_counter *batch;
	size_t n;
	struct strategy_counter **order;
	struct pg_group *groups;
	size_t ngroups;
	size_t *up;               /* groups with diff != 0 */
	size_t nup;
	size_t *rd;               /* groups to read */
	size_t nrd;
	struct pg_chunk *chunks;
	size_t nchunks;
	size_t next_chunk;        /* first one not sent */
	size_t chunks_done;

	/* NODES ("now" is the server's clock) */
	char node[64];
	size_t node_len;
	double ttl;
	unsigned *active;

	/* ADMIT */
	struct strategy_admit *admits;
	uint64_t *adm_ids;        /* with a token: each admission's token id */

	/* FORGET (and its ns, sizes, starts below) */
	char *key;
	size_t key_len;
	double *removed;

	/* LIMIT_SET (its key above; ns: the overrides' namespace), LIMITS_READ */
	uint32_t lim_size;
	double lim;               /* < 0: remove */
	uint64_t most;
	bool *full;
	uint64_t have;
	uint64_t *version;
	bool *changed;

	/* FETCH, PURGE, FORGET */
	char *ns;
	size_t ns_len;
	int32_t *sizes;
	int64_t *starts;          /* FETCH, FORGET: window starts; PURGE: cutoffs */
	size_t nw;
	PGresult *res;            /* FETCH: rows, freed after the callback */
	struct strategy_row *rows;
	size_t nrows;
};

/* One connection of the pool. */
struct pg_conn {
	struct pg *s;
	enum pg_state state;
	PGconn *conn;
	struct pg_ev ev;
	ev_timer reconnect;       /* DOWN: next attempt */
	ev_timer conn_timer;      /* bounds CONNECTING + SETUP */
	struct store_backoff backoff; /* next reconnect delay */
	bool table_present;
	struct pg_op *setup;      /* PROBE or CREATE in flight */
	struct pg_op *op;         /* the active operation, while working for it */
	size_t fifo[PG_CONN_DEPTH]; /* PUSH: its chunks in flight, oldest first */
	size_t nfifo;
};

/* A namespace and its window sizes, for the periodic purge. */
struct pg_seen {
	char *ns;
	size_t ns_len;
	uint32_t sizes[PG_SEEN_SIZES];
	size_t nsizes;
};

struct pg {
	struct store_core core;   /* kick, done queue, callback guard (store.h) */
	struct ev_loop *loop;
	struct pg_conn conns[PG_POOL_MAX];
	size_t nconns;
	ev_timer maint;           /* periodic purge */
	double timeout;           /* s */
	double purge_interval;    /* s, 0 = never */
	bool maint_pending;
	struct pg_op *active;     /* the operation being executed */
	struct pg_op *head;       /* waiting operations, FIFO */
	struct pg_op *tail;
	size_t nops;              /* user and maintenance ops: active + waiting */
	struct pg_seen seen[PG_SEEN_MAX];
	size_t nseen;
	char *conninfo;
	char table_name[PG_IDENT_MAX + 1];    /* unquoted, for the lock */
	char table_quoted[PG_IDENT_MAX + 3];
	char tokens_quoted[PG_IDENT_MAX + 3]; /* "<table>_tokens" */
	char *sql[PG_STMT_COUNT];
	char *sql_table;
	char *sql_reserved;
	char *sql_reset;
	char *sql_index;
	char *sql_tokens;
	char *sql_tokens_index;
	struct pg_buf par[PG_PARAMS_MAX]; /* scratch for one statement's parameters */
	struct pg_buf tokpar;     /* scratch for a chunk's token */
	char last_err[STRATEGY_ERR_MAX];
};

/* ---- postgres.c ---- */

static inline struct pg *pg_of(struct strategy *st)
{
	return (struct pg *)(void *)st;
}

/* ---- pg_opts.c ---- */

struct pg_opts {
	const char *conninfo;
	const char *table;
	long long timeout_ms;
	long long purge_s;
	long long pool_size;
};

/* The options of opts_json (NULL or "" = defaults) into *o, whose
 * strings point into *root (the caller decrefs it, also on failure).
 * Returns 0, or -1 with err. */
int pg_opts_load(const char *opts_json, struct pg_opts *o, json_t **root, char *err,
		 size_t errlen);
/* The quoted name of a relation beside the table (table + suffix), made
 * to fit in PG_IDENT_MAX for any valid table name. */
void pg_derived_name(const char *table, const char *suffix, char *out, size_t outlen);

/* ---- pg_queue.c ---- */

/* Queues a validated operation (API calls only). Returns 0, or -1 with
 * errstr set and op freed. */
int pg_submit(struct pg *s, struct pg_op *op, char errstr[STRATEGY_ERR_MAX]);
/* Ends an operation: it leaves the queue (or the active slot), its timer
 * stops and it joins the done queue (store.h). No connection may still
 * work for it. */
void pg_op_finish(struct pg *s, struct pg_op *op, int status);
/* Remembers (ns, size) for the periodic purge; silently bounded. */
void pg_seen_note(struct pg *s, const char *ns, size_t ns_len, uint32_t size);
/* Starts a connection attempt (from create() or the reconnect timer). */
void pg_connect_start(struct pg_conn *c);
/* The callbacks create() sets: a connection's reconnect and set-up
 * timers, the kick (store.h), the periodic purge. */
void pg_on_reconnect(struct ev_loop *loop, ev_timer *w, int revents);
void pg_on_conn_timeout(struct ev_loop *loop, ev_timer *w, int revents);
void pg_on_kick(struct store_core *c);
void pg_on_maint(struct ev_loop *loop, ev_timer *w, int revents);

/* ---- pg_pool.c ---- */

/* Tears c down and arms its reconnect timer. What it carried for the
 * active operation fails with why (push chunks in flight: their outcome is
 * unknown, they are not retried); pg_dispatch() finishes the operation.
 * No user callback runs. */
void pg_conn_lost(struct pg_conn *c, const char *why);
/* CONNECTION_OK: non-blocking, pipeline mode, then the set-up. */
void pg_connected(struct pg_conn *c);
/* Reads every complete result of c (see there). No user callback runs. */
void pg_read_results(struct pg_conn *c);
bool pg_any_ready(const struct pg *s);
bool pg_all_down(const struct pg *s);

/* ---- pg_send.c: each returns 1 (statements queued in the pipeline), 0
 * (nothing to send: the operation is complete), -1 (libpq refused: the
 * connection is unusable) or -2 (out of memory before anything was
 * queued) ---- */

/* Sends one chunk of a push, and a Sync: its own transaction. */
int pg_send_chunk(struct pg_conn *c, struct pg_op *op, const struct pg_chunk *ch);
/* Sends a whole operation (not a push) and its Sync(s). */
int pg_op_send(struct pg_conn *c, struct pg_op *op);
/* Flushes what libpq holds; watches for writability while some is left.
 * Returns 0 or -1 (connection broken). */
int pg_flush(struct pg_conn *c);

/* ---- pg_result.c ---- */

/* One statement's result for a whole operation (set-up included). Takes r. */
void pg_on_result(struct pg_conn *c, struct pg_op *op, PGresult *r);
/* A result on a connection working for a push, for its oldest chunk in
 * flight. Takes r. Returns 0, or -1 when no chunk is in flight. */
int pg_on_chunk_result(struct pg_conn *c, PGresult *r);

/* ---- pg_op.c ---- */

struct pg_op *pg_op_new(struct pg *s, enum pg_op_kind kind);
void pg_op_free(struct pg_op *op);
/* Counts a failure and records the first one's message. */
void pg_op_fail(struct pg_op *op, const char *prefix, const char *msg);
/* A connection failure seen by an operation (timeouts reported as such). */
void pg_op_fail_conn(struct pg_op *op, const char *err);
/* Runs the callback of a finished operation, then frees it (store.h). */
void pg_op_deliver(struct store_op *b);

static inline bool pg_op_is_push(const struct pg_op *op)
{
	return op->kind == PG_OP_PUSH || op->kind == PG_OP_GET;
}

/* Statements per admission: [rl_token,] rl_admit_row, rl_admit[_tok]. */
static inline size_t pg_admit_stmts(const struct pg_op *op)
{
	return op->has_token ? 3 : 2;
}

/* The store just answered: every operation's silence restarts. */
static inline void pg_progress(struct pg *s)
{
	store_activity(&s->core);
}

/* ---- pg_sql.c ---- */

extern const struct pg_stmt_def pg_stmts[PG_STMT_COUNT];
/* The set-up: does the table exist ($1, $2: the quoted names)? The lock
 * taken before creating; the templates of what is created. */
extern const char pg_sql_probe[];
extern const char pg_sql_lock[];
extern const char pg_tpl_table[];
extern const char pg_tpl_reserved[];
extern const char pg_tpl_reset[];
extern const char pg_tpl_index[];
extern const char pg_tpl_tokens[];
extern const char pg_tpl_tokens_index[];
/* Replaces every "@T@" with the table, "@I@" with its index, "@K@" with the
 * tokens table and "@J@" with its index (names[0..3], quoted). Returns a
 * malloc'd string or NULL. */
char *pg_sql_fill(const char *tpl, const char *const names[4]);

/* ---- pg_value.c ---- */

/* Copies the first line of msg (without a "ERROR:  " style severity,
 * trailing blanks trimmed) after prefix into dst. */
void pg_err_set(char dst[STRATEGY_ERR_MAX], const char *prefix, const char *msg);
/* The error of a result: its primary message, else the whole message,
 * else the connection's. */
void pg_err_result(char dst[STRATEGY_ERR_MAX], const PGresult *r, PGconn *conn);
/* Checks that r has exactly ncols binary columns of the given types.
 * Returns 0 or -1. */
int pg_check_cols(const PGresult *r, const Oid *types, int ncols);
/* FNV-1a 64 over bytes, a big-endian u64, a counter's identity: the
 * tokens' ids (stable across nodes and versions). */
void pg_hash_bytes(uint64_t *h, const void *p, size_t n);
void pg_hash_u64(uint64_t *h, uint64_t v);
void pg_hash_counter(uint64_t *h, const struct strategy_counter *c);

/* What runs per value, inline: the parameter buffers, binary arrays,
 * reading a result's values, the order of counters' identities. */

static inline void pg_buf_reserve(struct pg_buf *b, size_t more)
{
	size_t cap;
	char *p;

	if (b->oom || b->len + more <= b->cap)
		return;
	cap = b->cap ? b->cap : 4096;
	while (cap < b->len + more)
		cap *= 2;
	p = realloc(b->p, cap);
	if (!p) {
		b->oom = true;
		return;
	}
	b->p = p;
	b->cap = cap;
}

static inline void pg_buf_put(struct pg_buf *b, const void *d, size_t n)
{
	pg_buf_reserve(b, n);
	if (b->oom)
		return;
	if (n)
		memcpy(b->p + b->len, d, n);
	b->len += n;
}

static inline void pg_buf_u32(struct pg_buf *b, uint32_t v)
{
	unsigned char u[4] = { (unsigned char)(v >> 24), (unsigned char)(v >> 16),
			       (unsigned char)(v >> 8), (unsigned char)v };

	pg_buf_put(b, u, 4);
}

static inline void pg_buf_u64(struct pg_buf *b, uint64_t v)
{
	pg_buf_u32(b, (uint32_t)(v >> 32));
	pg_buf_u32(b, (uint32_t)v);
}

static inline void pg_buf_f64(struct pg_buf *b, double d)
{
	uint64_t v;

	memcpy(&v, &d, sizeof(v));
	pg_buf_u64(b, v);
}

/*
 * Binary array parameter (array_recv), one dimension, no NULLs:
 *
 *   +--------+--------+----------+---------+---------+
 *   | ndim=1 | flags=0| elem oid | nelems  | lbound=1|   int32 each, big endian
 *   +--------+--------+----------+---------+---------+
 *   then per element: | int32 length | length bytes |
 *
 * An empty array is ndim=0, flags=0, elem oid and nothing else.
 */
static inline void pg_array_begin(struct pg_buf *b, Oid elem, size_t n)
{
	b->len = 0;
	b->oom = false;
	pg_buf_u32(b, n ? 1 : 0);
	pg_buf_u32(b, 0);
	pg_buf_u32(b, (uint32_t)elem);
	if (n) {
		pg_buf_u32(b, (uint32_t)n);
		pg_buf_u32(b, 1);
	}
}

static inline void pg_array_bytes(struct pg_buf *b, const char *p, size_t n)
{
	pg_buf_u32(b, (uint32_t)n);
	pg_buf_put(b, p, n);
}

static inline void pg_array_i32(struct pg_buf *b, int32_t v)
{
	pg_buf_u32(b, 4);
	pg_buf_u32(b, (uint32_t)v);
}

static inline void pg_array_i64(struct pg_buf *b, int64_t v)
{
	pg_buf_u32(b, 8);
	pg_buf_u64(b, (uint64_t)v);
}

static inline void pg_array_f64(struct pg_buf *b, double v)
{
	pg_buf_u32(b, 8);
	pg_buf_f64(b, v);
}

static inline uint32_t pg_get_u32(const char *p)
{
	const unsigned char *u = (const unsigned char *)p;

	return (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 | u[3];
}

static inline uint64_t pg_get_u64(const char *p)
{
	return (uint64_t)pg_get_u32(p) << 32 | pg_get_u32(p + 4);
}

static inline double pg_get_f64(const char *p)
{
	uint64_t v = pg_get_u64(p);
	double d;

	memcpy(&d, &v, sizeof(d));
	return d;
}

/* A non-NULL value of exactly len bytes (len < 0: any length). */
static inline const char *pg_value(const PGresult *r, int row, int col, int len, int *got)
{
	int n;

	if (PQgetisnull(r, row, col))
		return NULL;
	n = PQgetlength(r, row, col);
	if (n < 0 || (len >= 0 && n != len))
		return NULL;
	if (got)
		*got = n;
	return PQgetvalue(r, row, col);
}

/* Orders bytes by content, then by length. */
static inline int pg_cmp_bytes(const char *a, size_t an, const char *b, size_t bn)
{
	int c;

	if (a == b && an == bn)
		return 0;
	c = memcmp(a, b, an < bn ? an : bn);
	if (c)
		return c;
	return an < bn ? -1 : an > bn;
}

/* The order of a push: namespace, size, start, key. */
static inline int pg_cmp_ident(const char *ns, size_t ns_len, uint32_t size, int64_t start,
			       const char *key, size_t key_len, const struct strategy_counter *b)
{
	int c = pg_cmp_bytes(ns, ns_len, b->ns, b->ns_len);

	if (c)
		return c;
	if (size != b->size)
		return size < b->size ? -1 : 1;
	if (start != b->start)
		return start < b->start ? -1 : 1;
	return pg_cmp_bytes(key, key_len, b->key, b->key_len);
}

#endif /* PG_INT_H */
