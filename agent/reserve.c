/*
 * reserve.c - reservations, settles and charges (agent/reserve.h): the id
 * made and checked here, the counts moved by the library (rl_adjust,
 * rl_mark_once). Never on a plain hit's path.
 */
#include "agent/reserve.h"

#include <math.h>
#include <string.h>

#include "agent/metrics.h"
#include "agent/sync.h"
#include "agent/window.h"

#define RESERVE_VERSION 1
#define RESERVE_HEAD    17            /* version, ns, at, estimate, nw */
#define RESERVE_CLOCK_SLACK 30.0      /* seconds a reservation's time may be
                                         ahead of this node's clock (below
                                         the table's SHM_CLOCK_SLACK) */

static void put_be(uint8_t *p, uint64_t v, int n)
{
	for (int i = n - 1; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

static uint64_t get_be(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

/* The MAC of id[0..n) of namespace ns: over its bytes and the
 * namespace's name (an index that names another namespace since, after a
 * reload, matches nothing). */
static uint64_t reserve_mac(struct rl *rl, const uint8_t *id, size_t n, const char *name)
{
	uint8_t buf[RESERVE_BYTES_MAX + NS_NAME_MAX];
	size_t nl = strnlen(name, NS_NAME_MAX);

	memcpy(buf, id, n);
	memcpy(buf + n, name, nl);
	return rl_mac(rl, buf, n + nl);
}

/* Is part r one of the reservation of request req (RESERVE_PLAIN: of the
 * one that model, the decision's first reserved part, stands for)? */
static bool reserve_member(const struct rl_decision *r, size_t req,
			   const struct rl_decision *model)
{
	if (req != RESERVE_PLAIN)
		return r->req == req;
	return r->reserve && r->ns == model->ns && r->cost == model->cost &&
	       r->skeylen == model->skeylen && memcmp(r->skey, model->skey, r->skeylen) == 0;
}

size_t reserve_text(struct rl *rl, const struct rl_decision *parts, size_t np, size_t req,
		    char *out)
{
	static const char hex[] = "0123456789abcdef";
	uint8_t id[RESERVE_BYTES_MAX];
	const struct rl_decision *first = NULL;
	size_t nw = 0, o = RESERVE_HEAD;

	out[0] = '\0';
	for (size_t k = 0; req == RESERVE_PLAIN && !first && k < np; k++)
		if (parts[k].reserve && !parts[k].error)
			first = &parts[k];
	for (size_t k = 0; k < np && (req != RESERVE_PLAIN || first); k++) {
		const struct rl_decision *r = &parts[k];
		if (!reserve_member(r, req, first))
			continue;
		/* A request's parts stand together: one not counted (an
		 * error, a denial) or denied (counted where count_denied)
		 * holds no reservation: its request goes nowhere. */
		if (!r->reserve || !r->counted || r->exceeded || r->error || nw == NS_MAX_WINDOWS)
			return 0;
		if (!first)
			first = r;
		put_be(id + o, r->window, 4);
		put_be(id + o + 4, (uint64_t)window_start(r->reserved_at, r->window), 4);
		o += 8;
		nw++;
	}
	const struct ns_def *nsc = first ? rl_namespace_def(rl, first->ns) : NULL;
	if (!nsc)
		return 0;
	uint64_t bits;
	memcpy(&bits, &first->cost, sizeof(bits));
	id[0] = RESERVE_VERSION;
	id[1] = (uint8_t)first->ns;
	put_be(id + 2, (uint64_t)(first->reserved_at * 1000.0), 6);
	put_be(id + 8, bits, 8);
	id[16] = (uint8_t)nw;
	id[o++] = first->skeylen;
	memcpy(id + o, first->skey, first->skeylen);
	o += first->skeylen;
	put_be(id + o, reserve_mac(rl, id, o, nsc->name), 8);
	o += 8;
	for (size_t i = 0; i < o; i++) {
		out[2 * i] = hex[id[i] >> 4];
		out[2 * i + 1] = hex[id[i] & 0xf];
	}
	out[2 * o] = '\0';
	return 2 * o;
}

/* id[0..len) hex (either case) into out; returns the bytes, or 0. */
static size_t reserve_unhex(const char *id, size_t len, uint8_t *out)
{
	if (len % 2 || len > RESERVE_TEXT_MAX)
		return 0;
	for (size_t i = 0; i < len; i++) {
		char c = id[i];
		unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0')
			   : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
			   : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 16u;
		if (d > 15)
			return 0;
		out[i / 2] = (uint8_t)(i % 2 ? out[i / 2] << 4 | d : d);
	}
	return len / 2;
}

/* Does a namespace that syncs push what this node adds? */
static bool reserve_synced(const struct decide *d, const struct ns_def *nsc)
{
	return d->sync && nsc->sync_rate >= 0;
}

/* A settle of namespace ns counted in settles_total{result}. */
static void reserve_count(struct decide *d, int ns, enum metrics_settle result)
{
	unsigned sid = rl_shm_ns(d->rl, ns);

	if (sid < METRICS_NS)
		metrics_add(&metrics_me->settles[sid][result], 1);
}

/* A settle's reservation, read from its bytes. */
struct reserve_id {
	const uint8_t *b;             /* its bytes ... */
	size_t n;                     /* ... n of them */
	int ns;
	const struct ns_def *nsc;
	size_t nw, ko;                /* windows; where the key's length is */
	double at, estimate;
	uint64_t mac;
};

/* b[0..n) read as a reservation of this table (its MAC checked) into *r.
 * Returns false when it is none. */
static bool reserve_read(struct decide *d, const uint8_t *b, size_t n, struct reserve_id *r)
{
	if (n < RESERVE_HEAD + 8 + 1 + 8 || b[0] != RESERVE_VERSION)
		return false;
	size_t nw = b[16], ko = RESERVE_HEAD + 8 * nw;
	if (nw == 0 || nw > NS_MAX_WINDOWS || ko + 1 + 8 > n || ko + 1 + b[ko] + 8 != n)
		return false;
	const struct ns_def *nsc = rl_namespace_def(d->rl, b[1]);
	if (!nsc || nsc->algorithm != NS_ALGO_WINDOW ||
	    reserve_mac(d->rl, b, n - 8, nsc->name) != get_be(b + n - 8, 8))
		return false;
	uint64_t bits = get_be(b + 8, 8);
	*r = (struct reserve_id){ .b = b, .n = n, .ns = b[1], .nsc = nsc, .nw = nw, .ko = ko,
				  .at = (double)get_be(b + 2, 6) / 1000.0,
				  .mac = get_be(b + n - 8, 8) };
	memcpy(&r->estimate, &bits, sizeof(r->estimate));
	return true;
}

/* Window i of r: its size and start. */
static uint32_t reserve_window(const struct reserve_id *r, size_t i, int64_t *start)
{
	*start = (int64_t)get_be(r->b + RESERVE_HEAD + 8 * i + 4, 4);
	return (uint32_t)get_be(r->b + RESERVE_HEAD + 8 * i, 4);
}

/* The difference actual - estimate applied to each window of r the table
 * still keeps (one that counts for no rate is left alone). */
static void reserve_apply(struct decide *d, const struct reserve_id *r, double cost, bool synced,
			  double now)
{
	double diff = cost - r->estimate;

	for (size_t i = 0; diff != 0 && i < r->nw; i++) {
		int64_t start;
		uint32_t size = reserve_window(r, i, &start);
		if (now < (double)start + 2.0 * size)
			rl_adjust(d->rl, r->ns, (const char *)r->b + r->ko + 1, r->b[r->ko], size,
				  start, diff, synced, now);
	}
}

/* A settle's claim answered by the store (sync_settle_claim): data is the
 * reservation's bytes and the cost. The first claim applies it; another
 * node's took it already: nothing; the store silent: applied here. */
static void reserve_on_claim(void *arg, enum sync_claim result, const void *data, size_t len)
{
	struct decide *d = arg;
	struct reserve_id r;
	double cost;

	/* The namespace reloaded meanwhile (another name at its index): its
	 * MAC no longer matches, and nothing is done. */
	if (len < sizeof(cost) || !reserve_read(d, data, len - sizeof(cost), &r))
		return;
	memcpy(&cost, (const uint8_t *)data + len - sizeof(cost), sizeof(cost));
	reserve_count(d, r.ns, result == SYNC_CLAIM_TAKEN ? METRICS_SETTLE_DUPLICATE
			       : result == SYNC_CLAIM_FIRST ? METRICS_SETTLE_APPLIED
			       : METRICS_SETTLE_UNCONFIRMED);
	/* A claim is a namespace's that syncs (d->sync may be gone: a
	 * stopping sync calls back its claims left). */
	if (result != SYNC_CLAIM_TAKEN)
		reserve_apply(d, &r, cost, true, rl_now());
}

int reserve_settle(struct decide *d, const char *id, size_t len, double cost, double now,
		   const char **error)
{
	uint8_t b[RESERVE_BYTES_MAX + sizeof(double)];
	size_t n = reserve_unhex(id, len, b);
	struct reserve_id r;

	*error = NULL;
	if (!(cost >= 0 && cost <= DECIDE_COST_MAX)) {
		*error = "bad cost";
		return -1;
	}
	if (!reserve_read(d, b, n, &r))
		return 0;
	/* Marked once, until it may no longer be settled: settle_ms after
	 * it was counted, or once its largest window counts for no rate
	 * (two of its sizes after the hit: the table kept none of its
	 * windows then). */
	uint32_t msize = 0;
	for (size_t i = 0; i < r.nw; i++) {
		int64_t start;
		uint32_t size = reserve_window(&r, i, &start);
		msize = size > msize ? size : msize;
	}
	/* Counted later than now (another node's clock ahead) by more
	 * than a table's slack: its mark would be stale at once. */
	if (!(r.at <= now + RESERVE_CLOCK_SLACK))
		return 0;
	double until = r.at + ns_settle_ms(r.nsc) / 1000.0;
	if (until > r.at + 2.0 * msize)
		until = r.at + 2.0 * msize;
	if (!(now < until) ||
	    rl_mark_once(d->rl, r.ns, msize, (int64_t)ceil(until), r.mac, now) != 1) {
		reserve_count(d, r.ns, METRICS_SETTLE_IGNORED);
		return 0;
	}
	/* Across a cluster, once: the store's first claim applies it
	 * (docs/CLUSTER.md, "Reservations"); no store to claim it from (or
	 * no room to wait for one): this node's mark alone. */
	_Static_assert(RESERVE_BYTES_MAX + sizeof(double) <= SYNC_CLAIM_DATA_MAX,
		       "a claim's data holds a reservation and its cost");
	if (reserve_synced(d, r.nsc)) {
		char mark[RL_MARK_LEN];
		rl_mark_key(r.mac, mark);
		memcpy(b + n, &cost, sizeof(cost));
		if (sync_settle_claim(d->sync, (unsigned)r.ns, mark, sizeof(mark), until, b,
				      n + sizeof(cost), reserve_on_claim, d) == 0)
			return 1;
		reserve_count(d, r.ns, METRICS_SETTLE_UNCONFIRMED);
	} else {
		reserve_count(d, r.ns, METRICS_SETTLE_APPLIED);
	}
	reserve_apply(d, &r, cost, reserve_synced(d, r.nsc), now);
	return 1;
}

int reserve_charge(struct decide *d, const struct rl_request *rq, double now, const char **error)
{
	int ns = rl_namespace_index(d->rl, rq->ns ? rq->ns : "default", rq->ns ? rq->ns_len : 7);
	const struct ns_def *nsc = rl_namespace_def(d->rl, ns);
	uint32_t wins[NS_MAX_WINDOWS];
	size_t nw = 0;
	struct rl_skey sk;

	*error = rq->arg_error ? rq->arg_error : rq->key_error;
	if (!*error && !nsc)
		*error = "unknown namespace";
	if (!*error && nsc->algorithm != NS_ALGO_WINDOW)
		*error = "not a window namespace";
	if (!*error && (!rq->key || rq->key_len == 0))
		*error = "missing key";
	if (!*error && rq->window != 0 && ns_window_index(nsc, rq->window) < 0)
		*error = "bad window";
	if (*error)
		return -1;
	if (rq->window != 0)
		wins[nw++] = rq->window;
	for (size_t i = 0; rq->window == 0 && i < nsc->n_window_sizes; i++)
		if (ns_limit_of(nsc, nsc->window_sizes[i]) != NS_LIMIT_NONE)
			wins[nw++] = nsc->window_sizes[i];
	for (size_t i = 0; nw == 0 && i < nsc->n_window_sizes; i++)
		wins[i] = nsc->window_sizes[i];
	if (nw == 0)
		nw = nsc->n_window_sizes;
	rl_skey_make(d->rl, rq->key, rq->key_len, &sk);
	for (size_t i = 0; rq->cost > 0 && i < nw; i++)
		if (rl_adjust(d->rl, ns, rl_skey_bytes(&sk), sk.len, wins[i],
			      window_start(now, wins[i]), rq->cost, reserve_synced(d, nsc), now) < 0) {
			*error = rl_status_str(rl_errno(d->rl));
			return -1;
		}
	return 1;
}
