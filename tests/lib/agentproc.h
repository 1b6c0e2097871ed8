/*
 * agentproc.h - runs the agent binary ($AGENT) as a child process for
 * tests: on a free loopback port, with extra arguments and optionally a
 * JSON config written to a temporary file; waits until it accepts
 * connections; stops it by pid. The agent's stdout and stderr go to a
 * log file kept for diagnostics.
 */
#ifndef AGENTPROC_H
#define AGENTPROC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define AGENTPROC_PATH_MAX 512
#define AGENTPROC_MAX_ARGS 32

/* Command-line options of the agent used to place it. */
#define AGENTPROC_OPT_LISTEN "-l"    /* followed by "127.0.0.1:<port>" */
#define AGENTPROC_OPT_CONFIG "-c"    /* followed by the JSON file */

struct agentproc {
	pid_t pid;                         /* 0 when not running */
	int port;
	int http_port;                     /* a second free port, for "@HTTP_PORT@" */
	int exit_status;                   /* wait status once reaped */
	bool reaped;
	char bin[AGENTPROC_PATH_MAX];
	char cfg_path[AGENTPROC_PATH_MAX]; /* "" when no config file */
	char log_path[AGENTPROC_PATH_MAX];
	char err[2 * AGENTPROC_PATH_MAX + 256]; /* why the last call failed */
};

/* The agent binary: $AGENT, else build/san/spoa-ratelimit relative to the
 * current directory. */
const char *agentproc_binary(void);

/* true if the binary exists and is executable. */
bool agentproc_available(void);

/* Starts the agent listening on 127.0.0.1:<free port>. json: a config
 * file's text or NULL; the token "@PORT@" in it is replaced by the port,
 * "@HTTP_PORT@" by a second free port (a->http_port).
 * args: extra arguments, NULL-terminated (may be NULL). Waits up to
 * timeout_ms for a TCP connect to succeed, on both ports when json has
 * "http_listen" on 127.0.0.1:@HTTP_PORT@. Retries a few ports if the
 * agent exits early (another process may have taken the port). Returns 0,
 * or -1 with a->err set (the child, if any, is killed and reaped). */
int agentproc_start(struct agentproc *a, const char *json, const char *const *args,
		    int timeout_ms);

/* Sends sig to the agent. Returns 0 or -1. */
int agentproc_signal(struct agentproc *a, int sig);

/* Waits up to timeout_ms for the agent to exit and reaps it. Returns 0
 * with a->exit_status set, or -1 on timeout. */
int agentproc_wait(struct agentproc *a, int timeout_ms);

/* SIGTERM, wait up to timeout_ms, then SIGKILL and reap. Removes the
 * config file (the log file stays for inspection unless remove_log).
 * Returns the wait status, or -1 if it was not running. */
int agentproc_stop(struct agentproc *a, int timeout_ms, bool remove_log);

/* true while the agent has not exited (not reaped, not a zombie). */
bool agentproc_alive(struct agentproc *a);

/* true if the process exists and is not a zombie. */
bool agentproc_pid_alive(pid_t pid);

/* Direct children of pid (the workers), sorted ascending, at most max.
 * Uses /proc/<pid>/task/<tid>/children, else scans /proc/<n>/stat.
 * Zombies are left out. Returns the count. */
size_t agentproc_children(pid_t pid, pid_t *out, size_t max);

/* The last max bytes of the agent's log, NUL-terminated, into out. */
void agentproc_log_tail(const struct agentproc *a, char *out, size_t max);

/* The lines of the agent's log that hold needle, and needle2 too unless
 * it is NULL (0 without a log). */
size_t agentproc_log_lines(const struct agentproc *a, const char *needle, const char *needle2);

/* true if the log holds a sanitizer report or the master's report of a
 * worker that died ("... respawning"). */
bool agentproc_log_has_crash(const struct agentproc *a);

/* The end of a test: stops the agent (as agentproc_stop, timeout_ms) if it
 * was started, then removes its log unless it holds a crash. Returns true
 * if it does (the log is kept for agentproc_log_tail). */
bool agentproc_finish(struct agentproc *a, int timeout_ms);

#endif /* AGENTPROC_H */
