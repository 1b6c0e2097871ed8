/*
 * test_spop_frame.c - unit tests of the SPOP codec (spop/): frames (their
 * headers, lengths, ids, sizes) and the payload cursors over messages,
 * KV lists and actions.
 *
 * Every decoder is fed its input whole and then every prefix of it, the
 * bytes placed right before a PROT_NONE guard page (tests/lib/guard.h) so
 * that reading one byte too far crashes the test instead of passing
 * silently; the vectors are tests/lib/spopvec.h's (the captures and
 * constructed frames of docs/reference spop-protocol-notes.md).
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "spop/spop.h"
#include "tests/lib/guard.h"
#include "tests/lib/spopvec.h"

/* ---- frames ---- */

struct capture {
	const char *name;
	const uint8_t *bytes;
	size_t len;
};

#define CAPTURE(a) { #a, (const uint8_t *)(a), sizeof(a) - 1 }
static const struct capture captures[] = {
	CAPTURE(hello_129), CAPTURE(notify_30), CAPTURE(notify_rate),
	CAPTURE(ack_29), CAPTURE(agent_hello_64), CAPTURE(disconnect_40),
};
#define NCAPTURES (sizeof(captures) / sizeof(captures[0]))

Test(frame, capture_lengths_add_up)
{
	for (size_t i = 0; i < NCAPTURES; i++) {
		uint32_t flen = 0;

		cr_assert_eq(spop_frame_peek_len(captures[i].bytes, captures[i].len, &flen), 0);
		cr_assert_eq((size_t)flen + 4, captures[i].len, "%s", captures[i].name);
	}
	cr_assert_eq(sizeof(hello_129) - 1, 4 + 129);
	cr_assert_eq(sizeof(notify_30) - 1, 4 + 30);
	cr_assert_eq(sizeof(disconnect_40) - 1, 4 + 40);
}

Test(frame, headers_of_captures)
{
	struct guard g;
	struct spop_frame f;

	guard_init(&g, 256);
	decode_whole(&g, BYTES(hello_129), &f);
	cr_assert_eq(f.type, SPOP_FRAME_HAPROXY_HELLO);
	cr_assert_eq(f.flags, SPOP_FL_FIN);
	cr_assert_eq(f.stream_id, 0);
	cr_assert_eq(f.frame_id, 0);
	cr_assert_eq(f.payload_len, 129 - 7);
	cr_assert_eq(f.payload, g.limit - (129 - 7));

	decode_whole(&g, BYTES(notify_30), &f);
	cr_assert_eq(f.type, SPOP_FRAME_NOTIFY);
	cr_assert_eq(f.flags, SPOP_FL_FIN);
	cr_assert_eq(f.stream_id, 20);
	cr_assert_eq(f.frame_id, 1);
	cr_assert_eq(f.payload_len, 30 - 7);

	decode_whole(&g, BYTES(ack_29), &f);
	cr_assert_eq(f.type, SPOP_FRAME_ACK);
	cr_assert_eq(f.stream_id, 20);
	cr_assert_eq(f.frame_id, 1);

	decode_whole(&g, BYTES(agent_hello_64), &f);
	cr_assert_eq(f.type, SPOP_FRAME_AGENT_HELLO);

	decode_whole(&g, BYTES(disconnect_40), &f);
	cr_assert_eq(f.type, SPOP_FRAME_HAPROXY_DISCONNECT);
	cr_assert_eq(f.payload_len, 40 - 7);
	guard_fini(&g);
}

Test(frame, every_prefix_needs_more)
{
	struct guard g;
	struct spop_frame f;
	enum spop_err err;

	guard_init(&g, 256);
	for (size_t i = 0; i < NCAPTURES; i++) {
		const struct capture *c = &captures[i];

		for (size_t k = 0; k < c->len; k++) {
			const uint8_t *p = guard_put(&g, c->bytes, k);

			err = SPOP_ERR_NONE;
			cr_assert_eq(spop_frame_decode(p, k, SPOP_DEFAULT_FRAME_SIZE, &f, &err), 0,
				     "%s prefix %zu", c->name, k);
			cr_assert_eq(err, SPOP_ERR_NONE);
		}
		decode_whole(&g, c->bytes, c->len, &f);
	}
	guard_fini(&g);
}

Test(frame, back_to_back)
{
	uint8_t buf[256];
	size_t n1 = sizeof(notify_30) - 1, n2 = sizeof(ack_29) - 1;
	struct spop_frame f;
	enum spop_err err;

	memcpy(buf, notify_30, n1);
	memcpy(buf + n1, ack_29, n2);
	cr_assert_eq(spop_frame_decode(buf, n1 + n2, 16380, &f, &err), (int)n1);
	cr_assert_eq(f.type, SPOP_FRAME_NOTIFY);
	cr_assert_eq(f.payload + f.payload_len, buf + n1);
	cr_assert_eq(spop_frame_decode(buf + n1, n2, 16380, &f, &err), (int)n2);
	cr_assert_eq(f.type, SPOP_FRAME_ACK);
}

Test(frame, too_big_before_the_body)
{
	struct guard g;
	struct spop_frame f;
	enum spop_err err;
	const uint8_t *p;

	guard_init(&g, 16);
	/* only the 4 length bytes are there */
	p = guard_put(&g, BYTES("\x00\x00\x01\x01"));
	err = SPOP_ERR_NONE;
	cr_assert_eq(spop_frame_decode(p, 4, 256, &f, &err), -1);
	cr_assert_eq(err, SPOP_ERR_TOO_BIG);
	p = guard_put(&g, BYTES("\xff\xff\xff\xff"));
	err = SPOP_ERR_NONE;
	cr_assert_eq(spop_frame_decode(p, 4, 16380, &f, &err), -1);
	cr_assert_eq(err, SPOP_ERR_TOO_BIG);
	/* even when the limit itself would allow it, 4 + LENGTH must fit an int */
	err = SPOP_ERR_NONE;
	cr_assert_eq(spop_frame_decode(p, 4, SIZE_MAX, &f, &err), -1);
	cr_assert_eq(err, SPOP_ERR_TOO_BIG);
	p = guard_put(&g, BYTES("\x7f\xff\xff\xfc"));
	cr_assert_eq(spop_frame_decode(p, 4, SIZE_MAX, &f, &err), -1);
	/* INT_MAX - 4 is still allowed: need more */
	p = guard_put(&g, BYTES("\x7f\xff\xff\xfb"));
	cr_assert_eq(spop_frame_decode(p, 4, SIZE_MAX, &f, &err), 0);
	/* fewer than 4 bytes: need more, whatever they are */
	p = guard_put(&g, BYTES("\xff\xff\xff"));
	cr_assert_eq(spop_frame_decode(p, 3, 256, &f, &err), 0);
	guard_fini(&g);
}

Test(frame, too_short_lengths)
{
	struct guard g;
	struct spop_frame f;
	enum spop_err err;
	uint8_t buf[4 + 8] = { 0 };

	guard_init(&g, 64);
	for (uint8_t l = 0; l < SPOP_MIN_FRAME_LEN; l++) {
		buf[3] = l;
		/* with the length alone, and with the whole (short) body */
		for (size_t n = 4; n <= 4 + (size_t)l; n += l ? l : 1) {
			const uint8_t *p = guard_put(&g, buf, n);

			err = SPOP_ERR_NONE;
			cr_assert_eq(spop_frame_decode(p, n, 16380, &f, &err), -1, "length %u", l);
			cr_assert_eq(err, SPOP_ERR_INVALID, "length %u", l);
		}
	}
	/* 7 is the smallest frame: type, flags, two one-byte ids */
	buf[3] = 7;
	cr_assert_eq(spop_frame_decode(guard_put(&g, buf, 11), 11, 16380, &f, &err), 11);
	cr_assert_eq(f.payload_len, 0);
	guard_fini(&g);
}

Test(frame, max_size_boundary)
{
	static uint8_t buf[4 + 16381];
	struct guard g;
	struct spop_frame f;
	enum spop_err err;
	const uint8_t *p;

	memset(buf, 0, sizeof(buf));
	buf[4] = SPOP_FRAME_NOTIFY;
	buf[8] = 1;   /* FIN */
	/* LENGTH == max: accepted */
	buf[2] = 16380 >> 8;
	buf[3] = 16380 & 0xff;
	guard_init(&g, sizeof(buf));
	p = guard_put(&g, buf, 4 + 16380);
	cr_assert_eq(spop_frame_decode(p, 4 + 16380, 16380, &f, &err), 4 + 16380);
	cr_assert_eq(f.payload_len, 16380 - 7);
	/* LENGTH == max + 1: refused */
	buf[2] = 16381 >> 8;
	buf[3] = 16381 & 0xff;
	p = guard_put(&g, buf, 4 + 16381);
	err = SPOP_ERR_NONE;
	cr_assert_eq(spop_frame_decode(p, 4 + 16381, 16380, &f, &err), -1);
	cr_assert_eq(err, SPOP_ERR_TOO_BIG);
	/* the minimum max-frame-size, 256 */
	buf[2] = 1;
	buf[3] = 0;
	p = guard_put(&g, buf, 4 + 256);
	cr_assert_eq(spop_frame_decode(p, 4 + 256, 256, &f, &err), 4 + 256);
	guard_fini(&g);
}

Test(frame, ids_must_stay_inside_the_frame)
{
	struct guard g;
	struct spop_frame f;
	enum spop_err err;
	const uint8_t *p;

	guard_init(&g, 64);
	/* LENGTH 7 but the stream-id takes 2 bytes: the frame-id would be the
	 * byte after the frame, which is there but does not count */
	p = guard_put(&g, BYTES("\x00\x00\x00\x07" "\x03" "\x00\x00\x00\x01" "\xfc\x03" "\x01" "\x00"));
	err = SPOP_ERR_NONE;
	cr_assert_eq(spop_frame_decode(p, 13, 16380, &f, &err), -1);
	cr_assert_eq(err, SPOP_ERR_INVALID);
	/* the stream-id itself runs past the frame */
	p = guard_put(&g, BYTES("\x00\x00\x00\x07" "\x03" "\x00\x00\x00\x01" "\xff" "\xff" "\x00\x00"));
	err = SPOP_ERR_NONE;
	cr_assert_eq(spop_frame_decode(p, 13, 16380, &f, &err), -1);
	cr_assert_eq(err, SPOP_ERR_INVALID);
	/* a stream-id of 11 bytes */
	p = guard_put(&g, BYTES("\x00\x00\x00\x11" "\x03" "\x00\x00\x00\x01"
				"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01" "\x01"));
	err = SPOP_ERR_NONE;
	cr_assert_eq(spop_frame_decode(p, 21, 16380, &f, &err), -1);
	cr_assert_eq(err, SPOP_ERR_INVALID);
	/* the largest ids fit */
	p = guard_put(&g, BYTES("\x00\x00\x00\x19" "\x03" "\x00\x00\x00\x03"
				"\xff\xf0\xfe\xfe\xfe\xfe\xfe\xfe\xfe\x0e"
				"\xff\xf0\xfe\xfe\xfe\xfe\xfe\xfe\xfe\x0e"));
	cr_assert_eq(spop_frame_decode(p, 29, 16380, &f, &err), 29);
	cr_assert_eq(f.stream_id, UINT64_MAX);
	cr_assert_eq(f.frame_id, UINT64_MAX);
	cr_assert_eq(f.flags, SPOP_FL_FIN | SPOP_FL_ABORT);
	cr_assert_eq(f.payload_len, 0);
	guard_fini(&g);
}

Test(frame, flags_are_big_endian_and_type_unchecked)
{
	struct spop_frame f;
	enum spop_err err;

	cr_assert_eq(spop_frame_decode(BYTES("\x00\x00\x00\x07" "\x2a" "\x80\x00\x00\x02" "\x00\x00"),
				       256, &f, &err), 11);
	cr_assert_eq((int)f.type, 42);
	cr_assert_eq(f.flags, 0x80000002u);
}

Test(frame, peek_len)
{
	uint32_t l = 0;

	cr_assert_eq(spop_frame_peek_len(BYTES("\x00\x00\x00"), &l), -1);
	cr_assert_eq(spop_frame_peek_len(BYTES("\x01\x02\x03\x04"), &l), 0);
	cr_assert_eq(l, 0x01020304u);
}

/* ---- payload cursors ---- */

/* One step of a list cursor; the message step also walks the arguments. */
typedef int (*step_fn)(struct spop_cursor *c);

static int step_msg(struct spop_cursor *c)
{
	struct spop_msg m;
	struct spop_cursor a;
	struct spop_kv kv;
	unsigned n = 0;
	int r = spop_msg_next(c, &m);

	if (r <= 0)
		return r;
	spop_args_init(&a, &m);
	while ((r = spop_args_next(&a, &kv)) > 0)
		n++;
	cr_assert_eq(r, 0, "arguments of a validated message cannot fail");
	cr_assert_eq(n, m.nargs);
	cr_assert_eq(a.p, m.args + m.args_len, "args_len is exact");
	return 1;
}

static int step_kv(struct spop_cursor *c)
{
	struct spop_kv kv;

	return spop_kv_next(c, &kv);
}

static int step_action(struct spop_cursor *c)
{
	enum spop_action_type t;
	enum spop_scope s;
	struct spop_str name;
	struct spop_data v;

	return spop_action_next(c, &t, &s, &name, &v);
}

/* Runs `step` over every prefix of a (valid, complete) payload, placed
 * before the guard page: a prefix ending on an item boundary is a shorter
 * valid list; any other is -1 / SPOP_ERR_INVALID after the items it holds. */
static void check_payload_prefixes(const char *what, const uint8_t *payload, size_t len,
				   step_fn step)
{
	size_t bounds[300], nb = 0, k, i, expect;
	struct spop_cursor c;
	struct guard g;
	int r;

	spop_cursor_init(&c, payload, len);
	bounds[nb++] = 0;
	while ((r = step(&c)) > 0) {
		cr_assert(nb < 300);
		bounds[nb++] = (size_t)(c.p - payload);
	}
	cr_assert_eq(r, 0, "%s: whole payload", what);
	cr_assert_eq(bounds[nb - 1], len, "%s: whole payload consumed", what);

	guard_init(&g, len);
	for (k = 0; k <= len; k++) {
		const uint8_t *p = guard_put(&g, payload, k);
		bool on_bound = false;
		unsigned n = 0;

		for (i = 0, expect = 0; i < nb; i++) {
			if (bounds[i] == k)
				on_bound = true;
			if (bounds[i] > 0 && bounds[i] <= k)
				expect++;
		}
		spop_cursor_init(&c, p, k);
		while ((r = step(&c)) > 0)
			n++;
		cr_assert_eq(n, expect, "%s prefix %zu: %u items", what, k, n);
		if (on_bound) {
			cr_assert_eq(r, 0, "%s prefix %zu", what, k);
		} else {
			cr_assert_eq(r, -1, "%s prefix %zu", what, k);
			cr_assert_eq(c.err, SPOP_ERR_INVALID);
		}
	}
	guard_fini(&g);
}

Test(cursor, notify_capture)
{
	struct guard g;
	struct spop_frame f;
	struct spop_cursor c, a;
	struct spop_msg m;
	struct spop_kv kv;

	guard_init(&g, 64);
	decode_whole(&g, BYTES(notify_30), &f);
	spop_cursor_init(&c, f.payload, f.payload_len);
	cr_assert_eq(spop_msg_next(&c, &m), 1);
	cr_assert(str_eq(m.name, "check-client-ip"));
	cr_assert_eq(m.nargs, 1);
	cr_assert_eq(m.args_len, 6);
	spop_args_init(&a, &m);
	cr_assert_eq(spop_args_next(&a, &kv), 1);
	cr_assert_eq(kv.name.len, 0, "unnamed argument");
	cr_assert_eq(kv.value.type, SPOP_DATA_IPV4);
	cr_assert_arr_eq(kv.value.v.ipv4, "\x7f\x00\x00\x01", 4);
	cr_assert_eq(spop_args_next(&a, &kv), 0);
	cr_assert_eq(spop_msg_next(&c, &m), 0);
	cr_assert_eq(spop_msg_next(&c, &m), 0, "the end stays the end");
	check_payload_prefixes("notify_30", f.payload, f.payload_len, step_msg);
	guard_fini(&g);
}

Test(cursor, notify_constructed)
{
	struct guard g;
	struct spop_frame f;
	struct spop_cursor c, a;
	struct spop_msg m;
	struct spop_kv kv;

	guard_init(&g, 64);
	decode_whole(&g, BYTES(notify_rate), &f);
	spop_cursor_init(&c, f.payload, f.payload_len);
	cr_assert_eq(spop_msg_next(&c, &m), 1);
	cr_assert(str_eq(m.name, "check-rate"));
	cr_assert_eq(m.nargs, 2);
	spop_args_init(&a, &m);
	cr_assert_eq(spop_args_next(&a, &kv), 1);
	cr_assert(str_eq(kv.name, "key"));
	cr_assert_eq(kv.value.type, SPOP_DATA_STRING);
	cr_assert(str_eq(kv.value.v.str, "abc"));
	cr_assert_eq(spop_args_next(&a, &kv), 1);
	cr_assert(str_eq(kv.name, "ip"));
	cr_assert_eq(kv.value.type, SPOP_DATA_IPV4);
	cr_assert_arr_eq(kv.value.v.ipv4, "\xc0\x00\x02\x01", 4);
	cr_assert_eq(spop_args_next(&a, &kv), 0);
	cr_assert_eq(spop_msg_next(&c, &m), 0);
	check_payload_prefixes("notify_rate", f.payload, f.payload_len, step_msg);
	guard_fini(&g);
}

Test(cursor, ack_capture)
{
	struct guard g;
	struct spop_frame f;
	struct spop_cursor c;
	enum spop_action_type t;
	enum spop_scope s;
	struct spop_str name;
	struct spop_data v;

	guard_init(&g, 64);
	decode_whole(&g, BYTES(ack_29), &f);
	spop_cursor_init(&c, f.payload, f.payload_len);
	cr_assert_eq(spop_action_next(&c, &t, &s, &name, &v), 1);
	cr_assert_eq(t, SPOP_ACT_SET_VAR);
	cr_assert_eq(s, SPOP_SCOPE_TXN);
	cr_assert(str_eq(name, "rate"));
	cr_assert_eq(v.type, SPOP_DATA_INT64);
	cr_assert_eq(v.v.i, 150);
	cr_assert_eq(spop_action_next(&c, &t, &s, &name, &v), 1);
	cr_assert_eq(t, SPOP_ACT_SET_VAR);
	cr_assert(str_eq(name, "blocked"));
	cr_assert_eq(v.type, SPOP_DATA_BOOL);
	cr_assert(v.v.b);
	cr_assert_eq(spop_action_next(&c, &t, &s, &name, &v), 0);
	check_payload_prefixes("ack_29", f.payload, f.payload_len, step_action);
	guard_fini(&g);
}

Test(cursor, hello_and_disconnect_kv_lists)
{
	struct guard g;
	struct spop_frame f;

	guard_init(&g, 256);
	decode_whole(&g, BYTES(hello_129), &f);
	check_payload_prefixes("hello_129", f.payload, f.payload_len, step_kv);
	decode_whole(&g, BYTES(agent_hello_64), &f);
	check_payload_prefixes("agent_hello_64", f.payload, f.payload_len, step_kv);
	decode_whole(&g, BYTES(disconnect_40), &f);
	check_payload_prefixes("disconnect_40", f.payload, f.payload_len, step_kv);
	guard_fini(&g);
}

Test(cursor, empty_payloads)
{
	struct spop_cursor c;
	struct spop_msg m;
	struct spop_kv kv;

	spop_cursor_init(&c, NULL, 0);
	cr_assert_eq(spop_msg_next(&c, &m), 0);
	cr_assert_eq(spop_kv_next(&c, &kv), 0);
	cr_assert_eq(step_action(&c), 0);
	cr_assert_eq(spop_args_next(&c, &kv), 0);
}

Test(cursor, many_messages_all_types_and_255_args)
{
	static uint8_t buf[16384];
	struct spop_writer w;
	struct spop_cursor c, a;
	struct spop_msg m;
	struct spop_kv kv;
	char name[8];
	struct spop_data vals[SPOP_DATA_TYPE_COUNT];
	unsigned i;

	vals[0] = (struct spop_data){ .type = SPOP_DATA_NULL };
	vals[1] = (struct spop_data){ .type = SPOP_DATA_BOOL, .v.b = true };
	vals[2] = mk_int(SPOP_DATA_INT32, -7);
	vals[3] = mk_uint(SPOP_DATA_UINT32, 4000000000u);
	vals[4] = mk_int(SPOP_DATA_INT64, INT64_MIN);
	vals[5] = mk_uint(SPOP_DATA_UINT64, UINT64_MAX);
	vals[6] = (struct spop_data){ .type = SPOP_DATA_IPV4 };
	memcpy(vals[6].v.ipv4, "\x0a\x00\x00\x01", 4);
	vals[7] = (struct spop_data){ .type = SPOP_DATA_IPV6 };
	memset(vals[7].v.ipv6, 0xfe, 16);
	vals[8] = mk_str(SPOP_DATA_STRING, "héllo", strlen("héllo"));
	vals[9] = mk_str(SPOP_DATA_BINARY, "\x00\x00", 2);

	spop_writer_init(&w, buf, sizeof(buf));
	/* message "a" with 255 arguments cycling through every type */
	spop_put_msg(&w, "a", 1, 255);
	for (i = 0; i < 255; i++) {
		int n = snprintf(name, sizeof(name), "%u", i);

		spop_put_str(&w, name, (size_t)n);
		spop_put_data(&w, &vals[i % SPOP_DATA_TYPE_COUNT]);
	}
	/* message with no argument, then one with an empty name */
	spop_put_msg(&w, "empty", 5, 0);
	spop_put_msg(&w, "", 0, 1);
	spop_put_str(&w, "", 0);
	spop_put_data(&w, &vals[8]);
	cr_assert(!w.overflow);

	spop_cursor_init(&c, buf, w.len);
	cr_assert_eq(spop_msg_next(&c, &m), 1);
	cr_assert(str_eq(m.name, "a"));
	cr_assert_eq(m.nargs, 255);
	spop_args_init(&a, &m);
	for (i = 0; i < 255; i++) {
		cr_assert_eq(spop_args_next(&a, &kv), 1, "arg %u", i);
		snprintf(name, sizeof(name), "%u", i);
		cr_assert(str_eq(kv.name, name));
		cr_assert(data_eq(&kv.value, &vals[i % SPOP_DATA_TYPE_COUNT]), "arg %u", i);
	}
	cr_assert_eq(spop_args_next(&a, &kv), 0);
	cr_assert_eq(spop_msg_next(&c, &m), 1);
	cr_assert(str_eq(m.name, "empty"));
	cr_assert_eq(m.nargs, 0);
	cr_assert_eq(m.args_len, 0);
	cr_assert_eq(spop_msg_next(&c, &m), 1);
	cr_assert_eq(m.name.len, 0);
	cr_assert_eq(m.nargs, 1);
	cr_assert_eq(spop_msg_next(&c, &m), 0);
	check_payload_prefixes("255 args", buf, w.len, step_msg);
}

Test(cursor, msg_validates_every_argument)
{
	struct spop_cursor c;
	struct spop_msg m;

	/* second argument has a reserved type */
	spop_cursor_init(&c, BYTES("\x01" "m" "\x02" "\x00" "\x00" "\x00" "\x0c"));
	cr_assert_eq(spop_msg_next(&c, &m), -1);
	cr_assert_eq(c.err, SPOP_ERR_INVALID);
	/* the cursor did not move past the failing message */
	cr_assert_eq(c.p[0], 0x01);
	/* NB-ARGS announces one more argument than there is */
	spop_cursor_init(&c, BYTES("\x01" "m" "\x02" "\x00" "\x00"));
	cr_assert_eq(spop_msg_next(&c, &m), -1);
	/* the name runs past the end */
	spop_cursor_init(&c, BYTES("\x05" "m"));
	cr_assert_eq(spop_msg_next(&c, &m), -1);
	/* NB-ARGS is missing */
	spop_cursor_init(&c, BYTES("\x01" "m"));
	cr_assert_eq(spop_msg_next(&c, &m), -1);
	cr_assert_eq(c.err, SPOP_ERR_INVALID);
}

Test(cursor, kv_errors)
{
	struct spop_cursor c;
	struct spop_kv kv;

	/* a name without value */
	spop_cursor_init(&c, BYTES("\x01" "k"));
	cr_assert_eq(spop_kv_next(&c, &kv), -1);
	cr_assert_eq(c.err, SPOP_ERR_INVALID);
	/* a string value running past the payload */
	spop_cursor_init(&c, BYTES("\x01" "k" "\x08\x04" "abc"));
	cr_assert_eq(spop_kv_next(&c, &kv), -1);
	/* a truncated varint name length */
	spop_cursor_init(&c, BYTES("\xfc"));
	cr_assert_eq(spop_kv_next(&c, &kv), -1);
	/* a name length of 2^64 - 1 */
	spop_cursor_init(&c, BYTES("\xff\xf0\xfe\xfe\xfe\xfe\xfe\xfe\xfe\x0e" "\x00"));
	cr_assert_eq(spop_kv_next(&c, &kv), -1);
}

Test(cursor, actions)
{
	struct spop_cursor c;
	enum spop_action_type t;
	enum spop_scope s;
	struct spop_str name;
	struct spop_data v;

	/* unset-var sess.x: value reported as NULL */
	spop_cursor_init(&c, BYTES("\x02\x02\x01" "\x01" "x"));
	v.type = SPOP_DATA_STRING;
	cr_assert_eq(spop_action_next(&c, &t, &s, &name, &v), 1);
	cr_assert_eq(t, SPOP_ACT_UNSET_VAR);
	cr_assert_eq(s, SPOP_SCOPE_SESS);
	cr_assert(str_eq(name, "x"));
	cr_assert_eq(v.type, SPOP_DATA_NULL);
	cr_assert_eq(spop_action_next(&c, &t, &s, &name, &v), 0);
	/* set-var with a NULL value (HAProxy unsets the variable) */
	spop_cursor_init(&c, BYTES("\x01\x03\x04" "\x01" "x" "\x00"));
	cr_assert_eq(spop_action_next(&c, &t, &s, &name, &v), 1);
	cr_assert_eq(s, SPOP_SCOPE_RES);
	cr_assert_eq(v.type, SPOP_DATA_NULL);
	/* unknown action type */
	spop_cursor_init(&c, BYTES("\x03\x00"));
	cr_assert_eq(spop_action_next(&c, &t, &s, &name, &v), -1);
	cr_assert_eq(c.err, SPOP_ERR_INVALID);
	/* wrong NB-ARGS */
	spop_cursor_init(&c, BYTES("\x01\x02\x02" "\x01" "x" "\x00"));
	cr_assert_eq(spop_action_next(&c, &t, &s, &name, &v), -1);
	spop_cursor_init(&c, BYTES("\x02\x03\x02" "\x01" "x"));
	cr_assert_eq(spop_action_next(&c, &t, &s, &name, &v), -1);
	/* scope out of range */
	spop_cursor_init(&c, BYTES("\x02\x02\x05" "\x01" "x"));
	cr_assert_eq(spop_action_next(&c, &t, &s, &name, &v), -1);
	/* set-var without its value */
	spop_cursor_init(&c, BYTES("\x01\x03\x02" "\x01" "x"));
	cr_assert_eq(spop_action_next(&c, &t, &s, &name, &v), -1);
	/* only the action type */
	spop_cursor_init(&c, BYTES("\x01"));
	cr_assert_eq(spop_action_next(&c, &t, &s, &name, &v), -1);
	cr_assert_eq(c.err, SPOP_ERR_INVALID);
}
