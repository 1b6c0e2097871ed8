/*
 * config_check.c - config_check(): the whole configuration, after the
 * file and the command line, by the same rules as the file's keys (the
 * paths of its messages are the keys'); and the rules of values both
 * check: listen addresses, socket owners, message_prefix, the names of
 * enumerated values, the default number of workers. The keys
 * (config_keys.c) call here, never the reverse.
 */
#include "agent/config_int.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The names of enumerated values, for the keys and for the messages of
 * config_check(). */
const char *const cfg_scope_names[SPOP_SCOPE_COUNT] = {
	[SPOP_SCOPE_PROC] = "proc",
	[SPOP_SCOPE_SESS] = "sess",
	[SPOP_SCOPE_TXN]  = "txn",
	[SPOP_SCOPE_REQ]  = "req",
	[SPOP_SCOPE_RES]  = "res",
};

/* Same order as enum log_level; log_level_parse() is the authority. */
const char *const cfg_log_level_names[LOG_LEVEL_COUNT] = {
	[LOG_ERR] = "err", [LOG_WARN] = "warn", [LOG_INFO] = "info", [LOG_DEBUG] = "debug",
};

int config_default_workers(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	if (n < 1)
		return 1;
	return n > CFG_WORKERS_MAX ? CFG_WORKERS_MAX : (int)n;
}

/* ------------------------------------------------------------------------
 * Rules shared by the keys and config_check(). The cfg_check_* work on the
 * current path and return 0 or -1 through cfg_fail().
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

int cfg_check_listen(struct cfg_parser *p, const char *s)
{
	const char *why = cfg_listen_problem(s);
	char q[CFG_SHOW_MAX];

	if (!why)
		return 0;
	cfg_quote(s, strlen(s), q, sizeof(q));
	return cfg_fail(p, "expected %s, got %s: %s", CFG_LISTEN_WHAT, q, why);
}

bool cfg_peer_name_ok(const char *s, size_t n)
{
	if (n < 1 || n >= CONFIG_PEER_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] <= 0x20 || s[i] == 0x7f)
			return false;
	return true;
}

bool cfg_prefix_ok(const char *s, size_t n)
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
bool cfg_owner_ok(const char *s, size_t n)
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

/* ------------------------------------------------------------------------
 * The whole config.
 */

/* v in lo..hi, else a message at the path of key. */
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

/* Contract: every field of *c in range, the same rules as the file, with
 * workers >= 1 (0 has been resolved by then). Paths are those of the
 * file's keys; err->file is left empty. */
/* Each front's listen address (agent/fronts.h), under its key: a valid
 * address, listen's always, the others' when set, no two alike. */
static int cfg_check_addresses(struct cfg_parser *p, const struct config *c)
{
	for (int f = 0; f < FRONT_COUNT; f++) {
		const char *a = config_front_address(c, (enum front_id)f);
		size_t mark = cfg_path_key(p, front_address_key((enum front_id)f)), n;

		if ((n = strnlen(a, CONFIG_ADDR_MAX)) == CONFIG_ADDR_MAX)
			return cfg_fail(p, "not NUL-terminated");
		if ((f == FRONT_SPOP || n > 0) && cfg_check_listen(p, a) < 0)
			return -1;
		for (int g = 0; g < f && n > 0; g++)
			if (strcmp(a, config_front_address(c, (enum front_id)g)) == 0)
				return cfg_fail(p, "the same address as %s",
						front_address_key((enum front_id)g));
		cfg_path_pop(p, mark);
	}
	return 0;
}

/* Does a front listen on a unix socket (what listen_mode and listen_owner
 * apply to)? */
static bool cfg_any_unix_socket(const struct config *c)
{
	for (int f = 0; f < FRONT_COUNT; f++)
		if (config_unix_path(config_front_address(c, (enum front_id)f)))
			return true;
	return false;
}

/* listen_mode and listen_owner: valid, and only with a unix socket. */
static int cfg_check_socket_owner(struct cfg_parser *p, const struct config *c)
{
	char q[CFG_SHOW_MAX];
	size_t mark, n;

	if (c->listen_mode < -1 || c->listen_mode > 0777) {
		cfg_path_key(p, "listen_mode");
		return cfg_fail(p, "expected 0..0777, got %d", c->listen_mode);
	}
	mark = cfg_path_key(p, "listen_owner");
	n = strnlen(c->listen_owner, sizeof(c->listen_owner));
	if (n == sizeof(c->listen_owner))
		return cfg_fail(p, "not NUL-terminated");
	if (n > 0 && !cfg_owner_ok(c->listen_owner, n)) {
		cfg_quote(c->listen_owner, n, q, sizeof(q));
		return cfg_fail(p, "expected \"USER\", \"USER:GROUP\" or \":GROUP\", got %s", q);
	}
	cfg_path_pop(p, mark);
	if ((c->listen_mode >= 0 || n > 0) && !cfg_any_unix_socket(c)) {
		cfg_path_key(p, c->listen_mode >= 0 ? "listen_mode" : "listen_owner");
		cfg_quote(c->listen, strlen(c->listen), q, sizeof(q));
		return cfg_fail(p, "applies to a unix socket only, but listen is %s%s", q,
				c->http_listen[0] ? ", and http_listen is not one either" : "");
	}
	return 0;
}

/* The SPOP messages and the limits of a worker: prefix, scope, frames,
 * connections, timeouts, buffers. */
static int cfg_check_limits(struct cfg_parser *p, const struct config *c)
{
	char q[CFG_SHOW_MAX], names[128];
	size_t mark, n;

	if (cfg_check_range(p, "workers", c->workers, 1, CFG_WORKERS_MAX) < 0 ||
	    cfg_check_range(p, "max_keys", (long long)c->max_keys, CFG_MAX_KEYS_MIN,
			    CFG_MAX_KEYS_MAX) < 0)
		return -1;
	mark = cfg_path_key(p, "message_prefix");
	n = strnlen(c->message_prefix, sizeof(c->message_prefix));
	if (!cfg_prefix_ok(c->message_prefix, n)) {
		cfg_quote(c->message_prefix, n, q, sizeof(q));
		return cfg_fail(p, "expected 1..31 characters of [A-Za-z0-9_.-], got %s", q);
	}
	cfg_path_pop(p, mark);
	if (c->var_scope < 0 || c->var_scope >= SPOP_SCOPE_COUNT) {
		cfg_path_key(p, "var_scope");
		cfg_list_names(cfg_scope_names, SPOP_SCOPE_COUNT, names, sizeof(names));
		return cfg_fail(p, "expected one of %s, got %d", names, c->var_scope);
	}
	if (cfg_check_range(p, "max_frame_size", c->max_frame_size, SPOP_MIN_FRAME_SIZE,
			    CFG_FRAME_MAX) < 0 ||
	    cfg_check_range(p, "max_connections", c->max_connections, 1, CFG_CONN_MAX) < 0 ||
	    cfg_check_range(p, "idle_timeout_ms", c->idle_timeout_ms, 1, CFG_TIMEOUT_MAX_MS) < 0 ||
	    cfg_check_range(p, "frame_timeout_ms", c->frame_timeout_ms, 1, CFG_TIMEOUT_MAX_MS) < 0 ||
	    (c->collect_us != CONFIG_AUTO &&
	     cfg_check_range(p, "collect_us", c->collect_us, 0, CFG_COLLECT_MAX_US) < 0) ||
	    cfg_check_range(p, "max_buffer_memory", (long long)c->max_buffer_memory,
			    (long long)CFG_BUFMEM_MIN, (long long)CFG_BUFMEM_MAX) < 0)
		return -1;
	if (c->http_max_connections > c->max_connections) {
		cfg_path_key(p, "http_max_connections");
		return cfg_fail(p, "expected at most max_connections (%u), got %u",
				c->max_connections, c->http_max_connections);
	}
	if (c->http_max_buffer_memory > c->max_buffer_memory) {
		cfg_path_key(p, "http_max_buffer_memory");
		return cfg_fail(p, "expected at most max_buffer_memory (%zu), got %zu",
				c->max_buffer_memory, c->http_max_buffer_memory);
	}
	return 0;
}

/* The HTTP front's tokens, the heavy hitters, the log level, the secret. */
static int cfg_check_http_and_log(struct cfg_parser *p, const struct config *c)
{
	char names[128];

	if (strnlen(c->http_token, sizeof(c->http_token)) == sizeof(c->http_token)) {
		cfg_path_key(p, "http_token");
		return cfg_fail(p, "not NUL-terminated");
	}
	if (c->http_admin_token[0] && strcmp(c->http_admin_token, c->http_token) == 0) {
		cfg_path_key(p, "http_admin_token");
		return cfg_fail(p, "the same as http_token: the checks' token must not open the "
				"admin endpoints");
	}
	if (c->top_keys > 1024 || c->top_sample < 1 || c->top_sample > 1024) {
		cfg_path_key(p, "top_keys");
		return cfg_fail(p, "expected top_keys 0..1024 and top_sample 1..1024");
	}
	if (c->http_metrics_token && !c->http_token[0]) {
		cfg_path_key(p, "http_metrics_token");
		return cfg_fail(p, "true needs http_token (the token /metrics would ask for)");
	}
	if (c->log_level < 0 || c->log_level >= LOG_LEVEL_COUNT) {
		cfg_path_key(p, "log_level");
		cfg_list_names(cfg_log_level_names, LOG_LEVEL_COUNT, names, sizeof(names));
		return cfg_fail(p, "expected one of %s, got %d", names, c->log_level);
	}
	if (strnlen(c->key_secret, sizeof(c->key_secret)) == sizeof(c->key_secret)) {
		cfg_path_key(p, "key_secret");
		return cfg_fail(p, "not NUL-terminated");
	}
	return 0;
}

/* The peers front's keys, and the namespaces' haproxy_tables that need it:
 * the front on, each into table pushed by one namespace (a node takes one
 * definition of a table from a peer: two namespaces would overwrite each
 * other's sums). */
static int cfg_check_peers(struct cfg_parser *p, const struct config *c)
{
	size_t n = strnlen(c->peers_name, sizeof(c->peers_name)), mark;

	if (!cfg_peer_name_ok(c->peers_name, n)) {
		cfg_path_key(p, "peers.name");
		return cfg_fail(p, "expected a peer name of 1..63 bytes without space or control "
				"character");
	}
	if (cfg_check_range(p, "peers.push_ms", c->peers_push_ms, CFG_PUSH_MIN_MS,
			    CFG_PUSH_MAX_MS) < 0 ||
	    cfg_check_range(p, "peers.node_keys", c->peers_node_keys, CFG_MAX_KEYS_MIN,
			    CFG_MAX_KEYS_MAX) < 0)
		return -1;
	for (size_t i = 0; i < c->n_ns; i++) {
		const struct ns_haproxy_tables *h = &c->ns[i].haproxy;

		if (!h->from[0])
			continue;
		mark = cfg_path_push(p, "namespaces[%zu].haproxy_tables", i);
		if (!c->peers_listen[0])
			return cfg_fail(p, "needs the peers front: set peers.listen");
		for (size_t j = 0; j < i; j++)
			if (c->ns[j].haproxy.from[0] &&
			    strcmp(ns_table_leaf(c->ns[j].haproxy.into), ns_table_leaf(h->into)) == 0) {
				cfg_path_key(p, "into");
				return cfg_fail(p, "the same into table as namespaces[%zu]: one namespace "
						"pushes into a table", j);
			}
		cfg_path_pop(p, mark);
	}
	return 0;
}

/* Every namespace (ns_check and what only the whole list tells: unique
 * names, a strategy, shares within max_keys). */
static int cfg_check_namespaces(struct cfg_parser *p, const struct config *c)
{
	size_t mark = cfg_path_key(p, "namespaces"), shares = 0;

	if (c->n_ns < 1 || c->n_ns > NS_MAX)
		return cfg_fail(p, "expected 1..%d namespaces, got %zu", NS_MAX, c->n_ns);
	for (size_t i = 0; i < c->n_ns; i++) {
		const struct ns_def *ns = &c->ns[i];
		size_t nsmark = cfg_path_push(p, "[%zu]", i), kmark;

		if (cfg_check_ns(p, ns) < 0)
			return -1;
		kmark = cfg_path_key(p, "name");
		if (cfg_check_ns_name(p, c, i) < 0)
			return -1;
		cfg_path_pop(p, kmark);
		if (ns->strategy[0] == '\0') {
			cfg_path_key(p, "strategy");
			return cfg_fail(p, "missing");
		}
		if (ns->max_keys) {
			shares += ns->max_keys;
			if (shares > c->max_keys) {
				cfg_path_key(p, "max_keys");
				return cfg_fail(p, "the namespaces' max_keys add up to more than the "
						"top-level max_keys (%zu)", c->max_keys);
			}
		}
		cfg_path_pop(p, nsmark);
	}
	cfg_path_pop(p, mark);
	return 0;
}

int config_check(const struct config *c, struct config_err *err)
{
	struct cfg_parser p;

	memset(err, 0, sizeof(*err));
	cfg_parser_init(&p, err);
	if (cfg_check_addresses(&p, c) < 0 ||
	    cfg_check_range(&p, "http_deny_status", c->http_deny_status, 400, 599) < 0 ||
	    cfg_check_socket_owner(&p, c) < 0 || cfg_check_limits(&p, c) < 0 ||
	    cfg_check_http_and_log(&p, c) < 0 || cfg_check_namespaces(&p, c) < 0 ||
	    cfg_check_peers(&p, c) < 0)
		return -1;
	return 0;
}
