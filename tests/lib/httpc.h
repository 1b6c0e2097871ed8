/*
 * httpc.h - a small HTTP/1.1 client for the tests of the HTTP front: one
 * response at a time off a buffer that keeps what arrived after it
 * (pipelined answers), headers looked up by name, numbers read out of the
 * JSON body. No allocation; the caller owns the socket.
 */
#ifndef TESTS_HTTPC_H
#define TESTS_HTTPC_H

#include <stdbool.h>
#include <stddef.h>

/* What arrived on one connection and was not read yet. */
struct httpc_buf {
	char data[65536];
	size_t len;
};

/* One parsed response. */
struct httpc_resp {
	int status;
	char headers[2048];        /* raw header lines, each ending with CRLF */
	char body[1024];           /* cut at 1 KiB */
	bool closed;               /* it said Connection: close */
};

/* Reads until b holds n bytes or more; false on EOF, error or timeout. */
bool httpc_fill(int fd, struct httpc_buf *b, size_t n, int timeout_ms);

/* Reads one response (status line, headers, Content-Length body) and
 * drops it from b. Returns 0, or -1 (*why says what was wrong) on EOF,
 * timeout or a malformed answer. */
int httpc_read(int fd, struct httpc_buf *b, struct httpc_resp *r, int timeout_ms,
	       const char **why);

/* The value of a response header (the first of that name), or "". */
const char *httpc_header(const struct httpc_resp *r, const char *name, char *out, size_t len);

/* A number in the JSON body ("name":N), or -1. */
long long httpc_body_num(const struct httpc_resp *r, const char *name);

/* Sends all of s[0..n); 0 or -1. */
int httpc_send(int fd, const char *s, size_t n);

/* A request on a new connection to 127.0.0.1:port, its answer in *r:
 * "GET target" with the extra header lines (each ending with CRLF, may
 * be NULL) and Connection: close. Returns 0 or -1 (*why). */
int httpc_get(int port, const char *target, const char *headers, struct httpc_resp *r,
	      int timeout_ms, const char **why);

/* GET /metrics on 127.0.0.1:port, the whole page: the value of the
 * sample whose text (name, labels and a space) is given, or -1. */
long long httpc_metric(int port, const char *sample, int timeout_ms);

/* The same with another method ("PUT", "DELETE", "POST": a header line
 * "Content-Length: 0\r\n" in headers for an empty body). */
int httpc_request(int port, const char *method, const char *target, const char *headers,
		  struct httpc_resp *r, int timeout_ms, const char **why);

#endif /* TESTS_HTTPC_H */
