/*
 * peernode.c - see peernode.h.
 */
#include "tests/lib/peernode.h"

#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/lib/clock.h"

void pn_open(struct pn_node *n, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };

	memset(n, 0, sizeof(*n));
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	n->fd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(n->fd, 0);
	cr_assert_eq(connect(n->fd, (struct sockaddr *)&a, sizeof(a)), 0, "%s", strerror(errno));
}

void pn_close(struct pn_node *n)
{
	close(n->fd);
}

void pn_send(struct pn_node *n, const void *p, size_t len)
{
	cr_assert_eq(send(n->fd, p, len, MSG_NOSIGNAL), (ssize_t)len, "%s", strerror(errno));
}

static void pn_sendw(struct pn_node *n, const struct peers_wire_writer *w)
{
	pn_send(n, w->buf, w->len);
}

bool pn_read(struct pn_node *n, int wait_ms)
{
	struct pollfd p = { .fd = n->fd, .events = POLLIN };

	if (n->closed || poll(&p, 1, wait_ms) <= 0)
		return false;
	ssize_t r = recv(n->fd, n->in + n->len, sizeof(n->in) - n->len, 0);
	if (r <= 0) {
		n->closed = true;
		return false;
	}
	n->len += (size_t)r;
	return true;
}

static void pn_consume(struct pn_node *n, size_t k)
{
	memmove(n->in, n->in + k, n->len - k);
	n->len -= k;
}

unsigned pn_status(struct pn_node *n)
{
	unsigned st = 0;
	enum peers_wire_err err;
	int64_t end = test_now_ms() + PN_FAR_MS;
	int rc;

	while ((rc = peers_wire_status_decode(n->in, n->len, &st, &err)) == 0 && test_now_ms() < end)
		pn_read(n, 100);
	cr_assert_gt(rc, 0, "a status line: %d (%s), %zu bytes", rc, peers_wire_err_str(err), n->len);
	pn_consume(n, (size_t)rc);
	return st;
}

bool pn_next(struct pn_node *n, uint32_t want, int wait_ms, struct peers_wire_msg *m,
	     uint8_t *buf)
{
	int64_t end = test_now_ms() + wait_ms;

	for (;;) {
		enum peers_wire_err err;
		int rc = peers_wire_msg_decode(n->in, n->len, PEERS_WIRE_MSG_MAX, m, &err);
		cr_assert_geq(rc, 0, "a message from the agent: %s", peers_wire_err_str(err));
		if (rc > 0) {
			bool wanted = want & (1u << m->kind);
			if (wanted && m->len)
				memcpy(buf, m->payload, m->len);
			m->payload = buf;
			pn_consume(n, (size_t)rc);
			if (wanted)
				return true;
			continue;
		}
		if (test_now_ms() >= end || !pn_read(n, (int)(end - test_now_ms())))
			return false;
	}
}

void pn_hello(struct pn_node *n, const char *callee, const char *caller)
{
	char h[256];
	int k = snprintf(h, sizeof(h), "HAProxyS 2.1\n%s\n%s 4242 1\n", callee, caller);

	pn_send(n, h, (size_t)k);
}

struct peers_wire_table pn_table(uint64_t id, const char *name, uint32_t period)
{
	struct peers_wire_table t = {
		.id = id, .name = { name, strlen(name) }, .key_type = PEERS_WIRE_KEY_IPV4,
		.key_len = 4, .data = PEERS_WIRE_DT_BIT(PEERS_WIRE_DT_HTTP_REQ_RATE),
		.has_expire = true, .expire = 60000,
	};
	t.period[PEERS_WIRE_DT_HTTP_REQ_RATE] = period;
	return t;
}

void pn_define(struct pn_node *n, const struct peers_wire_table *t)
{
	uint8_t b[256];
	struct peers_wire_writer w;

	peers_wire_writer_init(&w, b, sizeof(b));
	cr_assert_eq(peers_wire_encode_define(&w, t), 0);
	pn_sendw(n, &w);
}

void pn_ctrl(struct pn_node *n, enum peers_wire_msg_kind kind)
{
	uint8_t b[2];
	struct peers_wire_writer w;

	peers_wire_writer_init(&w, b, sizeof(b));
	cr_assert_eq(peers_wire_encode_ctrl(&w, kind), 0);
	pn_sendw(n, &w);
}

void pn_update(struct pn_node *n, const struct peers_wire_table *t, uint32_t id,
	       const uint8_t ip[4], uint64_t age, uint64_t curr, uint64_t prev, bool timed)
{
	static struct peers_wire_update u;
	uint8_t b[128];
	struct peers_wire_writer w;

	u.has_id = true;
	u.timed = timed;
	u.expire = 60000;
	u.id = id;
	u.key.ptr = ip;
	u.key.len = 4;
	u.f[PEERS_WIRE_DT_HTTP_REQ_RATE] = (struct peers_wire_freq){ age, curr, prev };
	peers_wire_writer_init(&w, b, sizeof(b));
	cr_assert_eq(peers_wire_encode_update(&w, t, &u), 0);
	pn_sendw(n, &w);
}

void pn_up_begin(struct pn_node *n, int port, const char *caller,
		 const struct peers_wire_table *from, const struct peers_wire_table *into)
{
	struct peers_wire_msg m;
	static uint8_t buf[PEERS_WIRE_MSG_MAX];

	pn_open(n, port);
	pn_hello(n, "agg", caller);
	cr_assert_eq(pn_status(n), 200);
	cr_assert(pn_next(n, PN_K(RESYNCREQ), PN_FAR_MS, &m, buf), "the agent asks for our tables");
	pn_ctrl(n, PEERS_WIRE_MSG_RESYNCREQ);
	cr_assert(pn_next(n, PN_K(RESYNCFINISHED), PN_FAR_MS, &m, buf), "our request answered");
	pn_define(n, into);
	pn_define(n, from);
}

void pn_up_end(struct pn_node *n, const struct peers_wire_table *into)
{
	struct peers_wire_msg m;
	static uint8_t buf[PEERS_WIRE_MSG_MAX];
	struct peers_wire_table t;
	enum peers_wire_err err;

	pn_ctrl(n, PEERS_WIRE_MSG_RESYNCFINISHED);
	cr_assert(pn_next(n, PN_K(RESYNCCONFIRM), PN_FAR_MS, &m, buf), "our dump confirmed");
	cr_assert(pn_next(n, PN_K(DEFINE), PN_FAR_MS, &m, buf), "the agent defines the into table");
	cr_assert_gt(peers_wire_define_decode(m.payload, m.len, &t, &err), 0);
	cr_assert_eq(t.name.len, into->name.len);
	cr_assert_eq(memcmp(t.name.ptr, into->name.ptr, t.name.len), 0);
	cr_assert_eq(t.key_type, PEERS_WIRE_KEY_IPV4);
	cr_assert_eq(t.data, PEERS_WIRE_DT_BIT(PEERS_WIRE_DT_HTTP_REQ_RATE));
}

struct peers_wire_freq pn_pushed(struct pn_node *n, const struct peers_wire_table *into,
				 const uint8_t ip[4], int wait_ms)
{
	struct peers_wire_msg m;
	static uint8_t buf[PEERS_WIRE_MSG_MAX];
	static struct peers_wire_update u;
	enum peers_wire_err err;
	struct peers_wire_table t = *into;
	int64_t end = test_now_ms() + wait_ms;

	for (;;) {
		int64_t left = end - test_now_ms();
		cr_assert(left > 0 && pn_next(n, PN_K(UPDATE), (int)left, &m, buf), "a push");
		cr_assert_gt(peers_wire_update_decode(m.type, m.payload, m.len, &t, &u, &err), 0,
			     "%s", peers_wire_err_str(err));
		cr_assert_eq(u.key.len, 4);
		if (!ip || memcmp(u.key.ptr, ip, 4) == 0)
			return u.f[PEERS_WIRE_DT_HTTP_REQ_RATE];
	}
}

void pn_acked(struct pn_node *n, uint64_t table_id, uint32_t id)
{
	struct peers_wire_msg m;
	static uint8_t buf[PEERS_WIRE_MSG_MAX];
	enum peers_wire_err err;
	uint64_t t;
	uint32_t got;

	cr_assert(pn_next(n, PN_K(ACK), PN_FAR_MS, &m, buf), "an ack");
	cr_assert_gt(peers_wire_ack_decode(m.payload, m.len, &t, &got, &err), 0);
	cr_assert_eq(t, table_id);
	cr_assert_eq(got, id);
}
