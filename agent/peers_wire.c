/*
 * peers_wire.c - the codec of HAProxy's peers protocol (see peers_wire.h,
 * docs/PEERS.md): varints, the hello and status lines, message headers,
 * table definitions, updates, acks, and their encoders.
 *
 * Pure: caller memory only; no allocation, I/O, clock or logging. Every
 * read is bounded by the end of the input it was given, even to find out
 * that the input is short (the tests run the decoders against a guard
 * page). Two kinds of short input:
 *   - a stream (the hello, a status line, a message) may not have arrived
 *     whole: its decoders answer 0, "need more";
 *   - a payload is whole (its message was): a field that runs past its
 *     end is PEERS_WIRE_ERR_TRUNCATED.
 */
#include <limits.h>
#include <string.h>

#include "agent/peers_wire.h"

/* ---- tables ---- */

enum reaction { CLOSE, SIZE, S501, S502, IGNORE };

static const struct {
	enum reaction reaction;
	const char *text;
} err_table[PEERS_WIRE_ERR_COUNT] = {
#define X(name, reaction, text) [PEERS_WIRE_ERR_##name] = { reaction, text },
	PEERS_WIRE_ERRORS(X)
#undef X
};

const char *peers_wire_err_str(enum peers_wire_err err)
{
	if ((unsigned)err >= PEERS_WIRE_ERR_COUNT)
		return "unknown error";
	return err_table[err].text;
}

bool peers_wire_err_ignorable(enum peers_wire_err err)
{
	return (unsigned)err < PEERS_WIRE_ERR_COUNT && err_table[err].reaction == IGNORE;
}

unsigned peers_wire_err_status(enum peers_wire_err err)
{
	if ((unsigned)err >= PEERS_WIRE_ERR_COUNT)
		return 0;
	switch (err_table[err].reaction) {
	case S501:
		return PEERS_WIRE_STATUS_ERRPROTO;
	case S502:
		return PEERS_WIRE_STATUS_ERRVERSION;
	case CLOSE:
	case SIZE:
	case IGNORE:
		break;
	}
	return 0;
}

static const struct {
	uint8_t cls;
	uint8_t type;
	const char *text;
} msg_table[PEERS_WIRE_MSG_COUNT] = {
	[PEERS_WIRE_MSG_UNKNOWN] = { 0xff, 0xff, "unknown" },
#define X(name, cls, type, text) [PEERS_WIRE_MSG_##name] = { cls, type, text },
	PEERS_WIRE_MSGS(X)
#undef X
};

enum peers_wire_msg_kind peers_wire_msg_kind(uint8_t cls, uint8_t type)
{
	for (unsigned k = PEERS_WIRE_MSG_UNKNOWN + 1; k < PEERS_WIRE_MSG_COUNT; k++)
		if (msg_table[k].cls == cls && msg_table[k].type == type)
			return (enum peers_wire_msg_kind)k;
	return PEERS_WIRE_MSG_UNKNOWN;
}

const char *peers_wire_msg_str(enum peers_wire_msg_kind kind)
{
	if ((unsigned)kind >= PEERS_WIRE_MSG_COUNT)
		return "unknown";
	return msg_table[kind].text;
}

static const struct {
	enum peers_wire_enc enc;
	const char *text;
} dt_table[PEERS_WIRE_DT_COUNT] = {
#define X(name, bit, enc, text) [bit] = { PEERS_WIRE_ENC_##enc, text },
	PEERS_WIRE_DATA_TYPES(X)
#undef X
};

enum peers_wire_enc peers_wire_dt_enc(unsigned dt)
{
	return dt < PEERS_WIRE_DT_COUNT ? dt_table[dt].enc : PEERS_WIRE_ENC_UINT;
}

const char *peers_wire_dt_str(unsigned dt)
{
	return dt < PEERS_WIRE_DT_COUNT ? dt_table[dt].text : "unknown";
}

static bool enc_is_array(enum peers_wire_enc enc)
{
	return enc == PEERS_WIRE_ENC_ARRAY_UINT || enc == PEERS_WIRE_ENC_ARRAY_FREQ;
}

/* Types with params in a DEFINE: arrays and frequency counters. */
static bool enc_has_params(enum peers_wire_enc enc)
{
	return enc_is_array(enc) || enc == PEERS_WIRE_ENC_FREQ;
}

static bool enc_has_period(enum peers_wire_enc enc)
{
	return enc == PEERS_WIRE_ENC_FREQ || enc == PEERS_WIRE_ENC_ARRAY_FREQ;
}

static inline void set_err(enum peers_wire_err *err, enum peers_wire_err e)
{
	if (err)
		*err = e;
}

/* ---- varints ----
 *
 *           v < 240      [ vvvv vvvv ]
 *         240 <= v       [ 1111 vvvv ] [ 1vvv vvvv ] ... [ 0vvv vvvv ]
 *                          4 bits        7 bits each, the last < 128
 *
 * The value is the plain sum of the bytes, each shifted by 0, 4, 11, 18...
 * (continuation bits included): the encoder subtracts what each byte
 * already carries before shifting. 2^64 - 1 takes 10 bytes; an 11th byte,
 * or a sum that passes 64 bits, is malformed (HAProxy's decoder would wrap
 * around; no HAProxy encoder writes such a thing).
 */

static int varint_get(const uint8_t *p, size_t len, uint64_t *v)
{
	uint64_t sum, add;
	unsigned shift = 4;

	if (len == 0)
		return 0;
	sum = p[0];
	if (sum < 240) {
		*v = sum;
		return 1;
	}
	for (size_t i = 1; i < PEERS_WIRE_VARINT_MAX; i++, shift += 7) {
		if (i == len)
			return 0;
		add = p[i];
		if (add > UINT64_MAX >> shift)
			return -1;
		add <<= shift;
		if (sum > UINT64_MAX - add)
			return -1;
		sum += add;
		if (p[i] < 128) {
			*v = sum;
			return (int)i + 1;
		}
	}
	return -1;
}

int peers_wire_varint_decode(const uint8_t *p, size_t len, uint64_t *v, enum peers_wire_err *err)
{
	int r = varint_get(p, len, v);

	if (r < 0)
		set_err(err, PEERS_WIRE_ERR_VARINT);
	return r;
}

size_t peers_wire_varint_size(uint64_t v)
{
	size_t n = 2;

	if (v < 240)
		return 1;
	for (v = (v - 240) >> 4; v >= 128; v = (v - 128) >> 7)
		n++;
	return n;
}

size_t peers_wire_varint_encode(uint8_t *p, size_t cap, uint64_t v)
{
	size_t n = peers_wire_varint_size(v), i = 0;

	if (cap < n)
		return 0;
	if (n == 1) {
		p[0] = (uint8_t)v;
		return 1;
	}
	p[i++] = (uint8_t)(v | 0xf0);
	for (v = (v - 240) >> 4; v >= 128; v = (v - 128) >> 7)
		p[i++] = (uint8_t)(v | 0x80);
	p[i++] = (uint8_t)v;
	return i;
}

/* ---- lines (the hello, the status) ---- */

/* The line starting at p[off]: returns the offset just past its LF, 0 when
 * no LF is in yet, -1 when the line would pass PEERS_WIRE_LINE_MAX bytes.
 * *line_len: its bytes without the LF and a CR before it. */
static long line_next(const uint8_t *p, size_t len, size_t off, size_t *line_len)
{
	size_t avail = len - off, n;
	const uint8_t *lf;

	if (avail > PEERS_WIRE_LINE_MAX)
		avail = PEERS_WIRE_LINE_MAX;
	lf = avail ? memchr(p + off, '\n', avail) : NULL;
	if (!lf)
		return avail == PEERS_WIRE_LINE_MAX ? -1 : 0;
	n = (size_t)(lf - (p + off));
	*line_len = n > 0 && p[off + n - 1] == '\r' ? n - 1 : n;
	return (long)(off + n + 1);
}

/* A decimal number of 1 to max_digits digits making up the whole of s[0..n). */
static bool parse_dec(const uint8_t *s, size_t n, size_t max_digits, unsigned *v)
{
	unsigned x = 0;

	if (n == 0 || n > max_digits)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		x = x * 10 + (unsigned)(s[i] - '0');
	}
	*v = x;
	return true;
}

/* Line 1: "HAProxyS <major>.<minor>", both plain decimal numbers. */
static enum peers_wire_err hello_line1(const uint8_t *s, size_t n, struct peers_wire_hello *h)
{
	static const char proto[] = PEERS_WIRE_PROTO " ";
	const size_t plen = sizeof(proto) - 1;
	const uint8_t *dot;

	if (n < plen || memcmp(s, proto, plen) != 0)
		return PEERS_WIRE_ERR_HELLO_PROTO;
	s += plen;
	n -= plen;
	dot = memchr(s, '.', n);
	if (!dot || !parse_dec(s, (size_t)(dot - s), 9, &h->major) ||
	    !parse_dec(dot + 1, n - (size_t)(dot - s) - 1, 9, &h->minor))
		return PEERS_WIRE_ERR_HELLO_VERSION;
	if (h->major != PEERS_WIRE_MAJOR || h->minor > PEERS_WIRE_MINOR)
		return PEERS_WIRE_ERR_HELLO_VERSION;
	return PEERS_WIRE_ERR_NONE;
}

static struct peers_wire_str view(const uint8_t *p, size_t n)
{
	return (struct peers_wire_str){ .ptr = (const char *)p, .len = n };
}

int peers_wire_hello_decode(const uint8_t *p, size_t len, struct peers_wire_hello *h,
			    enum peers_wire_err *err)
{
	size_t off = 0, n;
	enum peers_wire_err e;
	const uint8_t *sp;
	long next;

	for (int line = 1; line <= 3; line++) {
		next = line_next(p, len, off, &n);
		if (next <= 0) {
			if (next < 0)
				set_err(err, PEERS_WIRE_ERR_LINE);
			return (int)next;
		}
		switch (line) {
		case 1:
			e = hello_line1(p + off, n, h);
			if (e != PEERS_WIRE_ERR_NONE) {
				set_err(err, e);
				return -1;
			}
			break;
		case 2:
			h->callee = view(p + off, n);
			break;
		default:
			sp = n ? memchr(p + off, ' ', n) : NULL;
			if (!sp) {
				set_err(err, PEERS_WIRE_ERR_HELLO_PEER);
				return -1;
			}
			h->caller = view(p + off, (size_t)(sp - (p + off)));
			h->rest = view(sp + 1, n - h->caller.len - 1);
			break;
		}
		off = (size_t)next;
	}
	return (int)off;
}

int peers_wire_status_decode(const uint8_t *p, size_t len, unsigned *status,
			     enum peers_wire_err *err)
{
	size_t n;
	long next = line_next(p, len, 0, &n);

	if (next <= 0) {
		if (next < 0)
			set_err(err, PEERS_WIRE_ERR_LINE);
		return (int)next;
	}
	if (!parse_dec(p, n, 3, status)) {
		set_err(err, PEERS_WIRE_ERR_STATUS);
		return -1;
	}
	return (int)next;
}

/* ---- messages ----
 *
 *   +-------+------+--------------------+-----------------+
 *   | class | type | length             | payload         |
 *   | 1 B   | 1 B  | varint, <= 5 bytes | length bytes    |
 *   +-------+------+--------------------+-----------------+
 *                    only when type & 0x80
 */

int peers_wire_msg_decode(const uint8_t *p, size_t len, size_t max_len,
			  struct peers_wire_msg *m, enum peers_wire_err *err)
{
	size_t head_avail;
	uint64_t plen;
	int r;

	if (len < 2)
		return 0;
	m->cls = p[0];
	m->type = p[1];
	m->kind = peers_wire_msg_kind(p[0], p[1]);
	m->payload = NULL;
	m->len = 0;
	if (m->cls == PEERS_WIRE_CLASS_RESERVED) {
		set_err(err, PEERS_WIRE_ERR_RESERVED);
		return -1;
	}
	if (!(m->type & PEERS_WIRE_TYPE_HAS_LEN))
		return 2;
	head_avail = len - 2 < PEERS_WIRE_LEN_MAX ? len - 2 : PEERS_WIRE_LEN_MAX;
	r = varint_get(p + 2, head_avail, &plen);
	if (r == 0 && head_avail < PEERS_WIRE_LEN_MAX)
		return 0;
	if (r <= 0) {
		set_err(err, PEERS_WIRE_ERR_LENGTH);
		return -1;
	}
	/* the second test keeps the whole message within the int returned */
	if (plen > max_len || plen > (uint64_t)INT_MAX - 2 - PEERS_WIRE_LEN_MAX) {
		set_err(err, PEERS_WIRE_ERR_TOO_BIG);
		return -1;
	}
	if (len - 2 - (size_t)r < plen)
		return 0;
	m->payload = p + 2 + r;
	m->len = (size_t)plen;
	return 2 + r + (int)plen;
}

/* ---- payload reader ----
 *
 * A cursor over a whole payload. A read that fails records why (the first
 * failure only) and returns false; the caller stops there.
 */

struct rd {
	const uint8_t *p;
	const uint8_t *end;
	enum peers_wire_err err;
};

static bool rd_fail(struct rd *r, enum peers_wire_err e)
{
	if (r->err == PEERS_WIRE_ERR_NONE)
		r->err = e;
	return false;
}

static size_t rd_left(const struct rd *r)
{
	return (size_t)(r->end - r->p);
}

static bool rd_varint(struct rd *r, uint64_t *v)
{
	int n = varint_get(r->p, rd_left(r), v);

	if (n <= 0)
		return rd_fail(r, n == 0 ? PEERS_WIRE_ERR_TRUNCATED : PEERS_WIRE_ERR_VARINT);
	r->p += n;
	return true;
}

/* A varint of at most 32 bits; RANGE for a larger one. */
static bool rd_varint32(struct rd *r, uint32_t *v)
{
	uint64_t x;

	if (!rd_varint(r, &x))
		return false;
	if (x > UINT32_MAX)
		return rd_fail(r, PEERS_WIRE_ERR_RANGE);
	*v = (uint32_t)x;
	return true;
}

static bool rd_bytes(struct rd *r, uint64_t n, const uint8_t **out)
{
	if (n > rd_left(r))
		return rd_fail(r, PEERS_WIRE_ERR_TRUNCATED);
	*out = r->p;
	r->p += n;
	return true;
}

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static bool rd_u32(struct rd *r, uint32_t *v)
{
	const uint8_t *b;

	if (!rd_bytes(r, 4, &b))
		return false;
	*v = be32(b);
	return true;
}

static int rd_done(const struct rd *r, const uint8_t *start, enum peers_wire_err *err)
{
	if (r->err != PEERS_WIRE_ERR_NONE) {
		set_err(err, r->err);
		return -1;
	}
	return (int)(r->p - start);
}

/* ---- table definitions ---- */

static bool key_type_known(uint64_t type)
{
	return type == PEERS_WIRE_KEY_INTEGER || type == PEERS_WIRE_KEY_IPV4 ||
	       type == PEERS_WIRE_KEY_IPV6 || type == PEERS_WIRE_KEY_STRING ||
	       type == PEERS_WIRE_KEY_BINARY;
}

/* What a key type allows as key length (HAProxy's stktable_types). */
static enum peers_wire_err key_check(uint64_t type, uint64_t key_len)
{
	switch (type) {
	case PEERS_WIRE_KEY_INTEGER:
	case PEERS_WIRE_KEY_IPV4:
		return key_len == 4 ? PEERS_WIRE_ERR_NONE : PEERS_WIRE_ERR_KEY_LEN;
	case PEERS_WIRE_KEY_IPV6:
		return key_len == 16 ? PEERS_WIRE_ERR_NONE : PEERS_WIRE_ERR_KEY_LEN;
	case PEERS_WIRE_KEY_STRING:
	case PEERS_WIRE_KEY_BINARY:
		return key_len >= 1 && key_len <= PEERS_WIRE_MSG_MAX ? PEERS_WIRE_ERR_NONE
								       : PEERS_WIRE_ERR_KEY_LEN;
	default:
		return PEERS_WIRE_ERR_KEY_TYPE;
	}
}

/* The bits of t->data this codec reads and writes, in bit order. */
static uint64_t known_bits(const struct peers_wire_table *t)
{
	return t->data & PEERS_WIRE_DT_KNOWN;
}

/* Params of the types that have some, in bit order:
 *
 *   array:              dt  nbelem
 *   array of counters:  dt  nbelem  period
 *   frequency counter:  dt  period
 *
 * Missing or a dt that is not the type's own: HAProxy ignores the DEFINE.
 */
static void define_params(struct rd *r, struct peers_wire_table *t)
{
	uint64_t bits = known_bits(t), dt;

	for (unsigned i = 0; i < PEERS_WIRE_DT_COUNT; i++) {
		enum peers_wire_enc enc = peers_wire_dt_enc(i);

		if (!(bits & PEERS_WIRE_DT_BIT(i)) || !enc_has_params(enc))
			continue;
		if (!rd_varint(r, &dt))
			break;
		if (dt != i) {
			rd_fail(r, PEERS_WIRE_ERR_PARAMS);
			break;
		}
		if (enc_is_array(enc) && !rd_varint32(r, &t->nbelem[i]))
			break;
		if (enc_is_array(enc) && t->nbelem[i] > PEERS_WIRE_ARRAY_MAX) {
			rd_fail(r, PEERS_WIRE_ERR_ARRAY_SIZE);
			break;
		}
		if (enc_has_period(enc) && !rd_varint32(r, &t->period[i]))
			break;
	}
	/* params missing: HAProxy ignores the definition */
	if (r->err == PEERS_WIRE_ERR_TRUNCATED)
		r->err = PEERS_WIRE_ERR_PARAMS;
}

static bool has_array(uint64_t bits)
{
	for (unsigned i = 0; i < PEERS_WIRE_DT_COUNT; i++)
		if ((bits & PEERS_WIRE_DT_BIT(i)) && enc_is_array(peers_wire_dt_enc(i)))
			return true;
	return false;
}

/*
 *   id | name-len | name | key-type | key-len | bitfield | [ expire | params... ]
 *
 * In HAProxy's order (3.4): an empty name or one that reaches the end is
 * malformed; an unknown key type is ignored before anything else is read;
 * a truncated key length or bitfield is malformed; an expire that cannot
 * be read is taken as absent (older senders).
 */
int peers_wire_define_decode(const uint8_t *p, size_t len, struct peers_wire_table *t,
			     enum peers_wire_err *err)
{
	struct rd r = { .p = p, .end = p + len, .err = PEERS_WIRE_ERR_NONE };
	const uint8_t *name, *before_expire;
	uint64_t name_len, type, key_len;
	enum peers_wire_err e;

	memset(t, 0, sizeof(*t));
	if (!rd_varint(&r, &t->id) || !rd_varint(&r, &name_len))
		return rd_done(&r, p, err);
	if (name_len == 0 || name_len >= rd_left(&r)) {
		rd_fail(&r, PEERS_WIRE_ERR_TRUNCATED);
		return rd_done(&r, p, err);
	}
	rd_bytes(&r, name_len, &name);
	t->name = view(name, (size_t)name_len);
	if (!rd_varint(&r, &type))
		return rd_done(&r, p, err);
	if (!key_type_known(type)) {
		rd_fail(&r, PEERS_WIRE_ERR_KEY_TYPE);
		return rd_done(&r, p, err);
	}
	t->key_type = (enum peers_wire_key_type)type;
	if (!rd_varint(&r, &key_len) || !rd_varint(&r, &t->data))
		return rd_done(&r, p, err);
	e = key_check(type, key_len);
	if (e != PEERS_WIRE_ERR_NONE) {
		rd_fail(&r, e);
		return rd_done(&r, p, err);
	}
	t->key_len = (uint32_t)key_len;

	before_expire = r.p;
	if (!rd_varint32(&r, &t->expire) && r.err == PEERS_WIRE_ERR_TRUNCATED) {
		/* no expire, so no params: arrays cannot be read */
		r.p = before_expire;
		r.err = has_array(known_bits(t)) ? PEERS_WIRE_ERR_PARAMS : PEERS_WIRE_ERR_NONE;
		return rd_done(&r, p, err);
	}
	if (r.err != PEERS_WIRE_ERR_NONE)
		return rd_done(&r, p, err);
	t->has_expire = true;
	define_params(&r, t);
	return rd_done(&r, p, err);
}

int peers_wire_switch_decode(const uint8_t *p, size_t len, uint64_t *table_id,
			     enum peers_wire_err *err)
{
	struct rd r = { .p = p, .end = p + len, .err = PEERS_WIRE_ERR_NONE };

	rd_varint(&r, table_id);
	return rd_done(&r, p, err);
}

int peers_wire_ack_decode(const uint8_t *p, size_t len, uint64_t *table_id,
			  uint32_t *update_id, enum peers_wire_err *err)
{
	struct rd r = { .p = p, .end = p + len, .err = PEERS_WIRE_ERR_NONE };

	if (rd_varint(&r, table_id))
		rd_u32(&r, update_id);
	return rd_done(&r, p, err);
}

/* ---- updates ---- */

/* Checks a table as both update directions need it: a known key type with
 * a length it allows, arrays within PEERS_WIRE_ARRAY_MAX. */
static enum peers_wire_err table_usable(const struct peers_wire_table *t)
{
	enum peers_wire_err e = key_check(t->key_type, t->key_len);

	if (e != PEERS_WIRE_ERR_NONE)
		return e;
	for (unsigned i = 0; i < PEERS_WIRE_DT_COUNT; i++)
		if ((t->data & PEERS_WIRE_DT_BIT(i)) && enc_is_array(peers_wire_dt_enc(i)) &&
		    t->nbelem[i] > PEERS_WIRE_ARRAY_MAX)
			return PEERS_WIRE_ERR_ARRAY_SIZE;
	return PEERS_WIRE_ERR_NONE;
}

/*
 *   string   varint n, n bytes (HAProxy keeps min(n, key_len - 1) of them)
 *   integer  4 bytes big-endian
 *   ipv4     4 bytes, ipv6 16 bytes, binary key_len bytes: as stored
 */
static void rd_key(struct rd *r, const struct peers_wire_table *t, struct peers_wire_key *k)
{
	uint64_t n;

	k->integer = 0;
	switch (t->key_type) {
	case PEERS_WIRE_KEY_STRING:
		if (!rd_varint(r, &n) || !rd_bytes(r, n, &k->ptr))
			return;
		k->len = n < t->key_len - 1 ? (size_t)n : t->key_len - 1;
		return;
	case PEERS_WIRE_KEY_INTEGER:
		if (!rd_bytes(r, 4, &k->ptr))
			return;
		k->len = 4;
		k->integer = be32(k->ptr);
		return;
	case PEERS_WIRE_KEY_IPV4:
	case PEERS_WIRE_KEY_IPV6:
	case PEERS_WIRE_KEY_BINARY:
		if (rd_bytes(r, t->key_len, &k->ptr))
			k->len = t->key_len;
		return;
	}
}

static bool rd_freq(struct rd *r, struct peers_wire_freq *f)
{
	return rd_varint(r, &f->age) && rd_varint(r, &f->curr) && rd_varint(r, &f->prev);
}

/*
 * server_key:  varint n; n = 0: no entry; else n bytes holding
 *
 *   cache id (varint, 1..128)  [ value length (varint)  value bytes ]
 *
 * and nothing else (HAProxy would read on from the end of the value: a
 * length that says more than that is malformed here).
 */
static bool rd_dict(struct rd *r, struct peers_wire_dict *d)
{
	struct rd in = { .err = PEERS_WIRE_ERR_NONE };
	const uint8_t *body;
	uint64_t n, vlen;

	d->present = false;
	d->has_value = false;
	d->value = view(NULL, 0);
	if (!rd_varint(r, &n) || !rd_bytes(r, n, &body))
		return false;
	if (n == 0)
		return true;
	in.p = body;
	in.end = body + n;
	if (!rd_varint(&in, &d->id) || d->id == 0 || d->id > PEERS_WIRE_DICT_MAX)
		return rd_fail(r, in.err == PEERS_WIRE_ERR_VARINT ? in.err : PEERS_WIRE_ERR_DICT);
	d->present = true;
	if (rd_left(&in) == 0)
		return true;
	if (!rd_varint(&in, &vlen) || vlen != rd_left(&in))
		return rd_fail(r, in.err == PEERS_WIRE_ERR_VARINT ? in.err : PEERS_WIRE_ERR_DICT);
	d->has_value = true;
	d->value = view(in.p, (size_t)vlen);
	return true;
}

/* The array a data type's elements go in (NULL for gpc_rate: freq). */
static uint64_t *array_u(struct peers_wire_update *u, unsigned dt)
{
	return dt == PEERS_WIRE_DT_GPT ? u->gpt : u->gpc;
}

static const uint64_t *array_u_const(const struct peers_wire_update *u, unsigned dt)
{
	return dt == PEERS_WIRE_DT_GPT ? u->gpt : u->gpc;
}

/* One value of data type dt, in its encoding. */
static bool rd_value(struct rd *r, const struct peers_wire_table *t, unsigned dt,
		     struct peers_wire_update *u)
{
	switch (peers_wire_dt_enc(dt)) {
	case PEERS_WIRE_ENC_UINT:
	case PEERS_WIRE_ENC_SINT:
	case PEERS_WIRE_ENC_ULL:
		return rd_varint(r, &u->u[dt]);
	case PEERS_WIRE_ENC_FREQ:
		return rd_freq(r, &u->f[dt]);
	case PEERS_WIRE_ENC_DICT:
		return rd_dict(r, &u->server_key);
	case PEERS_WIRE_ENC_ARRAY_UINT:
		for (uint32_t i = 0; i < t->nbelem[dt]; i++)
			if (!rd_varint(r, &array_u(u, dt)[i]))
				return false;
		return true;
	case PEERS_WIRE_ENC_ARRAY_FREQ:
		for (uint32_t i = 0; i < t->nbelem[dt]; i++)
			if (!rd_freq(r, &u->gpc_rate[i]))
				return false;
		return true;
	}
	return false;
}

/* The id and expire fields of an update type; false for other types. */
static bool is_update_type(uint8_t type, bool *has_id, bool *timed)
{
	enum peers_wire_msg_kind k = peers_wire_msg_kind(PEERS_WIRE_CLASS_TABLE, type);

	*has_id = k == PEERS_WIRE_MSG_UPDATE || k == PEERS_WIRE_MSG_UPDATE_TIMED;
	*timed = k == PEERS_WIRE_MSG_UPDATE_TIMED || k == PEERS_WIRE_MSG_INCUPDATE_TIMED;
	return *has_id || *timed || k == PEERS_WIRE_MSG_INCUPDATE;
}

int peers_wire_update_decode(uint8_t type, const uint8_t *p, size_t len,
			     const struct peers_wire_table *t, struct peers_wire_update *u,
			     enum peers_wire_err *err)
{
	struct rd r = { .p = p, .end = p + len, .err = PEERS_WIRE_ERR_NONE };
	uint64_t bits = known_bits(t);
	enum peers_wire_err e = table_usable(t);

	if (e != PEERS_WIRE_ERR_NONE || !is_update_type(type, &u->has_id, &u->timed)) {
		set_err(err, e != PEERS_WIRE_ERR_NONE ? e : PEERS_WIRE_ERR_MSG_TYPE);
		return -1;
	}
	u->id = 0;
	u->expire = 0;
	u->key = (struct peers_wire_key){ 0 };
	u->decoded = 0;
	u->trailing = 0;
	if (u->has_id)
		rd_u32(&r, &u->id);
	if (u->timed)
		rd_u32(&r, &u->expire);
	rd_key(&r, t, &u->key);
	for (unsigned i = 0; i < PEERS_WIRE_DT_COUNT && r.err == PEERS_WIRE_ERR_NONE; i++)
		if (bits & PEERS_WIRE_DT_BIT(i))
			rd_value(&r, t, i, u);
	if (r.err != PEERS_WIRE_ERR_NONE)
		return rd_done(&r, p, err);
	u->decoded = bits;
	u->trailing = rd_left(&r);
	return rd_done(&r, p, err);
}

/* ---- writer ----
 *
 * Appenders return false when the bytes do not fit; a public encoder then
 * puts the writer back where it started (w->len) and returns -1.
 */

void peers_wire_writer_init(struct peers_wire_writer *w, uint8_t *buf, size_t cap)
{
	w->buf = buf;
	w->cap = buf ? cap : 0;
	w->len = 0;
}

static uint8_t *w_room(struct peers_wire_writer *w, size_t n)
{
	uint8_t *at;

	if (n > w->cap - w->len)
		return NULL;
	at = w->buf + w->len;
	w->len += n;
	return at;
}

static bool put_bytes(struct peers_wire_writer *w, const void *src, size_t n)
{
	uint8_t *at = w_room(w, n);

	if (!at)
		return false;
	if (n)
		memcpy(at, src, n);
	return true;
}

static bool put_u8(struct peers_wire_writer *w, uint8_t v)
{
	return put_bytes(w, &v, 1);
}

static bool put_varint(struct peers_wire_writer *w, uint64_t v)
{
	size_t n = peers_wire_varint_encode(w->buf + w->len, w->cap - w->len, v);

	w->len += n;
	return n > 0;
}

static bool put_u32(struct peers_wire_writer *w, uint32_t v)
{
	uint8_t b[4] = { (uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v };

	return put_bytes(w, b, 4);
}

static bool put_dec(struct peers_wire_writer *w, uint64_t v)
{
	uint8_t d[20];
	size_t n = 0;

	do {
		d[sizeof(d) - ++n] = (uint8_t)('0' + v % 10);
		v /= 10;
	} while (v);
	return put_bytes(w, d + sizeof(d) - n, n);
}

static int w_finish(struct peers_wire_writer *w, size_t start, bool ok)
{
	if (ok)
		return 0;
	w->len = start;
	return -1;
}

/* A message's class and type, and one byte for its length (most payloads
 * are under 240 bytes); msg_end() makes room for a longer length. */
static bool msg_begin(struct peers_wire_writer *w, uint8_t cls, uint8_t type)
{
	return put_u8(w, cls) && put_u8(w, type) && put_u8(w, 0);
}

static bool msg_end(struct peers_wire_writer *w, size_t start)
{
	size_t body = start + 3, plen = w->len - body, n = peers_wire_varint_size(plen);

	if (plen > PEERS_WIRE_MSG_MAX || n - 1 > w->cap - w->len)
		return false;
	memmove(w->buf + body + n - 1, w->buf + body, plen);
	peers_wire_varint_encode(w->buf + start + 2, n, plen);
	w->len += n - 1;
	return true;
}

/* ---- encoders ---- */

/* A name for a hello line: non-empty, no CR, LF (nor space: nospace),
 * short enough for its line (with " <pid> 1\n") to fit PEERS_WIRE_LINE_MAX. */
static bool name_ok(struct peers_wire_str s, bool nospace)
{
	if (s.len == 0 || s.len > PEERS_WIRE_LINE_MAX - 16 || !s.ptr)
		return false;
	for (size_t i = 0; i < s.len; i++)
		if (s.ptr[i] == '\n' || s.ptr[i] == '\r' || (nospace && s.ptr[i] == ' '))
			return false;
	return true;
}

int peers_wire_encode_hello(struct peers_wire_writer *w, unsigned minor,
			    struct peers_wire_str callee, struct peers_wire_str caller,
			    uint32_t pid)
{
	static const char proto[] = PEERS_WIRE_PROTO " 2.";
	size_t start = w->len;
	bool ok;

	if (minor > PEERS_WIRE_MINOR || !name_ok(callee, false) || !name_ok(caller, true))
		return -1;
	ok = put_bytes(w, proto, sizeof(proto) - 1) && put_dec(w, minor) && put_u8(w, '\n') &&
	     put_bytes(w, callee.ptr, callee.len) && put_u8(w, '\n') &&
	     put_bytes(w, caller.ptr, caller.len) && put_u8(w, ' ') && put_dec(w, pid) &&
	     put_bytes(w, " 1\n", 3);
	return w_finish(w, start, ok);
}

int peers_wire_encode_status(struct peers_wire_writer *w, unsigned status)
{
	size_t start = w->len;

	if (status < 100 || status > 999)
		return -1;
	return w_finish(w, start, put_dec(w, status) && put_u8(w, '\n'));
}

int peers_wire_encode_ctrl(struct peers_wire_writer *w, enum peers_wire_msg_kind kind)
{
	size_t start = w->len;

	if (kind <= PEERS_WIRE_MSG_UNKNOWN || kind >= PEERS_WIRE_MSG_COUNT ||
	    (msg_table[kind].type & PEERS_WIRE_TYPE_HAS_LEN))
		return -1;
	return w_finish(w, start, put_u8(w, msg_table[kind].cls) &&
				  put_u8(w, msg_table[kind].type));
}

/* The table as encode_define and encode_update take it. */
static bool table_encodable(const struct peers_wire_table *t)
{
	if (table_usable(t) != PEERS_WIRE_ERR_NONE || (t->data & ~PEERS_WIRE_DT_KNOWN))
		return false;
	return t->has_expire || !has_array(t->data);
}

int peers_wire_encode_define(struct peers_wire_writer *w, const struct peers_wire_table *t)
{
	size_t start = w->len;
	bool ok;

	if (!table_encodable(t) || t->name.len == 0 || !t->name.ptr)
		return -1;
	ok = msg_begin(w, PEERS_WIRE_CLASS_TABLE, 0x82) && put_varint(w, t->id) &&
	     put_varint(w, t->name.len) && put_bytes(w, t->name.ptr, t->name.len) &&
	     put_varint(w, (uint64_t)t->key_type) && put_varint(w, t->key_len) &&
	     put_varint(w, t->data);
	if (ok && t->has_expire) {
		ok = put_varint(w, t->expire);
		for (unsigned i = 0; ok && i < PEERS_WIRE_DT_COUNT; i++) {
			enum peers_wire_enc enc = peers_wire_dt_enc(i);

			if (!(t->data & PEERS_WIRE_DT_BIT(i)) || !enc_has_params(enc))
				continue;
			ok = put_varint(w, i) &&
			     (!enc_is_array(enc) || put_varint(w, t->nbelem[i])) &&
			     (!enc_has_period(enc) || put_varint(w, t->period[i]));
		}
	}
	return w_finish(w, start, ok && msg_end(w, start));
}

int peers_wire_encode_switch(struct peers_wire_writer *w, uint64_t table_id)
{
	size_t start = w->len;

	return w_finish(w, start, msg_begin(w, PEERS_WIRE_CLASS_TABLE, 0x83) &&
				  put_varint(w, table_id) && msg_end(w, start));
}

int peers_wire_encode_ack(struct peers_wire_writer *w, uint64_t table_id, uint32_t update_id)
{
	size_t start = w->len;

	return w_finish(w, start, msg_begin(w, PEERS_WIRE_CLASS_TABLE, 0x84) &&
				  put_varint(w, table_id) && put_u32(w, update_id) &&
				  msg_end(w, start));
}

static bool put_key(struct peers_wire_writer *w, const struct peers_wire_table *t,
		    const struct peers_wire_key *k)
{
	uint8_t *pad;

	if (k->len && !k->ptr)
		return false;
	switch (t->key_type) {
	case PEERS_WIRE_KEY_STRING:
		return put_varint(w, k->len) && put_bytes(w, k->ptr, k->len);
	case PEERS_WIRE_KEY_INTEGER:
		return put_u32(w, k->integer);
	case PEERS_WIRE_KEY_IPV4:
	case PEERS_WIRE_KEY_IPV6:
		return k->len == t->key_len && put_bytes(w, k->ptr, k->len);
	case PEERS_WIRE_KEY_BINARY:
		if (k->len > t->key_len || !put_bytes(w, k->ptr, k->len))
			return false;
		pad = w_room(w, t->key_len - k->len);
		if (pad)
			memset(pad, 0, t->key_len - k->len);
		return pad != NULL;
	}
	return false;
}

static bool put_freq(struct peers_wire_writer *w, const struct peers_wire_freq *f)
{
	return put_varint(w, f->age) && put_varint(w, f->curr) && put_varint(w, f->prev);
}

static bool put_dict(struct peers_wire_writer *w, const struct peers_wire_dict *d)
{
	size_t n;

	if (!d->present)
		return put_varint(w, 0);
	if (d->id == 0 || d->id > PEERS_WIRE_DICT_MAX || (d->has_value && d->value.len && !d->value.ptr))
		return false;
	n = peers_wire_varint_size(d->id);
	if (d->has_value)
		n += peers_wire_varint_size(d->value.len) + d->value.len;
	return put_varint(w, n) && put_varint(w, d->id) &&
	       (!d->has_value ||
		(put_varint(w, d->value.len) && put_bytes(w, d->value.ptr, d->value.len)));
}

static bool put_value(struct peers_wire_writer *w, const struct peers_wire_table *t, unsigned dt,
		      const struct peers_wire_update *u)
{
	switch (peers_wire_dt_enc(dt)) {
	case PEERS_WIRE_ENC_UINT:
	case PEERS_WIRE_ENC_SINT:
	case PEERS_WIRE_ENC_ULL:
		return put_varint(w, u->u[dt]);
	case PEERS_WIRE_ENC_FREQ:
		return put_freq(w, &u->f[dt]);
	case PEERS_WIRE_ENC_DICT:
		return put_dict(w, &u->server_key);
	case PEERS_WIRE_ENC_ARRAY_UINT:
		for (uint32_t i = 0; i < t->nbelem[dt]; i++)
			if (!put_varint(w, array_u_const(u, dt)[i]))
				return false;
		return true;
	case PEERS_WIRE_ENC_ARRAY_FREQ:
		for (uint32_t i = 0; i < t->nbelem[dt]; i++)
			if (!put_freq(w, &u->gpc_rate[i]))
				return false;
		return true;
	}
	return false;
}

int peers_wire_encode_update(struct peers_wire_writer *w, const struct peers_wire_table *t,
			     const struct peers_wire_update *u)
{
	static const uint8_t types[2][2] = { { 0x81, 0x86 }, { 0x80, 0x85 } };
	size_t start = w->len;
	bool ok;

	if (!table_encodable(t))
		return -1;
	ok = msg_begin(w, PEERS_WIRE_CLASS_TABLE, types[u->has_id][u->timed]) &&
	     (!u->has_id || put_u32(w, u->id)) && (!u->timed || put_u32(w, u->expire)) &&
	     put_key(w, t, &u->key);
	for (unsigned i = 0; ok && i < PEERS_WIRE_DT_COUNT; i++)
		if (t->data & PEERS_WIRE_DT_BIT(i))
			ok = put_value(w, t, i, u);
	return w_finish(w, start, ok && msg_end(w, start));
}
