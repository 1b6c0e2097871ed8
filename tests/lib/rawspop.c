/*
 * rawspop.c - an independent SPOP 2.0 client for protocol tests (see
 * rawspop.h). Written from doc/SPOE.txt; shares no code with spop/.
 */
#include "tests/lib/rawspop.h"
#include "tests/lib/clock.h"
#include "tests/lib/port.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

/* ---------------------------------------------------------------- builder */

void rawspop_buf_reset(struct rawspop_buf *buf)
{
	buf->len = 0;
	buf->overflow = false;
}

void rawspop_put_bytes(struct rawspop_buf *buf, const void *p, size_t n)
{
	if (buf->overflow || n > sizeof(buf->b) - buf->len) {
		buf->overflow = true;
		return;
	}
	if (n)
		memcpy(buf->b + buf->len, p, n);
	buf->len += n;
}

void rawspop_put_u8(struct rawspop_buf *buf, uint8_t v)
{
	rawspop_put_bytes(buf, &v, 1);
}

void rawspop_put_u32be(struct rawspop_buf *buf, uint32_t v)
{
	uint8_t b[4] = { (uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v };

	rawspop_put_bytes(buf, b, 4);
}

/*
 * Peers varint. Values below 240 are one byte. Otherwise the first byte
 * is 1111xxxx holding the low 4 bits (plus the 240 offset), and each
 * following byte carries 7 bits, high bit set while more bytes follow:
 *
 *   [1111 XXXX] [1XXX XXXX]* [0XXX XXXX]
 */
void rawspop_put_varint(struct rawspop_buf *buf, uint64_t v)
{
	uint8_t b[10];
	size_t n = 0;

	if (v < 240) {
		rawspop_put_u8(buf, (uint8_t)v);
		return;
	}
	b[n++] = (uint8_t)v | 240;
	v = (v - 240) >> 4;
	while (v >= 128) {
		b[n++] = (uint8_t)v | 128;
		v = (v - 128) >> 7;
	}
	b[n++] = (uint8_t)v;
	rawspop_put_bytes(buf, b, n);
}

void rawspop_put_name_n(struct rawspop_buf *buf, const void *s, size_t n)
{
	rawspop_put_varint(buf, n);
	rawspop_put_bytes(buf, s, n);
}

void rawspop_put_name(struct rawspop_buf *buf, const char *s)
{
	rawspop_put_name_n(buf, s, strlen(s));
}

void rawspop_put_null(struct rawspop_buf *buf)
{
	rawspop_put_u8(buf, RAWSPOP_T_NULL);
}

void rawspop_put_bool(struct rawspop_buf *buf, bool v)
{
	rawspop_put_u8(buf, (uint8_t)(RAWSPOP_T_BOOL | (v ? 0x10 : 0x00)));
}

void rawspop_put_int(struct rawspop_buf *buf, enum rawspop_type type, int64_t v)
{
	rawspop_put_u8(buf, (uint8_t)type);
	rawspop_put_varint(buf, (uint64_t)v);
}

void rawspop_put_ipv4(struct rawspop_buf *buf, const uint8_t addr[4])
{
	rawspop_put_u8(buf, RAWSPOP_T_IPV4);
	rawspop_put_bytes(buf, addr, 4);
}

void rawspop_put_ipv6(struct rawspop_buf *buf, const uint8_t addr[16])
{
	rawspop_put_u8(buf, RAWSPOP_T_IPV6);
	rawspop_put_bytes(buf, addr, 16);
}

void rawspop_put_string(struct rawspop_buf *buf, const char *s)
{
	rawspop_put_u8(buf, RAWSPOP_T_STRING);
	rawspop_put_name(buf, s);
}

void rawspop_put_binary(struct rawspop_buf *buf, const void *p, size_t n)
{
	rawspop_put_u8(buf, RAWSPOP_T_BINARY);
	rawspop_put_name_n(buf, p, n);
}

size_t rawspop_frame_begin(struct rawspop_buf *buf, uint8_t type, uint32_t flags,
			   uint64_t stream_id, uint64_t frame_id)
{
	size_t start = buf->len;

	rawspop_put_u32be(buf, 0);
	rawspop_put_u8(buf, type);
	rawspop_put_u32be(buf, flags);
	rawspop_put_varint(buf, stream_id);
	rawspop_put_varint(buf, frame_id);
	return start;
}

void rawspop_frame_end(struct rawspop_buf *buf, size_t start)
{
	uint32_t n;

	if (buf->overflow || buf->len < start + 4)
		return;
	n = (uint32_t)(buf->len - start - 4);
	buf->b[start] = (uint8_t)(n >> 24);
	buf->b[start + 1] = (uint8_t)(n >> 16);
	buf->b[start + 2] = (uint8_t)(n >> 8);
	buf->b[start + 3] = (uint8_t)n;
}

struct rawspop_hello_opts rawspop_hello_defaults(void)
{
	struct rawspop_hello_opts o = {
		.versions = "2.0",
		.max_frame_size = 16380,
		.capabilities = "pipelining,async",
		.engine_id = "5b2a3c1e-0d4f-4a8b-9c6d-7e8f90a1b2c3",
		.healthcheck = false,
	};
	return o;
}

void rawspop_hello(struct rawspop_buf *buf, const struct rawspop_hello_opts *o)
{
	size_t start = rawspop_frame_begin(buf, RAWSPOP_HAPROXY_HELLO, RAWSPOP_FIN, 0, 0);

	if (o->versions) {
		rawspop_put_name(buf, "supported-versions");
		rawspop_put_string(buf, o->versions);
	}
	if (o->max_frame_size >= 0) {
		rawspop_put_name(buf, "max-frame-size");
		rawspop_put_int(buf, RAWSPOP_T_UINT32, o->max_frame_size);
	}
	if (o->capabilities) {
		rawspop_put_name(buf, "capabilities");
		rawspop_put_string(buf, o->capabilities);
	}
	if (o->healthcheck) {
		rawspop_put_name(buf, "healthcheck");
		rawspop_put_bool(buf, true);
	}
	if (o->engine_id) {
		rawspop_put_name(buf, "engine-id");
		rawspop_put_string(buf, o->engine_id);
	}
	rawspop_frame_end(buf, start);
}

void rawspop_disconnect(struct rawspop_buf *buf, uint32_t status, const char *msg)
{
	size_t start = rawspop_frame_begin(buf, RAWSPOP_HAPROXY_DISCONNECT, RAWSPOP_FIN, 0, 0);

	rawspop_put_name(buf, "status-code");
	rawspop_put_int(buf, RAWSPOP_T_UINT32, status);
	rawspop_put_name(buf, "message");
	rawspop_put_string(buf, msg);
	rawspop_frame_end(buf, start);
}

size_t rawspop_notify_begin(struct rawspop_buf *buf, uint64_t stream_id, uint64_t frame_id)
{
	return rawspop_frame_begin(buf, RAWSPOP_NOTIFY, RAWSPOP_FIN, stream_id, frame_id);
}

void rawspop_msg(struct rawspop_buf *buf, const char *name, uint8_t nargs)
{
	rawspop_put_name(buf, name);
	rawspop_put_u8(buf, nargs);
}

void rawspop_arg_str(struct rawspop_buf *buf, const char *name, const char *v)
{
	rawspop_put_name(buf, name);
	rawspop_put_string(buf, v);
}

void rawspop_arg_int(struct rawspop_buf *buf, const char *name, int64_t v)
{
	rawspop_put_name(buf, name);
	rawspop_put_int(buf, RAWSPOP_T_INT64, v);
}

void rawspop_arg_null(struct rawspop_buf *buf, const char *name)
{
	rawspop_put_name(buf, name);
	rawspop_put_u8(buf, RAWSPOP_T_NULL);
}

/* ---------------------------------------------------------------- decoder */

static void seterr(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

size_t rawspop_get_varint(const uint8_t *p, size_t len, uint64_t *v)
{
	uint64_t r;
	unsigned shift = 4;
	size_t i = 1;

	if (len < 1)
		return 0;
	r = p[0];
	if (r < 240) {
		*v = r;
		return 1;
	}
	for (;;) {
		if (i >= len || i >= 10)
			return 0;
		r += (uint64_t)p[i] << shift;
		shift += 7;
		if (p[i++] < 128)
			break;
	}
	*v = r;
	return i;
}

/* A read cursor over [p, end). */
struct rd {
	const uint8_t *p;
	const uint8_t *end;
};

static int rd_varint(struct rd *r, uint64_t *v)
{
	size_t n = rawspop_get_varint(r->p, (size_t)(r->end - r->p), v);

	if (!n)
		return -1;
	r->p += n;
	return 0;
}

/* An untyped string copied into out[outlen] (NUL-terminated). */
static int rd_name(struct rd *r, char *out, size_t outlen, char *err, size_t errlen)
{
	uint64_t n;

	if (rd_varint(r, &n) < 0) {
		seterr(err, errlen, "bad name length varint");
		return -1;
	}
	if (n > (uint64_t)(r->end - r->p)) {
		seterr(err, errlen, "name length %llu past the end of the frame",
		       (unsigned long long)n);
		return -1;
	}
	if (n >= outlen) {
		seterr(err, errlen, "name of %llu bytes too long for the test client",
		       (unsigned long long)n);
		return -1;
	}
	memcpy(out, r->p, (size_t)n);
	out[n] = '\0';
	r->p += n;
	return 0;
}

static int rd_value(struct rd *r, struct rawspop_value *v, char *err, size_t errlen)
{
	uint8_t t;
	uint64_t n;

	memset(v, 0, sizeof(*v));
	if (r->p >= r->end) {
		seterr(err, errlen, "value missing at the end of the frame");
		return -1;
	}
	t = *r->p++;
	v->type = t & 0x0F;
	if ((t & 0xF0) && v->type != RAWSPOP_T_BOOL) {
		seterr(err, errlen, "type byte 0x%02x has flags on a non-bool", t);
		return -1;
	}
	switch (v->type) {
	case RAWSPOP_T_NULL:
		return 0;
	case RAWSPOP_T_BOOL:
		if (t & 0xE0) {
			seterr(err, errlen, "bool byte 0x%02x has unknown flags", t);
			return -1;
		}
		v->b = (t & 0x10) != 0;
		return 0;
	case RAWSPOP_T_INT32:
	case RAWSPOP_T_UINT32:
	case RAWSPOP_T_INT64:
	case RAWSPOP_T_UINT64:
		if (rd_varint(r, &n) < 0) {
			seterr(err, errlen, "bad integer varint");
			return -1;
		}
		v->i = (int64_t)n;
		return 0;
	case RAWSPOP_T_IPV4:
	case RAWSPOP_T_IPV6: {
		size_t sz = v->type == RAWSPOP_T_IPV4 ? 4 : 16;

		if ((size_t)(r->end - r->p) < sz) {
			seterr(err, errlen, "address past the end of the frame");
			return -1;
		}
		memcpy(v->ip, r->p, sz);
		r->p += sz;
		return 0;
	}
	case RAWSPOP_T_STRING:
	case RAWSPOP_T_BINARY:
		if (rd_name(r, v->s, sizeof(v->s), err, errlen) < 0)
			return -1;
		v->s_len = strlen(v->s);
		return 0;
	default:
		seterr(err, errlen, "unknown data type %u", v->type);
		return -1;
	}
}

int rawspop_decode_header(struct rawspop_frame *f, char *err, size_t errlen)
{
	struct rd r;

	if (f->raw_len < 4) {
		seterr(err, errlen, "fewer than 4 bytes");
		return -1;
	}
	f->length = (uint32_t)f->raw[0] << 24 | (uint32_t)f->raw[1] << 16 |
		    (uint32_t)f->raw[2] << 8 | f->raw[3];
	if ((size_t)f->length + 4 != f->raw_len) {
		seterr(err, errlen, "length field %u but %zu bytes follow it",
		       f->length, f->raw_len - 4);
		return -1;
	}
	if (f->length < 7) {
		seterr(err, errlen, "frame of %u bytes is below the 7-byte minimum", f->length);
		return -1;
	}
	f->type = f->raw[4];
	f->flags = (uint32_t)f->raw[5] << 24 | (uint32_t)f->raw[6] << 16 |
		   (uint32_t)f->raw[7] << 8 | f->raw[8];
	r.p = f->raw + 9;
	r.end = f->raw + f->raw_len;
	if (rd_varint(&r, &f->stream_id) < 0 || rd_varint(&r, &f->frame_id) < 0) {
		seterr(err, errlen, "bad stream-id / frame-id varint");
		return -1;
	}
	f->payload = r.p;
	f->payload_len = (size_t)(r.end - r.p);
	return 0;
}

int rawspop_decode_kvs(const struct rawspop_frame *f, struct rawspop_kvs *out,
		       char *err, size_t errlen)
{
	struct rd r = { f->payload, f->payload + f->payload_len };

	out->n = 0;
	while (r.p < r.end) {
		struct rawspop_kv *kv;

		if (out->n == RAWSPOP_ITEMS_MAX) {
			seterr(err, errlen, "more than %d KV items", RAWSPOP_ITEMS_MAX);
			return -1;
		}
		kv = &out->items[out->n];
		if (rd_name(&r, kv->name, sizeof(kv->name), err, errlen) < 0)
			return -1;
		if (rd_value(&r, &kv->value, err, errlen) < 0)
			return -1;
		out->n++;
	}
	return 0;
}

/*
 *   ACTION-SET-VAR   : <1:1 byte><3:1 byte><SCOPE:1 byte><NAME><TYPED-DATA>
 *   ACTION-UNSET-VAR : <2:1 byte><2:1 byte><SCOPE:1 byte><NAME>
 */
int rawspop_decode_actions(const struct rawspop_frame *f, struct rawspop_actions *out,
			   char *err, size_t errlen)
{
	struct rd r = { f->payload, f->payload + f->payload_len };

	out->n = 0;
	while (r.p < r.end) {
		struct rawspop_action *a;
		uint8_t nargs;

		if (out->n == RAWSPOP_ITEMS_MAX) {
			seterr(err, errlen, "more than %d actions", RAWSPOP_ITEMS_MAX);
			return -1;
		}
		a = &out->items[out->n];
		memset(a, 0, sizeof(*a));
		if (r.end - r.p < 3) {
			seterr(err, errlen, "truncated action header at payload offset %zu",
			       (size_t)(r.p - f->payload));
			return -1;
		}
		a->type = *r.p++;
		nargs = *r.p++;
		a->scope = *r.p++;
		if (a->type == 1 && nargs != 3) {
			seterr(err, errlen, "set-var with nb-args %u", nargs);
			return -1;
		}
		if (a->type == 2 && nargs != 2) {
			seterr(err, errlen, "unset-var with nb-args %u", nargs);
			return -1;
		}
		if (a->type != 1 && a->type != 2) {
			seterr(err, errlen, "unknown action type %u", a->type);
			return -1;
		}
		if (a->scope > RAWSPOP_SCOPE_RES) {
			seterr(err, errlen, "unknown scope %u", a->scope);
			return -1;
		}
		if (rd_name(&r, a->name, sizeof(a->name), err, errlen) < 0)
			return -1;
		if (a->type == 1 && rd_value(&r, &a->value, err, errlen) < 0)
			return -1;
		out->n++;
	}
	return 0;
}

const struct rawspop_kv *rawspop_kv_find(const struct rawspop_kvs *kvs, const char *name)
{
	for (size_t i = 0; i < kvs->n; i++)
		if (!strcmp(kvs->items[i].name, name))
			return &kvs->items[i];
	return NULL;
}

const struct rawspop_action *rawspop_var_find(const struct rawspop_actions *acts,
					      const char *name)
{
	for (size_t i = 0; i < acts->n; i++)
		if (acts->items[i].type == 1 && !strcmp(acts->items[i].name, name))
			return &acts->items[i];
	return NULL;
}

bool rawspop_is_int(uint8_t type)
{
	return type == RAWSPOP_T_INT32 || type == RAWSPOP_T_UINT32 ||
	       type == RAWSPOP_T_INT64 || type == RAWSPOP_T_UINT64;
}

void rawspop_hex(const uint8_t *p, size_t n, char *out, size_t outlen)
{
	size_t o = 0;

	if (!outlen)
		return;
	out[0] = '\0';
	for (size_t i = 0; i < n && o + 4 < outlen; i++)
		o += (size_t)snprintf(out + o, outlen - o, "%02x ", p[i]);
	if (o && out[o - 1] == ' ')
		out[o - 1] = '\0';
}

/* ---------------------------------------------------------------- sockets */

int rawspop_connect(int port, int timeout_ms)
{
	struct sockaddr_in sa;
	int fd, one = 1, flags, soerr = 0;
	socklen_t sl = sizeof(soerr);
	struct pollfd pfd;

	fd = test_loopback_socket(&sa, port);
	if (fd < 0)
		return -1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	flags = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, flags | O_NONBLOCK);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (errno != EINPROGRESS)
			goto fail;
		pfd.fd = fd;
		pfd.events = POLLOUT;
		if (poll(&pfd, 1, timeout_ms) != 1)
			goto fail;
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 || soerr) {
			errno = soerr ? soerr : errno;
			goto fail;
		}
	}
	fcntl(fd, F_SETFL, flags);
	return fd;
fail:
	close(fd);
	return -1;
}

int rawspop_send(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

int rawspop_send_buf(int fd, const struct rawspop_buf *buf)
{
	if (buf->overflow) {
		errno = ENOBUFS;
		return -1;
	}
	return rawspop_send(fd, buf->b, buf->len);
}

/* Reads exactly n bytes before the deadline. Returns n, the (short)
 * count read when the peer closed, -1 on error, -2 on timeout. */
static ssize_t read_exact(int fd, uint8_t *p, size_t n, int64_t deadline)
{
	size_t got = 0;

	while (got < n) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int64_t left = deadline - test_now_ms();
		ssize_t r;
		int pr;

		if (left <= 0)
			return -2;
		pr = poll(&pfd, 1, (int)left);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr < 0)
			return -1;
		if (pr == 0)
			return -2;
		r = recv(fd, p + got, n - got, 0);
		if (r < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -1;
		}
		if (r == 0)
			return (ssize_t)got;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

enum rawspop_read_res rawspop_read_frame(int fd, struct rawspop_frame *f, int timeout_ms)
{
	int64_t deadline = test_now_ms() + timeout_ms;
	ssize_t r;
	uint32_t len;

	f->raw_len = 0;
	r = read_exact(fd, f->raw, 4, deadline);
	if (r == -2)
		return RAWSPOP_READ_TIMEOUT;
	if (r < 0)
		return errno == ECONNRESET ? RAWSPOP_READ_RESET : RAWSPOP_READ_ERROR;
	f->raw_len = (size_t)r;
	if (r == 0)
		return RAWSPOP_READ_EOF;
	if (r < 4)
		return RAWSPOP_READ_ERROR;
	len = (uint32_t)f->raw[0] << 24 | (uint32_t)f->raw[1] << 16 |
	      (uint32_t)f->raw[2] << 8 | f->raw[3];
	f->length = len;
	if (len > RAWSPOP_FRAME_MAX)
		return RAWSPOP_READ_TOOBIG;
	r = read_exact(fd, f->raw + 4, len, deadline);
	if (r == -2)
		return RAWSPOP_READ_TIMEOUT;
	if (r < 0)
		return RAWSPOP_READ_ERROR;
	f->raw_len = 4 + (size_t)r;
	if ((size_t)r < len)
		return RAWSPOP_READ_ERROR;
	if (rawspop_decode_header(f, NULL, 0) < 0)
		return RAWSPOP_READ_ERROR;
	return RAWSPOP_READ_FRAME;
}

int rawspop_wait_close(int fd, int timeout_ms)
{
	int64_t deadline = test_now_ms() + timeout_ms;

	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int64_t left = deadline - test_now_ms();
		uint8_t b[512];
		ssize_t r;
		int pr;

		if (left <= 0)
			return -1;
		pr = poll(&pfd, 1, (int)left);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			return -1;
		r = recv(fd, b, sizeof(b), 0);
		if (r == 0)
			return 0;
		if (r < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return errno == ECONNRESET ? 0 : -1;
		}
		return 1;
	}
}
