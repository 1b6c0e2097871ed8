#!/usr/bin/env bash
# haproxy_failmode.sh - fail-open and fail-closed when the agent is away.
# Checks, with frontends fe_open (no rule on errors) and fe_closed (503
# when txn.rl.err is set or no decision came back):
#   - agent running: both answer 200 under the limit, 429 over it;
#   - agent stopped (SIGTERM) while 4 client loops send requests: it exits
#     with status 0 and every request is answered 200 (fail-open);
#   - agent just stopped (connection refused, server not yet DOWN) and
#     agent server DOWN: fe_open answers 200 with txn.rl.err set, fe_closed
#     503; each answer comes within timeout processing (1 s) + margin
#     (the first request after the agent stopped waits the whole 1 s);
#   - agent started again: fe_closed answers 200 again.
# Usage: AGENT=/path/to/spoa-ratelimit bash tests/e2e/haproxy_failmode.sh
. "$(dirname "$0")/lib.sh"

e2e_init
start_agent -w 2
start_haproxy
wait_server_state UP 10 || die "agent server UP in HAProxy"

K="fail-$E2E_RUN_ID"

# timed PORT HDRFILE [curl args]: prints "<code> <ms>".
timed() {
  local port=$1 file=$2; shift 2
  curl -s -o /dev/null -D "$file" --max-time 5 -w '%{http_code} %{time_total}\n' "$@" \
    "http://127.0.0.1:$port/" | awk '{ printf "%s %d\n", $1, $2 * 1000 }'
}

wait_window_margin 60 3
codes=$(for i in 1 2 3; do req "$E2E_PORT_OPEN" -H "X-Api-Key: $K-o" -H "X-Limit: 2"; done | tr '\n' ' ')
is "$codes" "200 200 429 " "agent up: fe_open limits (200 200 429)"
codes=$(for i in 1 2 3; do req "$E2E_PORT_CLOSED" -H "X-Api-Key: $K-c" -H "X-Limit: 2"; done | tr '\n' ' ')
is "$codes" "200 200 429 " "agent up: fe_closed limits (200 200 429)"

# check_failmode TAG: one request to each frontend with the agent away.
check_failmode() {
  local tag=$1 o c
  o=$(timed "$E2E_PORT_OPEN" "$E2E_TMP/o.$tag" -H "X-Api-Key: $K-$tag" -H "X-Limit: 1")
  c=$(timed "$E2E_PORT_CLOSED" "$E2E_TMP/c.$tag" -H "X-Api-Key: $K-$tag" -H "X-Limit: 1")
  diag "$tag: fe_open ${o% *} in ${o#* } ms (err '$(hdr "$E2E_TMP/o.$tag" X-RL-Err)'), fe_closed ${c% *} in ${c#* } ms (err '$(hdr "$E2E_TMP/c.$tag" X-RL-Err)')"
  is "${o% *}" "200" "$tag: fail-open frontend passes the request (200)"
  check "$tag: fail-open sets txn.rl.err (option set-on-error)" test -n "$(hdr "$E2E_TMP/o.$tag" X-RL-Err)"
  is "${c% *}" "503" "$tag: fail-closed frontend refuses it (503)"
  check "$tag: answers within 2.5 s" int_le "$(( ${o#* } > ${c#* } ? ${o#* } : ${c#* } ))" 2500
}

# Stop the agent while 4 client loops keep sending: it must still exit 0,
# and every request is answered (by the agent, or fail-open).
loaders=""
for l in 1 2 3 4; do
  (
    for i in $(seq 1 40); do
      req "$E2E_PORT_OPEN" -H "X-Api-Key: $K-load" -H "X-Limit: 100000"
    done > "$E2E_TMP/load.$l"
  ) &
  loaders="$loaders $!"
done
sleep 0.3
stop_agent
is "$?" "0" "agent stopped under load exits with status 0 on SIGTERM"
for p in $loaders; do wait "$p"; done
cat "$E2E_TMP"/load.[1-4] > "$E2E_TMP/load"
is "$(grep -c -x 200 "$E2E_TMP/load")/$(wc -l < "$E2E_TMP/load")" "160/160" "stopped under load: all 160 requests answered 200 (fail-open)"
check_failmode "agent stopped"
# A second round, to exercise fresh SPOE applets too.
check_failmode "agent stopped, again"
if wait_server_state DOWN 10; then
  ok "agent server marked DOWN"
  check_failmode "server DOWN"
else
  not_ok "agent server marked DOWN"
fi

start_agent -w 2
wait_server_state UP 10 || not_ok "agent server UP after restart"
wait_window_margin 60 3
codes=$(for i in 1 2 3; do req "$E2E_PORT_CLOSED" -H "X-Api-Key: $K-back" -H "X-Limit: 2"; done | tr '\n' ' ')
is "$codes" "200 200 429 " "agent back: fe_closed limits again (200 200 429)"

stop_agent
is "$?" "0" "agent exits with status 0 on SIGTERM"
finish
