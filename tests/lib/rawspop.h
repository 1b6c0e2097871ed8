/*
 * rawspop.h - a small SPOP 2.0 client for protocol tests, written from
 * HAProxy's doc/SPOE.txt independently of spop/: if the project's codec
 * had a bug on both its encode and decode sides, tests built on it would
 * not see it, tests built on this will.
 *
 * Three parts:
 *   - a frame builder that writes bytes into a fixed buffer (any frame,
 *     valid or not: lengths, flags and ids are the caller's choice);
 *   - a strict decoder for what an agent sends (AGENT-HELLO and
 *     AGENT-DISCONNECT KV lists, ACK set-var actions); it fails on any
 *     byte it cannot account for;
 *   - blocking socket helpers with poll() timeouts.
 *
 * Nothing here allocates. Strings decoded from frames are copied,
 * NUL-terminated, into fixed arrays (truncation is reported as an error).
 */
#ifndef RAWSPOP_H
#define RAWSPOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Frame types, flags, data types, scopes, status codes: wire values. */
enum rawspop_frame_type {
	RAWSPOP_HAPROXY_HELLO      = 1,
	RAWSPOP_HAPROXY_DISCONNECT = 2,
	RAWSPOP_NOTIFY             = 3,
	RAWSPOP_AGENT_HELLO        = 101,
	RAWSPOP_AGENT_DISCONNECT   = 102,
	RAWSPOP_ACK                = 103,
};

#define RAWSPOP_FIN   0x00000001u

enum rawspop_type {
	RAWSPOP_T_NULL   = 0,
	RAWSPOP_T_BOOL   = 1,
	RAWSPOP_T_INT32  = 2,
	RAWSPOP_T_UINT32 = 3,
	RAWSPOP_T_INT64  = 4,
	RAWSPOP_T_UINT64 = 5,
	RAWSPOP_T_IPV4   = 6,
	RAWSPOP_T_IPV6   = 7,
	RAWSPOP_T_STRING = 8,
	RAWSPOP_T_BINARY = 9,
};

enum rawspop_scope {
	RAWSPOP_SCOPE_PROC = 0,
	RAWSPOP_SCOPE_SESS = 1,
	RAWSPOP_SCOPE_TXN  = 2,
	RAWSPOP_SCOPE_REQ  = 3,
	RAWSPOP_SCOPE_RES  = 4,
};

#define RAWSPOP_BUF_MAX    (1024 * 1024) /* builder buffer */
#define RAWSPOP_FRAME_MAX  (64 * 1024)   /* largest frame we accept to read */
#define RAWSPOP_NAME_MAX   128           /* KV / variable names, with NUL */
#define RAWSPOP_STR_MAX    256           /* string values, with NUL */
#define RAWSPOP_ITEMS_MAX  1024          /* KV items or actions per frame */

/* ---------------------------------------------------------------- builder */

/* Bytes being built. `overflow` latches when a write would pass the end;
 * the content is then unusable. */
struct rawspop_buf {
	uint8_t b[RAWSPOP_BUF_MAX];
	size_t len;
	bool overflow;
};

void rawspop_buf_reset(struct rawspop_buf *buf);
void rawspop_put_u8(struct rawspop_buf *buf, uint8_t v);
void rawspop_put_u32be(struct rawspop_buf *buf, uint32_t v);
void rawspop_put_bytes(struct rawspop_buf *buf, const void *p, size_t n);
/* HAProxy "peers" varint: 1 to 10 bytes. */
void rawspop_put_varint(struct rawspop_buf *buf, uint64_t v);
/* Untyped string (names): <varint length><bytes>. */
void rawspop_put_name(struct rawspop_buf *buf, const char *s);
void rawspop_put_name_n(struct rawspop_buf *buf, const void *s, size_t n);

/* Typed data. */
void rawspop_put_null(struct rawspop_buf *buf);
void rawspop_put_bool(struct rawspop_buf *buf, bool v);
/* type is one of INT32, UINT32, INT64, UINT64; the value is sent as the
 * varint of its 64-bit two's complement, as HAProxy does. */
void rawspop_put_int(struct rawspop_buf *buf, enum rawspop_type type, int64_t v);
void rawspop_put_ipv4(struct rawspop_buf *buf, const uint8_t addr[4]);
void rawspop_put_ipv6(struct rawspop_buf *buf, const uint8_t addr[16]);
void rawspop_put_string(struct rawspop_buf *buf, const char *s);
void rawspop_put_binary(struct rawspop_buf *buf, const void *p, size_t n);

/* Frame header: writes a placeholder length, type, flags (big-endian) and
 * the two varint ids. Returns the offset to hand to rawspop_frame_end(),
 * which writes the length (bytes after the length field). */
size_t rawspop_frame_begin(struct rawspop_buf *buf, uint8_t type, uint32_t flags,
			   uint64_t stream_id, uint64_t frame_id);
void rawspop_frame_end(struct rawspop_buf *buf, size_t start);

/* A HAPROXY-HELLO. NULL strings and a negative max_frame_size leave the
 * item out, so incomplete HELLOs can be built too. */
struct rawspop_hello_opts {
	const char *versions;        /* "2.0" */
	int64_t max_frame_size;      /* sent as UINT32; < 0: omitted */
	const char *capabilities;    /* "pipelining,async" */
	const char *engine_id;       /* NULL: omitted */
	bool healthcheck;            /* sends healthcheck=true when set */
};
/* The options HAProxy 2.6 sends by default (max-frame-size 16380). */
struct rawspop_hello_opts rawspop_hello_defaults(void);
void rawspop_hello(struct rawspop_buf *buf, const struct rawspop_hello_opts *o);

/* HAPROXY-DISCONNECT with status-code and message. */
void rawspop_disconnect(struct rawspop_buf *buf, uint32_t status, const char *msg);

/* NOTIFY, built in steps:
 *   start = rawspop_notify_begin(buf, sid, fid);
 *   rawspop_msg(buf, "ratelimit", 2);
 *   rawspop_arg_str(buf, "key", "abc"); rawspop_arg_int(buf, "window", 60);
 *   rawspop_frame_end(buf, start);
 * nargs is written as given (it may lie, on purpose). */
size_t rawspop_notify_begin(struct rawspop_buf *buf, uint64_t stream_id, uint64_t frame_id);
void rawspop_msg(struct rawspop_buf *buf, const char *name, uint8_t nargs);
void rawspop_arg_str(struct rawspop_buf *buf, const char *name, const char *v);
void rawspop_arg_int(struct rawspop_buf *buf, const char *name, int64_t v);
/* An argument of type NULL (HAProxy's var() of a variable not set). */
void rawspop_arg_null(struct rawspop_buf *buf, const char *name);

/* ---------------------------------------------------------------- decoder */

/* One typed value, copied out of the frame. Integer types all land in i
 * (the varint reinterpreted as int64, as HAProxy does). */
struct rawspop_value {
	uint8_t type;                 /* enum rawspop_type */
	bool b;
	int64_t i;
	uint8_t ip[16];
	char s[RAWSPOP_STR_MAX];      /* STRING / BINARY bytes, NUL-terminated */
	size_t s_len;
};

/* A frame read off the wire: its bytes (length prefix included) and the
 * decoded header. payload points into raw. */
struct rawspop_frame {
	uint8_t raw[RAWSPOP_FRAME_MAX + 4];
	size_t raw_len;               /* 4 + length */
	uint32_t length;              /* the length field */
	uint8_t type;
	uint32_t flags;
	uint64_t stream_id;
	uint64_t frame_id;
	const uint8_t *payload;
	size_t payload_len;
};

struct rawspop_kv {
	char name[RAWSPOP_NAME_MAX];
	struct rawspop_value value;
};

struct rawspop_kvs {
	struct rawspop_kv items[RAWSPOP_ITEMS_MAX];
	size_t n;
};

struct rawspop_action {
	uint8_t type;                 /* 1 set-var, 2 unset-var */
	uint8_t scope;
	char name[RAWSPOP_NAME_MAX];
	struct rawspop_value value;   /* set-var only */
};

struct rawspop_actions {
	struct rawspop_action items[RAWSPOP_ITEMS_MAX];
	size_t n;
};

/* Decodes a HAProxy varint from p[0..len). Returns bytes used (1..10),
 * or 0 when the input ends first or the varint is longer than 10 bytes. */
size_t rawspop_get_varint(const uint8_t *p, size_t len, uint64_t *v);

/* Decodes the header of the frame in f->raw[0..f->raw_len); the length
 * field must match raw_len. Returns 0, or -1 with a reason in err. */
int rawspop_decode_header(struct rawspop_frame *f, char *err, size_t errlen);

/* Decodes a KV-list payload (AGENT-HELLO, AGENT-DISCONNECT). Every byte
 * must belong to an item. Returns 0, or -1 with a reason in err. */
int rawspop_decode_kvs(const struct rawspop_frame *f, struct rawspop_kvs *out,
		       char *err, size_t errlen);

/* Decodes an ACK's list of actions (set-var with 3 args, unset-var with
 * 2). Returns 0, or -1 with a reason in err. */
int rawspop_decode_actions(const struct rawspop_frame *f, struct rawspop_actions *out,
			   char *err, size_t errlen);

/* Lookups: NULL when absent. */
const struct rawspop_kv *rawspop_kv_find(const struct rawspop_kvs *kvs, const char *name);
const struct rawspop_action *rawspop_var_find(const struct rawspop_actions *acts,
					      const char *name);
/* true if the type is one of the four integer types */
bool rawspop_is_int(uint8_t type);
/* "%02x " dump of n bytes into out (truncated to outlen). */
void rawspop_hex(const uint8_t *p, size_t n, char *out, size_t outlen);

/* ---------------------------------------------------------------- sockets */

/* Connects to 127.0.0.1:port within timeout_ms; TCP_NODELAY set.
 * Returns the fd or -1. */
int rawspop_connect(int port, int timeout_ms);

/* Writes all n bytes (retrying short writes). Returns 0 or -1 (errno). */
int rawspop_send(int fd, const void *p, size_t n);
int rawspop_send_buf(int fd, const struct rawspop_buf *buf);

enum rawspop_read_res {
	RAWSPOP_READ_FRAME   = 1,   /* a whole frame is in f */
	RAWSPOP_READ_EOF     = 0,   /* orderly close before any byte of a frame */
	RAWSPOP_READ_ERROR   = -1,  /* error, or close/reset inside a frame */
	RAWSPOP_READ_TIMEOUT = -2,  /* the frame did not complete in time */
	RAWSPOP_READ_TOOBIG  = -3,  /* length field above RAWSPOP_FRAME_MAX */
	RAWSPOP_READ_RESET   = -4,  /* ECONNRESET before any byte of a frame */
};

/* Reads exactly one frame (its 4-byte length, then that many bytes),
 * waiting at most timeout_ms overall, and decodes its header. A frame
 * whose header does not decode counts as RAWSPOP_READ_ERROR with the
 * raw bytes left in f. */
enum rawspop_read_res rawspop_read_frame(int fd, struct rawspop_frame *f, int timeout_ms);

/* Waits for the peer to close: returns 0 on EOF or ECONNRESET, 1 if data
 * arrived instead (it is consumed), -1 on timeout. */
int rawspop_wait_close(int fd, int timeout_ms);

#endif /* RAWSPOP_H */
