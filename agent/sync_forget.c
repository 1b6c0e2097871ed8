/*
 * sync_forget.c - a key forgotten in its namespace's store (DELETE /keys,
 * docs/OPERATIONS.md, "Lifting a limit for one key"). The node's own part
 * (its table) is the library's (rl_forget); this file sends the store's
 * part, strategy_ops.forget, with a token of its own:
 *
 *   sync_forget   the forget goes on the list of calls in doubt
 *                 (sync_doubt.c, SYNC_DOUBT_FORGET) and is sent at once
 *                 when the store is ready; the caller hears "sent" once
 *                 the store confirms it, "queued" when it is away, refuses
 *                 or is silent past timeout_ms
 *   in doubt      until the store confirms it, the list sends it again,
 *                 with the same token and arguments, whenever the store
 *                 is ready (sync_doubts_resend): the store applies a token
 *                 once, so a forget is applied once however often it is
 *                 sent; a reload hands it over, a stop drops it (logged)
 *
 * The other nodes forget the key when they next read its windows: the
 * store marks them reset (strategy_counter.reset) and a node writes the
 * total of a reset window into its table even when it is lower
 * (shm_follow_total): within one sync period of the store's forget.
 */
#include "agent/sync_int.h"
#include "strategies/container.h"

#include <stdlib.h>
#include <string.h>

#include "agent/log.h"

struct sync_forget {
	struct sync_doubt d;          /* on its namespace's list of calls in doubt */
	char *key;                    /* stored form */
	size_t keylen;
	uint32_t sizes[NS_MAX_WINDOWS];
	size_t nsizes;
	int64_t now;                  /* the windows: current and previous at this time */
	double removed;               /* the store's answer */
	double logged;                /* the last failure logged */
	sync_forget_cb cb;            /* the caller, until answered or detached */
	void *arg;
};

/* Answers the caller once. */
static void sync_forget_answer(struct sync_forget *f, enum sync_forget_result r)
{
	sync_forget_cb cb = f->cb;

	f->cb = NULL;
	if (cb)
		cb(f->arg, r, f->removed);
}

static int sync_forget_send(struct sync_ns *sn, struct sync_doubt *d, strategy_done_cb done,
			    char err[STRATEGY_ERR_MAX])
{
	struct sync_forget *f = container_of(d, struct sync_forget, d);

	if (!sn->ops->forget) {
		snprintf(err, STRATEGY_ERR_MAX, "the %s store cannot forget", sn->ops->name);
		return -1;
	}
	return sn->ops->forget(sn->st, sn->def->name, strlen(sn->def->name), f->key, f->keylen,
			       f->sizes, f->nsizes, f->now, d->token, &f->removed, done, d, err);
}

static bool sync_forget_settle(struct sync_ns *sn, struct sync_doubt *d, int status,
			       const char *errstr)
{
	struct sync_forget *f = container_of(d, struct sync_forget, d);
	double now = ev_now(sn->sy->loop);

	if (status == 0) {
		LOG(LOG_INFO, "namespace %s: a key forgotten in the store (%g hit(s) removed)",
		    sn->def->name, f->removed);
		sync_forget_answer(f, SYNC_FORGET_SENT);
		return true;
	}
	/* The first failure, then at most every SYNC_LOG_EVERY: it is sent
	 * again whenever the store is ready. */
	if (f->cb || now - f->logged >= SYNC_LOG_EVERY) {
		f->logged = now;
		LOG(LOG_WARN, "namespace %s: forgetting a key in the store: %s; sent again when "
		    "the store answers", sn->def->name, errstr ? errstr : "failed");
	}
	sync_forget_answer(f, SYNC_FORGET_QUEUED);
	return false;
}

static void sync_forget_leave(struct sync_doubt *d)
{
	sync_forget_answer(container_of(d, struct sync_forget, d), SYNC_FORGET_QUEUED);
}

static void sync_forget_free(struct sync_doubt *d)
{
	struct sync_forget *f = container_of(d, struct sync_forget, d);

	free(f->key);
	free(f);
}

/* A forget goes to the store of its namespace's name, whatever the store
 * (a reload may change it): the operator's forget holds there too. */
static const struct sync_doubt_ops sync_forget_ops = {
	.kind = SYNC_DOUBT_FORGET,
	.what = "key forget(s)",
	.if_dropped = "other nodes keep the key's count until its windows end",
	.send = sync_forget_send,
	.settle = sync_forget_settle,
	.leave = sync_forget_leave,
	.free = sync_forget_free,
};

int sync_forget(struct sync *sy, unsigned ns, const char *key, size_t keylen, double now,
		sync_forget_cb cb, void *arg, struct sync_forget **out)
{
	struct sync_ns *sn = sy && !sy->stopping ? sync_find_ns(sy, ns) : NULL;
	char err[STRATEGY_ERR_MAX] = "";
	struct sync_forget *f;

	*out = NULL;
	if (!sn || !sn->ops->forget || keylen == 0 ||
	    sync_doubts_count(sy, SYNC_DOUBT_FORGET) >= SYNC_FORGET_MAX)
		return -1;
	f = calloc(1, sizeof(*f));
	if (!f || !(f->key = malloc(keylen))) {
		free(f);
		return -1;
	}
	f->d.ops = &sync_forget_ops;
	memcpy(f->key, key, keylen);
	f->keylen = keylen;
	f->nsizes = sn->def->n_window_sizes;
	memcpy(f->sizes, sn->def->window_sizes, f->nsizes * sizeof(f->sizes[0]));
	f->now = (int64_t)now;
	sync_token(sn, 'f', ++sy->fseq, f->d.token);
	/* Last on the list: forgets go out in the order they came. */
	if (sync_doubt_add(sn, &f->d) < 0)
		return -1;
	if (sync_doubt_send(sn, &f->d, err) < 0) {
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
