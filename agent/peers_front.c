/*
 * peers_front.c - the peers front: HAProxy nodes' sessions, as a peer of
 * their peers sections (agent/peers_int.h draws the states; docs/PEERS.md
 * the protocol and the design). A node dials the agent, says hello (line
 * 2 must be peers.name), and is answered 200 with our resync request: its
 * dump tells its tables (the into tables' definitions, which our pushes
 * follow) and the state of every entry. Its DEFINEs bind its table ids to
 * the namespaces whose haproxy_tables name them; its updates of a from
 * table are counted (agent/peers_count.c) and acknowledged once kept.
 * Messages are decoded in place in the read buffer by agent/peers_wire.c;
 * what goes back is queued in the write buffer, a write per batch. The
 * pushes of the sums are agent/peers_push.c's.
 */
#include "agent/peers_int.h"
#include "strategies/container.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/decide.h"
#include "agent/metrics.h"
#include "agent/ratelimit.h"
#include "agent/sync.h"

static void peers_on_io(struct ev_loop *loop, ev_io *io, int revents);
static void peers_on_timer(struct ev_loop *loop, ev_timer *t, int revents);

static struct peers_worker *peers_worker_of(const struct front_env *env)
{
	return env->state[FRONT_PEERS];
}

/* ------------------------------------------------------------------------
 * Output.
 */

/* A control or error message (no payload). */
static void peers_ctrl(struct peers_sess *ps, enum peers_wire_msg_kind kind)
{
	struct peers_wire_writer w;

	if (!peers_sess_room(ps, 2))
		return;
	peers_wire_writer_init(&w, ps->s.wbuf + ps->s.wlen, ps->s.wcap - ps->s.wlen);
	if (peers_wire_encode_ctrl(&w, kind) == 0)
		peers_sess_queued(ps, w.len);
}

/* The worker's peers_nodes gauge: one more (delta 1) or one fewer up. */
static void peers_nodes_gauge(struct peers_worker *pw, int delta)
{
	pw->nup = delta < 0 && pw->nup == 0 ? 0 : pw->nup + (uint64_t)(int64_t)delta;
	atomic_store_explicit(&metrics_me->peers_nodes, pw->nup, memory_order_relaxed);
}

static void peers_close(struct peers_sess *ps)
{
	struct peers_worker *pw = ps->pw;

	if (ps->s.dead)
		return;
	if (ps->up_counted) {
		ps->up_counted = false;
		peers_nodes_gauge(pw, -1);
	}
	if (ps->state != PEERS_HELLO && log_limit(&pw->info_log, ev_now(ps->s.env->loop))) {
		char node[LOG_ESCAPED_MAX];
		log_escape(ps->node, ps->nlen, node, sizeof(node));
		LOG(LOG_INFO, "peers: node \"%s\" gone: %llu update(s), %.0f hit(s) counted%s", node,
		    (unsigned long long)ps->updates, (double)ps->counted,
		    log_limit_suppressed(&pw->info_log));
	}
	if (ps->prev)
		ps->prev->next = ps->next;
	else if (pw->sessions == ps)
		pw->sessions = ps->next;
	if (ps->next)
		ps->next->prev = ps->prev;
	ps->prev = ps->next = NULL;
	stream_close(&ps->s);
}

/* Sends what is queued; a CLOSING session closes once it is out. Returns
 * 0, or -1 when the session was closed. */
static int peers_flush(struct peers_sess *ps)
{
	if (stream_send(&ps->s) < 0 || (ps->s.wlen == 0 && ps->state == PEERS_CLOSING)) {
		peers_close(ps);
		return -1;
	}
	return 0;
}

/* Ends the session: msg (an error message, or UNKNOWN for none) then
 * close; nothing more is read. */
static void peers_fail(struct peers_sess *ps, enum peers_wire_msg_kind msg)
{
	if (ps->state == PEERS_CLOSING)
		return;
	if (msg != PEERS_WIRE_MSG_UNKNOWN)
		peers_ctrl(ps, msg);
	ps->state = PEERS_CLOSING;
	ps->s.rlen = 0;
	stream_timer(&ps->s, PEERS_CLOSE_GRACE);
}

/* Logs a node's misconfiguration or a refusal, once a second at most. */
__attribute__((format(printf, 3, 4)))
static void peers_complain(struct peers_sess *ps, int level, const char *fmt, ...)
{
	struct peers_worker *pw = ps->pw;
	char msg[512], node[LOG_ESCAPED_MAX];
	va_list ap;

	if (!log_limit(&pw->err_log, ev_now(ps->s.env->loop)))
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_escape(ps->node, ps->nlen, node, sizeof(node));
	LOG(level, "peers: node \"%s\": %s%s", node, msg, log_limit_suppressed(&pw->err_log));
}

/* ------------------------------------------------------------------------
 * The hello.
 */

/* The status line answering a hello, then (200) our resync request, or
 * (others) the end. */
static void peers_status(struct peers_sess *ps, unsigned status)
{
	struct peers_wire_writer w;

	peers_wire_writer_init(&w, ps->s.wbuf + ps->s.wlen, ps->s.wcap - ps->s.wlen);
	if (peers_wire_encode_status(&w, status) == 0)
		peers_sess_queued(ps, w.len);
	if (status != PEERS_WIRE_STATUS_OK)
		peers_fail(ps, PEERS_WIRE_MSG_UNKNOWN);
}

/* Reads the hello at the start of the read buffer: returns its bytes, 0
 * for more. The node is answered 200 only when it calls peers.name: a
 * node answered anything else never dials again (docs/PEERS.md). */
static size_t peers_hello(struct peers_sess *ps)
{
	const struct config *cfg = ps->s.env->cfg;
	struct peers_wire_hello h;
	enum peers_wire_err err;
	char a[LOG_ESCAPED_MAX], b[LOG_ESCAPED_MAX];
	int rc = peers_wire_hello_decode(ps->s.rbuf, ps->s.rlen, &h, &err);

	if (rc == 0)
		return 0;
	if (rc < 0) {
		peers_complain(ps, LOG_WARN, "bad hello (%s): answered %u", peers_wire_err_str(err),
			       peers_wire_err_status(err));
		peers_status(ps, peers_wire_err_status(err));
		return 0;
	}
	memcpy(ps->node, h.caller.ptr, h.caller.len < PEERS_NODE_MAX ? h.caller.len : PEERS_NODE_MAX - 1);
	ps->nlen = h.caller.len < PEERS_NODE_MAX ? h.caller.len : PEERS_NODE_MAX - 1;
	if (h.callee.len != strlen(cfg->peers_name) ||
	    memcmp(h.callee.ptr, cfg->peers_name, h.callee.len) != 0) {
		log_escape(h.callee.ptr, h.callee.len, a, sizeof(a));
		peers_complain(ps, LOG_ERR, "calls the peer \"%s\", but peers.name is \"%s\": "
			       "answered 503, and HAProxy does not call again until restarted or "
			       "reloaded (fix its peers section or peers.name)", a, cfg->peers_name);
		peers_status(ps, PEERS_WIRE_STATUS_ERRHOST);
		return 0;
	}
	if (h.caller.len >= PEERS_NODE_MAX) {
		log_escape(h.caller.ptr, h.caller.len, b, sizeof(b));
		peers_complain(ps, LOG_ERR, "a node name of %zu bytes (at most %d): answered 504",
			       h.caller.len, PEERS_NODE_MAX - 1);
		peers_status(ps, PEERS_WIRE_STATUS_ERRPEER);
		return 0;
	}
	if (stream_grow(&ps->s, PEERS_RBUF, 0) < 0) {
		peers_fail(ps, PEERS_WIRE_MSG_UNKNOWN);
		return 0;
	}
	peers_status(ps, PEERS_WIRE_STATUS_OK);
	/* Our resync request: the node's dump tells its tables (and the
	 * state of every entry), which our pushes need. */
	peers_ctrl(ps, PEERS_WIRE_MSG_RESYNCREQ);
	ps->state = PEERS_UP;
	ps->up_counted = true;
	peers_nodes_gauge(ps->pw, 1);
	ps->learning = true;
	ps->asked_at = ev_now(ps->s.env->loop);
	ps->fresh_since = ps->asked_at;
	stream_timer(&ps->s, PEERS_HEARTBEAT);
	if (log_limit(&ps->pw->info_log, ps->asked_at)) {
		log_escape(ps->node, ps->nlen, b, sizeof(b));
		LOG(LOG_INFO, "peers: node \"%s\" up (HAProxy peers protocol 2.%u)%s", b, h.minor,
		    log_limit_suppressed(&ps->pw->info_log));
	}
	return (size_t)rc;
}

/* ------------------------------------------------------------------------
 * Tables: what a node's DEFINE binds.
 */

/* Is the wire name one the configuration's name means ("t", "/t",
 * "section/t": a peers section's "/t" or a backend's "t")? */
static bool peers_name_is(const char *cfg, struct peers_wire_str wire)
{
	const char *leaf = ns_table_leaf(cfg);
	size_t n = strlen(leaf);

	if (wire.len == n && memcmp(wire.ptr, leaf, n) == 0)
		return true;
	return wire.len == n + 1 && wire.ptr[0] == '/' && memcmp(wire.ptr + 1, leaf, n) == 0;
}

static bool peers_summable(unsigned dt)
{
	return dt < PEERS_WIRE_DT_COUNT && dt != PEERS_WIRE_DT_SERVER_ID && dt != PEERS_WIRE_DT_GPT0 &&
	       dt != PEERS_WIRE_DT_CONN_CUR && dt != PEERS_WIRE_DT_SERVER_KEY && dt != PEERS_WIRE_DT_GPT;
}

/* What namespace ns counts (from) or pushes (into) of the table t
 * defines: its data type ("auto": http_req_rate if t stores it, else the
 * only counter or rate it stores), checked against the table: stored, an
 * element that exists, a rate's period the namespace's window, a
 * counter's expire within it (a node's part lives a window or two after
 * its last update: docs/PEERS.md), keys whose text fits. Returns NULL,
 * or why not (in why). */
static const char *peers_resolve(const struct peers_worker *pw, int ns, const struct ns_def *d,
				 const struct peers_wire_table *t, bool into, struct peers_what *w,
				 char *why, size_t wlen)
{
	int dt = d->haproxy.data_type;
	unsigned idx = d->haproxy.data_index, n = 0;
	uint32_t window = pw->windows[ns];

	if (dt == NS_HAPROXY_DT_AUTO) {
		if (t->data & PEERS_WIRE_DT_BIT(PEERS_WIRE_DT_HTTP_REQ_RATE))
			dt = PEERS_WIRE_DT_HTTP_REQ_RATE;
		for (unsigned i = 0; dt == NS_HAPROXY_DT_AUTO && i < PEERS_WIRE_DT_COUNT; i++)
			n += (t->data & PEERS_WIRE_DT_BIT(i)) && peers_summable(i);
		for (unsigned i = 0; dt == NS_HAPROXY_DT_AUTO && n == 1 && i < PEERS_WIRE_DT_COUNT; i++)
			if ((t->data & PEERS_WIRE_DT_BIT(i)) && peers_summable(i))
				dt = (int)i;
		if (dt == NS_HAPROXY_DT_AUTO) {
			snprintf(why, wlen, "stores %s counter or rate: set haproxy_tables.data_type",
				 n ? "more than one" : "no");
			return why;
		}
		idx = 0;
	}
	enum peers_wire_enc enc = peers_wire_dt_enc((unsigned)dt);
	bool array = enc == PEERS_WIRE_ENC_ARRAY_UINT || enc == PEERS_WIRE_ENC_ARRAY_FREQ;
	*w = (struct peers_what){ .ns = ns, .window = window, .dt = (unsigned)dt, .idx = idx,
				  .rate = enc == PEERS_WIRE_ENC_FREQ || enc == PEERS_WIRE_ENC_ARRAY_FREQ };
	if (!(t->data & PEERS_WIRE_DT_BIT(dt)))
		snprintf(why, wlen, "does not store %s", peers_wire_dt_str((unsigned)dt));
	else if (array && idx >= t->nbelem[dt])
		snprintf(why, wlen, "stores %s(%u): no element %u", peers_wire_dt_str((unsigned)dt),
			 t->nbelem[dt], idx);
	else if (w->rate && t->period[dt] != window * 1000u)
		snprintf(why, wlen, "counts %s over %u ms, but the namespace's window is %u s "
			 "(window_sizes: the tables' period)", peers_wire_dt_str((unsigned)dt),
			 t->period[dt], window);
	else if (!w->rate && !into && t->has_expire && t->expire > window * 1000u)
		snprintf(why, wlen, "expires its entries after %u ms, longer than the namespace's "
			 "window (%u s): a counter's window must outlast the entries", t->expire,
			 window);
	else if ((t->key_type == PEERS_WIRE_KEY_STRING && t->key_len > PEERS_COUNT_KEY_MAX) ||
		 (t->key_type == PEERS_WIRE_KEY_BINARY && 2 * t->key_len > PEERS_COUNT_KEY_MAX))
		snprintf(why, wlen, "has keys of %u bytes (at most %d for strings, %d binary)",
			 t->key_len, PEERS_COUNT_KEY_MAX, PEERS_COUNT_KEY_MAX / 2);
	else
		return NULL;
	return why;
}

/* The data type a namespace counts and pushes is the same on every
 * session of the worker: the first that resolves it decides, a node that
 * differs is refused. */
static const char *peers_agree(struct peers_worker *pw, const struct peers_what *w, char *why,
			       size_t wlen)
{
	struct peers_what *k = &pw->what[w->ns];

	if (!pw->what_known[w->ns]) {
		*k = *w;
		pw->what_known[w->ns] = true;
		return NULL;
	}
	if (k->dt == w->dt && k->idx == w->idx)
		return NULL;
	snprintf(why, wlen, "holds %s where other nodes' hold %s (data_type \"auto\" resolved "
		 "differently: set haproxy_tables.data_type)", peers_wire_dt_str(w->dt),
		 peers_wire_dt_str(k->dt));
	return why;
}

static void peers_unbind(struct peers_sess *ps, uint64_t id)
{
	for (size_t i = 0; i < PEERS_BINDS_MAX; i++)
		if (ps->binds[i].used && ps->binds[i].id == id) {
			if (ps->cur == &ps->binds[i])
				ps->cur = NULL;
			ps->binds[i].used = false;
		}
}

/* ns's into table, as the node defines it: ours follows it (its name,
 * key type and length, expire), with the namespace's data type. */
static void peers_into_known(struct peers_sess *ps, int ns, const struct peers_wire_table *t,
			     const struct peers_what *w)
{
	struct peers_into *in = &ps->into[ns];

	if (in->known)
		return;
	memset(in, 0, sizeof(*in));
	memcpy(in->name, t->name.ptr, t->name.len);
	in->def = (struct peers_wire_table){
		.id = (uint64_t)ns + 1,
		.name = { in->name, t->name.len },
		.key_type = t->key_type,
		.key_len = t->key_len,
		.data = PEERS_WIRE_DT_BIT(w->dt),
		.has_expire = true,
		.expire = t->expire,
	};
	if (w->rate)
		in->def.period[w->dt] = w->window * 1000u;
	if (peers_wire_dt_enc(w->dt) == PEERS_WIRE_ENC_ARRAY_UINT ||
	    peers_wire_dt_enc(w->dt) == PEERS_WIRE_ENC_ARRAY_FREQ)
		in->def.nbelem[w->dt] = w->idx + 1;
	in->known = true;
}

/* A bind of the node's table t (no namespace yet), or NULL when the
 * session has PEERS_BINDS_MAX already (said in the log). */
static struct peers_bind *peers_bind_new(struct peers_sess *ps, const struct peers_wire_table *t,
					 const char *tname)
{
	struct peers_bind *b = NULL;

	for (size_t i = 0; i < PEERS_BINDS_MAX && !b; i++)
		if (!ps->binds[i].used)
			b = &ps->binds[i];
	if (!b) {
		peers_complain(ps, LOG_ERR, "more than %d tables defined at once: table %s not "
			       "counted", PEERS_BINDS_MAX, tname);
		return NULL;
	}
	memset(b, 0, sizeof(*b));
	b->used = true;
	b->id = t->id;
	memcpy(b->name, t->name.ptr, t->name.len);
	b->def = *t;
	b->def.name.ptr = b->name;
	return b;
}

/* A DEFINE: binds the node's table id to the namespaces that count the
 * table, notes the into tables; anything else leaves the id unbound
 * (its updates skipped, as HAProxy skips those of a table it does not
 * have). Returns -1 when the session must end. */
static int peers_define(struct peers_sess *ps, const struct peers_wire_msg *m)
{
	struct peers_worker *pw = ps->pw;
	struct rl *rl = ps->s.env->rl;
	struct peers_wire_table t;
	enum peers_wire_err err;
	struct peers_bind *b = NULL;
	char why[256], tname[LOG_ESCAPED_MAX];

	if (peers_wire_define_decode(m->payload, m->len, &t, &err) < 0) {
		if (!peers_wire_err_ignorable(err))
			return -1;
		peers_unbind(ps, t.id);
		peers_complain(ps, LOG_WARN, "a table definition ignored: %s", peers_wire_err_str(err));
		return 0;
	}
	peers_unbind(ps, t.id);
	log_escape(t.name.ptr, t.name.len, tname, sizeof(tname));
	bool is_into = false, refused = false;
	for (int ns = 0; ns < NS_MAX && ns < (int)rl_namespace_count(rl); ns++) {
		const struct ns_def *d = rl_namespace_def(rl, ns);
		struct peers_what w;
		bool from = (pw->nsmask >> ns & 1) && peers_name_is(d->haproxy.from, t.name);
		bool into = (pw->nsmask >> ns & 1) && peers_name_is(d->haproxy.into, t.name);
		if ((!from && !into) || t.name.len >= NS_TABLE_NAME_MAX)
			continue;
		if (peers_resolve(pw, ns, d, &t, into, &w, why, sizeof(why)) ||
		    peers_agree(pw, &w, why, sizeof(why))) {
			refused |= !into;
			peers_complain(ps, LOG_ERR, "table %s of namespace \"%s\" %s: not %s", tname,
				       d->name, why, into ? "pushed into" : "counted");
			continue;
		}
		if (into) {
			is_into = true;
			peers_into_known(ps, ns, &t, &w);
			ps->into[ns].node_id = t.id;
			if (!ps->learning && !ps->into[ns].defined)
				peers_push_define(ps, ns);
			continue;
		}
		if (!b && !(b = peers_bind_new(ps, &t, tname)))
			return 0;
		if (b->nfeeds < PEERS_FEEDS_MAX)
			b->feeds[b->nfeeds++] = w;
	}
	/* A counting table refused: bound with no namespace, its updates
	 * counted as refused (an unknown table's as unknown). */
	if (!b && refused && !is_into)
		b = peers_bind_new(ps, &t, tname);
	ps->cur = b;
	ps->cur_into = !b && is_into;
	return 0;
}

/* ------------------------------------------------------------------------
 * Updates: counted, acknowledged once kept.
 */

/* The state of w's data type in an update u. false: u does not carry it. */
static bool peers_state_of(const struct peers_wire_update *u, const struct peers_what *w,
			   struct peers_state *st)
{
	const struct peers_wire_freq *f;

	if (!(u->decoded & PEERS_WIRE_DT_BIT(w->dt)))
		return false;
	switch (peers_wire_dt_enc(w->dt)) {
	case PEERS_WIRE_ENC_FREQ:
	case PEERS_WIRE_ENC_ARRAY_FREQ:
		f = w->dt == PEERS_WIRE_DT_GPC_RATE ? &u->gpc_rate[w->idx] : &u->f[w->dt];
		st->age = f->age;
		st->curr = f->curr;
		st->prev = f->prev;
		return true;
	case PEERS_WIRE_ENC_ARRAY_UINT:
		st->value = u->gpc[w->idx];
		return true;
	default:
		st->value = u->u[w->dt];
		return true;
	}
}

/* The session's budget of keys it brings: peers.node_keys new keys per
 * window (the longest of the peers namespaces'). */
static bool peers_over_budget(struct peers_sess *ps, double now)
{
	const struct config *cfg = ps->s.env->cfg;

	if (now - ps->fresh_since >= ps->pw->longest) {
		ps->fresh_since = now;
		ps->fresh = 0;
	}
	return ps->fresh >= cfg->peers_node_keys;
}

/* An update of the current table: each namespace counting it counts the
 * node's state. Returns -1 when the session must end. */
static int peers_update(struct peers_sess *ps, const struct peers_wire_msg *m, double now)
{
	struct peers_bind *b = ps->cur;
	struct peers_wire_update *u = &ps->upd;
	enum peers_wire_err err;
	char key[PEERS_COUNT_KEY_MAX];
	bool kept = true;

	if (!b || b->nfeeds == 0) {
		/* A table nobody counts: skipped, never acknowledged (an into
		 * table's entries, what the node learned of our sums, are no
		 * refusal). */
		if (b || !ps->cur_into)
			metrics_add(&metrics_me->peers_refused[b ? METRICS_PEERS_REFUSED
							      : METRICS_PEERS_UNKNOWN], 1);
		return 0;
	}
	if (peers_wire_update_decode(m->type, m->payload, m->len, &b->def, u, &err) < 0)
		return -1;
	atomic_store_explicit(&metrics_me->peers_last_update_ms, (uint64_t)(now * 1000.0),
			      memory_order_relaxed);
	b->last_id = u->has_id ? u->id : b->last_id + 1;
	b->has_last = true;
	ps->updates++;
	size_t klen = peers_count_key(b->def.key_type, u->key.ptr, u->key.len, key);
	bool over = peers_over_budget(ps, now);
	for (size_t i = 0; i < b->nfeeds && klen; i++) {
		int ns = b->feeds[i].ns;
		/* A dump (timed updates come only in dumps) to an agent that
		 * started afresh on a store: what it holds was counted by the
		 * agent before, into the store (docs/PEERS.md, "Several
		 * agents"). */
		struct peers_state st = { .known_only = over,
					  .baseline = u->timed && now < ps->pw->baseline_until[ns] };
		struct peers_count_res r;
		if (!peers_state_of(u, &b->feeds[i], &st))
			continue;
		if (peers_count(ps->s.env->rl, &b->feeds[i], ps->node, ps->nlen, key, klen, &st, now,
				&r) < 0) {
			kept = false;
			metrics_add(&metrics_me->peers_refused[METRICS_PEERS_ROOM], 1);
			peers_complain(ps, LOG_WARN, "no room in the table (max_keys): an update not "
				       "counted, and no longer acknowledged on this session");
			continue;
		}
		if (r.refused) {
			kept = false;
			metrics_add(&metrics_me->peers_refused[METRICS_PEERS_NODE_KEYS], 1);
			peers_complain(ps, LOG_WARN, "more than peers.node_keys (%u) new keys in a "
				       "window: its other new keys are not counted until it ends",
				       ps->s.env->cfg->peers_node_keys);
			continue;
		}
		metrics_add(&metrics_me->peers_updates[ps->pw->sid[ns]], 1);
		ps->fresh += r.fresh;
		ps->counted += (uint64_t)r.counted;
		if (r.made != UINT32_MAX && (ps->pw->syncs >> ns & 1)) {
			/* The first sight of the window here: the store's count is
			 * read (sync_seed), and the walk pushes the key once it is
			 * in, not this agent's part alone at once. */
			struct decide *d = ps->s.env->decide;
			if (d && d->sync)
				sync_seed(d->sync, (unsigned)ns, r.made);
		} else if (r.counted > 0) {
			peers_push_note(ps->pw, ns, key, klen);
		}
	}
	if (!kept)
		b->ack_stop = true;
	else if (!b->ack_stop)
		b->ack_due = true;
	return 0;
}

/* ------------------------------------------------------------------------
 * Messages.
 */

/* The node's dump for our 00 00 is over (or late): its into tables are
 * known; our DEFINEs of them, then every sum. */
static void peers_learned(struct peers_sess *ps)
{
	ps->learning = false;
	for (int ns = 0; ns < NS_MAX; ns++)
		if (ps->into[ns].known && !ps->into[ns].defined)
			peers_push_define(ps, ns);
	peers_push_begin(ps);
}

/* One message. Returns -1 when the session must end (with what to say). */
static int peers_message(struct peers_sess *ps, const struct peers_wire_msg *m, double now)
{
	switch (m->kind) {
	case PEERS_WIRE_MSG_RESYNCREQ:
		/* It wants the sums: answered with them and 00 01. Before its
		 * dump has told its into tables (it sends none while it waits
		 * for this answer), 00 01 at once: the sums follow its dump. */
		if (ps->learning) {
			peers_ctrl(ps, PEERS_WIRE_MSG_RESYNCFINISHED);
			return 0;
		}
		ps->node_asked = true;
		peers_push_begin(ps);
		return 0;
	case PEERS_WIRE_MSG_RESYNCFINISHED:
	case PEERS_WIRE_MSG_RESYNCPARTIAL:
		peers_ctrl(ps, PEERS_WIRE_MSG_RESYNCCONFIRM);
		if (ps->learning)
			peers_learned(ps);
		return 0;
	case PEERS_WIRE_MSG_RESYNCCONFIRM:
	case PEERS_WIRE_MSG_HEARTBEAT:
	case PEERS_WIRE_MSG_ACK:
	case PEERS_WIRE_MSG_UNKNOWN:
		return 0;
	case PEERS_WIRE_MSG_ERR_PROTOCOL:
	case PEERS_WIRE_MSG_ERR_SIZELIMIT:
		peers_complain(ps, LOG_ERR, "says we erred (%s): closing", peers_wire_msg_str(m->kind));
		peers_fail(ps, PEERS_WIRE_MSG_UNKNOWN);
		return 0;
	case PEERS_WIRE_MSG_DEFINE:
		return peers_define(ps, m);
	case PEERS_WIRE_MSG_SWITCH: {
		uint64_t id;
		enum peers_wire_err err;
		if (peers_wire_switch_decode(m->payload, m->len, &id, &err) < 0)
			return -1;
		ps->cur = NULL;
		ps->cur_into = false;
		for (size_t i = 0; i < PEERS_BINDS_MAX; i++)
			if (ps->binds[i].used && ps->binds[i].id == id)
				ps->cur = &ps->binds[i];
		for (int ns = 0; ns < NS_MAX && !ps->cur; ns++)
			ps->cur_into |= ps->into[ns].known && ps->into[ns].node_id == id;
		return 0;
	}
	case PEERS_WIRE_MSG_UPDATE:
	case PEERS_WIRE_MSG_INCUPDATE:
	case PEERS_WIRE_MSG_UPDATE_TIMED:
	case PEERS_WIRE_MSG_INCUPDATE_TIMED:
		return peers_update(ps, m, now);
	case PEERS_WIRE_MSG_COUNT:
		break;
	}
	return 0;
}

/* Handles what the read buffer holds whole. */
static void peers_process(struct peers_sess *ps)
{
	size_t off = 0;
	double now = rl_now(), evnow = ev_now(ps->s.env->loop);

	if (ps->state == PEERS_HELLO) {
		off = peers_hello(ps);
		if (off == 0 && ps->state == PEERS_HELLO && ps->s.rlen == ps->s.rcap) {
			peers_status(ps, PEERS_WIRE_STATUS_ERRPROTO);
			return;
		}
		if (off)
			ps->s.last_rx = evnow;
	}
	while (ps->state == PEERS_UP && off < ps->s.rlen) {
		struct peers_wire_msg m;
		enum peers_wire_err err;
		int rc = peers_wire_msg_decode(ps->s.rbuf + off, ps->s.rlen - off, PEERS_WIRE_MSG_MAX,
					       &m, &err);
		if (rc == 0)
			break;
		if (rc < 0) {
			peers_complain(ps, LOG_WARN, "%s: closing", peers_wire_err_str(err));
			peers_fail(ps, err == PEERS_WIRE_ERR_TOO_BIG ? PEERS_WIRE_MSG_ERR_SIZELIMIT
								     : PEERS_WIRE_MSG_ERR_PROTOCOL);
			break;
		}
		off += (size_t)rc;
		if (peers_message(ps, &m, now) < 0) {
			peers_complain(ps, LOG_WARN, "a malformed %s: closing",
				       peers_wire_msg_str(m.kind));
			peers_fail(ps, PEERS_WIRE_MSG_ERR_PROTOCOL);
			break;
		}
		ps->s.last_rx = evnow;
	}
	if (ps->state == PEERS_CLOSING) {
		ps->s.rlen = 0;
		return;
	}
	peers_push_read(ps);
	stream_consume(&ps->s, off);
	if (ps->s.rlen == 0)
		ps->s.partial_since = 0;
	else if (off > 0 || ps->s.partial_since == 0)
		ps->s.partial_since = evnow;
}

static bool peers_more(const struct stream *s)
{
	return container_of(s, const struct peers_sess, s)->state != PEERS_CLOSING;
}

static void peers_process_stream(struct stream *s)
{
	peers_process(container_of(s, struct peers_sess, s));
}

/* Sends what is queued, pushes more of a teaching (or a session behind),
 * then watches for what comes next. */
static void peers_continue(struct peers_sess *ps)
{
	if (peers_flush(ps) < 0)
		return;
	if (ps->state == PEERS_UP && (ps->teaching || ps->behind)) {
		if (ps->behind && !ps->teaching)
			peers_push_begin(ps);
		else
			peers_push_teach(ps);
		if (peers_flush(ps) < 0)
			return;
	}
	stream_watch(&ps->s, ps->state != PEERS_CLOSING && ps->paused_until == 0);
}

/* Reads paced while a node trickles (docs/PEERS.md, "Sessions"): a read
 * of fewer than PEERS_PACE_UPDATES updates that comes within two paces
 * (push_ms / 5) of the one before stops reading for a pace; what the node
 * sends meanwhile is read in one go. A node under load writes an update
 * each time its peers task runs (a thousand a second for one busy key),
 * each a wake-up of ours on the CPU it shares with us: paced, about one a
 * pace. A read after a quiet spell is made at once; a read that brings
 * more (a dump, many keys) is never followed by a pause. */
static void peers_pace(struct peers_sess *ps, uint64_t updates)
{
	double now = ev_now(ps->s.env->loop), pace = ps->s.env->cfg->peers_push_ms / 5000.0;

	if (ps->state == PEERS_UP && !ps->s.draining && updates < PEERS_PACE_UPDATES &&
	    now - ps->read_at < 2 * pace) {
		ps->paused_until = now + pace;
		stream_timer(&ps->s, pace);
	}
	ps->read_at = now;
}

static void peers_on_io(struct ev_loop *loop, ev_io *io, int revents)
{
	struct peers_sess *ps = container_of(io, struct peers_sess, s.io);
	uint64_t before = ps->updates;
	(void)loop;

	if (revents & EV_READ) {
		if (stream_read(&ps->s, peers_more, peers_process_stream) && !ps->s.dead)
			peers_fail(ps, PEERS_WIRE_MSG_UNKNOWN);
		else if (!ps->s.dead)
			peers_pace(ps, ps->updates - before);
	}
	if (!ps->s.dead)
		peers_continue(ps);
}

/* One timer: the hello's deadline and a message's (frame_timeout_ms),
 * silence (idle_timeout_ms), our heartbeat, a node's dump that takes too
 * long, the end of a pause in reading (peers_pace); in CLOSING, the last
 * flush. */
static void peers_on_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct peers_sess *ps = container_of(t, struct peers_sess, s.timer);
	const struct config *cfg = ps->s.env->cfg;
	double now = ev_now(loop), frame = cfg->frame_timeout_ms / 1000.0, next = PEERS_HEARTBEAT;
	(void)revents;

	if (ps->state == PEERS_CLOSING) {
		peers_close(ps);
		return;
	}
	double deadline = ps->state == PEERS_HELLO ? ps->s.created + frame
			  : ps->s.partial_since > 0 ? ps->s.partial_since + frame
			  : ps->s.last_rx + cfg->idle_timeout_ms / 1000.0;
	if (now >= deadline) {
		peers_complain(ps, LOG_INFO, "%s: closing", ps->state == PEERS_HELLO
			       ? "no hello within frame_timeout_ms" : ps->s.partial_since > 0
			       ? "a message not whole within frame_timeout_ms"
			       : "silent for idle_timeout_ms");
		peers_fail(ps, PEERS_WIRE_MSG_UNKNOWN);
		peers_continue(ps);
		return;
	}
	if (deadline - now < next)
		next = deadline - now;
	if (ps->state == PEERS_UP) {
		if (ps->learning && now - ps->asked_at >= PEERS_LEARN_MAX)
			peers_learned(ps);
		if (now - ps->last_tx >= PEERS_HEARTBEAT)
			peers_ctrl(ps, PEERS_WIRE_MSG_HEARTBEAT);
		if (ps->last_tx + PEERS_HEARTBEAT - now < next)
			next = ps->last_tx + PEERS_HEARTBEAT - now;
		if (ps->learning && ps->asked_at + PEERS_LEARN_MAX - now < next)
			next = ps->asked_at + PEERS_LEARN_MAX - now;
	}
	if (ps->paused_until > 0 && now >= ps->paused_until - 1e-4)
		ps->paused_until = 0;       /* peers_continue() reads again */
	else if (ps->paused_until > 0 && ps->paused_until - now < next)
		next = ps->paused_until - now;
	ev_timer_set(t, next > 0.001 ? next : 0.001, 0.);
	ev_timer_start(loop, t);
	peers_continue(ps);
}

/* ------------------------------------------------------------------------
 * The front's ops.
 */

_Static_assert(offsetof(struct peers_sess, s) == 0, "stream_free() frees the session");

static struct stream *peers_open(struct front_env *env, int fd)
{
	struct peers_worker *pw = peers_worker_of(env);
	struct peers_sess *ps = calloc(1, sizeof(*ps));

	if (!ps || !pw || stream_open(&ps->s, &peers_front, env, fd, PEERS_RBUF_HELLO, PEERS_WBUF,
				      peers_on_io, peers_on_timer) < 0) {
		free(ps);
		return NULL;
	}
	ps->pw = pw;
	ps->state = PEERS_HELLO;
	ps->last_tx = ps->s.created;
	ps->next = pw->sessions;
	if (pw->sessions)
		pw->sessions->prev = ps;
	pw->sessions = ps;
	return &ps->s;
}

/* The worker stops: what came is counted and acknowledged, then the
 * session ends (the node dials another worker, or the next agent). */
static void peers_drain(struct stream *s)
{
	struct peers_sess *ps = container_of(s, struct peers_sess, s);

	if (ps->s.dead)
		return;
	ps->s.draining = true;
	if (stream_read(&ps->s, peers_more, peers_process_stream) && ps->s.dead)
		return;
	peers_fail(ps, PEERS_WIRE_MSG_UNKNOWN);
	peers_continue(ps);
}

static void peers_close_now(struct stream *s)
{
	peers_close(container_of(s, struct peers_sess, s));
}

/* A node's session holds no answer anyone waits for, but it is the
 * node's only one: it gives way only before its hello. */
static double peers_idle_since(const struct stream *s)
{
	const struct peers_sess *ps = container_of(s, const struct peers_sess, s);

	return ps->state == PEERS_HELLO ? ps->s.created : -1;
}

/* The namespaces with haproxy_tables, their windows, those that sync.
 * On a table made afresh (no state file's), the nodes' parts the agent
 * before this one counted into the store are not known: a dump's keys
 * without a record are taken as counted for the namespace's first two
 * windows (beyond, what it counted weighs nothing). */
static void peers_namespaces(struct peers_worker *pw, struct rl *rl)
{
	pw->nsmask = pw->syncs = 0;
	pw->longest = 1;
	memset(pw->what_known, 0, sizeof(pw->what_known));
	for (size_t ns = 0; ns < rl_namespace_count(rl) && ns < NS_MAX; ns++) {
		const struct ns_def *d = rl_namespace_def(rl, (int)ns);
		pw->windows[ns] = d->window_sizes[0];
		pw->sid[ns] = rl_shm_ns(rl, (int)ns) < METRICS_NS ? rl_shm_ns(rl, (int)ns) : 0;
		pw->baseline_until[ns] = 0;
		if (!d->haproxy.from[0])
			continue;
		pw->nsmask |= UINT64_C(1) << ns;
		if (d->window_sizes[0] > pw->longest)
			pw->longest = d->window_sizes[0];
		if (d->sync_rate > 0) {
			pw->syncs |= UINT64_C(1) << ns;
			if (!rl_state_reused(rl))
				pw->baseline_until[ns] = pw->started + 2.0 * d->window_sizes[0];
		}
	}
}

static int peers_start(struct front_env *env)
{
	struct peers_worker *pw = calloc(1, sizeof(*pw));

	if (!pw)
		return -1;
	pw->env = env;
	pw->started = rl_now();
	atomic_store_explicit(&metrics_me->peers_nodes, 0, memory_order_relaxed);
	peers_namespaces(pw, env->rl);
	if (peers_push_start(pw) < 0) {
		free(pw);
		return -1;
	}
	env->state[FRONT_PEERS] = pw;
	return 0;
}

/* A reload may change the namespaces (their indexes, tables, windows):
 * the sessions end, the nodes dial again and define their tables anew. */
static int peers_reload(struct front_env *env)
{
	struct peers_worker *pw = peers_worker_of(env);

	if (!pw)
		return 0;
	while (pw->sessions)
		peers_close(pw->sessions);
	peers_namespaces(pw, env->rl);
	peers_push_stop(pw);
	return peers_push_start(pw);
}

static void peers_stop(struct front_env *env)
{
	struct peers_worker *pw = peers_worker_of(env);

	if (!pw)
		return;
	while (pw->sessions)
		peers_close(pw->sessions);
	peers_push_stop(pw);
	free(pw);
	env->state[FRONT_PEERS] = NULL;
}

const struct front_ops peers_front = {
	.id = FRONT_PEERS,
	.start = peers_start,
	.reload = peers_reload,
	.stop = peers_stop,
	.open = peers_open,
	.idle_since = peers_idle_since,
	.evict_after = 0,
	.drain = peers_drain,
	.evict = peers_close_now,
	.close = peers_close_now,
	.free = stream_free,
};
