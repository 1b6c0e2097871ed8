/*
 * stores.h - the stores of the contract suite (tests/test_store_contract.c),
 * one fixture each: Redis (one server), Redis Cluster (three masters),
 * PostgreSQL and the local strategy. A fixture says how to make an
 * instance (in the case's space: its own key prefix or table on the
 * binary's one server per store), how to look into the store behind the
 * strategy's back, how to run a server of the case's own (to pause or stop
 * it), and names the ways stores may differ that strategy.h leaves open.
 *
 * main() starts the servers (store_servers_start) before Criterion runs
 * the tests, each in a process of its own that finds them through ST_*
 * environment variables (store_on).
 *
 * Calls Criterion's assertions: for test binaries only.
 */
#ifndef STORES_H
#define STORES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strategies/strategy.h"
#include "tests/lib/pg_server.h"
#include "tests/lib/redis_cluster.h"
#include "tests/lib/redis_server.h"

#define STORE_TIMEOUT_MS 5000       /* of the instances: timeouts are not what most cases test */

enum tally { T_COUNTERS, T_TOTAL, T_OBJECTS, T_TOKENS };

struct store {
	const char *name;
	const struct strategy_ops *ops;
	/* Options of an instance in the case's space; of one whose store
	 * nobody answers. */
	void (*opts)(char *out, size_t len);
	void (*dead_opts)(char *out, size_t len);
	/* options create() and check_opts() refuse, and what they say */
	const char *bad_opts, *bad_opts_says;
	/* what a refusal while the store is away says, and why (NULL: not
	 * checked) */
	const char *refusal, *refusal_why;
	/* Straight from the store, in the case's space: a counter's count,
	 * or with reserved its reservation (NAN: none); a number (enum
	 * tally) of the counters of a namespace or the sum of their counts,
	 * of the records of any kind (Redis keys, rows of the table), of the
	 * tokens remembered. */
	double (*look)(bool reserved, const char *ns, const char *key, size_t key_len,
		       uint32_t size, int64_t start);
	double (*tally)(enum tally what, const char *ns);
	/* The ways stores may differ: */
	bool remote;                /* a central store: admit, heartbeat */
	bool dups_in_order;         /* a counter twice in a batch: each gets the running
				       total (else each the batch's final total) */
	bool store_clock;           /* heartbeats count with the store's clock */
	bool keeps_empty_reservation; /* a reservation back at 0 stays (else it is gone) */
	bool may_take_while_away;   /* an operation may be taken while reconnecting, then
				       fail in time (else refused at once) */
	bool destroy_fails_the_next; /* destroyed from a callback, the next operation
					fails (else it may have completed) */
	size_t key_max;             /* the longest key taken (0: no limit) */
	bool size_asked_twice_once; /* get_counters: a size asked twice answers once
				       (Redis answers its rows twice) */
	/* what a refusal of a window size 0, of a diff not finite says */
	const char *says_size0, *says_not_finite;
	/* A server of the case's own, for the cases that stop it (NULL: the
	 * store has none here): started; an instance on it with timeout_ms
	 * own_timeout_ms; paused (SIGSTOP) or resumed; gone (SIGKILL, or a
	 * fast shutdown) and back on its port; stopped and removed. */
	void (*own_up)(void);
	void (*own_opts)(char *out, size_t len);
	int (*own_pause)(bool pause);
	int (*own_gone)(void);
	int (*own_back)(void);
	void (*own_down)(void);
	int own_timeout_ms;
	double early_s;             /* a timeout may fire this much early (timer slack) */
	double notice_s;            /* the longest to see a server gone */
	double reconnect_s;         /* the longest to reconnect once it answers */
	bool durable;               /* counts survive the server going */
	bool timeout_says_only;     /* a timeout's error is "timeout", nothing more */
	const char *lost_says;      /* an operation in flight when the server went */
	bool resend_may_wait;       /* a resend after a timeout may wait on the stuck
				       push's locks past timeout_ms (else it goes through) */
};

extern const struct store redis_store, cluster_store, pg_store, local_store;

/* The store of the running test, its space (key prefix, table) named
 * name: at most 56 bytes, [a-z0-9_]; the loop set up for its ops
 * (tests/lib/storetest.h). store_off: the end of the test (the case's own
 * server stopped, if it started one). */
void store_on(const struct store *st, const char *name);
void store_off(void);

/* An instance in the case's space, ready. */
struct strategy *store_mk(void);

/* The case's own server started (own_up), and an instance on it, ready;
 * look and tally look into that server from then on. */
struct strategy *store_own_mk(void);

/* The servers of a test binary, one per store. */
struct store_servers {
	struct redis_server redis;
	struct redis_cluster cluster;
	bool have_redis, have_cluster;
	struct pg_server tpl, pg;
};

/* For main(): starts them (saying on stderr, "<who>: ...", what did not
 * start: its tests then fail) and sets the environment the tests find
 * them by; store_servers_stop stops what started. */
void store_servers_start(struct store_servers *sv, const char *who);
void store_servers_stop(struct store_servers *sv);

/* The cases of a contract binary, each written once as a function of no
 * argument and run as one Criterion test per store: the binary's
 * `static const struct store *f` set to it, the case's space taken
 * (store_on); its suites (contract_redis, contract_redis_cluster,
 * contract_postgres, contract_local) declared by the binary, with
 * .fini = store_off. */
#define ON(suite, store, c)                                                    \
	Test(suite, c) {                                                       \
		f = &store;                                                    \
		store_on(f, #c);                                               \
		c();                                                           \
	}

/* A case of the stores that keep counters (all but local). */
#define CONTRACT(c)                                                            \
	static void c(void);                                                   \
	ON(contract_redis, redis_store, c)                                     \
	ON(contract_redis_cluster, cluster_store, c)                           \
	ON(contract_postgres, pg_store, c)                                     \
	static void c(void)

/* A case of the stores that have a server of its own here (Redis,
 * PostgreSQL: a cluster is not stopped whole). */
#define CONTRACT_OWN(c)                                                        \
	static void c(void);                                                   \
	ON(contract_redis, redis_store, c)                                     \
	ON(contract_postgres, pg_store, c)                                     \
	static void c(void)

/* A case of every store, local included. */
#define CONTRACT_ALL(c)                                                        \
	static void c(void);                                                   \
	ON(contract_redis, redis_store, c)                                     \
	ON(contract_redis_cluster, cluster_store, c)                           \
	ON(contract_postgres, pg_store, c)                                     \
	ON(contract_local, local_store, c)                                     \
	static void c(void)

/* A contract binary's main(): the servers started (who: the binary's
 * name), Criterion's tests run, the servers stopped. */
int store_main(int argc, char *argv[], const char *who);

#endif /* STORES_H */
