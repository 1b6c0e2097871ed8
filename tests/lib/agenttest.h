/*
 * agenttest.h - the agent of a test (tests/lib/agentproc.h) as the tests
 * of the agent's fronts start and stop it (test_http.c, test_http_abuse.c,
 * test_admin.c, test_proto_*.c, test_balance.c): one agent per test
 * process, started with a config and arguments (the test is skipped when
 * the binary is not built, fails with the log's tail when it does not
 * start), stopped at the end with its log checked for a sanitizer report
 * (kept then, removed otherwise).
 *
 * Calls Criterion's assertions: for test binaries only.
 */
#ifndef AGENTTEST_H
#define AGENTTEST_H

#include "tests/lib/agentproc.h"

#define AGENTTEST_START_MS 15000        /* waiting for the agent to listen */

/* The test's agent. */
extern struct agentproc test_agent;

/* The last 3000 bytes of its log (a static buffer). */
const char *test_agent_log_tail(void);

/* Starts it with json (a config's text, may be NULL) and args
 * (NULL-terminated, may be NULL); skips the test when the binary is not
 * built; asserts that it listens. */
void test_agent_start(const char *json, const char *const *args);

/* The same with one worker ("-w 1"). */
void test_agent_start1(const char *json);

/* One worker, the built-in configuration: a suite's .init. */
void test_agent_start_plain(void);

/* Stops it if it was started, and expects no sanitizer report (or dead
 * worker) in its log: the log is removed, or kept when it holds one. */
void test_agent_stop(void);

/* Runs `spoa-ratelimit ctl -c <its config> args` (a shell's words), its
 * output (stdout and stderr) into out. Returns its exit status. */
int test_agent_ctl(const char *args, char *out, size_t cap);

#endif /* AGENTTEST_H */
