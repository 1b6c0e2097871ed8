/*
 * test_balance.c - connections are shared out between the workers
 * (agent/balance.h), in one process: the pick (fewest connections, then
 * the lowest id, among the workers accepting), the wake-up of a waiting
 * worker when the pick moves to it, the stall mark, a dead worker's line.
 */
#include "agent/balance.h"

#include <criterion/criterion.h>

#include <poll.h>

/* ------------------------------------------------------ in one process */

static struct balance *b;
static int efd[3];

static void setup3(void)
{
	char err[128];

	b = balance_new(3, err, sizeof(err));
	cr_assert_not_null(b, "%s", err);
	for (int i = 0; i < 3; i++)
		efd[i] = balance_attach(b, i);
}

static void teardown(void)
{
	balance_free(b);
	b = NULL;
}

/* Is worker id's eventfd readable (woken)? */
static bool woken(int id)
{
	struct pollfd p = { .fd = efd[id], .events = POLLIN };

	return poll(&p, 1, 0) == 1;
}

Test(pick, fewest_then_lowest_id_among_the_open, .init = setup3, .fini = teardown)
{
	cr_expect_eq(balance_pick(b, 0), -1, "nobody accepts yet");
	for (int i = 0; i < 3; i++)
		balance_open(b, i, 0, true);
	cr_expect_eq(balance_pick(b, 0), 0);
	cr_expect_eq(balance_add(b, 0, 0, 1), 1, "0 holds one: 1 is next");
	cr_expect_eq(balance_add(b, 1, 0, 1), 2);
	cr_expect_eq(balance_add(b, 2, 0, 1), 0, "all hold one: the lowest id");
	cr_expect_eq(balance_add(b, 0, 0, 1), 1);
	cr_expect_eq(balance_add(b, 1, 0, 1), 2);
	cr_expect_eq(balance_add(b, 1, 0, -1), 1, "a close makes 1 the fewest again");
	cr_expect_eq(balance_held(b, 0, 0), 2);
	cr_expect_eq(balance_held(b, 1, 0), 1);
	cr_expect_eq(balance_open(b, 1, 0, false), 2, "a paused worker is skipped");
	cr_expect_eq(balance_pick(b, 1), -1, "the other listener has its own turns");
	balance_open(b, 2, 1, true);
	cr_expect_eq(balance_pick(b, 1), 2);
}

Test(wake, the_new_pick_is_woken_if_it_waits, .init = setup3, .fini = teardown)
{
	uint64_t mark;

	balance_open(b, 0, 0, true);
	balance_open(b, 1, 0, true);
	cr_assert(balance_wait(b, 1, 0, &mark), "0 is the pick: 1 waits");
	cr_expect(!woken(1));
	cr_expect_eq(balance_add(b, 0, 0, 1), 1);
	cr_expect(woken(1), "0 took one: 1's turn, and it waits: woken");
	balance_woken(b, 1);
	cr_expect(!woken(1), "read, the eventfd is quiet again");
	balance_resume(b, 1, 0);

	cr_expect(!balance_wait(b, 1, 0, &mark), "1 is the pick: it does not wait");
	cr_expect_eq(balance_add(b, 1, 0, 1), 0);
	cr_expect(!woken(0), "0 does not wait: no wake-up to make");
}

Test(wake, stalled_until_anyone_accepts, .init = setup3, .fini = teardown)
{
	uint64_t mark;

	for (int i = 0; i < 3; i++)
		balance_open(b, i, 0, true);
	cr_assert(balance_wait(b, 2, 0, &mark));
	cr_expect(balance_stalled(b, 0, mark), "nobody accepted since");
	balance_add(b, 1, 0, 1);
	balance_add(b, 1, 0, -1);
	cr_expect(!balance_stalled(b, 0, mark), "1 accepted one (closed since: still counts)");
	balance_add(b, 0, 1, 1);
	cr_assert(balance_wait(b, 2, 0, &mark));
	balance_add(b, 0, 1, 1);
	cr_expect(balance_stalled(b, 0, mark), "accepts on another listener do not count");
}

Test(gone, a_dead_workers_line_is_cleared_and_the_next_woken, .init = setup3, .fini = teardown)
{
	uint64_t mark;

	balance_open(b, 0, 0, true);
	balance_open(b, 1, 0, true);
	balance_add(b, 1, 0, 1);
	cr_assert(balance_wait(b, 1, 0, &mark));
	balance_gone(b, 0);
	cr_expect_eq(balance_held(b, 0, 0), 0);
	cr_expect_eq(balance_pick(b, 0), 1, "the dead worker accepts no more");
	cr_expect(woken(1), "the new pick was waiting: woken by the master");
	cr_expect_eq(balance_attach(b, 0), efd[0], "a successor gets the same eventfd");
	cr_expect(!woken(0));
	cr_expect_eq(balance_pick(b, 0), 1, "until it opens");
	balance_open(b, 0, 0, true);
	cr_expect_eq(balance_pick(b, 0), 0);
}
