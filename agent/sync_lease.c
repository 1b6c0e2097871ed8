/*
 * sync_lease.c - concurrency leases given back to their store
 * (sync_lease_release, sync.h; docs/CLUSTER.md, "Concurrency across a
 * cluster"). A release is the store's lease step with cost 0 (struct
 * strategy_admit, STRATEGY_STEP_LEASE): removing an id twice removes
 * nothing, so a release may be sent again as often as needed and still
 * frees its lease once.
 *
 *   queue     each release waits in a fixed array of the worker's sync
 *             (SYNC_LEASE_MAX, allocated at the first one: a release is
 *             no hot path), its key and id copied
 *   send      with the loop iteration's admissions (sync_gather_admit):
 *             one store call for all of them
 *   retry     one the store did not answer (away, the call failed) is
 *             sent again every SYNC_LEASE_RETRY seconds until it is, or
 *             until its lease has expired in the store anyway (`until`)
 *
 * Not handed over at a reload (sync_reload): a release still queued then
 * is dropped, and its lease expires in the store lease_ms after it was
 * taken, as one of a node that died.
 */
#include "agent/sync_int.h"
#include "strategies/container.h"

#include <stdlib.h>
#include <string.h>

#include "agent/log.h"

#define SYNC_LEASE_MAX   1024     /* releases queued per worker */
#define SYNC_LEASE_RETRY 0.25     /* seconds between tries */

struct sync_lease {
	struct sync *sy;
	unsigned ns;
	struct strategy_admit a;      /* its key and lease point below */
	char key[RL_STORED_KEY_MAX];
	char id[STRATEGY_LEASE_MAX];
	double until;
	bool used, flying;
};

struct sync_leases {
	struct sync_lease e[SYNC_LEASE_MAX];
	size_t n;                     /* used */
	ev_timer retry;
	double log;                   /* last "dropped" line */
};

static void sync_lease_send(struct sync_lease *e);

static void sync_lease_drop(struct sync_leases *q, struct sync_lease *e)
{
	e->used = false;
	q->n--;
	if (q->n == 0)
		ev_timer_stop(e->sy->loop, &q->retry);
}

static void sync_lease_on_answer(void *arg, int status, const char *errstr)
{
	struct sync_lease *e = arg;
	struct sync_leases *q = e->sy->leases;

	(void)status, (void)errstr;
	e->flying = false;
	if (e->a.ok || e->sy->stopping)
		sync_lease_drop(q, e);
	else if (!ev_is_active(&q->retry))
		ev_timer_again(e->sy->loop, &q->retry);
}

static void sync_lease_send(struct sync_lease *e)
{
	struct sync_leases *q = e->sy->leases;

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
		if (now >= e->until)
			sync_lease_drop(q, e);  /* expired in the store too */
		else
			sync_lease_send(e);
	}
}

int sync_lease_release(struct sync *sy, unsigned ns, const char *key, size_t keylen,
		       const char *id, size_t idlen, double until)
{
	struct sync_ns *sn = sy && !sy->stopping ? sync_find_ns(sy, ns) : NULL;
	struct sync_leases *q;
	struct sync_lease *e = NULL;

	if (!sn || !sn->ops->admit || keylen == 0 || keylen > RL_STORED_KEY_MAX ||
	    idlen > STRATEGY_LEASE_MAX)
		return -1;
	if (!sy->leases) {
		sy->leases = calloc(1, sizeof(*sy->leases));
		if (!sy->leases)
			return -1;
		ev_init(&sy->leases->retry, sync_on_lease_retry);
		sy->leases->retry.repeat = SYNC_LEASE_RETRY;
	}
	q = sy->leases;
	for (size_t i = 0; i < SYNC_LEASE_MAX && !e; i++)
		if (!q->e[i].used)
			e = &q->e[i];
	if (!e) {
		double now = rl_now();
		if (now - q->log >= 10.0) {
			q->log = now;
			LOG(LOG_WARN, "namespace \"%s\": %d releases wait for the store already: "
			    "this one is dropped, its lease expires there", sn->def->name,
			    SYNC_LEASE_MAX);
		}
		return -1;
	}
	*e = (struct sync_lease){ .sy = sy, .ns = ns, .until = until, .used = true };
	memcpy(e->key, key, keylen);
	memcpy(e->id, id, idlen);
	e->a = (struct strategy_admit){
		.ns = sn->def->name, .ns_len = strlen(sn->def->name), .key = e->key,
		.key_len = keylen, .size = sn->def->window_sizes[0], .cost = 0,
		.step = STRATEGY_STEP_LEASE, .lease = e->id, .lease_len = idlen,
		.lease_s = (double)ns_lease_ms(sn->def) / 1000.0,
	};
	q->n++;
	sync_lease_send(e);
	return 0;
}

void sync_leases_free(struct sync *sy)
{
	if (!sy->leases)
		return;
	ev_timer_stop(sy->loop, &sy->leases->retry);
	free(sy->leases);
	sy->leases = NULL;
}
