/*
 * http_answer.c - the HTTP front's answers as text (http_answer.h): the
 * status line and headers, error bodies, a /ratelimit decision as
 * RateLimit-Policy / RateLimit fields (draft-ietf-httpapi-ratelimit-headers)
 * and a JSON body, a denied GET as a problem document (RFC 9457); the
 * escaping of names and keys in quoted strings.
 */
#include "agent/http_answer.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "agent/config.h"
#include "agent/decide.h"
#include "agent/reserve.h"
#include "agent/http_front.h"


/* Appends formatted text to the write buffer (the caller made room for
 * HTTP_RESP_MAX bytes). */
static void out(struct http_conn *c, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf((char *)c->s.wbuf + c->s.wlen, c->s.wcap - c->s.wlen, fmt, ap);
	va_end(ap);
	if (n > 0)
		c->s.wlen += (size_t)n < c->s.wcap - c->s.wlen ? (size_t)n : c->s.wcap - c->s.wlen - 1;
}

static const char *reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 413: return "Content Too Large";
	case 414: return "URI Too Long";
	case 429: return "Too Many Requests";
	case 431: return "Request Header Fields Too Large";
	case 501: return "Not Implemented";
	case 503: return "Service Unavailable";
	case 505: return "HTTP Version Not Supported";
	default: return status < 500 ? "Client Error" : "Server Error";
	}
}

void http_answer(struct http_conn *c, const struct http_ctx *x, int status, const char *ctype,
		 const char *extra, const char *body)
{
	size_t blen = strlen(body);

	out(c, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
	       "Cache-Control: no-store\r\n%s%s\r\n", status, reason(status), ctype, blen, extra,
	    !x->keep_alive ? "Connection: close\r\n"
			   : x->minor == 0 ? "Connection: keep-alive\r\n" : "");
	if (!x->head)
		out(c, "%s", body);
	if (!x->keep_alive)
		c->closing = true;
}

void http_answer_error(struct http_conn *c, const struct http_ctx *x, int status,
		       const char *why)
{
	char body[512];
	size_t o = 0;

	/* A reason may quote a configured name: escaped as one. */
	http_put(body, sizeof(body), &o, "{\"error\":\"");
	http_escape(body, sizeof(body) - 3, &o, why, strlen(why), HTTP_ESC_JSON_UTF8);
	http_put(body, sizeof(body), &o, "\"}\n");
	http_answer(c, x, status, "application/json", "", body);
}

void http_escape(char *out, size_t cap, size_t *o, const char *s, size_t n, enum http_esc how)
{
	static const char lower[] = "0123456789abcdef", upper[] = "0123456789ABCDEF";
	/* The longest escape of a byte, and the NUL. */
	size_t room = how == HTTP_ESC_JSON_BYTES ? 7 : how == HTTP_ESC_SF ? 4 : 3;

	for (size_t i = 0; i < n && *o + room <= cap; i++) {
		unsigned char ch = (unsigned char)s[i];

		if (ch == '"' || ch == '\\') {
			out[(*o)++] = '\\';
			out[(*o)++] = (char)ch;
		} else if ((ch < 0x20 || ch >= 0x7f) && how != HTTP_ESC_JSON_UTF8) {
			const char *hex = how == HTTP_ESC_SF ? upper : lower;

			if (how == HTTP_ESC_SF) {
				out[(*o)++] = '%';
			} else {
				memcpy(out + *o, "\\u00", 4);
				*o += 4;
			}
			out[(*o)++] = hex[ch >> 4];
			out[(*o)++] = hex[ch & 15];
		} else {
			out[(*o)++] = (char)ch;
		}
	}
	out[*o] = '\0';
}

/* Appends to a bounded buffer; *o stays <= cap - 1, whatever is cut. */
void http_put(char *out, size_t cap, size_t *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (*o + 1 >= cap)
		return;
	va_start(ap, fmt);
	n = vsnprintf(out + *o, cap - *o, fmt, ap);
	va_end(ap);
	if (n > 0)
		*o += (size_t)n < cap - *o ? (size_t)n : cap - *o - 1;
}

/* A part's policy name (http_policy_name_fn): the namespace's, and with
 * several limits in the decision its window too ("api-60"). */
static const char *policy_name(const void *ctx, const struct rl_decision *r, size_t k,
			       bool several, char *out, size_t cap)
{
	(void)k;
	snprintf(out, cap, several ? "%s-%u" : "%s",
		 rl_namespace_def((const struct rl *)ctx, r->ns)->name, r->window);
	return out;
}

/* names(ctx, part, k, several)'s name as the inside of an sf-string. */
static void put_policy(char *out, size_t cap, size_t *o, http_policy_name_fn names,
		       const void *ctx, const struct rl_decision *parts, size_t k, bool several)
{
	char name[HTTP_POLICY_NAME_MAX];

	names(ctx, &parts[k], k, several, name, sizeof(name));
	http_escape(out, cap, o, name, strlen(name), HTTP_ESC_SF);
}

size_t http_ratelimit_field(char *out, size_t cap, size_t *o, bool policy,
			    const struct rl_decision *parts, size_t np, bool several,
			    http_policy_name_fn names, const void *ctx)
{
	size_t i = 0;

	for (size_t k = 0; k < np; k++) {
		if (!parts[k].has_limit)
			continue;
		http_put(out, cap, o, "%s\"", i++ ? ", " : "");
		put_policy(out, cap, o, names, ctx, parts, k, several);
		if (policy)
			http_put(out, cap, o, "\";q=%lld;w=%u", (long long)parts[k].limit,
				 parts[k].window);
		else
			http_put(out, cap, o, "\";r=%lld;t=%lld", (long long)parts[k].remaining,
				 (long long)parts[k].reset);
	}
	return i;
}

void http_problem_members(char *out, size_t cap, size_t *o, int status,
			  const struct rl_decision *parts, size_t np, bool several,
			  http_policy_name_fn names, const void *ctx)
{
	/* RFC 9457 with the ratelimit draft's problem type. */
	http_put(out, cap, o, "\"type\":\"https://iana.org/assignments/"
		 "http-problem-types#quota-exceeded\","
		 "\"title\":\"Request cannot be satisfied as assigned "
		 "quota has been exceeded\",\"status\":%d,"
		 "\"violated-policies\":[", status);
	for (size_t k = 0, i = 0; k < np; k++)
		if (parts[k].exceeded) {
			http_put(out, cap, o, "%s\"", i++ ? "," : "");
			put_policy(out, cap, o, names, ctx, parts, k, several);
			http_put(out, cap, o, "\"");
		}
	http_put(out, cap, o, "]");
}

/* The body speaks for the most restrictive; the
 * RateLimit fields list every limit (draft-ietf-httpapi-ratelimit-headers);
 * a denied check is a problem+json document (quota-exceeded) naming the
 * policies it violated. A HEAD gets the same status and headers as the
 * GET would, Content-Type and Content-Length included (RFC 9110 9.3.2):
 * the body is built alike and only left unsent (http_answer). */
/* The reservation of parts[0..np) (one request), if it holds one, into
 * the header and the body. Out of line: its buffer is not the plain
 * answer's. */
static __attribute__((noinline)) void http_put_reservation(struct http_conn *c, char *hdr,
							    size_t hcap, size_t *h, char *body,
							    size_t bcap, size_t *b,
							    const struct rl_decision *parts, size_t np)
{
	char id[RESERVE_TEXT_MAX + 1];

	if (!reserve_text(c->s.env->decide->rl, parts, np, 0, id))
		return;
	http_put(body, bcap, b, ",\"reservation\":\"%s\"", id);
	http_put(hdr, hcap, h, "X-RateLimit-Reservation: %s\r\n", id);
}

void http_answer_decision(struct http_conn *c, const struct http_ctx *x,
			  const struct rl_decision *parts, size_t np)
{
	const struct config *cfg = c->s.env->cfg;
	char hdr[HTTP_RESP_MAX], body[HTTP_RESP_MAX];
	size_t h = 0, b = 0;
	struct rl_decision folded;
	const struct rl_decision *r = &parts[0];
	const char *error = parts[0].error;

	if (np > 1) {
		decide_fold(parts, np, &folded, &error);
		r = &folded;
	}
	hdr[0] = '\0';
	for (size_t k = 0; k < np; k++)
		if (parts[k].error && !parts[k].refused) {
			http_answer_error(c, x, 400, parts[k].error);
			return;
		}
	if (r->error) {
		/* No room for a new key: on_table_full "deny" denies, else the
		 * request passes, uncounted; the reason is in the body. */
		if (r->exceeded)
			snprintf(hdr, sizeof(hdr), "Retry-After: %lld\r\n", (long long)r->retry_after);
		if (r->shadow_exceeded)
			snprintf(hdr, sizeof(hdr), "X-RateLimit-Shadow: exceeded\r\n");
		snprintf(body, sizeof(body), "{\"exceeded\":%s,%s\"error\":\"%s\"}\n",
			 r->exceeded ? "true" : "false",
			 r->shadow_exceeded ? "\"shadow_exceeded\":true," : "", r->error);
		http_answer(c, x, r->exceeded ? cfg->http_deny_status : 200, "application/json",
			    hdr, body);
		return;
	}
	const char *name = rl_namespace_def(c->s.env->rl, r->ns)->name;
	const struct rl *rl = c->s.env->rl;
	char jname[2 * NS_NAME_MAX];
	bool problem = r->exceeded;
	size_t jlen = 0;

	http_put(hdr, sizeof(hdr), &h, "RateLimit-Policy: ");
	if (http_ratelimit_field(hdr, sizeof(hdr), &h, true, parts, np, np > 1, policy_name,
				 rl) > 0) {
		http_put(hdr, sizeof(hdr), &h, "\r\nRateLimit: ");
		http_ratelimit_field(hdr, sizeof(hdr), &h, false, parts, np, np > 1, policy_name, rl);
		http_put(hdr, sizeof(hdr), &h, "\r\n");
	} else {
		h = 0;
		hdr[0] = '\0';
	}
	if (r->has_limit) {
		if (r->exceeded)
			http_put(hdr, sizeof(hdr), &h, "Retry-After: %lld\r\n",
				 (long long)r->retry_after);
		if (r->shadow)
			http_put(hdr, sizeof(hdr), &h, "X-RateLimit-Shadow: %s\r\n",
				 r->shadow_exceeded ? "exceeded" : "ok");
		http_put(body, sizeof(body), &b, "{");
		if (problem) {
			http_problem_members(body, sizeof(body), &b, cfg->http_deny_status, parts, np,
					     np > 1, policy_name, rl);
			http_put(body, sizeof(body), &b, ",");
		}
		http_put(body, sizeof(body), &b, "\"exceeded\":%s,\"rate\":%lld,\"remaining\":%lld,"
			 "\"reset\":%lld,\"limit\":%lld,\"window\":%u",
			 r->exceeded ? "true" : "false", (long long)r->rate,
			 (long long)r->remaining, (long long)r->reset, (long long)r->limit,
			 r->window);
		if (r->exceeded)
			http_put(body, sizeof(body), &b, ",\"retry_after\":%lld",
				 (long long)r->retry_after);
	} else {
		http_put(body, sizeof(body), &b,
			 "{\"exceeded\":false,\"rate\":%lld,\"reset\":%lld,\"window\":%u",
			 (long long)r->rate, (long long)r->reset, r->window);
	}
	if (r->degraded)
		http_put(body, sizeof(body), &b, ",\"degraded\":true");
	if (r->delayed_ms > 0)
		http_put(body, sizeof(body), &b, ",\"delayed_ms\":%lld",
			 (long long)r->delayed_ms);
	if (error)      /* another limit of the decision found no room */
		http_put(body, sizeof(body), &b, ",\"error\":\"%s\"", error);
	if (r->shadow && r->has_limit)
		http_put(body, sizeof(body), &b, ",\"shadow_exceeded\":%s",
			 r->shadow_exceeded ? "true" : "false");
	/* A concurrency limit's lease (given back by POST /release): in the
	 * body, and in a field for nginx's auth_request_set. */
	char lease[ALGO_LEASE_LEN + 1];
	for (size_t k = 0; k < np; k++)
		if (decide_lease_text(&parts[k], lease)) {
			http_put(body, sizeof(body), &b, ",\"lease\":\"%s\"", lease);
			http_put(hdr, sizeof(hdr), &h, "X-RateLimit-Lease: %s\r\n", lease);
			break;
		}
	/* A reservation (settled by POST /settle): in the body, and in a
	 * field for nginx's auth_request_set. */
	for (size_t k = 0; k < np; k++)
		if (parts[k].reserve) {
			http_put_reservation(c, hdr, sizeof(hdr), &h, body, sizeof(body), &b, parts, np);
			break;
		}
	http_escape(jname, sizeof(jname), &jlen, name, strlen(name), HTTP_ESC_JSON_UTF8);
	http_put(body, sizeof(body), &b, ",\"namespace\":\"%s\"}\n", jname);
	http_answer(c, x, r->exceeded ? cfg->http_deny_status : 200,
		    problem ? "application/problem+json" : "application/json", hdr, body);
}
