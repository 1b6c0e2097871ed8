/*
 * rls_decide.c - Envoy's rate limit service decided (see rls_decide.h):
 * a RateLimitRequest's descriptors matched against their domain's tree
 * and made the requests of one decision, that decision made a
 * RateLimitResponse. Writes only the caller's struct rls_call; the
 * RateLimit fields and the problem document are the HTTP front's
 * writers (agent/http_answer.h), called with this call's policy names.
 */
#include "agent/rls_decide.h"

#include <stdio.h>
#include <string.h>

#include "agent/envoy_match.h"
#include "agent/http_answer.h"
#include "agent/ns.h"
#include "agent/ratelimit.h"

/* What step 1 decided for one descriptor before the replaces are known. */
struct rls_plan {
	const struct envoy_limit *lim;  /* the tree's limit that applies, or NULL */
	bool matched;                   /* m holds the match (share patterns) */
	bool override;                  /* the request's `limit` counts */
	uint32_t window;
	int64_t limit;
	int32_t unit;
};

static int rls_refuse(struct rls_call *c, enum rls_grpc_status status, const char *why)
{
	c->status = status;
	c->why = why;
	c->nrq = 0;
	return -1;
}

/* The override of descriptor d against the tree's limit lim (or NULL) in
 * namespace nsc: *pl filled; -1 when a caller may not name it. */
static int rls_override(struct rls_call *c, const struct rls_descriptor *d,
			const struct envoy_limit *lim, const struct ns_def *nsc, bool trusted,
			struct rls_plan *pl)
{
	uint32_t window = envoy_unit_seconds(d->limit_unit);
	bool same = lim && (lim->unlimited || lim->window == window);

	if (window == 0)
		return rls_refuse(c, RLS_GRPC_INVALID_ARGUMENT,
				  "a descriptor's limit override has no known unit");
	if (same && nsc->caller_limit == NS_CALLER_NONE)
		return 0;       /* ignored: the tree's limit stands */
	if (!same && !trusted && nsc->caller_limit != NS_CALLER_ANY)
		return rls_refuse(c, RLS_GRPC_INVALID_ARGUMENT,
				  "a limit override where the domain configures none: a trusted "
				  "caller's only (or caller_limit \"any\")");
	pl->override = true;
	pl->window = window;
	pl->unit = d->limit_unit;
	pl->limit = d->limit_requests_per_unit;
	if (same && !lim->unlimited && nsc->caller_limit == NS_CALLER_LOWER &&
	    lim->requests_per_unit < d->limit_requests_per_unit)
		pl->limit = lim->requests_per_unit;
	return 0;
}

/* Is name (the limit of a plan) among the replaces of any plan's limit? */
static bool rls_replaced(const struct rls_plan *plans, size_t n, const char *name)
{
	if (!name || !name[0])
		return false;
	for (size_t j = 0; j < n; j++) {
		const struct envoy_limit *l = plans[j].lim;

		for (size_t r = 0; l && r < l->n_replaces; r++)
			if (strcmp(l->replaces[r], name) == 0)
				return true;
	}
	return false;
}

/* The limit's name copied into c (left out when c has no room). */
static void rls_keep_name(struct rls_call *c, struct rls_call_desc *cd, const char *name)
{
	size_t n = name ? strlen(name) : 0;

	cd->name_off = cd->name_len = 0;
	if (n == 0 || n > sizeof(c->names) - c->names_len)
		return;
	memcpy(c->names + c->names_len, name, n);
	cd->name_off = (uint32_t)c->names_len;
	cd->name_len = (uint32_t)n;
	c->names_len += n;
}

int rls_decide_requests(struct rls_call *c, const struct rl *rl, const struct rls_request *rq,
			bool trusted, int front)
{
	static char scratch[ENVOY_NAME_MAX];   /* a level's "key_value" (one worker, one thread) */
	struct envoy_match m[RLS_DESCRIPTORS_MAX];
	struct rls_plan plans[RLS_DESCRIPTORS_MAX];
	const struct ns_def *nsc;
	size_t keys = 0;
	int ns;

	c->nrq = c->ndesc = c->names_len = 0;
	c->status = RLS_GRPC_OK;
	c->why = NULL;
	c->domain[0] = '\0';
	if (rq->domain.len == 0)
		return rls_refuse(c, RLS_GRPC_UNKNOWN, "rate limit domain must not be empty");
	if (rq->n_descriptors == 0)
		return rls_refuse(c, RLS_GRPC_UNKNOWN, "rate limit descriptor list must not be empty");
	if (rq->n_descriptors > RLS_DESCRIPTORS_MAX)
		return rls_refuse(c, RLS_GRPC_RESOURCE_EXHAUSTED, rls_err_str(RLS_ERR_DESCRIPTORS));
	c->ndesc = rq->n_descriptors;
	memset(c->desc, 0, c->ndesc * sizeof(c->desc[0]));
	/* An unknown domain limits nothing, as envoyproxy/ratelimit's. */
	ns = rq->domain.len < NS_NAME_MAX ? rl_namespace_index(rl, rq->domain.ptr, rq->domain.len)
					  : -1;
	if (ns < 0)
		return 0;
	nsc = rl_namespace_def(rl, ns);
	memcpy(c->domain, rq->domain.ptr, rq->domain.len);
	c->domain[rq->domain.len] = '\0';

	for (size_t i = 0; i < c->ndesc; i++) {
		const struct rls_descriptor *d = &rq->descriptors[i];
		struct rls_plan *pl = &plans[i];

		memset(pl, 0, sizeof(*pl));
		if (d->n_entries == 0)
			continue;       /* matches nothing, not even an override */
		if (nsc->envoy && envoy_match(nsc->envoy, d->entries, d->n_entries, scratch,
					      sizeof(scratch), &m[i])) {
			pl->lim = m[i].limit;
			pl->matched = true;
		}
		if (d->has_limit && rls_override(c, d, pl->lim, nsc, trusted, pl) < 0)
			return -1;
	}
	for (size_t i = 0; i < c->ndesc; i++) {
		const struct rls_descriptor *d = &rq->descriptors[i];
		const struct rls_plan *pl = &plans[i];
		const struct envoy_limit *lim = pl->override ? NULL : pl->lim;
		struct rls_call_desc *cd = &c->desc[i];
		struct rl_request *r;
		uint64_t cost = d->has_hits_addend ? d->hits_addend
			      : rq->hits_addend ? rq->hits_addend : 1;
		long klen;

		if (!pl->override && (!lim || rls_replaced(plans, c->ndesc, lim->name)))
			continue;                       /* RLS_DESC_NONE */
		if (lim && lim->unlimited) {
			cd->kind = RLS_DESC_UNLIMITED;
			continue;
		}
		if ((double)cost > DECIDE_COST_MAX)
			return rls_refuse(c, RLS_GRPC_INVALID_ARGUMENT, "hits_addend over 10^12");
		if (c->nrq == RLS_DECIDE_BATCH)
			return rls_refuse(c, RLS_GRPC_RESOURCE_EXHAUSTED,
					  "more than 32 descriptors with a limit in one request");
		klen = envoy_match_key(pl->matched ? &m[i] : NULL, d->entries, d->n_entries,
				       c->keys + keys, sizeof(c->keys) - keys);
		if (klen <= 0)
			return rls_refuse(c, RLS_GRPC_RESOURCE_EXHAUSTED,
					  "the counted descriptors' keys are over 16384 bytes");
		r = &c->rq[c->nrq];
		*r = (struct rl_request){
			.ns = c->domain, .ns_len = rq->domain.len,
			.key = c->keys + keys, .key_len = (size_t)klen,
			.window = pl->override ? pl->window : lim->window,
			.cost = (double)cost,
			.has_limit = true,
			.limit = pl->override ? pl->limit : lim->requests_per_unit,
			.window_type = lim ? lim->window_type : DECIDE_WT_DEFAULT,
			.admission = DECIDE_ADMIT_DEFAULT,
			.shadow = lim && lim->shadow_mode,
			.front = front,
		};
		keys += (size_t)klen;
		cd->kind = RLS_DESC_COUNTED;
		cd->part = (uint8_t)c->nrq;
		cd->unit = pl->override ? pl->unit : (int32_t)lim->unit;
		rls_keep_name(c, cd, lim ? lim->name : NULL);
		c->rq_desc[c->nrq++] = (uint8_t)i;
	}
	return 0;
}

/* ---- the answer ---- */

/* A part's policy (http_policy_name_fn): the domain, "domain-I" with
 * several counted descriptors, I the descriptor's index. */
static const char *rls_policy_name(const void *ctx, const struct rl_decision *part, size_t k,
				   bool several, char *out, size_t cap)
{
	const struct rls_call *c = ctx;

	(void)k;
	if (several)
		snprintf(out, cap, "%s-%u", c->domain, (unsigned)c->rq_desc[part->req]);
	else
		snprintf(out, cap, "%s", c->domain);
	return out;
}

static uint32_t rls_u32(int64_t v)
{
	return v < 0 ? 0 : v > (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

static void rls_header(struct rls_response *out, const char *key, const char *value)
{
	struct rls_header *h = &out->response_headers[out->n_response_headers++];

	h->key = (struct pb_str){ key, strlen(key) };
	h->value = (struct pb_str){ value, strlen(value) };
}

/* The status of descriptor cd, decided by part p (NULL: not counted). */
static void rls_status_of(const struct rls_call *c, const struct rls_call_desc *cd,
			  const struct rl_decision *p, struct rls_status *st)
{
	const struct rl_request *r = &c->rq[cd->part];

	memset(st, 0, sizeof(*st));
	st->code = RLS_CODE_OK;
	if (cd->kind == RLS_DESC_UNLIMITED)
		st->limit_remaining = UINT32_MAX;
	if (cd->kind != RLS_DESC_COUNTED || !p)
		return;
	if (p->exceeded)
		st->code = RLS_CODE_OVER_LIMIT;
	st->has_current_limit = true;
	st->current_limit.requests_per_unit = rls_u32(p->error ? r->limit : p->limit);
	st->current_limit.unit = cd->unit;
	st->current_limit.name = (struct pb_str){ c->names + cd->name_off, cd->name_len };
	st->limit_remaining = p->error ? 0 : rls_u32(p->remaining);
	if (!p->error && p->reset > 0) {
		st->has_duration_until_reset = true;
		st->reset_seconds = p->reset;
	}
}

int rls_decide_answer(struct rls_call *c, const struct rl_decision *parts, size_t np,
		      struct rls_response *out)
{
	const struct rl_decision *of[RLS_DECIDE_BATCH] = { NULL };
	bool several = c->nrq > 1, over = false;
	int64_t retry = 0;
	size_t o;

	for (size_t k = 0; k < np; k++) {
		if (parts[k].error && !parts[k].refused)
			return rls_refuse(c, RLS_GRPC_INVALID_ARGUMENT, parts[k].error);
		if (parts[k].req < c->nrq)
			of[parts[k].req] = &parts[k];
		if (parts[k].exceeded && parts[k].retry_after > retry)
			retry = parts[k].retry_after;
	}
	memset(out, 0, sizeof(*out));
	out->statuses = c->statuses;
	out->n_statuses = out->max_statuses = c->ndesc;
	out->response_headers = c->headers;
	out->max_response_headers = RLS_DECIDE_HEADERS;
	for (size_t i = 0; i < c->ndesc; i++) {
		const struct rls_call_desc *cd = &c->desc[i];

		rls_status_of(c, cd, cd->kind == RLS_DESC_COUNTED ? of[cd->part] : NULL,
			      &c->statuses[i]);
		over = over || c->statuses[i].code == RLS_CODE_OVER_LIMIT;
	}
	out->overall_code = over ? RLS_CODE_OVER_LIMIT : RLS_CODE_OK;
	o = 0;
	c->policy[0] = c->ratelimit[0] = '\0';
	if (http_ratelimit_field(c->policy, sizeof(c->policy), &o, true, parts, np, several,
				 rls_policy_name, c) > 0) {
		o = 0;
		http_ratelimit_field(c->ratelimit, sizeof(c->ratelimit), &o, false, parts, np,
				     several, rls_policy_name, c);
		rls_header(out, "ratelimit-policy", c->policy);
		rls_header(out, "ratelimit", c->ratelimit);
	}
	if (!over)
		return 0;
	snprintf(c->retry_after, sizeof(c->retry_after), "%lld", (long long)(retry > 0 ? retry : 1));
	rls_header(out, "retry-after", c->retry_after);
	rls_header(out, "content-type", "application/problem+json");
	o = 0;
	http_put(c->body, sizeof(c->body), &o, "{");
	http_problem_members(c->body, sizeof(c->body), &o, RLS_DECIDE_DENY_STATUS, parts, np,
			     several, rls_policy_name, c);
	http_put(c->body, sizeof(c->body), &o, "}");
	out->raw_body = (struct pb_str){ c->body, o };
	return 0;
}
