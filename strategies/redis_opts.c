/*
 * redis_opts.c - strategy_opts of the Redis strategy (strategies/redis_int.h):
 * host, port, socket, password, db, timeout_ms, prefix, wait_replicas; or
 * cluster_nodes (Redis Cluster), or sentinel { master, nodes, quorum,
 * password, username }. Every message names the option and what was
 * expected (store.h's readers). Host names are not accepted (resolving
 * would block the loop): IPv4 or IPv6 literals, or "localhost" for
 * 127.0.0.1.
 */
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strategies/redis_int.h"

#define REDIS_PASSWORD_MAX     1024
#define REDIS_USERNAME_MAX     256
#define REDIS_TIMEOUT_MAX_MS   600000
#define REDIS_WAIT_REPLICAS_MAX 16
#define REDIS_DEFAULT_HOST     "127.0.0.1"
#define REDIS_DEFAULT_PORT     6379
#define REDIS_DEFAULT_TIMEOUT  100
#define REDIS_DEFAULT_PREFIX   "rl"

/* A list of "HOST:PORT" (cluster_nodes, sentinel.nodes) into a[]. */
static int redis_opt_addrs(const char *name, const json_t *v, struct redis_addr *a, size_t *n,
			   char *err, size_t errlen)
{
	size_t i;
	json_t *e;

	if (!json_is_array(v) || json_array_size(v) == 0 ||
	    json_array_size(v) > REDIS_SEEDS_MAX) {
		snprintf(err, errlen, "%s: expected an array of 1 to %d \"HOST:PORT\" strings, got %s",
			 name, REDIS_SEEDS_MAX,
			 json_is_array(v) ? "an array of another size" : store_json_type(v));
		return -1;
	}
	json_array_foreach(v, i, e) {
		if (!json_is_string(e) ||
		    redis_addr_parse(&a[i], json_string_value(e), json_string_length(e), false) < 0) {
			snprintf(err, errlen,
				 "%s[%zu]: expected \"HOST:PORT\" with HOST an IPv4 address, "
				 "[IPv6] or \"localhost\" (names are not resolved: it would block the "
				 "loop)", name, i);
			return -1;
		}
	}
	*n = json_array_size(v);
	return 0;
}

/* A secret (password, username) option: a copy in *out (owned), *outlen
 * bytes. */
static int redis_opt_secret(const char *name, const json_t *v, size_t max, char **out,
			    size_t *outlen, char *err, size_t errlen)
{
	const char *str;
	size_t len;

	if (store_opt_str(name, v, max, &str, &len, err, errlen) < 0)
		return -1;
	*out = malloc(len + 1);
	if (*out == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	memcpy(*out, str, len + 1);
	*outlen = len;
	return 0;
}

/* strategy_opts.sentinel: { "master": NAME, "nodes": ["HOST:PORT", ...],
 * "quorum": N, "password": P, "username": U } */
static int redis_opt_sentinel(struct redis_opts *o, const json_t *v, char *err, size_t errlen)
{
	const char *k, *str;
	json_t *e;
	size_t len;
	long long x;

	if (!json_is_object(v)) {
		snprintf(err, errlen, "sentinel: expected an object {\"master\": NAME, \"nodes\": "
			 "[\"HOST:PORT\", ...]}, got %s", store_json_type(v));
		return -1;
	}
	json_object_foreach((json_t *)v, k, e) {
		if (strcmp(k, "master") == 0) {
			if (store_opt_str("sentinel.master", e, REDIS_MASTER_NAME_MAX, &str, &len,
					  err, errlen) < 0)
				return -1;
			if (strlen(str) != len || strpbrk(str, " \r\n")) {
				snprintf(err, errlen, "sentinel.master: expected a name without "
					 "spaces or line breaks");
				return -1;
			}
			memcpy(o->master, str, len + 1);
		} else if (strcmp(k, "nodes") == 0) {
			if (redis_opt_addrs("sentinel.nodes", e, o->seeds, &o->nseeds, err,
					    errlen) < 0)
				return -1;
			/* each sentinel has one vote */
			for (size_t i = 1; i < o->nseeds; i++) {
				for (size_t j = 0; j < i; j++) {
					if (redis_addr_eq(&o->seeds[i], &o->seeds[j])) {
						snprintf(err, errlen, "sentinel.nodes[%zu]: the "
							 "same sentinel as sentinel.nodes[%zu]",
							 i, j);
						return -1;
					}
				}
			}
		} else if (strcmp(k, "quorum") == 0) {
			if (store_opt_int("sentinel.quorum", e, 1, REDIS_SEEDS_MAX, &x, err,
					  errlen) < 0)
				return -1;
			o->quorum = (unsigned)x;
		} else if (strcmp(k, "password") == 0) {
			if (redis_opt_secret("sentinel.password", e, REDIS_PASSWORD_MAX,
					     &o->sentinel_password, &o->sentinel_password_len, err,
					     errlen) < 0)
				return -1;
		} else if (strcmp(k, "username") == 0) {
			if (redis_opt_secret("sentinel.username", e, REDIS_USERNAME_MAX,
					     &o->sentinel_username, &o->sentinel_username_len, err,
					     errlen) < 0)
				return -1;
		} else {
			char name[80];

			snprintf(name, sizeof(name), "sentinel.%.64s", k);
			return store_opt_unknown(name, "master, nodes, quorum, password, username",
						 err, errlen);
		}
	}
	if (!o->master[0] || o->nseeds == 0) {
		snprintf(err, errlen, "sentinel: expected both \"master\" and \"nodes\"");
		return -1;
	}
	if (o->quorum > o->nseeds) {
		snprintf(err, errlen, "sentinel.quorum: expected at most the number of "
			 "sentinel.nodes (%zu), got %u", o->nseeds, o->quorum);
		return -1;
	}
	if (o->quorum == 0)
		o->quorum = (unsigned)(o->nseeds / 2 + 1);     /* a majority */
	if (o->sentinel_username && !o->sentinel_password) {
		snprintf(err, errlen, "sentinel.username: needs sentinel.password");
		return -1;
	}
	return 0;
}

/* What o owns: the passwords, the sentinels' username. */
void redis_opts_free(struct redis_opts *o)
{
	free(o->password);
	free(o->sentinel_password);
	free(o->sentinel_username);
	o->password = o->sentinel_password = o->sentinel_username = NULL;
}

/* "host": an IPv4 or IPv6 address, or "localhost" (127.0.0.1), into
 * o->addr.host. Returns 0, or -1 with err. */
static int redis_opt_host(const char *k, const json_t *v, struct redis_opts *o, char *err,
			  size_t errlen)
{
	unsigned char addr[sizeof(struct in6_addr)];
	const char *str;
	size_t len;

	if (store_opt_str(k, v, INET6_ADDRSTRLEN - 1, &str, &len, err, errlen) < 0)
		return -1;
	if (strcmp(str, "localhost") == 0)
		str = "127.0.0.1";
	if (strlen(str) != len || (inet_pton(AF_INET, str, addr) != 1 &&
				   inet_pton(AF_INET6, str, addr) != 1)) {
		snprintf(err, errlen,
			 "host: expected an IPv4 or IPv6 address or "
			 "\"localhost\" (names are not resolved: it would block "
			 "the loop)");
		return -1;
	}
	snprintf(o->addr.host, sizeof(o->addr.host), "%s", str);
	return 0;
}

/* The options o was given (root; has_*: the keys seen) taken together:
 * one way to reach the servers, db 0 with a cluster. Returns 0, or -1
 * with err naming the option. */
static int redis_opts_combined(const struct redis_opts *o, const json_t *root, bool has_host,
			       bool has_port, bool has_socket, char *err, size_t errlen)
{
	if (has_socket && (has_host || has_port)) {
		snprintf(err, errlen, "socket: cannot be combined with host or port");
		return -1;
	}
	if (json_object_get(root, "cluster_nodes") && json_object_get(root, "sentinel")) {
		snprintf(err, errlen, "cluster_nodes: cannot be combined with sentinel");
		return -1;
	}
	if (o->mode != REDIS_MODE_SINGLE && (has_host || has_port || has_socket)) {
		snprintf(err, errlen, "%s: cannot be combined with host, port or socket (the "
			 "servers come from the %s)", o->mode == REDIS_MODE_CLUSTER ?
			 "cluster_nodes" : "sentinel", o->mode == REDIS_MODE_CLUSTER ?
			 "cluster's slot map" : "sentinels");
		return -1;
	}
	if (o->mode == REDIS_MODE_CLUSTER && o->db != 0) {
		snprintf(err, errlen, "db: must be 0 with cluster_nodes (Redis Cluster has one "
			 "database)");
		return -1;
	}
	return 0;
}

/* Fills o from the JSON text (NULL = defaults). Returns 0, or -1 with a
 * message naming the option and what was expected. What o owns (the
 * passwords) is its on success and on failure (redis_opts_free() it
 * either way). */
int redis_opts_parse(struct redis_opts *o, const char *text, char *err, size_t errlen)
{
	json_t *root, *v;
	const char *k;
	bool has_host = false, has_port = false, has_socket = false;
	long long x;
	int rc = -1;

	memset(o, 0, sizeof(*o));
	strcpy(o->addr.host, REDIS_DEFAULT_HOST);
	o->addr.port = REDIS_DEFAULT_PORT;
	o->timeout_ms = REDIS_DEFAULT_TIMEOUT;
	strcpy(o->prefix, REDIS_DEFAULT_PREFIX);
	o->prefix_len = strlen(o->prefix);
	if (store_opts_load(text, &root, err, errlen) < 0)
		return -1;
	if (root == NULL)
		return 0;
	json_object_foreach(root, k, v) {
		const char *str;
		size_t len;

		if (strcmp(k, "host") == 0) {
			if (redis_opt_host(k, v, o, err, errlen) < 0)
				goto out;
			has_host = true;
		} else if (strcmp(k, "port") == 0) {
			if (store_opt_int(k, v, 1, 65535, &x, err, errlen) < 0)
				goto out;
			o->addr.port = (int)x;
			has_port = true;
		} else if (strcmp(k, "socket") == 0) {
			if (store_opt_str(k, v, sizeof(o->socket) - 1, &str, &len, err, errlen) < 0)
				goto out;
			if (strlen(str) != len) {
				snprintf(err, errlen,
					 "socket: expected a path without NUL bytes");
				goto out;
			}
			memcpy(o->socket, str, len + 1);
			has_socket = true;
		} else if (strcmp(k, "password") == 0) {
			if (redis_opt_secret(k, v, REDIS_PASSWORD_MAX, &o->password,
					     &o->password_len, err, errlen) < 0)
				goto out;
		} else if (strcmp(k, "db") == 0) {
			if (store_opt_int(k, v, 0, INT_MAX, &x, err, errlen) < 0)
				goto out;
			o->db = (int)x;
		} else if (strcmp(k, "timeout_ms") == 0) {
			if (store_opt_int(k, v, 1, REDIS_TIMEOUT_MAX_MS, &x, err, errlen) < 0)
				goto out;
			o->timeout_ms = (int)x;
		} else if (strcmp(k, "wait_replicas") == 0) {
			if (store_opt_int(k, v, 0, REDIS_WAIT_REPLICAS_MAX, &x, err, errlen) < 0)
				goto out;
			o->wait_replicas = (int)x;
		} else if (strcmp(k, "prefix") == 0) {
			if (store_opt_str(k, v, REDIS_PREFIX_MAX, &str, &len, err, errlen) < 0)
				goto out;
			if (memchr(str, '{', len) || memchr(str, '}', len)) {
				snprintf(err, errlen, "prefix: expected a string "
					 "without '{' or '}' (they would change the Redis Cluster "
					 "hash tag)");
				goto out;
			}
			memcpy(o->prefix, str, len);
			o->prefix[len] = '\0';
			o->prefix_len = len;
		} else if (strcmp(k, "cluster_nodes") == 0) {
			if (redis_opt_addrs(k, v, o->seeds, &o->nseeds, err, errlen) < 0)
				goto out;
			o->mode = REDIS_MODE_CLUSTER;
		} else if (strcmp(k, "sentinel") == 0) {
			if (redis_opt_sentinel(o, v, err, errlen) < 0)
				goto out;
			o->mode = REDIS_MODE_SENTINEL;
		} else {
			store_opt_unknown(k, "host, port, socket, password, db, timeout_ms, prefix, "
					  "cluster_nodes, sentinel, wait_replicas", err, errlen);
			goto out;
		}
	}
	rc = redis_opts_combined(o, root, has_host, has_port, has_socket, err, errlen);
out:
	json_decref(root);
	return rc;
}
