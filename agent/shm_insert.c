/*
 * shm_insert.c - a window's slot created in the shared counter table
 * (shm_insert), lock-free: the chain probed again for the window and for
 * room, a slot claimed (BUSY), written, shown (PENDING), racing inserts of
 * the same window resolved, then LIVE; abandoned claims recovered on the
 * way. The protocol and its states are drawn in shm.h ("Insert protocol",
 * "Recovery from killed processes"); where room comes from at max_keys is
 * shm_evict.c's.
 */
#include "agent/shm.h"

#include "agent/shm_int.h"

/* Gives up an insert that keeps losing races after this many rounds
 * (never seen; keeps a pathological livelock from spinning forever). */
#define SHM_INSERT_ROUNDS 100000

/* For the insert path: reads slot s's meta and, if it carries k's
 * identity for `start` in state PENDING or LIVE, checks the key bytes.
 * Returns that meta if the slot holds k, else 0. A slot caught changing
 * (e.g. PENDING -> LIVE while its key was read) is read again, so a
 * duplicate is never missed because of a state change. */
static uint64_t shm_holds(const struct shm_slot *s, const struct shm_key *k, int64_t start)
{
	uint64_t any = shm_meta_of(k, start, 0);

	for (;;) {
		uint64_t m = atomic_load(&s->meta), st = shm_meta_state(m);

		if ((m & ~SHM_META_STATE_MASK) != any || (st != SHM_ST_PENDING && st != SHM_ST_LIVE))
			return 0;
		switch (shm_key_cmp(s, k, m)) {
		case SHM_CMP_SAME:
			return m;
		case SHM_CMP_DIFFERENT:
			return 0;
		case SHM_CMP_CHANGED:
		case SHM_CMP_COUNT:
			break;
		}
	}
}

/* Waits (bounded) for slot i to leave meta m - another insert of the same
 * identity finishing. If it does not within SHM_SPIN_MAX spins, its owner
 * is taken for dead (or hopelessly slow): the slot is freed by CAS on the
 * exact value, and a live owner will see its own CAS fail and retry. Only
 * PENDING slots are waited on: they hold no count yet, so freeing one
 * loses nothing. */
static void shm_wait_pending(struct shm_table *t, uint32_t i, uint64_t m)
{
	struct shm_slot *s = &t->slots[i];
	uint64_t expect = m;

	for (unsigned n = 0; n < SHM_SPIN_MAX; n++) {
		if (atomic_load_explicit(&s->meta, memory_order_acquire) != m)
			return;
		atomics_cpu_relax();
	}
	if (atomic_compare_exchange_strong(&s->meta, &expect, SHM_META_FREE))
		atomic_fetch_add_explicit(&t->hdr->recovered, 1, memory_order_relaxed);
}

/* Releases our own PENDING claim (if still ours). */
static void shm_release(struct shm_table *t, uint32_t i, uint64_t pend)
{
	atomic_compare_exchange_strong(&t->slots[i].meta, &pend, SHM_META_FREE);
}

enum shm_dup {
	SHM_DUP_NONE = 0,   /* no other slot with our identity */
	SHM_DUP_LIVE,       /* *j is LIVE: use it */
	SHM_DUP_LOWER,      /* *j is PENDING at a lower index: we back off */
	SHM_DUP_HIGHER,     /* *j is PENDING at a higher index: wait for it */
	SHM_DUP_COUNT
};

/* Scans k's chain (up to maxd, seq_cst) for another PENDING or LIVE slot
 * of the same (identity, start) than our slot c. */
static enum shm_dup shm_find_dup(struct shm_table *t, const struct shm_key *k, int64_t start,
				 uint32_t c, uint32_t *j, uint64_t *jm)
{
	uint32_t md = atomic_load(&t->maxd[k->home]);
	uint32_t i = k->home;

	for (uint32_t d = 0; d <= md; d++, i = shm_next(t, i)) {
		uint64_t m;

		if (i == c || !(m = shm_holds(&t->slots[i], k, start)))
			continue;
		*j = i;
		*jm = m;
		if (shm_meta_state(m) == SHM_ST_LIVE)
			return SHM_DUP_LIVE;
		return i < c ? SHM_DUP_LOWER : SHM_DUP_HIGHER;
	}
	return SHM_DUP_NONE;
}

/* Outcome of one insert attempt. */
enum shm_try {
	SHM_TRY_DONE = 0,
	SHM_TRY_FULL,
	SHM_TRY_AGAIN,
	SHM_TRY_COUNT
};

/* Starts r for one insert attempt of k: no candidate yet, the table's
 * LIVE counts read, and whether to sample (asked by the caller, forced at
 * max_keys LIVE slots, never for a namespace without a share). */
static void shm_room_init(const struct shm_table *t, const struct shm_key *k, bool sample,
			  struct shm_room *r)
{
	const struct shm_hdr *hd = t->hdr;

	shm_pick_set(&r->fre, SHM_NONE, 0, 0, 0);
	r->stale = r->lend = r->own = r->fre;
	r->total = atomic_load_explicit(&hd->live_total, memory_order_relaxed);
	r->under = atomic_load_explicit(&hd->live[k->ns], memory_order_relaxed) <
		   (int64_t)shm_share(t, k->ns);
	r->borrowers = 0;
	/* A namespace never given a share (shm_set_ns) fills the table as it
	 * comes: no sampling, no eviction. */
	if (hd->share[k->ns] == 0)
		sample = false;
	else if (r->total >= (int64_t)hd->max_keys)
		sample = true;
	if (sample && r->under)
		r->borrowers = shm_borrowers(t) & ~(1u << k->ns);
	r->sample = sample;
}

/* 1. Looks again (seq_cst) along k's chain for window `start`, and notes
 * in r the slots this attempt could take. Returns the meta of a slot that
 * holds k's window already (LIVE, or PENDING: another insert of it under
 * way), with its index in *at; 0 when none does, r saying where there is
 * room. md: the chain's length (maxd of k's home) as read before. */
static uint64_t shm_probe(const struct shm_table *t, const struct shm_key *k, int64_t start,
			  uint32_t md, double now, struct shm_room *r, uint32_t *at)
{
	uint32_t i = k->home;

	for (uint32_t d = 0; d < t->probe_max; d++, i = shm_next(t, i)) {
		const struct shm_slot *s = &t->slots[i];
		uint64_t m;

		if (d <= md && (m = shm_holds(s, k, start))) {
			*at = i;
			return m;
		}
		m = atomic_load(&s->meta);
		switch (shm_cand_kind(t, s, m, now)) {
		case SHM_CAND_FREE:
			if (r->fre.idx == SHM_NONE)
				shm_pick_set(&r->fre, i, d, m, 0);
			break;
		case SHM_CAND_STALE:
			if (r->stale.idx == SHM_NONE)
				shm_pick_set(&r->stale, i, d, m, 0);
			break;
		case SHM_CAND_NONE:
		case SHM_CAND_COUNT:
			if (r->sample && d < SHM_EVICT_SAMPLE && shm_meta_state(m) == SHM_ST_LIVE)
				shm_room_sample(t, k, r, i, d, m, now);
			break;
		}
		if (d < md)
			continue;
		/* Past the chain: stop at an EMPTY slot or once there is
		 * something to take; sampling: at a stale slot or after the
		 * sample (victims past an EMPTY slot are only freed, the
		 * newcomer goes to the free slot nearer home). */
		if (!r->sample ? m == SHM_META_EMPTY || r->fre.idx != SHM_NONE ||
				 r->stale.idx != SHM_NONE
			       : r->stale.idx != SHM_NONE || d + 1 >= SHM_EVICT_SAMPLE)
			break;
	}
	return 0;
}

/* 2. Which of r's candidates to take; NULL: no room. Below max_keys the
 * first free or stale slot, as always; sampling, shm_evict.c's choice,
 * which may name a victim to evict first (*victim, else NULL). */
static const struct shm_pick *shm_choose(const struct shm_table *t, const struct shm_key *k,
					 const struct shm_room *r, const struct shm_pick **victim)
{
	*victim = NULL;
	if (r->sample)
		return shm_choose_sampled(t, k, r, victim);
	if (r->fre.idx == SHM_NONE)
		return r->stale.idx == SHM_NONE ? NULL : &r->stale;
	return r->stale.idx != SHM_NONE && r->stale.d < r->fre.d ? &r->stale : &r->fre;
}

/* 3. Claims the slot of pick p, as it was seen, with a BUSY meta of its
 * own (shm_busy_meta: a stale owner's later CAS can never succeed on
 * someone else's claim). A LIVE slot is checked again under the claim and
 * counted out of the LIVE counts: re-keyed when stale, else an entry
 * evicted in place (in_place; *evicted is then set). Returns the BUSY
 * meta, or 0 when the slot changed or must be kept (a claim that must be
 * kept is given back). */
static uint64_t shm_claim(struct shm_table *t, const struct shm_pick *p, bool in_place,
			  double now, bool *evicted)
{
	struct shm_hdr *hd = t->hdr;
	struct shm_slot *s = &t->slots[p->idx];
	uint64_t cm = p->m, busy = shm_busy_meta(t, now);

	if (!atomic_compare_exchange_strong(&s->meta, &cm, busy))
		return 0;
	if (shm_meta_state(cm) == SHM_ST_LIVE) {
		unsigned vns = shm_meta_ns(cm);

		/* Re-check under our claim: a restored diff or a hit may have
		 * raced our first look (shm_restore_diff and counting hits add
		 * to diff, then re-check meta, seq_cst, so either we see their
		 * diff here or they see our BUSY), and so may a protection.
		 * Never drop a pending diff. */
		if (atomics_bitsd(atomic_load(&s->diff)) != 0.0 ||
		    (in_place && (atomic_load(&t->prot[p->idx]) || shm_grant_held(t, p->idx)))) {
			atomic_compare_exchange_strong(&s->meta, &busy, cm);
			return 0;
		}
		atomic_fetch_sub_explicit(&hd->live[vns], 1, memory_order_relaxed);
		atomic_fetch_sub_explicit(&hd->live_total, 1, memory_order_relaxed);
		if (in_place) {
			atomic_fetch_add_explicit(&hd->evicted[vns], 1, memory_order_relaxed);
			*evicted = true;
		} else {
			atomic_fetch_add_explicit(&hd->reclaimed, 1, memory_order_relaxed);
		}
	} else if (shm_meta_state(cm) != SHM_ST_FREE) {
		atomic_fetch_add_explicit(&hd->recovered, 1, memory_order_relaxed);
	}
	return busy;
}

/* 4. Writes k's identity and zero counters into slot c, claimed as busy,
 * while nobody can see it, makes the chain long enough to reach it (probe
 * distance d), then shows it as pend (PENDING: comparable, not yet counted
 * into). Returns false when the claim was taken for abandoned meanwhile. */
static bool shm_write_pending(struct shm_table *t, const struct shm_key *k, uint32_t c,
			      uint32_t d, uint64_t busy, uint64_t pend)
{
	struct shm_slot *s = &t->slots[c];

	atomics_store_double(&s->count, 0.0);
	atomics_store_double(&s->diff, 0.0);
	atomic_store_explicit(&t->prot[c], 0, memory_order_relaxed);
	for (size_t w = 0; w < SHM_GRANT_WORDS; w++)
		atomic_store_explicit(&t->grant[SHM_GRANT_WORDS * (size_t)c + w], 0,
				      memory_order_relaxed);
	/* The sync loop visits only slots marked here (never cleared: slots
	 * never return to EMPTY). Set on insert only, not per hit. */
	if (!(atomic_load_explicit(&t->used[c / 64], memory_order_relaxed) & (1ULL << (c % 64))))
		atomic_fetch_or_explicit(&t->used[c / 64], 1ULL << (c % 64), memory_order_relaxed);
	for (unsigned w = 0; w < SHM_KEY_WORDS; w++)
		atomic_store_explicit(&s->key[w], w < k->nwords ? k->w[w] : 0,
				      memory_order_relaxed);
	atomics_raise_u16(&t->maxd[k->home], (uint16_t)d);
	return atomic_compare_exchange_strong(&s->meta, &busy, pend);
}

/* 5. Resolves the racing inserts of k's window `start` (see shm.h), then
 * makes slot c (PENDING as pend) LIVE as want and counts it. Returns
 * SHM_TRY_DONE with *out set (our slot, or a LIVE duplicate: *how is then
 * SHM_INS_FOUND), or SHM_TRY_AGAIN. */
static enum shm_try shm_publish(struct shm_table *t, const struct shm_key *k, int64_t start,
				uint32_t c, uint64_t pend, uint64_t want, struct shm_ref *out,
				enum shm_ins *how)
{
	uint64_t jm, expect = pend;
	uint32_t j;

	for (;;) {
		switch (shm_find_dup(t, k, start, c, &j, &jm)) {
		case SHM_DUP_LIVE:
			shm_release(t, c, pend);
			out->idx = j;
			out->meta = jm;
			*how = SHM_INS_FOUND;
			return SHM_TRY_DONE;
		case SHM_DUP_LOWER:
			shm_release(t, c, pend);
			shm_wait_pending(t, j, jm);
			return SHM_TRY_AGAIN;
		case SHM_DUP_HIGHER:
			shm_wait_pending(t, j, jm);
			continue;
		case SHM_DUP_NONE:
		case SHM_DUP_COUNT:
			break;
		}
		break;
	}
	if (!atomic_compare_exchange_strong(&t->slots[c].meta, &expect, want))
		return SHM_TRY_AGAIN;
	atomic_fetch_add_explicit(&t->hdr->live[k->ns], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&t->hdr->live_total, 1, memory_order_relaxed);
	out->idx = c;
	out->meta = want;
	return SHM_TRY_DONE;
}

/* One attempt, in the steps above. sample: choose among the first
 * SHM_EVICT_SAMPLE slots (forced at max_keys LIVE slots) instead of taking
 * the first free one. */
static enum shm_try shm_try_insert(struct shm_table *t, const struct shm_key *k, int64_t start,
				   double now, bool sample, struct shm_ref *out,
				   enum shm_ins *how)
{
	uint64_t want = shm_meta_of(k, start, SHM_ST_LIVE), pend = shm_meta_of(k, start, SHM_ST_PENDING);
	uint32_t md = atomic_load(&t->maxd[k->home]), at = SHM_NONE;
	const struct shm_pick *pick, *victim;
	struct shm_room room;
	bool evicted = false;
	uint64_t m, busy;

	shm_room_init(t, k, sample, &room);
	if ((m = shm_probe(t, k, start, md, now, &room, &at))) {
		if (m == want) {
			out->idx = at;
			out->meta = m;
			*how = SHM_INS_FOUND;
			return SHM_TRY_DONE;
		}
		/* Someone is inserting it right now. */
		shm_wait_pending(t, at, m);
		return SHM_TRY_AGAIN;
	}
	pick = shm_choose(t, k, &room, &victim);
	if (!pick)
		return SHM_TRY_FULL;
	if (victim) {
		if (!shm_evict(t, victim, now))
			return SHM_TRY_AGAIN;
		evicted = true;
	}
	/* A LIVE pick other than the stale one is a victim evicted in place. */
	busy = shm_claim(t, pick, pick != &room.stale, now, &evicted);
	if (!busy)
		return SHM_TRY_AGAIN;
	*how = evicted ? SHM_INS_EVICTED : SHM_INS_NEW;
	if (!shm_write_pending(t, k, pick->idx, pick->d, busy, pend))
		return SHM_TRY_AGAIN;
	return shm_publish(t, k, start, pick->idx, pend, want, out, how);
}

int shm_insert(struct shm_table *t, const struct shm_key *k, int64_t start, double now,
	       struct shm_ref *out)
{
	enum shm_ins how = SHM_INS_NEW;
	bool sample = false;

	out->idx = SHM_NONE;
	out->meta = 0;
	if (!shm_valid_start(start) || !(now >= 0))
		return -1;
	for (unsigned round = 0; round < SHM_INSERT_ROUNDS; round++) {
		switch (shm_try_insert(t, k, start, now, sample, out, &how)) {
		case SHM_TRY_DONE:
			return (int)how;
		case SHM_TRY_FULL:
			/* Nothing free in the chain below max_keys: look
			 * once more, as at max_keys (a victim may do). */
			if (sample || t->hdr->share[k->ns] == 0)
				goto full;
			sample = true;
			break;
		case SHM_TRY_AGAIN:
		case SHM_TRY_COUNT:
			break;
		}
	}
full:
	atomic_fetch_add_explicit(&t->hdr->full_events, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&t->hdr->refused[k->ns], 1, memory_order_relaxed);
	return -1;
}
