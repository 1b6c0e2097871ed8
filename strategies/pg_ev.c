/*
 * pg_ev.c - libev adapter for libpq's asynchronous API (see pg_ev.h).
 */
#include "strategies/pg_ev.h"
#include "strategies/container.h"

#include <stddef.h>


static void pg_ev_on_read(struct ev_loop *loop, ev_io *w, int revents)
{
	struct pg_ev *e = container_of(w, struct pg_ev, rev);

	(void)loop;
	(void)revents;
	e->cb(e, EV_READ);
}

static void pg_ev_on_write(struct ev_loop *loop, ev_io *w, int revents)
{
	struct pg_ev *e = container_of(w, struct pg_ev, wev);

	(void)loop;
	(void)revents;
	e->cb(e, EV_WRITE);
}

/* Starts or stops one watcher to match `want`, if there is a socket. */
static void pg_ev_apply(struct pg_ev *e, ev_io *w, bool want)
{
	if (want && e->fd >= 0) {
		if (!ev_is_active(w))
			ev_io_start(e->loop, w);
	} else if (ev_is_active(w)) {
		ev_io_stop(e->loop, w);
	}
}

void pg_ev_attach(struct pg_ev *e, struct ev_loop *loop, PGconn *conn, pg_ev_cb cb)
{
	e->loop = loop;
	e->conn = conn;
	e->cb = cb;
	e->reading = false;
	e->writing = false;
	e->fd = conn ? PQsocket(conn) : -1;
	ev_io_init(&e->rev, pg_ev_on_read, e->fd < 0 ? 0 : e->fd, EV_READ);
	ev_io_init(&e->wev, pg_ev_on_write, e->fd < 0 ? 0 : e->fd, EV_WRITE);
}

void pg_ev_want(struct pg_ev *e, bool read, bool write)
{
	if (!e->conn)
		return;
	e->reading = read;
	e->writing = write;
	pg_ev_apply(e, &e->rev, read);
	pg_ev_apply(e, &e->wev, write);
}

void pg_ev_resync(struct pg_ev *e)
{
	if (!e->conn)
		return;
	/* Stopped watchers may be re-set; ev_io_set() also makes libev
	 * re-register the descriptor with the backend (epoll forgets a
	 * descriptor whose socket was closed, even if the number comes
	 * back). */
	if (ev_is_active(&e->rev))
		ev_io_stop(e->loop, &e->rev);
	if (ev_is_active(&e->wev))
		ev_io_stop(e->loop, &e->wev);
	e->fd = PQsocket(e->conn);
	if (e->fd < 0)
		return;
	ev_io_set(&e->rev, e->fd, EV_READ);
	ev_io_set(&e->wev, e->fd, EV_WRITE);
	pg_ev_apply(e, &e->rev, e->reading);
	pg_ev_apply(e, &e->wev, e->writing);
}

void pg_ev_detach(struct pg_ev *e)
{
	if (e->loop) {
		if (ev_is_active(&e->rev))
			ev_io_stop(e->loop, &e->rev);
		if (ev_is_active(&e->wev))
			ev_io_stop(e->loop, &e->wev);
	}
	e->conn = NULL;
	e->fd = -1;
	e->reading = false;
	e->writing = false;
}

bool pg_ev_attached(const struct pg_ev *e)
{
	return e->conn != NULL;
}
