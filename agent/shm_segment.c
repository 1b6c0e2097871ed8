/*
 * shm_segment.c - the shared counter table's segment: made (shm_create)
 * or mapped from a state file (shm_open_file), unmapped; the header's
 * settings (namespace and window indexes, shares, the digest key) and its
 * counters (shm_stats); what dead processes leave in it
 * (shm_grant_unstick). The
 * segment and the slot states are drawn in shm.h; the table's other jobs
 * are in the files agent/shm_int.h lists.
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

#include "agent/segment.h"
#include "agent/shm_int.h"

/* "SHMRLT" + a layout version in the last two bytes ("02": grants and
 * namespace names; "03": heartbeat turns, grants spent and returned), as it
 * reads in a state file's first bytes. */
#define SHM_MAGIC      0x3330544c524d4853ULL   /* "SHMRLT03", little-endian */
#define SHM_HDR_BYTES  ((sizeof(struct shm_hdr) + 127) & ~(size_t)127)

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
	/* Longer: the limit overrides follow the table (agent/limits.c
	 * checks their part). */
	if (h.nslots != g->nslots || (size_t)st->st_size < g->len) {
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

int shm_state_fd(const struct shm_table *t)
{
	return t->fd;
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

uint32_t shm_nslots(const struct shm_table *t)
{
	return t->nslots;
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
