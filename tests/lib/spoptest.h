/*
 * spoptest.h - HAProxy's side of an SPOP connection, for the tests that
 * talk to an agent over SPOP (test_proto_*.c, test_cluster_*.c,
 * test_http*.c, test_admin.c, test_balance.c): a layer over the test
 * client tests/lib/rawspop.h (written apart from the agent's codec), once
 * for every test file:
 *   - connect and HELLO, the AGENT-HELLO checked against docs/PROTOCOL.md;
 *   - a NOTIFY of rate-limit messages (struct sp_msg) built, sent, and its
 *     ACK read and checked: ids echoed, every variable set-var in the
 *     expected scope with its documented type;
 *   - the variables looked up (rate, exceeded, error...);
 *   - an AGENT-DISCONNECT expected with its status, then the close;
 *   - the test agent (tests/lib/agenttest.h) still serving with the same
 *     workers after something hostile.
 *
 * Two kinds of calls: sp_* fail the test on anything unexpected (Criterion
 * assertions, with the frame's bytes in the message); sp_try_* return -1
 * with the reason in sp_err, for a caller that words the failure itself
 * (which node, which hit) or counts it.
 *
 * The frame being built (sp_wb) and the last frame read (sp_fr) are the
 * test process's (Criterion runs each test in a process of its own).
 * Calls Criterion's assertions: for test binaries only.
 */
#ifndef SPOPTEST_H
#define SPOPTEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tests/lib/rawspop.h"

#define SP_IO_MS    3000      /* waiting for an answer (sanitized agent) */
#define SP_CLOSE_MS 3000      /* waiting for a close after a DISCONNECT */

/* The frames a test builds, and the last frame read by the sp_ calls
 * that read one. */
extern struct rawspop_buf sp_wb;
extern struct rawspop_frame sp_fr;
/* The scope every set-var of an ACK must have (TXN; a test of var_scope
 * sets it). */
extern uint8_t sp_scope;
/* The ids sp_notify_n and sp_try_send give their NOTIFYs: the stream-id
 * goes up by 2 (HAProxy 3.x's numbering), the frame-id by 1. */
extern uint64_t sp_next_sid, sp_next_fid;
/* Why the last sp_try_ call failed. */
extern char sp_err[512];

/* ---------------------------------------------------------------- frames */

/* The frame's bytes as hex (a static buffer). */
const char *sp_hex(const struct rawspop_frame *f);
/* A read result in words. */
const char *sp_read_res_str(enum rawspop_read_res r);

/* A TCP connection to 127.0.0.1:port (asserted). */
int sp_connect(int port);
/* Sends sp_wb whole (asserted: it fits the builder). */
void sp_send(int fd);
/* Reads one whole frame into f (asserted). */
void sp_read(int fd, struct rawspop_frame *f, int timeout_ms);
/* Fails unless nothing arrives within ms: a length field shorter than
 * what the agent wrote would leave bytes behind. */
void sp_expect_quiet(int fd, int ms);

/* ---------------------------------------------------------------- HELLO */

/* Is word one of the comma-separated capabilities? */
bool sp_caps_has(const char *caps, const char *word);
/* Checks an AGENT-HELLO against what was offered (version 2.0, a
 * max-frame-size of 256..offered, pipelining and nothing else). Returns
 * the agent's max-frame-size. */
uint32_t sp_check_agent_hello(const struct rawspop_frame *f, int64_t offered);
/* HELLO with o on fd, the AGENT-HELLO checked; returns max-frame-size. */
uint32_t sp_hello_on(int fd, const struct rawspop_hello_opts *o);
/* A new connection to port through a default HELLO (HAProxy 2.6's). */
int sp_open(int port);

/* ---------------------------------------------------------------- NOTIFY */

/* A rate-limit message (or a `release`: msg "release"). window, limit:
 * 0 = argument left out. */
struct sp_msg {
	const char *msg;        /* NULL: "ratelimit" */
	const char *key;        /* NULL: no key */
	const char *ns;         /* argument namespace, or NULL */
	const char *cost_str;   /* cost as a string, or NULL */
	const char *vars;       /* argument vars, or NULL */
	const char *admission;  /* argument admission, or NULL */
	const char *lease;      /* argument lease (a `release` message), or NULL */
	int64_t window;
	int64_t limit;
	int64_t cost;
	bool has_cost;          /* cost as an integer */
	bool lease_null;        /* argument lease of type NULL */
	const char *reservation; /* argument reservation (a `settle` message), or NULL */
	bool reservation_null;  /* argument reservation of type NULL */
	bool reserve;           /* argument reserve, a bool true */
};

/* Appends a message to the NOTIFY being built in sp_wb. */
void sp_put_msg(const struct sp_msg *m);
/* Appends a NOTIFY holding the n messages to sp_wb. */
void sp_put_notify(uint64_t sid, uint64_t fid, const struct sp_msg *m, size_t n);

/* Checks scope and type of every variable of an ACK (the variables of
 * docs/PROTOCOL.md, with or without a message's suffix). */
void sp_check_vars(const struct rawspop_actions *acts, const struct rawspop_frame *f);
/* Reads the ACK of (sid, fid) into sp_fr, decodes and checks it. */
void sp_read_ack(int fd, uint64_t sid, uint64_t fid, struct rawspop_actions *acts);
/* One NOTIFY with n messages (the next ids) and its ACK. */
void sp_notify_n(int fd, const struct sp_msg *m, size_t n, struct rawspop_actions *acts);
void sp_notify1(int fd, const struct sp_msg *m, struct rawspop_actions *acts);

/* A variable of the ACK, or NULL; its value, asserted to be there with
 * its type. */
const struct rawspop_action *sp_var(const struct rawspop_actions *acts, const char *name);
int64_t sp_var_int(const struct rawspop_actions *acts, const char *name);
bool sp_var_bool(const struct rawspop_actions *acts, const char *name);
/* No `error` variable; an `error` variable, non-empty, and not exceeded. */
void sp_expect_no_error(const struct rawspop_actions *acts);
void sp_expect_error(const struct rawspop_actions *acts, const char *what);

/* The current rate of key in window (cost 0: nothing counted). */
int64_t sp_read_rate(int fd, const char *key, int64_t window);

/* A key nobody else uses: "<tag>-" and 16 random hex digits. */
void sp_key(char *out, size_t len, const char *tag);

/* ------------------------------------------------- without assertions */

/* Sends a NOTIFY of the one message m, with the next ids (*sid: its
 * stream-id). Returns 0, or -1 with sp_err. */
int sp_try_send(int fd, const struct sp_msg *m, uint64_t *sid);
/* Reads the next ACK on fd within wait_ms, of any stream when sid is 0
 * (answers that waited for a store may come out of order), else of sid;
 * decodes its actions. Returns 0, or -1 with sp_err. */
int sp_try_ack(int fd, uint64_t sid, int wait_ms, struct rawspop_actions *acts);
/* The ACK's integer rate in *rate: 0, or -1 with sp_err when it sets
 * `error` or has no integer rate. */
int sp_try_rate(const struct rawspop_actions *acts, int64_t *rate);

/* ---------------------------------------------------------------- closing */

/* Expects an AGENT-DISCONNECT with status (and a message HAProxy 2.6
 * takes), then the close within SP_CLOSE_MS. */
void sp_expect_disconnect(int fd, uint32_t status, int timeout_ms, const char *what);

/* ------------------------------------------------- the test agent */

/* A new connection to the test agent through a default HELLO; the first
 * one notes its workers (for sp_still_serving). */
int sp_agent_conn(void);
/* Notes the test agent's workers, once. */
void sp_note_workers(void);
/* The test agent is alive, its workers are the processes noted, and a
 * new connection gets a HELLO and an ACK. */
void sp_still_serving(const char *after);

#endif /* SPOPTEST_H */
