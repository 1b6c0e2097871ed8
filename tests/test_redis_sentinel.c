/*
 * test_redis_sentinel.c - the Redis strategy through Redis Sentinel
 * (strategies/redis_sentinel.c) on a real setup started by the test
 * (tests/lib/redis_sentinel.c: a master, a replica, three sentinels on
 * loopback): the master found through the sentinels, and SENTINEL FAILOVER
 * under pushes sent as the sync loop sends them (tests/lib/pusher.c): the
 * strategy follows +switch-master to the new master, the pushes in flight
 * are resent with their token, and with wait_replicas 1 the new master
 * holds every hit exactly once. Trust (suite redis_sentinel_trust): a
 * rogue sentinel (tests/lib/resp_peer.c, the attacker) naming a fake
 * master, at start and in a +switch-master, is outvoted by the real
 * sentinels and its master never hears from the agent; sentinels with a
 * password of their own (sentinel.password); the options. GCRA's TAT
 * steps on the master the sentinels name, the TAT script sent again after
 * SCRIPT FLUSH.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <ev.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "strategies/strategy.h"
#include "tests/lib/evtest.h"
#include "tests/lib/pusher.h"
#include "tests/lib/redis_sentinel.h"
#include "tests/lib/resp_peer.h"
#include "tests/lib/storetest.h"

#define OPS (&redis_strategy)
#define START60 1700000040

static struct redis_sentinels st;
static bool st_up;
static struct ev_loop *loop;

static void setup(void)
{
	signal(SIGPIPE, SIG_IGN);
	loop = evtest_loop_new();
	if (!redis_sentinels_available())
		cr_skip_test("redis-server or redis-sentinel is not installed");
	cr_assert_eq(redis_sentinels_start(&st, 20000), 0, "%s", st.err);
	st_up = true;
}

static void teardown(void)
{
	evtest_loop_free(loop);
	if (st_up)
		redis_sentinels_stop(&st);
}

TestSuite(redis_sentinel, .init = setup, .fini = teardown, .timeout = 120);

static double now_s(void)
{
	return evtest_now(loop);
}

static struct strategy *mk(const char *extra)
{
	char nodes[128], json[512], err[256] = "";
	struct strategy *s;

	redis_sentinels_nodes(&st, nodes, sizeof(nodes));
	snprintf(json, sizeof(json), "{\"sentinel\": {\"master\": \"mymaster\", \"nodes\": %s}, "
		 "\"timeout_ms\": 2000%s%s}", nodes, extra ? ", " : "", extra ? extra : "");
	s = evtest_create_ready(OPS, loop, json, 10, err, sizeof(err));
	cr_assert_not_null(s, "create(%s): %s", json, err);
	cr_assert(OPS->ready(s), "not ready after 10 s");
	return s;
}

/* The stored total of (ns, key) on server r, window START60. */
static double stored(struct redis_server *r, const char *ns, const char *key)
{
	char h[128];
	int len = snprintf(h, sizeof(h), "rl:{%s:%u}:60:%d", ns,
			   redis_server_bucket(key, strlen(key)), START60);

	return redis_server_hget(r, h, (size_t)len, key, strlen(key));
}

Test(redis_sentinel, master_found_through_the_sentinels)
{
	struct strategy *s = mk(NULL);
	struct pusher p;

	pusher_init(&p, OPS, s, "sn", START60, 0);
	pusher_step(&p, true);
	cr_assert(pusher_drain(&p, loop, 10), "%s", p.last_err);
	cr_assert_eq(stored(&st.data[0], "sn", "key5"), 1);
	OPS->destroy(s);
}

/* Pushes through a SENTINEL FAILOVER (started after 0.5 s, polled until
 * over), for at least 3 s; then drained. Returns the lowest and highest
 * count of a key on the new master, in *lo and *hi. */
static void failover_case(struct strategy *s, struct pusher *p, double *lo, double *hi)
{
	double t0, asked = 0, done = 0, next_poll = 0;
	bool started = false;

	pusher_init(p, OPS, s, "fo", START60, 0);
	t0 = now_s();
	while (!done || now_s() - t0 < 3.0) {
		pusher_step(p, true);
		ev_run(loop, EVRUN_ONCE);
		if (!started && now_s() - t0 > 0.5) {
			cr_assert_eq(redis_sentinels_failover_start(&st), 0, "%s", st.err);
			started = true;
			asked = now_s();
		}
		if (started && !done && now_s() >= next_poll) {
			next_poll = now_s() + 0.1;
			if (redis_sentinels_failover_done(&st))
				done = now_s();
			cr_assert(now_s() - asked < 30, "failover not over within 30 s");
		}
	}
	cr_assert(pusher_drain(p, loop, 15), "not drained: %s", p->last_err);
	cr_assert_eq(st.master, 1, "the replica is the master now");
	*lo = *hi = stored(&st.data[1], "fo", p->keys[0]);
	for (int k = 1; k < PUSHER_KEYS; k++) {
		double v = stored(&st.data[1], "fo", p->keys[k]);

		*lo = v < *lo ? v : *lo;
		*hi = v > *hi ? v : *hi;
	}
	cr_log_info("SENTINEL FAILOVER: over (sentinels agree, old master in sync) after %.2f s; "
		    "pushes %u, failed %u (last: %s), resent %u; %g hits per key, the new master "
		    "holds %g to %g", done - asked, p->pushes, p->failed, p->last_err, p->resent,
		    p->hits, *lo, *hi);
}

Test(redis_sentinel, failover_under_pushes_counts_each_hit_once)
{
	struct strategy *s = mk("\"wait_replicas\": 1");
	struct pusher p;
	double lo, hi;

	failover_case(s, &p, &lo, &hi);
	cr_assert(lo == p.hits && hi == p.hits, "%g to %g, want %g", lo, hi, p.hits);
	OPS->destroy(s);
}

/* The same without wait_replicas: what the old master confirmed but the
 * new one never got is lost (Redis replicates asynchronously); nothing is
 * counted twice. The loss is logged: it is the cost docs/CLUSTER.md
 * states. */
Test(redis_sentinel, failover_without_wait_replicas_never_counts_twice)
{
	struct strategy *s = mk(NULL);
	struct pusher p;
	double lo, hi;

	failover_case(s, &p, &lo, &hi);
	cr_log_info("without wait_replicas: %g of %g hits per key lost at worst", p.hits - lo,
		    p.hits);
	cr_assert(hi <= p.hits, "a hit counted twice: %g > %g", hi, p.hits);
	OPS->destroy(s);
}

/* GCRA's TAT steps (STRATEGY_STEP_TAT) through the sentinels: on the
 * master they name, 7 steps of one key (10 per 60 s, burst 5) admit 5 and
 * its TAT key is there; after SCRIPT FLUSH the TAT script is sent again
 * (NOSCRIPT, then EVAL) and sees the same TAT: one more step is denied. */
static void gcra_done(void *arg, int status, const char *errstr)
{
	struct st_res *r = arg;

	r->done = true;
	r->status = status;
	snprintf(r->err, sizeof(r->err), "%s", errstr ? errstr : "");
}

Test(redis_sentinel, gcra_tat_steps_on_the_master)
{
	struct strategy *s = mk(NULL);
	struct strategy_admit a[7];
	char err[STRATEGY_ERR_MAX] = "", g[64];
	struct st_res r = { 0 };
	int len = snprintf(g, sizeof(g), "rl:{sn:%u}:g:60:tat", redis_server_bucket("tat", 3));

	for (int round = 0; round < 2; round++) {
		size_t n = round ? 1 : 7;

		for (size_t i = 0; i < n; i++)
			a[i] = st_tat("sn", "tat", 60, 10, 5, 1, 0);
		memset(&r, 0, sizeof(r));
		cr_assert_eq(OPS->admit(s, a, n, NULL, gcra_done, &r, err), 0, "%s", err);
		cr_assert(evtest_run_until(loop, &r.done, 10), "no answer within 10 s");
		cr_assert_eq(r.status, 0, "%s", r.err);
		for (size_t i = 0; i < n; i++)
			cr_assert(a[i].ok && a[i].admitted == (round == 0 && i < 5),
				  "round %d, step %zu: ok %d, admitted %d", round, i, a[i].ok,
				  a[i].admitted);
		redisReply *v = redis_server_command(&st.data[st.master], "GET %b", g, (size_t)len);
		cr_assert(v && v->type == REDIS_REPLY_STRING, "the TAT on the master");
		freeReplyObject(v);
		v = redis_server_command(&st.data[st.master], "SCRIPT FLUSH");
		cr_assert_not_null(v);
		freeReplyObject(v);
	}
	OPS->destroy(s);
}

/* A NOSCRIPT resend (EVAL after SCRIPT FLUSH) gets its own WAIT. */
Test(redis_sentinel, script_flush_with_wait_replicas)
{
	struct strategy *s = mk("\"wait_replicas\": 1");
	struct pusher p;
	redisReply *r;

	pusher_init(&p, OPS, s, "sf", START60, 0);
	pusher_step(&p, true);
	cr_assert(pusher_drain(&p, loop, 10), "%s", p.last_err);
	r = redis_server_command(&st.data[0], "SCRIPT FLUSH");
	cr_assert(r && r->type == REDIS_REPLY_STATUS);
	freeReplyObject(r);
	pusher_step(&p, true);
	cr_assert(pusher_drain(&p, loop, 10), "%s", p.last_err);
	cr_assert_eq(p.failed, 0, "%s", p.last_err);
	cr_assert_eq(stored(&st.data[0], "sf", "key7"), 2);
	cr_assert_eq(stored(&st.data[1], "sf", "key7"), 2, "the replica has it too");
	OPS->destroy(s);
}

/* Connections the sentinel t->sentinel[i] has accepted so far. */
static long long sentinel_connections(int i)
{
	redisReply *r = redis_server_command(&st.sentinel[i], "INFO stats");
	long long n = -1;
	const char *p;

	if (r && r->type == REDIS_REPLY_STRING && (p = strstr(r->str, "total_connections_received:")))
		n = atoll(p + strlen("total_connections_received:"));
	if (r)
		freeReplyObject(r);
	return n;
}

/* The master gone (its port closed) before the sentinels fail it over:
 * they keep naming it, and the instance retries it on its backoff. It
 * used to reopen at once on every answer: thousands of connections a
 * second to the sentinels. */
Test(redis_sentinel, master_down_is_retried_on_a_backoff)
{
	struct strategy *s = mk(NULL);
	long long before[REDIS_SENTINELS], more = 0;

	for (int i = 0; i < REDIS_SENTINELS; i++)
		before[i] = sentinel_connections(i);
	redis_server_stop(&st.data[st.master], 2000);
	/* Less than the sentinels' down-after (1 s): they still name it. */
	for (double end = now_s() + 0.8; now_s() < end;)
		ev_run(loop, EVRUN_ONCE);
	cr_assert(!OPS->ready(s));
	for (int i = 0; i < REDIS_SENTINELS; i++)
		more += sentinel_connections(i) - before[i];
	cr_log_info("master down for 0.8 s: %lld connections to the sentinels", more);
	cr_assert_leq(more, 60, "%lld connections to the sentinels in 0.8 s", more);
	OPS->destroy(s);
}

/* ===================================================================== */
/* Trust: who names the master, who gets which password                  */
/* ===================================================================== */

static void setup_loop(void)
{
	signal(SIGPIPE, SIG_IGN);
	loop = evtest_loop_new();
}

TestSuite(redis_sentinel_trust, .init = setup_loop, .fini = teardown, .timeout = 120);

#define MASTER_PASS   "master-secret"
#define SENTINEL_PASS "sentinel-secret"

static void sentinels_up(const char *master_pass, const char *sentinel_pass)
{
	if (!redis_sentinels_available())
		cr_skip_test("redis-server or redis-sentinel is not installed");
	cr_assert_eq(redis_sentinels_start_auth(&st, 20000, master_pass, sentinel_pass), 0, "%s",
		     st.err);
	st_up = true;
}

/* An instance over these sentinel nodes (a JSON array) and sentinel
 * options, with the master's password; run until ready or secs pass. */
static struct strategy *mk_over(const char *nodes, const char *sentinel_extra, double secs)
{
	char json[1024], err[256] = "";
	struct strategy *s;

	snprintf(json, sizeof(json), "{\"sentinel\": {\"master\": \"mymaster\", \"nodes\": %s%s%s}, "
		 "\"password\": \"" MASTER_PASS "\", \"timeout_ms\": 2000}", nodes,
		 sentinel_extra ? ", " : "", sentinel_extra ? sentinel_extra : "");
	s = evtest_create_ready(OPS, loop, json, secs, err, sizeof(err));
	cr_assert_not_null(s, "create(%s): %s", json, err);
	return s;
}

/* The attacker: a sentinel that names its own master for any name, and
 * that master, which takes anything. Both record what they receive. */
struct rogue {
	struct resp_peer sentinel, master;
	char named[96];                 /* its get-master-addr-by-name answer */
	unsigned asked;                 /* get-master-addr-by-name received */
};

static const char *answer_with(const char *text, size_t *len)
{
	*len = strlen(text);
	return text;
}

static const char *rogue_sentinel_answer(struct resp_peer *p, int argc, char **argv, size_t *len)
{
	struct rogue *r = p->arg;

	if (argc == 3 && strcasecmp(argv[0], "SENTINEL") == 0 &&
	    strcasecmp(argv[1], "get-master-addr-by-name") == 0) {
		r->asked++;
		return answer_with(r->named, len);
	}
	if (strcasecmp(argv[0], "AUTH") == 0)
		return answer_with("+OK\r\n", len);
	if (argc == 2 && strcasecmp(argv[0], "SUBSCRIBE") == 0)
		return answer_with("*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n", len);
	return answer_with("-ERR unknown command\r\n", len);
}

static const char *rogue_master_answer(struct resp_peer *p, int argc, char **argv, size_t *len)
{
	(void)p, (void)argc, (void)argv;
	return answer_with("+OK\r\n", len);
}

static void rogue_start(struct rogue *r)
{
	char port[8];

	memset(r, 0, sizeof(*r));
	cr_assert_eq(resp_peer_start(&r->master, loop, rogue_master_answer, r), 0, "%s",
		     r->master.err);
	cr_assert_eq(resp_peer_start(&r->sentinel, loop, rogue_sentinel_answer, r), 0, "%s",
		     r->sentinel.err);
	snprintf(port, sizeof(port), "%d", r->master.port);
	snprintf(r->named, sizeof(r->named), "*2\r\n$9\r\n127.0.0.1\r\n$%zu\r\n%s\r\n",
		 strlen(port), port);
}

static void rogue_stop(struct rogue *r)
{
	resp_peer_stop(&r->sentinel);
	resp_peer_stop(&r->master);
}

/* The fake master heard nothing from the agent; the master's password
 * never went to the rogue sentinel either. */
static void rogue_check(const struct rogue *r)
{
	cr_assert(!resp_peer_saw(&r->master, "AUTH"), "the fake master got an AUTH");
	cr_assert_eq(r->master.connections, 0, "the agent connected to the fake master");
	cr_assert(!resp_peer_saw(&r->sentinel, MASTER_PASS),
		  "the master's password went to a sentinel");
}

/* One push of "key5" (+1) in namespace ns, drained; the master holds it. */
static void push_lands_on_the_master(struct strategy *s, const char *ns)
{
	struct pusher p;

	pusher_init(&p, OPS, s, ns, START60, 0);
	pusher_step(&p, true);
	cr_assert(pusher_drain(&p, loop, 10), "%s", p.last_err);
	cr_assert_eq(p.failed, 0, "%s", p.last_err);
	cr_assert_eq(stored(&st.data[st.master], ns, "key5"), 1);
}

/* The callback of a push refused at once: never runs. */
static void never_done(void *arg, int status, const char *errstr)
{
	(void)arg;
	cr_assert_fail("a refused push completed: %d %s", status, errstr ? errstr : "");
}

static void run_for(double secs)
{
	for (double end = now_s() + secs; now_s() < end;)
		ev_run(loop, EVRUN_ONCE);
}

/* The rogue sentinel is asked first; the agent used to take the first
 * answer and send the master's password to the address it named. Now two
 * real sentinels of three (the default quorum, a majority) outvote it;
 * and with one real sentinel against it, nobody has the quorum: not
 * ready, and the refusal names the disagreement. */
Test(redis_sentinel_trust, a_rogue_sentinel_cannot_name_the_master)
{
	struct strategy_counter b = { .ns = "ns", .ns_len = 2, .key = "k", .key_len = 1,
				      .start = START60, .size = 60, .diff = 1 };
	char nodes[256], err[STRATEGY_ERR_MAX] = "";
	struct rogue r;
	struct strategy *s;

	sentinels_up(MASTER_PASS, NULL);
	rogue_start(&r);
	snprintf(nodes, sizeof(nodes), "[\"127.0.0.1:%d\", \"127.0.0.1:%d\", \"127.0.0.1:%d\"]",
		 r.sentinel.port, st.sentinel[0].port, st.sentinel[1].port);
	s = mk_over(nodes, NULL, 10);
	rogue_check(&r);
	cr_assert(OPS->ready(s), "not ready after 10 s");
	push_lands_on_the_master(s, "rg");
	cr_assert_gt(r.asked, 0, "the rogue sentinel was not asked");
	rogue_check(&r);
	OPS->destroy(s);

	/* one against one: no majority (the default quorum, 2 of 2); with
	 * quorum 1 each has it, and neither is named more often */
	snprintf(nodes, sizeof(nodes), "[\"127.0.0.1:%d\", \"127.0.0.1:%d\"]", r.sentinel.port,
		 st.sentinel[2].port);
	for (int quorum = 2; quorum >= 1; quorum--) {
		char extra[32], needle[64];

		snprintf(extra, sizeof(extra), "\"quorum\": %d", quorum);
		snprintf(needle, sizeof(needle), "sentinels disagree (quorum %d)", quorum);
		s = mk_over(nodes, quorum == 2 ? NULL : extra, 1.5);
		rogue_check(&r);
		cr_assert(!OPS->ready(s), "ready on the word of one sentinel of two (%s)", extra);
		cr_assert_eq(OPS->push_diffs(s, &b, 1, "t", never_done, NULL, err), -1);
		cr_log_info("one real sentinel against a rogue, quorum %d: %s", quorum, err);
		cr_assert(strstr(err, needle), "%s", err);
		OPS->destroy(s);
	}
	rogue_stop(&r);
}

/* A +switch-master from one sentinel is news, not an order: every
 * sentinel is asked again, and the agent stays on the master the quorum
 * names. It used to connect to the announced master at once. */
Test(redis_sentinel_trust, a_switch_announced_by_one_sentinel_is_checked_with_all)
{
	char nodes[256], msg[256], text[128];
	struct rogue r;
	struct strategy *s;
	unsigned before;
	int len;

	sentinels_up(MASTER_PASS, NULL);
	rogue_start(&r);
	snprintf(nodes, sizeof(nodes), "[\"127.0.0.1:%d\", \"127.0.0.1:%d\", \"127.0.0.1:%d\"]",
		 st.sentinel[0].port, st.sentinel[1].port, r.sentinel.port);
	s = mk_over(nodes, NULL, 10);
	cr_assert(OPS->ready(s), "not ready after 10 s");
	for (double end = now_s() + 5; now_s() < end && !resp_peer_saw(&r.sentinel, "SUBSCRIBE");)
		ev_run(loop, EVRUN_ONCE);
	cr_assert(resp_peer_saw(&r.sentinel, "SUBSCRIBE"), "no watch connection to the rogue");
	before = r.asked;
	len = snprintf(text, sizeof(text), "mymaster 127.0.0.1 %d 127.0.0.1 %d",
		       st.data[st.master].port, r.master.port);
	len = snprintf(msg, sizeof(msg), "*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n"
		       "$%d\r\n%s\r\n", len, text);
	cr_assert_gt(resp_peer_send_all(&r.sentinel, msg, (size_t)len), 0);
	for (double end = now_s() + 5; now_s() < end && r.asked == before;)
		ev_run(loop, EVRUN_ONCE);
	run_for(0.5);                   /* whatever else it would do */
	rogue_check(&r);
	cr_assert_gt(r.asked, before, "the sentinels were not asked again");
	cr_assert(OPS->ready(s));
	push_lands_on_the_master(s, "sw");
	rogue_check(&r);
	OPS->destroy(s);
	rogue_stop(&r);
}

/* Clients of a sentinel subscribed to a channel (the agent's watch
 * connections: sentinels subscribe on the data servers only). */
static int sentinel_subscribers(int i)
{
	redisReply *r = redis_server_command(&st.sentinel[i], "CLIENT LIST");
	const char *p = r && r->type == REDIS_REPLY_STRING ? r->str : "";
	int n = 0;

	for (; (p = strstr(p, " sub=")) != NULL; p++)
		n += p[5] != '0';
	if (r)
		freeReplyObject(r);
	return n;
}

/* Sentinels with requirepass: with sentinel.password the master is found
 * and every sentinel's watch connection is subscribed (AUTH first), with
 * sentinel.username too (an ACL user); asked without it, they refuse (the
 * master's password, which they do not know, is never tried on them); a
 * wrong one is named as the AUTH that failed. */
Test(redis_sentinel_trust, sentinels_with_a_password_need_sentinel_password)
{
	struct strategy_counter b = { .ns = "ns", .ns_len = 2, .key = "k", .key_len = 1,
				      .start = START60, .size = 60, .diff = 1 };
	char nodes[128], err[STRATEGY_ERR_MAX] = "";
	struct strategy *s;

	sentinels_up(MASTER_PASS, SENTINEL_PASS);
	redis_sentinels_nodes(&st, nodes, sizeof(nodes));

	s = mk_over(nodes, "\"password\": \"" SENTINEL_PASS "\"", 10);
	cr_assert(OPS->ready(s), "not ready after 10 s");
	push_lands_on_the_master(s, "pw");
	for (double end = now_s() + 5; now_s() < end;) {
		int subscribed = 0;

		for (int i = 0; i < REDIS_SENTINELS; i++)
			subscribed += sentinel_subscribers(i) > 0;
		if (subscribed == REDIS_SENTINELS)
			break;
		run_for(0.1);
	}
	for (int i = 0; i < REDIS_SENTINELS; i++)
		cr_assert_gt(sentinel_subscribers(i), 0, "no watch connection on sentinel %d", i);
	OPS->destroy(s);

	/* an ACL user of the sentinels: sentinel.username */
	for (int i = 0; i < REDIS_SENTINELS; i++) {
		redisReply *r = redis_server_command(&st.sentinel[i], "ACL SETUSER agent on "
						     ">agent-secret allcommands allchannels");

		cr_assert(r && r->type == REDIS_REPLY_STATUS, "ACL SETUSER: %s",
			  r ? r->str : st.sentinel[i].err);
		freeReplyObject(r);
	}
	s = mk_over(nodes, "\"username\": \"agent\", \"password\": \"agent-secret\"", 10);
	cr_assert(OPS->ready(s), "not ready after 10 s as an ACL user");
	push_lands_on_the_master(s, "acl");
	OPS->destroy(s);

	s = mk_over(nodes, NULL, 1.5);
	cr_assert(!OPS->ready(s), "ready without the sentinels' password");
	cr_assert_eq(OPS->push_diffs(s, &b, 1, "t", never_done, NULL, err), -1);
	cr_log_info("without sentinel.password: %s", err);
	cr_assert(strstr(err, "NOAUTH"), "%s", err);
	OPS->destroy(s);

	s = mk_over(nodes, "\"password\": \"wrong\"", 1.5);
	cr_assert(!OPS->ready(s), "ready with a wrong sentinel.password");
	cr_assert_eq(OPS->push_diffs(s, &b, 1, "t", never_done, NULL, err), -1);
	cr_log_info("a wrong sentinel.password: %s", err);
	cr_assert(strstr(err, "AUTH: WRONGPASS"), "%s", err);
	OPS->destroy(s);
}

Test(redis_sentinel_trust, options_quorum_and_credentials)
{
#define SN(rest) "{\"sentinel\": {\"master\": \"m\", \"nodes\": [\"127.0.0.1:1\", " \
		 "\"127.0.0.1:2\", \"127.0.0.1:3\"]" rest "}}"
	static const struct { const char *json, *needle; } bad[] = {
		{ SN(", \"quorum\": 0"), "sentinel.quorum: expected an integer from 1 to 16, got 0" },
		{ SN(", \"quorum\": 4"), "sentinel.quorum: expected at most the number of "
		  "sentinel.nodes (3), got 4" },
		{ SN(", \"quorum\": \"2\""), "sentinel.quorum: expected an integer from 1 to 16, "
		  "got a string" },
		{ SN(", \"quorum\": 1.5"), "sentinel.quorum: expected an integer from 1 to 16, "
		  "got a number" },
		{ SN(", \"quorum\": -1"), "sentinel.quorum: expected an integer from 1 to 16, "
		  "got -1" },
		{ SN(", \"password\": \"\""), "sentinel.password: expected a string of 1 to" },
		{ SN(", \"password\": 5"), "sentinel.password: expected a string, got an integer" },
		{ SN(", \"username\": \"u\""), "sentinel.username: needs sentinel.password" },
		{ SN(", \"username\": [], \"password\": \"p\""),
		  "sentinel.username: expected a string, got an array" },
		{ SN(", \"pasword\": \"p\""), "sentinel.pasword: unknown option" },
		{ "{\"sentinel\": {\"master\": \"m\", \"nodes\": [\"127.0.0.1:1\", \"localhost:1\"]}}",
		  "sentinel.nodes[1]: the same sentinel as sentinel.nodes[0]" },
	};
	char err[256];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		cr_assert_eq(OPS->check_opts(bad[i].json, err, sizeof(err)), -1, "%s accepted",
			     bad[i].json);
		cr_assert(strstr(err, bad[i].needle), "%s: \"%s\" lacks \"%s\"", bad[i].json, err,
			  bad[i].needle);
	}
	cr_assert_eq(OPS->check_opts(SN(", \"quorum\": 3, \"password\": \"p\", \"username\": \"u\""),
				     err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(OPS->check_opts(SN(", \"quorum\": 1"), err, sizeof(err)), 0, "%s", err);
#undef SN
}
