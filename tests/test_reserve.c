/*
 * test_reserve.c - costs known after the response (issue 33, docs/PROTOCOL.md,
 * "Costs known after the response") through the fronts of a real agent:
 * a hit with `reserve` answers a reservation; the SPOP message `settle`
 * and POST /settle replace its estimate by the actual cost, once, in every
 * window it counted in; a forged or replayed one does nothing; one never
 * settled keeps its estimate (settle_ms); a charge without a reservation
 * counts its cost after the fact, never denied. Across nodes on a store:
 * tests/test_cluster_reserve.c.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tests/lib/agenttest.h"
#include "tests/lib/clock.h"
#include "tests/lib/httpc.h"
#include "tests/lib/rawspop.h"
#include "tests/lib/spoptest.h"

#define IO_MS  5000
#define ID_MAX 512

/* "llm": 1000 per window W; "short": the same, settle_ms 1000; "multi":
 * 1000 per W and 5000 per W2 (a request naming no window counts in both).
 * W and W2 hold 40 s more at least (test_window_pick). */
static const char *reserve_json(unsigned *w, unsigned *w2)
{
	static char out[1024];

	*w = test_window_pick(60, 40);
	*w2 = test_window_pick(*w + 60, 40);
	snprintf(out, sizeof(out),
		 "{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"namespaces\": ["
		 "{\"name\": \"default\", \"window_sizes\": [60]},"
		 "{\"name\": \"llm\", \"window_sizes\": [%u], \"limit\": 1000},"
		 "{\"name\": \"short\", \"window_sizes\": [%u], \"limit\": 1000,"
		 " \"settle_ms\": 1000},"
		 "{\"name\": \"multi\", \"window_sizes\": [%u, %u],"
		 " \"limit\": {\"%u\": 1000, \"%u\": 5000}}]}",
		 *w, *w, *w, *w2, *w, *w2);
	return out;
}

/* A reservation of cost in ns: admitted or not, the rate after it; its
 * id in id ("" when none). */
static bool spop_reserve(int fd, const char *ns, const char *key, int64_t cost, int64_t *rate,
			 char *id)
{
	struct rawspop_actions acts;
	struct sp_msg m = { .key = key, .ns = ns, .cost = cost, .has_cost = true, .reserve = true };

	sp_notify1(fd, &m, &acts);
	sp_expect_no_error(&acts);
	bool admitted = !sp_var_bool(&acts, "exceeded");
	const struct rawspop_action *r = sp_var(&acts, "reservation");
	cr_assert_eq(r != NULL, admitted, "a reservation iff admitted");
	*rate = sp_var_int(&acts, "rate");
	id[0] = '\0';
	if (r) {
		cr_assert_lt(r->value.s_len, ID_MAX);
		memcpy(id, r->value.s, r->value.s_len);
		id[r->value.s_len] = '\0';
	}
	return admitted;
}

/* A `settle` message: id ("" for HAProxy's NULL), cost. Returns
 * `settled`. */
static bool spop_settle(int fd, const char *id, int64_t cost)
{
	struct rawspop_actions acts;
	struct sp_msg m = { .msg = "settle", .reservation = id[0] ? id : NULL,
			    .reservation_null = !id[0], .cost = cost, .has_cost = true };

	sp_notify1(fd, &m, &acts);
	sp_expect_no_error(&acts);
	return sp_var_bool(&acts, "settled");
}

/* The rate of key in ns (window w; 0: the namespace's only one). */
static int64_t spop_rate(int fd, const char *ns, const char *key, unsigned w)
{
	struct rawspop_actions acts;
	struct sp_msg m = { .key = key, .ns = ns, .window = w, .has_cost = true, .cost = 0 };

	sp_notify1(fd, &m, &acts);
	sp_expect_no_error(&acts);
	return sp_var_int(&acts, "rate");
}

/* The agent started, a new key in key (48 bytes), an SPOP connection
 * returned; the windows in *w, *w2. */
static int reserve_start(char *key, unsigned *w, unsigned *w2)
{
	test_agent_start1(reserve_json(w, w2));
	sp_key(key, 48, "tenant");
	return sp_agent_conn();
}

/* Issue 33's target on one node: limit 1000: reserve 400 (admitted),
 * settle at 100 (count 100), reserve 800 (admitted, 900), settle 800
 * (count 900), reserve 200 (denied); the first settle sent again, and a
 * forged one, do nothing. */
Test(reserve, spop_reserve_and_settle, .fini = test_agent_stop, .timeout = 60)
{
	char key[48], a[ID_MAX], b[ID_MAX], c[ID_MAX];
	unsigned w, w2;
	int64_t rate;

	int fd = reserve_start(key, &w, &w2);
	cr_assert(spop_reserve(fd, "llm", key, 400, &rate, a));
	cr_assert_eq(rate, 400);
	cr_assert(spop_settle(fd, a, 100));
	cr_assert_eq(spop_rate(fd, "llm", key, 0), 100);
	cr_assert(spop_reserve(fd, "llm", key, 800, &rate, b), "800 of the 900 left");
	cr_assert_eq(rate, 900);
	cr_assert(spop_settle(fd, b, 800));
	cr_assert_eq(spop_rate(fd, "llm", key, 0), 900);
	cr_assert(!spop_reserve(fd, "llm", key, 200, &rate, c), "over the budget");
	cr_assert(!spop_settle(fd, a, 0), "a settle sent twice counts once");
	cr_assert(!spop_settle(fd, c, 0), "a denied request holds none (NULL)");
	cr_assert_eq(spop_rate(fd, "llm", key, 0), 900);
	/* Forged: a digit of the key changed, or the MAC. */
	char forged[ID_MAX];
	strcpy(forged, b);
	forged[strlen(forged) - 20] ^= 1;
	cr_assert(!spop_settle(fd, forged, 0));
	strcpy(forged, b);
	forged[strlen(forged) - 1] = forged[strlen(forged) - 1] == '0' ? '1' : '0';
	cr_assert(!spop_settle(fd, forged, 0));
	cr_assert(!spop_settle(fd, "zz", 0), "not even hex");
	cr_assert_eq(spop_rate(fd, "llm", key, 0), 900);
	close(fd);
}

/* A reservation never settled keeps its estimate: a settle after
 * settle_ms (1 s) does nothing. */
Test(reserve, spop_unsettled_keeps_its_estimate, .fini = test_agent_stop, .timeout = 60)
{
	char key[48], a[ID_MAX];
	unsigned w, w2;
	int64_t rate;

	int fd = reserve_start(key, &w, &w2);
	cr_assert(spop_reserve(fd, "short", key, 400, &rate, a));
	test_sleep_ms(1500);
	cr_assert(!spop_settle(fd, a, 100), "after settle_ms");
	cr_assert_eq(spop_rate(fd, "short", key, 0), 400);
	close(fd);
}

/* A request that names no window counts in every window with a limit:
 * its settle replaces the estimate in each of them. A settle above the
 * estimate adds the difference. */
Test(reserve, spop_settle_every_window, .fini = test_agent_stop, .timeout = 60)
{
	char key[48], a[ID_MAX];
	unsigned w, w2;
	int64_t rate;

	int fd = reserve_start(key, &w, &w2);
	cr_assert(spop_reserve(fd, "multi", key, 400, &rate, a));
	cr_assert(spop_settle(fd, a, 100));
	cr_assert_eq(spop_rate(fd, "multi", key, w), 100);
	cr_assert_eq(spop_rate(fd, "multi", key, w2), 100);
	cr_assert(spop_reserve(fd, "multi", key, 100, &rate, a));
	cr_assert(spop_settle(fd, a, 700), "actual above the estimate");
	cr_assert_eq(spop_rate(fd, "multi", key, w), 800);
	cr_assert_eq(spop_rate(fd, "multi", key, w2), 800);
	close(fd);
}

/* Two messages of one NOTIFY on one key (a minute's and a day's, as the
 * nginx module sends them): the plain reservation settles both windows;
 * each message's own only its window. */
Test(reserve, spop_plain_reservation_of_two_messages, .fini = test_agent_stop, .timeout = 60)
{
	char key[48], plain[ID_MAX];
	unsigned w, w2;
	struct rawspop_actions acts;

	int fd = reserve_start(key, &w, &w2);
	struct sp_msg m[2] = {
		{ .msg = "ratelimit-min", .key = key, .ns = "multi", .window = w, .cost = 400,
		  .has_cost = true, .reserve = true },
		{ .msg = "ratelimit-day", .key = key, .ns = "multi", .window = w2, .cost = 400,
		  .has_cost = true, .reserve = true },
	};
	sp_notify_n(fd, m, 2, &acts);
	sp_expect_no_error(&acts);
	const struct rawspop_action *r = sp_var(&acts, "reservation");
	cr_assert_not_null(r);
	cr_assert_not_null(sp_var(&acts, "reservation_min"));
	cr_assert_not_null(sp_var(&acts, "reservation_day"));
	memcpy(plain, r->value.s, r->value.s_len + 1);
	cr_assert(spop_settle(fd, plain, 100));
	cr_assert_eq(spop_rate(fd, "multi", key, w), 100);
	cr_assert_eq(spop_rate(fd, "multi", key, w2), 100);
	close(fd);
}

/* A charge after the fact (a `settle` without a reservation): counted
 * now, never denied, and what it counted denies the next request. */
Test(reserve, spop_charge_after_the_fact, .fini = test_agent_stop, .timeout = 60)
{
	char key[48];
	unsigned w, w2;
	struct rawspop_actions acts;

	int fd = reserve_start(key, &w, &w2);
	struct sp_msg m = { .msg = "settle", .key = key, .ns = "llm", .cost = 900,
			    .has_cost = true };
	sp_notify1(fd, &m, &acts);
	sp_expect_no_error(&acts);
	cr_assert(sp_var_bool(&acts, "settled"));
	cr_assert_eq(spop_rate(fd, "llm", key, 0), 900);
	m.cost = 700;   /* over the limit: counted all the same */
	sp_notify1(fd, &m, &acts);
	cr_assert(sp_var_bool(&acts, "settled"));
	cr_assert_eq(spop_rate(fd, "llm", key, 0), 1600);
	struct sp_msg hit = { .key = key, .ns = "llm" };
	sp_notify1(fd, &hit, &acts);
	cr_assert(sp_var_bool(&acts, "exceeded"));
	/* Errors: no cost, an unknown namespace, no key. */
	struct sp_msg bad = { .msg = "settle", .key = key, .ns = "llm" };
	sp_notify1(fd, &bad, &acts);
	sp_expect_error(&acts, "missing cost");
	bad = (struct sp_msg){ .msg = "settle", .key = key, .ns = "nope", .has_cost = true };
	sp_notify1(fd, &bad, &acts);
	sp_expect_error(&acts, "unknown namespace");
	bad = (struct sp_msg){ .msg = "settle", .ns = "llm", .has_cost = true };
	sp_notify1(fd, &bad, &acts);
	sp_expect_error(&acts, "missing key");
	close(fd);
}

static void http_once(const char *method, const char *target, struct httpc_resp *r)
{
	const char *why = NULL;

	cr_assert_eq(httpc_request(test_agent.http_port, method, target, "", r, IO_MS, &why), 0,
		     "%s %s: %s", method, target, why ? why : "");
}

/* POST /settle: 200 and `settled`. */
static bool http_settle(const char *query)
{
	struct httpc_resp r;
	char target[ID_MAX + 128];

	snprintf(target, sizeof(target), "/settle?%s", query);
	http_once("POST", target, &r);
	cr_assert_eq(r.status, 200, "%s: %d %s", target, r.status, r.body);
	return strstr(r.body, "\"settled\":true") != NULL;
}

/* Over HTTP: the reservation in X-RateLimit-Reservation and the body,
 * POST /settle?reservation=&cost= once, a charge by namespace and key. */
Test(reserve, http_reserve_and_settle, .fini = test_agent_stop, .timeout = 60)
{
	char key[48], target[ID_MAX + 128], id[ID_MAX], body_id[ID_MAX + 32];
	unsigned w, w2;
	struct httpc_resp r;

	test_agent_start1(reserve_json(&w, &w2));
	sp_key(key, sizeof(key), "tenant");
	snprintf(target, sizeof(target), "/ratelimit?namespace=llm&key=%s&cost=400&reserve=true",
		 key);
	http_once("GET", target, &r);
	cr_assert_eq(r.status, 200, "%d %s", r.status, r.body);
	httpc_header(&r, "X-RateLimit-Reservation", id, sizeof(id));
	cr_assert(id[0], "no X-RateLimit-Reservation");
	snprintf(body_id, sizeof(body_id), "\"reservation\":\"%s\"", id);
	cr_assert_not_null(strstr(r.body, body_id), "%s", r.body);
	snprintf(target, sizeof(target), "reservation=%s&cost=100", id);
	cr_assert(http_settle(target));
	cr_assert(!http_settle(target), "once");
	cr_assert(!http_settle("reservation=&cost=100"), "empty: a request that holds none");
	snprintf(target, sizeof(target), "namespace=llm&key=%s&cost=850", key);
	cr_assert(http_settle(target), "a charge");
	snprintf(target, sizeof(target), "/ratelimit?namespace=llm&key=%s&cost=0", key);
	http_once("GET", target, &r);
	cr_assert_eq(httpc_body_num(&r, "rate"), 950, "%s", r.body);
	snprintf(target, sizeof(target), "/ratelimit?namespace=llm&key=%s&cost=100&reserve=true",
		 key);
	http_once("GET", target, &r);
	cr_assert_eq(r.status, 429, "%d %s", r.status, r.body);
	cr_assert_null(strstr(r.body, "reservation"), "%s", r.body);
	/* Bad requests. */
	http_once("POST", "/settle?reservation=ab", &r);
	cr_assert_eq(r.status, 400, "missing cost: %d", r.status);
	http_once("POST", "/settle?reservation=ab&cost=-1", &r);
	cr_assert_eq(r.status, 400);
	http_once("GET", "/settle?reservation=ab&cost=1", &r);
	cr_assert_eq(r.status, 405);
}
