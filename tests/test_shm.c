/*
 * test_shm.c - the shared counter table (agent/shm.h and its files) and its hashes
 * (agent/hash.c): SipHash against the reference vectors, lookups and
 * inserts, counters and the sync-loop primitives, stale-slot reclaiming,
 * recovery of claims left by killed processes, and racing inserts of the
 * same keys from two processes (exactly one live slot per window).
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/hash.h"
#include "agent/segment.h"
#include "agent/limits.h"
#include "agent/shm.h"
#include "agent/shm_sync.h"

#include "tests/lib/clock.h"

/* cr_assert_float_eq evaluates its arguments twice: evaluate once. */
#define EQ(x, want)                                                          \
	do {                                                                 \
		double got_ = (x);                                           \
		cr_assert(got_ - (want) <= 1e-12 && (want) - got_ <= 1e-12,  \
			  "%s = %g, want %g", #x, got_, (double)(want));     \
	} while (0)

static const uint8_t sip_key[16] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 };

/* Reference vectors: message i = bytes 0, 1, ..., i-1 under key 00..0f. */
Test(hash, siphash24_reference_vectors)
{
	uint8_t msg[64];

	for (int i = 0; i < 64; i++)
		msg[i] = (uint8_t)i;
	cr_assert_eq(hash_siphash24(sip_key, msg, 0), 0x726fdb47dd0e0e31ULL);
	cr_assert_eq(hash_siphash24(sip_key, msg, 7), 0xab0200f58b01d137ULL);
	cr_assert_eq(hash_siphash24(sip_key, msg, 8), 0x93f5f5799a932462ULL);
	cr_assert_eq(hash_siphash24(sip_key, msg, 15), 0xa129ca6149be45e5ULL);
	cr_assert_eq(hash_siphash24(sip_key, msg, 16), 0x3f2acc7f57c29bdbULL);
	cr_assert_eq(hash_siphash24(sip_key, msg, 63), 0x958a324ceb064572ULL);
}

Test(hash, siphash128_reference_vectors)
{
	static const struct {
		size_t len;
		uint8_t out[16];
	} v[] = {
		{ 0, { 0xa3, 0x81, 0x7f, 0x04, 0xba, 0x25, 0xa8, 0xe6,
		       0x6d, 0xf6, 0x72, 0x14, 0xc7, 0x55, 0x02, 0x93 } },
		{ 1, { 0xda, 0x87, 0xc1, 0xd8, 0x6b, 0x99, 0xaf, 0x44,
		       0x34, 0x76, 0x59, 0x11, 0x9b, 0x22, 0xfc, 0x45 } },
		{ 7, { 0xa1, 0xf1, 0xeb, 0xbe, 0xd8, 0xdb, 0xc1, 0x53,
		       0xc0, 0xb8, 0x4a, 0xa6, 0x1f, 0xf0, 0x82, 0x39 } },
		{ 8, { 0x3b, 0x62, 0xa9, 0xba, 0x62, 0x58, 0xf5, 0x61,
		       0x0f, 0x83, 0xe2, 0x64, 0xf3, 0x14, 0x97, 0xb4 } },
		{ 15, { 0x54, 0x93, 0xe9, 0x99, 0x33, 0xb0, 0xa8, 0x11,
			0x7e, 0x08, 0xec, 0x0f, 0x97, 0xcf, 0xc3, 0xd9 } },
		{ 16, { 0x6e, 0xe2, 0xa4, 0xca, 0x67, 0xb0, 0x54, 0xbb,
			0xfd, 0x33, 0x15, 0xbf, 0x85, 0x23, 0x05, 0x77 } },
		{ 63, { 0x51, 0x50, 0xd1, 0x77, 0x2f, 0x50, 0x83, 0x4a,
			0x50, 0x3e, 0x06, 0x9a, 0x97, 0x3f, 0xbd, 0x7c } },
	};
	uint8_t msg[64], out[16];

	for (int i = 0; i < 64; i++)
		msg[i] = (uint8_t)i;
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		hash_siphash128(sip_key, msg, v[i].len, out);
		cr_assert_arr_eq(out, v[i].out, 16, "length %zu", v[i].len);
	}
}

Test(hash, hash64_is_deterministic_and_seeded)
{
	const char *a = "10.0.0.1", *b = "10.0.0.2";
	uint64_t w[2] = { 0x31302e302e302e31ULL, 0 };

	cr_assert_eq(hash_64(a, strlen(a), 1), hash_64(a, strlen(a), 1));
	cr_assert_neq(hash_64(a, strlen(a), 1), hash_64(b, strlen(b), 1));
	cr_assert_neq(hash_64(a, strlen(a), 1), hash_64(a, strlen(a), 2));
	cr_assert_neq(hash_64(a, 3, 1), hash_64(a, 4, 1));
	cr_assert_eq(hash_words(w, 2, 7), hash_words(w, 2, 7));
	cr_assert_neq(hash_words(w, 1, 7), hash_words(w, 2, 7));
	/* every output bit flips for some one-bit input change */
	uint64_t acc = 0, h0 = hash_64(a, 8, 99);
	char buf[8];
	for (int bit = 0; bit < 64; bit++) {
		memcpy(buf, a, 8);
		buf[bit / 8] ^= (char)(1 << (bit % 8));
		acc |= hash_64(buf, 8, 99) ^ h0;
	}
	cr_assert_eq(acc, ~0ULL);
}

/* ---------------------------------------------------------------- */

static struct shm_table *mk(size_t max_keys)
{
	char err[128];
	struct shm_table *t = shm_create(max_keys, err, sizeof(err));

	cr_assert_not_null(t, "%s", err);
	cr_assert_eq(shm_set_window(t, 0, 0, 60), 0);
	cr_assert_eq(shm_set_window(t, 0, 1, 1), 0);
	cr_assert_eq(shm_set_window(t, 1, 0, 60), 0);
	return t;
}

static void key(const struct shm_table *t, struct shm_key *k, unsigned ns, unsigned win,
		const char *s)
{
	cr_assert_eq(shm_key_init(t, k, ns, win, s, strlen(s)), 0);
}

/* Finds (inserting if needed) and adds v; returns the count after. */
static double add(struct shm_table *t, unsigned ns, unsigned win, const char *s, int64_t start,
		  double now, double v, bool diff)
{
	struct shm_key k;
	struct shm_ref r, p;

	key(t, &k, ns, win, s);
	shm_find(t, &k, start, -1, &r, &p);
	if (r.idx == SHM_NONE)
		cr_assert_eq(shm_insert(t, &k, start, now, &r), SHM_INS_NEW, "insert %s", s);
	return shm_add(t, &r, v, diff);
}

static double get(const struct shm_table *t, unsigned ns, unsigned win, const char *s,
		  int64_t start)
{
	struct shm_key k;
	struct shm_ref r, p;

	key(t, &k, ns, win, s);
	shm_find(t, &k, start, -1, &r, &p);
	return shm_read_count(t, &r);
}

static unsigned live_slots(const struct shm_table *t)
{
	struct shm_entry e;
	unsigned n = 0;

	for (uint32_t i = 0; i < shm_nslots(t); i++)
		n += shm_read(t, i, &e) == 0;
	return n;
}

Test(shm, create_rejects_bad_sizes)
{
	char err[128] = "";

	cr_assert_null(shm_create(0, err, sizeof(err)));
	cr_assert(strlen(err) > 0);
	cr_assert_null(shm_create(SHM_MAX_KEYS + 1, err, sizeof(err)));
	struct shm_table *t = shm_create(10, err, sizeof(err));
	cr_assert_not_null(t);
	cr_assert_eq(shm_set_window(t, SHM_MAX_NS, 0, 1), -1);
	cr_assert_eq(shm_set_window(t, 0, SHM_MAX_WIN, 1), -1);
	cr_assert_eq(shm_set_window(t, 0, 0, 0), -1);
	cr_assert_geq(shm_nslots(t), 10 * 4 / 3);
	shm_destroy(t);
}

Test(shm, key_init_limits)
{
	struct shm_table *t = mk(16);
	struct shm_key k;
	char big[SHM_KEY_MAX + 1];

	memset(big, 'x', sizeof(big));
	cr_assert_eq(shm_key_init(t, &k, 0, 0, big, 0), -1);
	cr_assert_eq(shm_key_init(t, &k, 0, 0, big, SHM_KEY_MAX + 1), -1);
	cr_assert_eq(shm_key_init(t, &k, 0, 0, big, SHM_KEY_MAX), 0);
	cr_assert_eq(shm_key_init(t, &k, SHM_MAX_NS, 0, big, 1), -1);
	cr_assert_eq(shm_key_init(t, &k, 0, SHM_MAX_WIN, big, 1), -1);
	shm_destroy(t);
}

Test(shm, insert_find_add_read)
{
	struct shm_table *t = mk(64);

	EQ(get(t, 0, 0, "a", 960), 0.0);
	EQ(add(t, 0, 0, "a", 960, 1000, 1, false), 1.0);
	EQ(add(t, 0, 0, "a", 960, 1000, 1, false), 2.0);
	EQ(add(t, 0, 0, "a", 960, 1000, 0.5, false), 2.5);
	EQ(add(t, 0, 0, "a", 960, 1000, 0.25, false), 2.75);
	EQ(get(t, 0, 0, "a", 960), 2.75);
	/* other window start, window index, namespace, key: other counters */
	EQ(get(t, 0, 0, "a", 900), 0.0);
	EQ(get(t, 0, 1, "a", 960), 0.0);
	EQ(get(t, 1, 0, "a", 960), 0.0);
	EQ(get(t, 0, 0, "b", 960), 0.0);
	/* keys that differ only after a zero byte / in length */
	{
		struct shm_key k;
		struct shm_ref r, p;

		cr_assert_eq(shm_key_init(t, &k, 0, 0, "a\0", 2), 0);
		shm_find(t, &k, 960, -1, &r, &p);
		cr_assert_eq(r.idx, SHM_NONE);
	}
	cr_assert_eq(live_slots(t), 1);
	shm_destroy(t);
}

Test(shm, one_scan_finds_current_and_previous)
{
	struct shm_table *t = mk(64);
	struct shm_key k;
	struct shm_ref cur, prev;

	add(t, 0, 0, "k", 900, 910, 20, false);
	add(t, 0, 0, "k", 960, 990, 10, false);
	key(t, &k, 0, 0, "k");
	shm_find(t, &k, 960, 900, &cur, &prev);
	cr_assert_neq(cur.idx, SHM_NONE);
	cr_assert_neq(prev.idx, SHM_NONE);
	cr_assert_neq(cur.idx, prev.idx);
	EQ(shm_read_count(t, &cur), 10.0);
	EQ(shm_read_count(t, &prev), 20.0);
	shm_destroy(t);
}

/* Keys are bytes: NULs included, and an all-zero key must never match an
 * EMPTY slot (whose key words are zero too). */
Test(shm, binary_keys)
{
	struct shm_table *t = mk(64);
	struct shm_key k1, k2;
	struct shm_ref r, p;

	cr_assert_eq(shm_key_init(t, &k1, 0, 0, "\0", 1), 0);
	cr_assert_eq(shm_key_init(t, &k2, 0, 0, "\0\0", 2), 0);
	shm_find(t, &k1, 960, 900, &r, &p);
	cr_assert_eq(r.idx, SHM_NONE);
	cr_assert_eq(p.idx, SHM_NONE);
	cr_assert_eq(shm_insert(t, &k1, 960, 1000, &r), SHM_INS_NEW);
	EQ(shm_add(t, &r, 1, false), 1);
	shm_find(t, &k1, 960, 900, &r, &p);
	cr_assert_neq(r.idx, SHM_NONE);
	cr_assert_eq(p.idx, SHM_NONE, "an EMPTY slot taken for the previous window");
	shm_find(t, &k1, 1020, 960, &r, &p);
	cr_assert_eq(r.idx, SHM_NONE);
	EQ(shm_read_count(t, &p), 1);
	shm_find(t, &k2, 960, 900, &r, &p);
	cr_assert_eq(r.idx, SHM_NONE);
	for (int i = 0; i < 2; i++) {	/* no previous window asked for */
		shm_find(t, i ? &k1 : &k2, 1080, -1, &r, &p);
		cr_assert_eq(r.idx, SHM_NONE);
		cr_assert_eq(p.idx, SHM_NONE);
	}
	shm_destroy(t);
}

/* Every length 1..SHM_KEY_MAX round-trips through a slot byte for byte,
 * and keys differing in any one byte are different counters. */
Test(shm, keys_of_every_length)
{
	struct shm_table *t = mk(4 * SHM_KEY_MAX);
	unsigned char buf[SHM_KEY_MAX];
	struct shm_entry e;

	for (size_t len = 1; len <= SHM_KEY_MAX; len++) {
		struct shm_key k;
		struct shm_ref r, p;

		for (size_t i = 0; i < len; i++)
			buf[i] = (unsigned char)(0xff - (len * 7 + i * 13) % 256);
		cr_assert_eq(shm_key_init(t, &k, 0, 0, buf, len), 0);
		cr_assert_eq(shm_insert(t, &k, 960, 1000, &r), SHM_INS_NEW);
		shm_add(t, &r, (double)len, false);
		cr_assert_eq(shm_read(t, r.idx, &e), 0);
		cr_assert_eq(e.keylen, len);
		cr_assert_arr_eq(e.key, buf, len, "length %zu", len);
		/* flip the last byte: another key */
		buf[len - 1] ^= 1;
		cr_assert_eq(shm_key_init(t, &k, 0, 0, buf, len), 0);
		shm_find(t, &k, 960, -1, &r, &p);
		cr_assert_eq(r.idx, SHM_NONE, "length %zu", len);
		buf[len - 1] ^= 1;
		cr_assert_eq(shm_key_init(t, &k, 0, 0, buf, len), 0);
		shm_find(t, &k, 960, -1, &r, &p);
		EQ(shm_read_count(t, &r), (double)len);
	}
	shm_destroy(t);
}

Test(shm, long_keys_compare_every_byte)
{
	struct shm_table *t = mk(64);
	char a[SHM_KEY_MAX + 1], b[SHM_KEY_MAX + 1];

	memset(a, 'q', SHM_KEY_MAX);
	a[SHM_KEY_MAX] = '\0';
	memcpy(b, a, sizeof(a));
	b[SHM_KEY_MAX - 1] = 'r';
	add(t, 0, 0, a, 960, 1000, 3, false);
	add(t, 0, 0, b, 960, 1000, 5, false);
	EQ(get(t, 0, 0, a, 960), 3.0);
	EQ(get(t, 0, 0, b, 960), 5.0);
	shm_destroy(t);
}

Test(shm, full_table_refuses_and_counts)
{
	struct shm_table *t = mk(8);
	struct shm_stats st;
	char name[32];
	unsigned ok = 0, full = 0;

	for (int i = 0; i < 40; i++) {
		struct shm_key k;
		struct shm_ref r;

		snprintf(name, sizeof(name), "k%d", i);
		key(t, &k, 0, 0, name);
		if (shm_insert(t, &k, 960, 1000, &r) >= 0)
			ok++;
		else
			full++;
	}
	cr_assert_geq(ok, 8, "at least max_keys fit (%u)", ok);
	cr_assert_eq(ok, shm_nslots(t));
	cr_assert_eq(full, 40 - ok);
	shm_stats(t, &st);
	cr_assert_eq(st.full_events, full);
	/* existing keys are still served */
	EQ(add(t, 0, 0, "k0", 960, 1000, 1, false), 1.0);
	shm_destroy(t);
}

Test(shm, stale_windows_are_reclaimed)
{
	struct shm_table *t = mk(8);
	char name[32];
	struct shm_stats st;

	/* 1 s windows (win 1): each second brings 8 new keys; slots of two
	 * seconds ago are re-keyed, so a tiny table keeps serving. */
	for (int sec = 1000; sec < 1100; sec++)
		for (int i = 0; i < 4; i++) {
			snprintf(name, sizeof(name), "s%d-%d", sec, i);
			EQ(add(t, 0, 1, name, sec, sec + 0.5, 1, false), 1.0);
		}
	shm_stats(t, &st);
	cr_assert_eq(st.full_events, 0);
	cr_assert_gt(st.reclaimed, 300);
	/* the current and previous second are intact */
	EQ(get(t, 0, 1, "s1099-3", 1099), 1.0);
	EQ(get(t, 0, 1, "s1098-0", 1098), 1.0);
	shm_destroy(t);
}

Test(shm, previous_window_is_not_stale)
{
	struct shm_table *t = mk(1);	/* 2 slots */
	struct shm_key k;
	struct shm_ref r;

	add(t, 0, 0, "a", 900, 930, 1, false);
	add(t, 0, 0, "b", 900, 930, 1, false);
	/* at 1000 the 900 window is the previous one: not reclaimable */
	key(t, &k, 0, 0, "c");
	cr_assert_eq(shm_insert(t, &k, 960, 1000, &r), -1);
	/* at 1020 it is older than the previous one */
	cr_assert_eq(shm_insert(t, &k, 1020, 1020, &r), SHM_INS_NEW);
	shm_destroy(t);
}

/* After the clock is stepped back, windows from "the future" are stale
 * once they start more than SHM_CLOCK_SLACK seconds ahead. */
Test(shm, windows_far_in_the_future_are_reclaimed)
{
	struct shm_table *t = mk(1);	/* 2 slots */
	struct shm_key k;
	struct shm_ref r;

	add(t, 0, 0, "a", 999960, 1000000, 1, false);
	add(t, 0, 0, "b", 999960, 1000000, 1, true);
	key(t, &k, 0, 0, "c");
	/* 30 s behind: could be a slightly slow clock, keep */
	cr_assert_eq(shm_insert(t, &k, 999900, 999930, &r), -1);
	/* an hour behind: the clock was stepped back; "a" goes, "b" has a
	 * diff to push and stays */
	cr_assert_eq(shm_insert(t, &k, 996360, 996400, &r), SHM_INS_NEW);
	EQ(get(t, 0, 0, "b", 999960), 1);
	EQ(get(t, 0, 0, "a", 999960), 0);
	shm_destroy(t);
}

Test(shm, stale_slot_with_pending_diff_is_kept)
{
	struct shm_table *t = mk(1);	/* 2 slots */
	struct shm_key k;
	struct shm_ref r;
	struct shm_entry e;
	double d = 0;

	add(t, 0, 0, "a", 900, 930, 2.5, true);
	add(t, 0, 0, "b", 900, 930, 1.5, true);
	key(t, &k, 0, 0, "c");
	/* long stale, but both slots still have a diff to push */
	cr_assert_eq(shm_insert(t, &k, 1e6 - 40, 1e6, &r), -1);
	/* a sync takes the diffs... */
	for (uint32_t i = 0; i < shm_nslots(t); i++)
		if (shm_read(t, i, &e) == 0)
			d += shm_take_diff(t, &e);
	EQ(d, 4.0);
	/* ...and then the slots can go */
	cr_assert_eq(shm_insert(t, &k, 1e6 - 40, 1e6, &r), SHM_INS_NEW);
	shm_destroy(t);
}

Test(shm, sync_primitives)
{
	struct shm_table *t = mk(16);
	struct shm_entry e;
	uint32_t idx = SHM_NONE;
	int found = 0;

	add(t, 1, 0, "user:42", 960, 1000, 3, true);
	for (uint32_t i = 0; i < shm_nslots(t); i++)
		if (shm_read(t, i, &e) == 0) {
			idx = i;
			found++;
		}
	cr_assert_eq(found, 1);
	cr_assert_eq(shm_read(t, idx, &e), 0);
	cr_assert_str_eq(e.key, "user:42");
	cr_assert_eq(e.keylen, 7);
	cr_assert_eq(e.ns, 1);
	cr_assert_eq(e.win, 0);
	cr_assert_eq(e.size, 60);
	cr_assert_eq(e.start, 960);
	EQ(e.count, 3.0);
	EQ(e.diff, 3.0);

	/* take: diff to 0, count untouched */
	EQ(shm_take_diff(t, &e), 3.0);
	EQ(shm_take_diff(t, &e), 0.0);
	/* a hit after the take stays in diff */
	add(t, 1, 0, "user:42", 960, 1000, 1, true);
	/* the cluster says 10 (our 3 + 7 from other nodes): count = 10 + 1 */
	cr_assert_eq(shm_sync_total(t, &e, 10), 0);
	EQ(get(t, 1, 0, "user:42", 960), 11.0);
	/* a smaller total never lowers the visible count */
	cr_assert_eq(shm_sync_total(t, &e, 2), 0);
	EQ(get(t, 1, 0, "user:42", 960), 11.0);
	/* a failed push puts its diff back */
	cr_assert_eq(shm_read(t, idx, &e), 0);
	double d = shm_take_diff(t, &e);
	EQ(d, 1.0);
	cr_assert_eq(shm_restore_diff(t, &e, d), 0);
	cr_assert_eq(shm_read(t, idx, &e), 0);
	EQ(e.diff, 1.0);
	/* local-only adds leave diff alone */
	add(t, 1, 0, "user:42", 960, 1000, 1, false);
	cr_assert_eq(shm_read(t, idx, &e), 0);
	EQ(e.diff, 1.0);
	EQ(e.count, 12.0);
	shm_destroy(t);
}

Test(shm, add_if_respects_limit)
{
	struct shm_table *t = mk(16);
	struct shm_key k;
	struct shm_ref r;
	double c;

	key(t, &k, 0, 0, "x");
	cr_assert_eq(shm_insert(t, &k, 960, 1000, &r), SHM_INS_NEW);
	cr_assert(shm_add_if(t, &r, 1, 2.5, 5, false, &c));	/* 1 + 2.5 <= 5 */
	EQ(c, 1.0);
	cr_assert(shm_add_if(t, &r, 1, 2.5, 5, false, &c));	/* 1 + 1 + 2.5 <= 5 */
	EQ(c, 2.0);
	cr_assert(!shm_add_if(t, &r, 1, 2.5, 5, false, &c));	/* 2 + 1 + 2.5 > 5 */
	EQ(c, 2.0);
	EQ(shm_read_count(t, &r), 2.0);
	shm_destroy(t);
}

/* A process killed between "PENDING" and "LIVE" leaves a claimed slot
 * with our identity; a later insert of the same key must not wedge: it
 * waits about a millisecond, frees the slot and proceeds. */
Test(shm, abandoned_pending_claim_is_recovered)
{
	struct shm_table *t = mk(64);
	struct shm_key k;
	struct shm_ref r;
	struct shm_slot *s;
	struct shm_stats st;
	int64_t us;

	key(t, &k, 0, 0, "victim");
	s = &t->slots[k.home];
	for (unsigned w = 0; w < SHM_KEY_WORDS; w++)
		atomic_store(&s->key[w], w < k.nwords ? k.w[w] : 0);
	atomic_store(&s->meta, SHM_ST_PENDING << SHM_ST_SHIFT | k.ident | 960);

	us = test_now_us();
	cr_assert_eq(shm_insert(t, &k, 960, 1000, &r), SHM_INS_NEW);
	us = test_now_us() - us;
	cr_assert_lt(us, 500000, "%lld us", (long long)us);
	shm_stats(t, &st);
	cr_assert_geq(st.recovered, 1);
	EQ(shm_add(t, &r, 1, false), 1.0);
	EQ(get(t, 0, 0, "victim", 960), 1.0);
	cr_assert_eq(live_slots(t), 1);
	shm_destroy(t);
}

/* A process killed while writing a slot (BUSY) leaves it unusable until
 * SHM_BUSY_TIMEOUT seconds after its claim time. */
Test(shm, abandoned_busy_claim_is_recovered_after_timeout)
{
	struct shm_table *t = mk(1);	/* 2 slots */
	struct shm_key k;
	struct shm_ref r;
	uint64_t busy = SHM_ST_BUSY << SHM_ST_SHIFT | (uint64_t)1000 << SHM_META_BUSY_TIME_SHIFT | 7;

	for (uint32_t i = 0; i < shm_nslots(t); i++)
		atomic_store(&t->slots[i].meta, busy + i);
	key(t, &k, 0, 0, "next");
	cr_assert_eq(shm_insert(t, &k, 960, 1001, &r), -1);
	cr_assert_eq(shm_insert(t, &k, 960, 1000 + SHM_BUSY_TIMEOUT, &r), SHM_INS_NEW);
	EQ(shm_add(t, &r, 2, false), 2.0);
	shm_destroy(t);
}

/* Two processes insert the same fresh keys at the same moment, round
 * after round (a shared spin barrier lines them up). Afterwards each key
 * has exactly one live slot, holding both processes' hits. */
#define RACE_ROUNDS 3000
#define RACE_KEYS   4

struct race_sync {
	_Atomic unsigned arrived[RACE_ROUNDS];
};

static void race_child(struct shm_table *t, struct race_sync *rs, int id)
{
	char name[32];

	for (int r = 0; r < RACE_ROUNDS; r++) {
		atomic_fetch_add(&rs->arrived[r], 1);
		while (atomic_load(&rs->arrived[r]) < 2)
			atomics_cpu_relax();
		for (int i = 0; i < RACE_KEYS; i++) {
			int j = id ? RACE_KEYS - 1 - i : i;	/* opposite orders too */
			struct shm_key k;
			struct shm_ref cur, prev;

			snprintf(name, sizeof(name), "r%d-%d", r, j);
			if (shm_key_init(t, &k, 0, 0, name, strlen(name)) < 0)
				_exit(2);
			shm_find(t, &k, 960, -1, &cur, &prev);
			if (cur.idx == SHM_NONE && shm_insert(t, &k, 960, 1000, &cur) < 0)
				_exit(3);
			shm_add(t, &cur, 1, true);
		}
	}
	_exit(0);
}

Test(shm, racing_inserts_make_one_slot_per_key, .timeout = 120)
{
	struct shm_table *t = mk(RACE_ROUNDS * RACE_KEYS + 16);
	struct race_sync *rs = segment_new(sizeof(*rs));
	pid_t pid[2];
	struct shm_entry e;
	unsigned live = 0;

	cr_assert_not_null(rs);
	for (int i = 0; i < 2; i++) {
		pid[i] = fork();
		cr_assert_geq(pid[i], 0);
		if (pid[i] == 0)
			race_child(t, rs, i);
	}
	for (int i = 0; i < 2; i++) {
		int st;

		cr_assert_eq(waitpid(pid[i], &st, 0), pid[i]);
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d status %d", i, st);
	}
	for (uint32_t i = 0; i < shm_nslots(t); i++) {
		if (shm_read(t, i, &e) < 0)
			continue;
		live++;
		cr_assert_float_eq(e.count, 2.0, 1e-12, "%s has %g", e.key, e.count);
		EQ(e.diff, 2.0);
	}
	cr_assert_eq(live, RACE_ROUNDS * RACE_KEYS);
	segment_free(rs, sizeof(*rs));
	shm_destroy(t);
}

/* The sync loop visits the slots shm_next_used() returns: every LIVE slot
 * is among them, and an empty table has none. */
Test(shm, next_used_covers_every_live_slot)
{
	struct shm_table *t = mk(4096);
	struct shm_entry e;
	char name[32];
	unsigned visited = 0, live = 0;

	cr_assert_eq(shm_next_used(t, 0), SHM_NONE);
	for (int i = 0; i < 300; i++) {
		snprintf(name, sizeof(name), "key-%d", i * 7919);
		add(t, 0, 0, name, 1800000000, 1800000001.0, 1, false);
	}
	for (uint32_t i = shm_next_used(t, 0); i != SHM_NONE; i = shm_next_used(t, i + 1)) {
		cr_assert_lt(i, shm_nslots(t));
		visited++;
		live += shm_read(t, i, &e) == 0;
	}
	cr_assert_eq(live, 300, "visited %u slots, %u live", visited, live);
	cr_assert_eq(live_slots(t), 300);
	cr_assert_eq(visited, 300, "only written slots are visited");
	shm_destroy(t);
}

/* Grants: spent only while they cover the cost (one CAS each), demand
 * noted, a second ask refused while one is in flight, a cycle's demand
 * becomes the last one, what is left taken back at once, and nothing of
 * a grant survives the slot being re-keyed. */
Test(shm, grants)
{
	struct shm_table *t = mk(1);	/* 2 slots */
	struct shm_key k;
	struct shm_ref r, p;

	add(t, 0, 0, "a", 900, 930, 1, true);
	key(t, &k, 0, 0, "a");
	shm_find(t, &k, 900, -1, &r, &p);
	cr_assert_neq(r.idx, SHM_NONE);
	cr_assert(!shm_grant_take(t, &r, 1), "no grant yet");
	cr_assert(!shm_grant_any(t, r.idx));
	shm_grant_add(t, &r, 2.5);
	EQ(shm_grant_left(t, r.idx), 2.5);
	cr_assert(shm_grant_take(t, &r, 1));
	cr_assert(shm_grant_take(t, &r, 1));
	cr_assert(!shm_grant_take(t, &r, 1), "0.5 left does not cover 1");
	cr_assert(shm_grant_take(t, &r, 0.5));
	EQ(shm_grant_left(t, r.idx), 0.0);
	shm_grant_note(t, &r, 3);          /* three more went to the store */
	cr_assert(shm_grant_any(t, r.idx));
	/* Asking: the first ask learns the last demand (none yet). */
	EQ(shm_grant_begin(t, r.idx), 0.0);
	EQ(shm_grant_begin(t, r.idx), -1.0); /* one ask at a time */
	/* A cycle: this cycle's demand (2.5 spent + 3 asked) becomes the
	 * last one, the ask stays in flight. */
	EQ(shm_grant_cycle(t, r.idx), 5.5);
	EQ(shm_grant_begin(t, r.idx), -1.0);
	shm_grant_end(t, r.idx);
	shm_grant_end(t, r.idx);           /* twice: harmless */
	EQ(shm_grant_begin(t, r.idx), 5.5);
	shm_grant_end(t, r.idx);
	EQ(shm_grant_cycle(t, r.idx), 0.0); /* no demand since */
	EQ(shm_grant_begin(t, r.idx), 0.0);
	shm_grant_end(t, r.idx);
	/* Admissions in flight. */
	cr_assert_eq(shm_grant_flight(t, r.idx, 1), 1);
	cr_assert_eq(shm_grant_flight(t, r.idx, 1), 2);
	cr_assert_eq(shm_grant_flight(t, r.idx, -1), 1);
	cr_assert_eq(shm_grant_flight(t, r.idx, -1), 0);
	/* A worker died with one in flight and asking: the master unsticks
	 * the table; the next admission asks again, and a live worker's
	 * admission ending afterwards does not go below 0. */
	cr_assert_eq(shm_grant_flight(t, r.idx, 1), 1);  /* the dead worker's */
	cr_assert_eq(shm_grant_flight(t, r.idx, 1), 2);  /* a live one's */
	EQ(shm_grant_begin(t, r.idx), 0.0);
	EQ(shm_grant_begin(t, r.idx), -1.0);
	shm_grant_unstick(t);
	cr_assert_eq(shm_grant_flight(t, r.idx, 1), 1, "alone in flight again");
	EQ(shm_grant_begin(t, r.idx), 0.0);
	shm_grant_end(t, r.idx);
	cr_assert_eq(shm_grant_flight(t, r.idx, -1), 0);
	cr_assert_eq(shm_grant_flight(t, r.idx, -1), 0, "the live one's end: not below 0");
	EQ(shm_grant_cycle(t, r.idx), 0.0);
	/* Taken back. */
	shm_grant_add(t, &r, 4);
	EQ(shm_grant_return(t, r.idx), 4.0);
	EQ(shm_grant_return(t, r.idx), 0.0);
	/* A slot holding a grant is re-keyed only once stale; then the new
	 * key starts with nothing. */
	shm_grant_add(t, &r, 7);
	shm_grant_note(t, &r, 1);
	{
		struct shm_entry e;

		cr_assert_eq(shm_read(t, r.idx, &e), 0);
		cr_assert_eq(shm_ack_diff(t, &e, e.diff), 0);
	}
	key(t, &k, 0, 0, "b");
	cr_assert_eq(shm_insert(t, &k, 1e6 - 40, 1e6, &p), SHM_INS_NEW);
	key(t, &k, 0, 0, "c");
	cr_assert_eq(shm_insert(t, &k, 1e6 - 40, 1e6, &p), SHM_INS_NEW);
	for (uint32_t i = 0; i < shm_nslots(t); i++) {
		EQ(shm_grant_left(t, i), 0.0);
		cr_assert(!shm_grant_any(t, i));
		EQ(shm_grant_begin(t, i), 0.0);
	}
	cr_assert(!shm_grant_take(t, &r, 1), "the old reference spends nothing");
	shm_destroy(t);
}

/* state_file: the table in a file. A second open finds the counts, the
 * seed and the namespace names; a file of another max_keys, or not ours,
 * is refused and left as it was; two at once are refused. */
Test(shm, state_file_keeps_counts)
{
	char dir[] = "/tmp/test_shm_state-XXXXXX", path[64], err[256] = "";
	struct shm_table *t, *t2;
	uint64_t seed;
	struct stat st;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/state", dir);
	t = shm_open_file(path, 16, err, sizeof(err));
	cr_assert_not_null(t, "%s", err);
	cr_assert_not(shm_reused(t));
	cr_assert_eq(shm_ns_claim(t, "api"), 0);
	cr_assert_eq(shm_ns_claim(t, "web"), 1);
	cr_assert_eq(shm_win_claim(t, 1, 60), 0);
	add(t, 1, 0, "k", 960, 1000, 3, true);
	seed = t->seed;
	/* Held: a second agent on the same file is refused. */
	cr_assert_null(shm_open_file(path, 16, err, sizeof(err)));
	cr_assert(strstr(err, "in use") != NULL, "%s", err);
	shm_destroy(t);

	t = shm_open_file(path, 16, err, sizeof(err));
	cr_assert_not_null(t, "%s", err);
	cr_assert(shm_reused(t));
	cr_assert_eq(t->seed, seed, "the hash seed is the file's");
	cr_assert_eq(shm_ns_claim(t, "web"), 1, "names keep their index");
	cr_assert_eq(shm_ns_claim(t, "new"), 2);
	cr_assert_eq(shm_win_claim(t, 1, 60), 0);
	cr_assert_eq(shm_win_claim(t, 1, 3600), 1);
	EQ(get(t, 1, 0, "k", 960), 3.0);
	shm_destroy(t);

	cr_assert_null(shm_open_file(path, 1000, err, sizeof(err)));
	cr_assert(strstr(err, "made for max_keys 16") != NULL, "%s", err);
	cr_assert_eq(stat(path, &st), 0);
	t2 = shm_open_file(path, 16, err, sizeof(err));
	cr_assert_not_null(t2, "refused, the file is left as it was: %s", err);
	EQ(get(t2, 1, 0, "k", 960), 3.0);
	shm_destroy(t2);

	FILE *f = fopen(path, "r+");
	cr_assert_not_null(f);
	fputs("garbage!", f);
	fclose(f);
	cr_assert_null(shm_open_file(path, 16, err, sizeof(err)));
	cr_assert(strstr(err, "not a spoa-ratelimit state file") != NULL, "%s", err);
	unlink(path);
	rmdir(dir);
}

/* A new directory for state files; path gets dir/name. */
static void state_dir(char *dir, char *path, size_t len, const char *name)
{
	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, len, "%s/%s", dir, name);
}

/* The size of the file at path (-1: none). */
static off_t file_size(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0 ? st.st_size : -1;
}

/* A symbolic link planted at the state file's path is refused, never
 * followed: not to an empty file (that would be sized and written), not to
 * a path that does not exist (that would be created), not even to a good
 * state file. */
Test(shm, state_file_symlink_is_refused)
{
	char dir[] = "/tmp/test_shm_state-XXXXXX", path[64], target[64], err[256] = "";
	struct shm_table *t;
	int fd;

	state_dir(dir, path, sizeof(path), "state");
	snprintf(target, sizeof(target), "%s/target", dir);
	fd = open(target, O_RDWR | O_CREAT, 0600);
	cr_assert_geq(fd, 0);
	close(fd);
	cr_assert_eq(symlink(target, path), 0);
	cr_assert_null(shm_open_file(path, 16, err, sizeof(err)), "a symlink was followed");
	cr_assert(strstr(err, "symbolic link") != NULL, "%s", err);
	cr_assert_eq(file_size(target), 0, "the file it points to was left alone");

	/* Pointing nowhere: nothing is created. */
	cr_assert_eq(unlink(target), 0);
	err[0] = '\0';
	cr_assert_null(shm_open_file(path, 16, err, sizeof(err)));
	cr_assert(strstr(err, "symbolic link") != NULL, "%s", err);
	cr_assert_eq(file_size(target), -1, "created where the link points");

	/* To a good state file: refused all the same. */
	t = shm_open_file(target, 16, err, sizeof(err));
	cr_assert_not_null(t, "%s", err);
	shm_destroy(t);
	cr_assert_null(shm_open_file(path, 16, err, sizeof(err)));
	cr_assert(strstr(err, "symbolic link") != NULL, "%s", err);

	/* Not a regular file: refused with the reason. */
	cr_assert_eq(unlink(path), 0);
	cr_assert_eq(mkfifo(path, 0600), 0);
	cr_assert_null(shm_open_file(path, 16, err, sizeof(err)));
	cr_assert(strstr(err, "not a regular file") != NULL, "%s", err);
	unlink(path);
	unlink(target);
	rmdir(dir);
}

/* A truncated state file (an interrupted copy, a full disk) is refused as
 * truncated, whether it lost the end of its slots or part of its header,
 * and left as it is; one longer than its table is mapped, and what follows
 * the table is the limit overrides' to check (agent/limits.c): bytes
 * that are not theirs are refused there, and left as they are. */
Test(shm, state_file_truncated_is_refused)
{
	char dir[] = "/tmp/test_shm_state-XXXXXX", path[64], err[256] = "";
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	struct shm_table *t;
	off_t full;

	state_dir(dir, path, sizeof(path), "state");
	t = shm_open_file(path, 16, err, sizeof(err));
	cr_assert_not_null(t, "%s", err);
	add(t, 0, 0, "k", 960, 1000, 3, false);
	shm_destroy(t);
	full = file_size(path);
	cr_assert_gt(full, (off_t)page);

	cr_assert_eq(truncate(path, full - (off_t)page), 0);
	cr_assert_null(shm_open_file(path, 16, err, sizeof(err)));
	cr_assert(strstr(err, "truncated") != NULL, "%s", err);
	cr_assert(strstr(err, "max_keys 16") != NULL, "%s", err);
	cr_assert_eq(file_size(path), full - (off_t)page, "left as it was");
	/* The same, whatever max_keys the configuration says now. */
	cr_assert_null(shm_open_file(path, 1000, err, sizeof(err)));
	cr_assert(strstr(err, "truncated") != NULL, "%s", err);

	cr_assert_eq(truncate(path, 100), 0);    /* the magic, part of the header */
	cr_assert_null(shm_open_file(path, 16, err, sizeof(err)));
	cr_assert(strstr(err, "truncated") != NULL, "%s", err);
	cr_assert_eq(file_size(path), 100);

	/* Longer than a table for its max_keys: a page of zeroes is no part
	 * of limit overrides. */
	cr_assert_eq(unlink(path), 0);
	t = shm_open_file(path, 16, err, sizeof(err));
	cr_assert_not_null(t, "%s", err);
	shm_destroy(t);
	cr_assert_eq(truncate(path, full + (off_t)page), 0);
	t = shm_open_file(path, 16, err, sizeof(err));
	cr_assert_not_null(t, "%s", err);
	size_t dropped;
	cr_assert_null(limits_open_file(shm_state_fd(t), shm_bytes(t), 16, &dropped, err,
					sizeof(err)));
	cr_assert(strstr(err, "damaged") != NULL, "%s", err);
	shm_destroy(t);
	cr_assert_eq(file_size(path), full + (off_t)page);
	unlink(path);
	rmdir(dir);
}

/* An agent killed with admissions in flight and a grant being asked left
 * both marks in its state file: the next one clears them (nobody is in
 * flight after a restart; else the key would never ask for a grant again
 * and every hit would go to the store), and keeps what the store counted:
 * the grant left (spent by hits, or given back by the first sync cycle it
 * sees unused) and the demand. */
Test(shm, state_file_reuse_clears_grant_marks)
{
	char dir[] = "/tmp/test_shm_state-XXXXXX", path[64], err[256] = "";
	struct shm_table *t;
	struct shm_key k;
	struct shm_ref r, p;

	state_dir(dir, path, sizeof(path), "state");
	t = shm_open_file(path, 16, err, sizeof(err));
	cr_assert_not_null(t, "%s", err);
	cr_assert_eq(shm_set_window(t, 0, 0, 60), 0);
	add(t, 0, 0, "k", 960, 1000, 1, false);
	key(t, &k, 0, 0, "k");
	shm_find(t, &k, 960, -1, &r, &p);
	cr_assert_neq(r.idx, SHM_NONE);
	shm_grant_add(t, &r, 5);
	shm_grant_note(t, &r, 2);
	EQ(shm_grant_cycle(t, r.idx), 2.0);   /* last cycle's demand: 2 */
	shm_grant_note(t, &r, 3);              /* this cycle's: 3 */
	cr_assert_eq(shm_grant_flight(t, r.idx, 1), 1);
	cr_assert_eq(shm_grant_flight(t, r.idx, 1), 2);
	EQ(shm_grant_begin(t, r.idx), 2.0);    /* asking */
	shm_destroy(t);                        /* as a kill leaves the file */

	t = shm_open_file(path, 16, err, sizeof(err));
	cr_assert_not_null(t, "%s", err);
	cr_assert(shm_reused(t));
	cr_assert_eq(shm_set_window(t, 0, 0, 60), 0);
	shm_find(t, &k, 960, -1, &r, &p);
	cr_assert_neq(r.idx, SHM_NONE);
	cr_assert_eq(shm_grant_flight(t, r.idx, 1), 1, "alone in flight");
	EQ(shm_grant_begin(t, r.idx), 2.0);    /* not asking: the last demand */
	shm_grant_end(t, r.idx);
	cr_assert_eq(shm_grant_flight(t, r.idx, -1), 0);
	EQ(shm_grant_left(t, r.idx), 5.0);     /* counted in the store: kept */
	EQ(shm_grant_cycle(t, r.idx), 3.0);    /* the demand: kept */
	shm_destroy(t);
	unlink(path);
	rmdir(dir);
}

/* The LIVE counts of a state file are counted again from its slots: a
 * process killed between a slot's CAS and the update of the counts left
 * them off by one, and the next run would have carried the error on (a
 * soak showed 20,001 entries in a table of 20,000). */
Test(shm, state_file_recounts_live_slots)
{
	char dir[] = "/tmp/test_shm_state-XXXXXX", path[64], err[256] = "";
	struct shm_ns_stats st;
	struct shm_table *t;
	struct shm_key k;
	struct shm_ref r, p;

	state_dir(dir, path, sizeof(path), "state");
	t = shm_open_file(path, 16, err, sizeof(err));
	cr_assert_not_null(t, "%s", err);
	cr_assert_eq(shm_set_window(t, 0, 0, 60), 0);
	cr_assert_eq(shm_set_window(t, 1, 0, 60), 0);
	add(t, 0, 0, "a", 960, 1000, 1, false);
	add(t, 0, 0, "b", 960, 1000, 1, false);
	add(t, 0, 0, "c", 960, 1000, 1, false);
	add(t, 1, 0, "x", 960, 1000, 1, false);
	add(t, 1, 0, "y", 960, 1000, 1, false);
	cr_assert_eq(shm_ns_stats(t, 0, &st), 0);
	cr_assert_eq(st.live, 3);
	/* Killed after claiming a LIVE slot to re-key it (LIVE -> BUSY),
	 * before counting it out: 3 counted, 2 LIVE. */
	key(t, &k, 0, 0, "c");
	shm_find(t, &k, 960, -1, &r, &p);
	cr_assert_neq(r.idx, SHM_NONE);
	atomic_store(&t->slots[r.idx].meta,
		     SHM_ST_BUSY << SHM_ST_SHIFT | (uint64_t)1000 << SHM_META_BUSY_TIME_SHIFT | 7);
	/* Killed after making a slot LIVE, before counting it in. */
	atomic_fetch_sub(&t->hdr->live[1], 1);
	atomic_fetch_sub(&t->hdr->live_total, 1);
	/* And any drift at all, in a namespace without a slot. */
	atomic_store(&t->hdr->live[5], 9);
	atomic_fetch_add(&t->hdr->live_total, 9);
	shm_destroy(t);

	t = shm_open_file(path, 16, err, sizeof(err));
	cr_assert_not_null(t, "%s", err);
	cr_assert(shm_reused(t));
	cr_assert_eq(shm_ns_stats(t, 0, &st), 0);
	cr_assert_eq(st.live, 2);
	cr_assert_eq(shm_ns_stats(t, 1, &st), 0);
	cr_assert_eq(st.live, 2);
	cr_assert_eq(shm_ns_stats(t, 5, &st), 0);
	cr_assert_eq(st.live, 0);
	cr_assert_eq(atomic_load(&t->hdr->live_total), 4);
	cr_assert_eq(live_slots(t), 4);
	shm_destroy(t);
	unlink(path);
	rmdir(dir);
}
