/*
 * evtest.h - a libev loop for store tests: a 10 ms tick keeps
 * ev_run(EVRUN_ONCE) from sleeping past a deadline; runs until a flag or
 * a deadline; creates a strategy instance and waits until it is ready.
 */
#ifndef EVTEST_H
#define EVTEST_H

#include <ev.h>
#include <stdbool.h>

#include "strategies/strategy.h"

struct ev_loop *evtest_loop_new(void);
void evtest_loop_free(struct ev_loop *loop);

/* The loop's clock, updated. */
double evtest_now(struct ev_loop *loop);

/* Runs the loop until *flag or secs pass; returns *flag. */
bool evtest_run_until(struct ev_loop *loop, const bool *flag, double secs);

/* ops->create(loop, json), then runs the loop until ready or secs pass.
 * NULL with err when create refused; an instance (ready or not) else. */
struct strategy *evtest_create_ready(const struct strategy_ops *ops, struct ev_loop *loop,
				     const char *json, double secs, char *err, size_t errlen);

#endif /* EVTEST_H */
