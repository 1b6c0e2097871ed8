/*
 * fuzz_spop.c - libFuzzer target over the SPOP codec (spop/).
 *
 * The input is read as a stream of frames, as a socket would deliver it.
 * Each decoded frame has its payload run through every cursor (messages and
 * their arguments, KV items, actions) and through the HELLO and DISCONNECT
 * decoders, whatever its type; the whole input is also run through them as
 * a bare payload. Whatever decodes is encoded again with the writer into
 * small fixed buffers, then decoded once more and compared, so the fuzzer
 * checks both directions, the writer's overflow and rollback rules, and
 * the decoders' bounds (ASan) and arithmetic (UBSan).
 *
 *   clang -fsanitize=fuzzer,address,undefined -I. tests/fuzz/fuzz_spop.c spop/spop.c
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "spop/spop.h"

/* An invariant of the codec does not hold: let libFuzzer report it. */
#define CHECK(cond) do { if (!(cond)) abort(); } while (0)

#define SMALL_BUF 128   /* writer capacity: small enough to overflow often */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool in_bounds(const void *ptr, size_t len, const uint8_t *p, size_t plen)
{
	const uint8_t *q = ptr;

	if (len == 0)
		return true;
	return q >= p && len <= plen && q - p <= (ptrdiff_t)(plen - len);
}

static bool str_same(struct spop_str a, struct spop_str b)
{
	return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

static bool data_same(const struct spop_data *a, const struct spop_data *b)
{
	if (a->type != b->type)
		return false;
	switch (a->type) {
	case SPOP_DATA_NULL:
		return true;
	case SPOP_DATA_BOOL:
		return a->v.b == b->v.b;
	case SPOP_DATA_INT32:
	case SPOP_DATA_INT64:
	case SPOP_DATA_UINT32:
	case SPOP_DATA_UINT64:
		return a->v.u == b->v.u;
	case SPOP_DATA_IPV4:
		return memcmp(a->v.ipv4, b->v.ipv4, 4) == 0;
	case SPOP_DATA_IPV6:
		return memcmp(a->v.ipv6, b->v.ipv6, 16) == 0;
	case SPOP_DATA_STRING:
	case SPOP_DATA_BINARY:
		return str_same(a->v.str, b->v.str);
	default:
		return false;
	}
}

/* A decoded value encodes back to something that decodes to it. */
static void data_round_trip(const struct spop_data *d, const uint8_t *p, size_t plen)
{
	uint8_t buf[SMALL_BUF];
	struct spop_writer w;
	struct spop_data back;
	enum spop_err err;

	CHECK(d->type < SPOP_DATA_TYPE_COUNT);
	if (d->type == SPOP_DATA_STRING || d->type == SPOP_DATA_BINARY)
		CHECK(in_bounds(d->v.str.ptr, d->v.str.len, p, plen));
	spop_writer_init(&w, buf, sizeof(buf));
	spop_put_data(&w, d);
	CHECK(w.len <= w.cap);
	if (w.overflow) {
		CHECK(d->type == SPOP_DATA_STRING || d->type == SPOP_DATA_BINARY);
		return;
	}
	CHECK(spop_data_decode(buf, w.len, &back, &err) == (int)w.len);
	CHECK(data_same(d, &back));
}

/* Copies a view into a NUL-terminated string, cut at the first NUL. */
static void cstr(char *dst, size_t cap, struct spop_str s)
{
	size_t n = s.len < cap - 1 ? s.len : cap - 1;

	if (n)
		memcpy(dst, s.ptr, n);
	dst[n] = '\0';
}

/* spop_frame_end() and its contract: a LENGTH that says what was written,
 * or the frame removed and the writer usable again. */
static int end_frame(struct spop_writer *w, size_t start, size_t max)
{
	bool overflowed = w->overflow;
	int r = spop_frame_end(w, start, max);
	size_t flen;

	if (r < 0) {
		CHECK(w->len == start && !w->overflow);
		return r;
	}
	CHECK(!overflowed);
	flen = (size_t)w->buf[start] << 24 | (size_t)w->buf[start + 1] << 16 |
	       (size_t)w->buf[start + 2] << 8 | w->buf[start + 3];
	CHECK(flen == w->len - start - SPOP_LEN_SIZE);
	CHECK(flen >= SPOP_MIN_FRAME_LEN && flen <= max);
	return r;
}

/* ---- messages ---- */

static void walk_messages(const uint8_t *p, size_t len)
{
	uint8_t buf[SMALL_BUF];
	struct spop_writer w;
	struct spop_cursor c, a, c2, a2;
	struct spop_msg m, m2;
	struct spop_kv kv, kv2;
	size_t start;
	int r, r2;

	spop_writer_init(&w, buf, sizeof(buf));
	start = spop_frame_begin(&w, SPOP_FRAME_NOTIFY, SPOP_FL_FIN, 1, 1);
	spop_cursor_init(&c, p, len);
	while ((r = spop_msg_next(&c, &m)) > 0) {
		unsigned n = 0;

		CHECK(m.nargs <= SPOP_MAX_ARGS);
		CHECK(in_bounds(m.name.ptr, m.name.len, p, len));
		CHECK(in_bounds(m.args, m.args_len, p, len));
		spop_put_msg(&w, m.name.ptr, m.name.len, m.nargs);
		spop_args_init(&a, &m);
		while ((r2 = spop_args_next(&a, &kv)) > 0) {
			n++;
			CHECK(in_bounds(kv.name.ptr, kv.name.len, p, len));
			data_round_trip(&kv.value, p, len);
			spop_put_str(&w, kv.name.ptr, kv.name.len);
			spop_put_data(&w, &kv.value);
		}
		/* a message from spop_msg_next() has exactly valid arguments */
		CHECK(r2 == 0);
		CHECK(n == m.nargs);
		CHECK(a.p == m.args + m.args_len);
	}
	if (end_frame(&w, start, SPOP_DEFAULT_FRAME_SIZE) < 0 || r < 0) {
		CHECK(r == 0 || c.err == SPOP_ERR_INVALID);
		return;
	}

	/* the re-encoded NOTIFY holds the same messages */
	struct spop_frame f;
	enum spop_err err;

	CHECK(spop_frame_decode(buf, w.len, SPOP_DEFAULT_FRAME_SIZE, &f, &err) == (int)w.len);
	CHECK(f.type == SPOP_FRAME_NOTIFY && f.stream_id == 1 && f.frame_id == 1);
	spop_cursor_init(&c, p, len);
	spop_cursor_init(&c2, f.payload, f.payload_len);
	while ((r = spop_msg_next(&c, &m)) > 0) {
		CHECK(spop_msg_next(&c2, &m2) == 1);
		CHECK(str_same(m.name, m2.name) && m.nargs == m2.nargs);
		spop_args_init(&a, &m);
		spop_args_init(&a2, &m2);
		while (spop_args_next(&a, &kv) > 0) {
			CHECK(spop_args_next(&a2, &kv2) == 1);
			CHECK(str_same(kv.name, kv2.name));
			CHECK(data_same(&kv.value, &kv2.value));
		}
		CHECK(spop_args_next(&a2, &kv2) == 0);
	}
	CHECK(r == 0);
	CHECK(spop_msg_next(&c2, &m2) == 0);
}

/* ---- KV lists ---- */

static void walk_kv(const uint8_t *p, size_t len)
{
	uint8_t buf[SMALL_BUF];
	struct spop_writer w;
	struct spop_cursor c, c2;
	struct spop_kv kv, kv2;
	int r;

	spop_writer_init(&w, buf, sizeof(buf));
	spop_cursor_init(&c, p, len);
	while ((r = spop_kv_next(&c, &kv)) > 0) {
		CHECK(in_bounds(kv.name.ptr, kv.name.len, p, len));
		data_round_trip(&kv.value, p, len);
		spop_put_str(&w, kv.name.ptr, kv.name.len);
		spop_put_data(&w, &kv.value);
	}
	CHECK(r == 0 || c.err == SPOP_ERR_INVALID);
	if (r < 0 || w.overflow)
		return;
	spop_cursor_init(&c, p, len);
	spop_cursor_init(&c2, buf, w.len);
	while (spop_kv_next(&c, &kv) > 0) {
		CHECK(spop_kv_next(&c2, &kv2) == 1);
		CHECK(str_same(kv.name, kv2.name));
		CHECK(data_same(&kv.value, &kv2.value));
	}
	CHECK(spop_kv_next(&c2, &kv2) == 0);
}

/* ---- actions ---- */

static void walk_actions(const uint8_t *p, size_t len)
{
	uint8_t buf[SMALL_BUF];
	struct spop_writer w;
	struct spop_cursor c, c2;
	enum spop_action_type t, t2;
	enum spop_scope s, s2;
	struct spop_str name, name2;
	struct spop_data v, v2;
	int r;

	spop_writer_init(&w, buf, sizeof(buf));
	spop_cursor_init(&c, p, len);
	while ((r = spop_action_next(&c, &t, &s, &name, &v)) > 0) {
		CHECK(t == SPOP_ACT_SET_VAR || t == SPOP_ACT_UNSET_VAR);
		CHECK(s < SPOP_SCOPE_COUNT);
		CHECK(in_bounds(name.ptr, name.len, p, len));
		if (t == SPOP_ACT_SET_VAR) {
			data_round_trip(&v, p, len);
			spop_put_set_var(&w, s, name.ptr, name.len, &v);
		} else {
			CHECK(v.type == SPOP_DATA_NULL);
			spop_put_unset_var(&w, s, name.ptr, name.len);
		}
	}
	CHECK(r == 0 || c.err == SPOP_ERR_INVALID);
	if (r < 0 || w.overflow)
		return;
	spop_cursor_init(&c, p, len);
	spop_cursor_init(&c2, buf, w.len);
	while (spop_action_next(&c, &t, &s, &name, &v) > 0) {
		CHECK(spop_action_next(&c2, &t2, &s2, &name2, &v2) == 1);
		CHECK(t == t2 && s == s2 && str_same(name, name2));
		CHECK(data_same(&v, &v2));
	}
	CHECK(spop_action_next(&c2, &t2, &s2, &name2, &v2) == 0);
}

/* ---- HELLO / DISCONNECT ---- */

static void check_hello(const uint8_t *p, size_t len)
{
	uint8_t buf[SMALL_BUF * 2];
	struct spop_writer w;
	struct spop_hello h, h2;
	struct spop_frame f;
	enum spop_err err = SPOP_ERR_NONE;
	char vsn[64], caps[64], eid[64];
	size_t used;
	int r;

	r = spop_hello_decode(p, len, &h, &err);
	if (r < 0) {
		CHECK(err == SPOP_ERR_INVALID || err == SPOP_ERR_NO_VSN ||
		      err == SPOP_ERR_NO_FRAME_SIZE || err == SPOP_ERR_NO_CAP);
		return;
	}
	CHECK(r == 0 && h.has_versions && h.has_max_frame_size && h.has_capabilities);
	CHECK(in_bounds(h.supported_versions.ptr, h.supported_versions.len, p, len));
	CHECK(in_bounds(h.capabilities.ptr, h.capabilities.len, p, len));
	CHECK(in_bounds(h.engine_id.ptr, h.engine_id.len, p, len));
	(void)spop_version_supported(h.supported_versions, SPOP_VERSION);
	(void)spop_version_supported(h.capabilities, "1.0");
	(void)spop_has_capability(h.capabilities, "pipelining");
	(void)spop_has_capability(h.supported_versions, "async");

	/* what HAProxy would send with these values decodes back to them */
	cstr(vsn, sizeof(vsn), h.supported_versions);
	cstr(caps, sizeof(caps), h.capabilities);
	cstr(eid, sizeof(eid), h.engine_id);
	spop_writer_init(&w, buf, sizeof(buf));
	spop_put_u8(&w, 0xAB);   /* a frame already in the buffer stays there */
	used = w.len;
	if (spop_encode_haproxy_hello(&w, vsn, (uint32_t)h.max_frame_size, caps,
				      h.healthcheck, eid[0] ? eid : NULL) < 0) {
		CHECK(w.len == used && !w.overflow && buf[0] == 0xAB);
	} else {
		CHECK(spop_frame_decode(buf + used, w.len - used, UINT32_MAX, &f, &err) ==
		      (int)(w.len - used));
		CHECK(f.type == SPOP_FRAME_HAPROXY_HELLO && f.flags == SPOP_FL_FIN);
		CHECK(spop_hello_decode(f.payload, f.payload_len, &h2, &err) == 0);
		CHECK(h2.max_frame_size == (uint32_t)h.max_frame_size);
		CHECK(h2.healthcheck == h.healthcheck);
		CHECK(h2.supported_versions.len == strlen(vsn));
		CHECK(h2.capabilities.len == strlen(caps));
		CHECK(h2.engine_id.len == strlen(eid));
	}
	spop_writer_init(&w, buf, SMALL_BUF / 2);
	if (spop_encode_agent_hello(&w, (uint32_t)h.max_frame_size, caps) < 0) {
		CHECK(w.len == 0 && !w.overflow);
	} else {
		CHECK(spop_frame_decode(buf, w.len, UINT32_MAX, &f, &err) == (int)w.len);
		CHECK(f.type == SPOP_FRAME_AGENT_HELLO);
		CHECK(spop_hello_decode(f.payload, f.payload_len, &h2, &err) == 0);
		CHECK(spop_version_supported(h2.supported_versions, SPOP_VERSION));
		CHECK(h2.capabilities.len == strlen(caps));
	}
}

static void check_disconnect(const uint8_t *p, size_t len)
{
	uint8_t buf[SMALL_BUF * 3];
	struct spop_writer w;
	struct spop_disconnect d, d2;
	struct spop_frame f;
	enum spop_err err = SPOP_ERR_NONE;
	char msg[300];

	if (spop_disconnect_decode(p, len, &d, &err) < 0) {
		CHECK(err == SPOP_ERR_INVALID);
		return;
	}
	CHECK(in_bounds(d.message.ptr, d.message.len, p, len));
	CHECK(spop_err_str((enum spop_err)d.status_code) != NULL);
	cstr(msg, sizeof(msg), d.message);
	spop_writer_init(&w, buf, sizeof(buf));
	CHECK(spop_encode_agent_disconnect(&w, (enum spop_err)d.status_code, msg) == 0);
	CHECK(spop_frame_decode(buf, w.len, SPOP_MIN_FRAME_SIZE, &f, &err) == (int)w.len);
	CHECK(f.type == SPOP_FRAME_AGENT_DISCONNECT);
	CHECK(spop_disconnect_decode(f.payload, f.payload_len, &d2, &err) == 0);
	CHECK(d2.has_status_code && d2.status_code == d.status_code);
	CHECK(d2.message.len <= strlen(msg));
	CHECK(d2.message.len == 0 || memcmp(d2.message.ptr, msg, d2.message.len) == 0);
}

static void walk_payload(const uint8_t *p, size_t len)
{
	walk_messages(p, len);
	walk_kv(p, len);
	walk_actions(p, len);
	check_hello(p, len);
	check_disconnect(p, len);
}

/* ---- frames ---- */

static void check_frame(const uint8_t *p, size_t n, const struct spop_frame *f)
{
	uint8_t buf[SMALL_BUF];
	struct spop_writer w;
	struct spop_frame f2;
	enum spop_err err;
	size_t start;

	CHECK(n >= SPOP_LEN_SIZE + SPOP_MIN_FRAME_LEN);
	CHECK(f->payload >= p + SPOP_LEN_SIZE + SPOP_MIN_FRAME_LEN);
	CHECK(f->payload + f->payload_len == p + n);
	CHECK(spop_frame_type_str(f->type) != NULL);
	/* the frame is exactly n bytes: one byte less needs more, a limit of
	 * its own LENGTH accepts it, one less refuses it before the body */
	CHECK(spop_frame_decode(p, n - 1, SPOP_DEFAULT_FRAME_SIZE, &f2, &err) == 0);
	CHECK(spop_frame_decode(p, n, n - SPOP_LEN_SIZE, &f2, &err) == (int)n);
	err = SPOP_ERR_NONE;
	CHECK(spop_frame_decode(p, SPOP_LEN_SIZE, n - SPOP_LEN_SIZE - 1, &f2, &err) == -1);
	CHECK(err == SPOP_ERR_TOO_BIG);

	/* re-encoded (ids in canonical form), it carries the same header */
	spop_writer_init(&w, buf, sizeof(buf));
	start = spop_frame_begin(&w, f->type, f->flags, f->stream_id, f->frame_id);
	spop_put_bytes(&w, f->payload, f->payload_len);
	if (end_frame(&w, start, SPOP_DEFAULT_FRAME_SIZE) < 0)
		return;
	CHECK(w.len <= n);
	CHECK(spop_frame_decode(buf, w.len, SPOP_DEFAULT_FRAME_SIZE, &f2, &err) == (int)w.len);
	CHECK(f2.type == f->type && f2.flags == f->flags);
	CHECK(f2.stream_id == f->stream_id && f2.frame_id == f->frame_id);
	CHECK(f2.payload_len == f->payload_len);
	CHECK(f->payload_len == 0 || memcmp(f2.payload, f->payload, f->payload_len) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *p = data;
	size_t left = size;
	struct spop_frame f;
	enum spop_err err;
	uint64_t v;
	struct spop_data d;
	int r;

	/* the input as a stream of frames */
	for (;;) {
		err = SPOP_ERR_NONE;
		r = spop_frame_decode(p, left, SPOP_DEFAULT_FRAME_SIZE, &f, &err);
		if (r <= 0) {
			CHECK(r == 0 || err == SPOP_ERR_TOO_BIG || err == SPOP_ERR_INVALID);
			CHECK(spop_err_str(err) != NULL);
			break;
		}
		CHECK((size_t)r <= left);
		check_frame(p, (size_t)r, &f);
		walk_payload(f.payload, f.payload_len);
		p += r;
		left -= (size_t)r;
	}

	/* the input as a bare payload, a varint and a value */
	walk_payload(data, size);
	r = spop_varint_decode(data, size, &v, &err);
	if (r > 0) {
		CHECK((size_t)r <= SPOP_VARINT_MAX && (size_t)r <= size);
		CHECK(spop_varint_size(v) <= (size_t)r);
	}
	r = spop_data_decode(data, size, &d, &err);
	if (r > 0) {
		CHECK((size_t)r <= size);
		data_round_trip(&d, data, size);
	}
	return 0;
}
