/*
 * config.c - the agent's configuration: built-in defaults, a JSON file read
 * with jansson, then whatever the command line overrides, then one
 * config_check() over the result. docs/CONFIG.md documents every key.
 *
 * A deployment with a typo must fail at startup, not run on a default, so
 * unknown keys are errors (with a "did you mean"), duplicate keys are errors
 * (JSON_REJECT_DUPLICATES), and every number is range-checked before it is
 * narrowed into the struct. Every error names the file, the JSON path of the
 * value ("namespaces[1].window_sizes[0]") and what was expected.
 *
 * config_load() parses into a copy and replaces *c only on success, so a
 * failed load leaves the caller's config, and what it owns, untouched.
 * The only allocations a config owns are the namespaces' strategy_opts.
 */
#include "agent/config.h"
#include "agent/log.h"
#include "spop/spop-t.h"
#include "strategies/strategy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define CFG_LISTEN_DEFAULT     "127.0.0.1:12345"
#define CFG_WORKERS_MAX        64
#define CFG_MAX_KEYS_DEFAULT   65536
#define CFG_MAX_KEYS_MIN       16
#define CFG_MAX_KEYS_MAX       (1LL << 26)
#define CFG_PREFIX_DEFAULT     "ratelimit"
#define CFG_FRAME_MAX          1048576          /* per-connection buffers are this big */
#define CFG_CONN_DEFAULT       10000
#define CFG_CONN_MAX           1000000
#define CFG_IDLE_DEFAULT_MS    60000
#define CFG_FTIMEOUT_DEFAULT_MS 5000
#define CFG_TIMEOUT_MAX_MS     86400000         /* one day */
#define CFG_COLLECT_DEFAULT_US 20               /* collect_us */
#define CFG_COLLECT_MAX_US     1000
#define CFG_NS_DEFAULT         "default"
#define CFG_SECRET_MIN         16               /* key_secret bytes */
#define CFG_BUFMEM_DEFAULT     (256ull << 20)   /* max_buffer_memory */
#define CFG_BUFMEM_MIN         (1ull << 20)
#define CFG_BUFMEM_MAX         (64ull << 30)
#define CFG_HTTP_BUFMEM_MIN    (64ull << 10)    /* http_max_buffer_memory */
#define CFG_SHOW_MAX           64               /* a value quoted in a message */
#define CFG_SUN_PATH_MAX       (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)

#define CFG_LISTEN_WHAT "\"HOST:PORT\", \"[IPV6]:PORT\" or \"unix:/PATH\""

static const char *const cfg_scope_names[SPOP_SCOPE_COUNT] = {
	[SPOP_SCOPE_PROC] = "proc",
	[SPOP_SCOPE_SESS] = "sess",
	[SPOP_SCOPE_TXN]  = "txn",
	[SPOP_SCOPE_REQ]  = "req",
	[SPOP_SCOPE_RES]  = "res",
};


/* Same order as enum log_level; log_level_parse() is the authority. */
static const char *const cfg_log_level_names[LOG_LEVEL_COUNT] = {
	[LOG_ERR] = "err", [LOG_WARN] = "warn", [LOG_INFO] = "info", [LOG_DEBUG] = "debug",
};

_Static_assert(sizeof(CFG_LISTEN_DEFAULT) <= CONFIG_ADDR_MAX, "listen default too long");
_Static_assert(sizeof(CFG_PREFIX_DEFAULT) <= CONFIG_PREFIX_MAX, "prefix default too long");
_Static_assert(NS_WINDOW_MAX <= UINT32_MAX, "window sizes are uint32_t");
_Static_assert(CFG_TIMEOUT_MAX_MS <= UINT32_MAX, "timeouts are uint32_t");

/* ------------------------------------------------------------------------
 * The parser's state: where we are in the document, where errors go.
 */

struct cfg_parser {
	struct config_err *err;
	bool ns_replaced;          /* the file listed namespaces: tmp owns new ones */
	size_t len;                /* strlen(path) */
	char path[sizeof(((struct config_err *)0)->path)];
};

static void cfg_parser_init(struct cfg_parser *p, struct config_err *err)
{
	p->err = err;
	p->ns_replaced = false;
	p->len = 0;
	p->path[0] = '\0';
}

/* Appends a component to the path and returns the length before it, for
 * cfg_path_pop(). A path too long for err->path is cut: it is for humans. */
__attribute__((format(printf, 2, 3)))
static size_t cfg_path_push(struct cfg_parser *p, const char *fmt, ...)
{
	size_t mark = p->len;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(p->path + p->len, sizeof(p->path) - p->len, fmt, ap);
	va_end(ap);
	if (n > 0)
		p->len += (size_t)n;
	if (p->len >= sizeof(p->path))
		p->len = sizeof(p->path) - 1;
	return mark;
}

static size_t cfg_path_key(struct cfg_parser *p, const char *key)
{
	return p->len ? cfg_path_push(p, ".%s", key) : cfg_path_push(p, "%s", key);
}

static void cfg_path_pop(struct cfg_parser *p, size_t mark)
{
	p->len = mark;
	p->path[mark] = '\0';
}

/* Fills err with the current path and the message; returns -1. */
__attribute__((format(printf, 2, 3)))
static int cfg_fail(struct cfg_parser *p, const char *fmt, ...)
{
	va_list ap;

	memcpy(p->err->path, p->path, p->len + 1);
	va_start(ap, fmt);
	vsnprintf(p->err->msg, sizeof(p->err->msg), fmt, ap);
	va_end(ap);
	return -1;
}

/* s[0..n) in double quotes, cut to fit, unprintable bytes as '?'. */
static void cfg_quote(const char *s, size_t n, char *buf, size_t len)
{
	size_t i, o = 0, room = len - 5;   /* quotes, "...", NUL */

	buf[o++] = '"';
	for (i = 0; i < n && i < room - 1; i++) {
		unsigned char ch = (unsigned char)s[i];

		buf[o++] = (ch < 0x20 || ch == 0x7f || ch == '"' || ch == '\\') ? '?' : (char)ch;
	}
	if (i < n) {
		memcpy(buf + o, "...", 3);
		o += 3;
	}
	buf[o++] = '"';
	buf[o] = '\0';
}

/* What a JSON value is, for "expected X, got Y": its type, and the value
 * itself when it is a scalar. */
static void cfg_show(const json_t *v, char *buf, size_t len)
{
	char q[CFG_SHOW_MAX];

	switch (json_typeof(v)) {
	case JSON_OBJECT:
		snprintf(buf, len, "an object");
		break;
	case JSON_ARRAY:
		snprintf(buf, len, "an array");
		break;
	case JSON_STRING:
		cfg_quote(json_string_value(v), json_string_length(v), q, sizeof(q));
		snprintf(buf, len, "string %s", q);
		break;
	case JSON_INTEGER:
		snprintf(buf, len, "integer %lld", (long long)json_integer_value(v));
		break;
	case JSON_REAL:
		snprintf(buf, len, "real %g", json_real_value(v));
		break;
	case JSON_TRUE:
		snprintf(buf, len, "true");
		break;
	case JSON_FALSE:
		snprintf(buf, len, "false");
		break;
	case JSON_NULL:
	default:
		snprintf(buf, len, "null");
		break;
	}
}

/* "expected <what>, got <v>". Returns -1. */
static int cfg_fail_type(struct cfg_parser *p, const json_t *v, const char *what)
{
	char got[CFG_SHOW_MAX + 16];

	cfg_show(v, got, sizeof(got));
	return cfg_fail(p, "expected %s, got %s", what, got);
}

/* `"a", "b" or "c"` into buf. */
static void cfg_list_names(const char *const *names, size_t n, char *buf, size_t len)
{
	size_t i, o = 0;

	buf[0] = '\0';
	for (i = 0; i < n && o < len; i++) {
		const char *sep = i == 0 ? "" : i + 1 == n ? " or " : ", ";
		int k = snprintf(buf + o, len - o, "%s\"%s\"", sep, names[i]);

		if (k < 0)
			break;
		o += (size_t)k;
	}
}

/* ------------------------------------------------------------------------
 * Checks shared by the parser and config_check(). Each works on the current
 * path and returns 0 or -1 through cfg_fail().
 */

/* Why host[0..n) is not a listen host, or NULL: an IPv6 address when
 * bracketed, else an IPv4 address or a host name; empty or "*" = every
 * address, as in HAProxy's bind (master_listen() passes NULL to
 * getaddrinfo). */
static const char *cfg_host_problem(const char *host, size_t n, bool bracketed)
{
	char buf[INET6_ADDRSTRLEN];
	unsigned char addr[sizeof(struct in6_addr)];
	bool numeric = true;
	size_t i;

	if (bracketed) {
		if (n == 0 || n >= sizeof(buf))
			return "bad IPv6 address";
		memcpy(buf, host, n);
		buf[n] = '\0';
		return inet_pton(AF_INET6, buf, addr) == 1 ? NULL : "bad IPv6 address";
	}
	if (n == 0 || (n == 1 && host[0] == '*'))
		return NULL;
	if (memchr(host, ':', n))
		return "an IPv6 address needs brackets, as in [::1]:12345";
	for (i = 0; i < n; i++) {
		char ch = host[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '.' || ch == '-'))
			return "bad host name";
		if (!((ch >= '0' && ch <= '9') || ch == '.'))
			numeric = false;
	}
	if (!numeric)
		return NULL;
	if (n >= sizeof(buf))
		return "bad IPv4 address";
	memcpy(buf, host, n);
	buf[n] = '\0';
	return inet_pton(AF_INET, buf, addr) == 1 ? NULL : "bad IPv4 address";
}

const char *config_unix_path(const char *listen)
{
	if (strncmp(listen, "unix:", 5) == 0)
		return listen + 5;
	return listen[0] == '/' ? listen : NULL;
}

/* Why s is not a listen address, or NULL if it is one:
 *
 *   HOST:PORT   [IPV6]:PORT   unix:/PATH   /PATH
 */
static const char *cfg_listen_problem(const char *s)
{
	const char *hend, *port, *why, *q;
	unsigned long pnum = 0;
	bool bracketed = s[0] == '[';

	if (!*s)
		return "empty";
	if (strlen(s) >= CONFIG_ADDR_MAX)
		return "longer than 255 bytes";
	if (config_unix_path(s)) {
		const char *path = config_unix_path(s);

		if (!*path)
			return "empty socket path";
		if (strlen(path) > CFG_SUN_PATH_MAX)
			return "socket path longer than 107 bytes";
		return NULL;
	}
	if (bracketed) {
		hend = strchr(s, ']');
		if (!hend)
			return "missing ']'";
		if (hend[1] != ':')
			return "missing ':PORT' after ']'";
		port = hend + 2;
		why = cfg_host_problem(s + 1, (size_t)(hend - (s + 1)), true);
	} else {
		hend = strrchr(s, ':');
		if (!hend)
			return "missing ':PORT'";
		port = hend + 1;
		why = cfg_host_problem(s, (size_t)(hend - s), false);
	}
	if (why)
		return why;
	if (!*port || strlen(port) > 5)
		return "port must be 1..65535";
	for (q = port; *q; q++) {
		if (*q < '0' || *q > '9')
			return "port must be 1..65535";
		pnum = pnum * 10 + (unsigned long)(*q - '0');
	}
	if (pnum < 1 || pnum > 65535)
		return "port must be 1..65535";
	return NULL;
}

static int cfg_check_listen(struct cfg_parser *p, const char *s)
{
	const char *why = cfg_listen_problem(s);
	char q[CFG_SHOW_MAX];

	if (!why)
		return 0;
	cfg_quote(s, strlen(s), q, sizeof(q));
	return cfg_fail(p, "expected %s, got %s: %s", CFG_LISTEN_WHAT, q, why);
}

static bool cfg_prefix_ok(const char *s, size_t n)
{
	size_t i;

	if (n < 1 || n >= CONFIG_PREFIX_MAX)
		return false;
	for (i = 0; i < n; i++) {
		char ch = s[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == '-'))
			return false;
	}
	return true;
}

/* 1..63 bytes, no control characters (names end up in logs and keys). */
static int cfg_check_range(struct cfg_parser *p, const char *key, long long v, long long lo,
			   long long hi)
{
	size_t mark;

	if (v >= lo && v <= hi)
		return 0;
	mark = cfg_path_key(p, key);
	cfg_fail(p, "expected an integer in %lld..%lld, got %lld", lo, hi, v);
	cfg_path_pop(p, mark);
	return -1;
}

/* ns_check() of namespace ns, at path namespaces[i]: a message at the
 * path of the key that is wrong. */
static int cfg_check_ns(struct cfg_parser *p, const struct ns_def *ns)
{
	struct ns_err e;

	if (ns_check(ns, &e) == 0)
		return 0;
	cfg_path_key(p, e.field);
	return cfg_fail(p, "%s", e.msg);
}

/* Name of namespace i of c (valid: ns_check()), at path
 * namespaces[i].name: unlike those before it. */
static int cfg_check_ns_name(struct cfg_parser *p, const struct config *c, size_t i)
{
	const char *name = c->ns[i].name;
	size_t n = strnlen(name, NS_NAME_MAX), j;
	char q[CFG_SHOW_MAX];

	for (j = 0; j < i; j++) {
		if (strcmp(c->ns[j].name, name) == 0) {
			cfg_quote(name, n, q, sizeof(q));
			return cfg_fail(p, "duplicate namespace %s (also namespaces[%zu])", q, j);
		}
	}
	return 0;
}

/* ------------------------------------------------------------------------
 * Value readers: each checks one JSON value at the current path.
 */

static int cfg_want_int(struct cfg_parser *p, const json_t *v, long long lo, long long hi,
			long long *out)
{
	long long x = 0;

	if (!json_is_integer(v)) {
		char what[64];

		snprintf(what, sizeof(what), "an integer in %lld..%lld", lo, hi);
		return cfg_fail_type(p, v, what);
	}
	x = (long long)json_integer_value(v);
	if (x < lo || x > hi)
		return cfg_fail(p, "expected an integer in %lld..%lld, got %lld", lo, hi, x);
	*out = x;
	return 0;
}

/* One of names[0..n); *out = its index. */
static int cfg_want_enum(struct cfg_parser *p, const json_t *v, const char *const *names,
			 size_t n, int *out)
{
	char what[128];
	size_t i;

	if (json_is_string(v)) {
		for (i = 0; i < n; i++) {
			if (strcmp(json_string_value(v), names[i]) == 0) {
				*out = (int)i;
				return 0;
			}
		}
	}
	memcpy(what, "one of ", 7);
	cfg_list_names(names, n, what + 7, sizeof(what) - 7);
	return cfg_fail_type(p, v, what);
}

/* ------------------------------------------------------------------------
 * Keys. Each setter reads one value into its object (a struct config or a
 * struct ns_def); the tables below map key names to setters.
 */

struct cfg_key {
	const char *name;
	int (*set)(struct cfg_parser *p, json_t *v, void *obj);
};

/* A listen address into dst (CONFIG_ADDR_MAX bytes). */
static int cfg_set_addr(struct cfg_parser *p, json_t *v, char *dst)
{
	char what[96];

	snprintf(what, sizeof(what), "an address %s", CFG_LISTEN_WHAT);
	if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
		return cfg_fail_type(p, v, what);
	if (cfg_check_listen(p, json_string_value(v)) < 0)
		return -1;
	memcpy(dst, json_string_value(v), json_string_length(v) + 1);
	return 0;
}

static int cfg_set_listen(struct cfg_parser *p, json_t *v, void *obj)
{
	return cfg_set_addr(p, v, ((struct config *)obj)->listen);
}

/* listen_mode: a string of octal digits such as "0660" (JSON has no octal
 * numbers, and 660 read as decimal would be a surprise). Only permission
 * bits: no set-user-ID, set-group-ID or sticky bit on a socket. */
static int cfg_set_listen_mode(struct cfg_parser *p, json_t *v, void *obj)
{
	static const char what[] = "an octal string \"0000\"..\"0777\" such as \"0660\"";
	struct config *c = obj;
	const char *s;
	size_t n, i;
	int mode = 0;

	if (!json_is_string(v))
		return cfg_fail_type(p, v, what);
	s = json_string_value(v);
	n = json_string_length(v);
	if (n < 3 || n > 4)
		return cfg_fail_type(p, v, what);
	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '7')
			return cfg_fail_type(p, v, what);
		mode = mode * 8 + (s[i] - '0');
	}
	if (mode > 0777)
		return cfg_fail_type(p, v, what);
	c->listen_mode = mode;
	return 0;
}

/* A user or group: a number or a name of [A-Za-z0-9_.-] (a trailing '$'
 * allowed, as useradd does), not starting with '-'. */
static bool cfg_owner_part_ok(const char *s, size_t n)
{
	size_t i;

	if (n == 0 || s[0] == '-')
		return false;
	for (i = 0; i < n; i++) {
		char ch = s[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == '-' ||
		      (ch == '$' && i == n - 1)))
			return false;
	}
	return true;
}

/* "user", "user:group" or ":group". */
static bool cfg_owner_ok(const char *s, size_t n)
{
	const char *colon = memchr(s, ':', n);

	if (n == 0 || n >= CONFIG_OWNER_MAX)
		return false;
	if (!colon)
		return cfg_owner_part_ok(s, n);
	if (colon != s && !cfg_owner_part_ok(s, (size_t)(colon - s)))
		return false;
	return cfg_owner_part_ok(colon + 1, n - (size_t)(colon + 1 - s));
}

static int cfg_set_listen_owner(struct cfg_parser *p, json_t *v, void *obj)
{
	static const char what[] = "\"USER\", \"USER:GROUP\" or \":GROUP\" (names or ids)";
	struct config *c = obj;

	if (!json_is_string(v) || !cfg_owner_ok(json_string_value(v), json_string_length(v)))
		return cfg_fail_type(p, v, what);
	memcpy(c->listen_owner, json_string_value(v), json_string_length(v) + 1);
	return 0;
}

static int cfg_set_workers(struct cfg_parser *p, json_t *v, void *obj)
{
	struct config *c = obj;
	long long x = 0;

	if (cfg_want_int(p, v, 0, CFG_WORKERS_MAX, &x) < 0)
		return -1;
	c->workers = x == 0 ? config_default_workers() : (int)x;
	return 0;
}

static int cfg_set_max_keys(struct cfg_parser *p, json_t *v, void *obj)
{
	struct config *c = obj;
	long long x = 0;

	if (cfg_want_int(p, v, CFG_MAX_KEYS_MIN, CFG_MAX_KEYS_MAX, &x) < 0)
		return -1;
	c->max_keys = (size_t)x;
	return 0;
}

static int cfg_set_message_prefix(struct cfg_parser *p, json_t *v, void *obj)
{
	static const char what[] = "1..31 characters of [A-Za-z0-9_.-]";
	struct config *c = obj;

	if (!json_is_string(v) || !cfg_prefix_ok(json_string_value(v), json_string_length(v)))
		return cfg_fail_type(p, v, what);
	memcpy(c->message_prefix, json_string_value(v), json_string_length(v) + 1);
	return 0;
}

static int cfg_set_var_scope(struct cfg_parser *p, json_t *v, void *obj)
{
	struct config *c = obj;

	return cfg_want_enum(p, v, cfg_scope_names, SPOP_SCOPE_COUNT, &c->var_scope);
}

static int cfg_set_max_frame_size(struct cfg_parser *p, json_t *v, void *obj)
{
	struct config *c = obj;
	long long x = 0;

	if (cfg_want_int(p, v, SPOP_MIN_FRAME_SIZE, CFG_FRAME_MAX, &x) < 0)
		return -1;
	c->max_frame_size = (uint32_t)x;
	return 0;
}

static int cfg_set_max_connections(struct cfg_parser *p, json_t *v, void *obj)
{
	struct config *c = obj;
	long long x = 0;

	if (cfg_want_int(p, v, 1, CFG_CONN_MAX, &x) < 0)
		return -1;
	c->max_connections = (uint32_t)x;
	return 0;
}

static int cfg_set_idle_timeout_ms(struct cfg_parser *p, json_t *v, void *obj)
{
	struct config *c = obj;
	long long x = 0;

	if (cfg_want_int(p, v, 1, CFG_TIMEOUT_MAX_MS, &x) < 0)
		return -1;
	c->idle_timeout_ms = (uint32_t)x;
	return 0;
}

static int cfg_set_frame_timeout_ms(struct cfg_parser *p, json_t *v, void *obj)
{
	struct config *c = obj;
	long long x = 0;

	if (cfg_want_int(p, v, 1, CFG_TIMEOUT_MAX_MS, &x) < 0)
		return -1;
	c->frame_timeout_ms = (uint32_t)x;
	return 0;
}

static int cfg_set_log_level(struct cfg_parser *p, json_t *v, void *obj)
{
	struct config *c = obj;
	int level = json_is_string(v) ? log_level_parse(json_string_value(v)) : -1;

	if (level < 0)
		return cfg_want_enum(p, v, cfg_log_level_names, LOG_LEVEL_COUNT, &c->log_level);
	c->log_level = level;
	return 0;
}

static int cfg_set_ns_name(struct cfg_parser *p, json_t *v, void *obj)
{
	struct ns_def *ns = obj;

	if (!json_is_string(v) || !ns_name_ok(json_string_value(v), json_string_length(v)))
		return cfg_fail_type(p, v, "a name of 1..63 characters, no control characters");
	memcpy(ns->name, json_string_value(v), json_string_length(v) + 1);
	return 0;
}

static int cfg_set_ns_window_sizes(struct cfg_parser *p, json_t *v, void *obj)
{
	struct ns_def *ns = obj;
	json_t *e;
	size_t i;

	if (!json_is_array(v))
		return cfg_fail_type(p, v, "an array of window sizes (positive integers, seconds)");
	if (json_array_size(v) == 0)
		return cfg_fail(p, "expected 1..%d window sizes, got none", NS_MAX_WINDOWS);
	if (json_array_size(v) > NS_MAX_WINDOWS)
		return cfg_fail(p, "expected at most %d window sizes, got %zu", NS_MAX_WINDOWS,
				json_array_size(v));
	json_array_foreach(v, i, e) {
		size_t mark = cfg_path_push(p, "[%zu]", i);
		long long x;

		if (!json_is_integer(e))
			return cfg_fail_type(p, e, "a positive integer (seconds)");
		x = (long long)json_integer_value(e);
		if (x <= 0)
			return cfg_fail(p, "expected a positive integer (seconds), got %lld", x);
		if (x > NS_WINDOW_MAX)
			return cfg_fail(p, "expected at most %u seconds (365 days), got %lld",
					NS_WINDOW_MAX, x);
		ns->window_sizes[i] = (uint32_t)x;
		cfg_path_pop(p, mark);
	}
	ns->n_window_sizes = json_array_size(v);
	return 0;
}

static int cfg_set_ns_sync_rate(struct cfg_parser *p, json_t *v, void *obj)
{
	struct ns_def *ns = obj;

	if (!json_is_number(v))
		return cfg_fail_type(p, v, "a number (< 0: local only, 0: synchronous, > 0: seconds)");
	ns->sync_rate = json_number_value(v);
	return 0;
}

static int cfg_set_ns_strategy(struct cfg_parser *p, json_t *v, void *obj)
{
	struct ns_def *ns = obj;
	const char *names[16];
	size_t n = 0;
	int i = 0;

	while (n < 16 && (names[n] = strategy_name(n)))
		n++;
	if (cfg_want_enum(p, v, names, n, &i) < 0)
		return -1;
	snprintf(ns->strategy, sizeof(ns->strategy), "%s", names[i]);
	return 0;
}

static int cfg_set_ns_strategy_opts(struct cfg_parser *p, json_t *v, void *obj)
{
	struct ns_def *ns = obj;
	char *text;

	if (!json_is_object(v))
		return cfg_fail_type(p, v, "an object");
	text = json_dumps(v, JSON_COMPACT);
	if (!text)
		return cfg_fail(p, "out of memory");
	free((void *)ns->strategy_opts);
	ns->strategy_opts = text;
	return 0;
}

static int cfg_set_ns_window_type(struct cfg_parser *p, json_t *v, void *obj)
{
	struct ns_def *ns = obj;
	int t = 0;

	if (cfg_want_enum(p, v, ns_window_type_names, NS_WINDOW_TYPE_COUNT, &t) < 0)
		return -1;
	ns->window_type = (enum ns_window_type)t;
	return 0;
}

static int cfg_set_ns_shadow(struct cfg_parser *p, json_t *v, void *obj)
{
	struct ns_def *ns = obj;

	if (!json_is_boolean(v))
		return cfg_fail_type(p, v, "true or false");
	ns->shadow = json_is_true(v);
	return 0;
}

static int cfg_set_ns_count_denied(struct cfg_parser *p, json_t *v, void *obj)
{
	struct ns_def *ns = obj;

	if (!json_is_boolean(v))
		return cfg_fail_type(p, v, "true or false");
	ns->count_denied = json_is_true(v);
	return 0;
}

static int cfg_set_ns_max_keys(struct cfg_parser *p, json_t *v, void *obj)
{
	struct ns_def *ns = obj;
	long long x = 0;

	if (cfg_want_int(p, v, 1, CFG_MAX_KEYS_MAX, &x) < 0)
		return -1;
	ns->max_keys = (size_t)x;
	return 0;
}

static int cfg_set_ns_admission(struct cfg_parser *p, json_t *v, void *obj)
{
	struct ns_def *ns = obj;
	int t = 0;

	if (cfg_want_enum(p, v, ns_admission_names, NS_ADMIT_COUNT, &t) < 0)
		return -1;
	ns->admission = (enum ns_admission)t;
	return 0;
}

static int cfg_set_ns_on_table_full(struct cfg_parser *p, json_t *v, void *obj)
{
	struct ns_def *ns = obj;
	int t = 0;

	if (cfg_want_enum(p, v, ns_table_full_names, NS_FULL_COUNT, &t) < 0)
		return -1;
	ns->on_table_full = (enum ns_table_full)t;
	return 0;
}

/* A limit: an integer 0..NS_LIMIT_MAX. */
static int cfg_want_limit(struct cfg_parser *p, const json_t *v, int64_t *out)
{
	long long x = 0;

	if (cfg_want_int(p, v, 0, NS_LIMIT_MAX, &x) < 0)
		return -1;
	*out = (int64_t)x;
	return 0;
}

/* "limit": 10 (every window) or {"1": 10, "60": 100} (per window size; a
 * size not in window_sizes is refused by ns_check, which sees them all). */
static int cfg_set_ns_limit(struct cfg_parser *p, json_t *v, void *obj)
{
	struct ns_def *ns = obj;
	const char *key;
	json_t *e;

	ns->n_limits = 0;
	if (json_is_integer(v)) {
		ns->limits[0].window = NS_EVERY_WINDOW;
		ns->n_limits = 1;
		return cfg_want_limit(p, v, &ns->limits[0].limit);
	}
	if (!json_is_object(v))
		return cfg_fail_type(p, v, "an integer (every window) or an object from window "
				     "size to limit ({\"1\": 10, \"60\": 100})");
	if (json_object_size(v) == 0)
		return cfg_fail(p, "expected at least one window size");
	if (json_object_size(v) > NS_MAX_WINDOWS)
		return cfg_fail(p, "expected at most %d window sizes, got %zu", NS_MAX_WINDOWS,
				json_object_size(v));
	json_object_foreach(v, key, e) {
		size_t mark = cfg_path_key(p, key), n = strlen(key);
		uint64_t w = 0;
		char q[CFG_SHOW_MAX];

		/* Canonical decimal: "60", not "060" or "+60" (two spellings
		 * of one window would otherwise slip past the duplicate check). */
		bool ok = n >= 1 && n <= 10 && key[0] != '0';
		for (size_t i = 0; ok && i < n; i++)
			ok = key[i] >= '0' && key[i] <= '9';
		for (size_t i = 0; ok && i < n; i++)
			w = w * 10 + (uint64_t)(key[i] - '0');
		if (!ok || w > NS_WINDOW_MAX) {
			cfg_quote(key, n, q, sizeof(q));
			return cfg_fail(p, "expected a window size in seconds (1..%u) as the key, got %s",
					NS_WINDOW_MAX, q);
		}
		ns->limits[ns->n_limits].window = (uint32_t)w;
		if (cfg_want_limit(p, e, &ns->limits[ns->n_limits].limit) < 0)
			return -1;
		ns->n_limits++;
		cfg_path_pop(p, mark);
	}
	return 0;
}

static int cfg_set_ns_caller_limit(struct cfg_parser *p, json_t *v, void *obj)
{
	struct ns_def *ns = obj;
	int t = 0;

	if (cfg_want_enum(p, v, ns_caller_limit_names, NS_CALLER_COUNT, &t) < 0)
		return -1;
	ns->caller_limit = (enum ns_caller_limit)t;
	return 0;
}

static int cfg_set_ns_max_cost(struct cfg_parser *p, json_t *v, void *obj)
{
	struct ns_def *ns = obj;
	double x;

	if (!json_is_number(v))
		return cfg_fail_type(p, v, "a number > 0");
	x = json_number_value(v);
	if (!(x > 0) || x > (double)NS_LIMIT_MAX)
		return cfg_fail(p, "expected a number > 0 and at most %lld, got %g", NS_LIMIT_MAX, x);
	ns->max_cost = x;
	return 0;
}

static int cfg_set_ns_caller_admission(struct cfg_parser *p, json_t *v, void *obj)
{
	struct ns_def *ns = obj;

	if (!json_is_boolean(v))
		return cfg_fail_type(p, v, "true or false");
	ns->caller_admission = json_is_true(v);
	return 0;
}

static int cfg_set_ns_delay_max_ms(struct cfg_parser *p, json_t *v, void *obj)
{
	struct ns_def *ns = obj;
	long long x = 0;

	if (cfg_want_int(p, v, 0, NS_DELAY_MAX_MS, &x) < 0)
		return -1;
	ns->delay_max_ms = (uint32_t)x;
	return 0;
}

static int cfg_set_key_secret(struct cfg_parser *p, json_t *v, void *obj)
{
	struct config *c = obj;
	size_t n;

	if (!json_is_string(v))
		return cfg_fail_type(p, v, "a string of 16..255 bytes");
	n = json_string_length(v);
	if (n < CFG_SECRET_MIN || n >= sizeof(c->key_secret) || memchr(json_string_value(v), 0, n))
		return cfg_fail(p, "expected a string of 16..255 bytes without NUL, got %zu bytes",
				n);
	memcpy(c->key_secret, json_string_value(v), n + 1);
	return 0;
}

static int cfg_set_state_file(struct cfg_parser *p, json_t *v, void *obj)
{
	struct config *c = obj;
	size_t n;

	if (!json_is_string(v))
		return cfg_fail_type(p, v, "a file path");
	n = json_string_length(v);
	if (n == 0 || n >= sizeof(c->state_file) || memchr(json_string_value(v), 0, n))
		return cfg_fail(p, "expected a file path of 1..%zu bytes without NUL, got %zu bytes",
				sizeof(c->state_file) - 1, n);
	memcpy(c->state_file, json_string_value(v), n + 1);
	return 0;
}

static int cfg_set_http_listen(struct cfg_parser *p, json_t *v, void *obj)
{
	return cfg_set_addr(p, v, ((struct config *)obj)->http_listen);
}

static int cfg_set_http_deny_status(struct cfg_parser *p, json_t *v, void *obj)
{
	struct config *c = obj;
	long long x = 0;

	if (cfg_want_int(p, v, 400, 599, &x) < 0)
		return -1;
	c->http_deny_status = (int)x;
	return 0;
}

/* Visible ASCII, no space: it travels in "Authorization: Bearer <token>". */
static int cfg_set_http_token(struct cfg_parser *p, json_t *v, void *obj)
{
	struct config *c = obj;
	const char *t;
	size_t n;

	if (!json_is_string(v))
		return cfg_fail_type(p, v, "a string of 1..255 visible ASCII characters");
	t = json_string_value(v);
	n = json_string_length(v);
	if (n == 0 || n >= sizeof(c->http_token))
		return cfg_fail(p, "expected 1..255 visible ASCII characters, got %zu bytes", n);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)t[i] <= 0x20 || (unsigned char)t[i] >= 0x7f)
			return cfg_fail(p, "expected visible ASCII characters only (no space, no "
					"control character), byte %zu is not", i);
	memcpy(c->http_token, t, n + 1);
	return 0;
}

static int cfg_set_http_metrics_token(struct cfg_parser *p, json_t *v, void *obj)
{
	struct config *c = obj;

	if (!json_is_boolean(v))
		return cfg_fail_type(p, v, "true or false");
	c->http_metrics_token = json_is_true(v);
	return 0;
}

static int cfg_set_collect_us(struct cfg_parser *p, json_t *v, void *obj)
{
	struct config *c = obj;
	long long x = 0;

	if (cfg_want_int(p, v, 0, CFG_COLLECT_MAX_US, &x) < 0)
		return -1;
	c->collect_us = (uint32_t)x;
	return 0;
}

static int cfg_set_sched_batch(struct cfg_parser *p, json_t *v, void *obj)
{
	struct config *c = obj;

	if (!json_is_boolean(v))
		return cfg_fail_type(p, v, "true or false");
	c->sched_batch = json_is_true(v);
	return 0;
}

static int cfg_set_http_max_connections(struct cfg_parser *p, json_t *v, void *obj)
{
	struct config *c = obj;
	long long x = 0;

	if (cfg_want_int(p, v, 1, CFG_CONN_MAX, &x) < 0)
		return -1;
	c->http_max_connections = (uint32_t)x;
	return 0;
}

static int cfg_set_http_max_buffer_memory(struct cfg_parser *p, json_t *v, void *obj)
{
	struct config *c = obj;
	long long x = 0;

	if (cfg_want_int(p, v, (long long)CFG_HTTP_BUFMEM_MIN, (long long)CFG_BUFMEM_MAX, &x) < 0)
		return -1;
	c->http_max_buffer_memory = (size_t)x;
	return 0;
}

static int cfg_set_max_buffer_memory(struct cfg_parser *p, json_t *v, void *obj)
{
	struct config *c = obj;
	long long x = 0;

	if (cfg_want_int(p, v, (long long)CFG_BUFMEM_MIN, (long long)CFG_BUFMEM_MAX, &x) < 0)
		return -1;
	c->max_buffer_memory = (size_t)x;
	return 0;
}

static int cfg_set_namespaces(struct cfg_parser *p, json_t *v, void *obj);

static const struct cfg_key cfg_top_keys[] = {
	{ .name = "listen",           .set = cfg_set_listen },
	{ .name = "workers",          .set = cfg_set_workers },
	{ .name = "max_keys",         .set = cfg_set_max_keys },
	{ .name = "namespaces",       .set = cfg_set_namespaces },
	{ .name = "message_prefix",   .set = cfg_set_message_prefix },
	{ .name = "var_scope",        .set = cfg_set_var_scope },
	{ .name = "max_frame_size",   .set = cfg_set_max_frame_size },
	{ .name = "max_connections",  .set = cfg_set_max_connections },
	{ .name = "idle_timeout_ms",  .set = cfg_set_idle_timeout_ms },
	{ .name = "frame_timeout_ms", .set = cfg_set_frame_timeout_ms },
	{ .name = "log_level",        .set = cfg_set_log_level },
	{ .name = "key_secret",       .set = cfg_set_key_secret },
	{ .name = "max_buffer_memory", .set = cfg_set_max_buffer_memory },
	{ .name = "listen_mode",      .set = cfg_set_listen_mode },
	{ .name = "listen_owner",     .set = cfg_set_listen_owner },
	{ .name = "http_listen",      .set = cfg_set_http_listen },
	{ .name = "http_deny_status", .set = cfg_set_http_deny_status },
	{ .name = "http_token",       .set = cfg_set_http_token },
	{ .name = "http_metrics_token", .set = cfg_set_http_metrics_token },
	{ .name = "http_max_connections", .set = cfg_set_http_max_connections },
	{ .name = "http_max_buffer_memory", .set = cfg_set_http_max_buffer_memory },
	{ .name = "state_file",       .set = cfg_set_state_file },
	{ .name = "sched_batch",      .set = cfg_set_sched_batch },
	{ .name = "collect_us",       .set = cfg_set_collect_us },
};

static const struct cfg_key cfg_ns_keys[] = {
	{ .name = "name",          .set = cfg_set_ns_name },
	{ .name = "window_sizes",  .set = cfg_set_ns_window_sizes },
	{ .name = "sync_rate",     .set = cfg_set_ns_sync_rate },
	{ .name = "strategy",      .set = cfg_set_ns_strategy },
	{ .name = "strategy_opts", .set = cfg_set_ns_strategy_opts },
	{ .name = "window_type",   .set = cfg_set_ns_window_type },
	{ .name = "count_denied",  .set = cfg_set_ns_count_denied },
	{ .name = "shadow",        .set = cfg_set_ns_shadow },
	{ .name = "max_keys",      .set = cfg_set_ns_max_keys },
	{ .name = "on_table_full", .set = cfg_set_ns_on_table_full },
	{ .name = "admission",     .set = cfg_set_ns_admission },
	{ .name = "limit",         .set = cfg_set_ns_limit },
	{ .name = "caller_limit",  .set = cfg_set_ns_caller_limit },
	{ .name = "max_cost",      .set = cfg_set_ns_max_cost },
	{ .name = "caller_admission", .set = cfg_set_ns_caller_admission },
	{ .name = "delay_max_ms",  .set = cfg_set_ns_delay_max_ms },
};

#define CFG_N_KEYS(t) (sizeof(t) / sizeof((t)[0]))

/* Levenshtein distance, for "did you mean"; large for long strings. */
static size_t cfg_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), i, j;
	size_t row[64], diag, up;

	if (la >= 64 || lb >= 64)
		return SIZE_MAX;
	for (j = 0; j <= lb; j++)
		row[j] = j;
	for (i = 1; i <= la; i++) {
		diag = row[0];
		row[0] = i;
		for (j = 1; j <= lb; j++) {
			size_t best = diag + (a[i - 1] != b[j - 1]);

			up = row[j];
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			diag = up;
			row[j] = best;
		}
	}
	return row[lb];
}

static int cfg_unknown_key(struct cfg_parser *p, const struct cfg_key *keys, size_t n,
			   const char *key)
{
	const char *best = NULL;
	size_t best_d = SIZE_MAX, i, o = 0;
	char q[CFG_SHOW_MAX], known[400];

	cfg_quote(key, strlen(key), q, sizeof(q));
	for (i = 0; i < n; i++) {
		size_t d = cfg_distance(key, keys[i].name);

		if (d < best_d) {
			best_d = d;
			best = keys[i].name;
		}
	}
	if (best && best_d <= 2 && best_d < strlen(key))
		return cfg_fail(p, "unknown key %s (did you mean \"%s\"?)", q, best);
	known[0] = '\0';
	for (i = 0; i < n && o < sizeof(known); i++) {
		int k = snprintf(known + o, sizeof(known) - o, "%s%s", i ? ", " : "", keys[i].name);

		if (k < 0)
			break;
		o += (size_t)k;
	}
	return cfg_fail(p, "unknown key %s; known keys: %s", q, known);
}

/* Applies every key of obj through the table; the first unknown key or
 * bad value fails. */
static int cfg_parse_object(struct cfg_parser *p, json_t *obj, const struct cfg_key *keys,
			    size_t n, void *target)
{
	const char *key;
	json_t *v;

	json_object_foreach(obj, key, v) {
		size_t mark = cfg_path_key(p, key), i;

		for (i = 0; i < n; i++)
			if (strcmp(key, keys[i].name) == 0)
				break;
		if (i == n)
			return cfg_unknown_key(p, keys, n, key);
		if (keys[i].set(p, v, target) < 0)
			return -1;
		cfg_path_pop(p, mark);
	}
	return 0;
}

/* namespaces[i], an object, into c->ns[i]. */
static int cfg_parse_ns(struct cfg_parser *p, json_t *e, struct config *c, size_t i)
{
	struct ns_def *ns = &c->ns[i];
	size_t mark;

	if (!json_is_object(e))
		return cfg_fail_type(p, e, "an object");
	ns_def_init(ns);
	if (cfg_parse_object(p, e, cfg_ns_keys, CFG_N_KEYS(cfg_ns_keys), ns) < 0)
		return -1;
	if (ns->name[0] == '\0')
		snprintf(ns->name, sizeof(ns->name), "%s", CFG_NS_DEFAULT);
	if (ns->n_window_sizes == 0) {
		cfg_path_key(p, "window_sizes");
		return cfg_fail(p, "missing: expected 1..%d window sizes (positive integers, seconds)",
				NS_MAX_WINDOWS);
	}
	if (cfg_check_ns(p, ns) < 0)
		return -1;
	if (ns->strategy[0] == '\0')
		snprintf(ns->strategy, sizeof(ns->strategy), "%s", local_strategy.name);
	mark = cfg_path_key(p, "name");
	if (cfg_check_ns_name(p, c, i) < 0)
		return -1;
	cfg_path_pop(p, mark);
	return 0;
}

/* A non-empty list replaces the namespaces (config_load() frees the old
 * ones on success, the new ones on failure); an empty list keeps them. */
static int cfg_set_namespaces(struct cfg_parser *p, json_t *v, void *obj)
{
	struct config *c = obj;
	json_t *e;
	size_t i;

	if (!json_is_array(v))
		return cfg_fail_type(p, v, "an array of namespace objects");
	if (json_array_size(v) == 0)
		return 0;
	if (json_array_size(v) > NS_MAX)
		return cfg_fail(p, "expected at most %d namespaces, got %zu", NS_MAX,
				json_array_size(v));
	/* c is config_load()'s copy: dropping the old pointers here does not
	 * free them, they still belong to the caller's config. */
	memset(c->ns, 0, sizeof(c->ns));
	c->n_ns = 0;
	p->ns_replaced = true;
	json_array_foreach(v, i, e) {
		size_t mark = cfg_path_push(p, "[%zu]", i);

		if (cfg_parse_ns(p, e, c, i) < 0)
			return -1;
		cfg_path_pop(p, mark);
		c->n_ns = i + 1;
	}
	return 0;
}

static void cfg_free_ns(struct config *c)
{
	size_t i;

	for (i = 0; i < NS_MAX; i++) {
		free((void *)c->ns[i].strategy_opts);
		c->ns[i].strategy_opts = NULL;
	}
}

/* ------------------------------------------------------------------------
 * The public API.
 */

int config_default_workers(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	if (n < 1)
		return 1;
	return n > CFG_WORKERS_MAX ? CFG_WORKERS_MAX : (int)n;
}

/* Contract: overwrites all of *c without freeing it (config_free() a loaded
 * config first). */
void config_defaults(struct config *c)
{
	static const uint32_t windows[] = { 1, 60, 3600 };
	struct ns_def *ns = &c->ns[0];

	memset(c, 0, sizeof(*c));
	snprintf(c->listen, sizeof(c->listen), "%s", CFG_LISTEN_DEFAULT);
	c->listen_mode = -1;
	c->http_deny_status = 429;
	c->workers = config_default_workers();
	c->max_keys = CFG_MAX_KEYS_DEFAULT;
	c->max_buffer_memory = CFG_BUFMEM_DEFAULT;
	snprintf(c->message_prefix, sizeof(c->message_prefix), "%s", CFG_PREFIX_DEFAULT);
	c->var_scope = SPOP_SCOPE_TXN;
	c->max_frame_size = SPOP_DEFAULT_FRAME_SIZE;
	c->max_connections = CFG_CONN_DEFAULT;
	c->idle_timeout_ms = CFG_IDLE_DEFAULT_MS;
	c->frame_timeout_ms = CFG_FTIMEOUT_DEFAULT_MS;
	c->log_level = LOG_INFO;
	c->sched_batch = true;
	c->collect_us = CFG_COLLECT_DEFAULT_US;

	ns_def_init(ns);
	snprintf(ns->name, sizeof(ns->name), "%s", CFG_NS_DEFAULT);
	memcpy(ns->window_sizes, windows, sizeof(windows));
	ns->n_window_sizes = sizeof(windows) / sizeof(windows[0]);
	snprintf(ns->strategy, sizeof(ns->strategy), "%s", local_strategy.name);
	c->n_ns = 1;
}

/* Contract: *c must hold a valid config (config_defaults(), maybe an
 * earlier config_load()). On success the file's keys replace c's, a
 * non-empty "namespaces" replaces all of c's namespaces (the old
 * strategy_opts are freed) and the result has passed config_check(). On
 * failure *c is unchanged, nothing new stays allocated, and *err names the
 * file, the JSON path (or "line L, column C" for a syntax error) and the
 * problem. */
/* Loads the parsed root (taken) over *c; see config_load. */
static int config_load_root(struct config *c, json_t *root, const char *path,
			    struct cfg_parser *p, struct config_err *err)
{
	struct config tmp;
	int rc;

	if (!json_is_object(root)) {
		cfg_path_push(p, "(top level)");
		rc = cfg_fail_type(p, root, "an object");
		json_decref(root);
		return rc;
	}
	tmp = *c;
	rc = cfg_parse_object(p, root, cfg_top_keys, CFG_N_KEYS(cfg_top_keys), &tmp);
	json_decref(root);
	if (rc == 0) {
		rc = config_check(&tmp, err);
		snprintf(err->file, sizeof(err->file), "%s", path);
	}
	if (rc < 0) {
		if (p->ns_replaced)
			cfg_free_ns(&tmp);
		return -1;
	}
	if (p->ns_replaced)
		cfg_free_ns(c);
	*c = tmp;
	return 0;
}

static int config_json_error(const json_error_t *jerr, struct config_err *err)
{
	snprintf(err->path, sizeof(err->path), "line %d, column %d", jerr->line, jerr->column);
	snprintf(err->msg, sizeof(err->msg), "%s", jerr->text);
	return -1;
}

int config_load(struct config *c, const char *path, struct config_err *err)
{
	struct cfg_parser p;
	json_error_t jerr;
	json_t *root;
	struct stat st;
	FILE *f;

	memset(err, 0, sizeof(*err));
	cfg_parser_init(&p, err);
	snprintf(err->file, sizeof(err->file), "%s", path);

	f = fopen(path, "r");
	if (!f)
		return cfg_fail(&p, "cannot open: %s", strerror(errno));
	if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
		fclose(f);
		return cfg_fail(&p, "cannot read: %s", strerror(EISDIR));
	}
	root = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
	fclose(f);
	if (!root)
		return config_json_error(&jerr, err);
	return config_load_root(c, root, path, &p, err);
}

int config_load_text(struct config *c, const char *name, const char *text, size_t len,
		     struct config_err *err)
{
	struct cfg_parser p;
	json_error_t jerr;
	json_t *root;

	memset(err, 0, sizeof(*err));
	cfg_parser_init(&p, err);
	snprintf(err->file, sizeof(err->file), "%s", name);
	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return config_json_error(&jerr, err);
	return config_load_root(c, root, name, &p, err);
}

/* Contract: every field of *c in range, the same rules as the file, with
 * workers >= 1 (0 has been resolved by then). Paths are those of the
 * file's keys; err->file is left empty. */
int config_check(const struct config *c, struct config_err *err)
{
	struct cfg_parser p;
	size_t i, mark, n, shares = 0;
	char q[CFG_SHOW_MAX], names[128];

	memset(err, 0, sizeof(*err));
	cfg_parser_init(&p, err);

	mark = cfg_path_key(&p, "listen");
	if (strnlen(c->listen, sizeof(c->listen)) == sizeof(c->listen))
		return cfg_fail(&p, "not NUL-terminated");
	if (cfg_check_listen(&p, c->listen) < 0)
		return -1;
	cfg_path_pop(&p, mark);
	mark = cfg_path_key(&p, "http_listen");
	n = strnlen(c->http_listen, sizeof(c->http_listen));
	if (n == sizeof(c->http_listen))
		return cfg_fail(&p, "not NUL-terminated");
	if (n > 0 && cfg_check_listen(&p, c->http_listen) < 0)
		return -1;
	if (n > 0 && strcmp(c->http_listen, c->listen) == 0)
		return cfg_fail(&p, "the same address as listen");
	cfg_path_pop(&p, mark);
	if (cfg_check_range(&p, "http_deny_status", c->http_deny_status, 400, 599) < 0)
		return -1;
	if (c->listen_mode < -1 || c->listen_mode > 0777) {
		cfg_path_key(&p, "listen_mode");
		return cfg_fail(&p, "expected 0..0777, got %d", c->listen_mode);
	}
	mark = cfg_path_key(&p, "listen_owner");
	n = strnlen(c->listen_owner, sizeof(c->listen_owner));
	if (n == sizeof(c->listen_owner))
		return cfg_fail(&p, "not NUL-terminated");
	if (n > 0 && !cfg_owner_ok(c->listen_owner, n)) {
		cfg_quote(c->listen_owner, n, q, sizeof(q));
		return cfg_fail(&p, "expected \"USER\", \"USER:GROUP\" or \":GROUP\", got %s", q);
	}
	cfg_path_pop(&p, mark);
	if ((c->listen_mode >= 0 || n > 0) && !config_unix_path(c->listen) &&
	    !(c->http_listen[0] && config_unix_path(c->http_listen))) {
		cfg_path_key(&p, c->listen_mode >= 0 ? "listen_mode" : "listen_owner");
		cfg_quote(c->listen, strlen(c->listen), q, sizeof(q));
		return cfg_fail(&p, "applies to a unix socket only, but listen is %s%s", q,
				c->http_listen[0] ? ", and http_listen is not one either" : "");
	}

	if (cfg_check_range(&p, "workers", c->workers, 1, CFG_WORKERS_MAX) < 0 ||
	    cfg_check_range(&p, "max_keys", (long long)c->max_keys, CFG_MAX_KEYS_MIN,
			    CFG_MAX_KEYS_MAX) < 0)
		return -1;

	mark = cfg_path_key(&p, "message_prefix");
	n = strnlen(c->message_prefix, sizeof(c->message_prefix));
	if (!cfg_prefix_ok(c->message_prefix, n)) {
		cfg_quote(c->message_prefix, n, q, sizeof(q));
		return cfg_fail(&p, "expected 1..31 characters of [A-Za-z0-9_.-], got %s", q);
	}
	cfg_path_pop(&p, mark);

	if (c->var_scope < 0 || c->var_scope >= SPOP_SCOPE_COUNT) {
		cfg_path_key(&p, "var_scope");
		cfg_list_names(cfg_scope_names, SPOP_SCOPE_COUNT, names, sizeof(names));
		return cfg_fail(&p, "expected one of %s, got %d", names, c->var_scope);
	}
	if (cfg_check_range(&p, "max_frame_size", c->max_frame_size, SPOP_MIN_FRAME_SIZE,
			    CFG_FRAME_MAX) < 0 ||
	    cfg_check_range(&p, "max_connections", c->max_connections, 1, CFG_CONN_MAX) < 0 ||
	    cfg_check_range(&p, "idle_timeout_ms", c->idle_timeout_ms, 1, CFG_TIMEOUT_MAX_MS) < 0 ||
	    cfg_check_range(&p, "frame_timeout_ms", c->frame_timeout_ms, 1, CFG_TIMEOUT_MAX_MS) < 0 ||
	    cfg_check_range(&p, "collect_us", c->collect_us, 0, CFG_COLLECT_MAX_US) < 0 ||
	    cfg_check_range(&p, "max_buffer_memory", (long long)c->max_buffer_memory,
			    (long long)CFG_BUFMEM_MIN, (long long)CFG_BUFMEM_MAX) < 0)
		return -1;
	if (c->http_max_connections > c->max_connections) {
		cfg_path_key(&p, "http_max_connections");
		return cfg_fail(&p, "expected at most max_connections (%u), got %u",
				c->max_connections, c->http_max_connections);
	}
	if (c->http_max_buffer_memory > c->max_buffer_memory) {
		cfg_path_key(&p, "http_max_buffer_memory");
		return cfg_fail(&p, "expected at most max_buffer_memory (%zu), got %zu",
				c->max_buffer_memory, c->http_max_buffer_memory);
	}
	if (strnlen(c->http_token, sizeof(c->http_token)) == sizeof(c->http_token)) {
		cfg_path_key(&p, "http_token");
		return cfg_fail(&p, "not NUL-terminated");
	}
	if (c->http_metrics_token && !c->http_token[0]) {
		cfg_path_key(&p, "http_metrics_token");
		return cfg_fail(&p, "true needs http_token (the token /metrics would ask for)");
	}
	if (c->log_level < 0 || c->log_level >= LOG_LEVEL_COUNT) {
		cfg_path_key(&p, "log_level");
		cfg_list_names(cfg_log_level_names, LOG_LEVEL_COUNT, names, sizeof(names));
		return cfg_fail(&p, "expected one of %s, got %d", names, c->log_level);
	}

	if (strnlen(c->key_secret, sizeof(c->key_secret)) == sizeof(c->key_secret)) {
		cfg_path_key(&p, "key_secret");
		return cfg_fail(&p, "not NUL-terminated");
	}

	mark = cfg_path_key(&p, "namespaces");
	if (c->n_ns < 1 || c->n_ns > NS_MAX)
		return cfg_fail(&p, "expected 1..%d namespaces, got %zu", NS_MAX,
				c->n_ns);
	for (i = 0; i < c->n_ns; i++) {
		const struct ns_def *ns = &c->ns[i];
		size_t nsmark = cfg_path_push(&p, "[%zu]", i), kmark;

		if (cfg_check_ns(&p, ns) < 0)
			return -1;
		kmark = cfg_path_key(&p, "name");
		if (cfg_check_ns_name(&p, c, i) < 0)
			return -1;
		cfg_path_pop(&p, kmark);
		if (ns->strategy[0] == '\0') {
			cfg_path_key(&p, "strategy");
			return cfg_fail(&p, "missing");
		}
		if (ns->max_keys) {
			shares += ns->max_keys;
			if (shares > c->max_keys) {
				cfg_path_key(&p, "max_keys");
				return cfg_fail(&p, "the namespaces' max_keys add up to more than the "
						"top-level max_keys (%zu)", c->max_keys);
			}
		}
		cfg_path_pop(&p, nsmark);
	}
	cfg_path_pop(&p, mark);
	return 0;
}

uint32_t config_http_max_connections(const struct config *c)
{
	if (c->http_max_connections)
		return c->http_max_connections;
	return c->max_connections > 1 ? c->max_connections / 2 : 1;
}

size_t config_http_max_buffer_memory(const struct config *c)
{
	return c->http_max_buffer_memory ? c->http_max_buffer_memory : c->max_buffer_memory / 4;
}

/* Contract: exact, byte-for-byte match of name[0..len) (no NUL needed);
 * no "default" substitution for an empty name. */
int config_ns_find(const struct config *c, const char *name, size_t len)
{
	size_t i;

	if (!name)
		return -1;
	for (i = 0; i < c->n_ns; i++)
		if (strnlen(c->ns[i].name, NS_NAME_MAX) == len &&
		    memcmp(c->ns[i].name, name, len) == 0)
			return (int)i;
	return -1;
}

/* Contract: safe on defaults and twice in a row; c keeps its other fields. */
void config_free(struct config *c)
{
	cfg_free_ns(c);
}

/* "FILE: PATH: MSG", leaving out empty parts. */
void config_err_format(const struct config_err *err, char *buf, size_t len)
{
	const char *parts[3] = { err->file, err->path, err->msg };
	size_t i, o = 0;

	if (len == 0)
		return;
	buf[0] = '\0';
	for (i = 0; i < 3 && o < len; i++) {
		int k;

		if (!parts[i][0])
			continue;
		k = snprintf(buf + o, len - o, "%s%s", o ? ": " : "", parts[i]);
		if (k < 0)
			break;
		o += (size_t)k;
	}
}
