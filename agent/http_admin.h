/*
 * http_admin.h - the admin endpoints of the HTTP front (docs/OPERATIONS.md):
 *
 *   GET /keys?namespace=NS&key=K   what this node holds of K, per window,
 *                                  and what the store holds (synced)
 *   DELETE /keys?namespace=NS&key=K  forget K here and in the store
 *   GET /top?namespace=NS&n=N&by=hits|denied&window=W
 *                                  the heaviest keys of the current window
 *   PUT /limits?namespace=NS&key=K&window=W&limit=L
 *                                  K's own limit in window W (here and, for a
 *                                  namespace that syncs, in its store)
 *   GET /limits?namespace=NS[&key=K][&after=P&n=N]
 *                                  K's limits, or every one of NS, paged
 *   DELETE /limits?namespace=NS&key=K&window=W
 *                                  K back to the namespace's limit
 *
 * The front checks http_admin_token first. Each writes a JSON answer (or
 * {"error": ...}) into out (cap bytes) and returns the HTTP status.
 */
#ifndef HTTP_ADMIN_H
#define HTTP_ADMIN_H

#include <stddef.h>

#include "agent/ns.h"
#include "agent/sync.h"

struct rl;
struct topk;

#define ADMIN_ANSWER_MAX (96u << 10)   /* the largest answer (GET /top, 100 keys) */

/* A /keys request whose answer waits for the store: a DELETE's forget, a
 * GET's read (the owner's; zeroed but for done and owner before
 * admin_forget or admin_keys). */
struct admin_wait {
	void (*done)(void *owner);        /* the owner's: the store answered */
	void *owner;
	/* admin_forget's, admin_keys', admin_limits' */
	bool read;                        /* a GET's read, else a DELETE's forget */
	bool limit;                       /* a PUT or DELETE /limits, else /keys */
	struct sync_limit *l;             /* ... while waiting for the store */
	uint32_t window;                  /* ... its window, */
	int64_t value;                    /* its limit (-1: removed) */
	bool was;                         /* DELETE: this node held it */
	bool full;                        /* the store's answer: full */
	int status;                       /* ... 0, or -1 (why) */
	struct sync_forget *f;            /* while waiting: the forget */
	struct sync_read *r;              /* ... or the read */
	int ns;
	char *key;                        /* as given, for the answer */
	size_t key_len;
	double now;                       /* the request's time */
	double removed;                   /* a forget: this node's hits */
	enum sync_forget_result store;
	double store_removed;
	struct sync_read_count counts[NS_MAX_WINDOWS];   /* a read: the store's */
	char why[STRATEGY_ERR_MAX];       /* ... or why not ("" = read) */
	double read_at;                   /* when the store answered */
};

/* GET /keys: what this node holds of the key, each window (rl_inspect);
 * for a namespace that syncs (sync_rate >= 0), what its store holds too,
 * read now (sync_read: sy is the worker's sync), whatever this node has
 * seen of the key. Returns the HTTP status with the answer in out, or 0:
 * the answer waits for the store, w->done(w->owner) runs once it answered
 * (within the store's timeout_ms), and admin_wait_answer writes it. Each
 * window of a synced namespace says whether this node holds a counter of
 * the key ("seen") and what the store said: "store":{"current","previous",
 * "rate","read_at"}, or {"error":"..."} when it is away, refused or
 * silent (the node's view is answered all the same). */
int admin_keys(struct rl *rl, struct sync *sy, const char *query, size_t qlen, double now,
	       char *out, size_t cap, struct admin_wait *w);

/* DELETE /keys: forgets the key's counts on this node, every window
 * (rl_forget), and for a namespace that syncs in its store (sync_forget:
 * sy is the worker's sync). Returns the HTTP status with the answer in
 * out, or 0: the answer waits for the store, w->done(w->owner) runs once
 * it is known (within the store's timeout_ms), and admin_wait_answer
 * writes it. The answer says what was removed here ("removed"), and what
 * the store did: "store":"sent" (confirmed: "store_removed", the hits it
 * held), "queued" (away: sent once when it is back), "none" (a local
 * namespace). */
int admin_forget(struct rl *rl, struct sync *sy, const char *query, size_t qlen, double now,
		 char *out, size_t cap, struct admin_wait *w);

/* PUT, GET and DELETE /limits (method: HTTP_PUT, HTTP_GET, HTTP_DELETE;
 * docs/HTTP.md, "Limits per key"): a key's own limit in one window of
 * its namespace, which replaces the configured one for that key (a
 * caller's may still lower it, by caller_limit). A namespace that syncs
 * keeps it in its store: a PUT or DELETE returns 0 and answers through
 * w->done once the store did (then every node has it within one sync
 * period); a local one in this node's table (and state file). GET reads
 * this node's. Returns the HTTP status with the answer in out, or 0. */
int admin_limits(struct rl *rl, struct sync *sy, int method, const char *query, size_t qlen,
		 char *out, size_t cap, struct admin_wait *w);

/* After w->done: the answer into out; returns its HTTP status. */
int admin_wait_answer(struct rl *rl, struct admin_wait *w, char *out, size_t cap);

/* The owner no longer waits (its connection closed): done never runs. */
void admin_wait_detach(struct admin_wait *w);

int admin_top(struct rl *rl, struct topk *t, const char *query, size_t qlen, double now,
	      char *out, size_t cap);

#endif /* HTTP_ADMIN_H */
