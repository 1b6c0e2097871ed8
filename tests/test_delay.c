/*
 * test_delay.c - the bounds on held decisions (agent/delay.c, delay_max_ms):
 * per key, per connection (a decide_owner), per namespace (an even part of
 * the worker's), each counted in delay_refused_total when it denies a hit
 * that could have waited; a connection that goes away gives its held
 * decisions back at once. Decisions at fixed times, no front, the
 * loop never run: what is held stays held. Memory: a held hit costs one
 * pending decision.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <ev.h>
#include <malloc.h>
/* Bytes of the heap in use: ASan's allocator answers for itself (glibc's
 * mallinfo2 sees nothing under it). */
#if defined(__SANITIZE_ADDRESS__)
size_t __sanitizer_get_current_allocated_bytes(void);
#define HEAP_BYTES() __sanitizer_get_current_allocated_bytes()
#else
#define HEAP_BYTES() mallinfo2().uordblks
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/config.h"
#include "agent/decide.h"
#include "agent/metrics.h"
#include "agent/ratelimit.h"
#include "tests/lib/rltest.h"

static struct config cfg;
static struct rl *rl;
static struct decide dec;

/* Two namespaces that delay (each its half of the worker's 1,024 held
 * decisions), one that does not. 1,000 per minute: one second before a
 * window's end, the k-th held hit of a key waits 1 + 0.06 k s, so 64 of
 * them fit within 60 s. */
static const char cfg_json[] =
	"{\"max_keys\": 4096, \"namespaces\": ["
	"{\"name\": \"slow\", \"window_sizes\": [60], \"limit\": 1000, \"delay_max_ms\": 60000},"
	"{\"name\": \"slow2\", \"window_sizes\": [60], \"limit\": 1000, \"delay_max_ms\": 60000},"
	"{\"name\": \"plain\", \"window_sizes\": [60], \"limit\": 1000}]}";

/* 6000000 is a multiple of 60: a window start. */
#define T0 6000000.0
#define NOW (T0 + 59)

struct peer {
	struct decide_owner o;
	int delivered;
};

static void delivered(struct decide_owner *o, struct decide_pending *p)
{
	((struct peer *)o)->delivered++;
	decide_pending_release(&dec, p);
}

static void setup(void)
{
	rl = rltest_new("test_delay", cfg_json, &cfg);
	decide_init(&dec, rl);
	dec.loop = ev_loop_new(EVFLAG_AUTO);
	cr_assert_not_null(dec.loop);
	memset(metrics_me, 0, sizeof(*metrics_me));
}

static void teardown(void)
{
	decide_free(&dec);
	ev_loop_destroy(dec.loop);
	rl_free(rl);
	config_free(&cfg);
}

TestSuite(delay, .init = setup, .fini = teardown);

static struct peer *peer_new(void)
{
	struct peer *p = calloc(1, sizeof(*p));

	cr_assert_not_null(p);
	p->o.deliver = delivered;
	return p;
}

/* One hit of key in ns for peer at NOW: true when it is held. */
static bool hit(struct peer *p, const char *ns, const char *key)
{
	struct rl_request rq = {
		.ns = ns, .ns_len = strlen(ns), .key = key, .key_len = strlen(key), .window = 60,
		.cost = 1, .window_type = DECIDE_WT_DEFAULT,
	};
	struct rl_decision parts[DECIDE_MAX_BATCH];
	size_t np;

	if (decide_run(&dec, &rq, 1, NOW, parts, DECIDE_MAX_BATCH, &np, &p->o))
		return true;
	cr_assert_eq(np, 1);
	cr_assert_null(parts[0].error, "%s", parts[0].error);
	return false;
}

/* The key's limit used up (1,000 admitted at once). */
static void fill(struct peer *p, const char *ns, const char *key)
{
	for (int i = 0; i < 1000; i++)
		cr_assert_not(hit(p, ns, key), "under the limit: answered at once");
}

/* Up to n more hits of key: how many were held. */
static int hold(struct peer *p, const char *ns, const char *key, int n)
{
	int held = 0;

	for (int i = 0; i < n; i++)
		held += hit(p, ns, key);
	return held;
}

static uint64_t refused(const char *ns, enum metrics_delay_bound b)
{
	int i = rl_namespace_index(rl, ns, strlen(ns));

	cr_assert_geq(i, 0);
	return metrics_me->delay_refused[rl_shm_ns(rl, i)][b];
}

Test(delay, a_key_holds_at_most_its_bound)
{
	struct peer *p = peer_new();

	fill(p, "slow", "k");
	cr_assert_eq(hold(p, "slow", "k", 70), DECIDE_DELAY_PER_KEY);
	cr_assert_eq(refused("slow", METRICS_DELAY_KEY), 70 - DECIDE_DELAY_PER_KEY);
	cr_assert_eq(p->o.held, DECIDE_DELAY_PER_KEY);
	cr_assert_eq(p->o.waiting, 0);
	decide_pending_detach_all(&p->o);
	free(p);
}

/* One connection (the nginx module's, carrying every client of a
 * worker) holds at most its share; another one still gets delay. */
Test(delay, a_connection_holds_at_most_its_share)
{
	struct peer *a = peer_new(), *b = peer_new();
	char key[16];
	int held = 0;

	for (int k = 0; k < 5; k++) {
		snprintf(key, sizeof(key), "a%d", k);
		fill(a, "slow", key);
		held += hold(a, "slow", key, DECIDE_DELAY_PER_KEY);
	}
	cr_assert_eq(held, DECIDE_DELAY_PER_OWNER);
	cr_assert_eq(a->o.held, DECIDE_DELAY_PER_OWNER);
	cr_assert_eq(refused("slow", METRICS_DELAY_OWNER),
		     5 * DECIDE_DELAY_PER_KEY - DECIDE_DELAY_PER_OWNER);
	fill(b, "slow", "b");
	cr_assert_eq(hold(b, "slow", "b", 10), 10, "another connection's hits still wait");
	decide_pending_detach_all(&a->o);
	decide_pending_detach_all(&b->o);
	free(a);
	free(b);
}

/* A namespace holds at most its part of the worker's held decisions,
 * however many connections fill it: the other namespace keeps delaying. */
Test(delay, a_namespace_cannot_take_delay_from_another)
{
	struct peer *p[4];
	char key[16];
	int held = 0;

	for (int i = 0; i < 4; i++)
		p[i] = peer_new();
	for (int k = 0; k < 12; k++) {
		snprintf(key, sizeof(key), "n%d", k);
		fill(p[k % 4], "slow", key);
		held += hold(p[k % 4], "slow", key, DECIDE_DELAY_PER_KEY);
	}
	cr_assert_eq(held, DECIDE_DELAY_MAX / 2, "half of the worker's: %d", held);
	cr_assert_eq(dec.nheld, DECIDE_DELAY_MAX / 2);
	cr_assert_eq(refused("slow", METRICS_DELAY_NAMESPACE),
		     12 * DECIDE_DELAY_PER_KEY - DECIDE_DELAY_MAX / 2);
	fill(p[0], "slow2", "other");
	cr_assert_eq(hold(p[0], "slow2", "other", 20), 20, "slow2 still delays");
	cr_assert_eq(refused("slow2", METRICS_DELAY_NAMESPACE), 0);
	for (int i = 0; i < 4; i++) {
		decide_pending_detach_all(&p[i]->o);
		free(p[i]);
	}
}

/* A connection that goes away gives its held decisions back at once
 * (not when each one's turn comes): the bounds are free for others, and
 * the pool has them back. */
Test(delay, a_closed_connection_holds_nothing)
{
	struct peer *a = peer_new(), *b = peer_new();

	fill(a, "slow", "k");
	cr_assert_eq(hold(a, "slow", "k", 40), 40);
	cr_assert_eq(hold(b, "slow", "k", 10), 10, "behind a's, on the same key");
	cr_assert_eq(dec.nheld, 50);
	int sid = (int)rl_shm_ns(rl, rl_namespace_index(rl, "slow", 4));
	cr_assert_eq(metrics_me->delay_held[sid], 50, "the gauge");
	decide_pending_detach_all(&a->o);
	cr_assert_eq(a->o.held, 0);
	cr_assert_eq(dec.nheld, 10, "b's stay in line");
	cr_assert_eq(metrics_me->delay_held[sid], 10);
	cr_assert_eq(dec.npending, 10);
	decide_pending_detach_all(&b->o);
	cr_assert_eq(dec.nheld, 0);
	cr_assert_eq(dec.npending, 0);
	cr_assert_eq(a->delivered + b->delivered, 0, "nothing delivered to a peer gone");
	cr_assert_eq(hold(a, "slow", "k", 64), 64, "the key's bound is free again");
	decide_pending_detach_all(&a->o);
	free(a);
	free(b);
}

/* A namespace without delay_max_ms never holds, whatever the bounds. */
Test(delay, no_delay_no_hold)
{
	struct peer *p = peer_new();

	fill(p, "plain", "k");
	cr_assert_eq(hold(p, "plain", "k", 10), 0);
	cr_assert_eq(dec.nheld, 0);
	free(p);
}

/* A long key's decision is digested once from its arrival to its answer:
 * not again to find its key's queue, to hold it, nor when the queue's
 * timer decides it again (on the loop's clock, a window with room). */
Test(delay, a_held_long_key_is_digested_once)
{
	struct peer *p = peer_new();
	char key[150];

	memset(key, 'k', sizeof(key) - 1);
	key[sizeof(key) - 1] = '\0';
	fill(p, "slow", key);
	uint64_t before = rl_digests();
	cr_assert(hit(p, "slow", key), "over the limit, room within delay_max_ms: held");
	cr_assert_eq(rl_digests() - before, 1, "held: digested %llu times",
		     (unsigned long long)(rl_digests() - before));
	ev_run(dec.loop, 0);
	cr_assert_eq(p->delivered, 1);
	cr_assert_eq(rl_digests() - before, 1, "answered: digested %llu times",
		     (unsigned long long)(rl_digests() - before));
	free(p);
}

/* Held hits cost what the bound says: one pending decision each, from
 * the worker's pool, nothing else per hit (a namespace's 512, filled from
 * four connections). */
Test(delay, held_hits_cost_what_the_bound_says)
{
	struct peer *p[4];
	char key[16];
	int held = 0;

	for (int i = 0; i < 4; i++)
		p[i] = peer_new();
	for (int k = 0; k < 8; k++) {
		snprintf(key, sizeof(key), "m%d", k);
		fill(p[k % 4], "slow", key);
	}
	size_t before = HEAP_BYTES();
	for (int k = 0; k < 8; k++) {
		snprintf(key, sizeof(key), "m%d", k);
		held += hold(p[k % 4], "slow", key, DECIDE_DELAY_PER_KEY);
	}
	size_t after = HEAP_BYTES();
	size_t grown = after > before ? after - before : 0;
	cr_log_info("%d held; the heap grew %zu bytes, %zu per held hit (bound: one pending of "
		    "%zu bytes each)", held, grown, grown / (size_t)held, decide_pending_size());
	cr_assert_eq(held, DECIDE_DELAY_MAX / 2);
	cr_assert_leq(grown, (size_t)held * (decide_pending_size() + 256) + 64 * 1024,
		      "the heap grew %zu bytes for %d held hits", grown, held);
	for (int i = 0; i < 4; i++) {
		decide_pending_detach_all(&p[i]->o);
		free(p[i]);
	}
}
