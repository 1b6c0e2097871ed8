/*
 * shm.h - the shared counter table: one MAP_SHARED segment (anonymous,
 * or a state file that a restarted agent maps again: shm_open_file),
 * created by the master before fork() and used concurrently by every
 * worker process (and thread), lock-free. It holds a fixed number of
 * counters, each keyed by (namespace, window, key, window start), each
 * with two doubles: `count` (what this node believes the window's total
 * is: last synced cluster total + local hits since) and `diff` (local hits
 * not yet pushed to the cluster store). This header is the table proper:
 * the mapping, lookup, insert, eviction and counting; what the sync layer
 * writes besides (diffs acknowledged, totals, leases, heartbeats, node
 * counts, grants) is agent/shm_sync.h's, in the same segment. The code
 * is cut by job: shm_segment.c (the segment, the header), shm_find.c (lookup),
 * shm_insert.c (insert), shm_evict.c (room at max_keys), shm_count.c
 * (counting, reads); agent/shm_int.h, their private header, says more.
 *
 * Everything in the segment is addressed by index (slot number), never by
 * pointer; every field that more than one process writes is a C11 atomic
 * (agent/atomics.h). A process may be SIGKILLed at any instant: there is
 * no lock to leave behind, and a half-done insert is recovered by others
 * (see the meta states below). The hot path (shm_find, shm_add*) never
 * allocates, never makes a syscall and never waits.
 *
 * Segment layout (offsets from the start of the mapping):
 *
 *   +-----------------------+ 0
 *   | struct shm_hdr        |  geometry, seed, window sizes, stats
 *   +-----------------------+ SHM_HDR_BYTES
 *   | struct shm_slot [n]   |  128 bytes each, 64-byte aligned
 *   +-----------------------+
 *   | _Atomic uint16_t [n]  |  maxd: per home bucket, the largest probe
 *   +-----------------------+  distance of any entry hashed there
 *   | _Atomic uint64_t [n/64]| used: a bit per slot ever written
 *   +-----------------------+
 *   | _Atomic uint8_t [n]   |  prot: 1 = the slot may not be evicted
 *   +-----------------------+
 *   | _Atomic uint64_t [6n] |  grant: per slot, what is left of the grant
 *   +-----------------------+  the store counted for this node, the demand
 *                              of the last and of this sync cycle, the
 *                              admissions in flight, the grant hits spent
 *                              and the grant returned not pushed yet
 *                              (SHM_GRANT_*; agent/shm_sync.h)
 *
 * Slot (128 bytes = two cache lines; meta, the counters and the first 40
 * key bytes share the first line):
 *
 *   0        8        16       24                                   128
 *   +--------+--------+--------+------------------------------------+
 *   | meta   | count  | diff   | key: 13 words, 104 bytes, 0-padded |
 *   +--------+--------+--------+------------------------------------+
 *
 * meta, by state (top two bits):
 *
 *   EMPTY    00 | 0                              never used since mmap
 *   FREE     00 | 1                              used once, now free
 *   BUSY     01 | claim time:32 | ticket:30      being (re)written by one
 *                                                process; invisible
 *   PENDING  10 | len:7 ns:5 win:3 fp:15 | start:32   identity written,
 *                                                not yet counted into
 *   LIVE     11 | len:7 ns:5 win:3 fp:15 | start:32   a counter
 *
 * The whole identity except the key bytes (key length, namespace index,
 * window index, a 15-bit fingerprint of the hash, the window start in
 * Unix seconds) is in the one 64-bit meta word, so one load tells whether
 * a slot can be ours, and reloading it after reading the key bytes tells
 * whether they were stable (a seqlock without a sequence: every
 * re-keying passes through BUSY, which changes meta).
 *
 * Placement: linear probing from the home bucket, chosen from the high
 * bits of a keyed hash of (ns, win, key) - not of the window start - so a
 * key's current and previous window sit in the same chain and one scan
 * finds both. Probe distance is bounded (SHM_PROBE_MAX). maxd[home] only
 * grows and is raised before an entry becomes visible, so a lookup scans
 * home .. home + maxd[home] and no further; it also stops at an EMPTY
 * slot (entries are always placed at or before the first EMPTY slot of
 * their chain, and slots never return to EMPTY).
 *
 * Reclaiming: slots are not deleted. A LIVE slot whose window is older
 * than the previous one (start + 2 * size <= now) and whose diff is 0 is
 * re-keyed in place by an insert that needs room; a stale slot with
 * diff != 0 is kept until a sync pushes its diff (nothing is lost). A
 * window starting more than SHM_CLOCK_SLACK seconds after now is stale
 * too: it was left from before the clock was stepped back, and would
 * otherwise sit until time caught up.
 *
 * Insert protocol (shm_insert): claim a slot by CAS (-> BUSY), write the
 * key and zero counters, raise maxd, CAS -> PENDING, then re-scan the
 * chain for the same identity (all seq_cst, so of two racing inserts at
 * least one sees the other). A LIVE duplicate: release ours (-> FREE) and
 * use it. A PENDING duplicate at a lower index: release ours and wait for
 * it. At a higher index: wait for it to resolve and re-scan. None: CAS
 * -> LIVE. So each (identity, start) has at most one LIVE slot.
 *
 * Recovery from killed processes: a waiter gives a PENDING slot about a
 * millisecond of spinning (SHM_SPIN_MAX), then frees it by CAS; its owner,
 * if alive, sees its own CAS fail and starts over. A BUSY slot older than
 * SHM_BUSY_TIMEOUT seconds (by the claim time in meta) is claimable, as
 * is a PENDING slot whose window is stale. All transitions out of BUSY
 * and PENDING are CAS on the exact meta value (BUSY carries a unique
 * ticket), so an owner always notices that it was robbed.
 *
 * The header's LIVE counts (per namespace, and in all) are updated just
 * after the CAS that makes a slot LIVE or takes it out of LIVE, so a
 * process killed in between leaves them one off. They only steer shares
 * and sampling (an entry early or late), and reports clamp them
 * (rl_ns_stats); a state file's are counted again from its slots when it
 * is loaded (shm_open_file), so an error never outlives the run that made
 * it. Not when a worker dies (the master's rl_worker_gone): the others
 * keep inserting, a scan of the table is no snapshot, and counts stored
 * at its end would lose or double the updates of the inserts made behind
 * it meanwhile - a larger error than the one per killed insert it would
 * fix.
 *
 * Shares and eviction (a full table never turns limiting off): every
 * namespace set with shm_set_ns() has a guaranteed share of max_keys (the
 * agent sets them all; one never set fills the table as it comes) and the
 * header counts the LIVE slots of each namespace. Below max_keys LIVE
 * slots in all, an insert takes the first free or stale slot of its chain,
 * as above: a namespace may borrow what others do not use. At max_keys, an
 * insert samples the first SHM_EVICT_SAMPLE slots from its home (bounded
 * work: no scan of the table) and takes, in this order: a stale slot; if
 * its namespace is under its share, the least valuable entry of a
 * namespace over its share (borrowed room is given back), else a free
 * slot; the least valuable entry of its own namespace (when it may evict);
 * a free slot while the table holds less than the soft cap (max_keys plus
 * half the spare slots). Else the insert is refused. An evicted entry
 * further from home than a free slot is only freed, and the newcomer takes
 * the free slot: entries stay near home and lookups short. The value of an
 * entry is its count (for a previous window, the part the sliding rate
 * still weighs). Never a victim: an entry with a diff the store has not
 * confirmed, one holding a grant (shm_grant_add), or one marked by
 * shm_protect() (a key found over a limit it was asked about). All are
 * re-checked after the victim is claimed (BUSY), as for stale slots.
 *
 * A hit that found its slot just before it was evicted may add to the
 * slot after it changed hands; shm_still() (a seq_cst re-read of meta
 * after the seq_cst add) tells. A hit with a diff (a namespace that syncs)
 * is then counted again under its own key, so the store never misses it;
 * at worst the newcomer counts it once more. A local hit is not re-read
 * (ratelimit.c keeps the hot path as it was): it goes away with its
 * evicted entry, as if the eviction had come just after it, or, in the
 * narrower race where it lands after the re-keying, the newcomer counts it.
 *
 * Known limit (documented, not fixed): a counter add is not atomic with
 * the slot's identity. A process that found its slot and then stalls for
 * longer than a whole window (at least a second) before adding could add
 * to the slot after it was reclaimed for another key. The same holds for a
 * process frozen inside the ~20 stores of an insert for longer than
 * SHM_BUSY_TIMEOUT. A live process is practically never descheduled that
 * long; a killed one never resumes.
 */
#ifndef SHM_H
#define SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/atomics.h"

#define SHM_KEY_MAX      104    /* key bytes stored in a slot */
#define SHM_KEY_WORDS    13     /* SHM_KEY_MAX / 8 */
#define SHM_MAX_NS       32     /* namespace indexes 0..31 */
#define SHM_MAX_WIN      8      /* window indexes 0..7 per namespace */
#define SHM_PROBE_MAX    512    /* longest probe distance */
#define SHM_MAX_KEYS     ((size_t)1 << 30)
#define SHM_SPIN_MAX     (1u << 16)   /* ~1 ms of pause instructions */
#define SHM_BUSY_TIMEOUT 2      /* seconds before a BUSY slot is abandoned */
#define SHM_CLOCK_SLACK  60     /* windows starting later than now + this are stale */
#define SHM_NONE         UINT32_MAX   /* "no slot" index */
#define SHM_EVICT_SAMPLE 32     /* slots of a chain sampled for a victim */
#define SHM_NAME_MAX     64     /* namespace names, NUL included */
#define SHM_GRANT_WORDS  6      /* per slot: grant left, last and this cycle's demand,
                                   admissions in flight, spent and returned not
                                   pushed yet */
#define SHM_GRANT_LEFT   0
#define SHM_GRANT_LAST   1
#define SHM_GRANT_USED   2
#define SHM_GRANT_FLIGHT 3
#define SHM_GRANT_SPENT  4
#define SHM_GRANT_RET    5

/* Slots per configured key: the table keeps the load factor <= 3/4 at
 * max_keys live entries, where linear probing stays short. */
#define SHM_LOAD_NUM     4
#define SHM_LOAD_DEN     3

/* meta word layout (see the banner). */
#define SHM_ST_SHIFT     62
#define SHM_ST_FREE      0ULL         /* EMPTY (meta == 0) or FREE */
#define SHM_ST_BUSY      1ULL
#define SHM_ST_PENDING   2ULL
#define SHM_ST_LIVE      3ULL
#define SHM_META_EMPTY   0ULL
#define SHM_META_FREE    1ULL
#define SHM_META_NONE    UINT64_MAX   /* no slot has it (length 127 > SHM_KEY_MAX) */
#define SHM_META_STATE_MASK (3ULL << SHM_ST_SHIFT)
#define SHM_META_LEN_SHIFT  55
#define SHM_META_NS_SHIFT   50
#define SHM_META_WIN_SHIFT  47
#define SHM_META_FP_SHIFT   32
#define SHM_META_FP_MASK    0x7fffULL
#define SHM_META_START_MASK 0xffffffffULL
#define SHM_META_BUSY_TIME_SHIFT 30
#define SHM_META_TICKET_MASK 0x3fffffffULL

static inline uint64_t shm_meta_state(uint64_t m)
{
	return m >> SHM_ST_SHIFT;
}

static inline unsigned shm_meta_len(uint64_t m)
{
	return (unsigned)(m >> SHM_META_LEN_SHIFT) & 0x7f;
}

static inline unsigned shm_meta_ns(uint64_t m)
{
	return (unsigned)(m >> SHM_META_NS_SHIFT) & 0x1f;
}

static inline unsigned shm_meta_win(uint64_t m)
{
	return (unsigned)(m >> SHM_META_WIN_SHIFT) & 0x7;
}

static inline int64_t shm_meta_start(uint64_t m)
{
	return (int64_t)(m & SHM_META_START_MASK);
}

static inline int64_t shm_meta_busy_time(uint64_t m)
{
	return (int64_t)((m >> SHM_META_BUSY_TIME_SHIFT) & 0xffffffffULL);
}

/* One counter. Written only through the table's files (shm_*.c); tests may set meta
 * by hand to simulate a process killed mid-insert. */
struct shm_slot {
	_Alignas(64) _Atomic uint64_t meta;
	_Atomic uint64_t count;                  /* double bits */
	_Atomic uint64_t diff;                   /* double bits */
	_Atomic uint64_t key[SHM_KEY_WORDS];     /* key bytes, zero-padded */
};

_Static_assert(sizeof(struct shm_slot) == 128, "a slot is two cache lines");

/* The start of the segment. Geometry and seed are written once before
 * fork and read-only after; sizes[][] is set by shm_set_window() before
 * fork. */
struct shm_hdr {
	uint64_t magic;
	uint64_t nslots;
	uint64_t max_keys;
	uint64_t seed;
	_Atomic uint32_t sizes[SHM_MAX_NS][SHM_MAX_WIN];   /* window sizes, 0 = unset */
	uint64_t share[SHM_MAX_NS];        /* guaranteed LIVE slots; 0 = max_keys */
	uint8_t evict[SHM_MAX_NS];         /* may evict its own entries when full */
	uint8_t digest_key[16];            /* secret for long-key digests (ratelimit.c) */
	char names[SHM_MAX_NS][SHM_NAME_MAX]; /* namespace of each index ("" = free),
	                                      so that a state file maps by name */
	_Alignas(64) _Atomic uint64_t full_events;         /* inserts refused: full */
	_Atomic uint64_t reclaimed;                        /* stale slots re-keyed */
	_Atomic uint64_t recovered;                        /* abandoned claims freed */
	_Atomic uint32_t ticket;                           /* BUSY tickets */
	_Alignas(64) _Atomic int64_t live_total;           /* LIVE slots in all */
	_Alignas(64) _Atomic int64_t live[SHM_MAX_NS];     /* LIVE slots per namespace */
	_Alignas(64) _Atomic uint64_t evicted[SHM_MAX_NS]; /* its entries evicted */
	_Atomic uint64_t refused[SHM_MAX_NS];              /* its inserts refused: full */
	/* Sync leases, one per namespace (agent/sync_cycle.c): until_ms:48 |
	 * holder:16 (worker id + 1; 0 = free, until_ms = next cycle due). */
	_Alignas(64) _Atomic uint64_t lease[SHM_MAX_NS];
	/* Nodes of the cluster that use each namespace, as its store last
	 * counted them (agent/sync_cycle.c heartbeats); 0 = not known yet. */
	_Atomic uint32_t nodes[SHM_MAX_NS];
	/* When this node last sent each namespace's heartbeat (CLOCK_MONOTONIC
	 * ms; 0 = never): one worker per node beats per period. */
	_Alignas(64) _Atomic uint64_t beat[SHM_MAX_NS];
};

/* Per-process handle on the segment (malloc'd; its pointers are valid in
 * every process forked after shm_create()). */
struct shm_table {
	struct shm_hdr *hdr;
	struct shm_slot *slots;
	_Atomic uint16_t *maxd;
	_Atomic uint64_t *used;     /* a bit per slot ever written (for the sync loop) */
	_Atomic uint8_t *prot;      /* per slot: 1 = never evict (shm_protect) */
	_Atomic uint64_t *grant;    /* per slot: SHM_GRANT_WORDS doubles (shm_grant_*) */
	uint32_t nslots;
	uint32_t probe_max;     /* min(SHM_PROBE_MAX, nslots) */
	uint64_t seed;
	size_t map_len;
	int fd;                 /* state file (locked), or -1 */
	bool reused;            /* a state file's counts were found */
};

/* Word w (SHM_GRANT_*) of slot idx's grant: a double's bits. */
static inline _Atomic uint64_t *shm_grant_word(const struct shm_table *t, uint32_t idx,
					       unsigned w)
{
	return &t->grant[SHM_GRANT_WORDS * (size_t)idx + w];
}

/* A key prepared for lookups: built once per hit on the caller's stack
 * (shm_key_init), used for the current and previous window. */
struct shm_key {
	uint64_t w[SHM_KEY_WORDS];   /* key bytes, zero-padded */
	uint64_t ident;              /* meta bits len|ns|win|fp */
	uint32_t home;               /* home bucket */
	uint8_t nwords;              /* words holding key bytes */
	uint8_t len, ns, win;
};

/* A found slot and the meta it had when found. */
struct shm_ref {
	uint32_t idx;                /* SHM_NONE = not found */
	uint64_t meta;
};

/* A consistent copy of one LIVE slot, for the sync loop. */
struct shm_entry {
	uint32_t idx;
	uint64_t meta;
	unsigned ns, win;
	uint32_t size;               /* from shm_set_window() */
	int64_t start;
	size_t keylen;
	char key[SHM_KEY_MAX + 1];   /* NUL-terminated copy (keys may hold NULs) */
	double count, diff;
	double spent, ret;           /* grant hits, grants given back: not pushed yet */
};

struct shm_stats {
	uint64_t full_events, reclaimed, recovered, evicted;
};

/* One namespace's use of the table. */
struct shm_ns_stats {
	uint64_t share;              /* guaranteed LIVE slots */
	int64_t live;                /* LIVE slots now */
	uint64_t evicted;            /* its entries evicted to make room */
	uint64_t refused;            /* its inserts refused: no room */
};

/* What shm_insert() did. */
enum shm_ins {
	SHM_INS_FOUND = 0,           /* the window was there (a racing insert) */
	SHM_INS_NEW,                 /* a free or stale slot was taken */
	SHM_INS_EVICTED,             /* a live entry was evicted for it */
	SHM_INS_COUNT
};

/* Maps a table for at least max_keys (key, window) counters, all EMPTY,
 * with a random hash seed. Call before fork(). Returns NULL with a message
 * in err (if err != NULL) when max_keys is 0 or too large or mmap fails. */
struct shm_table *shm_create(size_t max_keys, char *err, size_t errlen);

/* The same table kept in a file (config state_file), so that a restarted
 * agent counts on: an empty or new file is sized and set up as
 * shm_create() does; an existing one is mapped again when it was written
 * by this layout for the same max_keys (else refused: err says why and the
 * file is left as it is), with its seed and digest key. What belonged to
 * the processes of the last run is reset: their leases and node counts,
 * the marks of admissions in flight and of grants being asked (as
 * shm_grant_unstick() does; what is left of a grant and the demand are
 * kept: the store counted the grant), and the LIVE counts, counted again
 * from the slots (see the banner). Refused too, and left alone: a
 * symbolic link at path (never followed: O_NOFOLLOW), anything but a
 * regular file, and a file shorter than its header or its table
 * (truncated: err says so; it is never mapped). The file is locked
 * (flock) while mapped: a second agent on it is refused. Call before
 * fork(). */
struct shm_table *shm_open_file(const char *path, size_t max_keys, char *err, size_t errlen);

/* The state file's descriptor (locked while mapped), or -1: what
 * follows the table in the file (shm_bytes() on) is the limit overrides'
 * (agent/limits.h, limits_open_file). */
int shm_state_fd(const struct shm_table *t);

/* Were a state file's counts found (shm_open_file of an existing file)? */
bool shm_reused(const struct shm_table *t);

/* The index of namespace `name` in the table: the one it had (a state
 * file's), else the first never used, now its. -1: none left, or a name
 * of SHM_NAME_MAX bytes or more. Before fork. */
int shm_ns_claim(struct shm_table *t, const char *name);

/* The index of window size `size` in namespace index ns: the one it had,
 * else the first free, now its (shm_set_window). -1: none left. */
int shm_win_claim(struct shm_table *t, unsigned ns, uint32_t size);

/* Unmaps the segment in this process and frees the handle (a state file
 * is written back and unlocked). NULL is ok. */
void shm_destroy(struct shm_table *t);

/* Records that window index win of namespace ns is `size` seconds long
 * (needed to tell stale slots). Before fork. Returns 0, or -1 when ns, win
 * or size is out of range. */
int shm_set_window(struct shm_table *t, unsigned ns, unsigned win, uint32_t size);

/* Namespace ns is guaranteed `share` LIVE slots (0 = the whole table) and,
 * when evict, may evict its own least valuable entries once its share is
 * used and the table is at max_keys. Before fork. Returns 0 or -1 (ns out
 * of range). A namespace never set fills the table as it comes (the
 * first free or stale slot, up to every slot): no share, no eviction. */
int shm_set_ns(struct shm_table *t, unsigned ns, uint64_t share, bool evict);

/* The size set for (ns, win), or 0. */
uint32_t shm_window_size(const struct shm_table *t, unsigned ns, unsigned win);

/* Prepares k for (ns, win, key[0..len)). Returns 0, or -1 if len is 0 or
 * > SHM_KEY_MAX or ns / win are out of range. */
int shm_key_init(const struct shm_table *t, struct shm_key *k, unsigned ns, unsigned win,
		 const void *key, size_t len);

/* One scan of k's chain for the LIVE slots of window `start` and, if
 * prev_start >= 0, of window prev_start. Not found: idx = SHM_NONE.
 * Starts must be in [0, 2^32). Wait-free. */
void shm_find(const struct shm_table *t, const struct shm_key *k, int64_t start,
	      int64_t prev_start, struct shm_ref *cur, struct shm_ref *prev);

/* Finds or creates the LIVE slot of k's window `start`; `now` decides
 * which slots are stale and dates claims. At max_keys it may evict (see
 * the banner). Returns an enum shm_ins (>= 0) with *out set, or -1 when
 * there is no room (full_events and the namespace's refused count are
 * incremented). Lock-free; waits (bounded) only for a concurrent insert
 * of the same identity. */
int shm_insert(struct shm_table *t, const struct shm_key *k, int64_t start, double now,
	       struct shm_ref *out);

/* Marks a found slot as never to be evicted (until its window is stale
 * and the slot re-keyed): its key was over a limit. No-op for SHM_NONE. */
void shm_protect(struct shm_table *t, const struct shm_ref *r);

/* Is the slot still the one r was found as? (After shm_add: false means
 * the hit raced an eviction and must be counted again.) */
static inline bool shm_still(const struct shm_table *t, const struct shm_ref *r)
{
	return atomic_load(&t->slots[r->idx].meta) == r->meta;
}

/* The count of a found slot; 0 if r is SHM_NONE or the slot no longer
 * holds the window it was found with. */
double shm_read_count(const struct shm_table *t, const struct shm_ref *r);

/* The same for its diff: the hits this node counted that its store has
 * not confirmed. */
double shm_read_diff(const struct shm_table *t, const struct shm_ref *r);

/* Adds v to the slot's count (and to its diff when with_diff); returns the
 * count after. One CAS loop per word; no addition is ever lost. */
double shm_add(struct shm_table *t, const struct shm_ref *r, double v, bool with_diff);

/* Adds v to the slot's diff only: hits for the store of an algorithm whose
 * count is not a sum of them (GCRA's TAT, agent/algo_gcra.c). As with
 * shm_add, the caller tells by shm_still() whether the slot changed hands
 * meanwhile. */
void shm_add_diff(struct shm_table *t, const struct shm_ref *r, double v);

/* Adds v (and to diff when with_diff) only if count + v + extra <= limit,
 * decided and added in one CAS. Returns true if added. *count gets the
 * count after the addition, or the count the refusal was based on. */
bool shm_add_if(struct shm_table *t, const struct shm_ref *r, double v, double extra,
		double limit, bool with_diff, double *count);

/* Replaces the slot's count by want if it is still *seen, in one CAS: a
 * word that is not a sum (GCRA's TAT, agent/algo_gcra.c). Returns true if
 * replaced; else *seen gets the count now. As with shm_add, the caller
 * tells by shm_still() whether the slot changed hands meanwhile. */
bool shm_cas_count(struct shm_table *t, const struct shm_ref *r, double *seen, double want);

/* Sets a found slot's count to 0 (a local namespace's key forgotten by
 * an operator) and clears its protection; returns what it held. */
double shm_forget(struct shm_table *t, const struct shm_ref *r);

/* --- slot by slot (the sync loop, metrics); the sync words: shm_sync.h --- */

/* Number of slots; indexes are 0 .. shm_nslots() - 1. */
uint32_t shm_nslots(const struct shm_table *t);

/* The first slot at or after `from` that was ever written (not EMPTY), or
 * SHM_NONE: the sync loop visits these instead of the whole table, so a
 * cycle costs what the node has used, not what it could hold. */
uint32_t shm_next_used(const struct shm_table *t, uint32_t from);

/* Copies slot idx into *e if it is LIVE (a consistent snapshot).
 * Returns 0, or -1 if the slot is not LIVE or changed while read. */
int shm_read(const struct shm_table *t, uint32_t idx, struct shm_entry *e);

/* A worker died: the admissions it had in flight and the grants it was
 * asking for never end, and would keep their keys from asking for grants
 * until their windows end. Clears every slot's count in flight and ask
 * (the live workers' included: each ends harmlessly, at worst one more
 * grant is asked meanwhile). shm_open_file() does the same for what the
 * last run left in a state file. */
void shm_grant_unstick(struct shm_table *t);

/* Table-wide counters (all processes). */
void shm_stats(const struct shm_table *t, struct shm_stats *s);

/* One namespace's counters. Returns 0, or -1 for ns out of range. */
int shm_ns_stats(const struct shm_table *t, unsigned ns, struct shm_ns_stats *s);

/* The 16-byte secret of long-key digests: random at shm_create(), or set
 * before fork. */
const uint8_t *shm_digest_key(const struct shm_table *t);
void shm_set_digest_key(struct shm_table *t, const uint8_t key[16]);

/* Bytes of the mapping (for sizing reports). */
size_t shm_bytes(const struct shm_table *t);

#endif /* SHM_H */
