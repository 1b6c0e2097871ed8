#!/usr/bin/env bash
# haproxy_healthcheck.sh - HAProxy's "option spop-check" against the agent.
# Checks, reading the status column of HAProxy's stats CSV (stats page):
#   - the agent server is marked UP by the SPOP health check (HELLO with
#     healthcheck=true), and stays UP over ~15 checks, the agent's workers
#     unchanged (health-check connections do not crash them);
#   - requests are limited while UP;
#   - it is marked DOWN within a few seconds when the agent is stopped;
#   - it comes back UP when the agent is started again, and requests are
#     limited again.
# Usage: AGENT=/path/to/spoa-ratelimit bash tests/e2e/haproxy_healthcheck.sh
. "$(dirname "$0")/lib.sh"

e2e_init
start_agent -w 2
start_haproxy   # spop-check every 300 ms, fall 2, rise 1

check "agent server marked UP by spop-check" wait_server_state UP 10
csv_line() {
  local f
  for f in status check_status check_desc last_chk chkfail chkdown; do
    printf '%s=%s; ' "$f" "$(stats_field spoe-agents agent1 "$f")"
  done
}
diag "stats: $(csv_line)"
is "$(stats_field spoe-agents agent1 check_status)" "L7OK" "the SPOP check itself passed (check_status L7OK)"

workers=$(agent_workers | tr '\n' ' ')
sleep 4.5   # ~15 health checks
is "$(server_status spoe-agents agent1)" "UP" "still UP after ~15 health checks"
is "$(agent_workers | tr '\n' ' ')" "$workers" "health checks did not crash an agent worker"
diag "stats: $(csv_line)"

K="hc-$E2E_RUN_ID"
wait_window_margin 60 3
codes=$(for i in 1 2 3; do req "$E2E_PORT_OPEN" -H "X-Api-Key: $K-1" -H "X-Limit: 2"; done | tr '\n' ' ')
is "$codes" "200 200 429 " "limited while UP (limit 2: 200 200 429)"

t0=$(date +%s%N)
stop_agent
is "$?" "0" "agent exits with status 0 on SIGTERM"
if wait_server_state DOWN 10; then
  ok "agent server marked DOWN after the agent stopped ($(( ($(date +%s%N) - t0) / 1000000 )) ms)"
else
  not_ok "agent server marked DOWN after the agent stopped"
fi
diag "stats: $(csv_line)"

t0=$(date +%s%N)
start_agent -w 2
if wait_server_state UP 10; then
  ok "agent server UP again after the agent restarted ($(( ($(date +%s%N) - t0) / 1000000 )) ms)"
else
  not_ok "agent server UP again after the agent restarted"
fi
wait_window_margin 60 3
codes=$(for i in 1 2 3; do req "$E2E_PORT_OPEN" -H "X-Api-Key: $K-2" -H "X-Limit: 2"; done | tr '\n' ' ')
is "$codes" "200 200 429 " "limited again after the restart (limit 2: 200 200 429)"

stop_agent
is "$?" "0" "restarted agent exits with status 0 on SIGTERM"
finish
