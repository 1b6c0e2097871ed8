/*
 * conn.h - one SPOP connection from HAProxy, owned by a worker's event
 * loop: non-blocking reads into a buffer sized from the max-frame-size,
 * many frames handled per read, the ACKs of a batch written with one
 * write(). States:
 *
 *   HELLO --HAPROXY-HELLO--> READY --HAPROXY-DISCONNECT / error--> CLOSING
 *     \--healthcheck HELLO, error, timeout------------------------^
 *
 * CLOSING flushes what is queued (an AGENT-DISCONNECT last) then closes.
 */
#ifndef CONN_H
#define CONN_H

#include <ev.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct decide_pending;
struct worker;

enum conn_state {
	CONN_HELLO = 0,
	CONN_READY,
	CONN_CLOSING,
	CONN_STATE_COUNT
};

struct conn {
	struct worker *w;
	struct conn *prev, *next;     /* the worker's list of live connections */
	int fd;
	enum conn_state state;
	ev_io io;
	ev_timer timer;
	uint8_t *rbuf;
	size_t rlen, rcap;
	uint8_t *wbuf;
	size_t wlen, woff, wcap;
	uint32_t max_frame;           /* negotiated (the configured bound before HELLO) */
	double created;               /* ev_now() at accept */
	double last_rx;               /* ev_now() when the last whole frame arrived */
	double last_notify;           /* ev_now() of the last NOTIFY (or of accept):
	                                 what makes a connection busy */
	double partial_since;         /* ev_now() when a partial frame began, or 0 */
	struct decide_pending *pending;  /* NOTIFYs whose ACK waits for a store */
	unsigned npending;                /* how many (reads pause at CONN_MAX_PENDING) */
	bool draining;                /* the worker is stopping */
	bool dead;                    /* closed; freed by the worker after callbacks */
};

/* Takes ownership of a connected, non-blocking fd and starts its watchers.
 * Returns NULL (fd closed) when out of memory. */
struct conn *conn_new(struct worker *w, int fd);

/* Asks a connection to finish: frames already received are answered, then
 * it closes. Used on SIGTERM. */
void conn_drain(struct conn *c);

/* decide.deliver: writes the ACK of a NOTIFY that waited for its store
 * (pipelined ACKs may leave out of order). */
void conn_deliver(void *owner, struct decide_pending *p);

/* Closes a connection at once to make room for a new peer (the worker is
 * at max_connections and c is the longest idle): a DISCONNECT is sent if
 * the socket takes it now. */
void conn_evict(struct conn *c);

/* Frees a connection closed earlier (c->dead). */
void conn_free(struct conn *c);

#endif /* CONN_H */
