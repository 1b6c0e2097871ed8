#!/usr/bin/env bash
# haproxy_limit.sh - the basic limit through real HAProxy 2.6.
# Checks, with curl through HAProxy (frontend fe_open, group g-one):
#   - with a limit of N per 60 s sliding window, exactly N requests of a
#     fresh key pass and the rest get 429;
#   - the 429 carries Retry-After >= 1 (and >= t), RateLimit-Policy
#     "e2e";q=N;w=60 and RateLimit "e2e";r=0;t=<1..60>; allowed responses
#     carry RateLimit with r counting down N-1 ... 0;
#   - different X-Api-Key values have independent counters;
#   - a fixed window (window_type=fixed) and a 1 s window count too;
#   - cost 0 reads the rate without counting;
#   - 300-byte keys (hashed by the agent) differing in the last byte are
#     counted apart;
#   - a request without a key gets txn.rl.error and is not denied;
#   - the agent exits with status 0 on SIGTERM.
# Usage: AGENT=/path/to/spoa-ratelimit bash tests/e2e/haproxy_limit.sh
. "$(dirname "$0")/lib.sh"

e2e_init
start_agent -w 2
start_haproxy
wait_server_state UP 10 || die "agent server UP in HAProxy"

N=10
K="limit-$E2E_RUN_ID"
codes="$E2E_TMP/codes"

# --- 1. exactly N of N+5 pass; headers on allowed and denied responses ---
# (in one window: across its end, the sliding rate is weighted down and
# Retry-After may be shorter than t)
burst_a() {
  KA="$K-a$1"
  : > "$codes"
  hfail=""
  for i in $(seq 1 $((N + 5))); do
    c=$(req_h "$E2E_PORT_OPEN" "$E2E_TMP/h.$i" -H "X-Api-Key: $KA" -H "X-Limit: $N")
    echo "$c" >> "$codes"
    if [ "$i" -le "$N" ]; then
      rl=$(hdr "$E2E_TMP/h.$i" RateLimit)
      r=$(sf_param "$rl" r)
      if [ "$r" != $((N - i)) ]; then hfail="$hfail req$i:r=$r($rl)"; fi
    fi
  done
}
in_one_window 60 4 burst_a || diag "every burst crossed a window's end"
is "$(count_codes "$codes" 200)" "$N" "limit $N/60s: exactly $N of $((N + 5)) requests pass"
is "$(count_codes "$codes" 429)" "5" "limit $N/60s: the other 5 get 429"
is "$(head -n "$N" "$codes" | sort -u | tr -d '\n')" "200" "limit $N/60s: the first $N are the ones that pass"
if [ -z "$hfail" ]; then ok "allowed responses carry RateLimit with r = N-1 ... 0"
else not_ok "allowed responses carry RateLimit with r = N-1 ... 0"; diag "$hfail"; fi

h="$E2E_TMP/h.$((N + 1))"
ra=$(hdr "$h" Retry-After)
pol=$(hdr "$h" RateLimit-Policy)
rl=$(hdr "$h" RateLimit)
diag "429: Retry-After: $ra | RateLimit-Policy: $pol | RateLimit: $rl"
# Sliding window: with all hits in the current window, the rate only falls
# back to N some time into the next window, so t <= Retry-After <= 2 * 60.
check "429 has Retry-After >= 1 (and <= 120)" int_between "$ra" 1 120
check "429 Retry-After >= RateLimit t (all hits are in the current window)" int_ge "$ra" "$(sf_param "$rl" t)"
is "$pol" "\"e2e\";q=$N;w=60" "429 has RateLimit-Policy \"e2e\";q=$N;w=60"
is "$(sf_param "$rl" r)" "0" "429 has RateLimit r=0"
check "429 has RateLimit t in 1..60" int_between "$(sf_param "$rl" t)" 1 60
is "$(hdr "$E2E_TMP/h.1" RateLimit-Policy)" "\"e2e\";q=$N;w=60" "200 has RateLimit-Policy too"
is "$(hdr "$h" X-RL-Err)" "" "no SPOE error on the way"

# --- 2. per-key independence ---
: > "$codes"
for i in 1 2 3 4; do req "$E2E_PORT_OPEN" -H "X-Api-Key: $K-b" -H "X-Limit: 3" >> "$codes"; done
for i in 1 2 3 4; do req "$E2E_PORT_OPEN" -H "X-Api-Key: $K-c" -H "X-Limit: 3" >> "$codes"; done
is "$(tr '\n' ' ' < "$codes")" "200 200 200 429 200 200 200 429 " "two X-Api-Key values have independent limits (3 each)"
c=$(req "$E2E_PORT_OPEN" -H "X-Api-Key: $KA" -H "X-Limit: $N")
is "$c" "429" "the first key is still limited"

# --- 3. fixed window, 1 s window (each burst in one window: a fixed or a
# 1 s window starts afresh at its end) ---
burst_d() {
  : > "$codes"
  for i in 1 2 3 4 5; do req "$E2E_PORT_OPEN" -H "X-Api-Key: $K-d$1" -H "X-Limit: 4" -H "X-Window-Type: fixed" >> "$codes"; done
}
in_one_window 60 3 burst_d || diag "every burst crossed a window's end"
is "$(tr '\n' ' ' < "$codes")" "200 200 200 200 429 " "window_type fixed: 4 pass, the 5th is denied"

burst_e() {
  KE="$K-e$1"
  : > "$codes"
  for i in 1 2 3; do req "$E2E_PORT_OPEN" -H "X-Api-Key: $KE" -H "X-Limit: 2" -H "X-Window: 1" >> "$codes"; done
}
in_one_window 1 0 burst_e || diag "every burst crossed a second's end"
is "$(tr '\n' ' ' < "$codes")" "200 200 429 " "1 s window, limit 2: the 3rd request in the same second is denied"
sleep 2.1
c=$(req "$E2E_PORT_OPEN" -H "X-Api-Key: $KE" -H "X-Limit: 2" -H "X-Window: 1")
is "$c" "200" "1 s window: allowed again 2 s later"

# --- 4. cost 0 reads without counting ---
wait_window_margin 60 3
req "$E2E_PORT_OPEN" -H "X-Api-Key: $K-f" -H "X-Limit: 5" > /dev/null
req "$E2E_PORT_OPEN" -H "X-Api-Key: $K-f" -H "X-Limit: 5" > /dev/null
c1=$(req_h "$E2E_PORT_OPEN" "$E2E_TMP/hf1" -H "X-Api-Key: $K-f" -H "X-Limit: 5" -H "X-Cost: 0")
c2=$(req_h "$E2E_PORT_OPEN" "$E2E_TMP/hf2" -H "X-Api-Key: $K-f" -H "X-Limit: 5" -H "X-Cost: 0")
is "$c1 $c2 $(hdr "$E2E_TMP/hf1" X-RL-Rate) $(hdr "$E2E_TMP/hf2" X-RL-Rate)" "200 200 2 2" "cost 0 reads the rate (2) without counting"
c=$(req_h "$E2E_PORT_OPEN" "$E2E_TMP/hf3" -H "X-Api-Key: $K-f" -H "X-Limit: 5")
is "$(hdr "$E2E_TMP/hf3" X-RL-Rate)" "3" "the next counted hit makes rate 3"

# --- 5. long keys (> 104 bytes, hashed by the agent) stay distinct ---
long=$(printf 'x%.0s' $(seq 1 300))
wait_window_margin 60 3
codes=$(for i in 1 2 3; do req "$E2E_PORT_OPEN" -H "X-Api-Key: $K-$long-1" -H "X-Limit: 2"; done | tr '\n' ' ')
codes="$codes$(for i in 1 2 3; do req "$E2E_PORT_OPEN" -H "X-Api-Key: $K-$long-2" -H "X-Limit: 2"; done | tr '\n' ' ')"
is "$codes" "200 200 429 200 200 429 " "two 300-byte keys differing in the last byte are limited apart"

# --- 6. a request without a key: the agent reports an error, not a denial ---
c=$(req_h "$E2E_PORT_OPEN" "$E2E_TMP/hnokey")
e=$(hdr "$E2E_TMP/hnokey" X-RL-Error)
diag "no key: $c, X-RL-Error: '$e', X-RL-Exceeded: '$(hdr "$E2E_TMP/hnokey" X-RL-Exceeded)'"
if [ "$c" = 200 ] && [ -n "$e" ]; then ok "no key: txn.rl.error is set and the request is not denied"
else not_ok "no key: txn.rl.error is set and the request is not denied"; fi

# --- 7. clean stop ---
stop_agent
rc=$?
is "$rc" "0" "agent exits with status 0 on SIGTERM"

finish
