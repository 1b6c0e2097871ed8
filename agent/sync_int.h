/*
 * sync_int.h - what the files of the sync share, private to them (and to
 * tests/lib/syncnow.c, the tests' sync cycle on demand). The words are
 * docs/CLUSTER.md's, "Words". The files, one job each, and who calls whom
 * (a file never calls one that calls it, docs/STYLE.md, rule 13; make
 * check reads it from the objects):
 *
 *   sync.c         a sync's life: start, stop, the reload's restart and
 *                  handover, the final flush; what the decisions ask of it
 *                  (store away, can admit, busy, settled)
 *                  -> sync_cycle.c, sync_seed.c, sync_gather.c, sync_doubt.c,
 *                     sync_lease.c
 *   sync_cycle.c   the sync cycle and its lease, the heartbeat
 *                  -> sync_doubt.c
 *   sync_seed.c    first-seen keys seeded
 *   sync_hits.c    sync_rate 0 and exact admission: hits made into calls,
 *                  the store's answers applied to the table
 *                  -> sync_gather.c
 *   sync_gather.c  those calls gathered per namespace and loop iteration,
 *                  parked while the store connects, sent
 *                  -> sync_doubt.c
 *   sync_forget.c  a key forgotten in the store (DELETE /keys)
 *                  -> sync_doubt.c
 *   sync_read.c    a key's counts read from the store (GET /keys; a
 *                  concurrency limit's leases by a lease step)
 *                  -> sync_gather.c
 *   sync_limits.c  limits per key set at run time: an operator's sent to
 *                  the store (PUT / DELETE /limits), the store's read by
 *                  the sync cycle (sync_cycle.c -> sync_limits.c)
 *   sync_lease.c   lease steps on their own: concurrency leases given back,
 *                  settles' claims; retried
 *                  until it answers
 *                  -> sync_gather.c
 *   sync_doubt.c   the one list of calls in doubt, whoever made them:
 *                  resent with their token until the store answers, handed
 *                  over at a reload; it calls none of the files above (a
 *                  kind's own steps come through its struct
 *                  sync_doubt_ops)
 *
 * All of them reach the table through agent/shm_sync.h only. What several
 * need and is no call is inline here.
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
#define SYNC_RETRY_PERIOD 1.0     /* sync_rate 0: the retry cycle's sync period */

struct sync_doubt;                /* sync_doubt.c */
struct sync_gather;               /* sync_gather.c */
struct sync_parked;

/* The kinds of calls in doubt (struct sync_doubt_ops.kind). */
enum sync_doubt_kind {
	SYNC_DOUBT_HITS = 0,          /* a push of sync_rate 0, admissions, or a sync
	                                 cycle's push handed over: calls whose hits
	                                 the node counted meanwhile (sync_doubt.c) */
	SYNC_DOUBT_FORGET,            /* a key's forget (sync_forget.c) */
	SYNC_DOUBT_KINDS
};

/* One namespace that syncs, in one sync. */
struct sync_ns {
	struct sync *sy;
	unsigned ns;                  /* its index in rl */
	unsigned sid;                 /* ... and in the shared table (leases,
	                                 node counts, entries) */
	const struct ns_def *def;         /* its settings (rl's copy) */
	const struct strategy_ops *ops;   /* its strategy */
	struct strategy *st;              /* ... and its instance: this worker's
	                                     connection to the store */
	/* The sync cycle (sync_cycle.c). */
	ev_periodic tick;
	ev_periodic beat;                 /* the heartbeat's turn (every worker) */
	ev_timer renew;
	uint64_t hold_ms;
	uint64_t cycle_ms;            /* when the running cycle started */
	bool busy;                    /* a push is waiting for the store */
	bool done;                    /* flush mode: the push has ended */
	bool failing;                 /* the last push failed (for logs) */
	bool holding;                 /* keeps the lease after a failed push */
	bool retry;                   /* batch holds the push in doubt, to resend as is */
	uint64_t seq;                 /* pushes of this worker, for tokens */
	char token[STRATEGY_TOKEN_MAX];
	double last_log;
	struct strategy_counter *batch;
	struct strategy_admit *abatch;    /* batch as TAT steps (GCRA: sync_push) */
	bool abatch_out;                  /* ... sent so (sync_on_pushed) */
	struct shm_entry *ents;
	size_t n, cap, unpushed;
	bool beating;                 /* a heartbeat is in flight */
	unsigned active;              /* its answer: the namespace's nodes */
	/* Seeding first-seen keys (sync_seed.c): queued slots, and the batch
	 * in flight. */
	ev_timer seed_timer;
	bool seed_busy;
	size_t nqueued, nseeding;
	struct shm_entry *seed_q;          /* SYNC_SEED_MAX, queued */
	struct shm_entry *seed_e;          /* SYNC_SEED_MAX, in flight */
	struct strategy_counter *seed_c;   /* 2 * SYNC_SEED_MAX */
	/* sync_rate 0 and exact admission (sync_gather.c). */
	struct sync_gather *gather;        /* this loop iteration's pushes */
	struct sync_gather *gather_adm[STRATEGY_STEPS]; /* ... and admissions, by
	                                     their store step (one admit() call
	                                     is of one step) */
	uint64_t aseq;                     /* their calls, for tokens */
	/* Calls in doubt (sync_doubt.c), oldest first. */
	struct sync_doubt *doubts;
	size_t ndoubts[SYNC_DOUBT_KINDS];
	struct sync_doubt *doubt_out;      /* the one being resent */
	/* Limits per key (sync_limits.c): a read of the store's in flight,
	 * its answer's version. */
	bool limits_busy;
	bool limits_changed;
	uint64_t limits_version;
};

/* A sync: every syncing namespace of a worker (or of the final flush, or
 * of tests/lib/syncnow.c's one cycle). */
struct sync {
	struct ev_loop *loop;
	struct rl *rl;
	struct shm_table *t;
	uint16_t holder;              /* its lease holder id: worker id + 1 */
	uint64_t node;                /* the node's seed (sync_set_node_seed) */
	uint64_t nonce;               /* random, this sync's: in every token */
	bool flush_mode;              /* the final flush (or one cycle on demand) */
	bool stopping;                /* sync_stop runs: callbacks arm nothing */
	size_t n;
	struct sync_ns ns[SHM_MAX_NS];
	/* Parked calls (SYNC_PARK_MAX each, allocated at the first): the list
	 * and a spare the timer swaps in while it walks the list. */
	struct sync_parked *parked, *parked_spare;
	size_t nparked;
	ev_timer park_timer;
	ev_prepare gather_w;          /* sends the gathered calls */
	struct sync_gather *free_gathers;
	ev_timer doubt_timer;         /* sends calls in doubt again */
	double doubt_log;             /* last "given up" log */
	uint64_t fseq;                /* forgets of this sync, for their tokens */
	struct sync_leases *leases;   /* releases for the store (sync_lease.c) */
};

/* A token: unique to this sync (its nonce), so that no other sync (a
 * reload's, a respawned worker's, the final flush's, each counting from
 * 1) can send the same token with the same call within
 * STRATEGY_TOKEN_TTL: the store would take it for a resend and add
 * nothing. kind: 'p' sync cycle, 's' sync_rate 0 push, 'a' admissions,
 * 'f' forgets. */
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

/* The namespace's sync period. */
static inline double sync_period(const struct sync_ns *sn)
{
	return sn->def->sync_rate > 0 ? sn->def->sync_rate : SYNC_RETRY_PERIOD;
}

/* ---- sync_lease.c: releases and settles' claims on their way ---- */

/* Stops the retries; frees what is queued (after sync_gather_stop: no
 * release is in flight then), calling back the claims left
 * (SYNC_CLAIM_UNCONFIRMED). */
void sync_leases_free(struct sync *sy);

/* Are settles' claims waiting for the store (a stopping worker waits for
 * them: sync_busy)? */
bool sync_leases_busy(const struct sync *sy);

/* ---- sync.c, for tests/lib/syncnow.c ---- */

/* A sync of no namespace yet on loop, for lease holder id holder (>= 1);
 * flush_mode: the final flush's rules (every grant given back, no
 * metrics, no heartbeat, the lease left to its caller). NULL when out of
 * memory. sync_stop() frees it. */
struct sync *sync_new(struct ev_loop *loop, struct rl *rl, uint16_t holder, bool flush_mode);

/* Adds namespace ns (rl's index; it syncs) to sy: its strategy's instance
 * is created. Returns 0, or -1 (logged). */
int sync_add_ns(struct sync *sy, unsigned ns);

/* ---- sync_cycle.c, for a sync's life (sync.c) ---- */

/* Lease times: CLOCK_MONOTONIC milliseconds, the same for every process
 * of the host. */
uint64_t sync_now_ms(void);

/* Collects the namespace's counters into sn's batch: active windows (all
 * of them, or only_diffs: those with a diff, a grant hit spent or
 * returned) at time now. Returns 0 or -1 (out of memory). */
int sync_collect(struct sync_ns *sn, double now, bool only_diffs);

/* Pushes sn's batch (the push in doubt again if sn->retry, with its
 * token; else a new token). Returns 0: sn->busy until it is answered,
 * then sn->done; or -1 (not sent, logged). */
int sync_push(struct sync_ns *sn);

/* Starts sn's sync cycle and heartbeat at the node's phase. */
void sync_cycle_start(struct sync_ns *sn);

/* Stops sn's timers (not the push in flight: destroying the store fails
 * it). */
void sync_cycle_stop(struct sync_ns *sn);

/* A reload: the sync cycle's push in doubt (if any, and not in flight)
 * goes to the list of calls in doubt, to be handed over. */
void sync_cycle_hand_over(struct sync_ns *sn);

/* ---- sync_limits.c, for the sync cycle ---- */

/* The sync cycle's holder: reads the namespace's limits per key from its
 * store when their version moved (strategy_ops.limits_read), and makes
 * this node's the store's (agent/limits.h, limits_replace). One read in
 * flight per namespace and worker; nothing when the store keeps none. */
void sync_limits_poll(struct sync_ns *sn);

/* ---- sync_seed.c, for a sync's life (sync.c) ---- */

/* Sets up sn's seeding (sync_rate > 0, not the final flush). Returns 0,
 * or -1 out of memory. */
int sync_seed_init(struct sync_ns *sn);

/* sync_stop, before sn's store goes: no more seeding. */
void sync_seed_stop(struct sync_ns *sn);

/* sync_stop, once sn's store is gone (it failed the read in flight):
 * frees what seeding holds. */
void sync_seed_free(struct sync_ns *sn);

/* ---- sync_gather.c, for sync_hits.c and a sync's life ---- */

/* Sets up a new sync's gathering. */
void sync_gather_init(struct sync *sy);

/* sync_rate 0: adds n counters of namespace ns to its gather (sent before
 * the loop waits again); cb(arg, status, errstr) runs once, later, when
 * the store has answered, with each counter's total and ok set. Returns
 * 0, or -1 when the store is neither ready nor connecting, or out of
 * memory (cb never runs). Once warm, nothing is allocated. */
int sync_gather_push(struct sync *sy, unsigned ns, struct strategy_counter *c, size_t n,
		     strategy_done_cb cb, void *arg);

/* The same for admissions (the store decides them; one admit call per
 * namespace and loop iteration). */
int sync_gather_admit(struct sync *sy, unsigned ns, struct strategy_admit *a, size_t n,
		      strategy_done_cb cb, void *arg);

/* sync_stop, before the stores go: what was gathered and not sent, or
 * parked, fails (its hits stay in the diffs). */
void sync_gather_stop(struct sync *sy);

/* sync_stop, last: the gathers kept for reuse are freed. */
void sync_gather_free(struct sync *sy);

/* ---- sync_doubt.c: calls in doubt ---- */

/* What one kind of call in doubt does; a const table each, in the file
 * of the calls (docs/STYLE.md, rule 3). */
struct sync_doubt_ops {
	enum sync_doubt_kind kind;
	const char *what;             /* for logs: "call(s) of hits" */
	const char *if_dropped;       /* for logs: what dropping one costs */
	size_t max;                   /* kept per namespace (0: the maker bounds them) */
	double ttl;                   /* given up after so long in doubt (0: never) */
	bool same_store;              /* handed over only to the namespace of the
	                                 same name, store and options (else: the
	                                 same name) */
	/* Sends d with its token; done(d, status, errstr) runs once, later.
	 * Returns 0, or -1 (refused at once: err). */
	int (*send)(struct sync_ns *sn, struct sync_doubt *d, strategy_done_cb done,
		    char err[STRATEGY_ERR_MAX]);
	/* The store answered d (status and errstr: the call's): takes in
	 * what it confirmed. Returns true when nothing of d is left in doubt
	 * (it is then freed). */
	bool (*settle)(struct sync_ns *sn, struct sync_doubt *d, int status, const char *errstr);
	/* Points d's call at its namespace's name (a handover changes the
	 * string's owner). NULL: the call holds no pointer to it. */
	void (*rename)(struct sync_doubt *d, const char *ns);
	/* d leaves its sync (handed over, dropped, given up): who waits for
	 * it hears. NULL: nobody waits. */
	void (*leave)(struct sync_doubt *d);
	void (*free)(struct sync_doubt *d);
};

/* A call in doubt: the list's part, in the kind's own struct (which the
 * kind's ops reach with container_of). */
struct sync_doubt {
	struct sync_doubt *next;
	const struct sync_doubt_ops *ops;
	struct sync_ns *sn;               /* NULL while handed over */
	char *ns_name, *store, *opts;     /* ... then: its namespace, owned */
	char token[STRATEGY_TOKEN_MAX];
	double since;                     /* in doubt since */
	bool out;                         /* sent, not answered yet */
};

/* Sets up a new sync's resends. */
void sync_doubts_init(struct sync *sy);

/* Adds d (ops and token set) last on sn's list; the list's timer sends it
 * again while it is there and not out. Returns 0, or -1 when ops->max are
 * kept already (d is freed, logged). */
int sync_doubt_add(struct sync_ns *sn, struct sync_doubt *d);

/* Sends d (on sn's list) now, its first time. Returns 0 (out until
 * answered), or -1: not sent (the store is not ready, or refused: err),
 * the list sends it later. */
int sync_doubt_send(struct sync_ns *sn, struct sync_doubt *d, char err[STRATEGY_ERR_MAX]);

/* Sends sn's oldest call in doubt again, if its store is ready and no
 * resend of sn is out: one at a time, the next as soon as one is settled
 * (the list's timer, and every sync cycle before its push). */
void sync_doubts_resend(struct sync_ns *sn);

/* A call of hits (a push with token, or admissions: one of a or c, n
 * items) answered with some items not, after it was sent: a copy, keys
 * included, goes on sn's list (SYNC_DOUBT_HITS), for the items the store
 * did not answer that carried hits (reads leave no doubt). Nothing when
 * there is no such item. */
void sync_doubt_keep_hits(struct sync_ns *sn, const char *token, const struct strategy_admit *a,
			  const struct strategy_counter *c, size_t n);

/* The calls of that kind in doubt, over every namespace of sy. */
size_t sync_doubts_count(const struct sync *sy, enum sync_doubt_kind kind);

/* A reload (sync_reload): every call in doubt of sy, out or not, is taken
 * out before sync_stop(sy) (its kind's leave() runs) and given to the
 * next sync, which sends each again with its token: to the namespace of
 * the same name (and store and options: ops->same_store); the others are
 * dropped (logged). A call out at the take is failed by sync_stop (its
 * answer changes nothing then). take returns a list, maybe empty, or NULL
 * (sy NULL, out of memory: the calls stay, sync_stop drops them); give
 * frees it; free frees one no sync takes. NULL is fine for both. */
struct sync_doubts;
struct sync_doubts *sync_doubts_take(struct sync *sy);
void sync_doubts_give(struct sync *sy, struct sync_doubts *list);
void sync_doubts_free(struct sync_doubts *list);

/* sync_stop, before the stores go: no more resends. */
void sync_doubts_stop(struct sync *sy);

/* sync_stop, once sn's store is gone: its calls in doubt are dropped
 * (leave(), logged). */
void sync_doubts_drop(struct sync_ns *sn);

#endif /* SYNC_INT_H */
