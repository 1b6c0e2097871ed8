/*
 * config_int.h - what the configuration's files share, behind config.h
 * (the one interface; nothing outside agent/config*.c includes this):
 *
 *   config_load.c    the public API: defaults, loading a file or a text,
 *                    the HTTP budgets, lookups, freeing, formatting errors
 *   config_parse.c   the parser's machinery: the JSON path, failing with
 *                    a message, quoting values, typed value readers,
 *                    key tables with "did you mean"
 *   config_keys.c    the top-level keys (JSON value -> struct config)
 *   config_ns.c      the "namespaces" key and the keys of a namespace
 *                    (-> struct ns_def), their checks through ns_check()
 *   config_envoy.c   the "envoy_config" key: envoyproxy/ratelimit's YAML
 *                    read (agent/envoy_config.h), its domains made
 *                    namespaces or added to those of the same name
 *   config_check.c   config_check(), the whole config after the command
 *                    line, and the value rules it shares with the keys
 *                    (listen addresses, owners, message_prefix)
 *
 * Errors (config.h): a failing cfg_* function fills the parser's
 * struct config_err through cfg_fail() (the current JSON path and the
 * message) and returns -1; nothing here logs.
 */
#ifndef CONFIG_INT_H
#define CONFIG_INT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/un.h>

#include "agent/config.h"
#include "agent/log.h"
#include "spop/spop-t.h"

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
#define CFG_PEER_NAME_DEFAULT  "spoa-ratelimit" /* peers.name */
#define CFG_PUSH_DEFAULT_MS    50               /* peers.push_ms */
#define CFG_PUSH_MIN_MS        5
#define CFG_PUSH_MAX_MS        10000
#define CFG_NODE_KEYS_DEFAULT  65536            /* peers.node_keys */
#define CFG_SUN_PATH_MAX       (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)

#define CFG_LISTEN_WHAT "\"HOST:PORT\", \"[IPV6]:PORT\" or \"unix:/PATH\""

_Static_assert(sizeof(CFG_LISTEN_DEFAULT) <= CONFIG_ADDR_MAX, "listen default too long");
_Static_assert(sizeof(CFG_PREFIX_DEFAULT) <= CONFIG_PREFIX_MAX, "prefix default too long");
_Static_assert(NS_WINDOW_MAX <= UINT32_MAX, "window sizes are uint32_t");
_Static_assert(CFG_TIMEOUT_MAX_MS <= UINT32_MAX, "timeouts are uint32_t");

/* The names of var_scope (enum spop_scope) and log_level (enum log_level),
 * in their enums' order (config_keys.c). */
extern const char *const cfg_scope_names[SPOP_SCOPE_COUNT];
extern const char *const cfg_log_level_names[LOG_LEVEL_COUNT];

/* ---- the parser's machinery (config_parse.c) ---- */

/* The parser's state: where we are in the document, where errors go. */
struct cfg_parser {
	struct config_err *err;
	bool ns_replaced;          /* the file listed namespaces: tmp owns new ones */
	bool envoy;                /* the file has envoy_config: a namespace may leave
	                              window_sizes to its domain (checked after it) */
	size_t len;                /* strlen(path) */
	char path[sizeof(((struct config_err *)0)->path)];
};

/* A key of a JSON object: its setter reads one value into the object the
 * table is for (a struct config or a struct ns_def). */
/* A key of an object: its own setter, or (set NULL) a plain field of the
 * target described by the table (CFG_INT, CFG_FLAG): an integer in
 * [lo, hi] or true/false, stored at off (size bytes). */
struct cfg_key {
	const char *name;
	int (*set)(struct cfg_parser *p, json_t *v, void *obj);
	enum { CFG_KEY_OWN, CFG_KEY_INT, CFG_KEY_FLAG } kind;
	size_t off, size;
	long long lo, hi;
};

/* The key is the field's name. */
#define CFG_INT(type, field, min, max)                                                   \
	{ .name = #field, .kind = CFG_KEY_INT, .off = offsetof(type, field),             \
	  .size = sizeof(((type *)0)->field), .lo = (min), .hi = (max) }
#define CFG_FLAG(type, field)                                                            \
	{ .name = #field, .kind = CFG_KEY_FLAG, .off = offsetof(type, field),            \
	  .size = sizeof(((type *)0)->field) }

#define CFG_N_KEYS(t) (sizeof(t) / sizeof((t)[0]))

void cfg_parser_init(struct cfg_parser *p, struct config_err *err);
/* Appends a component to the path and returns the length before it, for
 * cfg_path_pop(). A path too long for err->path is cut: it is for humans. */
__attribute__((format(printf, 2, 3)))
size_t cfg_path_push(struct cfg_parser *p, const char *fmt, ...);
size_t cfg_path_key(struct cfg_parser *p, const char *key);
void cfg_path_pop(struct cfg_parser *p, size_t mark);
/* Fills err with the current path and the message; returns -1. */
__attribute__((format(printf, 2, 3)))
int cfg_fail(struct cfg_parser *p, const char *fmt, ...);
/* "expected <what>, got <v>". Returns -1. */
int cfg_fail_type(struct cfg_parser *p, const json_t *v, const char *what);
/* s[0..n) in double quotes, cut to fit, unprintable bytes as '?'. */
void cfg_quote(const char *s, size_t n, char *buf, size_t len);
/* `"a", "b" or "c"` into buf. */
void cfg_list_names(const char *const *names, size_t n, char *buf, size_t len);
/* An integer in lo..hi into *out. */
int cfg_want_int(struct cfg_parser *p, const json_t *v, long long lo, long long hi,
		 long long *out);
/* One of names[0..n); *out = its index. */
int cfg_want_enum(struct cfg_parser *p, const json_t *v, const char *const *names, size_t n,
		  int *out);
/* Applies every key of obj through the table keys[0..n) to target; the
 * first unknown key (with a "did you mean") or bad value fails. */
int cfg_parse_object(struct cfg_parser *p, json_t *obj, const struct cfg_key *keys, size_t n,
		     void *target);

/* ---- the keys (config_keys.c, config_ns.c) ---- */

/* The document's top-level object into *c (config_load()'s copy). */
int cfg_parse_top(struct cfg_parser *p, json_t *root, struct config *c);

/* "namespaces": a non-empty list replaces the namespaces (p->ns_replaced;
 * config_load() frees the old ones on success, the new ones on failure);
 * an empty list keeps them. */
int cfg_set_namespaces(struct cfg_parser *p, json_t *v, void *obj);
/* "envoy_config": PATH or {"path": PATH, "merge_domains": BOOL}. */
int cfg_set_envoy_config(struct cfg_parser *p, json_t *v, void *obj);
/* After the keys: the YAML of c->envoy_config (relative to the directory
 * of file, the configuration's) read, each domain into the namespace of
 * its name (made if there is none), every namespace checked again. -1
 * with the YAML's file, line and column, or the namespace's path. */
int cfg_apply_envoy(struct cfg_parser *p, struct config *c, const char *file);
/* Frees every namespace's strategy_opts and envoy domain. */
void cfg_free_ns(struct config *c);
/* ns_check() of namespace ns, at path namespaces[i]: a message at the
 * path of the key that is wrong. */
int cfg_check_ns(struct cfg_parser *p, const struct ns_def *ns);
/* Name of namespace i of c (valid: ns_check()), at path
 * namespaces[i].name: unlike those before it. */
int cfg_check_ns_name(struct cfg_parser *p, const struct config *c, size_t i);

/* ---- value rules shared by the keys and config_check (config_check.c) ---- */

/* A listen address (CFG_LISTEN_WHAT), else a message at the current path. */
int cfg_check_listen(struct cfg_parser *p, const char *s);
/* peers.name: 1..63 bytes, no space or control character (it travels as
 * a line of HAProxy's hello, which ends a name at its first space). */
bool cfg_peer_name_ok(const char *s, size_t n);
/* message_prefix: 1..31 characters of [A-Za-z0-9_.-]. */
bool cfg_prefix_ok(const char *s, size_t n);
/* listen_owner: "user", "user:group" or ":group". */
bool cfg_owner_ok(const char *s, size_t n);

#endif /* CONFIG_INT_H */
