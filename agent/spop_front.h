/*
 * spop_front.h - the SPOP front: one connection from HAProxy (or the
 * nginx module) on a worker's event loop: non-blocking reads into a
 * buffer sized from the max-frame-size, many frames handled per read, the
 * ACKs of a batch written with one write(). States:
 *
 *   HELLO --HAPROXY-HELLO--> READY --HAPROXY-DISCONNECT / error--> CLOSING
 *     \--healthcheck HELLO, error, timeout------------------------^
 *
 * CLOSING flushes what is queued (an AGENT-DISCONNECT last) then closes.
 * The front's ops (open, drain, evict, ...) are spop_front (agent/stream.h).
 */
#ifndef SPOP_FRONT_H
#define SPOP_FRONT_H

#include <ev.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/decide.h"
#include "agent/stream.h"

enum spop_conn_state {
	SPOP_CONN_HELLO = 0,
	SPOP_CONN_READY,
	SPOP_CONN_CLOSING,
	SPOP_CONN_STATE_COUNT
};

/* Who is at the other end, as far as scheduling goes: HAProxy 2.x,
 * whose applet writes NOTIFYs in bursts (a worker serving only such
 * peers and others answers at once: config_sched_batch()), HAProxy 3.1+
 * (its multiplexer sends each NOTIFY on its own), or another client (our
 * nginx module, test clients: no engine-id in their HELLO). */
enum spop_conn_peer {
	SPOP_CONN_PEER_UNKNOWN,            /* HAProxy, too few NOTIFYs yet */
	SPOP_CONN_PEER_MUX,                /* HAProxy 3.1+ */
	SPOP_CONN_PEER_APPLET,             /* HAProxy 2.x */
	SPOP_CONN_PEER_OTHER,
};

/* An SPOP connection: the front `spop_front` (agent/stream.h) opens them. */
struct spop_conn {
	struct stream s;              /* first: socket, watchers, buffers */
	enum spop_conn_state state;
	uint32_t max_frame;           /* negotiated (the configured bound before HELLO) */
	double last_notify;           /* ev_now() of the last NOTIFY (or of accept):
	                                 what makes a connection busy */
	struct decide_owner owner;        /* NOTIFYs whose ACK waits (a store, a
	                                     delay): reads go on meanwhile */
	enum spop_conn_peer peer;              /* HAProxy 3.1+ or not (spop_conn_peer_guess) */
	uint8_t probed;                   /* stream-ids 1, 3, ... 15 seen while unknown */
};

/* The owner's deliver: writes the ACK of a NOTIFY that waited (pipelined
 * ACKs may leave out of order). */
void spop_conn_deliver(struct decide_owner *owner, struct decide_pending *p);

#endif /* SPOP_FRONT_H */
