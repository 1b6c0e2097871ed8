/*
 * sync_lease.c - lease steps sent to the store on their own (struct
 * strategy_admit, STRATEGY_STEP_LEASE), retried until it answers:
 *
 *   releases  a concurrency lease given back (sync_lease_release, sync.h;
 *             docs/CLUSTER.md, "Concurrency across a cluster"): the step
 *             with cost 0; removing an id twice removes nothing, so a
 *             release may be sent again as often as needed and still frees
 *             its lease once
 *   adds      a concurrency lease taken on the node's share while the store
 *             was away (sync_lease_add): the step with cost 1 and no limit
 *             (SYNC_LEASE_ANY), so that once the store is back it counts
 *             the lease until it is given back or expires; a release of
 *             that lease before its add left cancels the add (the store
 *             never had it)
 *   claims    a settle's claim on its reservation (sync_settle_claim;
 *             docs/CLUSTER.md, "Reservations"): an acquire of the one lease
 *             (limit 1) of the reservation's mark key, under the node's id;
 *             the first node's is admitted (and its resend, the same id),
 *             every other node's denied, so one node of the cluster applies
 *             the settle
 *
 *   queue     each waits in a fixed array of the worker's sync
 *             (SYNC_LEASE_MAX, allocated at the first one: no hot path),
 *             its key, id and a claim's data copied; each kind may hold
 *             its part only (sync_lease_cap)
 *   send      with the loop iteration's admissions (sync_gather_admit):
 *             one store call for all of them
 *   retry     one the store did not answer (away, the call failed) is
 *             sent again every SYNC_LEASE_RETRY seconds until it is, or
 *             until `until`: a release's lease has expired in the store
 *             anyway; a claim is given up (SYNC_CLAIM_UNCONFIRMED) and its
 *             caller applies the settle on this node alone
 *
 * Not handed over at a reload (sync_reload): a release still queued then
 * is dropped, and its lease expires in the store lease_ms after it was
 * taken, as one of a node that died; an add too (the store does not count
 * that lease). A stopping sync waits for its claims (sync_busy: at most
 * SYNC_CLAIM_WAIT), and applies those left on this node alone.
 */
#include "agent/sync_int.h"
#include "strategies/container.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/log.h"

#define SYNC_LEASE_MAX   1024     /* releases, adds and claims queued per worker */
#define SYNC_LEASE_RETRY 0.25     /* seconds between tries */
#define SYNC_LEASE_ANY   1e9      /* an add's limit: admitted whatever the others */

/* What an entry is, and how many of the queue each kind may hold: a
 * flood of one (settles while the store is away) never leaves the others
 * (releases) without room. */
enum sync_lease_kind { SYNC_LK_RELEASE, SYNC_LK_ADD, SYNC_LK_CLAIM, SYNC_LK_KINDS };
static const size_t sync_lease_cap[SYNC_LK_KINDS] = {
	[SYNC_LK_RELEASE] = SYNC_LEASE_MAX / 2,
	[SYNC_LK_ADD] = SYNC_LEASE_MAX / 4,
	[SYNC_LK_CLAIM] = SYNC_LEASE_MAX / 4,
};

struct sync_lease {
	struct sync *sy;
	unsigned ns;
	struct strategy_admit a;      /* its key and lease point below */
	char key[RL_STORED_KEY_MAX];
	char id[STRATEGY_LEASE_MAX];
	double until;
	bool used, flying;
	enum sync_lease_kind kind;
	/* A claim's: its caller's answer, and what it hands back. */
	sync_claim_cb cb;
	void *arg;
	size_t len;
	unsigned char data[SYNC_CLAIM_DATA_MAX];
};

struct sync_leases {
	struct sync_lease e[SYNC_LEASE_MAX];
	size_t n;                     /* used */
	size_t nkind[SYNC_LK_KINDS];  /* used, by kind */
	ev_timer retry;
	double log;                   /* last "dropped" line */
};

static void sync_lease_send(struct sync_lease *e);

static void sync_lease_drop(struct sync_leases *q, struct sync_lease *e)
{
	e->used = false;
	q->n--;
	q->nkind[e->kind]--;
	if (q->n == 0)
		ev_timer_stop(e->sy->loop, &q->retry);
}

/* Done with e: a claim's caller told r, e freed. */
static void sync_lease_done(struct sync_leases *q, struct sync_lease *e, enum sync_claim r)
{
	if (e->cb)
		e->cb(e->arg, r, e->data, e->len);
	sync_lease_drop(q, e);
}

static void sync_lease_on_answer(void *arg, int status, const char *errstr)
{
	struct sync_lease *e = arg;
	struct sync_leases *q = e->sy->leases;

	(void)status, (void)errstr;
	e->flying = false;
	/* Stopping: a claim not answered is applied by this node alone. */
	if (e->a.ok || e->sy->stopping)
		sync_lease_done(q, e, !e->a.ok ? SYNC_CLAIM_UNCONFIRMED
				      : e->a.admitted ? SYNC_CLAIM_FIRST : SYNC_CLAIM_TAKEN);
	else if (!ev_is_active(&q->retry))
		ev_timer_again(e->sy->loop, &q->retry);
}

static void sync_lease_send(struct sync_lease *e)
{
	struct sync_leases *q = e->sy->leases;

	/* An add: the store keeps it for what is left of its life. */
	if (e->kind == SYNC_LK_ADD) {
		e->a.lease_s = e->until - rl_now();
		if (!(e->a.lease_s > 0.001)) {
			sync_lease_drop(q, e);
			return;
		}
	}

	if (sync_gather_admit(e->sy, e->ns, &e->a, 1, sync_lease_on_answer, e) == 0)
		e->flying = true;
	else if (!ev_is_active(&q->retry))
		ev_timer_again(e->sy->loop, &q->retry);
}

static void sync_on_lease_retry(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct sync_leases *q = container_of(w, struct sync_leases, retry);
	double now = rl_now();

	(void)loop, (void)revents;
	for (size_t i = 0; i < SYNC_LEASE_MAX && q->n > 0; i++) {
		struct sync_lease *e = &q->e[i];

		if (!e->used || e->flying)
			continue;
		if (now >= e->until)    /* a release: expired in the store too */
			sync_lease_done(q, e, SYNC_CLAIM_UNCONFIRMED);
		else
			sync_lease_send(e);
	}
}

/* A free entry of sy's queue for namespace ns (its sync in *snp), or
 * NULL (no store that admits for ns, the queue full: logged). */
static struct sync_lease *sync_lease_new(struct sync *sy, unsigned ns, enum sync_lease_kind kind,
					 struct sync_ns **snp, const char *what)
{
	struct sync_ns *sn = sy && !sy->stopping ? sync_find_ns(sy, ns) : NULL;
	struct sync_leases *q;

	if (!sn || !sn->ops->admit)
		return NULL;
	if (!sy->leases) {
		sy->leases = calloc(1, sizeof(*sy->leases));
		if (!sy->leases)
			return NULL;
		ev_init(&sy->leases->retry, sync_on_lease_retry);
		sy->leases->retry.repeat = SYNC_LEASE_RETRY;
	}
	q = sy->leases;
	for (size_t i = 0; i < SYNC_LEASE_MAX && q->nkind[kind] < sync_lease_cap[kind]; i++)
		if (!q->e[i].used) {
			*snp = sn;
			q->e[i].kind = kind;
			return &q->e[i];
		}
	double now = rl_now();
	if (now - q->log >= 10.0) {
		q->log = now;
		LOG(LOG_WARN, "namespace \"%s\": %zu of its kind wait for the store already: %s",
		    sn->def->name, sync_lease_cap[kind], what);
	}
	return NULL;
}

/* e queued and sent: its step for key[0..keylen) of namespace ns with the
 * id id[0..idlen). */
static void sync_lease_queue(struct sync_lease *e, struct sync_ns *sn, const char *key,
			     size_t keylen, const char *id, size_t idlen, double cost,
			     double limit, double lease_s)
{
	e->used = true;
	e->sy->leases->nkind[e->kind]++;
	memcpy(e->key, key, keylen);
	memcpy(e->id, id, idlen);
	e->a = (struct strategy_admit){
		.ns = sn->def->name, .ns_len = strlen(sn->def->name), .key = e->key,
		.key_len = keylen, .size = sn->def->window_sizes[0], .cost = cost,
		.limit = limit, .step = STRATEGY_STEP_LEASE, .lease = e->id, .lease_len = idlen,
		.lease_s = lease_s,
	};
	e->sy->leases->n++;
	sync_lease_send(e);
}

/* The add of lease id[0..idlen) of key that has not left yet, or NULL. */
static struct sync_lease *sync_lease_unsent_add(struct sync *sy, unsigned ns, const char *key,
						size_t keylen, const char *id, size_t idlen)
{
	struct sync_leases *q = sy ? sy->leases : NULL;

	for (size_t i = 0; q && q->n > 0 && idlen > 0 && i < SYNC_LEASE_MAX; i++) {
		struct sync_lease *e = &q->e[i];
		if (e->used && e->kind == SYNC_LK_ADD && !e->flying && e->ns == ns && e->a.key_len == keylen &&
		    e->a.lease_len == idlen && memcmp(e->key, key, keylen) == 0 &&
		    memcmp(e->id, id, idlen) == 0)
			return e;
	}
	return NULL;
}

int sync_lease_release(struct sync *sy, unsigned ns, const char *key, size_t keylen,
		       const char *id, size_t idlen, double until)
{
	struct sync_ns *sn;
	struct sync_lease *e;

	if (keylen == 0 || keylen > RL_STORED_KEY_MAX || idlen > STRATEGY_LEASE_MAX)
		return -1;
	/* Given back before the store had it: neither is sent. */
	if ((e = sync_lease_unsent_add(sy, ns, key, keylen, id, idlen))) {
		sync_lease_drop(sy->leases, e);
		return 0;
	}
	if (!(e = sync_lease_new(sy, ns, SYNC_LK_RELEASE, &sn,
				 "this release is dropped, its lease expires there")))
		return -1;
	*e = (struct sync_lease){ .sy = sy, .ns = ns, .until = until, .kind = SYNC_LK_RELEASE };
	sync_lease_queue(e, sn, key, keylen, id, idlen, 0, 0,
			 (double)ns_lease_ms(sn->def) / 1000.0);
	return 0;
}

int sync_lease_add(struct sync *sy, unsigned ns, const char *key, size_t keylen, const char *id,
		   size_t idlen, double until)
{
	struct sync_ns *sn;
	struct sync_lease *e;

	if (keylen == 0 || keylen > RL_STORED_KEY_MAX || idlen == 0 ||
	    idlen > STRATEGY_LEASE_MAX || !(rl_now() < until) ||
	    !(e = sync_lease_new(sy, ns, SYNC_LK_ADD, &sn, "this lease is not added to the store")))
		return -1;
	*e = (struct sync_lease){ .sy = sy, .ns = ns, .until = until, .kind = SYNC_LK_ADD };
	sync_lease_queue(e, sn, key, keylen, id, idlen, 1, SYNC_LEASE_ANY, until - rl_now());
	return 0;
}

int sync_settle_claim(struct sync *sy, unsigned ns, const char *mark, size_t marklen,
		      double until, const void *data, size_t len, sync_claim_cb cb, void *arg)
{
	struct sync_ns *sn;
	struct sync_lease *e;
	char node[17];
	double now = rl_now();

	if (marklen == 0 || marklen > RL_STORED_KEY_MAX || len > SYNC_CLAIM_DATA_MAX ||
	    !(now < until) ||
	    !(e = sync_lease_new(sy, ns, SYNC_LK_CLAIM, &sn,
				 "this settle is applied on this node alone")))
		return -1;
	*e = (struct sync_lease){ .sy = sy, .ns = ns, .cb = cb, .arg = arg, .len = len,
				  .kind = SYNC_LK_CLAIM,
				  .until = fmin(until, now + SYNC_CLAIM_WAIT) };
	memcpy(e->data, data, len);
	snprintf(node, sizeof(node), "%016llx", (unsigned long long)sy->node);
	/* Kept in the store as long as the reservation may be settled, and
	 * a clock's slack longer (the nodes' clocks differ). */
	sync_lease_queue(e, sn, mark, marklen, node, 16, 1, 1, until - now + SYNC_CLAIM_SLACK);
	return 0;
}

bool sync_leases_busy(const struct sync *sy)
{
	return sy->leases && sy->leases->nkind[SYNC_LK_CLAIM] > 0;
}

void sync_leases_free(struct sync *sy)
{
	if (!sy->leases)
		return;
	/* Claims still queued: applied by this node alone (their settles
	 * were answered taken). */
	for (size_t i = 0; i < SYNC_LEASE_MAX && sy->leases->n > 0; i++)
		if (sy->leases->e[i].used)
			sync_lease_done(sy->leases, &sy->leases->e[i], SYNC_CLAIM_UNCONFIRMED);
	ev_timer_stop(sy->loop, &sy->leases->retry);
	free(sy->leases);
	sy->leases = NULL;
}
