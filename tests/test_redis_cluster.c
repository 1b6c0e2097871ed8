/*
 * test_redis_cluster.c - the Redis strategy on a real Redis Cluster
 * (strategies/redis_cluster.c) started by the test (tests/lib/redis_cluster.c:
 * three masters of Debian's redis-server on loopback, with a replica each
 * where a test kills a master): CRC16 and key slots as the cluster computes
 * them, options, every operation routed to the master of its slot,
 * a namespace starting with '}' (one hash tag for a hash and its token
 * keys), resharding a slot range while two instances push with tokens
 * (MOVED, ASK, TRYAGAIN: no hit lost, none counted twice), and a master
 * killed under pushes, its replica promoted (wait_replicas 1: exact);
 * CLUSTER SLOTS replies read strictly and in bounded work (a hostile
 * node's 100,000 full ranges refused); seeds or sentinels that do not
 * answer. Pushes go as the sync loop sends them (tests/lib/pusher.c).
 * GCRA's TAT steps: each key's TAT in its slot, one script call per slot,
 * a step giving hits back.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <ev.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "strategies/redis_int.h"
#include "tests/lib/clock.h"
#include "tests/lib/evtest.h"
#include "tests/lib/pusher.h"
#include "tests/lib/redis_cluster.h"
#include "tests/lib/resp_peer.h"
#include "tests/lib/storetest.h"

#define OPS (&redis_strategy)
#define START60 1700000040

static struct redis_cluster cl;
static bool cl_up;

static void setup(void)
{
	st_setup(OPS);
}

static void teardown(void)
{
	st_teardown();
	if (cl_up)
		redis_cluster_stop(&cl);
}

TestSuite(redis_cluster, .init = setup, .fini = teardown, .timeout = 120);

static void cluster_up(size_t replicas)
{
	if (!redis_server_available())
		cr_skip_test("redis-server is not installed");
	cr_assert_eq(redis_cluster_start(&cl, 3, replicas, 20000), 0, "cluster: %s", cl.err);
	cl_up = true;
}

static struct strategy *mk(const char *extra)
{
	char seeds[256], json[512], err[256] = "";
	struct strategy *s;

	redis_cluster_seeds(&cl, seeds, sizeof(seeds));
	snprintf(json, sizeof(json), "{\"cluster_nodes\": %s, \"timeout_ms\": 2000%s%s}", seeds,
		 extra ? ", " : "", extra ? extra : "");
	s = evtest_create_ready(OPS, st_loop, json, 10, err, sizeof(err));
	cr_assert_not_null(s, "create(%s): %s", json, err);
	cr_assert(OPS->ready(s), "not ready after 10 s");
	return s;
}

static void run_until(const bool *flag, double secs)
{
	cr_assert(st_run_until(flag, secs), "no completion within %g s", secs);
}

/* The stored total of (ns, key) in the 60 s window starting at start. */
static double stored_at(const char *ns, const char *key, int start)
{
	char h[256];
	int len = snprintf(h, sizeof(h), "rl:{%s%s:%u}:60:%d", ns[0] == '}' ? "\x01" : "", ns,
			   redis_server_bucket(key, strlen(key)), start);

	return redis_cluster_hget(&cl, h, (size_t)len, key, strlen(key));
}

/* The stored total of (ns, key) in the 60 s window START60. */
static double stored(const char *ns, const char *key)
{
	return stored_at(ns, key, START60);
}

/* The rules of the cluster specification; the cluster itself agrees on
 * our keys in operations_reach_the_master_of_each_slot. */
Test(redis_cluster, crc16_and_key_slots)
{
	static const struct { const char *key, *hashed; } tags[] = {
		{ "{user1000}.following", "user1000" },
		{ "foo{}{bar}", "foo{}{bar}" },         /* empty tag: the whole key */
		{ "foo{{bar}}zap", "{bar" },            /* up to the first '}' */
		{ "foo{bar}{zap}", "bar" },             /* the first tag only */
		{ "{", "{" },
		{ "a}b{c", "a}b{c" },                   /* no '}' after the '{' */
		{ "rl:{\x01}x:3}:60:1", "\x01" },
	};

	cr_assert_eq(redis_crc16("123456789", 9), 0x31C3);     /* CRC16/XMODEM check */
	cr_assert_eq(redis_key_slot("foo", 3), 12182);          /* the specification's */
	for (size_t i = 0; i < sizeof(tags) / sizeof(tags[0]); i++)
		cr_assert_eq(redis_key_slot(tags[i].key, strlen(tags[i].key)),
			     redis_crc16(tags[i].hashed, strlen(tags[i].hashed)) & 16383, "%s",
			     tags[i].key);
}

/* A CLUSTER SLOTS reply as RESP text, parsed by hiredis's reader. */
static redisReply *resp(const char *text)
{
	redisReader *r = redisReaderCreate();
	void *reply = NULL;

	cr_assert_not_null(r);
	redisReaderFeed(r, text, strlen(text));
	cr_assert_eq(redisReaderGetReply(r, &reply), REDIS_OK);
	cr_assert_not_null(reply, "incomplete RESP: %s", text);
	redisReaderFree(r);
	return reply;
}

static int parse_slots(const char *text, struct redis_addr *addrs, size_t *n, uint8_t *owner,
		       char *err)
{
	static const struct redis_addr from = { .host = "10.0.0.9", .port = 7000 };
	redisReply *r = resp(text);
	int rc = redis_cluster_parse_slots(r, &from, addrs, n, owner, err, 128);

	freeReplyObject(r);
	return rc;
}

Test(redis_cluster, slots_reply_is_read_strictly)
{
	struct redis_addr addrs[REDIS_MASTERS_MAX];
	static uint8_t owner[REDIS_SLOTS];
	char err[128] = "";
	size_t n;

	/* two ranges of one master (the ip it does not know: the one asked),
	 * one of another with a replica */
	cr_assert_eq(parse_slots("*3\r\n"
				 "*3\r\n:0\r\n:99\r\n*3\r\n$0\r\n\r\n:7000\r\n$2\r\nid\r\n"
				 "*4\r\n:100\r\n:16000\r\n*2\r\n$8\r\n10.0.0.2\r\n:7001\r\n"
				 "*2\r\n$8\r\n10.0.0.3\r\n:7002\r\n"
				 "*3\r\n:16001\r\n:16383\r\n*2\r\n$8\r\n10.0.0.9\r\n:7000\r\n",
				 addrs, &n, owner, err), 0, "%s", err);
	cr_assert_eq(n, 2);
	cr_assert_str_eq(addrs[0].host, "10.0.0.9");
	cr_assert_eq(addrs[0].port, 7000);
	cr_assert_str_eq(addrs[1].host, "10.0.0.2");
	cr_assert(owner[0] == 1 && owner[99] == 1 && owner[100] == 2 && owner[16000] == 2 &&
		  owner[16001] == 1 && owner[16383] == 1);
	/* a slot no range names has no master */
	cr_assert_eq(parse_slots("*1\r\n*3\r\n:5\r\n:6\r\n*2\r\n$3\r\n::1\r\n:7000\r\n",
				 addrs, &n, owner, err), 0, "%s", err);
	cr_assert(owner[4] == 0 && owner[5] == 1 && owner[7] == 0);
	cr_assert_str_eq(addrs[0].host, "::1");

	static const struct { const char *text, *needle; } bad[] = {
		{ "*0\r\n", "no slot is served" },
		{ "$2\r\nno\r\n", "string reply, expected an array" },
		{ "*1\r\n*2\r\n:0\r\n:1\r\n", "range 0 is not" },
		{ "*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\nx\r\n:1\r\n", "slots 0-16384" },
		{ "*1\r\n*3\r\n:9\r\n:1\r\n*2\r\n$1\r\nx\r\n:1\r\n", "slots 9-1" },
		{ "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$8\r\n10.0.0.1\r\n:0\r\n", "port 0" },
		{ "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$7\r\nnode-a1\r\n:7000\r\n",
		  "\"node-a1\" is not an IP address" },
		{ "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n:1\r\n:7000\r\n", "range 0 is not" },
		/* a slot has one master: ranges that overlap, or the same twice */
		{ "*2\r\n*3\r\n:0\r\n:100\r\n*2\r\n$8\r\n10.0.0.1\r\n:1\r\n"
		  "*3\r\n:100\r\n:200\r\n*2\r\n$8\r\n10.0.0.2\r\n:1\r\n",
		  "range 1: slot 100 is in an earlier range too" },
		{ "*2\r\n*3\r\n:5\r\n:9\r\n*2\r\n$8\r\n10.0.0.1\r\n:1\r\n"
		  "*3\r\n:5\r\n:9\r\n*2\r\n$8\r\n10.0.0.1\r\n:1\r\n",
		  "range 1: slot 5 is in an earlier range too" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		cr_assert_eq(parse_slots(bad[i].text, addrs, &n, owner, err), -1, "%s accepted",
			     bad[i].text);
		cr_assert(strstr(err, bad[i].needle), "%s: \"%s\" lacks \"%s\"", bad[i].text,
			  err, bad[i].needle);
	}
}

/* A CLUSTER SLOTS reply of n ranges as RESP text (malloc'd, *len bytes):
 * range i covers slots first(i)..last(i), its master at ip (empty: the
 * node asked) and port 7000 + i % masters (port itself when masters is
 * 0). */
static char *slots_text(size_t n, long (*first)(size_t), long (*last)(size_t), const char *ip,
			int port, size_t masters, size_t *len)
{
	size_t cap = 32 + n * (64 + strlen(ip)), off;
	char *t = malloc(cap);

	cr_assert_not_null(t);
	off = (size_t)snprintf(t, cap, "*%zu\r\n", n);
	for (size_t i = 0; i < n; i++)
		off += (size_t)snprintf(t + off, cap - off, "*3\r\n:%ld\r\n:%ld\r\n*2\r\n$%zu\r\n%s\r\n"
					":%zu\r\n", first(i), last(i), strlen(ip), ip,
					masters ? 7000 + i % masters : (size_t)port);
	*len = off;
	return t;
}

static long slot_zero(size_t i)
{
	(void)i;
	return 0;
}

static long slot_last(size_t i)
{
	(void)i;
	return REDIS_SLOTS - 1;
}

static long slot_i(size_t i)
{
	return (long)i;
}

/* A reply of many full ranges cost ranges x 16,384 steps on the loop (a
 * node could hold it for seconds with 100,000 of them): more ranges than
 * slots are refused before any work, overlapping ones at the first slot
 * seen twice; the largest valid reply (a range per slot) is read. */
Test(redis_cluster, slots_reply_work_is_bounded)
{
	struct redis_addr addrs[REDIS_MASTERS_MAX];
	static uint8_t owner[REDIS_SLOTS];
	char err[128] = "";
	size_t n, len;
	char *t;

	t = slots_text(100000, slot_zero, slot_last, "10.0.0.1", 7000, 0, &len);
	cr_assert_eq(parse_slots(t, addrs, &n, owner, err), -1, "100,000 full ranges accepted");
	cr_assert(strstr(err, "100000 ranges, more than the 16384 slots"), "%s", err);
	free(t);

	t = slots_text(REDIS_SLOTS, slot_zero, slot_last, "10.0.0.1", 7000, 0, &len);
	cr_assert_eq(parse_slots(t, addrs, &n, owner, err), -1, "16,384 full ranges accepted");
	cr_assert(strstr(err, "range 1: slot 0 is in an earlier range too"), "%s", err);
	free(t);

	t = slots_text(REDIS_SLOTS, slot_i, slot_i, "10.0.0.1", 0, REDIS_MASTERS_MAX, &len);
	cr_assert_eq(parse_slots(t, addrs, &n, owner, err), 0, "%s", err);
	cr_assert_eq(n, REDIS_MASTERS_MAX);
	for (size_t sl = 0; sl < REDIS_SLOTS; sl++)
		cr_assert_eq(owner[sl], sl % REDIS_MASTERS_MAX + 1, "slot %zu", sl);
	free(t);
}

struct slots_peer {
	char *text;
	size_t len;
};

static const char *slots_peer_answer(struct resp_peer *p, int argc, char **argv, size_t *len)
{
	struct slots_peer *sp = p->arg;

	if (argc == 2 && strcasecmp(argv[0], "CLUSTER") == 0 && strcasecmp(argv[1], "SLOTS") == 0) {
		*len = sp->len;
		return sp->text;
	}
	*len = strlen("-ERR not here\r\n");
	return "-ERR not here\r\n";
}

/* The same through the instance: a seed answering 100,000 full ranges
 * (naming itself) is refused, the reason in every refusal; the instance
 * is not ready and never connects to the master that reply names. */
Test(redis_cluster, a_node_answering_absurd_slots_is_refused)
{
	struct strategy_counter b = { .ns = "ns", .ns_len = 2, .key = "k", .key_len = 1,
				      .start = START60, .size = 60, .diff = 1 };
	char json[256], err[STRATEGY_ERR_MAX] = "";
	struct slots_peer sp;
	struct resp_peer node;
	struct strategy *s;
	struct st_res r = { 0 };
	bool refused = false;

	cr_assert_eq(resp_peer_start(&node, st_loop, slots_peer_answer, &sp), 0, "%s", node.err);
	sp.text = slots_text(100000, slot_zero, slot_last, "", node.port, 0, &sp.len);
	snprintf(json, sizeof(json), "{\"cluster_nodes\": [\"127.0.0.1:%d\"], \"timeout_ms\": 5000}",
		 node.port);
	s = OPS->create(st_loop, json, err, sizeof(err));
	cr_assert_not_null(s, "%s", err);
	for (double end = st_now() + 30; st_now() < end && !refused;) {
		ev_run(st_loop, EVRUN_ONCE);
		if (node.commands > 0 && OPS->push_diffs(s, &b, 1, "t", st_done_cb, &r, err) == -1)
			refused = strstr(err, "CLUSTER SLOTS: 100000 ranges") != NULL;
		cr_assert(!r.done, "a push was taken: %s", r.err);
	}
	cr_assert(refused, "not refused with the reason: %s", err);
	cr_assert(!OPS->ready(s));
	cr_log_info("refused: %s; %u connection(s) to the node, %u command(s)", err,
		    node.connections, node.commands);
	cr_assert(!resp_peer_saw(&node, "SCRIPT"), "a data connection to the master it names");
	OPS->destroy(s);
	resp_peer_stop(&node);
	free(sp.text);
}

Test(redis_cluster, options_errors_name_the_option)
{
	static const struct { const char *json, *needle; } bad[] = {
		{ "{\"cluster_nodes\": []}", "cluster_nodes: expected an array of 1 to" },
		{ "{\"cluster_nodes\": \"127.0.0.1:7000\"}", "cluster_nodes: expected an array" },
		{ "{\"cluster_nodes\": [\"redis.example:7000\"]}", "cluster_nodes[0]: expected" },
		{ "{\"cluster_nodes\": [\"127.0.0.1\"]}", "cluster_nodes[0]" },
		{ "{\"cluster_nodes\": [\"::1:7000\"]}", "cluster_nodes[0]" },
		{ "{\"cluster_nodes\": [\"127.0.0.1:70000\"]}", "cluster_nodes[0]" },
		{ "{\"cluster_nodes\": [\"127.0.0.1:7000\"], \"port\": 1}", "cannot be combined" },
		{ "{\"cluster_nodes\": [\"127.0.0.1:7000\"], \"db\": 2}", "db: must be 0" },
		{ "{\"sentinel\": {\"master\": \"m\"}}", "sentinel: expected both" },
		{ "{\"sentinel\": {\"nodes\": [\"127.0.0.1:1\"]}}", "sentinel: expected both" },
		{ "{\"sentinel\": {\"master\": \"m\", \"nodes\": [\"127.0.0.1:1\"], \"x\": 1}}",
		  "sentinel.x: unknown option" },
		{ "{\"sentinel\": {\"master\": \"a b\", \"nodes\": [\"127.0.0.1:1\"]}}",
		  "sentinel.master" },
		{ "{\"sentinel\": [1]}", "sentinel: expected an object" },
		{ "{\"sentinel\": {\"master\": \"m\", \"nodes\": [\"127.0.0.1:1\"]}, "
		  "\"cluster_nodes\": [\"127.0.0.1:7000\"]}", "cannot be combined with sentinel" },
		{ "{\"wait_replicas\": -1}", "wait_replicas: expected an integer from 0" },
	};
	char err[256];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		cr_assert_eq(OPS->check_opts(bad[i].json, err, sizeof(err)), -1, "%s accepted",
			     bad[i].json);
		cr_assert(strstr(err, bad[i].needle), "%s: \"%s\" lacks \"%s\"", bad[i].json, err,
			  bad[i].needle);
	}
	cr_assert_eq(OPS->check_opts("{\"cluster_nodes\": [\"127.0.0.1:7000\", \"[::1]:7001\", "
				     "\"localhost:7002\"], \"wait_replicas\": 1}", err,
				     sizeof(err)), 0, "%s", err);
	cr_assert_eq(OPS->check_opts("{\"sentinel\": {\"master\": \"mymaster\", \"nodes\": "
				     "[\"127.0.0.1:26379\"]}, \"password\": \"x\", \"db\": 3}", err,
				     sizeof(err)), 0, "%s", err);
}

/* Every operation on a three-master cluster, over namespaces whose
 * buckets spread over every master, and one starting with '}'. */
Test(redis_cluster, operations_reach_the_master_of_each_slot)
{
	static const char *const spaces[] = { "api", "login", "}odd" };
	static const uint32_t sizes[] = { 60 };
	struct strategy *s;
	struct pusher p;
	bool owners[3] = { false };
	struct st_res r = { 0 };
	char err[STRATEGY_ERR_MAX];

	cluster_up(0);
	/* the slots our keys land on, as the cluster computes them */
	for (unsigned b = 0; b < 64; b++) {
		char k[32];
		int len = snprintf(k, sizeof(k), "rl:{api:%u}:60:%d", b, START60);
		long slot = redis_cluster_keyslot(&cl, k, (size_t)len);

		cr_assert_eq(slot, redis_key_slot(k, (size_t)len), "%s", k);
		owners[redis_cluster_owner(&cl, (unsigned)slot)] = true;
	}
	cr_assert(owners[0] && owners[1] && owners[2], "a namespace spreads over every master");

	s = mk(NULL);
	for (size_t i = 0; i < 3; i++) {
		pusher_init(&p, OPS, s, spaces[i], START60, (int)i);
		for (int step = 0; step < 3; step++) {
			pusher_step(&p, true);
			cr_assert(pusher_drain(&p, st_loop, 10), "%s: %s", spaces[i], p.last_err);
		}
		cr_assert_eq(p.failed, 0, "%s: %s", spaces[i], p.last_err);
		for (int k = 0; k < PUSHER_KEYS; k++)
			cr_assert_eq(stored(spaces[i], p.keys[k]), 3, "%s %s: %g", spaces[i],
				     p.keys[k], stored(spaces[i], p.keys[k]));
	}
	/* the '}' namespace: its hash and token keys share one slot */
	{
		char h[64], t[64];
		int hl = snprintf(h, sizeof(h), "rl:{\x01}odd:7}:60:%d", START60);
		int tl = snprintf(t, sizeof(t), "rl:{\x01}odd:7}:tok:x:60:%d:0", START60);

		cr_assert_eq(redis_cluster_keyslot(&cl, h, (size_t)hl),
			     redis_cluster_keyslot(&cl, t, (size_t)tl));
	}
	cr_assert_eq(OPS->get_counters(s, "api", 3, sizes, 1, START60 + 30, st_rows_cb, &r, err), 0,
		     "%s", err);
	run_until(&r.done, 10);
	cr_assert_eq(r.status, 0, "%s", r.err);
	cr_assert_eq(r.nrows, PUSHER_KEYS);
	{
		struct strategy_counter q = { .ns = "login", .ns_len = 5, .key = "key3",
					      .key_len = 4, .start = START60, .size = 60 };
		unsigned active = 0;

		memset(&r, 0, sizeof(r));
		cr_assert_eq(OPS->get_window(s, &q, st_done_cb, &r, err), 0, "%s", err);
		run_until(&r.done, 10);
		cr_assert(q.ok && q.total == 3, "get_window: %g (%s)", q.total, r.err);
		memset(&r, 0, sizeof(r));
		cr_assert_eq(OPS->heartbeat(s, "}odd", 4, "n1", 2, 100, 10, &active, st_done_cb, &r,
					    err), 0, "%s", err);
		run_until(&r.done, 10);
		cr_assert_eq(active, 1, "heartbeat: %s", r.err);
	}
	{
		struct strategy_admit a = { .ns = "}odd", .ns_len = 4, .key = "key1",
					    .key_len = 4, .start = START60, .size = 60, .cost = 1,
					    .limit = 4 };

		memset(&r, 0, sizeof(r));
		cr_assert_eq(OPS->admit(s, &a, 1, "adm-1", st_done_cb, &r, err), 0, "%s", err);
		run_until(&r.done, 10);
		cr_assert(a.ok && a.admitted && a.current == 4, "admit: %s", r.err);
	}
	OPS->destroy(s);
}

/* Runs two pushers (arg) for ms while a slot is held half-migrated. */
static void pump(void *arg, int ms)
{
	static const uint32_t sizes[] = { 60 };
	struct pusher *p = arg;
	double end = st_now() + ms / 1000.0;
	struct st_res r = { 0 };
	char err[STRATEGY_ERR_MAX];

	/* a read of every hash, the previous window's (missing) included:
	 * a missing key of a migrating slot is answered ASK */
	cr_assert_eq(p[0].ops->get_counters(p[0].s, "rs", 2, sizes, 1, START60 + 30, st_rows_cb, &r,
					    err), 0, "%s", err);
	run_until(&r.done, 10);
	cr_assert_eq(r.status, 0, "get_counters while migrating: %s", r.err);
	cr_assert_eq(r.nrows, PUSHER_KEYS);
	while (st_now() < end) {
		pusher_step(&p[0], true);
		pusher_step(&p[1], true);
		ev_run(st_loop, EVRUN_ONCE);
	}
}

/* Two instances push with tokens while a slot range holding some of their
 * hashes moves from master to master: MOVED, ASK and TRYAGAIN along the
 * way; afterwards the cluster holds every hit exactly once. */
Test(redis_cluster, resharding_while_two_instances_push)
{
	struct strategy *s[2];
	struct pusher p[2];
	unsigned lo = 16384, hi = 0;
	int src;
	double t0, moved_at = 0;
	int moves = 0;

	cluster_up(0);
	/* the range: the first master's slots, from its lowest bucket slot of
	 * namespace "rs" to its highest */
	for (unsigned b = 0; b < 64; b++) {
		char k[32];
		int len = snprintf(k, sizeof(k), "{rs:%u}", b);
		unsigned slot = redis_key_slot(k, (size_t)len);

		if (redis_cluster_owner(&cl, slot) == 0) {
			lo = slot < lo ? slot : lo;
			hi = slot > hi ? slot : hi;
		}
	}
	cr_assert(lo <= hi, "no bucket on master 0");
	if (hi > lo + 199)
		hi = lo + 199;          /* a range of 200 slots, from a bucket's */
	src = redis_cluster_owner(&cl, lo);
	for (int i = 0; i < 2; i++) {
		s[i] = mk(NULL);
		pusher_init(&p[i], OPS, s[i], "rs", START60, i);
	}
	t0 = st_now();
	while (st_now() - t0 < 3.0 || moves < 2) {
		for (int i = 0; i < 2; i++)
			pusher_step(&p[i], true);
		ev_run(st_loop, EVRUN_ONCE);
		if (moves < 2 && st_now() - t0 > 0.5 + moves * 1.0) {
			/* there and back: to master 1, then to master 2 */
			size_t dst = moves == 0 ? 1 : 2;
			double m0 = st_now();

			cr_assert_eq(redis_cluster_migrate(&cl, lo, hi, dst, pump, p), 0, "%s",
				     cl.err);
			moved_at += st_now() - m0;
			moves++;
		}
	}
	for (int i = 0; i < 2; i++)
		cr_assert(pusher_drain(&p[i], st_loop, 15), "instance %d not drained: %s", i,
			  p[i].last_err);
	cr_assert_eq(redis_cluster_owner(&cl, lo), 2, "slot %u on %d, %u on %d", lo,
		     redis_cluster_owner(&cl, lo), hi, redis_cluster_owner(&cl, hi));
	cr_log_info("resharding slots %u-%u (from master %d) twice, %.2f s of migration: "
		    "pushes %u + %u, failed %u + %u, resent %u + %u, %g hits per key each; "
		    "the servers answered MOVED %lld, ASK %lld, TRYAGAIN %lld times",
		    lo, hi, src, moved_at, p[0].pushes, p[1].pushes, p[0].failed, p[1].failed,
		    p[0].resent, p[1].resent, p[0].hits, redis_cluster_errorstat(&cl, "MOVED"),
		    redis_cluster_errorstat(&cl, "ASK"), redis_cluster_errorstat(&cl, "TRYAGAIN"));
	cr_assert_gt(redis_cluster_errorstat(&cl, "MOVED"), 0, "no push was redirected");
	cr_assert_gt(redis_cluster_errorstat(&cl, "ASK"), 0, "no read met a slot being migrated");
	cr_assert_gt(redis_cluster_errorstat(&cl, "TRYAGAIN"), 0,
		     "no push met a slot being migrated");
	for (int k = 0; k < PUSHER_KEYS; k++) {
		double want = p[0].hits + p[1].hits, got = stored("rs", p[0].keys[k]);

		cr_assert_eq(got, want, "%s: %g, want %g (%+g)", p[0].keys[k], got, want,
			     got - want);
	}
	for (int i = 0; i < 2; i++)
		OPS->destroy(s[i]);
}

struct ask_noscript {
	struct strategy *s;
	struct strategy_counter c;      /* a window the source does not hold */
	size_t dst;
	int pumped;
	struct st_res r;
};

/* While the slot migrates with every key still at the source: the
 * importing master forgets its scripts, and a push without a token (as
 * sync_rate 0 and first-sight seeding push) of a window the source does
 * not hold (ASK) must reach the importing master as EVAL behind ASKING. */
static void flush_and_push(void *arg, int ms)
{
	struct ask_noscript *a = arg;
	char err[STRATEGY_ERR_MAX];
	redisReply *r;

	(void)ms;
	if (a->pumped++ > 0)
		return;
	r = redis_server_command(&cl.srv[a->dst], "SCRIPT FLUSH");
	cr_assert(r != NULL && r->type == REDIS_REPLY_STATUS, "SCRIPT FLUSH");
	freeReplyObject(r);
	cr_assert_eq(OPS->push_diffs(a->s, &a->c, 1, NULL, st_done_cb, &a->r, err), 0, "%s", err);
	run_until(&a->r.done, 10);
}

/* EVALSHA sent after an ASK meets NOSCRIPT on the importing master: the
 * EVAL resend goes behind ASKING too. Before, it went without: the
 * importing master answered MOVED back to the source, which asked again,
 * until the redirection limit failed the push, for as long as the slot
 * was migrating. */
Test(redis_cluster, noscript_after_ask_resends_behind_asking)
{
	struct pusher old;
	struct ask_noscript a = { .dst = 1 };
	unsigned slot = 16384;
	int k;

	cluster_up(0);
	a.s = mk(NULL);
	pusher_init(&old, OPS, a.s, "ak", START60, 0);        /* keys in every bucket used */
	for (k = 0; k < PUSHER_KEYS; k++) {
		char h[32];
		int len = snprintf(h, sizeof(h), "{ak:%u}",
				   redis_server_bucket(old.keys[k], strlen(old.keys[k])));

		slot = redis_key_slot(h, (size_t)len);
		if (redis_cluster_owner(&cl, slot) == 0)
			break;
	}
	cr_assert_lt(k, PUSHER_KEYS, "no key of namespace ak on master 0");
	pusher_step(&old, true);
	cr_assert(pusher_drain(&old, st_loop, 10), "%s", old.last_err);
	a.c = (struct strategy_counter){ .ns = "ak", .ns_len = 2, .key = old.keys[k],
					 .key_len = strlen(old.keys[k]), .start = START60 + 60,
					 .size = 60, .diff = 3 };
	cr_assert_eq(redis_cluster_migrate(&cl, slot, slot, a.dst, flush_and_push, &a), 0, "%s",
		     cl.err);
	cr_assert_gt(a.pumped, 0, "the slot held no key: nothing was pushed while migrating");
	cr_log_info("slot %u to master %zu: push %s (%s); the servers answered ASK %lld, "
		    "NOSCRIPT %lld times", slot, a.dst, a.r.status == 0 ? "done" : "failed",
		    a.r.err, redis_cluster_errorstat(&cl, "ASK"),
		    redis_cluster_errorstat(&cl, "NOSCRIPT"));
	cr_assert_gt(redis_cluster_errorstat(&cl, "ASK"), 0, "the push was not asked elsewhere");
	cr_assert_gt(redis_cluster_errorstat(&cl, "NOSCRIPT"), 0, "no script was missing");
	cr_assert_eq(a.r.status, 0, "the push failed while the slot migrated: %s", a.r.err);
	cr_assert_eq(stored_at("ak", a.c.key, START60 + 60), 3);
	for (k = 0; k < PUSHER_KEYS; k++)
		cr_assert_eq(stored("ak", old.keys[k]), 1, "%s", old.keys[k]);
	OPS->destroy(a.s);
}

/* A master killed under pushes; its replica takes its slots. With
 * wait_replicas 1 a push counts only once the replica has it, so the
 * promoted replica holds every hit, once. */
Test(redis_cluster, master_killed_replica_promoted_under_pushes)
{
	struct strategy *s;
	struct pusher p;
	double t0, killed = 0, back = 0;
	int rep = -1;

	cluster_up(1);
	s = mk("\"wait_replicas\": 1");
	pusher_init(&p, OPS, s, "fo", START60, 0);
	t0 = st_now();
	while (st_now() - t0 < 4.0 || rep < 0) {
		pusher_step(&p, true);
		ev_run(st_loop, EVRUN_ONCE);
		if (rep < 0 && st_now() - t0 > 0.5) {
			double k0 = st_now();

			rep = redis_cluster_kill_master(&cl, 0, 20000);
			cr_assert(rep >= 0, "%s", cl.err);
			killed = st_now() - k0;
			back = st_now();
		}
	}
	/* The promoted replica has no replica of its own: with wait_replicas
	 * 1 its writes stay unconfirmed (pushed again, exactly once) until
	 * the old master is back, as its replica. */
	cr_assert_eq(redis_cluster_restart(&cl, 0, 20000), 0, "%s", cl.err);
	cr_assert(pusher_drain(&p, st_loop, 15), "not drained: %s", p.last_err);
	cr_log_info("master 0 killed, replica %d promoted after %.2f s; pushes %u, failed %u "
		    "(last: %s), resent %u; %g hits per key; drained %.2f s after", rep, killed,
		    p.pushes, p.failed, p.last_err, p.resent, p.hits, st_now() - back);
	for (int k = 0; k < PUSHER_KEYS; k++)
		cr_assert_eq(stored("fo", p.keys[k]), p.hits, "%s: %g, want %g", p.keys[k],
			     stored("fo", p.keys[k]), p.hits);
	OPS->destroy(s);
}

/* Seeds or sentinels that do not answer: not ready, every operation
 * refused at once with the reason; destroy at any point. */
Test(redis_cluster, nobody_answering_is_not_ready_and_says_why)
{
	static const char *const opts[] = {
		"{\"cluster_nodes\": [\"127.0.0.1:%d\"], \"timeout_ms\": 50}",
		"{\"sentinel\": {\"master\": \"m\", \"nodes\": [\"127.0.0.1:%d\"]}, "
		"\"timeout_ms\": 50}",
	};
	struct strategy_counter b = { .ns = "ns", .ns_len = 2, .key = "k", .key_len = 1,
				      .start = START60, .size = 60, .diff = 1 };
	char json[256], err[STRATEGY_ERR_MAX], port[16];
	struct redis_server dead = { 0 };

	/* a port nobody listens on: a server started and stopped */
	cr_assert_eq(redis_server_start(&dead, 5000), 0, "%s", dead.err);
	redis_server_stop(&dead, 2000);
	snprintf(port, sizeof(port), ":%d", dead.port);
	for (size_t i = 0; i < 2; i++) {
		struct strategy *s;
		struct st_res r = { 0 };

		snprintf(json, sizeof(json), opts[i], dead.port);
		s = OPS->create(st_loop, json, err, sizeof(err));
		cr_assert_not_null(s, "%s", err);
		OPS->destroy(s);                /* while the first question is asked */
		s = OPS->create(st_loop, json, err, sizeof(err));
		cr_assert_not_null(s, "%s", err);
		for (double end = st_now() + 0.3; st_now() < end;)
			ev_run(st_loop, EVRUN_ONCE);
		cr_assert(!OPS->ready(s));
		/* Between failed rounds it is not "connecting" (that promises
		 * an end within timeout_ms, and callers wait for it): pushes of
		 * sync_rate 0 and admissions fail at once, decided locally. */
		int idle = 0;
		for (double end = st_now() + 1.0; st_now() < end && idle == 0;) {
			ev_run(st_loop, EVRUN_ONCE);
			idle += !OPS->connecting(s);
		}
		cr_assert_gt(idle, 0, "%s: connecting all the time while nobody answers", json);
		cr_assert_eq(OPS->push_diffs(s, &b, 1, "t", st_done_cb, &r, err), -1);
		cr_assert(strstr(err, "not connected") && strstr(err, port), "%s: %s", json, err);
		OPS->destroy(s);
		cr_assert(!r.done);
	}
}

/* Names n keys "<tag><i>" of namespace "api" into keys; returns the
 * distinct Cluster slots of their hash tag "{api:<bucket>}" (the slot of
 * their windows' hashes and of their TAT keys). */
static long long name_keys(char (*keys)[16], size_t n, const char *tag)
{
	bool slots[16384] = { false };
	long long distinct = 0;

	for (size_t k = 0; k < n; k++) {
		char h[64];
		int len;
		long slot;

		snprintf(keys[k], 16, "%s%zu", tag, k);
		len = snprintf(h, sizeof(h), "rl:{api:%u}:60:%d",
			       redis_server_bucket(keys[k], strlen(keys[k])), START60);
		slot = redis_cluster_keyslot(&cl, h, (size_t)len);
		cr_assert_geq(slot, 0);
		distinct += !slots[slot];
		slots[slot] = true;
	}
	return distinct;
}

/* The admissions of one admit() leave as one script call per slot (a
 * script may touch one slot only), each call deciding its admissions in
 * order; a resend with the same token, after the calls were applied,
 * returns the same decisions and adds nothing. 20 keys twice, a limit of
 * 1: each key's first admission is admitted, its second is not. */
Test(redis_cluster, admissions_are_one_call_per_slot)
{
	enum { KEYS = 20, N = 2 * KEYS };
	static struct strategy_admit a[N];
	static char keys[KEYS][16];
	char err[STRATEGY_ERR_MAX] = "";
	long long distinct = 0, before, after;
	struct strategy *s;
	struct st_res r;

	cluster_up(0);
	s = mk(NULL);
	distinct = name_keys(keys, KEYS, "many");
	for (int round = 0; round < 2; round++) {
		for (size_t i = 0; i < N; i++)
			a[i] = (struct strategy_admit){ .ns = "api", .ns_len = 3,
							.key = keys[i % KEYS],
							.key_len = strlen(keys[i % KEYS]),
							.start = START60, .size = 60, .cost = 1,
							.limit = 1 };
		before = redis_cluster_cmdstat(&cl, "evalsha");
		memset(&r, 0, sizeof(r));
		cr_assert_eq(OPS->admit(s, a, N, "adm-many", st_done_cb, &r, err), 0, "%s", err);
		run_until(&r.done, 10);
		after = redis_cluster_cmdstat(&cl, "evalsha");
		cr_assert_eq(r.status, 0, "%s", r.err);
		cr_log_info("round %d: %d admissions of %d keys in %lld slots: %lld script calls",
			    round, N, KEYS, distinct, after - before);
		cr_assert_eq(after - before, distinct, "round %d: one call per slot", round);
		for (size_t i = 0; i < N; i++) {
			cr_assert(a[i].ok, "admission %zu", i);
			cr_assert_eq(a[i].admitted, i < KEYS, "admission %zu (%s)", i, a[i].key);
			cr_assert_eq(a[i].current, 1, "admission %zu: %g", i, a[i].current);
		}
		for (size_t k = 0; k < KEYS; k++)
			cr_assert_eq(stored("api", keys[k]), 1, "%s", keys[k]);
	}
	OPS->destroy(s);
}

/* GCRA's TAT steps (STRATEGY_STEP_TAT, strategies/redis_script.c's TAT
 * script) on a Redis Cluster: a key's TAT "rl:{api:<bucket>}:g:60:<key>"
 * in the slot of its hash tag, the steps of one admit() one script call
 * per slot, each key's steps in order. 20 keys, 7 steps each (10 per
 * 60 s: T = 6 s, burst 5): 5 admitted per key; then per key a step of
 * cost 0 giving 2 hits back (diff -2, as a sync cycle pushes them) and 3
 * hits: 2 admitted; that call resent with its token (a call in doubt):
 * the same decisions, nothing given back twice, so one more hit per key
 * is denied. */
Test(redis_cluster, gcra_tat_steps_in_their_slots)
{
	enum { KEYS = 20, STEPS = 7, N = KEYS * STEPS };
	static struct strategy_admit a[N];
	static char keys[KEYS][16];
	char err[STRATEGY_ERR_MAX] = "";
	long long distinct = 0, before;
	struct strategy *s;
	struct st_res r;

	cluster_up(0);
	s = mk(NULL);
	distinct = name_keys(keys, KEYS, "tat");
	for (int round = 0; round < 4; round++) {
		size_t per = round == 0 ? STEPS : round == 3 ? 1 : 4, n = KEYS * per;
		const char *tok = round == 0 ? "tat-1" : round == 3 ? "tat-3" : "tat-2";

		/* round 2: round 1's call again, with its token: the same
		 * decisions, nothing moved twice; round 3: one hit per key,
		 * denied (the bucket full again) */
		for (size_t i = 0; i < n; i++) {
			bool give = (round == 1 || round == 2) && i % per == 0;

			a[i] = st_tat("api", keys[i / per], 60, 10, 5, give ? 0 : 1, give ? -2 : 0);
		}
		before = redis_cluster_cmdstat(&cl, "evalsha");
		memset(&r, 0, sizeof(r));
		cr_assert_eq(OPS->admit(s, a, n, tok, st_done_cb, &r, err), 0, "%s", err);
		run_until(&r.done, 10);
		cr_assert_eq(r.status, 0, "%s", r.err);
		cr_assert_eq(redis_cluster_cmdstat(&cl, "evalsha") - before, distinct,
			     "round %d: one call per slot", round);
		for (size_t i = 0; i < n; i++) {
			size_t j = i % per;

			cr_assert(a[i].ok, "round %d, step %zu", round, i);
			bool want = round == 0 ? j < 5 : round == 3 ? false : j < 3;

			if (round == 0 || round == 3 || j > 0)
				cr_assert_eq(a[i].admitted, want, "round %d, %s step %zu", round,
					     a[i].key, j);
		}
	}
	OPS->destroy(s);
}
