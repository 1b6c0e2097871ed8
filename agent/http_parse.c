/*
 * http_parse.c - strict HTTP/1.x request heads (see http_parse.h).
 */
#include "agent/http_parse.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>

long http_head_end(const char *buf, size_t len, size_t *scanned, int *status, const char **why)
{
	size_t i = *scanned > 3 ? *scanned - 3 : 0;
	size_t lim = len < HTTP_HEAD_MAX ? len : HTTP_HEAD_MAX;

	/* The request line alone over its limit: 414, as servers say; the
	 * same whether the head came whole or a byte at a time (found by
	 * fuzz_http: a whole head with a long line ended before). */
	if (len >= HTTP_LINE_MAX && !memchr(buf, '\n', HTTP_LINE_MAX)) {
		*status = 414;
		*why = "request line too long";
		return -1;
	}
	for (; i + 4 <= lim; i++) {
		const char *p = memchr(buf + i, '\r', lim - i);

		if (!p)
			break;
		i = (size_t)(p - buf);
		if (i + 4 <= lim && memcmp(p, "\r\n\r\n", 4) == 0)
			return (long)(i + 4);
	}
	*scanned = lim;
	if (len >= HTTP_HEAD_MAX) {
		*status = 431;
		*why = "request header too large";
		return -1;
	}
	return 0;
}

/* RFC 9110 tchar. */
static bool is_tchar(unsigned char c)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
		return true;
	return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int fail(int *status, const char **why, int st, const char *reason)
{
	*status = st;
	*why = reason;
	return -1;
}

static bool name_is(const char *name, size_t n, const char *lit)
{
	return strlen(lit) == n && strncasecmp(name, lit, n) == 0;
}

/* Does a comma-separated token list contain tok (case-insensitive)? */
static bool list_has(const char *v, size_t n, const char *tok)
{
	size_t tl = strlen(tok), i = 0;

	while (i < n) {
		while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
			i++;
		size_t s = i;
		while (i < n && v[i] != ',')
			i++;
		size_t e = i;
		while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
			e--;
		if (e - s == tl && strncasecmp(v + s, tok, tl) == 0)
			return true;
	}
	return false;
}

/* The request line buf[0..n) (without CRLF). */
static int parse_request_line(const char *buf, size_t n, struct http_request *req, int *status,
			      const char **why)
{
	size_t i = 0, m;

	while (i < n && is_tchar((unsigned char)buf[i]))
		i++;
	m = i;
	if (m == 0 || i >= n || buf[i] != ' ')
		return fail(status, why, 400, "bad request line");
	if (m == 3 && memcmp(buf, "GET", 3) == 0)
		req->method = HTTP_GET;
	else if (m == 4 && memcmp(buf, "HEAD", 4) == 0)
		req->method = HTTP_HEAD;
	else if (m == 6 && memcmp(buf, "DELETE", 6) == 0)
		req->method = HTTP_DELETE;
	else if (m == 3 && memcmp(buf, "PUT", 3) == 0)
		req->method = HTTP_PUT;
	else if (m == 4 && memcmp(buf, "POST", 4) == 0)
		req->method = HTTP_POST;
	else
		req->method = HTTP_OTHER;
	i++;
	size_t t = i;
	while (i < n && buf[i] != ' ') {
		unsigned char c = (unsigned char)buf[i];
		if (c <= 0x20 || c >= 0x7f)
			return fail(status, why, 400, "bad character in the request target");
		i++;
	}
	if (i == t || i >= n)
		return fail(status, why, 400, "bad request line");
	if (buf[t] != '/')
		return fail(status, why, 400, "the request target must start with '/'");
	const char *q = memchr(buf + t, '?', i - t);
	const char *fragment = memchr(buf + t, '#', i - t);
	if (fragment)
		return fail(status, why, 400, "a fragment in the request target");
	req->path = buf + t;
	req->path_len = q ? (size_t)(q - (buf + t)) : i - t;
	req->query = q ? q + 1 : NULL;
	req->query_len = q ? (size_t)(buf + i - (q + 1)) : 0;
	i++;
	if (n - i != 8 || memcmp(buf + i, "HTTP/", 5) != 0 || buf[i + 6] != '.' ||
	    buf[i + 5] < '0' || buf[i + 5] > '9' || buf[i + 7] < '0' || buf[i + 7] > '9')
		return fail(status, why, 400, "bad HTTP version");
	if (buf[i + 5] != '1' || buf[i + 7] > '1')
		return fail(status, why, 505, "HTTP version not supported");
	req->minor = buf[i + 7] - '0';
	return 0;
}

int http_parse_head(const char *buf, size_t head_len, struct http_request *req, int *status,
		    const char **why)
{
	const char *end = buf + head_len, *line = buf;
	const char *eol = memchr(line, '\n', head_len);
	bool have_len = false, conn_close = false, conn_keep = false;
	size_t hosts = 0, nheaders = 0;

	memset(req, 0, sizeof(*req));
	req->head_len = head_len;
	if (!eol || eol == line || eol[-1] != '\r')
		return fail(status, why, 400, "bad request line");
	if ((size_t)(eol + 1 - line) > HTTP_LINE_MAX)
		return fail(status, why, 414, "request line too long");
	if (parse_request_line(line, (size_t)(eol - 1 - line), req, status, why) < 0)
		return -1;
	for (line = eol + 1; line < end; line = eol + 1) {
		eol = memchr(line, '\n', (size_t)(end - line));
		if (!eol || eol == line || eol[-1] != '\r')
			return fail(status, why, 400, "a line not ended by CRLF");
		size_t n = (size_t)(eol - 1 - line);
		if (n == 0)
			break;          /* the empty line: end of the head */
		if (++nheaders > HTTP_HEADERS_MAX)
			return fail(status, why, 431, "too many header fields");
		if (line[0] == ' ' || line[0] == '\t')
			return fail(status, why, 400, "obsolete line folding");
		size_t k = 0;
		while (k < n && is_tchar((unsigned char)line[k]))
			k++;
		if (k == 0 || k >= n || line[k] != ':')
			return fail(status, why, 400, "bad header field name");
		const char *name = line;
		size_t name_len = k++;
		while (k < n && (line[k] == ' ' || line[k] == '\t'))
			k++;
		size_t vend = n;
		while (vend > k && (line[vend - 1] == ' ' || line[vend - 1] == '\t'))
			vend--;
		for (size_t j = k; j < vend; j++) {
			unsigned char c = (unsigned char)line[j];
			if ((c < 0x20 && c != '\t') || c == 0x7f)
				return fail(status, why, 400, "control character in a header field");
		}
		const char *v = line + k;
		size_t vl = vend - k;
		if (name_is(name, name_len, "host")) {
			hosts++;
		} else if (name_is(name, name_len, "content-length")) {
			size_t x = 0;
			if (vl == 0 || vl > 9)
				return fail(status, why, 400, "bad Content-Length");
			for (size_t j = 0; j < vl; j++) {
				if (v[j] < '0' || v[j] > '9')
					return fail(status, why, 400, "bad Content-Length");
				x = x * 10 + (size_t)(v[j] - '0');
			}
			if (have_len && x != req->body_len)
				return fail(status, why, 400, "conflicting Content-Length");
			have_len = true;
			req->body_len = x;
		} else if (name_is(name, name_len, "transfer-encoding")) {
			return fail(status, why, 501, "Transfer-Encoding not implemented");
		} else if (name_is(name, name_len, "authorization")) {
			if (req->authorization)
				return fail(status, why, 400, "more than one Authorization");
			req->authorization = v;
			req->authorization_len = vl;
		} else if (name_is(name, name_len, "x-ratelimit-key")) {
			if (req->rl_key)
				return fail(status, why, 400, "more than one X-RateLimit-Key");
			req->rl_key = v;
			req->rl_key_len = vl;
		} else if (name_is(name, name_len, "x-ratelimit-namespace")) {
			if (req->rl_namespace)
				return fail(status, why, 400, "more than one X-RateLimit-Namespace");
			req->rl_namespace = v;
			req->rl_namespace_len = vl;
		} else if (name_is(name, name_len, "connection")) {
			conn_close |= list_has(v, vl, "close");
			conn_keep |= list_has(v, vl, "keep-alive");
		}
	}
	if (req->minor == 1 && hosts != 1)
		return fail(status, why, 400, hosts ? "more than one Host" : "missing Host");
	if (hosts > 1)
		return fail(status, why, 400, "more than one Host");
	if (req->body_len > (req->method == HTTP_POST ? HTTP_POST_MAX : HTTP_BODY_MAX))
		return fail(status, why, 413, "request body too large");
	req->keep_alive = req->minor == 1 ? !conn_close : (conn_keep && !conn_close);
	return 0;
}

void http_query_init(struct http_query_iter *it, const char *query, size_t len)
{
	it->p = query;
	it->end = query ? query + len : NULL;
}

int http_query_next(struct http_query_iter *it, const char **name, size_t *name_len,
		    const char **value, size_t *value_len)
{
	while (it->p && it->p < it->end) {
		const char *amp = memchr(it->p, '&', (size_t)(it->end - it->p));
		const char *pend = amp ? amp : it->end;
		const char *s = it->p;

		it->p = amp ? amp + 1 : it->end;
		if (pend == s)
			continue;
		const char *eq = memchr(s, '=', (size_t)(pend - s));
		*name = s;
		*name_len = (size_t)((eq ? eq : pend) - s);
		*value = eq ? eq + 1 : pend;
		*value_len = eq ? (size_t)(pend - (eq + 1)) : 0;
		return 1;
	}
	return 0;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

long http_pct_decode(const char *src, size_t len, char *dst, size_t cap)
{
	size_t o = 0;

	for (size_t i = 0; i < len; i++) {
		char c = src[i];
		if (c == '%') {
			int hi, lo;
			if (i + 2 >= len)
				return -1;
			hi = hexval(src[i + 1]);
			lo = hexval(src[i + 2]);
			if (hi < 0 || lo < 0)
				return -1;
			c = (char)(hi * 16 + lo);
			i += 2;
		} else if (c == '+') {
			c = ' ';
		}
		if (o >= cap)
			return -1;
		dst[o++] = c;
	}
	return (long)o;
}
