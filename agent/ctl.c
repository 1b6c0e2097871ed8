/*
 * ctl.c - `spoa-ratelimit ctl`: the admin endpoints (docs/OPERATIONS.md)
 * from the command line, for an operator on the box: the HTTP front's
 * address and the admin token come from the configuration file (-c), the
 * answer is printed as an aligned table (or as it came, with --json).
 * Keys are printed so that no two read alike (ctl_show), and read back in
 * that form (ctl_key_arg).
 *
 *   spoa-ratelimit ctl [-c FILE] [--json] keys NAMESPACE KEY
 *   spoa-ratelimit ctl [-c FILE] [--json] reset NAMESPACE KEY
 *   spoa-ratelimit ctl [-c FILE] [--json] top NAMESPACE [N] [hits|denied] [WINDOW]
 *   spoa-ratelimit ctl [-c FILE] [--json] limits set NAMESPACE KEY LIMIT [WINDOW]
 *   spoa-ratelimit ctl [-c FILE] [--json] limits get NAMESPACE [KEY]
 *   spoa-ratelimit ctl [-c FILE] [--json] limits rm NAMESPACE KEY [WINDOW]
 */
#include "agent/ctl.h"

#include <errno.h>
#include <jansson.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "agent/config.h"

#define CTL_ANSWER_MAX (256u << 10)
#define CTL_TIMEOUT_MS 5000      /* plus the stores' timeout_ms: ctl_wait_ms */
#define CTL_TARGET_MAX 8000      /* the request line within the agent's 8 KiB */

static int ctl_usage(void)
{
	fprintf(stderr,
		"usage: spoa-ratelimit ctl [-c FILE] [--json] keys NAMESPACE KEY\n"
		"       spoa-ratelimit ctl [-c FILE] [--json] reset NAMESPACE KEY\n"
		"       spoa-ratelimit ctl [-c FILE] [--json] top NAMESPACE [N] [hits|denied] "
		"[WINDOW]\n"
		"       spoa-ratelimit ctl [-c FILE] [--json] limits set NAMESPACE KEY LIMIT "
		"[WINDOW]\n"
		"       spoa-ratelimit ctl [-c FILE] [--json] limits get NAMESPACE [KEY]\n"
		"       spoa-ratelimit ctl [-c FILE] [--json] limits rm NAMESPACE KEY [WINDOW]\n"
		"  reads http_listen and http_admin_token from FILE (default: the built-in\n"
		"  configuration, which has neither); a KEY in double quotes is read as ctl\n"
		"  prints it (\\\" \\\\ \\xNN)\n");
	return 2;
}

/* s[0..n) percent-encoded into out (every byte but unreserved ones).
 * Returns 0, or -1 when it does not fit in cap bytes. */
static int ctl_pct(const char *s, size_t n, char *out, size_t cap)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (o + 4 > cap)
			return -1;
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    c == '-' || c == '_' || c == '.' || c == '~') {
			out[o++] = (char)c;
		} else {
			out[o++] = '%';
			out[o++] = hex[c >> 4];
			out[o++] = hex[c & 15];
		}
	}
	out[o] = '\0';
	return 0;
}

static int ctl_hex(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
		: c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A key as given on the command line into out (as many bytes as arg):
 * as it is, or, quoted as ctl prints it ("..." with \" \\ \xNN), its
 * bytes, so that a key printed by `top` can be given back to `keys` or
 * `reset`. Returns its length, or -1 (a quoted key with another escape,
 * or a lone quote inside). */
static long ctl_key_arg(const char *arg, char *out)
{
	size_t n = strlen(arg), o = 0;

	if (n < 2 || arg[0] != '"' || arg[n - 1] != '"') {
		memcpy(out, arg, n);
		return (long)n;
	}
	for (size_t i = 1; i + 1 < n; i++) {
		if (arg[i] == '"')
			return -1;
		if (arg[i] != '\\') {
			out[o++] = arg[i];
		} else if (i + 2 < n && (arg[i + 1] == '"' || arg[i + 1] == '\\')) {
			out[o++] = arg[++i];
		} else if (i + 4 < n && arg[i + 1] == 'x' && ctl_hex(arg[i + 2]) >= 0 &&
			   ctl_hex(arg[i + 3]) >= 0) {
			out[o++] = (char)(ctl_hex(arg[i + 2]) << 4 | ctl_hex(arg[i + 3]));
			i += 3;
		} else {
			return -1;
		}
	}
	return (long)o;
}

/* A connected socket to the HTTP front, or -1 with a message printed. */
static int ctl_connect(const char *addr)
{
	const char *path = config_unix_path(addr);
	int fd;

	if (path) {
		struct sockaddr_un sun = { .sun_family = AF_UNIX };
		snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0)
			return fd;
		fprintf(stderr, "spoa-ratelimit ctl: %s: %s\n", addr, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	char host[CONFIG_ADDR_MAX];
	const char *colon = strrchr(addr, ':');
	if (!colon) {
		fprintf(stderr, "spoa-ratelimit ctl: bad http_listen %s\n", addr);
		return -1;
	}
	size_t hl = (size_t)(colon - addr);
	if (hl >= 2 && addr[0] == '[' && addr[hl - 1] == ']')
		snprintf(host, sizeof(host), "%.*s", (int)(hl - 2), addr + 1);
	else
		snprintf(host, sizeof(host), "%.*s", (int)hl, addr);
	/* A wildcard listener is reached on loopback. */
	if (host[0] == '\0' || strcmp(host, "*") == 0 || strcmp(host, "0.0.0.0") == 0)
		snprintf(host, sizeof(host), "127.0.0.1");
	else if (strcmp(host, "::") == 0)
		snprintf(host, sizeof(host), "::1");
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res, *ai;
	int rc = getaddrinfo(host, colon + 1, &hints, &res);
	if (rc != 0) {
		fprintf(stderr, "spoa-ratelimit ctl: %s: %s\n", addr, gai_strerror(rc));
		return -1;
	}
	fd = -1;
	for (ai = res; ai && fd < 0; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(res);
	if (fd < 0)
		fprintf(stderr, "spoa-ratelimit ctl: %s: %s\n", addr, strerror(errno));
	return fd;
}

/* How long to wait for an answer: CTL_TIMEOUT_MS, plus the longest store
 * timeout_ms of the configuration (GET /keys waits for its store that
 * long at most). */
static int ctl_wait_ms(const struct config *cfg)
{
	int most = 0;

	for (size_t i = 0; i < cfg->n_ns; i++) {
		json_t *o = cfg->ns[i].strategy_opts ? json_loads(cfg->ns[i].strategy_opts, 0, NULL)
						      : NULL;
		json_int_t t = json_integer_value(json_object_get(o, "timeout_ms"));
		if (t > most && t < 24 * 3600 * 1000)
			most = (int)t;
		json_decref(o);
	}
	return CTL_TIMEOUT_MS + most;
}

/* One request; the answer's body into body (NUL-terminated). Returns the
 * status, or -1 (printed). */
static int ctl_request(const struct config *cfg, const char *method, const char *target,
		       char *body, size_t cap)
{
	static char buf[CTL_ANSWER_MAX];
	char req[10240];
	size_t len = 0;
	int fd = ctl_connect(cfg->http_listen), status = -1, wait_ms = ctl_wait_ms(cfg);

	if (fd < 0)
		return -1;
	int n = snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: spoa-ratelimit\r\n"
			 "Authorization: Bearer %s\r\nConnection: close\r\n\r\n", method, target,
			 cfg->http_admin_token);
	if (n < 0 || (size_t)n >= sizeof(req) || send(fd, req, (size_t)n, MSG_NOSIGNAL) != n) {
		fprintf(stderr, "spoa-ratelimit ctl: send: %s\n", strerror(errno));
		close(fd);
		return -1;
	}
	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		if (poll(&pfd, 1, wait_ms) != 1) {
			fprintf(stderr, "spoa-ratelimit ctl: no answer within %d ms\n", wait_ms);
			close(fd);
			return -1;
		}
		ssize_t k = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);
		if (k <= 0)
			break;
		len += (size_t)k;
		if (len + 1 >= sizeof(buf))
			break;
	}
	close(fd);
	buf[len] = '\0';
	const char *end = strstr(buf, "\r\n\r\n");
	if (!end || sscanf(buf, "HTTP/1.%*d %d", &status) != 1) {
		fprintf(stderr, "spoa-ratelimit ctl: not an HTTP answer\n");
		return -1;
	}
	snprintf(body, cap, "%s", end + 4);
	return status;
}

/* The bytes of a JSON string from the agent: its answers write a key's
 * bytes outside printable ASCII as \u00XX (http_escape(), JSON_BYTES),
 * which jansson hands over as the UTF-8 of U+00XX; each such code point
 * is one byte again. Any other code point (not the agent's) is kept as
 * its UTF-8 bytes. Returns the length; out holds at least the UTF-8's. */
static size_t ctl_bytes(const json_t *str, char *out)
{
	const unsigned char *p = (const unsigned char *)json_string_value(str);
	size_t n = json_string_length(str), o = 0;

	for (size_t i = 0; i < n; i++) {
		if (p[i] >= 0xc2 && p[i] <= 0xc3 && i + 1 < n && (p[i + 1] & 0xc0) == 0x80) {
			out[o++] = (char)(((p[i] & 0x03) << 6) | (p[i + 1] & 0x3f));
			i++;
		} else {
			out[o++] = (char)p[i];
		}
	}
	return o;
}

/* A key (or a name) as a person reads it, unambiguously (docs/OPERATIONS.md,
 * "Keys as ctl prints them"): as it is when it is printable ASCII
 * without a space at either end, a quote or a backslash; else quoted,
 * "...", with \" and \\ and every byte outside printable ASCII as \xNN
 * (NUL included). A malloc'd string (NULL: out of memory). */
static char *ctl_show(const json_t *str)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = json_string_length(str);
	char *b = malloc(n + 1), *out = malloc(4 * n + 3);
	bool plain = n > 0;

	if (!b || !out) {
		free(b), free(out);
		return NULL;
	}
	n = ctl_bytes(str, b);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)b[i];
		bool inner = i > 0 && i + 1 < n;
		plain = plain && (c > ' ' || (c == ' ' && inner)) && c < 0x7f && c != '"' &&
			c != '\\';
	}
	size_t o = 0;
	if (!plain)
		out[o++] = '"';
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)b[i];
		if (plain || (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')) {
			out[o++] = (char)c;
		} else if (c == '"' || c == '\\') {
			out[o++] = '\\';
			out[o++] = (char)c;
		} else {
			out[o++] = '\\';
			out[o++] = 'x';
			out[o++] = hex[c >> 4];
			out[o++] = hex[c & 15];
		}
	}
	if (!plain)
		out[o++] = '"';
	out[o] = '\0';
	free(b);
	return out;
}

/* Prints fmt with "%s" the key of o (ctl_show), "?" if it has none. */
static void ctl_print_key(const char *fmt, const json_t *o, const char *name)
{
	const json_t *str = json_object_get(o, name);
	char *k = json_is_string(str) ? ctl_show(str) : NULL;

	printf(fmt, k ? k : "?");
	free(k);
}

static double num(const json_t *o, const char *k)
{
	return json_number_value(json_object_get(o, k));
}

/* The store's error of window w, or NULL (read, or a local namespace). */
static const char *ctl_store_error(const json_t *w)
{
	return json_string_value(json_object_get(json_object_get(w, "store"), "error"));
}

/* The store's part of a synced namespace's answer: each window as read
 * from the store (when, once), or why the store could not say (once when
 * every window failed alike). */
static void ctl_print_store(const json_t *ws)
{
	const json_t *w, *st;
	const char *err, *first = ctl_store_error(json_array_get(ws, 0));
	size_t i;
	bool head = false, alike = first != NULL;

	json_array_foreach(ws, i, w)
		alike = alike && (err = ctl_store_error(w)) && strcmp(err, first) == 0;
	if (alike) {
		printf("store: away (%s): the counts above are this node's only\n", first);
		return;
	}
	json_array_foreach(ws, i, w) {
		if (!(st = json_object_get(w, "store")))
			return;
		if ((err = ctl_store_error(w))) {
			printf("store: away for the %.0fs window (%s)\n", num(w, "window"), err);
			continue;
		}
		if (json_object_get(st, "in_flight")) {      /* a concurrency limit's */
			printf("store: %g leases in flight (every node's), the first expires in "
			       "%.1fs\n", num(st, "in_flight"), num(st, "expires_in"));
			continue;
		}
		if (json_object_get(st, "ahead")) {          /* a GCRA's */
			printf("store: %.0fs window: %g hits in the bucket (its TAT %.3fs ahead)\n",
			       num(w, "window"), num(st, "count"), num(st, "ahead"));
			continue;
		}
		if (!head) {
			time_t t = (time_t)num(st, "read_at");
			struct tm tm;
			char when[32] = "?";
			if (gmtime_r(&t, &tm))
				strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
			printf("store, read at %s (every node's pushed hits):\n", when);
			printf("%8s %12s %12s %12s\n", "WINDOW", "CURRENT", "PREVIOUS", "RATE");
			head = true;
		}
		printf("%7.0fs %12g %12g %12g\n", num(w, "window"), num(st, "current"),
		       num(st, "previous"), num(st, "rate"));
	}
}

static void ctl_print_keys(const json_t *root)
{
	const json_t *ws = json_object_get(root, "windows"), *w;
	size_t i;

	ctl_print_key("namespace %s, ", root, "namespace");
	ctl_print_key("key %s\n", root, "key");
	printf("%8s %12s %12s %10s %10s %12s %10s %10s %6s\n", "WINDOW", "COUNT", "CLUSTER",
	       "UNPUSHED", "GRANT", "RATE", "LIMIT", "REMAINING", "RESET");
	json_array_foreach(ws, i, w) {
		char lim[24] = "-", rem[24] = "-", count[24] = "-", cluster[24] = "-";
		if (json_object_get(w, "limit")) {
			snprintf(lim, sizeof(lim), "%.0f", num(w, "limit"));
			snprintf(rem, sizeof(rem), "%.0f", num(w, "remaining"));
		}
		/* "-": this node holds no counter of the key in the window. */
		if (!json_is_false(json_object_get(w, "seen"))) {
			snprintf(count, sizeof(count), "%g", num(w, "count"));
			snprintf(cluster, sizeof(cluster), "%g", num(w, "cluster"));
		}
		printf("%7.0fs %12s %12s %10g %10g %12g %10s %10s %5.0fs\n", num(w, "window"),
		       count, cluster, num(w, "unpushed"), num(w, "grant"), num(w, "rate"), lim,
		       rem, num(w, "reset"));
		if (json_object_get(w, "in_flight"))
			printf("%8s leases in flight: %.0f\n", "", num(w, "in_flight"));
	}
	ctl_print_store(ws);
}

static void ctl_print_top(const json_t *root)
{
	const json_t *keys = json_object_get(root, "keys"), *k;
	size_t i, width = 3, n = json_array_size(keys);
	char **shown = calloc(n ? n : 1, sizeof(*shown));

	ctl_print_key("namespace %s, ", root, "namespace");
	printf("window %.0f s, by %s: %zu key(s); one hit in %.0f sampled, "
	       "%.0f entries, error bound %g\n", num(root, "window"),
	       json_string_value(json_object_get(root, "by")), n,
	       num(root, "sample"), num(root, "entries"), num(root, "error_bound"));
	json_array_foreach(keys, i, k) {
		const json_t *str = json_object_get(k, "key");
		if (shown && json_is_string(str) && (shown[i] = ctl_show(str)) &&
		    strlen(shown[i]) > width)
			width = strlen(shown[i]);
	}
	printf("%4s  %-*s %12s %10s\n", "#", (int)width, "KEY", "COUNT", "ERROR");
	json_array_foreach(keys, i, k) {
		printf("%4zu  %-*s %12g %10g\n", i + 1, (int)width,
		       shown && shown[i] ? shown[i] : "?", num(k, "count"), num(k, "error"));
		if (shown)
			free(shown[i]);
	}
	free(shown);
}

static void ctl_print_reset(const json_t *root)
{
	const char *store = json_string_value(json_object_get(root, "store"));

	ctl_print_key("namespace %s, ", root, "namespace");
	ctl_print_key("key %s: ", root, "key");
	printf("forgotten on this node (%g hits in %.0f window(s))\n", num(root, "removed"),
	       num(root, "windows"));
	if (store && strcmp(store, "sent") == 0)
		printf("  store: forgotten (%g hits); every node forgets it within a sync period\n",
		       num(root, "store_removed"));
	else if (store && strcmp(store, "queued") == 0)
		printf("  store: away; queued, sent once when it is back (other nodes keep the "
		       "count until then)\n");
}

/* A limits set or rm answer (PUT, DELETE /limits). */
static void ctl_print_limit(const json_t *root)
{
	const char *store = json_string_value(json_object_get(root, "store"));
	const json_t *limit = json_object_get(root, "limit");

	ctl_print_key("namespace %s, ", root, "namespace");
	ctl_print_key("key %s, ", root, "key");
	printf("window %.0f s: ", num(root, "window"));
	if (limit)
		printf("limit %.0f\n", json_number_value(limit));
	else
		printf("%s\n", json_is_true(json_object_get(root, "removed"))
				   ? "back to the namespace's limit" : "had no limit of its own");
	if (store && strcmp(store, "stored") == 0)
		printf("  store: stored; every node has it within a sync period\n");
}

/* A limits get answer's rows; the header first when head. */
static void ctl_print_limits(const json_t *root, bool head)
{
	const json_t *ls = json_object_get(root, "limits"), *l;
	size_t i;

	if (head) {
		ctl_print_key("namespace %s: ", root, "namespace");
		if (json_object_get(root, "count"))
			printf("%.0f limit(s) per key of at most %.0f\n", num(root, "count"),
			       num(root, "max"));
		else
			ctl_print_key("key %s\n", root, "key");
		printf("%-40s %8s %14s\n", "KEY", "WINDOW", "LIMIT");
	}
	json_array_foreach(ls, i, l) {
		const json_t *k = json_object_get(l, "key");
		char *shown = ctl_show(k ? k : json_object_get(root, "key"));
		printf("%-40s %8.0f %14.0f\n", shown ? shown : "?", num(l, "window"),
		       num(l, "limit"));
		free(shown);
	}
}

/* `ctl limits set|get|rm ...` (args: what follows "limits"): the first
 * request's method and target. NULL, or why not. */
static const char *ctl_limits_target(int argc, char **argv, const char **method, char *target,
				     size_t cap)
{
	static char pkey[CTL_TARGET_MAX - 64];
	char pns[3 * NS_NAME_MAX], pw[64], pl[64];
	const char *sub = argc > 0 ? argv[0] : "";
	bool set = strcmp(sub, "set") == 0, rm = strcmp(sub, "rm") == 0;
	bool get = strcmp(sub, "get") == 0;
	int need = set ? 4 : rm ? 3 : 2;

	if ((!set && !rm && !get) || argc < need || argc > (get ? 3 : need + 1))
		return "";
	pkey[0] = '\0';
	if (ctl_pct(argv[1], strlen(argv[1]), pns, sizeof(pns)) < 0)
		return "namespace too long";
	if (argc > 2) {
		char *key = malloc(strlen(argv[2]) + 1);
		long kl = key ? ctl_key_arg(argv[2], key) : -1;
		int bad = kl < 0 || ctl_pct(key, (size_t)kl, pkey, sizeof(pkey)) < 0;
		free(key);
		if (bad)
			return "bad quoted key (\\\", \\\\ and \\xNN only), or too long";
	}
	const char *w = !get && argc > need ? argv[need] : "", *l = set ? argv[3] : "";
	if (ctl_pct(w, strlen(w), pw, sizeof(pw)) < 0 || ctl_pct(l, strlen(l), pl, sizeof(pl)) < 0)
		return "LIMIT or WINDOW too long";
	*method = set ? "PUT" : rm ? "DELETE" : "GET";
	if (snprintf(target, cap, "/limits?namespace=%s%s%s%s%s%s%s", pns, pkey[0] ? "&key=" : "",
		     pkey, set ? "&limit=" : "", pl, w[0] ? "&window=" : "", pw) >= (int)cap)
		return "key too long for a request";
	return NULL;
}

/* `ctl limits ...`: every page of a get. Returns the exit status. */
static int ctl_limits(const struct config *cfg, int argc, char **argv, bool as_json)
{
	static char body[CTL_ANSWER_MAX];
	char target[CTL_TARGET_MAX], page[CTL_TARGET_MAX + 32];
	const char *method = "GET", *bad = ctl_limits_target(argc, argv, &method, target,
							     sizeof(target));
	json_int_t next = 0;

	if (bad && !bad[0])
		return ctl_usage();
	if (bad) {
		fprintf(stderr, "spoa-ratelimit ctl: %s\n", bad);
		return 2;
	}
	for (bool head = true;; head = false) {
		snprintf(page, sizeof(page), "%s%s%lld", target, next ? "&after=" : "",
			 (long long)next);
		if (!next)
			page[strlen(target)] = '\0';
		int status = ctl_request(cfg, method, page, body, sizeof(body));
		if (status < 0)
			return 1;
		json_t *root = json_loads(body, JSON_ALLOW_NUL, NULL);
		if (status != 200 || !root) {
			const char *why = root ? json_string_value(json_object_get(root, "error"))
					       : NULL;
			fprintf(stderr, "spoa-ratelimit ctl: %d: %s\n", status, why ? why : body);
			json_decref(root);
			return 1;
		}
		if (as_json)
			fputs(body, stdout);
		if (strcmp(method, "GET") != 0) {
			if (!as_json)
				ctl_print_limit(root);
			json_decref(root);
			return 0;
		}
		if (!as_json)
			ctl_print_limits(root, head);
		next = json_integer_value(json_object_get(root, "next"));
		json_decref(root);
		if (next <= 0)
			return 0;
	}
}

int ctl_main(int argc, char **argv)
{
	const char *file = NULL;
	bool as_json = false;
	int i = 1;

	for (; i < argc && argv[i][0] == '-'; i++) {
		if (strcmp(argv[i], "-c") == 0 && i + 1 < argc)
			file = argv[++i];
		else if (strcmp(argv[i], "--json") == 0)
			as_json = true;
		else
			return ctl_usage();
	}
	if (argc - i < 2)
		return ctl_usage();
	const char *cmd = argv[i], *ns = argv[i + 1];
	struct config cfg;
	struct config_err cerr;
	char buf[1024], target[CTL_TARGET_MAX], pns[3 * NS_NAME_MAX], pkey[CTL_TARGET_MAX - 64];

	config_defaults(&cfg);
	if (file && config_load(&cfg, file, &cerr) < 0) {
		config_err_format(&cerr, buf, sizeof(buf));
		fprintf(stderr, "spoa-ratelimit ctl: %s\n", buf);
		return 2;
	}
	if (!cfg.http_listen[0] || !cfg.http_admin_token[0]) {
		fprintf(stderr, "spoa-ratelimit ctl: %s sets no %s: the admin endpoints are off\n",
			file ? file : "the built-in configuration",
			cfg.http_listen[0] ? "http_admin_token" : "http_listen");
		config_free(&cfg);
		return 2;
	}
	if (strcmp(cmd, "limits") == 0) {
		int st = ctl_limits(&cfg, argc - i - 1, argv + i + 1, as_json);
		config_free(&cfg);
		return st;
	}
	const char *method = "GET", *bad = NULL;
	if (ctl_pct(ns, strlen(ns), pns, sizeof(pns)) < 0) {
		bad = "namespace too long";
	} else if ((strcmp(cmd, "keys") == 0 || strcmp(cmd, "reset") == 0) && argc - i == 3) {
		char *key = malloc(strlen(argv[i + 2]) + 1);
		long kl = key ? ctl_key_arg(argv[i + 2], key) : -1;
		if (kl < 0)
			bad = key ? "bad quoted key (\\\", \\\\ and \\xNN only)" : "out of memory";
		else if (ctl_pct(key, (size_t)kl, pkey, sizeof(pkey)) < 0 ||
			 snprintf(target, sizeof(target), "/keys?namespace=%s&key=%s", pns,
				  pkey) >= (int)sizeof(target))
			bad = "key too long for a request";
		free(key);
		if (cmd[0] == 'r')
			method = "DELETE";
	} else if (strcmp(cmd, "top") == 0 && argc - i <= 5) {
		const char *n = argc - i > 2 ? argv[i + 2] : "10";
		const char *by = argc - i > 3 ? argv[i + 3] : "hits";
		const char *w = argc - i > 4 ? argv[i + 4] : "";
		char pn[64], pby[64], pw[64];
		if (ctl_pct(n, strlen(n), pn, sizeof(pn)) < 0 ||
		    ctl_pct(by, strlen(by), pby, sizeof(pby)) < 0 ||
		    ctl_pct(w, strlen(w), pw, sizeof(pw)) < 0)
			bad = "N, hits|denied or WINDOW too long";
		else
			snprintf(target, sizeof(target), "/top?namespace=%s&n=%s&by=%s%s%s", pns, pn,
				 pby, w[0] ? "&window=" : "", pw);
	} else {
		config_free(&cfg);
		return ctl_usage();
	}
	if (bad) {
		fprintf(stderr, "spoa-ratelimit ctl: %s\n", bad);
		config_free(&cfg);
		return 2;
	}
	static char body[CTL_ANSWER_MAX];
	int status = ctl_request(&cfg, method, target, body, sizeof(body));
	config_free(&cfg);
	if (status < 0)
		return 1;
	if (as_json) {
		fputs(body, stdout);
		return status == 200 ? 0 : 1;
	}
	json_error_t jerr;
	json_t *root = json_loads(body, JSON_ALLOW_NUL, &jerr);
	if (status != 200 || !root) {
		const char *why = root ? json_string_value(json_object_get(root, "error")) : NULL;
		fprintf(stderr, "spoa-ratelimit ctl: %d: %s\n", status, why ? why : body);
		json_decref(root);
		return 1;
	}
	if (strcmp(cmd, "keys") == 0)
		ctl_print_keys(root);
	else if (strcmp(cmd, "top") == 0)
		ctl_print_top(root);
	else
		ctl_print_reset(root);
	json_decref(root);
	return 0;
}
