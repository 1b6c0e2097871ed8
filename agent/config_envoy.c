/*
 * config_envoy.c - the "envoy_config" key (docs/CONFIG.md, docs/ENVOY.md):
 * envoyproxy/ratelimit's YAML, a file or a folder, read after the other
 * keys (agent/envoy_config.c), each domain made the namespace of its
 * name: the one "namespaces" lists (its settings: store, count_denied,
 * caller_limit, ...; its window_sizes may be left out) or a new one with
 * the defaults. The namespace gets the domain's windows and tree
 * (struct ns_def's envoy, which it then owns, as its strategy_opts).
 */
#include "agent/config_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/envoy_config.h"
#include "strategies/strategy.h"

static int cfg_set_envoy_path(struct cfg_parser *p, json_t *v, struct config *c)
{
	size_t n;

	if (!json_is_string(v))
		return cfg_fail_type(p, v, "a file or folder path");
	n = json_string_length(v);
	if (n == 0 || n >= sizeof(c->envoy_config) || memchr(json_string_value(v), 0, n))
		return cfg_fail(p, "expected a path of 1..%zu bytes without NUL, got %zu bytes",
				sizeof(c->envoy_config) - 1, n);
	memcpy(c->envoy_config, json_string_value(v), n + 1);
	return 0;
}

static int cfg_set_envoy_path_key(struct cfg_parser *p, json_t *v, void *obj)
{
	return cfg_set_envoy_path(p, v, obj);
}

static const struct cfg_key cfg_envoy_keys[] = {
	{ .name = "path", .set = cfg_set_envoy_path_key },
	{ .name = "merge_domains", .kind = CFG_KEY_FLAG, .off = offsetof(struct config, envoy_merge),
	  .size = sizeof(bool) },
};

int cfg_set_envoy_config(struct cfg_parser *p, json_t *v, void *obj)
{
	struct config *c = obj;

	c->envoy_merge = false;
	if (json_is_string(v))
		return cfg_set_envoy_path(p, v, c);
	if (!json_is_object(v))
		return cfg_fail_type(p, v, "a path, or { \"path\": PATH, \"merge_domains\": BOOL }");
	c->envoy_config[0] = '\0';
	if (cfg_parse_object(p, v, cfg_envoy_keys, CFG_N_KEYS(cfg_envoy_keys), c) < 0)
		return -1;
	if (!c->envoy_config[0]) {
		cfg_path_key(p, "path");
		return cfg_fail(p, "missing: expected the YAML file or folder");
	}
	return 0;
}

/* The namespaces c holds without owning them (a file that did not list
 * namespaces keeps the caller's): made c's own, so that a domain can be
 * given to one. */
static int cfg_own_namespaces(struct cfg_parser *p, struct config *c)
{
	if (p->ns_replaced)
		return 0;
	for (size_t i = 0; i < c->n_ns; i++) {
		const char *o = c->ns[i].strategy_opts;

		c->ns[i].envoy = NULL;
		c->ns[i].strategy_opts = NULL;
		if (o && !(c->ns[i].strategy_opts = strdup(o))) {
			p->ns_replaced = true;
			return cfg_fail(p, "out of memory");
		}
	}
	p->ns_replaced = true;
	return 0;
}

/* Domain d into namespace ns: its windows added to those listed, its
 * delay bound raised to its limits'. */
static int cfg_envoy_into(struct cfg_parser *p, struct ns_def *ns, const struct envoy_domain *d)
{
	for (size_t i = 0; i < d->n_windows; i++) {
		if (ns_window_index(ns, d->windows[i]) >= 0)
			continue;
		if (ns->n_window_sizes == NS_MAX_WINDOWS) {
			cfg_path_key(p, "window_sizes");
			return cfg_fail(p, "envoy_config domain \"%s\" adds window %u s to %d window "
					"sizes already: a namespace has at most %d", d->name,
					d->windows[i], NS_MAX_WINDOWS, NS_MAX_WINDOWS);
		}
		ns->window_sizes[ns->n_window_sizes++] = d->windows[i];
	}
	if (d->delay_max_ms > ns->delay_max_ms)
		ns->delay_max_ms = d->delay_max_ms;
	/* Envoy's hits_addend (an LLM's tokens) may pass the limit: it is then
	 * over it, not refused (agent/rls_decide.h); max_cost where set. */
	if (ns->max_cost == 0)
		ns->max_cost = (double)NS_LIMIT_MAX;
	return 0;
}

/* The path as the configuration's file names it: relative to its folder. */
static void cfg_envoy_path(const char *file, const char *path, char *out, size_t len)
{
	const char *slash = file ? strrchr(file, '/') : NULL;

	if (path[0] == '/' || !slash)
		snprintf(out, len, "%s", path);
	else
		snprintf(out, len, "%.*s/%s", (int)(slash - file), file, path);
}

int cfg_apply_envoy(struct cfg_parser *p, struct config *c, const char *file)
{
	struct envoy_config ec = { .n = 0 };
	struct envoy_err e;
	char path[CONFIG_PATH_MAX + 256];
	int rc = 0;

	if (!c->envoy_config[0])
		return 0;
	cfg_envoy_path(file, c->envoy_config, path, sizeof(path));
	if (envoy_config_load(&ec, path, c->envoy_merge, &e) < 0) {
		snprintf(p->err->path, sizeof(p->err->path), "%s", e.path);
		snprintf(p->err->msg, sizeof(p->err->msg), "%s", e.msg);
		/* the YAML's file: config_load_root leaves it */
		snprintf(p->err->file, sizeof(p->err->file), "%s", e.file);
		return -1;
	}
	if (cfg_own_namespaces(p, c) < 0) {
		envoy_config_free(&ec);
		return -1;
	}
	for (size_t i = 0; rc == 0 && i < ec.n; i++) {
		struct envoy_domain *d = envoy_config_take(&ec, i);
		int k = -1;
		size_t mark;

		for (size_t j = 0; j < c->n_ns; j++)
			if (strcmp(c->ns[j].name, d->name) == 0)
				k = (int)j;

		if (k < 0) {
			if (c->n_ns == NS_MAX) {
				mark = cfg_path_key(p, "envoy_config");
				rc = cfg_fail(p, "domain \"%s\" would be namespace %d: at most %d", d->name,
					      NS_MAX + 1, NS_MAX);
				envoy_domain_free(d);
				break;
			}
			k = (int)c->n_ns++;
			ns_def_init(&c->ns[k]);
			snprintf(c->ns[k].name, sizeof(c->ns[k].name), "%s", d->name);
			snprintf(c->ns[k].strategy, sizeof(c->ns[k].strategy), "%s", local_strategy.name);
		}
		c->ns[k].envoy = d;
		mark = cfg_path_push(p, "namespaces[%d]", k);
		rc = cfg_envoy_into(p, &c->ns[k], d);
		cfg_path_pop(p, mark);
	}
	envoy_config_free(&ec);
	/* every namespace again: windows left to a domain, a domain's windows */
	for (size_t i = 0; rc == 0 && i < c->n_ns; i++) {
		size_t mark = cfg_path_push(p, "namespaces[%zu]", i);

		if (c->ns[i].n_window_sizes == 0) {
			cfg_path_key(p, "window_sizes");
			return cfg_fail(p, "missing: expected 1..%d window sizes (positive integers, "
					"seconds), and no envoy_config domain is named \"%s\"",
					NS_MAX_WINDOWS, c->ns[i].name);
		}
		/* checked, then the default store, as cfg_parse_ns() does */
		rc = cfg_check_ns(p, &c->ns[i]);
		if (rc == 0 && c->ns[i].strategy[0] == '\0')
			snprintf(c->ns[i].strategy, sizeof(c->ns[i].strategy), "%s",
				 local_strategy.name);
		cfg_path_pop(p, mark);
	}
	return rc;
}
