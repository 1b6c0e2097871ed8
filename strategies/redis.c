/*
 * redis.c - the Redis strategy: cluster totals kept in Redis hashes, reached
 * through hiredis's async API on the caller's libev loop (hiredis's own
 * libev adapter). Implements the contract of strategies/strategy.h: the
 * ops table, create / destroy, and the operations of one call or a fixed
 * set of calls (heartbeat, get_counters, get_window, purge); push_diffs
 * and admit, which cut a batch into script calls, are redis_write.c's.
 * The files of the strategy, and which way calls go between them, are
 * drawn in strategies/redis_int.h.
 *
 * get_counters: HGETALL over 64 buckets x sizes x {current, previous},
 * pipelined (the reset mark left out: no key's). get_window: one HMGET
 * of the key and the reset mark. purge: completes with 0 (every hash
 * expires: redis_resp.c). heartbeat: one call of the nodes script.
 * forget: one call of the forget script (redis_script.c), every window
 * of the key in it.
 *
 * Servers. The mode (struct redis_mode_ops, redis_int.h) says where a call
 * goes: the one server (host/port or socket: redis_single.c), the master of
 * its slot (cluster_nodes: redis_cluster.c), the master a quorum of the
 * sentinels name (sentinel: redis_sentinel.c). Each server is one connection
 * (redis_conn.c: a non-blocking connect with AUTH, SELECT and the three
 * SCRIPT LOADs pipelined behind it, ready once all answered within
 * timeout_ms; reconnected with backoff). Host names are not accepted
 * (resolving would block the loop): IPv4 or IPv6 literals, or "localhost"
 * for 127.0.0.1 (redis_opts.c).
 *
 * Errors are values: nothing here logs, aborts or blocks; every reply
 * shape is checked. The process must ignore SIGPIPE (the agent does):
 * hiredis 0.14 writes with write(2), so a write to a server that just died
 * raises it.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strategies/container.h"
#include "strategies/redis_int.h"
#include "strategies/window_start.h"

/* ===================================================================== */
/* Operations of one call                                                */
/* ===================================================================== */

/* An operation of one call, with room for a command of cmd_max bytes
 * (op->calls[0]; op->cmd). NULL when out of memory. */
static struct redis_op *redis_op_single(struct redis_strategy *s, const struct redis_kind *k,
					strategy_done_cb cb, void *arg, size_t cmd_max)
{
	struct redis_op *op = redis_op_new(s, k, cb, NULL, arg);

	if (op == NULL)
		return NULL;
	op->arena = malloc(sizeof(struct redis_call) + cmd_max);
	if (op->arena == NULL) {
		redis_op_free(op);
		return NULL;
	}
	op->calls = op->arena;
	op->cmd = (char *)op->arena + sizeof(struct redis_call);
	op->ncalls = 1;
	op->calls[0] = (struct redis_call){ .op = op, .n = 1 };
	return op;
}

/* Sends the one call of op, whose command ends at end and whose key is
 * the bulk string at key. Returns 0, or -1 (op freed, errstr set). */
static int redis_op_single_send(struct redis_op *op, const char *end, const char *key,
				char errstr[STRATEGY_ERR_MAX])
{
	struct redis_call *c = &op->calls[0];

	c->end = (size_t)(end - op->cmd);
	c->slot = redis_bulk_slot(key);
	return redis_op_launch(op, errstr);
}

/* ===================================================================== */
/* heartbeat                                                             */
/* ===================================================================== */

static void redis_nodes_reply(struct redis_call *c, const redisAsyncContext *ac,
			      const redisReply *reply)
{
	if (!redis_reply_failed(c, ac, reply)) {
		if (reply->type != REDIS_REPLY_INTEGER || reply->integer < 1)
			redis_op_fail(c->op, "redis: nodes script returned %s, expected a count",
				      redis_reply_type_name(reply->type));
		else
			*c->op->active = (unsigned)(reply->integer > UINT_MAX ? UINT_MAX
									 : reply->integer);
	}
}

static const struct redis_kind redis_nodes_kind = {
	.kind = REDIS_OP_NODES,
	.reply = redis_nodes_reply,
	.script = redis_nodes_script,
};

static int redis_heartbeat(struct strategy *st, const char *ns, size_t ns_len, const char *node,
			   size_t node_len, double now, double ttl, unsigned *active,
			   strategy_done_cb cb, void *arg, char errstr[STRATEGY_ERR_MAX])
{
	struct redis_strategy *s = redis_of(st);
	size_t klen = s->o.prefix_len + 3 + redis_tag_mark(ns, ns_len) + ns_len + 6;
	struct redis_op *op;
	char num[REDIS_DBL_MAX_LEN], *p, *key;

	if (redis_check_ready(s, errstr) < 0)
		return -1;
	if (node_len == 0 || !isfinite(now) || !(ttl > 0)) {
		redis_seterr(errstr, "heartbeat: empty node id, or now or ttl out of range");
		return -1;
	}
	op = redis_op_single(s, &redis_nodes_kind, cb, arg,
			     128 + REDIS_BULK_MAX(40) + REDIS_BULK_MAX(klen) +
			     REDIS_BULK_MAX(node_len) + 2 * REDIS_BULK_MAX(REDIS_DBL_MAX_LEN));
	if (op == NULL) {
		redis_seterr(errstr, "out of memory");
		return -1;
	}
	op->active = active;
	/* EVALSHA <sha> 1 <key> <node> <now> <ttl>; EVAL after NOSCRIPT */
	op->calls[0].nargs = 7;
	p = redis_put_array(op->cmd, 7);
	p = redis_put_bulk(p, "EVALSHA", 7);
	p = redis_put_bulk(p, s->sha_nodes, 40);
	op->calls[0].tail = (size_t)(p - op->cmd);
	p = redis_put_bulk(p, "1", 1);
	key = p;
	*p++ = '$';
	p += redis_u64_dec(p, klen);
	p = redis_put_crlf(p);
	p = redis_put_tag(p, s, ns, ns_len, "nodes", 5);
	*p++ = '}';
	p = redis_put_crlf(p);
	p = redis_put_bulk(p, node, node_len);
	p = redis_put_bulk(p, num, redis_dbl_dec(num, now));
	p = redis_put_bulk(p, num, redis_dbl_dec(num, ttl));
	return redis_op_single_send(op, p, key, errstr);
}

/* ===================================================================== */
/* get_counters                                                          */
/* ===================================================================== */

/* Appends one row; its key is copied (the reply dies after the callback). */
static int redis_rows_add(struct redis_op *op, const char *key, size_t key_len, int64_t start,
			  uint32_t size, double count)
{
	if (op->nrows == op->rows_cap) {
		size_t ncap = op->rows_cap ? op->rows_cap * 2 : 64;
		struct strategy_row *nr = realloc(op->rows, ncap * sizeof(*nr));
		size_t *no;

		if (nr == NULL)
			return -1;
		op->rows = nr;
		no = realloc(op->key_off, ncap * sizeof(*no));
		if (no == NULL)
			return -1;
		op->key_off = no;
		op->rows_cap = ncap;
	}
	if (op->keys_cap - op->keys_len < key_len + 1) {
		size_t ncap = op->keys_cap ? op->keys_cap : 1024;
		char *nk;

		while (ncap - op->keys_len < key_len + 1)
			ncap *= 2;
		nk = realloc(op->keys, ncap);
		if (nk == NULL)
			return -1;
		op->keys = nk;
		op->keys_cap = ncap;
	}
	if (key_len)
		memcpy(op->keys + op->keys_len, key, key_len);
	op->keys[op->keys_len + key_len] = '\0';
	op->key_off[op->nrows] = op->keys_len;
	op->keys_len += key_len + 1;
	op->rows[op->nrows++] = (struct strategy_row){ .key = NULL, .key_len = key_len,
						       .start = start, .size = size,
						       .count = count };
	return 0;
}

/* Reply of one HGETALL: field, value, field, value, ... */
static void redis_rows_reply(struct redis_call *c, const redisAsyncContext *ac,
			     const redisReply *reply)
{
	struct redis_op *op = c->op;

	if (redis_reply_failed(c, ac, reply)) {
		/* the op failed */
	} else if (reply->type != REDIS_REPLY_ARRAY || reply->elements % 2) {
		redis_op_fail(op, "redis: HGETALL returned %s, expected field/value pairs",
			      redis_reply_type_name(reply->type));
	} else if (op->status == 0) {
		uint32_t size = op->sizes[c->first / 2];
		int64_t start = op->starts[c->first];

		for (size_t i = 0; i < reply->elements; i += 2) {
			const redisReply *f = reply->element[i], *v = reply->element[i + 1];
			double count;

			if (f->type == REDIS_REPLY_STRING && f->len == REDIS_RESET_LEN &&
			    memcmp(f->str, REDIS_RESET_FIELD, REDIS_RESET_LEN) == 0)
				continue;       /* the reset mark, no key's */
			if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING ||
			    redis_parse_double(v->str, v->len, &count) < 0) {
				redis_op_fail(op,
					      "redis: HGETALL returned a %s field with a %s "
					      "value, expected a number",
					      redis_reply_type_name(f->type),
					      redis_reply_type_name(v->type));
				break;
			}
			if (redis_rows_add(op, f->str, f->len, start, size, count) < 0) {
				redis_op_fail(op, "out of memory");
				break;
			}
		}
	}
}

static const struct redis_kind redis_rows_kind = {
	.kind = REDIS_OP_ROWS,
	.reply = redis_rows_reply,
};

static int redis_get_counters(struct strategy *st, const char *ns, size_t ns_len,
			      const uint32_t *sizes, size_t nsizes, int64_t now,
			      strategy_rows_cb cb, void *arg, char errstr[STRATEGY_ERR_MAX])
{
	struct redis_strategy *s = redis_of(st);
	size_t ncalls = nsizes * 2 * REDIS_BUCKETS, off_calls, off_sizes, off_starts, off_cmd;
	size_t per_cmd = 32 + redis_hkey_max(s, ns_len);
	struct redis_op *op;
	char *p, *key;

	if (redis_check_ready(s, errstr) < 0)
		return -1;
	if (nsizes > 1024) {
		redis_seterr(errstr, "%zu window sizes, at most 1024", nsizes);
		return -1;
	}
	for (size_t i = 0; i < nsizes; i++) {
		if (sizes[i] == 0) {
			redis_seterr(errstr, "window size %zu is 0", i);
			return -1;
		}
	}
	op = redis_op_new(s, &redis_rows_kind, NULL, cb, arg);
	if (op == NULL)
		goto oom;
	off_calls = 0;
	off_sizes = off_calls + ncalls * sizeof(struct redis_call);
	off_starts = (off_sizes + nsizes * sizeof(uint32_t) + 7) & ~(size_t)7;
	off_cmd = off_starts + 2 * nsizes * sizeof(int64_t);
	op->arena = malloc(off_cmd + ncalls * per_cmd + 1);
	if (op->arena == NULL)
		goto oom;
	op->calls = op->arena;
	op->sizes = (uint32_t *)(void *)((char *)op->arena + off_sizes);
	op->starts = (int64_t *)(void *)((char *)op->arena + off_starts);
	op->cmd = (char *)op->arena + off_cmd;
	p = op->cmd;
	for (size_t i = 0; i < nsizes; i++) {
		op->sizes[i] = sizes[i];
		op->starts[2 * i] = strategy_window_start((double)now, sizes[i]);
		op->starts[2 * i + 1] = op->starts[2 * i] - sizes[i];
	}
	for (uint32_t w = 0; w < 2 * nsizes; w++) {
		for (unsigned b = 0; b < REDIS_BUCKETS; b++) {
			struct redis_call *c = &op->calls[op->ncalls++];
			size_t start = (size_t)(p - op->cmd);

			*c = (struct redis_call){ .op = op, .first = w, .begin = start };
			p = redis_put_array(p, 2);
			p = redis_put_bulk(p, "HGETALL", 7);
			key = p;
			p = redis_put_hkey(p, s, ns, ns_len, b, op->sizes[w / 2], op->starts[w]);
			c->slot = redis_bulk_slot(key);
			c->end = (size_t)(p - op->cmd);
		}
	}
	return redis_op_launch(op, errstr);
oom:
	if (op)
		redis_op_free(op);
	redis_seterr(errstr, "out of memory");
	return -1;
}

/* ===================================================================== */
/* forget                                                                */
/* ===================================================================== */

/* The reply of the forget script: the hits removed, as a number string. */
static void redis_forget_reply(struct redis_call *c, const redisAsyncContext *ac,
			       const redisReply *reply)
{
	if (redis_reply_failed(c, ac, reply))
		return;
	if (reply->type != REDIS_REPLY_STRING ||
	    redis_reply_number(reply, &c->op->removed_got) < 0) {
		redis_op_fail(c->op, "redis: forget script returned %s, expected a number",
			      redis_reply_type_name(reply->type));
		return;
	}
	redis_call_applied(c);
}

/* Applied (and replicated, with wait_replicas): the answer is valid. */
static void redis_forget_commit(struct redis_call *c)
{
	*c->op->removed = c->op->removed_got;
}

static const struct redis_kind redis_forget_kind = {
	.kind = REDIS_OP_FORGET,
	.reply = redis_forget_reply,
	.commit = redis_forget_commit,
};

/*
 * One script call for every window of the key: they all share its hash
 * tag (redis_resp.c), so it is one slot in a Redis Cluster:
 *   EVAL <script> <1 + 4 x sizes> <token key> <hash cur> <hash prev>
 *        <reserved cur> <reserved prev> ... <key> <sizes> <ttl 1..sizes>
 * EVAL, not EVALSHA: a forget is an operator's call, rare enough that
 * the server compiling the script each time (~70 us) costs nothing, and
 * the script stays out of every connection's handshake.
 */
static int redis_forget(struct strategy *st, const char *ns, size_t ns_len, const char *key,
			size_t key_len, const uint32_t *sizes, size_t nsizes, int64_t now,
			const char *token, double *removed, strategy_done_cb cb, void *arg,
			char errstr[STRATEGY_ERR_MAX])
{
	struct redis_strategy *s = redis_of(st);
	size_t token_len = token ? strnlen(token, STRATEGY_TOKEN_MAX + 1) : 0;
	unsigned bucket = redis_bucket(key, key_len);
	size_t script_len = strlen(redis_forget_script);
	struct redis_op *op;
	char num[REDIS_DBL_MAX_LEN], *p, *first;

	if (redis_check_ready(s, errstr) < 0)
		return -1;
	if (token_len == 0 || token_len > STRATEGY_TOKEN_MAX || !removed || nsizes == 0 ||
	    nsizes > 64 || !sizes) {
		redis_seterr(errstr, "forget: a token of 1 to %d bytes, 1 to 64 window sizes and "
			     "somewhere for the answer are needed", STRATEGY_TOKEN_MAX);
		return -1;
	}
	for (size_t i = 0; i < nsizes; i++) {
		if (sizes[i] == 0) {
			redis_seterr(errstr, "window size %zu is 0", i);
			return -1;
		}
	}
	op = redis_op_single(s, &redis_forget_kind, cb, arg,
			     64 + REDIS_BULK_MAX(script_len) +
			     redis_tkey_max(s, ns_len, token_len) +
			     4 * nsizes * redis_hkey_max(s, ns_len) + REDIS_BULK_MAX(key_len) +
			     (1 + nsizes) * REDIS_BULK_MAX(REDIS_U64_MAX_LEN));
	if (op == NULL) {
		redis_seterr(errstr, "out of memory");
		return -1;
	}
	op->removed = removed;
	op->calls[0].nargs = (uint32_t)(3 + 1 + 4 * nsizes + 2 + nsizes);
	p = redis_put_array(op->cmd, op->calls[0].nargs);
	p = redis_put_bulk(p, "EVAL", 4);
	p = redis_put_bulk(p, redis_forget_script, script_len);
	p = redis_put_bulk(p, num, redis_u64_dec(num, 1 + 4 * nsizes));
	first = p;
	p = redis_put_tkey(p, op->cmd, s, ns, ns_len, bucket, sizes[0],
			   strategy_window_start((double)now, sizes[0]), token, token_len,
			   &op->calls[0].tok_id);
	redis_put_tok_id(op->cmd + op->calls[0].tok_id, redis_hash_bytes(key, key_len));
	for (size_t i = 0; i < nsizes; i++) {
		int64_t cur = strategy_window_start((double)now, sizes[i]);

		for (unsigned w = 0; w < 4; w++)
			p = redis_put_hkey_of(p, s, ns, ns_len, bucket, sizes[i],
					      cur - (w & 1 ? (int64_t)sizes[i] : 0), w >= 2);
	}
	p = redis_put_bulk(p, key, key_len);
	p = redis_put_bulk(p, num, redis_u64_dec(num, nsizes));
	for (size_t i = 0; i < nsizes; i++)
		p = redis_put_bulk(p, num, redis_u64_dec(num, redis_ttl(sizes[i])));
	return redis_op_single_send(op, p, first, errstr);
}

/* ===================================================================== */
/* limits per key: limit_set, limits_read                                */
/* ===================================================================== */

/* "<prefix>:{<ns>:limits}" as a bulk string: the namespace's overrides
 * (redis_script.c). Its length is redis_limits_klen(). */
static size_t redis_limits_klen(const struct redis_strategy *s, const char *ns, size_t ns_len)
{
	return s->o.prefix_len + 3 + redis_tag_mark(ns, ns_len) + ns_len + 7;
}

static char *redis_put_limits_key(char *p, const struct redis_strategy *s, const char *ns,
				  size_t ns_len)
{
	*p++ = '$';
	p += redis_u64_dec(p, redis_limits_klen(s, ns, ns_len));
	p = redis_put_crlf(p);
	p = redis_put_tag(p, s, ns, ns_len, "limits", 6);
	*p++ = '}';
	return redis_put_crlf(p);
}

/* The reply of the limit_set script: the new version, or -1 (full). */
static void redis_limit_set_reply(struct redis_call *c, const redisAsyncContext *ac,
				  const redisReply *reply)
{
	if (redis_reply_failed(c, ac, reply))
		return;
	if (reply->type != REDIS_REPLY_INTEGER) {
		redis_op_fail(c->op, "redis: limit script returned %s, expected a number",
			      redis_reply_type_name(reply->type));
		return;
	}
	c->op->full_got = reply->integer < 0;
	redis_call_applied(c);
}

static void redis_limit_set_commit(struct redis_call *c)
{
	*c->op->full = c->op->full_got;
}

static const struct redis_kind redis_limit_set_kind = {
	.kind = REDIS_OP_LIMIT_SET,
	.reply = redis_limit_set_reply,
	.commit = redis_limit_set_commit,
};

/*
 *   EVAL <script> 1 <prefix>:{<ns>:limits} <size>:<key> <limit | -1> <most>
 * EVAL, as forget: an operator's call.
 */
static int redis_limit_set(struct strategy *st, const char *ns, size_t ns_len, const char *key,
			   size_t key_len, uint32_t size, int64_t limit, uint64_t most, bool *full,
			   strategy_done_cb cb, void *arg, char errstr[STRATEGY_ERR_MAX])
{
	struct redis_strategy *s = redis_of(st);
	size_t script_len = strlen(redis_limit_set_script);
	char num[REDIS_U64_MAX_LEN + 2], *p, *first;
	struct redis_op *op;

	if (redis_check_ready(s, errstr) < 0)
		return -1;
	if (size == 0 || key_len == 0 || !full) {
		redis_seterr(errstr, "limit_set: a window size, a key and somewhere for the answer "
			     "are needed");
		return -1;
	}
	op = redis_op_single(s, &redis_limit_set_kind, cb, arg,
			     64 + REDIS_BULK_MAX(script_len) +
			     REDIS_BULK_MAX(redis_limits_klen(s, ns, ns_len)) +
			     REDIS_BULK_MAX(REDIS_U64_MAX_LEN + 1 + key_len) +
			     2 * REDIS_BULK_MAX(REDIS_U64_MAX_LEN + 1));
	if (op == NULL) {
		redis_seterr(errstr, "out of memory");
		return -1;
	}
	*full = false;
	op->full = full;
	op->calls[0].nargs = 7;
	p = redis_put_array(op->cmd, 7);
	p = redis_put_bulk(p, "EVAL", 4);
	p = redis_put_bulk(p, redis_limit_set_script, script_len);
	p = redis_put_bulk(p, "1", 1);
	first = p;
	p = redis_put_limits_key(p, s, ns, ns_len);
	size_t zl = redis_u64_dec(num, size);
	*p++ = '$';
	p += redis_u64_dec(p, zl + 1 + key_len);
	p = redis_put_crlf(p);
	memcpy(p, num, zl);
	p += zl;
	*p++ = ':';
	memcpy(p, key, key_len);
	p = redis_put_crlf(p + key_len);
	if (limit < 0)
		p = redis_put_bulk(p, "-1", 2);
	else
		p = redis_put_bulk(p, num, redis_u64_dec(num, (uint64_t)limit));
	p = redis_put_bulk(p, num, redis_u64_dec(num, most));
	return redis_op_single_send(op, p, first, errstr);
}

/* One override of the read script's pairs ("<size>:<key>", limit) as a
 * row; the version's field "v" is none. 0, or -1 (a malformed field). */
static int redis_limits_row(struct redis_op *op, const redisReply *f, const redisReply *v)
{
	const char *colon = f->type == REDIS_REPLY_STRING ? memchr(f->str, ':', f->len) : NULL;
	uint64_t size = 0;
	double limit;

	if (f->type == REDIS_REPLY_STRING && f->len == 1 && f->str[0] == 'v')
		return 0;
	if (!colon || colon == f->str || colon - f->str > 10 || v->type != REDIS_REPLY_STRING ||
	    redis_parse_double(v->str, v->len, &limit) < 0)
		return -1;
	for (const char *q = f->str; q < colon; q++) {
		if (*q < '0' || *q > '9')
			return -1;
		size = size * 10 + (uint64_t)(*q - '0');
	}
	if (size == 0 || size > UINT32_MAX)
		return -1;
	return redis_rows_add(op, colon + 1, f->len - (size_t)(colon + 1 - f->str), 0,
			      (uint32_t)size, limit);
}

/* {version} or {version, {field, value, ...}}. */
static void redis_limits_read_reply(struct redis_call *c, const redisAsyncContext *ac,
				    const redisReply *reply)
{
	struct redis_op *op = c->op;
	uint64_t v = 0;

	if (redis_reply_failed(c, ac, reply))
		return;
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 1 || reply->elements > 2 ||
	    reply->element[0]->type != REDIS_REPLY_STRING ||
	    (reply->elements == 2 && (reply->element[1]->type != REDIS_REPLY_ARRAY ||
				      reply->element[1]->elements % 2))) {
		redis_op_fail(op, "redis: limits script returned %s, expected {version, pairs}",
			      redis_reply_type_name(reply->type));
		return;
	}
	for (size_t i = 0; i < reply->element[0]->len; i++) {
		char d = reply->element[0]->str[i];
		if (d < '0' || d > '9' || i >= 19) {
			redis_op_fail(op, "redis: limits version is not a number");
			return;
		}
		v = v * 10 + (uint64_t)(d - '0');
	}
	*op->version = v;
	*op->changed = reply->elements == 2;
	if (reply->elements < 2)
		return;
	const redisReply *all = reply->element[1];
	for (size_t i = 0; i < all->elements; i += 2) {
		if (redis_limits_row(op, all->element[i], all->element[i + 1]) < 0) {
			redis_op_fail(op, "redis: a malformed limit override in the store");
			return;
		}
	}
}

static const struct redis_kind redis_limits_read_kind = {
	.kind = REDIS_OP_LIMITS_READ,
	.reply = redis_limits_read_reply,
	.script = redis_limits_read_script,
};

/*   EVALSHA <sha> 1 <prefix>:{<ns>:limits} <version>; EVAL after NOSCRIPT
 * (every node reads once a second: the script's text is not sent each
 * time) */
static int redis_limits_read(struct strategy *st, const char *ns, size_t ns_len, uint64_t have,
			     uint64_t *version, bool *changed, strategy_rows_cb cb, void *arg,
			     char errstr[STRATEGY_ERR_MAX])
{
	struct redis_strategy *s = redis_of(st);
	char num[REDIS_U64_MAX_LEN], *p, *first;
	struct redis_op *op;

	if (redis_check_ready(s, errstr) < 0)
		return -1;
	op = redis_op_single(s, &redis_limits_read_kind, NULL, arg,
			     64 + REDIS_BULK_MAX(40) +
			     REDIS_BULK_MAX(redis_limits_klen(s, ns, ns_len)) +
			     REDIS_BULK_MAX(REDIS_U64_MAX_LEN));
	if (op == NULL) {
		redis_seterr(errstr, "out of memory");
		return -1;
	}
	op->rows_cb = cb;
	op->version = version;
	op->changed = changed;
	*changed = false;
	op->calls[0].nargs = 5;
	op->calls[0].ro = true;
	p = redis_put_array(op->cmd, 5);
	p = redis_put_bulk(p, "EVALSHA", 7);
	p = redis_put_bulk(p, s->sha_limits, 40);
	op->calls[0].tail = (size_t)(p - op->cmd);
	p = redis_put_bulk(p, "1", 1);
	first = p;
	p = redis_put_limits_key(p, s, ns, ns_len);
	p = redis_put_bulk(p, num, redis_u64_dec(num, have));
	return redis_op_single_send(op, p, first, errstr);
}

/* ===================================================================== */
/* get_window, purge, ready, create, destroy                             */
/* ===================================================================== */

/* HMGET <hash> <key> <reset mark>: the count, and whether the hash is
 * marked reset. */
static void redis_window_reply(struct redis_call *c, const redisAsyncContext *ac,
			       const redisReply *reply)
{
	if (!redis_reply_failed(c, ac, reply)) {
		if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
		    redis_reply_number(reply->element[0], &c->op->batch->total) < 0) {
			redis_op_fail(c->op, "redis: HMGET returned %s, expected a number and the "
				      "reset mark", redis_reply_type_name(reply->type));
		} else {
			c->op->batch->reset = reply->element[1]->type != REDIS_REPLY_NIL;
			c->op->batch->ok = true;
		}
	}
}

static const struct redis_kind redis_window_kind = {
	.kind = REDIS_OP_WINDOW,
	.reply = redis_window_reply,
};

static int redis_get_window(struct strategy *st, struct strategy_counter *counter,
			    strategy_done_cb cb, void *arg, char errstr[STRATEGY_ERR_MAX])
{
	struct redis_strategy *s = redis_of(st);
	struct redis_op *op;
	char *p, *key;

	if (redis_check_ready(s, errstr) < 0)
		return -1;
	if (counter->size == 0) {
		redis_seterr(errstr, "window size 0");
		return -1;
	}
	counter->ok = false;
	counter->reset = false;
	op = redis_op_single(s, &redis_window_kind, cb, arg,
			     64 + redis_hkey_max(s, counter->ns_len) +
			     REDIS_BULK_MAX(counter->key_len) + REDIS_BULK_MAX(REDIS_RESET_LEN));
	if (op == NULL) {
		redis_seterr(errstr, "out of memory");
		return -1;
	}
	op->batch = counter;
	op->n = 1;
	p = redis_put_array(op->cmd, 4);
	p = redis_put_bulk(p, "HMGET", 5);
	key = p;
	p = redis_put_hkey(p, s, counter->ns, counter->ns_len,
			   redis_bucket(counter->key, counter->key_len), counter->size,
			   counter->start);
	p = redis_put_bulk(p, counter->key, counter->key_len);
	p = redis_put_bulk(p, REDIS_RESET_FIELD, REDIS_RESET_LEN);
	return redis_op_single_send(op, p, key, errstr);
}

/* No call: it finishes as it starts. */
static const struct redis_kind redis_purge_kind = {
	.kind = REDIS_OP_PURGE,
};

/* Every hash carries a TTL: nothing to delete. Completes with 0 (from the
 * loop, not from inside this call), connected or not. */
static int redis_purge(struct strategy *st, const char *ns, size_t ns_len, const uint32_t *sizes,
		       size_t nsizes, int64_t now, strategy_done_cb cb, void *arg,
		       char errstr[STRATEGY_ERR_MAX])
{
	struct redis_strategy *s = redis_of(st);
	struct redis_op *op;

	(void)ns;
	(void)ns_len;
	(void)sizes;
	(void)nsizes;
	(void)now;
	if (s->destroying) {
		redis_seterr(errstr, "not connected (instance destroyed)");
		return -1;
	}
	op = redis_op_new(s, &redis_purge_kind, cb, NULL, arg);
	if (op == NULL) {
		redis_seterr(errstr, "out of memory");
		return -1;
	}
	redis_op_finish(op);
	return 0;
}

static bool redis_ready(const struct strategy *st)
{
	const struct redis_strategy *s = (const struct redis_strategy *)(const void *)st;

	return !s->destroying && s->mode->ready(s);
}

static bool redis_connecting(const struct strategy *st)
{
	const struct redis_strategy *s = (const struct redis_strategy *)(const void *)st;

	return !s->destroying && !s->mode->ready(s) && s->mode->connecting(s);
}

static int redis_check_opts(const char *opts_json, char *err, size_t errlen)
{
	struct redis_opts o;
	int rc = redis_opts_parse(&o, opts_json, err, errlen);

	redis_opts_free(&o);
	return rc;
}

static void redis_free(struct redis_strategy *s)
{
	while (s->conns)
		redis_conn_free(s->conns);
	redis_opts_free(&s->o);
	free(s);
}

static void redis_core_free(struct store_core *c)
{
	redis_free(container_of(c, struct redis_strategy, core));
}

static const struct redis_mode_ops *const redis_modes[REDIS_MODE_COUNT] = {
	[REDIS_MODE_SINGLE] = &redis_single_mode,
	[REDIS_MODE_CLUSTER] = &redis_cluster_mode,
	[REDIS_MODE_SENTINEL] = &redis_sentinel_mode,
};

/* The kick (then the done queue): drops asked for from inside hiredis,
 * retired connections, the mode's deferred work. */
static void redis_on_kick(struct store_core *core)
{
	struct redis_strategy *s = container_of(core, struct redis_strategy, core);

	redis_conns_kick(s);
	if (s->mode->kick && !s->destroying)
		s->mode->kick(s);
}

static struct strategy *redis_create(struct ev_loop *loop, const char *opts_json, char *err,
				     size_t errlen)
{
	struct redis_strategy *s;
	char dummy[1];

	if (err == NULL || errlen == 0) {
		err = dummy;
		errlen = sizeof(dummy);
	}
	if (loop == NULL) {
		snprintf(err, errlen, "no event loop");
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (s == NULL) {
		snprintf(err, errlen, "redis: out of memory");
		return NULL;
	}
	if (redis_opts_parse(&s->o, opts_json, err, errlen) < 0) {
		redis_free(s);
		return NULL;
	}
	s->loop = loop;
	s->mode = redis_modes[s->o.mode];
	store_core_init(&s->core, loop, s->o.timeout_ms / 1000.0, redis_on_kick, redis_core_free);
	redis_waiting_init(s);
	if (s->mode->start(s, err, errlen) < 0) {
		s->destroying = true;
		if (s->mode->free)
			s->mode->free(s);
		redis_free(s);
		return NULL;
	}
	return (struct strategy *)(void *)s;
}

static void redis_destroy(struct strategy *st)
{
	struct redis_strategy *s = redis_of(st);

	if (s == NULL || s->destroying)
		return;
	s->destroying = true;
	/* every operation in flight fails and lands on the done queue, is
	 * delivered, and the instance is freed (later, from inside one of its
	 * callbacks) */
	redis_waiting_destroy(s);
	for (struct redis_conn *cn = s->conns; cn; cn = cn->next)
		redis_conn_close(cn, "instance destroyed", false);
	if (s->mode->free)
		s->mode->free(s);
	store_destroy(&s->core);
}

const struct strategy_ops redis_strategy = {
	.name = "redis",
	.check_opts = redis_check_opts,
	.create = redis_create,
	.destroy = redis_destroy,
	.push_diffs = redis_push_diffs,
	.get_counters = redis_get_counters,
	.get_window = redis_get_window,
	.purge = redis_purge,
	.admit = redis_admit,
	.heartbeat = redis_heartbeat,
	.forget = redis_forget,
	.limit_set = redis_limit_set,
	.limits_read = redis_limits_read,
	.ready = redis_ready,
	.connecting = redis_connecting,
};
