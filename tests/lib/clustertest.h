/*
 * clustertest.h - several agent nodes on one real store, for the tests of
 * the sync (test_cluster_*.c, test_forget.c): written once here, the
 * cases in the test files.
 *
 *   - nodes: agent process trees ($AGENT, tests/lib/agentproc.h), each on
 *     its own port with SPOP connections open (spread over its workers);
 *     stopped by pid with SIGTERM, their exit status and log checked (no
 *     sanitizer report, no worker respawned); their /metrics read;
 *   - hits and reads over SPOP (tests/lib/spoptest.h), each ACK's latency
 *     kept in a histogram (struct ct_lat);
 *   - the stores, one fixture each (struct ct_store, as tests/lib/stores.h
 *     is for the store contract): started on a free port, paused
 *     (SIGSTOP), resumed, gone (Redis SIGKILLed, PostgreSQL shut down),
 *     back; a configuration of one namespace on it; a key's total read
 *     straight from the store; what the agents cost it (commands,
 *     statements). CT_STORE_TEST() writes a case once and runs it for
 *     each store, as two tests: cluster::redis_<case> and
 *     cluster::postgres_<case>;
 *   - a load of hits at a steady rate with two events on the way (the
 *     store paused then resumed...), and the wait until every node and
 *     the store hold one total.
 *
 * PostgreSQL servers are copies of one template cluster per test binary
 * (initdb costs a second or two, a copy a tenth): a binary with
 * PostgreSQL cases has ct_main() as its main.
 *
 * The tests of the cluster files take a lock file in turn (ct_setup),
 * even under --jobs N: their time bounds assume they do not share the two
 * cores with another cluster of agents.
 *
 * Calls Criterion's assertions: for test binaries only.
 */
#ifndef CLUSTERTEST_H
#define CLUSTERTEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tests/lib/agentproc.h"
#include "tests/lib/pg_server.h"
#include "tests/lib/redis_server.h"
#include "tests/lib/spoptest.h"

#define CT_NODES        3
#define CT_CONNS        4        /* SPOP connections per node (spread over workers) */
#define CT_START_MS     15000    /* agent start (sanitized) */
#define CT_STORE_MS     10000    /* store start */
#define CT_IO_MS        10000    /* read timeout of one ACK: a failure bound, above
				    every store timeout_ms of the cases */
#define CT_ACK_BOUND_MS 1500     /* every ACK within this, store up or not: the
				    cases' store timeouts are 100-300 ms and a
				    reconnect's backoff tops at 2 s, so an ACK
				    that waited for a reconnect passes it, while
				    a loaded machine's scheduling does not (250,
				    the bound before, left 150 ms above Redis's
				    100 ms timeout for that) */
#define CT_SYNC_RATE    0.5      /* seconds: the cases' usual sync_rate */
#define CT_PG_TABLE     "rl_cluster"

/* ---------------------------------------------------------------- nodes */

struct ct_node {
	struct agentproc a;
	int fd[CT_CONNS];        /* -1: not open */
	bool started;
};

/* One test per process (Criterion forks): the nodes of the running test. */
extern struct ct_node ct_nodes[CT_NODES];
/* How many nodes ct_wait_converged() reads (CT_NODES unless a case runs
 * fewer). */
extern size_t ct_nodes_up;

/* Starts node n with config json, two workers, and opens CT_CONNS SPOP
 * connections (HELLO done); skips the test when the agent is not built. */
void ct_node_start(size_t n, const char *json);
/* The same with -w workers and conns connections (0..CT_CONNS). */
void ct_node_start_with(size_t n, const char *json, const char *workers, size_t conns);
/* Nodes 0..count-1 (at most CT_NODES) started with the same config. */
void ct_nodes_start(size_t count, const char *json);
void ct_node_close_conns(size_t n);
/* Stops node n (SIGTERM: the master's final flush included) and expects
 * exit status 0 and a log without a sanitizer report or a respawn; the
 * log is kept when something is wrong (or with CLUSTER_KEEP_LOGS). */
void ct_node_stop(size_t n);
/* The end of node n's log (a static buffer); the lines holding needle. */
const char *ct_node_log(size_t n);
size_t ct_log_count(size_t n, const char *needle);
/* GET /metrics of node n's HTTP front (ct_with_http): the value of the
 * sample whose text (name, labels and a space) is given, or -1. */
long long ct_node_metric(size_t n, const char *sample);
/* Until every node's store_nodes of "default" is want (asserted within
 * 10 s); until every node's store_up is 0 (asserted within 5 s). */
void ct_wait_nodes(size_t want);
void ct_wait_store_down(void);
/* Until a hit on each SPOP connection of every node (each worker has its
 * own connection to the store) is answered not degraded: the store has
 * answered every worker (asserted within 10 s). On a busy machine a
 * worker's first connection may fail and wait for its retry; a case that
 * asserts "no answer degraded" starts after this. Each probe counts on
 * a key of its own (a GCRA node's copy never denies it without asking). */
void ct_wait_store_decides(unsigned w, int64_t limit);

/* ---------------------------------------------------------------- configs */

/* cfg (a configuration's JSON text) with the HTTP front on 127.0.0.1,
 * @HTTP_PORT@; with it and the admin token "adm1n-t0ken" (CT_ADMIN); its
 * namespace with "admission": how. Each returns a static buffer of its
 * own. */
#define CT_ADMIN "Authorization: Bearer adm1n-t0ken\r\n"
const char *ct_with_http(const char *cfg);
const char *ct_with_admin(const char *cfg);
const char *ct_with_admission(const char *cfg, const char *how);

/* A window size (seconds) whose current window still has two minutes to
 * run: 3600, or the first size above it that does (tests/lib/clock.h,
 * test_window_pick). Windows start at multiples of their size, so the
 * same size is current on every node: what a case counts stays in one
 * window. */
unsigned ct_window(void);

/* ---------------------------------------------------------------- hits */

/* Latencies of ACKs, in microseconds; a histogram in 100 us steps. */
#define CT_LAT_BINS 4000        /* up to 400 ms; later ones go to the last bin */
struct ct_lat {
	uint64_t n;
	int64_t max_us;
	uint64_t over_bound;        /* ACKs later than CT_ACK_BOUND_MS */
	uint64_t bins[CT_LAT_BINS];
};

/* The latencies of the running test's reads (ct_rate) and of the hits a
 * case sends to it. */
extern struct ct_lat ct_lat_all;
void ct_lat_add(struct ct_lat *l, int64_t us);
/* Logs (cr_log_info) the count and quantiles under what. */
void ct_lat_report(const char *what, const struct ct_lat *l);

/* One NOTIFY ratelimit(key, window, cost) on fd and its ACK. Returns 0
 * with the ACK's rate and the round trip in *us, or -1 with sp_err. */
int ct_notify(int fd, const char *key, unsigned w, int64_t cost, int64_t *rate, int64_t *us);
/* A hit (cost 1) on connection c of node n, asserted; its latency to l. */
void ct_hit(size_t n, size_t c, const char *key, unsigned w, struct ct_lat *l);
/* The rate node n reads for key (cost 0: read without counting). */
int64_t ct_rate(size_t n, const char *key, unsigned w);
/* Hits round-robin over every connection of every node. */
void ct_spread_hits(const char *key, unsigned w, size_t hits, struct ct_lat *l);

/* Admissions: NOTIFY ratelimit(key, window, limit), and admission="exact"
 * when ct_admission_exact. */
extern bool ct_admission_exact;
/* ACKs read by ct_limit_ack with degraded=true, since the case zeroed it. */
extern int64_t ct_degraded;
int ct_limit_send(int fd, const char *key, unsigned w, int64_t limit, uint64_t *sid);
/* Reads one ACK on fd, whichever stream it answers (ACKs that waited for
 * the store may come out of order): 1 admitted, 0 denied, -1 (sp_err). */
int ct_limit_ack(int fd);
/* One admission on connection c of node n, asserted: 1 admitted, 0 denied. */
int ct_limit_hit(size_t n, size_t c, const char *key, unsigned w, int64_t limit);
/* Reads one ACK on fd, whichever stream: its rate. 0, or -1 (sp_err). */
int ct_rate_ack(int fd, int64_t *rate);

/* How the admissions of a key are sent over the nodes. */
enum ct_pattern {
	CT_PARALLEL = 0,         /* every node's share in flight at once */
	CT_ROUND_ROBIN,          /* one at a time, node after node, full speed */
	CT_PACED,                /* one at a time, ~110 a second per node */
	CT_PATTERN_COUNT
};
extern const char *const ct_pattern_names[CT_PATTERN_COUNT];
/* hits admissions of key at limit over the CT_NODES nodes (and their
 * connections) in pattern p, asserted to be answered: how many were
 * admitted. */
int64_t ct_admit(enum ct_pattern p, const char *key, unsigned w, int64_t limit, size_t hits);

/* ---------------------------------------------------------------- stores */

/* A key's total in the store: namespace ns, window size w, the current
 * window (-1 when the store does not answer). */
typedef double (*ct_total_fn)(const char *ns, const char *key, unsigned w);
typedef void (*ct_event_fn)(void);

/* How a store is started (ct_store.up). */
#define CT_PERSISTENT 1u        /* Redis: every write on disk before its reply */
#define CT_STATEMENTS 2u        /* PostgreSQL: pg_stat_statements on */

/* A store the nodes sync with, as a case needs it. */
struct ct_store {
	const char *name;                       /* "redis", "postgres" */
	/* Starts the store (skips the test when it is not installed);
	 * flags: CT_*. It is stopped at the test's end (ct_teardown). */
	void (*up)(unsigned flags);
	/* SIGSTOP (connections stay open, nothing answers) and SIGCONT, the
	 * moments in ct_down_at / ct_up_at. */
	ct_event_fn pause, resume;
	/* Gone (Redis SIGKILLed, PostgreSQL shut down: connections drop),
	 * the moment in ct_down_at. */
	ct_event_fn gone;
	/* One namespace "default" syncing with it: window w, sync_rate, the
	 * store's timeout_ms (a static buffer). */
	const char *(*cfg)(unsigned w, double sync_rate, int timeout_ms);
	/* The timeout_ms of a case about a store that is down or paused
	 * (answers must not wait for it). */
	int timeout_ms;
	ct_total_fn total;
	/* What the agents cost the store so far: commands (Redis) or
	 * statements (PostgreSQL, up with CT_STATEMENTS); *inner what the
	 * store ran inside them (Redis scripts), or 0. cost_report logs what
	 * they were (NULL: nothing more to say). */
	long long (*cost)(long long *inner);
	void (*cost_report)(void);
	const char *cost_unit;                  /* "commands", "statements" */
};

extern const struct ct_store ct_redis, ct_postgres;

/* The store, gone (st->gone), back on its port with what it had on disk
 * (Redis: nothing; PostgreSQL: its tables); asserted within CT_STORE_MS. */
void ct_store_back(const struct ct_store *st);
/* The servers behind them, for what only one store does. */
extern struct redis_server ct_redis_srv;
extern struct pg_server ct_pg_srv;
/* When the last event took the store away and brought it back. */
extern int64_t ct_down_at, ct_up_at;

/* Commands the agents sent to Redis (INFO commandstats: script calls and
 * the few direct commands); *server the server's own count, scripts'
 * insides included; *usec (may be NULL) the microseconds Redis spent in
 * them. */
long long ct_redis_agent_cost(long long *server, long long *usec);

/* One case, written once as a function of the store, run for each:
 *   CT_STORE_TEST(three_nodes_converge) { ... st->up(0); ... }
 * defines cluster::redis_three_nodes_converge and
 * cluster::postgres_three_nodes_converge (suite "cluster": ct_setup and
 * ct_teardown). */
#define CT_STORE_TEST(c)                                                       \
	static void c(const struct ct_store *st);                              \
	Test(cluster, redis_##c) { c(&ct_redis); }                             \
	Test(cluster, postgres_##c) { c(&ct_postgres); }                       \
	static void c(const struct ct_store *st)

/* ---------------------------------------------------------------- load */

/* Runs one(i, arg) for i = 0, 1, ... for run_ms, at about per_s a second
 * (0: as fast as the round trips allow); at at1_ms ev1 runs, at at2_ms
 * ev2. Returns how many ran. */
size_t ct_load_events(int run_ms, int per_s, int at1_ms, ct_event_fn ev1, int at2_ms,
		      ct_event_fn ev2, void (*one)(size_t i, void *arg), void *arg);
/* Hits of one key so, round-robin over the nodes and their connections;
 * ACK latencies to l. */
size_t ct_load_hits(const char *key, unsigned w, int run_ms, int per_s, int at1_ms,
		    ct_event_fn ev1, int at2_ms, ct_event_fn ev2, struct ct_lat *l);

/* Polls until every node up reads want for key and the store holds it
 * (total), or timeout_ms passes. Returns the ms it took, or -1 (the last
 * values seen are in rates[] and *seen). */
int64_t ct_wait_converged(const char *key, unsigned w, int64_t want, ct_total_fn total,
			  int timeout_ms, int64_t rates[CT_NODES], double *seen);

/* ---------------------------------------------------------------- fixture */

/* The suite's init: the lock taken (in turn with every cluster test),
 * then ct_init. ct_init alone: no connection open, SIGPIPE ignored (a
 * store gone must not kill the test). */
void ct_setup(void);
void ct_init(void);
/* The suite's fini: every node stopped (and checked), the stores stopped,
 * the lock let go. */
void ct_teardown(void);

/* Criterion's runner, then the template PostgreSQL cluster removed. */
int ct_main(int argc, char *argv[]);

#endif /* CLUSTERTEST_H */
