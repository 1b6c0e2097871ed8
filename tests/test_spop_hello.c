/*
 * test_spop_hello.c - unit tests of the SPOP codec (spop/): HELLO and
 * DISCONNECT decoded (their KV lists, versions and capabilities), and
 * every encoder, byte for byte.
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

/* ---- HELLO ---- */

Test(hello, capture)
{
	struct guard g;
	struct spop_frame f;
	struct spop_hello h;
	enum spop_err err = SPOP_ERR_NONE;

	guard_init(&g, 256);
	decode_whole(&g, BYTES(hello_129), &f);
	cr_assert_eq(spop_hello_decode(f.payload, f.payload_len, &h, &err), 0, "err %d", err);
	cr_assert(h.has_versions && h.has_max_frame_size && h.has_capabilities);
	cr_assert(str_eq(h.supported_versions, "2.0"));
	cr_assert_eq(h.max_frame_size, 16380);
	cr_assert(str_eq(h.capabilities, "pipelining,async"));
	cr_assert(str_eq(h.engine_id, UUID));
	cr_assert(!h.healthcheck);
	cr_assert(spop_version_supported(h.supported_versions, "2.0"));
	cr_assert(spop_has_capability(h.capabilities, "pipelining"));
	cr_assert(spop_has_capability(h.capabilities, "async"));
	cr_assert(!spop_has_capability(h.capabilities, "fragmentation"));
	guard_fini(&g);
}

Test(hello, agent_hello_capture)
{
	struct guard g;
	struct spop_frame f;
	struct spop_hello h;
	enum spop_err err = SPOP_ERR_NONE;

	guard_init(&g, 256);
	decode_whole(&g, BYTES(agent_hello_64), &f);
	cr_assert_eq(spop_hello_decode(f.payload, f.payload_len, &h, &err), 0, "err %d", err);
	cr_assert(str_eq(h.supported_versions, "2.0"), "\"version\" fills supported_versions");
	cr_assert_eq(h.max_frame_size, 16380);
	cr_assert(str_eq(h.capabilities, "pipelining"));
	cr_assert_eq(h.engine_id.len, 0);
	guard_fini(&g);
}

Test(hello, every_prefix)
{
	struct guard g;
	struct spop_frame f;
	struct spop_hello h;
	enum spop_err err;
	/* item boundaries of the hello_129 payload */
	static const size_t bounds[] = { 0, 24, 43, 74, 122 };

	uint8_t payload[122];

	guard_init(&g, 256);
	decode_whole(&g, BYTES(hello_129), &f);
	cr_assert_eq(f.payload_len, sizeof(payload));
	memcpy(payload, f.payload, sizeof(payload));   /* the guard area gets reused */
	for (size_t k = 0; k <= sizeof(payload); k++) {
		const uint8_t *p = guard_put(&g, payload, k);
		bool on_bound = false;

		for (size_t i = 0; i < sizeof(bounds) / sizeof(bounds[0]); i++)
			on_bound |= bounds[i] == k;
		err = SPOP_ERR_NONE;
		int r = spop_hello_decode(p, k, &h, &err);
		if (!on_bound) {
			cr_assert_eq(r, -1, "prefix %zu", k);
			cr_assert_eq(err, SPOP_ERR_INVALID, "prefix %zu", k);
		} else if (k < 24) {
			cr_assert_eq(err, SPOP_ERR_NO_VSN);
		} else if (k < 43) {
			cr_assert_eq(err, SPOP_ERR_NO_FRAME_SIZE);
		} else if (k < 74) {
			cr_assert_eq(err, SPOP_ERR_NO_CAP);
		} else {
			cr_assert_eq(r, 0, "prefix %zu", k);
		}
	}
	guard_fini(&g);
}

/* Builds a HELLO payload from (name, value) items. */
struct item {
	const char *name;
	struct spop_data v;
};

static int hello_of(const struct item *items, size_t n, struct spop_hello *h,
		    enum spop_err *err)
{
	static uint8_t buf[1024];
	struct spop_writer w;

	spop_writer_init(&w, buf, sizeof(buf));
	for (size_t i = 0; i < n; i++) {
		spop_put_str(&w, items[i].name, strlen(items[i].name));
		spop_put_data(&w, &items[i].v);
	}
	cr_assert(!w.overflow);
	*err = SPOP_ERR_NONE;
	return spop_hello_decode(buf, w.len, h, err);
}

#define VSTR(s) mk_str(SPOP_DATA_STRING, s, strlen(s))

Test(hello, mandatory_items_in_order)
{
	struct spop_hello h;
	enum spop_err err;
	struct item it[4] = {
		{ "supported-versions", VSTR("2.0") },
		{ "max-frame-size", mk_uint(SPOP_DATA_UINT32, 16380) },
		{ "capabilities", VSTR("") },
		{ "healthcheck", { .type = SPOP_DATA_BOOL, .v.b = true } },
	};

	cr_assert_eq(hello_of(it, 4, &h, &err), 0);
	cr_assert(h.healthcheck);
	cr_assert(h.has_capabilities);
	cr_assert_eq(h.capabilities.len, 0, "empty capabilities of a health check");
	cr_assert_eq(hello_of(it, 0, &h, &err), -1);
	cr_assert_eq(err, SPOP_ERR_NO_VSN);
	cr_assert_eq(hello_of(it + 1, 3, &h, &err), -1);
	cr_assert_eq(err, SPOP_ERR_NO_VSN, "version is reported first");
	cr_assert_eq(hello_of(it + 2, 2, &h, &err), -1);
	cr_assert_eq(err, SPOP_ERR_NO_VSN);
	it[1].name = "x";
	cr_assert_eq(hello_of(it, 4, &h, &err), -1);
	cr_assert_eq(err, SPOP_ERR_NO_FRAME_SIZE);
	it[1].name = "max-frame-size";
	it[2].name = "y";
	cr_assert_eq(hello_of(it, 4, &h, &err), -1);
	cr_assert_eq(err, SPOP_ERR_NO_CAP);
}

Test(hello, names_match_exactly)
{
	struct spop_hello h;
	enum spop_err err;
	struct item it[] = {
		{ "supported-versions-x", VSTR("9.9") },
		{ "supported-versions", VSTR("2.0") },
		{ "max-frame-sizes", mk_uint(SPOP_DATA_UINT32, 1) },
		{ "max-frame", mk_uint(SPOP_DATA_UINT32, 2) },
		{ "max-frame-size", mk_uint(SPOP_DATA_UINT32, 4096) },
		{ "capabilitiesX", VSTR("bad") },
		{ "capabilities", VSTR("pipelining") },
		{ "Capabilities", VSTR("bad2") },
		{ "versions", VSTR("bad3") },
		{ "healthcheck2", { .type = SPOP_DATA_BOOL, .v.b = true } },
		{ "unknown", mk_uint(SPOP_DATA_UINT64, 7) },
	};

	cr_assert_eq(hello_of(it, sizeof(it) / sizeof(it[0]), &h, &err), 0);
	cr_assert(str_eq(h.supported_versions, "2.0"));
	cr_assert_eq(h.max_frame_size, 4096);
	cr_assert(str_eq(h.capabilities, "pipelining"));
	cr_assert(!h.healthcheck);

	/* a prefix of the name alone is not the item */
	struct item only_prefix[] = {
		{ "supported-versions", VSTR("2.0") },
		{ "max-frame", mk_uint(SPOP_DATA_UINT32, 4096) },
		{ "capabilities", VSTR("") },
	};
	cr_assert_eq(hello_of(only_prefix, 3, &h, &err), -1);
	cr_assert_eq(err, SPOP_ERR_NO_FRAME_SIZE);
}

Test(hello, item_types)
{
	struct spop_hello h;
	enum spop_err err;
	struct item it[] = {
		{ "supported-versions", VSTR("2.0") },
		{ "max-frame-size", mk_uint(SPOP_DATA_UINT32, 16380) },
		{ "capabilities", VSTR("pipelining") },
	};
	static const enum spop_data_type int_types[] = {
		SPOP_DATA_INT32, SPOP_DATA_UINT32, SPOP_DATA_INT64, SPOP_DATA_UINT64,
	};

	/* any integer type for max-frame-size */
	for (size_t i = 0; i < 4; i++) {
		it[1].v = mk_uint(int_types[i], 9000);
		cr_assert_eq(hello_of(it, 3, &h, &err), 0, "type %d", int_types[i]);
		cr_assert_eq(h.max_frame_size, 9000);
	}
	/* a negative one is as good as missing */
	it[1].v = mk_int(SPOP_DATA_INT32, -1);
	cr_assert_eq(hello_of(it, 3, &h, &err), -1);
	cr_assert_eq(err, SPOP_ERR_NO_FRAME_SIZE);
	it[1].v = mk_int(SPOP_DATA_INT64, INT64_MIN);
	cr_assert_eq(hello_of(it, 3, &h, &err), -1);
	cr_assert_eq(err, SPOP_ERR_NO_FRAME_SIZE);
	/* a string is not a size */
	it[1].v = VSTR("16380");
	cr_assert_eq(hello_of(it, 3, &h, &err), -1);
	cr_assert_eq(err, SPOP_ERR_NO_FRAME_SIZE);
	it[1].v = mk_uint(SPOP_DATA_UINT32, 16380);
	/* versions and capabilities must be STRING */
	it[0].v = mk_str(SPOP_DATA_BINARY, "2.0", 3);
	cr_assert_eq(hello_of(it, 3, &h, &err), -1);
	cr_assert_eq(err, SPOP_ERR_NO_VSN);
	it[0].v = VSTR("2.0");
	it[2].v = (struct spop_data){ .type = SPOP_DATA_NULL };
	cr_assert_eq(hello_of(it, 3, &h, &err), -1);
	cr_assert_eq(err, SPOP_ERR_NO_CAP);
}

Test(hello, malformed)
{
	struct spop_hello h;
	enum spop_err err = SPOP_ERR_NONE;

	/* a well-formed mandatory item then garbage: INVALID wins */
	cr_assert_eq(spop_hello_decode(BYTES("\x07" "version" "\x08\x03" "2.0" "\x01" "x" "\x0d"),
				       &h, &err), -1);
	cr_assert_eq(err, SPOP_ERR_INVALID);
}

/* ---- lists ---- */

Test(lists, version_supported)
{
	cr_assert(spop_version_supported(S("2.0"), "2.0"));
	cr_assert(spop_version_supported(S(" 1.0 , 2.0"), "2.0"));
	cr_assert(spop_version_supported(S("1.0,\t2.0\t"), "2.0"));
	cr_assert(spop_version_supported(S("2.00"), "2.0"));
	cr_assert(spop_version_supported(S("2.0"), "2.000"));
	cr_assert(spop_version_supported(S("02.0"), "2.0"));
	cr_assert(!spop_version_supported(S("1.0"), "2.0"));
	cr_assert(!spop_version_supported(S("2.1"), "2.0"));
	cr_assert(!spop_version_supported(S("20"), "2.0"));
	cr_assert(!spop_version_supported(S("2.0a"), "2.0"));
	cr_assert(!spop_version_supported(S("2 .0"), "2.0"));
	cr_assert(!spop_version_supported(S(".0"), "0.0"));
	cr_assert(!spop_version_supported(S("2."), "2.0"));
	cr_assert(!spop_version_supported(S("1.0 2.0"), "2.0"));
	cr_assert(!spop_version_supported(S(""), "2.0"));
	cr_assert(!spop_version_supported(S(","), "2.0"));
	cr_assert(!spop_version_supported((struct spop_str){ NULL, 0 }, "2.0"));
	cr_assert(!spop_version_supported(S("2.0"), "x"));
	cr_assert(!spop_version_supported(S("2.1000"), "3.0"), "minor over 999 is invalid");
	cr_assert(!spop_version_supported(S("99999999999999999999.0"), "2.0"));
	/* a list that is not NUL-terminated is read up to its length only */
	struct spop_str cut = { "1.0,2.0", 3 };
	cr_assert(!spop_version_supported(cut, "2.0"));
	cr_assert(spop_version_supported(cut, "1.0"));
}

Test(lists, has_capability)
{
	cr_assert(spop_has_capability(S("pipelining"), "pipelining"));
	cr_assert(spop_has_capability(S("pipelining,async"), "async"));
	cr_assert(spop_has_capability(S(" pipelining , async "), "pipelining"));
	cr_assert(spop_has_capability(S("\tasync\t,pipelining"), "async"));
	cr_assert(spop_has_capability(S(",,pipelining,"), "pipelining"));
	cr_assert(!spop_has_capability(S("pipelining2"), "pipelining"));
	cr_assert(!spop_has_capability(S("pipe"), "pipelining"));
	cr_assert(!spop_has_capability(S("xpipelining"), "pipelining"));
	cr_assert(!spop_has_capability(S("pipe lining"), "pipelining"));
	cr_assert(!spop_has_capability(S("Pipelining"), "pipelining"));
	cr_assert(!spop_has_capability(S(""), "pipelining"));
	cr_assert(!spop_has_capability((struct spop_str){ NULL, 0 }, "pipelining"));
	cr_assert(!spop_has_capability(S("a,,b"), ""));
	struct spop_str cut = { "async,pipelining", 9 };
	cr_assert(!spop_has_capability(cut, "pipelining"));
	cr_assert(spop_has_capability(cut, "async"));
}

/* ---- DISCONNECT ---- */

Test(disconnect, capture)
{
	struct guard g;
	struct spop_frame f;
	struct spop_disconnect d;
	enum spop_err err = SPOP_ERR_NONE;

	guard_init(&g, 64);
	decode_whole(&g, BYTES(disconnect_40), &f);
	cr_assert_eq(spop_disconnect_decode(f.payload, f.payload_len, &d, &err), 0);
	cr_assert(d.has_status_code);
	cr_assert_eq(d.status_code, SPOP_ERR_IO);
	cr_assert(str_eq(d.message, "I/O error"));
	/* every non-boundary prefix is malformed */
	uint8_t payload[33];
	cr_assert_eq(f.payload_len, sizeof(payload));
	memcpy(payload, f.payload, sizeof(payload));   /* the guard area gets reused */
	for (size_t k = 0; k < sizeof(payload); k++) {
		const uint8_t *p = guard_put(&g, payload, k);
		int r = spop_disconnect_decode(p, k, &d, &err);

		if (k == 0 || k == 14)
			cr_assert_eq(r, 0, "prefix %zu", k);
		else
			cr_assert_eq(r, -1, "prefix %zu", k);
	}
	guard_fini(&g);
}

Test(disconnect, missing_and_odd_items)
{
	struct spop_disconnect d;
	enum spop_err err = SPOP_ERR_NONE;

	cr_assert_eq(spop_disconnect_decode(BYTES("\x07" "message" "\x08\x02" "hi"), &d, &err), 0);
	cr_assert(!d.has_status_code);
	cr_assert(str_eq(d.message, "hi"));
	/* INT64 status accepted, out-of-range or negative ignored */
	cr_assert_eq(spop_disconnect_decode(BYTES("\x0b" "status-code" "\x04\x63"), &d, &err), 0);
	cr_assert(d.has_status_code);
	cr_assert_eq(d.status_code, 99);
	cr_assert_eq(spop_disconnect_decode(BYTES("\x0b" "status-code" "\x05"
						  "\xff\xf0\xfe\xfe\xfe\xfe\xfe\xfe\xfe\x0e"), &d, &err), 0);
	cr_assert(!d.has_status_code);
	cr_assert_eq(spop_disconnect_decode(BYTES("\x0b" "status-code" "\x02"
						  "\xff\xf0\xfe\xfe\xfe\xfe\xfe\xfe\xfe\x0e"), &d, &err), 0);
	cr_assert(!d.has_status_code);
	cr_assert_eq(spop_disconnect_decode(BYTES("\x0b" "status-code" "\x0c"), &d, &err), -1);
	cr_assert_eq(err, SPOP_ERR_INVALID);
	cr_assert_eq(spop_disconnect_decode(NULL, 0, &d, &err), 0);
}

/* ---- encoders ---- */

Test(encode, agent_hello_is_byte_exact)
{
	uint8_t buf[128];
	struct spop_writer w;
	struct spop_hello h;
	struct spop_frame f;
	enum spop_err err;

	spop_writer_init(&w, buf, sizeof(buf));
	cr_assert_eq(spop_encode_agent_hello(&w, 16380, "pipelining"), 0);
	cr_assert(!w.overflow);
	cr_assert_eq(w.len, sizeof(agent_hello_64) - 1);
	cr_assert_arr_eq(buf, agent_hello_64, w.len);
	cr_assert_eq(spop_frame_decode(buf, w.len, 16380, &f, &err), (int)w.len);
	cr_assert_eq(spop_hello_decode(f.payload, f.payload_len, &h, &err), 0);
	cr_assert_eq(h.max_frame_size, 16380);
}

Test(encode, haproxy_hello_is_byte_exact)
{
	uint8_t buf[256];
	struct spop_writer w;
	struct spop_hello h;
	struct spop_frame f;
	enum spop_err err;

	spop_writer_init(&w, buf, sizeof(buf));
	cr_assert_eq(spop_encode_haproxy_hello(&w, "2.0", 16380, "pipelining,async", false, UUID), 0);
	cr_assert_eq(w.len, sizeof(hello_129) - 1);
	cr_assert_arr_eq(buf, hello_129, w.len);

	/* a health-check HELLO decodes back */
	spop_writer_init(&w, buf, sizeof(buf));
	cr_assert_eq(spop_encode_haproxy_hello(&w, NULL, 256, NULL, true, NULL), 0);
	cr_assert_eq(spop_frame_decode(buf, w.len, 256, &f, &err), (int)w.len);
	cr_assert_eq(f.type, SPOP_FRAME_HAPROXY_HELLO);
	cr_assert_eq(f.flags, SPOP_FL_FIN);
	cr_assert_eq(spop_hello_decode(f.payload, f.payload_len, &h, &err), 0);
	cr_assert(h.healthcheck);
	cr_assert(str_eq(h.supported_versions, SPOP_VERSION));
	cr_assert_eq(h.max_frame_size, 256);
	cr_assert_eq(h.capabilities.len, 0);
	cr_assert_eq(h.engine_id.len, 0);
}

Test(encode, disconnects)
{
	uint8_t buf[512];
	struct spop_writer w;
	struct spop_frame f;
	struct spop_disconnect d;
	enum spop_err err;
	char longmsg[400];

	spop_writer_init(&w, buf, sizeof(buf));
	cr_assert_eq(spop_encode_haproxy_disconnect(&w, SPOP_ERR_IO, NULL), 0);
	cr_assert_eq(w.len, sizeof(disconnect_40) - 1);
	cr_assert_arr_eq(buf, disconnect_40, w.len);

	spop_writer_init(&w, buf, sizeof(buf));
	cr_assert_eq(spop_encode_agent_disconnect(&w, SPOP_ERR_BAD_VSN, "no 2.0 here"), 0);
	cr_assert_eq(spop_frame_decode(buf, w.len, 256, &f, &err), (int)w.len);
	cr_assert_eq(f.type, SPOP_FRAME_AGENT_DISCONNECT);
	cr_assert_eq(spop_disconnect_decode(f.payload, f.payload_len, &d, &err), 0);
	cr_assert_eq(d.status_code, SPOP_ERR_BAD_VSN);
	cr_assert(str_eq(d.message, "no 2.0 here"));

	/* a long message is cut so that the frame fits 256 bytes */
	memset(longmsg, 'm', sizeof(longmsg) - 1);
	longmsg[sizeof(longmsg) - 1] = '\0';
	spop_writer_init(&w, buf, sizeof(buf));
	cr_assert_eq(spop_encode_agent_disconnect(&w, SPOP_ERR_UNKNOWN, longmsg), 0);
	cr_assert_leq(w.len, 4 + SPOP_MIN_FRAME_SIZE);
	cr_assert_eq(spop_frame_decode(buf, w.len, SPOP_MIN_FRAME_SIZE, &f, &err), (int)w.len);
	cr_assert_eq(spop_disconnect_decode(f.payload, f.payload_len, &d, &err), 0);
	cr_assert_eq(d.status_code, 99);
	cr_assert_gt(d.message.len, 200);
	cr_assert_leq(d.message.len, 255);
}

Test(encode, notify_and_ack_are_byte_exact)
{
	uint8_t buf[128];
	struct spop_writer w;
	struct spop_data v;
	size_t start;

	spop_writer_init(&w, buf, sizeof(buf));
	start = spop_frame_begin(&w, SPOP_FRAME_NOTIFY, SPOP_FL_FIN, 20, 1);
	cr_assert_eq(start, 0);
	spop_put_msg(&w, "check-rate", 10, 2);
	spop_put_str(&w, "key", 3);
	v = VSTR("abc");
	spop_put_data(&w, &v);
	spop_put_str(&w, "ip", 2);
	v = (struct spop_data){ .type = SPOP_DATA_IPV4 };
	memcpy(v.v.ipv4, "\xc0\x00\x02\x01", 4);
	spop_put_data(&w, &v);
	cr_assert_eq(spop_frame_end(&w, start, 16380), 0);
	cr_assert_eq(w.len, sizeof(notify_rate) - 1);
	cr_assert_arr_eq(buf, notify_rate, w.len);

	spop_writer_init(&w, buf, sizeof(buf));
	start = spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FL_FIN, 20, 1);
	v = mk_int(SPOP_DATA_INT64, 150);
	spop_put_set_var(&w, SPOP_SCOPE_TXN, "rate", 4, &v);
	v = (struct spop_data){ .type = SPOP_DATA_BOOL, .v.b = true };
	spop_put_set_var(&w, SPOP_SCOPE_TXN, "blocked", 7, &v);
	cr_assert_eq(spop_frame_end(&w, start, 16380), 0);
	cr_assert_eq(w.len, sizeof(ack_29) - 1);
	cr_assert_arr_eq(buf, ack_29, w.len);

	/* the one-arg notify capture, and an unset-var */
	spop_writer_init(&w, buf, sizeof(buf));
	start = spop_frame_begin(&w, SPOP_FRAME_NOTIFY, SPOP_FL_FIN, 20, 1);
	spop_put_msg(&w, "check-client-ip", 15, 1);
	spop_put_str(&w, "", 0);
	v = (struct spop_data){ .type = SPOP_DATA_IPV4 };
	memcpy(v.v.ipv4, "\x7f\x00\x00\x01", 4);
	spop_put_data(&w, &v);
	cr_assert_eq(spop_frame_end(&w, start, 16380), 0);
	cr_assert_arr_eq(buf, notify_30, sizeof(notify_30) - 1);

	spop_writer_init(&w, buf, sizeof(buf));
	spop_put_unset_var(&w, SPOP_SCOPE_SESS, "x", 1);
	cr_assert_eq(w.len, 5);
	cr_assert_arr_eq(buf, "\x02\x02\x01\x01" "x", 5);
	spop_writer_init(&w, buf, sizeof(buf));
	spop_put_kv_bool(&w, "b", false);
	spop_put_kv_uint32(&w, "u", 300);
	cr_assert_arr_eq(buf, "\x01" "b" "\x01" "\x01" "u" "\x03\xfc\x03", 8);
}

Test(encode, tiny_capacity_overflows_and_rolls_back)
{
	uint8_t buf[256], ref[256];
	struct spop_writer w;
	size_t need, prior = sizeof(disconnect_40) - 1;

	spop_writer_init(&w, ref, sizeof(ref));
	cr_assert_eq(spop_encode_agent_hello(&w, 16380, "pipelining"), 0);
	need = w.len;

	for (size_t cap = 0; cap < need; cap++) {
		spop_writer_init(&w, cap ? buf : NULL, cap);
		cr_assert_eq(spop_encode_agent_hello(&w, 16380, "pipelining"), -1, "cap %zu", cap);
		cr_assert_eq(w.len, 0, "cap %zu: rolled back", cap);
		cr_assert(!w.overflow, "cap %zu: overflow cleared", cap);
	}
	spop_writer_init(&w, buf, need);
	cr_assert_eq(spop_encode_agent_hello(&w, 16380, "pipelining"), 0);
	cr_assert_eq(w.len, need);

	/* after a first frame, a second that does not fit leaves the first intact */
	for (size_t cap = prior; cap < prior + need; cap++) {
		spop_writer_init(&w, buf, cap);
		cr_assert_eq(spop_encode_haproxy_disconnect(&w, SPOP_ERR_IO, "I/O error"), 0);
		cr_assert_eq(spop_encode_agent_hello(&w, 16380, "pipelining"), -1, "cap %zu", cap);
		cr_assert_eq(w.len, prior);
		cr_assert(!w.overflow);
		cr_assert_arr_eq(buf, disconnect_40, prior);
		/* and something smaller may be written instead */
		if (cap - prior >= 4 + 7) {
			size_t s = spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FL_FIN, 1, 1);
			cr_assert_eq(spop_frame_end(&w, s, 256), 0);
			cr_assert_eq(w.len, prior + 11);
		}
	}
}

Test(encode, overflow_sticks)
{
	uint8_t buf[10];
	struct spop_writer w;

	memset(buf, 0, sizeof(buf));
	spop_writer_init(&w, buf, sizeof(buf));
	spop_put_bytes(&w, "12345678", 8);
	cr_assert(!w.overflow);
	spop_put_bytes(&w, "abcde", 5);
	cr_assert(w.overflow);
	cr_assert_eq(w.len, 8);
	spop_put_u8(&w, 'z');      /* would fit, but the writer has overflowed */
	spop_put_varint(&w, 1);
	spop_put_str(&w, "", 0);
	cr_assert_eq(w.len, 8);
	cr_assert_eq(buf[8], 0);
	cr_assert(w.overflow);
}

Test(encode, frame_limits)
{
	static uint8_t buf[1024];
	static char pad[600];
	struct spop_writer w;
	size_t s;

	/* LENGTH over max_frame_size: removed */
	spop_writer_init(&w, buf, sizeof(buf));
	s = spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FL_FIN, 1, 1);
	spop_put_bytes(&w, pad, 250);   /* LENGTH 7 + 250 */
	cr_assert_eq(spop_frame_end(&w, s, 256), -1);
	cr_assert_eq(w.len, 0);
	cr_assert(!w.overflow);
	/* LENGTH == max_frame_size: kept */
	s = spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FL_FIN, 1, 1);
	spop_put_bytes(&w, pad, 256 - 7);
	cr_assert_eq(spop_frame_end(&w, s, 256), 0, "LENGTH == max is allowed");
	cr_assert_eq(w.len, 4 + 256);
	cr_assert_arr_eq(buf, "\x00\x00\x01\x00", 4);
	s = spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FL_FIN, 1, 1);
	cr_assert_eq(s, 4 + 256);
	spop_put_bytes(&w, pad, 256 - 6);
	cr_assert_eq(spop_frame_end(&w, s, 256), -1, "LENGTH == max + 1");
	cr_assert_eq(w.len, 4 + 256);
	cr_assert(!w.overflow);

	/* never a LENGTH below 7, never 0 */
	spop_writer_init(&w, buf, sizeof(buf));
	spop_put_bytes(&w, "ab", 2);
	cr_assert_eq(spop_frame_end(&w, 0, 256), -1);
	cr_assert_eq(w.len, 0);
	cr_assert_eq(spop_frame_end(&w, 0, 256), -1);
	/* a start beyond the end removes nothing */
	spop_put_bytes(&w, "ab", 2);
	cr_assert_eq(spop_frame_end(&w, 100, 256), -1);
	cr_assert_eq(w.len, 2);
}

Test(encode, caller_errors_poison_the_frame)
{
	uint8_t buf[64];
	struct spop_writer w;
	struct spop_data bad = { .type = SPOP_DATA_TYPE_COUNT };
	size_t s;

	spop_writer_init(&w, buf, sizeof(buf));
	s = spop_frame_begin(&w, SPOP_FRAME_NOTIFY, SPOP_FL_FIN, 1, 1);
	spop_put_msg(&w, "m", 1, 256);
	cr_assert(w.overflow);
	cr_assert_eq(spop_frame_end(&w, s, 256), -1);
	cr_assert_eq(w.len, 0);

	s = spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FL_FIN, 1, 1);
	spop_put_set_var(&w, SPOP_SCOPE_TXN, "v", 1, &bad);
	cr_assert(w.overflow);
	cr_assert_eq(spop_frame_end(&w, s, 256), -1);
	cr_assert_eq(w.len, 0);
}

Test(encode, frame_header)
{
	uint8_t buf[64];
	struct spop_writer w;
	struct spop_frame f;
	enum spop_err err;
	size_t s;

	spop_writer_init(&w, buf, sizeof(buf));
	s = spop_frame_begin(&w, SPOP_FRAME_ACK, 0x01020303u, UINT64_MAX, 300);
	cr_assert_eq(spop_frame_end(&w, s, 256), 0);
	cr_assert_eq(spop_frame_decode(buf, w.len, 256, &f, &err), (int)w.len);
	cr_assert_eq(f.type, SPOP_FRAME_ACK);
	cr_assert_eq(f.flags, 0x01020303u);
	cr_assert_eq(f.stream_id, UINT64_MAX);
	cr_assert_eq(f.frame_id, 300);
	cr_assert_eq(f.payload_len, 0);
	cr_assert_arr_eq(buf + 5, "\x01\x02\x03\x03", 4);
}
