/*
 * test_cluster_sync.c - several agent nodes sharing one real store (Redis
 * or PostgreSQL): the counts converge, and outages lose nothing. The nodes,
 * the stores and the SPOP client are tests/lib/clustertest.h's; a case
 * written for both stores (CT_STORE_TEST) is two tests, cluster::redis_...
 * and cluster::postgres_....
 *
 * What is checked is the contract of agent/sync.h:
 *   - convergence: after hits spread over the nodes, every node reads the
 *     cluster total within a few sync periods, and the store holds it; at
 *     sync_rate 0 every answer is the exact cluster count;
 *   - answers never wait for the store: while the store is down (Redis
 *     SIGKILLed, then restarted on its port) or paused (SIGSTOP), every
 *     NOTIFY is ACKed within CT_ACK_BOUND_MS, and once it is back the
 *     diffs counted meanwhile reach it exactly once: nothing lost, nothing
 *     counted twice, even when a paused store applies late the pushes that
 *     timed out (the resend carries the same token);
 *   - SIGTERM: the master pushes what is left before exiting, and gives up
 *     within its bound when the store answers nothing;
 *   - a reload restarts the sync losing nothing;
 *   - every node exits 0 on SIGTERM, with no sanitizer report or worker
 *     respawn in its log (checked when each test stops its nodes).
 * Measured figures (convergence time, ACK latency quantiles, what was
 * counted twice) are printed with cr_log_info (--verbose shows them).
 *
 * Keys are fresh random strings; the window size is picked per test so
 * that the test cannot cross a window's end (ct_window()).
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/lib/clock.h"
#include "tests/lib/clustertest.h"

TestSuite(cluster, .init = ct_setup, .fini = ct_teardown, .timeout = 60);

/* ---------------------------------------------------------------- convergence */

CT_STORE_TEST(three_nodes_converge)
{
	const size_t hits = 900;
	unsigned w = ct_window();
	int64_t rates[CT_NODES], ms, budget_ms = (int64_t)(3 * CT_SYNC_RATE * 1000);
	double total;
	char key[64];

	st->up(0);
	ct_nodes_start(CT_NODES, st->cfg(w, CT_SYNC_RATE, st->timeout_ms));
	sp_key(key, sizeof(key), "conv");
	ct_spread_hits(key, w, hits, &ct_lat_all);
	/* Each node counted its third; the others' come through the store. */
	ms = ct_wait_converged(key, w, (int64_t)hits, st->total, (int)budget_ms, rates, &total);
	cr_log_info("%s: %zu hits over %d nodes x %d connections, window %u s: converged in "
		    "%lld ms (sync_rate %g s)", st->name, hits, CT_NODES, CT_CONNS, w, (long long)ms,
		    CT_SYNC_RATE);
	ct_lat_report(st->name, &ct_lat_all);
	cr_assert(ms >= 0,
		  "%s: not converged within 3 x sync_rate (%lld ms): node rates %lld %lld %lld, "
		  "store total %g, want %zu", st->name, (long long)budget_ms, (long long)rates[0],
		  (long long)rates[1], (long long)rates[2], total, hits);
	/* And it stays so (no late push adds anything). */
	test_sleep_ms((int)(2 * CT_SYNC_RATE * 1000));
	for (size_t n = 0; n < CT_NODES; n++)
		cr_expect_eq(ct_rate(n, key, w), (int64_t)hits, "node %zu drifted after converging",
			     n);
	total = st->total("default", key, w);
	cr_expect(total == (double)hits, "%s total drifted to %g after converging (want %zu)",
		  st->name, total, hits);
}

/* sync_rate 0: each hit is applied in the store before its ACK, so every
 * answer, on whichever node, is the exact cluster count so far. */
CT_STORE_TEST(synchronous_exact)
{
	const size_t hits = 300;
	unsigned w = ct_window();
	int64_t rate, us;
	char key[64];

	st->up(0);
	ct_nodes_start(CT_NODES, st->cfg(w, 0, 5000));
	sp_key(key, sizeof(key), "sync0");
	for (size_t i = 0; i < hits; i++) {
		size_t n = i % CT_NODES, c = (i / CT_NODES) % CT_CONNS;

		cr_assert(ct_notify(ct_nodes[n].fd[c], key, w, 1, &rate, &us) == 0,
			  "hit %zu on node %zu: %s", i + 1, n, sp_err);
		ct_lat_add(&ct_lat_all, us);
		cr_assert_eq(rate, (int64_t)(i + 1), "%s sync_rate 0: hit %zu on node %zu answered "
			     "rate %lld", st->name, i + 1, n, (long long)rate);
	}
	/* Reads (cost 0) on every node: the same exact total. */
	for (size_t n = 0; n < CT_NODES; n++)
		cr_assert_eq(ct_rate(n, key, w), (int64_t)hits, "%s: node %zu reads a wrong total",
			     st->name, n);
	cr_assert(st->total("default", key, w) == (double)hits, "%s: store total %g, want %zu",
		  st->name, st->total("default", key, w), hits);
	ct_lat_report(st->name, &ct_lat_all);
}

/* ---------------------------------------------------------------- outages */

#define OUTAGE_RUN_MS   8000
#define OUTAGE_DOWN_MS  2000
#define OUTAGE_UP_MS    5000
#define OUTAGE_RATE     2000    /* hits per second over the cluster */

static int64_t ev_time0;

static void redis_restart(void)
{
	cr_assert(redis_server_restart(&ct_redis_srv, CT_STORE_MS) == 0,
		  "restart redis-server: %s", ct_redis_srv.err);
	ct_up_at = test_now_ms();
}

Test(cluster, redis_killed_and_restarted_under_load)
{
	static struct ct_lat l;
	unsigned w = ct_window();
	int64_t rates[CT_NODES], ms;
	double total;
	char key[64];
	size_t sent;

	ct_redis.up(CT_PERSISTENT);
	ct_nodes_start(CT_NODES, ct_redis.cfg(w, CT_SYNC_RATE, ct_redis.timeout_ms));
	sp_key(key, sizeof(key), "kill");
	ev_time0 = test_now_ms();
	sent = ct_load_hits(key, w, OUTAGE_RUN_MS, OUTAGE_RATE, OUTAGE_DOWN_MS, ct_redis.gone,
			    OUTAGE_UP_MS, redis_restart, &l);
	cr_log_info("redis kill/restart: %zu hits in %d ms; Redis down %lld ms (killed at %lld "
		    "ms, answering again at %lld ms)", sent, OUTAGE_RUN_MS,
		    (long long)(ct_up_at - ct_down_at), (long long)(ct_down_at - ev_time0),
		    (long long)(ct_up_at - ev_time0));
	ct_lat_report("ACKs during the outage run", &l);
	cr_expect(l.over_bound == 0, "%llu ACK(s) later than %d ms (max %.1f ms)",
		  (unsigned long long)l.over_bound, CT_ACK_BOUND_MS, (double)l.max_us / 1000.0);
	/* Reconnect backoff tops out at 2 s, then a sync period or two.
	 * Exactly `sent`: pushes in flight when Redis died were lost with
	 * their connection and pushed again. The only way to count one twice
	 * would be a SIGKILL between Redis writing a push to its AOF and
	 * sending the reply, a window of microseconds. */
	ms = ct_wait_converged(key, w, (int64_t)sent, ct_redis.total, 8000, rates, &total);
	cr_log_info("redis kill/restart: converged %lld ms after the load ended (Redis back "
		    "for %lld ms); store total %g, sent %zu", (long long)ms,
		    (long long)(test_now_ms() - ct_up_at), total, sent);
	cr_assert(ms >= 0,
		  "not converged within 8 s: node rates %lld %lld %lld, Redis total %g, sent %zu "
		  "(%+g)", (long long)rates[0], (long long)rates[1], (long long)rates[2], total,
		  sent, total - (double)sent);
}

#define PAUSE_RUN_MS   7000
#define PAUSE_DOWN_MS  1500
#define PAUSE_UP_MS    4500

/* Hits flow while the store is paused (SIGSTOP: connections stay open,
 * nothing answers) for 3 s. Answers must not wait for it; once resumed,
 * every hit is in the store exactly once: the pushes that timed out are
 * applied by the store on SIGCONT, and their resends carry the same token,
 * so they add nothing again (agent/sync.c, strategies/strategy.h). */
static void pause_case(const struct ct_store *st, const char *what, unsigned w)
{
	static struct ct_lat l;
	int64_t rates[CT_NODES], ms = -1, t0, stable_since;
	double total = -1, last = -2, excess;
	char key[64];
	size_t sent;

	sp_key(key, sizeof(key), "pause");
	sent = ct_load_hits(key, w, PAUSE_RUN_MS, OUTAGE_RATE, PAUSE_DOWN_MS, st->pause,
			    PAUSE_UP_MS, st->resume, &l);
	cr_log_info("%s SIGSTOP/SIGCONT: %zu hits in %d ms; store paused %lld ms", what, sent,
		    PAUSE_RUN_MS, (long long)(ct_up_at - ct_down_at));
	ct_lat_report("ACKs during the pause run", &l);
	cr_expect(l.over_bound == 0, "%llu ACK(s) later than %d ms (max %.1f ms)",
		  (unsigned long long)l.over_bound, CT_ACK_BOUND_MS, (double)l.max_us / 1000.0);

	/* Until the store stops moving for two periods and every node reads
	 * what it holds. */
	t0 = stable_since = test_now_ms();
	while (test_now_ms() - t0 < 8000) {
		bool agree = true;

		total = st->total("default", key, w);
		for (size_t n = 0; n < CT_NODES; n++) {
			rates[n] = ct_rate(n, key, w);
			agree = agree && (double)rates[n] == total;
		}
		if (total != last) {
			last = total;
			stable_since = test_now_ms();
		}
		/* Equal, not only still: a hit pushed twice is taken back by
		 * a later cycle (a call in doubt, agent/sync.c). */
		if (agree && total == (double)sent &&
		    test_now_ms() - stable_since >= (int64_t)(2 * CT_SYNC_RATE * 1000)) {
			ms = stable_since - t0;
			break;
		}
		test_sleep_ms(20);
	}
	excess = total - (double)sent;
	cr_log_info("%s SIGSTOP/SIGCONT: settled %lld ms after the load ended; store total %g, "
		    "sent %zu, counted twice %g", what, (long long)ms, total, sent, excess);
	cr_log_info("%s SIGSTOP/SIGCONT: pushes that timed out, per node: %zu %zu %zu", what,
		    ct_log_count(0, "timeout"), ct_log_count(1, "timeout"),
		    ct_log_count(2, "timeout"));
	cr_assert(excess >= 0, "%s: hits lost: store total %g < sent %zu", what, total, sent);
	cr_assert(excess == 0, "%s: %g hits counted twice after the pause (exactly once "
		  "expected: resends carry the same token)", what, excess);
	cr_assert(ms >= 0, "%s: not settled within 8 s: node rates %lld %lld %lld, store total %g, "
		  "sent %zu", what, (long long)rates[0], (long long)rates[1], (long long)rates[2],
		  total, sent);
}

CT_STORE_TEST(paused_answers_do_not_wait)
{
	unsigned w = ct_window();

	st->up(0);
	ct_nodes_start(CT_NODES, st->cfg(w, CT_SYNC_RATE, st->timeout_ms));
	pause_case(st, st->name, w);
}

/* The same with sync_rate 0: a push that timed out is sent again with its
 * token, and what the store counted for it is taken back from the diff
 * the node kept (agent/sync.c, calls in doubt): exactly once too. */
CT_STORE_TEST(synchronous_paused_counts_once)
{
	unsigned w = ct_window();
	char what[64];

	st->up(0);
	ct_nodes_start(CT_NODES, st->cfg(w, 0, 100));
	snprintf(what, sizeof(what), "%s sync_rate 0", st->name);
	pause_case(st, what, w);
}

/* sync_rate 0 on a node whose store is still connecting (its first
 * connection, here held back by pausing the store before the node
 * starts): the hit waits for the connection and is answered with the
 * store's total, not with the node's own count; when the attempt fails
 * instead (timeout_ms), the answer is local and the hit reaches the store
 * once it is back. */
CT_STORE_TEST(synchronous_waits_for_the_first_connection)
{
	unsigned w = ct_window();
	int64_t rate, t0, waited;
	uint64_t sid;
	char key[64];
	int early;

	st->up(0);
	sp_key(key, sizeof(key), "first");
	ct_node_start(0, st->cfg(w, 0, 5000));
	for (int64_t i = 1; i <= 5; i++) {
		cr_assert(ct_notify(ct_nodes[0].fd[0], key, w, 1, &rate, &(int64_t){ 0 }) == 0,
			  "hit %lld on node 0: %s", (long long)i, sp_err);
		cr_assert_eq(rate, i);
	}

	/* Node 1 starts while the store answers nothing: its workers'
	 * connections wait (timeout_ms 5000). */
	st->pause();
	ct_node_start(1, st->cfg(w, 0, 5000));
	t0 = test_now_ms();
	{
		struct sp_msg m = { .key = key, .window = w, .has_cost = true, .cost = 1 };

		cr_assert(sp_try_send(ct_nodes[1].fd[0], &m, &sid) == 0, "%s", sp_err);
	}
	struct pollfd pfd = { .fd = ct_nodes[1].fd[0], .events = POLLIN };
	early = poll(&pfd, 1, 500);
	st->resume();
	{
		static struct rawspop_actions acts;

		cr_assert(sp_try_ack(ct_nodes[1].fd[0], sid, 5000, &acts) == 0 &&
			  sp_try_rate(&acts, &rate) == 0, "node 1: %s", sp_err);
	}
	waited = test_now_ms() - t0;
	cr_log_info("%s sync_rate 0, store connecting: the first hit was answered %lld ms after "
		    "it was sent (store paused for 500 ms)", st->name, (long long)waited);
	cr_expect_eq(early, 0, "%s: the ACK came while the store was still paused", st->name);
	cr_expect_eq(rate, 6, "%s: node 1's first hit, sent while its store was connecting, "
		     "answered rate %lld (6 = the store's total; 1 = its own count)", st->name,
		     (long long)rate);
	cr_assert_eq(st->total("default", key, w), 6.0);

	/* An attempt that fails (timeout_ms 300 while paused): the answer is
	 * local, and the hit is pushed once the store is back. */
	st->pause();
	ct_node_start(2, st->cfg(w, 0, 300));
	t0 = test_now_ms();
	cr_assert(ct_notify(ct_nodes[2].fd[0], key, w, 1, &rate, &(int64_t){ 0 }) == 0,
		  "node 2: %s", sp_err);
	waited = test_now_ms() - t0;
	cr_log_info("%s sync_rate 0, connection attempt failing: answered after %lld ms, rate %lld",
		    st->name, (long long)waited, (long long)rate);
	cr_expect_eq(rate, 1, "%s: node 2 answered from its own count", st->name);
	st->resume();
	for (t0 = test_now_ms(); st->total("default", key, w) != 7.0 && test_now_ms() - t0 < 10000;)
		test_sleep_ms(50);
	cr_assert_eq(st->total("default", key, w), 7.0, "%s: node 2's hit reached the store once",
		     st->name);
}

/* ---------------------------------------------------------------- SIGTERM */

/* Hits on one node, then SIGTERM before its first sync period ends: the
 * master's final flush must bring them to the store. */
CT_STORE_TEST(sigterm_flushes)
{
	const size_t hits = 500;
	unsigned w = ct_window();
	char key[64], tail[4000];
	double total = -1;
	int64_t t0, exit_ms;
	int status;

	st->up(0);
	ct_node_start(0, st->cfg(w, 5, st->timeout_ms));
	sp_key(key, sizeof(key), "flush");
	t0 = test_now_ms();
	for (size_t i = 0; i < hits; i++)
		ct_hit(0, i % CT_CONNS, key, w, &ct_lat_all);
	ct_node_close_conns(0);
	cr_assert(agentproc_signal(&ct_nodes[0].a, SIGTERM) == 0, "SIGTERM");
	cr_assert(agentproc_wait(&ct_nodes[0].a, 10000) == 0,
		  "%s: node not gone 10 s after SIGTERM", st->name);
	exit_ms = test_now_ms() - t0;
	status = ct_nodes[0].a.exit_status;
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "exit status %#x",
		  (unsigned)status);
	total = st->total("default", key, w);
	cr_log_info("%s SIGTERM flush: %zu hits, then SIGTERM; exited %lld ms after the first hit; "
		    "store total %g", st->name, hits, (long long)exit_ms, total);
	agentproc_log_tail(&ct_nodes[0].a, tail, sizeof(tail));
	cr_assert(total == (double)hits, "%s total %g after SIGTERM, want %zu\n--- log ---\n%s",
		  st->name, total, hits, tail);
	/* The hits took a few ms of a 5 s period: the periodic cycle (random
	 * phase) almost never ran after the last of them, so the final flush
	 * is what pushed them. */
	cr_expect(strstr(tail, "final flush: 1 of 1 counter(s) pushed"),
		  "no final flush in the log:\n%s", tail);
}

/* SIGTERM while the store answers nothing: the final flush gives up after
 * its bound (3 s, agent/master.c) and the agent still exits cleanly; the
 * diffs it could not push are reported in its log. */
Test(cluster, sigterm_flush_bounded_when_store_paused)
{
	unsigned w = ct_window();
	int64_t t_term, exit_ms;
	char key[64], tail[4000];
	int status;

	ct_redis.up(0);
	ct_node_start(0, ct_redis.cfg(w, 5, ct_redis.timeout_ms));
	sp_key(key, sizeof(key), "stuck");
	for (size_t i = 0; i < 100; i++)
		ct_hit(0, i % CT_CONNS, key, w, &ct_lat_all);
	ct_redis.pause();
	ct_node_close_conns(0);
	t_term = test_now_ms();
	cr_assert(agentproc_signal(&ct_nodes[0].a, SIGTERM) == 0, "SIGTERM");
	cr_assert(agentproc_wait(&ct_nodes[0].a, 15000) == 0, "node not gone 15 s after SIGTERM");
	exit_ms = test_now_ms() - t_term;
	status = ct_nodes[0].a.exit_status;
	agentproc_log_tail(&ct_nodes[0].a, tail, sizeof(tail));
	cr_log_info("SIGTERM with the store paused: exited after %lld ms", (long long)exit_ms);
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "exit status %#x",
		  (unsigned)status);
	cr_expect(exit_ms <= 3000 + 1500, "exit took %lld ms; the flush is bounded to 3 s\n%s",
		  (long long)exit_ms, tail);
	cr_expect(strstr(tail, "could not be pushed"), "no report of the unpushed diffs:\n%s",
		  tail);
	ct_redis.resume();
}

/* ---------------------------------------------------------------- batching */

/* Script calls Redis has served so far (INFO commandstats). */
static long long redis_script_calls(void)
{
	redisReply *rep = redis_server_command(&ct_redis_srv, "INFO commandstats");
	long long calls = 0;
	const char *p;

	cr_assert(rep && rep->type == REDIS_REPLY_STRING, "INFO commandstats");
	if ((p = strstr(rep->str, "cmdstat_evalsha:calls=")))
		calls += atoll(p + strlen("cmdstat_evalsha:calls="));
	if ((p = strstr(rep->str, "cmdstat_eval:calls=")))
		calls += atoll(p + strlen("cmdstat_eval:calls="));
	freeReplyObject(rep);
	return calls;
}

/* sync_rate 0: hits that arrive together leave together. 50 NOTIFYs of
 * one key written at once on one connection cost a couple of script calls,
 * not 50, and every ACK still carries the exact running total. */
Test(cluster, redis_synchronous_hits_arriving_together_are_one_push)
{
	enum { BURST = 50 };
	static struct rawspop_actions acts;
	unsigned w = ct_window();
	long long before, after;
	char key[64];

	ct_redis.up(0);
	ct_node_start(0, ct_redis.cfg(w, 0, 5000));
	sp_key(key, sizeof(key), "burst");
	before = redis_script_calls();
	/* One write of every frame: the agent reads them together. */
	rawspop_buf_reset(&sp_wb);
	for (int i = 0; i < BURST; i++) {
		struct sp_msg m = { .key = key, .window = w };

		sp_put_notify(1 + 2 * (uint64_t)i, 1, &m, 1);
	}
	sp_send(ct_nodes[0].fd[0]);
	for (int i = 0; i < BURST; i++) {
		int64_t rate;

		cr_assert(sp_try_ack(ct_nodes[0].fd[0], 1 + 2 * (uint64_t)i, CT_IO_MS, &acts) == 0 &&
			  sp_try_rate(&acts, &rate) == 0, "ACK %d: %s", i, sp_err);
		cr_assert_eq(rate, i + 1, "hit %d answered rate %lld", i + 1, (long long)rate);
	}
	after = redis_script_calls();
	cr_log_info("%d hits arriving together: %lld script calls", BURST, after - before);
	cr_assert_leq(after - before, 5, "%lld script calls for %d hits arriving together",
		      after - before, BURST);
}

/* ---------------------------------------------------------------- reload */

/* A reload that changes a syncing namespace (sync_rate, the store's
 * options) loses no hit and counts none twice: hits before, during and
 * after the SIGHUP all reach Redis once, and the node counts on. */
Test(cluster, reload_restarts_the_sync_losing_nothing)
{
	static struct rawspop_actions acts;
	unsigned w = ct_window();
	char key[64], json2[1024];
	int64_t rate = 0;
	double total = -1;
	FILE *f;

	ct_redis.up(0);
	ct_node_start(0, ct_redis.cfg(w, 0.2, ct_redis.timeout_ms));
	sp_key(key, sizeof(key), "reload");
	for (int i = 0; i < 300; i++) {
		struct sp_msg m = { .key = key, .window = w, .has_cost = true, .cost = 1 };
		uint64_t sid;

		if (i == 100) {
			/* Another sync_rate and timeout, one more namespace. */
			snprintf(json2, sizeof(json2),
				 "{\"log_level\":\"debug\",\"namespaces\":[{\"name\":\"other\","
				 "\"window_sizes\":[60]},{\"name\":\"default\","
				 "\"window_sizes\":[%u],\"sync_rate\":0.1,\"strategy\":\"redis\","
				 "\"strategy_opts\":{\"host\":\"127.0.0.1\",\"port\":%d,"
				 "\"timeout_ms\":500}}]}", w, ct_redis_srv.port);
			cr_assert_not_null(f = fopen(ct_nodes[0].a.cfg_path, "w"));
			fputs(json2, f);
			fclose(f);
			cr_assert_eq(agentproc_signal(&ct_nodes[0].a, SIGHUP), 0);
		}
		cr_assert(sp_try_send(ct_nodes[0].fd[i % CT_CONNS], &m, &sid) == 0, "%s", sp_err);
		cr_assert(sp_try_ack(ct_nodes[0].fd[i % CT_CONNS], sid, CT_IO_MS, &acts) == 0 &&
			  sp_try_rate(&acts, &rate) == 0, "hit %d: %s", i, sp_err);
		cr_assert_eq(rate, i + 1, "hit %d: the node counts on", i);
		if (i >= 100 && i < 200)
			test_sleep_ms(2);
	}
	for (int i = 0; i < 100 && (total = ct_redis.total("default", key, w)) != 300; i++)
		test_sleep_ms(50);
	cr_assert_eq(total, 300, "Redis holds every hit once: %g\n%s", total, ct_node_log(0));
	cr_assert_not_null(strstr(ct_node_log(0), "reloaded"), "%s", ct_node_log(0));
}

int main(int argc, char *argv[])
{
	return ct_main(argc, argv);
}
