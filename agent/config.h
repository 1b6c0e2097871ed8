/*
 * config.h - the agent's configuration: built-in defaults, a JSON file
 * (jansson) and command-line overrides. Parsing only; nothing here opens a
 * socket or creates the shared segment. Every key is documented in
 * docs/CONFIG.md. The one interface of agent/config*.c (config_int.h says
 * which file does what).
 *
 * Errors, one way: a function that can fail returns 0 or -1 and fills a
 * struct config_err (below): the file (empty from config_check()), the
 * JSON path of the value that is wrong ("namespaces[1].window_sizes[0]",
 * or "line L, column C" for a syntax error) and what was expected,
 * "expected X, got Y". Nothing here logs; the caller prints
 * config_err_format()'s line. A namespace's own rules are ns_check()'s
 * (struct ns_err, agent/ns.h), reported here at namespaces[i].<key>.
 */
#ifndef CONFIG_H
#define CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/fronts.h"
#include "agent/ns.h"

#define CONFIG_AUTO (-1)   /* sched_batch, collect_us: decided by the namespaces */
#define CONFIG_PREFIX_MAX      32
#define CONFIG_ADDR_MAX        256
#define CONFIG_SECRET_MAX      256   /* key_secret, with the NUL */
#define CONFIG_OWNER_MAX       72    /* listen_owner "user:group", with the NUL */
#define CONFIG_PATH_MAX        1024  /* state_file, with the NUL */
#define CONFIG_TOKEN_MAX       256   /* http_token, with the NUL */
#define CONFIG_PEER_NAME_MAX   64    /* peers.name, with the NUL */

struct config {
	/* Each front's listen address, under its key (agent/fronts.h: listen,
	 * http_listen, peers.listen in peers_listen): "127.0.0.1:12345",
	 * "[::1]:12345", "unix:/path"; "" = the front is off (listen always
	 * has one). */
#define CONFIG_FRONT_ADDR(id, name, ops, field, key) char field[CONFIG_ADDR_MAX];
	FRONTS(CONFIG_FRONT_ADDR)
#undef CONFIG_FRONT_ADDR
	/* The peers front (docs/PEERS.md): the agent's name in the nodes'
	 * peers sections, how often it pushes the sums, how many keys one
	 * node's session may count per namespace and window. */
	char peers_name[CONFIG_PEER_NAME_MAX];
	uint32_t peers_push_ms;
	uint32_t peers_node_keys;
	int listen_mode;                   /* unix socket permissions 0..0777; -1 = umask's */
	char listen_owner[CONFIG_OWNER_MAX]; /* unix socket "user[:group]"; "" = ours */
	int http_deny_status;              /* status of a denied HTTP check, 400..599 */
	char http_token[CONFIG_TOKEN_MAX]; /* Bearer token of /ratelimit; "" = open */
	bool http_metrics_token;           /* /metrics needs it too */
	char http_admin_token[CONFIG_TOKEN_MAX]; /* /keys and /top; "" = off */
	unsigned top_keys;                 /* heavy hitters per namespace, window
	                                      and kind; 0 = off */
	unsigned top_sample;               /* one hit in this many is recorded */
	uint32_t http_max_connections;     /* HTTP's part of max_connections; 0 = half */
	size_t http_max_buffer_memory;     /* HTTP's part of max_buffer_memory; 0 = a quarter */
	int workers;                       /* >= 1; 0 in the file = number of CPUs */
	size_t max_keys;                   /* capacity of the counter table, (key, window) pairs */
	char message_prefix[CONFIG_PREFIX_MAX]; /* "ratelimit" */
	int var_scope;                     /* enum spop_scope; "txn" by default */
	uint32_t max_frame_size;           /* upper bound we accept, >= 256 */
	uint32_t max_connections;          /* per worker */
	uint32_t idle_timeout_ms;          /* close a connection idle this long */
	uint32_t frame_timeout_ms;         /* a half-received frame must complete in this */
	size_t max_buffer_memory;          /* connection buffers per worker, bytes */
	int log_level;                     /* enum log_level */
	char key_secret[CONFIG_SECRET_MAX]; /* long-key digests; "" = none */
	char state_file[CONFIG_PATH_MAX];  /* the counter table in a file; "" = memory */
	int sched_batch;                   /* 1, 0 or CONFIG_AUTO: config_sched_batch() */
	int collect_us;                    /* 0..1000 or CONFIG_AUTO: config_collect_us() */
	/* envoyproxy/ratelimit's YAML (docs/ENVOY.md): a file or a folder, as
	 * the file gave it; "" = none. Its domains are namespaces: ns[i].envoy. */
	char envoy_config[CONFIG_PATH_MAX];
	bool envoy_merge;                  /* a domain in several files: merged */
	struct ns_def ns[NS_MAX];
	size_t n_ns;
};

/* Where parsing failed: file, JSON path (e.g. "namespaces[1].window_sizes")
 * and what was expected, ready to print as
 * "<file>: <path>: <msg>". */
struct config_err {
	char file[256];
	char path[128];
	char msg[512];
};

/* The socket path of a "unix:/path" or "/path" listen address, else NULL. */
const char *config_unix_path(const char *listen);

/* A front's listen address (its key's field, agent/fronts.h); "" = off. */
static inline const char *config_front_address(const struct config *c, enum front_id f)
{
	switch (f) {
#define CONFIG_FRONT_CASE(id, name, ops, field, key) case FRONT_##id: return c->field;
	FRONTS(CONFIG_FRONT_CASE)
#undef CONFIG_FRONT_CASE
	default:
		return "";
	}
}

/* Built-in defaults: listen 127.0.0.1:12345, workers = CPUs, max_keys 65536,
 * one namespace "default" with windows 1, 60, 3600, sync_rate -1, local. */
void config_defaults(struct config *c);

/* Loads a JSON file over the defaults. The namespaces in the file replace
 * the default namespace. Returns 0, or -1 with *err filled (nothing is
 * left allocated on failure, and *c is unchanged). */
int config_load(struct config *c, const char *path, struct config_err *err);

/* The same from the file's text (name for messages), as a reload reads
 * what the master checked. */
int config_load_text(struct config *c, const char *name, const char *text, size_t len,
		     struct config_err *err);

/* Validates the whole config (also after command-line overrides).
 * Returns 0 or -1 with *err (err->file left empty). */
int config_check(const struct config *c, struct config_err *err);

/* The number of online CPUs clamped to 1..64: what "workers": 0 (or -w 0)
 * means. */
int config_default_workers(void);

/* The HTTP front's budgets, defaults resolved (docs/CONFIG.md,
 * "Connections"). */
uint32_t config_http_max_connections(const struct config *c);
size_t config_http_max_buffer_memory(const struct config *c);

/* sched_batch and collect_us as the workers apply them, while a worker
 * serves HAProxy 2.x and no 3.1+ (bursts: spop_front.c tells them by their
 * stream numbers) or not: what the file says, else (CONFIG_AUTO, the
 * default) on (20 µs) unless a namespace syncs at sync_rate 0 (every hit
 * of it waits for the store's answer, whose wake-up must wait neither for
 * the time slice of what runs on the worker's CPU nor for a collect
 * sleep), and off behind HAProxy 2.x alone, whose NOTIFYs come in bursts
 * already: there the wait for its time slice costs its requests latency.
 * docs/CONFIG.md. */
bool config_sched_batch(const struct config *c, bool bursts);
uint32_t config_collect_us(const struct config *c, bool bursts);

/* Index of a namespace by name, or -1. */
int config_ns_find(const struct config *c, const char *name, size_t len);

/* Frees what config_load allocated (the namespaces' strategy_opts and
 * envoy domains). */
void config_free(struct config *c);

/* Formats *err as one line into buf. */
void config_err_format(const struct config_err *err, char *buf, size_t len);

#endif /* CONFIG_H */
