/*
 * http_front.c - HTTP/1.1 connections and routes (see http_front.h).
 * Requests are parsed in place in the read buffer (agent/http_parse.c);
 * answers (agent/http_answer.c writes their text; the admin endpoints'
 * bodies are agent/http_admin.c's) are appended to the write buffer, in
 * request order, and sent with one write per batch. A request whose namespace answers from the store (sync_rate 0)
 * holds the connection's later requests until it is answered.
 */
#include "agent/http_front.h"
#include "strategies/container.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/config.h"
#include "agent/decide.h"
#include "agent/reserve.h"
#include "agent/http_admin.h"
#include "agent/http_answer.h"
#include "agent/http_parse.h"
#include "agent/log.h"
#include "agent/metrics.h"
#include "agent/metrics_page.h"
#include "agent/rls_decide.h"
#include "agent/rls_json.h"

#include <jansson.h>

/* Buffers start small (an nginx check is a head of a few hundred bytes
 * and one answer) and grow, within the front's budget, for a long head or
 * a pipelined batch: an idle connection holds 6 KiB. */
#define HTTP_RBUF       2048            /* a head, to start with */
#define HTTP_RBUF_MAX   HTTP_HEAD_MAX   /* one head at a time */
#define HTTP_WBUF       4096            /* answers, to start with */
#define HTTP_WBUF_MAX   16384           /* answers of a pipelined batch */
#define HTTP_CLOSE_GRACE 1.0            /* seconds to flush a last answer */
#define HTTP_METRICS_MAX (256u << 10)   /* the text of GET /metrics */
#define HTTP_TAG_HEAD   1u              /* a held decision's tag[0]: a HEAD */
#define HTTP_TAG_JSON   2u              /* ... of /json */

/* /json's room (agent/rls_decide.h, agent/rls_json.h): one request of the
 * connection at a time, as every answer of HTTP/1.1 goes in order. */
struct http_json {
	struct rls_call call;
	struct rls_json_request req;
	struct rls_response resp;
};

static void http_on_io(struct ev_loop *loop, ev_io *io, int revents);
static void http_on_timer(struct ev_loop *loop, ev_timer *t, int revents);
static void http_continue(struct http_conn *c);
static void admin_forgot(void *owner);
static int http_reserve(struct http_conn *c, size_t need);

/* Does an answer wait for a store (a decision, a /keys request)? */
static bool http_waits(const struct http_conn *c)
{
	return c->owner.list || c->admin_waiting;
}

static void http_close(struct http_conn *c)
{
	if (c->s.dead)
		return;
	decide_pending_detach_all(&c->owner);
	if (c->admin_waiting) {
		admin_wait_detach(&c->admin);
		c->admin_waiting = false;
	}
	stream_close(&c->s);
}

static void http_update_events(struct http_conn *c)
{
	stream_watch(&c->s, !c->closing && !http_waits(c));
}

/* Sends queued output; a closing connection closes once all is sent and
 * nothing waits for a store. Returns 0, or -1 when it was closed. */
static int http_flush(struct http_conn *c)
{
	if (stream_send(&c->s) < 0 || (c->s.wlen == 0 && c->closing && !http_waits(c))) {
		http_close(c);
		return -1;
	}
	return 0;
}

/* ---- /ratelimit ---- */

static bool is(const char *s, size_t n, const char *lit)
{
	return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

/* An id argument: the lease of POST /release, the reservation of POST
 * /settle. */
struct http_lease_arg {
	const char *id;
	size_t len;
	bool given;
};

/* What POST /release and POST /settle take beyond a request. */
struct http_ids {
	struct http_lease_arg lease, reservation;
	bool cost_given;
};

/* Builds the request from the query. Decoded values go to dec (the
 * strings of rq point into it). Returns NULL or why it is a bad request. */
static const char *query_request(const char *query, size_t qlen, char *dec, size_t cap,
				 struct rl_request *rq, struct http_ids *ids)
{
	static const char *const names[] = { "key", "window", "limit", "namespace", "cost",
					     "window_type", "admission", "lease", "reservation",
					     "reserve" };
	bool seen[sizeof(names) / sizeof(names[0])] = { false };
	struct http_query_iter it;
	const char *n, *v;
	size_t nl, vl, used = 0;
	char name[32];

	*rq = (struct rl_request){ .cost = 1, .window_type = DECIDE_WT_DEFAULT };
	http_query_init(&it, query, qlen);
	while (http_query_next(&it, &n, &nl, &v, &vl) == 1) {
		long k = http_pct_decode(n, nl, name, sizeof(name));
		if (k < 0)
			continue;     /* not one of ours: ignored, as unknown names are */
		size_t i;
		for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			if (is(name, (size_t)k, names[i]))
				break;
		if (i == sizeof(names) / sizeof(names[0]))
			continue;     /* unknown arguments are ignored */
		if (seen[i])
			return "duplicate argument";
		seen[i] = true;
		long len = http_pct_decode(v, vl, dec + used, cap - used);
		if (len < 0)
			return "bad percent-encoding";
		const char *val = dec + used;
		used += (size_t)len;
		uint64_t u;
		switch (i) {
		case 0:
			rq->key = val;
			rq->key_len = (size_t)len;
			break;
		case 1:
			if (!decide_parse_uint(val, (size_t)len, &u) || u == 0 || u > UINT32_MAX)
				return "bad window";
			rq->window = (uint32_t)u;
			break;
		case 2:
			if (!decide_parse_uint(val, (size_t)len, &u) || u > (uint64_t)DECIDE_COST_MAX)
				return "bad limit";
			rq->has_limit = true;
			rq->limit = (int64_t)u;
			break;
		case 3:
			rq->ns = val;
			rq->ns_len = (size_t)len;
			break;
		case 4:
			if (!decide_parse_cost(val, (size_t)len, &rq->cost))
				return "bad cost";
			if (ids)
				ids->cost_given = true;
			break;
		case 5:
			if (is(val, (size_t)len, "sliding"))
				rq->window_type = DECIDE_WT_SLIDING;
			else if (is(val, (size_t)len, "fixed"))
				rq->window_type = DECIDE_WT_FIXED;
			else
				return "bad window_type";
			break;
		case 6:
			if ((rq->admission = decide_parse_admission(val, (size_t)len)) < 0)
				return "bad admission";
			break;
		case 7:         /* POST /release only: elsewhere ignored */
		case 8:         /* POST /settle only */
			if (ids) {
				struct http_lease_arg *id = i == 7 ? &ids->lease : &ids->reservation;
				id->id = val;
				id->len = (size_t)len;
				id->given = true;
			}
			break;
		case 9:
			if (is(val, (size_t)len, "true") || is(val, (size_t)len, "1"))
				rq->reserve = true;
			else if (!is(val, (size_t)len, "false") && !is(val, (size_t)len, "0"))
				return "bad reserve";
			break;
		}
	}
	return NULL;
}

/* The key and the namespace may come as fields instead, taken as opaque
 * bytes (nginx passes a client's value without escaping it). */
static const char *header_request(const struct http_request *req, struct rl_request *rq)
{
	if (req->rl_key) {
		if (rq->key)
			return "key given twice (query and X-RateLimit-Key)";
		rq->key = req->rl_key;
		rq->key_len = req->rl_key_len;
	}
	if (req->rl_namespace) {
		if (rq->ns)
			return "namespace given twice (query and X-RateLimit-Namespace)";
		rq->ns = req->rl_namespace;
		rq->ns_len = req->rl_namespace_len;
	}
	return NULL;
}

/* Does "Authorization: Bearer <token>" carry the token want? Its bytes
 * are compared in a time that depends on its length only, not on how much
 * of it a guess got right. No token configured: everyone may. */
static bool token_ok(const char *want, const struct http_request *req)
{
	const char *got = req->authorization;
	size_t wl = strlen(want), gl;
	unsigned diff = 0;

	if (wl == 0)
		return true;
	if (!got || req->authorization_len < 7 || strncasecmp(got, "bearer ", 7) != 0)
		return false;
	got += 7;
	gl = req->authorization_len - 7;
	while (gl > 0 && *got == ' ') {
		got++;
		gl--;
	}
	diff = gl != wl;
	for (size_t i = 0; i < wl; i++)
		diff |= (unsigned char)want[i] ^ (unsigned char)(i < gl ? got[i] : 0);
	return diff == 0;
}

static bool authorized(const struct config *cfg, const struct http_request *req)
{
	return token_ok(cfg->http_token, req);
}

static void unauthorized(struct http_conn *c, const struct http_ctx *x)
{
	metrics_add(&metrics_me->errors[METRICS_ERR_UNAUTHORIZED], 1);
	http_answer(c, x, 401, "application/json",
		    "WWW-Authenticate: Bearer realm=\"spoa-ratelimit\"\r\n",
		    "{\"error\":\"unauthorized\"}\n");
}

static void ratelimit(struct http_conn *c, const struct http_request *req,
		      const struct http_ctx *x)
{
	char dec[HTTP_LINE_MAX];
	struct rl_request rq;
	struct rl_decision r[NS_MAX_WINDOWS];
	double now = rl_now();

	/* The admin token opens the checks too, as a trusted caller (docs/HTTP.md,
	 * the trust model). */
	const struct config *cfg = c->s.env->cfg;
	bool admin = cfg->http_admin_token[0] && token_ok(cfg->http_admin_token, req);
	if (!admin && !authorized(cfg, req)) {
		unauthorized(c, x);
		return;
	}
	const char *why = query_request(req->query, req->query_len, dec, sizeof(dec), &rq, NULL);
	if (!why)
		why = header_request(req, &rq);
	rq.arg_error = why;
	rq.untrusted = !admin;
	rq.front = FRONT_HTTP;
	size_t np;
	struct decide_pending *p = decide_run(c->s.env->decide, &rq, 1, now, r, NS_MAX_WINDOWS,
					      &np, &c->owner);
	if (p) {
		/* It waits for a store, or is delayed: answered later. */
		uint64_t *tag = decide_pending_tag(p);
		tag[0] = x->head ? HTTP_TAG_HEAD : 0;
		tag[1] = x->keep_alive;
		tag[2] = (uint64_t)x->minor;
		return;
	}
	http_answer_decision(c, x, r, np);
}

/* POST /release?namespace=&key=[&lease=]: a concurrency namespace's
 * lease given back (docs/HTTP.md, "POST /release"), with the token of
 * /ratelimit. 200 {"released": true|false}: a lease given back already,
 * expired, unknown or forged frees nothing and is no error; without
 * `lease`, any one lease of the key. 400: a bad request. */
static void release(struct http_conn *c, const struct http_request *req,
		    const struct http_ctx *x)
{
	const struct config *cfg = c->s.env->cfg;
	char dec[HTTP_LINE_MAX];
	struct rl_request rq;
	struct http_ids ids = { .lease.id = NULL };
	struct http_lease_arg lease;
	bool admin = cfg->http_admin_token[0] && token_ok(cfg->http_admin_token, req);

	if (!admin && !authorized(cfg, req)) {
		unauthorized(c, x);
		return;
	}
	const char *why = query_request(req->query, req->query_len, dec, sizeof(dec), &rq, &ids);
	lease = ids.lease;
	if (!why)
		why = header_request(req, &rq);
	rq.arg_error = why;
	/* An empty lease (a request that took none) frees nothing: an id that
	 * names no lease, the request checked all the same. */
	if (lease.given && lease.len == 0) {
		lease.id = "-";
		lease.len = 1;
	}
	int rc = decide_release(c->s.env->decide, &rq, lease.id, lease.len, rl_now(), &why);
	if (rc < 0) {
		http_answer_error(c, x, 400, why);
		return;
	}
	http_answer(c, x, 200, "application/json", "",
		    rc > 0 ? "{\"released\":true}\n" : "{\"released\":false}\n");
}

/* POST /settle?reservation=&cost=: a reservation settled at the actual
 * cost; POST /settle?namespace=&key=[&window=]&cost=: a cost charged after
 * the fact, never denied (docs/HTTP.md, "POST /settle"), with the token
 * of /ratelimit. 200 {"settled": true|false}: a reservation settled
 * already, expired, forged or empty does nothing and is no error. 400: a
 * bad request. */
static void settle(struct http_conn *c, const struct http_request *req,
		   const struct http_ctx *x)
{
	const struct config *cfg = c->s.env->cfg;
	char dec[HTTP_LINE_MAX];
	struct rl_request rq;
	struct http_ids ids = { .lease.id = NULL };
	bool admin = cfg->http_admin_token[0] && token_ok(cfg->http_admin_token, req);
	int rc = 0;

	if (!admin && !authorized(cfg, req)) {
		unauthorized(c, x);
		return;
	}
	const char *why = query_request(req->query, req->query_len, dec, sizeof(dec), &rq, &ids);
	if (!why)
		why = header_request(req, &rq);
	if (!why && !ids.cost_given)
		why = "missing cost";
	rq.arg_error = why;
	if (why)
		rc = -1;
	else if (!ids.reservation.given)
		rc = reserve_charge(c->s.env->decide, &rq, rl_now(), &why);
	else if (ids.reservation.len > 0)
		rc = reserve_settle(c->s.env->decide, ids.reservation.id, ids.reservation.len,
				    rq.cost, rl_now(), &why);
	if (rc < 0) {
		http_answer_error(c, x, 400, why);
		return;
	}
	http_answer(c, x, 200, "application/json", "",
		    rc > 0 ? "{\"settled\":true}\n" : "{\"settled\":false}\n");
}

/* ---- /json: Envoy's rate limit service in JSON ---- */

static void json_answer(struct http_conn *c, const struct http_ctx *x,
			const struct rl_decision *parts, size_t np);

/* A refusal: 400 (envoyproxy/ratelimit's /json answers every error so),
 * the reason in the body. */
static void json_error(struct http_conn *c, const struct http_ctx *x, const char *why)
{
	http_answer_error(c, x, 400, why);
}

/* POST /json: the request read, decided as the gRPC front decides it, the
 * answer written (or later, once its decision is delivered). */
static void json_request(struct http_conn *c, const struct http_request *req,
			 const struct http_ctx *x, const char *body, size_t len)
{
	const struct config *cfg = c->s.env->cfg;
	bool admin = cfg->http_admin_token[0] && token_ok(cfg->http_admin_token, req);
	struct decide_pending *p;
	const char *why;
	json_t *doc;
	size_t np = 0;
	int rc;

	if (!admin && !token_ok(cfg->http_token, req)) {
		unauthorized(c, x);
		return;
	}
	if (!c->json && !(c->json = malloc(sizeof(*c->json)))) {
		http_answer_error(c, x, 503, "out of memory");
		return;
	}
	if (!(doc = rls_json_request_read(body, len, &c->json->req, &why))) {
		json_error(c, x, why);
		return;
	}
	/* The admin token's caller is trusted: it may name limits the
	 * domains do not configure (docs/ENVOY.md, "The decision"). */
	rc = rls_decide_requests(&c->json->call, c->s.env->rl, &c->json->req.rq, admin, FRONT_HTTP);
	json_decref(doc);
	if (rc < 0) {
		json_error(c, x, c->json->call.why);
		return;
	}
	if (c->json->call.nrq == 0) {
		json_answer(c, x, NULL, 0);
		return;
	}
	p = decide_run(c->s.env->decide, c->json->call.rq, c->json->call.nrq, rl_now(),
		       c->json->call.parts, RLS_DECIDE_BATCH, &np, &c->owner);
	if (p) {
		uint64_t *tag = decide_pending_tag(p);

		tag[0] = (x->head ? HTTP_TAG_HEAD : 0) | HTTP_TAG_JSON;
		tag[1] = x->keep_alive;
		tag[2] = (uint64_t)x->minor;
		return;
	}
	json_answer(c, x, c->json->call.parts, np);
}

/* The decision of the connection's /json request as its answer: 200 OK,
 * 429 OVER_LIMIT, as envoyproxy/ratelimit's /json. */
static void json_answer(struct http_conn *c, const struct http_ctx *x,
			const struct rl_decision *parts, size_t np)
{
	struct http_json *j = c->json;
	char *text;

	if (rls_decide_answer(&j->call, parts, np, &j->resp) < 0) {
		json_error(c, x, j->call.why);
		return;
	}
	if (!(text = rls_json_response_write(&j->resp)) ||
	    http_reserve(c, strlen(text) + HTTP_RESP_MAX) < 0) {
		free(text);
		http_answer_error(c, x, 503, "no buffer memory for the answer");
		return;
	}
	http_answer(c, x, j->resp.overall_code == RLS_CODE_OVER_LIMIT ? RLS_DECIDE_DENY_STATUS : 200,
		    "application/json", "", text);
	free(text);
}

void http_deliver(struct decide_owner *owner, struct decide_pending *p)
{
	struct http_conn *c = container_of(owner, struct http_conn, owner);
	const uint64_t *tag = decide_pending_tag(p);
	struct http_ctx x = { .head = (tag[0] & HTTP_TAG_HEAD) != 0, .keep_alive = tag[1] != 0,
			      .minor = (int)tag[2] };
	size_t n;
	const struct rl_decision *r = decide_pending_results(p, &n);

	if (!c->s.dead && (tag[0] & HTTP_TAG_JSON))
		json_answer(c, &x, r, n);
	else if (!c->s.dead && c->s.wcap - c->s.wlen >= HTTP_RESP_MAX)
		http_answer_decision(c, &x, r, n);
	else if (!c->s.dead)
		c->closing = true;      /* cannot happen: room is made before holding */
	decide_pending_release(c->s.env->decide, p);
	/* Sent (and the next requests answered) when the socket is writable:
	 * answers the store gave together leave together. */
	if (!c->s.dead)
		http_update_events(c);
}

/* ---- /metrics ---- */

/* Room for need more bytes of output: the write buffer grows (once, for
 * /metrics) within max_buffer_memory. Returns 0 or -1. */
static int http_reserve(struct http_conn *c, size_t need)
{
	if (c->s.wcap - c->s.wlen >= need)
		return 0;
	stream_compact(&c->s);
	return stream_grow(&c->s, 0, c->s.wlen + need);
}

static void metrics_page(struct http_conn *c, const struct http_ctx *x)
{
	static char *text;
	long n;

	if (!text)
		text = malloc(HTTP_METRICS_MAX);
	if (!text || !c->s.env->metrics ||
	    (n = metrics_render(c->s.env->metrics, c->s.env->rl, text, HTTP_METRICS_MAX)) < 0 ||
	    http_reserve(c, (size_t)n + HTTP_RESP_MAX) < 0) {
		http_answer_error(c, x, 503, "metrics unavailable");
		return;
	}
	http_answer(c, x, 200, "text/plain; version=0.0.4; charset=utf-8", "", text);
}

/* ---- admin: /keys, /top, /limits ---- */

/* Does the request carry http_admin_token? 401 without any token, 403
 * with another (the checks' token does not open these). */
static int admin_auth(const struct config *cfg, const struct http_request *req)
{
	if (token_ok(cfg->http_admin_token, req))
		return 0;
	return req->authorization ? 403 : 401;
}

static void admin_page(struct http_conn *c, const struct http_request *req,
		       const struct http_ctx *x, bool top)
{
	static char *text;
	const struct front_env *env = c->s.env;
	int st;

	if (!env->cfg->http_admin_token[0]) {
		http_answer_error(c, x, 404, "not found");
		return;
	}
	if ((st = admin_auth(env->cfg, req)) != 0) {
		metrics_add(&metrics_me->errors[METRICS_ERR_UNAUTHORIZED], 1);
		http_answer(c, x, st, "application/json",
			    st == 401 ? "WWW-Authenticate: Bearer realm=\"spoa-ratelimit-admin\"\r\n"
				      : "",
			    st == 401 ? "{\"error\":\"unauthorized\"}\n" : "{\"error\":\"forbidden\"}\n");
		return;
	}
	if (!text)
		text = malloc(ADMIN_ANSWER_MAX);
	if (!text) {
		http_answer_error(c, x, 503, "out of memory");
		return;
	}
	if (top) {
		st = admin_top(env->rl, env->topk, req->query, req->query_len, rl_now(), text,
			       ADMIN_ANSWER_MAX);
	} else if (is(req->path, req->path_len, "/limits")) {
		/* A PUT or DELETE of a namespace that syncs waits for its store. */
		c->admin = (struct admin_wait){ .done = admin_forgot, .owner = c };
		st = admin_limits(env->rl, env->decide->sync, (int)req->method, req->query,
				  req->query_len, text, ADMIN_ANSWER_MAX, &c->admin);
		if (st == 0) {
			c->admin_waiting = true;
			c->admin_x = *x;
			return;
		}
	} else {
		/* /keys: a DELETE's forget, a GET's read of the store. */
		c->admin = (struct admin_wait){ .done = admin_forgot, .owner = c };
		st = (req->method == HTTP_DELETE ? admin_forget : admin_keys)(env->rl,
		    env->decide->sync, req->query, req->query_len, rl_now(), text,
		    ADMIN_ANSWER_MAX, &c->admin);
		if (st == 0) {
			/* It waits for the store: answered by admin_forgot. */
			c->admin_waiting = true;
			c->admin_x = *x;
			return;
		}
	}
	if (http_reserve(c, strlen(text) + HTTP_RESP_MAX) < 0) {
		http_answer_error(c, x, 503, "no buffer memory for the answer");
		return;
	}
	http_answer(c, x, st, "application/json", "", text);
}

/* The store answered a /keys or /limits request (admin_forget, admin_keys,
 * admin_limits): its answer, then the connection's next requests. */
static void admin_forgot(void *owner)
{
	static char *text;
	struct http_conn *c = owner;
	int st;

	c->admin_waiting = false;
	if (!text)
		text = malloc(ADMIN_ANSWER_MAX);
	if (!text) {
		admin_wait_detach(&c->admin);
		http_answer_error(c, &c->admin_x, 503, "out of memory");
	} else {
		st = admin_wait_answer(c->s.env->rl, &c->admin, text, ADMIN_ANSWER_MAX);
		if (http_reserve(c, strlen(text) + HTTP_RESP_MAX) < 0)
			http_answer_error(c, &c->admin_x, 503, "no buffer memory for the answer");
		else
			http_answer(c, &c->admin_x, st, "application/json", "", text);
	}
	http_update_events(c);
}

/* ---- requests ---- */

static void route(struct http_conn *c, const struct http_request *req, const char *body)
{
	struct http_ctx x = { .head = req->method == HTTP_HEAD, .keep_alive = req->keep_alive,
			      .minor = req->minor };

	if (c->s.draining)
		x.keep_alive = false;
	bool keys = is(req->path, req->path_len, "/keys");
	bool json = is(req->path, req->path_len, "/json");
	bool rel = is(req->path, req->path_len, "/release");
	bool set = is(req->path, req->path_len, "/settle");
	bool limits = is(req->path, req->path_len, "/limits");
	if (req->method == HTTP_OTHER || (req->method == HTTP_DELETE && !keys && !limits) ||
	    (req->method == HTTP_PUT && !limits) || (req->method == HTTP_POST) != (json || rel || set)) {
		http_answer(c, &x, 405, "application/json",
			    json || rel || set ? "Allow: POST\r\n" : keys ? "Allow: GET, HEAD, DELETE\r\n"
			    : limits ? "Allow: GET, HEAD, PUT, DELETE\r\n" : "Allow: GET, HEAD\r\n",
			    "{\"error\":\"method not allowed\"}\n");
		return;
	}
	if (json)
		json_request(c, req, &x, body, req->body_len);
	else if (rel)
		release(c, req, &x);
	else if (set)
		settle(c, req, &x);
	else if (is(req->path, req->path_len, "/ratelimit"))
		ratelimit(c, req, &x);
	else if (is(req->path, req->path_len, "/metrics")) {
		if (c->s.env->cfg->http_metrics_token && !authorized(c->s.env->cfg, req))
			unauthorized(c, &x);
		else
			metrics_page(c, &x);
	}
	else if (keys || limits)
		admin_page(c, req, &x, false);
	else if (is(req->path, req->path_len, "/top"))
		admin_page(c, req, &x, true);
	else if (is(req->path, req->path_len, "/healthz"))
		http_answer(c, &x, 200, "text/plain", "", "ok\n");
	else
		http_answer_error(c, &x, 404, "not found");
}

/* Answers the complete requests in the read buffer, in order, while
 * there is room for their answers and none waits for a store. */
static void http_process(struct http_conn *c)
{
	size_t off = 0;
	double now = ev_now(c->s.env->loop);
	bool completed = false;         /* a request ended, head and body */

	while (!c->closing && !http_waits(c) && !c->s.dead) {
		if (c->skip > 0) {
			size_t k = c->s.rlen - off < c->skip ? c->s.rlen - off : c->skip;
			off += k;
			c->skip -= k;
			if (c->skip > 0)
				break;
			completed = true;
			continue;
		}
		if (off == c->s.rlen)
			break;
		if (c->s.wcap - c->s.wlen < HTTP_RESP_MAX) {
			if (http_flush(c) < 0)
				return;
			if (c->s.wcap - c->s.wlen < HTTP_RESP_MAX && c->s.wcap < HTTP_WBUF_MAX)
				http_reserve(c, HTTP_RESP_MAX);
			if (c->s.wcap - c->s.wlen < HTTP_RESP_MAX)
				break;
		}
		int status = 0;
		const char *why = NULL;
		struct http_ctx bad = { .keep_alive = false, .minor = 1 };
		long end = http_head_end((const char *)c->s.rbuf + off, c->s.rlen - off, &c->scanned, &status, &why);
		if (end == 0)
			break;
		if (end < 0) {
			metrics_add(&metrics_me->errors[METRICS_ERR_PROTOCOL], 1);
			http_answer_error(c, &bad, status, why);
			break;
		}
		struct http_request req;
		if (http_parse_head((const char *)c->s.rbuf + off, (size_t)end, &req, &status, &why) < 0) {
			metrics_add(&metrics_me->errors[METRICS_ERR_PROTOCOL], 1);
			http_answer_error(c, &bad, status, why);
			break;
		}
		/* A POST's body is read whole (HTTP_POST_MAX), with its head:
		 * the head is parsed again once it is there. */
		const char *body = (const char *)c->s.rbuf + off + (size_t)end;
		if (req.method == HTTP_POST) {
			if (c->s.rlen - off < (size_t)end + req.body_len) {
				c->want = (size_t)end + req.body_len;
				break;
			}
			c->want = 0;
			off += req.body_len;
		}
		off += (size_t)end;
		c->scanned = 0;
		c->skip = req.method == HTTP_POST ? 0 : req.body_len;
		completed = c->skip == 0;
		c->s.last_rx = now;
		route(c, &req, body);
	}
	if (c->s.dead)
		return;
	if (c->closing) {
		c->s.rlen = 0;
		return;
	}
	stream_consume(&c->s, off);
	/* The request timer measures one request, head and body: from its
	 * first byte, whatever arrives meanwhile. */
	if (c->s.rlen == 0 && c->skip == 0)
		c->s.partial_since = 0;
	else if (completed || c->s.partial_since == 0)
		c->s.partial_since = now;
	/* A POST awaited whole: room for it. */
	if (c->want > c->s.rcap && stream_grow(&c->s, c->want, 0) < 0) {
		struct http_ctx x = { .keep_alive = false, .minor = 1 };
		http_answer_error(c, &x, 503, "no buffer memory for this request");
		c->s.rlen = 0;
		c->want = 0;
		return;
	}
	/* A head that fills the buffer: room for the largest one. */
	if (c->s.rlen == c->s.rcap && c->skip == 0 && c->s.rcap < HTTP_RBUF_MAX &&
	    stream_grow(&c->s, HTTP_RBUF_MAX, 0) < 0) {
		struct http_ctx x = { .keep_alive = false, .minor = 1 };
		http_answer_error(c, &x, 503, "no buffer memory for this request head");
		c->s.rlen = 0;
	}
}

static bool http_more(const struct stream *s)
{
	const struct http_conn *c = container_of(s, const struct http_conn, s);

	return !c->closing && !http_waits(c);
}

static void http_process_stream(struct stream *s)
{
	http_process(container_of(s, struct http_conn, s));
}

/* Reads and answers what came; at EOF, closes once the answers are out. */
static void http_read(struct http_conn *c)
{
	if (stream_read(&c->s, http_more, http_process_stream) && !c->s.dead)
		c->closing = true;
}

static void http_continue(struct http_conn *c)
{
	if (http_flush(c) < 0)
		return;
	if (c->s.rlen > 0 && !c->closing && !http_waits(c)) {
		http_process(c);
		if (c->s.dead || http_flush(c) < 0)
			return;
	}
	if (c->s.draining && !http_waits(c) && c->s.rlen == 0 && c->s.woff == c->s.wlen) {
		http_close(c);
		return;
	}
	if (c->closing && !c->grace) {
		/* A last answer gets a bounded time to leave. */
		c->grace = true;
		stream_timer(&c->s, HTTP_CLOSE_GRACE);
	}
	http_update_events(c);
}

static void http_on_io(struct ev_loop *loop, ev_io *io, int revents)
{
	struct http_conn *c = container_of(io, struct http_conn, s.io);
	(void)loop;

	if (revents & EV_READ)
		http_read(c);
	if (!c->s.dead)
		http_continue(c);
}

/* One timer: a head must complete within frame_timeout_ms of its first
 * byte; a connection without a request for idle_timeout_ms is closed; a
 * request waiting for its store is bounded by the store's timeout. */
static void http_on_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct http_conn *c = container_of(t, struct http_conn, s.timer);
	const struct config *cfg = c->s.env->cfg;
	double now = ev_now(loop), deadline, frame = cfg->frame_timeout_ms / 1000.0;
	(void)revents;

	if (c->closing && !http_waits(c)) {
		http_close(c);
		return;
	}
	if (c->s.partial_since > 0)
		deadline = c->s.partial_since + frame;
	else
		deadline = c->s.last_rx + cfg->idle_timeout_ms / 1000.0;
	if (http_waits(c) || now < deadline) {
		double next = http_waits(c) ? frame : deadline - now;
		if (c->s.partial_since == 0 && next > frame)
			next = frame;
		ev_timer_set(t, next, 0.);
		ev_timer_start(loop, t);
		return;
	}
	if (c->s.partial_since > 0 && c->skip == 0 && c->s.wcap - c->s.wlen >= HTTP_RESP_MAX) {
		struct http_ctx x = { .keep_alive = false, .minor = 1 };
		http_answer_error(c, &x, 408, "request timeout");
		http_continue(c);
		return;
	}
	http_close(c);
}

_Static_assert(offsetof(struct http_conn, s) == 0, "stream_free() frees the connection");

static struct stream *http_open(struct front_env *env, int fd)
{
	struct http_conn *c = calloc(1, sizeof(*c));

	if (!c || stream_open(&c->s, &http_front, env, fd, HTTP_RBUF, HTTP_WBUF, http_on_io,
			      http_on_timer) < 0) {
		free(c);
		return NULL;
	}
	c->owner.deliver = http_deliver;
	return &c->s;
}

static void http_drain(struct stream *s)
{
	struct http_conn *c = container_of(s, struct http_conn, s);

	if (c->s.dead)
		return;
	c->s.draining = true;
	http_read(c);
	if (!c->s.dead)
		http_continue(c);
}

static void http_close_now(struct stream *s)
{
	http_close(container_of(s, struct http_conn, s));
}

/* For a new peer, a connection may give way from its last request on, or
 * from the first byte of a request still arriving (a head trickling in
 * holds no answer anyone waits for); not while an answer waits for a
 * store or is being sent. */
static double http_idle_since(const struct stream *s)
{
	const struct http_conn *c = container_of(s, const struct http_conn, s);

	if (http_waits(c) || c->s.woff < c->s.wlen)
		return -1;
	return c->s.partial_since != 0 ? c->s.partial_since : c->s.last_rx;
}

static void http_free(struct stream *s)
{
	free(container_of(s, struct http_conn, s)->json);
	stream_free(s);
}

const struct front_ops http_front = {
	.id = FRONT_HTTP,
	.open = http_open,
	.idle_since = http_idle_since,
	.evict_after = 0,
	.guest = true,
	.max_connections = config_http_max_connections,
	.max_buffer_memory = config_http_max_buffer_memory,
	.drain = http_drain,
	.evict = http_close_now,
	.close = http_close_now,
	.free = http_free,
};
