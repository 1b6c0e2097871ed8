/*
 * topk.h - which keys hit a namespace's window the most, and which are
 * denied the most, in the current window: a bounded heavy-hitters summary
 * (Space-Saving, Metwally et al. 2005) per (namespace, window) and per
 * kind (hits, denials), in a shared mapping the master creates before
 * fork, for GET /top (docs/OPERATIONS.md).
 *
 * The hit path pays one counter increment per hit: one hit in `sample` of
 * each worker (and one denial in `sample`) updates a summary, with the
 * weight of `sample` hits, under the summary's lock (taken with one
 * try: a busy summary skips that sample; a lock left by a killed process
 * is taken over after a second).
 *
 * Error bound (documented in docs/OPERATIONS.md): for K entries and a
 * window in which the summary saw a total weight N, every key whose
 * weight is above N / K is listed, and each listed count overstates the
 * key's sampled weight by at most its `error` (<= N / K); sampling adds
 * an error of the order of sample x sqrt(hits / sample) per key.
 */
#ifndef TOPK_H
#define TOPK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TOPK_KEY_MAX     104     /* the stored key (agent/ratelimit.h RL_STORED_KEY_MAX) */
#define TOPK_ENTRIES_MAX 1024
#define TOPK_SAMPLE_MAX  1024

enum topk_kind {
	TOPK_HITS = 0,
	TOPK_DENIED,
	TOPK_KINDS
};

struct topk;

/* One entry of an answer. */
struct topk_entry {
	char key[TOPK_KEY_MAX + 1];
	uint8_t keylen;
	double count;              /* estimated weight, >= the true sampled one */
	double error;              /* what count may overstate */
};

/* A summary of K entries per kind for each of nns x nwin (namespace,
 * window) pairs (indexes of the shared table: they survive a reload);
 * one hit in `sample` per process is recorded. K 0: off (NULL is
 * returned, and every call below accepts NULL). NULL with err on failure. */
struct topk *topk_new(unsigned nns, unsigned nwin, unsigned k, unsigned sample, char *err,
		      size_t errlen);
void topk_free(struct topk *t);

/* The hit path, in two steps so that only a sampled hit pays for its
 * stored key: topk_due() counts a hit (denied: over its limit) and says
 * which kinds sample it (a mask of 1 << enum topk_kind; 0 almost always);
 * topk_record() then adds it (cost) for the stored key on (ns, win) in
 * the window starting at `start`. */
unsigned topk_due_draw(struct topk *t, bool denied);
static inline unsigned topk_due(struct topk *t, bool denied);

/* This process's countdowns to its next sampled hit and denial (drawn in
 * topk.c): topk_due() is inline, a countdown's step on the hit path. */
extern unsigned topk_left_[TOPK_KINDS];
void topk_record(struct topk *t, unsigned ns, unsigned win, int64_t start, const char *key,
		 size_t keylen, double cost, unsigned mask);

/* The n heaviest of a kind on (ns, win) in the window starting at
 * `start`, heaviest first, into out[0..n); *total: the summary's total
 * weight in that window; *bound: the error bound N / K. Returns how many. */
size_t topk_query(struct topk *t, unsigned ns, unsigned win, int64_t start, enum topk_kind kind,
		  struct topk_entry *out, size_t n, double *total, double *bound);

/* The entries per summary and the sampling (0, 0: off). */
unsigned topk_entries(const struct topk *t);
unsigned topk_sample(const struct topk *t);

/* Bytes of the mapping. */
size_t topk_bytes(const struct topk *t);

/* topk_due_draw() when a countdown reaches its end, which draws the next. */
static inline unsigned topk_due(struct topk *t, bool denied)
{
	if (!t)
		return 0;
	if (__builtin_expect(topk_left_[TOPK_HITS] > 1 &&
				     (!denied || topk_left_[TOPK_DENIED] > 1), 1)) {
		topk_left_[TOPK_HITS]--;
		if (denied)
			topk_left_[TOPK_DENIED]--;
		return 0;
	}
	return topk_due_draw(t, denied);
}

#endif /* TOPK_H */
