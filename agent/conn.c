/*
 * conn.c - the SPOP connection state machine (see conn.h). Frames are
 * parsed in place in the read buffer; answers are appended to the write
 * buffer and sent with one write() per batch, each frame whole.
 */
#include "agent/conn.h"
#include "strategies/container.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/config.h"
#include "agent/handler.h"
#include "agent/log.h"
#include "agent/metrics.h"
#include "agent/ratelimit.h"
#include "spop/spop.h"

#define CONN_CLOSE_GRACE     1.0    /* seconds to flush a final DISCONNECT */
#define CONN_HELLO_FRAME_MAX 4096   /* largest frame before HELLO (a HELLO is
				       about 150 bytes): the buffers of a peer
				       that has not said HELLO stay this small */
#define CONN_WBUF_MIN        32768  /* write buffer after HELLO, at least */

static void conn_on_io(struct ev_loop *loop, ev_io *io, int revents);
static void conn_on_timer(struct ev_loop *loop, ev_timer *t, int revents);

/* How many NOTIFYs tell a connection of HAProxy 3.1+ from one of 2.x. */
#define CONN_PEER_PROBE 8

/* A HAProxy connection's version from the stream-id of its NOTIFYs, one
 * at a time: 3.1+'s multiplexer numbers the streams of each connection
 * 1, 3, 5, ... (mux_spop.c: (max_id + 1) | 1), one stream per SPOE
 * request, so the first CONN_PEER_PROBE NOTIFYs of one of its connections
 * carry 1, 3, 5, ... 15, in that order or close to it (c->probed: a bit
 * per id seen); 2.x numbers them with its process-wide stream counter, so
 * the first NOTIFY of its connections is almost always another number
 * already. A 2.x connection could pass for 3.1+ only if it carried every
 * odd one of its process's first 16 streams, and nothing else first; a
 * 3.1+ connection whose first streams ended before their NOTIFY passes
 * for 2.x. Either only changes the scheduling (env->mux_peers,
 * env->applet_peers: the worker). */
static void conn_peer_guess(struct conn *c, uint64_t stream_id)
{
	uint8_t bit = stream_id < 2 * CONN_PEER_PROBE ? (uint8_t)(1u << (stream_id >> 1)) : 0;

	if ((stream_id & 1) == 0 || bit == 0 || (c->probed & bit)) {
		c->peer = CONN_PEER_APPLET;
		c->s.env->applet_peers++;
		return;
	}
	c->probed |= bit;
	if (c->probed == (1u << CONN_PEER_PROBE) - 1) {
		c->peer = CONN_PEER_MUX;
		c->s.env->mux_peers++;
	}
}

static void conn_close(struct conn *c)
{
	if (c->s.dead)
		return;
	if (c->peer == CONN_PEER_MUX)
		c->s.env->mux_peers--;
	else if (c->peer == CONN_PEER_APPLET)
		c->s.env->applet_peers--;
	/* ACKs still waiting will not be written. */
	decide_pending_detach_all(&c->owner);
	stream_close(&c->s);
}

/* Watch for reads while more frames may come, for writes while output is
 * queued. NOTIFYs whose answers wait (a store, a delay) never stop the
 * reads: the decision layer bounds them (agent/decide.h); only a peer
 * that does not read its answers does (conn_process). */
static void conn_update_events(struct conn *c)
{
	stream_watch(&c->s, c->state != CONN_CLOSING);
}

/* Sends queued output; a CLOSING connection closes once all is sent.
 * Returns 0, or -1 when the connection was closed. */
static int conn_flush(struct conn *c)
{
	if (stream_send(&c->s) < 0 || (c->s.wlen == 0 && c->state == CONN_CLOSING)) {
		conn_close(c);
		return -1;
	}
	return 0;
}

/* Queues an AGENT-DISCONNECT and moves to CLOSING: nothing more is read.
 * (If the peer stopped reading and the write buffer is full, no
 * DISCONNECT fits: the connection is then just closed.) */
static void conn_fail(struct conn *c, enum spop_err err)
{
	struct spop_writer w;

	if (c->state == CONN_CLOSING)
		return;
	if (err != SPOP_ERR_NONE && err != SPOP_ERR_TIMEOUT)
		metrics_add(&metrics_me->errors[METRICS_ERR_PROTOCOL], 1);
	if (err != SPOP_ERR_NONE && log_limit(&c->s.env->fail_log, ev_now(c->s.env->loop)))
		LOG(LOG_INFO, "conn %d: disconnecting: %s (status %d)%s", c->s.fd, spop_err_str(err),
		    (int)err, log_limit_suppressed(&c->s.env->fail_log));
	spop_writer_init(&w, c->s.wbuf + c->s.wlen, c->s.wcap - c->s.wlen);
	if (spop_encode_agent_disconnect(&w, err, spop_err_str(err)) == 0)
		c->s.wlen += w.len;
	c->state = CONN_CLOSING;
	c->s.rlen = 0;
	stream_timer(&c->s, CONN_CLOSE_GRACE);
}

/* stream_grow() with the write buffer at least CONN_WBUF_MIN. */
static int conn_grow(struct conn *c, size_t rcap, size_t wcap)
{
	return stream_grow(&c->s, rcap, wcap < CONN_WBUF_MIN ? CONN_WBUF_MIN : wcap);
}

static void conn_hello(struct conn *c, const struct spop_frame *f)
{
	const struct config *cfg = c->s.env->cfg;
	struct spop_hello h;
	struct spop_writer w;
	enum spop_err err;

	if (f->type != SPOP_FRAME_HAPROXY_HELLO || f->stream_id != 0 || f->frame_id != 0) {
		conn_fail(c, SPOP_ERR_INVALID);
		return;
	}
	if (spop_hello_decode(f->payload, f->payload_len, &h, &err) < 0) {
		conn_fail(c, err);
		return;
	}
	if (!spop_version_supported(h.supported_versions, SPOP_VERSION)) {
		conn_fail(c, SPOP_ERR_BAD_VSN);
		return;
	}
	if (h.max_frame_size < SPOP_MIN_FRAME_SIZE) {
		conn_fail(c, SPOP_ERR_BAD_FRAME_SIZE);
		return;
	}
	/* Never more than HAProxy offered, never more than we accept. */
	c->max_frame = h.max_frame_size < cfg->max_frame_size ? (uint32_t)h.max_frame_size
							       : cfg->max_frame_size;
	spop_writer_init(&w, c->s.wbuf + c->s.wlen, c->s.wcap - c->s.wlen);
	if (spop_encode_agent_hello(&w, c->max_frame, "pipelining") < 0) {
		conn_fail(c, SPOP_ERR_RES);
		return;
	}
	c->s.wlen += w.len;
	/* A health check is answered, then the connection is closed. */
	if (h.healthcheck) {
		c->state = CONN_CLOSING;
		return;
	}
	/* HAProxy names its engine; our nginx module and test clients not. */
	if (h.engine_id.len == 0)
		c->peer = CONN_PEER_OTHER;
	if (conn_grow(c, (size_t)c->max_frame + SPOP_LEN_SIZE, 2 * ((size_t)c->max_frame +
								      SPOP_LEN_SIZE)) < 0) {
		conn_fail(c, SPOP_ERR_RES);
		return;
	}
	c->state = CONN_READY;
}

static void conn_frame(struct conn *c, const struct spop_frame *f, double now)
{
	struct spop_writer w;
	enum spop_err err;

	if ((f->flags & SPOP_FL_FIN) == 0 || (f->flags & SPOP_FL_ABORT)) {
		conn_fail(c, SPOP_ERR_FRAG_NOT_SUPPORTED);
		return;
	}
	if (c->state == CONN_HELLO) {
		conn_hello(c, f);
		return;
	}
	switch (f->type) {
	case SPOP_FRAME_NOTIFY:
	{
		c->last_notify = ev_now(c->s.env->loop);
		if (c->peer == CONN_PEER_UNKNOWN)
			conn_peer_guess(c, f->stream_id);
		spop_writer_init(&w, c->s.wbuf + c->s.wlen, c->s.wcap - c->s.wlen);
		int rc = handler_notify(c->s.env->handler, f, now, &w, c->max_frame, &err,
					&c->owner);
		if (rc < 0) {
			conn_fail(c, err);
			return;
		}
		c->s.wlen += w.len;	/* 0 when the ACK waits */
		break;
	}
	case SPOP_FRAME_HAPROXY_DISCONNECT: {
		struct spop_disconnect d;
		if (spop_disconnect_decode(f->payload, f->payload_len, &d, &err) == 0 &&
		    d.has_status_code && d.status_code > SPOP_ERR_TIMEOUT &&
		    log_limit(&c->s.env->disconnect_log, now)) {
			char text[LOG_ESCAPED_MAX];
			log_escape(d.message.ptr, d.message.len, text, sizeof(text));
			LOG(LOG_INFO, "conn %d: HAProxy disconnects: %u \"%s\"%s", c->s.fd,
			    d.status_code, text, log_limit_suppressed(&c->s.env->disconnect_log));
		}
		conn_fail(c, SPOP_ERR_NONE);
		break;
	}
	case SPOP_FRAME_UNSET:
		conn_fail(c, SPOP_ERR_FRAG_NOT_SUPPORTED);
		break;
	default:
		/* A second HELLO, an agent's frame or an unknown type. SPOE.txt
		 * lets an agent skip unknown frames or fail; HAProxy 3.1's mux
		 * fails, and so do we: the peer is not speaking SPOP 2.0. */
		conn_fail(c, SPOP_ERR_INVALID);
		break;
	}
}

/* Handles every whole frame in the read buffer while there is room for its
 * answer. */
static void conn_process(struct conn *c)
{
	size_t off = 0;
	double now = rl_now();
	double evnow = ev_now(c->s.env->loop);

	while (c->state != CONN_CLOSING && off < c->s.rlen) {
		struct spop_frame f;
		enum spop_err err;
		size_t limit = c->state == CONN_HELLO ? CONN_HELLO_FRAME_MAX : c->max_frame;

		/* Room for the largest answer, or wait until the peer reads. */
		if (c->s.wcap - c->s.wlen < (size_t)c->max_frame + SPOP_LEN_SIZE) {
			if (conn_flush(c) < 0)
				return;
			stream_compact(&c->s);
			if (c->s.wcap - c->s.wlen < (size_t)c->max_frame + SPOP_LEN_SIZE)
				break;
		}
		int rc = spop_frame_decode(c->s.rbuf + off, c->s.rlen - off, limit, &f, &err);
		if (rc == 0)
			break;
		if (rc < 0) {
			conn_fail(c, err);
			break;
		}
		off += (size_t)rc;
		c->s.last_rx = evnow;
		conn_frame(c, &f, now);
	}
	if (c->state == CONN_CLOSING) {
		c->s.rlen = 0;
		return;
	}
	stream_consume(&c->s, off);
	/* The frame timer measures one frame: it restarts whenever a whole
	 * frame was consumed, so a busy peer whose writes end mid-frame is
	 * never cut while frames keep completing. */
	if (c->s.rlen == 0)
		c->s.partial_since = 0;
	else if (off > 0 || c->s.partial_since == 0)
		c->s.partial_since = evnow;
}

static bool conn_more(const struct stream *s)
{
	return container_of(s, const struct conn, s)->state != CONN_CLOSING;
}

static void conn_process_stream(struct stream *s)
{
	conn_process(container_of(s, struct conn, s));
}

/* Reads and answers what came; at EOF, closes once the answers are out. */
static void conn_read(struct conn *c)
{
	if (stream_read(&c->s, conn_more, conn_process_stream) && !c->s.dead)
		c->state = CONN_CLOSING;
}

/* Sends what is queued; frames left in the read buffer (held back for
 * want of output room) are answered once it drains;
 * then the watcher is set for what comes next. */
static void conn_continue(struct conn *c)
{
	if (conn_flush(c) < 0)
		return;
	if (c->s.rlen > 0 && c->state != CONN_CLOSING) {
		conn_process(c);
		if (conn_flush(c) < 0)
			return;
	}
	conn_update_events(c);
}

static void conn_on_io(struct ev_loop *loop, ev_io *io, int revents)
{
	struct conn *c = container_of(io, struct conn, s.io);
	(void)loop;

	if (revents & EV_READ)
		conn_read(c);
	if (c->s.dead)
		return;
	if (c->s.draining && c->state != CONN_CLOSING && c->s.rlen == 0 && !c->owner.list)
		conn_fail(c, SPOP_ERR_NONE);
	conn_continue(c);
}

/* One timer per connection: the HELLO deadline, then the half-frame
 * deadline while a frame is partly in, else the idle deadline. In CLOSING
 * it bounds the final flush. */
static void conn_on_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct conn *c = container_of(t, struct conn, s.timer);
	const struct config *cfg = c->s.env->cfg;
	double now = ev_now(loop), deadline;
	(void)revents;

	if (c->state == CONN_CLOSING) {
		conn_close(c);
		return;
	}
	if (c->state == CONN_HELLO)
		deadline = c->s.created + cfg->frame_timeout_ms / 1000.0;
	else if (c->s.partial_since > 0)
		deadline = c->s.partial_since + cfg->frame_timeout_ms / 1000.0;
	else
		deadline = c->s.last_rx + cfg->idle_timeout_ms / 1000.0;
	if (now >= deadline) {
		if (log_level >= LOG_DEBUG && log_limit(&c->s.env->io_log, now))
			LOG(LOG_DEBUG, "conn %d: timeout%s", c->s.fd,
			    log_limit_suppressed(&c->s.env->io_log));
		conn_fail(c, SPOP_ERR_TIMEOUT);
		if (conn_flush(c) == 0)
			conn_update_events(c);
		return;
	}
	/* Check again at the earliest deadline that may apply by then: a
	 * frame may start arriving before the idle deadline. */
	double next = deadline - now;
	double frame = cfg->frame_timeout_ms / 1000.0;
	if (c->s.partial_since == 0 && next > frame)
		next = frame;
	ev_timer_set(t, next, 0.);
	ev_timer_start(loop, t);
}

_Static_assert(offsetof(struct conn, s) == 0, "stream_free() frees the connection");

static struct stream *conn_open(struct front_env *env, int fd)
{
	struct conn *c = calloc(1, sizeof(*c));

	/* Small buffers until HELLO (conn_hello grows them to the
	 * negotiated frame size): room for a HELLO in, a HELLO or a
	 * DISCONNECT out. */
	if (!c || stream_open(&c->s, &spop_front, env, fd, CONN_HELLO_FRAME_MAX + SPOP_LEN_SIZE,
			      2 * (CONN_HELLO_FRAME_MAX + SPOP_LEN_SIZE), conn_on_io,
			      conn_on_timer) < 0) {
		free(c);
		return NULL;
	}
	c->state = CONN_HELLO;
	c->owner.deliver = conn_deliver;
	c->max_frame = CONN_HELLO_FRAME_MAX;
	c->last_notify = c->s.created;
	return &c->s;
}

static void conn_drain(struct stream *s)
{
	struct conn *c = container_of(s, struct conn, s);

	if (c->s.dead)
		return;
	c->s.draining = true;
	/* Answer what is already in the socket, then leave. */
	conn_read(c);
	if (c->s.dead)
		return;
	if (c->state != CONN_CLOSING && c->s.rlen == 0 && !c->owner.list)
		conn_fail(c, SPOP_ERR_NONE);
	if (conn_flush(c) == 0)
		conn_update_events(c);
}

#define CONN_WBUF_MAX (4u << 20)    /* a peer that stops reading is dropped */

void conn_deliver(struct decide_owner *owner, struct decide_pending *p)
{
	struct conn *c = container_of(owner, struct conn, owner);
	struct handler *h = c->s.env->handler;
	struct spop_writer w;
	enum spop_err err;

	if (c->s.dead || c->state == CONN_CLOSING) {
		decide_pending_release(h->dec, p);
		return;
	}
	/* Room for one more ACK: grow the buffer rather than drop an answer,
	 * up to a bound. */
	size_t need = (size_t)c->max_frame + SPOP_LEN_SIZE;
	if (c->s.wcap - c->s.wlen < need) {
		stream_compact(&c->s);
		if (c->s.wcap - c->s.wlen < need &&
		    (c->s.wcap * 2 > CONN_WBUF_MAX || conn_grow(c, 0, c->s.wcap * 2) < 0)) {
			decide_pending_release(h->dec, p);
			if (log_limit(&c->s.env->fail_log, ev_now(c->s.env->loop)))
				LOG(LOG_WARN, "conn %d: peer does not read its ACKs; closing%s", c->s.fd,
				    log_limit_suppressed(&c->s.env->fail_log));
			conn_close(c);
			return;
		}
	}
	spop_writer_init(&w, c->s.wbuf + c->s.wlen, c->s.wcap - c->s.wlen);
	int rc = handler_encode_pending(h, p, &w, c->max_frame, &err);
	decide_pending_release(h->dec, p);
	if (rc < 0) {
		conn_fail(c, err);
	} else {
		c->s.wlen += w.len;
		if (c->s.draining && !c->owner.list && c->s.rlen == 0)
			conn_fail(c, SPOP_ERR_NONE);
	}
	/* Not sent now: the ACKs of every hit the store answered together
	 * leave in one write, when the socket says it is writable (the next
	 * loop iteration), which also answers frames held back meanwhile. */
	conn_update_events(c);
}

static void conn_evict(struct stream *s)
{
	struct conn *c = container_of(s, struct conn, s);
	struct spop_writer w;

	if (c->s.dead)
		return;
	/* Best effort: one DISCONNECT if it fits the socket now, then close. */
	if (c->state != CONN_CLOSING) {
		spop_writer_init(&w, c->s.wbuf + c->s.wlen, c->s.wcap - c->s.wlen);
		if (spop_encode_agent_disconnect(&w, SPOP_ERR_NONE, "idle connection evicted") == 0)
			c->s.wlen += w.len;
	}
	stream_send_once(&c->s);
	conn_close(c);
}

static void conn_close_now(struct stream *s)
{
	conn_close(container_of(s, struct conn, s));
}

/* At max_connections, a connection whose last NOTIFY (or accept, for one
 * that never sent any) is old may give way: a peer that only keeps its
 * connection open, or only pings, cannot hold a slot. */
static double conn_idle_since(const struct stream *s)
{
	const struct conn *c = container_of(s, const struct conn, s);

	return c->state == CONN_CLOSING ? -1 : c->last_notify;
}

static const char *conn_address(const struct config *cfg)
{
	return cfg->listen;
}

/* The worker's SPOP handler (agent/handler.h): its messages as the
 * configuration says (held answers come back through each connection's
 * owner: conn_deliver). */
static int conn_start(struct front_env *env)
{
	struct handler *h = calloc(1, sizeof(*h));

	if (!h || handler_init(h, env->cfg, env->decide, env->cfg->max_frame_size) < 0) {
		free(h);
		return -1;
	}
	env->handler = h;
	return 0;
}

/* A reload may change the messages (their namespaces, arguments). */
static int conn_reload(struct front_env *env)
{
	handler_free(env->handler);
	if (handler_init(env->handler, env->cfg, env->decide, env->cfg->max_frame_size) < 0)
		return -1;
	return 0;
}

static void conn_stop(struct front_env *env)
{
	if (env->handler)
		handler_free(env->handler);
	free(env->handler);
	env->handler = NULL;
}

const struct front_ops spop_front = {
	.id = FRONT_SPOP,
	.address = conn_address,
	.start = conn_start,
	.reload = conn_reload,
	.stop = conn_stop,
	.open = conn_open,
	.idle_since = conn_idle_since,
	.evict_after = 1.0,           /* a second without a NOTIFY */
	.drain = conn_drain,
	.evict = conn_evict,
	.close = conn_close_now,
	.free = stream_free,
};
