/*
 * spop.h - a pure SPOP 2.0 codec: no allocation, no I/O, no logging.
 *
 * Decoders take (p, len) of caller memory and return the bytes consumed
 * (> 0), 0 when more input is needed, or -1 when the input is malformed,
 * with the reason in *err (an enum spop_err, the DISCONNECT status code).
 * Decoded strings are views into the input.
 *
 * Encoders append to a struct spop_writer; see spop-t.h.
 */
#ifndef SPOP_H
#define SPOP_H

#include "spop-t.h"

/* Standard message of a DISCONNECT status code ("unknown error" for codes
 * not in the table). Never NULL. */
const char *spop_err_str(enum spop_err err);

/* Name of a frame type, "unknown" for others. */
const char *spop_frame_type_str(enum spop_frame_type type);

/* ---- varints (HAProxy "peers" encoding, at most 10 bytes) ---- */

/* Decodes one varint. Returns bytes consumed, 0 if p ends before the last
 * byte, -1 (SPOP_ERR_INVALID) if it runs past 10 bytes or overflows 64 bits. */
int spop_varint_decode(const uint8_t *p, size_t len, uint64_t *out, enum spop_err *err);

/* Encodes v into p (cap bytes). Returns bytes written (1..10), 0 if cap is
 * too small. */
size_t spop_varint_encode(uint8_t *p, size_t cap, uint64_t v);

/* Bytes spop_varint_encode would write for v. */
size_t spop_varint_size(uint64_t v);

/* ---- typed data ---- */

/* Decodes one TYPED-DATA. A reserved type (10..15) is SPOP_ERR_INVALID, and
 * so is a STRING/BINARY too long for the int result (> INT_MAX bytes).
 * Returns consumed / 0 / -1. */
int spop_data_decode(const uint8_t *p, size_t len, struct spop_data *out, enum spop_err *err);

/* A non-negative integer of any of the four integer types: true with *v
 * set, or false (another type, or a negative signed value). */
bool spop_data_uint(const struct spop_data *d, uint64_t *v);

/* ---- frames ---- */

/* Decodes one length-prefixed frame from the start of p.
 * Returns 4 + LENGTH when the whole frame is in p, 0 when more is needed,
 * -1 when: LENGTH > max_frame_size (SPOP_ERR_TOO_BIG; reported as soon as
 * the 4 length bytes are in, so a caller never buffers an oversized frame),
 * LENGTH < SPOP_MIN_FRAME_LEN or the ids are malformed or run past the
 * frame (SPOP_ERR_INVALID). A LENGTH over INT_MAX - 4 is SPOP_ERR_TOO_BIG
 * whatever max_frame_size says (the result is an int).
 * The frame type is not checked here. */
int spop_frame_decode(const uint8_t *p, size_t len, size_t max_frame_size,
		      struct spop_frame *f, enum spop_err *err);

/* Reads only the 4-byte length prefix: returns 0 and sets *frame_len, or
 * -1 if fewer than 4 bytes are given. */
int spop_frame_peek_len(const uint8_t *p, size_t len, uint32_t *frame_len);

/* ---- payload cursors (the payload is complete: truncation is -1) ---- */

void spop_cursor_init(struct spop_cursor *c, const uint8_t *p, size_t len);

/* Next message of a NOTIFY payload: 1 with *m filled, 0 at the end, -1 if
 * malformed (c->err). Validates every argument of the message. */
int spop_msg_next(struct spop_cursor *c, struct spop_msg *m);

/* Starts a cursor over the arguments of m. */
void spop_args_init(struct spop_cursor *c, const struct spop_msg *m);

/* Next argument of a message: 1 / 0 at the end / -1. */
int spop_args_next(struct spop_cursor *c, struct spop_kv *kv);

/* Next item of a KV-LIST (HELLO, DISCONNECT payloads): 1 / 0 / -1. */
int spop_kv_next(struct spop_cursor *c, struct spop_kv *kv);

/* Next action of an ACK payload: 1 / 0 / -1. For SET-VAR *value is set,
 * for UNSET-VAR value->type is SPOP_DATA_NULL. */
int spop_action_next(struct spop_cursor *c, enum spop_action_type *type,
		     enum spop_scope *scope, struct spop_str *name, struct spop_data *value);

/* Decodes a HAPROXY-HELLO (or AGENT-HELLO) payload. Unknown items are
 * skipped. Returns 0, or -1 with *err: SPOP_ERR_NO_VSN, SPOP_ERR_NO_FRAME_SIZE,
 * SPOP_ERR_NO_CAP when a mandatory item is missing or of the wrong type,
 * SPOP_ERR_INVALID when malformed. For an AGENT-HELLO the "version" item
 * fills supported_versions. */
int spop_hello_decode(const uint8_t *payload, size_t len, struct spop_hello *h,
		      enum spop_err *err);

/* Is `version` (e.g. "2.0") in a comma-separated supported-versions list?
 * Spaces around items are ignored; versions compare as major.minor numbers. */
bool spop_version_supported(struct spop_str list, const char *version);

/* Is `cap` (e.g. "pipelining") in a comma-separated capabilities list? */
bool spop_has_capability(struct spop_str list, const char *cap);

/* Decodes a DISCONNECT payload. Returns 0 or -1 (*err). A missing
 * status-code leaves has_status_code false. */
int spop_disconnect_decode(const uint8_t *payload, size_t len, struct spop_disconnect *d,
			   enum spop_err *err);

/* ---- encoders ---- */

void spop_writer_init(struct spop_writer *w, uint8_t *buf, size_t cap);

/* Appends the length placeholder and the metadata; returns the offset of
 * the frame (to pass to spop_frame_end). */
size_t spop_frame_begin(struct spop_writer *w, enum spop_frame_type type, uint32_t flags,
			uint64_t stream_id, uint64_t frame_id);

/* Patches the frame's length. Returns 0, or -1 if the writer overflowed or
 * the frame exceeds max_frame_size (the frame is then removed: w->len goes
 * back to `start`, and `overflow` is cleared so that the caller may write
 * something smaller instead). */
int spop_frame_end(struct spop_writer *w, size_t start, size_t max_frame_size);

/* Appenders. A caller error (unknown data type, nargs > SPOP_MAX_ARGS) sets
 * `overflow` too, so that the frame fails at spop_frame_end(). */
void spop_put_u8(struct spop_writer *w, uint8_t v);
void spop_put_varint(struct spop_writer *w, uint64_t v);
void spop_put_bytes(struct spop_writer *w, const void *p, size_t len);
/* Room for n more bytes at the end of w, for the caller to fill (all n of
 * them), or NULL: the writer overflowed (and overflow sticks). Inline: an
 * answer's fixed-size value (a lease id) is written in place with it. */
static inline uint8_t *spop_put_room(struct spop_writer *w, size_t n)
{
	uint8_t *p;

	if (w->overflow)
		return NULL;
	if (n > w->cap - w->len) {
		w->overflow = true;
		return NULL;
	}
	p = w->buf + w->len;
	w->len += n;
	return p;
}
/* Untyped STRING: <len:varint><bytes> (names of messages, args, KV items, vars). */
void spop_put_str(struct spop_writer *w, const char *p, size_t len);
void spop_put_data(struct spop_writer *w, const struct spop_data *d);

/* KV items with a typed value. */
void spop_put_kv_str(struct spop_writer *w, const char *name, const char *v, size_t vlen);
void spop_put_kv_uint32(struct spop_writer *w, const char *name, uint32_t v);
void spop_put_kv_bool(struct spop_writer *w, const char *name, bool v);

/* Message header of a NOTIFY: name + NB-ARGS; then nargs spop_put_kv_*()
 * or spop_put_str(name) + spop_put_data(). */
void spop_put_msg(struct spop_writer *w, const char *name, size_t len, unsigned nargs);

/* ACK actions. */
void spop_put_set_var(struct spop_writer *w, enum spop_scope scope, const char *name,
		      size_t len, const struct spop_data *v);
void spop_put_unset_var(struct spop_writer *w, enum spop_scope scope, const char *name,
			size_t len);

/* Whole frames (metadata 0/0, FIN), each returning 0 or -1 like spop_frame_end.
 * A NULL capabilities is "", a NULL versions is SPOP_VERSION, a NULL engine_id
 * is left out, "healthcheck" is sent only when true. HELLOs are bounded by
 * max_frame_size (at least SPOP_MIN_FRAME_SIZE). DISCONNECTs: a NULL message
 * is spop_err_str(status); the message is cut so that the frame fits
 * SPOP_MIN_FRAME_SIZE (any agreed size; HAProxy 2.6 refuses over 255 bytes). */
int spop_encode_agent_hello(struct spop_writer *w, uint32_t max_frame_size,
			    const char *capabilities);
int spop_encode_agent_disconnect(struct spop_writer *w, enum spop_err status,
				 const char *message);
int spop_encode_haproxy_hello(struct spop_writer *w, const char *versions,
			      uint32_t max_frame_size, const char *capabilities,
			      bool healthcheck, const char *engine_id);
int spop_encode_haproxy_disconnect(struct spop_writer *w, enum spop_err status,
				   const char *message);

#endif /* SPOP_H */
