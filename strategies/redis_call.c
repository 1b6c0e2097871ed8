/*
 * redis_call.c - the call machinery of the Redis strategy
 * (strategies/redis_int.h), below the operations and the modes: an
 * operation's life (built by its operation, launched, finished, delivered),
 * each of its calls sent where the mode routes it, its reply taken back
 * (NOSCRIPT, then the mode's redirections, then the operation's kind),
 * WAIT after writes, the calls waiting out a TRYAGAIN, the silence
 * timeout.
 *
 * Every call of an operation carries the cluster slot of its key (the same
 * for every key it names: one hash tag) and goes where the mode routes it;
 * its reply comes back through redis_on_call_reply(), which resends it as
 * EVAL after NOSCRIPT and lets the mode follow MOVED / ASK / TRYAGAIN
 * before the operation sees the reply.
 *
 * wait_replicas N > 0: after an operation's writes, one "WAIT N ms" on
 * every connection that got some; a call counts as applied (its counters'
 * `ok`) only once its WAIT says N replicas have it (redis_op_send_waits).
 *
 * Operations while not ready() are refused at once: the call returns -1
 * with errstr "not connected (...)" and the callback never runs; so is an
 * operation none of whose calls has a connection now (a call alone
 * without one fails alone). A started operation fails with "timeout" when,
 * while it waits, the connections it waits on deliver no reply at all for
 * timeout_ms (the clock restarts at every reply, to any operation: a big
 * pipelined batch that keeps answering, or a small operation queued
 * behind it, is not cut off); those connections are then dropped - which
 * also fails the other operations in flight on them, so no late reply can
 * reach a freed operation - and re-established.
 *
 * Callback discipline. hiredis reply callbacks only record results. A
 * finished operation goes on a done queue drained by a zero-delay timer,
 * so user callbacks never run inside hiredis (nor inside the call that
 * started the operation) and may call any operation, destroy() included.
 * The connection is only freed outside hiredis callbacks (op timers, the
 * drain, destroy); redisAsyncFree() there runs every pending reply
 * callback with a NULL reply at once, so after it returns hiredis holds no
 * pointer to an operation. destroy() from inside a callback of this
 * instance frees the instance after that callback returns.
 *
 * Calls go one way: the operations (redis.c, redis_write.c) and the modes
 * (redis_single.c, redis_cluster.c, redis_sentinel.c) call in here, this
 * file calls the connections (redis_conn.c) and the text (redis_resp.c);
 * it reaches back up only through what it is handed: the mode's ops
 * (route, redirect, why_down) and the operation's kind (reply, commit).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strategies/container.h"
#include "strategies/redis_int.h"

/* ===================================================================== */
/* Operations: lifetime and completion                                   */
/* ===================================================================== */

/* Records the first failure of op (later ones are consequences). */
static void redis_op_vfail(struct redis_op *op, const char *fmt, va_list ap)
{
	if (op->status < 0)
		return;
	op->status = -1;
	vsnprintf(op->errstr, sizeof(op->errstr), fmt, ap);
}

void redis_op_fail(struct redis_op *op, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	redis_op_vfail(op, fmt, ap);
	va_end(ap);
}

/* Puts op on the done queue; its callback runs from the drain, outside
 * hiredis and outside the caller's current call. */
void redis_op_finish(struct redis_op *op)
{
	store_op_finish(&op->base);
}

/* Finishes op once nothing of it is in flight or waiting. */
static void redis_op_check(struct redis_op *op)
{
	if (op->inflight == 0)
		redis_op_finish(op);
}

void redis_op_free(struct redis_op *op)
{
	while (op->waits) {
		struct redis_wait *w = op->waits;

		op->waits = w->next;
		free(w);
	}
	free(op->rows);
	free(op->key_off);
	free(op->keys);
	free(op->arena);
	free(op);
}

/* Runs op's callback once, with its outcome, then frees op. */
static void redis_op_deliver(struct store_op *b)
{
	struct redis_op *op = container_of(b, struct redis_op, base);

	switch (op->k->kind) {
	case REDIS_OP_PUSH:
	case REDIS_OP_WINDOW:
	case REDIS_OP_ADMIT:
	case REDIS_OP_NODES:
	case REDIS_OP_FORGET:
	case REDIS_OP_LIMIT_SET:
		/* The replies marked the counters of every call that was
		 * applied: on a failed push they are the ones the store has
		 * (strategy.h), so the sync loop acks them and only them. */
		/* fall through */
	case REDIS_OP_PURGE:
		if (op->done_cb)
			op->done_cb(op->arg, op->status, op->status == 0 ? NULL : op->errstr);
		break;
	case REDIS_OP_ROWS:
	case REDIS_OP_LIMITS_READ:
		if (op->rows_cb == NULL)
			break;
		if (op->status == 0) {
			for (size_t i = 0; i < op->nrows; i++)
				op->rows[i].key = op->keys + op->key_off[i];
			op->rows_cb(op->arg, 0, NULL, op->rows, op->nrows);
		} else {
			op->rows_cb(op->arg, -1, op->errstr, NULL, 0);
		}
		break;
	default:
		break;
	}
	redis_op_free(op);
}

struct redis_op *redis_op_new(struct redis_strategy *s, const struct redis_kind *k,
			      strategy_done_cb done_cb, strategy_rows_cb rows_cb, void *arg)
{
	struct redis_op *op = calloc(1, sizeof(*op));

	if (op == NULL)
		return NULL;
	op->s = s;
	op->base.core = &s->core;
	op->base.deliver = redis_op_deliver;
	op->k = k;
	op->done_cb = done_cb;
	op->rows_cb = rows_cb;
	op->arg = arg;
	return op;
}

/* ===================================================================== */
/* Calls: sending, replies, redirections, WAIT                           */
/* ===================================================================== */

static void redis_on_call_reply(redisAsyncContext *ac, void *r, void *privdata);
static void redis_on_wait_reply(redisAsyncContext *ac, void *r, void *privdata);

int redis_call_send(struct redis_call *c, struct redis_conn *cn)
{
	struct redis_op *op = c->op;

	if (c->asking && redisAsyncCommand(cn->ac, NULL, NULL, "ASKING") != REDIS_OK)
		goto fail;
	if (redisAsyncFormattedCommand(cn->ac, redis_on_call_reply, c, op->cmd + c->begin,
				       c->end - c->begin) != REDIS_OK)
		goto fail;
	c->asked = c->asking;
	c->asking = false;
	c->state = REDIS_CALL_SENT;
	c->conn = cn;
	c->wait = NULL;
	/* an idle connection's silence counts from the work it is given */
	if (cn->inflight++ == 0)
		cn->last_activity = ev_now(op->s->loop);
	op->inflight++;
	return 0;
fail:
	redis_op_fail(op, "cannot queue the command");
	redis_conn_drop_later(cn, "cannot queue a command", false);
	return -1;
}

void redis_call_fail(struct redis_call *c, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	redis_op_vfail(c->op, fmt, ap);
	va_end(ap);
}

/* Sends call c where the mode routes it. Returns 0, or -1 (the op failed
 * with the reason: no connection serves the call's slot now). */
static int redis_call_route(struct redis_call *c)
{
	struct redis_strategy *s = c->op->s;
	struct redis_conn *cn = s->mode->route(s, c->slot);

	if (!redis_conn_usable(cn)) {
		redis_call_fail(c, "not connected (%s)",
				cn && cn->last_err[0] ? cn->last_err : s->mode->why_down(s));
		return -1;
	}
	return redis_call_send(c, cn);
}

/* After a NOSCRIPT error: sends call c again as EVAL of its script (which
 * caches it again), once, on the same connection, behind ASKING again if
 * the EVALSHA went after an ASK (the node importing the slot has no script
 * yet: without ASKING it would answer MOVED back to the source, which asks
 * again, until the redirection limit). Returns true when the call is in
 * flight again. */
static bool redis_resend_eval(struct redis_call *c, struct redis_conn *cn)
{
	const struct redis_kind *k = c->op->k;
	struct redis_op *op = c->op;
	size_t tail = c->end - c->tail, slen = strlen(k->script);
	char *buf = malloc(64 + REDIS_BULK_MAX(slen) + tail), *p = buf;
	bool sent = false;

	c->resent = true;
	if (buf != NULL &&
	    (!c->asked || redisAsyncCommand(cn->ac, NULL, NULL, "ASKING") == REDIS_OK)) {
		p = redis_put_array(p, c->nargs);
		p = redis_put_bulk(p, "EVAL", 4);
		p = redis_put_bulk(p, k->script, slen);
		memcpy(p, op->cmd + c->tail, tail);
		p += tail;
		sent = redisAsyncFormattedCommand(cn->ac, redis_on_call_reply, c, buf,
						  (size_t)(p - buf)) == REDIS_OK;
	}
	if (!sent) {
		redis_op_fail(op, "redis: NOSCRIPT, and resending as EVAL failed");
		/* hiredis refused a command (or an ASKING went alone): the
		 * connection cannot be trusted with what follows. */
		if (buf != NULL)
			redis_conn_drop_later(cn, "cannot queue a command", false);
		free(buf);
		return false;
	}
	free(buf);
	c->state = REDIS_CALL_SENT;
	c->conn = cn;
	c->wait = NULL;             /* a WAIT after it, if needed (redis_op_send_waits) */
	cn->inflight++;
	op->inflight++;
	return true;
}

/* The script cache was flushed (NOSCRIPT): EVAL instead, once per call. */
static bool redis_is_noscript(const struct redis_call *c, const redisReply *r)
{
	return c->op->k->script != NULL && !c->resent && c->op->status == 0 &&
	       r->len >= 8 && memcmp(r->str, "NOSCRIPT", 8) == 0;
}

/*
 * Every call's reply. The call leaves its connection; then, before the
 * operation sees the reply: NOSCRIPT resends it as EVAL, and the mode may
 * take over an error (MOVED, ASK, TRYAGAIN: redis_cluster.c). A NULL reply
 * (the connection is going away) goes to the operation as a failure.
 */
static void redis_on_call_reply(redisAsyncContext *ac, void *r, void *privdata)
{
	struct redis_call *c = privdata;
	struct redis_op *op = c->op;
	struct redis_strategy *s = op->s;
	struct redis_conn *cn = c->conn;
	const redisReply *reply = r;

	c->state = REDIS_CALL_IDLE;
	c->conn = NULL;
	op->inflight--;
	if (cn != NULL) {
		cn->inflight--;
		if (reply != NULL)
			cn->last_activity = ev_now(s->loop);
	}
	if (reply != NULL && reply->type == REDIS_REPLY_ERROR && cn != NULL) {
		if (redis_is_noscript(c, reply) && redis_resend_eval(c, cn)) {
			redis_op_send_waits(op);
			return;
		}
		if (s->mode->redirect && s->mode->redirect(c, cn, reply)) {
			redis_op_check(op);
			return;
		}
	}
	op->k->reply(c, ac, reply);
	redis_op_check(op);
}

/* The call's results are in: valid now, or once its WAIT says enough
 * replicas have them (wait_replicas). */
void redis_call_applied(struct redis_call *c)
{
	struct redis_op *op = c->op;

	if (op->s->o.wait_replicas == 0 || op->k->commit == NULL || c->ro) {
		if (op->k->commit)
			op->k->commit(c);
		return;
	}
	if (c->wait != NULL) {
		c->state = REDIS_CALL_APPLIED;
		c->conn = c->wait->conn;
	} else {
		redis_op_fail(op, "redis: no WAIT followed the call");
	}
}

/*
 * wait_replicas: after the calls an op just sent, one "WAIT <n> <ms>" on
 * each connection that got some: Redis answers once n replicas have every
 * write this connection made before it (or after ms, with how many did).
 * The calls it follows are confirmed by it, or fail ("not replicated"):
 * their diffs stay with the caller, who resends them with the same token,
 * so a write the old master took but no replica got is applied again by
 * the new master, and one that did reach the replica is not.
 */
void redis_op_send_waits(struct redis_op *op)
{
	struct redis_strategy *s = op->s;

	if (s->o.wait_replicas == 0 || op->k->commit == NULL)
		return;
	for (size_t i = 0; i < op->ncalls; i++) {
		struct redis_call *c = &op->calls[i];
		struct redis_wait *w;

		if (c->state != REDIS_CALL_SENT || c->wait != NULL || c->ro)
			continue;
		for (w = op->waits; w; w = w->next)
			if (w->conn == c->conn && !w->sent)
				break;
		if (w == NULL) {
			w = calloc(1, sizeof(*w));
			if (w == NULL) {
				redis_op_fail(op, "out of memory");
				return;
			}
			w->op = op;
			w->conn = c->conn;
			w->next = op->waits;
			op->waits = w;
		}
		c->wait = w;
	}
	for (struct redis_wait *w = op->waits; w; w = w->next) {
		if (w->sent)
			continue;
		w->sent = true;
		if (redisAsyncCommand(w->conn->ac, redis_on_wait_reply, w, "WAIT %d %d",
				      s->o.wait_replicas, s->o.timeout_ms / 2) != REDIS_OK) {
			redis_op_fail(op, "cannot queue the command");
			redis_conn_drop_later(w->conn, "cannot queue a command", false);
			w->conn = NULL;
			continue;
		}
		w->conn->inflight++;
		op->inflight++;
	}
}

static void redis_on_wait_reply(redisAsyncContext *ac, void *r, void *privdata)
{
	struct redis_wait *w = privdata;
	struct redis_op *op = w->op;
	const redisReply *reply = r;
	long long got = -1;

	(void)ac;
	op->inflight--;
	w->conn->inflight--;
	if (reply != NULL) {
		w->conn->last_activity = ev_now(op->s->loop);
		if (reply->type == REDIS_REPLY_INTEGER)
			got = reply->integer;
	}
	for (size_t i = 0; i < op->ncalls; i++) {
		struct redis_call *c = &op->calls[i];

		if (c->wait != w || c->state != REDIS_CALL_APPLIED)
			continue;
		c->state = REDIS_CALL_IDLE;
		c->conn = NULL;
		if (got >= op->s->o.wait_replicas)
			op->k->commit(c);
		else if (reply == NULL)
			redis_op_fail(op, "connection lost before WAIT answered");
		else
			redis_op_fail(op, "not replicated: %lld of %d replicas within %d ms", got,
				      op->s->o.wait_replicas, op->s->o.timeout_ms / 2);
	}
	w->conn = NULL;
	redis_op_check(op);
}

/* TRYAGAIN: the call goes again after REDIS_TRYAGAIN_MS. */
void redis_call_wait(struct redis_call *c)
{
	struct redis_strategy *s = c->op->s;

	c->state = REDIS_CALL_WAITING;
	c->next_wait = NULL;
	c->op->inflight++;
	if (s->waiting_tail)
		s->waiting_tail->next_wait = c;
	else
		s->waiting = c;
	s->waiting_tail = c;
	if (!ev_is_active(&s->waiting_timer)) {
		ev_timer_set(&s->waiting_timer, REDIS_TRYAGAIN_MS / 1000.0, 0.);
		ev_timer_start(s->loop, &s->waiting_timer);
	}
}

/* Takes the calls of op (every op if NULL) off the waiting list; they are
 * done (failed) unless resent by the caller. Returns the list taken. */
static struct redis_call *redis_waiting_take(struct redis_strategy *s, const struct redis_op *op)
{
	struct redis_call *taken = NULL, **tp = &taken, **pp = &s->waiting, *c;

	s->waiting_tail = NULL;
	while ((c = *pp) != NULL) {
		if (op == NULL || c->op == op) {
			*pp = c->next_wait;
			c->next_wait = NULL;
			*tp = c;
			tp = &c->next_wait;
			c->state = REDIS_CALL_IDLE;
			c->op->inflight--;
		} else {
			s->waiting_tail = c;
			pp = &c->next_wait;
		}
	}
	return taken;
}

static void redis_on_waiting_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct redis_strategy *s = container_of(w, struct redis_strategy, waiting_timer);
	struct redis_call *c = redis_waiting_take(s, NULL), *next;

	(void)loop;
	(void)revents;
	store_enter(&s->core);
	for (struct redis_call *i = c; i; i = i->next_wait)
		redis_call_route(i);
	for (; c; c = next) {
		next = c->next_wait;
		c->next_wait = NULL;
		redis_op_send_waits(c->op);
		redis_op_check(c->op);
	}
	store_leave(&s->core);
}

void redis_waiting_init(struct redis_strategy *s)
{
	ev_timer_init(&s->waiting_timer, redis_on_waiting_timer, 0., 0.);
}

void redis_waiting_destroy(struct redis_strategy *s)
{
	struct redis_call *c;

	ev_timer_stop(s->loop, &s->waiting_timer);
	for (c = redis_waiting_take(s, NULL); c; c = c->next_wait) {
		redis_op_fail(c->op, "instance destroyed");
		redis_op_check(c->op);
	}
}

/* ===================================================================== */
/* Timeouts and readiness                                                */
/* ===================================================================== */

/*
 * The silence timeout of an operation: timeout_ms after it was sent or
 * after the last reply any connection it waits on delivered (to any
 * call), whichever is later - an operation pipelined behind a big batch
 * that keeps answering is waiting, not stuck; a call waiting to try again
 * (TRYAGAIN) is not silence either. The timer is pushed back lazily, here,
 * rather than at every reply. On expiry: fail the operation, drop the
 * connections it waits on (which fails the others in flight on them) and
 * reconnect.
 */
static void redis_on_op_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct redis_op *op = container_of(w, struct redis_op, base.timer);
	struct redis_strategy *s = op->s;
	ev_tstamp last = 0;
	bool waiting = false;

	(void)loop;
	(void)revents;
	for (size_t i = 0; i < op->ncalls; i++) {
		const struct redis_call *c = &op->calls[i];

		if ((c->state == REDIS_CALL_SENT || c->state == REDIS_CALL_APPLIED) && c->conn &&
		    c->conn->last_activity > last)
			last = c->conn->last_activity;
		waiting |= c->state == REDIS_CALL_WAITING;
	}
	for (const struct redis_wait *wt = op->waits; wt; wt = wt->next)
		if (wt->conn && wt->conn->last_activity > last)
			last = wt->conn->last_activity;
	if (waiting)
		last = ev_now(s->loop);
	if (!store_op_silent_since(&op->base, last))
		return;
	store_enter(&s->core);
	redis_op_fail(op, "timeout: no reply from redis within %d ms", s->o.timeout_ms);
	redis_waiting_take(s, op);
	for (size_t i = 0; i < op->ncalls; i++) {
		struct redis_call *c = &op->calls[i];

		if ((c->state == REDIS_CALL_SENT || c->state == REDIS_CALL_APPLIED) && c->conn)
			redis_conn_close(c->conn, "an operation timed out", true);
	}
	for (struct redis_wait *wt = op->waits; wt; wt = wt->next)
		if (wt->conn)
			redis_conn_close(wt->conn, "an operation timed out", true);
	if (!op->base.finished) {    /* its calls were all on those connections */
		op->inflight = 0;
		redis_op_finish(op);
	}
	store_leave(&s->core);
}

/* Refuses an operation when the instance cannot take it now. */
int redis_check_ready(const struct redis_strategy *s, char errstr[STRATEGY_ERR_MAX])
{
	if (s->destroying) {
		redis_seterr(errstr, "not connected (instance destroyed)");
		return -1;
	}
	if (!s->mode->ready(s)) {
		const char *why = s->mode->why_down(s);

		redis_seterr(errstr, "not connected%s%s%s", why[0] ? " (" : "", why,
			     why[0] ? ")" : "");
		return -1;
	}
	return 0;
}

/*
 * Sends every call of a built op where the mode routes it, then the WAITs
 * it needs, and starts its silence timer. A call whose slot no connection
 * serves now fails alone (the op fails, with the others' results kept).
 * Returns 0, or -1 when nothing could be sent: op freed, errstr says why
 * ("not connected (...)"), the callback never runs.
 */
int redis_op_launch(struct redis_op *op, char errstr[STRATEGY_ERR_MAX])
{
	struct redis_strategy *s = op->s;

	for (size_t i = 0; i < op->ncalls; i++)
		redis_call_route(&op->calls[i]);
	if (op->inflight == 0 && op->ncalls > 0) {
		redis_seterr(errstr, "%s", op->errstr[0] ? op->errstr : "not connected");
		if (strncmp(op->errstr, "not connected", 13) != 0)
			redis_seterr(errstr, "not connected (%s)", op->errstr);
		redis_op_free(op);
		return -1;
	}
	redis_op_send_waits(op);
	if (op->inflight == 0) {
		redis_op_finish(op);
		return 0;
	}
	ev_now_update(s->loop);     /* building a big batch takes a while */
	store_op_start(&s->core, &op->base, redis_on_op_timeout, redis_op_deliver);
	return 0;
}

/* A NULL reply: the connection is going away with this call in flight. */
static void redis_call_lost(struct redis_call *c, const redisAsyncContext *ac)
{
	struct redis_strategy *s = c->op->s;

	if (s->destroying)
		redis_op_fail(c->op, "instance destroyed");
	else if (ac->err && ac->errstr)
		redis_op_fail(c->op, "connection lost: %s", ac->errstr);
	else
		redis_op_fail(c->op, "connection lost: closed");
}

/* An error reply, as "redis: <first line>". */
static void redis_call_error(struct redis_call *c, const redisReply *r)
{
	redis_op_fail(c->op, "redis: %.*s", (int)(r->len > 110 ? 110 : r->len), r->str);
}

/* The reply of c is no reply (connection going away) or an error: the op
 * fails with why. Returns true then. */
bool redis_reply_failed(struct redis_call *c, const redisAsyncContext *ac,
			const redisReply *r)
{
	if (r == NULL)
		redis_call_lost(c, ac);
	else if (r->type == REDIS_REPLY_ERROR)
		redis_call_error(c, r);
	else
		return false;
	return true;
}
