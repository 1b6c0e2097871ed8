/*
 * test_http.c - the HTTP front against the real agent ($AGENT), through
 * a small HTTP client written here: answers and headers, the counts
 * shared with SPOP (tests/lib/rawspop.c), keep-alive and pipelining in
 * order, a request sent byte by byte, bad requests with their status,
 * the head timeout, HTTP/1.0 and HEAD (every kind of answer, its head
 * against GET's), http_deny_status.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/lib/agenttest.h"
#include "tests/lib/clock.h"
#include "tests/lib/httpc.h"
#include "tests/lib/rawspop.h"
#include "tests/lib/redis_server.h"
#include "tests/lib/spoptest.h"

#define IO_MS    3000

static void start_workers(const char *json, const char *workers)
{
	const char *const args[] = { "-w", workers, NULL };

	test_agent_start(json, args);
}

static const char default_json[] =
	"{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"frame_timeout_ms\": 400,"
	" \"namespaces\": [{\"name\": \"default\", \"window_sizes\": [3600], \"caller_limit\": \"any\"},"
	" {\"name\": \"api\", \"window_sizes\": [1, 3600], \"caller_limit\": \"any\"}]}";

static void start_default(void)
{
	test_agent_start1(default_json);
}

static int http_open(void)
{
	int fd = rawspop_connect(test_agent.http_port, IO_MS);

	cr_assert(fd >= 0, "connect to the HTTP front on %d: %s", test_agent.http_port,
		  strerror(errno));
	return fd;
}

static void send_str(int fd, const char *s)
{
	cr_assert(rawspop_send(fd, s, strlen(s)) == 0, "send: %s", strerror(errno));
}

/* One parsed response (tests/lib/httpc.h). */
#define resp httpc_resp

/* Per-connection read buffer: pipelined answers arrive together. */
static struct httpc_buf rb;
#define rbuf rb.data
#define rlen rb.len

/* Reads until rbuf holds n bytes or more; false on EOF or timeout. */
static bool fill(int fd, size_t n)
{
	return httpc_fill(fd, &rb, n, IO_MS);
}

/* Reads one response (status line, headers, Content-Length body). */
static void read_resp(int fd, struct resp *r)
{
	const char *why = "";

	cr_assert(httpc_read(fd, &rb, r, IO_MS, &why) == 0, "%s (have %zu bytes: %.200s)", why,
		  rlen, rbuf);
}

/* The value of a response header (first line of that name), or "". */
static const char *hdr(const struct resp *r, const char *name, char *out, size_t len)
{
	return httpc_header(r, name, out, len);
}

/* A number in the JSON body ("name":N), or -1. */
static long long body_num(const struct resp *r, const char *name)
{
	return httpc_body_num(r, name);
}

/* GET target on a fresh connection, answer in *r. */
static void get(const char *target, struct resp *r)
{
	char req[2048];
	int fd = http_open();

	rlen = 0;
	snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
		 target);
	send_str(fd, req);
	read_resp(fd, r);
	close(fd);
}

/* The whole /metrics answer into rbuf (read_resp cuts bodies at 1 KiB). */
static void metrics_page(void)
{
	int fd = http_open();

	rlen = 0;
	send_str(fd, "GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
	while (fill(fd, rlen + 1))
		;
	rbuf[rlen] = '\0';
	close(fd);
}

TestSuite(http, .init = start_default, .fini = test_agent_stop, .timeout = 60);

Test(http, counts_limits_and_headers)
{
	struct resp r;
	char v[256];

	for (int i = 1; i <= 4; i++) {
		get("/ratelimit?key=alice&limit=3&window=3600", &r);
		cr_assert_eq(r.status, i <= 3 ? 200 : 429, "hit %d: %d %s", i, r.status, r.body);
		cr_assert_eq(body_num(&r, "rate"), i);
		cr_assert_eq(body_num(&r, "limit"), 3);
		cr_assert_eq(body_num(&r, "remaining"), i <= 3 ? 3 - i : 0);
		cr_assert_str_eq(hdr(&r, "RateLimit-Policy", v, sizeof(v)), "\"default\";q=3;w=3600");
		char want[96];
		snprintf(want, sizeof(want), "\"default\";r=%d;t=%lld", i <= 3 ? 3 - i : 0,
			 body_num(&r, "reset"));
		cr_assert_str_eq(hdr(&r, "RateLimit", v, sizeof(v)), want);
		/* A denied GET: a problem document (draft-ietf-httpapi-ratelimit-headers). */
		cr_assert_str_eq(hdr(&r, "Content-Type", v, sizeof(v)),
				 i <= 3 ? "application/json" : "application/problem+json");
		if (i == 4) {
			cr_assert_not_null(strstr(r.body, "\"type\":\"https://iana.org/assignments/"
						  "http-problem-types#quota-exceeded\""), "%s", r.body);
			cr_assert_not_null(strstr(r.body, "\"violated-policies\":[\"default\"]"),
					   "%s", r.body);
			cr_assert_not_null(strstr(r.body, "\"status\":429"), "%s", r.body);
			cr_assert_str_eq(hdr(&r, "Retry-After", v, sizeof(v)),
					 (snprintf(want, sizeof(want), "%lld",
						   body_num(&r, "retry_after")), want));
			cr_assert_geq(body_num(&r, "retry_after"), 1);
			cr_assert_not_null(strstr(r.body, "\"exceeded\":true"));
		} else {
			cr_assert_str_empty(hdr(&r, "Retry-After", v, sizeof(v)));
			cr_assert_not_null(strstr(r.body, "\"exceeded\":false"));
		}
	}
	/* Without a limit: counted, no RateLimit headers. */
	get("/ratelimit?key=nolimit&window=3600&cost=0.5", &r);
	cr_assert_eq(r.status, 200);
	cr_assert_eq(body_num(&r, "rate"), 1);
	cr_assert_str_empty(hdr(&r, "RateLimit-Policy", v, sizeof(v)));
	/* Percent-decoding: "a b" and "a+b" are the same key. */
	get("/ratelimit?key=a%20b&window=3600", &r);
	get("/ratelimit?key=a+b&window=3600&cost=0", &r);
	cr_assert_eq(body_num(&r, "rate"), 1);
	/* A namespace with one window needs none named. */
	get("/ratelimit?key=x&namespace=api&window=1", &r);
	cr_assert_eq(r.status, 200, "%s", r.body);
	cr_assert_eq(body_num(&r, "window"), 1);
}

Test(http, counts_shared_with_spop)
{
	static struct rawspop_actions acts;
	struct sp_msg hit = { .key = "shared", .window = 3600 };
	struct sp_msg read = { .key = "shared", .window = 3600, .has_cost = true, .cost = 0 };
	struct resp r;
	int fd = sp_open(test_agent.port);

	for (int i = 0; i < 2; i++)
		sp_notify1(fd, &hit, &acts);
	get("/ratelimit?key=shared&window=3600", &r);
	cr_assert_eq(body_num(&r, "rate"), 3, "two SPOP hits and this one: %s", r.body);

	sp_notify1(fd, &read, &acts);
	cr_assert_eq(sp_var_int(&acts, "rate"), 3, "SPOP reads the HTTP hit too");
	close(fd);
}

Test(http, keep_alive_pipelined_in_order)
{
	char req[8192];
	size_t o = 0;
	struct resp r;
	int fd = http_open();

	rlen = 0;
	for (int i = 0; i < 20; i++)
		o += (size_t)snprintf(req + o, sizeof(req) - o,
				      "GET /ratelimit?key=pipe&window=3600&limit=15 HTTP/1.1\r\n"
				      "Host: t\r\n\r\n");
	o += (size_t)snprintf(req + o, sizeof(req) - o, "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
	send_str(fd, req);
	for (int i = 1; i <= 20; i++) {
		read_resp(fd, &r);
		cr_assert_eq(body_num(&r, "rate"), i, "answer %d out of order: %s", i, r.body);
		cr_assert_eq(r.status, i <= 15 ? 200 : 429);
		cr_assert_not(r.closed);
	}
	read_resp(fd, &r);
	cr_assert_eq(r.status, 200);
	cr_assert_str_eq(r.body, "ok\n");
	/* The connection stays open for more. */
	send_str(fd, "GET /ratelimit?key=pipe&window=3600&cost=0 HTTP/1.1\r\nHost: t\r\n\r\n");
	read_resp(fd, &r);
	cr_assert_eq(body_num(&r, "rate"), 20);
	close(fd);
}

Test(http, byte_by_byte)
{
	static const char req[] = "GET /ratelimit?key=slow&window=3600 HTTP/1.1\r\nHost: t\r\n\r\n";
	struct resp r;

	/* A head of 57 bytes 2 ms apart: with the suite's 400 ms for a head,
	 * a busy machine's late wake-ups cut it (408); 30 s is a far bound. */
	test_agent_stop();
	test_agent_start1("{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"frame_timeout_ms\": 30000,"
			  " \"namespaces\": [{\"name\": \"default\", \"window_sizes\": [3600]}]}");
	int fd = http_open();

	rlen = 0;
	for (size_t i = 0; i < strlen(req); i++) {
		cr_assert_eq(rawspop_send(fd, req + i, 1), 0);
		test_sleep_ms(2);
	}
	read_resp(fd, &r);
	cr_assert_eq(r.status, 200);
	cr_assert_eq(body_num(&r, "rate"), 1);
	close(fd);
}

Test(http, bad_requests)
{
	static const struct {
		const char *target;
		int status;
		const char *error;
	} cases[] = {
		{ "/ratelimit?window=3600", 400, "missing key" },
		{ "/ratelimit?key=&window=3600", 400, "empty key" },
		{ "/ratelimit?key=k&window=0", 400, "bad window" },
		{ "/ratelimit?key=k&window=61", 400, "bad window" },
		{ "/ratelimit?key=k&namespace=api", 400, "missing window" },
		{ "/ratelimit?key=k&window=3600&limit=-1", 400, "bad limit" },
		{ "/ratelimit?key=k&window=3600&cost=1e3", 400, "bad cost" },
		{ "/ratelimit?key=k&window=3600&window_type=rolling", 400, "bad window_type" },
		{ "/ratelimit?key=k&window=3600&admission=strict", 400, "bad admission" },
		{ "/ratelimit?key=k&window=3600&namespace=nope", 400, "unknown namespace" },
		{ "/ratelimit?key=k&key=j&window=3600", 400, "duplicate argument" },
		{ "/ratelimit?key=%zz&window=3600", 400, "bad percent-encoding" },
		{ "/nowhere", 404, "not found" },
	};
	struct resp r;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		get(cases[i].target, &r);
		cr_expect_eq(r.status, cases[i].status, "%s: %d %s", cases[i].target, r.status,
			     r.body);
		cr_expect(strstr(r.body, cases[i].error), "%s: body %s", cases[i].target, r.body);
	}
	/* Nothing of the above counted. */
	get("/ratelimit?key=k&window=3600&cost=0", &r);
	cr_assert_eq(body_num(&r, "rate"), 0);

	/* Malformed heads: the status, then the connection closes. */
	static const struct {
		const char *req;
		int status;
	} heads[] = {
		{ "GET / HTTP/2.0\r\nHost: t\r\n\r\n", 505 },
		{ "GET /ratelimit HTTP/1.1\r\n\r\n", 400 },
		{ "GET /x\x01 HTTP/1.1\r\nHost: t\r\n\r\n", 400 },
		{ "POST /ratelimit HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n", 501 },
		{ "garbage\r\n\r\n", 400 },
	};
	for (size_t i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
		int fd = http_open();
		char b[16];

		rlen = 0;
		send_str(fd, heads[i].req);
		read_resp(fd, &r);
		cr_expect_eq(r.status, heads[i].status, "head %zu: %d %s", i, r.status, r.body);
		cr_expect(r.closed, "head %zu: no Connection: close", i);
		cr_expect_eq(rawspop_wait_close(fd, IO_MS), 0, "head %zu: not closed", i);
		(void)b;
		close(fd);
	}
	/* Another method: 405 with Allow, and the connection stays. */
	int fd = http_open();
	rlen = 0;
	send_str(fd, "POST /ratelimit HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\r\nabcd"
		     "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
	read_resp(fd, &r);
	cr_assert_eq(r.status, 405);
	char v[64];
	cr_assert_str_eq(hdr(&r, "Allow", v, sizeof(v)), "GET, HEAD");
	read_resp(fd, &r);
	cr_assert_eq(r.status, 200, "the body was skipped, the next request answered");
	close(fd);
}

Test(http, head_timeout_and_busy_connections)
{
	struct resp r;
	int fd = http_open();

	/* A head that stalls past frame_timeout_ms (400 ms): 408, closed. */
	rlen = 0;
	send_str(fd, "GET /ratelimit?key=t&window=3600 HTTP/1.1\r\nHo");
	read_resp(fd, &r);
	cr_assert_eq(r.status, 408);
	cr_assert_eq(rawspop_wait_close(fd, IO_MS), 0);
	close(fd);

	/* Whole requests one after the other, each split mid-head, for more
	 * than 3 x 400 ms: the timer measures one head, so the connection
	 * lives on. A head's halves are 10 ms apart: 40 times below the bound,
	 * which a busy machine's late wake-ups never reach. */
	fd = http_open();
	rlen = 0;
	int64_t t0 = test_now_ms();
	for (int i = 0; test_now_ms() - t0 < 1500; i++) {
		send_str(fd, "GET /ratelimit?key=busy&window=3600 HTT");
		test_sleep_ms(10);
		send_str(fd, "P/1.1\r\nHost: t\r\n\r\n");
		read_resp(fd, &r);
		cr_assert_eq(r.status, 200, "request %d: %d", i, r.status);
		cr_assert_eq(body_num(&r, "rate"), i + 1);
		test_sleep_ms(10);
	}
	close(fd);
}

Test(http, http10_and_head)
{
	struct resp r;
	char v[64];
	int fd = http_open();

	rlen = 0;
	send_str(fd, "HEAD /ratelimit?key=h&window=3600 HTTP/1.0\r\n\r\n");
	/* A HEAD answer has the headers of a GET and no body. */
	for (;;) {
		rbuf[rlen] = '\0';
		if (strstr(rbuf, "\r\n\r\n"))
			break;
		cr_assert(fill(fd, rlen + 1));
	}
	cr_assert_eq(strncmp(rbuf, "HTTP/1.1 200 ", 13), 0, "%.40s", rbuf);
	cr_assert_not_null(strcasestr(rbuf, "Connection: close"), "1.0 without keep-alive closes");
	cr_assert_eq(rawspop_wait_close(fd, IO_MS), 0);
	close(fd);
	get("/ratelimit?key=h&window=3600&cost=0", &r);
	cr_assert_eq(body_num(&r, "rate"), 1, "HEAD counted like GET");

	fd = http_open();
	rlen = 0;
	send_str(fd, "GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
	read_resp(fd, &r);
	cr_assert_str_eq(hdr(&r, "Connection", v, sizeof(v)), "keep-alive");
	send_str(fd, "GET /healthz HTTP/1.0\r\n\r\n");
	read_resp(fd, &r);
	cr_assert(r.closed);
	close(fd);
}

Test(http_deny, status_from_config, .fini = test_agent_stop, .timeout = 60)
{
	struct resp r;

	test_agent_start1("{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"http_deny_status\": 403,"
		   " \"namespaces\": [{\"name\": \"default\", \"window_sizes\": [60], \"limit\": 0}]}");
	get("/ratelimit?key=d", &r);
	cr_assert_eq(r.status, 403, "%s", r.body);
	cr_assert_not_null(strstr(r.body, "\"exceeded\":true"));
}

/* sync_rate 0: each answer waits for Redis and carries the store's
 * total; pipelined requests are still answered in order while one waits,
 * and every hit is in the store once. */
static struct redis_server redis;

static void stop_all(void)
{
	test_agent_stop();
	redis_server_stop(&redis, 5000);
}

Test(http_store, synchronous_namespace_in_order, .fini = stop_all, .timeout = 60)
{
	char json[512], req[4096];
	size_t o = 0;
	struct resp r;

	cr_assert(redis_server_available(), "redis-server is not installed");
	cr_assert_eq(redis_server_start(&redis, 10000), 0, "redis-server: %s", redis.err);
	snprintf(json, sizeof(json),
		 "{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"namespaces\": [{\"name\": "
		 "\"default\", \"window_sizes\": [3600], \"sync_rate\": 0, \"strategy\": \"redis\","
		 " \"caller_limit\": \"any\","
		 " \"strategy_opts\": {\"host\": \"127.0.0.1\", \"port\": %d, \"timeout_ms\": 3000}}]}",
		 redis.port);
	test_agent_start1(json);
	int fd = http_open();
	rlen = 0;
	for (int i = 0; i < 10; i++)
		o += (size_t)snprintf(req + o, sizeof(req) - o,
				      "GET /ratelimit?key=s0&limit=8 HTTP/1.1\r\nHost: t\r\n\r\n");
	send_str(fd, req);
	for (int i = 1; i <= 10; i++) {
		read_resp(fd, &r);
		cr_assert_eq(body_num(&r, "rate"), i, "answer %d: %s", i, r.body);
		cr_assert_eq(r.status, i <= 8 ? 200 : 429);
	}
	close(fd);
	redisReply *rep = redis_server_command(&redis, "KEYS rl:*");
	cr_assert(rep && rep->type == REDIS_REPLY_ARRAY && rep->elements >= 1, "no counter in Redis");
	double total = 0;
	for (size_t i = 0; i < rep->elements; i++) {
		redisReply *v = redis_server_command(&redis, "HGET %s s0", rep->element[i]->str);
		if (v && v->type == REDIS_REPLY_STRING)
			total += strtod(v->str, NULL);
		if (v)
			freeReplyObject(v);
	}
	freeReplyObject(rep);
	cr_assert_eq(total, 10.0, "Redis holds %g hits, want 10", total);
}

/* GET /metrics sums the counters of every worker: hits over SPOP and HTTP
 * on many connections (spread over two workers), denials, bad requests,
 * open connections. */
Test(http_metrics, aggregated_over_workers, .fini = test_agent_stop, .timeout = 60)
{
	static struct rawspop_actions acts;
	struct sp_msg hit = { .key = "m", .window = 3600, .limit = 10 };
	struct resp r;
	int fds[6];

	start_workers(default_json, "2");
	for (int c = 0; c < 6; c++) {
		fds[c] = sp_open(test_agent.port);
		for (int i = 0; i < 3; i++)
			sp_notify1(fds[c], &hit, &acts);
	}
	for (int i = 0; i < 4; i++)
		get("/ratelimit?key=m&limit=10", &r);   /* hits 19..22: all over 10 */
	get("/ratelimit?key=m&window=7", &r);
	cr_assert_eq(r.status, 400);
	get("/metrics", &r);
	cr_assert_eq(r.status, 200);
	char v[128];
	cr_assert_str_eq(hdr(&r, "Content-Type", v, sizeof(v)),
			 "text/plain; version=0.0.4; charset=utf-8");
	metrics_page();
	cr_assert_not_null(strstr(rbuf, "\nspoa_ratelimit_hits_total{namespace=\"default\",front=\"spop\"} 18\n"),
			   "%s", rbuf);
	cr_assert_not_null(strstr(rbuf, "\nspoa_ratelimit_hits_total{namespace=\"default\",front=\"http\"} 4\n"),
			   "%s", rbuf);
	cr_assert_not_null(strstr(rbuf, "\nspoa_ratelimit_exceeded_total{namespace=\"default\"} 12\n"),
			   "%s", rbuf);
	cr_assert_not_null(strstr(rbuf, "\nspoa_ratelimit_errors_total{reason=\"bad_request\"} 1\n"),
			   "%s", rbuf);
	cr_assert_not_null(strstr(rbuf, "\nspoa_ratelimit_connections{front=\"spop\"} 6\n"), "%s",
			   rbuf);
	cr_assert_not_null(strstr(rbuf, "\nspoa_ratelimit_table_capacity 65536\n"), "%s", rbuf);
	for (int c = 0; c < 6; c++)
		close(fds[c]);
}

/* max_connections counts both fronts, and at the cap the longest idle
 * connection gives way whatever its front: four kept-alive HTTP clients
 * idle for over a second cannot keep an SPOP peer (HAProxy) out. */
Test(http_cap, idle_http_gives_way_to_spop, .fini = test_agent_stop, .timeout = 60)
{
	struct rawspop_hello_opts o = rawspop_hello_defaults();
	struct resp r;
	int h[4], fd, closed = 0;

	test_agent_start1("{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"max_connections\": 4,"
		   " \"http_max_connections\": 4}");
	for (int i = 0; i < 4; i++) {
		h[i] = http_open();
		rlen = 0;
		send_str(h[i], "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
		read_resp(h[i], &r);
		cr_assert_eq(r.status, 200);
	}
	/* No second of idleness needed: HTTP callers give way to HAProxy at
	 * once. */
	fd = sp_connect(test_agent.port);
	rawspop_buf_reset(&sp_wb);
	rawspop_hello(&sp_wb, &o);
	sp_send(fd);
	cr_assert_eq(rawspop_read_frame(fd, &sp_fr, IO_MS), RAWSPOP_READ_FRAME,
		     "the SPOP peer is served at the cap\n%s", test_agent_log_tail());
	sp_check_agent_hello(&sp_fr, o.max_frame_size);
	for (int i = 0; i < 4; i++) {
		struct pollfd pfd = { .fd = h[i], .events = POLLIN };
		char c;

		if (poll(&pfd, 1, 200) == 1 && recv(h[i], &c, 1, 0) <= 0)
			closed++;
		close(h[i]);
	}
	cr_assert_eq(closed, 1, "%d idle HTTP connections closed for one SPOP peer", closed);
	close(fd);
}

/* A namespace name is escaped where it is quoted: in the structured-field
 * strings of the RateLimit headers ('"' and '\' escaped, other than
 * printable ASCII as %XX) and in the JSON body. */
Test(http_names, escaped_in_headers_and_body, .fini = test_agent_stop, .timeout = 60)
{
	struct resp r;
	char v[256];

	test_agent_start1("{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"namespaces\": ["
		   "{\"name\": \"q\\\"t\\\\\u00e9\", \"window_sizes\": [60], \"caller_limit\": \"any\"}]}");
	get("/ratelimit?namespace=q%22t%5C%C3%A9&key=k&window=60&limit=5", &r);
	cr_assert_eq(r.status, 200, "%s", r.body);
	cr_assert_str_eq(hdr(&r, "RateLimit-Policy", v, sizeof(v)), "\"q\\\"t\\\\%C3%A9\";q=5;w=60");
	hdr(&r, "RateLimit", v, sizeof(v));
	cr_assert(strncmp(v, "\"q\\\"t\\\\%C3%A9\";r=4;t=", 21) == 0, "RateLimit: %s", v);
	cr_assert_not_null(strstr(r.body, ",\"namespace\":\"q\\\"t\\\\\u00e9\"}"), "%s", r.body);
}

/* Shadow mode through both fronts of a real agent: a shadow namespace
 * counts and decides as usual, never denies (HTTP 200 with
 * X-RateLimit-Shadow: exceeded, SPOP exceeded=false with
 * shadow_exceeded=true), and /metrics counts what it would have denied
 * apart from the denials. */
Test(http_shadow, never_denies, .fini = test_agent_stop, .timeout = 60)
{
	static struct rawspop_actions acts_buf, *acts = &acts_buf;
	char v[64];
	struct resp r;
	int fd;

	test_agent_start1("{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"namespaces\": ["
		   "{\"name\": \"default\", \"window_sizes\": [3600], \"caller_limit\": \"any\"},"
		   "{\"name\": \"trial\", \"window_sizes\": [3600], \"shadow\": true,"
		   " \"caller_limit\": \"any\"}]}");
	for (int i = 1; i <= 4; i++) {
		get("/ratelimit?key=s&limit=2&namespace=trial", &r);
		cr_assert_eq(r.status, 200, "hit %d: %s", i, r.body);
		cr_assert_eq(body_num(&r, "rate"), i);
		cr_assert_str_eq(hdr(&r, "X-RateLimit-Shadow", v, sizeof(v)), i > 2 ? "exceeded" : "ok");
		cr_assert_not_null(strstr(r.body, i > 2 ? "\"shadow_exceeded\":true"
							: "\"shadow_exceeded\":false"), "%s", r.body);
		cr_assert_not_null(strstr(r.body, "\"exceeded\":false"), "%s", r.body);
		cr_assert_str_empty(hdr(&r, "Retry-After", v, sizeof(v)));
	}
	/* The same key over SPOP: hit 5, still allowed, shadow_exceeded. */
	fd = sp_open(test_agent.port);
	sp_notify1(fd, &(struct sp_msg){ .key = "s", .window = 3600, .limit = 2, .ns = "trial" },
		   acts);
	const struct rawspop_action *a = rawspop_var_find(acts, "exceeded");
	cr_assert(a && a->value.type == RAWSPOP_T_BOOL && !a->value.b, "exceeded=false");
	a = rawspop_var_find(acts, "shadow_exceeded");
	cr_assert(a && a->value.type == RAWSPOP_T_BOOL && a->value.b, "shadow_exceeded=true");
	a = rawspop_var_find(acts, "rate");
	cr_assert(a && a->value.i == 5);
	cr_assert_null(rawspop_var_find(acts, "retry_after"));
	close(fd);
	/* An enforcing namespace still denies; metrics keep the two apart. */
	get("/ratelimit?key=s&limit=0", &r);
	cr_assert_eq(r.status, 429);
	metrics_page();
	cr_assert_not_null(strstr(rbuf, "\nspoa_ratelimit_shadow_exceeded_total{namespace=\"trial\"} 3\n"),
			   "%s", rbuf);
	cr_assert_not_null(strstr(rbuf, "\nspoa_ratelimit_exceeded_total{namespace=\"trial\"} 0\n"),
			   "%s", rbuf);
	cr_assert_not_null(strstr(rbuf, "\nspoa_ratelimit_exceeded_total{namespace=\"default\"} 1\n"),
			   "%s", rbuf);
}

/* state_file: a local-only agent stopped and started again counts on from
 * where it was (the file keeps the table), and a configuration that lists
 * its namespaces in another order still finds each one's counts. */
Test(http_state, counts_survive_a_restart, .fini = test_agent_stop, .timeout = 60)
{
	char dir[] = "/tmp/test_http_state-XXXXXX", json[512];
	struct resp r;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(json, sizeof(json),
		 "{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"state_file\": \"%s/state\","
		 " \"max_keys\": 1000, \"namespaces\": [{\"name\": \"a\", \"window_sizes\": [3600]},"
		 " {\"name\": \"b\", \"window_sizes\": [60, 3600]}]}", dir);
	test_agent_start1(json);
	for (int i = 1; i <= 3; i++) {
		get("/ratelimit?key=k&namespace=b&window=3600", &r);
		cr_assert_eq(body_num(&r, "rate"), i, "%s", r.body);
	}
	get("/ratelimit?key=k&namespace=a", &r);
	cr_assert_eq(agentproc_stop(&test_agent, 10000, false), 0, "exit 0 on SIGTERM");
	/* The same namespaces, listed the other way round. */
	snprintf(json, sizeof(json),
		 "{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"state_file\": \"%s/state\","
		 " \"max_keys\": 1000, \"namespaces\": [{\"name\": \"b\", \"window_sizes\": [3600, 60]},"
		 " {\"name\": \"a\", \"window_sizes\": [3600]}]}", dir);
	test_agent_start1(json);
	cr_assert_not_null(strstr(test_agent_log_tail(), "counts of the last run kept"), "%s", test_agent_log_tail());
	get("/ratelimit?key=k&namespace=b&window=3600", &r);
	cr_assert_eq(body_num(&r, "rate"), 4, "counted on: %s", r.body);
	get("/ratelimit?key=k&namespace=a", &r);
	cr_assert_eq(body_num(&r, "rate"), 2, "%s", r.body);
	get("/ratelimit?key=k&namespace=b&window=60", &r);
	cr_assert_eq(body_num(&r, "rate"), 1, "%s", r.body);
	cr_assert_eq(agentproc_stop(&test_agent, 10000, false), 0);
	/* Another max_keys: refused, clearly, the file left alone. */
	snprintf(json, sizeof(json),
		 "{\"state_file\": \"%s/state\", \"max_keys\": 2000}", dir);
	const char *const args[] = { "-w", "1", NULL };
	cr_assert_neq(agentproc_start(&test_agent, json, args, 3000), 0, "refused");
	cr_assert_not_null(strstr(test_agent_log_tail(), "made for max_keys 1000"), "%s", test_agent_log_tail());
	char path[64];
	snprintf(path, sizeof(path), "%s/state", dir);
	unlink(path);
	rmdir(dir);
}

/* The lines of the agent's log that hold s. */
static int log_count(const char *s)
{
	return (int)agentproc_log_lines(&test_agent, s, NULL);
}

/* Writes the agent's configuration file anew (its @HTTP_PORT@ filled). */
static void rewrite_config(const char *json)
{
	char port[16], text[2048];
	const char *at = strstr(json, "@HTTP_PORT@");
	FILE *f = fopen(test_agent.cfg_path, "w");

	cr_assert_not_null(f);
	snprintf(port, sizeof(port), "%d", test_agent.http_port);
	if (at)
		snprintf(text, sizeof(text), "%.*s%s%s", (int)(at - json), json, port, at + 11);
	else
		snprintf(text, sizeof(text), "%s", json);
	fputs(text, f);
	fclose(f);
}

/* SIGHUP reloads the file (docs/CONFIG.md, "Reload"): connections stay
 * open, a namespace whose windows change keeps its count (4 -> 5),
 * namespaces come and go, both workers apply it; a bad file is refused
 * with its field and reason and the running configuration keeps serving;
 * what cannot change live is reported. */
Test(http_reload, sighup_keeps_counts_and_connections, .fini = test_agent_stop, .timeout = 60)
{
	static struct rawspop_actions acts_buf, *acts = &acts_buf;
	struct resp r;

	start_workers("{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"namespaces\": ["
		      "{\"name\": \"api\", \"window_sizes\": [60], \"caller_limit\": \"any\"},"
		      "{\"name\": \"old\", \"window_sizes\": [60]}]}", "2");
	int keep = http_open();
	int spop = sp_open(test_agent.port);
	for (int i = 1; i <= 4; i++) {
		get("/ratelimit?key=k&namespace=api&limit=10", &r);
		cr_assert_eq(body_num(&r, "rate"), i);
	}
	rewrite_config("{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"log_level\": \"debug\","
		       " \"http_deny_status\": 403, \"max_keys\": 100000, \"namespaces\": ["
		       "{\"name\": \"new\", \"window_sizes\": [1]},"
		       "{\"name\": \"api\", \"window_sizes\": [3600, 60], \"caller_limit\": \"any\"}]}");
	cr_assert_eq(agentproc_signal(&test_agent, SIGHUP), 0);
	for (int i = 0; i < 300 && log_count("reloaded: 2 namespace(s)") < 2; i++)
		test_sleep_ms(10);
	cr_assert_eq(log_count("reloaded: 2 namespace(s)"), 2, "both workers reloaded:\n%s",
		     test_agent_log_tail());
	cr_assert_geq(log_count("max_keys changed in the file: kept until the agent restarts"), 1,
		      "%s", test_agent_log_tail());
	/* The connection opened before the reload still works, and the count
	 * of api's 60 s window goes on. */
	send_str(keep, "GET /ratelimit?key=k&namespace=api&window=60&limit=10 HTTP/1.1\r\nHost: t\r\n\r\n");
	rlen = 0;
	read_resp(keep, &r);
	cr_assert_eq(r.status, 200, "%s", r.body);
	cr_assert_eq(body_num(&r, "rate"), 5, "the count of 4 was kept: %s", r.body);
	close(keep);
	get("/ratelimit?key=k&namespace=api&window=3600", &r);
	cr_assert_eq(body_num(&r, "rate"), 1, "a new window starts at 0: %s", r.body);
	get("/ratelimit?key=k&namespace=new", &r);
	cr_assert_eq(r.status, 200, "a new namespace: %s", r.body);
	get("/ratelimit?key=k&namespace=old", &r);
	cr_assert_eq(r.status, 400, "a removed namespace: %s", r.body);
	get("/ratelimit?key=k&namespace=api&window=60&limit=1", &r);
	cr_assert_eq(r.status, 403, "http_deny_status changed live: %s", r.body);

	/* A bad file: refused, the running configuration serves on. */
	rewrite_config("{\"namespaces\": [{\"name\": \"api\", \"window_sizes\": [0]}]}");
	cr_assert_eq(agentproc_signal(&test_agent, SIGHUP), 0);
	for (int i = 0; i < 300 && log_count("reload refused") < 1; i++)
		test_sleep_ms(10);
	cr_assert_eq(log_count("reload refused"), 1, "%s", test_agent_log_tail());
	cr_assert_eq(log_count("namespaces[0].window_sizes"), 1, "field named:\n%s", test_agent_log_tail());
	get("/ratelimit?key=k&namespace=api&window=60&limit=10", &r);
	cr_assert_eq(body_num(&r, "rate"), 7, "%s", r.body);
	get("/ratelimit?key=k&namespace=new", &r);
	cr_assert_eq(r.status, 200);
	/* The SPOP connection opened before both reloads still counts. */
	sp_notify1(spop, &(struct sp_msg){ .key = "k", .window = 60, .ns = "api" }, acts);
	const struct rawspop_action *a = rawspop_var_find(acts, "rate");
	cr_assert(a && a->value.i == 8, "SPOP over the same connection");
	close(spop);
}

/* The digest key of long keys (docs/CONFIG.md, "Long keys") does not
 * change at a reload: one that adds a namespace syncing with a store,
 * while no key_secret is set and the key is this run's random one, is
 * refused with the reason, and a long key counts on (it restarted at 1:
 * its digest changed). With key_secret, the same reload applies and the
 * long key counts on too. */
Test(http_reload, long_keys_keep_their_digest_key, .fini = stop_all, .timeout = 60)
{
	static const char ns_api[] = "{\"name\": \"api\", \"window_sizes\": [3600]}";
	char key[151], target[256], json[1024], secret[64];
	struct resp r;

	cr_assert(redis_server_available(), "redis-server is not installed");
	cr_assert_eq(redis_server_start(&redis, 10000), 0, "redis-server: %s", redis.err);
	memset(key, 'k', sizeof(key) - 1);
	key[sizeof(key) - 1] = '\0';
	snprintf(target, sizeof(target), "/ratelimit?key=%s&namespace=api", key);
	for (int with_secret = 0; with_secret <= 1; with_secret++) {
		snprintf(secret, sizeof(secret), "%s", with_secret
			 ? "\"key_secret\": \"sixteen bytes or more\", " : "");
		snprintf(json, sizeof(json), "{%s\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", "
			 "\"namespaces\": [%s]}", secret, ns_api);
		test_agent_start1(json);
		for (int i = 1; i <= 2; i++) {
			get(target, &r);
			cr_assert_eq(body_num(&r, "rate"), i, "%s", r.body);
		}
		snprintf(json, sizeof(json), "{%s\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", "
			 "\"namespaces\": [%s, {\"name\": \"shared\", \"window_sizes\": [60], "
			 "\"sync_rate\": 1, \"strategy\": \"redis\", \"strategy_opts\": "
			 "{\"host\": \"127.0.0.1\", \"port\": %d}}]}", secret, ns_api, redis.port);
		rewrite_config(json);
		cr_assert_eq(agentproc_signal(&test_agent, SIGHUP), 0);
		if (!with_secret) {
			for (int i = 0; i < 300 && log_count("reload refused") < 1; i++)
				test_sleep_ms(10);
			cr_assert_eq(log_count("reload refused"), 1, "%s", test_agent_log_tail());
			cr_assert_eq(log_count("namespaces[1] (\"shared\") syncs with a store and "
					       "no key_secret is set"), 1, "the reason:\n%s", test_agent_log_tail());
			get("/ratelimit?key=k&namespace=shared", &r);
			cr_assert_eq(r.status, 400, "the running configuration is kept: %s", r.body);
		} else {
			for (int i = 0; i < 300; i++) {
				get("/ratelimit?key=k&namespace=shared", &r);
				if (r.status == 200)
					break;
				test_sleep_ms(10);
			}
			cr_assert_eq(r.status, 200, "with key_secret the reload applies: %s\n%s",
				     r.body, test_agent_log_tail());
			cr_assert_eq(log_count("reload refused"), 0, "%s", test_agent_log_tail());
		}
		get(target, &r);
		cr_assert_eq(body_num(&r, "rate"), 3, "the long key counts on (key_secret: %s): "
			     "%s", with_secret ? "yes" : "no", r.body);
		test_agent_stop();
	}
}

/* ---- HEAD answers as GET does ---- */

#define HEAD_CHECK "Authorization: Bearer check-token-0123456789\r\n"
#define HEAD_ADMIN "Authorization: Bearer admin-token-0123456789\r\n"

/* One kind of answer: a target (its "%s", if any, takes a fresh key each
 * time: hk1, hk2, ...), a header line or "", the GETs of the target that
 * bring the key to the state under test (before), the status expected. */
struct head_case {
	const char *target, *auth;
	int before, status;
};

/* method on a new connection (Connection: close) into *r; the answer of a
 * HEAD must end with its head: no byte follows it before the close. */
static void head_request(const char *method, const char *target, const char *auth,
			 struct resp *r)
{
	char req[2048];
	int fd = http_open();

	rlen = 0;
	snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: t\r\n%sConnection: close\r\n\r\n",
		 method, target, auth);
	send_str(fd, req);
	if (strcmp(method, "HEAD") != 0) {
		read_resp(fd, r);
		close(fd);
		return;
	}
	while (fill(fd, rlen + 1))
		;
	rbuf[rlen] = '\0';
	close(fd);
	memset(r, 0, sizeof(*r));
	const char *end = strstr(rbuf, "\r\n\r\n"), *hstart = strstr(rbuf, "\r\n");
	cr_assert(end && sscanf(rbuf, "HTTP/1.1 %d ", &r->status) == 1, "HEAD %s: %s", target,
		  rbuf);
	cr_assert_eq((size_t)(end + 4 - rbuf), rlen, "HEAD %s: a body after the head: %s", target,
		     end + 4);
	snprintf(r->headers, sizeof(r->headers), "%.*s", (int)(end + 2 - (hstart + 2)),
		 hstart + 2);
}

/* The case's request as method, on a fresh key brought to its state. */
static void head_case_run(const struct head_case *k, const char *method, struct resp *r)
{
	static int fresh;
	char key[32], target[512];

	snprintf(key, sizeof(key), "hk%d", ++fresh);
	snprintf(target, sizeof(target), k->target, key);
	for (int i = 0; i < k->before; i++)
		head_request("GET", target, k->auth, r);
	head_request(method, target, k->auth, r);
}

/* HEAD between two GETs in the same state: once the GETs agree (the clock
 * did not move RateLimit's t= or Retry-After between them), the HEAD has
 * their status and exactly their header lines, Content-Length included. */
static void head_as_get(const struct head_case *k)
{
	struct resp g1, h, g2;

	for (int try = 0; try < 10; try++) {
		head_case_run(k, "GET", &g1);
		head_case_run(k, "HEAD", &h);
		head_case_run(k, "GET", &g2);
		if (g1.status != g2.status || strcmp(g1.headers, g2.headers) != 0)
			continue;
		cr_assert_eq(g1.status, k->status, "%s: %d %s", k->target, g1.status, g1.body);
		cr_assert_eq(h.status, g1.status, "%s: HEAD %d, GET %d", k->target, h.status,
			     g1.status);
		cr_assert_str_eq(h.headers, g1.headers, "%s: HEAD and GET differ", k->target);
		return;
	}
	cr_assert_fail("%s: two GETs never agreed:\n%s\n%s", k->target, g1.headers, g2.headers);
}

/* For every kind of answer of the front, HEAD answers GET's status and
 * header lines (RFC 9110 9.3.2), and no body: checks admitted, denied (a
 * problem document), denied by one of several limits, shadow; errors;
 * the admin endpoints with and without their token; /healthz, /metrics;
 * then, on a table with no room, a key refused. */
Test(http_head, same_headers_as_get, .fini = test_agent_stop, .timeout = 120)
{
	static const struct head_case cases[] = {
		{ "/ratelimit?key=%s", HEAD_CHECK, 0, 200 },
		{ "/ratelimit?key=%s", HEAD_CHECK, 2, 429 },
		{ "/ratelimit?key=%s&namespace=multi", HEAD_CHECK, 0, 200 },
		{ "/ratelimit?key=%s&namespace=multi", HEAD_CHECK, 1, 429 },
		{ "/ratelimit?key=%s&namespace=trial", HEAD_CHECK, 0, 200 },
		{ "/ratelimit?key=%s&cost=3", HEAD_CHECK, 0, 400 },
		{ "/ratelimit?key=%s&namespace=nope", HEAD_CHECK, 0, 400 },
		{ "/ratelimit?key=%s", "", 0, 401 },
		{ "/nowhere", HEAD_CHECK, 0, 404 },
		{ "/healthz", "", 0, 200 },
		{ "/metrics", "", 0, 200 },
		{ "/keys?namespace=default&key=hk1", HEAD_ADMIN, 0, 200 },  /* the first check's */
		{ "/keys?namespace=default&key=%s", "", 0, 401 },
		{ "/keys?namespace=default&key=%s", HEAD_CHECK, 0, 403 },
		{ "/keys?namespace=nope&key=%s", HEAD_ADMIN, 0, 404 },
		{ "/top?namespace=default", HEAD_ADMIN, 0, 200 },
	};
	static const char json[] =
		"{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\","
		" \"http_token\": \"check-token-0123456789\","
		" \"http_admin_token\": \"admin-token-0123456789\", \"namespaces\": ["
		"{\"name\": \"default\", \"window_sizes\": [3600], \"limit\": 2},"
		"{\"name\": \"multi\", \"window_sizes\": [60, 3600],"
		" \"limit\": {\"60\": 1, \"3600\": 5}},"
		"{\"name\": \"trial\", \"window_sizes\": [3600], \"limit\": 0, \"shadow\": true}]}";
	struct resp r;
	char target[64];
	int i;

	test_agent_start1(json);
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
		head_as_get(&cases[k]);

	/* A table with no room left (on_table_full "deny"): a new key is
	 * refused and denied, an error answer of its own. */
	test_agent_stop();
	test_agent_start1("{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"max_keys\": 16,"
			  " \"namespaces\": [{\"name\": \"default\", \"window_sizes\": [3600],"
			  " \"on_table_full\": \"deny\"}]}");
	for (i = 0; i < 1000; i++) {
		snprintf(target, sizeof(target), "/ratelimit?key=fill%d", i);
		get(target, &r);
		if (strstr(r.body, "counter table full"))
			break;
	}
	cr_assert_lt(i, 1000, "the table never filled");
	head_as_get(&(struct head_case){ "/ratelimit?key=%s", "", 0, 429 });
}
