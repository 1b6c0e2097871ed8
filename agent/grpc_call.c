/*
 * grpc_call.c - the gRPC front's calls (see agent/grpc_int.h): each HTTP/2
 * stream of a connection is one unary call, driven by nghttp2's callbacks.
 *
 *   HEADERS  :method POST, :path, content-type application/grpc[+proto],
 *            grpc-timeout, grpc-encoding (identity only)
 *   DATA     one Length-Prefixed-Message (agent/rls_wire.h), END_STREAM
 *   answer   HEADERS :status 200, content-type; DATA the message;
 *            trailing HEADERS grpc-status 0
 *            or, on an error, Trailers-Only: one HEADERS with grpc-status
 *            and grpc-message (grpc/doc/PROTOCOL-HTTP2.md)
 *
 * A request that is not gRPC is answered 405 (not POST) or 415 (another
 * content-type), as gRPC's servers do; an unknown method UNIMPLEMENTED. A
 * call's grpc-timeout runs from its headers. A decision held for its
 * store (sync_rate 0, exact admission) is answered just before the
 * deadline from this node's share of the limit (decide_pending_settle:
 * degraded, as when the store does not answer), never DEADLINE_EXCEEDED;
 * passed before its answer is final otherwise (its message late, its
 * decision delayed by delay_max_ms), it is answered DEADLINE_EXCEEDED at
 * once, and a decision delivered later is dropped.
 */
#include "agent/grpc_int.h"
#include "strategies/container.h"

#include <stdlib.h>
#include <string.h>

#include "agent/config.h"
#include "agent/log.h"
#include "agent/metrics.h"
#include "agent/ratelimit.h"

#define GRPC_POOL_KEEP 4096   /* free calls a worker keeps for reuse */
/* A decision held for its store is settled this long before the call's
 * deadline (at most a quarter of its timeout): the answer must still
 * cross the network and reach Envoy's loop before Envoy's own timer. */
#define GRPC_SETTLE_MARGIN 0.005

static void grpc_call_on_deadline(struct ev_loop *loop, ev_timer *t, int revents);

static bool is(const uint8_t *s, size_t n, const char *lit)
{
	return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

static double grpc_now(const struct grpc_conn *c)
{
	return ev_now(c->s.env->loop);
}

/* ---- a call's life ---- */

/* A struct rls_call for the next request, NULL at GRPC_HELD_MAX. */
static struct rls_call *grpc_rc_take(struct grpc_worker *w)
{
	struct rls_call *rc;

	if (w->nrc_free > 0)
		return w->rc_free[--w->nrc_free];
	if (w->nrc >= GRPC_HELD_MAX || !(rc = malloc(sizeof(*rc))))
		return NULL;
	w->nrc++;
	return rc;
}

static void grpc_rc_give(struct grpc_worker *w, struct rls_call *rc)
{
	if (!w->rc)
		w->rc = rc;
	else
		w->rc_free[w->nrc_free++] = rc;
}

/* A call for stream id from the worker's pool, linked to c; NULL at
 * GRPC_WORKER_CALLS or out of memory. */
static struct grpc_call *grpc_call_new(struct grpc_conn *c, int32_t id)
{
	struct grpc_worker *w = c->w;
	struct grpc_call *k = w->pool;

	if (w->ncalls >= GRPC_WORKER_CALLS)
		return NULL;
	if (k) {
		w->pool = k->next;
		w->npool--;
	} else if (!(k = malloc(sizeof(*k)))) {
		return NULL;
	}
	memset(k, 0, offsetof(struct grpc_call, own));
	k->conn = c;
	k->id = id;
	k->buf = k->own;
	k->cap = sizeof(k->own);
	k->started = c->last_active = grpc_now(c);
	ev_init(&k->timer, grpc_call_on_deadline);
	k->next = c->calls;
	if (c->calls)
		c->calls->prev = k;
	c->calls = k;
	c->ncalls++;
	w->ncalls++;
	return k;
}

/* Back to the pool: unlinked, its timer stopped, its heap bytes freed. */
static void grpc_call_free(struct grpc_call *k)
{
	struct grpc_conn *c = k->conn;
	struct grpc_worker *w = c->w;

	ev_timer_stop(c->s.env->loop, &k->timer);
	if (k->buf != k->own)
		grpc_mem_free(c, k->buf);
	if (k->rc)
		grpc_rc_give(w, k->rc);
	if (k->prev)
		k->prev->next = k->next;
	else
		c->calls = k->next;
	if (k->next)
		k->next->prev = k->prev;
	c->ncalls--;
	w->ncalls--;
	c->last_active = grpc_now(c);
	if (w->npool >= GRPC_POOL_KEEP) {
		free(k);
		return;
	}
	k->next = w->pool;
	w->pool = k;
	w->npool++;
}

/* Freed once nothing refers to it: its stream closed and no decision held. */
static void grpc_call_done(struct grpc_call *k)
{
	if (k->stream_closed && !k->pending)
		grpc_call_free(k);
}

/* Gives the DATA bytes read so far back to the flow-control windows. */
static void grpc_call_consume(struct grpc_call *k)
{
	if (k->unconsumed == 0)
		return;
	if (k->stream_closed)
		nghttp2_session_consume_connection(k->conn->h2, k->unconsumed);
	else
		nghttp2_session_consume(k->conn->h2, k->id, k->unconsumed);
	k->unconsumed = 0;
}

/* Room for n bytes in the call's buffer (the bytes in it kept). */
static int grpc_call_reserve(struct grpc_call *k, size_t n)
{
	uint8_t *nb;
	size_t cap = k->cap;

	if (n <= k->cap)
		return 0;
	while (cap < n)
		cap *= 2;
	if (k->buf == k->own) {
		if (!(nb = grpc_mem_alloc(k->conn, cap)))
			return -1;
		memcpy(nb, k->own, k->len);
	} else if (!(nb = grpc_mem_realloc(k->conn, k->buf, cap))) {
		return -1;
	}
	k->buf = nb;
	k->cap = cap;
	return 0;
}

/* ---- answers ---- */

#define GRPC_NV(n, v, vl) { (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, (vl), NGHTTP2_NV_FLAG_NONE }

/* An error, Trailers-Only: :status, content-type, grpc-status and
 * grpc-message in one HEADERS that ends the stream. http: "200", but for
 * a request that is not gRPC ("405", "415"). */
static void grpc_call_fail(struct grpc_call *k, const char *http, enum rls_grpc_status st,
			   const char *why)
{
	char code[4], msg[256];
	size_t cl = rls_grpc_status_text(st, code);
	size_t ml = rls_grpc_message_encode(why, strlen(why), msg, sizeof(msg));
	nghttp2_nv nv[] = {
		GRPC_NV(":status", http, 3),
		GRPC_NV("content-type", "application/grpc", 16),
		GRPC_NV("grpc-status", code, cl),
		GRPC_NV("grpc-message", msg, ml),
		GRPC_NV("grpc-accept-encoding", "identity", 8),
	};
	size_t n = st == RLS_GRPC_UNIMPLEMENTED ? 5 : 4;

	ev_timer_stop(k->conn->s.env->loop, &k->timer);
	k->state = GRPC_CALL_ANSWERED;
	grpc_call_consume(k);
	if (k->stream_closed)
		return;
	if (nghttp2_submit_response(k->conn->h2, k->id, nv, n, NULL) != 0)
		nghttp2_submit_rst_stream(k->conn->h2, NGHTTP2_FLAG_NONE, k->id,
					  NGHTTP2_INTERNAL_ERROR);
}

/* The answer's DATA: the message in k->buf[off..len), then the trailers. */
static ssize_t grpc_call_read(nghttp2_session *h2, int32_t id, uint8_t *buf, size_t length,
			      uint32_t *flags, nghttp2_data_source *src, void *user)
{
	static const nghttp2_nv ok[] = { GRPC_NV("grpc-status", "0", 1) };
	struct grpc_call *k = src->ptr;
	size_t n = k->len - k->off < length ? k->len - k->off : length;
	(void)user;

	memcpy(buf, k->buf + k->off, n);
	k->off += n;
	if (k->off == k->len) {
		*flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
		if (nghttp2_submit_trailer(h2, id, ok, 1) != 0)
			return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	}
	return (ssize_t)n;
}

/* Answers the message k->buf[0..len) (its prefix included), grpc-status 0. */
static void grpc_call_answer(struct grpc_call *k)
{
	static const nghttp2_nv head[] = {
		GRPC_NV(":status", "200", 3),
		GRPC_NV("content-type", "application/grpc", 16),
	};
	nghttp2_data_provider dp = { .source.ptr = k, .read_callback = grpc_call_read };

	ev_timer_stop(k->conn->s.env->loop, &k->timer);
	k->state = GRPC_CALL_ANSWERED;
	k->answer_ok = true;
	k->off = 0;
	if (k->stream_closed)
		return;
	if (nghttp2_submit_response(k->conn->h2, k->id, head, 2, &dp) != 0)
		nghttp2_submit_rst_stream(k->conn->h2, NGHTTP2_FLAG_NONE, k->id,
					  NGHTTP2_INTERNAL_ERROR);
}

/* Encodes a message into the call's buffer, behind its gRPC prefix, and
 * answers it: encode(w, arg) appends it to a struct pb_writer (-1 when it
 * does not fit: the buffer grows, up to GRPC_MSG_MAX). */
static void grpc_call_answer_msg(struct grpc_call *k,
				 int (*encode)(struct pb_writer *w, const void *arg), const void *arg)
{
	struct pb_writer w;

	for (size_t cap = k->cap;; cap *= 2) {
		k->len = 0;
		if (grpc_call_reserve(k, cap) < 0)
			break;
		pb_writer_init(&w, k->buf + RLS_GRPC_PREFIX, k->cap - RLS_GRPC_PREFIX);
		if (encode(&w, arg) == 0) {
			rls_grpc_frame_prefix(k->buf, (uint32_t)w.len);
			k->len = RLS_GRPC_PREFIX + w.len;
			grpc_call_answer(k);
			return;
		}
		if (cap >= GRPC_MSG_MAX)
			break;
	}
	grpc_call_fail(k, "200", RLS_GRPC_RESOURCE_EXHAUSTED, "no memory for the answer");
}

/* ---- the methods ---- */

static int grpc_health_encode(struct pb_writer *w, const void *arg)
{
	return rls_health_response_encode(w, *(const enum rls_serving *)arg);
}

/* grpc.health.v1.Health/Check: the server ("") and the rate limit
 * service are SERVING, NOT_SERVING once the worker stops; another service
 * NOT_FOUND (grpc/doc/health-checking.md). */
static void grpc_health(struct grpc_call *k, const uint8_t *p, size_t len)
{
	struct pb_str service;
	enum rls_err err;
	enum rls_serving st;

	if (rls_health_request_decode(p, len, &service, &err) < 0) {
		grpc_call_fail(k, "200", rls_err_status(err), rls_err_str(err));
		return;
	}
	if (service.len > 0 && !is((const uint8_t *)service.ptr, service.len,
				   "envoy.service.ratelimit.v3.RateLimitService")) {
		grpc_call_fail(k, "200", RLS_GRPC_NOT_FOUND, "unknown service");
		return;
	}
	st = k->conn->s.draining ? RLS_NOT_SERVING : RLS_SERVING;
	grpc_call_answer_msg(k, grpc_health_encode, &st);
}

/* ---- ShouldRateLimit (agent/rls_decide.h) ---- */

static int grpc_rls_encode(struct pb_writer *w, const void *arg)
{
	return rls_response_encode(w, arg);
}

/* The decision's parts answered (rls_decide_answer). */
static void grpc_rls_answer(struct grpc_call *k, struct rls_call *rc,
			    const struct rl_decision *parts, size_t np)
{
	struct rls_response resp;

	if (rls_decide_answer(rc, parts, np, &resp) < 0)
		grpc_call_fail(k, "200", rc->status, rc->why);
	else
		grpc_call_answer_msg(k, grpc_rls_encode, &resp);
}

/* envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit: the
 * request decoded, decided as one decision (Envoy is the operator's: a
 * trusted caller), answered now or when its decision is final. */
static void grpc_rls(struct grpc_call *k, const uint8_t *p, size_t len)
{
	struct grpc_worker *w = k->conn->w;
	struct front_env *env = k->conn->s.env;
	struct rls_request rq = { .descriptors = w->desc, .max_descriptors = RLS_DESCRIPTORS_MAX,
				  .entries = w->entries,
				  .max_entries = sizeof(w->entries) / sizeof(w->entries[0]) };
	struct rls_call *rc = w->rc;
	struct decide_pending *pd;
	enum rls_err err;
	size_t np;

	if (!rc) {
		grpc_call_fail(k, "200", RLS_GRPC_RESOURCE_EXHAUSTED, "too many decisions held");
		return;
	}
	if (rls_request_decode(p, len, &rq, &err) < 0) {
		grpc_call_fail(k, "200", rls_err_status(err), rls_err_str(err));
		return;
	}
	if (rls_decide_requests(rc, env->rl, &rq, true, FRONT_GRPC) < 0) {
		grpc_call_fail(k, "200", rc->status, rc->why);
		return;
	}
	if (rc->nrq == 0) {
		grpc_rls_answer(k, rc, NULL, 0);
		return;
	}
	pd = decide_run(env->decide, rc->rq, rc->nrq, rl_now(), rc->parts, RLS_DECIDE_BATCH, &np,
			&k->conn->owner);
	if (!pd) {
		grpc_rls_answer(k, rc, rc->parts, np);
		return;
	}
	/* Held (a store, a delay): the call keeps rc until it is delivered. */
	decide_pending_tag(pd)[0] = (uintptr_t)k;
	k->pending = pd;
	k->rc = rc;
	k->state = GRPC_CALL_DECIDING;
	w->rc = grpc_rc_take(w);
}

/* The request is whole (END_STREAM): its one message, to its method. */
static void grpc_call_request(struct grpc_call *k)
{
	struct pb_str msg;
	enum rls_err err;
	int n;

	if (k->state != GRPC_CALL_READING)
		return;
	if (k->deadline > 0 && grpc_now(k->conn) >= k->deadline) {
		grpc_call_fail(k, "200", RLS_GRPC_DEADLINE_EXCEEDED, "deadline exceeded");
		return;
	}
	n = rls_grpc_frame_decode(k->buf, k->len, GRPC_MSG_MAX, &msg, &err);
	if (n < 0) {
		grpc_call_fail(k, "200", rls_err_status(err), rls_err_str(err));
		return;
	}
	if (n == 0) {
		grpc_call_fail(k, "200", k->len ? RLS_GRPC_INTERNAL : RLS_GRPC_UNIMPLEMENTED,
			       k->len ? "request message cut short" : "no request message");
		return;
	}
	if ((size_t)n < k->len) {
		grpc_call_fail(k, "200", RLS_GRPC_UNIMPLEMENTED, "more than one request message");
		return;
	}
	/* The bytes are ours now: the peer's windows open again. */
	grpc_call_consume(k);
	if (k->method == GRPC_M_HEALTH)
		grpc_health(k, (const uint8_t *)msg.ptr, msg.len);
	else
		grpc_rls(k, (const uint8_t *)msg.ptr, msg.len);
}

/* The request's headers are whole: what can be answered from them is. */
static void grpc_call_headers(struct grpc_call *k)
{
	if (k->headers_over)
		grpc_call_fail(k, "200", RLS_GRPC_RESOURCE_EXHAUSTED, "header list over 16384 bytes");
	else if (!k->post)
		grpc_call_fail(k, "405", RLS_GRPC_UNIMPLEMENTED, "gRPC requests are POST");
	else if (!k->grpc_type)
		grpc_call_fail(k, "415", RLS_GRPC_INTERNAL, "content-type is not application/grpc");
	else if (k->bad_timeout)
		grpc_call_fail(k, "200", RLS_GRPC_INTERNAL, rls_err_str(RLS_ERR_TIMEOUT));
	else if (k->bad_encoding)
		grpc_call_fail(k, "200", RLS_GRPC_UNIMPLEMENTED, "grpc-encoding: identity only");
	else if (k->method == GRPC_M_UNKNOWN)
		grpc_call_fail(k, "200", RLS_GRPC_UNIMPLEMENTED, "unknown method");
	else if (k->deadline > 0 && grpc_now(k->conn) >= k->deadline)
		grpc_call_fail(k, "200", RLS_GRPC_DEADLINE_EXCEEDED, "deadline exceeded");
	else if (k->deadline > 0) {
		double margin = (k->deadline - k->started) / 4;
		margin = margin < GRPC_SETTLE_MARGIN ? margin : GRPC_SETTLE_MARGIN;
		ev_timer_set(&k->timer, k->deadline - margin - grpc_now(k->conn), 0.);
		ev_timer_start(k->conn->s.env->loop, &k->timer);
	}
}

/* Just before the deadline: a decision held for its store is answered
 * from this node's share (decide_pending_settle); then, at the deadline,
 * an answer not final yet is DEADLINE_EXCEEDED, and a decision still held
 * (delayed) is dropped when it comes. */
static void grpc_call_on_deadline(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct grpc_call *k = container_of(t, struct grpc_call, timer);
	struct grpc_conn *c = k->conn;
	const struct rl_decision *parts;
	double now = grpc_now(c);
	size_t np;
	(void)revents;

	if (k->state == GRPC_CALL_ANSWERED)
		return;
	if (k->state == GRPC_CALL_DECIDING && k->pending &&
	    (parts = decide_pending_settle(c->s.env->decide, k->pending, rl_now(), &np))) {
		/* The pending is the store's now: the call answers and lets go
		 * of it (its stream is open: the call is not freed here). */
		k->pending = NULL;
		grpc_rls_answer(k, k->rc, parts, np);
		grpc_rc_give(c->w, k->rc);
		k->rc = NULL;
		grpc_call_done(k);
	} else if (now < k->deadline) {
		ev_timer_set(t, k->deadline - now, 0.);
		ev_timer_start(loop, t);
		return;
	} else {
		grpc_call_fail(k, "200", RLS_GRPC_DEADLINE_EXCEEDED, "deadline exceeded");
	}
	c->kick(c);
}

void grpc_call_deliver(struct decide_owner *o, struct decide_pending *p)
{
	struct grpc_conn *c = container_of(o, struct grpc_conn, owner);
	struct grpc_call *k = (struct grpc_call *)(uintptr_t)decide_pending_tag(p)[0];
	const struct rl_decision *parts;
	size_t np;

	k->pending = NULL;
	if (k->state == GRPC_CALL_DECIDING) {
		parts = decide_pending_results(p, &np);
		grpc_rls_answer(k, k->rc, parts, np);
	}
	decide_pending_release(c->s.env->decide, p);
	grpc_rc_give(c->w, k->rc);
	k->rc = NULL;
	grpc_call_done(k);
	c->kick(c);
}

/* ---- nghttp2's callbacks (user data: the connection) ---- */

/* A header block's frames: HEADERS then CONTINUATIONs, at most
 * GRPC_HEADER_BLOCK_MAX bytes, or the connection is failed (nghttp2 would
 * decode an endless block: CVE-2024-28182). */
static int grpc_on_begin_frame(nghttp2_session *h2, const nghttp2_frame_hd *hd, void *user)
{
	struct grpc_conn *c = user;
	(void)h2;

	if (hd->type == NGHTTP2_HEADERS)
		c->block_bytes = hd->length;
	else if (hd->type == NGHTTP2_CONTINUATION)
		c->block_bytes += hd->length;
	else
		return 0;
	if (c->block_bytes > GRPC_HEADER_BLOCK_MAX) {
		c->failed = true;
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	}
	return 0;
}

static int grpc_on_begin_headers(nghttp2_session *h2, const nghttp2_frame *f, void *user)
{
	struct grpc_conn *c = user;
	struct grpc_call *k;

	if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	if (!(k = grpc_call_new(c, f->hd.stream_id))) {
		/* The worker holds GRPC_WORKER_CALLS: another time. */
		nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, f->hd.stream_id,
					  NGHTTP2_REFUSED_STREAM);
		return 0;
	}
	nghttp2_session_set_stream_user_data(h2, f->hd.stream_id, k);
	return 0;
}

/* content-type: application/grpc, application/grpc+proto, with or
 * without parameters. */
static bool grpc_type_ok(const uint8_t *v, size_t n)
{
	size_t end = 0;

	while (end < n && v[end] != ';')
		end++;
	return is(v, end, "application/grpc") || is(v, end, "application/grpc+proto");
}

static int grpc_on_header(nghttp2_session *h2, const nghttp2_frame *f, const uint8_t *name,
			  size_t nl, const uint8_t *value, size_t vl, uint8_t flags, void *user)
{
	struct grpc_call *k = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
	uint64_t us;
	enum rls_err err;
	(void)flags;
	(void)user;

	if (!k || f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	k->header_bytes += (uint32_t)(nl + vl + 32);
	if (k->header_bytes > GRPC_HEADERS_MAX) {
		k->headers_over = true;
		return 0;
	}
	if (is(name, nl, ":method"))
		k->post = is(value, vl, "POST");
	else if (is(name, nl, ":path"))
		k->method = is(value, vl, GRPC_PATH_RLS)      ? GRPC_M_RLS
			  : is(value, vl, GRPC_PATH_HEALTH) ? GRPC_M_HEALTH
							    : GRPC_M_UNKNOWN;
	else if (is(name, nl, "content-type"))
		k->grpc_type = grpc_type_ok(value, vl);
	else if (is(name, nl, "grpc-encoding"))
		k->bad_encoding = !is(value, vl, "identity");
	else if (is(name, nl, "grpc-timeout")) {
		if (rls_grpc_timeout_parse((const char *)value, vl, &us, &err) < 0)
			k->bad_timeout = true;
		else
			k->deadline = k->started + (double)us / 1e6;
	}
	return 0;
}

static int grpc_on_data(nghttp2_session *h2, uint8_t flags, int32_t id, const uint8_t *data,
			size_t len, void *user)
{
	struct grpc_call *k = nghttp2_session_get_stream_user_data(h2, id);
	struct pb_str msg;
	enum rls_err err;
	(void)flags;
	(void)user;

	if (!k || k->state != GRPC_CALL_READING) {
		/* Not read: the windows open at once (the stream's may be gone:
		 * a stream refused). */
		nghttp2_session_consume_connection(h2, len);
		nghttp2_session_consume_stream(h2, id, len);
		return 0;
	}
	k->unconsumed += len;
	if (k->len + len > GRPC_STREAM_WINDOW || grpc_call_reserve(k, k->len + len) < 0) {
		grpc_call_fail(k, "200", RLS_GRPC_RESOURCE_EXHAUSTED, rls_err_str(RLS_ERR_TOO_BIG));
		return 0;
	}
	memcpy(k->buf + k->len, data, len);
	k->len += len;
	/* A prefix that says too big or compressed is answered at once. */
	if (rls_grpc_frame_decode(k->buf, k->len, GRPC_MSG_MAX, &msg, &err) < 0)
		grpc_call_fail(k, "200", rls_err_status(err), rls_err_str(err));
	return 0;
}

/* A peer's RST_STREAM of a call whose request was not whole yet costs a
 * token (the rapid reset of CVE-2023-44487: streams opened and reset
 * before any answer); without one the connection gets GOAWAY
 * ENHANCE_YOUR_CALM. Calls answered or deciding are the peer's to cancel
 * (Envoy resets a call past its own timeout). */
static void grpc_on_reset(struct grpc_conn *c, nghttp2_session *h2, int32_t id)
{
	struct grpc_call *k = nghttp2_session_get_stream_user_data(h2, id);
	double now = grpc_now(c);

	if (k && k->state != GRPC_CALL_READING)
		return;
	c->reset_tokens += (now - c->reset_at) * GRPC_RESET_RATE;
	if (c->reset_tokens > GRPC_RESET_BURST)
		c->reset_tokens = GRPC_RESET_BURST;
	c->reset_at = now;
	if (c->reset_tokens >= 1) {
		c->reset_tokens -= 1;
		return;
	}
	if (log_limit(&c->w->log, now))
		LOG(LOG_WARN, "grpc connection %d: over %.0f streams reset a second: closed%s",
		    c->s.fd, GRPC_RESET_RATE, log_limit_suppressed(&c->w->log));
	metrics_add(&metrics_me->errors[METRICS_ERR_PROTOCOL], 1);
	c->goaway = true;
	nghttp2_session_terminate_session(h2, NGHTTP2_ENHANCE_YOUR_CALM);
}

static int grpc_on_frame_recv(nghttp2_session *h2, const nghttp2_frame *f, void *user)
{
	struct grpc_conn *c = user;
	struct grpc_call *k;

	switch (f->hd.type) {
	case NGHTTP2_HEADERS:
	case NGHTTP2_DATA:
		if (!(k = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id)))
			return 0;
		if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST &&
		    k->state == GRPC_CALL_READING)
			grpc_call_headers(k);
		if ((f->hd.flags & NGHTTP2_FLAG_END_STREAM) && k->state == GRPC_CALL_READING)
			grpc_call_request(k);
		return 0;
	case NGHTTP2_RST_STREAM:
		grpc_on_reset(c, h2, f->hd.stream_id);
		return 0;
	default:
		return 0;
	}
}

static int grpc_on_stream_close(nghttp2_session *h2, int32_t id, uint32_t code, void *user)
{
	struct grpc_call *k = nghttp2_session_get_stream_user_data(h2, id);
	(void)code;
	(void)user;

	if (!k)
		return 0;
	nghttp2_session_set_stream_user_data(h2, id, NULL);
	k->stream_closed = true;
	grpc_call_consume(k);
	if (k->state != GRPC_CALL_ANSWERED) {
		ev_timer_stop(k->conn->s.env->loop, &k->timer);
		k->state = GRPC_CALL_ANSWERED;
	}
	grpc_call_done(k);
	return 0;
}

int grpc_call_start(struct grpc_worker *w)
{
	nghttp2_session_callbacks *cb;

	if (!(w->rc = grpc_rc_take(w)) || nghttp2_session_callbacks_new(&cb) != 0)
		return -1;
	nghttp2_session_callbacks_set_on_begin_frame_callback(cb, grpc_on_begin_frame);
	nghttp2_session_callbacks_set_on_begin_headers_callback(cb, grpc_on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(cb, grpc_on_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, grpc_on_data);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cb, grpc_on_frame_recv);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb, grpc_on_stream_close);
	w->cbs = cb;
	return 0;
}

/* ---- what the connection asks ---- */

void grpc_call_drop_all(struct grpc_conn *c)
{
	decide_pending_detach_all(&c->owner);
	while (c->calls) {
		c->calls->pending = NULL;
		grpc_call_free(c->calls);
	}
}

double grpc_call_sweep(struct grpc_conn *c, double before)
{
	double oldest = 0;

	for (struct grpc_call *k = c->calls; k; k = k->next) {
		if (k->state != GRPC_CALL_READING)
			continue;
		if (k->started < before)
			grpc_call_fail(k, "200", RLS_GRPC_CANCELLED,
				       "request not whole within frame_timeout_ms");
		else if (oldest == 0 || k->started < oldest)
			oldest = k->started;
	}
	return oldest;
}

void grpc_call_stop(struct grpc_worker *w)
{
	nghttp2_session_callbacks_del(w->cbs);
	w->cbs = NULL;
	free(w->rc);
	while (w->nrc_free > 0)
		free(w->rc_free[--w->nrc_free]);
	w->rc = NULL;
	while (w->pool) {
		struct grpc_call *k = w->pool;
		w->pool = k->next;
		free(k);
	}
	w->npool = 0;
}
