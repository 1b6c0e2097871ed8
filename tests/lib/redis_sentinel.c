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
	long long end = test_now_ms() + timeout_ms;
	char replicaof[32];

	memset(t, 0, sizeof(*t));
	if (redis_server_start(&t->data[0], timeout_ms) < 0) {
		snprintf(t->err, sizeof(t->err), "master: %.400s", t->data[0].err);
		return -1;
	}
	snprintf(replicaof, sizeof(replicaof), "127.0.0.1 %d", t->data[0].port);
	t->data[1].extra[0] = "--replicaof";
	t->data[1].extra[1] = replicaof;
	if (redis_server_start(&t->data[1], timeout_ms) < 0) {
		snprintf(t->err, sizeof(t->err), "replica: %.400s", t->data[1].err);
		goto fail;
	}
	for (size_t i = 0; i < REDIS_SENTINELS; i++) {
		struct redis_server *s = &t->sentinel[i];

		snprintf(t->conf[i], sizeof(t->conf[i]),
			 "sentinel monitor mymaster 127.0.0.1 %d 2\n"
			 "sentinel down-after-milliseconds mymaster 1000\n"
			 "sentinel failover-timeout mymaster 10000\n", t->data[0].port);
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
