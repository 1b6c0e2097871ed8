/*
 * http_parse.h - a small strict HTTP/1.x request parser for the HTTP
 * front: request line and headers, no allocation, no state between calls
 * (the caller passes the whole head each time; http_head_end() finds where
 * a head ends without parsing it, so a head that trickles in is scanned
 * once). What it accepts:
 *
 *   request line   METHOD SP /origin-form SP HTTP/1.0|HTTP/1.1 CRLF
 *   header         token ":" OWS value OWS CRLF   (no obs-fold)
 *   end of head    CRLF
 *
 * Lines end with CRLF only; control characters are refused; HTTP/1.1
 * needs exactly one Host; Content-Length is digits only (duplicates must
 * agree, at most HTTP_BODY_MAX, a POST's HTTP_POST_MAX); Transfer-Encoding is not implemented;
 * Authorization, X-RateLimit-Key and X-RateLimit-Namespace at most once.
 * Why a request is refused comes back as an HTTP status and a reason.
 */
#ifndef HTTP_PARSE_H
#define HTTP_PARSE_H

#include <stdbool.h>
#include <stddef.h>

#define HTTP_LINE_MAX    8192    /* request line, CRLF included */
#define HTTP_HEAD_MAX    16384   /* request line and headers */
#define HTTP_HEADERS_MAX 64      /* header fields */
#define HTTP_BODY_MAX    8192    /* a body is read and ignored */
#define HTTP_POST_MAX    65536   /* a POST's body (/json: agent/rls_json.h), read */

enum http_method {
	HTTP_GET = 0,
	HTTP_HEAD,
	HTTP_DELETE,                 /* the admin endpoint DELETE /keys */
	HTTP_POST,                   /* POST /json */
	HTTP_PUT,                    /* the admin endpoint PUT /limits */
	HTTP_OTHER,                  /* parsed; the router answers 405 */
};

struct http_request {
	enum http_method method;
	const char *path;            /* from '/' to before '?', raw */
	size_t path_len;
	const char *query;           /* after '?', raw; NULL when none */
	size_t query_len;
	int minor;                   /* HTTP/1.minor: 0 or 1 */
	bool keep_alive;             /* after this request */
	size_t head_len;             /* bytes of the head, final CRLF included */
	/* The fields the routes read, as sent (OWS trimmed); NULL when absent.
	 * Each may appear once: a second one is a bad request. */
	const char *authorization;
	size_t authorization_len;
	const char *rl_key;          /* X-RateLimit-Key: opaque bytes */
	size_t rl_key_len;
	const char *rl_namespace;    /* X-RateLimit-Namespace */
	size_t rl_namespace_len;
	size_t body_len;             /* Content-Length: to skip, or a POST's to read */
};

/* Where the head in buf[0..len) ends (the offset after its empty line),
 * 0 when it is not complete yet, or -1 when it cannot be a head within
 * the limits (*status 414 or 431, *why set). Scanning starts at *scanned
 * (0 at first) and stores where to resume: call again as bytes arrive. */
long http_head_end(const char *buf, size_t len, size_t *scanned, int *status, const char **why);

/* Parses a complete head buf[0..head_len). Returns 0 with *req filled, or
 * -1 with *status (400, 413, 501, 505) and *why. */
int http_parse_head(const char *buf, size_t head_len, struct http_request *req, int *status,
		    const char **why);

/* Iterates "name=value&..." pairs of a query: returns 1 with the raw
 * (still percent-encoded) name and value, 0 at the end. An empty pair
 * ("&&") is skipped; a pair without '=' has an empty value. */
struct http_query_iter {
	const char *p, *end;
};

void http_query_init(struct http_query_iter *it, const char *query, size_t len);
int http_query_next(struct http_query_iter *it, const char **name, size_t *name_len,
		    const char **value, size_t *value_len);

/* Percent-decodes src[0..len) into dst (at most cap bytes): "%XX" (hex,
 * either case) is a byte, '+' a space. Returns the length, or -1 for a bad
 * escape or no room. */
long http_pct_decode(const char *src, size_t len, char *dst, size_t cap);

#endif /* HTTP_PARSE_H */
