/*
 * stream.c - the buffered, non-blocking connection every front builds on
 * (agent/stream.h): buffers within the worker's max_buffer_memory, sends
 * that stop when the socket is full, the watcher set for what comes next.
 */
#include "agent/stream.h"
#include "agent/config.h"
#include "agent/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* May a connection of ops take more bytes of buffers? */
static bool stream_room(const struct front_env *env, const struct front_ops *ops, size_t more)
{
	const struct config *cfg = env->cfg;

	if (env->buf_bytes + more > cfg->max_buffer_memory)
		return false;
	return !ops->max_buffer_memory ||
	       env->front_bytes[ops->id] + more <= ops->max_buffer_memory(cfg);
}

int stream_open(struct stream *s, const struct front_ops *ops, struct front_env *env, int fd,
		size_t rcap, size_t wcap,
		void (*io_cb)(struct ev_loop *, ev_io *, int),
		void (*timer_cb)(struct ev_loop *, ev_timer *, int))
{
	const struct config *cfg = env->cfg;
	/* The first check comes at the earlier of the two deadlines. */
	double first = (cfg->frame_timeout_ms < cfg->idle_timeout_ms ? cfg->frame_timeout_ms
								      : cfg->idle_timeout_ms) / 1000.0;

	memset(s, 0, sizeof(*s));
	if (!stream_room(env, ops, rcap + wcap))
		return -1;
	s->rbuf = malloc(rcap);
	s->wbuf = malloc(wcap);
	if (!s->rbuf || !s->wbuf) {
		free(s->rbuf);
		free(s->wbuf);
		return -1;
	}
	s->ops = ops;
	s->env = env;
	s->fd = fd;
	s->rcap = rcap;
	s->wcap = wcap;
	env->buf_bytes += rcap + wcap;
	env->front_bytes[ops->id] += rcap + wcap;
	metrics_conn(ops->id, 1);
	s->created = s->last_rx = ev_now(env->loop);
	ev_io_init(&s->io, io_cb, fd, EV_READ);
	ev_io_start(env->loop, &s->io);
	ev_timer_init(&s->timer, timer_cb, first, 0.);
	ev_timer_start(env->loop, &s->timer);
	return 0;
}

/* Grows one buffer of a stream to want bytes, counted in env->buf_bytes
 * and its front's bytes. */
static int stream_grow_buf(struct stream *s, uint8_t **buf, size_t *cap, size_t want)
{
	uint8_t *nb;

	if (want <= *cap)
		return 0;
	if (!(nb = realloc(*buf, want)))
		return -1;
	*buf = nb;
	s->env->buf_bytes += want - *cap;
	s->env->front_bytes[s->ops->id] += want - *cap;
	*cap = want;
	return 0;
}

int stream_grow(struct stream *s, size_t rcap, size_t wcap)
{
	struct front_env *env = s->env;

	if (rcap < s->rcap)
		rcap = s->rcap;
	if (wcap < s->wcap)
		wcap = s->wcap;
	size_t more = rcap - s->rcap + wcap - s->wcap;
	if (more == 0)
		return 0;
	if (!stream_room(env, s->ops, more)) {
		if (log_limit(&env->budget_log, ev_now(env->loop)))
			LOG(LOG_WARN, "%s connection %d: %s max_buffer_memory reached: "
			    "more buffers refused%s", front_name(s->ops->id), s->fd,
			    env->buf_bytes + more > env->cfg->max_buffer_memory ? "the worker's"
										: "its front's",
			    log_limit_suppressed(&env->budget_log));
		return -1;
	}
	return stream_grow_buf(s, &s->rbuf, &s->rcap, rcap) < 0 ||
	       stream_grow_buf(s, &s->wbuf, &s->wcap, wcap) < 0 ? -1 : 0;
}

int stream_send(struct stream *s)
{
	while (s->woff < s->wlen) {
		ssize_t n = send(s->fd, s->wbuf + s->woff, s->wlen - s->woff, MSG_NOSIGNAL);
		if (n > 0) {
			s->woff += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		/* EPIPE, ECONNRESET: the peer is gone, a normal close. */
		if (log_level >= LOG_DEBUG && log_limit(&s->env->io_log, ev_now(s->env->loop)))
			LOG(LOG_DEBUG, "%s connection %d: write: %s%s", front_name(s->ops->id), s->fd,
			    n < 0 ? strerror(errno) : "closed",
			    log_limit_suppressed(&s->env->io_log));
		return -1;
	}
	s->woff = s->wlen = 0;
	return 0;
}

void stream_send_once(struct stream *s)
{
	if (s->woff < s->wlen)
		(void)!send(s->fd, s->wbuf + s->woff, s->wlen - s->woff, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void stream_compact(struct stream *s)
{
	if (s->woff == 0)
		return;
	memmove(s->wbuf, s->wbuf + s->woff, s->wlen - s->woff);
	s->wlen -= s->woff;
	s->woff = 0;
}

void stream_consume(struct stream *s, size_t n)
{
	if (n == 0)
		return;
	memmove(s->rbuf, s->rbuf + n, s->rlen - n);
	s->rlen -= n;
}

void stream_watch(struct stream *s, bool want_read)
{
	struct ev_loop *loop = s->env->loop;
	int ev = 0;

	if (want_read && s->rlen < s->rcap)
		ev |= EV_READ;
	if (s->woff < s->wlen)
		ev |= EV_WRITE;
	if (ev == 0) {
		ev_io_stop(loop, &s->io);
		return;
	}
	if ((s->io.events & (EV_READ | EV_WRITE)) != ev || !ev_is_active(&s->io)) {
		ev_io_stop(loop, &s->io);
		ev_io_set(&s->io, s->fd, ev);
		ev_io_start(loop, &s->io);
	}
}

void stream_timer(struct stream *s, double after)
{
	ev_timer_stop(s->env->loop, &s->timer);
	ev_timer_set(&s->timer, after, 0.);
	ev_timer_start(s->env->loop, &s->timer);
}

/* Gives the buffers back to the budgets. */
static void stream_release(struct stream *s)
{
	s->env->buf_bytes -= s->rcap + s->wcap;
	s->env->front_bytes[s->ops->id] -= s->rcap + s->wcap;
	free(s->rbuf);
	free(s->wbuf);
	s->rbuf = s->wbuf = NULL;
	s->rcap = s->wcap = 0;
	s->rlen = s->wlen = s->woff = 0;
}

void stream_close(struct stream *s)
{
	if (s->dead)
		return;
	s->dead = true;
	ev_io_stop(s->env->loop, &s->io);
	ev_timer_stop(s->env->loop, &s->timer);
	close(s->fd);
	s->fd = -1;
	/* The buffers go now, not when the connection is freed: a peer that
	 * evicted it for room gets that room at once. */
	stream_release(s);
	s->env->closed(s->env, s);
}

void stream_free(struct stream *s)
{
	metrics_conn(s->ops->id, -1);
	stream_release(s);
	free(s);
}

bool stream_read(struct stream *s, bool (*more)(const struct stream *s),
		 void (*process)(struct stream *s))
{
	for (int i = 0; i < STREAM_READS_PER_EVENT && more(s); i++) {
		if (s->rlen == s->rcap)
			break;
		ssize_t n = read(s->fd, s->rbuf + s->rlen, s->rcap - s->rlen);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n <= 0) {
			/* EOF, ECONNRESET: normal closes. Answer what came whole. */
			if (n < 0 && errno != ECONNRESET && log_level >= LOG_DEBUG &&
			    log_limit(&s->env->io_log, ev_now(s->env->loop)))
				LOG(LOG_DEBUG, "%s %d: read: %s%s", front_name(s->ops->id), s->fd,
				    strerror(errno), log_limit_suppressed(&s->env->io_log));
			process(s);
			return true;
		}
		size_t got = (size_t)n, room = s->rcap - s->rlen;
		s->rlen += got;
		process(s);
		if (s->dead || got < room)
			break;
	}
	return false;
}
