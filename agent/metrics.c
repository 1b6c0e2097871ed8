/*
 * metrics.c - per-worker counters in shared memory and their Prometheus
 * text (see metrics.h, docs/METRICS.md).
 */
#include "agent/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "agent/ratelimit.h"
#include "agent/shm.h"

struct metrics {
	int nworkers;
	struct metrics_worker w[];
};

static struct metrics_worker metrics_private;
struct metrics_worker *metrics_me = &metrics_private;

static const double metrics_bounds[] = {
#define METRICS_BOUND(x) x,
	METRICS_SYNC_BUCKETS(METRICS_BOUND)
#undef METRICS_BOUND
};

static const char *const metrics_err_labels[] = {
#define METRICS_ERR_LABEL(e, l) l,
	METRICS_ERRORS(METRICS_ERR_LABEL)
#undef METRICS_ERR_LABEL
};

static const char *const metrics_front_labels[METRICS_FRONTS] = { "spop", "http" };

static size_t metrics_bytes(int nworkers)
{
	return sizeof(struct metrics) + (size_t)nworkers * sizeof(struct metrics_worker);
}

struct metrics *metrics_new(int nworkers)
{
	struct metrics *m = mmap(NULL, metrics_bytes(nworkers), PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED)
		return NULL;
	m->nworkers = nworkers;
	for (int i = 0; i < nworkers; i++)
		for (int ns = 0; ns < METRICS_NS; ns++)
			atomic_init(&m->w[i].store_up[ns], -1);
	return m;
}

void metrics_free(struct metrics *m)
{
	if (m)
		munmap(m, metrics_bytes(m->nworkers));
}

void metrics_attach(struct metrics *m, int id)
{
	if (m && id >= 0 && id < m->nworkers)
		metrics_me = &m->w[id];
}

void metrics_sync_cycle(int ns, bool ok, double seconds)
{
	struct metrics_worker *w = metrics_me;
	size_t b = 0;

	if (ns < 0 || ns >= METRICS_NS)
		return;
	metrics_add(ok ? &w->sync_ok[ns] : &w->sync_failed[ns], 1);
	while (b < METRICS_NBUCKETS && seconds > metrics_bounds[b])
		b++;
	if (b < METRICS_NBUCKETS)
		metrics_add(&w->sync_bucket[b], 1);
	metrics_add(&w->sync_count, 1);
	metrics_add(&w->sync_sum_us, seconds > 0 ? (uint64_t)(seconds * 1e6) : 0);
}

/* ---- rendering ---- */

struct out {
	char *buf;
	size_t cap, len;
	bool overflow;
};

static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (o->overflow)
		return;
	va_start(ap, fmt);
	n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= o->cap - o->len) {
		o->overflow = true;
		return;
	}
	o->len += (size_t)n;
}

/* A label value: backslash, double quote and newline escaped. */
static const char *label(const char *s, char *buf, size_t cap)
{
	size_t o = 0;

	for (; *s && o + 3 < cap; s++) {
		if (*s == '\\' || *s == '"') {
			buf[o++] = '\\';
			buf[o++] = *s;
		} else if (*s == '\n') {
			buf[o++] = '\\';
			buf[o++] = 'n';
		} else {
			buf[o++] = *s;
		}
	}
	buf[o] = '\0';
	return buf;
}

static uint64_t sum_u(const struct metrics *m, size_t off)
{
	uint64_t s = 0;

	for (int i = 0; i < m->nworkers; i++)
		s += atomic_load_explicit((const _Atomic uint64_t *)((const char *)&m->w[i] + off),
					  memory_order_relaxed);
	return s;
}

#define SUM(m, field) sum_u(m, offsetof(struct metrics_worker, field))

static void head(struct out *o, const char *name, const char *type, const char *help)
{
	put(o, "# HELP spoa_ratelimit_%s %s\n# TYPE spoa_ratelimit_%s %s\n", name, help, name,
	    type);
}

long metrics_render(const struct metrics *m, const struct config *cfg, const struct rl *rl,
		    char *buf, size_t cap)
{
	struct out o = { .buf = buf, .cap = cap };
	char ns_label[NS_NAME_MAX * 2];
	size_t nns = cfg->n_ns < METRICS_NS ? cfg->n_ns : METRICS_NS;
	double pending[METRICS_NS] = { 0 };
	struct rl_ns_stats st[METRICS_NS];

	for (size_t ns = 0; ns < nns; ns++) {
		memset(&st[ns], 0, sizeof(st[ns]));
		rl_ns_stats(rl, (int)ns, &st[ns]);
	}

	head(&o, "hits_total", "counter", "Rate-limit checks answered (counted or read), "
	     "by namespace and front.");
	for (size_t ns = 0; ns < nns; ns++)
		for (int f = 0; f < METRICS_FRONTS; f++)
			put(&o, "spoa_ratelimit_hits_total{namespace=\"%s\",front=\"%s\"} %llu\n",
			    label(cfg->ns[ns].name, ns_label, sizeof(ns_label)),
			    metrics_front_labels[f], (unsigned long long)SUM(m, hits[ns][f]));
	head(&o, "exceeded_total", "counter", "Checks answered exceeded (denied).");
	for (size_t ns = 0; ns < nns; ns++)
		put(&o, "spoa_ratelimit_exceeded_total{namespace=\"%s\"} %llu\n",
		    label(cfg->ns[ns].name, ns_label, sizeof(ns_label)),
		    (unsigned long long)SUM(m, exceeded[ns]));
	head(&o, "errors_total", "counter", "Checks answered with an error, and connections "
	     "closed on bad input, by reason.");
	for (int e = 0; e < METRICS_ERR_COUNT; e++)
		put(&o, "spoa_ratelimit_errors_total{reason=\"%s\"} %llu\n", metrics_err_labels[e],
		    (unsigned long long)SUM(m, errors[e]));

	/* The table: live entries and evictions per namespace, unpushed
	 * hits (diffs the store has not confirmed), one pass over it. */
	struct shm_table *t = rl_shm(rl);
	for (uint32_t i = shm_next_used(t, 0); i < shm_nslots(t); i = shm_next_used(t, i + 1)) {
		struct shm_entry e;
		if (shm_read(t, i, &e) == 0 && e.ns < METRICS_NS && e.diff > 0)
			pending[e.ns] += e.diff;
	}
	head(&o, "table_keys", "gauge", "Entries of the counter table in use, by namespace.");
	for (size_t ns = 0; ns < nns; ns++)
		put(&o, "spoa_ratelimit_table_keys{namespace=\"%s\"} %lld\n",
		    label(cfg->ns[ns].name, ns_label, sizeof(ns_label)), (long long)st[ns].live);
	head(&o, "table_capacity", "gauge", "Entries of the counter table (max_keys).");
	put(&o, "spoa_ratelimit_table_capacity %zu\n", cfg->max_keys);
	head(&o, "table_share", "gauge", "Entries guaranteed to a namespace.");
	for (size_t ns = 0; ns < nns; ns++)
		put(&o, "spoa_ratelimit_table_share{namespace=\"%s\"} %llu\n",
		    label(cfg->ns[ns].name, ns_label, sizeof(ns_label)),
		    (unsigned long long)st[ns].share);
	head(&o, "table_evictions_total", "counter", "Entries evicted to make room for a new "
	     "key, by namespace.");
	for (size_t ns = 0; ns < nns; ns++)
		put(&o, "spoa_ratelimit_table_evictions_total{namespace=\"%s\"} %llu\n",
		    label(cfg->ns[ns].name, ns_label, sizeof(ns_label)),
		    (unsigned long long)st[ns].evicted);
	head(&o, "table_refused_total", "counter", "New keys refused for want of room, even by "
	     "eviction, by namespace.");
	for (size_t ns = 0; ns < nns; ns++)
		put(&o, "spoa_ratelimit_table_refused_total{namespace=\"%s\"} %llu\n",
		    label(cfg->ns[ns].name, ns_label, sizeof(ns_label)),
		    (unsigned long long)st[ns].refused);

	head(&o, "connections", "gauge", "Open connections, by front.");
	for (int f = 0; f < METRICS_FRONTS; f++) {
		int64_t c = 0;
		for (int i = 0; i < m->nworkers; i++)
			c += atomic_load_explicit(&m->w[i].connections[f], memory_order_relaxed);
		put(&o, "spoa_ratelimit_connections{front=\"%s\"} %lld\n", metrics_front_labels[f],
		    (long long)c);
	}

	head(&o, "sync_cycles_total", "counter", "Sync cycles (pushes of a node's diffs to the "
	     "store), by namespace and result.");
	for (size_t ns = 0; ns < nns; ns++) {
		if (cfg->ns[ns].sync_rate < 0)
			continue;
		label(cfg->ns[ns].name, ns_label, sizeof(ns_label));
		put(&o, "spoa_ratelimit_sync_cycles_total{namespace=\"%s\",result=\"ok\"} %llu\n",
		    ns_label, (unsigned long long)SUM(m, sync_ok[ns]));
		put(&o, "spoa_ratelimit_sync_cycles_total{namespace=\"%s\",result=\"failed\"} %llu\n",
		    ns_label, (unsigned long long)SUM(m, sync_failed[ns]));
	}
	head(&o, "sync_duration_seconds", "histogram", "Time of a sync cycle, from the push to "
	     "the store's answer.");
	uint64_t cum = 0;
	for (size_t b = 0; b < METRICS_NBUCKETS; b++) {
		cum += SUM(m, sync_bucket[b]);
		put(&o, "spoa_ratelimit_sync_duration_seconds_bucket{le=\"%g\"} %llu\n",
		    metrics_bounds[b], (unsigned long long)cum);
	}
	put(&o, "spoa_ratelimit_sync_duration_seconds_bucket{le=\"+Inf\"} %llu\n",
	    (unsigned long long)SUM(m, sync_count));
	put(&o, "spoa_ratelimit_sync_duration_seconds_sum %.6f\n", (double)SUM(m, sync_sum_us) / 1e6);
	put(&o, "spoa_ratelimit_sync_duration_seconds_count %llu\n",
	    (unsigned long long)SUM(m, sync_count));

	head(&o, "store_up", "gauge", "1 when every worker is connected to the namespace's "
	     "store, else 0.");
	for (size_t ns = 0; ns < nns; ns++) {
		int up = -1;
		if (cfg->ns[ns].sync_rate < 0)
			continue;
		for (int i = 0; i < m->nworkers; i++) {
			int v = atomic_load_explicit(&m->w[i].store_up[ns], memory_order_relaxed);
			if (v >= 0)
				up = up < 0 ? v : (v < up ? v : up);
		}
		put(&o, "spoa_ratelimit_store_up{namespace=\"%s\"} %d\n",
		    label(cfg->ns[ns].name, ns_label, sizeof(ns_label)), up < 0 ? 0 : up);
	}
	head(&o, "store_pending_hits", "gauge", "Hits counted on this node that the store has "
	     "not confirmed yet, by namespace.");
	for (size_t ns = 0; ns < nns; ns++) {
		if (cfg->ns[ns].sync_rate < 0)
			continue;
		put(&o, "spoa_ratelimit_store_pending_hits{namespace=\"%s\"} %g\n",
		    label(cfg->ns[ns].name, ns_label, sizeof(ns_label)), pending[ns]);
	}
	if (o.overflow)
		return -1;
	return (long)o.len;
}
