/*
 * pg_server.h - runs a real PostgreSQL server (Debian's postgresql 15, in
 * /usr/lib/postgresql/15/bin or $PG_BINDIR) for tests and benchmarks: a
 * cluster made with initdb (or copied from one) in a temporary directory,
 * a postmaster on a free loopback port with its Unix socket in that
 * directory, stopped by pid. Under root, initdb and postgres run as the
 * "postgres" system user (initdb refuses root); the directory belongs to
 * it.
 *
 * Making a cluster costs about a second; copying one about a tenth: a test
 * binary makes one template, then copies it for every server it starts.
 *
 * Blocking by design (tests only): waits, PQping, PQexec.
 */
#ifndef PG_SERVER_H
#define PG_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define PG_SERVER_PATH_MAX 256

struct pg_server {
	pid_t pid;                      /* postmaster, 0 when not running */
	int port;                       /* 0 = pick a free one at start */
	bool fixed_port;                /* keep port across restarts */
	bool durable;                   /* false: fsync=off etc. (faster) */
	bool paused;
	const char *extra[8];           /* more postgres arguments, NULL-ended
					   ("-c", "shared_preload_libraries=...") */
	uid_t uid;                      /* the user the server runs as */
	gid_t gid;
	bool drop;                      /* setuid to uid/gid in the child */
	char dir[PG_SERVER_PATH_MAX];   /* temp dir: data/, socket, log */
	char data[PG_SERVER_PATH_MAX];  /* dir/data */
	char log_path[PG_SERVER_PATH_MAX];
	char conninfo[PG_SERVER_PATH_MAX]; /* valid once started */
	char err[1024];                 /* why the last call failed */
};

/* The directory of initdb/postgres: $PG_BINDIR, else Debian's. */
const char *pg_server_bindir(void);

/* true if initdb and postgres are there and, under root, the "postgres"
 * user exists. */
bool pg_server_available(void);

/* Makes a cluster in a new temporary directory: a copy of template_data
 * (the data directory of a cluster made earlier and not running), or,
 * with NULL, a new one from initdb (superuser "postgres", trust
 * authentication, UTF8, C locale). Returns 0, or -1 with p->err. */
int pg_server_create(struct pg_server *p, const char *template_data);

/* Starts the postmaster on 127.0.0.1:p->port (a free port is picked when
 * p->port is 0; the same port is reused by later starts) and waits up to
 * timeout_ms for it to accept connections. Sets p->conninfo. Returns 0,
 * or -1 with p->err (the process, if any, is killed and reaped). */
int pg_server_start(struct pg_server *p, int timeout_ms);

/* Fast shutdown (SIGINT, resuming a paused server first), SIGKILL after
 * timeout_ms; reaps. Returns 0, or -1 if it was not running. */
int pg_server_stop(struct pg_server *p, int timeout_ms);

/* SIGSTOP / SIGCONT to the postmaster and every child of it (backends
 * included): a store that answers nothing. Returns 0 or -1. */
int pg_server_pause(struct pg_server *p);
int pg_server_resume(struct pg_server *p);

/* The servers of a test binary, made in main() before its tests run: a
 * template cluster (initdb), and a server on a copy of it, started.
 * Returns 0, or -1 after saying why on stderr, "<who>: ...". */
int pg_server_start_shared(struct pg_server *tpl, struct pg_server *srv, const char *who);

/* Stops the server if running and removes the directory. */
void pg_server_destroy(struct pg_server *p);

/* Runs sql (blocking) on conninfo. Returns the number of rows (0 for a
 * command), or -1 with the error's first line in out. out (if not NULL)
 * gets the first column of the first row as text ("" if none). */
int pg_server_query(const char *conninfo, const char *sql, char *out, size_t outlen);

#endif /* PG_SERVER_H */
