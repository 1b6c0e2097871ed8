/*
 * storetest.c - see storetest.h.
 */
#include "tests/lib/storetest.h"
#include "tests/lib/evtest.h"

#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ev_loop *st_loop;
const struct strategy_ops *st_ops;

void st_setup(const struct strategy_ops *ops)
{
	/* hiredis writes with write(2): a dead server means SIGPIPE, which
	 * the agent ignores too (agent/master.c) */
	signal(SIGPIPE, SIG_IGN);
	st_ops = ops;
	st_loop = evtest_loop_new();
	cr_assert_not_null(st_loop);
}

void st_teardown(void)
{
	evtest_loop_free(st_loop);
	st_loop = NULL;
}

double st_now(void)
{
	return evtest_now(st_loop);
}

bool st_run_until(const bool *flag, double secs)
{
	return evtest_run_until(st_loop, flag, secs);
}

void st_run_for(double secs)
{
	bool never = false;

	evtest_run_until(st_loop, &never, secs);
}

bool st_wait_ready(struct strategy *s, bool want, double secs)
{
	double end = st_now() + secs;

	while (st_ops->ready(s) != want && st_now() < end)
		ev_run(st_loop, EVRUN_ONCE);
	return st_ops->ready(s) == want;
}

void st_done_cb(void *arg, int status, const char *errstr)
{
	struct st_res *r = arg;

	r->calls++;
	r->done = true;
	r->status = status;
	r->at = st_now();
	snprintf(r->err, sizeof(r->err), "%s", errstr ? errstr : "");
	if (r->destroy_me) {
		struct strategy *s = r->destroy_me;

		r->destroy_me = NULL;
		st_ops->destroy(s);
	}
}

static uint64_t fnv1a(const char *p, size_t n)
{
	uint64_t h = 14695981039346656037ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
	return h;
}

void st_rows_cb(void *arg, int status, const char *errstr, const struct strategy_row *rows,
		size_t n)
{
	struct st_res *r = arg;

	r->nrows = n;
	if (r->rows) {
		r->rows->n = n;
		for (size_t i = 0; i < n && i < ST_ROWS_MAX; i++) {
			struct st_row *o = &r->rows->r[i];
			size_t len = rows[i].key_len;

			memcpy(o->key, rows[i].key, len < ST_ROW_KEY_MAX ? len : ST_ROW_KEY_MAX);
			o->key_len = len;
			o->hash = fnv1a(rows[i].key, len);
			o->start = rows[i].start;
			o->size = rows[i].size;
			o->count = rows[i].count;
		}
	}
	st_done_cb(arg, status, errstr);
}

static struct strategy *st_vcreate(const char *fmt, va_list ap)
{
	char json[1024], err[256] = "";
	struct strategy *s;

	vsnprintf(json, sizeof(json), fmt, ap);
	s = st_ops->create(st_loop, json, err, sizeof(err));
	cr_assert_not_null(s, "create(%s): %s", json, err);
	return s;
}

struct strategy *st_create(const char *fmt, ...)
{
	struct strategy *s;
	va_list ap;

	va_start(ap, fmt);
	s = st_vcreate(fmt, ap);
	va_end(ap);
	return s;
}

struct strategy *st_create_ready(double secs, const char *fmt, ...)
{
	struct strategy *s;
	va_list ap;

	va_start(ap, fmt);
	s = st_vcreate(fmt, ap);
	va_end(ap);
	cr_assert(st_wait_ready(s, true, secs), "not ready after %g s", secs);
	return s;
}

void st_expect_bad_opts(const char *json, const char *needle)
{
	char err[256] = "";
	struct strategy *s = st_ops->create(st_loop, json, err, sizeof(err));

	if (s)
		st_ops->destroy(s);
	cr_assert_null(s, "create(%s) accepted", json);
	cr_assert(strstr(err, needle) != NULL, "create(%s): error \"%s\" lacks \"%s\"", json, err,
		  needle);
}

struct strategy_counter st_ctr(const char *ns, const char *key, size_t key_len, int64_t start,
			       uint32_t size, double diff)
{
	return (struct strategy_counter){ .ns = ns, .ns_len = strlen(ns), .key = key,
					  .key_len = key_len, .start = start, .size = size,
					  .diff = diff, .total = NAN, .ok = false };
}

struct strategy_admit st_tat(const char *ns, const char *key, uint32_t size, double limit,
			     double burst, double cost, double diff)
{
	return (struct strategy_admit){ .ns = ns, .ns_len = strlen(ns), .key = key,
					.key_len = strlen(key), .size = size, .limit = limit,
					.burst = burst, .cost = cost, .diff = diff,
					.step = STRATEGY_STEP_TAT };
}

struct strategy_counter *st_batch(const char *ns, size_t n, int64_t start, char (**keys)[16])
{
	struct strategy_counter *c = calloc(n, sizeof(*c));

	*keys = calloc(n, 16);
	cr_assert(c && *keys);
	for (size_t i = 0; i < n; i++) {
		int len = snprintf((*keys)[i], 16, "k%05zu", i);

		c[i] = st_ctr(ns, (*keys)[i], (size_t)len, start, 60, (double)(1 + i % 3));
	}
	return c;
}

void st_token_batch(struct strategy_counter *b, int64_t start)
{
	b[0] = ST_C("ns", "alice", start, 60, 1);
	b[1] = ST_C("ns", "bob", start, 60, 2.5);
	b[2] = ST_C("ns", "alice", start - 60, 60, -1);
	b[3] = ST_C("other", "carol", start, 60, 4);
	b[4] = ST_C("ns", "dave", start, 60, 0);        /* read only */
}

/* The loop's clock brought to now before an operation starts: the stores
 * time an operation from ev_now(), which stands still while a test checks
 * thousands of counters between two operations without running the loop
 * (under load, long past timeout_ms: the next operation then timed out at
 * once). */
static void st_clock(void)
{
	ev_now_update(st_loop);
}

void st_push(struct strategy *s, struct strategy_counter *b, size_t n, const char *token,
	     struct st_res *r)
{
	char err[STRATEGY_ERR_MAX] = "";

	memset(r, 0, sizeof(*r));
	st_clock();
	cr_assert_eq(st_ops->push_diffs(s, b, n, token, st_done_cb, r, err), 0, "push_diffs: %s",
		     err);
	cr_assert_eq(r->calls, 0, "callback ran inside push_diffs");
	cr_assert(st_run_until(&r->done, ST_WAIT_S), "push did not complete");
	cr_assert_eq(r->calls, 1);
}

void st_push_ok(struct strategy *s, struct strategy_counter *b, size_t n, const char *token)
{
	struct st_res r;

	st_push(s, b, n, token, &r);
	cr_assert_eq(r.status, 0, "push failed: %s", r.err);
	for (size_t i = 0; i < n; i++)
		cr_assert(b[i].ok, "counter %zu not ok", i);
}

size_t st_fetch_ok(struct strategy *s, const char *ns, const uint32_t *sizes, size_t nsizes,
		   int64_t now, struct st_rows *rows)
{
	struct st_res r = { .rows = rows };
	char err[STRATEGY_ERR_MAX] = "";

	st_clock();
	cr_assert_eq(st_ops->get_counters(s, ns, strlen(ns), sizes, nsizes, now, st_rows_cb, &r,
					  err), 0, "get_counters: %s", err);
	cr_assert_eq(r.calls, 0, "callback ran inside get_counters");
	cr_assert(st_run_until(&r.done, ST_WAIT_S), "get_counters did not complete");
	cr_assert_eq(r.status, 0, "get_counters failed: %s", r.err);
	cr_assert_eq(r.calls, 1);
	return r.nrows;
}

double st_get_ok(struct strategy *s, struct strategy_counter *c)
{
	struct st_res r = { 0 };
	char err[STRATEGY_ERR_MAX] = "";

	st_clock();
	cr_assert_eq(st_ops->get_window(s, c, st_done_cb, &r, err), 0, "get_window: %s", err);
	cr_assert_eq(r.calls, 0, "callback ran inside get_window");
	cr_assert(st_run_until(&r.done, ST_WAIT_S), "get_window did not complete");
	cr_assert_eq(r.status, 0, "get_window failed: %s", r.err);
	cr_assert(c->ok);
	return c->total;
}

const struct st_row *st_find_row(const struct st_rows *rows, const char *key, size_t key_len,
				 int64_t start, uint32_t size)
{
	for (size_t i = 0; i < rows->n && i < ST_ROWS_MAX; i++) {
		const struct st_row *r = &rows->r[i];

		if (r->key_len != key_len || r->start != start || r->size != size)
			continue;
		if (key_len <= ST_ROW_KEY_MAX ? memcmp(r->key, key, key_len) == 0
					      : r->hash == fnv1a(key, key_len))
			return r;
	}
	return NULL;
}

struct strategy_admit st_adm(const char *key, int64_t start, double diff, double cost,
			     double limit, double weight, bool count_denied)
{
	return (struct strategy_admit){ .ns = "ns", .ns_len = 2, .key = key, .key_len = strlen(key),
					.start = start, .size = 60, .diff = diff, .cost = cost,
					.limit = limit, .weight = weight,
					.count_denied = count_denied };
}

void st_admit_ok(struct strategy *s, struct strategy_admit *a, size_t n, const char *token)
{
	char err[STRATEGY_ERR_MAX] = "";
	struct st_res r = { 0 };

	st_clock();
	cr_assert_eq(st_ops->admit(s, a, n, token, st_done_cb, &r, err), 0, "admit: %s", err);
	cr_assert_eq(r.calls, 0, "callback ran inside admit");
	cr_assert(st_run_until(&r.done, ST_WAIT_S), "admit did not complete");
	cr_assert_eq(r.status, 0, "admit failed: %s", r.err);
	for (size_t i = 0; i < n; i++)
		cr_assert(a[i].ok, "admission %zu not decided", i);
}

unsigned st_beat(struct strategy *s, const char *ns, const char *node, double now, double ttl)
{
	char err[STRATEGY_ERR_MAX] = "";
	unsigned active = 0;
	struct st_res r = { 0 };

	st_clock();
	cr_assert_eq(st_ops->heartbeat(s, ns, strlen(ns), node, strlen(node), now, ttl, &active,
				       st_done_cb, &r, err), 0, "heartbeat: %s", err);
	cr_assert_eq(r.calls, 0, "callback ran inside heartbeat");
	cr_assert(st_run_until(&r.done, ST_WAIT_S), "heartbeat did not complete");
	cr_assert_eq(r.status, 0, "heartbeat failed: %s", r.err);
	return active;
}
