/*
 * redis_cluster.c - Redis Cluster for the Redis strategy (strategies/redis_int.h).
 *
 * strategy_opts.cluster_nodes lists seeds. The slot map comes from
 * CLUSTER SLOTS, asked of the known masters and then the seeds in turn
 * (the probe, redis_conn.c); each master gets one data connection (the
 * handshake of redis_conn.c: AUTH, SCRIPT LOADs) and every call goes to
 * the master owning its keys' slot. The key layout puts every key of a
 * call under one hash tag (redis_resp.c), so one script call is one slot:
 *
 *   slot = CRC16(tag) mod 16384, tag = the bytes between the first '{'
 *          and the next '}' when not empty, else the whole key
 *
 * Redirections, per call:
 *   MOVED <slot> <ip>:<port>  the slot lives there now: the map says so at
 *                             once, a refresh of the whole map is asked
 *                             for, and the call goes there;
 *   ASK <slot> <ip>:<port>    the slot is being migrated and the call's
 *                             keys are (or will be) there: the call goes
 *                             there once, behind ASKING; the map stays;
 *   TRYAGAIN                  a multi-key call while its slot is split
 *                             between two nodes: the call goes again after
 *                             REDIS_TRYAGAIN_MS, for up to timeout_ms;
 *   CLUSTERDOWN               the call fails; the map is refreshed.
 * A call follows at most REDIS_REDIRECTS_MAX redirections. A connection
 * that goes down asks for a refresh too (its replica may have taken its
 * slots); a master that left the map is closed once its calls are done.
 *
 * Retries are exact: a call carries its push token's key (same slot), so
 * a call sent twice (a redirection after a timeout, a resend by the sync
 * loop) adds its diffs once.
 *
 * ready() while the map is known and one master is connected: a call for
 * a slot whose master is down fails at once, alone ("not connected (...)"),
 * and the caller keeps its diffs for the next push.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strategies/redis_int.h"

struct redis_cluster {
	struct redis_probe probe;                   /* CLUSTER SLOTS */
	struct redis_conn *node[REDIS_MASTERS_MAX]; /* masters of the map */
	uint8_t owner[REDIS_SLOTS];                 /* node index + 1, 0 = none */
	bool have_map;
};

/*
 * CLUSTER SLOTS:
 *   *<ranges>
 *     *<3 + replicas>  :<first slot>  :<last slot>
 *                      *<n> $<ip> :<port> $<node id> ...    the master
 *                      *<n> ...                              its replicas
 * An empty ip means "the node you asked" (it does not know its own).
 *
 * The work is bounded whatever the node sends: a slot has one master, so
 * more than REDIS_SLOTS ranges, or a range naming a slot an earlier one
 * named, is refused; each slot is marked once at most, and a reply costs
 * O(REDIS_SLOTS + ranges x masters) steps (it cost ranges x 16,384: a
 * reply of many full ranges held the loop for seconds).
 */
int redis_cluster_parse_slots(const redisReply *r, const struct redis_addr *from,
			      struct redis_addr *addrs, size_t *n, uint8_t *owner, char *err,
			      size_t errlen)
{
	size_t served = 0, k = 0;

	*n = 0;
	memset(owner, 0, REDIS_SLOTS);
	if (r->type != REDIS_REPLY_ARRAY) {
		snprintf(err, errlen, "CLUSTER SLOTS: %s reply, expected an array",
			 redis_reply_type_name(r->type));
		return -1;
	}
	if (r->elements > REDIS_SLOTS) {
		snprintf(err, errlen, "CLUSTER SLOTS: %zu ranges, more than the %d slots",
			 r->elements, REDIS_SLOTS);
		return -1;
	}
	for (size_t i = 0; i < r->elements; i++) {
		const redisReply *e = r->element[i], *m;
		struct redis_addr a;
		unsigned char bin[sizeof(struct in6_addr)];

		if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
		    e->element[0]->type != REDIS_REPLY_INTEGER ||
		    e->element[1]->type != REDIS_REPLY_INTEGER ||
		    e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2 ||
		    e->element[2]->element[0]->type != REDIS_REPLY_STRING ||
		    e->element[2]->element[1]->type != REDIS_REPLY_INTEGER) {
			snprintf(err, errlen, "CLUSTER SLOTS: range %zu is not [first, last, "
				 "[ip, port, ...], ...]", i);
			return -1;
		}
		m = e->element[2];
		if (e->element[0]->integer < 0 || e->element[1]->integer >= REDIS_SLOTS ||
		    e->element[0]->integer > e->element[1]->integer || m->element[1]->integer < 1 ||
		    m->element[1]->integer > 65535) {
			snprintf(err, errlen, "CLUSTER SLOTS: range %zu: slots %lld-%lld, port %lld",
				 i, e->element[0]->integer, e->element[1]->integer,
				 m->element[1]->integer);
			return -1;
		}
		if (m->element[0]->len == 0) {
			a.host[0] = '\0';
			snprintf(a.host, sizeof(a.host), "%s", from->host);
		} else if (m->element[0]->len >= sizeof(a.host) ||
			   (inet_pton(AF_INET, m->element[0]->str, bin) != 1 &&
			    inet_pton(AF_INET6, m->element[0]->str, bin) != 1)) {
			snprintf(err, errlen, "CLUSTER SLOTS: master \"%.64s\" is not an IP "
				 "address (names are not resolved)", m->element[0]->str);
			return -1;
		} else {
			memcpy(a.host, m->element[0]->str, m->element[0]->len + 1);
		}
		a.port = (int)m->element[1]->integer;
		/* ranges of one master usually follow each other: the last one
		 * first */
		if (k == *n || !redis_addr_eq(&addrs[k], &a))
			for (k = 0; k < *n && !redis_addr_eq(&addrs[k], &a); k++)
				;
		if (k == *n) {
			if (*n == REDIS_MASTERS_MAX) {
				snprintf(err, errlen, "CLUSTER SLOTS: more than %d masters",
					 REDIS_MASTERS_MAX);
				return -1;
			}
			addrs[(*n)++] = a;
		}
		for (long long sl = e->element[0]->integer; sl <= e->element[1]->integer; sl++) {
			if (owner[sl] != 0) {
				snprintf(err, errlen, "CLUSTER SLOTS: range %zu: slot %lld is in "
					 "an earlier range too", i, sl);
				return -1;
			}
			owner[sl] = (uint8_t)(k + 1);
			served++;
		}
	}
	if (served == 0) {
		snprintf(err, errlen, "CLUSTER SLOTS: no slot is served");
		return -1;
	}
	return 0;
}

/* The index of the master at a in the map, or -1. */
static int redis_cluster_find(const struct redis_cluster *cl, const struct redis_addr *a)
{
	for (int i = 0; i < REDIS_MASTERS_MAX; i++)
		if (cl->node[i] && redis_addr_eq(&cl->node[i]->addr, a))
			return i;
	return -1;
}

/* The index of the master at a, connected to from now on if new; -1 when
 * the map is full or out of memory. */
static int redis_cluster_node(struct redis_strategy *s, const struct redis_addr *a)
{
	struct redis_cluster *cl = s->cluster;
	int i = redis_cluster_find(cl, a);

	if (i >= 0)
		return i;
	for (i = 0; i < REDIS_MASTERS_MAX && cl->node[i]; i++)
		;
	if (i == REDIS_MASTERS_MAX)
		return -1;
	cl->node[i] = redis_conn_new(s, REDIS_CONN_DATA, a);
	if (cl->node[i] == NULL)
		return -1;
	redis_conn_open(cl->node[i]);
	return i;
}

/* A master that left the map: closed and freed once its calls are done
 * (at the kick). */
static void redis_cluster_retire(struct redis_strategy *s, int i)
{
	struct redis_conn *c = s->cluster->node[i];

	s->cluster->node[i] = NULL;
	c->retired = true;
	ev_timer_stop(s->loop, &c->retry);
	store_kick(&s->core);
}

static int redis_cluster_answer(struct redis_probe *p, const struct redis_addr *from,
				const redisReply *r)
{
	struct redis_strategy *s = p->s;
	struct redis_cluster *cl = s->cluster;
	struct redis_addr addrs[REDIS_MASTERS_MAX];
	uint8_t owner[REDIS_SLOTS], map[REDIS_MASTERS_MAX];
	bool keep[REDIS_MASTERS_MAX] = { false };
	size_t n;

	if (redis_cluster_parse_slots(r, from, addrs, &n, owner, p->last_err,
				      sizeof(p->last_err)) < 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		int j = redis_cluster_node(s, &addrs[i]);

		map[i] = j < 0 ? 0 : (uint8_t)(j + 1);
		if (j >= 0)
			keep[j] = true;
	}
	for (int j = 0; j < REDIS_MASTERS_MAX; j++)
		if (cl->node[j] && !keep[j])
			redis_cluster_retire(s, j);
	for (size_t sl = 0; sl < REDIS_SLOTS; sl++)
		cl->owner[sl] = owner[sl] ? map[owner[sl] - 1] : 0;
	cl->have_map = true;
	return 0;
}

/* The probe's candidates: the masters of the map, then the seeds. */
static void redis_cluster_candidates(struct redis_probe *p)
{
	const struct redis_strategy *s = p->s;
	const struct redis_cluster *cl = s->cluster;

	p->ncand = 0;
	for (int i = 0; i < REDIS_MASTERS_MAX; i++)
		if (cl->node[i] && cl->node[i]->state == REDIS_ST_READY)
			p->cand[p->ncand++] = cl->node[i]->addr;
	for (size_t i = 0; i < s->o.nseeds; i++) {
		size_t k;

		for (k = 0; k < p->ncand && !redis_addr_eq(&p->cand[k], &s->o.seeds[i]); k++)
			;
		if (k == p->ncand)
			p->cand[p->ncand++] = s->o.seeds[i];
	}
}

static int redis_cluster_start(struct redis_strategy *s, char *err, size_t errlen)
{
	struct redis_cluster *cl = calloc(1, sizeof(*cl));

	if (cl == NULL) {
		snprintf(err, errlen, "redis: out of memory");
		return -1;
	}
	s->cluster = cl;
	redis_probe_init(&cl->probe, s);
	cl->probe.auth_pass = s->o.password;
	cl->probe.auth_pass_len = s->o.password_len;
	cl->probe.argv[0] = "CLUSTER";
	cl->probe.argv[1] = "SLOTS";
	cl->probe.argc = 2;
	cl->probe.candidates = redis_cluster_candidates;
	cl->probe.answer = redis_cluster_answer;
	redis_probe_start(&cl->probe);
	return 0;
}

static void redis_cluster_free(struct redis_strategy *s)
{
	if (s->cluster == NULL)
		return;
	redis_probe_stop(&s->cluster->probe);
	free(s->cluster);
	s->cluster = NULL;
}

static struct redis_conn *redis_cluster_route(struct redis_strategy *s, uint16_t slot)
{
	uint8_t i = s->cluster->owner[slot & (REDIS_SLOTS - 1)];

	return i ? s->cluster->node[i - 1] : NULL;
}

static bool redis_cluster_any(const struct redis_strategy *s, enum redis_state st)
{
	for (int i = 0; i < REDIS_MASTERS_MAX; i++)
		if (s->cluster->node[i] && s->cluster->node[i]->state == st)
			return true;
	return false;
}

static bool redis_cluster_ready(const struct redis_strategy *s)
{
	return s->cluster->have_map && redis_cluster_any(s, REDIS_ST_READY);
}

static bool redis_cluster_connecting(const struct redis_strategy *s)
{
	/* Not during the backoff between failed rounds: an attempt must end
	 * within timeout_ms (strategy.h), and the callers wait for it. */
	return redis_probe_attempting(&s->cluster->probe) ||
	       redis_cluster_any(s, REDIS_ST_CONNECTING);
}

static const char *redis_cluster_why_down(const struct redis_strategy *s)
{
	const struct redis_cluster *cl = s->cluster;

	if (!cl->have_map)
		return cl->probe.last_err[0] ? cl->probe.last_err : "no slot map yet";
	for (int i = 0; i < REDIS_MASTERS_MAX; i++)
		if (cl->node[i] && cl->node[i]->last_err[0])
			return cl->node[i]->last_err;
	return "no master serves the slot";
}

static void redis_cluster_conn_down(struct redis_strategy *s, struct redis_conn *c,
				    const char *why)
{
	(void)why;
	if (!c->retired)
		redis_probe_start(&s->cluster->probe);
}

/* Is the error reply r the word w (followed by a space or the end)? */
static bool redis_error_is(const redisReply *r, const char *w)
{
	size_t n = strlen(w);

	return r->len >= n && memcmp(r->str, w, n) == 0 && (r->len == n || r->str[n] == ' ');
}

/* "MOVED <slot> <ip>:<port>" or "ASK ...", after the word: the slot and
 * the address (an empty ip is the node that answered). */
static int redis_cluster_parse_redirect(const char *p, const char *end,
					const struct redis_conn *cn, unsigned *slot,
					struct redis_addr *a)
{
	unsigned v = 0;
	const char *d = p;

	while (p < end && *p >= '0' && *p <= '9' && v < REDIS_SLOTS)
		v = v * 10 + (unsigned)(*p++ - '0');
	if (p == d || p >= end || *p != ' ' || v >= REDIS_SLOTS)
		return -1;
	p++;
	*slot = v;
	if (p < end && *p == ':') {
		char buf[INET6_ADDRSTRLEN + 8];
		int len = snprintf(buf, sizeof(buf), "[%s]%.*s", cn->addr.host, (int)(end - p), p);

		return len > 0 && (size_t)len < sizeof(buf) ?
			redis_addr_parse(a, buf, (size_t)len, false) : -1;
	}
	return redis_addr_parse(a, p, (size_t)(end - p), true);
}

static bool redis_cluster_redirect(struct redis_call *c, struct redis_conn *cn,
				   const redisReply *r)
{
	struct redis_strategy *s = c->op->s;
	struct redis_cluster *cl = s->cluster;
	bool moved = redis_error_is(r, "MOVED"), ask = redis_error_is(r, "ASK");

	if (moved || ask) {
		struct redis_addr a;
		unsigned slot;
		int j;

		if (c->redirects >= REDIS_REDIRECTS_MAX ||
		    redis_cluster_parse_redirect(r->str + (moved ? 6 : 4), r->str + r->len, cn,
						 &slot, &a) < 0)
			return false;
		j = redis_cluster_node(s, &a);
		if (j < 0)
			return false;
		if (moved) {
			cl->owner[slot] = (uint8_t)(j + 1);
			redis_probe_start(&cl->probe);
		}
		c->redirects++;
		c->resent = false;
		c->asking = ask;
		if (!redis_conn_usable(cl->node[j]))
			redis_call_fail(c, "not connected (%s)", cl->node[j]->last_err);
		else if (redis_call_send(c, cl->node[j]) == 0)
			redis_op_send_waits(c->op);
		return true;
	}
	if (redis_error_is(r, "TRYAGAIN")) {
		ev_tstamp now = ev_now(s->loop);

		if (c->tryagain_since == 0)
			c->tryagain_since = now;
		else if (now - c->tryagain_since > s->o.timeout_ms / 1000.0)
			return false;
		redis_call_wait(c);
		return true;
	}
	if (redis_error_is(r, "CLUSTERDOWN"))
		redis_probe_start(&cl->probe);
	return false;
}

const struct redis_mode_ops redis_cluster_mode = {
	.name = "cluster",
	.start = redis_cluster_start,
	.free = redis_cluster_free,
	.route = redis_cluster_route,
	.ready = redis_cluster_ready,
	.connecting = redis_cluster_connecting,
	.conn_down = redis_cluster_conn_down,
	.redirect = redis_cluster_redirect,
	.why_down = redis_cluster_why_down,
};
