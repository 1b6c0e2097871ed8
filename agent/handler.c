/*
 * handler.c - NOTIFY in, ACK out. The contract with HAProxy configs is
 * docs/PROTOCOL.md; this file is its implementation.
 *
 * A NOTIFY is read in two passes: the first validates every message and
 * argument (a malformed payload counts nothing), the second counts each
 * rate-limit message and records its result. The ACK then carries the
 * plain variables of the most restrictive message, followed by each
 * message's own suffixed variables.
 */
#include "agent/handler.h"

#include <arpa/inet.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/config.h"
#include "agent/log.h"
#include "agent/ratelimit.h"
#include "agent/shm.h"
#include "agent/sync.h"
#include "agent/window.h"
#include "strategies/strategy.h"

/* What one rate-limit message asked for and got. */
struct msg_result {
	char suffix[HANDLER_SUFFIX_MAX + 1];
	const char *error;      /* NULL when counted/read */
	bool has_limit;
	bool exceeded;
	int64_t limit;
	int64_t rate;           /* ceiling of the exact rate */
	int64_t remaining;
	int64_t reset;
	int64_t retry_after;    /* only when exceeded */
	uint32_t window;
	/* What the answer is computed from (finish_result), kept so that a
	 * synchronous namespace can recompute it from the store's totals. */
	double current, previous, weight, cost;
	uint32_t cur_idx, prev_idx;
	int ns;
	bool sliding;
	bool counted;
	bool sync0;             /* namespace with sync_rate 0: push before the ACK */
	uint8_t skeylen;        /* sync0: the key as stored (rl_stored_key) */
	char skey[RL_STORED_KEY_MAX];
};

static void var_headers_init(struct handler *h);

int handler_init(struct handler *h, const struct config *cfg, struct rl *rl,
		 size_t max_frame_size)
{
	memset(h, 0, sizeof(*h));
	h->cfg = cfg;
	h->rl = rl;
	h->prefix_len = strlen(cfg->message_prefix);
	var_headers_init(h);
	/* A binary key is at most one frame long; its hex text twice that. */
	h->scratch_len = 2 * max_frame_size + 64;
	h->scratch = malloc(h->scratch_len);
	return h->scratch ? 0 : -1;
}

static void pending_free_all(struct handler *h);

void handler_free(struct handler *h)
{
	free(h->scratch);
	h->scratch = NULL;
	pending_free_all(h);
}

/* ---- argument parsing ---- */

/* Parses a non-negative integer from an int or a string of digits. */
static bool arg_uint(const struct spop_data *d, uint64_t *out)
{
	switch (d->type) {
	case SPOP_DATA_STRING: {
		uint64_t v = 0;
		if (d->v.str.len == 0 || d->v.str.len > 19)
			return false;
		for (size_t i = 0; i < d->v.str.len; i++) {
			char c = d->v.str.ptr[i];
			if (c < '0' || c > '9')
				return false;
			v = v * 10 + (uint64_t)(c - '0');
		}
		*out = v;
		return true;
	}
	default:
		return spop_data_uint(d, out);
	}
}

/* Parses a cost: an int >= 0, or a string holding a plain decimal number
 * ("2", "0.5", ".25"); no sign, exponent, hex, inf or nan; at most
 * HANDLER_COST_MAX, so that counts stay exact integers in a double and
 * every variable fits an int64. */
static bool arg_cost(const struct spop_data *d, double *out)
{
	if (d->type != SPOP_DATA_STRING) {
		uint64_t u;
		if (!arg_uint(d, &u) || u > (uint64_t)HANDLER_COST_MAX)
			return false;
		*out = (double)u;
		return true;
	}
	char buf[32];
	size_t len = d->v.str.len;
	bool digit = false, dot = false;
	if (len == 0 || len >= sizeof(buf))
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = d->v.str.ptr[i];
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
	buf[len] = '\0';
	*out = strtod(buf, NULL);
	return isfinite(*out) && *out <= HANDLER_COST_MAX;
}

static bool str_eq(struct spop_str s, const char *lit)
{
	size_t n = strlen(lit);
	return s.len == n && memcmp(s.ptr, lit, n) == 0;
}

static const char hexdigits[] = "0123456789abcdef";

/* Decimal text of v into out (at least 20 bytes); returns its length.
 * (inet_ntop and snprintf cost more than the rest of a hit.) */
static size_t put_u64(char *out, uint64_t v)
{
	char tmp[20];
	size_t n = 0;
	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	for (size_t i = 0; i < n; i++)
		out[i] = tmp[n - 1 - i];
	return n;
}

/* Dotted text of an IPv4 address into out (at least 16 bytes). */
static size_t put_ipv4(char *out, const uint8_t a[4])
{
	size_t n = 0;
	for (int i = 0; i < 4; i++) {
		if (i)
			out[n++] = '.';
		n += put_u64(out + n, a[i]);
	}
	return n;
}

/* Writes the canonical text of a key into the scratch buffer; returns its
 * length, 0 if the value cannot be a key (*why says why). */
static size_t key_text(struct handler *h, const struct spop_data *d, const char **text,
		       const char **why)
{
	char *out = h->scratch;

	*text = out;
	switch (d->type) {
	case SPOP_DATA_NULL:
		*why = "missing key";
		return 0;
	case SPOP_DATA_STRING:
		*text = d->v.str.ptr;
		*why = "empty key";
		return d->v.str.len;
	case SPOP_DATA_BINARY:
		if (d->v.str.len * 2 > h->scratch_len) {
			*why = "key too long";
			return 0;
		}
		for (size_t i = 0; i < d->v.str.len; i++) {
			uint8_t b = (uint8_t)d->v.str.ptr[i];
			out[2 * i] = hexdigits[b >> 4];
			out[2 * i + 1] = hexdigits[b & 15];
		}
		*why = "empty key";
		return d->v.str.len * 2;
	case SPOP_DATA_IPV4:
		return put_ipv4(out, d->v.ipv4);
	case SPOP_DATA_IPV6: {
		static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
		if (memcmp(d->v.ipv6, mapped, sizeof(mapped)) == 0)
			return put_ipv4(out, d->v.ipv6 + 12);
		inet_ntop(AF_INET6, d->v.ipv6, out, (socklen_t)h->scratch_len);
		return strlen(out);
	}
	case SPOP_DATA_INT32:
	case SPOP_DATA_INT64:
		if (d->v.i < 0) {
			out[0] = '-';
			return 1 + put_u64(out + 1, (uint64_t)0 - (uint64_t)d->v.i);
		}
		return put_u64(out, (uint64_t)d->v.i);
	case SPOP_DATA_UINT32:
	case SPOP_DATA_UINT64:
		return put_u64(out, d->v.u);
	default:
		*why = "bad key type";
		return 0;
	}
}

/* Copies the message name's suffix (after the prefix and an optional
 * separator) into r->suffix, made safe for a variable name. */
static void msg_suffix(struct spop_str name, size_t prefix_len, struct msg_result *r)
{
	const char *p = name.ptr + prefix_len;
	size_t len = name.len - prefix_len, n = 0;

	if (len > 0 && (*p == '-' || *p == '_' || *p == '.')) {
		p++;
		len--;
	}
	for (size_t i = 0; i < len && n < HANDLER_SUFFIX_MAX; i++) {
		char c = p[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || c == '_';
		r->suffix[n++] = ok ? c : '_';
	}
	r->suffix[n] = '\0';
}

static bool is_ratelimit_msg(const struct handler *h, struct spop_str name)
{
	return name.len >= h->prefix_len &&
	       memcmp(name.ptr, h->cfg->message_prefix, h->prefix_len) == 0;
}

static void finish_result(struct msg_result *r, double now);
static void table_full(struct handler *h, struct msg_result *r, const struct config_ns *nsc,
		       int ns, double now);
static void table_evicted(struct handler *h, int ns, double now);

/* Parses one message's arguments and counts it. Fills *r. */
static void handle_msg(struct handler *h, const struct spop_msg *m, double now,
		       struct msg_result *r)
{
	struct spop_data key = { .type = SPOP_DATA_NULL };
	bool has_key = false;
	struct spop_str ns_name = { "default", 7 };
	uint64_t window = 0, limit = 0;
	double cost = 1;
	bool has_window = false, sliding = true, wt_given = false;
	struct spop_cursor c;
	struct spop_kv kv;

	memset(r, 0, sizeof(*r));
	msg_suffix(m->name, h->prefix_len, r);

	spop_args_init(&c, m);
	while (spop_args_next(&c, &kv) == 1) {
		const struct spop_kv *a = &kv;
		if (str_eq(a->name, "key")) {
			key = a->value;
			has_key = true;
		} else if (str_eq(a->name, "window")) {
			if (!arg_uint(&a->value, &window) || window == 0 || window > UINT32_MAX) {
				r->error = "bad window";
				return;
			}
			has_window = true;
		} else if (str_eq(a->name, "cost")) {
			if (!arg_cost(&a->value, &cost)) {
				r->error = "bad cost";
				return;
			}
		} else if (str_eq(a->name, "namespace")) {
			if (a->value.type != SPOP_DATA_STRING) {
				r->error = "bad namespace";
				return;
			}
			ns_name = a->value.v.str;
		} else if (str_eq(a->name, "limit")) {
			if (!arg_uint(&a->value, &limit) || limit > (uint64_t)HANDLER_COST_MAX) {
				r->error = "bad limit";
				return;
			}
			r->has_limit = true;
		} else if (str_eq(a->name, "window_type")) {
			if (a->value.type == SPOP_DATA_STRING && str_eq(a->value.v.str, "sliding"))
				sliding = true;
			else if (a->value.type == SPOP_DATA_STRING && str_eq(a->value.v.str, "fixed"))
				sliding = false;
			else {
				r->error = "bad window_type";
				return;
			}
			wt_given = true;
		}
		/* Unknown arguments are ignored. */
	}

	int ns = rl_namespace_index(h->rl, ns_name.ptr, ns_name.len);
	if (ns < 0) {
		r->error = "unknown namespace";
		return;
	}
	const struct config_ns *nsc = &h->cfg->ns[ns];
	if (!wt_given)
		sliding = nsc->window_type == CONFIG_WINDOW_SLIDING;
	if (!has_window) {
		window = rl_single_window(h->rl, ns);
		if (window == 0) {
			r->error = "missing window";
			return;
		}
	} else if (!rl_has_window(h->rl, ns, (uint32_t)window)) {
		r->error = "bad window";
		return;
	}
	if (!has_key) {
		r->error = "missing key";
		return;
	}
	const char *text, *why = "bad key";
	size_t keylen = key_text(h, &key, &text, &why);
	if (keylen == 0) {
		r->error = why;
		return;
	}

	struct rl_result res;
	double weight = sliding ? window_weight(now, (uint32_t)window) : 0.0;
	double lim = r->has_limit ? (double)limit : -1.0;
	if (rl_hit(h->rl, ns, text, keylen, (uint32_t)window, cost, weight, now, lim,
		   nsc->count_denied, &res) < 0) {
		enum rl_status st = rl_errno(h->rl);
		r->error = rl_status_str(st);
		if (st == RL_ERR_FULL)
			table_full(h, r, nsc, ns, now);
		return;
	}
	if (res.evicted)
		table_evicted(h, ns, now);

	r->window = (uint32_t)window;
	r->limit = (int64_t)limit;
	r->ns = ns;
	r->sliding = sliding;
	r->cost = cost;
	r->counted = res.counted;
	r->current = res.current;
	r->previous = res.previous;
	r->weight = res.weight;
	r->cur_idx = res.cur_idx;
	r->prev_idx = res.prev_idx;
	r->sync0 = nsc->sync_rate == 0 && h->sync;
	if (r->sync0)
		r->skeylen = (uint8_t)rl_stored_key(h->rl, text, keylen, r->skey);
	/* First sight of this key's window on this node: fetch what the
	 * cluster already counted, without waiting for it. */
	if (res.inserted && nsc->sync_rate > 0 && h->sync)
		sync_seed(h->sync, (unsigned)ns, res.cur_idx);
	finish_result(r, now);
}

/* A new key found no room in its namespace's share, even by eviction:
 * on_table_full says whether the request passes (the hit is not counted)
 * or is denied. Logged at most once a second. */
static void table_full(struct handler *h, struct msg_result *r, const struct config_ns *nsc,
		       int ns, double now)
{
	struct rl_ns_stats st = { 0 };

	h->full_events++;
	if (nsc->on_table_full == CONFIG_FULL_DENY) {
		r->exceeded = true;
		r->retry_after = 1;
	}
	if (now - h->last_full_log < 1.0)
		return;
	h->last_full_log = now;
	rl_ns_stats(h->rl, ns, &st);
	LOG(LOG_WARN, "namespace \"%s\": no room for a new key (%lld entries, share %llu): "
	    "%s (%llu refused in all, %llu in this worker)", nsc->name, (long long)st.live,
	    (unsigned long long)st.share,
	    nsc->on_table_full == CONFIG_FULL_DENY ? "denied" : "not counted, passed",
	    (unsigned long long)st.refused, (unsigned long long)h->full_events);
}

/* A new key evicted the least valuable entry of a full share. Logged at
 * most once a second. */
static void table_evicted(struct handler *h, int ns, double now)
{
	struct rl_ns_stats st = { 0 };

	if (now - h->last_evict_log < 1.0)
		return;
	h->last_evict_log = now;
	rl_ns_stats(h->rl, ns, &st);
	LOG(LOG_INFO, "namespace \"%s\": table share full (%lld entries, share %llu): "
	    "evicting the least used (%llu evicted so far)", h->cfg->ns[ns].name,
	    (long long)st.live, (unsigned long long)st.share, (unsigned long long)st.evicted);
}

/* ceil(v) as an int64, saturated: counts can exceed what a cast handles. */
static int64_t to_int(double v)
{
	v = ceil(v);
	if (!(v > 0))
		return 0;
	if (v >= 9.2e18)
		return INT64_MAX;
	return (int64_t)v;
}

/* Computes the variables of a result from its counts. */
static void finish_result(struct msg_result *r, double now)
{
	double rate = window_rate(r->current, r->previous, r->weight);

	r->rate = to_int(rate - 1e-9);
	r->reset = to_int(window_reset(now, r->window));
	if (r->reset < 1)
		r->reset = 1;
	if (r->has_limit) {
		r->exceeded = r->rate > r->limit;
		r->remaining = r->exceeded ? 0 : r->limit - r->rate;
		r->retry_after = 0;
		if (r->exceeded) {
			double ra = window_retry_after(r->current, r->previous, (double)r->limit, now,
						       r->window, r->sliding);
			r->retry_after = to_int(ra);
			if (r->retry_after < 1)
				r->retry_after = 1;
		}
	}
}

/* ---- encoding ---- */

/* The set-var actions of the plain variables are the same in every ACK up
 * to their value: their first bytes (action, nb-args, scope, name) are
 * encoded once by handler_init. Suffixed names are built per message. */
static const char *const var_names[VAR_COUNT] = {
	[VAR_EXCEEDED] = "exceeded", [VAR_RATE] = "rate", [VAR_REMAINING] = "remaining",
	[VAR_RESET] = "reset", [VAR_LIMIT] = "limit", [VAR_WINDOW] = "window",
	[VAR_RETRY_AFTER] = "retry_after", [VAR_ERROR] = "error",
};

static void var_headers_init(struct handler *h)
{
	for (int i = 0; i < VAR_COUNT; i++) {
		struct spop_writer w;
		spop_writer_init(&w, h->var_hdr[i], sizeof(h->var_hdr[i]));
		spop_put_u8(&w, SPOP_ACT_SET_VAR);
		spop_put_u8(&w, 3);
		spop_put_u8(&w, (uint8_t)h->cfg->var_scope);
		spop_put_str(&w, var_names[i], strlen(var_names[i]));
		h->var_hdr_len[i] = (uint8_t)w.len;
	}
}

/* Appends the start of a set-var action for variable id (with a suffix:
 * "<name>_<sfx>"); the caller appends the value. */
static void put_var_head(struct spop_writer *w, const struct handler *h, int id, const char *sfx)
{
	if (!sfx) {
		spop_put_bytes(w, h->var_hdr[id], h->var_hdr_len[id]);
		return;
	}
	char buf[16 + HANDLER_SUFFIX_MAX + 2];
	size_t n = strlen(var_names[id]), m = strlen(sfx);
	memcpy(buf, var_names[id], n);
	buf[n] = '_';
	memcpy(buf + n + 1, sfx, m);
	spop_put_u8(w, SPOP_ACT_SET_VAR);
	spop_put_u8(w, 3);
	spop_put_u8(w, (uint8_t)h->cfg->var_scope);
	spop_put_str(w, buf, n + 1 + m);
}

static void put_var_int(struct spop_writer *w, const struct handler *h, int id, const char *sfx,
			int64_t v)
{
	put_var_head(w, h, id, sfx);
	spop_put_u8(w, SPOP_DATA_INT64);
	spop_put_varint(w, (uint64_t)v);
}

static void put_var_bool(struct spop_writer *w, const struct handler *h, int id,
			 const char *sfx, bool v)
{
	put_var_head(w, h, id, sfx);
	spop_put_u8(w, SPOP_DATA_BOOL | (v ? SPOP_DATA_FL_TRUE : 0));
}

static void put_var_str(struct spop_writer *w, const struct handler *h, int id, const char *sfx,
			const char *v)
{
	put_var_head(w, h, id, sfx);
	spop_put_u8(w, SPOP_DATA_STRING);
	spop_put_str(w, v, strlen(v));
}

/* The variables of one result; sfx NULL for the plain names. The decision
 * variable goes first: HAProxy stops at the first action it cannot use. */
static void put_result(struct spop_writer *w, const struct handler *h, const struct msg_result *r,
		       const char *sfx)
{
	if (r->error) {
		/* on_table_full "deny": refused, and denied. */
		if (r->exceeded) {
			put_var_bool(w, h, VAR_EXCEEDED, sfx, true);
			put_var_int(w, h, VAR_RETRY_AFTER, sfx, r->retry_after);
		}
		put_var_str(w, h, VAR_ERROR, sfx, r->error);
		return;
	}
	if (r->has_limit)
		put_var_bool(w, h, VAR_EXCEEDED, sfx, r->exceeded);
	put_var_int(w, h, VAR_RATE, sfx, r->rate);
	if (r->has_limit)
		put_var_int(w, h, VAR_REMAINING, sfx, r->remaining);
	put_var_int(w, h, VAR_RESET, sfx, r->reset);
	if (r->has_limit)
		put_var_int(w, h, VAR_LIMIT, sfx, r->limit);
	put_var_int(w, h, VAR_WINDOW, sfx, r->window);
	if (r->exceeded)
		put_var_int(w, h, VAR_RETRY_AFTER, sfx, r->retry_after);
}

/* Is a more restrictive than b? Exceeded beats not exceeded (then the
 * longer retry_after), then less remaining; results without a limit and
 * errors rank last. */
static bool more_restrictive(const struct msg_result *a, const struct msg_result *b)
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

/* Encodes the ACK of results res[0..n) (extra: rate-limit messages
 * beyond HANDLER_MAX_MSGS, not counted). */
static int encode_ack(const struct handler *h, uint64_t sid, uint64_t fid,
		      const struct msg_result *res, size_t n, size_t extra, struct spop_writer *w,
		      size_t max_frame_size, enum spop_err *err)
{
	size_t start = spop_frame_begin(w, SPOP_FRAME_ACK, SPOP_FL_FIN, sid, fid);

	if (n == 0) {
		put_var_bool(w, h, VAR_EXCEEDED, NULL, false);
		if (extra)
			put_var_str(w, h, VAR_ERROR, NULL, "too many messages");
	} else {
		/* Plain variables: the most restrictive result, with exceeded,
		 * remaining and retry_after folded over all of them. */
		size_t best = 0;
		for (size_t i = 1; i < n; i++)
			if (more_restrictive(&res[i], &res[best]))
				best = i;
		struct msg_result plain = res[best];
		const char *error = NULL;
		for (size_t i = 0; i < n; i++) {
			const struct msg_result *r = &res[i];
			if (r->error) {
				error = error ? error : r->error;
				if (r->exceeded) {
					plain.exceeded = true;
					if (r->retry_after > plain.retry_after)
						plain.retry_after = r->retry_after;
				}
				continue;
			}
			if (!r->has_limit)
				continue;
			if (r->exceeded) {
				plain.exceeded = true;
				if (r->retry_after > plain.retry_after)
					plain.retry_after = r->retry_after;
			}
			if (r->remaining < plain.remaining)
				plain.remaining = r->remaining;
		}
		if (extra)
			error = "too many messages";
		put_result(w, h, &plain, NULL);
		if (error && !plain.error)
			put_var_str(w, h, VAR_ERROR, NULL, error);
		size_t plain_end = w->len;
		for (size_t i = 0; i < n; i++)
			if (res[i].suffix[0])
				put_result(w, h, &res[i], res[i].suffix);
		/* Too many suffixed variables for one frame: keep the plain ones. */
		if (w->overflow || w->len - start > max_frame_size + SPOP_LEN_SIZE) {
			w->overflow = false;
			w->len = plain_end;
		}
	}
	if (spop_frame_end(w, start, max_frame_size) < 0) {
		*err = SPOP_ERR_TOO_BIG;
		return -1;
	}
	return 0;
}

/* ---- synchronous namespaces (sync_rate 0) ----
 *
 * Each hit is counted locally, then pushed to the store with a read of
 * the previous window, and the ACK waits for the store's totals. Other
 * frames of the connection are answered meanwhile (pipelining lets ACKs
 * leave out of order). A NOTIFY waiting for its store is a `pending`;
 * pendings come from a per-worker pool (no allocation per message once
 * warm). If the store fails or times out, the answer uses the local count
 * (fail-open) and the hit goes into the slot's diff, which the retry cycle
 * of agent/sync.c pushes later. */

struct handler_pending {
	struct handler *h;
	void *owner;                             /* the connection; NULL once closed */
	struct handler_pending **list;           /* owner's list head */
	struct handler_pending *prev, *next;     /* owner's list, or the free list */
	uint64_t sid, fid;
	double now;
	size_t n, extra, nc;
	unsigned outstanding;                    /* pushes not answered yet */
	int ci[HANDLER_MAX_MSGS];                /* message -> its counter in c, or -1 */
	struct msg_result res[HANDLER_MAX_MSGS];
	struct shm_entry e[HANDLER_MAX_MSGS];    /* current window slot, by message */
	struct strategy_counter c[2 * HANDLER_MAX_MSGS];
};

static struct handler_pending *pending_get(struct handler *h)
{
	struct handler_pending *p = h->free_pending;

	if (p) {
		h->free_pending = p->next;
	} else {
		if (h->npending >= HANDLER_MAX_PENDING)
			return NULL;
		p = malloc(sizeof(*p));
		if (!p)
			return NULL;
	}
	h->npending++;
	p->h = h;
	p->owner = NULL;
	p->list = NULL;
	p->prev = p->next = NULL;
	p->outstanding = 0;
	return p;
}

static void pending_free_all(struct handler *h)
{
	while (h->free_pending) {
		struct handler_pending *p = h->free_pending;
		h->free_pending = p->next;
		free(p);
	}
}

static void pending_put(struct handler *h, struct handler_pending *p)
{
	p->next = h->free_pending;
	h->free_pending = p;
	h->npending--;
}

static void pending_unlink(struct handler_pending *p)
{
	if (!p->list)
		return;
	if (p->prev)
		p->prev->next = p->next;
	else
		*p->list = p->next;
	if (p->next)
		p->next->prev = p->prev;
	p->list = NULL;
	p->prev = p->next = NULL;
}

/* A hit the store did not confirm goes into its slot's diff: the retry
 * cycle pushes it later. If the slot was evicted meanwhile (its diff was
 * 0 while the push was in flight), the hit goes into a new one. */
static void keep_for_later(struct handler *h, struct msg_result *r, const struct shm_entry *e)
{
	if (!r->counted || !(r->cost > 0) || e->idx == UINT32_MAX)
		return;
	if (shm_restore_diff(rl_shm(h->rl), e, r->cost) == 0)
		return;
	if (rl_keep(h->rl, r->ns, e->key, e->keylen, e->size, e->start, r->cost, rl_now()) < 0)
		LOG(LOG_ERR, "namespace \"%s\": a hit the store did not confirm could not be kept "
		    "(%s)", h->cfg->ns[r->ns].name, rl_status_str(rl_errno(h->rl)));
}

/* Applies the store's answers to the table and the results. */
static void pending_finish(struct handler_pending *p)
{
	struct handler *h = p->h;
	bool failed = false;

	for (size_t i = 0; i < p->n; i++) {
		struct msg_result *r = &p->res[i];
		if (p->ci[i] < 0)
			continue;
		struct strategy_counter *cur = &p->c[p->ci[i]];
		if (!cur->ok) {
			keep_for_later(h, r, &p->e[i]);
			failed = true;
			continue;
		}
		if (p->e[i].idx != UINT32_MAX)
			shm_sync_total(rl_shm(h->rl), &p->e[i], cur->total);
		else
			rl_seed(h->rl, r->ns, cur->key, cur->key_len, cur->size, cur->start, cur->total,
				p->now);
		/* A hit refused by the limit was not pushed: report the rate it
		 * would have made, as for local namespaces. */
		r->current = cur->total + (r->counted ? 0 : r->cost);
		if (r->weight > 0) {
			struct strategy_counter *prev = cur + 1;
			if (prev->ok) {
				r->previous = prev->total;
				rl_seed(h->rl, r->ns, prev->key, prev->key_len, prev->size, prev->start,
					prev->total, p->now);
			}
		}
		finish_result(r, p->now);
	}
	if (failed) {
		h->sync_failures++;
		if (p->now - h->last_sync_log >= 10.0) {
			h->last_sync_log = p->now;
			LOG(LOG_WARN, "synchronous namespace: store did not confirm a hit; answering "
			    "from the local count, the hit will be pushed later (%llu so far)",
			    (unsigned long long)h->sync_failures);
		}
	}
}

static void pending_on_pushed(void *arg, int status, const char *errstr)
{
	struct handler_pending *p = arg;
	struct handler *h = p->h;
	(void)status, (void)errstr;

	if (--p->outstanding > 0)
		return;
	pending_finish(p);
	if (p->owner) {
		/* The owner writes the ACK and releases p. */
		h->deliver(p->owner, p);
		return;
	}
	pending_put(h, p);
}

/* Starts the store pushes of the synchronous messages of res. Returns the
 * pending (pushes in flight), or NULL when the answer can be given now
 * (every push refused: results stay local, hits kept for later). */
static struct handler_pending *start_sync(struct handler *h, uint64_t sid, uint64_t fid,
					  double now, struct msg_result *res, size_t n, size_t extra)
{
	struct handler_pending *p = pending_get(h);
	struct shm_table *t = rl_shm(h->rl);

	if (!p) {
		/* Too many NOTIFYs waiting for the store: answer locally. */
		for (size_t i = 0; i < n; i++) {
			struct shm_entry e;
			if (res[i].sync0 && !res[i].error && res[i].cur_idx != UINT32_MAX &&
			    shm_read(t, res[i].cur_idx, &e) == 0)
				keep_for_later(h, &res[i], &e);
		}
		return NULL;
	}
	p->sid = sid;
	p->fid = fid;
	p->now = now;
	p->n = n;
	p->extra = extra;
	p->nc = 0;
	memcpy(p->res, res, n * sizeof(*res));
	for (size_t i = 0; i < n; i++)
		p->ci[i] = -1;

	/* One push per namespace (each may have its own store). */
	for (size_t i = 0; i < n; i++) {
		int ns = p->res[i].ns;
		bool seen = false;
		if (!p->res[i].sync0 || p->res[i].error || p->ci[i] >= 0)
			continue;
		for (size_t j = 0; j < i && !seen; j++)
			seen = p->res[j].sync0 && !p->res[j].error && p->res[j].ns == ns;
		if (seen)
			continue;
		size_t first = p->nc;
		const char *nsname = h->cfg->ns[ns].name;
		for (size_t j = i; j < n; j++) {
			struct msg_result *r = &p->res[j];
			if (!r->sync0 || r->error || r->ns != ns)
				continue;
			struct shm_entry *e = &p->e[j];
			if (r->cur_idx == UINT32_MAX || shm_read(t, r->cur_idx, e) < 0) {
				/* No local slot (a read of a key this node has not
				 * counted): ask the store, seed the slot from it. */
				e->idx = UINT32_MAX;
				e->keylen = r->skeylen;
				memcpy(e->key, r->skey, r->skeylen);
				e->start = window_start(now, r->window);
				e->size = r->window;
			}
			p->ci[j] = (int)p->nc;
			p->c[p->nc++] = (struct strategy_counter){
				.ns = nsname, .ns_len = strlen(nsname), .key = e->key,
				.key_len = e->keylen, .start = e->start, .size = e->size,
				.diff = r->counted ? r->cost : 0,
			};
			if (r->weight > 0)
				p->c[p->nc++] = (struct strategy_counter){
					.ns = nsname, .ns_len = strlen(nsname), .key = e->key,
					.key_len = e->keylen, .start = e->start - (int64_t)e->size,
					.size = e->size, .diff = 0,
				};
		}
		if (p->nc > first && sync_push_now(h->sync, (unsigned)ns, &p->c[first],
						   p->nc - first, pending_on_pushed, p) == 0)
			p->outstanding++;
	}
	if (p->outstanding == 0) {
		/* Store not connected: answer from the local counts now. */
		pending_finish(p);
		memcpy(res, p->res, n * sizeof(*res));
		pending_put(h, p);
		return NULL;
	}
	return p;
}

int handler_encode_pending(struct handler *h, struct handler_pending *p, struct spop_writer *w,
			   size_t max_frame_size, enum spop_err *err)
{
	return encode_ack(h, p->sid, p->fid, p->res, p->n, p->extra, w, max_frame_size, err);
}

void handler_pending_release(struct handler *h, struct handler_pending *p)
{
	pending_unlink(p);
	pending_put(h, p);
}

void handler_pending_detach_all(struct handler_pending **list)
{
	while (*list) {
		struct handler_pending *p = *list;
		pending_unlink(p);
		p->owner = NULL;
	}
}

int handler_notify(struct handler *h, const struct spop_frame *f, double now,
		   struct spop_writer *w, size_t max_frame_size, enum spop_err *err,
		   void *owner, struct handler_pending **owned)
{
	struct spop_msg msgs[HANDLER_MAX_MSGS];
	struct msg_result res[HANDLER_MAX_MSGS];
	size_t n = 0, extra = 0;
	struct spop_cursor c;
	struct spop_msg m;
	bool sync0 = false;
	int rc;

	/* Pass 1: validate the whole payload before counting anything. */
	spop_cursor_init(&c, f->payload, f->payload_len);
	while ((rc = spop_msg_next(&c, &m)) == 1) {
		if (!is_ratelimit_msg(h, m.name))
			continue;
		if (n < HANDLER_MAX_MSGS)
			msgs[n++] = m;
		else
			extra++;
	}
	if (rc < 0) {
		*err = c.err;
		return -1;
	}

	/* Pass 2: count. */
	for (size_t i = 0; i < n; i++) {
		handle_msg(h, &msgs[i], now, &res[i]);
		sync0 |= res[i].sync0 && !res[i].error;
	}

	if (sync0) {
		struct handler_pending *p = start_sync(h, f->stream_id, f->frame_id, now, res, n,
						       extra);
		if (p) {
			p->owner = owner;
			p->list = owned;
			p->next = *owned;
			if (*owned)
				(*owned)->prev = p;
			*owned = p;
			return 1;
		}
		/* No pending (pool exhausted or store down): local answer. */
	}
	return encode_ack(h, f->stream_id, f->frame_id, res, n, extra, w, max_frame_size, err);
}
