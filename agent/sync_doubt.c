/*
 * sync_doubt.c - calls in doubt (docs/CLUSTER.md, "Words"): the one list
 * of the calls a sync sent and the store never answered, whoever made
 * them. The store may have applied such a call, or may still; so it is
 * kept, per namespace, and sent again as it was, with its token, until
 * the store answers: the store applies a token once (now, or never again
 * if it had), and says what it counted for it.
 *
 *   add      a call goes on its namespace's list: a call of hits
 *            answered in part or not at all (sync_doubt_keep_hits, from
 *            sync_gather.c; a sync cycle's push at a reload, from
 *            sync_cycle.c), a key's forget (sync_forget.c), which is on
 *            the list from its first send
 *   resend   one call per namespace at a time, the oldest not out, when
 *            the store is ready: polled every SYNC_DOUBT_POLL while the
 *            list holds any, at each sync cycle before its push, and at
 *            once when one is settled
 *   settle   the store's answer is taken in by the call's kind
 *            (struct sync_doubt_ops.settle); once nothing of a call is left
 *            in doubt, it leaves the list
 *   handover at a reload the list goes to the next sync (sync_doubts_take,
 *            sync_doubts_give), which resends it with the same tokens
 *   drop     at stop, or past its kind's ttl (tokens live
 *            STRATEGY_TOKEN_TTL in the store), logged
 *
 * The kinds: SYNC_DOUBT_HITS (here: a push of sync_rate 0, admissions, a
 * sync cycle's push handed over), whose hits the node counted in its
 * diffs meanwhile (an admission decided by the node: degraded): what the
 * store says it counted for them is taken back from the diffs, so each
 * hit reaches the store once. SYNC_DOUBT_FORGET (sync_forget.c). This
 * file calls none of the files that add calls: a kind's own steps come
 * through its ops.
 */
#include "agent/sync_int.h"
#include "strategies/container.h"

#include <stdlib.h>
#include <string.h>

#include "agent/log.h"

#define SYNC_DOUBT_MAX   256      /* calls of hits in doubt kept per namespace */
#define SYNC_DOUBT_POLL  0.05     /* how often the list looks at the stores */
#define SYNC_DOUBT_TTL   300.0    /* calls of hits given up after this */

/* Lines about one hit in doubt (one that could not be settled) come at
 * most once a second per process, with the number held back. */
static struct log_limit sync_doubt_hit_log;
#define SYNC_DOUBT_LOG(level, fmt, ...)                                                 \
	do {                                                                            \
		if ((level) <= log_level && log_limit(&sync_doubt_hit_log, rl_now()))     \
			LOG((level), fmt "%s", __VA_ARGS__,                              \
			    log_limit_suppressed(&sync_doubt_hit_log));                  \
	} while (0)

static void sync_on_doubt_answer(void *arg, int status, const char *errstr);

/* ---- the list ---- */

static void sync_doubt_unlink(struct sync_ns *sn, struct sync_doubt *d)
{
	for (struct sync_doubt **p = &sn->doubts; *p; p = &(*p)->next) {
		if (*p == d) {
			*p = d->next;
			sn->ndoubts[d->ops->kind]--;
			break;
		}
	}
	if (sn->doubt_out == d)
		sn->doubt_out = NULL;
	d->next = NULL;
}

/* d leaves for good: its waiter hears, it is freed. */
static void sync_doubt_discard(struct sync_doubt *d)
{
	if (d->ops->leave)
		d->ops->leave(d);
	free(d->ns_name), free(d->store), free(d->opts);
	d->ns_name = d->store = d->opts = NULL;
	d->ops->free(d);
}

/* Logs, at most every SYNC_LOG_EVERY per sync, calls dropped. */
static void sync_doubt_log(struct sync *sy, const char *ns, const struct sync_doubt_ops *ops,
			   const char *why)
{
	double now = ev_now(sy->loop);

	if (now - sy->doubt_log < SYNC_LOG_EVERY && sy->doubt_log > 0)
		return;
	sy->doubt_log = now;
	LOG(LOG_WARN, "namespace \"%s\": %s in doubt given up (%s): %s", ns, ops->what, why,
	    ops->if_dropped);
}

static void sync_doubt_append(struct sync_ns *sn, struct sync_doubt *d)
{
	struct sync_doubt **tail;
	struct sync *sy = sn->sy;

	for (tail = &sn->doubts; *tail; tail = &(*tail)->next)
		;
	d->next = NULL;
	d->sn = sn;
	*tail = d;
	sn->ndoubts[d->ops->kind]++;
	if (!ev_is_active(&sy->doubt_timer))
		ev_timer_again(sy->loop, &sy->doubt_timer);
}

int sync_doubt_add(struct sync_ns *sn, struct sync_doubt *d)
{
	if (d->ops->max && sn->ndoubts[d->ops->kind] >= d->ops->max) {
		sync_doubt_log(sn->sy, sn->def->name, d->ops, "too many");
		sync_doubt_discard(d);
		return -1;
	}
	d->since = ev_now(sn->sy->loop);
	d->out = false;
	sync_doubt_append(sn, d);
	return 0;
}

int sync_doubt_send(struct sync_ns *sn, struct sync_doubt *d, char err[STRATEGY_ERR_MAX])
{
	if (d->out)
		return 0;
	if (!sn->ops->ready(sn->st)) {
		snprintf(err, STRATEGY_ERR_MAX, "not connected");
		return -1;
	}
	d->out = true;
	if (d->ops->send(sn, d, sync_on_doubt_answer, err) < 0) {
		d->out = false;
		return -1;
	}
	return 0;
}

void sync_doubts_resend(struct sync_ns *sn)
{
	char err[STRATEGY_ERR_MAX];
	struct sync_doubt *d = sn->doubts;

	if (sn->doubt_out || sn->sy->stopping)
		return;
	while (d && d->out)
		d = d->next;
	if (d && sync_doubt_send(sn, d, err) == 0)
		sn->doubt_out = d;
}

static void sync_on_doubt_answer(void *arg, int status, const char *errstr)
{
	struct sync_doubt *d = arg;
	struct sync_ns *sn = d->sn;

	d->out = false;
	/* Handed over (the next sync sends it again), or stopping (it is
	 * dropped): its answer changes nothing. */
	if (!sn)
		return;
	if (sn->doubt_out == d)
		sn->doubt_out = NULL;
	if (sn->sy->stopping)
		return;
	if (!d->ops->settle(sn, d, status, errstr))
		return;
	sync_doubt_unlink(sn, d);
	sync_doubt_discard(d);
	sync_doubts_resend(sn);      /* the next at once: a reload waits for them */
}

/* Gives up the calls of sn past their kind's ttl, not out. */
static void sync_doubts_expire(struct sync_ns *sn, double now)
{
	struct sync_doubt *d = sn->doubts, *next;

	for (; d; d = next) {
		next = d->next;
		if (d->out || !(d->ops->ttl > 0) || now - d->since <= d->ops->ttl)
			continue;
		sync_doubt_log(sn->sy, sn->def->name, d->ops, "the store did not answer in time");
		sync_doubt_unlink(sn, d);
		sync_doubt_discard(d);
	}
}

/* Every namespace's oldest call in doubt is sent again, when its store is
 * ready; the timer stops with the last call. */
static void sync_on_doubt_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct sync *sy = container_of(w, struct sync, doubt_timer);
	bool any = false;
	(void)revents;

	for (size_t i = 0; i < sy->n; i++) {
		struct sync_ns *sn = &sy->ns[i];

		sync_doubts_expire(sn, ev_now(loop));
		any = any || sn->doubts;
		sync_doubts_resend(sn);
	}
	if (!any)
		ev_timer_stop(loop, w);
}

size_t sync_doubts_count(const struct sync *sy, enum sync_doubt_kind kind)
{
	size_t n = 0;

	for (size_t i = 0; sy && i < sy->n; i++)
		n += sy->ns[i].ndoubts[kind];
	return n;
}

void sync_doubts_init(struct sync *sy)
{
	ev_init(&sy->doubt_timer, sync_on_doubt_timer);
	sy->doubt_timer.repeat = SYNC_DOUBT_POLL;
}

void sync_doubts_stop(struct sync *sy)
{
	ev_timer_stop(sy->loop, &sy->doubt_timer);
}

void sync_doubts_drop(struct sync_ns *sn)
{
	for (size_t k = 0; k < SYNC_DOUBT_KINDS; k++) {
		const struct sync_doubt_ops *ops = NULL;
		size_t n = 0;

		for (struct sync_doubt *d = sn->doubts; d; d = d->next)
			if (d->ops->kind == k) {
				ops = d->ops;
				n++;
			}
		if (ops)
			LOG(LOG_WARN, "namespace \"%s\": %zu %s left in doubt at stop: %s",
			    sn->def->name, n, ops->what, ops->if_dropped);
	}
	while (sn->doubts) {
		struct sync_doubt *d = sn->doubts;

		sync_doubt_unlink(sn, d);
		sync_doubt_discard(d);
	}
}

/* ---- the handover (a reload) ---- */

struct sync_doubts {
	struct sync_doubt *head;
};

/* d (sn's, unlinked) into a handover list at *tail, with its namespace's
 * identity copied (the definitions change before the next sync exists).
 * Returns the new tail; on failure d is discarded and counted in *lost. */
static struct sync_doubt **sync_doubt_detach(struct sync_ns *sn, struct sync_doubt *d,
					     struct sync_doubt **tail, size_t *lost)
{
	const struct ns_def *def = sn->def;

	d->next = NULL;
	d->sn = NULL;
	d->ns_name = strdup(def->name);
	d->store = strdup(def->strategy);
	d->opts = strdup(def->strategy_opts ? def->strategy_opts : "");
	if (!d->ns_name || !d->store || !d->opts) {
		sync_doubt_discard(d);
		(*lost)++;
		return tail;
	}
	if (d->ops->rename)
		d->ops->rename(d, d->ns_name);
	*tail = d;
	return &d->next;
}

struct sync_doubts *sync_doubts_take(struct sync *sy)
{
	struct sync_doubts *out = sy ? calloc(1, sizeof(*out)) : NULL;
	struct sync_doubt **tail = out ? &out->head : NULL;

	for (size_t i = 0; out && i < sy->n; i++) {
		struct sync_ns *sn = &sy->ns[i];
		size_t lost = 0;

		while (sn->doubts) {
			struct sync_doubt *d = sn->doubts;

			sync_doubt_unlink(sn, d);
			if (d->ops->leave)
				d->ops->leave(d);
			tail = sync_doubt_detach(sn, d, tail, &lost);
		}
		if (lost)
			LOG(LOG_WARN, "namespace \"%s\": %zu call(s) in doubt dropped at the reload: "
			    "out of memory", sn->def->name, lost);
	}
	return out;
}

/* The namespace of sy that takes d over, or NULL. */
static struct sync_ns *sync_doubt_heir(struct sync *sy, const struct sync_doubt *d)
{
	for (size_t i = 0; sy && i < sy->n; i++) {
		const struct ns_def *def = sy->ns[i].def;

		if (strcmp(def->name, d->ns_name) != 0)
			continue;
		if (d->ops->same_store &&
		    (strcmp(def->strategy, d->store) != 0 ||
		     strcmp(def->strategy_opts ? def->strategy_opts : "", d->opts) != 0))
			continue;
		return &sy->ns[i];
	}
	return NULL;
}

void sync_doubts_give(struct sync *sy, struct sync_doubts *list)
{
	size_t gone[SYNC_DOUBT_KINDS] = { 0 }, full[SYNC_DOUBT_KINDS] = { 0 };
	const struct sync_doubt_ops *ops[SYNC_DOUBT_KINDS] = { NULL };
	char first[SYNC_DOUBT_KINDS][NS_NAME_MAX] = { { 0 } };
	struct sync_doubt *d, *next;

	if (!list)
		return;
	for (d = list->head; d; d = next) {
		struct sync_ns *sn = sync_doubt_heir(sy, d);
		enum sync_doubt_kind k = d->ops->kind;

		next = d->next;
		if (!sn || (d->ops->max && sn->ndoubts[k] >= d->ops->max)) {
			gone[k] += !sn;
			full[k] += sn != NULL;
			ops[k] = d->ops;
			if (!first[k][0])
				snprintf(first[k], sizeof(first[k]), "%s", d->ns_name);
			LOG(LOG_DEBUG, "namespace \"%s\": %s in doubt dropped at the reload (%s)",
			    d->ns_name, d->ops->what, sn ? "too many" : d->ops->same_store ?
			    "namespace gone, or its store changed" : "namespace gone");
			sync_doubt_discard(d);
			continue;
		}
		d->out = false;      /* the old store failed it, if it was */
		if (d->ops->rename)
			d->ops->rename(d, sn->def->name);
		free(d->ns_name), free(d->store), free(d->opts);
		d->ns_name = d->store = d->opts = NULL;
		sync_doubt_append(sn, d);
	}
	for (size_t k = 0; k < SYNC_DOUBT_KINDS; k++)
		if (gone[k] || full[k])
			LOG(LOG_WARN, "reload: %zu %s in doubt dropped (%zu of namespaces gone%s, "
			    "%zu over the cap; \"%s\" first): %s", gone[k] + full[k], ops[k]->what,
			    gone[k], ops[k]->same_store ? " or whose store changed" : "", full[k],
			    first[k], ops[k]->if_dropped);
	free(list);
}

void sync_doubts_free(struct sync_doubts *list)
{
	struct sync_doubt *d, *next;

	for (d = list ? list->head : NULL; d; d = next) {
		next = d->next;
		sync_doubt_discard(d);
	}
	free(list);
}

/* ---- calls of hits (SYNC_DOUBT_HITS) ---- */

/* A call of hits in doubt: a copy of the n admissions a or counters c
 * (keys in `keys`); fix[i]: the store has not answered item i, which
 * carried hits (or grant hits spent or returned). */
struct sync_call {
	struct sync_doubt d;
	struct strategy_admit *a;
	struct strategy_counter *c;
	bool *fix;
	char *keys;
	size_t n, nfix;
};

static void sync_call_free(struct sync_doubt *d)
{
	struct sync_call *k = container_of(d, struct sync_call, d);

	free(k->a);
	free(k->c);
	free(k->fix);
	free(k->keys);
	free(k);
}

static int sync_call_send(struct sync_ns *sn, struct sync_doubt *d, strategy_done_cb done,
			  char err[STRATEGY_ERR_MAX])
{
	struct sync_call *k = container_of(d, struct sync_call, d);

	return k->a ? sn->ops->admit(sn->st, k->a, k->n, d->token, done, d, err)
		    : sn->ops->push_diffs(sn->st, k->c, k->n, d->token, done, d, err);
}

static void sync_call_rename(struct sync_doubt *d, const char *name)
{
	struct sync_call *k = container_of(d, struct sync_call, d);

	for (size_t i = 0; i < k->n; i++) {
		if (k->a)
			k->a[i].ns = name;
		else
			k->c[i].ns = name;
	}
}

/* What the store counted for item i is taken back from the slot's diff,
 * where the node counted it itself: a push's diff; an admission's hit if
 * admitted or count_denied. An admission's grant, reserved for this
 * node, is this node's to spend (or give back with a sync cycle). */
static void sync_call_settle_one(struct sync_ns *sn, const struct sync_call *k, size_t i)
{
	struct rl *rl = sn->sy->rl;
	const struct strategy_admit *a = k->a ? &k->a[i] : NULL;
	const struct strategy_counter *c = k->c ? &k->c[i] : NULL;
	double now = rl_now();
	/* An admission's diff (a TAT step of a sync cycle's, handed over):
	 * hits the node counted, as a push's. */
	double counted = a ? ((a->admitted || a->count_denied) ? a->cost : 0) + a->diff : c->diff;
	const char *key = a ? a->key : c->key;
	size_t key_len = a ? a->key_len : c->key_len;
	uint32_t size = a ? a->size : c->size;
	int64_t start = a ? a->start : c->start;

	/* A negative diff (a grant given back, in a sync cycle's push handed
	 * over at a reload) is put back the same way. */
	if (counted != 0 &&
	    (counted > 0 ? rl_unkeep(rl, (int)sn->ns, key, key_len, size, start, counted, now)
			 : rl_keep(rl, (int)sn->ns, key, key_len, size, start, -counted, now)) < 0)
		SYNC_DOUBT_LOG(LOG_ERR, "namespace \"%s\": a hit in doubt could not be settled (%s): "
			       "it counts twice", sn->def->name, rl_status_str(rl_errno(rl)));
	/* A push's grant hits reported spent or returned: the store has them. */
	if (c && (c->spent != 0 || c->returned != 0) &&
	    rl_unreserve(rl, (int)sn->ns, key, key_len, size, start, c->spent, c->returned) < 0)
		SYNC_DOUBT_LOG(LOG_ERR, "namespace \"%s\": grant hits in doubt could not be "
			       "settled (%s): %g count twice", sn->def->name,
			       rl_status_str(rl_errno(rl)), c->spent);
	if (a && a->grant > 0 &&
	    rl_grant(rl, (int)sn->ns, a->key, a->key_len, a->size, a->start, a->grant, now) < 0)
		SYNC_DOUBT_LOG(LOG_WARN, "namespace \"%s\": a grant of the store could not be kept "
			       "(%s): %g of the limit stay counted until the window ends",
			       sn->def->name, rl_status_str(rl_errno(rl)), a->grant);
}

static bool sync_call_settle(struct sync_ns *sn, struct sync_doubt *d, int status,
			     const char *errstr)
{
	struct sync_call *k = container_of(d, struct sync_call, d);
	(void)status, (void)errstr;

	for (size_t i = 0; i < k->n; i++) {
		if (!k->fix[i] || !(k->a ? k->a[i].ok : k->c[i].ok))
			continue;
		sync_call_settle_one(sn, k, i);
		k->fix[i] = false;
		k->nfix--;
	}
	return k->nfix == 0;
}

static const struct sync_doubt_ops sync_call_ops = {
	.kind = SYNC_DOUBT_HITS,
	.what = "call(s) of hits",
	.if_dropped = "a store that applied them late has their hits counted twice",
	.max = SYNC_DOUBT_MAX,
	.ttl = SYNC_DOUBT_TTL,
	.same_store = true,
	.send = sync_call_send,
	.settle = sync_call_settle,
	.rename = sync_call_rename,
	.free = sync_call_free,
};

/* Does item i of the call carry hits the store has not answered? A
 * lease's step never does: its id makes it exactly once without a resend
 * (an acquire in doubt is decided on the node's share, and given back to
 * the store when denied; a release is retried by sync_lease.c); nor does
 * a step of cost 0 and diff 0 (a read: GET /keys of a GCRA key). */
static bool sync_call_unsettled(const struct strategy_admit *a, const struct strategy_counter *c,
				size_t i)
{
	if (a)
		return !a[i].ok && a[i].step != STRATEGY_STEP_LEASE &&
		       (a[i].cost != 0 || a[i].diff != 0);
	return !c[i].ok && (c[i].diff != 0 || c[i].spent != 0 || c[i].returned != 0);
}

void sync_doubt_keep_hits(struct sync_ns *sn, const char *token, const struct strategy_admit *a,
			  const struct strategy_counter *c, size_t n)
{
	struct sync_call *k;
	size_t nfix = 0, klen = 0, off = 0;

	for (size_t i = 0; i < n; i++) {
		nfix += sync_call_unsettled(a, c, i);
		klen += a ? a[i].key_len : c[i].key_len;
	}
	if (nfix == 0)
		return;
	k = calloc(1, sizeof(*k));
	if (k) {
		k->d.ops = &sync_call_ops;
		if (a)
			k->a = malloc(n * sizeof(*k->a));
		else
			k->c = malloc(n * sizeof(*k->c));
		k->fix = calloc(n, sizeof(*k->fix));
		k->keys = malloc(klen ? klen : 1);
	}
	if (!k || !(k->a || k->c) || !k->fix || !k->keys) {
		if (k)
			sync_call_free(&k->d);
		sync_doubt_log(sn->sy, sn->def->name, &sync_call_ops, "out of memory");
		return;
	}
	snprintf(k->d.token, sizeof(k->d.token), "%s", token);
	k->n = n;
	k->nfix = nfix;
	for (size_t i = 0; i < n; i++) {
		const char **key, **ns;
		bool *ok;
		size_t len;

		if (a) {
			k->a[i] = a[i];
			key = &k->a[i].key, ns = &k->a[i].ns, ok = &k->a[i].ok;
			len = k->a[i].key_len;
		} else {
			k->c[i] = c[i];
			key = &k->c[i].key, ns = &k->c[i].ns, ok = &k->c[i].ok;
			len = k->c[i].key_len;
		}
		k->fix[i] = sync_call_unsettled(a, c, i);
		memcpy(k->keys + off, *key, len);
		*key = k->keys + off;
		*ns = sn->def->name;
		*ok = false;
		off += len;
	}
	sync_doubt_add(sn, &k->d);
}
