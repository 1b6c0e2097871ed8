/*
 * envoy_config.c - envoyproxy/ratelimit's YAML configuration (see
 * envoy_config.h), read with libyaml's document API and checked in
 * envoyproxy/ratelimit's order (src/config/config_impl.go): first every
 * key of the document (validateYamlKeys: strings, known keys, lists of
 * maps, no other leaves than strings, integers, booleans and nulls), then
 * the domain and its descriptors (loadConfig, loadDescriptors). Scalars
 * are typed as its YAML library (yaml.v2) types them: an unquoted scalar
 * may be a null, a boolean (yes/no/on/off too), an integer or a float,
 * and any scalar read into a string is its text.
 */
#include "agent/envoy_config.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

#include "agent/ns.h"

#define ENVOY_YAML_DEPTH   (2 * ENVOY_DEPTH_MAX + 8) /* nesting of the document */
#define ENVOY_VISITS_MAX   2000000u     /* nodes visited: aliases expand */

/* The keys envoyproxy/ratelimit knows (validKeys), then ours. A known key
 * in a place where it means nothing is ignored, as there; ours are
 * refused out of rate_limit (envoyproxy/ratelimit would refuse them
 * anywhere). */
static const char *const envoy_keys[] = {
	"domain", "key", "value", "descriptors", "rate_limit", "unit", "requests_per_unit",
	"unlimited", "shadow_mode", "quota_mode", "name", "replaces", "detailed_metric",
	"value_to_metric", "share_threshold", "metadata",
};
static const char *const envoy_ext_keys[] = { "window", "window_type", "delay_max_ms" };

/* One file being read. */
struct envoy_load {
	yaml_document_t doc;
	struct envoy_err *err;
	const char *name;
	unsigned file;             /* the domain's files[] index */
	unsigned long visits;
};

static int envoy_fail_at(struct envoy_load *l, const yaml_node_t *at, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int envoy_fail_at(struct envoy_load *l, const yaml_node_t *at, const char *fmt, ...)
{
	va_list ap;

	snprintf(l->err->file, sizeof(l->err->file), "%s", l->name);
	if (at)
		snprintf(l->err->path, sizeof(l->err->path), "line %zu, column %zu",
			 at->start_mark.line + 1, at->start_mark.column + 1);
	else
		l->err->path[0] = '\0';
	va_start(ap, fmt);
	vsnprintf(l->err->msg, sizeof(l->err->msg), fmt, ap);
	va_end(ap);
	return -1;
}

/* ---- scalars, typed as yaml.v2 types them ---- */

enum envoy_type { ENVOY_STR = 0, ENVOY_NULL, ENVOY_BOOL, ENVOY_INT, ENVOY_FLOAT };

static const char *envoy_text(const yaml_node_t *n)
{
	return (const char *)n->data.scalar.value;
}

static bool envoy_in(const char *s, const char *const *list, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(s, list[i]) == 0)
			return true;
	return false;
}

static const char *const envoy_true[] = { "y", "Y", "yes", "Yes", "YES", "on", "On", "ON",
					  "true", "True", "TRUE" };
static const char *const envoy_false[] = { "n", "N", "no", "No", "NO", "off", "Off", "OFF",
					   "false", "False", "FALSE" };

/* Go's strconv.ParseInt(s, 0, 64) after yaml.v2 removed the '_': a sign,
 * then 0x / 0o / 0b / 0 (octal) or decimal digits. *v when it fits. */
static bool envoy_int(const char *s, long long *v)
{
	char buf[72];
	size_t n = 0;
	bool neg = false;
	unsigned base = 10;
	unsigned long long x = 0;
	bool over = false;

	for (const char *q = s; *q; q++) {
		if (*q == '_')
			continue;
		if (n + 1 >= sizeof(buf))
			return false;
		buf[n++] = *q;
	}
	buf[n] = '\0';
	const char *p = buf;
	if (*p == '+' || *p == '-')
		neg = *p++ == '-';
	if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
		base = 16, p += 2;
	else if (p[0] == '0' && (p[1] == 'o' || p[1] == 'O'))
		base = 8, p += 2;
	else if (p[0] == '0' && (p[1] == 'b' || p[1] == 'B'))
		base = 2, p += 2;
	else if (p[0] == '0' && p[1])
		base = 8, p += 1;
	if (!*p)
		return false;
	for (; *p; p++) {
		unsigned d = *p >= '0' && *p <= '9' ? (unsigned)(*p - '0')
			   : *p >= 'a' && *p <= 'f' ? (unsigned)(*p - 'a' + 10)
			   : *p >= 'A' && *p <= 'F' ? (unsigned)(*p - 'A' + 10) : 99;
		if (d >= base)
			return false;
		if (x > (ULLONG_MAX - d) / base)
			over = true;
		else
			x = x * base + d;
	}
	*v = over || x > (unsigned long long)LLONG_MAX ? (neg ? LLONG_MIN : LLONG_MAX)
						       : (neg ? -(long long)x : (long long)x);
	return true;
}

/* yaml.v2's float syntax: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?,
 * and the infinities and NaNs. */
static bool envoy_float(const char *s)
{
	static const char *const special[] = { ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF",
					       "-.inf", "-.Inf", "-.INF", ".nan", ".NaN", ".NAN" };
	const char *p = s;
	size_t d = 0;

	if (envoy_in(s, special, sizeof(special) / sizeof(special[0])))
		return true;
	if (*p == '+' || *p == '-')
		p++;
	while (*p >= '0' && *p <= '9')
		p++, d++;
	if (*p == '.') {
		size_t f = 0;

		p++;
		while (*p >= '0' && *p <= '9')
			p++, f++;
		if (d == 0 && f == 0)
			return false;
	} else if (d == 0) {
		return false;
	}
	if (*p == 'e' || *p == 'E') {
		size_t e = 0;

		p++;
		if (*p == '+' || *p == '-')
			p++;
		while (*p >= '0' && *p <= '9')
			p++, e++;
		if (e == 0)
			return false;
	}
	return *p == '\0';
}

static enum envoy_type envoy_type_of(const yaml_node_t *n, long long *iv)
{
	const char *s = envoy_text(n);

	if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return ENVOY_STR;
	if (!*s || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
	    strcmp(s, "NULL") == 0)
		return ENVOY_NULL;
	if (envoy_in(s, envoy_true, sizeof(envoy_true) / sizeof(envoy_true[0])) ||
	    envoy_in(s, envoy_false, sizeof(envoy_false) / sizeof(envoy_false[0])))
		return ENVOY_BOOL;
	if (envoy_int(s, iv))
		return ENVOY_INT;
	if (envoy_float(s))
		return ENVOY_FLOAT;
	return ENVOY_STR;
}

static const yaml_node_t *envoy_node(struct envoy_load *l, int i)
{
	return yaml_document_get_node(&l->doc, i);
}

/* ---- the document's keys (validateYamlKeys) ---- */

static int envoy_check_map(struct envoy_load *l, const yaml_node_t *m, unsigned depth,
			   bool in_rate_limit);

/* A value of a known key: lists must hold maps, maps are checked, leaves
 * are strings, integers, booleans or nulls. */
static int envoy_check_value(struct envoy_load *l, const yaml_node_t *v, unsigned depth,
			     bool in_rate_limit)
{
	long long iv;

	if (++l->visits > ENVOY_VISITS_MAX)
		return envoy_fail_at(l, v, "the document expands to over %u nodes (aliases?)",
				     ENVOY_VISITS_MAX);
	if (depth > ENVOY_YAML_DEPTH)
		return envoy_fail_at(l, v, "nested deeper than %u levels", ENVOY_YAML_DEPTH);
	switch (v->type) {
	case YAML_SEQUENCE_NODE:
		for (yaml_node_item_t *it = v->data.sequence.items.start;
		     it < v->data.sequence.items.top; it++) {
			const yaml_node_t *e = envoy_node(l, *it);

			if (e->type != YAML_MAPPING_NODE)
				return envoy_fail_at(l, e, "config error, yaml file contains list of "
						     "type other than map: %s",
						     e->type == YAML_SCALAR_NODE ? envoy_text(e) : "[...]");
			if (envoy_check_map(l, e, depth + 1, false) < 0)
				return -1;
		}
		return 0;
	case YAML_MAPPING_NODE:
		return envoy_check_map(l, v, depth + 1, in_rate_limit);
	case YAML_SCALAR_NODE:
		if (envoy_type_of(v, &iv) == ENVOY_FLOAT)
			return envoy_fail_at(l, v, "error checking config (a float: %s)", envoy_text(v));
		return 0;
	default:
		return envoy_fail_at(l, v, "error checking config");
	}
}

static int envoy_check_map(struct envoy_load *l, const yaml_node_t *m, unsigned depth,
			   bool in_rate_limit)
{
	for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
		const yaml_node_t *k = envoy_node(l, p->key), *v = envoy_node(l, p->value);
		long long iv;
		const char *name;

		if (k->type != YAML_SCALAR_NODE || envoy_type_of(k, &iv) != ENVOY_STR)
			return envoy_fail_at(l, k, "config error, key is not of type string: %s",
					     k->type == YAML_SCALAR_NODE ? envoy_text(k) : "[...]");
		name = envoy_text(k);
		for (yaml_node_pair_t *q = m->data.mapping.pairs.start; q < p; q++)
			if (strcmp(envoy_text(envoy_node(l, q->key)), name) == 0)
				return envoy_fail_at(l, k, "config error, key '%s' given twice", name);
		if (envoy_in(name, envoy_ext_keys, sizeof(envoy_ext_keys) / sizeof(envoy_ext_keys[0]))) {
			if (!in_rate_limit)
				return envoy_fail_at(l, k, "config error, '%s' (this agent's extension) "
						     "belongs in rate_limit", name);
		} else if (!envoy_in(name, envoy_keys, sizeof(envoy_keys) / sizeof(envoy_keys[0]))) {
			return envoy_fail_at(l, k, "config error, unknown key '%s'", name);
		}
		/* metadata is free-form (envoyproxy/ratelimit checks it no further) */
		if (strcmp(name, "metadata") == 0)
			continue;
		if (envoy_check_value(l, v, depth, strcmp(name, "rate_limit") == 0) < 0)
			return -1;
	}
	return 0;
}

/* ---- typed values of the descriptors (YamlRoot, YamlDescriptor) ---- */

/* The value of key in map m, or NULL. */
static const yaml_node_t *envoy_get(struct envoy_load *l, const yaml_node_t *m, const char *key)
{
	for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++)
		if (strcmp(envoy_text(envoy_node(l, p->key)), key) == 0)
			return envoy_node(l, p->value);
	return NULL;
}

/* A string field: any scalar's text, "" for a null or no key. */
static int envoy_get_str(struct envoy_load *l, const yaml_node_t *m, const char *key,
			 const char **out, size_t *len)
{
	const yaml_node_t *v = envoy_get(l, m, key);
	long long iv;

	*out = "";
	*len = 0;
	if (!v)
		return 0;
	if (v->type != YAML_SCALAR_NODE)
		return envoy_fail_at(l, v, "%s: expected a string", key);
	if (envoy_type_of(v, &iv) == ENVOY_NULL)
		return 0;
	*out = envoy_text(v);
	*len = v->data.scalar.length;
	if (strlen(*out) != *len)
		return envoy_fail_at(l, v, "%s: a string with a NUL byte", key);
	if (*len > RLS_STR_MAX)
		return envoy_fail_at(l, v, "%s: over %u bytes", key, RLS_STR_MAX);
	return 0;
}

static int envoy_get_bool(struct envoy_load *l, const yaml_node_t *m, const char *key, bool *out)
{
	const yaml_node_t *v = envoy_get(l, m, key);
	long long iv;

	*out = false;
	if (!v || (v->type == YAML_SCALAR_NODE && envoy_type_of(v, &iv) == ENVOY_NULL))
		return 0;
	if (v->type != YAML_SCALAR_NODE || envoy_type_of(v, &iv) != ENVOY_BOOL)
		return envoy_fail_at(l, v, "%s: expected true or false", key);
	*out = envoy_in(envoy_text(v), envoy_true, sizeof(envoy_true) / sizeof(envoy_true[0]));
	return 0;
}

/* An integer in lo..hi; *set tells whether the key was there. */
static int envoy_get_int(struct envoy_load *l, const yaml_node_t *m, const char *key,
			 long long lo, long long hi, long long *out, bool *set)
{
	const yaml_node_t *v = envoy_get(l, m, key);
	long long iv = 0;

	*set = false;
	if (!v || (v->type == YAML_SCALAR_NODE && envoy_type_of(v, &iv) == ENVOY_NULL))
		return 0;
	if (v->type != YAML_SCALAR_NODE || envoy_type_of(v, &iv) != ENVOY_INT || iv < lo || iv > hi)
		return envoy_fail_at(l, v, "%s: expected an integer %lld..%lld, got %s", key, lo, hi,
				     v->type == YAML_SCALAR_NODE ? envoy_text(v) : "[...]");
	*out = iv;
	*set = true;
	return 0;
}

/* A list (of maps: checked already), or NULL for none / null. */
static int envoy_get_list(struct envoy_load *l, const yaml_node_t *m, const char *key,
			  const yaml_node_t **out)
{
	const yaml_node_t *v = envoy_get(l, m, key);
	long long iv;

	*out = NULL;
	if (!v || (v->type == YAML_SCALAR_NODE && envoy_type_of(v, &iv) == ENVOY_NULL))
		return 0;
	if (v->type != YAML_SEQUENCE_NODE)
		return envoy_fail_at(l, v, "%s: expected a list", key);
	*out = v;
	return 0;
}

/* rate_limit: {unit, requests_per_unit, unlimited, name, replaces} and
 * ours: window, window_type, delay_max_ms. names[] holds replaces. */
static int envoy_rate_limit(struct envoy_load *l, const yaml_node_t *rl, struct envoy_limit *lim,
			    const char **names, size_t max_names)
{
	const char *unit, *wt;
	size_t unit_len, wt_len, n;
	long long x;
	bool set, window_set;
	const yaml_node_t *rep;
	char upper[16];

	if (rl->type != YAML_MAPPING_NODE)
		return envoy_fail_at(l, rl, "rate_limit: expected a map");
	if (envoy_get_bool(l, rl, "unlimited", &lim->unlimited) < 0 ||
	    envoy_get_str(l, rl, "unit", &unit, &unit_len) < 0 ||
	    envoy_get_str(l, rl, "name", &lim->name, &n) < 0 ||
	    envoy_get_int(l, rl, "requests_per_unit", 0, UINT32_MAX, &x, &set) < 0)
		return -1;
	lim->requests_per_unit = set ? (uint32_t)x : 0;
	/* The unit, by its name in any case (strings.ToUpper); UNKNOWN is none. */
	lim->unit = RLS_UNIT_UNKNOWN;
	if (unit_len < sizeof(upper)) {
		static const char *const units[] = { "UNKNOWN", "SECOND", "MINUTE", "HOUR", "DAY",
						     "MONTH", "YEAR", "WEEK" };
		for (size_t i = 0; i <= unit_len; i++)
			upper[i] = (char)(unit[i] >= 'a' && unit[i] <= 'z' ? unit[i] - 32 : unit[i]);
		for (int u = 1; u < 8; u++)
			if (strcmp(upper, units[u]) == 0)
				lim->unit = (enum rls_unit)u;
	}
	if (envoy_get_int(l, rl, "window", 1, NS_WINDOW_MAX, &x, &window_set) < 0)
		return -1;
	lim->window = window_set ? (uint32_t)x : envoy_unit_seconds(lim->unit);
	if (lim->unlimited) {
		if (lim->unit != RLS_UNIT_UNKNOWN)
			return envoy_fail_at(l, rl, "should not specify rate limit unit when unlimited");
		if (window_set)
			return envoy_fail_at(l, rl, "should not specify rate limit window when unlimited");
		lim->window = 0;
	} else if (lim->unit == RLS_UNIT_UNKNOWN && !window_set) {
		return envoy_fail_at(l, rl, "invalid rate limit unit '%s'", unit);
	} else if (window_set && lim->unit != RLS_UNIT_UNKNOWN &&
		   envoy_unit_seconds(lim->unit) != lim->window) {
		return envoy_fail_at(l, rl, "window %u s and unit %s (%u s) disagree: give one of them",
				     lim->window, unit, envoy_unit_seconds(lim->unit));
	} else if (window_set) {
		lim->unit = envoy_unit_of_window(lim->window);
	}
	lim->window_type = ENVOY_WT_DEFAULT;
	if (envoy_get_str(l, rl, "window_type", &wt, &wt_len) < 0)
		return -1;
	if (wt_len) {
		if (strcmp(wt, "sliding") == 0)
			lim->window_type = NS_WINDOW_SLIDING;
		else if (strcmp(wt, "fixed") == 0)
			lim->window_type = NS_WINDOW_FIXED;
		else
			return envoy_fail_at(l, envoy_get(l, rl, "window_type"),
					     "window_type: expected sliding or fixed, got '%s'", wt);
	}
	if (envoy_get_int(l, rl, "delay_max_ms", 0, NS_DELAY_MAX_MS, &x, &set) < 0)
		return -1;
	lim->delay_max_ms = set ? (uint32_t)x : 0;
	if (envoy_get_list(l, rl, "replaces", &rep) < 0)
		return -1;
	lim->n_replaces = 0;
	for (yaml_node_item_t *it = rep ? rep->data.sequence.items.start : NULL;
	     rep && it < rep->data.sequence.items.top; it++) {
		const yaml_node_t *e = envoy_node(l, *it);
		const char *rname;
		size_t rlen;

		if (envoy_get_str(l, e, "name", &rname, &rlen) < 0)
			return -1;
		if (rlen == 0)
			return envoy_fail_at(l, e, "should not have an empty replaces entry");
		if (strcmp(rname, lim->name) == 0)
			return envoy_fail_at(l, e, "replaces should not contain name of same descriptor");
		if (lim->n_replaces == max_names)
			return envoy_fail_at(l, e, "replaces: more than %zu names", max_names);
		names[lim->n_replaces++] = rname;
	}
	lim->replaces = names;
	return 0;
}

/* descriptors[] of parent (at depth), into the tree under node. */
static int envoy_descriptors(struct envoy_load *l, struct envoy_domain *d,
			     struct envoy_node *node, const yaml_node_t *list, unsigned depth)
{
	for (yaml_node_item_t *it = list->data.sequence.items.start;
	     it < list->data.sequence.items.top; it++) {
		const yaml_node_t *e = envoy_node(l, *it), *rl, *sub;
		const char *key, *value, *names[64];
		size_t key_len, value_len;
		struct envoy_limit lim;
		bool shadow, detailed, share, has_limit;
		struct envoy_node *n;

		if (depth >= ENVOY_DEPTH_MAX)
			return envoy_fail_at(l, e, "descriptors nested deeper than %u levels (a request "
					     "descriptor has at most %u entries: it would never match)",
					     ENVOY_DEPTH_MAX, ENVOY_DEPTH_MAX);
		if (envoy_get_str(l, e, "key", &key, &key_len) < 0 ||
		    envoy_get_str(l, e, "value", &value, &value_len) < 0)
			return -1;
		if (key_len == 0)
			return envoy_fail_at(l, e, "descriptor has empty key");
		memset(&lim, 0, sizeof(lim));
		rl = envoy_get(l, e, "rate_limit");
		has_limit = rl && !(rl->type == YAML_SCALAR_NODE &&
				    envoy_type_of(rl, &(long long){ 0 }) == ENVOY_NULL);
		if (envoy_get_bool(l, e, "shadow_mode", &shadow) < 0 ||
		    envoy_get_bool(l, e, "detailed_metric", &detailed) < 0 ||
		    envoy_get_bool(l, e, "share_threshold", &share) < 0 ||
		    (has_limit && envoy_rate_limit(l, rl, &lim, names, 64) < 0))
			return -1;
		lim.shadow_mode = shadow;
		lim.detailed_metric = detailed;
		n = envoy_node_add(d, node, key, key_len, value, value_len, has_limit ? &lim : NULL);
		if (!n)
			return envoy_fail_at(l, e, "out of memory");
		n->file = l->file;
		n->line = (unsigned)e->start_mark.line + 1;
		n->column = (unsigned)e->start_mark.column + 1;
		n->share_threshold = share;
		if (share && !n->wildcard)
			return envoy_fail_at(l, e, "share_threshold can only be used with wildcard "
					     "values (containing '*'), but found key '%s'", n->name);
		if (envoy_get_list(l, e, "descriptors", &sub) < 0 ||
		    (sub && envoy_descriptors(l, d, n, sub, depth + 1) < 0))
			return -1;
	}
	return 0;
}

static struct envoy_domain *envoy_find_mut(struct envoy_config *c, const char *name, size_t len)
{
	for (size_t i = 0; i < c->n; i++)
		if (c->domains[i] && strlen(c->domains[i]->name) == len &&
		    memcmp(c->domains[i]->name, name, len) == 0)
			return c->domains[i];
	return NULL;
}

const struct envoy_domain *envoy_config_find(const struct envoy_config *c, const char *name,
					     size_t len)
{
	return envoy_find_mut((struct envoy_config *)c, name, len);
}

/* The document's root map into c (loadConfig). */
static int envoy_root(struct envoy_load *l, struct envoy_config *c, const yaml_node_t *root,
		      bool merge)
{
	const char *dom;
	size_t dom_len;
	const yaml_node_t *list;
	struct envoy_domain *d;
	int fi;

	if (envoy_check_map(l, root, 0, false) < 0 || envoy_get_str(l, root, "domain", &dom, &dom_len) < 0)
		return -1;
	if (dom_len == 0)
		return envoy_fail_at(l, NULL, "config file cannot have empty domain");
	if (!ns_name_ok(dom, dom_len))
		return envoy_fail_at(l, envoy_get(l, root, "domain"), "domain '%s' cannot name a "
				     "namespace: 1..%d bytes without control characters", dom,
				     NS_NAME_MAX - 1);
	if (envoy_get_list(l, root, "descriptors", &list) < 0)
		return -1;
	d = envoy_find_mut(c, dom, dom_len);
	if (d && !merge)
		return envoy_fail_at(l, NULL, "duplicate domain '%s' in config file", dom);
	if (!d) {
		if (c->n == ENVOY_DOMAINS_MAX)
			return envoy_fail_at(l, NULL, "domain '%s': more than %u domains (a namespace "
					     "each)", dom, ENVOY_DOMAINS_MAX);
		if (!(d = envoy_domain_new(dom, dom_len)))
			return envoy_fail_at(l, NULL, "out of memory");
		c->domains[c->n++] = d;
	}
	if ((fi = envoy_domain_add_file(d, l->name)) < 0)
		return envoy_fail_at(l, NULL, "out of memory");
	l->file = (unsigned)fi;
	return list ? envoy_descriptors(l, d, &d->root, list, 0) : 0;
}

int envoy_config_add(struct envoy_config *c, const char *name, const char *text, size_t len,
		     bool merge, struct envoy_err *err)
{
	struct envoy_load l = { .err = err, .name = name };
	yaml_parser_t parser;
	yaml_document_t next;
	const yaml_node_t *root;
	int rc = -1;

	memset(err, 0, sizeof(*err));
	if (!yaml_parser_initialize(&parser))
		return envoy_fail_at(&l, NULL, "out of memory");
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
	if (!yaml_parser_load(&parser, &l.doc)) {
		envoy_fail_at(&l, NULL, "error loading config file: %s%s%s",
			      parser.problem ? parser.problem : "malformed YAML",
			      parser.context ? " " : "", parser.context ? parser.context : "");
		snprintf(err->path, sizeof(err->path), "line %zu, column %zu",
			 parser.problem_mark.line + 1, parser.problem_mark.column + 1);
		yaml_parser_delete(&parser);
		return -1;
	}
	root = yaml_document_get_root_node(&l.doc);
	if (!yaml_parser_load(&parser, &next)) {
		rc = envoy_fail_at(&l, NULL, "error loading config file: %s",
				   parser.problem ? parser.problem : "malformed YAML");
		snprintf(err->path, sizeof(err->path), "line %zu, column %zu",
			 parser.problem_mark.line + 1, parser.problem_mark.column + 1);
		goto out;
	}
	if (yaml_document_get_root_node(&next)) {
		rc = envoy_fail_at(&l, yaml_document_get_root_node(&next), "a second YAML document: "
				   "one domain per file");
		yaml_document_delete(&next);
		goto out;
	}
	yaml_document_delete(&next);
	if (root && root->type != YAML_MAPPING_NODE) {
		long long iv;
		if (!(root->type == YAML_SCALAR_NODE && envoy_type_of(root, &iv) == ENVOY_NULL)) {
			rc = envoy_fail_at(&l, root, "error loading config file: the document is not "
					   "a map");
			goto out;
		}
		root = NULL;
	}
	if (!root) {
		rc = envoy_fail_at(&l, NULL, "config file cannot have empty domain");
		goto out;
	}
	rc = envoy_root(&l, c, root, merge);
out:
	yaml_document_delete(&l.doc);
	yaml_parser_delete(&parser);
	return rc;
}

int envoy_config_finish(struct envoy_config *c, struct envoy_err *err)
{
	memset(err, 0, sizeof(*err));
	for (size_t i = 0; i < c->n; i++) {
		struct envoy_domain *d = c->domains[i];
		const struct envoy_node *dup;
		char path[400];

		if (!d || envoy_domain_finish(d, &dup, path, sizeof(path)) == 0)
			continue;
		if (dup) {
			snprintf(err->file, sizeof(err->file), "%s", d->files[dup->file]);
			snprintf(err->path, sizeof(err->path), "line %u, column %u", dup->line,
				 dup->column);
			snprintf(err->msg, sizeof(err->msg), "duplicate descriptor composite key '%s'",
				 path);
		} else {
			snprintf(err->file, sizeof(err->file), "%s", d->files[0]);
			snprintf(err->msg, sizeof(err->msg), "domain '%.64s' counts %.8s window "
				 "lengths; a namespace has at most 8", d->name, path);
		}
		return -1;
	}
	return 0;
}

/* Reads file (at most ENVOY_FILE_MAX bytes) and adds it. */
static int envoy_add_file(struct envoy_config *c, const char *file, bool merge,
			  struct envoy_err *err)
{
	FILE *f = fopen(file, "r");
	char *buf;
	size_t n;
	int rc;

	memset(err, 0, sizeof(*err));
	snprintf(err->file, sizeof(err->file), "%s", file);
	if (!f) {
		snprintf(err->msg, sizeof(err->msg), "cannot open: %s", strerror(errno));
		return -1;
	}
	buf = malloc(ENVOY_FILE_MAX + 1);
	n = buf ? fread(buf, 1, ENVOY_FILE_MAX + 1, f) : 0;
	if (!buf || ferror(f) || n > ENVOY_FILE_MAX) {
		snprintf(err->msg, sizeof(err->msg), "%s", !buf ? "out of memory" : ferror(f) ?
			 "cannot read" : "over 16 MiB");
		fclose(f);
		free(buf);
		return -1;
	}
	fclose(f);
	rc = envoy_config_add(c, file, buf, n, merge, err);
	free(buf);
	return rc;
}

static int envoy_name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool envoy_is_yaml(const char *name)
{
	size_t n = strlen(name);

	return name[0] != '.' && ((n > 5 && strcmp(name + n - 5, ".yaml") == 0) ||
				  (n > 4 && strcmp(name + n - 4, ".yml") == 0));
}

/* A folder's YAML files, in name order. */
static int envoy_add_dir(struct envoy_config *c, const char *path, bool merge,
			 struct envoy_err *err)
{
	DIR *dir = opendir(path);
	char *names[ENVOY_FILES_MAX];
	size_t n = 0;
	struct dirent *de;
	int rc = 0;

	if (!dir) {
		snprintf(err->file, sizeof(err->file), "%s", path);
		snprintf(err->msg, sizeof(err->msg), "cannot open: %s", strerror(errno));
		return -1;
	}
	while ((de = readdir(dir))) {
		char full[PATH_MAX];
		struct stat st;

		if (!envoy_is_yaml(de->d_name))
			continue;
		snprintf(full, sizeof(full), "%s/%s", path, de->d_name);
		if (stat(full, &st) < 0 || !S_ISREG(st.st_mode))
			continue;
		if (n == ENVOY_FILES_MAX || !(names[n] = strdup(full))) {
			snprintf(err->file, sizeof(err->file), "%s", path);
			snprintf(err->msg, sizeof(err->msg), n == ENVOY_FILES_MAX ?
				 "more than %u YAML files" : "out of memory", ENVOY_FILES_MAX);
			rc = -1;
			break;
		}
		n++;
	}
	closedir(dir);
	qsort(names, n, sizeof(names[0]), envoy_name_cmp);
	for (size_t i = 0; i < n; i++) {
		if (rc == 0)
			rc = envoy_add_file(c, names[i], merge, err);
		free(names[i]);
	}
	return rc;
}

int envoy_config_load(struct envoy_config *c, const char *path, bool merge,
		      struct envoy_err *err)
{
	struct stat st;
	int rc;

	memset(err, 0, sizeof(*err));
	if (stat(path, &st) < 0) {
		snprintf(err->file, sizeof(err->file), "%s", path);
		snprintf(err->msg, sizeof(err->msg), "cannot open: %s", strerror(errno));
		return -1;
	}
	rc = S_ISDIR(st.st_mode) ? envoy_add_dir(c, path, merge, err)
				 : envoy_add_file(c, path, merge, err);
	if (rc == 0)
		rc = envoy_config_finish(c, err);
	if (rc < 0)
		envoy_config_free(c);
	return rc;
}

struct envoy_domain *envoy_config_take(struct envoy_config *c, size_t i)
{
	struct envoy_domain *d = i < c->n ? c->domains[i] : NULL;

	if (d)
		c->domains[i] = NULL;
	return d;
}

void envoy_config_free(struct envoy_config *c)
{
	for (size_t i = 0; i < c->n; i++)
		envoy_domain_free(c->domains[i]);
	memset(c, 0, sizeof(*c));
}
