/*
 * spop-t.h - types of the SPOP 2.0 codec (HAProxy's Stream Processing Offload
 * Protocol, doc/SPOE.txt). Wire values are the enum values.
 *
 * Frame on the wire:
 *
 *   +-----------+------+-----------+-----------+----------+---------...
 *   | LENGTH:4  | TYPE | FLAGS:4   | STREAM-ID | FRAME-ID | PAYLOAD
 *   | big-end.  | 1 B  | big-end.  | varint    | varint   |
 *   +-----------+------+-----------+-----------+----------+---------...
 *   LENGTH counts every byte after itself.
 */
#ifndef SPOP_T_H
#define SPOP_T_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SPOP_VERSION            "2.0"
#define SPOP_MIN_FRAME_SIZE     256u      /* smallest max-frame-size allowed */
#define SPOP_DEFAULT_FRAME_SIZE 16380u    /* HAProxy: tune.bufsize - 4 */
#define SPOP_VARINT_MAX         10u       /* a 64-bit varint never exceeds this */
#define SPOP_LEN_SIZE           4u        /* the length prefix */
#define SPOP_MIN_FRAME_LEN      7u        /* type + flags + two 1-byte ids */
#define SPOP_MAX_ARGS           255u      /* NB-ARGS is one byte */

/* Frame types (SPOE.txt 3.2.2). */
#define SPOP_FRAME_TYPES(X)                  \
	X(UNSET,              0,   "unset")          \
	X(HAPROXY_HELLO,      1,   "haproxy-hello")  \
	X(HAPROXY_DISCONNECT, 2,   "haproxy-disconnect") \
	X(NOTIFY,             3,   "notify")         \
	X(AGENT_HELLO,        101, "agent-hello")    \
	X(AGENT_DISCONNECT,   102, "agent-disconnect") \
	X(ACK,                103, "ack")

enum spop_frame_type {
#define X(name, code, str) SPOP_FRAME_##name = code,
	SPOP_FRAME_TYPES(X)
#undef X
};

/* Frame flags (network order on the wire). */
#define SPOP_FL_FIN   0x00000001u
#define SPOP_FL_ABORT 0x00000002u

/* Status codes of DISCONNECT frames; decoders report failures with these. */
#define SPOP_ERRORS(X)                                              \
	X(NONE,          0,  "normal")                                      \
	X(IO,            1,  "I/O error")                                   \
	X(TIMEOUT,       2,  "a timeout occurred")                          \
	X(TOO_BIG,       3,  "frame is too big")                            \
	X(INVALID,       4,  "invalid frame received")                      \
	X(NO_VSN,        5,  "version value not found")                     \
	X(NO_FRAME_SIZE, 6,  "max-frame-size value not found")              \
	X(NO_CAP,        7,  "capabilities value not found")                \
	X(BAD_VSN,       8,  "unsupported version")                         \
	X(BAD_FRAME_SIZE, 9, "max-frame-size too big or too small")         \
	X(FRAG_NOT_SUPPORTED, 10, "payload fragmentation is not supported") \
	X(INTERLACED,    11, "invalid interlaced frames")                   \
	X(FRAMEID_NOTFOUND, 12, "frame-id not found")                      \
	X(RES,           13, "resource allocation error")                   \
	X(UNKNOWN,       99, "an unknown error occurred")

enum spop_err {
#define X(name, code, str) SPOP_ERR_##name = code,
	SPOP_ERRORS(X)
#undef X
};

/* Typed data: type in the low nibble, flags in the high nibble. */
enum spop_data_type {
	SPOP_DATA_NULL   = 0,
	SPOP_DATA_BOOL   = 1,
	SPOP_DATA_INT32  = 2,
	SPOP_DATA_UINT32 = 3,
	SPOP_DATA_INT64  = 4,
	SPOP_DATA_UINT64 = 5,
	SPOP_DATA_IPV4   = 6,
	SPOP_DATA_IPV6   = 7,
	SPOP_DATA_STRING = 8,
	SPOP_DATA_BINARY = 9,
	SPOP_DATA_TYPE_COUNT
};
#define SPOP_DATA_T_MASK  0x0Fu
#define SPOP_DATA_FL_TRUE 0x10u

/* Variable scopes of set-var / unset-var actions. */
enum spop_scope {
	SPOP_SCOPE_PROC = 0,
	SPOP_SCOPE_SESS = 1,
	SPOP_SCOPE_TXN  = 2,
	SPOP_SCOPE_REQ  = 3,
	SPOP_SCOPE_RES  = 4,
	SPOP_SCOPE_COUNT
};

enum spop_action_type {
	SPOP_ACT_SET_VAR   = 1,   /* 3 args: scope, name, value */
	SPOP_ACT_UNSET_VAR = 2,   /* 2 args: scope, name */
};

/* A view into caller memory: never NUL-terminated, never owned. */
struct spop_str {
	const char *ptr;
	size_t len;
};

/* One typed value. Integers: INT32/INT64 use .i, UINT32/UINT64 use .u.
 * STRING/BINARY point into the decoded input. */
struct spop_data {
	enum spop_data_type type;
	union {
		bool b;
		int64_t i;
		uint64_t u;
		uint8_t ipv4[4];
		uint8_t ipv6[16];
		struct spop_str str;
	} v;
};

/* A decoded frame header; payload points into the input buffer. */
struct spop_frame {
	enum spop_frame_type type;
	uint32_t flags;
	uint64_t stream_id;
	uint64_t frame_id;
	const uint8_t *payload;
	size_t payload_len;
};

/* Name + value, used for HELLO/DISCONNECT items and message arguments
 * (argument names may be empty). */
struct spop_kv {
	struct spop_str name;
	struct spop_data value;
};

/* One message of a NOTIFY. args/args_len cover exactly its nargs
 * arguments, already validated: iterate them with spop_args_next(). */
struct spop_msg {
	struct spop_str name;
	unsigned nargs;
	const uint8_t *args;
	size_t args_len;
};

/* Cursor over a payload (message list, argument list or KV list). */
struct spop_cursor {
	const uint8_t *p;
	const uint8_t *end;
	unsigned left;          /* arguments left (spop_args_next only) */
	enum spop_err err;      /* set when a call returns -1 */
};

/* What a HAPROXY-HELLO says. Strings point into the frame. */
struct spop_hello {
	struct spop_str supported_versions;
	struct spop_str capabilities;
	struct spop_str engine_id;
	uint64_t max_frame_size;
	bool has_versions;
	bool has_max_frame_size;
	bool has_capabilities;
	bool healthcheck;
};

/* What a DISCONNECT says. */
struct spop_disconnect {
	uint32_t status_code;
	struct spop_str message;
	bool has_status_code;
};

/* Output buffer for encoders: caller memory of fixed capacity. Encoders
 * append; once an append does not fit, `overflow` sticks and nothing more
 * is written, so a caller checks once at the end. */
struct spop_writer {
	uint8_t *buf;
	size_t cap;
	size_t len;
	bool overflow;
};

#endif /* SPOP_T_H */
