/*
 * grpc_front.c - the gRPC front (`grpc_listen`, docs/ENVOY.md, "The gRPC
 * front"): HTTP/2 cleartext with prior knowledge, one nghttp2 session per
 * connection on the worker's own loop, its calls agent/grpc_call.c's (see
 * agent/grpc_int.h for the bounds a peer is held to).
 *
 *   socket --read--> rbuf --nghttp2_session_mem_recv--> callbacks (calls)
 *   socket <--send-- wbuf <--nghttp2_session_mem_send-- answers submitted
 *
 * nghttp2 does the framing, HPACK and flow control and never touches the
 * socket; the connection reads while its output stays under
 * GRPC_WBUF_HIGH (a peer that does not read its answers is not read), and
 * gives request bytes back to the peer's windows only as calls decode
 * them. GOAWAY (NO_ERROR, the last stream read) on a reload, when the
 * worker stops (draining: its calls finish, Health answers NOT_SERVING),
 * and after idle_timeout_ms without a call; the connection closes once
 * its calls are answered and the output is out.
 */
#include "agent/grpc_int.h"
#include "strategies/container.h"

#include <stdlib.h>
#include <string.h>

#include "agent/config.h"
#include "agent/log.h"
#include "agent/metrics.h"

static void grpc_on_io(struct ev_loop *loop, ev_io *io, int revents);
static void grpc_on_timer(struct ev_loop *loop, ev_timer *t, int revents);

static struct grpc_worker *grpc_worker_of(const struct front_env *env)
{
	return env->state[FRONT_GRPC];
}

/* ---- nghttp2's allocator: the connection's counted heap ---- */

static void *grpc_h2_malloc(size_t size, void *user)
{
	return grpc_mem_alloc(user, size);
}

static void grpc_h2_free(void *p, void *user)
{
	grpc_mem_free(user, p);
}

static void *grpc_h2_calloc(size_t n, size_t size, void *user)
{
	void *p;

	if (size && n > GRPC_CONN_MEM / size)
		return NULL;
	if ((p = grpc_mem_alloc(user, n * size)))
		memset(p, 0, n * size);
	return p;
}

static void *grpc_h2_realloc(void *p, size_t size, void *user)
{
	return grpc_mem_realloc(user, p, size);
}

/* ---- the connection ---- */

/* GOAWAY NO_ERROR naming the last stream read: the calls up to it finish,
 * later streams are the client's to retry elsewhere. */
static void grpc_goaway(struct grpc_conn *c)
{
	if (c->goaway)
		return;
	c->goaway = true;
	nghttp2_submit_goaway(c->h2, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(c->h2),
			      NGHTTP2_NO_ERROR, NULL, 0);
}

static void grpc_close(struct grpc_conn *c)
{
	struct grpc_worker *w = c->w;

	if (c->s.dead)
		return;
	grpc_call_drop_all(c);
	if (c->prev)
		c->prev->next = c->next;
	else
		w->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->prev = c->next = NULL;
	/* Its memory goes now, as its buffers do (stream_close). */
	nghttp2_session_del(c->h2);
	c->h2 = NULL;
	stream_close(&c->s);
}

/* nghttp2's output into the write buffer, up to GRPC_WBUF_HIGH queued.
 * Returns 0, or -1 (no buffer memory, nghttp2 failed). */
static int grpc_fill(struct grpc_conn *c)
{
	struct stream *s = &c->s;

	while (s->wlen - s->woff < GRPC_WBUF_HIGH) {
		const uint8_t *data;
		ssize_t n = nghttp2_session_mem_send(c->h2, &data);

		if (n < 0)
			return -1;
		if (n == 0)
			break;
		if (s->wcap - s->wlen < (size_t)n) {
			stream_compact(s);
			if (s->wcap - s->wlen < (size_t)n &&
			    stream_grow(s, 0, s->wlen + (size_t)n > 2 * s->wcap ? s->wlen + (size_t)n
										: 2 * s->wcap) < 0)
				return -1;
		}
		memcpy(s->wbuf + s->wlen, data, (size_t)n);
		s->wlen += (size_t)n;
	}
	return 0;
}

/* ... then to the socket. Returns 0, or -1 when the connection must close
 * (the peer is gone, no buffer memory, nghttp2 failed). */
static int grpc_write(struct grpc_conn *c)
{
	return grpc_fill(c) < 0 ? -1 : stream_send(&c->s);
}

/* Is the connection over: nghttp2 neither reads nor writes (a GOAWAY sent
 * and its streams closed, the session terminated), nothing queued? */
static bool grpc_over(const struct grpc_conn *c)
{
	return c->s.woff == c->s.wlen && !nghttp2_session_want_write(c->h2) &&
	       (!nghttp2_session_want_read(c->h2) || (c->goaway && c->ncalls == 0));
}

static bool grpc_more(const struct stream *s)
{
	const struct grpc_conn *c = container_of(s, const struct grpc_conn, s);

	return !c->failed && s->wlen - s->woff < GRPC_WBUF_HIGH;
}

/* What came, to nghttp2 (all of it: the session buffers what it needs). */
static void grpc_process(struct stream *s)
{
	struct grpc_conn *c = container_of(s, struct grpc_conn, s);
	ssize_t n;

	if (c->failed || s->rlen == 0)
		return;
	n = nghttp2_session_mem_recv(c->h2, s->rbuf, s->rlen);
	s->rlen = 0;
	if (n >= 0) {
		s->last_rx = ev_now(s->env->loop);
		return;
	}
	if (log_limit(&c->w->log, ev_now(s->env->loop)))
		LOG(LOG_INFO, "grpc connection %d: %s (%d): closed%s", s->fd,
		    c->failed ? "header block over 64 KiB" : nghttp2_strerror((int)n), (int)n,
		    log_limit_suppressed(&c->w->log));
	metrics_add(&metrics_me->errors[METRICS_ERR_PROTOCOL], 1);
	c->failed = true;
	/* Its GOAWAY, if the session still writes one. */
	nghttp2_session_terminate_session(c->h2, c->failed || n == NGHTTP2_ERR_FLOODED
						       ? NGHTTP2_ENHANCE_YOUR_CALM
						       : NGHTTP2_PROTOCOL_ERROR);
}

/* After a read, a timer, a delivery: the output out, the connection closed
 * when over, the watchers set. */
static void grpc_continue(struct grpc_conn *c, bool eof)
{
	if (c->failed || eof) {
		/* A last word if the socket takes it now. */
		if (grpc_write(c) == 0)
			stream_send_once(&c->s);
		grpc_close(c);
		return;
	}
	if (grpc_write(c) < 0 || grpc_over(c)) {
		grpc_close(c);
		return;
	}
	stream_watch(&c->s, grpc_more(&c->s));
}

/* conn->kick: answers submitted outside the connection's read. */
static void grpc_kick(struct grpc_conn *c)
{
	if (!c->s.dead && !c->in_recv)
		grpc_continue(c, false);
}

static void grpc_on_io(struct ev_loop *loop, ev_io *io, int revents)
{
	struct grpc_conn *c = container_of(io, struct grpc_conn, s.io);
	bool eof = false;
	(void)loop;

	if (revents & EV_READ) {
		c->in_recv = true;
		eof = stream_read(&c->s, grpc_more, grpc_process);
		c->in_recv = false;
	}
	if (!c->s.dead)
		grpc_continue(c, eof);
}

/* One timer: a call's request must be whole within frame_timeout_ms of
 * its headers; a connection without a call for idle_timeout_ms gets its
 * GOAWAY. (A call's own deadline is its own timer: agent/grpc_call.c.) */
static void grpc_on_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct grpc_conn *c = container_of(t, struct grpc_conn, s.timer);
	const struct config *cfg = c->s.env->cfg;
	double now = ev_now(loop), frame = cfg->frame_timeout_ms / 1000.0,
	       idle = cfg->idle_timeout_ms / 1000.0, next = frame;
	(void)revents;

	double oldest = grpc_call_sweep(c, now - frame);
	if (oldest > 0)
		next = oldest + frame - now;
	if (c->ncalls == 0) {
		if (now - c->last_active >= idle)
			grpc_goaway(c);
		else if (c->last_active + idle - now < next)
			next = c->last_active + idle - now;
	}
	stream_timer(&c->s, next > 0.001 ? next : 0.001);
	grpc_continue(c, false);
}

/* The server's SETTINGS and its connection window (agent/grpc_int.h). */
static int grpc_settings(struct grpc_conn *c)
{
	static const nghttp2_settings_entry iv[] = {
		{ NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, GRPC_MAX_STREAMS },
		{ NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, GRPC_STREAM_WINDOW },
		{ NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, GRPC_HEADERS_MAX },
		{ NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1 },
	};

	if (nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, sizeof(iv) / sizeof(iv[0])) != 0)
		return -1;
	return nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0,
						     GRPC_CONN_WINDOW) != 0 ? -1 : 0;
}

_Static_assert(offsetof(struct grpc_conn, s) == 0, "stream_free() frees the connection");

static struct stream *grpc_open(struct front_env *env, int fd)
{
	struct grpc_worker *w = grpc_worker_of(env);
	struct grpc_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->w = w;
	c->mem = (nghttp2_mem){ .mem_user_data = c, .malloc = grpc_h2_malloc, .free = grpc_h2_free,
				.calloc = grpc_h2_calloc, .realloc = grpc_h2_realloc };
	if (nghttp2_session_server_new3(&c->h2, w->cbs, c, w->opt, &c->mem) != 0) {
		free(c);
		return NULL;
	}
	if (grpc_settings(c) < 0 ||
	    stream_open(&c->s, &grpc_front, env, fd, GRPC_RBUF, GRPC_WBUF, grpc_on_io,
			grpc_on_timer) < 0) {
		nghttp2_session_del(c->h2);
		free(c);
		return NULL;
	}
	c->owner.deliver = grpc_call_deliver;
	c->kick = grpc_kick;
	c->reset_tokens = GRPC_RESET_BURST;
	c->reset_at = c->last_active = ev_now(env->loop);
	c->next = w->conns;
	if (w->conns)
		w->conns->prev = c;
	w->conns = c;
	/* The SETTINGS go out as soon as the socket takes them (a failure
	 * here is tried again at the next event). */
	(void)grpc_fill(c);
	stream_watch(&c->s, true);
	return &c->s;
}

static void grpc_drain(struct stream *s)
{
	struct grpc_conn *c = container_of(s, struct grpc_conn, s);

	if (c->s.dead)
		return;
	c->s.draining = true;
	grpc_goaway(c);
	grpc_continue(c, false);
}

/* For a new peer: GOAWAY if the socket takes it now, then closed. */
static void grpc_evict(struct stream *s)
{
	struct grpc_conn *c = container_of(s, struct grpc_conn, s);

	if (c->s.dead)
		return;
	grpc_goaway(c);
	c->failed = true;
	grpc_continue(c, false);
}

static void grpc_close_now(struct stream *s)
{
	grpc_close(container_of(s, struct grpc_conn, s));
}

/* A connection may give way once it holds no call. */
static double grpc_idle_since(const struct stream *s)
{
	const struct grpc_conn *c = container_of(s, const struct grpc_conn, s);

	return c->ncalls > 0 || c->s.woff < c->s.wlen ? -1 : c->last_active;
}

/* ---- the front's state of a worker ---- */

static void grpc_stop(struct front_env *env)
{
	struct grpc_worker *w = grpc_worker_of(env);

	if (!w)
		return;
	grpc_call_stop(w);
	nghttp2_option_del(w->opt);
	free(w);
	env->state[FRONT_GRPC] = NULL;
}

static int grpc_start(struct front_env *env)
{
	struct grpc_worker *w = calloc(1, sizeof(*w));

	if (!w)
		return -1;
	w->env = env;
	env->state[FRONT_GRPC] = w;
	if (grpc_call_start(w) < 0 || nghttp2_option_new(&w->opt) != 0) {
		grpc_stop(env);
		return -1;
	}
	/* Request bytes are given back to the windows as calls decode them. */
	nghttp2_option_set_no_auto_window_update(w->opt, 1);
	nghttp2_option_set_no_closed_streams(w->opt, 1);
	return 0;
}

/* A reload: every connection gets its GOAWAY, its calls finish, and the
 * client comes back on a new connection. */
static int grpc_reload(struct front_env *env)
{
	struct grpc_worker *w = grpc_worker_of(env);

	for (struct grpc_conn *c = w->conns, *next; c; c = next) {
		next = c->next;
		grpc_goaway(c);
		grpc_kick(c);
	}
	return 0;
}

const struct front_ops grpc_front = {
	.id = FRONT_GRPC,
	.start = grpc_start,
	.reload = grpc_reload,
	.stop = grpc_stop,
	.open = grpc_open,
	.idle_since = grpc_idle_since,
	.evict_after = 1.0,           /* a second without a call */
	.drain = grpc_drain,
	.evict = grpc_evict,
	.close = grpc_close_now,
	.free = stream_free,
};
