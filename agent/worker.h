/*
 * worker.h - a worker process: its own libev loop accepting on the listener
 * the master bound, serving SPOP connections, counting in the shared table.
 */
#ifndef WORKER_H
#define WORKER_H

#include <ev.h>
#include <stdbool.h>
#include <stdint.h>

#include "agent/decide.h"
#include "agent/handler.h"
#include "agent/log.h"

struct config;
struct conn;
struct http_conn;
struct metrics;
struct rl;
struct sync;

/* The sockets the master bound; every worker accepts on them. */
struct worker_listeners {
	int spop_fd;
	int http_fd;                  /* -1: no HTTP front */
	struct metrics *metrics;      /* every worker's counters (shared) */
};

struct worker {
	struct ev_loop *loop;
	const struct config *cfg;
	struct rl *rl;
	struct decide decide;         /* the decisions of every front */
	struct handler handler;       /* the SPOP front's messages */
	struct sync *sync;            /* NULL when no namespace syncs */
	int id;
	int listen_fd;
	int http_fd;                  /* -1: no HTTP front */
	struct metrics *metrics;
	ev_io accept_w;
	ev_io http_accept_w;
	ev_timer http_pause_w;        /* HTTP accepts paused (cap, EMFILE) */
	ev_signal term_w, int_w;
	ev_check reap_w;              /* frees connections closed during callbacks */
	ev_timer drain_w;             /* bounds the shutdown */
	ev_timer stop_poll_w;         /* while stopping: checks whether all is done */
	ev_timer accept_pause_w;      /* accepts paused after EMFILE and the like */
	struct conn *conns;           /* live connections */
	struct conn *dead;            /* closed, to free after the callbacks */
	struct http_conn *hconns;     /* live HTTP connections */
	struct http_conn *hdead;      /* closed, to free after the callbacks */
	uint32_t nconns;              /* SPOP and HTTP together (max_connections) */
	size_t buf_bytes;             /* connection buffers (max_buffer_memory) */
	bool stopping;
	struct log_limit cap_log, accept_log, evict_log, budget_log, fail_log, disconnect_log;
};

/* Runs a worker until SIGTERM/SIGINT and its connections are done.
 * Returns the process exit status. */
int worker_run(const struct config *cfg, struct rl *rl, const struct worker_listeners *ls,
	       int id);

/* Called by a connection when it closes: unlinks it and queues it to free. */
void worker_conn_closed(struct worker *w, struct conn *c);
void worker_http_closed(struct worker *w, struct http_conn *c);

#endif /* WORKER_H */
