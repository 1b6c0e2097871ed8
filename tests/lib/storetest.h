/*
 * storetest.h - what every test of a store (strategies/strategy.h) needs,
 * written once for the contract suite (tests/test_store_contract.c) and
 * the store-specific files (test_redis.c, test_postgres.c,
 * test_redis_cluster.c): a libev loop (tests/lib/evtest.h) and the ops
 * table under test, an operation's result as its callback saw it, rows
 * copied out of get_counters, counters and admissions built in one line,
 * and each operation started, checked not to call back inside the call,
 * and run to its end (bounded waits: a store that never answers fails the
 * test, it does not hang it).
 *
 * Calls Criterion's assertions: for test binaries only.
 */
#ifndef STORETEST_H
#define STORETEST_H

#include <ev.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strategies/strategy.h"

#define ST_ROWS_MAX    64
#define ST_ROW_KEY_MAX 2048   /* bytes of a row's key copied; longer ones: length and hash */
#define ST_WAIT_S      20.0   /* the longest an operation of a test may take */

/* The loop and the ops of the test (st_setup). */
extern struct ev_loop *st_loop;
extern const struct strategy_ops *st_ops;

/* A row of get_counters, copied. */
struct st_row {
	char key[ST_ROW_KEY_MAX];
	size_t key_len;
	uint64_t hash;          /* FNV-1a 64 of the whole key */
	int64_t start;
	uint32_t size;
	double count;
};

struct st_rows {
	size_t n;               /* rows answered (copied: the first ST_ROWS_MAX) */
	struct st_row r[ST_ROWS_MAX];
};

/* The result of one operation, as its callback saw it. */
struct st_res {
	bool done;
	int calls;
	int status;
	char err[STRATEGY_ERR_MAX];
	double at;              /* loop time of the callback */
	size_t nrows;
	struct st_rows *rows;   /* st_rows_cb copies the rows here (NULL: not) */
	struct strategy *destroy_me; /* destroyed from inside the callback */
};

/* A new loop for ops (SIGPIPE ignored: a dead server must not kill the
 * test); st_teardown frees it. */
void st_setup(const struct strategy_ops *ops);
void st_teardown(void);

/* The loop's clock, updated. */
double st_now(void);
/* Runs the loop until *flag or secs pass; returns *flag. */
bool st_run_until(const bool *flag, double secs);
void st_run_for(double secs);
/* Runs the loop until ready(s) == want or secs pass; true if it is. */
bool st_wait_ready(struct strategy *s, bool want, double secs);

/* Callbacks recording into a struct st_res (arg). */
void st_done_cb(void *arg, int status, const char *errstr);
void st_rows_cb(void *arg, int status, const char *errstr, const struct strategy_row *rows,
		size_t n);

/* create() from printf-formatted options, asserted to succeed. */
struct strategy *st_create(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same, then waits until ready (asserted). */
struct strategy *st_create_ready(double secs, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* create() is refused with an error holding needle. */
void st_expect_bad_opts(const char *json, const char *needle);

struct strategy_counter st_ctr(const char *ns, const char *key, size_t key_len, int64_t start,
			       uint32_t size, double diff);
/* A counter of a NUL-terminated key. */
#define ST_C(ns, key, start, size, diff) st_ctr((ns), (key), strlen(key), (start), (size), (diff))

/* A GCRA TAT step (STRATEGY_STEP_TAT) of a NUL-terminated key: limit per
 * size seconds, burst, a hit of cost, diff hits the node admitted alone
 * (< 0: given back). */
struct strategy_admit st_tat(const char *ns, const char *key, uint32_t size, double limit,
			     double burst, double cost, double diff);

/* n counters "k00000".. of namespace ns in the 60 s window at start,
 * counter i with diff 1 + i % 3; their keys in *keys. Free both. */
struct strategy_counter *st_batch(const char *ns, size_t n, int64_t start, char (**keys)[16]);

/* The five counters of the token cases, in 60 s windows around start:
 * two namespaces, two windows of one key, a decimal and a negative diff,
 * and a read (the last, "dave"). */
#define ST_TOKEN_BATCH 5
void st_token_batch(struct strategy_counter *b, int64_t start);

/* push_diffs with token (NULL = none), run to completion (any status). */
void st_push(struct strategy *s, struct strategy_counter *b, size_t n, const char *token,
	     struct st_res *r);
/* The same, asserted to succeed with every counter ok. */
void st_push_ok(struct strategy *s, struct strategy_counter *b, size_t n, const char *token);
/* get_counters into rows (may be NULL), asserted to succeed; returns the row count. */
size_t st_fetch_ok(struct strategy *s, const char *ns, const uint32_t *sizes, size_t nsizes,
		   int64_t now, struct st_rows *rows);
/* get_window, asserted to succeed with c ok; returns c->total. */
double st_get_ok(struct strategy *s, struct strategy_counter *c);
/* The row of (key, start, size), or NULL. */
const struct st_row *st_find_row(const struct st_rows *rows, const char *key, size_t key_len,
				 int64_t start, uint32_t size);

/* An admission of key in namespace "ns", window size 60. */
struct strategy_admit st_adm(const char *key, int64_t start, double diff, double cost,
			     double limit, double weight, bool count_denied);
/* admit, asserted to succeed with every admission decided. */
void st_admit_ok(struct strategy *s, struct strategy_admit *a, size_t n, const char *token);

/* heartbeat, asserted to succeed; returns the nodes counted. */
unsigned st_beat(struct strategy *s, const char *ns, const char *node, double now, double ttl);

#endif /* STORETEST_H */
