/*
 * spop_handler.h - the SPOP front's messages: turns one NOTIFY frame into
 * one ACK frame: finds the rate-limit messages, makes each a request for the
 * decision layer (agent/decide.h), and encodes the decisions as the
 * variables HAProxy's ACLs read (docs/PROTOCOL.md). No I/O; the only
 * memory it uses is the scratch buffer given at init.
 */
#ifndef SPOP_HANDLER_H
#define SPOP_HANDLER_H

#include <stddef.h>
#include <stdint.h>

#include "agent/decide.h"
#include "spop/spop.h"

struct config;

#define SPOP_HANDLER_MAX_MSGS   DECIDE_MAX_BATCH  /* rate-limit messages per NOTIFY */
#define SPOP_HANDLER_SUFFIX_MAX DECIDE_LABEL_MAX  /* characters of a message's variable suffix */

/* The variables an ACK sets (docs/PROTOCOL.md). */
enum spop_handler_var {
	VAR_EXCEEDED = 0,
	VAR_RATE,
	VAR_REMAINING,
	VAR_RESET,
	VAR_LIMIT,
	VAR_WINDOW,
	VAR_RETRY_AFTER,
	VAR_ERROR,
	VAR_DEGRADED,
	VAR_SHADOW_EXCEEDED,
	VAR_DELAYED_MS,
	VAR_LEASE,                        /* concurrency: the lease id taken */
	VAR_RELEASED,                     /* a `release` message freed a lease */
	VAR_RESERVATION,                  /* a `reserve` hit's reservation */
	VAR_SETTLED,                      /* a `settle` message applied a cost */
	VAR_COUNT
};

struct spop_handler {
	const struct config *cfg;
	struct decide *dec;
	size_t prefix_len;      /* strlen(cfg->message_prefix) */
	uint8_t var_hdr[VAR_COUNT][20];   /* set-var action up to the value */
	uint8_t var_hdr_len[VAR_COUNT];
	char *scratch;          /* canonical key text (binary keys become hex) */
	size_t scratch_len;
	size_t scratch_used;    /* ... by the NOTIFY being read */
};

/* Prepares a handler for frames of at most max_frame_size bytes; allocates
 * the scratch buffer once. Returns 0 or -1 (out of memory). */
int spop_handler_init(struct spop_handler *h, const struct config *cfg, struct decide *dec,
		 size_t max_frame_size);

void spop_handler_free(struct spop_handler *h);

/* Appends to w the ACK of the NOTIFY f (same stream-id and frame-id), at
 * most max_frame_size bytes. `now` is the Unix time used for every message
 * of the frame. Returns 0 (ACK in w), 1 when the ACK waits (for a store,
 * or delayed: owner->deliver(owner, p) is called later, and p is linked
 * to owner meanwhile), or -1 with *err when the NOTIFY's payload is
 * malformed (nothing is counted then) or the ACK cannot be encoded. */
int spop_handler_notify(struct spop_handler *h, const struct spop_frame *f, double now,
		   struct spop_writer *w, size_t max_frame_size, enum spop_err *err,
		   struct decide_owner *owner);

/* Encodes the ACK of a NOTIFY that waited for its store (from deliver()).
 * The caller then calls decide_pending_release(). */
int spop_handler_encode_pending(struct spop_handler *h, struct decide_pending *p, struct spop_writer *w,
			   size_t max_frame_size, enum spop_err *err);

#endif /* SPOP_HANDLER_H */
