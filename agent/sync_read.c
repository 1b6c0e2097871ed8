/*
 * sync_read.c - a key's counts read from its namespace's store, for an
 * operator (GET /keys, docs/OPERATIONS.md, "Who is limited"): what the
 * store holds of the key in the current and previous window of each of
 * its namespace's sizes, whatever this node has seen of it. The node's
 * own view is the library's (rl_inspect); this file only asks the store.
 *
 *   sync_read   one strategy_ops.get_window per counter (2 per window
 *               size), sent at once; the caller is answered once, when
 *               the last one has answered (each within the store's
 *               timeout_ms: the stores' contract), or at once when the
 *               store refuses them all (away, not connected)
 *
 *   steps       a concurrency limit's and a GCRA's (their store holds
 *               leases by id, TATs, not window counts): their store step
 *               as a read, with the loop iteration's admissions
 *               (sync_gather_admit): a release of an id no lease has (the
 *               leases in flight, the seconds until the first expires), a
 *               TAT step of cost 0 (the seconds the TAT runs ahead); the
 *               steps drop expired leases and TATs, as any does: no count
 *               moves
 *
 * Nothing is written: not the table, not the store. A read needs no list
 * of the sync's: sync_stop destroys the stores, which fail every call in
 * flight, so a read always ends, answered or not, before its sync is
 * gone. sync.c calls nothing of this file and this file nothing of
 * sync.c.
 */
#include "agent/sync_int.h"

#include <stdlib.h>
#include <string.h>

#include "strategies/window_start.h"

struct sync_read {
	struct sync *sy;
	sync_read_cb cb;              /* the caller, until answered or detached */
	void *arg;
	char ns[NS_NAME_MAX];         /* the counters point to these copies */
	char *key;                    /* stored form */
	size_t keylen;
	struct strategy_counter c[2 * NS_MAX_WINDOWS];   /* current, previous per size */
	struct strategy_admit a[NS_MAX_WINDOWS]; /* a concurrency limit's leases
	                                 read (one), a GCRA's TATs (one per size) */
	struct sync_read_count out[NS_MAX_WINDOWS];
	size_t nsizes;
	unsigned outstanding;         /* get_window calls not answered */
	char why[STRATEGY_ERR_MAX];   /* the first failure ("" = none) */
};

static void sync_read_free(struct sync_read *r)
{
	free(r->key);
	free(r);
}

/* The first failure is the one the caller hears of. */
static void sync_read_fail(struct sync_read *r, const char *why)
{
	if (!r->why[0])
		snprintf(r->why, sizeof(r->why), "%s", why && why[0] ? why : "the store failed");
}

static void sync_on_read(void *arg, int status, const char *errstr)
{
	struct sync_read *r = arg;

	if (status != 0)
		sync_read_fail(r, errstr);
	if (--r->outstanding > 0)
		return;
	for (size_t i = 0; i < r->nsizes; i++) {
		const struct strategy_counter *cur = &r->c[2 * i], *prev = &r->c[2 * i + 1];

		r->out[i].ok = cur->ok && prev->ok;
		r->out[i].current = cur->ok ? cur->total : 0;
		r->out[i].previous = prev->ok ? prev->total : 0;
		if (!r->out[i].ok)
			sync_read_fail(r, NULL);
	}
	if (r->cb)
		r->cb(r->arg, r->out, r->nsizes, r->why[0] ? r->why : NULL);
	sync_read_free(r);
}

/* A concurrency limit's leases read: its lease step, a release of an id
 * no lease has ("?": ids are hex), answered with the leases in flight
 * and the seconds until the first expires. */
static void sync_on_step_read(void *arg, int status, const char *errstr)
{
	struct sync_read *r = arg;

	for (size_t i = 0; i < r->nsizes; i++) {
		const struct strategy_admit *a = &r->a[i];
		if (status != 0 || !a->ok)
			sync_read_fail(r, errstr);
		r->out[i].ok = a->ok;
		r->out[i].current = a->ok ? a->current : 0;
		r->out[i].previous = a->ok ? a->previous : 0;
	}
	if (r->cb)
		r->cb(r->arg, r->out, r->nsizes, r->why[0] ? r->why : NULL);
	sync_read_free(r);
}

/* The store's steps of an algorithm that keeps no window counts there,
 * as reads, one per window size (concurrency: its one): a lease step that
 * releases an id no lease has ("?": ids are hex), answered with the
 * leases in flight and the seconds until the first expires; a TAT step
 * of cost 0 and diff 0, which moves no TAT, answered with the seconds it
 * runs ahead of the store's clock. Returns 0 (sent), or -1 (r->why). */
static int sync_read_steps(struct sync_ns *sn, struct sync_read *r, unsigned ns)
{
	const struct ns_def *d = sn->def;
	bool lease = d->algorithm == NS_ALGO_CONCURRENCY;

	r->nsizes = lease ? 1 : d->n_window_sizes;
	for (size_t i = 0; i < r->nsizes; i++) {
		uint32_t size = d->window_sizes[i];
		int64_t limit = ns_limit_of(d, size);
		r->out[i] = (struct sync_read_count){ .size = size };
		r->a[i] = (struct strategy_admit){
			.ns = r->ns, .ns_len = strlen(r->ns), .key = r->key, .key_len = r->keylen,
			.size = size, .cost = 0,
			.step = lease ? STRATEGY_STEP_LEASE : STRATEGY_STEP_TAT,
			.lease = "?", .lease_len = lease ? 1 : 0,
			.lease_s = (double)ns_lease_ms(d) / 1000.0,
			.limit = limit > 0 ? (double)limit : 1, .burst = (double)ns_burst(d),
		};
	}
	if (!sn->ops->admit ||
	    sync_gather_admit(r->sy, ns, r->a, r->nsizes, sync_on_step_read, r) < 0) {
		sync_read_fail(r, "not connected");
		return -1;
	}
	return 0;
}

/* A window counter's: the current and previous window of each size, one
 * get_window each. Returns 0 (some sent), or -1 (none: r->why). */
static int sync_read_windows(struct sync_ns *sn, struct sync_read *r, double now)
{
	r->nsizes = sn->def->n_window_sizes;
	for (size_t i = 0; i < r->nsizes; i++) {
		uint32_t size = sn->def->window_sizes[i];
		int64_t start = strategy_window_start(now, size);

		r->out[i] = (struct sync_read_count){ .size = size, .start = start };
		for (size_t k = 0; k < 2; k++)
			r->c[2 * i + k] = (struct strategy_counter){
				.ns = r->ns, .ns_len = strlen(r->ns), .key = r->key,
				.key_len = r->keylen, .size = size, .start = start - (int64_t)k * size };
	}
	/* Callbacks never run inside the call that starts them: the count
	 * of calls out is complete before the first answer. */
	for (size_t i = 0; i < 2 * r->nsizes; i++) {
		char err[STRATEGY_ERR_MAX] = "";

		if (sn->ops->get_window(sn->st, &r->c[i], sync_on_read, r, err) < 0)
			sync_read_fail(r, err);
		else
			r->outstanding++;
	}
	return r->outstanding > 0 ? 0 : -1;
}

int sync_read(struct sync *sy, unsigned ns, const char *key, size_t keylen, double now,
	      sync_read_cb cb, void *arg, struct sync_read **out, char errstr[STRATEGY_ERR_MAX])
{
	struct sync_ns *sn = sy && !sy->stopping ? sync_find_ns(sy, ns) : NULL;
	struct sync_read *r;

	*out = NULL;
	if (!sn || !sn->ops->get_window || keylen == 0) {
		snprintf(errstr, STRATEGY_ERR_MAX, "this worker does not sync the namespace");
		return -1;
	}
	if (!(r = calloc(1, sizeof(*r))) || !(r->key = malloc(keylen))) {
		free(r);
		snprintf(errstr, STRATEGY_ERR_MAX, "out of memory");
		return -1;
	}
	memcpy(r->key, key, keylen);
	r->keylen = keylen;
	r->sy = sy;
	snprintf(r->ns, sizeof(r->ns), "%s", sn->def->name);
	int rc = sn->def->algorithm != NS_ALGO_WINDOW ? sync_read_steps(sn, r, ns)
						      : sync_read_windows(sn, r, now);
	if (rc < 0) {
		snprintf(errstr, STRATEGY_ERR_MAX, "%s", r->why);
		sync_read_free(r);
		return -1;
	}
	r->cb = cb;
	r->arg = arg;
	*out = r;
	return 0;
}

void sync_read_detach(struct sync_read *r)
{
	if (r) {
		r->cb = NULL;
		r->arg = NULL;
	}
}
