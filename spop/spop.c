/*
 * spop.c - the SPOP 2.0 codec (HAProxy's Stream Processing Offload
 * Protocol, doc/SPOE.txt): varints, typed data, frame headers, cursors over
 * frame payloads, and the encoders an agent needs.
 *
 * Pure: it works on caller memory only and never allocates, logs, blocks or
 * touches a descriptor. Every read is bounded by the end of the input it was
 * given: a decoder never looks at a byte past (p + len), even to find out
 * that the input is short (the tests run each decoder against a guard page).
 * Decoded strings are views into the input; the caller keeps that memory
 * alive for as long as it uses them.
 *
 * Two kinds of "short input" exist and must not be confused:
 *   - a frame arriving from a socket may be incomplete: the frame decoder
 *     (and the varint / typed-data primitives) answer 0, "need more";
 *   - a payload handed to a cursor is always complete (its frame was), so
 *     anything that runs past its end is malformed: -1, SPOP_ERR_INVALID.
 */
#include <limits.h>
#include <string.h>

#include "spop.h"

/* ---- tables ---- */

const char *spop_err_str(enum spop_err err)
{
	switch (err) {
#define X(name, code, str) case SPOP_ERR_##name: return str;
	SPOP_ERRORS(X)
#undef X
	}
	return "unknown error";
}

const char *spop_frame_type_str(enum spop_frame_type type)
{
	switch (type) {
#define X(name, code, str) case SPOP_FRAME_##name: return str;
	SPOP_FRAME_TYPES(X)
#undef X
	}
	return "unknown";
}

/* Stores e in *err when the caller gave somewhere to store it. */
static inline void set_err(enum spop_err *err, enum spop_err e)
{
	if (err)
		*err = e;
}

static inline uint32_t read_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline void write_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/* ---- varints ----
 *
 * HAProxy's "peers" encoding (include/haproxy/intops.h), little-endian
 * groups after a first byte that carries 4 bits once it is >= 240:
 *
 *         0 <= v < 240        [ vvvv vvvv ]
 *       240 <= v < 2288       [ 1111 vvvv ] [ 0vvv vvvv ]
 *      2288 <= v < 264432     [ 1111 vvvv ] [ 1vvv vvvv ] [ 0vvv vvvv ]
 *      ...                    one more [ 1vvv vvvv ] per 7 bits, 10 bytes max
 *
 * Encoding subtracts the value already carried before each shift
 * (v = (v - 240) >> 4, then v = (v - 128) >> 7), so decoding is a plain sum
 * of every byte, continuation bit included, shifted by 0, 4, 11, 18, ...:
 * 300 = 0xFC + (0x03 << 4), i.e. FC 03.
 */

int spop_varint_decode(const uint8_t *p, size_t len, uint64_t *out, enum spop_err *err)
{
	uint64_t v, add;
	unsigned shift = 4;
	size_t i;

	if (len == 0)
		return 0;
	v = p[0];
	if (v < 240) {
		*out = v;
		return 1;
	}
	for (i = 1; i < SPOP_VARINT_MAX; i++) {
		if (i >= len)
			return 0;
		/* shift <= 60 here: only the 10th byte may carry bits that do
		 * not fit, and any carry out of the sum is an overflow too. */
		add = (uint64_t)p[i];
		if (add > (UINT64_MAX >> shift))
			goto invalid;
		add <<= shift;
		if (v > UINT64_MAX - add)
			goto invalid;
		v += add;
		if (p[i] < 128) {
			*out = v;
			return (int)i + 1;
		}
		shift += 7;
	}
	/* ten bytes and the last one still says "more" */
invalid:
	set_err(err, SPOP_ERR_INVALID);
	return -1;
}

size_t spop_varint_size(uint64_t v)
{
	size_t n = 1;

	if (v < 240)
		return 1;
	v = (v - 240) >> 4;
	while (v >= 128) {
		v = (v - 128) >> 7;
		n++;
	}
	return n + 1;
}

/* Writes v's varint at p, which has its spop_varint_size(v) bytes. */
static size_t varint_write(uint8_t *p, uint64_t v)
{
	size_t i = 0;

	if (v < 240) {
		p[0] = (uint8_t)v;
		return 1;
	}
	p[i++] = (uint8_t)v | 0xF0;
	v = (v - 240) >> 4;
	while (v >= 128) {
		p[i++] = (uint8_t)v | 0x80;
		v = (v - 128) >> 7;
	}
	p[i++] = (uint8_t)v;
	return i;
}

size_t spop_varint_encode(uint8_t *p, size_t cap, uint64_t v)
{
	if (cap < spop_varint_size(v))
		return 0;
	return varint_write(p, v);
}

/* ---- typed data ----
 *
 *   +------+------+---------------------------------------+
 *   | TYPE | FLAG | DATA                                  |
 *   | 4 lo | 4 hi |                                       |
 *   +------+------+---------------------------------------+
 *   NULL   0     -                  BOOL   1   - (true: flag 0x1 -> 0x11)
 *   INT32  2     varint             UINT32 3   varint
 *   INT64  4     varint             UINT64 5   varint
 *   IPV4   6     4 raw bytes        IPV6   7   16 raw bytes
 *   STRING 8     varint len, bytes  BINARY 9   varint len, bytes
 *   10..15 reserved: malformed.
 *
 * Integers are not zig-zagged: a negative INT is its two's complement cast
 * to 64 bits (a 10-byte varint). Like HAProxy, the 32-bit types are carried
 * in 64 bits and their range is not enforced.
 */

int spop_data_decode(const uint8_t *p, size_t len, struct spop_data *out, enum spop_err *err)
{
	uint64_t u;
	size_t n, avail;
	int r;

	if (len == 0)
		return 0;
	out->type = (enum spop_data_type)(p[0] & SPOP_DATA_T_MASK);
	switch (out->type) {
	case SPOP_DATA_NULL:
		return 1;
	case SPOP_DATA_BOOL:
		out->v.b = (p[0] & SPOP_DATA_FL_TRUE) != 0;
		return 1;
	case SPOP_DATA_INT32:
	case SPOP_DATA_UINT32:
	case SPOP_DATA_INT64:
	case SPOP_DATA_UINT64:
		r = spop_varint_decode(p + 1, len - 1, &u, err);
		if (r <= 0)
			return r;
		if (out->type == SPOP_DATA_INT32 || out->type == SPOP_DATA_INT64)
			out->v.i = (int64_t)u;
		else
			out->v.u = u;
		return r + 1;
	case SPOP_DATA_IPV4:
		if (len < 1 + 4)
			return 0;
		memcpy(out->v.ipv4, p + 1, 4);
		return 1 + 4;
	case SPOP_DATA_IPV6:
		if (len < 1 + 16)
			return 0;
		memcpy(out->v.ipv6, p + 1, 16);
		return 1 + 16;
	case SPOP_DATA_STRING:
	case SPOP_DATA_BINARY:
		r = spop_varint_decode(p + 1, len - 1, &u, err);
		if (r <= 0)
			return r;
		n = 1 + (size_t)r;
		/* the result must fit the int we return */
		if (u > (uint64_t)INT_MAX - n) {
			set_err(err, SPOP_ERR_INVALID);
			return -1;
		}
		avail = len - n;
		if (u > avail)
			return 0;
		out->v.str.ptr = (const char *)(p + n);
		out->v.str.len = (size_t)u;
		return (int)(n + (size_t)u);
	case SPOP_DATA_TYPE_COUNT:
	default:
		break;
	}
	set_err(err, SPOP_ERR_INVALID);
	return -1;
}

/* ---- frames ----
 *
 *   +-----------+------+-----------+-----------+----------+---------...
 *   | LENGTH:4  | TYPE | FLAGS:4   | STREAM-ID | FRAME-ID | PAYLOAD
 *   | big-end.  | 1 B  | big-end.  | varint    | varint   |
 *   +-----------+------+-----------+-----------+----------+---------...
 *               |<------------------ LENGTH bytes -------------------->|
 *
 * LENGTH is checked against the limits as soon as its 4 bytes are in, so
 * that a reader never waits for (or buffers) a frame it will refuse. The
 * ids are parsed strictly inside the frame: an id that would run past
 * LENGTH is malformed even if the bytes after the frame would complete it.
 */

int spop_frame_peek_len(const uint8_t *p, size_t len, uint32_t *frame_len)
{
	if (len < SPOP_LEN_SIZE)
		return -1;
	*frame_len = read_be32(p);
	return 0;
}

int spop_frame_decode(const uint8_t *p, size_t len, size_t max_frame_size,
		      struct spop_frame *f, enum spop_err *err)
{
	const uint8_t *q, *end;
	uint32_t flen;
	int r;

	if (len < SPOP_LEN_SIZE)
		return 0;
	flen = read_be32(p);
	/* the second test keeps 4 + LENGTH within the int we return */
	if (flen > max_frame_size || flen > (uint32_t)INT_MAX - SPOP_LEN_SIZE) {
		set_err(err, SPOP_ERR_TOO_BIG);
		return -1;
	}
	if (flen < SPOP_MIN_FRAME_LEN) {
		set_err(err, SPOP_ERR_INVALID);
		return -1;
	}
	if (len - SPOP_LEN_SIZE < flen)
		return 0;

	q = p + SPOP_LEN_SIZE;
	end = q + flen;
	f->type = (enum spop_frame_type)q[0];
	f->flags = read_be32(q + 1);
	q += 5;
	r = spop_varint_decode(q, (size_t)(end - q), &f->stream_id, err);
	if (r <= 0)
		goto invalid;
	q += r;
	r = spop_varint_decode(q, (size_t)(end - q), &f->frame_id, err);
	if (r <= 0)
		goto invalid;
	q += r;
	f->payload = q;
	f->payload_len = (size_t)(end - q);
	return (int)(SPOP_LEN_SIZE + flen);

invalid:
	/* a 0 from the varint means the id crosses the end of the frame */
	set_err(err, SPOP_ERR_INVALID);
	return -1;
}

/* ---- payload cursors ----
 *
 * Each reader below takes a position and the end of the payload, and
 * either returns the next position or NULL (malformed, i.e. truncated or
 * invalid: the payload is complete). Cursors only commit a position once a
 * whole item has been read, so after a -1 the cursor still points at the
 * item that failed.
 */

static const uint8_t *rd_u8(const uint8_t *p, const uint8_t *end, uint8_t *v)
{
	if (p >= end)
		return NULL;
	*v = *p;
	return p + 1;
}

/* Untyped STRING (names): <LENGTH:varint><BYTES> */
static const uint8_t *rd_str(const uint8_t *p, const uint8_t *end, struct spop_str *s)
{
	uint64_t n;
	int r;

	r = spop_varint_decode(p, (size_t)(end - p), &n, NULL);
	if (r <= 0)
		return NULL;
	p += r;
	if (n > (uint64_t)(end - p))
		return NULL;
	s->ptr = (const char *)p;
	s->len = (size_t)n;
	return p + n;
}

/* TYPED-DATA, see above */
static const uint8_t *rd_data(const uint8_t *p, const uint8_t *end, struct spop_data *d)
{
	int r = spop_data_decode(p, (size_t)(end - p), d, NULL);

	return r > 0 ? p + r : NULL;
}

/* KV item: <NAME:untyped string><VALUE:typed data> */
static const uint8_t *rd_kv(const uint8_t *p, const uint8_t *end, struct spop_kv *kv)
{
	p = rd_str(p, end, &kv->name);
	if (!p)
		return NULL;
	return rd_data(p, end, &kv->value);
}

static int cursor_fail(struct spop_cursor *c)
{
	c->err = SPOP_ERR_INVALID;
	return -1;
}

void spop_cursor_init(struct spop_cursor *c, const uint8_t *p, size_t len)
{
	c->p = p;
	c->end = len ? p + len : p;   /* no arithmetic on a NULL p */
	c->left = 0;
	c->err = SPOP_ERR_NONE;
}

/* LIST-OF-MESSAGES, one item:
 *
 *   +--------------+---------+-----------------------------------+
 *   | NAME         | NB-ARGS | NB-ARGS x ( NAME       VALUE )    |
 *   | untyped str. | 1 byte  |           untyped str. typed data |
 *   +--------------+---------+-----------------------------------+
 *
 * Every argument is read (and so validated) here, which is how args_len
 * is known; spop_args_next() then cannot fail on a message from here.
 */
int spop_msg_next(struct spop_cursor *c, struct spop_msg *m)
{
	const uint8_t *p = c->p, *args;
	struct spop_kv kv;
	uint8_t nargs;
	unsigned i;

	if (p >= c->end)
		return 0;
	p = rd_str(p, c->end, &m->name);
	if (!p)
		return cursor_fail(c);
	p = rd_u8(p, c->end, &nargs);
	if (!p)
		return cursor_fail(c);
	args = p;
	for (i = 0; i < nargs; i++) {
		p = rd_kv(p, c->end, &kv);
		if (!p)
			return cursor_fail(c);
	}
	m->nargs = nargs;
	m->args = args;
	m->args_len = (size_t)(p - args);
	c->p = p;
	return 1;
}

void spop_args_init(struct spop_cursor *c, const struct spop_msg *m)
{
	spop_cursor_init(c, m->args, m->args_len);
	c->left = m->nargs;
}

int spop_args_next(struct spop_cursor *c, struct spop_kv *kv)
{
	const uint8_t *p;

	if (c->left == 0)
		return 0;
	p = rd_kv(c->p, c->end, kv);
	if (!p)
		return cursor_fail(c);
	c->p = p;
	c->left--;
	return 1;
}

/* KV-LIST: ( <NAME:untyped string> <VALUE:typed data> )* up to the end */
int spop_kv_next(struct spop_cursor *c, struct spop_kv *kv)
{
	const uint8_t *p;

	if (c->p >= c->end)
		return 0;
	p = rd_kv(c->p, c->end, kv);
	if (!p)
		return cursor_fail(c);
	c->p = p;
	return 1;
}

/* LIST-OF-ACTIONS, one item:
 *
 *   SET-VAR    +------+---------+-------+--------------+------------+
 *              | 0x01 | NB=0x03 | SCOPE | NAME         | VALUE      |
 *              +------+---------+-------+--------------+------------+
 *   UNSET-VAR  +------+---------+-------+--------------+
 *              | 0x02 | NB=0x02 | SCOPE | NAME         |
 *              +------+---------+-------+--------------+
 *              1 byte   1 byte   1 byte  untyped str.   typed data
 *
 * The arguments are not self-describing (SCOPE is a raw byte, NAME is
 * untyped), so an unknown action or an unexpected NB-ARGS cannot be skipped
 * and is malformed, as is a scope outside proc..res.
 */
int spop_action_next(struct spop_cursor *c, enum spop_action_type *type,
		     enum spop_scope *scope, struct spop_str *name, struct spop_data *value)
{
	const uint8_t *p = c->p;
	uint8_t atype, nargs, sc;

	if (p >= c->end)
		return 0;
	p = rd_u8(p, c->end, &atype);
	if (!p || !(p = rd_u8(p, c->end, &nargs)))
		return cursor_fail(c);
	if (!(atype == SPOP_ACT_SET_VAR && nargs == 3) &&
	    !(atype == SPOP_ACT_UNSET_VAR && nargs == 2))
		return cursor_fail(c);
	p = rd_u8(p, c->end, &sc);
	if (!p || sc >= SPOP_SCOPE_COUNT)
		return cursor_fail(c);
	p = rd_str(p, c->end, name);
	if (!p)
		return cursor_fail(c);
	if (atype == SPOP_ACT_SET_VAR) {
		p = rd_data(p, c->end, value);
		if (!p)
			return cursor_fail(c);
	} else {
		value->type = SPOP_DATA_NULL;
	}
	*type = (enum spop_action_type)atype;
	*scope = (enum spop_scope)sc;
	c->p = p;
	return 1;
}

/* ---- HELLO / DISCONNECT ---- */

/* Exact name match: "max-frame-size-foo" is not "max-frame-size". */
static bool str_is(struct spop_str s, const char *lit)
{
	size_t n = strlen(lit);

	return s.len == n && (n == 0 || memcmp(s.ptr, lit, n) == 0);
}

bool spop_data_uint(const struct spop_data *d, uint64_t *v)
{
	switch (d->type) {
	case SPOP_DATA_INT32:
	case SPOP_DATA_INT64:
		if (d->v.i < 0)
			return false;
		*v = (uint64_t)d->v.i;
		return true;
	case SPOP_DATA_UINT32:
	case SPOP_DATA_UINT64:
		*v = d->v.u;
		return true;
	default:
		return false;
	}
}

/* HELLO payload: a KV-LIST. Items of a known name but of the wrong type are
 * ignored, so that a mandatory one is then reported missing. When a name
 * repeats, the last well-typed item wins. */
int spop_hello_decode(const uint8_t *payload, size_t len, struct spop_hello *h,
		      enum spop_err *err)
{
	struct spop_cursor c;
	struct spop_kv kv;
	uint64_t u;
	int r;

	memset(h, 0, sizeof(*h));
	spop_cursor_init(&c, payload, len);
	while ((r = spop_kv_next(&c, &kv)) > 0) {
		bool is_str = kv.value.type == SPOP_DATA_STRING;

		if (str_is(kv.name, "supported-versions") || str_is(kv.name, "version")) {
			if (is_str) {
				h->supported_versions = kv.value.v.str;
				h->has_versions = true;
			}
		} else if (str_is(kv.name, "max-frame-size")) {
			if (spop_data_uint(&kv.value, &u)) {
				h->max_frame_size = u;
				h->has_max_frame_size = true;
			}
		} else if (str_is(kv.name, "capabilities")) {
			if (is_str) {
				h->capabilities = kv.value.v.str;
				h->has_capabilities = true;
			}
		} else if (str_is(kv.name, "engine-id")) {
			if (is_str)
				h->engine_id = kv.value.v.str;
		} else if (str_is(kv.name, "healthcheck")) {
			if (kv.value.type == SPOP_DATA_BOOL)
				h->healthcheck = kv.value.v.b;
		}
	}
	if (r < 0) {
		set_err(err, SPOP_ERR_INVALID);
		return -1;
	}
	if (!h->has_versions) {
		set_err(err, SPOP_ERR_NO_VSN);
		return -1;
	}
	if (!h->has_max_frame_size) {
		set_err(err, SPOP_ERR_NO_FRAME_SIZE);
		return -1;
	}
	if (!h->has_capabilities) {
		set_err(err, SPOP_ERR_NO_CAP);
		return -1;
	}
	return 0;
}

/* DISCONNECT payload: a KV-LIST with "status-code" (an integer of up to 32
 * bits; anything else is ignored) and "message" (a STRING). */
int spop_disconnect_decode(const uint8_t *payload, size_t len, struct spop_disconnect *d,
			   enum spop_err *err)
{
	struct spop_cursor c;
	struct spop_kv kv;
	uint64_t u;
	int r;

	memset(d, 0, sizeof(*d));
	spop_cursor_init(&c, payload, len);
	while ((r = spop_kv_next(&c, &kv)) > 0) {
		if (str_is(kv.name, "status-code")) {
			if (spop_data_uint(&kv.value, &u) && u <= UINT32_MAX) {
				d->status_code = (uint32_t)u;
				d->has_status_code = true;
			}
		} else if (str_is(kv.name, "message")) {
			if (kv.value.type == SPOP_DATA_STRING)
				d->message = kv.value.v.str;
		}
	}
	if (r < 0) {
		set_err(err, SPOP_ERR_INVALID);
		return -1;
	}
	return 0;
}

/* ---- comma-separated lists ---- */

static bool is_blank(char ch)
{
	return ch == ' ' || ch == '\t';
}

/* Calls match() on each token of a comma-separated list, spaces and tabs
 * around it removed, until it returns true. An empty list has no token. */
static bool list_any(struct spop_str list, bool (*match)(const char *s, size_t n, const void *arg),
		     const void *arg)
{
	size_t i = 0, s, e;

	if (!list.ptr || list.len == 0)
		return false;
	for (;;) {
		s = i;
		while (i < list.len && list.ptr[i] != ',')
			i++;
		e = i;
		while (s < e && is_blank(list.ptr[s]))
			s++;
		while (e > s && is_blank(list.ptr[e - 1]))
			e--;
		if (match(list.ptr + s, e - s, arg))
			return true;
		if (i >= list.len)
			return false;
		i++;   /* past the comma */
	}
}

/* "MAJOR.MINOR" -> MAJOR * 1000 + MINOR, as HAProxy compares versions, so
 * "2.00" equals "2.0". Returns -1 when s is not exactly that. */
static long parse_version(const char *s, size_t len)
{
	long major = 0, minor = 0;
	size_t i = 0, start;

	start = i;
	while (i < len && s[i] >= '0' && s[i] <= '9') {
		major = major * 10 + (s[i] - '0');
		if (major > 1000000)
			return -1;
		i++;
	}
	if (i == start || i >= len || s[i] != '.')
		return -1;
	start = ++i;
	while (i < len && s[i] >= '0' && s[i] <= '9') {
		minor = minor * 10 + (s[i] - '0');
		if (minor > 999)
			return -1;
		i++;
	}
	if (i == start || i != len)
		return -1;
	return major * 1000 + minor;
}

static bool match_version(const char *s, size_t n, const void *arg)
{
	return parse_version(s, n) == *(const long *)arg;
}

bool spop_version_supported(struct spop_str list, const char *version)
{
	long want = parse_version(version, strlen(version));

	return want >= 0 && list_any(list, match_version, &want);
}

static bool match_token(const char *s, size_t n, const void *arg)
{
	const char *cap = arg;

	return n == strlen(cap) && memcmp(s, cap, n) == 0;
}

bool spop_has_capability(struct spop_str list, const char *cap)
{
	return cap[0] != '\0' && list_any(list, match_token, cap);
}

/* ---- encoders ---- */

void spop_writer_init(struct spop_writer *w, uint8_t *buf, size_t cap)
{
	w->buf = buf;
	w->cap = buf ? cap : 0;
	w->len = 0;
	w->overflow = false;
}

/* A caller bug (unknown data type, more than 255 arguments) poisons the
 * writer like an overflow: the frame then fails at spop_frame_end() instead
 * of going out malformed. */
static void w_poison(struct spop_writer *w)
{
	w->overflow = true;
}

void spop_put_u8(struct spop_writer *w, uint8_t v)
{
	uint8_t *p = spop_put_room(w, 1);

	if (p)
		*p = v;
}

void spop_put_varint(struct spop_writer *w, uint64_t v)
{
	/* Most values written are below 240: one byte, no size to work out. */
	uint8_t *p = spop_put_room(w, v < 240 ? 1 : spop_varint_size(v));

	if (p)
		varint_write(p, v);
}

void spop_put_bytes(struct spop_writer *w, const void *src, size_t len)
{
	uint8_t *p;

	if (len == 0)   /* src may then be NULL, and so may w->buf */
		return;
	p = spop_put_room(w, len);
	if (p)
		memcpy(p, src, len);
}

void spop_put_str(struct spop_writer *w, const char *p, size_t len)
{
	spop_put_varint(w, len);
	spop_put_bytes(w, p, len);
}

void spop_put_data(struct spop_writer *w, const struct spop_data *d)
{
	switch (d->type) {
	case SPOP_DATA_NULL:
		spop_put_u8(w, SPOP_DATA_NULL);
		return;
	case SPOP_DATA_BOOL:
		spop_put_u8(w, SPOP_DATA_BOOL | (d->v.b ? SPOP_DATA_FL_TRUE : 0));
		return;
	case SPOP_DATA_INT32:
	case SPOP_DATA_INT64:
		spop_put_u8(w, (uint8_t)d->type);
		spop_put_varint(w, (uint64_t)d->v.i);
		return;
	case SPOP_DATA_UINT32:
	case SPOP_DATA_UINT64:
		spop_put_u8(w, (uint8_t)d->type);
		spop_put_varint(w, d->v.u);
		return;
	case SPOP_DATA_IPV4:
		spop_put_u8(w, SPOP_DATA_IPV4);
		spop_put_bytes(w, d->v.ipv4, 4);
		return;
	case SPOP_DATA_IPV6:
		spop_put_u8(w, SPOP_DATA_IPV6);
		spop_put_bytes(w, d->v.ipv6, 16);
		return;
	case SPOP_DATA_STRING:
	case SPOP_DATA_BINARY:
		spop_put_u8(w, (uint8_t)d->type);
		spop_put_str(w, d->v.str.ptr, d->v.str.len);
		return;
	case SPOP_DATA_TYPE_COUNT:
	default:
		break;
	}
	w_poison(w);
}

void spop_put_kv_str(struct spop_writer *w, const char *name, const char *v, size_t vlen)
{
	spop_put_str(w, name, strlen(name));
	spop_put_u8(w, SPOP_DATA_STRING);
	spop_put_str(w, v, vlen);
}

void spop_put_kv_uint32(struct spop_writer *w, const char *name, uint32_t v)
{
	spop_put_str(w, name, strlen(name));
	spop_put_u8(w, SPOP_DATA_UINT32);
	spop_put_varint(w, v);
}

void spop_put_kv_bool(struct spop_writer *w, const char *name, bool v)
{
	spop_put_str(w, name, strlen(name));
	spop_put_u8(w, SPOP_DATA_BOOL | (v ? SPOP_DATA_FL_TRUE : 0));
}

void spop_put_msg(struct spop_writer *w, const char *name, size_t len, unsigned nargs)
{
	if (nargs > SPOP_MAX_ARGS) {
		w_poison(w);
		return;
	}
	spop_put_str(w, name, len);
	spop_put_u8(w, (uint8_t)nargs);
}

void spop_put_set_var(struct spop_writer *w, enum spop_scope scope, const char *name,
		      size_t len, const struct spop_data *v)
{
	spop_put_u8(w, SPOP_ACT_SET_VAR);
	spop_put_u8(w, 3);
	spop_put_u8(w, (uint8_t)scope);
	spop_put_str(w, name, len);
	spop_put_data(w, v);
}

void spop_put_unset_var(struct spop_writer *w, enum spop_scope scope, const char *name,
			size_t len)
{
	spop_put_u8(w, SPOP_ACT_UNSET_VAR);
	spop_put_u8(w, 2);
	spop_put_u8(w, (uint8_t)scope);
	spop_put_str(w, name, len);
}

size_t spop_frame_begin(struct spop_writer *w, enum spop_frame_type type, uint32_t flags,
			uint64_t stream_id, uint64_t frame_id)
{
	size_t start = w->len;
	uint8_t *p;

	spop_put_bytes(w, "\0\0\0\0", SPOP_LEN_SIZE);   /* patched by frame_end */
	spop_put_u8(w, (uint8_t)type);
	p = spop_put_room(w, 4);
	if (p)
		write_be32(p, flags);
	spop_put_varint(w, stream_id);
	spop_put_varint(w, frame_id);
	return start;
}

int spop_frame_end(struct spop_writer *w, size_t start, size_t max_frame_size)
{
	size_t flen;

	if (start > w->len)   /* not a start this writer returned: drop nothing */
		start = w->len;
	if (w->overflow || w->len - start < SPOP_LEN_SIZE + SPOP_MIN_FRAME_LEN)
		goto rollback;
	flen = w->len - start - SPOP_LEN_SIZE;
	if (flen > max_frame_size || flen > UINT32_MAX)
		goto rollback;
	write_be32(w->buf + start, (uint32_t)flen);
	return 0;

rollback:
	w->len = start;
	w->overflow = false;
	return -1;
}

/* HELLO frames are exchanged before any max-frame-size is agreed; every
 * peer must accept SPOP_MIN_FRAME_SIZE, so a smaller bound is raised to it. */
static size_t hello_bound(uint32_t max_frame_size)
{
	return max_frame_size < SPOP_MIN_FRAME_SIZE ? SPOP_MIN_FRAME_SIZE : max_frame_size;
}

/* Both DISCONNECT frames: a KV-LIST of "status-code" UINT32 and "message"
 * STRING. HAProxy 2.6 refuses an agent message over 255 bytes; we cut it
 * shorter still so that the frame fits SPOP_MIN_FRAME_SIZE, i.e. whatever
 * max-frame-size was agreed: the rest of the frame takes at most
 *   header 7 + "status-code" 12 + UINT32 6 + "message" 8 + type, len 3 = 36. */
#define DISCONNECT_OVERHEAD 36u
#define DISCONNECT_MSG_MAX  (SPOP_MIN_FRAME_SIZE - DISCONNECT_OVERHEAD)

static int encode_disconnect(struct spop_writer *w, enum spop_frame_type type,
			     enum spop_err status, const char *message)
{
	size_t start, mlen;

	if (!message)
		message = spop_err_str(status);
	mlen = strlen(message);
	if (mlen > DISCONNECT_MSG_MAX)
		mlen = DISCONNECT_MSG_MAX;
	start = spop_frame_begin(w, type, SPOP_FL_FIN, 0, 0);
	spop_put_kv_uint32(w, "status-code", (uint32_t)status);
	spop_put_kv_str(w, "message", message, mlen);
	return spop_frame_end(w, start, SPOP_MIN_FRAME_SIZE);
}

/* AGENT-HELLO:
 *   "version" STRING "2.0", "max-frame-size" UINT32, "capabilities" STRING */
int spop_encode_agent_hello(struct spop_writer *w, uint32_t max_frame_size,
			    const char *capabilities)
{
	size_t start;

	if (!capabilities)
		capabilities = "";
	start = spop_frame_begin(w, SPOP_FRAME_AGENT_HELLO, SPOP_FL_FIN, 0, 0);
	spop_put_kv_str(w, "version", SPOP_VERSION, strlen(SPOP_VERSION));
	spop_put_kv_uint32(w, "max-frame-size", max_frame_size);
	spop_put_kv_str(w, "capabilities", capabilities, strlen(capabilities));
	return spop_frame_end(w, start, hello_bound(max_frame_size));
}

int spop_encode_agent_disconnect(struct spop_writer *w, enum spop_err status,
				 const char *message)
{
	return encode_disconnect(w, SPOP_FRAME_AGENT_DISCONNECT, status, message);
}

/* HAPROXY-HELLO, items in HAProxy's order: "supported-versions",
 * "max-frame-size", "capabilities", then "healthcheck" (only when true)
 * and "engine-id" (only when given). */
int spop_encode_haproxy_hello(struct spop_writer *w, const char *versions,
			      uint32_t max_frame_size, const char *capabilities,
			      bool healthcheck, const char *engine_id)
{
	size_t start;

	if (!versions)
		versions = SPOP_VERSION;
	if (!capabilities)
		capabilities = "";
	start = spop_frame_begin(w, SPOP_FRAME_HAPROXY_HELLO, SPOP_FL_FIN, 0, 0);
	spop_put_kv_str(w, "supported-versions", versions, strlen(versions));
	spop_put_kv_uint32(w, "max-frame-size", max_frame_size);
	spop_put_kv_str(w, "capabilities", capabilities, strlen(capabilities));
	if (healthcheck)
		spop_put_kv_bool(w, "healthcheck", true);
	if (engine_id)
		spop_put_kv_str(w, "engine-id", engine_id, strlen(engine_id));
	return spop_frame_end(w, start, hello_bound(max_frame_size));
}

int spop_encode_haproxy_disconnect(struct spop_writer *w, enum spop_err status,
				   const char *message)
{
	return encode_disconnect(w, SPOP_FRAME_HAPROXY_DISCONNECT, status, message);
}
