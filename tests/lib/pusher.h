/*
 * pusher.h - the sync loop's way of pushing (agent/sync.c), for store
 * tests: K keys get a hit each per step; a push carries a token and every
 * key's unconfirmed hits; what a push did not confirm is resent as it was,
 * with the same token, before anything new (new hits wait in `local`).
 * After the last hit, pusher_drain() pushes until nothing is left, so the
 * store must then hold exactly `hits` per key.
 */
#ifndef PUSHER_H
#define PUSHER_H

#include <ev.h>
#include <stdbool.h>

#include "strategies/strategy.h"

#define PUSHER_KEYS 48

struct pusher {
	const struct strategy_ops *ops;
	struct strategy *s;
	const char *ns;
	int64_t start;                  /* the window (size 60) */
	int id;
	char keys[PUSHER_KEYS][16];
	double local[PUSHER_KEYS];      /* hits not confirmed */
	double hits;                    /* per key, made so far */
	struct strategy_counter b[PUSHER_KEYS];
	unsigned idx[PUSHER_KEYS];
	size_t n;                       /* counters of the push in flight / to resend */
	bool busy, retry;
	char token[STRATEGY_TOKEN_MAX];
	unsigned seq;
	unsigned pushes, failed, resent;
	char last_err[STRATEGY_ERR_MAX];
};

void pusher_init(struct pusher *p, const struct strategy_ops *ops, struct strategy *s,
		 const char *ns, int64_t start, int id);
/* One step: a hit per key (if hit), then a push unless one is in flight. */
void pusher_step(struct pusher *p, bool hit);
/* Runs loop until every hit is confirmed or secs pass; true if done. */
bool pusher_drain(struct pusher *p, struct ev_loop *loop, double secs);

#endif /* PUSHER_H */
