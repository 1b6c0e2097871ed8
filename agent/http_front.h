/*
 * http_front.h - the HTTP front (docs/HTTP.md): the same decisions as
 * SPOP, over HTTP/1.1 on the worker's loop, for nginx's auth_request and
 * any HTTP client.
 *
 *   GET /ratelimit?key=K&window=W&limit=L&namespace=NS&cost=C&window_type=T
 *       200 allowed, http_deny_status (429) when exceeded, 400 for a bad
 *       request; RateLimit-Policy / RateLimit headers, Retry-After when
 *       denied; a small JSON body with the same variables as SPOP.
 *   POST /json     Envoy's RateLimitRequest in protobuf's JSON mapping, its
 *       RateLimitResponse back (agent/rls_json.h, agent/rls_decide.h):
 *       200 OK, 429 OVER_LIMIT, 400 for a bad request
 *   GET /metrics   Prometheus text (agent/metrics.h, docs/METRICS.md)
 *   GET /healthz   200 "ok"
 *
 * Keep-alive and pipelining (answers in order), strict parsing
 * (agent/http_parse.h), the timeouts and caps of SPOP connections:
 * frame_timeout_ms for one request head, idle_timeout_ms between
 * requests, max_connections and max_buffer_memory shared with SPOP.
 */
#ifndef HTTP_FRONT_H
#define HTTP_FRONT_H

#include <ev.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/decide.h"
#include "agent/http_admin.h"
#include "agent/http_answer.h"
#include "agent/stream.h"

struct http_json;

/* An HTTP connection: the front `http_front` (agent/stream.h) opens them. */
struct http_conn {
	struct stream s;                  /* first: socket, watchers, buffers */
	size_t scanned;                   /* head scanned so far (http_head_end) */
	size_t skip;                      /* body bytes still to discard */
	size_t want;                      /* bytes of a POST (head and body) awaited
	                                     whole in the read buffer, or 0 */
	struct http_json *json;           /* /json's room, made at its first
	                                     request, kept with the connection */
	struct decide_owner owner;        /* the request waiting (a store, a delay):
	                                     one, answers go in request order */
	struct admin_wait admin;          /* a /keys request waiting for its store */
	struct http_ctx admin_x;          /* ... and how to answer it */
	bool admin_waiting;               /* admin is waiting */
	bool closing;                     /* close once the output is sent */
	bool grace;                       /* closing: the flush timer runs */
};

/* The owner's deliver: writes the held answer. */
void http_deliver(struct decide_owner *owner, struct decide_pending *p);

#endif /* HTTP_FRONT_H */
