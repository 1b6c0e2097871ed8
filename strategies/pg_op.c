/*
 * pg_op.c - an operation of the PostgreSQL strategy (strategies/pg_int.h):
 * made, failed (the first reason kept), delivered to its callback (then
 * freed). Where it waits and runs is pg_queue.c's.
 */
#include <stdlib.h>
#include <string.h>

#include "strategies/container.h"
#include "strategies/pg_int.h"

struct pg_op *pg_op_new(struct pg *s, enum pg_op_kind kind)
{
	struct pg_op *op = calloc(1, sizeof(*op));

	if (!op)
		return NULL;
	op->s = s;
	op->base.core = &s->core;
	op->base.deliver = pg_op_deliver;
	op->kind = kind;
	return op;
}

void pg_op_free(struct pg_op *op)
{
	free(op->order);
	free(op->groups);
	free(op->up);
	free(op->rd);
	free(op->chunks);
	free(op->ns);
	free(op->key);
	free(op->sizes);
	free(op->starts);
	free(op->rows);
	free(op->adm_ids);
	if (op->res)
		PQclear(op->res);
	free(op);
}

/* Counts a failure and records the first one's message. */
void pg_op_fail(struct pg_op *op, const char *prefix, const char *msg)
{
	op->nerrors++;
	if (op->failed)
		return;
	op->failed = true;
	pg_err_set(op->err, prefix, msg);
}

/* A connection failure seen by an operation: the operation's own error (a
 * server message) says more, except that a timeout is reported as such. */
void pg_op_fail_conn(struct pg_op *op, const char *err)
{
	if (op->failed && strcmp(err, "timeout") != 0) {
		op->nerrors++;
		return;
	}
	op->failed = false;
	pg_op_fail(op, NULL, err);
}

/* Copies the totals of the committed counters of a push into the batch. */
static void pg_push_totals(struct pg_op *op)
{
	for (size_t g = 0; g < op->ngroups; g++) {
		struct pg_group *gr = &op->groups[g];

		if (!gr->committed)
			continue;
		for (size_t i = gr->first; i < gr->first + gr->nmemb; i++) {
			op->order[i]->total = gr->got ? gr->total : 0.0;
			op->order[i]->reset = gr->got && gr->reset;
			op->order[i]->ok = true;
		}
	}
}

/* Runs the callback of a finished operation (status 0 with errstr NULL,
 * or -1 with op->err), then frees it. */
void pg_op_deliver(struct store_op *b)
{
	struct pg_op *op = container_of(b, struct pg_op, base);
	int status = op->status;

	switch (op->kind) {
	case PG_OP_PUSH:
	case PG_OP_GET:
		pg_push_totals(op);
		op->done_cb(op->arg, status, status ? op->err : NULL);
		break;
	case PG_OP_FETCH:
	case PG_OP_LIMITS_READ:
		if (status == 0)
			op->rows_cb(op->arg, 0, NULL, op->rows, op->nrows);
		else
			op->rows_cb(op->arg, -1, op->err, NULL, 0);
		break;
	case PG_OP_PURGE:
	case PG_OP_ADMIT:
	case PG_OP_NODES:
	case PG_OP_FORGET:
	case PG_OP_LIMIT_SET:
		op->done_cb(op->arg, status, status ? op->err : NULL);
		break;
	case PG_OP_MAINT:
	case PG_OP_PROBE:
	case PG_OP_CREATE:
	case PG_OP_COUNT:
		break;
	}
	pg_op_free(op);
}
