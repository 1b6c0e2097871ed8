/*
 * redis_sentinel.c - a real Sentinel setup as a test fixture. See
 * redis_sentinel.h for the contract.
 */
#include "tests/lib/redis_sentinel.h"
#include "tests/lib/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool redis_sentinels_available(void)
{
	return redis_server_available() && redis_server_have("redis-sentinel");
}

/* Does the reply of `fmt` (a string: INFO) on r hold needle? */
static bool holds(struct redis_server *r, const char *needle, const char *fmt)
{
	redisReply *rep = redis_server_command(r, fmt);
	bool yes = rep && rep->type == REDIS_REPLY_STRING && strstr(rep->str, needle);

	if (rep)
		freeReplyObject(rep);
	return yes;
}

/* The number of entries of SENTINEL <what> mymaster on sentinel i. */
static size_t entries(struct redis_sentinels *t, size_t i, const char *what)
{
	redisReply *r = redis_server_command(&t->sentinel[i], "SENTINEL %s mymaster", what);
	size_t n = r && r->type == REDIS_REPLY_ARRAY ? r->elements : 0;

	/* a replica counts when its link is up */
	if (n && strcmp(what, "REPLICAS") == 0) {
		const redisReply *e = r->element[0];

		n = 0;
		for (size_t k = 0; e->type == REDIS_REPLY_ARRAY && k + 1 < e->elements; k += 2)
			if (strcmp(e->element[k]->str, "master-link-status") == 0 &&
			    strcmp(e->element[k + 1]->str, "ok") == 0)
				n = 1;
	}
	if (r)
		freeReplyObject(r);
	return n;
}

int redis_sentinels_start(struct redis_sentinels *t, int timeout_ms)
{
	return redis_sentinels_start_auth(t, timeout_ms, NULL, NULL);
}

int redis_sentinels_start_auth(struct redis_sentinels *t, int timeout_ms,
			       const char *master_pass, const char *sentinel_pass)
{
	long long end = test_now_ms() + timeout_ms;

	memset(t, 0, sizeof(*t));
	if (master_pass) {
		for (size_t i = 0; i < 2; i++) {
			t->data[i].extra[0] = "--requirepass";
			t->data[i].extra[1] = master_pass;
			t->data[i].extra[2] = "--masterauth";
			t->data[i].extra[3] = master_pass;
			snprintf(t->data[i].password, sizeof(t->data[i].password), "%s",
				 master_pass);
		}
	}
	if (redis_server_start(&t->data[0], timeout_ms) < 0) {
		snprintf(t->err, sizeof(t->err), "master: %.400s", t->data[0].err);
		return -1;
	}
	snprintf(t->replicaof, sizeof(t->replicaof), "127.0.0.1 %d", t->data[0].port);
	t->data[1].extra[master_pass ? 4 : 0] = "--replicaof";
	t->data[1].extra[master_pass ? 5 : 1] = t->replicaof;
	if (redis_server_start(&t->data[1], timeout_ms) < 0) {
		snprintf(t->err, sizeof(t->err), "replica: %.400s", t->data[1].err);
		goto fail;
	}
	for (size_t i = 0; i < REDIS_SENTINELS; i++) {
		struct redis_server *s = &t->sentinel[i];
		size_t off;

		off = (size_t)snprintf(t->conf[i], sizeof(t->conf[i]),
				       "sentinel monitor mymaster 127.0.0.1 %d 2\n"
				       "sentinel down-after-milliseconds mymaster 1000\n"
				       "sentinel failover-timeout mymaster 10000\n", t->data[0].port);
		if (master_pass)
			off += (size_t)snprintf(t->conf[i] + off, sizeof(t->conf[i]) - off,
						"sentinel auth-pass mymaster %s\n", master_pass);
		if (sentinel_pass) {
			snprintf(t->conf[i] + off, sizeof(t->conf[i]) - off,
				 "requirepass %s\nsentinel sentinel-pass %s\n", sentinel_pass,
				 sentinel_pass);
			snprintf(s->password, sizeof(s->password), "%s", sentinel_pass);
		}
		s->bin = "redis-sentinel";
		s->conf_text = t->conf[i];
		if (redis_server_start(s, timeout_ms) < 0) {
			snprintf(t->err, sizeof(t->err), "sentinel %zu: %.400s", i, s->err);
			goto fail;
		}
	}
	for (size_t i = 0; i < REDIS_SENTINELS; i++) {
		while (entries(t, i, "REPLICAS") < 1 ||
		       entries(t, i, "SENTINELS") < REDIS_SENTINELS - 1) {
			if (test_now_ms() >= end) {
				snprintf(t->err, sizeof(t->err),
					 "sentinel %zu does not know the replica and the others", i);
				goto fail;
			}
			test_sleep_ms(100);
		}
	}
	return 0;
fail:
	redis_sentinels_stop(t);
	return -1;
}

void redis_sentinels_stop(struct redis_sentinels *t)
{
	for (size_t i = 0; i < REDIS_SENTINELS; i++)
		redis_server_stop(&t->sentinel[i], 2000);
	for (size_t i = 0; i < 2; i++)
		redis_server_stop(&t->data[i], 2000);
}

void redis_sentinels_nodes(const struct redis_sentinels *t, char *out, size_t outlen)
{
	snprintf(out, outlen, "[\"127.0.0.1:%d\", \"127.0.0.1:%d\", \"127.0.0.1:%d\"]",
		 t->sentinel[0].port, t->sentinel[1].port, t->sentinel[2].port);
}

int redis_sentinels_failover_start(struct redis_sentinels *t)
{
	redisReply *r = redis_server_command(&t->sentinel[0], "SENTINEL FAILOVER mymaster");
	int rc = r && r->type == REDIS_REPLY_STATUS ? 0 : -1;

	if (rc < 0)
		snprintf(t->err, sizeof(t->err), "SENTINEL FAILOVER: %s",
			 r && r->str ? r->str : "no reply");
	if (r)
		freeReplyObject(r);
	return rc;
}

bool redis_sentinels_failover_done(struct redis_sentinels *t)
{
	int next = 1 - t->master;

	for (size_t i = 0; i < REDIS_SENTINELS; i++) {
		redisReply *r = redis_server_command(&t->sentinel[i],
						     "SENTINEL get-master-addr-by-name mymaster");
		bool there = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
			     atoi(r->element[1]->str) == t->data[next].port;

		if (r)
			freeReplyObject(r);
		if (!there)
			return false;
	}
	if (!holds(&t->data[next], "role:master", "INFO replication"))
		return false;
	/* The sentinels turn the old master into a replica of the new one
	 * only after watching it report the wrong role for a while (seconds);
	 * do what they will do, now. */
	if (holds(&t->data[t->master], "role:master", "INFO replication")) {
		redisReply *r = redis_server_command(&t->data[t->master], "REPLICAOF 127.0.0.1 %d",
						     t->data[next].port);

		if (r)
			freeReplyObject(r);
		return false;
	}
	if (!holds(&t->data[t->master], "master_link_status:up", "INFO replication"))
		return false;
	t->master = next;
	return true;
}
