/*
 * haproxyproc.h - runs HAProxy as a child process for tests: Debian's 2.6
 * or a 3.x binary, on a configuration written from a template into a
 * temporary directory of its own, with free loopback ports; waits until
 * it accepts; talks to its stats socket; stops it by pid (and the kernel
 * kills it if the test's process ends first). Its output goes to a log
 * file in that directory, kept when a test asks for it or ends before
 * haproxyproc_stop() (a failed assertion): name h->log_path in failures.
 *
 * Template tokens, replaced at each start: "@PORT0@" .. "@PORT3@" (free
 * loopback ports: HAproxy must listen on @PORT0@, the one waited for),
 * "@DIR@" (the directory), "@SOCK@" (a unix socket path in it for
 * `stats socket`), and the caller's own name/value pairs.
 */
#ifndef HAPROXYPROC_H
#define HAPROXYPROC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define HAPROXYPROC_PORTS    4
#define HAPROXYPROC_PATH_MAX 256

struct haproxyproc {
	pid_t pid;                              /* 0 when not running */
	bool reaped;
	int exit_status;                        /* wait status once reaped */
	int port[HAPROXYPROC_PORTS];
	char bin[HAPROXYPROC_PATH_MAX];
	char dir[64];                           /* /tmp/haproxyproc-<pid>-XXXXXX */
	char cfg_path[HAPROXYPROC_PATH_MAX];
	char log_path[HAPROXYPROC_PATH_MAX];
	char sock_path[HAPROXYPROC_PATH_MAX];
	char err[2048];                         /* why the last call failed */
};

/* The HAProxy binary of a major version, or NULL when there is none
 * (tests skip then, saying so): 2, $HAPROXY or `haproxy` on the PATH
 * (Debian's 2.6); 3, $HAPROXY3 or ../shared/peers/haproxy-3.4/haproxy
 * from the project's root (tests/run.sh's). Checked with `-v`. */
const char *haproxyproc_binary(int major);

/* The version `bin -v` prints: 0 with *major and *minor, or -1. */
int haproxyproc_version(const char *bin, int *major, int *minor);

/* Starts `bin -db -f <config> [args...]` on the template cfg, tokens
 * replaced (vars: NULL-terminated name, value, name, value...; may be
 * NULL); waits up to timeout_ms for 127.0.0.1:@PORT0@ to accept. Retries
 * with other ports when HAProxy exits saying it could not bind. Returns 0,
 * or -1 with h->err (HAProxy's complaint included; nothing left running). */
int haproxyproc_start(struct haproxyproc *h, const char *bin, const char *cfg,
		      const char *const *vars, const char *const *args, int timeout_ms);

/* SIGTERM, up to timeout_ms, then SIGKILL; reaps it. Removes the
 * directory unless keep (then h->dir stays for a look). Returns the wait
 * status, or -1 if it was not running. */
int haproxyproc_stop(struct haproxyproc *h, int timeout_ms, bool keep);

/* true while it runs. */
bool haproxyproc_alive(struct haproxyproc *h);

/* One command on the stats socket (@SOCK@), its whole answer into out
 * (NUL-terminated, cut at cap - 1). Returns the bytes read, or -1. */
int haproxyproc_cli(const struct haproxyproc *h, const char *cmd, char *out, size_t cap,
		    int timeout_ms);

/* The last bytes of its log, NUL-terminated, into out. */
void haproxyproc_log_tail(const struct haproxyproc *h, char *out, size_t max);

#endif /* HAPROXYPROC_H */
