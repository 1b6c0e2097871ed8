/*
 * sync_gather.c - the calls of sync_rate 0 and of exact admission on their
 * way to the store (docs/CLUSTER.md, "Words"):
 *
 *   gather    every push (sync_gather_push) or admission
 *             (sync_gather_admit) asked for during one loop iteration,
 *             per namespace (admissions: and per store step, as a window
 *             namespace's admissions and its settles' claims, lease steps,
 *             are of two), leaves as one call before the loop waits
 *             again (an ev_prepare): one store round trip for every hit
 *             that arrived together, whatever connection or front it
 *             came from
 *   park      a call that finds its store connecting waits for the
 *             attempt, polled every SYNC_PARK_POLL (the attempt ends
 *             within the store's timeout_ms)
 *   send      with a token of its own; once answered, each caller gets
 *             its items back; a call answered in part or not at all after
 *             it was sent goes to the list of calls in doubt
 *             (sync_doubt_keep_hits)
 *
 * What the hits are and what their answers do to the table is
 * sync_hits.c's, which calls this file.
 */
#include "agent/sync_int.h"
#include "strategies/container.h"

#include <stdlib.h>
#include <string.h>

#define SYNC_PARK_MAX    4096     /* calls waiting for a connecting store */
#define SYNC_PARK_POLL   0.002    /* how often they look at the store */
#define SYNC_PARK_LIMIT  30.0     /* safety bound: the store's timeout ends the attempt first */

/* One caller's part of a gather. */
struct sync_req {
	struct strategy_counter *c;       /* the caller's counters, or */
	struct strategy_admit *a;         /* its admissions */
	size_t n;
	strategy_done_cb cb;
	void *arg;
};

/* The pushes, or the admissions, of one namespace and loop iteration. */
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

/* A gather that found its store connecting. */
struct sync_parked {
	struct sync_ns *sn;
	struct sync_gather *g;
	bool admit;
};

/* A gather answered: each caller gets its items and its callback, then
 * the gather is reused. */
static void sync_gather_done(void *arg, int status, const char *errstr)
{
	struct sync_gather *g = arg;
	struct sync *sy = g->sy;
	size_t off = 0;

	if (g->sent && !sy->stopping && g->sn)
		sync_doubt_keep_hits(g->sn, g->token, g->na ? g->a : NULL, g->na ? NULL : g->c,
				     g->na ? g->na : g->n);

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

static int sync_park(struct sync *sy, struct sync_ns *sn, struct sync_gather *g, bool admit);

/* Sends a gather to its store: the pushes, or the admissions. While the
 * store is connecting (a worker's first connection, a reconnect) the
 * gather is parked until the attempt ends, at most until g->until; a
 * store away, or a refusal, fails it through its callbacks. */
static void sync_gather_send(struct sync *sy, struct sync_ns *sn, struct sync_gather *g,
			     bool admit)
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

/* ---- parked ---- */

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
		sync_gather_send(sy, list[i].sn, list[i].g, list[i].admit);
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

/* ---- gathered ---- */

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
			sync_gather_send(sy, sn, g, false);
		}
		for (size_t k = 0; k < STRATEGY_STEPS; k++)
			if ((g = sn->gather_adm[k])) {
				sn->gather_adm[k] = NULL;
				sync_gather_send(sy, sn, g, true);
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

/* The namespace ns of sy if its store is ready or connecting (and can
 * decide admissions, for admit), else NULL. */
static struct sync_ns *sync_gather_ns(struct sync *sy, unsigned ns, bool admit)
{
	struct sync_ns *sn = sy && !sy->stopping ? sync_find_ns(sy, ns) : NULL;

	if (!sn || (admit && !sn->ops->admit) ||
	    (!sn->ops->ready(sn->st) && !sn->ops->connecting(sn->st)))
		return NULL;
	return sn;
}

/* A caller's counters c or admissions a (the other NULL) added to their
 * namespace's gather. */
static int sync_gather_add(struct sync *sy, unsigned ns, struct strategy_counter *c,
			   struct strategy_admit *a, size_t n, strategy_done_cb cb, void *arg)
{
	bool admit = a != NULL;
	struct sync_ns *sn = sync_gather_ns(sy, ns, admit);
	struct sync_gather *g;

	if (!sn || (admit && (n == 0 || (unsigned)a[0].step >= STRATEGY_STEPS)) ||
	    !(g = sync_gather_room(sy, admit ? &sn->gather_adm[a[0].step] : &sn->gather, n, admit)))
		return -1;
	if (admit) {
		memcpy(g->a + g->na, a, n * sizeof(*a));
		g->na += n;
	} else {
		memcpy(g->c + g->n, c, n * sizeof(*c));
		g->n += n;
	}
	g->req[g->nreq++] = (struct sync_req){ .c = c, .a = a, .n = n, .cb = cb, .arg = arg };
	return 0;
}

int sync_gather_push(struct sync *sy, unsigned ns, struct strategy_counter *c, size_t n,
		     strategy_done_cb cb, void *arg)
{
	return sync_gather_add(sy, ns, c, NULL, n, cb, arg);
}

int sync_gather_admit(struct sync *sy, unsigned ns, struct strategy_admit *a, size_t n,
		      strategy_done_cb cb, void *arg)
{
	return sync_gather_add(sy, ns, NULL, a, n, cb, arg);
}

/* ---- a sync's life ---- */

void sync_gather_init(struct sync *sy)
{
	ev_prepare_init(&sy->gather_w, sync_on_gather);
}

void sync_gather_stop(struct sync *sy)
{
	/* Gathered calls not sent yet fail: their hits stay in the diffs. */
	ev_prepare_stop(sy->loop, &sy->gather_w);
	for (size_t i = 0; i < sy->n; i++) {
		struct sync_gather *g = sy->ns[i].gather;

		sy->ns[i].gather = NULL;
		if (g)
			sync_gather_done(g, -1, "not connected (stopping)");
		for (size_t k = 0; k < STRATEGY_STEPS; k++) {
			struct sync_gather *ga = sy->ns[i].gather_adm[k];

			sy->ns[i].gather_adm[k] = NULL;
			if (ga)
				sync_gather_done(ga, -1, "not connected (stopping)");
		}
	}
	if (sy->parked) {
		/* Parked calls fail: their hits stay in the diffs. */
		ev_timer_stop(sy->loop, &sy->park_timer);
		for (size_t i = 0; i < sy->nparked; i++)
			sync_gather_done(sy->parked[i].g, -1, "not connected (stopping)");
		free(sy->parked);
		free(sy->parked_spare);
	}
}

void sync_gather_free(struct sync *sy)
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
