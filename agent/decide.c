/*
 * decide.c - requests in, decisions out (see decide.h). Calls only the
 * library (agent/ratelimit.h, agent/shm.h for the slots it answers from)
 * and the sync API; never a front.
 */
#include "agent/decide.h"
#include "agent/decide_int.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/log.h"
#include "agent/metrics.h"
#include "agent/sync.h"
#include "agent/topk.h"
#include "agent/window.h"

void decide_init(struct decide *d, struct rl *rl)
{
	memset(d, 0, sizeof(*d));
	d->rl = rl;
}

/* ---- one request ---- */

/* Computes the public part of a decision from what it was computed
 * from, as its algorithm answers (agent/algo.h). */
static void finish(struct rl_decision *r, double now)
{
	algo_of(r->algo)->answer(&r->view, now, &r->ans);
}

/* A new key found no room in its namespace's share, even by eviction:
 * on_table_full says whether the request passes (the hit is not counted)
 * or is denied. Logged at most once a second. */
static void table_full(struct decide *d, struct rl_decision *r, const struct ns_def *nsc,
		       int ns, double now)
{
	struct rl_ns_stats st = { 0 };

	d->full_events++;
	if (nsc->on_table_full == NS_FULL_DENY) {
		r->exceeded = true;
		r->retry_after = 1;
	}
	if (!log_limit(&d->full_log, now))
		return;
	rl_ns_stats(d->rl, ns, &st);
	LOG(LOG_WARN, "namespace \"%s\": no room for a new key (%lld entries, share %llu): "
	    "%s (%llu refused in all, %llu in this worker)%s", nsc->name, (long long)st.live,
	    (unsigned long long)st.share,
	    nsc->on_table_full == NS_FULL_DENY ? "denied" : "not counted, passed",
	    (unsigned long long)st.refused, (unsigned long long)d->full_events,
	    log_limit_suppressed(&d->full_log));
}

/* A new key evicted the least valuable entry of a full share. Logged at
 * most once a second. */
static void table_evicted(struct decide *d, int ns, double now)
{
	struct rl_ns_stats st = { 0 };

	if (!log_limit(&d->evict_log, now))
		return;
	rl_ns_stats(d->rl, ns, &st);
	LOG(LOG_INFO, "namespace \"%s\": table share full (%lld entries, share %llu): "
	    "evicting the least used (%llu evicted so far)%s", rl_namespace_def(d->rl, ns)->name,
	    (long long)st.live, (unsigned long long)st.share, (unsigned long long)st.evicted,
	    log_limit_suppressed(&d->evict_log));
}

/* The metrics of namespace ns are kept under its index in the shared
 * table, which a reload does not change (agent/metrics.h). */
static unsigned msid(const struct decide *d, int ns)
{
	return rl_shm_ns(d->rl, ns);
}

/* A decision is final (answered as it is): count what it says. A shadow
 * namespace never denies: what it would deny is answered allowed, with
 * shadow_exceeded. */
static void count_final(const struct decide *d, struct rl_decision *r)
{
	unsigned sid;

	if (!r->exceeded)
		return;
	sid = msid(d, r->ns);
	if (r->shadow) {
		r->exceeded = false;
		r->shadow_exceeded = true;
		r->retry_after = 0;
		if (sid < METRICS_NS)
			metrics_add(&metrics_me->shadow_exceeded[sid], 1);
		return;
	}
	if (sid < METRICS_NS)
		metrics_add(&metrics_me->exceeded[sid], 1);
}

static void decide_count(struct decide *d, const struct rl_request *rq, const struct rl_skey *sk,
			 struct rl_decision *r, double now);

/* ---- what a caller may ask (docs/CONFIG.md: caller_limit, max_cost) ---- */

/* Why rq may not be decided against window of namespace nsc as it asks,
 * or NULL: an untrusted caller names a limit where none is configured
 * (unless caller_limit "any"), or the cost is over ns_max_cost() of the
 * limit it is decided against. Fills *limit and *has with that limit,
 * from configured: the namespace's limit of the window, or the key's own
 * (PUT /limits: rl_limit_of), which a caller's may lower as caller_limit
 * says (NS_LIMIT_NONE: none). A text that names the namespace is
 * d->refusal's. */
static const char *refusal(struct decide *d, const struct ns_def *nsc,
			   const struct rl_request *rq, uint32_t window, int64_t configured,
			   int64_t *limit, bool *has)
{

	*has = ns_effective_limit(nsc, configured, rq->has_limit, rq->limit, limit);
	if (rq->has_limit && !ns_caller_may_limit(nsc, configured, !rq->untrusted)) {
		snprintf(d->refusal, sizeof(d->refusal), "namespace \"%s\" configures no limit for "
			 "window %u: an untrusted caller may not name one (unless its caller_limit "
			 "is \"any\")", nsc->name, window);
		return d->refusal;
	}
	double max = ns_max_cost(nsc, *has, *limit, !rq->untrusted);
	/* An estimate may take the whole limit: a budget's request may cost
	 * most of it (a max_cost configured still applies). */
	if (rq->reserve && nsc->max_cost == 0 && *has && max < (double)*limit)
		max = (double)*limit;
	if (rq->cost > max)
		return "cost over max_cost";
	return NULL;
}

static size_t batch_windows(const struct decide *d, const struct rl_request *rq,
			    uint32_t *wins);

/* Why the decision of rq[0..n) is refused whole, or NULL: the refusal()
 * of one of its (request, window) parts, checked before anything is
 * counted. Requests that fail for another reason (a bad argument, an
 * unknown namespace or window, no key) are left to decide_count. */
static const char *batch_refusal(struct decide *d, const struct rl_request *rq,
				 const struct rl_skey *sk, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t wins[NS_MAX_WINDOWS];
		size_t nw = batch_windows(d, &rq[i], wins);
		int ns = rl_namespace_index(d->rl, rq[i].ns, rq[i].ns_len);
		const struct ns_def *nsc = rl_namespace_def(d->rl, ns);
		int64_t limit;
		bool has;

		if (rq[i].arg_error || rq[i].key_error || !rq[i].key || rq[i].key_len == 0 || !nsc)
			continue;
		if (nw == 0) {
			wins[0] = rq[i].window ? rq[i].window : rl_single_window(d->rl, ns);
			if (wins[0] == 0 || ns_window_index(nsc, wins[0]) < 0)
				continue;
			nw = 1;
		}
		for (size_t k = 0; k < nw; k++) {
			int64_t configured = rl_limit_of(d->rl, ns, wins[k], &sk[i],
							 ns_limit_of(nsc, wins[k]));
			const char *why = refusal(d, nsc, &rq[i], wins[k], configured, &limit, &has);
			if (why)
				return why;
		}
	}
	return NULL;
}

/* decide_one on a request whose key's stored form is sk. */
static void decide_part(struct decide *d, const struct rl_request *rq, const struct rl_skey *sk,
			double now, struct rl_decision *r)
{
	decide_count(d, rq, sk, r, now);
	memcpy(r->label, rq->label, sizeof(r->label));
	r->answer = rq->answer;
	if (r->error) {
		metrics_add(&metrics_me->errors[r->refused ? METRICS_ERR_TABLE_FULL
							   : METRICS_ERR_BAD_REQUEST], 1);
		count_final(d, r);
		return;
	}
	unsigned sid = msid(d, r->ns);
	if (sid < METRICS_NS && rq->front >= 0 && rq->front < FRONT_COUNT)
		metrics_add(&metrics_me->hits[sid][rq->front], 1);
	/* Heavy hitters: one hit in top_sample is recorded, under its stored key. */
	unsigned due = rq->cost > 0 ? topk_due(d->topk, r->exceeded) : 0;
	if (__builtin_expect(due != 0, 0))
		topk_record(d->topk, sid, rl_shm_win(d->rl, r->ns, r->window),
			    window_start(now, r->window), rl_skey_bytes(sk), sk->len, rq->cost, due);
	if (!r->sync0)
		count_final(d, r);
}

void decide_one(struct decide *d, const struct rl_request *rq, double now,
		struct rl_decision *r)
{
	struct rl_skey sk;

	rl_skey_make(d->rl, rq->key, rq->key_len, &sk);
	decide_part(d, rq, &sk, now, r);
}

/* The namespace (*ns, *nsc) and window (*window) rq is decided in, and
 * its key, checked: false, with r->error, when it cannot be decided. */
/* Inlined into both callers: a call here would cost the hot path
 * (decide_count) as much as its work (docs/BENCHMARKS.md, "The
 * algorithms' seam"). */
static inline __attribute__((always_inline)) bool
decide_where(const struct decide *d, const struct rl_request *rq,
			 struct rl_decision *r, int *ns, const struct ns_def **nsc,
			 uint32_t *window)
{
	if (rq->arg_error) {
		r->error = rq->arg_error;
		return false;
	}
	/* No name: "default", by the index the library keeps for it. */
	*ns = rl_namespace_index(d->rl, rq->ns, rq->ns_len);
	if (*ns < 0) {
		r->error = "unknown namespace";
		return false;
	}
	*nsc = rl_namespace_def(d->rl, *ns);
	r->shadow = (*nsc)->shadow || rq->shadow;
	*window = rq->window;
	if (*window == 0) {
		*window = rl_single_window(d->rl, *ns);
		if (*window == 0) {
			r->error = "missing window";
			return false;
		}
	} else if (ns_window_index(*nsc, *window) < 0) {
		r->error = "bad window";
		return false;
	}
	if (rq->key_error)
		r->error = rq->key_error;
	else if (!rq->key)
		r->error = "missing key";
	else if (rq->key_len == 0)
		r->error = "empty key";
	return !r->error;
}

/* How a hit of rq in namespace ns, with a limit or not, is decided
 * (docs/CLUSTER.md). A read (cost 0) and a hit without a limit stay
 * local. While the store is away, on this node's share of what the
 * cluster had left ("While the store is away"): counted locally, pushed
 * once it is back. Under admission "exact" ("auto" is exact where the
 * store can decide), admitted here from the store's grant, denied here
 * when the node's view is already over the limit (it never overstates
 * the cluster's count), and decided by the store otherwise. */
static enum rl_admit decide_admit(const struct decide *d, const struct rl_request *rq,
				  const struct ns_def *nsc, int ns, bool has_limit)
{
	if (!d->sync || nsc->sync_rate < 0 || !has_limit || !(rq->cost > 0))
		return RL_ADMIT_LOCAL;
	if (sync_store_away(d->sync, (unsigned)ns))
		return RL_ADMIT_DEGRADED;
	int admission = rq->untrusted && !nsc->caller_admission ? DECIDE_ADMIT_DEFAULT
								: rq->admission;
	bool want = admission == DECIDE_ADMIT_DEFAULT ? nsc->admission != NS_ADMIT_LOCAL
						      : admission == DECIDE_ADMIT_EXACT;
	if (!want || nsc->sync_rate <= 0 || !sync_can_admit(d->sync, (unsigned)ns))
		return RL_ADMIT_LOCAL;
	/* A reservation's denial is the store's too: docs/CLUSTER.md,
	 * "Reservations". */
	return rq->reserve && nsc->algorithm == NS_ALGO_WINDOW ? RL_ADMIT_STORE : RL_ADMIT_EXACT;
}

/* The library could not count the hit: why, in r. */
static void decide_failed(struct decide *d, struct rl_decision *r, const struct ns_def *nsc,
			  int ns, double now)
{
	enum rl_status st = rl_errno(d->rl);

	r->error = rl_status_str(st);
	if (st == RL_ERR_FULL) {
		r->refused = true;
		table_full(d, r, nsc, ns, now);
	}
}

/* A reservation's hit, counted: what reserve_text needs kept (out of
 * line: the plain hit's path keeps no copy). */
static __attribute__((noinline)) void decide_reserved(struct rl_decision *r,
						      const struct rl_skey *sk, double now)
{
	r->reserve = true;
	r->reserved_at = now;
	memcpy(r->skey, rl_skey_bytes(sk), sk->len);
	r->skeylen = sk->len;
}

static void lease_add_to_store(struct decide *d, const struct rl_skey *sk,
			       const struct rl_decision *r, double now);

/* The hit res, decided as admit said, into r: the admissions counted,
 * what the decision waits for (the store's answer: sync_rate 0, or an
 * admission the store decides, with the stored key it is pushed under),
 * a first sight seeded. */
static void decide_record(struct decide *d, const struct rl_request *rq,
			  const struct rl_skey *sk, struct rl_decision *r,
			  const struct ns_def *nsc, int ns, enum rl_admit admit,
			  const struct rl_result *res, double now)
{
	bool away = admit == RL_ADMIT_DEGRADED;
	/* Admissions the store decides are counted when it answers. */
	bool exact = admit >= RL_ADMIT_EXACT && res->need_store;
	unsigned sid = admit != RL_ADMIT_LOCAL ? msid(d, ns) : METRICS_NS;

	if (admit >= RL_ADMIT_EXACT && !exact && sid < METRICS_NS)
		metrics_add(&metrics_me->admissions[sid][res->granted ? METRICS_ADM_GRANT
								       : METRICS_ADM_VIEW], 1);
	if (away && sid < METRICS_NS)
		metrics_add(&metrics_me->admissions[sid][res->granted ? METRICS_ADM_GRANT
								       : METRICS_ADM_DEGRADED], 1);
	r->degraded = away && !res->granted;
	r->cap = res->cap;
	if (res->evicted)
		table_evicted(d, ns, now);

	r->cost = rq->cost;
	r->counted = res->counted;
	r->granted = res->granted;
	r->current = res->current;
	r->previous = res->previous;
	r->weight = res->weight;
	r->cur_idx = res->cur_idx;
	r->prev_idx = res->prev_idx;
	r->lease = res->lease;
	r->lease_mac = res->lease_mac;
	r->count_denied = nsc->count_denied && !rq->reserve;
	r->admit0 = exact;
	r->sync0 = (nsc->sync_rate == 0 && d->sync && !away) || exact;
	/* Counted, or decided by the store (reserve_text reads the
	 * decision's final `counted`). */
	if (rq->reserve && nsc->algorithm == NS_ALGO_WINDOW)
		decide_reserved(r, sk, now);
	if (r->sync0) {
		memcpy(r->skey, rl_skey_bytes(sk), sk->len);
		r->skeylen = sk->len;
	}
	/* First sight of this key's window on this node: fetch what the
	 * cluster already counted, without waiting for it (an admission by
	 * the store brings it back anyway). */
	if (res->inserted && nsc->sync_rate > 0 && d->sync && !exact && !away)
		sync_seed(d->sync, (unsigned)ns, res->cur_idx);
	if (away && r->counted && r->algo == NS_ALGO_CONCURRENCY)
		lease_add_to_store(d, sk, r, now);
	finish(r, now);
}

/* One request (its key's stored form sk) into r: where it is decided,
 * its limit and cost allowed, the hit counted by the library as the
 * admission says, recorded. */
static void decide_count(struct decide *d, const struct rl_request *rq, const struct rl_skey *sk,
			 struct rl_decision *r, double now)
{
	const struct ns_def *nsc = NULL;
	uint32_t window = 0;
	int ns = -1;

	/* Everything but the label (the front's) and the stored key (set
	 * below when needed): no need to clear them for every request. */
	memset(r, 0, offsetof(struct rl_decision, label));
	r->has_limit = rq->has_limit;
	r->ns = -1;
	if (!decide_where(d, rq, r, &ns, &nsc, &window))
		return;
	bool sliding = rq->window_type == DECIDE_WT_DEFAULT ? nsc->window_type == NS_WINDOW_SLIDING
							    : rq->window_type == DECIDE_WT_SLIDING;
	/* The limit: the configuration's, lowered (or replaced) by the
	 * caller's as the namespace allows (caller_limit); the cost within
	 * max_cost. */
	int64_t limit = 0;
	r->error = refusal(d, nsc, rq, window,
			   rl_limit_of(d->rl, ns, window, sk, ns_limit_of(nsc, window)), &limit,
			   &r->has_limit);
	if (r->error)
		return;

	struct rl_result res;
	enum rl_admit admit = decide_admit(d, rq, nsc, ns, r->has_limit);
	int rc = rl_hit_skey(d->rl, ns, sk, window, rq->cost,
			     sliding ? window_weight(now, window) : 0.0, now,
			     r->has_limit ? (double)limit : -1.0,
			     nsc->count_denied && !rq->reserve, admit,
			     admit == RL_ADMIT_DEGRADED ? rl_active_nodes(d->rl, ns) : 0, &res);
	r->ns = ns;
	if (rc < 0) {
		decide_failed(d, r, nsc, ns, now);
		return;
	}
	r->window = window;
	r->limit = limit;
	r->sliding = sliding;
	r->algo = (uint8_t)nsc->algorithm;
	decide_record(d, rq, sk, r, nsc, ns, admit, &res, now);
}

/* The windows a request that names none is checked against: every
 * window of its namespace with a configured limit, when it has several
 * windows. 0: decide the request as it is. */
static size_t batch_windows(const struct decide *d, const struct rl_request *rq,
			    uint32_t *wins)
{
	size_t n = 0;

	if (rq->window != 0 || rq->arg_error)
		return 0;
	int ns = rl_namespace_index(d->rl, rq->ns ? rq->ns : "default", rq->ns ? rq->ns_len : 7);
	const struct ns_def *nsc = rl_namespace_def(d->rl, ns);
	if (!nsc || nsc->n_window_sizes < 2)
		return 0;
	for (size_t i = 0; i < nsc->n_window_sizes; i++)
		if (ns_limit_of(nsc, nsc->window_sizes[i]) != NS_LIMIT_NONE)
			wins[n++] = nsc->window_sizes[i];
	return n;
}

/* The stored key of decision r: its own (r->skey) once it has one, else
 * its request's sk. */
static const char *skey_of(const struct rl_decision *r, const struct rl_skey *sk, size_t *len)
{
	bool own = r->skeylen || !sk;

	*len = own ? r->skeylen : sk->len;
	return own ? r->skey : rl_skey_bytes(sk);
}

/* The lease of concurrency decision r given back: on this node (where
 * every lease it answered, or sent to the store, was taken), and, when
 * the store took it too (to_store: admitted there, or perhaps: an
 * acquire it never answered), to the store (sync_lease_release). */
static void lease_give_back(struct decide *d, const struct rl_skey *sk, struct rl_decision *r,
			    bool to_store, double now)
{
	size_t sl;
	const char *skey = skey_of(r, sk, &sl);
	char id[ALGO_LEASE_LEN + 1];

	rl_uncount(d->rl, r->ns, skey, sl, r->window, algo_lease_start(r->lease), 1, false, false);
	if (to_store && d->sync) {
		const struct ns_def *nsc = rl_namespace_def(d->rl, r->ns);
		sync_lease_release(d->sync, (unsigned)r->ns, skey, sl, id,
				   algo_lease_text(r->lease, r->lease_mac, id),
				   now + (double)ns_lease_ms(nsc) / 1000.0);
	}
}

/* A lease of concurrency decision r taken on this node's share while the
 * store was away: added to the store once it answers (sync_lease_add;
 * docs/CLUSTER.md, "Concurrency across a cluster"), so that the cluster
 * counts it until it is given back or expires. Out of line: rare. */
static __attribute__((noinline)) void lease_add_to_store(struct decide *d,
							  const struct rl_skey *sk,
							  const struct rl_decision *r, double now)
{
	const struct ns_def *nsc = rl_namespace_def(d->rl, r->ns);
	char id[ALGO_LEASE_LEN + 1];
	size_t sl;
	const char *skey = skey_of(r, sk, &sl);

	if (d->sync && nsc && nsc->sync_rate > 0)
		sync_lease_add(d->sync, (unsigned)r->ns, skey, sl, id,
			       algo_lease_text(r->lease, r->lease_mac, id),
			       now + (double)ns_lease_ms(nsc) / 1000.0);
}

/* A concurrency decision denied by another of its parts: its lease given
 * back, here and, if the store admitted it (or will: one taken while it
 * was away), there; one still waiting for the store is not sent. */
static void lease_take_back(struct decide *d, const struct rl_skey *sk, struct rl_decision *r,
			    double now)
{
	bool waiting = r->admit0 && !r->store_counted;

	if (r->counted || waiting)
		lease_give_back(d, sk, r, r->counted && (r->admit0 || r->degraded), now);
	r->counted = false;
	if (waiting)
		r->admit0 = r->sync0 = false;
}

/* A part of a denied decision that the namespace does not count denied
 * (count_denied false), or any part when all, is taken back; one waiting
 * for the store to admit it is not sent (the store never counts it); one
 * the store has counted already (a sync_rate 0 push, an admission), or
 * that waits for a push (degraded), gets a negative diff, pushed exactly
 * once with the next sync. sk: its request's stored key, or NULL when
 * the part carries it (r->skey). */
static void batch_take_back(struct decide *d, const struct rl_skey *sk, struct rl_decision *r,
			    double now, bool all)
{
	/* A lease of a denied decision is never answered: always given back. */
	if (r->error || (r->count_denied && !all && r->algo != NS_ALGO_CONCURRENCY))
		return;
	if (r->algo == NS_ALGO_CONCURRENCY) {
		lease_take_back(d, sk, r, now);
		return;
	}
	if (r->admit0 && !r->store_counted) {
		r->admit0 = false;
		r->sync0 = false;
		return;
	}
	if (!r->counted)
		return;
	const struct ns_def *nsc = rl_namespace_def(d->rl, r->ns);
	const char *skey = r->skeylen || !sk ? r->skey : rl_skey_bytes(sk);
	size_t sl = r->skeylen || !sk ? r->skeylen : sk->len;
	int64_t start = window_start(now, r->window);
	int rc = r->store_counted ? rl_unkeep(d->rl, r->ns, skey, sl, r->window, start, r->cost, now)
		 : rl_uncount(d->rl, r->ns, skey, sl, r->window, start, r->cost,
			      nsc->sync_rate > 0 || r->degraded, r->granted);
	if (rc == 0)
		r->counted = false;
}

size_t decide_parts(struct decide *d, const struct rl_request *rq, const struct rl_skey *sk,
		    size_t n, double now, struct rl_decision *parts, size_t maxparts)
{
	size_t np = 0;
	bool denied = false;

	/* The usual request: one message, one window, one part (nothing to
	 * take back or to key for the store across parts). */
	if (n == 1 && maxparts > 0 && (rq->window != 0 || rq->arg_error)) {
		decide_part(d, rq, sk, now, &parts[0]);
		parts[0].req = 0;
		return 1;
	}
	/* A part a caller may not ask for refuses the whole decision, before
	 * anything is counted: each request answers the reason. */
	const char *why = batch_refusal(d, rq, sk, n);
	for (size_t i = 0; why && i < n && np < maxparts; i++) {
		struct rl_request bad = rq[i];
		bad.arg_error = bad.arg_error ? bad.arg_error : why;
		decide_part(d, &bad, &sk[i], now, &parts[np]);
		parts[np++].req = (uint8_t)i;
	}
	for (size_t i = 0; !why && i < n && np < maxparts; i++) {
		uint32_t wins[NS_MAX_WINDOWS];
		size_t nw = batch_windows(d, &rq[i], wins);

		if (nw > 0 && np + nw + (n - i - 1) > maxparts) {
			struct rl_request bad = rq[i];
			bad.arg_error = "too many limits";
			decide_part(d, &bad, &sk[i], now, &parts[np]);
			parts[np++].req = (uint8_t)i;
			continue;
		}
		if (nw == 0) {
			decide_part(d, &rq[i], &sk[i], now, &parts[np]);
			parts[np++].req = (uint8_t)i;
			continue;
		}
		for (size_t k = 0; k < nw; k++) {
			struct rl_request part = rq[i];
			part.window = wins[k];
			decide_part(d, &part, &sk[i], now, &parts[np]);
			parts[np++].req = (uint8_t)i;
		}
	}
	for (size_t k = 0; k < np; k++)
		denied = denied || (parts[k].exceeded && !parts[k].sync0);
	if (denied && np > 1)
		decide_take_back(d, sk, parts, np, now, false);
	/* A decision that waits for its store may be denied by it: every
	 * part then carries its stored key, to be taken back without its
	 * request (pending_take_back). */
	if (np > 1 && decide_needs_store(parts, np))
		for (size_t k = 0; k < np; k++)
			if (!parts[k].error && parts[k].skeylen == 0) {
				const struct rl_skey *s = &sk[parts[k].req];
				memcpy(parts[k].skey, rl_skey_bytes(s), s->len);
				parts[k].skeylen = s->len;
			}
	return np;
}

size_t decide_batch(struct decide *d, const struct rl_request *rq, size_t n, double now,
		    struct rl_decision *parts, size_t maxparts)
{
	struct rl_skey sk[DECIDE_MAX_BATCH];

	n = n < DECIDE_MAX_BATCH ? n : DECIDE_MAX_BATCH;
	decide_keys(d, rq, n, sk);
	return decide_parts(d, rq, sk, n, now, parts, maxparts);
}

void decide_take_back(struct decide *d, const struct rl_skey *sk, struct rl_decision *parts,
		      size_t np, double now, bool all)
{
	for (size_t k = 0; k < np; k++)
		batch_take_back(d, &sk[parts[k].req], &parts[k], now, all);
}

bool decide_request_result(const struct rl_decision *parts, size_t np, size_t req,
			   struct rl_decision *out, const char **error)
{
	size_t first = np, count = 0;

	for (size_t k = 0; k < np; k++)
		if (parts[k].req == req) {
			if (first == np)
				first = k;
			count++;
		}
	if (first == np)
		return false;
	if (count == 1) {
		memcpy(out, &parts[first], offsetof(struct rl_decision, skey));
		*error = parts[first].error;
		return true;
	}
	/* Parts of one request are contiguous. */
	decide_fold(&parts[first], count, out, error);
	memcpy(out->label, parts[first].label, sizeof(out->label));
	out->answer = parts[first].answer;
	return true;
}

size_t decide_lease_text(const struct rl_decision *r, char *out)
{
	out[0] = '\0';
	if (r->error || !r->counted || r->algo != NS_ALGO_CONCURRENCY)
		return 0;
	return algo_lease_text(r->lease, r->lease_mac, out);
}

int decide_release(struct decide *d, const struct rl_request *rq, const char *id, size_t idlen,
		   double now, const char **error)
{
	struct rl_decision r = { .error = NULL };
	const struct ns_def *nsc = NULL;
	struct rl_skey sk;
	uint32_t window = 0;
	int ns = -1;

	*error = NULL;
	if (!decide_where(d, rq, &r, &ns, &nsc, &window)) {
		*error = r.error;
		return -1;
	}
	if (!algo_of(nsc->algorithm)->release) {
		*error = "not a concurrency namespace";
		return -1;
	}
	rl_skey_make(d->rl, rq->key, rq->key_len, &sk);
	int rc = rl_release(d->rl, ns, &sk, window, id, idlen, now);
	if (rc < 0) {
		*error = rl_status_str(rl_errno(d->rl));
		return rc;
	}
	/* With a store (docs/CLUSTER.md, "Concurrency across a cluster"): the
	 * store frees the lease, once, whichever node took it. A lease this
	 * node took and gave back already (or that expired here) is not sent
	 * again; one of another node is freed there (1: sent; the store
	 * frees an id it does not hold never). */
	if (nsc->sync_rate > 0 && d->sync && (rc == 1 || idlen == 0 ||
	    !rl_lease_ours(d->rl, ns, &sk, window, id, idlen))) {
		int sent = sync_lease_release(d->sync, (unsigned)ns, rl_skey_bytes(&sk), sk.len, id,
					      idlen, now + (double)ns_lease_ms(nsc) / 1000.0);
		if (rc == 0 && idlen == ALGO_LEASE_LEN && sent == 0)
			rc = 1;
	}
	return rc;
}

int decide_parse_admission(const char *s, size_t n)
{
	if (n == 5 && memcmp(s, "local", 5) == 0)
		return DECIDE_ADMIT_LOCAL;
	if (n == 5 && memcmp(s, "exact", 5) == 0)
		return DECIDE_ADMIT_EXACT;
	return -1;
}

bool decide_parse_uint(const char *s, size_t n, uint64_t *out)
{
	uint64_t v = 0;

	if (n == 0 || n > 19)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*out = v;
	return true;
}

bool decide_parse_cost(const char *s, size_t n, double *out)
{
	char buf[32];
	bool digit = false, dot = false;

	if (n == 0 || n >= sizeof(buf))
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (c >= '0' && c <= '9')
			digit = true;
		else if (c == '.' && !dot)
			dot = true;
		else
			return false;
		buf[i] = c;
	}
	if (!digit)
		return false;
	buf[n] = '\0';
	*out = strtod(buf, NULL);
	return isfinite(*out) && *out <= DECIDE_COST_MAX;
}

/* ---- several decisions, one answer ---- */

bool decide_more_restrictive(const struct rl_decision *a, const struct rl_decision *b)
{
	if (a->error || !a->has_limit)
		return false;
	if (b->error || !b->has_limit)
		return true;
	if (a->exceeded != b->exceeded)
		return a->exceeded;
	if (a->exceeded)
		return a->retry_after > b->retry_after;
	return a->remaining < b->remaining;
}

void decide_fold(const struct rl_decision *res, size_t n, struct rl_decision *out,
		 const char **error)
{
	size_t best = 0;

	for (size_t i = 1; i < n; i++)
		if (decide_more_restrictive(&res[i], &res[best]))
			best = i;
	/* Not the label and the stored key: the folded answer has neither. */
	memcpy(out, &res[best], offsetof(struct rl_decision, label));
	out->label[0] = '\0';
	out->answer = 0;
	*error = NULL;
	for (size_t i = 0; i < n; i++) {
		const struct rl_decision *r = &res[i];
		out->degraded = out->degraded || r->degraded;
		out->shadow = out->shadow || r->shadow;
		out->shadow_exceeded = out->shadow_exceeded || r->shadow_exceeded;
		if (r->error) {
			*error = *error ? *error : r->error;
			if (r->exceeded) {
				out->exceeded = true;
				if (r->retry_after > out->retry_after)
					out->retry_after = r->retry_after;
			}
			continue;
		}
		if (!r->has_limit)
			continue;
		if (r->exceeded) {
			out->exceeded = true;
			if (r->retry_after > out->retry_after)
				out->retry_after = r->retry_after;
		}
		if (r->remaining < out->remaining)
			out->remaining = r->remaining;
	}
}

/* ---- synchronous namespaces (sync_rate 0) ----
 *
 * Each hit is counted locally, then pushed to the store with a read of
 * the previous window, and the answer waits for the store's totals. A
 * batch waiting for its store is a `pending`; pendings come from a
 * per-worker pool (no allocation per request once warm). If the store
 * fails or times out, the answer uses the local count (fail-open) and the
 * hit goes into the slot's diff, which the retry cycle of agent/sync_cycle.c
 * pushes later. */

_Static_assert(DECIDE_MAX_BATCH <= SYNC_HITS_MAX, "a batch of hits holds a whole batch");

struct decide_pending *pending_get(struct decide *d)
{
	struct decide_pending *p = d->free_pending;

	if (p) {
		d->free_pending = p->next;
	} else {
		if (d->npending >= DECIDE_MAX_PENDING)
			return NULL;
		p = malloc(sizeof(*p));
		if (!p)
			return NULL;
	}
	d->npending++;
	p->d = d;
	p->owner = NULL;
	p->linked = false;
	p->delayed = false;
	p->settled = false;
	p->prev = p->next = NULL;
	p->dq = NULL;
	p->qnext = NULL;
	p->nrq = 0;
	return p;
}

void pending_free_all(struct decide *d)
{
	while (d->free_pending) {
		struct decide_pending *p = d->free_pending;
		d->free_pending = p->next;
		free(p);
	}
}

void pending_put(struct decide *d, struct decide_pending *p)
{
	p->next = d->free_pending;
	d->free_pending = p;
	d->npending--;
}

void pending_unlink(struct decide_pending *p)
{
	struct decide_owner *o = p->owner;

	if (!p->linked)
		return;
	if (p->prev)
		p->prev->next = p->next;
	else
		o->list = p->next;
	if (p->next)
		p->next->prev = p->prev;
	if (p->delayed)
		o->held--;
	else
		o->waiting--;
	p->linked = false;
	p->prev = p->next = NULL;
}

static void admit_locally(struct decide *d, struct rl_decision *r, double now);

/* A sync_rate 0 hit, counted here already, that its store did not confirm
 * (in time): decided again on this node's share (a hit the full limit let
 * through may be denied: counted, never admitted over the share). */
static void on_share(struct decide *d, struct rl_decision *r, double now)
{
	if (!r->has_limit || r->cost <= 0)
		return;
	r->cap = rl_degraded_cap(d->rl, r->ns, r->skey, r->skeylen, r->window, now,
				 (double)r->limit, r->weight, rl_active_nodes(d->rl, r->ns));
	r->degraded = true;
	finish(r, now);
}

/* Applies the store's answers to the table (agent/sync_hits.c) and to the
 * decisions. */
/* The store answered every part of a held decision: as in decide_batch,
 * one part over its limit denies the decision, and the parts of
 * count_denied false namespaces that were counted (by the store, or
 * here) are taken back, exactly once (a store's count by a negative diff
 * pushed with its token). */
static void pending_take_back(struct decide_pending *p)
{
	bool denied = false;

	if (p->n < 2)
		return;
	for (size_t i = 0; i < p->n; i++)
		denied = denied || (p->res[i].exceeded && !p->res[i].shadow);
	if (!denied)
		return;
	for (size_t i = 0; i < p->n; i++) {
		struct rl_decision *r = &p->res[i];
		r->store_counted = r->sync0;
		batch_take_back(p->d, NULL, r, p->now, false);
	}
}

/* A concurrency acquire the store decided: its count of the key's leases
 * in flight (with this one if admitted; a denied one as if taken, as on
 * one node) and when the first expires; the lease taken here given back
 * when denied. */
static void lease_answered(struct decide *d, struct rl_decision *r, const struct sync_hit *h,
			   double now)
{
	if (msid(d, r->ns) < METRICS_NS)
		metrics_add(&metrics_me->admissions[msid(d, r->ns)][METRICS_ADM_STORE], 1);
	r->counted = h->admitted;
	r->current = h->total + (r->counted ? 0 : 1);
	r->previous = h->prev_total;
	if (!r->counted)
		lease_give_back(d, NULL, r, false, now);
	finish(r, now);
}

/* The store's answer to a decision answered before it
 * (decide_pending_settle): that answer stands, and each hit is counted
 * once. An admission the store counted (admitted, or count_denied) is
 * taken back from this node's count, which holds it when the node
 * admitted it (and which, pushed, takes the store's back when the node
 * denied it); one the store did not answer is in doubt, as any admission
 * the node decided (agent/sync_doubt.c). A sync_rate 0 hit was counted
 * here before it was pushed: nothing to do. */
static void pending_late(struct decide_pending *p)
{
	struct decide *d = p->d;

	for (size_t i = 0; i < p->n; i++) {
		struct rl_decision *r = &p->res[i];
		if (p->hi[i] < 0 || !r->admit0)
			continue;
		const struct sync_hit *h = &p->hits.h[p->hi[i]];
		/* A lease: decided with the answer (admit_locally), which gave
		 * a denied one back here and to the store already. */
		if (r->algo == NS_ALGO_CONCURRENCY)
			continue;
		if (h->ok && (h->admitted || r->count_denied) && r->cost > 0)
			rl_unkeep(d->rl, r->ns, r->skey, r->skeylen, r->window,
				  window_start(p->now, r->window), r->cost, p->now);
	}
}

static void pending_finish(struct decide_pending *p)
{
	struct decide *d = p->d;
	bool failed = false;
	const struct rl_decision *first = NULL;   /* the first the store failed */

	sync_hits_apply(d->rl, &p->hits);
	if (p->settled) {
		pending_late(p);
		return;
	}
	for (size_t i = 0; i < p->n; i++) {
		struct rl_decision *r = &p->res[i];
		if (p->hi[i] < 0)
			continue;
		const struct sync_hit *h = &p->hits.h[p->hi[i]];
		if (r->admit0 && r->algo == NS_ALGO_CONCURRENCY && h->ok) {
			lease_answered(d, r, h, p->now);
			continue;
		}
		if (r->admit0) {
			if (!h->ok) {
				admit_locally(d, r, p->now);
				failed = true;
				first = first ? first : r;
				continue;
			}
			if (msid(d, r->ns) < METRICS_NS)
				metrics_add(&metrics_me->admissions[msid(d, r->ns)][METRICS_ADM_STORE],
					    1);
			/* The store's decision, with the hits it counts (never a
			 * grant: the store keeps them apart, agent/sync_hits.c
			 * sync_view()); a hit it did not add is reported with the
			 * rate it would have made. The decision stands whatever
			 * the rate says: the store counts every node's grants
			 * against the limit, and the rate does not. */
			r->counted = h->admitted || r->count_denied;
			r->current = h->total + (r->counted ? 0 : r->cost);
			if (r->weight > 0)
				r->previous = h->prev_total;
			finish(r, p->now);
			if (h->admitted && r->exceeded) {
				r->exceeded = false;
				r->retry_after = 0;
			} else if (!h->admitted && !r->exceeded) {
				r->exceeded = true;
				r->remaining = 0;
				r->retry_after = 1;
			}
			continue;
		}
		if (!h->ok) {
			failed = true;
			on_share(d, r, p->now);
			first = first ? first : r;
			continue;
		}
		/* A hit refused by the limit was not pushed: report the rate it
		 * would have made, as for local namespaces. */
		r->current = h->total + (r->counted ? 0 : r->cost);
		if (r->weight > 0 && h->prev_ok)
			r->previous = h->prev_total;
		finish(r, p->now);
	}
	pending_take_back(p);
	for (size_t i = 0; i < p->n; i++)
		if (p->hi[i] >= 0)
			count_final(d, &p->res[i]);
	if (failed) {
		metrics_add(&metrics_me->errors[METRICS_ERR_STORE], 1);
		d->sync_failures++;
		if (p->now - d->last_sync_log >= 10.0) {
			d->last_sync_log = p->now;
			LOG(LOG_WARN, "namespace \"%s\": the store did not %s (%s); %s (%llu so "
			    "far in this worker)", rl_namespace_def(d->rl, first->ns)->name,
			    first->admit0 ? "decide an admission" : "confirm a hit (sync_rate 0)",
			    p->hits.why[0] ? p->hits.why : "no answer",
			    first->admit0 ? "decided by this node on its share of the limit "
					    "(degraded), the hit pushed with the next sync"
					  : "answered from the local count (on this node's share of a "
					    "limit), the hit pushed later",
			    (unsigned long long)d->sync_failures);
		}
	}
}

void pending_deliver(struct decide_pending *p)
{
	if (p->owner) {
		/* The owner answers and releases p. */
		p->owner->deliver(p->owner, p);
		return;
	}
	pending_put(p->d, p);
}

void pending_link(struct decide_pending *p, struct decide_owner *owner, bool delayed)
{
	p->owner = owner;
	p->linked = true;
	p->delayed = delayed;
	p->prev = NULL;
	p->next = owner->list;
	if (owner->list)
		owner->list->prev = p;
	owner->list = p;
	if (delayed)
		owner->held++;
	else
		owner->waiting++;
}

static void pending_on_pushed(void *arg)
{
	struct decide_pending *p = arg;

	pending_finish(p);
	pending_deliver(p);
}

bool decide_needs_store(const struct rl_decision *res, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (res[i].sync0 && !res[i].error)
			return true;
	return false;
}

/* The hit of a synchronous decision, for agent/sync_hits.c. */
static struct sync_hit hit_of(const struct rl_decision *r)
{
	return (struct sync_hit){
		.ns = r->ns, .idx = r->cur_idx, .key = r->skey, .keylen = r->skeylen,
		.size = r->window, .diff = r->counted ? r->cost : 0, .with_prev = r->weight > 0,
		.admit = r->admit0, .cost = r->cost, .limit = (double)r->limit,
		.weight = r->weight, .count_denied = r->count_denied,
		.lease = r->lease, .lease_mac = r->lease_mac,
	};
}

/* An admission the store could not decide: the node decides on its share
 * of what the cluster had left (rl_degraded_cap), counts the hit if
 * admitted or with count_denied, and the sync loop pushes it later. */
static void admit_locally(struct decide *d, struct rl_decision *r, double now)
{
	r->degraded = true;
	if (msid(d, r->ns) < METRICS_NS)
		metrics_add(&metrics_me->admissions[msid(d, r->ns)][METRICS_ADM_DEGRADED], 1);
	if (r->algo == NS_ALGO_CONCURRENCY) {
		/* Its lease is taken here already: kept within this node's
		 * share (its own leases in flight, this one with them),
		 * given back otherwise, to the store too (it may have taken
		 * it before its answer was lost). */
		unsigned nodes = rl_active_nodes(d->rl, r->ns);
		r->cap = nodes > 1 ? fmax(floor((double)r->limit / nodes), 1) : (double)r->limit;
		r->counted = r->current <= r->cap;
		if (!r->counted)
			lease_give_back(d, NULL, r, true, now);
		else
			lease_add_to_store(d, NULL, r, now);
		finish(r, now);
		return;
	}
	if (r->algo != NS_ALGO_WINDOW) {
		/* Another algorithm decides its share itself (GCRA: on its
		 * copy of the TAT, agent/algo_gcra.c): the hit again, degraded. */
		struct rl_skey k = { .text = r->skey, .len = (uint8_t)r->skeylen,
				     .digested = r->skeylen == RL_DIGEST_LEN && r->skey[0] == '#' };
		struct rl_result res;
		if (k.digested)
			memcpy(k.digest, r->skey, RL_DIGEST_LEN);
		r->counted = false;
		if (rl_hit_skey(d->rl, r->ns, &k, r->window, r->cost, 0, now, (double)r->limit,
				r->count_denied, RL_ADMIT_DEGRADED, rl_active_nodes(d->rl, r->ns),
				&res) == 0) {
			r->counted = res.counted;
			r->current = res.current;
			r->weight = res.weight;     /* GCRA: the share, for its times */
			r->cap = res.cap;
		}
		finish(r, now);
		return;
	}
	r->cap = rl_degraded_cap(d->rl, r->ns, r->skey, r->skeylen, r->window, now,
				 (double)r->limit, r->weight, rl_active_nodes(d->rl, r->ns));
	bool ok = window_rate(r->current, r->previous, r->weight) + r->cost <= r->cap + 1e-9;

	r->counted = (ok || r->count_denied) && r->cost > 0;
	if (r->counted &&
	    rl_keep(d->rl, r->ns, r->skey, r->skeylen, r->window, window_start(now, r->window),
		    r->cost, now) < 0)
		r->counted = false;
	r->current += r->cost;          /* the rate the hit makes, counted or not */
	finish(r, now);
}

struct decide_pending *decide_hold(struct decide *d, struct rl_decision *res, size_t n,
				   double now, struct decide_owner *owner)
{
	/* The pool keeps DECIDE_DELAY_MAX for delayed decisions: those
	 * waiting for a store cannot take it. */
	struct decide_pending *p = d->npending - d->nheld < DECIDE_MAX_PENDING - DECIDE_DELAY_MAX
					   ? pending_get(d) : NULL;

	if (!p) {
		/* Too many batches waiting for the store: answer locally, as
		 * when the store does not confirm (counted as such). */
		metrics_add(&metrics_me->errors[METRICS_ERR_STORE], 1);
		for (size_t i = 0; i < n; i++) {
			if (!res[i].sync0 || res[i].error)
				continue;
			if (res[i].admit0)
				admit_locally(d, &res[i], now);
			count_final(d, &res[i]);
			struct sync_hit h = hit_of(&res[i]);
			if (!res[i].admit0)
				sync_hit_keep(d->rl, &h);
		}
		return NULL;
	}
	p->now = now;
	p->n = n;
	p->hits.n = 0;
	memset(p->tag, 0, sizeof(p->tag));
	memcpy(p->res, res, n * sizeof(*res));
	for (size_t i = 0; i < n; i++) {
		p->hi[i] = -1;
		if (p->res[i].sync0 && !p->res[i].error) {
			p->hi[i] = (int)p->hits.n;
			p->hits.h[p->hits.n++] = hit_of(&p->res[i]);
		}
	}
	if (!sync_hits_push(d->sync, &p->hits, now, pending_on_pushed, p)) {
		/* Store not connected: answer from the local counts now. */
		pending_finish(p);
		memcpy(res, p->res, n * sizeof(*res));
		pending_put(d, p);
		return NULL;
	}
	pending_link(p, owner, false);
	return p;
}

const struct rl_decision *decide_pending_settle(struct decide *d, struct decide_pending *p,
						double now, size_t *n)
{
	if (p->delayed || p->settled)
		return NULL;
	pending_unlink(p);
	p->owner = NULL;
	p->settled = true;
	for (size_t i = 0; i < p->n; i++) {
		struct rl_decision *r = &p->res[i];
		if (p->hi[i] < 0)
			continue;
		if (r->admit0)
			admit_locally(d, r, now);
		else
			on_share(d, r, now);
	}
	/* Denied: what count_denied false parts counted here is taken back
	 * (an admission's count too: admit0 with store_counted). */
	pending_take_back(p);
	for (size_t i = 0; i < p->n; i++)
		if (p->hi[i] >= 0)
			count_final(d, &p->res[i]);
	metrics_add(&metrics_me->errors[METRICS_ERR_STORE], 1);
	*n = p->n;
	return p->res;
}

const struct rl_decision *decide_pending_results(const struct decide_pending *p, size_t *n)
{
	*n = p->n;
	return p->res;
}

size_t decide_pending_size(void)
{
	return sizeof(struct decide_pending);
}

uint64_t *decide_pending_tag(struct decide_pending *p)
{
	return p->tag;
}

void decide_pending_release(struct decide *d, struct decide_pending *p)
{
	pending_unlink(p);
	pending_put(d, p);
}

