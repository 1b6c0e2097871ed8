/*
 * peernode.h - a HAProxy node the tests play against the agent's peers
 * front (docs/PEERS.md), with the peers codec (agent/peers_wire.h): a
 * socket to the agent's peers listener, what came back kept whole, the
 * hello, the resync both ways as HAProxy does it (the agent's request
 * answered with a dump of the node's tables and entries), definitions,
 * updates of an ip table's http_req_rate, and the agent's pushes and
 * acknowledgements read back. For tests/test_peers_front.c (one agent)
 * and tests/test_peers_store.c (agents on a store); real HAProxy nodes are
 * tests/e2e/peers_*.sh's.
 *
 * Calls Criterion's assertions: for test binaries only.
 */
#ifndef PEERNODE_H
#define PEERNODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/peers_wire.h"

#define PN_FAR_MS 10000         /* a failure bound: nothing here takes a second */

/* A node: its socket to the agent and what it read. */
struct pn_node {
	int fd;
	uint8_t in[1 << 17];
	size_t len;
	bool closed;
};

/* Connects to the agent's peers listener on 127.0.0.1:port (asserted). */
void pn_open(struct pn_node *n, int port);
void pn_close(struct pn_node *n);
void pn_send(struct pn_node *n, const void *p, size_t len);

/* Reads what comes within wait_ms into n->in. false: nothing came (or
 * the agent closed: n->closed). */
bool pn_read(struct pn_node *n, int wait_ms);

/* The status line answering the hello (asserted to come). */
unsigned pn_status(struct pn_node *n);

/* The next message of a kind among `want` (a bit per kind: PN_K), the
 * kinds not wanted skipped; copied to m (its payload into buf, a
 * PEERS_WIRE_MSG_MAX buffer). false when none comes within wait_ms. */
#define PN_K(kind) (1u << PEERS_WIRE_MSG_##kind)
bool pn_next(struct pn_node *n, uint32_t want, int wait_ms, struct peers_wire_msg *m,
	     uint8_t *buf);

/* Line 1 to 3 of a hello: calls callee, as caller. */
void pn_hello(struct pn_node *n, const char *callee, const char *caller);

/* A table of a node: id, its wire name ("/t"), ip keys, http_req_rate
 * over period ms, expire 60 s. */
struct peers_wire_table pn_table(uint64_t id, const char *name, uint32_t period);

void pn_define(struct pn_node *n, const struct peers_wire_table *t);
void pn_ctrl(struct pn_node *n, enum peers_wire_msg_kind kind);

/* An update of t: update id id, key ip, the rate (age, curr, prev); timed
 * (0x85, as in a dump, expire 60 s) or not (0x80). */
void pn_update(struct pn_node *n, const struct peers_wire_table *t, uint32_t id,
	       const uint8_t ip[4], uint64_t age, uint64_t curr, uint64_t prev, bool timed);

/* A node up, as HAProxy comes up on a session: hello as caller to "agg",
 * 200 and the agent's resync request, ours answered at once (00 01: the
 * agent knows no into table yet), then its dump: the DEFINEs of into and
 * from (from last: the updates that follow are its), then what the caller
 * sends (pn_update(..., true)) until pn_up_end(): 00 01, confirmed (00
 * 03), then the agent's DEFINE of into (asserted: its name, ip keys,
 * http_req_rate). */
void pn_up_begin(struct pn_node *n, int port, const char *caller,
		 const struct peers_wire_table *from, const struct peers_wire_table *into);
void pn_up_end(struct pn_node *n, const struct peers_wire_table *into);

/* The next push of the into table (asserted to come within wait_ms, for
 * the key ip when ip is not NULL: pushes of other keys skipped): its
 * rate's (age, curr, prev). */
struct peers_wire_freq pn_pushed(struct pn_node *n, const struct peers_wire_table *into,
				 const uint8_t ip[4], int wait_ms);

/* The next ACK (asserted): its table id and update id. */
void pn_acked(struct pn_node *n, uint64_t table_id, uint32_t id);

#endif /* PEERNODE_H */
