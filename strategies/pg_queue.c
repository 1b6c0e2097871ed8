/*
 * pg_queue.c - where the operations of the PostgreSQL strategy wait and
 * run (strategies/pg_int.h), and where every libev callback of the
 * strategy enters: a connection's socket, its reconnect and set-up timers,
 * an operation's silence timer, the kick, the periodic purge. Each ends
 * with the dispatch: what is complete finishes, what can start starts.
 *
 *   - Operations run one at a time, in the order they were submitted; the
 *     others wait in a FIFO of at most PG_QUEUE_MAX operations (beyond: "queue
 *     full" at once). While every connection is down (between a failure and
 *     the next attempt) operations are refused at once with the last
 *     connection error, so a caller learns about an outage without waiting;
 *     while connecting they are queued.
 *   - Why a pool: the store's side of an upsert is one backend on one core
 *     (70-80k rows/s here). A push is cut in chunks of PG_CHUNK_ROWS rows,
 *     and the chunks are spread over every ready connection,
 *     PG_CONN_DEPTH in flight on each (the next one is queued on the
 *     server while the previous runs), so a 100k-counter push keeps two
 *     backends busy. Every other operation is one statement on one
 *     connection.
 *   - Timeouts: each operation has a timer of timeout_ms, started when it
 *     is submitted and restarted whenever the store sends something (a
 *     result, or bytes of one): timeout_ms bounds how long the store may
 *     stay silent, so a big push split in chunks, or a big fetch, may take
 *     longer than timeout_ms as long as data keeps coming. When the timer
 *     fires on the running operation, the whole pool is dropped (the store
 *     is not answering; ready() turns false); on a waiting operation, that
 *     one fails alone.
 *   - Callbacks never run inside the call that started the operation: the
 *     API only queues, and a zero-delay timer dispatches. The instance may
 *     be destroyed from inside any callback; it is then freed when our
 *     libev callback returns (docs/STYLE.md, rule 8): every callback here
 *     runs between store_enter and store_leave (pg_enter, pg_leave).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strategies/container.h"
#include "strategies/pg_int.h"

static void pg_dispatch(struct pg *s);
static void pg_op_timeout(struct ev_loop *loop, ev_timer *w, int revents);

/* Around every libev callback of the instance (store.h): the callbacks
 * of the operations finished meanwhile run when the outermost returns. */
static void pg_enter(struct pg *s)
{
	store_enter(&s->core);
}

/* Returns true if s was freed: the caller must not touch it again. */
static bool pg_leave(struct pg *s)
{
	return store_leave(&s->core);
}

/* ------------------------------------------------------------------------
 * The queue.
 */
static void pg_queue_unlink(struct pg *s, struct pg_op *op)
{
	if (!op->queued)
		return;
	if (op->prev)
		op->prev->next = op->next;
	else
		s->head = op->next;
	if (op->next)
		op->next->prev = op->prev;
	else
		s->tail = op->prev;
	op->prev = op->next = NULL;
	op->queued = false;
}

static void pg_queue_append(struct pg *s, struct pg_op *op)
{
	op->prev = s->tail;
	op->next = NULL;
	if (s->tail)
		s->tail->next = op;
	else
		s->head = op;
	s->tail = op;
	op->queued = true;
}

/*
 * Ends an operation: it leaves the queue (or the active slot), its timer
 * stops and it joins the done queue (store.h): its callback runs when the
 * outermost of our libev callbacks returns, and it is freed then. No
 * connection may still work for it.
 */
void pg_op_finish(struct pg *s, struct pg_op *op, int status)
{
	pg_queue_unlink(s, op);
	if (s->active == op)
		s->active = NULL;
	for (size_t i = 0; i < s->nconns; i++)
		if (s->conns[i].op == op) /* cannot happen; never leave a dangling one */
			pg_conn_lost(&s->conns[i], "internal error: operation ended early");
	if (s->nops > 0)
		s->nops--;
	if (status < 0 && !op->err[0])
		pg_err_set(op->err, NULL, "failed");
	if (op->kind == PG_OP_MAINT)
		s->maint_pending = false;
	op->status = status;
	store_op_finish(&op->base);
}

/* Queues a validated operation (API calls only). Returns 0, or -1 with
 * errstr set and op freed. */
int pg_submit(struct pg *s, struct pg_op *op, char errstr[STRATEGY_ERR_MAX])
{
	const char *why = NULL;

	if (s->core.destroyed)
		why = "instance is being destroyed";
	else if (s->nops >= PG_QUEUE_MAX)
		why = "queue full";
	if (why) {
		pg_err_set(errstr, NULL, why);
		pg_op_free(op);
		return -1;
	}
	if (pg_all_down(s)) {
		if (errstr)
			snprintf(errstr, STRATEGY_ERR_MAX, "not connected (%.*s)",
				 STRATEGY_ERR_MAX - 20, s->last_err);
		pg_op_free(op);
		return -1;
	}
	pg_queue_append(s, op);
	s->nops++;
	store_op_start(&s->core, &op->base, pg_op_timeout, pg_op_deliver);
	if (!s->active && pg_any_ready(s))
		store_kick(&s->core);
	return 0;
}

/* ------------------------------------------------------------------------
 * The dispatch.
 */

/* Gives ready connections chunks of the active push, PG_CONN_DEPTH each at
 * most. No user callback runs. */
static void pg_feed_push(struct pg *s, struct pg_op *op)
{
	for (size_t i = 0; i < s->nconns && op->next_chunk < op->nchunks; i++) {
		struct pg_conn *c = &s->conns[i];
		bool sent = false;

		if (c->state != PG_ST_READY || (c->op && c->op != op))
			continue;
		while (c->state == PG_ST_READY && op->next_chunk < op->nchunks &&
		       c->nfifo < PG_CONN_DEPTH) {
			size_t k = op->next_chunk++;
			struct pg_chunk *ch = &op->chunks[k];
			int r = pg_send_chunk(c, op, ch);

			if (r > 0) {
				c->fifo[c->nfifo++] = k;
				c->op = op;
				sent = true;
				continue;
			}
			/* Not sent (r == -2: nothing queued), or sent in part on
			 * a broken connection (never retried elsewhere: it might
			 * have committed). */
			ch->failed = ch->done = true;
			op->chunks_done++;
			if (r == -2) {
				pg_op_fail(op, NULL, "out of memory");
				continue;
			}
			pg_conn_lost(c, PQerrorMessage(c->conn));
		}
		if (sent && c->state == PG_ST_READY && pg_flush(c) < 0)
			pg_conn_lost(c, PQerrorMessage(c->conn));
	}
}

/* Sends a whole operation on an idle ready connection, if there is one. */
static void pg_start_whole(struct pg *s, struct pg_op *op)
{
	for (size_t i = 0; i < s->nconns; i++) {
		struct pg_conn *c = &s->conns[i];
		int r;

		if (c->state != PG_ST_READY || c->op)
			continue;
		op->started = true;
		r = pg_op_send(c, op);
		if (r == 0) {
			op->ended = true;
			return;
		}
		c->op = op;
		if (r < 0 || pg_flush(c) < 0)
			pg_conn_lost(c, op->failed ? op->err : PQerrorMessage(c->conn));
		return;
	}
}

/* Finishes the active operation if nothing more can happen to it. */
static void pg_settle(struct pg *s)
{
	struct pg_op *op = s->active;

	if (!op || s->core.destroyed)
		return;
	if (pg_op_is_push(op) ? op->chunks_done < op->nchunks : !op->ended)
		return;
	pg_op_finish(s, op, op->failed ? -1 : 0);
}

/* Finishes what is complete and starts what can start: the head of the
 * queue becomes active once a connection is ready. Operations run one at
 * a time, in order; a push uses every ready connection. Call only from a
 * libev callback (user callbacks may run). */
static void pg_dispatch(struct pg *s)
{
	while (!s->core.destroyed) {
		struct pg_op *op;

		pg_settle(s);
		if (s->core.destroyed)
			return;
		op = s->active;
		if (!op) {
			if (s->head && pg_all_down(s)) {
				/* Every connection failed (a set-up refused, the
				 * server gone) and waits for its reconnect: what is
				 * queued fails now with the reason, as a new
				 * operation would, rather than at its timeout. */
				op = s->head;
				pg_err_set(op->err, "not connected: ", s->last_err);
				op->failed = true;
				pg_op_finish(s, op, -1);
				continue;
			}
			if (!s->head || !pg_any_ready(s))
				return;
			op = s->head;
			pg_queue_unlink(s, op);
			s->active = op;
			continue; /* an empty push settles at once */
		}
		if (pg_op_is_push(op)) {
			pg_feed_push(s, op);
			if (op->chunks_done < op->nchunks)
				return;
		} else {
			if (!op->started)
				pg_start_whole(s, op);
			if (!op->ended)
				return;
		}
	}
}

/* ------------------------------------------------------------------------
 * The libev callbacks: a connection, its timers, the kick, an operation's
 * silence, the periodic purge.
 */
static void pg_notice_ignore(void *arg, const PGresult *r)
{
	(void)arg;
	(void)r;
}

static void pg_on_io(struct pg_ev *e, int revents)
{
	struct pg_conn *c = container_of(e, struct pg_conn, ev);
	struct pg *s = c->s;

	pg_enter(s);
	if (c->state == PG_ST_CONNECTING) {
		PostgresPollingStatusType st = PQconnectPoll(c->conn);

		pg_ev_resync(&c->ev);
		switch (st) {
		case PGRES_POLLING_READING:
			pg_ev_want(&c->ev, true, false);
			break;
		case PGRES_POLLING_WRITING:
			pg_ev_want(&c->ev, false, true);
			break;
		case PGRES_POLLING_OK:
			pg_connected(c);
			break;
		case PGRES_POLLING_FAILED:
		default:
			pg_conn_lost(c, PQerrorMessage(c->conn));
			break;
		}
	} else if ((c->state == PG_ST_SETUP || c->state == PG_ST_READY) && c->conn) {
		if ((revents & EV_WRITE) && pg_flush(c) < 0) {
			pg_conn_lost(c, PQerrorMessage(c->conn));
		} else if (revents & EV_READ) {
			if (!PQconsumeInput(c->conn)) {
				pg_conn_lost(c, PQerrorMessage(c->conn));
			} else {
				/* Bytes from the store: it is alive (a big
				 * result arrives in many reads before
				 * PQgetResult has it). */
				pg_progress(s);
				if (c->ev.writing && pg_flush(c) < 0)
					pg_conn_lost(c, PQerrorMessage(c->conn));
				else
					pg_read_results(c);
				if (c->conn && PQstatus(c->conn) == CONNECTION_BAD)
					pg_conn_lost(c, PQerrorMessage(c->conn));
			}
		}
	}
	pg_dispatch(s);
	pg_leave(s);
}

/* Starts a connection attempt (from create() or the reconnect timer). */
void pg_connect_start(struct pg_conn *c)
{
	struct pg *s = c->s;

	/* dbname with expand_dbname: the whole conninfo (or URI) goes there. */
	static const char *const keys[] = { "dbname", "fallback_application_name", NULL };
	const char *values[] = { s->conninfo, "spoa-ratelimit", NULL };

	c->conn = PQconnectStartParams(keys, values, 1);
	if (!c->conn) {
		pg_conn_lost(c, "out of memory");
		return;
	}
	PQsetNoticeReceiver(c->conn, pg_notice_ignore, NULL);
	if (PQstatus(c->conn) == CONNECTION_BAD) {
		pg_conn_lost(c, PQerrorMessage(c->conn));
		return;
	}
	c->state = PG_ST_CONNECTING;
	c->table_present = false;
	pg_ev_attach(&c->ev, s->loop, c->conn, pg_on_io);
	pg_ev_want(&c->ev, false, true);
	ev_timer_stop(s->loop, &c->conn_timer);
	ev_timer_set(&c->conn_timer, s->timeout, 0.);
	ev_timer_start(s->loop, &c->conn_timer);
}

void pg_on_reconnect(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct pg_conn *c = container_of(w, struct pg_conn, reconnect);
	struct pg *s = c->s;

	(void)loop;
	(void)revents;
	pg_enter(s);
	pg_connect_start(c);
	pg_leave(s);
}

void pg_on_conn_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct pg_conn *c = container_of(w, struct pg_conn, conn_timer);
	struct pg *s = c->s;

	(void)loop;
	(void)revents;
	pg_enter(s);
	pg_conn_lost(c, c->state == PG_ST_SETUP ? "timeout setting up the table"
						: "timeout connecting");
	pg_dispatch(s);
	pg_leave(s);
}

/* The kick (store.h; inside its enter/leave): starts what can start. */
void pg_on_kick(struct store_core *c)
{
	pg_dispatch(container_of(c, struct pg, core));
}

/* The store was silent for timeout_ms. For the active operation the whole
 * pool is dropped: the store is not answering, the idle connections would
 * not fare better (and ready() must say so). A waiting operation fails
 * alone. */
static void pg_op_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct pg_op *op = container_of(w, struct pg_op, base.timer);
	struct pg *s = op->s;

	(void)loop;
	(void)revents;
	if (!store_op_silent(&op->base))
		return;
	pg_enter(s);
	if (s->active == op) {
		for (size_t i = 0; i < s->nconns; i++)
			if (s->conns[i].state != PG_ST_DOWN)
				pg_conn_lost(&s->conns[i], "timeout");
		pg_op_fail_conn(op, "timeout");
	} else {
		pg_err_set(op->err, NULL, "timeout");
	}
	pg_op_finish(s, op, -1);
	pg_dispatch(s);
	pg_leave(s);
}

/* Remembers (ns, size) for the periodic purge; silently bounded. */
void pg_seen_note(struct pg *s, const char *ns, size_t ns_len, uint32_t size)
{
	struct pg_seen *sn = NULL;

	for (size_t i = 0; i < s->nseen; i++)
		if (!pg_cmp_bytes(s->seen[i].ns, s->seen[i].ns_len, ns, ns_len)) {
			sn = &s->seen[i];
			break;
		}
	if (!sn) {
		if (s->nseen == PG_SEEN_MAX)
			return;
		sn = &s->seen[s->nseen];
		sn->ns = malloc(ns_len ? ns_len : 1);
		if (!sn->ns)
			return;
		if (ns_len)
			memcpy(sn->ns, ns, ns_len);
		sn->ns_len = ns_len;
		sn->nsizes = 0;
		s->nseen++;
	}
	for (size_t k = 0; k < sn->nsizes; k++)
		if (sn->sizes[k] == size)
			return;
	if (sn->nsizes < PG_SEEN_SIZES)
		sn->sizes[sn->nsizes++] = size;
}

void pg_on_maint(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct pg *s = container_of(w, struct pg, maint);
	struct pg_op *op;

	(void)loop;
	(void)revents;
	if (!pg_any_ready(s) || s->maint_pending || !s->nseen || s->nops >= PG_QUEUE_MAX)
		return;
	op = pg_op_new(s, PG_OP_MAINT);
	if (!op)
		return;
	s->maint_pending = true;
	pg_enter(s);
	if (pg_submit(s, op, NULL) < 0)
		s->maint_pending = false;
	pg_leave(s);
}
