/*
 * limits.c - the table of limits per key set at run time: made, mapped
 * from a state file, looked up, written (see limits.h for the layout and
 * the protocol).
 */
#include "agent/limits.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/atomics.h"
#include "agent/hash.h"
#include "agent/segment.h"

#define LIMITS_MAGIC     0x31544d494c4c5253ULL   /* "SRLLIMT1", little-endian */
#define LIMITS_KEY_WORDS 13
#define LIMITS_HDR_BYTES ((sizeof(struct limits_hdr) + 127) & ~(size_t)127)
#define LIMITS_TRIES     4096       /* a reader's tries before it answers dflt */
#define LIMITS_LOCK_SPIN (1u << 20) /* a writer's spins before it looks at the holder */

/* A slot's first word: state:2 | ns:5 | len:7 | window:32. */
#define LIMITS_ST_EMPTY  0ULL
#define LIMITS_ST_LIVE   1ULL

struct limits_hdr {
	uint64_t magic;
	uint64_t nslots;
	uint64_t total;
	uint64_t seed;
	_Alignas(64) _Atomic uint64_t lock;      /* the writer's pid, 0 = free */
	_Alignas(64) _Atomic uint64_t seq;       /* odd while a writer writes */
	_Alignas(64) _Atomic uint32_t count[LIMITS_NS];
	_Alignas(64) _Atomic uint64_t version[LIMITS_NS];
};

struct limits_slot {
	_Alignas(64) _Atomic uint64_t id;
	_Atomic uint64_t limit;                  /* int64_t bits */
	_Atomic uint64_t key[LIMITS_KEY_WORDS];
	_Atomic uint64_t home;                   /* its home slot (deletions move
	                                            entries back by it) */
};

_Static_assert(sizeof(struct limits_slot) == 128, "a slot is two cache lines");
_Static_assert(LIMITS_KEY_WORDS * 8 == LIMITS_KEY_MAX, "key words");

struct limits {
	struct limits_hdr *hdr;
	struct limits_slot *slots;
	uint64_t nslots;
	size_t map_len;
	bool file;
};

static const char *const limits_err_names[LIMITS_ERR_COUNT] = {
	[LIMITS_OK] = "ok",
	[LIMITS_ERR_NS_FULL] = "the namespace holds max_limit_overrides overrides already",
	[LIMITS_ERR_FULL] = "the override table is full",
	[LIMITS_ERR_BUSY] = "the override table is busy, try again",
	[LIMITS_ERR_ARG] = "bad namespace, window, key or limit",
};

const char *limits_err_str(int e)
{
	if (e < 0)
		e = -e;
	return e < LIMITS_ERR_COUNT ? limits_err_names[e] : "unknown error";
}

/* ---- geometry ---- */

static uint64_t limits_nslots(size_t total)
{
	return (uint64_t)total * 2 + 1;   /* live <= half: chains stay short */
}

static size_t limits_len(uint64_t nslots)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	return (LIMITS_HDR_BYTES + nslots * sizeof(struct limits_slot) + page - 1) / page * page;
}

static struct limits *limits_handle(void *p, uint64_t nslots, size_t len, bool file)
{
	struct limits *l = calloc(1, sizeof(*l));

	if (!l)
		return NULL;
	l->hdr = p;
	l->slots = (struct limits_slot *)((char *)p + LIMITS_HDR_BYTES);
	l->nslots = nslots;
	l->map_len = len;
	l->file = file;
	return l;
}

static void limits_init_hdr(struct limits *l, size_t total)
{
	uint64_t seed = 0;

	if (getrandom(&seed, sizeof(seed), 0) != (ssize_t)sizeof(seed))
		seed = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ULL ^ (uint64_t)getpid();
	l->hdr->magic = LIMITS_MAGIC;
	l->hdr->nslots = l->nslots;
	l->hdr->total = total;
	l->hdr->seed = seed;
	for (unsigned ns = 0; ns < LIMITS_NS; ns++)
		atomic_store(&l->hdr->version[ns], LIMITS_VERSION_UNKNOWN);
}

struct limits *limits_create(size_t total, char *err, size_t errlen)
{
	if (total == 0)
		total = 1;
	uint64_t n = limits_nslots(total);
	size_t len = limits_len(n);
	void *p = segment_new(len);
	struct limits *l;

	if (!p) {
		snprintf(err, errlen, "limit overrides (%zu bytes): mmap: %s", len, strerror(errno));
		return NULL;
	}
	if (!(l = limits_handle(p, n, len, false))) {
		segment_free(p, len);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	limits_init_hdr(l, total);
	return l;
}

void limits_destroy(struct limits *l)
{
	if (!l)
		return;
	if (l->file)
		msync(l->hdr, l->map_len, MS_SYNC);
	segment_free(l->hdr, l->map_len);
	free(l);
}

/* ---- slots ---- */

static uint64_t id_make(uint64_t st, unsigned ns, size_t len, uint32_t window)
{
	return st << 62 | (uint64_t)ns << 57 | (uint64_t)len << 50 | window;
}

static uint64_t id_state(uint64_t id)
{
	return id >> 62;
}

static unsigned id_ns(uint64_t id)
{
	return (unsigned)(id >> 57) & 0x1f;
}

static size_t id_len(uint64_t id)
{
	return (size_t)(id >> 50) & 0x7f;
}

static uint32_t id_window(uint64_t id)
{
	return (uint32_t)id;
}

/* The key's words, zero-padded. */
static void key_words(const char *key, size_t len, uint64_t w[LIMITS_KEY_WORDS])
{
	memset(w, 0, LIMITS_KEY_WORDS * 8);
	memcpy(w, key, len);
}

static uint64_t home_of(const struct limits *l, unsigned ns, uint32_t window,
			const uint64_t w[LIMITS_KEY_WORDS])
{
	uint64_t h = hash_words(w, LIMITS_KEY_WORDS, l->hdr->seed ^ ((uint64_t)ns << 32 | window));

	return (uint64_t)(((unsigned __int128)h * l->nslots) >> 64);
}

/* limits_get() calls of this process that gave up (limits_gave_up). */
static _Atomic uint64_t limits_giveups;

/* The slot holding (ns, window, key), or -1 (relaxed loads: a reader
 * checks the seqlock around it; a writer holds the lock). */
static int64_t slot_find(const struct limits *l, uint64_t want, const uint64_t w[LIMITS_KEY_WORDS],
			 uint64_t home)
{
	for (uint64_t i = 0, s = home; i < l->nslots; i++, s = s + 1 == l->nslots ? 0 : s + 1) {
		const struct limits_slot *sl = &l->slots[s];
		uint64_t id = atomic_load_explicit(&sl->id, memory_order_relaxed);

		if (id_state(id) == LIMITS_ST_EMPTY)
			return -1;
		if (id != want)
			continue;
		bool same = true;
		for (unsigned k = 0; same && k < LIMITS_KEY_WORDS; k++)
			same = atomic_load_explicit(&sl->key[k], memory_order_relaxed) == w[k];
		if (same)
			return (int64_t)s;
	}
	return -1;
}

int64_t limits_get(const struct limits *l, unsigned ns, uint32_t window, const char *key,
		   size_t len, int64_t dflt)
{
	if (!l || ns >= LIMITS_NS ||
	    atomic_load_explicit(&l->hdr->count[ns], memory_order_relaxed) == 0)
		return dflt;
	if (len == 0 || len > LIMITS_KEY_MAX)
		return dflt;
	uint64_t w[LIMITS_KEY_WORDS];
	uint64_t want = id_make(LIMITS_ST_LIVE, ns, len, window);

	key_words(key, len, w);
	uint64_t home = home_of(l, ns, window, w);
	for (unsigned t = 0; t < LIMITS_TRIES; t++) {
		uint64_t s1 = atomic_load_explicit(&l->hdr->seq, memory_order_acquire);
		if (s1 & 1) {
			atomics_cpu_relax();
			continue;
		}
		int64_t at = slot_find(l, want, w, home);
		int64_t v = at < 0 ? dflt
			    : (int64_t)atomic_load_explicit(&l->slots[at].limit, memory_order_relaxed);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&l->hdr->seq, memory_order_relaxed) == s1)
			return v;
	}
	atomic_fetch_add_explicit(&limits_giveups, 1, memory_order_relaxed);
	return dflt;
}

uint64_t limits_gave_up(void)
{
	return atomic_load_explicit(&limits_giveups, memory_order_relaxed);
}

size_t limits_count(const struct limits *l, unsigned ns)
{
	if (!l || ns >= LIMITS_NS)
		return 0;
	return atomic_load_explicit(&l->hdr->count[ns], memory_order_relaxed);
}

const _Atomic uint32_t *limits_counts(const struct limits *l)
{
	return l ? l->hdr->count : NULL;
}

uint64_t limits_version(const struct limits *l, unsigned ns)
{
	if (!l || ns >= LIMITS_NS)
		return 0;
	return atomic_load(&l->hdr->version[ns]);
}

void limits_set_version(struct limits *l, unsigned ns, uint64_t v)
{
	if (l && ns < LIMITS_NS)
		atomic_store(&l->hdr->version[ns], v);
}

/* ---- writers ---- */

/* Counts every namespace's overrides again, from the slots (after a
 * writer that died, and a state file's part mapped). */
static void limits_recount(struct limits *l)
{
	uint32_t count[LIMITS_NS] = { 0 };

	for (uint64_t s = 0; s < l->nslots; s++) {
		uint64_t id = atomic_load_explicit(&l->slots[s].id, memory_order_relaxed);
		if (id_state(id) == LIMITS_ST_LIVE)
			count[id_ns(id)]++;
	}
	for (unsigned ns = 0; ns < LIMITS_NS; ns++)
		atomic_store(&l->hdr->count[ns], count[ns]);
}

/* Takes the writers' lock (a holder that died is replaced). Returns 0,
 * or -1: held by a live writer for too long. */
static int limits_lock(struct limits *l)
{
	uint64_t me = (uint64_t)getpid();

	for (unsigned round = 0; round < 64; round++) {
		for (unsigned i = 0; i < LIMITS_LOCK_SPIN; i++) {
			uint64_t free_ = 0;
			if (atomic_compare_exchange_weak(&l->hdr->lock, &free_, me))
				return 0;
			atomics_cpu_relax();
		}
		uint64_t holder = atomic_load(&l->hdr->lock);
		if (holder != 0 && kill((pid_t)holder, 0) < 0 && errno == ESRCH &&
		    atomic_compare_exchange_strong(&l->hdr->lock, &holder, me)) {
			/* Its half write: the seqlock even, the counts again. */
			uint64_t s = atomic_load(&l->hdr->seq);
			if (s & 1)
				atomic_store(&l->hdr->seq, s + 1);
			limits_recount(l);
			return 0;
		}
	}
	return -1;
}

static void limits_unlock(struct limits *l)
{
	atomic_store(&l->hdr->lock, 0);
}

/* One change of the slots (the lock held): readers retry across it. */
static void write_begin(struct limits *l)
{
	atomic_store_explicit(&l->hdr->seq, atomic_load(&l->hdr->seq) + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
}

static void write_end(struct limits *l)
{
	atomic_store_explicit(&l->hdr->seq, atomic_load(&l->hdr->seq) + 1, memory_order_release);
}

static void slot_copy(struct limits_slot *to, const struct limits_slot *from)
{
	for (unsigned k = 0; k < LIMITS_KEY_WORDS; k++)
		atomic_store_explicit(&to->key[k],
				      atomic_load_explicit(&from->key[k], memory_order_relaxed),
				      memory_order_relaxed);
	atomic_store_explicit(&to->limit, atomic_load_explicit(&from->limit, memory_order_relaxed),
			      memory_order_relaxed);
	atomic_store_explicit(&to->home, atomic_load_explicit(&from->home, memory_order_relaxed),
			      memory_order_relaxed);
	atomic_store_explicit(&to->id, atomic_load_explicit(&from->id, memory_order_relaxed),
			      memory_order_relaxed);
}

static bool args_ok(unsigned ns, uint32_t window, size_t len, int64_t limit)
{
	return ns < LIMITS_NS && window > 0 && len > 0 && len <= LIMITS_KEY_MAX && limit >= 0;
}

/* Put with the lock held: in place, or into the first empty slot of its
 * chain (live slots stay at most half the table: one is always found). */
static int put_locked(struct limits *l, unsigned ns, uint32_t window, const uint64_t *w,
		      size_t len, int64_t limit, size_t bound, bool *added)
{
	uint64_t id = id_make(LIMITS_ST_LIVE, ns, len, window);
	uint64_t home = home_of(l, ns, window, w);
	int64_t at = slot_find(l, id, w, home);

	if (added)
		*added = at < 0;
	if (at >= 0) {
		/* One word: readers see the old limit or the new one. */
		atomic_store_explicit(&l->slots[at].limit, (uint64_t)limit, memory_order_relaxed);
		return 0;
	}
	if (atomic_load(&l->hdr->count[ns]) >= bound)
		return LIMITS_ERR_NS_FULL;
	uint64_t live = 0;
	for (unsigned i = 0; i < LIMITS_NS; i++)
		live += atomic_load(&l->hdr->count[i]);
	if (live >= l->hdr->total)
		return LIMITS_ERR_FULL;
	uint64_t s = home;
	while (id_state(atomic_load_explicit(&l->slots[s].id, memory_order_relaxed)) != LIMITS_ST_EMPTY)
		s = s + 1 == l->nslots ? 0 : s + 1;
	struct limits_slot *sl = &l->slots[s];
	write_begin(l);
	for (unsigned k = 0; k < LIMITS_KEY_WORDS; k++)
		atomic_store_explicit(&sl->key[k], w[k], memory_order_relaxed);
	atomic_store_explicit(&sl->limit, (uint64_t)limit, memory_order_relaxed);
	atomic_store_explicit(&sl->home, home, memory_order_relaxed);
	atomic_store_explicit(&sl->id, id, memory_order_relaxed);
	write_end(l);
	atomic_fetch_add(&l->hdr->count[ns], 1);
	return 0;
}

/* Is home h outside the cyclic range (i, j]? Then the entry at j may
 * move back to i (linear probing's deletion by shifting back). */
static bool may_move(uint64_t h, uint64_t i, uint64_t j)
{
	return i <= j ? (h <= i || h > j) : (h <= i && h > j);
}

/* Removes slot i (the lock held): the entries after it that may move
 * back do, so no chain has a hole and no slot a tombstone; one change
 * for readers. */
static void slot_remove(struct limits *l, uint64_t i)
{
	unsigned ns = id_ns(atomic_load_explicit(&l->slots[i].id, memory_order_relaxed));

	write_begin(l);
	for (uint64_t j = i;;) {
		j = j + 1 == l->nslots ? 0 : j + 1;
		uint64_t id = atomic_load_explicit(&l->slots[j].id, memory_order_relaxed);
		if (id_state(id) == LIMITS_ST_EMPTY)
			break;
		if (may_move(atomic_load_explicit(&l->slots[j].home, memory_order_relaxed), i, j)) {
			slot_copy(&l->slots[i], &l->slots[j]);
			i = j;
		}
	}
	atomic_store_explicit(&l->slots[i].id, 0, memory_order_relaxed);
	write_end(l);
	atomic_fetch_sub(&l->hdr->count[ns], 1);
}

int limits_put(struct limits *l, unsigned ns, uint32_t window, const char *key, size_t len,
	       int64_t limit, size_t bound, bool *added)
{
	uint64_t w[LIMITS_KEY_WORDS];

	if (!l || !args_ok(ns, window, len, limit))
		return LIMITS_ERR_ARG;
	key_words(key, len, w);
	if (limits_lock(l) < 0)
		return LIMITS_ERR_BUSY;
	int rc = put_locked(l, ns, window, w, len, limit, bound, added);
	limits_unlock(l);
	return rc;
}

int limits_del(struct limits *l, unsigned ns, uint32_t window, const char *key, size_t len)
{
	uint64_t w[LIMITS_KEY_WORDS];

	if (!l || !args_ok(ns, window, len, 0))
		return 0;
	key_words(key, len, w);
	if (limits_lock(l) < 0)
		return -LIMITS_ERR_BUSY;
	int64_t at = slot_find(l, id_make(LIMITS_ST_LIVE, ns, len, window), w,
			       home_of(l, ns, window, w));
	if (at >= 0)
		slot_remove(l, (uint64_t)at);
	limits_unlock(l);
	return at >= 0;
}

/* Removes every override of ns (of window, unless 0) for which keep()
 * says no (the lock held). A removal moves entries back: the slot is
 * looked at again. Returns the count removed. */
static int remove_locked(struct limits *l, unsigned ns, uint32_t window,
			 bool (*keep)(const struct limits_slot *sl, const void *arg),
			 const void *arg)
{
	int n = 0;

	for (uint64_t pass = 0; pass < 2; pass++) {
		/* A removal near the end may move an entry from the start
		 * back past the end: a second pass sees it. */
		for (uint64_t s = 0; s < l->nslots; s++) {
			for (;;) {
				const struct limits_slot *sl = &l->slots[s];
				uint64_t id = atomic_load_explicit(&sl->id, memory_order_relaxed);
				if (id_state(id) != LIMITS_ST_LIVE || id_ns(id) != ns ||
				    (window && id_window(id) != window) || (keep && keep(sl, arg)))
					break;
				slot_remove(l, s);
				n++;
			}
		}
	}
	return n;
}

int limits_clear(struct limits *l, unsigned ns, uint32_t window)
{
	if (!l || ns >= LIMITS_NS)
		return 0;
	if (limits_lock(l) < 0)
		return -LIMITS_ERR_BUSY;
	int n = remove_locked(l, ns, window, NULL, NULL);
	limits_unlock(l);
	return n;
}

/* Order of struct limits_entry: window, length, bytes. */
static int entry_cmp(const void *a, const void *b)
{
	const struct limits_entry *x = a, *y = b;

	if (x->window != y->window)
		return x->window < y->window ? -1 : 1;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return memcmp(x->key, y->key, x->len);
}

struct replace_set {
	const struct limits_entry *e;
	size_t n;
};

/* Is the override at sl among the set (sorted)? */
static bool in_set(const struct limits_slot *sl, const void *arg)
{
	const struct replace_set *rs = arg;
	if (rs->n == 0)
		return false;
	uint64_t id = atomic_load_explicit(&sl->id, memory_order_relaxed);
	struct limits_entry k = { .window = id_window(id), .len = (uint8_t)id_len(id) };
	uint64_t w[LIMITS_KEY_WORDS];

	for (unsigned i = 0; i < LIMITS_KEY_WORDS; i++)
		w[i] = atomic_load_explicit(&sl->key[i], memory_order_relaxed);
	memcpy(k.key, w, k.len);
	return bsearch(&k, rs->e, rs->n, sizeof(*rs->e), entry_cmp) != NULL;
}

int limits_replace(struct limits *l, unsigned ns, const struct limits_entry *e, size_t n,
		   size_t bound, size_t *kept)
{
	struct limits_entry *sorted = NULL;
	size_t k = 0;

	if (!l || ns >= LIMITS_NS)
		return LIMITS_ERR_ARG;
	if (n && !(sorted = malloc(n * sizeof(*sorted))))
		return LIMITS_ERR_FULL;
	if (n) {
		memcpy(sorted, e, n * sizeof(*sorted));
		qsort(sorted, n, sizeof(*sorted), entry_cmp);
	}
	if (limits_lock(l) < 0) {
		free(sorted);
		return LIMITS_ERR_BUSY;
	}
	/* The ones the store no longer has go first (room for the new);
	 * the ones it keeps are changed in place, never absent meanwhile. */
	struct replace_set rs = { .e = sorted, .n = n };
	remove_locked(l, ns, 0, in_set, &rs);
	for (size_t i = 0; i < n; i++) {
		uint64_t w[LIMITS_KEY_WORDS];

		if (!args_ok(ns, sorted[i].window, sorted[i].len, sorted[i].limit))
			continue;
		key_words(sorted[i].key, sorted[i].len, w);
		if (put_locked(l, ns, sorted[i].window, w, sorted[i].len, sorted[i].limit, bound,
			       NULL) == 0)
			k++;
	}
	limits_unlock(l);
	free(sorted);
	if (kept)
		*kept = k;
	return 0;
}

size_t limits_list(const struct limits *l, unsigned ns, uint64_t *pos,
		   struct limits_entry *out, size_t max)
{
	size_t n = 0;
	uint64_t s = *pos;

	*pos = 0;
	if (!l || ns >= LIMITS_NS)
		return 0;
	for (; s < l->nslots; s++) {
		const struct limits_slot *sl = &l->slots[s];
		uint64_t id = atomic_load_explicit(&sl->id, memory_order_acquire);
		if (id_state(id) != LIMITS_ST_LIVE || id_ns(id) != ns)
			continue;
		if (n == max) {
			*pos = s;
			break;
		}
		uint64_t w[LIMITS_KEY_WORDS];
		for (unsigned k = 0; k < LIMITS_KEY_WORDS; k++)
			w[k] = atomic_load_explicit(&sl->key[k], memory_order_relaxed);
		out[n].window = id_window(id);
		out[n].len = (uint8_t)id_len(id);
		out[n].limit = (int64_t)atomic_load_explicit(&sl->limit, memory_order_relaxed);
		memcpy(out[n].key, w, out[n].len);
		/* Changed meanwhile: left out (a writer moved it). */
		if (atomic_load_explicit(&sl->id, memory_order_acquire) == id)
			n++;
	}
	return n;
}

/* ---- a state file's part ---- */

/* The live overrides of a part of nslots slots at p (another total),
 * copied into *out (malloc'd): their count, or -1. */
static long limits_salvage(const void *p, uint64_t nslots, struct limits_entry **out,
			   unsigned **nss)
{
	const struct limits_slot *slots = (const struct limits_slot *)((const char *)p +
								       LIMITS_HDR_BYTES);
	size_t n = 0;

	*out = calloc(nslots ? nslots : 1, sizeof(**out));
	*nss = calloc(nslots ? nslots : 1, sizeof(**nss));
	if (!*out || !*nss)
		return -1;
	for (uint64_t s = 0; s < nslots; s++) {
		uint64_t id = atomic_load_explicit(&slots[s].id, memory_order_relaxed);
		if (id_state(id) != LIMITS_ST_LIVE || id_len(id) == 0 || id_len(id) > LIMITS_KEY_MAX)
			continue;
		uint64_t w[LIMITS_KEY_WORDS];
		for (unsigned k = 0; k < LIMITS_KEY_WORDS; k++)
			w[k] = atomic_load_explicit(&slots[s].key[k], memory_order_relaxed);
		(*out)[n].window = id_window(id);
		(*out)[n].len = (uint8_t)id_len(id);
		(*out)[n].limit = (int64_t)atomic_load_explicit(&slots[s].limit,
								 memory_order_relaxed);
		memcpy((*out)[n].key, w, (*out)[n].len);
		(*nss)[n++] = id_ns(id);
	}
	return (long)n;
}

struct limits *limits_open_file(int fd, size_t off, size_t total, size_t *dropped, char *err,
				size_t errlen)
{
	struct stat st;
	struct limits_hdr h;
	struct limits_entry *old = NULL;
	unsigned *old_ns = NULL;
	long n_old = 0;

	*dropped = 0;
	if (total == 0)
		total = 1;
	uint64_t n = limits_nslots(total);
	size_t len = limits_len(n);
	if (fstat(fd, &st) < 0) {
		snprintf(err, errlen, "limit overrides: %s", strerror(errno));
		return NULL;
	}
	/* A file that ends at off: a new part. */
	if ((size_t)st.st_size > off) {
		memset(&h, 0, sizeof(h));
		if ((size_t)st.st_size < off + sizeof(h) ||
		    pread(fd, &h, sizeof(h), (off_t)off) != (ssize_t)sizeof(h) ||
		    h.magic != LIMITS_MAGIC || h.nslots != limits_nslots(h.total) ||
		    h.total == 0 || h.total > (uint64_t)LIMITS_MAX * LIMITS_NS ||
		    (size_t)st.st_size != off + limits_len(h.nslots)) {
			snprintf(err, errlen, "its limit overrides (after byte %zu) are damaged or "
				 "of another version; move the file away to start afresh", off);
			return NULL;
		}
		/* The overrides it held, placed again below in a part made
		 * afresh for this total (the same or another): what a file
		 * holds is checked one by one, never trusted as a layout. */
		size_t olen = limits_len(h.nslots);
		void *op = mmap(NULL, olen, PROT_READ, MAP_SHARED, fd, (off_t)off);
		if (op == MAP_FAILED) {
			snprintf(err, errlen, "limit overrides: mmap: %s", strerror(errno));
			return NULL;
		}
		n_old = limits_salvage(op, h.nslots, &old, &old_ns);
		munmap(op, olen);
		if (n_old < 0) {
			free(old);
			free(old_ns);
			snprintf(err, errlen, "limit overrides: out of memory");
			return NULL;
		}
	}
	struct limits *l = NULL;
	void *p = NULL;
	if (ftruncate(fd, (off_t)(off + len)) < 0 ||
	    !(p = segment_map_file_at(fd, off, len)) || !(l = limits_handle(p, n, len, true))) {
		snprintf(err, errlen, "limit overrides: %zu bytes at %zu: %s", len, off,
			 errno ? strerror(errno) : "out of memory");
		segment_free(p, len);
		free(old);
		free(old_ns);
		return NULL;
	}
	memset(p, 0, len);
	limits_init_hdr(l, total);
	for (long i = 0; i < n_old; i++) {
		uint64_t w[LIMITS_KEY_WORDS];

		key_words(old[i].key, old[i].len, w);
		if (!args_ok(old_ns[i], old[i].window, old[i].len, old[i].limit) ||
		    put_locked(l, old_ns[i], old[i].window, w, old[i].len, old[i].limit, total,
			       NULL) != 0)
			(*dropped)++;
	}
	free(old);
	free(old_ns);
	return l;
}
