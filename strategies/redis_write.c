/*
 * redis_write.c - push_diffs and admit of the Redis strategy
 * (strategies/redis_int.h): a batch cut into script calls, grouped by hash and
 * by cluster slot, with their tokens; the replies read back into the
 * batch. The scripts are redis_script.c's, the key layout redis_resp.c's;
 * the calls leave and come back through redis_call.c.
 *
 * push_diffs groups the batch by hash and sends one script call per hash
 * (per REDIS_CHUNK_MAX counters), all pipelined at once. The script
 * (redis_push_script) reads the fields with one HMGET, adds the diffs in Lua,
 * writes every changed field back with one HSET, refreshes EXPIRE and
 * returns every total: integral totals as integers, others as "%.17g"
 * strings (exact for a double), and whether the hash is marked reset (its
 * REDIS_RESET_FIELD, read in the same HMGET: a key of it was forgotten,
 * strategy_counter.reset). A diff of "0" only reads: nothing is
 * created. One script call is atomic, so every counter is. Bulk HMGET/HSET
 * rather than one HINCRBYFLOAT per field because HINCRBYFLOAT costs the
 * server several microseconds each (it formats a long double and rewrites
 * itself as HSET for propagation); the bulk form is what makes 100k
 * counters per round trip affordable. Doubles are added in double (Lua 5.1
 * numbers), not long double: totals round-trip exactly through "%.17g".
 * The script is loaded with SCRIPT LOAD while connecting and called with
 * EVALSHA; a NOSCRIPT reply resends that one call as EVAL. A call whose
 * diffs are all 0 (an idle key's read, every sync cycle) is a plain HMGET
 * of its fields and the reset mark instead (the mark is one more field of
 * the same command: a forget costs an idle node no command): no token, no
 * WAIT, and a few microseconds of the server's CPU
 * where entering a script costs it 20 to 70.
 *
 * Push tokens (strategy.h: a push with a token is applied at most once).
 * Each script call of a push with a token also names a token key, in the
 * same hash tag (same Cluster slot) as its hash:
 *
 *   <prefix>:{<ns>:<bucket>}:tok:<token>:<size>:<start>:<call id>
 *
 * The script adds the diffs and sets that key (EX STRATEGY_TOKEN_TTL) in
 * the same atomic step; if the key already exists it adds nothing and
 * only returns the current totals. The call id is a 64-bit hash of the
 * call's fields and diffs (plus, for calls of one hash with identical
 * contents, how many follow it), in hex: a resend of the counters of the
 * calls that were not confirmed, in the same order, rebuilds the same
 * calls with the same ids, whichever of them the first try applied. A
 * reply confirms all of its call's counters or none. One EXISTS and one
 * SET per script call (per up to REDIS_CHUNK_MAX counters); without a
 * token the calls are as before (one key, no token key).
 *
 * admit (redis_admit_script): the admissions of one admit() (the sync
 * loop gathers those of one loop iteration) in one script call, or one per
 * slot with Redis Cluster (and per REDIS_ADMIT_CHUNK); the call decides
 * them in order, each reading its key's field in the current and previous
 * windows' hashes (one hash tag), adding the node's diff, deciding, adding
 * the hit and the grant; it writes each changed hash once at the end, and
 * with a token records every decision and grant in the call's token key,
 * so a resend returns them without adding anything.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "strategies/redis_int.h"

#define REDIS_CHUNK_MAX        2000    /* counters per script call: Lua's unpack()
					* stops at ~8000 values, and one call
					* blocks the server while it runs */
#define REDIS_ADMIT_CHUNK      256     /* admissions per script call */

/* Bytes of a script call besides its hash name and its counters:
 * "*<n>", EVALSHA, the SHA1, "1", the TTL, the count. */
#define REDIS_CALL_OVERHEAD \
	(3 + REDIS_U64_MAX_LEN + REDIS_BULK_MAX(7) + REDIS_BULK_MAX(40) + REDIS_BULK_MAX(1) + \
	 2 * REDIS_BULK_MAX(REDIS_U64_MAX_LEN))

/* ===================================================================== */
/* push_diffs                                                            */
/* ===================================================================== */

/* One hash of a batch while grouping. */
struct redis_group {
	const char *ns;
	size_t ns_len;
	int64_t start;
	uint32_t size;
	uint32_t bucket;
	uint32_t count;
	uint32_t pos;                   /* first slot in order[] */
	uint64_t hash;
};

struct redis_grouping {
	struct redis_group *g;
	size_t ng, gcap;
	uint32_t *table;                /* group index + 1, 0 = empty */
	size_t tcap;                    /* power of 2 */
};

static uint64_t redis_mix(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

/* A push token: NULL (none) or 1..STRATEGY_TOKEN_MAX bytes. */
static int redis_check_token(const char *token, size_t *len, char errstr[STRATEGY_ERR_MAX])
{
	*len = 0;
	if (token == NULL)
		return 0;
	*len = strnlen(token, STRATEGY_TOKEN_MAX + 1);
	if (*len == 0 || *len > STRATEGY_TOKEN_MAX) {
		redis_seterr(errstr, "token: expected 1 to %d bytes%s", STRATEGY_TOKEN_MAX,
			     *len ? ", got more" : ", got none");
		return -1;
	}
	return 0;
}

/* Writes the token ids of calls [from, to): each call's body hash mixed
 * with how many calls after it (up to `to`) have the same body. */
static void redis_put_tok_ids(struct redis_op *op, size_t from, size_t to)
{
	for (size_t i = from; i < to; i++) {
		uint64_t later = 0;

		if (op->calls[i].tok_id == 0)
			continue;       /* reads carry no token */
		for (size_t j = i + 1; j < to; j++)
			later += op->calls[j].tok_id != 0 &&
				 op->calls[j].body_hash == op->calls[i].body_hash;
		redis_put_tok_id(op->cmd + op->calls[i].tok_id,
				 redis_mix(op->calls[i].body_hash ^
					   redis_mix(later + 0x9e3779b97f4a7c15ULL)));
	}
}

static int redis_grouping_grow(struct redis_grouping *gr)
{
	size_t ncap = gr->tcap ? gr->tcap * 2 : 256;
	uint32_t *nt = calloc(ncap, sizeof(*nt));

	if (nt == NULL)
		return -1;
	for (size_t i = 0; i < gr->ng; i++) {
		size_t j = gr->g[i].hash & (ncap - 1);

		while (nt[j])
			j = (j + 1) & (ncap - 1);
		nt[j] = (uint32_t)i + 1;
	}
	free(gr->table);
	gr->table = nt;
	gr->tcap = ncap;
	return 0;
}

/* The group of counter c (bucket b, ns hash nh), created if new. Returns
 * its index or -1 (out of memory). */
static long redis_group_of(struct redis_grouping *gr, const struct strategy_counter *c,
			   unsigned b, uint64_t nh)
{
	uint64_t h = redis_mix(nh ^ redis_mix(((uint64_t)c->size << 32 | b) ^
					      redis_mix((uint64_t)c->start)));
	size_t j;

	if ((gr->ng + 1) * 2 > gr->tcap && redis_grouping_grow(gr) < 0)
		return -1;
	for (j = h & (gr->tcap - 1); gr->table[j]; j = (j + 1) & (gr->tcap - 1)) {
		struct redis_group *g = &gr->g[gr->table[j] - 1];

		if (g->hash == h && g->size == c->size && g->start == c->start && g->bucket == b &&
		    g->ns_len == c->ns_len &&
		    (g->ns == c->ns || memcmp(g->ns, c->ns, c->ns_len) == 0))
			return (long)(gr->table[j] - 1);
	}
	if (gr->ng == gr->gcap) {
		size_t ncap = gr->gcap ? gr->gcap * 2 : 64;
		struct redis_group *ng = realloc(gr->g, ncap * sizeof(*ng));

		if (ng == NULL)
			return -1;
		gr->g = ng;
		gr->gcap = ncap;
	}
	gr->g[gr->ng] = (struct redis_group){ .ns = c->ns, .ns_len = c->ns_len, .start = c->start,
					      .size = c->size, .bucket = b, .hash = h };
	gr->table[j] = (uint32_t)gr->ng + 1;
	return (long)gr->ng++;
}

/* Reply of one script call or HMGET: an array of c->n totals in c's
 * order, then the hash's reset mark (HMGET: its value or nil; the
 * script: 1 or 0). */
static void redis_push_reply(struct redis_call *c, const redisAsyncContext *ac,
			     const redisReply *reply)
{
	struct redis_op *op = c->op;

	if (redis_reply_failed(c, ac, reply)) {
		/* the op failed */
	} else if (reply->type != REDIS_REPLY_ARRAY || reply->elements != (size_t)c->n + 1) {
		redis_op_fail(op, "redis: %s returned %s of %zu elements, expected %u totals and "
			      "the reset mark", c->ro ? "HMGET" : "push script",
			      redis_reply_type_name(reply->type),
			      reply->type == REDIS_REPLY_ARRAY ? reply->elements : (size_t)0, c->n);
	} else {
		/* All or nothing: a call is confirmed as a whole, so that the
		 * counters a caller resends are whole calls (the token keys of
		 * a resend match those of the first try). */
		double total;
		uint32_t i;

		for (i = 0; i < c->n; i++) {
			if (redis_reply_number(reply->element[i], &total) < 0) {
				redis_op_fail(op, "redis: %s returned a %s total",
					      c->ro ? "HMGET" : "push script",
					      redis_reply_type_name(reply->element[i]->type));
				break;
			}
		}
		const redisReply *mark = reply->element[c->n];
		bool reset = mark->type != REDIS_REPLY_NIL &&
			     !(mark->type == REDIS_REPLY_INTEGER && mark->integer == 0);

		for (uint32_t j = 0; i == c->n && j < c->n; j++) {
			struct strategy_counter *ctr = &op->batch[op->order[c->first + j]];

			redis_reply_number(reply->element[j], &ctr->total);
			ctr->reset = reset;
		}
		if (i == c->n)
			redis_call_applied(c);
	}
}

/* This call was applied (and replicated, with wait_replicas). */
static void redis_push_commit(struct redis_call *c)
{
	for (uint32_t j = 0; j < c->n; j++)
		c->op->batch[c->op->order[c->first + j]].ok = true;
}

static const struct redis_kind redis_push_kind = {
	.kind = REDIS_OP_PUSH,
	.reply = redis_push_reply,
	.commit = redis_push_commit,
	.script = redis_push_script,
};

/* op's arena, one block: order[] (n batch or admission indexes), calls[]
 * (at most ncalls), then cmd_max bytes of commands. Returns 0, or -1 out
 * of memory. */
static int redis_arena(struct redis_op *op, size_t n, size_t ncalls, size_t cmd_max)
{
	size_t calls_off = (n * sizeof(uint32_t) + 15) & ~(size_t)15;
	size_t cmd_off = calls_off + ncalls * sizeof(struct redis_call);

	op->arena = malloc(cmd_off + cmd_max);
	if (op->arena == NULL)
		return -1;
	op->order = op->arena;
	op->calls = (struct redis_call *)(void *)((char *)op->arena + calls_off);
	op->cmd = (char *)op->arena + cmd_off;
	return 0;
}

/* A batch push_diffs can send: every window sized, every number finite.
 * Clears each counter's ok and reset. Returns 0, or -1 with errstr. */
static int redis_push_check(struct strategy_counter *batch, size_t n,
			    char errstr[STRATEGY_ERR_MAX])
{
	if (n > UINT32_MAX / 2) {
		redis_seterr(errstr, "batch of %zu counters is too large", n);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		if (batch[i].size == 0) {
			redis_seterr(errstr, "counter %zu: window size 0", i);
			return -1;
		}
		if (!isfinite(batch[i].diff) || !isfinite(batch[i].spent) ||
		    !isfinite(batch[i].returned)) {
			redis_seterr(errstr, "counter %zu: diff, spent or returned is not finite", i);
			return -1;
		}
		batch[i].ok = false;
		batch[i].reset = false;
	}
	return 0;
}

/* 1. Groups the batch by hash: gid[i] is counter i's group in gr, whose
 * counts are the counters of each. Returns 0, or -1 out of memory. */
static int redis_push_group(struct redis_grouping *gr, const struct strategy_counter *batch,
			    size_t n, uint32_t *gid)
{
	const char *last_ns = NULL;
	size_t last_ns_len = 0;
	uint64_t nh = 0;

	for (size_t i = 0; i < n; i++) {
		const struct strategy_counter *c = &batch[i];
		long g;

		if (c->ns != last_ns || c->ns_len != last_ns_len) {
			last_ns = c->ns;
			last_ns_len = c->ns_len;
			nh = redis_fnv1a(c->ns, c->ns_len, REDIS_FNV_BASIS);
		}
		g = redis_group_of(gr, c, redis_bucket(c->key, c->key_len), nh);
		if (g < 0)
			return -1;
		gid[i] = (uint32_t)g;
		gr->g[g].count++;
	}
	return 0;
}

/* 2. The arena of a push: order[], a call per chunk of each group, the
 * longest commands they can make. Returns 0, or -1 out of memory. */
static int redis_push_arena(const struct redis_strategy *s, struct redis_op *op,
			    const struct redis_grouping *gr, const struct strategy_counter *batch,
			    size_t n, bool token, size_t token_len)
{
	size_t ncalls = 0, cmd_max = 0;

	for (size_t g = 0; g < gr->ng; g++) {
		size_t chunks = (gr->g[g].count + REDIS_CHUNK_MAX - 1) / REDIS_CHUNK_MAX;

		ncalls += chunks;
		cmd_max += chunks * (REDIS_CALL_OVERHEAD + REDIS_BULK_MAX(1) +
				     REDIS_BULK_MAX(REDIS_RESET_LEN) +
				     2 * redis_hkey_max(s, gr->g[g].ns_len));
		if (token)
			cmd_max += chunks * redis_tkey_max(s, gr->g[g].ns_len, token_len);
	}
	for (size_t i = 0; i < n; i++)
		cmd_max += REDIS_BULK_MAX(batch[i].key_len) + 3 * REDIS_BULK_MAX(REDIS_DBL_MAX_LEN);
	return redis_arena(op, n, ncalls, cmd_max);
}

/* 3. order[]: the batch indexes, grouped (stable within a group); each
 * group's pos is left at its end. */
static void redis_push_order(struct redis_op *op, struct redis_grouping *gr,
			     const uint32_t *gid, size_t n)
{
	for (size_t g = 0, pos = 0; g < gr->ng; g++) {
		gr->g[g].pos = (uint32_t)pos;
		pos += gr->g[g].count;
	}
	for (size_t i = 0; i < n; i++)
		op->order[gr->g[gid[i]].pos++] = (uint32_t)i;
}

/* What the calls of one group share while they are written. */
struct redis_push_ctx {
	const struct redis_strategy *s;
	struct redis_op *op;
	const struct redis_group *grp;
	const char *token;              /* NULL: none */
	size_t token_len;
	char ttl[REDIS_U64_MAX_LEN];    /* the hash's EXPIRE, in decimal */
	size_t ttl_len;
};

/* The counter at position i of order[]. */
static const struct strategy_counter *redis_push_at(const struct redis_op *op, size_t i)
{
	return &op->batch[op->order[i]];
}

/* Call c of the k counters from order[first]: their reads only,
 *   HMGET <hash> <field 1..k> <reset mark>
 * no script, no token (nothing to apply twice), no WAIT. Written at p;
 * returns the end. */
static char *redis_push_hmget(const struct redis_push_ctx *x, struct redis_call *c,
			      size_t first, uint32_t k, char *p)
{
	struct redis_op *op = x->op;
	const struct redis_group *grp = x->grp;
	char *key;

	*c = (struct redis_call){ .op = op, .first = (uint32_t)first, .n = k, .ro = true,
				  .begin = (size_t)(p - op->cmd) };
	p = redis_put_array(p, 3 + k);
	p = redis_put_bulk(p, "HMGET", 5);
	key = p;
	p = redis_put_hkey(p, x->s, grp->ns, grp->ns_len, grp->bucket, grp->size, grp->start);
	c->slot = redis_bulk_slot(key);
	for (uint32_t i = 0; i < k; i++) {
		const struct strategy_counter *ctr = redis_push_at(op, first + i);

		p = redis_put_bulk(p, ctr->key, ctr->key_len);
	}
	p = redis_put_bulk(p, REDIS_RESET_FIELD, REDIS_RESET_LEN);
	c->end = (size_t)(p - op->cmd);
	return p;
}

/* Call c of the k counters from order[first]: the push script (drawn
 * above redis_push_calls), with the reservations' hash when un (a grant
 * spent or returned is not 0). Written at p; returns the end. */
static char *redis_push_eval(const struct redis_push_ctx *x, struct redis_call *c, size_t first,
			     uint32_t k, bool un, char *p)
{
	struct redis_op *op = x->op;
	const struct redis_group *grp = x->grp;
	bool token = x->token != NULL;
	char kbuf[REDIS_U64_MAX_LEN];
	size_t body;
	char *key;

	*c = (struct redis_call){ .op = op, .first = (uint32_t)first, .n = k,
				  .nargs = 7 + (token ? 1 : 0) + (un ? 1 : 0) + (un ? 4 : 2) * k,
				  .begin = (size_t)(p - op->cmd) };
	p = redis_put_array(p, c->nargs);
	p = redis_put_bulk(p, "EVALSHA", 7);
	p = redis_put_bulk(p, x->s->sha, 40);
	c->tail = (size_t)(p - op->cmd);
	p = redis_put_bulk(p, kbuf, redis_u64_dec(kbuf, 1 + (token ? 1 : 0) + (un ? 1 : 0)));
	key = p;
	p = redis_put_hkey(p, x->s, grp->ns, grp->ns_len, grp->bucket, grp->size, grp->start);
	c->slot = redis_bulk_slot(key);
	if (un)
		p = redis_put_hkey_of(p, x->s, grp->ns, grp->ns_len, grp->bucket, grp->size,
				      grp->start, true);
	if (token)
		p = redis_put_tkey(p, op->cmd, x->s, grp->ns, grp->ns_len, grp->bucket, grp->size,
				   grp->start, x->token, x->token_len, &c->tok_id);
	p = redis_put_bulk(p, x->ttl, x->ttl_len);
	p = redis_put_bulk(p, kbuf, redis_u64_dec(kbuf, k));
	body = (size_t)(p - op->cmd);
	p = redis_put_bulk(p, un ? "1" : "0", 1);
	for (uint32_t i = 0; i < k; i++) {
		const struct strategy_counter *ctr = redis_push_at(op, first + i);

		p = redis_put_bulk(p, ctr->key, ctr->key_len);
	}
	for (uint32_t i = 0; i < k; i++) {
		char d[REDIS_DBL_MAX_LEN];

		p = redis_put_bulk(p, d, redis_dbl_dec(d, redis_push_at(op, first + i)->diff));
	}
	for (uint32_t i = 0; un && i < 2 * k; i++) {
		const struct strategy_counter *ctr = redis_push_at(op, first + i % k);
		char d[REDIS_DBL_MAX_LEN];

		p = redis_put_bulk(p, d, redis_dbl_dec(d, i < k ? ctr->spent : ctr->returned));
	}
	c->end = (size_t)(p - op->cmd);
	if (token)
		c->body_hash = redis_hash_bytes(op->cmd + body, c->end - body);
	return p;
}

/*
 * 4. The calls of group grp, whose counters start at order[first]: one
 * per chunk of up to REDIS_CHUNK_MAX counters, written at p (returns the
 * end):
 *   EVALSHA <sha> 1 <hash> <ttl> <k> "0" <field 1..k> <diff 1..k>
 *   EVALSHA <sha> 2 <hash> <rhash> <ttl> <k> "1" <field 1..k> <diff 1..k>
 *           <spent 1..k> <returned 1..k>
 *   EVALSHA <sha> 2|3 <hash> [<rhash>] <token key> <ttl> <k> ...
 *                 ^ tail (kept for a NOSCRIPT resend as EVAL)
 * or, when the chunk only reads (every diff, spent and returned 0), an
 * HMGET (redis_push_hmget).
 * <rhash>: the hash of the reservations, named only when one of the
 * chunk's grants spent or returned is not 0 (a call of one key is
 * served by the importing master of a slot being migrated, one of
 * several missing keys is not: TRYAGAIN).
 *
 * With a token, each call gets its own token key, whose id must come
 * out the same when the caller resends only the counters of calls that
 * were not confirmed (whole calls, in the same order: they regroup and
 * rechunk into the same calls, only without the confirmed ones). The
 * chunk's index in its hash would not (a confirmed first chunk shifts
 * the others), so the id is a hash of the call's fields and diffs -
 * plus, to tell apart calls of one hash with the very same fields and
 * diffs (duplicates in a batch), how many such calls follow it in the
 * hash: replies arrive in order, so the calls that may have been
 * applied without being confirmed are the last ones of the push, and
 * every call that follows one of them is resent too.
 */
static char *redis_push_calls(const struct redis_strategy *s, struct redis_op *op,
			      const struct redis_group *grp, size_t first, const char *token,
			      size_t token_len, char *p)
{
	struct redis_push_ctx x = { .s = s, .op = op, .grp = grp, .token = token,
				    .token_len = token_len };
	size_t c0 = op->ncalls;

	x.ttl_len = redis_u64_dec(x.ttl, redis_ttl(grp->size));
	for (uint32_t done = 0; done < grp->count;) {
		struct redis_call *c = &op->calls[op->ncalls++];
		uint32_t k = grp->count - done > REDIS_CHUNK_MAX ? REDIS_CHUNK_MAX
								 : grp->count - done;
		bool ro = true, un = false;

		for (uint32_t i = 0; i < k; i++)
			un = un || redis_push_at(op, first + i)->spent != 0 ||
			     redis_push_at(op, first + i)->returned != 0;
		for (uint32_t i = 0; i < k && ro && !un; i++)
			ro = redis_push_at(op, first + i)->diff == 0;
		if (ro && !un)
			p = redis_push_hmget(&x, c, first, k, p);
		else
			p = redis_push_eval(&x, c, first, k, un, p);
		done += k;
		first += k;
	}
	if (token)
		redis_put_tok_ids(op, c0, op->ncalls);
	return p;
}

int redis_push_diffs(struct strategy *st, struct strategy_counter *batch, size_t n,
		     const char *token, strategy_done_cb cb, void *arg,
		     char errstr[STRATEGY_ERR_MAX])
{
	struct redis_strategy *s = redis_of(st);
	struct redis_grouping gr = { 0 };
	struct redis_op *op;
	uint32_t *gid = NULL;
	size_t token_len = 0;
	char *p;

	if (redis_check_ready(s, errstr) < 0 || redis_check_token(token, &token_len, errstr) < 0 ||
	    redis_push_check(batch, n, errstr) < 0)
		return -1;
	op = redis_op_new(s, &redis_push_kind, cb, NULL, arg);
	if (op == NULL)
		goto oom;
	op->batch = batch;
	op->n = n;
	if (n == 0) {
		redis_op_finish(op);
		return 0;
	}
	gid = malloc(n * sizeof(*gid));
	if (gid == NULL || redis_push_group(&gr, batch, n, gid) < 0 ||
	    redis_push_arena(s, op, &gr, batch, n, token != NULL, token_len) < 0)
		goto oom;
	redis_push_order(op, &gr, gid, n);
	free(gid);
	gid = NULL;
	p = op->cmd;
	for (size_t g = 0, first = 0; g < gr.ng; first += gr.g[g].count, g++)
		p = redis_push_calls(s, op, &gr.g[g], first, token, token_len, p);
	free(gr.g);
	free(gr.table);
	return redis_op_launch(op, errstr);
oom:
	free(gid);
	free(gr.g);
	free(gr.table);
	if (op)
		redis_op_free(op);
	redis_seterr(errstr, "out of memory");
	return -1;
}

/* ===================================================================== */
/* admit                                                                 */
/* ===================================================================== */

/* Reply of one admission call: 4 values per admission, in the call's
 * order. All or nothing, as for pushes. */
static void redis_admit_reply(struct redis_call *c, const redisAsyncContext *ac,
			      const redisReply *reply)
{
	struct redis_op *op = c->op;
	uint32_t j;

	if (redis_reply_failed(c, ac, reply))
		return;         /* the op failed */
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 4 * (size_t)c->n) {
		redis_op_fail(op, "redis: admit script returned %s of %zu elements, expected %u "
			      "times {current, previous, admitted, grant}",
			      redis_reply_type_name(reply->type),
			      reply->type == REDIS_REPLY_ARRAY ? reply->elements : (size_t)0, c->n);
		return;
	}
	for (j = 0; j < c->n; j++) {
		redisReply **e = reply->element + 4 * j;
		double cur, prev, grant;

		if (redis_reply_number(e[0], &cur) < 0 || redis_reply_number(e[1], &prev) < 0 ||
		    redis_reply_number(e[3], &grant) < 0 || !(grant >= 0) ||
		    e[2]->type != REDIS_REPLY_STRING || e[2]->len != 1 ||
		    (e[2]->str[0] != '0' && e[2]->str[0] != '1')) {
			redis_op_fail(op, "redis: admit script returned %s for admission %u, "
				      "expected {current, previous, admitted, grant}",
				      redis_reply_type_name(e[0]->type), j);
			return;
		}
	}
	for (j = 0; j < c->n; j++) {
		redisReply **e = reply->element + 4 * j;
		struct strategy_admit *ad = &op->admits[op->order[c->first + j]];

		redis_reply_number(e[0], &ad->current);
		redis_reply_number(e[1], &ad->previous);
		redis_reply_number(e[3], &ad->grant);
		ad->admitted = e[2]->str[0] == '1';
	}
	redis_call_applied(c);
}

static void redis_admit_commit(struct redis_call *c)
{
	for (uint32_t j = 0; j < c->n; j++)
		c->op->admits[c->op->order[c->first + j]].ok = true;
}

static const struct redis_kind redis_admit_kind = {
	.kind = REDIS_OP_ADMIT,
	.reply = redis_admit_reply,
	.commit = redis_admit_commit,
	.script = redis_admit_script,
};

/* A hash an admission call names: (ns, bucket, size, start), counts or
 * reservations. */
struct redis_ahash {
	const char *ns;
	size_t ns_len;
	unsigned bucket;
	uint32_t size;
	int64_t start;
	bool reserved;
};

/* Index (from 0) of hash h among the call's hashes, added if new. */
static uint32_t redis_ahash_index(struct redis_ahash *hs, uint32_t *nh, const struct redis_ahash *h)
{
	for (uint32_t i = 0; i < *nh; i++)
		if (hs[i].start == h->start && hs[i].size == h->size &&
		    hs[i].bucket == h->bucket && hs[i].ns_len == h->ns_len &&
		    hs[i].reserved == h->reserved &&
		    (hs[i].ns == h->ns || memcmp(hs[i].ns, h->ns, h->ns_len) == 0))
			return i;
	hs[*nh] = *h;
	return (*nh)++;
}


/* A batch admit can send: store_admit_check() (which clears the
 * outputs), and with Redis Cluster namespaces short enough for a hash
 * tag. Returns 0, or -1 with errstr. */
static int redis_admit_check(struct strategy_admit *a, size_t n, bool cluster,
			     char errstr[STRATEGY_ERR_MAX])
{
	if (n > UINT32_MAX / 4) {
		redis_seterr(errstr, "batch of %zu admissions is too large", n);
		return -1;
	}
	if (store_admit_check(a, n, errstr) < 0)
		return -1;
	for (size_t i = 0; cluster && i < n; i++) {
		if (a[i].ns_len > REDIS_NS_TAG_MAX) {
			redis_seterr(errstr, "admission %zu: namespace of %zu bytes, at most %d", i,
				     a[i].ns_len, REDIS_NS_TAG_MAX);
			return -1;
		}
	}
	return 0;
}

/* 2. The arena of an admit: order[], at most one call per admission, the
 * longest commands they can make. Returns 0, or -1 out of memory. */
static int redis_admit_arena(const struct redis_strategy *s, struct redis_op *op,
			     const struct strategy_admit *a, size_t n, bool token,
			     size_t token_len)
{
	size_t cmd_max = 0;

	for (size_t i = 0; i < n; i++) {
		cmd_max += 4 * redis_hkey_max(s, a[i].ns_len) + REDIS_BULK_MAX(a[i].key_len) +
			   12 * REDIS_BULK_MAX(REDIS_DBL_MAX_LEN) + REDIS_BULK_MAX(a[i].lease_len);
		cmd_max += REDIS_CALL_OVERHEAD + 3 * REDIS_BULK_MAX(REDIS_U64_MAX_LEN);
		if (token)
			cmd_max += redis_tkey_max(s, a[i].ns_len, token_len);
	}
	return redis_arena(op, n, n, cmd_max);
}

/* 3. order[]: admissions grouped by slot (slot[i]: admission i's), in
 * their order within it (one pass per distinct slot: one pass for a
 * single server). placed[]: n flags, all false, used up. */
static void redis_admit_order(struct redis_op *op, const uint16_t *slot, bool *placed, size_t n)
{
	for (size_t i = 0, np = 0; i < n; i++) {
		if (placed[i])
			continue;
		for (size_t j = i; j < n; j++) {
			if (!placed[j] && slot[j] == slot[i]) {
				placed[j] = true;
				op->order[np++] = (uint32_t)j;
			}
		}
	}
}

/* The hashes the k admissions from order[first] name, in hs[0 .. return):
 * per admission its current and previous windows' and their
 * reservations', aidx[4 * j + w] the index in hs of admission j's hash w. */
static uint32_t redis_admit_hashes(const struct redis_op *op, const struct strategy_admit *a,
				   size_t first, uint32_t k, struct redis_ahash *hs,
				   uint32_t *aidx)
{
	uint32_t nh = 0;

	for (uint32_t j = 0; j < k; j++) {
		const struct strategy_admit *ad = &a[op->order[first + j]];
		struct redis_ahash h = { .ns = ad->ns, .ns_len = ad->ns_len,
					 .bucket = redis_bucket(ad->key, ad->key_len),
					 .size = ad->size, .start = ad->start };

		/* current, previous; their reservations */
		for (unsigned w = 0; w < 4; w++) {
			h.start = ad->start - (w & 1 ? (int64_t)ad->size : 0);
			h.reserved = w >= 2;
			aidx[4 * j + w] = redis_ahash_index(hs, &nh, &h);
		}
	}
	return nh;
}

/* The head of admission call c (c->nargs set) at p, up to its number of
 * keys: "EVALSHA <sha> <nkeys>", c->tail after the sha (for a NOSCRIPT
 * resend). Returns the end. */
static char *redis_admit_head(char *p, const struct redis_op *op, struct redis_call *c,
			      const char *sha, uint32_t nkeys)
{
	char num[REDIS_U64_MAX_LEN];

	p = redis_put_array(p, c->nargs);
	p = redis_put_bulk(p, "EVALSHA", 7);
	p = redis_put_bulk(p, sha, 40);
	c->tail = (size_t)(p - op->cmd);
	return redis_put_bulk(p, num, redis_u64_dec(num, nkeys));
}

/* 4. Call c of the k admissions from order[first] (one slot's), drawn
 * above redis_admit, written at p; returns the end. */
static char *redis_admit_call(const struct redis_strategy *s, struct redis_op *op,
			      struct redis_call *c, size_t first, uint32_t k, const char *token,
			      size_t token_len, char *p)
{
	const struct strategy_admit *a = op->admits;
	struct redis_ahash hs[4 * REDIS_ADMIT_CHUNK];
	uint32_t aidx[4 * REDIS_ADMIT_CHUNK];
	uint32_t nh = redis_admit_hashes(op, a, first, k, hs, aidx), base = token ? 2 : 1;
	char num[REDIS_DBL_MAX_LEN];
	char *key = NULL;
	size_t body;

	*c = (struct redis_call){ .op = op, .first = (uint32_t)first, .n = k,
				  .nargs = 3 + (token ? 1 : 0) + nh + 2 + 13 * k,
				  .begin = (size_t)(p - op->cmd) };
	p = redis_admit_head(p, op, c, s->sha_admit, nh + (token ? 1 : 0));
	if (token)
		p = redis_put_tkey(p, op->cmd, s, hs[0].ns, hs[0].ns_len, hs[0].bucket,
				   hs[0].size, hs[0].start, token, token_len, &c->tok_id);
	body = (size_t)(p - op->cmd);
	for (uint32_t h = 0; h < nh; h++) {
		char *hk = p;

		p = redis_put_hkey_of(p, s, hs[h].ns, hs[h].ns_len, hs[h].bucket, hs[h].size,
				      hs[h].start, hs[h].reserved);
		if (h == 0)
			key = hk;
	}
	c->slot = redis_bulk_slot(key);
	p = redis_put_bulk(p, token ? "1" : "0", 1);
	p = redis_put_bulk(p, num, redis_u64_dec(num, k));
	for (uint32_t j = 0; j < k; j++) {
		const struct strategy_admit *ad = &a[op->order[first + j]];

		for (unsigned w = 0; w < 4; w++)
			p = redis_put_bulk(p, num, redis_u64_dec(num, base + aidx[4 * j + w]));
		p = redis_put_bulk(p, num, redis_u64_dec(num, redis_ttl(ad->size)));
		p = redis_put_bulk(p, ad->key, ad->key_len);
		p = redis_put_bulk(p, num, redis_dbl_dec(num, ad->diff));
		p = redis_put_bulk(p, num, redis_dbl_dec(num, ad->cost));
		p = redis_put_bulk(p, num, redis_dbl_dec(num, ad->limit));
		p = redis_put_bulk(p, num, redis_dbl_dec(num, ad->weight));
		p = redis_put_bulk(p, ad->count_denied ? "1" : "0", 1);
		p = redis_put_bulk(p, num, redis_dbl_dec(num, ad->want));
		p = redis_put_bulk(p, num, redis_u64_dec(num, ad->nodes));
	}
	c->end = (size_t)(p - op->cmd);
	if (token)
		c->body_hash = redis_hash_bytes(op->cmd + body, c->end - body);
	return p;
}

/* The TAT key of admission ad as one bulk string:
 * "<prefix>:{<ns>:<bucket>}:g:<size>:<key>" (the key's hash tag: the slot
 * of its window hashes); a lease step's, ":c:" for ":g:". At most
 * redis_hkey_max() + REDIS_BULK_MAX(key_len) bytes. */
static char *redis_put_gkey(char *p, const struct redis_strategy *s,
			    const struct strategy_admit *ad)
{
	char b[REDIS_U64_MAX_LEN], z[REDIS_U64_MAX_LEN];
	size_t bl = redis_u64_dec(b, redis_bucket(ad->key, ad->key_len));
	size_t zl = redis_u64_dec(z, ad->size);
	size_t len = s->o.prefix_len + 3 + redis_tag_mark(ad->ns, ad->ns_len) + ad->ns_len + bl +
		     4 + zl + 1 + ad->key_len;

	*p++ = '$';
	p += redis_u64_dec(p, len);
	p = redis_put_crlf(p);
	p = redis_put_tag(p, s, ad->ns, ad->ns_len, b, bl);
	memcpy(p, ad->step == STRATEGY_STEP_LEASE ? "}:c:" : "}:g:", 4);
	p += 4;
	memcpy(p, z, zl);
	p += zl;
	*p++ = ':';
	memcpy(p, ad->key, ad->key_len);
	p += ad->key_len;
	return redis_put_crlf(p);
}

static const struct redis_kind redis_gcra_kind = {
	.kind = REDIS_OP_ADMIT,
	.reply = redis_admit_reply,
	.commit = redis_admit_commit,
	.script = redis_gcra_script,
};

static const struct redis_kind redis_lease_kind = {
	.kind = REDIS_OP_ADMIT,
	.reply = redis_admit_reply,
	.commit = redis_admit_commit,
	.script = redis_lease_script,
};

/* 4, GCRA's: call c of the k TAT steps from order[first] (one slot's),
 * as redis_admit_call:
 *   EVALSHA <sha> <m> [<token key>] <TAT key 1..m> <"1"|"0"> <k> <5 per admission>
 * a key named twice in the call once (its index in KEYS per admission).
 * The lease steps' the same way, the lease script's 5 per admission. */
static char *redis_gcra_call(const struct redis_strategy *s, struct redis_op *op,
			     struct redis_call *c, size_t first, uint32_t k, const char *token,
			     size_t token_len, char *p)
{
	const struct strategy_admit *a = op->admits;
	uint32_t kidx[REDIS_ADMIT_CHUNK], nk = 0, base = token ? 2 : 1;
	const struct strategy_admit *keys[REDIS_ADMIT_CHUNK];
	char num[REDIS_DBL_MAX_LEN];
	size_t body;

	for (uint32_t j = 0; j < k; j++) {
		const struct strategy_admit *ad = &a[op->order[first + j]];
		uint32_t i = 0;

		while (i < nk && !(keys[i]->size == ad->size && keys[i]->key_len == ad->key_len &&
				   keys[i]->ns_len == ad->ns_len &&
				   memcmp(keys[i]->key, ad->key, ad->key_len) == 0 &&
				   memcmp(keys[i]->ns, ad->ns, ad->ns_len) == 0))
			i++;
		if (i == nk)
			keys[nk++] = ad;
		kidx[j] = i;
	}
	*c = (struct redis_call){ .op = op, .first = (uint32_t)first, .n = k,
				  .nargs = 3 + (token ? 1 : 0) + nk + 2 + 5 * k,
				  .begin = (size_t)(p - op->cmd) };
	bool lease = a[op->order[first]].step == STRATEGY_STEP_LEASE;
	p = redis_admit_head(p, op, c, lease ? s->sha_lease : s->sha_gcra, nk + (token ? 1 : 0));
	if (token)
		p = redis_put_tkey(p, op->cmd, s, keys[0]->ns, keys[0]->ns_len,
				   redis_bucket(keys[0]->key, keys[0]->key_len), keys[0]->size, -1,
				   token, token_len, &c->tok_id);
	body = (size_t)(p - op->cmd);
	for (uint32_t i = 0; i < nk; i++) {
		char *gk = p;

		p = redis_put_gkey(p, s, keys[i]);
		if (i == 0)
			c->slot = redis_bulk_slot(gk);
	}
	p = redis_put_bulk(p, token ? "1" : "0", 1);
	p = redis_put_bulk(p, num, redis_u64_dec(num, k));
	for (uint32_t j = 0; j < k; j++) {
		const struct strategy_admit *ad = &a[op->order[first + j]];
		double T = (double)ad->size / ad->limit;

		p = redis_put_bulk(p, num, redis_u64_dec(num, base + kidx[j]));
		if (lease) {
			p = redis_put_bulk(p, ad->lease, ad->lease_len);
			p = redis_put_bulk(p, num, redis_u64_dec(num, (uint64_t)ceil(ad->lease_s * 1000)));
			p = redis_put_bulk(p, num, redis_dbl_dec(num, ad->cost));
			p = redis_put_bulk(p, num, redis_dbl_dec(num, ad->limit));
			continue;
		}
		p = redis_put_bulk(p, num, redis_dbl_dec(num, ad->diff));
		p = redis_put_bulk(p, num, redis_dbl_dec(num, T));
		p = redis_put_bulk(p, num, redis_dbl_dec(num, ad->cost));
		p = redis_put_bulk(p, num, redis_dbl_dec(num, ad->burst * T));
	}
	c->end = (size_t)(p - op->cmd);
	if (token)
		c->body_hash = redis_hash_bytes(op->cmd + body, c->end - body);
	return p;
}

/*
 * The admissions of one loop iteration in as few script calls as the
 * servers allow (the window counter's script, or the TAT script when the
 * call's admissions are GCRA's: strategy_admit.step): one (per REDIS_ADMIT_CHUNK admissions) for a single
 * server or a sentinel's master; one per slot for a Redis Cluster, whose
 * scripts may touch one slot only. The admissions keep their order within
 * a call (two of one key see each other), and calls of one slot leave in
 * order.
 *   EVALSHA <sha> <k> [<token key>] <hash 1..m> <"1"|"0"> <n> <13 per admission>
 *                 ^ tail (kept for a NOSCRIPT resend as EVAL)
 * With a token, a call's token key is in its first admission's hash tag;
 * its id is a hash of everything after it plus how many identical calls
 * of its slot follow it (as for push_diffs): stable when the caller
 * resends the same admissions, or only those of the calls that were not
 * confirmed, in the same order.
 */
int redis_admit(struct strategy *st, struct strategy_admit *a, size_t n, const char *token,
		strategy_done_cb cb, void *arg, char errstr[STRATEGY_ERR_MAX])
{
	struct redis_strategy *s = redis_of(st);
	bool cluster = s->o.mode == REDIS_MODE_CLUSTER;
	struct redis_op *op;
	uint16_t *slot = NULL;
	bool *placed = NULL;
	size_t token_len = 0;
	char *p;

	if (redis_check_ready(s, errstr) < 0 || redis_check_token(token, &token_len, errstr) < 0 ||
	    redis_admit_check(a, n, cluster, errstr) < 0)
		return -1;
	bool tat = n > 0 && a[0].step != STRATEGY_STEP_WINDOW;
	op = redis_op_new(s, !tat ? &redis_admit_kind : a[0].step == STRATEGY_STEP_LEASE
			     ? &redis_lease_kind : &redis_gcra_kind, cb, NULL, arg);
	if (op == NULL)
		goto oom;
	op->admits = a;
	op->n = n;
	if (n == 0) {
		redis_op_finish(op);
		return 0;
	}
	slot = malloc(n * (sizeof(*slot) + sizeof(*placed)));
	if (slot == NULL)
		goto oom;
	placed = (bool *)(slot + n);
	/* 1. each admission's slot (a single server: all one) */
	for (size_t i = 0; i < n; i++) {
		slot[i] = cluster ? redis_tag_slot(a[i].ns, a[i].ns_len,
						   redis_bucket(a[i].key, a[i].key_len)) : 0;
		placed[i] = false;
	}
	if (redis_admit_arena(s, op, a, n, token != NULL, token_len) < 0)
		goto oom;
	redis_admit_order(op, slot, placed, n);
	/* 4. one call per chunk of a slot's run in order[] */
	p = op->cmd;
	for (size_t first = 0, c0 = 0; first < n;) {
		struct redis_call *c = &op->calls[op->ncalls++];
		uint16_t sl = slot[op->order[first]];
		uint32_t k = 0;

		while (first + k < n && k < REDIS_ADMIT_CHUNK && slot[op->order[first + k]] == sl)
			k++;
		p = (tat ? redis_gcra_call : redis_admit_call)(s, op, c, first, k, token,
							       token_len, p);
		first += k;
		if (first == n || slot[op->order[first]] != sl) {
			if (token)
				redis_put_tok_ids(op, c0, op->ncalls);
			c0 = op->ncalls;
		}
	}
	free(slot);
	return redis_op_launch(op, errstr);
oom:
	free(slot);
	if (op)
		redis_op_free(op);
	redis_seterr(errstr, "out of memory");
	return -1;
}
