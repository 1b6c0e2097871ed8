/*
 * redis_cluster.c - a real Redis Cluster as a test fixture. See
 * redis_cluster.h for the contract.
 */
#include "tests/lib/redis_cluster.h"
#include "tests/lib/clock.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const cluster_args[] = {
	"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
	"--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no",
	"--cluster-replica-validity-factor", "0", NULL,
};

/* One command on server i (fresh connection); the reply or NULL. */
static redisReply *cmd(struct redis_cluster *c, size_t i, const char *fmt, ...)
{
	redisContext *ctx = redis_server_connect(&c->srv[i]);
	redisReply *r;
	va_list ap;

	if (ctx == NULL)
		return NULL;
	va_start(ap, fmt);
	r = redisvCommand(ctx, fmt, ap);
	va_end(ap);
	redisFree(ctx);
	return r;
}

/* Does the reply of `fmt` on server i hold needle? */
static bool holds(struct redis_cluster *c, size_t i, const char *needle, const char *fmt)
{
	redisReply *r = cmd(c, i, fmt);
	bool yes = r && r->type == REDIS_REPLY_STRING && strstr(r->str, needle);

	if (r)
		freeReplyObject(r);
	return yes;
}

static bool alive(const struct redis_cluster *c, size_t i)
{
	return c->srv[i].pid > 0;
}

/* Waits until every live node says cluster_state:ok and knows every node
 * (n lines in CLUSTER NODES, none "fail" unless dead). */
static int wait_ok(struct redis_cluster *c, int timeout_ms)
{
	long long end = test_now_ms() + timeout_ms;

	for (;;) {
		bool ok = true;

		for (size_t i = 0; i < c->n && ok; i++)
			if (alive(c, i))
				ok = holds(c, i, "cluster_state:ok", "CLUSTER INFO");
		if (ok)
			return 0;
		if (test_now_ms() >= end)
			break;
		test_sleep_ms(50);
	}
	snprintf(c->err, sizeof(c->err), "cluster not ok within %d ms", timeout_ms);
	return -1;
}

int redis_cluster_start(struct redis_cluster *c, size_t masters, size_t replicas, int timeout_ms)
{
	long long end = test_now_ms() + timeout_ms;

	memset(c, 0, sizeof(*c));
	c->masters = masters;
	c->replicas = replicas;
	c->n = masters * (1 + replicas);
	if (c->n > REDIS_CLUSTER_MAX || masters == 0) {
		snprintf(c->err, sizeof(c->err), "%zu servers, at most %d", c->n, REDIS_CLUSTER_MAX);
		return -1;
	}
	for (size_t i = 0; i < c->n; i++) {
		struct redis_server *r = &c->srv[i];
		redisReply *id;

		for (size_t k = 0; cluster_args[k]; k++)
			r->extra[k] = cluster_args[k];
		r->cluster_bus = true;
		if (redis_server_start(r, timeout_ms) < 0) {
			snprintf(c->err, sizeof(c->err), "node %zu: %s", i, r->err);
			goto fail;
		}
		id = cmd(c, i, "CLUSTER MYID");
		if (id == NULL || id->type != REDIS_REPLY_STRING) {
			snprintf(c->err, sizeof(c->err), "node %zu: CLUSTER MYID failed", i);
			if (id)
				freeReplyObject(id);
			goto fail;
		}
		snprintf(c->id[i], sizeof(c->id[i]), "%s", id->str);
		freeReplyObject(id);
	}
	for (size_t i = 1; i < c->n; i++) {
		redisReply *r = cmd(c, i, "CLUSTER MEET 127.0.0.1 %d", c->srv[0].port);

		if (r)
			freeReplyObject(r);
	}
	for (size_t m = 0; m < masters; m++) {
		unsigned lo = (unsigned)(16384 * m / masters);
		unsigned hi = (unsigned)(16384 * (m + 1) / masters) - 1;
		redisReply *r = cmd(c, m, "CLUSTER ADDSLOTSRANGE %u %u", lo, hi);

		if (r == NULL || r->type == REDIS_REPLY_ERROR) {
			snprintf(c->err, sizeof(c->err), "ADDSLOTSRANGE on %zu: %s", m,
				 r ? r->str : "no reply");
			if (r)
				freeReplyObject(r);
			goto fail;
		}
		freeReplyObject(r);
	}
	/* replicas once every node knows every master */
	for (size_t i = masters; i < c->n; i++) {
		size_t m = (i - masters) % masters;
		bool done = false;

		while (!done && test_now_ms() < end) {
			redisReply *r = cmd(c, i, "CLUSTER REPLICATE %s", c->id[m]);

			done = r && r->type == REDIS_REPLY_STATUS;
			if (r)
				freeReplyObject(r);
			if (!done)
				test_sleep_ms(50);
		}
		if (!done) {
			snprintf(c->err, sizeof(c->err), "CLUSTER REPLICATE on %zu failed", i);
			goto fail;
		}
	}
	if (wait_ok(c, (int)(end - test_now_ms())) < 0)
		goto fail;
	for (size_t i = masters; i < c->n; i++) {
		while (!holds(c, i, "master_link_status:up", "INFO replication")) {
			if (test_now_ms() >= end) {
				snprintf(c->err, sizeof(c->err), "replica %zu not in sync", i);
				goto fail;
			}
			test_sleep_ms(50);
		}
	}
	return 0;
fail:
	redis_cluster_stop(c);
	return -1;
}

void redis_cluster_stop(struct redis_cluster *c)
{
	for (size_t i = 0; i < c->n; i++)
		redis_server_stop(&c->srv[i], 2000);
}

void redis_cluster_seeds(const struct redis_cluster *c, char *out, size_t outlen)
{
	size_t len = (size_t)snprintf(out, outlen, "[");

	for (size_t m = 0; m < c->masters && len < outlen; m++)
		len += (size_t)snprintf(out + len, outlen - len, "%s\"127.0.0.1:%d\"", m ? "," : "",
					c->srv[m].port);
	if (len < outlen)
		snprintf(out + len, outlen - len, "]");
}

/* A live node to ask. */
static int any_alive(const struct redis_cluster *c)
{
	for (size_t i = 0; i < c->n; i++)
		if (alive(c, i))
			return (int)i;
	return -1;
}

/* owner[slot] for every slot (-1: none), from one CLUSTER SLOTS. */
static void owners(struct redis_cluster *c, int *owner)
{
	int a = any_alive(c);
	redisReply *r = a < 0 ? NULL : cmd(c, (size_t)a, "CLUSTER SLOTS");

	for (unsigned s = 0; s < 16384; s++)
		owner[s] = -1;
	for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
		const redisReply *e = r->element[i];

		for (size_t k = 0; k < c->n; k++)
			if (c->srv[k].port == e->element[2]->element[1]->integer)
				for (long long s = e->element[0]->integer;
				     s <= e->element[1]->integer; s++)
					owner[s] = (int)k;
	}
	if (r)
		freeReplyObject(r);
}

int redis_cluster_owner(struct redis_cluster *c, unsigned slot)
{
	static int owner[16384];

	owners(c, owner);
	return owner[slot & 16383];
}

long redis_cluster_keyslot(struct redis_cluster *c, const char *key, size_t len)
{
	int a = any_alive(c);
	redisReply *r = a < 0 ? NULL : cmd(c, (size_t)a, "CLUSTER KEYSLOT %b", key, len);
	long slot = r && r->type == REDIS_REPLY_INTEGER ? (long)r->integer : -1;

	if (r)
		freeReplyObject(r);
	return slot;
}

/* One command on a kept connection; false on an error reply. */
static bool ok_cmd(redisContext *ctx, char *err, size_t errlen, const char *fmt, ...)
{
	redisReply *r;
	va_list ap;
	bool ok;

	va_start(ap, fmt);
	r = redisvCommand(ctx, fmt, ap);
	va_end(ap);
	ok = r && r->type != REDIS_REPLY_ERROR;
	if (!ok)
		snprintf(err, errlen, "%s: %s", fmt, r ? r->str : ctx->errstr);
	if (r)
		freeReplyObject(r);
	return ok;
}

int redis_cluster_migrate(struct redis_cluster *c, unsigned lo, unsigned hi, size_t dst,
			  void (*pump)(void *arg, int ms), void *arg)
{
	redisContext *ctx[REDIS_CLUSTER_MAX] = { NULL };
	int rc = -1;

	for (size_t i = 0; i < c->masters; i++)
		if (alive(c, i) && (ctx[i] = redis_server_connect(&c->srv[i])) == NULL)
			goto out;
	static int owner[16384];

	owners(c, owner);
	for (unsigned slot = lo; slot <= hi; slot++) {
		int src = owner[slot];

		if (src < 0 || (size_t)src == dst || ctx[src] == NULL)
			continue;
		if (!ok_cmd(ctx[dst], c->err, sizeof(c->err), "CLUSTER SETSLOT %u IMPORTING %s",
			    slot, c->id[src]) ||
		    !ok_cmd(ctx[src], c->err, sizeof(c->err), "CLUSTER SETSLOT %u MIGRATING %s",
			    slot, c->id[dst]))
			goto out;
		for (int round = 0;; round++) {
			redisReply *keys = redisCommand(ctx[src], "CLUSTER GETKEYSINSLOT %u %d", slot,
							pump && round == 0 ? 1 : 100);
			const char *argv[8 + 100];
			size_t lens[8 + 100];
			char port[16];
			int argc = 0;
			redisReply *mr;

			if (keys == NULL || keys->type != REDIS_REPLY_ARRAY) {
				snprintf(c->err, sizeof(c->err), "GETKEYSINSLOT failed");
				if (keys)
					freeReplyObject(keys);
				goto out;
			}
			if (keys->elements == 0) {
				freeReplyObject(keys);
				break;
			}
			if (pump && round < 2)
				pump(arg, 150);
			snprintf(port, sizeof(port), "%d", c->srv[dst].port);
			argv[argc++] = "MIGRATE";
			argv[argc++] = "127.0.0.1";
			argv[argc++] = port;
			argv[argc++] = "";
			argv[argc++] = "0";
			argv[argc++] = "5000";
			argv[argc++] = "KEYS";
			for (size_t k = 0; k < keys->elements; k++) {
				argv[argc] = keys->element[k]->str;
				lens[argc++] = keys->element[k]->len;
			}
			for (int k = 0; k < 7; k++)
				lens[k] = strlen(argv[k]);
			mr = redisCommandArgv(ctx[src], argc, argv, lens);
			freeReplyObject(keys);
			if (mr == NULL || mr->type == REDIS_REPLY_ERROR) {
				snprintf(c->err, sizeof(c->err), "MIGRATE: %s",
					 mr ? mr->str : "no reply");
				if (mr)
					freeReplyObject(mr);
				goto out;
			}
			freeReplyObject(mr);
		}
		/* the new owner first, then the old one, then the others */
		if (!ok_cmd(ctx[dst], c->err, sizeof(c->err), "CLUSTER SETSLOT %u NODE %s", slot,
			    c->id[dst]) ||
		    !ok_cmd(ctx[src], c->err, sizeof(c->err), "CLUSTER SETSLOT %u NODE %s", slot,
			    c->id[dst]))
			goto out;
		for (size_t i = 0; i < c->masters; i++)
			if (ctx[i] && i != dst && i != (size_t)src)
				ok_cmd(ctx[i], c->err, sizeof(c->err), "CLUSTER SETSLOT %u NODE %s",
				       slot, c->id[dst]);
	}
	rc = 0;
out:
	for (size_t i = 0; i < c->masters; i++)
		if (ctx[i])
			redisFree(ctx[i]);
	return rc;
}

int redis_cluster_kill(struct redis_cluster *c, size_t m)
{
	size_t rep = c->n;

	for (size_t i = c->masters; i < c->n; i++)
		if ((i - c->masters) % c->masters == m)
			rep = i;
	if (rep == c->n || redis_server_kill(&c->srv[m]) < 0) {
		snprintf(c->err, sizeof(c->err), "no replica of master %zu, or not running", m);
		return -1;
	}
	return (int)rep;
}

bool redis_cluster_promoted(struct redis_cluster *c, size_t replica)
{
	return holds(c, replica, "role:master", "INFO replication") && wait_ok(c, 0) == 0;
}

bool redis_cluster_in_sync(struct redis_cluster *c, size_t i)
{
	return holds(c, i, "master_link_status:up", "INFO replication") && wait_ok(c, 0) == 0;
}

int redis_cluster_kill_master(struct redis_cluster *c, size_t m, int timeout_ms)
{
	long long end = test_now_ms() + timeout_ms;
	int rep = redis_cluster_kill(c, m);

	while (rep >= 0 && !redis_cluster_promoted(c, (size_t)rep)) {
		if (test_now_ms() >= end) {
			snprintf(c->err, sizeof(c->err), "replica %d not promoted within %d ms", rep,
				 timeout_ms);
			return -1;
		}
		test_sleep_ms(50);
	}
	return rep;
}

int redis_cluster_restart(struct redis_cluster *c, size_t i, int timeout_ms)
{
	long long end = test_now_ms() + timeout_ms;

	if (redis_server_restart(&c->srv[i], timeout_ms) < 0) {
		snprintf(c->err, sizeof(c->err), "restart %zu: %s", i, c->srv[i].err);
		return -1;
	}
	while (!redis_cluster_in_sync(c, i)) {
		if (test_now_ms() >= end) {
			snprintf(c->err, sizeof(c->err), "server %zu not a replica in sync", i);
			return -1;
		}
		test_sleep_ms(50);
	}
	return 0;
}

long long redis_cluster_errorstat(struct redis_cluster *c, const char *name)
{
	char needle[64];
	long long sum = 0;

	snprintf(needle, sizeof(needle), "errorstat_%s:count=", name);
	for (size_t i = 0; i < c->n; i++) {
		redisReply *r = alive(c, i) ? cmd(c, i, "INFO errorstats") : NULL;
		const char *p = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, needle) : NULL;

		if (p)
			sum += atoll(p + strlen(needle));
		if (r)
			freeReplyObject(r);
	}
	return sum;
}

long long redis_cluster_cmdstat(struct redis_cluster *c, const char *name)
{
	char needle[64];
	long long sum = 0;

	snprintf(needle, sizeof(needle), "cmdstat_%s:calls=", name);
	for (size_t i = 0; i < c->n; i++) {
		redisReply *r = alive(c, i) ? cmd(c, i, "INFO commandstats") : NULL;
		const char *p = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, needle) : NULL;

		if (p)
			sum += atoll(p + strlen(needle));
		if (r)
			freeReplyObject(r);
	}
	return sum;
}

double redis_cluster_hget(struct redis_cluster *c, const char *hash, size_t hlen,
			  const char *field, size_t flen)
{
	long slot = redis_cluster_keyslot(c, hash, hlen);
	int o = slot < 0 ? -1 : redis_cluster_owner(c, (unsigned)slot);

	return o < 0 ? NAN : redis_server_hget(&c->srv[o], hash, hlen, field, flen);
}
