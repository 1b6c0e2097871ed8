/*
 * shm_evict.c - room in the shared counter table once it holds max_keys
 * entries (a full table never turns limiting off): the namespaces' shares,
 * the choice among the slots an insert's probe noted, and an entry
 * evicted. The policy is drawn in shm.h ("Shares and eviction"); what the
 * probe notes of each slot is shm_int.h's (inline: it runs per slot), and
 * below max_keys an insert takes the first free or stale slot without
 * calling in here (shm_insert.c).
 */
#include "agent/shm.h"

#include "agent/shm_int.h"

uint32_t shm_borrowers(const struct shm_table *t)
{
	uint32_t mask = 0;

	for (unsigned ns = 0; ns < SHM_MAX_NS; ns++) {
		uint64_t share = t->hdr->share[ns];

		if (share && atomic_load_explicit(&t->hdr->live[ns], memory_order_relaxed) >
				     (int64_t)share)
			mask |= 1u << ns;
	}
	return mask;
}

const struct shm_pick *shm_choose_sampled(const struct shm_table *t, const struct shm_key *k,
					  const struct shm_room *r,
					  const struct shm_pick **victim)
{
	const struct shm_hdr *hd = t->hdr;
	int64_t soft_cap = (int64_t)(hd->max_keys + (t->nslots - hd->max_keys) / 2);
	const struct shm_pick *fre = &r->fre, *v = NULL;

	*victim = NULL;
	if (r->stale.idx != SHM_NONE)
		return &r->stale;
	if (r->under && r->lend.idx != SHM_NONE)
		v = &r->lend;
	else if (r->under && fre->idx != SHM_NONE)
		return fre;
	else if (hd->evict[k->ns] && r->own.idx != SHM_NONE)
		v = &r->own;
	else if (hd->evict[k->ns] && fre->idx != SHM_NONE && r->total < soft_cap)
		return fre;
	else
		return NULL;
	if (fre->idx != SHM_NONE && fre->d < v->d) {
		*victim = v;
		return fre;
	}
	return v;
}

bool shm_evict(struct shm_table *t, const struct shm_pick *v, double now)
{
	struct shm_hdr *hd = t->hdr;
	struct shm_slot *s = &t->slots[v->idx];
	uint64_t m = v->m, busy = shm_busy_meta(t, now);
	unsigned vns = shm_meta_ns(m);

	if (!atomic_compare_exchange_strong(&s->meta, &m, busy))
		return false;
	/* Under our claim, as an insert re-checks the slot it claims
	 * (shm_insert.c, shm_claim). */
	if (atomics_bitsd(atomic_load(&s->diff)) != 0.0 || atomic_load(&t->prot[v->idx]) ||
	    shm_grant_held(t, v->idx)) {
		atomic_compare_exchange_strong(&s->meta, &busy, v->m);
		return false;
	}
	atomic_fetch_sub_explicit(&hd->live[vns], 1, memory_order_relaxed);
	atomic_fetch_sub_explicit(&hd->live_total, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&hd->evicted[vns], 1, memory_order_relaxed);
	atomic_compare_exchange_strong(&s->meta, &busy, SHM_META_FREE);
	return true;
}
