/*
 * master.h - the master process: binds the listener, forks the workers
 * (after the shared table exists), respawns a worker that dies, and on
 * SIGTERM/SIGINT stops accepting, lets the workers finish and exits 0.
 */
#ifndef MASTER_H
#define MASTER_H

#include <stddef.h>
#include <sys/types.h>

struct config;
struct rl;
struct worker_listeners;

/* Opens the listening socket of addr (cfg->listen or cfg->http_listen:
 * "HOST:PORT", "[V6]:PORT", "unix:/path" or "/path"): non-blocking,
 * close-on-exec; a unix socket gets cfg->listen_owner and cfg->listen_mode. Refuses a path that is not a
 * socket or that a live process listens on. Returns the fd, or -1 with a
 * message in err. */
int master_listen(const struct config *cfg, const char *addr, char *err, size_t errlen);

/* For -t: a TCP listen address resolves (a host name is looked up, as
 * master_listen does at start); a unix path is not checked. Returns 0, or
 * -1 with a message in err. */
int master_check_listen(const char *addr, char *err, size_t errlen);

/* The ids of a listen_owner "user[:group]" (names or numbers); (uid_t)-1 /
 * (gid_t)-1 for a part not given, as chown() takes them. Returns 0, or -1
 * with "no user ..." / "no group ..." in err. */
int master_owner_ids(const char *owner, uid_t *uid, gid_t *gid, char *err, size_t errlen);

/* Runs the master until it is told to stop; a reload changes cfg (the
 * master's, then each worker's copy). Returns the exit status. */
int master_run(struct config *cfg, struct rl *rl, const struct worker_listeners *ls);

#endif /* MASTER_H */
