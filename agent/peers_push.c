/*
 * peers_push.c - the sums pushed into the nodes' into tables
 * (agent/peers_int.h; docs/PEERS.md, "Pushing the sums"). Every
 * peers.push_ms a worker walks the peers namespaces' windows in the
 * shared table (agent/peers_count.h: whatever worker or store counted
 * them), and pushes each key whose window changed since its last walk to
 * each of its sessions; a session that starts, or that fell behind (its
 * buffer full), gets every key from the first slot on (teaching, a
 * cursor moved as its socket drains), and a node that asked for it (00 00)
 * its 00 01 at the end.
 *
 * A push of a rate is an UPDATE 0x80 (an explicit id: 3.3+ acknowledges
 * 0x81 with swapped bytes) carrying the key's windows as HAProxy's
 * frequency counter: age = the time elapsed in the current window, curr =
 * its hits, prev = the previous window's. The node sets its period's
 * start to its now minus age and reads curr + prev x (P - e) / P, then
 * curr x (2P - e) / P: with P the window, the agent's sliding rate, which
 * the node then follows on its own until the next push. A counter's push
 * is its value, the sliding count of its increases, rounded.
 */
#include "agent/peers_int.h"
#include "strategies/container.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "agent/metrics.h"
#include "agent/ratelimit.h"

/* A slot of a walk: what was pushed of it. */
struct peers_seen {
	uint32_t idx;
	uint64_t meta;                  /* the slot's identity then */
	double count;                   /* its count then */
	double value;                   /* what was pushed (counters: changes with time) */
	double pushed_at;               /* when */
};

void peers_sess_queued(struct peers_sess *ps, size_t n)
{
	ps->s.wlen += n;
	ps->last_tx = ev_now(ps->s.env->loop);
}

bool peers_sess_room(struct peers_sess *ps, size_t need)
{
	struct stream *s = &ps->s;

	if (s->wcap - s->wlen >= need)
		return true;
	stream_compact(s);
	if (s->wcap - s->wlen >= need)
		return true;
	size_t want = s->wcap;
	while (want - s->wlen < need && want < PEERS_WBUF_MAX)
		want *= 2;
	return want - s->wlen >= need && stream_grow(s, 0, want) == 0;
}

/* The namespaces whose into table our DEFINE opened on this session. */
static uint64_t peers_push_mask(const struct peers_sess *ps)
{
	uint64_t m = 0;

	for (int ns = 0; ns < NS_MAX; ns++)
		if (ps->into[ns].defined)
			m |= UINT64_C(1) << ns;
	return m;
}

static uint32_t peers_u32(double v)
{
	return v <= 0 ? 0 : v >= 4294967295.0 ? UINT32_MAX : (uint32_t)llround(v);
}

/* What a node reads of a counter's sum: its sliding count, rounded. */
static double peers_counter_value(const struct peers_sum *s, uint32_t window)
{
	double weight = 1.0 - s->elapsed / (window * 1000.0);

	return (double)peers_u32(s->cur + s->prev * weight);
}

bool peers_push_define(struct peers_sess *ps, int ns)
{
	struct peers_into *in = &ps->into[ns];
	struct peers_wire_writer w;

	if (!peers_sess_room(ps, 128 + NS_TABLE_NAME_MAX))
		return false;
	peers_wire_writer_init(&w, ps->s.wbuf + ps->s.wlen, ps->s.wcap - ps->s.wlen);
	if (peers_wire_encode_define(&w, &in->def) < 0)
		return false;
	peers_sess_queued(ps, w.len);
	in->defined = true;
	ps->out_table = in->def.id;
	return true;
}

/* One key's sums of namespace ns to one session. Returns false when its
 * buffer has no room (nothing written); a key its into table cannot hold
 * (another key type) is passed over. */
static bool peers_push_one(struct peers_sess *ps, int ns, const char *key, size_t klen,
			   const struct peers_sum *sum)
{
	struct peers_worker *pw = ps->pw;
	const struct peers_what *what = &pw->what[ns];
	const struct peers_into *in = &ps->into[ns];
	struct peers_wire_update *u = &pw->upd;
	struct peers_wire_writer w;
	uint8_t kb[PEERS_COUNT_KEY_MAX];
	size_t kn = peers_count_key_bytes(in->def.key_type, in->def.key_len, key, klen, kb,
					  &u->key.integer);

	if (kn == 0)
		return true;
	if (!peers_sess_room(ps, 64 + kn + 32 * (size_t)(what->idx + 1)))
		return false;
	/* An update goes to the table last defined or switched to. */
	if (ps->out_table != in->def.id) {
		peers_wire_writer_init(&w, ps->s.wbuf + ps->s.wlen, ps->s.wcap - ps->s.wlen);
		if (peers_wire_encode_switch(&w, in->def.id) < 0)
			return false;
		peers_sess_queued(ps, w.len);
		ps->out_table = in->def.id;
	}
	u->has_id = true;
	u->timed = false;
	u->key.ptr = kb;
	u->key.len = kn;
	u->id = ps->push_id + 1;
	switch (peers_wire_dt_enc(what->dt)) {
	case PEERS_WIRE_ENC_FREQ:
		u->f[what->dt] = (struct peers_wire_freq){ .age = sum->elapsed, .curr = peers_u32(sum->cur),
							  .prev = peers_u32(sum->prev) };
		break;
	case PEERS_WIRE_ENC_ARRAY_FREQ:
		memset(u->gpc_rate, 0, sizeof(u->gpc_rate[0]) * (what->idx + 1));
		u->gpc_rate[what->idx] = (struct peers_wire_freq){ .age = sum->elapsed,
			.curr = peers_u32(sum->cur), .prev = peers_u32(sum->prev) };
		break;
	case PEERS_WIRE_ENC_ARRAY_UINT:
		memset(u->gpc, 0, sizeof(u->gpc[0]) * (what->idx + 1));
		u->gpc[what->idx] = (uint64_t)peers_counter_value(sum, what->window);
		break;
	default:
		u->u[what->dt] = (uint64_t)peers_counter_value(sum, what->window);
		break;
	}
	peers_wire_writer_init(&w, ps->s.wbuf + ps->s.wlen, ps->s.wcap - ps->s.wlen);
	if (peers_wire_encode_update(&w, &in->def, u) < 0)
		return true;                /* cannot be written: passed over */
	ps->push_id++;
	peers_sess_queued(ps, w.len);
	metrics_add(&metrics_me->peers_pushes[pw->sid[ns]], 1);
	return true;
}

/* A key's sums at now; false when it has none to push (nothing left). */
static bool peers_key_sum(struct peers_worker *pw, int ns, const char *key, size_t klen,
			  double now, struct peers_sum *sum)
{
	return pw->what_known[ns] &&
	       peers_count_sum(pw->env->rl, &pw->what[ns], key, klen, now, sum) == 0;
}

void peers_push_teach(struct peers_sess *ps)
{
	struct peers_worker *pw = ps->pw;
	struct peers_scan sc;
	struct peers_slot s;
	struct peers_sum sum;
	double now = rl_now();

	if (!ps->teaching || ps->state != PEERS_UP)
		return;
	peers_count_scan(pw->env->rl, peers_push_mask(ps), pw->windows, now, &sc);
	sc.next = ps->cursor;
	while (peers_count_next(pw->env->rl, &sc, &s) == 0) {
		if (!peers_key_sum(pw, s.ns, s.key, s.klen, now, &sum))
			continue;
		if (!peers_push_one(ps, s.ns, s.key, s.klen, &sum)) {
			ps->cursor = s.idx;     /* the rest when the socket drains */
			return;
		}
	}
	ps->teaching = false;
	if (ps->node_asked && peers_sess_room(ps, 2)) {
		struct peers_wire_writer w;
		peers_wire_writer_init(&w, ps->s.wbuf + ps->s.wlen, ps->s.wcap - ps->s.wlen);
		if (peers_wire_encode_ctrl(&w, PEERS_WIRE_MSG_RESYNCFINISHED) == 0) {
			peers_sess_queued(ps, w.len);
			ps->node_asked = false;
		}
	}
}

void peers_push_begin(struct peers_sess *ps)
{
	ps->teaching = true;
	ps->behind = false;
	ps->cursor = 0;
	peers_push_teach(ps);
}

/* Room for one more slot in the walk being made. */
static bool peers_seen_room(struct peers_worker *pw)
{
	if (pw->nnext < pw->cap)
		return true;
	size_t cap = pw->cap ? 2 * pw->cap : 1024;
	struct peers_seen *a = realloc(pw->seen, cap * sizeof(*a));
	if (!a)
		return false;
	pw->seen = a;
	struct peers_seen *b = realloc(pw->next, cap * sizeof(*b));
	if (!b)
		return false;
	pw->next = b;
	pw->cap = cap;
	return true;
}

/* Pushes a key to every session whose into table of ns is open; one
 * without room falls behind (taught again once it drains). */
static void peers_push_all(struct peers_worker *pw, int ns, const char *key, size_t klen,
			   const struct peers_sum *sum)
{
	for (struct peers_sess *ps = pw->sessions; ps; ps = ps->next)
		if (ps->state == PEERS_UP && ps->into[ns].defined && !ps->behind &&
		    !peers_push_one(ps, ns, key, klen, sum))
			ps->behind = true;
}

void peers_push_note(struct peers_worker *pw, int ns, const char *key, size_t klen)
{
	struct peers_dirty *d;

	if (pw->ndirty == PEERS_DIRTY_MAX)
		return;
	d = &pw->dirty[pw->ndirty];
	if (pw->ndirty > 0 && d[-1].ns == ns && d[-1].klen == klen && memcmp(d[-1].key, key, klen) == 0)
		return;
	d->ns = ns;
	d->klen = klen;
	memcpy(d->key, key, klen);
	pw->ndirty++;
}

/* Sessions with output queued watch for writes. */
static void peers_push_watch(struct peers_worker *pw)
{
	for (struct peers_sess *ps = pw->sessions; ps; ps = ps->next)
		if (ps->state == PEERS_UP && ps->s.wlen > ps->s.woff)
			stream_watch(&ps->s, ps->paused_until == 0);
}

/* Acknowledges what came of each table of a session, as far as it is
 * kept. */
static void peers_push_acks(struct peers_sess *ps)
{
	struct peers_wire_writer w;

	for (size_t i = 0; i < PEERS_BINDS_MAX; i++) {
		struct peers_bind *b = &ps->binds[i];
		if (!b->used || !b->ack_due || b->ack_stop || !peers_sess_room(ps, 16))
			continue;
		peers_wire_writer_init(&w, ps->s.wbuf + ps->s.wlen, ps->s.wcap - ps->s.wlen);
		if (peers_wire_encode_ack(&w, b->id, b->last_id) == 0) {
			peers_sess_queued(ps, w.len);
			b->acked = b->last_id;
			b->ack_due = false;
			ps->acked_at = ev_now(ps->s.env->loop);
		}
	}
}

/* The keys noted, pushed to every session of the worker. */
static void peers_push_dirty(struct peers_worker *pw, double now)
{
	struct peers_sum sum;

	for (size_t i = 0; i < pw->ndirty; i++) {
		const struct peers_dirty *d = &pw->dirty[i];
		if (peers_key_sum(pw, d->ns, d->key, d->klen, now, &sum))
			peers_push_all(pw, d->ns, d->key, d->klen, &sum);
	}
	pw->ndirty = 0;
	pw->pushed_at = now;
	peers_push_watch(pw);
}

/* At once when quiet, at the walk when busy: the keys a read counted are
 * pushed at once when the worker pushed none at once within push_ms, the
 * read's acks first (one write); else its acks go out at once when the
 * session sent none within push_ms; what is held the next walk sends
 * (every session's acks due, then every key whose count changed since the
 * walk before): acks always before the pushes that follow them. A node
 * under load sends an update each time its peers task runs (hundreds a
 * second for one busy key): answering each with an ack and a push would
 * cost the node a wake-up of its own per update, and an ack back for each
 * push; held, it costs the node at most one of each per push_ms, and a
 * quiet cluster's lag stays the node's push and ours at once
 * (docs/PEERS.md, "Pushing the sums"). */
void peers_push_read(struct peers_sess *ps)
{
	struct peers_worker *pw = ps->pw;
	double every = pw->env->cfg->peers_push_ms / 1000.0;
	double t = ev_now(ps->s.env->loop), now = rl_now();
	bool push = pw->ndirty && now - pw->pushed_at >= every;

	if (push || t - ps->acked_at >= every || ps->s.draining)
		peers_push_acks(ps);
	if (push)
		peers_push_dirty(pw, now);
	else
		pw->ndirty = 0;             /* the walk pushes them */
}

/* The walk: each window of a peers namespace against what the last walk
 * pushed (both in slot order): pushed again when its count changed, when
 * a counter's value did, and once a window while anything is left (the
 * nodes' entries expire). */
static void peers_push_tick(struct peers_worker *pw)
{
	struct rl *rl = pw->env->rl;
	struct peers_scan sc;
	struct peers_slot s;
	struct peers_sum sum;
	double now = rl_now();
	uint64_t open = 0;
	size_t j = 0;

	/* The acks held first: before the pushes that follow them. */
	for (struct peers_sess *ps = pw->sessions; ps; ps = ps->next)
		if (ps->state == PEERS_UP) {
			open |= peers_push_mask(ps);
			peers_push_acks(ps);
		}
	if (!open) {
		pw->nseen = 0;
		peers_push_watch(pw);
		return;
	}
	pw->nnext = 0;
	peers_count_scan(rl, open, pw->windows, now, &sc);
	while (peers_count_next(rl, &sc, &s) == 0 && peers_seen_room(pw)) {
		while (j < pw->nseen && pw->seen[j].idx < s.idx)
			j++;
		const struct peers_seen *was = j < pw->nseen && pw->seen[j].idx == s.idx &&
						       pw->seen[j].meta == s.meta ? &pw->seen[j] : NULL;
		struct peers_seen *seen = &pw->next[pw->nnext++];
		*seen = was ? *was : (struct peers_seen){ .idx = s.idx, .meta = s.meta, .value = -1 };
		bool rate = pw->what[s.ns].rate;
		bool changed = !was || was->count != s.count;
		bool old = was && now - was->pushed_at >= pw->windows[s.ns];
		/* A rate's push holds until the next one (the node decays it
		 * as we do); a counter's value changes with time. */
		if ((rate && !changed && !old) || !peers_key_sum(pw, s.ns, s.key, s.klen, now, &sum))
			continue;
		double value = rate ? sum.cur + sum.prev : peers_counter_value(&sum, pw->windows[s.ns]);
		if (!changed && value == was->value && !(old && value > 0))
			continue;
		seen->count = s.count;
		seen->value = value;
		seen->pushed_at = now;
		peers_push_all(pw, s.ns, s.key, s.klen, &sum);
	}
	struct peers_seen *t = pw->seen;
	pw->seen = pw->next;
	pw->next = t;
	pw->nseen = pw->nnext;
	pw->ndirty = 0;
	peers_push_watch(pw);
}

static void peers_on_tick(struct ev_loop *loop, ev_timer *t, int revents)
{
	(void)loop;
	(void)revents;
	peers_push_tick(container_of(t, struct peers_worker, tick));
}

int peers_push_start(struct peers_worker *pw)
{
	double every = pw->env->cfg->peers_push_ms / 1000.0;

	if (!pw->dirty && !(pw->dirty = malloc(PEERS_DIRTY_MAX * sizeof(*pw->dirty))))
		return -1;
	pw->ndirty = 0;
	ev_timer_init(&pw->tick, peers_on_tick, every, every);
	ev_timer_start(pw->env->loop, &pw->tick);
	return 0;
}

void peers_push_stop(struct peers_worker *pw)
{
	ev_timer_stop(pw->env->loop, &pw->tick);
	free(pw->seen);
	free(pw->next);
	free(pw->dirty);
	pw->dirty = NULL;
	pw->seen = pw->next = NULL;
	pw->nseen = pw->nnext = pw->cap = 0;
}
