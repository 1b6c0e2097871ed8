/*
 * worker.h - a worker process: its own libev loop accepting on the
 * listeners the master bound (one front each, agent/stream.h), serving
 * their connections, counting in the shared table.
 */
#ifndef WORKER_H
#define WORKER_H

#include <ev.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "agent/decide.h"
#include "agent/log.h"
#include "agent/stream.h"

struct balance;
struct config;
struct metrics;
struct rl;
struct sync;

/* The sockets the master bound; every worker accepts on them, in turns
 * (agent/balance.h). */
struct worker_listeners {
	int fd[FRONT_COUNT];          /* by front (agent/fronts.h); -1: the front is off */
	struct metrics *metrics;      /* every worker's counters (shared) */
	struct balance *balance;      /* who accepts next (shared) */
	struct topk *topk;            /* heavy hitters (shared); NULL: off */
	pid_t master_pid;             /* the workers' parent */
};

#define WORKER_MAX_LISTENERS FRONT_COUNT

struct worker;

/* One listening socket and the front it speaks. */
struct worker_listener {
	struct worker *w;
	const struct front_ops *ops;
	int fd;
	int idx;                      /* the listener's number in the balance */
	ev_io accept_w;
	ev_timer pause_w;             /* accepts paused (at the cap, after EMFILE) */
	ev_timer stall_w;             /* waiting: when to look whether the pick is stuck */
	uint64_t stall_mark;          /* balance_wait()'s mark */
	bool waiting;                 /* another worker's turn: accept_w stopped */
	uint32_t nconns;              /* its connections held here */
};

struct worker {
	struct ev_loop *loop;
	struct config *cfg;           /* its copy of main's: a reload changes it */
	struct decide decide;         /* the decisions of every front */
	struct front_env env;         /* what the connections share */
	struct sync *sync;            /* NULL when no namespace syncs */
	int id;
	struct worker_listener lis[WORKER_MAX_LISTENERS];
	size_t nlis;
	struct balance *balance;      /* whose turn it is to accept */
	ev_io wake_w;                 /* another worker made it our turn */
	ev_signal term_w, int_w, hup_w;
	ev_timer reload_w;            /* a reload waits for the pushes in flight */
	ev_prepare collect_w;         /* sched_batch and collect_us as the peers want them;
	                                 collect_us off while decisions wait for a store */
	bool batch[2];                /* config_sched_batch(): [bursts], fixed at start */
	double collect_at[2];         /* config_collect_us(), in seconds: [bursts] */
	bool bursts;                  /* what is applied: behind HAProxy 2.x alone */
	double reload_since;
	ev_check reap_w;              /* frees connections closed during callbacks */
	ev_timer drain_w;             /* bounds the shutdown */
	ev_timer stop_poll_w;         /* while stopping: checks whether all is done */
	struct stream *conns;         /* live connections, every front */
	struct stream *dead;          /* closed, to free after the callbacks */
	uint32_t nconns;              /* max_connections counts them all */
	bool stopping;
	struct log_limit cap_log, accept_log, evict_log, refuse_log, stall_log;
};

/* Runs a worker until SIGTERM/SIGINT and its connections are done; a
 * reload changes cfg. Returns the process exit status. */
int worker_run(struct config *cfg, struct rl *rl, const struct worker_listeners *ls,
	       int id);

#endif /* WORKER_H */
