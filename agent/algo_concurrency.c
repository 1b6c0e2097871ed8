/*
 * algo_concurrency.c - a concurrency limit (agent/algo.h's "concurrency"):
 * `limit` requests in flight per key (docs/CONFIG.md, "algorithm"). A hit
 * acquires a lease, answered as an id (variable `lease`); a release
 * (rl_release: SPOP message `release`, POST /release, the nginx module's
 * log phase) gives it back; a lease never given back expires lease_ms
 * after its period's newest lease was taken, so a proxy that dies or a
 * release that is lost cannot keep a slot.
 *
 * What a slot holds. The slot's period P is lease_ms in seconds, rounded
 * up: a lease lives in the slot of the period it was taken in, and counts
 * while that slot is the current or the previous one. Its count is one
 * integer below 2^53 (exact in a double), moved by one compare-and-swap
 * (shm_cas_count):
 *
 *    52      44 43              22 21               0
 *   +----------+------------------+------------------+
 *   | newest:9 |  given back:22   |    taken:22      |
 *   +----------+------------------+------------------+
 *
 *   taken       leases taken in the period; the next one's number
 *   given back  of them, released or taken back
 *   newest      when the newest was taken: its offset in the period, in
 *               P / 511, rounded up
 *
 * The slot's leases are in flight, taken - given back of them, until
 * newest + lease_ms: a lease lives lease_ms after it was taken, and at
 * most P longer when leases of its period were taken after it (it expires
 * with the newest of its period). In flight = the current slot's and the
 * previous one's; a hit is admitted iff in flight + 1 <= limit. A slot two
 * periods old holds only expired leases, and the table takes it back.
 *
 * A lease id is 32 hex digits: the lease, (period start << 31) | (when it
 * was taken, as newest, << 22) | its number, and a MAC of it (conc_mac:
 * SipHash-1-3 under the table's digest key over the table's keyed hash of
 * the stored key, namespace and window, and the lease): a forged id
 * frees nothing. A release by id frees its lease once: it first inserts a
 * marker slot, the key "#L" + the MAC's hex (no client key is stored so:
 * agent/ratelimit.h, "stored keys") in the lease's period, which an
 * insert makes at most once (agent/shm.h, "Insert protocol"); the release
 * that found it there already frees nothing, and so does a release
 * lease_ms after the lease was taken (it expired). The marker holds 1 and is
 * protected from eviction; it is stale, and taken back, with its lease's
 * slot. A release without an id gives back one lease of the key (the
 * newest period's first): nothing tells two of them apart, and one sent
 * twice frees two (HAProxy always can send the id back: docs/PROTOCOL.md).
 *
 * Across a cluster (docs/CLUSTER.md, "Concurrency across a cluster"):
 * the store keeps the key's leases by id (algo_ops.step:
 * STRATEGY_STEP_LEASE, a Redis script, a PostgreSQL statement). Under
 * exact admission an acquire takes its lease here as on one node, but
 * without looking at the limit (a lease given back through another node
 * is not seen here), and the store decides it (need_store): the decision
 * gives the lease back here when the store denies it (agent/decide.c).
 * The slot so counts this node's own leases in flight, which is what its
 * share is checked against while the store is away (RL_ADMIT_DEGRADED):
 * max(floor(limit / nodes), 1).
 *
 * Known limits: a slot evicted for room forgets its leases (as the window
 * counter forgets its hits); at most 2^22 - 1 leases per key per period
 * (beyond: denied until the next period); a marker that cannot be
 * inserted (the table full) frees nothing: the lease expires instead.
 */
#include "agent/algo.h"

#include <math.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "agent/hash.h"
#include "agent/shm.h"
#include "agent/window.h"

#define CONC_BITS     22
#define CONC_MAX      ((1ULL << CONC_BITS) - 1)
#define CONC_TBITS    9
#define CONC_TMAX     511u
#define CONC_LEASE_START (CONC_BITS + CONC_TBITS) /* a lease: start:32 | at:9 | number:22 */
#define CONC_MARK     "#L"            /* a lease's marker key: "#L" + 16 hex */
#define CONC_MARK_LEN 18

_Static_assert(NS_CONC_LIMIT_MAX == CONC_MAX, "a limit fits the count of leases");
_Static_assert(2 * CONC_BITS + CONC_TBITS <= 53, "a slot's word is exact in a double");

/* One slot's word, unpacked. */
struct conc_word {
	uint64_t taken, back, newest;
};

static struct conc_word conc_unpack(double v)
{
	uint64_t w = v > 0 ? (uint64_t)v : 0;

	return (struct conc_word){ .taken = w & CONC_MAX, .back = (w >> CONC_BITS) & CONC_MAX,
				   .newest = w >> (2 * CONC_BITS) };
}

static double conc_pack(struct conc_word c)
{
	/* Below 2^53: converted as signed, which needs no test of the top bit. */
	return (double)(int64_t)(c.taken | c.back << CONC_BITS | c.newest << (2 * CONC_BITS));
}

static uint32_t conc_period(const struct ns_def *d, uint32_t size)
{
	(void)size;
	return (ns_lease_ms(d) + 999) / 1000;
}

static double conc_lease_s(const struct ns_def *d)
{
	return (double)ns_lease_ms(d) / 1000.0;
}

/* Until when the leases of a slot starting at start (period p) are in
 * flight: its newest lease's time + the lease time; -INFINITY when it has
 * none in flight. */
static double conc_until(struct conc_word c, int64_t start, uint32_t p, double lease)
{
	if (c.taken <= c.back)
		return -INFINITY;
	return (double)start + (double)c.newest * (double)p / CONC_TMAX + lease;
}

/* The leases of the slot in flight at now. */
static double conc_live(struct conc_word c, int64_t start, uint32_t p, double lease, double now)
{
	return now < conc_until(c, start, p, lease) ? (double)(int64_t)(c.taken - c.back) : 0;
}

/*
 * The MAC of a lease of key k: who holds an id holds its lease.
 *
 *   MAC = SipHash-1-3(digest key, k->hash || lease)   (two words)
 *
 * k->hash is the table's keyed hash of the key's bytes, length, namespace
 * and window (shm_key_init, the slot lookup's: computed anyway), under the
 * table's random 64-bit seed, which never leaves the node (no answer, no
 * store, no log shows it or the hash); the digest key is secret too (16
 * random bytes per table, or key_secret's). Why that suffices:
 * - a forged id: SipHash is a PRF under a key the client does not know;
 *   guessing a lease's 64-bit MAC succeeds once in 2^64 tries;
 * - an id of another key, namespace or window (a client's own lease sent
 *   back with someone else's key): frees the same-numbered lease of the
 *   other key only if the two hashes are equal. The table hash is not
 *   collision resistant against one who knows the seed, but nobody does
 *   and it is never shown, not even through the ids (PRF outputs): a
 *   client can only try keys blind, each matching a given one with a
 *   chance about 2^-64, and then still needs the same period, time and
 *   number;
 * - unique per node: the seed is the table's own, so two nodes' hashes of
 *   a key, and so their ids, differ (the store keeps every node's leases
 *   of a key by id), though the digest key is the cluster's;
 * - SipHash-1-3 rather than 2-4 (hash.h): one round a word and three to
 *   finish, the variant hash tables use against chosen input; no attack on
 *   it as a PRF is published, and the input here is two fixed words of
 *   which the client chooses none directly.
 */
static uint64_t conc_mac(const struct shm_table *t, const struct shm_key *k, uint64_t lease)
{
	const uint64_t w[2] = { k->hash, lease };

	return hash_siphash13_words(shm_digest_key(t), w, 2);
}

/* The 8 lowercase hex digits of v, most significant first, as the bytes
 * of the word returned in memory order: each nibble spread into a byte,
 * then '0' + n, or 'a' + n - 10 where n > 9, in all 8 bytes at once. */
static uint64_t conc_hex8(uint32_t v)
{
	uint64_t x = v;

	x = (x | x << 16) & 0x0000ffff0000ffffULL;
	x = (x | x << 8) & 0x00ff00ff00ff00ffULL;
	x = (x | x << 4) & 0x0f0f0f0f0f0f0f0fULL;   /* byte i: nibble i */
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	x = __builtin_bswap64(x);                  /* nibble 7 first in memory */
#endif
	uint64_t letter = ((x + 0x0606060606060606ULL) >> 4) & 0x0101010101010101ULL;
	return x + 0x3030303030303030ULL + letter * ('a' - '0' - 10);
}

/* 16 lowercase hex digits of v at out (snprintf costs more than a hit). */
static void conc_put_hex64(uint64_t v, char *out)
{
	uint64_t hi = conc_hex8((uint32_t)(v >> 32)), lo = conc_hex8((uint32_t)v);

	memcpy(out, &hi, 8);
	memcpy(out + 8, &lo, 8);
}

#ifdef __SSE2__
/* The digits of 16 nibbles (bytes 0..15) as their ASCII. */
static inline __m128i conc_hex_ascii(__m128i d)
{
	__m128i letter = _mm_and_si128(_mm_cmpgt_epi8(d, _mm_set1_epi8(9)),
				       _mm_set1_epi8('a' - '0' - 10));

	return _mm_add_epi8(_mm_add_epi8(d, _mm_set1_epi8('0')), letter);
}
#endif

/* On every acquire's answer: the 32 digits at once where SSE2 is (every
 * x86-64), 8 at a time elsewhere. */
size_t algo_lease_text(uint64_t lease, uint64_t mac, char *out)
{
#ifdef __SSE2__
	/* Bytes 0..7 the lease's, 8..15 the MAC's, most significant first. */
	__m128i b = _mm_set_epi64x((long long)__builtin_bswap64(mac),
				   (long long)__builtin_bswap64(lease));
	__m128i m = _mm_set1_epi8(0x0f);
	__m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), m), lo = _mm_and_si128(b, m);

	_mm_storeu_si128((__m128i *)out, conc_hex_ascii(_mm_unpacklo_epi8(hi, lo)));
	_mm_storeu_si128((__m128i *)(out + 16), conc_hex_ascii(_mm_unpackhi_epi8(hi, lo)));
#else
	conc_put_hex64(lease, out);
	conc_put_hex64(mac, out + 16);
#endif
	out[ALGO_LEASE_LEN] = '\0';
	return ALGO_LEASE_LEN;
}

int64_t algo_lease_start(uint64_t lease)
{
	return (int64_t)(lease >> CONC_LEASE_START);
}
/* 16 hex digits (either case) at s. Returns 0 or -1. */
static int conc_hex64(const char *s, uint64_t *out)
{
	uint64_t v = 0;

	for (int i = 0; i < 16; i++) {
		char c = s[i];
		unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0')
			   : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
			   : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 16u;
		if (d > 15)
			return -1;
		v = v << 4 | d;
	}
	*out = v;
	return 0;
}

/* The slots of the key's period at now and the one before. */
static int64_t conc_find(const struct shm_table *t, const struct shm_key *k, uint32_t p,
			 double now, struct shm_ref *cur, struct shm_ref *prev, int64_t *pstart)
{
	int64_t start = window_start(now, p);

	*pstart = start >= (int64_t)p ? start - (int64_t)p : -1;
	shm_find(t, k, start, *pstart, cur, prev);
	return start;
}

/* An acquire (cost > 0: one lease, whatever the cost) or a read (cost 0).
 * Reported: current = leases in flight (after the hit; a denied one as if
 * it had been taken), previous = seconds until the oldest of them expires
 * (0: none), weight 0. */
static int conc_hit(const struct algo_hit *h, struct rl_result *out)
{
	struct shm_table *t = h->t;
	struct shm_ref cur, prev;
	uint32_t p = conc_period(h->def, h->size);
	double now = h->now, lease = conc_lease_s(h->def), inflight = 0, seen = 0;
	struct conc_word c = { 0 }, b = { 0 };
	int64_t start = 0, pstart = -1;
	/* The store decides (exact): no limit here. Away: the node's share. */
	bool exact = h->admit == RL_ADMIT_EXACT;
	double cap = exact ? INFINITY : h->limit;

	if (h->admit == RL_ADMIT_DEGRADED && h->nodes > 1 && h->limit >= 0)
		cap = fmax(floor(h->limit / h->nodes), 1);
	out->counted = out->inserted = out->evicted = false;
	out->granted = out->need_store = false;
	out->cap = exact ? h->limit : cap;
	out->lease = out->lease_mac = 0;
	start = conc_find(t, h->k, p, now, &cur, &prev, &pstart);
	for (;;) {
		seen = shm_read_count(t, &cur);
		c = conc_unpack(seen);
		b = conc_unpack(prev.idx == SHM_NONE ? 0 : shm_read_count(t, &prev));
		inflight = conc_live(c, start, p, lease, now) + conc_live(b, pstart, p, lease, now);
		if (h->cost == 0)
			break;
		if ((cap >= 0 && inflight + 1 > cap) || c.taken == CONC_MAX) {
			inflight += 1;  /* denied: as if taken */
			algo_protect(h, &cur, &prev);     /* its leases keep it so */
			break;
		}
		if (cur.idx == SHM_NONE) {
			if (algo_insert(h, start, &cur, out) < 0)
				return -1;
			/* From the slot insert found or made (a racing insert's
			 * or a new one, read again): no second lookup. */
			continue;
		}
		struct conc_word n = c;
		/* A period's leases all live until its newest one expires. */
		if (!(now < conc_until(c, start, p, lease)))
			n.back = n.taken;
		/* ceil() without its call: x >= 0 (now is in the period). */
		double x = (now - (double)start) * CONC_TMAX / (double)p;
		int64_t at = x > 0 ? (int64_t)x : 0;
		at += (double)at < x;
		at = at > CONC_TMAX ? CONC_TMAX : at;
		n.newest = (uint64_t)at > c.newest ? (uint64_t)at : c.newest;
		n.taken = c.taken + 1;
		if (shm_cas_count(t, &cur, &seen, conc_pack(n)) && shm_still(t, &cur)) {
			/* Exact: taken here, the store's to admit. */
			out->counted = !exact;
			out->need_store = exact;
			out->lease = (uint64_t)start << CONC_LEASE_START | (uint64_t)at << CONC_BITS |
				     c.taken;
			out->lease_mac = conc_mac(t, h->k, out->lease);
			c = n;
			inflight += 1;
			break;
		}
		/* Raced (another CAS, an eviction): the slots as they are now. */
		shm_find(t, h->k, start, pstart, &cur, &prev);
	}
	/* The oldest in flight: the previous period's, else this one's. */
	double until = conc_until(b, pstart, p, lease);
	if (!(now < until))
		until = conc_until(c, start, p, lease);
	out->cur_idx = cur.idx;
	out->prev_idx = prev.idx;
	out->current = inflight;
	out->previous = now < until ? until - now : 0;
	out->weight = 0;
	out->rate = inflight;
	out->start = start;
	out->size = h->size;
	return 0;
}

/* One lease of the slot given back, if it has one in flight: given back
 * <= taken always. Returns 1 or 0. */
static int conc_give_back(struct shm_table *t, const struct shm_ref *r)
{
	double seen = shm_read_count(t, r);

	for (;;) {
		struct conc_word c = conc_unpack(seen);
		if (c.back >= c.taken)
			return 0;
		c.back++;
		if (shm_cas_count(t, r, &seen, conc_pack(c)))
			return 1;
		if (!shm_still(t, r))
			return 0;
	}
}

/* A hit taken back (another limit of its decision denied it): its lease,
 * never answered, given back. */
static void conc_take_back(struct shm_table *t, const struct shm_ref *cur, const struct ns_def *d,
			   uint32_t size, double v, bool with_diff, bool granted)
{
	(void)d;
	(void)size;
	(void)with_diff;
	(void)granted;
	if (v > 0)
		conc_give_back(t, cur);
}

/* The lease and MAC of id[0..idlen), if k's lease by this table. Returns 0
 * or -1. */
static int conc_parse(const struct shm_table *t, const struct shm_key *k, const char *id,
		      size_t idlen, uint64_t *lid, uint64_t *mac)
{
	if (idlen != ALGO_LEASE_LEN || conc_hex64(id, lid) < 0 || conc_hex64(id + 16, mac) < 0 ||
	    conc_mac(t, k, *lid) != *mac)
		return -1;
	return 0;
}

bool algo_lease_ours(const struct shm_table *t, const struct shm_key *k, const char *id,
		     size_t idlen)
{
	uint64_t lid, mac;

	return conc_parse(t, k, id, idlen, &lid, &mac) == 0;
}

static int conc_release(struct shm_table *t, const struct shm_key *k, const struct ns_def *d,
			uint32_t size, const char *id, size_t idlen, double now)
{
	uint32_t p = conc_period(d, size);
	double lease = conc_lease_s(d);
	struct shm_ref cur, prev, mark;
	int64_t pstart, start = conc_find(t, k, p, now, &cur, &prev, &pstart);

	if (idlen == 0) {
		/* Any one of the key's leases in flight: the newest period's. */
		if (conc_live(conc_unpack(shm_read_count(t, &cur)), start, p, lease, now) > 0 &&
		    conc_give_back(t, &cur))
			return 1;
		return conc_live(conc_unpack(shm_read_count(t, &prev)), pstart, p, lease, now) > 0
		       ? conc_give_back(t, &prev) : 0;
	}
	uint64_t lid, mac;
	if (conc_parse(t, k, id, idlen, &lid, &mac) < 0)
		return 0;
	int64_t lstart = (int64_t)(lid >> CONC_LEASE_START);
	const struct shm_ref *r = lstart == start ? &cur : lstart == pstart ? &prev : NULL;
	if (!r || r->idx == SHM_NONE)
		return 0;       /* expired with its slot, or evicted */
	/* Expired: lease_ms after it was taken (its own time, rounded up). */
	struct conc_word c = conc_unpack(shm_read_count(t, r)),
			 own = { .taken = 1, .newest = (lid >> CONC_BITS) & CONC_TMAX };
	if ((lid & CONC_MAX) >= c.taken || !(now < conc_until(own, lstart, p, lease)))
		return 0;
	/* Once: the release that makes the lease's marker frees it. */
	char text[CONC_MARK_LEN];
	struct shm_key mk;
	memcpy(text, CONC_MARK, 2);
	conc_put_hex64(mac, text + 2);
	if (shm_key_init(t, &mk, k->ns, k->win, text, CONC_MARK_LEN) < 0 ||
	    shm_insert(t, &mk, lstart, now, &mark) != SHM_INS_NEW)
		return 0;
	shm_add(t, &mark, 1, false);
	shm_protect(t, &mark);
	return conc_give_back(t, r);
}

/* What the key holds at now: count and rate the leases in flight,
 * previous the seconds until the oldest expires, cap the limit. */
static void conc_inspect(const struct shm_table *t, const struct ns_def *d, uint32_t size,
			 int64_t start, double now, bool sliding, const struct shm_ref *cur,
			 const struct shm_ref *prev, struct rl_key_info *out)
{
	uint32_t p = conc_period(d, size);
	double lease = conc_lease_s(d);
	struct conc_word c = conc_unpack(shm_read_count(t, cur));
	struct conc_word b = conc_unpack(shm_read_count(t, prev));
	int64_t pstart = start - (int64_t)p;

	(void)sliding;
	out->size = size;
	out->start = start;
	out->cap = (double)ns_limit_of(d, size);
	out->count = conc_live(c, start, p, lease, now) + conc_live(b, pstart, p, lease, now);
	out->found = out->count > 0;
	out->rate = out->count;
	double until = conc_until(b, pstart, p, lease);
	if (!(now < until))
		until = conc_until(c, start, p, lease);
	out->previous = now < until ? until - now : 0;
	out->weight = 0;
}

/* rate: the leases in flight (after the hit); remaining: the leases the
 * key may still take; reset, and retry_after of a denied hit: when the
 * oldest lease in flight expires (a release may free one sooner); 1 when
 * none is. */
static void conc_answer(const struct algo_view *v, double now, struct algo_answer *a)
{
	(void)now;
	a->rate = algo_ceil(v->current);
	a->reset = algo_ceil(v->previous);
	if (a->reset < 1)
		a->reset = 1;
	if (!v->has_limit)
		return;
	a->exceeded = v->cost > 0 && !v->counted;
	double left = (double)v->limit - v->current;
	a->remaining = a->exceeded || !(left > 0) ? 0 : (int64_t)left;
	a->retry_after = a->exceeded ? a->reset : 0;
}

const struct algo_ops algo_concurrency = {
	.name = "concurrency",
	.step = ALGO_STEP_LEASE,
	.period = conc_period,
	.hit = conc_hit,
	.take_back = conc_take_back,
	.share_cap = NULL,      /* the share is the hit's (RL_ADMIT_DEGRADED) */
	.inspect = conc_inspect,
	.answer = conc_answer,
	.release = conc_release,
};
