/*
 * test_proto_hostile.c - peers that misbehave or crowd in, against the
 * agent over TCP: lengths too big or too short, frames out of order or of
 * unknown types, bad HELLOs, no FIN, lying argument counts, random
 * garbage, a frame one byte at a time (each answered with the DISCONNECT
 * status of docs/PROTOCOL.md, the agent serving on with the same
 * workers); the frame and idle timeouts, peers without HELLO, idle peers
 * at the connection cap; 200 connections at once.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/lib/agenttest.h"
#include "tests/lib/clock.h"
#include "tests/lib/rawspop.h"
#include "tests/lib/spoptest.h"

/* ---------------------------------------------------------------- hostile */

TestSuite(hostile, .init = test_agent_start_plain, .fini = test_agent_stop, .timeout = 120);

/* Sends raw bytes on a new connection (after a HELLO if with_hello) and
 * expects AGENT-DISCONNECT with status. */
static void hostile_case(bool with_hello, const uint8_t *bytes, size_t n, uint32_t status,
			 const char *what)
{
	int fd = with_hello ? sp_agent_conn() : sp_connect(test_agent.port);

	cr_assert(rawspop_send(fd, bytes, n) == 0, "%s: send: %s", what, strerror(errno));
	sp_expect_disconnect(fd, status, SP_IO_MS, what);
	close(fd);
}

static void hostile_buf(bool with_hello, uint32_t status, const char *what)
{
	static uint8_t copy[RAWSPOP_BUF_MAX];
	size_t n = sp_wb.len;

	cr_assert(!sp_wb.overflow);
	memcpy(copy, sp_wb.b, n);
	hostile_case(with_hello, copy, n, status, what);
}

Test(hostile, length_too_big)
{
	static const uint8_t huge[] = { 0x7f, 0xff, 0xff, 0xff };
	struct rawspop_hello_opts o = rawspop_hello_defaults();
	int64_t t0;
	uint32_t mfs;
	int fd;

	/* Only the 4 length bytes: the agent must not wait for the body. */
	t0 = test_now_ms();
	hostile_case(false, huge, 4, 3, "length 0x7fffffff before HELLO");
	hostile_case(true, huge, 4, 3, "length 0x7fffffff after HELLO");
	cr_assert(test_now_ms() - t0 < 2 * SP_IO_MS, "slow to refuse a huge length");
	sp_still_serving("length 0x7fffffff");

	/* One byte above the negotiated size, header and a little body. */
	o.max_frame_size = 1000;
	fd = sp_connect(test_agent.port);
	mfs = sp_hello_on(fd, &o);
	{
		uint8_t b[16] = { (uint8_t)((mfs + 1) >> 24), (uint8_t)((mfs + 1) >> 16),
				  (uint8_t)((mfs + 1) >> 8), (uint8_t)(mfs + 1), 3, 0, 0, 0, 1, 1, 1 };

		cr_assert(rawspop_send(fd, b, 11) == 0);
		sp_expect_disconnect(fd, 3, SP_IO_MS, "length negotiated+1");
	}
	close(fd);
	sp_still_serving("length negotiated+1");
}

/* A NOTIFY of exactly the negotiated size is fine. */
Test(hostile, length_exactly_max)
{
	static struct rawspop_actions acts;
	struct rawspop_hello_opts o = rawspop_hello_defaults();
	char key[64], pad[1024];
	uint32_t mfs;
	size_t start, len;
	int fd;

	o.max_frame_size = 1000;
	fd = sp_connect(test_agent.port);
	mfs = sp_hello_on(fd, &o);
	sp_key(key, sizeof(key), "exact");
	/* Find the padding that makes the frame exactly mfs bytes. */
	for (size_t padlen = 0; padlen < sizeof(pad) - 1; padlen++) {
		memset(pad, 'p', padlen);
		pad[padlen] = '\0';
		rawspop_buf_reset(&sp_wb);
		start = rawspop_notify_begin(&sp_wb, 77, 78);
		rawspop_msg(&sp_wb, "ratelimit", 3);
		rawspop_arg_str(&sp_wb, "key", key);
		rawspop_arg_int(&sp_wb, "window", 60);
		rawspop_arg_str(&sp_wb, "padding", pad);
		rawspop_frame_end(&sp_wb, start);
		len = sp_wb.len - 4;
		if (len >= mfs)
			break;
	}
	cr_assert(len == mfs, "could not build a frame of exactly %u bytes (%zu)", mfs, len);
	sp_send(fd);
	sp_read_ack(fd, 77, 78, &acts);
	sp_expect_no_error(&acts);
	cr_assert(sp_var_int(&acts, "rate") == 1);
	close(fd);
}

Test(hostile, short_lengths)
{
	static const uint8_t len0[] = { 0, 0, 0, 0 };
	static const uint8_t len3[] = { 0, 0, 0, 3, 3, 0, 0 };
	static const uint8_t len6[] = { 0, 0, 0, 6, 3, 0, 0, 0, 1, 1 };

	hostile_case(false, len0, sizeof(len0), 4, "length 0 before HELLO");
	hostile_case(true, len0, sizeof(len0), 4, "length 0 after HELLO");
	hostile_case(true, len3, sizeof(len3), 4, "length 3");
	hostile_case(true, len6, sizeof(len6), 4, "length 6");
	sp_still_serving("short lengths");
}

Test(hostile, notify_before_hello)
{
	struct sp_msg r = { .key = "k", .window = 60 };

	rawspop_buf_reset(&sp_wb);
	sp_put_notify(1, 1, &r, 1);
	hostile_buf(false, 4, "NOTIFY before HELLO");
	sp_still_serving("NOTIFY before HELLO");
}

Test(hostile, unexpected_frame_types)
{
	struct rawspop_hello_opts o = rawspop_hello_defaults();
	size_t start;

	/* A second HELLO. */
	rawspop_buf_reset(&sp_wb);
	rawspop_hello(&sp_wb, &o);
	hostile_buf(true, 4, "second HELLO");
	/* An ACK sent to the agent. */
	rawspop_buf_reset(&sp_wb);
	start = rawspop_frame_begin(&sp_wb, RAWSPOP_ACK, RAWSPOP_FIN, 1, 1);
	rawspop_frame_end(&sp_wb, start);
	hostile_buf(true, 4, "ACK to the agent");
	sp_still_serving("unexpected frame types");
}

/* PROTOCOL.md: "a frame type the agent does not expect (4)". SPOE.txt
 * allows skipping unknown types; the project's contract does not. */
Test(hostile, unknown_frame_type)
{
	size_t start;

	rawspop_buf_reset(&sp_wb);
	start = rawspop_frame_begin(&sp_wb, 99, RAWSPOP_FIN, 1, 1);
	rawspop_frame_end(&sp_wb, start);
	hostile_buf(true, 4, "frame type 99");
	sp_still_serving("an unknown frame type");
}

Test(hostile, bad_hellos)
{
	struct rawspop_hello_opts o;

	o = rawspop_hello_defaults();
	o.versions = "1.0";
	rawspop_buf_reset(&sp_wb);
	rawspop_hello(&sp_wb, &o);
	hostile_buf(false, 8, "supported-versions 1.0");

	o = rawspop_hello_defaults();
	o.max_frame_size = -1;
	rawspop_buf_reset(&sp_wb);
	rawspop_hello(&sp_wb, &o);
	hostile_buf(false, 6, "no max-frame-size");

	o = rawspop_hello_defaults();
	o.capabilities = NULL;
	rawspop_buf_reset(&sp_wb);
	rawspop_hello(&sp_wb, &o);
	hostile_buf(false, 7, "no capabilities");

	o = rawspop_hello_defaults();
	o.versions = NULL;
	rawspop_buf_reset(&sp_wb);
	rawspop_hello(&sp_wb, &o);
	hostile_buf(false, 5, "no supported-versions");

	o = rawspop_hello_defaults();
	o.max_frame_size = 100;
	rawspop_buf_reset(&sp_wb);
	rawspop_hello(&sp_wb, &o);
	hostile_buf(false, 9, "max-frame-size 100");

	o = rawspop_hello_defaults();
	o.max_frame_size = 255;
	rawspop_buf_reset(&sp_wb);
	rawspop_hello(&sp_wb, &o);
	hostile_buf(false, 9, "max-frame-size 255");
	sp_still_serving("bad HELLOs");
}

Test(hostile, no_fin)
{
	struct sp_msg r = { .key = "k", .window = 60 };
	struct rawspop_hello_opts o = rawspop_hello_defaults();
	size_t at;

	/* A NOTIFY with flags 0. */
	rawspop_buf_reset(&sp_wb);
	sp_put_notify(5, 5, &r, 1);
	sp_wb.b[8] = 0;
	hostile_buf(true, 10, "NOTIFY without FIN");
	/* A HELLO with flags 0. */
	rawspop_buf_reset(&sp_wb);
	at = sp_wb.len;
	rawspop_hello(&sp_wb, &o);
	sp_wb.b[at + 8] = 0;
	hostile_buf(false, 10, "HELLO without FIN");
	sp_still_serving("frames without FIN");
}

Test(hostile, long_varint_and_lying_nb_args)
{
	static const uint8_t sid11[] = { 0xf0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00 };
	size_t start;

	/* A stream-id varint of 11 bytes. */
	rawspop_buf_reset(&sp_wb);
	start = sp_wb.len;
	rawspop_put_u32be(&sp_wb, 0);
	rawspop_put_u8(&sp_wb, RAWSPOP_NOTIFY);
	rawspop_put_u32be(&sp_wb, RAWSPOP_FIN);
	rawspop_put_bytes(&sp_wb, sid11, sizeof(sid11));
	rawspop_put_varint(&sp_wb, 1);
	rawspop_frame_end(&sp_wb, start);
	hostile_buf(true, 4, "11-byte stream-id varint");

	/* nb-args 5, two args present. */
	rawspop_buf_reset(&sp_wb);
	start = rawspop_notify_begin(&sp_wb, 9, 9);
	rawspop_msg(&sp_wb, "ratelimit", 5);
	rawspop_arg_str(&sp_wb, "key", "k");
	rawspop_arg_int(&sp_wb, "window", 60);
	rawspop_frame_end(&sp_wb, start);
	hostile_buf(true, 4, "nb-args 5 with 2 args");

	/* A string length running past the frame. */
	rawspop_buf_reset(&sp_wb);
	start = rawspop_notify_begin(&sp_wb, 9, 9);
	rawspop_msg(&sp_wb, "ratelimit", 1);
	rawspop_put_name(&sp_wb, "key");
	rawspop_put_u8(&sp_wb, RAWSPOP_T_STRING);
	rawspop_put_varint(&sp_wb, 5000);
	rawspop_put_bytes(&sp_wb, "abc", 3);
	rawspop_frame_end(&sp_wb, start);
	hostile_buf(true, 4, "string length past the end");

	/* Unknown data type 12. */
	rawspop_buf_reset(&sp_wb);
	start = rawspop_notify_begin(&sp_wb, 9, 9);
	rawspop_msg(&sp_wb, "ratelimit", 1);
	rawspop_put_name(&sp_wb, "key");
	rawspop_put_u8(&sp_wb, 12);
	rawspop_put_bytes(&sp_wb, "abcd", 4);
	rawspop_frame_end(&sp_wb, start);
	hostile_buf(true, 4, "data type 12");
	sp_still_serving("malformed NOTIFYs");
}

/* xorshift64*: the same bytes on every run for a given seed. */
static uint64_t rnd_state;

static uint64_t rnd(void)
{
	rnd_state ^= rnd_state >> 12;
	rnd_state ^= rnd_state << 25;
	rnd_state ^= rnd_state >> 27;
	return rnd_state * 2685821657736338717ull;
}

/* Reads whatever the agent sends for up to ms; every frame must decode.
 * Stops at a close. */
static void drain_checked(int fd, int ms, const char *what)
{
	static struct rawspop_actions acts;
	static struct rawspop_kvs kvs;

	for (;;) {
		enum rawspop_read_res r = rawspop_read_frame(fd, &sp_fr, ms);

		if (r != RAWSPOP_READ_FRAME) {
			cr_assert(r != RAWSPOP_READ_TOOBIG && !(r == RAWSPOP_READ_ERROR && sp_fr.raw_len),
				  "%s: the agent sent a malformed frame (%s): %s", what,
				  sp_read_res_str(r), sp_hex(&sp_fr));
			return;
		}
		switch (sp_fr.type) {
		case RAWSPOP_AGENT_HELLO:
		case RAWSPOP_AGENT_DISCONNECT:
			cr_assert(rawspop_decode_kvs(&sp_fr, &kvs, sp_err, sizeof(sp_err)) == 0,
				  "%s: %s: %s", what, sp_err, sp_hex(&sp_fr));
			break;
		case RAWSPOP_ACK:
			cr_assert(rawspop_decode_actions(&sp_fr, &acts, sp_err, sizeof(sp_err)) == 0,
				  "%s: %s: %s", what, sp_err, sp_hex(&sp_fr));
			sp_check_vars(&acts, &sp_fr);
			break;
		default:
			cr_assert_fail("%s: the agent sent frame type %u: %s", what, sp_fr.type,
				       sp_hex(&sp_fr));
		}
	}
}

Test(hostile, garbage, .timeout = 300)
{
	static uint8_t frame[2048];
	struct rawspop_hello_opts o = rawspop_hello_defaults();
	const char *env = getenv("RAWSPOP_SEED");
	uint64_t seed = env ? strtoull(env, NULL, 0) : 0x5b0a2024ull;
	int iters = getenv("RAWSPOP_ITERS") ? atoi(getenv("RAWSPOP_ITERS")) : 400;
	char what[96];

	rnd_state = seed ? seed : 1;
	cr_log_info("garbage: seed 0x%llx, %d iterations (RAWSPOP_SEED / RAWSPOP_ITERS)",
		    (unsigned long long)seed, iters);
	close(sp_agent_conn());
	for (int it = 0; it < iters; it++) {
		int mode = (int)(rnd() % 4), fd;
		size_t n = 0;

		snprintf(what, sizeof(what), "garbage iteration %d mode %d (seed 0x%llx)", it, mode,
			 (unsigned long long)seed);
		rawspop_buf_reset(&sp_wb);
		if (mode == 0) {
			/* Random bytes from the first byte on. */
			n = 1 + rnd() % 64;
			for (size_t i = 0; i < n; i++)
				frame[i] = (uint8_t)rnd();
			rawspop_put_bytes(&sp_wb, frame, n);
		} else {
			/* A good HELLO, then a NOTIFY: mutated (1), with a
			 * random body under a correct length (2), or with a
			 * random length (3). */
			struct sp_msg r = { .key = "gk", .window = 60, .limit = 5, .cost_str = "1" };
			size_t start;

			rawspop_hello(&sp_wb, &o);
			start = sp_wb.len;
			sp_put_notify(rnd() % 1000, rnd() % 1000, &r, 1);
			if (mode == 1) {
				int flips = 1 + (int)(rnd() % 4);

				for (int k = 0; k < flips; k++) {
					size_t at = start + 4 + rnd() % (sp_wb.len - start - 4);

					sp_wb.b[at] = (uint8_t)rnd();
				}
			} else if (mode == 2) {
				sp_wb.len = start;
				n = 1 + rnd() % 200;
				start = rawspop_frame_begin(&sp_wb, (uint8_t)(rnd() % 4), (uint32_t)(rnd() % 3),
							    rnd() % 300, rnd() % 300);
				for (size_t i = 0; i < n; i++)
					rawspop_put_u8(&sp_wb, (uint8_t)rnd());
				rawspop_frame_end(&sp_wb, start);
			} else {
				uint32_t len = (uint32_t)rnd();

				sp_wb.b[start] = (uint8_t)(len >> 24);
				sp_wb.b[start + 1] = (uint8_t)(len >> 16);
				sp_wb.b[start + 2] = (uint8_t)(len >> 8);
				sp_wb.b[start + 3] = (uint8_t)len;
			}
		}
		fd = sp_connect(test_agent.port);
		if (rawspop_send_buf(fd, &sp_wb) == 0)
			drain_checked(fd, 100, what);
		close(fd);
		if (it % 50 == 49)
			cr_assert(agentproc_alive(&test_agent), "%s: the agent died\n%s", what, test_agent_log_tail());
	}
	sp_still_serving("garbage");
}

Test(hostile, one_byte_at_a_time)
{
	static struct rawspop_actions acts;
	static uint8_t copy[4096];
	struct rawspop_hello_opts o = rawspop_hello_defaults();
	struct sp_msg r = { .key = NULL, .window = 60, .limit = 5 };
	char key[64];
	size_t n;
	int fd = sp_connect(test_agent.port);

	sp_key(key, sizeof(key), "slow");
	r.key = key;
	rawspop_buf_reset(&sp_wb);
	rawspop_hello(&sp_wb, &o);
	n = sp_wb.len;
	memcpy(copy, sp_wb.b, n);
	for (size_t i = 0; i < n; i++) {
		cr_assert(rawspop_send(fd, copy + i, 1) == 0, "send byte %zu: %s", i, strerror(errno));
		test_sleep_ms(2);
	}
	sp_read(fd, &sp_fr, SP_IO_MS);
	sp_check_agent_hello(&sp_fr, 16380);
	sp_note_workers();

	rawspop_buf_reset(&sp_wb);
	sp_put_notify(41, 42, &r, 1);
	sp_put_notify(43, 44, &r, 1);
	n = sp_wb.len;
	memcpy(copy, sp_wb.b, n);
	for (size_t i = 0; i < n; i++) {
		cr_assert(rawspop_send(fd, copy + i, 1) == 0, "send byte %zu: %s", i, strerror(errno));
		test_sleep_ms(2);
	}
	sp_read_ack(fd, 41, 42, &acts);
	cr_assert(sp_var_int(&acts, "rate") == 1);
	sp_read_ack(fd, 43, 44, &acts);
	cr_assert(sp_var_int(&acts, "rate") == 2);
	close(fd);
	sp_still_serving("a frame sent byte by byte");
}

/* A half-sent frame then silence: closed after frame_timeout_ms with
 * status 2 (frame_timeout_ms: docs/CONFIG.md). */
TestSuite(timeouts, .fini = test_agent_stop, .timeout = 60);

Test(timeouts, half_frame)
{
	static const char *const args[] = { "-w", "1", NULL };
	static const char json[] = "{ \"frame_timeout_ms\": 300, \"idle_timeout_ms\": 60000 }";
	struct sp_msg r = { .key = "half", .window = 60 };
	int64_t t0, dt;
	int fd;

	test_agent_start(json, args);
	fd = sp_agent_conn();
	rawspop_buf_reset(&sp_wb);
	sp_put_notify(3, 3, &r, 1);
	t0 = test_now_ms();
	cr_assert(rawspop_send(fd, sp_wb.b, sp_wb.len / 2) == 0);
	sp_expect_disconnect(fd, 2, 5000, "half a frame then silence");
	dt = test_now_ms() - t0;
	cr_assert(dt >= 250, "closed after %lld ms, before frame_timeout_ms 300", (long long)dt);
	cr_assert(dt <= 2000, "closed only after %lld ms, frame_timeout_ms 300", (long long)dt);
	close(fd);
	sp_still_serving("a frame timeout");
}

/* The frame timer measures one frame (issue 7): a busy peer whose writes
 * always end in the middle of a frame, each write completing the previous
 * frame, is never cut, here over 3.5 x frame_timeout_ms. */
Test(timeouts, busy_writes_ending_mid_frame)
{
	static const char *const args[] = { "-w", "1", NULL };
	static struct rawspop_actions acts;
	static uint8_t prev[4096];
	size_t prev_len = 0, half = 0;
	uint64_t sid = 101, fid = 1;
	int64_t t0;
	int fd, frames = 0;
	/* A window with a minute left: the rate read at the end holds every
	 * hit (a window's end inside the run weighted the first ones down). */
	uint32_t win = test_window_pick(3600, 60);
	char json[256];

	snprintf(json, sizeof(json), "{ \"frame_timeout_ms\": 1000, \"idle_timeout_ms\": 60000,"
		 " \"namespaces\": [{ \"name\": \"default\", \"window_sizes\": [%u] }] }", win);
	test_agent_start(json, args);
	fd = sp_agent_conn();
	t0 = test_now_ms();
	while (test_now_ms() - t0 < 3500) {
		struct sp_msg r = { .key = "busy", .window = win };
		static uint8_t out[8192];
		size_t n = 0;

		rawspop_buf_reset(&sp_wb);
		sp_put_notify(sid + 2 * (uint64_t)frames, fid + (uint64_t)frames, &r, 1);
		cr_assert(sp_wb.len < sizeof(prev));
		/* the rest of the previous frame, then half of this one */
		memcpy(out, prev + half, prev_len - half);
		n = prev_len - half;
		half = sp_wb.len / 2;
		memcpy(out + n, sp_wb.b, half);
		n += half;
		memcpy(prev, sp_wb.b, sp_wb.len);
		prev_len = sp_wb.len;
		cr_assert(rawspop_send(fd, out, n) == 0, "send: %s", strerror(errno));
		if (frames > 0)
			sp_read_ack(fd, sid + 2 * (uint64_t)(frames - 1), fid + (uint64_t)(frames - 1),
				 &acts);
		frames++;
		test_sleep_ms(50);
	}
	cr_assert(rawspop_send(fd, prev + half, prev_len - half) == 0);
	sp_read_ack(fd, sid + 2 * (uint64_t)(frames - 1), fid + (uint64_t)(frames - 1), &acts);
	cr_assert_eq(sp_var_int(&acts, "rate"), frames, "every hit counted");
	sp_expect_quiet(fd, 200);
	close(fd);
}

/* Before HELLO, a peer gets small buffers and a frame above a few KiB is
 * refused: 200 peers announcing a 1 MiB frame (max_frame_size 1 MiB) and
 * sending 256 KiB of it grow the worker by at most 16 MiB. */
static long rss_kib(pid_t pid)
{
	char path[64], line[256];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	cr_assert(f, "open %s", path);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

#define NOHELLO_PEERS 200

Test(timeouts, peers_without_hello_stay_small, .timeout = 120)
{
	static const char *const args[] = { "-w", "1", NULL };
	static const char json[] = "{ \"max_frame_size\": 1048576, \"frame_timeout_ms\": 30000 }";
	static uint8_t chunk[256 * 1024];
	static int fds[NOHELLO_PEERS];
	pid_t worker;
	long before, after;
	int refused = 0;

	test_agent_start(json, args);
	close(sp_agent_conn());	/* the worker is up and warm */
	cr_assert_eq(agentproc_children(test_agent.pid, &worker, 1), 1);
	test_sleep_ms(200);
	before = rss_kib(worker);
	/* a HAPROXY-HELLO frame header announcing 1 MiB, then 256 KiB */
	chunk[0] = 0x00, chunk[1] = 0x10, chunk[2] = 0x00, chunk[3] = 0x00;
	chunk[4] = RAWSPOP_HAPROXY_HELLO;
	for (int i = 0; i < NOHELLO_PEERS; i++) {
		fds[i] = sp_connect(test_agent.port);
		(void)!send(fds[i], chunk, sizeof(chunk), MSG_NOSIGNAL | MSG_DONTWAIT);
	}
	test_sleep_ms(500);
	after = rss_kib(worker);
	for (int i = 0; i < NOHELLO_PEERS; i++) {
		enum rawspop_read_res r = rawspop_read_frame(fds[i], &sp_fr, SP_IO_MS);
		refused += (r == RAWSPOP_READ_FRAME && sp_fr.type == RAWSPOP_AGENT_DISCONNECT) ||
			   r == RAWSPOP_READ_EOF || r == RAWSPOP_READ_RESET;
		close(fds[i]);
	}
	cr_log_info("worker RSS %ld KiB before, %ld KiB with %d peers without HELLO (+%ld KiB)",
		    before, after, NOHELLO_PEERS, after - before);
	cr_assert_leq(after - before, 16 * 1024, "worker grew by %ld KiB", after - before);
	cr_assert_eq(refused, NOHELLO_PEERS, "%d of %d refused", refused, NOHELLO_PEERS);
	sp_still_serving("200 peers without HELLO");
}

/* At max_connections, a new peer gets the slot of the connection idle the
 * longest (no NOTIFY for over a second): idle peers cannot hold every
 * slot of a worker. */
Test(timeouts, idle_peers_cannot_hold_the_cap)
{
	static const char *const args[] = { "-w", "1", NULL };
	static const char json[] = "{ \"max_connections\": 4 }";
	static struct rawspop_actions acts;
	int idle[4], fd, closed = 0;

	test_agent_start(json, args);
	for (int i = 0; i < 4; i++)
		idle[i] = sp_agent_conn();
	test_sleep_ms(1500);
	fd = sp_agent_conn();
	struct sp_msg r = { .key = "newcomer", .window = 60 };
	sp_notify1(fd, &r, &acts);
	cr_assert_eq(sp_var_int(&acts, "rate"), 1);
	for (int i = 0; i < 4; i++) {
		enum rawspop_read_res rr = rawspop_read_frame(idle[i], &sp_fr, 200);
		closed += rr != RAWSPOP_READ_TIMEOUT;
		close(idle[i]);
	}
	cr_assert_eq(closed, 1, "%d idle connections closed for one newcomer", closed);
	close(fd);
}

/* idle_timeout_ms is independent of frame_timeout_ms (CONFIG.md): an
 * idle connection goes after 400 ms even with a 60 s frame timeout. */
Test(timeouts, idle)
{
	static const char *const args[] = { "-w", "1", NULL };
	static const char json[] = "{ \"idle_timeout_ms\": 400, \"frame_timeout_ms\": 60000 }";
	int64_t t0, dt;
	int fd;

	test_agent_start(json, args);
	fd = sp_agent_conn();
	t0 = test_now_ms();
	sp_expect_disconnect(fd, 2, 5000, "idle 400 ms after HELLO (frame_timeout_ms 60000)");
	dt = test_now_ms() - t0;
	cr_assert(dt >= 300, "closed after %lld ms idle, idle_timeout_ms 400", (long long)dt);
	close(fd);
	sp_still_serving("an idle timeout");
}

/* A connection that never says HELLO is not kept forever either. */
Test(timeouts, no_hello)
{
	static const char *const args[] = { "-w", "1", NULL };
	static const char json[] = "{ \"idle_timeout_ms\": 400, \"frame_timeout_ms\": 400 }";
	enum rawspop_read_res r;
	int fd;

	test_agent_start(json, args);
	fd = sp_connect(test_agent.port);
	r = rawspop_read_frame(fd, &sp_fr, 5000);
	cr_assert(r == RAWSPOP_READ_EOF || r == RAWSPOP_READ_RESET ||
			  (r == RAWSPOP_READ_FRAME && sp_fr.type == RAWSPOP_AGENT_DISCONNECT),
		  "silent connection after 5 s with 400 ms timeouts: %s %s", sp_read_res_str(r),
		  sp_hex(&sp_fr));
	close(fd);
	sp_still_serving("a connection without HELLO");
}

/* ---------------------------------------------------------------- load */

#define NCONN   200
#define NROUND  3
#define NKEYS   5

Test(load, concurrent_200, .fini = test_agent_stop, .timeout = 180)
{
	static const char *const args[] = { "-w", "2", NULL };
	static struct rawspop_actions acts;
	static int fds[NCONN];
	static bool seen[NKEYS][NCONN * NROUND / NKEYS + 1];
	char keys[NKEYS][64];
	struct rawspop_hello_opts o = rawspop_hello_defaults();
	int fd;

	test_agent_start(NULL, args);
	for (int k = 0; k < NKEYS; k++)
		sp_key(keys[k], sizeof(keys[k]), "load");
	for (int c = 0; c < NCONN; c++)
		fds[c] = sp_connect(test_agent.port);
	rawspop_buf_reset(&sp_wb);
	rawspop_hello(&sp_wb, &o);
	for (int c = 0; c < NCONN; c++)
		sp_send(fds[c]);
	for (int c = 0; c < NCONN; c++) {
		sp_read(fds[c], &sp_fr, 10000);
		sp_check_agent_hello(&sp_fr, 16380);
	}
	for (int round = 0; round < NROUND; round++) {
		/* Every connection has a NOTIFY in flight at once. */
		for (int c = 0; c < NCONN; c++) {
			struct sp_msg r = { .key = keys[c % NKEYS], .window = 3600 };

			rawspop_buf_reset(&sp_wb);
			sp_put_notify((uint64_t)c * 2 + 1, (uint64_t)round + 1, &r, 1);
			sp_send(fds[c]);
		}
		for (int c = 0; c < NCONN; c++) {
			int64_t rate;

			sp_read(fds[c], &sp_fr, 10000);
			cr_assert(sp_fr.type == RAWSPOP_ACK && sp_fr.stream_id == (uint64_t)c * 2 + 1 &&
				  sp_fr.frame_id == (uint64_t)round + 1,
				  "connection %d round %d: %s", c, round, sp_hex(&sp_fr));
			cr_assert(rawspop_decode_actions(&sp_fr, &acts, sp_err, sizeof(sp_err)) == 0,
				  "%s", sp_err);
			sp_check_vars(&acts, &sp_fr);
			sp_expect_no_error(&acts);
			rate = sp_var_int(&acts, "rate");
			cr_assert(rate >= 1 && rate <= NCONN * NROUND / NKEYS, "rate %lld",
				  (long long)rate);
			cr_expect(!seen[c % NKEYS][rate],
				  "key %d: two hits both saw rate %lld (hits not atomic)", c % NKEYS,
				  (long long)rate);
			seen[c % NKEYS][rate] = true;
		}
	}
	for (int c = 0; c < NCONN; c++)
		close(fds[c]);
	fd = sp_agent_conn();
	for (int k = 0; k < NKEYS; k++) {
		int64_t rate = sp_read_rate(fd, keys[k], 3600);

		cr_assert(rate == NCONN * NROUND / NKEYS, "key %d: rate %lld, want %d", k,
			  (long long)rate, NCONN * NROUND / NKEYS);
	}
	close(fd);
}
