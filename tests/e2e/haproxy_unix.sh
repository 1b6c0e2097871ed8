#!/usr/bin/env bash
# haproxy_unix.sh - HAProxy and the agent on one host, over a unix socket
# (what haproxy-examples/README.md recommends there: no TCP stack between
# them; docs/BENCHMARKS.md, "HAProxy 2.6 and 3.4"). The shipped example of
# $HAPROXY's version with RL_AGENT=unix@PATH against the agent listening
# on "unix:PATH":
#   - the agent server is UP (3.1+: its spop-check HELLO over the socket);
#   - per client IP, limit 5 per 60 s: exactly 5 pass, then 429;
#   - 3.1+: the workers run SCHED_BATCH (its stream numbers are read as
#     over TCP); 2.6: a worker serving it runs SCHED_OTHER.
# Usage: AGENT=/path/to/spoa-ratelimit bash tests/e2e/haproxy_unix.sh
. "$(dirname "$0")/lib.sh"

e2e_init
ex_name=haproxy.cfg
haproxy_at_least 3 1 && ex_name=haproxy-3.cfg
sock="$E2E_TMP/spop.sock"
diag "HAProxy $E2E_HAPROXY_VERSION: example $ex_name, agent on $sock"

echo "=== $(date +%T.%N) start: $AGENT -l unix:$sock -w 2" >> "$E2E_TMP/agent.log"
"$AGENT" -l "unix:$sock" -w 2 >> "$E2E_TMP/agent.log" 2>&1 &
AGENT_PID=$!
for i in $(seq 1 100); do
  [ -S "$sock" ] && ss -Hxl 2>/dev/null | grep -qF "$sock" && break
  kill -0 "$AGENT_PID" 2>/dev/null || die "agent started on $sock"
  sleep 0.1
done
[ -S "$sock" ] || die "agent listens on $sock within 10s"

export RL_BIND="127.0.0.1:$E2E_PORT_OPEN" RL_BIND_STRICT="127.0.0.1:$E2E_PORT_CLOSED"
export RL_AGENT="unix@$sock" RL_APP="127.0.0.1:$E2E_PORT_APP"
export RL_STATS="127.0.0.1:$E2E_PORT_STATS"
export RL_LIMIT_IP=5 RL_LIMIT_KEY_SEC=3 RL_LIMIT_KEY_MIN=6
E2E_HAPROXY_CFG="$E2E_ROOT/haproxy-examples/$ex_name"
E2E_SERVER_BE=spoe-ratelimit
E2E_SERVER_NAME=agent1
start_haproxy
wait_server_state UP 15 || die "agent server UP in HAProxy over the unix socket"
ok "agent server UP over the unix socket"

ip="127.$((RANDOM % 200 + 20)).$((RANDOM % 250 + 1)).$((RANDOM % 250 + 1))"
wait_window_margin 60 4
codes=""
for i in 1 2 3 4 5 6 7; do codes="$codes $(req "$E2E_PORT_CLOSED" --interface "$ip")"; done
is "$codes" " 200 200 200 200 200 429 429" "per IP ($ip) over the unix socket, strict listener: exactly 5 pass"

check_sched_policies " over the socket"

stop_agent
is "$?" "0" "agent exits with status 0 on SIGTERM"
check "the agent removed its socket" test ! -e "$sock"
finish
