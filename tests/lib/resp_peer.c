/*
 * resp_peer.c - a hostile RESP peer for store tests. See resp_peer.h for
 * the contract.
 */
#include "tests/lib/resp_peer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Grows *buf to hold need bytes. Returns 0 or -1. */
static int resp_peer_grow(char **buf, size_t *cap, size_t need)
{
	size_t n = *cap ? *cap : 4096;
	char *b;

	if (need <= *cap)
		return 0;
	while (n < need)
		n *= 2;
	b = realloc(*buf, n);
	if (b == NULL)
		return -1;
	*buf = b;
	*cap = n;
	return 0;
}

static void resp_peer_conn_close(struct resp_peer_conn *c)
{
	if (c->fd < 0)
		return;
	ev_io_stop(c->p->loop, &c->io);
	close(c->fd);
	c->fd = -1;
	free(c->in);
	free(c->out);
	c->in = c->out = NULL;
	c->inlen = c->incap = c->outlen = c->outoff = c->outcap = 0;
}

/* Watches for reads, and for writes while something is queued. */
static void resp_peer_conn_watch(struct resp_peer_conn *c)
{
	int want = EV_READ | (c->outoff < c->outlen ? EV_WRITE : 0);

	if ((c->io.events & (EV_READ | EV_WRITE)) == want && ev_is_active(&c->io))
		return;
	ev_io_stop(c->p->loop, &c->io);
	ev_io_set(&c->io, c->fd, want);
	ev_io_start(c->p->loop, &c->io);
}

static int resp_peer_queue(struct resp_peer_conn *c, const char *text, size_t len)
{
	if (c->outoff == c->outlen)
		c->outoff = c->outlen = 0;
	if (resp_peer_grow(&c->out, &c->outcap, c->outlen + len) < 0)
		return -1;
	memcpy(c->out + c->outlen, text, len);
	c->outlen += len;
	resp_peer_conn_watch(c);
	return 0;
}

/* A decimal number ended by CRLF at *pos (below end). Returns 1, 0 when
 * incomplete, -1 when malformed. */
static int resp_peer_number(const char *b, size_t end, size_t *pos, long *out)
{
	long v = 0;
	size_t i = *pos;

	if (i < end && b[i] == '-')
		return -1;
	for (; i < end && b[i] >= '0' && b[i] <= '9'; i++) {
		if (v > 100000000)
			return -1;
		v = v * 10 + (b[i] - '0');
	}
	if (i + 2 > end)
		return 0;
	if (i == *pos || b[i] != '\r' || b[i + 1] != '\n')
		return -1;
	*pos = i + 2;
	*out = v;
	return 1;
}

/* One command at the start of c->in: "*<n>\r\n" then n times
 * "$<len>\r\n<bytes>\r\n". Returns the bytes it takes (argv filled), 0
 * when incomplete, -1 when malformed. */
static long resp_peer_parse(struct resp_peer_conn *c, int *argc, char **argv)
{
	size_t pos = 1;
	long n, len;
	int rc;

	*argc = 0;
	if (c->inlen == 0)
		return 0;
	if (c->in[0] != '*')
		return -1;
	rc = resp_peer_number(c->in, c->inlen, &pos, &n);
	if (rc <= 0)
		return rc;
	for (long i = 0; i < n; i++) {
		if (pos >= c->inlen)
			return 0;
		if (c->in[pos] != '$')
			return -1;
		pos++;
		rc = resp_peer_number(c->in, c->inlen, &pos, &len);
		if (rc <= 0)
			return rc;
		if (c->inlen - pos < (size_t)len + 2)
			return 0;
		if (*argc < RESP_PEER_ARGS) {
			argv[*argc] = strndup(c->in + pos, (size_t)len);
			if (argv[*argc] == NULL)
				return -1;
			(*argc)++;
		}
		pos += (size_t)len + 2;
	}
	return (long)pos;
}

static void resp_peer_args_free(int argc, char **argv)
{
	for (int i = 0; i < argc; i++)
		free(argv[i]);
}

static void resp_peer_on_read(struct resp_peer_conn *c)
{
	struct resp_peer *p = c->p;
	char buf[16384];
	ssize_t got = read(c->fd, buf, sizeof(buf));

	if (got < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (got <= 0) {
		resp_peer_conn_close(c);
		return;
	}
	if (p->seen_len < RESP_PEER_SEEN_MAX) {
		size_t keep = (size_t)got < RESP_PEER_SEEN_MAX - p->seen_len ?
			      (size_t)got : RESP_PEER_SEEN_MAX - p->seen_len;

		memcpy(p->seen + p->seen_len, buf, keep);
		p->seen_len += keep;
	}
	if (resp_peer_grow(&c->in, &c->incap, c->inlen + (size_t)got) < 0) {
		resp_peer_conn_close(c);
		return;
	}
	memcpy(c->in + c->inlen, buf, (size_t)got);
	c->inlen += (size_t)got;
	for (;;) {
		char *argv[RESP_PEER_ARGS];
		const char *answer;
		size_t alen = 0;
		int argc;
		long used = resp_peer_parse(c, &argc, argv);

		if (used <= 0) {
			resp_peer_args_free(argc, argv);
			if (used < 0)
				resp_peer_conn_close(c);
			return;
		}
		memmove(c->in, c->in + used, c->inlen - (size_t)used);
		c->inlen -= (size_t)used;
		p->commands++;
		answer = argc > 0 ? p->answer(p, argc, argv, &alen) : NULL;
		resp_peer_args_free(argc, argv);
		if (answer && alen && resp_peer_queue(c, answer, alen) < 0) {
			resp_peer_conn_close(c);
			return;
		}
	}
}

static void resp_peer_on_write(struct resp_peer_conn *c)
{
	while (c->outoff < c->outlen) {
		ssize_t n = write(c->fd, c->out + c->outoff, c->outlen - c->outoff);

		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			break;
		if (n <= 0) {
			resp_peer_conn_close(c);
			return;
		}
		c->outoff += (size_t)n;
	}
	resp_peer_conn_watch(c);
}

static void resp_peer_on_io(struct ev_loop *loop, ev_io *w, int revents)
{
	struct resp_peer_conn *c = w->data;

	(void)loop;
	if (revents & EV_WRITE)
		resp_peer_on_write(c);
	if (c->fd >= 0 && (revents & EV_READ))
		resp_peer_on_read(c);
}

static void resp_peer_on_accept(struct ev_loop *loop, ev_io *w, int revents)
{
	struct resp_peer *p = w->data;
	int fd = accept4(p->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	size_t i;

	(void)loop;
	(void)revents;
	if (fd < 0)
		return;
	p->connections++;
	for (i = 0; i < RESP_PEER_CONNS && p->conn[i].fd >= 0; i++)
		;
	if (i == RESP_PEER_CONNS) {
		close(fd);
		return;
	}
	p->conn[i].fd = fd;
	ev_io_init(&p->conn[i].io, resp_peer_on_io, fd, EV_READ);
	p->conn[i].io.data = &p->conn[i];
	ev_io_start(p->loop, &p->conn[i].io);
}

int resp_peer_start(struct resp_peer *p, struct ev_loop *loop, resp_peer_answer_fn *answer,
		    void *arg)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	int one = 1;

	memset(p, 0, sizeof(*p));
	p->loop = loop;
	p->answer = answer;
	p->arg = arg;
	for (size_t i = 0; i < RESP_PEER_CONNS; i++) {
		p->conn[i].p = p;
		p->conn[i].fd = -1;
	}
	p->seen = malloc(RESP_PEER_SEEN_MAX);
	p->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (p->seen == NULL || p->fd < 0 ||
	    setsockopt(p->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(p->fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(p->fd, 16) < 0 ||
	    getsockname(p->fd, (struct sockaddr *)&a, &alen) < 0) {
		snprintf(p->err, sizeof(p->err), "listen: %s", strerror(errno));
		resp_peer_stop(p);
		return -1;
	}
	p->port = ntohs(a.sin_port);
	ev_io_init(&p->accept_io, resp_peer_on_accept, p->fd, EV_READ);
	p->accept_io.data = p;
	ev_io_start(loop, &p->accept_io);
	return 0;
}

void resp_peer_stop(struct resp_peer *p)
{
	for (size_t i = 0; i < RESP_PEER_CONNS; i++)
		resp_peer_conn_close(&p->conn[i]);
	if (p->fd >= 0) {
		ev_io_stop(p->loop, &p->accept_io);
		close(p->fd);
		p->fd = -1;
	}
	free(p->seen);
	p->seen = NULL;
	p->seen_len = 0;
}

bool resp_peer_saw(const struct resp_peer *p, const char *needle)
{
	return p->seen && memmem(p->seen, p->seen_len, needle, strlen(needle)) != NULL;
}

int resp_peer_send_all(struct resp_peer *p, const char *text, size_t len)
{
	int n = 0;

	for (size_t i = 0; i < RESP_PEER_CONNS; i++)
		if (p->conn[i].fd >= 0 && resp_peer_queue(&p->conn[i], text, len) == 0)
			n++;
	return n;
}
