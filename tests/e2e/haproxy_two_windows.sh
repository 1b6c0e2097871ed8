#!/usr/bin/env bash
# haproxy_two_windows.sh - two windows at once (messages ratelimit-sec and
# ratelimit-min in one group, one NOTIFY), limits 3 per 1 s and 5 per 60 s.
# Checks, through frontend fe_two:
#   - a burst of 5 within one second: 3 pass, then 429 denied by the
#     1-second window (exceeded_sec=1, exceeded_min=0, plain window=1);
#   - 6 requests 1 s apart: the 1 s window never trips, the 60 s window
#     denies the 6th (exceeded_min=1, exceeded_sec=0, plain window=60);
#   - a burst of 7: both exceeded, Retry-After is the larger wait (the
#     minute's, > 1) and the plain variables describe the 60 s window;
#   - RateLimit / RateLimit-Policy list both windows.
# Usage: AGENT=/path/to/spoa-ratelimit bash tests/e2e/haproxy_two_windows.sh
. "$(dirname "$0")/lib.sh"

e2e_init
start_agent -w 2
start_haproxy
wait_server_state UP 10 || die "agent server UP in HAProxy"

K="two-$E2E_RUN_ID"
two() { req_h "$E2E_PORT_TWO" "$1" -H "X-Api-Key: $2" -H "X-Limit-Sec: 3" -H "X-Limit-Min: 5"; }
summary() { printf 'sec=%s min=%s window=%s' "$(hdr "$1" X-RL-Exceeded-Sec)" "$(hdr "$1" X-RL-Exceeded-Min)" "$(hdr "$1" X-RL-Window)"; }

# --- 1. burst: the 1 s window denies (the burst within one second) ---
burst_a() {
  codes=""
  for i in 1 2 3 4 5; do codes="$codes $(two "$E2E_TMP/a.$i" "$K-a$1")"; done
}
wait_window_margin 60 5
in_one_window 1 0 burst_a || diag "every burst crossed a second's end"
is "$codes" " 200 200 200 429 429" "burst of 5: 3 pass, then denied"
is "$(summary "$E2E_TMP/a.4")" "sec=1 min=0 window=1" "burst: the 4th is denied by the 1 s window only"
check "burst: Retry-After of the 1 s window is 1..2" int_between "$(hdr "$E2E_TMP/a.4" Retry-After)" 1 2
is "$(hdr "$E2E_TMP/a.1" RateLimit-Policy)" "\"sec\";q=3;w=1, \"min\";q=5;w=60" "RateLimit-Policy lists both windows"
rl=$(hdr "$E2E_TMP/a.1" RateLimit)
diag "first response RateLimit: $rl"
case $rl in
  '"sec";r=2;t='[0-9]*', "min";r=4;t='[0-9]*) ok "RateLimit lists both windows (r=2 and r=4 after the first hit)" ;;
  *) not_ok "RateLimit lists both windows (r=2 and r=4 after the first hit)" ;;
esac
is "$(hdr "$E2E_TMP/a.1" X-RL-Err)" "" "no SPOE error"

# --- 2. slow: the 60 s window denies ---
wait_window_margin 60 9
codes=""
for i in 1 2 3 4 5 6; do
  codes="$codes $(two "$E2E_TMP/b.$i" "$K-b")"
  [ "$i" -lt 6 ] && sleep 1
done
is "$codes" " 200 200 200 200 200 429" "1 request per second: 5 pass, the 6th is denied"
is "$(summary "$E2E_TMP/b.6")" "sec=0 min=1 window=60" "slow: the 6th is denied by the 60 s window only"
check "slow: Retry-After >= 1" int_ge "$(hdr "$E2E_TMP/b.6" Retry-After)" 1

# --- 3. both exceeded: the larger wait wins (the burst within one second) ---
burst_c() {
  codes=""
  for i in 1 2 3 4 5 6 7; do codes="$codes $(two "$E2E_TMP/c.$i" "$K-c$1")"; done
}
wait_window_margin 60 5
in_one_window 1 0 burst_c || diag "every burst crossed a second's end"
is "$codes" " 200 200 200 429 429 429 429" "burst of 7: 3 pass"
is "$(summary "$E2E_TMP/c.7")" "sec=1 min=1 window=60" "burst of 7: both windows exceeded, plain vars describe the 60 s one"
ra=$(hdr "$E2E_TMP/c.7" Retry-After)
diag "burst of 7: Retry-After $ra, RateLimit $(hdr "$E2E_TMP/c.7" RateLimit)"
check "burst of 7: Retry-After is the minute's wait (> 2)" int_ge "$ra" 3

stop_agent
is "$?" "0" "agent exits with status 0 on SIGTERM"
finish
