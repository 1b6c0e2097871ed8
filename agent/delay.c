/*
 * delay.c - delay instead of deny (a namespace's delay_max_ms; see
 * docs/CONFIG.md): a decision over a limit that would fit within that
 * many ms is held and decided again when the sliding window makes room,
 * in arrival order per key.
 *
 *   decide_run --denied--> delay_hold: the wait until every limit it is
 *      over admits it (window_retry_after), within the smallest
 *      delay_max_ms of those limits and the bounds? --no--> answered now
 *          | yes: its counts taken back, the requests copied (with
 *          |      their stored keys), queued behind its key's earlier
 *          v      held decisions
 *   the key's queue: one timer, for its head: decided again (decide_parts)
 *      admitted --> delivered with delayed_ms; the next one is tried
 *      denied, the wait still within its deadline --> counts taken back,
 *          the timer re-armed
 *      denied otherwise --> delivered, denied as without delay (counted
 *          as count_denied says)
 *
 * A decision for a key that has held decisions (in this worker) waits
 * behind them, undecided, if the position it would take can still be
 * reached within its delay (the wait of the queue's limit with the hits
 * ahead counted); else it is decided as usual. The order holds within a
 * worker: another worker's hits of the key are decided on their own.
 *
 * Bounds, so that no client takes delay from the others: held decisions
 * per key (DECIDE_DELAY_PER_KEY), per connection (DECIDE_DELAY_PER_OWNER),
 * and per namespace (its even part of DECIDE_DELAY_MAX among the
 * namespaces that delay: the worker's bound, which the pool keeps for
 * delayed decisions, apart from those waiting for a store). Beyond any,
 * denied as without delay, counted in delay_refused_total{bound}. A held decision never
 * stops its connection from being read: others' answers go out meanwhile.
 */
#include "agent/decide_int.h"
#include "strategies/container.h"

#include <ev.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "agent/metrics.h"
#include "agent/window.h"

#define DELAY_SLACK 0.0005   /* seconds: a timer that fires this early is on time */

/* The held decisions of one key (the namespace and stored key of the
 * limit that held the first of them), in arrival order. */
struct delay_queue {
	struct delay_queue *next;        /* hash chain, or the free list */
	struct decide *d;
	int ns;
	uint8_t keylen;
	char key[RL_STORED_KEY_MAX];
	struct decide_pending *head, *tail;
	size_t n;
	/* The limit that holds it, as last seen: to tell a newcomer the
	 * wait its place in the line means. */
	double cur, prev, limit, cost;
	uint32_t window;
	bool sliding;
	ev_timer timer;
};

static unsigned dq_bucket(int ns, const char *key, size_t len)
{
	uint32_t h = 2166136261u ^ (uint32_t)ns;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (uint8_t)key[i]) * 16777619u;
	return h % (sizeof(((struct decide *)0)->dq_hash) / sizeof(struct delay_queue *));
}

static struct delay_queue *dq_find(struct decide *d, int ns, const char *key, size_t len)
{
	for (struct delay_queue *q = d->dq_hash[dq_bucket(ns, key, len)]; q; q = q->next)
		if (q->ns == ns && q->keylen == len && memcmp(q->key, key, len) == 0)
			return q;
	return NULL;
}

static void dq_on_timer(struct ev_loop *loop, ev_timer *t, int revents);

static struct delay_queue *dq_new(struct decide *d, int ns, const char *key, size_t len)
{
	struct delay_queue *q = d->dq_free;

	if (q)
		d->dq_free = q->next;
	else if (!(q = malloc(sizeof(*q))))
		return NULL;
	memset(q, 0, sizeof(*q));
	q->d = d;
	q->ns = ns;
	q->keylen = (uint8_t)len;
	memcpy(q->key, key, len);
	ev_init(&q->timer, dq_on_timer);
	unsigned b = dq_bucket(ns, key, len);
	q->next = d->dq_hash[b];
	d->dq_hash[b] = q;
	return q;
}

static void dq_drop(struct delay_queue *q)
{
	struct decide *d = q->d;
	struct delay_queue **pp = &d->dq_hash[dq_bucket(q->ns, q->key, q->keylen)];

	ev_timer_stop(d->loop, &q->timer);
	while (*pp && *pp != q)
		pp = &(*pp)->next;
	if (*pp)
		*pp = q->next;
	q->next = d->dq_free;
	d->dq_free = q;
}

/* The namespace a request (its key's stored form sk) is queued in, or -1
 * (no key, no such namespace). */
static int request_ns(const struct decide *d, const struct rl_request *rq,
		      const struct rl_skey *sk)
{
	if (sk->len == 0)
		return -1;
	return rl_namespace_index(d->rl, rq->ns ? rq->ns : "default", rq->ns ? rq->ns_len : 7);
}

/* Copies s[0..n) into p->keys at *used; *out points at the copy. */
static bool copy_string(struct decide_pending *p, size_t *used, const char **out, size_t n)
{
	if (!*out)
		return true;
	if (*used + n > sizeof(p->keys))
		return false;
	memcpy(p->keys + *used, *out, n);
	*out = p->keys + *used;
	*used += n;
	return true;
}

/* Copies the requests and their keys' stored forms into p, their strings
 * into p->keys (a verbatim stored key points at its request's copy). */
static bool copy_requests(struct decide_pending *p, const struct rl_request *rq,
			  const struct rl_skey *sk, size_t n)
{
	size_t used = 0;

	for (size_t i = 0; i < n; i++) {
		struct rl_request *c = &p->rq[i];
		*c = rq[i];
		if (!copy_string(p, &used, &c->ns, c->ns_len) ||
		    !copy_string(p, &used, &c->key, c->key_len))
			return false;
		p->sk[i] = sk[i];
		p->sk[i].text = c->key;
	}
	p->nrq = n;
	return true;
}

/* The limit of a part as the rate is checked against it. */
static double part_cap(const struct rl_decision *r)
{
	return r->cap < (double)r->limit ? r->cap : (double)r->limit;
}

/* Over the parts a decision is denied by: the longest wait until each
 * admits it, and the smallest delay_max_ms of their namespaces (seconds;
 * 0: one of them never delays). *by: the part that waits the longest.
 * false: not a denial that can wait (no part over its limit, an error). */
static bool denial_wait(const struct decide *d, const struct rl_decision *parts, size_t np,
			double now, double *wait, double *budget, size_t *by)
{
	bool any = false;

	*wait = 0;
	*budget = INFINITY;
	*by = 0;
	for (size_t k = 0; k < np; k++) {
		const struct rl_decision *r = &parts[k];
		if (r->error)
			return false;
		if (!r->exceeded)
			continue;
		const struct ns_def *nsc = rl_namespace_def(d->rl, r->ns);
		double w = window_retry_after(r->current, r->previous, part_cap(r), now, r->window,
					      r->sliding);
		double b = nsc ? nsc->delay_max_ms / 1000.0 : 0;
		if (b < *budget)
			*budget = b;
		if (!any || w > *wait) {
			*wait = w;
			*by = k;
		}
		any = true;
	}
	return any && *budget > 0;
}

/* The limit that holds q, as r (the part that waits the longest) saw it:
 * what a newcomer's place in line will cost it. */
static void dq_note(struct delay_queue *q, const struct rl_decision *r)
{
	q->cur = r->current - r->cost;
	q->prev = r->previous;
	q->limit = part_cap(r);
	q->cost = r->cost;
	q->window = r->window;
	q->sliding = r->sliding;
}

/* The held decisions of namespace ns in this worker change by delta
 * (the gauge spoa_ratelimit_delay_held follows). */
static void held_add(struct decide *d, int ns, int delta)
{
	unsigned sid = rl_shm_ns(d->rl, ns);

	d->nheld = (size_t)((long)d->nheld + delta);
	d->nheld_ns[ns] = (uint16_t)(d->nheld_ns[ns] + delta);
	if (sid < METRICS_NS)
		atomic_store_explicit(&metrics_me->delay_held[sid], d->nheld_ns[ns],
				      memory_order_relaxed);
}

/* p leaves q (prev: the one before it, NULL for the head); the counts
 * of held decisions follow. */
static void dq_remove(struct delay_queue *q, struct decide_pending *prev,
		      struct decide_pending *p)
{
	struct decide *d = q->d;

	if (prev)
		prev->qnext = p->qnext;
	else
		q->head = p->qnext;
	if (q->tail == p)
		q->tail = prev;
	q->n--;
	held_add(d, q->ns, -1);
	p->dq = NULL;
	p->qnext = NULL;
}

/* p leaves the head of its queue, final: its parts are parts[0..np). */
static void dq_deliver(struct delay_queue *q, struct rl_decision *parts, size_t np, double now)
{
	struct decide *d = q->d;
	struct decide_pending *p = q->head;
	int64_t waited = (int64_t)llround((now - p->since) * 1000.0);

	dq_remove(q, NULL, p);
	for (size_t k = 0; k < np; k++)
		parts[k].delayed_ms = waited > 0 ? waited : 1;
	if (decide_needs_store(parts, np) && p->owner) {
		/* Room now, and a store decides it (exact admission): it waits
		 * for the store like any other, in a pending of its own. */
		struct decide_pending *s = decide_hold(d, parts, np, now, p->owner);
		if (s) {
			memcpy(decide_pending_tag(s), p->tag, sizeof(p->tag));
			pending_unlink(p);
			pending_put(d, p);
			return;
		}
	}
	memcpy(p->res, parts, np * sizeof(*parts));
	p->n = np;
	pending_deliver(p);
}

/* The queue's head is due: decided again; admitted ones leave, in order,
 * until one has to wait on. */
static void dq_run(struct delay_queue *q)
{
	struct decide *d = q->d;
	double now = rl_now();
	struct rl_decision parts[DECIDE_MAX_BATCH];

	while (q->head) {
		struct decide_pending *p = q->head;
		double wait, budget;
		size_t by;

		size_t np = decide_parts(d, p->rq, p->sk, p->nrq, now, parts, DECIDE_MAX_BATCH);
		if (!denial_wait(d, parts, np, now, &wait, &budget, &by) ||
		    now + wait > p->deadline + DELAY_SLACK) {
			/* Admitted, or it cannot be within its delay: final. */
			dq_deliver(q, parts, np, now);
			continue;
		}
		/* Still over, and room comes in time: wait on, uncounted. */
		decide_take_back(d, p->sk, parts, np, now, true);
		dq_note(q, &parts[by]);
		double at = wait < p->deadline - now ? wait : p->deadline - now;
		ev_timer_set(&q->timer, at > 0 ? at : 0, 0.);
		ev_timer_start(d->loop, &q->timer);
		return;
	}
	dq_drop(q);
}

static void dq_on_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
	(void)loop, (void)revents;
	dq_run(container_of(t, struct delay_queue, timer));
}

bool delay_queued(struct decide *d, const struct rl_request *rq, const struct rl_skey *sk,
		  size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int ns = request_ns(d, &rq[i], &sk[i]);
		if (ns >= 0 && dq_find(d, ns, rl_skey_bytes(&sk[i]), sk[i].len))
			return true;
	}
	return false;
}

/* Queues p (its requests copied) at the tail of q, until deadline. */
static void dq_push(struct delay_queue *q, struct decide_pending *p, double now,
		    double deadline)
{
	p->since = now;
	p->deadline = deadline;
	p->dq = q;
	p->qnext = NULL;
	if (q->tail)
		q->tail->qnext = p;
	else
		q->head = p;
	q->tail = p;
	q->n++;
	held_add(q->d, q->ns, 1);
}

void delay_drop(struct decide_pending *p)
{
	struct delay_queue *q = p->dq;
	struct decide_pending *prev = NULL;

	for (struct decide_pending *x = q->head; x && x != p; x = x->qnext)
		prev = x;
	dq_remove(q, prev, p);
	pending_put(q->d, p);
	/* The head's timer stays: it re-decides whoever is the head then. */
	if (!q->head)
		dq_drop(q);
}

/* The held decisions a namespace may have in this worker: its even part
 * of DECIDE_DELAY_MAX among the namespaces that delay. */
static size_t ns_share(const struct decide *d)
{
	size_t n = rl_namespace_count(d->rl), delaying = 0;

	for (size_t i = 0; i < n; i++)
		delaying += rl_namespace_def(d->rl, (int)i)->delay_max_ms > 0;
	return DECIDE_DELAY_MAX / (delaying > 0 ? delaying : 1);
}

/* Is there room to hold one more decision of namespace ns (its queue q,
 * if any) for owner? If not, which bound is full. count: a denial that
 * would have waited, counted in delay_refused_total. */
static bool room(struct decide *d, int ns, const struct delay_queue *q,
		 const struct decide_owner *owner, bool count)
{
	int bound;

	if (q && q->n >= DECIDE_DELAY_PER_KEY)
		bound = METRICS_DELAY_KEY;
	else if (owner->held >= DECIDE_DELAY_PER_OWNER)
		bound = METRICS_DELAY_OWNER;
	else if (d->nheld_ns[ns] >= ns_share(d))
		bound = METRICS_DELAY_NAMESPACE;     /* the shares add up to DECIDE_DELAY_MAX */
	else
		return true;
	unsigned sid = rl_shm_ns(d->rl, ns);
	if (count && sid < METRICS_NS)
		metrics_add(&metrics_me->delay_refused[sid][bound], 1);
	return false;
}

struct decide_pending *delay_hold(struct decide *d, const struct rl_request *rq,
				  const struct rl_skey *sk, size_t n, struct rl_decision *parts,
				  size_t np, double now, struct decide_owner *owner)
{
	struct delay_queue *q = NULL;
	struct decide_pending *p;
	double wait, budget;
	size_t by;

	if (!d->loop)
		return NULL;
	if (np == 0) {
		/* Behind the held decisions of one of its keys: in line, if
		 * its place there can be reached within that limit's delay.
		 * Refused by a bound, it is decided as usual (and counted in
		 * the metric if that denies it and it could have waited). */
		for (size_t i = 0; i < n && !q; i++) {
			int ns = request_ns(d, &rq[i], &sk[i]);
			if (ns >= 0)
				q = dq_find(d, ns, rl_skey_bytes(&sk[i]), sk[i].len);
		}
		const struct ns_def *nsc = q ? rl_namespace_def(d->rl, q->ns) : NULL;
		if (!q || !nsc || !room(d, q->ns, q, owner, false))
			return NULL;
		budget = nsc->delay_max_ms / 1000.0;
		wait = window_retry_after(q->cur + (double)(q->n + 1) * q->cost, q->prev, q->limit,
					  now, q->window, q->sliding);
		if (wait > budget || !(p = pending_get(d)))
			return NULL;
		if (!copy_requests(p, rq, sk, n)) {
			pending_put(d, p);
			return NULL;
		}
		dq_push(q, p, now, now + budget);
		pending_link(p, owner, true);
		return p;
	}
	if (!denial_wait(d, parts, np, now, &wait, &budget, &by) || wait > budget)
		return NULL;
	const struct rl_skey *key = &sk[parts[by].req];
	int ns = request_ns(d, &rq[parts[by].req], key);
	if (ns < 0)
		return NULL;
	q = dq_find(d, ns, rl_skey_bytes(key), key->len);
	if (!room(d, ns, q, owner, true))
		return NULL;
	if (!(p = pending_get(d)))
		return NULL;
	if (!copy_requests(p, rq, sk, n) ||
	    (!q && !(q = dq_new(d, ns, rl_skey_bytes(key), key->len)))) {
		pending_put(d, p);
		return NULL;
	}
	/* Held, not decided: nothing of it stays counted meanwhile. */
	decide_take_back(d, sk, parts, np, now, true);
	bool first = q->head == NULL;
	dq_note(q, &parts[by]);
	dq_push(q, p, now, now + budget);
	pending_link(p, owner, true);
	if (first) {
		ev_timer_set(&q->timer, wait, 0.);
		ev_timer_start(d->loop, &q->timer);
	}
	return p;
}

void delay_free(struct decide *d)
{
	for (size_t b = 0; b < sizeof(d->dq_hash) / sizeof(d->dq_hash[0]); b++)
		while (d->dq_hash[b]) {
			struct delay_queue *q = d->dq_hash[b];
			while (q->head) {
				struct decide_pending *p = q->head;
				dq_remove(q, NULL, p);
				pending_unlink(p);
				pending_put(d, p);
			}
			dq_drop(q);
		}
	while (d->dq_free) {
		struct delay_queue *q = d->dq_free;
		d->dq_free = q->next;
		free(q);
	}
}
