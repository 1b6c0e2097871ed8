/*
 * window.h - pure window arithmetic (no state, no clock): where a window
 * starts, the sliding weight, and the times HAProxy needs for headers.
 * Windows start at multiples of their size in Unix time, so every node
 * agrees on them.
 */
#ifndef WINDOW_H
#define WINDOW_H

#include <stdbool.h>
#include <stdint.h>

/* floor(now / size) * size. */
int64_t window_start(double now, uint32_t size);

/* (size - now % size) / size, in (0, 1]: the weight of the previous window. */
double window_weight(double now, uint32_t size);

/* Seconds until the current window ends, in (0, size]. */
double window_reset(double now, uint32_t size);

/* cur + prev * weight. */
double window_rate(double cur, double prev, double weight);

/* Seconds from now until the rate falls back to `limit` if no more hits
 * come, given the current and previous window counts; 0 if it is already
 * <= limit. Sliding: the previous window's weight decays to 0 at the end
 * of the current window, then the current one decays over the next.
 * Fixed (sliding == false): the end of the current window. */
double window_retry_after(double cur, double prev, double limit, double now, uint32_t size,
			  bool sliding);

#endif /* WINDOW_H */
