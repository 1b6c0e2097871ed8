/*
 * balance.c - the fewest-connections pick of the next acceptor, shared
 * by the workers (see balance.h).
 */
#include "agent/balance.h"
#include "agent/atomics.h"
#include "agent/segment.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* One worker's line: written by that worker only (and by the master once
 * the worker is dead), read by every worker; but `missed`, which the
 * worker that took its turn writes. */
struct balance_slot {
	_Atomic uint32_t held[BALANCE_MAX_LISTENERS];     /* open connections */
	_Atomic uint32_t open[BALANCE_MAX_LISTENERS];     /* 1: accepting */
	_Atomic uint32_t waiting[BALANCE_MAX_LISTENERS];  /* 1: asleep, wants a wake-up */
	_Atomic uint64_t accepted[BALANCE_MAX_LISTENERS]; /* ever, never reset */
	_Atomic uint64_t beat;                            /* moves when it shows life after
	                                                     a miss; never reset */
	_Atomic uint64_t missed[BALANCE_MAX_LISTENERS];   /* beat + 1 when it missed its
	                                                     turn (passed over while beat
	                                                     stays); 0: never */
	int efd;                                          /* set before fork */
} __attribute__((aligned(64)));

struct balance {
	int n;
	struct balance_slot slot[];
};

static size_t balance_bytes(int n)
{
	return sizeof(struct balance) + (size_t)n * sizeof(struct balance_slot);
}

struct balance *balance_new(int nworkers, char *err, size_t errlen)
{
	struct balance *b = segment_new(balance_bytes(nworkers));

	if (!b) {
		snprintf(err, errlen, "balance: mmap: %s", strerror(errno));
		return NULL;
	}
	b->n = nworkers;
	for (int i = 0; i < nworkers; i++)
		b->slot[i].efd = -1;
	for (int i = 0; i < nworkers; i++) {
		b->slot[i].efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (b->slot[i].efd < 0) {
			snprintf(err, errlen, "balance: eventfd: %s", strerror(errno));
			balance_free(b);
			return NULL;
		}
	}
	return b;
}

void balance_free(struct balance *b)
{
	if (!b)
		return;
	for (int i = 0; i < b->n; i++)
		if (b->slot[i].efd >= 0)
			close(b->slot[i].efd);
	segment_free(b, balance_bytes(b->n));
}

/* Did the worker of s miss its turn on lis and show no life since? */
static bool balance_passed_over(const struct balance_slot *s, int lis)
{
	return atomic_load(&s->missed[lis]) == atomic_load(&s->beat) + 1;
}

int balance_pick(const struct balance *b, int lis)
{
	uint32_t least = 0;
	bool least_over = false;
	int pick = -1;

	/* Fewest held among those not passed over, then the lowest id; the
	 * passed over only when every worker accepting is. */
	for (int i = 0; i < b->n; i++) {
		const struct balance_slot *s = &b->slot[i];
		uint32_t held;
		bool over;

		if (!atomic_load(&s->open[lis]))
			continue;
		held = atomic_load(&s->held[lis]);
		over = balance_passed_over(s, lis);
		if (pick < 0 || (!over && least_over) || (over == least_over && held < least)) {
			pick = i;
			least = held;
			least_over = over;
		}
	}
	return pick;
}

/* After a change to id's line: the pick, woken if it sleeps on lis (an
 * eventfd counter only grows: a wake-up is never lost, several merge). */
static int balance_changed(const struct balance *b, int id, int lis)
{
	int pick = balance_pick(b, lis);

	if (pick >= 0 && pick != id && atomic_load(&b->slot[pick].waiting[lis])) {
		uint64_t one = 1;
		(void)!write(b->slot[pick].efd, &one, sizeof(one));
	}
	return pick;
}

/* A worker's line as if it held nothing, accepted nowhere and missed no
 * turn (accepted stays: balance_stalled() compares sums of it; beat
 * stays: a mark made for the predecessor meanwhile, with its beat, holds
 * until the successor's first balance_alive()). */
static void balance_clear(struct balance_slot *s)
{
	for (int l = 0; l < BALANCE_MAX_LISTENERS; l++) {
		atomic_store(&s->open[l], 0);
		atomic_store(&s->waiting[l], 0);
		atomic_store(&s->held[l], 0);
		atomic_store(&s->missed[l], 0);
	}
}

int balance_attach(struct balance *b, int id)
{
	balance_clear(&b->slot[id]);
	/* A wake-up meant for a dead predecessor. */
	balance_woken(b, id);
	return b->slot[id].efd;
}

void balance_woken(struct balance *b, int id)
{
	uint64_t v;

	(void)!read(b->slot[id].efd, &v, sizeof(v));
}

int balance_open(struct balance *b, int id, int lis, bool open)
{
	atomic_store(&b->slot[id].open[lis], open ? 1 : 0);
	if (!open)
		atomic_store(&b->slot[id].waiting[lis], 0);
	return balance_changed(b, id, lis);
}

int balance_add(struct balance *b, int id, int lis, int delta)
{
	struct balance_slot *s = &b->slot[id];

	if (delta > 0) {
		atomic_fetch_add(&s->accepted[lis], 1);
		atomic_fetch_add(&s->held[lis], 1);
	} else {
		atomic_fetch_sub(&s->held[lis], 1);
	}
	return balance_changed(b, id, lis);
}

/* Connections of lis accepted so far by every worker. */
static uint64_t balance_accepted(const struct balance *b, int lis)
{
	uint64_t sum = 0;

	for (int i = 0; i < b->n; i++)
		sum += atomic_load(&b->slot[i].accepted[lis]);
	return sum;
}

bool balance_wait(struct balance *b, int id, int lis, uint64_t *mark)
{
	*mark = balance_accepted(b, lis);
	atomic_store(&b->slot[id].waiting[lis], 1);
	if (balance_pick(b, lis) == id) {
		atomic_store(&b->slot[id].waiting[lis], 0);
		return false;
	}
	return true;
}

void balance_resume(struct balance *b, int id, int lis)
{
	atomic_store(&b->slot[id].waiting[lis], 0);
}

bool balance_stalled(const struct balance *b, int lis, uint64_t mark)
{
	return balance_accepted(b, lis) == mark;
}

int balance_missed(struct balance *b, int id, int lis, int pick)
{
	struct balance_slot *s;

	if (pick < 0 || pick == id)
		return pick;
	s = &b->slot[pick];
	/* With the beat read now: if the pick shows life in between, the mark
	 * names a beat already gone and passes nobody over. */
	atomic_store(&s->missed[lis], atomic_load(&s->beat) + 1);
	return balance_changed(b, id, lis);
}

bool balance_alive(struct balance *b, int id)
{
	struct balance_slot *s = &b->slot[id];
	uint64_t beat = atomic_load(&s->beat);

	for (int l = 0; l < BALANCE_MAX_LISTENERS; l++) {
		if (atomic_load(&s->missed[l]) == beat + 1) {
			atomic_store(&s->beat, beat + 1);
			return true;
		}
	}
	return false;
}

void balance_gone(struct balance *b, int id)
{
	balance_clear(&b->slot[id]);
	for (int l = 0; l < BALANCE_MAX_LISTENERS; l++)
		balance_changed(b, id, l);
}

uint32_t balance_held(const struct balance *b, int id, int lis)
{
	return atomic_load(&b->slot[id].held[lis]);
}
