/*
 * decide_int.h - what the decision layer's own files share, not the
 * fronts: a held decision and its pool, and the requests' stored keys.
 * Calls go one way: decide_run.c (the entry) -> delay.c (delay instead of
 * deny) -> decide.c (a batch decided, held for its store).
 *
 * A request's key is made stored once (decide_keys: rl_skey_make, a long
 * key digested), where the layer first sees the request (decide_run, or
 * decide_batch and decide_one called alone), and handed down with it:
 * to the delay queues' lookup, to the library (rl_hit_skey), to the parts
 * that wait for a store (rl_decision.skey), to a delayed decision (kept
 * with its requests). Nothing below makes it again.
 */
#ifndef DECIDE_INT_H
#define DECIDE_INT_H

#include "agent/decide.h"
#include "agent/sync.h"

#define DECIDE_DELAY_KEYS 2048    /* bytes of a delayed decision's keys and names */

struct delay_queue;

/* A decision that waits: for its store (sync_rate 0, exact admission), or
 * delayed (delay_max_ms: agent/delay.c). From a per-worker pool; linked
 * into its owner's list until delivered or released. */
struct decide_pending {
	struct decide *d;
	struct decide_owner *owner;              /* the front's; NULL once gone */
	bool linked;                             /* in owner->list */
	bool delayed;                            /* counted in owner->held, else in
	                                            owner->waiting */
	bool settled;                            /* answered before its store did
	                                            (decide_pending_settle) */
	struct decide_pending *prev, *next;      /* owner's list, or the free list */
	uint64_t tag[3];
	double now;
	size_t n;
	int hi[DECIDE_MAX_BATCH];                /* request -> its hit in hits, or -1 */
	struct rl_decision res[DECIDE_MAX_BATCH];
	struct sync_hits hits;                   /* what waits for the stores */
	/* Delayed: the requests (strings copied into keys), when they came and
	 * until when they may wait, their key's queue. */
	struct delay_queue *dq;
	struct decide_pending *qnext;
	double since, deadline;
	size_t nrq;
	struct rl_request rq[DECIDE_MAX_BATCH];
	struct rl_skey sk[DECIDE_MAX_BATCH];     /* their keys' stored forms (a
	                                            verbatim one points into keys) */
	char keys[DECIDE_DELAY_KEYS];
};

/* The stored form of each request's key, sk[i] of rq[i] (len 0: no key).
 * Inline: every request passes here. */
static inline void decide_keys(const struct decide *d, const struct rl_request *rq, size_t n,
			       struct rl_skey *sk)
{
	for (size_t i = 0; i < n; i++)
		rl_skey_make(d->rl, rq[i].key, rq[i].key_len, &sk[i]);
}

/* decide_batch() on requests whose keys' stored forms are sk[0..n). */
size_t decide_parts(struct decide *d, const struct rl_request *rq, const struct rl_skey *sk,
		    size_t n, double now, struct rl_decision *parts, size_t maxparts);

struct decide_pending *pending_get(struct decide *d);
/* Frees the pool's decisions (decide_free, once none is held). */
void pending_free_all(struct decide *d);
void pending_put(struct decide *d, struct decide_pending *p);
void pending_unlink(struct decide_pending *p);

/* Links p into its owner's list, counted as delayed or waiting for a
 * store; pending_unlink() takes it out and uncounts it. */
void pending_link(struct decide_pending *p, struct decide_owner *owner, bool delayed);

/* p is final: its owner answers it (and releases it), or, gone, p goes
 * back to the pool. */
void pending_deliver(struct decide_pending *p);

/* The parts of a decision that takes them back (agent/decide.c):
 * counted parts of count_denied false namespaces, or every counted part
 * (all: the decision is held, not final). sk: the stored keys of the
 * parts' requests. */
void decide_take_back(struct decide *d, const struct rl_skey *sk, struct rl_decision *parts,
		      size_t np, double now, bool all);

/* ---- agent/delay.c ---- */

/* A denied decision of rq[0..n) (their keys' stored forms sk; its
 * parts[0..np), counted as decide_batch left them) that may wait, or a
 * decision behind one that waits for the same key: returns it held
 * (linked to owner; the parts taken back), or NULL: answer it now as it
 * is. */
struct decide_pending *delay_hold(struct decide *d, const struct rl_request *rq,
				  const struct rl_skey *sk, size_t n, struct rl_decision *parts,
				  size_t np, double now, struct decide_owner *owner);

/* Would a decision of rq[0..n) (stored keys sk) wait behind a delayed one
 * (the same key, in this worker)? */
bool delay_queued(struct decide *d, const struct rl_request *rq, const struct rl_skey *sk,
		  size_t n);

/* p, delayed, leaves its key's queue now, undecided (its owner went
 * away): nothing of it was counted. */
void delay_drop(struct decide_pending *p);

/* Stops the queues' timers and frees them (decide_free). */
void delay_free(struct decide *d);

#endif /* DECIDE_INT_H */
