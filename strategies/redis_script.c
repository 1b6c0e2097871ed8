/*
 * redis_script.c - the Lua scripts of the Redis strategy
 * (strategies/redis_int.h): pushes (push_diffs), admissions (admit: the
 * window counter's, GCRA's TAT step, and the concurrency limit's leases), the heartbeat and the limits
 * read, each loaded with SCRIPT LOAD in every data connection's
 * handshake (redis_conn.c) and called with EVALSHA, or EVAL after a
 * NOSCRIPT reply (redis_call.c); and the forget (an operator's DELETE, a
 * few a day: sent with EVAL, never loaded). The operations that build
 * their calls are in redis_write.c (push, admit) and redis.c (heartbeat,
 * forget); the key layout
 * the scripts are given is redis_resp.c's. Their text is what the servers
 * hash: a change of a byte is a new script.
 */
#include "strategies/redis_int.h"

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
 * "%d" spares the slow floating-point printf path for the common case);
 * then 1 if the hash holds REDIS_RESET_FIELD (a key of it was forgotten:
 * read in the same HMGET as the fields), else 0.
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
	"local old = redis.call('HMGET', h, '" REDIS_RESET_FIELD "', unpack(ARGV, 4, n + 3))\n"
	"local add = not (tk and redis.call('EXISTS', tk) == 1)\n"
	"local rold\n"
	"if add and un then rold = redis.call('HMGET', hr, unpack(ARGV, 4, n + 3)) end\n"
	"local seen, rseen, set, out, ns = {}, {}, {}, {}, 0\n"
	"for i = 1, n do\n"
	"  local f = ARGV[i + 3]\n"
	"  local v = seen[f]\n"
	"  if v == nil then\n"
	"    v = old[i + 1]\n"
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
	"if old[1] then out[n + 1] = 1 else out[n + 1] = 0 end\n"
	"return out\n";

/* The end of an admission script: with a token key not seen before, the
 * call's decisions (recs) recorded in it; the answers returned. */
#define REDIS_LUA_RECORD \
	"if tk and not rec then\n" \
	"  redis.call('SET', tk, table.concat(recs, ' '), 'EX', '" \
	REDIS_STR(STRATEGY_TOKEN_TTL) "')\n" \
	"end\n" \
	"return out\n"

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
	REDIS_LUA_RECORD;

/*
 * The TAT script (strategy.h, struct strategy_admit, STRATEGY_STEP_TAT):
 * GCRA's step for every admission of one call, one after the other, each
 * seeing the ones before it. KEYS[1] = the call's token key if ARGV[1] is
 * "1"; then the TAT keys the admissions name, each once (redis_write.c:
 * "<prefix>:{<ns>:<bucket>}:g:<size>:<key>", in the key's hash tag: one
 * Cluster slot per call). ARGV[2] = n, then 5 per admission: the index in
 * KEYS of its TAT key, diff, T (size / limit), cost, tau (burst x T). A
 * key holds the TAT as "%.17g" Unix seconds of the server's clock (TIME:
 * the nodes' clocks are never compared), and expires when it falls behind
 * the clock (PX: a TAT in the past says nothing; one a negative diff, hits
 * given back, puts behind it is deleted). Returns 4 n values, as
 * the admission script: per admission { the TAT minus now (seconds, >= 0),
 * 0, "1" admitted | "0" not, 0 }. Every TAT is read once and written once,
 * after every decision is made. With a token key that exists the call was
 * applied before: nothing is moved, and the decisions it recorded ("1" or
 * "0" per admission) come back with the current TATs.
 */
const char redis_gcra_script[] =
	"local tk, n = nil, tonumber(ARGV[2])\n"
	"if ARGV[1] == '1' then tk = KEYS[1] end\n"
	"local rec = tk and redis.call('GET', tk)\n"
	"local t = redis.call('TIME')\n"
	"local now = tonumber(t[1]) + tonumber(t[2]) / 1000000\n"
	"local val, dirty, past, recs, out = {}, {}, {}, {}, {}\n"
	"if rec then for w in string.gmatch(rec, '%S+') do past[#past + 1] = w end end\n"
	"for i = 1, n do\n"
	"  local b = 2 + (i - 1) * 5\n"
	"  local k = tonumber(ARGV[b + 1])\n"
	"  local tat = val[k]\n"
	"  if tat == nil then\n"
	"    tat = redis.call('GET', KEYS[k])\n"
	"    if tat then tat = tonumber(tat) else tat = 0 end\n"
	"    if tat == nil then return redis.error_reply('ERR TAT value is not a number') end\n"
	"    val[k] = tat\n"
	"  end\n"
	"  local adm = '0'\n"
	"  if rec then\n"
	"    adm = past[i] or '0'\n"
	"  else\n"
	"    local T, cost, tau = tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])\n"
	"    local base = math.max(tat, now) + tonumber(ARGV[b + 2]) * T\n"
	"    local nxt = base + cost * T\n"
	"    if nxt - now <= tau + math.min(0.000001, 0.001 * T) then adm = '1' base = nxt end\n"
	"    if base ~= base or base == math.huge then\n"
	"      return redis.error_reply('ERR TAT would not be finite')\n"
	"    end\n"
	"    if base ~= tat and (base > now or tat > now) then val[k] = base dirty[k] = true end\n"
	"    recs[#recs + 1] = adm\n"
	"  end\n"
	"  local ahead = val[k] - now\n"
	"  if ahead < 0 then ahead = 0 end\n"
	"  out[#out + 1] = string.format('%.17g', ahead)\n"
	"  out[#out + 1] = 0\n"
	"  out[#out + 1] = adm\n"
	"  out[#out + 1] = 0\n"
	"end\n"
	"for k in pairs(dirty) do\n"
	"  local ms = math.ceil((val[k] - now) * 1000) + 1\n"
	"  if val[k] > now then\n"
	"    redis.call('SET', KEYS[k], string.format('%.17g', val[k]), 'PX', ms)\n"
	"  else\n"
	"    redis.call('DEL', KEYS[k])\n"
	"  end\n"
	"end\n"
	REDIS_LUA_RECORD;

/*
 * The lease script (strategy.h, struct strategy_admit, STRATEGY_STEP_LEASE):
 * a concurrency limit's leases, for every admission of one call, one after
 * the other. KEYS[1] = the call's token key if ARGV[1] is "1" (not used: a
 * lease's id makes a resend exactly once by itself); then the lease keys
 * the admissions name, each once (redis_write.c:
 * "<prefix>:{<ns>:<bucket>}:c:<size>:<key>", in the key's hash tag), each
 * a sorted set: member = a lease id, score = when it expires, ms of the
 * server's clock (TIME: the nodes' clocks are never compared); the key
 * expires with its last lease. ARGV[2] = n, then 5 per admission: the
 * index in KEYS of its lease key, the lease id ("" for a release of the
 * first to expire), the lease's life in ms, cost (> 0: an acquire, 0: a
 * release), limit. Returns 4 n values, as the admission script: per
 * admission { leases in flight after, seconds until the first of them
 * expires, "1" admitted (taken, or given back) | "0" not, 0 }.
 */
const char redis_lease_script[] =
	"local n = tonumber(ARGV[2])\n"
	"local t = redis.call('TIME')\n"
	"local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
	"local out, dirty = {}, {}\n"
	"for i = 1, n do\n"
	"  local b = 2 + (i - 1) * 5\n"
	"  local k = KEYS[tonumber(ARGV[b + 1])]\n"
	"  local id, life = ARGV[b + 2], tonumber(ARGV[b + 3])\n"
	"  local cost, limit = tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])\n"
	"  redis.call('ZREMRANGEBYSCORE', k, '-inf', now)\n"
	"  local adm = '0'\n"
	"  if cost > 0 then\n"
	"    if redis.call('ZSCORE', k, id) then\n"
	"      adm = '1'\n"
	"    elseif redis.call('ZCARD', k) < limit then\n"
	"      redis.call('ZADD', k, now + life, id)\n"
	"      adm = '1' dirty[k] = true\n"
	"    end\n"
	"  elseif id ~= '' then\n"
	"    if redis.call('ZREM', k, id) == 1 then adm = '1' end\n"
	"  elseif #redis.call('ZPOPMIN', k) > 0 then\n"
	"    adm = '1'\n"
	"  end\n"
	"  local left, first = redis.call('ZCARD', k), 0\n"
	"  if left > 0 then\n"
	"    local f = redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')\n"
	"    first = (tonumber(f[2]) - now) / 1000\n"
	"  end\n"
	"  out[#out + 1] = left\n"
	"  out[#out + 1] = string.format('%.17g', first)\n"
	"  out[#out + 1] = adm\n"
	"  out[#out + 1] = 0\n"
	"end\n"
	"for k in pairs(dirty) do\n"
	"  local last = redis.call('ZRANGE', k, -1, -1, 'WITHSCORES')\n"
	"  redis.call('PEXPIREAT', k, tonumber(last[2]) + 1)\n"
	"end\n"
	"return out\n";

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

/*
 * The forget script (strategy.h, forget): one key of one bucket, every
 * window size. KEYS[1] = the call's token key; then 4 per size: the hash
 * of the current window, of the previous one, and of their reservations
 * (redis_resp.c: all in the key's hash tag, one Cluster slot). ARGV[1] =
 * the field (the key), ARGV[2] = the number of sizes, ARGV[3 ..] = each
 * size's TTL (seconds). In every window the field is deleted from the
 * hash and from its reservations, and REDIS_RESET_FIELD of the hash is
 * incremented (created if missing, with the hash: a window the key has no
 * count in is marked too); each hash marked gets its TTL again. Returns
 * the hits removed ("%.17g", summed over windows and sizes), recorded in
 * the token key (EX STRATEGY_TOKEN_TTL) in the same atomic step: with a
 * token key that exists the call was applied before, nothing is changed
 * and the recorded answer comes back.
 */
const char redis_forget_script[] =
	"local tk, f, n = KEYS[1], ARGV[1], tonumber(ARGV[2])\n"
	"local rec = redis.call('GET', tk)\n"
	"if rec then return rec end\n"
	"local removed = 0\n"
	"for i = 1, n do\n"
	"  for w = 0, 1 do\n"
	"    local h, r = KEYS[4 * i - 2 + w], KEYS[4 * i + w]\n"
	"    local v = tonumber(redis.call('HGET', h, f) or '0')\n"
	"    if v then removed = removed + v end\n"
	"    redis.call('HDEL', h, f)\n"
	"    redis.call('HDEL', r, f)\n"
	"    redis.call('HINCRBY', h, '" REDIS_RESET_FIELD "', 1)\n"
	"    redis.call('EXPIRE', h, ARGV[2 + i])\n"
	"  end\n"
	"end\n"
	"rec = string.format('%.17g', removed)\n"
	"redis.call('SET', tk, rec, 'EX', '" REDIS_STR(STRATEGY_TOKEN_TTL) "')\n"
	"return rec\n";

/*
 * The limits per key set at run time (strategy.h, limit_set and
 * limits_read), one hash per namespace in a hash tag of its own:
 * KEYS[1] = "<prefix>:{<ns>:limits}", field = "<size>:<key>", value = the
 * limit; its field "v" (no ':': no override's) the version, moved on by
 * every change. Never expires: overrides last until removed.
 *
 * limit_set: ARGV[1] = the field, ARGV[2] = the limit ("-1": remove),
 * ARGV[3] = the most the namespace may hold. Returns the new version, or
 * -1 (full: a new override past the most, nothing changed).
 */
const char redis_limit_set_script[] =
	"local k, f, lim = KEYS[1], ARGV[1], tonumber(ARGV[2])\n"
	"if lim < 0 then\n"
	"  redis.call('HDEL', k, f)\n"
	"else\n"
	"  if redis.call('HEXISTS', k, f) == 0 and\n"
	"     redis.call('HLEN', k) - redis.call('HEXISTS', k, 'v') >= tonumber(ARGV[3]) then\n"
	"    return -1\n"
	"  end\n"
	"  redis.call('HSET', k, f, ARGV[2])\n"
	"end\n"
	"return redis.call('HINCRBY', k, 'v', 1)\n";

/*
 * limits_read: ARGV[1] = the version the node has. Returns {version}
 * when it is the store's, else {version, HGETALL of the hash} (the
 * field "v" among the pairs).
 */
const char redis_limits_read_script[] =
	"local v = redis.call('HGET', KEYS[1], 'v') or '0'\n"
	"if v == ARGV[1] then return {v} end\n"
	"return {v, redis.call('HGETALL', KEYS[1])}\n";
