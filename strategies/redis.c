/*
 * redis.c - the Redis strategy: cluster totals kept in Redis hashes, reached
 * through hiredis's async API on the caller's libev loop (hiredis's own
 * libev adapter). Implements the contract of strategies/strategy.h.
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
 * push_diffs groups the batch by hash and sends one script call per hash
 * (per REDIS_CHUNK_MAX counters), all pipelined at once. The script
 * (redis_push_script) reads the fields with one HMGET, adds the diffs in Lua,
 * writes every changed field back with one HSET, refreshes EXPIRE and
 * returns every total: integral totals as integers, others as "%.17g"
 * strings (exact for a double). A diff of "0" only reads: nothing is
 * created. One script call is atomic, so every counter is. Bulk HMGET/HSET
 * rather than one HINCRBYFLOAT per field because HINCRBYFLOAT costs the
 * server several microseconds each (it formats a long double and rewrites
 * itself as HSET for propagation); the bulk form is what makes 100k
 * counters per round trip affordable. Doubles are added in double (Lua 5.1
 * numbers), not long double: totals round-trip exactly through "%.17g".
 * The script is loaded with SCRIPT LOAD while connecting and called with
 * EVALSHA; a NOSCRIPT reply resends that one call as EVAL. A call whose
 * diffs are all 0 (an idle key's read, every sync cycle) is a plain HMGET
 * instead: no token, no WAIT, and a few microseconds of the server's CPU
 * where entering a script costs it 20 to 70.
 *
 * Push tokens (strategy.h: a push with a token is applied at most once).
 * Each script call of a push with a token also names a token key, in the
 * same hash tag (same Cluster slot) as its hash:
 *
 *   <prefix>:{<ns>:<bucket>}:tok:<token>:<size>:<start>:<call id>
 *
 * The script adds the diffs and sets that key (EX STRATEGY_TOKEN_TTL) in
 * the same atomic step; if the key already exists it adds nothing and
 * only returns the current totals. The call id is a 64-bit hash of the
 * call's fields and diffs (plus, for calls of one hash with identical
 * contents, how many follow it), in hex: a resend of the counters of the
 * calls that were not confirmed, in the same order, rebuilds the same
 * calls with the same ids, whichever of them the first try applied. A
 * reply confirms all of its call's counters or none. One EXISTS and one
 * SET per script call (per up to REDIS_CHUNK_MAX counters); without a
 * token the calls are as before (one key, no token key).
 *
 * get_counters: HGETALL over 64 buckets x sizes x {current, previous},
 * pipelined. get_window: one HGET. purge: completes with 0.
 *
 * admit (redis_admit_script): the admissions of one admit() (the sync
 * loop gathers those of one loop iteration) in one script call, or one per
 * slot with Redis Cluster (and per REDIS_ADMIT_CHUNK); the call decides
 * them in order, each reading its key's field in the current and previous
 * windows' hashes (one hash tag), adding the node's diff, deciding, adding
 * the hit and the grant; it writes each changed hash once at the end, and
 * with a token records every decision and grant in the call's token key,
 * so a resend returns them without adding anything.
 *
 * Servers. The mode (struct redis_mode_ops, redis.h) says where a call
 * goes: the one server (host/port or socket: this file), the master of
 * its slot (cluster_nodes: redis_cluster.c), the master a quorum of the
 * sentinels name (sentinel: redis_sentinel.c). Each server is one connection
 * (redis_conn.c: a non-blocking connect with AUTH, SELECT and the three
 * SCRIPT LOADs pipelined behind it, ready once all answered within
 * timeout_ms; reconnected with backoff). Host names are not accepted
 * (resolving would block the loop): IPv4 or IPv6 literals, or "localhost"
 * for 127.0.0.1. Every call of an operation carries the cluster slot of
 * its key (the same for every key it names: one hash tag) and goes where
 * the mode routes it; its reply comes back through redis_on_call_reply(),
 * which resends it as EVAL after NOSCRIPT and lets the mode follow
 * MOVED / ASK / TRYAGAIN before the operation sees the reply.
 *
 * wait_replicas N > 0: after an operation's writes, one "WAIT N ms" on
 * every connection that got some; a call counts as applied (its counters'
 * `ok`) only once its WAIT says N replicas have it (redis_op_send_waits).
 *
 * Operations while not ready() are refused at once: the call returns -1
 * with errstr "not connected (...)" and the callback never runs; so is an
 * operation none of whose calls has a connection now (a call alone
 * without one fails alone). A started operation fails with "timeout" when,
 * while it waits, the connections it waits on deliver no reply at all for
 * timeout_ms (the clock restarts at every reply, to any operation: a big
 * pipelined batch that keeps answering, or a small operation queued
 * behind it, is not cut off); those connections are then dropped - which
 * also fails the other operations in flight on them, so no late reply can
 * reach a freed operation - and re-established.
 *
 * Callback discipline. hiredis reply callbacks only record results. A
 * finished operation goes on a done queue drained by a zero-delay timer,
 * so user callbacks never run inside hiredis (nor inside the call that
 * started the operation) and may call any operation, destroy() included.
 * The connection is only freed outside hiredis callbacks (op timers, the
 * drain, destroy); redisAsyncFree() there runs every pending reply
 * callback with a NULL reply at once, so after it returns hiredis holds no
 * pointer to an operation. destroy() from inside a callback of this
 * instance frees the instance after that callback returns.
 *
 * Errors are values: nothing here logs, aborts or blocks; every reply
 * shape is checked. The process must ignore SIGPIPE (the agent does):
 * hiredis 0.14 writes with write(2), so a write to a server that just died
 * raises it.
 */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strategies/container.h"
#include "strategies/redis.h"
#include "strategies/window_start.h"

#define REDIS_BUCKETS          64
#define REDIS_TTL_SLACK        30      /* seconds added to 2 * size */
#define REDIS_CHUNK_MAX        2000    /* counters per script call: Lua's unpack()
					* stops at ~8000 values, and one call
					* blocks the server while it runs */
#define REDIS_PASSWORD_MAX     1024
#define REDIS_USERNAME_MAX     256
#define REDIS_TIMEOUT_MAX_MS   600000
#define REDIS_WAIT_REPLICAS_MAX 16
#define REDIS_DEFAULT_HOST     "127.0.0.1"
#define REDIS_DEFAULT_PORT     6379
#define REDIS_DEFAULT_TIMEOUT  100
#define REDIS_DEFAULT_PREFIX   "rl"
#define REDIS_DBL_MAX_LEN      32      /* "%.17g" of any double, with NUL */
#define REDIS_U64_MAX_LEN      20
#define REDIS_TOK_ID_LEN       16      /* hex digits of a call's id in its token key */
#define REDIS_ADMIT_CHUNK      256     /* admissions per script call */
#define REDIS_NS_TAG_MAX       1024    /* namespace bytes in a hash tag (admissions) */

#define REDIS_STR2(x) #x
#define REDIS_STR(x)  REDIS_STR2(x)

/*
 * The push script. KEYS[1] = the hash; if ARGV[3] is "1", KEYS[2] = the
 * hash of its reservations; then (optional) the token key of this call;
 * ARGV[1] = TTL seconds, ARGV[2] = n, ARGV[3] = "1" when grants spent and
 * returned follow the diffs, ARGV[4 .. n+3] = fields, ARGV[n+4 .. 2n+3] = diffs
 * ("0" = read only), ARGV[2n+4 .. 3n+3] = grants spent (strategy.h: from
 * the field's reservation to its count), ARGV[3n+4 .. 4n+3] = grants
 * returned (taken from the reservation).
 * Returns n totals: integers when integral (below 1e15), else "%.17g"
 * strings; values are written as "%d" / "%.17g" text (exact for a double;
 * "%d" spares the slow floating-point printf path for the common case).
 * Field names are binary Lua strings throughout; `seen` makes a field that
 * appears twice in one call add up in order. Nothing is written before
 * every total is known to be valid, so an error reply means the call
 * changed nothing. A reservation never goes below 0 (its field is then
 * deleted).
 * With a token key: if it exists, this call was applied before (an earlier
 * try of the same push): nothing is added, every diff is read as "0" and
 * the current totals come back. Otherwise the diffs are added and the
 * token key is set (EX STRATEGY_TOKEN_TTL) in the same atomic step, after
 * the writes, so a call that fails half-way leaves no token behind.
 */
const char redis_push_script[] =
	"local n, un = tonumber(ARGV[2]), ARGV[3] == '1'\n"
	"local h, hr, tk = KEYS[1], nil, KEYS[2]\n"
	"if un then hr, tk = KEYS[2], KEYS[3] end\n"
	"local old = redis.call('HMGET', h, unpack(ARGV, 4, n + 3))\n"
	"local add = not (tk and redis.call('EXISTS', tk) == 1)\n"
	"local rold\n"
	"if add and un then rold = redis.call('HMGET', hr, unpack(ARGV, 4, n + 3)) end\n"
	"local seen, rseen, set, out, ns = {}, {}, {}, {}, 0\n"
	"for i = 1, n do\n"
	"  local f = ARGV[i + 3]\n"
	"  local v = seen[f]\n"
	"  if v == nil then\n"
	"    v = old[i]\n"
	"    if v then\n"
	"      v = tonumber(v)\n"
	"      if v == nil then\n"
	"        return redis.error_reply('ERR counter value is not a number')\n"
	"      end\n"
	"    else\n"
	"      v = 0\n"
	"    end\n"
	"  end\n"
	"  local d, u, b = ARGV[i + n + 3], '0', '0'\n"
	"  if un then u, b = ARGV[i + 2 * n + 3], ARGV[i + 3 * n + 3] end\n"
	"  local w = add and (d ~= '0' or u ~= '0' or b ~= '0')\n"
	"  if w then\n"
	"    v = v + tonumber(d) + tonumber(u)\n"
	"    if v ~= v or v == math.huge or v == -math.huge then\n"
	"      return redis.error_reply('ERR counter total would not be finite')\n"
	"    end\n"
	"    if u ~= '0' or b ~= '0' then\n"
	"      local r = rseen[f]\n"
	"      if r == nil then r = tonumber(rold[i] or '0') end\n"
	"      if r == nil then\n"
	"        return redis.error_reply('ERR reservation value is not a number')\n"
	"      end\n"
	"      r = r - tonumber(u) - tonumber(b)\n"
	"      if not (r > 1e-9) then r = 0 end\n"
	"      rseen[f] = r\n"
	"    end\n"
	"  end\n"
	"  seen[f] = v\n"
	"  local int = v % 1 == 0 and v > -1e15 and v < 1e15\n"
	"  if int then out[i] = v else out[i] = string.format('%.17g', v) end\n"
	"  if w then\n"
	"    set[ns + 1] = f\n"
	"    if int then set[ns + 2] = string.format('%d', v) else set[ns + 2] = out[i] end\n"
	"    ns = ns + 2\n"
	"  end\n"
	"end\n"
	"if ns > 0 then\n"
	"  redis.call('HSET', h, unpack(set))\n"
	"  redis.call('EXPIRE', h, ARGV[1])\n"
	"  local rset, rdel = {}, {}\n"
	"  for f, r in pairs(rseen) do\n"
	"    if r > 0 then\n"
	"      rset[#rset + 1] = f\n"
	"      rset[#rset + 1] = string.format('%.17g', r)\n"
	"    else\n"
	"      rdel[#rdel + 1] = f\n"
	"    end\n"
	"  end\n"
	"  if #rset > 0 then\n"
	"    redis.call('HSET', hr, unpack(rset))\n"
	"    redis.call('EXPIRE', hr, ARGV[1])\n"
	"  end\n"
	"  if #rdel > 0 then redis.call('HDEL', hr, unpack(rdel)) end\n"
	"  if tk then\n"
	"    redis.call('SET', tk, '1', 'EX', '" REDIS_STR(STRATEGY_TOKEN_TTL) "')\n"
	"  end\n"
	"end\n"
	"return out\n";

/*
 * The admission script (strategy.h, struct strategy_admit): every
 * admission of one call, decided one after the other, each seeing the
 * ones before it. KEYS[1] = the call's token key if ARGV[1] is "1"; then
 * the hashes the admissions name, each once (in Redis Cluster all in one
 * slot). ARGV[2] = n, then 13 per admission: the indexes in KEYS of the
 * current window's hash, of the previous window's, of their reservation
 * hashes (current, previous), the TTL (seconds) of the current window's,
 * the field, diff, cost, limit, weight of the previous window, "1" to
 * count a hit that is not admitted, the largest grant wanted, nodes. A
 * window's count holds hits; its reservation the grants given and not yet
 * spent or given back: the decision counts both, a grant goes to the
 * reservation. Returns 4 n values: per admission { current, previous,
 * "1" admitted | "0" not, grant } (counts, numbers as in the push script),
 * as they stood after it. Each field is read once (HGET) and each hash
 * written once (HSET of its changed fields, EXPIRE), after every decision
 * is made: an error reply means the call changed nothing. With a token
 * key that exists the call was applied before: nothing is added, and the
 * decisions and grants it recorded ("<admitted> <grant>" per admission)
 * come back with the current counts.
 */
const char redis_admit_script[] =
	"local tk, n = nil, tonumber(ARGV[2])\n"
	"if ARGV[1] == '1' then tk = KEYS[1] end\n"
	"local rec = tk and redis.call('GET', tk)\n"
	"local val, ttl, dirty, past, recs, out = {}, {}, {}, {}, {}, {}\n"
	"local function get(h, f)\n"
	"  local t = val[h]\n"
	"  if not t then t = {} val[h] = t end\n"
	"  local v = t[f]\n"
	"  if v == nil then\n"
	"    v = redis.call('HGET', KEYS[h], f)\n"
	"    if v then v = tonumber(v) else v = 0 end\n"
	"    t[f] = v\n"
	"  end\n"
	"  return v\n"
	"end\n"
	"local function put(h, f, v, t)\n"
	"  val[h][f] = v\n"
	"  dirty[h] = dirty[h] or {}\n"
	"  dirty[h][f] = true\n"
	"  ttl[h] = t\n"
	"end\n"
	"local function num(x)\n"
	"  if x % 1 == 0 and x > -1e15 and x < 1e15 then return x end\n"
	"  return string.format('%.17g', x)\n"
	"end\n"
	"if rec then for w in string.gmatch(rec, '%S+') do past[#past + 1] = w end end\n"
	"for i = 1, n do\n"
	"  local b = 2 + (i - 1) * 13\n"
	"  local hc, hp, rc, rp = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]),\n"
	"    tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])\n"
	"  local f = ARGV[b + 6]\n"
	"  local v, p, r, q = get(hc, f), get(hp, f), get(rc, f), get(rp, f)\n"
	"  if v == nil or p == nil or r == nil or q == nil then\n"
	"    return redis.error_reply('ERR counter value is not a number')\n"
	"  end\n"
	"  local adm, g = '0', 0\n"
	"  if rec then\n"
	"    adm = past[2 * i - 1] or '0'\n"
	"    g = tonumber(past[2 * i] or '0') or 0\n"
	"  else\n"
	"    local v0, cost, lim = v, tonumber(ARGV[b + 8]), tonumber(ARGV[b + 9])\n"
	"    local pw = (p + q) * tonumber(ARGV[b + 10])\n"
	"    v = v + tonumber(ARGV[b + 7])\n"
	"    local ok = v + r + pw + cost <= lim\n"
	"    if ok or ARGV[b + 11] == '1' then v = v + cost end\n"
	"    local want, nodes = tonumber(ARGV[b + 12]), tonumber(ARGV[b + 13])\n"
	"    if ok and want > 0 and nodes > 0 and cost > 0 then\n"
	"      g = (lim - v - r - pw) / (2 * nodes)\n"
	"      if g > want then g = want end\n"
	"      g = math.floor(g / cost) * cost\n"
	"      if g >= cost then put(rc, f, r + g, ARGV[b + 5]) else g = 0 end\n"
	"    end\n"
	"    if v ~= v or v == math.huge or v == -math.huge or r + g == math.huge then\n"
	"      return redis.error_reply('ERR counter total would not be finite')\n"
	"    end\n"
	"    if ok then adm = '1' end\n"
	"    if v ~= v0 then put(hc, f, v, ARGV[b + 5]) end\n"
	"    recs[#recs + 1] = adm\n"
	"    recs[#recs + 1] = string.format('%.17g', g)\n"
	"  end\n"
	"  out[#out + 1] = num(v)\n"
	"  out[#out + 1] = num(p)\n"
	"  out[#out + 1] = adm\n"
	"  out[#out + 1] = num(g)\n"
	"end\n"
	"for h, fs in pairs(dirty) do\n"
	"  local set = {}\n"
	"  for f in pairs(fs) do\n"
	"    local x = val[h][f]\n"
	"    set[#set + 1] = f\n"
	"    if x % 1 == 0 and x > -1e15 and x < 1e15 then\n"
	"      set[#set + 1] = string.format('%d', x)\n"
	"    else\n"
	"      set[#set + 1] = string.format('%.17g', x)\n"
	"    end\n"
	"  end\n"
	"  redis.call('HSET', KEYS[h], unpack(set))\n"
	"  redis.call('EXPIRE', KEYS[h], ttl[h])\n"
	"end\n"
	"if tk and not rec then\n"
	"  redis.call('SET', tk, table.concat(recs, ' '), 'EX', '"
	REDIS_STR(STRATEGY_TOKEN_TTL) "')\n"
	"end\n"
	"return out\n";

static inline struct redis_strategy *redis_of(struct strategy *st)
{
	return (struct redis_strategy *)(void *)st;
}

/* ===================================================================== */
/* Small helpers: hashing, decimal and RESP formatting                   */
/* ===================================================================== */

/* FNV-1a 64: the bucket of a key must be the same on every node. */
static uint64_t redis_fnv1a(const void *p, size_t len, uint64_t h)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < len; i++) {
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

#define REDIS_FNV_BASIS 0xcbf29ce484222325ULL

static unsigned redis_bucket(const char *key, size_t len)
{
	return (unsigned)(redis_fnv1a(key, len, REDIS_FNV_BASIS) % REDIS_BUCKETS);
}

/* Writes v in decimal at out (>= 20 bytes, no NUL); returns its length. */
static size_t redis_u64_dec(char *out, uint64_t v)
{
	char tmp[REDIS_U64_MAX_LEN];
	size_t n = 0;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	for (size_t i = 0; i < n; i++)
		out[i] = tmp[n - 1 - i];
	return n;
}

/* Same for a signed value (>= 21 bytes). */
static size_t redis_i64_dec(char *out, int64_t v)
{
	if (v < 0) {
		out[0] = '-';
		return 1 + redis_u64_dec(out + 1, (uint64_t)0 - (uint64_t)v);
	}
	return redis_u64_dec(out, (uint64_t)v);
}

/* Shortest of "%.15g".."%.17g" that reads back as d; integral values in
 * plain digits. d is finite. Returns the length (< REDIS_DBL_MAX_LEN). */
static size_t redis_dbl_dec(char *out, double d)
{
	int len = 0;

	if (d > -1e15 && d < 1e15 && d == (double)(int64_t)d)
		return redis_i64_dec(out, (int64_t)d);
	for (int prec = 15; prec <= 17; prec++) {
		len = snprintf(out, REDIS_DBL_MAX_LEN, "%.*g", prec, d);
		if (strtod(out, NULL) == d)
			break;
	}
	return (size_t)len;
}

static char *redis_put_crlf(char *p)
{
	p[0] = '\r';
	p[1] = '\n';
	return p + 2;
}

/* "*<n>\r\n" */
static char *redis_put_array(char *p, uint64_t n)
{
	*p++ = '*';
	p += redis_u64_dec(p, n);
	return redis_put_crlf(p);
}

/* "$<len>\r\n<data>\r\n" */
static char *redis_put_bulk(char *p, const void *data, size_t len)
{
	*p++ = '$';
	p += redis_u64_dec(p, len);
	p = redis_put_crlf(p);
	if (len)
		memcpy(p, data, len);
	return redis_put_crlf(p + len);
}

/* Bytes redis_put_bulk() writes for a payload of len, at most. */
#define REDIS_BULK_MAX(len) ((len) + 1 + REDIS_U64_MAX_LEN + 4)

/* Bytes of a script call besides its hash name and its counters:
 * "*<n>", EVALSHA, the SHA1, "1", the TTL, the count. */
#define REDIS_CALL_OVERHEAD \
	(3 + REDIS_U64_MAX_LEN + REDIS_BULK_MAX(7) + REDIS_BULK_MAX(40) + REDIS_BULK_MAX(1) + \
	 2 * REDIS_BULK_MAX(REDIS_U64_MAX_LEN))

/*
 * A namespace whose name starts with '}' would close the hash tag at once:
 * "{}" is an empty tag, which Redis Cluster ignores (it hashes the whole
 * key), so a hash, its previous window and its token keys would fall into
 * different slots. Such a name is written after a 0x01 byte, which no
 * namespace name holds (ns_check refuses control characters): the tag is
 * that byte, one slot for the whole namespace. Returns the bytes added.
 */
static size_t redis_tag_mark(const char *ns, size_t ns_len)
{
	return ns_len > 0 && ns[0] == '}';
}

/* Writes "<prefix>:{<ns>:<bucket>" of a hash or token key: the part up to
 * the end of the bucket, inside the Cluster hash tag (the caller closes it);
 * prefix_len + 3 + redis_tag_mark() + ns_len + bucket_len bytes. */
static char *redis_put_tag(char *p, const struct redis_strategy *s, const char *ns,
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
static char *redis_put_hkey_of(char *p, const struct redis_strategy *s, const char *ns,
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

static char *redis_put_hkey(char *p, const struct redis_strategy *s, const char *ns,
			    size_t ns_len, unsigned bucket, uint32_t size, int64_t start)
{
	return redis_put_hkey_of(p, s, ns, ns_len, bucket, size, start, false);
}

/* The cluster slot of the key in the bulk string at p ("$<len>\r\n<key>"). */
static uint16_t redis_bulk_slot(const char *p)
{
	size_t len = 0;

	for (p++; *p >= '0' && *p <= '9'; p++)
		len = len * 10 + (size_t)(*p - '0');
	return redis_key_slot(p + 2, len);
}

/* Bytes redis_put_hkey() writes, at most. */
static size_t redis_hkey_max(const struct redis_strategy *s, size_t ns_len)
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
static char *redis_put_tkey(char *p, const char *base, const struct redis_strategy *s,
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
static size_t redis_tkey_max(const struct redis_strategy *s, size_t ns_len, size_t token_len)
{
	return REDIS_BULK_MAX(s->o.prefix_len + ns_len + token_len + 13 + 3 * REDIS_U64_MAX_LEN +
			      REDIS_TOK_ID_LEN);
}

/* A 64-bit hash of bytes, a word at a time (only compared within this
 * process: no need to be stable across versions or machines). */
static uint64_t redis_hash_bytes(const char *p, size_t len)
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

static void redis_put_tok_id(char *p, uint64_t id)
{
	static const char hex[] = "0123456789abcdef";

	for (int i = REDIS_TOK_ID_LEN - 1; i >= 0; i--, id >>= 4)
		p[i] = hex[id & 15];
}

static uint64_t redis_ttl(uint32_t size)
{
	return 2 * (uint64_t)size + REDIS_TTL_SLACK;
}

/* Parses a bulk string holding a number (all of it, finite). */
static int redis_parse_double(const char *str, size_t len, double *out)
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

/* A total from a script or HGET reply: integer, number string, or nil (0). */
static int redis_reply_number(const redisReply *r, double *out)
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

/* ===================================================================== */
/* Options                                                               */
/* ===================================================================== */

/* A list of "HOST:PORT" (cluster_nodes, sentinel.nodes) into a[]. */
static int redis_opt_addrs(const char *name, const json_t *v, struct redis_addr *a, size_t *n,
			   char *err, size_t errlen)
{
	size_t i;
	json_t *e;

	if (!json_is_array(v) || json_array_size(v) == 0 ||
	    json_array_size(v) > REDIS_SEEDS_MAX) {
		snprintf(err, errlen, "%s: expected an array of 1 to %d \"HOST:PORT\" strings, got %s",
			 name, REDIS_SEEDS_MAX,
			 json_is_array(v) ? "an array of another size" : store_json_type(v));
		return -1;
	}
	json_array_foreach(v, i, e) {
		if (!json_is_string(e) ||
		    redis_addr_parse(&a[i], json_string_value(e), json_string_length(e), false) < 0) {
			snprintf(err, errlen,
				 "%s[%zu]: expected \"HOST:PORT\" with HOST an IPv4 address, "
				 "[IPv6] or \"localhost\" (names are not resolved: it would block the "
				 "loop)", name, i);
			return -1;
		}
	}
	*n = json_array_size(v);
	return 0;
}

/* A secret (password, username) option: a copy in *out (owned), *outlen
 * bytes. */
static int redis_opt_secret(const char *name, const json_t *v, size_t max, char **out,
			    size_t *outlen, char *err, size_t errlen)
{
	const char *str;
	size_t len;

	if (store_opt_str(name, v, max, &str, &len, err, errlen) < 0)
		return -1;
	*out = malloc(len + 1);
	if (*out == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	memcpy(*out, str, len + 1);
	*outlen = len;
	return 0;
}

/* strategy_opts.sentinel: { "master": NAME, "nodes": ["HOST:PORT", ...],
 * "quorum": N, "password": P, "username": U } */
static int redis_opt_sentinel(struct redis_opts *o, const json_t *v, char *err, size_t errlen)
{
	const char *k, *str;
	json_t *e;
	size_t len;
	long long x;

	if (!json_is_object(v)) {
		snprintf(err, errlen, "sentinel: expected an object {\"master\": NAME, \"nodes\": "
			 "[\"HOST:PORT\", ...]}, got %s", store_json_type(v));
		return -1;
	}
	json_object_foreach((json_t *)v, k, e) {
		if (strcmp(k, "master") == 0) {
			if (store_opt_str("sentinel.master", e, REDIS_MASTER_NAME_MAX, &str, &len,
					  err, errlen) < 0)
				return -1;
			if (strlen(str) != len || strpbrk(str, " \r\n")) {
				snprintf(err, errlen, "sentinel.master: expected a name without "
					 "spaces or line breaks");
				return -1;
			}
			memcpy(o->master, str, len + 1);
		} else if (strcmp(k, "nodes") == 0) {
			if (redis_opt_addrs("sentinel.nodes", e, o->seeds, &o->nseeds, err,
					    errlen) < 0)
				return -1;
			/* each sentinel has one vote */
			for (size_t i = 1; i < o->nseeds; i++) {
				for (size_t j = 0; j < i; j++) {
					if (redis_addr_eq(&o->seeds[i], &o->seeds[j])) {
						snprintf(err, errlen, "sentinel.nodes[%zu]: the "
							 "same sentinel as sentinel.nodes[%zu]",
							 i, j);
						return -1;
					}
				}
			}
		} else if (strcmp(k, "quorum") == 0) {
			if (store_opt_int("sentinel.quorum", e, 1, REDIS_SEEDS_MAX, &x, err,
					  errlen) < 0)
				return -1;
			o->quorum = (unsigned)x;
		} else if (strcmp(k, "password") == 0) {
			if (redis_opt_secret("sentinel.password", e, REDIS_PASSWORD_MAX,
					     &o->sentinel_password, &o->sentinel_password_len, err,
					     errlen) < 0)
				return -1;
		} else if (strcmp(k, "username") == 0) {
			if (redis_opt_secret("sentinel.username", e, REDIS_USERNAME_MAX,
					     &o->sentinel_username, &o->sentinel_username_len, err,
					     errlen) < 0)
				return -1;
		} else {
			char name[80];

			snprintf(name, sizeof(name), "sentinel.%.64s", k);
			return store_opt_unknown(name, "master, nodes, quorum, password, username",
						 err, errlen);
		}
	}
	if (!o->master[0] || o->nseeds == 0) {
		snprintf(err, errlen, "sentinel: expected both \"master\" and \"nodes\"");
		return -1;
	}
	if (o->quorum > o->nseeds) {
		snprintf(err, errlen, "sentinel.quorum: expected at most the number of "
			 "sentinel.nodes (%zu), got %u", o->nseeds, o->quorum);
		return -1;
	}
	if (o->quorum == 0)
		o->quorum = (unsigned)(o->nseeds / 2 + 1);     /* a majority */
	if (o->sentinel_username && !o->sentinel_password) {
		snprintf(err, errlen, "sentinel.username: needs sentinel.password");
		return -1;
	}
	return 0;
}

/* What o owns: the passwords, the sentinels' username. */
static void redis_opts_free(struct redis_opts *o)
{
	free(o->password);
	free(o->sentinel_password);
	free(o->sentinel_username);
	o->password = o->sentinel_password = o->sentinel_username = NULL;
}

/* Fills o from the JSON text (NULL = defaults). Returns 0, or -1 with a
 * message naming the option and what was expected. What o owns (the
 * passwords) is its on success and on failure (redis_opts_free() it
 * either way). */
static int redis_opts_parse(struct redis_opts *o, const char *text, char *err, size_t errlen)
{
	json_t *root, *v;
	const char *k;
	bool has_host = false, has_port = false, has_socket = false;
	long long x;
	int rc = -1;

	memset(o, 0, sizeof(*o));
	strcpy(o->addr.host, REDIS_DEFAULT_HOST);
	o->addr.port = REDIS_DEFAULT_PORT;
	o->timeout_ms = REDIS_DEFAULT_TIMEOUT;
	strcpy(o->prefix, REDIS_DEFAULT_PREFIX);
	o->prefix_len = strlen(o->prefix);
	if (store_opts_load(text, &root, err, errlen) < 0)
		return -1;
	if (root == NULL)
		return 0;
	json_object_foreach(root, k, v) {
		const char *str;
		size_t len;

		if (strcmp(k, "host") == 0) {
			unsigned char addr[sizeof(struct in6_addr)];

			if (store_opt_str(k, v, INET6_ADDRSTRLEN - 1, &str, &len, err, errlen) < 0)
				goto out;
			if (strcmp(str, "localhost") == 0)
				str = "127.0.0.1";
			if (strlen(str) != len || (inet_pton(AF_INET, str, addr) != 1 &&
						   inet_pton(AF_INET6, str, addr) != 1)) {
				snprintf(err, errlen,
					 "host: expected an IPv4 or IPv6 address or "
					 "\"localhost\" (names are not resolved: it would block "
					 "the loop)");
				goto out;
			}
			snprintf(o->addr.host, sizeof(o->addr.host), "%s", str);
			has_host = true;
		} else if (strcmp(k, "port") == 0) {
			if (store_opt_int(k, v, 1, 65535, &x, err, errlen) < 0)
				goto out;
			o->addr.port = (int)x;
			has_port = true;
		} else if (strcmp(k, "socket") == 0) {
			if (store_opt_str(k, v, sizeof(o->socket) - 1, &str, &len, err, errlen) < 0)
				goto out;
			if (strlen(str) != len) {
				snprintf(err, errlen,
					 "socket: expected a path without NUL bytes");
				goto out;
			}
			memcpy(o->socket, str, len + 1);
			has_socket = true;
		} else if (strcmp(k, "password") == 0) {
			if (redis_opt_secret(k, v, REDIS_PASSWORD_MAX, &o->password,
					     &o->password_len, err, errlen) < 0)
				goto out;
		} else if (strcmp(k, "db") == 0) {
			if (store_opt_int(k, v, 0, INT_MAX, &x, err, errlen) < 0)
				goto out;
			o->db = (int)x;
		} else if (strcmp(k, "timeout_ms") == 0) {
			if (store_opt_int(k, v, 1, REDIS_TIMEOUT_MAX_MS, &x, err, errlen) < 0)
				goto out;
			o->timeout_ms = (int)x;
		} else if (strcmp(k, "wait_replicas") == 0) {
			if (store_opt_int(k, v, 0, REDIS_WAIT_REPLICAS_MAX, &x, err, errlen) < 0)
				goto out;
			o->wait_replicas = (int)x;
		} else if (strcmp(k, "prefix") == 0) {
			if (store_opt_str(k, v, REDIS_PREFIX_MAX, &str, &len, err, errlen) < 0)
				goto out;
			if (memchr(str, '{', len) || memchr(str, '}', len)) {
				snprintf(err, errlen, "prefix: expected a string "
					 "without '{' or '}' (they would change the Redis Cluster "
					 "hash tag)");
				goto out;
			}
			memcpy(o->prefix, str, len);
			o->prefix[len] = '\0';
			o->prefix_len = len;
		} else if (strcmp(k, "cluster_nodes") == 0) {
			if (redis_opt_addrs(k, v, o->seeds, &o->nseeds, err, errlen) < 0)
				goto out;
			o->mode = REDIS_MODE_CLUSTER;
		} else if (strcmp(k, "sentinel") == 0) {
			if (redis_opt_sentinel(o, v, err, errlen) < 0)
				goto out;
			o->mode = REDIS_MODE_SENTINEL;
		} else {
			store_opt_unknown(k, "host, port, socket, password, db, timeout_ms, prefix, "
					  "cluster_nodes, sentinel, wait_replicas", err, errlen);
			goto out;
		}
	}
	if (has_socket && (has_host || has_port)) {
		snprintf(err, errlen, "socket: cannot be combined with host or port");
		goto out;
	}
	if (json_object_get(root, "cluster_nodes") && json_object_get(root, "sentinel")) {
		snprintf(err, errlen, "cluster_nodes: cannot be combined with sentinel");
		goto out;
	}
	if (o->mode != REDIS_MODE_SINGLE && (has_host || has_port || has_socket)) {
		snprintf(err, errlen, "%s: cannot be combined with host, port or socket (the "
			 "servers come from the %s)", o->mode == REDIS_MODE_CLUSTER ?
			 "cluster_nodes" : "sentinel", o->mode == REDIS_MODE_CLUSTER ?
			 "cluster's slot map" : "sentinels");
		goto out;
	}
	if (o->mode == REDIS_MODE_CLUSTER && o->db != 0) {
		snprintf(err, errlen, "db: must be 0 with cluster_nodes (Redis Cluster has one "
			 "database)");
		goto out;
	}
	rc = 0;
out:
	json_decref(root);
	return rc;
}

/* ===================================================================== */
/* Operations: lifetime and completion                                   */
/* ===================================================================== */

/* Records the first failure of op (later ones are consequences). */
static void redis_op_vfail(struct redis_op *op, const char *fmt, va_list ap)
{
	if (op->status < 0)
		return;
	op->status = -1;
	vsnprintf(op->errstr, sizeof(op->errstr), fmt, ap);
}

static void redis_op_fail(struct redis_op *op, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void redis_op_fail(struct redis_op *op, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	redis_op_vfail(op, fmt, ap);
	va_end(ap);
}

/* Puts op on the done queue; its callback runs from the drain, outside
 * hiredis and outside the caller's current call. */
static void redis_op_finish(struct redis_op *op)
{
	store_op_finish(&op->base);
}

/* Finishes op once nothing of it is in flight or waiting. */
static void redis_op_check(struct redis_op *op)
{
	if (op->inflight == 0)
		redis_op_finish(op);
}

static void redis_op_free(struct redis_op *op)
{
	while (op->waits) {
		struct redis_wait *w = op->waits;

		op->waits = w->next;
		free(w);
	}
	free(op->rows);
	free(op->key_off);
	free(op->keys);
	free(op->arena);
	free(op);
}

/* Runs op's callback once, with its outcome, then frees op. */
static void redis_op_deliver(struct store_op *b)
{
	struct redis_op *op = container_of(b, struct redis_op, base);

	switch (op->k->kind) {
	case REDIS_OP_PUSH:
	case REDIS_OP_WINDOW:
	case REDIS_OP_ADMIT:
	case REDIS_OP_NODES:
		/* The replies marked the counters of every call that was
		 * applied: on a failed push they are the ones the store has
		 * (strategy.h), so the sync loop acks them and only them. */
		/* fall through */
	case REDIS_OP_PURGE:
		if (op->done_cb)
			op->done_cb(op->arg, op->status, op->status == 0 ? NULL : op->errstr);
		break;
	case REDIS_OP_ROWS:
		if (op->rows_cb == NULL)
			break;
		if (op->status == 0) {
			for (size_t i = 0; i < op->nrows; i++)
				op->rows[i].key = op->keys + op->key_off[i];
			op->rows_cb(op->arg, 0, NULL, op->rows, op->nrows);
		} else {
			op->rows_cb(op->arg, -1, op->errstr, NULL, 0);
		}
		break;
	default:
		break;
	}
	redis_op_free(op);
}

static struct redis_op *redis_op_new(struct redis_strategy *s, const struct redis_kind *k,
				     strategy_done_cb done_cb, strategy_rows_cb rows_cb, void *arg)
{
	struct redis_op *op = calloc(1, sizeof(*op));

	if (op == NULL)
		return NULL;
	op->s = s;
	op->base.core = &s->core;
	op->base.deliver = redis_op_deliver;
	op->k = k;
	op->done_cb = done_cb;
	op->rows_cb = rows_cb;
	op->arg = arg;
	return op;
}

/* ===================================================================== */
/* Calls: sending, replies, redirections, WAIT                           */
/* ===================================================================== */

static void redis_on_call_reply(redisAsyncContext *ac, void *r, void *privdata);
static void redis_on_wait_reply(redisAsyncContext *ac, void *r, void *privdata);

int redis_call_send(struct redis_call *c, struct redis_conn *cn)
{
	struct redis_op *op = c->op;

	if (c->asking && redisAsyncCommand(cn->ac, NULL, NULL, "ASKING") != REDIS_OK)
		goto fail;
	if (redisAsyncFormattedCommand(cn->ac, redis_on_call_reply, c, op->cmd + c->begin,
				       c->end - c->begin) != REDIS_OK)
		goto fail;
	c->asked = c->asking;
	c->asking = false;
	c->state = REDIS_CALL_SENT;
	c->conn = cn;
	c->wait = NULL;
	/* an idle connection's silence counts from the work it is given */
	if (cn->inflight++ == 0)
		cn->last_activity = ev_now(op->s->loop);
	op->inflight++;
	return 0;
fail:
	redis_op_fail(op, "cannot queue the command");
	redis_conn_drop_later(cn, "cannot queue a command", false);
	return -1;
}

void redis_call_fail(struct redis_call *c, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	redis_op_vfail(c->op, fmt, ap);
	va_end(ap);
}

/* Sends call c where the mode routes it. Returns 0, or -1 (the op failed
 * with the reason: no connection serves the call's slot now). */
static int redis_call_route(struct redis_call *c)
{
	struct redis_strategy *s = c->op->s;
	struct redis_conn *cn = s->mode->route(s, c->slot);

	if (!redis_conn_usable(cn)) {
		redis_call_fail(c, "not connected (%s)",
				cn && cn->last_err[0] ? cn->last_err : s->mode->why_down(s));
		return -1;
	}
	return redis_call_send(c, cn);
}

/* After a NOSCRIPT error: sends call c again as EVAL of its script (which
 * caches it again), once, on the same connection, behind ASKING again if
 * the EVALSHA went after an ASK (the node importing the slot has no script
 * yet: without ASKING it would answer MOVED back to the source, which asks
 * again, until the redirection limit). Returns true when the call is in
 * flight again. */
static bool redis_resend_eval(struct redis_call *c, struct redis_conn *cn)
{
	const struct redis_kind *k = c->op->k;
	struct redis_op *op = c->op;
	size_t tail = c->end - c->tail, slen = strlen(k->script);
	char *buf = malloc(64 + REDIS_BULK_MAX(slen) + tail), *p = buf;
	bool sent = false;

	c->resent = true;
	if (buf != NULL &&
	    (!c->asked || redisAsyncCommand(cn->ac, NULL, NULL, "ASKING") == REDIS_OK)) {
		p = redis_put_array(p, c->nargs);
		p = redis_put_bulk(p, "EVAL", 4);
		p = redis_put_bulk(p, k->script, slen);
		memcpy(p, op->cmd + c->tail, tail);
		p += tail;
		sent = redisAsyncFormattedCommand(cn->ac, redis_on_call_reply, c, buf,
						  (size_t)(p - buf)) == REDIS_OK;
	}
	if (!sent) {
		redis_op_fail(op, "redis: NOSCRIPT, and resending as EVAL failed");
		/* hiredis refused a command (or an ASKING went alone): the
		 * connection cannot be trusted with what follows. */
		if (buf != NULL)
			redis_conn_drop_later(cn, "cannot queue a command", false);
		free(buf);
		return false;
	}
	free(buf);
	c->state = REDIS_CALL_SENT;
	c->conn = cn;
	c->wait = NULL;             /* a WAIT after it, if needed (redis_op_send_waits) */
	cn->inflight++;
	op->inflight++;
	return true;
}

/* The script cache was flushed (NOSCRIPT): EVAL instead, once per call. */
static bool redis_is_noscript(const struct redis_call *c, const redisReply *r)
{
	return c->op->k->script != NULL && !c->resent && c->op->status == 0 &&
	       r->len >= 8 && memcmp(r->str, "NOSCRIPT", 8) == 0;
}

/*
 * Every call's reply. The call leaves its connection; then, before the
 * operation sees the reply: NOSCRIPT resends it as EVAL, and the mode may
 * take over an error (MOVED, ASK, TRYAGAIN: redis_cluster.c). A NULL reply
 * (the connection is going away) goes to the operation as a failure.
 */
static void redis_on_call_reply(redisAsyncContext *ac, void *r, void *privdata)
{
	struct redis_call *c = privdata;
	struct redis_op *op = c->op;
	struct redis_strategy *s = op->s;
	struct redis_conn *cn = c->conn;
	const redisReply *reply = r;

	c->state = REDIS_CALL_IDLE;
	c->conn = NULL;
	op->inflight--;
	if (cn != NULL) {
		cn->inflight--;
		if (reply != NULL)
			cn->last_activity = ev_now(s->loop);
	}
	if (reply != NULL && reply->type == REDIS_REPLY_ERROR && cn != NULL) {
		if (redis_is_noscript(c, reply) && redis_resend_eval(c, cn)) {
			redis_op_send_waits(op);
			return;
		}
		if (s->mode->redirect && s->mode->redirect(c, cn, reply)) {
			redis_op_check(op);
			return;
		}
	}
	op->k->reply(c, ac, reply);
	redis_op_check(op);
}

/* The call's results are in: valid now, or once its WAIT says enough
 * replicas have them (wait_replicas). */
static void redis_call_applied(struct redis_call *c)
{
	struct redis_op *op = c->op;

	if (op->s->o.wait_replicas == 0 || op->k->commit == NULL || c->ro) {
		if (op->k->commit)
			op->k->commit(c);
		return;
	}
	if (c->wait != NULL) {
		c->state = REDIS_CALL_APPLIED;
		c->conn = c->wait->conn;
	} else {
		redis_op_fail(op, "redis: no WAIT followed the call");
	}
}

/*
 * wait_replicas: after the calls an op just sent, one "WAIT <n> <ms>" on
 * each connection that got some: Redis answers once n replicas have every
 * write this connection made before it (or after ms, with how many did).
 * The calls it follows are confirmed by it, or fail ("not replicated"):
 * their diffs stay with the caller, who resends them with the same token,
 * so a write the old master took but no replica got is applied again by
 * the new master, and one that did reach the replica is not.
 */
void redis_op_send_waits(struct redis_op *op)
{
	struct redis_strategy *s = op->s;

	if (s->o.wait_replicas == 0 || op->k->commit == NULL)
		return;
	for (size_t i = 0; i < op->ncalls; i++) {
		struct redis_call *c = &op->calls[i];
		struct redis_wait *w;

		if (c->state != REDIS_CALL_SENT || c->wait != NULL || c->ro)
			continue;
		for (w = op->waits; w; w = w->next)
			if (w->conn == c->conn && !w->sent)
				break;
		if (w == NULL) {
			w = calloc(1, sizeof(*w));
			if (w == NULL) {
				redis_op_fail(op, "out of memory");
				return;
			}
			w->op = op;
			w->conn = c->conn;
			w->next = op->waits;
			op->waits = w;
		}
		c->wait = w;
	}
	for (struct redis_wait *w = op->waits; w; w = w->next) {
		if (w->sent)
			continue;
		w->sent = true;
		if (redisAsyncCommand(w->conn->ac, redis_on_wait_reply, w, "WAIT %d %d",
				      s->o.wait_replicas, s->o.timeout_ms / 2) != REDIS_OK) {
			redis_op_fail(op, "cannot queue the command");
			redis_conn_drop_later(w->conn, "cannot queue a command", false);
			w->conn = NULL;
			continue;
		}
		w->conn->inflight++;
		op->inflight++;
	}
}

static void redis_on_wait_reply(redisAsyncContext *ac, void *r, void *privdata)
{
	struct redis_wait *w = privdata;
	struct redis_op *op = w->op;
	const redisReply *reply = r;
	long long got = -1;

	(void)ac;
	op->inflight--;
	w->conn->inflight--;
	if (reply != NULL) {
		w->conn->last_activity = ev_now(op->s->loop);
		if (reply->type == REDIS_REPLY_INTEGER)
			got = reply->integer;
	}
	for (size_t i = 0; i < op->ncalls; i++) {
		struct redis_call *c = &op->calls[i];

		if (c->wait != w || c->state != REDIS_CALL_APPLIED)
			continue;
		c->state = REDIS_CALL_IDLE;
		c->conn = NULL;
		if (got >= op->s->o.wait_replicas)
			op->k->commit(c);
		else if (reply == NULL)
			redis_op_fail(op, "connection lost before WAIT answered");
		else
			redis_op_fail(op, "not replicated: %lld of %d replicas within %d ms", got,
				      op->s->o.wait_replicas, op->s->o.timeout_ms / 2);
	}
	w->conn = NULL;
	redis_op_check(op);
}

/* TRYAGAIN: the call goes again after REDIS_TRYAGAIN_MS. */
void redis_call_wait(struct redis_call *c)
{
	struct redis_strategy *s = c->op->s;

	c->state = REDIS_CALL_WAITING;
	c->next_wait = NULL;
	c->op->inflight++;
	if (s->waiting_tail)
		s->waiting_tail->next_wait = c;
	else
		s->waiting = c;
	s->waiting_tail = c;
	if (!ev_is_active(&s->waiting_timer)) {
		ev_timer_set(&s->waiting_timer, REDIS_TRYAGAIN_MS / 1000.0, 0.);
		ev_timer_start(s->loop, &s->waiting_timer);
	}
}

/* Takes the calls of op (every op if NULL) off the waiting list; they are
 * done (failed) unless resent by the caller. Returns the list taken. */
static struct redis_call *redis_waiting_take(struct redis_strategy *s, const struct redis_op *op)
{
	struct redis_call *taken = NULL, **tp = &taken, **pp = &s->waiting, *c;

	s->waiting_tail = NULL;
	while ((c = *pp) != NULL) {
		if (op == NULL || c->op == op) {
			*pp = c->next_wait;
			c->next_wait = NULL;
			*tp = c;
			tp = &c->next_wait;
			c->state = REDIS_CALL_IDLE;
			c->op->inflight--;
		} else {
			s->waiting_tail = c;
			pp = &c->next_wait;
		}
	}
	return taken;
}

static void redis_on_waiting_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct redis_strategy *s = container_of(w, struct redis_strategy, waiting_timer);
	struct redis_call *c = redis_waiting_take(s, NULL), *next;

	(void)loop;
	(void)revents;
	store_enter(&s->core);
	for (struct redis_call *i = c; i; i = i->next_wait)
		redis_call_route(i);
	for (; c; c = next) {
		next = c->next_wait;
		c->next_wait = NULL;
		redis_op_send_waits(c->op);
		redis_op_check(c->op);
	}
	store_leave(&s->core);
}

/* ===================================================================== */
/* Timeouts and readiness                                                */
/* ===================================================================== */

/* The kick (then the done queue): drops asked for from inside hiredis,
 * retired connections, the mode's deferred work. */
static void redis_on_kick(struct store_core *core)
{
	struct redis_strategy *s = container_of(core, struct redis_strategy, core);

	redis_conns_kick(s);
	if (s->mode->kick && !s->destroying)
		s->mode->kick(s);
}

/*
 * The silence timeout of an operation: timeout_ms after it was sent or
 * after the last reply any connection it waits on delivered (to any
 * call), whichever is later - an operation pipelined behind a big batch
 * that keeps answering is waiting, not stuck; a call waiting to try again
 * (TRYAGAIN) is not silence either. The timer is pushed back lazily, here,
 * rather than at every reply. On expiry: fail the operation, drop the
 * connections it waits on (which fails the others in flight on them) and
 * reconnect.
 */
static void redis_on_op_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct redis_op *op = container_of(w, struct redis_op, base.timer);
	struct redis_strategy *s = op->s;
	ev_tstamp last = 0;
	bool waiting = false;

	(void)loop;
	(void)revents;
	for (size_t i = 0; i < op->ncalls; i++) {
		const struct redis_call *c = &op->calls[i];

		if ((c->state == REDIS_CALL_SENT || c->state == REDIS_CALL_APPLIED) && c->conn &&
		    c->conn->last_activity > last)
			last = c->conn->last_activity;
		waiting |= c->state == REDIS_CALL_WAITING;
	}
	for (const struct redis_wait *wt = op->waits; wt; wt = wt->next)
		if (wt->conn && wt->conn->last_activity > last)
			last = wt->conn->last_activity;
	if (waiting)
		last = ev_now(s->loop);
	if (!store_op_silent_since(&op->base, last))
		return;
	store_enter(&s->core);
	redis_op_fail(op, "timeout: no reply from redis within %d ms", s->o.timeout_ms);
	redis_waiting_take(s, op);
	for (size_t i = 0; i < op->ncalls; i++) {
		struct redis_call *c = &op->calls[i];

		if ((c->state == REDIS_CALL_SENT || c->state == REDIS_CALL_APPLIED) && c->conn)
			redis_conn_close(c->conn, "an operation timed out", true);
	}
	for (struct redis_wait *wt = op->waits; wt; wt = wt->next)
		if (wt->conn)
			redis_conn_close(wt->conn, "an operation timed out", true);
	if (!op->base.finished) {    /* its calls were all on those connections */
		op->inflight = 0;
		redis_op_finish(op);
	}
	store_leave(&s->core);
}

/* Refuses an operation when the instance cannot take it now. */
static int redis_check_ready(const struct redis_strategy *s, char errstr[STRATEGY_ERR_MAX])
{
	if (s->destroying) {
		redis_seterr(errstr, "not connected (instance destroyed)");
		return -1;
	}
	if (!s->mode->ready(s)) {
		const char *why = s->mode->why_down(s);

		redis_seterr(errstr, "not connected%s%s%s", why[0] ? " (" : "", why,
			     why[0] ? ")" : "");
		return -1;
	}
	return 0;
}

/*
 * Sends every call of a built op where the mode routes it, then the WAITs
 * it needs, and starts its silence timer. A call whose slot no connection
 * serves now fails alone (the op fails, with the others' results kept).
 * Returns 0, or -1 when nothing could be sent: op freed, errstr says why
 * ("not connected (...)"), the callback never runs.
 */
static int redis_op_launch(struct redis_op *op, char errstr[STRATEGY_ERR_MAX])
{
	struct redis_strategy *s = op->s;

	for (size_t i = 0; i < op->ncalls; i++)
		redis_call_route(&op->calls[i]);
	if (op->inflight == 0 && op->ncalls > 0) {
		redis_seterr(errstr, "%s", op->errstr[0] ? op->errstr : "not connected");
		if (strncmp(op->errstr, "not connected", 13) != 0)
			redis_seterr(errstr, "not connected (%s)", op->errstr);
		redis_op_free(op);
		return -1;
	}
	redis_op_send_waits(op);
	if (op->inflight == 0) {
		redis_op_finish(op);
		return 0;
	}
	ev_now_update(s->loop);     /* building a big batch takes a while */
	store_op_start(&s->core, &op->base, redis_on_op_timeout, redis_op_deliver);
	return 0;
}

/* A NULL reply: the connection is going away with this call in flight. */
static void redis_call_lost(struct redis_call *c, const redisAsyncContext *ac)
{
	struct redis_strategy *s = c->op->s;

	if (s->destroying)
		redis_op_fail(c->op, "instance destroyed");
	else if (ac->err && ac->errstr)
		redis_op_fail(c->op, "connection lost: %s", ac->errstr);
	else
		redis_op_fail(c->op, "connection lost: closed");
}

/* An error reply, as "redis: <first line>". */
static void redis_call_error(struct redis_call *c, const redisReply *r)
{
	redis_op_fail(c->op, "redis: %.*s", (int)(r->len > 110 ? 110 : r->len), r->str);
}

/* The reply of c is no reply (connection going away) or an error: the op
 * fails with why. Returns true then. */
static bool redis_reply_failed(struct redis_call *c, const redisAsyncContext *ac,
			       const redisReply *r)
{
	if (r == NULL)
		redis_call_lost(c, ac);
	else if (r->type == REDIS_REPLY_ERROR)
		redis_call_error(c, r);
	else
		return false;
	return true;
}

/* ===================================================================== */
/* Single server                                                         */
/* ===================================================================== */

static int redis_single_start(struct redis_strategy *s, char *err, size_t errlen)
{
	s->main = redis_conn_new(s, REDIS_CONN_DATA, &s->o.addr);
	if (s->main == NULL) {
		snprintf(err, errlen, "redis: out of memory");
		return -1;
	}
	redis_conn_open(s->main);
	return 0;
}

static struct redis_conn *redis_single_route(struct redis_strategy *s, uint16_t slot)
{
	(void)slot;
	return s->main;
}

static bool redis_single_ready(const struct redis_strategy *s)
{
	return s->main && s->main->state == REDIS_ST_READY;
}

static bool redis_single_connecting(const struct redis_strategy *s)
{
	return s->main && s->main->state == REDIS_ST_CONNECTING;
}

static const char *redis_single_why_down(const struct redis_strategy *s)
{
	return s->main ? s->main->last_err : "";
}

const struct redis_mode_ops redis_single_mode = {
	.name = "single",
	.start = redis_single_start,
	.route = redis_single_route,
	.ready = redis_single_ready,
	.connecting = redis_single_connecting,
	.why_down = redis_single_why_down,
};

/* ===================================================================== */
/* push_diffs                                                            */
/* ===================================================================== */

/* One hash of a batch while grouping. */
struct redis_group {
	const char *ns;
	size_t ns_len;
	int64_t start;
	uint32_t size;
	uint32_t bucket;
	uint32_t count;
	uint32_t pos;                   /* first slot in order[] */
	uint64_t hash;
};

struct redis_grouping {
	struct redis_group *g;
	size_t ng, gcap;
	uint32_t *table;                /* group index + 1, 0 = empty */
	size_t tcap;                    /* power of 2 */
};

static uint64_t redis_mix(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

/* A push token: NULL (none) or 1..STRATEGY_TOKEN_MAX bytes. */
static int redis_check_token(const char *token, size_t *len, char errstr[STRATEGY_ERR_MAX])
{
	*len = 0;
	if (token == NULL)
		return 0;
	*len = strnlen(token, STRATEGY_TOKEN_MAX + 1);
	if (*len == 0 || *len > STRATEGY_TOKEN_MAX) {
		redis_seterr(errstr, "token: expected 1 to %d bytes%s", STRATEGY_TOKEN_MAX,
			     *len ? ", got more" : ", got none");
		return -1;
	}
	return 0;
}

/* Writes the token ids of calls [from, to): each call's body hash mixed
 * with how many calls after it (up to `to`) have the same body. */
static void redis_put_tok_ids(struct redis_op *op, size_t from, size_t to)
{
	for (size_t i = from; i < to; i++) {
		uint64_t later = 0;

		if (op->calls[i].tok_id == 0)
			continue;       /* reads carry no token */
		for (size_t j = i + 1; j < to; j++)
			later += op->calls[j].tok_id != 0 &&
				 op->calls[j].body_hash == op->calls[i].body_hash;
		redis_put_tok_id(op->cmd + op->calls[i].tok_id,
				 redis_mix(op->calls[i].body_hash ^
					   redis_mix(later + 0x9e3779b97f4a7c15ULL)));
	}
}

static int redis_grouping_grow(struct redis_grouping *gr)
{
	size_t ncap = gr->tcap ? gr->tcap * 2 : 256;
	uint32_t *nt = calloc(ncap, sizeof(*nt));

	if (nt == NULL)
		return -1;
	for (size_t i = 0; i < gr->ng; i++) {
		size_t j = gr->g[i].hash & (ncap - 1);

		while (nt[j])
			j = (j + 1) & (ncap - 1);
		nt[j] = (uint32_t)i + 1;
	}
	free(gr->table);
	gr->table = nt;
	gr->tcap = ncap;
	return 0;
}

/* The group of counter c (bucket b, ns hash nh), created if new. Returns
 * its index or -1 (out of memory). */
static long redis_group_of(struct redis_grouping *gr, const struct strategy_counter *c,
			   unsigned b, uint64_t nh)
{
	uint64_t h = redis_mix(nh ^ redis_mix(((uint64_t)c->size << 32 | b) ^
					      redis_mix((uint64_t)c->start)));
	size_t j;

	if ((gr->ng + 1) * 2 > gr->tcap && redis_grouping_grow(gr) < 0)
		return -1;
	for (j = h & (gr->tcap - 1); gr->table[j]; j = (j + 1) & (gr->tcap - 1)) {
		struct redis_group *g = &gr->g[gr->table[j] - 1];

		if (g->hash == h && g->size == c->size && g->start == c->start && g->bucket == b &&
		    g->ns_len == c->ns_len &&
		    (g->ns == c->ns || memcmp(g->ns, c->ns, c->ns_len) == 0))
			return (long)(gr->table[j] - 1);
	}
	if (gr->ng == gr->gcap) {
		size_t ncap = gr->gcap ? gr->gcap * 2 : 64;
		struct redis_group *ng = realloc(gr->g, ncap * sizeof(*ng));

		if (ng == NULL)
			return -1;
		gr->g = ng;
		gr->gcap = ncap;
	}
	gr->g[gr->ng] = (struct redis_group){ .ns = c->ns, .ns_len = c->ns_len, .start = c->start,
					      .size = c->size, .bucket = b, .hash = h };
	gr->table[j] = (uint32_t)gr->ng + 1;
	return (long)gr->ng++;
}

/* Reply of one script call: an array of c->n totals in c's order. */
static void redis_push_reply(struct redis_call *c, const redisAsyncContext *ac,
			     const redisReply *reply)
{
	struct redis_op *op = c->op;

	if (redis_reply_failed(c, ac, reply)) {
		/* the op failed */
	} else if (reply->type != REDIS_REPLY_ARRAY || reply->elements != c->n) {
		redis_op_fail(op, "redis: %s returned %s of %zu elements, expected %u totals",
			      c->ro ? "HMGET" : "push script", redis_reply_type_name(reply->type),
			      reply->type == REDIS_REPLY_ARRAY ? reply->elements : (size_t)0, c->n);
	} else {
		/* All or nothing: a call is confirmed as a whole, so that the
		 * counters a caller resends are whole calls (the token keys of
		 * a resend match those of the first try). */
		double total;
		uint32_t i;

		for (i = 0; i < c->n; i++) {
			if (redis_reply_number(reply->element[i], &total) < 0) {
				redis_op_fail(op, "redis: %s returned a %s total",
					      c->ro ? "HMGET" : "push script",
					      redis_reply_type_name(reply->element[i]->type));
				break;
			}
		}
		for (uint32_t j = 0; i == c->n && j < c->n; j++) {
			struct strategy_counter *ctr = &op->batch[op->order[c->first + j]];

			redis_reply_number(reply->element[j], &ctr->total);
		}
		if (i == c->n)
			redis_call_applied(c);
	}
}

/* This call was applied (and replicated, with wait_replicas). */
static void redis_push_commit(struct redis_call *c)
{
	for (uint32_t j = 0; j < c->n; j++)
		c->op->batch[c->op->order[c->first + j]].ok = true;
}

static const struct redis_kind redis_push_kind = {
	.kind = REDIS_OP_PUSH,
	.reply = redis_push_reply,
	.commit = redis_push_commit,
	.script = redis_push_script,
};

static int redis_push_diffs(struct strategy *st, struct strategy_counter *batch, size_t n,
			    const char *token, strategy_done_cb cb, void *arg,
			    char errstr[STRATEGY_ERR_MAX])
{
	struct redis_strategy *s = redis_of(st);
	struct redis_grouping gr = { 0 };
	struct redis_op *op;
	uint32_t *gid = NULL;
	size_t ncalls = 0, cmd_max = 0, calls_off, cmd_off, total;
	const char *last_ns = NULL;
	size_t last_ns_len = 0;
	uint64_t nh = 0;
	size_t token_len = 0;
	char *p, *key;

	if (redis_check_ready(s, errstr) < 0 || redis_check_token(token, &token_len, errstr) < 0)
		return -1;
	if (n > UINT32_MAX / 2) {
		redis_seterr(errstr, "batch of %zu counters is too large", n);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		if (batch[i].size == 0) {
			redis_seterr(errstr, "counter %zu: window size 0", i);
			return -1;
		}
		if (!isfinite(batch[i].diff) || !isfinite(batch[i].spent) ||
		    !isfinite(batch[i].returned)) {
			redis_seterr(errstr, "counter %zu: diff, spent or returned is not finite", i);
			return -1;
		}
		batch[i].ok = false;
	}
	op = redis_op_new(s, &redis_push_kind, cb, NULL, arg);
	if (op == NULL)
		goto oom;
	op->batch = batch;
	op->n = n;
	if (n == 0) {
		redis_op_finish(op);
		return 0;
	}

	/* 1. group: counter -> hash */
	gid = malloc(n * sizeof(*gid));
	if (gid == NULL)
		goto oom;
	for (size_t i = 0; i < n; i++) {
		const struct strategy_counter *c = &batch[i];
		long g;

		if (c->ns != last_ns || c->ns_len != last_ns_len) {
			last_ns = c->ns;
			last_ns_len = c->ns_len;
			nh = redis_fnv1a(c->ns, c->ns_len, REDIS_FNV_BASIS);
		}
		g = redis_group_of(&gr, c, redis_bucket(c->key, c->key_len), nh);
		if (g < 0)
			goto oom;
		gid[i] = (uint32_t)g;
		gr.g[g].count++;
	}

	/* 2. size the arena: order[], calls[], the commands */
	for (size_t g = 0; g < gr.ng; g++) {
		size_t chunks = (gr.g[g].count + REDIS_CHUNK_MAX - 1) / REDIS_CHUNK_MAX;

		ncalls += chunks;
		cmd_max += chunks * (REDIS_CALL_OVERHEAD + REDIS_BULK_MAX(1) +
				     2 * redis_hkey_max(s, gr.g[g].ns_len));
		if (token)
			cmd_max += chunks * redis_tkey_max(s, gr.g[g].ns_len, token_len);
	}
	for (size_t i = 0; i < n; i++)
		cmd_max += REDIS_BULK_MAX(batch[i].key_len) + 3 * REDIS_BULK_MAX(REDIS_DBL_MAX_LEN);
	calls_off = (n * sizeof(uint32_t) + 15) & ~(size_t)15;
	cmd_off = calls_off + ncalls * sizeof(struct redis_call);
	total = cmd_off + cmd_max;
	op->arena = malloc(total);
	if (op->arena == NULL)
		goto oom;
	op->order = op->arena;
	op->calls = (struct redis_call *)(void *)((char *)op->arena + calls_off);
	op->cmd = (char *)op->arena + cmd_off;

	/* 3. order[]: the batch indexes, grouped (stable within a group) */
	for (size_t g = 0, pos = 0; g < gr.ng; g++) {
		gr.g[g].pos = (uint32_t)pos;
		pos += gr.g[g].count;
	}
	for (size_t i = 0; i < n; i++)
		op->order[gr.g[gid[i]].pos++] = (uint32_t)i;
	free(gid);
	gid = NULL;

	/*
	 * 4. one script call per chunk of a group:
	 *   EVALSHA <sha> 1 <hash> <ttl> <k> "0" <field 1..k> <diff 1..k>
	 *   EVALSHA <sha> 2 <hash> <rhash> <ttl> <k> "1" <field 1..k> <diff 1..k>
	 *           <spent 1..k> <returned 1..k>
	 *   EVALSHA <sha> 2|3 <hash> [<rhash>] <token key> <ttl> <k> ...
	 *                 ^ tail (kept for a NOSCRIPT resend as EVAL)
	 * <rhash>: the hash of the reservations, named only when one of the
	 * chunk's grants spent or returned is not 0 (a call of one key is
	 * served by the importing master of a slot being migrated, one of
	 * several missing keys is not: TRYAGAIN).
	 *
	 * With a token, each call gets its own token key, whose id must come
	 * out the same when the caller resends only the counters of calls that
	 * were not confirmed (whole calls, in the same order: they regroup and
	 * rechunk into the same calls, only without the confirmed ones). The
	 * chunk's index in its hash would not (a confirmed first chunk shifts
	 * the others), so the id is a hash of the call's fields and diffs -
	 * plus, to tell apart calls of one hash with the very same fields and
	 * diffs (duplicates in a batch), how many such calls follow it in the
	 * hash: replies arrive in order, so the calls that may have been
	 * applied without being confirmed are the last ones of the push, and
	 * every call that follows one of them is resent too.
	 */
	p = op->cmd;
	for (size_t g = 0, first = 0; g < gr.ng; g++) {
		const struct redis_group *grp = &gr.g[g];
		char ttl[REDIS_U64_MAX_LEN];
		size_t ttl_len = redis_u64_dec(ttl, redis_ttl(grp->size));
		size_t c0 = op->ncalls;

		for (uint32_t done = 0; done < grp->count;) {
			struct redis_call *c = &op->calls[op->ncalls++];
			uint32_t k = grp->count - done > REDIS_CHUNK_MAX ? REDIS_CHUNK_MAX
									 : grp->count - done;
			char kbuf[REDIS_U64_MAX_LEN];
			size_t body;
			bool ro = true;

			bool un = false;

			for (uint32_t i = 0; i < k; i++)
				un = un || batch[op->order[first + i]].spent != 0 ||
				     batch[op->order[first + i]].returned != 0;
			for (uint32_t i = 0; i < k && ro && !un; i++)
				ro = batch[op->order[first + i]].diff == 0;
			ro = ro && !un;
			if (ro) {
				/* Reads only: HMGET <hash> <field 1..k>, no script,
				 * no token (nothing to apply twice), no WAIT. */
				*c = (struct redis_call){ .op = op, .first = (uint32_t)first, .n = k,
							  .ro = true,
							  .begin = (size_t)(p - op->cmd) };
				p = redis_put_array(p, 2 + k);
				p = redis_put_bulk(p, "HMGET", 5);
				key = p;
				p = redis_put_hkey(p, s, grp->ns, grp->ns_len, grp->bucket,
						   grp->size, grp->start);
				c->slot = redis_bulk_slot(key);
				for (uint32_t i = 0; i < k; i++) {
					const struct strategy_counter *ctr =
						&batch[op->order[first + i]];

					p = redis_put_bulk(p, ctr->key, ctr->key_len);
				}
				c->end = (size_t)(p - op->cmd);
				done += k;
				first += k;
				continue;
			}
			*c = (struct redis_call){ .op = op, .first = (uint32_t)first, .n = k,
						  .nargs = 7 + (token ? 1 : 0) + (un ? 1 : 0) +
							   (un ? 4 : 2) * k,
						  .begin = (size_t)(p - op->cmd) };
			p = redis_put_array(p, c->nargs);
			p = redis_put_bulk(p, "EVALSHA", 7);
			p = redis_put_bulk(p, s->sha, 40);
			c->tail = (size_t)(p - op->cmd);
			p = redis_put_bulk(p, kbuf, redis_u64_dec(kbuf, 1 + (token ? 1 : 0) +
									  (un ? 1 : 0)));
			key = p;
			p = redis_put_hkey(p, s, grp->ns, grp->ns_len, grp->bucket, grp->size,
					   grp->start);
			c->slot = redis_bulk_slot(key);
			if (un)
				p = redis_put_hkey_of(p, s, grp->ns, grp->ns_len, grp->bucket,
						      grp->size, grp->start, true);
			if (token)
				p = redis_put_tkey(p, op->cmd, s, grp->ns, grp->ns_len, grp->bucket,
						   grp->size, grp->start, token, token_len,
						   &c->tok_id);
			p = redis_put_bulk(p, ttl, ttl_len);
			p = redis_put_bulk(p, kbuf, redis_u64_dec(kbuf, k));
			body = (size_t)(p - op->cmd);
			p = redis_put_bulk(p, un ? "1" : "0", 1);
			for (uint32_t i = 0; i < k; i++) {
				const struct strategy_counter *ctr = &batch[op->order[first + i]];

				p = redis_put_bulk(p, ctr->key, ctr->key_len);
			}
			for (uint32_t i = 0; i < k; i++) {
				char d[REDIS_DBL_MAX_LEN];

				double diff = batch[op->order[first + i]].diff;

				p = redis_put_bulk(p, d, redis_dbl_dec(d, diff));
			}
			for (uint32_t i = 0; un && i < 2 * k; i++) {
				const struct strategy_counter *ctr = &batch[op->order[first + i % k]];
				char d[REDIS_DBL_MAX_LEN];

				p = redis_put_bulk(p, d, redis_dbl_dec(d, i < k ? ctr->spent
										 : ctr->returned));
			}
			c->end = (size_t)(p - op->cmd);
			if (token)
				c->body_hash = redis_hash_bytes(op->cmd + body, c->end - body);
			done += k;
			first += k;
		}
		if (token)
			redis_put_tok_ids(op, c0, op->ncalls);
	}
	free(gr.g);
	free(gr.table);
	return redis_op_launch(op, errstr);
oom:
	free(gid);
	free(gr.g);
	free(gr.table);
	if (op)
		redis_op_free(op);
	redis_seterr(errstr, "out of memory");
	return -1;
}

/* ===================================================================== */
/* admit                                                                 */
/* ===================================================================== */

/* Reply of one admission call: 4 values per admission, in the call's
 * order. All or nothing, as for pushes. */
static void redis_admit_reply(struct redis_call *c, const redisAsyncContext *ac,
			      const redisReply *reply)
{
	struct redis_op *op = c->op;
	uint32_t j;

	if (redis_reply_failed(c, ac, reply))
		return;         /* the op failed */
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 4 * (size_t)c->n) {
		redis_op_fail(op, "redis: admit script returned %s of %zu elements, expected %u "
			      "times {current, previous, admitted, grant}",
			      redis_reply_type_name(reply->type),
			      reply->type == REDIS_REPLY_ARRAY ? reply->elements : (size_t)0, c->n);
		return;
	}
	for (j = 0; j < c->n; j++) {
		redisReply **e = reply->element + 4 * j;
		double cur, prev, grant;

		if (redis_reply_number(e[0], &cur) < 0 || redis_reply_number(e[1], &prev) < 0 ||
		    redis_reply_number(e[3], &grant) < 0 || !(grant >= 0) ||
		    e[2]->type != REDIS_REPLY_STRING || e[2]->len != 1 ||
		    (e[2]->str[0] != '0' && e[2]->str[0] != '1')) {
			redis_op_fail(op, "redis: admit script returned %s for admission %u, "
				      "expected {current, previous, admitted, grant}",
				      redis_reply_type_name(e[0]->type), j);
			return;
		}
	}
	for (j = 0; j < c->n; j++) {
		redisReply **e = reply->element + 4 * j;
		struct strategy_admit *ad = &op->admits[op->order[c->first + j]];

		redis_reply_number(e[0], &ad->current);
		redis_reply_number(e[1], &ad->previous);
		redis_reply_number(e[3], &ad->grant);
		ad->admitted = e[2]->str[0] == '1';
	}
	redis_call_applied(c);
}

static void redis_admit_commit(struct redis_call *c)
{
	for (uint32_t j = 0; j < c->n; j++)
		c->op->admits[c->op->order[c->first + j]].ok = true;
}

static const struct redis_kind redis_admit_kind = {
	.kind = REDIS_OP_ADMIT,
	.reply = redis_admit_reply,
	.commit = redis_admit_commit,
	.script = redis_admit_script,
};

/* A hash an admission call names: (ns, bucket, size, start), counts or
 * reservations. */
struct redis_ahash {
	const char *ns;
	size_t ns_len;
	unsigned bucket;
	uint32_t size;
	int64_t start;
	bool reserved;
};

/* Index (from 0) of hash h among the call's hashes, added if new. */
static uint32_t redis_ahash_index(struct redis_ahash *hs, uint32_t *nh, const struct redis_ahash *h)
{
	for (uint32_t i = 0; i < *nh; i++)
		if (hs[i].start == h->start && hs[i].size == h->size &&
		    hs[i].bucket == h->bucket && hs[i].ns_len == h->ns_len &&
		    hs[i].reserved == h->reserved &&
		    (hs[i].ns == h->ns || memcmp(hs[i].ns, h->ns, h->ns_len) == 0))
			return i;
	hs[*nh] = *h;
	return (*nh)++;
}

/* The slot of (ns, bucket)'s hash tag, as redis_put_tag() writes it. */
static uint16_t redis_tag_slot(const char *ns, size_t ns_len, unsigned bucket)
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

/*
 * The admissions of one loop iteration in as few script calls as the
 * servers allow: one (per REDIS_ADMIT_CHUNK admissions) for a single
 * server or a sentinel's master; one per slot for a Redis Cluster, whose
 * scripts may touch one slot only. The admissions keep their order within
 * a call (two of one key see each other), and calls of one slot leave in
 * order.
 *   EVALSHA <sha> <k> [<token key>] <hash 1..m> <"1"|"0"> <n> <13 per admission>
 *                 ^ tail (kept for a NOSCRIPT resend as EVAL)
 * With a token, a call's token key is in its first admission's hash tag;
 * its id is a hash of everything after it plus how many identical calls
 * of its slot follow it (as for push_diffs): stable when the caller
 * resends the same admissions, or only those of the calls that were not
 * confirmed, in the same order.
 */
static int redis_admit(struct strategy *st, struct strategy_admit *a, size_t n,
		       const char *token, strategy_done_cb cb, void *arg,
		       char errstr[STRATEGY_ERR_MAX])
{
	struct redis_strategy *s = redis_of(st);
	bool cluster = s->o.mode == REDIS_MODE_CLUSTER;
	struct redis_op *op;
	struct redis_ahash hs[4 * REDIS_ADMIT_CHUNK];
	uint32_t aidx[4 * REDIS_ADMIT_CHUNK];
	uint16_t *slot = NULL;
	bool *placed = NULL;
	size_t token_len = 0, cmd_max = 0, ncalls_max, calls_off, cmd_off;
	char *p, *key = NULL;

	if (redis_check_ready(s, errstr) < 0 || redis_check_token(token, &token_len, errstr) < 0)
		return -1;
	if (n > UINT32_MAX / 4) {
		redis_seterr(errstr, "batch of %zu admissions is too large", n);
		return -1;
	}
	if (strategy_admit_check(a, n, errstr) < 0)
		return -1;
	for (size_t i = 0; cluster && i < n; i++) {
		if (a[i].ns_len > REDIS_NS_TAG_MAX) {
			redis_seterr(errstr, "admission %zu: namespace of %zu bytes, at most %d", i,
				     a[i].ns_len, REDIS_NS_TAG_MAX);
			return -1;
		}
	}
	op = redis_op_new(s, &redis_admit_kind, cb, NULL, arg);
	if (op == NULL)
		goto oom;
	op->admits = a;
	op->n = n;
	if (n == 0) {
		redis_op_finish(op);
		return 0;
	}
	slot = malloc(n * (sizeof(*slot) + sizeof(*placed)));
	if (slot == NULL)
		goto oom;
	placed = (bool *)(slot + n);
	/* 1. each admission's slot (a single server: all one) */
	for (size_t i = 0; i < n; i++) {
		slot[i] = cluster ? redis_tag_slot(a[i].ns, a[i].ns_len,
						   redis_bucket(a[i].key, a[i].key_len)) : 0;
		placed[i] = false;
	}
	/* 2. the arena: order[], calls[], the commands (at most one call per
	 * admission) */
	ncalls_max = n;
	for (size_t i = 0; i < n; i++) {
		cmd_max += 4 * redis_hkey_max(s, a[i].ns_len) + REDIS_BULK_MAX(a[i].key_len) +
			   12 * REDIS_BULK_MAX(REDIS_DBL_MAX_LEN);
		cmd_max += REDIS_CALL_OVERHEAD + 3 * REDIS_BULK_MAX(REDIS_U64_MAX_LEN);
		if (token)
			cmd_max += redis_tkey_max(s, a[i].ns_len, token_len);
	}
	calls_off = (n * sizeof(uint32_t) + 15) & ~(size_t)15;
	cmd_off = calls_off + ncalls_max * sizeof(struct redis_call);
	op->arena = malloc(cmd_off + cmd_max);
	if (op->arena == NULL)
		goto oom;
	op->order = op->arena;
	op->calls = (struct redis_call *)(void *)((char *)op->arena + calls_off);
	op->cmd = (char *)op->arena + cmd_off;
	/* 3. order[]: admissions grouped by slot, in their order within it
	 * (one pass per distinct slot: one pass for a single server) */
	for (size_t i = 0, np = 0; i < n; i++) {
		if (placed[i])
			continue;
		for (size_t j = i; j < n; j++) {
			if (!placed[j] && slot[j] == slot[i]) {
				placed[j] = true;
				op->order[np++] = (uint32_t)j;
			}
		}
	}
	/* 4. one call per chunk of a slot's run in order[] */
	p = op->cmd;
	for (size_t first = 0, c0 = 0; first < n;) {
		struct redis_call *c = &op->calls[op->ncalls++];
		uint16_t sl = slot[op->order[first]];
		uint32_t k = 0, nh = 0, base = token ? 2 : 1;
		char num[REDIS_DBL_MAX_LEN];
		size_t body;

		while (first + k < n && k < REDIS_ADMIT_CHUNK && slot[op->order[first + k]] == sl)
			k++;
		for (uint32_t j = 0; j < k; j++) {
			const struct strategy_admit *ad = &a[op->order[first + j]];
			struct redis_ahash h = { .ns = ad->ns, .ns_len = ad->ns_len,
						 .bucket = redis_bucket(ad->key, ad->key_len),
						 .size = ad->size, .start = ad->start };

			/* current, previous; their reservations */
			for (unsigned w = 0; w < 4; w++) {
				h.start = ad->start - (w & 1 ? (int64_t)ad->size : 0);
				h.reserved = w >= 2;
				aidx[4 * j + w] = redis_ahash_index(hs, &nh, &h);
			}
		}
		*c = (struct redis_call){ .op = op, .first = (uint32_t)first, .n = k,
					  .nargs = 3 + (token ? 1 : 0) + nh + 2 + 13 * k,
					  .begin = (size_t)(p - op->cmd) };
		p = redis_put_array(p, c->nargs);
		p = redis_put_bulk(p, "EVALSHA", 7);
		p = redis_put_bulk(p, s->sha_admit, 40);
		c->tail = (size_t)(p - op->cmd);
		p = redis_put_bulk(p, num, redis_u64_dec(num, nh + (token ? 1 : 0)));
		if (token)
			p = redis_put_tkey(p, op->cmd, s, hs[0].ns, hs[0].ns_len, hs[0].bucket,
					   hs[0].size, hs[0].start, token, token_len, &c->tok_id);
		body = (size_t)(p - op->cmd);
		for (uint32_t h = 0; h < nh; h++) {
			char *hk = p;

			p = redis_put_hkey_of(p, s, hs[h].ns, hs[h].ns_len, hs[h].bucket,
					      hs[h].size, hs[h].start, hs[h].reserved);
			if (h == 0)
				key = hk;
		}
		c->slot = redis_bulk_slot(key);
		p = redis_put_bulk(p, token ? "1" : "0", 1);
		p = redis_put_bulk(p, num, redis_u64_dec(num, k));
		for (uint32_t j = 0; j < k; j++) {
			const struct strategy_admit *ad = &a[op->order[first + j]];

			for (unsigned w = 0; w < 4; w++)
				p = redis_put_bulk(p, num, redis_u64_dec(num, base + aidx[4 * j + w]));
			p = redis_put_bulk(p, num, redis_u64_dec(num, redis_ttl(ad->size)));
			p = redis_put_bulk(p, ad->key, ad->key_len);
			p = redis_put_bulk(p, num, redis_dbl_dec(num, ad->diff));
			p = redis_put_bulk(p, num, redis_dbl_dec(num, ad->cost));
			p = redis_put_bulk(p, num, redis_dbl_dec(num, ad->limit));
			p = redis_put_bulk(p, num, redis_dbl_dec(num, ad->weight));
			p = redis_put_bulk(p, ad->count_denied ? "1" : "0", 1);
			p = redis_put_bulk(p, num, redis_dbl_dec(num, ad->want));
			p = redis_put_bulk(p, num, redis_u64_dec(num, ad->nodes));
		}
		c->end = (size_t)(p - op->cmd);
		if (token)
			c->body_hash = redis_hash_bytes(op->cmd + body, c->end - body);
		first += k;
		if (first == n || slot[op->order[first]] != sl) {
			if (token)
				redis_put_tok_ids(op, c0, op->ncalls);
			c0 = op->ncalls;
		}
	}
	free(slot);
	return redis_op_launch(op, errstr);
oom:
	free(slot);
	if (op)
		redis_op_free(op);
	redis_seterr(errstr, "out of memory");
	return -1;
}

/* An operation of one call, with room for a command of cmd_max bytes
 * (op->calls[0]; op->cmd). NULL when out of memory. */
static struct redis_op *redis_op_single(struct redis_strategy *s, const struct redis_kind *k,
					strategy_done_cb cb, void *arg, size_t cmd_max)
{
	struct redis_op *op = redis_op_new(s, k, cb, NULL, arg);

	if (op == NULL)
		return NULL;
	op->arena = malloc(sizeof(struct redis_call) + cmd_max);
	if (op->arena == NULL) {
		redis_op_free(op);
		return NULL;
	}
	op->calls = op->arena;
	op->cmd = (char *)op->arena + sizeof(struct redis_call);
	op->ncalls = 1;
	op->calls[0] = (struct redis_call){ .op = op, .n = 1 };
	return op;
}

/* Sends the one call of op, whose command ends at end and whose key is
 * the bulk string at key. Returns 0, or -1 (op freed, errstr set). */
static int redis_op_single_send(struct redis_op *op, const char *end, const char *key,
				char errstr[STRATEGY_ERR_MAX])
{
	struct redis_call *c = &op->calls[0];

	c->end = (size_t)(end - op->cmd);
	c->slot = redis_bulk_slot(key);
	return redis_op_launch(op, errstr);
}

/* ===================================================================== */
/* heartbeat                                                             */
/* ===================================================================== */

/*
 * KEYS[1] = "<prefix>:{<ns>:nodes}", a hash: field = node id, value = the
 * node's last "now". ARGV[1] = node, ARGV[2] = now, ARGV[3] = ttl.
 * Returns how many nodes were seen within ttl; nodes silent for a day are
 * dropped. Loaded with the others and called with EVALSHA (an EVAL of its
 * text costs Redis about 70 us, compiling it; an EVALSHA about 20 us).
 */
const char redis_nodes_script[] =
	"local k, now, ttl = KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3])\n"
	"redis.call('HSET', k, ARGV[1], ARGV[2])\n"
	"local all, n, old = redis.call('HGETALL', k), 0, {}\n"
	"for i = 1, #all, 2 do\n"
	"  local t = tonumber(all[i + 1]) or 0\n"
	"  if t >= now - ttl then n = n + 1\n"
	"  elseif t < now - 86400 then old[#old + 1] = all[i] end\n"
	"end\n"
	"if #old > 0 then redis.call('HDEL', k, unpack(old)) end\n"
	"redis.call('EXPIRE', k, 86400)\n"
	"return n\n";

static void redis_nodes_reply(struct redis_call *c, const redisAsyncContext *ac,
			      const redisReply *reply)
{
	if (!redis_reply_failed(c, ac, reply)) {
		if (reply->type != REDIS_REPLY_INTEGER || reply->integer < 1)
			redis_op_fail(c->op, "redis: nodes script returned %s, expected a count",
				      redis_reply_type_name(reply->type));
		else
			*c->op->active = (unsigned)(reply->integer > UINT_MAX ? UINT_MAX
									 : reply->integer);
	}
}

static const struct redis_kind redis_nodes_kind = {
	.kind = REDIS_OP_NODES,
	.reply = redis_nodes_reply,
	.script = redis_nodes_script,
};

static int redis_heartbeat(struct strategy *st, const char *ns, size_t ns_len, const char *node,
			   size_t node_len, double now, double ttl, unsigned *active,
			   strategy_done_cb cb, void *arg, char errstr[STRATEGY_ERR_MAX])
{
	struct redis_strategy *s = redis_of(st);
	size_t klen = s->o.prefix_len + 3 + redis_tag_mark(ns, ns_len) + ns_len + 6;
	struct redis_op *op;
	char num[REDIS_DBL_MAX_LEN], *p, *key;

	if (redis_check_ready(s, errstr) < 0)
		return -1;
	if (node_len == 0 || !isfinite(now) || !(ttl > 0)) {
		redis_seterr(errstr, "heartbeat: empty node id, or now or ttl out of range");
		return -1;
	}
	op = redis_op_single(s, &redis_nodes_kind, cb, arg,
			     128 + REDIS_BULK_MAX(40) + REDIS_BULK_MAX(klen) +
			     REDIS_BULK_MAX(node_len) + 2 * REDIS_BULK_MAX(REDIS_DBL_MAX_LEN));
	if (op == NULL) {
		redis_seterr(errstr, "out of memory");
		return -1;
	}
	op->active = active;
	/* EVALSHA <sha> 1 <key> <node> <now> <ttl>; EVAL after NOSCRIPT */
	op->calls[0].nargs = 7;
	p = redis_put_array(op->cmd, 7);
	p = redis_put_bulk(p, "EVALSHA", 7);
	p = redis_put_bulk(p, s->sha_nodes, 40);
	op->calls[0].tail = (size_t)(p - op->cmd);
	p = redis_put_bulk(p, "1", 1);
	key = p;
	*p++ = '$';
	p += redis_u64_dec(p, klen);
	p = redis_put_crlf(p);
	p = redis_put_tag(p, s, ns, ns_len, "nodes", 5);
	*p++ = '}';
	p = redis_put_crlf(p);
	p = redis_put_bulk(p, node, node_len);
	p = redis_put_bulk(p, num, redis_dbl_dec(num, now));
	p = redis_put_bulk(p, num, redis_dbl_dec(num, ttl));
	return redis_op_single_send(op, p, key, errstr);
}

/* ===================================================================== */
/* get_counters                                                          */
/* ===================================================================== */

/* Appends one row; its key is copied (the reply dies after the callback). */
static int redis_rows_add(struct redis_op *op, const char *key, size_t key_len, int64_t start,
			  uint32_t size, double count)
{
	if (op->nrows == op->rows_cap) {
		size_t ncap = op->rows_cap ? op->rows_cap * 2 : 64;
		struct strategy_row *nr = realloc(op->rows, ncap * sizeof(*nr));
		size_t *no;

		if (nr == NULL)
			return -1;
		op->rows = nr;
		no = realloc(op->key_off, ncap * sizeof(*no));
		if (no == NULL)
			return -1;
		op->key_off = no;
		op->rows_cap = ncap;
	}
	if (op->keys_cap - op->keys_len < key_len + 1) {
		size_t ncap = op->keys_cap ? op->keys_cap : 1024;
		char *nk;

		while (ncap - op->keys_len < key_len + 1)
			ncap *= 2;
		nk = realloc(op->keys, ncap);
		if (nk == NULL)
			return -1;
		op->keys = nk;
		op->keys_cap = ncap;
	}
	if (key_len)
		memcpy(op->keys + op->keys_len, key, key_len);
	op->keys[op->keys_len + key_len] = '\0';
	op->key_off[op->nrows] = op->keys_len;
	op->keys_len += key_len + 1;
	op->rows[op->nrows++] = (struct strategy_row){ .key = NULL, .key_len = key_len,
						       .start = start, .size = size,
						       .count = count };
	return 0;
}

/* Reply of one HGETALL: field, value, field, value, ... */
static void redis_rows_reply(struct redis_call *c, const redisAsyncContext *ac,
			     const redisReply *reply)
{
	struct redis_op *op = c->op;

	if (redis_reply_failed(c, ac, reply)) {
		/* the op failed */
	} else if (reply->type != REDIS_REPLY_ARRAY || reply->elements % 2) {
		redis_op_fail(op, "redis: HGETALL returned %s, expected field/value pairs",
			      redis_reply_type_name(reply->type));
	} else if (op->status == 0) {
		uint32_t size = op->sizes[c->first / 2];
		int64_t start = op->starts[c->first];

		for (size_t i = 0; i < reply->elements; i += 2) {
			const redisReply *f = reply->element[i], *v = reply->element[i + 1];
			double count;

			if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING ||
			    redis_parse_double(v->str, v->len, &count) < 0) {
				redis_op_fail(op,
					      "redis: HGETALL returned a %s field with a %s "
					      "value, expected a number",
					      redis_reply_type_name(f->type),
					      redis_reply_type_name(v->type));
				break;
			}
			if (redis_rows_add(op, f->str, f->len, start, size, count) < 0) {
				redis_op_fail(op, "out of memory");
				break;
			}
		}
	}
}

static const struct redis_kind redis_rows_kind = {
	.kind = REDIS_OP_ROWS,
	.reply = redis_rows_reply,
};

static int redis_get_counters(struct strategy *st, const char *ns, size_t ns_len,
			      const uint32_t *sizes, size_t nsizes, int64_t now,
			      strategy_rows_cb cb, void *arg, char errstr[STRATEGY_ERR_MAX])
{
	struct redis_strategy *s = redis_of(st);
	size_t ncalls = nsizes * 2 * REDIS_BUCKETS, off_calls, off_sizes, off_starts, off_cmd;
	size_t per_cmd = 32 + redis_hkey_max(s, ns_len);
	struct redis_op *op;
	char *p, *key;

	if (redis_check_ready(s, errstr) < 0)
		return -1;
	if (nsizes > 1024) {
		redis_seterr(errstr, "%zu window sizes, at most 1024", nsizes);
		return -1;
	}
	for (size_t i = 0; i < nsizes; i++) {
		if (sizes[i] == 0) {
			redis_seterr(errstr, "window size %zu is 0", i);
			return -1;
		}
	}
	op = redis_op_new(s, &redis_rows_kind, NULL, cb, arg);
	if (op == NULL)
		goto oom;
	off_calls = 0;
	off_sizes = off_calls + ncalls * sizeof(struct redis_call);
	off_starts = (off_sizes + nsizes * sizeof(uint32_t) + 7) & ~(size_t)7;
	off_cmd = off_starts + 2 * nsizes * sizeof(int64_t);
	op->arena = malloc(off_cmd + ncalls * per_cmd + 1);
	if (op->arena == NULL)
		goto oom;
	op->calls = op->arena;
	op->sizes = (uint32_t *)(void *)((char *)op->arena + off_sizes);
	op->starts = (int64_t *)(void *)((char *)op->arena + off_starts);
	op->cmd = (char *)op->arena + off_cmd;
	p = op->cmd;
	for (size_t i = 0; i < nsizes; i++) {
		op->sizes[i] = sizes[i];
		op->starts[2 * i] = strategy_window_start((double)now, sizes[i]);
		op->starts[2 * i + 1] = op->starts[2 * i] - sizes[i];
	}
	for (uint32_t w = 0; w < 2 * nsizes; w++) {
		for (unsigned b = 0; b < REDIS_BUCKETS; b++) {
			struct redis_call *c = &op->calls[op->ncalls++];
			size_t start = (size_t)(p - op->cmd);

			*c = (struct redis_call){ .op = op, .first = w, .begin = start };
			p = redis_put_array(p, 2);
			p = redis_put_bulk(p, "HGETALL", 7);
			key = p;
			p = redis_put_hkey(p, s, ns, ns_len, b, op->sizes[w / 2], op->starts[w]);
			c->slot = redis_bulk_slot(key);
			c->end = (size_t)(p - op->cmd);
		}
	}
	return redis_op_launch(op, errstr);
oom:
	if (op)
		redis_op_free(op);
	redis_seterr(errstr, "out of memory");
	return -1;
}

/* ===================================================================== */
/* get_window, purge, ready, create, destroy                             */
/* ===================================================================== */

static void redis_window_reply(struct redis_call *c, const redisAsyncContext *ac,
			       const redisReply *reply)
{
	if (!redis_reply_failed(c, ac, reply)) {
		if (redis_reply_number(reply, &c->op->batch->total) < 0)
			redis_op_fail(c->op, "redis: HGET returned %s, expected a number",
				      redis_reply_type_name(reply->type));
		else
			c->op->batch->ok = true;
	}
}

static const struct redis_kind redis_window_kind = {
	.kind = REDIS_OP_WINDOW,
	.reply = redis_window_reply,
};

static int redis_get_window(struct strategy *st, struct strategy_counter *counter,
			    strategy_done_cb cb, void *arg, char errstr[STRATEGY_ERR_MAX])
{
	struct redis_strategy *s = redis_of(st);
	struct redis_op *op;
	char *p, *key;

	if (redis_check_ready(s, errstr) < 0)
		return -1;
	if (counter->size == 0) {
		redis_seterr(errstr, "window size 0");
		return -1;
	}
	counter->ok = false;
	op = redis_op_single(s, &redis_window_kind, cb, arg,
			     64 + redis_hkey_max(s, counter->ns_len) +
			     REDIS_BULK_MAX(counter->key_len));
	if (op == NULL) {
		redis_seterr(errstr, "out of memory");
		return -1;
	}
	op->batch = counter;
	op->n = 1;
	p = redis_put_array(op->cmd, 3);
	p = redis_put_bulk(p, "HGET", 4);
	key = p;
	p = redis_put_hkey(p, s, counter->ns, counter->ns_len,
			   redis_bucket(counter->key, counter->key_len), counter->size,
			   counter->start);
	p = redis_put_bulk(p, counter->key, counter->key_len);
	return redis_op_single_send(op, p, key, errstr);
}

/* No call: it finishes as it starts. */
static const struct redis_kind redis_purge_kind = {
	.kind = REDIS_OP_PURGE,
};

/* Every hash carries a TTL: nothing to delete. Completes with 0 (from the
 * loop, not from inside this call), connected or not. */
static int redis_purge(struct strategy *st, const char *ns, size_t ns_len, const uint32_t *sizes,
		       size_t nsizes, int64_t now, strategy_done_cb cb, void *arg,
		       char errstr[STRATEGY_ERR_MAX])
{
	struct redis_strategy *s = redis_of(st);
	struct redis_op *op;

	(void)ns;
	(void)ns_len;
	(void)sizes;
	(void)nsizes;
	(void)now;
	if (s->destroying) {
		redis_seterr(errstr, "not connected (instance destroyed)");
		return -1;
	}
	op = redis_op_new(s, &redis_purge_kind, cb, NULL, arg);
	if (op == NULL) {
		redis_seterr(errstr, "out of memory");
		return -1;
	}
	redis_op_finish(op);
	return 0;
}

static bool redis_ready(const struct strategy *st)
{
	const struct redis_strategy *s = (const struct redis_strategy *)(const void *)st;

	return !s->destroying && s->mode->ready(s);
}

static bool redis_connecting(const struct strategy *st)
{
	const struct redis_strategy *s = (const struct redis_strategy *)(const void *)st;

	return !s->destroying && !s->mode->ready(s) && s->mode->connecting(s);
}

static int redis_check_opts(const char *opts_json, char *err, size_t errlen)
{
	struct redis_opts o;
	int rc = redis_opts_parse(&o, opts_json, err, errlen);

	redis_opts_free(&o);
	return rc;
}

static void redis_free(struct redis_strategy *s)
{
	while (s->conns)
		redis_conn_free(s->conns);
	redis_opts_free(&s->o);
	free(s);
}

static void redis_core_free(struct store_core *c)
{
	redis_free(container_of(c, struct redis_strategy, core));
}

static const struct redis_mode_ops *const redis_modes[REDIS_MODE_COUNT] = {
	[REDIS_MODE_SINGLE] = &redis_single_mode,
	[REDIS_MODE_CLUSTER] = &redis_cluster_mode,
	[REDIS_MODE_SENTINEL] = &redis_sentinel_mode,
};

static struct strategy *redis_create(struct ev_loop *loop, const char *opts_json, char *err,
				     size_t errlen)
{
	struct redis_strategy *s;
	char dummy[1];

	if (err == NULL || errlen == 0) {
		err = dummy;
		errlen = sizeof(dummy);
	}
	if (loop == NULL) {
		snprintf(err, errlen, "no event loop");
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (s == NULL) {
		snprintf(err, errlen, "redis: out of memory");
		return NULL;
	}
	if (redis_opts_parse(&s->o, opts_json, err, errlen) < 0) {
		redis_free(s);
		return NULL;
	}
	s->loop = loop;
	s->mode = redis_modes[s->o.mode];
	store_core_init(&s->core, loop, s->o.timeout_ms / 1000.0, redis_on_kick, redis_core_free);
	ev_timer_init(&s->waiting_timer, redis_on_waiting_timer, 0., 0.);
	if (s->mode->start(s, err, errlen) < 0) {
		s->destroying = true;
		if (s->mode->free)
			s->mode->free(s);
		redis_free(s);
		return NULL;
	}
	return (struct strategy *)(void *)s;
}

static void redis_destroy(struct strategy *st)
{
	struct redis_strategy *s = redis_of(st);
	struct redis_call *c;

	if (s == NULL || s->destroying)
		return;
	s->destroying = true;
	ev_timer_stop(s->loop, &s->waiting_timer);
	/* every operation in flight fails and lands on the done queue, is
	 * delivered, and the instance is freed (later, from inside one of its
	 * callbacks) */
	for (c = redis_waiting_take(s, NULL); c; c = c->next_wait) {
		redis_op_fail(c->op, "instance destroyed");
		redis_op_check(c->op);
	}
	for (struct redis_conn *cn = s->conns; cn; cn = cn->next)
		redis_conn_close(cn, "instance destroyed", false);
	if (s->mode->free)
		s->mode->free(s);
	store_destroy(&s->core);
}

const struct strategy_ops redis_strategy = {
	.name = "redis",
	.check_opts = redis_check_opts,
	.create = redis_create,
	.destroy = redis_destroy,
	.push_diffs = redis_push_diffs,
	.get_counters = redis_get_counters,
	.get_window = redis_get_window,
	.purge = redis_purge,
	.admit = redis_admit,
	.heartbeat = redis_heartbeat,
	.ready = redis_ready,
	.connecting = redis_connecting,
};
