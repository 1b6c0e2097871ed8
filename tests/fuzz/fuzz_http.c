/*
 * fuzz_http.c - libFuzzer target over the HTTP request parser
 * (agent/http_parse.c).
 *
 * The input is a stream of requests as a socket delivers it: heads are
 * found with http_head_end() both in one call and byte by byte (the two
 * must agree), each head is parsed, its query pairs iterated and
 * percent-decoded. Invariants: every pointer the parser returns lies in
 * the input, lengths add up, a refusal has a 4xx/5xx status and a reason.
 *
 *   clang -fsanitize=fuzzer,address,undefined -I. tests/fuzz/fuzz_http.c agent/http_parse.c
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/http_parse.h"

#define CHECK(cond) do { if (!(cond)) abort(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool inside(const char *p, size_t n, const char *buf, size_t len)
{
	return n == 0 || (p >= buf && p + n <= buf + len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data;
	size_t off = 0;

	while (off < size) {
		size_t scanned = 0, scanned2 = 0;
		int st = 0, st2 = 0;
		const char *why = NULL, *why2 = NULL;
		long end = http_head_end(buf + off, size - off, &scanned, &st, &why);
		long end2 = 0;

		/* The same answer when the bytes come one by one. */
		for (size_t n = 1; n <= size - off && end2 == 0; n++)
			end2 = http_head_end(buf + off, n, &scanned2, &st2, &why2);
		CHECK(end == end2 || (end == 0 && end2 == 0));
		if (end < 0) {
			CHECK(st == 414 || st == 431);
			CHECK(why != NULL);
			return 0;
		}
		if (end == 0)
			return 0;
		CHECK((size_t)end <= size - off && end >= 4);
		struct http_request req;
		if (http_parse_head(buf + off, (size_t)end, &req, &st, &why) < 0) {
			CHECK(st >= 400 && st <= 599 && why != NULL);
			return 0;
		}
		CHECK(req.head_len == (size_t)end);
		CHECK(inside(req.path, req.path_len, buf + off, (size_t)end));
		CHECK(req.path_len >= 1 && req.path[0] == '/');
		CHECK(!req.query || inside(req.query, req.query_len, buf + off, (size_t)end));
		CHECK(req.minor == 0 || req.minor == 1);
		CHECK(req.body_len <= HTTP_BODY_MAX);
		/* The fields the routes read: inside the head, no control bytes
		 * but tab (a key taken from X-RateLimit-Key is opaque, never a
		 * line break), no surrounding blanks. */
		const char *fv[3] = { req.authorization, req.rl_key, req.rl_namespace };
		size_t fl[3] = { req.authorization_len, req.rl_key_len, req.rl_namespace_len };
		for (int i = 0; i < 3; i++) {
			if (!fv[i]) {
				CHECK(fl[i] == 0);
				continue;
			}
			CHECK(inside(fv[i], fl[i], buf + off, (size_t)end));
			for (size_t j = 0; j < fl[i]; j++)
				CHECK(((unsigned char)fv[i][j] >= 0x20 || fv[i][j] == '\t') &&
				      fv[i][j] != 0x7f);
			CHECK(fl[i] == 0 || (fv[i][0] != ' ' && fv[i][0] != '\t' &&
					     fv[i][fl[i] - 1] != ' ' && fv[i][fl[i] - 1] != '\t'));
		}

		struct http_query_iter it;
		const char *n, *v;
		size_t nl, vl;
		char dec[HTTP_LINE_MAX];
		http_query_init(&it, req.query, req.query_len);
		while (http_query_next(&it, &n, &nl, &v, &vl) == 1) {
			CHECK(inside(n, nl, req.query, req.query_len));
			CHECK(inside(v, vl, req.query, req.query_len));
			long k = http_pct_decode(v, vl, dec, sizeof(dec));
			CHECK(k < 0 || (size_t)k <= vl);
		}
		off += (size_t)end + (req.body_len < size - off - (size_t)end
					      ? req.body_len : size - off - (size_t)end);
	}
	return 0;
}
