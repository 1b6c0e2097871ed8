/*
 * pg_ev.h - plugs a libpq connection into a libev loop, the way hiredis's
 * adapters/libev.h plugs in a redisAsyncContext: the owner embeds a
 * struct pg_ev, attaches it to a PGconn, says whether it wants to read
 * and/or write, and gets one callback per readiness event. The adapter
 * never calls libpq beyond PQsocket(); driving the protocol
 * (PQconnectPoll, PQflush, PQconsumeInput, ...) is the owner's job.
 *
 * The one libpq-specific twist: while connecting, PQconnectPoll() may
 * close its socket and open another one (next host or address, retry
 * without SSL/GSS), and the new socket may even get the same number as
 * the old one. pg_ev_resync() re-reads PQsocket() and re-registers the
 * watchers unconditionally; call it after every PQconnectPoll() step.
 *
 *   owner                 pg_ev                   libev
 *   pg_ev_attach()  --->  rev/wev set on PQsocket
 *   pg_ev_want(r, w) -->  start/stop rev, wev ---> ev_io_start/stop
 *   pg_ev_resync()  --->  ev_io_set on the new PQsocket (forced)
 *   cb(e, revents)  <---  rev/wev fired        <--- fd readable/writable
 *   pg_ev_detach()  --->  both stopped (before PQfinish closes the fd)
 */
#ifndef PG_EV_H
#define PG_EV_H

#include <ev.h>
#include <libpq-fe.h>
#include <stdbool.h>

struct pg_ev;

/* revents: EV_READ and/or EV_WRITE. The callback may call any pg_ev_*
 * function on e, including pg_ev_detach(); it must not free e (the owner
 * frees it after the callback returns, docs/STYLE.md, rule 8). */
typedef void (*pg_ev_cb)(struct pg_ev *e, int revents);

/* Embedded in its owner; get back with container_of. All fields are
 * private to pg_ev.c; read them only for diagnostics. */
struct pg_ev {
	struct ev_loop *loop;
	PGconn *conn;   /* NULL when detached */
	pg_ev_cb cb;
	int fd;         /* socket the watchers are set on, -1 = none */
	bool reading;   /* wanted by the owner */
	bool writing;
	ev_io rev;
	ev_io wev;
};

/* Prepares e (any previous content is overwritten: detach first if it was
 * attached) for conn on loop. No watcher is started until pg_ev_want().
 * conn stays owned by the caller. */
void pg_ev_attach(struct pg_ev *e, struct ev_loop *loop, PGconn *conn, pg_ev_cb cb);

/* Watches the connection's socket for reading and/or writing (false =
 * stop watching). Cheap when nothing changes. */
void pg_ev_want(struct pg_ev *e, bool read, bool write);

/* The socket may have changed (PQconnectPoll): re-reads PQsocket() and
 * re-registers the wanted watchers on it, even if the number is the same
 * (it may be a new socket reusing a closed one's number). A socket of -1
 * leaves the watchers stopped until the next resync. */
void pg_ev_resync(struct pg_ev *e);

/* Stops both watchers and forgets the connection. Call before PQfinish()
 * so that libev never watches a closed descriptor. Idempotent. */
void pg_ev_detach(struct pg_ev *e);

/* true if attached to a connection. */
bool pg_ev_attached(const struct pg_ev *e);

#endif /* PG_EV_H */
