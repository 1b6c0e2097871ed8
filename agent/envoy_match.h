/*
 * envoy_match.h - a domain of envoyproxy/ratelimit's configuration as a
 * tree of descriptors (docs/ENVOY.md, "The descriptor tree"), and the
 * matcher that finds a request descriptor's limit in it and the key it is
 * counted under. agent/envoy_config.c builds the trees from YAML; a front
 * looks a request up through its namespace (struct ns_def's `envoy`).
 *
 * Pure but for building: nodes are allocated while a domain is built
 * (envoy_node_add(), envoy_domain_finish()) and freed with the domain;
 * matching allocates nothing, takes no lock, writes only the caller's
 * memory, and may run in any number of processes over the same tree.
 *
 * A node is a descriptor of the YAML, named as envoyproxy/ratelimit names
 * it: its key, or "key_value" when it has a value (so "a_b" without a
 * value and "a" with the value "b" are one name, and a duplicate). The
 * matcher follows envoyproxy/ratelimit's GetLimit() (src/config/
 * config_impl.go), level by level over the request's entries:
 *
 *   1. the child named exactly "key_value" (the request's value, "" too);
 *   2. else the first wildcard child, in the order of the YAML, whose name
 *      matches "key_value" ('*' stands for any run of bytes, anywhere);
 *   3. else the child named "key" (a descriptor without a value: each
 *      value of the key counts on its own).
 *
 * A limit applies only at the request's last entry (the request is as
 * deep as the node); a level that matches nothing, or a node without
 * children before the last entry, ends the walk without a limit.
 */
#ifndef ENVOY_MATCH_H
#define ENVOY_MATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/rls_wire.h"

#define ENVOY_DEPTH_MAX    RLS_ENTRIES_MAX /* levels of descriptors: deeper never matches */
#define ENVOY_NAME_MAX     (2 * RLS_STR_MAX + 1) /* a node's name, "key_value" */
#define ENVOY_WT_DEFAULT   (-1)    /* window_type: the namespace's */

/* A descriptor's rate_limit, as the front needs it per request. */
struct envoy_limit {
	uint32_t requests_per_unit;
	enum rls_unit unit;            /* as configured; RLS_UNIT_UNKNOWN with `window`
	                                  alone, when it is no unit's length */
	uint32_t window;               /* seconds counted: the unit's, or `window` */
	int window_type;               /* enum ns_window_type, or ENVOY_WT_DEFAULT */
	uint32_t delay_max_ms;         /* hold rather than deny (0: never) */
	bool unlimited;                /* never limited (its `replaces` still count) */
	bool shadow_mode;              /* decided, counted, never denies */
	bool detailed_metric;
	const char *name;              /* "" when none: what `replaces` names */
	const char *const *replaces;   /* the names this limit replaces */
	size_t n_replaces;
};

struct envoy_node {
	char *name;                    /* "key" or "key_value" (NUL-terminated) */
	size_t name_len;
	size_t key_len;                /* the key's part of name */
	bool wildcard;                 /* name holds a '*' */
	bool share_threshold;          /* a wildcard whose matches share one counter */
	bool has_limit;
	struct envoy_limit limit;
	struct envoy_node **children;  /* sorted by name once finished */
	size_t n_children, cap_children;
	struct envoy_node **wild;      /* the wildcard children, in YAML order */
	size_t n_wild, cap_wild;
	unsigned file, line, column;   /* where it was written (file: the domain's
	                                  files[] index), for messages */
	unsigned order;                /* load order, for "the later one" */
};

/* A domain: the tree and what its namespace needs. */
struct envoy_domain {
	char *name;
	struct envoy_node root;        /* the domain: children only */
	uint32_t windows[8];           /* the distinct windows its limits count */
	size_t n_windows;
	uint32_t delay_max_ms;         /* the largest of its limits' */
	char **files;                  /* the files it was read from */
	size_t n_files;
	unsigned n_nodes;
};

/* The unit's length in seconds (envoyproxy/ratelimit's UnitToDivider:
 * a month is 30 days, a year 365), or 0 for UNKNOWN and unknown values. */
uint32_t envoy_unit_seconds(int unit);

/* The unit whose length is window seconds, or RLS_UNIT_UNKNOWN. */
enum rls_unit envoy_unit_of_window(uint32_t window);

/* ---- building (envoy_config.c) ---- */

/* A new empty domain named name[0..len), or NULL (out of memory). */
struct envoy_domain *envoy_domain_new(const char *name, size_t len);

/* Frees d and everything it holds; NULL is fine. */
void envoy_domain_free(struct envoy_domain *d);

/* Adds file to d's files; returns its index, or -1 (out of memory). */
int envoy_domain_add_file(struct envoy_domain *d, const char *file);

/* A new child of parent named key, or key "_" value when value_len > 0
 * (as envoyproxy/ratelimit names it), with a copy of *limit when limit is
 * given (its name and replaces copied too). Returns it, or NULL (out of
 * memory). Duplicates are envoy_domain_finish()'s to find. */
struct envoy_node *envoy_node_add(struct envoy_domain *d, struct envoy_node *parent,
				  const char *key, size_t key_len, const char *value,
				  size_t value_len, const struct envoy_limit *limit);

/* Sorts every level, finds the first duplicate name (the one written
 * later) and collects the domain's windows. Returns 0, or -1 with *dup
 * the duplicate and path[0..pathlen) its full name ("domain.key1_value1",
 * as envoyproxy/ratelimit says it), or *dup NULL when the windows are
 * more than 8 (path: the count). */
int envoy_domain_finish(struct envoy_domain *d, const struct envoy_node **dup, char *path,
			size_t pathlen);

/* ---- matching (per request) ---- */

/* What a request descriptor matched. */
struct envoy_match {
	const struct envoy_node *node; /* the node at the request's depth, or NULL */
	const struct envoy_limit *limit; /* its limit, or NULL: none applies */
	/* per entry, the wildcard pattern counted instead of the value (a
	 * share_threshold wildcard matched it), else len 0 */
	struct pb_str share[ENVOY_DEPTH_MAX];
};

/* Matches the entries e[0..n) of one request descriptor against d, as
 * above, building each level's name in scratch[0..cap) (at least
 * ENVOY_NAME_MAX bytes: a longer name matches nothing). Fills *m; returns
 * true when a limit applies (m->limit). */
bool envoy_match(const struct envoy_domain *d, const struct rls_entry *e, size_t n,
		 char *scratch, size_t cap, struct envoy_match *m);

/* The key a matched descriptor counts under in its domain's namespace,
 * into out[0..cap): each entry "key=value" (the share pattern instead of
 * the value where m has one), joined by '&', with '%', '&', '=' and
 * control bytes written %XX: the same entries make the same key, different
 * ones different keys. m may be NULL (an override's descriptor: the
 * values as they are). Returns its length, or -1 when it does not fit.
 * The library digests a key over RL_STORED_KEY_MAX bytes as any other. */
long envoy_match_key(const struct envoy_match *m, const struct rls_entry *e, size_t n,
		     char *out, size_t cap);

/* The domain's node of a name path ("key1_value1", "subkey1"): for tests
 * and tools. NULL when there is none. */
const struct envoy_node *envoy_node_find(const struct envoy_node *parent, const char *name,
					 size_t len);

#endif /* ENVOY_MATCH_H */
