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
 */
#ifndef SYNC_H
#define SYNC_H

#include <ev.h>
#include <stdbool.h>
#include <stdint.h>

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

/* sync_rate 0: pushes counters of one namespace now. Returns 0 (cb runs
 * once, later) or -1 when the store is down or refused (cb never runs).
 * While the store is connecting (a worker's first connection, or a
 * reconnect attempt) the push waits for it, polled every 2 ms: the attempt
 * ends within the store's timeout_ms, then the push is sent or fails. */
int sync_push_now(struct sync *s, unsigned ns, struct strategy_counter *c, size_t n,
		  strategy_done_cb cb, void *arg);

/* Is a cycle waiting for its store? (A stopping worker waits for it.) */
bool sync_busy(const struct sync *s);

/* Stops the timers and frees everything (pending pushes are failed; their
 * diffs stay in the table). NULL is fine. */
void sync_stop(struct sync *s);

/* Pushes every pending diff of every syncing namespace, waiting at most
 * timeout_s. Returns the number of counters whose diff could not be
 * pushed (0 = all flushed). */
size_t sync_flush(struct rl *rl, double timeout_s);

#endif /* SYNC_H */
