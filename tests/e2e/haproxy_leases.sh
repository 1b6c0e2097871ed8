#!/usr/bin/env bash
# haproxy_leases.sh - a concurrency limit behind HAProxy (issue 32,
# docs/PROTOCOL.md "Leases"): haproxy-examples/haproxy-concurrency.cfg and
# spoe-concurrency.conf as shipped (ports rewritten through the
# environment), the agent's namespace "inflight" 1 request in flight per
# client IP with leases of 60 s (only a release frees one in the test):
#   - while one request of an IP is in flight (a slow app), another of the
#     same IP is denied (429), another IP's passes;
#   - the `release` message sent on-http-response (var(txn.rl.lease))
#     gives the lease back: GET /keys shows 1 in flight during, 0 after,
#     and 5 requests one after the other all pass.
# Run with HAProxy 2.6 and 3.x (tests/run.sh runs haproxy_*.sh with both).
# Usage: AGENT=/path/to/spoa-ratelimit [HAPROXY=...] bash tests/e2e/haproxy_leases.sh
. "$(dirname "$0")/lib.sh"

e2e_init
leases_setup "$E2E_PORT_APP"
E2E_CLEANUP_HOOK=leases_stop_app

start_agent -c "$E2E_TMP/agent.json" -w 2
export RL_BIND="127.0.0.1:$E2E_PORT_OPEN" RL_AGENT="127.0.0.1:$E2E_PORT_AGENT"
export RL_APP="127.0.0.1:$E2E_PORT_APP" RL_STATS="127.0.0.1:$E2E_PORT_STATS"
export RL_SPOE_CONF="$E2E_ROOT/haproxy-examples/spoe-concurrency.conf"
E2E_HAPROXY_CFG="$E2E_ROOT/haproxy-examples/haproxy-concurrency.cfg"
start_haproxy
diag "HAProxy $E2E_HAPROXY_VERSION"

# get IP [SECONDS]: the code of a request from IP the app holds SECONDS.
get() {
  curl -s -o /dev/null --max-time 20 -w '%{http_code}\n' --interface "$1" \
    "http://127.0.0.1:$E2E_PORT_OPEN/?s=${2:-0}" || true
}
leases() { in_flight "$PORT_HTTP" "$ADMIN" inflight "$1"; }

ip="127.$((RANDOM % 200 + 20)).$((RANDOM % 250 + 1)).$((RANDOM % 250 + 1))"
other="127.$((RANDOM % 200 + 20)).$((RANDOM % 250 + 1)).$((RANDOM % 250 + 1))"
is "$(get "$ip")" 200 "a first request passes"
wait_in_flight "$PORT_HTTP" "$ADMIN" inflight "$ip" 0
is "$(leases "$ip")" 0 "its lease given back on the response (on-http-response)"

get "$ip" 3 > "$E2E_TMP/slow.code" &
slow=$!
wait_in_flight "$PORT_HTTP" "$ADMIN" inflight "$ip" 1
is "$(leases "$ip")" 1 "GET /keys: one lease in flight"
is "$(get "$ip")" 429 "a second request of the IP, while the first is in flight: 429"
is "$(get "$other")" 200 "another IP passes meanwhile"
wait "$slow"
is "$(cat "$E2E_TMP/slow.code")" 200 "the slow request passed"
wait_in_flight "$PORT_HTTP" "$ADMIN" inflight "$ip" 0
is "$(leases "$ip")" 0 "its lease given back once it was answered"
codes=""
for _ in 1 2 3 4 5; do codes="$codes$(get "$ip") "; done
is "$codes" "200 200 200 200 200 " "5 requests one after the other all pass"

finish
