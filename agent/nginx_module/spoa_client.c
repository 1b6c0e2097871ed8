/*
 * spoa_client.c - the SPOP client core of the nginx module (see
 * spoa_client.h): frames built into and parsed from the caller's buffers,
 * each NOTIFY sized to the agent's max-frame-size (keys digested with the
 * agent's own function, agent/hash.c, when it must), streams matched by
 * stream-id and frame-id. Pure: no allocation, no I/O.
 */
#include <string.h>

#include "agent/nginx_module/spoa_client.h"

static const char msg_name[] = "ratelimit";
static const char release_name[] = "release";
static const char settle_name[] = "settle";

static void slots_reset(struct sc_conn *c)
{
	for (uint32_t i = 0; i < c->nslots; i++) {
		c->slots[i].user = NULL;
		c->slots[i].next_free = i + 1 < c->nslots ? i + 1 : SC_NONE;
		/* gen is kept: an ACK of an earlier socket never matches. */
	}
	c->free_head = c->nslots ? 0 : SC_NONE;
	c->inflight = 0;
}

void sc_conn_init(struct sc_conn *c, uint8_t *in, size_t in_cap, uint8_t *out, size_t out_cap,
		  struct sc_slot *slots, uint32_t nslots, const uint8_t digest_key[16])
{
	memset(c, 0, sizeof(*c));
	memcpy(c->digest_key, digest_key, sizeof(c->digest_key));
	c->in = in;
	c->in_cap = in_cap;
	c->out = out;
	c->out_cap = out_cap;
	c->slots = slots;
	c->nslots = nslots;
	for (uint32_t i = 0; i < nslots; i++)
		slots[i].gen = 0;
	slots_reset(c);
	c->state = SC_DOWN;
	c->max_frame = SC_FRAME_SIZE;
}

static void buffers_reset(struct sc_conn *c)
{
	c->in_len = c->in_off = 0;
	c->out_len = c->out_off = 0;
	c->err = SPOP_ERR_NONE;
	c->why = NULL;
	c->by_agent = false;
	c->detail[0] = '\0';
}

void sc_conn_start(struct sc_conn *c)
{
	struct spop_writer w;

	buffers_reset(c);
	slots_reset(c);
	c->max_frame = SC_FRAME_SIZE;
	c->max_inflight = 1;
	spop_writer_init(&w, c->out, c->out_cap);
	/* Cannot fail: the buffer holds a whole frame (sc_conn_init). */
	(void)spop_encode_haproxy_hello(&w, SPOP_VERSION, SC_FRAME_SIZE, "pipelining", false, NULL);
	c->out_len = w.len;
	c->state = SC_HELLO;
}

void sc_conn_stop(struct sc_conn *c)
{
	c->in_len = c->in_off = 0;
	c->out_len = c->out_off = 0;
	c->state = SC_DOWN;
}

/* Moves what is left to write to the front of `out`. */
static void out_compact(struct sc_conn *c)
{
	if (c->out_off == 0)
		return;
	memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
	c->out_len -= c->out_off;
	c->out_off = 0;
}

int sc_disconnect(struct sc_conn *c, enum spop_err status)
{
	struct spop_writer w;

	out_compact(c);
	spop_writer_init(&w, c->out + c->out_len, c->out_cap - c->out_len);
	if (spop_encode_haproxy_disconnect(&w, status, NULL) < 0)
		return -1;
	c->out_len += w.len;
	return 0;
}

size_t sc_out_pending(const struct sc_conn *c, const uint8_t **p)
{
	*p = c->out + c->out_off;
	return c->out_len - c->out_off;
}

void sc_out_done(struct sc_conn *c, size_t n)
{
	if (n > c->out_len - c->out_off)
		n = c->out_len - c->out_off;
	c->out_off += n;
	if (c->out_off == c->out_len)
		c->out_off = c->out_len = 0;
}

size_t sc_in_room(struct sc_conn *c, uint8_t **p)
{
	if (c->in_off > 0 && c->in_len == c->in_cap) {
		memmove(c->in, c->in + c->in_off, c->in_len - c->in_off);
		c->in_len -= c->in_off;
		c->in_off = 0;
	}
	*p = c->in + c->in_len;
	return c->in_cap - c->in_len;
}

void sc_in_add(struct sc_conn *c, size_t n)
{
	if (n > c->in_cap - c->in_len)
		n = c->in_cap - c->in_len;
	c->in_len += n;
}

static int fail(struct sc_conn *c, enum spop_err err, const char *why)
{
	c->err = err;
	c->why = why;
	return -1;
}

/* Copies a string into a fixed buffer, bytes outside printable ASCII
 * made '?': the agent's words end up in nginx variables and logs. */
static size_t copy_printable(char *dst, size_t cap, struct spop_str s)
{
	size_t n = s.len < cap ? s.len : cap;

	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s.ptr[i];
		dst[i] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
	}
	return n;
}

static bool name_is(struct spop_str name, const char *lit)
{
	size_t n = strlen(lit);

	return name.len == n && memcmp(name.ptr, lit, n) == 0;
}

static int on_hello(struct sc_conn *c, const struct spop_frame *f)
{
	struct spop_hello h;
	enum spop_err err;

	if (c->state != SC_HELLO)
		return fail(c, SPOP_ERR_INVALID, "AGENT-HELLO after the handshake");
	if (spop_hello_decode(f->payload, f->payload_len, &h, &err) < 0)
		return fail(c, err, "malformed AGENT-HELLO");
	if (!spop_version_supported(h.supported_versions, SPOP_VERSION))
		return fail(c, SPOP_ERR_BAD_VSN, "the agent does not speak SPOP 2.0");
	if (h.max_frame_size < SPOP_MIN_FRAME_SIZE || h.max_frame_size > SC_FRAME_SIZE)
		return fail(c, SPOP_ERR_BAD_FRAME_SIZE, "the agent's max-frame-size is out of bounds");
	c->max_frame = (uint32_t)h.max_frame_size;
	c->max_inflight = spop_has_capability(h.capabilities, "pipelining") ? c->nslots : 1;
	c->state = SC_READY;
	return 0;
}

static int on_disconnect(struct sc_conn *c, const struct spop_frame *f)
{
	struct spop_disconnect d;
	enum spop_err err;
	size_t n;

	if (spop_disconnect_decode(f->payload, f->payload_len, &d, &err) < 0)
		return fail(c, err, "malformed AGENT-DISCONNECT");
	n = copy_printable(c->detail, sizeof(c->detail) - 1, d.message);
	c->detail[n] = '\0';
	c->by_agent = true;
	return fail(c, d.has_status_code ? (enum spop_err)d.status_code : SPOP_ERR_UNKNOWN,
		    "AGENT-DISCONNECT");
}

/* The set-var actions of an ACK into *r. */
static int parse_ack(struct sc_conn *c, const struct spop_frame *f, struct sc_result *r)
{
	struct spop_cursor cur;
	enum spop_action_type type;
	enum spop_scope scope;
	struct spop_str name;
	struct spop_data v;
	uint64_t u;
	int rc;

	memset(r, 0, sizeof(*r));
	spop_cursor_init(&cur, f->payload, f->payload_len);
	while ((rc = spop_action_next(&cur, &type, &scope, &name, &v)) == 1) {
		if (type != SPOP_ACT_SET_VAR)
			continue;
		if (v.type == SPOP_DATA_BOOL) {
			if (name_is(name, "exceeded")) {
				r->has |= SC_HAS_EXCEEDED;
				r->exceeded = v.v.b;
			} else if (name_is(name, "degraded")) {
				r->degraded = v.v.b;
			}
		} else if (v.type == SPOP_DATA_STRING) {
			if (name_is(name, "error")) {
				r->has |= SC_HAS_ERROR;
				r->error_len = copy_printable(r->error, sizeof(r->error), v.v.str);
			} else if (name_is(name, "lease") && v.v.str.len <= sizeof(r->lease)) {
				r->has |= SC_HAS_LEASE;
				r->lease_len = copy_printable(r->lease, sizeof(r->lease), v.v.str);
			} else if (name_is(name, "reservation") &&
				   v.v.str.len <= sizeof(r->reservation)) {
				r->has |= SC_HAS_RESERVATION;
				r->reservation_len = copy_printable(r->reservation,
								    sizeof(r->reservation), v.v.str);
			}
		} else if (spop_data_uint(&v, &u)) {
			static const struct {
				const char *name;
				unsigned bit;
				size_t off;
			} ints[] = {
				{ "rate", SC_HAS_RATE, offsetof(struct sc_result, rate) },
				{ "remaining", SC_HAS_REMAINING, offsetof(struct sc_result, remaining) },
				{ "reset", SC_HAS_RESET, offsetof(struct sc_result, reset) },
				{ "limit", SC_HAS_LIMIT, offsetof(struct sc_result, limit) },
				{ "window", SC_HAS_WINDOW, offsetof(struct sc_result, window) },
				{ "retry_after", SC_HAS_RETRY_AFTER, offsetof(struct sc_result, retry_after) },
			};
			for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
				if (name_is(name, ints[i].name)) {
					r->has |= ints[i].bit;
					memcpy((char *)r + ints[i].off, &u, sizeof(u));
					break;
				}
			}
		}
	}
	if (rc < 0)
		return fail(c, cur.err, "malformed ACK");
	return 0;
}

static void slot_free(struct sc_conn *c, uint32_t i)
{
	c->slots[i].user = NULL;
	c->slots[i].next_free = c->free_head;
	c->free_head = i;
	c->inflight--;
}

int sc_next(struct sc_conn *c, struct sc_event *ev)
{
	struct spop_frame f;
	enum spop_err err;
	int n;

	for (;;) {
		if (c->state == SC_DOWN)
			return fail(c, SPOP_ERR_IO, "not connected");
		n = spop_frame_decode(c->in + c->in_off, c->in_len - c->in_off, SC_FRAME_SIZE,
				      &f, &err);
		if (n < 0)
			return fail(c, err, err == SPOP_ERR_TOO_BIG ? "frame too big" : "malformed frame");
		if (n == 0) {
			/* Keep the partial frame at the front: room for the rest. */
			if (c->in_off > 0) {
				memmove(c->in, c->in + c->in_off, c->in_len - c->in_off);
				c->in_len -= c->in_off;
				c->in_off = 0;
			}
			return 0;
		}
		c->in_off += (size_t)n;
		if (c->in_off == c->in_len)
			c->in_off = c->in_len = 0;   /* f's views stay valid: nothing moved */
		if (!(f.flags & SPOP_FL_FIN))
			return fail(c, SPOP_ERR_FRAG_NOT_SUPPORTED, "fragmented frame");

		switch (f.type) {
		case SPOP_FRAME_AGENT_HELLO:
			if (on_hello(c, &f) < 0)
				return -1;
			ev->type = SC_EV_READY;
			ev->user = NULL;
			return 1;
		case SPOP_FRAME_AGENT_DISCONNECT:
			return on_disconnect(c, &f);
		case SPOP_FRAME_ACK:
			if (c->state != SC_READY)
				return fail(c, SPOP_ERR_INVALID, "ACK before the AGENT-HELLO");
			if (f.stream_id >= c->nslots)
				return fail(c, SPOP_ERR_FRAMEID_NOTFOUND, "ACK for an unknown stream");
			if (parse_ack(c, &f, &ev->result) < 0)
				return -1;
			{
				struct sc_slot *s = &c->slots[f.stream_id];
				if (!s->user || s->gen != f.frame_id)
					continue;   /* given up (sc_cancel): dropped */
				ev->type = SC_EV_ACK;
				ev->user = s->user;
				slot_free(c, (uint32_t)f.stream_id);
			}
			return 1;
		default:
			return fail(c, SPOP_ERR_INVALID, "unexpected frame type");
		}
	}
}

/* Is this limit sent (a non-empty key)? */
static bool limit_sent(const struct sc_limit *m)
{
	return m->key.ptr && m->key.len > 0;
}

size_t sc_count(const struct sc_limit *l, size_t n)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		k += limit_sent(&l[i]);
	return k;
}

bool sc_can_send(const struct sc_conn *c)
{
	return c->state == SC_READY && c->free_head != SC_NONE && c->inflight < c->max_inflight;
}

/* 1 to 19 digits: fits a uint64_t. */
static bool small_number(struct spop_str s, uint64_t *v)
{
	uint64_t x = 0;

	if (s.len == 0 || s.len > 19)
		return false;
	for (size_t i = 0; i < s.len; i++) {
		if (s.ptr[i] < '0' || s.ptr[i] > '9')
			return false;
		x = x * 10 + (uint64_t)(s.ptr[i] - '0');
	}
	*v = x;
	return true;
}

/* One argument of a message: its name, its value, whether digits go as an
 * integer. */
struct arg_ref {
	const char *name;
	struct spop_str v;
	bool numeric;
};

/* The arguments of limit m's message, its key given apart (whole or its
 * digest), into a[]; returns how many. */
#define SC_ARGS_MAX 6

static unsigned limit_args(const struct sc_limit *m, struct spop_str key,
			   struct arg_ref a[SC_ARGS_MAX])
{
	static const struct spop_str one = { "1", 1 };
	unsigned n = 0;

	a[n++] = (struct arg_ref){ "key", key, false };
	if (m->window.ptr)
		a[n++] = (struct arg_ref){ "window", m->window, true };
	if (m->limit.ptr && !m->lease.ptr && !m->reservation.ptr)
		a[n++] = (struct arg_ref){ "limit", m->limit, true };
	if (m->ns.ptr)
		a[n++] = (struct arg_ref){ "namespace", m->ns, false };
	if (m->cost.ptr && !m->lease.ptr)
		a[n++] = (struct arg_ref){ "cost", m->cost, true };
	if (m->lease.ptr)
		a[n++] = (struct arg_ref){ "lease", m->lease, false };
	else if (m->reservation.ptr)
		a[n++] = (struct arg_ref){ "reservation", m->reservation, false };
	else if (m->reserve)
		a[n++] = (struct arg_ref){ "reserve", one, true };
	return n;
}

/* The message's name: "release" for a lease given back, "settle" for a
 * reservation settled. */
static struct spop_str limit_msg(const struct sc_limit *m)
{
	return m->lease.ptr ? (struct spop_str){ release_name, sizeof(release_name) - 1 }
	       : m->reservation.ptr ? (struct spop_str){ settle_name, sizeof(settle_name) - 1 }
				    : (struct spop_str){ msg_name, sizeof(msg_name) - 1 };
}

/* Bytes of a value as put_arg writes it: type, then a varint or a string. */
static size_t value_size(struct spop_str v, bool numeric)
{
	uint64_t x;

	if (numeric && small_number(v, &x))
		return 1 + spop_varint_size(x);
	return 1 + spop_varint_size(v.len) + v.len;
}

static void put_arg(struct spop_writer *w, const struct arg_ref *a)
{
	struct spop_data d;
	uint64_t x;

	spop_put_str(w, a->name, strlen(a->name));
	if (a->numeric && small_number(a->v, &x)) {
		d.type = SPOP_DATA_UINT64;
		d.v.u = x;
	} else {
		d.type = SPOP_DATA_STRING;
		d.v.str = a->v;
	}
	spop_put_data(w, &d);
}

/* Bytes of limit m's message with a key of klen bytes: name, NB-ARGS, the
 * arguments. */
static size_t msg_size(const struct sc_limit *m, size_t klen)
{
	struct arg_ref a[SC_ARGS_MAX];
	struct spop_str key = { m->key.ptr, klen };
	unsigned nargs = limit_args(m, key, a);
	struct spop_str name = limit_msg(m);
	size_t n = spop_varint_size(name.len) + name.len + 1;

	for (unsigned i = 0; i < nargs; i++)
		n += spop_varint_size(strlen(a[i].name)) + strlen(a[i].name) +
		     value_size(a[i].v, a[i].numeric);
	return n;
}

/* Bytes of a frame's metadata: type, flags, stream-id, frame-id. */
static size_t head_size(uint64_t stream_id, uint64_t frame_id)
{
	return 1 + 4 + spop_varint_size(stream_id) + spop_varint_size(frame_id);
}

size_t sc_notify_need(const struct sc_limit *l, size_t n)
{
	size_t size = 0;

	for (size_t j = 0; j < n; j++)
		if (limit_sent(&l[j]))
			size += msg_size(&l[j], l[j].key.len < SC_DIGEST_LEN ? l[j].key.len
									      : SC_DIGEST_LEN);
	return size ? size + head_size(UINT32_MAX, UINT32_MAX) : 0;
}

/* The longest key of l[0..n) still whole and longer than a digest: its
 * index among the keys sent (bit of `digested`), or -1. Equal lengths: the
 * first. */
static int longest_whole(const struct sc_limit *l, size_t n, uint32_t digested, size_t *j_out)
{
	int best = -1, p = 0;

	for (size_t j = 0; j < n; j++) {
		if (!limit_sent(&l[j]))
			continue;
		if (!(digested & (1u << p)) && l[j].key.len > SC_DIGEST_LEN &&
		    (best < 0 || l[j].key.len > l[*j_out].key.len)) {
			best = p;
			*j_out = j;
		}
		p++;
	}
	return best;
}

_Static_assert(SC_MAX_LIMITS <= 32, "a bit of a uint32_t per key sent");

/* The size of the NOTIFY of l[0..n) (at most SC_MAX_LIMITS keys) at
 * stream i, frame-id gen, within max_frame: keys whole if it fits, else
 * the longest digested one at a time until it does (*digested: bit p for
 * the p-th key sent). Returns the size, or 0 when even then it does not
 * fit. */
static size_t notify_fit(const struct sc_limit *l, size_t n, uint32_t i, uint32_t gen,
			 uint32_t max_frame, uint32_t *digested)
{
	size_t size = head_size(i, gen), j = 0;
	int p;

	*digested = 0;
	for (size_t m = 0; m < n; m++)
		if (limit_sent(&l[m]))
			size += msg_size(&l[m], l[m].key.len);
	while (size > max_frame) {
		p = longest_whole(l, n, *digested, &j);
		if (p < 0)
			return 0;
		*digested |= 1u << p;
		size -= msg_size(&l[j], l[j].key.len) - msg_size(&l[j], SC_DIGEST_LEN);
	}
	return size;
}

enum sc_send_rc sc_send(struct sc_conn *c, const struct sc_limit *l, size_t n, void *user,
			uint32_t *slot)
{
	struct spop_writer w;
	struct arg_ref a[SC_ARGS_MAX];
	size_t k = sc_count(l, n), start, size;
	uint32_t i, gen, digested;
	unsigned nargs;
	struct sc_slot *s;
	int p = 0;

	if (c->state != SC_READY)
		return SC_NOT_READY;
	if (k == 0)
		return SC_NOTHING;
	if (k > SC_MAX_LIMITS)
		return SC_TOO_BIG;
	if (!sc_can_send(c) || !user)
		return SC_BUSY;

	i = c->free_head;
	s = &c->slots[i];
	gen = s->gen + 1 ? s->gen + 1 : 1;
	size = notify_fit(l, n, i, gen, c->max_frame, &digested);
	if (size == 0)
		return SC_TOO_BIG;
	if (c->out_cap - c->out_len < size + SPOP_LEN_SIZE)
		out_compact(c);
	if (c->out_cap - c->out_len < size + SPOP_LEN_SIZE)
		return SC_BUSY;

	s->gen = gen;
	spop_writer_init(&w, c->out + c->out_len, c->out_cap - c->out_len);
	start = spop_frame_begin(&w, SPOP_FRAME_NOTIFY, SPOP_FL_FIN, i, s->gen);
	for (size_t j = 0; j < n; j++) {
		const struct sc_limit *m = &l[j];
		char digest[SC_DIGEST_LEN];
		struct spop_str key = m->key;

		if (!limit_sent(m))
			continue;
		if (digested & (1u << p++)) {
			hash_digest(c->digest_key, m->key.ptr, m->key.len, digest);
			key = (struct spop_str){ digest, SC_DIGEST_LEN };
		}
		nargs = limit_args(m, key, a);
		struct spop_str name = limit_msg(m);
		spop_put_msg(&w, name.ptr, name.len, nargs);
		for (unsigned q = 0; q < nargs; q++)
			put_arg(&w, &a[q]);
	}
	/* Sized above: it fits the frame and the buffer. */
	if (spop_frame_end(&w, start, c->max_frame) < 0)
		return SC_TOO_BIG;

	c->out_len += w.len;
	c->free_head = s->next_free;
	s->next_free = SC_NONE;
	s->user = user;
	c->inflight++;
	*slot = i;
	return SC_SENT;
}

void sc_cancel(struct sc_conn *c, uint32_t slot)
{
	if (slot < c->nslots && c->slots[slot].user)
		slot_free(c, slot);
}

void sc_fail_all(struct sc_conn *c, void (*fn)(void *user, void *arg), void *arg)
{
	for (uint32_t i = 0; i < c->nslots && c->inflight > 0; i++) {
		void *user = c->slots[i].user;
		if (!user)
			continue;
		slot_free(c, i);
		fn(user, arg);
	}
}
