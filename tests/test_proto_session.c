/*
 * test_proto_session.c - an SPOP connection's life, against the agent
 * over TCP: the test client itself against HAProxy's captures and the
 * protocol notes' examples (suite client, no agent); the HELLO and what
 * is negotiated (max-frame-size, capabilities, versions, health checks);
 * a DISCONNECT from HAProxy; HAProxy 3.1+ told from the other peers
 * (sched_batch); SIGTERM with and without connections.
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
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/lib/agenttest.h"
#include "tests/lib/clock.h"
#include "tests/lib/rawspop.h"
#include "tests/lib/spoptest.h"

/* ---------------------------------------------------------------- the client */

/* The test client itself against the worked examples of the protocol
 * notes and real HAProxy captures; no agent needed. */

static void expect_bytes(const uint8_t *got, size_t n, const uint8_t *want, size_t wn,
			 const char *what)
{
	static char gh[1024], wh[1024];

	rawspop_hex(got, n, gh, sizeof(gh));
	rawspop_hex(want, wn, wh, sizeof(wh));
	cr_assert(n == wn && !memcmp(got, want, n), "%s: got %s, want %s", what, gh, wh);
}

Test(client, varint_vectors)
{
	static const struct {
		uint64_t v;
		uint8_t b[10];
		size_t n;
	} vec[] = {
		{ 0, { 0x00 }, 1 },
		{ 239, { 0xef }, 1 },
		{ 240, { 0xf0, 0x00 }, 2 },
		{ 300, { 0xfc, 0x03 }, 2 },
		{ 2287, { 0xff, 0x7f }, 2 },
		{ 2288, { 0xf0, 0x80, 0x00 }, 3 },
		{ 5000, { 0xf8, 0xa9, 0x01 }, 3 },
		{ 16380, { 0xfc, 0xf0, 0x06 }, 3 },
		{ 4294967295ull, { 0xff, 0xf0, 0xfe, 0xfe, 0x7e }, 5 },
		{ UINT64_MAX, { 0xff, 0xf0, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0x0e }, 10 },
	};

	for (size_t i = 0; i < sizeof(vec) / sizeof(vec[0]); i++) {
		uint64_t back = 0;
		char what[64];

		snprintf(what, sizeof(what), "varint %llu", (unsigned long long)vec[i].v);
		rawspop_buf_reset(&sp_wb);
		rawspop_put_varint(&sp_wb, vec[i].v);
		expect_bytes(sp_wb.b, sp_wb.len, vec[i].b, vec[i].n, what);
		cr_assert(rawspop_get_varint(sp_wb.b, sp_wb.len, &back) == vec[i].n && back == vec[i].v,
			  "%s does not decode back", what);
		cr_assert(rawspop_get_varint(sp_wb.b, sp_wb.len - 1, &back) == 0 || vec[i].n == 1,
			  "%s decodes from a truncated input", what);
	}
	/* Every boundary of the table round-trips. */
	for (unsigned sh = 0; sh < 64; sh++) {
		uint64_t v = 1ull << sh, back;

		for (int d = -1; d <= 1; d++) {
			rawspop_buf_reset(&sp_wb);
			rawspop_put_varint(&sp_wb, v + (uint64_t)d);
			cr_assert(rawspop_get_varint(sp_wb.b, sp_wb.len, &back) == sp_wb.len &&
				  back == v + (uint64_t)d);
		}
	}
	{
		static const uint8_t eleven[] = { 0xf0, 0x80, 0x80, 0x80, 0x80, 0x80,
						  0x80, 0x80, 0x80, 0x80, 0x00 };
		uint64_t v;

		cr_assert(rawspop_get_varint(eleven, sizeof(eleven), &v) == 0,
			  "an 11-byte varint decodes");
	}
}

/* HAProxy 2.x HELLO capture: 129 bytes after the length. */
Test(client, hello_matches_capture)
{
	static const char uuid[] = "5b2a3c1e-0d4f-4a8b-9c6d-7e8f90a1b2c3";
	struct rawspop_hello_opts o = rawspop_hello_defaults();
	static struct rawspop_buf want;
	static const uint8_t head[] = { 0, 0, 0, 129, 0x01, 0, 0, 0, 1, 0, 0 };

	o.engine_id = uuid;
	rawspop_buf_reset(&want);
	rawspop_put_bytes(&want, head, sizeof(head));
	rawspop_put_bytes(&want, "\x12" "supported-versions" "\x08\x03" "2.0", 24);
	rawspop_put_bytes(&want, "\x0e" "max-frame-size" "\x03\xfc\xf0\x06", 19);
	rawspop_put_bytes(&want, "\x0c" "capabilities" "\x08\x10" "pipelining,async", 31);
	rawspop_put_bytes(&want, "\x09" "engine-id" "\x08\x24", 12);
	rawspop_put_bytes(&want, uuid, 36);
	rawspop_buf_reset(&sp_wb);
	rawspop_hello(&sp_wb, &o);
	expect_bytes(sp_wb.b, sp_wb.len, want.b, want.len, "HELLO");
}

/* The NOTIFY capture of spoa-example (2018) and the constructed NOTIFY of
 * the protocol notes. */
Test(client, notify_matches_examples)
{
	static const uint8_t cap[] = { 0x00, 0x00, 0x00, 0x1e, 0x03, 0x00, 0x00, 0x00, 0x01, 0x14,
				       0x01, 0x0f, 'c', 'h', 'e', 'c', 'k', '-', 'c', 'l', 'i',
				       'e', 'n', 't', '-', 'i', 'p', 0x01, 0x00, 0x06, 0x7f,
				       0x00, 0x00, 0x01 };
	static const uint8_t lo[4] = { 127, 0, 0, 1 }, ip[4] = { 192, 0, 2, 1 };
	static const uint8_t ex[] = "\x00\x00\x00\x24\x03\x00\x00\x00\x01\x14\x01\x0a"
				    "check-rate\x02\x03key\x08\x03" "abc\x02ip\x06\xc0\x00\x02\x01";
	size_t start;

	rawspop_buf_reset(&sp_wb);
	start = rawspop_notify_begin(&sp_wb, 20, 1);
	rawspop_msg(&sp_wb, "check-client-ip", 1);
	rawspop_put_name(&sp_wb, "");
	rawspop_put_ipv4(&sp_wb, lo);
	rawspop_frame_end(&sp_wb, start);
	expect_bytes(sp_wb.b, sp_wb.len, cap, sizeof(cap), "NOTIFY capture");

	rawspop_buf_reset(&sp_wb);
	start = rawspop_notify_begin(&sp_wb, 20, 1);
	rawspop_msg(&sp_wb, "check-rate", 2);
	rawspop_arg_str(&sp_wb, "key", "abc");
	rawspop_put_name(&sp_wb, "ip");
	rawspop_put_ipv4(&sp_wb, ip);
	rawspop_frame_end(&sp_wb, start);
	expect_bytes(sp_wb.b, sp_wb.len, ex, sizeof(ex) - 1, "NOTIFY example");
}

/* Decoding the ACK and AGENT-HELLO examples of the protocol notes and the
 * ACK of a real capture (haproxy#2490: "allowed" = true). */
Test(client, decode_examples)
{
	static const uint8_t ack[] = "\x00\x00\x00\x1d\x67\x00\x00\x00\x01\x14\x01"
				     "\x01\x03\x02\x04rate\x04\x96"
				     "\x01\x03\x02\x07" "blocked\x11";
	static const uint8_t hello[] = "\x00\x00\x00\x40\x65\x00\x00\x00\x01\x00\x00"
				       "\x07version\x08\x03" "2.0"
				       "\x0emax-frame-size\x03\xfc\xf0\x06"
				       "\x0c" "capabilities\x08\x0apipelining";
	static struct rawspop_actions acts;
	static struct rawspop_kvs kvs;
	const struct rawspop_action *a;

	memcpy(sp_fr.raw, ack, sizeof(ack) - 1);
	sp_fr.raw_len = sizeof(ack) - 1;
	cr_assert(rawspop_decode_header(&sp_fr, sp_err, sizeof(sp_err)) == 0, "%s", sp_err);
	cr_assert(sp_fr.type == RAWSPOP_ACK && sp_fr.flags == RAWSPOP_FIN && sp_fr.stream_id == 20 &&
		  sp_fr.frame_id == 1);
	cr_assert(rawspop_decode_actions(&sp_fr, &acts, sp_err, sizeof(sp_err)) == 0, "%s", sp_err);
	cr_assert(acts.n == 2);
	a = rawspop_var_find(&acts, "rate");
	cr_assert(a && a->scope == RAWSPOP_SCOPE_TXN && a->value.type == RAWSPOP_T_INT64 &&
		  a->value.i == 150);
	a = rawspop_var_find(&acts, "blocked");
	cr_assert(a && a->value.type == RAWSPOP_T_BOOL && a->value.b);

	memcpy(sp_fr.raw, hello, sizeof(hello) - 1);
	sp_fr.raw_len = sizeof(hello) - 1;
	cr_assert(rawspop_decode_header(&sp_fr, sp_err, sizeof(sp_err)) == 0, "%s", sp_err);
	sp_check_agent_hello(&sp_fr, 16380);
	cr_assert(rawspop_decode_kvs(&sp_fr, &kvs, sp_err, sizeof(sp_err)) == 0 && kvs.n == 3);
	cr_assert(rawspop_kv_find(&kvs, "max-frame-size")->value.i == 16380);

	/* Strictness: a truncated action list and a set-var with 2 args. */
	sp_fr.raw_len = sizeof(ack) - 2;
	sp_fr.raw[3] = 0x1c;
	cr_assert(rawspop_decode_header(&sp_fr, NULL, 0) == 0);
	cr_assert(rawspop_decode_actions(&sp_fr, &acts, NULL, 0) < 0, "truncated ACK decodes");
	memcpy(sp_fr.raw, ack, sizeof(ack) - 1);
	sp_fr.raw_len = sizeof(ack) - 1;
	sp_fr.raw[12] = 2;
	cr_assert(rawspop_decode_header(&sp_fr, NULL, 0) == 0);
	cr_assert(rawspop_decode_actions(&sp_fr, &acts, NULL, 0) < 0, "set-var nb-args 2 decodes");
}

/* ---------------------------------------------------------------- HELLO */

TestSuite(hello, .init = test_agent_start_plain, .fini = test_agent_stop, .timeout = 60);

Test(hello, offer_16380)
{
	struct rawspop_hello_opts o = rawspop_hello_defaults();
	int fd = sp_connect(test_agent.port);
	uint32_t mfs;

	rawspop_buf_reset(&sp_wb);
	rawspop_hello(&sp_wb, &o);
	sp_send(fd);
	sp_read(fd, &sp_fr, SP_IO_MS);
	cr_assert(sp_fr.raw_len == (size_t)sp_fr.length + 4, "length field vs bytes read");
	mfs = sp_check_agent_hello(&sp_fr, 16380);
	cr_assert(mfs <= 16380);
	sp_expect_quiet(fd, 200);
	close(fd);
}

Test(hello, offer_1000_and_256)
{
	struct rawspop_hello_opts o = rawspop_hello_defaults();
	int fd;

	o.max_frame_size = 1000;
	fd = sp_connect(test_agent.port);
	cr_assert(sp_hello_on(fd, &o) <= 1000);
	close(fd);

	o.max_frame_size = 256;
	fd = sp_connect(test_agent.port);
	cr_assert(sp_hello_on(fd, &o) == 256);
	close(fd);
}

/* HAProxy 3.1 sends "pipelining" only, or "" with no option pipelining;
 * versions may be a list. */
Test(hello, capability_and_version_variants)
{
	static struct rawspop_actions acts;
	static const char *const caps[] = { "pipelining", "", "async", " pipelining , async " };
	static const char *const vsns[] = { "2.0", "1.0,2.0", "2.0,1.0" };
	char key[64];

	sp_key(key, sizeof(key), "variants");
	for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
		struct rawspop_hello_opts o = rawspop_hello_defaults();
		struct sp_msg r = { .key = key, .window = 60 };
		int fd = sp_connect(test_agent.port);

		o.capabilities = caps[i];
		o.engine_id = NULL;
		sp_hello_on(fd, &o);
		sp_notify1(fd, &r, &acts);
		cr_assert(sp_var_int(&acts, "rate") == (int64_t)i + 1, "capabilities \"%s\"", caps[i]);
		close(fd);
	}
	for (size_t i = 0; i < sizeof(vsns) / sizeof(vsns[0]); i++) {
		struct rawspop_hello_opts o = rawspop_hello_defaults();
		int fd = sp_connect(test_agent.port);

		o.versions = vsns[i];
		sp_hello_on(fd, &o);
		close(fd);
	}
}

/* Offers above the agent's own maximum, as UINT32 and UINT64, and unknown
 * HELLO items of every type, are fine. */
Test(hello, huge_offer_and_unknown_items)
{
	static const uint8_t v6[16] = { 0x20, 0x01, 0x0d, 0xb8, [15] = 1 }, v4[4] = { 1, 2, 3, 4 };
	static struct rawspop_kvs kvs;
	const int64_t offers[] = { 0xffffffffll, 1ll << 40 };
	const struct rawspop_kv *mfs;

	for (size_t i = 0; i < 2; i++) {
		int fd = sp_connect(test_agent.port);
		size_t start;

		rawspop_buf_reset(&sp_wb);
		start = rawspop_frame_begin(&sp_wb, RAWSPOP_HAPROXY_HELLO, RAWSPOP_FIN, 0, 0);
		rawspop_put_name(&sp_wb, "x-null");
		rawspop_put_null(&sp_wb);
		rawspop_put_name(&sp_wb, "supported-versions");
		rawspop_put_string(&sp_wb, "2.0");
		rawspop_put_name(&sp_wb, "x-ipv6");
		rawspop_put_ipv6(&sp_wb, v6);
		rawspop_put_name(&sp_wb, "max-frame-size");
		rawspop_put_int(&sp_wb, i ? RAWSPOP_T_UINT64 : RAWSPOP_T_UINT32, offers[i]);
		rawspop_put_name(&sp_wb, "x-bin");
		rawspop_put_binary(&sp_wb, "\0\1\2", 3);
		rawspop_put_name(&sp_wb, "capabilities");
		rawspop_put_string(&sp_wb, "pipelining");
		rawspop_put_name(&sp_wb, "x-ipv4");
		rawspop_put_ipv4(&sp_wb, v4);
		rawspop_put_name(&sp_wb, "x-int");
		rawspop_put_int(&sp_wb, RAWSPOP_T_INT32, -5);
		rawspop_put_name(&sp_wb, "healthcheck");
		rawspop_put_bool(&sp_wb, false);
		rawspop_frame_end(&sp_wb, start);
		sp_send(fd);
		sp_read(fd, &sp_fr, SP_IO_MS);
		sp_check_agent_hello(&sp_fr, offers[i]);
		cr_assert(rawspop_decode_kvs(&sp_fr, &kvs, NULL, 0) == 0);
		mfs = rawspop_kv_find(&kvs, "max-frame-size");
		cr_assert(mfs->value.i <= 1048576, "offer %lld: max-frame-size %lld",
			  (long long)offers[i], (long long)mfs->value.i);
		close(fd);
	}
}

Test(hello, healthcheck_then_close)
{
	struct rawspop_hello_opts o = rawspop_hello_defaults();
	enum rawspop_read_res r;
	int fd = sp_connect(test_agent.port);

	o.capabilities = "";
	o.healthcheck = true;
	sp_hello_on(fd, &o);
	r = rawspop_read_frame(fd, &sp_fr, SP_IO_MS);
	cr_assert(r == RAWSPOP_READ_EOF, "after a health-check AGENT-HELLO: %s, want EOF (%s)",
		  sp_read_res_str(r), sp_hex(&sp_fr));
	close(fd);
}

/* ---- peers: HAProxy 3.1+ told from the others (sched_batch, collect_us) ---- */

TestSuite(peers, .fini = test_agent_stop, .timeout = 60);

/* Sends NOTIFYs with these stream-ids on fd, each answered. */
static void notify_sids(int fd, const uint64_t *sids, size_t n)
{
	static const struct sp_msg r = { .key = "peers", .window = 60, .limit = 1000000 };
	struct rawspop_actions acts;

	for (size_t i = 0; i < n; i++) {
		rawspop_buf_reset(&sp_wb);
		sp_put_notify(sids[i], 1, &r, 1);
		sp_send(fd);
		sp_read_ack(fd, sids[i], 1, &acts);
	}
}

/* Waits (up to 3 s) until pid runs under policy want; returns whether. */
static bool policy_becomes(pid_t pid, int want)
{
	for (int i = 0; i < 150; i++) {
		if (sched_getscheduler(pid) == want)
			return true;
		test_sleep_ms(20);
	}
	return false;
}

static pid_t the_worker(void)
{
	pid_t worker;

	cr_assert_eq(agentproc_children(test_agent.pid, &worker, 1), 1);
	return worker;
}

/* Left to the agent, a worker batches (SCHED_BATCH) unless it serves
 * HAProxy 2.x and no 3.1+: 3.1+ numbers the streams of each connection 1,
 * 3, 5, ... (their NOTIFYs may come a little out of order), 2.x with its
 * process-wide counter (odd ones in a row too, as a thread of two may see
 * them); clients without an engine-id in their HELLO (our nginx module,
 * numbering by slot: 0, 1, 2) are neither. */
Test(peers, haproxy2_alone_is_answered_at_once)
{
	static const uint64_t v26[] = { 4711, 4713, 4715, 4717, 4719, 4721, 4723, 4725, 4727 };
	static const uint64_t slots[] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 };
	static const uint64_t gap[] = { 1, 3, 5, 7, 9, 11, 13, 17 };
	static const uint64_t v3[] = { 3, 1, 5, 7, 11, 9, 13, 15, 17, 19 };
	static const uint64_t twice[] = { 1, 3, 5, 7, 7, 9, 11, 13, 15 };
	struct rawspop_hello_opts anon = rawspop_hello_defaults();
	pid_t worker;
	int a, b, c, d, e;

	anon.engine_id = NULL;
	test_agent_start1(NULL);
	b = sp_connect(test_agent.port);
	sp_hello_on(b, &anon);
	worker = the_worker();
	cr_assert(policy_becomes(worker, SCHED_BATCH), "no HAProxy 2.x: SCHED_BATCH");
	notify_sids(b, slots, sizeof(slots) / sizeof(slots[0]));
	cr_assert_not(policy_becomes(worker, SCHED_OTHER),
		      "a slot-numbered client without engine-id: still SCHED_BATCH");
	a = sp_agent_conn();
	notify_sids(a, v26, sizeof(v26) / sizeof(v26[0]));
	cr_assert(policy_becomes(worker, SCHED_OTHER), "HAProxy 2.x alone: SCHED_OTHER");
	c = sp_agent_conn();
	notify_sids(c, gap, sizeof(gap) / sizeof(gap[0]));
	e = sp_agent_conn();
	notify_sids(e, twice, sizeof(twice) / sizeof(twice[0]));
	/* Seven 3.x-like NOTIFYs are not enough yet; the eighth is. */
	d = sp_agent_conn();
	notify_sids(d, v3, 7);
	cr_assert_not(policy_becomes(worker, SCHED_BATCH),
		      "1..13-then-17, a repeated id, seven 3.x-like NOTIFYs: still 2.x alone");
	notify_sids(d, v3 + 7, 3);
	cr_assert(policy_becomes(worker, SCHED_BATCH), "a HAProxy 3.1+ connection: SCHED_BATCH");
	close(d);
	cr_assert(policy_becomes(worker, SCHED_OTHER), "3.1+ gone, 2.x left: SCHED_OTHER");
	/* The others still answered. */
	notify_sids(a, v26 + 8, 1);
	close(a);
	close(c);
	cr_assert_not(policy_becomes(worker, SCHED_BATCH), "one 2.x connection left: SCHED_OTHER");
	close(e);
	cr_assert(policy_becomes(worker, SCHED_BATCH), "no HAProxy 2.x left: SCHED_BATCH again");
	close(b);
}

/* Set in the file, sched_batch holds whatever the peers. */
Test(peers, sched_batch_as_set)
{
	static const uint64_t v3[] = { 1, 3, 5, 7, 9, 11, 13, 15 };
	static const uint64_t v26[] = { 1000, 1001, 1002 };
	pid_t worker;
	int fd;

	test_agent_start1("{\"sched_batch\": false}");
	fd = sp_agent_conn();
	worker = the_worker();
	notify_sids(fd, v3, 8);
	cr_assert_not(policy_becomes(worker, SCHED_BATCH), "sched_batch false: never");
	close(fd);
	test_agent_stop();

	test_agent_start1("{\"sched_batch\": true}");
	fd = sp_agent_conn();
	worker = the_worker();
	cr_assert(policy_becomes(worker, SCHED_BATCH), "sched_batch true: from the start");
	notify_sids(fd, v26, 3);
	cr_assert_not(policy_becomes(worker, SCHED_OTHER), "sched_batch true: behind 2.x too");
	close(fd);
	close(sp_agent_conn());
}

TestSuite(disconnect, .init = test_agent_start_plain, .fini = test_agent_stop, .timeout = 60);

Test(disconnect, haproxy_disconnect)
{
	int fd = sp_agent_conn();

	rawspop_buf_reset(&sp_wb);
	rawspop_disconnect(&sp_wb, 0, "normal");
	sp_send(fd);
	sp_expect_disconnect(fd, 0, SP_IO_MS, "HAPROXY-DISCONNECT 0");
	close(fd);

	/* What HAProxy sends when it no longer needs the connection. */
	fd = sp_agent_conn();
	rawspop_buf_reset(&sp_wb);
	rawspop_disconnect(&sp_wb, 1, "I/O error");
	sp_send(fd);
	sp_expect_disconnect(fd, 0, SP_IO_MS, "HAPROXY-DISCONNECT 1");
	close(fd);
	sp_still_serving("HAPROXY-DISCONNECT");
}

/* ---------------------------------------------------------------- signals */

static void sigterm_check(bool with_conn)
{
	static const char *const args[] = { "-w", "2", NULL };
	pid_t kids[64];
	size_t nkids;
	int64_t t0;
	int fd = -1;

	test_agent_start(NULL, args);
	fd = sp_agent_conn();
	if (!with_conn) {
		close(fd);
		fd = -1;
	}
	test_sleep_ms(200);
	nkids = agentproc_children(test_agent.pid, kids, 64);
	t0 = test_now_ms();
	cr_assert(agentproc_signal(&test_agent, SIGTERM) == 0);
	cr_assert(agentproc_wait(&test_agent, 10000) == 0, "no exit %d ms after SIGTERM\n%s", 10000,
		  test_agent_log_tail());
	cr_assert(WIFEXITED(test_agent.exit_status) && WEXITSTATUS(test_agent.exit_status) == 0,
		  "after SIGTERM: %s %d\n%s", WIFEXITED(test_agent.exit_status) ? "exit status" : "signal",
		  WIFEXITED(test_agent.exit_status) ? WEXITSTATUS(test_agent.exit_status)
					       : WTERMSIG(test_agent.exit_status),
		  test_agent_log_tail());
	cr_log_info("exit %lld ms after SIGTERM", (long long)(test_now_ms() - t0));
	for (size_t i = 0; i < nkids; i++)
		cr_assert(!agentproc_pid_alive(kids[i]), "worker %d outlived the master",
			  (int)kids[i]);
	if (fd >= 0) {
		enum rawspop_read_res r = rawspop_read_frame(fd, &sp_fr, 1000);

		/* A DISCONNECT or a plain close are both fine. */
		if (r == RAWSPOP_READ_FRAME)
			cr_assert(sp_fr.type == RAWSPOP_AGENT_DISCONNECT, "type %u after SIGTERM", sp_fr.type);
		else
			cr_assert(r == RAWSPOP_READ_EOF || r == RAWSPOP_READ_RESET,
				  "connection after SIGTERM: %s", sp_read_res_str(r));
		close(fd);
	}
}

Test(signals, sigterm_idle, .fini = test_agent_stop, .timeout = 60)
{
	sigterm_check(false);
}

Test(signals, sigterm_with_connection, .fini = test_agent_stop, .timeout = 60)
{
	sigterm_check(true);
}
