/*
 * reserve.h - costs known after the response (docs/PROTOCOL.md, "Costs
 * known after the response"): a hit of a window namespace with `reserve`
 * counts its cost as an estimate and answers a reservation; a settle with
 * the actual cost replaces the estimate by the actual in every window the
 * hit counted in, once; a charge counts a cost after the fact, never
 * denied (Envoy's apply_on_stream_done).
 *
 * A reservation is its own proof: it carries what it names (the namespace,
 * the stored key, each window's size and start, when it was counted, the
 * estimate) and a MAC of it (SipHash-2-4 under the table's digest key, with
 * the namespace's name), so that any node with the same key_secret can
 * settle it and a forged one does nothing. A settle applies the difference
 * actual - estimate (either sign) to each window's slot as this node's
 * diff: a namespace that syncs pushes it under a token like any hit, to
 * the store's row of the window the hit was counted in (a sliding window
 * that has rolled meanwhile included). Once: a settle first marks the
 * reservation done in the table (rl_mark_once) until it may no longer be
 * settled; the one that finds the mark does nothing. Across a cluster,
 * once too: a namespace that syncs claims the reservation in its store
 * (sync_settle_claim), and only the node whose claim the store took
 * first applies it (docs/CLUSTER.md, "Reservations"). An unsettled
 * reservation keeps its estimate: a settle after settle_ms (or two of its
 * largest window's sizes after the hit, when its windows count for no
 * rate any more) does nothing. A mark takes a slot of the table for at
 * most that long (not for its window's life).
 */
#ifndef RESERVE_H
#define RESERVE_H

#include <stdbool.h>
#include <stddef.h>

#include "agent/decide.h"

/* A reservation as text: lowercase hex of
 *
 *   +----+----+-------+--------+----+---------------+------+-----+-----+
 *   | 1  | ns | at:6  | est:8  | nw | size:4 start:4| klen | key | MAC |
 *   +----+----+-------+--------+----+---------------+------+-----+-----+
 *     version, the namespace's index, when it was counted (Unix ms),
 *     the estimate (a double's bits), nw windows (size and start, Unix
 *     seconds), the stored key, the MAC (8 bytes); integers big-endian.
 */
#define RESERVE_BYTES_MAX (17 + 8 * NS_MAX_WINDOWS + 1 + RL_STORED_KEY_MAX + 8)
#define RESERVE_TEXT_MAX  (2 * RESERVE_BYTES_MAX)

/* The reservation of request req among parts[0..np) of a decision (its
 * parts counted as a reservation: rl_decision.reserve), into out
 * (RESERVE_TEXT_MAX + 1 bytes, NUL-terminated). req RESERVE_PLAIN: the
 * decision's plain one, of its first reserved request and of every other
 * with the same namespace, key and estimate (the messages of one NOTIFY
 * for a minute and a day: one settle replaces the estimate in all of
 * their windows). Returns its length, 0 when the request holds none (not
 * asked, denied, an error). */
#define RESERVE_PLAIN ((size_t)-1)
size_t reserve_text(struct rl *rl, const struct rl_decision *parts, size_t np, size_t req,
		    char *out);

/* Settles the reservation id[0..len) at the actual cost (>= 0, <=
 * DECIDE_COST_MAX) at now. Returns 1 when it was applied (a namespace that
 * syncs: taken, and applied once the store says this node's claim came
 * first), 0 when nothing was (settled already on this node, expired,
 * forged, not a reservation: no error), -1 with *error (a static string)
 * when cost is out of range. Counted in settles_total. */
int reserve_settle(struct decide *d, const char *id, size_t len, double cost, double now,
		   const char **error);

/* Charges rq's cost after the fact on its namespace and key: counted now
 * in its window (none named: every window with a configured limit, or
 * every window when none has one), never denied. Returns 1, or -1 with
 * *error (a static string: an unknown namespace or window, a missing key,
 * not a window namespace, no room). */
int reserve_charge(struct decide *d, const struct rl_request *rq, double now, const char **error);

#endif /* RESERVE_H */
