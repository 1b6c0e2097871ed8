/*
 * shm_sync.c - the sync words of the shared counter table (see
 * shm_sync.h): the slots as the sync reads them, diffs acknowledged and
 * totals written back, leases, heartbeat turns and node counts, grants.
 * The slot states and the segment's layout are shm.h's; this file only
 * reads and writes words there, with the same atomics (agent/atomics.h),
 * and is the sync's one way into the table.
 */
#include "agent/shm_sync.h"

/* ---- slots, as the sync reads them ---- */

uint32_t shm_sync_next(const struct shm_table *t, uint32_t from)
{
	return shm_next_used(t, from);
}

int shm_sync_read(const struct shm_table *t, uint32_t idx, struct shm_entry *e)
{
	return shm_read(t, idx, e);
}

/* ---- diffs and totals ---- */

double shm_take_diff(struct shm_table *t, const struct shm_entry *e)
{
	struct shm_slot *s = &t->slots[e->idx];

	/* While diff != 0 the slot cannot be reclaimed, so if meta is still
	 * e's here, the diff we take is e's window's. */
	if (atomic_load(&s->meta) != e->meta)
		return 0;
	return atomics_exchange_double(&s->diff, 0.0);
}

int shm_restore_diff(struct shm_table *t, const struct shm_entry *e, double d)
{
	struct shm_slot *s = &t->slots[e->idx];
	uint64_t old;

	if (atomic_load(&s->meta) != e->meta)
		return -1;
	/* seq_cst add, then re-check: a reclaimer CASes meta to BUSY and
	 * then reads diff, so one of us sees the other (see shm_try_insert). */
	old = atomic_load(&s->diff);
	while (!atomic_compare_exchange_weak(&s->diff, &old,
					     atomics_dbits(atomics_bitsd(old) + d)))
		;
	return atomic_load(&s->meta) == e->meta ? 0 : -1;
}

/* shm_sync_total (follow false) and shm_follow_total (true). */
static int shm_total(struct shm_table *t, const struct shm_entry *e, double total, bool follow)
{
	struct shm_slot *s = &t->slots[e->idx];
	uint64_t old;

	if (atomic_load(&s->meta) != e->meta)
		return -1;
	/* CAS loop on count, re-reading diff every round. max() keeps the
	 * visible count from ever dropping. Hits taken in the pushed diff are
	 * in total; hits added since are in diff; a hit caught between its
	 * count and diff additions may be missing from count until the next
	 * sync, which pushes it (it is in diff by then). What the store holds
	 * reserved for this node's view (left + spent) is in count, not in
	 * total (what it returned is no longer its). Every change to those words leaves the sum lower for a
	 * moment, never higher: a racing max() never keeps a count too high.
	 * Followed (a window the store reset), the sum is written as it is:
	 * lower for a moment, it stays lower until the next read. */
	old = atomic_load_explicit(&s->count, memory_order_relaxed);
	for (;;) {
		double cur = atomics_bitsd(old);
		double want = total + atomics_load_double(&s->diff) +
			      atomics_load_double(shm_grant_word(t, e->idx, SHM_GRANT_LEFT)) +
			      atomics_load_double(shm_grant_word(t, e->idx, SHM_GRANT_SPENT));

		if (!(want > cur) && !(follow && want != cur))
			break;
		if (atomic_compare_exchange_weak_explicit(&s->count, &old, atomics_dbits(want),
							  memory_order_relaxed,
							  memory_order_relaxed))
			break;
	}
	return atomic_load(&s->meta) == e->meta ? 0 : -1;
}

int shm_sync_total(struct shm_table *t, const struct shm_entry *e, double total)
{
	return shm_total(t, e, total, false);
}

int shm_follow_total(struct shm_table *t, const struct shm_entry *e, double total)
{
	return shm_total(t, e, total, true);
}

double shm_sync_forget(struct shm_table *t, const struct shm_ref *r)
{
	double left, had;

	if (r->idx == SHM_NONE)
		return 0;
	/* The words first, the count last: a racing shm_sync_total() reads a
	 * sum lower than the count, never higher, and keeps the count, which
	 * goes to 0 after them. A push in flight with some of these words is
	 * acknowledged later: the words go below 0 by what it carried, and
	 * the next push takes that back (shm_ack_diff). */
	atomics_store_double(&t->slots[r->idx].diff, 0.0);
	left = atomics_exchange_double(shm_grant_word(t, r->idx, SHM_GRANT_LEFT), 0.0);
	atomics_store_double(shm_grant_word(t, r->idx, SHM_GRANT_SPENT), 0.0);
	atomics_store_double(shm_grant_word(t, r->idx, SHM_GRANT_RET), 0.0);
	had = shm_forget(t, r);         /* 0 if re-keyed meanwhile */
	return had > left ? had - left : 0;
}

int shm_ack_diff(struct shm_table *t, const struct shm_entry *e, double d)
{
	struct shm_slot *s = &t->slots[e->idx];
	uint64_t old;

	if (atomic_load(&s->meta) != e->meta)
		return -1;
	old = atomic_load(&s->diff);
	for (;;) {
		double left = atomics_bitsd(old) - d;
		/* Below 0 when the diff went down during the push: a hit was
		 * taken back (rl_uncount), which the next push takes back in
		 * the store (each hit exactly once), or a forget
		 * (shm_sync_forget) zeroed it: the next push then takes back
		 * what the push in flight adds after the store's forget
		 * (docs/CLUSTER.md, "Forgetting a key"). */
		if (left < 1e-9 && left > -1e-9)
			left = 0.0;
		if (atomic_compare_exchange_weak(&s->diff, &old, atomics_dbits(left)))
			break;
	}
	return 0;
}

/* ---- sync leases ---- (the layout: shm_hdr.lease) */

#define SHM_LEASE_HOLDER(l) ((uint16_t)((l) & 0xffffu))
#define SHM_LEASE_UNTIL(l)  ((l) >> 16)
#define SHM_LEASE(until, holder) (((uint64_t)(until) << 16) | (uint64_t)(holder))

bool shm_lease_take(struct shm_table *t, unsigned ns, uint16_t holder, uint64_t now_ms,
		    uint64_t hold_ms)
{
	_Atomic uint64_t *p = &t->hdr->lease[ns];
	uint64_t l = atomic_load(p);

	/* Held and not expired, or free but not due yet. */
	if (now_ms < SHM_LEASE_UNTIL(l))
		return false;
	return atomic_compare_exchange_strong(p, &l, SHM_LEASE(now_ms + hold_ms, holder));
}

bool shm_lease_renew(struct shm_table *t, unsigned ns, uint16_t holder, uint64_t now_ms,
		     uint64_t hold_ms)
{
	_Atomic uint64_t *p = &t->hdr->lease[ns];
	uint64_t l = atomic_load(p);

	if (SHM_LEASE_HOLDER(l) != holder)
		return false;
	return atomic_compare_exchange_strong(p, &l, SHM_LEASE(now_ms + hold_ms, holder));
}

void shm_lease_release(struct shm_table *t, unsigned ns, uint16_t holder, uint64_t due_ms)
{
	_Atomic uint64_t *p = &t->hdr->lease[ns];
	uint64_t l = atomic_load(p);

	if (SHM_LEASE_HOLDER(l) == holder)
		atomic_compare_exchange_strong(p, &l, SHM_LEASE(due_ms, 0));
}

/* ---- nodes and heartbeats ---- */

void shm_set_nodes(struct shm_table *t, unsigned ns, uint32_t n)
{
	if (ns < SHM_MAX_NS)
		atomic_store_explicit(&t->hdr->nodes[ns], n, memory_order_relaxed);
}

uint32_t shm_nodes(const struct shm_table *t, unsigned ns)
{
	return ns < SHM_MAX_NS ? atomic_load_explicit(&t->hdr->nodes[ns], memory_order_relaxed)
			       : 0;
}

bool shm_beat_take(struct shm_table *t, unsigned ns, uint64_t now_ms, uint64_t gap_ms)
{
	_Atomic uint64_t *p;
	uint64_t last;

	if (ns >= SHM_MAX_NS)
		return false;
	p = &t->hdr->beat[ns];
	last = atomic_load(p);
	if (last != 0 && now_ms < last + gap_ms)
		return false;
	return atomic_compare_exchange_strong(p, &last, now_ms ? now_ms : 1);
}

/* ---- grants ---- (doubles in atomic words, as count and diff) */

bool shm_grant_take(struct shm_table *t, const struct shm_ref *r, double cost)
{
	_Atomic uint64_t *g;
	uint64_t w;

	if (r->idx == SHM_NONE)
		return false;
	g = shm_grant_word(t, r->idx, SHM_GRANT_LEFT);
	w = atomic_load_explicit(g, memory_order_relaxed);
	for (;;) {
		double left = atomics_bitsd(w);
		if (!(left >= cost) || left == 0)
			return false;
		if (atomic_compare_exchange_weak(g, &w, atomics_dbits(left - cost)))
			break;
	}
	atomics_add_double(shm_grant_word(t, r->idx, SHM_GRANT_USED), cost);
	atomics_add_double(shm_grant_word(t, r->idx, SHM_GRANT_SPENT), cost);
	return shm_still(t, r);
}

void shm_grant_untake(struct shm_table *t, const struct shm_ref *r, double cost)
{
	if (r->idx == SHM_NONE || !shm_still(t, r))
		return;
	atomics_add_double(shm_grant_word(t, r->idx, SHM_GRANT_SPENT), -cost);
	atomics_add_double(shm_grant_word(t, r->idx, SHM_GRANT_USED), -cost);
	atomics_add_double(shm_grant_word(t, r->idx, SHM_GRANT_LEFT), cost);
}

void shm_grant_note(struct shm_table *t, const struct shm_ref *r, double cost)
{
	if (r->idx != SHM_NONE)
		atomics_add_double(shm_grant_word(t, r->idx, SHM_GRANT_USED), cost);
}

double shm_grant_left(const struct shm_table *t, uint32_t idx)
{
	return idx < t->nslots ? atomics_load_double(shm_grant_word(t, idx, SHM_GRANT_LEFT)) : 0;
}

double shm_grant_spent(const struct shm_table *t, uint32_t idx)
{
	return idx < t->nslots ? atomics_load_double(shm_grant_word(t, idx, SHM_GRANT_SPENT)) : 0;
}

void shm_grant_add(struct shm_table *t, const struct shm_ref *r, double amount)
{
	double back;

	if (r->idx == SHM_NONE || !(amount > 0))
		return;
	/* The count first: a racing shm_sync_total() that saw the grant in
	 * what is left would add it to the count as well. */
	atomics_add_double(&t->slots[r->idx].count, amount);
	atomics_add_double(shm_grant_word(t, r->idx, SHM_GRANT_LEFT), amount);
	/* Re-keyed meanwhile (an insert clears the grant before the slot
	 * shows its new identity): take it back from the newcomer. */
	if (!shm_still(t, r) && (back = shm_grant_return(t, r->idx)) > 0)
		atomics_add_double(&t->slots[r->idx].count, back < amount ? -back : -amount);
}

void shm_grant_unres_add(struct shm_table *t, const struct shm_entry *e, double spent,
			 double returned)
{
	if (e->idx >= t->nslots || atomic_load(&t->slots[e->idx].meta) != e->meta)
		return;
	if (spent != 0)
		atomics_add_double(shm_grant_word(t, e->idx, SHM_GRANT_SPENT), spent);
	if (returned != 0)
		atomics_add_double(shm_grant_word(t, e->idx, SHM_GRANT_RET), returned);
}

double shm_grant_return(struct shm_table *t, uint32_t idx)
{
	if (idx >= t->nslots)
		return 0;
	return atomics_bitsd(atomic_exchange(shm_grant_word(t, idx, SHM_GRANT_LEFT),
					     atomics_dbits(0.0)));
}

/* The LAST word: the demand of the last cycle, or -(it + 1) while a grant
 * is asked for (a load and a store: two workers racing may both ask, which
 * only costs one more grant). */
double shm_grant_begin(struct shm_table *t, uint32_t idx)
{
	_Atomic uint64_t *w;
	double last;

	if (idx >= t->nslots)
		return -1;
	w = shm_grant_word(t, idx, SHM_GRANT_LAST);
	last = atomics_load_double(w);
	if (last < 0)
		return -1;
	atomics_store_double(w, -last - 1);
	return last;
}

void shm_grant_end(struct shm_table *t, uint32_t idx)
{
	_Atomic uint64_t *w;
	double last;

	if (idx >= t->nslots)
		return;
	w = shm_grant_word(t, idx, SHM_GRANT_LAST);
	last = atomics_load_double(w);
	if (last < 0)
		atomics_store_double(w, -last - 1);
}

double shm_grant_cycle(struct shm_table *t, uint32_t idx)
{
	_Atomic uint64_t *w;
	double used;

	if (idx >= t->nslots)
		return 0;
	used = atomics_bitsd(atomic_exchange(shm_grant_word(t, idx, SHM_GRANT_USED),
					     atomics_dbits(0.0)));
	w = shm_grant_word(t, idx, SHM_GRANT_LAST);
	atomics_store_double(w, atomics_load_double(w) < 0 ? -used - 1 : used);
	return used;
}

int64_t shm_grant_flight(struct shm_table *t, uint32_t idx, int64_t delta)
{
	_Atomic uint64_t *w;
	uint64_t v;

	if (idx >= t->nslots)
		return 0;
	w = shm_grant_word(t, idx, SHM_GRANT_FLIGHT);
	if (delta >= 0)
		return (int64_t)atomic_fetch_add(w, (uint64_t)delta) + delta;
	/* Never below 0: shm_grant_unstick() may have cleared this one's
	 * count while it was in flight. */
	v = atomic_load_explicit(w, memory_order_relaxed);
	for (;;) {
		int64_t after = (int64_t)v + delta;

		if (after < 0)
			after = 0;
		if (atomic_compare_exchange_weak(w, &v, (uint64_t)after))
			return after;
	}
}

bool shm_grant_any(const struct shm_table *t, uint32_t idx)
{
	return idx < t->nslots && (atomic_load_explicit(shm_grant_word(t, idx, SHM_GRANT_LEFT),
							memory_order_relaxed) != 0 ||
				   atomic_load_explicit(shm_grant_word(t, idx, SHM_GRANT_USED),
							memory_order_relaxed) != 0 ||
				   atomic_load_explicit(shm_grant_word(t, idx, SHM_GRANT_SPENT),
							memory_order_relaxed) != 0 ||
				   atomic_load_explicit(shm_grant_word(t, idx, SHM_GRANT_RET),
							memory_order_relaxed) != 0);
}

double shm_grant_give_back(struct shm_table *t, struct shm_entry *e, bool all)
{
	struct shm_ref r = { .idx = e->idx, .meta = e->meta };
	double left;

	if (shm_grant_cycle(t, e->idx) > 0 && !all)
		return 0;
	left = shm_grant_return(t, e->idx);
	if (!(left > 0))
		return 0;
	/* The count, then what is returned: count - left - spent never rises
	 * for a moment (shm_sync_total). */
	shm_add(t, &r, -left, false);
	if (!shm_still(t, &r))
		return 0;       /* re-keyed: a window no longer counted anyway */
	shm_grant_unres_add(t, e, 0, left);
	e->count -= left;
	e->ret += left;
	return left;
}
