/*
 * postgres.c - the PostgreSQL strategy (struct strategy_ops postgres_strategy,
 * contract in strategies/strategy.h): counters live in one table, one row
 * per (namespace, key, window size, window start) (pg_sql.c draws it).
 * This file: the ops table, create / destroy, and the operations, checked
 * and planned before they join the queue (pg_queue.c). The files of the
 * strategy, and which way calls go between them: strategies/pg_int.h.
 *
 * Design of the operations
 *   - Every chunk is sent with its own Sync: it is its own transaction, so
 *     row locks are held for one chunk (tens of ms), not for the whole push
 *     (a big push from one node would otherwise make every other node's
 *     push of the same keys wait past its timeout). The price: a push that
 *     fails part way has applied the chunks that committed. Their counters,
 *     and only theirs, come back with ok = true and a valid total (status
 *     is still -1); every other counter has ok = false (after a timeout or
 *     a lost connection, a chunk in flight may or may not have been
 *     applied; it is never resent: the caller may resend it with the
 *     push's token, below). Every counter's own update is atomic.
 *   - push_diffs sorts the batch by (namespace, size, start, key) and
 *     merges duplicates: the upsert then never touches a row twice in one
 *     statement, chunks hold disjoint key ranges, and every transaction
 *     locks rows in the same order (no deadlocks, between nodes or between
 *     the connections of one). Non-zero diffs go through upserts, zero
 *     diffs through SELECTs (no row is created). Returned rows carry the
 *     counter's identity and are matched back to the batch (in practice in
 *     order; by binary search otherwise).
 *   - Tokens (push_diffs with a token; NULL: none of this). Each upsert
 *     chunk gets its own token, the push's token + ":" + a hash of the
 *     chunk's row count and first and last counters, stable when the
 *     caller resends the counters that were not confirmed (see
 *     pg_chunk_token()). Its transaction is two pipelined statements: the
 *     first inserts the chunk token ON CONFLICT DO NOTHING and records in
 *     a transaction-local setting whether it was new; the second is the
 *     upsert, adding the diffs if so and 0 if not (a chunk applied by an
 *     earlier try: its rows come back ok with their latest totals, nothing
 *     is added). The token commits or rolls back with the rows. A try
 *     still running on the server holds the token's row: the insert waits
 *     for it to end, and only then are the rows touched (the token first,
 *     in its own statement: the order of a statement's CTEs is not
 *     defined). Tokens older than STRATEGY_TOKEN_TTL (server clock) are
 *     deleted by purge() and by the periodic purge. Cost per 2000-row
 *     chunk: one tiny insert (and its two index entries) and one more
 *     result.
 *   - admit(): each admission is its own transaction, pipelined behind the
 *     others: insert the row if missing (count 0), then one statement
 *     locks it (SELECT ... FOR UPDATE in a CTE), reads the previous window,
 *     decides, adds the hit and the grant, returning (count, previous,
 *     admitted, grant). One row per transaction: two nodes' batches cannot
 *     deadlock. With a token, rl_token runs first with the admission's own
 *     token (the call's, ':', a hash of the admission and of the identical
 *     ones after it); an admitted decision is recorded as that token +
 *     ":a" + the grant as text, so a resend returns both without adding
 *     anything.
 *   - forget(): one transaction, rl_token with the call's token, then
 *     rl_forget: every window's row of the key (made if missing) to count
 *     0, reserved 0 and reset true, the hits it held recorded with the
 *     token ("<token>:f<hits>"), so a resend changes nothing and gets the
 *     same number (pg_sql.c).
 *   - heartbeat(): a row per node in the tokens table (see rl_nodes),
 *     refreshed once per sync cycle and dropped with the old tokens; the
 *     counters table holds counters only.
 *   - Purge: purge() deletes what the caller names, and old tokens. Also, every
 *     purge_interval_s (0 = never) the instance purges, for each namespace
 *     and window size it has seen in its own operations, windows older
 *     than twice the size.
 *
 * Refused at once (-1 and errstr, no callback): a key over PG_KEY_MAX
 * bytes (btree entries are limited to ~2.7 kB; one such key would fail its
 * whole chunk on every sync), a namespace over PG_NS_MAX bytes or holding
 * a NUL (it is text), a window size of 0 or over INT32_MAX, a diff that is
 * not finite, an empty token or one over STRATEGY_TOKEN_MAX bytes, a full
 * queue, an instance that is down. Callbacks get errstr
 * NULL on success. Rows passed to a rows callback point into libpq's result
 * and are valid only during the callback.
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strategies/container.h"
#include "strategies/pg_int.h"
#include "strategies/window_start.h"

#define PG_BACKOFF_MIN       0.05     /* s */
#define PG_BACKOFF_MAX       2.0      /* s */
#ifndef PG_CHUNK_ROWS                 /* rows per upsert / read statement */
#define PG_CHUNK_ROWS        2000     /* (1000 and 5000: no better here) */
#endif
#define PG_CHUNK_BYTES       (8u << 20) /* parameter bytes per statement */
#define PG_NS_MAX            256      /* namespace bytes */
#define PG_KEY_MAX           2048     /* key bytes: btree entries stay < 2704 */
#define PG_TIME_MAX          ((int64_t)1 << 62) /* |now|: window arithmetic stays in range */

/* ------------------------------------------------------------------------
 * Creation and destruction.
 */
static void pg_free(struct pg *s)
{
	for (int i = 0; i < PG_STMT_COUNT; i++)
		free(s->sql[i]);
	free(s->sql_table);
	free(s->sql_reserved);
	free(s->sql_reset);
	free(s->sql_index);
	free(s->sql_tokens);
	free(s->sql_tokens_index);
	for (size_t i = 0; i < PG_PARAMS_MAX; i++)
		free(s->par[i].p);
	free(s->tokpar.p);
	for (size_t i = 0; i < s->nseen; i++)
		free(s->seen[i].ns);
	free(s->conninfo);
	free(s);
}

static void pg_core_free(struct store_core *c)
{
	pg_free(container_of(c, struct pg, core));
}

static int pg_check_opts(const char *opts_json, char *err, size_t errlen)
{
	struct pg_opts o;
	json_t *root;
	int rc = pg_opts_load(opts_json, &o, &root, err, errlen);

	json_decref(root);
	return rc;
}

static struct strategy *pg_create(struct ev_loop *loop, const char *opts_json, char *err,
				  size_t errlen)
{
	struct pg_opts o;
	char index[PG_IDENT_MAX + 3], tokens_index[PG_IDENT_MAX + 3];
	const char *names[4];
	json_t *root = NULL;
	struct pg *s;
	bool oom = false;
	char dummy[8];

	if (!err || !errlen) {
		err = dummy;
		errlen = sizeof(dummy);
	}
	err[0] = '\0';
	if (!loop) {
		snprintf(err, errlen, "no event loop");
		return NULL;
	}
	if (pg_opts_load(opts_json, &o, &root, err, errlen) < 0) {
		json_decref(root);
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		json_decref(root);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->loop = loop;
	s->timeout = (double)o.timeout_ms / 1000.0;
	s->purge_interval = (double)o.purge_s;
	s->nconns = (size_t)o.pool_size;
	s->conninfo = strdup(o.conninfo);
	snprintf(s->table_name, sizeof(s->table_name), "%s", o.table);
	snprintf(s->table_quoted, sizeof(s->table_quoted), "\"%s\"", o.table);
	json_decref(root);
	pg_derived_name(s->table_name, "_ns_start_idx", index, sizeof(index));
	pg_derived_name(s->table_name, "_tokens", s->tokens_quoted, sizeof(s->tokens_quoted));
	pg_derived_name(s->table_name, "_tokens_at_idx", tokens_index, sizeof(tokens_index));
	names[0] = s->table_quoted;
	names[1] = index;
	names[2] = s->tokens_quoted;
	names[3] = tokens_index;
	for (int i = 0; i < PG_STMT_COUNT; i++) {
		s->sql[i] = pg_sql_fill(pg_stmts[i].sql, names);
		oom = oom || !s->sql[i];
	}
	s->sql_table = pg_sql_fill(pg_tpl_table, names);
	s->sql_reserved = pg_sql_fill(pg_tpl_reserved, names);
	s->sql_reset = pg_sql_fill(pg_tpl_reset, names);
	s->sql_index = pg_sql_fill(pg_tpl_index, names);
	s->sql_tokens = pg_sql_fill(pg_tpl_tokens, names);
	s->sql_tokens_index = pg_sql_fill(pg_tpl_tokens_index, names);
	if (oom || !s->conninfo || !s->sql_table || !s->sql_reserved || !s->sql_reset ||
	    !s->sql_index ||
	    !s->sql_tokens ||
	    !s->sql_tokens_index) {
		pg_free(s);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	store_core_init(&s->core, loop, s->timeout, pg_on_kick, pg_core_free);
	ev_timer_init(&s->maint, pg_on_maint, s->purge_interval, s->purge_interval);
	if (s->purge_interval > 0)
		ev_timer_start(loop, &s->maint);
	snprintf(s->last_err, sizeof(s->last_err), "connecting");
	for (size_t i = 0; i < s->nconns; i++) {
		struct pg_conn *c = &s->conns[i];

		c->s = s;
		store_backoff_init(&c->backoff, PG_BACKOFF_MIN, PG_BACKOFF_MAX);
		c->ev.fd = -1;
		ev_timer_init(&c->reconnect, pg_on_reconnect, 0., 0.);
		ev_timer_init(&c->conn_timer, pg_on_conn_timeout, 0., 0.);
		pg_connect_start(c);
	}
	return (struct strategy *)(void *)s;
}

static void pg_destroy(struct strategy *st)
{
	struct pg *s = pg_of(st);
	struct pg_op *op;

	if (!s || s->core.destroyed)
		return;
	s->core.destroyed = true;         /* refuses new operations from now on */
	ev_timer_stop(s->loop, &s->maint);
	for (size_t i = 0; i < s->nconns; i++) {
		struct pg_conn *c = &s->conns[i];

		ev_timer_stop(s->loop, &c->reconnect);
		ev_timer_stop(s->loop, &c->conn_timer);
		pg_ev_detach(&c->ev);
		if (c->conn)
			PQfinish(c->conn);
		c->conn = NULL;
		if (c->setup)
			pg_op_free(c->setup);
		c->setup = NULL;
		c->op = NULL;
		c->nfifo = 0;
		c->state = PG_ST_DOWN;
	}
	if ((op = s->active)) {
		pg_op_fail_conn(op, "destroyed");
		pg_op_finish(s, op, -1);
	}
	while ((op = s->head)) {
		pg_err_set(op->err, NULL, "destroyed");
		pg_op_finish(s, op, -1);
	}
	/* Their callbacks run now; the instance is freed now, or when the
	 * callback of ours that called this returns. */
	store_destroy(&s->core);
}

/* ------------------------------------------------------------------------
 * The operations.
 */
static int pg_cmp_counters(const void *pa, const void *pb)
{
	const struct strategy_counter *a = *(const struct strategy_counter *const *)pa;
	const struct strategy_counter *b = *(const struct strategy_counter *const *)pb;

	return pg_cmp_ident(a->ns, a->ns_len, a->size, a->start, a->key, a->key_len, b);
}

/* The sort of a push: the order above, then the batch's own (members of a
 * group are summed in batch order, so a resend of the same counters sums
 * to the very same double). */
static int pg_cmp_counters_sort(const void *pa, const void *pb)
{
	const struct strategy_counter *a = *(const struct strategy_counter *const *)pa;
	const struct strategy_counter *b = *(const struct strategy_counter *const *)pb;
	int c = pg_cmp_counters(pa, pb);

	if (c)
		return c;
	return a < b ? -1 : a > b;
}

/* Cuts a list of groups into chunks of at most PG_CHUNK_ROWS rows and
 * PG_CHUNK_BYTES bytes. Returns 0 or -1 (out of memory). */
static int pg_plan_chunks(struct pg_op *op, bool upsert, const size_t *idx, size_t n)
{
	size_t lo = 0, bytes = 0;

	for (size_t i = 0; i <= n; i++) {
		size_t row = 0;

		if (i < n) {
			const struct strategy_counter *c = op->groups[idx[i]].c;

			row = c->ns_len + c->key_len + 48;
		}
		if (i == n || i - lo == PG_CHUNK_ROWS || (i > lo && bytes + row > PG_CHUNK_BYTES)) {
			if (i > lo) {
				struct pg_chunk *ch = realloc(op->chunks,
							      (op->nchunks + 1) * sizeof(*ch));

				if (!ch)
					return -1;
				op->chunks = ch;
				ch[op->nchunks++] = (struct pg_chunk){
					.upsert = upsert, .tok = upsert && op->has_token,
					.lo = lo, .hi = i };
			}
			lo = i;
			bytes = 0;
		}
		bytes += row;
	}
	return 0;
}

/* Validates one counter; returns NULL or why it is refused. */
static const char *pg_counter_check(const struct strategy_counter *c, bool diff)
{
	if (!c->ns || (!c->key && c->key_len))
		return "counter without namespace or key";
	if (c->ns_len > PG_NS_MAX)
		return "namespace longer than 256 bytes";
	if (memchr(c->ns, '\0', c->ns_len))
		return "namespace holds a NUL byte";
	if (c->key_len > PG_KEY_MAX)
		return "key longer than 2048 bytes";
	if (c->size == 0 || c->size > INT32_MAX)
		return "window size out of range";
	if (diff && (!isfinite(c->diff) || !isfinite(c->spent) || !isfinite(c->returned)))
		return "diff, spent or returned is not a finite number";
	return NULL;
}

/* Builds the sorted, merged plan of a push (read_only: every diff is 0).
 * Returns NULL or why it failed. */
static const char *pg_push_plan(struct pg *s, struct pg_op *op, bool read_only)
{
	size_t n = op->n;

	op->order = malloc((n ? n : 1) * sizeof(*op->order));
	op->groups = malloc((n ? n : 1) * sizeof(*op->groups));
	op->up = malloc((n ? n : 1) * sizeof(*op->up));
	op->rd = malloc((n ? n : 1) * sizeof(*op->rd));
	if (!op->order || !op->groups || !op->up || !op->rd)
		return "out of memory";
	for (size_t i = 0; i < n; i++) {
		const char *why = pg_counter_check(&op->batch[i], !read_only);

		if (why)
			return why;
		op->batch[i].ok = false;
		op->batch[i].reset = false;
		op->order[i] = &op->batch[i];
	}
	qsort(op->order, n, sizeof(*op->order), pg_cmp_counters_sort);
	for (size_t i = 0; i < n; i++) {
		const struct strategy_counter *c = op->order[i];
		struct pg_group *g = op->ngroups ? &op->groups[op->ngroups - 1] : NULL;

		if (g && !pg_cmp_counters(&g->c, &op->order[i])) {
			g->nmemb++;
			g->diff += read_only ? 0.0 : c->diff;
			g->spent += read_only ? 0.0 : c->spent;
			g->returned += read_only ? 0.0 : c->returned;
			continue;
		}
		if (!g || pg_cmp_bytes(g->c->ns, g->c->ns_len, c->ns, c->ns_len) ||
		    g->c->size != c->size)
			pg_seen_note(s, c->ns, c->ns_len, c->size);
		op->groups[op->ngroups++] = (struct pg_group){
			.c = c, .first = i, .nmemb = 1, .diff = read_only ? 0.0 : c->diff,
			.spent = read_only ? 0.0 : c->spent,
			.returned = read_only ? 0.0 : c->returned,
		};
	}
	for (size_t g = 0; g < op->ngroups; g++) {
		if (op->groups[g].diff != 0.0 || op->groups[g].spent != 0.0 ||
		    op->groups[g].returned != 0.0)
			op->up[op->nup++] = g;
		else
			op->rd[op->nrd++] = g;
	}
	if (pg_plan_chunks(op, true, op->up, op->nup) < 0 ||
	    pg_plan_chunks(op, false, op->rd, op->nrd) < 0)
		return "out of memory";
	return NULL;
}

static void pg_op_set_token(struct pg_op *op, const char *token, size_t len)
{
	if (!token)
		return;
	op->has_token = true;
	op->token_len = len;
	memcpy(op->token, token, len);
}

/* A token: NULL (none) or 1..STRATEGY_TOKEN_MAX bytes (len from strnlen). */
static int pg_check_token(const char *token, size_t len, char errstr[STRATEGY_ERR_MAX])
{
	if (token && (len == 0 || len > STRATEGY_TOKEN_MAX)) {
		pg_err_set(errstr, NULL, len ? "token longer than 64 bytes" : "empty token");
		return -1;
	}
	return 0;
}

static int pg_push_common(struct strategy *st, struct strategy_counter *batch, size_t n,
			  const char *token, bool read_only, strategy_done_cb cb, void *arg,
			  char errstr[STRATEGY_ERR_MAX])
{
	struct pg *s = pg_of(st);
	struct pg_op *op;
	const char *why;
	size_t token_len = token ? strnlen(token, STRATEGY_TOKEN_MAX + 1) : 0;

	if (!s || !cb || (!batch && n)) {
		pg_err_set(errstr, NULL, "invalid arguments");
		return -1;
	}
	if (pg_check_token(token, token_len, errstr) < 0)
		return -1;
	op = pg_op_new(s, read_only ? PG_OP_GET : PG_OP_PUSH);
	if (!op) {
		pg_err_set(errstr, NULL, "out of memory");
		return -1;
	}
	pg_op_set_token(op, token, token_len);
	op->batch = batch;
	op->n = n;
	op->done_cb = cb;
	op->arg = arg;
	why = pg_push_plan(s, op, read_only);
	if (why) {
		pg_err_set(errstr, NULL, why);
		pg_op_free(op);
		return -1;
	}
	return pg_submit(s, op, errstr);
}

static int pg_push_diffs(struct strategy *st, struct strategy_counter *batch, size_t n,
			 const char *token, strategy_done_cb cb, void *arg,
			 char errstr[STRATEGY_ERR_MAX])
{
	return pg_push_common(st, batch, n, token, false, cb, arg, errstr);
}

/* The token id of admission i: its fields hashed, plus how many identical
 * admissions follow it in the batch (stable when the caller resends the
 * admissions that were not decided, in order: see redis_write.c). */
static uint64_t pg_admit_id(const struct strategy_admit *a, size_t n, size_t i)
{
	uint64_t h = 1469598103934665603u, later = 0;
	const struct strategy_admit *x = &a[i];

	for (size_t j = i + 1; j < n; j++)
		later += a[j].ns_len == x->ns_len && !memcmp(a[j].ns, x->ns, x->ns_len) &&
			 a[j].key_len == x->key_len && !memcmp(a[j].key, x->key, x->key_len) &&
			 a[j].start == x->start && a[j].size == x->size && a[j].diff == x->diff &&
			 a[j].cost == x->cost && a[j].limit == x->limit &&
			 a[j].weight == x->weight && a[j].count_denied == x->count_denied;
	pg_hash_u64(&h, x->ns_len);
	pg_hash_bytes(&h, x->ns, x->ns_len);
	pg_hash_u64(&h, x->key_len);
	pg_hash_bytes(&h, x->key, x->key_len);
	pg_hash_u64(&h, (uint64_t)x->start);
	pg_hash_u64(&h, x->size);
	pg_hash_bytes(&h, &x->diff, sizeof(x->diff));
	pg_hash_bytes(&h, &x->cost, sizeof(x->cost));
	pg_hash_bytes(&h, &x->limit, sizeof(x->limit));
	pg_hash_bytes(&h, &x->weight, sizeof(x->weight));
	pg_hash_u64(&h, x->count_denied);
	pg_hash_u64(&h, later);
	return h;
}

static int pg_admit(struct strategy *st, struct strategy_admit *a, size_t n, const char *token,
		    strategy_done_cb cb, void *arg, char errstr[STRATEGY_ERR_MAX])
{
	struct pg *s = pg_of(st);
	size_t token_len = token ? strnlen(token, STRATEGY_TOKEN_MAX + 1) : 0;
	struct pg_op *op;

	if (!s || !cb || (!a && n)) {
		pg_err_set(errstr, NULL, "invalid arguments");
		return -1;
	}
	if (pg_check_token(token, token_len, errstr) < 0)
		return -1;
	if (store_admit_check(a, n, errstr) < 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		/* and what PostgreSQL itself cannot take */
		struct strategy_counter c = { .ns = a[i].ns, .ns_len = a[i].ns_len, .key = a[i].key,
					      .key_len = a[i].key_len, .size = a[i].size };
		const char *why = pg_counter_check(&c, false);

		if (why) {
			if (errstr)
				snprintf(errstr, STRATEGY_ERR_MAX, "admission %zu: %s", i, why);
			return -1;
		}
	}
	op = pg_op_new(s, PG_OP_ADMIT);
	if (!op || (token && n && !(op->adm_ids = malloc(n * sizeof(*op->adm_ids))))) {
		if (op)
			pg_op_free(op);
		pg_err_set(errstr, NULL, "out of memory");
		return -1;
	}
	pg_op_set_token(op, token, token_len);
	for (size_t i = 0; token && i < n; i++)
		op->adm_ids[i] = pg_admit_id(a, n, i);
	op->admits = a;
	op->n = n;
	op->done_cb = cb;
	op->arg = arg;
	for (size_t i = 0; i < n; i++)
		pg_seen_note(s, a[i].ns, a[i].ns_len, a[i].size);
	return pg_submit(s, op, errstr);
}

static int pg_heartbeat(struct strategy *st, const char *ns, size_t ns_len, const char *node,
			size_t node_len, double now, double ttl, unsigned *active,
			strategy_done_cb cb, void *arg, char errstr[STRATEGY_ERR_MAX])
{
	struct pg *s = pg_of(st);
	struct pg_op *op;

	if (!s || !cb || !active || !ns || node_len == 0 || node_len > sizeof(op->node) ||
	    ns_len > PG_NS_MAX || memchr(ns, '\0', ns_len) || !isfinite(now) || !(ttl > 0)) {
		pg_err_set(errstr, NULL, "invalid arguments");
		return -1;
	}
	op = pg_op_new(s, PG_OP_NODES);
	if (!op || !(op->ns = malloc(ns_len ? ns_len : 1))) {
		if (op)
			pg_op_free(op);
		pg_err_set(errstr, NULL, "out of memory");
		return -1;
	}
	memcpy(op->ns, ns, ns_len);
	op->ns_len = ns_len;
	memcpy(op->node, node, node_len);
	op->node_len = node_len;
	op->ttl = ttl;
	op->active = active;
	op->done_cb = cb;
	op->arg = arg;
	return pg_submit(s, op, errstr);
}

static int pg_get_window(struct strategy *st, struct strategy_counter *counter,
			 strategy_done_cb cb, void *arg, char errstr[STRATEGY_ERR_MAX])
{
	if (!counter) {
		pg_err_set(errstr, NULL, "invalid arguments");
		return -1;
	}
	return pg_push_common(st, counter, 1, NULL, true, cb, arg, errstr);
}

/* FETCH, FORGET and PURGE: copies ns, dedups sizes, computes the starts
 * (FETCH, FORGET: current and previous window of each size; PURGE: the
 * newest start to delete, now - 2 * size). */
static const char *pg_windows_plan(struct pg *s, struct pg_op *op, const char *ns, size_t ns_len,
				   const uint32_t *sizes, size_t nsizes, int64_t now)
{
	if (!ns || (!sizes && nsizes))
		return "invalid arguments";
	if (now < -PG_TIME_MAX || now > PG_TIME_MAX)
		return "time out of range";
	if (ns_len > PG_NS_MAX)
		return "namespace longer than 256 bytes";
	if (memchr(ns, '\0', ns_len))
		return "namespace holds a NUL byte";
	op->ns = malloc(ns_len ? ns_len : 1);
	op->sizes = malloc((nsizes ? nsizes : 1) * 2 * sizeof(*op->sizes));
	op->starts = malloc((nsizes ? nsizes : 1) * 2 * sizeof(*op->starts));
	if (!op->ns || !op->sizes || !op->starts)
		return "out of memory";
	if (ns_len)
		memcpy(op->ns, ns, ns_len);
	op->ns_len = ns_len;
	for (size_t i = 0; i < nsizes; i++) {
		uint32_t z = sizes[i];
		bool dup = false;

		if (z == 0 || z > INT32_MAX)
			return "window size out of range";
		for (size_t k = 0; k < i; k++)
			dup = dup || sizes[k] == z;
		if (dup)
			continue;
		pg_seen_note(s, ns, ns_len, z);
		if (op->kind != PG_OP_PURGE) {
			int64_t cur = strategy_window_start((double)now, z);

			op->sizes[op->nw] = (int32_t)z;
			op->starts[op->nw++] = cur;
			op->sizes[op->nw] = (int32_t)z;
			op->starts[op->nw++] = cur - z;
		} else {
			op->sizes[op->nw] = (int32_t)z;
			op->starts[op->nw++] = now - 2 * (int64_t)z;
		}
	}
	return NULL;
}

/* Plans op's windows (pg_windows_plan) and submits it; frees it if
 * either fails. */
static int pg_windows_submit(struct pg *s, struct pg_op *op, const char *ns, size_t ns_len,
			     const uint32_t *sizes, size_t nsizes, int64_t now,
			     char errstr[STRATEGY_ERR_MAX])
{
	const char *why = pg_windows_plan(s, op, ns, ns_len, sizes, nsizes, now);

	if (why) {
		pg_err_set(errstr, NULL, why);
		pg_op_free(op);
		return -1;
	}
	return pg_submit(s, op, errstr);
}

static int pg_windows_common(struct strategy *st, enum pg_op_kind kind, const char *ns,
			     size_t ns_len, const uint32_t *sizes, size_t nsizes, int64_t now,
			     strategy_done_cb done, strategy_rows_cb rows, void *arg,
			     char errstr[STRATEGY_ERR_MAX])
{
	struct pg *s = pg_of(st);
	struct pg_op *op;

	if (!s || (!done && !rows)) {
		pg_err_set(errstr, NULL, "invalid arguments");
		return -1;
	}
	op = pg_op_new(s, kind);
	if (!op) {
		pg_err_set(errstr, NULL, "out of memory");
		return -1;
	}
	op->done_cb = done;
	op->rows_cb = rows;
	op->arg = arg;
	return pg_windows_submit(s, op, ns, ns_len, sizes, nsizes, now, errstr);
}

static int pg_get_counters(struct strategy *st, const char *ns, size_t ns_len,
			   const uint32_t *sizes, size_t nsizes, int64_t now, strategy_rows_cb cb,
			   void *arg, char errstr[STRATEGY_ERR_MAX])
{
	return pg_windows_common(st, PG_OP_FETCH, ns, ns_len, sizes, nsizes, now, NULL, cb, arg,
				 errstr);
}

static int pg_purge(struct strategy *st, const char *ns, size_t ns_len, const uint32_t *sizes,
		    size_t nsizes, int64_t now, strategy_done_cb cb, void *arg,
		    char errstr[STRATEGY_ERR_MAX])
{
	return pg_windows_common(st, PG_OP_PURGE, ns, ns_len, sizes, nsizes, now, cb, NULL, arg,
				 errstr);
}

/* One transaction: the token (rl_token), then rl_forget over the key's
 * windows (pg_sql.c). */
static int pg_forget(struct strategy *st, const char *ns, size_t ns_len, const char *key,
		     size_t key_len, const uint32_t *sizes, size_t nsizes, int64_t now,
		     const char *token, double *removed, strategy_done_cb cb, void *arg,
		     char errstr[STRATEGY_ERR_MAX])
{
	struct pg *s = pg_of(st);
	size_t token_len = token ? strnlen(token, STRATEGY_TOKEN_MAX + 1) : 0;
	struct strategy_counter c = { .ns = ns, .ns_len = ns_len, .key = key, .key_len = key_len,
				      .size = 1 };
	const char *why = pg_counter_check(&c, false);
	struct pg_op *op;

	if (!s || !cb || !removed || !token || nsizes == 0) {
		pg_err_set(errstr, NULL, "invalid arguments (a token, window sizes and somewhere "
			   "for the answer are needed)");
		return -1;
	}
	if (why || pg_check_token(token, token_len, errstr) < 0) {
		if (why)
			pg_err_set(errstr, NULL, why);
		return -1;
	}
	op = pg_op_new(s, PG_OP_FORGET);
	if (!op || !(op->key = malloc(key_len ? key_len : 1))) {
		if (op)
			pg_op_free(op);
		pg_err_set(errstr, NULL, "out of memory");
		return -1;
	}
	if (key_len)
		memcpy(op->key, key, key_len);
	op->key_len = key_len;
	op->removed = removed;
	pg_op_set_token(op, token, token_len);
	op->done_cb = cb;
	op->arg = arg;
	return pg_windows_submit(s, op, ns, ns_len, sizes, nsizes, now, errstr);
}

/* A limit_set or limits_read operation: its namespace the one of ns's
 * overrides in the window table, "<ns>\x01limits" (pg_sql.c,
 * rl_limit_set), and its key (key_len 0: none) copied. NULL with errstr
 * when out of memory. */
static struct pg_op *pg_limits_op(struct pg *s, enum pg_op_kind kind, const char *ns,
				  size_t ns_len, const char *key, size_t key_len,
				  char errstr[STRATEGY_ERR_MAX])
{
	struct pg_op *op = pg_op_new(s, kind);

	if (!op || !(op->ns = malloc(ns_len + 7)) || (key_len && !(op->key = malloc(key_len)))) {
		if (op)
			pg_op_free(op);
		pg_err_set(errstr, NULL, "out of memory");
		return NULL;
	}
	memcpy(op->ns, ns, ns_len);
	memcpy(op->ns + ns_len, "\001limits", 7);
	op->ns_len = ns_len + 7;
	if (key_len)
		memcpy(op->key, key, key_len);
	op->key_len = key_len;
	return op;
}

static int pg_limit_set(struct strategy *st, const char *ns, size_t ns_len, const char *key,
			size_t key_len, uint32_t size, int64_t limit, uint64_t most, bool *full,
			strategy_done_cb cb, void *arg, char errstr[STRATEGY_ERR_MAX])
{
	struct pg *s = pg_of(st);
	struct strategy_counter c = { .ns = ns, .ns_len = ns_len, .key = key, .key_len = key_len,
				      .size = size };
	const char *why = pg_counter_check(&c, false);
	struct pg_op *op;

	if (!s || !cb || !full || key_len == 0 || size == 0 || size > INT32_MAX ||
	    most > INT64_MAX) {
		pg_err_set(errstr, NULL, "invalid arguments");
		return -1;
	}
	if (why) {
		pg_err_set(errstr, NULL, why);
		return -1;
	}
	if (!(op = pg_limits_op(s, PG_OP_LIMIT_SET, ns, ns_len, key, key_len, errstr)))
		return -1;
	op->lim_size = size;
	op->lim = limit < 0 ? -1.0 : (double)limit;
	op->most = most;
	op->full = full;
	*full = false;
	op->done_cb = cb;
	op->arg = arg;
	return pg_submit(s, op, errstr);
}

static int pg_limits_read(struct strategy *st, const char *ns, size_t ns_len, uint64_t have,
			  uint64_t *version, bool *changed, strategy_rows_cb cb, void *arg,
			  char errstr[STRATEGY_ERR_MAX])
{
	struct pg *s = pg_of(st);
	struct pg_op *op;

	if (!s || !cb || !version || !changed || !ns || ns_len > PG_NS_MAX ||
	    memchr(ns, '\0', ns_len)) {
		pg_err_set(errstr, NULL, "invalid arguments");
		return -1;
	}
	if (!(op = pg_limits_op(s, PG_OP_LIMITS_READ, ns, ns_len, NULL, 0, errstr)))
		return -1;
	op->have = have;
	op->version = version;
	op->changed = changed;
	*changed = false;
	op->rows_cb = cb;
	op->arg = arg;
	return pg_submit(s, op, errstr);
}

static bool pg_ready(const struct strategy *st)
{
	const struct pg *s = (const struct pg *)(const void *)st;

	return s && !s->core.destroyed && pg_any_ready(s);
}

static bool pg_connecting(const struct strategy *st)
{
	const struct pg *s = (const struct pg *)(const void *)st;

	return s && !s->core.destroyed && !pg_any_ready(s) && !pg_all_down(s);
}

const struct strategy_ops postgres_strategy = {
	.name = "postgres",
	.check_opts = pg_check_opts,
	.admit = pg_admit,
	.heartbeat = pg_heartbeat,
	.create = pg_create,
	.destroy = pg_destroy,
	.push_diffs = pg_push_diffs,
	.get_counters = pg_get_counters,
	.get_window = pg_get_window,
	.purge = pg_purge,
	.forget = pg_forget,
	.limit_set = pg_limit_set,
	.limits_read = pg_limits_read,
	.ready = pg_ready,
	.connecting = pg_connecting,
};
