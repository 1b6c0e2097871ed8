/*
 * peers_count.h - HAProxy nodes' stick-table counts, counted in the
 * shared table (docs/PEERS.md, "Counting"): the peers front hands every
 * node's state of a key here; what is new in it since the state last
 * counted for that node and key is added to the key's window, the hits of
 * the namespace as any front counts them (rl_hit), where every worker and
 * the sync see them. And back: the key's windows as the pushes read them,
 * the table's windows of the peers namespaces slot by slot.
 *
 * An update carries a node's absolute state (a frequency counter's age,
 * curr, prev; a counter's value), never an increment. What of it has been
 * counted is the node's part, kept in the shared table too (records,
 * below), so that a state counted once is never counted again: sent twice,
 * resent after a reconnect (to any worker), after the agent restarted on
 * its state file, in a dump. A record is a slot of the namespace's window
 * index under a key no client can name ('#' '@' and 16 bytes of SipHash of
 * the node's name, the data type and the key: a stored key starting with
 * '#' is otherwise always '#' and hex):
 *
 *   rate:    one slot per node period: start = the period's second + 1,
 *            count = events of the period counted + (ms % 1000) / 1024
 *            (the period's start to the millisecond, exact in a double);
 *            stale (reclaimed) 2 windows after the period began.
 *   counter: one slot per window bucket: start = bucket + 1 (never a
 *            window's start: the sync takes it for no window), count = the
 *            value counted; moved on at each update, stale 2 windows after.
 *
 * Records are protected from eviction (shm_protect) until stale. Lock-free
 * as the table is; a node's states are counted by the one session it has
 * (two sessions of one node at once, a moment during a reconnect, may
 * count an update twice). Nothing here allocates.
 */
#ifndef PEERS_COUNT_H
#define PEERS_COUNT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rl;

#define PEERS_COUNT_KEY_MAX 104          /* a key's text (RL_STORED_KEY_MAX) */

/* What a namespace counts of a table: its index in the library, its one
 * window (seconds: a rate's period, or how long a counter's increases
 * count), the data type (agent/peers_wire.h) and element of an array. */
struct peers_what {
	int ns;
	uint32_t window;
	unsigned dt, idx;
	bool rate;                       /* a frequency counter, else a counter */
};

/* One node's state of a key: (age, curr, prev) for a rate, value for a
 * counter; timed: from a dump, expire ms left of the node's entry. */
struct peers_state {
	uint64_t age, curr, prev;
	uint64_t value;
	bool known_only;                 /* count only a key the node has a record of
	                                    (its session is at its bound of new keys) */
	bool baseline;                   /* a key the node has no record of: taken as
	                                    counted already (its record made, nothing
	                                    counted): a dump to an agent restarted
	                                    afresh on a store (docs/PEERS.md) */
};

/* What peers_count() did. */
struct peers_count_res {
	double counted;                  /* hits added to the key's window */
	bool stale;                      /* the state weighs nothing any more (age >= 2 periods) */
	bool reset;                      /* the node counts afresh (its count went down) */
	bool fresh;                      /* the node had no record of the key */
	bool refused;                    /* fresh, and known_only: nothing counted */
	uint32_t made;                   /* the key's window slot when these hits made
	                                    it (this agent's first sight of the window:
	                                    a syncing namespace reads the store's
	                                    count), else UINT32_MAX */
};

/* Counts node's state st of key[0..klen) (its text: peers_count_key())
 * at now (Unix seconds): what it holds beyond what was counted for this
 * node, key and data type goes to the key's current window (rl_hit), and
 * the node's record follows. A rate's period is w->window. Returns 0, or
 * -1 when the table had no room for the hits or the record: nothing is
 * counted then (the caller does not acknowledge the update). */
int peers_count(struct rl *rl, const struct peers_what *w, const char *node, size_t nlen,
		const char *key, size_t klen, const struct peers_state *st, double now,
		struct peers_count_res *out);

/* A key's windows as a push gives them to a node (docs/PEERS.md,
 * "Pushing the sums"): hits of the current window (cur; its grant left
 * out), of the previous one (prev), and the ms elapsed of the current
 * window (elapsed: the age of the node's period). */
struct peers_sum {
	double cur, prev;
	uint32_t elapsed;
	int64_t start;
};

/* The windows of key[0..klen) of w's namespace at now. Returns 0 or -1
 * (rl_errno()). */
int peers_count_sum(struct rl *rl, const struct peers_what *w, const char *key, size_t klen,
		    double now, struct peers_sum *out);

/* A slot of a peers namespace's window that a push may read: a key's
 * current or previous window (records left out). */
struct peers_slot {
	uint32_t idx;
	uint64_t meta;                   /* the slot's identity while it holds this window */
	int ns;                          /* library index */
	int64_t start;
	double count;
	size_t klen;
	char key[PEERS_COUNT_KEY_MAX + 1];
};

/* A walk over the table's slots in index order (the pushes' scan). */
#define PEERS_COUNT_NS_MAX 32           /* the table's namespaces (SHM_MAX_NS) */
struct peers_scan {
	uint32_t next;                   /* the slot to look at next */
	uint32_t sids;                   /* the table's namespaces walked, a bit each */
	int ns_of[PEERS_COUNT_NS_MAX];   /* by the table's index: the library's */
	unsigned win_of[PEERS_COUNT_NS_MAX];
	int64_t cur[PEERS_COUNT_NS_MAX]; /* the current window's start */
	uint32_t size[PEERS_COUNT_NS_MAX];
};

/* Starts a walk over the windows of the namespaces whose bit is set in
 * nsmask (library indexes), each in its window windows[ns], at now. */
void peers_count_scan(struct rl *rl, uint64_t nsmask, const uint32_t *windows, double now,
		      struct peers_scan *sc);

/* The next slot holding the current or previous window of a key of a
 * walked namespace: 0 with *out filled, or -1 when none is left. Reads
 * what the table holds, without a lock (a slot changing meanwhile is
 * skipped). */
int peers_count_next(struct rl *rl, struct peers_scan *sc, struct peers_slot *out);

/* ---- keys ----
 *
 * A key's text, the form it is counted under (as SPOP's and HTTP's keys
 * are: an address "192.0.2.1" / "2001:db8::1", an integer "42", a string
 * as it is, binary as lowercase hex), and back to the bytes of a table of
 * another key type. A string starting with '#' or '\' is stored behind
 * a '\' (a '#' first means a digest). Key types are peers_wire's. */

/* Text of the key bytes p[0..len) of key type kt into out
 * (PEERS_COUNT_KEY_MAX bytes). Returns its length, or 0 when it does not
 * fit (longer strings and binary keys than a text of 104 bytes). */
size_t peers_count_key(unsigned kt, const uint8_t *p, size_t len, char *out);

/* The bytes of text[0..tlen) as a key of type kt and key length klen
 * (a table's), into out (at least 104 bytes; klen for binary). Returns
 * their length, or 0 when the text is no such key (an address into an
 * integer table...); *integer gets an integer key's value. */
size_t peers_count_key_bytes(unsigned kt, uint32_t klen, const char *text, size_t tlen,
			     uint8_t *out, uint32_t *integer);

#endif /* PEERS_COUNT_H */
