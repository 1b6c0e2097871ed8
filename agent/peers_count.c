/*
 * peers_count.c - the nodes' states counted in the shared table
 * (agent/peers_count.h, docs/PEERS.md, "Counting"): what a state holds
 * beyond the node's record, as hits of the key's window; the records;
 * a key's windows read back; the walk over the peers namespaces' windows;
 * keys as text and back.
 */
#include "agent/peers_count.h"

#include <arpa/inet.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "agent/hash.h"
#include "agent/peers_wire.h"
#include "agent/ratelimit.h"
#include "agent/shm.h"
#include "agent/window.h"

_Static_assert(PEERS_COUNT_NS_MAX == SHM_MAX_NS, "a walk covers the table's namespaces");
_Static_assert(PEERS_COUNT_KEY_MAX == RL_STORED_KEY_MAX, "keys are counted as they are");

#define PEERS_REC_LEN   18      /* '#' '@' and 16 bytes of SipHash-128 */
#define PEERS_FRAC      1024.0  /* a record's count: events + (ms % 1000) / 1024 */

/* ------------------------------------------------------------------------
 * Records: a node's part of a key, in the table.
 */

/* The record key of (node, data type, element, key) into k, in the
 * namespace's window index. Returns 0 or -1 (no such window). */
static int peers_rec_key(struct rl *rl, const struct peers_what *w, const char *node, size_t nlen,
			 const char *key, size_t klen, struct shm_key *k)
{
	struct shm_table *t = rl_shm(rl);
	uint8_t in[64 + 3 + PEERS_COUNT_KEY_MAX], rk[PEERS_REC_LEN];
	unsigned win = rl_shm_win(rl, w->ns, w->window);
	size_t n = 0;

	if (win >= SHM_MAX_WIN || nlen > 64 || klen > PEERS_COUNT_KEY_MAX)
		return -1;
	memcpy(in, node, nlen);
	n = nlen;
	in[n++] = 0;
	in[n++] = (uint8_t)w->dt;
	in[n++] = (uint8_t)w->idx;
	memcpy(in + n, key, klen);
	n += klen;
	rk[0] = '#';
	rk[1] = '@';
	hash_siphash128(shm_digest_key(t), in, n, rk + 2);
	return shm_key_init(t, k, rl_shm_ns(rl, w->ns), win, rk, sizeof(rk));
}

/* A rate record: the period it counts (its start, ms) and its events. */
struct peers_rec {
	struct shm_ref ref;
	int64_t start_ms;
	double events;
};

/* The record start (seconds) of a period beginning at ms. */
static int64_t peers_rec_start(int64_t ms)
{
	return ms / 1000 + 1;
}

/* Decodes the record slot r found at start. */
static void peers_rec_read(const struct shm_table *t, const struct shm_ref *r, int64_t start,
			   struct peers_rec *out)
{
	double c = shm_read_count(t, r), ev = floor(c);

	out->ref = *r;
	out->events = ev;
	out->start_ms = (start - 1) * 1000 + (int64_t)llround((c - ev) * PEERS_FRAC);
}

/* Keeps r (a record found at start) as cur or prev when it is of the node
 * period beginning at ms or at ms - period (within half a period: two
 * periods of a key are a whole period apart), the nearer one when two
 * are (a start once estimated more than a second off). */
static void peers_rec_keep(const struct shm_table *t, const struct shm_ref *r, int64_t start,
			   int64_t ms, int64_t period, struct peers_rec *cur, struct peers_rec *prev)
{
	struct peers_rec rec;

	if (r->idx == SHM_NONE)
		return;
	peers_rec_read(t, r, start, &rec);
	int64_t dc = llabs(rec.start_ms - ms), dp = llabs(rec.start_ms - (ms - period));
	if (dc * 2 < period && (cur->ref.idx == SHM_NONE || dc < llabs(cur->start_ms - ms)))
		*cur = rec;
	else if (dp * 2 < period &&
		 (prev->ref.idx == SHM_NONE || dp < llabs(prev->start_ms - (ms - period))))
		*prev = rec;
}

#define PEERS_REC_SLACK 2       /* seconds either side a period's record is looked for */

/* The records of the node periods beginning at ms (cur) and ms - period
 * (prev); not found: ref.idx SHM_NONE. A period's start is estimated as
 * the time of receipt minus the age, late by the transit (and whatever
 * queued the message): its record is where its first update put it, a
 * second or two either side. Most updates find it in one scan of the two
 * seconds at and before the estimate, and need nothing more: the period
 * before was counted with the record's first update (prev is frozen once
 * a period ends). The first update of a period looks further, and for
 * the period before. */
static void peers_rec_find(const struct shm_table *t, const struct shm_key *k, int64_t ms,
			   int64_t period, struct peers_rec *cur, struct peers_rec *prev)
{
	int64_t sc = peers_rec_start(ms), sp = peers_rec_start(ms - period);
	int64_t starts[4 * PEERS_REC_SLACK + 2];
	size_t n = 0;
	struct shm_ref a, b;

	cur->ref.idx = prev->ref.idx = SHM_NONE;
	shm_find(t, k, sc, sc - 1, &a, &b);
	peers_rec_keep(t, &a, sc, ms, period, cur, prev);
	peers_rec_keep(t, &b, sc - 1, ms, period, cur, prev);
	if (cur->ref.idx != SHM_NONE)
		return;
	for (int64_t s = sc - PEERS_REC_SLACK; s <= sc + PEERS_REC_SLACK; s++)
		if (s != sc && s != sc - 1)
			starts[n++] = s;
	for (int64_t s = sp - PEERS_REC_SLACK; s <= sp + PEERS_REC_SLACK; s++)
		if (s < sc - PEERS_REC_SLACK || s > sc + PEERS_REC_SLACK)
			starts[n++] = s;
	for (size_t i = 0; i < n; i += 2) {
		shm_find(t, k, starts[i], i + 1 < n ? starts[i + 1] : -1, &a, &b);
		peers_rec_keep(t, &a, starts[i], ms, period, cur, prev);
		if (i + 1 < n)
			peers_rec_keep(t, &b, starts[i + 1], ms, period, cur, prev);
	}
}

/* Makes the record of the period beginning at ms hold `events`: the one
 * found (r), or a new slot. Returns 0 or -1 (no room). */
static int peers_rec_set(struct shm_table *t, const struct shm_key *k, struct peers_rec *r,
			 int64_t ms, double events, double now)
{
	if (r->ref.idx == SHM_NONE) {
		int64_t start = peers_rec_start(ms);
		if (shm_insert(t, k, start, now, &r->ref) < 0)
			return -1;
		shm_protect(t, &r->ref);
		/* Set, not added: a racing insert of the same record (a node's
		 * two sessions for a moment) may have put its value there. */
		double want = events + (double)(ms % 1000) / PEERS_FRAC;
		shm_add(t, &r->ref, want - shm_read_count(t, &r->ref), false);
		return 0;
	}
	if (events != r->events)
		shm_add(t, &r->ref, events - r->events, false);
	return 0;
}

/* ------------------------------------------------------------------------
 * Counting.
 */

/* Adds v hits to the key's window (as rl_hit counts a hit without a
 * limit); *start gets the window's, out->made its slot when the hits
 * made it. Returns 0 or -1 (no room). */
static int peers_hit(struct rl *rl, const struct peers_what *w, const char *key, size_t klen,
		     double v, double now, int64_t *start, struct peers_count_res *out)
{
	struct rl_result r;

	if (v <= 0)
		return 0;
	if (rl_hit(rl, w->ns, key, klen, w->window, v, RL_WEIGHT_AUTO, now, -1, true, &r) < 0 ||
	    !r.counted)
		return -1;
	*start = r.start;
	if (r.inserted)
		out->made = r.cur_idx;
	return 0;
}

/* Takes back v hits peers_hit() counted in window start (a record that
 * found no room). */
static void peers_unhit(struct rl *rl, const struct peers_what *w, const char *key, size_t klen,
			double v, int64_t start)
{
	if (v > 0)
		rl_uncount(rl, w->ns, key, klen, w->window, start, v, rl_sync_rate(rl, w->ns) > 0,
			   false);
}

/* A frequency counter: the node's current period (curr events, started
 * age ms ago) and the one before (prev events). What the node's reading
 * still weighs is counted: curr while age < 2P, prev while age < P, each
 * beyond what its period's record holds. */
static int peers_count_rate(struct rl *rl, const struct peers_what *w, const struct shm_key *k,
			    const char *key, size_t klen, const struct peers_state *st,
			    double now, struct peers_count_res *out)
{
	struct shm_table *t = rl_shm(rl);
	int64_t period = (int64_t)w->window * 1000;
	int64_t age = (int64_t)(uint32_t)st->age;           /* a 32-bit difference */
	double c = (double)(uint32_t)st->curr, p = (double)(uint32_t)st->prev;
	struct peers_rec cur, prev;
	int64_t ms, start = 0;

	if (age >= 2 * period) {
		out->stale = true;
		return 0;
	}
	ms = (int64_t)floor(now * 1000) - age;
	peers_rec_find(t, k, ms, period, &cur, &prev);
	bool has_cur = cur.ref.idx != SHM_NONE, has_prev = prev.ref.idx != SHM_NONE;
	double dc = c, dp = 0;
	out->fresh = !has_cur && !has_prev;
	if (out->fresh && st->known_only) {
		out->refused = true;
		return 0;
	}
	if (has_cur && c >= cur.events)
		dc = c - cur.events;
	else if (has_cur)
		out->reset = true;                  /* fewer than counted: it counts afresh */
	/* The period before: with the first update of this one only (then
	 * frozen), while it still weighs on the node's reading. */
	bool prev_weighs = !has_cur && age < period && p > 0;
	if (prev_weighs)
		dp = has_prev ? (p > prev.events ? p - prev.events : 0) : p;
	if (out->fresh && st->baseline) {
		/* Counted already, by the agent this one replaces: the records
		 * only, from which what comes next counts. */
		if ((c > 0 && peers_rec_set(t, k, &cur, ms, c, now) < 0) ||
		    (dp > 0 && peers_rec_set(t, k, &prev, ms - period, p, now) < 0))
			return -1;
		return 0;
	}
	if (peers_hit(rl, w, key, klen, dc + dp, now, &start, out) < 0)
		return -1;
	if (((has_cur || c > 0) && peers_rec_set(t, k, &cur, ms, c, now) < 0) ||
	    (dp > 0 && peers_rec_set(t, k, &prev, ms - period, p, now) < 0)) {
		peers_unhit(rl, w, key, klen, dc + dp, start);
		return -1;
	}
	out->counted = dc + dp;
	return 0;
}

/* The bucket of a counter's record at now: never a window's start (the
 * sync leaves it alone), one window long. */
static int64_t peers_bucket(double now, uint32_t window)
{
	return window_start(now, window) + 1;
}

/* A counter: its value beyond the record's (all of it when there is none,
 * or when it went down: the node counts afresh). The record moves to the
 * current bucket: it lives a window or two after the last update, as
 * long as the node's entry when the table's expire is at most the window
 * (the front checks it). */
static int peers_count_counter(struct rl *rl, const struct peers_what *w, const struct shm_key *k,
			       const char *key, size_t klen, const struct peers_state *st,
			       double now, struct peers_count_res *out)
{
	struct shm_table *t = rl_shm(rl);
	int64_t b = peers_bucket(now, w->window), start = 0;
	double v = (double)st->value, had = 0, d;
	struct shm_ref cur, old;

	shm_find(t, k, b, b - (int64_t)w->window, &cur, &old);
	if (cur.idx != SHM_NONE)
		had = shm_read_count(t, &cur);
	else if (old.idx != SHM_NONE)
		had = shm_read_count(t, &old);
	bool known = cur.idx != SHM_NONE || old.idx != SHM_NONE;
	out->fresh = !known;
	if (out->fresh && st->known_only) {
		out->refused = true;
		return 0;
	}
	d = known && v >= had ? v - had : v;
	out->reset = known && v < had;
	if (out->fresh && st->baseline)
		d = 0;                              /* counted already: the record only */
	if (peers_hit(rl, w, key, klen, d, now, &start, out) < 0)
		return -1;
	if (cur.idx == SHM_NONE) {
		if (shm_insert(t, k, b, now, &cur) < 0) {
			peers_unhit(rl, w, key, klen, d, start);
			return -1;
		}
		shm_protect(t, &cur);
	}
	shm_add(t, &cur, v - shm_read_count(t, &cur), false);
	out->counted = d;
	return 0;
}

int peers_count(struct rl *rl, const struct peers_what *w, const char *node, size_t nlen,
		const char *key, size_t klen, const struct peers_state *st, double now,
		struct peers_count_res *out)
{
	struct shm_key k;

	memset(out, 0, sizeof(*out));
	out->made = UINT32_MAX;
	if (w->window == 0 || peers_rec_key(rl, w, node, nlen, key, klen, &k) < 0)
		return -1;
	return w->rate ? peers_count_rate(rl, w, &k, key, klen, st, now, out)
		       : peers_count_counter(rl, w, &k, key, klen, st, now, out);
}

/* ------------------------------------------------------------------------
 * Reading back.
 */

int peers_count_sum(struct rl *rl, const struct peers_what *w, const char *key, size_t klen,
		    double now, struct peers_sum *out)
{
	struct rl_key_info info;

	if (rl_inspect(rl, w->ns, key, klen, w->window, now, true, &info) < 0)
		return -1;
	out->cur = info.count - info.grant;
	out->prev = info.previous;
	out->start = info.start;
	double e = (now - (double)info.start) * 1000.0;
	out->elapsed = e <= 0 ? 0 : e >= (double)w->window * 1000 ? w->window * 1000 - 1
								    : (uint32_t)e;
	return 0;
}

void peers_count_scan(struct rl *rl, uint64_t nsmask, const uint32_t *windows, double now,
		      struct peers_scan *sc)
{
	memset(sc, 0, sizeof(*sc));
	for (int i = 0; i < PEERS_COUNT_NS_MAX; i++)
		sc->ns_of[i] = -1;
	for (size_t ns = 0; ns < rl_namespace_count(rl) && ns < 64; ns++) {
		unsigned sid = rl_shm_ns(rl, (int)ns), win;
		if (!(nsmask & (UINT64_C(1) << ns)) || sid >= SHM_MAX_NS ||
		    (win = rl_shm_win(rl, (int)ns, windows[ns])) >= SHM_MAX_WIN)
			continue;
		sc->sids |= 1u << sid;
		sc->ns_of[sid] = (int)ns;
		sc->win_of[sid] = win;
		sc->size[sid] = windows[ns];
		sc->cur[sid] = window_start(now, windows[ns]);
	}
}

int peers_count_next(struct rl *rl, struct peers_scan *sc, struct peers_slot *out)
{
	const struct shm_table *t = rl_shm(rl);
	struct shm_entry e;

	for (uint32_t idx = shm_next_used(t, sc->next); idx != SHM_NONE;
	     idx = shm_next_used(t, idx + 1)) {
		uint64_t m = atomic_load_explicit(&t->slots[idx].meta, memory_order_relaxed);
		unsigned sid = shm_meta_ns(m);
		if (shm_meta_state(m) != SHM_ST_LIVE || !(sc->sids & (1u << sid)) ||
		    shm_meta_win(m) != sc->win_of[sid])
			continue;
		int64_t start = shm_meta_start(m);
		if (start != sc->cur[sid] && start != sc->cur[sid] - (int64_t)sc->size[sid])
			continue;
		if (shm_read(t, idx, &e) < 0 || (e.keylen >= 2 && e.key[0] == '#' && e.key[1] == '@'))
			continue;
		sc->next = idx + 1;
		out->idx = idx;
		out->meta = e.meta;
		out->ns = sc->ns_of[sid];
		out->start = e.start;
		out->count = e.count;
		out->klen = e.keylen;
		memcpy(out->key, e.key, e.keylen);
		out->key[e.keylen] = '\0';
		return 0;
	}
	sc->next = shm_nslots(t);
	return -1;
}

/* ------------------------------------------------------------------------
 * Keys as text.
 */

static size_t peers_put_u32(char *out, uint32_t v)
{
	char tmp[10];
	size_t n = 0, i;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	for (i = 0; i < n; i++)
		out[i] = tmp[n - 1 - i];
	return n;
}

size_t peers_count_key(unsigned kt, const uint8_t *p, size_t len, char *out)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = 0;

	switch (kt) {
	case PEERS_WIRE_KEY_IPV4:
		if (len != 4)
			return 0;
		for (int i = 0; i < 4; i++) {
			if (i)
				out[n++] = '.';
			n += peers_put_u32(out + n, p[i]);
		}
		return n;
	case PEERS_WIRE_KEY_IPV6: {
		char buf[INET6_ADDRSTRLEN];
		if (len != 16 || !inet_ntop(AF_INET6, p, buf, sizeof(buf)))
			return 0;
		n = strlen(buf);
		memcpy(out, buf, n);
		return n;
	}
	case PEERS_WIRE_KEY_INTEGER:
		if (len != 4)
			return 0;
		return peers_put_u32(out, (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
					  (uint32_t)p[2] << 8 | p[3]);
	case PEERS_WIRE_KEY_STRING:
		if (len > 0 && (p[0] == '#' || p[0] == '\\'))
			out[n++] = '\\';
		if (len == 0 || n + len > PEERS_COUNT_KEY_MAX)
			return 0;
		memcpy(out + n, p, len);
		return n + len;
	case PEERS_WIRE_KEY_BINARY:
		if (len == 0 || 2 * len > PEERS_COUNT_KEY_MAX)
			return 0;
		for (size_t i = 0; i < len; i++) {
			out[n++] = hex[p[i] >> 4];
			out[n++] = hex[p[i] & 15];
		}
		return n;
	}
	return 0;
}

/* text[0..n) as an address of family af into out (4 or 16 bytes). */
static bool peers_parse_addr(int af, const char *text, size_t n, uint8_t *out)
{
	char buf[INET6_ADDRSTRLEN];

	if (n == 0 || n >= sizeof(buf))
		return false;
	memcpy(buf, text, n);
	buf[n] = '\0';
	return inet_pton(af, buf, out) == 1;
}

static int peers_hex(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

size_t peers_count_key_bytes(unsigned kt, uint32_t klen, const char *text, size_t tlen,
			     uint8_t *out, uint32_t *integer)
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	uint8_t a6[16];

	switch (kt) {
	case PEERS_WIRE_KEY_IPV4:
		if (peers_parse_addr(AF_INET, text, tlen, out))
			return 4;
		if (peers_parse_addr(AF_INET6, text, tlen, a6) && memcmp(a6, mapped, 12) == 0) {
			memcpy(out, a6 + 12, 4);
			return 4;
		}
		return 0;
	case PEERS_WIRE_KEY_IPV6:
		if (peers_parse_addr(AF_INET6, text, tlen, out))
			return 16;
		if (!peers_parse_addr(AF_INET, text, tlen, out + 12))
			return 0;
		memcpy(out, mapped, 12);
		return 16;
	case PEERS_WIRE_KEY_INTEGER: {
		uint64_t v = 0;
		if (tlen == 0 || tlen > 10 || (tlen > 1 && text[0] == '0'))
			return 0;
		for (size_t i = 0; i < tlen; i++) {
			if (text[i] < '0' || text[i] > '9')
				return 0;
			v = v * 10 + (uint64_t)(text[i] - '0');
		}
		if (v > UINT32_MAX)
			return 0;
		*integer = (uint32_t)v;
		out[0] = (uint8_t)(v >> 24);
		out[1] = (uint8_t)(v >> 16);
		out[2] = (uint8_t)(v >> 8);
		out[3] = (uint8_t)v;
		return 4;
	}
	case PEERS_WIRE_KEY_STRING:
		if (tlen > 0 && text[0] == '\\') {
			text++;
			tlen--;
		}
		if (tlen == 0 || tlen > PEERS_COUNT_KEY_MAX)
			return 0;
		memcpy(out, text, tlen);
		return tlen;
	case PEERS_WIRE_KEY_BINARY:
		if (tlen == 0 || tlen % 2 || tlen / 2 > klen)
			return 0;
		for (size_t i = 0; i < tlen / 2; i++) {
			int hi = peers_hex(text[2 * i]), lo = peers_hex(text[2 * i + 1]);
			if (hi < 0 || lo < 0)
				return 0;
			out[i] = (uint8_t)(hi << 4 | lo);
		}
		return tlen / 2;
	}
	return 0;
}
