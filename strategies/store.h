/*
 * store.h - what every store does alike, written once (redis.c,
 * postgres.c): the life of an operation from the call that starts it to
 * its callback, the silence timeout, the reconnect backoff, the reading of
 * strategy_opts, and the check of admissions.
 *
 * An operation's callback never runs inside the call that started it
 * (strategy.h): a finished operation goes on the instance's done queue,
 * which is delivered, in order, when the outermost of the instance's own
 * libev callbacks returns (store_leave), or at the next loop iteration (a
 * zero-delay "kick") when it finished elsewhere (inside a client library's
 * callback). destroy() may be called from inside a callback: the instance
 * is freed once no callback of it is on the stack (docs/STYLE.md, rule 8).
 *
 *   API call --> queue, kick --> the store's work (libev callbacks)
 *        --> store_op_finish --> done queue --> store_leave / kick
 *        --> op->deliver (the user's callback, then the op is freed)
 */
#ifndef STORE_H
#define STORE_H

#include <ev.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "strategies/strategy.h"

struct store_op;

/* The part of an instance every store has; embed it, get back with
 * container_of. */
struct store_core {
	struct ev_loop *loop;
	double timeout;                   /* s: how long an operation may wait in silence */
	ev_tstamp last_activity;          /* loop time the store last sent anything */
	int depth;                        /* our callbacks on the stack */
	bool destroyed;                   /* freed when depth drops to 0 */
	ev_timer kick;                    /* zero delay: the store's work, then the queue */
	void (*kick_fn)(struct store_core *c);   /* the store's work at the kick, or NULL */
	void (*free_fn)(struct store_core *c);   /* frees the instance */
	struct store_op *done_head, *done_tail;
};

/* The part of an operation every store has. */
struct store_op {
	struct store_core *core;
	struct store_op *next;            /* the done queue */
	ev_timer timer;                   /* silence timeout */
	ev_tstamp since;                  /* loop time it was started */
	bool finished;                    /* on the done queue */
	/* Runs the user's callback with the outcome, then frees the op. */
	void (*deliver)(struct store_op *op);
};

void store_core_init(struct store_core *c, struct ev_loop *loop, double timeout,
		     void (*kick_fn)(struct store_core *), void (*free_fn)(struct store_core *));

/* The store's work and the done queue at the next loop iteration. */
void store_kick(struct store_core *c);

/* Around every libev callback of the instance. store_leave() delivers the
 * done queue when the outermost one ends, and frees a destroyed instance:
 * it returns true then, and the caller must not touch the instance. */
void store_enter(struct store_core *c);
bool store_leave(struct store_core *c);

/* destroy(): after the store failed every pending operation
 * (store_op_finish), delivers them and frees the instance, now or, from
 * inside one of its callbacks, when that returns. */
void store_destroy(struct store_core *c);

/* The store sent something: every waiting operation's silence restarts. */
static inline void store_activity(struct store_core *c)
{
	c->last_activity = ev_now(c->loop);
}

/* Starts op's silence timer (timer_cb fires after c->timeout). */
void store_op_start(struct store_core *c, struct store_op *op,
		    void (*timer_cb)(struct ev_loop *, ev_timer *, int),
		    void (*deliver)(struct store_op *));

/* In the timer callback: has the store been silent for the whole timeout
 * since op started? If not, the timer is pushed back (lazily, here, rather
 * than at every reply) and false returned. */
bool store_op_silent(struct store_op *op);
/* The same, with the store's last sign of life given by the caller (a
 * store of several connections: the last reply on those op waits on). */
bool store_op_silent_since(struct store_op *op, ev_tstamp last_activity);

/* op is done: its timer stops and it joins the done queue. Safe twice. */
void store_op_finish(struct store_op *op);

/* ---- reconnect backoff: min, doubling to max, back to min once a
 * connection is set up ---- */

struct store_backoff {
	double min, max, next;
};

void store_backoff_init(struct store_backoff *b, double min, double max);
/* The delay to wait now; the next one doubles. */
double store_backoff_take(struct store_backoff *b);
void store_backoff_reset(struct store_backoff *b);

/* ---- strategy_opts: every message names the option and what was
 * expected ---- */

/* Parses the JSON text (NULL or "" = none: *root NULL) into an object
 * (duplicate keys refused). Returns 0, or -1 with err. */
int store_opts_load(const char *text, json_t **root, char *err, size_t errlen);

/* "an integer", "a string", ...: a JSON value's kind, for messages. */
const char *store_json_type(const json_t *v);

/* An integer option within [lo, hi]. */
int store_opt_int(const char *name, const json_t *v, long long lo, long long hi,
		  long long *out, char *err, size_t errlen);

/* A string option of 1..max bytes (a view into the JSON value). */
int store_opt_str(const char *name, const json_t *v, size_t max, const char **out, size_t *len,
		  char *err, size_t errlen);

/* An option the store does not know; known is "a, b, c". Returns -1. */
int store_opt_unknown(const char *name, const char *known, char *err, size_t errlen);

/* ---- admissions ---- */

/* Checks n admissions for the store's admit(): a window size, finite
 * numbers, cost >= 0, weight in [0, 1], want >= 0; clears their outputs
 * and sets want to 0 where no grant can be given (nodes or cost 0).
 * Returns 0, or -1 with errstr ("admission <i>: ..."), as an operation
 * refused at once (strategy.h). */
int store_admit_check(struct strategy_admit *a, size_t n, char errstr[STRATEGY_ERR_MAX]);

#endif /* STORE_H */
