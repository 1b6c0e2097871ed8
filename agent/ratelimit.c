/*
 * ratelimit.c - the library API of ratelimit.h over the shared counter
 * table (shm.h and its files) and the algorithms (agent/algo.h: the
 * window counter, agent/algo_window.c, and the others).
 *
 * An instance (struct rl) is per process: it holds the namespaces, which
 * are defined before fork() and so are identical in every worker, and the
 * handle on the shared table. Namespace i and its window size j are the
 * (ns, win) indexes stored in each shared slot, which is why namespaces
 * must not change after fork.
 *
 * Hot path (rl_hit_skey, the engine): validate, prepare the key for its
 * window index, and hand the hit to the namespace's algorithm (its
 * algo_ops.hit: for the window counter, one scan of the key's probe chain
 * for the current and previous window, at most one insert, one CAS loop
 * on the count, plus one on the diff for namespaces that sync). No
 * allocation, no syscall, no lock.
 *
 * Stored keys: a key longer than SHM_KEY_MAX (104) bytes, or one starting
 * with '#', is replaced by '#' followed by the 32 lowercase hex digits of
 * SipHash-2-4-128 of the key text (the 16 output bytes in the reference
 * order). No key kept verbatim starts with '#', so a chosen short key can
 * never name a digest: the calls on a key's text make its stored form
 * (rl_skey_make), and those given one (rl_hit_skey) refuse a verbatim
 * form that should have been digested; neither digests what it is given
 * stored. The SipHash key is kept in the shared table: random per start
 * for local-only instances (nobody outside can predict a digest), derived
 * from a configured secret (key_secret: the same on every node), or, for
 * an instance that syncs without a secret, the fixed public key
 * (hash_digest_public_key: every node must name a long key alike). The
 * digest and the derivation of a key from a secret are hash.c's
 * (hash_digest, hash_digest_key), shared with the nginx module.
 *
 * Shares: each namespace is guaranteed max_keys entries of the table (its
 * own option, or an even part of what explicit shares leave), given to
 * shm_set_ns() with whether it may evict (on_table_full "evict").
 */
#include "agent/ratelimit.h"

#include <math.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/hash.h"
#include "agent/limits.h"
#include "agent/shm.h"
#include "agent/shm_sync.h"
#include "agent/window.h"

#define RL_MAX_NAMESPACES SHM_MAX_NS   /* 32 */
#define RL_MAX_WINDOWS    SHM_MAX_WIN  /* 8 per namespace */
#define RL_NAME_MAX       64           /* the instance name, with NUL */
#define RL_NOW_MAX        4294967296.0 /* window starts are stored in 32 bits */

/* The fixed SipHash key for long-key digests: ASCII "spoa-ratelimit-k". */
#define RL_DIGEST_KEY     hash_digest_public_key

#define RL_HIT_TRIES      3            /* recounts of a hit that raced an eviction
                                          (rl_keep, rl_unkeep) */

struct rl_ns {
	struct ns_def def;                  /* its settings (agent/ns.h), checked;
	                                       strategy_opts a malloc'd copy */
	size_t name_len;
	unsigned sid;                       /* its index in the shared table */
	uint8_t wid[RL_MAX_WINDOWS];        /* the table's index of each window */
	const struct algo_ops *algo;        /* its algorithm (agent/algo.h); the
	                                       size a window has in the table
	                                       is rl_period()'s */
};

/* The size window `size` of n has in the table (algo_ops.period): the
 * window counter's, the window. */
static uint32_t rl_period(const struct rl_ns *n, uint32_t size)
{
	return n->algo->period(&n->def, size);
}

struct rl {
	char name[RL_NAME_MAX];
	struct shm_table *shm;
	struct rl_ns ns[RL_MAX_NAMESPACES];
	size_t n_ns;
	int default_ns;                     /* index of "default", or -1: the
	                                       request that names none, found
	                                       without comparing names */
	size_t max_keys;
	struct limits *limits;              /* overrides (rl_limits_open), or NULL */
	const _Atomic uint32_t *ovr_count;  /* ... their count per table namespace
	                                       (limits_counts), or NULL */
	bool secret_set;                    /* rl_set_key_secret() was called */
	bool public_key;                    /* digests use RL_DIGEST_KEY */
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

__attribute__((format(printf, 3, 4)))
static void rl_errf(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

struct rl *rl_new(const char *instance_name, size_t max_keys, char *err, size_t errlen)
{
	return rl_open(instance_name, max_keys, NULL, err, errlen);
}

struct rl *rl_open(const char *instance_name, size_t max_keys, const char *state_file, char *err,
		   size_t errlen)
{
	struct rl *rl = calloc(1, sizeof(*rl));

	if (!rl) {
		rl_errf(err, errlen, "%s", "out of memory");
		return NULL;
	}
	snprintf(rl->name, sizeof(rl->name), "%s", instance_name ? instance_name : "default");
	rl->shm = state_file ? shm_open_file(state_file, max_keys, err, errlen)
			     : shm_create(max_keys, err, errlen);
	if (!rl->shm) {
		free(rl);
		return NULL;
	}
	rl->max_keys = max_keys;
	rl->default_ns = -1;
	return rl;
}

void rl_free(struct rl *rl)
{
	if (!rl)
		return;
	for (size_t i = 0; i < rl->n_ns; i++)
		free((void *)rl->ns[i].def.strategy_opts);
	limits_destroy(rl->limits);
	shm_destroy(rl->shm);
	free(rl);
}

/* The share of each namespace without max_keys if one with `extra` (0 =
 * none) were added: an even part of what explicit shares leave, at least
 * 1 (the spare slots of the table cover the rounding). Returns 0 when the
 * explicit shares do not fit max_keys. */
static size_t rl_implicit_share(const struct rl *rl, size_t extra, bool add)
{
	size_t sum = add ? extra : 0, n_impl = add && extra == 0;

	for (size_t i = 0; i < rl->n_ns; i++) {
		sum += rl->ns[i].def.max_keys;
		n_impl += rl->ns[i].def.max_keys == 0;
	}
	if (sum > rl->max_keys)
		return 0;
	if (n_impl == 0 || rl->max_keys - sum < n_impl)
		return 1;
	return (rl->max_keys - sum) / n_impl;
}

static void rl_apply_shares(struct rl *rl)
{
	size_t impl = rl_implicit_share(rl, 0, false);

	for (size_t i = 0; i < rl->n_ns; i++) {
		const struct rl_ns *n = &rl->ns[i];
		shm_set_ns(rl->shm, n->sid, n->def.max_keys ? n->def.max_keys : impl,
			   n->def.on_table_full == NS_FULL_EVICT);
	}
}

/* Must every node name a long key of d alike, and is there no secret to
 * derive the key from: the public key then. */
static bool rl_wants_public_key(const struct rl *rl, const struct ns_def *d)
{
	return d->sync_rate >= 0 && strcmp(d->strategy, "local") != 0 && !rl->secret_set;
}

int rl_reload_makes_key_public(const struct rl *rl, const struct ns_def *defs, size_t n)
{
	/* Public already (a state file's table may hold it from a run that
	 * synced): nothing changes. */
	if (rl->public_key || memcmp(shm_digest_key(rl->shm), RL_DIGEST_KEY, 16) == 0)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (rl_wants_public_key(rl, &defs[i]))
			return (int)i;
	return -1;
}

int rl_new_namespace(struct rl *rl, const struct ns_def *def, char *err, size_t errlen)
{
	struct ns_def d = *def;
	struct ns_err e;
	struct rl_ns *n;
	size_t len;

	if (d.name[0] == '\0')
		snprintf(d.name, sizeof(d.name), "default");
	if (d.strategy[0] == '\0' && d.sync_rate < 0)
		snprintf(d.strategy, sizeof(d.strategy), "%s", "local");
	if (ns_check(&d, &e) < 0) {
		rl_errf(err, errlen, "namespace \"%.64s\": %s: %s", d.name, e.field, e.msg);
		return -1;
	}
	len = strlen(d.name);
	if (rl_namespace_index(rl, d.name, len) >= 0) {
		rl_errf(err, errlen, "namespace \"%s\" is already defined", d.name);
		return -1;
	}
	if (rl->n_ns >= RL_MAX_NAMESPACES) {
		rl_errf(err, errlen, "namespace \"%s\": more than %d namespaces", d.name,
			RL_MAX_NAMESPACES);
		return -1;
	}
	if (d.max_keys > rl->max_keys || rl_implicit_share(rl, d.max_keys, true) == 0) {
		rl_errf(err, errlen, "namespace \"%s\": max_keys %zu does not fit: the "
			"namespaces' max_keys add up to more than the table's (%zu)",
			d.name, d.max_keys, rl->max_keys);
		return -1;
	}

	n = &rl->ns[rl->n_ns];
	memset(n, 0, sizeof(*n));
	/* Indexes in the table by name and size: a state file's counts
	 * follow their namespace and window, wherever the configuration now
	 * lists them. */
	int sid = shm_ns_claim(rl->shm, d.name);
	if (sid < 0) {
		rl_errf(err, errlen, "namespace \"%s\": the state file holds %d other namespaces "
			"already; move it away to start afresh", d.name, RL_MAX_NAMESPACES);
		return -1;
	}
	for (size_t i = 0; i < d.n_window_sizes; i++) {
		uint32_t period = algo_of(d.algorithm)->period(&d, d.window_sizes[i]);
		int w = shm_win_claim(rl->shm, (unsigned)sid, period);
		if (w < 0) {
			rl_errf(err, errlen, "namespace \"%s\": the state file holds %d other window "
				"sizes for it already; move it away to start afresh", d.name,
				RL_MAX_WINDOWS);
			return -1;
		}
		n->wid[i] = (uint8_t)w;
	}
	n->algo = algo_of(d.algorithm);
	n->sid = (unsigned)sid;
	if (d.strategy_opts && !(d.strategy_opts = strdup(d.strategy_opts))) {
		rl_errf(err, errlen, "namespace \"%s\": out of memory", d.name);
		return -1;
	}
	n->def = d;
	n->name_len = len;
	if (len == 7 && memcmp(d.name, "default", 7) == 0)
		rl->default_ns = (int)rl->n_ns;
	rl->n_ns++;
	rl_apply_shares(rl);
	/* Every node must name a long key alike: without a shared secret,
	 * the public key. */
	if (rl_wants_public_key(rl, &d) && !rl->public_key) {
		shm_set_digest_key(rl->shm, RL_DIGEST_KEY);
		rl->public_key = true;
	}
	return 0;
}

int rl_reload(struct rl *rl, const struct ns_def *defs, size_t n, char *err, size_t errlen)
{
	struct rl *next = calloc(1, sizeof(*next));

	if (!next) {
		rl_errf(err, errlen, "%s", "out of memory");
		return -1;
	}
	memcpy(next->name, rl->name, sizeof(next->name));
	next->shm = rl->shm;
	next->max_keys = rl->max_keys;
	next->default_ns = -1;
	next->secret_set = rl->secret_set;
	next->public_key = rl->public_key;
	for (size_t i = 0; i < n; i++) {
		if (rl_new_namespace(next, &defs[i], err, errlen) < 0) {
			for (size_t j = 0; j < next->n_ns; j++)
				free((void *)next->ns[j].def.strategy_opts);
			free(next);
			/* Shares as they were (rl_new_namespace set next's). */
			rl_apply_shares(rl);
			return -1;
		}
	}
	for (size_t i = 0; i < rl->n_ns; i++) {
		/* A namespace gone keeps no guaranteed room: its entries are
		 * the least worth keeping once the table is full. */
		if (rl_ns_of_shm(next, rl->ns[i].sid) < 0)
			shm_set_ns(rl->shm, rl->ns[i].sid, 1, true);
		free((void *)rl->ns[i].def.strategy_opts);
	}
	memcpy(rl->ns, next->ns, sizeof(rl->ns));
	rl->n_ns = next->n_ns;
	rl->default_ns = next->default_ns;
	rl->public_key = next->public_key;
	free(next);
	return 0;
}

int rl_namespace_index(const struct rl *rl, const char *name, size_t len)
{
	if (!name || len == 0)
		return rl->default_ns;
	for (size_t i = 0; i < rl->n_ns; i++)
		if (rl->ns[i].name_len == len && memcmp(rl->ns[i].def.name, name, len) == 0)
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
	return ns_window_index(&n->def, size);
}

void rl_set_key_secret(struct rl *rl, const char *secret, size_t len)
{
	uint8_t k[16];

	hash_digest_key(secret, len, k);
	shm_set_digest_key(rl->shm, k);
	rl->secret_set = true;
	rl->public_key = false;
}

bool rl_digest_key_is_public(const struct rl *rl)
{
	return rl->public_key;
}

_Static_assert(RL_DIGEST_LEN == HASH_DIGEST_LEN, "a stored key's digest is hash.c's");

static inline bool rl_needs_digest(const char *key, size_t len)
{
	return len > SHM_KEY_MAX || key[0] == '#';
}

static uint64_t rl_ndigests;           /* rl_digests() */

uint64_t rl_digests(void)
{
	return rl_ndigests;
}

size_t rl_skey_digest(const struct rl *rl, const char *key, size_t len, struct rl_skey *k)
{
	k->text = key;
	k->digested = true;
	k->len = RL_DIGEST_LEN;
	hash_digest(shm_digest_key(rl->shm), key, len, k->digest);
	rl_ndigests++;
	return RL_DIGEST_LEN;
}

/* The hit's arguments checked: the namespace, the window, the stored key
 * (a verbatim one that should have been digested names no slot: no key
 * given verbatim can be a digest), the numbers. Returns the window's
 * index in the namespace, or -1 (rl_errno()). Inlined into both callers
 * (rl_hit_skey's path, rl_release). */
static inline __attribute__((always_inline)) int
rl_hit_check(struct rl *rl, int ns, const struct rl_skey *key, uint32_t window_size,
			double cost, double weight, double now, double limit, enum rl_admit admit)
{
	int win;

	/* Exact and degraded decide against a limit. */
	if (admit != RL_ADMIT_LOCAL && !(limit >= 0))
		return rl_fail(rl, RL_ERR_VALUE);

	if (ns < 0 || (size_t)ns >= rl->n_ns)
		return rl_fail(rl, RL_ERR_NAMESPACE);
	win = rl_win_index(&rl->ns[ns], window_size);
	if (win < 0)
		return rl_fail(rl, RL_ERR_WINDOW);
	if (key->len == 0 || (!key->digested && rl_needs_digest(key->text, key->len)))
		return rl_fail(rl, RL_ERR_KEY);
	/* The negated comparisons also reject NaN. */
	if (!(cost >= 0) || !isfinite(cost) || !(now >= 0 && now < RL_NOW_MAX) || isnan(limit))
		return rl_fail(rl, RL_ERR_VALUE);
	if (!(weight < 0 || weight <= 1))
		return rl_fail(rl, RL_ERR_VALUE);
	return win;
}

/* The engine under rl_hit, rl_hit_exact and rl_hit_degraded: checked,
 * the slots found, counted (again if the hit raced an eviction), the key
 * protected if over its limit, reported. */
int rl_hit_skey(struct rl *rl, int ns, const struct rl_skey *key, uint32_t window_size,
		double cost, double weight, double now, double limit, bool count_denied,
		enum rl_admit admit, unsigned nodes, struct rl_result *out)
{
	struct rl_result tmp;
	struct shm_key k;
	int win = rl_hit_check(rl, ns, key, window_size, cost, weight, now, limit, admit);

	if (win < 0)
		return -1;
	const struct rl_ns *n = &rl->ns[ns];
	if (shm_key_init(rl->shm, &k, n->sid, n->wid[win], rl_skey_bytes(key), key->len) < 0)
		return rl_fail(rl, RL_ERR_KEY);
	const struct algo_hit h = {
		.t = rl->shm, .k = &k, .def = &n->def, .size = window_size,
		.cost = cost, .weight = weight, .now = now,
		.limit = limit, .count_denied = count_denied, .admit = admit, .nodes = nodes,
	};
	if (n->algo->hit(&h, out ? out : &tmp) < 0)
		return rl_fail(rl, RL_ERR_FULL);
	return 0;
}

int rl_release(struct rl *rl, int ns, const struct rl_skey *key, uint32_t window_size,
	       const char *id, size_t idlen, double now)
{
	struct shm_key k;
	int win = rl_hit_check(rl, ns, key, window_size, 0, RL_WEIGHT_AUTO, now, -1,
			       RL_ADMIT_LOCAL);

	if (win < 0)
		return -1;
	const struct rl_ns *n = &rl->ns[ns];
	if (!n->algo->release)
		return rl_fail(rl, RL_ERR_VALUE);
	if (shm_key_init(rl->shm, &k, n->sid, n->wid[win], rl_skey_bytes(key), key->len) < 0)
		return rl_fail(rl, RL_ERR_KEY);
	return n->algo->release(rl->shm, &k, &n->def, window_size, id, idlen, now);
}

bool rl_lease_ours(struct rl *rl, int ns, const struct rl_skey *key, uint32_t window_size,
		   const char *id, size_t idlen)
{
	struct shm_key k;
	int win = rl_hit_check(rl, ns, key, window_size, 0, RL_WEIGHT_AUTO, 0, -1, RL_ADMIT_LOCAL);

	if (win < 0)
		return false;
	const struct rl_ns *n = &rl->ns[ns];
	return n->algo->release &&
	       shm_key_init(rl->shm, &k, n->sid, n->wid[win], rl_skey_bytes(key), key->len) == 0 &&
	       algo_lease_ours(rl->shm, &k, id, idlen);
}

int rl_hit(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t window_size,
	   double cost, double weight, double now, double limit, bool count_denied,
	   struct rl_result *out)
{
	struct rl_skey k;

	rl_skey_make(rl, key, keylen, &k);
	return rl_hit_skey(rl, ns, &k, window_size, cost, weight, now, limit, count_denied,
			 RL_ADMIT_LOCAL, 0, out);
}

int rl_hit_exact(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t window_size,
		 double cost, double weight, double now, double limit, bool count_denied,
		 struct rl_result *out)
{
	struct rl_skey k;

	rl_skey_make(rl, key, keylen, &k);
	return rl_hit_skey(rl, ns, &k, window_size, cost, weight, now, limit, count_denied,
			 RL_ADMIT_EXACT, 0, out);
}

int rl_hit_degraded(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t window_size,
		    double cost, double weight, double now, double limit, bool count_denied,
		    unsigned nodes, struct rl_result *out)
{
	struct rl_skey k;

	rl_skey_make(rl, key, keylen, &k);
	return rl_hit_skey(rl, ns, &k, window_size, cost, weight, now, limit, count_denied,
			 RL_ADMIT_DEGRADED, nodes, out);
}

double rl_degraded_cap(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t size,
		       double now, double limit, double weight, unsigned nodes)
{
	const struct rl_ns *n;
	struct shm_key k;
	struct shm_ref cur, prev;
	int win;

	if (ns < 0 || (size_t)ns >= rl->n_ns || (win = rl_win_index((n = &rl->ns[ns]), size)) < 0 ||
	    !n->algo->share_cap ||
	    shm_key_init(rl->shm, &k, n->sid, n->wid[win], key, keylen) < 0)
		return limit / (double)(nodes > 0 ? nodes : 1);
	uint32_t period = rl_period(n, size);
	int64_t start = window_start(now, period);
	shm_find(rl->shm, &k, start, weight > 0 ? start - (int64_t)period : -1, &cur, &prev);
	return n->algo->share_cap(rl->shm, &cur, &prev, weight, limit, nodes);
}

_Static_assert(RL_STORED_KEY_MAX == SHM_KEY_MAX, "stored keys fit a slot");
_Static_assert(NS_MAX == SHM_MAX_NS && NS_NAME_MAX <= SHM_NAME_MAX,
	       "every namespace has an index and a name in the table");

size_t rl_stored_key(const struct rl *rl, const char *key, size_t len, char *out)
{
	struct rl_skey k;

	rl_skey_make(rl, key, len, &k);
	memcpy(out, rl_skey_bytes(&k), k.len);
	return k.len;
}

/* The shm key of a stored key's window (ns, size, start), with v (a total
 * or a diff) checked. Returns 0 or -1 (rl_errno()). */
static int rl_stored_window(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t size,
			    int64_t start, double v, struct shm_key *k)
{
	int win;

	if (ns < 0 || (size_t)ns >= rl->n_ns)
		return rl_fail(rl, RL_ERR_NAMESPACE);
	win = rl_win_index(&rl->ns[ns], size);
	if (win < 0)
		return rl_fail(rl, RL_ERR_WINDOW);
	if (!(v >= 0) || !isfinite(v) || start < 0 || start >= (int64_t)RL_NOW_MAX)
		return rl_fail(rl, RL_ERR_VALUE);
	if (shm_key_init(rl->shm, k, rl->ns[ns].sid, rl->ns[ns].wid[win], key, keylen) < 0)
		return rl_fail(rl, RL_ERR_KEY);
	return 0;
}

int rl_seed(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t size, int64_t start,
	    double total, double now)
{
	struct shm_key k;
	struct shm_ref ref, none;
	struct shm_entry e;

	if (rl_stored_window(rl, ns, key, keylen, size, start, total, &k) < 0)
		return -1;
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

/* The slot of k's window `start`, found or made. Returns 0 or -1. */
static int rl_window_slot(struct rl *rl, const struct shm_key *k, int64_t start, double now,
			  struct shm_ref *ref)
{
	struct shm_ref none;

	shm_find(rl->shm, k, start, -1, ref, &none);
	if (ref->idx == SHM_NONE && shm_insert(rl->shm, k, start, now, ref) < 0)
		return rl_fail(rl, RL_ERR_FULL);
	return 0;
}

/* rl_keep (sign 1) and rl_unkeep (sign -1): the algorithm's take_back of
 * -sign x v with its diff (the window counter's: count and diff += sign x
 * v; GCRA's: its TAT moved by v hits' time, its diff by v), in the slot of
 * the period holding start. */
static int rl_keep_signed(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t size,
			  int64_t start, double v, double sign, double now)
{
	struct shm_key k;
	struct shm_ref ref;

	if (rl_stored_window(rl, ns, key, keylen, size, start, v, &k) < 0)
		return -1;
	const struct rl_ns *n = &rl->ns[ns];
	start -= start % rl_period(n, size);
	for (int tries = 1;; tries++) {
		if (rl_window_slot(rl, &k, start, now, &ref) < 0)
			return -1;
		n->algo->take_back(rl->shm, &ref, &n->def, size, -sign * v, true, false);
		if (shm_still(rl->shm, &ref) || tries == RL_HIT_TRIES)
			return 0;
	}
}

int rl_keep(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t size, int64_t start,
	    double v, double now)
{
	return rl_keep_signed(rl, ns, key, keylen, size, start, v, 1, now);
}

int rl_unkeep(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t size,
	      int64_t start, double v, double now)
{
	return rl_keep_signed(rl, ns, key, keylen, size, start, v, -1, now);
}

int rl_uncount(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t size,
	       int64_t start, double v, bool with_diff, bool granted)
{
	struct shm_key k;
	struct shm_ref cur, none;

	if (rl_stored_window(rl, ns, key, keylen, size, start, v, &k) < 0)
		return -1;
	/* The slot of the period holding the window's start (a multiple of
	 * the window: algo_ops.period). */
	const struct rl_ns *n = &rl->ns[ns];
	uint32_t period = rl_period(n, size);
	shm_find(rl->shm, &k, start - start % period, -1, &cur, &none);
	/* Gone meanwhile (evicted): its count went with it. */
	if (cur.idx == SHM_NONE)
		return 0;
	n->algo->take_back(rl->shm, &cur, &n->def, size, v, with_diff, granted);
	return 0;
}

int rl_adjust(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t size,
	      int64_t start, double v, bool with_diff, double now)
{
	struct shm_key k;
	struct shm_ref ref, none;

	if (!isfinite(v))
		return rl_fail(rl, RL_ERR_VALUE);
	if (rl_stored_window(rl, ns, key, keylen, size, start, 0, &k) < 0)
		return -1;
	const struct rl_ns *n = &rl->ns[ns];
	start -= start % rl_period(n, size);
	for (int tries = 1;; tries++) {
		if (with_diff || v > 0) {
			if (rl_window_slot(rl, &k, start, now, &ref) < 0)
				return -1;
		} else {
			shm_find(rl->shm, &k, start, -1, &ref, &none);
			if (ref.idx == SHM_NONE)
				return 0;       /* evicted: its count went with it */
		}
		n->algo->take_back(rl->shm, &ref, &n->def, size, -v, with_diff, false);
		if ((!with_diff && !(v > 0)) || shm_still(rl->shm, &ref) || tries == RL_HIT_TRIES)
			return 0;
	}
}

void rl_mark_key(uint64_t tag, char out[RL_MARK_LEN])
{
	static const char hex[] = "0123456789abcdef";

	memcpy(out, "#@S", 3);
	for (int i = 0; i < 16; i++)
		out[3 + i] = hex[tag >> (60 - 4 * i) & 0xf];
}

int rl_mark_once(struct rl *rl, int ns, uint32_t size, int64_t until, uint64_t tag, double now)
{
	char text[RL_MARK_LEN];
	struct shm_key k;
	struct shm_ref ref;
	/* Taken back two sizes after its start: at until. */
	int64_t start = until - 2 * (int64_t)size;

	rl_mark_key(tag, text);
	if (!(now < (double)until))
		return 0;
	if (rl_stored_window(rl, ns, text, sizeof(text), size, start, 0, &k) < 0)
		return -1;
	int how = shm_insert(rl->shm, &k, start, now, &ref);
	if (how < 0)
		return rl_fail(rl, RL_ERR_FULL);
	if (how == SHM_INS_FOUND)
		return 0;
	shm_add(rl->shm, &ref, 1, false);
	shm_protect(rl->shm, &ref);
	return 1;
}

uint64_t rl_mac(const struct rl *rl, const void *data, size_t len)
{
	return hash_siphash24(shm_digest_key(rl->shm), data, len);
}

int rl_store_answer(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t size,
		    double now, double answer, double *view)
{
	struct shm_key k;
	struct shm_ref ref;

	if (ns < 0 || (size_t)ns >= rl->n_ns || !rl->ns[ns].algo->store_answer)
		return rl_fail(rl, RL_ERR_VALUE);
	const struct rl_ns *n = &rl->ns[ns];
	int64_t start = window_start(now, rl_period(n, size));
	if (rl_stored_window(rl, ns, key, keylen, size, start, answer, &k) < 0 ||
	    rl_window_slot(rl, &k, start, now, &ref) < 0)
		return -1;
	*view = n->algo->store_answer(rl->shm, &ref, &n->def, size, start, now, answer);
	return 0;
}

int rl_grant(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t size, int64_t start,
	     double amount, double now)
{
	struct shm_key k;
	struct shm_ref ref;

	if (rl_stored_window(rl, ns, key, keylen, size, start, amount, &k) < 0 ||
	    rl_window_slot(rl, &k, start, now, &ref) < 0)
		return -1;
	shm_grant_add(rl->shm, &ref, amount);
	return 0;
}

unsigned rl_shm_win(const struct rl *rl, int ns, uint32_t size)
{
	int win = ns >= 0 && (size_t)ns < rl->n_ns ? rl_win_index(&rl->ns[ns], size) : -1;

	return win < 0 ? SHM_MAX_WIN : rl->ns[ns].wid[win];
}

/* A client key's slots in window `size` at `now`: the current one and the
 * one before (SHM_NONE where there is none). Returns 0 or -1 (rl_errno()). */
static int rl_key_slots(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t size,
			double now, struct shm_ref *cur, struct shm_ref *prev, int64_t *startp)
{
	const struct rl_ns *n;
	struct rl_skey sk;
	struct shm_key k;
	int win;

	if (ns < 0 || (size_t)ns >= rl->n_ns)
		return rl_fail(rl, RL_ERR_NAMESPACE);
	n = &rl->ns[ns];
	if ((win = rl_win_index(n, size)) < 0)
		return rl_fail(rl, RL_ERR_WINDOW);
	if (!key || keylen == 0)
		return rl_fail(rl, RL_ERR_KEY);
	rl_skey_make(rl, key, keylen, &sk);
	if (shm_key_init(rl->shm, &k, n->sid, n->wid[win], rl_skey_bytes(&sk), sk.len) < 0)
		return rl_fail(rl, RL_ERR_KEY);
	/* The slots of this period and the one before (algo_ops.period). */
	uint32_t period = rl_period(n, size);
	int64_t start = window_start(now, period);
	shm_find(rl->shm, &k, start, start - (int64_t)period, cur, prev);
	if (startp)
		*startp = start;
	return 0;
}

int rl_inspect(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t size, double now,
	       bool sliding, struct rl_key_info *out)
{
	struct shm_ref cur, prev;
	int64_t start;

	memset(out, 0, sizeof(*out));
	if (rl_key_slots(rl, ns, key, keylen, size, now, &cur, &prev, &start) < 0)
		return -1;
	const struct rl_ns *n = &rl->ns[ns];
	n->algo->inspect(rl->shm, &n->def, size, start, now, sliding, &cur, &prev, out);
	return 0;
}

int rl_forget(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t size, double now,
	      double *removed)
{
	struct shm_ref cur, prev;

	*removed = 0;
	if (rl_key_slots(rl, ns, key, keylen, size, now, &cur, &prev, NULL) < 0)
		return -1;
	*removed = shm_sync_forget(rl->shm, &cur) + shm_sync_forget(rl->shm, &prev);
	return 0;
}

int rl_unreserve(struct rl *rl, int ns, const char *key, size_t keylen, uint32_t size,
		 int64_t start, double spent, double returned)
{
	struct shm_key k;
	struct shm_ref ref, none;
	struct shm_entry e;

	if (rl_stored_window(rl, ns, key, keylen, size, start, fabs(spent) + fabs(returned),
			     &k) < 0)
		return -1;
	shm_find(rl->shm, &k, start, -1, &ref, &none);
	if (ref.idx != SHM_NONE && shm_read(rl->shm, ref.idx, &e) == 0)
		shm_grant_unres_add(rl->shm, &e, -spent, -returned);
	return 0;
}

unsigned rl_shm_ns(const struct rl *rl, int ns)
{
	return ns >= 0 && (size_t)ns < rl->n_ns ? rl->ns[ns].sid : SHM_MAX_NS;
}

int rl_ns_of_shm(const struct rl *rl, unsigned sid)
{
	for (size_t i = 0; i < rl->n_ns; i++)
		if (rl->ns[i].sid == sid)
			return (int)i;
	return -1;
}

bool rl_state_reused(const struct rl *rl)
{
	return shm_reused(rl->shm);
}

const struct ns_def *rl_namespace_def(const struct rl *rl, int ns)
{
	return ns >= 0 && (size_t)ns < rl->n_ns ? &rl->ns[ns].def : NULL;
}

unsigned rl_active_nodes(const struct rl *rl, int ns)
{
	return ns >= 0 && (size_t)ns < rl->n_ns ? shm_nodes(rl->shm, rl->ns[ns].sid) : 0;
}

size_t rl_max_keys(const struct rl *rl)
{
	return rl->max_keys;
}

size_t rl_namespace_count(const struct rl *rl)
{
	return rl->n_ns;
}

double rl_sync_rate(const struct rl *rl, int ns)
{
	return ns >= 0 && (size_t)ns < rl->n_ns ? rl->ns[ns].def.sync_rate : -1;
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
	if (ns < 0 || (size_t)ns >= rl->n_ns || rl->ns[ns].def.n_window_sizes != 1)
		return 0;
	return rl->ns[ns].def.window_sizes[0];
}

int rl_ns_stats(const struct rl *rl, int ns, struct rl_ns_stats *out)
{
	struct shm_ns_stats st;
	int64_t cap;

	if (ns < 0 || (size_t)ns >= rl->n_ns || shm_ns_stats(rl->shm, rl->ns[ns].sid, &st) < 0)
		return -1;
	/* Reported in 0 .. max_keys (the capacity, metrics table_capacity).
	 * The table may hold a few more (inserts racing for its last free
	 * entries, a namespace that may evict taking spare slots once nothing
	 * of its own can go: agent/shm.h), and a process killed between a
	 * slot's CAS and the count's update leaves the count one off until
	 * the state file is loaded again (shm_open_file recounts). */
	cap = (int64_t)rl->max_keys;
	*out = (struct rl_ns_stats){ .share = st.share,
				     .live = st.live < 0 ? 0 : st.live > cap ? cap : st.live,
				     .evicted = st.evicted, .refused = st.refused };
	return 0;
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

void rl_worker_gone(struct rl *rl)
{
	shm_grant_unstick(rl->shm);
}

/* ---- limits per key set at run time ---- */

_Static_assert(LIMITS_NS == SHM_MAX_NS, "an override's namespace is the table's index");

int rl_limits_open(struct rl *rl, size_t total, size_t *dropped, char *err, size_t errlen)
{
	int fd = shm_state_fd(rl->shm);

	*dropped = 0;
	rl->limits = fd >= 0 ? limits_open_file(fd, shm_bytes(rl->shm), total, dropped, err, errlen)
			     : limits_create(total, err, errlen);
	rl->ovr_count = limits_counts(rl->limits);
	return rl->limits ? 0 : -1;
}

struct limits *rl_limits(const struct rl *rl)
{
	return rl->limits;
}

int64_t rl_limit_of(const struct rl *rl, int ns, uint32_t size, const struct rl_skey *key,
		    int64_t configured)
{
	/* The usual case, a namespace without overrides: one load. */
	if (!rl->ovr_count || (size_t)ns >= rl->n_ns ||
	    atomic_load_explicit(&rl->ovr_count[rl->ns[ns].sid], memory_order_relaxed) == 0)
		return configured;
	return limits_get(rl->limits, rl->ns[ns].sid, size, rl_skey_bytes(key), key->len,
			  configured);
}
