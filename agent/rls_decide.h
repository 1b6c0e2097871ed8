/*
 * rls_decide.h - Envoy's rate limit service decided (docs/ENVOY.md, "The
 * decision"): a decoded RateLimitRequest (agent/rls_wire.h) made the
 * requests of one decision of the decision layer (agent/decide.h), and
 * that decision made a RateLimitResponse. The one place for every front
 * that speaks the service: the gRPC front (ShouldRateLimit) and the HTTP
 * front's /json; neither maps a descriptor or a status itself.
 *
 * No I/O, no clock, no allocation: the caller owns a struct rls_call
 * (per stream or per HTTP request, reused from one request to the next)
 * and keeps it, unmoved, until its answer is written. Nothing of the
 * decoded request (views into the caller's bytes) nor of the descriptor
 * tree (freed by a reload) is read after step 1: what the answer needs is
 * copied into the call. Two steps around decide_run():
 *
 *   struct rls_call *c = ...;               the front's, one per request
 *   if (rls_decide_requests(c, rl, &rq, trusted, front) < 0)
 *           answer c->status, c->why;       refused whole, nothing counted
 *   else if (c->nrq == 0)
 *           rls_decide_answer(c, NULL, 0, &resp);   nothing to count
 *   else if (!(p = decide_run(d, c->rq, c->nrq, now, c->parts, RLS_DECIDE_BATCH, &np, owner)))
 *           rls_decide_answer(c, c->parts, np, &resp);   decided now
 *   else    later, in owner->deliver(owner, p) (a store, a delay):
 *           parts = decide_pending_results(p, &np);
 *           rls_decide_answer(c, parts, np, &resp);
 *           decide_pending_release(d, p);
 *   rls_decide_answer() < 0: answer c->status, c->why; else encode resp
 *   (rls_response_encode, or JSON), whose views point into c.
 *
 * The mapping (envoyproxy/ratelimit's, src/service/ratelimit.go):
 *
 * - domain -> the namespace of that name (agent/config_envoy.c) and its
 *   descriptor tree (struct ns_def's envoy; a namespace without one has
 *   an empty tree). No such namespace: every descriptor matches nothing,
 *   OK, as envoyproxy/ratelimit answers an unknown domain. An empty domain,
 *   or no descriptor: refused, UNKNOWN, with envoyproxy/ratelimit's words
 *   ("rate limit domain must not be empty", "rate limit descriptor list
 *   must not be empty").
 * - each descriptor matched (envoy_match) -> its limit: key (envoy_match_key),
 *   window (the limit's), limit (requests_per_unit), window_type. A
 *   descriptor with the `limit` override is counted in the override's
 *   unit (a window of the namespace, else the decision's error) under the
 *   key of its entries; where the tree has a limit in that same window,
 *   the namespace's caller_limit says which counts ("lower": the smaller,
 *   "any": the override, "none": the tree's); where it has none, only a
 *   trusted caller's override counts (the gRPC front: Envoy is the
 *   operator's; /json: with http_admin_token), others only with
 *   caller_limit "any" (else refused, INVALID_ARGUMENT). An override is
 *   never in shadow mode and replaces nothing, as there.
 * - cost: the descriptor's hits_addend when sent (0: check only, nothing
 *   counted), else the request's, else 1 (Envoy's default). Over
 *   DECIDE_COST_MAX: refused, INVALID_ARGUMENT. A domain's namespace has no
 *   max_cost unless it sets one (agent/config_envoy.c): a cost over the
 *   limit is simply over it, as there.
 * - a descriptor without a limit (no match, no override, replaced by
 *   another's `replaces`) is status OK without current_limit, not counted;
 *   `unlimited` is OK with limit_remaining 4294967295, not counted; a
 *   `shadow_mode` limit is counted and decided but answers OK (the
 *   decision's shadow: it denies nothing, the others are decided without
 *   it).
 * - every counted descriptor is one request of ONE decision (decide_run:
 *   with count_denied false, a denied request charges none of them). At
 *   most RLS_DECIDE_BATCH (DECIDE_MAX_BATCH, 32) of a request's
 *   descriptors may be counted, of the RLS_DESCRIPTORS_MAX (64) it may
 *   carry: more is refused whole, RESOURCE_EXHAUSTED, nothing counted (two
 *   decisions would not be one; the descriptors that count nothing,
 *   unlimited, replaced, unmatched, are not bounded by it).
 * - the answer: statuses in the descriptors' order, each counted one with
 *   code (OVER_LIMIT when its part is exceeded), current_limit
 *   {requests_per_unit: the limit decided against, unit: the window's when
 *   it is one (a 90 s window: UNKNOWN, which Envoy cannot describe), name:
 *   the limit's}, limit_remaining, duration_until_reset (whole seconds);
 *   overall_code OVER_LIMIT when any status is; response_headers_to_add
 *   RateLimit-Policy and RateLimit (every counted limit; the policy is
 *   named after the domain, "domain-I" with several, I the descriptor's
 *   index) as the HTTP front writes them (agent/http_answer.h), and on
 *   OVER_LIMIT Retry-After and Content-Type: application/problem+json with
 *   raw_body the problem document (RFC 9457, quota-exceeded, the violated
 *   policies). A part in error (an override's window the namespace does
 *   not have, a caller's override refused) makes the answer an error
 *   (INVALID_ARGUMENT, its text); the counter table's refusal is answered
 *   as on_table_full says (deny: OVER_LIMIT; else OK, uncounted).
 */
#ifndef RLS_DECIDE_H
#define RLS_DECIDE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/decide.h"
#include "agent/rls_wire.h"

struct rl;

#define RLS_DECIDE_BATCH    DECIDE_MAX_BATCH  /* descriptors counted per request */
#define RLS_DECIDE_KEYS     16384u  /* bytes of the counted descriptors' keys (step 1) */
#define RLS_DECIDE_NAMES    2048u   /* bytes of their limits' names (answer) */
#define RLS_DECIDE_FIELD    4096u   /* bytes of a RateLimit-Policy or RateLimit value */
#define RLS_DECIDE_BODY     2048u   /* bytes of the problem document */
#define RLS_DECIDE_HEADERS  4u      /* RateLimit-Policy, RateLimit, Retry-After,
				       Content-Type */
#define RLS_DECIDE_DENY_STATUS 429  /* the status the problem names: Envoy's */

/* What step 1 made of a descriptor, for the answer. */
enum rls_desc_kind {
	RLS_DESC_NONE = 0,            /* no limit: OK, not counted */
	RLS_DESC_UNLIMITED,           /* OK, limit_remaining UINT32_MAX */
	RLS_DESC_COUNTED,             /* rq[part] of the decision */
	RLS_DESC_KIND_COUNT
};

struct rls_call_desc {
	uint8_t kind;                 /* enum rls_desc_kind */
	uint8_t part;                 /* COUNTED: its request, rq[part] */
	int32_t unit;                 /* enum rls_unit of its window */
	uint32_t name_off, name_len;  /* its limit's name in names[] (len 0: none) */
};

/* One RateLimitRequest on its way through. The caller reads rq[], nrq,
 * parts[] (decide_run's room), status and why; the rest is this module's.
 * Sized once (45 KiB): a front keeps a few and reuses them. */
struct rls_call {
	/* step 1's output, decide_run's input (key, ns views into this call) */
	struct rl_request rq[RLS_DECIDE_BATCH];
	size_t nrq;
	struct rl_decision parts[RLS_DECIDE_BATCH];   /* decide_run's parts[] */
	/* refused (either step): the gRPC status and a static text */
	enum rls_grpc_status status;
	const char *why;
	/* private */
	struct rls_call_desc desc[RLS_DESCRIPTORS_MAX];
	size_t ndesc;
	uint8_t rq_desc[RLS_DECIDE_BATCH];  /* rq[i]'s descriptor */
	char domain[NS_NAME_MAX];     /* the domain, when it names a namespace */
	char keys[RLS_DECIDE_KEYS];
	char names[RLS_DECIDE_NAMES];
	size_t names_len;
	/* the answer's text and arrays: resp's views point here */
	struct rls_status statuses[RLS_DESCRIPTORS_MAX];
	struct rls_header headers[RLS_DECIDE_HEADERS];
	char policy[RLS_DECIDE_FIELD];
	char ratelimit[RLS_DECIDE_FIELD];
	char retry_after[24];
	char body[RLS_DECIDE_BODY];
};

/* Step 1: rq (decoded by rls_request_decode) into c->rq[0..c->nrq), the
 * requests of one decision, through rl's namespaces and their trees
 * (rl: the worker's library, as decide_run's). trusted: the caller may
 * name a limit (the `limit` override) where its domain has none (above);
 * front: enum front_id, for the metrics. Returns 0 (c->nrq may be 0:
 * nothing to count, answer at once), or -1 with c->status and c->why
 * (nothing counted). c is reset first: a call may be reused once its
 * answer is written. */
int rls_decide_requests(struct rls_call *c, const struct rl *rl, const struct rls_request *rq,
			bool trusted, int front);

/* Step 2: the decision's parts[0..np) (decide_run's, or a delivered
 * pending's; none when c->nrq was 0) into *out, whose arrays and strings
 * are c's (valid until c is reset). Returns 0, or -1 with c->status
 * (INVALID_ARGUMENT) and c->why (the part's error) when a part could not
 * be decided. */
int rls_decide_answer(struct rls_call *c, const struct rl_decision *parts, size_t np,
		      struct rls_response *out);

#endif /* RLS_DECIDE_H */
