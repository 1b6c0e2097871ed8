/*
 * test_http_json.c - the HTTP front's /json (docs/HTTP.md, docs/ENVOY.md)
 * against the real agent ($AGENT): a RateLimitRequest in protobuf's JSON
 * mapping POSTed, the RateLimitResponse read back with jansson; the
 * decisions of an envoy_config domain (our own YAML), several
 * descriptors, hits_addend, the tokens and the trust they give, bad
 * requests, a body that arrives in pieces, pipelined requests.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/lib/agenttest.h"
#include "tests/lib/httpc.h"
#include "tests/lib/rawspop.h"

#define IO_MS 3000

static char dir[] = "/tmp/httpjsonXXXXXX";

static const char edge_yaml[] =
	"domain: edge\n"
	"descriptors:\n"
	"  - {key: ip, rate_limit: {unit: minute, requests_per_unit: 3}}\n"
	"  - {key: user, rate_limit: {unit: hour, requests_per_unit: 5}}\n"
	"  - {key: free, rate_limit: {unlimited: true}}\n";

static void start(void)
{
	char f[64], json[512];
	FILE *out;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(f, sizeof(f), "%s/edge.yaml", dir);
	out = fopen(f, "w");
	cr_assert_not_null(out);
	fputs(edge_yaml, out);
	fclose(out);
	snprintf(json, sizeof(json),
		 "{\"http_listen\": \"127.0.0.1:@HTTP_PORT@\", \"http_token\": \"tok\","
		 " \"http_admin_token\": \"adm\", \"envoy_config\": \"%s\","
		 " \"namespaces\": [{\"name\": \"edge\", \"count_denied\": false}]}", dir);
	test_agent_start1(json);
}

static void stop(void)
{
	char cmd[64];

	test_agent_stop();
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
	memcpy(dir + strlen(dir) - 6, "XXXXXX", 6);
}

TestSuite(json, .init = start, .fini = stop, .timeout = 60);

static struct httpc_buf rb;

/* One answer: its status, headers and body (NUL-terminated). */
struct answer {
	int status;
	char head[2048];
	char body[16384];
};

/* Reads one answer off fd (Content-Length bodies). */
static void read_answer(int fd, struct answer *a)
{
	char *end, *cl;
	size_t hl, bl;

	while (!(rb.data[rb.len] = '\0', end = strstr(rb.data, "\r\n\r\n")))
		cr_assert(httpc_fill(fd, &rb, rb.len + 1, IO_MS), "no head: %.*s", (int)rb.len,
			  rb.data);
	hl = (size_t)(end - rb.data) + 4;
	cr_assert_lt(hl, sizeof(a->head));
	memcpy(a->head, rb.data, hl);
	a->head[hl] = '\0';
	cr_assert_eq(sscanf(a->head, "HTTP/1.1 %d", &a->status), 1);
	cl = strcasestr(a->head, "Content-Length: ");
	cr_assert_not_null(cl);
	bl = strtoul(cl + 16, NULL, 10);
	cr_assert_lt(bl, sizeof(a->body));
	cr_assert(httpc_fill(fd, &rb, hl + bl, IO_MS) || rb.len >= hl + bl);
	memcpy(a->body, rb.data + hl, bl);
	a->body[bl] = '\0';
	memmove(rb.data, rb.data + hl + bl, rb.len - hl - bl);
	rb.len -= hl + bl;
}

static int connect_http(void)
{
	int fd = rawspop_connect(test_agent.http_port, IO_MS);

	cr_assert(fd >= 0, "connect: %s", strerror(errno));
	rb.len = 0;
	return fd;
}

static void send_json(int fd, const char *method, const char *token, const char *body,
		      bool close_after)
{
	char head[512];

	snprintf(head, sizeof(head), "%s /json HTTP/1.1\r\nHost: t\r\n%s%s%s"
		 "Content-Type: application/json\r\nContent-Length: %zu\r\n%s\r\n", method,
		 token ? "Authorization: Bearer " : "", token ? token : "", token ? "\r\n" : "",
		 strlen(body), close_after ? "Connection: close\r\n" : "");
	cr_assert_eq(httpc_send(fd, head, strlen(head)), 0);
	cr_assert_eq(httpc_send(fd, body, strlen(body)), 0);
}

/* POST body with token on a new connection: the answer, its body parsed
 * (NULL when it is not JSON). */
static json_t *post(const char *token, const char *body, struct answer *a)
{
	int fd = connect_http();

	send_json(fd, "POST", token, body, true);
	read_answer(fd, a);
	close(fd);
	return json_loads(a->body, 0, NULL);
}

static long long num(json_t *o, const char *path)
{
	json_t *v = json_object_get(o, path);

	return json_is_integer(v) ? (long long)json_integer_value(v) : -1;
}

static const char *str(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return json_is_string(v) ? json_string_value(v) : "";
}

static json_t *status_of(json_t *r, size_t i)
{
	return json_array_get(json_object_get(r, "statuses"), i);
}

static const char *header_of(json_t *r, const char *key)
{
	size_t i;
	json_t *h;

	json_array_foreach(json_object_get(r, "responseHeadersToAdd"), i, h)
		if (strcmp(str(h, "key"), key) == 0)
			return str(h, "value");
	return NULL;
}

static const char one_ip[] = "{\"domain\": \"edge\", \"descriptors\": "
			     "[{\"entries\": [{\"key\": \"ip\", \"value\": \"10.0.0.1\"}]}]}";

Test(json, decisions_as_envoyproxy_ratelimit_answers_them)
{
	struct answer a;
	json_t *r, *st;

	for (int i = 0; i < 3; i++) {
		r = post("tok", one_ip, &a);
		cr_assert_eq(a.status, 200, "%s", a.body);
		cr_assert_not_null(r, "%s", a.body);
		cr_assert_str_eq(str(r, "overallCode"), "OK");
		st = status_of(r, 0);
		cr_assert_str_eq(str(st, "code"), "OK");
		cr_assert_eq(num(json_object_get(st, "currentLimit"), "requestsPerUnit"), 3);
		cr_assert_str_eq(str(json_object_get(st, "currentLimit"), "unit"), "MINUTE");
		cr_assert_eq(num(st, "limitRemaining"), i < 2 ? 2 - i : -1, "0 is left out");
		cr_assert(strlen(str(st, "durationUntilReset")) >= 2);
		cr_assert_eq(str(st, "durationUntilReset")[strlen(str(st, "durationUntilReset")) - 1],
			     's');
		cr_assert_str_eq(header_of(r, "ratelimit-policy"), "\"edge\";q=3;w=60");
		json_decref(r);
	}
	r = post("tok", one_ip, &a);
	cr_assert_eq(a.status, 429, "%s", a.body);
	cr_assert_str_eq(str(r, "overallCode"), "OVER_LIMIT");
	cr_assert_str_eq(str(status_of(r, 0), "code"), "OVER_LIMIT");
	cr_assert_not_null(header_of(r, "retry-after"));
	/* base64 of {"type":... */
	cr_assert(strncmp(str(r, "rawBody"), "eyJ0eXBlIjoi", 12) == 0, "%s", str(r, "rawBody"));
	json_decref(r);
}

/* Several descriptors, one decision; hits_addend by its proto name and
 * as a string; an unknown domain limits nothing. */
Test(json, several_descriptors_and_hits_addend)
{
	struct answer a;
	json_t *r;

	r = post("tok", "{\"domain\": \"edge\", \"hits_addend\": 2, \"descriptors\": ["
		 "{\"entries\": [{\"key\": \"user\", \"value\": \"u\"}]},"
		 "{\"entries\": [{\"key\": \"free\", \"value\": \"x\"}]},"
		 "{\"entries\": [{\"key\": \"ip\", \"value\": \"h\"}], \"hitsAddend\": \"0\"}]}", &a);
	cr_assert_eq(a.status, 200, "%s", a.body);
	cr_assert_eq(num(status_of(r, 0), "limitRemaining"), 3);
	cr_assert_eq(num(status_of(r, 1), "limitRemaining"), 4294967295LL);
	cr_assert_eq(num(status_of(r, 2), "limitRemaining"), 3, "checked, not counted");
	cr_assert_str_eq(header_of(r, "ratelimit-policy"), "\"edge-0\";q=5;w=3600, \"edge-2\";q=3;w=60");
	json_decref(r);
	r = post("tok", "{\"domain\": \"nowhere\", \"descriptors\": [{\"entries\": "
		 "[{\"key\": \"ip\", \"value\": \"1\"}]}]}", &a);
	cr_assert_eq(a.status, 200);
	cr_assert_str_eq(str(r, "overallCode"), "OK");
	cr_assert_str_eq(str(status_of(r, 0), "code"), "OK");
	json_decref(r);
}

/* http_token opens /json; http_admin_token too, and makes the caller
 * trusted: it may name a limit the domain does not configure. */
Test(json, tokens_and_trust)
{
	static const char over[] = "{\"domain\": \"edge\", \"descriptors\": [{\"entries\": "
				   "[{\"key\": \"other\", \"value\": \"1\"}], \"limit\": "
				   "{\"requestsPerUnit\": 1, \"unit\": \"MINUTE\"}}]}";
	struct answer a;
	json_t *r;

	r = post(NULL, one_ip, &a);
	cr_assert_eq(a.status, 401);
	json_decref(r);
	r = post("wrong", one_ip, &a);
	cr_assert_eq(a.status, 401);
	json_decref(r);
	r = post("tok", over, &a);
	cr_assert_eq(a.status, 400, "%s", a.body);
	cr_assert(strstr(a.body, "trusted"), "%s", a.body);
	json_decref(r);
	r = post("adm", over, &a);
	cr_assert_eq(a.status, 200, "%s", a.body);
	cr_assert_eq(num(json_object_get(status_of(r, 0), "currentLimit"), "requestsPerUnit"), 1);
	json_decref(r);
	r = post("adm", over, &a);
	cr_assert_eq(a.status, 429, "%s", a.body);
	json_decref(r);
}

Test(json, bad_requests)
{
	static const char *const bad[] = {
		"", "not json", "[]", "{\"domain\": 5}", "{\"domain\": \"edge\", \"extra\": 1}",
		"{\"domain\": \"edge\", \"descriptors\": {}}",
		"{\"domain\": \"edge\", \"descriptors\": [{\"entries\": [{\"key\": 1}]}]}",
		"{\"domain\": \"edge\", \"descriptors\": [{\"entries\": [], \"hitsAddend\": -1}]}",
		"{\"domain\": \"edge\", \"hitsAddend\": 4294967296, \"descriptors\": [{}]}",
		"{\"domain\": \"edge\", \"hitsAddend\": 1, \"hits_addend\": 1, \"descriptors\": [{}]}",
		"{\"domain\": \"edge\", \"descriptors\": [{\"limit\": {\"unit\": \"FORTNIGHT\"}}]}",
		"{\"domain\": \"\", \"descriptors\": [{}]}",
		"{\"domain\": \"edge\", \"descriptors\": []}",
	};
	struct answer a;
	int fd;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		json_decref(post("tok", bad[i], &a));
		cr_assert_eq(a.status, 400, "%s: %d %s", bad[i], a.status, a.body);
		cr_assert(strstr(a.body, "\"error\""), "%s", a.body);
	}
	/* GET /json, POST elsewhere */
	fd = connect_http();
	send_json(fd, "GET", "tok", "", true);
	read_answer(fd, &a);
	close(fd);
	cr_assert_eq(a.status, 405);
	cr_assert(strstr(a.head, "Allow: POST\r\n"), "%s", a.head);
	fd = connect_http();
	static const char elsewhere[] = "POST /ratelimit HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n"
					"Connection: close\r\n\r\n{}";
	cr_assert_eq(httpc_send(fd, elsewhere, strlen(elsewhere)), 0);
	read_answer(fd, &a);
	close(fd);
	cr_assert_eq(a.status, 405);
	/* a body over 64 KiB */
	fd = connect_http();
	static const char huge[] = "POST /json HTTP/1.1\r\nHost: t\r\nContent-Length: 65537\r\n\r\n";
	cr_assert_eq(httpc_send(fd, huge, strlen(huge)), 0);
	read_answer(fd, &a);
	close(fd);
	cr_assert_eq(a.status, 413);
}

/* A body that comes in pieces, one larger than the first buffers (64
 * descriptors), and requests pipelined on one connection, in order. */
Test(json, pieces_large_bodies_and_pipelining)
{
	char *big = malloc(65536), head[256];
	size_t o = 0;
	struct answer a;
	json_t *r;
	int fd;

	o += (size_t)snprintf(big + o, 65536 - o, "{\"domain\": \"edge\", \"descriptors\": [");
	for (int i = 0; i < 64; i++)
		o += (size_t)snprintf(big + o, 65536 - o, "%s{\"entries\": [{\"key\": \"%s\", "
				      "\"value\": \"v%d-padding-padding-padding-padding\"}]}",
				      i ? "," : "", i < 30 ? "user" : "free", i);
	o += (size_t)snprintf(big + o, 65536 - o, "]}");
	cr_assert_gt(o, 4096);
	fd = connect_http();
	snprintf(head, sizeof(head), "POST /json HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer tok\r\n"
		 "Content-Length: %zu\r\n\r\n", o);
	cr_assert_eq(httpc_send(fd, head, strlen(head)), 0);
	for (size_t k = 0; k < o; k += 1000) {
		usleep(2000);
		cr_assert_eq(httpc_send(fd, big + k, o - k < 1000 ? o - k : 1000), 0);
	}
	read_answer(fd, &a);
	cr_assert_eq(a.status, 200, "%s", a.body);
	r = json_loads(a.body, 0, NULL);
	cr_assert_eq(json_array_size(json_object_get(r, "statuses")), 64);
	json_decref(r);
	/* two more on the same connection, sent at once: answered in order */
	send_json(fd, "POST", "tok", one_ip, false);
	send_json(fd, "POST", "tok", "{\"domain\": \"edge\", \"descriptors\": [{\"entries\": "
		  "[{\"key\": \"user\", \"value\": \"p\"}]}]}", true);
	read_answer(fd, &a);
	r = json_loads(a.body, 0, NULL);
	cr_assert_str_eq(str(json_object_get(status_of(r, 0), "currentLimit"), "unit"), "MINUTE");
	json_decref(r);
	read_answer(fd, &a);
	r = json_loads(a.body, 0, NULL);
	cr_assert_str_eq(str(json_object_get(status_of(r, 0), "currentLimit"), "unit"), "HOUR");
	json_decref(r);
	close(fd);
	free(big);
}
