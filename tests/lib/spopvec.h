/*
 * spopvec.h - what the tests of the SPOP codec (tests/test_spop_*.c)
 * share: the test vectors, real captures and constructed frames of
 * docs/reference spop-protocol-notes.md (sections 1.3-1.8), typed data
 * made in one line, comparisons, and a frame decoded whole from before a
 * guard page (tests/lib/guard.h).
 *
 * Calls Criterion's assertions: for test binaries only.
 */
#ifndef TESTS_SPOPVEC_H
#define TESTS_SPOPVEC_H

#include <criterion/criterion.h>

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "spop/spop.h"
#include "tests/lib/guard.h"

/* A byte string literal and its length (without the literal's NUL).
 * Hex escapes are closed by splitting the literal: "\x0f" "check". */
#define BYTES(s) ((const uint8_t *)(s)), (sizeof(s) - 1)

/* ---- test vectors (notes 1.5-1.8) ---- */

#define UUID "4f2c1a9e-3b7d-4e8a-9c61-0d5e2f7a8b13"

/* HAProxy 2.x HAPROXY-HELLO, LENGTH 129 (0x81). */
static const char hello_129[] =
	"\x00\x00\x00\x81"
	"\x01" "\x00\x00\x00\x01" "\x00" "\x00"
	"\x12" "supported-versions" "\x08" "\x03" "2.0"
	"\x0e" "max-frame-size" "\x03" "\xfc\xf0\x06"
	"\x0c" "capabilities" "\x08" "\x10" "pipelining,async"
	"\x09" "engine-id" "\x08" "\x24" UUID;

/* Real NOTIFY (spoa-example), LENGTH 30. */
static const char notify_30[] =
	"\x00\x00\x00\x1e"
	"\x03" "\x00\x00\x00\x01" "\x14" "\x01"
	"\x0f" "check-client-ip" "\x01"
	"\x00" "\x06" "\x7f\x00\x00\x01";

/* Constructed NOTIFY check-rate(key="abc", ip=192.0.2.1), LENGTH 36. */
static const char notify_rate[] =
	"\x00\x00\x00\x24"
	"\x03" "\x00\x00\x00\x01" "\x14" "\x01"
	"\x0a" "check-rate" "\x02"
	"\x03" "key" "\x08" "\x03" "abc"
	"\x02" "ip" "\x06" "\xc0\x00\x02\x01";

/* Constructed ACK: set-var txn rate=150 (INT64), set-var txn blocked=true.
 * LENGTH 29 (0x1d) adds up. 150 < 240 is the one varint byte 0x96; a
 * "96 01" (as LEB128 would write 150) would make LENGTH 30 and decode as
 * rate=150 followed by a malformed action 0x01 0x01. */
static const char ack_29[] =
	"\x00\x00\x00\x1d"
	"\x67" "\x00\x00\x00\x01" "\x14" "\x01"
	"\x01\x03\x02" "\x04" "rate" "\x04" "\x96"
	"\x01\x03\x02" "\x07" "blocked" "\x11";

/* Constructed AGENT-HELLO, LENGTH 64 (0x40). */
static const char agent_hello_64[] =
	"\x00\x00\x00\x40"
	"\x65" "\x00\x00\x00\x01" "\x00" "\x00"
	"\x07" "version" "\x08" "\x03" "2.0"
	"\x0e" "max-frame-size" "\x03" "\xfc\xf0\x06"
	"\x0c" "capabilities" "\x08" "\x0a" "pipelining";

/* Real HAPROXY-DISCONNECT (spoa-mirror #17), LENGTH 40 (0x28). */
static const char disconnect_40[] =
	"\x00\x00\x00\x28"
	"\x02" "\x00\x00\x00\x01" "\x00" "\x00"
	"\x0b" "status-code" "\x03" "\x01"
	"\x07" "message" "\x08" "\x09" "I/O error";

/* ---- helpers ---- */

static inline struct spop_str S(const char *s)
{
	struct spop_str r = { s, strlen(s) };
	return r;
}

static inline bool str_eq(struct spop_str s, const char *lit)
{
	return s.len == strlen(lit) && memcmp(s.ptr, lit, s.len) == 0;
}

static inline bool data_eq(const struct spop_data *a, const struct spop_data *b)
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
		return a->v.i == b->v.i;
	case SPOP_DATA_UINT32:
	case SPOP_DATA_UINT64:
		return a->v.u == b->v.u;
	case SPOP_DATA_IPV4:
		return memcmp(a->v.ipv4, b->v.ipv4, 4) == 0;
	case SPOP_DATA_IPV6:
		return memcmp(a->v.ipv6, b->v.ipv6, 16) == 0;
	case SPOP_DATA_STRING:
	case SPOP_DATA_BINARY:
		return a->v.str.len == b->v.str.len &&
		       (a->v.str.len == 0 || memcmp(a->v.str.ptr, b->v.str.ptr, a->v.str.len) == 0);
	default:
		return false;
	}
}

/* Decodes the whole frame `raw` (n bytes) from before the guard page;
 * the frame must be exactly n bytes. */
static inline void decode_whole(struct guard *g, const uint8_t *raw, size_t n, struct spop_frame *f)
{
	enum spop_err err = SPOP_ERR_NONE;
	const uint8_t *p = guard_put(g, raw, n);

	cr_assert_eq(spop_frame_decode(p, n, SPOP_DEFAULT_FRAME_SIZE, f, &err), (int)n,
		     "err %d", err);
}

static inline struct spop_data mk_int(enum spop_data_type t, int64_t i)
{
	struct spop_data d = { .type = t };
	d.v.i = i;
	return d;
}

static inline struct spop_data mk_uint(enum spop_data_type t, uint64_t u)
{
	struct spop_data d = { .type = t };
	d.v.u = u;
	return d;
}

static inline struct spop_data mk_str(enum spop_data_type t, const char *p, size_t n)
{
	struct spop_data d = { .type = t };
	d.v.str.ptr = p;
	d.v.str.len = n;
	return d;
}

#define VSTR(s) mk_str(SPOP_DATA_STRING, s, strlen(s))

#endif /* TESTS_SPOPVEC_H */
