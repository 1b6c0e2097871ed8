/*
 * sync.h - the sync: a worker's namespaces kept in step with their store,
 * in the words of docs/CLUSTER.md, "Words".
 *
 * sync_rate > 0: every sync period, at a random phase per node, one worker
 * of the node (the holder of the namespace's lease in the table) pushes
 * the diffs of every counter the node has active and writes the store's
 * totals back into the table. Diffs leave a slot only once the store has
 * confirmed them, so a failed push loses nothing: the next sync cycle
 * pushes them again, with the same token.
 *
 * sync_rate 0 (and exact admission near a limit): each hit waits for the
 * store (sync_hits_push); the retry cycle pushes only what the store did
 * not confirm.
 *
 * The master calls sync_flush() after its workers have exited, so hits
 * counted up to the end reach the store (bounded wait).
 *
 * Files, one job each (agent/sync_int.h draws how they call): sync.c (a
 * sync's life, the final flush), sync_cycle.c (the sync cycle, its lease,
 * the heartbeat), sync_seed.c (first-seen keys seeded), sync_hits.c and
 * sync_gather.c (sync_rate 0 and exact admission), sync_doubt.c (calls in
 * doubt, their handover at a reload), sync_forget.c (a key forgotten in
 * the store), sync_read.c (a key's counts read from the store),
 * sync_lease.c (concurrency leases given back, settles' claims). The table
 * is reached through agent/shm_sync.h only.
 */
#ifndef SYNC_H
#define SYNC_H

#include <ev.h>
#include <stdbool.h>
#include <stdint.h>

#include "agent/shm_sync.h"
#include "strategies/strategy.h"

struct rl;
struct sync;

/* The node's random phase seed; call once before fork so every worker of
 * the node shares the phase (nodes differ). */
void sync_set_node_seed(uint64_t seed);

/* Starts the sync of every namespace with sync_rate >= 0 on loop; *out is
 * NULL when there is none. Returns 0, or -1 when the instance of a
 * namespace's strategy cannot be set up (logged). */
int sync_start(struct ev_loop *loop, struct rl *rl, int worker_id, struct sync **out);

/* Queues a read of the cluster's counts for the slot idx, which a hit of
 * this node just created (sync_rate > 0 namespaces): the store is asked
 * shortly, without delaying anyone, and the totals are written into the
 * table. Does nothing when the queue is full or the store is away. */
void sync_seed(struct sync *s, unsigned ns, uint32_t idx);

/* ---- sync_rate 0 and exact admission: hits that wait for the store ---- */

#define SYNC_HITS_MAX 32
#define SYNC_LEASE_TEXT 33      /* a lease id's text and its NUL (ALGO_LEASE_LEN) */

/* One hit of a sync_rate 0 namespace, or one the store must admit, already
 * counted (or read) in the table by the library: what the store must add
 * and confirm, or decide. */
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
	uint64_t lease, lease_mac;   /* admit, concurrency: the lease it takes */
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
	char lease[SYNC_HITS_MAX][SYNC_LEASE_TEXT]; /* the admissions' lease ids */
	unsigned outstanding;
	double now;
	void (*done)(void *arg);
	void *arg;
	char why[STRATEGY_ERR_MAX];  /* the first failure, for logs ("" = none) */
};

/* Sends the hits: per namespace one push and one call of admissions,
 * gathered with the others of the loop iteration (agent/sync_gather.c),
 * and calls done(arg) once, later, when every call has answered. Returns
 * 1 when done will run, 0 when no call started (no store connected):
 * apply at once.
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

/* A concurrency lease given back to namespace ns's store (its step
 * STRATEGY_STEP_LEASE, a release: docs/CLUSTER.md, "Concurrency across a
 * cluster"): key the stored form, id[0..idlen) the lease's id (idlen 0:
 * the key's lease that expires first). Sent with the loop iteration's
 * admissions, and again every SYNC_LEASE_RETRY seconds while the store
 * does not answer, until `until` (the lease has expired by then: nothing
 * left to free). Returns 0 when queued, -1 when not (no store for ns, the
 * queue full: the lease expires instead). Never blocks. */
int sync_lease_release(struct sync *s, unsigned ns, const char *key, size_t keylen,
		       const char *id, size_t idlen, double until);

/* A concurrency lease this node took on its share while namespace ns's
 * store was away (docs/CLUSTER.md, "Concurrency across a cluster"),
 * added to the store once it answers: the store's lease step, an acquire
 * admitted whatever the key's other leases, that lives until `until`
 * (this node's clock: the lease's expiry). Sent as sync_lease_release
 * sends, retried until the store answers or until `until`; a release of
 * the same lease before the add has left cancels both. Returns 0 when
 * queued, -1 when not (no store for ns, the queue full: the store does
 * not count the lease). Never blocks. */
int sync_lease_add(struct sync *s, unsigned ns, const char *key, size_t keylen, const char *id,
		   size_t idlen, double until);

/* A settle's claim (docs/CLUSTER.md, "Reservations"): what the store
 * said of it. */
enum sync_claim {
	SYNC_CLAIM_FIRST = 0,     /* the first claim of its reservation: this
	                             node applies the settle */
	SYNC_CLAIM_TAKEN,         /* another node claimed it first: settled there */
	SYNC_CLAIM_UNCONFIRMED,   /* no answer within SYNC_CLAIM_WAIT seconds (the
	                             store away): applied on this node alone */
	SYNC_CLAIM_RESULTS
};

#define SYNC_CLAIM_DATA_MAX 256   /* a claim's data, handed back */
#define SYNC_CLAIM_WAIT     5.0   /* seconds a claim waits for its store */
#define SYNC_CLAIM_SLACK    30.0  /* seconds the store keeps a claim past its
                                     reservation's last moment (clocks) */

typedef void (*sync_claim_cb)(void *arg, enum sync_claim r, const void *data, size_t len);

/* Claims a settle in namespace ns's store, so that one node of the
 * cluster applies it: the store's lease step (STRATEGY_STEP_LEASE, an
 * acquire, limit 1) on the reservation's mark key mark[0..marklen) (a
 * stored key no client key can be: agent/ratelimit.h, "stored keys"),
 * under this node's id, kept in the store until `until` (when the
 * reservation may no longer be settled) + SYNC_CLAIM_SLACK. Sent with the
 * loop iteration's admissions, and again every SYNC_LEASE_RETRY seconds
 * while the store does not answer; cb(arg, result, data, len) is called
 * once with the answer and a copy of data[0..len) (at most
 * SYNC_CLAIM_DATA_MAX bytes), never from inside this call, and never when
 * the sync stops first (the settle is lost then: its reservation keeps
 * its estimate). Returns 0 when queued, -1 when not (no store for ns, the
 * queue full, until passed): the caller decides alone. Never blocks. */
int sync_settle_claim(struct sync *s, unsigned ns, const char *mark, size_t marklen,
		      double until, const void *data, size_t len, sync_claim_cb cb, void *arg);

/* Can namespace ns's store decide admissions? */
bool sync_can_admit(struct sync *s, unsigned ns);

/* Is namespace ns's store away for this worker: not connected (and not
 * connecting), a call of hits in doubt (sent, never answered), or the
 * last sync cycle's push failed? Its hits with a limit are then decided
 * on the node's share, degraded (rl_hit_degraded), until it answers
 * again. */
bool sync_store_away(struct sync *s, unsigned ns);

/* Is a sync cycle's push or a seeding read waiting for its store, a call
 * parked, or a call of hits in doubt waiting for its resend (its store
 * being ready)? A stopping worker waits for it. */
bool sync_busy(const struct sync *s);

/* Nothing in flight (sync_busy) and no push or call of hits in doubt
 * kept to resend with its token: stopping now loses no token (a reload
 * waits for this). Forgets in doubt do not count: a reload hands them
 * over, and no hit of theirs can count twice. */
bool sync_settled(const struct sync *s);

/* A reload, once sync_settled() (or the wait for it is over): *sp hands
 * over what it leaves in doubt (its sync cycles' pushes in doubt and its
 * calls in doubt, forgets included) and stops (*sp NULL), apply(arg) (if
 * not NULL) applies the new configuration to rl's namespaces, and a sync
 * of them starts on loop, as sync_start, and takes them over: each is
 * sent again with its token, and what the store counted for a call of
 * hits is taken back from the diffs. Calls of hits go to the namespace of
 * the same name, store and options, forgets to the namespace of the same
 * name; the others are dropped (logged). Not handed over: a gathered call
 * or a sync cycle's push in flight at that moment (sync_stop fails it:
 * its hits stay in the diffs, and may count twice if the store applies it
 * late). Returns 0 with *sp the new sync (NULL when no namespace syncs),
 * or -1 when it cannot start (logged; *sp NULL, what was in doubt
 * dropped). */
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
 * memory). Until the store confirms it, the forget is in doubt: this
 * worker's sync sends it again, with its token, whenever the store is
 * ready (agent/sync_doubt.c); a reload hands it over; a worker that stops
 * drops it (logged). */
int sync_forget(struct sync *s, unsigned ns, const char *key, size_t keylen, double now,
		sync_forget_cb cb, void *arg, struct sync_forget **out);

/* The caller of a sent forget no longer wants its outcome (its connection
 * closed). NULL is fine. */
void sync_forget_detach(struct sync_forget *f);

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
	                         /* a concurrency limit's (one, its window):
	                            current the leases in flight, previous the
	                            seconds until the first of them expires; a
	                            GCRA's: current the seconds its TAT runs
	                            ahead of the store's clock, previous 0 */
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

/* ---- limits per key set at run time (PUT / DELETE /limits): sync_limits.c ---- */

struct sync_limit;

/* The store's answer: status 0 (stored; full: refused, the namespace
 * holds max_limit_overrides in the store already) or -1 (why). */
typedef void (*sync_limit_cb)(void *arg, int status, bool full, const char *why);

/* Sends key's (the stored form) limit in window `size` of namespace ns
 * (rl's index; it syncs) to its store: limit >= 0 sets it, < 0 removes
 * it (strategy_ops.limit_set); once the store confirms, this node's
 * table is written too (the other nodes read it with their next sync
 * cycle). Returns 0: cb(arg, ...) runs once, later (within the store's
 * timeout_ms), *out its handle until then; or -1, why filled (no store
 * for this worker, not connected, out of memory): nothing was changed. */
int sync_limit_set(struct sync *sy, unsigned ns, uint32_t size, const char *key, size_t keylen,
		   int64_t limit, sync_limit_cb cb, void *arg, struct sync_limit **out,
		   char why[STRATEGY_ERR_MAX]);

/* The caller no longer waits (its connection closed): cb never runs; the
 * call goes on. NULL is fine. */
void sync_limit_detach(struct sync_limit *l);

#endif /* SYNC_H */
