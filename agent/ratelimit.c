/*
 * ratelimit.c - the library API of ratelimit.h over the shared counter
 * table (shm.c) and the window arithmetic (window.c).
 *
 * An instance (struct rl) is per process: it holds the namespaces, which
 * are defined before fork() and so are identical in every worker, and the
 * handle on the shared table. Namespace i and its window size j are the
 * (ns, win) indexes stored in each shared slot, which is why namespaces
 * must not change after fork.
 *
 * Hot path (rl_hit): validate, canonicalise the key, one scan of the key's
 * probe chain for the current and previous window, at most one insert,
 * one CAS loop on the count (plus one on the diff for namespaces that
 * sync). No allocation, no syscall, no lock.
 *
 * Over-long keys: keys longer than SHM_KEY_MAX (104) bytes are replaced by
 * '#' followed by the 32 lowercase hex digits of SipHash-2-4-128 of the
 * key text, under the fixed 16-byte key RL_DIGEST_KEY below (the same on
 * every node, so every node counts a long key under the same name; the
 * hex digits are the 16 output bytes in the reference order).
 */
#include "agent/ratelimit.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/hash.h"
#include "agent/shm.h"
#include "agent/window.h"

#define RL_MAX_NAMESPACES SHM_MAX_NS   /* 32 */
#define RL_MAX_WINDOWS    SHM_MAX_WIN  /* 8 per namespace */
#define RL_NAME_MAX       64           /* namespace and instance names, with NUL */
#define RL_STRATEGY_MAX   16           /* strategy names, with NUL */
#define RL_DIGEST_LEN     33           /* '#' + 32 hex digits */
#define RL_NOW_MAX        4294967296.0 /* window starts are stored in 32 bits */

/* The fixed SipHash key for long-key digests: ASCII "spoa-ratelimit-k". */
static const uint8_t RL_DIGEST_KEY[16] = {
	's', 'p', 'o', 'a', '-', 'r', 'a', 't', 'e', 'l', 'i', 'm', 'i', 't', '-', 'k',
};

struct rl_ns {
	char name[RL_NAME_MAX];
	size_t name_len;
	uint32_t sizes[RL_MAX_WINDOWS];
	size_t n_sizes;
	double sync_rate;                   /* < 0: local only, no diff kept */
	char strategy[RL_STRATEGY_MAX];
	char *strategy_opts;                /* malloc'd copy or NULL */
};

struct rl {
	char name[RL_NAME_MAX];
	struct shm_table *shm;
	struct rl_ns ns[RL_MAX_NAMESPACES];
	size_t n_ns;
	_Atomic int err;                    /* enum rl_status of the last failure */
};

static const char *const rl_status_names[RL_STATUS_COUNT] = {
	[RL_OK] = "ok",
	[RL_ERR_NAMESPACE] = "unknown namespace",
	[RL_ERR_WINDOW] = "unknown window size",
	[RL_ERR_KEY] = "empty key",
	[RL_ERR_FULL] = "counter table full",
	[RL_ERR_VALUE] = "invalid value",
};

const char *rl_status_str(enum rl_status st)
{
	if ((unsigned)st >= RL_STATUS_COUNT)
		return "unknown status";
	return rl_status_names[st];
}

static int rl_fail(struct rl *rl, enum rl_status st)
{
	atomic_store_explicit(&rl->err, (int)st, memory_order_relaxed);
	return -1;
}

enum rl_status rl_errno(const struct rl *rl)
{
	return (enum rl_status)atomic_load_explicit(&rl->err, memory_order_relaxed);
}

static void rl_errf(char *err, size_t errlen, const char *fmt, const char *a)
{
	if (err && errlen)
		snprintf(err, errlen, fmt, a);
}

struct rl *rl_new(const char *instance_name, size_t max_keys, char *err, size_t errlen)
{
	struct rl *rl = calloc(1, sizeof(*rl));

	if (!rl) {
		rl_errf(err, errlen, "%s", "out of memory");
		return NULL;
	}
	snprintf(rl->name, sizeof(rl->name), "%s", instance_name ? instance_name : "default");
	rl->shm = shm_create(max_keys, err, errlen);
	if (!rl->shm) {
		free(rl);
		return NULL;
	}
	return rl;
}

void rl_free(struct rl *rl)
{
	if (!rl)
		return;
	for (size_t i = 0; i < rl->n_ns; i++)
		free(rl->ns[i].strategy_opts);
	shm_destroy(rl->shm);
	free(rl);
}

int rl_new_namespace(struct rl *rl, const struct rl_ns_opts *opts, char *err, size_t errlen)
{
	const char *name = opts->name ? opts->name : "default";
	const char *strategy = opts->strategy ? opts->strategy : "local";
	size_t len = strlen(name);
	struct rl_ns *n;

	if (len == 0 || len >= RL_NAME_MAX) {
		rl_errf(err, errlen, "namespace \"%.64s\": name must be 1..63 bytes", name);
		return -1;
	}
	if (rl_namespace_index(rl, name, len) >= 0) {
		rl_errf(err, errlen, "namespace \"%s\" is already defined", name);
		return -1;
	}
	if (rl->n_ns >= RL_MAX_NAMESPACES) {
		rl_errf(err, errlen, "namespace \"%s\": more than 32 namespaces", name);
		return -1;
	}
	if (!opts->window_sizes || opts->n_window_sizes == 0) {
		rl_errf(err, errlen, "namespace \"%s\": no window sizes", name);
		return -1;
	}
	if (opts->n_window_sizes > RL_MAX_WINDOWS) {
		rl_errf(err, errlen, "namespace \"%s\": more than 8 window sizes", name);
		return -1;
	}
	for (size_t i = 0; i < opts->n_window_sizes; i++) {
		uint32_t sz = opts->window_sizes[i];

		if (sz == 0 || sz > INT32_MAX) {
			rl_errf(err, errlen, "namespace \"%s\": window sizes must be 1..2^31-1 s",
				name);
			return -1;
		}
		for (size_t j = 0; j < i; j++)
			if (opts->window_sizes[j] == sz) {
				rl_errf(err, errlen, "namespace \"%s\": duplicate window size", name);
				return -1;
			}
	}
	if (isnan(opts->sync_rate)) {
		rl_errf(err, errlen, "namespace \"%s\": sync_rate is not a number", name);
		return -1;
	}
	if (strlen(strategy) >= RL_STRATEGY_MAX) {
		rl_errf(err, errlen, "namespace \"%s\": strategy name too long", name);
		return -1;
	}

	n = &rl->ns[rl->n_ns];
	memset(n, 0, sizeof(*n));
	if (opts->strategy_opts && !(n->strategy_opts = strdup(opts->strategy_opts))) {
		rl_errf(err, errlen, "namespace \"%s\": out of memory", name);
		return -1;
	}
	memcpy(n->name, name, len + 1);
	n->name_len = len;
	n->n_sizes = opts->n_window_sizes;
	memcpy(n->sizes, opts->window_sizes, n->n_sizes * sizeof(n->sizes[0]));
	n->sync_rate = opts->sync_rate;
	snprintf(n->strategy, sizeof(n->strategy), "%s", strategy);
	for (size_t i = 0; i < n->n_sizes; i++)
		shm_set_window(rl->shm, (unsigned)rl->n_ns, (unsigned)i, n->sizes[i]);
	rl->n_ns++;
	return 0;
}

int rl_namespace_index(const struct rl *rl, const char *name, size_t len)
{
	if (!name || len == 0) {
		name = "default";
		len = 7;
	}
	for (size_t i = 0; i < rl->n_ns; i++)
		if (rl->ns[i].name_len == len && memcmp(rl->ns[i].name, name, len) == 0)
			return (int)i;
	return -1;
}

double rl_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Index of size among the namespace's windows, or -1. */
static int rl_win_index(const struct rl_ns *n, uint32_t size)
{
	for (size_t i = 0; i < n->n_sizes; i++)
		if (n->sizes[i] == size)
			return (int)i;
	return -1;
}

/* out = '#' + 32 lowercase hex digits of SipHash-2-4-128(key), NUL
 * terminated (RL_DIGEST_LEN + 1 bytes). */
static void rl_digest(const char *key, size_t len, char *out)
{
	static const char hex[] = "0123456789abcdef";
	uint8_t h[16];

	hash_siphash128(RL_DIGEST_KEY, key, len, h);
	out[0] = '#';
	for (int i = 0; i < 16; i++) {
		out[1 + 2 * i] = hex[h[i] >> 4];
		out[2 + 2 * i] = hex[h[i] & 0xf];
	}
	out[RL_DIGEST_LEN] = '\0';
}

int rl_hit(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t window_size,
	   double cost, double weight, double now, double limit, bool count_denied,
	   struct rl_result *out)
{
	char digest[RL_DIGEST_LEN + 1];
	struct rl_result tmp;
	const struct rl_ns *n;
	struct shm_key k;
	struct shm_ref cur, prev;
	double p, pw, c;
	bool with_diff;
	int64_t start;
	int win;

	if (!out)
		out = &tmp;
	if (ns < 0 || (size_t)ns >= rl->n_ns)
		return rl_fail(rl, RL_ERR_NAMESPACE);
	n = &rl->ns[ns];
	win = rl_win_index(n, window_size);
	if (win < 0)
		return rl_fail(rl, RL_ERR_WINDOW);
	if (!key || keylen == 0)
		return rl_fail(rl, RL_ERR_KEY);
	/* The negated comparisons also reject NaN. */
	if (!(cost >= 0) || !isfinite(cost) || !(now >= 0 && now < RL_NOW_MAX) || isnan(limit))
		return rl_fail(rl, RL_ERR_VALUE);
	if (!(weight < 0 || weight <= 1))
		return rl_fail(rl, RL_ERR_VALUE);

	if (keylen > SHM_KEY_MAX) {
		rl_digest(key, keylen, digest);
		key = digest;
		keylen = RL_DIGEST_LEN;
	}
	if (shm_key_init(rl->shm, &k, (unsigned)ns, (unsigned)win, key, keylen) < 0)
		return rl_fail(rl, RL_ERR_KEY);

	start = window_start(now, window_size);
	/* RL_WEIGHT_AUTO: window_weight(now, size), computed from start to
	 * save a division; now - start is exactly now mod size (window.c). */
	if (weight < 0)
		weight = ((double)window_size - (now - (double)start)) / (double)window_size;
	shm_find(rl->shm, &k, start, weight > 0 ? start - (int64_t)window_size : -1, &cur, &prev);
	p = prev.idx == SHM_NONE ? 0 : shm_read_count(rl->shm, &prev);
	pw = p * weight;
	/* Periodic sync keeps a diff of every hit; synchronous namespaces
	 * (sync_rate 0) push each hit themselves and keep a diff only for
	 * hits the store did not confirm (agent/handler.c). */
	with_diff = n->sync_rate > 0;
	out->counted = false;
	out->inserted = false;

	if (cost == 0) {
		/* Read only: never inserts. */
		c = shm_read_count(rl->shm, &cur);
	} else if (limit >= 0 && !count_denied && cost + pw > limit) {
		/* Denied whatever the current count (counts are >= 0): no
		 * CAS, and no slot taken for a key that is only refused. */
		c = shm_read_count(rl->shm, &cur) + cost;
	} else {
		if (cur.idx == SHM_NONE) {
			if (shm_insert(rl->shm, &k, start, now, &cur) < 0)
				return rl_fail(rl, RL_ERR_FULL);
			out->inserted = true;
		}
		if (limit < 0 || count_denied) {
			c = shm_add(rl->shm, &cur, cost, with_diff);
			out->counted = true;
		} else {
			out->counted = shm_add_if(rl->shm, &cur, cost, pw, limit, with_diff, &c);
			if (!out->counted)
				c += cost;	/* report what the hit would have made */
		}
	}

	out->cur_idx = cur.idx;
	out->prev_idx = prev.idx;
	out->current = c;
	out->previous = p;
	out->weight = weight;
	out->rate = window_rate(c, p, weight);
	out->start = start;
	out->size = window_size;
	return 0;
}

_Static_assert(RL_STORED_KEY_MAX == SHM_KEY_MAX, "stored keys fit a slot");

size_t rl_stored_key(const char *key, size_t len, char *out)
{
	if (len > SHM_KEY_MAX) {
		char digest[RL_DIGEST_LEN + 1];
		rl_digest(key, len, digest);
		memcpy(out, digest, RL_DIGEST_LEN);
		return RL_DIGEST_LEN;
	}
	memcpy(out, key, len);
	return len;
}

int rl_seed(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t size, int64_t start,
	    double total, double now)
{
	struct shm_key k;
	struct shm_ref ref, none;
	struct shm_entry e;
	int win;

	if (ns < 0 || (size_t)ns >= rl->n_ns)
		return rl_fail(rl, RL_ERR_NAMESPACE);
	win = rl_win_index(&rl->ns[ns], size);
	if (win < 0)
		return rl_fail(rl, RL_ERR_WINDOW);
	if (!(total >= 0) || !isfinite(total) || start < 0 || start >= (int64_t)RL_NOW_MAX)
		return rl_fail(rl, RL_ERR_VALUE);
	if (shm_key_init(rl->shm, &k, (unsigned)ns, (unsigned)win, key, keylen) < 0)
		return rl_fail(rl, RL_ERR_KEY);
	shm_find(rl->shm, &k, start, -1, &ref, &none);
	if (ref.idx == SHM_NONE) {
		/* Nothing to keep for a window the cluster has not counted. */
		if (total == 0)
			return 0;
		if (shm_insert(rl->shm, &k, start, now, &ref) < 0)
			return rl_fail(rl, RL_ERR_FULL);
	}
	if (shm_read(rl->shm, ref.idx, &e) == 0)
		shm_sync_total(rl->shm, &e, total);
	return 0;
}

int rl_namespace_opts(const struct rl *rl, int ns, struct rl_ns_opts *out)
{
	if (ns < 0 || (size_t)ns >= rl->n_ns)
		return -1;
	const struct rl_ns *n = &rl->ns[ns];
	*out = (struct rl_ns_opts){
		.name = n->name,
		.window_sizes = n->sizes,
		.n_window_sizes = n->n_sizes,
		.sync_rate = n->sync_rate,
		.strategy = n->strategy,
		.strategy_opts = n->strategy_opts,
	};
	return 0;
}

size_t rl_namespace_count(const struct rl *rl)
{
	return rl->n_ns;
}

double rl_sync_rate(const struct rl *rl, int ns)
{
	return ns >= 0 && (size_t)ns < rl->n_ns ? rl->ns[ns].sync_rate : -1;
}

int rl_increment(struct rl *rl, const char *key, size_t keylen, uint32_t window_size,
		 double value, const char *ns, double weight, double *rate)
{
	struct rl_result r;
	int nsi = rl_namespace_index(rl, ns, ns ? strlen(ns) : 0);

	if (nsi < 0)
		return rl_fail(rl, RL_ERR_NAMESPACE);
	if (rl_hit(rl, nsi, key, keylen, window_size, value, weight, rl_now(), -1, true, &r) < 0)
		return -1;
	if (rate)
		*rate = r.rate;
	return 0;
}

int rl_sliding_window(struct rl *rl, const char *key, size_t keylen, uint32_t window_size,
		      const double *cur_diff, const char *ns, double weight, double *rate)
{
	struct rl_result r;
	int nsi = rl_namespace_index(rl, ns, ns ? strlen(ns) : 0);

	if (nsi < 0)
		return rl_fail(rl, RL_ERR_NAMESPACE);
	if (cur_diff && !isfinite(*cur_diff))
		return rl_fail(rl, RL_ERR_VALUE);
	if (rl_hit(rl, nsi, key, keylen, window_size, 0, weight, rl_now(), -1, true, &r) < 0)
		return -1;
	if (rate)
		*rate = window_rate(r.current + (cur_diff ? *cur_diff : 0), r.previous, r.weight);
	return 0;
}

bool rl_has_window(const struct rl *rl, int ns, uint32_t size)
{
	if (ns < 0 || (size_t)ns >= rl->n_ns)
		return false;
	return rl_win_index(&rl->ns[ns], size) >= 0;
}

uint32_t rl_single_window(const struct rl *rl, int ns)
{
	if (ns < 0 || (size_t)ns >= rl->n_ns || rl->ns[ns].n_sizes != 1)
		return 0;
	return rl->ns[ns].sizes[0];
}

uint64_t rl_full_events(const struct rl *rl)
{
	struct shm_stats st;

	shm_stats(rl->shm, &st);
	return st.full_events;
}

struct shm_table *rl_shm(const struct rl *rl)
{
	return rl->shm;
}
