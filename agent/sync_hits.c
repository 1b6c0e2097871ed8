/*
 * sync_hits.c - sync_rate 0 and exact admission (see sync.h): hits that
 * wait for the store, in the words of docs/CLUSTER.md, "Words".
 *
 *   push      a batch of hits (sync_hits_push), already counted or read
 *             in the table by the library, becomes per namespace one push
 *             (with a read of the previous window when asked) and one call
 *             of admissions, each asking for a grant when alone in flight
 *             for its slot; sync_gather.c gathers and sends them
 *   apply     the store's totals, decisions and grants go into the table
 *             (sync_hits_apply); what the store did not confirm stays a
 *             diff for the retry cycle (sync_cycle.c), and a call left in
 *             doubt is resent by the list of calls in doubt (sync_doubt.c)
 */
#include "agent/sync_int.h"

#include <stdlib.h>
#include <string.h>

#include "agent/algo.h"
#include "agent/log.h"
#include "agent/window.h"

/* Lines about one hit or one admission (a table full when a store's answer
 * comes back) come at most once a second per process, with the number
 * held back. */
static struct log_limit sync_hit_log;
#define SYNC_HIT_LOG(level, fmt, ...)                                              \
	do {                                                                           \
		if ((level) <= log_level && log_limit(&sync_hit_log, rl_now()))          \
			LOG((level), fmt "%s", __VA_ARGS__, log_limit_suppressed(&sync_hit_log)); \
	} while (0)

#define SYNC_GRANT_FIRST_SHARE 64 /* a first grant: this part of a node's share */

/* ---- hits pushed ---- */

/* The nodes sharing a namespace's limits, for grants: as last counted, 1
 * until then. A count too low only makes grants bigger, never lets the
 * cluster pass a limit: the store counts a grant when it gives it. */
static unsigned sync_nodes(const struct shm_table *t, unsigned ns)
{
	unsigned n = shm_nodes(t, ns);

	return n > 0 ? n : 1;
}

/* An admission on slot idx is sent: counted in flight, and the grant it
 * asks for (0: none): twice the node's demand on the key in the last sync
 * cycle; before the node has seen a cycle of it, 1/SYNC_GRANT_FIRST_SHARE
 * of the limit's share of a node (a small limit gets none: its first hits
 * go to the store one by one). Only an admission alone in flight for its
 * slot asks: the hits of a burst sent together would all be decided by
 * the store before a grant came back, and a grant nobody uses only holds
 * headroom (docs/CLUSTER.md, "The bound"). */
static double sync_grant_want(struct shm_table *t, uint32_t idx, double limit, unsigned nodes)
{
	double last;

	if (idx == UINT32_MAX)
		return 0;
	if (shm_grant_flight(t, idx, 1) > 1 || nodes == 0 || (last = shm_grant_begin(t, idx)) < 0)
		return 0;
	return last > 0 ? 2 * last : limit / (SYNC_GRANT_FIRST_SHARE * nodes);
}

static void sync_hits_on_pushed(void *arg, int status, const char *errstr)
{
	struct sync_hits *b = arg;

	if (status < 0 && !b->why[0])
		snprintf(b->why, sizeof(b->why), "%s", errstr ? errstr : "failed");
	if (--b->outstanding == 0)
		b->done(b->arg);
}

/* The hits of b->h[i]'s namespace, from i on, appended to b's counters
 * (one push) and admissions (one call); each hit's ci says which item is
 * its. */
static void sync_hits_build(struct sync *sy, struct sync_hits *b, size_t i, double now)
{
	int ns = b->h[i].ns;
	const struct ns_def *def = rl_namespace_def(sy->rl, ns);
	const char *nsname = def->name;
	/* What the store's step of an admission is: the algorithm's. */
	enum algo_step step = algo_of(def->algorithm)->step;
	unsigned nodes = sync_nodes(sy->t, rl_shm_ns(sy->rl, ns));

	for (size_t j = i; j < b->n; j++) {
		struct sync_hit *h = &b->h[j];
		struct shm_entry *e = &h->e;

		if (h->ns != ns)
			continue;
		if (h->idx == UINT32_MAX || shm_sync_read(sy->t, h->idx, e) < 0) {
			/* No local slot (a read of a key this node has not
			 * counted): ask the store, seed the slot from it. */
			e->idx = UINT32_MAX;
			e->keylen = (uint8_t)h->keylen;
			memcpy(e->key, h->key, h->keylen);
			e->start = window_start(now, h->size);
			e->size = h->size;
		}
		if (h->admit) {
			h->ci = (int)b->na;
			b->a[b->na++] = (struct strategy_admit){
				.ns = nsname, .ns_len = strlen(nsname), .key = e->key,
				.key_len = e->keylen, .start = e->start, .size = e->size,
				.cost = h->cost, .limit = h->limit, .weight = h->weight,
				.count_denied = h->count_denied, .nodes = nodes,
				.step = (enum strategy_step)step, .burst = (double)ns_burst(def),
			};
			if (step == ALGO_STEP_LEASE) {
				struct strategy_admit *a = &b->a[b->na - 1];
				a->lease_len = algo_lease_text(h->lease, h->lease_mac, b->lease[j]);
				a->lease = b->lease[j];
				a->lease_s = (double)ns_lease_ms(def) / 1000.0;
			}
			if (step == ALGO_STEP_WINDOW) {
				b->a[b->na - 1].want = sync_grant_want(sy->t, e->idx, h->limit,
									nodes);
			} else {
				/* The window's size, not its slot's period
				 * (algo_ops.period: GCRA's window x burst,
				 * concurrency's lease_ms): T = size / limit,
				 * rl_store_answer's window, a release's key. */
				b->a[b->na - 1].size = h->size;
				if (e->idx != UINT32_MAX)
					shm_grant_flight(sy->t, e->idx, 1); /* in flight, no grant */
			}
			continue;
		}
		h->ci = (int)b->nc;
		b->c[b->nc++] = (struct strategy_counter){
			.ns = nsname, .ns_len = strlen(nsname), .key = e->key,
			.key_len = e->keylen, .start = e->start, .size = e->size,
			.diff = h->diff,
		};
		if (h->with_prev)
			b->c[b->nc++] = (struct strategy_counter){
				.ns = nsname, .ns_len = strlen(nsname), .key = e->key,
				.key_len = e->keylen, .start = e->start - (int64_t)e->size,
				.size = e->size, .diff = 0,
			};
	}
}

int sync_hits_push(struct sync *sy, struct sync_hits *b, double now, void (*done)(void *arg),
		   void *arg)
{
	b->nc = 0;
	b->outstanding = 0;
	b->why[0] = '\0';
	b->now = now;
	b->done = done;
	b->arg = arg;
	for (size_t i = 0; i < b->n; i++)
		b->h[i].ci = -1;
	if (!sy) {
		snprintf(b->why, sizeof(b->why), "no sync");
		return 0;
	}
	b->na = 0;
	for (size_t i = 0; i < b->n; i++) {
		unsigned ns = (unsigned)b->h[i].ns;
		size_t first = b->nc, afirst = b->na;

		if (b->h[i].ci >= 0)
			continue;
		sync_hits_build(sy, b, i, now);
		if (b->nc > first) {
			if (sync_gather_push(sy, ns, &b->c[first], b->nc - first, sync_hits_on_pushed,
					     b) == 0)
				b->outstanding++;
			else if (!b->why[0])
				snprintf(b->why, sizeof(b->why), "not connected");
		}
		if (b->na > afirst) {
			if (sync_gather_admit(sy, ns, &b->a[afirst], b->na - afirst,
					      sync_hits_on_pushed, b) == 0)
				b->outstanding++;
			else if (!b->why[0])
				snprintf(b->why, sizeof(b->why), "not connected");
		}
	}
	return b->outstanding > 0;
}

/* A counted hit the store did not confirm goes into its slot's diff; if
 * the slot was evicted meanwhile (its diff was 0 while the push was in
 * flight), into a new one. */
static void sync_keep_entry(struct rl *rl, int ns, const struct shm_entry *e, double diff)
{
	if (!(diff > 0))
		return;
	/* idx UINT32_MAX: the slot was gone when the push was built. */
	if (e->idx != UINT32_MAX && shm_restore_diff(rl_shm(rl), e, diff) == 0)
		return;
	if (rl_keep(rl, ns, e->key, e->keylen, e->size, e->start, diff, rl_now()) < 0)
		SYNC_HIT_LOG(LOG_ERR, "namespace \"%s\": a hit the store did not confirm could not "
			     "be kept (%s)", rl_namespace_def(rl, ns)->name,
			     rl_status_str(rl_errno(rl)));
}

void sync_hit_keep(struct rl *rl, const struct sync_hit *h)
{
	struct shm_entry e;

	if (h->diff > 0 && h->idx != UINT32_MAX && shm_sync_read(rl_shm(rl), h->idx, &e) == 0)
		sync_keep_entry(rl, h->ns, &e, h->diff);
}

/* The hits of slot e's window as this node knows them once an admission's
 * answer is in its table: the store's count, and the node's own hits the
 * store has not counted yet (its diff, the grant hits it has not reported
 * spent), what answers from a grant say too; `store` (the store's count)
 * when the slot is gone. Never what is left of a grant: the store holds
 * it apart, and nobody's grant is hits. */
static double sync_view(const struct shm_table *t, const struct shm_entry *e, double store)
{
	struct shm_entry now;

	if (e->idx == UINT32_MAX || shm_sync_read(t, e->idx, &now) < 0 || now.meta != e->meta)
		return store;
	return now.count - shm_grant_left(t, e->idx);
}

/* ---- the store's answers applied ---- */

_Static_assert((int)ALGO_STEP_WINDOW == (int)STRATEGY_STEP_WINDOW &&
	       (int)ALGO_STEP_TAT == (int)STRATEGY_STEP_TAT &&
	       (int)ALGO_STEP_LEASE == (int)STRATEGY_STEP_LEASE, "an algorithm's step is the store's");
_Static_assert(SYNC_LEASE_TEXT == ALGO_LEASE_LEN + 1 && ALGO_LEASE_LEN <= STRATEGY_LEASE_MAX,
	       "a lease id fits its text and the store's");

/* An admission of an algorithm whose store holds no window counts (GCRA's
 * TAT): its answer written into the table by the algorithm
 * (rl_store_answer), the decision and the hit's view into h. One whose
 * algorithm keeps no answer (concurrency: the leases in flight, and in
 * prev_total the seconds until the first expires) reads the store's. */
static void sync_answer_apply(struct rl *rl, struct sync_hit *h, const struct strategy_admit *a)
{
	double view = a->current;

	h->prev_ok = a->step == STRATEGY_STEP_LEASE;
	h->prev_total = a->previous;
	if (a->step != STRATEGY_STEP_LEASE &&
	    rl_store_answer(rl, h->ns, a->key, a->key_len, a->size, rl_now(), a->current,
			    &view) < 0)
		SYNC_HIT_LOG(LOG_WARN, "namespace \"%s\": the store's answer could not be kept "
			     "(%s): this node admits from its own copy until the next one",
			     rl_namespace_def(rl, h->ns)->name, rl_status_str(rl_errno(rl)));
	h->ok = true;
	h->admitted = a->admitted;
	h->total = view;
}

void sync_hits_apply(struct rl *rl, struct sync_hits *b)
{
	for (size_t i = 0; i < b->n; i++) {
		struct sync_hit *h = &b->h[i];
		h->ok = h->prev_ok = h->admitted = false;
		h->grant = 0;
		if (h->admit) {
			/* Nothing was counted here: a failed admission leaves
			 * nothing to keep (the caller decides locally). */
			const struct strategy_admit *a = h->ci >= 0 ? &b->a[h->ci] : NULL;
			if (a && h->e.idx != UINT32_MAX)
				shm_grant_flight(rl_shm(rl), h->e.idx, -1);
			if (a && a->want > 0)
				shm_grant_end(rl_shm(rl), h->e.idx);
			if (!a || !a->ok)
				continue;
			if (a->step != STRATEGY_STEP_WINDOW) {
				sync_answer_apply(rl, h, a);
				continue;
			}
			if (h->e.idx != UINT32_MAX)
				shm_sync_total(rl_shm(rl), &h->e, a->current);
			else
				rl_seed(rl, h->ns, a->key, a->key_len, a->size, a->start, a->current,
					b->now);
			if (a->weight > 0)
				rl_seed(rl, h->ns, a->key, a->key_len, a->size,
					a->start - (int64_t)a->size, a->previous, b->now);
			if (a->grant > 0 &&
			    rl_grant(rl, h->ns, a->key, a->key_len, a->size, a->start, a->grant,
				     b->now) < 0)
				SYNC_HIT_LOG(LOG_WARN, "namespace \"%s\": a grant of the store could "
					     "not be kept (%s): %g of the limit stay counted until "
					     "the window ends", rl_namespace_def(rl, h->ns)->name,
					     rl_status_str(rl_errno(rl)), a->grant);
			h->ok = h->prev_ok = true;
			h->admitted = a->admitted;
			h->grant = a->grant;
			h->total = sync_view(rl_shm(rl), &h->e, a->current);
			h->prev_total = a->previous;
			continue;
		}
		if (h->ci < 0) {
			/* never pushed */
			sync_hit_keep(rl, h);
			continue;
		}
		struct strategy_counter *cur = &b->c[h->ci];
		if (!cur->ok) {
			sync_keep_entry(rl, h->ns, &h->e, h->diff);
			continue;
		}
		if (h->e.idx != UINT32_MAX)
			(cur->reset ? shm_follow_total : shm_sync_total)(rl_shm(rl), &h->e,
									 cur->total);
		else
			rl_seed(rl, h->ns, cur->key, cur->key_len, cur->size, cur->start, cur->total,
				b->now);
		h->ok = true;
		h->total = cur->total;
		if (h->with_prev) {
			struct strategy_counter *prev = cur + 1;
			if (prev->ok) {
				h->prev_ok = true;
				h->prev_total = prev->total;
				rl_seed(rl, h->ns, prev->key, prev->key_len, prev->size, prev->start,
					prev->total, b->now);
			}
		}
	}
}

