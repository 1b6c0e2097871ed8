/*
 * metrics_page.h - GET /metrics: the Prometheus text of every family of
 * agent/metrics.h, from every worker's counters and the shared table.
 */
#ifndef METRICS_PAGE_H
#define METRICS_PAGE_H

#include <stddef.h>

#include "agent/metrics.h"

struct rl;

/* The name of a family (without the prefix), for tests and docs; NULL
 * past the last. */
const char *metrics_family_name(enum metrics_family f);

/* Writes the Prometheus text of every family (the workers' counters of m,
 * the namespaces and table of rl) into buf (at most cap bytes,
 * NUL-terminated). Returns the length, or -1 when it does not fit. */
long metrics_render(const struct metrics *m, const struct rl *rl, char *buf, size_t cap);

#endif /* METRICS_PAGE_H */
