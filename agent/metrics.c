/*
 * metrics.c - per-worker counters in shared memory (see metrics.h); their
 * page, GET /metrics, is agent/metrics_page.c's.
 */
#include "agent/metrics.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "agent/segment.h"

static struct metrics_worker metrics_private;
struct metrics_worker *metrics_me = &metrics_private;

const double metrics_sync_bounds[METRICS_NBUCKETS] = {
#define METRICS_BOUND(x) x,
	METRICS_SYNC_BUCKETS(METRICS_BOUND)
#undef METRICS_BOUND
};

static size_t metrics_bytes(int nworkers)
{
	return sizeof(struct metrics) + (size_t)nworkers * sizeof(struct metrics_worker);
}

struct metrics *metrics_new(int nworkers, char *err, size_t errlen)
{
	struct metrics *m = segment_new(metrics_bytes(nworkers));

	if (!m) {
		snprintf(err, errlen, "cannot map the metrics of %d workers (%zu bytes): %s",
			 nworkers, metrics_bytes(nworkers), strerror(errno));
		return NULL;
	}
	m->nworkers = nworkers;
	for (int i = 0; i < nworkers; i++)
		for (int ns = 0; ns < METRICS_NS; ns++)
			atomic_init(&m->w[i].store_up[ns], -1);
	return m;
}

void metrics_free(struct metrics *m)
{
	if (m)
		segment_free(m, metrics_bytes(m->nworkers));
}

void metrics_attach(struct metrics *m, int id)
{
	if (!m || id < 0 || id >= m->nworkers)
		return;
	metrics_me = &m->w[id];
	/* A worker starts with no connection: a killed predecessor's are
	 * gone with it (counters, which only grow, are kept). */
	for (int f = 0; f < FRONT_COUNT; f++)
		atomic_store_explicit(&metrics_me->connections[f], 0, memory_order_relaxed);
}

void metrics_sync_cycle(int ns, bool ok, double seconds)
{
	struct metrics_worker *w = metrics_me;
	size_t b = 0;

	if (ns < 0 || ns >= METRICS_NS)
		return;
	metrics_add(ok ? &w->sync_ok[ns] : &w->sync_failed[ns], 1);
	while (b < METRICS_NBUCKETS && seconds > metrics_sync_bounds[b])
		b++;
	if (b < METRICS_NBUCKETS)
		metrics_add(&w->sync_bucket[b], 1);
	metrics_add(&w->sync_count, 1);
	metrics_add(&w->sync_sum_us, seconds > 0 ? (uint64_t)(seconds * 1e6) : 0);
}

void metrics_sync_skipped(int ns)
{
	if (ns >= 0 && ns < METRICS_NS)
		metrics_add(&metrics_me->sync_skipped[ns], 1);
}
