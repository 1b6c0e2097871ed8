/*
 * algo.c - the table of algorithms (agent/algo.h), one entry per enum
 * ns_algorithm, each the ops table of its file agent/algo_<name>.c, and
 * what the algorithms share.
 */
#include "agent/algo.h"

#include "agent/shm.h"

const struct algo_ops *const algo_table[NS_ALGO_COUNT] = {
	[NS_ALGO_WINDOW] = &algo_window,
	[NS_ALGO_GCRA] = &algo_gcra,
	[NS_ALGO_CONCURRENCY] = &algo_concurrency,
};

void algo_protect(const struct algo_hit *h, const struct shm_ref *cur, const struct shm_ref *prev)
{
	int64_t configured = ns_limit_of(h->def, h->size);

	if (configured != NS_LIMIT_NONE && h->limit < (double)configured)
		return;
	shm_protect(h->t, cur);
	shm_protect(h->t, prev);
}

int algo_insert(const struct algo_hit *h, int64_t start, struct shm_ref *cur,
		struct rl_result *out)
{
	int how = shm_insert(h->t, h->k, start, h->now, cur);

	if (how < 0)
		return -1;
	out->inserted = true;
	out->evicted |= how == SHM_INS_EVICTED;
	return 0;
}
