/*
 * metrics_page.c - GET /metrics: every worker's counters (agent/metrics.h)
 * and the table's figures in the Prometheus text format, in the order of
 * METRICS_FAMILIES (see metrics_page.h, docs/METRICS.md).
 */
#include "agent/metrics_page.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "agent/limits.h"
#include "agent/ratelimit.h"
#include "agent/shm.h"

static const char *const metrics_err_labels[] = {
#define METRICS_ERR_LABEL(e, l) l,
	METRICS_ERRORS(METRICS_ERR_LABEL)
#undef METRICS_ERR_LABEL
};

static const char *const metrics_adm_labels[METRICS_ADM_COUNT] = {
#define METRICS_ADM_LABEL(e, l) [METRICS_ADM_##e] = l,
	METRICS_ADMISSIONS(METRICS_ADM_LABEL)
#undef METRICS_ADM_LABEL
};

static const char *const metrics_delay_labels[METRICS_DELAY_COUNT] = {
#define METRICS_DELAY_LABEL(e, l) [METRICS_DELAY_##e] = l,
	METRICS_DELAY_BOUNDS(METRICS_DELAY_LABEL)
#undef METRICS_DELAY_LABEL
};

static const char *const metrics_settle_labels[METRICS_SETTLE_COUNT] = {
#define METRICS_SETTLE_LABEL(e, l) [METRICS_SETTLE_##e] = l,
	METRICS_SETTLES(METRICS_SETTLE_LABEL)
#undef METRICS_SETTLE_LABEL
};

static const char *const metrics_peers_labels[METRICS_PEERS_COUNT] = {
#define METRICS_PEERS_LABEL(e, l) [METRICS_PEERS_##e] = l,
	METRICS_PEERS_REFUSED(METRICS_PEERS_LABEL)
#undef METRICS_PEERS_LABEL
};

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

static const struct {
	const char *name, *type, *help;
} metrics_families[METRICS_FAM_COUNT] = {
#define METRICS_FAM_ROW(e, n, t, h) [METRICS_FAM_##e] = { n, t, h },
	METRICS_FAMILIES(METRICS_FAM_ROW)
#undef METRICS_FAM_ROW
};

const char *metrics_family_name(enum metrics_family f)
{
	return (unsigned)f < METRICS_FAM_COUNT ? metrics_families[f].name : NULL;
}

/* What a scrape reads once: the namespaces and the table. */
struct scrape {
	const struct metrics *m;
	const struct rl *rl;
	size_t nns;
	const struct ns_def *ns[METRICS_NS];
	unsigned sid[METRICS_NS];                  /* where its counters are */
	char label[METRICS_NS][NS_NAME_MAX * 2];   /* escaped names */
	struct rl_ns_stats st[METRICS_NS];
	double pending[METRICS_NS];
};

/* The samples of family f if it is one of the checks answered, the
 * connections or the held hits. */
static void family_checks(struct out *o, const struct scrape *sc, enum metrics_family f)
{
	const struct metrics *m = sc->m;
	const char *name = metrics_families[f].name;

	switch (f) {
	case METRICS_FAM_HITS:
		for (size_t ns = 0; ns < sc->nns; ns++)
			for (int fr = 0; fr < FRONT_COUNT; fr++)
				put(o, "spoa_ratelimit_%s{namespace=\"%s\",front=\"%s\"} %llu\n", name,
				    sc->label[ns], front_name((enum front_id)fr),
				    (unsigned long long)SUM(m, hits[sc->sid[ns]][fr]));
		break;
	case METRICS_FAM_EXCEEDED:
	case METRICS_FAM_SHADOW_EXCEEDED:
		for (size_t ns = 0; ns < sc->nns; ns++)
			put(o, "spoa_ratelimit_%s{namespace=\"%s\"} %llu\n", name, sc->label[ns],
			    (unsigned long long)(f == METRICS_FAM_EXCEEDED
							 ? SUM(m, exceeded[sc->sid[ns]])
							 : SUM(m, shadow_exceeded[sc->sid[ns]])));
		break;
	case METRICS_FAM_ERRORS:
		for (int e = 0; e < METRICS_ERR_COUNT; e++)
			put(o, "spoa_ratelimit_%s{reason=\"%s\"} %llu\n", name, metrics_err_labels[e],
			    (unsigned long long)SUM(m, errors[e]));
		break;
	case METRICS_FAM_CONNECTIONS:
		for (int fr = 0; fr < FRONT_COUNT; fr++) {
			int64_t c = 0;
			for (int i = 0; i < m->nworkers; i++)
				c += atomic_load_explicit(&m->w[i].connections[fr],
							  memory_order_relaxed);
			put(o, "spoa_ratelimit_%s{front=\"%s\"} %lld\n", name, front_name((enum front_id)fr),
			    (long long)c);
		}
		break;
	case METRICS_FAM_DELAY_HELD:
		for (size_t ns = 0; ns < sc->nns; ns++)
			if (sc->ns[ns]->delay_max_ms > 0)
				put(o, "spoa_ratelimit_%s{namespace=\"%s\"} %llu\n", name, sc->label[ns],
				    (unsigned long long)SUM(m, delay_held[sc->sid[ns]]));
		break;
	case METRICS_FAM_DELAY_REFUSED:
		for (size_t ns = 0; ns < sc->nns; ns++)
			if (sc->ns[ns]->delay_max_ms > 0)
				for (int b = 0; b < METRICS_DELAY_COUNT; b++)
					put(o, "spoa_ratelimit_%s{namespace=\"%s\",bound=\"%s\"} %llu\n",
					    name, sc->label[ns], metrics_delay_labels[b],
					    (unsigned long long)SUM(m, delay_refused[sc->sid[ns]][b]));
		break;
	case METRICS_FAM_SETTLES:
		for (size_t ns = 0; ns < sc->nns; ns++)
			if (sc->ns[ns]->algorithm == NS_ALGO_WINDOW)
				for (int r = 0; r < METRICS_SETTLE_COUNT; r++)
					put(o, "spoa_ratelimit_%s{namespace=\"%s\",result=\"%s\"} %llu\n",
					    name, sc->label[ns], metrics_settle_labels[r],
					    (unsigned long long)SUM(m, settles[sc->sid[ns]][r]));
		break;
	default:
		break;
	}
}

/* The samples of family f if it is one of the shared table's. */
static void family_table(struct out *o, const struct scrape *sc, enum metrics_family f)
{
	const char *name = metrics_families[f].name;

	switch (f) {
	case METRICS_FAM_TABLE_KEYS:
		for (size_t ns = 0; ns < sc->nns; ns++)
			put(o, "spoa_ratelimit_%s{namespace=\"%s\"} %lld\n", name, sc->label[ns],
			    (long long)sc->st[ns].live);
		break;
	case METRICS_FAM_TABLE_CAPACITY:
		put(o, "spoa_ratelimit_%s %zu\n", name, rl_max_keys(sc->rl));
		break;
	case METRICS_FAM_TABLE_SHARE:
	case METRICS_FAM_TABLE_EVICTIONS:
	case METRICS_FAM_TABLE_REFUSED:
		for (size_t ns = 0; ns < sc->nns; ns++) {
			const struct rl_ns_stats *st = &sc->st[ns];
			uint64_t v = f == METRICS_FAM_TABLE_SHARE ? st->share
				     : f == METRICS_FAM_TABLE_EVICTIONS ? st->evicted : st->refused;
			put(o, "spoa_ratelimit_%s{namespace=\"%s\"} %llu\n", name, sc->label[ns],
			    (unsigned long long)v);
		}
		break;
	case METRICS_FAM_LIMIT_OVERRIDES:
	case METRICS_FAM_LIMIT_OVERRIDES_MAX:
		for (size_t ns = 0; ns < sc->nns; ns++)
			put(o, "spoa_ratelimit_%s{namespace=\"%s\"} %zu\n", name, sc->label[ns],
			    f == METRICS_FAM_LIMIT_OVERRIDES
				    ? limits_count(rl_limits(sc->rl), sc->sid[ns])
				    : ns_max_overrides(sc->ns[ns]));
		break;
	default:
		break;
	}
}

/* The samples of family f if it is one of the sync's: cycles, stores,
 * admissions. */
static void family_store(struct out *o, const struct scrape *sc, enum metrics_family f)
{
	const struct metrics *m = sc->m;
	const char *name = metrics_families[f].name;

	switch (f) {
	case METRICS_FAM_SYNC_CYCLES:
		for (size_t ns = 0; ns < sc->nns; ns++) {
			if (sc->ns[ns]->sync_rate < 0)
				continue;
			put(o, "spoa_ratelimit_%s{namespace=\"%s\",result=\"ok\"} %llu\n", name,
			    sc->label[ns], (unsigned long long)SUM(m, sync_ok[sc->sid[ns]]));
			put(o, "spoa_ratelimit_%s{namespace=\"%s\",result=\"failed\"} %llu\n", name,
			    sc->label[ns], (unsigned long long)SUM(m, sync_failed[sc->sid[ns]]));
			put(o, "spoa_ratelimit_%s{namespace=\"%s\",result=\"skipped\"} %llu\n", name,
			    sc->label[ns], (unsigned long long)SUM(m, sync_skipped[sc->sid[ns]]));
		}
		break;
	case METRICS_FAM_SYNC_DURATION: {
		uint64_t cum = 0;
		for (size_t b = 0; b < METRICS_NBUCKETS; b++) {
			cum += SUM(m, sync_bucket[b]);
			put(o, "spoa_ratelimit_%s_bucket{le=\"%g\"} %llu\n", name, metrics_sync_bounds[b],
			    (unsigned long long)cum);
		}
		put(o, "spoa_ratelimit_%s_bucket{le=\"+Inf\"} %llu\n", name,
		    (unsigned long long)SUM(m, sync_count));
		put(o, "spoa_ratelimit_%s_sum %.6f\n", name, (double)SUM(m, sync_sum_us) / 1e6);
		put(o, "spoa_ratelimit_%s_count %llu\n", name, (unsigned long long)SUM(m, sync_count));
		break;
	}
	case METRICS_FAM_STORE_UP:
		for (size_t ns = 0; ns < sc->nns; ns++) {
			int up = -1;
			if (sc->ns[ns]->sync_rate < 0)
				continue;
			for (int i = 0; i < m->nworkers; i++) {
				int v = atomic_load_explicit(&m->w[i].store_up[sc->sid[ns]],
							  memory_order_relaxed);
				if (v >= 0)
					up = up < 0 ? v : (v < up ? v : up);
			}
			put(o, "spoa_ratelimit_%s{namespace=\"%s\"} %d\n", name, sc->label[ns],
			    up < 0 ? 0 : up);
		}
		break;
	case METRICS_FAM_STORE_NODES:
		for (size_t ns = 0; ns < sc->nns; ns++)
			if (sc->ns[ns]->sync_rate >= 0)
				put(o, "spoa_ratelimit_%s{namespace=\"%s\"} %u\n", name, sc->label[ns],
				    rl_active_nodes(sc->rl, (int)ns));
		break;
	case METRICS_FAM_STORE_PENDING:
		for (size_t ns = 0; ns < sc->nns; ns++)
			if (sc->ns[ns]->sync_rate >= 0)
				put(o, "spoa_ratelimit_%s{namespace=\"%s\"} %g\n", name, sc->label[ns],
				    sc->pending[ns]);
		break;
	case METRICS_FAM_ADMISSIONS:
		for (size_t ns = 0; ns < sc->nns; ns++)
			if (sc->ns[ns]->sync_rate > 0)
				for (int a = 0; a < METRICS_ADM_COUNT; a++)
					put(o, "spoa_ratelimit_%s{namespace=\"%s\",by=\"%s\"} %llu\n",
					    name, sc->label[ns], metrics_adm_labels[a],
					    (unsigned long long)SUM(m, admissions[sc->sid[ns]][a]));
		break;
	default:
		break;
	}
}

/* The samples of family f if it is one of the peers front's (only when a
 * namespace counts HAProxy tables: haproxy_tables). */
static void family_peers(struct out *o, const struct scrape *sc, enum metrics_family f)
{
	const struct metrics *m = sc->m;
	const char *name = metrics_families[f].name;
	bool any = false;

	for (size_t ns = 0; ns < sc->nns; ns++)
		any |= sc->ns[ns]->haproxy.from[0] != '\0';
	if (!any)
		return;
	switch (f) {
	case METRICS_FAM_PEERS_NODES:
		put(o, "spoa_ratelimit_%s %llu\n", name, (unsigned long long)SUM(m, peers_nodes));
		break;
	case METRICS_FAM_PEERS_UPDATES:
	case METRICS_FAM_PEERS_PUSHES:
		for (size_t ns = 0; ns < sc->nns; ns++)
			if (sc->ns[ns]->haproxy.from[0])
				put(o, "spoa_ratelimit_%s{namespace=\"%s\"} %llu\n", name, sc->label[ns],
				    (unsigned long long)(f == METRICS_FAM_PEERS_UPDATES
								 ? SUM(m, peers_updates[sc->sid[ns]])
								 : SUM(m, peers_pushes[sc->sid[ns]])));
		break;
	case METRICS_FAM_PEERS_REFUSED:
		for (int r = 0; r < METRICS_PEERS_COUNT; r++)
			put(o, "spoa_ratelimit_%s{reason=\"%s\"} %llu\n", name, metrics_peers_labels[r],
			    (unsigned long long)SUM(m, peers_refused[r]));
		break;
	case METRICS_FAM_PEERS_LAST_UPDATE: {
		uint64_t last = 0;
		for (int i = 0; i < m->nworkers; i++) {
			uint64_t v = atomic_load_explicit(&m->w[i].peers_last_update_ms,
							  memory_order_relaxed);
			last = v > last ? v : last;
		}
		put(o, "spoa_ratelimit_%s %.3f\n", name, (double)last / 1000.0);
		break;
	}
	default:
		break;
	}
}

/* One family's samples, after its HELP and TYPE lines. */
static void family(struct out *o, const struct scrape *sc, enum metrics_family f)
{
	family_checks(o, sc, f);
	family_table(o, sc, f);
	family_store(o, sc, f);
	family_peers(o, sc, f);
}

long metrics_render(const struct metrics *m, const struct rl *rl, char *buf, size_t cap)
{
	struct out o = { .buf = buf, .cap = cap };
	static struct scrape sc;    /* large; one scrape at a time per process */
	size_t n = rl_namespace_count(rl);

	memset(&sc, 0, sizeof(sc));
	sc.m = m;
	sc.rl = rl;
	sc.nns = n < METRICS_NS ? n : METRICS_NS;
	for (size_t ns = 0; ns < sc.nns; ns++) {
		sc.ns[ns] = rl_namespace_def(rl, (int)ns);
		sc.sid[ns] = rl_shm_ns(rl, (int)ns);
		label(sc.ns[ns]->name, sc.label[ns], sizeof(sc.label[ns]));
		rl_ns_stats(rl, (int)ns, &sc.st[ns]);
	}
	/* Unpushed hits (diffs the store has not confirmed): one pass over
	 * the table. */
	struct shm_table *t = rl_shm(rl);
	for (uint32_t i = shm_next_used(t, 0); i < shm_nslots(t); i = shm_next_used(t, i + 1)) {
		struct shm_entry e;
		int ns;
		if (shm_read(t, i, &e) == 0 && e.diff > 0 && (ns = rl_ns_of_shm(rl, e.ns)) >= 0 &&
		    ns < METRICS_NS)
			sc.pending[ns] += e.diff;
	}
	for (int f = 0; f < METRICS_FAM_COUNT; f++) {
		const char *name = metrics_families[f].name;
		put(&o, "# HELP spoa_ratelimit_%s %s\n# TYPE spoa_ratelimit_%s %s\n", name,
		    metrics_families[f].help, name, metrics_families[f].type);
		family(&o, &sc, (enum metrics_family)f);
	}
	if (o.overflow)
		return -1;
	return (long)o.len;
}
