/*
 * sync_int.h - what the two files of the sync layer share, private to
 * them: sync.c (a sync's life, the periodic cycle, seeding, the final
 * flush, rl_sync / rl_fetch) and sync_hits.c (sync_rate 0: hits gathered
 * and parked, calls in doubt, their handover at a reload). sync.c calls
 * sync_hits.c (set up, stop); sync_hits.c calls nothing of sync.c: what
 * both need is inline here. sync_forget.c (keys forgotten in the stores)
 * and sync_read.c (keys' counts read from the stores) likewise.
 */
#ifndef SYNC_INT_H
#define SYNC_INT_H

#include <ev.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "agent/ratelimit.h"
#include "agent/shm_sync.h"
#include "agent/sync.h"
#include "strategies/strategy.h"

#define SYNC_LOG_EVERY    10.0    /* seconds between "store down" logs */
#define SYNC_RETRY_PERIOD 1.0     /* sync_rate 0: how often unconfirmed hits are retried */

struct sync_doubt;                /* sync_hits.c */
struct sync_gather;
struct sync_parked;

/* One namespace that syncs, in one sync instance. */
struct sync_ns {
	struct sync *sy;
	unsigned ns;                  /* its index in rl */
	unsigned sid;                 /* ... and in the shared table (leases,
	                                 node counts, entries) */
	const struct ns_def *def;         /* its settings (rl's copy) */
	const struct strategy_ops *ops;
	struct strategy *st;
	ev_periodic tick;
	ev_periodic beat;                 /* the heartbeat's turn (every worker) */
	ev_timer renew;
	uint64_t hold_ms;
	uint64_t cycle_ms;            /* when the running cycle started */
	bool busy;                    /* a push is waiting for the store */
	bool done;                    /* flush mode: the push has ended */
	bool failing;                 /* the last push failed (for logs) */
	bool holding;                 /* keeps the lease after a failed push */
	bool retry;                   /* batch holds an unconfirmed push, to resend as is */
	uint64_t seq;                 /* pushes of this worker, for tokens */
	char token[STRATEGY_TOKEN_MAX];
	double last_log;
	struct strategy_counter *batch;
	struct shm_entry *ents;
	size_t n, cap, unpushed;
	/* Seeding first-seen keys: queued slots, and the batch in flight. */
	ev_timer seed_timer;
	bool seed_busy;
	size_t nqueued, nseeding;
	struct sync_gather *gather;        /* sync_rate 0: this iteration's pushes */
	struct sync_gather *gather_adm;    /* this iteration's admissions */
	struct sync_doubt *doubts;         /* calls in doubt, oldest first */
	size_t ndoubts;
	bool doubt_busy;                   /* the first one is being sent again */
	uint64_t aseq;                     /* sync_rate 0 calls, for their tokens */
	bool beating;                      /* a heartbeat is in flight */
	unsigned active;                   /* its answer: the namespace's nodes */
	struct shm_entry *seed_q;          /* SYNC_SEED_MAX, queued */
	struct shm_entry *seed_e;          /* SYNC_SEED_MAX, in flight */
	struct strategy_counter *seed_c;   /* 2 * SYNC_SEED_MAX */
};

/* A sync: every syncing namespace of a worker (or of the final flush, or
 * of one library call). */
struct sync {
	struct ev_loop *loop;
	struct rl *rl;
	struct shm_table *t;
	uint16_t holder;              /* worker id + 1 */
	uint64_t node;                /* the node's seed (sync_set_node_seed) */
	uint64_t nonce;               /* random, this instance's: in every token */
	bool flush_mode;              /* the master's final flush */
	size_t n;
	struct sync_ns ns[SHM_MAX_NS];
	/* Parked pushes (SYNC_PARK_MAX each, allocated at the first): the
	 * list and a spare the timer swaps in while it walks the list. */
	struct sync_parked *parked, *parked_spare;
	size_t nparked;
	ev_timer park_timer;
	ev_prepare gather_w;          /* sends the gathered pushes */
	ev_timer doubt_timer;         /* sends calls in doubt again */
	double doubt_log;             /* last "given up" log */
	bool stopping;                /* sync_stop runs: callbacks arm nothing */
	struct sync_gather *free_gathers;
	struct sync_forget *forgets;  /* keys to forget in the stores, oldest first */
	size_t nforgets;
	uint64_t fseq;                /* forgets of this sync, for their tokens */
};

/* A push or call token: unique to this sync instance (its nonce), so that
 * no other instance (a reload's, a respawned worker's, the final flush's,
 * each counting from 1) can send the same token with the same call within
 * STRATEGY_TOKEN_TTL: the store would take it for a resend and add
 * nothing. kind: 'p' sync cycle, 's' sync_rate 0 push, 'a' admissions, 'f' forgets. */
static inline void sync_token(const struct sync_ns *sn, char kind, uint64_t seq,
			      char out[STRATEGY_TOKEN_MAX])
{
	snprintf(out, STRATEGY_TOKEN_MAX, "%016llx-%016llx-%x-%x-%c%llx",
		 (unsigned long long)sn->sy->node, (unsigned long long)sn->sy->nonce,
		 (unsigned)sn->sy->holder, sn->ns, kind, (unsigned long long)seq);
}

static inline struct sync_ns *sync_find_ns(struct sync *sy, unsigned ns)
{
	for (size_t i = 0; i < sy->n; i++)
		if (sy->ns[i].ns == ns)
			return &sy->ns[i];
	return NULL;
}

/* How often the namespace's cycle runs. */
static inline double sync_period(const struct sync_ns *sn)
{
	return sn->def->sync_rate > 0 ? sn->def->sync_rate : SYNC_RETRY_PERIOD;
}

/* ---- sync_hits.c, for a sync's life (sync.c) ---- */

/* Sets up a new sync's gathering and its resend of calls in doubt. */
void sync_hits_init(struct sync *sy);

/* sync_stop, before the stores go: what was gathered and not sent, or
 * parked, fails (its hits stay in the diffs); no more resends. */
void sync_hits_stop(struct sync *sy);

/* sync_stop, once sn's store is gone: its calls in doubt are dropped
 * (logged). */
void sync_doubts_drop(struct sync_ns *sn);

/* sync_stop, last: the gathers kept for reuse are freed. */
void sync_hits_free(struct sync *sy);

/* Frees a handover list (sync_doubts_take) that no sync will take. */
void sync_doubts_free(struct sync_doubts *list);

/* ---- sync_forget.c, for the cycle and a sync's life (sync.c) ---- */

/* sn's tick: sends its namespace's forgets not confirmed yet, if its
 * store is ready. */
void sync_forgets_send(struct sync_ns *sn);

/* sync_stop, once the stores are gone: forgets never confirmed are
 * dropped (logged). */
void sync_forgets_drop(struct sync *sy);

#endif /* SYNC_INT_H */
