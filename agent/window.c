/*
 * window.c - the window arithmetic of the reference library, exactly:
 *
 *   start  = floor(now / size) * size
 *   weight = (size - now % size) / size      (now % size = fmod, sub-second)
 *   rate   = current + previous * weight
 *
 * Pure functions of their arguments; see window.h for the contracts.
 *
 * Where a window starts, and now's exact position in it
 * (strategy_window_pos), are written once, in strategies/window_start.h,
 * for the stores too; start, weight and reset are all derived from that
 * one position, so they always agree with each other (see there for the
 * precision).
 */
#include "agent/window.h"
#include "strategies/window_start.h"

int64_t window_start(double now, uint32_t size)
{
	return strategy_window_start(now, size);
}

double window_weight(double now, uint32_t size)
{
	double q;

	return ((double)size - strategy_window_pos(now, size, &q)) / (double)size;
}

double window_reset(double now, uint32_t size)
{
	double q;

	return (double)size - strategy_window_pos(now, size, &q);
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
