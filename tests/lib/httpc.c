/*
 * httpc.c - the tests' HTTP client (httpc.h).
 */
#include "tests/lib/httpc.h"
#include "tests/lib/rawspop.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

bool httpc_fill(int fd, struct httpc_buf *b, size_t n, int timeout_ms)
{
	if (n >= sizeof(b->data))
		return false;
	while (b->len < n) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		if (poll(&pfd, 1, timeout_ms) != 1)
			return false;
		ssize_t k = recv(fd, b->data + b->len, sizeof(b->data) - 1 - b->len, 0);
		if (k <= 0)
			return false;
		b->len += (size_t)k;
	}
	return true;
}

static int fail(const char **why, const char *what)
{
	if (why)
		*why = what;
	return -1;
}

int httpc_read(int fd, struct httpc_buf *b, struct httpc_resp *r, int timeout_ms,
	       const char **why)
{
	char *end;

	memset(r, 0, sizeof(*r));
	for (;;) {
		b->data[b->len] = '\0';
		end = strstr(b->data, "\r\n\r\n");
		if (end)
			break;
		if (!httpc_fill(fd, b, b->len + 1, timeout_ms))
			return fail(why, "no complete answer head");
	}
	size_t head = (size_t)(end + 4 - b->data);
	if (sscanf(b->data, "HTTP/1.1 %d ", &r->status) != 1)
		return fail(why, "bad status line");
	char *hstart = strstr(b->data, "\r\n") + 2;
	snprintf(r->headers, sizeof(r->headers), "%.*s", (int)(end + 2 - hstart), hstart);
	char cl[32];
	if (!httpc_header(r, "Content-Length", cl, sizeof(cl))[0])
		return fail(why, "no Content-Length");
	size_t blen = strtoul(cl, NULL, 10);
	if (!httpc_fill(fd, b, head + blen, timeout_ms))
		return fail(why, "short body");
	snprintf(r->body, sizeof(r->body), "%.*s", (int)blen, b->data + head);
	memmove(b->data, b->data + head + blen, b->len - head - blen);
	b->len -= head + blen;
	r->closed = strcasestr(r->headers, "Connection: close") != NULL;
	return 0;
}

const char *httpc_header(const struct httpc_resp *r, const char *name, char *out, size_t len)
{
	size_t nl = strlen(name);
	const char *p = r->headers;

	out[0] = '\0';
	while (p && *p) {
		const char *e = strstr(p, "\r\n");
		if (!e)
			break;
		if (strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
			const char *v = p + nl + 1;
			while (v < e && *v == ' ')
				v++;
			snprintf(out, len, "%.*s", (int)(e - v), v);
			return out;
		}
		p = e + 2;
	}
	return out;
}

long long httpc_body_num(const struct httpc_resp *r, const char *name)
{
	char pat[64];

	snprintf(pat, sizeof(pat), "\"%s\":", name);
	const char *p = strstr(r->body, pat);
	return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

int httpc_send(int fd, const char *s, size_t n)
{
	return rawspop_send(fd, s, n);
}

int httpc_request(int port, const char *method, const char *target, const char *headers,
		  struct httpc_resp *r, int timeout_ms, const char **why)
{
	static struct httpc_buf b;
	char req[8192];
	int fd = rawspop_connect(port, timeout_ms), rc;

	if (fd < 0)
		return fail(why, "connect failed");
	b.len = 0;
	int n = snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: t\r\n%sConnection: close\r\n\r\n",
			 method, target, headers ? headers : "");
	if (n < 0 || (size_t)n >= sizeof(req) || httpc_send(fd, req, (size_t)n) < 0) {
		close(fd);
		return fail(why, "send failed");
	}
	rc = httpc_read(fd, &b, r, timeout_ms, why);
	close(fd);
	return rc;
}

int httpc_get(int port, const char *target, const char *headers, struct httpc_resp *r,
	      int timeout_ms, const char **why)
{
	return httpc_request(port, "GET", target, headers, r, timeout_ms, why);
}

long long httpc_metric(int port, const char *sample, int timeout_ms)
{
	static char page[1 << 16];
	size_t len = 0;
	int fd = rawspop_connect(port, timeout_ms);
	const char *req = "GET /metrics HTTP/1.0\r\n\r\n", *p;

	if (fd < 0 || httpc_send(fd, req, strlen(req)) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t k;

		if (poll(&pfd, 1, timeout_ms) != 1 || len + 1 >= sizeof(page))
			break;
		k = recv(fd, page + len, sizeof(page) - 1 - len, 0);
		if (k <= 0)
			break;
		len += (size_t)k;
	}
	close(fd);
	page[len] = '\0';
	p = strstr(page, sample);
	return p ? atoll(p + strlen(sample)) : -1;
}
