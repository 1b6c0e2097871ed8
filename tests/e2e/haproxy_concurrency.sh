#!/usr/bin/env bash
# haproxy_concurrency.sh - counts are shared by all workers.
# Checks, with the agent running 2 worker processes (-w 2) and HAProxy
# (2 threads, so several SPOP connections) in front:
#   - 200 requests of one key from 16 concurrent curl processes, limit 50
#     per 60 s: exactly 50 pass, 150 get 429, none fails;
#   - 4 keys x 40 requests interleaved, 16 concurrent, limit 15: exactly 15
#     pass per key;
#   - the same through an SPOE engine without pipelining (one connection
#     per request in flight): the agent allows exactly 40 of 160, and the
#     connections were held by both worker processes (from ss -tnp), so
#     the exact total really comes from counts shared between processes
#     (requests HAProxy 2.6.12 itself failed to send, SPOE error with
#     qT -1, pass uncounted and are reported apart; at most 8 tolerated);
#   - a throughput figure with curl --parallel (2000 requests, all counted).
# Usage: AGENT=/path/to/spoa-ratelimit bash tests/e2e/haproxy_concurrency.sh
. "$(dirname "$0")/lib.sh"

e2e_init
start_agent -w 2
start_haproxy
wait_server_state UP 10 || die "agent server UP in HAProxy"

workers=$(agent_workers | tr '\n' ' ')
diag "agent master $AGENT_PID, workers: $workers"
K="conc-$E2E_RUN_ID"
url="http://127.0.0.1:$E2E_PORT_OPEN/"
out="$E2E_TMP/codes"

# conns_by_pid: "count pid=N" pairs of established SPOP connections, by
# the agent process holding them.
conns_by_pid() {
  ss -Htnp state established "( sport = :$E2E_PORT_AGENT )" 2>/dev/null |
    grep -o 'pid=[0-9]*' | sort | uniq -c | tr -s ' \n' ' '
}

# burst PORT KEY LIMIT COUNT: COUNT requests from 16 concurrent curls; one
# line per answer: "<status> <txn.rl.err>" (err empty when the agent
# answered; set when HAProxy's SPOE gave up and the request passed
# uncounted, fail-open).
burst() {
  seq 1 "$4" | xargs -P 16 -I{} curl -s -o /dev/null --max-time 10 \
    -w '%{http_code} %header{x-rl-err}\n' \
    -H "X-Api-Key: $2" -H "X-Limit: $3" "http://127.0.0.1:$1/"
}

# tally FILE: sets n200 (allowed by the agent), n429, nerr (SPOE errors).
tally() {
  n200=$(grep -c -x '200 ' "$1")
  n429=$(grep -c -x '429 ' "$1")
  nerr=$(grep -c -E '^[0-9]+ [0-9]+$' "$1")
}

# spoe_errors: HAProxy's SPOE log lines of failed events (timings).
spoe_errors() { grep 'SPOE:' "$E2E_TMP/haproxy.log" | tail -n "${1:-3}" | sed 's/^/#   /'; }

# --- 1. one key, 16 concurrent clients (pipelined engine) ---
wait_window_margin 60 8
burst "$E2E_PORT_OPEN" "$K-one" 50 200 > "$out"
tally "$out"
diag "one key: $n200 x 200, $n429 x 429, $nerr SPOE errors, $(wc -l < "$out") answers"
is "$n200" "50" "16 concurrent clients, limit 50: exactly 50 of 200 pass"
is "$n429" "150" "16 concurrent clients: the other 150 get 429"
[ "$nerr" -gt 0 ] && spoe_errors
diag "SPOP connections (pipelining) per agent process: $(conns_by_pid)"

# --- 2. four keys interleaved ---
wait_window_margin 60 8
: > "$out"
for i in $(seq 1 40); do for k in a b c d; do echo "$K-$k"; done; done |
  xargs -P 16 -I{} curl -s -o /dev/null --max-time 10 -w '{} %{http_code}\n' \
    -H "X-Api-Key: {}" -H "X-Limit: 15" "$url" >> "$out"
bad=""
for k in a b c d; do
  p=$(grep -cx "$K-$k 200" "$out")
  d=$(grep -cx "$K-$k 429" "$out")
  if [ "$p" != 15 ] || [ "$d" != 25 ]; then bad="$bad $k:$p/$d"; fi
done
if [ -z "$bad" ]; then ok "4 keys x 40 concurrent requests, limit 15: exactly 15 pass per key"
else not_ok "4 keys x 40 concurrent requests, limit 15: exactly 15 pass per key"; diag "key:passed/denied$bad"; spoe_errors; fi

# --- 3. no pipelining: one SPOP connection per request in flight, so the
#     hits of one key arrive over many connections and both workers ---
# HAProxy 2.6.12 in this mode sometimes leaves a NOTIFY queued until
# "timeout processing" while it creates its SPOE applets (SPOE log: qT -1,
# st=1): that request passes uncounted (fail-open) and is reported apart.
# A warm-up burst creates the applets first.
burst "$E2E_PORT_NOPIPE" "$K-warm" 1000 64 > /dev/null
# Up to 3 rounds (fresh key each) until both workers hold connections.
round=0 spread=0
while [ "$round" -lt 3 ]; do
  round=$((round + 1))
  wait_window_margin 60 8
  burst "$E2E_PORT_NOPIPE" "$K-np$round" 40 160 > "$out"
  tally "$out"
  by=$(conns_by_pid)
  diag "no pipelining, round $round: $n200 x 200, $n429 x 429, $nerr SPOE errors; SPOP connections per agent process: $by"
  [ "$nerr" -gt 0 ] && spoe_errors "$nerr"
  req_h "$E2E_PORT_OPEN" "$E2E_TMP/hnp" -H "X-Api-Key: $K-np$round" -H "X-Limit: 40" -H "X-Cost: 0" > /dev/null
  counted=$(hdr "$E2E_TMP/hnp" X-RL-Rate)
  if [ "$n200" != 40 ] || [ "$n429" != $((120 - nerr)) ]; then break; fi
  if [ "$(echo "$by" | grep -o 'pid=' | wc -l)" -ge 2 ]; then spread=1; break; fi
done
is "$n200/$n429" "40/$((120 - nerr))" "no pipelining, 16 concurrent clients, limit 40: the agent allows exactly 40 of 160 (less $nerr HAProxy SPOE errors)"
is "$counted" "$((160 - nerr))" "no pipelining: every hit that reached the agent was counted"
check "no pipelining: at most 8 of 160 requests lost to HAProxy SPOE errors" int_le "$nerr" 8
if [ "$spread" = 1 ]; then ok "the SPOP connections were spread over both workers (counts shared)"
else not_ok "the SPOP connections were spread over both workers (counts shared)"; fi

# --- diagnostics: throughput with curl --parallel (2000 requests) ---
cfgf="$E2E_TMP/curl.cfg"
: > "$cfgf"
for i in $(seq 1 2000); do
  printf 'url = "%s"\noutput = "/dev/null"\n' "$url" >> "$cfgf"
done
wait_window_margin 60 5
t0=$(date +%s%N)
curl -s -Z --parallel-max 16 --max-time 20 -K "$cfgf" -w '%{http_code}\n' \
  -H "X-Api-Key: $K-tput" -H "X-Limit: 1000000" > "$out" 2>/dev/null
t1=$(date +%s%N)
ms=$(( (t1 - t0) / 1000000 ))
n=$(count_codes "$out" 200)
[ "$ms" -gt 0 ] || ms=1
diag "throughput: $n x 200 of 2000 in ${ms} ms = $(( n * 1000 / ms )) req/s (curl -Z, 16 parallel, HAProxy + SPOE + agent)"
is "$n" "2000" "2000 parallel requests under the limit all pass"
req_h "$E2E_PORT_OPEN" "$E2E_TMP/hr" -H "X-Api-Key: $K-tput" -H "X-Limit: 1000000" -H "X-Cost: 0" > /dev/null
is "$(hdr "$E2E_TMP/hr" X-RL-Rate)" "2000" "all 2000 parallel hits were counted (cost-0 read gives rate 2000)"

# --- the workers are the same processes (none crashed) ---
is "$(agent_workers | tr '\n' ' ')" "$workers" "no agent worker was replaced during the run"

stop_agent
is "$?" "0" "agent exits with status 0 on SIGTERM"
finish
