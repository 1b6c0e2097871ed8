/*
 * config_ns.c - the configuration's namespaces: the "namespaces" key (a
 * list that replaces the defaults' namespace), the keys of one namespace
 * (JSON value -> struct ns_def), and its checks, those of ns_check()
 * reported at namespaces[i].<key>. The only allocations a config owns are
 * here: the namespaces' strategy_opts (cfg_free_ns()).
 */
#include "agent/config_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/envoy_match.h"
#include "agent/peers_wire.h"
#include "strategies/strategy.h"

/* ns_check() of namespace ns, at path namespaces[i]: a message at the
 * path of the key that is wrong. */
int cfg_check_ns(struct cfg_parser *p, const struct ns_def *ns)
{
	struct ns_err e;

	if (ns_check(ns, &e) == 0)
		return 0;
	cfg_path_key(p, e.field);
	return cfg_fail(p, "%s", e.msg);
}

/* Name of namespace i of c (valid: ns_check()), at path
 * namespaces[i].name: unlike those before it. */
int cfg_check_ns_name(struct cfg_parser *p, const struct config *c, size_t i)
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

/* "algorithm": "window", "gcra" or "concurrency" (docs/CONFIG.md, "algorithm"). A token
 * bucket refilled continuously is GCRA under another name: the message
 * says how to write one. */
static int cfg_set_ns_algorithm(struct cfg_parser *p, json_t *v, void *obj)
{
	struct ns_def *ns = obj;
	int a = 0;

	if (json_is_string(v) && strcmp(json_string_value(v), "token_bucket") == 0)
		return cfg_fail(p, "a token bucket is \"gcra\": \"burst\" its capacity, \"limit\" "
				"per window its refill rate (docs/CONFIG.md, \"algorithm\")");
	if (cfg_want_enum(p, v, ns_algorithm_names, NS_ALGO_COUNT, &a) < 0)
		return -1;
	ns->algorithm = (enum ns_algorithm)a;
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

/* A table name into dst (NS_TABLE_NAME_MAX bytes), checked by ns_check. */
static int cfg_set_table(struct cfg_parser *p, json_t *v, char *dst)
{
	if (!json_is_string(v) || json_string_length(v) == 0 ||
	    json_string_length(v) >= NS_TABLE_NAME_MAX ||
	    strlen(json_string_value(v)) != json_string_length(v))
		return cfg_fail_type(p, v, "a table name of 1..63 bytes (\"t\", \"/t\" or "
				     "\"section/t\")");
	memcpy(dst, json_string_value(v), json_string_length(v) + 1);
	return 0;
}

static int cfg_set_ht_from(struct cfg_parser *p, json_t *v, void *obj)
{
	return cfg_set_table(p, v, ((struct ns_haproxy_tables *)obj)->from);
}

static int cfg_set_ht_into(struct cfg_parser *p, json_t *v, void *obj)
{
	return cfg_set_table(p, v, ((struct ns_haproxy_tables *)obj)->into);
}

/* "auto", a data type HAProxy adds up by its name ("http_req_rate",
 * "conn_cnt", "gpc0", ...), or an element of an array ("gpc_rate(2)",
 * "gpc(0)"); ns_check() says which are summed. */
static int cfg_set_ht_data_type(struct cfg_parser *p, json_t *v, void *obj)
{
	static const char what[] = "\"auto\", a data type such as \"http_req_rate\", "
				   "\"conn_cnt\" or \"gpc_rate(0)\"";
	struct ns_haproxy_tables *h = obj;
	const char *s = json_is_string(v) ? json_string_value(v) : NULL;
	size_t n, name;
	unsigned idx = 0;

	if (!s)
		return cfg_fail_type(p, v, what);
	if (strcmp(s, "auto") == 0) {
		h->data_type = NS_HAPROXY_DT_AUTO;
		h->data_index = 0;
		return 0;
	}
	n = strlen(s);
	name = strcspn(s, "(");
	if (name < n) {
		char *end;
		unsigned long x = strtoul(s + name + 1, &end, 10);
		if (s[name + 1] < '0' || s[name + 1] > '9' || strcmp(end, ")") != 0 ||
		    x > NS_HAPROXY_INDEX_MAX)
			return cfg_fail_type(p, v, what);
		idx = (unsigned)x;
	}
	for (unsigned dt = 0; dt < PEERS_WIRE_DT_COUNT; dt++) {
		const char *t = peers_wire_dt_str(dt);
		enum peers_wire_enc enc = peers_wire_dt_enc(dt);
		bool array = enc == PEERS_WIRE_ENC_ARRAY_UINT || enc == PEERS_WIRE_ENC_ARRAY_FREQ;
		if (strlen(t) != name || memcmp(t, s, name) != 0 || array != (name < n))
			continue;
		h->data_type = (int)dt;
		h->data_index = idx;
		return 0;
	}
	return cfg_fail_type(p, v, what);
}

static const struct cfg_key cfg_ht_keys[] = {
	{ .name = "from",      .set = cfg_set_ht_from },
	{ .name = "into",      .set = cfg_set_ht_into },
	{ .name = "data_type", .set = cfg_set_ht_data_type },
};

/* "haproxy_tables": { "from": TABLE, "into": TABLE, "data_type": TYPE }
 * (docs/PEERS.md): both tables are needed. */
static int cfg_set_ns_haproxy_tables(struct cfg_parser *p, json_t *v, void *obj)
{
	struct ns_haproxy_tables *h = &((struct ns_def *)obj)->haproxy;

	if (!json_is_object(v))
		return cfg_fail_type(p, v, "an object { \"from\": TABLE, \"into\": TABLE }");
	if (cfg_parse_object(p, v, cfg_ht_keys, CFG_N_KEYS(cfg_ht_keys), h) < 0)
		return -1;
	if (!h->from[0] || !h->into[0]) {
		cfg_path_key(p, h->from[0] ? "into" : "from");
		return cfg_fail(p, "missing: expected the table the nodes count in (from) and the "
				"one they read the sums from (into)");
	}
	return 0;
}

static const struct cfg_key cfg_ns_keys[] = {
	{ .name = "name",          .set = cfg_set_ns_name },
	{ .name = "window_sizes",  .set = cfg_set_ns_window_sizes },
	{ .name = "sync_rate",     .set = cfg_set_ns_sync_rate },
	{ .name = "strategy",      .set = cfg_set_ns_strategy },
	{ .name = "strategy_opts", .set = cfg_set_ns_strategy_opts },
	{ .name = "window_type",   .set = cfg_set_ns_window_type },
	{ .name = "algorithm",     .set = cfg_set_ns_algorithm },
	CFG_INT(struct ns_def, burst, 1, NS_LIMIT_MAX),
	CFG_INT(struct ns_def, lease_ms, 1, NS_LEASE_MS_MAX),
	CFG_INT(struct ns_def, settle_ms, 1, NS_LEASE_MS_MAX),
	CFG_FLAG(struct ns_def, count_denied),
	CFG_FLAG(struct ns_def, shadow),
	CFG_INT(struct ns_def, max_keys, 1, CFG_MAX_KEYS_MAX),
	{ .name = "on_table_full", .set = cfg_set_ns_on_table_full },
	{ .name = "admission",     .set = cfg_set_ns_admission },
	{ .name = "limit",         .set = cfg_set_ns_limit },
	{ .name = "caller_limit",  .set = cfg_set_ns_caller_limit },
	{ .name = "max_cost",      .set = cfg_set_ns_max_cost },
	CFG_FLAG(struct ns_def, caller_admission),
	CFG_INT(struct ns_def, delay_max_ms, 0, NS_DELAY_MAX_MS),
	CFG_INT(struct ns_def, max_limit_overrides, 1, NS_OVERRIDES_MAX),
	{ .name = "haproxy_tables", .set = cfg_set_ns_haproxy_tables },
};

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
	/* An envoy_config domain of its name may bring its windows and
	 * limits: checked once it has (cfg_apply_envoy). */
	if (p->envoy)
		goto name;
	/* A concurrency namespace counts leases, not windows: one window
	 * that means nothing, unless it names one. */
	if (ns->n_window_sizes == 0 && ns->algorithm == NS_ALGO_CONCURRENCY) {
		ns->window_sizes[0] = 1;
		ns->n_window_sizes = 1;
	}
	if (ns->n_window_sizes == 0) {
		cfg_path_key(p, "window_sizes");
		return cfg_fail(p, "missing: expected 1..%d window sizes (positive integers, seconds)",
				NS_MAX_WINDOWS);
	}
	if (cfg_check_ns(p, ns) < 0)
		return -1;
	if (ns->strategy[0] == '\0')
		snprintf(ns->strategy, sizeof(ns->strategy), "%s", local_strategy.name);
name:
	mark = cfg_path_key(p, "name");
	if (cfg_check_ns_name(p, c, i) < 0)
		return -1;
	cfg_path_pop(p, mark);
	return 0;
}

/* A non-empty list replaces the namespaces (config_load() frees the old
 * ones on success, the new ones on failure); an empty list keeps them. */
int cfg_set_namespaces(struct cfg_parser *p, json_t *v, void *obj)
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

void cfg_free_ns(struct config *c)
{
	size_t i;

	for (i = 0; i < NS_MAX; i++) {
		free((void *)c->ns[i].strategy_opts);
		c->ns[i].strategy_opts = NULL;
		envoy_domain_free((struct envoy_domain *)c->ns[i].envoy);
		c->ns[i].envoy = NULL;
	}
}
