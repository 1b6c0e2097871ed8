/*
 * spoa_client.h - the SPOP client core of the nginx module (its
 * connections: ngx_http_spoa_ratelimit_conn.c): HELLO, NOTIFYs out, ACKs
 * in, the streams in flight of one connection to the agent.
 *
 * Pure, as the codec it is built on (spop/): no allocation, no I/O, no
 * clock, no nginx. The caller owns the buffers (allocated once per
 * connection), the socket and the timers; it moves bytes between the
 * socket and the two buffers and asks for what they mean:
 *
 *   sc_conn_init()        once, with the caller's buffers and slots
 *   sc_conn_start()       a new socket: HAPROXY-HELLO queued in `out`
 *   sc_out_pending()      bytes to write; sc_out_done(n) once written
 *   sc_in_room()          where to read to; sc_in_add(n) once read
 *   sc_next()             the next event of what was read: the handshake
 *                         done (SC_EV_READY), an ACK for a stream
 *                         (SC_EV_ACK, with the caller's pointer), or -1:
 *                         the connection must be closed (c->err, c->why)
 *   sc_send()             one decision request (a NOTIFY) for a caller's
 *                         pointer; its stream goes back to the caller with
 *                         the ACK, or by sc_cancel() / sc_fail_all()
 *
 * Streams: a NOTIFY's stream-id is the index of a slot, its frame-id the
 * slot's generation, bumped each time the slot is taken. An ACK is matched
 * by both, so an ACK that comes after its request gave up (sc_cancel: the
 * request timed out) is dropped, even when the slot serves another request
 * by then.
 *
 * Keys: sent whole whenever the whole NOTIFY fits the max-frame-size the
 * agent announced (the agent digests a long key itself, as it does
 * HAProxy's: one counter). When it would not fit, the longest keys are
 * replaced by their digest, one at a time, until it fits: '#' and 32 hex
 * digits of SipHash-2-4-128 under the connection's digest key
 * (agent/hash.h, the agent's own digest function). The agent digests every
 * key starting with '#' again, so no literal a client sends names a digest
 * of the module's, and without the digest key nobody computes one.
 */
#ifndef SPOA_CLIENT_H
#define SPOA_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/hash.h"
#include "spop/spop.h"

#define SC_FRAME_SIZE  SPOP_DEFAULT_FRAME_SIZE /* the max-frame-size we announce */
#define SC_IN_SIZE     (SC_FRAME_SIZE + SPOP_LEN_SIZE)   /* one whole frame */
#define SC_OUT_SIZE    (64u * 1024u)   /* NOTIFYs not yet written */
#define SC_SLOTS       512u            /* streams in flight per connection */
#define SC_MAX_LIMITS  32u             /* the agent counts 32 messages per NOTIFY */
#define SC_DIGEST_LEN  HASH_DIGEST_LEN /* a digested key: "#" + 32 hex digits */
#define SC_ERROR_MAX   64u             /* the agent's error string, cut */
#define SC_NONE        UINT32_MAX

/* One limit of a request: views into the caller's memory. A NULL ptr
 * leaves the argument out (key: the limit is skipped, as is an empty key). */
struct sc_limit {
	struct spop_str key;
	struct spop_str window;
	struct spop_str limit;
	struct spop_str ns;          /* "namespace" */
	struct spop_str cost;
	struct spop_str lease;       /* not NULL: the message is a `release` of
	                                this lease (key, window, namespace and
	                                lease; limit and cost left out) */
	struct spop_str reservation; /* not NULL: the message is a `settle` of
	                                this reservation at `cost` (key, window,
	                                namespace, reservation, cost) */
	bool reserve;                /* the cost is an estimate: argument
	                                reserve, the ACK's `reservation` kept */
};

/* What an ACK said (docs/PROTOCOL.md, the plain variables). */
#define SC_HAS_EXCEEDED    0x01u
#define SC_HAS_RATE        0x02u
#define SC_HAS_REMAINING   0x04u
#define SC_HAS_RESET       0x08u
#define SC_HAS_LIMIT       0x10u
#define SC_HAS_WINDOW      0x20u
#define SC_HAS_RETRY_AFTER 0x40u
#define SC_HAS_ERROR       0x80u
#define SC_HAS_LEASE       0x100u
#define SC_LEASE_MAX       64u             /* a concurrency lease id (the agent's: 32) */
#define SC_HAS_RESERVATION 0x200u
#define SC_RESERVATION_MAX 400u            /* a reservation (the agent's: at most 388) */

struct sc_result {
	unsigned has;                /* SC_HAS_* */
	bool exceeded;
	bool degraded;
	uint64_t rate, remaining, reset, limit, window, retry_after;
	size_t error_len;
	char error[SC_ERROR_MAX];    /* printable ASCII, not NUL-terminated */
	size_t lease_len;
	char lease[SC_LEASE_MAX];    /* a concurrency limit's lease (printable,
	                                not NUL-terminated): sent back by a
	                                `release` message */
	size_t reservation_len;
	char reservation[SC_RESERVATION_MAX]; /* the plain `reservation` (printable,
	                                not NUL-terminated): sent back by a
	                                `settle` message */
};

struct sc_slot {
	void *user;                  /* NULL: free */
	uint32_t gen;                /* the frame-id of its NOTIFY */
	uint32_t next_free;
};

enum sc_state {
	SC_DOWN = 0,                 /* no socket */
	SC_HELLO,                    /* HAPROXY-HELLO sent, no AGENT-HELLO yet */
	SC_READY,                    /* NOTIFYs may go */
};

struct sc_conn {
	enum sc_state state;
	uint8_t *in;
	size_t in_cap, in_len, in_off;   /* bytes read; bytes already parsed */
	uint8_t *out;
	size_t out_cap, out_len, out_off; /* bytes queued; bytes already written */
	struct sc_slot *slots;
	uint32_t nslots, free_head, inflight;
	uint32_t max_frame;          /* negotiated by the AGENT-HELLO */
	uint8_t digest_key[16];      /* SipHash key of the keys digested */
	uint32_t max_inflight;       /* nslots with pipelining, else 1 */
	enum spop_err err;           /* why sc_next() failed */
	const char *why;             /* the same in words (static) */
	bool by_agent;               /* it came in an AGENT-DISCONNECT */
	char detail[96];             /* an AGENT-DISCONNECT's message, cut, NUL-terminated */
};

enum sc_event_type {
	SC_EV_READY = 1,             /* the AGENT-HELLO came: sc_send() works */
	SC_EV_ACK,                   /* the answer for `user` */
};

struct sc_event {
	enum sc_event_type type;
	void *user;
	struct sc_result result;
};

enum sc_send_rc {
	SC_SENT = 0,                 /* queued in `out`; *slot holds its stream */
	SC_NOTHING,                  /* every key is empty: nothing to ask */
	SC_NOT_READY,                /* no handshake yet, or down */
	SC_BUSY,                     /* no free stream or no room now: later, or elsewhere */
	SC_TOO_BIG,                  /* can never fit the negotiated max-frame-size */
};

/* Buffers: in_cap >= SC_IN_SIZE, out_cap >= SC_IN_SIZE (a whole frame),
 * nslots >= 1; digest_key (copied): the SipHash key of the keys this
 * connection digests. The connection starts SC_DOWN. */
void sc_conn_init(struct sc_conn *c, uint8_t *in, size_t in_cap, uint8_t *out, size_t out_cap,
		  struct sc_slot *slots, uint32_t nslots, const uint8_t digest_key[16]);

/* A new socket: buffers emptied, every stream free (hand them back with
 * sc_fail_all() first), the HAPROXY-HELLO queued; state SC_HELLO. */
void sc_conn_start(struct sc_conn *c);

/* The socket is gone: state SC_DOWN, buffers emptied. Streams still in
 * flight stay taken until sc_fail_all(). */
void sc_conn_stop(struct sc_conn *c);

/* Queues a HAPROXY-DISCONNECT (status, its standard message): 0, or -1 if
 * there is no room. The caller writes it and closes. */
int sc_disconnect(struct sc_conn *c, enum spop_err status);

/* Output: *p and the number of bytes to write (0: nothing). */
size_t sc_out_pending(const struct sc_conn *c, const uint8_t **p);
void sc_out_done(struct sc_conn *c, size_t n);

/* Input: where to read to and how much room is there (never 0 while the
 * connection is sound: a frame is never larger than the buffer). */
size_t sc_in_room(struct sc_conn *c, uint8_t **p);
void sc_in_add(struct sc_conn *c, size_t n);

/* The next event of the bytes read: 1 with *ev filled, 0 when more bytes
 * are needed, -1 when the connection must be closed (c->err, c->why,
 * c->detail). ACKs of streams given up are skipped. */
int sc_next(struct sc_conn *c, struct sc_event *ev);

/* One decision request: the limits l[0..n) with a non-empty key, as one
 * NOTIFY of n messages "ratelimit" (docs/PROTOCOL.md; "release" for a
 * limit with a lease: its lease given back), for `user` (not
 * NULL). Keys travel as length-prefixed strings whatever bytes they hold,
 * whole when the NOTIFY fits c->max_frame, else the longest digested
 * until it fits (the banner, "Keys"); window, limit and cost made of 1 to
 * 19 digits as integers, other values as strings (the agent judges them).
 * SC_TOO_BIG: more than SC_MAX_LIMITS keys, or over c->max_frame with
 * every key longer than a digest digested (see sc_notify_need). */
enum sc_send_rc sc_send(struct sc_conn *c, const struct sc_limit *l, size_t n, void *user,
			uint32_t *slot);

/* Could sc_send() take a request now (ready, a stream free)? */
bool sc_can_send(const struct sc_conn *c);

/* A request gives up its stream (timeout, request gone); its ACK, if it
 * comes, is dropped. */
void sc_cancel(struct sc_conn *c, uint32_t slot);

/* Every stream in flight is freed and handed to fn(user, arg), in slot
 * order. fn may call sc_cancel() on this connection. */
void sc_fail_all(struct sc_conn *c, void (*fn)(void *user, void *arg), void *arg);

/* Number of limits of l[0..n) that would be sent (non-empty key). */
size_t sc_count(const struct sc_limit *l, size_t n);

/* The most bytes (a frame's LENGTH, what max-frame-size bounds) the NOTIFY
 * of l[0..n) takes once every key longer than SC_DIGEST_LEN is digested,
 * with the longest stream-id and frame-id: a connection whose max_frame is
 * at least this always takes it (sc_send never says SC_TOO_BIG for it
 * whatever its keys, the other values being these). 0 when nothing would
 * be sent (every key empty). */
size_t sc_notify_need(const struct sc_limit *l, size_t n);

#endif /* SPOA_CLIENT_H */
