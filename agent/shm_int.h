/*
 * shm_int.h - what only the shared table's own files share (private: no
 * other file includes it). The table's public header is agent/shm.h,
 * which draws the segment, the slot states and the protocols; its code
 * is cut by job:
 *
 *   shm_segment.c the segment: made, mapped from a state file, unmapped;
 *                 the header's settings (namespaces, windows, shares,
 *                 digest key) and counters (stats)
 *   shm_find.c    a key prepared and its slots found: the lookup every hit
 *                 makes
 *   shm_insert.c  a window's slot created: the probe of the chain, the
 *                 claim, racing inserts resolved, abandoned claims recovered
 *   shm_evict.c   room at max_keys: the namespaces over their share, the
 *                 choice of a slot to take, an entry evicted
 *   shm_count.c   a found slot counted and read; slots read one by one
 *                 for the sync loop
 *
 * Between them calls go one way: shm_insert.c calls shm_evict.c, and
 * shm_count.c asks shm_segment.c for a window's size; nothing else. Inline here:
 * what a probe asks of every slot it passes (a call per probed slot would
 * cost the insert path), the key comparison the lookup and the insert
 * share, and the claim and grant words both the insert and the eviction
 * read or write.
 */
#ifndef SHM_INT_H
#define SHM_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/shm.h"

/* ---- keys and metas (shm_find.c, shm_insert.c) ---- */

/* The meta of k's window `start` in state st. */
static inline uint64_t shm_meta_of(const struct shm_key *k, int64_t start, uint64_t st)
{
	return st << SHM_ST_SHIFT | k->ident | ((uint64_t)start & SHM_META_START_MASK);
}

/* The slot after i in a chain (chains wrap around the table's end). */
static inline uint32_t shm_next(const struct shm_table *t, uint32_t i)
{
	return ++i == t->nslots ? 0 : i;
}

/* Does `start` fit a meta's 32 bits of window start? */
static inline bool shm_valid_start(int64_t start)
{
	return start >= 0 && start <= (int64_t)SHM_META_START_MASK;
}

enum shm_cmp {
	SHM_CMP_DIFFERENT = 0,  /* the slot holds another key */
	SHM_CMP_SAME,           /* the slot holds k (as of meta m) */
	SHM_CMP_CHANGED,        /* meta changed while the key was read: look again */
	SHM_CMP_COUNT
};

/* Compares slot s's key bytes with k's, m being the meta read before (it
 * already matched k's identity, so the lengths agree). The bytes are only
 * trusted if meta is still m after reading them. */
static inline enum shm_cmp shm_key_cmp(const struct shm_slot *s, const struct shm_key *k,
				       uint64_t m)
{
	bool same = true;

	for (unsigned i = 0; i < k->nwords; i++)
		if (atomic_load_explicit(&s->key[i], memory_order_relaxed) != k->w[i])
			same = false;
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&s->meta, memory_order_relaxed) != m)
		return SHM_CMP_CHANGED;
	return same ? SHM_CMP_SAME : SHM_CMP_DIFFERENT;
}

/* ---- claims (shm_insert.c, shm_evict.c) ---- */

/* A BUSY meta dated now. The ticket makes it unique, so a stale owner's
 * later CAS can never succeed on someone else's claim. */
static inline uint64_t shm_busy_meta(struct shm_table *t, double now)
{
	return SHM_ST_BUSY << SHM_ST_SHIFT | ((uint64_t)(uint32_t)now << SHM_META_BUSY_TIME_SHIFT) |
	       (atomic_fetch_add_explicit(&t->hdr->ticket, 1, memory_order_relaxed) &
		SHM_META_TICKET_MASK);
}

/* Does slot i hold a grant, or grant hits the store has not been told of
 * (evicted, they would stay reserved in the store)? */
static inline bool shm_grant_held(const struct shm_table *t, uint32_t i)
{
	const _Atomic uint64_t *g = &t->grant[SHM_GRANT_WORDS * (size_t)i];

	return atomics_bitsd(atomic_load(&g[SHM_GRANT_LEFT])) != 0.0 ||
	       atomics_bitsd(atomic_load(&g[SHM_GRANT_SPENT])) != 0.0 ||
	       atomics_bitsd(atomic_load(&g[SHM_GRANT_RET])) != 0.0;
}

/* ---- room: what a probe notes of each slot (shm_insert.c) ---- */

/* The LIVE slots namespace ns is guaranteed (shm_set_ns; unset: all). */
static inline uint64_t shm_share(const struct shm_table *t, unsigned ns)
{
	return t->hdr->share[ns] ? t->hdr->share[ns] : t->hdr->max_keys;
}

/* What an insert that needs room can make of slot s, whose meta is m, at
 * `now` (see shm.h). */
enum shm_cand {
	SHM_CAND_NONE = 0,   /* in use */
	SHM_CAND_FREE,       /* EMPTY, FREE, abandoned BUSY, stale PENDING: one
				more LIVE slot once taken */
	SHM_CAND_STALE,      /* stale LIVE with nothing to push: re-keyed */
	SHM_CAND_COUNT
};

/* FREE: EMPTY/FREE, BUSY abandoned for longer than SHM_BUSY_TIMEOUT, or
 * PENDING with a stale window. STALE: LIVE with a window older than the
 * previous one, or starting more than SHM_CLOCK_SLACK seconds in the
 * future (left from before the clock was stepped back; no process's clock
 * is that far ahead), and nothing left to push. */
static inline enum shm_cand shm_cand_kind(const struct shm_table *t, const struct shm_slot *s,
					  uint64_t m, double now)
{
	uint64_t st = shm_meta_state(m);
	uint32_t size;
	double start;

	if (st == SHM_ST_FREE)
		return SHM_CAND_FREE;
	if (st == SHM_ST_BUSY)
		return (double)(shm_meta_busy_time(m) + SHM_BUSY_TIMEOUT) <= now ? SHM_CAND_FREE
										: SHM_CAND_NONE;
	size = atomic_load_explicit(&t->hdr->sizes[shm_meta_ns(m)][shm_meta_win(m)],
				    memory_order_relaxed);
	if (size == 0)
		return SHM_CAND_NONE;
	start = (double)shm_meta_start(m);
	if (start + 2.0 * size > now && start <= now + SHM_CLOCK_SLACK)
		return SHM_CAND_NONE;
	if (st == SHM_ST_PENDING)
		return SHM_CAND_FREE;
	return atomics_load_double(&s->diff) == 0.0 ? SHM_CAND_STALE : SHM_CAND_NONE;
}

/* The value of LIVE slot i (meta m, not stale) as an eviction victim: its
 * count, or for a previous window the part of it the sliding rate still
 * weighs. -1 when it may not be evicted: a diff the store has not
 * confirmed, a grant, or protected. */
static inline double shm_victim_value(const struct shm_table *t, uint32_t i, uint64_t m,
				      double now)
{
	const struct shm_slot *s = &t->slots[i];
	uint32_t size = atomic_load_explicit(&t->hdr->sizes[shm_meta_ns(m)][shm_meta_win(m)],
					     memory_order_relaxed);
	double start = (double)shm_meta_start(m), c;

	if (size == 0 || atomics_load_double(&s->diff) != 0.0 ||
	    atomic_load_explicit(&t->prot[i], memory_order_relaxed) || shm_grant_held(t, i))
		return -1;
	c = atomics_load_double(&s->count);
	if (now >= start + size)
		c *= (start + 2.0 * size - now) / size;
	return c;
}

/* A slot an insert could take, found while probing its chain. */
struct shm_pick {
	uint32_t idx;                /* SHM_NONE: none found */
	uint32_t d;                  /* probe distance from the home bucket */
	uint64_t m;                  /* its meta when seen */
	double value;                /* victims: what evicting it loses */
};

static inline void shm_pick_set(struct shm_pick *p, uint32_t idx, uint32_t d, uint64_t m,
				double value)
{
	p->idx = idx;
	p->d = d;
	p->m = m;
	p->value = value;
}

/* What one probe of a chain noted: the slots one insert attempt could
 * take, and the state of the table they are chosen by. */
struct shm_room {
	struct shm_pick fre;         /* the first FREE candidate */
	struct shm_pick stale;       /* the first STALE candidate */
	struct shm_pick lend;        /* sampling: the least valuable entry of a
					namespace over its share */
	struct shm_pick own;         /* sampling: the least valuable entry of
					the inserting namespace */
	int64_t total;               /* LIVE slots in all when the attempt began */
	uint32_t borrowers;          /* sampling, under: namespaces over their
					share, but the inserting one (a bit each) */
	bool sample;                 /* choose among the first SHM_EVICT_SAMPLE
					slots instead of the first free one */
	bool under;                  /* the inserting namespace is under its share */
};

/* Slot i (probe distance d, meta m, neither k's nor a candidate) while
 * sampling: kept in r->own or r->lend if it is the least valuable entry
 * seen there so far and may be evicted. */
static inline void shm_room_sample(const struct shm_table *t, const struct shm_key *k,
				   struct shm_room *r, uint32_t i, uint32_t d, uint64_t m,
				   double now)
{
	unsigned vns = shm_meta_ns(m);
	struct shm_pick *best = vns == k->ns		  ? &r->own
				: (r->borrowers >> vns) & 1u ? &r->lend
							  : NULL;
	double v = best ? shm_victim_value(t, i, m, now) : -1;

	if (v >= 0 && (best->idx == SHM_NONE || v < best->value))
		shm_pick_set(best, i, d, m, v);
}

/* ---- room at max_keys: the choice and the eviction (shm_evict.c) ---- */

/* Namespaces holding more LIVE slots than their share (a bit each). */
uint32_t shm_borrowers(const struct shm_table *t);

/* Which of r's candidates to take when sampling (r->sample: at max_keys
 * LIVE slots), in the order of shm.h's banner; NULL: no room. *victim is
 * set to an entry to evict first when the slot taken is another (a free
 * one nearer home: the newcomer stays close to home, so lookups stay
 * short), or NULL. The result points into r. */
const struct shm_pick *shm_choose_sampled(const struct shm_table *t, const struct shm_key *k,
					  const struct shm_room *r,
					  const struct shm_pick **victim);

/* Evicts the LIVE entry of pick v (now FREE), unless it changed, got a
 * diff, a grant or a protection since it was seen. Returns whether it
 * did. */
bool shm_evict(struct shm_table *t, const struct shm_pick *v, double now);

#endif /* SHM_INT_H */
