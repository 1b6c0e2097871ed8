/*
 * ratelimit.h - the public C API of the rate limiter, after Kong's
 * rate-limiting library (README.md, "How it works"): an instance owns a shared
 * counter table (created before fork, used by every worker process) and a
 * set of namespaces; increment() counts a hit and returns the sliding rate,
 * sliding_window() reads it.
 *
 *   rate   = current + previous * weight
 *   weight = (size - now % size) / size      (fixed window: weight 0)
 *
 * Time is Unix time in seconds as a double (sub-second). Windows start at
 * multiples of their size. The SPOP handler is one caller of this API,
 * the tests are another.
 */
#ifndef RATELIMIT_H
#define RATELIMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/algo.h"
#include "agent/ns.h"

struct rl;
struct shm_table;

/* Pass as `weight` to compute the sliding weight from the time. */
#define RL_WEIGHT_AUTO (-1.0)

/* Why a call failed (rl_errno of the instance after -1). */
enum rl_status {
	RL_OK = 0,
	RL_ERR_NAMESPACE,     /* namespace not defined */
	RL_ERR_WINDOW,        /* window size not one of the namespace's */
	RL_ERR_KEY,           /* empty key */
	RL_ERR_FULL,          /* no room for a new key, even by eviction: not
	                         counted (see ns_def.on_table_full) */
	RL_ERR_VALUE,         /* value not finite or negative */
	RL_STATUS_COUNT
};

const char *rl_status_str(enum rl_status st);

/* What one hit or read saw: struct rl_result (agent/algo.h, what an
 * algorithm reports). */

/* Creates an instance whose shared table holds max_keys (key, window)
 * counters. Must be called before fork() for the table to be shared.
 * Returns NULL with a message in err on failure. */
struct rl *rl_new(const char *instance_name, size_t max_keys, char *err, size_t errlen);

/* The same with the table kept in a file (state_file; NULL: in memory
 * only, as rl_new): a restarted agent finds its counts there, each
 * namespace and window by name and size (agent/shm.h shm_open_file). */
struct rl *rl_open(const char *instance_name, size_t max_keys, const char *state_file, char *err,
		   size_t errlen);

/* Did rl_open find a state file's counts? */
bool rl_state_reused(const struct rl *rl);

/* A namespace's index in the shared table (shm entries, leases, node
 * counts), which may differ from its index here when a state file was
 * written by another configuration; and back (-1: none). */
unsigned rl_shm_ns(const struct rl *rl, int ns);
int rl_ns_of_shm(const struct rl *rl, unsigned sid);

/* The table's index of a window size of namespace ns (SHM_MAX_WIN: none). */
unsigned rl_shm_win(const struct rl *rl, int ns, uint32_t size);

/* What this node holds of one key's window now (GET /keys): struct
 * rl_key_info (agent/algo.h, as its algorithm reads it). */

/* Reads key's window `size` of namespace ns at now, counting nothing.
 * Returns 0 or -1 (rl_errno()). */
int rl_inspect(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t size, double now,
	       bool sliding, struct rl_key_info *out);

/* Forgets key's window `size` of namespace ns on this node (the current
 * and the previous window): their counts, unpushed diffs and grant words
 * go to 0 (shm_sync_forget), *removed says how many hits they held. A
 * namespace that syncs forgets the key in its store too (sync_forget):
 * until then its sync may read the store's count back. Returns 0 or -1
 * (rl_errno()). */
int rl_forget(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t size, double now,
	      double *removed);

/* Unmaps the table (in this process) and frees the instance. */
void rl_free(struct rl *rl);

/* Defines a namespace from its settings (copied; name "" = "default",
 * strategy "" = "local" when sync_rate < 0). Returns 0, or -1 with a
 * message in err when ns_check() refuses them, the namespace is already
 * defined, or the shares (max_keys) of the namespaces no longer fit the
 * table's max_keys. */
int rl_new_namespace(struct rl *rl, const struct ns_def *def, char *err, size_t errlen);

/* Replaces every namespace by defs[0..n) (checked as rl_new_namespace
 * does; all or nothing: on failure the old ones stay, err says why). A
 * namespace and window that exist already keep their counters (found by
 * name and size in the table), whatever their new order; indexes here
 * follow defs. Only this process's instance changes: each process of an
 * agent reloads its own; but the digest key is the shared table's (see
 * rl_reload_makes_key_public()). */
int rl_reload(struct rl *rl, const struct ns_def *defs, size_t n, char *err, size_t errlen);

/* Index of a namespace (NULL or "" = "default"), or -1. */
int rl_namespace_index(const struct rl *rl, const char *name, size_t len);

/* Current Unix time, sub-second (CLOCK_REALTIME). */
double rl_now(void);

/* ---- stored keys ----
 *
 * The form a key takes in the table and the stores: the key itself, or,
 * for a key longer than RL_STORED_KEY_MAX bytes or starting with '#', '#'
 * + 32 hex digits of its SipHash-128 under the instance's digest key (so
 * no key given verbatim can be a digest). A caller with a client's text
 * makes it with rl_skey_make() (or rl_stored_key()) once, and hands it to
 * the calls that take a stored key, which never digest it again; the
 * calls that take a key's text (rl_hit, rl_inspect, ...) make it
 * themselves. */

/* Largest stored key: longer keys are stored as a 33-byte digest. */
#define RL_STORED_KEY_MAX 104
#define RL_DIGEST_LEN     33          /* '#' + 32 hex digits */

/* A key's stored form, as rl_skey_make() made it. The text given is not
 * copied: a key stored as itself points at it and lives as long as it; a
 * digest is held here. Copying the struct copies the digest. */
struct rl_skey {
	const char *text;             /* the key given (NULL: none) */
	uint8_t len;                  /* bytes of the stored form; 0: no key */
	bool digested;                /* the stored form is digest[], not text */
	char digest[RL_DIGEST_LEN];
};

/* The stored form's bytes (len of them). */
static inline const char *rl_skey_bytes(const struct rl_skey *k)
{
	return k->digested ? k->digest : k->text;
}

/* The digest half of rl_skey_make(), for a key that needs one. */
size_t rl_skey_digest(const struct rl *rl, const char *key, size_t len, struct rl_skey *k);

/* Makes k the stored form of key[0..len); a NULL or empty key makes one
 * of len 0, which every call refuses (RL_ERR_KEY). Returns k->len. */
static inline size_t rl_skey_make(const struct rl *rl, const char *key, size_t len,
				  struct rl_skey *k)
{
	k->text = key;
	k->digested = false;
	if (!key || len == 0) {
		k->len = 0;
		return 0;
	}
	if (len > RL_STORED_KEY_MAX || key[0] == '#')
		return rl_skey_digest(rl, key, len, k);
	k->len = (uint8_t)len;
	return len;
}

/* The stored form of key[0..len), written to out (RL_STORED_KEY_MAX
 * bytes); returns its length. */
size_t rl_stored_key(const struct rl *rl, const char *key, size_t len, char *out);

/* Keys digested in this process so far (every instance: rl_skey_make and
 * the calls on a key's text), for the tests: a request's way digests its
 * key once. */
uint64_t rl_digests(void);

/* ---- calls on a key's text: each makes its stored form (rl_skey_make) ---- */

/* Adds value to key's current window and returns in *rate the rate after
 * the increment (the reference's increment()). namespace NULL = "default".
 * Returns 0 or -1 (rl_errno()). */
int rl_increment(struct rl *rl, const char *key, size_t keylen, uint32_t window_size,
		 double value, const char *ns, double weight, double *rate);

/* The rate of key's window without counting (the reference's
 * sliding_window()); cur_diff, when not NULL, is added to the current
 * window's count as if it had been counted. Returns 0 or -1. */
int rl_sliding_window(struct rl *rl, const char *key, size_t keylen, uint32_t window_size,
		      const double *cur_diff, const char *ns, double weight, double *rate);

/* The engine under both: one hit of `cost` (0 = read only) at time `now`.
 * limit < 0: always count. limit >= 0 and !count_denied: count only if the
 * rate after the hit stays <= limit (checked and added atomically); the
 * result then still reports the rate the hit would have made.
 * Returns 0 or -1 (rl_errno()). Never allocates. */
int rl_hit(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t window_size,
	   double cost, double weight, double now, double limit, bool count_denied,
	   struct rl_result *out);

/* A hit under admission "exact" (docs/CLUSTER.md, "Exact at the limit"),
 * limit >= 0. Admitted here only from a grant of the store that covers the
 * cost (the store counted it with the grant: no diff to push). Without
 * one, a hit the node's view already denies is decided as rl_hit() with
 * the limit decides it (counted if count_denied); any other counts nothing
 * and sets out->need_store: the store decides. Counts leave out what is
 * left of the grant (reserved, not hits). Never allocates. */
int rl_hit_exact(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t window_size,
		 double cost, double weight, double now, double limit, bool count_denied,
		 struct rl_result *out);

/* A hit while the store is away (docs/CLUSTER.md, "When the store is
 * down"), limit >= 0: admitted from a grant of the store that covers it,
 * else against this node's share of what the cluster had left when the
 * node last heard from the store: the rate (as the node sees it) may
 * reach out->cap = known + (limit - known) / nodes, where known is the
 * cluster's count as last confirmed (the slot's count without its
 * unconfirmed diff) and nodes the namespace's active nodes. A window the
 * node never saw gets limit / nodes. Counted with a diff (pushed when the
 * store is back), as rl_hit with that cap would. Never allocates. */
int rl_hit_degraded(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t window_size,
		    double cost, double weight, double now, double limit, bool count_denied,
		    unsigned nodes, struct rl_result *out);

/* ---- calls on a stored key (rl_skey_make, rl_stored_key) ---- */

/* How a hit with a limit is decided: enum rl_admit (agent/algo.h). */

/* rl_hit, rl_hit_exact or rl_hit_degraded as admit says (nodes: the
 * namespace's active nodes, for RL_ADMIT_DEGRADED), on a stored key
 * (rl_skey_make), which it never digests again: what the decision layer
 * calls, a request's key made once. A verbatim stored form that should
 * have been digested (over RL_STORED_KEY_MAX bytes, or starting with '#')
 * is refused (RL_ERR_KEY). Never allocates. */
int rl_hit_skey(struct rl *rl, int ns, const struct rl_skey *key, uint32_t window_size,
		double cost, double weight, double now, double limit, bool count_denied,
		enum rl_admit admit, unsigned nodes, struct rl_result *out);

/* Gives a lease back (a concurrency namespace: agent/algo_concurrency.c)
 * on a stored key: the lease id[0..idlen) a hit of the key answered
 * (algo_lease_text), or with idlen 0 any one of the key's leases in
 * flight. window_size: the namespace's window. Returns 1 when a lease was
 * freed, 0 when none was (given back already, expired, unknown or forged:
 * nothing to free is no error), -1 (rl_errno(): RL_ERR_VALUE for a
 * namespace without leases, or the checks of rl_hit_skey). Never
 * allocates. */
int rl_release(struct rl *rl, int ns, const struct rl_skey *key, uint32_t window_size,
	       const char *id, size_t idlen, double now);

/* Is id[0..idlen) a lease of the stored key this node's table answered
 * (its MAC checks: agent/algo_concurrency.c)? false for another node's,
 * a forged one, and on any error. */
bool rl_lease_ours(struct rl *rl, int ns, const struct rl_skey *key, uint32_t window_size,
		   const char *id, size_t idlen);

/* The cap rl_hit_degraded would decide a hit of the stored key against
 * now, for a hit already handed to a store that then failed. */
double rl_degraded_cap(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t size,
		       double now, double limit, double weight, unsigned nodes);

/* Status of the last failed call in this process. */
enum rl_status rl_errno(const struct rl *rl);

/* Is size one of the namespace's window sizes? */
bool rl_has_window(const struct rl *rl, int ns, uint32_t size);

/* The namespace's only window size, or 0 if it has several. */
uint32_t rl_single_window(const struct rl *rl, int ns);

/* Table-full events since start (all processes), for logs and stats. */
uint64_t rl_full_events(const struct rl *rl);

/* Seeds a window from the store: the slot of (ns, key, size, start) is
 * created if missing and its count becomes max(count, total + local diff).
 * key is the stored form (as in the table: long keys already digested).
 * Returns 0 or -1 (rl_errno(): RL_ERR_FULL, RL_ERR_WINDOW, ...). */
int rl_seed(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t size, int64_t start,
	    double total, double now);

/* Adds v to the count and the diff (what the sync loop pushes) of the
 * window (ns, key, size, start), creating its slot if missing: a hit the
 * store did not confirm whose slot was evicted meanwhile. key is the
 * stored form. Returns 0 or -1 (rl_errno()). */
int rl_keep(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t size, int64_t start,
	    double v, double now);

/* Takes v (>= 0) back from the count and the diff of that window, the
 * slot made if missing (its diff then goes negative, pushed as such): a
 * hit the node counted itself that the store turns out to have counted
 * too (agent/sync_doubt.c, admissions in doubt). Returns 0 or -1 (rl_errno()). */
int rl_unkeep(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t size,
	      int64_t start, double v, double now);

/* Takes back v (>= 0) that this process counted in the window (ns, key,
 * size, start) a moment ago (and from its diff when with_diff, as the hit
 * was counted; granted: it was admitted from the store's grant, which
 * gets it back): a hit of a decision another of its limits denied. A slot
 * gone meanwhile is left alone. key is the stored form. Returns 0 or -1
 * (rl_errno()). */
int rl_uncount(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t size,
	       int64_t start, double v, bool with_diff, bool granted);

/* Adds v (either sign, finite) to the count of the window (ns, key,
 * size, start) as the namespace's algorithm takes a hit back (a negative
 * take_back): a reservation settled, a cost charged (agent/reserve.c).
 * with_diff: also to its diff (what the sync pushes, for a namespace that
 * syncs). The slot is made if missing when with_diff (a settle on another
 * node than the hit's) or v > 0; else a slot gone is left alone (its count
 * went with it). key is the stored form. Returns 0 or -1 (rl_errno()). */
int rl_adjust(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t size,
	      int64_t start, double v, bool with_diff, double now);

/* Marks tag done in namespace ns until `until` (Unix seconds, at most
 * now + 2 x size + 60), once: a protected slot of the window index of
 * size, key "#@S" + tag's 16 hex digits (no client key is stored so; the
 * agent's own bookkeeping, never synced: agent/sync_cycle.c), whose start
 * is until - 2 x size, so that the table takes it back at until, whatever
 * the window's size. Returns 1 when this call made the mark, 0 when it
 * was there already (or until has passed), -1 (rl_errno(): RL_ERR_FULL,
 * ...). */
int rl_mark_once(struct rl *rl, int ns, uint32_t size, int64_t until, uint64_t tag, double now);

/* The mark's key of tag: "#@S" + its 16 hex digits (not NUL-terminated);
 * a settle's claim in the store has the same (agent/reserve.c). */
#define RL_MARK_LEN 19
void rl_mark_key(uint64_t tag, char out[RL_MARK_LEN]);

/* SipHash-2-4 of data[0..len) under the table's digest key (the same on
 * every node with one key_secret): the MAC of an id the agent hands out. */
uint64_t rl_mac(const struct rl *rl, const void *data, size_t len);

/* The store's answer to an admission of key's window `size` (ns's
 * algorithm's: algo_ops.store_answer, e.g. how far GCRA's TAT runs ahead)
 * written at now into the slot of the period that holds now, made if
 * missing; *view: what the hit's answer reads (algo_view.current). key is
 * the stored form. Returns 0, or -1 (rl_errno(); RL_ERR_VALUE: the
 * algorithm's store writes no answer). */
int rl_store_answer(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t size,
		    double now, double answer, double *view);

/* A grant of the store (rl_hit_exact) for the window (ns, key, size,
 * start), creating its slot if missing. key is the stored form. Returns 0
 * or -1 (rl_errno()). */
int rl_grant(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t size, int64_t start,
	     double amount, double now);

/* Takes spent and returned back from what the window (ns, key, size,
 * start) has spent and returned of its grants not pushed yet: a push in
 * doubt that the store turns out to have applied (agent/sync_doubt.c); either
 * may be negative. Nothing if the window has no slot. Returns 0 or -1
 * (rl_errno()). */
int rl_unreserve(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t size,
		 int64_t start, double spent, double returned);

/* The digest key. By default it is random, chosen when the table is
 * created (kept in the shared table, so every worker uses it), until a
 * namespace that syncs with a store is defined: then every node must name
 * a long key alike, and without a secret the fixed public key is used
 * (rl_digest_key_is_public() says so; the agent warns). rl_set_key_secret
 * derives the key from a secret shared by the nodes (config key_secret)
 * and wins over both. Before fork. */
void rl_set_key_secret(struct rl *rl, const char *secret, size_t len);
bool rl_digest_key_is_public(const struct rl *rl);

/* Would rl_reload(rl, defs, n) replace the digest key, a random one, by
 * the public key (a namespace of defs syncs and no secret is set)? Every
 * long key's count would restart under another name, in every process of
 * the table. Returns the index in defs of the first such namespace, or
 * -1 (the key stays). */
int rl_reload_makes_key_public(const struct rl *rl, const struct ns_def *defs, size_t n);

/* One namespace's use of the table (all processes). */
struct rl_ns_stats {
	uint64_t share;       /* guaranteed entries */
	int64_t live;         /* entries now, reported in 0 .. max_keys (rl_ns_stats) */
	uint64_t evicted;     /* its entries evicted to make room */
	uint64_t refused;     /* its new keys refused: no room */
};

/* Returns 0, or -1 for an unknown index. */
int rl_ns_stats(const struct rl *rl, int ns, struct rl_ns_stats *out);

/* The reference's sync(namespace) and fetch(namespace, time, timeout)
 * talk to the namespace's store: the agent's sync (agent/sync.h) runs on
 * its own; the tests call one on demand (tests/lib/syncnow.h). */

/* The settings of namespace ns (the instance's copy), or NULL for an
 * unknown index. */
const struct ns_def *rl_namespace_def(const struct rl *rl, int ns);

/* The nodes of the cluster that use namespace ns, as its store last
 * counted them (sync heartbeats); 0 while not known (local namespaces,
 * before the first sync cycle). */
unsigned rl_active_nodes(const struct rl *rl, int ns);

/* The table's capacity: the max_keys of rl_new(). */
size_t rl_max_keys(const struct rl *rl);

/* Number of namespaces defined; indexes are 0 .. count - 1. */
size_t rl_namespace_count(const struct rl *rl);

/* sync_rate of a namespace (< 0 local, 0 synchronous, > 0 period). */
double rl_sync_rate(const struct rl *rl, int ns);

/* The instance's shared counter table (agent/shm.h), for the sync loop,
 * stats and tests. Owned by the instance. */
struct shm_table *rl_shm(const struct rl *rl);

/* A worker process died (the master reaps it): what it left half done in
 * the shared table that nobody else would end is ended (shm_grant_unstick).
 * The table's LIVE counts it may have left one off are not counted again
 * here, while the other workers insert (agent/shm.h says why). */
void rl_worker_gone(struct rl *rl);

/* ---- limits per key set at run time (agent/limits.h) ---- */

struct limits;

/* Maps the table of limit overrides for `total` of them in all (the sum
 * of the namespaces' max_limit_overrides): after the counter table in
 * the state file when there is one (kept across restarts; *dropped: the
 * last run's that did not fit a smaller total), else anonymous. Before
 * fork. Returns 0, or -1 with the reason in err. Without it, no key has
 * an override (rl_limit_of answers the configured limit). */
int rl_limits_open(struct rl *rl, size_t total, size_t *dropped, char *err, size_t errlen);

/* The instance's overrides (NULL: none mapped). */
struct limits *rl_limits(const struct rl *rl);

/* The limit key (its stored form) is decided against in window `size`
 * of namespace ns: its override, or `configured`. Lock-free, no
 * allocation; a namespace without overrides costs one load. */
int64_t rl_limit_of(const struct rl *rl, int ns, uint32_t size, const struct rl_skey *key,
		    int64_t configured);

#endif /* RATELIMIT_H */
