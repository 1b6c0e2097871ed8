/*
 * evtest.c - see evtest.h.
 */
#include "tests/lib/evtest.h"

#include <stdlib.h>

static ev_timer evtest_tick;

static void evtest_tick_cb(struct ev_loop *l, ev_timer *w, int revents)
{
	(void)l, (void)w, (void)revents;
}

struct ev_loop *evtest_loop_new(void)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);

	if (loop == NULL)
		return NULL;
	ev_timer_init(&evtest_tick, evtest_tick_cb, 0.01, 0.01);
	ev_timer_start(loop, &evtest_tick);
	ev_unref(loop);
	return loop;
}

void evtest_loop_free(struct ev_loop *loop)
{
	if (loop == NULL)
		return;
	ev_ref(loop);
	ev_timer_stop(loop, &evtest_tick);
	ev_loop_destroy(loop);
}

double evtest_now(struct ev_loop *loop)
{
	ev_now_update(loop);
	return ev_now(loop);
}

bool evtest_run_until(struct ev_loop *loop, const bool *flag, double secs)
{
	double end = evtest_now(loop) + secs;

	while (!*flag && evtest_now(loop) < end)
		ev_run(loop, EVRUN_ONCE);
	return *flag;
}

struct strategy *evtest_create_ready(const struct strategy_ops *ops, struct ev_loop *loop,
				     const char *json, double secs, char *err, size_t errlen)
{
	struct strategy *s = ops->create(loop, json, err, errlen);
	double end = evtest_now(loop) + secs;

	while (s && !ops->ready(s) && evtest_now(loop) < end)
		ev_run(loop, EVRUN_ONCE);
	return s;
}
