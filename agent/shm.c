/*
 * shm.c - the shared counter table: mapping, lookup, lock-free insert with
 * duplicate resolution, stale-slot reclaiming, abandoned-claim recovery,
 * and the counter operations. The design and the slot states are drawn in
 * shm.h; this file keeps to them.
 */
#include "agent/shm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "agent/hash.h"
#include "agent/segment.h"

/* "SHMRLT" + a layout version in the last two bytes ("02": grants and
 * namespace names; "03": heartbeat turns, grants spent and returned), as it
 * reads in a state file's first bytes. */
#define SHM_MAGIC      0x3330544c524d4853ULL   /* "SHMRLT03", little-endian */
#define SHM_HDR_BYTES  ((sizeof(struct shm_hdr) + 127) & ~(size_t)127)

/* Gives up an insert that keeps losing races after this many rounds
 * (never seen; keeps a pathological livelock from spinning forever). */
#define SHM_INSERT_ROUNDS 100000

static void shm_errf(char *err, size_t errlen, const char *msg, size_t max_keys)
{
	if (err && errlen)
		snprintf(err, errlen, "shared table for %zu keys: %s", max_keys, msg);
}

static uint64_t shm_random_seed(void)
{
	uint64_t seed = 0;

	if (getrandom(&seed, sizeof(seed), 0) != (ssize_t)sizeof(seed)) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		seed = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ULL ^ (uint64_t)ts.tv_sec ^
		       (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)&seed;
	}
	return seed;
}

/* The sizes of a table for max_keys: slots and the mapping's length. */
struct shm_geom {
	size_t nslots, slots_bytes, maxd_bytes, used_bytes, prot_bytes, len;
};

static void shm_geom(size_t max_keys, struct shm_geom *g)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	/* Load factor <= 3/4 at max_keys entries; a few spare slots for tiny
	 * tables. Not a power of two: the home bucket is a multiply-shift
	 * of the hash (no modulo), so the table need not double. */
	g->nslots = max_keys / SHM_LOAD_DEN * SHM_LOAD_NUM + max_keys % SHM_LOAD_DEN + 1;
	g->slots_bytes = g->nslots * sizeof(struct shm_slot);
	g->maxd_bytes = (g->nslots * sizeof(_Atomic uint16_t) + 7) / 8 * 8;
	g->used_bytes = (g->nslots + 63) / 64 * sizeof(_Atomic uint64_t);
	g->prot_bytes = (g->nslots + 7) / 8 * 8;
	g->len = (SHM_HDR_BYTES + g->slots_bytes + g->maxd_bytes + g->used_bytes + g->prot_bytes +
		  SHM_GRANT_WORDS * g->nslots * sizeof(_Atomic uint64_t) + page - 1) / page * page;
}

/* A handle on the mapping p of geometry g. */
static struct shm_table *shm_handle(void *p, const struct shm_geom *g)
{
	struct shm_table *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->hdr = p;
	t->slots = (struct shm_slot *)((char *)p + SHM_HDR_BYTES);
	t->maxd = (_Atomic uint16_t *)((char *)t->slots + g->slots_bytes);
	t->used = (_Atomic uint64_t *)((char *)t->maxd + g->maxd_bytes);
	t->prot = (_Atomic uint8_t *)((char *)t->used + g->used_bytes);
	t->grant = (_Atomic uint64_t *)((char *)t->prot + g->prot_bytes);
	t->nslots = (uint32_t)g->nslots;
	t->probe_max = g->nslots < SHM_PROBE_MAX ? (uint32_t)g->nslots : SHM_PROBE_MAX;
	t->map_len = g->len;
	t->fd = -1;
	return t;
}

/* A new table's header: geometry, a random seed and digest key. */
static void shm_init_hdr(struct shm_table *t, size_t max_keys)
{
	t->seed = shm_random_seed();
	t->hdr->magic = SHM_MAGIC;
	t->hdr->nslots = t->nslots;
	t->hdr->max_keys = max_keys;
	t->hdr->seed = t->seed;
	for (int i = 0; i < 2; i++) {
		uint64_t r = shm_random_seed();
		memcpy(t->hdr->digest_key + 8 * i, &r, 8);
	}
}

/* Touches every page now, in the master, so workers never page-fault on
 * the hot path (a state file's pages are read in, not dirtied). */
static void shm_touch(void *p, size_t len, bool write)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	char sum = 0;

	for (size_t off = 0; off < len; off += page) {
		if (write)
			((volatile char *)p)[off] = 0;
		else
			sum ^= ((volatile char *)p)[off];
	}
	(void)sum;
}

struct shm_table *shm_create(size_t max_keys, char *err, size_t errlen)
{
	struct shm_table *t;
	struct shm_geom g;
	void *p;

	if (max_keys == 0 || max_keys > SHM_MAX_KEYS) {
		shm_errf(err, errlen, "max_keys must be in 1..2^30", max_keys);
		return NULL;
	}
	shm_geom(max_keys, &g);
	p = segment_new(g.len);
	if (!p) {
		if (err && errlen)
			snprintf(err, errlen, "shared table for %zu keys (%zu bytes): mmap: %s",
				 max_keys, g.len, strerror(errno));
		return NULL;
	}
	if (!(t = shm_handle(p, &g))) {
		segment_free(p, g.len);
		shm_errf(err, errlen, "out of memory", max_keys);
		return NULL;
	}
	/* Huge pages where the kernel allows them for shared memory
	 * (shmem_enabled = advise): a large table is accessed at random, and
	 * TLB misses are most of the cost of a cold key. */
#ifdef MADV_HUGEPAGE
	madvise(p, g.len, MADV_HUGEPAGE);
#endif
	/* A new segment is zeroed memory: every slot EMPTY, every maxd 0, every
	 * atomic at 0 (an all-zero _Atomic integer is a valid 0 on every
	 * platform we build for). */
	shm_touch(p, g.len, true);
	shm_init_hdr(t, max_keys);
	return t;
}

/* Counts the LIVE slots of each namespace and of the table again, from
 * the slots. An insert makes a slot LIVE by CAS and counts it after, and
 * a re-keying or an eviction takes it by CAS and counts it out after: a
 * process killed in between leaves the counts one off, for good. Only
 * while no other process uses the table (a state file, before fork): a
 * scan is no snapshot, and the counts stored at its end would lose or
 * double the updates of inserts made meanwhile behind it. */
static void shm_recount(struct shm_table *t)
{
	int64_t live[SHM_MAX_NS] = { 0 }, total = 0;

	for (uint32_t i = 0; i < t->nslots; i++) {
		uint64_t m = atomic_load_explicit(&t->slots[i].meta, memory_order_relaxed);

		if (shm_meta_state(m) == SHM_ST_LIVE) {
			live[shm_meta_ns(m)]++;
			total++;
		}
	}
	for (unsigned ns = 0; ns < SHM_MAX_NS; ns++)
		atomic_store(&t->hdr->live[ns], live[ns]);
	atomic_store(&t->hdr->live_total, total);
}

/* Is the existing state file fd (path, stat st) a table of this layout
 * for max_keys (geometry g)? Returns 0, or -1 with err saying why. Refused,
 * never rewritten: a file of another layout or size stays as it was for
 * its owner to decide. Each size is checked against the geometry the
 * file's own header gives before the configuration is compared, so that a
 * truncated file is called truncated (and never mapped: touching pages
 * past its end would kill the agent with SIGBUS). */
static int shm_file_check(int fd, const char *path, const struct stat *st, size_t max_keys,
			  const struct shm_geom *g, char *err, size_t errlen)
{
	struct shm_hdr h;
	struct shm_geom fg;
	size_t have = (size_t)st->st_size < sizeof(h) ? (size_t)st->st_size : sizeof(h);

	memset(&h, 0, sizeof(h));
	if (pread(fd, &h, have, 0) != (ssize_t)have) {
		snprintf(err, errlen, "state_file %s: cannot read its header: %s", path,
			 strerror(errno));
		return -1;
	}
	/* "SHMRLT", whatever the layout. */
	if (have < 6 || memcmp(&h.magic, &(uint64_t){ SHM_MAGIC }, 6) != 0) {
		snprintf(err, errlen, "state_file %s: not a spoa-ratelimit state file; "
			 "move it away to start afresh", path);
		return -1;
	}
	if (have >= sizeof(h.magic) && h.magic != SHM_MAGIC) {
		snprintf(err, errlen, "state_file %s: written by another version of "
			 "spoa-ratelimit (layout %.2s, this one reads %.2s); move it away to "
			 "start afresh", path, (const char *)&h.magic + 6,
			 (const char *)&(uint64_t){ SHM_MAGIC } + 6);
		return -1;
	}
	if (have < sizeof(h)) {
		snprintf(err, errlen, "state_file %s: truncated (%lld bytes, shorter than its "
			 "%zu-byte header); move it away to start afresh", path,
			 (long long)st->st_size, sizeof(h));
		return -1;
	}
	if (h.max_keys == 0 || h.max_keys > SHM_MAX_KEYS) {
		snprintf(err, errlen, "state_file %s: damaged header (max_keys %llu); move it "
			 "away to start afresh", path, (unsigned long long)h.max_keys);
		return -1;
	}
	shm_geom((size_t)h.max_keys, &fg);
	if ((size_t)st->st_size < fg.len) {
		snprintf(err, errlen, "state_file %s: truncated (%lld bytes, a table for max_keys "
			 "%llu takes %zu); move it away to start afresh", path,
			 (long long)st->st_size, (unsigned long long)h.max_keys, fg.len);
		return -1;
	}
	if (h.max_keys != max_keys) {
		snprintf(err, errlen, "state_file %s: made for max_keys %llu, the "
			 "configuration says %zu; set max_keys back, or move the file away",
			 path, (unsigned long long)h.max_keys, max_keys);
		return -1;
	}
	if (h.nslots != g->nslots || (size_t)st->st_size != g->len) {
		snprintf(err, errlen, "state_file %s: %lld bytes and %llu slots, where this "
			 "build makes %zu bytes and %zu slots for max_keys %zu (written on another "
			 "page size?); move it away to start afresh", path, (long long)st->st_size,
			 (unsigned long long)h.nslots, g->len, g->nslots, max_keys);
		return -1;
	}
	return 0;
}

struct shm_table *shm_open_file(const char *path, size_t max_keys, char *err, size_t errlen)
{
	struct shm_table *t = NULL;
	struct shm_geom g;
	struct stat st;
	void *p;
	int fd;

	if (max_keys == 0 || max_keys > SHM_MAX_KEYS) {
		shm_errf(err, errlen, "max_keys must be in 1..2^30", max_keys);
		return NULL;
	}
	shm_geom(max_keys, &g);
	/* Never through a symbolic link at the path itself (one planted
	 * there would have the agent create, size and write the file it
	 * points to); directories above may be links. */
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600);
	if (fd < 0) {
		struct stat lst;

		if (errno == ELOOP && lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode))
			snprintf(err, errlen, "state_file %s: is a symbolic link, refused (never "
				 "followed); give the path of the file itself", path);
		else
			snprintf(err, errlen, "state_file %s: %s", path, strerror(errno));
		return NULL;
	}
	/* One agent per file: the lock lives as long as the descriptor (the
	 * master's; workers share it). */
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		snprintf(err, errlen, "state_file %s: %s", path,
			 errno == EWOULDBLOCK ? "in use by another running agent" : strerror(errno));
		goto fail;
	}
	if (fstat(fd, &st) < 0) {
		snprintf(err, errlen, "state_file %s: %s", path, strerror(errno));
		goto fail;
	}
	/* A FIFO or a device would not hold a table (and is not ours to
	 * size). */
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "state_file %s: not a regular file, refused", path);
		goto fail;
	}
	bool fresh = st.st_size == 0;
	if (!fresh && shm_file_check(fd, path, &st, max_keys, &g, err, errlen) < 0)
		goto fail;
	if (fresh && ftruncate(fd, (off_t)g.len) < 0) {
		snprintf(err, errlen, "state_file %s: cannot size it to %zu bytes: %s", path, g.len,
			 strerror(errno));
		goto fail;
	}
	p = segment_map_file(fd, g.len);
	if (!p) {
		snprintf(err, errlen, "state_file %s: mmap of %zu bytes: %s", path, g.len,
			 strerror(errno));
		goto fail;
	}
	if (!(t = shm_handle(p, &g))) {
		segment_free(p, g.len);
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	t->fd = fd;
	shm_touch(p, g.len, false);
	if (fresh) {
		shm_init_hdr(t, max_keys);
		return t;
	}
	t->seed = t->hdr->seed;
	t->reused = true;
	/* What belonged to the processes of the last run: their leases, the
	 * node counts they learnt, and (after an unclean stop) the admissions
	 * they had in flight and the grants they were asking for, which no
	 * answer will ever end: left set, a key would never ask for a grant
	 * again until its window ended, and every hit of it would go to the
	 * store. Kept: what is left of each grant, which the store counted
	 * (the node's hits spend it, or the first sync cycle that sees it
	 * unused gives it back with a push; cleared, that headroom would stay
	 * taken in the store until the window ended), and the demand, which
	 * sizes the next grant. */
	for (unsigned i = 0; i < SHM_MAX_NS; i++) {
		atomic_store(&t->hdr->lease[i], 0);
		atomic_store(&t->hdr->nodes[i], 0);
		atomic_store(&t->hdr->beat[i], 0);
	}
	shm_grant_unstick(t);
	shm_recount(t);
	return t;
fail:
	close(fd);
	return NULL;
}

bool shm_reused(const struct shm_table *t)
{
	return t->reused;
}

int shm_ns_claim(struct shm_table *t, const char *name)
{
	size_t len = strlen(name);
	int free_id = -1;

	if (len == 0 || len >= SHM_NAME_MAX)
		return -1;
	for (int i = 0; i < SHM_MAX_NS; i++) {
		if (strncmp(t->hdr->names[i], name, SHM_NAME_MAX) == 0)
			return i;
		if (free_id < 0 && t->hdr->names[i][0] == '\0')
			free_id = i;
	}
	if (free_id >= 0)
		memcpy(t->hdr->names[free_id], name, len + 1);
	return free_id;
}

int shm_win_claim(struct shm_table *t, unsigned ns, uint32_t size)
{
	int free_id = -1;

	if (ns >= SHM_MAX_NS || size == 0)
		return -1;
	for (int w = 0; w < SHM_MAX_WIN; w++) {
		uint32_t have = atomic_load(&t->hdr->sizes[ns][w]);
		if (have == size)
			return w;
		if (free_id < 0 && have == 0)
			free_id = w;
	}
	if (free_id >= 0)
		atomic_store(&t->hdr->sizes[ns][free_id], size);
	return free_id;
}

int shm_set_ns(struct shm_table *t, unsigned ns, uint64_t share, bool evict)
{
	if (ns >= SHM_MAX_NS)
		return -1;
	t->hdr->share[ns] = share;
	t->hdr->evict[ns] = evict;
	return 0;
}

const uint8_t *shm_digest_key(const struct shm_table *t)
{
	return t->hdr->digest_key;
}

void shm_set_digest_key(struct shm_table *t, const uint8_t key[16])
{
	memcpy(t->hdr->digest_key, key, 16);
}

void shm_destroy(struct shm_table *t)
{
	if (!t)
		return;
	if (t->fd >= 0) {
		msync(t->hdr, t->map_len, MS_SYNC);
		close(t->fd);
	}
	segment_free(t->hdr, t->map_len);
	free(t);
}

int shm_set_window(struct shm_table *t, unsigned ns, unsigned win, uint32_t size)
{
	if (ns >= SHM_MAX_NS || win >= SHM_MAX_WIN || size == 0)
		return -1;
	atomic_store(&t->hdr->sizes[ns][win], size);
	return 0;
}

uint32_t shm_window_size(const struct shm_table *t, unsigned ns, unsigned win)
{
	if (ns >= SHM_MAX_NS || win >= SHM_MAX_WIN)
		return 0;
	return atomic_load_explicit(&t->hdr->sizes[ns][win], memory_order_relaxed);
}

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

/* The meta of k's window `start` in state st. */
static inline uint64_t shm_meta_of(const struct shm_key *k, int64_t start, uint64_t st)
{
	return st << SHM_ST_SHIFT | k->ident | ((uint64_t)start & SHM_META_START_MASK);
}

static inline uint32_t shm_next(const struct shm_table *t, uint32_t i)
{
	return ++i == t->nslots ? 0 : i;
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
static enum shm_cmp shm_key_cmp(const struct shm_slot *s, const struct shm_key *k, uint64_t m)
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

/* For the hot path: a LIVE slot that changes under us is being re-keyed,
 * so it is not ours any more; a miss sends the caller to shm_insert,
 * which looks again carefully. */
static bool shm_key_matches(const struct shm_slot *s, const struct shm_key *k, uint64_t m)
{
	return shm_key_cmp(s, k, m) == SHM_CMP_SAME;
}

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

static inline bool shm_valid_start(int64_t start)
{
	return start >= 0 && start <= (int64_t)SHM_META_START_MASK;
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

/* What an insert that needs room can make of slot s, whose meta is m, at
 * `now` (see the banner). */
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
static enum shm_cand shm_cand_kind(const struct shm_table *t, const struct shm_slot *s,
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

/* Does slot i hold a grant, or grant hits the store has not been told of
 * (evicted, they would stay reserved in the store)? */
static bool shm_grant_held(const struct shm_table *t, uint32_t i)
{
	const _Atomic uint64_t *g = &t->grant[SHM_GRANT_WORDS * (size_t)i];

	return atomics_bitsd(atomic_load(&g[SHM_GRANT_LEFT])) != 0.0 ||
	       atomics_bitsd(atomic_load(&g[SHM_GRANT_SPENT])) != 0.0 ||
	       atomics_bitsd(atomic_load(&g[SHM_GRANT_RET])) != 0.0;
}

/* The value of LIVE slot i (meta m, not stale) as an eviction victim: its
 * count, or for a previous window the part of it the sliding rate still
 * weighs. -1 when it may not be evicted: a diff the store has not
 * confirmed, a grant, or protected. */
static double shm_victim_value(const struct shm_table *t, uint32_t i, uint64_t m, double now)
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

static uint64_t shm_share(const struct shm_table *t, unsigned ns)
{
	return t->hdr->share[ns] ? t->hdr->share[ns] : t->hdr->max_keys;
}

/* Namespaces holding more LIVE slots than their share (a bit each). */
static uint32_t shm_borrowers(const struct shm_table *t)
{
	uint32_t mask = 0;

	for (unsigned ns = 0; ns < SHM_MAX_NS; ns++) {
		uint64_t share = t->hdr->share[ns];

		if (share && atomic_load_explicit(&t->hdr->live[ns], memory_order_relaxed) >
				     (int64_t)share)
			mask |= 1u << ns;
	}
	return mask;
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

/* A BUSY meta dated now. The ticket makes it unique, so a stale owner's
 * later CAS can never succeed on someone else's claim. */
static uint64_t shm_busy_meta(struct shm_table *t, double now)
{
	return SHM_ST_BUSY << SHM_ST_SHIFT | ((uint64_t)(uint32_t)now << SHM_META_BUSY_TIME_SHIFT) |
	       (atomic_fetch_add_explicit(&t->hdr->ticket, 1, memory_order_relaxed) &
		SHM_META_TICKET_MASK);
}

/* A slot an insert could take, found while scanning its chain. */
struct shm_pick {
	uint32_t idx;                /* SHM_NONE: none found */
	uint32_t d;                  /* probe distance from the home bucket */
	uint64_t m;                  /* its meta when seen */
	double value;                /* victims: what evicting it loses */
};

static void shm_pick_set(struct shm_pick *p, uint32_t idx, uint32_t d, uint64_t m, double value)
{
	p->idx = idx;
	p->d = d;
	p->m = m;
	p->value = value;
}

/* Which slot to take, in the order of the banner; NULL: no room. *victim
 * is set to an entry to evict first when the slot taken is another (a
 * free one nearer home: the newcomer stays close to home, so lookups stay
 * short), or NULL. */
static const struct shm_pick *shm_choose(const struct shm_table *t, const struct shm_key *k,
					 bool sample, bool under, int64_t total,
					 const struct shm_pick *fre, const struct shm_pick *stale,
					 const struct shm_pick *lend, const struct shm_pick *own,
					 const struct shm_pick **victim)
{
	const struct shm_hdr *hd = t->hdr;
	int64_t soft_cap = (int64_t)(hd->max_keys + (t->nslots - hd->max_keys) / 2);
	const struct shm_pick *v = NULL;

	*victim = NULL;
	if (!sample) {
		/* Below max_keys: the first free or stale slot, as always. */
		if (fre->idx == SHM_NONE)
			return stale->idx == SHM_NONE ? NULL : stale;
		return stale->idx != SHM_NONE && stale->d < fre->d ? stale : fre;
	}
	if (stale->idx != SHM_NONE)
		return stale;
	if (under && lend->idx != SHM_NONE)
		v = lend;
	else if (under && fre->idx != SHM_NONE)
		return fre;
	else if (hd->evict[k->ns] && own->idx != SHM_NONE)
		v = own;
	else if (hd->evict[k->ns] && fre->idx != SHM_NONE && total < soft_cap)
		return fre;
	else
		return NULL;
	if (fre->idx != SHM_NONE && fre->d < v->d) {
		*victim = v;
		return fre;
	}
	return v;
}

/* Evicts the LIVE entry of pick v (now FREE), unless it changed, got a
 * diff or a protection since it was seen. Returns whether it did. */
static bool shm_evict(struct shm_table *t, const struct shm_pick *v, double now)
{
	struct shm_hdr *hd = t->hdr;
	struct shm_slot *s = &t->slots[v->idx];
	uint64_t m = v->m, busy = shm_busy_meta(t, now);
	unsigned vns = shm_meta_ns(m);

	if (!atomic_compare_exchange_strong(&s->meta, &m, busy))
		return false;
	/* Under our claim, as in shm_try_insert (step 2). */
	if (atomics_bitsd(atomic_load(&s->diff)) != 0.0 || atomic_load(&t->prot[v->idx]) ||
	    shm_grant_held(t, v->idx)) {
		atomic_compare_exchange_strong(&s->meta, &busy, v->m);
		return false;
	}
	atomic_fetch_sub_explicit(&hd->live[vns], 1, memory_order_relaxed);
	atomic_fetch_sub_explicit(&hd->live_total, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&hd->evicted[vns], 1, memory_order_relaxed);
	atomic_compare_exchange_strong(&s->meta, &busy, SHM_META_FREE);
	return true;
}

/* One attempt. sample: choose among the first SHM_EVICT_SAMPLE slots
 * (forced at max_keys LIVE slots) instead of taking the first free one. */
static enum shm_try shm_try_insert(struct shm_table *t, const struct shm_key *k, int64_t start,
				   double now, bool sample, struct shm_ref *out,
				   enum shm_ins *how)
{
	struct shm_hdr *hd = t->hdr;
	uint64_t want = shm_meta_of(k, start, SHM_ST_LIVE), pend = shm_meta_of(k, start, SHM_ST_PENDING);
	uint32_t md = atomic_load(&t->maxd[k->home]);
	uint32_t i = k->home, c, j, borrowers = 0;
	int64_t total = atomic_load_explicit(&hd->live_total, memory_order_relaxed);
	bool under = atomic_load_explicit(&hd->live[k->ns], memory_order_relaxed) <
		     (int64_t)shm_share(t, k->ns);
	struct shm_pick fre, stale, lend, own;
	const struct shm_pick *pick, *victim;
	uint64_t cm, busy, jm;
	struct shm_slot *s;
	bool evicted = false;

	shm_pick_set(&fre, SHM_NONE, 0, 0, 0);
	stale = lend = own = fre;
	/* A namespace never given a share (shm_set_ns) fills the table as it
	 * comes: no sampling, no eviction. */
	if (hd->share[k->ns] == 0)
		sample = false;
	else if (total >= (int64_t)hd->max_keys)
		sample = true;
	if (sample && under)
		borrowers = shm_borrowers(t) & ~(1u << k->ns);

	/* 1. Look again (seq_cst), and note the slots we could take. */
	for (uint32_t d = 0; d < t->probe_max; d++, i = shm_next(t, i)) {
		uint64_t m;

		s = &t->slots[i];
		if (d <= md && (m = shm_holds(s, k, start))) {
			if (m == want) {
				out->idx = i;
				out->meta = m;
				*how = SHM_INS_FOUND;
				return SHM_TRY_DONE;
			}
			/* Someone is inserting it right now. */
			shm_wait_pending(t, i, m);
			return SHM_TRY_AGAIN;
		}
		m = atomic_load(&s->meta);
		switch (shm_cand_kind(t, s, m, now)) {
		case SHM_CAND_FREE:
			if (fre.idx == SHM_NONE)
				shm_pick_set(&fre, i, d, m, 0);
			break;
		case SHM_CAND_STALE:
			if (stale.idx == SHM_NONE)
				shm_pick_set(&stale, i, d, m, 0);
			break;
		case SHM_CAND_NONE:
		case SHM_CAND_COUNT:
			if (sample && d < SHM_EVICT_SAMPLE && shm_meta_state(m) == SHM_ST_LIVE) {
				unsigned vns = shm_meta_ns(m);
				struct shm_pick *best = vns == k->ns		  ? &own
							: (borrowers >> vns) & 1u ? &lend
										  : NULL;
				double v = best ? shm_victim_value(t, i, m, now) : -1;

				if (v >= 0 && (best->idx == SHM_NONE || v < best->value))
					shm_pick_set(best, i, d, m, v);
			}
			break;
		}
		if (d < md)
			continue;
		/* Past the chain: stop at an EMPTY slot or once there is
		 * something to take; sampling: at a stale slot or after the
		 * sample (victims past an EMPTY slot are only freed, the
		 * newcomer goes to the free slot nearer home). */
		if (!sample ? m == SHM_META_EMPTY || fre.idx != SHM_NONE || stale.idx != SHM_NONE
			    : stale.idx != SHM_NONE || d + 1 >= SHM_EVICT_SAMPLE)
			break;
	}
	pick = shm_choose(t, k, sample, under, total, &fre, &stale, &lend, &own, &victim);
	if (!pick)
		return SHM_TRY_FULL;
	if (victim) {
		if (!shm_evict(t, victim, now))
			return SHM_TRY_AGAIN;
		evicted = true;
	}

	/* 2. Claim it. The ticket makes this BUSY value unique, so a stale
	 * owner's later CAS can never succeed on someone else's claim. */
	c = pick->idx;
	cm = pick->m;
	s = &t->slots[c];
	busy = shm_busy_meta(t, now);
	if (!atomic_compare_exchange_strong(&s->meta, &cm, busy))
		return SHM_TRY_AGAIN;
	*how = evicted ? SHM_INS_EVICTED : SHM_INS_NEW;
	if (shm_meta_state(cm) == SHM_ST_LIVE) {
		unsigned vns = shm_meta_ns(cm);
		bool in_place = pick != &stale;    /* evicted in place */

		/* Re-check under our claim: a restored diff or a hit may have
		 * raced our first look (shm_restore_diff and counting hits add
		 * to diff, then re-check meta, seq_cst, so either we see their
		 * diff here or they see our BUSY), and so may a protection.
		 * Never drop a pending diff. */
		if (atomics_bitsd(atomic_load(&s->diff)) != 0.0 ||
		    (in_place && (atomic_load(&t->prot[c]) || shm_grant_held(t, c)))) {
			atomic_compare_exchange_strong(&s->meta, &busy, cm);
			return SHM_TRY_AGAIN;
		}
		atomic_fetch_sub_explicit(&hd->live[vns], 1, memory_order_relaxed);
		atomic_fetch_sub_explicit(&hd->live_total, 1, memory_order_relaxed);
		if (in_place) {
			atomic_fetch_add_explicit(&hd->evicted[vns], 1, memory_order_relaxed);
			*how = SHM_INS_EVICTED;
		} else {
			atomic_fetch_add_explicit(&hd->reclaimed, 1, memory_order_relaxed);
		}
	} else if (shm_meta_state(cm) != SHM_ST_FREE) {
		atomic_fetch_add_explicit(&hd->recovered, 1, memory_order_relaxed);
	}

	/* 3. Write the identity and zero counters while nobody can see the
	 * slot, make the chain long enough to reach it, then show it as
	 * PENDING (comparable, not yet counted into). */
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
	atomics_raise_u16(&t->maxd[k->home], (uint16_t)pick->d);
	if (!atomic_compare_exchange_strong(&s->meta, &busy, pend))
		return SHM_TRY_AGAIN;	/* our claim was taken for abandoned */

	/* 4. Resolve racing inserts of the same identity (see shm.h). */
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
	{
		uint64_t expect = pend;

		if (!atomic_compare_exchange_strong(&s->meta, &expect, want))
			return SHM_TRY_AGAIN;
	}
	atomic_fetch_add_explicit(&hd->live[k->ns], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&hd->live_total, 1, memory_order_relaxed);
	out->idx = c;
	out->meta = want;
	return SHM_TRY_DONE;
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

void shm_protect(struct shm_table *t, const struct shm_ref *r)
{
	if (r->idx == SHM_NONE)
		return;
	/* Read first: a key hammered over its limit writes the line once. */
	if (!atomic_load_explicit(&t->prot[r->idx], memory_order_relaxed))
		atomic_store(&t->prot[r->idx], 1);
}

double shm_read_diff(const struct shm_table *t, const struct shm_ref *r)
{
	const struct shm_slot *s;
	double v;

	if (r->idx == SHM_NONE)
		return 0;
	s = &t->slots[r->idx];
	v = atomics_load_double(&s->diff);
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&s->meta, memory_order_relaxed) != r->meta)
		return 0;
	return v;
}

double shm_read_count(const struct shm_table *t, const struct shm_ref *r)
{
	const struct shm_slot *s;
	double v;

	if (r->idx == SHM_NONE)
		return 0;
	s = &t->slots[r->idx];
	v = atomics_load_double(&s->count);
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&s->meta, memory_order_relaxed) != r->meta)
		return 0;
	return v;
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

uint32_t shm_nslots(const struct shm_table *t)
{
	return t->nslots;
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

void shm_stats(const struct shm_table *t, struct shm_stats *st)
{
	st->full_events = atomic_load_explicit(&t->hdr->full_events, memory_order_relaxed);
	st->reclaimed = atomic_load_explicit(&t->hdr->reclaimed, memory_order_relaxed);
	st->recovered = atomic_load_explicit(&t->hdr->recovered, memory_order_relaxed);
	st->evicted = 0;
	for (unsigned ns = 0; ns < SHM_MAX_NS; ns++)
		st->evicted += atomic_load_explicit(&t->hdr->evicted[ns], memory_order_relaxed);
}

int shm_ns_stats(const struct shm_table *t, unsigned ns, struct shm_ns_stats *st)
{
	if (ns >= SHM_MAX_NS)
		return -1;
	st->share = shm_share(t, ns);
	st->live = atomic_load_explicit(&t->hdr->live[ns], memory_order_relaxed);
	st->evicted = atomic_load_explicit(&t->hdr->evicted[ns], memory_order_relaxed);
	st->refused = atomic_load_explicit(&t->hdr->refused[ns], memory_order_relaxed);
	return 0;
}

size_t shm_bytes(const struct shm_table *t)
{
	return t->map_len;
}

/* ---- what dead processes leave (the grant words' marks) ---- */

void shm_grant_unstick(struct shm_table *t)
{
	/* Only words that are set are written: the pages of a large table
	 * (or of a state file) stay clean. */
	for (uint32_t idx = 0; idx < t->nslots; idx++) {
		_Atomic uint64_t *flight = shm_grant_word(t, idx, SHM_GRANT_FLIGHT);
		_Atomic uint64_t *last = shm_grant_word(t, idx, SHM_GRANT_LAST);

		if (atomic_load_explicit(flight, memory_order_relaxed) != 0)
			atomic_store_explicit(flight, 0, memory_order_relaxed);
		/* A grant being asked for (the demand d kept as -(d + 1):
		 * shm_grant_begin) is asked no more: d again. */
		if (atomic_load_explicit(last, memory_order_relaxed) != 0 &&
		    atomics_load_double(last) < 0)
			atomics_store_double(last, -atomics_load_double(last) - 1);
	}
}
