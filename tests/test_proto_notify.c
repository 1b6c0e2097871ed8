/*
 * test_proto_notify.c - NOTIFY and its ACK, against the agent over TCP:
 * counting and exceeding, ids echoed, every key type, costs, arguments
 * good and bad, pipelining (20 at once, 5,000 under backpressure), two
 * and many messages, the variables (suffixes, `vars`), long keys and keys
 * holding NUL bytes, an ACK within a small negotiated frame.
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

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tests/lib/agenttest.h"
#include "tests/lib/clock.h"
#include "tests/lib/rawspop.h"
#include "tests/lib/spoptest.h"

/* ---------------------------------------------------------------- NOTIFY */

TestSuite(notify, .init = test_agent_start_plain, .fini = test_agent_stop, .timeout = 60);

Test(notify, count_then_exceed)
{
	static struct rawspop_actions acts;
	char key[64];
	int fd = sp_agent_conn();
	struct sp_msg r = { .key = key, .window = 60, .limit = 3 };

	sp_key(key, sizeof(key), "exceed");
	for (int hit = 1; hit <= 3; hit++) {
		sp_notify1(fd, &r, &acts);
		sp_expect_no_error(&acts);
		cr_assert(sp_var_int(&acts, "rate") == hit, "hit %d: rate %lld", hit,
			  (long long)sp_var_int(&acts, "rate"));
		cr_assert(sp_var_int(&acts, "remaining") == 3 - hit, "hit %d: remaining %lld", hit,
			  (long long)sp_var_int(&acts, "remaining"));
		cr_assert(!sp_var_bool(&acts, "exceeded"), "hit %d: exceeded", hit);
		cr_assert(sp_var_int(&acts, "limit") == 3);
		cr_assert(sp_var_int(&acts, "window") == 60);
		cr_assert(sp_var_int(&acts, "reset") >= 1 && sp_var_int(&acts, "reset") <= 60,
			  "reset %lld", (long long)sp_var_int(&acts, "reset"));
		cr_assert(!sp_var(&acts, "retry_after"), "retry_after set while not exceeded");
	}
	sp_notify1(fd, &r, &acts);
	cr_assert(sp_var_bool(&acts, "exceeded"), "4th hit on limit 3 not exceeded: %s",
		  sp_hex(&sp_fr));
	cr_assert(sp_var_int(&acts, "retry_after") >= 1);
	cr_assert(sp_var_int(&acts, "remaining") == 0);
	cr_assert(sp_var_int(&acts, "rate") == 4, "rate %lld after 4 hits (count_denied default)",
		  (long long)sp_var_int(&acts, "rate"));
	close(fd);
}

/* Ids are opaque 64-bit values: the largest and a 10-byte varint too. */
Test(notify, ids_echoed)
{
	static struct rawspop_actions acts;
	static const uint64_t ids[][2] = {
		{ (1ull << 40) + 5, 300 }, { 1, 1 }, { 239, 240 }, { 2287, 2288 },
		{ UINT64_MAX, UINT64_MAX - 1 }, { (1ull << 63) + 17, 4328786160ull },
	};
	char key[64];
	int fd = sp_agent_conn();

	sp_key(key, sizeof(key), "ids");
	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		struct sp_msg r = { .key = key, .window = 60 };

		rawspop_buf_reset(&sp_wb);
		sp_put_notify(ids[i][0], ids[i][1], &r, 1);
		sp_send(fd);
		sp_read_ack(fd, ids[i][0], ids[i][1], &acts);
	}
	close(fd);
}

static void notify_typed_key(int fd, void (*put)(const void *), const void *arg,
			     struct rawspop_actions *acts)
{
	uint64_t sid = sp_next_sid, fid = sp_next_fid;
	size_t start;

	sp_next_sid += 2;
	sp_next_fid++;
	rawspop_buf_reset(&sp_wb);
	start = rawspop_notify_begin(&sp_wb, sid, fid);
	rawspop_msg(&sp_wb, "ratelimit", 2);
	rawspop_put_name(&sp_wb, "key");
	put(arg);
	rawspop_arg_int(&sp_wb, "window", 60);
	rawspop_frame_end(&sp_wb, start);
	sp_send(fd);
	sp_read_ack(fd, sid, fid, acts);
}

static void put_ipv4(const void *a) { rawspop_put_ipv4(&sp_wb, a); }
static void put_ipv6(const void *a) { rawspop_put_ipv6(&sp_wb, a); }
static void put_str(const void *a) { rawspop_put_string(&sp_wb, a); }
static void put_int(const void *a) { rawspop_put_int(&sp_wb, RAWSPOP_T_INT64, *(const int64_t *)a); }
static void put_bin2(const void *a) { rawspop_put_binary(&sp_wb, a, 2); }
static void put_null(const void *a) { (void)a; rawspop_put_null(&sp_wb); }

/* Every key type is accepted, and one key value is one key whatever its
 * wire type: 1.2.3.4 (IPV4) = ::ffff:1.2.3.4 (IPV6) = "1.2.3.4" (STRING);
 * binary de ad = "dead"; int 42 = "42". */
Test(notify, key_types)
{
	static struct rawspop_actions acts;
	uint8_t v4[4], v6[16], mapped[16] = { [10] = 0xff, [11] = 0xff };
	uint8_t bin[2];
	char v4s[32], bins[8], ints[32];
	int64_t iv;
	unsigned seed = (unsigned)getpid() ^ (unsigned)time(NULL);
	int fd = sp_agent_conn();

	srand(seed);
	v4[0] = 10;
	v4[1] = (uint8_t)rand();
	v4[2] = (uint8_t)rand();
	v4[3] = (uint8_t)(rand() | 1);
	memcpy(mapped + 12, v4, 4);
	snprintf(v4s, sizeof(v4s), "%u.%u.%u.%u", v4[0], v4[1], v4[2], v4[3]);
	for (int i = 0; i < 16; i++)
		v6[i] = (uint8_t)rand();
	v6[0] = 0x20;
	v6[1] = 0x01;
	bin[0] = (uint8_t)(rand() | 0xa0);
	bin[1] = (uint8_t)(rand() | 0xa0);
	snprintf(bins, sizeof(bins), "%02x%02x", bin[0], bin[1]);
	iv = 1000000 + rand();
	snprintf(ints, sizeof(ints), "%lld", (long long)iv);

	notify_typed_key(fd, put_ipv4, v4, &acts);
	sp_expect_no_error(&acts);
	cr_assert(sp_var_int(&acts, "rate") == 1, "IPV4 key, first hit");
	notify_typed_key(fd, put_ipv6, mapped, &acts);
	sp_expect_no_error(&acts);
	cr_assert(sp_var_int(&acts, "rate") == 2, "IPv4-mapped IPv6 is not the same key as %s", v4s);
	notify_typed_key(fd, put_str, v4s, &acts);
	sp_expect_no_error(&acts);
	cr_assert(sp_var_int(&acts, "rate") == 3, "string \"%s\" is not the same key as IPV4", v4s);

	notify_typed_key(fd, put_ipv6, v6, &acts);
	sp_expect_no_error(&acts);
	cr_assert(sp_var_int(&acts, "rate") == 1, "IPV6 key");

	notify_typed_key(fd, put_bin2, bin, &acts);
	sp_expect_no_error(&acts);
	cr_assert(sp_var_int(&acts, "rate") == 1, "BINARY key");
	notify_typed_key(fd, put_str, bins, &acts);
	sp_expect_no_error(&acts);
	cr_assert(sp_var_int(&acts, "rate") == 2, "string \"%s\" is not the same key as binary", bins);

	notify_typed_key(fd, put_int, &iv, &acts);
	sp_expect_no_error(&acts);
	cr_assert(sp_var_int(&acts, "rate") == 1, "INT64 key");
	notify_typed_key(fd, put_str, ints, &acts);
	sp_expect_no_error(&acts);
	cr_assert(sp_var_int(&acts, "rate") == 2, "string \"%s\" is not the same key as int", ints);

	notify_typed_key(fd, put_null, NULL, &acts);
	sp_expect_error(&acts, "NULL key");
	close(fd);
}

Test(notify, cost_half)
{
	static struct rawspop_actions acts;
	char key[64];
	int fd = sp_agent_conn();
	struct sp_msg r = { .key = key, .window = 60, .cost_str = "0.5" };

	sp_key(key, sizeof(key), "half");
	sp_notify1(fd, &r, &acts);
	sp_expect_no_error(&acts);
	cr_assert(sp_var_int(&acts, "rate") == 1, "one hit of 0.5: rate %lld (ceiling)",
		  (long long)sp_var_int(&acts, "rate"));
	sp_notify1(fd, &r, &acts);
	sp_expect_no_error(&acts);
	cr_assert(sp_var_int(&acts, "rate") == 1, "two hits of 0.5: rate %lld",
		  (long long)sp_var_int(&acts, "rate"));
	sp_notify1(fd, &r, &acts);
	cr_assert(sp_var_int(&acts, "rate") == 2, "three hits of 0.5: rate %lld",
		  (long long)sp_var_int(&acts, "rate"));
	close(fd);
}

Test(notify, cost_zero_reads)
{
	static struct rawspop_actions acts;
	char key[64];
	int fd = sp_agent_conn();
	struct sp_msg hit = { .key = key, .window = 60, .limit = 5 };
	struct sp_msg peek = { .key = key, .window = 60, .limit = 5, .has_cost = true, .cost = 0 };
	struct sp_msg peek_s = { .key = key, .window = 60, .limit = 5, .cost_str = "0" };

	sp_key(key, sizeof(key), "zero");
	cr_assert(sp_read_rate(fd, key, 60) == 0, "fresh key");
	sp_notify1(fd, &hit, &acts);
	sp_notify1(fd, &hit, &acts);
	for (int i = 0; i < 3; i++) {
		sp_notify1(fd, i == 2 ? &peek_s : &peek, &acts);
		sp_expect_no_error(&acts);
		cr_assert(sp_var_int(&acts, "rate") == 2, "cost 0 read %d: rate %lld", i,
			  (long long)sp_var_int(&acts, "rate"));
		cr_assert(sp_var_int(&acts, "remaining") == 3);
		cr_assert(!sp_var_bool(&acts, "exceeded"));
	}
	sp_notify1(fd, &hit, &acts);
	cr_assert(sp_var_int(&acts, "rate") == 3);
	close(fd);
}

Test(notify, string_window_and_limit)
{
	static struct rawspop_actions acts;
	char key[64];
	int fd = sp_agent_conn();
	uint64_t sid = sp_next_sid++, fid = sp_next_fid++;
	size_t start;

	sp_key(key, sizeof(key), "strargs");
	rawspop_buf_reset(&sp_wb);
	start = rawspop_notify_begin(&sp_wb, sid, fid);
	rawspop_msg(&sp_wb, "ratelimit", 4);
	rawspop_arg_str(&sp_wb, "window", "60");
	rawspop_arg_str(&sp_wb, "limit", "1");
	rawspop_arg_str(&sp_wb, "unknown-arg", "ignored");
	rawspop_arg_str(&sp_wb, "key", key);
	rawspop_frame_end(&sp_wb, start);
	sp_send(fd);
	sp_read_ack(fd, sid, fid, &acts);
	sp_expect_no_error(&acts);
	cr_assert(sp_var_int(&acts, "window") == 60);
	cr_assert(sp_var_int(&acts, "limit") == 1);
	cr_assert(sp_var_int(&acts, "rate") == 1);
	cr_assert(!sp_var_bool(&acts, "exceeded"));
	close(fd);
}

Test(notify, bad_arguments)
{
	static struct rawspop_actions acts;
	char key[64];
	int fd = sp_agent_conn();

	sp_key(key, sizeof(key), "bad");
	{
		struct sp_msg r = { .key = key, .window = 60, .limit = 1, .ns = "no-such-namespace" };

		sp_notify1(fd, &r, &acts);
		sp_expect_error(&acts, "unknown namespace");
	}
	{
		struct sp_msg r = { .window = 60, .limit = 1 };

		sp_notify1(fd, &r, &acts);
		sp_expect_error(&acts, "missing key");
	}
	{
		struct sp_msg r = { .key = key, .window = 7, .limit = 1 };

		sp_notify1(fd, &r, &acts);
		sp_expect_error(&acts, "window 7");
	}
	{
		struct sp_msg r = { .key = key, .window = 60, .limit = 1, .has_cost = true, .cost = -1 };

		sp_notify1(fd, &r, &acts);
		sp_expect_error(&acts, "cost -1");
	}
	{
		struct sp_msg r = { .key = key, .window = 60, .limit = 1, .cost_str = "abc" };

		sp_notify1(fd, &r, &acts);
		sp_expect_error(&acts, "cost \"abc\"");
	}
	{
		struct sp_msg r = { .key = "", .window = 60, .limit = 1 };

		sp_notify1(fd, &r, &acts);
		cr_assert(sp_var(&acts, "error"), "an empty string key is accepted");
	}
	/* None of these counted. */
	cr_assert(sp_read_rate(fd, key, 60) == 0, "a message with an error was counted");
	close(fd);
}

/* 20 NOTIFYs in one write(); 20 ACKs with exactly those ids; the rates
 * they report are 1..20, each once. */
Test(notify, pipelining_20)
{
	static struct rawspop_actions acts;
	uint64_t sids[20], fids[20];
	bool got[20] = { false }, rate_seen[21] = { false };
	char key[64];
	int fd = sp_agent_conn();

	sp_key(key, sizeof(key), "pipe");
	rawspop_buf_reset(&sp_wb);
	for (int i = 0; i < 20; i++) {
		struct sp_msg r = { .key = key, .window = 60, .limit = 100 };

		sids[i] = 1000 + 2 * (uint64_t)i;
		fids[i] = 5000 + 7 * (uint64_t)i;
		sp_put_notify(sids[i], fids[i], &r, 1);
	}
	sp_send(fd);
	for (int n = 0; n < 20; n++) {
		int idx = -1;
		int64_t rate;

		sp_read(fd, &sp_fr, SP_IO_MS);
		cr_assert(sp_fr.type == RAWSPOP_ACK, "ACK %d: type %u: %s", n, sp_fr.type, sp_hex(&sp_fr));
		for (int i = 0; i < 20; i++)
			if (sids[i] == sp_fr.stream_id && fids[i] == sp_fr.frame_id)
				idx = i;
		cr_assert(idx >= 0, "ACK with unknown ids %llu/%llu",
			  (unsigned long long)sp_fr.stream_id, (unsigned long long)sp_fr.frame_id);
		cr_assert(!got[idx], "two ACKs for frame %d", idx);
		got[idx] = true;
		cr_assert(rawspop_decode_actions(&sp_fr, &acts, sp_err, sizeof(sp_err)) == 0, "%s",
			  sp_err);
		sp_check_vars(&acts, &sp_fr);
		rate = sp_var_int(&acts, "rate");
		cr_assert(rate >= 1 && rate <= 20 && !rate_seen[rate], "rate %lld twice or out of range",
			  (long long)rate);
		rate_seen[rate] = true;
	}
	sp_expect_quiet(fd, 200);
	close(fd);
}

Test(notify, empty_and_unknown_messages)
{
	static struct rawspop_actions acts;
	char key[64];
	int fd = sp_agent_conn();

	sp_key(key, sizeof(key), "unknown");
	/* "An ACK for a NOTIFY with no rate-limit message sets only
	 * exceeded = false." */
	sp_notify_n(fd, NULL, 0, &acts);
	cr_assert(acts.n == 1 && !sp_var_bool(&acts, "exceeded"),
		  "empty NOTIFY: want only exceeded=false: %s", sp_hex(&sp_fr));
	{
		struct sp_msg r = { .msg = "other-msg", .key = key, .window = 60, .limit = 1 };

		sp_notify1(fd, &r, &acts);
		cr_assert(acts.n == 1 && !sp_var_bool(&acts, "exceeded"),
			  "unknown message only: want only exceeded=false: %s", sp_hex(&sp_fr));
	}
	{
		/* A prefix-looking name that is not the prefix. */
		struct sp_msg r = { .msg = "ratelimi", .key = key, .window = 60, .limit = 1 };

		sp_notify1(fd, &r, &acts);
	}
	cr_assert(sp_read_rate(fd, key, 60) == 0, "an unknown message was counted");
	{
		struct sp_msg m[3] = {
			{ .msg = "other-msg", .key = key, .window = 60 },
			{ .msg = "ratelimit", .key = key, .window = 60 },
			{ .msg = "zzz", .key = key, .window = 60 },
		};

		sp_notify_n(fd, m, 3, &acts);
		sp_expect_no_error(&acts);
		cr_assert(sp_var_int(&acts, "rate") == 1);
	}
	cr_assert(sp_read_rate(fd, key, 60) == 1, "unknown messages beside a known one counted");
	close(fd);
}

Test(notify, two_messages)
{
	static struct rawspop_actions acts;
	char key[64];
	int fd = sp_agent_conn();
	struct sp_msg m[2] = {
		{ .msg = "ratelimit-sec", .key = key, .window = 1, .limit = 100 },
		{ .msg = "ratelimit-min", .key = key, .window = 60, .limit = 2 },
	};

	sp_key(key, sizeof(key), "two");
	for (int hit = 1; hit <= 3; hit++) {
		sp_notify_n(fd, m, 2, &acts);
		sp_expect_no_error(&acts);
		cr_assert(sp_var_int(&acts, "rate_min") == hit);
		cr_assert(sp_var_int(&acts, "remaining_min") == (hit >= 2 ? 0 : 2 - hit));
		cr_assert(sp_var_int(&acts, "limit_sec") == 100);
		cr_assert(!sp_var_bool(&acts, "exceeded_sec"), "hit %d: exceeded_sec", hit);
		cr_assert(sp_var_int(&acts, "remaining") == sp_var_int(&acts, "remaining_min"),
			  "hit %d: remaining %lld, remaining_min %lld", hit,
			  (long long)sp_var_int(&acts, "remaining"),
			  (long long)sp_var_int(&acts, "remaining_min"));
	}
	cr_assert(sp_var_bool(&acts, "exceeded"), "3rd hit: exceeded false: %s", sp_hex(&sp_fr));
	cr_assert(sp_var_bool(&acts, "exceeded_min"));
	cr_assert(!sp_var_bool(&acts, "exceeded_sec"));
	cr_assert(sp_var_int(&acts, "remaining") == 0);
	cr_assert(sp_var_int(&acts, "limit") == 2, "limit from the most restrictive message");
	cr_assert(sp_var_int(&acts, "window") == 60);
	cr_assert(sp_var_int(&acts, "rate") == 3);
	cr_assert(sp_var_int(&acts, "retry_after") >= 1);
	cr_assert(sp_var_int(&acts, "retry_after") == sp_var_int(&acts, "retry_after_min"));
	cr_assert(sp_var_int(&acts, "reset_sec") == 1, "reset_sec %lld for a 1 s window",
		  (long long)sp_var_int(&acts, "reset_sec"));
	cr_assert(!sp_var(&acts, "retry_after_sec"), "retry_after_sec set, not exceeded");
	close(fd);
}

/* Suffixes: after the prefix and one separator, [^A-Za-z0-9_] -> '_',
 * at most 16 characters. */
Test(notify, variable_suffixes)
{
	static struct rawspop_actions acts;
	char key[64];
	int fd = sp_agent_conn();
	struct sp_msg m[3] = {
		{ .msg = "ratelimit_a.b-c", .key = key, .window = 60, .limit = 9 },
		{ .msg = "ratelimit.abcdefghijklmnopqrstuvwxyz", .key = key, .window = 3600,
		  .limit = 9 },
		{ .msg = "ratelimit-x", .key = key, .window = 1, .limit = 9 },
	};

	sp_key(key, sizeof(key), "suffix");
	sp_notify_n(fd, m, 3, &acts);
	sp_expect_no_error(&acts);
	cr_assert(sp_var_int(&acts, "rate_a_b_c") == 1, "rate_a_b_c: %s", sp_hex(&sp_fr));
	cr_assert(sp_var_int(&acts, "rate_abcdefghijklmnop") == 1, "rate_abcdefghijklmnop");
	cr_assert(sp_var_int(&acts, "window_x") == 1);
	cr_assert(!sp_var_bool(&acts, "exceeded_abcdefghijklmnop"));
	close(fd);
}

/* A lean answer: `vars` names the variables a message wants, plain
 * ("exceeded") or its own ("remaining_sec"); the plain ones are those any
 * message of the NOTIFY asks for (all for a message without `vars`); an
 * error is always said; an answer left with nothing says exceeded. */
Test(notify, lean_answer_vars)
{
	static struct rawspop_actions acts;
	char key[64];
	int fd = sp_agent_conn();

	sp_key(key, sizeof(key), "lean");
	{
		struct sp_msg r = { .msg = "ratelimit-ip", .key = key, .window = 60, .limit = 1,
				.vars = "exceeded,retry_after" };

		sp_notify1(fd, &r, &acts);
		cr_assert_eq(acts.n, 1, "one variable: %s", sp_hex(&sp_fr));
		cr_assert(sp_var(&acts, "exceeded") && !sp_var_bool(&acts, "exceeded"));
		sp_notify1(fd, &r, &acts);
		cr_assert_eq(acts.n, 2, "exceeded and retry_after: %s", sp_hex(&sp_fr));
		cr_assert(sp_var_bool(&acts, "exceeded"));
		cr_assert(sp_var_int(&acts, "retry_after") >= 1);
	}
	{
		/* Own variables by their full names; plain ones from either. */
		struct sp_msg m[2] = {
			{ .msg = "ratelimit-sec", .key = key, .window = 1, .limit = 100,
			  .vars = "exceeded remaining_sec" },
			{ .msg = "ratelimit-min", .key = key, .window = 60, .limit = 100,
			  .vars = "limit limit_min" },
		};

		sp_notify_n(fd, m, 2, &acts);
		cr_assert_eq(acts.n, 4, "exceeded limit remaining_sec limit_min: %s", sp_hex(&sp_fr));
		cr_assert(sp_var(&acts, "exceeded") && sp_var(&acts, "limit"));
		cr_assert(sp_var_int(&acts, "remaining_sec") == 99);
		cr_assert(sp_var_int(&acts, "limit_min") == 100);
		/* A message without vars: every variable, plain and its own. */
		m[1].vars = NULL;
		sp_notify_n(fd, m, 2, &acts);
		cr_assert(sp_var(&acts, "rate") && sp_var(&acts, "window") && sp_var(&acts, "rate_min"));
		cr_assert(sp_var(&acts, "remaining_sec") && !sp_var(&acts, "rate_sec"));
	}
	{
		/* Nothing this answer has: exceeded all the same. */
		struct sp_msg r = { .msg = "ratelimit-x", .key = key, .window = 60, .limit = 100,
				.vars = "" };

		sp_notify1(fd, &r, &acts);
		cr_assert_eq(acts.n, 1, "%s", sp_hex(&sp_fr));
		cr_assert(sp_var(&acts, "exceeded"));
	}
	{
		/* Errors are said whatever vars asks for. */
		struct sp_msg r = { .msg = "ratelimit-x", .key = key, .window = 7, .limit = 1,
				.vars = "exceeded" };

		sp_notify1(fd, &r, &acts);
		sp_expect_error(&acts, "window 7");
	}
	{
		/* A name that is no variable (or another message's) is an error:
		 * nothing counted. */
		static const char *const bad[] = { "exceeded,nope", "remaining_min", "rate_", "_x" };

		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			struct sp_msg r = { .msg = "ratelimit-x", .key = key, .window = 3600,
					.limit = 100, .vars = bad[i] };

			sp_notify1(fd, &r, &acts);
			sp_expect_error(&acts, "bad vars");
		}
		cr_assert(sp_read_rate(fd, key, 3600) == 0, "a message with bad vars was counted");
	}
	close(fd);
}

/* Keys above 104 bytes are hashed: same long key, same counter; keys that
 * differ only at the end, different counters. */
Test(notify, long_keys)
{
	static struct rawspop_actions acts;
	char k1[400], k2[400];
	int fd = sp_agent_conn();

	sp_key(k1, 64, "long");
	memset(k1 + strlen(k1), 'x', 350 - strlen(k1));
	k1[350] = '\0';
	memcpy(k2, k1, sizeof(k1));
	k2[349] = 'y';
	{
		struct sp_msg r1 = { .key = k1, .window = 60 }, r2 = { .key = k2, .window = 60 };

		sp_notify1(fd, &r1, &acts);
		sp_expect_no_error(&acts);
		cr_assert(sp_var_int(&acts, "rate") == 1);
		sp_notify1(fd, &r1, &acts);
		cr_assert(sp_var_int(&acts, "rate") == 2);
		sp_notify1(fd, &r2, &acts);
		sp_expect_no_error(&acts);
		cr_assert(sp_var_int(&acts, "rate") == 1, "keys differing in byte 349 share a counter");
	}
	close(fd);
}

/* Offered 256 bytes, a NOTIFY whose full answer would not fit: every
 * frame the agent sends stays within the negotiated size, and the plain
 * variables are there. */
Test(notify, ack_fits_small_frame)
{
	static struct rawspop_actions acts;
	static const char *const names[] = {
		"ratelimit-aaaaaaaaaaaaaaaa", "ratelimit-bbbbbbbbbbbbbbbb",
		"ratelimit-cccccccccccccccc", "ratelimit-dddddddddddddddd",
	};
	static const int64_t wins[] = { 1, 60, 3600, 60 };
	struct rawspop_hello_opts o = rawspop_hello_defaults();
	struct sp_msg m[4];
	char key[64];
	uint32_t mfs;
	int fd = sp_connect(test_agent.port);

	o.max_frame_size = 256;
	mfs = sp_hello_on(fd, &o);
	snprintf(key, sizeof(key), "s%d", (int)getpid());
	for (int i = 0; i < 4; i++)
		m[i] = (struct sp_msg){ .msg = names[i], .key = key, .window = wins[i], .limit = 1 };
	rawspop_buf_reset(&sp_wb);
	sp_put_notify(11, 12, m, 4);
	cr_assert(sp_wb.len - 4 <= mfs, "test NOTIFY of %zu bytes", sp_wb.len - 4);
	sp_send(fd);
	sp_read_ack(fd, 11, 12, &acts);
	cr_assert(sp_fr.length <= mfs, "ACK of %u bytes, negotiated max-frame-size %u", sp_fr.length,
		  mfs);
	cr_assert(sp_var_bool(&acts, "exceeded"), "two window-60 messages on limit 1: %s",
		  sp_hex(&sp_fr));
	close(fd);
}

/* 5000 NOTIFYs written without waiting for ACKs while ACKs are read as
 * they come: none lost, none twice, all ids right. */
Test(notify, pipelining_backpressure, .timeout = 120)
{
	enum { N = 5000 };
	static uint8_t in[1 << 16];
	static bool got[N];
	static struct rawspop_actions acts;
	size_t inlen = 0, sent = 0, acks = 0;
	char key[64], json[128];
	/* The rate of 5,000 hits is read at the end: in a window with two
	 * minutes left (an hour's end inside the run weighted them down). */
	uint32_t win = test_window_pick(3600, 120);

	test_agent_stop();
	snprintf(json, sizeof(json), "{ \"namespaces\": [{ \"name\": \"default\","
		 " \"window_sizes\": [%u] }] }", win);
	test_agent_start1(json);
	int fd = sp_agent_conn();
	int64_t deadline = test_now_ms() + 60000;

	sp_key(key, sizeof(key), "bp");
	rawspop_buf_reset(&sp_wb);
	for (int i = 0; i < N; i++) {
		struct sp_msg r = { .key = key, .window = win };

		sp_put_notify((uint64_t)i * 2 + 1, (uint64_t)i + 7, &r, 1);
	}
	cr_assert(!sp_wb.overflow, "builder too small for %d NOTIFYs", N);
	while (acks < N) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN | (sent < sp_wb.len ? POLLOUT : 0) };
		ssize_t k;

		cr_assert(test_now_ms() < deadline, "%zu of %d ACKs after 60 s (%zu bytes sent)",
			  acks, N, sent);
		if (poll(&pfd, 1, 1000) <= 0)
			continue;
		if ((pfd.revents & POLLOUT) && sent < sp_wb.len) {
			k = send(fd, sp_wb.b + sent, sp_wb.len - sent > 4096 ? 4096 : sp_wb.len - sent,
				 MSG_DONTWAIT | MSG_NOSIGNAL);
			cr_assert(k > 0 || errno == EAGAIN, "send: %s", strerror(errno));
			if (k > 0)
				sent += (size_t)k;
		}
		if (!(pfd.revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		k = recv(fd, in + inlen, sizeof(in) - inlen, MSG_DONTWAIT);
		cr_assert(k > 0 || (k < 0 && errno == EAGAIN), "recv after %zu ACKs: %zd %s", acks,
			  k, k < 0 ? strerror(errno) : "EOF");
		if (k < 0)
			continue;
		inlen += (size_t)k;
		for (;;) {
			uint32_t len;
			uint64_t i;

			if (inlen < 4)
				break;
			len = (uint32_t)in[0] << 24 | (uint32_t)in[1] << 16 | (uint32_t)in[2] << 8 | in[3];
			cr_assert(len <= RAWSPOP_FRAME_MAX);
			if (inlen < 4 + (size_t)len)
				break;
			memcpy(sp_fr.raw, in, 4 + (size_t)len);
			sp_fr.raw_len = 4 + (size_t)len;
			memmove(in, in + 4 + len, inlen - 4 - len);
			inlen -= 4 + (size_t)len;
			cr_assert(rawspop_decode_header(&sp_fr, sp_err, sizeof(sp_err)) == 0, "%s", sp_err);
			cr_assert(sp_fr.type == RAWSPOP_ACK, "frame type %u after %zu ACKs: %s", sp_fr.type,
				  acks, sp_hex(&sp_fr));
			i = (sp_fr.stream_id - 1) / 2;
			cr_assert(sp_fr.stream_id % 2 == 1 && i < N && sp_fr.frame_id == i + 7 && !got[i],
				  "ACK ids %llu/%llu unexpected or repeated",
				  (unsigned long long)sp_fr.stream_id, (unsigned long long)sp_fr.frame_id);
			got[i] = true;
			cr_assert(rawspop_decode_actions(&sp_fr, &acts, sp_err, sizeof(sp_err)) == 0, "%s",
				  sp_err);
			acks++;
		}
	}
	cr_assert(sp_read_rate(fd, key, win) == N);
	close(fd);
}

/* 255 arguments (NB-ARGS is one byte), the known ones last. */
Test(notify, many_args)
{
	static struct rawspop_actions acts;
	char key[64], name[16];
	int fd = sp_agent_conn();
	size_t start;

	sp_key(key, sizeof(key), "args");
	rawspop_buf_reset(&sp_wb);
	start = rawspop_notify_begin(&sp_wb, 5, 6);
	rawspop_msg(&sp_wb, "ratelimit", 255);
	for (int i = 0; i < 253; i++) {
		snprintf(name, sizeof(name), "x%d", i);
		if (i % 3 == 0)
			rawspop_arg_int(&sp_wb, name, i);
		else if (i % 3 == 1)
			rawspop_arg_str(&sp_wb, name, "v");
		else {
			rawspop_put_name(&sp_wb, "");
			rawspop_put_null(&sp_wb);
		}
	}
	rawspop_arg_int(&sp_wb, "window", 60);
	rawspop_arg_str(&sp_wb, "key", key);
	rawspop_frame_end(&sp_wb, start);
	sp_send(fd);
	sp_read_ack(fd, 5, 6, &acts);
	sp_expect_no_error(&acts);
	cr_assert(sp_var_int(&acts, "rate") == 1);
	close(fd);
}

/* Many rate-limit messages in one NOTIFY: 32 are all counted; of 100, the
 * first 32 are counted and the plain error says "too many messages"
 * (PROTOCOL.md, Limits). The ACK always fits the negotiated frame size. */
static void many_messages(int fd, int nmsg)
{
	static struct rawspop_actions acts;
	static char names[100][32];
	struct sp_msg m[100];
	char key[64];
	int64_t rate;
	bool err;

	sp_key(key, sizeof(key), "many");
	for (int i = 0; i < nmsg; i++) {
		snprintf(names[i], sizeof(names[i]), "ratelimit-m%03d", i);
		m[i] = (struct sp_msg){ .msg = names[i], .key = key, .window = 3600, .limit = 1000 };
	}
	rawspop_buf_reset(&sp_wb);
	sp_put_notify(21, 22, m, (size_t)nmsg);
	cr_assert(sp_wb.len - 4 <= 16380);
	sp_send(fd);
	sp_read(fd, &sp_fr, SP_IO_MS);
	cr_assert(sp_fr.type == RAWSPOP_ACK && sp_fr.stream_id == 21 && sp_fr.frame_id == 22,
		  "%d messages: %s", nmsg, sp_hex(&sp_fr));
	cr_assert(sp_fr.length <= 16380, "ACK of %u bytes over max-frame-size 16380", sp_fr.length);
	cr_assert(rawspop_decode_actions(&sp_fr, &acts, sp_err, sizeof(sp_err)) == 0,
		  "%d messages: ACK: %s", nmsg, sp_err);
	sp_check_vars(&acts, &sp_fr);
	err = sp_var(&acts, "error") != NULL;
	rate = sp_read_rate(fd, key, 3600);
	if (nmsg <= 32) {
		cr_assert(!err && rate == nmsg, "%d messages on one key and window: rate %lld",
			  nmsg, (long long)rate);
	} else {
		cr_assert(err && strcmp(sp_var(&acts, "error")->value.s, "too many messages") == 0,
			  "%d messages: no \"too many messages\" error", nmsg);
		cr_assert(rate == 32, "%d messages: %lld counted, expected the first 32", nmsg,
			  (long long)rate);
	}
}

Test(notify, many_messages)
{
	int fd = sp_agent_conn();

	many_messages(fd, 32);
	many_messages(fd, 100);
	close(fd);
}

/* String and binary keys may hold NUL bytes; they are part of the key. */
Test(notify, keys_with_nul)
{
	static struct rawspop_actions acts;
	char key[64];
	size_t klen;
	int fd = sp_agent_conn();

	sp_key(key, sizeof(key), "nul");
	klen = strlen(key);
	for (int variant = 0; variant < 3; variant++) {
		uint64_t sid = sp_next_sid++, fid = sp_next_fid++;
		char k[80];
		size_t start;

		memcpy(k, key, klen);
		k[klen] = '\0';
		k[klen + 1] = variant == 2 ? 'z' : 'y';
		rawspop_buf_reset(&sp_wb);
		start = rawspop_notify_begin(&sp_wb, sid, fid);
		rawspop_msg(&sp_wb, "ratelimit", 2);
		rawspop_arg_int(&sp_wb, "window", 60);
		rawspop_put_name(&sp_wb, "key");
		rawspop_put_u8(&sp_wb, RAWSPOP_T_STRING);
		rawspop_put_name_n(&sp_wb, k, klen + 2);
		rawspop_frame_end(&sp_wb, start);
		sp_send(fd);
		sp_read_ack(fd, sid, fid, &acts);
		sp_expect_no_error(&acts);
		cr_assert(sp_var_int(&acts, "rate") == (variant == 1 ? 2 : 1),
			  "key with a NUL, variant %d: rate %lld", variant,
			  (long long)sp_var_int(&acts, "rate"));
	}
	cr_assert(sp_read_rate(fd, key, 60) == 0, "the part before the NUL is a key of its own");
	close(fd);
}
