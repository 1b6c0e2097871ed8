/*
 * http_answer.h - the HTTP front's answers as text (agent/http_front.c
 * routes, this writes): the status line and the common headers, the JSON
 * bodies, a /ratelimit decision as RateLimit structured fields and a body
 * (a problem document when denied); and the escaping of names and keys
 * inside quoted strings, shared with the admin endpoints (http_admin.c).
 *
 * Answers are appended to the connection's write buffer, where the caller
 * made room for HTTP_RESP_MAX bytes (a larger body: that much more).
 */
#ifndef HTTP_ANSWER_H
#define HTTP_ANSWER_H

#include <stdbool.h>
#include <stddef.h>

struct http_conn;
struct rl_decision;

#define HTTP_RESP_MAX   2048            /* room one answer needs (8 limits) */

/* What an answer needs to know of its request. */
struct http_ctx {
	bool head;          /* HEAD: no body */
	bool keep_alive;
	int minor;
};

/* The status line, the common headers, extra headers (already formatted,
 * each ending with CRLF), the body. A HEAD (x->head) gets every header of
 * the GET, Content-Length the body's, and no body: callers build the same
 * answer for both. Without keep-alive the connection is marked closing. */
void http_answer(struct http_conn *c, const struct http_ctx *x, int status, const char *ctype,
		 const char *extra, const char *body);
/* {"error":"<why>"} with the status (why: our own text, nothing to escape). */
void http_answer_error(struct http_conn *c, const struct http_ctx *x, int status,
		       const char *why);
/* The answer of a /ratelimit decision: its parts[0..np), one per limit it
 * was checked against. */
void http_answer_decision(struct http_conn *c, const struct http_ctx *x,
			  const struct rl_decision *parts, size_t np);

/* The IETF rate limit fields and problem document of a decision
 * (draft-ietf-httpapi-ratelimit-headers, RFC 9457), written once for every
 * front that answers them: /ratelimit here, Envoy's response headers
 * (agent/rls_decide.c). A policy's name comes from the caller: part k of
 * parts, several as the caller said (names that must tell limits apart);
 * written to out[0..cap) (NUL-terminated), returned. */
#define HTTP_POLICY_NAME_MAX 96
typedef const char *(*http_policy_name_fn)(const void *ctx, const struct rl_decision *part,
					   size_t k, bool several, char *out, size_t cap);

/* The value of RateLimit-Policy (policy: `"NAME";q=LIMIT;w=WINDOW` each)
 * or of RateLimit (`"NAME";r=REMAINING;t=RESET` each) over the parts of
 * parts[0..np) that have a limit, joined by ", ", appended to
 * out[cap] at *o as http_put() appends. Returns how many it lists (0:
 * leave the field out). */
size_t http_ratelimit_field(char *out, size_t cap, size_t *o, bool policy,
			    const struct rl_decision *parts, size_t np, bool several,
			    http_policy_name_fn names, const void *ctx);

/* The members of a quota-exceeded problem document (type, title, status,
 * violated-policies: the exceeded parts' names), without braces, appended
 * as above. */
void http_problem_members(char *out, size_t cap, size_t *o, int status,
			  const struct rl_decision *parts, size_t np, bool several,
			  http_policy_name_fn names, const void *ctx);

/* How http_escape() writes a byte outside printable ASCII ('"' and '\\'
 * are always escaped with a backslash). */
enum http_esc {
	HTTP_ESC_JSON_UTF8,   /* as it is: a JSON string of a name the configuration
	                         checked (no control characters, UTF-8) */
	HTTP_ESC_JSON_BYTES,  /* \u00XX: a JSON string of any bytes (keys) */
	HTTP_ESC_SF,          /* %XX: an sf-string (RFC 8941) cannot hold it */
};

/* Appends s[0..n) as the inside of a quoted string at out[*o], out holding
 * cap bytes: byte by byte while the longest escape and the NUL fit, then
 * cut; out stays NUL-terminated. */
void http_escape(char *out, size_t cap, size_t *o, const char *s, size_t n, enum http_esc how);

/* Appends printf-style to out[cap] at *o; *o stays <= cap - 1 (the
 * text cut, never past the buffer). */
__attribute__((format(printf, 4, 5)))
void http_put(char *out, size_t cap, size_t *o, const char *fmt, ...);

#endif /* HTTP_ANSWER_H */
