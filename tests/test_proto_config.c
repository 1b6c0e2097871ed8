/*
 * test_proto_config.c - the configuration as HAProxy sees it over SPOP:
 * message_prefix, var_scope, namespaces and their windows, count_denied,
 * several limits in one decision, delay instead of deny, the agent's own
 * max_frame_size; answers that wait (held, or for a paused store) hold up
 * no other answer of the connection; a full table (max_keys,
 * on_table_full) never turns limiting off.
 *
 * The agent ($AGENT) is started by each test on a free loopback port and
 * stopped by pid; the client is tests/lib/spoptest.h over
 * tests/lib/rawspop.c, written apart from the project's spop/ codec so a
 * bug mirrored in the codec's encoder and decoder cannot hide. A test
 * fails too if the agent's log holds a sanitizer report. The contract
 * checked is docs/PROTOCOL.md.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tests/lib/agenttest.h"
#include "tests/lib/clock.h"
#include "tests/lib/rawspop.h"
#include "tests/lib/redis_server.h"
#include "tests/lib/spoptest.h"

/* ---------------------------------------------------------------- config */

TestSuite(config, .fini = test_agent_stop, .timeout = 60);

/* message_prefix, var_scope, a namespace with a single window (window may
 * be omitted), count_denied false. */
Test(config, prefix_scope_namespaces)
{
	static const char *const args[] = { "-w", "1", NULL };
	static const char json[] =
		"{ \"message_prefix\": \"rl\", \"var_scope\": \"req\", \"namespaces\": ["
		"  { \"name\": \"default\", \"window_sizes\": [1, 60, 3600] },"
		"  { \"name\": \"api\", \"window_sizes\": [10], \"count_denied\": false } ] }";
	static struct rawspop_actions acts;
	char key[64];
	int fd;

	test_agent_start(json, args);
	sp_scope = RAWSPOP_SCOPE_REQ;
	fd = sp_agent_conn();
	sp_key(key, sizeof(key), "cfg");
	{
		struct sp_msg r = { .msg = "rl-a", .key = key, .window = 60, .limit = 5 };

		sp_notify1(fd, &r, &acts);
		sp_expect_no_error(&acts);
		cr_assert(sp_var_int(&acts, "rate_a") == 1, "rl-a: %s", sp_hex(&sp_fr));
	}
	{
		struct sp_msg r = { .msg = "ratelimit", .key = key, .window = 60, .limit = 5 };

		sp_notify1(fd, &r, &acts);
		cr_assert(acts.n == 1 && !sp_var_bool(&acts, "exceeded"),
			  "\"ratelimit\" is not a rate-limit message with prefix rl: %s",
			  sp_hex(&sp_fr));
	}
	for (int hit = 1; hit <= 3; hit++) {
		struct sp_msg r = { .msg = "rl", .key = key, .ns = "api", .limit = 2 };

		sp_notify1(fd, &r, &acts);
		sp_expect_no_error(&acts);
		cr_assert(sp_var_int(&acts, "window") == 10, "the single window of api");
		cr_assert(sp_var_bool(&acts, "exceeded") == (hit == 3), "hit %d", hit);
	}
	{
		struct sp_msg r = { .msg = "rl", .key = key, .ns = "api", .has_cost = true, .cost = 0 };

		sp_notify1(fd, &r, &acts);
		cr_assert(sp_var_int(&acts, "rate") == 2, "count_denied false counted a denied hit");
	}
	{
		struct sp_msg r = { .msg = "rl", .key = key, .ns = "api", .window = 60 };

		sp_notify1(fd, &r, &acts);
		sp_expect_error(&acts, "window 60 in namespace api");
	}
	{
		struct sp_msg r = { .msg = "rl", .key = key };

		sp_notify1(fd, &r, &acts);
		sp_expect_error(&acts, "no window, three windows in default");
	}
	close(fd);
}

/* Several limits, one decision (issue 22): two messages per NOTIFY, a
 * per-IP limit of 100 and a per-key limit of 5, count_denied false: the
 * NOTIFYs the per-key limit denies count nothing per IP either (8
 * NOTIFYs: 5 per IP, not 8). And a message naming no window in a
 * namespace with a limit per window is checked against each: a 1 s
 * limit of 3 and a 60 s limit of 5. */
Test(config, several_limits_one_decision)
{
	static const char *const args[] = { "-w", "1", NULL };
	static const char json[] =
		"{ \"namespaces\": ["
		"  { \"name\": \"ip\", \"window_sizes\": [60], \"count_denied\": false },"
		"  { \"name\": \"apikey\", \"window_sizes\": [60], \"count_denied\": false },"
		"  { \"name\": \"both\", \"window_sizes\": [1, 60], \"window_type\": \"fixed\","
		"    \"limit\": {\"1\": 3, \"60\": 5}, \"count_denied\": false } ] }";
	static struct rawspop_actions acts;
	char ip[64], key[64];
	int fd, admitted = 0;

	test_agent_start(json, args);
	fd = sp_agent_conn();
	sp_key(ip, sizeof(ip), "ip");
	sp_key(key, sizeof(key), "key");
	struct sp_msg m[2] = {
		{ .msg = "ratelimit-ip", .key = ip, .ns = "ip", .window = 60, .limit = 100 },
		{ .msg = "ratelimit-key", .key = key, .ns = "apikey", .window = 60, .limit = 5 },
	};
	for (int i = 1; i <= 8; i++) {
		sp_notify_n(fd, m, 2, &acts);
		sp_expect_no_error(&acts);
		cr_assert(sp_var_bool(&acts, "exceeded") == (i > 5), "NOTIFY %d: %s", i, sp_hex(&sp_fr));
		cr_assert(!sp_var_bool(&acts, "exceeded_ip"), "the per-IP limit itself is not hit");
		cr_assert(sp_var_bool(&acts, "exceeded_key") == (i > 5));
	}
	{
		struct sp_msg r = { .key = ip, .ns = "ip", .window = 60, .has_cost = true, .cost = 0 };

		sp_notify1(fd, &r, &acts);
		cr_assert(sp_var_int(&acts, "rate") == 5, "per-IP count %lld after 8 NOTIFYs, 3 denied "
			  "by the per-key limit", (long long)sp_var_int(&acts, "rate"));
	}
	/* No window named: both limits of "both" decide. Its fixed windows
	 * restart at a second's and a minute's end: the 10 hits go at the
	 * start of a second with 5 s left in the minute (a second's end among
	 * them let 2 more in, and the minute's limit decide the 10th). */
	sp_key(key, sizeof(key), "both");
	test_window_room(60, 5000);
	test_window_room(1, 900);
	for (int i = 1; i <= 10; i++) {
		struct sp_msg r = { .key = key, .ns = "both" };

		sp_notify1(fd, &r, &acts);
		sp_expect_no_error(&acts);
		admitted += !sp_var_bool(&acts, "exceeded");
		if (i == 10) {
			cr_assert(sp_var_int(&acts, "limit") == 3, "the 1 s limit decided");
			cr_assert(sp_var_int(&acts, "window") == 1);
		}
	}
	cr_assert(admitted == 3, "%d admitted of 10 in one second (3 per second, 5 a minute)",
		  admitted);
	close(fd);
}

/* Delay instead of deny (issue 22): a limit of 5 per sliding second,
 * delay_max_ms 3000, 10 hits at once: 5 admitted at once, the 5 others
 * held and released one by one, in arrival order, as the sliding rate
 * makes room (within about 2 s), all admitted, each saying how long it
 * waited; an 11th that cannot fit within 3 s is denied at once. */
Test(config, delay_instead_of_deny, .timeout = 60)
{
	static const char *const args[] = { "-w", "1", NULL };
	static const char json[] =
		"{ \"namespaces\": ["
		"  { \"name\": \"slow\", \"window_sizes\": [1], \"limit\": 5,"
		"    \"delay_max_ms\": 3000, \"count_denied\": false } ] }";
	static struct rawspop_actions acts;
	int64_t delayed[10];
	int admitted = 0, at_once = 0;
	char key[64];
	int fd;

	test_agent_start(json, args);
	fd = sp_agent_conn();
	sp_key(key, sizeof(key), "delay");
	int64_t t0 = test_now_ms();
	rawspop_buf_reset(&sp_wb);
	for (int i = 0; i < 10; i++) {
		struct sp_msg r = { .key = key, .ns = "slow" };
		sp_put_notify(100 + (uint64_t)i, 1, &r, 1);
	}
	sp_send(fd);
	for (int n = 0; n < 10; n++) {
		sp_read(fd, &sp_fr, 5000);
		cr_assert(sp_fr.type == RAWSPOP_ACK, "ACK %d: %s", n, sp_hex(&sp_fr));
		int i = (int)sp_fr.stream_id - 100;
		cr_assert(i >= 0 && i < 10);
		cr_assert(rawspop_decode_actions(&sp_fr, &acts, sp_err, sizeof(sp_err)) == 0, "%s",
			  sp_err);
		sp_expect_no_error(&acts);
		admitted += !sp_var_bool(&acts, "exceeded");
		const struct rawspop_action *v = rawspop_var_find(&acts, "delayed_ms");
		delayed[i] = v ? sp_var_int(&acts, "delayed_ms") : 0;
		at_once += delayed[i] == 0;
	}
	int64_t took = test_now_ms() - t0;
	cr_log_info("10 hits, limit 5/s, delay_max_ms 3000: %d admitted, %d at once, the last "
		    "after %lld ms (delayed_ms: %lld %lld %lld %lld %lld)", admitted, at_once,
		    (long long)took, (long long)delayed[5], (long long)delayed[6],
		    (long long)delayed[7], (long long)delayed[8], (long long)delayed[9]);
	cr_assert_eq(admitted, 10);
	cr_assert_eq(at_once, 5);
	for (int i = 5; i < 10; i++) {
		cr_assert_gt(delayed[i], 0);
		cr_assert_leq(delayed[i], 3000);
		if (i > 5)
			cr_assert_geq(delayed[i], delayed[i - 1], "released in arrival order");
	}
	/* The window is full again: a hit that cannot fit within 3 s is
	 * denied at once, not held. */
	{
		struct sp_msg r = { .key = key, .ns = "slow" };
		rawspop_buf_reset(&sp_wb);
		for (int i = 0; i < 30; i++)
			sp_put_notify(300 + (uint64_t)i, 1, &r, 1);
		sp_send(fd);
		int denied = 0;
		for (int n = 0; n < 30; n++) {
			sp_read(fd, &sp_fr, 5000);
			cr_assert(rawspop_decode_actions(&sp_fr, &acts, sp_err, sizeof(sp_err)) == 0);
			denied += sp_var_bool(&acts, "exceeded");
		}
		cr_assert_gt(denied, 0, "30 more: some cannot wait 3 s");
	}
	close(fd);
}

/* ---- no answer waits behind another's (issue 28) ---- */

/* Appends to sp_wb a NOTIFY of stream 7 for key "victim" in namespace
 * "other", sends sp_wb, and reads ACKs until the probe's: how many came
 * before it, and how many of those were held (delayed_ms > 0, or the
 * stream-id at least held_from). The probe's answer is checked: admitted,
 * no error. Returns the ms it took. */
static int64_t probe(int fd, uint64_t held_from, int *before, int *held)
{
	static struct rawspop_actions acts;
	struct sp_msg victim = { .key = "victim", .ns = "other" };

	sp_put_notify(7, 1, &victim, 1);
	int64_t t0 = test_now_ms();
	sp_send(fd);
	*before = *held = 0;
	for (;;) {
		sp_read(fd, &sp_fr, 10000);
		cr_assert(sp_fr.type == RAWSPOP_ACK, "%s", sp_hex(&sp_fr));
		cr_assert(rawspop_decode_actions(&sp_fr, &acts, sp_err, sizeof(sp_err)) == 0, "%s",
			  sp_err);
		if (sp_fr.stream_id == 7)
			break;
		const struct rawspop_action *v = rawspop_var_find(&acts, "delayed_ms");
		*held += (v && sp_var_int(&acts, "delayed_ms") > 0) || sp_fr.stream_id >= held_from;
		(*before)++;
	}
	int64_t took = test_now_ms() - t0;
	sp_expect_no_error(&acts);
	cr_assert_not(sp_var_bool(&acts, "exceeded"));
	return took;
}

/* 80 hits held on as many keys (delay_max_ms), over one connection,
 * then a NOTIFY for another namespace: it is answered before any held
 * one (which wait 2 s or more), not after them (reads once paused at 64
 * held NOTIFYs, so the 65th and everything behind it waited for room in
 * a window). */
Test(coupling, held_hits_hold_up_no_one, .fini = test_agent_stop, .timeout = 120)
{
	static const char *const args[] = { "-w", "1", NULL };
	/* A 4 s window, 2 per key: a third hit at offset f of the window
	 * waits until the next window's middle, 6 - f s: 2 to 6 s. */
	static const char json[] =
		"{ \"namespaces\": ["
		"  { \"name\": \"held\", \"window_sizes\": [4], \"limit\": 2,"
		"    \"delay_max_ms\": 6000, \"count_denied\": false },"
		"  { \"name\": \"other\", \"window_sizes\": [60], \"limit\": 100 } ] }";
	static struct rawspop_actions acts;
	char keys[80][64];
	int before, held;

	test_agent_start(json, args);
	int fd = sp_agent_conn();
	rawspop_buf_reset(&sp_wb);
	for (int k = 0; k < 80; k++) {
		sp_key(keys[k], sizeof(keys[k]), "held");
		struct sp_msg r = { .key = keys[k], .ns = "held" };
		sp_put_notify(1000 + (uint64_t)k, 1, &r, 1);
		sp_put_notify(2000 + (uint64_t)k, 1, &r, 1);
	}
	for (int k = 0; k < 80; k++) {
		struct sp_msg r = { .key = keys[k], .ns = "held" };
		sp_put_notify(3000 + (uint64_t)k, 1, &r, 1);
	}
	int64_t took = probe(fd, 3000, &before, &held);
	cr_log_info("80 held on one connection: the other namespace's NOTIFY answered after "
		    "%lld ms, behind %d answers, %d of them held", (long long)took, before, held);
	cr_assert_eq(held, 0, "the probe waited for %d held hits", held);
	cr_assert_eq(before, 160, "every hit under its limit was answered first");
	/* The held ones come later, each admitted. */
	for (int n = 0; n < 80; n++) {
		sp_read(fd, &sp_fr, 10000);
		cr_assert(sp_fr.stream_id >= 3000 && sp_fr.stream_id < 3080, "%s", sp_hex(&sp_fr));
		cr_assert(rawspop_decode_actions(&sp_fr, &acts, sp_err, sizeof(sp_err)) == 0);
		cr_assert_not(sp_var_bool(&acts, "exceeded"), "held, then admitted");
		cr_assert_gt(sp_var_int(&acts, "delayed_ms"), 0);
	}
	close(fd);
}

/* sync_rate 0 with its store paused (SIGSTOP: the agent's connection stays
 * open, nothing answers): 100 NOTIFYs wait for the store's timeout over one
 * connection, then a NOTIFY for a local namespace: answered before them
 * (reads once paused at 64 waiting). */
Test(coupling, paused_store_holds_up_no_one, .fini = test_agent_stop, .timeout = 120)
{
	static const char *const args[] = { "-w", "1", NULL };
	static struct redis_server redis;
	char json[512], key[64];
	int before, held;

	if (!redis_server_available())
		cr_skip_test("no redis-server");
	cr_assert(redis_server_start(&redis, 10000) == 0, "%s", redis.err);
	snprintf(json, sizeof(json),
		 "{ \"namespaces\": ["
		 "  { \"name\": \"sync0\", \"window_sizes\": [60], \"sync_rate\": 0,"
		 "    \"strategy\": \"redis\", \"strategy_opts\": {\"host\": \"127.0.0.1\","
		 "    \"port\": %d, \"timeout_ms\": 3000} },"
		 "  { \"name\": \"other\", \"window_sizes\": [60], \"limit\": 100 } ] }",
		 redis.port);
	test_agent_start(json, args);
	int fd = sp_agent_conn();
	sp_key(key, sizeof(key), "sync0");
	struct sp_msg r = { .key = key, .ns = "sync0" };
	/* Once through the store: connected. */
	rawspop_buf_reset(&sp_wb);
	sp_put_notify(1, 1, &r, 1);
	sp_send(fd);
	sp_read(fd, &sp_fr, 10000);
	cr_assert(redis_server_pause(&redis) == 0, "SIGSTOP redis-server");
	rawspop_buf_reset(&sp_wb);
	for (int i = 0; i < 100; i++)
		sp_put_notify(1000 + (uint64_t)i, 1, &r, 1);
	int64_t took = probe(fd, 1000, &before, &held);
	cr_log_info("100 waiting for a paused store on one connection: a local NOTIFY answered "
		    "after %lld ms, behind %d answers", (long long)took, before);
	cr_assert_eq(before, 0, "the probe waited for %d answers of the store", before);
	/* They are answered once the store's timeout passes (locally). */
	for (int n = 0; n < 100; n++) {
		sp_read(fd, &sp_fr, 15000);
		cr_assert(sp_fr.stream_id >= 1000 && sp_fr.stream_id < 1100, "%s", sp_hex(&sp_fr));
	}
	cr_assert(redis_server_resume(&redis) == 0);
	close(fd);
	test_agent_stop();
	redis_server_stop(&redis, 5000);
}

/* The agent's own max_frame_size below HAProxy's. */
Test(config, max_frame_size)
{
	static const char *const args[] = { "-w", "1", NULL };
	static const char json[] = "{ \"max_frame_size\": 512 }";
	struct rawspop_hello_opts o = rawspop_hello_defaults();
	uint8_t b[16] = { 0, 0, 2, 1, 3, 0, 0, 0, 1, 1, 1 };   /* length 513 */
	uint32_t mfs;
	int fd;

	test_agent_start(json, args);
	fd = sp_connect(test_agent.port);
	mfs = sp_hello_on(fd, &o);
	cr_assert(mfs == 512, "negotiated %u, want 512", mfs);
	sp_note_workers();
	cr_assert(rawspop_send(fd, b, 11) == 0);
	sp_expect_disconnect(fd, 3, SP_IO_MS, "length 513 over max_frame_size 512");
	close(fd);
	sp_still_serving("a frame over max_frame_size");
}

/* A full table: new keys get error, never exceeded, and the agent lives. */
/* ---------------------------------------------------------------- flood */

/* A full table never turns limiting off (docs/CONFIG.md, "max_keys"):
 * "api" and "login" share max_keys evenly after "strict" (deny) and "lax"
 * (allow) took 100 each. Their window (flood_win) has five minutes left
 * when the agent starts: a flood lasts seconds to a minute, and a count
 * read after it (the attacker's 7) must not come out weighted down by a
 * window's end. */
static const char flood_json[] =
	"{ \"max_keys\": 20000, \"namespaces\": ["
	"  { \"name\": \"api\", \"window_sizes\": [%u] },"
	"  { \"name\": \"login\", \"window_sizes\": [%u] },"
	"  { \"name\": \"strict\", \"window_sizes\": [%u], \"max_keys\": 100,"
	"    \"on_table_full\": \"deny\" },"
	"  { \"name\": \"lax\", \"window_sizes\": [%u], \"max_keys\": 100,"
	"    \"on_table_full\": \"allow\" } ] }";
static uint32_t flood_win;

static void flood_start(void)
{
	static const char *const args[] = { "-w", "1", NULL };
	char json[sizeof(flood_json) + 64];

	flood_win = test_window_pick(3600, 300);
	snprintf(json, sizeof(json), flood_json, flood_win, flood_win, flood_win, flood_win);
	test_agent_start(json, args);
}

#define FLOOD_KEYS  60000
#define FLOOD_BATCH 200       /* NOTIFYs per write */

/* Sends n distinct keys "<tag>-<i>" of namespace ns, limit 5, pipelined
 * in batches; every ACK must be counted (no error) and allowed. */
static void flood(int fd, const char *ns, const char *tag, int n)
{
	static struct rawspop_actions acts;
	char key[64];

	for (int i = 0; i < n; i += FLOOD_BATCH) {
		int m = n - i < FLOOD_BATCH ? n - i : FLOOD_BATCH;
		uint64_t sid = sp_next_sid, fid = sp_next_fid;

		rawspop_buf_reset(&sp_wb);
		for (int j = 0; j < m; j++) {
			snprintf(key, sizeof(key), "%s-%d", tag, i + j);
			struct sp_msg r = { .key = key, .ns = ns, .window = flood_win, .limit = 5 };
			sp_put_notify(sid + 2 * (uint64_t)j, fid + (uint64_t)j, &r, 1);
		}
		sp_send(fd);
		for (int j = 0; j < m; j++) {
			sp_read_ack(fd, sid + 2 * (uint64_t)j, fid + (uint64_t)j, &acts);
			sp_expect_no_error(&acts);
			cr_assert(!sp_var_bool(&acts, "exceeded"), "%s-%d denied", tag, i + j);
			cr_assert_eq(sp_var_int(&acts, "rate"), 1, "%s-%d", tag, i + j);
		}
		sp_next_sid += 2 * (uint64_t)m;
		sp_next_fid += (uint64_t)m;
	}
}

/* n hits on key of ns at limit 5: how many were allowed; every ACK must be
 * counted (no error) and show the exact rate. */
static int allowed_of(int fd, const char *ns, const char *key, int n)
{
	static struct rawspop_actions acts;
	int allowed = 0;

	for (int i = 0; i < n; i++) {
		struct sp_msg r = { .key = key, .ns = ns, .window = flood_win, .limit = 5 };

		sp_notify1(fd, &r, &acts);
		sp_expect_no_error(&acts);
		cr_assert_eq(sp_var_int(&acts, "rate"), i + 1, "%s/%s hit %d", ns, key, i + 1);
		allowed += !sp_var_bool(&acts, "exceeded");
	}
	return allowed;
}

/* The attack: 60,000 distinct keys in "api" (max_keys 20,000).
 * A key denied before the flood stays denied, new keys in api and in
 * login are counted and limited exactly. */
Test(flood, key_flood_leaves_every_namespace_limiting, .fini = test_agent_stop, .timeout = 300)
{
	int64_t t0, t1;
	int fd;

	flood_start();
	fd = sp_agent_conn();
	cr_assert_eq(allowed_of(fd, "api", "attacker", 6), 5);
	t0 = test_now_ms();
	flood(fd, "api", "flood", FLOOD_KEYS);
	t1 = test_now_ms();

	/* still denied (its count was kept: protected), rate 7 */
	static struct rawspop_actions acts;
	struct sp_msg r = { .key = "attacker", .ns = "api", .window = flood_win, .limit = 5 };
	sp_notify1(fd, &r, &acts);
	sp_expect_no_error(&acts);
	cr_assert(sp_var_bool(&acts, "exceeded"));
	cr_assert_eq(sp_var_int(&acts, "rate"), 7);
	cr_assert_eq(allowed_of(fd, "api", "newcomer", 8), 5);
	cr_assert_eq(allowed_of(fd, "login", "alice", 8), 5);

	/* evictions are logged, at most once a second */
	double secs = (double)(t1 - t0) / 1000.0;
	int lines = (int)agentproc_log_lines(&test_agent, "evicting the least used", NULL);
	cr_assert_geq(lines, 1, "no eviction logged:\n%s", test_agent_log_tail());
	cr_assert_leq(lines, (int)secs + 2, "%d eviction lines in %.1f s", lines, secs);
	close(fd);
}

/* Beyond its share, a namespace with on_table_full "deny" denies new keys
 * (exceeded and error), one with "allow" lets them pass (error only);
 * both keep counting the keys they hold. */
Test(flood, deny_and_allow_when_no_room, .fini = test_agent_stop, .timeout = 300)
{
	static struct rawspop_actions acts;
	const char *const modes[] = { "strict", "lax" };
	char key[64];
	int fd;

	flood_start();
	fd = sp_agent_conn();
	flood(fd, "api", "fill", 25000);	/* the table is at max_keys */
	for (int m = 0; m < 2; m++) {
		int counted = 0, refused = 0;

		for (int i = 0; i < 300; i++) {
			snprintf(key, sizeof(key), "%s-%d", modes[m], i);
			struct sp_msg r = { .key = key, .ns = modes[m], .window = flood_win, .limit = 5 };
			sp_notify1(fd, &r, &acts);
			if (!sp_var(&acts, "error")) {
				cr_assert_eq(refused, 0, "%s: counted after a refusal", key);
				cr_assert_eq(sp_var_int(&acts, "rate"), 1);
				counted++;
				continue;
			}
			refused++;
			cr_assert(strstr(sp_var(&acts, "error")->value.s, "full") != NULL);
			const struct rawspop_action *x = sp_var(&acts, "exceeded");
			if (m == 0) {
				cr_assert(x && x->value.b, "%s: deny mode, not exceeded", key);
				cr_assert_geq(sp_var_int(&acts, "retry_after"), 1);
			} else {
				cr_assert(!x || !x->value.b, "%s: allow mode, exceeded", key);
			}
		}
		/* exactly its share, taken back from api's borrowed room */
		cr_assert_eq(counted, 100, "%s: %d counted", modes[m], counted);
		cr_assert_eq(refused, 200);
		snprintf(key, sizeof(key), "%s-0", modes[m]);
		struct sp_msg r = { .key = key, .ns = modes[m], .window = flood_win, .limit = 5 };
		sp_notify1(fd, &r, &acts);
		sp_expect_no_error(&acts);
		cr_assert_eq(sp_var_int(&acts, "rate"), 2);
	}
	cr_assert_geq(agentproc_log_lines(&test_agent, "no room for a new key", NULL), 1, "%s", test_agent_log_tail());
	close(fd);
}
