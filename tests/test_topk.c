/*
 * test_topk.c - the heavy-hitters summary (agent/topk.h) alone: the
 * Space-Saving guarantee (every key heavier than N / K is listed, counts
 * never understated, by at most their error overstated), sampling, the
 * window roll, two processes on one mapping, the bounds of the answer.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/topk.h"

#define T0 6000000

static void hit(struct topk *t, unsigned ns, int64_t start, const char *key, double cost,
		bool denied)
{
	unsigned due = topk_due(t, denied);
	if (due)
		topk_record(t, ns, 0, start, key, strlen(key), cost, due);
}

/* 100,000 distinct keys hit once and 10 heavy ones 5,000 times each,
 * interleaved: the 10 heavy ones come first, each counted at least its
 * true count and at most its count plus the bound. */
static void heavy_case(unsigned sample)
{
	char err[128], key[32];
	struct topk *t = topk_new(2, 1, 128, sample, err, sizeof(err));
	struct topk_entry e[20];
	double total, bound;

	cr_assert_not_null(t, "%s", err);
	for (int i = 0; i < 100000; i++) {
		snprintf(key, sizeof(key), "flood-%d", i);
		hit(t, 1, T0, key, 1, false);
		if (i % 2 == 0) {
			snprintf(key, sizeof(key), "heavy-%d", (i / 2) % 10);
			hit(t, 1, T0, key, 1, false);
		}
	}
	size_t n = topk_query(t, 1, 0, T0, TOPK_HITS, e, 20, &total, &bound);
	cr_assert_eq(n, 20);
	if (sample == 1) {
		cr_assert_eq(total, 150000, "total %g", total);
		cr_assert_eq(bound, 150000.0 / 128);
	} else {
		/* Sampled: an estimate of the weight seen. */
		cr_assert(total > 150000 * 0.95 && total < 150000 * 1.05, "total %g", total);
		cr_assert_eq(bound, total / 128);
	}
	for (int i = 0; i < 10; i++) {
		cr_assert(strncmp(e[i].key, "heavy-", 6) == 0, "sample %u: #%d is %s (%g)", sample,
			  i, e[i].key, e[i].count);
		if (sample == 1) {
			cr_assert_geq(e[i].count, 5000, "%s: %g", e[i].key, e[i].count);
			cr_assert_leq(e[i].count - e[i].error, 5000, "%s: %g - %g", e[i].key,
				      e[i].count, e[i].error);
		}
	}
	for (int i = 10; i < 20; i++)
		cr_assert_lt(e[i].count, e[9].count);
	/* Another namespace and the other kind are apart. */
	cr_assert_eq(topk_query(t, 0, 0, T0, TOPK_HITS, e, 20, &total, &bound), 0);
	cr_assert_eq(topk_query(t, 1, 0, T0, TOPK_DENIED, e, 20, &total, &bound), 0);
	topk_free(t);
}

Test(topk, heavy_hitters_first)
{
	heavy_case(1);
}

Test(topk, heavy_hitters_first_sampled)
{
	heavy_case(16);
}

Test(topk, denials_and_windows)
{
	char err[128];
	struct topk *t = topk_new(1, 2, 8, 1, err, sizeof(err));
	struct topk_entry e[4];
	double total, bound;

	cr_assert_not_null(t, "%s", err);
	hit(t, 0, T0, "a", 2, true);
	hit(t, 0, T0, "b", 1, false);
	cr_assert_eq(topk_query(t, 0, 0, T0, TOPK_DENIED, e, 4, &total, &bound), 1);
	cr_assert_str_eq(e[0].key, "a");
	cr_assert_eq(e[0].count, 2, "a cost of 2 weighs 2");
	cr_assert_eq(topk_query(t, 0, 0, T0, TOPK_HITS, e, 4, &total, &bound), 2);
	/* The next window starts empty; asking for the old one finds nothing. */
	hit(t, 0, T0 + 60, "c", 1, false);
	cr_assert_eq(topk_query(t, 0, 0, T0 + 60, TOPK_HITS, e, 4, &total, &bound), 1);
	cr_assert_str_eq(e[0].key, "c");
	cr_assert_eq(topk_query(t, 0, 0, T0, TOPK_HITS, e, 4, &total, &bound), 0);
	/* Out of range: nothing, no crash; NULL: off. */
	cr_assert_eq(topk_query(t, 5, 0, T0, TOPK_HITS, e, 4, &total, &bound), 0);
	cr_assert_eq(topk_query(NULL, 0, 0, T0, TOPK_HITS, e, 4, &total, &bound), 0);
	cr_assert_eq(topk_due(NULL, true), 0);
	cr_assert_null(topk_new(1, 1, 0, 1, err, sizeof(err)), "top_keys 0: off");
	topk_free(t);
}

/* Two processes on one mapping: every sampled hit of both is seen. */
Test(topk, shared_between_processes)
{
	char err[128];
	struct topk *t = topk_new(1, 1, 16, 1, err, sizeof(err));
	struct topk_entry e[4];
	double total, bound;

	cr_assert_not_null(t, "%s", err);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	for (int i = 0; i < 5000; i++)
		hit(t, 0, T0, pid == 0 ? "child" : "parent", 1, false);
	if (pid == 0)
		_exit(0);
	int st;
	waitpid(pid, &st, 0);
	size_t n = topk_query(t, 0, 0, T0, TOPK_HITS, e, 4, &total, &bound);
	cr_assert_eq(n, 2);
	/* Both processes' hits are in it (a sample that finds the lock busy
	 * for long, its holder descheduled, is skipped: not all of them). */
	cr_assert_gt(total, 5000, "total %g", total);
	cr_assert_leq(total, 10000);
	topk_free(t);
}
