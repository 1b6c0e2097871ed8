/*
 * algo.h - a rate-limiting algorithm behind one ops table (docs/ARCHITECTURE.md,
 * "Algorithms"). An algorithm is one file, agent/algo_<name>.c, holding a
 * const struct algo_ops; a namespace's `algorithm` (struct ns_def, enum
 * ns_algorithm) chooses it from algo_table[] (agent/algo.c). The library
 * (agent/ratelimit.c) calls an algorithm's hit, take_back and share_cap
 * on the slots it found the key's place for; the decision layer
 * (agent/decide.c) calls its answer. Nothing above calls an algorithm by
 * name.
 *
 * What a slot holds. The shared table (agent/shm.h) keeps, per (namespace,
 * window index, key, start), a slot with two double words, `count` and
 * `diff`, whose start is a multiple of the window index's size, and takes
 * a slot back two sizes after its start. An algorithm says what its words
 * mean and how long a slot is (`period`: the size the table is given for
 * a window of the namespace); a hit finds the slot of its period and the
 * one before in one scan (shm_find), so a state that must outlive a period
 * carries over from the previous slot:
 *
 *   window  count: the window's hits; diff: hits not pushed to the store;
 *           period = the window
 *   gcra    count: the key's TAT (theoretical arrival time) minus the
 *           slot's start; period = window x burst, so that a TAT is at
 *           most one period ahead of the hit that set it: a slot two
 *           periods old holds a TAT in the past, which says nothing
 *   concurrency  count: the leases taken in the slot's period (22 bits),
 *           those given back (22 bits) and when the newest was taken (9
 *           bits), one integer; period = lease_ms in seconds, rounded up,
 *           so that a lease lives in the slot of its period or the one
 *           after (agent/algo_concurrency.c)
 *
 * Every word another process touches is written through the table's
 * calls (shm_add, shm_add_if, shm_cas_count, the grant words of
 * agent/shm_sync.h): lock-free, no allocation.
 *
 * The store's side (what is pushed, how the store's script decides an
 * admission): algo_ops.step says which step of strategies/ a store takes
 * for an admission (strategy_admit.step; the scripts of
 * strategies/redis_script.c and statements of strategies/pg_sql.c):
 *
 *   window  a diff per window (strategy_ops.push_diffs) and the
 *           check-and-increment over the current and previous windows,
 *           with grants (strategy_ops.admit)
 *   gcra    the TAT compare-and-set on the key's TAT in the store, in the
 *           store's clock (strategy_ops.admit, STRATEGY_STEP_TAT): every
 *           hit the node's copy of the TAT admits; the sync cycle pushes
 *           only the slot's diff (hits admitted while the store was away,
 *           hits given back), as TAT steps of cost 0; the answer, how far
 *           the TAT runs ahead, written into the slot by
 *           algo_ops.store_answer
 *   concurrency  the key's leases in the store, each by its id and expiry
 *           in the store's clock (strategy_ops.admit, STRATEGY_STEP_LEASE):
 *           every acquire taken here is the store's step, a release too
 *           (sync_lease_release); nothing pushed by the sync cycle
 *
 * An algorithm without one (NS_ALGORITHMS' `store` false, agent/ns.h) is
 * local only: ns_check() refuses a store for it.
 */
#ifndef ALGO_H
#define ALGO_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/ns.h"

struct shm_key;
struct shm_ref;
struct shm_table;

/* What one hit or read saw, for the handler's variables: an algorithm's
 * report (algo_ops.hit), the library's (rl_hit and the others). */
struct rl_result {
	double rate;          /* current + previous * weight (after the hit) */
	double current;       /* count of the current window (after the hit;
	                         when not counted, as if it had been, so that
	                         rate == current + previous * weight always) */
	double previous;      /* count of the previous window */
	double weight;        /* weight applied to previous */
	int64_t start;        /* start of the current window (Unix seconds) */
	uint32_t size;        /* window size */
	bool counted;         /* the hit was added (false for cost 0 and for
	                         a hit refused by the limit) */
	bool inserted;        /* this hit created the current window's slot */
	bool evicted;         /* ... and evicted a live entry for it */
	bool granted;         /* rl_hit_exact: admitted from the store's grant */
	bool need_store;      /* rl_hit_exact: the store must decide (nothing
	                         counted; current is the view without the hit) */
	double cap;           /* the limit the hit was decided against: the
	                         limit, or the node's share (rl_hit_degraded) */
	uint32_t cur_idx;     /* slot of the current window (UINT32_MAX: none) */
	uint32_t prev_idx;    /* slot of the previous window (UINT32_MAX: none) */
	uint64_t lease;       /* concurrency, counted: the lease taken (its
	                         period's start, when, its number in it:
	                         agent/algo_concurrency.c) */
	uint64_t lease_mac;   /* ... and its MAC: the lease id's second half */
};

/* How a hit with a limit is decided: rl_hit, rl_hit_exact or
 * rl_hit_degraded. */
enum rl_admit {
	RL_ADMIT_LOCAL = 0,           /* from the node's view (rl_hit) */
	RL_ADMIT_DEGRADED,            /* a grant, or this node's share */
	RL_ADMIT_EXACT,               /* a grant, the view's denial, or the store */
	RL_ADMIT_STORE,               /* a grant or the store, never the view's
	                                 denial: a window reservation (another
	                                 node's settle may have lowered the
	                                 cluster's count, which a node's view
	                                 follows upward only); decided as
	                                 EXACT otherwise (>= RL_ADMIT_EXACT) */
};

/* What this node holds of one key's window now (GET /keys). */
struct rl_key_info {
	uint32_t size;
	int64_t start;        /* of the current window */
	bool found;           /* the current window has a slot here */
	double count;         /* this node's count: the cluster's hits as last
	                         fetched (synced namespaces), its own hits
	                         since (diff, spent), and what is left of
	                         its grant */
	double diff;          /* its hits the store has not confirmed */
	double grant;         /* what is left of the store's grant */
	double spent;         /* grant hits not reported to the store yet */
	double previous;      /* the previous window's count */
	double weight;        /* of the previous window (0: fixed) */
	double rate;          /* (count - grant) + previous x weight; gcra:
	                         count and rate are the hits in the key's
	                         bucket, start the slot's period's */
	double cap;           /* what the rate is checked against: the
	                         configured limit (-1: none); gcra: the burst */
};

/* One hit, its arguments checked by the library (rl_hit_skey), its key
 * prepared for the window index (shm_key_init). */
struct algo_hit {
	struct shm_table *t;
	const struct shm_key *k;
	const struct ns_def *def;     /* the namespace (the library's copy) */
	uint32_t size;                /* the window: seconds */
	double cost;                  /* >= 0; 0: read only (never inserts) */
	double weight;                /* the previous window's (window counter;
	                                 RL_WEIGHT_AUTO: from now) */
	double now;
	double limit;                 /* < 0: none */
	bool count_denied;
	enum rl_admit admit;
	unsigned nodes;               /* RL_ADMIT_DEGRADED: the namespace's active nodes */
};

/* What a decision's answers are computed from: the library's result
 * (struct rl_result), kept in the decision (struct rl_decision, which
 * holds these fields by name: one list, ALGO_VIEW_FIELDS) while it waits. */
#define ALGO_VIEW_FIELDS \
	double current, previous, weight; /* rl_result's: the algorithm's words */ \
	double cost;                                                                 \
	double cap;                   /* what the hit was checked against: the   */ \
	                              /* limit, or the node's share while the    */ \
	                              /* store is away; GCRA: the burst          */ \
	int64_t limit;                                                               \
	uint32_t window;                                                             \
	bool has_limit;                                                              \
	bool sliding;                                                                \
	bool counted;
struct algo_view {
	ALGO_VIEW_FIELDS
};

/* The answers (docs/PROTOCOL.md says what each means per algorithm), held
 * by name in struct rl_decision too (ALGO_ANSWER_FIELDS). */
#define ALGO_ANSWER_FIELDS \
	int64_t rate;                 /* ceiling of the exact rate */             \
	int64_t remaining;                                                           \
	int64_t reset;                /* seconds, >= 1: the window's end */       \
	int64_t retry_after;          /* only when exceeded, >= 1 */              \
	bool exceeded;                /* also set with an error by */             \
	                              /* on_table_full "deny" */
struct algo_answer {
	ALGO_ANSWER_FIELDS
};

/* The step a store takes for an admission of an algorithm (agent/algo.h's
 * banner): strategy_admit.step's values (strategies/strategy.h, checked
 * where the sync makes an admission, agent/sync_hits.c). */
enum algo_step {
	ALGO_STEP_WINDOW = 0,         /* check-and-increment, grants */
	ALGO_STEP_TAT,                /* GCRA's TAT compare-and-set */
	ALGO_STEP_LEASE,              /* a concurrency lease taken or given back */
};

struct algo_ops {
	const char *name;             /* the namespace's `algorithm` */
	/* What an admission sent to a store is: the step the store's
	 * script or statement takes (docs/CLUSTER.md). */
	enum algo_step step;
	/* What a slot holds: the size the table is given for window `size`
	 * of namespace d (a slot is taken back two of them after its start).
	 * At most 2^31 - 1 (ns_check() bounds what makes it). */
	uint32_t (*period)(const struct ns_def *d, uint32_t size);
	/* How a hit is decided: counted (or refused by the limit, or read)
	 * on the slots of h->k, out filled (rl_result's contract). Returns
	 * 0, or -1 when a slot was needed and the table had no room for it.
	 * Lock-free, never allocates. */
	int (*hit)(const struct algo_hit *h, struct rl_result *out);
	/* A hit of v taken back (rl_uncount: another limit of its decision
	 * denied it): cur is the slot of the period the hit was counted in
	 * (found; never SHM_NONE), with_diff and granted as it was counted. */
	void (*take_back)(struct shm_table *t, const struct shm_ref *cur, const struct ns_def *d,
			  uint32_t size, double v, bool with_diff, bool granted);
	/* While the store is away (rl_degraded_cap): the cap a hit on cur
	 * (and prev, the slot before, weighted by weight) is decided against.
	 * NULL for an algorithm without a store. */
	double (*share_cap)(const struct shm_table *t, const struct shm_ref *cur,
			    const struct shm_ref *prev, double weight, double limit,
			    unsigned nodes);
	/* The store's answer to an admission written into slot cur (of the
	 * period that starts at `start`; found or made), at now: a STEP_TAT's
	 * `answer` is how far the store's TAT runs ahead of the store's clock
	 * (seconds). Returns what the hit's view reads (struct
	 * algo_view.current, the hit not counted). NULL: the sync writes
	 * the store's totals itself (the window counter). Lock-free. */
	double (*store_answer)(struct shm_table *t, const struct shm_ref *cur,
			       const struct ns_def *d, uint32_t size, int64_t start, double now,
			       double answer);
	/* What the key holds at now (rl_inspect, GET /keys): cur and prev
	 * the slots of the period of `start` and the one before (SHM_NONE:
	 * none); size the window, sliding its type (the window counter's). */
	void (*inspect)(const struct shm_table *t, const struct ns_def *d, uint32_t size,
			int64_t start, double now, bool sliding, const struct shm_ref *cur,
			const struct shm_ref *prev, struct rl_key_info *out);
	/* The rate and reset at now, and with a limit (v->has_limit; else
	 * left as they are) remaining, retry_after and exceeded. */
	void (*answer)(const struct algo_view *v, double now, struct algo_answer *a);
	/* A lease given back (rl_release): the lease id[0..idlen) (a
	 * concurrency hit's, algo_lease_text), or none (idlen 0: any one of
	 * the key's leases in flight). Returns 1 when a lease was freed, 0
	 * when nothing was: an id released already, expired, unknown or
	 * forged. NULL for an algorithm without leases. Lock-free. */
	int (*release)(struct shm_table *t, const struct shm_key *k, const struct ns_def *d,
		       uint32_t size, const char *id, size_t idlen, double now);
};

/* A lease id as text: 32 lowercase hex digits, the lease and its MAC
 * (struct rl_result's lease, lease_mac). out: ALGO_LEASE_LEN + 1 bytes,
 * NUL-terminated. Returns ALGO_LEASE_LEN. */
#define ALGO_LEASE_LEN 32
size_t algo_lease_text(uint64_t lease, uint64_t mac, char *out);

/* The start of the period a lease (struct rl_result's lease) was taken
 * in: its slot's (rl_uncount gives it back there). */
int64_t algo_lease_start(uint64_t lease);

/* Is id[0..idlen) a lease of key k this table made (its MAC checks)? A
 * lease another node took is not (each node's MAC key is its own). */
bool algo_lease_ours(const struct shm_table *t, const struct shm_key *k, const char *id,
		     size_t idlen);

/* Each algorithm's ops, in its file. */
extern const struct algo_ops algo_window;     /* agent/algo_window.c */
extern const struct algo_ops algo_gcra;       /* agent/algo_gcra.c */
extern const struct algo_ops algo_concurrency; /* agent/algo_concurrency.c */

/* The algorithms, by enum ns_algorithm (agent/algo.c). */
extern const struct algo_ops *const algo_table[NS_ALGO_COUNT];

static inline const struct algo_ops *algo_of(enum ns_algorithm a)
{
	return algo_table[a];
}

/* A key over its limit is never evicted (shm_protect on cur and prev, the
 * slots of h's hit): its state is what keeps it denied. Only at the
 * configured limit or a higher one (a caller's lower limit never pins an
 * entry). */
void algo_protect(const struct algo_hit *h, const struct shm_ref *cur,
		  const struct shm_ref *prev);

/* Makes the slot of h's key for the period starting at start (cur found
 * none), reporting it in out (inserted, evicted). Returns 0, or -1: no
 * room. */
int algo_insert(const struct algo_hit *h, int64_t start, struct shm_ref *cur,
		struct rl_result *out);

/* ceil(v) as an int64, saturated (0 for v <= 0 and NaN): counts can exceed
 * what a cast handles. Below 9.2e18 the truncation of a positive v is its
 * floor, one more when v is not whole: a few instructions, where ceil()
 * without SSE4.1 is a libm-style bit dance (as strategies/window_start.h). */
static inline int64_t algo_ceil(double v)
{
	if (!(v > 0))
		return 0;
	if (v >= 9.2e18)
		return INT64_MAX;
	int64_t i = (int64_t)v;
	return (double)i < v ? i + 1 : i;
}

#endif /* ALGO_H */
