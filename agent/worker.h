/*
 * worker.h - a worker process: its own libev loop accepting on the listener
 * the master bound, serving SPOP connections, counting in the shared table.
 */
#ifndef WORKER_H
#define WORKER_H

#include <ev.h>
#include <stdbool.h>
#include <stdint.h>

#include "agent/handler.h"
#include "agent/log.h"

struct config;
struct conn;
struct rl;
struct sync;

struct worker {
	struct ev_loop *loop;
	const struct config *cfg;
	struct rl *rl;
	struct decide decide;         /* the decisions of every front */
	struct handler handler;       /* the SPOP front's messages */
	struct sync *sync;            /* NULL when no namespace syncs */
	int id;
	int listen_fd;
	ev_io accept_w;
	ev_signal term_w, int_w;
	ev_check reap_w;              /* frees connections closed during callbacks */
	ev_timer drain_w;             /* bounds the shutdown */
	ev_timer stop_poll_w;         /* while stopping: checks whether all is done */
	ev_timer accept_pause_w;      /* accepts paused after EMFILE and the like */
	struct conn *conns;           /* live connections */
	struct conn *dead;            /* closed, to free after the callbacks */
	uint32_t nconns;
	size_t buf_bytes;             /* connection buffers (max_buffer_memory) */
	bool stopping;
	struct log_limit cap_log, accept_log, evict_log, budget_log, fail_log, disconnect_log;
};

/* Runs a worker until SIGTERM/SIGINT and its connections are done.
 * Returns the process exit status. */
int worker_run(const struct config *cfg, struct rl *rl, int listen_fd, int id);

/* Called by a connection when it closes: unlinks it and queues it to free. */
void worker_conn_closed(struct worker *w, struct conn *c);

#endif /* WORKER_H */
