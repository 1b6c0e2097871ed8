/*
 * sync.h - the sync loop (sync_rate > 0): every sync_rate seconds, at a
 * random phase per node, one worker of the node (the holder of the
 * namespace's lease in the shared segment) pushes the diffs of every
 * counter this node has active and writes the returned cluster totals back
 * into the table. Diffs leave a slot only once the store has confirmed
 * them, so a failed push loses nothing: the next cycle pushes them again.
 *
 * The master calls sync_flush() after its workers have exited, so hits
 * counted up to the end reach the store (bounded wait).
 *
 * sync_rate 0 namespaces push each hit themselves (sync_hits_push); their
 * cycle only retries what the store did not confirm.
 *
 * Files: sync.c (a sync's life, the cycle, seeding, the flush, rl_sync
 * and rl_fetch), sync_hits.c (sync_rate 0: gathering, parking, calls in
 * doubt and their handover), sync_forget.c (a key forgotten in the store),
 * sync_read.c (a key's counts read from the store), sync_int.h (what they
 * share). The table's words they use: agent/shm_sync.h.
 */
#ifndef SYNC_H
#define SYNC_H

#include <ev.h>
#include <stdbool.h>
#include <stdint.h>

#include "agent/shm.h"
#include "strategies/strategy.h"

struct rl;
struct sync;

/* The node's random phase seed; call once before fork so every worker of
 * the node shares the phase (nodes differ). */
void sync_set_node_seed(uint64_t seed);

/* Starts the sync of every namespace with sync_rate >= 0 on loop; *out is
 * NULL when there is none. Returns 0, or -1 when a strategy cannot be set
 * up (logged). */
int sync_start(struct ev_loop *loop, struct rl *rl, int worker_id, struct sync **out);

/* Queues a read of the cluster's counts for the slot idx, which a hit of
 * this node just created (sync_rate > 0 namespaces): the store is asked
 * shortly, without delaying anyone, and the totals are written into the
 * table. Does nothing when the queue is full or the store is away. */
void sync_seed(struct sync *s, unsigned ns, uint32_t idx);

/* ---- sync_rate 0: hits that wait for the store ---- */

#define SYNC_HITS_MAX 32

/* One hit of a synchronous namespace, already counted (or read) in the
 * table by the library: what the store must add and confirm. */
struct sync_hit {
	int ns;
	uint32_t idx;            /* its slot (rl_result.cur_idx); UINT32_MAX: none */
	const char *key;         /* stored form (rl_stored_key), for a hit without
	                            a slot; lives until the batch is applied */
	size_t keylen;
	uint32_t size;           /* window size */
	double diff;             /* what to add: the cost if counted, else 0 */
	bool with_prev;          /* also read the previous window (sliding) */
	/* An admission the store decides (strategy_admit; diff unused): the
	 * hit is added there only if admitted, or with count_denied. */
	bool admit;
	double cost, limit, weight;
	bool count_denied;
	/* out, from sync_hits_apply() */
	bool ok;                 /* the store confirmed: total is valid */
	bool admitted;           /* admit: the store's decision */
	double grant;            /* admit: reserved for this node's next hits (not
	                            in total: no hits yet) */
	double total;            /* the current window's count in the store: its
	                            hits; admit: with this node's own not counted
	                            there yet (never a grant, this node's or
	                            another's) */
	bool prev_ok;
	double prev_total;
	/* sync's */
	struct shm_entry e;
	int ci;                  /* its counter in c, or its admission in a */
};

/* A batch of hits, in the caller's memory until it is applied. */
struct sync_hits {
	struct sync_hit h[SYNC_HITS_MAX];
	size_t n;                /* the caller fills h[0..n) */
	/* sync's */
	struct strategy_counter c[2 * SYNC_HITS_MAX];
	size_t nc;
	struct strategy_admit a[SYNC_HITS_MAX];
	size_t na;
	unsigned outstanding;
	double now;
	void (*done)(void *arg);
	void *arg;
	char why[STRATEGY_ERR_MAX];  /* the first failure, for logs ("" = none) */
};

/* Pushes the hits (one push per namespace, each to its store) and calls
 * done(arg) once, later, when every push has answered. Returns 1 when done
 * will run, 0 when no push started (no store connected): apply at once.
 * While a store is connecting (a worker's first connection, a reconnect),
 * its push waits for the attempt, polled every 2 ms: the attempt ends
 * within the store's timeout_ms. */
int sync_hits_push(struct sync *s, struct sync_hits *b, double now, void (*done)(void *arg),
		   void *arg);

/* After done (or a 0 from sync_hits_push): the store's totals go into the
 * table (a slot the node lacks is seeded), every counted hit the store did
 * not confirm stays as a diff that the retry cycle pushes later (nothing
 * is lost), and each hit's ok / total / prev_ok / prev_total are set. */
void sync_hits_apply(struct rl *rl, struct sync_hits *b);

/* A counted hit that will not be pushed now (no room to wait): its slot
 * keeps it as a diff for the retry cycle. */
void sync_hit_keep(struct rl *rl, const struct sync_hit *h);

/* Can namespace ns's store decide admissions? */
bool sync_can_admit(struct sync *s, unsigned ns);

/* Is namespace ns's store away for this worker: not connected (and not
 * connecting), a call left in doubt (sent, never answered), or the last
 * sync cycle's push failed? Its hits with a limit are then decided on the
 * node's share (rl_hit_degraded) until it answers again. */
bool sync_store_away(struct sync *s, unsigned ns);

/* Is a cycle waiting for its store, or a call in doubt for its resend
 * (its store being up)? A stopping worker waits for it. */
bool sync_busy(const struct sync *s);

/* Nothing in flight and no push or call in doubt kept to resend with its
 * token: stopping now loses no token (a reload waits for this). */
bool sync_settled(const struct sync *s);

/* A reload (sync_reload does all of it): what sync s leaves in doubt (its
 * sync cycle's unconfirmed push, its calls in doubt) is taken out before
 * sync_stop(s) and given to the sync that replaces it, which sends each
 * again with its token and takes back from the diffs what the store
 * counted for it. Not taken: a call in flight at that moment (sync_stop
 * fails it: its hits stay in the diffs, and may count twice if the store
 * applies it late). Namespaces whose name, store or options changed drop
 * theirs (logged). take returns a list, maybe empty, or NULL (s NULL, out
 * of memory); give frees it. */
struct sync_doubts;
struct sync_doubts *sync_doubts_take(struct sync *s);
void sync_doubts_give(struct sync *s, struct sync_doubts *list);

/* A reload, once sync_settled() (or the wait for it is over): *sp hands
 * over what it leaves in doubt and stops (*sp NULL), apply(arg) (if not
 * NULL) applies the new configuration to rl's namespaces, and a sync of
 * them starts on loop, as sync_start, and takes the doubts over. Returns
 * 0 with *sp the new sync (NULL when no namespace syncs), or -1 when it
 * cannot start (logged; *sp NULL, the doubts dropped). */
int sync_reload(struct sync **sp, struct ev_loop *loop, struct rl *rl, int worker_id,
		void (*apply)(void *arg), void *arg);

/* ---- a key forgotten in the store (DELETE /keys): sync_forget.c ---- */

#define SYNC_FORGET_MAX 64       /* forgets kept per worker until confirmed */

enum sync_forget_result {
	SYNC_FORGET_SENT = 0,    /* the store confirmed it */
	SYNC_FORGET_QUEUED,      /* the store is away, refused or was silent: sent
	                            again, with its token, when it answers */
	SYNC_FORGET_RESULT_COUNT
};

/* removed: the hits the store held (SENT only). */
typedef void (*sync_forget_cb)(void *arg, enum sync_forget_result r, double removed);

struct sync_forget;

/* Forgets key (its stored form, rl_stored_key) of namespace ns (rl's
 * index) in the store, in the current and previous windows of each of its
 * sizes at now (strategy_ops.forget), with a token: however often it is
 * sent, the store applies it once. The node's table is the caller's
 * (rl_forget). Returns 1: sent, cb(arg, ...) runs once with the outcome
 * (within the store's timeout_ms) unless detached, *out the handle; 0: the
 * store is away, queued (cb never runs); -1: refused (the namespace does
 * not sync, its store cannot forget, SYNC_FORGET_MAX are queued, out of
 * memory). A queued forget is sent by this worker's sync, every period of
 * its namespace while the store is ready, until it is confirmed; a reload
 * hands it over; a worker that stops drops it (logged). */
int sync_forget(struct sync *s, unsigned ns, const char *key, size_t keylen, double now,
		sync_forget_cb cb, void *arg, struct sync_forget **out);

/* The caller of a sent forget no longer wants its outcome (its connection
 * closed). NULL is fine. */
void sync_forget_detach(struct sync_forget *f);

/* Forgets sent and not confirmed yet, or queued. */
size_t sync_forgets_queued(const struct sync *s);

/* A reload (sync_reload): the forgets not confirmed are taken from s
 * before sync_stop(s) (their callers are answered "queued") and given to
 * the next sync, which sends them with their tokens (by namespace name;
 * those of a namespace that no longer syncs are dropped, logged). take:
 * NULL when there are none; give and free take NULL. */
struct sync_forgets;
struct sync_forgets *sync_forgets_take(struct sync *s);
void sync_forgets_give(struct sync *s, struct sync_forgets *list);
void sync_forgets_free(struct sync_forgets *list);

/* ---- a key's counts read from the store (GET /keys): sync_read.c ---- */

/* What the store holds of a key for one window size. */
struct sync_read_count {
	uint32_t size;           /* window size, seconds */
	int64_t start;           /* the current window's start (Unix seconds) */
	bool ok;                 /* both windows were read: the counts are valid */
	double current;          /* the store's hits in the current window: every
	                            node's, as pushed (not a node's unpushed hits,
	                            not the grants it holds) */
	double previous;         /* ... in the window before it */
};

/* c[0..n): one per window size of the namespace, in its order. why: NULL
 * when every count is ok, else the first failure (the store's text, valid
 * during the call only). */
typedef void (*sync_read_cb)(void *arg, const struct sync_read_count *c, size_t n,
			     const char *why);

struct sync_read;

/* Reads key (its stored form, rl_stored_key) of namespace ns (rl's index)
 * from the store: its count in the current and previous window of each
 * size of the namespace at now (strategy_ops.get_window), whatever this
 * node holds of it. Writes nothing, here or in the store. Returns 0: sent,
 * cb(arg, ...) runs once, later (within the store's timeout_ms; at once
 * with a failure if the sync stops), unless detached, *out the handle;
 * -1: refused, errstr says why (the store is away or not connected, this
 * worker does not sync the namespace, out of memory), cb never runs. */
int sync_read(struct sync *s, unsigned ns, const char *key, size_t keylen, double now,
	      sync_read_cb cb, void *arg, struct sync_read **out, char errstr[STRATEGY_ERR_MAX]);

/* The caller of a read no longer wants its outcome (its connection
 * closed): cb never runs. NULL is fine. */
void sync_read_detach(struct sync_read *r);

/* Stops the timers and frees everything (pending pushes are failed; their
 * diffs stay in the table). NULL is fine. */
void sync_stop(struct sync *s);

/* Pushes every pending diff of every syncing namespace, waiting at most
 * timeout_s. Returns the number of counters whose diff could not be
 * pushed (0 = all flushed). */
size_t sync_flush(struct rl *rl, double timeout_s);

/* ---- the library's calls to a store (agent/ratelimit.h's API) ---- */

/* The reference's sync(namespace): pushes this node's pending diffs of the
 * namespace to its store and writes back the totals of its active
 * counters, as one cycle of the sync loop (under the namespace's lease, so
 * never at the same time as another process of the node), waiting at most
 * timeout_s on a private event loop. Returns 0, or -1 (local namespace,
 * store away, timeout: the diffs stay for the next cycle). */
int rl_sync(struct rl *rl, const char *ns, double timeout_s);

/* The reference's fetch(namespace, time, timeout): reads every counter of
 * the namespace's current and previous windows at `time` from the store
 * and writes them into the table. One process per node fetches: if
 * timeout_s > 0 the namespace's lease is kept until it expires (at most one
 * fetch per timeout_s), else it is released at once. Returns 0 (also when
 * another process holds the lease), or -1. */
int rl_fetch(struct rl *rl, const char *ns, double time, double timeout_s);

#endif /* SYNC_H */
