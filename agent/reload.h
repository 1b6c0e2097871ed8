/*
 * reload.h - the configuration reloaded on SIGHUP (docs/CONFIG.md,
 * "Reload"). The master reads the file and checks it as -t does; a bad
 * file is refused (logged with file, field and reason) and nothing
 * changes. A good one is applied to the master itself and its text
 * published in a shared area; each worker, signalled, applies the same
 * text once its pushes are done, between two loop iterations:
 * connections stay open, counters stay where they are (namespaces and
 * windows are found by name and size in the shared table), unpushed diffs
 * included. What cannot change in a running agent (listen addresses,
 * workers, max_keys, ...) is logged and kept until a restart.
 */
#ifndef RELOAD_H
#define RELOAD_H

#include <stdbool.h>
#include <stdint.h>

struct config;
struct rl;

#define RELOAD_TEXT_MAX (256 * 1024)   /* a configuration file's bytes */

/* Set once by main before fork: the shared area, the file (NULL: built-in
 * configuration, nothing to reload) and the command line's -v count. */
int reload_setup(const char *file, int verbose);

/* Master, on SIGHUP: reads, checks and applies the file to cfg and rl,
 * then publishes it. Returns 1 when the workers must be told (SIGHUP), 0
 * when nothing was applied (refused, or no file: logged). */
int reload_master(struct config *cfg, struct rl *rl);

/* Worker: the published configuration, if newer than the one it runs,
 * applied to cfg (what may change live) and rl. The caller stops the
 * sync before and starts it again after (namespaces, stores and their
 * options may have changed). Returns 1 applied, 0 nothing new, -1 failed
 * (logged; nothing changed). */
int reload_worker(struct config *cfg, struct rl *rl);

/* Is a newer configuration published than this process runs? */
bool reload_pending(void);

#endif /* RELOAD_H */
