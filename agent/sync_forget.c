/*
 * sync_forget.c - a key forgotten in its namespace's store (DELETE /keys,
 * docs/OPERATIONS.md, "Lifting a limit for one key"). The node's own part
 * (its table) is the library's (rl_forget); this file sends the store's
 * part, strategy_ops.forget, with a token of its own:
 *
 *   sync_forget   sent at once when the store is ready; the caller gets
 *                 "sent" once the store confirms, "queued" when it is away,
 *                 refuses or is silent past timeout_ms
 *   in doubt      a forget not confirmed stays on the sync's list and goes
 *                 out again, with the same token and the same arguments,
 *                 at each tick of its namespace's cycle while the store is
 *                 ready (sync_forgets_send, from sync.c): the store applies
 *                 a token once, so a forget is applied once however often
 *                 it is sent
 *   a reload      hands the list to the next sync (sync_forgets_take/give)
 *
 * The other nodes forget the key when they next read its windows: the
 * store marks them reset (strategy_counter.reset) and a node writes the
 * total of a reset window into its table even when it is lower
 * (shm_follow_total): within one sync period of the store's forget.
 * sync.c calls this file; this file calls nothing of sync.c.
 */
#include "agent/sync_int.h"

#include <stdlib.h>
#include <string.h>

#include "agent/log.h"

struct sync_forget {
	struct sync_forget *next;
	struct sync *sy;              /* the sync whose list holds it; NULL while handed over */
	char ns[NS_NAME_MAX];         /* its namespace, by name: a reload may reorder them */
	char *key;                    /* stored form */
	size_t keylen;
	uint32_t sizes[NS_MAX_WINDOWS];
	size_t nsizes;
	int64_t now;                  /* the windows: current and previous at this time */
	char token[STRATEGY_TOKEN_MAX];
	double removed;               /* the store's answer */
	bool busy;                    /* sent, not answered */
	sync_forget_cb cb;            /* the caller, until answered or detached */
	void *arg;
};

/* A handed-over list. */
struct sync_forgets {
	struct sync_forget *head;
};

static void sync_forget_free(struct sync_forget *f)
{
	free(f->key);
	free(f);
}

/* Answers the caller once. */
static void sync_forget_answer(struct sync_forget *f, enum sync_forget_result r)
{
	sync_forget_cb cb = f->cb;

	f->cb = NULL;
	if (cb)
		cb(f->arg, r, f->removed);
}

static void sync_forget_unlink(struct sync *sy, struct sync_forget *f)
{
	for (struct sync_forget **p = &sy->forgets; *p; p = &(*p)->next) {
		if (*p == f) {
			*p = f->next;
			sy->nforgets--;
			return;
		}
	}
}

static void sync_on_forgot(void *arg, int status, const char *errstr)
{
	struct sync_forget *f = arg;
	struct sync *sy = f->sy;

	f->busy = false;
	/* Handed over (a reload) or stopping: kept, the next sync sends it
	 * again and the store answers what it recorded. */
	if (status == 0 && sy && !sy->stopping) {
		LOG(LOG_INFO, "namespace %s: a key forgotten in the store (%g hit(s) removed)",
		    f->ns, f->removed);
		sync_forget_unlink(sy, f);
		sync_forget_answer(f, SYNC_FORGET_SENT);
		sync_forget_free(f);
		return;
	}
	if (status != 0 && errstr)
		LOG(LOG_WARN, "namespace %s: forgetting a key in the store: %s; sent again when "
		    "the store answers", f->ns, errstr);
	sync_forget_answer(f, SYNC_FORGET_QUEUED);
}

/* Sends f if its store is ready. Returns true if it was sent. */
static bool sync_forget_send(struct sync_ns *sn, struct sync_forget *f)
{
	char err[STRATEGY_ERR_MAX] = "";

	if (f->busy || !sn->ops->forget || !sn->ops->ready(sn->st))
		return false;
	f->busy = true;
	if (sn->ops->forget(sn->st, sn->def->name, strlen(sn->def->name), f->key, f->keylen,
			    f->sizes, f->nsizes, f->now, f->token, &f->removed, sync_on_forgot, f,
			    err) < 0) {
		f->busy = false;
		return false;
	}
	return true;
}

int sync_forget(struct sync *sy, unsigned ns, const char *key, size_t keylen, double now,
		sync_forget_cb cb, void *arg, struct sync_forget **out)
{
	struct sync_ns *sn = sy && !sy->stopping ? sync_find_ns(sy, ns) : NULL;
	struct sync_forget *f;

	*out = NULL;
	if (!sn || !sn->ops->forget || sy->nforgets >= SYNC_FORGET_MAX || keylen == 0)
		return -1;
	f = calloc(1, sizeof(*f));
	if (!f || !(f->key = malloc(keylen))) {
		free(f);
		return -1;
	}
	memcpy(f->key, key, keylen);
	f->keylen = keylen;
	f->sy = sy;
	snprintf(f->ns, sizeof(f->ns), "%s", sn->def->name);
	f->nsizes = sn->def->n_window_sizes;
	memcpy(f->sizes, sn->def->window_sizes, f->nsizes * sizeof(f->sizes[0]));
	f->now = (int64_t)now;
	sync_token(sn, 'f', ++sy->fseq, f->token);
	/* Last on the list: forgets go out in the order they came. */
	struct sync_forget **p = &sy->forgets;
	while (*p)
		p = &(*p)->next;
	*p = f;
	sy->nforgets++;
	if (!sync_forget_send(sn, f)) {
		LOG(LOG_INFO, "namespace %s: the store is away: a key's forget is queued, sent "
		    "when it is back", sn->def->name);
		return 0;
	}
	f->cb = cb;
	f->arg = arg;
	*out = f;
	return 1;
}

void sync_forget_detach(struct sync_forget *f)
{
	if (f) {
		f->cb = NULL;
		f->arg = NULL;
	}
}

void sync_forgets_send(struct sync_ns *sn)
{
	struct sync *sy = sn->sy;

	for (struct sync_forget *f = sy->forgets; f; f = f->next)
		if (strcmp(f->ns, sn->def->name) == 0)
			sync_forget_send(sn, f);
}

size_t sync_forgets_queued(const struct sync *sy)
{
	return sy ? sy->nforgets : 0;
}

struct sync_forgets *sync_forgets_take(struct sync *sy)
{
	struct sync_forgets *list;

	if (!sy || !sy->forgets || !(list = calloc(1, sizeof(*list))))
		return NULL;
	list->head = sy->forgets;
	for (struct sync_forget *f = list->head; f; f = f->next) {
		f->sy = NULL;
		sync_forget_answer(f, SYNC_FORGET_QUEUED);
	}
	sy->forgets = NULL;
	sy->nforgets = 0;
	return list;
}

void sync_forgets_give(struct sync *sy, struct sync_forgets *list)
{
	struct sync_forget *f, *next;

	if (!list)
		return;
	for (f = list->head; f; f = next) {
		struct sync_ns *sn = NULL;

		next = f->next;
		f->next = NULL;
		for (size_t i = 0; sy && i < sy->n; i++)
			if (strcmp(sy->ns[i].def->name, f->ns) == 0)
				sn = &sy->ns[i];
		if (!sn || !sn->ops->forget) {
			LOG(LOG_WARN, "namespace %s: a key's forget was never confirmed by the store "
			    "and the namespace no longer syncs: dropped", f->ns);
			sync_forget_free(f);
			continue;
		}
		f->sy = sy;
		f->busy = false;
		struct sync_forget **p = &sy->forgets;
		while (*p)
			p = &(*p)->next;
		*p = f;
		sy->nforgets++;
	}
	free(list);
}

void sync_forgets_drop(struct sync *sy)
{
	struct sync_forget *f, *next;

	for (f = sy->forgets; f; f = next) {
		next = f->next;
		LOG(LOG_WARN, "namespace %s: a key's forget was never confirmed by the store and "
		    "this worker stops: other nodes keep its count until its windows end", f->ns);
		sync_forget_answer(f, SYNC_FORGET_QUEUED);
		sync_forget_free(f);
	}
	sy->forgets = NULL;
	sy->nforgets = 0;
}

void sync_forgets_free(struct sync_forgets *list)
{
	struct sync_forget *f, *next;

	if (!list)
		return;
	for (f = list->head; f; f = next) {
		next = f->next;
		sync_forget_free(f);
	}
	free(list);
}
