/*
 * decide.h - the protocol-neutral decision: a rate-limit request in (what
 * to count, in which namespace and window, against which limit), a
 * decision out (rate, remaining, reset, retry_after, exceeded, error).
 * The fronts (SPOP in agent/spop_handler.c, HTTP in agent/http_front.c) turn
 * their messages into requests and decisions into their answers; nothing
 * here knows a protocol.
 *
 * Namespaces with sync_rate 0 answer with the store's totals: the hits of
 * one batch are pushed together and the decisions are held until the
 * store answers (or fails: then they stay local, fail-open). A held batch
 * is a `pending`, from a per-worker pool; the front gets it back through
 * its deliver() callback, without blocking the loop meanwhile.
 */
#ifndef DECIDE_H
#define DECIDE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/algo.h"
#include "agent/log.h"
#include "agent/ratelimit.h"

struct ev_loop;
struct sync;
struct topk;

#define DECIDE_MAX_BATCH   32     /* requests decided together (one NOTIFY) */
#define DECIDE_DELAY_PER_KEY 64   /* decisions delayed per key, per worker */
#define DECIDE_DELAY_PER_OWNER 256 /* ... per connection (a peer's share) */
#define DECIDE_DELAY_MAX   1024   /* ... per worker, shared evenly by the
				     namespaces that delay (a namespace's share) */
#define DECIDE_MAX_PENDING (3072 + DECIDE_DELAY_MAX) /* decisions that wait, per
				     worker: for a store, or delayed */
#define DECIDE_COST_MAX    ((double)NS_LIMIT_MAX) /* largest cost and limit accepted */
#define DECIDE_LABEL_MAX   16     /* characters of a front's label */

enum decide_admission {
	DECIDE_ADMIT_DEFAULT = 0,     /* the namespace's `admission` */
	DECIDE_ADMIT_LOCAL,
	DECIDE_ADMIT_EXACT,
};

enum decide_window_type {
	DECIDE_WT_DEFAULT = -1,       /* the namespace's window_type */
	DECIDE_WT_SLIDING = 0,
	DECIDE_WT_FIXED = 1,
};

/* One request. The strings are not copied and need to live only for the
 * call. */
struct rl_request {
	const char *ns;               /* NULL: "default" */
	size_t ns_len;
	const char *key;              /* canonical text; NULL: missing */
	size_t key_len;
	const char *key_error;        /* the front could not make a key of it: why */
	uint32_t window;              /* seconds; 0: the namespace's only window */
	double cost;                  /* >= 0, <= DECIDE_COST_MAX */
	bool has_limit;               /* the caller's own limit, which the
	                                 namespace's caller_limit may override */
	int64_t limit;                /* 0..DECIDE_COST_MAX */
	int window_type;              /* enum decide_window_type */
	int admission;                /* enum decide_admission (0: the namespace's) */
	bool shadow;                  /* counted and decided, never denies, as in a
	                                 shadow namespace (Envoy's shadow_mode per
	                                 descriptor: agent/rls_decide.h) */
	bool untrusted;               /* HTTP without http_admin_token: may name a
	                                 limit only where one is configured (or
	                                 caller_limit "any"), a cost of at most 1
	                                 without a limit, and its admission only
	                                 with caller_admission */
	const char *arg_error;        /* the front found an argument invalid: why */
	bool reserve;                 /* cost is an estimate: a window namespace's
	                                 hit answers a reservation, settled later
	                                 by the actual cost (agent/reserve.h);
	                                 max_cost's default is then the limit,
	                                 and a denied one is never counted
	                                 (whatever count_denied) */
	int front;                    /* enum front_id, for the metrics */
	char label[DECIDE_LABEL_MAX + 1]; /* the front's name for it (SPOP: the
	                                     message's suffix), kept in the decision */
	uint32_t answer;              /* the front's choice of what to answer (SPOP:
	                                 the variables of `vars`; 0: all), kept in
	                                 the decision */
};

/* One decision. The public part is what a front answers; the rest is what
 * it was computed from (to recompute it from a store's totals). */
struct rl_decision {
	const char *error;            /* NULL when counted or read */
	bool refused;                 /* the error is "counter table full": the
	                                 service's, not the request's fault */
	bool degraded;                /* the store is away (or could not decide an
	                                 admission): decided on this node's share
	                                 of what the cluster had left */
	bool shadow;                  /* the namespace is in shadow mode: */
	bool shadow_exceeded;         /* ... it would have denied (exceeded is false) */
	/* rate, remaining, reset, retry_after, exceeded: as its algorithm
	 * answers them (agent/algo.h, docs/PROTOCOL.md) */
	union {
		struct algo_answer ans;
		struct { ALGO_ANSWER_FIELDS };
	};
	/* the limit, has_limit, the window; and privately what the answers
	 * are computed from (to compute them again from a store's totals) */
	union {
		struct algo_view view;
		struct { ALGO_VIEW_FIELDS };
	};
	int64_t delayed_ms;           /* held this long before it was answered
	                                 (delay_max_ms), or 0 */
	/* private */
	uint32_t cur_idx, prev_idx;
	int ns;
	bool sync0;                   /* waits for the store */
	bool admit0;                  /* ... which decides the admission */
	bool count_denied;
	bool granted;                 /* admitted from the store's grant */
	bool store_counted;           /* the store counted it (sync_rate 0 push,
	                                 admission): a take-back is a push */
	uint8_t skeylen;
	uint8_t req;                  /* decide_batch: the request it decides */
	uint8_t algo;                 /* its namespace's algorithm (enum ns_algorithm) */
	bool reserve;                 /* counted as a reservation (rq->reserve):
	                                 skey is set (reserve_text) */
	uint64_t lease, lease_mac;    /* concurrency, counted: the lease taken
	                                 (decide_lease_text) */
	double reserved_at;           /* a reservation: when it was counted */
	/* Not cleared with the fields above: the label and the answer (copied
	 * from the request) and the stored key (set only for sync0), last so that
	 * the fields above are cleared cheaply. */
	char label[DECIDE_LABEL_MAX + 1]; /* the front's own name for it (SPOP: suffix) */
	uint32_t answer;              /* the request's, as the label */
	char skey[RL_STORED_KEY_MAX];
};

struct decide_pending;
struct decide_owner;

struct delay_queue;

/* A held decision is final: its owner answers it (decide_pending_results),
 * then calls decide_pending_release(). */
typedef void (*decide_deliver_fn)(struct decide_owner *o, struct decide_pending *p);

/* What the decision layer knows of a front's connection: where its held
 * decisions go and how many it has. Embedded in the connection (the front
 * finds it back with container_of), zeroed but for deliver. Its counts
 * bound what one peer may hold (DECIDE_DELAY_PER_OWNER); nothing here
 * ever stops a connection from being read. */
struct decide_owner {
	decide_deliver_fn deliver;
	struct decide_pending *list;  /* its decisions that wait, any order */
	unsigned held;                /* ... of them delayed (delay_max_ms) */
	unsigned waiting;             /* ... of them waiting for a store */
};

struct decide {
	struct rl *rl;
	struct sync *sync;            /* the worker's; NULL: every namespace local */
	struct ev_loop *loop;         /* the worker's, for delayed decisions; NULL:
	                                 none is delayed */
	struct delay_queue *dq_hash[64]; /* delayed decisions' keys (agent/delay.c) */
	struct delay_queue *dq_free;
	size_t nheld;                 /* decisions delayed now */
	uint16_t nheld_ns[NS_MAX];    /* ... per namespace (library index) */
	struct topk *topk;            /* heavy hitters (GET /top); NULL: off */
	struct decide_pending *free_pending;
	size_t npending;
	struct log_limit full_log;    /* "no room" log, at most 1/s */
	struct log_limit evict_log;   /* eviction log, at most 1/s */
	uint64_t full_events;         /* new keys refused for room in this process */
	uint64_t sync_failures;
	double last_sync_log;
	char refusal[NS_NAME_MAX + 128]; /* the text of a refused decision that
	                                    names its namespace: answered before
	                                    the next batch is decided */
};

void decide_init(struct decide *d, struct rl *rl);

/* Frees the pool. Held batches must have been released or detached. */
void decide_free(struct decide *d);

/* Counts (or reads, cost 0) one request at Unix time now and fills *out;
 * out->error says why nothing was counted. */
void decide_one(struct decide *d, const struct rl_request *rq, double now,
		struct rl_decision *out);

/* Decides requests rq[0..n) (n <= DECIDE_MAX_BATCH: the first
 * DECIDE_MAX_BATCH) as one decision (the messages of one NOTIFY, one
 * HTTP check; docs/PROTOCOL.md, "Several messages in one NOTIFY"): a
 * request that names no window, in a namespace with several windows,
 * is checked against every window that has a configured limit. Each
 * (request, window) is a part, written to parts[] (at most maxparts >= n;
 * parts[k].req is its request); a request whose windows would not fit
 * gets one part with the error "too many limits". The decision admits
 * only if every part decided here admits: when one is over its limit,
 * the parts of namespaces with count_denied false are counted in none
 * (taken back), those with count_denied true in all, as before. Parts
 * that wait for a store (sync_rate 0, exact admission) are decided by it
 * (decide_needs_store), each on its own. Returns the number of parts. */
size_t decide_batch(struct decide *d, const struct rl_request *rq, size_t n, double now,
		    struct rl_decision *parts, size_t maxparts);

/* The lease a decision took (a concurrency namespace's hit, counted), as
 * its id: ALGO_LEASE_LEN hex digits into out (ALGO_LEASE_LEN + 1 bytes,
 * NUL-terminated). Returns the length, 0 when it took none. */
size_t decide_lease_text(const struct rl_decision *r, char *out);

/* A lease given back (SPOP's `release`, POST /release, the nginx
 * module's log phase): rq's namespace, window and key (its cost, limit
 * and admission are not read), id[0..idlen) the lease id its hit answered
 * (`lease`), or none (idlen 0: any one lease of the key). Returns 1 when a
 * lease was freed, 0 when none was (released already, expired, unknown,
 * forged: a release that frees nothing is no error), or -1 with *error:
 * why (a static string: an unknown namespace, a missing key, a namespace
 * without leases). */
int decide_release(struct decide *d, const struct rl_request *rq, const char *id, size_t idlen,
		   double now, const char **error);

/* The decision of request req of a batch: its parts folded (decide_fold),
 * the first part's label kept. false when no part is that request's. */
bool decide_request_result(const struct rl_decision *parts, size_t np, size_t req,
			   struct rl_decision *out, const char **error);

/* Does a decision of res[0..n) wait for a store? */
bool decide_needs_store(const struct rl_decision *res, size_t n);

/* What a front calls: decides rq[0..n) as one decision (decide_batch, into
 * parts[0..*np)) and sees it through, each request's key made stored once
 * (agent/decide_int.h). NULL: the parts are final, answer
 * them now. Else the decision waits (for its store, or delayed by its
 * namespace's delay_max_ms, or behind a delayed one of the same key), in
 * the pending returned, linked to owner: the front tags it, and
 * owner->deliver(owner, p) runs once it is final (decide_pending_results).
 * The front goes on reading meanwhile: what waits is bounded here (the
 * pool, the delay bounds), never by the connection. */
struct decide_pending *decide_run(struct decide *d, const struct rl_request *rq, size_t n,
				  double now, struct rl_decision *parts, size_t maxparts,
				  size_t *np, struct decide_owner *owner);

/* Starts the store round trip of the synchronous decisions of res[0..n)
 * (n <= DECIDE_MAX_BATCH). Returns the pending batch, linked to owner
 * (owner->deliver runs later), or NULL when the answer is ready now
 * (store down, pool exhausted: res is final, local counts). */
struct decide_pending *decide_hold(struct decide *d, struct rl_decision *res, size_t n,
				   double now, struct decide_owner *owner);

/* The owner cannot wait for p's store any longer (the gRPC front: its
 * call's deadline comes): p decided now as when its store does not answer
 * (docs/CLUSTER.md, "When the store is down": a sync_rate 0 hit, counted
 * already, on this node's share; an admission decided and counted by this
 * node; degraded), unlinked from its owner, which answers from the
 * results returned (*n of them, valid until the owner returns to the
 * loop) and forgets p: owner->deliver never runs for it. p stays with its
 * store's call, and goes back to the pool when that ends; the store's
 * answer then leaves each hit counted once, as this answer said. NULL,
 * nothing done: p is delayed (delay_max_ms), not held for a store. */
const struct rl_decision *decide_pending_settle(struct decide *d, struct decide_pending *p,
						double now, size_t *n);

/* The decisions of a delivered batch. */
const struct rl_decision *decide_pending_results(const struct decide_pending *p, size_t *n);

/* Bytes of one held decision (the pool's unit; docs/CONFIG.md,
 * delay_max_ms). */
size_t decide_pending_size(void);

/* Three words the front keeps with a held batch (SPOP: stream, frame, ...). */
uint64_t *decide_pending_tag(struct decide_pending *p);

/* Unlinks p from its owner's list and returns it to the pool. */
void decide_pending_release(struct decide *d, struct decide_pending *p);

/* The owner goes away: its batches complete without delivering (delayed
 * ones leave their queues at once). */
void decide_pending_detach_all(struct decide_owner *o);

/* Is a more restrictive than b? Exceeded beats not exceeded (then the
 * longer retry_after), then less remaining; results without a limit and
 * errors rank last. */
bool decide_more_restrictive(const struct rl_decision *a, const struct rl_decision *b);

/* The decision that speaks for res[0..n) (n >= 1): the most restrictive,
 * with exceeded, remaining and retry_after folded over all of them;
 * *error is the first error of any (or NULL). out has no label and no
 * stored key. */
void decide_fold(const struct rl_decision *res, size_t n, struct rl_decision *out,
		 const char **error);

/* An admission argument's value: DECIDE_ADMIT_LOCAL for "local",
 * DECIDE_ADMIT_EXACT for "exact", or -1. */
int decide_parse_admission(const char *s, size_t n);

/* Request arguments given as text, as every front may: a decimal
 * integer of 1..19 digits (no sign), and a cost: a plain decimal number
 * ("2", "0.5", ".25"; no sign, exponent, hex, inf or nan) of at most
 * DECIDE_COST_MAX, so that counts stay exact integers in a double. */
bool decide_parse_uint(const char *s, size_t n, uint64_t *out);
bool decide_parse_cost(const char *s, size_t n, double *out);

#endif /* DECIDE_H */
