/*
 * spop_front.c - the SPOP front: a connection's state machine (see
 * spop_front.h). Frames are parsed in place in the read buffer; answers
 * are appended to the write buffer and sent with one write() per batch,
 * each frame whole. The messages of a NOTIFY are agent/spop_handler.c's.
 */
#include "agent/spop_front.h"
#include "strategies/container.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/config.h"
#include "agent/spop_handler.h"
#include "agent/log.h"
#include "agent/metrics.h"
#include "agent/ratelimit.h"
#include "spop/spop.h"

#define SPOP_CONN_CLOSE_GRACE     1.0    /* seconds to flush a final DISCONNECT */
#define SPOP_CONN_HELLO_FRAME_MAX 4096   /* largest frame before HELLO (a HELLO is
				       about 150 bytes): the buffers of a peer
				       that has not said HELLO stay this small */
#define SPOP_CONN_WBUF_MIN        32768  /* write buffer after HELLO, at least */

static void spop_conn_on_io(struct ev_loop *loop, ev_io *io, int revents);
static void spop_conn_on_timer(struct ev_loop *loop, ev_timer *t, int revents);

/* The worker's SPOP handler (agent/spop_handler.h), the front's state:
 * its messages as the configuration says (held answers come back through
 * each connection's owner: spop_conn_deliver). */
static struct spop_handler *spop_conn_handler(const struct front_env *env)
{
	return env->state[FRONT_SPOP];
}

/* How many NOTIFYs tell a connection of HAProxy 3.1+ from one of 2.x. */
#define SPOP_CONN_PEER_PROBE 8

/* A HAProxy connection's version from the stream-id of its NOTIFYs, one
 * at a time: 3.1+'s multiplexer numbers the streams of each connection
 * 1, 3, 5, ... (mux_spop.c: (max_id + 1) | 1), one stream per SPOE
 * request, so the first SPOP_CONN_PEER_PROBE NOTIFYs of one of its connections
 * carry 1, 3, 5, ... 15, in that order or close to it (c->probed: a bit
 * per id seen); 2.x numbers them with its process-wide stream counter, so
 * the first NOTIFY of its connections is almost always another number
 * already. A 2.x connection could pass for 3.1+ only if it carried every
 * odd one of its process's first 16 streams, and nothing else first; a
 * 3.1+ connection whose first streams ended before their NOTIFY passes
 * for 2.x. Either only changes the scheduling (env->mux_peers,
 * env->applet_peers: the worker). */
static void spop_conn_peer_guess(struct spop_conn *c, uint64_t stream_id)
{
	uint8_t bit = stream_id < 2 * SPOP_CONN_PEER_PROBE ? (uint8_t)(1u << (stream_id >> 1)) : 0;

	if ((stream_id & 1) == 0 || bit == 0 || (c->probed & bit)) {
		c->peer = SPOP_CONN_PEER_APPLET;
		c->s.env->applet_peers++;
		return;
	}
	c->probed |= bit;
	if (c->probed == (1u << SPOP_CONN_PEER_PROBE) - 1) {
		c->peer = SPOP_CONN_PEER_MUX;
		c->s.env->mux_peers++;
	}
}

static void spop_conn_close(struct spop_conn *c)
{
	if (c->s.dead)
		return;
	if (c->peer == SPOP_CONN_PEER_MUX)
		c->s.env->mux_peers--;
	else if (c->peer == SPOP_CONN_PEER_APPLET)
		c->s.env->applet_peers--;
	/* ACKs still waiting will not be written. */
	decide_pending_detach_all(&c->owner);
	stream_close(&c->s);
}

/* Watch for reads while more frames may come, for writes while output is
 * queued. NOTIFYs whose answers wait (a store, a delay) never stop the
 * reads: the decision layer bounds them (agent/decide.h); only a peer
 * that does not read its answers does (spop_conn_process). */
static void spop_conn_update_events(struct spop_conn *c)
{
	stream_watch(&c->s, c->state != SPOP_CONN_CLOSING);
}

/* Sends queued output; a CLOSING connection closes once all is sent.
 * Returns 0, or -1 when the connection was closed. */
static int spop_conn_flush(struct spop_conn *c)
{
	if (stream_send(&c->s) < 0 || (c->s.wlen == 0 && c->state == SPOP_CONN_CLOSING)) {
		spop_conn_close(c);
		return -1;
	}
	return 0;
}

/* Queues an AGENT-DISCONNECT and moves to CLOSING: nothing more is read.
 * (If the peer stopped reading and the write buffer is full, no
 * DISCONNECT fits: the connection is then just closed.) */
static void spop_conn_fail(struct spop_conn *c, enum spop_err err)
{
	struct spop_writer w;

	if (c->state == SPOP_CONN_CLOSING)
		return;
	if (err != SPOP_ERR_NONE && err != SPOP_ERR_TIMEOUT)
		metrics_add(&metrics_me->errors[METRICS_ERR_PROTOCOL], 1);
	if (err != SPOP_ERR_NONE && log_limit(&c->s.env->fail_log, ev_now(c->s.env->loop)))
		LOG(LOG_INFO, "conn %d: disconnecting: %s (status %d)%s", c->s.fd, spop_err_str(err),
		    (int)err, log_limit_suppressed(&c->s.env->fail_log));
	spop_writer_init(&w, c->s.wbuf + c->s.wlen, c->s.wcap - c->s.wlen);
	if (spop_encode_agent_disconnect(&w, err, spop_err_str(err)) == 0)
		c->s.wlen += w.len;
	c->state = SPOP_CONN_CLOSING;
	c->s.rlen = 0;
	stream_timer(&c->s, SPOP_CONN_CLOSE_GRACE);
}

/* stream_grow() with the write buffer at least SPOP_CONN_WBUF_MIN. */
static int spop_conn_grow(struct spop_conn *c, size_t rcap, size_t wcap)
{
	return stream_grow(&c->s, rcap, wcap < SPOP_CONN_WBUF_MIN ? SPOP_CONN_WBUF_MIN : wcap);
}

static void spop_conn_hello(struct spop_conn *c, const struct spop_frame *f)
{
	const struct config *cfg = c->s.env->cfg;
	struct spop_hello h;
	struct spop_writer w;
	enum spop_err err;

	if (f->type != SPOP_FRAME_HAPROXY_HELLO || f->stream_id != 0 || f->frame_id != 0) {
		spop_conn_fail(c, SPOP_ERR_INVALID);
		return;
	}
	if (spop_hello_decode(f->payload, f->payload_len, &h, &err) < 0) {
		spop_conn_fail(c, err);
		return;
	}
	if (!spop_version_supported(h.supported_versions, SPOP_VERSION)) {
		spop_conn_fail(c, SPOP_ERR_BAD_VSN);
		return;
	}
	if (h.max_frame_size < SPOP_MIN_FRAME_SIZE) {
		spop_conn_fail(c, SPOP_ERR_BAD_FRAME_SIZE);
		return;
	}
	/* Never more than HAProxy offered, never more than we accept. */
	c->max_frame = h.max_frame_size < cfg->max_frame_size ? (uint32_t)h.max_frame_size
							       : cfg->max_frame_size;
	spop_writer_init(&w, c->s.wbuf + c->s.wlen, c->s.wcap - c->s.wlen);
	if (spop_encode_agent_hello(&w, c->max_frame, "pipelining") < 0) {
		spop_conn_fail(c, SPOP_ERR_RES);
		return;
	}
	c->s.wlen += w.len;
	/* A health check is answered, then the connection is closed. */
	if (h.healthcheck) {
		c->state = SPOP_CONN_CLOSING;
		return;
	}
	/* HAProxy names its engine; our nginx module and test clients not. */
	if (h.engine_id.len == 0)
		c->peer = SPOP_CONN_PEER_OTHER;
	if (spop_conn_grow(c, (size_t)c->max_frame + SPOP_LEN_SIZE, 2 * ((size_t)c->max_frame +
								      SPOP_LEN_SIZE)) < 0) {
		spop_conn_fail(c, SPOP_ERR_RES);
		return;
	}
	c->state = SPOP_CONN_READY;
}

static void spop_conn_frame(struct spop_conn *c, const struct spop_frame *f, double now)
{
	struct spop_writer w;
	enum spop_err err;

	if ((f->flags & SPOP_FL_FIN) == 0 || (f->flags & SPOP_FL_ABORT)) {
		spop_conn_fail(c, SPOP_ERR_FRAG_NOT_SUPPORTED);
		return;
	}
	if (c->state == SPOP_CONN_HELLO) {
		spop_conn_hello(c, f);
		return;
	}
	switch (f->type) {
	case SPOP_FRAME_NOTIFY:
	{
		c->last_notify = ev_now(c->s.env->loop);
		if (c->peer == SPOP_CONN_PEER_UNKNOWN)
			spop_conn_peer_guess(c, f->stream_id);
		spop_writer_init(&w, c->s.wbuf + c->s.wlen, c->s.wcap - c->s.wlen);
		int rc = spop_handler_notify(spop_conn_handler(c->s.env), f, now, &w, c->max_frame, &err,
					&c->owner);
		if (rc < 0) {
			spop_conn_fail(c, err);
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
		spop_conn_fail(c, SPOP_ERR_NONE);
		break;
	}
	case SPOP_FRAME_UNSET:
		spop_conn_fail(c, SPOP_ERR_FRAG_NOT_SUPPORTED);
		break;
	default:
		/* A second HELLO, an agent's frame or an unknown type. SPOE.txt
		 * lets an agent skip unknown frames or fail; HAProxy 3.1's mux
		 * fails, and so do we: the peer is not speaking SPOP 2.0. */
		spop_conn_fail(c, SPOP_ERR_INVALID);
		break;
	}
}

/* Handles every whole frame in the read buffer while there is room for its
 * answer. */
static void spop_conn_process(struct spop_conn *c)
{
	size_t off = 0;
	double now = rl_now();
	double evnow = ev_now(c->s.env->loop);

	while (c->state != SPOP_CONN_CLOSING && off < c->s.rlen) {
		struct spop_frame f;
		enum spop_err err;
		size_t limit = c->state == SPOP_CONN_HELLO ? SPOP_CONN_HELLO_FRAME_MAX : c->max_frame;

		/* Room for the largest answer, or wait until the peer reads. */
		if (c->s.wcap - c->s.wlen < (size_t)c->max_frame + SPOP_LEN_SIZE) {
			if (spop_conn_flush(c) < 0)
				return;
			stream_compact(&c->s);
			if (c->s.wcap - c->s.wlen < (size_t)c->max_frame + SPOP_LEN_SIZE)
				break;
		}
		int rc = spop_frame_decode(c->s.rbuf + off, c->s.rlen - off, limit, &f, &err);
		if (rc == 0)
			break;
		if (rc < 0) {
			spop_conn_fail(c, err);
			break;
		}
		off += (size_t)rc;
		c->s.last_rx = evnow;
		spop_conn_frame(c, &f, now);
	}
	if (c->state == SPOP_CONN_CLOSING) {
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

static bool spop_conn_more(const struct stream *s)
{
	return container_of(s, const struct spop_conn, s)->state != SPOP_CONN_CLOSING;
}

static void spop_conn_process_stream(struct stream *s)
{
	spop_conn_process(container_of(s, struct spop_conn, s));
}

/* Reads and answers what came; at EOF, closes once the answers are out. */
static void spop_conn_read(struct spop_conn *c)
{
	if (stream_read(&c->s, spop_conn_more, spop_conn_process_stream) && !c->s.dead)
		c->state = SPOP_CONN_CLOSING;
}

/* Sends what is queued; frames left in the read buffer (held back for
 * want of output room) are answered once it drains;
 * then the watcher is set for what comes next. */
static void spop_conn_continue(struct spop_conn *c)
{
	if (spop_conn_flush(c) < 0)
		return;
	if (c->s.rlen > 0 && c->state != SPOP_CONN_CLOSING) {
		spop_conn_process(c);
		if (spop_conn_flush(c) < 0)
			return;
	}
	spop_conn_update_events(c);
}

static void spop_conn_on_io(struct ev_loop *loop, ev_io *io, int revents)
{
	struct spop_conn *c = container_of(io, struct spop_conn, s.io);
	(void)loop;

	if (revents & EV_READ)
		spop_conn_read(c);
	if (c->s.dead)
		return;
	if (c->s.draining && c->state != SPOP_CONN_CLOSING && c->s.rlen == 0 && !c->owner.list)
		spop_conn_fail(c, SPOP_ERR_NONE);
	spop_conn_continue(c);
}

/* One timer per connection: the HELLO deadline, then the half-frame
 * deadline while a frame is partly in, else the idle deadline. In CLOSING
 * it bounds the final flush. */
static void spop_conn_on_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct spop_conn *c = container_of(t, struct spop_conn, s.timer);
	const struct config *cfg = c->s.env->cfg;
	double now = ev_now(loop), deadline;
	(void)revents;

	if (c->state == SPOP_CONN_CLOSING) {
		spop_conn_close(c);
		return;
	}
	if (c->state == SPOP_CONN_HELLO)
		deadline = c->s.created + cfg->frame_timeout_ms / 1000.0;
	else if (c->s.partial_since > 0)
		deadline = c->s.partial_since + cfg->frame_timeout_ms / 1000.0;
	else
		deadline = c->s.last_rx + cfg->idle_timeout_ms / 1000.0;
	if (now >= deadline) {
		if (log_level >= LOG_DEBUG && log_limit(&c->s.env->io_log, now))
			LOG(LOG_DEBUG, "conn %d: timeout%s", c->s.fd,
			    log_limit_suppressed(&c->s.env->io_log));
		spop_conn_fail(c, SPOP_ERR_TIMEOUT);
		if (spop_conn_flush(c) == 0)
			spop_conn_update_events(c);
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

_Static_assert(offsetof(struct spop_conn, s) == 0, "stream_free() frees the connection");

static struct stream *spop_conn_open(struct front_env *env, int fd)
{
	struct spop_conn *c = calloc(1, sizeof(*c));

	/* Small buffers until HELLO (spop_conn_hello grows them to the
	 * negotiated frame size): room for a HELLO in, a HELLO or a
	 * DISCONNECT out. */
	if (!c || stream_open(&c->s, &spop_front, env, fd, SPOP_CONN_HELLO_FRAME_MAX + SPOP_LEN_SIZE,
			      2 * (SPOP_CONN_HELLO_FRAME_MAX + SPOP_LEN_SIZE), spop_conn_on_io,
			      spop_conn_on_timer) < 0) {
		free(c);
		return NULL;
	}
	c->state = SPOP_CONN_HELLO;
	c->owner.deliver = spop_conn_deliver;
	c->max_frame = SPOP_CONN_HELLO_FRAME_MAX;
	c->last_notify = c->s.created;
	return &c->s;
}

static void spop_conn_drain(struct stream *s)
{
	struct spop_conn *c = container_of(s, struct spop_conn, s);

	if (c->s.dead)
		return;
	c->s.draining = true;
	/* Answer what is already in the socket, then leave. */
	spop_conn_read(c);
	if (c->s.dead)
		return;
	if (c->state != SPOP_CONN_CLOSING && c->s.rlen == 0 && !c->owner.list)
		spop_conn_fail(c, SPOP_ERR_NONE);
	if (spop_conn_flush(c) == 0)
		spop_conn_update_events(c);
}

#define SPOP_CONN_WBUF_MAX (4u << 20)    /* a peer that stops reading is dropped */

void spop_conn_deliver(struct decide_owner *owner, struct decide_pending *p)
{
	struct spop_conn *c = container_of(owner, struct spop_conn, owner);
	struct spop_handler *h = spop_conn_handler(c->s.env);
	struct spop_writer w;
	enum spop_err err;

	if (c->s.dead || c->state == SPOP_CONN_CLOSING) {
		decide_pending_release(h->dec, p);
		return;
	}
	/* Room for one more ACK: grow the buffer rather than drop an answer,
	 * up to a bound. */
	size_t need = (size_t)c->max_frame + SPOP_LEN_SIZE;
	if (c->s.wcap - c->s.wlen < need) {
		stream_compact(&c->s);
		if (c->s.wcap - c->s.wlen < need &&
		    (c->s.wcap * 2 > SPOP_CONN_WBUF_MAX || spop_conn_grow(c, 0, c->s.wcap * 2) < 0)) {
			decide_pending_release(h->dec, p);
			if (log_limit(&c->s.env->fail_log, ev_now(c->s.env->loop)))
				LOG(LOG_WARN, "conn %d: peer does not read its ACKs; closing%s", c->s.fd,
				    log_limit_suppressed(&c->s.env->fail_log));
			spop_conn_close(c);
			return;
		}
	}
	spop_writer_init(&w, c->s.wbuf + c->s.wlen, c->s.wcap - c->s.wlen);
	int rc = spop_handler_encode_pending(h, p, &w, c->max_frame, &err);
	decide_pending_release(h->dec, p);
	if (rc < 0) {
		spop_conn_fail(c, err);
	} else {
		c->s.wlen += w.len;
		if (c->s.draining && !c->owner.list && c->s.rlen == 0)
			spop_conn_fail(c, SPOP_ERR_NONE);
	}
	/* Not sent now: the ACKs of every hit the store answered together
	 * leave in one write, when the socket says it is writable (the next
	 * loop iteration), which also answers frames held back meanwhile. */
	spop_conn_update_events(c);
}

static void spop_conn_evict(struct stream *s)
{
	struct spop_conn *c = container_of(s, struct spop_conn, s);
	struct spop_writer w;

	if (c->s.dead)
		return;
	/* Best effort: one DISCONNECT if it fits the socket now, then close. */
	if (c->state != SPOP_CONN_CLOSING) {
		spop_writer_init(&w, c->s.wbuf + c->s.wlen, c->s.wcap - c->s.wlen);
		if (spop_encode_agent_disconnect(&w, SPOP_ERR_NONE, "idle connection evicted") == 0)
			c->s.wlen += w.len;
	}
	stream_send_once(&c->s);
	spop_conn_close(c);
}

static void spop_conn_close_now(struct stream *s)
{
	spop_conn_close(container_of(s, struct spop_conn, s));
}

/* At max_connections, a connection whose last NOTIFY (or accept, for one
 * that never sent any) is old may give way: a peer that only keeps its
 * connection open, or only pings, cannot hold a slot. */
static double spop_conn_idle_since(const struct stream *s)
{
	const struct spop_conn *c = container_of(s, const struct spop_conn, s);

	return c->state == SPOP_CONN_CLOSING ? -1 : c->last_notify;
}

static int spop_conn_start(struct front_env *env)
{
	struct spop_handler *h = calloc(1, sizeof(*h));

	if (!h || spop_handler_init(h, env->cfg, env->decide, env->cfg->max_frame_size) < 0) {
		free(h);
		return -1;
	}
	env->state[FRONT_SPOP] = h;
	return 0;
}

/* A reload may change the messages (their namespaces, arguments). */
static int spop_conn_reload(struct front_env *env)
{
	struct spop_handler *h = spop_conn_handler(env);

	spop_handler_free(h);
	return spop_handler_init(h, env->cfg, env->decide, env->cfg->max_frame_size);
}

static void spop_conn_stop(struct front_env *env)
{
	struct spop_handler *h = spop_conn_handler(env);

	if (h)
		spop_handler_free(h);
	free(h);
	env->state[FRONT_SPOP] = NULL;
}

const struct front_ops spop_front = {
	.id = FRONT_SPOP,
	.start = spop_conn_start,
	.reload = spop_conn_reload,
	.stop = spop_conn_stop,
	.open = spop_conn_open,
	.idle_since = spop_conn_idle_since,
	.evict_after = 1.0,           /* a second without a NOTIFY */
	.drain = spop_conn_drain,
	.evict = spop_conn_evict,
	.close = spop_conn_close_now,
	.free = stream_free,
};
