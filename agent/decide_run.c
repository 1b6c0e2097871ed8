/*
 * decide_run.c - the entry of the decision layer (agent/decide.h): a
 * batch of requests decided (agent/decide.c), held for its store, or
 * delayed instead of denied (agent/delay.c); and the layer freed. The top
 * of the layer's files (agent/decide_int.h): nothing below calls here.
 */
#include "agent/decide.h"
#include "agent/decide_int.h"

struct decide_pending *decide_run(struct decide *d, const struct rl_request *rq, size_t n,
				  double now, struct rl_decision *parts, size_t maxparts,
				  size_t *np, struct decide_owner *owner)
{
	struct rl_skey sk[DECIDE_MAX_BATCH];
	struct decide_pending *p;

	*np = 0;
	/* Each key made stored once, for all that follows. */
	n = n < DECIDE_MAX_BATCH ? n : DECIDE_MAX_BATCH;
	decide_keys(d, rq, n, sk);
	/* Behind a delayed decision of the same key: in line, undecided. */
	if (d->nheld > 0 && delay_queued(d, rq, sk, n) &&
	    (p = delay_hold(d, rq, sk, n, parts, 0, now, owner)))
		return p;
	*np = decide_parts(d, rq, sk, n, now, parts, maxparts);
	if (decide_needs_store(parts, *np))
		return decide_hold(d, parts, *np, now, owner);
	/* Only a decision with a part over its limit may be delayed (the
	 * usual answer, under every limit, skips delay_hold). */
	bool over = *np == 0;
	for (size_t k = 0; k < *np && !over; k++)
		over = parts[k].exceeded;
	return over ? delay_hold(d, rq, sk, n, parts, *np, now, owner) : NULL;
}

void decide_pending_detach_all(struct decide_owner *o)
{
	while (o->list) {
		struct decide_pending *p = o->list;
		bool delayed = p->delayed;
		pending_unlink(p);
		p->owner = NULL;
		/* A delayed one has nothing counted: it leaves its queue now,
		 * so a peer that went away holds none of the bounds. One that
		 * waits for a store completes without delivering. */
		if (delayed && p->dq)
			delay_drop(p);
	}
}

void decide_free(struct decide *d)
{
	delay_free(d);
	pending_free_all(d);
}
