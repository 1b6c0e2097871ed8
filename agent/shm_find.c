/*
 * shm_find.c - a key prepared for the shared counter table (shm_key_init)
 * and its LIVE slots found (shm_find): the lookup every hit makes, wait-
 * free, without allocation or system call. How a key is placed and how
 * far a lookup scans is drawn in shm.h ("Placement").
 */
#include "agent/shm.h"

#include <string.h>

#include "agent/hash.h"
#include "agent/shm_int.h"

/* The n (1..7) bytes at p as the first bytes of a zero-padded 64-bit word
 * (the word memcpy would give). Little-endian machines assemble it in a
 * register: going through a small byte buffer and reading it back as one
 * word defeats store forwarding, and that stall waits for every older
 * instruction to retire, including the previous hit's cache miss - which
 * made cold-key hits pay their memory latencies one after another. */
static inline uint64_t shm_tail_word(const unsigned char *p, size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	uint64_t v = 0;
	size_t o = 0;

	if (n & 4) {
		uint32_t x;

		memcpy(&x, p, 4);
		v = x;
		o = 4;
	}
	if (n & 2) {
		uint16_t x;

		memcpy(&x, p + o, 2);
		v |= (uint64_t)x << (8 * o);
		o += 2;
	}
	if (n & 1)
		v |= (uint64_t)p[o] << (8 * o);
	return v;
#else
	unsigned char b[8] = { 0 };
	uint64_t v;

	memcpy(b, p, n);
	memcpy(&v, b, 8);
	return v;
#endif
}

int shm_key_init(const struct shm_table *t, struct shm_key *k, unsigned ns, unsigned win,
		 const void *key, size_t len)
{
	uint64_t tag, h;
	size_t nw;

	if (len == 0 || len > SHM_KEY_MAX || ns >= SHM_MAX_NS || win >= SHM_MAX_WIN)
		return -1;
	nw = (len + 7) / 8;
	/* Whole words, then the tail zero-padded: fixed-size memcpy calls
	 * compile to single moves (a variable-length one is a libc call). */
	{
		const unsigned char *p = key;
		size_t full = len / 8;

		for (size_t i = 0; i < full; i++)
			memcpy(&k->w[i], p + 8 * i, 8);
		if (len % 8)
			k->w[full] = shm_tail_word(p + 8 * full, len % 8);
	}
	/* Namespace, window and length are hashed too: the same text in two
	 * namespaces lands in two unrelated chains. */
	tag = (uint64_t)len | (uint64_t)ns << 8 | (uint64_t)win << 16;
	h = hash_words(k->w, nw, t->seed ^ (tag * 0x9e3779b97f4a7c15ULL));
	k->hash = h;
	k->nwords = (uint8_t)nw;
	k->len = (uint8_t)len;
	k->ns = (uint8_t)ns;
	k->win = (uint8_t)win;
	/* High bits pick the bucket (multiply-shift onto [0, nslots)), low
	 * bits make the fingerprint, so the two are independent. */
	k->home = (uint32_t)(((h >> 32) * (uint64_t)t->nslots) >> 32);
	k->ident = (uint64_t)len << SHM_META_LEN_SHIFT | (uint64_t)ns << SHM_META_NS_SHIFT |
		   (uint64_t)win << SHM_META_WIN_SHIFT | (h & SHM_META_FP_MASK) << SHM_META_FP_SHIFT;
	return 0;
}

/* For the hot path: a LIVE slot that changes under us is being re-keyed,
 * so it is not ours any more; a miss sends the caller to shm_insert,
 * which looks again carefully. */
static bool shm_key_matches(const struct shm_slot *s, const struct shm_key *k, uint64_t m)
{
	return shm_key_cmp(s, k, m) == SHM_CMP_SAME;
}

void shm_find(const struct shm_table *t, const struct shm_key *k, int64_t start,
	      int64_t prev_start, struct shm_ref *cur, struct shm_ref *prev)
{
	uint64_t want_cur, want_prev = SHM_META_NONE, cm = 0, pm = 0;
	uint32_t i = k->home, md, ci = SHM_NONE, pi = SHM_NONE;

	if (shm_valid_start(start)) {
		want_cur = shm_meta_of(k, start, SHM_ST_LIVE);
		if (shm_valid_start(prev_start))
			want_prev = shm_meta_of(k, prev_start, SHM_ST_LIVE);
		/* One LIVE slot per (identity, start), so the first match is
		 * the only one. */
		md = atomic_load_explicit(&t->maxd[k->home], memory_order_acquire);
		for (uint32_t d = 0; d <= md; d++, i = shm_next(t, i)) {
			const struct shm_slot *s = &t->slots[i];
			uint64_t m = atomic_load_explicit(&s->meta, memory_order_acquire);

			if (m == want_cur) {
				if (shm_key_matches(s, k, m)) {
					ci = i;
					cm = m;
					if (pi != SHM_NONE || want_prev == SHM_META_NONE)
						break;
				}
			} else if (m == want_prev) {
				if (shm_key_matches(s, k, m)) {
					pi = i;
					pm = m;
					if (ci != SHM_NONE)
						break;
				}
			} else if (m == SHM_META_EMPTY) {
				break;
			}
		}
	}
	cur->idx = ci;
	cur->meta = cm;
	prev->idx = pi;
	prev->meta = pm;
}
