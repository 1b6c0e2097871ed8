/*
 * test_admin.c - the admin endpoints of the HTTP front against the real
 * agent ($AGENT): GET /keys (what this node holds of a key), GET /top
 * (the heaviest keys of the current window, by hits or denials), their
 * token (401 without, 403 with the checks' token, 404 when not set up),
 * escaped keys, unknown namespaces.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/lib/agenttest.h"
#include "tests/lib/clock.h"
#include "tests/lib/httpc.h"
#include "tests/lib/rawspop.h"
#include "tests/lib/spoptest.h"

#define IO_MS    5000
#define ADMIN    "Authorization: Bearer adm1n-t0ken\r\n"
#define CHECK    "Authorization: Bearer ch3ck-t0ken\r\n"

/* Not near the end of a 60 s window: a test's hits stay in one window
 * (the summaries start afresh with each). */
static void window_margin(void)
{
	test_window_room(60, 10000);
}

static void get(const char *target, const char *headers, struct httpc_resp *r)
{
	const char *why = "";

	cr_assert(httpc_get(test_agent.http_port, target, headers, r, IO_MS, &why) == 0,
		  "GET %s: %s\n%s", target, why, test_agent_log_tail());
}

/* ctl with args exits with status and its output holds want. */
static void ctl_expect(const char *args, int status, const char *want)
{
	char out[8192];

	cr_assert_eq(test_agent_ctl(args, out, sizeof(out)), status, "ctl %s:\n%s", args, out);
	cr_assert_not_null(strstr(out, want), "ctl %s: no [%s] in\n%s", args, want, out);
}

static const char json[] =
	"{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"http_token\": \"ch3ck-t0ken\","
	" \"http_admin_token\": \"adm1n-t0ken\", \"namespaces\": ["
	"{\"name\": \"default\", \"window_sizes\": [60, 3600], \"limit\": {\"60\": 5}},"
	"{\"name\": \"flood\", \"window_sizes\": [60]}]}";

TestSuite(admin, .fini = test_agent_stop, .timeout = 120);

Test(admin, off_without_its_token)
{
	struct httpc_resp r;

	test_agent_start1("{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\"}");
	get("/keys?key=a", NULL, &r);
	cr_assert_eq(r.status, 404);
	get("/top", NULL, &r);
	cr_assert_eq(r.status, 404);
}

Test(admin, keys_shows_what_the_node_holds)
{
	struct httpc_resp r;

	test_agent_start1(json);
	window_margin();
	for (int i = 0; i < 8; i++)
		get("/ratelimit?key=alice&window=60", CHECK, &r);
	get("/keys?key=alice", NULL, &r);
	cr_assert_eq(r.status, 401, "%s", r.body);
	get("/keys?key=alice", CHECK, &r);
	cr_assert_eq(r.status, 403, "the checks' token does not open it: %s", r.body);
	get("/keys?key=alice", ADMIN, &r);
	cr_assert_eq(r.status, 200, "%s", r.body);
	cr_assert_not_null(strstr(r.body, "{\"window\":60,\"count\":8,"), "%s", r.body);
	cr_assert_not_null(strstr(r.body, "\"limit\":5,\"remaining\":0}"), "%s", r.body);
	cr_assert_not_null(strstr(r.body, "{\"window\":3600,\"count\":0,"), "%s", r.body);
	cr_assert_eq(httpc_body_num(&r, "unpushed"), 0);
	/* Reading counts nothing. */
	get("/keys?key=alice", ADMIN, &r);
	cr_assert_not_null(strstr(r.body, "{\"window\":60,\"count\":8,"), "%s", r.body);
	/* Keys are escaped in the answer. */
	get("/keys?key=q%22b%5Cs%01%FF", ADMIN, &r);
	cr_assert_eq(r.status, 200, "%s", r.body);
	cr_assert_not_null(strstr(r.body, "\"key\":\"q\\\"b\\\\s\\u0001\\u00ff\""), "%s", r.body);
	get("/keys?key=alice&namespace=nope", ADMIN, &r);
	cr_assert_eq(r.status, 404, "%s", r.body);

	/* The same from the command line, with the config file's address
	 * and token. */
	char out[4096];
	cr_assert_eq(test_agent_ctl("keys default alice", out, sizeof(out)), 0, "%s", out);
	cr_assert_not_null(strstr(out, "namespace default, key alice\n"), "%s", out);
	cr_assert_not_null(strstr(out, "     60s            8            8"), "%s", out);
	cr_assert_not_null(strstr(out, "          5          0"), "%s", out);
	cr_assert_neq(test_agent_ctl("keys nope alice", out, sizeof(out)), 0, "%s", out);
	cr_assert_not_null(strstr(out, "404: unknown namespace"), "%s", out);
	get("/keys?namespace=default", ADMIN, &r);
	cr_assert_eq(r.status, 400, "%s", r.body);
}

/* Sends n NOTIFYs (key i of keyf, namespace flood, window 60) pipelined
 * in batches, reads every ACK. */
static void spop_hits(int fd, const char *keyf, int from, int n, int every)
{
	char key[64];
	uint64_t sid = 1;

	for (int done = 0; done < n;) {
		int batch = n - done < 200 ? n - done : 200;

		rawspop_buf_reset(&sp_wb);
		for (int i = 0; i < batch; i++) {
			struct sp_msg m = { .key = key, .window = 60, .ns = "flood" };

			snprintf(key, sizeof(key), keyf, (from + done + i) % every);
			sp_put_notify(sid++, 1, &m, 1);
		}
		sp_send(fd);
		for (int i = 0; i < batch; i++)
			sp_read(fd, &sp_fr, IO_MS);
		done += batch;
	}
}

/* 20,000 distinct keys hit once, 10 heavy ones 1,000 times each (in
 * between): the 10 heavy ones are listed first. */
Test(admin, top_lists_the_heavy_keys_first)
{
	struct httpc_resp r;

	test_agent_start1(json);
	window_margin();
	int fd = sp_open(test_agent.port);
	for (int round = 0; round < 10; round++) {
		spop_hits(fd, "flood-%d", round * 2000, 2000, 1 << 30);
		spop_hits(fd, "heavy-%d", 0, 1000, 10);
	}
	close(fd);
	get("/top?namespace=flood&n=12", ADMIN, &r);
	cr_assert_eq(r.status, 200, "%s", r.body);
	cr_log_info("GET /top: %.400s", r.body);
	/* The first ten keys of the list are the heavy ones. */
	const char *p = strstr(r.body, "\"keys\":[");
	cr_assert_not_null(p);
	for (int i = 0; i < 10; i++) {
		p = strstr(p, "{\"key\":\"");
		cr_assert_not_null(p, "%s", r.body);
		p += 8;
		cr_assert(strncmp(p, "heavy-", 6) == 0, "#%d is not a heavy key: %s", i, r.body);
	}
	p = strstr(p, "{\"key\":\"");
	cr_assert(p && strncmp(p + 8, "flood-", 6) == 0, "%s", r.body);
	cr_assert_eq(httpc_body_num(&r, "entries"), 64);
	get("/top?namespace=flood&by=denied", ADMIN, &r);
	cr_assert_eq(r.status, 200, "%s", r.body);
	cr_assert_not_null(strstr(r.body, "\"keys\":[]"), "no limit: nothing denied: %s", r.body);
	get("/top?namespace=nope", ADMIN, &r);
	cr_assert_eq(r.status, 404);
	get("/top?namespace=flood&by=most", ADMIN, &r);
	cr_assert_eq(r.status, 400);
}

/* by=denied: the keys over their limit. */
Test(admin, top_by_denied)
{
	struct httpc_resp r;

	test_agent_start1("{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"http_token\": \"ch3ck-t0ken\","
		   " \"http_admin_token\": \"adm1n-t0ken\", \"top_sample\": 1, \"namespaces\": ["
		   "{\"name\": \"default\", \"window_sizes\": [60], \"limit\": 2}]}");
	window_margin();
	for (int i = 0; i < 6; i++)
		get("/ratelimit?key=greedy", CHECK, &r);
	get("/ratelimit?key=modest", CHECK, &r);
	get("/top?by=denied", ADMIN, &r);
	cr_assert_eq(r.status, 200, "%s", r.body);
	cr_assert_not_null(strstr(r.body, "\"keys\":[{\"key\":\"greedy\",\"count\":4,"), "%s",
			   r.body);
	cr_assert_null(strstr(r.body, "modest"), "%s", r.body);
	get("/top", ADMIN, &r);
	cr_assert_not_null(strstr(r.body, "{\"key\":\"greedy\",\"count\":6,"), "%s", r.body);
	cr_assert_not_null(strstr(r.body, "{\"key\":\"modest\",\"count\":1,"), "%s", r.body);
}

/* DELETE /keys (ctl reset): a local namespace's key forgotten, every
 * window; it starts from zero. A synced namespace whose store is away:
 * forgotten here, the store's part queued (tests/test_forget.c has the
 * rest). */
Test(admin, reset_forgets_a_key)
{
	struct httpc_resp r;
	char out[4096];

	test_agent_start1("{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"http_token\": \"ch3ck-t0ken\","
		   " \"http_admin_token\": \"adm1n-t0ken\", \"namespaces\": ["
		   "{\"name\": \"default\", \"window_sizes\": [60, 3600], \"limit\": 3},"
		   "{\"name\": \"synced\", \"window_sizes\": [60], \"sync_rate\": 1,"
		   " \"strategy\": \"redis\", \"strategy_opts\": {\"port\": 1}}]}");
	window_margin();
	for (int i = 0; i < 5; i++)
		get("/ratelimit?key=bob&window=60", CHECK, &r);
	cr_assert_eq(r.status, 429);
	get("/ratelimit?key=bob&window=3600", CHECK, &r);
	/* Another key of the same namespace is left alone. */
	get("/ratelimit?key=carol&window=60", CHECK, &r);

	int fd = rawspop_connect(test_agent.http_port, IO_MS);
	cr_assert(fd >= 0);
	static const char del[] = "DELETE /keys?key=bob HTTP/1.1\r\nHost: t\r\n" ADMIN
				  "Connection: close\r\n\r\n";
	struct httpc_buf *b = calloc(1, sizeof(*b));
	const char *why = "";
	cr_assert_eq(httpc_send(fd, del, sizeof(del) - 1), 0);
	cr_assert_eq(httpc_read(fd, b, &r, IO_MS, &why), 0, "%s", why);
	close(fd);
	cr_assert_eq(r.status, 200, "%s", r.body);
	cr_assert_not_null(strstr(r.body, "\"removed\":6,\"windows\":2"), "%s", r.body);
	get("/ratelimit?key=bob&window=60", CHECK, &r);
	cr_assert_eq(r.status, 200, "admitted again: %s", r.body);
	cr_assert_eq(httpc_body_num(&r, "rate"), 1);
	get("/ratelimit?key=carol&window=60&cost=0", CHECK, &r);
	cr_assert_eq(httpc_body_num(&r, "rate"), 1);
	/* DELETE elsewhere: 405. */
	fd = rawspop_connect(test_agent.http_port, IO_MS);
	static const char del2[] = "DELETE /ratelimit?key=bob HTTP/1.1\r\nHost: t\r\n"
				   "Connection: close\r\n\r\n";
	b->len = 0;
	cr_assert_eq(httpc_send(fd, del2, sizeof(del2) - 1), 0);
	cr_assert_eq(httpc_read(fd, b, &r, IO_MS, &why), 0, "%s", why);
	close(fd);
	cr_assert_eq(r.status, 405);
	/* The command line; a synced namespace whose store is away: queued. */
	get("/ratelimit?key=bob&window=60", CHECK, &r);
	cr_assert_eq(test_agent_ctl("reset default bob", out, sizeof(out)), 0, "%s", out);
	cr_assert_not_null(strstr(out, "namespace default, key bob: forgotten on this node (2 hits "
				  "in 2 window(s))"), "%s", out);
	cr_assert_eq(test_agent_ctl("reset synced bob", out, sizeof(out)), 0, "%s", out);
	cr_assert_not_null(strstr(out, "namespace synced, key bob: forgotten on this node"), "%s",
			   out);
	cr_assert_not_null(strstr(out, "store: away; queued, sent once when it is back"), "%s",
			   out);
	free(b);
}

/* Issue 28, finding 3: ctl prints a key so that no two keys read alike:
 * as it is when it is printable ASCII without a space at either end, a
 * quote or a backslash; else quoted, with \" \\ and \xNN. Keys sent over
 * the HTTP front, percent-encoded; a NUL neither cuts a key nor breaks the
 * listing (before: `ctl top` failed on it, and "k " printed as "k"). */
Test(admin, ctl_prints_keys_that_cannot_be_confused)
{
	static const struct {
		const char *sent, *shown;
	} keys[] = {
		{ "k", "k" },
		{ "k%20", "\"k \"" },
		{ "%20k", "\" k\"" },
		{ "a%20b", "a b" },
		{ "k%00x", "\"k\\x00x\"" },
		{ "q%22b", "\"q\\\"b\"" },
		{ "b%5Cs", "\"b\\\\s\"" },
		{ "t%09b", "\"t\\x09b\"" },
		{ "caf%C3%A9", "\"caf\\xc3\\xa9\"" },
		{ "%FF", "\"\\xff\"" },
	};
	const size_t n = sizeof(keys) / sizeof(keys[0]);
	struct httpc_resp r;
	char out[8192], target[256], line[256], args[6000], cfg[512], one[64], zero[64];
	int width = 3;
	/* About 20 runs of ctl, each a sanitized process: minutes to spare. */
	unsigned w = test_window_pick(3600, 300);

	snprintf(cfg, sizeof(cfg), "{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"http_token\":"
		 " \"ch3ck-t0ken\", \"http_admin_token\": \"adm1n-t0ken\", \"top_sample\": 1,"
		 " \"namespaces\": [{\"name\": \"esc\", \"window_sizes\": [%u]}]}", w);
	snprintf(one, sizeof(one), "%7us %12d %12d", w, 1, 1);
	snprintf(zero, sizeof(zero), "%7us %12d %12d", w, 0, 0);
	test_agent_start1(cfg);
	for (size_t i = 0; i < n; i++) {
		snprintf(target, sizeof(target), "/ratelimit?namespace=esc&key=%s", keys[i].sent);
		get(target, CHECK, &r);
		cr_assert_eq(r.status, 200, "%s: %s", target, r.body);
		if ((int)strlen(keys[i].shown) > width)
			width = (int)strlen(keys[i].shown);
	}
	/* Every key on its own row, one hit each, in its column. */
	cr_assert_eq(test_agent_ctl("top esc 20", out, sizeof(out)), 0, "%s", out);
	cr_assert_not_null(strstr(out, "by hits: 10 key(s)"), "%s", out);
	for (size_t i = 0; i < n; i++) {
		snprintf(line, sizeof(line), "  %-*s %12d %10d\n", width, keys[i].shown, 1, 0);
		cr_assert_not_null(strstr(out, line), "no row [%s] in\n%s", line, out);
	}
	/* ctl keys: the key as given, shown the same way. */
	ctl_expect("keys esc 'k '", 0, "namespace esc, key \"k \"\n");
	ctl_expect("keys esc 'k '", 0, one);
	ctl_expect("keys esc k", 0, "namespace esc, key k\n");
	ctl_expect("reset esc ' k'", 0, "namespace esc, key \" k\": forgotten on this node (1 hits");
	/* A key as printed is a key to give back: the NUL one, the 0xff one. */
	ctl_expect("reset esc '\"k\\x00x\"'", 0, "key \"k\\x00x\": forgotten on this node (1 hits");
	ctl_expect("keys esc '\"k\\x00x\"'", 0, zero);
	ctl_expect("keys esc '\"\\xff\"'", 0, "key \"\\xff\"\n");
	ctl_expect("keys esc '\"\\xff\"'", 0, one);
	ctl_expect("keys esc '\"q\\\"b\"'", 0, one);
	ctl_expect("keys esc '\"k\\n\"'", 2, "bad quoted key");
	/* A key too long for a request is refused, not cut. */
	memcpy(args, "keys esc ", 9);
	memset(args + 9, 'a', 5000);
	args[5009] = '\0';
	ctl_expect(args, 0, zero);
	memset(args + 9, '.', 3000);
	memset(args + 3009, '/', 2000);
	ctl_expect(args, 2, "key too long for a request");
}

/* Issue 28, finding 4: GET /keys of a namespace that syncs asks its store
 * too; a store that is away is said so, per window ("store":{"error"}),
 * next to the node's own view ("seen": whether this node holds a counter
 * of the key). A local namespace answers as before. tests/test_cluster_nodes.c
 * reads a store that answers, on Redis and PostgreSQL. */
Test(admin, keys_says_when_the_store_is_away)
{
	struct httpc_resp r;

	test_agent_start1("{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"http_token\": \"ch3ck-t0ken\","
		   " \"http_admin_token\": \"adm1n-t0ken\", \"namespaces\": ["
		   "{\"name\": \"default\", \"window_sizes\": [60], \"limit\": 3},"
		   "{\"name\": \"synced\", \"window_sizes\": [60, 3600], \"sync_rate\": 1,"
		   " \"strategy\": \"redis\", \"strategy_opts\": {\"port\": 1}}]}");
	window_margin();
	get("/ratelimit?namespace=synced&key=dave&window=60", CHECK, &r);
	cr_assert_eq(r.status, 200, "%s", r.body);
	get("/keys?namespace=synced&key=dave", ADMIN, &r);
	cr_assert_eq(r.status, 200, "%s", r.body);
	cr_assert_not_null(strstr(r.body, "{\"window\":60,\"count\":1,\"cluster\":0,\"unpushed\":1,"),
			   "the node's view: %s", r.body);
	cr_assert_not_null(strstr(r.body, "\"seen\":true,\"store\":{\"error\":\"not connected"),
			   "%s", r.body);
	cr_assert_not_null(strstr(r.body, "{\"window\":3600,\"count\":0,"), "%s", r.body);
	cr_assert_not_null(strstr(r.body, "\"seen\":false,\"store\":{\"error\":"), "%s", r.body);
	get("/keys?key=dave", ADMIN, &r);
	cr_assert_eq(r.status, 200, "%s", r.body);
	cr_assert_null(strstr(r.body, "store"), "a local namespace has no store: %s", r.body);
	cr_assert_null(strstr(r.body, "seen"), "%s", r.body);
	ctl_expect("keys synced dave", 0, "     60s            1            0          1");
	ctl_expect("keys synced dave", 0, "   3600s            -            -          0");
	ctl_expect("keys synced dave", 0, "store: away (not connected");
}
