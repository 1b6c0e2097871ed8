/*
 * handler.h - turns one NOTIFY frame into one ACK frame: finds the
 * rate-limit messages, counts each through the ratelimit API, and encodes
 * the variables HAProxy's ACLs read (docs/PROTOCOL.md). No I/O; the only
 * memory it uses is the scratch buffer given at init.
 */
#ifndef HANDLER_H
#define HANDLER_H

#include <stddef.h>
#include <stdint.h>

#include "spop/spop.h"

struct config;
struct rl;

#define HANDLER_MAX_MSGS   32    /* rate-limit messages per NOTIFY */
#define HANDLER_SUFFIX_MAX 16    /* characters of a message's variable suffix */
#define HANDLER_MAX_PENDING 4096 /* NOTIFYs waiting for a store, per worker */
#define HANDLER_COST_MAX   1e12  /* largest cost and limit accepted */

struct handler_pending;
struct sync;

/* The variables an ACK sets (docs/PROTOCOL.md). */
enum handler_var {
	VAR_EXCEEDED = 0,
	VAR_RATE,
	VAR_REMAINING,
	VAR_RESET,
	VAR_LIMIT,
	VAR_WINDOW,
	VAR_RETRY_AFTER,
	VAR_ERROR,
	VAR_COUNT
};

struct handler {
	const struct config *cfg;
	struct rl *rl;
	size_t prefix_len;      /* strlen(cfg->message_prefix) */
	uint8_t var_hdr[VAR_COUNT][20];   /* set-var action up to the value */
	uint8_t var_hdr_len[VAR_COUNT];
	char *scratch;          /* canonical key text (binary keys become hex) */
	size_t scratch_len;
	double last_full_log;   /* last "no room" log, to log at most 1/s */
	double last_evict_log;  /* last eviction log, at most 1/s */
	uint64_t full_events;   /* new keys refused for room in this process */
	/* Synchronous namespaces (sync_rate 0): the worker's sync, and how
	 * an ACK that waited for the store reaches its connection: deliver()
	 * encodes it with handler_encode_pending() and then calls
	 * handler_pending_release(). */
	struct sync *sync;
	void (*deliver)(void *owner, struct handler_pending *p);
	struct handler_pending *free_pending;
	size_t npending;
	uint64_t sync_failures;
	double last_sync_log;
};

/* Prepares a handler for frames of at most max_frame_size bytes; allocates
 * the scratch buffer once. Returns 0 or -1 (out of memory). */
int handler_init(struct handler *h, const struct config *cfg, struct rl *rl,
		 size_t max_frame_size);

void handler_free(struct handler *h);

/* Appends to w the ACK of the NOTIFY f (same stream-id and frame-id), at
 * most max_frame_size bytes. `now` is the Unix time used for every message
 * of the frame. Returns 0 (ACK in w), 1 when the ACK waits for a store
 * (sync_rate 0: h->deliver(owner, p) is called later, and p is linked into
 * *owned meanwhile), or -1 with *err when the NOTIFY's payload is
 * malformed (nothing is counted then) or the ACK cannot be encoded. */
int handler_notify(struct handler *h, const struct spop_frame *f, double now,
		   struct spop_writer *w, size_t max_frame_size, enum spop_err *err,
		   void *owner, struct handler_pending **owned);

/* Encodes the ACK of a pending NOTIFY (from deliver()). */
int handler_encode_pending(struct handler *h, struct handler_pending *p, struct spop_writer *w,
			   size_t max_frame_size, enum spop_err *err);

/* Unlinks p from its owner's list and returns it to the pool. */
void handler_pending_release(struct handler *h, struct handler_pending *p);

/* The owner goes away: its pendings complete without delivering. */
void handler_pending_detach_all(struct handler_pending **list);

#endif /* HANDLER_H */
