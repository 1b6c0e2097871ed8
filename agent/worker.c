/*
 * worker.c - a worker process's event loop: accepts on the listener
 * inherited from the master, serves connections, stops on SIGTERM after
 * answering the frames it already received.
 */
#include "agent/worker.h"
#include "strategies/container.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/config.h"
#include "agent/conn.h"
#include "agent/http_front.h"
#include "agent/log.h"
#include "agent/metrics.h"
#include "agent/ratelimit.h"
#include "agent/sync.h"

#define WORKER_ACCEPTS_PER_EVENT 64
#define WORKER_DRAIN_SECONDS     5.0
#define WORKER_ACCEPT_PAUSE      0.1     /* after EMFILE and the like */
#define WORKER_STOP_POLL         0.05    /* while stopping: is everything done? */
#define WORKER_CAP_RECHECK       1.0     /* at max_connections: look for an idle one */
#define WORKER_EVICT_IDLE        1.0     /* seconds without a NOTIFY: evictable */

/* At max_connections, the connection to close for a new peer: the one
 * whose last NOTIFY (or accept, for one that never sent any) is the
 * oldest, if that is at least WORKER_EVICT_IDLE ago. NULL: every one is
 * busy. A
 * peer that only keeps its connection open (or sends anything but
 * NOTIFYs) cannot hold a slot against a peer that needs it. O(connections),
 * and only at the cap when a peer is waiting. */
static struct conn *worker_idlest(const struct worker *w, double now)
{
	struct conn *best = NULL;
	double best_t = now - WORKER_EVICT_IDLE;

	for (struct conn *c = w->conns; c; c = c->next) {
		double t = c->last_notify;

		if (!c->dead && c->state != CONN_CLOSING && t <= best_t) {
			best = c;
			best_t = t;
		}
	}
	return best;
}

static void worker_on_accept_pause(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker *w = container_of(t, struct worker, accept_pause_w);
	(void)revents;
	if (!w->stopping)
		ev_io_start(loop, &w->accept_w);
}

/* Everything a stopping worker waits for is done. */
static bool worker_done(const struct worker *w)
{
	return w->stopping && w->nconns == 0 && !sync_busy(w->sync) && w->decide.npending == 0;
}

/* A connection closed: accepts paused at the cap start again. */
static void worker_below_cap(struct worker *w)
{
	if (w->stopping || w->nconns >= w->cfg->max_connections)
		return;
	if (!ev_is_active(&w->accept_w) && !ev_is_active(&w->accept_pause_w))
		ev_io_start(w->loop, &w->accept_w);
	if (w->http_fd >= 0 && !ev_is_active(&w->http_accept_w) &&
	    !ev_is_active(&w->http_pause_w))
		ev_io_start(w->loop, &w->http_accept_w);
}

void worker_conn_closed(struct worker *w, struct conn *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		w->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->prev = NULL;
	c->next = w->dead;
	w->dead = c;
	w->nconns--;
	worker_below_cap(w);
}

void worker_http_closed(struct worker *w, struct http_conn *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		w->hconns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->prev = NULL;
	c->next = w->hdead;
	w->hdead = c;
	w->nconns--;
	worker_below_cap(w);
}

/* Frees the connections closed during this loop iteration's callbacks. */
static void worker_on_check(struct ev_loop *loop, ev_check *chk, int revents)
{
	struct worker *w = container_of(chk, struct worker, reap_w);
	(void)revents;

	while (w->dead) {
		struct conn *c = w->dead;
		w->dead = c->next;
		conn_free(c);
	}
	while (w->hdead) {
		struct http_conn *c = w->hdead;
		w->hdead = c->next;
		http_conn_free(c);
	}
	/* Stop once connections are done and no push waits for its store
	 * (its diffs would otherwise be pushed twice by the final flush). */
	if (worker_done(w))
		ev_break(loop, EVBREAK_ALL);
}

static void worker_on_accept(struct ev_loop *loop, ev_io *io, int revents)
{
	struct worker *w = container_of(io, struct worker, accept_w);
	(void)revents;

	for (int i = 0; i < WORKER_ACCEPTS_PER_EVENT; i++) {
		struct conn *idle = NULL;

		if (w->nconns >= w->cfg->max_connections) {
			double now = ev_now(loop);

			idle = worker_idlest(w, now);
			if (!idle) {
				/* All busy: leave new connections to the other workers;
				 * look again in a while. */
				if (log_limit(&w->cap_log, now))
					LOG(LOG_WARN, "worker at max_connections (%u), all busy: "
					    "not accepting%s", w->nconns,
					    log_limit_suppressed(&w->cap_log));
				ev_io_stop(loop, &w->accept_w);
				ev_timer_stop(loop, &w->accept_pause_w);
				ev_timer_set(&w->accept_pause_w, WORKER_CAP_RECHECK, 0.);
				ev_timer_start(loop, &w->accept_pause_w);
				return;
			}
		}
		int fd = accept4(w->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return;
			/* EMFILE, ENFILE, ENOBUFS...: the listener stays readable;
			 * pause accepting instead of spinning on it. */
			if (log_limit(&w->accept_log, ev_now(loop)))
				LOG(LOG_WARN, "accept: %s; pausing accepts for %.0f ms%s", strerror(errno),
				    WORKER_ACCEPT_PAUSE * 1000, log_limit_suppressed(&w->accept_log));
			ev_io_stop(loop, &w->accept_w);
			ev_timer_stop(loop, &w->accept_pause_w);
			ev_timer_set(&w->accept_pause_w, WORKER_ACCEPT_PAUSE, 0.);
			ev_timer_start(loop, &w->accept_pause_w);
			return;
		}
		if (idle) {
			/* A peer is waiting: the longest idle connection goes. */
			if (log_limit(&w->evict_log, ev_now(loop)))
				LOG(LOG_INFO, "max_connections (%u): closing the longest idle "
				    "connection for a new one%s", w->nconns,
				    log_limit_suppressed(&w->evict_log));
			conn_evict(idle);
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); /* fails on unix sockets */
		struct conn *c = conn_new(w, fd);
		if (!c) {
			LOG(LOG_ERR, "out of memory for a connection");
			continue;
		}
		c->next = w->conns;
		if (w->conns)
			w->conns->prev = c;
		w->conns = c;
		w->nconns++;
	}
}

/* At max_connections, the HTTP connection to close for a new peer: the
 * one whose last request is the oldest, at least WORKER_EVICT_IDLE ago,
 * with nothing half-read or held. */
static struct http_conn *worker_http_idlest(const struct worker *w, double now)
{
	struct http_conn *best = NULL;
	double best_t = now - WORKER_EVICT_IDLE;

	for (struct http_conn *c = w->hconns; c; c = c->next) {
		if (!c->dead && !c->pending && c->partial_since == 0 && c->last_rx <= best_t) {
			best = c;
			best_t = c->last_rx;
		}
	}
	return best;
}

static void worker_on_http_pause(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker *w = container_of(t, struct worker, http_pause_w);
	(void)revents;
	if (!w->stopping)
		ev_io_start(loop, &w->http_accept_w);
}

static void worker_http_pause(struct worker *w, double seconds)
{
	ev_io_stop(w->loop, &w->http_accept_w);
	ev_timer_stop(w->loop, &w->http_pause_w);
	ev_timer_set(&w->http_pause_w, seconds, 0.);
	ev_timer_start(w->loop, &w->http_pause_w);
}

/* The HTTP listener: the same cap and the same idle eviction as SPOP
 * (an HTTP keep-alive connection idle for a second gives way). */
static void worker_on_http_accept(struct ev_loop *loop, ev_io *io, int revents)
{
	struct worker *w = container_of(io, struct worker, http_accept_w);
	(void)revents;

	for (int i = 0; i < WORKER_ACCEPTS_PER_EVENT; i++) {
		struct http_conn *idle = NULL;
		struct conn *sidle = NULL;

		if (w->nconns >= w->cfg->max_connections) {
			double now = ev_now(loop);

			idle = worker_http_idlest(w, now);
			if (!idle)
				sidle = worker_idlest(w, now);
			if (!idle && !sidle) {
				if (log_limit(&w->cap_log, now))
					LOG(LOG_WARN, "worker at max_connections (%u), all busy: "
					    "not accepting HTTP%s", w->nconns,
					    log_limit_suppressed(&w->cap_log));
				worker_http_pause(w, WORKER_CAP_RECHECK);
				return;
			}
		}
		int fd = accept4(w->http_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return;
			if (log_limit(&w->accept_log, ev_now(loop)))
				LOG(LOG_WARN, "accept (HTTP): %s; pausing accepts for %.0f ms%s",
				    strerror(errno), WORKER_ACCEPT_PAUSE * 1000,
				    log_limit_suppressed(&w->accept_log));
			worker_http_pause(w, WORKER_ACCEPT_PAUSE);
			return;
		}
		if (idle)
			http_conn_evict(idle);
		else if (sidle)
			conn_evict(sidle);
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		struct http_conn *c = http_conn_new(w, fd);
		if (!c) {
			if (log_limit(&w->budget_log, ev_now(loop)))
				LOG(LOG_WARN, "HTTP connection refused: out of memory or "
				    "max_buffer_memory%s", log_limit_suppressed(&w->budget_log));
			continue;
		}
		c->next = w->hconns;
		if (w->hconns)
			w->hconns->prev = c;
		w->hconns = c;
		w->nconns++;
	}
}

static void worker_on_drain_timeout(struct ev_loop *loop, ev_timer *t, int revents)
{
	(void)t;
	(void)revents;
	LOG(LOG_WARN, "shutdown: connections still open after %.0f s, closing them",
	    WORKER_DRAIN_SECONDS);
	ev_break(loop, EVBREAK_ALL);
}

static void worker_on_stop_poll(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker *w = container_of(t, struct worker, stop_poll_w);
	(void)revents;
	if (worker_done(w))
		ev_break(loop, EVBREAK_ALL);
}

static void worker_on_signal(struct ev_loop *loop, ev_signal *s, int revents)
{
	struct worker *w = s->signum == SIGTERM
		? container_of(s, struct worker, term_w)
		: container_of(s, struct worker, int_w);
	(void)revents;

	if (w->stopping)
		return;
	w->stopping = true;
	LOG(LOG_DEBUG, "stopping: %u connections to finish", w->nconns);
	ev_io_stop(loop, &w->accept_w);
	ev_timer_stop(loop, &w->accept_pause_w);
	ev_io_stop(loop, &w->http_accept_w);
	ev_timer_stop(loop, &w->http_pause_w);
	for (struct conn *c = w->conns, *next; c; c = next) {
		next = c->next;
		conn_drain(c);
	}
	for (struct http_conn *c = w->hconns, *next; c; c = next) {
		next = c->next;
		http_conn_drain(c);
	}
	ev_timer_init(&w->drain_w, worker_on_drain_timeout, WORKER_DRAIN_SECONDS, 0.);
	ev_timer_start(loop, &w->drain_w);
	/* The last close may happen in any callback: poll for the end. */
	ev_timer_init(&w->stop_poll_w, worker_on_stop_poll, WORKER_STOP_POLL, WORKER_STOP_POLL);
	ev_timer_start(loop, &w->stop_poll_w);
}

int worker_run(const struct config *cfg, struct rl *rl, const struct worker_listeners *ls,
	       int id)
{
	struct worker w;

	memset(&w, 0, sizeof(w));
	w.cfg = cfg;
	w.rl = rl;
	w.id = id;
	w.listen_fd = ls->spop_fd;
	w.http_fd = ls->http_fd;
	w.metrics = ls->metrics;
	metrics_attach(ls->metrics, id);
	log_worker_id = id;
	/* Die with the master. */
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() == 1)
		return 1;

	decide_init(&w.decide, rl);
	if (handler_init(&w.handler, cfg, &w.decide, cfg->max_frame_size) < 0) {
		LOG(LOG_ERR, "out of memory");
		return 1;
	}
	w.loop = ev_loop_new(EVFLAG_AUTO);
	if (!w.loop) {
		LOG(LOG_ERR, "cannot create the event loop");
		handler_free(&w.handler);
		return 1;
	}
	/* Watch the signals before unblocking them (the master blocked them
	 * before fork), so that a SIGTERM arriving now stops us cleanly. */
	ev_signal_init(&w.term_w, worker_on_signal, SIGTERM);
	ev_signal_start(w.loop, &w.term_w);
	ev_signal_init(&w.int_w, worker_on_signal, SIGINT);
	ev_signal_start(w.loop, &w.int_w);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	ev_io_init(&w.accept_w, worker_on_accept, w.listen_fd, EV_READ);
	ev_io_start(w.loop, &w.accept_w);
	ev_init(&w.http_pause_w, worker_on_http_pause);
	if (w.http_fd >= 0) {
		ev_io_init(&w.http_accept_w, worker_on_http_accept, w.http_fd, EV_READ);
		ev_io_start(w.loop, &w.http_accept_w);
	}
	ev_init(&w.accept_pause_w, worker_on_accept_pause);
	ev_check_init(&w.reap_w, worker_on_check);
	ev_check_start(w.loop, &w.reap_w);

	if (sync_start(w.loop, rl, id, &w.sync) < 0) {
		/* A store we cannot even set up: exit, the master retries. */
		LOG(LOG_ERR, "cannot start the sync of the stores");
		ev_loop_destroy(w.loop);
		handler_free(&w.handler);
		return 1;
	}
	w.decide.sync = w.sync;
	w.handler.deliver = conn_deliver;

	LOG(LOG_DEBUG, "worker %d serving", id);
	ev_run(w.loop, 0);

	/* Answers still waiting for a store go nowhere now; then stop the
	 * sync (which fails those pushes). */
	for (struct conn *c = w.conns; c; c = c->next)
		decide_pending_detach_all(&c->pending);
	for (struct http_conn *c = w.hconns; c; c = c->next)
		decide_pending_detach_all(&c->pending);
	sync_stop(w.sync);

	for (struct conn *c = w.conns, *next; c; c = next) {
		next = c->next;
		ev_io_stop(w.loop, &c->io);
		ev_timer_stop(w.loop, &c->timer);
		close(c->fd);
		conn_free(c);
	}
	while (w.dead) {
		struct conn *c = w.dead;
		w.dead = c->next;
		conn_free(c);
	}
	for (struct http_conn *c = w.hconns, *next; c; c = next) {
		next = c->next;
		ev_io_stop(w.loop, &c->io);
		ev_timer_stop(w.loop, &c->timer);
		close(c->fd);
		http_conn_free(c);
	}
	while (w.hdead) {
		struct http_conn *c = w.hdead;
		w.hdead = c->next;
		http_conn_free(c);
	}
	ev_loop_destroy(w.loop);
	handler_free(&w.handler);
	decide_free(&w.decide);
	return 0;
}
