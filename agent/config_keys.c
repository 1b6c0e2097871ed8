/*
 * config_keys.c - the top-level keys of the configuration file: one setter
 * per key reads its JSON value into a struct config, range-checked before
 * it is narrowed; cfg_top_keys maps the names to the setters. The
 * "namespaces" key is config_ns.c's. docs/CONFIG.md documents each key.
 */
#include "agent/config_int.h"

#include <stdio.h>
#include <string.h>

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

/* Each front's listen address: cfg_set_listen, cfg_set_http_listen,
 * cfg_set_peers_listen, ... (agent/fronts.h), by the field it fills. */
#define CFG_FRONT_SETTER(id, name, ops, field, key)                                      \
	static int cfg_set_##field(struct cfg_parser *p, json_t *v, void *obj)           \
	{                                                                                \
		return cfg_set_addr(p, v, ((struct config *)obj)->field);                \
	}
FRONTS(CFG_FRONT_SETTER)
#undef CFG_FRONT_SETTER

/* The fronts' address keys, by their JSON path (agent/fronts.h): a
 * top-level key, or "peers.listen", which cfg_parse_object() matches
 * inside "peers" only. Both tables below take them. */
#define CFG_FRONT_KEY(id, label, ops, field, key) { .name = key, .set = cfg_set_##field },

/* peers.name: HAProxy's line 2 of a hello names the peer called. */
static int cfg_set_peers_name(struct cfg_parser *p, json_t *v, void *obj)
{
	struct config *c = obj;

	if (!json_is_string(v) || !cfg_peer_name_ok(json_string_value(v), json_string_length(v)))
		return cfg_fail_type(p, v, "a peer name of 1..63 bytes without space or control "
				     "character");
	memcpy(c->peers_name, json_string_value(v), json_string_length(v) + 1);
	return 0;
}

static const struct cfg_key cfg_front_keys[] = {
	FRONTS(CFG_FRONT_KEY)
};

static const struct cfg_key cfg_peers_keys[] = {
	{ .name = "name",             .set = cfg_set_peers_name },
	{ .name = "push_ms", .kind = CFG_KEY_INT, .off = offsetof(struct config, peers_push_ms),
	  .size = sizeof(uint32_t), .lo = CFG_PUSH_MIN_MS, .hi = CFG_PUSH_MAX_MS },
	{ .name = "node_keys", .kind = CFG_KEY_INT, .off = offsetof(struct config, peers_node_keys),
	  .size = sizeof(uint32_t), .lo = CFG_MAX_KEYS_MIN, .hi = CFG_MAX_KEYS_MAX },
};

/* "peers": { "listen": ADDR, "name": NAME, "push_ms": N, "node_keys": N }
 * (docs/PEERS.md). */
static int cfg_set_peers(struct cfg_parser *p, json_t *v, void *obj)
{
	struct cfg_key keys[CFG_N_KEYS(cfg_front_keys) + CFG_N_KEYS(cfg_peers_keys)];
	size_t n = 0;

	if (!json_is_object(v))
		return cfg_fail_type(p, v, "an object { \"listen\": ADDR, \"name\": NAME }");
	/* Its keys, and the fronts' whose path is "peers.<key>". */
	for (size_t i = 0; i < CFG_N_KEYS(cfg_front_keys); i++)
		if (strncmp(cfg_front_keys[i].name, "peers.", 6) == 0)
			keys[n++] = cfg_front_keys[i];
	for (size_t i = 0; i < CFG_N_KEYS(cfg_peers_keys); i++)
		keys[n++] = cfg_peers_keys[i];
	return cfg_parse_object(p, v, keys, n, obj);
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

static int cfg_set_log_level(struct cfg_parser *p, json_t *v, void *obj)
{
	struct config *c = obj;
	int level = json_is_string(v) ? log_level_parse(json_string_value(v)) : -1;

	if (level < 0)
		return cfg_want_enum(p, v, cfg_log_level_names, LOG_LEVEL_COUNT, &c->log_level);
	c->log_level = level;
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

/* Visible ASCII, no space: it travels in "Authorization: Bearer <token>". */
static int cfg_set_token(struct cfg_parser *p, json_t *v, char *dst)
{
	const char *t;
	size_t n;

	if (!json_is_string(v))
		return cfg_fail_type(p, v, "a string of 1..255 visible ASCII characters");
	t = json_string_value(v);
	n = json_string_length(v);
	if (n == 0 || n >= CONFIG_TOKEN_MAX)
		return cfg_fail(p, "expected 1..255 visible ASCII characters, got %zu bytes", n);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)t[i] <= 0x20 || (unsigned char)t[i] >= 0x7f)
			return cfg_fail(p, "expected visible ASCII characters only (no space, no "
					"control character), byte %zu is not", i);
	memcpy(dst, t, n + 1);
	return 0;
}

static int cfg_set_http_token(struct cfg_parser *p, json_t *v, void *obj)
{
	return cfg_set_token(p, v, ((struct config *)obj)->http_token);
}

static int cfg_set_http_admin_token(struct cfg_parser *p, json_t *v, void *obj)
{
	return cfg_set_token(p, v, ((struct config *)obj)->http_admin_token);
}

/* A flag that may also be left to the namespaces (CONFIG_AUTO): an int. */
static int cfg_set_sched_batch(struct cfg_parser *p, json_t *v, void *obj)
{
	if (!json_is_boolean(v))
		return cfg_fail_type(p, v, "true or false");
	((struct config *)obj)->sched_batch = json_is_true(v);
	return 0;
}

static const struct cfg_key cfg_top_keys[] = {
	/* Each front's listen address: listen, http_listen (agent/fronts.h). */
	FRONTS(CFG_FRONT_KEY)
	{ .name = "workers",          .set = cfg_set_workers },
	CFG_INT(struct config, max_keys, CFG_MAX_KEYS_MIN, CFG_MAX_KEYS_MAX),
	{ .name = "namespaces",       .set = cfg_set_namespaces },
	{ .name = "message_prefix",   .set = cfg_set_message_prefix },
	{ .name = "var_scope",        .set = cfg_set_var_scope },
	CFG_INT(struct config, max_frame_size, SPOP_MIN_FRAME_SIZE, CFG_FRAME_MAX),
	CFG_INT(struct config, max_connections, 1, CFG_CONN_MAX),
	CFG_INT(struct config, idle_timeout_ms, 1, CFG_TIMEOUT_MAX_MS),
	CFG_INT(struct config, frame_timeout_ms, 1, CFG_TIMEOUT_MAX_MS),
	{ .name = "log_level",        .set = cfg_set_log_level },
	{ .name = "key_secret",       .set = cfg_set_key_secret },
	CFG_INT(struct config, max_buffer_memory,
		(long long)CFG_BUFMEM_MIN, (long long)CFG_BUFMEM_MAX),
	{ .name = "listen_mode",      .set = cfg_set_listen_mode },
	{ .name = "listen_owner",     .set = cfg_set_listen_owner },
	CFG_INT(struct config, http_deny_status, 400, 599),
	{ .name = "http_token",       .set = cfg_set_http_token },
	CFG_FLAG(struct config, http_metrics_token),
	{ .name = "http_admin_token", .set = cfg_set_http_admin_token },
	CFG_INT(struct config, top_keys, 0, 1024),
	CFG_INT(struct config, top_sample, 1, 1024),
	CFG_INT(struct config, http_max_connections, 1, CFG_CONN_MAX),
	CFG_INT(struct config, http_max_buffer_memory,
		(long long)CFG_HTTP_BUFMEM_MIN, (long long)CFG_BUFMEM_MAX),
	{ .name = "state_file",       .set = cfg_set_state_file },
	{ .name = "sched_batch",      .set = cfg_set_sched_batch },
	CFG_INT(struct config, collect_us, 0, CFG_COLLECT_MAX_US),
	{ .name = "peers",            .set = cfg_set_peers },
	{ .name = "envoy_config",     .set = cfg_set_envoy_config },
};

#undef CFG_FRONT_KEY

int cfg_parse_top(struct cfg_parser *p, json_t *root, struct config *c)
{
	p->envoy = json_object_get(root, "envoy_config") != NULL;
	return cfg_parse_object(p, root, cfg_top_keys, CFG_N_KEYS(cfg_top_keys), c);
}
