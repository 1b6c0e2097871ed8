/*
 * peers_int.h - what the peers front's files share (nothing else
 * includes it): HAProxy nodes' sessions (agent/peers_front.c: the hello,
 * the messages, the tables a node defines, its updates counted through
 * agent/peers_count.h, acknowledgements, heartbeats) and the pushes of
 * the sums (agent/peers_push.c: the worker's walk over the peers
 * namespaces' windows every peers.push_ms, what changed since, written to
 * each session; the whole table to a session that starts or asks).
 * docs/PEERS.md tells the protocol and the design.
 *
 * A session's states (rule 9, docs/STYLE.md):
 *
 *   HELLO --3 lines: 200 + 00 00--> UP --error, EOF, a node's error--> CLOSING
 *     \--a bad hello: its status (501..504), frame_timeout_ms-----------^
 *
 * In UP, what flows: the node's 00 00 (it wants the sums: answered with
 * DEFINEs of the into tables, every sum, 00 01), its dump for our 00 00
 * (its DEFINEs, every entry, 00 01 / 00 02: confirmed with 00 03), its
 * DEFINEs and updates (counted, acknowledged), heartbeats both ways; our
 * pushes once the node's into table is known (from its dump).
 */
#ifndef PEERS_INT_H
#define PEERS_INT_H

#include <ev.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/config.h"
#include "agent/log.h"
#include "agent/peers_count.h"
#include "agent/peers_wire.h"
#include "agent/stream.h"

#define PEERS_BINDS_MAX   32          /* tables a node may define at once on a session */
#define PEERS_FEEDS_MAX   8           /* namespaces counting one table */
#define PEERS_NODE_MAX    64          /* a node's name, with the NUL */
#define PEERS_RBUF_HELLO  2048        /* the read buffer until the hello is in */
#define PEERS_RBUF        (PEERS_WIRE_MSG_MAX + 16)  /* a whole message and its header */
#define PEERS_WBUF        16384       /* the write buffer, to start with */
#define PEERS_WBUF_MAX    (1u << 20)  /* pushes a session holds unsent; more: behind */
#define PEERS_MSG_ROOM    1024        /* room kept for control messages and acks */
#define PEERS_HEARTBEAT   2.0         /* seconds without output before 00 04 (HAProxy
                                         closes after 5 s of silence) */
#define PEERS_LEARN_MAX   3.0         /* seconds a node's dump may take before the
                                         sums are pushed without it */
#define PEERS_CLOSE_GRACE 1.0         /* seconds to flush a last status or error */
#define PEERS_PACE_UPDATES 64         /* a read of fewer while a node trickles: a
                                         pause in reading (peers_front.c) */

enum peers_sess_state {
	PEERS_HELLO = 0,
	PEERS_UP,
	PEERS_CLOSING,
	PEERS_STATE_COUNT
};

/* A table id of the node, bound by its DEFINE (or left unbound: a table
 * none of our namespaces names; its updates are skipped, never acked). */
struct peers_bind {
	uint64_t id;                        /* the node's number for it */
	bool used;
	char name[NS_TABLE_NAME_MAX];
	struct peers_wire_table def;        /* def.name points at name */
	struct peers_what feeds[PEERS_FEEDS_MAX]; /* the namespaces that count it */
	size_t nfeeds;
	uint32_t last_id;                   /* the last update id received */
	uint32_t acked;                     /* the last one acknowledged */
	bool has_last, ack_due;
	bool ack_stop;                      /* an update was not kept: no more acks on
	                                       this session (the node resends from the
	                                       last one acked when it comes back) */
	/* nfeeds 0: a table a namespace names whose definition was refused
	 * (its updates skipped, never acked, counted as refused) */
};

/* A namespace's into table on a session: the node's definition (its
 * dump) and ours, sent before our first update. */
struct peers_into {
	bool known;                         /* the node defined it */
	uint64_t node_id;                   /* ... with this id (its dump of our sums
	                                       follows it: not counted, not refused) */
	bool defined;                       /* our DEFINE went out on this session */
	char name[NS_TABLE_NAME_MAX];
	struct peers_wire_table def;        /* ours: the node's name, key type and length,
	                                       expire; our data type and period */
};

struct peers_worker;

/* A node's session: the front `peers_front` (agent/stream.h) opens them. */
struct peers_sess {
	struct stream s;                    /* first: socket, watchers, buffers */
	struct peers_worker *pw;
	struct peers_sess *prev, *next;     /* the worker's sessions */
	enum peers_sess_state state;
	char node[PEERS_NODE_MAX];
	size_t nlen;
	struct peers_bind binds[PEERS_BINDS_MAX];
	struct peers_bind *cur;             /* the table of the updates that follow */
	bool cur_into;                      /* ... none: an into table (what the node
	                                       learned of our sums, in its dump) */
	bool up_counted;                    /* in the worker's peers_nodes gauge */
	struct peers_into into[NS_MAX];     /* by namespace (library index) */
	bool node_asked;                    /* the node's 00 00 waits for our 00 01 */
	bool learning;                      /* our 00 00 sent, the node's dump not over */
	bool teaching;                      /* every sum being pushed (cursor) */
	bool behind;                        /* a push found no room: teach again */
	uint32_t cursor;                    /* the next slot a teaching pushes */
	uint32_t push_id;                   /* our last update id */
	uint64_t out_table;                 /* the id of the table our updates go to (the
	                                       last DEFINE or SWITCH sent; 0: none) */
	double asked_at;                    /* when we sent our 00 00 */
	double last_tx;                     /* ev_now() of the last bytes queued */
	double acked_at;                    /* ev_now() of the last acks queued */
	double read_at;                     /* ev_now() of the last read */
	double paused_until;                /* reads paced: none before (0: reading) */
	double fresh_since;                 /* the node_keys budget's window */
	uint32_t fresh;                     /* new keys counted in it */
	uint64_t counted, updates;          /* for the log when it closes */
	struct peers_wire_update upd;       /* decoded updates (reused) */
};

/* A key this worker counted, pushed at the end of the read that counted
 * it when the worker pushed none at once within push_ms (else, and the
 * others' keys, at the walk: peers_push_read()). */
#define PEERS_DIRTY_MAX   1024
struct peers_dirty {
	int ns;
	size_t klen;
	char key[PEERS_COUNT_KEY_MAX];
};

/* The front's state of a worker (front_env.state[FRONT_PEERS]). */
struct peers_seen;
struct peers_worker {
	struct front_env *env;
	struct peers_sess *sessions;
	ev_timer tick;                      /* every peers.push_ms */
	uint64_t nsmask;                    /* namespaces with haproxy_tables */
	uint64_t syncs;                     /* ... of them that sync (sync_rate > 0) */
	double started;                     /* when the worker started (rl_now) */
	double baseline_until[NS_MAX];      /* a dump's new keys taken as counted until
	                                       then: a syncing namespace on a table made
	                                       afresh, its first two windows */
	uint32_t windows[NS_MAX];           /* their window */
	unsigned sid[NS_MAX];               /* their index in the table (metrics) */
	uint64_t nup;                       /* sessions up (the peers_nodes gauge) */
	uint32_t longest;                   /* the longest: the node_keys budget's */
	struct peers_what what[NS_MAX];     /* what each pushes (its data type once known) */
	bool what_known[NS_MAX];
	struct peers_seen *seen, *next;     /* the last walk, and the one being made */
	size_t nseen, nnext, cap;
	struct peers_wire_update upd;       /* pushes (reused) */
	struct peers_dirty *dirty;          /* keys counted here since the last push */
	size_t ndirty;
	double pushed_at;                   /* rl_now() of the last keys pushed at once */
	struct log_limit err_log, info_log;
};

/* ---- peers_push.c, for peers_front.c (which calls it, never the
 * reverse: docs/STYLE.md, rule 13) ---- */

/* Queues n bytes a writer made at the end of the write buffer, as sent at
 * ev_now: heartbeats count from it. */
void peers_sess_queued(struct peers_sess *ps, size_t n);

/* Room for `need` more bytes of output (the buffer grown within
 * PEERS_WBUF_MAX and the budgets): true, or false (nothing changed). */
bool peers_sess_room(struct peers_sess *ps, size_t need);

/* The worker's pushes: starts the tick (0, or -1 out of memory), stops it
 * and frees the walks. */
int peers_push_start(struct peers_worker *pw);
void peers_push_stop(struct peers_worker *pw);

/* Pushes more of a teaching session's sums (from its cursor) while its
 * buffer has room; at the end, the node's 00 00 gets its 00 01. */
void peers_push_teach(struct peers_sess *ps);

/* The node's dump has defined ns's into table: our DEFINE of it (once per
 * session). Returns false when the buffer has no room. */
bool peers_push_define(struct peers_sess *ps, int ns);

/* A session starts teaching: every sum, from the first slot. */
void peers_push_begin(struct peers_sess *ps);

/* Key[0..klen) of ns was counted here: pushed by peers_push_read() (the
 * walk pushes it when the list is full or the push is held). */
void peers_push_note(struct peers_worker *pw, int ns, const char *key, size_t klen);

/* What a read of session ps brought goes back: its acks, at once when
 * the session sent none within peers.push_ms, and the keys noted to every
 * session of the worker, at once when the worker pushed none at once
 * within peers.push_ms; else both at the next walk. */
void peers_push_read(struct peers_sess *ps);

#endif /* PEERS_INT_H */
