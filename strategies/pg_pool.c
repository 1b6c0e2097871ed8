/*
 * pg_pool.c - the connections of the PostgreSQL strategy
 * (strategies/pg_int.h): a connection set up (the tables probed, created
 * if missing, every statement prepared), its results read and handed to
 * pg_result.c, lost (what it carried fails; it reconnects after a backoff).
 *
 *   - A pool of pool_size connections (default 2), libpq's asynchronous API
 *     only (PQconnectStart/PQconnectPoll, non-blocking mode, pipeline
 *     mode), each driven from the caller's libev loop through pg_ev.c.
 *     Never PQexec, never PQcancel: a failed connection is dropped
 *     (PQfinish) and made again after a backoff (50 ms doubling to 2 s, back
 *     to 50 ms once set up). Each connection creates the table if missing
 *     and prepares the statements before it counts as ready.
 *     Connecting (up to the table being usable) is bounded by timeout_ms
 *     as a whole.
 *
 * Attempts start, and the sockets are watched, from pg_queue.c, where
 * every libev callback of the strategy enters.
 */
#include <stdio.h>

#include "strategies/pg_int.h"

/* Starts a set-up step on c. No user callback runs. */
static void pg_setup_start(struct pg_conn *c, enum pg_op_kind kind)
{
	struct pg_op *op = pg_op_new(c->s, kind);
	int r;

	if (!op) {
		pg_conn_lost(c, "out of memory");
		return;
	}
	c->setup = op;
	r = pg_op_send(c, op);
	if (r <= 0 || pg_flush(c) < 0)
		pg_conn_lost(c, PQerrorMessage(c->conn));
}

/* A set-up step ended: next step, or ready, or dropped. */
static void pg_setup_done(struct pg_conn *c)
{
	struct pg *s = c->s;
	struct pg_op *op = c->setup;
	char err[STRATEGY_ERR_MAX];
	enum pg_op_kind kind = op->kind;
	bool failed = op->failed || op->nres != op->nstmts;

	snprintf(err, sizeof(err), "%s", op->failed ? op->err : "unexpected result count");
	c->setup = NULL;
	pg_op_free(op);
	if (failed) {
		pg_conn_lost(c, err);
		return;
	}
	if (kind == PG_OP_PROBE) {
		pg_setup_start(c, PG_OP_CREATE);
		return;
	}
	c->state = PG_ST_READY;
	store_backoff_reset(&c->backoff);
	s->last_err[0] = '\0';
	ev_timer_stop(s->loop, &c->conn_timer);
}

/* Reads every complete result of c. Stops when nothing more is available,
 * when c has nothing in flight, or when the instance is destroyed. No user
 * callback runs here: operations are finished by pg_dispatch(). */
void pg_read_results(struct pg_conn *c)
{
	struct pg *s = c->s;
	int nulls = 0;

	while (!s->core.destroyed && c->conn && (c->setup || c->op) && !PQisBusy(c->conn)) {
		PGresult *r = PQgetResult(c->conn);
		ExecStatusType st;
		struct pg_op *op;

		if (!r) {
			/* End of one statement's results; two in a row means
			 * libpq has nothing more for now. */
			if (++nulls > 1)
				break;
			continue;
		}
		nulls = 0;
		pg_progress(s);
		st = PQresultStatus(r);
		if (st == PGRES_COPY_IN || st == PGRES_COPY_OUT || st == PGRES_COPY_BOTH) {
			/* Never asked for; the connection cannot be trusted. */
			PQclear(r);
			pg_conn_lost(c, "unexpected COPY from the server");
			return;
		}
		if (!c->setup && pg_op_is_push(c->op)) {
			if (pg_on_chunk_result(c, r) < 0)
				pg_conn_lost(c, "unexpected result");
			continue;
		}
		op = c->setup ? c->setup : c->op;
		if (st != PGRES_PIPELINE_SYNC) {
			pg_on_result(c, op, r);
			continue;
		}
		PQclear(r);
		if (++op->nsynced < op->nsyncs)
			continue;
		if (c->setup) {
			pg_setup_done(c);
			continue;
		}
		if (!op->failed && op->nres != op->nstmts)
			pg_op_fail(op, NULL, "unexpected result count");
		op->ended = true;
		c->op = NULL;
	}
}

/* Tears c down and arms its reconnect timer. What it carried for the
 * active operation fails with why (push chunks in flight: their outcome is
 * unknown, they are not retried); pg_dispatch() finishes the operation.
 * No user callback runs. */
void pg_conn_lost(struct pg_conn *c, const char *why)
{
	struct pg *s = c->s;
	struct pg_op *op = c->op;
	char err[STRATEGY_ERR_MAX];

	pg_err_set(err, NULL, why);
	if (c->setup) {
		pg_op_free(c->setup);
		c->setup = NULL;
	}
	if (op) {
		if (pg_op_is_push(op)) {
			for (size_t i = 0; i < c->nfifo; i++) {
				struct pg_chunk *ch = &op->chunks[c->fifo[i]];

				if (!ch->done) {
					ch->failed = ch->done = true;
					op->chunks_done++;
				}
			}
		} else {
			op->ended = true;
		}
		pg_op_fail_conn(op, err);
	}
	c->op = NULL;
	c->nfifo = 0;
	ev_timer_stop(s->loop, &c->conn_timer);
	pg_ev_detach(&c->ev);
	if (c->conn)
		PQfinish(c->conn);
	c->conn = NULL;
	c->state = PG_ST_DOWN;
	snprintf(s->last_err, sizeof(s->last_err), "%s", err);
	ev_timer_stop(s->loop, &c->reconnect);
	ev_timer_set(&c->reconnect, store_backoff_take(&c->backoff), 0.);
	ev_timer_start(s->loop, &c->reconnect);
}

/* CONNECTION_OK: non-blocking, pipeline mode, then the set-up. */
void pg_connected(struct pg_conn *c)
{
	if (PQsetnonblocking(c->conn, 1) != 0 || !PQenterPipelineMode(c->conn)) {
		pg_conn_lost(c, PQerrorMessage(c->conn));
		return;
	}
	c->state = PG_ST_SETUP;
	pg_ev_want(&c->ev, true, false);
	pg_setup_start(c, PG_OP_PROBE);
}

bool pg_any_ready(const struct pg *s)
{
	for (size_t i = 0; i < s->nconns; i++)
		if (s->conns[i].state == PG_ST_READY)
			return true;
	return false;
}

bool pg_all_down(const struct pg *s)
{
	for (size_t i = 0; i < s->nconns; i++)
		if (s->conns[i].state != PG_ST_DOWN)
			return false;
	return true;
}
