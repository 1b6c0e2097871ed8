/*
 * sync_hits.c - sync_rate 0 (see sync.h): hits that wait for the store.
 *
 *   gather    every push (sync_hits_push) or admission asked for during
 *             one loop iteration, per namespace, leaves as one store call
 *             before the loop waits again (an ev_prepare)
 *   park      a call that finds its store connecting waits for the
 *             attempt, polled every SYNC_PARK_POLL
 *   apply     the store's totals and decisions go into the table
 *             (sync_hits_apply); what it did not confirm stays a diff for
 *             the retry cycle (sync.c)
 *   doubt     a call sent and never answered is kept and sent again
 *
 * Calls made for one hit or a few (sync_rate 0 pushes, admissions) carry
 * a token too. One the store did not answer after it was sent leaves its
 * hits counted in the diffs (an admission decided by the node: degraded),
 * and is kept in doubt (struct sync_doubt): sent again as it was, with its
 * token, until the store answers; what the store says it counted for it
 * is then taken back from the diffs. So those hits also reach the store
 * once, unless the worker dies first (a reload hands them to the next sync:
 * sync_doubts_take).
 */
#include "agent/sync_int.h"
#include "strategies/container.h"

#include <stdlib.h>
#include <string.h>

#include "agent/log.h"
#include "agent/window.h"

/* Lines about one hit or one admission (a table full when a store's answer
 * comes back) come at most once a second per process, with the number
 * held back. */
static struct log_limit sync_hit_log;
#define SYNC_HIT_LOG(level, fmt, ...)                                              \
	do {                                                                           \
		if ((level) <= log_level && log_limit(&sync_hit_log, rl_now()))          \
			LOG((level), fmt "%s", __VA_ARGS__, log_limit_suppressed(&sync_hit_log)); \
	} while (0)

#define SYNC_GRANT_FIRST_SHARE 64 /* a first grant: this part of a node's share */
#define SYNC_PARK_MAX    4096     /* sync_rate 0 pushes waiting for a connecting store */
#define SYNC_PARK_POLL   0.002    /* how often they look at the store */
#define SYNC_PARK_LIMIT  30.0     /* safety bound: the store's timeout ends the attempt first */
#define SYNC_DOUBT_MAX   256      /* calls in doubt kept per namespace */
#define SYNC_DOUBT_POLL  0.05     /* how often they look at the store */
#define SYNC_DOUBT_TTL   300.0    /* given up after this (tokens live STRATEGY_TOKEN_TTL) */

/* A call of sync_rate 0 (a push, or admissions) whose answer never came
 * (the store failed, or was slower than timeout_ms, after it was sent):
 * the store may have applied it, or may still. Its hits were counted by
 * the node into their slots' diffs (admissions decided there: degraded),
 * which the retry or sync cycle pushes. The call is sent again, as it
 * was, with its token: the store applies it once (now, or never again if
 * it had) and says what it counted; that much is taken back from the
 * diffs, so each hit reaches the store once. */
struct sync_doubt {
	struct sync_doubt *next;
	struct sync_ns *sn;               /* NULL while handed over (a reload) */
	char *ns_name, *store, *opts;     /* ... then: its namespace, owned */
	char token[STRATEGY_TOKEN_MAX];
	struct strategy_admit *a;         /* the call (admissions), or */
	struct strategy_counter *c;       /* the call (a push); keys in `keys` */
	bool *fix;                        /* [i] was not answered: settle it */
	char *keys;
	size_t n, nfix;
	double since;
};

/* sync_rate 0: the pushes of one namespace asked for during one loop
 * iteration, sent as one push_diffs before the loop waits again (an
 * ev_prepare): one store round trip for every hit that arrived together,
 * whatever connection or front it came from. */
struct sync_req {
	struct strategy_counter *c;       /* the caller's counters, or */
	struct strategy_admit *a;         /* its admissions */
	size_t n;
	strategy_done_cb cb;
	void *arg;
};

struct sync_gather {
	struct sync_gather *next;         /* the free list */
	struct sync *sy;
	struct sync_ns *sn;               /* set when sent */
	bool sent;                        /* handed to the store */
	char token[STRATEGY_TOKEN_MAX];   /* the call's */
	struct strategy_counter *c;       /* copies of every request's, in order */
	size_t n, cap;
	struct strategy_admit *a;         /* the same, for admissions */
	size_t na, acap;
	double until;                     /* it waits for a connecting store
	                                     until then */
	struct sync_req *req;
	size_t nreq, reqcap;
};

/* A gather (pushes or admissions) that found its store connecting. */
struct sync_parked {
	struct sync_ns *sn;
	struct sync_gather *g;
	bool admit;
};

static void sync_gather_done(void *arg, int status, const char *errstr);

/* ---- sync_rate 0 calls in doubt (struct sync_doubt) ---- */

static void sync_doubt_free(struct sync_doubt *d)
{
	free(d->ns_name);
	free(d->store);
	free(d->opts);
	free(d->a);
	free(d->c);
	free(d->fix);
	free(d->keys);
	free(d);
}

/* Unlinks the first doubt of sn and frees it. */
static void sync_doubt_pop(struct sync_ns *sn)
{
	struct sync_doubt *d = sn->doubts;

	sn->doubts = d->next;
	sn->ndoubts--;
	sync_doubt_free(d);
}

static void sync_doubt_log(struct sync *sy, const char *ns, const char *why)
{
	double now = ev_now(sy->loop);

	if (now - sy->doubt_log < SYNC_LOG_EVERY && sy->doubt_log > 0)
		return;
	sy->doubt_log = now;
	LOG(LOG_WARN, "namespace \"%s\": hits in doubt given up (%s): a store that applied "
	    "them late has them counted twice", ns, why);
}

/* A call in doubt for sn: a copy (keys included) of the n admissions a
 * or counters c sent with token; [i] is settled if the store did not
 * answer it and, for a push, it carried a diff (reads settle nothing).
 * *out NULL when nothing is to settle. Returns 0, or -1 out of memory. */
static int sync_doubt_new(struct sync_ns *sn, const char *token,
			  const struct strategy_admit *a, const struct strategy_counter *c, size_t n,
			  struct sync_doubt **out)
{
	struct sync_doubt *d;
	size_t nfix = 0, klen = 0, off = 0;

	*out = NULL;
	for (size_t i = 0; i < n; i++)
		nfix += a ? !a[i].ok
			  : !c[i].ok && (c[i].diff != 0 || c[i].spent != 0 || c[i].returned != 0);
	if (nfix == 0)
		return 0;
	for (size_t i = 0; i < n; i++)
		klen += a ? a[i].key_len : c[i].key_len;
	d = calloc(1, sizeof(*d));
	if (d) {
		if (a)
			d->a = malloc(n * sizeof(*d->a));
		else
			d->c = malloc(n * sizeof(*d->c));
		d->fix = calloc(n, sizeof(*d->fix));
		d->keys = malloc(klen ? klen : 1);
	}
	if (!d || !(d->a || d->c) || !d->fix || !d->keys) {
		if (d)
			sync_doubt_free(d);
		return -1;
	}
	d->sn = sn;
	snprintf(d->token, sizeof(d->token), "%s", token);
	d->n = n;
	d->nfix = nfix;
	d->since = ev_now(sn->sy->loop);
	for (size_t i = 0; i < n; i++) {
		const char **key, **ns;
		bool *ok;
		size_t len;

		if (a) {
			d->a[i] = a[i];
			key = &d->a[i].key, ns = &d->a[i].ns, ok = &d->a[i].ok;
			len = d->a[i].key_len;
		} else {
			d->c[i] = c[i];
			key = &d->c[i].key, ns = &d->c[i].ns, ok = &d->c[i].ok;
			len = d->c[i].key_len;
		}
		d->fix[i] = !*ok && (a || c[i].diff != 0 || c[i].spent != 0 || c[i].returned != 0);
		memcpy(d->keys + off, *key, len);
		*key = d->keys + off;
		*ns = sn->def->name;
		*ok = false;
		off += len;
	}
	*out = d;
	return 0;
}

/* A call answered with some items undecided, after it was sent: kept to
 * send again (a copy: the gather is reused). */
static void sync_doubt_keep(struct sync_gather *g)
{
	struct sync_ns *sn = g->sn;
	struct sync_doubt *d, **tail;

	if (!sn)
		return;
	if (sync_doubt_new(sn, g->token, g->na ? g->a : NULL, g->na ? NULL : g->c,
			   g->na ? g->na : g->n, &d) < 0) {
		sync_doubt_log(g->sy, sn->def->name, "out of memory");
		return;
	}
	if (!d)
		return;
	if (sn->ndoubts >= SYNC_DOUBT_MAX) {
		sync_doubt_free(d);
		sync_doubt_log(g->sy, sn->def->name, "too many");
		return;
	}
	for (tail = &sn->doubts; *tail; tail = &(*tail)->next)
		;
	*tail = d;
	sn->ndoubts++;
	if (!ev_is_active(&g->sy->doubt_timer))
		ev_timer_again(g->sy->loop, &g->sy->doubt_timer);
}

/* What the store counted for an item in doubt is taken back from the
 * slot's diff, where the node counted it itself: a push's diff; an
 * admission's hit if admitted or count_denied. An admission's grant,
 * counted for this node, is this node's to use (or give back with a
 * sync). */
static void sync_doubt_settle(struct sync_ns *sn, const struct sync_doubt *d, size_t i)
{
	struct rl *rl = sn->sy->rl;
	const struct strategy_admit *a = d->a ? &d->a[i] : NULL;
	const struct strategy_counter *c = d->c ? &d->c[i] : NULL;
	double now = rl_now();
	double counted = a ? ((a->admitted || a->count_denied) ? a->cost : 0) : c->diff;
	const char *key = a ? a->key : c->key;
	size_t key_len = a ? a->key_len : c->key_len;
	uint32_t size = a ? a->size : c->size;
	int64_t start = a ? a->start : c->start;

	/* A negative diff (a grant given back, in a sync cycle's push handed
	 * over at a reload) is put back the same way. */
	if (counted != 0 &&
	    (counted > 0 ? rl_unkeep(rl, (int)sn->ns, key, key_len, size, start, counted, now)
			 : rl_keep(rl, (int)sn->ns, key, key_len, size, start, -counted, now)) < 0)
		SYNC_HIT_LOG(LOG_ERR, "namespace \"%s\": a hit in doubt could not be settled (%s): "
			     "it counts twice", sn->def->name, rl_status_str(rl_errno(rl)));
	/* A push's grants reported spent or given back: the store has them. */
	if (c && (c->spent != 0 || c->returned != 0) &&
	    rl_unreserve(rl, (int)sn->ns, key, key_len, size, start, c->spent, c->returned) < 0)
		SYNC_HIT_LOG(LOG_ERR, "namespace \"%s\": grant hits in doubt could not be "
			     "settled (%s): %g count twice", sn->def->name,
			     rl_status_str(rl_errno(rl)), c->spent);
	if (a && a->grant > 0 &&
	    rl_grant(rl, (int)sn->ns, a->key, a->key_len, a->size, a->start, a->grant, now) < 0)
		SYNC_HIT_LOG(LOG_WARN, "namespace \"%s\": a grant of the store could not be kept "
			     "(%s): %g of the limit stay counted until the window ends",
			     sn->def->name, rl_status_str(rl_errno(rl)), a->grant);
}

static void sync_on_doubt_done(void *arg, int status, const char *errstr);

/* Sends sn's oldest call in doubt again, if its store is up and none is
 * being sent. */
static void sync_doubt_send(struct sync_ns *sn)
{
	struct sync_doubt *d = sn->doubts;
	char err[STRATEGY_ERR_MAX];

	if (!d || sn->doubt_busy || !sn->ops->ready(sn->st))
		return;
	sn->doubt_busy = true;
	if ((d->a ? sn->ops->admit(sn->st, d->a, d->n, d->token, sync_on_doubt_done, d, err)
		  : sn->ops->push_diffs(sn->st, d->c, d->n, d->token, sync_on_doubt_done, d,
					err)) < 0)
		sn->doubt_busy = false;
}

static void sync_on_doubt_done(void *arg, int status, const char *errstr)
{
	struct sync_doubt *d = arg;
	struct sync_ns *sn = d->sn;
	(void)status, (void)errstr;

	sn->doubt_busy = false;
	if (sn->sy->stopping)
		return;
	for (size_t i = 0; i < d->n; i++) {
		if (!d->fix[i] || !(d->a ? d->a[i].ok : d->c[i].ok))
			continue;
		sync_doubt_settle(sn, d, i);
		d->fix[i] = false;
		d->nfix--;
	}
	if (d->nfix == 0) {
		sync_doubt_pop(sn);
		sync_doubt_send(sn);        /* the next at once: a reload waits for them */
	}
}

/* Sends the oldest doubt of every namespace again, one at a time per
 * namespace, when its store is up. */
static void sync_on_doubt_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct sync *sy = container_of(w, struct sync, doubt_timer);
	bool any = false;
	(void)revents;

	for (size_t i = 0; i < sy->n; i++) {
		struct sync_ns *sn = &sy->ns[i];

		while (sn->doubts && !sn->doubt_busy &&
		       ev_now(loop) - sn->doubts->since > SYNC_DOUBT_TTL) {
			sync_doubt_log(sy, sn->def->name, "the store did not answer in time");
			sync_doubt_pop(sn);
		}
		any = any || sn->doubts;
		sync_doubt_send(sn);
	}
	if (!any)
		ev_timer_stop(loop, w);
}

/* Points the calls of d at namespace name (their `ns`). */
static void sync_doubt_rename(struct sync_doubt *d, const char *name)
{
	for (size_t i = 0; i < d->n; i++) {
		if (d->a)
			d->a[i].ns = name;
		else
			d->c[i].ns = name;
	}
}

struct sync_doubts {
	struct sync_doubt *head;
};

/* Detaches doubt d (sn's, already unlinked) into a handover list at *tail,
 * with its namespace's identity copied (the definitions change before the
 * next sync exists). Returns the new tail; on failure d is freed and
 * counted in *lost. */
static struct sync_doubt **sync_doubt_detach(struct sync_ns *sn, struct sync_doubt *d,
					     struct sync_doubt **tail, size_t *lost)
{
	d->next = NULL;
	d->sn = NULL;
	free(d->ns_name), free(d->store), free(d->opts);
	d->ns_name = strdup(sn->def->name);
	d->store = strdup(sn->def->strategy);
	d->opts = strdup(sn->def->strategy_opts ? sn->def->strategy_opts : "");
	if (!d->ns_name || !d->store || !d->opts) {
		sync_doubt_free(d);
		(*lost)++;
		return tail;
	}
	sync_doubt_rename(d, d->ns_name);
	*tail = d;
	return &d->next;
}

struct sync_doubts *sync_doubts_take(struct sync *sy)
{
	struct sync_doubts *out = sy ? calloc(1, sizeof(*out)) : NULL;
	struct sync_doubt **tail = out ? &out->head : NULL;

	for (size_t i = 0; out && i < sy->n; i++) {
		struct sync_ns *sn = &sy->ns[i];
		struct sync_doubt *d, **link = &sn->doubts;
		size_t lost = 0;

		/* The cycle's push in flight, or the doubt being resent (the
		 * first), stays: sync_stop fails it (what a failing call
		 * confirmed in part is acknowledged by its callback, so it
		 * cannot be copied now). */
		if (sn->doubt_busy && *link)
			link = &(*link)->next;
		while ((d = *link)) {
			*link = d->next;
			sn->ndoubts--;
			tail = sync_doubt_detach(sn, d, tail, &lost);
		}
		if (!sn->busy && sn->retry && sn->n > 0) {
			/* The sync cycle's unconfirmed push, as a push in doubt:
			 * once answered, what it counted is taken back from the
			 * diffs, which the next sync pushes again. */
			if (sync_doubt_new(sn, sn->token, NULL, sn->batch, sn->n, &d) < 0)
				lost++;
			else if (d)
				tail = sync_doubt_detach(sn, d, tail, &lost);
			sn->retry = false;
		}
		if (lost)
			sync_doubt_log(sy, sn->def->name, "out of memory at a reload");
	}
	return out;
}

void sync_doubts_give(struct sync *sy, struct sync_doubts *list)
{
	struct sync_doubt *d, *next;
	size_t gone = 0, full = 0;
	const char *name = "";

	if (!list)
		return;
	for (d = list->head; d; d = next) {
		struct sync_ns *sn = NULL;
		struct sync_doubt **tail;

		next = d->next;
		d->next = NULL;
		for (size_t i = 0; sy && i < sy->n && !sn; i++) {
			const struct ns_def *def = sy->ns[i].def;

			if (strcmp(def->name, d->ns_name) == 0 && strcmp(def->strategy, d->store) == 0 &&
			    strcmp(def->strategy_opts ? def->strategy_opts : "", d->opts) == 0)
				sn = &sy->ns[i];
		}
		if (!sn || sn->ndoubts >= SYNC_DOUBT_MAX) {
			gone += !sn;
			full += sn != NULL;
			if (!name[0])
				name = d->ns_name;
			LOG(LOG_DEBUG, "namespace \"%s\": a call in doubt dropped at the reload (%s)",
			    d->ns_name, sn ? "too many" : "namespace gone, or its store changed");
			sync_doubt_free(d);
			continue;
		}
		d->sn = sn;
		sync_doubt_rename(d, sn->def->name);
		free(d->ns_name), free(d->store), free(d->opts);
		d->ns_name = d->store = d->opts = NULL;
		for (tail = &sn->doubts; *tail; tail = &(*tail)->next)
			;
		*tail = d;
		sn->ndoubts++;
		if (!ev_is_active(&sy->doubt_timer))
			ev_timer_again(sy->loop, &sy->doubt_timer);
	}
	if (gone || full)
		LOG(LOG_WARN, "reload: %zu call(s) in doubt dropped (%zu of namespaces gone or whose "
		    "store changed, %zu over the cap; \"%s\" first): a store that applied them "
		    "late has their hits counted twice", gone + full, gone, full, name);
	free(list);
}

void sync_doubts_free(struct sync_doubts *list)
{
	struct sync_doubt *d, *next;

	for (d = list ? list->head : NULL; d; d = next) {
		next = d->next;
		sync_doubt_free(d);
	}
	free(list);
}

/* ---- gathering, parking, sending (sync_rate 0) ---- */

static int sync_park(struct sync *sy, struct sync_ns *sn, struct sync_gather *g, bool admit);

/* Sends a gather to its store: the pushes, or the admissions. While the
 * store is connecting (a worker's first connection, a reconnect) the
 * gather is parked until the attempt ends, at most until g->until; a
 * store away, or a refusal, fails it through its callbacks. */
static void sync_send(struct sync *sy, struct sync_ns *sn, struct sync_gather *g, bool admit)
{
	char err[STRATEGY_ERR_MAX] = "not connected";
	int rc;

	if (!sn->ops->ready(sn->st)) {
		if (sn->ops->connecting(sn->st) && ev_now(sy->loop) < g->until) {
			if (sync_park(sy, sn, g, admit) == 0)
				return;
		} else if (sn->ops->connecting(sn->st)) {
			snprintf(err, sizeof(err), "not connected (still connecting after %g s)",
				 SYNC_PARK_LIMIT);
		}
		sync_gather_done(g, -1, err);
		return;
	}
	g->sn = sn;
	if (!g->token[0])
		sync_token(sn, admit ? 'a' : 's', ++sn->aseq, g->token);
	rc = admit ? sn->ops->admit(sn->st, g->a, g->na, g->token, sync_gather_done, g, err)
		   : sn->ops->push_diffs(sn->st, g->c, g->n, g->token, sync_gather_done, g, err);
	if (rc < 0)
		sync_gather_done(g, -1, err);
	else
		g->sent = true;
}

/* Every parked gather is sent again (sent, parked again, or failed). */
static void sync_on_park_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct sync *sy = container_of(w, struct sync, park_timer);
	struct sync_parked *list = sy->parked;
	size_t n = sy->nparked;

	(void)revents;
	/* Sending may park again: into the other list. */
	sy->parked = sy->parked_spare;
	sy->parked_spare = list;
	sy->nparked = 0;
	for (size_t i = 0; i < n; i++)
		sync_send(sy, list[i].sn, list[i].g, list[i].admit);
	if (sy->nparked == 0)
		ev_timer_stop(loop, w);
}

/* Parks a gather until its connecting store is ready. Returns 0 or -1 (no
 * room). */
static int sync_park(struct sync *sy, struct sync_ns *sn, struct sync_gather *g, bool admit)
{
	if (!sy->parked) {
		sy->parked = malloc(SYNC_PARK_MAX * sizeof(*sy->parked));
		sy->parked_spare = malloc(SYNC_PARK_MAX * sizeof(*sy->parked_spare));
		if (!sy->parked || !sy->parked_spare) {
			free(sy->parked), free(sy->parked_spare);
			sy->parked = sy->parked_spare = NULL;
			return -1;
		}
		ev_timer_init(&sy->park_timer, sync_on_park_timer, SYNC_PARK_POLL, SYNC_PARK_POLL);
	}
	if (sy->nparked >= SYNC_PARK_MAX)
		return -1;
	sy->parked[sy->nparked++] = (struct sync_parked){ .sn = sn, .g = g, .admit = admit };
	if (!ev_is_active(&sy->park_timer))
		ev_timer_again(sy->loop, &sy->park_timer);
	return 0;
}

/* A gathered push answered: each request gets its counters' totals and
 * its callback, then the gather is reused. */
static void sync_gather_done(void *arg, int status, const char *errstr)
{
	struct sync_gather *g = arg;
	struct sync *sy = g->sy;
	size_t off = 0;

	if (g->sent && !sy->stopping)
		sync_doubt_keep(g);

	for (size_t i = 0; i < g->nreq; i++) {
		struct sync_req *r = &g->req[i];

		for (size_t j = 0; j < r->n; j++) {
			if (r->a) {
				r->a[j] = g->a[off + j];
				continue;
			}
			r->c[j].total = g->c[off + j].total;
			r->c[j].ok = g->c[off + j].ok;
		}
		off += r->n;
		r->cb(r->arg, status, errstr);
	}
	g->n = g->na = g->nreq = 0;
	g->next = sy->free_gathers;
	sy->free_gathers = g;
}

/* Before the loop waits: every namespace's gathered pushes and
 * admissions leave, one call each. */
static void sync_on_gather(struct ev_loop *loop, ev_prepare *w, int revents)
{
	struct sync *sy = container_of(w, struct sync, gather_w);

	(void)revents;
	ev_prepare_stop(loop, w);
	for (size_t i = 0; i < sy->n; i++) {
		struct sync_ns *sn = &sy->ns[i];
		struct sync_gather *g;

		if ((g = sn->gather)) {
			sn->gather = NULL;
			sync_send(sy, sn, g, false);
		}
		if ((g = sn->gather_adm)) {
			sn->gather_adm = NULL;
			sync_send(sy, sn, g, true);
		}
	}
}

/* Grows an array of elements of size sz to hold need, doubling. */
static int sync_grow(void **p, size_t *cap, size_t need, size_t sz)
{
	size_t c = *cap ? *cap : 16;
	void *np;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	if (!(np = realloc(*p, c * sz)))
		return -1;
	*p = np;
	*cap = c;
	return 0;
}

/* The gather *slot of a namespace (taken from the free list if empty),
 * with room for n more counters or admissions and one more request. NULL
 * when out of memory. */
static struct sync_gather *sync_gather_room(struct sync *sy, struct sync_gather **slot,
					    size_t n, bool admit)
{
	struct sync_gather *g = *slot;
	int rc;

	if (!g) {
		if ((g = sy->free_gathers))
			sy->free_gathers = g->next;
		else if (!(g = calloc(1, sizeof(*g))))
			return NULL;
		g->sy = sy;
		g->sn = NULL;
		g->sent = false;
		g->token[0] = '\0';
		g->n = g->na = g->nreq = 0;
		g->until = ev_now(sy->loop) + SYNC_PARK_LIMIT;
		*slot = g;
	}
	rc = admit ? sync_grow((void **)&g->a, &g->acap, g->na + n, sizeof(*g->a))
		   : sync_grow((void **)&g->c, &g->cap, g->n + n, sizeof(*g->c));
	if (rc < 0 || sync_grow((void **)&g->req, &g->reqcap, g->nreq + 1, sizeof(*g->req)) < 0) {
		if (g->nreq == 0) {
			*slot = NULL;
			g->next = sy->free_gathers;
			sy->free_gathers = g;
		}
		return NULL;
	}
	if (!ev_is_active(&sy->gather_w))
		ev_prepare_start(sy->loop, &sy->gather_w);
	return g;
}

/* sync_rate 0: adds a push to its namespace's gather (sent before the loop
 * waits again). Returns 0 (cb runs once, later), or -1 when the store is
 * neither up nor connecting, or out of memory (cb never runs). Once warm,
 * nothing is allocated. */
static int sync_push_later(struct sync *sy, unsigned ns, struct strategy_counter *c, size_t n,
			   strategy_done_cb cb, void *arg)
{
	struct sync_ns *sn = sy && !sy->stopping ? sync_find_ns(sy, ns) : NULL;
	struct sync_gather *g;

	if (!sn || (!sn->ops->ready(sn->st) && !sn->ops->connecting(sn->st)) ||
	    !(g = sync_gather_room(sy, &sn->gather, n, false)))
		return -1;
	memcpy(g->c + g->n, c, n * sizeof(*c));
	g->n += n;
	g->req[g->nreq++] = (struct sync_req){ .c = c, .n = n, .cb = cb, .arg = arg };
	return 0;
}

/* Admissions, gathered the same way (one admit call per namespace and
 * loop iteration); while the store is connecting they wait for it. */
static int sync_admit_later(struct sync *sy, unsigned ns, struct strategy_admit *a, size_t n,
			    strategy_done_cb cb, void *arg)
{
	struct sync_ns *sn = sy && !sy->stopping ? sync_find_ns(sy, ns) : NULL;
	struct sync_gather *g;

	if (!sn || !sn->ops->admit ||
	    (!sn->ops->ready(sn->st) && !sn->ops->connecting(sn->st)) ||
	    !(g = sync_gather_room(sy, &sn->gather_adm, n, true)))
		return -1;
	memcpy(g->a + g->na, a, n * sizeof(*a));
	g->na += n;
	g->req[g->nreq++] = (struct sync_req){ .a = a, .n = n, .cb = cb, .arg = arg };
	return 0;
}

/* ---- hits pushed, their answers applied ---- */

/* The nodes sharing a namespace's limits, for grants: as last counted, 1
 * until then. A count too low only makes grants bigger, never lets the
 * cluster pass a limit: the store counts a grant when it gives it. */
static unsigned sync_nodes(const struct shm_table *t, unsigned ns)
{
	unsigned n = shm_nodes(t, ns);

	return n > 0 ? n : 1;
}

/* An admission on slot idx is sent: counted in flight, and the grant it
 * asks for (0: none): twice the node's demand on the key in the last sync
 * cycle; before the node has seen a cycle of it, 1/SYNC_GRANT_FIRST_SHARE
 * of the limit's share of a node (a small limit gets none: its first hits
 * go to the store one by one). Only an admission alone in flight for its
 * slot asks: the hits of a burst sent together would all be decided by
 * the store before a grant came back, and a grant nobody uses only holds
 * headroom (docs/CLUSTER.md, "The bound"). */
static double sync_grant_want(struct shm_table *t, uint32_t idx, double limit, unsigned nodes)
{
	double last;

	if (idx == UINT32_MAX)
		return 0;
	if (shm_grant_flight(t, idx, 1) > 1 || nodes == 0 || (last = shm_grant_begin(t, idx)) < 0)
		return 0;
	return last > 0 ? 2 * last : limit / (SYNC_GRANT_FIRST_SHARE * nodes);
}

static void sync_hits_on_pushed(void *arg, int status, const char *errstr)
{
	struct sync_hits *b = arg;

	if (status < 0 && !b->why[0])
		snprintf(b->why, sizeof(b->why), "%s", errstr ? errstr : "failed");
	if (--b->outstanding == 0)
		b->done(b->arg);
}

int sync_hits_push(struct sync *sy, struct sync_hits *b, double now, void (*done)(void *arg),
		   void *arg)
{
	b->nc = 0;
	b->outstanding = 0;
	b->why[0] = '\0';
	b->now = now;
	b->done = done;
	b->arg = arg;
	for (size_t i = 0; i < b->n; i++)
		b->h[i].ci = -1;
	if (!sy) {
		snprintf(b->why, sizeof(b->why), "no sync");
		return 0;
	}
	b->na = 0;
	for (size_t i = 0; i < b->n; i++) {
		int ns = b->h[i].ns;
		if (b->h[i].ci >= 0)
			continue;
		size_t first = b->nc, afirst = b->na;
		const char *nsname = rl_namespace_def(sy->rl, ns)->name;
		for (size_t j = i; j < b->n; j++) {
			struct sync_hit *h = &b->h[j];
			struct shm_entry *e = &h->e;
			if (h->ns != ns)
				continue;
			if (h->idx == UINT32_MAX || shm_read(sy->t, h->idx, e) < 0) {
				/* No local slot (a read of a key this node has not
				 * counted): ask the store, seed the slot from it. */
				e->idx = UINT32_MAX;
				e->keylen = (uint8_t)h->keylen;
				memcpy(e->key, h->key, h->keylen);
				e->start = window_start(now, h->size);
				e->size = h->size;
			}
			if (h->admit) {
				h->ci = (int)b->na;
				b->a[b->na++] = (struct strategy_admit){
					.ns = nsname, .ns_len = strlen(nsname), .key = e->key,
					.key_len = e->keylen, .start = e->start, .size = e->size,
					.cost = h->cost, .limit = h->limit, .weight = h->weight,
					.count_denied = h->count_denied,
					.nodes = sync_nodes(sy->t, rl_shm_ns(sy->rl, ns)),
				};
				b->a[b->na - 1].want = sync_grant_want(sy->t, e->idx, h->limit,
								       b->a[b->na - 1].nodes);
				continue;
			}
			h->ci = (int)b->nc;
			b->c[b->nc++] = (struct strategy_counter){
				.ns = nsname, .ns_len = strlen(nsname), .key = e->key,
				.key_len = e->keylen, .start = e->start, .size = e->size,
				.diff = h->diff,
			};
			if (h->with_prev)
				b->c[b->nc++] = (struct strategy_counter){
					.ns = nsname, .ns_len = strlen(nsname), .key = e->key,
					.key_len = e->keylen, .start = e->start - (int64_t)e->size,
					.size = e->size, .diff = 0,
				};
		}
		if (b->nc > first) {
			if (sync_push_later(sy, (unsigned)ns, &b->c[first], b->nc - first,
					    sync_hits_on_pushed, b) == 0)
				b->outstanding++;
			else if (!b->why[0])
				snprintf(b->why, sizeof(b->why), "not connected");
		}
		if (b->na > afirst) {
			if (sync_admit_later(sy, (unsigned)ns, &b->a[afirst], b->na - afirst,
					     sync_hits_on_pushed, b) == 0)
				b->outstanding++;
			else if (!b->why[0])
				snprintf(b->why, sizeof(b->why), "not connected");
		}
	}
	return b->outstanding > 0;
}

/* A counted hit the store did not confirm goes into its slot's diff; if
 * the slot was evicted meanwhile (its diff was 0 while the push was in
 * flight), into a new one. */
static void sync_keep_entry(struct rl *rl, int ns, const struct shm_entry *e, double diff)
{
	if (!(diff > 0))
		return;
	/* idx UINT32_MAX: the slot was gone when the push was built. */
	if (e->idx != UINT32_MAX && shm_restore_diff(rl_shm(rl), e, diff) == 0)
		return;
	if (rl_keep(rl, ns, e->key, e->keylen, e->size, e->start, diff, rl_now()) < 0)
		SYNC_HIT_LOG(LOG_ERR, "namespace \"%s\": a hit the store did not confirm could not "
			     "be kept (%s)", rl_namespace_def(rl, ns)->name,
			     rl_status_str(rl_errno(rl)));
}

void sync_hit_keep(struct rl *rl, const struct sync_hit *h)
{
	struct shm_entry e;

	if (h->diff > 0 && h->idx != UINT32_MAX && shm_read(rl_shm(rl), h->idx, &e) == 0)
		sync_keep_entry(rl, h->ns, &e, h->diff);
}

/* The hits of slot e's window as this node knows them once an admission's
 * answer is in its table: the store's count, and the node's own hits the
 * store has not counted yet (its diff, the grant hits it has not reported
 * spent), what answers from a grant say too; `store` (the store's count)
 * when the slot is gone. Never what is left of a grant: the store holds
 * it apart, and nobody's grant is hits. */
static double sync_view(const struct shm_table *t, const struct shm_entry *e, double store)
{
	struct shm_entry now;

	if (e->idx == UINT32_MAX || shm_read(t, e->idx, &now) < 0 || now.meta != e->meta)
		return store;
	return now.count - shm_grant_left(t, e->idx);
}

void sync_hits_apply(struct rl *rl, struct sync_hits *b)
{
	for (size_t i = 0; i < b->n; i++) {
		struct sync_hit *h = &b->h[i];
		h->ok = h->prev_ok = h->admitted = false;
		h->grant = 0;
		if (h->admit) {
			/* Nothing was counted here: a failed admission leaves
			 * nothing to keep (the caller decides locally). */
			const struct strategy_admit *a = h->ci >= 0 ? &b->a[h->ci] : NULL;
			if (a && h->e.idx != UINT32_MAX)
				shm_grant_flight(rl_shm(rl), h->e.idx, -1);
			if (a && a->want > 0)
				shm_grant_end(rl_shm(rl), h->e.idx);
			if (!a || !a->ok)
				continue;
			if (h->e.idx != UINT32_MAX)
				shm_sync_total(rl_shm(rl), &h->e, a->current);
			else
				rl_seed(rl, h->ns, a->key, a->key_len, a->size, a->start, a->current,
					b->now);
			if (a->weight > 0)
				rl_seed(rl, h->ns, a->key, a->key_len, a->size,
					a->start - (int64_t)a->size, a->previous, b->now);
			if (a->grant > 0 &&
			    rl_grant(rl, h->ns, a->key, a->key_len, a->size, a->start, a->grant,
				     b->now) < 0)
				SYNC_HIT_LOG(LOG_WARN, "namespace \"%s\": a grant of the store could "
					     "not be kept (%s): %g of the limit stay counted until "
					     "the window ends", rl_namespace_def(rl, h->ns)->name,
					     rl_status_str(rl_errno(rl)), a->grant);
			h->ok = h->prev_ok = true;
			h->admitted = a->admitted;
			h->grant = a->grant;
			h->total = sync_view(rl_shm(rl), &h->e, a->current);
			h->prev_total = a->previous;
			continue;
		}
		if (h->ci < 0) {
			/* never pushed */
			sync_hit_keep(rl, h);
			continue;
		}
		struct strategy_counter *cur = &b->c[h->ci];
		if (!cur->ok) {
			sync_keep_entry(rl, h->ns, &h->e, h->diff);
			continue;
		}
		if (h->e.idx != UINT32_MAX)
			(cur->reset ? shm_follow_total : shm_sync_total)(rl_shm(rl), &h->e,
									 cur->total);
		else
			rl_seed(rl, h->ns, cur->key, cur->key_len, cur->size, cur->start, cur->total,
				b->now);
		h->ok = true;
		h->total = cur->total;
		if (h->with_prev) {
			struct strategy_counter *prev = cur + 1;
			if (prev->ok) {
				h->prev_ok = true;
				h->prev_total = prev->total;
				rl_seed(rl, h->ns, prev->key, prev->key_len, prev->size, prev->start,
					prev->total, b->now);
			}
		}
	}
}

/* ---- a sync's life: set up, stop ---- */

void sync_hits_init(struct sync *sy)
{
	ev_prepare_init(&sy->gather_w, sync_on_gather);
	ev_init(&sy->doubt_timer, sync_on_doubt_timer);
	sy->doubt_timer.repeat = SYNC_DOUBT_POLL;
}

void sync_hits_stop(struct sync *sy)
{
	/* Gathered pushes not sent yet fail: their hits stay in the diffs. */
	ev_prepare_stop(sy->loop, &sy->gather_w);
	for (size_t i = 0; i < sy->n; i++) {
		struct sync_gather *g = sy->ns[i].gather, *ga = sy->ns[i].gather_adm;

		sy->ns[i].gather = sy->ns[i].gather_adm = NULL;
		if (g)
			sync_gather_done(g, -1, "not connected (stopping)");
		if (ga)
			sync_gather_done(ga, -1, "not connected (stopping)");
	}
	if (sy->parked) {
		/* Parked pushes fail: their hits stay in the diffs. */
		ev_timer_stop(sy->loop, &sy->park_timer);
		for (size_t i = 0; i < sy->nparked; i++)
			sync_gather_done(sy->parked[i].g, -1, "not connected (stopping)");
		free(sy->parked);
		free(sy->parked_spare);
	}
	ev_timer_stop(sy->loop, &sy->doubt_timer);
}

void sync_doubts_drop(struct sync_ns *sn)
{
	if (sn->doubts)
		LOG(LOG_WARN, "namespace \"%s\": %zu call(s) in doubt left at stop: a store "
		    "that applied them late has their hits counted twice", sn->def->name,
		    sn->ndoubts);
	while (sn->doubts)
		sync_doubt_pop(sn);
}

void sync_hits_free(struct sync *sy)
{
	while (sy->free_gathers) {
		struct sync_gather *g = sy->free_gathers;

		sy->free_gathers = g->next;
		free(g->c);
		free(g->a);
		free(g->req);
		free(g);
	}
}
