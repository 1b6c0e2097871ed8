#!/usr/bin/env bash
# haproxy_concurrency.sh - counts are shared by all workers, and the SPOP
# connections are shared out between them.
# Checks, with the agent running 2 worker processes (-w 2) and HAProxy
# (2 threads, so several SPOP connections; with 3.x, few connections
# carrying many streams each) in front:
#   - 200 requests of one key from 16 concurrent curl processes, limit 50
#     per 60 s: exactly 50 pass, 150 get 429, none fails; and the SPOP
#     connections HAProxy opened for them, from none, were accepted by
#     both workers (agent/balance.h: the worker holding the fewest takes
#     the next one, whatever the kernel wakes first);
#   - 4 keys x 40 requests interleaved, 16 concurrent, limit 15: exactly 15
#     pass per key;
#   - the same through an SPOE engine without pipelining (one connection
#     per request in flight), HAProxy restarted so that no connection is
#     left: its connections were accepted by both workers, and the agent
#     allows exactly 40 of 160, so the exact total really comes from
#     counts shared between processes (requests HAProxy 2.6.12 itself
#     failed to send, SPOE error with qT -1, pass uncounted and are
#     reported apart; at most 8 tolerated);
#   - a throughput figure with curl --parallel (2000 requests, all counted).
# Each spread is printed per worker: connections accepted, connections held
# and the bytes received on them (the streams' NOTIFYs). HAProxy's health
# check runs once, at its start: every connection during the bursts is one
# of theirs.
# Usage: AGENT=/path/to/spoa-ratelimit bash tests/e2e/haproxy_concurrency.sh
. "$(dirname "$0")/lib.sh"

e2e_init
start_agent -w 2 -v   # -v: a debug line per accepted connection
export E2E_CHECK_INTER=1h
start_haproxy
wait_server_state UP 10 || die "agent server UP in HAProxy"

workers=$(agent_workers | tr '\n' ' ')
diag "agent master $AGENT_PID, workers: $workers"
K="conc-$E2E_RUN_ID"
url="http://127.0.0.1:$E2E_PORT_OPEN/"
out="$E2E_TMP/codes"

# worker_pid ID: the pid of worker ID (its "worker ID serving" line).
worker_pid() {
  sed -n "s/.*\[pid \([0-9]*\) w$1\] debug: worker $1 serving.*/\1/p" "$E2E_TMP/agent.log" | tail -n 1
}

# held_by PID: "N B": the SPOP connections PID holds, and the bytes it
# received on them.
held_by() {
  ss -Htnpi state established "( sport = :$E2E_PORT_AGENT )" 2>/dev/null |
    awk -v who="pid=$1," '
      /users:/ { mine = index($0, who) > 0; n += mine; next }
      mine && match($0, /bytes_received:[0-9]+/) { b += substr($0, RSTART + 15, RLENGTH - 15) }
      END { printf "%d %d\n", n, b }'
}

# spop_idle SECONDS: until no agent process holds an SPOP connection (the
# health check's is closed), at most SECONDS.
spop_idle() {
  local i
  for i in $(seq 1 $(($1 * 10))); do
    ss -Htnp "( sport = :$E2E_PORT_AGENT )" 2>/dev/null | grep -q 'pid=' || return 0
    sleep 0.1
  done
  return 1
}

# spread_mark: where the next burst's lines begin in the agent's log.
spread_mark() { SPREAD_MARK=$(wc -l < "$E2E_TMP/agent.log"); }

# spread_check NAME: each worker accepted some of the SPOP connections
# opened since spread_mark; prints the spread.
spread_check() {
  local name=$1 id pid a hb line="" low=""
  for id in 0 1; do
    pid=$(worker_pid "$id")
    a=$(tail -n +"$((SPREAD_MARK + 1))" "$E2E_TMP/agent.log" |
        grep -c " w$id\] debug: spop connection [0-9]* accepted")
    hb=$(held_by "$pid")
    line="$line w$id (pid $pid): accepted $a, holds ${hb% *}, ${hb#* } bytes in;"
    int_ge "$a" 1 || low=1
  done
  diag "$name, SPOP connections per worker:$line"
  if [ -z "$low" ]; then ok "$name: the SPOP connections were spread over both workers"
  else not_ok "$name: the SPOP connections were spread over both workers"; fi
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

# Every burst below counts exactly within one 60 s window (in_one_window:
# across its end, the sliding rate is weighted down and more pass).

# --- 1. one key, 16 concurrent clients (pipelined engine) ---
spop_idle 10 || diag "SPOP connections still held before the first burst: $(held_by "$(worker_pid 0)") / $(held_by "$(worker_pid 1)")"
spread_mark
burst_one() { burst "$E2E_PORT_OPEN" "$K-one$1" 50 200 > "$out"; }
in_one_window 60 8 burst_one || diag "every burst crossed a window's end"
tally "$out"
diag "one key: $n200 x 200, $n429 x 429, $nerr SPOE errors, $(wc -l < "$out") answers"
is "$n200" "50" "16 concurrent clients, limit 50: exactly 50 of 200 pass"
is "$n429" "150" "16 concurrent clients: the other 150 get 429"
[ "$nerr" -gt 0 ] && spoe_errors
spread_check "pipelining"

# --- 2. four keys interleaved ---
burst_four() {
  K4="$K-$1"
  : > "$out"
  for i in $(seq 1 40); do for k in a b c d; do echo "$K4$k"; done; done |
    xargs -P 16 -I{} curl -s -o /dev/null --max-time 10 -w '{} %{http_code}\n' \
      -H "X-Api-Key: {}" -H "X-Limit: 15" "$url" >> "$out"
}
in_one_window 60 8 burst_four || diag "every burst crossed a window's end"
bad=""
for k in a b c d; do
  p=$(grep -cx "$K4$k 200" "$out")
  d=$(grep -cx "$K4$k 429" "$out")
  if [ "$p" != 15 ] || [ "$d" != 25 ]; then bad="$bad $k:$p/$d"; fi
done
if [ -z "$bad" ]; then ok "4 keys x 40 concurrent requests, limit 15: exactly 15 pass per key"
else not_ok "4 keys x 40 concurrent requests, limit 15: exactly 15 pass per key"; diag "key:passed/denied$bad"; spoe_errors; fi

# --- 3. no pipelining: one SPOP connection per request in flight, so the
#     hits of one key arrive over many connections and both workers ---
# HAProxy restarted: the connections of the pipelined engine are gone, the
# spread below is of this engine's alone.
kill_wait "$HAPROXY_PID" 3
HAPROXY_PID=""
start_haproxy
wait_server_state UP 10 || die "agent server UP in the restarted HAProxy"
spop_idle 10 || diag "SPOP connections still held after the restart"
spread_mark
# HAProxy 2.6.12 in this mode sometimes leaves a NOTIFY queued until
# "timeout processing" while it creates its SPOE applets (SPOE log: qT -1,
# st=1): that request passes uncounted (fail-open) and is reported apart.
# A warm-up burst creates the applets first.
burst "$E2E_PORT_NOPIPE" "$K-warm" 1000 64 > /dev/null
spread_check "no pipelining"
# The count read in the burst's window too.
burst_np() {
  burst "$E2E_PORT_NOPIPE" "$K-np$1" 40 160 > "$out"
  req_h "$E2E_PORT_OPEN" "$E2E_TMP/hnp" -H "X-Api-Key: $K-np$1" -H "X-Limit: 40" -H "X-Cost: 0" > /dev/null
}
in_one_window 60 8 burst_np || diag "every burst crossed a window's end"
tally "$out"
diag "no pipelining: $n200 x 200, $n429 x 429, $nerr SPOE errors"
[ "$nerr" -gt 0 ] && spoe_errors "$nerr"
counted=$(hdr "$E2E_TMP/hnp" X-RL-Rate)
is "$n200/$n429" "40/$((120 - nerr))" "no pipelining, 16 concurrent clients, limit 40: the agent allows exactly 40 of 160 (less $nerr HAProxy SPOE errors)"
is "$counted" "$((160 - nerr))" "no pipelining: every hit that reached the agent was counted"
check "no pipelining: at most 8 of 160 requests lost to HAProxy SPOE errors" int_le "$nerr" 8

# --- diagnostics: throughput with curl --parallel (2000 requests) ---
cfgf="$E2E_TMP/curl.cfg"
: > "$cfgf"
for i in $(seq 1 2000); do
  printf 'url = "%s"\noutput = "/dev/null"\n' "$url" >> "$cfgf"
done
# The 2000 hits and their count in one window.
burst_tput() {
  t0=$(date +%s%N)
  curl -s -Z --parallel-max 16 --max-time 20 -K "$cfgf" -w '%{http_code}\n' \
    -H "X-Api-Key: $K-tput$1" -H "X-Limit: 1000000" > "$out" 2>/dev/null
  t1=$(date +%s%N)
  req_h "$E2E_PORT_OPEN" "$E2E_TMP/hr" -H "X-Api-Key: $K-tput$1" -H "X-Limit: 1000000" -H "X-Cost: 0" > /dev/null
}
in_one_window 60 5 burst_tput || diag "every burst crossed a window's end"
ms=$(( (t1 - t0) / 1000000 ))
n=$(count_codes "$out" 200)
[ "$ms" -gt 0 ] || ms=1
diag "throughput: $n x 200 of 2000 in ${ms} ms = $(( n * 1000 / ms )) req/s (curl -Z, 16 parallel, HAProxy + SPOE + agent)"
is "$n" "2000" "2000 parallel requests under the limit all pass"
is "$(hdr "$E2E_TMP/hr" X-RL-Rate)" "2000" "all 2000 parallel hits were counted (cost-0 read gives rate 2000)"

# --- the workers are the same processes (none crashed) ---
is "$(agent_workers | tr '\n' ' ')" "$workers" "no agent worker was replaced during the run"

stop_agent
is "$?" "0" "agent exits with status 0 on SIGTERM"
finish
