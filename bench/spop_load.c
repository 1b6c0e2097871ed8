/*
 * spop_load.c - an SPOP 2.0 load generator for spoa-ratelimit: plays
 * HAProxy's side on C connections, K pipelined NOTIFYs in flight on each,
 * and reports messages/s and the latency distribution.
 *
 *   spop_load [-h host] [-p port | -P port,port,...] [-c conns] [-k inflight]
 *             [-d seconds] [-w warmup_seconds] [-m ratelimit|noop] [-n keys]
 *             [-W window] [-r rate] [-N messages] [-t tick_us]
 *             [-H every:window:limit] [-K keylen] [-q]
 *
 * One thread, one epoll loop, nothing allocated after start-up: every
 * connection gets its buffers and its K slots once; latencies go into a
 * fixed log-linear histogram (< 0.8 % relative error).
 *
 * Modes. `ratelimit` sends message "ratelimit" with key="k<i>" (i cycling
 * over -n keys), window=60 (-W), limit=1000000 (ints); `noop` sends the same
 * arguments in a message named "noop", which the agent parses and answers
 * with one variable without counting: the difference between the two is
 * the price of rate limiting itself. -K L pads each key with '.' to L bytes
 * (up to LOAD_KEY_MAX): over 104 the agent keeps a key by its digest.
 *
 * Load. With -r 0 (the default) the loop is closed: each ACK immediately
 * frees its slot for the next NOTIFY, so K x C messages are always in
 * flight and the rate is the agent's maximum. With -r R the load is open:
 * message i is due at start + i/R and its latency counts from when it was
 * due, not from when it could be sent (a stalled agent shows up as latency,
 * not as a lower rate). The loop wakes at most every -t microseconds (10)
 * and sends what fell due meanwhile in one write on one connection, the
 * next batch on the next: one message per write at hundreds of thousands
 * per second would make the load generator the bottleneck, and HAProxy
 * too writes what piled up since its last turn.
 *
 * Several agents. -P port,port,... plays one HAProxy node per port (the
 * scale part of bench/run.sh: N agents on one store): -c connections and
 * -r messages/s are then per port, each port paced on its own (message i
 * of port p is due at start + (i + p/P)/R, so the nodes do not send in
 * lockstep) and cycling over the same -n keys from its own offset (every
 * key is hit by every node, as behind a load balancer). -N counts all
 * ports together. The RESULT line is over all ports and says ports=P.
 *
 * Hot key. -H every:window:limit makes every every-th message of each
 * port one for the key "hot" with that window and limit (the others are
 * as above): a key shared by all nodes, held at its limit when the total
 * rate is above it. Its answers are counted per window of the agent's
 * clock (CLOCK_REALTIME, windows aligned on multiples of their size, as
 * the agent's), by when the ACK arrived: one line per window,
 *   HOT window_start=<unix s> window=<s> admitted=<n> denied=<n>
 *       degraded=<n> complete=<0|1>
 * (complete: the window lies wholly inside the measured time), and the
 * RESULT line adds hot_limit=, hot_windows= (complete ones),
 * hot_admitted_min= / _max= / _sum= over them and hot_degraded= (admitted
 * by a node alone: the store could not decide).
 *
 * Checking. Slot s of a connection is stream-id s+1 and carries the frame-id
 * it was sent with; an ACK must name a busy slot with that exact frame-id,
 * be well formed, carry at least one set-var, no `error` variable, and (in
 * ratelimit mode) a `rate`. Anything else, a DISCONNECT, a lost connection
 * or a message unanswered 2 s after the end, counts in `errors`.
 *
 * Timeline: HELLO on every connection (blocking, one after the other, so a
 * multi-worker agent's workers each get a chance to accept), warm-up (sent,
 * checked, not measured), measurement (ACKs received in it are counted and
 * timed), drain (no more sends, wait for what is in flight), then a
 * HAPROXY-DISCONNECT on each connection, answered by an AGENT-DISCONNECT.
 *
 * Output: one machine-readable line on stdout,
 *   RESULT mode=ratelimit conns=8 inflight=32 keys=10000 rate_target=0 ...
 *          msgs=... msgs_per_s=... p50_us=... p99_us=... p999_us=... errors=0
 *          exceeded=0 client_cpu=0.40 total_acks=...
 * (msgs: good ACKs received while measuring; total_acks: in the whole run,
 * warm-up and drain included; client_cpu: this process's CPU use while
 * measuring, 1.0 = one core) and diagnostics on stderr. Exit status 0 if errors == 0, 1 otherwise,
 * 2 on bad usage or when the agent cannot be reached.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "spop/spop.h"

#define LOAD_MAX_CONNS      4096        /* over all ports */
#define LOAD_MAX_PORTS      1024
#define LOAD_MAX_INFLIGHT   4096
#define LOAD_MAX_FRAME      16380u      /* what we offer in the HELLO */
#define LOAD_KEY_MAX        256u        /* -K: longest key */
#define LOAD_NOTIFY_MAX     (128u + LOAD_KEY_MAX) /* one NOTIFY, its key included */
#define LOAD_DRAIN_NS       2000000000ull
#define LOAD_CLOSE_NS       1000000000ull
#define LOAD_SPIN_NS        2000ull     /* closer than this to a due send: poll */
#define LOAD_TICK_US        10          /* open loop: default -t */
#define LOAD_WINDOW         60          /* default -W */
#define LOAD_LIMIT          1000000

/* ---- latency histogram ----
 *
 * Log-linear, in nanoseconds: values below 256 have their own bucket;
 * above, each power of two [2^m, 2^(m+1)) is cut into 128 equal buckets,
 * so a bucket is never wider than 1/128 of its values. Bucket index for
 * v >= 256 with shift = msb(v) - 7: (shift << 7) + (v >> shift), which
 * follows on from 255 without a gap. Values above 2^42 ns (73 min) are
 * clamped into the last bucket.
 */
#define HIST_SUB_BITS  7
#define HIST_SUB       (1u << HIST_SUB_BITS)
#define HIST_MAX_SHIFT 34
#define HIST_LEN       ((HIST_MAX_SHIFT + 2) * HIST_SUB)

struct hist {
	uint64_t count[HIST_LEN];
	uint64_t total;
	uint64_t max;
};

static inline unsigned hist_index(uint64_t v)
{
	if (v < 2 * HIST_SUB)
		return (unsigned)v;
	unsigned shift = 63u - (unsigned)__builtin_clzll(v) - HIST_SUB_BITS;
	if (shift > HIST_MAX_SHIFT)
		return HIST_LEN - 1;
	return (shift << HIST_SUB_BITS) + (unsigned)(v >> shift);
}

/* The middle of bucket i, in ns. */
static double hist_value(unsigned i)
{
	if (i < 2 * HIST_SUB)
		return (double)i;
	unsigned shift = (i >> HIST_SUB_BITS) - 1;
	uint64_t low = (uint64_t)((i & (HIST_SUB - 1)) | HIST_SUB) << shift;
	return (double)low + (double)(1ull << shift) / 2.0;
}

static inline void hist_add(struct hist *h, uint64_t v)
{
	h->count[hist_index(v)]++;
	h->total++;
	if (v > h->max)
		h->max = v;
}

/* The value at quantile q (0..1], in ns; 0 for an empty histogram. */
static double hist_quantile(const struct hist *h, double q)
{
	if (h->total == 0)
		return 0;
	uint64_t want = (uint64_t)(q * (double)h->total + 0.999999);
	uint64_t seen = 0;
	if (want < 1)
		want = 1;
	for (unsigned i = 0; i < HIST_LEN; i++) {
		seen += h->count[i];
		if (seen >= want)
			return hist_value(i);
	}
	return (double)h->max;
}

/* ---- connections ---- */

enum load_mode {
	LOAD_MODE_RATELIMIT = 0,
	LOAD_MODE_NOOP,
	LOAD_MODE_COUNT
};

enum lconn_state {
	LC_READY = 0,      /* HELLO done, NOTIFYs flow */
	LC_CLOSING,        /* HAPROXY-DISCONNECT sent, waiting for the agent's */
	LC_DEAD,
	LC_STATE_COUNT
};

/* One in-flight NOTIFY: stream-id = slot index + 1. */
struct slot {
	uint64_t frame_id;   /* the frame-id its ACK must carry */
	uint64_t t_sent;     /* ns, CLOCK_MONOTONIC: latency origin */
	bool busy;
	bool hot;            /* a message for the hot key (-H) */
};

/* One agent (-p, or each of -P): its connections are conns[first ..
 * first + n). */
struct port {
	const char *port;
	unsigned first, n;
	uint64_t sent;               /* NOTIFYs queued on its connections */
	uint64_t key_next;
	uint64_t hot_left;           /* -H: messages before the next hot one */
	unsigned rr;                 /* open loop: next connection to try */
	double phase;                /* open loop: offset, in 1/rate */
};

struct lconn {
	int fd;
	unsigned port;               /* index in L.ports */
	enum lconn_state state;
	uint32_t max_frame;          /* negotiated */
	uint64_t next_frame_id;
	struct slot *slots;          /* K */
	uint32_t *free_slots;        /* stack of free slot indexes */
	unsigned nfree;
	uint8_t *rbuf;
	size_t rlen, rcap;
	uint8_t *wbuf;
	size_t wlen, woff, wcap;
	bool want_out;               /* EPOLLOUT registered */
	bool dirty;                  /* on the to-flush list */
};

/* Everything the run needs; one static instance. */
struct load {
	/* options */
	const char *host;
	struct port *ports;
	unsigned nports;
	bool multi;                  /* -P given: ports= in the RESULT line */
	unsigned nconns;             /* over all ports */
	unsigned inflight;
	double duration;
	double warmup;
	enum load_mode mode;
	uint64_t nkeys;
	size_t keylen;               /* -K: keys padded to this length (0: not) */
	uint32_t window;             /* -W */
	double rate;                 /* msgs/s, 0 = closed loop */
	uint64_t max_msgs;           /* stop sending after this many (0: no cap) */
	uint64_t tick_ns;            /* open loop: shortest sleep between batches */
	bool quiet;

	int epfd;
	struct lconn *conns;
	unsigned *dirty;             /* indexes of connections with output */
	unsigned ndirty;
	uint8_t args_tail[64];       /* window + limit arguments, pre-encoded */
	size_t args_tail_len;
	uint8_t hot_tail[64];        /* the same for the hot key */
	size_t hot_tail_len;
	const char *msg_name;

	/* -H: every hot_every-th message of a port is for "hot" */
	uint64_t hot_every;
	uint32_t hot_window;
	uint64_t hot_limit;
	int64_t hot_base;            /* first window index counted */
	unsigned hot_nwin;
	uint64_t *hot_adm, *hot_den, *hot_deg;
	int64_t rt_off;              /* CLOCK_REALTIME - CLOCK_MONOTONIC, ns */

	uint64_t sent;               /* NOTIFYs queued, whole run */
	uint64_t acked;              /* good ACKs, whole run */
	bool sending;
	bool measuring;

	uint64_t t_start, t_measure, t_end;

	/* results */
	struct hist lat;
	uint64_t m_acks;             /* good ACKs received while measuring */
	uint64_t exceeded;
	uint64_t err_ids, err_frames, err_acks, err_disconnects, err_lost, err_io;
};

static struct load L;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double cpu_seconds(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static uint64_t errors_total(void)
{
	return L.err_ids + L.err_frames + L.err_acks + L.err_disconnects + L.err_lost + L.err_io;
}

static void lconn_kill(struct lconn *c, bool lost_is_error)
{
	if (c->state == LC_DEAD)
		return;
	if (lost_is_error)
		L.err_lost += L.inflight - c->nfree;
	epoll_ctl(L.epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
	c->state = LC_DEAD;
}

static void mark_dirty(struct lconn *c)
{
	if (!c->dirty) {
		c->dirty = true;
		L.dirty[L.ndirty++] = (unsigned)(c - L.conns);
	}
}

/* ---- encoding ----
 *
 * NOTIFY frame sent here:
 *
 *   LEN:4 | 03 | FLAGS=FIN:4 | STREAM-ID | FRAME-ID |
 *   "ratelimit" (or "noop") | NB-ARGS=3 |
 *   "key" STRING "k<i>" | "window" INT32 60 | "limit" INT32 1000000
 *
 * The last two arguments are the same in every message and are encoded
 * once into args_tail.
 */
static size_t encode_tail(uint8_t *buf, size_t cap, int64_t window, int64_t limit)
{
	struct spop_writer w;
	struct spop_data d = { .type = SPOP_DATA_INT32 };

	spop_writer_init(&w, buf, cap);
	spop_put_str(&w, "window", 6);
	d.v.i = window;
	spop_put_data(&w, &d);
	spop_put_str(&w, "limit", 5);
	d.type = limit > INT32_MAX ? SPOP_DATA_INT64 : SPOP_DATA_INT32;
	d.v.i = limit;
	spop_put_data(&w, &d);
	return w.len;
}

static void encode_args_tail(void)
{
	L.args_tail_len = encode_tail(L.args_tail, sizeof(L.args_tail), L.window, LOAD_LIMIT);
	if (L.hot_every)
		L.hot_tail_len = encode_tail(L.hot_tail, sizeof(L.hot_tail), L.hot_window,
					     (int64_t)L.hot_limit);
}

/* Writes "k<i>" into buf (LOAD_KEY_MAX bytes), padded with '.' to -K's
 * length; returns its length. */
static size_t key_text(char *buf, uint64_t i)
{
	char tmp[20];
	size_t n = 0, len = 1;

	do {
		tmp[n++] = (char)('0' + i % 10);
		i /= 10;
	} while (i);
	buf[0] = 'k';
	while (n)
		buf[len++] = tmp[--n];
	if (L.keylen > len) {
		memset(buf + len, '.', L.keylen - len);
		len = L.keylen;
	}
	return len;
}

/* Queues one NOTIFY on c in a free slot, due at t. The caller checked that
 * c is ready and has a free slot. */
static void queue_notify(struct lconn *c, uint64_t t)
{
	struct spop_writer w;
	char key[LOAD_KEY_MAX];
	uint32_t s = c->free_slots[--c->nfree];
	struct slot *sl = &c->slots[s];
	struct port *p = &L.ports[c->port];
	size_t klen;
	bool hot = false;

	if (L.hot_every) {
		if (p->hot_left == 0) {
			hot = true;
			p->hot_left = L.hot_every;
		}
		p->hot_left--;
	}
	if (hot) {
		memcpy(key, "hot", 3);
		klen = 3;
	} else {
		klen = key_text(key, p->key_next);
		if (++p->key_next == L.nkeys)
			p->key_next = 0;
	}
	sl->busy = true;
	sl->hot = hot;
	sl->frame_id = c->next_frame_id++;
	sl->t_sent = t;
	spop_writer_init(&w, c->wbuf + c->wlen, c->wcap - c->wlen);
	size_t start = spop_frame_begin(&w, SPOP_FRAME_NOTIFY, SPOP_FL_FIN, (uint64_t)s + 1,
					sl->frame_id);
	spop_put_msg(&w, L.msg_name, strlen(L.msg_name), 3);
	spop_put_kv_str(&w, "key", key, klen);
	if (hot)
		spop_put_bytes(&w, L.hot_tail, L.hot_tail_len);
	else
		spop_put_bytes(&w, L.args_tail, L.args_tail_len);
	if (spop_frame_end(&w, start, c->max_frame) < 0) {
		/* Cannot happen: wcap holds K frames of LOAD_NOTIFY_MAX. */
		fprintf(stderr, "spop_load: NOTIFY does not fit\n");
		exit(2);
	}
	c->wlen += w.len;
	L.sent++;
	p->sent++;
	mark_dirty(c);
}

static bool may_send(void)
{
	return L.sending && (L.max_msgs == 0 || L.sent < L.max_msgs);
}

/* Closed loop: fill every free slot of c. */
static void refill(struct lconn *c, uint64_t t)
{
	while (c->state == LC_READY && c->nfree > 0 && may_send())
		queue_notify(c, t);
}

/* ---- I/O ---- */

static void set_out_interest(struct lconn *c, bool want)
{
	struct epoll_event ev = { .events = EPOLLIN | (want ? EPOLLOUT : 0), .data.ptr = c };

	if (c->want_out == want)
		return;
	c->want_out = want;
	epoll_ctl(L.epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

static void lconn_flush(struct lconn *c)
{
	while (c->woff < c->wlen) {
		ssize_t n = send(c->fd, c->wbuf + c->woff, c->wlen - c->woff, MSG_NOSIGNAL);
		if (n > 0) {
			c->woff += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			set_out_interest(c, true);
			return;
		}
		fprintf(stderr, "spop_load: send: %s\n", n < 0 ? strerror(errno) : "closed");
		L.err_io++;
		lconn_kill(c, true);
		return;
	}
	c->woff = c->wlen = 0;
	set_out_interest(c, false);
}

static void flush_dirty(void)
{
	for (unsigned i = 0; i < L.ndirty; i++) {
		struct lconn *c = &L.conns[L.dirty[i]];
		c->dirty = false;
		if (c->state != LC_DEAD && !c->want_out)
			lconn_flush(c);
	}
	L.ndirty = 0;
}

static bool str_is(struct spop_str s, const char *lit)
{
	size_t n = strlen(lit);
	return s.len == n && memcmp(s.ptr, lit, n) == 0;
}

/* Checks an ACK's actions. Returns true if it is a good answer; *exceeded
 * and *degraded say whether it set those variables true. */
static bool ack_ok(const struct spop_frame *f, bool *exceeded, bool *degraded)
{
	struct spop_cursor cur;
	enum spop_action_type type;
	enum spop_scope scope;
	struct spop_str name;
	struct spop_data value;
	unsigned nset = 0;
	bool has_rate = false, bad = false;
	int rc;

	spop_cursor_init(&cur, f->payload, f->payload_len);
	while ((rc = spop_action_next(&cur, &type, &scope, &name, &value)) == 1) {
		if (type != SPOP_ACT_SET_VAR)
			continue;
		nset++;
		if (str_is(name, "error")) {
			bad = true;
			if (!L.quiet && L.err_acks < 5)
				fprintf(stderr, "spop_load: ACK sets error=\"%.*s\"\n",
					value.type == SPOP_DATA_STRING ? (int)value.v.str.len : 0,
					value.type == SPOP_DATA_STRING ? value.v.str.ptr : "");
		} else if (str_is(name, "rate")) {
			has_rate = true;
		} else if (str_is(name, "exceeded") && value.type == SPOP_DATA_BOOL && value.v.b) {
			L.exceeded++;
			*exceeded = true;
		} else if (str_is(name, "degraded") && value.type == SPOP_DATA_BOOL && value.v.b) {
			*degraded = true;
		}
	}
	if (rc < 0 || nset == 0 || bad)
		return false;
	return L.mode != LOAD_MODE_RATELIMIT || has_rate;
}

/* -H: one answer for the hot key, counted in the agent's window of the
 * time it arrived (t: CLOCK_MONOTONIC). */
static void hot_count(uint64_t t, bool exceeded, bool degraded)
{
	int64_t rt = (int64_t)t + L.rt_off;
	int64_t w = rt / ((int64_t)L.hot_window * 1000000000) - L.hot_base;

	if (w < 0 || w >= (int64_t)L.hot_nwin)
		return;
	if (exceeded) {
		L.hot_den[w]++;
	} else {
		L.hot_adm[w]++;
		if (degraded)
			L.hot_deg[w]++;
	}
}

static void on_ack(struct lconn *c, const struct spop_frame *f, uint64_t t)
{
	uint64_t sid = f->stream_id;

	if (sid == 0 || sid > L.inflight || !c->slots[sid - 1].busy ||
	    c->slots[sid - 1].frame_id != f->frame_id) {
		if (L.err_ids++ < 5)
			fprintf(stderr, "spop_load: ACK for unknown stream %llu frame %llu\n",
				(unsigned long long)sid, (unsigned long long)f->frame_id);
		return;
	}
	struct slot *sl = &c->slots[sid - 1];
	bool exceeded = false, degraded = false;
	sl->busy = false;
	c->free_slots[c->nfree++] = (uint32_t)(sid - 1);
	if (!ack_ok(f, &exceeded, &degraded)) {
		L.err_acks++;
		return;
	}
	L.acked++;
	if (sl->hot)
		hot_count(t, exceeded, degraded);
	if (L.measuring) {
		L.m_acks++;
		hist_add(&L.lat, t > sl->t_sent ? t - sl->t_sent : 0);
	}
}

static void on_disconnect(struct lconn *c, const struct spop_frame *f)
{
	struct spop_disconnect d;
	enum spop_err err;

	if (spop_disconnect_decode(f->payload, f->payload_len, &d, &err) < 0) {
		L.err_frames++;
	} else if (c->state != LC_CLOSING || (d.has_status_code && d.status_code != 0)) {
		L.err_disconnects++;
		fprintf(stderr, "spop_load: agent disconnects: status %u %.*s\n",
			d.has_status_code ? d.status_code : 0u, (int)d.message.len,
			d.message.ptr ? d.message.ptr : "");
	}
	lconn_kill(c, c->state != LC_CLOSING);
}

/* Reads what is there, handles every whole frame. */
static void lconn_read(struct lconn *c)
{
	ssize_t n;

	do {
		n = read(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen);
	} while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return;
	if (n <= 0) {
		if (c->state != LC_CLOSING) {
			fprintf(stderr, "spop_load: connection lost: %s\n",
				n < 0 ? strerror(errno) : "EOF");
			L.err_io++;
		}
		lconn_kill(c, c->state != LC_CLOSING);
		return;
	}
	uint64_t t = now_ns();
	size_t off = 0;
	c->rlen += (size_t)n;
	while (c->state != LC_DEAD && off < c->rlen) {
		struct spop_frame f;
		enum spop_err err;
		int rc = spop_frame_decode(c->rbuf + off, c->rlen - off, c->max_frame, &f, &err);
		if (rc == 0)
			break;
		if (rc < 0) {
			fprintf(stderr, "spop_load: bad frame from the agent: %s\n",
				spop_err_str(err));
			L.err_frames++;
			lconn_kill(c, true);
			return;
		}
		off += (size_t)rc;
		if (f.type == SPOP_FRAME_ACK && (f.flags & SPOP_FL_FIN)) {
			on_ack(c, &f, t);
		} else if (f.type == SPOP_FRAME_AGENT_DISCONNECT) {
			on_disconnect(c, &f);
			return;
		} else {
			fprintf(stderr, "spop_load: unexpected %s frame\n",
				spop_frame_type_str(f.type));
			L.err_frames++;
		}
	}
	if (c->state == LC_DEAD)
		return;
	if (off > 0) {
		memmove(c->rbuf, c->rbuf + off, c->rlen - off);
		c->rlen -= off;
	}
	if (L.rate == 0)
		refill(c, t);
}

/* ---- setup ---- */

static int fcntl_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static int read_frame_blocking(int fd, uint8_t *buf, size_t cap, struct spop_frame *f)
{
	size_t len = 0;
	enum spop_err err;

	for (;;) {
		int rc = spop_frame_decode(buf, len, cap - SPOP_LEN_SIZE, f, &err);
		if (rc > 0)
			return 0;
		if (rc < 0) {
			fprintf(stderr, "spop_load: bad HELLO answer: %s\n", spop_err_str(err));
			return -1;
		}
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 5000) <= 0) {
			fprintf(stderr, "spop_load: no HELLO answer within 5 s\n");
			return -1;
		}
		ssize_t n = read(fd, buf + len, cap - len);
		if (n <= 0) {
			fprintf(stderr, "spop_load: HELLO: %s\n", n < 0 ? strerror(errno) : "EOF");
			return -1;
		}
		len += (size_t)n;
	}
}

static int lconn_open(struct lconn *c, const struct addrinfo *ai)
{
	struct spop_writer w;
	struct spop_frame f;
	struct spop_hello h;
	enum spop_err err;
	int one = 1;

	c->fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
	if (c->fd < 0 || connect(c->fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		fprintf(stderr, "spop_load: connect %s:%s: %s\n", L.host, L.ports[c->port].port,
			strerror(errno));
		return -1;
	}
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	spop_writer_init(&w, c->wbuf, c->wcap);
	if (spop_encode_haproxy_hello(&w, SPOP_VERSION, LOAD_MAX_FRAME, "pipelining", false,
				      NULL) < 0 ||
	    send(c->fd, c->wbuf, w.len, MSG_NOSIGNAL) != (ssize_t)w.len) {
		fprintf(stderr, "spop_load: sending HELLO failed\n");
		return -1;
	}
	if (read_frame_blocking(c->fd, c->rbuf, c->rcap, &f) < 0)
		return -1;
	if (f.type != SPOP_FRAME_AGENT_HELLO) {
		fprintf(stderr, "spop_load: HELLO answered by %s\n", spop_frame_type_str(f.type));
		return -1;
	}
	if (spop_hello_decode(f.payload, f.payload_len, &h, &err) < 0) {
		fprintf(stderr, "spop_load: bad AGENT-HELLO: %s\n", spop_err_str(err));
		return -1;
	}
	if (!spop_version_supported(h.supported_versions, SPOP_VERSION) ||
	    !spop_has_capability(h.capabilities, "pipelining") || h.max_frame_size < 256 ||
	    h.max_frame_size > LOAD_MAX_FRAME) {
		fprintf(stderr, "spop_load: AGENT-HELLO: version %.*s, capabilities \"%.*s\", "
			"max-frame-size %llu: not usable\n", (int)h.supported_versions.len,
			h.supported_versions.ptr, (int)h.capabilities.len, h.capabilities.ptr,
			(unsigned long long)h.max_frame_size);
		return -1;
	}
	c->max_frame = (uint32_t)h.max_frame_size;
	c->state = LC_READY;
	c->next_frame_id = 1;
	if (fcntl_nonblock(c->fd) < 0)
		return -1;
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
	return epoll_ctl(L.epfd, EPOLL_CTL_ADD, c->fd, &ev);
}

/* Allocates every connection's buffers and slots, once. */
static int lconns_alloc(void)
{
	L.conns = calloc(L.nconns, sizeof(*L.conns));
	L.dirty = calloc(L.nconns, sizeof(*L.dirty));
	if (!L.conns || !L.dirty)
		return -1;
	for (unsigned i = 0; i < L.nconns; i++) {
		struct lconn *c = &L.conns[i];
		c->fd = -1;
		c->state = LC_DEAD;
		c->port = i / (L.nconns / L.nports);
		c->slots = calloc(L.inflight, sizeof(*c->slots));
		c->free_slots = calloc(L.inflight, sizeof(*c->free_slots));
		/* Room for any one frame the agent may send, and for many ACKs. */
		c->rcap = (size_t)LOAD_MAX_FRAME + SPOP_LEN_SIZE;
		if (c->rcap < (size_t)L.inflight * 256)
			c->rcap = (size_t)L.inflight * 256;
		c->wcap = (size_t)L.inflight * LOAD_NOTIFY_MAX + 512;
		c->rbuf = malloc(c->rcap);
		c->wbuf = malloc(c->wcap);
		if (!c->slots || !c->free_slots || !c->rbuf || !c->wbuf)
			return -1;
		/* Popped from the end: slot 0 goes first. */
		for (unsigned s = 0; s < L.inflight; s++)
			c->free_slots[s] = L.inflight - 1 - s;
		c->nfree = L.inflight;
	}
	return 0;
}

static uint64_t outstanding(void)
{
	uint64_t n = 0;

	for (unsigned i = 0; i < L.nconns; i++)
		if (L.conns[i].state != LC_DEAD)
			n += L.inflight - L.conns[i].nfree;
	return n;
}

/* ---- open loop ---- */

/* When message i of port p is due (-r is per port). */
static uint64_t due_time(const struct port *p, uint64_t i)
{
	return L.t_start + (uint64_t)(((double)i + p->phase) * 1e9 / L.rate);
}

/* The next ready connection of p with a free slot, round robin; NULL if
 * none. */
static struct lconn *pick_conn(struct port *p)
{
	for (unsigned i = 0; i < p->n; i++) {
		unsigned idx = (p->rr + i) % p->n;
		struct lconn *c = &L.conns[p->first + idx];
		if (c->state == LC_READY && c->nfree > 0) {
			p->rr = idx + 1;
			return c;
		}
	}
	return NULL;
}

/* Queues every message of each port due by t, all on one of its
 * connections while it has free slots (one write, as HAProxy sends what
 * piled up since its last turn), the next batch on its next connection. */
static void paced_send(uint64_t t)
{
	for (unsigned i = 0; i < L.nports; i++) {
		struct port *p = &L.ports[i];
		struct lconn *c = NULL;
		while (may_send()) {
			uint64_t due = due_time(p, p->sent);
			if (due > t)
				break;
			if (!c || c->nfree == 0) {
				c = pick_conn(p);
				if (!c)
					break;
			}
			queue_notify(c, due);
		}
	}
}

/* The earliest due message a timer can help send: of every port, its next
 * message, unless it is due already and no slot of the port is free (then
 * only an ACK can help). UINT64_MAX if none. */
static uint64_t next_due(uint64_t t)
{
	uint64_t best = UINT64_MAX;

	for (unsigned i = 0; i < L.nports; i++) {
		struct port *p = &L.ports[i];
		uint64_t due = due_time(p, p->sent);
		if (due <= t) {
			bool room = false;
			for (unsigned j = 0; j < p->n && !room; j++)
				room = L.conns[p->first + j].state == LC_READY &&
				       L.conns[p->first + j].nfree > 0;
			if (!room)
				continue;
		}
		if (due < best)
			best = due;
	}
	return best;
}

/* ---- the run ---- */

static void close_all(void)
{
	struct epoll_event evs[64];
	uint64_t deadline = now_ns() + LOAD_CLOSE_NS;
	unsigned open = 0;

	for (unsigned i = 0; i < L.nconns; i++) {
		struct lconn *c = &L.conns[i];
		struct spop_writer w;
		if (c->state != LC_READY)
			continue;
		L.err_lost += L.inflight - c->nfree;
		c->nfree = L.inflight;
		c->state = LC_CLOSING;
		spop_writer_init(&w, c->wbuf + c->wlen, c->wcap - c->wlen);
		if (spop_encode_haproxy_disconnect(&w, SPOP_ERR_NONE, NULL) == 0)
			c->wlen += w.len;
		lconn_flush(c);
		if (c->state == LC_CLOSING)
			open++;
	}
	while (open > 0) {
		uint64_t t = now_ns();
		if (t >= deadline)
			break;
		int n = epoll_wait(L.epfd, evs, 64, (int)((deadline - t) / 1000000 + 1));
		for (int i = 0; i < n; i++) {
			struct lconn *c = evs[i].data.ptr;
			if (c->state == LC_DEAD)
				continue;
			if ((evs[i].events & EPOLLOUT) && c->want_out)
				lconn_flush(c);
			if (c->state != LC_DEAD && (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)))
				lconn_read(c);
		}
		open = 0;
		for (unsigned i = 0; i < L.nconns; i++)
			open += L.conns[i].state == LC_CLOSING;
	}
	for (unsigned i = 0; i < L.nconns; i++) {
		if (L.conns[i].state == LC_CLOSING) {
			fprintf(stderr, "spop_load: no AGENT-DISCONNECT after HAPROXY-DISCONNECT\n");
			L.err_disconnects++;
			lconn_kill(&L.conns[i], false);
		}
	}
}

static void run(double *elapsed, double *client_cpu)
{
	static struct epoll_event evs[256];
	uint64_t t = now_ns(), t_m0 = 0, t_m1 = 0, drain_until = 0, next_batch = 0;
	double cpu0 = 0, cpu1 = 0;
	bool warm = true, draining = false;

	L.t_start = t;
	L.t_measure = t + (uint64_t)(L.warmup * 1e9);
	L.t_end = L.t_measure + (uint64_t)(L.duration * 1e9);
	if (L.hot_every) {
		struct timespec rts;
		clock_gettime(CLOCK_REALTIME, &rts);
		L.rt_off = (int64_t)rts.tv_sec * 1000000000 + rts.tv_nsec - (int64_t)now_ns();
		L.hot_base = ((int64_t)t + L.rt_off) / ((int64_t)L.hot_window * 1000000000);
	}
	L.sending = true;
	if (L.rate == 0)
		for (unsigned i = 0; i < L.nconns; i++)
			refill(&L.conns[i], t);
	flush_dirty();

	for (;;) {
		t = now_ns();
		if (warm && t >= L.t_measure) {
			warm = false;
			L.measuring = true;
			t_m0 = t;
			cpu0 = cpu_seconds();
		}
		/* The end: time is up, or (-N) everything was sent and answered. */
		if (L.measuring && (t >= L.t_end || (L.max_msgs && L.sent >= L.max_msgs &&
						     outstanding() == 0))) {
			L.measuring = false;
			L.sending = false;
			draining = true;
			t_m1 = t;
			cpu1 = cpu_seconds();
			drain_until = t + LOAD_DRAIN_NS;
		}
		if (draining && (t >= drain_until || outstanding() == 0))
			break;

		/* Open loop: one batch per tick at most, whatever wakes us. */
		bool timer_useful = false;
		if (L.rate > 0 && may_send()) {
			timer_useful = true;
			if (t >= next_batch) {
				paced_send(t);
				next_batch = t + L.tick_ns;
			}
		}
		flush_dirty();

		/* Sleep until the next phase change or the next due send, but
		 * at least one tick: what falls due meanwhile goes out in one
		 * batch (its latency still counts from when each was due). */
		uint64_t next = warm ? L.t_measure : draining ? drain_until : L.t_end;
		if (timer_useful) {
			uint64_t due = next_due(t);
			if (due != UINT64_MAX) {
				if (due < next_batch)
					due = next_batch;
				if (due < next)
					next = due;
			}
		}
		struct timespec ts = { 0, 0 };
		if (next > t + LOAD_SPIN_NS) {
			uint64_t d = next - t;
			ts.tv_sec = (time_t)(d / 1000000000ull);
			ts.tv_nsec = (long)(d % 1000000000ull);
		}
		int n = epoll_pwait2(L.epfd, evs, 256, &ts, NULL);
		if (n < 0 && errno != EINTR) {
			perror("spop_load: epoll_pwait2");
			exit(2);
		}
		for (int i = 0; i < n; i++) {
			struct lconn *c = evs[i].data.ptr;
			if (c->state == LC_DEAD)
				continue;
			if ((evs[i].events & EPOLLOUT) && c->want_out)
				lconn_flush(c);
			if (c->state != LC_DEAD && (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)))
				lconn_read(c);
		}
		flush_dirty();
		bool any = false;
		for (unsigned i = 0; i < L.nconns && !any; i++)
			any = L.conns[i].state == LC_READY;
		if (!any) {
			fprintf(stderr, "spop_load: every connection is gone\n");
			if (L.measuring) {
				t_m1 = now_ns();
				cpu1 = cpu_seconds();
			}
			L.measuring = false;
			break;
		}
	}
	if (t_m1 == 0) {
		/* Ended before the measurement did (every connection lost). */
		t_m1 = t_m0 ? t_m0 + 1 : 1;
		t_m0 = t_m0 ? t_m0 : 0;
	}
	*elapsed = (double)(t_m1 - t_m0) / 1e9;
	*client_cpu = *elapsed > 0 ? (cpu1 - cpu0) / *elapsed : 0;
	close_all();
}

/* -H: a HOT line per window that got answers; the complete windows (wholly
 * inside the measured time) summed up in H for the RESULT line. */
static struct {
	unsigned complete;
	uint64_t min, max, sum, degraded;
} H;

static void hot_report(void)
{
	int64_t wns = (int64_t)L.hot_window * 1000000000;
	int64_t m0 = (int64_t)L.t_measure + L.rt_off, m1 = (int64_t)L.t_end + L.rt_off;

	for (unsigned i = 0; i < L.hot_nwin; i++) {
		if (L.hot_adm[i] + L.hot_den[i] == 0)
			continue;
		int64_t start = (L.hot_base + (int64_t)i) * wns;
		bool complete = start >= m0 && start + wns <= m1;
		printf("HOT window_start=%lld window=%u admitted=%llu denied=%llu degraded=%llu "
		       "complete=%d\n", (long long)(start / 1000000000), L.hot_window,
		       (unsigned long long)L.hot_adm[i], (unsigned long long)L.hot_den[i],
		       (unsigned long long)L.hot_deg[i], complete);
		if (!complete)
			continue;
		if (H.complete == 0 || L.hot_adm[i] < H.min)
			H.min = L.hot_adm[i];
		if (L.hot_adm[i] > H.max)
			H.max = L.hot_adm[i];
		H.sum += L.hot_adm[i];
		H.degraded += L.hot_deg[i];
		H.complete++;
	}
}

static void usage(void)
{
	fprintf(stderr,
		"usage: spop_load [-h host] [-p port | -P port,port,...] [-c conns] [-k inflight]\n"
		"                 [-d seconds] [-w warmup_seconds] [-m ratelimit|noop] [-n keys]\n"
		"                 [-W window] [-r rate] [-N messages] [-t tick_us]\n"
		"                 [-H every:window:limit] [-K keylen] [-q]\n"
		"  -h host      agent address (127.0.0.1)\n"
		"  -p port      agent port (12345)\n"
		"  -P ports     several agents, one per port (comma-separated): -c and -r per port\n"
		"  -c conns     connections (8)\n"
		"  -k inflight  NOTIFYs in flight per connection (32)\n"
		"  -d seconds   measured time (5)\n"
		"  -w seconds   warm-up before it, not measured (1)\n"
		"  -m mode      ratelimit (message \"ratelimit\") or noop (message \"noop\")\n"
		"  -n keys      distinct keys k0..k<n-1> (10000)\n"
		"  -W window    their window argument, seconds (60)\n"
		"  -r rate      open-loop target, messages/s; 0 = as fast as possible (0)\n"
		"  -N messages  stop after sending this many (0 = no cap)\n"
		"  -t tick_us   open loop: sleep at least this long between batches (10)\n"
		"  -H e:w:l     every e-th message of a port for key \"hot\", window w, limit l;\n"
		"               its answers counted per window (HOT lines)\n"
		"  -K keylen    keys padded with '.' to this many bytes (at most 256)\n"
		"  -q           quieter\n");
	exit(2);
}

static double num_arg(const char *s, double lo, double hi, char opt)
{
	char *end;
	double v = strtod(s, &end);

	if (*s == '\0' || *end != '\0' || !(v >= lo && v <= hi)) {
		fprintf(stderr, "spop_load: -%c: expected a number in %g..%g, got \"%s\"\n", opt, lo,
			hi, s);
		exit(2);
	}
	return v;
}

/* -P: "p1,p2,..." into L.ports (the strings stay in arg). */
static void parse_ports(char *arg)
{
	unsigned n = 1;

	for (const char *q = arg; *q; q++)
		n += *q == ',';
	if (n > LOAD_MAX_PORTS) {
		fprintf(stderr, "spop_load: -P: at most %u ports\n", LOAD_MAX_PORTS);
		exit(2);
	}
	free(L.ports);
	L.ports = calloc(n, sizeof(*L.ports));
	if (!L.ports) {
		fprintf(stderr, "spop_load: out of memory\n");
		exit(2);
	}
	L.nports = 0;
	for (char *save = NULL, *tok = strtok_r(arg, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save))
		L.ports[L.nports++].port = tok;
	if (L.nports == 0) {
		fprintf(stderr, "spop_load: -P: no port given\n");
		exit(2);
	}
}

/* -H every:window:limit */
static void parse_hot(const char *arg)
{
	char *end;
	unsigned long long e, w, l;

	e = strtoull(arg, &end, 10);
	if (end == arg || *end != ':')
		goto bad;
	arg = end + 1;
	w = strtoull(arg, &end, 10);
	if (end == arg || *end != ':')
		goto bad;
	arg = end + 1;
	l = strtoull(arg, &end, 10);
	if (end == arg || *end != '\0')
		goto bad;
	if (e < 1 || w < 1 || w > 31536000 || l > 1000000000000ull)
		goto bad;
	L.hot_every = e;
	L.hot_window = (uint32_t)w;
	L.hot_limit = l;
	return;
bad:
	fprintf(stderr, "spop_load: -H: expected every:window:limit (every >= 1, window "
		"1..31536000 s, limit 0..1e12)\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const char *const mode_names[LOAD_MODE_COUNT] = { "ratelimit", "noop" };
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai;
	const char *port = "12345";
	int opt, rc;

	L.host = "127.0.0.1";
	L.nconns = 8;
	L.inflight = 32;
	L.duration = 5;
	L.warmup = 1;
	L.nkeys = 10000;
	L.window = LOAD_WINDOW;
	L.tick_ns = LOAD_TICK_US * 1000ull;
	while ((opt = getopt(argc, argv, "h:p:P:c:k:d:w:m:n:W:r:N:t:H:K:q")) != -1) {
		switch (opt) {
		case 'h': L.host = optarg; break;
		case 'p': port = optarg; break;
		case 'P': parse_ports(optarg); L.multi = true; break;
		case 'H': parse_hot(optarg); break;
		case 'c': L.nconns = (unsigned)num_arg(optarg, 1, LOAD_MAX_CONNS, 'c'); break;
		case 'k': L.inflight = (unsigned)num_arg(optarg, 1, LOAD_MAX_INFLIGHT, 'k'); break;
		case 'd': L.duration = num_arg(optarg, 0.01, 86400, 'd'); break;
		case 'w': L.warmup = num_arg(optarg, 0, 3600, 'w'); break;
		case 'n': L.nkeys = (uint64_t)num_arg(optarg, 1, 1e12, 'n'); break;
		case 'K': L.keylen = (size_t)num_arg(optarg, 1, LOAD_KEY_MAX, 'K'); break;
		case 'W': L.window = (uint32_t)num_arg(optarg, 1, 31536000, 'W'); break;
		case 'r': L.rate = num_arg(optarg, 0, 1e9, 'r'); break;
		case 'N': L.max_msgs = (uint64_t)num_arg(optarg, 0, 1e15, 'N'); break;
		case 't': L.tick_ns = (uint64_t)(num_arg(optarg, 0, 1e6, 't') * 1000); break;
		case 'q': L.quiet = true; break;
		case 'm':
			if (strcmp(optarg, "ratelimit") == 0)
				L.mode = LOAD_MODE_RATELIMIT;
			else if (strcmp(optarg, "noop") == 0)
				L.mode = LOAD_MODE_NOOP;
			else
				usage();
			break;
		default:
			usage();
		}
	}
	if (optind != argc)
		usage();
	if (!L.multi) {
		L.ports = calloc(1, sizeof(*L.ports));
		if (!L.ports) {
			fprintf(stderr, "spop_load: out of memory\n");
			return 2;
		}
		L.ports[0].port = port;
		L.nports = 1;
	}
	/* -c is per port. */
	unsigned per_port = L.nconns;
	if ((uint64_t)per_port * L.nports > LOAD_MAX_CONNS) {
		fprintf(stderr, "spop_load: %u ports x %u connections: more than %u in all\n",
			L.nports, per_port, LOAD_MAX_CONNS);
		return 2;
	}
	L.nconns = per_port * L.nports;
	for (unsigned i = 0; i < L.nports; i++) {
		struct port *p = &L.ports[i];
		p->first = i * per_port;
		p->n = per_port;
		p->phase = (double)i / L.nports;
		p->key_next = (uint64_t)((double)i / L.nports * (double)L.nkeys) % L.nkeys;
	}
	if (L.hot_every) {
		L.hot_nwin = (unsigned)((L.warmup + L.duration + LOAD_DRAIN_NS / 1e9 + 2) /
					L.hot_window) + 3;
		L.hot_adm = calloc(L.hot_nwin, sizeof(*L.hot_adm));
		L.hot_den = calloc(L.hot_nwin, sizeof(*L.hot_den));
		L.hot_deg = calloc(L.hot_nwin, sizeof(*L.hot_deg));
		if (!L.hot_adm || !L.hot_den || !L.hot_deg) {
			fprintf(stderr, "spop_load: out of memory\n");
			return 2;
		}
	}
	L.msg_name = mode_names[L.mode];
	encode_args_tail();
	/* Sleeps of a few hundred microseconds should not come back late. */
	prctl(PR_SET_TIMERSLACK, 1UL);

	L.epfd = epoll_create1(EPOLL_CLOEXEC);
	if (L.epfd < 0 || lconns_alloc() < 0) {
		fprintf(stderr, "spop_load: out of memory\n");
		return 2;
	}
	for (unsigned i = 0; i < L.nports; i++) {
		struct port *p = &L.ports[i];
		if ((rc = getaddrinfo(L.host, p->port, &hints, &ai)) != 0) {
			fprintf(stderr, "spop_load: %s:%s: %s\n", L.host, p->port, gai_strerror(rc));
			return 2;
		}
		for (unsigned j = 0; j < p->n; j++) {
			if (lconn_open(&L.conns[p->first + j], ai) < 0)
				return 2;
		}
		freeaddrinfo(ai);
	}

	double elapsed, client_cpu;
	run(&elapsed, &client_cpu);

	double rate = elapsed > 0 ? (double)L.m_acks / elapsed : 0;
	uint64_t errors = errors_total();
	if (errors)
		fprintf(stderr, "spop_load: errors: %llu id mismatches, %llu bad frames, "
			"%llu bad ACKs, %llu disconnects, %llu unanswered, %llu I/O\n",
			(unsigned long long)L.err_ids, (unsigned long long)L.err_frames,
			(unsigned long long)L.err_acks, (unsigned long long)L.err_disconnects,
			(unsigned long long)L.err_lost, (unsigned long long)L.err_io);
	if (!L.quiet)
		fprintf(stderr, "spop_load: %llu NOTIFYs sent, %llu good ACKs in all\n",
			(unsigned long long)L.sent, (unsigned long long)L.acked);
	if (L.hot_every)
		hot_report();
	printf("RESULT mode=%s conns=%u inflight=%u keys=%llu rate_target=%.0f "
	       "duration_s=%.2f msgs=%llu msgs_per_s=%.0f p50_us=%.1f p90_us=%.1f "
	       "p99_us=%.1f p999_us=%.1f max_us=%.1f errors=%llu exceeded=%llu "
	       "client_cpu=%.2f total_acks=%llu",
	       L.msg_name, per_port, L.inflight, (unsigned long long)L.nkeys, L.rate, elapsed,
	       (unsigned long long)L.m_acks, rate, hist_quantile(&L.lat, 0.50) / 1e3,
	       hist_quantile(&L.lat, 0.90) / 1e3, hist_quantile(&L.lat, 0.99) / 1e3,
	       hist_quantile(&L.lat, 0.999) / 1e3, (double)L.lat.max / 1e3,
	       (unsigned long long)errors, (unsigned long long)L.exceeded, client_cpu,
	       (unsigned long long)L.acked);
	if (L.multi)
		printf(" ports=%u", L.nports);
	if (L.hot_every)
		printf(" hot_limit=%llu hot_window=%u hot_windows=%u hot_admitted_min=%llu "
		       "hot_admitted_max=%llu hot_admitted_sum=%llu hot_degraded=%llu",
		       (unsigned long long)L.hot_limit, L.hot_window, H.complete,
		       (unsigned long long)H.min, (unsigned long long)H.max,
		       (unsigned long long)H.sum, (unsigned long long)H.degraded);
	printf("\n");
	fflush(stdout);
	return errors ? 1 : 0;
}
