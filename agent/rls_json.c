/*
 * rls_json.c - RateLimitRequest and RateLimitResponse in protobuf's JSON
 * mapping (see rls_json.h), with jansson.
 */
#include "agent/rls_json.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- reading ---- */

/* A field of obj: its JSON name or its proto name (not both), NULL when
 * absent or null. *why when given twice. */
static json_t *rj_get(json_t *obj, const char *json_name, const char *proto_name,
		      const char **why)
{
	json_t *a = json_object_get(obj, json_name);
	json_t *b = proto_name ? json_object_get(obj, proto_name) : NULL;

	if (a && b) {
		*why = "a field given twice";
		return NULL;
	}
	a = a ? a : b;
	return a && !json_is_null(a) ? a : NULL;
}

/* Are the keys of obj among names[0..n)? */
static bool rj_known(json_t *obj, const char *const *names, size_t n)
{
	const char *k;
	json_t *v;

	json_object_foreach(obj, k, v) {
		size_t i = 0;

		while (i < n && strcmp(k, names[i]) != 0)
			i++;
		if (i == n)
			return false;
	}
	return true;
}

/* An unsigned integer at most max: a JSON integer, or its decimal text
 * (protojson writes 64-bit ones as strings). */
static int rj_uint(json_t *v, uint64_t max, uint64_t *out)
{
	if (json_is_integer(v)) {
		json_int_t i = json_integer_value(v);

		if (i < 0 || (uint64_t)i > max)
			return -1;
		*out = (uint64_t)i;
		return 0;
	}
	if (json_is_real(v)) {
		double d = json_real_value(v);

		if (!(d >= 0 && d <= (double)max) || d != (double)(uint64_t)d)
			return -1;
		*out = (uint64_t)d;
		return 0;
	}
	if (json_is_string(v)) {
		const char *s = json_string_value(v);
		size_t n = json_string_length(v);
		uint64_t x = 0;

		if (n == 0 || n > 20)
			return -1;
		for (size_t i = 0; i < n; i++) {
			if (s[i] < '0' || s[i] > '9' || x > (UINT64_MAX - (uint64_t)(s[i] - '0')) / 10)
				return -1;
			x = x * 10 + (uint64_t)(s[i] - '0');
		}
		if (x > max)
			return -1;
		*out = x;
		return 0;
	}
	return -1;
}

/* A string field into *out (a view into the document). */
static int rj_str(json_t *v, struct pb_str *out)
{
	if (!json_is_string(v) || json_string_length(v) > RLS_STR_MAX)
		return -1;
	*out = (struct pb_str){ json_string_value(v), json_string_length(v) };
	return 0;
}

static const char *const rj_units[] = { "UNKNOWN", "SECOND", "MINUTE", "HOUR", "DAY", "MONTH",
					"YEAR", "WEEK" };

static int rj_unit(json_t *v, int32_t *out)
{
	uint64_t u;

	if (json_is_string(v)) {
		for (size_t i = 0; i < sizeof(rj_units) / sizeof(rj_units[0]); i++)
			if (strcmp(json_string_value(v), rj_units[i]) == 0) {
				*out = (int32_t)i;
				return 0;
			}
	}
	if (!json_is_string(v) && rj_uint(v, INT32_MAX, &u) == 0) {
		*out = (int32_t)u;
		return 0;
	}
	return -1;
}

/* One descriptor object into d, its entries appended to out's. */
static const char *rj_descriptor(json_t *o, struct rls_json_request *out, struct rls_descriptor *d)
{
	static const char *const keys[] = { "entries", "limit", "hitsAddend", "hits_addend" };
	static const char *const lkeys[] = { "requestsPerUnit", "requests_per_unit", "unit" };
	static const char *const ekeys[] = { "key", "value" };
	const char *why = NULL;
	json_t *entries, *limit, *hits, *v;
	size_t i;
	uint64_t u;

	if (!json_is_object(o) || !rj_known(o, keys, 4))
		return "a descriptor: expected an object of entries, limit, hitsAddend";
	entries = rj_get(o, "entries", NULL, &why);
	limit = rj_get(o, "limit", NULL, &why);
	hits = rj_get(o, "hitsAddend", "hits_addend", &why);
	if (why)
		return why;
	memset(d, 0, sizeof(*d));
	d->entries = out->entries + out->rq.n_entries;
	if (entries && !json_is_array(entries))
		return "entries: expected an array";
	if (entries && json_array_size(entries) > RLS_ENTRIES_MAX)
		return "more than 32 entries in a descriptor";
	json_array_foreach(entries, i, v) {
		struct rls_entry *e;
		json_t *k, *val;

		if (out->rq.n_entries == RLS_JSON_ENTRIES)
			return "more than 512 entries in a request";
		e = &out->entries[out->rq.n_entries];
		*e = (struct rls_entry){ { "", 0 }, { "", 0 } };
		if (!json_is_object(v) || !rj_known(v, ekeys, 2))
			return "an entry: expected an object of key and value";
		k = rj_get(v, "key", NULL, &why);
		val = rj_get(v, "value", NULL, &why);
		if ((k && rj_str(k, &e->key) < 0) || (val && rj_str(val, &e->value) < 0))
			return "an entry's key or value: expected a string of at most 16384 bytes";
		out->rq.n_entries++;
		d->n_entries++;
	}
	if (limit) {
		json_t *rpu, *unit;

		if (!json_is_object(limit) || !rj_known(limit, lkeys, 3))
			return "limit: expected an object of requestsPerUnit and unit";
		rpu = rj_get(limit, "requestsPerUnit", "requests_per_unit", &why);
		unit = rj_get(limit, "unit", NULL, &why);
		if (why)
			return why;
		d->has_limit = true;
		if (rpu && rj_uint(rpu, UINT32_MAX, &u) < 0)
			return "limit.requestsPerUnit: expected an integer 0..4294967295";
		d->limit_requests_per_unit = rpu ? (uint32_t)u : 0;
		if (unit && rj_unit(unit, &d->limit_unit) < 0)
			return "limit.unit: expected SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR";
	}
	if (hits) {
		if (rj_uint(hits, UINT64_MAX, &u) < 0)
			return "hitsAddend: expected an unsigned integer";
		d->has_hits_addend = true;
		d->hits_addend = u;
	}
	return NULL;
}

json_t *rls_json_request_read(const char *body, size_t len, struct rls_json_request *out,
			      const char **why)
{
	static const char *const keys[] = { "domain", "descriptors", "hitsAddend", "hits_addend" };
	json_error_t jerr;
	json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	json_t *domain, *descs, *hits, *v;
	size_t i;
	uint64_t u;

	*why = NULL;
	memset(&out->rq, 0, sizeof(out->rq));
	out->rq.descriptors = out->descriptors;
	out->rq.max_descriptors = RLS_DESCRIPTORS_MAX;
	out->rq.entries = out->entries;
	out->rq.max_entries = RLS_JSON_ENTRIES;
	if (!root) {
		*why = "not JSON (or a key given twice)";
		return NULL;
	}
	if (!json_is_object(root) || !rj_known(root, keys, 4)) {
		*why = "expected a RateLimitRequest: an object of domain, descriptors, hitsAddend";
		goto fail;
	}
	domain = rj_get(root, "domain", NULL, why);
	descs = rj_get(root, "descriptors", NULL, why);
	hits = rj_get(root, "hitsAddend", "hits_addend", why);
	if (*why)
		goto fail;
	if (domain && rj_str(domain, &out->rq.domain) < 0) {
		*why = "domain: expected a string of at most 16384 bytes";
		goto fail;
	}
	if (hits) {
		if (rj_uint(hits, UINT32_MAX, &u) < 0) {
			*why = "hitsAddend: expected an integer 0..4294967295";
			goto fail;
		}
		out->rq.hits_addend = (uint32_t)u;
	}
	if (descs && !json_is_array(descs)) {
		*why = "descriptors: expected an array";
		goto fail;
	}
	if (descs && json_array_size(descs) > RLS_DESCRIPTORS_MAX) {
		*why = rls_err_str(RLS_ERR_DESCRIPTORS);
		goto fail;
	}
	json_array_foreach(descs, i, v) {
		if ((*why = rj_descriptor(v, out, &out->descriptors[i])))
			goto fail;
		out->rq.n_descriptors++;
	}
	return root;
fail:
	json_decref(root);
	return NULL;
}

/* ---- writing ---- */

static const char *const rj_codes[] = { "UNKNOWN", "OK", "OVER_LIMIT" };

/* An enum by name, or its number when it has none (as protojson). */
static json_t *rj_enum(int32_t v, const char *const *names, size_t n)
{
	return v >= 0 && (size_t)v < n ? json_string(names[v]) : json_integer(v);
}

static int rj_set(json_t *o, const char *k, json_t *v)
{
	return json_object_set_new(o, k, v);
}

/* bytes in base64 (RFC 4648, padded), as protojson writes bytes */
static json_t *rj_base64(const char *p, size_t n)
{
	static const char a[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char *s = malloc(4 * ((n + 2) / 3) + 1);
	size_t o = 0;
	json_t *j;

	if (!s)
		return NULL;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t w = (uint32_t)(unsigned char)p[i] << 16;

		if (i + 1 < n)
			w |= (uint32_t)(unsigned char)p[i + 1] << 8;
		if (i + 2 < n)
			w |= (unsigned char)p[i + 2];
		s[o++] = a[w >> 18 & 63];
		s[o++] = a[w >> 12 & 63];
		s[o++] = i + 1 < n ? a[w >> 6 & 63] : '=';
		s[o++] = i + 2 < n ? a[w & 63] : '=';
	}
	j = json_stringn(s, o);
	free(s);
	return j;
}

static json_t *rj_status(const struct rls_status *st)
{
	json_t *o = json_object(), *cl;
	char d[32];

	if (!o)
		return NULL;
	if (st->code)
		rj_set(o, "code", rj_enum(st->code, rj_codes, 3));
	if (st->has_current_limit && (cl = json_object())) {
		if (st->current_limit.requests_per_unit)
			rj_set(cl, "requestsPerUnit", json_integer(st->current_limit.requests_per_unit));
		if (st->current_limit.unit)
			rj_set(cl, "unit", rj_enum(st->current_limit.unit, rj_units, 8));
		if (st->current_limit.name.len)
			rj_set(cl, "name", json_stringn(st->current_limit.name.ptr,
							st->current_limit.name.len));
		rj_set(o, "currentLimit", cl);
	}
	if (st->limit_remaining)
		rj_set(o, "limitRemaining", json_integer(st->limit_remaining));
	if (st->has_duration_until_reset) {
		snprintf(d, sizeof(d), "%llds", (long long)st->reset_seconds);
		rj_set(o, "durationUntilReset", json_string(d));
	}
	return o;
}

static json_t *rj_headers(const struct rls_header *h, size_t n)
{
	json_t *a = json_array();

	for (size_t i = 0; a && i < n; i++) {
		json_t *o = json_object();

		if (!o)
			break;
		rj_set(o, "key", json_stringn(h[i].key.ptr, h[i].key.len));
		rj_set(o, "value", json_stringn(h[i].value.ptr, h[i].value.len));
		json_array_append_new(a, o);
	}
	return a;
}

char *rls_json_response_write(const struct rls_response *rs)
{
	json_t *o = json_object(), *a;
	char *text;

	if (!o)
		return NULL;
	if (rs->overall_code)
		rj_set(o, "overallCode", rj_enum(rs->overall_code, rj_codes, 3));
	if (rs->n_statuses && (a = json_array())) {
		for (size_t i = 0; i < rs->n_statuses; i++)
			json_array_append_new(a, rj_status(&rs->statuses[i]));
		rj_set(o, "statuses", a);
	}
	if (rs->n_response_headers)
		rj_set(o, "responseHeadersToAdd",
		       rj_headers(rs->response_headers, rs->n_response_headers));
	if (rs->n_request_headers)
		rj_set(o, "requestHeadersToAdd",
		       rj_headers(rs->request_headers, rs->n_request_headers));
	if (rs->raw_body.len)
		rj_set(o, "rawBody", rj_base64(rs->raw_body.ptr, rs->raw_body.len));
	text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(o);
	return text;
}
