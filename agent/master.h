/*
 * master.h - the master process: binds the listener, forks the workers
 * (after the shared table exists), respawns a worker that dies, and on
 * SIGTERM/SIGINT stops accepting, lets the workers finish and exits 0.
 */
#ifndef MASTER_H
#define MASTER_H

#include <stddef.h>

struct config;
struct rl;

/* Opens the listening socket of cfg->listen ("HOST:PORT", "[V6]:PORT",
 * "unix:/path" or "/path"): non-blocking, close-on-exec. Returns the fd, or
 * -1 with a message in err. */
int master_listen(const char *addr, char *err, size_t errlen);

/* Runs the master until it is told to stop. Returns the exit status. */
int master_run(const struct config *cfg, struct rl *rl, int listen_fd);

#endif /* MASTER_H */
