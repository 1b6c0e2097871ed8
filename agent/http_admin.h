/*
 * http_admin.h - the admin endpoints of the HTTP front (docs/OPERATIONS.md):
 *
 *   GET /keys?namespace=NS&key=K   what this node holds of K, per window
 *   DELETE /keys?namespace=NS&key=K  forget K here and in the store
 *   GET /top?namespace=NS&n=N&by=hits|denied&window=W
 *                                  the heaviest keys of the current window
 *
 * The front checks http_admin_token first. Each writes a JSON answer (or
 * {"error": ...}) into out (cap bytes) and returns the HTTP status.
 */
#ifndef HTTP_ADMIN_H
#define HTTP_ADMIN_H

#include <stddef.h>

#include "agent/sync.h"

struct rl;
struct topk;

#define ADMIN_ANSWER_MAX (96u << 10)   /* the largest answer (GET /top, 100 keys) */

int admin_keys(struct rl *rl, const char *query, size_t qlen, double now, char *out, size_t cap);
/* A DELETE /keys whose answer waits for the store (the owner's; zeroed
 * before admin_forget). */
struct admin_forget {
	void (*done)(void *owner);        /* the owner's: the store answered */
	void *owner;
	/* admin_forget's */
	struct sync_forget *f;            /* while waiting */
	int ns;
	char *key;                        /* as given, for the answer */
	size_t key_len;
	double removed;                   /* this node's hits */
	enum sync_forget_result store;
	double store_removed;
};

/* DELETE /keys: forgets the key's counts on this node, every window
 * (rl_forget), and for a namespace that syncs in its store (sync_forget:
 * sy is the worker's sync). Returns the HTTP status with the answer in
 * out, or 0: the answer waits for the store, w->done(w->owner) runs once
 * it is known (within the store's timeout_ms), and admin_forget_answer
 * writes it. The answer says what was removed here ("removed"), and what
 * the store did: "store":"sent" (confirmed: "store_removed", the hits it
 * held), "queued" (away: sent once when it is back), "none" (a local
 * namespace). */
int admin_forget(struct rl *rl, struct sync *sy, const char *query, size_t qlen, double now,
		 char *out, size_t cap, struct admin_forget *w);

/* After w->done: the answer into out; returns its HTTP status. */
int admin_forget_answer(struct rl *rl, struct admin_forget *w, char *out, size_t cap);

/* The owner no longer waits (its connection closed): done never runs. */
void admin_forget_detach(struct admin_forget *w);

int admin_top(struct rl *rl, struct topk *t, const char *query, size_t qlen, double now,
	      char *out, size_t cap);

#endif /* HTTP_ADMIN_H */
