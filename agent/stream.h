/*
 * stream.h - fronts and their connections, as the worker sees them.
 *
 * A front is what a listener speaks: a const ops table (spop_front in
 * agent/spop_front.c, http_front in agent/http_front.c), listed in
 * agent/fronts.h (the registry: fronts[] below). Its connections embed a
 * struct stream: a non-blocking socket with its watchers and its read and
 * write buffers, counted against the worker's max_buffer_memory. A
 * connection reports to its owner only through the environment's `closed`
 * callback: fronts never include the worker, the worker knows fronts only
 * by their ops.
 *
 *   worker --accept--> ops->open(env, fd) --> struct spop_conn / http_conn
 *      ^                                          |  (struct stream inside)
 *      '------------- env->closed(env, s) <-------'
 */
#ifndef STREAM_H
#define STREAM_H

#include <ev.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/log.h"
#include "agent/metrics.h"

struct config;
struct decide;
struct rl;
struct stream;
struct front_env;
struct topk;

struct front_ops {
	enum front_id id;                 /* its line in agent/fronts.h: name, metrics,
	                                     the address its listener binds
	                                     (config_front_address) */
	/* A worker starts (its loop made, before it runs), applies a
	 * reload, stops: the front's own state of the worker, in env (NULL:
	 * none). start and reload return 0, or -1 when out of memory. */
	int (*start)(struct front_env *env);
	int (*reload)(struct front_env *env);
	void (*stop)(struct front_env *env);
	/* Takes a connected non-blocking fd: the new connection's stream, or
	 * NULL (fd left open for the caller) when out of memory or over the
	 * buffer budget. */
	struct stream *(*open)(struct front_env *env, int fd);
	/* Since when (ev_now() time) s could give way to a new peer (at
	 * max_connections, or at its front's budget); negative while it is
	 * busy. */
	double (*idle_since)(const struct stream *s);
	/* How long a connection must have been idle before a new peer may
	 * take its place (seconds). */
	double evict_after;
	/* A front whose peers are not the proxy the agent serves (HTTP
	 * callers): its connections and buffers are held to a share of the
	 * worker's (these give it; NULL: no share of its own), and its idle
	 * connections go first when another front's peer needs room. */
	bool guest;
	uint32_t (*max_connections)(const struct config *cfg);
	size_t (*max_buffer_memory)(const struct config *cfg);
	/* The worker stops: answer what came, then close. */
	void (*drain)(struct stream *s);
	/* Close at once for a new peer (a goodbye if the socket takes it). */
	void (*evict)(struct stream *s);
	/* Close at once, answers waiting for a store forgotten (the worker
	 * exits). */
	void (*close)(struct stream *s);
	/* Frees a connection closed earlier (s->dead), never from inside its
	 * own callbacks. */
	void (*free)(struct stream *s);
};

#define FRONT_OPS_DECL(id, name, ops, field, key) extern const struct front_ops ops;
FRONTS(FRONT_OPS_DECL)
#undef FRONT_OPS_DECL

/* Every front's ops, by id (agent/fronts.h's list). */
extern const struct front_ops *const fronts[FRONT_COUNT];

/* What the connections of a worker share, and how they report back. */
struct front_env {
	struct ev_loop *loop;
	const struct config *cfg;
	struct rl *rl;
	struct decide *decide;            /* the decisions of every front */
	void *state[FRONT_COUNT];         /* each front's own state of the worker
	                                     (its start sets it; NULL: none) */
	struct metrics *metrics;          /* every worker's counters (GET /metrics) */
	struct topk *topk;                /* heavy hitters (GET /top); NULL: off */
	unsigned mux_peers;               /* SPOP connections of HAProxy 3.1+ and */
	unsigned applet_peers;            /* ... 2.x (spop_front.c): sched_batch, collect_us */
	size_t buf_bytes;                 /* all connection buffers (max_buffer_memory) */
	size_t front_bytes[FRONT_COUNT]; /* ... of each front (its max_buffer_memory) */
	struct log_limit budget_log, fail_log, disconnect_log, io_log;
	/* s closed (fd closed, watchers stopped, s->dead): the owner unlinks
	 * it and frees it (ops->free) once the callbacks are over. */
	void (*closed)(struct front_env *env, struct stream *s);
};

struct stream {
	const struct front_ops *ops;
	struct front_env *env;
	struct stream *prev, *next;       /* the owner's list */
	int fd;
	ev_io io;
	ev_timer timer;
	uint8_t *rbuf;
	size_t rlen, rcap;
	uint8_t *wbuf;
	size_t wlen, woff, wcap;
	double created;                   /* ev_now() at accept */
	double last_rx;                   /* ev_now() of the last whole frame/request */
	double partial_since;             /* a frame/head began arriving, or 0 */
	bool draining;                    /* the worker is stopping */
	bool dead;                        /* closed; freed by the owner */
};

/* Sets up s on fd with buffers of rcap and wcap bytes (within the
 * worker's budget and its front's) and starts its watchers: io_cb on EV_READ, timer_cb at the earlier of
 * frame_timeout and idle_timeout. Returns 0, or -1 (nothing allocated, fd
 * left open). */
int stream_open(struct stream *s, const struct front_ops *ops, struct front_env *env, int fd,
		size_t rcap, size_t wcap,
		void (*io_cb)(struct ev_loop *, ev_io *, int),
		void (*timer_cb)(struct ev_loop *, ev_timer *, int));

/* Grows the buffers to at least rcap and wcap bytes within the worker's
 * max_buffer_memory and the front's (logged once a second when refused). Returns 0, or -1
 * (buffers unchanged). The read buffer may move: index it by offset. */
int stream_grow(struct stream *s, size_t rcap, size_t wcap);

/* Sends queued output until done or the socket is full (when done, the
 * buffer is reset: woff = wlen = 0). Returns 0, or -1 when the peer is
 * gone (the caller closes). */
int stream_send(struct stream *s);

/* One non-blocking try at sending what is queued (an evicted peer's
 * goodbye). */
void stream_send_once(struct stream *s);

#define STREAM_READS_PER_EVENT 16   /* reads per readiness: fairness between connections */

/* The read loop of every front: reads what the socket has into the read
 * buffer, at most STREAM_READS_PER_EVENT times, calling process(s) after
 * each read, while more(s) says the front takes more. Stops when the
 * buffer is full, the socket has nothing more, or s died. Returns true
 * when the peer closed (EOF or an error: what came whole was processed
 * first): the front closes once its answers are out. */
bool stream_read(struct stream *s, bool (*more)(const struct stream *s),
		 void (*process)(struct stream *s));

/* Moves what a partial write left to the front of the write buffer. */
void stream_compact(struct stream *s);

/* Drops the first n bytes of the read buffer. */
void stream_consume(struct stream *s, size_t n);

/* Watches for reads when want_read and the read buffer has room, for
 * writes while output is queued. */
void stream_watch(struct stream *s, bool want_read);

/* Re-arms the timer to fire in `after` seconds. */
void stream_timer(struct stream *s, double after);

/* Stops the watchers, closes the socket, gives the buffers back (within
 * the budgets at once; rbuf and wbuf are NULL after), marks s dead and
 * reports it to the owner. Safe twice. */
void stream_close(struct stream *s);

/* Gives the buffers back (memory and budget) and frees the connection,
 * which holds its stream as its first member (malloc'd by ops->open). */
void stream_free(struct stream *s);

#endif /* STREAM_H */
