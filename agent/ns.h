/*
 * ns.h - a namespace: the one model of its settings, shared by the
 * configuration (agent/config_ns.c fills it from JSON), the library
 * (rl_new_namespace() keeps a copy) and the sync loop (which reads the
 * library's copy), and the one validator of those settings. What a
 * namespace means is docs/CONFIG.md's "namespaces".
 *
 * Checks that concern several namespaces (unique names, shares that fit
 * the table) belong to whoever holds the set: config_check() and
 * rl_new_namespace().
 */
#ifndef NS_H
#define NS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NS_NAME_MAX        64          /* with the NUL */
#define NS_MAX             32          /* namespaces per agent */
#define NS_MAX_WINDOWS     8           /* window sizes per namespace */
#define NS_STRATEGY_MAX    16          /* strategy names, with the NUL */
#define NS_WINDOW_MAX      31536000u   /* 365 days, in seconds */
#define NS_SYNC_RATE_MIN   0.01        /* sync_rate > 0: seconds, in this range */
#define NS_SYNC_RATE_MAX   3600.0
#define NS_ERR_MAX         256
#define NS_LIMIT_NONE      (-1)        /* no limit configured */
#define NS_DELAY_MAX_MS    60000u      /* delay_max_ms */
#define NS_LIMIT_MAX       1000000000000LL /* largest limit and cost (1e12: exact in a double) */
#define NS_LEASE_MS_DEFAULT 60000u     /* concurrency: lease_ms */
#define NS_SETTLE_MS_DEFAULT 60000u    /* window: settle_ms (agent/reserve.h) */
#define NS_LEASE_MS_MAX    86400000u   /* ... at most a day */
#define NS_CONC_LIMIT_MAX  4194303     /* concurrency: limit, leases a key may hold
                                          (2^22 - 1: agent/algo_concurrency.c) */

struct envoy_domain;

/* The window type messages get when they name none. */
enum ns_window_type {
	NS_WINDOW_SLIDING = 0,
	NS_WINDOW_FIXED,
	NS_WINDOW_TYPE_COUNT
};

/* How a namespace limits (docs/ARCHITECTURE.md, "Algorithms"): the
 * algorithms, in the order of enum ns_algorithm, each with its name and
 * whether the stores can count it (strategies/: a namespace that syncs);
 * each is one file behind the ops table of agent/algo.h. */
#define NS_ALGORITHMS(X) \
	X(NS_ALGO_WINDOW, "window", true)    /* a count per window, sliding or fixed */ \
	X(NS_ALGO_GCRA, "gcra", true)        /* a rate with a burst: a TAT per key */ \
	X(NS_ALGO_CONCURRENCY, "concurrency", true) /* requests in flight: leases */

enum ns_algorithm {
#define NS_ALGO_ENUM(id, name, store) id,
	NS_ALGORITHMS(NS_ALGO_ENUM)
#undef NS_ALGO_ENUM
	NS_ALGO_COUNT
};

/* Who decides whether a hit with a limit is admitted (docs/CLUSTER.md,
 * "Exact at the limit"). */
enum ns_admission {
	NS_ADMIT_AUTO = 0,    /* "exact" when sync_rate > 0 and the store can
	                         decide admissions, else "local" */
	NS_ADMIT_LOCAL,       /* this node, from its view of the cluster */
	NS_ADMIT_EXACT,       /* the store's grants, or the store atomically,
	                         unless the node's view already says the limit
	                         is passed */
	NS_ADMIT_COUNT
};

/* What a namespace does when a new key finds no room in its share of the
 * table (docs/CONFIG.md, "on_table_full"). */
enum ns_table_full {
	NS_FULL_EVICT = 0,    /* evict its least valuable entry; if even that
	                         fails, the hit is not counted (fail open) */
	NS_FULL_DENY,         /* never evict; the hit is denied */
	NS_FULL_ALLOW,        /* never evict; the hit is allowed, not counted */
	NS_FULL_COUNT
};

/* What a request's own `limit` may do where the namespace configures one,
 * and whether an untrusted caller may name one where it does not
 * (docs/CONFIG.md, "caller_limit"; ns_caller_may_limit()). */
enum ns_caller_limit {
	NS_CALLER_LOWER = 0,  /* lower the configured limit, never raise it;
	                         none configured: trusted callers only */
	NS_CALLER_ANY,        /* replace it (HAProxy passing tiers from a map);
	                         none configured: any caller's */
	NS_CALLER_NONE,       /* ignored; none configured: as "lower" */
	NS_CALLER_COUNT
};

/* haproxy_tables (docs/PEERS.md): the HAProxy stick table whose nodes'
 * counts the namespace sums (from) and the one it pushes the sums into
 * (into), as the nodes' peers sections name them: "t" (a peers section's
 * "table t", "/t" on the wire, or a backend "t"), "/t", or "section/t". */
#define NS_TABLE_NAME_MAX  64          /* with the NUL */
#define NS_HAPROXY_DT_AUTO (-1)        /* data_type "auto" */
#define NS_HAPROXY_INDEX_MAX 99        /* gpc(N), gpc_rate(N): N */
struct ns_haproxy_tables {
	char from[NS_TABLE_NAME_MAX];            /* "" = none: not a peers namespace */
	char into[NS_TABLE_NAME_MAX];
	int data_type;                           /* a data type's bit (agent/peers_wire.h,
	                                            a rate or a counter), or
	                                            NS_HAPROXY_DT_AUTO */
	unsigned data_index;                     /* the element of gpc(N), gpc_rate(N) */
};

/* The part of a table name the nodes' wire names end with: from the last
 * '/' ("/t" of "section/t"), or the name alone for a bare "t". */
static inline const char *ns_table_leaf(const char *name)
{
	const char *slash = NULL;

	for (const char *q = name; *q; q++)
		if (*q == '/')
			slash = q;
	return slash ? slash + 1 : name;
}

/* A configured limit of one window size (or of every one). */
#define NS_EVERY_WINDOW 0
struct ns_limit {
	uint32_t window;                         /* one of window_sizes, or
	                                            NS_EVERY_WINDOW (then alone) */
	int64_t limit;                           /* 0..NS_LIMIT_MAX */
};

struct ns_def {
	char name[NS_NAME_MAX];                  /* "" = "default" for the library */
	uint32_t window_sizes[NS_MAX_WINDOWS];   /* seconds, 1..NS_WINDOW_MAX, distinct */
	size_t n_window_sizes;                   /* 1..NS_MAX_WINDOWS */
	double sync_rate;                        /* < 0 local, 0 synchronous, > 0 seconds */
	char strategy[NS_STRATEGY_MAX];          /* a store's name; "" = "local" (sync_rate < 0) */
	const char *strategy_opts;               /* JSON object text or NULL; owned by
	                                            the holder (config: malloc'd) */
	enum ns_algorithm algorithm;             /* how it limits (0: the window counter) */
	int64_t burst;                           /* gcra: hits a key may send at once
	                                            (0: 1; ns_burst()) */
	uint32_t lease_ms;                       /* concurrency: a lease not released
	                                            expires after this (0: 60000;
	                                            ns_lease_ms()) */
	uint32_t settle_ms;                      /* window: a reservation not settled
	                                            within it keeps its estimate (0:
	                                            60000; ns_settle_ms()) */
	enum ns_window_type window_type;         /* default for messages */
	bool count_denied;                       /* count hits over the limit */
	size_t max_keys;                         /* guaranteed share; 0 = even part */
	enum ns_table_full on_table_full;
	enum ns_admission admission;             /* sync_rate > 0 only */
	bool shadow;                             /* decide, count, never deny:
	                                            shadow_exceeded instead */
	/* Limits from the configuration (limits[0..n_limits): one for every
	 * window, or one per window size; none when n_limits is 0). Zeroes
	 * are the defaults, for C callers that build a struct ns_def. */
	struct ns_limit limits[NS_MAX_WINDOWS];
	size_t n_limits;
	enum ns_caller_limit caller_limit;
	double max_cost;                         /* 0: ns_max_cost()'s default */
	bool caller_admission;                   /* HTTP callers may choose `admission` */
	uint32_t max_limit_overrides;            /* limits per key set at run time
	                                            (PUT /limits) it may hold (0:
	                                            NS_OVERRIDES_DEFAULT) */
	uint32_t delay_max_ms;                   /* hold a hit this long rather than deny
	                                            it (0: never; <= NS_DELAY_MAX_MS) */
	struct ns_haproxy_tables haproxy;        /* the peers front's tables (from "" = none) */
	const struct envoy_domain *envoy;        /* the envoy_config domain of this name
	                                            (docs/ENVOY.md): its descriptors and
	                                            their limits, or NULL; owned by the
	                                            holder, as strategy_opts (config:
	                                            envoy_domain_free) */
};

/* Where a namespace is wrong: the key ("sync_rate", "window_sizes[2]") and
 * what was expected, ready for "<path>.<field>: <msg>". */
struct ns_err {
	char field[32];
	char msg[NS_ERR_MAX];
};

/* The defaults of a namespace the configuration lists: no name, no
 * window, sync_rate -1 (local), sliding, count_denied, share 0, evict, no
 * configured limit (callers may lower one), max_cost by default, no
 * haproxy_tables (data_type "auto"). */
void ns_def_init(struct ns_def *d);

/* The admission a namespace uses: its `admission`, "auto" resolved. */
enum ns_admission ns_admission_of(const struct ns_def *d);

/* Index of size among the namespace's window_sizes, or -1. Inline: each
 * request looks its window up. */
static inline int ns_window_index(const struct ns_def *d, uint32_t size)
{
	for (size_t i = 0; i < d->n_window_sizes; i++)
		if (d->window_sizes[i] == size)
			return (int)i;
	return -1;
}

/* The limit configured for a window size, or NS_LIMIT_NONE. */
static inline int64_t ns_limit_of(const struct ns_def *d, uint32_t window)
{
	for (size_t i = 0; i < d->n_limits; i++)
		if (d->limits[i].window == window || d->limits[i].window == NS_EVERY_WINDOW)
			return d->limits[i].limit;
	return NS_LIMIT_NONE;
}

/* max_limit_overrides (docs/CONFIG.md): by default, and at most. */
#define NS_OVERRIDES_DEFAULT 1024
#define NS_OVERRIDES_MAX     1000000

/* The overrides a namespace may hold: its max_limit_overrides, or the
 * default. */
static inline size_t ns_max_overrides(const struct ns_def *d)
{
	return d->max_limit_overrides ? d->max_limit_overrides : NS_OVERRIDES_DEFAULT;
}

/* A gcra namespace's burst: its `burst`, 1 by default. */
static inline int64_t ns_burst(const struct ns_def *d)
{
	return d->burst > 0 ? d->burst : 1;
}

/* A concurrency namespace's lease time in ms: its `lease_ms`, 60000 by
 * default. */
static inline uint32_t ns_lease_ms(const struct ns_def *d)
{
	return d->lease_ms > 0 ? d->lease_ms : NS_LEASE_MS_DEFAULT;
}

/* How long a reservation may be settled (agent/reserve.h), in ms: the
 * namespace's `settle_ms`, 60000 by default. */
static inline uint32_t ns_settle_ms(const struct ns_def *d)
{
	return d->settle_ms > 0 ? d->settle_ms : NS_SETTLE_MS_DEFAULT;
}

/* Does the namespace configure any limit? */
bool ns_has_limits(const struct ns_def *d);

/* May a caller name its own limit for a window whose configured limit is
 * configured (NS_LIMIT_NONE: none)? Where one is configured, always
 * (caller_limit says what it does with it); where none is, a trusted
 * caller (SPOP, HTTP with http_admin_token) may, others only with
 * caller_limit "any": else a caller's limit of 0 would pin table entries
 * (docs/CONFIG.md, caller_limit). */
static inline bool ns_caller_may_limit(const struct ns_def *d, int64_t configured, bool trusted)
{
	return trusted || configured != NS_LIMIT_NONE || d->caller_limit == NS_CALLER_ANY;
}

/* The largest cost of a request decided against limit (has: there is
 * one), by a trusted caller or not: max_cost where set, for everyone;
 * by default max(1, floor(limit / 2)), so that one request never reaches
 * a limit of 2 or more alone; without a limit, 1 for an untrusted caller
 * (a huge cost would lock the key out for whoever checks it with a
 * limit), and for a trusted one the largest configured limit (at least 1)
 * or NS_LIMIT_MAX without any (docs/CONFIG.md, max_cost). */
static inline double ns_max_cost(const struct ns_def *d, bool has, int64_t limit, bool trusted)
{
	int64_t most = NS_LIMIT_NONE;

	if (d->max_cost != 0)
		return d->max_cost;
	if (has)
		return limit < 2 ? 1.0 : (double)(limit / 2);   /* max(1, floor(limit / 2)) */
	if (!trusted)
		return 1.0;
	for (size_t i = 0; i < d->n_limits; i++)
		if (d->limits[i].limit > most)
			most = d->limits[i].limit;
	if (most == NS_LIMIT_NONE)
		return (double)NS_LIMIT_MAX;
	return most < 1 ? 1.0 : (double)most;
}

/* The limit a request is decided against, from the configured one
 * (NS_LIMIT_NONE: none) and the caller's (has: given), by caller_limit.
 * Returns false when there is none. Whether the caller may name one at
 * all is ns_caller_may_limit(). */
static inline bool ns_effective_limit(const struct ns_def *d, int64_t configured, bool has,
				      int64_t caller, int64_t *out)
{
	if (configured == NS_LIMIT_NONE) {
		*out = caller;
		return has;
	}
	*out = configured;
	if (has && (d->caller_limit == NS_CALLER_ANY ||
		    (d->caller_limit == NS_CALLER_LOWER && caller < configured)))
		*out = caller;
	return true;
}

/* A name of 1..63 bytes without control characters. */
bool ns_name_ok(const char *name, size_t len);

/* Validates one namespace: name, window sizes, sync_rate (finite; > 0 within
 * NS_SYNC_RATE_MIN..MAX), a strategy known to strategy_find() that fits
 * sync_rate, its strategy_opts (the store's check_opts), window type,
 * on_table_full, haproxy_tables (two table names of 1..63 visible bytes
 * that differ, a data type HAProxy sums, one window size: the tables'
 * period), an envoy domain's windows among window_sizes and its limits'
 * delay_max_ms within the namespace's. Returns 0, or -1 with *e. */
int ns_check(const struct ns_def *d, struct ns_err *e);

/* Names of the enums' values, for the parser and messages. */
extern const char *const ns_algorithm_names[NS_ALGO_COUNT];
extern const char *const ns_window_type_names[NS_WINDOW_TYPE_COUNT];
extern const char *const ns_table_full_names[NS_FULL_COUNT];
extern const char *const ns_admission_names[NS_ADMIT_COUNT];
extern const char *const ns_caller_limit_names[NS_CALLER_COUNT];

#endif /* NS_H */
