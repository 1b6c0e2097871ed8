/*
 * redis_sentinel.c - Redis Sentinel for the Redis strategy
 * (strategies/redis_int.h).
 *
 * strategy_opts.sentinel = { "master": NAME, "nodes": ["HOST:PORT", ...],
 * "quorum": Q, "password": P, "username": U }. The master's address comes
 * from the sentinels: every one is asked SENTINEL get-master-addr-by-name
 * (the probe, redis_conn.c, in turn, each on a short-lived connection),
 * and an address is taken only when at least Q of them named it and no
 * other address was named as often (Q defaults to a majority of the
 * nodes). One sentinel alone, rogue or stale, cannot name the master
 * (the first to answer did, and the master's password went to whatever
 * address it named). A round without such an address leaves the
 * data connection as it is, says why (why_down) and starts again after the
 * backoff. The data connection to the address checks with ROLE that it is
 * a master before it is ready.
 *
 * Every sentinel also gets a watch connection subscribed to
 * +switch-master: a failover announced for NAME, by any one sentinel, has
 * every sentinel asked again at once, and the data connection moves when
 * the quorum names the new master. The sentinels are asked again too
 * whenever the data connection goes down or finds a replica (ROLE, or a
 * READONLY reply).
 *
 * The sentinels get their own credentials (P, U: AUTH on the probe's and
 * the watch connections); the master's password and db go to the master
 * only.
 *
 * What a failover costs: the calls in flight on the old master fail (the
 * connection is closed, or they time out), and the caller resends the
 * unconfirmed counters with the same push token once the new master is
 * ready; a call the old master applied and replicated before the switch is
 * not applied twice (its token key came along), one it applied but did
 * not replicate is lost with it, unless wait_replicas makes such a call
 * count as unconfirmed (redis_call.c: WAIT) so that its resend applies it. The
 * data connection moves once the quorum names the new master, not at the
 * first +switch-master: what the old master takes in between is such a
 * call too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strategies/redis_int.h"

struct redis_sentinel {
	struct redis_probe probe;       /* SENTINEL get-master-addr-by-name */
	/* The current round's answers: each address named, and by how many */
	struct redis_addr named[REDIS_SEEDS_MAX];
	unsigned votes[REDIS_SEEDS_MAX];
	size_t nnamed;
	char why[STRATEGY_ERR_MAX];     /* why the last round named no master */
};

/* The master is at a: connect there (now, if it moved). */
static void redis_sentinel_master(struct redis_strategy *s, const struct redis_addr *a)
{
	struct redis_conn *m = s->main;

	if (m == NULL) {
		s->main = redis_conn_new(s, REDIS_CONN_DATA, a);
		if (s->main)
			redis_conn_open(s->main);
		return;
	}
	if (!redis_addr_eq(&m->addr, a)) {
		m->addr = *a;
		redis_conn_drop_later(m, "the master moved", true);
	}
	/* The same address, connection down: it retries on its own backoff.
	 * Reopening it at once here (every down connection asks the
	 * sentinels, who name it again) made a tight loop while the master
	 * was down: thousands of connections a second (found in review). */
}

/* An IP literal and a decimal port, as sentinels send them. */
static int redis_sentinel_addr(struct redis_addr *a, const char *ip, size_t iplen,
			       const char *port, size_t portlen)
{
	unsigned char bin[sizeof(struct in6_addr)];
	long v = 0;

	if (iplen == 0 || iplen >= sizeof(a->host) || portlen == 0 || portlen > 5)
		return -1;
	memcpy(a->host, ip, iplen);
	a->host[iplen] = '\0';
	if (inet_pton(AF_INET, a->host, bin) != 1 && inet_pton(AF_INET6, a->host, bin) != 1)
		return -1;
	for (size_t i = 0; i < portlen; i++) {
		if (port[i] < '0' || port[i] > '9')
			return -1;
		v = v * 10 + (port[i] - '0');
	}
	if (v < 1 || v > 65535)
		return -1;
	a->port = (int)v;
	return 0;
}

/* SENTINEL get-master-addr-by-name: [ip, port], or nil (unknown name):
 * a vote for the address. */
static int redis_sentinel_answer(struct redis_probe *p, const struct redis_addr *from,
				 const redisReply *r)
{
	struct redis_sentinel *sn = p->s->sentinel;
	struct redis_addr a;
	size_t i;

	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
	    r->element[0]->type != REDIS_REPLY_STRING ||
	    r->element[1]->type != REDIS_REPLY_STRING ||
	    redis_sentinel_addr(&a, r->element[0]->str, r->element[0]->len, r->element[1]->str,
				r->element[1]->len) < 0) {
		redis_seterr(p->last_err, "sentinel %s:%d: %s for master \"%s\"",
			 from->host, from->port, r->type == REDIS_REPLY_NIL ? "no address" :
			 "no usable address", p->s->o.master);
		return -1;
	}
	for (i = 0; i < sn->nnamed && !redis_addr_eq(&sn->named[i], &a); i++)
		;
	if (i == sn->nnamed) {          /* at most one address per sentinel */
		sn->named[i] = a;
		sn->votes[i] = 0;
		sn->nnamed++;
	}
	sn->votes[i]++;
	return 0;
}

/* Every sentinel was asked: the address named by the quorum, and more
 * often than any other, is the master's; else why not, in sn->why. */
static int redis_sentinel_decide(struct redis_probe *p)
{
	struct redis_strategy *s = p->s;
	struct redis_sentinel *sn = s->sentinel;
	size_t best = 0, off;
	bool tie = false;

	for (size_t i = 1; i < sn->nnamed; i++) {
		if (sn->votes[i] > sn->votes[best]) {
			best = i;
			tie = false;
		} else if (sn->votes[i] == sn->votes[best]) {
			tie = true;
		}
	}
	if (sn->nnamed > 0 && sn->votes[best] >= s->o.quorum && !tie) {
		sn->why[0] = '\0';
		redis_sentinel_master(s, &sn->named[best]);
		return 0;
	}
	if (sn->nnamed == 0) {
		redis_seterr(sn->why, "no sentinel named a master (%s)", p->last_err);
	} else if (sn->nnamed == 1) {
		redis_seterr(sn->why, "%s:%d named by %u of %zu sentinels, quorum %u (%s)",
			     sn->named[0].host, sn->named[0].port, sn->votes[0], s->o.nseeds,
			     s->o.quorum, p->last_err);
	} else {
		off = (size_t)snprintf(sn->why, sizeof(sn->why), "sentinels disagree (quorum %u):",
				       s->o.quorum);
		for (size_t i = 0; i < sn->nnamed && off < sizeof(sn->why); i++)
			off += (size_t)snprintf(sn->why + off, sizeof(sn->why) - off,
						"%s %s:%d by %u", i ? "," : "", sn->named[i].host,
						sn->named[i].port, sn->votes[i]);
	}
	return -1;
}

/* A new round: every sentinel, no answer yet. */
static void redis_sentinel_candidates(struct redis_probe *p)
{
	struct redis_sentinel *sn = p->s->sentinel;

	p->ncand = p->s->o.nseeds;
	memcpy(p->cand, p->s->o.seeds, p->ncand * sizeof(p->cand[0]));
	sn->nnamed = 0;
	p->last_err[0] = '\0';
}

/* +switch-master: "<name> <old ip> <old port> <new ip> <new port>", from
 * one sentinel: not taken as it is, but every sentinel asked again. */
static void redis_sentinel_message(struct redis_strategy *s, struct redis_conn *c,
				   const char *msg, size_t len)
{
	size_t n = strlen(s->o.master);

	(void)c;
	if (len > n && memcmp(msg, s->o.master, n) == 0 && msg[n] == ' ')
		redis_probe_start(&s->sentinel->probe);
}

static int redis_sentinel_start(struct redis_strategy *s, char *err, size_t errlen)
{
	struct redis_sentinel *sn = calloc(1, sizeof(*sn));

	if (sn == NULL) {
		snprintf(err, errlen, "redis: out of memory");
		return -1;
	}
	s->sentinel = sn;
	redis_probe_init(&sn->probe, s);
	sn->probe.argv[0] = "SENTINEL";
	sn->probe.argv[1] = "get-master-addr-by-name";
	sn->probe.argv[2] = s->o.master;
	sn->probe.argc = 3;
	sn->probe.candidates = redis_sentinel_candidates;
	sn->probe.answer = redis_sentinel_answer;
	sn->probe.decide = redis_sentinel_decide;
	sn->probe.auth_user = s->o.sentinel_username;
	sn->probe.auth_user_len = s->o.sentinel_username_len;
	sn->probe.auth_pass = s->o.sentinel_password;
	sn->probe.auth_pass_len = s->o.sentinel_password_len;
	for (size_t i = 0; i < s->o.nseeds; i++) {
		struct redis_conn *w = redis_conn_new(s, REDIS_CONN_WATCH, &s->o.seeds[i]);

		if (w == NULL) {
			snprintf(err, errlen, "redis: out of memory");
			return -1;
		}
		redis_conn_open(w);
	}
	redis_probe_start(&sn->probe);
	return 0;
}

static void redis_sentinel_free(struct redis_strategy *s)
{
	if (s->sentinel == NULL)
		return;
	redis_probe_stop(&s->sentinel->probe);
	free(s->sentinel);
	s->sentinel = NULL;
}

static bool redis_sentinel_connecting(const struct redis_strategy *s)
{
	return redis_probe_attempting(&s->sentinel->probe) ||
	       (s->main && s->main->state == REDIS_ST_CONNECTING);
}

static const char *redis_sentinel_why_down(const struct redis_strategy *s)
{
	const struct redis_sentinel *sn = s->sentinel;

	if (s->main && s->main->last_err[0])
		return s->main->last_err;
	if (sn->why[0])
		return sn->why;
	return sn->probe.last_err[0] ? sn->probe.last_err : "no master yet";
}

static void redis_sentinel_conn_down(struct redis_strategy *s, struct redis_conn *c,
				     const char *why)
{
	(void)why;
	if (c == s->main)
		redis_probe_start(&s->sentinel->probe);
}

/* READONLY: the server we write to is a replica now (a failover we have
 * not heard of yet). The call fails; the sentinels are asked again. */
static bool redis_sentinel_redirect(struct redis_call *c, struct redis_conn *cn,
				    const redisReply *r)
{
	if (r->len >= 8 && memcmp(r->str, "READONLY", 8) == 0) {
		redis_conn_drop_later(cn, "the server is a replica now (READONLY)", false);
		redis_probe_start(&c->op->s->sentinel->probe);
	}
	return false;
}

const struct redis_mode_ops redis_sentinel_mode = {
	.name = "sentinel",
	.start = redis_sentinel_start,
	.free = redis_sentinel_free,
	.route = redis_route_main,
	.ready = redis_main_ready,
	.connecting = redis_sentinel_connecting,
	.conn_down = redis_sentinel_conn_down,
	.redirect = redis_sentinel_redirect,
	.message = redis_sentinel_message,
	.why_down = redis_sentinel_why_down,
};
