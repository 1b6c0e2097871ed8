/*
 * worker.c - a worker process's event loop: accepts on the listeners
 * inherited from the master, in turns with the other workers
 * (agent/balance.h), serves connections, stops on SIGTERM after answering
 * the frames it already received.
 */
#include "agent/worker.h"
#include "strategies/container.h"

#include <errno.h>
#include <sched.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/balance.h"
#include "agent/config.h"
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
#define WORKER_RELOAD_WAIT       1.0     /* a reload waits this long for pushes */
#define WORKER_RELOAD_POLL       0.01

/* The connection to close for a new peer of front `to`, among those of
 * front `among` (NULL: every front): the one idle the longest, if it has
 * been idle for its front's evict_after (ops->idle_since says since
 * when), and not since this loop iteration: a connection accepted in this
 * iteration has not been read yet (*later is then set: the next iteration
 * may take it). A peer of a front that is not a guest takes a guest's
 * place before one of its own kind: HAProxy is served while HTTP callers
 * hold connections. NULL: every one is busy. O(connections), and only
 * when a peer is waiting at a cap. */
static struct stream *worker_idlest(const struct worker *w, double now,
				    const struct front_ops *among, const struct front_ops *to,
				    bool *later)
{
	struct stream *best = NULL;
	double best_t = 0;
	bool best_guest = false;

	for (struct stream *s = w->conns; s; s = s->next) {
		double t = s->dead || (among && s->ops != among) ? -1 : s->ops->idle_since(s);
		bool guest = s->ops->guest && !to->guest;

		if (t < 0)
			continue;
		if (t >= now) {
			*later = true;
			continue;
		}
		if (t > now - s->ops->evict_after)
			continue;
		if (!best || (guest && !best_guest) || (guest == best_guest && t <= best_t)) {
			best = s;
			best_t = t;
			best_guest = guest;
		}
	}
	return best;
}

/* A new peer of l needs room: at max_connections (every front), or at
 * its front's own share. Returns false when it has room; else true with
 * *victim the connection to close for it, or NULL when none can go now
 * (*later: one may at the next loop iteration). */
static bool worker_full(const struct worker *w, const struct worker_listener *l, double now,
			struct stream **victim, bool *later)
{
	const struct front_ops *ops = l->ops;

	*victim = NULL;
	*later = false;
	if (ops->max_connections && l->nconns >= ops->max_connections(w->cfg)) {
		*victim = worker_idlest(w, now, ops, ops, later);
		return true;
	}
	if (w->nconns >= w->cfg->max_connections) {
		*victim = worker_idlest(w, now, NULL, ops, later);
		return true;
	}
	return false;
}

/* Accepting in turns (agent/balance.h). A listener is in one of three
 * states: watching its socket (accept_w), waiting for the turn of another
 * worker (l->waiting: stall_w armed), or paused (pause_w armed; the other
 * workers take its connections meanwhile). */

/* l waits no more: it watches its socket again. */
static void worker_resume(struct worker_listener *l)
{
	struct worker *w = l->w;

	if (!l->waiting)
		return;
	l->waiting = false;
	balance_resume(w->balance, w->id, l->idx);
	ev_timer_stop(w->loop, &l->stall_w);
	if (!w->stopping)
		ev_io_start(w->loop, &l->accept_w);
}

/* l is readable but the next connection is another worker's: stop
 * watching until woken (worker_on_wake) or until the pick looks stuck
 * (worker_on_stall). Returns false, and changes nothing, if this worker
 * has become the pick meanwhile. */
static bool worker_defer(struct worker_listener *l)
{
	struct worker *w = l->w;

	if (!balance_wait(w->balance, w->id, l->idx, &l->stall_mark))
		return false;
	l->waiting = true;
	ev_io_stop(w->loop, &l->accept_w);
	ev_timer_set(&l->stall_w, BALANCE_STALL, 0.);
	ev_timer_start(w->loop, &l->stall_w);
	return true;
}

/* Another worker (or the master) made this worker the pick of a listener
 * it waits on. */
static void worker_on_wake(struct ev_loop *loop, ev_io *io, int revents)
{
	struct worker *w = container_of(io, struct worker, wake_w);
	(void)loop;
	(void)revents;

	balance_woken(w->balance, w->id);
	for (size_t i = 0; i < w->nlis; i++)
		worker_resume(&w->lis[i]);
}

static void worker_on_accept_pause(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker_listener *l = container_of(t, struct worker_listener, pause_w);
	(void)revents;
	if (!l->w->stopping) {
		ev_io_start(loop, &l->accept_w);
		balance_open(l->w->balance, l->w->id, l->idx, true);
	}
}

/* Stops accepting on l for a while; the other workers take its turns. */
static void worker_pause(struct worker_listener *l, double seconds)
{
	struct worker *w = l->w;

	l->waiting = false;
	ev_timer_stop(w->loop, &l->stall_w);
	balance_open(w->balance, w->id, l->idx, false);
	ev_io_stop(w->loop, &l->accept_w);
	ev_timer_stop(w->loop, &l->pause_w);
	ev_timer_set(&l->pause_w, seconds, 0.);
	ev_timer_start(w->loop, &l->pause_w);
}

/* The listener a connection came from. */
static struct worker_listener *worker_listener_of(struct worker *w, const struct stream *s)
{
	for (size_t i = 0; i < w->nlis; i++)
		if (w->lis[i].ops == s->ops)
			return &w->lis[i];
	return NULL;
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
	struct worker_listener *from = worker_listener_of(w, s);
	if (from)
		from->nconns--;
	if (from && balance_add(w->balance, w->id, from->idx, -1) == w->id)
		worker_resume(from);     /* holding the fewest now: our turn */
	if (w->stopping || w->nconns >= w->cfg->max_connections)
		return;
	for (size_t i = 0; i < w->nlis; i++) {
		struct worker_listener *l = &w->lis[i];

		if (!l->waiting && !ev_is_active(&l->accept_w) && !ev_is_active(&l->pause_w))
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

/* Frees the connections closed during this loop iteration's callbacks;
 * shows life to the other workers (balance_alive: a worker passed over
 * after a missed turn is picked again, and takes its turn at once where it
 * waited). */
static void worker_on_check(struct ev_loop *loop, ev_check *chk, int revents)
{
	struct worker *w = container_of(chk, struct worker, reap_w);
	(void)revents;

	worker_reap(w);
	if (balance_alive(w->balance, w->id) && !w->stopping)
		for (size_t i = 0; i < w->nlis; i++)
			if (w->lis[i].waiting && balance_pick(w->balance, w->lis[i].idx) == w->id)
				worker_resume(&w->lis[i]);
	/* Stop once connections are done and no push waits for its store
	 * (its diffs would otherwise be pushed twice by the final flush). */
	if (worker_done(w))
		ev_break(loop, EVBREAK_ALL);
}

/* Closes idle for a new peer of front `to` (a budget was reached). */
static void worker_evict(struct worker *w, struct stream *idle, const struct front_ops *to,
			 const char *budget)
{
	if (log_limit(&w->evict_log, ev_now(w->loop)))
		LOG(LOG_INFO, "%s (%u held): closing the longest idle connection (%s) for a new "
		    "one (%s)%s", budget, w->nconns, front_name(idle->ops->id), front_name(to->id),
		    log_limit_suppressed(&w->evict_log));
	idle->ops->evict(idle);
}

/* Accepts what l has queued, while it is this worker's turn (or every
 * turn when force: the pick is stuck). max_connections counts every
 * front's connections; at the cap the longest idle one (of any front)
 * gives way to a new peer. Returns how many were accepted. */
static int worker_accept(struct worker_listener *l, bool force)
{
	struct worker *w = l->w;
	struct ev_loop *loop = w->loop;
	int taken = 0;

	for (int i = 0; i < WORKER_ACCEPTS_PER_EVENT; i++) {
		struct stream *idle = NULL;

		/* Not our turn: on this readiness, wait for it; after an accept,
		 * just stop (the next readiness tells whether more is queued). */
		if (!force && balance_pick(w->balance, l->idx) != w->id &&
		    (i > 0 || worker_defer(l)))
			return taken;
		bool later;
		if (worker_full(w, l, ev_now(loop), &idle, &later) && !idle) {
			/* Only connections accepted just now could give way: once
			 * read, at the next loop iteration (the listener is still
			 * readable). */
			if (later)
				return taken;
			/* All busy: leave new connections to the other workers;
			 * look again in a while. */
			if (log_limit(&w->cap_log, ev_now(loop)))
				LOG(LOG_WARN, "worker at max_connections (%u, %u %s), all busy: "
				    "not accepting %s%s", w->nconns, l->nconns, front_name(l->ops->id),
				    front_name(l->ops->id), log_limit_suppressed(&w->cap_log));
			worker_pause(l, WORKER_CAP_RECHECK);
			return taken;
		}
		int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return taken;
			/* EMFILE, ENFILE, ENOBUFS...: the listener stays readable;
			 * pause accepting instead of spinning on it. */
			if (log_limit(&w->accept_log, ev_now(loop)))
				LOG(LOG_WARN, "accept (%s): %s; pausing accepts for %.0f ms%s",
				    front_name(l->ops->id), strerror(errno), WORKER_ACCEPT_PAUSE * 1000,
				    log_limit_suppressed(&w->accept_log));
			worker_pause(l, WORKER_ACCEPT_PAUSE);
			return taken;
		}
		/* Counted at once (the turn may pass to another worker: it is
		 * woken), uncounted if it cannot be served. */
		taken++;
		balance_add(w->balance, w->id, l->idx, 1);
		if (idle)
			worker_evict(w, idle, l->ops, "max_connections");
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); /* fails on unix sockets */
		struct stream *s = l->ops->open(&w->env, fd);
		if (!s && l->ops->guest &&
		    (idle = worker_idlest(w, ev_now(loop), l->ops, l->ops, &later))) {
			/* Its front's buffers are all taken: an idle one of
			 * its own kind gives way. */
			worker_evict(w, idle, l->ops, "max_buffer_memory");
			s = l->ops->open(&w->env, fd);
		}
		if (!s) {
			if (log_limit(&w->refuse_log, ev_now(loop)))
				LOG(LOG_WARN, "%s connection refused: out of memory or "
				    "max_buffer_memory%s", front_name(l->ops->id),
				    log_limit_suppressed(&w->refuse_log));
			close(fd);
			balance_add(w->balance, w->id, l->idx, -1);
			continue;
		}
		l->nconns++;
		s->next = w->conns;
		if (w->conns)
			w->conns->prev = s;
		w->conns = s;
		w->nconns++;
		/* Every accept, at debug level only: what an operator asks for
		 * when tracing who takes which connection (tests count them). */
		LOG(LOG_DEBUG, "%s connection %d accepted (%u held here%s)", front_name(l->ops->id), fd,
		    balance_held(w->balance, w->id, l->idx), force ? ", out of turn" : "");
	}
	return taken;
}

static void worker_on_accept(struct ev_loop *loop, ev_io *io, int revents)
{
	(void)loop;
	(void)revents;
	worker_accept(container_of(io, struct worker_listener, accept_w), false);
}

/* BALANCE_STALL after l deferred: if nobody accepted a connection of l
 * since, the pick is stuck (or starved of CPU): it is passed over until
 * its loop runs again (balance_missed), and what it left queued is taken
 * here rather than left waiting. */
static void worker_on_stall(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker_listener *l = container_of(t, struct worker_listener, stall_w);
	struct worker *w = l->w;
	bool stuck = balance_stalled(w->balance, l->idx, l->stall_mark);
	(void)revents;

	worker_resume(l);
	if (!stuck || w->stopping)
		return;
	int pick = balance_pick(w->balance, l->idx);

	balance_missed(w->balance, w->id, l->idx, pick);
	int taken = worker_accept(l, true);
	if (taken > 0 && log_limit(&w->stall_log, ev_now(loop)))
		LOG(LOG_INFO, "%s: took %d connection(s) out of turn: worker %d accepted none "
		    "for %.0f ms, passed over until it runs again%s", front_name(l->ops->id), taken, pick,
		    BALANCE_STALL * 1000,
		    log_limit_suppressed(&w->stall_log));
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

/* A reload's configuration, applied while no sync runs (sync_reload): to
 * the worker's configuration and the library, then to the fronts. */
static void worker_reload_apply(void *arg)
{
	struct worker *w = arg;

	if (reload_worker(w->cfg, w->env.rl) > 0)
		for (size_t i = 0; i < w->nlis; i++) {
			const struct front_ops *ops = w->lis[i].ops;

			if (ops->reload && ops->reload(&w->env) < 0) {
				LOG(LOG_ERR, "reload: out of memory (%s front)", front_name(ops->id));
				exit(1);
			}
		}
}

/* A reload (agent/reload.h) applies once no push or held answer waits for
 * a store and nothing waits to be resent with its token (at most
 * WORKER_RELOAD_WAIT): the sync restarts with the new namespaces, and what
 * is still in doubt (a store away longer) is handed to the new sync, which
 * resends it with its token (sync_reload). */
static void worker_on_reload(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker *w = container_of(t, struct worker, reload_w);
	(void)revents;

	if (w->stopping) {
		ev_timer_stop(loop, t);
		return;
	}
	if ((!sync_settled(w->sync) || w->decide.npending > 0) &&
	    ev_now(loop) - w->reload_since < WORKER_RELOAD_WAIT)
		return;
	ev_timer_stop(loop, t);
	w->decide.sync = NULL;
	if (sync_reload(&w->sync, loop, w->env.rl, w->id, worker_reload_apply, w) < 0) {
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
	ev_io_stop(loop, &w->wake_w);
	for (size_t i = 0; i < w->nlis; i++) {
		struct worker_listener *l = &w->lis[i];

		ev_io_stop(loop, &l->accept_w);
		ev_timer_stop(loop, &l->pause_w);
		ev_timer_stop(loop, &l->stall_w);
		l->waiting = false;
		balance_open(w->balance, w->id, l->idx, false);
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

/* sched_batch: the worker runs SCHED_BATCH, which only changes what a
 * wake-up does: a frame arriving while the CPU runs another task (HAProxy
 * itself, when they share a CPU) wakes the worker without preempting that
 * task, so the worker runs when the task sleeps or its slice ends, and
 * reads every frame sent meanwhile at once: one wake-up, one read and one
 * write per connection for what HAProxy sent in one turn of its loop,
 * instead of a wake-up (two context switches) per frame, as HAProxy 3.x
 * sends each NOTIFY on its own. On an idle CPU a wake-up runs the worker
 * at once, as before; an idle worker sleeps as before. Unprivileged.
 * Left to the agent, not while the worker serves HAProxy 2.x and no 3.1+:
 * 2.x's NOTIFYs come in bursts, and the wait for its slice costs its
 * requests latency (p99 +15 %) for a CPU gain it hardly needs. */
static void worker_sched(bool batch)
{
	static bool warned;         /* once per worker: it may switch often */
	struct sched_param sp = { .sched_priority = 0 };

	if (sched_setscheduler(0, batch ? SCHED_BATCH : SCHED_OTHER, &sp) < 0 && !warned) {
		warned = true;
		LOG(LOG_WARN, "sched_batch: sched_setscheduler: %s", strerror(errno));
	}
}

/* Whether the worker serves HAProxy 2.x and no 3.1+ (spop_front.c's guess). */
static bool worker_bursts(const struct worker *w)
{
	return w->env.applet_peers > 0 && w->env.mux_peers == 0;
}

/* Applies sched_batch and collect_us as the worker's peers want them. */
static void worker_peers_apply(struct worker *w, bool bursts)
{
	if (w->batch[bursts] != w->batch[w->bursts])
		worker_sched(w->batch[bursts]);
	LOG(LOG_DEBUG, "%s: sched_batch %s, collect_us %.0f",
	    bursts ? "serving HAProxy 2.x alone" : "not serving HAProxy 2.x alone",
	    w->batch[bursts] ? "on" : "off", w->collect_at[bursts] * 1e6);
	w->bursts = bursts;
}

/* collect_us: after a turn of the loop that began less than collect_us
 * after the one before, libev sleeps out the rest of that time before it
 * polls again, so frames that come close together are read, decided and
 * answered together: fewer wake-ups, reads and writes for both sides, at
 * most collect_us more for a frame that arrives meanwhile. A frame after a
 * quiet spell is answered at once (the answers of a turn leave before its
 * sleep), and an idle worker sleeps in epoll_wait as before. Not while
 * decisions wait for a store (every hit of sync_rate 0, hits at the limit
 * with exact admission): the store's answer is awaited, not frames, and a
 * sleep before reading it delays every answer it holds (bench variant F,
 * at the limit: -27 % req/s with it; at sync_rate 0, where every hit
 * waits, collect_us is 0 unless set: config_collect_us()). Set before each
 * poll (libev runs prepare watchers before it computes its sleep), with
 * sched_batch when the worker began or stopped serving HAProxy 2.x alone. */
static void worker_on_prepare(struct ev_loop *loop, ev_prepare *p, int revents)
{
	struct worker *w = container_of(p, struct worker, collect_w);
	(void)revents;

	if (worker_bursts(w) != w->bursts)
		worker_peers_apply(w, worker_bursts(w));
	ev_set_io_collect_interval(loop, w->decide.npending > 0 ? 0. : w->collect_at[w->bursts]);
}

/* The first n fronts' state of the worker freed (their stop). */
static void worker_fronts_stop(struct worker *w, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (w->lis[i].ops->stop)
			w->lis[i].ops->stop(&w->env);
}

int worker_run(struct config *cfg, struct rl *rl, const struct worker_listeners *ls,
	       int id)
{
	struct worker w;

	memset(&w, 0, sizeof(w));
	w.cfg = cfg;
	w.id = id;
	w.balance = ls->balance;
	for (int f = 0; f < FRONT_COUNT; f++)
		if (ls->fd[f] >= 0)
			w.lis[w.nlis++] = (struct worker_listener){ .w = &w, .ops = fronts[f],
								    .fd = ls->fd[f], .idx = f };
	_Static_assert(WORKER_MAX_LISTENERS <= BALANCE_MAX_LISTENERS, "a balance per listener");
	metrics_attach(ls->metrics, id);
	log_worker_id = id;
	/* Die with the master, also if it died before this line (our parent
	 * is then someone else; not "pid 1": in a container the master is
	 * pid 1 itself). */
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() != ls->master_pid)
		return 1;

	/* sched_batch and collect_us, for each kind of peer, as configured
	 * at start (a reload keeps them). */
	for (int bursts = 0; bursts < 2; bursts++) {
		w.batch[bursts] = config_sched_batch(cfg, bursts);
		w.collect_at[bursts] = config_collect_us(cfg, bursts) / 1e6;
	}
	if (w.batch[0])
		worker_sched(true);
	decide_init(&w.decide, rl);
	w.loop = ev_loop_new(EVFLAG_AUTO);
	if (!w.loop) {
		LOG(LOG_ERR, "cannot create the event loop");
		return 1;
	}
	/* collect_us and sched_batch (worker_on_prepare). Not counted as
	 * the loop's work. */
	ev_prepare_init(&w.collect_w, worker_on_prepare);
	ev_prepare_start(w.loop, &w.collect_w);
	ev_unref(w.loop);
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
				    .topk = ls->topk, .metrics = ls->metrics,
				    .closed = worker_closed };
	size_t started = 0;
	while (started < w.nlis && (!w.lis[started].ops->start ||
				    w.lis[started].ops->start(&w.env) == 0))
		started++;
	if (started < w.nlis) {
		LOG(LOG_ERR, "out of memory (%s front)", front_name(w.lis[started].ops->id));
		worker_fronts_stop(&w, started);
		ev_loop_destroy(w.loop);
		return 1;
	}
	ev_io_init(&w.wake_w, worker_on_wake, balance_attach(w.balance, id), EV_READ);
	ev_io_start(w.loop, &w.wake_w);
	for (size_t i = 0; i < w.nlis; i++) {
		ev_io_init(&w.lis[i].accept_w, worker_on_accept, w.lis[i].fd, EV_READ);
		ev_io_start(w.loop, &w.lis[i].accept_w);
		ev_init(&w.lis[i].pause_w, worker_on_accept_pause);
		ev_init(&w.lis[i].stall_w, worker_on_stall);
		balance_open(w.balance, id, w.lis[i].idx, true);
	}
	ev_check_init(&w.reap_w, worker_on_check);
	ev_check_start(w.loop, &w.reap_w);

	if (sync_start(w.loop, rl, id, &w.sync) < 0) {
		/* A store we cannot even set up: exit, the master retries. */
		LOG(LOG_ERR, "cannot start the sync of the stores");
		worker_fronts_stop(&w, w.nlis);
		ev_loop_destroy(w.loop);
		return 1;
	}
	w.decide.sync = w.sync;
	w.decide.loop = w.loop;
	w.decide.topk = ls->topk;

	LOG(LOG_DEBUG, "worker %d serving", id);
	ev_run(w.loop, 0);

	/* Answers still waiting for a store go nowhere now (connections
	 * closed at once); then stop the sync (which fails those pushes). */
	while (w.conns)
		w.conns->ops->close(w.conns);
	sync_stop(w.sync);
	worker_reap(&w);
	decide_free(&w.decide);         /* its delay timers are on the loop */
	worker_fronts_stop(&w, w.nlis);
	ev_loop_destroy(w.loop);
	return 0;
}
