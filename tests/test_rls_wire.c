/*
 * test_rls_wire.c - the codec of Envoy's rate limit service (agent/pb_wire.c,
 * agent/rls_wire.c): messages as a real protobuf library writes and reads
 * them (Debian's python3-protobuf, through tests/lib/rls_pb.py, which builds
 * the messages from descriptors at run time: skipped where it is missing)
 * and hand-encoded from the proto definitions (always); every input whole,
 * its gRPC frame one byte at a time, every truncation, each placed right
 * before a PROT_NONE page so that a read one byte too far crashes the test;
 * hostile input (lying lengths, 11-byte varints, groups and unknown wire
 * types, known fields with another wire type, deep nesting, huge repeated
 * fields, invalid UTF-8); the encoders' refusals; gRPC's framing,
 * grpc-timeout, grpc-status and grpc-message.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/rls_wire.h"
#include "tests/lib/guard.h"

#define B(s) ((const uint8_t *)(s)), (sizeof(s) - 1)
/* A literal placed before the guard page, and its length. */
#define G(s) at_guard((s), sizeof(s) - 1), (sizeof(s) - 1)
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define PY "/usr/bin/python3"
#define PY_SCRIPT "tests/lib/rls_pb.py"

/* ---- guard page (tests/lib/guard.h) ---- */

#define at_guard guard_at

Test(guard, a_read_past_the_input_crashes, .signal = SIGSEGV)
{
	const volatile uint8_t *p = at_guard("ab", 2);

	signal(SIGSEGV, SIG_DFL);
	(void)p[2];
}

/* ---- helpers ---- */

static bool is(struct pb_str s, const char *lit)
{
	return s.len == strlen(lit) && memcmp(s.ptr, lit, s.len) == 0;
}

static struct pb_str S(const char *s)
{
	return (struct pb_str){ s, strlen(s) };
}

/* Room for a request's arrays. */
struct rq_room {
	struct rls_request rq;
	struct rls_descriptor d[RLS_DESCRIPTORS_MAX];
	struct rls_entry e[256];
};

static void rq_room_init(struct rq_room *r)
{
	memset(r, 0, sizeof(*r));
	r->rq.descriptors = r->d;
	r->rq.max_descriptors = NELEM(r->d);
	r->rq.entries = r->e;
	r->rq.max_entries = NELEM(r->e);
}

struct rs_room {
	struct rls_response rs;
	struct rls_status st[16];
	struct rls_header h1[16], h2[16];
};

static void rs_room_init(struct rs_room *r)
{
	memset(r, 0, sizeof(*r));
	r->rs.statuses = r->st;
	r->rs.max_statuses = NELEM(r->st);
	r->rs.response_headers = r->h1;
	r->rs.max_response_headers = NELEM(r->h1);
	r->rs.request_headers = r->h2;
	r->rs.max_request_headers = NELEM(r->h2);
}

/* Decodes raw[0..n) as a request, guarded. */
static int rq_decode(const uint8_t *raw, size_t n, struct rq_room *r, enum rls_err *err)
{
	*err = RLS_ERR_NONE;
	return rls_request_decode(at_guard(raw, n), n, &r->rq, err);
}

/* ---- python3-protobuf (tests/lib/rls_pb.py) ---- */

static bool py_ok(void)
{
	static int ok = -1;

	if (ok < 0)
		ok = system(PY " -c 'import google.protobuf' >/dev/null 2>&1") == 0 &&
		     access(PY_SCRIPT, R_OK) == 0;
	return ok;
}

#define NEED_PY()                                                                          \
	do {                                                                               \
		if (!py_ok())                                                              \
			cr_skip_test("no " PY " with python3-protobuf (scripts/deps.sh test)"); \
	} while (0)

/* Runs rls_pb.py WHAT MESSAGE 'ARG' and returns its output line (static). */
static const char *py(const char *what, const char *msg, const char *arg)
{
	static char out[1 << 20];
	char *cmd;
	size_t n;
	FILE *f;

	cr_assert(strchr(arg, '\'') == NULL);
	cr_assert(asprintf(&cmd, PY " " PY_SCRIPT " %s %s '%s'", what, msg, arg) > 0);
	f = popen(cmd, "r");
	cr_assert_not_null(f);
	n = fread(out, 1, sizeof(out) - 1, f);
	cr_assert_eq(pclose(f), 0, "%s failed", cmd);
	free(cmd);
	while (n && out[n - 1] == '\n')
		n--;
	out[n] = '\0';
	return out;
}

/* Python's bytes of a message given as JSON, into buf; returns the length. */
static size_t py_encode(const char *msg, const char *json, uint8_t *buf, size_t cap)
{
	const char *hex = py("encode", msg, json);
	size_t n = strlen(hex) / 2;

	cr_assert(n <= cap);
	for (size_t i = 0; i < n; i++) {
		unsigned b;
		cr_assert_eq(sscanf(hex + 2 * i, "%2x", &b), 1);
		buf[i] = (uint8_t)b;
	}
	return n;
}

/* Python's JSON of our bytes. */
static const char *py_decode(const char *msg, const uint8_t *p, size_t n)
{
	char *hex = malloc(2 * n + 1);
	static char copy[1 << 16];

	for (size_t i = 0; i < n; i++)
		sprintf(hex + 2 * i, "%02x", p[i]);
	hex[2 * n] = '\0';
	snprintf(copy, sizeof(copy), "%s", py("decode", msg, hex));
	free(hex);
	return copy;
}

/* ---- hand-encoded vectors, from the proto definitions ----
 *
 * domain "edge"; descriptor 1: (remote_address, 10.0.0.1), limit {5, MINUTE},
 * hits_addend UInt64Value {0}; descriptor 2: (path, /a), (method, GET);
 * request hits_addend 3. Byte for byte what python3-protobuf writes.
 */
static const char vec_request[] =
	"\x0a\x04" "edge"
	"\x12\x24"
	  "\x0a\x1a" "\x0a\x0e" "remote_address" "\x12\x08" "10.0.0.1"
	  "\x12\x04" "\x08\x05" "\x10\x02"
	  "\x1a\x00"
	"\x12\x1b"
	  "\x0a\x0a" "\x0a\x04" "path" "\x12\x02" "/a"
	  "\x0a\x0d" "\x0a\x06" "method" "\x12\x03" "GET"
	"\x18\x03";

static const char vec_request_json[] =
	"{\"domain\": \"edge\", \"hits_addend\": 3, \"descriptors\": ["
	"{\"entries\": [{\"key\": \"remote_address\", \"value\": \"10.0.0.1\"}],"
	" \"limit\": {\"requests_per_unit\": 5, \"unit\": \"MINUTE\"}, \"hits_addend\": 0},"
	"{\"entries\": [{\"key\": \"path\", \"value\": \"/a\"}, {\"key\": \"method\", \"value\": \"GET\"}]}]}";

static void check_vec_request(const struct rls_request *rq)
{
	cr_assert(is(rq->domain, "edge"));
	cr_assert_eq(rq->hits_addend, 3);
	cr_assert_eq(rq->n_descriptors, 2);
	cr_assert_eq(rq->n_entries, 3);
	cr_assert_eq(rq->descriptors[0].n_entries, 1);
	cr_assert(is(rq->descriptors[0].entries[0].key, "remote_address"));
	cr_assert(is(rq->descriptors[0].entries[0].value, "10.0.0.1"));
	cr_assert(rq->descriptors[0].has_limit);
	cr_assert_eq(rq->descriptors[0].limit_requests_per_unit, 5);
	cr_assert_eq(rq->descriptors[0].limit_unit, RLS_UNIT_MINUTE);
	cr_assert(rq->descriptors[0].has_hits_addend, "a UInt64Value of 0 is sent: check only");
	cr_assert_eq(rq->descriptors[0].hits_addend, 0);
	cr_assert_eq(rq->descriptors[1].n_entries, 2);
	cr_assert(is(rq->descriptors[1].entries[0].key, "path"));
	cr_assert(is(rq->descriptors[1].entries[1].value, "GET"));
	cr_assert(!rq->descriptors[1].has_limit);
	cr_assert(!rq->descriptors[1].has_hits_addend);
}

/* An OVER_LIMIT answer of two statuses, two headers each way, a body. */
static void vec_response(struct rs_room *r)
{
	rs_room_init(r);
	r->rs.overall_code = RLS_CODE_OVER_LIMIT;
	r->st[0] = (struct rls_status){ .code = RLS_CODE_OVER_LIMIT, .has_current_limit = true,
		.current_limit = { 10, RLS_UNIT_MINUTE, S("per_ip") }, .limit_remaining = 0,
		.has_duration_until_reset = true, .reset_seconds = 42, .reset_nanos = 5 };
	r->st[1] = (struct rls_status){ .code = RLS_CODE_OK, .has_current_limit = true,
		.current_limit = { 1000, RLS_UNIT_WEEK, S("") }, .limit_remaining = 999,
		.has_duration_until_reset = true, .reset_seconds = 0, .reset_nanos = 0 };
	r->rs.n_statuses = 2;
	r->h1[0] = (struct rls_header){ S("RateLimit-Policy"), S("\"ip\";q=10;w=60") };
	r->h1[1] = (struct rls_header){ S("Retry-After"), S("42") };
	r->rs.n_response_headers = 2;
	r->h2[0] = (struct rls_header){ S("x-ratelimit-decided"), S("spoa-ratelimit") };
	r->rs.n_request_headers = 1;
	r->rs.raw_body = S("{\"title\":\"Too Many Requests\"}");
}

static const char vec_response_json[] =
	"{\"overall_code\": \"OVER_LIMIT\", \"raw_body\": \"eyJ0aXRsZSI6IlRvbyBNYW55IFJlcXVlc3RzIn0=\", "
	"\"request_headers_to_add\": [{\"key\": \"x-ratelimit-decided\", \"value\": \"spoa-ratelimit\"}], "
	"\"response_headers_to_add\": [{\"key\": \"RateLimit-Policy\", \"value\": \"\\\"ip\\\";q=10;w=60\"}, "
	"{\"key\": \"Retry-After\", \"value\": \"42\"}], "
	"\"statuses\": [{\"code\": \"OVER_LIMIT\", \"current_limit\": {\"name\": \"per_ip\", "
	"\"requests_per_unit\": 10, \"unit\": \"MINUTE\"}, \"duration_until_reset\": \"42.000000005s\"}, "
	"{\"code\": \"OK\", \"current_limit\": {\"requests_per_unit\": 1000, \"unit\": \"WEEK\"}, "
	"\"duration_until_reset\": \"0s\", \"limit_remaining\": 999}]}";

/* ---- requests ---- */

Test(request, hand_vector_whole)
{
	struct rq_room r;
	enum rls_err err;

	rq_room_init(&r);
	cr_assert_eq(rq_decode(B(vec_request), &r, &err), 0, "%s", rls_err_str(err));
	check_vec_request(&r.rq);
}

Test(request, python_writes_the_hand_vector)
{
	uint8_t buf[512];
	size_t n;

	NEED_PY();
	n = py_encode("request", vec_request_json, buf, sizeof(buf));
	cr_assert_eq(n, sizeof(vec_request) - 1);
	cr_assert_eq(memcmp(buf, vec_request, n), 0);
}

/* What a client writes, as python3-protobuf writes it, decoded. */
Test(request, python_requests_decode)
{
	static const struct {
		const char *json;
		const char *domain;
		size_t nd, ne;
		uint32_t hits;
	} cases[] = {
		{ "{}", "", 0, 0, 0 },
		{ "{\"domain\": \"d\"}", "d", 0, 0, 0 },
		{ "{\"domain\": \"d\", \"descriptors\": [{\"entries\": [{\"key\": \"k\"}]}]}", "d", 1, 1, 0 },
		{ "{\"domain\": \"caf\\u00e9\", \"hits_addend\": 4294967295, \"descriptors\": ["
		  "{\"entries\": [{\"key\": \"a\", \"value\": \"\"}, {\"key\": \"b\", \"value\": \"\\u65e5\"}]},"
		  "{\"entries\": [{\"key\": \"c\", \"value\": \"x\"}], \"hits_addend\": 18446744073709551615},"
		  "{\"entries\": [{\"key\": \"c\", \"value\": \"x\"}], \"limit\": {\"unit\": \"YEAR\"}}]}",
		  "caf\xc3\xa9", 3, 4, 4294967295u },
	};
	uint8_t buf[1024];

	NEED_PY();
	for (size_t i = 0; i < NELEM(cases); i++) {
		struct rq_room r;
		enum rls_err err;
		size_t n = py_encode("request", cases[i].json, buf, sizeof(buf));

		rq_room_init(&r);
		cr_assert_eq(rq_decode(buf, n, &r, &err), 0, "case %zu: %s", i, rls_err_str(err));
		cr_assert(is(r.rq.domain, cases[i].domain), "case %zu", i);
		cr_assert_eq(r.rq.n_descriptors, cases[i].nd, "case %zu", i);
		cr_assert_eq(r.rq.n_entries, cases[i].ne, "case %zu", i);
		cr_assert_eq(r.rq.hits_addend, cases[i].hits, "case %zu", i);
	}
	/* the last case's details */
	{
		struct rq_room r;
		enum rls_err err;
		size_t n = py_encode("request", cases[3].json, buf, sizeof(buf));

		rq_room_init(&r);
		cr_assert_eq(rq_decode(buf, n, &r, &err), 0);
		cr_assert(is(r.rq.descriptors[0].entries[0].value, ""));
		cr_assert(is(r.rq.descriptors[0].entries[1].value, "\xe6\x97\xa5"));
		cr_assert(r.rq.descriptors[1].has_hits_addend);
		cr_assert_eq(r.rq.descriptors[1].hits_addend, UINT64_MAX);
		cr_assert(r.rq.descriptors[2].has_limit);
		cr_assert_eq(r.rq.descriptors[2].limit_requests_per_unit, 0);
		cr_assert_eq(r.rq.descriptors[2].limit_unit, RLS_UNIT_YEAR);
	}
}

/* Our encoder writes what python reads, byte for byte as python writes it. */
Test(request, encoded_as_python_encodes)
{
	struct rq_room r;
	struct pb_writer w;
	uint8_t out[512];
	enum rls_err err;

	rq_room_init(&r);
	cr_assert_eq(rq_decode(B(vec_request), &r, &err), 0);
	pb_writer_init(&w, out, sizeof(out));
	cr_assert_eq(rls_request_encode(&w, &r.rq), 0);
	cr_assert_eq(w.len, sizeof(vec_request) - 1);
	cr_assert_eq(memcmp(out, vec_request, w.len), 0);
}

/* Each prefix of a message: either a shorter valid message (cut between two
 * fields) or TRUNCATED; never a read past its end (the guard page). */
Test(request, truncated_at_every_byte)
{
	size_t n = sizeof(vec_request) - 1, whole = 0;

	for (size_t cut = 0; cut < n; cut++) {
		struct rq_room r;
		enum rls_err err;
		int rc;

		rq_room_init(&r);
		rc = rq_decode((const uint8_t *)vec_request, cut, &r, &err);
		if (rc == 0)
			whole++;
		else
			cr_assert_eq(err, RLS_ERR_TRUNCATED, "cut %zu: %s", cut, rls_err_str(err));
	}
	/* between the top-level fields only: 0, after domain, after each descriptor */
	cr_assert_eq(whole, 4);
}

/* The message framed, fed one byte at a time as DATA frames bring it. */
Test(request, framed_one_byte_at_a_time)
{
	uint8_t framed[512];
	size_t n = sizeof(vec_request) - 1, total = RLS_GRPC_PREFIX + n;
	struct pb_str msg;
	enum rls_err err = RLS_ERR_NONE;

	rls_grpc_frame_prefix(framed, (uint32_t)n);
	memcpy(framed + RLS_GRPC_PREFIX, vec_request, n);
	for (size_t have = 0; have < total; have++)
		cr_assert_eq(rls_grpc_frame_decode(at_guard(framed, have), have, 4096, &msg, &err), 0,
			     "have %zu", have);
	cr_assert_eq(rls_grpc_frame_decode(at_guard(framed, total), total, 4096, &msg, &err),
		     (int)total);
	cr_assert_eq(msg.len, n);
	{
		struct rq_room r;

		rq_room_init(&r);
		cr_assert_eq(rls_request_decode((const uint8_t *)msg.ptr, msg.len, &r.rq, &err), 0);
		check_vec_request(&r.rq);
	}
}

/* As protobuf reads it: fields in any order, unknown fields of every wire
 * type skipped, a known field with another wire type skipped, scalars
 * last-wins, messages merged, uint32 truncated to 32 bits. */
Test(request, read_as_protobuf_reads)
{
	static const char in[] =
		"\x18\x07"                                   /* hits_addend 7 ... */
		"\x08\x96\x01"                               /* 1 as a varint: skipped */
		"\x0a\x01" "a"                               /* domain "a" ... */
		"\x79" "\x01\x02\x03\x04\x05\x06\x07\x08"    /* 15, I64: unknown */
		"\x7d" "\x01\x02\x03\x04"                    /* 15, I32: unknown */
		"\x7a\x03" "xyz"                             /* 15, LEN: unknown */
		"\xf8\xff\xff\xff\x0f\x01"                   /* field 2^29-1, varint */
		"\x12\x10"
		  "\x12\x02" "\x08\x05"                      /* limit {5} */
		  "\x12\x02" "\x10\x03"                      /* limit {unit HOUR}: merged */
		  "\x1a\x02" "\x08\x09"                      /* hits_addend {9} */
		  "\x1a\x00"                                 /* hits_addend {}: merged, 9 */
		  "\x0a\x00"                                 /* an empty entry */
		"\x0a\x01" "b"                               /* ... domain "b" */
		"\x18\x85\x80\x80\x80\x10";                  /* ... hits_addend 2^32 + 5: 5 */
	struct rq_room r;
	enum rls_err err;

	rq_room_init(&r);
	cr_assert_eq(rq_decode(B(in), &r, &err), 0, "%s", rls_err_str(err));
	cr_assert(is(r.rq.domain, "b"));
	cr_assert_eq(r.rq.hits_addend, 5);
	cr_assert_eq(r.rq.n_descriptors, 1);
	cr_assert(r.rq.descriptors[0].has_limit);
	cr_assert_eq(r.rq.descriptors[0].limit_requests_per_unit, 5);
	cr_assert_eq(r.rq.descriptors[0].limit_unit, RLS_UNIT_HOUR);
	cr_assert_eq(r.rq.descriptors[0].hits_addend, 9);
	cr_assert_eq(r.rq.descriptors[0].n_entries, 1);
	cr_assert(is(r.rq.descriptors[0].entries[0].key, ""));
}

Test(request, negative_enum_as_ten_bytes)
{
	/* limit {unit -1}: an int32 enum goes sign-extended to 64 bits */
	static const char in[] = "\x12\x0d" "\x12\x0b" "\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01";
	struct rq_room r;
	struct pb_writer w;
	uint8_t out[64];
	enum rls_err err;

	rq_room_init(&r);
	cr_assert_eq(rq_decode(B(in), &r, &err), 0, "%s", rls_err_str(err));
	cr_assert_eq(r.rq.descriptors[0].limit_unit, -1);
	pb_writer_init(&w, out, sizeof(out));
	cr_assert_eq(rls_request_encode(&w, &r.rq), 0);
	cr_assert_eq(w.len, sizeof(in) - 1);
	cr_assert_eq(memcmp(out, in, w.len), 0);
}

/* ---- hostile requests ---- */

static enum rls_err rq_refused(const uint8_t *p, size_t n)
{
	struct rq_room r;
	enum rls_err err;

	rq_room_init(&r);
	cr_assert_eq(rq_decode(p, n, &r, &err), -1);
	return err;
}

Test(hostile, lying_lengths)
{
	/* domain of 5 bytes with 4 left; a descriptor longer than the message;
	 * an entry longer than its descriptor; a length of 2^63 */
	cr_assert_eq(rq_refused(B("\x0a\x05" "edge")), RLS_ERR_TRUNCATED);
	cr_assert_eq(rq_refused(B("\x12\x10" "\x0a\x02" "\x0a\x00")), RLS_ERR_TRUNCATED);
	cr_assert_eq(rq_refused(B("\x12\x04" "\x0a\x05" "\x0a\x00")), RLS_ERR_TRUNCATED);
	cr_assert_eq(rq_refused(B("\x0a\xff\xff\xff\xff\xff\xff\xff\xff\x7f" "x")), RLS_ERR_TRUNCATED);
	cr_assert_eq(rq_refused(B("\x0a")), RLS_ERR_TRUNCATED);
	cr_assert_eq(rq_refused(B("\x79" "\x01\x02")), RLS_ERR_TRUNCATED);
	cr_assert_eq(rq_refused(B("\x7d" "\x01\x02\x03")), RLS_ERR_TRUNCATED);
}

Test(hostile, long_varints)
{
	/* 11 bytes; 10 with the last over 1 (65 bits); a tag of 11 bytes */
	cr_assert_eq(rq_refused(B("\x18\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01")), RLS_ERR_VARINT);
	cr_assert_eq(rq_refused(B("\x18\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02")), RLS_ERR_VARINT);
	cr_assert_eq(rq_refused(B("\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01")), RLS_ERR_VARINT);
	cr_assert_eq(rq_refused(B("\x18\x80\x80")), RLS_ERR_TRUNCATED);
	/* 10 bytes, the last 1: 2^63, fine (an over-long 0 too) */
	{
		struct rq_room r;
		enum rls_err err;

		rq_room_init(&r);
		cr_assert_eq(rq_decode(B("\x18\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01"), &r, &err), 0);
		cr_assert_eq(rq_decode(B("\x18\x80\x80\x80\x00"), &r, &err), 0);
	}
}

Test(hostile, field_numbers_and_wire_types)
{
	cr_assert_eq(rq_refused(B("\x00\x00")), RLS_ERR_FIELD);           /* field 0 */
	cr_assert_eq(rq_refused(B("\x02\x00")), RLS_ERR_FIELD);           /* field 0, LEN */
	cr_assert_eq(rq_refused(B("\x80\x80\x80\x80\x10\x00")), RLS_ERR_FIELD); /* 2^29 */
	cr_assert_eq(rq_refused(B("\x0b\x0c")), RLS_ERR_WIRE_TYPE);       /* group start */
	cr_assert_eq(rq_refused(B("\x0c")), RLS_ERR_WIRE_TYPE);           /* group end */
	cr_assert_eq(rq_refused(B("\x0e\x00")), RLS_ERR_WIRE_TYPE);       /* type 6 */
	cr_assert_eq(rq_refused(B("\x0f\x00")), RLS_ERR_WIRE_TYPE);       /* type 7 */
	/* inside a descriptor and inside an entry too */
	cr_assert_eq(rq_refused(B("\x12\x01" "\x0b")), RLS_ERR_WIRE_TYPE);
	cr_assert_eq(rq_refused(B("\x12\x03" "\x0a\x01" "\x0e")), RLS_ERR_WIRE_TYPE);
}

/* Known fields with the wrong wire type are skipped, as protobuf does: the
 * value they would have had stays. */
Test(hostile, wrong_wire_types_skipped)
{
	static const char in[] =
		"\x0a\x01" "d"
		"\x08\x01"                        /* domain as a varint */
		"\x1d" "\x01\x00\x00\x00"         /* hits_addend as I32 */
		"\x10\x05"                        /* descriptors as a varint */
		"\x12\x06" "\x08\x01" "\x11" "\x00\x00\x00"; /* entries as a varint; limit as I64: truncated */
	struct rq_room r;
	enum rls_err err;

	rq_room_init(&r);
	cr_assert_eq(rq_decode(B(in), &r, &err), -1);
	cr_assert_eq(err, RLS_ERR_TRUNCATED);
	cr_assert_eq(rq_decode((const uint8_t *)in, sizeof(in) - 1 - 8, &r, &err), 0,
		     "%s", rls_err_str(err));
	cr_assert(is(r.rq.domain, "d"));
	cr_assert_eq(r.rq.hits_addend, 0);
	cr_assert_eq(r.rq.n_descriptors, 0);
}

/* An unknown field holding a message nested 100,000 deep is skipped whole:
 * the decoder reads the schema's depth, never the input's. */
Test(hostile, deep_nesting_skipped)
{
	size_t depth = 100000, n = 0;
	uint8_t *buf = malloc(depth * 6 + 16);
	struct rq_room r;
	enum rls_err err;

	cr_assert(buf);
	/* innermost first: field 15 LEN { field 15 LEN { ... } }, built backwards */
	size_t end = depth * 6 + 16, at = end;
	for (size_t i = 0; i < depth; i++) {
		size_t inner = end - at;
		uint8_t hdr[8];
		size_t h = 0;
		uint64_t v = inner;

		hdr[h++] = 0x7a;
		while (v >= 0x80) {
			hdr[h++] = (uint8_t)(v | 0x80);
			v >>= 7;
		}
		hdr[h++] = (uint8_t)v;
		at -= h;
		memcpy(buf + at, hdr, h);
	}
	n = end - at;
	memmove(buf, buf + at, n);
	memcpy(buf + n, "\x0a\x01" "z", 3);
	n += 3;
	rq_room_init(&r);
	cr_assert_eq(rq_decode(buf, n, &r, &err), 0, "%s", rls_err_str(err));
	cr_assert(is(r.rq.domain, "z"));
	free(buf);
}

Test(hostile, huge_repeated_fields)
{
	/* 200,000 empty descriptors: refused at the room's end */
	size_t n = 200000 * 2;
	uint8_t *buf = malloc(n);
	struct rq_room r;
	enum rls_err err;

	for (size_t i = 0; i < n; i += 2)
		buf[i] = 0x12, buf[i + 1] = 0;
	rq_room_init(&r);
	cr_assert_eq(rq_decode(buf, n, &r, &err), -1);
	cr_assert_eq(err, RLS_ERR_DESCRIPTORS);
	cr_assert_eq(rls_err_status(err), RLS_GRPC_RESOURCE_EXHAUSTED);
	/* exactly the room: fine */
	cr_assert_eq(rq_decode(buf, 2 * RLS_DESCRIPTORS_MAX, &r, &err), 0);
	cr_assert_eq(r.rq.n_descriptors, RLS_DESCRIPTORS_MAX);
	/* one descriptor of RLS_ENTRIES_MAX + 1 empty entries */
	buf[0] = 0x12, buf[1] = (uint8_t)(2 * (RLS_ENTRIES_MAX + 1));
	for (size_t i = 0; i <= RLS_ENTRIES_MAX; i++)
		buf[2 + 2 * i] = 0x0a, buf[3 + 2 * i] = 0;
	cr_assert_eq(rq_decode(buf, 2 + 2 * (RLS_ENTRIES_MAX + 1), &r, &err), -1);
	cr_assert_eq(err, RLS_ERR_ENTRIES);
	buf[1] = (uint8_t)(2 * RLS_ENTRIES_MAX);
	cr_assert_eq(rq_decode(buf, 2 + 2 * RLS_ENTRIES_MAX, &r, &err), 0);
	cr_assert_eq(r.rq.descriptors[0].n_entries, RLS_ENTRIES_MAX);
	/* the entries' room shared by every descriptor: 10 descriptors of 30
	 * entries overflow 256 */
	{
		size_t o = 0;

		for (int d = 0; d < 10; d++) {
			buf[o++] = 0x12, buf[o++] = 60;
			for (int e = 0; e < 30; e++)
				buf[o++] = 0x0a, buf[o++] = 0;
		}
		cr_assert_eq(rq_decode(buf, o, &r, &err), -1);
		cr_assert_eq(err, RLS_ERR_ENTRIES);
	}
	free(buf);
}

Test(hostile, strings)
{
	uint8_t buf[RLS_STR_MAX + 16];
	struct rq_room r;
	enum rls_err err;

	/* a domain of RLS_STR_MAX bytes, then one more */
	buf[0] = 0x0a, buf[1] = 0x80, buf[2] = 0x80, buf[3] = 0x01;
	memset(buf + 4, 'a', RLS_STR_MAX);
	rq_room_init(&r);
	cr_assert_eq(rq_decode(buf, 4 + RLS_STR_MAX, &r, &err), 0);
	cr_assert_eq(r.rq.domain.len, RLS_STR_MAX);
	buf[1] = 0x81;
	memset(buf + 4, 'a', RLS_STR_MAX + 1);
	cr_assert_eq(rq_decode(buf, 5 + RLS_STR_MAX, &r, &err), -1);
	cr_assert_eq(err, RLS_ERR_STRING);
	/* invalid UTF-8: a lone continuation byte, an overlong '/', a surrogate,
	 * over U+10FFFF, a cut sequence; in a key and a value too */
	cr_assert_eq(rq_refused(B("\x0a\x01" "\x80")), RLS_ERR_UTF8);
	cr_assert_eq(rq_refused(B("\x0a\x02" "\xc0\xaf")), RLS_ERR_UTF8);
	cr_assert_eq(rq_refused(B("\x0a\x03" "\xed\xa0\x80")), RLS_ERR_UTF8);
	cr_assert_eq(rq_refused(B("\x0a\x04" "\xf4\x90\x80\x80")), RLS_ERR_UTF8);
	cr_assert_eq(rq_refused(B("\x0a\x02" "\xe6\x97")), RLS_ERR_UTF8);
	cr_assert_eq(rq_refused(B("\x12\x05" "\x0a\x03" "\x0a\x01" "\xff")), RLS_ERR_UTF8);
	cr_assert_eq(rq_refused(B("\x12\x05" "\x0a\x03" "\x12\x01" "\xfe")), RLS_ERR_UTF8);
	/* valid: every length of sequence, NUL included (proto3 allows it) */
	rq_room_init(&r);
	cr_assert_eq(rq_decode(B("\x0a\x0b" "\x00" "\xc3\xa9" "\xe6\x97\xa5" "\xf0\x9f\x98\x80" "z"),
			       &r, &err), 0);
	cr_assert_eq(r.rq.domain.len, 11);
}

/* ---- responses ---- */

Test(response, python_reads_what_we_write)
{
	struct rs_room r;
	struct pb_writer w;
	uint8_t out[1024];

	NEED_PY();
	vec_response(&r);
	pb_writer_init(&w, out, sizeof(out));
	cr_assert_eq(rls_response_encode(&w, &r.rs), 0);
	cr_assert_str_eq(py_decode("response", out, w.len), vec_response_json);
}

Test(response, we_write_what_python_writes)
{
	struct rs_room r;
	struct pb_writer w;
	uint8_t out[1024], ref[1024];
	size_t n;

	NEED_PY();
	vec_response(&r);
	pb_writer_init(&w, out, sizeof(out));
	cr_assert_eq(rls_response_encode(&w, &r.rs), 0);
	n = py_encode("response", vec_response_json, ref, sizeof(ref));
	cr_assert_eq(w.len, n);
	cr_assert_eq(memcmp(out, ref, n), 0);
}

Test(response, round_trip_whole_and_truncated)
{
	struct rs_room r, back;
	struct pb_writer w;
	uint8_t out[1024];
	enum rls_err err = RLS_ERR_NONE;

	vec_response(&r);
	pb_writer_init(&w, out, sizeof(out));
	cr_assert_eq(rls_response_encode(&w, &r.rs), 0);
	rs_room_init(&back);
	cr_assert_eq(rls_response_decode(at_guard(out, w.len), w.len, &back.rs, &err), 0);
	cr_assert_eq(back.rs.overall_code, RLS_CODE_OVER_LIMIT);
	cr_assert_eq(back.rs.n_statuses, 2);
	cr_assert(is(back.st[0].current_limit.name, "per_ip"));
	cr_assert_eq(back.st[0].reset_seconds, 42);
	cr_assert_eq(back.st[0].reset_nanos, 5);
	cr_assert_eq(back.st[1].current_limit.unit, RLS_UNIT_WEEK);
	cr_assert_eq(back.st[1].limit_remaining, 999);
	cr_assert(back.st[1].has_duration_until_reset);
	cr_assert_eq(back.rs.n_response_headers, 2);
	cr_assert(is(back.h1[1].key, "Retry-After"));
	cr_assert_eq(back.rs.n_request_headers, 1);
	cr_assert(is(back.rs.raw_body, "{\"title\":\"Too Many Requests\"}"));
	for (size_t cut = 0; cut < w.len; cut++) {
		int rc = rls_response_decode(at_guard(out, cut), cut, &back.rs, &err);
		cr_assert(rc == 0 || err == RLS_ERR_TRUNCATED, "cut %zu: %s", cut, rls_err_str(err));
	}
	/* room for one status only */
	back.rs.max_statuses = 1;
	cr_assert_eq(rls_response_decode(out, w.len, &back.rs, &err), -1);
	cr_assert_eq(err, RLS_ERR_STATUSES);
	back.rs.max_statuses = 16;
	back.rs.max_response_headers = 1;
	cr_assert_eq(rls_response_decode(out, w.len, &back.rs, &err), -1);
	cr_assert_eq(err, RLS_ERR_HEADERS);
}

/* An encoder that does not fit leaves the writer as it was, at every
 * capacity short of the message. */
Test(response, full_writer_untouched)
{
	struct rs_room r;
	struct rq_room q;
	struct pb_writer w;
	uint8_t out[1024];
	size_t need;
	enum rls_err err;

	vec_response(&r);
	pb_writer_init(&w, out, sizeof(out));
	cr_assert_eq(rls_response_encode(&w, &r.rs), 0);
	need = w.len;
	for (size_t cap = 0; cap < need; cap++) {
		pb_writer_init(&w, out, cap);
		cr_assert_eq(rls_response_encode(&w, &r.rs), -1, "cap %zu", cap);
		cr_assert_eq(w.len, 0, "cap %zu", cap);
	}
	/* behind earlier bytes: back to them */
	pb_writer_init(&w, out, need + 1);
	cr_assert_eq(pb_put_tag_varint(&w, 9, 1), 0);
	cr_assert_eq(rls_response_encode(&w, &r.rs), -1);
	cr_assert_eq(w.len, 2);
	pb_writer_init(&w, out, need);
	cr_assert_eq(rls_response_encode(&w, &r.rs), 0);
	cr_assert_eq(w.len, need);

	rq_room_init(&q);
	cr_assert_eq(rq_decode(B(vec_request), &q, &err), 0);
	for (size_t cap = 0; cap < sizeof(vec_request) - 1; cap++) {
		pb_writer_init(&w, out, cap);
		cr_assert_eq(rls_request_encode(&w, &q.rq), -1);
		cr_assert_eq(w.len, 0);
	}
}

/* An OK answer with nothing but its code: 2 bytes; an empty status list
 * element still goes out (one status per descriptor). */
Test(response, defaults_left_out)
{
	struct rs_room r;
	struct pb_writer w;
	uint8_t out[64];

	rs_room_init(&r);
	r.rs.overall_code = RLS_CODE_OK;
	r.rs.n_statuses = 1;
	pb_writer_init(&w, out, sizeof(out));
	cr_assert_eq(rls_response_encode(&w, &r.rs), 0);
	cr_assert_eq(w.len, 4);
	cr_assert_eq(memcmp(out, "\x08\x01\x12\x00", 4), 0);
}

/* ---- health ---- */

Test(health, request_and_response)
{
	struct pb_writer w;
	uint8_t out[64];
	struct pb_str svc;
	int32_t st;
	enum rls_err err;

	cr_assert_eq(rls_health_request_decode(at_guard("", 0), 0, &svc, &err), 0);
	cr_assert_eq(svc.len, 0);
	cr_assert_eq(rls_health_request_decode(G("\x0a\x03" "abc"), &svc, &err), 0);
	cr_assert(is(svc, "abc"));
	cr_assert_eq(rls_health_request_decode(G("\x0a\x04" "abc"), &svc, &err), -1);
	pb_writer_init(&w, out, sizeof(out));
	cr_assert_eq(rls_health_response_encode(&w, RLS_SERVING), 0);
	cr_assert_eq(w.len, 2);
	cr_assert_eq(memcmp(out, "\x08\x01", 2), 0);
	cr_assert_eq(rls_health_response_decode(out, w.len, &st, &err), 0);
	cr_assert_eq(st, RLS_SERVING);
	pb_writer_init(&w, out, sizeof(out));
	cr_assert_eq(rls_health_request_encode(&w, S("envoy.service.ratelimit.v3.RateLimitService")), 0);
	cr_assert_eq(rls_health_request_decode(out, w.len, &svc, &err), 0);
	cr_assert(is(svc, "envoy.service.ratelimit.v3.RateLimitService"));
}

Test(health, as_python_writes_and_reads)
{
	uint8_t buf[128], out[16];
	struct pb_writer w;
	struct pb_str svc;
	enum rls_err err;
	size_t n;

	NEED_PY();
	n = py_encode("health_request", "{\"service\": \"grpc.health.v1.Health\"}", buf, sizeof(buf));
	cr_assert_eq(rls_health_request_decode(buf, n, &svc, &err), 0);
	cr_assert(is(svc, "grpc.health.v1.Health"));
	pb_writer_init(&w, out, sizeof(out));
	cr_assert_eq(rls_health_response_encode(&w, RLS_NOT_SERVING), 0);
	cr_assert_str_eq(py_decode("health_response", out, w.len), "{\"status\": \"NOT_SERVING\"}");
	/* SERVICE_UNKNOWN; UNKNOWN (0) is the empty message */
	pb_writer_init(&w, out, sizeof(out));
	cr_assert_eq(rls_health_response_encode(&w, RLS_SERVICE_UNKNOWN), 0);
	cr_assert_str_eq(py_decode("health_response", out, w.len), "{\"status\": \"SERVICE_UNKNOWN\"}");
	pb_writer_init(&w, out, sizeof(out));
	cr_assert_eq(rls_health_response_encode(&w, RLS_SERVING_UNKNOWN), 0);
	cr_assert_eq(w.len, 0);
}

/* ---- gRPC framing and headers ---- */

Test(grpc, frames)
{
	struct pb_str msg;
	enum rls_err err = RLS_ERR_NONE;
	uint8_t p[RLS_GRPC_PREFIX];

	/* an empty message */
	cr_assert_eq(rls_grpc_frame_decode(G("\0\0\0\0\0"), 64, &msg, &err), 5);
	cr_assert_eq(msg.len, 0);
	/* two in a row: the first only */
	cr_assert_eq(rls_grpc_frame_decode(G("\0\0\0\0\1" "x" "\0\0\0\0\0"), 64, &msg, &err),
		     6);
	cr_assert(is(msg, "x"));
	/* compressed, flags over 1: refused at the first byte */
	cr_assert_eq(rls_grpc_frame_decode(G("\1"), 64, &msg, &err), -1);
	cr_assert_eq(err, RLS_ERR_COMPRESSED);
	cr_assert_eq(rls_err_status(err), RLS_GRPC_UNIMPLEMENTED);
	cr_assert_eq(rls_grpc_frame_decode(G("\x80\0\0\0\0"), 64, &msg, &err), -1);
	cr_assert_eq(err, RLS_ERR_FLAG);
	/* too big: refused once the prefix is there, before its body */
	cr_assert_eq(rls_grpc_frame_decode(G("\0\0\0\0\x41"), 64, &msg, &err), -1);
	cr_assert_eq(err, RLS_ERR_TOO_BIG);
	cr_assert_eq(rls_grpc_frame_decode(G("\0\xff\xff\xff\xff"), SIZE_MAX, &msg, &err), -1);
	cr_assert_eq(err, RLS_ERR_TOO_BIG);
	cr_assert_eq(rls_grpc_frame_decode(G("\0\0\0\0\x40"), 64, &msg, &err), 0);
	rls_grpc_frame_prefix(p, 0x01020304);
	cr_assert_eq(memcmp(p, "\0\1\2\3\4", 5), 0);
}

Test(grpc, timeouts)
{
	static const struct {
		const char *s;
		uint64_t us;
	} ok[] = {
		{ "100m", 100000 }, { "2S", 2000000 }, { "1M", 60000000 }, { "1H", 3600000000u },
		{ "250u", 250 }, { "1n", 1 }, { "1000n", 1 }, { "1001n", 2 }, { "0m", 0 },
		{ "00000001S", 1000000 }, { "99999999H", 99999999ull * 3600000000ull },
	};
	static const char *const bad[] = {
		"", "m", "S", "100", "123456789S", "10s", "-1S", "1.5S", "10 S", " 10S", "10SS",
		"10h", "0x10S", "\xff" "S",
	};
	enum rls_err err;
	uint64_t us;

	for (size_t i = 0; i < NELEM(ok); i++) {
		const char *s = (const char *)at_guard(ok[i].s, strlen(ok[i].s));

		cr_assert_eq(rls_grpc_timeout_parse(s, strlen(ok[i].s), &us, &err), 0, "%s", ok[i].s);
		cr_assert_eq(us, ok[i].us, "%s", ok[i].s);
	}
	for (size_t i = 0; i < NELEM(bad); i++) {
		const char *s = (const char *)at_guard(bad[i], strlen(bad[i]));

		err = RLS_ERR_NONE;
		cr_assert_eq(rls_grpc_timeout_parse(s, strlen(bad[i]), &us, &err), -1, "%s", bad[i]);
		cr_assert_eq(err, RLS_ERR_TIMEOUT);
	}
}

Test(grpc, status_and_message)
{
	char out[64], back[64];
	size_t n;

	n = rls_grpc_status_text(RLS_GRPC_OK, out);
	cr_assert(n == 1 && out[0] == '0');
	n = rls_grpc_status_text(RLS_GRPC_UNAUTHENTICATED, out);
	cr_assert(n == 2 && memcmp(out, "16", 2) == 0);
	cr_assert_str_eq(rls_grpc_status_name(RLS_GRPC_RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
	cr_assert_str_eq(rls_grpc_status_name((enum rls_grpc_status)99), "UNKNOWN");
	cr_assert_eq(rls_err_status(RLS_ERR_TRUNCATED), RLS_GRPC_INTERNAL);
	cr_assert_str_eq(rls_err_str((enum rls_err)999), "unknown error");

	n = rls_grpc_message_encode("a%b\ncaf\xc3\xa9 ~", 11, out, sizeof(out));
	out[n] = '\0';
	cr_assert_str_eq(out, "a%25b%0Acaf%C3%A9 ~");
	n = rls_grpc_message_decode(out, n, back, sizeof(back));
	cr_assert_eq(n, 11);
	cr_assert_eq(memcmp(back, "a%b\ncaf\xc3\xa9 ~", 11), 0);
	/* cut before an escape that does not fit */
	n = rls_grpc_message_encode("ab\n", 3, out, 4);
	cr_assert_eq(n, 2);
	/* a '%' without two hex digits stays */
	n = rls_grpc_message_decode("100%%zz%4", 9, back, sizeof(back));
	cr_assert_eq(n, 9);
	cr_assert_eq(memcmp(back, "100%%zz%4", 9), 0);
}

/* ---- the wire format alone ---- */

Test(pb, varint_sizes_and_round_trip)
{
	static const uint64_t vals[] = { 0, 1, 127, 128, 16383, 16384, UINT32_MAX,
					 (uint64_t)1 << 63, UINT64_MAX };
	uint8_t out[16];

	for (size_t i = 0; i < NELEM(vals); i++) {
		struct pb_writer w;
		struct pb_reader r;
		enum pb_err err;
		uint64_t v = 0;

		pb_writer_init(&w, out, sizeof(out));
		cr_assert_eq(pb_put_varint(&w, vals[i]), 0);
		cr_assert_eq(w.len, pb_size_varint(vals[i]));
		pb_reader_init(&r, at_guard(out, w.len), w.len);
		cr_assert_eq(pb_read_varint(&r, &v, &err), 0);
		cr_assert_eq(v, vals[i]);
		cr_assert(pb_reader_done(&r));
		/* every shorter writer refuses it, untouched */
		for (size_t cap = 0; cap < w.len; cap++) {
			struct pb_writer s;

			pb_writer_init(&s, out, cap);
			cr_assert_eq(pb_put_varint(&s, vals[i]), -1);
			cr_assert_eq(s.len, 0);
		}
	}
	cr_assert_eq(pb_size_varint(UINT64_MAX), PB_VARINT_MAX);
	cr_assert_str_eq(pb_err_str(PB_ERR_VARINT), "varint over 10 bytes or over 64 bits");
}
