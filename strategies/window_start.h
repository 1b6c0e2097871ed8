/*
 * window_start.h - where a window starts: the one definition, for the
 * library (agent/window.c: window_start, window_weight, window_reset) and
 * the stores (the current and previous windows get_counters reads). It
 * lives at the lower layer, as container.h does: agent/ may include
 * strategies/, never the reverse.
 *
 *   start = floor(now / size) * size         now = q * size + pos
 *
 * Windows start at multiples of their size in Unix time, so every node and
 * every store agrees on them. now may have a fraction (the library) or be
 * whole seconds (the stores pass their int64_t as a double: exact below
 * 2^53 s, which every Unix time is).
 *
 * Precision: everything is derived from one exact pos = now mod size and
 * the window index q (strategy_window_pos), so start, weight and reset
 * always agree with each other, even for now = 1.7e9 + 0.25 or a hair
 * below a boundary, where now / size rounded lands on the wrong side of it.
 */
#ifndef WINDOW_START_H
#define WINDOW_START_H

#include <math.h>
#include <stdint.h>

/* Position of now in its window, in [0, size), exactly (the value fmod
 * would return, without glibc's fmod, which reduces bit by bit and costs
 * tens of nanoseconds for a Unix time). q = floor(now / size) can be one
 * too large when the division rounds up just below a boundary; then
 * now - q * size is negative and q - 1 is right. now - q * size is exact:
 * q * size is an integer below 2^53 and within a factor of two of now
 * (Sterbenz), or now < size and q = 0. Stores the window index in *q.
 * size > 0. */
static inline double strategy_window_pos(double now, uint32_t size, double *qp)
{
	double x = now / (double)size;
	/* Truncation is floor for x >= 0 and is two instructions, where
	 * floor() without SSE4.1 is a libm-style bit dance. */
	double q = x >= 0 && x < 9007199254740992.0 ? (double)(int64_t)x : floor(x);
	double pos = now - q * (double)size;

	if (pos < 0) {
		q -= 1;
		pos = now - q * (double)size;
	}
	*qp = q;
	return pos;
}

/* floor(now / size) * size: the start, in Unix seconds, of the window of
 * size seconds (> 0) that holds now (also before 1970). */
static inline int64_t strategy_window_start(double now, uint32_t size)
{
	double q;

	strategy_window_pos(now, size, &q);
	return (int64_t)q * (int64_t)size;
}

#endif /* WINDOW_START_H */
