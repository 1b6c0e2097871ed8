/*
 * metrics.h - what the agent counts about itself: the families of GET
 * /metrics (Prometheus text format, docs/METRICS.md; the page is
 * agent/metrics_page.h's) and the counters behind them.
 *
 * Each worker writes only its own slot of a shared anonymous mapping the
 * master creates before fork (relaxed atomic adds on its own cache lines:
 * no lock, no contention on the hot path); a scrape sums the slots of
 * every worker and reads the table's own statistics. A respawned worker
 * takes its slot over, so counters never go back.
 */
#ifndef METRICS_H
#define METRICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/fronts.h"
#include "agent/ns.h"

struct rl;


/* Every metric family of GET /metrics, in the order of the page (names
 * prefixed spoa_ratelimit_; docs/METRICS.md documents each):
 * X(enum suffix, name, type, help). */
#define METRICS_FAMILIES(X)                                                              \
	X(HITS, "hits_total", "counter",                                                 \
	  "Rate-limit checks answered (counted or read), by namespace and front.")      \
	X(EXCEEDED, "exceeded_total", "counter", "Checks answered exceeded (denied).")   \
	X(SHADOW_EXCEEDED, "shadow_exceeded_total", "counter",                           \
	  "Checks a shadow namespace would have denied, answered allowed.")             \
	X(ERRORS, "errors_total", "counter",                                             \
	  "Checks answered with an error, and connections closed on bad input, by reason.") \
	X(TABLE_KEYS, "table_keys", "gauge",                                             \
	  "Entries of the counter table in use, by namespace.")                         \
	X(TABLE_CAPACITY, "table_capacity", "gauge",                                     \
	  "Entries of the counter table (max_keys).")                                   \
	X(TABLE_SHARE, "table_share", "gauge", "Entries guaranteed to a namespace.")      \
	X(TABLE_EVICTIONS, "table_evictions_total", "counter",                           \
	  "Entries evicted to make room for a new key, by namespace.")                  \
	X(TABLE_REFUSED, "table_refused_total", "counter",                               \
	  "New keys refused for want of room, even by eviction, by namespace.")         \
	X(LIMIT_OVERRIDES, "limit_overrides", "gauge",                                   \
	  "Limits per key set at run time (PUT /limits) this node applies, by namespace.") \
	X(LIMIT_OVERRIDES_MAX, "limit_overrides_max", "gauge",                           \
	  "The most a namespace may hold (max_limit_overrides).")                       \
	X(CONNECTIONS, "connections", "gauge", "Open connections, by front.")            \
	X(SYNC_CYCLES, "sync_cycles_total", "counter",                                   \
	  "Sync cycles (pushes of a node's diffs to the store), by namespace and result.") \
	X(SYNC_DURATION, "sync_duration_seconds", "histogram",                           \
	  "Time of a sync cycle, from the push to the store's answer.")                 \
	X(STORE_UP, "store_up", "gauge",                                                 \
	  "1 when every worker is connected to the namespace's store, else 0.")         \
	X(STORE_NODES, "store_nodes", "gauge",                                           \
	  "Nodes using the namespace, as its store last counted them (0: not known yet).") \
	X(STORE_PENDING, "store_pending_hits", "gauge",                                  \
	  "Hits counted on this node that the store has not confirmed yet, by namespace.") \
	X(ADMISSIONS, "admissions_total", "counter",                                     \
	  "Hits with a limit under admission exact, by namespace and by what decided: "  \
	  "grant (this node, from the store's grant), store (a round trip), view (denied " \
	  "here, over the limit already), degraded (the store could not: this node).") \
	X(DELAY_HELD, "delay_held", "gauge",                                              \
	  "Hits held now (delay_max_ms), by namespace.")                                \
	X(DELAY_REFUSED, "delay_refused_total", "counter",                               \
	  "Hits that delay_max_ms would have held, denied at once because a bound on "   \
	  "held hits was reached, by namespace and bound (key, connection, namespace).") \
	X(SETTLES, "settles_total", "counter",                                           \
	  "Settles of reservations, by namespace and result: applied (by this node), "   \
	  "duplicate (another node's claim in the store came first), unconfirmed (the "  \
	  "store did not answer: applied by this node alone), ignored (settled already " \
	  "on this node, or too late).")                                                 \
	X(PEERS_NODES, "peers_nodes", "gauge",                                           \
	  "HAProxy nodes whose peers session is up (hello done).")                       \
	X(PEERS_UPDATES, "peers_updates_total", "counter",                               \
	  "Nodes' stick-table updates counted (kept, acknowledged), by namespace.")      \
	X(PEERS_REFUSED, "peers_updates_refused_total", "counter",                       \
	  "Nodes' updates not counted (nor acknowledged), by reason: unknown (a table "  \
	  "no namespace names), refused (a table whose definition the agent refused: "   \
	  "data type, period, expire, key size), room (no room in the table), "          \
	  "node_keys (a node over peers.node_keys new keys).")                           \
	X(PEERS_PUSHES, "peers_pushes_total", "counter",                                 \
	  "Sums pushed into the nodes' into tables (one per key and session), by namespace.") \
	X(PEERS_LAST_UPDATE, "peers_last_update_timestamp_seconds", "gauge",             \
	  "When the last update of a node was received (Unix time; 0: none yet).")

enum metrics_family {
#define METRICS_FAM_ENUM(e, n, t, h) METRICS_FAM_##e,
	METRICS_FAMILIES(METRICS_FAM_ENUM)
#undef METRICS_FAM_ENUM
	METRICS_FAM_COUNT
};

/* errors_total{reason}: X(enum suffix, label) */
#define METRICS_ERRORS(X)                                                     \
	X(BAD_REQUEST, "bad_request")       /* an argument missing or invalid */ \
	X(TABLE_FULL, "table_full")         /* no room for a new key */          \
	X(STORE, "store_unconfirmed")       /* sync_rate 0: answered locally */  \
	X(PROTOCOL, "protocol")             /* a connection closed on bad input */ \
	X(UNAUTHORIZED, "unauthorized")     /* an HTTP check without http_token */

enum metrics_error {
#define METRICS_ERR_ENUM(e, l) METRICS_ERR_##e,
	METRICS_ERRORS(METRICS_ERR_ENUM)
#undef METRICS_ERR_ENUM
	METRICS_ERR_COUNT
};

/* admissions_total{by}: X(enum suffix, label) */
#define METRICS_ADMISSIONS(X) \
	X(GRANT, "grant") X(STORE, "store") X(VIEW, "view") X(DEGRADED, "degraded")

enum metrics_admission {
#define METRICS_ADM_ENUM(e, l) METRICS_ADM_##e,
	METRICS_ADMISSIONS(METRICS_ADM_ENUM)
#undef METRICS_ADM_ENUM
	METRICS_ADM_COUNT
};

/* delay_refused_total{bound}: X(enum suffix, label); the bounds of
 * agent/delay.c, docs/CONFIG.md (delay_max_ms) */
#define METRICS_DELAY_BOUNDS(X) \
	X(KEY, "key") X(OWNER, "connection") X(NAMESPACE, "namespace")

enum metrics_delay_bound {
#define METRICS_DELAY_ENUM(e, l) METRICS_DELAY_##e,
	METRICS_DELAY_BOUNDS(METRICS_DELAY_ENUM)
#undef METRICS_DELAY_ENUM
	METRICS_DELAY_COUNT
};

/* settles_total{result}: X(enum suffix, label); agent/reserve.c */
#define METRICS_SETTLES(X) \
	X(APPLIED, "applied") X(DUPLICATE, "duplicate") X(UNCONFIRMED, "unconfirmed") \
	X(IGNORED, "ignored")

enum metrics_settle {
#define METRICS_SETTLE_ENUM(e, l) METRICS_SETTLE_##e,
	METRICS_SETTLES(METRICS_SETTLE_ENUM)
#undef METRICS_SETTLE_ENUM
	METRICS_SETTLE_COUNT
};

/* peers_updates_refused_total{reason}: X(enum suffix, label) */
#define METRICS_PEERS_REFUSED(X) \
	X(UNKNOWN, "unknown") X(REFUSED, "refused") X(ROOM, "room") X(NODE_KEYS, "node_keys")

enum metrics_peers_refused {
#define METRICS_PEERS_ENUM(e, l) METRICS_PEERS_##e,
	METRICS_PEERS_REFUSED(METRICS_PEERS_ENUM)
#undef METRICS_PEERS_ENUM
	METRICS_PEERS_COUNT
};

/* Upper bounds (seconds) of the sync_duration_seconds buckets. */
#define METRICS_SYNC_BUCKETS(X) X(0.001) X(0.0025) X(0.005) X(0.01) X(0.025) \
	X(0.05) X(0.1) X(0.25) X(0.5) X(1) X(2.5) X(5)
#define METRICS_COUNT_ONE(x) +1
#define METRICS_NBUCKETS (0 METRICS_SYNC_BUCKETS(METRICS_COUNT_ONE))
extern const double metrics_sync_bounds[METRICS_NBUCKETS];

#define METRICS_NS NS_MAX       /* namespaces, by index (rl_namespace_index) */

/* One worker's counters. */
struct metrics_worker {
	_Atomic uint64_t hits[METRICS_NS][FRONT_COUNT];
	_Atomic uint64_t exceeded[METRICS_NS];
	_Atomic uint64_t shadow_exceeded[METRICS_NS];
	_Atomic uint64_t errors[METRICS_ERR_COUNT];
	_Atomic int64_t connections[FRONT_COUNT];
	_Atomic uint64_t sync_ok[METRICS_NS];
	_Atomic uint64_t sync_failed[METRICS_NS];
	_Atomic uint64_t sync_skipped[METRICS_NS];
	_Atomic uint64_t sync_bucket[METRICS_NBUCKETS];  /* not cumulative */
	_Atomic uint64_t sync_count;
	_Atomic uint64_t sync_sum_us;
	_Atomic int store_up[METRICS_NS];   /* 1 up, 0 down, -1 no store here */
	_Atomic uint64_t admissions[METRICS_NS][METRICS_ADM_COUNT];
	_Atomic uint64_t delay_held[METRICS_NS];   /* a gauge: set, not added */
	_Atomic uint64_t delay_refused[METRICS_NS][METRICS_DELAY_COUNT];
	_Atomic uint64_t settles[METRICS_NS][METRICS_SETTLE_COUNT];
	/* The peers front (agent/peers_front.c, docs/PEERS.md). */
	_Atomic uint64_t peers_nodes;              /* a gauge: set by its worker */
	_Atomic uint64_t peers_updates[METRICS_NS];
	_Atomic uint64_t peers_refused[METRICS_PEERS_COUNT];
	_Atomic uint64_t peers_pushes[METRICS_NS];
	_Atomic uint64_t peers_last_update_ms;     /* Unix ms, set (0: none) */
} __attribute__((aligned(64)));

/* The slot this process writes: its worker's, or a private one (tests,
 * the master) until metrics_attach(). */
extern struct metrics_worker *metrics_me;

/* Every worker's slot, in one shared mapping (its page reads them all:
 * agent/metrics_page.h). */
struct metrics {
	int nworkers;
	struct metrics_worker w[];
};

/* The shared counters of nworkers workers (mmap, before fork). NULL with
 * the reason in err (errlen bytes). */
struct metrics *metrics_new(int nworkers, char *err, size_t errlen);
void metrics_free(struct metrics *m);

/* Makes worker id's slot this process's. */
void metrics_attach(struct metrics *m, int id);

/* A slot has one writer (its worker, one thread): a relaxed load and
 * store, no locked read-modify-write on the hot path; a scrape still
 * reads whole 64-bit values. */
static inline void metrics_add(_Atomic uint64_t *c, uint64_t n)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
			      memory_order_relaxed);
}

static inline void metrics_conn(enum front_id f, int64_t delta)
{
	_Atomic int64_t *c = &metrics_me->connections[f];

	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + delta,
			      memory_order_relaxed);
}

/* A sync cycle of namespace ns ended (ok or not) after seconds. */
void metrics_sync_cycle(int ns, bool ok, double seconds);

/* A sync cycle was due but not sent: the store away. */
void metrics_sync_skipped(int ns);

#endif /* METRICS_H */
