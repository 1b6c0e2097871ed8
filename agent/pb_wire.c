/*
 * pb_wire.c - the protocol buffers wire format (see pb_wire.h): reading
 * fields of caller memory, writing them into a caller buffer. Pure: the
 * only calls are mem*() (make check reads the object's symbols).
 */
#include "agent/pb_wire.h"

#include <string.h>

static const char *const pb_err_texts[PB_ERR_COUNT] = {
#define X(name, text) [PB_ERR_##name] = text,
	PB_WIRE_ERRORS(X)
#undef X
};

const char *pb_err_str(enum pb_err err)
{
	return (unsigned)err < PB_ERR_COUNT ? pb_err_texts[err] : "unknown error";
}

/* ---- reading ---- */

int pb_read_varint(struct pb_reader *r, uint64_t *v, enum pb_err *err)
{
	uint64_t x = 0;

	for (unsigned i = 0; i < PB_VARINT_MAX; i++) {
		uint8_t b;

		if (r->p >= r->end) {
			*err = PB_ERR_TRUNCATED;
			return -1;
		}
		b = *r->p++;
		/* The 10th byte holds bit 63 only. */
		if (i == PB_VARINT_MAX - 1 && b > 1) {
			*err = PB_ERR_VARINT;
			return -1;
		}
		x |= (uint64_t)(b & 0x7f) << (7 * i);
		if (!(b & 0x80)) {
			*v = x;
			return 0;
		}
	}
	*err = PB_ERR_VARINT;
	return -1;
}

/* n little-endian bytes. */
static uint64_t pb_le(const uint8_t *p, unsigned n)
{
	uint64_t x = 0;

	for (unsigned i = n; i-- > 0;)
		x = x << 8 | p[i];
	return x;
}

int pb_next(struct pb_reader *r, struct pb_field *f, enum pb_err *err)
{
	uint64_t tag, n;

	if (pb_read_varint(r, &tag, err) < 0)
		return -1;
	if (tag >> 3 == 0 || tag >> 3 > PB_FIELD_MAX) {
		*err = PB_ERR_FIELD;
		return -1;
	}
	f->number = (uint32_t)(tag >> 3);
	f->type = (enum pb_wire_type)(tag & 7);
	f->u = 0;
	f->bytes = (struct pb_str){ NULL, 0 };
	switch (f->type) {
	case PB_VARINT:
		return pb_read_varint(r, &f->u, err);
	case PB_I64:
	case PB_I32:
		n = f->type == PB_I64 ? 8 : 4;
		if ((size_t)(r->end - r->p) < n) {
			*err = PB_ERR_TRUNCATED;
			return -1;
		}
		f->u = pb_le(r->p, (unsigned)n);
		r->p += n;
		return 0;
	case PB_LEN:
		if (pb_read_varint(r, &n, err) < 0)
			return -1;
		if (n > (uint64_t)(r->end - r->p)) {
			*err = PB_ERR_TRUNCATED;
			return -1;
		}
		f->bytes = (struct pb_str){ (const char *)r->p, (size_t)n };
		r->p += n;
		return 0;
	default:
		*err = PB_ERR_WIRE_TYPE;
		return -1;
	}
}

bool pb_utf8_ok(const char *s, size_t n)
{
	const uint8_t *p = (const uint8_t *)s, *end = p + n;

	while (p < end) {
		uint8_t c = *p++;
		unsigned more;
		uint32_t cp, min;

		if (c < 0x80)
			continue;
		if (c >= 0xc2 && c <= 0xdf) {
			more = 1, cp = c & 0x1f, min = 0x80;
		} else if (c >= 0xe0 && c <= 0xef) {
			more = 2, cp = c & 0x0f, min = 0x800;
		} else if (c >= 0xf0 && c <= 0xf4) {
			more = 3, cp = c & 0x07, min = 0x10000;
		} else {
			return false;
		}
		if ((size_t)(end - p) < more)
			return false;
		for (unsigned i = 0; i < more; i++) {
			if ((p[i] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (p[i] & 0x3f);
		}
		p += more;
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
	}
	return true;
}

/* ---- writing ---- */

void pb_writer_init(struct pb_writer *w, uint8_t *buf, size_t cap)
{
	w->buf = buf;
	w->cap = buf ? cap : 0;
	w->len = 0;
}

size_t pb_size_varint(uint64_t v)
{
	size_t n = 1;

	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

size_t pb_size_tag_varint(uint32_t field, uint64_t v)
{
	return pb_size_varint((uint64_t)field << 3) + pb_size_varint(v);
}

size_t pb_size_tag_len(uint32_t field, size_t n)
{
	return pb_size_varint((uint64_t)field << 3) + pb_size_varint(n) + n;
}

/* Room for n bytes, or NULL (the writer unchanged). */
static uint8_t *pb_room(struct pb_writer *w, size_t n)
{
	if (n > w->cap - w->len)
		return NULL;
	return w->buf + w->len;
}

static size_t pb_varint_at(uint8_t *at, uint64_t v)
{
	size_t i = 0;

	while (v >= 0x80) {
		at[i++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	at[i++] = (uint8_t)v;
	return i;
}

int pb_put_varint(struct pb_writer *w, uint64_t v)
{
	uint8_t *at = pb_room(w, pb_size_varint(v));

	if (!at)
		return -1;
	w->len += pb_varint_at(at, v);
	return 0;
}

int pb_put_tag(struct pb_writer *w, uint32_t field, enum pb_wire_type type)
{
	return pb_put_varint(w, (uint64_t)field << 3 | (uint64_t)type);
}

int pb_put_tag_varint(struct pb_writer *w, uint32_t field, uint64_t v)
{
	uint8_t *at = pb_room(w, pb_size_tag_varint(field, v));

	if (!at)
		return -1;
	at += pb_varint_at(at, (uint64_t)field << 3 | PB_VARINT);
	pb_varint_at(at, v);
	w->len += pb_size_tag_varint(field, v);
	return 0;
}

int pb_put_len_header(struct pb_writer *w, uint32_t field, size_t n)
{
	size_t hdr = pb_size_tag_len(field, n) - n;
	uint8_t *at = pb_room(w, hdr);

	if (!at)
		return -1;
	at += pb_varint_at(at, (uint64_t)field << 3 | PB_LEN);
	pb_varint_at(at, n);
	w->len += hdr;
	return 0;
}

int pb_put_raw(struct pb_writer *w, const void *p, size_t n)
{
	uint8_t *at = pb_room(w, n);

	if (!at)
		return -1;
	if (n)
		memcpy(at, p, n);
	w->len += n;
	return 0;
}

int pb_put_bytes(struct pb_writer *w, uint32_t field, const void *p, size_t n)
{
	size_t before = w->len;

	if (n > w->cap || !pb_room(w, pb_size_tag_len(field, n)))
		return -1;
	if (pb_put_len_header(w, field, n) < 0 || pb_put_raw(w, p, n) < 0) {
		w->len = before;
		return -1;
	}
	return 0;
}
