/*
 * shm_count.c - a found slot of the shared counter table counted (shm_add,
 * shm_add_if: one CAS loop per word, no addition lost; shm_cas_count: one
 * CAS of a word that is not a sum), read (the count
 * and the diff, trusted only while the slot holds the window it was found
 * with), forgotten and protected; and slot by slot, the sync loop's
 * consistent copies of LIVE slots (shm_read, shm_next_used). The words and
 * their order are drawn in shm.h.
 */
#include "agent/shm.h"

#include <string.h>

void shm_protect(struct shm_table *t, const struct shm_ref *r)
{
	if (r->idx == SHM_NONE)
		return;
	/* Read first: a key hammered over its limit writes the line once. */
	if (!atomic_load_explicit(&t->prot[r->idx], memory_order_relaxed))
		atomic_store(&t->prot[r->idx], 1);
}

/* The count (diff false) or the diff of a found slot, trusted only if the
 * slot still holds the window r was found with (else 0; SHM_NONE: 0). */
static inline double shm_read_word(const struct shm_table *t, const struct shm_ref *r, bool diff)
{
	const struct shm_slot *s;
	double v;

	if (r->idx == SHM_NONE)
		return 0;
	s = &t->slots[r->idx];
	v = atomics_load_double(diff ? &s->diff : &s->count);
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&s->meta, memory_order_relaxed) != r->meta)
		return 0;
	return v;
}

double shm_read_diff(const struct shm_table *t, const struct shm_ref *r)
{
	return shm_read_word(t, r, true);
}

double shm_read_count(const struct shm_table *t, const struct shm_ref *r)
{
	return shm_read_word(t, r, false);
}

/* Counts go into `count` first and `diff` second: a sync that runs in
 * between sees the hit in count only and writes back
 * max(count, total + diff), which keeps it; the other order could count it
 * twice in the visible count. */
double shm_add(struct shm_table *t, const struct shm_ref *r, double v, bool with_diff)
{
	struct shm_slot *s = &t->slots[r->idx];
	double c = atomics_add_double(&s->count, v);

	if (with_diff)
		atomics_add_double(&s->diff, v);
	return c;
}

void shm_add_diff(struct shm_table *t, const struct shm_ref *r, double v)
{
	atomics_add_double(&t->slots[r->idx].diff, v);
}

bool shm_add_if(struct shm_table *t, const struct shm_ref *r, double v, double extra,
		double limit, bool with_diff, double *count)
{
	struct shm_slot *s = &t->slots[r->idx];
	double seen;

	if (!atomics_add_double_if(&s->count, v, extra, limit, &seen)) {
		*count = seen;
		return false;
	}
	*count = seen + v;
	if (with_diff)
		atomics_add_double(&s->diff, v);
	return true;
}

bool shm_cas_count(struct shm_table *t, const struct shm_ref *r, double *seen, double want)
{
	uint64_t old = atomics_dbits(*seen);

	if (atomic_compare_exchange_strong(&t->slots[r->idx].count, &old, atomics_dbits(want)))
		return true;
	*seen = atomics_bitsd(old);
	return false;
}

double shm_forget(struct shm_table *t, const struct shm_ref *r)
{
	struct shm_slot *s;
	double had;

	if (r->idx == SHM_NONE)
		return 0;
	s = &t->slots[r->idx];
	had = atomics_bitsd(atomic_exchange(&s->count, atomics_dbits(0.0)));
	if (!shm_still(t, r))
		return 0;
	/* Unprotected too: a forgotten key is no longer over its limit. */
	atomic_store(&t->prot[r->idx], 0);
	return had;
}

int shm_read(const struct shm_table *t, uint32_t idx, struct shm_entry *e)
{
	const struct shm_slot *s;
	uint64_t words[SHM_KEY_WORDS];
	uint64_t m;
	unsigned nw;

	if (idx >= t->nslots)
		return -1;
	s = &t->slots[idx];
	m = atomic_load_explicit(&s->meta, memory_order_acquire);
	if (shm_meta_state(m) != SHM_ST_LIVE || shm_meta_len(m) > SHM_KEY_MAX)
		return -1;
	nw = (shm_meta_len(m) + 7) / 8;
	for (unsigned i = 0; i < nw; i++)
		words[i] = atomic_load_explicit(&s->key[i], memory_order_relaxed);
	e->count = atomics_load_double(&s->count);
	e->diff = atomics_load_double(&s->diff);
	e->spent = atomics_load_double(&t->grant[SHM_GRANT_WORDS * (size_t)idx + SHM_GRANT_SPENT]);
	e->ret = atomics_load_double(&t->grant[SHM_GRANT_WORDS * (size_t)idx + SHM_GRANT_RET]);
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&s->meta, memory_order_relaxed) != m)
		return -1;
	e->idx = idx;
	e->meta = m;
	e->ns = shm_meta_ns(m);
	e->win = shm_meta_win(m);
	e->size = shm_window_size(t, e->ns, e->win);
	e->start = shm_meta_start(m);
	e->keylen = shm_meta_len(m);
	memcpy(e->key, words, e->keylen);
	e->key[e->keylen] = '\0';
	return 0;
}

uint32_t shm_next_used(const struct shm_table *t, uint32_t from)
{
	uint32_t nwords = (t->nslots + 63) / 64;

	for (uint32_t w = from / 64; w < nwords; w++) {
		uint64_t bits = atomic_load_explicit(&t->used[w], memory_order_relaxed);
		if (w == from / 64)
			bits &= ~0ULL << (from % 64);
		if (bits) {
			uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(bits);
			return i < t->nslots ? i : SHM_NONE;
		}
	}
	return SHM_NONE;
}
