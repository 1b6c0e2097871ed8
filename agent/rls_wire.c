/*
 * rls_wire.c - Envoy's rate limit service messages, grpc.health.v1 and
 * gRPC's framing (see rls_wire.h). Pure: the only calls are mem*() and
 * agent/pb_wire.c's (make check reads the object's symbols). Each message
 * is read by its own reader over its bytes (pb_next), so nothing here
 * recurses deeper than the schema: request -> descriptor -> entry.
 */
#include "agent/rls_wire.h"

#include <string.h>

/* The wire format's errors are ours, by value. */
#define X(name, text) _Static_assert((int)PB_ERR_##name == (int)RLS_ERR_##name, #name);
PB_WIRE_ERRORS(X)
#undef X

static const struct {
	enum rls_grpc_status status;
	const char *text;
} rls_errs[RLS_ERR_COUNT] = {
#define X(name, st, text) [RLS_ERR_##name] = { RLS_GRPC_##st, text },
	RLS_WIRE_ERRORS(X)
#undef X
};

static const char *const rls_status_names[RLS_GRPC_STATUS_COUNT] = {
#define X(name, v) [v] = #name,
	RLS_GRPC_STATUSES(X)
#undef X
};

const char *rls_err_str(enum rls_err err)
{
	return (unsigned)err < RLS_ERR_COUNT ? rls_errs[err].text : "unknown error";
}

enum rls_grpc_status rls_err_status(enum rls_err err)
{
	return (unsigned)err < RLS_ERR_COUNT ? rls_errs[err].status : RLS_GRPC_INTERNAL;
}

const char *rls_grpc_status_name(enum rls_grpc_status code)
{
	return (unsigned)code < RLS_GRPC_STATUS_COUNT ? rls_status_names[code] : "UNKNOWN";
}

static const struct pb_str rls_empty = { "", 0 };

/* The next field of r, or -1 with *err (an rls_err: same values). */
static int rls_next(struct pb_reader *r, struct pb_field *f, enum rls_err *err)
{
	enum pb_err e = PB_ERR_NONE;

	if (pb_next(r, f, &e) == 0)
		return 0;
	*err = (enum rls_err)e;
	return -1;
}

static bool rls_is(const struct pb_field *f, uint32_t number, enum pb_wire_type type)
{
	return f->number == number && f->type == type;
}

/* A proto3 string field: valid UTF-8, at most max bytes. */
static int rls_string(const struct pb_field *f, size_t max, struct pb_str *out,
		      enum rls_err *err)
{
	if (f->bytes.len > max) {
		*err = RLS_ERR_STRING;
		return -1;
	}
	if (!pb_utf8_ok(f->bytes.ptr, f->bytes.len)) {
		*err = RLS_ERR_UTF8;
		return -1;
	}
	*out = f->bytes.len ? f->bytes : rls_empty;
	return 0;
}

/* ---- RateLimitRequest ---- */

/* A message of two strings, 1 and 2: Entry {key, value}, HeaderValue
 * {key, value}. */
static int rls_pair_decode(struct pb_str b, struct pb_str *one, struct pb_str *two,
			   enum rls_err *err)
{
	struct pb_reader r;
	struct pb_field f;

	*one = *two = rls_empty;
	pb_reader_init(&r, b.ptr, b.len);
	while (!pb_reader_done(&r)) {
		if (rls_next(&r, &f, err) < 0)
			return -1;
		if (rls_is(&f, 1, PB_LEN) && rls_string(&f, RLS_STR_MAX, one, err) < 0)
			return -1;
		if (rls_is(&f, 2, PB_LEN) && rls_string(&f, RLS_STR_MAX, two, err) < 0)
			return -1;
	}
	return 0;
}

/* A message of varints only, fields 1..n into v[0..n): RateLimitOverride
 * {requests_per_unit, unit}, UInt64Value {value}, Duration {seconds,
 * nanos}, HealthCheckResponse {status}. v holds what an earlier
 * occurrence left: a message given twice is merged. */
static int rls_varints_decode(struct pb_str b, uint64_t *v, uint32_t n, enum rls_err *err)
{
	struct pb_reader r;
	struct pb_field f;

	pb_reader_init(&r, b.ptr, b.len);
	while (!pb_reader_done(&r)) {
		if (rls_next(&r, &f, err) < 0)
			return -1;
		if (f.type == PB_VARINT && f.number <= n)
			v[f.number - 1] = f.u;
	}
	return 0;
}

/* RateLimitDescriptor: its entries go to rq->entries, one after another. */
static int rls_descriptor_decode(struct pb_str b, struct rls_request *rq,
				 struct rls_descriptor *d, enum rls_err *err)
{
	struct pb_reader r;
	struct pb_field f;

	memset(d, 0, sizeof(*d));
	d->entries = rq->entries + rq->n_entries;
	pb_reader_init(&r, b.ptr, b.len);
	while (!pb_reader_done(&r)) {
		if (rls_next(&r, &f, err) < 0)
			return -1;
		if (rls_is(&f, 1, PB_LEN)) {
			if (d->n_entries >= RLS_ENTRIES_MAX || rq->n_entries >= rq->max_entries) {
				*err = RLS_ERR_ENTRIES;
				return -1;
			}
			struct rls_entry *e = &rq->entries[rq->n_entries];

			if (rls_pair_decode(f.bytes, &e->key, &e->value, err) < 0)
				return -1;
			rq->n_entries++;
			d->n_entries++;
		} else if (rls_is(&f, 2, PB_LEN)) {
			uint64_t v[2] = { d->limit_requests_per_unit, (uint32_t)d->limit_unit };

			d->has_limit = true;
			if (rls_varints_decode(f.bytes, v, 2, err) < 0)
				return -1;
			d->limit_requests_per_unit = (uint32_t)v[0];
			d->limit_unit = (int32_t)(uint32_t)v[1];
		} else if (rls_is(&f, 3, PB_LEN)) {
			d->has_hits_addend = true;
			if (rls_varints_decode(f.bytes, &d->hits_addend, 1, err) < 0)
				return -1;
		}
	}
	return 0;
}

int rls_request_decode(const uint8_t *p, size_t len, struct rls_request *rq, enum rls_err *err)
{
	struct pb_reader r;
	struct pb_field f;

	rq->domain = rls_empty;
	rq->hits_addend = 0;
	rq->n_descriptors = rq->n_entries = 0;
	pb_reader_init(&r, p, len);
	while (!pb_reader_done(&r)) {
		if (rls_next(&r, &f, err) < 0)
			return -1;
		if (rls_is(&f, 1, PB_LEN)) {
			if (rls_string(&f, RLS_STR_MAX, &rq->domain, err) < 0)
				return -1;
		} else if (rls_is(&f, 2, PB_LEN)) {
			if (rq->n_descriptors >= rq->max_descriptors) {
				*err = RLS_ERR_DESCRIPTORS;
				return -1;
			}
			if (rls_descriptor_decode(f.bytes, rq, &rq->descriptors[rq->n_descriptors],
						  err) < 0)
				return -1;
			rq->n_descriptors++;
		} else if (rls_is(&f, 3, PB_VARINT)) {
			rq->hits_addend = (uint32_t)f.u;
		}
	}
	return 0;
}

/* ---- encoding: sizes first (a nested message's length is written
 * before it), then the fields; a failure puts the writer back. ---- */

/* A string or bytes field, left out when empty (proto3). */
static size_t rls_size_str(uint32_t field, struct pb_str s)
{
	return s.len ? pb_size_tag_len(field, s.len) : 0;
}

/* A varint field, left out when 0. */
static size_t rls_size_uint(uint32_t field, uint64_t v)
{
	return v ? pb_size_tag_varint(field, v) : 0;
}

static int rls_put_str(struct pb_writer *w, uint32_t field, struct pb_str s)
{
	return s.len ? pb_put_bytes(w, field, s.ptr, s.len) : 0;
}

static int rls_put_uint(struct pb_writer *w, uint32_t field, uint64_t v)
{
	return v ? pb_put_tag_varint(w, field, v) : 0;
}

/* An enum or int32 travels sign-extended to 64 bits. */
static uint64_t rls_i32(int32_t v)
{
	return (uint64_t)(int64_t)v;
}

static size_t rls_entry_size(const struct rls_entry *e)
{
	return rls_size_str(1, e->key) + rls_size_str(2, e->value);
}

static size_t rls_override_size(const struct rls_descriptor *d)
{
	return rls_size_uint(1, d->limit_requests_per_unit) + rls_size_uint(2, rls_i32(d->limit_unit));
}

static size_t rls_descriptor_size(const struct rls_descriptor *d)
{
	size_t n = 0;

	for (size_t i = 0; i < d->n_entries; i++)
		n += pb_size_tag_len(1, rls_entry_size(&d->entries[i]));
	if (d->has_limit)
		n += pb_size_tag_len(2, rls_override_size(d));
	if (d->has_hits_addend)
		n += pb_size_tag_len(3, rls_size_uint(1, d->hits_addend));
	return n;
}

static int rls_descriptor_put(struct pb_writer *w, const struct rls_descriptor *d)
{
	if (pb_put_len_header(w, 2, rls_descriptor_size(d)) < 0)
		return -1;
	for (size_t i = 0; i < d->n_entries; i++) {
		const struct rls_entry *e = &d->entries[i];

		if (pb_put_len_header(w, 1, rls_entry_size(e)) < 0 ||
		    rls_put_str(w, 1, e->key) < 0 || rls_put_str(w, 2, e->value) < 0)
			return -1;
	}
	if (d->has_limit &&
	    (pb_put_len_header(w, 2, rls_override_size(d)) < 0 ||
	     rls_put_uint(w, 1, d->limit_requests_per_unit) < 0 ||
	     rls_put_uint(w, 2, rls_i32(d->limit_unit)) < 0))
		return -1;
	if (d->has_hits_addend &&
	    (pb_put_len_header(w, 3, rls_size_uint(1, d->hits_addend)) < 0 ||
	     rls_put_uint(w, 1, d->hits_addend) < 0))
		return -1;
	return 0;
}

int rls_request_encode(struct pb_writer *w, const struct rls_request *rq)
{
	size_t before = w->len;

	if (rls_put_str(w, 1, rq->domain) < 0)
		goto full;
	for (size_t i = 0; i < rq->n_descriptors; i++)
		if (rls_descriptor_put(w, &rq->descriptors[i]) < 0)
			goto full;
	if (rls_put_uint(w, 3, rq->hits_addend) < 0)
		goto full;
	return 0;
full:
	w->len = before;
	return -1;
}

/* ---- RateLimitResponse ---- */

static size_t rls_rate_limit_size(const struct rls_rate_limit *rl)
{
	return rls_size_uint(1, rl->requests_per_unit) + rls_size_uint(2, rls_i32(rl->unit)) +
	       rls_size_str(3, rl->name);
}

static size_t rls_duration_size(const struct rls_status *s)
{
	return rls_size_uint(1, (uint64_t)s->reset_seconds) + rls_size_uint(2, rls_i32(s->reset_nanos));
}

static size_t rls_status_size(const struct rls_status *s)
{
	size_t n = rls_size_uint(1, rls_i32(s->code)) + rls_size_uint(3, s->limit_remaining);

	if (s->has_current_limit)
		n += pb_size_tag_len(2, rls_rate_limit_size(&s->current_limit));
	if (s->has_duration_until_reset)
		n += pb_size_tag_len(4, rls_duration_size(s));
	return n;
}

static int rls_status_put(struct pb_writer *w, const struct rls_status *s)
{
	const struct rls_rate_limit *rl = &s->current_limit;

	if (pb_put_len_header(w, 2, rls_status_size(s)) < 0 ||
	    rls_put_uint(w, 1, rls_i32(s->code)) < 0)
		return -1;
	if (s->has_current_limit &&
	    (pb_put_len_header(w, 2, rls_rate_limit_size(rl)) < 0 ||
	     rls_put_uint(w, 1, rl->requests_per_unit) < 0 ||
	     rls_put_uint(w, 2, rls_i32(rl->unit)) < 0 || rls_put_str(w, 3, rl->name) < 0))
		return -1;
	if (rls_put_uint(w, 3, s->limit_remaining) < 0)
		return -1;
	if (s->has_duration_until_reset &&
	    (pb_put_len_header(w, 4, rls_duration_size(s)) < 0 ||
	     rls_put_uint(w, 1, (uint64_t)s->reset_seconds) < 0 ||
	     rls_put_uint(w, 2, rls_i32(s->reset_nanos)) < 0))
		return -1;
	return 0;
}

static int rls_headers_put(struct pb_writer *w, uint32_t field, const struct rls_header *h,
			   size_t n)
{
	for (size_t i = 0; i < n; i++) {
		size_t size = rls_size_str(1, h[i].key) + rls_size_str(2, h[i].value);

		if (pb_put_len_header(w, field, size) < 0 || rls_put_str(w, 1, h[i].key) < 0 ||
		    rls_put_str(w, 2, h[i].value) < 0)
			return -1;
	}
	return 0;
}

int rls_response_encode(struct pb_writer *w, const struct rls_response *rs)
{
	size_t before = w->len;

	if (rls_put_uint(w, 1, rls_i32(rs->overall_code)) < 0)
		goto full;
	for (size_t i = 0; i < rs->n_statuses; i++)
		if (rls_status_put(w, &rs->statuses[i]) < 0)
			goto full;
	if (rls_headers_put(w, 3, rs->response_headers, rs->n_response_headers) < 0 ||
	    rls_headers_put(w, 4, rs->request_headers, rs->n_request_headers) < 0 ||
	    rls_put_str(w, 5, rs->raw_body) < 0)
		goto full;
	return 0;
full:
	w->len = before;
	return -1;
}

/* RateLimit { 1 requests_per_unit, 2 unit, 3 name }, merged. */
static int rls_rate_limit_decode(struct pb_str b, struct rls_rate_limit *rl, enum rls_err *err)
{
	struct pb_reader r;
	struct pb_field f;

	pb_reader_init(&r, b.ptr, b.len);
	while (!pb_reader_done(&r)) {
		if (rls_next(&r, &f, err) < 0)
			return -1;
		if (rls_is(&f, 1, PB_VARINT))
			rl->requests_per_unit = (uint32_t)f.u;
		else if (rls_is(&f, 2, PB_VARINT))
			rl->unit = (int32_t)(uint32_t)f.u;
		else if (rls_is(&f, 3, PB_LEN) && rls_string(&f, RLS_STR_MAX, &rl->name, err) < 0)
			return -1;
	}
	return 0;
}

static int rls_status_decode(struct pb_str b, struct rls_status *s, enum rls_err *err)
{
	struct pb_reader r;
	struct pb_field f;

	memset(s, 0, sizeof(*s));
	s->current_limit.name = rls_empty;
	pb_reader_init(&r, b.ptr, b.len);
	while (!pb_reader_done(&r)) {
		if (rls_next(&r, &f, err) < 0)
			return -1;
		if (rls_is(&f, 1, PB_VARINT)) {
			s->code = (int32_t)(uint32_t)f.u;
		} else if (rls_is(&f, 2, PB_LEN)) {
			s->has_current_limit = true;
			if (rls_rate_limit_decode(f.bytes, &s->current_limit, err) < 0)
				return -1;
		} else if (rls_is(&f, 3, PB_VARINT)) {
			s->limit_remaining = (uint32_t)f.u;
		} else if (rls_is(&f, 4, PB_LEN)) {
			uint64_t v[2] = { (uint64_t)s->reset_seconds, (uint32_t)s->reset_nanos };

			s->has_duration_until_reset = true;
			if (rls_varints_decode(f.bytes, v, 2, err) < 0)
				return -1;
			s->reset_seconds = (int64_t)v[0];
			s->reset_nanos = (int32_t)(uint32_t)v[1];
		}
	}
	return 0;
}

/* HeaderValue { 1 key, 2 value } into h[*n], within max. */
static int rls_header_decode(struct pb_str b, struct rls_header *h, size_t *n, size_t max,
			     enum rls_err *err)
{
	if (*n >= max) {
		*err = RLS_ERR_HEADERS;
		return -1;
	}
	if (rls_pair_decode(b, &h[*n].key, &h[*n].value, err) < 0)
		return -1;
	(*n)++;
	return 0;
}

int rls_response_decode(const uint8_t *p, size_t len, struct rls_response *rs,
			enum rls_err *err)
{
	struct pb_reader r;
	struct pb_field f;

	rs->overall_code = 0;
	rs->n_statuses = rs->n_response_headers = rs->n_request_headers = 0;
	rs->raw_body = rls_empty;
	pb_reader_init(&r, p, len);
	while (!pb_reader_done(&r)) {
		if (rls_next(&r, &f, err) < 0)
			return -1;
		if (rls_is(&f, 1, PB_VARINT)) {
			rs->overall_code = (int32_t)(uint32_t)f.u;
		} else if (rls_is(&f, 2, PB_LEN)) {
			if (rs->n_statuses >= rs->max_statuses) {
				*err = RLS_ERR_STATUSES;
				return -1;
			}
			if (rls_status_decode(f.bytes, &rs->statuses[rs->n_statuses], err) < 0)
				return -1;
			rs->n_statuses++;
		} else if (rls_is(&f, 3, PB_LEN)) {
			if (rls_header_decode(f.bytes, rs->response_headers, &rs->n_response_headers,
					      rs->max_response_headers, err) < 0)
				return -1;
		} else if (rls_is(&f, 4, PB_LEN)) {
			if (rls_header_decode(f.bytes, rs->request_headers, &rs->n_request_headers,
					      rs->max_request_headers, err) < 0)
				return -1;
		} else if (rls_is(&f, 5, PB_LEN)) {
			rs->raw_body = f.bytes.len ? f.bytes : rls_empty;
		}
	}
	return 0;
}

/* ---- grpc.health.v1 ---- */

int rls_health_request_decode(const uint8_t *p, size_t len, struct pb_str *service,
			      enum rls_err *err)
{
	struct pb_reader r;
	struct pb_field f;

	*service = rls_empty;
	pb_reader_init(&r, p, len);
	while (!pb_reader_done(&r)) {
		if (rls_next(&r, &f, err) < 0)
			return -1;
		if (rls_is(&f, 1, PB_LEN) && rls_string(&f, RLS_STR_MAX, service, err) < 0)
			return -1;
	}
	return 0;
}

int rls_health_request_encode(struct pb_writer *w, struct pb_str service)
{
	return rls_put_str(w, 1, service);
}

int rls_health_response_encode(struct pb_writer *w, enum rls_serving status)
{
	return rls_put_uint(w, 1, rls_i32((int32_t)status));
}

int rls_health_response_decode(const uint8_t *p, size_t len, int32_t *status,
			       enum rls_err *err)
{
	uint64_t v = 0;

	if (rls_varints_decode((struct pb_str){ (const char *)p, len }, &v, 1, err) < 0)
		return -1;
	*status = (int32_t)(uint32_t)v;
	return 0;
}

/* ---- gRPC framing and headers ---- */

int rls_grpc_frame_decode(const uint8_t *p, size_t len, size_t max, struct pb_str *msg,
			  enum rls_err *err)
{
	uint32_t n;

	if (len >= 1 && p[0] > 1) {
		*err = RLS_ERR_FLAG;
		return -1;
	}
	if (len >= 1 && p[0] == 1) {
		*err = RLS_ERR_COMPRESSED;
		return -1;
	}
	if (len < RLS_GRPC_PREFIX)
		return 0;
	n = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
	/* The count returned is an int. */
	if (n > max || n > (uint32_t)INT32_MAX - RLS_GRPC_PREFIX) {
		*err = RLS_ERR_TOO_BIG;
		return -1;
	}
	if (len - RLS_GRPC_PREFIX < n)
		return 0;
	msg->ptr = n ? (const char *)p + RLS_GRPC_PREFIX : "";
	msg->len = n;
	return (int)(RLS_GRPC_PREFIX + n);
}

void rls_grpc_frame_prefix(uint8_t out[RLS_GRPC_PREFIX], uint32_t n)
{
	out[0] = 0;
	out[1] = (uint8_t)(n >> 24);
	out[2] = (uint8_t)(n >> 16);
	out[3] = (uint8_t)(n >> 8);
	out[4] = (uint8_t)n;
}

int rls_grpc_timeout_parse(const char *s, size_t n, uint64_t *us, enum rls_err *err)
{
	uint64_t v = 0;

	if (n < 2 || n > 9)
		goto bad;
	for (size_t i = 0; i + 1 < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			goto bad;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	/* At most 99,999,999 hours: 3.6e17 µs, within 64 bits. */
	switch (s[n - 1]) {
	case 'H': *us = v * 3600000000u; return 0;
	case 'M': *us = v * 60000000u; return 0;
	case 'S': *us = v * 1000000u; return 0;
	case 'm': *us = v * 1000u; return 0;
	case 'u': *us = v; return 0;
	case 'n': *us = (v + 999) / 1000; return 0;
	default: break;
	}
bad:
	*err = RLS_ERR_TIMEOUT;
	return -1;
}

size_t rls_grpc_status_text(enum rls_grpc_status code, char *out)
{
	unsigned v = (unsigned)code;
	char d[3];
	size_t n = 0;

	if (v > 999)
		v = RLS_GRPC_UNKNOWN;
	do {
		d[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	for (size_t i = 0; i < n; i++)
		out[i] = d[n - 1 - i];
	return n;
}

static const char rls_hex[] = "0123456789ABCDEF";

size_t rls_grpc_message_encode(const char *s, size_t n, char *out, size_t cap)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		uint8_t c = (uint8_t)s[i];

		if (c >= 0x20 && c <= 0x7e && c != '%') {
			if (o + 1 > cap)
				break;
			out[o++] = (char)c;
		} else {
			if (o + 3 > cap)
				break;
			out[o++] = '%';
			out[o++] = rls_hex[c >> 4];
			out[o++] = rls_hex[c & 15];
		}
	}
	return o;
}

/* A hex digit's value, or -1. */
static int rls_hexval(char c)
{
	static const char digits[32] = "0123456789abcdef0123456789ABCDEF";
	const char *q = memchr(digits, c, sizeof(digits));

	return q ? (int)((q - digits) & 15) : -1;
}

size_t rls_grpc_message_decode(const char *s, size_t n, char *out, size_t cap)
{
	size_t o = 0;

	for (size_t i = 0; i < n && o < cap; i++) {
		int hi, lo;

		if (s[i] == '%' && i + 2 < n && (hi = rls_hexval(s[i + 1])) >= 0 &&
		    (lo = rls_hexval(s[i + 2])) >= 0) {
			out[o++] = (char)(hi << 4 | lo);
			i += 2;
		} else {
			out[o++] = s[i];
		}
	}
	return o;
}
