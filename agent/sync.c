/*
 * sync.c - the sync loop (see sync.h).
 *
 * One cycle, in the worker holding the namespace's lease:
 *
 *   collect   every LIVE slot of the namespace whose window is current or
 *             previous (the sliding rate needs both), plus any older slot
 *             still holding a diff; diff = the slot's diff as read now;
 *             with it the slot's grant hits spent (once a second) and
 *             what is left of a grant unused for a cycle (returned)
 *   push      one push_diffs() of the whole batch: the store adds the
 *             diffs, moves the grant hits from its reservations to its
 *             counts, drops what was returned, and returns every
 *             counter's count of hits (all 0: a read)
 *   ack       per confirmed counter: diff, spent, returned -= pushed (what
 *             came since stays), count = max(count, total + diff + what
 *             the store still holds for this node), so no reader sees a
 *             drop
 *
 * Nothing is taken out of a slot before the store confirms it: a failed or
 * timed-out push leaves the diffs where they are. Every push carries a
 * token (node, worker, sequence); the counters a push did not confirm are
 * resent as they were, with the same token, before anything else, and the
 * store applies a token's parts at most once. So a push that the store
 * applied late (a paused or slow store answering after timeout_ms) is not
 * counted twice. The one window of doubt left is a worker killed (or
 * stalled past its lease) with an unconfirmed push: the worker that takes
 * over pushes those diffs under a new token, so the store can count that
 * one batch twice (never less). Its size is at most the hits the node
 * counted in one sync_rate.
 *
 * Calls made for one hit or a few (sync_rate 0 pushes, admissions) carry
 * a token too. One the store did not answer after it was sent leaves its
 * hits counted in the diffs (an admission decided by the node: degraded),
 * and is kept in doubt (struct sync_doubt): sent again as it was, with its
 * token, until the store answers; what the store says it counted for it
 * is then taken back from the diffs. So those hits also reach the store
 * once, unless the worker dies first (a reload hands them to the next sync:
 * sync_doubts_take).
 *
 * The lease (shm_lease_*) makes one worker per node run a cycle per
 * period: every worker's timer fires at the node's phase, the first to
 * take the lease runs the cycle and, when done, leaves it free but not due
 * until the next period. A holder that dies stops renewing it; it expires
 * and another worker takes over. The heartbeat has its own timer, once a
 * second (shm_beat_take: one worker per node beats).
 */
#include "agent/sync.h"
#include "strategies/container.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "agent/log.h"
#include "agent/metrics.h"
#include "agent/ratelimit.h"
#include "agent/shm_sync.h"
#include "agent/window.h"
#include "strategies/strategy.h"

/* Lines about one hit or one admission (a table full when a store's answer
 * comes back) come at most once a second per process, with the number
 * held back. */
static struct log_limit sync_hit_log;
#define SYNC_HIT_LOG(level, fmt, ...)                                              \
	do {                                                                           \
		if ((level) <= log_level && log_limit(&sync_hit_log, rl_now()))          \
			LOG((level), fmt "%s", __VA_ARGS__, log_limit_suppressed(&sync_hit_log)); \
	} while (0)

#define SYNC_LOG_EVERY   10.0     /* seconds between "store down" logs */
#define SYNC_MIN_HOLD_MS 1000
#define SYNC_GRANT_FIRST_SHARE 64 /* a first grant: this part of a node's share */
#define SYNC_RETRY_PERIOD 1.0     /* sync_rate 0: how often unconfirmed hits are retried */
#define SYNC_SEED_MAX    1024     /* first-seen keys queued per namespace */
#define SYNC_SEED_DELAY  0.002    /* gather seeds this long into one push */
#define SYNC_PARK_MAX    4096     /* sync_rate 0 pushes waiting for a connecting store */
#define SYNC_PARK_POLL   0.002    /* how often they look at the store */
#define SYNC_PARK_LIMIT  30.0     /* safety bound: the store's timeout ends the attempt first */
#define SYNC_DOUBT_MAX   256      /* calls in doubt kept per namespace */
#define SYNC_DOUBT_POLL  0.05     /* how often they look at the store */
#define SYNC_DOUBT_TTL   300.0    /* given up after this (tokens live STRATEGY_TOKEN_TTL) */
#define SYNC_BEAT_PERIOD 1.0      /* seconds between a node's heartbeats */
#define SYNC_BEAT_TTL    3        /* ... and the periods a node counts for */
#define SYNC_SPENT_PERIOD 1.0     /* seconds between reports of grant hits spent */

struct sync;
struct sync_ns;

/* A call of sync_rate 0 (a push, or admissions) whose answer never came
 * (the store failed, or was slower than timeout_ms, after it was sent):
 * the store may have applied it, or may still. Its hits were counted by
 * the node into their slots' diffs (admissions decided there: degraded),
 * which the retry or sync cycle pushes. The call is sent again, as it
 * was, with its token: the store applies it once (now, or never again if
 * it had) and says what it counted; that much is taken back from the
 * diffs, so each hit reaches the store once. */
struct sync_doubt {
	struct sync_doubt *next;
	struct sync_ns *sn;               /* NULL while handed over (a reload) */
	char *ns_name, *store, *opts;     /* ... then: its namespace, owned */
	char token[STRATEGY_TOKEN_MAX];
	struct strategy_admit *a;         /* the call (admissions), or */
	struct strategy_counter *c;       /* the call (a push); keys in `keys` */
	bool *fix;                        /* [i] was not answered: settle it */
	char *keys;
	size_t n, nfix;
	double since;
};

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

/* sync_rate 0: the pushes of one namespace asked for during one loop
 * iteration, sent as one push_diffs before the loop waits again (an
 * ev_prepare): one store round trip for every hit that arrived together,
 * whatever connection or front it came from. */
struct sync_req {
	struct strategy_counter *c;       /* the caller's counters, or */
	struct strategy_admit *a;         /* its admissions */
	size_t n;
	strategy_done_cb cb;
	void *arg;
};

struct sync_gather {
	struct sync_gather *next;         /* the free list */
	struct sync *sy;
	struct sync_ns *sn;               /* set when sent */
	bool sent;                        /* handed to the store */
	char token[STRATEGY_TOKEN_MAX];   /* the call's */
	struct strategy_counter *c;       /* copies of every request's, in order */
	size_t n, cap;
	struct strategy_admit *a;         /* the same, for admissions */
	size_t na, acap;
	double until;                     /* it waits for a connecting store
	                                     until then */
	struct sync_req *req;
	size_t nreq, reqcap;
};

/* A gather (pushes or admissions) that found its store connecting. */
struct sync_parked {
	struct sync_ns *sn;
	struct sync_gather *g;
	bool admit;
};

struct sync {
	struct ev_loop *loop;
	struct rl *rl;
	struct shm_table *t;
	uint16_t holder;              /* worker id + 1 */
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
};

static uint64_t node_seed;

void sync_set_node_seed(uint64_t seed)
{
	node_seed = seed;
}

/* A push or call token: unique to this sync instance (its nonce), so that
 * no other instance (a reload's, a respawned worker's, the final flush's,
 * each counting from 1) can send the same token with the same call within
 * STRATEGY_TOKEN_TTL: the store would take it for a resend and add
 * nothing. kind: 'p' sync cycle, 's' sync_rate 0 push, 'a' admissions. */
static void sync_token(const struct sync_ns *sn, char kind, uint64_t seq,
		       char out[STRATEGY_TOKEN_MAX])
{
	snprintf(out, STRATEGY_TOKEN_MAX, "%016llx-%016llx-%x-%x-%c%llx",
		 (unsigned long long)node_seed, (unsigned long long)sn->sy->nonce,
		 (unsigned)sn->sy->holder, sn->ns, kind, (unsigned long long)seq);
}

/* A sync cycle for a slot with a grant or demand: what is left of a grant
 * that saw no hit for a whole cycle (all of it at the final flush) goes
 * back to the store with this push (returned: the store takes it from the
 * reservation), and out of the slot's count. A grant in use is kept:
 * given back while hits still come, its room could be taken by hits
 * denied (and counted) meanwhile. The order keeps count - left - spent
 * from ever rising for a moment (shm_sync_total). */
static void sync_grant_cycle(struct shm_table *t, struct shm_entry *e, bool all)
{
	struct shm_ref r = { .idx = e->idx, .meta = e->meta };
	double left;

	if (shm_grant_cycle(t, e->idx) > 0 && !all)
		return;
	left = shm_grant_return(t, e->idx);
	if (!(left > 0))
		return;
	shm_add(t, &r, -left, false);
	if (!shm_still(t, &r))
		return;         /* re-keyed: a window no longer counted anyway */
	shm_grant_unres_add(t, e, 0, left);
	e->count -= left;
	e->ret += left;
}

static double sync_period(const struct sync_ns *sn);

/* Does this cycle report grant hits spent? Once a SYNC_SPENT_PERIOD (the
 * cycle that crosses a boundary of it), every cycle if the period is
 * longer. They change no decision (the store counts a reservation as it
 * counts hits), only the counts others read: reported every cycle they
 * would make every key with a grant in use a write a cycle (a script, two
 * hashes), where a read does. */
static bool sync_spent_due(const struct sync_ns *sn, double now)
{
	double p = sync_period(sn);

	return sn->sy->flush_mode || p >= SYNC_SPENT_PERIOD ||
	       floor(now / SYNC_SPENT_PERIOD) != floor((now - p) / SYNC_SPENT_PERIOD);
}

/* Collects the namespace's counters into the batch: active windows (all
 * of them, or only those with a diff) at time now. Returns 0 or -1 (out of
 * memory). */
static int sync_collect(struct sync_ns *sn, double now, bool only_diffs)
{
	struct shm_table *t = sn->sy->t;
	bool spent_due = sync_spent_due(sn, now);

	sn->n = 0;
	for (uint32_t idx = shm_next_used(t, 0); idx != SHM_NONE; idx = shm_next_used(t, idx + 1)) {
		if (sn->n == sn->cap) {
			size_t cap = sn->cap ? 2 * sn->cap : 1024;
			struct shm_entry *e = realloc(sn->ents, cap * sizeof(*e));
			if (!e)
				return -1;
			sn->ents = e;
			struct strategy_counter *b = realloc(sn->batch, cap * sizeof(*b));
			if (!b)
				return -1;
			sn->batch = b;
			sn->cap = cap;
		}
		struct shm_entry *e = &sn->ents[sn->n];
		if (shm_read(t, idx, e) < 0 || e->ns != sn->sid || e->size == 0)
			continue;
		if (shm_grant_any(t, idx))
			sync_grant_cycle(t, e, sn->sy->flush_mode);
		int64_t cur = window_start(now, e->size);
		bool active = e->start == cur || e->start == cur - (int64_t)e->size;
		/* Grant hits of a window that is no longer current go at once. */
		if (!spent_due && e->start == cur)
			e->spent = 0;
		if (e->diff == 0 && e->spent == 0 && e->ret == 0 && (only_diffs || !active))
			continue;
		sn->n++;
	}
	/* Pointers into ents only now that it stops moving. */
	for (size_t i = 0; i < sn->n; i++) {
		struct shm_entry *e = &sn->ents[i];
		sn->batch[i] = (struct strategy_counter){
			.ns = sn->def->name,
			.ns_len = strlen(sn->def->name),
			.key = e->key,
			.key_len = e->keylen,
			.start = e->start,
			.size = e->size,
			.diff = e->diff,
			.spent = e->spent,
			.returned = e->ret,
		};
	}
	return 0;
}

/* Lease times: CLOCK_MONOTONIC, the same for every process of the host
 * and immune to wall-clock steps (which would stall or double cycles). */
static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static double sync_period(const struct sync_ns *sn)
{
	return sn->def->sync_rate > 0 ? sn->def->sync_rate : SYNC_RETRY_PERIOD;
}

/* Ends a cycle. After a push that failed once sent (a timeout: the store
 * may still apply it later), this worker keeps the lease until its own
 * store connection is back: another worker's connection may look ready
 * while the store is only paused, and its push would be one more batch
 * applied twice. So at most one batch of the node is ever in doubt. */
static void sync_release(struct sync_ns *sn, bool failed_after_send)
{
	struct sync *sy = sn->sy;
	if (sy->flush_mode)
		return;
	if (failed_after_send) {
		sn->holding = shm_lease_renew(sy->t, sn->sid, sy->holder, now_ms(), sn->hold_ms);
		if (!sn->holding)
			sn->retry = false;
		return;
	}
	sn->holding = false;
	uint64_t rate_ms = (uint64_t)(sync_period(sn) * 1000.0);
	/* Due again half a period after this cycle began: every worker's
	 * next tick (one period later, at the node's phase) finds it due,
	 * even when this tick ran late, and none of this tick's late
	 * callers runs a second cycle. */
	shm_lease_release(sy->t, sn->sid, sy->holder, sn->cycle_ms + rate_ms / 2);
}

static void sync_log_failure(struct sync_ns *sn, const char *why)
{
	double now = ev_now(sn->sy->loop);
	if (!sn->failing || now - sn->last_log >= SYNC_LOG_EVERY) {
		sn->last_log = now;
		LOG(LOG_WARN, "namespace %s: %s store: %s; counting locally, %zu counter(s) to "
		    "push later", sn->def->name, sn->ops->name, why, sn->n);
	}
	sn->failing = true;
}

static void sync_on_pushed(void *arg, int status, const char *errstr)
{
	struct sync_ns *sn = arg;
	struct shm_table *t = sn->sy->t;
	size_t ok = 0;

	double now = rl_now();
	for (size_t i = 0; i < sn->n; i++) {
		struct strategy_counter *c = &sn->batch[i];
		if (!c->ok)
			continue;
		ok++;
		shm_ack_diff(t, &sn->ents[i], c->diff);
		shm_grant_unres_add(t, &sn->ents[i], -c->spent, -c->returned);
		/* Totals matter for the current and previous windows only; an
		 * older slot may be reclaimed for another key once its diff is
		 * acknowledged, so it is not written. */
		if (c->start >= window_start(now, c->size) - (int64_t)c->size)
			shm_sync_total(t, &sn->ents[i], c->total);
	}
	sn->unpushed = sn->n - ok;
	/* Unconfirmed counters may still be applied by the store (a timeout):
	 * keep them, with their diffs and token, to resend as they are; the
	 * store adds nothing twice for the same token. */
	sn->retry = false;
	if (ok < sn->n && !sn->sy->flush_mode) {
		size_t k = 0;
		for (size_t i = 0; i < sn->n; i++) {
			if (sn->batch[i].ok)
				continue;
			sn->ents[k] = sn->ents[i];
			sn->batch[k] = sn->batch[i];
			sn->batch[k].key = sn->ents[k].key;
			k++;
		}
		sn->n = k;
		sn->retry = k > 0;
	}
	if (!sn->sy->flush_mode)
		metrics_sync_cycle((int)sn->sid, status >= 0 && sn->unpushed == 0,
				   (double)(now_ms() - sn->cycle_ms) / 1000.0);
	if (status < 0 || sn->unpushed) {
		sync_log_failure(sn, status < 0 && errstr ? errstr : "some counters failed");
	} else if (sn->failing) {
		sn->failing = false;
		LOG(LOG_INFO, "namespace %s: %s store is back; pending diffs pushed", sn->def->name,
		    sn->ops->name);
	}
	sn->busy = false;
	sn->done = true;
	ev_timer_stop(sn->sy->loop, &sn->renew);
	sync_release(sn, sn->retry);
}

static void sync_on_renew(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct sync_ns *sn = container_of(w, struct sync_ns, renew);
	(void)loop, (void)revents;

	if (!shm_lease_renew(sn->sy->t, sn->sid, sn->sy->holder, now_ms(), sn->hold_ms))
		LOG(LOG_WARN, "namespace %s: sync lease lost during a push", sn->def->name);
}

/* Starts a push of the collected batch. Returns 0 or -1 (not started). */
static int sync_push(struct sync_ns *sn)
{
	char err[STRATEGY_ERR_MAX] = "";

	sn->done = false;
	if (!sn->retry)
		sync_token(sn, 'p', ++sn->seq, sn->token);
	for (size_t i = 0; i < sn->n; i++)
		sn->batch[i].ok = false;
	if (sn->ops->push_diffs(sn->st, sn->batch, sn->n, sn->token, sync_on_pushed, sn, err) < 0) {
		sn->unpushed = sn->n;
		sync_log_failure(sn, err[0] ? err : "push refused");
		return -1;
	}
	sn->busy = true;
	return 0;
}

/* While a push is in flight the holder renews its lease. */
static void sync_start_renew(struct sync_ns *sn)
{
	ev_timer_init(&sn->renew, sync_on_renew, sn->hold_ms / 3000.0, sn->hold_ms / 3000.0);
	ev_timer_start(sn->sy->loop, &sn->renew);
}

static void sync_on_heartbeat(void *arg, int status, const char *errstr)
{
	struct sync_ns *sn = arg;
	(void)errstr;

	sn->beating = false;
	if (status == 0 && sn->active > 0)
		shm_set_nodes(sn->sy->t, sn->sid, sn->active);
}

/* Says the node is here and learns how many nodes are (stored in the
 * segment for every worker: the admission margin of issue 9, and
 * /metrics), when no worker of the node did for gap_ms. A node counts for
 * SYNC_BEAT_TTL periods. */
static void sync_heartbeat(struct sync_ns *sn, uint64_t gap_ms)
{
	struct sync *sy = sn->sy;
	char node[17], err[STRATEGY_ERR_MAX];

	if (sn->beating || !sn->ops->heartbeat || !sn->ops->ready(sn->st) || sy->flush_mode ||
	    !shm_beat_take(sy->t, sn->sid, now_ms(), gap_ms))
		return;
	snprintf(node, sizeof(node), "%016llx", (unsigned long long)node_seed);
	sn->beating = true;
	if (sn->ops->heartbeat(sn->st, sn->def->name, strlen(sn->def->name), node, 16, rl_now(),
			       SYNC_BEAT_TTL * SYNC_BEAT_PERIOD, &sn->active, sync_on_heartbeat,
			       sn, err) < 0)
		sn->beating = false;
}

/* The heartbeat's own period, apart from the sync cycle's: every worker's
 * timer fires at the node's phase, the first takes the turn. Half a
 * period between two beats: a late timer of another worker does not
 * beat again. */
static void sync_on_beat(struct ev_loop *loop, ev_periodic *w, int revents)
{
	struct sync_ns *sn = container_of(w, struct sync_ns, beat);
	(void)loop, (void)revents;

	sync_heartbeat(sn, (uint64_t)(SYNC_BEAT_PERIOD * 500.0));
}

static void sync_on_tick(struct ev_loop *loop, ev_periodic *w, int revents)
{
	struct sync_ns *sn = container_of(w, struct sync_ns, tick);
	struct sync *sy = sn->sy;
	uint64_t ms = now_ms();
	(void)loop, (void)revents;

	if (sn->sid < METRICS_NS)
		atomic_store_explicit(&metrics_me->store_up[sn->sid], sn->ops->ready(sn->st) ? 1 : 0,
				      memory_order_relaxed);
	/* Until the node count is known, the cycles ask for it too (at
	 * start the store may not be connected when the first beat is due). */
	if (shm_nodes(sy->t, sn->sid) == 0)
		sync_heartbeat(sn, (uint64_t)(sync_period(sn) * 500.0));
	if (sn->busy)
		return;
	if (sn->holding) {
		/* After a failed push: keep the lease, and push again only
		 * once this worker's own connection is back. */
		if (!shm_lease_renew(sy->t, sn->sid, sy->holder, ms, sn->hold_ms)) {
			/* Lost (we stalled past its expiry): the worker that took
			 * it pushes every diff, ours included. */
			sn->holding = false;
			sn->retry = false;
			return;
		}
		if (!sn->ops->ready(sn->st)) {
			if (!sy->flush_mode)
				metrics_sync_skipped((int)sn->sid);
			return;
		}
	} else if (!shm_lease_take(sy->t, sn->sid, sy->holder, ms, sn->hold_ms)) {
		return;
	}
	sn->cycle_ms = ms;
	if (sn->retry) {
		/* First the unconfirmed push, unchanged and with its token: the
		 * next cycle collects what came since. */
		if (sync_push(sn) < 0) {
			if (!sy->flush_mode)
				metrics_sync_skipped((int)sn->sid);
			sync_release(sn, true);
		} else {
			sync_start_renew(sn);
		}
		return;
	}
	/* sync_rate 0: hits refresh themselves; only unconfirmed ones are left. */
	if (sync_collect(sn, rl_now(), sn->def->sync_rate == 0) < 0) {
		LOG(LOG_ERR, "namespace %s: out of memory for a sync batch", sn->def->name);
		sync_release(sn, false);
		return;
	}
	/* A push refused before sending (not connected) leaves no doubt. */
	if (sn->n == 0 || sync_push(sn) < 0) {
		if (sn->n > 0 && !sy->flush_mode)
			metrics_sync_skipped((int)sn->sid);
		sync_release(sn, false);
		return;
	}
	sync_start_renew(sn);
}

/* ---- seeding first-seen keys (sync_rate > 0) ----
 * A slot created by a hit is queued; a short timer gathers the queue into
 * one read-only push of each key's current and previous windows, whose
 * totals are written into the table (the previous window's slot is created
 * if the cluster counted something there). The hit itself was answered
 * from the local count already. */

static void sync_seed_flush(struct sync_ns *sn);
static void sync_on_seed_timer(struct ev_loop *loop, ev_timer *w, int revents);

static void sync_on_seeded(void *arg, int status, const char *errstr)
{
	struct sync_ns *sn = arg;
	struct sync *sy = sn->sy;
	double now = rl_now();
	(void)status, (void)errstr;

	for (size_t i = 0; i < sn->nseeding; i++) {
		struct strategy_counter *cur = &sn->seed_c[2 * i], *prev = cur + 1;
		if (cur->ok)
			shm_sync_total(sy->t, &sn->seed_e[i], cur->total);
		if (prev->ok)
			rl_seed(sy->rl, (int)sn->ns, prev->key, prev->key_len, prev->size, prev->start,
				prev->total, now);
	}
	sn->seed_busy = false;
	if (sn->nqueued > 0 && !sy->stopping && !ev_is_active(&sn->seed_timer)) {
		ev_timer_set(&sn->seed_timer, SYNC_SEED_DELAY, 0.);
		ev_timer_start(sy->loop, &sn->seed_timer);
	}
}

static void sync_seed_flush(struct sync_ns *sn)
{
	char err[STRATEGY_ERR_MAX];

	if (sn->seed_busy || sn->nqueued == 0)
		return;
	if (!sn->ops->ready(sn->st)) {
		/* The store is away: the next cycle refreshes these keys. */
		sn->nqueued = 0;
		return;
	}
	memcpy(sn->seed_e, sn->seed_q, sn->nqueued * sizeof(*sn->seed_e));
	sn->nseeding = sn->nqueued;
	sn->nqueued = 0;
	for (size_t i = 0; i < sn->nseeding; i++) {
		struct shm_entry *e = &sn->seed_e[i];
		struct strategy_counter c = {
			.ns = sn->def->name, .ns_len = strlen(sn->def->name), .key = e->key,
			.key_len = e->keylen, .start = e->start, .size = e->size, .diff = 0,
		};
		sn->seed_c[2 * i] = c;
		c.start -= (int64_t)e->size;
		sn->seed_c[2 * i + 1] = c;
	}
	/* Reads only (diffs of 0): nothing to apply twice, no token. */
	if (sn->ops->push_diffs(sn->st, sn->seed_c, 2 * sn->nseeding, NULL, sync_on_seeded, sn,
				err) == 0)
		sn->seed_busy = true;
}

static void sync_on_seed_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct sync_ns *sn = container_of(w, struct sync_ns, seed_timer);
	(void)loop, (void)revents;
	sync_seed_flush(sn);
}

static struct sync_ns *sync_find_ns(struct sync *sy, unsigned ns)
{
	for (size_t i = 0; i < sy->n; i++)
		if (sy->ns[i].ns == ns)
			return &sy->ns[i];
	return NULL;
}

void sync_seed(struct sync *sy, unsigned ns, uint32_t idx)
{
	struct sync_ns *sn = sy && !sy->stopping ? sync_find_ns(sy, ns) : NULL;

	if (!sn || !sn->seed_q || sn->nqueued == SYNC_SEED_MAX)
		return;
	if (shm_read(sy->t, idx, &sn->seed_q[sn->nqueued]) < 0)
		return;
	sn->nqueued++;
	if (!sn->seed_busy && !ev_is_active(&sn->seed_timer)) {
		ev_timer_set(&sn->seed_timer, SYNC_SEED_DELAY, 0.);
		ev_timer_start(sy->loop, &sn->seed_timer);
	}
}

static void sync_gather_done(void *arg, int status, const char *errstr);

/* ---- sync_rate 0 calls in doubt (struct sync_doubt) ---- */

static void sync_doubt_free(struct sync_doubt *d)
{
	free(d->ns_name);
	free(d->store);
	free(d->opts);
	free(d->a);
	free(d->c);
	free(d->fix);
	free(d->keys);
	free(d);
}

/* Unlinks the first doubt of sn and frees it. */
static void sync_doubt_pop(struct sync_ns *sn)
{
	struct sync_doubt *d = sn->doubts;

	sn->doubts = d->next;
	sn->ndoubts--;
	sync_doubt_free(d);
}

static void sync_doubt_log(struct sync *sy, const char *ns, const char *why)
{
	double now = ev_now(sy->loop);

	if (now - sy->doubt_log < SYNC_LOG_EVERY && sy->doubt_log > 0)
		return;
	sy->doubt_log = now;
	LOG(LOG_WARN, "namespace \"%s\": hits in doubt given up (%s): a store that applied "
	    "them late has them counted twice", ns, why);
}

/* A call in doubt for sn: a copy (keys included) of the n admissions a
 * or counters c sent with token; [i] is settled if the store did not
 * answer it and, for a push, it carried a diff (reads settle nothing).
 * *out NULL when nothing is to settle. Returns 0, or -1 out of memory. */
static int sync_doubt_new(struct sync_ns *sn, const char *token,
			  const struct strategy_admit *a, const struct strategy_counter *c, size_t n,
			  struct sync_doubt **out)
{
	struct sync_doubt *d;
	size_t nfix = 0, klen = 0, off = 0;

	*out = NULL;
	for (size_t i = 0; i < n; i++)
		nfix += a ? !a[i].ok
			  : !c[i].ok && (c[i].diff != 0 || c[i].spent != 0 || c[i].returned != 0);
	if (nfix == 0)
		return 0;
	for (size_t i = 0; i < n; i++)
		klen += a ? a[i].key_len : c[i].key_len;
	d = calloc(1, sizeof(*d));
	if (d) {
		if (a)
			d->a = malloc(n * sizeof(*d->a));
		else
			d->c = malloc(n * sizeof(*d->c));
		d->fix = calloc(n, sizeof(*d->fix));
		d->keys = malloc(klen ? klen : 1);
	}
	if (!d || !(d->a || d->c) || !d->fix || !d->keys) {
		if (d)
			sync_doubt_free(d);
		return -1;
	}
	d->sn = sn;
	snprintf(d->token, sizeof(d->token), "%s", token);
	d->n = n;
	d->nfix = nfix;
	d->since = ev_now(sn->sy->loop);
	for (size_t i = 0; i < n; i++) {
		const char **key, **ns;
		bool *ok;
		size_t len;

		if (a) {
			d->a[i] = a[i];
			key = &d->a[i].key, ns = &d->a[i].ns, ok = &d->a[i].ok;
			len = d->a[i].key_len;
		} else {
			d->c[i] = c[i];
			key = &d->c[i].key, ns = &d->c[i].ns, ok = &d->c[i].ok;
			len = d->c[i].key_len;
		}
		d->fix[i] = !*ok && (a || c[i].diff != 0 || c[i].spent != 0 || c[i].returned != 0);
		memcpy(d->keys + off, *key, len);
		*key = d->keys + off;
		*ns = sn->def->name;
		*ok = false;
		off += len;
	}
	*out = d;
	return 0;
}

/* A call answered with some items undecided, after it was sent: kept to
 * send again (a copy: the gather is reused). */
static void sync_doubt_keep(struct sync_gather *g)
{
	struct sync_ns *sn = g->sn;
	struct sync_doubt *d, **tail;

	if (!sn)
		return;
	if (sync_doubt_new(sn, g->token, g->na ? g->a : NULL, g->na ? NULL : g->c,
			   g->na ? g->na : g->n, &d) < 0) {
		sync_doubt_log(g->sy, sn->def->name, "out of memory");
		return;
	}
	if (!d)
		return;
	if (sn->ndoubts >= SYNC_DOUBT_MAX) {
		sync_doubt_free(d);
		sync_doubt_log(g->sy, sn->def->name, "too many");
		return;
	}
	for (tail = &sn->doubts; *tail; tail = &(*tail)->next)
		;
	*tail = d;
	sn->ndoubts++;
	if (!ev_is_active(&g->sy->doubt_timer))
		ev_timer_again(g->sy->loop, &g->sy->doubt_timer);
}

/* What the store counted for an item in doubt is taken back from the
 * slot's diff, where the node counted it itself: a push's diff; an
 * admission's hit if admitted or count_denied. An admission's grant,
 * counted for this node, is this node's to use (or give back with a
 * sync). */
static void sync_doubt_settle(struct sync_ns *sn, const struct sync_doubt *d, size_t i)
{
	struct rl *rl = sn->sy->rl;
	const struct strategy_admit *a = d->a ? &d->a[i] : NULL;
	const struct strategy_counter *c = d->c ? &d->c[i] : NULL;
	double now = rl_now();
	double counted = a ? ((a->admitted || a->count_denied) ? a->cost : 0) : c->diff;
	const char *key = a ? a->key : c->key;
	size_t key_len = a ? a->key_len : c->key_len;
	uint32_t size = a ? a->size : c->size;
	int64_t start = a ? a->start : c->start;

	/* A negative diff (a grant given back, in a sync cycle's push handed
	 * over at a reload) is put back the same way. */
	if (counted != 0 &&
	    (counted > 0 ? rl_unkeep(rl, (int)sn->ns, key, key_len, size, start, counted, now)
			 : rl_keep(rl, (int)sn->ns, key, key_len, size, start, -counted, now)) < 0)
		SYNC_HIT_LOG(LOG_ERR, "namespace \"%s\": a hit in doubt could not be settled (%s): "
			     "it counts twice", sn->def->name, rl_status_str(rl_errno(rl)));
	/* A push's grants reported spent or given back: the store has them. */
	if (c && (c->spent != 0 || c->returned != 0) &&
	    rl_unreserve(rl, (int)sn->ns, key, key_len, size, start, c->spent, c->returned) < 0)
		SYNC_HIT_LOG(LOG_ERR, "namespace \"%s\": grant hits in doubt could not be "
			     "settled (%s): %g count twice", sn->def->name,
			     rl_status_str(rl_errno(rl)), c->spent);
	if (a && a->grant > 0 &&
	    rl_grant(rl, (int)sn->ns, a->key, a->key_len, a->size, a->start, a->grant, now) < 0)
		SYNC_HIT_LOG(LOG_WARN, "namespace \"%s\": a grant of the store could not be kept "
			     "(%s): %g of the limit stay counted until the window ends",
			     sn->def->name, rl_status_str(rl_errno(rl)), a->grant);
}

static void sync_on_doubt_done(void *arg, int status, const char *errstr);

/* Sends sn's oldest call in doubt again, if its store is up and none is
 * being sent. */
static void sync_doubt_send(struct sync_ns *sn)
{
	struct sync_doubt *d = sn->doubts;
	char err[STRATEGY_ERR_MAX];

	if (!d || sn->doubt_busy || !sn->ops->ready(sn->st))
		return;
	sn->doubt_busy = true;
	if ((d->a ? sn->ops->admit(sn->st, d->a, d->n, d->token, sync_on_doubt_done, d, err)
		  : sn->ops->push_diffs(sn->st, d->c, d->n, d->token, sync_on_doubt_done, d,
					err)) < 0)
		sn->doubt_busy = false;
}

static void sync_on_doubt_done(void *arg, int status, const char *errstr)
{
	struct sync_doubt *d = arg;
	struct sync_ns *sn = d->sn;
	(void)status, (void)errstr;

	sn->doubt_busy = false;
	if (sn->sy->stopping)
		return;
	for (size_t i = 0; i < d->n; i++) {
		if (!d->fix[i] || !(d->a ? d->a[i].ok : d->c[i].ok))
			continue;
		sync_doubt_settle(sn, d, i);
		d->fix[i] = false;
		d->nfix--;
	}
	if (d->nfix == 0) {
		sync_doubt_pop(sn);
		sync_doubt_send(sn);        /* the next at once: a reload waits for them */
	}
}

/* Sends the oldest doubt of every namespace again, one at a time per
 * namespace, when its store is up. */
static void sync_on_doubt_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct sync *sy = container_of(w, struct sync, doubt_timer);
	bool any = false;
	(void)revents;

	for (size_t i = 0; i < sy->n; i++) {
		struct sync_ns *sn = &sy->ns[i];

		while (sn->doubts && !sn->doubt_busy &&
		       ev_now(loop) - sn->doubts->since > SYNC_DOUBT_TTL) {
			sync_doubt_log(sy, sn->def->name, "the store did not answer in time");
			sync_doubt_pop(sn);
		}
		any = any || sn->doubts;
		sync_doubt_send(sn);
	}
	if (!any)
		ev_timer_stop(loop, w);
}

/* Points the calls of d at namespace name (their `ns`). */
static void sync_doubt_rename(struct sync_doubt *d, const char *name)
{
	for (size_t i = 0; i < d->n; i++) {
		if (d->a)
			d->a[i].ns = name;
		else
			d->c[i].ns = name;
	}
}

struct sync_doubts {
	struct sync_doubt *head;
};

/* Detaches doubt d (sn's, already unlinked) into a handover list at *tail,
 * with its namespace's identity copied (the definitions change before the
 * next sync exists). Returns the new tail; on failure d is freed and
 * counted in *lost. */
static struct sync_doubt **sync_doubt_detach(struct sync_ns *sn, struct sync_doubt *d,
					     struct sync_doubt **tail, size_t *lost)
{
	d->next = NULL;
	d->sn = NULL;
	free(d->ns_name), free(d->store), free(d->opts);
	d->ns_name = strdup(sn->def->name);
	d->store = strdup(sn->def->strategy);
	d->opts = strdup(sn->def->strategy_opts ? sn->def->strategy_opts : "");
	if (!d->ns_name || !d->store || !d->opts) {
		sync_doubt_free(d);
		(*lost)++;
		return tail;
	}
	sync_doubt_rename(d, d->ns_name);
	*tail = d;
	return &d->next;
}

struct sync_doubts *sync_doubts_take(struct sync *sy)
{
	struct sync_doubts *out = sy ? calloc(1, sizeof(*out)) : NULL;
	struct sync_doubt **tail = out ? &out->head : NULL;

	for (size_t i = 0; out && i < sy->n; i++) {
		struct sync_ns *sn = &sy->ns[i];
		struct sync_doubt *d, **link = &sn->doubts;
		size_t lost = 0;

		/* The cycle's push in flight, or the doubt being resent (the
		 * first), stays: sync_stop fails it (what a failing call
		 * confirmed in part is acknowledged by its callback, so it
		 * cannot be copied now). */
		if (sn->doubt_busy && *link)
			link = &(*link)->next;
		while ((d = *link)) {
			*link = d->next;
			sn->ndoubts--;
			tail = sync_doubt_detach(sn, d, tail, &lost);
		}
		if (!sn->busy && sn->retry && sn->n > 0) {
			/* The sync cycle's unconfirmed push, as a push in doubt:
			 * once answered, what it counted is taken back from the
			 * diffs, which the next sync pushes again. */
			if (sync_doubt_new(sn, sn->token, NULL, sn->batch, sn->n, &d) < 0)
				lost++;
			else if (d)
				tail = sync_doubt_detach(sn, d, tail, &lost);
			sn->retry = false;
		}
		if (lost)
			sync_doubt_log(sy, sn->def->name, "out of memory at a reload");
	}
	return out;
}

void sync_doubts_give(struct sync *sy, struct sync_doubts *list)
{
	struct sync_doubt *d, *next;
	size_t gone = 0, full = 0;
	const char *name = "";

	if (!list)
		return;
	for (d = list->head; d; d = next) {
		struct sync_ns *sn = NULL;
		struct sync_doubt **tail;

		next = d->next;
		d->next = NULL;
		for (size_t i = 0; sy && i < sy->n && !sn; i++) {
			const struct ns_def *def = sy->ns[i].def;

			if (strcmp(def->name, d->ns_name) == 0 && strcmp(def->strategy, d->store) == 0 &&
			    strcmp(def->strategy_opts ? def->strategy_opts : "", d->opts) == 0)
				sn = &sy->ns[i];
		}
		if (!sn || sn->ndoubts >= SYNC_DOUBT_MAX) {
			gone += !sn;
			full += sn != NULL;
			if (!name[0])
				name = d->ns_name;
			LOG(LOG_DEBUG, "namespace \"%s\": a call in doubt dropped at the reload (%s)",
			    d->ns_name, sn ? "too many" : "namespace gone, or its store changed");
			sync_doubt_free(d);
			continue;
		}
		d->sn = sn;
		sync_doubt_rename(d, sn->def->name);
		free(d->ns_name), free(d->store), free(d->opts);
		d->ns_name = d->store = d->opts = NULL;
		for (tail = &sn->doubts; *tail; tail = &(*tail)->next)
			;
		*tail = d;
		sn->ndoubts++;
		if (!ev_is_active(&sy->doubt_timer))
			ev_timer_again(sy->loop, &sy->doubt_timer);
	}
	if (gone || full)
		LOG(LOG_WARN, "reload: %zu call(s) in doubt dropped (%zu of namespaces gone or whose "
		    "store changed, %zu over the cap; \"%s\" first): a store that applied them "
		    "late has their hits counted twice", gone + full, gone, full, name);
	free(list);
}

static int sync_park(struct sync *sy, struct sync_ns *sn, struct sync_gather *g, bool admit);

/* Sends a gather to its store: the pushes, or the admissions. While the
 * store is connecting (a worker's first connection, a reconnect) the
 * gather is parked until the attempt ends, at most until g->until; a
 * store away, or a refusal, fails it through its callbacks. */
static void sync_send(struct sync *sy, struct sync_ns *sn, struct sync_gather *g, bool admit)
{
	char err[STRATEGY_ERR_MAX] = "not connected";
	int rc;

	if (!sn->ops->ready(sn->st)) {
		if (sn->ops->connecting(sn->st) && ev_now(sy->loop) < g->until) {
			if (sync_park(sy, sn, g, admit) == 0)
				return;
		} else if (sn->ops->connecting(sn->st)) {
			snprintf(err, sizeof(err), "not connected (still connecting after %g s)",
				 SYNC_PARK_LIMIT);
		}
		sync_gather_done(g, -1, err);
		return;
	}
	g->sn = sn;
	if (!g->token[0])
		sync_token(sn, admit ? 'a' : 's', ++sn->aseq, g->token);
	rc = admit ? sn->ops->admit(sn->st, g->a, g->na, g->token, sync_gather_done, g, err)
		   : sn->ops->push_diffs(sn->st, g->c, g->n, g->token, sync_gather_done, g, err);
	if (rc < 0)
		sync_gather_done(g, -1, err);
	else
		g->sent = true;
}

/* Every parked gather is sent again (sent, parked again, or failed). */
static void sync_on_park_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct sync *sy = container_of(w, struct sync, park_timer);
	struct sync_parked *list = sy->parked;
	size_t n = sy->nparked;

	(void)revents;
	/* Sending may park again: into the other list. */
	sy->parked = sy->parked_spare;
	sy->parked_spare = list;
	sy->nparked = 0;
	for (size_t i = 0; i < n; i++)
		sync_send(sy, list[i].sn, list[i].g, list[i].admit);
	if (sy->nparked == 0)
		ev_timer_stop(loop, w);
}

/* Parks a gather until its connecting store is ready. Returns 0 or -1 (no
 * room). */
static int sync_park(struct sync *sy, struct sync_ns *sn, struct sync_gather *g, bool admit)
{
	if (!sy->parked) {
		sy->parked = malloc(SYNC_PARK_MAX * sizeof(*sy->parked));
		sy->parked_spare = malloc(SYNC_PARK_MAX * sizeof(*sy->parked_spare));
		if (!sy->parked || !sy->parked_spare) {
			free(sy->parked), free(sy->parked_spare);
			sy->parked = sy->parked_spare = NULL;
			return -1;
		}
		ev_timer_init(&sy->park_timer, sync_on_park_timer, SYNC_PARK_POLL, SYNC_PARK_POLL);
	}
	if (sy->nparked >= SYNC_PARK_MAX)
		return -1;
	sy->parked[sy->nparked++] = (struct sync_parked){ .sn = sn, .g = g, .admit = admit };
	if (!ev_is_active(&sy->park_timer))
		ev_timer_again(sy->loop, &sy->park_timer);
	return 0;
}

/* A gathered push answered: each request gets its counters' totals and
 * its callback, then the gather is reused. */
static void sync_gather_done(void *arg, int status, const char *errstr)
{
	struct sync_gather *g = arg;
	struct sync *sy = g->sy;
	size_t off = 0;

	if (g->sent && !sy->stopping)
		sync_doubt_keep(g);

	for (size_t i = 0; i < g->nreq; i++) {
		struct sync_req *r = &g->req[i];

		for (size_t j = 0; j < r->n; j++) {
			if (r->a) {
				r->a[j] = g->a[off + j];
				continue;
			}
			r->c[j].total = g->c[off + j].total;
			r->c[j].ok = g->c[off + j].ok;
		}
		off += r->n;
		r->cb(r->arg, status, errstr);
	}
	g->n = g->na = g->nreq = 0;
	g->next = sy->free_gathers;
	sy->free_gathers = g;
}

/* Before the loop waits: every namespace's gathered pushes and
 * admissions leave, one call each. */
static void sync_on_gather(struct ev_loop *loop, ev_prepare *w, int revents)
{
	struct sync *sy = container_of(w, struct sync, gather_w);

	(void)revents;
	ev_prepare_stop(loop, w);
	for (size_t i = 0; i < sy->n; i++) {
		struct sync_ns *sn = &sy->ns[i];
		struct sync_gather *g;

		if ((g = sn->gather)) {
			sn->gather = NULL;
			sync_send(sy, sn, g, false);
		}
		if ((g = sn->gather_adm)) {
			sn->gather_adm = NULL;
			sync_send(sy, sn, g, true);
		}
	}
}

/* Grows an array of elements of size sz to hold need, doubling. */
static int sync_grow(void **p, size_t *cap, size_t need, size_t sz)
{
	size_t c = *cap ? *cap : 16;
	void *np;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	if (!(np = realloc(*p, c * sz)))
		return -1;
	*p = np;
	*cap = c;
	return 0;
}

/* The gather *slot of a namespace (taken from the free list if empty),
 * with room for n more counters or admissions and one more request. NULL
 * when out of memory. */
static struct sync_gather *sync_gather_room(struct sync *sy, struct sync_gather **slot,
					    size_t n, bool admit)
{
	struct sync_gather *g = *slot;
	int rc;

	if (!g) {
		if ((g = sy->free_gathers))
			sy->free_gathers = g->next;
		else if (!(g = calloc(1, sizeof(*g))))
			return NULL;
		g->sy = sy;
		g->sn = NULL;
		g->sent = false;
		g->token[0] = '\0';
		g->n = g->na = g->nreq = 0;
		g->until = ev_now(sy->loop) + SYNC_PARK_LIMIT;
		*slot = g;
	}
	rc = admit ? sync_grow((void **)&g->a, &g->acap, g->na + n, sizeof(*g->a))
		   : sync_grow((void **)&g->c, &g->cap, g->n + n, sizeof(*g->c));
	if (rc < 0 || sync_grow((void **)&g->req, &g->reqcap, g->nreq + 1, sizeof(*g->req)) < 0) {
		if (g->nreq == 0) {
			*slot = NULL;
			g->next = sy->free_gathers;
			sy->free_gathers = g;
		}
		return NULL;
	}
	if (!ev_is_active(&sy->gather_w))
		ev_prepare_start(sy->loop, &sy->gather_w);
	return g;
}

/* sync_rate 0: adds a push to its namespace's gather (sent before the loop
 * waits again). Returns 0 (cb runs once, later), or -1 when the store is
 * neither up nor connecting, or out of memory (cb never runs). Once warm,
 * nothing is allocated. */
static int sync_push_later(struct sync *sy, unsigned ns, struct strategy_counter *c, size_t n,
			   strategy_done_cb cb, void *arg)
{
	struct sync_ns *sn = sy && !sy->stopping ? sync_find_ns(sy, ns) : NULL;
	struct sync_gather *g;

	if (!sn || (!sn->ops->ready(sn->st) && !sn->ops->connecting(sn->st)) ||
	    !(g = sync_gather_room(sy, &sn->gather, n, false)))
		return -1;
	memcpy(g->c + g->n, c, n * sizeof(*c));
	g->n += n;
	g->req[g->nreq++] = (struct sync_req){ .c = c, .n = n, .cb = cb, .arg = arg };
	return 0;
}

/* Admissions, gathered the same way (one admit call per namespace and
 * loop iteration); while the store is connecting they wait for it. */
static int sync_admit_later(struct sync *sy, unsigned ns, struct strategy_admit *a, size_t n,
			    strategy_done_cb cb, void *arg)
{
	struct sync_ns *sn = sy && !sy->stopping ? sync_find_ns(sy, ns) : NULL;
	struct sync_gather *g;

	if (!sn || !sn->ops->admit ||
	    (!sn->ops->ready(sn->st) && !sn->ops->connecting(sn->st)) ||
	    !(g = sync_gather_room(sy, &sn->gather_adm, n, true)))
		return -1;
	memcpy(g->a + g->na, a, n * sizeof(*a));
	g->na += n;
	g->req[g->nreq++] = (struct sync_req){ .a = a, .n = n, .cb = cb, .arg = arg };
	return 0;
}

/* The nodes sharing a namespace's limits, for grants: as last counted, 1
 * until then. A count too low only makes grants bigger, never lets the
 * cluster pass a limit: the store counts a grant when it gives it. */
static unsigned sync_nodes(const struct shm_table *t, unsigned ns)
{
	unsigned n = shm_nodes(t, ns);

	return n > 0 ? n : 1;
}

/* An admission on slot idx is sent: counted in flight, and the grant it
 * asks for (0: none): twice the node's demand on the key in the last sync
 * cycle; before the node has seen a cycle of it, 1/SYNC_GRANT_FIRST_SHARE
 * of the limit's share of a node (a small limit gets none: its first hits
 * go to the store one by one). Only an admission alone in flight for its
 * slot asks: the hits of a burst sent together would all be decided by
 * the store before a grant came back, and a grant nobody uses only holds
 * headroom (docs/CLUSTER.md, "The bound"). */
static double sync_grant_want(struct shm_table *t, uint32_t idx, double limit, unsigned nodes)
{
	double last;

	if (idx == UINT32_MAX)
		return 0;
	if (shm_grant_flight(t, idx, 1) > 1 || nodes == 0 || (last = shm_grant_begin(t, idx)) < 0)
		return 0;
	return last > 0 ? 2 * last : limit / (SYNC_GRANT_FIRST_SHARE * nodes);
}

static void sync_hits_on_pushed(void *arg, int status, const char *errstr)
{
	struct sync_hits *b = arg;

	if (status < 0 && !b->why[0])
		snprintf(b->why, sizeof(b->why), "%s", errstr ? errstr : "failed");
	if (--b->outstanding == 0)
		b->done(b->arg);
}

int sync_hits_push(struct sync *sy, struct sync_hits *b, double now, void (*done)(void *arg),
		   void *arg)
{
	b->nc = 0;
	b->outstanding = 0;
	b->why[0] = '\0';
	b->now = now;
	b->done = done;
	b->arg = arg;
	for (size_t i = 0; i < b->n; i++)
		b->h[i].ci = -1;
	if (!sy) {
		snprintf(b->why, sizeof(b->why), "no sync");
		return 0;
	}
	b->na = 0;
	for (size_t i = 0; i < b->n; i++) {
		int ns = b->h[i].ns;
		if (b->h[i].ci >= 0)
			continue;
		size_t first = b->nc, afirst = b->na;
		const char *nsname = rl_namespace_def(sy->rl, ns)->name;
		for (size_t j = i; j < b->n; j++) {
			struct sync_hit *h = &b->h[j];
			struct shm_entry *e = &h->e;
			if (h->ns != ns)
				continue;
			if (h->idx == UINT32_MAX || shm_read(sy->t, h->idx, e) < 0) {
				/* No local slot (a read of a key this node has not
				 * counted): ask the store, seed the slot from it. */
				e->idx = UINT32_MAX;
				e->keylen = (uint8_t)h->keylen;
				memcpy(e->key, h->key, h->keylen);
				e->start = window_start(now, h->size);
				e->size = h->size;
			}
			if (h->admit) {
				h->ci = (int)b->na;
				b->a[b->na++] = (struct strategy_admit){
					.ns = nsname, .ns_len = strlen(nsname), .key = e->key,
					.key_len = e->keylen, .start = e->start, .size = e->size,
					.cost = h->cost, .limit = h->limit, .weight = h->weight,
					.count_denied = h->count_denied,
					.nodes = sync_nodes(sy->t, rl_shm_ns(sy->rl, ns)),
				};
				b->a[b->na - 1].want = sync_grant_want(sy->t, e->idx, h->limit,
								       b->a[b->na - 1].nodes);
				continue;
			}
			h->ci = (int)b->nc;
			b->c[b->nc++] = (struct strategy_counter){
				.ns = nsname, .ns_len = strlen(nsname), .key = e->key,
				.key_len = e->keylen, .start = e->start, .size = e->size,
				.diff = h->diff,
			};
			if (h->with_prev)
				b->c[b->nc++] = (struct strategy_counter){
					.ns = nsname, .ns_len = strlen(nsname), .key = e->key,
					.key_len = e->keylen, .start = e->start - (int64_t)e->size,
					.size = e->size, .diff = 0,
				};
		}
		if (b->nc > first) {
			if (sync_push_later(sy, (unsigned)ns, &b->c[first], b->nc - first,
					    sync_hits_on_pushed, b) == 0)
				b->outstanding++;
			else if (!b->why[0])
				snprintf(b->why, sizeof(b->why), "not connected");
		}
		if (b->na > afirst) {
			if (sync_admit_later(sy, (unsigned)ns, &b->a[afirst], b->na - afirst,
					     sync_hits_on_pushed, b) == 0)
				b->outstanding++;
			else if (!b->why[0])
				snprintf(b->why, sizeof(b->why), "not connected");
		}
	}
	return b->outstanding > 0;
}

/* A counted hit the store did not confirm goes into its slot's diff; if
 * the slot was evicted meanwhile (its diff was 0 while the push was in
 * flight), into a new one. */
static void sync_keep_entry(struct rl *rl, int ns, const struct shm_entry *e, double diff)
{
	if (!(diff > 0))
		return;
	/* idx UINT32_MAX: the slot was gone when the push was built. */
	if (e->idx != UINT32_MAX && shm_restore_diff(rl_shm(rl), e, diff) == 0)
		return;
	if (rl_keep(rl, ns, e->key, e->keylen, e->size, e->start, diff, rl_now()) < 0)
		SYNC_HIT_LOG(LOG_ERR, "namespace \"%s\": a hit the store did not confirm could not "
			     "be kept (%s)", rl_namespace_def(rl, ns)->name,
			     rl_status_str(rl_errno(rl)));
}

void sync_hit_keep(struct rl *rl, const struct sync_hit *h)
{
	struct shm_entry e;

	if (h->diff > 0 && h->idx != UINT32_MAX && shm_read(rl_shm(rl), h->idx, &e) == 0)
		sync_keep_entry(rl, h->ns, &e, h->diff);
}

/* The hits of slot e's window as this node knows them once an admission's
 * answer is in its table: the store's count, and the node's own hits the
 * store has not counted yet (its diff, the grant hits it has not reported
 * spent), what answers from a grant say too; `store` (the store's count)
 * when the slot is gone. Never what is left of a grant: the store holds
 * it apart, and nobody's grant is hits. */
static double sync_view(const struct shm_table *t, const struct shm_entry *e, double store)
{
	struct shm_entry now;

	if (e->idx == UINT32_MAX || shm_read(t, e->idx, &now) < 0 || now.meta != e->meta)
		return store;
	return now.count - shm_grant_left(t, e->idx);
}

void sync_hits_apply(struct rl *rl, struct sync_hits *b)
{
	for (size_t i = 0; i < b->n; i++) {
		struct sync_hit *h = &b->h[i];
		h->ok = h->prev_ok = h->admitted = false;
		h->grant = 0;
		if (h->admit) {
			/* Nothing was counted here: a failed admission leaves
			 * nothing to keep (the caller decides locally). */
			const struct strategy_admit *a = h->ci >= 0 ? &b->a[h->ci] : NULL;
			if (a && h->e.idx != UINT32_MAX)
				shm_grant_flight(rl_shm(rl), h->e.idx, -1);
			if (a && a->want > 0)
				shm_grant_end(rl_shm(rl), h->e.idx);
			if (!a || !a->ok)
				continue;
			if (h->e.idx != UINT32_MAX)
				shm_sync_total(rl_shm(rl), &h->e, a->current);
			else
				rl_seed(rl, h->ns, a->key, a->key_len, a->size, a->start, a->current,
					b->now);
			if (a->weight > 0)
				rl_seed(rl, h->ns, a->key, a->key_len, a->size,
					a->start - (int64_t)a->size, a->previous, b->now);
			if (a->grant > 0 &&
			    rl_grant(rl, h->ns, a->key, a->key_len, a->size, a->start, a->grant,
				     b->now) < 0)
				SYNC_HIT_LOG(LOG_WARN, "namespace \"%s\": a grant of the store could "
					     "not be kept (%s): %g of the limit stay counted until "
					     "the window ends", rl_namespace_def(rl, h->ns)->name,
					     rl_status_str(rl_errno(rl)), a->grant);
			h->ok = h->prev_ok = true;
			h->admitted = a->admitted;
			h->grant = a->grant;
			h->total = sync_view(rl_shm(rl), &h->e, a->current);
			h->prev_total = a->previous;
			continue;
		}
		if (h->ci < 0) {
			/* never pushed */
			sync_hit_keep(rl, h);
			continue;
		}
		struct strategy_counter *cur = &b->c[h->ci];
		if (!cur->ok) {
			sync_keep_entry(rl, h->ns, &h->e, h->diff);
			continue;
		}
		if (h->e.idx != UINT32_MAX)
			shm_sync_total(rl_shm(rl), &h->e, cur->total);
		else
			rl_seed(rl, h->ns, cur->key, cur->key_len, cur->size, cur->start, cur->total,
				b->now);
		h->ok = true;
		h->total = cur->total;
		if (h->with_prev) {
			struct strategy_counter *prev = cur + 1;
			if (prev->ok) {
				h->prev_ok = true;
				h->prev_total = prev->total;
				rl_seed(rl, h->ns, prev->key, prev->key_len, prev->size, prev->start,
					prev->total, b->now);
			}
		}
	}
}

/* A sync of the namespaces with sync_rate >= 0 (only ns_only if >= 0). */
static struct sync *sync_new(struct ev_loop *loop, struct rl *rl, int worker_id, bool flush_mode,
			     int ns_only, bool *failed)
{
	struct sync *sy = calloc(1, sizeof(*sy));
	if (!sy) {
		*failed = true;
		return NULL;
	}
	sy->loop = loop;
	sy->rl = rl;
	sy->t = rl_shm(rl);
	ev_prepare_init(&sy->gather_w, sync_on_gather);
	ev_init(&sy->doubt_timer, sync_on_doubt_timer);
	sy->doubt_timer.repeat = SYNC_DOUBT_POLL;
	sy->holder = (uint16_t)(worker_id + 1);
	if (getrandom(&sy->nonce, sizeof(sy->nonce), 0) != sizeof(sy->nonce))
		sy->nonce = (uint64_t)getpid() << 32 ^ (uint64_t)(rl_now() * 1e6) ^
			    (uint64_t)(uintptr_t)sy;
	sy->flush_mode = flush_mode;
	for (size_t i = 0; i < rl_namespace_count(rl); i++) {
		const struct ns_def *nc = rl_namespace_def(rl, (int)i);
		if (nc->sync_rate < 0 || (ns_only >= 0 && (size_t)ns_only != i))
			continue;
		struct sync_ns *sn = &sy->ns[sy->n];
		char err[256] = "";
		sn->sy = sy;
		sn->ns = (unsigned)i;
		sn->sid = rl_shm_ns(rl, (int)i);
		sn->def = nc;
		sn->ops = strategy_find(nc->strategy);
		sn->st = sn->ops ? sn->ops->create(loop, nc->strategy_opts, err, sizeof(err)) : NULL;
		if (!sn->st) {
			LOG(LOG_ERR, "namespace %s: cannot create the %s strategy: %s", nc->name,
			    nc->strategy, err);
			*failed = true;
			continue;
		}
		uint64_t rate_ms = (uint64_t)(sync_period(sn) * 1000.0);
		sn->hold_ms = 3 * rate_ms > SYNC_MIN_HOLD_MS ? 3 * rate_ms : SYNC_MIN_HOLD_MS;
		if (nc->sync_rate > 0 && !flush_mode) {
			sn->seed_q = malloc(SYNC_SEED_MAX * sizeof(*sn->seed_q));
			sn->seed_e = malloc(SYNC_SEED_MAX * sizeof(*sn->seed_e));
			sn->seed_c = malloc(2 * SYNC_SEED_MAX * sizeof(*sn->seed_c));
			if (!sn->seed_q || !sn->seed_e || !sn->seed_c) {
				LOG(LOG_ERR, "namespace %s: out of memory", nc->name);
				*failed = true;
				sn->ops->destroy(sn->st);
				free(sn->seed_q), free(sn->seed_e), free(sn->seed_c);
				memset(sn, 0, sizeof(*sn));
				continue;
			}
			ev_init(&sn->seed_timer, sync_on_seed_timer);
		}
		sy->n++;
	}
	if (sy->n == 0) {
		free(sy);
		return NULL;
	}
	return sy;
}

int sync_start(struct ev_loop *loop, struct rl *rl, int worker_id, struct sync **out)
{
	bool failed = false;
	struct sync *sy = sync_new(loop, rl, worker_id, false, -1, &failed);

	*out = NULL;
	if (failed) {
		sync_stop(sy);
		return -1;
	}
	if (!sy)
		return 0;
	for (size_t i = 0; i < sy->n; i++) {
		struct sync_ns *sn = &sy->ns[i];
		double rate = sync_period(sn);
		/* The node's phase: the same for its workers, random across
		 * nodes, so a fleet does not hit the store in lockstep. */
		double phase = (double)(node_seed % 1000003u) / 1000003.0 * rate;
		ev_periodic_init(&sn->tick, sync_on_tick, phase, rate, 0);
		ev_periodic_start(loop, &sn->tick);
		ev_periodic_init(&sn->beat, sync_on_beat,
				 fmod(phase, SYNC_BEAT_PERIOD), SYNC_BEAT_PERIOD, 0);
		ev_periodic_start(loop, &sn->beat);
		LOG(LOG_DEBUG, "namespace %s: syncing with %s every %g s (phase %.3f s)",
		    sn->def->name, sn->ops->name, rate, phase);
	}
	*out = sy;
	return 0;
}

bool sync_store_away(struct sync *sy, unsigned ns)
{
	struct sync_ns *sn = sy ? sync_find_ns(sy, ns) : NULL;

	if (!sn)
		return false;
	if (sn->ndoubts > 0 || sn->failing)
		return true;
	return !sn->ops->ready(sn->st) && !(sn->ops->connecting && sn->ops->connecting(sn->st));
}

bool sync_can_admit(struct sync *sy, unsigned ns)
{
	struct sync_ns *sn = sy ? sync_find_ns(sy, ns) : NULL;

	return sn && sn->ops->admit;
}

bool sync_busy(const struct sync *sy)
{
	if (!sy)
		return false;
	if (sy->nparked > 0)
		return true;
	for (size_t i = 0; i < sy->n; i++) {
		const struct sync_ns *sn = &sy->ns[i];

		/* Calls in doubt wait for their resend while the store is up. */
		if (sn->busy || sn->seed_busy || (sn->doubts && sn->ops->ready(sn->st)))
			return true;
	}
	return false;
}

bool sync_settled(const struct sync *sy)
{
	if (sync_busy(sy))
		return false;
	for (size_t i = 0; sy && i < sy->n; i++)
		if (sy->ns[i].retry || sy->ns[i].holding || sy->ns[i].doubts)
			return false;
	return true;
}

void sync_stop(struct sync *sy)
{
	if (!sy)
		return;
	/* The callbacks the stores run below (failing what is in flight)
	 * may try to queue or arm more: nothing is, sy is about to go. */
	sy->stopping = true;
	/* Gathered pushes not sent yet fail: their hits stay in the diffs. */
	ev_prepare_stop(sy->loop, &sy->gather_w);
	for (size_t i = 0; i < sy->n; i++) {
		struct sync_gather *g = sy->ns[i].gather, *ga = sy->ns[i].gather_adm;

		sy->ns[i].gather = sy->ns[i].gather_adm = NULL;
		if (g)
			sync_gather_done(g, -1, "not connected (stopping)");
		if (ga)
			sync_gather_done(ga, -1, "not connected (stopping)");
	}
	if (sy->parked) {
		/* Parked pushes fail: their hits stay in the diffs. */
		ev_timer_stop(sy->loop, &sy->park_timer);
		for (size_t i = 0; i < sy->nparked; i++)
			sync_gather_done(sy->parked[i].g, -1, "not connected (stopping)");
		free(sy->parked);
		free(sy->parked_spare);
	}
	ev_timer_stop(sy->loop, &sy->doubt_timer);
	for (size_t i = 0; i < sy->n; i++) {
		struct sync_ns *sn = &sy->ns[i];
		ev_periodic_stop(sy->loop, &sn->tick);
		ev_periodic_stop(sy->loop, &sn->beat);
		ev_timer_stop(sy->loop, &sn->renew);
		if (sn->seed_q)
			ev_timer_stop(sy->loop, &sn->seed_timer);
		/* Fails a pending push: its callback leaves the diffs in place. */
		sn->ops->destroy(sn->st);
		free(sn->batch);
		free(sn->ents);
		free(sn->seed_q);
		free(sn->seed_e);
		free(sn->seed_c);
		if (sn->doubts)
			LOG(LOG_WARN, "namespace \"%s\": %zu call(s) in doubt left at stop: a store "
			    "that applied them late has their hits counted twice", sn->def->name,
			    sn->ndoubts);
		while (sn->doubts)
			sync_doubt_pop(sn);
	}
	while (sy->free_gathers) {
		struct sync_gather *g = sy->free_gathers;

		sy->free_gathers = g->next;
		free(g->c);
		free(g->a);
		free(g->req);
		free(g);
	}
	free(sy);
}

static void sync_on_flush_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop, (void)w, (void)revents;
}

size_t sync_flush(struct rl *rl, double timeout_s)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	size_t unpushed = 0;

	if (!loop)
		return 1;
	bool failed = false;
	struct sync *sy = sync_new(loop, rl, 0, true, -1, &failed);
	if (!sy) {
		ev_loop_destroy(loop);
		return 0;
	}
	ev_timer wake;
	ev_timer_init(&wake, sync_on_flush_timer, 0.01, 0.01);
	ev_timer_start(loop, &wake);
	double deadline = ev_time() + timeout_s;

	for (size_t i = 0; i < sy->n; i++) {
		struct sync_ns *sn = &sy->ns[i];
		if (sync_collect(sn, rl_now(), true) < 0) {
			unpushed++;
			continue;
		}
		sn->done = sn->n == 0;
	}
	/* Push each namespace once its store is connected. */
	for (;;) {
		bool all_done = true;
		for (size_t i = 0; i < sy->n; i++) {
			struct sync_ns *sn = &sy->ns[i];
			if (sn->done)
				continue;
			all_done = false;
			if (!sn->busy && sn->ops->ready(sn->st) && sync_push(sn) < 0)
				sn->done = true;
		}
		if (all_done || ev_time() >= deadline)
			break;
		ev_run(loop, EVRUN_ONCE);
	}
	for (size_t i = 0; i < sy->n; i++) {
		struct sync_ns *sn = &sy->ns[i];
		if (!sn->done)
			sn->unpushed = sn->n;
		unpushed += sn->unpushed;
		if (sn->n > 0)
			LOG(sn->unpushed ? LOG_WARN : LOG_INFO,
			    "namespace %s: final flush: %zu of %zu counter(s) pushed to %s",
			    sn->def->name, sn->n - sn->unpushed, sn->n, sn->ops->name);
	}
	ev_timer_stop(loop, &wake);
	sync_stop(sy);
	ev_loop_destroy(loop);
	return unpushed;
}

/* ---- the reference's sync() and fetch(), for library users ---- */

#define SYNC_LIB_HOLDER 0xfffe    /* lease holder id of library calls */

/* Runs loop until *done or the deadline. */
static void sync_wait(struct ev_loop *loop, const bool *done, double deadline)
{
	ev_timer wake;
	ev_timer_init(&wake, sync_on_flush_timer, 0.01, 0.01);
	ev_timer_start(loop, &wake);
	while (!*done && ev_time() < deadline)
		ev_run(loop, EVRUN_ONCE);
	ev_timer_stop(loop, &wake);
}

static bool sync_wait_ready(struct ev_loop *loop, struct sync_ns *sn, double deadline)
{
	ev_timer wake;
	ev_timer_init(&wake, sync_on_flush_timer, 0.01, 0.01);
	ev_timer_start(loop, &wake);
	while (!sn->ops->ready(sn->st) && ev_time() < deadline)
		ev_run(loop, EVRUN_ONCE);
	ev_timer_stop(loop, &wake);
	return sn->ops->ready(sn->st);
}

/* A private loop and sync of one namespace for a library call. Returns
 * the sync (its only namespace is sy->ns[0]), or NULL for an unknown or
 * local namespace or a store that cannot be set up. */
static struct sync *sync_open_one(struct rl *rl, const char *ns, int *index)
{
	int i = rl_namespace_index(rl, ns, ns ? strlen(ns) : 0);
	bool failed = false;

	*index = i;
	if (i < 0 || rl_sync_rate(rl, i) < 0)
		return NULL;
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	if (!loop)
		return NULL;
	struct sync *sy = sync_new(loop, rl, SYNC_LIB_HOLDER - 1, true, i, &failed);
	if (!sy || failed) {
		sync_stop(sy);
		ev_loop_destroy(loop);
		return NULL;
	}
	return sy;
}

static void sync_close_one(struct sync *sy)
{
	struct ev_loop *loop = sy->loop;
	sync_stop(sy);
	ev_loop_destroy(loop);
}

int rl_sync(struct rl *rl, const char *ns, double timeout_s)
{
	double deadline = ev_time() + timeout_s;
	int rc = -1, i;
	struct sync *sy = sync_open_one(rl, ns, &i);

	if (!sy)
		return -1;
	struct ev_loop *loop = sy->loop;
	struct sync_ns *sn = &sy->ns[0];
	/* One sync of the node at a time: wait for the lease. */
	while (!shm_lease_take(sy->t, sn->sid, SYNC_LIB_HOLDER, now_ms(), sn->hold_ms)) {
		if (ev_time() >= deadline)
			goto out;
		ev_sleep(0.005);
	}
	if (sync_wait_ready(loop, sn, deadline) && sync_collect(sn, rl_now(), false) == 0) {
		sn->done = sn->n == 0;
		if (sn->n == 0 || sync_push(sn) == 0) {
			sync_wait(loop, &sn->done, deadline);
			rc = sn->done && sn->unpushed == 0 ? 0 : -1;
		}
	}
	shm_lease_release(sy->t, sn->sid, SYNC_LIB_HOLDER, now_ms());
out:
	sync_close_one(sy);
	return rc;
}

struct fetch_ctx {
	struct rl *rl;
	int ns;
	double time;
	bool done;
	int status;
	size_t rows;
};

static void fetch_on_rows(void *arg, int status, const char *errstr,
			  const struct strategy_row *rows, size_t n)
{
	struct fetch_ctx *f = arg;
	(void)errstr;

	f->done = true;
	f->status = status;
	for (size_t i = 0; status == 0 && i < n; i++)
		if (rl_seed(f->rl, f->ns, rows[i].key, rows[i].key_len, rows[i].size, rows[i].start,
			    rows[i].count, f->time) == 0)
			f->rows++;
}

int rl_fetch(struct rl *rl, const char *ns, double time, double timeout_s)
{
	double wait = timeout_s > 0 ? timeout_s : 1.0;
	double deadline = ev_time() + wait;
	char err[STRATEGY_ERR_MAX];
	int rc = -1, i;
	struct sync *sy = sync_open_one(rl, ns, &i);

	if (!sy)
		return -1;
	struct fetch_ctx f = { .rl = rl, .ns = i, .time = time };
	struct ev_loop *loop = sy->loop;
	struct sync_ns *sn = &sy->ns[0];
	/* The reference's shm mutex: one process per node fetches; with a
	 * timeout the lease is left to expire, so that is once per timeout. */
	if (!shm_lease_take(sy->t, sn->sid, SYNC_LIB_HOLDER, now_ms(), (uint64_t)(wait * 1000))) {
		rc = 0;		/* another process is fetching */
		goto out;
	}
	if (sync_wait_ready(loop, sn, deadline) &&
	    sn->ops->get_counters(sn->st, sn->def->name, strlen(sn->def->name),
				  sn->def->window_sizes, sn->def->n_window_sizes, (int64_t)time,
				  fetch_on_rows, &f, err) == 0) {
		sync_wait(loop, &f.done, deadline);
		rc = f.done && f.status == 0 ? 0 : -1;
	}
	if (timeout_s <= 0)
		shm_lease_release(sy->t, sn->sid, SYNC_LIB_HOLDER, now_ms());
out:
	sync_close_one(sy);
	return rc;
}
