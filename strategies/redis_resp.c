/*
 * redis_resp.c - the Redis strategy's text (strategies/redis_int.h): commands
 * written in RESP straight into an operation's buffer, the key layout, the
 * cluster slot of a key, the numbers of replies. The writers a batch runs
 * per counter (decimal, RESP headers, bulk strings, a key's bucket, a
 * reply's number) are static inline in redis_int.h.
 *
 * Key layout. One hash per (prefix, namespace, bucket, window size,
 * window start); field = the rate-limit key's bytes, value = the count:
 *
 *   <prefix>:{<ns>:<bucket>}:<size>:<start>     e.g.  rl:{api:17}:60:1700000040
 *            '---- hash tag ----'
 *
 * bucket = FNV-1a-64(key) mod 64, stable on every node and every version.
 * The hash tag puts both windows (and every size) of one bucket into one
 * Redis Cluster slot, while the 64 buckets of a namespace spread over the
 * cluster: no namespace-sized hot key (reference 1.8, pitfall 2). A '}' in
 * a namespace name ends the tag early: still correct, only less spread.
 * Every hash written gets EXPIRE 2 * size + REDIS_TTL_SLACK seconds, so a
 * window outlives its time as "previous window"; purge is a no-op.
 *
 * A window's count holds hits. The grants the admissions give nodes
 * (strategy.h) are reserved apart, in a hash of the same hash tag,
 *
 *   <prefix>:{<ns>:<bucket>}:r:<size>:<start>     field = key, value = reserved
 *
 * counted against the limit by the admission script, moved to the count
 * (grant hits spent) or dropped (grants returned) by the push script;
 * nothing else reads it (reads, HGETALL rows: hits only).
 *
 * The token key of a call (a push or admit call with a token, redis_write.c)
 * is in the same hash tag as its hash (same Cluster slot):
 *
 *   <prefix>:{<ns>:<bucket>}:tok:<token>:<size>:<start>:<call id>
 *
 * and the heartbeat's hash (redis.c) in a tag of its own, per namespace:
 *
 *   <prefix>:{<ns>:nodes}           field = node id, value = its last beat
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strategies/redis_int.h"

/* Writes "<prefix>:{<ns>:<bucket>" of a hash or token key: the part up to
 * the end of the bucket, inside the Cluster hash tag (the caller closes it);
 * prefix_len + 3 + redis_tag_mark() + ns_len + bucket_len bytes. */
char *redis_put_tag(char *p, const struct redis_strategy *s, const char *ns,
		    size_t ns_len, const char *bucket, size_t bucket_len)
{
	memcpy(p, s->o.prefix, s->o.prefix_len);
	p += s->o.prefix_len;
	*p++ = ':';
	*p++ = '{';
	if (redis_tag_mark(ns, ns_len))
		*p++ = '\x01';
	if (ns_len)
		memcpy(p, ns, ns_len);
	p += ns_len;
	*p++ = ':';
	memcpy(p, bucket, bucket_len);
	return p + bucket_len;
}

/* The hash name of (ns, bucket, size, start) as one bulk string:
 * "<prefix>:{<ns>:<bucket>}:<size>:<start>", or with reserved the hash of
 * its reservations, "<prefix>:{<ns>:<bucket>}:r:<size>:<start>" (same
 * hash tag: same Cluster slot). */
char *redis_put_hkey_of(char *p, const struct redis_strategy *s, const char *ns,
			size_t ns_len, unsigned bucket, uint32_t size, int64_t start,
			bool reserved)
{
	char b[REDIS_U64_MAX_LEN], z[REDIS_U64_MAX_LEN], t[REDIS_U64_MAX_LEN + 1];
	size_t bl = redis_u64_dec(b, bucket);
	size_t zl = redis_u64_dec(z, size);
	size_t tl = redis_i64_dec(t, start);
	size_t len = s->o.prefix_len + 3 + redis_tag_mark(ns, ns_len) + ns_len + bl + 2 + zl + 1 +
		     tl + (reserved ? 2 : 0);

	*p++ = '$';
	p += redis_u64_dec(p, len);
	p = redis_put_crlf(p);
	p = redis_put_tag(p, s, ns, ns_len, b, bl);
	*p++ = '}';
	*p++ = ':';
	if (reserved) {
		*p++ = 'r';
		*p++ = ':';
	}
	memcpy(p, z, zl);
	p += zl;
	*p++ = ':';
	memcpy(p, t, tl);
	p += tl;
	return redis_put_crlf(p);
}

/* The cluster slot of the key in the bulk string at p ("$<len>\r\n<key>"). */
uint16_t redis_bulk_slot(const char *p)
{
	size_t len = 0;

	for (p++; *p >= '0' && *p <= '9'; p++)
		len = len * 10 + (size_t)(*p - '0');
	return redis_key_slot(p + 2, len);
}

/* Bytes redis_put_hkey() writes, at most. */
size_t redis_hkey_max(const struct redis_strategy *s, size_t ns_len)
{
	return REDIS_BULK_MAX(s->o.prefix_len + ns_len + 11 + 3 * REDIS_U64_MAX_LEN);
}

/*
 * The token key of one script call of a push with a token:
 *
 *   <prefix>:{<ns>:<bucket>}:tok:<token>:<size>:<start>:<id>
 *
 * same hash tag as the hash (same Cluster slot, so one script may touch
 * both); <id> (REDIS_TOK_ID_LEN hex digits) is written later, by
 * redis_put_tok_id(), once every call of the hash is built. Writes the
 * bulk string and sets *id_off to the offset of <id> from base.
 */
char *redis_put_tkey(char *p, const char *base, const struct redis_strategy *s,
		     const char *ns, size_t ns_len, unsigned bucket, uint32_t size,
		     int64_t start, const char *token, size_t token_len, size_t *id_off)
{
	char b[REDIS_U64_MAX_LEN], z[REDIS_U64_MAX_LEN], t[REDIS_U64_MAX_LEN + 1];
	size_t bl = redis_u64_dec(b, bucket);
	size_t zl = redis_u64_dec(z, size);
	size_t tl = redis_i64_dec(t, start);
	size_t len = s->o.prefix_len + 3 + redis_tag_mark(ns, ns_len) + ns_len + bl + 6 +
		     token_len + 1 + zl + 1 + tl + 1 + REDIS_TOK_ID_LEN;

	*p++ = '$';
	p += redis_u64_dec(p, len);
	p = redis_put_crlf(p);
	p = redis_put_tag(p, s, ns, ns_len, b, bl);
	memcpy(p, "}:tok:", 6);
	p += 6;
	memcpy(p, token, token_len);
	p += token_len;
	*p++ = ':';
	memcpy(p, z, zl);
	p += zl;
	*p++ = ':';
	memcpy(p, t, tl);
	p += tl;
	*p++ = ':';
	*id_off = (size_t)(p - base);
	memset(p, '0', REDIS_TOK_ID_LEN);
	p += REDIS_TOK_ID_LEN;
	return redis_put_crlf(p);
}

/* Bytes redis_put_tkey() writes, at most. */
size_t redis_tkey_max(const struct redis_strategy *s, size_t ns_len, size_t token_len)
{
	return REDIS_BULK_MAX(s->o.prefix_len + ns_len + token_len + 13 + 3 * REDIS_U64_MAX_LEN +
			      REDIS_TOK_ID_LEN);
}

/* A 64-bit hash of bytes, a word at a time (only compared within this
 * process: no need to be stable across versions or machines). */
uint64_t redis_hash_bytes(const char *p, size_t len)
{
	uint64_t h = 0x9e3779b97f4a7c15ULL ^ len, w;

	for (; len >= 8; p += 8, len -= 8) {
		memcpy(&w, p, 8);
		h = (h ^ w) * 0xff51afd7ed558ccdULL;
		h ^= h >> 32;
	}
	w = 0;
	if (len)
		memcpy(&w, p, len);
	h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 29;
	h *= 0xff51afd7ed558ccdULL;
	return h ^ (h >> 32);
}

void redis_put_tok_id(char *p, uint64_t id)
{
	static const char hex[] = "0123456789abcdef";

	for (int i = REDIS_TOK_ID_LEN - 1; i >= 0; i--, id >>= 4)
		p[i] = hex[id & 15];
}

/* Parses a bulk string holding a number (all of it, finite). */
int redis_parse_double(const char *str, size_t len, double *out)
{
	char buf[64];
	char *end;
	double d;

	if (len == 0 || len >= sizeof(buf))
		return -1;
	memcpy(buf, str, len);
	buf[len] = '\0';
	errno = 0;
	d = strtod(buf, &end);
	if (end != buf + len || !isfinite(d))
		return -1;
	*out = d;
	return 0;
}

const char *redis_reply_type_name(int type)
{
	switch (type) {
	case REDIS_REPLY_STRING:  return "string";
	case REDIS_REPLY_ARRAY:   return "array";
	case REDIS_REPLY_INTEGER: return "integer";
	case REDIS_REPLY_NIL:     return "nil";
	case REDIS_REPLY_STATUS:  return "status";
	case REDIS_REPLY_ERROR:   return "error";
	default:                  return "unknown";
	}
}

void redis_seterr(char errstr[STRATEGY_ERR_MAX], const char *fmt, ...)
{
	va_list ap;

	if (errstr == NULL)
		return;
	va_start(ap, fmt);
	vsnprintf(errstr, STRATEGY_ERR_MAX, fmt, ap);
	va_end(ap);
}

/* CRC16 (XMODEM) as Redis Cluster computes it. */
uint16_t redis_crc16(const void *p, size_t len)
{
	const unsigned char *b = p;
	uint16_t crc = 0;

	for (size_t i = 0; i < len; i++) {
		crc ^= (uint16_t)(b[i] << 8);
		for (int k = 0; k < 8; k++)
			crc = crc & 0x8000 ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
	}
	return crc;
}

/* The slot of a key: CRC16 of its hash tag (the bytes between the first
 * '{' and the next '}', if not empty), else of the whole key. */
uint16_t redis_key_slot(const char *key, size_t len)
{
	const char *open = memchr(key, '{', len), *close;

	if (open != NULL) {
		size_t rest = len - (size_t)(open - key) - 1;

		close = memchr(open + 1, '}', rest);
		if (close != NULL && close > open + 1)
			return redis_crc16(open + 1, (size_t)(close - open - 1)) & (REDIS_SLOTS - 1);
	}
	return redis_crc16(key, len) & (REDIS_SLOTS - 1);
}

/* The slot of (ns, bucket)'s hash tag, as redis_put_tag() writes it. */
uint16_t redis_tag_slot(const char *ns, size_t ns_len, unsigned bucket)
{
	char tag[1 + REDIS_NS_TAG_MAX + 1 + REDIS_U64_MAX_LEN], *p = tag;

	if (redis_tag_mark(ns, ns_len))
		*p++ = '\x01';
	memcpy(p, ns, ns_len);
	p += ns_len;
	*p++ = ':';
	p += redis_u64_dec(p, bucket);
	return (uint16_t)(redis_crc16(tag, (size_t)(p - tag)) & (REDIS_SLOTS - 1));
}

char *redis_put_hkey(char *p, const struct redis_strategy *s, const char *ns, size_t ns_len,
		     unsigned bucket, uint32_t size, int64_t start)
{
	return redis_put_hkey_of(p, s, ns, ns_len, bucket, size, start, false);
}

int redis_reply_number(const redisReply *r, double *out)
{
	switch (r->type) {
	case REDIS_REPLY_INTEGER:
		*out = (double)r->integer;
		return 0;
	case REDIS_REPLY_STRING:
		return redis_parse_double(r->str, r->len, out);
	case REDIS_REPLY_NIL:
		*out = 0;
		return 0;
	default:
		return -1;
	}
}
