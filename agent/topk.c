/*
 * topk.c - heavy hitters per (namespace, window) in shared memory (see
 * topk.h): Space-Saving over sampled hits, one lock per summary, taken
 * with one try.
 */
#include "agent/topk.h"
#include "agent/atomics.h"
#include "agent/segment.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TOPK_LOCK_STALE_MS 1000   /* a lock held this long: its holder died */
#define TOPK_LOCK_SPIN     4096   /* pauses before a busy summary skips a sample */

struct topk_slot {
	double error;
	uint8_t keylen;
	char key[TOPK_KEY_MAX];
};

/* A summary's entries are split so that a sample's scan reads two short
 * arrays (4 + 8 bytes an entry, 768 bytes for 64 entries) instead of
 * every entry's key (128 bytes each): tag[i], a hash of entry i's key,
 * finds the key (its bytes compared only when the tag matches), count[i]
 * finds the smallest entry. Then e[i]: its error and key. */
struct topk_summary {
	_Atomic uint64_t lock;             /* 0, or when it was taken (ms) */
	int64_t start;                     /* the window it counts */
	double total;                      /* weight seen in that window */
	uint32_t n;                        /* entries in use */
	uint32_t pad;
	unsigned char data[];              /* tag[k], count[k], e[k] (topk_new's layout) */
};

struct topk {
	size_t bytes;
	unsigned nns, nwin, k, sample;
	size_t stride;                     /* bytes of one summary */
	size_t count_off, slot_off;        /* count[] and e[] in a summary's data */
	unsigned char data[];
};

static uint32_t *topk_tags(struct topk_summary *s)
{
	return (uint32_t *)(void *)s->data;
}

static double *topk_counts(const struct topk *t, struct topk_summary *s)
{
	return (double *)(void *)(s->data + t->count_off);
}

static struct topk_slot *topk_slots(const struct topk *t, struct topk_summary *s)
{
	return (struct topk_slot *)(void *)(s->data + t->slot_off);
}

/* FNV-1a: the tag of a key (a mismatch rules the key out; a match is
 * checked byte by byte). */
static uint32_t topk_tag(const char *key, size_t keylen)
{
	uint32_t h = 2166136261u ^ (uint32_t)keylen;

	for (size_t i = 0; i < keylen; i++)
		h = (h ^ (unsigned char)key[i]) * 16777619u;
	return h;
}

static uint64_t topk_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000 + 1;
}

/* This process's countdowns to its next sampled hit and denial, drawn
 * uniformly in 1 .. 2 x sample - 1 (sample on average): a fixed period
 * would alias with periodic traffic and miss some keys every time. */
unsigned topk_left_[TOPK_KINDS];
static uint64_t topk_rng = 0x9e3779b97f4a7c15ULL;

/* Whether this process has seeded topk_rng: cleared in a forked child
 * (pthread_atfork, registered by the first topk_new), so that a draw
 * need not ask getpid(), a system call, to see it is in a new process. */
static bool topk_seeded;

static void topk_forked(void)
{
	topk_seeded = false;
}

static unsigned topk_next(unsigned sample)
{
	/* Each worker draws its own (they inherit the master's state). */
	if (!topk_seeded) {
		topk_seeded = true;
		topk_rng ^= (uint64_t)getpid() * 0xbf58476d1ce4e5b9ULL + topk_now_ms();
		if (!topk_rng)
			topk_rng = 1;
	}
	topk_rng ^= topk_rng << 13;
	topk_rng ^= topk_rng >> 7;
	topk_rng ^= topk_rng << 17;
	return sample > 1 ? 1 + (unsigned)(topk_rng % (2 * sample - 1)) : 1;
}

struct topk *topk_new(unsigned nns, unsigned nwin, unsigned k, unsigned sample, char *err,
		      size_t errlen)
{
	if (k == 0)
		return NULL;
	if (k > TOPK_ENTRIES_MAX || sample == 0 || sample > TOPK_SAMPLE_MAX) {
		snprintf(err, errlen, "top_keys %u / top_sample %u out of range", k, sample);
		return NULL;
	}
	static bool atfork;
	if (!atfork && pthread_atfork(NULL, NULL, topk_forked) != 0) {
		snprintf(err, errlen, "heavy hitters: pthread_atfork failed");
		return NULL;
	}
	atfork = true;
	size_t count_off = ((size_t)k * sizeof(uint32_t) + 7) & ~(size_t)7;
	size_t slot_off = count_off + (size_t)k * sizeof(double);
	slot_off = (slot_off + _Alignof(struct topk_slot) - 1) & ~(_Alignof(struct topk_slot) - 1);
	size_t stride = sizeof(struct topk_summary) + slot_off + (size_t)k * sizeof(struct topk_slot);
	stride = (stride + 63) & ~(size_t)63;
	size_t bytes = sizeof(struct topk) + (size_t)nns * nwin * TOPK_KINDS * stride;
	struct topk *t = segment_new(bytes);
	if (!t) {
		snprintf(err, errlen, "heavy hitters (%zu bytes): mmap: %s", bytes, strerror(errno));
		return NULL;
	}
	t->bytes = bytes;
	t->nns = nns;
	t->nwin = nwin;
	t->k = k;
	t->sample = sample;
	t->stride = stride;
	t->count_off = count_off;
	t->slot_off = slot_off;
	return t;
}

void topk_free(struct topk *t)
{
	if (t)
		segment_free(t, t->bytes);
}

unsigned topk_entries(const struct topk *t)
{
	return t ? t->k : 0;
}

unsigned topk_sample(const struct topk *t)
{
	return t ? t->sample : 0;
}

size_t topk_bytes(const struct topk *t)
{
	return t ? t->bytes : 0;
}

static struct topk_summary *topk_at(struct topk *t, unsigned ns, unsigned win,
				    enum topk_kind kind)
{
	if (ns >= t->nns || win >= t->nwin)
		return NULL;
	size_t i = ((size_t)ns * t->nwin + win) * TOPK_KINDS + (size_t)kind;
	return (struct topk_summary *)(t->data + i * t->stride);
}

/* The lock, waited for a few microseconds at most (the holder only
 * scans K entries); a stale one (its holder died) is taken over. false:
 * still busy, the sample is skipped. */
static bool topk_lock(struct topk_summary *s)
{
	uint64_t now = topk_now_ms(), seen = 0;

	for (int spin = 0; spin < TOPK_LOCK_SPIN; spin++) {
		seen = 0;
		if (atomic_compare_exchange_strong(&s->lock, &seen, now))
			return true;
		atomics_cpu_relax();
	}
	return now - seen > TOPK_LOCK_STALE_MS && atomic_compare_exchange_strong(&s->lock, &seen, now);
}

static void topk_unlock(struct topk_summary *s)
{
	atomic_store(&s->lock, 0);
}

/* A new window: the summary starts empty. */
static void topk_roll(struct topk_summary *s, int64_t start)
{
	if (s->start == start)
		return;
	s->start = start;
	s->total = 0;
	s->n = 0;
}

/* Space-Saving: the key's entry grows by w; a new key takes a free
 * entry, or the smallest one (its count carried over as the new key's
 * error). */
static void topk_add(const struct topk *t, struct topk_summary *s, const char *key,
		     size_t keylen, double w)
{
	uint32_t *tag = topk_tags(s), h = topk_tag(key, keylen), min = 0, i;
	double *count = topk_counts(t, s);
	struct topk_slot *slot = topk_slots(t, s);

	s->total += w;
	for (i = 0; i < s->n; i++) {
		if (tag[i] == h && slot[i].keylen == keylen && memcmp(slot[i].key, key, keylen) == 0) {
			count[i] += w;
			return;
		}
		if (count[i] < count[min])
			min = i;
	}
	if (s->n < t->k) {
		i = s->n++;
		slot[i].error = 0;
		count[i] = w;
	} else {
		i = min;
		slot[i].error = count[i];
		count[i] += w;
	}
	tag[i] = h;
	slot[i].keylen = (uint8_t)keylen;
	memcpy(slot[i].key, key, keylen);
}

unsigned topk_due_draw(struct topk *t, bool denied)
{
	unsigned mask = 0;

	if (!t)
		return 0;
	for (int kind = TOPK_HITS; kind <= (denied ? TOPK_DENIED : TOPK_HITS); kind++) {
		if (topk_left_[kind] > 1) {
			topk_left_[kind]--;
			continue;
		}
		topk_left_[kind] = topk_next(t->sample);
		mask |= 1u << kind;
	}
	return mask;
}

void topk_record(struct topk *t, unsigned ns, unsigned win, int64_t start, const char *key,
		 size_t keylen, double cost, unsigned mask)
{
	if (!t || keylen == 0 || keylen > TOPK_KEY_MAX)
		return;
	for (int kind = 0; kind < TOPK_KINDS; kind++) {
		struct topk_summary *s;
		if (!(mask & (1u << kind)) || !(s = topk_at(t, ns, win, (enum topk_kind)kind)) ||
		    !topk_lock(s))
			continue;
		topk_roll(s, start);
		topk_add(t, s, key, keylen, cost * t->sample);
		topk_unlock(s);
	}
}

size_t topk_query(struct topk *t, unsigned ns, unsigned win, int64_t start, enum topk_kind kind,
		  struct topk_entry *out, size_t n, double *total, double *bound)
{
	struct topk_summary *s = t ? topk_at(t, ns, win, kind) : NULL;
	size_t got = 0;

	*total = *bound = 0;
	if (!s)
		return 0;
	/* An admin request: it may wait for the lock a little. */
	for (int tries = 0; !topk_lock(s); tries++)
		if (tries > 100000)
			return 0;
	if (s->start == start) {
		*total = s->total;
		*bound = s->total / t->k;
		const double *count = topk_counts(t, s);
		const struct topk_slot *slot = topk_slots(t, s);
		for (uint32_t i = 0; i < s->n; i++) {
			const struct topk_slot *e = &slot[i];
			/* Insertion into out, heaviest first, the n best. */
			size_t at = got;
			while (at > 0 && out[at - 1].count < count[i])
				at--;
			if (at >= n)
				continue;
			size_t last = got < n ? got : n - 1;
			memmove(&out[at + 1], &out[at], (last - at) * sizeof(*out));
			out[at].count = count[i];
			out[at].error = e->error;
			out[at].keylen = e->keylen;
			memcpy(out[at].key, e->key, e->keylen);
			out[at].key[e->keylen] = '\0';
			if (got < n)
				got++;
		}
	}
	topk_unlock(s);
	return got;
}
