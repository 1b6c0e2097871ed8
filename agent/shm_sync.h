/*
 * shm_sync.h - the sync words of the shared counter table (agent/shm.h):
 * what the sync (agent/sync*.c) and the library's exact decisions
 * (agent/ratelimit.c) read and write besides counting, in the words of
 * docs/CLUSTER.md, "Words". Per slot, the diff on its way to the store
 * (acknowledged once the store confirms it) and the store's total written
 * back; per slot, the grant the store reserved for this node
 * (docs/CLUSTER.md, "Exact at the limit"); per namespace, the lease (one
 * worker per node runs a sync cycle), the heartbeat's turn and the count
 * of nodes; and the slots as the sync reads them. The words live in the
 * segment shm.h lays out; the table proper (mapping, lookup, insert,
 * eviction, counting) stays in shm.h and the files its banner lists,
 * which never call in here.
 *
 * The sync reaches the table through this header only (make check: no
 * sync file includes agent/shm.h, no sync object calls a function of the
 * table's other files).
 *
 * Same rules as the table's: lock-free, no allocation, no syscall, no
 * wait; every word is a C11 atomic, a double kept as its bits.
 */
#ifndef SHM_SYNC_H
#define SHM_SYNC_H

#include <stdbool.h>
#include <stdint.h>

/* For its types and constants only (struct shm_entry, the copy of a slot
 * the sync works on, with struct shm_table, struct shm_ref, SHM_NONE,
 * SHM_MAX_NS): they are the table's and defined there; the sync calls
 * none of shm.h's functions (make check reads the objects). */
#include "agent/shm.h"

/* ---- slots, as the sync reads them ---- */

/* The first slot at index from or after it that was ever written;
 * SHM_NONE past the last. A sync cycle walks the table with it, so a
 * cycle costs what the node has used, not what the table could hold. */
uint32_t shm_sync_next(const struct shm_table *t, uint32_t from);

/* Copies slot idx (key, namespace, window, count, diff, grant hits spent
 * and returned not pushed yet) into *e. Returns 0, or -1 when the slot
 * holds no window (free, being written, or idx out of the table). */
int shm_sync_read(const struct shm_table *t, uint32_t idx, struct shm_entry *e);

/* ---- diffs and totals ---- */

/* Atomically takes the diff of e's slot (sets it to 0) and returns it;
 * 0 if the slot no longer holds e's window. A concurrent increment is
 * either in the returned value or stays in diff. */
double shm_take_diff(struct shm_table *t, const struct shm_entry *e);

/* Puts back a diff that could not be pushed. Returns 0, or -1 if the slot
 * no longer holds e's window (it was stale and got reclaimed: the diff may
 * then be lost, so restore diffs of current and previous windows only). */
int shm_restore_diff(struct shm_table *t, const struct shm_entry *e, double d);

/* Writes back the cluster total of e's window after its diff was pushed:
 * count = max(count, total + diff now), so the visible count never drops
 * and local hits since the push are kept. Returns 0, or -1 if the slot no
 * longer holds e's window. Meant for current and previous windows (a stale
 * window may be reclaimed between the check and the write). */
int shm_sync_total(struct shm_table *t, const struct shm_entry *e, double total);

/* The same for a total read from a window the store reset (a key of it
 * was forgotten: strategy_counter.reset): count = total + diff now +
 * what the store holds for this node's view, even when that is lower
 * (docs/CLUSTER.md, "Forgetting a key"). A total that raced a newer one
 * may lower the count by what the store counted meanwhile, until the
 * next read. */
int shm_follow_total(struct shm_table *t, const struct shm_entry *e, double total);

/* Forgets a found slot of a namespace that syncs: its diff, what is left
 * of its grant, the grant hits spent and the grants returned not pushed
 * yet go to 0, then its count and protection (shm_forget). Returns the
 * hits the count held (what is left of a grant is not hits). A push of
 * these words in flight meanwhile is acknowledged later down to 0, no
 * lower (shm_ack_diff, shm_grant_unres_add): hits counted after the
 * forget may lose up to what that push carried, which the store counts
 * if it applies the push after the forget. */
double shm_sync_forget(struct shm_table *t, const struct shm_ref *r);

/* Acknowledges that d of e's diff reached the store: diff -= d, stopping
 * at 0 (a residue from float rounding, or a diff that went down during
 * the push: a forget, a hit taken back). Unlike shm_take_diff, the diff
 * stays in the slot while it is being pushed, so a push that fails needs no
 * restore and a stale slot cannot be reclaimed before its diff is in the
 * store. Returns 0, or -1 if the slot no longer holds e's window. */
int shm_ack_diff(struct shm_table *t, const struct shm_entry *e, double d);

/* ---- sync leases ---- */

/* Sync lease of namespace ns (one worker per node syncs it per cycle).
 * Tries to take it for holder (>= 1) until now_ms + hold_ms: succeeds when
 * it is free and due (now_ms >= its until_ms) or held past its expiry (a
 * dead holder). Returns true if taken. */
bool shm_lease_take(struct shm_table *t, unsigned ns, uint16_t holder, uint64_t now_ms,
		    uint64_t hold_ms);

/* Extends the lease while holder still has it; false if it was lost. */
bool shm_lease_renew(struct shm_table *t, unsigned ns, uint16_t holder, uint64_t now_ms,
		     uint64_t hold_ms);

/* Frees the lease (if holder has it); the next cycle is due at due_ms. */
void shm_lease_release(struct shm_table *t, unsigned ns, uint16_t holder, uint64_t due_ms);

/* ---- nodes and heartbeats ---- */

/* The active nodes of namespace ns, as the store last counted them (0:
 * not known yet). */
void shm_set_nodes(struct shm_table *t, unsigned ns, uint32_t n);
uint32_t shm_nodes(const struct shm_table *t, unsigned ns);

/* Namespace ns's heartbeat is due if none was sent for gap_ms: takes the
 * turn (one compare-and-swap; true: the caller sends it). Every worker's
 * timer asks; one of them beats per period. */
bool shm_beat_take(struct shm_table *t, unsigned ns, uint64_t now_ms, uint64_t gap_ms);

/* ---- grants ---- */

/* Grants (docs/CLUSTER.md, "Exact at the limit"): part of a limit's
 * headroom that the store has reserved for this node's coming hits on a
 * window, apart from the window's count of hits. The slot's count holds
 * the grant as well (the node's view is count - what is left of it):
 * hits spend it locally, with no diff (the store decided them already),
 * and are "spent": a later push moves them in the store from the
 * reservation to the count (strategy_counter.spent). What is left of a
 * grant unused for a cycle is "returned" with the next push (taken from
 * the reservation, and from the slot's count). Per slot: what is left,
 * the demand of the last sync cycle (hits that spent a grant or went to
 * the store) and of this one, whether a grant is being asked for, what is
 * spent and returned not pushed yet. Cleared when the slot is re-keyed; a
 * slot holding any of the last three is never evicted. Every count the
 * store sends (shm_sync_total) is hits: the slot's count is that plus its
 * diff plus what the store still holds reserved for this node's view
 * (left + spent). */

/* Spends cost from the slot's grant if it covers it (one CAS), notes the
 * demand and the hit spent. false: the store must decide. */
bool shm_grant_take(struct shm_table *t, const struct shm_ref *r, double cost);

/* Gives cost back to the slot's grant (a hit shm_grant_take admitted
 * that its decision then denied). */
void shm_grant_untake(struct shm_table *t, const struct shm_ref *r, double cost);

/* Notes a hit of the slot that went to the store (demand). */
void shm_grant_note(struct shm_table *t, const struct shm_ref *r, double cost);

/* What is left of slot idx's grant, and what of it was spent and not
 * reported to the store yet. */
double shm_grant_left(const struct shm_table *t, uint32_t idx);
double shm_grant_spent(const struct shm_table *t, uint32_t idx);

/* Adds a grant the store reserved to a found slot (to what is left, and
 * to its count). */
void shm_grant_add(struct shm_table *t, const struct shm_ref *r, double amount);

/* Adds spent and returned to what slot e (while it holds e's window) has
 * spent and returned not pushed yet: a grant given back (returned +), what
 * a push confirmed (both -). */
void shm_grant_unres_add(struct shm_table *t, const struct shm_entry *e, double spent,
			 double returned);

/* Takes back what is left of slot idx's grant (sets it to 0). */
double shm_grant_return(struct shm_table *t, uint32_t idx);

/* A grant is asked for slot idx: returns the demand of the last cycle
 * (>= 0), or -1 when one is being asked for already. shm_grant_end() when
 * the answer is in (or lost). */
double shm_grant_begin(struct shm_table *t, uint32_t idx);
void shm_grant_end(struct shm_table *t, uint32_t idx);

/* A sync cycle: this cycle's demand becomes the last one (returned). */
double shm_grant_cycle(struct shm_table *t, uint32_t idx);

/* Admissions of slot idx this node has sent to the store and not applied
 * yet: shm_grant_flight adds delta (+1 sent, -1 applied) and returns the
 * count after. A grant is asked only by an admission alone in flight: the
 * others of a burst were sent before the grant could serve them. */
int64_t shm_grant_flight(struct shm_table *t, uint32_t idx, int64_t delta);

/* Has slot idx a grant left, demand this cycle, or grant hits spent or
 * returned not pushed yet? */
bool shm_grant_any(const struct shm_table *t, uint32_t idx);

/* A sync cycle's turn of slot e (read by shm_sync_read, with a grant or
 * demand: shm_grant_any): this cycle's demand becomes the last one, and
 * what is left of a grant that saw no hit for the whole cycle (all: of
 * any grant, the final flush) is given back: taken out of the slot's
 * count and noted returned, for the push to take from the store's
 * reservation. A grant in use is kept: given back while hits still come,
 * its room could be taken by hits denied (and counted) meanwhile. e's
 * count and ret follow, so that the cycle pushes what it gave back.
 * Returns what was given back (0: nothing). */
double shm_grant_give_back(struct shm_table *t, struct shm_entry *e, bool all);

#endif /* SHM_SYNC_H */
