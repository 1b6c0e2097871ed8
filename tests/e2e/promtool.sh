#!/usr/bin/env bash
# promtool.sh - the alerting rules shipped with the examples and the live
# metrics page, through Prometheus's own promtool (Debian's prometheus
# package): the rules parse (check rules) and do what their unit tests say
# (tests/prometheus/rules_test.yml: each alert fires on the series that
# should make it fire, and not on a healthy agent); a running agent's
# GET /metrics passes `promtool check metrics`.
# Usage: AGENT=/path/to/spoa-ratelimit bash tests/e2e/promtool.sh
. "$(dirname "$0")/lib.sh"

e2e_init_base
command -v promtool >/dev/null 2>&1 || { not_ok "promtool is installed (scripts/deps.sh test: prometheus)"; exit 1; }
command -v curl >/dev/null 2>&1 || { not_ok "curl is installed"; exit 1; }
root="$E2E_LIB_DIR/../.."
diag "$(promtool --version 2>&1 | head -1)"

out=$(promtool check rules "$root/haproxy-examples/prometheus/spoa-ratelimit.rules.yml" 2>&1)
check "promtool check rules: the shipped rules parse" [ $? -eq 0 ]
diag "$(echo "$out" | tail -1)"
out=$( (cd "$root/tests/prometheus" && promtool test rules rules_test.yml) 2>&1)
rc=$?
check "promtool test rules: every alert fires when it should, and only then" [ $rc -eq 0 ]
[ $rc -eq 0 ] || diag "$(echo "$out" | head -40)"

# A live page: an agent with a synced namespace (its store away: the
# store series are there too), hits, denials, an error.
port=$(free_port)
http=$(free_port)
dead=$(free_port)
cat > "$E2E_TMP/agent.json" <<JSON
{ "listen": "127.0.0.1:$port", "http_listen": "127.0.0.1:$http", "workers": 2,
  "namespaces": [ { "name": "default", "window_sizes": [60], "limit": 3 },
                  { "name": "we\"ird", "window_sizes": [60] },
                  { "name": "synced", "window_sizes": [60], "limit": 5, "sync_rate": 0.1, "strategy": "redis",
                    "strategy_opts": { "port": $dead, "timeout_ms": 50 } } ] }
JSON
"$AGENT" -c "$E2E_TMP/agent.json" >> "$E2E_TMP/agent.log" 2>&1 &
AGENT_PID=$!
stop_it() { [ -n "${AGENT_PID:-}" ] && kill_wait "$AGENT_PID" 10; AGENT_PID=""; }
E2E_CLEANUP_HOOK=stop_it
for i in $(seq 1 100); do port_listening "$http" && break; sleep 0.1; done
check "the agent listens" port_listening "$http"
for i in 1 2 3 4 5; do curl -s -o /dev/null "http://127.0.0.1:$http/ratelimit?key=k"; done
curl -s -o /dev/null "http://127.0.0.1:$http/ratelimit?key=k&namespace=we%22ird"
curl -s -o /dev/null "http://127.0.0.1:$http/ratelimit?key=k&namespace=synced"
curl -s -o /dev/null "http://127.0.0.1:$http/ratelimit?window=7&key=k"
sleep 0.5
curl -s "http://127.0.0.1:$http/metrics" > "$E2E_TMP/metrics.txt"
check "GET /metrics answered" [ -s "$E2E_TMP/metrics.txt" ]
out=$(promtool check metrics < "$E2E_TMP/metrics.txt" 2>&1)
rc=$?
check "promtool check metrics passes over a live page" [ $rc -eq 0 ]
[ $rc -eq 0 ] || diag "$out"
check "the page has the alerts' series" grep -q '^spoa_ratelimit_store_up{namespace="synced"} 0' "$E2E_TMP/metrics.txt"
finish
