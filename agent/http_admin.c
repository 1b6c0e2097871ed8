/*
 * http_admin.c - the HTTP front's admin endpoints (docs/OPERATIONS.md),
 * behind http_admin_token: what this node holds of a key (GET /keys), and
 * for a synced namespace what its store holds (read when asked:
 * agent/sync_read.c), a key forgotten here and in its store (DELETE /keys:
 * the store's part is agent/sync_forget.c's), the heaviest keys of a
 * namespace's window (GET /top). Answers are JSON
 * written into a caller's buffer; keys are escaped (any byte but
 * printable ASCII as \u00XX: http_escape(), agent/http_answer.h).
 */
#include "agent/http_admin.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/config.h"
#include "agent/http_answer.h"
#include "agent/http_parse.h"
#include "agent/limits.h"
#include "agent/ratelimit.h"
#include "agent/sync.h"
#include "agent/topk.h"
#include "agent/window.h"

#define ADMIN_TOP_DEFAULT 10
#define ADMIN_TOP_MAX     100

/* The arguments of an admin request. */
struct admin_args {
	const char *ns, *key, *by;
	size_t ns_len, key_len, by_len;
	uint64_t n, window, limit, after;
	bool has_n, has_window, has_limit;
};

static bool is(const char *s, size_t n, const char *lit)
{
	return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

/* val[0..len) as a decimal number of 1..max digits into *x: 0, or -1. */
static int admin_number(const char *val, long len, int max, uint64_t *x)
{
	*x = 0;
	if (len <= 0 || len > max)
		return -1;
	for (long i = 0; i < len; i++) {
		if (val[i] < '0' || val[i] > '9')
			return -1;
		*x = *x * 10 + (uint64_t)(val[i] - '0');
	}
	return 0;
}

/* Reads the query into a (strings decoded into dec). NULL or why not. */
static const char *admin_parse(const char *query, size_t qlen, char *dec, size_t cap,
			       struct admin_args *a)
{
	struct http_query_iter it;
	const char *n, *v;
	size_t nl, vl, used = 0;

	memset(a, 0, sizeof(*a));
	http_query_init(&it, query, qlen);
	while (http_query_next(&it, &n, &nl, &v, &vl) == 1) {
		long len = http_pct_decode(v, vl, dec + used, cap - used);
		if (len < 0)
			return "bad percent-encoding";
		const char *val = dec + used;
		used += (size_t)len;
		if (is(n, nl, "namespace")) {
			a->ns = val;
			a->ns_len = (size_t)len;
		} else if (is(n, nl, "key")) {
			a->key = val;
			a->key_len = (size_t)len;
		} else if (is(n, nl, "by")) {
			a->by = val;
			a->by_len = (size_t)len;
		} else if (is(n, nl, "n")) {
			if (admin_number(val, len, 6, &a->n) < 0 || a->n == 0)
				return "bad n";
			a->has_n = true;
		} else if (is(n, nl, "window")) {
			if (admin_number(val, len, 10, &a->window) < 0 || a->window == 0 ||
			    a->window > UINT32_MAX)
				return "bad window";
			a->has_window = true;
		} else if (is(n, nl, "limit")) {
			if (admin_number(val, len, 13, &a->limit) < 0 ||
			    a->limit > (uint64_t)NS_LIMIT_MAX)
				return "bad limit (an integer 0..1000000000000)";
			a->has_limit = true;
		} else if (is(n, nl, "after")) {
			if (admin_number(val, len, 19, &a->after) < 0)
				return "bad after";
		}
	}
	return NULL;
}

/* Opens an answer about one key: {"namespace":"...","key":"... (the
 * caller closes the key's string). */
static void admin_key_head(char *out, size_t cap, size_t *o, const struct ns_def *nsc,
			   const char *key, size_t key_len)
{
	http_put(out, cap, o, "{\"namespace\":\"");
	http_escape(out, cap, o, nsc->name, strlen(nsc->name), HTTP_ESC_JSON_BYTES);
	http_put(out, cap, o, "\",\"key\":\"");
	http_escape(out, cap, o, key, key_len, HTTP_ESC_JSON_BYTES);
}

static int admin_error(char *out, size_t cap, int status, const char *why)
{
	size_t o = 0;

	http_put(out, cap, &o, "{\"error\":\"%s\"}\n", why);
	return status;
}

/* The namespace of a (default "default"), or -1 with the answer made. */
static int admin_ns(struct rl *rl, const struct admin_args *a, char *out, size_t cap,
		    int *status)
{
	int ns = rl_namespace_index(rl, a->ns ? a->ns : "default", a->ns ? a->ns_len : 7);

	if (ns < 0)
		*status = admin_error(out, cap, 404, "unknown namespace");
	return ns;
}

/* The arguments of /keys (namespace and key, decoded into dec) and the
 * namespace's index; or -1 with *status the error answered. */
static int admin_key_args(struct rl *rl, const char *query, size_t qlen, char *dec, size_t declen,
			  struct admin_args *a, char *out, size_t cap, int *status)
{
	const char *why = admin_parse(query, qlen, dec, declen, a);

	if (why) {
		*status = admin_error(out, cap, 400, why);
		return -1;
	}
	if (!a->key || a->key_len == 0) {
		*status = admin_error(out, cap, 400, "missing key");
		return -1;
	}
	return admin_ns(rl, a, out, cap, status);
}

/* The store's part of window i of a synced namespace at now: what it
 * holds of the key (sv->counts[i]), or why it could not say (sv->why). */
static void admin_store_part(char *out, size_t cap, size_t *o, const struct admin_wait *sv,
			     size_t i, double now, bool sliding, enum ns_algorithm algo,
			     int64_t limit)
{
	const struct sync_read_count *c = &sv->counts[i];

	if (!c->ok) {
		const char *why = sv->why[0] ? sv->why : "the store did not answer";
		http_put(out, cap, o, ",\"store\":{\"error\":\"");
		http_escape(out, cap, o, why, strlen(why), HTTP_ESC_JSON_BYTES);
		http_put(out, cap, o, "\"}");
		return;
	}
	if (algo == NS_ALGO_CONCURRENCY) {
		http_put(out, cap, o, ",\"store\":{\"in_flight\":%.17g,\"expires_in\":%.3f,"
		    "\"read_at\":%.3f}", c->current, c->previous, sv->read_at);
		return;
	}
	if (algo == NS_ALGO_GCRA) {
		/* The hits in the key's bucket: the TAT's lead over T. */
		double hits = limit > 0 ? c->current * (double)limit / c->size : 0;
		http_put(out, cap, o, ",\"store\":{\"count\":%.17g,\"ahead\":%.6f,"
		    "\"read_at\":%.3f}", hits, c->current, sv->read_at);
		return;
	}
	double weight = sliding ? window_weight(now, c->size) : 0;
	http_put(out, cap, o, ",\"store\":{\"current\":%.17g,\"previous\":%.17g,\"rate\":%.17g,"
	    "\"read_at\":%.3f}", c->current, c->previous,
	    window_rate(c->current, c->previous, weight), sv->read_at);
}

/* The answer of a GET /keys: this node's view of key's windows at now,
 * and for a synced namespace (sv not NULL) whether it holds a counter of
 * the key and the store's part (sv->counts, or sv->why). */
static int admin_keys_text(struct rl *rl, int ns, const char *key, size_t key_len, double now,
			   const struct admin_wait *sv, char *out, size_t cap)
{
	const struct ns_def *nsc = rl_namespace_def(rl, ns);
	bool sliding = nsc->window_type == NS_WINDOW_SLIDING;
	size_t o = 0;

	struct rl_skey sk;

	rl_skey_make(rl, key, key_len, &sk);
	admin_key_head(out, cap, &o, nsc, key, key_len);
	http_put(out, cap, &o, "\",\"windows\":[");
	for (size_t i = 0; i < nsc->n_window_sizes; i++) {
		uint32_t size = nsc->window_sizes[i];
		struct rl_key_info k;
		if (rl_inspect(rl, ns, key, key_len, size, now, sliding, &k) < 0)
			return admin_error(out, cap, 400, rl_status_str(rl_errno(rl)));
		/* reset and remaining as the namespace's algorithm answers
		 * them (agent/algo.h), for a read; the key's own limit where
		 * one is set (PUT /limits). */
		int64_t configured = ns_limit_of(nsc, size);
		int64_t limit = rl_limit_of(rl, ns, size, &sk, configured);
		const struct algo_view v = {
			.current = k.count - k.grant, .previous = k.previous, .weight = k.weight,
			.cap = limit != configured ? (double)limit : k.cap, .limit = limit,
			.window = size, .sliding = sliding,
			.has_limit = limit != NS_LIMIT_NONE,
		};
		struct algo_answer a = { 0 };
		algo_of(nsc->algorithm)->answer(&v, now, &a);
		http_put(out, cap, &o, "%s{\"window\":%u,\"count\":%.17g,\"cluster\":%.17g,"
		    "\"unpushed\":%.17g,\"grant\":%.17g,\"previous\":%.17g,\"rate\":%.17g,"
		    "\"reset\":%lld", i ? "," : "", size, k.count - k.grant,
		    k.count - k.diff - k.grant - k.spent, k.diff + k.spent, k.grant, k.previous,
		    k.rate, (long long)a.reset);
		/* A concurrency limit's leases in flight (its count). */
		if (nsc->algorithm == NS_ALGO_CONCURRENCY)
			http_put(out, cap, &o, ",\"in_flight\":%lld", (long long)k.count);
		if (sv) {
			http_put(out, cap, &o, ",\"seen\":%s", k.found ? "true" : "false");
			admin_store_part(out, cap, &o, sv, i, now, sliding, nsc->algorithm, limit);
		}
		if (limit != NS_LIMIT_NONE)
			http_put(out, cap, &o, ",\"limit\":%lld,\"remaining\":%lld", (long long)limit,
			    (long long)a.remaining);
		http_put(out, cap, &o, "}");
	}
	http_put(out, cap, &o, "]}\n");
	return 200;
}

static void admin_on_read(void *arg, const struct sync_read_count *c, size_t n, const char *why)
{
	struct admin_wait *w = arg;

	w->r = NULL;
	w->read_at = rl_now();
	memcpy(w->counts, c, n * sizeof(*c));
	if (why)
		snprintf(w->why, sizeof(w->why), "%s", why);
	w->done(w->owner);
}

/* Keeps the key of a request whose answer waits (w->key). 0 or -1. */
static int admin_keep_key(struct admin_wait *w, int ns, const char *key, size_t key_len,
			  double now)
{
	if (!(w->key = malloc(key_len)))
		return -1;
	memcpy(w->key, key, key_len);
	w->key_len = key_len;
	w->ns = ns;
	w->now = now;
	return 0;
}

int admin_keys(struct rl *rl, struct sync *sy, const char *query, size_t qlen, double now,
	       char *out, size_t cap, struct admin_wait *w)
{
	char dec[HTTP_LINE_MAX], stored[RL_STORED_KEY_MAX];
	struct admin_args a;
	int status = 0, ns;

	if ((ns = admin_key_args(rl, query, qlen, dec, sizeof(dec), &a, out, cap, &status)) < 0)
		return status;
	if (rl_namespace_def(rl, ns)->sync_rate < 0)
		return admin_keys_text(rl, ns, a.key, a.key_len, now, NULL, out, cap);
	/* Answered at once when the store cannot be asked: w->why says why. */
	size_t sl = rl_stored_key(rl, a.key, a.key_len, stored);
	if (sync_read(sy, (unsigned)ns, stored, sl, now, admin_on_read, w, &w->r, w->why) < 0 ||
	    admin_keep_key(w, ns, a.key, a.key_len, now) < 0) {
		sync_read_detach(w->r);
		w->r = NULL;
		if (!w->why[0])
			snprintf(w->why, sizeof(w->why), "out of memory");
		return admin_keys_text(rl, ns, a.key, a.key_len, now, w, out, cap);
	}
	w->read = true;
	return 0;
}

/* The answer of a DELETE: what this node removed and what the store did. */
static int admin_forget_text(const struct ns_def *nsc, const char *key, size_t key_len,
			     double removed, const char *store, double store_removed, char *out,
			     size_t cap)
{
	size_t o = 0;

	admin_key_head(out, cap, &o, nsc, key, key_len);
	http_put(out, cap, &o, "\",\"removed\":%.17g,\"windows\":%zu,\"store\":\"%s\"", removed,
	    nsc->n_window_sizes, store);
	if (strcmp(store, "sent") == 0)
		http_put(out, cap, &o, ",\"store_removed\":%.17g", store_removed);
	http_put(out, cap, &o, "}\n");
	return 200;
}

static void admin_on_forgot(void *arg, enum sync_forget_result r, double removed)
{
	struct admin_wait *w = arg;

	w->f = NULL;
	w->store = r;
	w->store_removed = removed;
	w->done(w->owner);
}

int admin_forget(struct rl *rl, struct sync *sy, const char *query, size_t qlen, double now,
		 char *out, size_t cap, struct admin_wait *w)
{
	char dec[HTTP_LINE_MAX], stored[RL_STORED_KEY_MAX];
	struct admin_args a;
	int status = 0, ns;
	double removed = 0;

	if ((ns = admin_key_args(rl, query, qlen, dec, sizeof(dec), &a, out, cap, &status)) < 0)
		return status;
	const struct ns_def *nsc = rl_namespace_def(rl, ns);
	for (size_t i = 0; i < nsc->n_window_sizes; i++) {
		double r = 0;
		if (rl_forget(rl, ns, a.key, a.key_len, nsc->window_sizes[i], now, &r) < 0)
			return admin_error(out, cap, 400, rl_status_str(rl_errno(rl)));
		removed += r;
	}
	if (nsc->sync_rate < 0)
		return admin_forget_text(nsc, a.key, a.key_len, removed, "none", 0, out, cap);
	/* The store's part: the other nodes follow its count down. */
	size_t sl = rl_stored_key(rl, a.key, a.key_len, stored);
	int r = sync_forget(sy, (unsigned)ns, stored, sl, now, admin_on_forgot, w, &w->f);
	if (r < 0)
		return admin_error(out, cap, 503, "forgotten on this node only: the store's part "
				   "was refused (too many forgets waiting for the store, or out "
				   "of memory); try again");
	if (r == 0)
		return admin_forget_text(nsc, a.key, a.key_len, removed, "queued", 0, out, cap);
	if (admin_keep_key(w, ns, a.key, a.key_len, now) < 0) {
		sync_forget_detach(w->f);
		w->f = NULL;
		return admin_forget_text(nsc, a.key, a.key_len, removed, "queued", 0, out, cap);
	}
	w->removed = removed;
	return 0;
}

/* ---- /limits: limits per key set at run time ---- */

#define ADMIN_LIMITS_PAGE 100     /* overrides per GET page, by default and at most */

/* The window of a /limits request: the one given (one of the namespace's)
 * or the namespace's only one. 0 with the answer made when neither. */
static uint32_t admin_limit_window(const struct ns_def *nsc, const struct admin_args *a,
				   char *out, size_t cap, int *status)
{
	if (a->has_window) {
		if (ns_window_index(nsc, (uint32_t)a->window) < 0) {
			*status = admin_error(out, cap, 400, "bad window (not one of the "
					      "namespace's window_sizes)");
			return 0;
		}
		return (uint32_t)a->window;
	}
	if (nsc->n_window_sizes != 1) {
		*status = admin_error(out, cap, 400, "missing window (the namespace has several)");
		return 0;
	}
	return nsc->window_sizes[0];
}

/* Why a write of ns's overrides failed, answered. */
static int admin_limit_refused(const struct ns_def *nsc, int e, char *out, size_t cap)
{
	size_t o = 0;

	if (e == LIMITS_ERR_BUSY)
		return admin_error(out, cap, 503, limits_err_str(e));
	http_put(out, cap, &o, "{\"error\":\"");
	if (e == LIMITS_ERR_NS_FULL)
		http_put(out, cap, &o, "namespace holds max_limit_overrides (%zu) limits per key "
			 "already: remove one (DELETE /limits) or raise max_limit_overrides",
			 ns_max_overrides(nsc));
	else
		http_put(out, cap, &o, "%s: the agent's table is sized at start for the "
			 "max_limit_overrides of its namespaces (restart after raising them)",
			 limits_err_str(e));
	http_put(out, cap, &o, "\"}\n");
	return 409;
}

/* The answer of a PUT or DELETE /limits that was done. */
static int admin_limit_text(const struct ns_def *nsc, const char *key, size_t key_len,
			    uint32_t window, int64_t value, bool was, const char *store, char *out,
			    size_t cap)
{
	size_t o = 0;

	admin_key_head(out, cap, &o, nsc, key, key_len);
	http_put(out, cap, &o, "\",\"window\":%u", window);
	if (value >= 0)
		http_put(out, cap, &o, ",\"limit\":%lld", (long long)value);
	else
		http_put(out, cap, &o, ",\"removed\":%s", was ? "true" : "false");
	http_put(out, cap, &o, ",\"store\":\"%s\"}\n", store);
	return 200;
}

/* A PUT or DELETE the store did not take (why): 503, nothing changed. */
static int admin_not_stored(const char *why, char *out, size_t cap)
{
	size_t o = 0;

	http_put(out, cap, &o, "{\"error\":\"the store did not take it, nothing changed: ");
	http_escape(out, cap, &o, why, strlen(why), HTTP_ESC_JSON_BYTES);
	http_put(out, cap, &o, "\"}\n");
	return 503;
}

static void admin_on_limit(void *arg, int status, bool full, const char *why)
{
	struct admin_wait *w = arg;

	w->l = NULL;
	w->status = status;
	w->full = full;
	if (why)
		snprintf(w->why, sizeof(w->why), "%s", why);
	w->done(w->owner);
}

/* GET /limits: one key's (key given), or a page of the namespace's. */
static int admin_limits_list(struct rl *rl, int ns, const struct admin_args *a,
			     const char *stored, size_t sl, char *out, size_t cap)
{
	static struct limits_entry e[ADMIN_LIMITS_PAGE];
	const struct ns_def *nsc = rl_namespace_def(rl, ns);
	struct limits *l = rl_limits(rl);
	unsigned sid = rl_shm_ns(rl, ns);
	size_t o = 0, n = 0;
	uint64_t pos = a->after;

	if (a->key) {
		admin_key_head(out, cap, &o, nsc, a->key, a->key_len);
		http_put(out, cap, &o, "\",\"limits\":[");
		for (size_t i = 0; i < nsc->n_window_sizes; i++) {
			uint32_t size = nsc->window_sizes[i];
			int64_t v = limits_get(l, sid, size, stored, sl, -1);
			if (v < 0 || (a->has_window && a->window != size))
				continue;
			http_put(out, cap, &o, "%s{\"window\":%u,\"limit\":%lld}", n++ ? "," : "",
				 size, (long long)v);
		}
		http_put(out, cap, &o, "]}\n");
		return 200;
	}
	size_t want = a->has_n && a->n < ADMIN_LIMITS_PAGE ? a->n : ADMIN_LIMITS_PAGE;
	n = limits_list(l, sid, &pos, e, want);
	http_put(out, cap, &o, "{\"namespace\":\"");
	http_escape(out, cap, &o, nsc->name, strlen(nsc->name), HTTP_ESC_JSON_BYTES);
	http_put(out, cap, &o, "\",\"count\":%zu,\"max\":%zu,\"limits\":[",
		 limits_count(l, sid), ns_max_overrides(nsc));
	for (size_t i = 0; i < n; i++) {
		http_put(out, cap, &o, "%s{\"key\":\"", i ? "," : "");
		http_escape(out, cap, &o, e[i].key, e[i].len, HTTP_ESC_JSON_BYTES);
		http_put(out, cap, &o, "\",\"window\":%u,\"limit\":%lld}", e[i].window,
			 (long long)e[i].limit);
	}
	http_put(out, cap, &o, "]");
	if (pos)
		http_put(out, cap, &o, ",\"next\":%llu", (unsigned long long)pos);
	http_put(out, cap, &o, "}\n");
	return 200;
}

int admin_limits(struct rl *rl, struct sync *sy, int method, const char *query, size_t qlen,
		 char *out, size_t cap, struct admin_wait *w)
{
	char dec[HTTP_LINE_MAX], stored[RL_STORED_KEY_MAX];
	struct admin_args a;
	int status = 0, ns;
	const char *why = admin_parse(query, qlen, dec, sizeof(dec), &a);
	size_t sl = 0;

	if (why)
		return admin_error(out, cap, 400, why);
	if ((ns = admin_ns(rl, &a, out, cap, &status)) < 0)
		return status;
	const struct ns_def *nsc = rl_namespace_def(rl, ns);
	struct limits *l = rl_limits(rl);
	if (!l)
		return admin_error(out, cap, 503, "no table of limits per key");
	if (a.key && a.key_len > 0)
		sl = rl_stored_key(rl, a.key, a.key_len, stored);
	else if (a.key)
		return admin_error(out, cap, 400, "empty key");
	if (method == HTTP_GET || method == HTTP_HEAD)
		return admin_limits_list(rl, ns, &a, stored, sl, out, cap);
	if (!a.key)
		return admin_error(out, cap, 400, "missing key");
	uint32_t window = admin_limit_window(nsc, &a, out, cap, &status);
	if (window == 0)
		return status;
	if (method == HTTP_PUT && !a.has_limit)
		return admin_error(out, cap, 400, "missing limit");
	int64_t value = method == HTTP_PUT ? (int64_t)a.limit : -1;
	unsigned sid = rl_shm_ns(rl, ns);
	bool was = limits_get(l, sid, window, stored, sl, -1) >= 0;
	if (value >= 0 && !was && limits_count(l, sid) >= ns_max_overrides(nsc))
		return admin_limit_refused(nsc, LIMITS_ERR_NS_FULL, out, cap);
	if (nsc->sync_rate < 0) {
		int rc = value >= 0 ? limits_put(l, sid, window, stored, sl, value,
						 ns_max_overrides(nsc), NULL)
				    : limits_del(l, sid, window, stored, sl);
		if (rc < 0 || (value >= 0 && rc > 0))
			return admin_limit_refused(nsc, rc < 0 ? -rc : rc, out, cap);
		return admin_limit_text(nsc, a.key, a.key_len, window, value, was, "none", out, cap);
	}
	/* The store first: every node reads it there. Nothing changes when
	 * it cannot take it. */
	if (sync_limit_set(sy, (unsigned)ns, window, stored, sl, value, admin_on_limit, w, &w->l,
			   w->why) < 0 ||
	    admin_keep_key(w, ns, a.key, a.key_len, 0) < 0) {
		sync_limit_detach(w->l);
		w->l = NULL;
		return admin_not_stored(w->why[0] ? w->why : "out of memory", out, cap);
	}
	w->limit = true;
	w->window = window;
	w->value = value;
	w->was = was;
	return 0;
}

/* The answer of a /limits request once its store answered. */
static int admin_limit_wait_text(struct rl *rl, struct admin_wait *w, char *out, size_t cap)
{
	const struct ns_def *nsc = rl_namespace_def(rl, w->ns);

	if (w->status == 0 && w->full)
		return admin_limit_refused(nsc, LIMITS_ERR_NS_FULL, out, cap);
	if (w->status == 0)
		return admin_limit_text(nsc, w->key, w->key_len, w->window, w->value, w->was,
					"stored", out, cap);
	return admin_not_stored(w->why[0] ? w->why : "the store failed", out, cap);
}

int admin_wait_answer(struct rl *rl, struct admin_wait *w, char *out, size_t cap)
{
	int st = w->limit ? admin_limit_wait_text(rl, w, out, cap) : w->read ? admin_keys_text(rl, w->ns, w->key, w->key_len, w->now, w, out, cap)
			 : admin_forget_text(rl_namespace_def(rl, w->ns), w->key, w->key_len,
					     w->removed,
					     w->store == SYNC_FORGET_SENT ? "sent" : "queued",
					     w->store_removed, out, cap);

	free(w->key);
	w->key = NULL;
	return st;
}

void admin_wait_detach(struct admin_wait *w)
{
	sync_forget_detach(w->f);
	w->f = NULL;
	sync_read_detach(w->r);
	w->r = NULL;
	sync_limit_detach(w->l);
	w->l = NULL;
	free(w->key);
	w->key = NULL;
}

int admin_top(struct rl *rl, struct topk *t, const char *query, size_t qlen, double now,
	      char *out, size_t cap)
{
	static struct topk_entry e[ADMIN_TOP_MAX];
	char dec[HTTP_LINE_MAX];
	struct admin_args a;
	const char *why = admin_parse(query, qlen, dec, sizeof(dec), &a);
	enum topk_kind kind = TOPK_HITS;
	int status = 0, ns;
	size_t o = 0;

	if (why)
		return admin_error(out, cap, 400, why);
	if ((ns = admin_ns(rl, &a, out, cap, &status)) < 0)
		return status;
	if (a.by && is(a.by, a.by_len, "denied"))
		kind = TOPK_DENIED;
	else if (a.by && !is(a.by, a.by_len, "hits"))
		return admin_error(out, cap, 400, "bad by (hits or denied)");
	if (!t)
		return admin_error(out, cap, 503, "heavy hitters off (top_keys 0)");
	const struct ns_def *nsc = rl_namespace_def(rl, ns);
	uint32_t w = a.has_window ? (uint32_t)a.window : nsc->window_sizes[0];
	if (!rl_has_window(rl, ns, w))
		return admin_error(out, cap, 400, "bad window");
	size_t n = a.has_n ? (a.n > ADMIN_TOP_MAX ? ADMIN_TOP_MAX : a.n) : ADMIN_TOP_DEFAULT;
	int64_t start = window_start(now, w);
	double total, bound;
	size_t got = topk_query(t, rl_shm_ns(rl, ns), rl_shm_win(rl, ns, w), start, kind, e, n,
				&total, &bound);

	http_put(out, cap, &o, "{\"namespace\":\"");
	http_escape(out, cap, &o, nsc->name, strlen(nsc->name), HTTP_ESC_JSON_BYTES);
	http_put(out, cap, &o, "\",\"window\":%u,\"window_start\":%lld,\"by\":\"%s\",\"sample\":%u,"
	    "\"entries\":%u,\"total\":%.17g,\"error_bound\":%.17g,\"keys\":[", w, (long long)start,
	    kind == TOPK_HITS ? "hits" : "denied", topk_sample(t), topk_entries(t), total, bound);
	for (size_t i = 0; i < got; i++) {
		http_put(out, cap, &o, "%s{\"key\":\"", i ? "," : "");
		http_escape(out, cap, &o, e[i].key, e[i].keylen, HTTP_ESC_JSON_BYTES);
		http_put(out, cap, &o, "\",\"count\":%.17g,\"error\":%.17g}", e[i].count, e[i].error);
	}
	http_put(out, cap, &o, "]}\n");
	return 200;
}
