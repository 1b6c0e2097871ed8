/*
 * envoy_config.h - envoyproxy/ratelimit's configuration read as it is
 * (docs/ENVOY.md, "The configuration"): YAML files (libyaml), each a
 * domain with its nested descriptors, refused for what envoyproxy/ratelimit
 * refuses with its own words, plus this agent's extensions inside
 * rate_limit (`window`, `window_type`, `delay_max_ms`). The result is one
 * struct envoy_domain per domain (agent/envoy_match.h), which the
 * configuration hands to the namespace of that name.
 *
 * A setup call (docs/STYLE.md, "Errors"): 0 / -1 with a struct envoy_err
 * naming the file, the place in it ("line L, column C") and what is wrong;
 * nothing here logs.
 */
#ifndef ENVOY_CONFIG_H
#define ENVOY_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "agent/envoy_match.h"

#define ENVOY_FILE_MAX     (16u << 20)  /* bytes of one YAML file */
#define ENVOY_FILES_MAX    1024u        /* files of a folder */
#define ENVOY_DOMAINS_MAX  32u          /* a namespace each: NS_MAX */

/* Where loading failed: the file, "line L, column C" (or empty), and the
 * reason, envoyproxy/ratelimit's text where it has one ("invalid rate
 * limit unit 'foo'"). */
struct envoy_err {
	char file[256];
	char path[128];
	char msg[512];
};

/* The domains read so far; each is the config's until taken. */
struct envoy_config {
	struct envoy_domain *domains[ENVOY_DOMAINS_MAX];
	size_t n;
};

/* Loads path: a YAML file, or a folder's files named *.yaml or *.yml (not
 * starting with '.', not its subfolders), in name order. A domain in two
 * files is refused, or with merge (envoyproxy/ratelimit's
 * MERGE_DOMAIN_CONFIG) their descriptors are merged. c must be empty
 * (zeroed); on failure it is left empty. Returns 0 or -1 with *err. */
int envoy_config_load(struct envoy_config *c, const char *path, bool merge,
		      struct envoy_err *err);

/* The same steps for callers with the texts in hand: one file's YAML
 * text (name for messages) added to c, then c finished (every domain's
 * tree sorted, duplicates and windows checked). On failure c holds
 * whatever was read before (a merged domain may hold part of the failing
 * file): free it with envoy_config_free(). */
int envoy_config_add(struct envoy_config *c, const char *name, const char *text, size_t len,
		     bool merge, struct envoy_err *err);
int envoy_config_finish(struct envoy_config *c, struct envoy_err *err);

/* The domain named name[0..len), or NULL. */
const struct envoy_domain *envoy_config_find(const struct envoy_config *c, const char *name,
					     size_t len);

/* Takes domain i out of c (the caller frees it: envoy_domain_free());
 * the slot is left NULL. */
struct envoy_domain *envoy_config_take(struct envoy_config *c, size_t i);

/* Frees every domain c still holds; c is then empty. */
void envoy_config_free(struct envoy_config *c);

#endif /* ENVOY_CONFIG_H */
