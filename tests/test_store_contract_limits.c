/*
 * test_store_contract_limits.c - the contract of strategies/strategy.h's
 * limits per key (limit_set, limits_read: docs/CLUSTER.md, "Limits per
 * key"), written once and run against every store that keeps them:
 * Redis (one server), Redis Cluster (three masters), PostgreSQL; the
 * local strategy has neither. The fixtures and CONTRACT() are
 * tests/lib/stores.h's, as for tests/test_store_contract.c:
 * contract_redis::limits_..., contract_redis_cluster::limits_...,
 * contract_postgres::limits_...
 *
 *   - set, read back with the version, read again with that version (no
 *     rows), changed, removed: every change moves the version on, and a
 *     read sees one snapshot;
 *   - namespaces apart, keys byte-exact (NULs, 0xff, 104 bytes), never
 *     counted, fetched or purged as windows;
 *   - the bound: a new one past `most` is refused (full), a change of
 *     one it holds is not, a removal makes room.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <ev.h>
#include <stdio.h>
#include <string.h>

#include "strategies/strategy.h"
#include "tests/lib/storetest.h"
#include "tests/lib/stores.h"

static const struct store *f;       /* the store of the running test */

TestSuite(contract_redis, .fini = store_off, .timeout = 60);
TestSuite(contract_redis_cluster, .fini = store_off, .timeout = 60);
TestSuite(contract_postgres, .fini = store_off, .timeout = 60);

/* limit_set, run to its end: its fullness. */
static bool set(struct strategy *s, const char *ns, const char *key, size_t len, uint32_t size,
		int64_t limit, uint64_t most)
{
	char err[STRATEGY_ERR_MAX] = "";
	struct st_res r = { 0 };
	bool full = true;

	cr_assert_eq(f->ops->limit_set(s, ns, strlen(ns), key, len, size, limit, most, &full,
				       st_done_cb, &r, err), 0, "%s", err);
	cr_assert(st_run_until(&r.done, 5.0), "limit_set: no answer");
	cr_assert_eq(r.status, 0, "%s", r.err);
	cr_assert_eq(r.calls, 1);
	return full;
}

/* limits_read from have, run to its end: the rows into *rows, whether
 * they changed, the version. */
static uint64_t rd(struct strategy *s, const char *ns, uint64_t have, bool *changed,
		   struct st_rows *rows)
{
	char err[STRATEGY_ERR_MAX] = "";
	struct st_res r = { .rows = rows };
	uint64_t v = 12345;

	*changed = true;
	cr_assert_eq(f->ops->limits_read(s, ns, strlen(ns), have, &v, changed, st_rows_cb, &r, err),
		     0, "%s", err);
	cr_assert(st_run_until(&r.done, 5.0), "limits_read: no answer");
	cr_assert_eq(r.status, 0, "%s", r.err);
	cr_assert_eq(r.nrows, rows->n);
	return v;
}

static int64_t limit_of(const struct st_rows *rows, const char *key, size_t len, uint32_t size)
{
	const struct st_row *row = st_find_row(rows, key, len, 0, size);

	return row ? (int64_t)row->count : -1;
}

CONTRACT(limits_set_read_by_version)
{
	struct strategy *s = store_mk();
	static struct st_rows rows;
	static const uint32_t sizes[] = { 60 };
	bool changed;

	cr_assert(f->ops->limit_set && f->ops->limits_read);
	uint64_t v0 = rd(s, "ns", UINT64_MAX, &changed, &rows);
	cr_assert_eq(v0, 0, "none ever set");
	cr_assert(changed, "not the node's version");
	cr_assert_eq(rows.n, 0);
	cr_assert_not(set(s, "ns", "a", 1, 60, 5, 10));
	cr_assert_not(set(s, "ns", "b", 1, 60, 1000000000000LL, 10));
	cr_assert_not(set(s, "ns", "a", 1, 3600, 0, 10));
	uint64_t v1 = rd(s, "ns", v0, &changed, &rows);
	cr_assert(changed);
	cr_assert_gt(v1, v0);
	cr_assert_eq(rows.n, 3);
	cr_assert_eq(limit_of(&rows, "a", 1, 60), 5);
	cr_assert_eq(limit_of(&rows, "b", 1, 60), 1000000000000LL);
	cr_assert_eq(limit_of(&rows, "a", 1, 3600), 0);
	/* The same version: nothing to read. */
	cr_assert_eq(rd(s, "ns", v1, &changed, &rows), v1);
	cr_assert_not(changed);
	cr_assert_eq(rows.n, 0);
	/* Changed, removed (a removal of none moves it on too: harmless). */
	cr_assert_not(set(s, "ns", "a", 1, 60, 7, 10));
	cr_assert_not(set(s, "ns", "b", 1, 60, -1, 10));
	uint64_t v2 = rd(s, "ns", v1, &changed, &rows);
	cr_assert(changed);
	cr_assert_gt(v2, v1);
	cr_assert_eq(rows.n, 2);
	cr_assert_eq(limit_of(&rows, "a", 1, 60), 7);
	cr_assert_eq(limit_of(&rows, "b", 1, 60), -1);
	/* Another namespace is apart; none is a window's counter. */
	cr_assert_eq(rd(s, "other", UINT64_MAX, &changed, &rows), 0);
	cr_assert_eq(rows.n, 0);
	cr_assert_eq(st_fetch_ok(s, "ns", sizes, 1, 1700000070, NULL), 0);
	cr_assert_eq(f->tally(T_COUNTERS, "ns"), 0);
	f->ops->destroy(s);
}

CONTRACT(limits_keys_byte_exact)
{
	struct strategy *s = store_mk();
	static struct st_rows rows;
	char k104[104];
	bool changed;

	memset(k104, 0xff, sizeof(k104));
	cr_assert_not(set(s, "ns", "a\0b", 3, 60, 1, 10));
	cr_assert_not(set(s, "ns", "a", 1, 60, 2, 10));
	cr_assert_not(set(s, "ns", "1:v", 3, 60, 3, 10));
	cr_assert_not(set(s, "ns", "v", 1, 60, 4, 10));
	cr_assert_not(set(s, "ns", k104, sizeof(k104), 60, 5, 10));
	rd(s, "ns", UINT64_MAX, &changed, &rows);
	cr_assert_eq(rows.n, 5);
	cr_assert_eq(limit_of(&rows, "a\0b", 3, 60), 1);
	cr_assert_eq(limit_of(&rows, "a", 1, 60), 2);
	cr_assert_eq(limit_of(&rows, "1:v", 3, 60), 3);
	cr_assert_eq(limit_of(&rows, "v", 1, 60), 4);
	cr_assert_eq(limit_of(&rows, k104, sizeof(k104), 60), 5);
	f->ops->destroy(s);
}

CONTRACT(limits_bounded_by_most)
{
	struct strategy *s = store_mk();
	static struct st_rows rows;
	bool changed;

	cr_assert_not(set(s, "ns", "a", 1, 60, 1, 2));
	cr_assert_not(set(s, "ns", "b", 1, 60, 1, 2));
	uint64_t v = rd(s, "ns", UINT64_MAX, &changed, &rows);
	cr_assert(set(s, "ns", "c", 1, 60, 1, 2), "a third: full");
	cr_assert_eq(rd(s, "ns", v, &changed, &rows), v, "nothing changed");
	cr_assert_not(set(s, "ns", "a", 1, 60, 9, 2), "a change of one it holds");
	cr_assert_not(set(s, "other", "c", 1, 60, 1, 2), "each namespace its own");
	cr_assert_not(set(s, "ns", "a", 1, 60, -1, 2));
	cr_assert_not(set(s, "ns", "c", 1, 60, 1, 2), "room again");
	rd(s, "ns", 0, &changed, &rows);
	cr_assert_eq(rows.n, 2);
	f->ops->destroy(s);
}

int main(int argc, char *argv[])
{
	return store_main(argc, argv, "test_store_contract_limits");
}
