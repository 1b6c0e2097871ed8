/*
 * ns.c - the one validator of a namespace's settings (agent/ns.h). The
 * configuration reports its messages under the JSON path of the namespace,
 * the library under the namespace's name.
 */
#include "agent/ns.h"
#include "agent/envoy_match.h"
#include "agent/peers_wire.h"
#include "strategies/strategy.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *const ns_algorithm_names[NS_ALGO_COUNT] = {
#define NS_ALGO_NAME(id, name, store) [id] = name,
	NS_ALGORITHMS(NS_ALGO_NAME)
#undef NS_ALGO_NAME
};

/* Can the stores count it (NS_ALGORITHMS)? */
static const bool ns_algorithm_store[NS_ALGO_COUNT] = {
#define NS_ALGO_STORE(id, name, store) [id] = store,
	NS_ALGORITHMS(NS_ALGO_STORE)
#undef NS_ALGO_STORE
};

const char *const ns_window_type_names[NS_WINDOW_TYPE_COUNT] = {
	[NS_WINDOW_SLIDING] = "sliding",
	[NS_WINDOW_FIXED]   = "fixed",
};

const char *const ns_admission_names[NS_ADMIT_COUNT] = {
	[NS_ADMIT_AUTO]  = "auto",
	[NS_ADMIT_LOCAL] = "local",
	[NS_ADMIT_EXACT] = "exact",
};

const char *const ns_table_full_names[NS_FULL_COUNT] = {
	[NS_FULL_EVICT] = "evict",
	[NS_FULL_DENY]  = "deny",
	[NS_FULL_ALLOW] = "allow",
};

const char *const ns_caller_limit_names[NS_CALLER_COUNT] = {
	[NS_CALLER_LOWER] = "lower",
	[NS_CALLER_ANY]   = "any",
	[NS_CALLER_NONE]  = "none",
};

_Static_assert(NS_MAX_WINDOWS <= 8, "the shared table keeps 8 windows per namespace");

void ns_def_init(struct ns_def *d)
{
	memset(d, 0, sizeof(*d));
	d->sync_rate = -1;
	d->window_type = NS_WINDOW_SLIDING;
	d->count_denied = true;
	d->on_table_full = NS_FULL_EVICT;
	d->caller_limit = NS_CALLER_LOWER;
	d->haproxy.data_type = NS_HAPROXY_DT_AUTO;
}

bool ns_has_limits(const struct ns_def *d)
{
	return d->n_limits > 0;
}

enum ns_admission ns_admission_of(const struct ns_def *d)
{
	const struct strategy_ops *ops;

	if (d->admission != NS_ADMIT_AUTO)
		return d->admission;
	ops = d->sync_rate > 0 ? strategy_find(d->strategy) : NULL;
	return ops && ops->admit ? NS_ADMIT_EXACT : NS_ADMIT_LOCAL;
}

bool ns_name_ok(const char *name, size_t len)
{
	if (len < 1 || len >= NS_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
			return false;
	return true;
}

__attribute__((format(printf, 3, 4)))
static int ns_fail(struct ns_err *e, const char *field, const char *fmt, ...)
{
	va_list ap;

	snprintf(e->field, sizeof(e->field), "%s", field);
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	return -1;
}

/* "\"local\", \"redis\" or \"postgres\"" from the table of stores; with
 * shared, the stores that keep counters only. */
static void ns_strategy_list(bool shared, char *buf, size_t len)
{
	const char *names[16];
	size_t n = 0, o = 0;

	for (size_t i = 0; strategy_name(i) && n < 16; i++)
		if (!shared || strategy_find(strategy_name(i)) != &local_strategy)
			names[n++] = strategy_name(i);
	buf[0] = '\0';
	for (size_t i = 0; i < n && o < len; i++) {
		int k = snprintf(buf + o, len - o, "%s\"%s\"", i == 0 ? "" : i + 1 == n ? " or " : ", ",
				 names[i]);
		if (k < 0)
			break;
		o += (size_t)k;
	}
}

static int ns_check_strategy(const struct ns_def *d, struct ns_err *e)
{
	bool shared = d->sync_rate >= 0;
	bool named = d->strategy[0] != '\0';
	const struct strategy_ops *ops = named ? strategy_find(d->strategy) : &local_strategy;
	char list[96];

	if (strnlen(d->strategy, sizeof(d->strategy)) == sizeof(d->strategy))
		return ns_fail(e, "strategy", "not NUL-terminated");
	if (!ops) {
		ns_strategy_list(false, list, sizeof(list));
		return ns_fail(e, "strategy", "expected %s, got \"%s\"", list, d->strategy);
	}
	ns_strategy_list(true, list, sizeof(list));
	if (shared && !named)
		return ns_fail(e, "strategy", "missing: sync_rate %g (>= 0: shared counters) needs %s",
			       d->sync_rate, list);
	if (shared && ops == &local_strategy)
		return ns_fail(e, "strategy", "expected %s since sync_rate is %g (>= 0: shared "
			       "counters), got \"%s\"", list, d->sync_rate, d->strategy);
	if (!shared && ops != &local_strategy)
		return ns_fail(e, "strategy", "expected \"local\" since sync_rate is %g (< 0: local "
			       "only), got \"%s\"", d->sync_rate, d->strategy);
	if (ops->check_opts(d->strategy_opts, e->msg, sizeof(e->msg)) < 0) {
		snprintf(e->field, sizeof(e->field), "strategy_opts");
		return -1;
	}
	return 0;
}

static bool ns_has_window(const struct ns_def *d, uint32_t w)
{
	for (size_t i = 0; i < d->n_window_sizes; i++)
		if (d->window_sizes[i] == w)
			return true;
	return false;
}

/* limit, caller_limit, max_cost, caller_admission, delay_max_ms. */
static int ns_check_limits(const struct ns_def *d, struct ns_err *e)
{
	if (d->n_limits > NS_MAX_WINDOWS)
		return ns_fail(e, "limit", "expected at most %d limits, got %zu", NS_MAX_WINDOWS,
			       d->n_limits);
	for (size_t i = 0; i < d->n_limits; i++) {
		const struct ns_limit *l = &d->limits[i];
		char field[32];

		if (l->window == NS_EVERY_WINDOW)
			snprintf(field, sizeof(field), "limit");
		else
			snprintf(field, sizeof(field), "limit.%u", l->window);
		if (l->window == NS_EVERY_WINDOW && d->n_limits > 1)
			return ns_fail(e, "limit", "one limit for every window or one per window, "
				       "not both");
		if (l->window != NS_EVERY_WINDOW && !ns_has_window(d, l->window))
			return ns_fail(e, field, "no window of %u s in window_sizes", l->window);
		if (l->limit < 0 || l->limit > NS_LIMIT_MAX)
			return ns_fail(e, field, "expected an integer 0..%lld, got %lld", NS_LIMIT_MAX,
				       (long long)l->limit);
		for (size_t j = 0; j < i; j++)
			if (d->limits[j].window == l->window)
				return ns_fail(e, field, "given twice");
	}
	if ((unsigned)d->caller_limit >= NS_CALLER_COUNT)
		return ns_fail(e, "caller_limit", "expected one of \"lower\", \"any\" or \"none\", "
			       "got %d", (int)d->caller_limit);
	/* an envoy_config domain's limits are configured ones (agent/rls_decide.h) */
	if (d->caller_limit == NS_CALLER_NONE && !ns_has_limits(d) && !d->envoy)
		return ns_fail(e, "caller_limit", "\"none\" needs a configured limit (without one, "
			       "a request's limit is the only one, or an envoy_config domain)");
	if (d->delay_max_ms > NS_DELAY_MAX_MS)
		return ns_fail(e, "delay_max_ms", "expected 0..%u ms, got %u", NS_DELAY_MAX_MS,
			       d->delay_max_ms);
	if (d->max_limit_overrides > NS_OVERRIDES_MAX)
		return ns_fail(e, "max_limit_overrides", "expected 1..%u, got %u", NS_OVERRIDES_MAX,
			       d->max_limit_overrides);
	if (d->max_cost != 0 && !(d->max_cost > 0 && d->max_cost <= (double)NS_LIMIT_MAX))
		return ns_fail(e, "max_cost", "expected a number > 0 and at most %lld, got %g",
			       NS_LIMIT_MAX, d->max_cost);
	return 0;
}

/* A table name as the configuration gives it: 1..63 visible bytes. */
static bool ns_table_name_ok(const char *s)
{
	size_t n = strnlen(s, NS_TABLE_NAME_MAX);

	if (n == 0 || n == NS_TABLE_NAME_MAX || *ns_table_leaf(s) == '\0')
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] <= 0x20 || s[i] == 0x7f)
			return false;
	return true;
}

/* haproxy_tables: both names, apart, a data type the peers front sums
 * (a frequency counter or a counter, an element of an array within
 * its bounds), and the one window the tables' period must be. */
static int ns_check_haproxy(const struct ns_def *d, struct ns_err *e)
{
	const struct ns_haproxy_tables *h = &d->haproxy;
	int dt = h->data_type;

	if (!h->from[0] && !h->into[0])
		return 0;
	if (!ns_table_name_ok(h->from))
		return ns_fail(e, "haproxy_tables.from", "expected a table name of 1..63 visible "
			       "bytes (\"t\", \"/t\" or \"section/t\")");
	if (!ns_table_name_ok(h->into))
		return ns_fail(e, "haproxy_tables.into", "expected a table name of 1..63 visible "
			       "bytes (\"t\", \"/t\" or \"section/t\")");
	if (strcmp(ns_table_leaf(h->from), ns_table_leaf(h->into)) == 0)
		return ns_fail(e, "haproxy_tables.into", "the same table as from: the nodes count "
			       "in one, read the sums in the other");
	if (dt != NS_HAPROXY_DT_AUTO) {
		enum peers_wire_enc enc = dt >= 0 && dt < PEERS_WIRE_DT_COUNT ? peers_wire_dt_enc((unsigned)dt)
									     : PEERS_WIRE_ENC_DICT;
		bool array = enc == PEERS_WIRE_ENC_ARRAY_UINT || enc == PEERS_WIRE_ENC_ARRAY_FREQ;
		if (enc == PEERS_WIRE_ENC_DICT || enc == PEERS_WIRE_ENC_SINT ||
		    dt == PEERS_WIRE_DT_GPT0 || dt == PEERS_WIRE_DT_CONN_CUR || dt == PEERS_WIRE_DT_GPT)
			return ns_fail(e, "haproxy_tables.data_type", "not a counter or a rate HAProxy "
				       "adds up (data type %d)", dt);
		if (h->data_index > (array ? NS_HAPROXY_INDEX_MAX : 0))
			return ns_fail(e, "haproxy_tables.data_type", "element %u out of range",
				       h->data_index);
	}
	if (d->sync_rate == 0)
		return ns_fail(e, "sync_rate", "0 (every hit written through to the store) is not "
			       "for haproxy_tables: the nodes' updates have no answer to wait for; "
			       "share the counts with other agents with sync_rate > 0 (0.01..)");
	if (d->n_window_sizes != 1)
		return ns_fail(e, "window_sizes", "a namespace with haproxy_tables has one window "
			       "size, the tables' period (the rate's, or how long a counter's "
			       "increases count), got %zu", d->n_window_sizes);
	return 0;
}

/* An envoy domain's limits count in the namespace's windows, and its
 * holds fit the namespace's delay bound (docs/ENVOY.md). */
static int ns_check_envoy(const struct ns_def *d, struct ns_err *e)
{
	if (!d->envoy)
		return 0;
	for (size_t i = 0; i < d->envoy->n_windows; i++)
		if (!ns_has_window(d, d->envoy->windows[i]))
			return ns_fail(e, "window_sizes", "no window of %u s, which envoy_config "
				       "domain \"%s\" counts", d->envoy->windows[i], d->envoy->name);
	if (d->envoy->delay_max_ms > d->delay_max_ms)
		return ns_fail(e, "delay_max_ms", "%u ms, under the %u ms of envoy_config domain "
			       "\"%s\"", d->delay_max_ms, d->envoy->delay_max_ms, d->envoy->name);
	return 0;
}

/* An algorithm whose every admission is the store's step (GCRA's TAT,
 * concurrency's leases: algo_ops.step), with a store: sync_rate > 0 (the
 * heartbeat's period: 0 would say "every hit pushed", which it is
 * already) and an admission the store decides ("local" would push sums,
 * which the store's state is not). */
static int ns_check_store_step(const struct ns_def *d, struct ns_err *e, const char *what)
{
	const char *name = ns_algorithm_names[d->algorithm];

	if (d->sync_rate == 0)
		return ns_fail(e, "sync_rate", "\"%s\" with a store decides every hit there "
			       "already: a sync_rate > 0 (the heartbeat's), or < 0 (local)", name);
	if (d->sync_rate > 0 && d->admission == NS_ADMIT_LOCAL)
		return ns_fail(e, "admission", "\"%s\" with a store is decided there "
			       "(\"auto\" or \"exact\"): %s is no sum a node could push", name,
			       what);
	return 0;
}

/* burst, and what a gcra namespace needs: a limit for each window (the
 * rate), a key's TAT that the table keeps (window x burst: the period of
 * its slots, agent/algo_gcra.c), and none of what only the window counter
 * does (delay_max_ms, haproxy_tables). */
static int ns_check_gcra(const struct ns_def *d, struct ns_err *e)
{
	if (d->algorithm != NS_ALGO_GCRA) {
		if (d->burst != 0)
			return ns_fail(e, "burst", "only with \"algorithm\": \"gcra\"");
		return 0;
	}
	if (d->burst < 0 || d->burst > NS_LIMIT_MAX)
		return ns_fail(e, "burst", "expected an integer 1..%lld, got %lld", NS_LIMIT_MAX,
			       (long long)d->burst);
	for (size_t i = 0; i < d->n_window_sizes; i++) {
		uint32_t w = d->window_sizes[i];
		if (ns_limit_of(d, w) == NS_LIMIT_NONE)
			return ns_fail(e, "limit", "\"gcra\" needs a limit for window %u (the rate: "
				       "limit per window)", w);
		if ((double)ns_burst(d) * w > (double)NS_WINDOW_MAX)
			return ns_fail(e, "burst", "burst x window is at most %u seconds (365 days), "
				       "got %lld x %u", NS_WINDOW_MAX, (long long)ns_burst(d), w);
	}
	if (d->delay_max_ms != 0)
		return ns_fail(e, "delay_max_ms", "not with \"algorithm\": \"gcra\" (its "
			       "retry_after says when to come back)");
	if (d->haproxy.from[0] || d->haproxy.into[0])
		return ns_fail(e, "haproxy_tables", "not with \"algorithm\": \"gcra\" (the nodes' "
			       "tables count windows)");
	/* With a store, the store moves the one TAT (docs/CLUSTER.md, "GCRA
	 * across a cluster"): every hit the node does not deny is its step,
	 * whatever sync_rate says, and a TAT is no sum a node could push. */
	return ns_check_store_step(d, e, "a TAT");
}

/* lease_ms, and what a concurrency namespace needs: one window (whose
 * size means nothing: its leases' period is lease_ms, agent/algo_concurrency.c),
 * a limit of at most NS_CONC_LIMIT_MAX leases in flight per key, and none
 * of what only the window counter does (delay_max_ms: a slot frees when a
 * request ends, not at a time; haproxy_tables). */
static int ns_check_concurrency(const struct ns_def *d, struct ns_err *e)
{
	if (d->settle_ms != 0 && d->algorithm != NS_ALGO_WINDOW)
		return ns_fail(e, "settle_ms", "only with the window counter (reservations: "
			       "docs/PROTOCOL.md, \"Costs known after the response\")");
	if (d->settle_ms > NS_LEASE_MS_MAX)
		return ns_fail(e, "settle_ms", "expected 1..%u ms (a day), got %u", NS_LEASE_MS_MAX,
			       d->settle_ms);
	if (d->algorithm != NS_ALGO_CONCURRENCY) {
		if (d->lease_ms != 0)
			return ns_fail(e, "lease_ms", "only with \"algorithm\": \"concurrency\"");
		return 0;
	}
	if (d->lease_ms > NS_LEASE_MS_MAX)
		return ns_fail(e, "lease_ms", "expected 1..%u ms (a day), got %u", NS_LEASE_MS_MAX,
			       d->lease_ms);
	if (d->n_window_sizes != 1)
		return ns_fail(e, "window_sizes", "\"concurrency\" counts leases, not windows: "
			       "one window size at most, got %zu", d->n_window_sizes);
	int64_t limit = ns_limit_of(d, d->window_sizes[0]);
	if (limit == NS_LIMIT_NONE)
		return ns_fail(e, "limit", "\"concurrency\" needs a limit (requests in flight "
			       "per key)");
	if (limit > NS_CONC_LIMIT_MAX)
		return ns_fail(e, "limit", "\"concurrency\": at most %d in flight per key, got "
			       "%lld", NS_CONC_LIMIT_MAX, (long long)limit);
	if (d->delay_max_ms != 0)
		return ns_fail(e, "delay_max_ms", "not with \"algorithm\": \"concurrency\" (a "
			       "lease frees when a request ends, not at a time)");
	if (d->haproxy.from[0] || d->haproxy.into[0])
		return ns_fail(e, "haproxy_tables", "not with \"algorithm\": \"concurrency\" (the "
			       "nodes' tables count windows)");
	/* With a store, the store keeps the key's leases (docs/CLUSTER.md,
	 * "Concurrency across a cluster"): every acquire is its step. */
	return ns_check_store_step(d, e, "a lease");
}

int ns_check(const struct ns_def *d, struct ns_err *e)
{
	size_t n = strnlen(d->name, sizeof(d->name));

	if (n == sizeof(d->name))
		return ns_fail(e, "name", "not NUL-terminated");
	if (!ns_name_ok(d->name, n))
		return ns_fail(e, "name", "expected a name of 1..63 characters, no control "
			       "characters");
	if (d->n_window_sizes < 1 || d->n_window_sizes > NS_MAX_WINDOWS)
		return ns_fail(e, "window_sizes", "expected 1..%d window sizes, got %zu",
			       NS_MAX_WINDOWS, d->n_window_sizes);
	for (size_t i = 0; i < d->n_window_sizes; i++) {
		uint32_t w = d->window_sizes[i];
		char field[32];

		snprintf(field, sizeof(field), "window_sizes[%u]", (unsigned)i);
		if (w == 0)
			return ns_fail(e, field, "expected a positive integer (seconds), got 0");
		if (w > NS_WINDOW_MAX)
			return ns_fail(e, field, "expected at most %u seconds (365 days), got %u",
				       NS_WINDOW_MAX, w);
		for (size_t j = 0; j < i; j++)
			if (d->window_sizes[j] == w)
				return ns_fail(e, field, "duplicate window size %u (also "
					       "window_sizes[%zu])", w, j);
	}
	if (!isfinite(d->sync_rate))
		return ns_fail(e, "sync_rate", "expected a finite number, got %g", d->sync_rate);
	if (d->sync_rate > 0 && (d->sync_rate < NS_SYNC_RATE_MIN || d->sync_rate > NS_SYNC_RATE_MAX))
		return ns_fail(e, "sync_rate", "expected < 0 (local only), 0 (synchronous) or %g "
			       "to %g seconds, got %g", NS_SYNC_RATE_MIN, NS_SYNC_RATE_MAX,
			       d->sync_rate);
	if (ns_check_strategy(d, e) < 0)
		return -1;
	if ((unsigned)d->algorithm >= NS_ALGO_COUNT)
		return ns_fail(e, "algorithm", "unknown algorithm %d", (int)d->algorithm);
	if (!ns_algorithm_store[d->algorithm] && d->sync_rate >= 0)
		return ns_fail(e, "algorithm", "\"%s\" is counted on each node alone: sync_rate "
			       "< 0 (docs/CLUSTER.md, \"Other algorithms\"), got %g",
			       ns_algorithm_names[d->algorithm], d->sync_rate);
	if ((unsigned)d->window_type >= NS_WINDOW_TYPE_COUNT)
		return ns_fail(e, "window_type", "expected one of \"sliding\" or \"fixed\", got %d",
			       (int)d->window_type);
	if ((unsigned)d->on_table_full >= NS_FULL_COUNT)
		return ns_fail(e, "on_table_full", "expected one of \"evict\", \"deny\" or "
			       "\"allow\", got %d", (int)d->on_table_full);
	if ((unsigned)d->admission >= NS_ADMIT_COUNT)
		return ns_fail(e, "admission", "expected one of \"auto\", \"local\" or \"exact\", got %d",
			       (int)d->admission);
	if (ns_check_limits(d, e) < 0 || ns_check_haproxy(d, e) < 0 || ns_check_envoy(d, e) < 0 ||
	    ns_check_gcra(d, e) < 0 || ns_check_concurrency(d, e) < 0)
		return -1;
	if (d->admission == NS_ADMIT_EXACT) {
		const struct strategy_ops *ops = strategy_find(d->strategy);

		if (!(d->sync_rate > 0))
			return ns_fail(e, "admission", "\"exact\" needs sync_rate > 0 (with 0 "
				       "every hit is exact already), got %g", d->sync_rate);
		if (!ops || !ops->admit)
			return ns_fail(e, "admission", "\"exact\": the %s store cannot decide "
				       "admissions", d->strategy);
	}
	return 0;
}
