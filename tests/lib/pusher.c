/*
 * pusher.c - see pusher.h.
 */
#include "tests/lib/pusher.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

void pusher_init(struct pusher *p, const struct strategy_ops *ops, struct strategy *s,
		 const char *ns, int64_t start, int id)
{
	memset(p, 0, sizeof(*p));
	p->ops = ops;
	p->s = s;
	p->ns = ns;
	p->start = start;
	p->id = id;
	for (int k = 0; k < PUSHER_KEYS; k++)
		snprintf(p->keys[k], sizeof(p->keys[k]), "key%d", k);
}

static void pusher_done(void *arg, int status, const char *errstr)
{
	struct pusher *p = arg;
	size_t k = 0;

	p->busy = false;
	if (status < 0) {
		p->failed++;
		snprintf(p->last_err, sizeof(p->last_err), "%s", errstr ? errstr : "");
	}
	for (size_t i = 0; i < p->n; i++) {
		if (p->b[i].ok) {
			p->local[p->idx[i]] -= p->b[i].diff;
			continue;
		}
		p->b[k] = p->b[i];
		p->idx[k++] = p->idx[i];
	}
	p->n = k;
	p->retry = k > 0;
}

void pusher_step(struct pusher *p, bool hit)
{
	char err[STRATEGY_ERR_MAX];

	if (hit) {
		for (int k = 0; k < PUSHER_KEYS; k++)
			p->local[k] += 1;
		p->hits += 1;
	}
	if (p->busy)
		return;
	if (!p->retry) {
		p->n = 0;
		for (unsigned k = 0; k < PUSHER_KEYS; k++) {
			if (p->local[k] == 0)
				continue;
			p->b[p->n] = (struct strategy_counter){
				.ns = p->ns, .ns_len = strlen(p->ns), .key = p->keys[k],
				.key_len = strlen(p->keys[k]), .start = p->start, .size = 60,
				.diff = p->local[k] };
			p->idx[p->n++] = k;
		}
		if (p->n == 0)
			return;
		snprintf(p->token, sizeof(p->token), "pusher%d-%u", p->id, ++p->seq);
	} else {
		p->resent++;
	}
	for (size_t i = 0; i < p->n; i++)
		p->b[i].ok = false;
	if (p->ops->push_diffs(p->s, p->b, p->n, p->token, pusher_done, p, err) < 0) {
		snprintf(p->last_err, sizeof(p->last_err), "%s", err);
		if (!p->retry)
			p->n = 0;       /* not sent: no doubt, a new token next time */
		return;
	}
	p->pushes++;
	p->busy = true;
}

static double pusher_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

bool pusher_drain(struct pusher *p, struct ev_loop *loop, double secs)
{
	double end = pusher_now() + secs;

	for (;;) {
		bool left = p->busy || p->retry;

		for (int k = 0; k < PUSHER_KEYS; k++)
			left |= p->local[k] != 0;
		if (!left)
			return true;
		if (pusher_now() > end)
			return false;
		pusher_step(p, false);
		ev_run(loop, EVRUN_ONCE);
	}
}
