/*
 * clock.h - the monotonic milliseconds and the EINTR-proof sleep that the
 * test helpers (agentproc, redis_server, pg_server) wait with.
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

static inline void test_sleep_ms(int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

#endif /* TESTS_CLOCK_H */
