/*
 * test_sync.c - the library's sync() and fetch() (agent/sync.c) against a
 * real redis-server: two instances stand for two nodes (two tables), each
 * counts its own hits, sync() makes both see the cluster total, fetch()
 * loads a namespace into a third instance that never counted anything.
 */
#include <criterion/criterion.h>
#include <ev.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "agent/ratelimit.h"
#include "agent/shm.h"
#include "agent/sync.h"
#include "agent/window.h"
#include "tests/lib/redis_server.h"

static struct redis_server srv;

static void start_redis(void)
{
	memset(&srv, 0, sizeof(srv));
	cr_assert(redis_server_start(&srv, 5000) == 0, "redis-server: %s", srv.err);
}

static void stop_redis(void)
{
	redis_server_stop(&srv, 2000);
}

/* A node: its own table, namespace "api" (window 60) synced to srv. */
static struct rl *node(double sync_rate)
{
	char err[256], opts[128];
	static const uint32_t sizes[] = { 60 };
	struct rl *rl = rl_new("test", 1024, err, sizeof(err));

	cr_assert(rl, "rl_new: %s", err);
	snprintf(opts, sizeof(opts), "{\"host\":\"127.0.0.1\",\"port\":%d,\"timeout_ms\":500}",
		 srv.port);
	struct ns_def o = { .name = "api", .window_sizes = { sizes[0] }, .n_window_sizes = 1,
			    .sync_rate = sync_rate, .strategy = "redis", .strategy_opts = opts };
	cr_assert(rl_new_namespace(rl, &o, err, sizeof(err)) == 0, "%s", err);
	return rl;
}

/* Reads key's current-window count, without counting. */
static double current(struct rl *rl, const char *key)
{
	double rate;
	/* weight 0: the current window alone */
	cr_assert(rl_sliding_window(rl, key, strlen(key), 60, NULL, "api", 0, &rate) == 0);
	return rate;
}

/* The tests must not straddle a minute boundary. */
static void away_from_boundary(void)
{
	double now = rl_now();
	double left = window_reset(now, 60);
	if (left < 5)
		usleep((useconds_t)((left + 0.2) * 1e6));
}

Test(sync, two_nodes_converge, .init = start_redis, .fini = stop_redis, .timeout = 30)
{
	away_from_boundary();
	struct rl *a = node(1), *b = node(1);
	double rate;

	for (int i = 0; i < 3; i++)
		cr_assert(rl_increment(a, "alice", 5, 60, 1, "api", 0, &rate) == 0);
	for (int i = 0; i < 4; i++)
		cr_assert(rl_increment(b, "alice", 5, 60, 0.5, "api", 0, &rate) == 0);
	cr_assert_float_eq(current(a, "alice"), 3, 1e-9);
	cr_assert_float_eq(current(b, "alice"), 2, 1e-9);

	cr_assert(rl_sync(a, "api", 3) == 0, "sync a");
	cr_assert(rl_sync(b, "api", 3) == 0, "sync b");
	/* b pushed after a: it already sees both; a needs one more cycle. */
	cr_assert_float_eq(current(b, "alice"), 5, 1e-9);
	cr_assert(rl_sync(a, "api", 3) == 0, "sync a again");
	cr_assert_float_eq(current(a, "alice"), 5, 1e-9);

	/* Diffs were pushed once: syncing again changes nothing in the store. */
	cr_assert(rl_sync(a, "api", 3) == 0);
	cr_assert(rl_sync(b, "api", 3) == 0);
	cr_assert_float_eq(current(a, "alice"), 5, 1e-9);
	cr_assert_float_eq(current(b, "alice"), 5, 1e-9);
	rl_free(a);
	rl_free(b);
}

Test(sync, fetch_loads_a_namespace, .init = start_redis, .fini = stop_redis, .timeout = 30)
{
	away_from_boundary();
	struct rl *a = node(1), *c = node(1);
	double rate;

	for (int i = 0; i < 7; i++)
		cr_assert(rl_increment(a, "bob", 3, 60, 1, "api", 0, &rate) == 0);
	cr_assert(rl_increment(a, "carol", 5, 60, 2, "api", 0, &rate) == 0);
	cr_assert(rl_sync(a, "api", 3) == 0);

	/* c never counted: fetch() brings the namespace in. */
	cr_assert_float_eq(current(c, "bob"), 0, 1e-9);
	cr_assert(rl_fetch(c, "api", rl_now(), 0) == 0);
	cr_assert_float_eq(current(c, "bob"), 7, 1e-9);
	cr_assert_float_eq(current(c, "carol"), 2, 1e-9);
	rl_free(a);
	rl_free(c);
}

Test(sync, store_down_keeps_diffs, .init = start_redis, .fini = stop_redis, .timeout = 40)
{
	away_from_boundary();
	struct rl *a = node(1);
	double rate;

	for (int i = 0; i < 5; i++)
		cr_assert(rl_increment(a, "dave", 4, 60, 1, "api", 0, &rate) == 0);
	cr_assert(redis_server_kill(&srv) == 0);
	/* The push fails; nothing is lost locally. */
	cr_assert(rl_sync(a, "api", 1) != 0, "sync succeeded with the store down");
	cr_assert_float_eq(current(a, "dave"), 5, 1e-9);
	cr_assert(rl_increment(a, "dave", 4, 60, 1, "api", 0, &rate) == 0);

	cr_assert(redis_server_restart(&srv, 5000) == 0, "%s", srv.err);
	/* Back: every hit of the outage reaches the store exactly once. */
	cr_assert(rl_sync(a, "api", 5) == 0, "sync after the restart");
	struct rl *c = node(1);
	cr_assert(rl_fetch(c, "api", rl_now(), 0) == 0);
	cr_assert_float_eq(current(c, "dave"), 6, 1e-9);
	cr_assert(rl_sync(a, "api", 3) == 0);
	cr_assert(rl_fetch(c, "api", rl_now(), 0) == 0);
	cr_assert_float_eq(current(c, "dave"), 6, 1e-9, "pushed twice");
	rl_free(a);
	rl_free(c);
}

Test(sync, local_namespace_refuses, .timeout = 10)
{
	char err[256];
	static const uint32_t sizes[] = { 60 };
	struct rl *rl = rl_new("test", 64, err, sizeof(err));
	struct ns_def o = { .name = "loc", .window_sizes = { sizes[0] }, .n_window_sizes = 1,
			    .sync_rate = -1 };

	cr_assert(rl && rl_new_namespace(rl, &o, err, sizeof(err)) == 0);
	cr_assert(rl_sync(rl, "loc", 1) == -1);
	cr_assert(rl_fetch(rl, "loc", rl_now(), 0) == -1);
	cr_assert(rl_sync(rl, "nope", 1) == -1);
	rl_free(rl);
}

/* sync_stop while a read of first-seen keys waits for a paused store and
 * more keys are queued: the store fails the read inside sync_stop, and its
 * callback must not arm the timer of the sync being freed (it did: a use
 * after free 2 ms later, at a reload with a hung store). ASan tells. */
Test(sync, stop_with_a_seed_read_in_flight, .init = start_redis, .fini = stop_redis,
     .timeout = 30)
{
	struct rl *rl = node(1.0);
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct sync *sy = NULL;
	struct rl_result r;
	char key[32];

	cr_assert_eq(sync_start(loop, rl, 0, &sy), 0);
	cr_assert_not_null(sy);
	for (double end = ev_time() + 0.3; ev_time() < end;)
		ev_run(loop, EVRUN_ONCE | EVRUN_NOWAIT);
	cr_assert_eq(redis_server_pause(&srv), 0);
	for (int i = 0; i < 4; i++) {
		snprintf(key, sizeof(key), "seed-%d", i);
		cr_assert_eq(rl_hit(rl, 0, key, strlen(key), 60, 1, -1, rl_now(), -1, true, &r), 0);
		cr_assert(r.inserted);
		sync_seed(sy, 0, r.cur_idx);
		if (i == 1)   /* the first two leave (and wait), the others queue */
			for (double end = ev_time() + 0.05; ev_time() < end;)
				ev_run(loop, EVRUN_ONCE | EVRUN_NOWAIT);
	}
	sync_stop(sy);
	for (double end = ev_time() + 0.05; ev_time() < end;)
		ev_run(loop, EVRUN_ONCE | EVRUN_NOWAIT);
	cr_assert_eq(redis_server_resume(&srv), 0);
	ev_loop_destroy(loop);
	rl_free(rl);
}
