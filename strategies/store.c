/*
 * store.c - the parts every store shares (strategies/store.h): the done
 * queue and its delivery, the callback guard, the silence timer, the
 * backoff and the option readers.
 */
#include "strategies/store.h"
#include "strategies/container.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static void store_on_kick(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct store_core *c = container_of(w, struct store_core, kick);

	(void)loop;
	(void)revents;
	store_enter(c);
	if (c->kick_fn && !c->destroyed)
		c->kick_fn(c);
	store_leave(c);
}

void store_core_init(struct store_core *c, struct ev_loop *loop, double timeout,
		     void (*kick_fn)(struct store_core *), void (*free_fn)(struct store_core *))
{
	memset(c, 0, sizeof(*c));
	c->loop = loop;
	c->timeout = timeout;
	c->kick_fn = kick_fn;
	c->free_fn = free_fn;
	ev_timer_init(&c->kick, store_on_kick, 0., 0.);
}

void store_kick(struct store_core *c)
{
	if (!ev_is_active(&c->kick)) {
		ev_timer_set(&c->kick, 0., 0.);
		ev_timer_start(c->loop, &c->kick);
	}
}

/* Delivers the done queue in order. A callback may start operations,
 * finish others (they are delivered too) or destroy the instance: then
 * the rest is still delivered (destroy() fails everything first). */
static void store_deliver_all(struct store_core *c)
{
	while (c->done_head) {
		struct store_op *op = c->done_head;

		c->done_head = op->next;
		if (!c->done_head)
			c->done_tail = NULL;
		op->deliver(op);
	}
}

void store_enter(struct store_core *c)
{
	c->depth++;
}

bool store_leave(struct store_core *c)
{
	if (c->depth == 1)
		store_deliver_all(c);
	if (--c->depth == 0 && c->destroyed) {
		ev_timer_stop(c->loop, &c->kick);
		c->free_fn(c);
		return true;
	}
	return false;
}

void store_destroy(struct store_core *c)
{
	c->destroyed = true;
	ev_timer_stop(c->loop, &c->kick);
	store_enter(c);
	store_deliver_all(c);
	store_leave(c);
}

void store_op_start(struct store_core *c, struct store_op *op,
		    void (*timer_cb)(struct ev_loop *, ev_timer *, int),
		    void (*deliver)(struct store_op *))
{
	op->core = c;
	op->deliver = deliver;
	/* The loop's time may be as old as the work done since it last
	 * polled (a big batch written out): the clock starts now, or the
	 * operation could time out before it was even sent (one vDSO
	 * clock read per operation, not per counter). */
	ev_now_update(c->loop);
	op->since = ev_now(c->loop);
	ev_timer_init(&op->timer, timer_cb, c->timeout, 0.);
	ev_timer_start(c->loop, &op->timer);
}

bool store_op_silent(struct store_op *op)
{
	return store_op_silent_since(op, op->core->last_activity);
}

bool store_op_silent_since(struct store_op *op, ev_tstamp last_activity)
{
	struct store_core *c = op->core;
	ev_tstamp from = last_activity > op->since ? last_activity : op->since;
	ev_tstamp left = from + c->timeout - ev_now(c->loop);

	if (left > 0.0005) {
		op->timer.repeat = left;
		ev_timer_again(c->loop, &op->timer);
		return false;
	}
	return true;
}

void store_op_finish(struct store_op *op)
{
	struct store_core *c = op->core;

	if (op->finished)
		return;
	op->finished = true;
	ev_timer_stop(c->loop, &op->timer);
	op->next = NULL;
	if (c->done_tail)
		c->done_tail->next = op;
	else
		c->done_head = op;
	c->done_tail = op;
	/* Inside one of our callbacks, store_leave() delivers it. */
	if (c->depth == 0)
		store_kick(c);
}

void store_backoff_init(struct store_backoff *b, double min, double max)
{
	b->min = min;
	b->max = max;
	b->next = min;
}

double store_backoff_take(struct store_backoff *b)
{
	double d = b->next;

	b->next = b->next * 2 > b->max ? b->max : b->next * 2;
	return d;
}

void store_backoff_reset(struct store_backoff *b)
{
	b->next = b->min;
}

int store_opts_load(const char *text, json_t **root, char *err, size_t errlen)
{
	json_error_t jerr;

	*root = NULL;
	if (!text || !*text)
		return 0;
	*root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
	if (!*root) {
		snprintf(err, errlen, "strategy_opts: invalid JSON at line %d column %d: %s",
			 jerr.line, jerr.column, jerr.text);
		return -1;
	}
	if (!json_is_object(*root)) {
		snprintf(err, errlen, "strategy_opts: expected a JSON object, got %s",
			 store_json_type(*root));
		json_decref(*root);
		*root = NULL;
		return -1;
	}
	return 0;
}

const char *store_json_type(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT:  return "an object";
	case JSON_ARRAY:   return "an array";
	case JSON_STRING:  return "a string";
	case JSON_INTEGER: return "an integer";
	case JSON_REAL:    return "a number with a fraction";
	case JSON_TRUE:
	case JSON_FALSE:   return "a boolean";
	case JSON_NULL:    return "null";
	default:           return "something else";
	}
}

int store_opt_int(const char *name, const json_t *v, long long lo, long long hi,
		  long long *out, char *err, size_t errlen)
{
	long long x;

	if (!json_is_integer(v)) {
		snprintf(err, errlen, "%s: expected an integer from %lld to %lld, got %s", name, lo,
			 hi, store_json_type(v));
		return -1;
	}
	x = json_integer_value(v);
	if (x < lo || x > hi) {
		snprintf(err, errlen, "%s: expected an integer from %lld to %lld, got %lld", name,
			 lo, hi, x);
		return -1;
	}
	*out = x;
	return 0;
}

int store_opt_str(const char *name, const json_t *v, size_t max, const char **out, size_t *len,
		  char *err, size_t errlen)
{
	if (!json_is_string(v)) {
		snprintf(err, errlen, "%s: expected a string, got %s", name, store_json_type(v));
		return -1;
	}
	*out = json_string_value(v);
	*len = json_string_length(v);
	if (*len == 0 || *len > max) {
		snprintf(err, errlen, "%s: expected a string of 1 to %zu bytes, got %zu", name, max,
			 *len);
		return -1;
	}
	return 0;
}

int store_opt_unknown(const char *name, const char *known, char *err, size_t errlen)
{
	snprintf(err, errlen, "%.64s: unknown option (known: %s)", name, known);
	return -1;
}

int store_admit_check(struct strategy_admit *a, size_t n, char errstr[STRATEGY_ERR_MAX])
{
	for (size_t i = 0; i < n; i++) {
		const char *why = NULL;

		if (a[i].size == 0)
			why = "window size 0";
		else if (!isfinite(a[i].diff) || !isfinite(a[i].cost) || !isfinite(a[i].limit) ||
			 !isfinite(a[i].weight) || a[i].cost < 0 || a[i].weight < 0 ||
			 a[i].weight > 1)
			why = "diff, cost, limit or weight out of range";
		else if (!(a[i].want >= 0) || !isfinite(a[i].want))
			why = "want out of range";
		else if ((unsigned)a[i].step >= STRATEGY_STEPS || a[i].step != a[0].step)
			why = "step unknown, or not the call's first";
		else if (a[i].step == STRATEGY_STEP_TAT &&
			 (!(a[i].limit > 0) || !(a[i].burst >= 1) || !isfinite(a[i].burst)))
			why = "a TAT's limit or burst out of range";
		else if (a[i].step == STRATEGY_STEP_LEASE &&
			 (!(a[i].limit >= 0) || !(a[i].lease_s > 0) || !isfinite(a[i].lease_s) ||
			  a[i].lease_len > STRATEGY_LEASE_MAX || (a[i].lease_len == 0 && a[i].cost > 0)))
			why = "a lease's limit, life or id out of range";
		if (why) {
			if (errstr)
				snprintf(errstr, STRATEGY_ERR_MAX, "admission %zu: %s", i, why);
			return -1;
		}
		a[i].ok = a[i].admitted = false;
		a[i].grant = 0;
		if (a[i].nodes == 0 || a[i].cost == 0)
			a[i].want = 0;
	}
	return 0;
}
