/*
 * syncnow.c - see syncnow.h. The sync's own calls (sync_new, sync_add_ns,
 * sync_collect, sync_push: agent/sync_int.h) on a private loop; nothing
 * of a cycle is written again here.
 */
#include "tests/lib/syncnow.h"

#include <ev.h>
#include <stdbool.h>
#include <string.h>

#include "agent/ratelimit.h"
#include "agent/sync_int.h"

#define SYNCNOW_HOLDER 0xfffe     /* the lease holder id of these calls */

static void syncnow_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop, (void)w, (void)revents;
}

/* Runs sy's loop until *done (done NULL: until the namespace's store is
 * ready) or the deadline; a 10 ms tick keeps it from sleeping past it.
 * Returns whether it got there. */
static bool syncnow_wait(struct sync *sy, const bool *done, double deadline)
{
	struct sync_ns *sn = &sy->ns[0];
	ev_timer wake;

	ev_timer_init(&wake, syncnow_tick, 0.01, 0.01);
	ev_timer_start(sy->loop, &wake);
	while (!(done ? *done : sn->ops->ready(sn->st)) && ev_time() < deadline)
		ev_run(sy->loop, EVRUN_ONCE);
	ev_timer_stop(sy->loop, &wake);
	return done ? *done : sn->ops->ready(sn->st);
}

/* A private loop and sync of namespace ns alone (its only namespace is
 * sy->ns[0], rl's index in *index), or NULL for an unknown or local
 * namespace or a store that cannot be set up. */
static struct sync *syncnow_open(struct rl *rl, const char *ns, int *index)
{
	int i = rl_namespace_index(rl, ns, ns ? strlen(ns) : 0);
	struct ev_loop *loop;
	struct sync *sy;

	*index = i;
	if (i < 0 || rl_sync_rate(rl, i) < 0 || !(loop = ev_loop_new(EVFLAG_AUTO)))
		return NULL;
	sy = sync_new(loop, rl, SYNCNOW_HOLDER, true);
	if (!sy || sync_add_ns(sy, (unsigned)i) < 0) {
		sync_stop(sy);
		ev_loop_destroy(loop);
		return NULL;
	}
	return sy;
}

static void syncnow_close(struct sync *sy)
{
	struct ev_loop *loop = sy->loop;

	sync_stop(sy);
	ev_loop_destroy(loop);
}

int syncnow(struct rl *rl, const char *ns, double timeout_s)
{
	double deadline = ev_time() + timeout_s;
	int rc = -1, i;
	struct sync *sy = syncnow_open(rl, ns, &i);
	struct sync_ns *sn;

	if (!sy)
		return -1;
	sn = &sy->ns[0];
	/* One sync of the node at a time: wait for the lease. */
	while (!shm_lease_take(sy->t, sn->sid, SYNCNOW_HOLDER, sync_now_ms(), sn->hold_ms)) {
		if (ev_time() >= deadline)
			goto out;
		ev_sleep(0.005);
	}
	if (syncnow_wait(sy, NULL, deadline) && sync_collect(sn, rl_now(), false) == 0) {
		sn->done = sn->n == 0;
		if (sn->n == 0 || sync_push(sn) == 0) {
			syncnow_wait(sy, &sn->done, deadline);
			rc = sn->done && sn->unpushed == 0 ? 0 : -1;
		}
	}
	shm_lease_release(sy->t, sn->sid, SYNCNOW_HOLDER, sync_now_ms());
out:
	syncnow_close(sy);
	return rc;
}

struct syncnow_fetch {
	struct rl *rl;
	int ns;
	double time;
	bool done;
	int status;
};

static void syncnow_on_rows(void *arg, int status, const char *errstr,
			    const struct strategy_row *rows, size_t n)
{
	struct syncnow_fetch *f = arg;
	(void)errstr;

	f->done = true;
	f->status = status;
	for (size_t i = 0; status == 0 && i < n; i++)
		rl_seed(f->rl, f->ns, rows[i].key, rows[i].key_len, rows[i].size, rows[i].start,
			rows[i].count, f->time);
}

int syncnow_fetch(struct rl *rl, const char *ns, double time, double timeout_s)
{
	double wait = timeout_s > 0 ? timeout_s : 1.0;
	double deadline = ev_time() + wait;
	char err[STRATEGY_ERR_MAX];
	int rc = -1, i;
	struct sync *sy = syncnow_open(rl, ns, &i);
	struct syncnow_fetch f = { .rl = rl, .ns = i, .time = time };
	struct sync_ns *sn;

	if (!sy)
		return -1;
	sn = &sy->ns[0];
	/* The reference's shm mutex: one process per node fetches; with a
	 * timeout the lease is left to expire, so that is once per timeout. */
	if (!shm_lease_take(sy->t, sn->sid, SYNCNOW_HOLDER, sync_now_ms(), (uint64_t)(wait * 1000))) {
		rc = 0;		/* another process is fetching */
		goto out;
	}
	if (syncnow_wait(sy, NULL, deadline) &&
	    sn->ops->get_counters(sn->st, sn->def->name, strlen(sn->def->name),
				  sn->def->window_sizes, sn->def->n_window_sizes, (int64_t)time,
				  syncnow_on_rows, &f, err) == 0) {
		syncnow_wait(sy, &f.done, deadline);
		rc = f.done && f.status == 0 ? 0 : -1;
	}
	if (timeout_s <= 0)
		shm_lease_release(sy->t, sn->sid, SYNCNOW_HOLDER, sync_now_ms());
out:
	syncnow_close(sy);
	return rc;
}
