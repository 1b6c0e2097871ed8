/*
 * strategy.h - the interface between the sync (agent/sync*.c) and a
 * central store. One const ops table per store, chosen by name:
 *
 *   const struct strategy_ops redis_strategy = { .name = "redis", ... };
 *
 * Every operation is asynchronous on the caller's libev loop: it returns at
 * once, and later calls its callback exactly once, never from inside the
 * call that started it. Strategies never log, never abort and never block
 * the loop (no blocking connect, DNS, query or cancel). A store that is
 * down, slow or restarted makes operations fail within the instance's
 * timeout_ms; the strategy reconnects by itself with backoff.
 *
 * Errors, one convention (docs/STYLE.md, "Errors"): 0 / -1, the reason as
 * one line of text in a buffer the caller owns, or, once started, in the
 * callback; the store writes it (truncated to fit), the agent logs it.
 *   check_opts, create    0 / an instance, or -1 / NULL with the reason in
 *                         (err, errlen): configuration time, any size;
 *   an operation          0 = started; -1 = refused at once, the reason in
 *                         errstr[STRATEGY_ERR_MAX] (the size is in the
 *                         prototype), and the callback never runs;
 *   its callback          status 0 = done (errstr NULL), -1 = failed, the
 *                         reason in errstr: the store's memory, valid
 *                         during the callback only;
 *   ready, connecting     a bool; strategy_find, strategy_name: NULL = none.
 *
 * The reference's four operations:
 *   push_diffs   - add a batch of diffs, atomically per counter, and return
 *                  each counter's new total (a diff of 0 only reads), so a
 *                  sync cycle is one round trip per batch;
 *   get_counters - every counter of a namespace for its window sizes at a
 *                  time (current and previous windows);
 *   get_window   - one counter;
 *   purge        - delete windows that can no longer matter (stores
 *                  without expiry).
 *
 * And a fifth, the operator's:
 *   forget       - a key's counts and reservations set to 0 in the current
 *                  and previous windows of every size, those windows
 *                  marked reset (DELETE /keys, docs/OPERATIONS.md).
 *
 * Counters are identified by (namespace, key, window size, window start);
 * keys are bytes (may hold NULs), counts are doubles. A counter's count
 * holds hits; apart from it the store keeps the counter's reservation:
 * the grants it gave nodes (admit) that they have not yet reported spent
 * or given back (push_diffs' spent and returned). Admissions count both;
 * counts read back (totals, rows) are hits only, so that no answer counts
 * as hits the headroom handed out.
 *
 * What the stores share is written once in strategies/store.h: an
 * operation's way from the call to its callback (done queue, delivery
 * outside the call, destroy from inside a callback), the silence timeout,
 * the reconnect backoff and the strategy_opts readers.
 */
#ifndef STRATEGY_H
#define STRATEGY_H

#include <ev.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STRATEGY_ERR_MAX   128
#define STRATEGY_TOKEN_MAX 64
#define STRATEGY_TOKEN_TTL 600    /* seconds a push token is remembered */

struct strategy;

/* One counter of a batch. The caller owns the memory and keeps it (and the
 * strings it points to) valid until the callback returns. */
struct strategy_counter {
	const char *ns;
	size_t ns_len;
	const char *key;
	size_t key_len;
	int64_t start;          /* window start, Unix seconds */
	uint32_t size;          /* window size, seconds */
	double diff;            /* in: to add (0 = read only, with spent and
	                           returned 0) */
	double spent;           /* in: a grant's hits: taken from the reservation,
	                           added to the count */
	double returned;        /* in: a grant given back: taken from the
	                           reservation (which never goes below 0) */
	double total;           /* out: the store's count after the add */
	bool ok;                /* out: total is valid */
	bool reset;             /* out (push_diffs, get_window), with total: a
	                           key of this counter's window was forgotten
	                           (forget) since the window began. A node
	                           writes such a total into its table even when
	                           it is lower than its count (docs/CLUSTER.md,
	                           "Forgetting a key"); every other total only
	                           raises a count. Redis marks the whole hash
	                           (the key's bucket of 64: every key of it
	                           reads reset), PostgreSQL the key's row. */
};

/* A row returned by get_counters. Strings point into the strategy's
 * memory and are valid only during the callback. */
struct strategy_row {
	const char *key;
	size_t key_len;
	int64_t start;
	uint32_t size;
	double count;
};

/* What the store's step of an admission is: the algorithm's (agent/algo.h,
 * algo_ops.step, whose values these are). All the admissions of one
 * admit() call have the same step. */
#define STRATEGY_LEASE_MAX 64  /* a lease id's bytes (STRATEGY_STEP_LEASE) */

enum strategy_step {
	STRATEGY_STEP_WINDOW = 0,     /* the window counter's check-and-increment */
	STRATEGY_STEP_TAT,            /* GCRA's TAT compare-and-set */
	STRATEGY_STEP_LEASE,          /* a concurrency lease taken or given back */
	STRATEGY_STEPS
};

/* One admission decided by the store (docs/CLUSTER.md, "Exact at the
 * limit"). STRATEGY_STEP_WINDOW: in one atomic step, for the counter
 * (ns, key, size, start),
 * whose count is current and reservation reserved (previous and
 * prev_reserved: the previous window's),
 *   1. current += diff           (the node's hits of the key the store has
 *                                 not seen; may be 0)
 *   2. taken = current + reserved + (previous + prev_reserved) * weight
 *      admitted = taken + cost <= limit
 *   3. current += cost           if admitted or count_denied
 *   4. if admitted, a grant: part of the headroom left, reserved now for
 *      the node's coming hits (which it then admits locally, reporting
 *      them spent, and giving back what it did not use, with later pushes:
 *      spent, returned):
 *        grant = min(want, (limit - taken - cost) / (2 * nodes))
 *      rounded down to a multiple of cost (0 when under one cost, or when
 *      want or nodes is 0); reserved += grant
 * and the counts (hits) come back.
 *
 * STRATEGY_STEP_TAT (docs/CLUSTER.md, "GCRA across a cluster"): the key's
 * TAT (ns, key, size; start is not part of it) in the store's clock,
 * `now` the store's time (never the node's: the nodes' clocks differ by
 * more than a hit's time at high rates), T = size / limit (limit > 0),
 * tau = burst x T, in one atomic step:
 *   1. base = max(tat, now) + diff x T       (hits the node admitted alone)
 *   2. admitted = base + cost x T - now <= tau (a microsecond's slack, at
 *                                            most a thousandth of T)
 *   3. tat = admitted ? base + cost x T : base
 * and current = tat - now (seconds the TAT runs ahead, >= 0) comes back;
 * previous and grant are 0 (weight, count_denied, want and nodes are not
 * used: a denied hit never moves a TAT, and no grant is given). A TAT
 * that fell behind the store's clock says nothing: the store may forget
 * it then.
 *
 * STRATEGY_STEP_LEASE (docs/CLUSTER.md, "Concurrency across a cluster"):
 * the leases in flight of the key (ns, key, size; start is not part of
 * it), each a member `lease` (its id, unique to the key) with its expiry
 * in the store's clock, in one atomic step:
 *   1. the expired leases are dropped
 *   2. cost > 0, an acquire: admitted = the lease is there already (a
 *      resend: exactly once without a token), or the others number under
 *      limit; if so it is added, expiring lease_s after the store's now
 *      (a resend moves nothing)
 *      cost 0, a release: admitted = the lease was there and is removed
 *      (once: a second release removes nothing); lease_len 0 removes the
 *      one that expires first, if any
 * and current = the leases in flight after, previous = seconds until the
 * first of them expires (0: none) come back; grant 0 (diff, weight,
 * count_denied, want and nodes are not used). A key whose leases all
 * expired says nothing: the store may forget it then.
 *
 * The caller owns the memory until the callback returns. */
struct strategy_admit {
	const char *ns;
	size_t ns_len;
	const char *key;
	size_t key_len;
	int64_t start;          /* current window start, Unix seconds */
	uint32_t size;          /* window size, seconds */
	double diff;            /* in: added unconditionally */
	double cost;            /* in: the hit */
	double limit;           /* in */
	double weight;          /* in: of the previous window (0: fixed window) */
	bool count_denied;      /* in: count a hit that is not admitted */
	double want;            /* in: the largest grant wanted (0: none) */
	unsigned nodes;         /* in: the nodes sharing the limit (0: no grant) */
	enum strategy_step step; /* in: the store's step (above) */
	double burst;           /* in, STRATEGY_STEP_TAT: the hits at once, >= 1 */
	const char *lease;      /* in, STRATEGY_STEP_LEASE: the lease's id ... */
	size_t lease_len;       /* ... 1..STRATEGY_LEASE_MAX bytes (0: a release
	                           of the first to expire) */
	double lease_s;         /* in, STRATEGY_STEP_LEASE: its life, > 0 */
	bool ok;                /* out: the store decided; the rest is valid */
	bool admitted;          /* out */
	double grant;           /* out: reserved for this node (0 if none) */
	double current;         /* out: the current window's count (hits) after */
	double previous;        /* out: the previous window's count (hits) */
};

/* status 0 = done, -1 = failed (errstr says why). Either way the
 * counters' `ok` say which diffs the store applied and whose totals are
 * valid: a failed push may have applied part of the batch (a store that
 * applies a batch in several atomic steps marks those it confirmed).
 *
 * While an instance is not connected, operations are refused at once
 * (-1, errstr "not connected (...)"), and the callback never runs. */
typedef void (*strategy_done_cb)(void *arg, int status, const char *errstr);

/* Called once with every row (n may be 0), or with status -1. */
typedef void (*strategy_rows_cb)(void *arg, int status, const char *errstr,
				 const struct strategy_row *rows, size_t n);

struct strategy_ops {
	const char *name;

	/* Checks the JSON text of strategy_opts (NULL = defaults) as create()
	 * would, without creating anything: returns 0, or -1 with a message in
	 * err naming the option and what was expected. */
	int (*check_opts)(const char *opts_json, char *err, size_t errlen);

	/* Creates an instance on `loop` from the JSON text of strategy_opts
	 * (NULL = defaults). Connecting starts in the background. Returns
	 * NULL with a message in err when the options are invalid. */
	struct strategy *(*create)(struct ev_loop *loop, const char *opts_json, char *err,
				   size_t errlen);

	/* Fails every pending operation (callbacks run with status -1 before
	 * this returns) and frees the instance. */
	void (*destroy)(struct strategy *s);

	/* token (NULL = none): a push carrying a token is applied at most
	 * once. Pushing again with the same token (after a failure or a
	 * timeout, when the store may or may not have applied the first
	 * try) adds nothing twice: the parts already applied only return
	 * their totals. The caller resends exactly the counters (same
	 * diffs, same order) that were not confirmed; a store that applies
	 * a batch in parts (Redis: one call per hash; PostgreSQL: one
	 * transaction per chunk) makes each part's memory of the token
	 * stable under such a resend. Tokens are remembered for at least
	 * STRATEGY_TOKEN_TTL seconds. At most STRATEGY_TOKEN_MAX bytes. */
	int (*push_diffs)(struct strategy *s, struct strategy_counter *batch, size_t n,
			  const char *token, strategy_done_cb cb, void *arg,
			  char errstr[STRATEGY_ERR_MAX]);

	int (*get_counters)(struct strategy *s, const char *ns, size_t ns_len,
			    const uint32_t *sizes, size_t nsizes, int64_t now,
			    strategy_rows_cb cb, void *arg, char errstr[STRATEGY_ERR_MAX]);

	/* n admissions, each decided atomically by the store; all of them
	 * leave in one round trip. token: as for push_diffs (each admission
	 * is applied at most once; a resend of one that was applied returns
	 * the same decision and the current totals). Each admission's `ok`
	 * says whether it was decided. NULL: the store cannot decide
	 * admissions (the caller decides locally). */
	int (*admit)(struct strategy *s, struct strategy_admit *a, size_t n, const char *token,
		     strategy_done_cb cb, void *arg, char errstr[STRATEGY_ERR_MAX]);

	/* Says that this node (node: its id, bytes) uses namespace ns at
	 * time now (Unix seconds, the node's clock; a store may use its own
	 * clock instead, as PostgreSQL does), and counts the nodes that said
	 * so within the last `ttl` seconds, itself included, into *active
	 * before cb runs. The margin of
	 * admissions (issue 9) assumes that many nodes. */
	int (*heartbeat)(struct strategy *s, const char *ns, size_t ns_len, const char *node,
			 size_t node_len, double now, double ttl, unsigned *active,
			 strategy_done_cb cb, void *arg, char errstr[STRATEGY_ERR_MAX]);

	/* batch of one: counter->total and ->ok filled. */
	int (*get_window)(struct strategy *s, struct strategy_counter *counter,
			  strategy_done_cb cb, void *arg, char errstr[STRATEGY_ERR_MAX]);

	int (*purge)(struct strategy *s, const char *ns, size_t ns_len, const uint32_t *sizes,
		     size_t nsizes, int64_t now, strategy_done_cb cb, void *arg,
		     char errstr[STRATEGY_ERR_MAX]);

	/* Forgets key (the stored form) of namespace ns: for each of the
	 * nsizes window sizes, in the window that holds now (Unix seconds)
	 * and the one before it, the key's count and its reservation go to
	 * 0 and the window is marked reset (the next reads of it say so:
	 * strategy_counter.reset), a window the key has no count in as well.
	 * One atomic step; token (required, at most STRATEGY_TOKEN_MAX
	 * bytes): applied at most once, a resend with the same token (and
	 * the same arguments) changes nothing more and gets the same answer.
	 * *removed, before cb runs with status 0: the hits the first
	 * application removed, summed over the windows and sizes (a
	 * reservation is not hits). NULL: the store keeps no counts
	 * (local). */
	int (*forget)(struct strategy *s, const char *ns, size_t ns_len, const char *key,
		      size_t key_len, const uint32_t *sizes, size_t nsizes, int64_t now,
		      const char *token, double *removed, strategy_done_cb cb, void *arg,
		      char errstr[STRATEGY_ERR_MAX]);

	/* Limits per key set at run time (PUT /limits, docs/CLUSTER.md,
	 * "Limits per key"). limit_set: key's (the stored form) limit in
	 * window `size` of ns set to limit (>= 0), or removed (limit < 0),
	 * and ns's overrides' version moved on, in one atomic step; a new
	 * one only while ns holds fewer than `most` (else *full before cb
	 * runs with status 0, and nothing changed). Setting the same value
	 * again is harmless: no token. NULL: the store keeps none (local). */
	int (*limit_set)(struct strategy *s, const char *ns, size_t ns_len, const char *key,
			 size_t key_len, uint32_t size, int64_t limit, uint64_t most, bool *full,
			 strategy_done_cb cb, void *arg, char errstr[STRATEGY_ERR_MAX]);
	/* ns's overrides, when their version is not `have`: *version gets the
	 * store's (0: none ever set), and cb every override (a row each: key,
	 * size, count = the limit; start 0) when the version differs from
	 * have, no row when it does not (*changed says which). One read:
	 * rows and version from one snapshot. */
	int (*limits_read)(struct strategy *s, const char *ns, size_t ns_len, uint64_t have,
			   uint64_t *version, bool *changed, strategy_rows_cb cb, void *arg,
			   char errstr[STRATEGY_ERR_MAX]);
	/* Is the instance connected and usable right now? */
	bool (*ready)(const struct strategy *s);

	/* Not ready, but a connection attempt is under way that ends (ready,
	 * or failed) within the store's own timeout: worth waiting for. */
	bool (*connecting)(const struct strategy *s);
};

extern const struct strategy_ops local_strategy;
extern const struct strategy_ops redis_strategy;
extern const struct strategy_ops postgres_strategy;

/* The ops table of a store by name ("local", "redis", "postgres"), or NULL. */
const struct strategy_ops *strategy_find(const char *name);

/* The name of the i-th store of the table (from 0), or NULL past the end:
 * the one list of store names. */
const char *strategy_name(size_t i);

#endif /* STRATEGY_H */
