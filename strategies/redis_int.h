/*
 * redis_int.h - what the files of the Redis strategy share, and nobody else
 * (the sync loop knows strategy.h only). One job per file, in levels:
 *
 *   1  redis.c           the ops table, create / destroy, and the
 *                        operations of one call or a fixed set (heartbeat,
 *                        get_counters, get_window, purge)
 *   2  redis_write.c     push_diffs and admit: a batch cut into script
 *                        calls, with their tokens
 *      redis_opts.c      strategy_opts
 *      redis_single.c    the modes: one server (host/port or socket);
 *      redis_cluster.c   Redis Cluster (the slot map from CLUSTER SLOTS,
 *      redis_sentinel.c  routing, MOVED / ASK / TRYAGAIN); Sentinel (the
 *                        master a quorum of the sentinels names,
 *                        +switch-master, moving to the new master)
 *   3  redis_call.c      the call machinery: an operation's life, each
 *                        call sent where the mode routes it, its reply
 *                        (NOSCRIPT, redirections), WAIT, TRYAGAIN, the
 *                        silence timeout
 *   4  redis_conn.c      one connection to one server (connect, handshake,
 *                        reconnect with backoff, close) and the probe: one
 *                        question asked of a list of servers in turn
 *   5  redis_resp.c      the text: RESP commands, the key layout, CRC16
 *      redis_script.c    key slots, replies' numbers; the Lua scripts
 *
 * A file calls only files of the levels below its own: no circle. Upward,
 * only through what is handed down: the mode's ops (struct
 * redis_mode_ops: routing, redirections, a connection down), an
 * operation's kind (struct redis_kind: what its replies mean).
 *
 * Every command of an operation is a `struct redis_call`, routed by the
 * mode to the connection that serves its key's slot: the one server
 * (single, sentinel) or the master owning the slot (cluster). A reply
 * comes back through redis_call.c, which follows redirections and
 * NOSCRIPT before the operation's kind sees it.
 */
#ifndef REDIS_INT_H
#define REDIS_INT_H

#include <arpa/inet.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "strategies/store.h"
#include "strategies/strategy.h"

#define REDIS_SLOTS          16384
#define REDIS_SEEDS_MAX      16      /* cluster_nodes, sentinel nodes */
#define REDIS_MASTERS_MAX    128     /* masters of a cluster */
#define REDIS_MASTER_NAME_MAX 64
#define REDIS_PREFIX_MAX     64
#define REDIS_BACKOFF_MIN_MS 50
#define REDIS_BACKOFF_MAX_MS 2000
#define REDIS_REDIRECTS_MAX  16      /* MOVED / ASK followed per call */
#define REDIS_TRYAGAIN_MS    10      /* wait before a TRYAGAIN call goes again */
#define REDIS_BUCKETS        64      /* hashes per (namespace, window): redis_resp.c */
#define REDIS_TTL_SLACK      30      /* seconds added to 2 * size */
#define REDIS_DBL_MAX_LEN    32      /* "%.17g" of any double, with NUL */
#define REDIS_U64_MAX_LEN    20
#define REDIS_TOK_ID_LEN     16      /* hex digits of a call's id in its token key */
#define REDIS_NS_TAG_MAX     1024    /* namespace bytes in a hash tag (admissions) */
#define REDIS_FNV_BASIS      0xcbf29ce484222325ULL

/* The field of a hash that marks it reset: a key of it was forgotten
 * (forget, redis_resp.c's layout). No stored key can be it: a key the
 * agent stores starts with '#' only as '#' and 32 hex digits (33 bytes;
 * agent/ratelimit.h, rl_stored_key). Its value counts the forgets. */
#define REDIS_RESET_FIELD    "#reset"
#define REDIS_RESET_LEN      (sizeof(REDIS_RESET_FIELD) - 1)

enum redis_mode {
	REDIS_MODE_SINGLE = 0,          /* host/port or socket */
	REDIS_MODE_CLUSTER,             /* cluster_nodes */
	REDIS_MODE_SENTINEL,            /* sentinel */
	REDIS_MODE_COUNT
};

/* A server address: an IP literal (never a name: resolving would block). */
struct redis_addr {
	char host[INET6_ADDRSTRLEN];
	int port;
};

struct redis_opts {
	enum redis_mode mode;
	struct redis_addr addr;         /* single */
	char socket[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* "" = TCP */
	char *password;                 /* NULL = no AUTH; owned */
	size_t password_len;
	int db;                         /* 0 = no SELECT */
	int timeout_ms;
	int wait_replicas;              /* 0 = no WAIT after writes */
	char prefix[REDIS_PREFIX_MAX + 1];
	size_t prefix_len;
	struct redis_addr seeds[REDIS_SEEDS_MAX];   /* cluster nodes or sentinels */
	size_t nseeds;
	char master[REDIS_MASTER_NAME_MAX + 1];     /* sentinel: the master's name */
	/* sentinel: the sentinels' own credentials (never the master's: those
	 * go to the master only), NULL = no AUTH; owned */
	char *sentinel_password;
	size_t sentinel_password_len;
	char *sentinel_username;        /* NULL = AUTH with the password only */
	size_t sentinel_username_len;
	unsigned quorum;                /* sentinel: answers that must name the master */
};

enum redis_state {
	REDIS_ST_DOWN = 0,              /* no connection; retry timer may run */
	REDIS_ST_CONNECTING,            /* connect + handshake in flight */
	REDIS_ST_READY,                 /* handshake done: calls accepted */
	REDIS_ST_COUNT
};

enum redis_conn_kind {
	REDIS_CONN_DATA = 0,            /* AUTH, SELECT, (ROLE), SCRIPT LOADs; carries calls */
	REDIS_CONN_WATCH,               /* sentinel: SUBSCRIBE +switch-master */
	REDIS_CONN_KIND_COUNT
};

/* One connection to one server, reconnected with backoff. Owned by the
 * strategy's list; freed by destroy, or (cluster) once retired and idle. */
struct redis_conn {
	struct redis_strategy *s;
	struct redis_conn *next;        /* s->conns */
	enum redis_conn_kind kind;
	struct redis_addr addr;
	enum redis_state state;
	redisAsyncContext *ac;          /* NULL when DOWN */
	uint64_t gen;                   /* connection attempts so far */
	int handshake_left;             /* replies awaited before READY */
	struct store_backoff backoff;
	ev_timer retry;                 /* next connection attempt */
	ev_timer handshake;             /* deadline of the current attempt */
	ev_tstamp last_activity;        /* loop time of its last reply */
	uint32_t inflight;              /* calls of operations registered on it */
	bool drop_pending;              /* close at the kick (asked inside hiredis) */
	bool reopen_now;                /* ... and connect again at once */
	bool retired;                   /* cluster: no longer a master, freed when idle */
	uint64_t drop_gen;
	char drop_reason[STRATEGY_ERR_MAX];
	char close_reason[STRATEGY_ERR_MAX]; /* for replies lost to our close */
	char last_err[STRATEGY_ERR_MAX];     /* why the last attempt failed */
};

/* The probe: one question (a formatted command) asked of candidates in
 * turn, each on a short-lived connection, until one answer is accepted
 * (or, with decide, of every candidate, and decide() rules on the
 * answers); after a round without an accepted answer it waits (backoff)
 * and starts again. */
struct redis_probe {
	struct redis_strategy *s;
	struct redis_addr cand[REDIS_SEEDS_MAX + REDIS_MASTERS_MAX];
	size_t ncand, next;
	redisAsyncContext *ac;
	bool busy;                      /* a round is under way */
	bool again;                     /* asked again while busy */
	bool waiting;                   /* busy, but in the backoff between rounds */
	bool auth_failed;               /* the current attempt's AUTH was refused */
	/* AUTH [user] pass before the question; NULL pass = none */
	const char *auth_user, *auth_pass;
	size_t auth_user_len, auth_pass_len;
	struct store_backoff backoff;
	ev_timer timer;                 /* attempt deadline, or backoff */
	char last_err[STRATEGY_ERR_MAX];
	/* Fills cand[] for a new round (cluster: known masters, then seeds). */
	void (*candidates)(struct redis_probe *p);
	const char *argv[4];             /* the question */
	int argc;
	/* The answer of candidate `from`: 0 accepted (the round ends; with
	 * decide: counted, and the next candidate is asked), -1 not (why in
	 * p->last_err; the next candidate is asked). */
	int (*answer)(struct redis_probe *p, const struct redis_addr *from, const redisReply *r);
	/* NULL, or: every candidate is asked, then this rules on the round: 0
	 * accepted, -1 not (a new round after the backoff). */
	int (*decide)(struct redis_probe *p);
};

struct redis_op;

enum redis_call_state {
	REDIS_CALL_IDLE = 0,            /* not sent yet, or done */
	REDIS_CALL_SENT,                /* registered with hiredis on c->conn */
	REDIS_CALL_WAITING,             /* TRYAGAIN: in s->waiting, sent again soon */
	REDIS_CALL_APPLIED,             /* wait_replicas: applied, its WAIT not back */
	REDIS_CALL_STATE_COUNT
};

/* One command of an operation; its address is the hiredis privdata. */
struct redis_call {
	struct redis_op *op;
	struct redis_conn *conn;        /* where it is registered (SENT, APPLIED) */
	struct redis_call *next_wait;   /* s->waiting */
	struct redis_wait *wait;        /* the WAIT that follows it (APPLIED) */
	enum redis_call_state state;
	uint32_t first;                 /* push: first index in op->order; admit: the
					 * admission; rows: window index (2 * size + prev) */
	uint32_t n;                     /* push: counters in this call */
	uint32_t nargs;                 /* script calls: arguments, for the EVAL resend */
	uint16_t slot;                  /* the cluster slot of its keys */
	uint8_t redirects;              /* MOVED / ASK followed */
	bool asking;                    /* ASK: send ASKING before it, once */
	bool asked;                     /* sent behind ASKING: so is a NOSCRIPT resend */
	bool resent;                    /* NOSCRIPT fallback used */
	bool ro;                        /* reads only (push: HMGET): no WAIT */
	ev_tstamp tryagain_since;       /* first TRYAGAIN, 0 = none */
	size_t begin;                   /* offset of the command in op->cmd */
	size_t tail;                    /* script calls: offset of "<numkeys> <key> ..." */
	size_t end;                     /* end offset of the command in op->cmd */
	size_t tok_id;                  /* push: offset of the token key's call id, 0 = none */
	uint64_t body_hash;             /* token calls: hash of the fields and diffs */
};

/* wait_replicas: a WAIT sent on a connection after calls of an op; the
 * calls it follows are confirmed when enough replicas have them. */
struct redis_wait {
	struct redis_op *op;
	struct redis_conn *conn;
	struct redis_wait *next;        /* op->waits */
	bool sent;
};

enum redis_op_kind {
	REDIS_OP_PUSH = 0,
	REDIS_OP_ROWS,
	REDIS_OP_WINDOW,
	REDIS_OP_PURGE,
	REDIS_OP_ADMIT,
	REDIS_OP_NODES,
	REDIS_OP_FORGET,
	REDIS_OP_LIMIT_SET,
	REDIS_OP_LIMITS_READ,
	REDIS_OP_KIND_COUNT
};

/* What a kind of operation does with its calls' replies (redis_call.c
 * takes NOSCRIPT and the mode's redirections out first): one const per
 * kind, beside its operation. */
struct redis_kind {
	enum redis_op_kind kind;
	/* Records the reply of call c (NULL: the connection went), fails the
	 * op, or marks the call applied (redis_call_applied). */
	void (*reply)(struct redis_call *c, const redisAsyncContext *ac, const redisReply *r);
	/* Marks an applied call's results valid (ok); NULL for reads. */
	void (*commit)(struct redis_call *c);
	const char *script;             /* EVALSHA of this: EVAL after NOSCRIPT */
};

/* One operation. Freed only after its callback returned; never while one
 * of its calls or WAITs is registered with hiredis (inflight > 0). */
struct redis_op {
	struct store_op base;           /* done queue, silence timer (store.h) */
	struct redis_strategy *s;
	const struct redis_kind *k;
	uint32_t inflight;              /* calls and WAITs not answered yet */
	int status;
	char errstr[STRATEGY_ERR_MAX];
	strategy_done_cb done_cb;
	strategy_rows_cb rows_cb;
	void *arg;

	/* push, window */
	struct strategy_counter *batch;
	size_t n;                       /* also admit: admissions */
	uint32_t *order;                /* push: batch indexes, grouped by call */

	/* admit */
	struct strategy_admit *admits;

	/* heartbeat */
	unsigned *active;

	/* forget: the hits removed, written at the commit */
	double *removed;
	double removed_got;

	/* limit_set: full, written at the commit; limits_read */
	bool *full;
	bool full_got;
	uint64_t *version;
	bool *changed;

	/* rows */
	uint32_t *sizes;                /* nsizes */
	int64_t *starts;                /* 2 * nsizes: current, previous */
	struct strategy_row *rows;
	size_t *key_off;                /* rows[i].key = keys + key_off[i] */
	size_t nrows, rows_cap;
	char *keys;
	size_t keys_len, keys_cap;

	struct redis_call *calls;
	size_t ncalls;
	struct redis_wait *waits;       /* wait_replicas */
	char *cmd;                      /* every call's RESP text */
	void *arena;                    /* one block: order, calls, sizes, cmd */
};

struct redis_cluster;
struct redis_sentinel;

/* What differs between single server, cluster and sentinel. */
struct redis_mode_ops {
	const char *name;
	/* Sets up the mode's state and starts connecting. Returns 0 or -1
	 * (out of memory, err set). */
	int (*start)(struct redis_strategy *s, char *err, size_t errlen);
	/* Frees the mode's state (connections are closed by then). */
	void (*free)(struct redis_strategy *s);
	/* The data connection for a key slot (NULL = none known now). */
	struct redis_conn *(*route)(struct redis_strategy *s, uint16_t slot);
	bool (*ready)(const struct redis_strategy *s);
	bool (*connecting)(const struct redis_strategy *s);
	/* A connection went down, or an attempt failed (why). */
	void (*conn_down)(struct redis_strategy *s, struct redis_conn *c, const char *why);
	/* An error reply to call c on conn cn that the mode handles (MOVED,
	 * ASK, TRYAGAIN, READONLY...): returns true when it took the call
	 * over (sent again, or waiting); false to let the op see the error. */
	bool (*redirect)(struct redis_call *c, struct redis_conn *cn, const redisReply *r);
	/* A message on a watch connection (sentinel: +switch-master). */
	void (*message)(struct redis_strategy *s, struct redis_conn *c, const char *msg,
			size_t len);
	/* The kick (outside hiredis): deferred work of the mode. */
	void (*kick)(struct redis_strategy *s);
	/* Why no connection serves now, for "not connected (...)". */
	const char *(*why_down)(const struct redis_strategy *s);
};

struct redis_strategy {
	struct store_core core;         /* loop, kick, done queue, callback guard */
	struct ev_loop *loop;
	struct redis_opts o;
	const struct redis_mode_ops *mode;
	struct redis_conn *conns;       /* every connection */
	struct redis_conn *main;        /* single, sentinel: the data connection */
	struct redis_cluster *cluster;  /* cluster mode */
	struct redis_sentinel *sentinel; /* sentinel mode */
	char sha[41];                   /* of the push script, "" until loaded */
	char sha_admit[41];             /* of the admission script */
	char sha_gcra[41];              /* of the TAT script (GCRA's admissions) */
	char sha_lease[41];             /* of the lease script (concurrency's) */
	char sha_nodes[41];             /* of the heartbeat script */
	char sha_limits[41];            /* of the limits read script */
	struct redis_call *waiting, *waiting_tail; /* TRYAGAIN */
	ev_timer waiting_timer;
	bool destroying;
};

extern const struct redis_mode_ops redis_single_mode;
extern const struct redis_mode_ops redis_cluster_mode;
extern const struct redis_mode_ops redis_sentinel_mode;

/* ---- redis_conn.c ---- */

/* Queues AUTH pass, or AUTH user pass, on ac (reply to cb). */
void redis_auth(redisAsyncContext *ac, redisCallbackFn *cb, void *privdata, const char *user,
		size_t user_len, const char *pass, size_t pass_len);
/* A new connection in s->conns (not started). NULL when out of memory. */
struct redis_conn *redis_conn_new(struct redis_strategy *s, enum redis_conn_kind kind,
				  const struct redis_addr *addr);
/* Starts a non-blocking attempt with its handshake queued. */
void redis_conn_open(struct redis_conn *c);
/* Closes it now; only outside its own hiredis callbacks (every pending
 * reply callback runs with NULL before this returns). retry: schedule
 * the next attempt. */
void redis_conn_close(struct redis_conn *c, const char *why, bool retry);
/* From inside a hiredis callback: close at the kick (reopen: at once). */
void redis_conn_drop_later(struct redis_conn *c, const char *why, bool reopen);
/* Unlinks and frees a connection; one never closed (a start that failed
 * half way) has its hiredis context freed first, without callbacks to us. */
void redis_conn_free(struct redis_conn *c);
/* The kick: deferred drops, retired connections that are idle. */
void redis_conns_kick(struct redis_strategy *s);
/* Can it take a call now (connecting or ready)? */
static inline bool redis_conn_usable(const struct redis_conn *c)
{
	return c != NULL && c->ac != NULL && !c->drop_pending;
}

void redis_probe_init(struct redis_probe *p, struct redis_strategy *s);
/* Starts a round now, or right after the current one. */
void redis_probe_start(struct redis_probe *p);
void redis_probe_stop(struct redis_probe *p);
/* Is a round under way? */
bool redis_probe_busy(const struct redis_probe *p);

/* A round is under way and not waiting out its backoff: an answer (or a
 * failure) comes within timeout_ms. */
bool redis_probe_attempting(const struct redis_probe *p);

/* "HOST:PORT" (HOST an IPv4 literal, "[IPv6]", or "localhost"; or the
 * bare IPv6 form "::1:6379" of MOVED replies when bare_v6). Returns 0 or
 * -1. */
int redis_addr_parse(struct redis_addr *a, const char *str, size_t len, bool bare_v6);
bool redis_addr_eq(const struct redis_addr *a, const struct redis_addr *b);

/* ---- redis_cluster.c ---- */

/* Reads a CLUSTER SLOTS reply (asked of `from`: an empty IP is its) into
 * the masters' addresses (addrs[], *n of them, at most REDIS_MASTERS_MAX)
 * and owner[REDIS_SLOTS] (index in addrs + 1; 0 = no master). Returns 0,
 * or -1 with err (a shape or an address it cannot use: names are not
 * resolved; more ranges than slots, a slot in two ranges). Each slot is
 * marked once at most, whatever the reply. */
int redis_cluster_parse_slots(const redisReply *r, const struct redis_addr *from,
			      struct redis_addr *addrs, size_t *n, uint8_t *owner, char *err,
			      size_t errlen);

/* ---- redis_opts.c ---- */

/* Fills o from the JSON text (NULL = defaults). Returns 0, or -1 with a
 * message naming the option and what was expected. What o owns (the
 * passwords) is its on success and on failure (redis_opts_free() it
 * either way). */
int redis_opts_parse(struct redis_opts *o, const char *text, char *err, size_t errlen);
/* What o owns: the passwords, the sentinels' username. */
void redis_opts_free(struct redis_opts *o);

/* ---- redis_write.c: the ops table's push_diffs and admit ---- */

int redis_push_diffs(struct strategy *st, struct strategy_counter *batch, size_t n,
		     const char *token, strategy_done_cb cb, void *arg,
		     char errstr[STRATEGY_ERR_MAX]);
int redis_admit(struct strategy *st, struct strategy_admit *a, size_t n, const char *token,
		strategy_done_cb cb, void *arg, char errstr[STRATEGY_ERR_MAX]);

static inline struct redis_strategy *redis_of(struct strategy *st)
{
	return (struct redis_strategy *)(void *)st;
}

/* The modes with one master (single, sentinel): every call goes to it,
 * and the store is ready when it is. */
static inline struct redis_conn *redis_route_main(struct redis_strategy *s, uint16_t slot)
{
	(void)slot;
	return s->main;
}

static inline bool redis_main_ready(const struct redis_strategy *s)
{
	return s->main && s->main->state == REDIS_ST_READY;
}

/* ---- redis_call.c: the call machinery, for the operations and the modes ---- */

/* A new operation of kind k (not launched; calloc'd: no calls yet), or NULL
 * when out of memory. done_cb or rows_cb gets the outcome (the kind says
 * which: REDIS_OP_ROWS the rows). */
struct redis_op *redis_op_new(struct redis_strategy *s, const struct redis_kind *k,
			      strategy_done_cb done_cb, strategy_rows_cb rows_cb, void *arg);
/* Frees an op never launched, or whose launch failed. */
void redis_op_free(struct redis_op *op);
/* Records the first failure of op (later ones are consequences). */
void redis_op_fail(struct redis_op *op, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Puts op on the done queue; its callback runs from the drain, outside
 * hiredis and outside the caller's current call. */
void redis_op_finish(struct redis_op *op);
/* Refuses an operation when the instance cannot take it now: -1 with
 * errstr "not connected (...)", or 0. */
int redis_check_ready(const struct redis_strategy *s, char errstr[STRATEGY_ERR_MAX]);
/* Sends every call of a built op where the mode routes it, then the WAITs
 * it needs, and starts its silence timer. A call whose slot no connection
 * serves now fails alone (the op fails, with the others' results kept).
 * Returns 0, or -1 when nothing could be sent: op freed, errstr says why
 * ("not connected (...)"), the callback never runs. */
int redis_op_launch(struct redis_op *op, char errstr[STRATEGY_ERR_MAX]);
/* In a kind's reply: the reply of c is no reply (connection going away) or
 * an error: the op fails with why, and true is returned. */
bool redis_reply_failed(struct redis_call *c, const redisAsyncContext *ac, const redisReply *r);
/* In a kind's reply: the call's results are in, valid now (commit) or once
 * its WAIT says enough replicas have them (wait_replicas). */
void redis_call_applied(struct redis_call *c);

/* Sends call c (after `asking`, ASKING first) on connection cn. Returns 0,
 * or -1 (not queued: the op failed with why). */
int redis_call_send(struct redis_call *c, struct redis_conn *cn);
/* Fails call c (its op records why first) and counts it done. */
void redis_call_fail(struct redis_call *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Queues c to be sent again after REDIS_TRYAGAIN_MS. */
void redis_call_wait(struct redis_call *c);
/* Sends the WAITs an op needs after calls it just sent (wait_replicas). */
void redis_op_send_waits(struct redis_op *op);
/* create(): the TRYAGAIN list's timer. destroy(): stops it and fails the
 * calls on the list ("instance destroyed"). */
void redis_waiting_init(struct redis_strategy *s);
void redis_waiting_destroy(struct redis_strategy *s);

/* ---- redis_resp.c: RESP text, the key layout, slots, replies ---- */

/* Bytes redis_put_bulk() writes for a payload of len, at most. */
#define REDIS_BULK_MAX(len) ((len) + 1 + REDIS_U64_MAX_LEN + 4)

/* Writes "<prefix>:{<ns>:<bucket>" of a hash or token key: the part up to
 * the end of the bucket, inside the Cluster hash tag (the caller closes it);
 * prefix_len + 3 + redis_tag_mark() + ns_len + bucket_len bytes. */
char *redis_put_tag(char *p, const struct redis_strategy *s, const char *ns, size_t ns_len,
		    const char *bucket, size_t bucket_len);
/* The hash name of (ns, bucket, size, start) as one bulk string:
 * "<prefix>:{<ns>:<bucket>}:<size>:<start>", or with reserved the hash of
 * its reservations, "<prefix>:{<ns>:<bucket>}:r:<size>:<start>" (same
 * hash tag: same Cluster slot). */
char *redis_put_hkey_of(char *p, const struct redis_strategy *s, const char *ns, size_t ns_len,
			unsigned bucket, uint32_t size, int64_t start, bool reserved);
/* Bytes redis_put_hkey() writes, at most. */
size_t redis_hkey_max(const struct redis_strategy *s, size_t ns_len);
/* The token key of one call of a push or admit with a token, as a bulk
 * string: "<prefix>:{<ns>:<bucket>}:tok:<token>:<size>:<start>:<id>"; <id>
 * (REDIS_TOK_ID_LEN hex digits) is written later by redis_put_tok_id(), at
 * *id_off from base. */
char *redis_put_tkey(char *p, const char *base, const struct redis_strategy *s, const char *ns,
		     size_t ns_len, unsigned bucket, uint32_t size, int64_t start,
		     const char *token, size_t token_len, size_t *id_off);
/* Bytes redis_put_tkey() writes, at most. */
size_t redis_tkey_max(const struct redis_strategy *s, size_t ns_len, size_t token_len);
void redis_put_tok_id(char *p, uint64_t id);
/* A 64-bit hash of bytes (within this process only). */
uint64_t redis_hash_bytes(const char *p, size_t len);
/* The cluster slot of the key in the bulk string at p ("$<len>\r\n<key>"). */
uint16_t redis_bulk_slot(const char *p);
/* CRC16 (XMODEM) as Redis Cluster computes it. */
uint16_t redis_crc16(const void *p, size_t len);
/* The slot of a key: CRC16 of its hash tag (the bytes between the first
 * '{' and the next '}', if not empty), else of the whole key, mod 16384. */
uint16_t redis_key_slot(const char *key, size_t len);
/* The slot of (ns, bucket)'s hash tag, as redis_put_tag() writes it
 * (ns_len <= REDIS_NS_TAG_MAX). */
uint16_t redis_tag_slot(const char *ns, size_t ns_len, unsigned bucket);
/* Parses a bulk string holding a number (all of it, finite). 0 or -1. */
int redis_parse_double(const char *str, size_t len, double *out);
const char *redis_reply_type_name(int type);
void redis_seterr(char errstr[STRATEGY_ERR_MAX], const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* What a batch writes per counter, inline. */

/* FNV-1a 64: the bucket of a key must be the same on every node. */
static inline uint64_t redis_fnv1a(const void *p, size_t len, uint64_t h)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < len; i++) {
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

static inline unsigned redis_bucket(const char *key, size_t len)
{
	return (unsigned)(redis_fnv1a(key, len, REDIS_FNV_BASIS) % REDIS_BUCKETS);
}

/* Writes v in decimal at out (>= 20 bytes, no NUL); returns its length. */
static inline size_t redis_u64_dec(char *out, uint64_t v)
{
	char tmp[REDIS_U64_MAX_LEN];
	size_t n = 0;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	for (size_t i = 0; i < n; i++)
		out[i] = tmp[n - 1 - i];
	return n;
}

/* Same for a signed value (>= 21 bytes). */
static inline size_t redis_i64_dec(char *out, int64_t v)
{
	if (v < 0) {
		out[0] = '-';
		return 1 + redis_u64_dec(out + 1, (uint64_t)0 - (uint64_t)v);
	}
	return redis_u64_dec(out, (uint64_t)v);
}

/* Shortest of "%.15g".."%.17g" that reads back as d; integral values in
 * plain digits. d is finite. Returns the length (< REDIS_DBL_MAX_LEN). */
static inline size_t redis_dbl_dec(char *out, double d)
{
	int len = 0;

	if (d > -1e15 && d < 1e15 && d == (double)(int64_t)d)
		return redis_i64_dec(out, (int64_t)d);
	for (int prec = 15; prec <= 17; prec++) {
		len = snprintf(out, REDIS_DBL_MAX_LEN, "%.*g", prec, d);
		if (strtod(out, NULL) == d)
			break;
	}
	return (size_t)len;
}

static inline char *redis_put_crlf(char *p)
{
	p[0] = '\r';
	p[1] = '\n';
	return p + 2;
}

/* "*<n>\r\n" */
static inline char *redis_put_array(char *p, uint64_t n)
{
	*p++ = '*';
	p += redis_u64_dec(p, n);
	return redis_put_crlf(p);
}

/* "$<len>\r\n<data>\r\n" */
static inline char *redis_put_bulk(char *p, const void *data, size_t len)
{
	*p++ = '$';
	p += redis_u64_dec(p, len);
	p = redis_put_crlf(p);
	if (len)
		memcpy(p, data, len);
	return redis_put_crlf(p + len);
}

/*
 * A namespace whose name starts with '}' would close the hash tag at once:
 * "{}" is an empty tag, which Redis Cluster ignores (it hashes the whole
 * key), so a hash, its previous window and its token keys would fall into
 * different slots. Such a name is written after a 0x01 byte, which no
 * namespace name holds (ns_check refuses control characters): the tag is
 * that byte, one slot for the whole namespace. Returns the bytes added.
 */
static inline size_t redis_tag_mark(const char *ns, size_t ns_len)
{
	return ns_len > 0 && ns[0] == '}';
}

/* redis_put_hkey_of() of a window's hash itself (not its previous). */
char *redis_put_hkey(char *p, const struct redis_strategy *s, const char *ns, size_t ns_len,
		     unsigned bucket, uint32_t size, int64_t start);

static inline uint64_t redis_ttl(uint32_t size)
{
	return 2 * (uint64_t)size + REDIS_TTL_SLACK;
}

/* A total from a script or HGET reply: integer, number string, or nil
 * (0). Returns 0, or -1 for another reply. */
int redis_reply_number(const redisReply *r, double *out);

/* ---- redis_script.c ---- */

/* The scripts (SCRIPT LOAD in every data connection's handshake). */
extern const char redis_push_script[];
extern const char redis_admit_script[];
extern const char redis_gcra_script[];
extern const char redis_lease_script[];
extern const char redis_nodes_script[];
extern const char redis_forget_script[];
extern const char redis_limit_set_script[];
extern const char redis_limits_read_script[];

#endif /* REDIS_INT_H */
