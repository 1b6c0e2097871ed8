/*
 * algo_window.c - the window counter (agent/algo.h's first entry): a count
 * per window, sliding (the previous window weighted by what is left of the
 * current one) or fixed, after Kong's library (docs/CONFIG.md, "window_type").
 *
 *   rate   = current + previous * weight
 *   weight = (size - now % size) / size      (fixed window: weight 0)
 *
 * A slot's count holds the window's hits (for a namespace that syncs, the
 * cluster's as last fetched and this node's since), its diff this node's
 * hits the store has not confirmed, and its grant words (agent/shm_sync.h)
 * what the store reserved for this node (docs/CLUSTER.md, "Exact at the
 * limit"). A hit: one scan of the key's chain for the current and
 * previous window, at most one insert, one CAS loop on the count (and one
 * on the diff for namespaces that sync), checked against the limit when
 * count_denied is false. The arithmetic is agent/window.c's.
 */
#include "agent/algo.h"

#include <math.h>

#include "agent/shm.h"
#include "agent/shm_sync.h"
#include "agent/window.h"

#define WIN_HIT_TRIES 3               /* recounts of a hit that raced an eviction */

static uint32_t win_period(const struct ns_def *d, uint32_t size)
{
	(void)d;
	return size;
}

/* A found slot's count as hits: what is left of its grant is the store's
 * reservation for this node, not hits. 0 for no slot. */
static double win_view(const struct shm_table *t, const struct shm_ref *r)
{
	return r->idx == SHM_NONE ? 0 : shm_read_count(t, r) - shm_grant_left(t, r->idx);
}

/* Makes the slot of k's window `start` when cur found none. Returns 0, or
 * -1: no room. */
static int win_slot_make(struct shm_table *t, const struct shm_key *k, int64_t start,
				    double now, struct shm_ref *cur, struct rl_result *out)
{
	int how;

	if (cur->idx != SHM_NONE)
		return 0;
	how = shm_insert(t, k, start, now, cur);
	if (how < 0)
		return -1;
	out->inserted = true;
	out->evicted |= how == SHM_INS_EVICTED;
	return 0;
}

/* While the store is away (docs/CLUSTER.md, "When the store is down"):
 * what this node may still admit on a key's window, and the cap that
 * makes the rate check (count + pw + cost <= cap) say so.
 *
 *   known  the cluster's hits as the store last confirmed them: the
 *          slot's count without this node's unconfirmed hits (diff), its
 *          grant left and its grant hits not reported yet (spent); the
 *          previous window weighted
 *   share  (limit - known) / nodes, the node's part of what was left
 *   allow  max(share, left + spent): at least what its grant gives
 *   used   diff + spent: what the node took since the store last counted
 *
 * A hit is admitted while used + cost <= allow; a window the node never
 * saw has known 0: limit / nodes. */
static double win_share(const struct shm_table *t, const struct shm_ref *cur, double pw,
			double limit, unsigned nodes, double *allow, double *used)
{
	bool found = cur->idx != SHM_NONE;
	double left = found ? shm_grant_left(t, cur->idx) : 0;
	double spent = found ? shm_grant_spent(t, cur->idx) : 0;
	double count = shm_read_count(t, cur), diff = shm_read_diff(t, cur);
	double known = count - diff - left - spent + pw;
	double share = (limit - known) / (double)(nodes > 0 ? nodes : 1);

	*allow = share > left + spent ? share : left + spent;
	*used = diff + spent;
	return count - diff - spent + pw + *allow;
}

static double win_share_cap(const struct shm_table *t, const struct shm_ref *cur,
			    const struct shm_ref *prev, double weight, double limit,
			    unsigned nodes)
{
	double pw = prev->idx == SHM_NONE ? 0 : shm_read_count(t, prev) * weight;
	double allow, used;

	return win_share(t, cur, pw, limit, nodes, &allow, &used);
}

/* One try at counting a hit of h->cost on k's window `start`, whose slot
 * shm_find() found as cur (pw: the previous window's weighted count).
 * Sets out->counted, inserted, granted, need_store and cap (degraded),
 * *c to the count after the hit (as if counted when it was not). Returns
 * 0, 1 when the hit raced an eviction and must be counted again, or -1
 * (no room). */
static int win_count(const struct algo_hit *h, int64_t start, double pw, bool with_diff,
		     struct shm_ref *cur, struct rl_result *out, double *c)
{
	struct shm_table *t = h->t;
	double cost = h->cost;
	bool exact = h->admit >= RL_ADMIT_EXACT;
	double allow = 0, used = 0;

	out->counted = false;
	out->inserted = false;
	if (h->admit == RL_ADMIT_DEGRADED)
		out->cap = win_share(t, cur, pw, h->limit, h->nodes, &allow, &used);

	if (cost == 0) {
		/* Read only: never inserts. */
		*c = shm_read_count(t, cur);
		return 0;
	}
	if (h->admit != RL_ADMIT_LOCAL && (exact || used + cost <= allow) &&
	    shm_grant_take(t, cur, cost)) {
		/* Admitted from the store's grant: the store counted it. */
		*c = win_view(t, cur);
		out->counted = true;
		out->granted = true;
		return 0;
	}
	if (exact && ((*c = win_view(t, cur)) + pw + cost <= h->limit ||
		      h->admit == RL_ADMIT_STORE)) {
		/* The node's view admits it: the store decides. The slot is
		 * made now: it keeps the demand and will hold the grant. */
		if (win_slot_make(t, h->k, start, h->now, cur, out) < 0)
			return -1;
		shm_grant_note(t, cur, cost);
		out->need_store = true;
		return 0;
	}
	if (out->cap >= 0 && !h->count_denied && cost + pw > out->cap) {
		/* Denied whatever the current count (counts are >= 0): no
		 * CAS, and no slot taken for a key that is only refused. */
		*c = shm_read_count(t, cur) + cost;
		return 0;
	}
	if (win_slot_make(t, h->k, start, h->now, cur, out) < 0)
		return -1;
	if (out->cap < 0 || h->count_denied) {
		*c = shm_add(t, cur, cost, with_diff);
		out->counted = true;
	} else {
		out->counted = shm_add_if(t, cur, cost, pw, out->cap, with_diff, c);
		if (!out->counted)
			*c += cost;	/* report what the hit would have made */
	}
	/* The slot was evicted between our look and our add (shm.h): the hit
	 * went to the newcomer. A diff must reach the store under our key:
	 * count it again. A local count went away with the evicted entry, as
	 * if the eviction had come after it (no re-read on the local hot
	 * path). */
	return __builtin_expect(with_diff && out->counted && !shm_still(t, cur), 0);
}

/* A key over its limit is never evicted: its count is what keeps it
 * denied. The limit is the configured one where there is one, never a
 * lower one a caller chose (else one request with limit 0 would pin an
 * entry). */
static void win_protect(const struct algo_hit *h, double rate, double pw,
			const struct shm_ref *cur, const struct shm_ref *prev)
{
	double keep = h->limit;
	int64_t configured = ns_limit_of(h->def, h->size);

	if (configured != NS_LIMIT_NONE && (double)configured > keep)
		keep = (double)configured;
	if (keep >= 0 && rate > keep) {
		shm_protect(h->t, cur);
		if (pw > 0)
			shm_protect(h->t, prev);
	}
}

/* Slots found, counted (again if the hit raced an eviction), the key
 * protected if over its limit, reported. */
static int win_hit(const struct algo_hit *h, struct rl_result *out)
{
	struct shm_ref cur, prev;
	uint32_t size = h->size;
	double now = h->now, weight = h->weight, p, pw, c;
	int64_t start = window_start(now, size);

	/* RL_WEIGHT_AUTO: window_weight(now, size), computed from start to
	 * save a division; now - start is exactly now mod size (window.c). */
	if (weight < 0)
		weight = ((double)size - (now - (double)start)) / (double)size;
	/* Periodic sync keeps a diff of every hit; synchronous namespaces
	 * (sync_rate 0) push each hit themselves and keep a diff only for
	 * hits the store did not confirm (agent/decide.c). */
	bool with_diff = h->def->sync_rate > 0 || h->admit == RL_ADMIT_DEGRADED;
	out->evicted = false;
	out->need_store = out->granted = false;
	out->cap = h->limit;
	for (int tries = 0;;) {
		shm_find(h->t, h->k, start, weight > 0 ? start - (int64_t)size : -1, &cur, &prev);
		p = prev.idx == SHM_NONE ? 0 : shm_read_count(h->t, &prev);
		pw = p * weight;
		int rc = win_count(h, start, pw, with_diff, &cur, out, &c);
		if (rc < 0)
			return -1;
		if (rc == 0 || ++tries >= WIN_HIT_TRIES)
			break;
	}
	win_protect(h, window_rate(c, p, weight), pw, &cur, &prev);

	out->cur_idx = cur.idx;
	out->prev_idx = prev.idx;
	out->current = c;
	out->previous = p;
	out->weight = weight;
	out->rate = window_rate(c, p, weight);
	out->start = start;
	out->size = size;
	return 0;
}

static void win_take_back(struct shm_table *t, const struct shm_ref *cur, const struct ns_def *d,
			  uint32_t size, double v, bool with_diff, bool granted)
{
	(void)d;
	(void)size;
	if (granted)
		shm_grant_untake(t, cur, v);
	else
		shm_add(t, cur, -v, with_diff);
}

static void win_inspect(const struct shm_table *t, const struct ns_def *d, uint32_t size,
			int64_t start, double now, bool sliding, const struct shm_ref *cur,
			const struct shm_ref *prev, struct rl_key_info *out)
{
	out->size = size;
	out->start = start;
	out->cap = (double)ns_limit_of(d, size);
	out->found = cur->idx != SHM_NONE;
	out->count = shm_read_count(t, cur);
	out->diff = shm_read_diff(t, cur);
	out->grant = cur->idx == SHM_NONE ? 0 : shm_grant_left(t, cur->idx);
	out->spent = cur->idx == SHM_NONE ? 0 : shm_grant_spent(t, cur->idx);
	out->previous = prev->idx == SHM_NONE ? 0 : shm_read_count(t, prev);
	out->weight = sliding ? window_weight(now, size) : 0;
	out->rate = window_rate(out->count - out->grant, out->previous, out->weight);
}

/* rate: the ceiling of the exact rate; reset: the end of the window;
 * remaining: what the limit (or this node's share of it while the store
 * is away, never above the limit) leaves; retry_after: when the rate
 * falls back to it (window_retry_after). */
static void win_answer(const struct algo_view *v, double now, struct algo_answer *a)
{
	double rate = window_rate(v->current, v->previous, v->weight);

	a->rate = algo_ceil(rate - 1e-9);
	a->reset = algo_ceil(window_reset(now, v->window));
	if (a->reset < 1)
		a->reset = 1;
	if (v->has_limit) {
		double cap = v->cap < (double)v->limit ? v->cap : (double)v->limit;
		int64_t icap = (int64_t)floor(cap + 1e-9);
		a->exceeded = rate > cap + 1e-9;
		a->remaining = a->exceeded || a->rate >= icap ? 0 : icap - a->rate;
		a->retry_after = 0;
		if (a->exceeded) {
			double ra = window_retry_after(v->current, v->previous, cap, now, v->window,
						       v->sliding);
			a->retry_after = algo_ceil(ra);
			if (a->retry_after < 1)
				a->retry_after = 1;
		}
	}
}

const struct algo_ops algo_window = {
	.name = "window",
	.period = win_period,
	.hit = win_hit,
	.take_back = win_take_back,
	.share_cap = win_share_cap,
	.inspect = win_inspect,
	.answer = win_answer,
};
