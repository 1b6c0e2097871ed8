/*
 * grpc_int.h - the gRPC front's private header (docs/ENVOY.md, "The gRPC
 * front"): what its two files share, drawn in levels, a file calling only
 * the level below its own.
 *
 *   agent/grpc_front.c   connections: the socket and its nghttp2 session
 *                        (reads, writes, memory, GOAWAY, timers), the
 *                        front's ops table and its state of the worker
 *         |  grpc_call_*()
 *         v
 *   agent/grpc_call.c    calls, an HTTP/2 stream each: the session's
 *                        callbacks, the request's checks, the methods
 *                        (ShouldRateLimit, grpc.health.v1.Health/Check),
 *                        answers, deadlines, held decisions delivered
 *
 * grpc_call.c reaches its connection back only through `kick`, a callback
 * grpc_front.c hands down (docs/STYLE.md, rule 13).
 *
 * What one peer may hold (docs/ARCHITECTURE.md, "No request waits behind
 * another's"): GRPC_MAX_STREAMS calls at once (SETTINGS_MAX_CONCURRENT_
 * STREAMS); request bytes in flight: the connection's receive window
 * (GRPC_CONN_WINDOW), given back only as messages are decoded; one message:
 * GRPC_MSG_MAX; one header list: GRPC_HEADERS_MAX (beyond: the call is
 * answered RESOURCE_EXHAUSTED), one header block GRPC_HEADER_BLOCK_MAX
 * (beyond: the connection is closed); every byte nghttp2 and the calls
 * allocate: GRPC_CONN_MEM, counted in the worker's max_buffer_memory with
 * the connection's buffers; streams reset by the peer: GRPC_RESET_BURST,
 * then GRPC_RESET_RATE a second (beyond: GOAWAY ENHANCE_YOUR_CALM, closed);
 * a peer that does not read its answers is not read either.
 */
#ifndef GRPC_INT_H
#define GRPC_INT_H

#include <ev.h>
#include <nghttp2/nghttp2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/decide.h"
#include "agent/rls_decide.h"
#include "agent/rls_wire.h"
#include "agent/stream.h"

#define GRPC_MAX_STREAMS      1024u          /* calls at once per connection */
#define GRPC_MSG_MAX          (64u << 10)    /* bytes of one request message */
#define GRPC_STREAM_WINDOW    (GRPC_MSG_MAX + RLS_GRPC_PREFIX) /* a whole message */
#define GRPC_CONN_WINDOW      (1u << 20)     /* request bytes held per connection */
#define GRPC_HEADERS_MAX      (16u << 10)    /* SETTINGS_MAX_HEADER_LIST_SIZE */
#define GRPC_HEADER_BLOCK_MAX (64u << 10)    /* HEADERS + CONTINUATION of one block */
#define GRPC_CONN_MEM         (8u << 20)     /* nghttp2's and the calls' memory */
#define GRPC_WORKER_CALLS     (16u << 10)    /* calls at once per worker */
#define GRPC_HELD_MAX         1024u          /* decisions held at once per worker
                                                (a struct rls_call each, 45 KiB) */
#define GRPC_RESET_BURST      1000.0         /* streams the peer may reset at once */
#define GRPC_RESET_RATE       100.0          /* ... and per second after */
#define GRPC_CALL_INLINE      384            /* a call's own bytes: most messages */
#define GRPC_RBUF             16384          /* reads */
#define GRPC_WBUF             32768          /* writes, to start with */
#define GRPC_WBUF_HIGH        (256u << 10)   /* output queued: the peer is not read */

/* The methods served (docs/ENVOY.md). */
#define GRPC_PATH_RLS    "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
#define GRPC_PATH_HEALTH "/grpc.health.v1.Health/Check"

enum grpc_method {
	GRPC_M_UNKNOWN = 0,           /* answered UNIMPLEMENTED */
	GRPC_M_RLS,
	GRPC_M_HEALTH,
	GRPC_M_COUNT
};

/* A call's life: its request arrives, it waits for its decision (a store,
 * a delay), it is answered; its stream closes at any point (a reset). */
enum grpc_call_state {
	GRPC_CALL_READING = 0,        /* headers and message arriving */
	GRPC_CALL_DECIDING,           /* a held decision (call->pending) */
	GRPC_CALL_ANSWERED,           /* the answer is submitted, or the stream reset */
	GRPC_CALL_STATE_COUNT
};

struct grpc_conn;

/* One unary call: an HTTP/2 stream. From the worker's pool; its bytes
 * (the request message, then the answer's) in `own` or, when larger, on
 * the connection's counted heap. */
struct grpc_call {
	struct grpc_conn *conn;
	struct grpc_call *prev, *next;     /* the connection's calls; the pool's free list */
	int32_t id;                        /* its stream */
	uint8_t state;                     /* enum grpc_call_state */
	uint8_t method;                    /* enum grpc_method */
	bool stream_closed;                /* nghttp2 closed the stream */
	bool post, grpc_type;              /* :method POST, content-type application/grpc */
	bool bad_timeout, bad_encoding;    /* grpc-timeout unreadable, grpc-encoding not identity */
	bool headers_over;                 /* the header list passed GRPC_HEADERS_MAX */
	bool answer_ok;                    /* the answer carries a message (grpc-status 0) */
	uint32_t header_bytes;             /* the header list's size, as HTTP/2 counts it */
	double started;                    /* ev_now() at its headers */
	double deadline;                   /* ev_now() time of grpc-timeout; 0: none */
	ev_timer timer;                    /* the deadline, while it runs */
	size_t unconsumed;                 /* DATA not yet given back to the windows */
	uint8_t *buf;                      /* own or the heap */
	size_t len, cap, off;              /* bytes in buf; off: sent of the answer */
	struct decide_pending *pending;    /* its held decision (DECIDING) */
	struct rls_call *rc;               /* ... and what its answer needs */
	uint8_t own[GRPC_CALL_INLINE];
};

/* The front's state of a worker (env->state[FRONT_GRPC]). */
struct grpc_worker {
	struct front_env *env;
	struct grpc_conn *conns;           /* open connections: a reload's GOAWAY */
	struct grpc_call *pool;            /* free calls */
	unsigned ncalls;                   /* calls in use */
	unsigned npool;                    /* ... free in the pool */
	nghttp2_session_callbacks *cbs;    /* grpc_call.c's (grpc_call_start) */
	nghttp2_option *opt;
	struct log_limit log;              /* a peer's misbehaviour, at most 1/s */
	/* ShouldRateLimit: the next request is decided in rc; a decision
	 * that is held keeps it (call->rc) and the worker takes another from
	 * rc_free, allocated on demand, at most GRPC_HELD_MAX in all (then
	 * rc is NULL: RESOURCE_EXHAUSTED until one is back). */
	struct rls_call *rc;
	struct rls_call *rc_free[GRPC_HELD_MAX];
	unsigned nrc_free, nrc;            /* free ones; all allocated */
	struct rls_descriptor desc[RLS_DESCRIPTORS_MAX];       /* a request decoded */
	struct rls_entry entries[RLS_DESCRIPTORS_MAX * RLS_ENTRIES_MAX];
};

struct grpc_conn {
	struct stream s;                   /* first: socket, watchers, buffers */
	struct grpc_worker *w;
	struct grpc_conn *prev, *next;     /* the worker's connections */
	nghttp2_session *h2;
	nghttp2_mem mem;                   /* nghttp2's allocator: counted here */
	size_t mem_bytes;                  /* nghttp2's and the calls' heap bytes */
	struct decide_owner owner;         /* its held decisions */
	struct grpc_call *calls;           /* its calls, newest first */
	unsigned ncalls;
	double reset_tokens, reset_at;     /* the peer's resets: a token bucket */
	size_t block_bytes;                /* the header block being received */
	double last_active;                /* ev_now() when it last held a call */
	bool goaway;                       /* GOAWAY submitted: the calls finish, then close */
	bool failed;                       /* to close once the callbacks return */
	bool in_recv;                      /* in its read: nghttp2's callbacks may run */
	/* Answers were submitted outside the connection's own read (a held
	 * decision delivered, a deadline): write them. */
	void (*kick)(struct grpc_conn *c);
};

/* ---- memory: every byte of a connection, counted ---- */

/* size bytes on the connection's heap, within GRPC_CONN_MEM and the
 * worker's max_buffer_memory; NULL when refused. grpc_mem_free(c, NULL) is
 * a no-op. Also nghttp2's allocator (grpc_front.c sets c->mem). */
void *grpc_mem_alloc(struct grpc_conn *c, size_t size);
void *grpc_mem_realloc(struct grpc_conn *c, void *p, size_t size);
void grpc_mem_free(struct grpc_conn *c, void *p);

/* ---- grpc_call.c: what grpc_front.c calls ---- */

/* The worker starts: w->cbs, the session callbacks of every gRPC
 * connection (their user data is the struct grpc_conn), and the first
 * struct rls_call. Setup: 0, or -1 when out of memory (grpc_call_stop
 * frees what was made). */
int grpc_call_start(struct grpc_worker *w);

/* decide_owner.deliver of a connection: a held decision is final. */
void grpc_call_deliver(struct decide_owner *o, struct decide_pending *p);

/* The connection goes: its calls back to the pool, their held decisions
 * detached. */
void grpc_call_drop_all(struct grpc_conn *c);

/* Calls of c still reading their request since before `before` (ev_now()
 * time) are answered (frame_timeout_ms). Returns the start of the oldest
 * still reading, or 0 when none is. */
double grpc_call_sweep(struct grpc_conn *c, double before);

/* The worker stops, its connections closed: the callbacks, the free
 * calls and struct rls_call freed. */
void grpc_call_stop(struct grpc_worker *w);

#endif /* GRPC_INT_H */
