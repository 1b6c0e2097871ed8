/*
 * resp_peer.h - a hostile peer for store tests: a TCP listener on a free
 * loopback port, served on the test's libev loop, speaking just enough
 * RESP to pose as a server the agent must not trust (a rogue sentinel, the
 * fake master it names, a cluster node with an absurd CLUSTER SLOTS
 * reply). It is the attacker of a test, not a stand-in for Redis: the
 * Redis servers of the tests are real (redis_server.h).
 *
 * Every byte received is kept (up to RESP_PEER_SEEN_MAX), to assert on
 * what the agent sent it; each command (an array of bulk strings, as
 * hiredis sends them) is answered with the RESP text the test's answer
 * function returns. resp_peer_send_all() pushes text to every open
 * connection (a pub/sub message).
 */
#ifndef RESP_PEER_H
#define RESP_PEER_H

#include <ev.h>
#include <stdbool.h>
#include <stddef.h>

#define RESP_PEER_CONNS    16           /* open at once; more are closed */
#define RESP_PEER_ARGS     8            /* arguments of a command passed on */
#define RESP_PEER_SEEN_MAX (1 << 20)

struct resp_peer;

/* The answer to one command: argv[0 .. argc-1] (NUL-terminated copies, at
 * most RESP_PEER_ARGS of them). Returns RESP text of *len bytes, valid
 * until the next call (static, or kept by the test), or NULL: no answer. */
typedef const char *resp_peer_answer_fn(struct resp_peer *p, int argc, char **argv,
					size_t *len);

struct resp_peer_conn {
	struct resp_peer *p;
	int fd;                         /* -1: a free slot */
	ev_io io;
	char *in;                       /* received, not yet a whole command */
	size_t inlen, incap;
	char *out;                      /* to send */
	size_t outlen, outoff, outcap;
};

struct resp_peer {
	struct ev_loop *loop;
	int fd;                         /* the listener; -1 when stopped */
	int port;
	ev_io accept_io;
	resp_peer_answer_fn *answer;
	void *arg;                      /* the test's */
	unsigned connections;           /* accepted so far */
	unsigned commands;              /* answered (or not) so far */
	char *seen;                     /* every byte received, in order */
	size_t seen_len;
	struct resp_peer_conn conn[RESP_PEER_CONNS];
	char err[256];
};

/* Listens on 127.0.0.1:<free port> (p->port). Returns 0, or -1 with
 * p->err. */
int resp_peer_start(struct resp_peer *p, struct ev_loop *loop, resp_peer_answer_fn *answer,
		    void *arg);
/* Closes the listener and every connection. Safe to call twice. */
void resp_peer_stop(struct resp_peer *p);

/* Did it receive these bytes (anywhere in what it received)? */
bool resp_peer_saw(const struct resp_peer *p, const char *needle);

/* Queues text on every open connection. Returns how many got it. */
int resp_peer_send_all(struct resp_peer *p, const char *text, size_t len);

#endif /* RESP_PEER_H */
