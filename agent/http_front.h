/*
 * http_front.h - the HTTP front (docs/HTTP.md): the same decisions as
 * SPOP, over HTTP/1.1 on the worker's loop, for nginx's auth_request and
 * any HTTP client.
 *
 *   GET /ratelimit?key=K&window=W&limit=L&namespace=NS&cost=C&window_type=T
 *       200 allowed, http_deny_status (429) when exceeded, 400 for a bad
 *       request; RateLimit-Policy / RateLimit headers, Retry-After when
 *       denied; a small JSON body with the same variables as SPOP.
 *   GET /metrics   Prometheus text (agent/metrics.h, docs/METRICS.md)
 *   GET /healthz   200 "ok"
 *
 * Keep-alive and pipelining (answers in order), strict parsing
 * (agent/http_parse.h), the timeouts and caps of SPOP connections:
 * frame_timeout_ms for one request head, idle_timeout_ms between
 * requests, max_connections and max_buffer_memory shared with SPOP.
 */
#ifndef HTTP_FRONT_H
#define HTTP_FRONT_H

#include <ev.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct decide_pending;
struct worker;

struct http_conn {
	struct worker *w;
	struct http_conn *prev, *next;    /* the worker's list */
	int fd;
	ev_io io;
	ev_timer timer;
	char *rbuf;
	size_t rlen, rcap;
	char *wbuf;
	size_t wlen, woff, wcap;
	size_t scanned;                   /* head scanned so far (http_head_end) */
	size_t skip;                      /* body bytes still to discard */
	double created, last_rx;          /* ev_now() at accept / of the last request */
	double partial_since;             /* a head began arriving, or 0 */
	struct decide_pending *pending;   /* the request waiting for a store (one) */
	bool closing;                     /* close once the output is sent */
	bool grace;                       /* closing: the flush timer runs */
	bool draining;                    /* the worker is stopping */
	bool dead;
};

/* Takes a connected non-blocking fd. NULL (fd closed) when out of memory
 * or over max_buffer_memory. */
struct http_conn *http_conn_new(struct worker *w, int fd);

/* decide.deliver for HTTP owners: writes the held answer. */
void http_deliver(void *owner, struct decide_pending *p);

/* The worker stops: answer what came, then close. */
void http_conn_drain(struct http_conn *c);

/* Closes a connection at once (at max_connections, for a new peer). */
void http_conn_evict(struct http_conn *c);

/* Frees a connection closed earlier (c->dead). */
void http_conn_free(struct http_conn *c);

#endif /* HTTP_FRONT_H */
