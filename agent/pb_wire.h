/*
 * pb_wire.h - the protocol buffers wire format, pure (docs/STYLE.md,
 * rule 2): varints, tags, length-delimited fields, fixed 32- and 64-bit
 * fields, read from caller memory and written into a caller buffer of
 * fixed capacity. No allocation, no I/O, no clock, no logging; it
 * includes nothing of ours. The messages of Envoy's rate limit service
 * are agent/rls_wire.h's, built on this.
 *
 *   a field:  tag (varint: field number << 3 | wire type), then
 *             0 VARINT  a varint (1..10 bytes, 7 bits each, low first)
 *             1 I64     8 bytes, little-endian
 *             2 LEN     a varint length, then that many bytes
 *             5 I32     4 bytes, little-endian
 *             3, 4      start / end of a group (proto2, deprecated): refused
 *
 * A reader walks one message's bytes [p, end) and never reads outside
 * them; a nested message is read by a reader over its LEN view, so the
 * depth of what is read is the schema's, never the input's (an unknown
 * field is skipped whole, whatever it holds).
 *
 * Errors are an enum pb_err (PB_WIRE_ERRORS below: the name and the text);
 * agent/rls_wire.h continues the list with the messages' own errors.
 */
#ifndef PB_WIRE_H
#define PB_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PB_VARINT_MAX      10u          /* bytes of a 64-bit varint */
#define PB_FIELD_MAX       ((1u << 29) - 1) /* largest field number */

enum pb_wire_type {
	PB_VARINT = 0,
	PB_I64 = 1,
	PB_LEN = 2,
	PB_SGROUP = 3,
	PB_EGROUP = 4,
	PB_I32 = 5,
};

/* The wire format's errors: NAME, text. */
#define PB_WIRE_ERRORS(X)                                                         \
	X(NONE,        "no error")                                                \
	X(TRUNCATED,   "a field runs past the end of its message")                \
	X(VARINT,      "varint over 10 bytes or over 64 bits")                    \
	X(FIELD,       "field number 0 or over 2^29-1")                           \
	X(WIRE_TYPE,   "group or unknown wire type (6, 7)")                       \
	X(FULL,        "the output buffer is full")

enum pb_err {
#define X(name, text) PB_ERR_##name,
	PB_WIRE_ERRORS(X)
#undef X
	PB_ERR_COUNT
};

/* A view into caller memory: never NUL-terminated, never owned. */
struct pb_str {
	const char *ptr;
	size_t len;
};

/* A reader over one message's bytes. */
struct pb_reader {
	const uint8_t *p;
	const uint8_t *end;
};

/* One field as pb_next() reads it: its number and wire type, and its
 * value: a varint, a fixed field's bits (i64 / i32 in u), or a LEN
 * field's bytes (a view into the reader's memory). */
struct pb_field {
	uint32_t number;
	enum pb_wire_type type;
	uint64_t u;
	struct pb_str bytes;
};

/* Output of the encoders: caller memory of fixed capacity. */
struct pb_writer {
	uint8_t *buf;
	size_t cap;
	size_t len;
};

static inline void pb_reader_init(struct pb_reader *r, const void *p, size_t len)
{
	r->p = p;
	r->end = r->p + len;
}

static inline bool pb_reader_done(const struct pb_reader *r)
{
	return r->p >= r->end;
}

/* Reads a varint into *v. Returns 0, or -1 with *err: TRUNCATED (the bytes
 * end before its last byte), VARINT (more than 10 bytes, or a 10th byte
 * over 1: more than 64 bits). */
int pb_read_varint(struct pb_reader *r, uint64_t *v, enum pb_err *err);

/* Reads the next field whole (an unknown one is then only skipped by the
 * caller doing nothing with it). Returns 0, or -1 with *err: TRUNCATED,
 * VARINT, FIELD (number 0 or over PB_FIELD_MAX), WIRE_TYPE (groups, 6, 7).
 * A LEN field's length is checked against what is left before its view is
 * made: a lying length is TRUNCATED. */
int pb_next(struct pb_reader *r, struct pb_field *f, enum pb_err *err);

/* Is s[0..n) valid UTF-8 (no overlong form, no surrogate, <= U+10FFFF)?
 * proto3 `string` fields must be. */
bool pb_utf8_ok(const char *s, size_t n);

/* The text of an error ("unknown error" out of the enum). */
const char *pb_err_str(enum pb_err err);

/* ---- writing ----
 *
 * Each pb_put_* appends one field, or nothing and returns -1 when it does
 * not fit (w->len unchanged). pb_size_* say how many bytes a field takes,
 * for the lengths of nested messages (written size first, then the
 * fields: no second buffer).
 */
void pb_writer_init(struct pb_writer *w, uint8_t *buf, size_t cap);

size_t pb_size_varint(uint64_t v);
/* A tag and its varint; a tag and its LEN header for n bytes. */
size_t pb_size_tag_varint(uint32_t field, uint64_t v);
size_t pb_size_tag_len(uint32_t field, size_t n);

int pb_put_varint(struct pb_writer *w, uint64_t v);
int pb_put_tag(struct pb_writer *w, uint32_t field, enum pb_wire_type type);
int pb_put_tag_varint(struct pb_writer *w, uint32_t field, uint64_t v);
/* A LEN field's tag and length only: its n bytes follow (a nested message). */
int pb_put_len_header(struct pb_writer *w, uint32_t field, size_t n);
/* A LEN field whole: tag, length, bytes. */
int pb_put_bytes(struct pb_writer *w, uint32_t field, const void *p, size_t n);
int pb_put_raw(struct pb_writer *w, const void *p, size_t n);

#endif /* PB_WIRE_H */
