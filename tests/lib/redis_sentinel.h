/*
 * redis_sentinel.h - a real Sentinel setup for tests: one master and one
 * replica (Debian's redis-server) and three sentinels (Debian's
 * redis-sentinel) monitoring it as "mymaster", on free loopback ports,
 * stopped by pid (redis_server.h). A failover is started with SENTINEL
 * FAILOVER and polled until every sentinel names the new master and the
 * old one is its replica, in sync. The servers and the sentinels may
 * require passwords of their own (redis_sentinels_start_auth).
 */
#ifndef REDIS_SENTINEL_TEST_H
#define REDIS_SENTINEL_TEST_H

#include <stdbool.h>
#include <stddef.h>

#include "tests/lib/redis_server.h"

#define REDIS_SENTINELS 3

struct redis_sentinels {
	struct redis_server data[2];            /* master, replica (at start) */
	struct redis_server sentinel[REDIS_SENTINELS];
	char conf[REDIS_SENTINELS][512];
	char replicaof[32];
	int master;                             /* index in data[] of the master */
	char err[512];
};

/* true if redis-sentinel can be run. */
bool redis_sentinels_available(void);

/* Starts everything and waits until every sentinel knows the replica and
 * the other sentinels. Returns 0 or -1 (err; nothing left running). */
int redis_sentinels_start(struct redis_sentinels *t, int timeout_ms);
/* The same, with requirepass on the master and the replica (master_pass,
 * also their masterauth and the sentinels' auth-pass) and on the
 * sentinels (sentinel_pass, also their sentinel-pass); NULL = none. The
 * fixture's own commands authenticate (redis_server.password). */
int redis_sentinels_start_auth(struct redis_sentinels *t, int timeout_ms,
			       const char *master_pass, const char *sentinel_pass);
void redis_sentinels_stop(struct redis_sentinels *t);

/* "[\"127.0.0.1:P\", ...]" of the sentinels, for strategy_opts. */
void redis_sentinels_nodes(const struct redis_sentinels *t, char *out, size_t outlen);

/* SENTINEL FAILOVER mymaster (on the first sentinel). Returns 0 or -1. */
int redis_sentinels_failover_start(struct redis_sentinels *t);
/* Is it over: every sentinel names the other server, which is master,
 * and the old master replicates from it in sync? (Updates t->master.)
 * Once the sentinels agree, the old master is made a replica at once
 * (REPLICAOF), as the sentinels do only seconds later. */
bool redis_sentinels_failover_done(struct redis_sentinels *t);

#endif /* REDIS_SENTINEL_TEST_H */
