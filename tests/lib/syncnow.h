/*
 * syncnow.h - one sync of a namespace on demand, for tests: what the
 * reference library calls sync(namespace) and fetch(namespace, time,
 * timeout), which the agent itself never calls (its sync runs on its own,
 * agent/sync.h). Built on the sync's own cycle (agent/sync_int.h): a
 * private event loop and sync of the one namespace, in the final flush's
 * mode (every grant unused is given back, no metrics, no heartbeat).
 * Words: docs/CLUSTER.md, "Words".
 */
#ifndef SYNCNOW_H
#define SYNCNOW_H

struct rl;

/* One sync cycle of namespace ns now: pushes this node's diffs of it to
 * its store and writes back the totals of its active counters, under the
 * namespace's lease (so never at the same time as another process of the
 * node), waiting at most timeout_s. Returns 0, or -1 (unknown or local
 * namespace, store away, timeout: the diffs stay for the next cycle). */
int syncnow(struct rl *rl, const char *ns, double timeout_s);

/* Reads every counter of namespace ns's current and previous windows at
 * time from its store (strategy_ops.get_counters) and writes them into the
 * table. One process per node fetches: if timeout_s > 0 the namespace's
 * lease is kept until it expires (at most one fetch per timeout_s), else
 * it is released at once. Returns 0 (also when another process holds the
 * lease), or -1. */
int syncnow_fetch(struct rl *rl, const char *ns, double time, double timeout_s);

#endif /* SYNCNOW_H */
