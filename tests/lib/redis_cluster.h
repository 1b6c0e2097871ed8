/*
 * redis_cluster.h - a real Redis Cluster for tests: M masters (and R
 * replicas each) of Debian's redis-server on free loopback ports below
 * 55535 (the cluster bus is port + 10000), formed with CLUSTER MEET,
 * ADDSLOTSRANGE (equal ranges) and REPLICATE, waited for until every node
 * says cluster_state:ok; slots migrated key by key (MIGRATE) as
 * redis-cli --cluster reshard does; a master killed and its replica's
 * promotion waited for. Every server is stopped by pid (redis_server.h).
 */
#ifndef REDIS_CLUSTER_TEST_H
#define REDIS_CLUSTER_TEST_H

#include <stdbool.h>
#include <stddef.h>

#include "tests/lib/redis_server.h"

#define REDIS_CLUSTER_MAX 8

struct redis_cluster {
	size_t masters, replicas;               /* replicas per master */
	size_t n;                               /* servers: masters first */
	struct redis_server srv[REDIS_CLUSTER_MAX];
	char id[REDIS_CLUSTER_MAX][48];         /* node ids */
	char err[512];
};

/* Starts and forms the cluster; waits up to timeout_ms. Returns 0 or -1
 * (err set, nothing left running). */
int redis_cluster_start(struct redis_cluster *c, size_t masters, size_t replicas,
			int timeout_ms);
void redis_cluster_stop(struct redis_cluster *c);

/* "[\"127.0.0.1:P1\", ...]" of the masters, for strategy_opts. */
void redis_cluster_seeds(const struct redis_cluster *c, char *out, size_t outlen);

/* The index of the server that serves slot now (asked of a live node),
 * or -1. */
int redis_cluster_owner(struct redis_cluster *c, unsigned slot);

/* Moves slots [lo, hi] to server dst, key by key; returns 0 or -1. With
 * pump, a slot that holds keys stays open a while twice, pump(arg, ms)
 * being called (the test runs its clients meanwhile): once migrating with
 * every key still at the source, once with one key moved and the others
 * not (the states that answer ASK and TRYAGAIN). */
int redis_cluster_migrate(struct redis_cluster *c, unsigned lo, unsigned hi, size_t dst,
			  void (*pump)(void *arg, int ms), void *arg);

/* Kills master m (SIGKILL) and waits until its replica is master and the
 * live nodes say cluster_state:ok. Returns the replica's index, or -1. */
int redis_cluster_kill_master(struct redis_cluster *c, size_t m, int timeout_ms);

/* The same in steps, for a caller that goes on meanwhile: kill (returns
 * the replica's index, or -1), then poll until promoted. */
int redis_cluster_kill(struct redis_cluster *c, size_t m);
bool redis_cluster_promoted(struct redis_cluster *c, size_t replica);

/* Is server i a replica in sync with its master? */
bool redis_cluster_in_sync(struct redis_cluster *c, size_t i);

/* Starts killed server i again (its nodes.conf kept): it rejoins as a
 * replica; waits until it is in sync. Returns 0 or -1. */
int redis_cluster_restart(struct redis_cluster *c, size_t i, int timeout_ms);

/* The sum over the live nodes of INFO errorstats' count of error `name`
 * (MOVED, ASK, TRYAGAIN...) sent to clients. */
long long redis_cluster_errorstat(struct redis_cluster *c, const char *name);

/* The sum over the live nodes of INFO commandstats' calls of command
 * `name` (evalsha, hmget...), those run inside scripts included. */
long long redis_cluster_cmdstat(struct redis_cluster *c, const char *name);

/* The slot of a key, asked of the cluster (CLUSTER KEYSLOT), or -1. */
long redis_cluster_keyslot(struct redis_cluster *c, const char *key, size_t len);

/* HGET hash field on the server owning the hash: the number, 0 if none,
 * or NAN on failure. */
double redis_cluster_hget(struct redis_cluster *c, const char *hash, size_t hlen,
			  const char *field, size_t flen);

#endif /* REDIS_CLUSTER_TEST_H */
