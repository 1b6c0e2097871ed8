/*
 * window.c - the window arithmetic of the reference library, exactly:
 *
 *   start  = floor(now / size) * size
 *   weight = (size - now % size) / size      (now % size = fmod, sub-second)
 *   rate   = current + previous * weight
 *
 * Pure functions of their arguments; see window.h for the contracts.
 *
 * Precision: everything is derived from one exact pos = now mod size and
 * the window index q with now = q * size + pos (see window_pos), so start,
 * weight and reset always agree with each other, even for
 * now = 1.7e9 + 0.25 or a hair below a boundary, where now / size rounded
 * lands on the wrong side of it.
 */
#include "agent/window.h"

#include <math.h>

/* Position of now in its window, in [0, size), exactly (the value fmod
 * would return, without glibc's fmod, which reduces bit by bit and costs
 * tens of nanoseconds for a Unix time). q = floor(now / size) can be one
 * too large when the division rounds up just below a boundary; then
 * now - q * size is negative and q - 1 is right. now - q * size is exact:
 * q * size is an integer below 2^53 and within a factor of two of now
 * (Sterbenz), or now < size and q = 0. Stores the window index in *q. */
static double window_pos(double now, uint32_t size, double *qp)
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

int64_t window_start(double now, uint32_t size)
{
	double q;

	window_pos(now, size, &q);
	return (int64_t)q * (int64_t)size;
}

double window_weight(double now, uint32_t size)
{
	double q;

	return ((double)size - window_pos(now, size, &q)) / (double)size;
}

double window_reset(double now, uint32_t size)
{
	double q;

	return (double)size - window_pos(now, size, &q);
}

double window_rate(double cur, double prev, double weight)
{
	return cur + prev * weight;
}

/*
 * With no more hits, the rate t seconds from now (rem = time left in the
 * current window, w = size) is:
 *
 *   t <  rem:  cur + prev * (rem - t) / w           previous window decays
 *   t >= rem:  cur * (w - (t - rem)) / w            cur became "previous"
 *
 * so the first instant where it is <= limit is:
 *
 *   rate now <= limit         0
 *   cur <= limit  (prev > 0)  rem - w * (limit - cur) / prev
 *   cur >  limit              rem + w * (1 - limit / cur)
 *
 * Fixed windows just wait for the end of the current one. A negative limit
 * is treated as 0 (a rate never falls below 0).
 */
double window_retry_after(double cur, double prev, double limit, double now, uint32_t size,
			  bool sliding)
{
	double w = (double)size, rem = window_reset(now, size);
	double lim = limit > 0 ? limit : 0;

	if (!sliding)
		return cur <= lim ? 0 : rem;
	if (window_rate(cur, prev, rem / w) <= lim)
		return 0;
	/* Here prev * weight > lim - cur >= 0 in the first case: no
	 * division by zero. */
	if (cur <= lim) {
		double t = rem - w * (lim - cur) / prev;

		return t > 0 ? t : 0;
	}
	return rem + w * (1 - lim / cur);
}
