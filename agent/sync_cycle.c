/*
 * sync_cycle.c - the sync cycle (docs/CLUSTER.md, "Words" and "Periodic
 * sync"): every sync period, at the node's phase, one worker of the node
 * (the holder of the namespace's lease in the table) pushes the diffs of
 * every counter the node has active and writes the store's totals back.
 * The heartbeat, on its own period, is here too.
 *
 *   collect   every LIVE slot of the namespace whose window is current or
 *             previous (the sliding rate needs both), plus any older slot
 *             still holding a diff; diff = the slot's diff as read now;
 *             with it the slot's grant hits spent (once a second) and
 *             what is left of a grant unused for a cycle (returned)
 *   push      one push_diffs() of the whole batch: the store adds the
 *             diffs, moves the grant hits from its reservations to its
 *             counts, drops what was returned, and returns every
 *             counter's total (all 0: a read); for GCRA (a TAT is no
 *             sum: algo_ops.step) only the slots with a diff, each as a
 *             TAT step of cost 0 carrying it (strategy_ops.admit)
 *   ack       per counter the store confirmed: diff, spent, returned -=
 *             pushed (what came since stays), count = max(count, total +
 *             diff + what the store still holds for this node), so no
 *             reader sees a drop; in a window the store reset (a key of it
 *             forgotten: strategy_counter.reset) count = that sum, lower
 *             or not (shm_follow_total): every node forgets within a
 *             sync period
 *
 * Nothing is taken out of a slot before the store confirms it: a failed
 * push leaves the diffs where they are. Every push carries a token; a
 * push in doubt (the store did not confirm some counters) is resent as it
 * was, with the same token, before anything else, and the store applies a
 * token's parts at most once. So a push that the store applied late (a
 * paused or slow store answering after timeout_ms) is not counted twice.
 * The one window of doubt left is a worker killed (or stalled past its
 * lease) with a push in doubt: the worker that takes over pushes those
 * diffs under a new token, so the store can count that one batch twice
 * (never less). Its size is at most the hits the node counted in one
 * sync period. A reload hands the push in doubt over
 * (sync_cycle_hand_over).
 *
 * The lease (shm_lease_*) makes one worker per node run a cycle per
 * period: every worker's timer fires at the node's phase, the first to
 * take the lease runs the cycle and, when done, leaves it free but not due
 * until the next period. A holder that dies stops renewing it; it expires
 * and another worker takes over. The heartbeat has its own timer, once a
 * second (shm_beat_take: one worker per node beats).
 */
#include "agent/sync_int.h"

#include "agent/algo.h"
#include "strategies/container.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/log.h"
#include "agent/metrics.h"
#include "agent/window.h"

#define SYNC_BEAT_PERIOD 1.0      /* seconds between a node's heartbeats */
#define SYNC_BEAT_TTL    3        /* ... and the periods a node counts for */
#define SYNC_SPENT_PERIOD 1.0     /* seconds between reports of grant hits spent */


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

/* A slot no client's key names: '#' then a byte no digest has (stored
 * keys starting with '#' are '#' and hex). The peers front keeps the
 * nodes' parts so ('#' '@', agent/peers_count.h), and settles their marks
 * (rl_mark_once): this agent's own bookkeeping, never in the store (no diff; a read would fetch nothing,
 * every cycle, for the records whose start falls on a window's). */
static bool sync_own_record(const struct shm_entry *e)
{
	return e->keylen >= 2 && e->key[0] == '#' && e->key[1] == '@';
}

int sync_collect(struct sync_ns *sn, double now, bool only_diffs)
{
	struct shm_table *t = sn->sy->t;
	bool spent_due = sync_spent_due(sn, now);

	/* An algorithm whose store holds no sums (GCRA's TAT: algo_ops.step)
	 * has nothing to read back; it would push only diffs, and keeps
	 * none. */
	only_diffs = only_diffs || algo_of(sn->def->algorithm)->step != ALGO_STEP_WINDOW;
	sn->n = 0;
	for (uint32_t idx = shm_sync_next(t, 0); idx != SHM_NONE; idx = shm_sync_next(t, idx + 1)) {
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
			if (algo_of(sn->def->algorithm)->step != ALGO_STEP_WINDOW) {
				struct strategy_admit *a = realloc(sn->abatch, cap * sizeof(*a));
				if (!a)
					return -1;
				sn->abatch = a;
			}
			sn->cap = cap;
		}
		struct shm_entry *e = &sn->ents[sn->n];
		if (shm_sync_read(t, idx, e) < 0 || e->ns != sn->sid || e->size == 0 ||
		    sync_own_record(e))
			continue;
		if (shm_grant_any(t, idx))
			shm_grant_give_back(t, e, sn->sy->flush_mode);
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

/* CLOCK_MONOTONIC: immune to wall-clock steps (which would stall or
 * double cycles). */
uint64_t sync_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
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
		sn->holding = shm_lease_renew(sy->t, sn->sid, sy->holder, sync_now_ms(), sn->hold_ms);
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
		 * acknowledged, so it is not written. A TAT's answer is no
		 * total (the next admission brings the TAT back). */
		if (!sn->abatch_out && c->start >= window_start(now, c->size) - (int64_t)c->size)
			(c->reset ? shm_follow_total : shm_sync_total)(t, &sn->ents[i], c->total);
	}
	sn->unpushed = sn->n - ok;
	/* The counters the store did not confirm are in doubt: it may still
	 * apply them (a timeout). They are kept, with their diffs and token,
	 * to resend as they are; the store adds nothing twice for a token. */
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
				   (double)(sync_now_ms() - sn->cycle_ms) / 1000.0);
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

	if (!shm_lease_renew(sn->sy->t, sn->sid, sn->sy->holder, sync_now_ms(), sn->hold_ms))
		LOG(LOG_WARN, "namespace %s: sync lease lost during a push", sn->def->name);
}

/* The batch as TAT steps (GCRA, algo_ops.step; docs/CLUSTER.md, "GCRA
 * across a cluster"): per counter one admission of cost 0 carrying its
 * diff, the hits the node admitted while the store was away (or, below
 * 0, hits given back), which the store adds to the key's TAT at the
 * configured rate (diff x T). Returns false for the window counter. */
static bool sync_tat_build(struct sync_ns *sn)
{
	const struct ns_def *def = sn->def;

	if (algo_of(def->algorithm)->step == ALGO_STEP_WINDOW)
		return false;
	for (size_t i = 0; i < sn->n; i++) {
		const struct strategy_counter *c = &sn->batch[i];
		/* The slot's size is its period: window x burst. */
		uint32_t w = c->size / (uint32_t)ns_burst(def);
		int64_t limit = ns_limit_of(def, w);

		sn->abatch[i] = (struct strategy_admit){
			.ns = c->ns, .ns_len = c->ns_len, .key = c->key, .key_len = c->key_len,
			.start = c->start, .size = w, .diff = c->diff, .cost = 0,
			/* no limit or 0: no hit was admitted, the diff is 0 */
			.limit = limit > 0 ? (double)limit : 1,
			.step = STRATEGY_STEP_TAT, .burst = (double)ns_burst(def),
		};
	}
	return true;
}

/* The TAT steps' answers, as a push's: the counters the store confirmed. */
static void sync_on_stepped(void *arg, int status, const char *errstr)
{
	struct sync_ns *sn = arg;

	for (size_t i = 0; i < sn->n; i++)
		sn->batch[i].ok = sn->abatch[i].ok;
	sync_on_pushed(sn, status, errstr);
}

int sync_push(struct sync_ns *sn)
{
	char err[STRATEGY_ERR_MAX] = "";

	sn->done = false;
	if (!sn->retry)
		sync_token(sn, 'p', ++sn->seq, sn->token);
	for (size_t i = 0; i < sn->n; i++)
		sn->batch[i].ok = false;
	/* Resent as is: the batch kept, the same token (the store moves a
	 * token's TAT steps once). */
	sn->abatch_out = sync_tat_build(sn);
	if ((sn->abatch_out
		     ? sn->ops->admit(sn->st, sn->abatch, sn->n, sn->token, sync_on_stepped, sn, err)
		     : sn->ops->push_diffs(sn->st, sn->batch, sn->n, sn->token, sync_on_pushed, sn,
					   err)) < 0) {
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
	    !shm_beat_take(sy->t, sn->sid, sync_now_ms(), gap_ms))
		return;
	snprintf(node, sizeof(node), "%016llx", (unsigned long long)sy->node);
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
	uint64_t ms = sync_now_ms();
	(void)loop, (void)revents;

	if (sn->sid < METRICS_NS)
		atomic_store_explicit(&metrics_me->store_up[sn->sid], sn->ops->ready(sn->st) ? 1 : 0,
				      memory_order_relaxed);
	/* Until the node count is known, the cycles ask for it too (at
	 * start the store may not be connected when the first beat is due). */
	if (shm_nodes(sy->t, sn->sid) == 0)
		sync_heartbeat(sn, (uint64_t)(sync_period(sn) * 500.0));
	/* This worker's calls in doubt (a forget among them), before its
	 * push (the same connection: Redis applies them first). */
	sync_doubts_resend(sn);
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
	/* Limits per key set on other nodes: applied within one period. */
	if (!sy->flush_mode)
		sync_limits_poll(sn);
	if (sn->retry) {
		/* First the push in doubt, unchanged and with its token: the
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
	/* sync_rate 0 (the retry cycle): hits refresh themselves; only the
	 * diffs the store did not confirm are left. */
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

/* ---- a sync's life ---- */

void sync_cycle_start(struct sync_ns *sn)
{
	struct sync *sy = sn->sy;
	double rate = sync_period(sn);
	/* The node's phase: the same for its workers, random across nodes,
	 * so a fleet does not hit the store in lockstep. */
	double phase = (double)(sy->node % 1000003u) / 1000003.0 * rate;

	ev_periodic_init(&sn->tick, sync_on_tick, phase, rate, 0);
	ev_periodic_start(sy->loop, &sn->tick);
	ev_periodic_init(&sn->beat, sync_on_beat, fmod(phase, SYNC_BEAT_PERIOD), SYNC_BEAT_PERIOD,
			 0);
	ev_periodic_start(sy->loop, &sn->beat);
	LOG(LOG_DEBUG, "namespace %s: syncing with %s every %g s (phase %.3f s)", sn->def->name,
	    sn->ops->name, rate, phase);
}

void sync_cycle_stop(struct sync_ns *sn)
{
	ev_periodic_stop(sn->sy->loop, &sn->tick);
	ev_periodic_stop(sn->sy->loop, &sn->beat);
	ev_timer_stop(sn->sy->loop, &sn->renew);
}

void sync_cycle_hand_over(struct sync_ns *sn)
{
	/* The push in flight stays: sync_stop fails it, and its callback
	 * acknowledges what it confirmed in part, so it cannot be copied
	 * now. Once answered, what the copy counted is taken back from the
	 * diffs, which the next sync pushes again. */
	if (sn->busy || !sn->retry || sn->n == 0)
		return;
	if (sync_tat_build(sn))
		sync_doubt_keep_hits(sn, sn->token, sn->abatch, NULL, sn->n);
	else
		sync_doubt_keep_hits(sn, sn->token, NULL, sn->batch, sn->n);
	sn->retry = false;
}
