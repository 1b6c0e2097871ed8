/*
 * redis_conn.c - connections of the Redis strategy (strategies/redis_int.h).
 *
 * A connection (struct redis_conn) is one server reached through hiredis's
 * async API on the strategy's loop. A data connection pipelines its
 * handshake behind the non-blocking connect - AUTH, SELECT, ROLE (sentinel
 * mode: the server must say it is a master), the six SCRIPT LOADs - and
 * is READY once all of them answered within timeout_ms; a watch connection
 * (sentinel) sends AUTH with the sentinels' own credentials (if any), then
 * SUBSCRIBE +switch-master, and is READY at its confirmation, its messages
 * going to the mode; the master's password goes to data connections only.
 * After any failure the next attempt waits REDIS_BACKOFF_MIN_MS, doubling
 * to REDIS_BACKOFF_MAX_MS, back to the minimum once an attempt succeeds;
 * the mode hears of every failure (conn_down), which is how a cluster
 * refreshes its map and a sentinel setup asks for its master again.
 *
 * A connection is freed, or closed, only outside its own hiredis callbacks
 * (redisAsyncFree() runs every pending reply callback with NULL at once,
 * so after it returns hiredis holds no pointer to a call); from inside one
 * it is dropped at the kick (redis_conn_drop_later).
 *
 * The probe (struct redis_probe) asks one question of a list of servers
 * in turn, each on a short-lived connection with a timeout_ms deadline:
 * CLUSTER SLOTS of the cluster's nodes (the first usable answer wins),
 * SENTINEL get-master-addr-by-name of the sentinels (every one is asked,
 * and the mode's decide() rules on the answers: a quorum). A round that
 * gets no accepted answer waits (backoff) and starts again.
 */
#include <hiredis/adapters/libev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strategies/container.h"
#include "strategies/redis_int.h"

static void redis_conn_schedule_retry(struct redis_conn *c)
{
	if (c->s->destroying || c->retired)
		return;
	ev_timer_stop(c->s->loop, &c->retry);
	ev_timer_set(&c->retry, store_backoff_take(&c->backoff), 0.);
	ev_timer_start(c->s->loop, &c->retry);
}

static void redis_conn_down(struct redis_conn *c, const char *why)
{
	redis_seterr(c->last_err, "%s:%d: %s", c->addr.host, c->addr.port, why);
	if (!c->s->destroying && c->s->mode->conn_down)
		c->s->mode->conn_down(c->s, c, c->last_err);
}

/* Forgets the connection hiredis is about to free by itself. */
static void redis_conn_lost(struct redis_conn *c, const char *why)
{
	c->ac = NULL;
	c->state = REDIS_ST_DOWN;
	ev_timer_stop(c->s->loop, &c->handshake);
	redis_conn_schedule_retry(c);
	redis_conn_down(c, why);
}

void redis_conn_close(struct redis_conn *c, const char *why, bool retry)
{
	redisAsyncContext *ac = c->ac;

	ev_timer_stop(c->s->loop, &c->handshake);
	c->state = REDIS_ST_DOWN;
	c->drop_pending = false;
	if (ac == NULL)
		return;
	c->ac = NULL;
	snprintf(c->close_reason, sizeof(c->close_reason), "%s", why);
	ac->data = NULL;        /* its disconnect callback is no news to us */
	redisAsyncFree(ac);
	if (retry)
		redis_conn_schedule_retry(c);
	redis_conn_down(c, why);
}

void redis_conn_drop_later(struct redis_conn *c, const char *why, bool reopen)
{
	c->reopen_now |= reopen;
	if (c->drop_pending && c->drop_gen == c->gen)
		return;
	c->drop_pending = true;
	c->drop_gen = c->gen;
	snprintf(c->drop_reason, sizeof(c->drop_reason), "%s", why);
	store_kick(&c->s->core);
}

static void redis_conn_on_connect(const redisAsyncContext *ac, int status)
{
	struct redis_conn *c = ac->data;
	char why[STRATEGY_ERR_MAX];

	if (c == NULL || ac != c->ac || status == REDIS_OK)
		return;     /* connected: the handshake replies decide */
	/* hiredis frees ac after this returns (and runs the handshake
	 * callbacks with NULL, which see ac != c->ac). */
	snprintf(why, sizeof(why), "connect failed: %s", ac->errstr ? ac->errstr : "?");
	redis_conn_lost(c, why);
}

static void redis_conn_on_disconnect(const redisAsyncContext *ac, int status)
{
	struct redis_conn *c = ac->data;
	char why[STRATEGY_ERR_MAX];

	(void)status;
	if (c == NULL || ac != c->ac)
		return;
	snprintf(why, sizeof(why), "disconnected: %s",
		 ac->err && ac->errstr ? ac->errstr : "connection closed");
	redis_conn_lost(c, why);
}

/* One handshake step answered as it should: READY after the last. */
static void redis_conn_step_done(struct redis_conn *c)
{
	if (--c->handshake_left > 0)
		return;
	c->state = REDIS_ST_READY;
	store_backoff_reset(&c->backoff);
	c->last_err[0] = '\0';
	ev_timer_stop(c->s->loop, &c->handshake);
}

/* A handshake reply: NULL when stale (or the close path has it), else
 * the reply, checked to be no error. */
static const redisReply *redis_conn_step(redisAsyncContext *ac, void *r, struct redis_conn *c)
{
	const redisReply *reply = r;
	char why[STRATEGY_ERR_MAX];

	if (ac != c->ac || reply == NULL)
		return NULL;
	if (reply->type == REDIS_REPLY_ERROR) {
		snprintf(why, sizeof(why), "handshake: %.*s",
			 (int)(reply->len > 100 ? 100 : reply->len), reply->str);
		redis_conn_drop_later(c, why, false);
		return NULL;
	}
	return reply;
}

static void redis_conn_bad_step(struct redis_conn *c, const char *what, const redisReply *r)
{
	char why[STRATEGY_ERR_MAX];

	snprintf(why, sizeof(why), "handshake: %s: unexpected %s reply", what,
		 redis_reply_type_name(r->type));
	redis_conn_drop_later(c, why, false);
}

void redis_auth(redisAsyncContext *ac, redisCallbackFn *cb, void *privdata, const char *user,
		size_t user_len, const char *pass, size_t pass_len)
{
	if (user)
		redisAsyncCommand(ac, cb, privdata, "AUTH %b %b", user, user_len, pass, pass_len);
	else
		redisAsyncCommand(ac, cb, privdata, "AUTH %b", pass, pass_len);
}

/* AUTH, SELECT */
static void redis_conn_on_status(redisAsyncContext *ac, void *r, void *privdata)
{
	struct redis_conn *c = privdata;
	const redisReply *reply = redis_conn_step(ac, r, c);

	if (reply == NULL)
		return;
	if (reply->type != REDIS_REPLY_STATUS)
		redis_conn_bad_step(c, "AUTH or SELECT", reply);
	else
		redis_conn_step_done(c);
}

/* ROLE (sentinel mode): the server we were sent to must be the master. */
static void redis_conn_on_role(redisAsyncContext *ac, void *r, void *privdata)
{
	struct redis_conn *c = privdata;
	const redisReply *reply = redis_conn_step(ac, r, c);
	char why[STRATEGY_ERR_MAX];

	if (reply == NULL)
		return;
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 1 ||
	    reply->element[0]->type != REDIS_REPLY_STRING) {
		redis_conn_bad_step(c, "ROLE", reply);
	} else if (strcmp(reply->element[0]->str, "master") != 0) {
		snprintf(why, sizeof(why), "not a master (ROLE says %.32s)",
			 reply->element[0]->str);
		redis_conn_drop_later(c, why, false);
	} else {
		redis_conn_step_done(c);
	}
}

static void redis_conn_on_sha(redisAsyncContext *ac, void *r, struct redis_conn *c, char *sha)
{
	const redisReply *reply = redis_conn_step(ac, r, c);

	if (reply == NULL)
		return;
	if (reply->type != REDIS_REPLY_STRING || reply->len != 40) {
		redis_conn_bad_step(c, "SCRIPT LOAD", reply);
		return;
	}
	memcpy(sha, reply->str, 40);
	sha[40] = '\0';
	redis_conn_step_done(c);
}

static void redis_conn_on_sha_push(redisAsyncContext *ac, void *r, void *privdata)
{
	struct redis_conn *c = privdata;

	redis_conn_on_sha(ac, r, c, c->s->sha);
}

static void redis_conn_on_sha_admit(redisAsyncContext *ac, void *r, void *privdata)
{
	struct redis_conn *c = privdata;

	redis_conn_on_sha(ac, r, c, c->s->sha_admit);
}

static void redis_conn_on_sha_gcra(redisAsyncContext *ac, void *r, void *privdata)
{
	struct redis_conn *c = privdata;

	redis_conn_on_sha(ac, r, c, c->s->sha_gcra);
}

static void redis_conn_on_sha_lease(redisAsyncContext *ac, void *r, void *privdata)
{
	struct redis_conn *c = privdata;

	redis_conn_on_sha(ac, r, c, c->s->sha_lease);
}

static void redis_conn_on_sha_nodes(redisAsyncContext *ac, void *r, void *privdata)
{
	struct redis_conn *c = privdata;

	redis_conn_on_sha(ac, r, c, c->s->sha_nodes);
}

static void redis_conn_on_sha_limits(redisAsyncContext *ac, void *r, void *privdata)
{
	struct redis_conn *c = privdata;

	redis_conn_on_sha(ac, r, c, c->s->sha_limits);
}

/*
 * SUBSCRIBE +switch-master (watch connections). hiredis calls this for
 * the confirmation and for every message, as an array:
 *   "subscribe", "+switch-master", <count>
 *   "message",   "+switch-master", "<name> <old ip> <old port> <new ip> <new port>"
 * and once more with NULL when the connection goes.
 */
static void redis_conn_on_message(redisAsyncContext *ac, void *r, void *privdata)
{
	struct redis_conn *c = privdata;
	const redisReply *reply = r;

	if (ac != c->ac || reply == NULL)
		return;
	if (reply->type == REDIS_REPLY_ERROR) {
		redis_conn_step(ac, r, c);
		return;
	}
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3 ||
	    reply->element[0]->type != REDIS_REPLY_STRING) {
		redis_conn_bad_step(c, "SUBSCRIBE", reply);
		return;
	}
	if (strcmp(reply->element[0]->str, "subscribe") == 0) {
		if (c->state == REDIS_ST_CONNECTING)
			redis_conn_step_done(c);
	} else if (strcmp(reply->element[0]->str, "message") == 0 &&
		   reply->element[2]->type == REDIS_REPLY_STRING && c->s->mode->message) {
		c->last_activity = ev_now(c->s->loop);
		c->s->mode->message(c->s, c, reply->element[2]->str, reply->element[2]->len);
	}
}

static void redis_conn_on_handshake_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct redis_conn *c = container_of(w, struct redis_conn, handshake);

	(void)loop;
	(void)revents;
	store_enter(&c->s->core);
	redis_conn_close(c, "connect timeout", true);
	store_leave(&c->s->core);
}

static void redis_conn_on_retry(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct redis_conn *c = container_of(w, struct redis_conn, retry);

	(void)loop;
	(void)revents;
	store_enter(&c->s->core);
	redis_conn_open(c);
	store_leave(&c->s->core);
}

/* Connects (TCP, or the unix socket of a single server). */
static redisAsyncContext *redis_conn_connect(const struct redis_strategy *s,
					     const struct redis_addr *a)
{
	if (s->o.mode == REDIS_MODE_SINGLE && s->o.socket[0])
		return redisAsyncConnectUnix(s->o.socket);
	return redisAsyncConnect(a->host, a->port);
}

/* Attaches ac to the loop with our callbacks; frees it on failure. */
static int redis_attach(struct ev_loop *loop, redisAsyncContext *ac, void *data,
			redisConnectCallback *on_connect, redisDisconnectCallback *on_disconnect)
{
	ac->data = data;
	if (redisLibevAttach(loop, ac) != REDIS_OK ||
	    redisAsyncSetConnectCallback(ac, on_connect) != REDIS_OK ||
	    redisAsyncSetDisconnectCallback(ac, on_disconnect) != REDIS_OK) {
		ac->data = NULL;
		redisAsyncFree(ac);
		return -1;
	}
	return 0;
}

void redis_conn_open(struct redis_conn *c)
{
	struct redis_strategy *s = c->s;
	redisAsyncContext *ac;

	if (c->ac != NULL || s->destroying || c->retired)
		return;
	ev_timer_stop(s->loop, &c->retry);
	ac = redis_conn_connect(s, &c->addr);
	if (ac == NULL || ac->err) {
		char why[STRATEGY_ERR_MAX];

		snprintf(why, sizeof(why), "connect failed: %s",
			 ac && ac->errstr ? ac->errstr : "out of memory");
		if (ac)
			redisAsyncFree(ac);
		redis_conn_schedule_retry(c);
		redis_conn_down(c, why);
		return;
	}
	if (redis_attach(s->loop, ac, c, redis_conn_on_connect, redis_conn_on_disconnect) < 0) {
		redis_conn_schedule_retry(c);
		redis_conn_down(c, "connect failed: cannot attach to the loop");
		return;
	}
	c->ac = ac;
	c->gen++;
	c->state = REDIS_ST_CONNECTING;
	c->handshake_left = 0;
	if (c->kind == REDIS_CONN_WATCH) {
		if (s->o.sentinel_password) {
			redis_auth(ac, redis_conn_on_status, c, s->o.sentinel_username,
				   s->o.sentinel_username_len, s->o.sentinel_password,
				   s->o.sentinel_password_len);
			c->handshake_left++;
		}
		redisAsyncCommand(ac, redis_conn_on_message, c, "SUBSCRIBE +switch-master");
		c->handshake_left++;
	} else {
		if (s->o.password) {
			redis_auth(ac, redis_conn_on_status, c, NULL, 0, s->o.password,
				   s->o.password_len);
			c->handshake_left++;
		}
		if (s->o.db) {
			redisAsyncCommand(ac, redis_conn_on_status, c, "SELECT %d", s->o.db);
			c->handshake_left++;
		}
		if (s->o.mode == REDIS_MODE_SENTINEL) {
			redisAsyncCommand(ac, redis_conn_on_role, c, "ROLE");
			c->handshake_left++;
		}
		redisAsyncCommand(ac, redis_conn_on_sha_push, c, "SCRIPT LOAD %s", redis_push_script);
		redisAsyncCommand(ac, redis_conn_on_sha_admit, c, "SCRIPT LOAD %s",
				  redis_admit_script);
		redisAsyncCommand(ac, redis_conn_on_sha_gcra, c, "SCRIPT LOAD %s",
				  redis_gcra_script);
		redisAsyncCommand(ac, redis_conn_on_sha_lease, c, "SCRIPT LOAD %s",
				  redis_lease_script);
		redisAsyncCommand(ac, redis_conn_on_sha_nodes, c, "SCRIPT LOAD %s",
				  redis_nodes_script);
		redisAsyncCommand(ac, redis_conn_on_sha_limits, c, "SCRIPT LOAD %s",
				  redis_limits_read_script);
		c->handshake_left += 6;
	}
	ev_timer_set(&c->handshake, s->o.timeout_ms / 1000.0, 0.);
	ev_timer_start(s->loop, &c->handshake);
}

struct redis_conn *redis_conn_new(struct redis_strategy *s, enum redis_conn_kind kind,
				  const struct redis_addr *addr)
{
	struct redis_conn *c = calloc(1, sizeof(*c));

	if (c == NULL)
		return NULL;
	c->s = s;
	c->kind = kind;
	c->addr = *addr;
	store_backoff_init(&c->backoff, REDIS_BACKOFF_MIN_MS / 1000.0,
			   REDIS_BACKOFF_MAX_MS / 1000.0);
	ev_timer_init(&c->retry, redis_conn_on_retry, 0., 0.);
	ev_timer_init(&c->handshake, redis_conn_on_handshake_timeout, 0., 0.);
	c->next = s->conns;
	s->conns = c;
	return c;
}

void redis_conn_free(struct redis_conn *c)
{
	struct redis_conn **pp;

	if (c->ac != NULL) {            /* never closed: a start that failed half way */
		redisAsyncContext *ac = c->ac;

		c->ac = NULL;
		ac->data = NULL;
		redisAsyncFree(ac);
	}
	ev_timer_stop(c->s->loop, &c->retry);
	ev_timer_stop(c->s->loop, &c->handshake);
	for (pp = &c->s->conns; *pp; pp = &(*pp)->next) {
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	}
	free(c);
}

void redis_conns_kick(struct redis_strategy *s)
{
	struct redis_conn *c = s->conns, *next;

	for (; c; c = next) {
		next = c->next;
		if (c->drop_pending) {
			bool reopen = c->reopen_now;

			c->drop_pending = false;
			c->reopen_now = false;
			if (c->ac != NULL && c->gen == c->drop_gen)
				redis_conn_close(c, c->drop_reason, !reopen);
			if (reopen) {
				store_backoff_reset(&c->backoff);
				redis_conn_open(c);
			}
		}
		if (c->retired && c->inflight == 0) {
			redis_conn_close(c, "no longer a master", false);
			redis_conn_free(c);
		}
	}
}

/* ===================================================================== */
/* Addresses                                                             */
/* ===================================================================== */

int redis_addr_parse(struct redis_addr *a, const char *str, size_t len, bool bare_v6)
{
	char host[INET6_ADDRSTRLEN + 2];
	unsigned char bin[sizeof(struct in6_addr)];
	const char *colon;
	size_t hlen;
	long port = 0;

	if (len == 0 || memchr(str, '\0', len))
		return -1;
	colon = NULL;
	for (size_t i = len; i-- > 0;) {
		if (str[i] == ':') {
			colon = str + i;
			break;
		}
	}
	if (colon == NULL || colon == str + len - 1 || (size_t)(str + len - colon - 1) > 5)
		return -1;
	for (const char *p = colon + 1; p < str + len; p++) {
		if (*p < '0' || *p > '9')
			return -1;
		port = port * 10 + (*p - '0');
	}
	if (port < 1 || port > 65535)
		return -1;
	hlen = (size_t)(colon - str);
	if (hlen >= 2 && str[0] == '[' && str[hlen - 1] == ']') {
		str++;
		hlen -= 2;
	} else if (memchr(str, ':', hlen) && !bare_v6) {
		return -1;      /* IPv6 needs brackets in options */
	}
	if (hlen == 0 || hlen >= sizeof(host))
		return -1;
	memcpy(host, str, hlen);
	host[hlen] = '\0';
	if (strcmp(host, "localhost") == 0)
		strcpy(host, "127.0.0.1");
	if (inet_pton(AF_INET, host, bin) != 1 && inet_pton(AF_INET6, host, bin) != 1)
		return -1;
	snprintf(a->host, sizeof(a->host), "%s", host);
	a->port = (int)port;
	return 0;
}

bool redis_addr_eq(const struct redis_addr *a, const struct redis_addr *b)
{
	return a->port == b->port && strcmp(a->host, b->host) == 0;
}

/* ===================================================================== */
/* The probe                                                             */
/* ===================================================================== */

static void redis_probe_attempt(struct redis_probe *p);

/* Ends the current attempt's connection. Inside its hiredis callback the
 * context is only disconnected (hiredis frees it after the callback). */
static void redis_probe_drop(struct redis_probe *p, bool in_callback)
{
	redisAsyncContext *ac = p->ac;

	if (ac == NULL)
		return;
	p->ac = NULL;
	ac->data = NULL;
	if (in_callback)
		redisAsyncDisconnect(ac);
	else
		redisAsyncFree(ac);
}

/* The round ends: accepted, or every candidate failed (then backoff). */
static void redis_probe_round_end(struct redis_probe *p, bool accepted)
{
	struct ev_loop *loop = p->s->loop;

	ev_timer_stop(loop, &p->timer);
	p->busy = false;
	if (accepted) {
		store_backoff_reset(&p->backoff);
		if (!p->again)
			return;
	}
	/* again, or after a failed round: a new round after the backoff */
	p->again = false;
	p->busy = true;
	p->waiting = !accepted;
	p->ncand = 0;
	ev_timer_set(&p->timer, store_backoff_take(&p->backoff), 0.);
	ev_timer_start(loop, &p->timer);
}

/* The candidate is done with (failed: why in last_err; or, with decide,
 * answered): the next one, now; after the last, decide() rules. */
static void redis_probe_next(struct redis_probe *p, bool in_callback)
{
	redis_probe_drop(p, in_callback);
	p->next++;
	if (p->next >= p->ncand) {
		redis_probe_round_end(p, p->decide != NULL && p->decide(p) == 0);
		return;
	}
	redis_probe_attempt(p);
}

static void redis_probe_on_reply(redisAsyncContext *ac, void *r, void *privdata)
{
	struct redis_probe *p = privdata;
	const redisReply *reply = r;
	struct redis_addr from;

	if (ac != p->ac || reply == NULL)
		return;
	from = p->cand[p->next];
	if (reply->type == REDIS_REPLY_ERROR) {
		if (!p->auth_failed)    /* else last_err says why (NOAUTH here) */
			redis_seterr(p->last_err, "%s:%d: %.100s", from.host, from.port,
				     reply->str);
	} else if (p->answer(p, &from, reply) == 0 && p->decide == NULL) {
		redis_probe_drop(p, true);
		redis_probe_round_end(p, true);
		return;
	}
	redis_probe_next(p, true);
}

/* The AUTH before the question: only an error matters (the question's
 * reply says the rest, NOAUTH after a refused AUTH: the AUTH's error is
 * the one kept). */
static void redis_probe_on_auth(redisAsyncContext *ac, void *r, void *privdata)
{
	struct redis_probe *p = privdata;
	const redisReply *reply = r;

	if (ac != p->ac || reply == NULL || reply->type != REDIS_REPLY_ERROR)
		return;
	redis_seterr(p->last_err, "%s:%d: AUTH: %.100s", p->cand[p->next].host,
		     p->cand[p->next].port, reply->str);
	p->auth_failed = true;
}

static void redis_probe_on_connect(const redisAsyncContext *ac, int status)
{
	struct redis_probe *p = ac->data;

	if (p == NULL || ac != p->ac || status == REDIS_OK)
		return;
	redis_seterr(p->last_err, "%s:%d: connect failed: %s",
		 p->cand[p->next].host, p->cand[p->next].port, ac->errstr ? ac->errstr : "?");
	/* hiredis frees ac after this returns */
	p->ac = NULL;
	redis_probe_next(p, true);
}

static void redis_probe_on_disconnect(const redisAsyncContext *ac, int status)
{
	struct redis_probe *p = ac->data;

	(void)status;
	if (p == NULL || ac != p->ac)
		return;
	redis_seterr(p->last_err, "%s:%d: disconnected", p->cand[p->next].host,
		 p->cand[p->next].port);
	p->ac = NULL;
	redis_probe_next(p, true);
}

/* Asks candidate p->next. */
static void redis_probe_attempt(struct redis_probe *p)
{
	struct redis_strategy *s = p->s;
	const struct redis_addr *a = &p->cand[p->next];
	redisAsyncContext *ac;

	ev_timer_stop(s->loop, &p->timer);
	ac = redisAsyncConnect(a->host, a->port);
	if (ac != NULL && ac->err) {
		redisAsyncFree(ac);
		ac = NULL;
	}
	if (ac == NULL ||
	    redis_attach(s->loop, ac, p, redis_probe_on_connect, redis_probe_on_disconnect) < 0) {
		redis_seterr(p->last_err, "%s:%d: connect failed", a->host,
			 a->port);
		/* not inside a hiredis callback of ours: go on from the timer */
		p->ac = NULL;
		ev_timer_set(&p->timer, 0.001, 0.);
		ev_timer_start(s->loop, &p->timer);
		return;
	}
	p->ac = ac;
	p->auth_failed = false;
	if (p->auth_pass)
		redis_auth(ac, redis_probe_on_auth, p, p->auth_user, p->auth_user_len, p->auth_pass,
			   p->auth_pass_len);
	if (redisAsyncCommandArgv(ac, redis_probe_on_reply, p, p->argc, p->argv, NULL) !=
	    REDIS_OK) {
		redis_seterr(p->last_err, "%s:%d: cannot queue the command",
			 a->host, a->port);
		ev_timer_set(&p->timer, 0.001, 0.);
		ev_timer_start(s->loop, &p->timer);
		return;
	}
	ev_timer_set(&p->timer, s->o.timeout_ms / 1000.0, 0.);
	ev_timer_start(s->loop, &p->timer);
}

/* The timer: an attempt's deadline, a failed attempt to move on from, or
 * the backoff before a round. */
static void redis_probe_on_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct redis_probe *p = container_of(w, struct redis_probe, timer);

	(void)loop;
	(void)revents;
	store_enter(&p->s->core);
	p->waiting = false;
	if (p->ncand == 0) {            /* a new round */
		p->candidates(p);
		p->next = 0;
		if (p->ncand == 0) {
			redis_seterr(p->last_err, "no server to ask");
			redis_probe_round_end(p, false);
		} else {
			redis_probe_attempt(p);
		}
	} else {
		if (p->ac != NULL)
			redis_seterr(p->last_err, "%s:%d: no answer within %d ms",
				 p->cand[p->next].host, p->cand[p->next].port, p->s->o.timeout_ms);
		redis_probe_next(p, false);
	}
	store_leave(&p->s->core);
}

void redis_probe_init(struct redis_probe *p, struct redis_strategy *s)
{
	p->s = s;
	store_backoff_init(&p->backoff, REDIS_BACKOFF_MIN_MS / 1000.0,
			   REDIS_BACKOFF_MAX_MS / 1000.0);
	ev_timer_init(&p->timer, redis_probe_on_timer, 0., 0.);
}

void redis_probe_start(struct redis_probe *p)
{
	if (p->s->destroying)
		return;
	if (p->busy) {
		p->again = p->ac != NULL || p->ncand > 0;
		return;
	}
	p->busy = true;
	p->waiting = false;
	p->ncand = 0;
	ev_timer_set(&p->timer, 0., 0.);
	ev_timer_start(p->s->loop, &p->timer);
}

void redis_probe_stop(struct redis_probe *p)
{
	ev_timer_stop(p->s->loop, &p->timer);
	redis_probe_drop(p, false);
	p->busy = false;
}

bool redis_probe_busy(const struct redis_probe *p)
{
	return p->busy;
}

bool redis_probe_attempting(const struct redis_probe *p)
{
	return p->busy && !p->waiting;
}
