/*
 * test_window.c - the window arithmetic (agent/window.c) against the
 * reference library's definitions and worked example, at boundaries, for
 * fixed windows, for retry_after, and with large sub-second timestamps.
 */
#include <criterion/criterion.h>
#include <math.h>

#include "agent/window.h"

#define EPS 1e-9

/* The reference's example: current 10, previous 20, window 60, 30 s into
 * the current window -> weight 0.5, rate 20. */
Test(window, reference_worked_example)
{
	double now = 1699999980.0 + 30;	/* 1699999980 = 60 * 28333333 */

	cr_assert_eq(window_start(now, 60), 1699999980);
	cr_assert_float_eq(window_weight(now, 60), 0.5, EPS);
	cr_assert_float_eq(window_rate(10, 20, window_weight(now, 60)), 20.0, EPS);
	cr_assert_float_eq(window_reset(now, 60), 30.0, EPS);
}

Test(window, start_is_floor_multiple_of_size)
{
	cr_assert_eq(window_start(0.0, 60), 0);
	cr_assert_eq(window_start(59.999, 60), 0);
	cr_assert_eq(window_start(60.0, 60), 60);
	cr_assert_eq(window_start(61.5, 60), 60);
	cr_assert_eq(window_start(44.0, 30), 30);
	cr_assert_eq(window_start(3599.0, 3600), 0);
	cr_assert_eq(window_start(7.9, 1), 7);
}

Test(window, exactly_on_boundary)
{
	/* now on a boundary: the previous window has full weight and the
	 * current one has its whole size left. */
	cr_assert_float_eq(window_weight(120.0, 60), 1.0, EPS);
	cr_assert_float_eq(window_reset(120.0, 60), 60.0, EPS);
	cr_assert_eq(window_start(120.0, 60), 120);
	cr_assert_float_eq(window_weight(1700000000.0, 1), 1.0, EPS);
	cr_assert_float_eq(window_reset(1700000000.0, 1), 1.0, EPS);
}

Test(window, just_before_boundary)
{
	double now = 179.75;

	cr_assert_eq(window_start(now, 60), 120);
	cr_assert_float_eq(window_weight(now, 60), 0.25 / 60, EPS);
	cr_assert_float_eq(window_reset(now, 60), 0.25, EPS);
	/* weight stays in (0, 1] */
	for (double t = 0; t < 200; t += 0.125) {
		double w = window_weight(t, 7);

		cr_assert(w > 0 && w <= 1, "weight %f at %f", w, t);
		cr_assert_float_eq(w, window_reset(t, 7) / 7, EPS);
		cr_assert_float_eq((double)window_start(t, 7) + (7 - window_reset(t, 7)), t, 1e-9);
	}
}

Test(window, fixed_window_ignores_previous)
{
	cr_assert_float_eq(window_rate(10, 20, 0.0), 10.0, EPS);
}

Test(window, large_now_keeps_sub_second_precision)
{
	double now = 1.7e9 + 0.25;

	cr_assert_eq(window_start(now, 1), 1700000000);
	cr_assert_float_eq(window_weight(now, 1), 0.75, EPS);
	cr_assert_float_eq(window_reset(now, 1), 0.75, EPS);
	/* 1700000000 = 60 * 28333333 + 20 */
	cr_assert_eq(window_start(now, 60), 1699999980);
	cr_assert_float_eq(window_reset(now, 60), 60 - 20.25, EPS);
	cr_assert_float_eq(window_weight(now, 60), (60 - 20.25) / 60, EPS);
	/* a millisecond before a boundary is still in the old window */
	now = 1700000039.999;	/* next boundary: 1700000040 */
	cr_assert_eq(window_start(now, 60), 1699999980);
	cr_assert_float_eq(window_reset(now, 60), 0.001, 1e-6);
}

Test(window, retry_after_under_limit_is_zero)
{
	/* rate = 5 + 4 * 0.5 = 7 <= 10 */
	cr_assert_float_eq(window_retry_after(5, 4, 10, 30, 60, true), 0.0, EPS);
	/* exactly at the limit is not over it */
	cr_assert_float_eq(window_retry_after(6, 8, 10, 30, 60, true), 0.0, EPS);
	cr_assert_float_eq(window_retry_after(10, 0, 10, 30, 60, false), 0.0, EPS);
}

/* The rate t seconds after now with no more hits (the model the retry
 * time is computed from), to check the answers independently. */
static double rate_later(double cur, double prev, double now, double t, uint32_t size)
{
	double s0 = (double)window_start(now, size), later = now + t;

	if (later < s0 + size)
		return window_rate(cur, prev, window_weight(later, size));
	if (later < s0 + 2.0 * size)
		return window_rate(0, cur, window_weight(later, size));
	return 0;
}

Test(window, retry_after_current_window_over_limit)
{
	/* c = 15 > L = 10, p = 0, 30 s into a 60 s window: wait 30 s for the
	 * window to end, then for 15 * w(t) to fall to 10: w = 2/3, 20 s in. */
	double r = window_retry_after(15, 0, 10, 30, 60, true);

	cr_assert_float_eq(r, 50.0, EPS);
	cr_assert(rate_later(15, 0, 30, r, 60) <= 10 + EPS);
	cr_assert(rate_later(15, 0, 30, r - 0.01, 60) > 10);
}

Test(window, retry_after_previous_window_dominated)
{
	/* c = 5 <= L = 10 < c + p * w = 5 + 20 * 0.5: the previous window
	 * must decay to weight 0.25, i.e. 15 s from now. */
	double r = window_retry_after(5, 20, 10, 30, 60, true);

	cr_assert_float_eq(r, 15.0, EPS);
	cr_assert_float_eq(rate_later(5, 20, 30, r, 60), 10.0, 1e-9);
	cr_assert(rate_later(5, 20, 30, r - 0.01, 60) > 10);
}

Test(window, retry_after_fixed_window)
{
	cr_assert_float_eq(window_retry_after(15, 100, 10, 30, 60, false), 30.0, EPS);
	cr_assert_float_eq(window_retry_after(5, 100, 10, 30, 60, false), 0.0, EPS);
	cr_assert_float_eq(window_retry_after(11, 0, 10, 120, 60, false), 60.0, EPS);
}

Test(window, retry_after_matches_model_everywhere)
{
	/* For a grid of states, the answer is the first instant at which the
	 * modelled rate is back at or under the limit. */
	const double counts[] = { 0, 1, 3, 9.5, 10, 12, 40 };
	const uint32_t size = 10;

	for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++)
		for (size_t j = 0; j < sizeof(counts) / sizeof(counts[0]); j++)
			for (double now = 100; now < 110; now += 0.75) {
				double c = counts[i], p = counts[j], L = 10;
				double r = window_retry_after(c, p, L, now, size, true);

				cr_assert(r >= 0 && r <= 2.0 * size, "r=%f", r);
				cr_assert(rate_later(c, p, now, r, size) <= L + 1e-9,
					  "c=%g p=%g now=%g r=%g", c, p, now, r);
				if (r > 0.001)
					cr_assert(rate_later(c, p, now, r - 0.001, size) > L,
						  "c=%g p=%g now=%g r=%g early", c, p, now, r);
			}
}

/* The fast exact position equals fmod() everywhere, including a hair
 * below and on boundaries, where now / size rounds across them. */
Test(window, matches_fmod_exactly)
{
	const uint32_t sizes[] = { 1, 7, 60, 3600, 86400, 2592000 };
	unsigned long long x = 88172645463325252ULL;

	for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
		uint32_t size = sizes[si];

		for (int i = 0; i < 20000; i++) {
			double now, k;

			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			k = (double)(x % (4000000000ULL / size));
			switch (i % 4) {
			case 0: now = k * size; break;
			case 1: now = nextafter(k * size, 0); break;
			case 2: now = nextafter(k * size, 1e300); break;
			default: now = k * size + (double)(x >> 40) / (double)(1 << 24) * size; break;
			}
			double pos = fmod(now, size);

			cr_assert_eq(window_reset(now, size), size - pos, "now %.17g size %u", now, size);
			cr_assert_eq(window_weight(now, size), (size - pos) / size);
			cr_assert_eq(window_start(now, size), (int64_t)(now - pos));
		}
	}
}
