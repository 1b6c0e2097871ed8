/*
 * clock.h - the one clock of the tests: the monotonic milliseconds (and
 * microseconds, for latencies) and the EINTR-proof sleep that every test
 * and helper (agentproc, rawspop, redis_server, pg_server) waits with;
 * and the usable moments of a test that reads a rate, a remaining or a count: the
 * agent's windows start at multiples of their size in Unix time
 * (strategies/window_start.h), so what a test counts across a window's
 * end comes out weighted (sliding) or restarted (fixed). A test either
 * waits until the window has room for all it does (test_window_room), or
 * configures a window that has (test_window_pick).
 */
#ifndef TESTS_CLOCK_H
#define TESTS_CLOCK_H

#include <errno.h>
#include <stdint.h>
#include <time.h>

static inline int64_t test_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Monotonic microseconds: a round trip's latency. */
static inline int64_t test_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static inline void test_sleep_us(int64_t us)
{
	struct timespec ts = { .tv_sec = (time_t)(us / 1000000),
			       .tv_nsec = (long)(us % 1000000) * 1000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static inline void test_sleep_ms(int ms)
{
	test_sleep_us((int64_t)ms * 1000);
}

/* Unix time in milliseconds: the clock the agent places its windows on. */
static inline int64_t test_wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Milliseconds left in the current window of size_s seconds (> 0). */
static inline int64_t test_window_left_ms(uint32_t size_s)
{
	int64_t size = (int64_t)size_s * 1000;

	return size - test_wall_ms() % size;
}

/* Returns once the current window of size_s seconds has more than need_ms
 * left: at once, or 20 ms into the next window. What the test does within
 * need_ms from then on stays in one window. need_ms must leave the window
 * 50 ms at least (need_ms < size_s * 1000 - 50); make it a far bound of
 * what the test does (several times its time on a busy machine). Returns
 * the milliseconds it waited. */
static inline int64_t test_window_room(uint32_t size_s, int64_t need_ms)
{
	int64_t left = test_window_left_ms(size_s);

	if (left > need_ms)
		return 0;
	test_sleep_ms((int)left + 20);
	return left + 20;
}

/* A window size for a test's own namespace that never waits: the smallest
 * size from min_s up whose current window has more than need_s seconds
 * left (a window of size s has s - now % s left: consecutive sizes are
 * out of phase, so one within a few of min_s does, for need_s well below
 * min_s). Everything the test does within need_s then stays in one window,
 * on every node (windows start at the same instants everywhere). */
static inline uint32_t test_window_pick(uint32_t min_s, uint32_t need_s)
{
	uint32_t s = min_s;

	while (test_window_left_ms(s) <= (int64_t)need_s * 1000)
		s++;
	return s;
}

#endif /* TESTS_CLOCK_H */
