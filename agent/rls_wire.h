/*
 * rls_wire.h - a pure codec of Envoy's rate limit service
 * (envoy.service.ratelimit.v3, docs/ENVOY.md): RateLimitRequest and
 * RateLimitResponse with the messages inside them, grpc.health.v1's
 * HealthCheckRequest and HealthCheckResponse, gRPC's message framing, the
 * grpc-timeout header and the grpc-status / grpc-message values.
 *
 * Pure, as spop/ (docs/STYLE.md, rule 2): no allocation, no I/O, no clock,
 * no logging; it includes nothing of ours but agent/pb_wire.h (the wire
 * format). Decoded strings are views into the input; arrays belong to the
 * caller, who gives each its capacity (max_*); overflowing one is an
 * error. A message decoder works on one whole message (a gRPC frame
 * carries it whole): it returns 0 or -1 with an enum rls_err, never "need
 * more". The frame decoder reads a stream: bytes consumed, 0 for need
 * more, -1. Encoders append to a struct pb_writer and, when the message
 * does not fit, leave it as it was and return -1.
 *
 * As protobuf itself reads a message (C++ and Go, which envoyproxy/ratelimit
 * is written in): fields in any order; a field number this codec does not
 * know, or a known one with another wire type, is skipped; a scalar or
 * string given twice keeps the last, a message given twice (a
 * descriptor's `limit`, its `hits_addend`) is merged; every `string` must
 * be valid UTF-8. Field numbers are data-plane-api's (84e8436):
 *
 *   RateLimitRequest        1 domain (string), 2 descriptors (repeated
 *                           RateLimitDescriptor), 3 hits_addend (uint32)
 *   RateLimitDescriptor     1 entries (repeated Entry {1 key, 2 value}),
 *                           2 limit (RateLimitOverride {1 requests_per_unit
 *                           uint32, 2 unit enum}), 3 hits_addend
 *                           (google.protobuf.UInt64Value {1 value uint64})
 *   RateLimitResponse       1 overall_code (enum), 2 statuses (repeated
 *                           DescriptorStatus), 3 response_headers_to_add,
 *                           4 request_headers_to_add (repeated HeaderValue
 *                           {1 key, 2 value}), 5 raw_body (bytes),
 *                           6 dynamic_metadata, 7 quota (skipped)
 *   DescriptorStatus        1 code (enum), 2 current_limit (RateLimit {1
 *                           requests_per_unit uint32, 2 unit enum, 3 name}),
 *                           3 limit_remaining (uint32), 4 duration_until_reset
 *                           (google.protobuf.Duration {1 seconds int64,
 *                           2 nanos int32}), 5 quota (skipped)
 *   HealthCheckRequest      1 service (string)
 *   HealthCheckResponse     1 status (enum ServingStatus)
 */
#ifndef RLS_WIRE_H
#define RLS_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/pb_wire.h"

#define RLS_DESCRIPTORS_MAX   64u      /* a front's room: descriptors per request */
#define RLS_ENTRIES_MAX       32u      /* entries per descriptor (any room) */
#define RLS_STR_MAX           16384u   /* bytes of a domain, key, value (HeaderValue's bound) */
#define RLS_GRPC_PREFIX       5u       /* a gRPC message's prefix: flag + length */
#define RLS_GRPC_TIMEOUT_MAX  10u      /* bytes of a grpc-timeout value: 8 digits + unit */

/* gRPC status codes (grpc/doc/statuscodes.md): NAME, value. */
#define RLS_GRPC_STATUSES(X)                                                      \
	X(OK, 0) X(CANCELLED, 1) X(UNKNOWN, 2) X(INVALID_ARGUMENT, 3)             \
	X(DEADLINE_EXCEEDED, 4) X(NOT_FOUND, 5) X(ALREADY_EXISTS, 6)              \
	X(PERMISSION_DENIED, 7) X(RESOURCE_EXHAUSTED, 8)                          \
	X(FAILED_PRECONDITION, 9) X(ABORTED, 10) X(OUT_OF_RANGE, 11)              \
	X(UNIMPLEMENTED, 12) X(INTERNAL, 13) X(UNAVAILABLE, 14) X(DATA_LOSS, 15)  \
	X(UNAUTHENTICATED, 16)

enum rls_grpc_status {
#define X(name, v) RLS_GRPC_##name = v,
	RLS_GRPC_STATUSES(X)
#undef X
	RLS_GRPC_STATUS_COUNT
};

/* Errors: NAME, the gRPC status a server answers with, text. The first
 * ones are the wire format's (enum pb_err, same values: a pb_err is an
 * rls_err); gRPC's own servers answer INTERNAL to a request they cannot
 * unmarshal, RESOURCE_EXHAUSTED to one over their bounds. */
#define RLS_WIRE_ERRORS(X)                                                                 \
	X(NONE,        OK,                 "no error")                                     \
	X(TRUNCATED,   INTERNAL,           "a field runs past the end of its message")     \
	X(VARINT,      INTERNAL,           "varint over 10 bytes or over 64 bits")         \
	X(FIELD,       INTERNAL,           "field number 0 or over 2^29-1")                \
	X(WIRE_TYPE,   INTERNAL,           "group or unknown wire type (6, 7)")            \
	X(FULL,        INTERNAL,           "the output buffer is full")                    \
	X(UTF8,        INTERNAL,           "a string field is not valid UTF-8")            \
	X(STRING,      RESOURCE_EXHAUSTED, "a domain, key or value over 16384 bytes")      \
	X(DESCRIPTORS, RESOURCE_EXHAUSTED, "more descriptors than the room given")         \
	X(ENTRIES,     RESOURCE_EXHAUSTED, "more descriptor entries than the room given")  \
	X(STATUSES,    RESOURCE_EXHAUSTED, "more statuses than the room given")            \
	X(HEADERS,     RESOURCE_EXHAUSTED, "more headers than the room given")             \
	X(COMPRESSED,  UNIMPLEMENTED,      "compressed gRPC message (no grpc-encoding is accepted)") \
	X(FLAG,        INTERNAL,           "gRPC message flag neither 0 nor 1")            \
	X(TOO_BIG,     RESOURCE_EXHAUSTED, "gRPC message larger than the maximum")         \
	X(TIMEOUT,     INTERNAL,           "grpc-timeout is not 1-8 digits and H, M, S, m, u or n")

enum rls_err {
#define X(name, status, text) RLS_ERR_##name,
	RLS_WIRE_ERRORS(X)
#undef X
	RLS_ERR_COUNT
};

/* RateLimitResponse.Code */
enum rls_code {
	RLS_CODE_UNKNOWN = 0,
	RLS_CODE_OK = 1,
	RLS_CODE_OVER_LIMIT = 2,
};

/* RateLimitResponse.RateLimit.Unit (the override's RateLimitUnit has the
 * same values, without WEEK). */
enum rls_unit {
	RLS_UNIT_UNKNOWN = 0,
	RLS_UNIT_SECOND = 1,
	RLS_UNIT_MINUTE = 2,
	RLS_UNIT_HOUR = 3,
	RLS_UNIT_DAY = 4,
	RLS_UNIT_MONTH = 5,
	RLS_UNIT_YEAR = 6,
	RLS_UNIT_WEEK = 7,
};

/* grpc.health.v1.HealthCheckResponse.ServingStatus */
enum rls_serving {
	RLS_SERVING_UNKNOWN = 0,
	RLS_SERVING = 1,
	RLS_NOT_SERVING = 2,
	RLS_SERVICE_UNKNOWN = 3,
};

/* ---- RateLimitRequest ---- */

struct rls_entry {
	struct pb_str key;
	struct pb_str value;
};

struct rls_descriptor {
	const struct rls_entry *entries;   /* n_entries of the request's entries[] */
	size_t n_entries;
	bool has_limit;                    /* the RateLimitOverride */
	uint32_t limit_requests_per_unit;
	int32_t limit_unit;                /* enum rls_unit; any value as sent */
	bool has_hits_addend;              /* the UInt64Value, 0 included */
	uint64_t hits_addend;
};

/* The caller sets the arrays and their max_*; the decoder sets the rest.
 * Every descriptor's entries lie in entries[] one after the other, at
 * most RLS_ENTRIES_MAX each. */
struct rls_request {
	struct pb_str domain;
	uint32_t hits_addend;              /* 0: not sent (Envoy means 1) */
	struct rls_descriptor *descriptors;
	size_t n_descriptors, max_descriptors;
	struct rls_entry *entries;
	size_t n_entries, max_entries;
};

/* Decodes the message p[0..len). Returns 0, or -1 with *err (the wire
 * format's, UTF8, STRING, DESCRIPTORS, ENTRIES); rq's views point into p. */
int rls_request_decode(const uint8_t *p, size_t len, struct rls_request *rq, enum rls_err *err);

/* Encodes a request (a client's side: tests, tools). Only set fields go
 * out (proto3: a zero hits_addend is absent; a descriptor's UInt64Value
 * goes out when has_hits_addend, 0 included). */
int rls_request_encode(struct pb_writer *w, const struct rls_request *rq);

/* ---- RateLimitResponse ---- */

struct rls_rate_limit {
	uint32_t requests_per_unit;
	int32_t unit;                      /* enum rls_unit */
	struct pb_str name;
};

struct rls_status {
	int32_t code;                      /* enum rls_code */
	bool has_current_limit;
	struct rls_rate_limit current_limit;
	uint32_t limit_remaining;
	bool has_duration_until_reset;
	int64_t reset_seconds;
	int32_t reset_nanos;
};

struct rls_header {
	struct pb_str key;
	struct pb_str value;
};

/* As rls_request: the caller's arrays with their max_* for decoding; for
 * encoding only the n_* count. */
struct rls_response {
	int32_t overall_code;              /* enum rls_code */
	struct rls_status *statuses;
	size_t n_statuses, max_statuses;
	struct rls_header *response_headers;   /* response_headers_to_add */
	size_t n_response_headers, max_response_headers;
	struct rls_header *request_headers;    /* request_headers_to_add */
	size_t n_request_headers, max_request_headers;
	struct pb_str raw_body;
};

/* Encodes the response: fields in number order, defaults left out. */
int rls_response_encode(struct pb_writer *w, const struct rls_response *rs);

/* Decodes one (a client's side: tests, tools). Returns 0, or -1 with *err
 * (the wire format's, UTF8, STATUSES, HEADERS). */
int rls_response_decode(const uint8_t *p, size_t len, struct rls_response *rs,
			enum rls_err *err);

/* ---- grpc.health.v1 ---- */

/* HealthCheckRequest: service ("" = the server as a whole). */
int rls_health_request_decode(const uint8_t *p, size_t len, struct pb_str *service,
			      enum rls_err *err);
int rls_health_request_encode(struct pb_writer *w, struct pb_str service);
/* HealthCheckResponse: status (enum rls_serving). */
int rls_health_response_encode(struct pb_writer *w, enum rls_serving status);
int rls_health_response_decode(const uint8_t *p, size_t len, int32_t *status,
			       enum rls_err *err);

/* ---- gRPC over HTTP/2 (grpc/doc/PROTOCOL-HTTP2.md) ----
 *
 *   Length-Prefixed-Message: Compressed-Flag (1 byte: 0 or 1)
 *                            Message-Length (4 bytes, big-endian)
 *                            Message (that many bytes)
 */

/* Reads one length-prefixed message of a DATA stream p[0..len): returns
 * the bytes it takes (RLS_GRPC_PREFIX + its length) with *msg its bytes,
 * 0 when more bytes are needed, or -1 with *err: COMPRESSED (flag 1: this
 * server accepts no grpc-encoding), FLAG (neither 0 nor 1), TOO_BIG
 * (longer than max: said as soon as the prefix is there). */
int rls_grpc_frame_decode(const uint8_t *p, size_t len, size_t max, struct pb_str *msg,
			  enum rls_err *err);

/* The prefix of an uncompressed message of n bytes. */
void rls_grpc_frame_prefix(uint8_t out[RLS_GRPC_PREFIX], uint32_t n);

/* grpc-timeout: "TimeoutValue TimeoutUnit", 1 to 8 ASCII digits then one of
 * H (hours), M (minutes), S (seconds), m (milliseconds), u (microseconds),
 * n (nanoseconds). Returns 0 with *us the timeout in microseconds, rounded
 * up ("1n" is 1 µs, "0m" is 0: already passed), or -1 with RLS_ERR_TIMEOUT. */
int rls_grpc_timeout_parse(const char *s, size_t n, uint64_t *us, enum rls_err *err);

/* The grpc-status value of a code: its decimal text into out (at least 3
 * bytes), no NUL; returns its length. */
size_t rls_grpc_status_text(enum rls_grpc_status code, char *out);

/* grpc-message: text percent-encoded as gRPC says (bytes outside 0x20-0x7e,
 * and '%', as %XX), into out[0..cap); cut before an escape that does not
 * fit. Returns the length written. */
size_t rls_grpc_message_encode(const char *s, size_t n, char *out, size_t cap);

/* The reverse, for clients and tests: a '%' not followed by two hex
 * digits is kept as it is (gRPC's rule). Returns the length written. */
size_t rls_grpc_message_decode(const char *s, size_t n, char *out, size_t cap);

/* The name of a status ("INTERNAL"), "UNKNOWN" out of the enum. */
const char *rls_grpc_status_name(enum rls_grpc_status code);

/* What a server answers to an error, and its text. */
enum rls_grpc_status rls_err_status(enum rls_err err);
const char *rls_err_str(enum rls_err err);

#endif /* RLS_WIRE_H */
