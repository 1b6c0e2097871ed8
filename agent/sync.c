/*
 * sync.c - a sync's life (see sync.h; the words are docs/CLUSTER.md's,
 * "Words"): one sync per worker, of every namespace that syncs, started
 * with the worker, stopped with it, restarted at a reload with what it
 * leaves in doubt handed over; the final flush, the master's one sync
 * after its workers exit; and what the decisions ask of it (is the store
 * away, can it admit, is anything waiting or in doubt). The jobs of a
 * running sync are the other files' (agent/sync_int.h draws them): the
 * sync cycle (sync_cycle.c), seeding (sync_seed.c), sync_rate 0 and exact
 * admission (sync_hits.c, sync_gather.c), forgets (sync_forget.c), reads
 * (sync_read.c), calls in doubt (sync_doubt.c).
 */
#include "agent/sync.h"
#include "agent/sync_int.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "agent/log.h"
#include "agent/ratelimit.h"
#include "strategies/strategy.h"

#define SYNC_MIN_HOLD_MS 1000

static uint64_t node_seed;

void sync_set_node_seed(uint64_t seed)
{
	node_seed = seed;
}

/* ---- a sync's life ---- */

struct sync *sync_new(struct ev_loop *loop, struct rl *rl, uint16_t holder, bool flush_mode)
{
	struct sync *sy = calloc(1, sizeof(*sy));

	if (!sy)
		return NULL;
	sy->loop = loop;
	sy->rl = rl;
	sy->t = rl_shm(rl);
	sync_gather_init(sy);
	sync_doubts_init(sy);
	sy->holder = holder;
	sy->node = node_seed;
	if (getrandom(&sy->nonce, sizeof(sy->nonce), 0) != sizeof(sy->nonce))
		sy->nonce = (uint64_t)getpid() << 32 ^ (uint64_t)(rl_now() * 1e6) ^
			    (uint64_t)(uintptr_t)sy;
	sy->flush_mode = flush_mode;
	return sy;
}

int sync_add_ns(struct sync *sy, unsigned ns)
{
	const struct ns_def *nc = rl_namespace_def(sy->rl, (int)ns);
	struct sync_ns *sn = &sy->ns[sy->n];
	char err[256] = "";
	uint64_t rate_ms;

	memset(sn, 0, sizeof(*sn));
	sn->sy = sy;
	sn->ns = ns;
	sn->sid = rl_shm_ns(sy->rl, (int)ns);
	sn->def = nc;
	sn->ops = strategy_find(nc->strategy);
	sn->st = sn->ops ? sn->ops->create(sy->loop, nc->strategy_opts, err, sizeof(err)) : NULL;
	if (!sn->st) {
		LOG(LOG_ERR, "namespace %s: cannot create an instance of the %s strategy: %s",
		    nc->name, nc->strategy, err);
		return -1;
	}
	rate_ms = (uint64_t)(sync_period(sn) * 1000.0);
	sn->hold_ms = 3 * rate_ms > SYNC_MIN_HOLD_MS ? 3 * rate_ms : SYNC_MIN_HOLD_MS;
	if (nc->sync_rate > 0 && !sy->flush_mode && sync_seed_init(sn) < 0) {
		LOG(LOG_ERR, "namespace %s: out of memory", nc->name);
		sn->ops->destroy(sn->st);
		memset(sn, 0, sizeof(*sn));
		return -1;
	}
	sy->n++;
	return 0;
}

/* A sync of every namespace that syncs (sync_rate >= 0); *failed when one
 * could not be set up. NULL when none syncs, or out of memory (*failed). */
static struct sync *sync_new_all(struct ev_loop *loop, struct rl *rl, uint16_t holder,
				 bool flush_mode, bool *failed)
{
	struct sync *sy = sync_new(loop, rl, holder, flush_mode);

	if (!sy) {
		*failed = true;
		return NULL;
	}
	for (size_t i = 0; i < rl_namespace_count(rl); i++)
		if (rl_namespace_def(rl, (int)i)->sync_rate >= 0 && sync_add_ns(sy, (unsigned)i) < 0)
			*failed = true;
	if (sy->n == 0) {
		free(sy);
		return NULL;
	}
	return sy;
}

int sync_start(struct ev_loop *loop, struct rl *rl, int worker_id, struct sync **out)
{
	bool failed = false;
	struct sync *sy = sync_new_all(loop, rl, (uint16_t)(worker_id + 1), false, &failed);

	*out = NULL;
	if (failed) {
		sync_stop(sy);
		return -1;
	}
	if (!sy)
		return 0;
	for (size_t i = 0; i < sy->n; i++)
		sync_cycle_start(&sy->ns[i]);
	*out = sy;
	return 0;
}

bool sync_store_away(struct sync *sy, unsigned ns)
{
	struct sync_ns *sn = sy ? sync_find_ns(sy, ns) : NULL;

	if (!sn)
		return false;
	if (sn->ndoubts[SYNC_DOUBT_HITS] > 0 || sn->failing)
		return true;
	return !sn->ops->ready(sn->st) && !(sn->ops->connecting && sn->ops->connecting(sn->st));
}

bool sync_can_admit(struct sync *sy, unsigned ns)
{
	struct sync_ns *sn = sy ? sync_find_ns(sy, ns) : NULL;

	return sn && sn->ops->admit;
}

bool sync_busy(const struct sync *sy)
{
	if (!sy)
		return false;
	if (sy->nparked > 0 || sync_leases_busy(sy))
		return true;
	for (size_t i = 0; i < sy->n; i++) {
		const struct sync_ns *sn = &sy->ns[i];

		/* Calls of hits in doubt wait for their resend while the store
		 * is up. */
		if (sn->busy || sn->seed_busy ||
		    (sn->ndoubts[SYNC_DOUBT_HITS] > 0 && sn->ops->ready(sn->st)))
			return true;
	}
	return false;
}

bool sync_settled(const struct sync *sy)
{
	if (sync_busy(sy))
		return false;
	for (size_t i = 0; sy && i < sy->n; i++)
		if (sy->ns[i].retry || sy->ns[i].holding || sy->ns[i].ndoubts[SYNC_DOUBT_HITS] > 0)
			return false;
	return true;
}

void sync_stop(struct sync *sy)
{
	if (!sy)
		return;
	/* The callbacks the stores run below (failing what is in flight)
	 * may try to queue or arm more: nothing is, sy is about to go. */
	sy->stopping = true;
	sync_gather_stop(sy);
	sync_doubts_stop(sy);
	for (size_t i = 0; i < sy->n; i++) {
		struct sync_ns *sn = &sy->ns[i];

		sync_cycle_stop(sn);
		sync_seed_stop(sn);
		/* Fails a pending push: its callback leaves the diffs in place. */
		sn->ops->destroy(sn->st);
		free(sn->batch);
		free(sn->abatch);
		free(sn->ents);
		sync_seed_free(sn);
		sync_doubts_drop(sn);
	}
	sync_gather_free(sy);
	sync_leases_free(sy);
	free(sy);
}

int sync_reload(struct sync **sp, struct ev_loop *loop, struct rl *rl, int worker_id,
		void (*apply)(void *arg), void *arg)
{
	struct sync_doubts *doubts;

	for (size_t i = 0; *sp && i < (*sp)->n; i++)
		sync_cycle_hand_over(&(*sp)->ns[i]);
	doubts = sync_doubts_take(*sp);
	sync_stop(*sp);
	*sp = NULL;
	if (apply)
		apply(arg);
	if (sync_start(loop, rl, worker_id, sp) < 0) {
		sync_doubts_free(doubts);
		return -1;
	}
	sync_doubts_give(*sp, doubts);
	return 0;
}

/* ---- the master's final flush ---- */

static void sync_on_flush_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop, (void)w, (void)revents;
}

size_t sync_flush(struct rl *rl, double timeout_s)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	size_t unpushed = 0;

	if (!loop)
		return 1;
	bool failed = false;
	struct sync *sy = sync_new_all(loop, rl, 1, true, &failed);
	if (!sy) {
		ev_loop_destroy(loop);
		return 0;
	}
	ev_timer wake;
	ev_timer_init(&wake, sync_on_flush_timer, 0.01, 0.01);
	ev_timer_start(loop, &wake);
	double deadline = ev_time() + timeout_s;

	for (size_t i = 0; i < sy->n; i++) {
		struct sync_ns *sn = &sy->ns[i];
		if (sync_collect(sn, rl_now(), true) < 0) {
			unpushed++;
			continue;
		}
		sn->done = sn->n == 0;
	}
	/* Push each namespace once its store is connected. */
	for (;;) {
		bool all_done = true;
		for (size_t i = 0; i < sy->n; i++) {
			struct sync_ns *sn = &sy->ns[i];
			if (sn->done)
				continue;
			all_done = false;
			if (!sn->busy && sn->ops->ready(sn->st) && sync_push(sn) < 0)
				sn->done = true;
		}
		if (all_done || ev_time() >= deadline)
			break;
		ev_run(loop, EVRUN_ONCE);
	}
	for (size_t i = 0; i < sy->n; i++) {
		struct sync_ns *sn = &sy->ns[i];
		if (!sn->done)
			sn->unpushed = sn->n;
		unpushed += sn->unpushed;
		if (sn->n > 0)
			LOG(sn->unpushed ? LOG_WARN : LOG_INFO,
			    "namespace %s: final flush: %zu of %zu counter(s) pushed to %s",
			    sn->def->name, sn->n - sn->unpushed, sn->n, sn->ops->name);
	}
	ev_timer_stop(loop, &wake);
	sync_stop(sy);
	ev_loop_destroy(loop);
	return unpushed;
}

