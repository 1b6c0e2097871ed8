/*
 * config_load.c - the agent's configuration: built-in defaults, a JSON
 * file read with jansson, then whatever the command line overrides, then
 * one config_check() over the result. docs/CONFIG.md documents every key.
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
 *
 * This file is the public API (config.h); the parser's machinery, the
 * keys, the namespaces and config_check() have a file each
 * (config_int.h lists them).
 */
#include "agent/config_int.h"
#include "strategies/strategy.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Contract: overwrites all of *c without freeing it (config_free() a loaded
 * config first). */
void config_defaults(struct config *c)
{
	static const uint32_t windows[] = { 1, 60, 3600 };
	struct ns_def *ns = &c->ns[0];

	memset(c, 0, sizeof(*c));
	snprintf(c->listen, sizeof(c->listen), "%s", CFG_LISTEN_DEFAULT);
	snprintf(c->peers_name, sizeof(c->peers_name), "%s", CFG_PEER_NAME_DEFAULT);
	c->peers_push_ms = CFG_PUSH_DEFAULT_MS;
	c->peers_node_keys = CFG_NODE_KEYS_DEFAULT;
	c->listen_mode = -1;
	c->http_deny_status = 429;
	c->top_keys = 64;
	c->top_sample = 16;
	c->workers = config_default_workers();
	c->max_keys = CFG_MAX_KEYS_DEFAULT;
	c->max_buffer_memory = CFG_BUFMEM_DEFAULT;
	snprintf(c->message_prefix, sizeof(c->message_prefix), "%s", CFG_PREFIX_DEFAULT);
	c->var_scope = SPOP_SCOPE_TXN;
	c->max_frame_size = SPOP_DEFAULT_FRAME_SIZE;
	c->max_connections = CFG_CONN_DEFAULT;
	c->idle_timeout_ms = CFG_IDLE_DEFAULT_MS;
	c->frame_timeout_ms = CFG_FTIMEOUT_DEFAULT_MS;
	c->sched_batch = CONFIG_AUTO;
	c->collect_us = CONFIG_AUTO;
	c->log_level = LOG_INFO;

	ns_def_init(ns);
	snprintf(ns->name, sizeof(ns->name), "%s", CFG_NS_DEFAULT);
	memcpy(ns->window_sizes, windows, sizeof(windows));
	ns->n_window_sizes = sizeof(windows) / sizeof(windows[0]);
	snprintf(ns->strategy, sizeof(ns->strategy), "%s", local_strategy.name);
	c->n_ns = 1;
}

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
	rc = cfg_parse_top(p, root, &tmp);
	json_decref(root);
	/* envoyproxy/ratelimit's YAML: its errors name their own file */
	if (rc == 0)
		rc = cfg_apply_envoy(p, &tmp, path);
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

/* Contract: *c must hold a valid config (config_defaults(), maybe an
 * earlier config_load()). On success the file's keys replace c's, a
 * non-empty "namespaces" replaces all of c's namespaces (the old
 * strategy_opts are freed) and the result has passed config_check(). On
 * failure *c is unchanged, nothing new stays allocated, and *err names the
 * file, the JSON path (or "line L, column C" for a syntax error) and the
 * problem. */
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

/* Whether every hit of some namespace waits for the store (sync_rate 0). */
static bool cfg_hits_wait(const struct config *c)
{
	for (size_t i = 0; i < c->n_ns; i++)
		if (c->ns[i].sync_rate == 0)
			return true;
	return false;
}

bool config_sched_batch(const struct config *c, bool bursts)
{
	return c->sched_batch == CONFIG_AUTO ? !bursts && !cfg_hits_wait(c) : c->sched_batch != 0;
}

uint32_t config_collect_us(const struct config *c, bool bursts)
{
	if (c->collect_us != CONFIG_AUTO)
		return (uint32_t)c->collect_us;
	return !bursts && !cfg_hits_wait(c) ? CFG_COLLECT_DEFAULT_US : 0;
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
