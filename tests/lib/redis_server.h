/*
 * redis_server.h - runs a real redis-server (Debian's package) for tests:
 * on a free loopback port, in a temporary directory, without persistence,
 * as a child process whose pid is kept; waits until it answers PING;
 * pauses (SIGSTOP), resumes, kills and restarts it on the same port; stops
 * it by pid (SIGTERM, then SIGKILL). Assertions talk to it through
 * hiredis's blocking API with a timeout (redis_server_command*).
 *
 * The server dies with the test process (PR_SET_PDEATHSIG) even when the
 * test crashes before stopping it.
 */
#ifndef REDIS_SERVER_H
#define REDIS_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#define REDIS_SERVER_PATH_MAX 256
#define REDIS_SERVER_MAX_ARGS 16

struct redis_server {
	pid_t pid;                              /* 0 when not running */
	int port;
	bool paused;                            /* SIGSTOPped */
	char dir[REDIS_SERVER_PATH_MAX];        /* temporary; "" before start */
	char log_path[REDIS_SERVER_PATH_MAX + 16];
	char password[64];                      /* "" = none (for commands) */
	const char *extra[REDIS_SERVER_MAX_ARGS]; /* more server arguments, NULL-ended */
	const char *bin;                        /* NULL = redis-server (redis-sentinel...) */
	const char *conf_text;                  /* written to <dir>/server.conf, given first */
	char conf[REDIS_SERVER_PATH_MAX + 16];
	bool cluster_bus;                       /* a port below 55535 whose +10000 is free too */
	char err[512];                          /* why the last call failed */
};

/* true if redis-server can be run ($PATH). */
bool redis_server_available(void);

/* true if the program `bin` can be run ($PATH). */
bool redis_server_have(const char *bin);

/* A blocking connection to r with a 2 s timeout (AUTH if r->password), or
 * NULL with r->err set. */
redisContext *redis_server_connect(struct redis_server *r);

/* Starts redis-server on 127.0.0.1:<free port> with r->extra appended to
 * its arguments (set r->extra and r->password before, after zeroing r).
 * Retries other ports if the server exits early (port taken by a
 * concurrent test). Waits up to timeout_ms for PING to answer. Returns 0,
 * or -1 with r->err set and nothing left running. */
int redis_server_start(struct redis_server *r, int timeout_ms);

/* Starts it again on r->port (after redis_server_kill). Same contract. */
int redis_server_restart(struct redis_server *r, int timeout_ms);

/* SIGSTOP / SIGCONT: the server keeps its connections but stops answering. */
int redis_server_pause(struct redis_server *r);
int redis_server_resume(struct redis_server *r);

/* SIGKILL and reap; keeps the directory and port for a restart. */
int redis_server_kill(struct redis_server *r);

/* SIGTERM (SIGCONT first if paused), waits up to timeout_ms, then SIGKILL;
 * reaps it and removes the directory with everything in it. Safe to call
 * twice. */
void redis_server_stop(struct redis_server *r, int timeout_ms);

/* One blocking command with a 2 s timeout, on a fresh connection (AUTH
 * with r->password first if set). Returns the reply (freeReplyObject it),
 * or NULL with r->err set. */
redisReply *redis_server_command(struct redis_server *r, const char *fmt, ...);
redisReply *redis_server_commandargv(struct redis_server *r, int argc, const char **argv,
				     const size_t *argvlen);

/* The integer reply of a command, or LLONG_MIN on any failure. */
long long redis_server_integer(struct redis_server *r, const char *fmt, ...);

/* HGET hash field: the number, 0 when there is none, NAN on failure. */
double redis_server_hget(struct redis_server *r, const char *hash, size_t hlen,
			 const char *field, size_t flen);

/* The bucket of a rate-limit key in the Redis strategy's layout
 * (strategies/redis.c): FNV-1a 64 of the key, mod 64. */
unsigned redis_server_bucket(const char *key, size_t len);

/* Number of keys matching pattern (via SCAN), or -1. */
long redis_server_count_keys(struct redis_server *r, const char *pattern);

#endif /* REDIS_SERVER_H */
