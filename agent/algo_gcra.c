/*
 * algo_gcra.c - GCRA, the generic cell rate algorithm (agent/algo.h's
 * "gcra"): `limit` hits per `window` is the rate, `burst` the hits a key
 * may send at once (docs/CONFIG.md, "algorithm"). A token bucket of
 * capacity `burst` refilled continuously at limit / window tokens a second
 * admits exactly the same hits: it is this algorithm under another name.
 *
 *   T    = window / limit            the emission interval: a hit's cost in time
 *   tau  = burst x T                 how far ahead of now a key's TAT may run
 *   TAT  the key's theoretical arrival time (now, for a key never seen)
 *
 *   a hit of cost c at now:  new = max(TAT, now) + c x T
 *                            admitted iff new - now <= tau, then TAT = new
 *   the bucket's level (hits in it) = max(TAT - now, 0) / T, in 0..burst
 *
 * What a slot holds: `count` is the key's TAT minus the slot's start
 * (small, exact in a double), `diff` the hits the store has not had (a
 * namespace with a store: admitted while it was away, or given back,
 * < 0). The slot's period is
 * window x burst: a TAT is never more than tau <= window x burst (limit
 * >= 1) ahead of the hit that set it, so a slot two periods old holds a
 * TAT in the past, which says nothing, and the table may take it back. A
 * hit finds the slot of its period and the one before in one scan; a
 * period's first hit starts from the TAT of the one before. The TAT moves
 * by one compare-and-swap on the count (shm_cas_count): lock-free, never
 * a lock or an allocation; a denied hit writes nothing (count_denied does
 * not apply: a denied hit never moves the TAT).
 *
 * Across a cluster (docs/CLUSTER.md, "GCRA across a cluster"): the store
 * holds the one TAT and moves it (algo_ops.step: STRATEGY_STEP_TAT, a
 * Redis script or a PostgreSQL statement). Under exact admission a hit
 * its copy of the TAT here admits goes to the store (need_store; nothing
 * moved here), and the store's answer, how far its TAT runs ahead of its
 * clock, becomes the copy (gcra_store_answer: now + ahead, never lowered);
 * a hit the copy denies is denied here (the store's TAT only moves
 * forward: the copy is never behind it by more than the round trip it
 * took). While the store is away (RL_ADMIT_DEGRADED) the node runs GCRA
 * on its copy with its share of the rate and the burst: a hit costs
 * nodes x T, and the copy may run max(burst, nodes) x T ahead, so a node
 * admits max(burst / nodes, 1) hits at once and limit / nodes per window
 * (the view's weight says the share: gcra_answer's times are of it). Such
 * a hit goes into the slot's diff, which the sync cycles push as a TAT
 * step of cost 0 (agent/sync_cycle.c); a hit taken back with its diff
 * (gcra_take_back: rl_unkeep, another limit denied its request) goes
 * there as -cost: the store's TAT gets it back too.
 *
 * Known limits, as the window counter's (agent/shm.h): a hit at a
 * period's end that writes the old slot after another process's first
 * hit of the new period read it is not seen by the new one (one hit per
 * racing process, at a period's boundary); a hit whose slot was evicted
 * between its look and its CAS lands on the newcomer's slot.
 */
#include "agent/algo.h"

#include <math.h>

#include "agent/shm.h"
#include "agent/window.h"

/* The slack of comparisons, in hits, and in seconds at most: a
 * microsecond, a few units in the last place of a Unix time in a double
 * (2^-22 s), or a thousandth of a hit's time at the highest rates. */
#define GCRA_EPS 1e-6

static uint32_t gcra_period(const struct ns_def *d, uint32_t size)
{
	return size * (uint32_t)ns_burst(d);
}

/* The key's TAT relative to the slot of this period's start: from that
 * slot or, when it has none yet, the one before (period p earlier);
 * -INFINITY for none. *seen: the current slot's count as read. */
static double gcra_tat(const struct shm_table *t, uint32_t p, const struct shm_ref *cur,
		       const struct shm_ref *prev, double *seen)
{
	*seen = shm_read_count(t, cur);
	if (*seen > 0)
		return *seen;
	double before = prev->idx == SHM_NONE ? 0 : shm_read_count(t, prev);
	return before > 0 ? before - (double)p : -INFINITY;
}

/* A key over its limit is never evicted: its TAT is what keeps it
 * denied. The configured limit or a higher one (a caller's lower limit
 * never pins an entry). */
static void gcra_protect(const struct algo_hit *h, const struct shm_ref *cur,
			 const struct shm_ref *prev)
{
	int64_t configured = ns_limit_of(h->def, h->size);

	if (configured != NS_LIMIT_NONE && h->limit < (double)configured)
		return;
	shm_protect(h->t, cur);
	shm_protect(h->t, prev);
}

static int gcra_hit(const struct algo_hit *h, struct rl_result *out)
{
	struct shm_table *t = h->t;
	struct shm_ref cur, prev;
	double now = h->now, cost = h->cost, burst = (double)ns_burst(h->def);
	/* While the store is away, the node's share: a hit costs nodes x T. */
	double share = h->admit == RL_ADMIT_DEGRADED && h->nodes > 1 ? (double)h->nodes : 1;
	/* limit 0 admits nothing: a hit costs forever; no limit counts nothing */
	double T = h->limit > 0 ? share * (double)h->size / h->limit : INFINITY;
	double tau = fmax(burst, share) * T / share, slack = fmin(GCRA_EPS, 1e-3 * T);
	uint32_t period = gcra_period(h->def, h->size);
	int64_t start = window_start(now, period);
	int64_t pstart = start >= (int64_t)period ? start - (int64_t)period : -1;
	/* Times relative to the slot's start: small numbers, exact in a
	 * double (now - start is: Sterbenz). */
	double n = now - (double)start, level = 0, seen = 0;

	out->counted = out->inserted = out->evicted = false;
	out->granted = out->need_store = false;
	out->cap = h->limit == 0 ? 0 : fmax(burst / share, 1);
	for (;;) {
		shm_find(t, h->k, start, pstart, &cur, &prev);
		double tat = gcra_tat(t, period, &cur, &prev, &seen);
		double base = tat > n ? tat : n;
		level = isinf(T) ? 0 : (base - n) / T;
		if (cost == 0 || h->limit < 0)
			break;
		double next = base + cost * T;
		if (!(h->limit > 0 && next - n <= tau + slack)) {
			/* Denied: the TAT stays. */
			level += cost;
			gcra_protect(h, &cur, &prev);
			break;
		}
		if (cur.idx == SHM_NONE) {
			int how = shm_insert(t, h->k, start, now, &cur);
			if (how < 0)
				return -1;
			out->inserted = true;
			out->evicted |= how == SHM_INS_EVICTED;
			continue;       /* from the slot as it is now (a racing insert's) */
		}
		if (h->admit == RL_ADMIT_EXACT) {
			/* The copy admits it: the store decides (its slot,
			 * made, will hold the store's answer). */
			out->need_store = true;
			break;
		}
		if (!shm_cas_count(t, &cur, &seen, next))
			continue;
		/* Admitted while the store is away: the hits go to it with the
		 * sync cycles (the slot's diff, before the check that the
		 * slot is still the key's: a reclaimer reads it after). */
		if (h->admit == RL_ADMIT_DEGRADED)
			shm_add_diff(t, &cur, cost);
		if (shm_still(t, &cur)) {
			out->counted = true;
			level = (next - n) / T;
			break;
		}
	}
	out->cur_idx = cur.idx;
	out->prev_idx = prev.idx;
	out->current = level;
	out->previous = 0;
	/* The view's weight: the hit's share of the rate (nodes while the
	 * store is away; 0 otherwise), which gcra_answer's times need. */
	out->weight = share > 1 ? share : 0;
	out->rate = level;
	out->start = start;
	out->size = h->size;
	return 0;
}

/* The store's TAT, `ahead` seconds past its clock, as this node's copy:
 * now + ahead relative to the slot's start, never lowered (an older
 * answer that arrives late says less). The view: the hits in the bucket. */
static double gcra_store_answer(struct shm_table *t, const struct shm_ref *cur,
				const struct ns_def *d, uint32_t size, int64_t start, double now,
				double ahead)
{
	int64_t limit = ns_limit_of(d, size);
	double want = now - (double)start + ahead, seen = shm_read_count(t, cur);

	while (seen < want && !shm_cas_count(t, cur, &seen, want))
		;
	return limit > 0 ? ahead * (double)limit / (double)size : 0;
}

/* The hit's cost in time given back to the TAT, at the configured rate
 * (a hit decided under a caller's lower limit took more: it gets back
 * less, never more). with_diff (a namespace with a store): the hits go
 * to the store's TAT too, as a negative diff the sync cycles push (a hit
 * the store admitted, rl_unkeep; one the node admitted while the store
 * was away, whose diff it takes back). v < 0 keeps hits (rl_keep). */
static void gcra_take_back(struct shm_table *t, const struct shm_ref *cur, const struct ns_def *d,
			   uint32_t size, double v, bool with_diff, bool granted)
{
	int64_t limit = ns_limit_of(d, size);

	(void)granted;
	if (limit > 0)
		shm_add(t, cur, -v * (double)size / (double)limit, false);
	if (with_diff)
		shm_add_diff(t, cur, -v);
}

/* The hits in the key's bucket at now, at the configured rate. */
static void gcra_inspect(const struct shm_table *t, const struct ns_def *d, uint32_t size,
			 int64_t start, double now, bool sliding, const struct shm_ref *cur,
			 const struct shm_ref *prev, struct rl_key_info *out)
{
	int64_t limit = ns_limit_of(d, size);
	double seen, tat = gcra_tat(t, gcra_period(d, size), cur, prev, &seen);
	double n = now - (double)start;

	(void)sliding;
	out->size = size;
	out->start = start;
	out->found = tat > n;
	out->count = out->found && limit > 0 ? (tat - n) * (double)limit / (double)size : 0;
	out->rate = out->count;
	out->cap = (double)ns_burst(d);
}

/* rate: the hits in the bucket (its level, after the hit; a denied hit's
 * as if it had been counted); remaining: the hits a key may still send at
 * once; retry_after: when the denied hit would fit; reset: when the bucket
 * is empty again (the whole burst may be sent). */
static void gcra_answer(const struct algo_view *v, double now, struct algo_answer *a)
{
	/* While the store is away a hit costs the node's share (weight:
	 * nodes x T), and its bucket is of that share. */
	double share = v->weight > 1 ? v->weight : 1;
	double T = v->limit > 0 ? share * (double)v->window / (double)v->limit
			       : (double)v->window;
	double after = v->counted ? v->current : v->current - v->cost;

	(void)now;
	a->rate = algo_ceil(v->current - GCRA_EPS);
	a->reset = algo_ceil((after > 0 ? after : 0) * T - GCRA_EPS);
	if (a->reset < 1)
		a->reset = 1;
	if (!v->has_limit)
		return;
	/* A hit is admitted iff it moved the TAT (a denied one never does);
	 * a read is never over. */
	a->exceeded = v->cost > 0 && !v->counted;
	double left = floor(v->cap - v->current + GCRA_EPS);
	a->remaining = a->exceeded || !(left > 0) ? 0 : (int64_t)left;
	a->retry_after = 0;
	if (a->exceeded) {
		a->retry_after = v->limit > 0 ? algo_ceil((v->current - v->cap) * T - GCRA_EPS)
					      : (int64_t)v->window;
		if (a->retry_after < 1)
			a->retry_after = 1;
	}
}

const struct algo_ops algo_gcra = {
	.name = "gcra",
	.step = ALGO_STEP_TAT,
	.period = gcra_period,
	.hit = gcra_hit,
	.take_back = gcra_take_back,
	.share_cap = NULL,      /* the share is the hit's (RL_ADMIT_DEGRADED) */
	.store_answer = gcra_store_answer,
	.inspect = gcra_inspect,
	.answer = gcra_answer,
};
