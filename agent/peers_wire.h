/*
 * peers_wire.h - a pure codec of HAProxy's peers protocol (version 2.1,
 * HAProxy's src/peers.c; docs/PEERS.md): the hello and its status line,
 * the message header, the control and error messages, and the stick-table
 * messages (DEFINE, SWITCH, UPDATE and its incremental and timed forms,
 * ACK) with every key type and data type HAProxy 2.6 and 3.4 put on the
 * wire.
 *
 * Pure, as spop/ (docs/STYLE.md, rule 2): no allocation, no I/O, no clock,
 * no logging; it includes nothing of ours. Decoders take (p, len) of
 * caller memory; decoded strings and keys are views into that memory.
 * Encoders append to a struct peers_wire_writer of fixed capacity and fail
 * cleanly when it is full: the writer is then as it was before the call.
 *
 * A stream reader returns the bytes consumed (> 0), 0 for "need more", or
 * -1 with an enum peers_wire_err. A payload decoder works on a payload that
 * is complete (its message was): it never answers "need more", and
 * anything that runs past the payload's end is PEERS_WIRE_ERR_TRUNCATED.
 * Each error says what HAProxy does with such input (below): close the
 * session, answer a status, or ignore a table definition and keep going.
 */
#ifndef PEERS_WIRE_H
#define PEERS_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PEERS_WIRE_PROTO       "HAProxyS"  /* line 1 of a hello: "HAProxyS 2.1" */
#define PEERS_WIRE_MAJOR       2u
#define PEERS_WIRE_MINOR       1u          /* 0: the peer is "downgraded", no timed updates */
#define PEERS_WIRE_MSG_MAX     16384u      /* HAProxy's tune.bufsize: a longer payload gets 01 01 */
#define PEERS_WIRE_LEN_MAX     5u          /* bytes of a message's length varint */
#define PEERS_WIRE_VARINT_MAX  10u         /* bytes of a 64-bit varint */
#define PEERS_WIRE_LINE_MAX    512u        /* bytes of a hello or status line, LF included */
#define PEERS_WIRE_ARRAY_MAX   100u        /* elements of gpt / gpc / gpc_rate (STKTABLE_MAX_DT_ARRAY_SIZE) */
#define PEERS_WIRE_DICT_MAX    128u        /* server_key cache ids: 1..128 (PEER_STKT_CACHE_MAX_ENTRIES) */

/* Status codes of the line that answers a hello. HAProxy dials again only
 * after 200 (or a connect that failed): any other code, sent once, stops
 * that node from ever calling back. */
#define PEERS_WIRE_STATUS_OK          200u
#define PEERS_WIRE_STATUS_TRYAGAIN    300u  /* the caller is the callee's own name (a reload) */
#define PEERS_WIRE_STATUS_ERRPROTO    501u  /* line 1 or line 3 malformed */
#define PEERS_WIRE_STATUS_ERRVERSION  502u  /* major is not 2 or minor over 1 */
#define PEERS_WIRE_STATUS_ERRHOST     503u  /* line 2 is not the callee's name */
#define PEERS_WIRE_STATUS_ERRPEER     504u  /* line 3 names no peer the callee knows */

/* Errors of the decoders. NAME, HAProxy's reaction, text. Reactions:
 * CLOSE (a malformed message: HAProxy sends 01 00, ERR_PROTOCOL, and
 * closes), SIZE (01 01, ERR_SIZELIMIT, and close), S501 / S502 (a hello:
 * that status, then close), IGNORE (a DEFINE HAProxy ignores: the table it
 * names is unbound and the updates that follow are dropped until the next
 * DEFINE or SWITCH; the session goes on). peers_wire_err_ignorable() and
 * peers_wire_err_status() read the column. */
#define PEERS_WIRE_ERRORS(X)                                                        \
	X(NONE,          CLOSE,  "no error")                                             \
	X(VARINT,        CLOSE,  "varint over 10 bytes or over 64 bits")                 \
	X(LENGTH,        CLOSE,  "message length varint over 5 bytes")                   \
	X(TOO_BIG,       SIZE,   "message longer than the limit")                        \
	X(RESERVED,      CLOSE,  "message of the reserved class 255")                    \
	X(TRUNCATED,     CLOSE,  "a field runs past the end of its message")             \
	X(DICT,          CLOSE,  "malformed server_key value")                           \
	X(LINE,          S501,   "hello or status line too long")                        \
	X(HELLO_PROTO,   S501,   "hello line 1 does not start with \"HAProxyS \"")       \
	X(HELLO_VERSION, S502,   "hello version not 2.0 or 2.1")                         \
	X(HELLO_PEER,    S501,   "hello line 3 has no space")                            \
	X(STATUS,        CLOSE,  "status line is not a number")                          \
	X(MSG_TYPE,      CLOSE,  "not a message of that kind")                           \
	X(KEY_TYPE,      IGNORE, "unknown key type")                                     \
	X(KEY_LEN,       IGNORE, "key length does not fit the key type")                 \
	X(PARAMS,        IGNORE, "array or frequency counter parameters missing or wrong") \
	X(ARRAY_SIZE,    IGNORE, "array of more than 100 elements")                      \
	X(RANGE,         IGNORE, "expire or period over 32 bits")

enum peers_wire_err {
#define X(name, reaction, text) PEERS_WIRE_ERR_##name,
	PEERS_WIRE_ERRORS(X)
#undef X
	PEERS_WIRE_ERR_COUNT
};

/* Messages: NAME, class, type, text. A type with bit 7 set carries a
 * varint length and that many payload bytes; the others are 2 bytes. */
#define PEERS_WIRE_MSGS(X)                                          \
	X(RESYNCREQ,       0x00, 0x00, "resync-request")                  \
	X(RESYNCFINISHED,  0x00, 0x01, "resync-finished")                 \
	X(RESYNCPARTIAL,   0x00, 0x02, "resync-partial")                  \
	X(RESYNCCONFIRM,   0x00, 0x03, "resync-confirm")                  \
	X(HEARTBEAT,       0x00, 0x04, "heartbeat")                       \
	X(ERR_PROTOCOL,    0x01, 0x00, "error-protocol")                  \
	X(ERR_SIZELIMIT,   0x01, 0x01, "error-size-limit")                \
	X(UPDATE,          0x0a, 0x80, "update")                          \
	X(INCUPDATE,       0x0a, 0x81, "incremental-update")              \
	X(DEFINE,          0x0a, 0x82, "define")                          \
	X(SWITCH,          0x0a, 0x83, "switch")                          \
	X(ACK,             0x0a, 0x84, "ack")                             \
	X(UPDATE_TIMED,    0x0a, 0x85, "timed-update")                    \
	X(INCUPDATE_TIMED, 0x0a, 0x86, "incremental-timed-update")

#define PEERS_WIRE_CLASS_CONTROL   0x00u
#define PEERS_WIRE_CLASS_ERROR     0x01u
#define PEERS_WIRE_CLASS_TABLE     0x0au
#define PEERS_WIRE_CLASS_RESERVED  0xffu
#define PEERS_WIRE_TYPE_HAS_LEN    0x80u

/* What a message is. UNKNOWN: a class and type this codec does not know
 * (HAProxy skips them: by their length when they have one). */
enum peers_wire_msg_kind {
	PEERS_WIRE_MSG_UNKNOWN = 0,
#define X(name, cls, type, text) PEERS_WIRE_MSG_##name,
	PEERS_WIRE_MSGS(X)
#undef X
	PEERS_WIRE_MSG_COUNT
};

/* Key types, their wire values (HAProxy's PEER_KT_*; 0, 1 and 3 unused). */
enum peers_wire_key_type {
	PEERS_WIRE_KEY_INTEGER = 2,   /* 4 bytes, big-endian; key length 4 */
	PEERS_WIRE_KEY_IPV4    = 4,   /* 4 bytes as stored (network order); key length 4 */
	PEERS_WIRE_KEY_IPV6    = 5,   /* 16 bytes; key length 16 */
	PEERS_WIRE_KEY_STRING  = 6,   /* varint length, bytes, no NUL; key length = len N + 1 */
	PEERS_WIRE_KEY_BINARY  = 7,   /* exactly key length bytes, zero-padded */
};

/* How a data type travels: one varint (UINT, SINT, ULL: a negative SINT
 * is sign-extended to 64 bits, 10 bytes), a frequency counter (FREQ: three
 * varints, age, curr, prev), a dictionary entry (DICT, server_key), or an
 * array of nbelem of those (its count and, for FREQ, its period in the
 * DEFINE). */
enum peers_wire_enc {
	PEERS_WIRE_ENC_UINT = 0,
	PEERS_WIRE_ENC_SINT,
	PEERS_WIRE_ENC_ULL,
	PEERS_WIRE_ENC_FREQ,
	PEERS_WIRE_ENC_DICT,
	PEERS_WIRE_ENC_ARRAY_UINT,
	PEERS_WIRE_ENC_ARRAY_FREQ,
};

/* Data types: NAME, bit, encoding, HAProxy's name. Bits 25 and 26 exist
 * from HAProxy 3.0 (a 2.6 node skips them as trailing bytes: they come
 * last). conn_cur travels but HAProxy does not learn it (local-only). */
#define PEERS_WIRE_DATA_TYPES(X)                        \
	X(SERVER_ID,      0,  SINT,       "server_id")        \
	X(GPT0,           1,  UINT,       "gpt0")             \
	X(GPC0,           2,  UINT,       "gpc0")             \
	X(GPC0_RATE,      3,  FREQ,       "gpc0_rate")        \
	X(CONN_CNT,       4,  UINT,       "conn_cnt")         \
	X(CONN_RATE,      5,  FREQ,       "conn_rate")        \
	X(CONN_CUR,       6,  UINT,       "conn_cur")         \
	X(SESS_CNT,       7,  UINT,       "sess_cnt")         \
	X(SESS_RATE,      8,  FREQ,       "sess_rate")        \
	X(HTTP_REQ_CNT,   9,  UINT,       "http_req_cnt")     \
	X(HTTP_REQ_RATE,  10, FREQ,       "http_req_rate")    \
	X(HTTP_ERR_CNT,   11, UINT,       "http_err_cnt")     \
	X(HTTP_ERR_RATE,  12, FREQ,       "http_err_rate")    \
	X(BYTES_IN_CNT,   13, ULL,        "bytes_in_cnt")     \
	X(BYTES_IN_RATE,  14, FREQ,       "bytes_in_rate")    \
	X(BYTES_OUT_CNT,  15, ULL,        "bytes_out_cnt")    \
	X(BYTES_OUT_RATE, 16, FREQ,       "bytes_out_rate")   \
	X(GPC1,           17, UINT,       "gpc1")             \
	X(GPC1_RATE,      18, FREQ,       "gpc1_rate")        \
	X(SERVER_KEY,     19, DICT,       "server_key")       \
	X(HTTP_FAIL_CNT,  20, UINT,       "http_fail_cnt")    \
	X(HTTP_FAIL_RATE, 21, FREQ,       "http_fail_rate")   \
	X(GPT,            22, ARRAY_UINT, "gpt")              \
	X(GPC,            23, ARRAY_UINT, "gpc")              \
	X(GPC_RATE,       24, ARRAY_FREQ, "gpc_rate")         \
	X(GLITCH_CNT,     25, UINT,       "glitch_cnt")       \
	X(GLITCH_RATE,    26, FREQ,       "glitch_rate")

enum peers_wire_dt {
#define X(name, bit, enc, text) PEERS_WIRE_DT_##name = bit,
	PEERS_WIRE_DATA_TYPES(X)
#undef X
	PEERS_WIRE_DT_COUNT
};

#define PEERS_WIRE_DT_COUNT_26  25u   /* data types HAProxy 2.6 knows: bits 0..24 */
#define PEERS_WIRE_DT_BIT(dt)   (UINT64_C(1) << (dt))
#define PEERS_WIRE_DT_KNOWN     (PEERS_WIRE_DT_BIT(PEERS_WIRE_DT_COUNT) - 1)

/* A view into caller memory: never NUL-terminated, never owned. */
struct peers_wire_str {
	const char *ptr;
	size_t len;
};

/* What the side that connects sends, decoded:
 *
 *   HAProxyS 2.1\n                 major.minor
 *   <callee>\n                     the name of the peer being called
 *   <caller> <pid> <relative pid>\n
 *
 * A CR before each LF is accepted. Only the text before the first space of
 * line 3 is a name; the rest is kept as it is and checked by nobody. */
struct peers_wire_hello {
	unsigned major;
	unsigned minor;
	struct peers_wire_str callee;
	struct peers_wire_str caller;
	struct peers_wire_str rest;
};

/* One message. payload/len: the bytes after the length (NULL and 0 for a
 * message without one); a view into the input. */
struct peers_wire_msg {
	uint8_t cls;
	uint8_t type;
	enum peers_wire_msg_kind kind;
	const uint8_t *payload;
	size_t len;
};

/* A table definition (DEFINE):
 *
 *   id | name-len | name | key-type | key-len | data bitfield | expire | params...
 *
 * every field a varint. params: for each data type of the bitfield, in bit
 * order, that is an array or a frequency counter: the type's bit again,
 * then for an array its element count, then for a frequency counter (an
 * array of them too) its period in ms. A DEFINE that stops after the
 * bitfield (old senders) has no expire and no params (has_expire false)
 * and may not hold an array. The arrays below are indexed by data type;
 * entries of types the bitfield does not hold are 0. */
struct peers_wire_table {
	uint64_t id;                                /* the sender's number for the table */
	struct peers_wire_str name;                 /* "/t" for "table t" of a peers section */
	enum peers_wire_key_type key_type;
	uint32_t key_len;                           /* HAProxy's key_size */
	uint64_t data;                              /* bit n: data type n is stored */
	bool has_expire;
	uint32_t expire;                            /* ms; 0: none */
	uint32_t period[PEERS_WIRE_DT_COUNT];       /* ms, frequency counters */
	uint32_t nbelem[PEERS_WIRE_DT_COUNT];       /* elements, arrays */
};

/* A key. ptr/len: the key's bytes as HAProxy keeps them (a view into the
 * message decoded, or caller memory to encode): a string without its NUL,
 * cut to key_len - 1 bytes as HAProxy cuts it; an IPv4 or IPv6 address in
 * network order; binary, key_len bytes. integer: the value of an integer
 * key (ptr/len then hold its 4 big-endian bytes when decoded; encoding
 * reads integer alone). */
struct peers_wire_key {
	const uint8_t *ptr;
	size_t len;
	uint32_t integer;
};

/* A frequency counter as it travels: age = the sender's clock minus the
 * start of its current period (ms; a 32-bit difference: reduce it modulo
 * 2^32, a counter never touched carries the raw clock), curr = events of
 * the current period, prev = of the previous one. HAProxy keeps 32 bits
 * of each. */
struct peers_wire_freq {
	uint64_t age;
	uint64_t curr;
	uint64_t prev;
};

/* server_key: "none", or a cache id (1..PEERS_WIRE_DICT_MAX) with the
 * server's name, or the id alone for a name sent before on the session. */
struct peers_wire_dict {
	bool present;
	uint64_t id;
	bool has_value;
	struct peers_wire_str value;
};

/* An update (UPDATE 0x80, INCUPDATE 0x81, UPDATE_TIMED 0x85,
 * INCUPDATE_TIMED 0x86):
 *
 *   [u32 update id] [u32 expire ms] key  values...
 *    0x80, 0x85      0x85, 0x86
 *
 * An incremental update has no id: it is the previous id of its table on
 * the session plus one (the caller counts). values: one per data type of
 * the table's bitfield, in bit order, each in its encoding. Scalars go in
 * u[dt], frequency counters in f[dt], the arrays in gpt, gpc and gpc_rate
 * (nbelem of the table each), server_key in server_key. The caller owns
 * the struct (about 4.5 KiB: keep one and reuse it). */
struct peers_wire_update {
	bool has_id;
	bool timed;
	uint32_t id;
	uint32_t expire;                              /* ms left, timed updates */
	struct peers_wire_key key;
	uint64_t decoded;                             /* bits whose values were read */
	size_t trailing;                              /* bytes after them, skipped */
	uint64_t u[PEERS_WIRE_DT_COUNT];
	struct peers_wire_freq f[PEERS_WIRE_DT_COUNT];
	struct peers_wire_dict server_key;
	uint64_t gpt[PEERS_WIRE_ARRAY_MAX];
	uint64_t gpc[PEERS_WIRE_ARRAY_MAX];
	struct peers_wire_freq gpc_rate[PEERS_WIRE_ARRAY_MAX];
};

/* Output buffer of the encoders: caller memory of fixed capacity. */
struct peers_wire_writer {
	uint8_t *buf;
	size_t cap;
	size_t len;
};

/* ---- tables ---- */

/* The text of an error ("unknown error" for values out of the enum). */
const char *peers_wire_err_str(enum peers_wire_err err);

/* true: HAProxy ignores the DEFINE that gave this error and goes on (the
 * table is unbound); false: it ends the session. */
bool peers_wire_err_ignorable(enum peers_wire_err err);

/* The status a callee answers to a hello that gave this error (501, 502),
 * or 0 for errors of anything but a hello. */
unsigned peers_wire_err_status(enum peers_wire_err err);

/* The kind of a class and type (PEERS_WIRE_MSG_UNKNOWN for others), and
 * its text ("unknown" for UNKNOWN or values out of the enum). */
enum peers_wire_msg_kind peers_wire_msg_kind(uint8_t cls, uint8_t type);
const char *peers_wire_msg_str(enum peers_wire_msg_kind kind);

/* A data type's encoding and HAProxy's name for it; dt must be below
 * PEERS_WIRE_DT_COUNT (else UINT and "unknown"). */
enum peers_wire_enc peers_wire_dt_enc(unsigned dt);
const char *peers_wire_dt_str(unsigned dt);

/* ---- varints ----
 *
 * HAProxy's encoding (intencode/intdecode of src/peers.c; SPOP uses the
 * same): v < 240 is the byte v; else a first byte (v | 0xf0) carrying 4
 * bits, then 7 bits a byte, a byte >= 128 saying more follow; each byte
 * counts from the value the ones before it could carry, so a value has
 * one form only. */

/* Decodes one varint of a stream. Returns bytes consumed (1..10), 0 when p
 * ends before its last byte, -1 (PEERS_WIRE_ERR_VARINT) when it runs past
 * 10 bytes or over 64 bits. */
int peers_wire_varint_decode(const uint8_t *p, size_t len, uint64_t *v, enum peers_wire_err *err);

/* Bytes v takes (1..10). */
size_t peers_wire_varint_size(uint64_t v);

/* Writes v at p (cap bytes). Returns the bytes written, 0 when cap is too
 * small. */
size_t peers_wire_varint_encode(uint8_t *p, size_t cap, uint64_t v);

/* ---- the hello (the side that accepts decodes, the side that connects
 * encodes) ---- */

/* Decodes a hello at the start of p. Each line is checked as soon as its
 * LF is in: line 1 must be "HAProxyS <major>.<minor>" with major 2 and
 * minor 0 or 1 (HELLO_PROTO, HELLO_VERSION), line 3 must hold a space
 * (HELLO_PEER), a line is at most PEERS_WIRE_LINE_MAX bytes (LINE).
 * Returns the bytes of the three lines, 0 when more is needed, -1 with
 * *err. The caller then checks the names and answers: 503 when callee is
 * not its name, 504 when caller is not a peer it knows, else 200; for a
 * -1, peers_wire_err_status(*err). Bytes after the third line are the
 * first messages: the caller keeps them. */
int peers_wire_hello_decode(const uint8_t *p, size_t len, struct peers_wire_hello *h,
			    enum peers_wire_err *err);

/* Decodes a status line ("200\n"; a CR before the LF is accepted) at the
 * start of p: *status gets its number. Returns the bytes of the line, 0
 * when more is needed, -1 with *err: STATUS (empty, not a number, over 3
 * digits), LINE (no LF within PEERS_WIRE_LINE_MAX bytes). HAProxy writes
 * messages right after "200\n": the caller keeps the bytes after the line. */
int peers_wire_status_decode(const uint8_t *p, size_t len, unsigned *status,
			     enum peers_wire_err *err);

/* ---- messages ---- */

/* Decodes one message at the start of p:
 *
 *   class(1) type(1) [ length varint (<= 5 bytes)  payload (length bytes) ]
 *                      only when type & 0x80
 *
 * Returns the message's bytes, 0 when more is needed, -1 with *err:
 * RESERVED (class 255, told from its first 2 bytes), LENGTH, VARINT,
 * TOO_BIG (length over max_len, told as soon as the length is in, so that
 * a reader never buffers a message it will refuse). max_len: the caller's
 * limit, PEERS_WIRE_MSG_MAX for HAProxy's. The payload is not looked at. */
int peers_wire_msg_decode(const uint8_t *p, size_t len, size_t max_len,
			  struct peers_wire_msg *m, enum peers_wire_err *err);

/* Payload decoders. Each returns the bytes of the payload it read (what
 * follows is what a newer sender added: HAProxy skips it too), or -1 with
 * *err. */

/* DEFINE. t is filled; on an IGNORE error t->id is set (HAProxy unbinds
 * whatever was bound to it) and the rest is unspecified. Bits this codec
 * does not know (over 26) are kept in t->data; their params, last, are
 * left unread. Errors: TRUNCATED (before the bitfield), VARINT, KEY_TYPE,
 * KEY_LEN (integer and ipv4 need 4, ipv6 16, string and binary 1 to
 * PEERS_WIRE_MSG_MAX), PARAMS, ARRAY_SIZE, RANGE. */
int peers_wire_define_decode(const uint8_t *p, size_t len, struct peers_wire_table *t,
			     enum peers_wire_err *err);

/* An update of the table t (a DEFINE that decoded) in a message of type
 * 0x80, 0x81, 0x85 or 0x86 (MSG_TYPE for another type). Values of data
 * types this codec does not know (bits over 26) and what follows them are
 * left unread: u->decoded says which were read, u->trailing how many bytes
 * were not; the values of other types are left as they were (the struct
 * is not cleared: one is reused at the cost of its small fields only).
 * Errors: TRUNCATED, VARINT, DICT; and KEY_TYPE, KEY_LEN, ARRAY_SIZE when
 * t is not one peers_wire_define_decode() accepts. */
int peers_wire_update_decode(uint8_t type, const uint8_t *p, size_t len,
			     const struct peers_wire_table *t, struct peers_wire_update *u,
			     enum peers_wire_err *err);

/* SWITCH: a varint table id (HAProxy 2.6 and 3.4 never send one, and
 * accept it: the updates that follow are of that table). */
int peers_wire_switch_decode(const uint8_t *p, size_t len, uint64_t *table_id,
			     enum peers_wire_err *err);

/* ACK: the table id of the acknowledging side's peer (the id the sender of
 * the updates gave in its DEFINE) and the last update id received. */
int peers_wire_ack_decode(const uint8_t *p, size_t len, uint64_t *table_id,
			  uint32_t *update_id, enum peers_wire_err *err);

/* ---- encoders ----
 *
 * Each appends one whole line or message and returns 0, or -1 when it does
 * not fit the writer or the arguments cannot make a valid one (then the
 * writer is as before the call). Messages are at most PEERS_WIRE_MSG_MAX
 * bytes of payload. */

void peers_wire_writer_init(struct peers_wire_writer *w, uint8_t *buf, size_t cap);

/* "HAProxyS 2.<minor>\n<callee>\n<caller> <pid> 1\n". minor 0 or 1; names
 * non-empty, without CR or LF; caller without a space. */
int peers_wire_encode_hello(struct peers_wire_writer *w, unsigned minor,
			    struct peers_wire_str callee, struct peers_wire_str caller,
			    uint32_t pid);

/* "<status>\n", status 100..999. */
int peers_wire_encode_status(struct peers_wire_writer *w, unsigned status);

/* A message without payload: the control and error kinds. */
int peers_wire_encode_ctrl(struct peers_wire_writer *w, enum peers_wire_msg_kind kind);

/* DEFINE of t. Refused: an empty name, an unknown key type, a key length
 * the type does not allow, a data type bit over 26, an array over
 * PEERS_WIRE_ARRAY_MAX elements, an array without has_expire. */
int peers_wire_encode_define(struct peers_wire_writer *w, const struct peers_wire_table *t);

/* SWITCH to the table the sender defined with id table_id. */
int peers_wire_encode_switch(struct peers_wire_writer *w, uint64_t table_id);

/* ACK of the peer's updates of its table table_id (the id of its DEFINE)
 * up to update_id. */
int peers_wire_encode_ack(struct peers_wire_writer *w, uint64_t table_id, uint32_t update_id);

/* An update of t from u: its type from u->has_id and u->timed, the key
 * from u->key (a string longer than key_len - 1 goes whole: HAProxy cuts
 * it; binary shorter than key_len is zero-padded, longer is refused), then
 * a value per data type of t->data. Refused as encode_define refuses t
 * (its name aside: updates do not carry it), an IPv4 or IPv6 key of
 * another size, and a server_key id out of 1..PEERS_WIRE_DICT_MAX. */
int peers_wire_encode_update(struct peers_wire_writer *w, const struct peers_wire_table *t,
			     const struct peers_wire_update *u);

#endif /* PEERS_WIRE_H */
