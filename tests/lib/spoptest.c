/*
 * spoptest.c - HAProxy's side of an SPOP connection for tests (see
 * spoptest.h).
 */
#include "tests/lib/spoptest.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/lib/agenttest.h"
#include "tests/lib/clock.h"

struct rawspop_buf sp_wb;
struct rawspop_frame sp_fr;
uint8_t sp_scope = RAWSPOP_SCOPE_TXN;
uint64_t sp_next_sid = (1ull << 40) + 5;
uint64_t sp_next_fid = 300;
char sp_err[512];

static char hexbuf[4096];

/* ---------------------------------------------------------------- frames */

const char *sp_hex(const struct rawspop_frame *f)
{
	rawspop_hex(f->raw, f->raw_len, hexbuf, sizeof(hexbuf));
	return hexbuf;
}

const char *sp_read_res_str(enum rawspop_read_res r)
{
	switch (r) {
	case RAWSPOP_READ_FRAME: return "frame";
	case RAWSPOP_READ_EOF: return "EOF";
	case RAWSPOP_READ_ERROR: return "error/short frame";
	case RAWSPOP_READ_TIMEOUT: return "timeout";
	case RAWSPOP_READ_TOOBIG: return "length field too big";
	case RAWSPOP_READ_RESET: return "connection reset";
	}
	return "?";
}

int sp_connect(int port)
{
	int fd = rawspop_connect(port, SP_IO_MS);

	cr_assert(fd >= 0, "connect to 127.0.0.1:%d: %s", port, strerror(errno));
	return fd;
}

void sp_send(int fd)
{
	cr_assert(!sp_wb.overflow, "test frame does not fit the builder");
	cr_assert(rawspop_send_buf(fd, &sp_wb) == 0, "send: %s", strerror(errno));
}

void sp_read(int fd, struct rawspop_frame *f, int timeout_ms)
{
	enum rawspop_read_res r = rawspop_read_frame(fd, f, timeout_ms);

	cr_assert(r == RAWSPOP_READ_FRAME, "expected a frame, got %s (bytes so far: %s)",
		  sp_read_res_str(r), sp_hex(f));
}

void sp_expect_quiet(int fd, int ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	uint8_t b[256];
	ssize_t n;

	if (poll(&pfd, 1, ms) != 1)
		return;
	n = recv(fd, b, sizeof(b), MSG_DONTWAIT | MSG_PEEK);
	if (n > 0) {
		rawspop_hex(b, (size_t)n, hexbuf, sizeof(hexbuf));
		cr_assert_fail("unexpected bytes after the frame: %s", hexbuf);
	}
}

/* ---------------------------------------------------------------- HELLO */

bool sp_caps_has(const char *caps, const char *word)
{
	size_t wl = strlen(word);
	const char *p = caps;

	while (*p) {
		const char *e;
		size_t n;

		while (*p == ' ' || *p == ',')
			p++;
		e = p;
		while (*e && *e != ',')
			e++;
		n = (size_t)(e - p);
		while (n && p[n - 1] == ' ')
			n--;
		if (n == wl && !memcmp(p, word, wl))
			return true;
		p = e;
	}
	return false;
}

uint32_t sp_check_agent_hello(const struct rawspop_frame *f, int64_t offered)
{
	static struct rawspop_kvs kvs;
	const struct rawspop_kv *v, *mfs, *caps;

	cr_assert(f->type == RAWSPOP_AGENT_HELLO, "expected AGENT-HELLO (101), got type %u: %s",
		  f->type, sp_hex(f));
	cr_assert(f->flags == RAWSPOP_FIN, "AGENT-HELLO flags %08x, want FIN only", f->flags);
	cr_assert(f->stream_id == 0 && f->frame_id == 0,
		  "AGENT-HELLO stream-id %llu frame-id %llu, want 0 0: %s",
		  (unsigned long long)f->stream_id, (unsigned long long)f->frame_id, sp_hex(f));
	cr_assert(f->raw[9] == 0 && f->raw[10] == 0, "ids not encoded as 00 00: %s", sp_hex(f));
	cr_assert(rawspop_decode_kvs(f, &kvs, sp_err, sizeof(sp_err)) == 0,
		  "AGENT-HELLO payload: %s: %s", sp_err, sp_hex(f));

	v = rawspop_kv_find(&kvs, "version");
	cr_assert(v, "AGENT-HELLO has no version: %s", sp_hex(f));
	cr_assert(v->value.type == RAWSPOP_T_STRING && !strcmp(v->value.s, "2.0"),
		  "version: type %u value \"%s\", want STRING \"2.0\"", v->value.type, v->value.s);

	mfs = rawspop_kv_find(&kvs, "max-frame-size");
	cr_assert(mfs, "AGENT-HELLO has no max-frame-size: %s", sp_hex(f));
	cr_assert(rawspop_is_int(mfs->value.type), "max-frame-size type %u, want an integer",
		  mfs->value.type);
	cr_assert(mfs->value.i >= 256 && mfs->value.i <= offered,
		  "max-frame-size %lld, want 256..%lld", (long long)mfs->value.i, (long long)offered);

	caps = rawspop_kv_find(&kvs, "capabilities");
	cr_assert(caps, "AGENT-HELLO has no capabilities: %s", sp_hex(f));
	cr_assert(caps->value.type == RAWSPOP_T_STRING, "capabilities type %u", caps->value.type);
	cr_assert(sp_caps_has(caps->value.s, "pipelining"), "capabilities \"%s\" lack pipelining",
		  caps->value.s);
	cr_assert(!sp_caps_has(caps->value.s, "async"), "capabilities \"%s\" have async",
		  caps->value.s);
	cr_assert(!sp_caps_has(caps->value.s, "fragmentation"),
		  "capabilities \"%s\" have fragmentation", caps->value.s);
	return (uint32_t)mfs->value.i;
}

uint32_t sp_hello_on(int fd, const struct rawspop_hello_opts *o)
{
	rawspop_buf_reset(&sp_wb);
	rawspop_hello(&sp_wb, o);
	sp_send(fd);
	sp_read(fd, &sp_fr, SP_IO_MS);
	return sp_check_agent_hello(&sp_fr, o->max_frame_size);
}

int sp_open(int port)
{
	struct rawspop_hello_opts o = rawspop_hello_defaults();
	int fd = sp_connect(port);

	sp_hello_on(fd, &o);
	return fd;
}

/* ---------------------------------------------------------------- NOTIFY */

void sp_put_msg(const struct sp_msg *m)
{
	uint8_t n = 0;

	n += m->key != NULL;
	n += m->ns != NULL;
	n += m->cost_str != NULL || m->has_cost;
	n += m->window != 0;
	n += m->limit != 0;
	n += m->vars != NULL;
	n += m->admission != NULL;
	n += m->lease != NULL || m->lease_null;
	n += m->reservation != NULL || m->reservation_null;
	n += m->reserve;
	rawspop_msg(&sp_wb, m->msg ? m->msg : "ratelimit", n);
	if (m->key)
		rawspop_arg_str(&sp_wb, "key", m->key);
	if (m->window)
		rawspop_arg_int(&sp_wb, "window", m->window);
	if (m->limit)
		rawspop_arg_int(&sp_wb, "limit", m->limit);
	if (m->cost_str)
		rawspop_arg_str(&sp_wb, "cost", m->cost_str);
	else if (m->has_cost)
		rawspop_arg_int(&sp_wb, "cost", m->cost);
	if (m->ns)
		rawspop_arg_str(&sp_wb, "namespace", m->ns);
	if (m->vars)
		rawspop_arg_str(&sp_wb, "vars", m->vars);
	if (m->admission)
		rawspop_arg_str(&sp_wb, "admission", m->admission);
	if (m->lease)
		rawspop_arg_str(&sp_wb, "lease", m->lease);
	else if (m->lease_null)
		rawspop_arg_null(&sp_wb, "lease");
	if (m->reservation)
		rawspop_arg_str(&sp_wb, "reservation", m->reservation);
	else if (m->reservation_null)
		rawspop_arg_null(&sp_wb, "reservation");
	if (m->reserve) {
		rawspop_put_name(&sp_wb, "reserve");
		rawspop_put_bool(&sp_wb, true);
	}
}

void sp_put_notify(uint64_t sid, uint64_t fid, const struct sp_msg *m, size_t n)
{
	size_t start = rawspop_notify_begin(&sp_wb, sid, fid);

	for (size_t i = 0; i < n; i++)
		sp_put_msg(&m[i]);
	rawspop_frame_end(&sp_wb, start);
}

/* Is name base itself, or base with a message's suffix (base_...)? */
static bool base_is(const char *name, const char *base)
{
	size_t bl = strlen(base);

	return !strncmp(name, base, bl) && (name[bl] == '\0' || name[bl] == '_');
}

void sp_check_vars(const struct rawspop_actions *acts, const struct rawspop_frame *f)
{
	/* docs/PROTOCOL.md, "Variables". "retry_after" before "rate":
	 * neither is a prefix of the other. */
	static const char *const ints[] = {
		"rate", "remaining", "reset", "limit", "window", "retry_after", "delayed_ms",
	};
	static const char *const bools[] = { "exceeded", "shadow_exceeded", "degraded",
					     "released", "settled" };

	cr_assert(acts->n >= 1, "ACK without any action: %s", sp_hex(f));
	for (size_t i = 0; i < acts->n; i++) {
		const struct rawspop_action *a = &acts->items[i];
		bool known = false;

		cr_assert(a->type == 1, "action %zu is not set-var (type %u): %s", i, a->type,
			  sp_hex(f));
		cr_assert(a->scope == sp_scope, "variable %s has scope %u, want %u", a->name,
			  a->scope, sp_scope);
		for (size_t k = 0; k < sizeof(ints) / sizeof(ints[0]); k++) {
			if (base_is(a->name, ints[k])) {
				known = true;
				cr_assert(rawspop_is_int(a->value.type),
					  "variable %s has type %u, want an integer", a->name,
					  a->value.type);
			}
		}
		for (size_t k = 0; k < sizeof(bools) / sizeof(bools[0]); k++) {
			if (base_is(a->name, bools[k])) {
				known = true;
				cr_assert(a->value.type == RAWSPOP_T_BOOL,
					  "variable %s has type %u, want BOOL", a->name,
					  a->value.type);
			}
		}
		if (base_is(a->name, "error") || base_is(a->name, "lease") ||
		    base_is(a->name, "reservation")) {
			known = true;
			cr_assert(a->value.type == RAWSPOP_T_STRING,
				  "variable %s has type %u, want STRING", a->name, a->value.type);
		}
		cr_assert(known, "ACK sets an undocumented variable \"%s\"", a->name);
	}
}

void sp_read_ack(int fd, uint64_t sid, uint64_t fid, struct rawspop_actions *acts)
{
	sp_read(fd, &sp_fr, SP_IO_MS);
	cr_assert(sp_fr.type == RAWSPOP_ACK, "expected ACK (103), got type %u: %s", sp_fr.type,
		  sp_hex(&sp_fr));
	cr_assert(sp_fr.flags == RAWSPOP_FIN, "ACK flags %08x, want FIN only", sp_fr.flags);
	cr_assert(sp_fr.stream_id == sid && sp_fr.frame_id == fid,
		  "ACK ids %llu/%llu, want %llu/%llu: %s", (unsigned long long)sp_fr.stream_id,
		  (unsigned long long)sp_fr.frame_id, (unsigned long long)sid,
		  (unsigned long long)fid, sp_hex(&sp_fr));
	cr_assert(rawspop_decode_actions(&sp_fr, acts, sp_err, sizeof(sp_err)) == 0,
		  "ACK payload: %s: %s", sp_err, sp_hex(&sp_fr));
	sp_check_vars(acts, &sp_fr);
}

void sp_notify_n(int fd, const struct sp_msg *m, size_t n, struct rawspop_actions *acts)
{
	uint64_t sid = sp_next_sid, fid = sp_next_fid;

	sp_next_sid += 2;
	sp_next_fid += 1;
	rawspop_buf_reset(&sp_wb);
	sp_put_notify(sid, fid, m, n);
	sp_send(fd);
	sp_read_ack(fd, sid, fid, acts);
}

void sp_notify1(int fd, const struct sp_msg *m, struct rawspop_actions *acts)
{
	sp_notify_n(fd, m, 1, acts);
}

const struct rawspop_action *sp_var(const struct rawspop_actions *acts, const char *name)
{
	return rawspop_var_find(acts, name);
}

int64_t sp_var_int(const struct rawspop_actions *acts, const char *name)
{
	const struct rawspop_action *a = sp_var(acts, name);

	cr_assert(a, "variable %s missing from the ACK: %s", name, sp_hex(&sp_fr));
	cr_assert(rawspop_is_int(a->value.type), "variable %s type %u", name, a->value.type);
	return a->value.i;
}

bool sp_var_bool(const struct rawspop_actions *acts, const char *name)
{
	const struct rawspop_action *a = sp_var(acts, name);

	cr_assert(a, "variable %s missing from the ACK: %s", name, sp_hex(&sp_fr));
	cr_assert(a->value.type == RAWSPOP_T_BOOL, "variable %s type %u", name, a->value.type);
	return a->value.b;
}

void sp_expect_no_error(const struct rawspop_actions *acts)
{
	const struct rawspop_action *e = sp_var(acts, "error");

	cr_assert(!e, "unexpected error variable \"%s\": %s", e ? e->value.s : "",
		  sp_hex(&sp_fr));
}

void sp_expect_error(const struct rawspop_actions *acts, const char *what)
{
	const struct rawspop_action *e = sp_var(acts, "error"), *x = sp_var(acts, "exceeded");

	cr_assert(e, "%s: no error variable in the ACK: %s", what, sp_hex(&sp_fr));
	cr_assert(e->value.s_len > 0, "%s: empty error string", what);
	cr_assert(!x || !x->value.b, "%s: exceeded=true alongside error \"%s\"", what,
		  e->value.s);
}

int64_t sp_read_rate(int fd, const char *key, int64_t window)
{
	static struct rawspop_actions acts;
	struct sp_msg m = { .key = key, .window = window, .has_cost = true, .cost = 0 };

	sp_notify1(fd, &m, &acts);
	sp_expect_no_error(&acts);
	return sp_var_int(&acts, "rate");
}

void sp_key(char *out, size_t len, const char *tag)
{
	static uint64_t seq;
	uint64_t r = 0;

	if (getrandom(&r, sizeof(r), 0) != sizeof(r))
		r = (uint64_t)test_now_us() ^ ((uint64_t)getpid() << 32) ^ seq++;
	snprintf(out, len, "%s-%016llx", tag, (unsigned long long)r);
}

/* ------------------------------------------------- without assertions */

int sp_try_send(int fd, const struct sp_msg *m, uint64_t *sid)
{
	*sid = sp_next_sid;
	sp_next_sid += 2;
	rawspop_buf_reset(&sp_wb);
	sp_put_notify(*sid, sp_next_fid++, m, 1);
	if (rawspop_send_buf(fd, &sp_wb) < 0) {
		snprintf(sp_err, sizeof(sp_err), "send NOTIFY: %s", strerror(errno));
		return -1;
	}
	return 0;
}

int sp_try_ack(int fd, uint64_t sid, int wait_ms, struct rawspop_actions *acts)
{
	enum rawspop_read_res r = rawspop_read_frame(fd, &sp_fr, wait_ms);

	if (r != RAWSPOP_READ_FRAME) {
		snprintf(sp_err, sizeof(sp_err), "no ACK within %d ms (%s)", wait_ms,
			 sp_read_res_str(r));
		return -1;
	}
	if (sp_fr.type != RAWSPOP_ACK || (sid && sp_fr.stream_id != sid)) {
		snprintf(sp_err, sizeof(sp_err), "expected the ACK of stream %llu, got type %u "
			 "ids %llu/%llu", (unsigned long long)sid, sp_fr.type,
			 (unsigned long long)sp_fr.stream_id, (unsigned long long)sp_fr.frame_id);
		return -1;
	}
	return rawspop_decode_actions(&sp_fr, acts, sp_err, sizeof(sp_err));
}

int sp_try_rate(const struct rawspop_actions *acts, int64_t *rate)
{
	const struct rawspop_action *v = rawspop_var_find(acts, "error");

	if (v) {
		snprintf(sp_err, sizeof(sp_err), "ACK sets error \"%s\"", v->value.s);
		return -1;
	}
	v = rawspop_var_find(acts, "rate");
	if (!v || !rawspop_is_int(v->value.type)) {
		snprintf(sp_err, sizeof(sp_err), "ACK without an integer rate");
		return -1;
	}
	*rate = v->value.i;
	return 0;
}

/* ---------------------------------------------------------------- closing */

void sp_expect_disconnect(int fd, uint32_t status, int timeout_ms, const char *what)
{
	static struct rawspop_kvs kvs;
	const struct rawspop_kv *st, *msg;
	enum rawspop_read_res r = rawspop_read_frame(fd, &sp_fr, timeout_ms);

	cr_assert(r == RAWSPOP_READ_FRAME,
		  "%s: expected AGENT-DISCONNECT status %u, got %s (bytes: %s)", what, status,
		  sp_read_res_str(r), sp_hex(&sp_fr));
	cr_assert(sp_fr.type == RAWSPOP_AGENT_DISCONNECT,
		  "%s: expected AGENT-DISCONNECT (102), got type %u: %s", what, sp_fr.type,
		  sp_hex(&sp_fr));
	cr_assert(sp_fr.flags == RAWSPOP_FIN && sp_fr.stream_id == 0 && sp_fr.frame_id == 0,
		  "%s: AGENT-DISCONNECT header flags %08x ids %llu/%llu: %s", what, sp_fr.flags,
		  (unsigned long long)sp_fr.stream_id, (unsigned long long)sp_fr.frame_id,
		  sp_hex(&sp_fr));
	cr_assert(rawspop_decode_kvs(&sp_fr, &kvs, sp_err, sizeof(sp_err)) == 0,
		  "%s: AGENT-DISCONNECT payload: %s: %s", what, sp_err, sp_hex(&sp_fr));
	st = rawspop_kv_find(&kvs, "status-code");
	msg = rawspop_kv_find(&kvs, "message");
	cr_assert(st && rawspop_is_int(st->value.type), "%s: no integer status-code: %s", what,
		  sp_hex(&sp_fr));
	cr_assert(st->value.i == status, "%s: status-code %lld (message \"%s\"), want %u", what,
		  (long long)st->value.i, msg ? msg->value.s : "", status);
	cr_assert(msg && msg->value.type == RAWSPOP_T_STRING, "%s: no message string: %s",
		  what, sp_hex(&sp_fr));
	cr_assert(msg->value.s_len <= 255, "%s: message of %zu bytes (HAProxy 2.6 takes 255)",
		  what, msg->value.s_len);
	cr_assert(rawspop_wait_close(fd, SP_CLOSE_MS) == 0,
		  "%s: connection still open %d ms after AGENT-DISCONNECT", what, SP_CLOSE_MS);
}

/* ------------------------------------------------- the test agent */

static pid_t workers0[64];      /* the workers once the first HELLO worked */
static size_t nworkers0;
static bool workers_known;

void sp_note_workers(void)
{
	if (workers_known)
		return;
	nworkers0 = agentproc_children(test_agent.pid, workers0, 64);
	workers_known = true;
}

int sp_agent_conn(void)
{
	int fd = sp_open(test_agent.port);

	sp_note_workers();
	return fd;
}

void sp_still_serving(const char *after)
{
	static struct rawspop_actions acts;
	pid_t now[64];
	size_t n;
	char key[64];
	int fd;

	cr_assert(agentproc_alive(&test_agent), "after %s: the agent (pid %d) died\n%s", after,
		  (int)test_agent.pid, test_agent_log_tail());
	fd = sp_agent_conn();
	sp_key(key, sizeof(key), "alive");
	{
		struct sp_msg m = { .key = key, .window = 60 };

		sp_notify1(fd, &m, &acts);
	}
	sp_expect_no_error(&acts);
	cr_assert(sp_var_int(&acts, "rate") == 1, "after %s: rate on a fresh key", after);
	close(fd);
	n = agentproc_children(test_agent.pid, now, 64);
	cr_assert(n == nworkers0 && !memcmp(now, workers0, n * sizeof(pid_t)),
		  "after %s: worker set changed (%zu workers, first %d, before %zu, first %d): "
		  "a worker was replaced\n%s",
		  after, n, n ? (int)now[0] : 0, nworkers0, nworkers0 ? (int)workers0[0] : 0,
		  test_agent_log_tail());
}
