/*
 * sync.c - the sync loop (see sync.h): a sync's life (start, stop, the
 * restart of a reload), the periodic cycle and its lease, the heartbeat,
 * seeding first-seen keys, the final flush and the library's rl_sync /
 * rl_fetch. The hits of sync_rate 0 (gathered, parked, in doubt, handed
 * over at a reload) are sync_hits.c's; what both share is sync_int.h.
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
 *             drop; in a window the store reset (a key of it forgotten:
 *             strategy_counter.reset) count = that sum, lower or not
 *             (shm_follow_total): every node forgets within a period
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
 * a token too, and are sent again while in doubt: sync_hits.c.
 *
 * The lease (shm_lease_*) makes one worker per node run a cycle per
 * period: every worker's timer fires at the node's phase, the first to
 * take the lease runs the cycle and, when done, leaves it free but not due
 * until the next period. A holder that dies stops renewing it; it expires
 * and another worker takes over. The heartbeat has its own timer, once a
 * second (shm_beat_take: one worker per node beats).
 */
#include "agent/sync.h"
#include "agent/sync_int.h"
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

#define SYNC_MIN_HOLD_MS 1000
#define SYNC_SEED_MAX    1024     /* first-seen keys queued per namespace */
#define SYNC_SEED_DELAY  0.002    /* gather seeds this long into one push */
#define SYNC_BEAT_PERIOD 1.0      /* seconds between a node's heartbeats */
#define SYNC_BEAT_TTL    3        /* ... and the periods a node counts for */
#define SYNC_SPENT_PERIOD 1.0     /* seconds between reports of grant hits spent */

static uint64_t node_seed;

void sync_set_node_seed(uint64_t seed)
{
	node_seed = seed;
}

/* ---- the periodic cycle ---- */

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
			(c->reset ? shm_follow_total : shm_sync_total)(t, &sn->ents[i], c->total);
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
	uint64_t ms = now_ms();
	(void)loop, (void)revents;

	if (sn->sid < METRICS_NS)
		atomic_store_explicit(&metrics_me->store_up[sn->sid], sn->ops->ready(sn->st) ? 1 : 0,
				      memory_order_relaxed);
	/* Until the node count is known, the cycles ask for it too (at
	 * start the store may not be connected when the first beat is due). */
	if (shm_nodes(sy->t, sn->sid) == 0)
		sync_heartbeat(sn, (uint64_t)(sync_period(sn) * 500.0));
	/* This worker's forgets in doubt, before its push (the same
	 * connection: Redis applies them first). */
	if (sy->forgets)
		sync_forgets_send(sn);
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
			(cur->reset ? shm_follow_total : shm_sync_total)(sy->t, &sn->seed_e[i],
									  cur->total);
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
/* ---- a sync's life ---- */

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
	sync_hits_init(sy);
	sy->holder = (uint16_t)(worker_id + 1);
	sy->node = node_seed;
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
		double phase = (double)(sy->node % 1000003u) / 1000003.0 * rate;
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
	sync_hits_stop(sy);
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
		sync_doubts_drop(sn);
	}
	sync_forgets_drop(sy);
	sync_hits_free(sy);
	free(sy);
}

int sync_reload(struct sync **sp, struct ev_loop *loop, struct rl *rl, int worker_id,
		void (*apply)(void *arg), void *arg)
{
	struct sync_doubts *doubts = sync_doubts_take(*sp);
	struct sync_forgets *forgets = sync_forgets_take(*sp);

	sync_stop(*sp);
	*sp = NULL;
	if (apply)
		apply(arg);
	if (sync_start(loop, rl, worker_id, sp) < 0) {
		sync_doubts_free(doubts);
		sync_forgets_free(forgets);
		return -1;
	}
	sync_doubts_give(*sp, doubts);
	sync_forgets_give(*sp, forgets);
	return 0;
}

/* ---- the master's final flush ---- */

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
