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
#include "agent/log.h"
#include "agent/metrics.h"
#include "agent/ratelimit.h"
#include "agent/reload.h"
#include "agent/sync.h"

#define WORKER_ACCEPTS_PER_EVENT 64
#define WORKER_DRAIN_SECONDS     5.0
#define WORKER_ACCEPT_PAUSE      0.1     /* after EMFILE and the like */
#define WORKER_STOP_POLL         0.05    /* while stopping: is everything done? */
#define WORKER_CAP_RECHECK       1.0     /* at max_connections: look for an idle one */
#define WORKER_EVICT_IDLE        1.0     /* seconds without a NOTIFY: evictable */
#define WORKER_RELOAD_WAIT       1.0     /* a reload waits this long for pushes */
#define WORKER_RELOAD_POLL       0.01

/* At max_connections, the connection to close for a new peer: the one
 * idle the longest (its front says since when: ops->idle_since), if that
 * is at least WORKER_EVICT_IDLE ago. NULL: every one is busy. O(connections),
 * and only at the cap when a peer is waiting. */
static struct stream *worker_idlest(const struct worker *w, double now)
{
	struct stream *best = NULL;
	double best_t = now - WORKER_EVICT_IDLE;

	for (struct stream *s = w->conns; s; s = s->next) {
		double t = s->ops->idle_since(s);

		if (!s->dead && t >= 0 && t <= best_t) {
			best = s;
			best_t = t;
		}
	}
	return best;
}

static void worker_on_accept_pause(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker_listener *l = container_of(t, struct worker_listener, pause_w);
	(void)revents;
	if (!l->w->stopping)
		ev_io_start(loop, &l->accept_w);
}

static void worker_pause(struct worker_listener *l, double seconds)
{
	ev_io_stop(l->w->loop, &l->accept_w);
	ev_timer_stop(l->w->loop, &l->pause_w);
	ev_timer_set(&l->pause_w, seconds, 0.);
	ev_timer_start(l->w->loop, &l->pause_w);
}

/* Everything a stopping worker waits for is done. */
static bool worker_done(const struct worker *w)
{
	return w->stopping && w->nconns == 0 && !sync_busy(w->sync) && w->decide.npending == 0;
}

/* env.closed: a connection closed; it is freed after the callbacks, and
 * accepts paused at the cap start again. */
static void worker_closed(struct front_env *env, struct stream *s)
{
	struct worker *w = container_of(env, struct worker, env);

	if (s->prev)
		s->prev->next = s->next;
	else
		w->conns = s->next;
	if (s->next)
		s->next->prev = s->prev;
	s->prev = NULL;
	s->next = w->dead;
	w->dead = s;
	w->nconns--;
	if (w->stopping || w->nconns >= w->cfg->max_connections)
		return;
	for (size_t i = 0; i < w->nlis; i++) {
		struct worker_listener *l = &w->lis[i];

		if (!ev_is_active(&l->accept_w) && !ev_is_active(&l->pause_w))
			ev_io_start(w->loop, &l->accept_w);
	}
}

static void worker_reap(struct worker *w)
{
	while (w->dead) {
		struct stream *s = w->dead;
		w->dead = s->next;
		s->ops->free(s);
	}
}

/* Frees the connections closed during this loop iteration's callbacks. */
static void worker_on_check(struct ev_loop *loop, ev_check *chk, int revents)
{
	struct worker *w = container_of(chk, struct worker, reap_w);
	(void)revents;

	worker_reap(w);
	/* Stop once connections are done and no push waits for its store
	 * (its diffs would otherwise be pushed twice by the final flush). */
	if (worker_done(w))
		ev_break(loop, EVBREAK_ALL);
}

/* Any listener: max_connections counts every front's connections; at the
 * cap the longest idle one (of any front) gives way to a new peer. */
static void worker_on_accept(struct ev_loop *loop, ev_io *io, int revents)
{
	struct worker_listener *l = container_of(io, struct worker_listener, accept_w);
	struct worker *w = l->w;
	(void)revents;

	for (int i = 0; i < WORKER_ACCEPTS_PER_EVENT; i++) {
		struct stream *idle = NULL;

		if (w->nconns >= w->cfg->max_connections) {
			double now = ev_now(loop);

			idle = worker_idlest(w, now);
			if (!idle) {
				/* All busy: leave new connections to the other workers;
				 * look again in a while. */
				if (log_limit(&w->cap_log, now))
					LOG(LOG_WARN, "worker at max_connections (%u), all busy: "
					    "not accepting %s%s", w->nconns, l->ops->name,
					    log_limit_suppressed(&w->cap_log));
				worker_pause(l, WORKER_CAP_RECHECK);
				return;
			}
		}
		int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return;
			/* EMFILE, ENFILE, ENOBUFS...: the listener stays readable;
			 * pause accepting instead of spinning on it. */
			if (log_limit(&w->accept_log, ev_now(loop)))
				LOG(LOG_WARN, "accept (%s): %s; pausing accepts for %.0f ms%s",
				    l->ops->name, strerror(errno), WORKER_ACCEPT_PAUSE * 1000,
				    log_limit_suppressed(&w->accept_log));
			worker_pause(l, WORKER_ACCEPT_PAUSE);
			return;
		}
		if (idle) {
			/* A peer is waiting: the longest idle connection goes. */
			if (log_limit(&w->evict_log, ev_now(loop)))
				LOG(LOG_INFO, "max_connections (%u): closing the longest idle "
				    "connection (%s) for a new one%s", w->nconns, idle->ops->name,
				    log_limit_suppressed(&w->evict_log));
			idle->ops->evict(idle);
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); /* fails on unix sockets */
		struct stream *s = l->ops->open(&w->env, fd);
		if (!s) {
			if (log_limit(&w->refuse_log, ev_now(loop)))
				LOG(LOG_WARN, "%s connection refused: out of memory or "
				    "max_buffer_memory%s", l->ops->name,
				    log_limit_suppressed(&w->refuse_log));
			continue;
		}
		s->next = w->conns;
		if (w->conns)
			w->conns->prev = s;
		w->conns = s;
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

/* A reload (agent/reload.h) applies once no push or held answer waits for
 * a store (at most WORKER_RELOAD_WAIT): the sync restarts with the new
 * namespaces, and a batch in flight would otherwise be failed and pushed
 * again under a new token. */
static void worker_on_reload(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker *w = container_of(t, struct worker, reload_w);
	(void)revents;

	if (w->stopping) {
		ev_timer_stop(loop, t);
		return;
	}
	if ((sync_busy(w->sync) || w->decide.npending > 0) &&
	    ev_now(loop) - w->reload_since < WORKER_RELOAD_WAIT)
		return;
	ev_timer_stop(loop, t);
	sync_stop(w->sync);
	w->sync = w->decide.sync = NULL;
	/* w->cfg is main's configuration (const for the fronts). */
	if (reload_worker((struct config *)w->cfg, w->env.rl) > 0) {
		decide_deliver_fn deliver = w->handler.deliver;

		handler_free(&w->handler);
		if (handler_init(&w->handler, w->cfg, &w->decide, w->cfg->max_frame_size) < 0) {
			LOG(LOG_ERR, "reload: out of memory");
			exit(1);
		}
		w->handler.deliver = deliver;
	}
	if (sync_start(loop, w->env.rl, w->id, &w->sync) < 0) {
		/* As at start: exit, the master starts another worker. */
		LOG(LOG_ERR, "reload: cannot start the sync of the stores");
		exit(1);
	}
	w->decide.sync = w->sync;
}

static void worker_on_hup(struct ev_loop *loop, ev_signal *s, int revents)
{
	struct worker *w = container_of(s, struct worker, hup_w);
	(void)revents;

	if (w->stopping || !reload_pending() || ev_is_active(&w->reload_w))
		return;
	w->reload_since = ev_now(loop);
	ev_timer_set(&w->reload_w, 0., WORKER_RELOAD_POLL);
	ev_timer_start(loop, &w->reload_w);
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
	for (size_t i = 0; i < w->nlis; i++) {
		ev_io_stop(loop, &w->lis[i].accept_w);
		ev_timer_stop(loop, &w->lis[i].pause_w);
	}
	for (struct stream *c = w->conns, *next; c; c = next) {
		next = c->next;
		c->ops->drain(c);
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
	w.id = id;
	w.lis[w.nlis++] = (struct worker_listener){ .w = &w, .ops = &spop_front, .fd = ls->spop_fd };
	if (ls->http_fd >= 0)
		w.lis[w.nlis++] = (struct worker_listener){ .w = &w, .ops = &http_front,
							    .fd = ls->http_fd };
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
	ev_signal_init(&w.hup_w, worker_on_hup, SIGHUP);
	ev_signal_start(w.loop, &w.hup_w);
	ev_init(&w.reload_w, worker_on_reload);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	w.env = (struct front_env){ .loop = w.loop, .cfg = cfg, .rl = rl, .decide = &w.decide,
				    .handler = &w.handler, .metrics = ls->metrics,
				    .closed = worker_closed };
	for (size_t i = 0; i < w.nlis; i++) {
		ev_io_init(&w.lis[i].accept_w, worker_on_accept, w.lis[i].fd, EV_READ);
		ev_io_start(w.loop, &w.lis[i].accept_w);
		ev_init(&w.lis[i].pause_w, worker_on_accept_pause);
	}
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

	/* Answers still waiting for a store go nowhere now (connections
	 * closed at once); then stop the sync (which fails those pushes). */
	while (w.conns)
		w.conns->ops->close(w.conns);
	sync_stop(w.sync);
	worker_reap(&w);
	ev_loop_destroy(w.loop);
	handler_free(&w.handler);
	decide_free(&w.decide);
	return 0;
}
