/*
 * spop_handler.c - NOTIFY in, ACK out. The contract with HAProxy configs is
 * docs/PROTOCOL.md; this file is its implementation.
 *
 * A NOTIFY is read in two passes: the first validates every message and
 * argument (a malformed payload counts nothing), the second makes each
 * rate-limit message a request and decides them all as one decision
 * (decide_batch: admitted only if every limit admits). The ACK then
 * carries the plain variables of the most restrictive message, followed
 * by each message's own suffixed variables. A `release` message (a
 * concurrency namespace's lease given back: docs/PROTOCOL.md, "Leases")
 * is done first, answered by the variable `released`.
 */
#include "agent/spop_handler.h"

#include <arpa/inet.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/config.h"
#include "agent/decide.h"
#include "agent/reserve.h"
#include "agent/metrics.h"

static void var_headers_init(struct spop_handler *h);

int spop_handler_init(struct spop_handler *h, const struct config *cfg, struct decide *dec,
		 size_t max_frame_size)
{
	memset(h, 0, sizeof(*h));
	h->cfg = cfg;
	h->dec = dec;
	h->prefix_len = strlen(cfg->message_prefix);
	var_headers_init(h);
	/* The keys of one NOTIFY, as text: binary keys (at most a frame in
	 * all) twice as long as hex, and up to 64 bytes each for the others. */
	h->scratch_len = 2 * max_frame_size + 64 * SPOP_HANDLER_MAX_MSGS;
	h->scratch = malloc(h->scratch_len);
	return h->scratch ? 0 : -1;
}

void spop_handler_free(struct spop_handler *h)
{
	free(h->scratch);
	h->scratch = NULL;
}

/* ---- argument parsing ---- */

/* Parses a non-negative integer from an int or a string of digits. */
static bool arg_uint(const struct spop_data *d, uint64_t *out)
{
	if (d->type == SPOP_DATA_STRING)
		return decide_parse_uint(d->v.str.ptr, d->v.str.len, out);
	return spop_data_uint(d, out);
}

/* Parses a cost: an int >= 0, or a string holding a plain decimal number
 * (decide_parse_cost). */
static bool arg_cost(const struct spop_data *d, double *out)
{
	if (d->type == SPOP_DATA_STRING)
		return decide_parse_cost(d->v.str.ptr, d->v.str.len, out);
	uint64_t u;
	if (!arg_uint(d, &u) || u > (uint64_t)DECIDE_COST_MAX)
		return false;
	*out = (double)u;
	return true;
}

static bool str_eq(struct spop_str s, const char *lit)
{
	size_t n = strlen(lit);
	return s.len == n && memcmp(s.ptr, lit, n) == 0;
}

/* A flag: a bool, an int (0 or not) or a string "true", "false", "1",
 * "0". */
static bool arg_bool(const struct spop_data *d, bool *out)
{
	uint64_t u;

	if (d->type == SPOP_DATA_BOOL) {
		*out = d->v.b;
		return true;
	}
	if (d->type == SPOP_DATA_STRING && (str_eq(d->v.str, "true") || str_eq(d->v.str, "false"))) {
		*out = str_eq(d->v.str, "true");
		return true;
	}
	if (!arg_uint(d, &u) || u > 1)
		return false;
	*out = u == 1;
	return true;
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
static inline __attribute__((always_inline)) size_t
key_text(struct spop_handler *h, const struct spop_data *d, const char **text,
		       const char **why)
{
	char *out = h->scratch + h->scratch_used;

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
		if (d->v.str.len * 2 > h->scratch_len - h->scratch_used) {
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
		inet_ntop(AF_INET6, d->v.ipv6, out, (socklen_t)(h->scratch_len - h->scratch_used));
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
 * separator) into r->label, made safe for a variable name. */
static inline __attribute__((always_inline)) void
msg_suffix(struct spop_str name, size_t prefix_len, struct rl_request *r)
{
	const char *p = name.ptr + prefix_len;
	size_t len = name.len - prefix_len, n = 0;

	if (len > 0 && (*p == '-' || *p == '_' || *p == '.')) {
		p++;
		len--;
	}
	for (size_t i = 0; i < len && n < SPOP_HANDLER_SUFFIX_MAX; i++) {
		char c = p[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || c == '_';
		r->label[n++] = ok ? c : '_';
	}
	r->label[n] = '\0';
}

static bool is_ratelimit_msg(const struct spop_handler *h, struct spop_str name)
{
	return name.len >= h->prefix_len &&
	       memcmp(name.ptr, h->cfg->message_prefix, h->prefix_len) == 0;
}

/* "release", or "release" and a suffix after '-', '_' or '.': a lease
 * given back (a message the prefix does not claim). */
static bool is_release_msg(struct spop_str name)
{
	return name.len >= 7 && memcmp(name.ptr, "release", 7) == 0 &&
	       (name.len == 7 || name.ptr[7] == '-' || name.ptr[7] == '_' || name.ptr[7] == '.');
}

/* "settle", or "settle" and a suffix after '-', '_' or '.': a cost known
 * after the response (a reservation settled, or a charge). */
static bool is_settle_msg(struct spop_str name)
{
	return name.len >= 6 && memcmp(name.ptr, "settle", 6) == 0 &&
	       (name.len == 6 || name.ptr[6] == '-' || name.ptr[6] == '_' || name.ptr[6] == '.');
}

/* ---- the variables a message asks for (argument `vars`) ---- */

/* rl_request.answer: 0 = every variable (no `vars`); else ANSWER_GIVEN
 * with a bit per plain variable (low 16 bits) and per variable of the
 * message's own suffix (high bits). */
#define ANSWER_GIVEN     (1u << 31)
#define ANSWER_OWN_SHIFT 16
#define ANSWER_ALL       0xffffu
_Static_assert(VAR_COUNT <= 15, "a bit per variable, plain and own");

static int var_id(const char *s, size_t n);

/* The answer mask of `vars`: names separated by spaces or commas, each a
 * plain variable ("remaining") or one of this message's own
 * ("remaining_ip" for ratelimit-ip); 0 when a name is neither. */
static uint32_t parse_vars(struct spop_str v, const char *label)
{
	uint32_t mask = ANSWER_GIVEN;
	size_t lab = strlen(label), i = 0;

	while (i < v.len) {
		if (v.ptr[i] == ' ' || v.ptr[i] == ',') {
			i++;
			continue;
		}
		size_t j = i;
		while (j < v.len && v.ptr[j] != ' ' && v.ptr[j] != ',')
			j++;
		const char *t = v.ptr + i;
		size_t n = j - i;
		int id = var_id(t, n);
		if (id >= 0)
			mask |= 1u << id;
		else if (lab > 0 && n > lab + 1 && t[n - lab - 1] == '_' &&
			 memcmp(t + n - lab, label, lab) == 0 && (id = var_id(t, n - lab - 1)) >= 0)
			mask |= 1u << (ANSWER_OWN_SHIFT + id);
		else
			return 0;
		i = j;
	}
	return mask;
}

/* Parses one message's arguments into a request (its key's text, when
 * it needs one, appended to the scratch buffer). Inlined into both
 * callers: the NOTIFY's loop is the hot path. */
static inline __attribute__((always_inline)) void
msg_request(struct spop_handler *h, const struct spop_msg *m, struct rl_request *out)
{
	struct spop_data key = { .type = SPOP_DATA_NULL };
	bool has_key = false;
	uint64_t window = 0, limit = 0;
	struct rl_request rq = { .cost = 1, .window_type = DECIDE_WT_DEFAULT,
				 .front = FRONT_SPOP };
	struct spop_cursor c;
	struct spop_kv kv;

	msg_suffix(m->name, h->prefix_len, &rq);
	spop_args_init(&c, m);
	while (spop_args_next(&c, &kv) == 1) {
		const struct spop_kv *a = &kv;
		if (str_eq(a->name, "key")) {
			key = a->value;
			has_key = true;
		} else if (str_eq(a->name, "window")) {
			if (!arg_uint(&a->value, &window) || window == 0 || window > UINT32_MAX) {
				rq.arg_error = "bad window";
				goto decide;
			}
		} else if (str_eq(a->name, "cost")) {
			if (!arg_cost(&a->value, &rq.cost)) {
				rq.arg_error = "bad cost";
				goto decide;
			}
		} else if (str_eq(a->name, "namespace")) {
			if (a->value.type != SPOP_DATA_STRING) {
				rq.arg_error = "bad namespace";
				goto decide;
			}
			rq.ns = a->value.v.str.ptr;
			rq.ns_len = a->value.v.str.len;
		} else if (str_eq(a->name, "limit")) {
			if (!arg_uint(&a->value, &limit) || limit > (uint64_t)DECIDE_COST_MAX) {
				rq.arg_error = "bad limit";
				goto decide;
			}
			rq.has_limit = true;
			rq.limit = (int64_t)limit;
		} else if (str_eq(a->name, "admission")) {
			if (a->value.type != SPOP_DATA_STRING ||
			    (rq.admission = decide_parse_admission(a->value.v.str.ptr,
								    a->value.v.str.len)) < 0) {
				rq.arg_error = "bad admission";
				goto decide;
			}
		} else if (str_eq(a->name, "vars")) {
			if (a->value.type != SPOP_DATA_STRING ||
			    (rq.answer = parse_vars(a->value.v.str, rq.label)) == 0) {
				rq.arg_error = "bad vars";
				goto decide;
			}
		} else if (str_eq(a->name, "window_type")) {
			if (a->value.type == SPOP_DATA_STRING && str_eq(a->value.v.str, "sliding"))
				rq.window_type = DECIDE_WT_SLIDING;
			else if (a->value.type == SPOP_DATA_STRING && str_eq(a->value.v.str, "fixed"))
				rq.window_type = DECIDE_WT_FIXED;
			else {
				rq.arg_error = "bad window_type";
				goto decide;
			}
		} else if (str_eq(a->name, "reserve")) {
			if (!arg_bool(&a->value, &rq.reserve)) {
				rq.arg_error = "bad reserve";
				goto decide;
			}
		}
		/* Unknown arguments are ignored. */
	}
decide:
	rq.window = (uint32_t)window;
	if (has_key) {
		const char *why = "bad key";
		rq.key_len = key_text(h, &key, &rq.key, &why);
		if (rq.key_len == 0)
			rq.key_error = why;
		else if (rq.key >= h->scratch && rq.key < h->scratch + h->scratch_len)
			h->scratch_used += rq.key_len;
	}
	*out = rq;
}

/* ---- encoding ---- */

/* The set-var actions of the plain variables are the same in every ACK up
 * to their value: their first bytes (action, nb-args, scope, name) are
 * encoded once by spop_handler_init. Suffixed names are built per message. */
static const char *const var_names[VAR_COUNT] = {
	[VAR_EXCEEDED] = "exceeded", [VAR_RATE] = "rate", [VAR_REMAINING] = "remaining",
	[VAR_RESET] = "reset", [VAR_LIMIT] = "limit", [VAR_WINDOW] = "window",
	[VAR_RETRY_AFTER] = "retry_after", [VAR_ERROR] = "error", [VAR_DEGRADED] = "degraded", [VAR_DELAYED_MS] = "delayed_ms",
	[VAR_SHADOW_EXCEEDED] = "shadow_exceeded", [VAR_LEASE] = "lease",
	[VAR_RELEASED] = "released", [VAR_RESERVATION] = "reservation", [VAR_SETTLED] = "settled",
};

static int var_id(const char *s, size_t n)
{
	for (int i = 0; i < VAR_COUNT; i++)
		if (strlen(var_names[i]) == n && memcmp(var_names[i], s, n) == 0)
			return i;
	return -1;
}

static void var_headers_init(struct spop_handler *h)
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

/* The start of a set-var action of a suffixed name, "<name>_<sfx>": out
 * of line, so that the plain names' path (put_var_head) keeps no buffer
 * on its stack. */
static __attribute__((noinline)) void put_var_head_sfx(struct spop_writer *w,
							const struct spop_handler *h, int id,
							const char *sfx)
{
	char buf[16 + SPOP_HANDLER_SUFFIX_MAX + 2];
	size_t n = strlen(var_names[id]), m = strlen(sfx);
	memcpy(buf, var_names[id], n);
	buf[n] = '_';
	memcpy(buf + n + 1, sfx, m);
	spop_put_u8(w, SPOP_ACT_SET_VAR);
	spop_put_u8(w, 3);
	spop_put_u8(w, (uint8_t)h->cfg->var_scope);
	spop_put_str(w, buf, n + 1 + m);
}

/* Appends the start of a set-var action for variable id (with a suffix:
 * "<name>_<sfx>"); the caller appends the value. */
static void put_var_head(struct spop_writer *w, const struct spop_handler *h, int id, const char *sfx)
{
	if (sfx)
		put_var_head_sfx(w, h, id, sfx);
	else
		spop_put_bytes(w, h->var_hdr[id], h->var_hdr_len[id]);
}

static void put_var_int(struct spop_writer *w, const struct spop_handler *h, int id, const char *sfx,
			int64_t v)
{
	put_var_head(w, h, id, sfx);
	spop_put_u8(w, SPOP_DATA_INT64);
	spop_put_varint(w, (uint64_t)v);
}

static void put_var_bool(struct spop_writer *w, const struct spop_handler *h, int id,
			 const char *sfx, bool v)
{
	put_var_head(w, h, id, sfx);
	spop_put_u8(w, SPOP_DATA_BOOL | (v ? SPOP_DATA_FL_TRUE : 0));
}

static void put_var_str(struct spop_writer *w, const struct spop_handler *h, int id, const char *sfx,
			const char *v)
{
	put_var_head(w, h, id, sfx);
	spop_put_u8(w, SPOP_DATA_STRING);
	spop_put_str(w, v, strlen(v));
}

/* The variable `lease` of r, if it took one: out of line, so that the
 * other variables' path keeps no buffer on its stack. Its value is always
 * a STRING of ALGO_LEASE_LEN bytes (its length one varint byte), written
 * in place; the plain name's set-var start too, in the same room: its
 * header row copied whole (a fixed-size copy; what follows the header is
 * written over next). */
static __attribute__((noinline)) void put_lease(struct spop_writer *w,
						 const struct spop_handler *h,
						 const struct rl_decision *r, const char *sfx)
{
	char lease[ALGO_LEASE_LEN + 1];
	uint8_t *p;

	_Static_assert(ALGO_LEASE_LEN < 240, "a lease's length is one varint byte");
	_Static_assert(sizeof(h->var_hdr[VAR_LEASE]) <= 2 + ALGO_LEASE_LEN,
		       "the header row fits the room of the plain variable");
	if (!decide_lease_text(r, lease))
		return;
	if (sfx) {
		put_var_head_sfx(w, h, VAR_LEASE, sfx);
		p = spop_put_room(w, 2 + ALGO_LEASE_LEN);
	} else if ((p = spop_put_room(w, h->var_hdr_len[VAR_LEASE] + 2 + ALGO_LEASE_LEN))) {
		memcpy(p, h->var_hdr[VAR_LEASE], sizeof(h->var_hdr[VAR_LEASE]));
		p += h->var_hdr_len[VAR_LEASE];
	}
	if (p) {
		p[0] = SPOP_DATA_STRING;
		p[1] = ALGO_LEASE_LEN;
		memcpy(p + 2, lease, ALGO_LEASE_LEN);
	}
}

/* The plain `lease`: the first of res[0..n) that took one. */
static __attribute__((noinline)) void put_plain_lease(struct spop_writer *w,
						       const struct spop_handler *h,
						       const struct rl_decision *res, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (res[i].algo == NS_ALGO_CONCURRENCY && res[i].counted) {
			put_lease(w, h, &res[i], NULL);
			return;
		}
}

/* The variables of one result that `want` names (a bit per enum
 * handler_var); sfx NULL for the plain names. An error is always said.
 * The decision variable goes first: HAProxy stops at the first action it
 * cannot use. */
static void put_result(struct spop_writer *w, const struct spop_handler *h, const struct rl_decision *r,
		       const char *sfx, uint32_t want)
{
#define WANT(id) (want & (1u << (id)))
	if (r->error) {
		/* on_table_full "deny": refused, and denied. */
		if (r->exceeded) {
			if (WANT(VAR_EXCEEDED))
				put_var_bool(w, h, VAR_EXCEEDED, sfx, true);
			if (WANT(VAR_RETRY_AFTER))
				put_var_int(w, h, VAR_RETRY_AFTER, sfx, r->retry_after);
		}
		if (r->shadow && WANT(VAR_SHADOW_EXCEEDED))
			put_var_bool(w, h, VAR_SHADOW_EXCEEDED, sfx, r->shadow_exceeded);
		put_var_str(w, h, VAR_ERROR, sfx, r->error);
		return;
	}
	if (r->has_limit && WANT(VAR_EXCEEDED))
		put_var_bool(w, h, VAR_EXCEEDED, sfx, r->exceeded);
	if (WANT(VAR_RATE))
		put_var_int(w, h, VAR_RATE, sfx, r->rate);
	if (r->has_limit && WANT(VAR_REMAINING))
		put_var_int(w, h, VAR_REMAINING, sfx, r->remaining);
	if (WANT(VAR_RESET))
		put_var_int(w, h, VAR_RESET, sfx, r->reset);
	if (r->has_limit && WANT(VAR_LIMIT))
		put_var_int(w, h, VAR_LIMIT, sfx, r->limit);
	if (WANT(VAR_WINDOW))
		put_var_int(w, h, VAR_WINDOW, sfx, r->window);
	if (r->exceeded && WANT(VAR_RETRY_AFTER))
		put_var_int(w, h, VAR_RETRY_AFTER, sfx, r->retry_after);
	if (r->degraded && WANT(VAR_DEGRADED))
		put_var_bool(w, h, VAR_DEGRADED, sfx, true);
	if (r->delayed_ms > 0 && WANT(VAR_DELAYED_MS))
		put_var_int(w, h, VAR_DELAYED_MS, sfx, r->delayed_ms);
	if (r->shadow && r->has_limit && WANT(VAR_SHADOW_EXCEEDED))
		put_var_bool(w, h, VAR_SHADOW_EXCEEDED, sfx, r->shadow_exceeded);
	/* The plain lease is encode_ack's (the first message's that took one). */
	if (sfx && WANT(VAR_LEASE) && r->algo == NS_ALGO_CONCURRENCY && r->counted)
		put_lease(w, h, r, sfx);
#undef WANT
}

/* What the `release` (or `settle`) messages of a NOTIFY did (an ACK's `released` and
 * `error`; kept in a held batch's tag[2], bits 48 and up). */
enum release_state {
	RELEASE_NONE = 0,             /* no release message */
	RELEASE_NOTHING,              /* ... none freed a lease */
	RELEASE_FREED,                /* ... one freed one at least */
	RELEASE_STATE_COUNT
};

/* A `release` message: its namespace, key and window as a rate-limit
 * message's, its `lease` the id to give back: a string; absent, any one
 * lease of the key; NULL (var(txn.<prefix>.lease) of a request that took
 * none), nothing. Returns 1 freed, 0 not, -1 with *error. */
static int msg_release(struct spop_handler *h, const struct spop_msg *m, double now,
		       const char **error)
{
	struct rl_request rq;
	struct spop_cursor c;
	struct spop_kv kv;
	const char *id = NULL;
	size_t idlen = 0;

	msg_request(h, m, &rq);
	spop_args_init(&c, m);
	while (spop_args_next(&c, &kv) == 1) {
		if (!str_eq(kv.name, "lease"))
			continue;
		if (kv.value.type != SPOP_DATA_NULL && kv.value.type != SPOP_DATA_STRING) {
			*error = "bad lease";
			return -1;
		}
		/* NULL or empty: an id that names no lease (frees nothing, the
		 * message checked all the same). */
		bool none = kv.value.type == SPOP_DATA_NULL || kv.value.v.str.len == 0;
		id = none ? "-" : kv.value.v.str.ptr;
		idlen = none ? 1 : kv.value.v.str.len;
	}
	return decide_release(h->dec, &rq, id, idlen, now, error);
}

/* A `settle` message: its `reservation` settled at its `cost` (a string;
 * NULL or empty: a request that holds none, nothing done), or without a
 * reservation, its namespace, key (and window) charged the cost after the
 * fact. Returns 1 applied, 0 not, -1 with *error. */
static int msg_settle(struct spop_handler *h, const struct spop_msg *m, double now,
		      const char **error)
{
	struct rl_request rq;
	struct spop_cursor c;
	struct spop_kv kv;
	struct spop_str id = { .ptr = NULL };
	bool has_id = false, has_cost = false;

	msg_request(h, m, &rq);
	spop_args_init(&c, m);
	while (spop_args_next(&c, &kv) == 1) {
		if (str_eq(kv.name, "cost"))
			has_cost = true;
		if (!str_eq(kv.name, "reservation"))
			continue;
		if (kv.value.type != SPOP_DATA_NULL && kv.value.type != SPOP_DATA_STRING) {
			*error = "bad reservation";
			return -1;
		}
		has_id = true;
		id = kv.value.type == SPOP_DATA_STRING ? kv.value.v.str : (struct spop_str){ 0 };
	}
	if (!has_cost || (rq.arg_error && strcmp(rq.arg_error, "bad cost") == 0)) {
		*error = has_cost ? "bad cost" : "missing cost";
		return -1;
	}
	if (!has_id)
		return reserve_charge(h->dec, &rq, now, error);
	return id.len == 0 ? 0 : reserve_settle(h->dec, id.ptr, id.len, rq.cost, now, error);
}

/* The variable `reservation` (with sfx: its own) of request req of
 * parts[0..np) (RESERVE_PLAIN: the plain one), if it holds one. Out of
 * line, so that the other variables' path keeps no buffer on its stack. */
static __attribute__((noinline)) void put_reservation(struct spop_writer *w,
						       const struct spop_handler *h,
						       const struct rl_decision *parts, size_t np,
						       size_t req, const char *sfx)
{
	char id[RESERVE_TEXT_MAX + 1];

	if (reserve_text(h->dec->rl, parts, np, req, id))
		put_var_str(w, h, VAR_RESERVATION, sfx, id);
}

/* The variables of the NOTIFY's `release` and `settle` messages: what
 * they did, and the first error of one (error: NULL when the ACK has
 * rate-limit messages). Out of line: rare. */
static __attribute__((noinline)) void put_release_vars(struct spop_writer *w,
							const struct spop_handler *h,
							enum release_state rel,
							enum release_state settle,
							const char *error)
{
	if (rel != RELEASE_NONE)
		put_var_bool(w, h, VAR_RELEASED, NULL, rel == RELEASE_FREED);
	if (settle != RELEASE_NONE)
		put_var_bool(w, h, VAR_SETTLED, NULL, settle == RELEASE_FREED);
	if (error)
		put_var_str(w, h, VAR_ERROR, NULL, error);
}

/* Encodes the ACK of the parts[0..np) of a batch of nmsg messages (extra:
 * rate-limit messages beyond SPOP_HANDLER_MAX_MSGS, not counted). */
static int encode_ack(const struct spop_handler *h, uint64_t sid, uint64_t fid,
		      const struct rl_decision *parts, size_t np, size_t nmsg, size_t extra,
		      enum release_state rel, enum release_state settle, const char *rel_error,
		      struct spop_writer *w, size_t max_frame_size, enum spop_err *err)
{
	size_t start = spop_frame_begin(w, SPOP_FRAME_ACK, SPOP_FL_FIN, sid, fid);
	const struct rl_decision *res = parts;
	struct rl_decision msg[SPOP_HANDLER_MAX_MSGS];
	size_t n = np;

	/* A message checked against several windows: its parts folded. */
	if (np != nmsg) {
		const char *e;
		n = 0;
		for (size_t i = 0; i < nmsg; i++)
			if (decide_request_result(parts, np, i, &msg[n], &e))
				n++;
		res = msg;
	}
	if ((rel | settle) != RELEASE_NONE)
		put_release_vars(w, h, rel, settle, n == 0 ? rel_error : NULL);
	if (n == 0) {
		if ((rel | settle) == RELEASE_NONE)
			put_var_bool(w, h, VAR_EXCEEDED, NULL, false);
		if (extra)
			put_var_str(w, h, VAR_ERROR, NULL, "too many messages");
	} else {
		/* Plain variables: the most restrictive result, with exceeded,
		 * remaining and retry_after folded over all of them. */
		struct rl_decision plain;
		const char *error;
		uint32_t want = 0;
		size_t first = w->len;
		decide_fold(res, n, &plain, &error);
		if (extra)
			error = "too many messages";
		/* The plain variables any message asks for (`vars`; all of
		 * them for a message without). */
		bool leases = false, reserved = false;
		/* A folded result is one of its parts (decide_fold): a
		 * request's parts all reserve or none does. */
		for (size_t i = 0; i < n; i++) {
			want |= res[i].answer ? res[i].answer & ANSWER_ALL : ANSWER_ALL;
			leases |= res[i].algo == NS_ALGO_CONCURRENCY;
			reserved |= res[i].reserve;
		}
		put_result(w, h, &plain, NULL, want);
		/* The plain lease: the first message's that took one. */
		if (leases && (want & (1u << VAR_LEASE)))
			put_plain_lease(w, h, res, n);
		/* The plain reservation: the first message's that holds one,
		 * with the windows of the others of its namespace and key. */
		if (reserved && (want & (1u << VAR_RESERVATION)))
			put_reservation(w, h, parts, np, RESERVE_PLAIN, NULL);
		if (error && !plain.error)
			put_var_str(w, h, VAR_ERROR, NULL, error);
		size_t plain_end = w->len;
		for (size_t i = 0; i < n; i++) {
			uint32_t own = res[i].answer ? res[i].answer >> ANSWER_OWN_SHIFT & ANSWER_ALL
						     : ANSWER_ALL;
			if (!res[i].label[0])
				continue;
			put_result(w, h, &res[i], res[i].label, own);
			if (reserved && (own & (1u << VAR_RESERVATION)))
				put_reservation(w, h, parts, np, i, res[i].label);
		}
		/* Too many suffixed variables for one frame: keep the plain ones. */
		if (w->overflow || w->len - start > max_frame_size + SPOP_LEN_SIZE) {
			w->overflow = false;
			w->len = plain_end;
		}
		/* Every ACK sets a variable: `vars` that names none of those
		 * this answer has gets the plain exceeded. */
		if (w->len == first)
			put_var_bool(w, h, VAR_EXCEEDED, NULL, plain.exceeded);
	}
	if (spop_frame_end(w, start, max_frame_size) < 0) {
		*err = SPOP_ERR_TOO_BIG;
		return -1;
	}
	return 0;
}

int spop_handler_encode_pending(struct spop_handler *h, struct decide_pending *p, struct spop_writer *w,
			   size_t max_frame_size, enum spop_err *err)
{
	const uint64_t *tag = decide_pending_tag(p);
	size_t n;
	const struct rl_decision *res = decide_pending_results(p, &n);

	/* tag[2]: the messages (low 32 bits), those beyond the batch (bits
	 * 32..47), what its release messages did (48..55) and its settle
	 * messages (56 and up; their errors are answered only by an ACK
	 * without rate-limit messages, never held). */
	return encode_ack(h, tag[0], tag[1], res, n, (size_t)(tag[2] & 0xffffffffu),
			  (size_t)(tag[2] >> 32 & 0xffffu), (enum release_state)(tag[2] >> 48 & 0xff),
			  (enum release_state)(tag[2] >> 56), NULL, w, max_frame_size, err);
}

int spop_handler_notify(struct spop_handler *h, const struct spop_frame *f, double now,
		   struct spop_writer *w, size_t max_frame_size, enum spop_err *err,
		   struct decide_owner *owner)
{
	struct spop_msg msgs[SPOP_HANDLER_MAX_MSGS], rels[SPOP_HANDLER_MAX_MSGS];
	struct spop_msg sets[SPOP_HANDLER_MAX_MSGS];
	struct rl_request rqs[SPOP_HANDLER_MAX_MSGS];
	struct rl_decision res[DECIDE_MAX_BATCH];
	size_t n = 0, extra = 0, nrel = 0, nset = 0, np;
	enum release_state rel = RELEASE_NONE, settle = RELEASE_NONE;
	const char *rel_error = NULL;
	struct spop_cursor c;
	struct spop_msg m;
	int rc;

	/* Pass 1: validate the whole payload before counting anything. */
	spop_cursor_init(&c, f->payload, f->payload_len);
	while ((rc = spop_msg_next(&c, &m)) == 1) {
		if (!is_ratelimit_msg(h, m.name)) {
			if (is_release_msg(m.name) && nrel < SPOP_HANDLER_MAX_MSGS)
				rels[nrel++] = m;
			else if (is_settle_msg(m.name) && nset < SPOP_HANDLER_MAX_MSGS)
				sets[nset++] = m;
			continue;
		}
		if (n < SPOP_HANDLER_MAX_MSGS)
			msgs[n++] = m;
		else
			extra++;
	}
	if (rc < 0) {
		*err = c.err;
		return -1;
	}

	/* Pass 2: the leases given back, then one decision over every
	 * rate-limit message. */
	h->scratch_used = 0;
	for (size_t i = 0; i < nrel; i++) {
		const char *why = NULL;
		int freed = msg_release(h, &rels[i], now, &why);
		rel = freed > 0 || rel == RELEASE_FREED ? RELEASE_FREED : RELEASE_NOTHING;
		if (freed < 0 && !rel_error)
			rel_error = why;
	}
	for (size_t i = 0; i < nset; i++) {
		const char *why = NULL;
		h->scratch_used = 0;
		int done = msg_settle(h, &sets[i], now, &why);
		settle = done > 0 || settle == RELEASE_FREED ? RELEASE_FREED : RELEASE_NOTHING;
		if (done < 0 && !rel_error)
			rel_error = why;
	}
	h->scratch_used = 0;
	for (size_t i = 0; i < n; i++)
		msg_request(h, &msgs[i], &rqs[i]);
	struct decide_pending *p = decide_run(h->dec, rqs, n, now, res, DECIDE_MAX_BATCH, &np,
					      owner);
	if (p) {
		/* It waits for a store, or is delayed: answered later. */
		uint64_t *tag = decide_pending_tag(p);
		tag[0] = f->stream_id;
		tag[1] = f->frame_id;
		tag[2] = (uint64_t)settle << 56 | (uint64_t)rel << 48 | (uint64_t)extra << 32 | n;
		return 1;
	}
	return encode_ack(h, f->stream_id, f->frame_id, res, np, n, extra, rel, settle, rel_error,
			  w, max_frame_size, err);
}
