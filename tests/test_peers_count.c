/*
 * test_peers_count.c - the nodes' states counted in the shared table
 * (agent/peers_count.c, docs/PEERS.md, "Counting"): states fed as HAProxy
 * nodes send them, at chosen times, against a table of this process
 * (and a state file, for a restart). Updates are absolute states: what
 * they add up to is the nodes' events, whatever is sent twice, resent
 * after a reconnect or a restart, or dumped; a node period counted once;
 * periods and their rollovers; a node that goes away decays out; a
 * node's period start known to within the transit delay; counters; keys
 * as text and back; the walk the pushes read.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/peers_count.h"
#include "agent/peers_wire.h"
#include "agent/ratelimit.h"

#define W      10               /* the namespace's window: the rate's period, seconds */
#define P      (W * 1000)       /* ms */
#define T0     1700000000.0     /* a window's start (a multiple of W) */

static struct rl *rl;

/* A table of 4096 keys with one namespace "api" of window W (local). */
static struct rl *table(const char *state_file)
{
	char err[256];
	struct ns_def o;
	struct rl *r = rl_open("test", 4096, state_file, err, sizeof(err));

	cr_assert_not_null(r, "%s", err);
	ns_def_init(&o);
	snprintf(o.name, sizeof(o.name), "api");
	o.window_sizes[0] = W;
	o.n_window_sizes = 1;
	cr_assert_eq(rl_new_namespace(r, &o, err, sizeof(err)), 0, "%s", err);
	return r;
}

static void setup(void)
{
	rl = table(NULL);
}

static void teardown(void)
{
	rl_free(rl);
}

static const struct peers_what rate = { .ns = 0, .window = W, .dt = PEERS_WIRE_DT_HTTP_REQ_RATE,
					.rate = true };
static const struct peers_what counter = { .ns = 0, .window = W, .dt = PEERS_WIRE_DT_HTTP_REQ_CNT };

/* Node `node`'s state of key at now: its period began `age` ms ago with
 * curr events, prev in the period before. Returns what was counted. */
static double feed(const char *node, const char *key, uint64_t age, uint64_t curr, uint64_t prev,
		   double now)
{
	struct peers_state st = { .age = age, .curr = curr, .prev = prev };
	struct peers_count_res r;

	cr_assert_eq(peers_count(rl, &rate, node, strlen(node), key, strlen(key), &st, now, &r), 0);
	return r.counted;
}

static double feed_value(const char *node, const char *key, uint64_t v, double now)
{
	struct peers_state st = { .value = v };
	struct peers_count_res r;

	cr_assert_eq(peers_count(rl, &counter, node, strlen(node), key, strlen(key), &st, now, &r),
		     0);
	return r.counted;
}

/* The key's sliding rate at now: what a node reads after a push. */
static double rate_of(const char *key, double now)
{
	struct peers_sum s;
	double e, weight;

	cr_assert_eq(peers_count_sum(rl, &rate, key, strlen(key), now, &s), 0);
	e = s.elapsed / 1000.0;
	weight = (W - e) / W;
	return s.cur + s.prev * weight;
}

static double current_of(const char *key, double now)
{
	struct peers_sum s;

	cr_assert_eq(peers_count_sum(rl, &rate, key, strlen(key), now, &s), 0);
	return s.cur;
}

TestSuite(peers_count, .init = setup, .fini = teardown);

/* A node's updates of one key within one of its periods: each adds its
 * new events, a state sent again adds nothing. */
Test(peers_count, updates_in_a_period_add_their_new_events)
{
	double t = T0 + 1;

	cr_assert_eq(feed("A", "k", 0, 1, 0, t), 1);
	cr_assert_eq(feed("A", "k", 200, 3, 0, t + 0.2), 2);
	cr_assert_eq(feed("A", "k", 200, 3, 0, t + 0.2), 0, "sent twice");
	cr_assert_eq(feed("A", "k", 2500, 3, 0, t + 2.5), 0, "resent later, same period");
	cr_assert_eq(feed("A", "k", 3000, 7, 0, t + 3), 4);
	cr_assert_eq(current_of("k", t + 3), 7);
}

/* Across the node's period rollover: the new period's events, and what
 * the old period got after its last update (prev beyond the record). */
Test(peers_count, deltas_across_periods)
{
	double t = T0 + 1;

	cr_assert_eq(feed("A", "k", 0, 5, 0, t), 5);
	/* The period ended with 8 events; the next has 2 so far. */
	cr_assert_eq(feed("A", "k", 100, 2, 8, t + 10.1), 3 + 2);
	cr_assert_eq(feed("A", "k", 100, 2, 8, t + 10.1), 0, "sent twice");
	/* One more period later, with a gap: prev is the period seen. */
	cr_assert_eq(feed("A", "k", 500, 1, 4, t + 20.5), 2 + 1);
	/* Two idle periods: the node starts afresh (prev 0, a new phase). */
	cr_assert_eq(feed("A", "k", 0, 1, 0, t + 57.3), 1);
}

/* Three nodes' parts add up; each node's resends add nothing. */
Test(peers_count, nodes_add_up)
{
	double t = T0 + 2;

	for (int i = 0; i < 30; i++) {
		const char *node = i % 3 == 0 ? "A" : i % 3 == 1 ? "B" : "C";
		uint64_t mine = (uint64_t)(i / 3 + 1);
		cr_assert_eq(feed(node, "10.0.0.1", (uint64_t)(i * 10 + i % 3), mine, 0,
				  t + i * 0.01), 1);
		cr_assert_eq(feed(node, "10.0.0.1", (uint64_t)(i * 10 + i % 3), mine, 0,
				  t + i * 0.01), 0);
	}
	cr_assert_eq(current_of("10.0.0.1", t + 1), 30);
}

/* A node that reconnects (to any worker: nothing is kept by a session)
 * resends its unacknowledged states, and a dump every state: nothing is
 * counted twice, what is new is. A state's period start is known to the
 * transit delay: a later estimate off by up to half a second is the same
 * period. */
Test(peers_count, resends_and_dumps_count_once)
{
	double t = T0 + 3;

	cr_assert_eq(feed("A", "k", 0, 4, 6, t), 10);
	/* Resent after a reconnect, 1.4 s later, with 300 ms more transit. */
	cr_assert_eq(feed("A", "k", 1100, 4, 6, t + 1.4), 0);
	/* Resent 300 ms early (less transit than the first time). */
	cr_assert_eq(feed("A", "k", 1700, 4, 6, t + 1.4), 0);
	/* A dump once the period has ended: its prev no longer weighs, curr
	 * was counted. */
	cr_assert_eq(feed("A", "k", 12000, 4, 6, t + 12), 0);
	/* Then its next period, prev = what was counted + 3. */
	cr_assert_eq(feed("A", "k", 50, 1, 7, t + 10.05), 1 + 3);
}

/* A period's start is estimated late by whatever held its update (a
 * node's queue, a busy agent): an estimate up to two seconds off finds
 * the period's record, in either order. */
Test(peers_count, a_start_estimated_two_seconds_off)
{
	double t = T0 + 3.5;

	cr_assert_eq(feed("A", "k", 0, 1, 0, t), 1, "its first update held 1.8 s");
	cr_assert_eq(feed("A", "k", 2000, 2, 0, t + 0.2), 1);
	cr_assert_eq(feed("A", "k", 2100, 3, 0, t + 2.1 - 1.8), 1, "and one that was not");
	cr_assert_eq(feed("B", "k", 100, 1, 0, t), 1, "B's first update on time");
	cr_assert_eq(feed("B", "k", 100, 2, 0, t + 1.9), 1, "its next held 1.9 s");
	cr_assert_eq(current_of("k", t + 2), 5);
}

/* With a 1 s window, successive periods are told apart although each
 * period's start is known to the transit delay only. */
Test(peers_count, short_periods_told_apart)
{
	char err[256];
	struct ns_def o;
	struct peers_what w = rate;
	double t = T0 + 0.95;       /* periods start across a second's end */
	double total = 0;

	ns_def_init(&o);
	snprintf(o.name, sizeof(o.name), "short");
	o.window_sizes[0] = 1;
	o.n_window_sizes = 1;
	cr_assert_eq(rl_new_namespace(rl, &o, err, sizeof(err)), 0, "%s", err);
	w.ns = 1;
	w.window = 1;
	/* 20 periods of 1 s from t, 3 events each, each state sent with a
	 * transit of 0..90 ms, then again with another. */
	for (int j = 0; j < 20; j++) {
		for (uint64_t e = 1; e <= 3; e++) {
			for (int again = 0; again < 2; again++) {
				double sent = t + j + 0.1 * (double)e;
				double transit = 0.001 * (double)((j * 37 + (int)e * 11 + again * 53) % 91);
				struct peers_state st = { .age = (uint64_t)llround(100.0 * (double)e),
							  .curr = e, .prev = j ? 3 : 0 };
				struct peers_count_res r;
				cr_assert_eq(peers_count(rl, &w, "A", 1, "k", 1, &st, sent + transit, &r), 0);
				total += r.counted;
			}
		}
	}
	cr_assert_eq(total, 60, "20 periods of 3 events, each counted once: %g", total);
}

/* A state that no longer weighs on the node (its period began 2 periods
 * ago) counts nothing; one a period old counts curr, not prev. */
Test(peers_count, old_states_count_what_still_weighs)
{
	double t = T0 + 4;
	struct peers_state st = { .age = 2 * P, .curr = 9, .prev = 9 };
	struct peers_count_res r;

	cr_assert_eq(peers_count(rl, &rate, "A", 1, "k", 1, &st, t, &r), 0);
	cr_assert(r.stale);
	cr_assert_eq(r.counted, 0);
	/* HAProxy's age of a counter never touched: its raw clock. */
	st.age = 4294951007u;
	cr_assert_eq(peers_count(rl, &rate, "A", 1, "k", 1, &st, t, &r), 0);
	cr_assert_eq(r.counted, 0);
	cr_assert_eq(feed("A", "k", P + 500, 5, 9, t), 5, "prev no longer weighs");
}

/* A node restarted (or an entry expired and made again) counts afresh:
 * its new events count, in a new phase or, by chance, in the old one. */
Test(peers_count, a_restarted_node_counts_afresh)
{
	double t = T0 + 1;

	cr_assert_eq(feed("A", "k", 0, 50, 0, t), 50);
	cr_assert_eq(feed("A", "k", 3000, 2, 0, t + 7.3), 2, "new phase");
	cr_assert_eq(feed("B", "k", 0, 50, 0, t), 50);
	cr_assert_eq(feed("B", "k", 100, 3, 0, t + 0.2), 3, "same phase, fewer: afresh");
	cr_assert_eq(current_of("k", t + 7.3), 105);
}

/* A node that goes away stops counting once its events would have
 * decayed out of its own reading: 2 windows. */
Test(peers_count, a_node_gone_decays_out)
{
	double t = T0 + 5;

	cr_assert_eq(feed("A", "k", 0, 40, 0, t), 40);
	cr_assert_eq(feed("B", "k", 0, 60, 0, t), 60);
	cr_assert_float_eq(rate_of("k", t), 100, 1e-9);
	cr_assert_float_eq(rate_of("k", t + W), 100 * 0.5, 1e-6, "half a window later");
	cr_assert_float_eq(rate_of("k", t + 2 * W), 0, 1e-9);
	/* A late resend of B's old state counts nothing. */
	cr_assert_eq(feed("B", "k", 2 * P + 10, 60, 0, t + 2 * W), 0);
}

/* An agent restarted on its state file finds the nodes' parts: their
 * resends (the dumps it asks for) count nothing. */
Test(peers_count, a_restart_on_the_state_file_counts_nothing_twice)
{
	char path[] = "/tmp/test_peers_count_XXXXXX";
	int fd = mkstemp(path);
	double t = T0 + 6;

	cr_assert_geq(fd, 0);
	close(fd);
	unlink(path);
	rl_free(rl);
	rl = table(path);
	cr_assert_eq(feed("A", "k", 0, 30, 0, t), 30);
	cr_assert_eq(feed("B", "k", 0, 20, 5, t), 25);
	rl_free(rl);
	rl = table(path);
	cr_assert(rl_state_reused(rl));
	cr_assert_eq(feed("A", "k", 2000, 30, 0, t + 2), 0);
	cr_assert_eq(feed("B", "k", 2000, 21, 5, t + 2), 1);
	cr_assert_eq(current_of("k", t + 2), 56);
	rl_free(rl);
	unlink(path);
	rl = table(NULL);
}

/* A dump to an agent that started afresh on a store (no state file): the
 * states its nodes had counted before, into the store, are taken as
 * counted (baseline: the records made, nothing counted), for a rate and a
 * counter, with the period before too; what comes next counts beyond
 * them, and a key a record already holds is counted as ever. */
Test(peers_count, a_baseline_counts_nothing_and_what_follows_counts)
{
	double t = T0 + 1;
	struct peers_state st = { .age = 2000, .curr = 30, .prev = 12, .baseline = true };
	struct peers_count_res r;

	cr_assert_eq(peers_count(rl, &rate, "A", 1, "k", 1, &st, t, &r), 0);
	cr_assert_eq(r.counted, 0);
	cr_assert(r.fresh);
	cr_assert_eq(r.made, UINT32_MAX, "no window made: nothing counted");
	cr_assert_eq(feed("A", "k", 2500, 30, 12, t + 0.5), 0, "its resend");
	cr_assert_eq(feed("A", "k", 3000, 33, 12, t + 1), 3);
	/* The node's next period: prev is the record's 33 + 1 more. */
	cr_assert_eq(feed("A", "k", 100, 1, 34, t + 8.1), 1 + 1);
	/* A key the node has a record of: a baseline counts as any state. */
	st = (struct peers_state){ .age = 200, .curr = 4, .prev = 34, .baseline = true };
	cr_assert_eq(peers_count(rl, &rate, "A", 1, "k", 1, &st, t + 8.2, &r), 0);
	cr_assert_eq(r.counted, 3);

	st = (struct peers_state){ .value = 9, .baseline = true };
	cr_assert_eq(peers_count(rl, &counter, "A", 1, "c", 1, &st, t, &r), 0);
	cr_assert_eq(r.counted, 0);
	cr_assert_eq(feed_value("A", "c", 9, t + 1), 0);
	cr_assert_eq(feed_value("A", "c", 11, t + 2), 2);
}

/* A namespace that counts HAProxy nodes syncs periodically or not at
 * all: sync_rate 0 (every hit written through, an answer waiting for the
 * store) is refused, saying what to set. */
Test(peers_count, haproxy_tables_refuse_sync_rate_0)
{
	char err[256] = "";
	struct ns_def o;

	ns_def_init(&o);
	snprintf(o.name, sizeof(o.name), "sums");
	o.window_sizes[0] = W;
	o.n_window_sizes = 1;
	o.sync_rate = 0;
	snprintf(o.strategy, sizeof(o.strategy), "redis");
	snprintf(o.haproxy.from, sizeof(o.haproxy.from), "req_local");
	snprintf(o.haproxy.into, sizeof(o.haproxy.into), "req_cluster");
	cr_assert_eq(rl_new_namespace(rl, &o, err, sizeof(err)), -1);
	cr_assert(strstr(err, "sync_rate") && strstr(err, "sync_rate > 0"), "%s", err);
	o.sync_rate = 0.5;
	cr_assert_eq(rl_new_namespace(rl, &o, err, sizeof(err)), 0, "%s", err);
}

/* Counters: what the value grew by since the record; all of it when the
 * node starts afresh; nothing twice across window buckets. */
Test(peers_count, counters_count_their_increase)
{
	double t = T0 + 1;

	cr_assert_eq(feed_value("A", "k", 5, t), 5);
	cr_assert_eq(feed_value("A", "k", 7, t + 1), 2);
	cr_assert_eq(feed_value("A", "k", 7, t + 2), 0, "sent twice");
	cr_assert_eq(feed_value("A", "k", 9, t + W + 1), 2, "the next bucket");
	cr_assert_eq(feed_value("A", "k", 9, t + 2 * W + 1), 0, "and the one after");
	cr_assert_eq(feed_value("A", "k", 3, t + 2 * W + 2), 3, "the entry made again");
	cr_assert_eq(feed_value("B", "k", 4, t + 2 * W + 2), 4);
}

/* The walk the pushes read: the keys' current and previous windows, not
 * the records, not other namespaces, not older windows. */
Test(peers_count, the_walk_finds_the_windows)
{
	char err[256];
	struct ns_def o;
	struct peers_scan sc;
	struct peers_slot s;
	uint32_t windows[2] = { W, 1 };
	double t = T0 + 1;
	int found = 0, prev = 0;

	ns_def_init(&o);
	snprintf(o.name, sizeof(o.name), "other");
	o.window_sizes[0] = 1;
	o.n_window_sizes = 1;
	cr_assert_eq(rl_new_namespace(rl, &o, err, sizeof(err)), 0, "%s", err);
	feed("A", "old", 0, 1, 0, t - 2 * W);
	feed("A", "k1", 0, 1, 0, t - W);
	feed("A", "k1", 0, 2, 1, t);
	feed("B", "k2", 0, 3, 0, t);
	struct rl_result r;
	cr_assert_eq(rl_hit(rl, 1, "x", 1, 1, 1, RL_WEIGHT_AUTO, t, -1, true, &r), 0);
	peers_count_scan(rl, 1, windows, t, &sc);
	while (peers_count_next(rl, &sc, &s) == 0) {
		cr_assert_eq(s.ns, 0);
		cr_assert(strcmp(s.key, "k1") == 0 || strcmp(s.key, "k2") == 0, "%s", s.key);
		found++;
		prev += s.start < (int64_t)T0;
	}
	cr_assert_eq(found, 3, "k1's two windows, k2's one");
	cr_assert_eq(prev, 1);
}

/* Keys as text (the form counted, as SPOP's are) and back into a table
 * of each key type; what cannot be is refused. */
Test(peers_count, keys_as_text_and_back)
{
	static const struct {
		unsigned kt;
		uint8_t bytes[16];
		size_t len;
		const char *text;
	} cases[] = {
		{ PEERS_WIRE_KEY_IPV4, { 192, 0, 2, 1 }, 4, "192.0.2.1" },
		{ PEERS_WIRE_KEY_IPV4, { 0, 0, 0, 0 }, 4, "0.0.0.0" },
		{ PEERS_WIRE_KEY_IPV6, { 0x20, 0x01, 0x0d, 0xb8, [15] = 1 }, 16, "2001:db8::1" },
		{ PEERS_WIRE_KEY_INTEGER, { 0, 0, 0, 42 }, 4, "42" },
		{ PEERS_WIRE_KEY_INTEGER, { 0xff, 0xff, 0xff, 0xff }, 4, "4294967295" },
		{ PEERS_WIRE_KEY_STRING, "example.org", 11, "example.org" },
		{ PEERS_WIRE_KEY_STRING, "#tag", 4, "\\#tag" },
		{ PEERS_WIRE_KEY_STRING, "\\x", 2, "\\\\x" },
		{ PEERS_WIRE_KEY_BINARY, { 0xde, 0xad, 0, 1 }, 4, "dead0001" },
	};
	char text[PEERS_COUNT_KEY_MAX];
	uint8_t back[PEERS_COUNT_KEY_MAX];
	uint32_t integer = 0;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t n = peers_count_key(cases[i].kt, cases[i].bytes, cases[i].len, text);
		cr_assert_eq(n, strlen(cases[i].text), "%zu", i);
		cr_assert_eq(memcmp(text, cases[i].text, n), 0, "%zu: %.*s", i, (int)n, text);
		size_t m = peers_count_key_bytes(cases[i].kt, (uint32_t)cases[i].len, text, n, back,
						 &integer);
		cr_assert_eq(m, cases[i].len, "%zu", i);
		cr_assert_eq(memcmp(back, cases[i].bytes, m), 0, "%zu", i);
	}
	cr_assert_eq(integer, 4294967295u);
	/* Into a table of another key type. */
	cr_assert_eq(peers_count_key_bytes(PEERS_WIRE_KEY_IPV6, 16, "192.0.2.1", 9, back, &integer), 16);
	cr_assert_eq(memcmp(back, "\0\0\0\0\0\0\0\0\0\0\xff\xff\xc0\x00\x02\x01", 16), 0);
	cr_assert_eq(peers_count_key_bytes(PEERS_WIRE_KEY_IPV4, 4, "::ffff:192.0.2.1", 16, back,
					   &integer), 4);
	cr_assert_eq(peers_count_key_bytes(PEERS_WIRE_KEY_STRING, 33, "192.0.2.1", 9, back,
					   &integer), 9);
	/* Refused. */
	cr_assert_eq(peers_count_key_bytes(PEERS_WIRE_KEY_IPV4, 4, "example.org", 11, back, &integer), 0);
	cr_assert_eq(peers_count_key_bytes(PEERS_WIRE_KEY_INTEGER, 4, "4294967296", 10, back,
					   &integer), 0);
	cr_assert_eq(peers_count_key_bytes(PEERS_WIRE_KEY_INTEGER, 4, "042", 3, back, &integer), 0);
	cr_assert_eq(peers_count_key_bytes(PEERS_WIRE_KEY_BINARY, 2, "dead00", 6, back, &integer), 0);
	uint8_t big[60] = { 0 };
	cr_assert_eq(peers_count_key(PEERS_WIRE_KEY_BINARY, big, sizeof(big), text), 0);
	cr_assert_eq(peers_count_key(PEERS_WIRE_KEY_IPV4, big, 5, text), 0);
}
