/*
 * pg_send.c - what the PostgreSQL strategy sends (strategies/pg_int.h):
 * an operation's statements queued in a connection's pipeline, with their
 * binary parameters and their Syncs (one transaction each: a push chunk,
 * an admission, a whole other operation). The results come back through
 * pg_result.c; which connection sends what is pg_queue.c's.
 *
 * Sending. Each returns 1 (statements queued in the pipeline), 0 (nothing
 * to send: the operation is complete), -1 (libpq refused: the connection
 * is unusable) or -2 (out of memory before anything was queued).
 */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "strategies/pg_int.h"

/* Sends one prepared statement with s->par[0..n) as binary parameters,
 * binary results. */
static int pg_send_prepared(struct pg_conn *c, enum pg_stmt st)
{
	struct pg *s = c->s;
	const char *values[PG_PARAMS_MAX];
	int lengths[PG_PARAMS_MAX], formats[PG_PARAMS_MAX];
	int n = pg_stmts[st].nparams;

	for (int i = 0; i < n; i++) {
		if (s->par[i].oom || s->par[i].len > INT32_MAX)
			return -2;
		values[i] = s->par[i].p;
		lengths[i] = (int)s->par[i].len;
		formats[i] = 1;
	}
	if (!PQsendQueryPrepared(c->conn, pg_stmts[st].name, n, values, lengths, formats, 1))
		return -1;
	return 1;
}

/*
 * The token of one upsert chunk: the push's token, ':', then 16 hex digits
 * hashing the chunk's row count and its first and last counters.
 *
 * Why it is stable: the caller resends exactly the counters that came
 * back with ok false, in order, with their diffs. A chunk's counters are
 * all ok or all not (its transaction committed or not), and so are the
 * members of a merged group (one row), so a resend holds whole chunks.
 * Sorted and merged again, the same groups come out in the same order,
 * and the upsert list is cut again from the start of each of them: where
 * a cut falls depends only on the rows from the chunk's start (row count
 * and bytes), so every resent chunk is cut exactly as before (the last
 * chunk of the list ended at the list's end, and still does). Chunks of
 * one push hold disjoint key ranges, so their tokens differ.
 */
static void pg_chunk_token(struct pg *s, const struct pg_op *op, const struct pg_chunk *ch)
{
	static const char hex[] = "0123456789abcdef";
	uint64_t h = 14695981039346656037u;
	char suffix[17];

	pg_hash_u64(&h, ch->hi - ch->lo);
	pg_hash_counter(&h, op->groups[op->up[ch->lo]].c);
	pg_hash_counter(&h, op->groups[op->up[ch->hi - 1]].c);
	suffix[0] = ':';
	for (int i = 0; i < 16; i++)
		suffix[1 + i] = hex[(h >> (60 - 4 * i)) & 15];
	s->tokpar.len = 0;
	s->tokpar.oom = false;
	pg_buf_put(&s->tokpar, op->token, op->token_len);
	pg_buf_put(&s->tokpar, suffix, sizeof(suffix));
}

/* Sends one chunk of a push, and a Sync: its own transaction. With a
 * token, the token statement comes first in that transaction. */
int pg_send_chunk(struct pg_conn *c, struct pg_op *op, const struct pg_chunk *ch)
{
	struct pg *s = c->s;
	const size_t *idx = ch->upsert ? op->up : op->rd;
	size_t n = ch->hi - ch->lo;
	int r;

	pg_array_begin(&s->par[0], PG_OID_TEXT, n);
	pg_array_begin(&s->par[1], PG_OID_BYTEA, n);
	pg_array_begin(&s->par[2], PG_OID_INT8, n);
	pg_array_begin(&s->par[3], PG_OID_INT4, n);
	if (ch->upsert) {
		pg_array_begin(&s->par[4], PG_OID_FLOAT8, n);
		pg_array_begin(&s->par[5], PG_OID_FLOAT8, n);
	}
	for (size_t i = ch->lo; i < ch->hi; i++) {
		const struct pg_group *g = &op->groups[idx[i]];

		pg_array_bytes(&s->par[0], g->c->ns, g->c->ns_len);
		pg_array_bytes(&s->par[1], g->c->key, g->c->key_len);
		pg_array_i64(&s->par[2], g->c->start);
		pg_array_i32(&s->par[3], (int32_t)g->c->size);
		if (ch->upsert) {
			pg_array_f64(&s->par[4], g->diff + g->spent);
			pg_array_f64(&s->par[5], -(g->spent + g->returned));
		}
	}
	if (ch->tok) {
		const char *v[1];
		int len[1], fmt[1] = { 1 };

		pg_chunk_token(s, op, ch);
		for (int i = 0; i < 6; i++)
			if (s->par[i].oom || s->par[i].len > INT32_MAX)
				return -2; /* before anything is queued */
		if (s->tokpar.oom)
			return -2;
		v[0] = s->tokpar.p;
		len[0] = (int)s->tokpar.len;
		if (!PQsendQueryPrepared(c->conn, pg_stmts[PG_STMT_TOKEN].name, 1, v, len, fmt, 1))
			return -1;
		r = pg_send_prepared(c, PG_STMT_UPSERT_TOK);
		if (r == -2) /* cannot happen: checked above */
			r = -1;
	} else {
		r = pg_send_prepared(c, ch->upsert ? PG_STMT_UPSERT : PG_STMT_READ);
	}
	if (r > 0 && !PQpipelineSync(c->conn))
		return -1;
	return r;
}

/* FETCH and PURGE: namespace, sizes, starts. */
static int pg_send_windows(struct pg_conn *c, struct pg_op *op, enum pg_stmt st)
{
	struct pg *s = c->s;
	int r;

	s->par[0].len = 0;
	s->par[0].oom = false;
	pg_buf_put(&s->par[0], op->ns, op->ns_len);
	pg_array_begin(&s->par[1], PG_OID_INT4, op->nw);
	pg_array_begin(&s->par[2], PG_OID_INT8, op->nw);
	for (size_t i = 0; i < op->nw; i++) {
		pg_array_i32(&s->par[1], op->sizes[i]);
		pg_array_i64(&s->par[2], op->starts[i]);
	}
	r = pg_send_prepared(c, st);
	if (r == -2) {
		pg_op_fail(op, NULL, "out of memory");
		return 0;
	}
	if (r > 0)
		op->nstmts++;
	return r;
}

/* Deletes the tokens older than STRATEGY_TOKEN_TTL (every node's: they
 * all keep them that long). */
static int pg_send_purge_tokens(struct pg_conn *c, struct pg_op *op)
{
	if (pg_send_prepared(c, PG_STMT_PURGE_TOK) < 0)
		return -1;
	op->nstmts++;
	return 1;
}

/* The periodic purge: the tokens, then one statement per namespace seen. */
static int pg_send_maint(struct pg_conn *c, struct pg_op *op)
{
	struct pg *s = c->s;
	int64_t now = (int64_t)time(NULL);

	if (pg_send_purge_tokens(c, op) < 0) /* first: see pg_prepare_order */
		return -1;
	for (size_t i = 0; i < s->nseen; i++) {
		const struct pg_seen *sn = &s->seen[i];
		int r;

		s->par[0].len = 0;
		s->par[0].oom = false;
		pg_buf_put(&s->par[0], sn->ns, sn->ns_len);
		pg_array_begin(&s->par[1], PG_OID_INT4, sn->nsizes);
		pg_array_begin(&s->par[2], PG_OID_INT8, sn->nsizes);
		for (size_t k = 0; k < sn->nsizes; k++) {
			pg_array_i32(&s->par[1], (int32_t)sn->sizes[k]);
			pg_array_i64(&s->par[2], now - 2 * (int64_t)sn->sizes[k]);
		}
		r = pg_send_prepared(c, PG_STMT_PURGE);
		if (r == -2)
			break;
		if (r < 0)
			return -1;
		op->nstmts++;
	}
	return 1;
}

/* Set-up, step 1: do the tables exist? (Creating needs the CREATE right
 * on the schema even when the table exists; a table made by an
 * administrator must work for a user without it.) */
static int pg_send_probe(struct pg_conn *c, struct pg_op *op)
{
	const char *v[2] = { c->s->table_quoted, c->s->tokens_quoted };

	if (!PQsendQueryParams(c->conn, pg_sql_probe, 2, NULL, v, NULL, NULL, 1))
		return -1;
	op->nstmts++;
	return 1;
}

/*
 * Lock order. Every transaction that locks both tables locks the tokens
 * table first: a token chunk (insert the token, then upsert), purges
 * (tokens, then windows) and the set-up (creating: CREATE INDEX IF NOT
 * EXISTS takes a SHARE lock on its table even when the index exists;
 * preparing: an INSERT or DELETE is analysed under ROW EXCLUSIVE). In any
 * other order a connection still setting up and a push or purge on
 * another one can deadlock (until deadlock_timeout, past our timeout).
 */
static const enum pg_stmt pg_prepare_order[] = {
	PG_STMT_TOKEN, PG_STMT_PURGE_TOK, PG_STMT_UPSERT,    PG_STMT_READ,
	PG_STMT_FETCH, PG_STMT_PURGE,     PG_STMT_UPSERT_TOK,
	PG_STMT_ADMIT_ROW, PG_STMT_ADMIT, PG_STMT_ADMIT_TOK, PG_STMT_GCRA,
	PG_STMT_GCRA_TOK, PG_STMT_LEASE_ROW, PG_STMT_LEASE, PG_STMT_NODES,
	PG_STMT_FORGET, PG_STMT_LIMIT_SET, PG_STMT_LIMITS_READ,
};

/* Set-up, step 2: create the tables and indexes if missing, prepare every
 * statement. */
static int pg_send_create(struct pg_conn *c, struct pg_op *op)
{
	struct pg *s = c->s;

	if (!c->table_present) {
		const char *v[1] = { s->table_name };

		if (!PQsendQueryParams(c->conn, pg_sql_lock, 1, NULL, v, NULL, NULL, 0) ||
		    !PQsendQueryParams(c->conn, s->sql_tokens, 0, NULL, NULL, NULL, NULL, 0) ||
		    !PQsendQueryParams(c->conn, s->sql_tokens_index, 0, NULL, NULL, NULL, NULL,
				       0) ||
		    !PQsendQueryParams(c->conn, s->sql_table, 0, NULL, NULL, NULL, NULL, 0) ||
		    !PQsendQueryParams(c->conn, s->sql_reserved, 0, NULL, NULL, NULL, NULL, 0) ||
		    !PQsendQueryParams(c->conn, s->sql_reset, 0, NULL, NULL, NULL, NULL, 0) ||
		    !PQsendQueryParams(c->conn, s->sql_index, 0, NULL, NULL, NULL, NULL, 0))
			return -1;
		op->nstmts += 7;
	}
	for (size_t i = 0; i < sizeof(pg_prepare_order) / sizeof(pg_prepare_order[0]); i++) {
		enum pg_stmt k = pg_prepare_order[i];

		if (!PQsendPrepare(c->conn, pg_stmts[k].name, s->sql[k], pg_stmts[k].nparams,
				   pg_stmts[k].types))
			return -1;
		op->nstmts++;
	}
	return 1;
}

/* Sends a whole operation (not a push) and its Sync: one transaction. */
static int pg_send_nodes(struct pg_conn *c, struct pg_op *op)
{
	struct pg *s = c->s;

	for (int i = 0; i < 4; i++) {
		s->par[i].len = 0;
		s->par[i].oom = false;
	}
	/* "\x01nodes:<ns>\x01": from, this node, and the end of the range. */
	pg_buf_put(&s->par[0], "\1nodes:", 7);
	pg_buf_put(&s->par[0], op->ns, op->ns_len);
	pg_buf_put(&s->par[0], "\1", 1);
	pg_buf_put(&s->par[1], s->par[0].p, s->par[0].len);
	pg_buf_put(&s->par[1], op->node, op->node_len);
	pg_buf_put(&s->par[2], s->par[0].p, s->par[0].len - 1);
	pg_buf_put(&s->par[2], "\2", 1);
	pg_buf_f64(&s->par[3], op->ttl);
	if (pg_send_prepared(c, PG_STMT_NODES) < 0)
		return -1;
	op->nstmts++;
	return 1;
}

/* forget: the token (rl_token), then rl_forget, in one transaction (the
 * Sync pg_op_send adds). */
static int pg_send_forget(struct pg_conn *c, struct pg_op *op)
{
	struct pg *s = c->s;

	for (int i = 0; i < 5; i++) {
		s->par[i].len = 0;
		s->par[i].oom = false;
	}
	pg_buf_put(&s->par[0], op->token, op->token_len);
	if (pg_send_prepared(c, PG_STMT_TOKEN) < 0)
		return -1;
	op->nstmts++;
	s->par[0].len = 0;
	pg_buf_put(&s->par[0], op->ns, op->ns_len);
	pg_buf_put(&s->par[1], op->key, op->key_len);
	pg_array_begin(&s->par[2], PG_OID_INT4, op->nw);
	pg_array_begin(&s->par[3], PG_OID_INT8, op->nw);
	for (size_t i = 0; i < op->nw; i++) {
		pg_array_i32(&s->par[2], op->sizes[i]);
		pg_array_i64(&s->par[3], op->starts[i]);
	}
	pg_buf_put(&s->par[4], op->token, op->token_len);
	if (pg_send_prepared(c, PG_STMT_FORGET) < 0)
		return -1;  /* out of memory too: the token is queued already */
	op->nstmts++;
	return 1;
}

/* limit_set and limits_read: one statement each (pg_sql.c). */
static int pg_send_limits(struct pg_conn *c, struct pg_op *op)
{
	struct pg *s = c->s;
	bool set = op->kind == PG_OP_LIMIT_SET;

	for (int i = 0; i < 5; i++) {
		s->par[i].len = 0;
		s->par[i].oom = false;
	}
	pg_buf_put(&s->par[0], op->ns, op->ns_len);
	if (set) {
		pg_buf_put(&s->par[1], op->key, op->key_len);
		pg_buf_u32(&s->par[2], op->lim_size);
		pg_buf_f64(&s->par[3], op->lim);
		pg_buf_u64(&s->par[4], op->most);
	} else {
		pg_buf_f64(&s->par[1], (double)op->have);
	}
	if (pg_send_prepared(c, set ? PG_STMT_LIMIT_SET : PG_STMT_LIMITS_READ) < 0)
		return -1;
	op->nstmts++;
	return 1;
}

/* The parameters of admission a, for rl_admit_row (4) and rl_admit (11),
 * or rl_gcra (a TAT's row at window_start -1, $8 the burst), or rl_lease
 * (the key's row at window_start -1, $5 the lease's life, $12 its id). */
static void pg_admit_params(struct pg *s, const struct strategy_admit *a)
{
	bool tat = a->step != STRATEGY_STEP_WINDOW;

	for (int i = 0; i < 11; i++) {
		s->par[i].len = 0;
		s->par[i].oom = false;
	}
	pg_buf_put(&s->par[0], a->ns, a->ns_len);
	pg_buf_put(&s->par[1], a->key, a->key_len);
	pg_buf_u64(&s->par[2], tat ? UINT64_MAX : (uint64_t)a->start);
	pg_buf_u32(&s->par[3], a->size);
	pg_buf_f64(&s->par[4], a->step == STRATEGY_STEP_LEASE ? a->lease_s : a->diff);
	pg_buf_f64(&s->par[5], a->cost);
	pg_buf_f64(&s->par[6], a->limit);
	pg_buf_f64(&s->par[7], tat ? a->burst : a->weight);
	pg_buf_put(&s->par[8], a->count_denied ? "\1" : "\0", 1);
	pg_buf_f64(&s->par[9], a->want);
	pg_buf_u32(&s->par[10], a->nodes > INT32_MAX ? INT32_MAX : a->nodes);
}

/* Each admission in its own transaction (its row is locked until its
 * Sync: one row per transaction, so two nodes' batches cannot deadlock):
 * with a token, rl_token with the admission's token first. */
static int pg_send_admits(struct pg_conn *c, struct pg_op *op)
{
	struct pg *s = c->s;
	char tok[STRATEGY_TOKEN_MAX + 1 + 16];

	if (op->n == 0)
		return 0;
	for (size_t i = 0; i < op->n; i++) {
		size_t tl = 0;

		if (op->has_token) {
			/* The admission's token: the call's, ':', 16 hex digits. */
			static const char hex[] = "0123456789abcdef";

			memcpy(tok, op->token, op->token_len);
			tok[op->token_len] = ':';
			for (int k = 0; k < 16; k++)
				tok[op->token_len + 1 + k] = hex[(op->adm_ids[i] >> (60 - 4 * k)) & 15];
			tl = op->token_len + 17;
			s->par[0].len = 0;
			s->par[0].oom = false;
			pg_buf_put(&s->par[0], tok, tl);
			if (pg_send_prepared(c, PG_STMT_TOKEN) < 0)
				return -1;
			op->nstmts++;
		}
		const struct strategy_admit *a = &op->admits[i];
		/* A lease step locks the key's row (its leases are other rows,
		 * read by the next statement's own snapshot) and needs no token:
		 * its id makes it exactly once. */
		bool lease = a->step == STRATEGY_STEP_LEASE;
		pg_admit_params(s, a);
		if (pg_send_prepared(c, lease ? PG_STMT_LEASE_ROW : PG_STMT_ADMIT_ROW) < 0)
			return -1;
		op->nstmts++;
		if (op->has_token || lease) {
			s->par[11].len = 0;
			s->par[11].oom = false;
			pg_buf_put(&s->par[11], lease ? a->lease : tok, lease ? a->lease_len : tl);
		}
		bool tat = a->step == STRATEGY_STEP_TAT;
		if (pg_send_prepared(c, lease ? PG_STMT_LEASE
				     : op->has_token ? (tat ? PG_STMT_GCRA_TOK : PG_STMT_ADMIT_TOK)
						     : (tat ? PG_STMT_GCRA : PG_STMT_ADMIT)) < 0)
			return -1;
		op->nstmts++;
		if (!PQpipelineSync(c->conn))
			return -1;
		op->nsyncs++;
	}
	return 1;
}

int pg_op_send(struct pg_conn *c, struct pg_op *op)
{
	int r = -1;

	switch (op->kind) {
	case PG_OP_FETCH:
		r = pg_send_windows(c, op, PG_STMT_FETCH);
		break;
	case PG_OP_PURGE:
		/* Tokens first (see pg_prepare_order). Windows not sent
		 * (out of memory, op failed): the Sync still ends it. */
		r = pg_send_purge_tokens(c, op);
		if (r > 0 && pg_send_windows(c, op, PG_STMT_PURGE) < 0)
			r = -1;
		break;
	case PG_OP_MAINT:
		r = pg_send_maint(c, op);
		break;
	case PG_OP_PROBE:
		r = pg_send_probe(c, op);
		break;
	case PG_OP_CREATE:
		r = pg_send_create(c, op);
		break;
	case PG_OP_ADMIT:
		return pg_send_admits(c, op);   /* a Sync after each */
	case PG_OP_NODES:
		r = pg_send_nodes(c, op);
		break;
	case PG_OP_FORGET:
		r = pg_send_forget(c, op);
		break;
	case PG_OP_LIMIT_SET:
	case PG_OP_LIMITS_READ:
		r = pg_send_limits(c, op);
		break;
	case PG_OP_PUSH:
	case PG_OP_GET:
	case PG_OP_COUNT:
		break;
	}
	if (r > 0) {
		if (!PQpipelineSync(c->conn))
			return -1;
		op->nsyncs = 1;
	}
	return r;
}

/* Flushes what libpq holds; watches for writability while some is left.
 * Returns 0 or -1 (connection broken). */
int pg_flush(struct pg_conn *c)
{
	int r = PQflush(c->conn);

	if (r < 0)
		return -1;
	pg_ev_want(&c->ev, true, r == 1);
	return 0;
}
