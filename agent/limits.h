/*
 * limits.h - limits per key set at run time (PUT /limits, docs/HTTP.md;
 * docs/OPERATIONS.md, "Giving a tenant more"): a small table in shared
 * memory of overrides, each (namespace index of the shared table, window
 * size, stored key) -> a limit that replaces the namespace's configured
 * limit for that key and window (a caller's own limit may still lower it,
 * by caller_limit). Part of the library: ratelimit.c holds the instance
 * (rl_limits_open) and answers the decision layer's lookups through it.
 *
 * Layout: one mapping, made by the master before fork (anonymous, or the
 * part of a state file after the counter table: limits_open_file), sized
 * once for a number of overrides in all (the sum of the namespaces'
 * max_limit_overrides), every namespace's count bounded by its own:
 *
 *   +-------------------------+ 0
 *   | struct limits_hdr       |  magic, slots, seed, writers' lock, the
 *   +-------------------------+  seqlock word, per namespace: the count,
 *   | struct limits_slot [n]  |  the store's version last applied
 *   +-------------------------+  n = 2 x total + 1, 128 bytes each:
 *                                state|ns|len|window, limit, 13 words of
 *                                key, its home slot
 *
 * Open addressing with linear probing from a keyed hash of (ns, window,
 * key), at most half the slots live (the table never fills a chain); a
 * removal moves the entries after it back (no tombstones, no rebuild).
 * Readers take no lock: one seqlock word for the whole table, odd while a
 * writer changes slots (one insert or one removal at a time, a few dozen
 * stores); a reader copies what it looks at and retries when the word
 * moved, and answers the configured limit only if a writer stays in the
 * middle of one change past LIMITS_TRIES tries (it was descheduled or
 * killed there). A limit changed in place is one word: no retry. A
 * namespace without overrides costs a lookup one relaxed load (its
 * count). Writers exclude each other by a lock word holding the writer's
 * pid; one left by a process that died is taken over (the seqlock made
 * even, the counts counted again).
 */
#ifndef LIMITS_H
#define LIMITS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LIMITS_MAX         1000000    /* the largest max_limit_overrides (NS_OVERRIDES_MAX) */
#define LIMITS_KEY_MAX     104        /* the stored key's bytes (RL_STORED_KEY_MAX) */
#define LIMITS_NS          32         /* namespace indexes (SHM_MAX_NS) */

struct limits;

/* Why a write failed. */
enum limits_err {
	LIMITS_OK = 0,
	LIMITS_ERR_NS_FULL,           /* the namespace holds its max_limit_overrides */
	LIMITS_ERR_FULL,              /* the table holds all it was sized for */
	LIMITS_ERR_BUSY,              /* another writer held the lock too long */
	LIMITS_ERR_ARG,               /* ns, window, key or limit out of range */
	LIMITS_ERR_COUNT
};

/* One override, as listed and as a sync applies a store's. */
struct limits_entry {
	uint32_t window;              /* seconds */
	int64_t limit;                /* 0..NS_LIMIT_MAX */
	uint8_t len;                  /* key bytes */
	char key[LIMITS_KEY_MAX];
};

/* A table for `total` overrides in all (at least 1), anonymous shared
 * memory. Before fork. NULL with the reason in err. */
struct limits *limits_create(size_t total, char *err, size_t errlen);

/* The same kept in the open state file fd from byte `off` on (page
 * aligned: the end of the counter table): a file that ends at off gets a
 * new part; one that holds a part of ours has it made again for this
 * total with the overrides it held, each checked (those past the new
 * total, or malformed, are dropped: *dropped says how many), so a
 * restart keeps them and a damaged slot never becomes a layout. Refused
 * (NULL, err): a part that is not one of ours. Before fork. */
struct limits *limits_open_file(int fd, size_t off, size_t total, size_t *dropped, char *err,
				size_t errlen);

/* Unmaps (a file's part is written back). NULL is ok. */
void limits_destroy(struct limits *l);

/* The limit of (ns, window, key[0..len)), or dflt when none is set.
 * Lock-free, no allocation; one relaxed load when ns has none. A reader
 * never waits for a writer: one that finds a write in progress for
 * LIMITS_TRIES tries (a writer preempted in the middle of a change)
 * answers dflt for that call, the configured limit, and counts it in
 * limits_gave_up(). */
int64_t limits_get(const struct limits *l, unsigned ns, uint32_t window, const char *key,
		   size_t len, int64_t dflt);

/* How many limits_get() calls of this process answered dflt because a
 * write stayed in progress (above). */
uint64_t limits_gave_up(void);

/* Sets (or replaces) an override; ns may hold at most `bound` of them.
 * Returns 0, or an enum limits_err. *added: it was new. */
int limits_put(struct limits *l, unsigned ns, uint32_t window, const char *key, size_t len,
	       int64_t limit, size_t bound, bool *added);

/* Removes an override. Returns 1 (removed), 0 (none was set), or
 * -LIMITS_ERR_BUSY. */
int limits_del(struct limits *l, unsigned ns, uint32_t window, const char *key, size_t len);

/* Removes every override of ns (window 0) or of one window of it.
 * Returns the count removed, or -LIMITS_ERR_BUSY. */
int limits_clear(struct limits *l, unsigned ns, uint32_t window);

/* Makes ns's overrides exactly e[0..n) (a store's, read by a sync
 * cycle), at most bound of them (*kept says how many were). Returns 0, or
 * an enum limits_err (then nothing changed). */
int limits_replace(struct limits *l, unsigned ns, const struct limits_entry *e, size_t n,
		   size_t bound, size_t *kept);

/* Up to max overrides of ns from position *pos on (0: the first), in the
 * table's order, into out; *pos is then where the next page starts, or 0
 * when there is none. A listing made while overrides change may miss or
 * repeat one. Returns the count written. */
size_t limits_list(const struct limits *l, unsigned ns, uint64_t *pos,
		   struct limits_entry *out, size_t max);

/* Overrides ns holds now. */
size_t limits_count(const struct limits *l, unsigned ns);

/* The words of those counts, LIMITS_NS of them, in the shared mapping
 * (valid as long as l): the hot path's "none here" is one load of its
 * namespace's word (rl_limit_of). */
const _Atomic uint32_t *limits_counts(const struct limits *l);

/* The store's version of ns's overrides last applied (0: the store has
 * none; LIMITS_VERSION_UNKNOWN: none applied since the table was made or
 * mapped, so the first read takes them all), and setting it (the sync,
 * after limits_replace). */
#define LIMITS_VERSION_UNKNOWN UINT64_MAX
uint64_t limits_version(const struct limits *l, unsigned ns);
void limits_set_version(struct limits *l, unsigned ns, uint64_t v);

/* The text of an enum limits_err. */
const char *limits_err_str(int e);

#endif /* LIMITS_H */
