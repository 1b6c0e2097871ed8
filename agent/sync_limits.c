/*
 * sync_limits.c - limits per key set at run time, kept in the store of a
 * namespace that syncs (docs/CLUSTER.md, "Limits per key"):
 *
 *   sync_limit_set    an operator's PUT or DELETE /limits: one
 *                     strategy_ops.limit_set; once the store confirms,
 *                     this node's table (agent/limits.h) is written too,
 *                     whether the caller still waits or not
 *   sync_limits_poll  the sync cycle's holder, once a period: one
 *                     strategy_ops.limits_read with the version this node
 *                     applied last; when the store's moved, its overrides
 *                     replace the node's (limits_replace), so every node
 *                     has them within one sync period, and a restarted
 *                     node (versions start at 0) reads them all again
 *
 * Neither is a call in doubt: setting a limit again is harmless, and a
 * read is only a read. sync_stop destroys the stores, which fail every
 * call in flight, so both end before their sync is gone.
 */
#include "agent/sync_int.h"

#include <stdlib.h>
#include <string.h>

#include "agent/limits.h"
#include "agent/log.h"

struct sync_limit {
	sync_limit_cb cb;             /* the caller, until answered or detached */
	void *arg;
	struct limits *l;
	unsigned sid;
	size_t bound;
	uint32_t size;
	int64_t limit;
	bool full;
	char ns[NS_NAME_MAX];
	size_t keylen;
	char key[LIMITS_KEY_MAX];
};

static void sync_on_limit_set(void *arg, int status, const char *errstr)
{
	struct sync_limit *x = arg;

	/* Confirmed: this node has it at once (a put over this node's bound
	 * waits for the next read, which says so in the log). */
	if (status == 0 && !x->full) {
		if (x->limit < 0)
			limits_del(x->l, x->sid, x->size, x->key, x->keylen);
		else
			limits_put(x->l, x->sid, x->size, x->key, x->keylen, x->limit, x->bound, NULL);
	}
	if (x->cb)
		x->cb(x->arg, status, x->full, status == 0 ? NULL : errstr);
	free(x);
}

int sync_limit_set(struct sync *sy, unsigned ns, uint32_t size, const char *key, size_t keylen,
		   int64_t limit, sync_limit_cb cb, void *arg, struct sync_limit **out,
		   char why[STRATEGY_ERR_MAX])
{
	struct sync_ns *sn = sy && !sy->stopping ? sync_find_ns(sy, ns) : NULL;
	struct sync_limit *x;

	*out = NULL;
	if (!sn || !sn->ops->limit_set || keylen == 0 || keylen > LIMITS_KEY_MAX) {
		snprintf(why, STRATEGY_ERR_MAX, "this worker does not sync the namespace");
		return -1;
	}
	if (!(x = calloc(1, sizeof(*x)))) {
		snprintf(why, STRATEGY_ERR_MAX, "out of memory");
		return -1;
	}
	x->l = rl_limits(sy->rl);
	x->sid = sn->sid;
	x->bound = ns_max_overrides(sn->def);
	x->size = size;
	x->limit = limit;
	snprintf(x->ns, sizeof(x->ns), "%s", sn->def->name);
	memcpy(x->key, key, keylen);
	x->keylen = keylen;
	why[0] = '\0';
	if (sn->ops->limit_set(sn->st, x->ns, strlen(x->ns), x->key, keylen, size, limit,
			       x->bound, &x->full, sync_on_limit_set, x, why) < 0) {
		free(x);
		return -1;
	}
	x->cb = cb;
	x->arg = arg;
	*out = x;
	return 0;
}

void sync_limit_detach(struct sync_limit *x)
{
	if (x) {
		x->cb = NULL;
		x->arg = NULL;
	}
}

/* The store's overrides (rows: key, size, count = the limit) made this
 * node's, then the version they were read at. */
static void sync_on_limits_read(void *arg, int status, const char *errstr,
				const struct strategy_row *rows, size_t n)
{
	struct sync_ns *sn = arg;
	struct limits *l = rl_limits(sn->sy->rl);
	struct limits_entry *e = NULL;
	size_t k = 0, kept = 0;

	sn->limits_busy = false;
	if (status != 0) {
		LOG(LOG_DEBUG, "namespace %s: limits per key not read: %s", sn->def->name,
		    errstr ? errstr : "the store failed");
		return;
	}
	if (!sn->limits_changed || !l)
		return;
	if (n && !(e = calloc(n, sizeof(*e)))) {
		LOG(LOG_ERR, "namespace %s: out of memory for %zu limits per key", sn->def->name, n);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		const struct strategy_row *r = &rows[i];
		if (r->key_len == 0 || r->key_len > LIMITS_KEY_MAX || r->size == 0 ||
		    !(r->count >= 0 && r->count <= (double)NS_LIMIT_MAX))
			continue;
		e[k].window = r->size;
		e[k].limit = (int64_t)r->count;
		e[k].len = (uint8_t)r->key_len;
		memcpy(e[k].key, r->key, r->key_len);
		k++;
	}
	int rc = limits_replace(l, sn->sid, e, k, ns_max_overrides(sn->def), &kept);
	free(e);
	if (rc != 0) {
		LOG(LOG_WARN, "namespace %s: limits per key not applied: %s (again next cycle)",
		    sn->def->name, limits_err_str(rc));
		return;
	}
	if (kept < n)
		LOG(LOG_WARN, "namespace %s: %zu of the store's %zu limits per key applied "
		    "(max_limit_overrides %zu, or malformed ones)", sn->def->name, kept, n,
		    ns_max_overrides(sn->def));
	limits_set_version(l, sn->sid, sn->limits_version);
}

void sync_limits_poll(struct sync_ns *sn)
{
	struct limits *l = rl_limits(sn->sy->rl);
	char err[STRATEGY_ERR_MAX];

	if (!l || sn->limits_busy || !sn->ops->limits_read || !sn->ops->ready(sn->st))
		return;
	sn->limits_busy = true;
	if (sn->ops->limits_read(sn->st, sn->def->name, strlen(sn->def->name),
				 limits_version(l, sn->sid), &sn->limits_version,
				 &sn->limits_changed, sync_on_limits_read, sn, err) < 0)
		sn->limits_busy = false;
}
