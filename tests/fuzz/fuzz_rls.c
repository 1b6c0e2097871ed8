/*
 * fuzz_rls.c - libFuzzer target over the codec of Envoy's rate limit
 * service (agent/pb_wire.c, agent/rls_wire.c).
 *
 * Each input is read every way a server and a client read bytes: as a
 * stream of gRPC length-prefixed messages, each decoded as a
 * RateLimitRequest, a RateLimitResponse and both health messages; and the
 * whole input as each message too, as a grpc-timeout value and as a
 * grpc-message text. Whatever decodes is encoded again (into a buffer that
 * fits, and into small ones that must refuse it untouched), decoded once
 * more and compared: both directions, the views' bounds (ASan) and the
 * arithmetic (UBSan).
 *
 *   clang -fsanitize=fuzzer,address,undefined -I. tests/fuzz/fuzz_rls.c agent/rls_wire.c agent/pb_wire.c
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/rls_wire.h"

#define CHECK(cond) do { if (!(cond)) abort(); } while (0)

#define ROOM 64
#define OUT_MAX (1u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t out[OUT_MAX];

static bool within(struct pb_str s, const uint8_t *p, size_t len)
{
	const uint8_t *q = (const uint8_t *)s.ptr;

	return s.len == 0 || (q >= p && s.len <= len && (size_t)(q - p) <= len - s.len);
}

static bool same(struct pb_str a, struct pb_str b)
{
	return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

static bool err_known(enum rls_err e)
{
	return (unsigned)e < RLS_ERR_COUNT && e != RLS_ERR_NONE;
}

/* Every writer shorter than need refuses, untouched (a few of them). */
static void check_refusals(int (*enc)(struct pb_writer *, const void *), const void *m, size_t need)
{
	size_t caps[] = { 0, 1, need / 2, need ? need - 1 : 0 };

	for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
		struct pb_writer w;

		if (caps[i] >= need)
			continue;
		pb_writer_init(&w, out, caps[i]);
		CHECK(enc(&w, m) == -1 && w.len == 0);
	}
}

static int enc_request(struct pb_writer *w, const void *m)
{
	return rls_request_encode(w, m);
}

static int enc_response(struct pb_writer *w, const void *m)
{
	return rls_response_encode(w, m);
}

static void check_request(const uint8_t *p, size_t len)
{
	static struct rls_descriptor d[ROOM], d2[ROOM];
	static struct rls_entry e[4 * ROOM], e2[4 * ROOM];
	struct rls_request rq = { .descriptors = d, .max_descriptors = ROOM, .entries = e,
				  .max_entries = 4 * ROOM };
	struct rls_request back = { .descriptors = d2, .max_descriptors = ROOM, .entries = e2,
				    .max_entries = 4 * ROOM };
	enum rls_err err = RLS_ERR_NONE;
	struct pb_writer w;

	if (rls_request_decode(p, len, &rq, &err) < 0) {
		CHECK(err_known(err));
		return;
	}
	CHECK(within(rq.domain, p, len) && rq.n_descriptors <= ROOM && rq.n_entries <= 4 * ROOM);
	for (size_t i = 0; i < rq.n_descriptors; i++) {
		CHECK(rq.descriptors[i].n_entries <= RLS_ENTRIES_MAX);
		for (size_t j = 0; j < rq.descriptors[i].n_entries; j++) {
			CHECK(within(rq.descriptors[i].entries[j].key, p, len));
			CHECK(within(rq.descriptors[i].entries[j].value, p, len));
			CHECK(pb_utf8_ok(rq.descriptors[i].entries[j].key.ptr,
					 rq.descriptors[i].entries[j].key.len));
		}
	}
	pb_writer_init(&w, out, sizeof(out));
	if (rls_request_encode(&w, &rq) < 0)
		return;
	CHECK(w.len <= len + 16 * rq.n_descriptors + 1);
	check_refusals(enc_request, &rq, w.len);
	CHECK(rls_request_decode(out, w.len, &back, &err) == 0);
	CHECK(same(back.domain, rq.domain) && back.hits_addend == rq.hits_addend);
	CHECK(back.n_descriptors == rq.n_descriptors && back.n_entries == rq.n_entries);
	for (size_t i = 0; i < rq.n_descriptors; i++) {
		const struct rls_descriptor *a = &rq.descriptors[i], *b = &back.descriptors[i];

		CHECK(a->n_entries == b->n_entries && a->has_limit == b->has_limit &&
		      a->has_hits_addend == b->has_hits_addend && a->hits_addend == b->hits_addend);
		if (a->has_limit)
			CHECK(a->limit_requests_per_unit == b->limit_requests_per_unit &&
			      a->limit_unit == b->limit_unit);
		for (size_t j = 0; j < a->n_entries; j++)
			CHECK(same(a->entries[j].key, b->entries[j].key) &&
			      same(a->entries[j].value, b->entries[j].value));
	}
}

static void check_response(const uint8_t *p, size_t len)
{
	static struct rls_status st[ROOM], st2[ROOM];
	static struct rls_header h[4][ROOM];
	struct rls_response rs = { .statuses = st, .max_statuses = ROOM,
				   .response_headers = h[0], .max_response_headers = ROOM,
				   .request_headers = h[1], .max_request_headers = ROOM };
	struct rls_response back = { .statuses = st2, .max_statuses = ROOM,
				     .response_headers = h[2], .max_response_headers = ROOM,
				     .request_headers = h[3], .max_request_headers = ROOM };
	enum rls_err err = RLS_ERR_NONE;
	struct pb_writer w;

	if (rls_response_decode(p, len, &rs, &err) < 0) {
		CHECK(err_known(err));
		return;
	}
	CHECK(within(rs.raw_body, p, len));
	pb_writer_init(&w, out, sizeof(out));
	if (rls_response_encode(&w, &rs) < 0)
		return;
	check_refusals(enc_response, &rs, w.len);
	CHECK(rls_response_decode(out, w.len, &back, &err) == 0);
	CHECK(back.overall_code == rs.overall_code && back.n_statuses == rs.n_statuses);
	CHECK(back.n_response_headers == rs.n_response_headers);
	CHECK(back.n_request_headers == rs.n_request_headers && same(back.raw_body, rs.raw_body));
	for (size_t i = 0; i < rs.n_statuses; i++) {
		const struct rls_status *a = &rs.statuses[i], *b = &back.statuses[i];

		CHECK(a->code == b->code && a->limit_remaining == b->limit_remaining);
		CHECK(a->has_current_limit == b->has_current_limit);
		CHECK(a->has_duration_until_reset == b->has_duration_until_reset);
		CHECK(a->reset_seconds == b->reset_seconds && a->reset_nanos == b->reset_nanos);
		CHECK(same(a->current_limit.name, b->current_limit.name));
		CHECK(a->current_limit.unit == b->current_limit.unit);
		CHECK(a->current_limit.requests_per_unit == b->current_limit.requests_per_unit);
	}
	for (size_t i = 0; i < rs.n_response_headers; i++)
		CHECK(same(rs.response_headers[i].key, back.response_headers[i].key) &&
		      same(rs.response_headers[i].value, back.response_headers[i].value));
}

static void check_health(const uint8_t *p, size_t len)
{
	struct pb_str svc, svc2;
	enum rls_err err = RLS_ERR_NONE;
	struct pb_writer w;
	int32_t st;

	if (rls_health_request_decode(p, len, &svc, &err) == 0) {
		CHECK(within(svc, p, len));
		pb_writer_init(&w, out, sizeof(out));
		CHECK(rls_health_request_encode(&w, svc) == 0);
		CHECK(rls_health_request_decode(out, w.len, &svc2, &err) == 0 && same(svc, svc2));
	} else {
		CHECK(err_known(err));
	}
	if (rls_health_response_decode(p, len, &st, &err) == 0) {
		int32_t st2;

		pb_writer_init(&w, out, sizeof(out));
		CHECK(rls_health_response_encode(&w, (enum rls_serving)st) == 0);
		CHECK(rls_health_response_decode(out, w.len, &st2, &err) == 0 && st2 == st);
	}
}

static void check_message(const uint8_t *p, size_t len)
{
	check_request(p, len);
	check_response(p, len);
	check_health(p, len);
}

static void check_headers(const uint8_t *p, size_t len)
{
	static char enc[3 * 4096], dec[4096];
	enum rls_err err = RLS_ERR_NONE;
	uint64_t us;
	size_t n, m;

	if (rls_grpc_timeout_parse((const char *)p, len, &us, &err) == 0)
		CHECK(len >= 2 && len <= 9 && us <= 99999999ull * 3600000000ull);
	else
		CHECK(err == RLS_ERR_TIMEOUT);
	if (len > sizeof(dec))
		len = sizeof(dec);
	n = rls_grpc_message_encode((const char *)p, len, enc, sizeof(enc));
	CHECK(n <= sizeof(enc));
	for (size_t i = 0; i < n; i++)
		CHECK(enc[i] >= 0x20 && enc[i] <= 0x7e);
	m = rls_grpc_message_decode(enc, n, dec, sizeof(dec));
	CHECK(m == len && memcmp(dec, p, len) == 0);
	/* a short buffer: a prefix of the same text */
	n = rls_grpc_message_encode((const char *)p, len, enc, 7);
	CHECK(n <= 7);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t at = 0;

	check_message(data, size);
	check_headers(data, size);
	/* a DATA stream of length-prefixed messages */
	while (at < size) {
		struct pb_str msg;
		enum rls_err err = RLS_ERR_NONE;
		int r = rls_grpc_frame_decode(data + at, size - at, 4096, &msg, &err);

		if (r <= 0) {
			CHECK(r == 0 || err_known(err));
			break;
		}
		CHECK((size_t)r == RLS_GRPC_PREFIX + msg.len && (size_t)r <= size - at);
		check_message((const uint8_t *)msg.ptr, msg.len);
		at += (size_t)r;
	}
	return 0;
}
