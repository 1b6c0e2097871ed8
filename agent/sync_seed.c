/*
 * sync_seed.c - first-seen keys seeded (sync_rate > 0; docs/CLUSTER.md,
 * "Words"): a slot a hit of this node just created is queued
 * (sync_seed); a short timer gathers the queue into one push of reads
 * (diffs of 0) of each key's current and previous windows, whose totals
 * are written into the table (the previous window's slot is created if
 * the cluster counted something there). The hit itself was answered from
 * the local count already; the next ones see the cluster's.
 */
#include "agent/sync_int.h"
#include "strategies/container.h"

#include <stdlib.h>
#include <string.h>

#define SYNC_SEED_MAX    1024     /* first-seen keys queued per namespace */
#define SYNC_SEED_DELAY  0.002    /* gather seeds this long into one push */

static void sync_seed_flush(struct sync_ns *sn);
static void sync_on_seed_timer(struct ev_loop *loop, ev_timer *w, int revents);

static void sync_on_seeded(void *arg, int status, const char *errstr)
{
	struct sync_ns *sn = arg;
	struct sync *sy = sn->sy;
	double now = rl_now();
	(void)status, (void)errstr;

	for (size_t i = 0; i < sn->nseeding; i++) {
		struct strategy_counter *cur = &sn->seed_c[2 * i], *prev = cur + 1;
		if (cur->ok)
			(cur->reset ? shm_follow_total : shm_sync_total)(sy->t, &sn->seed_e[i],
									  cur->total);
		if (prev->ok)
			rl_seed(sy->rl, (int)sn->ns, prev->key, prev->key_len, prev->size, prev->start,
				prev->total, now);
	}
	sn->seed_busy = false;
	if (sn->nqueued > 0 && !sy->stopping && !ev_is_active(&sn->seed_timer)) {
		ev_timer_set(&sn->seed_timer, SYNC_SEED_DELAY, 0.);
		ev_timer_start(sy->loop, &sn->seed_timer);
	}
}

static void sync_seed_flush(struct sync_ns *sn)
{
	char err[STRATEGY_ERR_MAX];

	if (sn->seed_busy || sn->nqueued == 0)
		return;
	if (!sn->ops->ready(sn->st)) {
		/* The store is away: the next cycle refreshes these keys. */
		sn->nqueued = 0;
		return;
	}
	memcpy(sn->seed_e, sn->seed_q, sn->nqueued * sizeof(*sn->seed_e));
	sn->nseeding = sn->nqueued;
	sn->nqueued = 0;
	for (size_t i = 0; i < sn->nseeding; i++) {
		struct shm_entry *e = &sn->seed_e[i];
		struct strategy_counter c = {
			.ns = sn->def->name, .ns_len = strlen(sn->def->name), .key = e->key,
			.key_len = e->keylen, .start = e->start, .size = e->size, .diff = 0,
		};
		sn->seed_c[2 * i] = c;
		c.start -= (int64_t)e->size;
		sn->seed_c[2 * i + 1] = c;
	}
	/* Reads only (diffs of 0): nothing to apply twice, no token. */
	if (sn->ops->push_diffs(sn->st, sn->seed_c, 2 * sn->nseeding, NULL, sync_on_seeded, sn,
				err) == 0)
		sn->seed_busy = true;
}

static void sync_on_seed_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct sync_ns *sn = container_of(w, struct sync_ns, seed_timer);
	(void)loop, (void)revents;
	sync_seed_flush(sn);
}

void sync_seed(struct sync *sy, unsigned ns, uint32_t idx)
{
	struct sync_ns *sn = sy && !sy->stopping ? sync_find_ns(sy, ns) : NULL;

	if (!sn || !sn->seed_q || sn->nqueued == SYNC_SEED_MAX)
		return;
	if (shm_sync_read(sy->t, idx, &sn->seed_q[sn->nqueued]) < 0)
		return;
	sn->nqueued++;
	if (!sn->seed_busy && !ev_is_active(&sn->seed_timer)) {
		ev_timer_set(&sn->seed_timer, SYNC_SEED_DELAY, 0.);
		ev_timer_start(sy->loop, &sn->seed_timer);
	}
}

int sync_seed_init(struct sync_ns *sn)
{
	sn->seed_q = malloc(SYNC_SEED_MAX * sizeof(*sn->seed_q));
	sn->seed_e = malloc(SYNC_SEED_MAX * sizeof(*sn->seed_e));
	sn->seed_c = malloc(2 * SYNC_SEED_MAX * sizeof(*sn->seed_c));
	if (!sn->seed_q || !sn->seed_e || !sn->seed_c) {
		free(sn->seed_q), free(sn->seed_e), free(sn->seed_c);
		sn->seed_q = sn->seed_e = NULL;
		sn->seed_c = NULL;
		return -1;
	}
	ev_init(&sn->seed_timer, sync_on_seed_timer);
	return 0;
}

void sync_seed_stop(struct sync_ns *sn)
{
	if (sn->seed_q)
		ev_timer_stop(sn->sy->loop, &sn->seed_timer);
}

void sync_seed_free(struct sync_ns *sn)
{
	free(sn->seed_q);
	free(sn->seed_e);
	free(sn->seed_c);
	sn->seed_q = sn->seed_e = NULL;
	sn->seed_c = NULL;
}
