/*
 * test_sync.c - the sync (agent/sync*.c) against a real redis-server: two
 * instances of the library stand for two nodes (two tables), each counts
 * its own hits, a sync cycle (tests/lib/syncnow.h) makes both see the
 * cluster total, a fetch loads a namespace into a third instance that
 * never counted anything; tokens of sync_rate 0 calls and admissions,
 * calls in doubt settled exactly, and handed over at a reload.
 */
#include <criterion/criterion.h>
#include <ev.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/ratelimit.h"
#include "agent/sync.h"
#include "tests/lib/clock.h"
#include "tests/lib/redis_server.h"
#include "tests/lib/syncnow.h"

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

/* The window of "api": one with two minutes left when the test made its
 * first node (test_window_pick), longer than any test here, so none sees
 * a window's end: current() is every hit of the test, and a diff or a
 * call is for the window it was counted in. */
static uint32_t win;

/* A node: its own table, namespace "api" (window win) synced to srv. */
static struct rl *node(double sync_rate)
{
	char err[256], opts[128];
	struct rl *rl = rl_new("test", 1024, err, sizeof(err));

	cr_assert(rl, "rl_new: %s", err);
	snprintf(opts, sizeof(opts), "{\"host\":\"127.0.0.1\",\"port\":%d,\"timeout_ms\":500}",
		 srv.port);
	if (win == 0)
		win = test_window_pick(3600, 120);
	struct ns_def o = { .name = "api", .window_sizes = { win }, .n_window_sizes = 1,
			    .sync_rate = sync_rate, .strategy = "redis", .strategy_opts = opts };
	cr_assert(rl_new_namespace(rl, &o, err, sizeof(err)) == 0, "%s", err);
	return rl;
}

/* Reads key's current-window count, without counting. */
static double current(struct rl *rl, const char *key)
{
	double rate;
	/* weight 0: the current window alone */
	cr_assert(rl_sliding_window(rl, key, strlen(key), win, NULL, "api", 0, &rate) == 0);
	return rate;
}

Test(sync, two_nodes_converge, .init = start_redis, .fini = stop_redis, .timeout = 30)
{
	struct rl *a = node(1), *b = node(1);
	double rate;

	for (int i = 0; i < 3; i++)
		cr_assert(rl_increment(a, "alice", 5, win, 1, "api", 0, &rate) == 0);
	for (int i = 0; i < 4; i++)
		cr_assert(rl_increment(b, "alice", 5, win, 0.5, "api", 0, &rate) == 0);
	cr_assert_float_eq(current(a, "alice"), 3, 1e-9);
	cr_assert_float_eq(current(b, "alice"), 2, 1e-9);

	cr_assert(syncnow(a, "api", 3) == 0, "sync a");
	cr_assert(syncnow(b, "api", 3) == 0, "sync b");
	/* b pushed after a: it already sees both; a needs one more cycle. */
	cr_assert_float_eq(current(b, "alice"), 5, 1e-9);
	cr_assert(syncnow(a, "api", 3) == 0, "sync a again");
	cr_assert_float_eq(current(a, "alice"), 5, 1e-9);

	/* Diffs were pushed once: syncing again changes nothing in the store. */
	cr_assert(syncnow(a, "api", 3) == 0);
	cr_assert(syncnow(b, "api", 3) == 0);
	cr_assert_float_eq(current(a, "alice"), 5, 1e-9);
	cr_assert_float_eq(current(b, "alice"), 5, 1e-9);
	rl_free(a);
	rl_free(b);
}

Test(sync, fetch_loads_a_namespace, .init = start_redis, .fini = stop_redis, .timeout = 30)
{
	struct rl *a = node(1), *c = node(1);
	double rate;

	for (int i = 0; i < 7; i++)
		cr_assert(rl_increment(a, "bob", 3, win, 1, "api", 0, &rate) == 0);
	cr_assert(rl_increment(a, "carol", 5, win, 2, "api", 0, &rate) == 0);
	cr_assert(syncnow(a, "api", 3) == 0);

	/* c never counted: fetch() brings the namespace in. */
	cr_assert_float_eq(current(c, "bob"), 0, 1e-9);
	cr_assert(syncnow_fetch(c, "api", rl_now(), 0) == 0);
	cr_assert_float_eq(current(c, "bob"), 7, 1e-9);
	cr_assert_float_eq(current(c, "carol"), 2, 1e-9);
	rl_free(a);
	rl_free(c);
}

Test(sync, store_down_keeps_diffs, .init = start_redis, .fini = stop_redis, .timeout = 40)
{
	struct rl *a = node(1);
	double rate;

	for (int i = 0; i < 5; i++)
		cr_assert(rl_increment(a, "dave", 4, win, 1, "api", 0, &rate) == 0);
	cr_assert(redis_server_kill(&srv) == 0);
	/* The push fails; nothing is lost locally. */
	cr_assert(syncnow(a, "api", 1) != 0, "sync succeeded with the store down");
	cr_assert_float_eq(current(a, "dave"), 5, 1e-9);
	cr_assert(rl_increment(a, "dave", 4, win, 1, "api", 0, &rate) == 0);

	cr_assert(redis_server_restart(&srv, 5000) == 0, "%s", srv.err);
	/* Back: every hit of the outage reaches the store exactly once. */
	cr_assert(syncnow(a, "api", 5) == 0, "sync after the restart");
	struct rl *c = node(1);
	cr_assert(syncnow_fetch(c, "api", rl_now(), 0) == 0);
	cr_assert_float_eq(current(c, "dave"), 6, 1e-9);
	cr_assert(syncnow(a, "api", 3) == 0);
	cr_assert(syncnow_fetch(c, "api", rl_now(), 0) == 0);
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
	cr_assert(syncnow(rl, "loc", 1) == -1);
	cr_assert(syncnow_fetch(rl, "loc", rl_now(), 0) == -1);
	cr_assert(syncnow(rl, "nope", 1) == -1);
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
		cr_assert_eq(rl_hit(rl, 0, key, strlen(key), win, 1, -1, rl_now(), -1, true, &r), 0);
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

/* ---- tokens of sync_rate 0 calls and admissions, calls in doubt ---- */

/* The total in srv of key (stored form) in namespace "api", window win,
 * whatever its window start. */
static double store_total(const char *key)
{
	char cursor[32] = "0";
	double sum = 0;

	do {
		redisReply *rep = redis_server_command(&srv, "SCAN %s MATCH rl:{api:*}:%u:* COUNT 1000",
						       cursor, win);

		cr_assert(rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2, "SCAN");
		snprintf(cursor, sizeof(cursor), "%s", rep->element[0]->str);
		for (size_t i = 0; i < rep->element[1]->elements; i++) {
			redisReply *v = redis_server_command(&srv, "HGET %s %s",
							     rep->element[1]->element[i]->str, key);

			cr_assert_not_null(v);
			if (v->type == REDIS_REPLY_STRING)
				sum += strtod(v->str, NULL);
			freeReplyObject(v);
		}
		freeReplyObject(rep);
	} while (strcmp(cursor, "0") != 0);
	return sum;
}

static void spin(struct ev_loop *loop, double secs)
{
	for (double end = ev_time() + secs; ev_time() < end;)
		ev_run(loop, EVRUN_ONCE | EVRUN_NOWAIT);
}

static void on_done(void *arg)
{
	*(bool *)arg = true;
}

static struct sync_hits hits;
static char skey[256];

/* One synchronous call for key on sy, as the decision layer makes it: a
 * counted hit pushed (admit false) or an admission (limit 100). Returns
 * whether the store answered; hits.h[0] has the result. */
static bool call_one(struct ev_loop *loop, struct rl *rl, struct sync *sy, const char *key,
		     bool admit)
{
	struct rl_result r;
	bool done = false;
	double now = rl_now();

	memset(&hits, 0, sizeof(hits));
	hits.n = 1;
	hits.h[0] = (struct sync_hit){ .ns = 0, .idx = UINT32_MAX, .key = skey,
				       .keylen = rl_stored_key(rl, key, strlen(key), skey),
				       .size = win };
	skey[hits.h[0].keylen] = '\0';         /* for store_total() */
	if (admit) {
		hits.h[0].admit = true;
		hits.h[0].cost = 1;
		hits.h[0].limit = 100;
	} else {
		cr_assert_eq(rl_hit(rl, 0, key, strlen(key), win, 1, 0, now, -1, true, &r), 0);
		hits.h[0].idx = r.cur_idx;
		hits.h[0].diff = 1;
	}
	cr_assert_eq(sync_hits_push(sy, &hits, now, on_done, &done), 1);
	for (double end = ev_time() + 3; !done && ev_time() < end;)
		ev_run(loop, EVRUN_ONCE);
	cr_assert(done, "no answer within 3 s");
	sync_hits_apply(rl, &hits);
	return hits.h[0].ok;
}

/* A sync restarted in the same process (a reload; a respawned worker, the
 * master's final flush are the same case) counts its calls from 1 again:
 * its tokens must still differ from the last instance's, or the store
 * takes an identical new call for a resend of the old one and adds
 * nothing (it did: 3 instead of 6, for pushes and for admissions). */
static void restart_case(bool admit)
{
	const char *key = admit ? "restart-adm" : "restart-push";
	struct rl *rl = node(admit ? 1 : 0);
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct sync *sy = NULL;

	sync_set_node_seed(0x1234);
	for (int gen = 0; gen < 2; gen++) {
		cr_assert_eq(sync_start(loop, rl, 0, &sy), 0);
		spin(loop, 0.2);
		for (int i = 0; i < 3; i++)
			cr_assert(call_one(loop, rl, sy, key, admit), "call %d of instance %d", i,
				  gen);
		sync_stop(sy);
	}
	cr_assert_float_eq(store_total(skey), 6, 1e-9, "%s: 6 calls, the store holds %g",
			   admit ? "admissions" : "sync_rate 0 pushes", store_total(skey));
	ev_loop_destroy(loop);
	rl_free(rl);
}

Test(sync, tokens_differ_after_a_restart_push, .init = start_redis, .fini = stop_redis,
     .timeout = 30)
{
	restart_case(false);
}

Test(sync, tokens_differ_after_a_restart_admit, .init = start_redis, .fini = stop_redis,
     .timeout = 30)
{
	restart_case(true);
}

/* syncnow() makes a sync per call: the same. */
Test(sync, library_sync_calls_do_not_share_tokens, .init = start_redis, .fini = stop_redis,
     .timeout = 30)
{
	struct rl *a = node(1);
	double rate;
	char sk[64];

	for (int i = 0; i < 3; i++) {
		cr_assert(rl_increment(a, "lib", 3, win, 1, "api", 0, &rate) == 0);
		cr_assert(syncnow(a, "api", 3) == 0);
	}
	sk[rl_stored_key(a, "lib", 3, sk)] = '\0';
	cr_assert_float_eq(store_total(sk), 3, 1e-9, "3 hits, 3 syncs: the store holds %g",
			   store_total(sk));
	rl_free(a);
}

/* n sync_rate 0 hits of stored key sk, one call per loop iteration (n
 * gathers), into the paused store: each fails at timeout_ms, its hit kept
 * in the diff and the call in doubt. */
static void calls_into_paused_store(struct ev_loop *loop, struct rl *rl, struct sync *sy,
				    const char *sk, size_t n)
{
	static struct sync_hits many[40];
	static bool done[40];

	cr_assert_leq(n, sizeof(many) / sizeof(many[0]));
	memset(done, 0, sizeof(done));
	for (size_t i = 0; i < n; i++) {
		struct rl_result r;
		double now = rl_now();

		cr_assert_eq(rl_hit(rl, 0, sk, strlen(sk), win, 1, 0, now, -1, true, &r), 0);
		many[i].n = 1;
		many[i].h[0] = (struct sync_hit){ .ns = 0, .idx = r.cur_idx, .key = sk,
						  .keylen = strlen(sk), .size = win, .diff = 1 };
		cr_assert_eq(sync_hits_push(sy, &many[i], now, on_done, &done[i]), 1);
		ev_run(loop, EVRUN_ONCE | EVRUN_NOWAIT);
	}
	for (double end = ev_time() + 5; !done[n - 1] && ev_time() < end;)
		ev_run(loop, EVRUN_ONCE);
	for (size_t i = 0; i < n; i++) {
		cr_assert(done[i], "call %zu not answered", i);
		sync_hits_apply(rl, &many[i]);
		cr_assert(!many[i].h[0].ok, "call %zu confirmed by a paused store", i);
	}
}

/* sync_rate 0 calls the paused store did not answer: their hits are kept
 * in the diffs and the calls kept in doubt; once it is back, each call is
 * sent again with its token and what the store counted for it is taken
 * back: the store ends at exactly the hits, and nothing is in doubt. */
Test(sync, calls_in_doubt_settle_exactly, .init = start_redis, .fini = stop_redis,
     .timeout = 60)
{
	struct rl *rl = node(0);
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct sync *sy = NULL;
	size_t n = 40;
	char sk[64];
	double t0;

	cr_assert_eq(sync_start(loop, rl, 0, &sy), 0);
	spin(loop, 0.2);
	cr_assert(call_one(loop, rl, sy, "doubt", false));
	memcpy(sk, skey, sizeof(sk));
	cr_assert_eq(redis_server_pause(&srv), 0);
	calls_into_paused_store(loop, rl, sy, sk, n);
	cr_assert(!sync_settled(sy), "calls in doubt: not settled");
	cr_assert_eq(redis_server_resume(&srv), 0);
	t0 = ev_time();
	while (!sync_settled(sy) && ev_time() - t0 < 20)
		ev_run(loop, EVRUN_ONCE);
	cr_log_info("%zu calls in doubt settled %.2f s after the store came back", n,
		    ev_time() - t0);
	cr_assert(sync_settled(sy), "still in doubt 20 s after the store came back");
	/* The diffs the node kept are pushed by the retry cycle (every 1 s):
	 * then the store holds each hit once. */
	for (double end = ev_time() + 10; store_total(sk) != (double)(n + 1) && ev_time() < end;)
		spin(loop, 0.2);
	cr_assert_float_eq(store_total(sk), (double)(n + 1), 1e-9, "%zu hits, the store holds %g",
			   n + 1, store_total(sk));
	spin(loop, 2.5);        /* two more retry cycles: nothing more is pushed */
	cr_assert_float_eq(store_total(sk), (double)(n + 1), 1e-9, "%zu hits, then %g", n + 1,
			   store_total(sk));
	sync_stop(sy);
	ev_loop_destroy(loop);
	rl_free(rl);
}

/* A reload while the store is away: what the sync leaves in doubt (calls
 * of sync_rate 0, or the sync cycle's unconfirmed push) is handed to the
 * sync that replaces it (sync_reload, as the worker's reload does),
 * which resends it with its token once the store is back: the
 * store ends at exactly the hits. Without the handover it held 21 for 11
 * (calls) and 15 for 10 (push): the late-applied calls counted twice. */
static void reload_case(double sync_rate)
{
	struct rl *rl = node(sync_rate);
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct sync *sy = NULL;
	const char *key = sync_rate > 0 ? "reload-push" : "reload-calls";
	size_t hits_sent = 0;
	char sk[64];
	double want;

	cr_assert_eq(sync_start(loop, rl, 0, &sy), 0);
	spin(loop, 0.2);
	sk[rl_stored_key(rl, key, strlen(key), sk)] = '\0';
	if (sync_rate > 0) {
		struct rl_result r;

		for (int i = 0; i < 5; i++, hits_sent++)
			cr_assert_eq(rl_hit(rl, 0, key, strlen(key), win, 1, 0, rl_now(), -1, false,
					    &r), 0);
		for (double end = ev_time() + 5; store_total(sk) != 5 && ev_time() < end;)
			spin(loop, 0.1);
		cr_assert_float_eq(store_total(sk), 5, 1e-9, "the first cycle pushed");
		cr_assert_eq(redis_server_pause(&srv), 0);
		for (int i = 0; i < 5; i++, hits_sent++)
			cr_assert_eq(rl_hit(rl, 0, key, strlen(key), win, 1, 0, rl_now(), -1, false,
					    &r), 0);
		/* a cycle pushes into the paused store and times out (500 ms) */
		for (double end = ev_time() + 5; sync_settled(sy) && ev_time() < end;)
			spin(loop, 0.05);
		for (double end = ev_time() + 5; sync_busy(sy) && ev_time() < end;)
			spin(loop, 0.05);
	} else {
		cr_assert(call_one(loop, rl, sy, key, false));
		cr_assert_eq(redis_server_pause(&srv), 0);
		calls_into_paused_store(loop, rl, sy, sk, 10);
		hits_sent = 11;
	}
	cr_assert(!sync_settled(sy), "nothing in doubt before the reload");
	cr_assert_eq(sync_reload(&sy, loop, rl, 0, NULL, NULL), 0);
	cr_assert_eq(redis_server_resume(&srv), 0);
	want = (double)hits_sent;
	for (double end = ev_time() + 15; store_total(sk) != want && ev_time() < end;)
		spin(loop, 0.2);
	cr_assert_float_eq(store_total(sk), want, 1e-9, "%zu hits across the reload, the store "
			   "holds %g", hits_sent, store_total(sk));
	/* Nothing more is pushed: the new sync's cycles run once the lease
	 * the old one held expires (3 s); without the handover they pushed
	 * the diffs again (15 for 10). */
	spin(loop, 5);
	cr_assert_float_eq(store_total(sk), want, 1e-9, "%zu hits, then %g", hits_sent,
			   store_total(sk));
	cr_assert(sync_settled(sy));
	sync_stop(sy);
	ev_loop_destroy(loop);
	rl_free(rl);
}

Test(sync, reload_hands_calls_in_doubt_over, .init = start_redis, .fini = stop_redis,
     .timeout = 60)
{
	reload_case(0);
}

Test(sync, reload_hands_an_unconfirmed_push_over, .init = start_redis, .fini = stop_redis,
     .timeout = 60)
{
	reload_case(1);
}
