/*
 * rls_json.h - Envoy's rate limit service in protobuf's JSON mapping
 * (proto3 JSON, as envoyproxy/ratelimit's /json reads and writes it with
 * protojson): a RateLimitRequest read from JSON into the struct
 * rls_request the codec would have decoded (agent/rls_wire.h), and a
 * RateLimitResponse written as JSON. The HTTP front's /json (docs/HTTP.md)
 * is its caller; the decision is agent/rls_decide.h's.
 *
 * Read as protojson reads: a field by its JSON name or its proto name
 * (`hitsAddend` or `hits_addend`), null for its default; integers as
 * numbers or decimal strings; enums by name or number; an unknown field,
 * a field given twice, a value of the wrong type, a negative or too large
 * integer refused. Written as protojson writes: JSON names, default
 * values left out, enums by name, a Duration as "Ns", bytes in base64.
 *
 * A per-request call of an endpoint that is not the hot path: it uses
 * jansson, which allocates; the caller frees what it is given.
 */
#ifndef RLS_JSON_H
#define RLS_JSON_H

#include <stddef.h>

#include "agent/rls_wire.h"

struct json_t;

#define RLS_JSON_ENTRIES  512u     /* entries of all descriptors of one request */

/* The caller's room for one request read from JSON. */
struct rls_json_request {
	struct rls_request rq;         /* views into the returned document */
	struct rls_descriptor descriptors[RLS_DESCRIPTORS_MAX];
	struct rls_entry entries[RLS_JSON_ENTRIES];
};

/* Reads body[0..len) into *out (arrays included). Returns the parsed
 * document, which out->rq's strings point into (json_decref() it once
 * they are no longer needed), or NULL with *why (a static text). */
struct json_t *rls_json_request_read(const char *body, size_t len,
				     struct rls_json_request *out, const char **why);

/* The response as JSON text (NUL-terminated, malloc'd: the caller frees
 * it), or NULL (out of memory). */
char *rls_json_response_write(const struct rls_response *rs);

#endif /* RLS_JSON_H */
