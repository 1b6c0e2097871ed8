/*
 * pg_result.c - what comes back to the PostgreSQL strategy
 * (strategies/pg_int.h): each result checked for its shape and read
 * into its operation (a push chunk's rows matched back to the batch, a
 * fetch's rows kept for the callback, an admission's decision), failures
 * recorded. pg_pool.c reads the results off a connection and hands them
 * here.
 */
#include <limits.h>
#include <string.h>

#include "strategies/pg_int.h"

/* Finds the group of a returned row among idx[lo..hi) (sorted): first at
 * position lo + row (rows come back in order in practice), else by binary
 * search. Returns the group or NULL. */
static struct pg_group *pg_match(struct pg_op *op, const struct pg_chunk *ch, size_t row,
				 const char *ns, size_t ns_len, const char *key, size_t key_len,
				 int64_t start, uint32_t size)
{
	const size_t *idx = ch->upsert ? op->up : op->rd;
	size_t lo = ch->lo, hi = ch->hi;

	if (lo + row < hi) {
		struct pg_group *g = &op->groups[idx[lo + row]];

		if (!pg_cmp_ident(ns, ns_len, size, start, key, key_len, g->c))
			return g;
	}
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		struct pg_group *g = &op->groups[idx[mid]];
		int c = pg_cmp_ident(ns, ns_len, size, start, key, key_len, g->c);

		if (!c)
			return g;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

/* Rows of an upsert or read chunk: namespace, key, start, size, count,
 * reset. Returns 0 or -1 (op failed). */
static int pg_on_push_result(struct pg_op *op, const PGresult *r, const struct pg_chunk *ch)
{
	static const Oid cols[6] = { PG_OID_TEXT, PG_OID_BYTEA, PG_OID_INT8, PG_OID_INT4,
				     PG_OID_FLOAT8, PG_OID_BOOL };
	int nrows = PQntuples(r);

	if (pg_check_cols(r, cols, 6) < 0 || nrows < 0 || (size_t)nrows > ch->hi - ch->lo) {
		pg_op_fail(op, NULL, "unexpected result shape");
		return -1;
	}
	for (int i = 0; i < nrows; i++) {
		int ns_len = 0, key_len = 0;
		const char *ns = pg_value(r, i, 0, -1, &ns_len);
		const char *key = pg_value(r, i, 1, -1, &key_len);
		const char *start = pg_value(r, i, 2, 8, NULL);
		const char *size = pg_value(r, i, 3, 4, NULL);
		const char *count = pg_value(r, i, 4, 8, NULL);
		const char *reset = pg_value(r, i, 5, 1, NULL);
		struct pg_group *g;

		if (!ns || !key || !start || !size || !count || !reset) {
			pg_op_fail(op, NULL, "unexpected result shape");
			return -1;
		}
		g = pg_match(op, ch, (size_t)i, ns, (size_t)ns_len, key, (size_t)key_len,
			     (int64_t)pg_get_u64(start), pg_get_u32(size));
		if (!g || g->got) {
			pg_op_fail(op, NULL, "unexpected row in result");
			return -1;
		}
		g->total = pg_get_f64(count);
		g->reset = *reset != 0;
		g->got = true;
	}
	return 0;
}

/* Rows of a fetch: key, start, size, count. Keeps the result. */
static void pg_on_fetch_result(struct pg_op *op, PGresult *r)
{
	static const Oid cols[4] = { PG_OID_BYTEA, PG_OID_INT8, PG_OID_INT4, PG_OID_FLOAT8 };
	int nrows = PQntuples(r);

	if (op->res || pg_check_cols(r, cols, 4) < 0 || nrows < 0) {
		pg_op_fail(op, NULL, "unexpected result shape");
		PQclear(r);
		return;
	}
	op->res = r;
	op->rows = calloc(nrows ? (size_t)nrows : 1, sizeof(*op->rows));
	if (!op->rows) {
		pg_op_fail(op, NULL, "out of memory");
		return;
	}
	for (int i = 0; i < nrows; i++) {
		int key_len = 0;
		const char *key = pg_value(r, i, 0, -1, &key_len);
		const char *start = pg_value(r, i, 1, 8, NULL);
		const char *size = pg_value(r, i, 2, 4, NULL);
		const char *count = pg_value(r, i, 3, 8, NULL);

		if (!key || !start || !size || !count) {
			pg_op_fail(op, NULL, "unexpected result shape");
			return;
		}
		op->rows[i] = (struct strategy_row){
			.key = key,
			.key_len = (size_t)key_len,
			.start = (int64_t)pg_get_u64(start),
			.size = pg_get_u32(size),
			.count = pg_get_f64(count),
		};
	}
	op->nrows = (size_t)nrows;
}

/* limits_read's rows (as rl_fetch's): the version's row (size 0) taken
 * out, into *op->version; changed when it is not the node's. */
static void pg_on_limits_rows(struct pg_op *op)
{
	size_t k = 0;

	*op->version = 0;
	if (op->failed)
		return;
	for (size_t i = 0; i < op->nrows; i++) {
		if (op->rows[i].size == 0) {
			double v = op->rows[i].count;
			*op->version = v > 0 && v < 1e18 ? (uint64_t)v : 0;
			continue;
		}
		op->rows[k++] = op->rows[i];
	}
	op->nrows = k;
	*op->changed = *op->version != op->have;
	if (!*op->changed)
		op->nrows = 0;
}

/* An error result's message, or why a status is unexpected, into op. */
static void pg_op_fail_result(struct pg_conn *c, struct pg_op *op, const PGresult *r)
{
	ExecStatusType st = PQresultStatus(r);
	char msg[STRATEGY_ERR_MAX];

	if (st == PGRES_PIPELINE_ABORTED) {
		pg_op_fail(op, NULL, "pipeline aborted");
	} else if (st == PGRES_FATAL_ERROR || st == PGRES_NONFATAL_ERROR) {
		pg_err_result(msg, r, c->conn);
		pg_op_fail(op, NULL, msg);
	} else {
		pg_op_fail(op, "unexpected result: ", PQresStatus(st));
	}
}

/* Result i of an admission op: the admissions are independent
 * transactions, so one that fails (its statements then come back
 * "aborted") fails the op but not the others. Only rl_admit's row says
 * anything: (count, previous, admitted, grant). Takes r. */
static void pg_on_admit_result(struct pg_conn *c, struct pg_op *op, PGresult *r, size_t i)
{
	static const Oid cols[4] = { PG_OID_FLOAT8, PG_OID_FLOAT8, PG_OID_BOOL, PG_OID_FLOAT8 };
	ExecStatusType st = PQresultStatus(r);
	size_t per = pg_admit_stmts(op);
	struct strategy_admit *a = &op->admits[i / per];
	const char *cur, *prev, *adm, *grant;

	if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
		pg_op_fail_result(c, op, r);
	} else if (i % per == per - 1) {
		if (st != PGRES_TUPLES_OK || pg_check_cols(r, cols, 4) < 0 || PQntuples(r) != 1 ||
		    !(cur = pg_value(r, 0, 0, 8, NULL)) || !(prev = pg_value(r, 0, 1, 8, NULL)) ||
		    !(adm = pg_value(r, 0, 2, 1, NULL)) || !(grant = pg_value(r, 0, 3, 8, NULL)) ||
		    !(pg_get_f64(grant) >= 0)) {
			pg_op_fail(op, NULL, "unexpected result shape");
		} else {
			a->current = pg_get_f64(cur);
			a->previous = pg_get_f64(prev);
			a->admitted = *adm != 0;
			a->grant = pg_get_f64(grant);
			a->ok = true;
		}
	}
	PQclear(r);
}

/* One statement's result for a whole operation (set-up included). Takes r. */
void pg_on_result(struct pg_conn *c, struct pg_op *op, PGresult *r)
{
	ExecStatusType st = PQresultStatus(r);
	size_t i = op->nres++;

	if (i >= op->nstmts) {
		pg_op_fail(op, NULL, "unexpected result");
		PQclear(r);
		return;
	}
	if (op->kind == PG_OP_ADMIT) {
		pg_on_admit_result(c, op, r, i);
		return;
	}
	if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
		pg_op_fail_result(c, op, r);
		PQclear(r);
		return;
	}
	if (op->failed) {
		PQclear(r);
		return;
	}
	switch (op->kind) {
	case PG_OP_FETCH:
		if (st != PGRES_TUPLES_OK) {
			pg_op_fail(op, NULL, "unexpected result shape");
			break;
		}
		pg_on_fetch_result(op, r);
		return; /* r kept (or freed) there */
	case PG_OP_PROBE: {
		static const Oid cols[1] = { PG_OID_BOOL };
		const char *v;

		if (pg_check_cols(r, cols, 1) < 0 || PQntuples(r) != 1 ||
		    !(v = pg_value(r, 0, 0, 1, NULL)))
			pg_op_fail(op, NULL, "unexpected result shape");
		else
			c->table_present = *v != 0;
		break;
	}
	case PG_OP_NODES: {
		static const Oid cols[1] = { PG_OID_INT8 };
		const char *v;

		if (pg_check_cols(r, cols, 1) < 0 || PQntuples(r) != 1 ||
		    !(v = pg_value(r, 0, 0, 8, NULL)))
			pg_op_fail(op, NULL, "unexpected result shape");
		else
			*op->active = (unsigned)(pg_get_u64(v) > UINT_MAX ? UINT_MAX
									 : pg_get_u64(v));
		break;
	}
	case PG_OP_FORGET: {
		/* [0] the token's statement; [1] the hits removed */
		static const Oid cols[1] = { PG_OID_FLOAT8 };
		const char *v;

		if (i == 0)
			break;
		if (st != PGRES_TUPLES_OK || pg_check_cols(r, cols, 1) < 0 || PQntuples(r) != 1 ||
		    !(v = pg_value(r, 0, 0, 8, NULL)))
			pg_op_fail(op, NULL, "unexpected result shape");
		else
			*op->removed = pg_get_f64(v);
		break;
	}
	case PG_OP_LIMIT_SET: {
		/* the new version, or no row: full */
		static const Oid cols[1] = { PG_OID_FLOAT8 };

		if (st != PGRES_TUPLES_OK || pg_check_cols(r, cols, 1) < 0 || PQntuples(r) > 1 ||
		    (PQntuples(r) == 1 && !pg_value(r, 0, 0, 8, NULL)))
			pg_op_fail(op, NULL, "unexpected result shape");
		else
			*op->full = PQntuples(r) == 0;
		break;
	}
	case PG_OP_LIMITS_READ:
		if (st != PGRES_TUPLES_OK) {
			pg_op_fail(op, NULL, "unexpected result shape");
			break;
		}
		pg_on_fetch_result(op, r);
		pg_on_limits_rows(op);
		return; /* r kept (or freed) there */
	case PG_OP_PUSH:
	case PG_OP_GET:
	case PG_OP_PURGE:
	case PG_OP_MAINT:
	case PG_OP_CREATE:
	case PG_OP_ADMIT:
	case PG_OP_COUNT:
		break;
	}
	PQclear(r);
}

/* A result on a connection working for a push: for its oldest chunk in
 * flight. At the chunk's Sync, its transaction is over: if nothing failed,
 * it committed and its counters are final. Takes r. Returns 0, or -1 when
 * no chunk is in flight (the connection cannot be trusted). */
int pg_on_chunk_result(struct pg_conn *c, PGresult *r)
{
	struct pg_op *op = c->op;
	ExecStatusType st = PQresultStatus(r);
	struct pg_chunk *ch;

	if (c->nfifo == 0) {
		PQclear(r);
		return -1;
	}
	ch = &op->chunks[c->fifo[0]];
	if (st != PGRES_PIPELINE_SYNC && ch->tok && !ch->got_flag) {
		/* The token statement: 'y' (new: the diffs are added) or 'n'
		 * (applied before: 0 is added, the totals come back). */
		static const Oid cols[1] = { PG_OID_TEXT };
		const char *v = NULL;

		ch->got_flag = true;
		if (!ch->failed && st != PGRES_TUPLES_OK) {
			pg_op_fail_result(c, op, r);
			ch->failed = true;
		} else if (!ch->failed) {
			if (pg_check_cols(r, cols, 1) == 0 && PQntuples(r) == 1)
				v = pg_value(r, 0, 0, 1, NULL);
			if (!v || (*v != 'y' && *v != 'n')) {
				pg_op_fail(op, NULL, "unexpected result shape");
				ch->failed = true;
			}
		}
		PQclear(r);
		return 0;
	}
	if (st != PGRES_PIPELINE_SYNC) {
		if (st == PGRES_TUPLES_OK && !ch->got_result && !ch->failed) {
			if (pg_on_push_result(op, r, ch) < 0)
				ch->failed = true;
		} else if (!ch->failed) {
			/* An error (a failed commit comes after the rows), or
			 * a second result. */
			if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
				pg_op_fail(op, NULL, "unexpected result");
			else
				pg_op_fail_result(c, op, r);
			ch->failed = true;
		}
		ch->got_result = true;
		PQclear(r);
		return 0;
	}
	PQclear(r);
	memmove(c->fifo, c->fifo + 1, (c->nfifo - 1) * sizeof(c->fifo[0]));
	if (--c->nfifo == 0)
		c->op = NULL;
	if (!ch->failed && (!ch->got_result || (ch->tok && !ch->got_flag))) {
		pg_op_fail(op, NULL, "unexpected result count");
		ch->failed = true;
	}
	if (!ch->failed && ch->upsert) {
		for (size_t i = ch->lo; i < ch->hi; i++)
			if (!op->groups[op->up[i]].got) {
				/* Written, but without its total it cannot be
				 * reported as done. */
				pg_op_fail(op, NULL, "upsert returned no row for a counter");
				ch->failed = true;
				break;
			}
	}
	if (!ch->failed) {
		const size_t *idx = ch->upsert ? op->up : op->rd;

		for (size_t i = ch->lo; i < ch->hi; i++)
			op->groups[idx[i]].committed = true;
	}
	ch->done = true;
	op->chunks_done++;
	return 0;
}
