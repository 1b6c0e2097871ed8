/*
 * test_http_parse.c - the HTTP request parser (agent/http_parse.h): heads
 * given whole, byte by byte and truncated; every refusal with its status;
 * the limits; query pairs and percent-decoding.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "agent/http_parse.h"

/* Feeds s as the bytes arrive, one at a time: the head must be found
 * exactly when its last byte comes, never before. Returns its end. */
static long head_bytewise(const char *s, size_t len)
{
	size_t scanned = 0;
	int status = 0;
	const char *why = NULL;

	for (size_t n = 1; n <= len; n++) {
		long end = http_head_end(s, n, &scanned, &status, &why);
		if (end != 0)
			return end;
	}
	return 0;
}

static int parse(const char *s, struct http_request *req, int *status, const char **why)
{
	size_t scanned = 0;
	long end = http_head_end(s, strlen(s), &scanned, status, why);

	if (end <= 0)
		return end == 0 ? -2 : -1;
	return http_parse_head(s, (size_t)end, req, status, why);
}

Test(http_parse, whole_and_bytewise)
{
	static const char req1[] =
		"GET /ratelimit?key=alice&limit=10 HTTP/1.1\r\nHost: x\r\n"
		"User-Agent: t\r\n\r\nGET /next HTTP/1.1\r\n";
	size_t head = strstr(req1, "\r\n\r\n") + 4 - req1;
	struct http_request r;
	int st = 0;
	const char *why = NULL;

	cr_assert_eq(head_bytewise(req1, strlen(req1)), (long)head);
	cr_assert_eq(parse(req1, &r, &st, &why), 0, "%d %s", st, why);
	cr_assert_eq(r.method, HTTP_GET);
	cr_assert_eq(r.path_len, 10);
	cr_assert_eq(memcmp(r.path, "/ratelimit", 10), 0);
	cr_assert_eq(r.query_len, strlen("key=alice&limit=10"));
	cr_assert_eq(memcmp(r.query, "key=alice&limit=10", r.query_len), 0);
	cr_assert_eq(r.minor, 1);
	cr_assert(r.keep_alive);
	cr_assert_eq(r.head_len, head);
	cr_assert_eq(r.body_len, 0);

	/* Truncated anywhere before the empty line: not complete. */
	for (size_t n = 0; n < head; n++) {
		size_t scanned = 0;
		cr_assert_eq(http_head_end(req1, n, &scanned, &st, &why), 0, "at %zu", n);
	}
}

Test(http_parse, versions_and_connection)
{
	struct http_request r;
	int st;
	const char *why;

	cr_assert_eq(parse("HEAD /healthz HTTP/1.0\r\n\r\n", &r, &st, &why), 0, "%s", why);
	cr_assert_eq(r.method, HTTP_HEAD);
	cr_assert_null(r.query);
	cr_assert_not(r.keep_alive, "1.0 closes by default");
	cr_assert_eq(parse("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", &r, &st, &why), 0);
	cr_assert(r.keep_alive);
	cr_assert_eq(parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: te, close\r\n\r\n", &r, &st,
			   &why), 0);
	cr_assert_not(r.keep_alive);
	cr_assert_eq(parse("DELETE /x HTTP/1.1\r\nHost: a\r\n\r\n", &r, &st, &why), 0);
	cr_assert_eq(r.method, HTTP_DELETE, "the admin endpoint's method");
	cr_assert_eq(parse("PUT /x HTTP/1.1\r\nHost: a\r\n\r\n", &r, &st, &why), 0);
	cr_assert_eq(r.method, HTTP_PUT, "the admin endpoint PUT /limits");
	cr_assert_eq(parse("PATCH /x HTTP/1.1\r\nHost: a\r\n\r\n", &r, &st, &why), 0);
	cr_assert_eq(r.method, HTTP_OTHER, "parsed; the router answers 405");
	cr_assert_eq(parse("DELETEX /x HTTP/1.1\r\nHost: a\r\n\r\n", &r, &st, &why), 0);
	cr_assert_eq(r.method, HTTP_OTHER);
	cr_assert_eq(parse("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
			   "Content-Length: 5\r\n\r\n", &r, &st, &why), 0);
	cr_assert_eq(r.body_len, 5);
	cr_assert_eq(parse("GET /?a=1 HTTP/1.1\r\nHost:a\r\nX:  spaced value \t\r\n\r\n", &r, &st,
			   &why), 0, "%s", why);
}

Test(http_parse, refusals)
{
	static const struct {
		const char *req;
		int status;
		const char *why;
	} cases[] = {
		{ "GET / HTTP/1.1\r\n\r\n", 400, "missing Host" },
		{ "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "more than one Host" },
		{ "GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505, "HTTP version not supported" },
		{ "GET / HTTP/1.2\r\nHost: a\r\n\r\n", 505, "HTTP version not supported" },
		{ "GET / HTTX/1.1\r\nHost: a\r\n\r\n", 400, "bad HTTP version" },
		{ "GET / HTTP/1.1 \r\nHost: a\r\n\r\n", 400, "bad HTTP version" },
		{ "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400, "bad request line" },
		{ " GET / HTTP/1.1\r\nHost: a\r\n\r\n", 400, "bad request line" },
		{ "GET http://x/ HTTP/1.1\r\nHost: a\r\n\r\n", 400, "must start with '/'" },
		{ "GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n", 400, "fragment" },
		{ "GET /\x01 HTTP/1.1\r\nHost: a\r\n\r\n", 400, "bad character" },
		{ "GET / HTTP/1.1\nHost: a\r\n\r\n", 400, "bad request line" },
		{ "GET / HTTP/1.1\r\nHost: a\nX: y\r\n\r\n", 400, "not ended by CRLF" },
		{ "GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", 400, "obsolete line folding" },
		{ "GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400, "bad header field name" },
		{ "GET / HTTP/1.1\r\n: a\r\n\r\n", 400, "bad header field name" },
		{ "GET / HTTP/1.1\r\nHost: a\x7f\r\n\r\n", 400, "control character" },
		{ "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400, "bad Content-Length" },
		{ "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400,
		  "conflicting Content-Length" },
		{ "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 9999\r\n\r\n", 413, "too large" },
		{ "GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", 501,
		  "Transfer-Encoding" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct http_request r;
		int st = 0;
		const char *why = "";

		cr_expect_eq(parse(cases[i].req, &r, &st, &why), -1, "case %zu accepted", i);
		cr_expect_eq(st, cases[i].status, "case %zu: status %d", i, st);
		cr_expect(why && strstr(why, cases[i].why), "case %zu: reason \"%s\"", i, why);
	}
}

Test(http_parse, limits)
{
	static char big[HTTP_HEAD_MAX + 64];
	size_t scanned = 0;
	int st = 0;
	const char *why = NULL;

	/* A request line that never ends: 414 once the line limit is passed. */
	memcpy(big, "GET /", 5);
	memset(big + 5, 'a', HTTP_LINE_MAX);
	cr_assert_eq(http_head_end(big, HTTP_LINE_MAX - 1, &scanned, &st, &why), 0);
	cr_assert_eq(http_head_end(big, HTTP_LINE_MAX + 5, &scanned, &st, &why), -1);
	cr_assert_eq(st, 414);

	/* Headers that never end: 431 at the head limit. */
	size_t o = (size_t)snprintf(big, sizeof(big), "GET / HTTP/1.1\r\nHost: a\r\n");
	while (o + 8 < sizeof(big)) {
		memcpy(big + o, "X: yy\r\n", 7);
		o += 7;
	}
	scanned = 0;
	cr_assert_eq(http_head_end(big, HTTP_HEAD_MAX - 1, &scanned, &st, &why), 0);
	cr_assert_eq(http_head_end(big, HTTP_HEAD_MAX, &scanned, &st, &why), -1);
	cr_assert_eq(st, 431);

	/* Too many header fields in a head under the size limit. */
	o = (size_t)snprintf(big, sizeof(big), "GET / HTTP/1.1\r\nHost: a\r\n");
	for (int i = 0; i < HTTP_HEADERS_MAX; i++)
		o += (size_t)snprintf(big + o, sizeof(big) - o, "X%d: y\r\n", i);
	o += (size_t)snprintf(big + o, sizeof(big) - o, "\r\n");
	struct http_request r;
	cr_assert_eq(http_parse_head(big, o, &r, &st, &why), -1);
	cr_assert_eq(st, 431);
	cr_assert_str_eq(why, "too many header fields");
}

Test(http_parse, query_pairs)
{
	static const char q[] = "key=a%20b&&limit=5&flag&=x&window=60";
	struct http_query_iter it;
	const char *n, *v;
	size_t nl, vl;
	char names[8][16], values[8][16];
	int count = 0;

	http_query_init(&it, q, strlen(q));
	while (http_query_next(&it, &n, &nl, &v, &vl) == 1 && count < 8) {
		snprintf(names[count], sizeof(names[0]), "%.*s", (int)nl, n);
		snprintf(values[count], sizeof(values[0]), "%.*s", (int)vl, v);
		count++;
	}
	cr_assert_eq(count, 5);
	cr_assert_str_eq(names[0], "key");
	cr_assert_str_eq(values[0], "a%20b");
	cr_assert_str_eq(names[1], "limit");
	cr_assert_str_eq(names[2], "flag");
	cr_assert_str_eq(values[2], "");
	cr_assert_str_eq(names[3], "");
	cr_assert_str_eq(values[3], "x");
	cr_assert_str_eq(values[4], "60");
	http_query_init(&it, NULL, 0);
	cr_assert_eq(http_query_next(&it, &n, &nl, &v, &vl), 0);
}

Test(http_parse, percent_decoding)
{
	char out[16];

	cr_assert_eq(http_pct_decode("a%20b+c", 7, out, sizeof(out)), 5);
	cr_assert_eq(memcmp(out, "a b c", 5), 0);
	cr_assert_eq(http_pct_decode("%2f%2F%00", 9, out, sizeof(out)), 3);
	cr_assert_eq(memcmp(out, "//\0", 3), 0);
	cr_assert_eq(http_pct_decode("%", 1, out, sizeof(out)), -1);
	cr_assert_eq(http_pct_decode("%4", 2, out, sizeof(out)), -1);
	cr_assert_eq(http_pct_decode("%g0", 3, out, sizeof(out)), -1);
	cr_assert_eq(http_pct_decode("abc", 3, out, 2), -1, "no room");
	cr_assert_eq(http_pct_decode("", 0, out, sizeof(out)), 0);
}
