#!/usr/bin/env bash
# pid_one.sh - the agent as PID 1 (as in a container): its workers serve.
# A worker used to take "my parent is pid 1" for "the master is gone" and
# exit, so as PID 1 no worker ever answered. Here the master runs as PID 1
# of a new PID namespace (unshare, root): both workers answer HTTP checks
# and count, and the agent stops on SIGTERM. Skipped without unshare or
# root.
# Usage: AGENT=/path/to/spoa-ratelimit bash tests/e2e/pid_one.sh
. "$(dirname "$0")/lib.sh"

e2e_init_base
if [ "$(id -u)" -ne 0 ] || ! command -v unshare >/dev/null 2>&1 ||
   ! unshare --pid --fork --mount-proc true 2>/dev/null; then
  printf 'ok # skip no PID namespace here (needs root and unshare)\n'
  exit 0
fi
command -v curl >/dev/null 2>&1 || { not_ok "curl is installed"; exit 1; }
port=$(free_port)
http=$(free_port)
cat > "$E2E_TMP/agent.json" <<JSON
{ "listen": "127.0.0.1:$port", "http_listen": "127.0.0.1:$http", "workers": 2,
  "namespaces": [ { "name": "default", "window_sizes": [60] } ] }
JSON
# exec: the agent is the namespace's PID 1 (unshare's child).
unshare --pid --fork --mount-proc sh -c "exec \"$AGENT\" -c \"$E2E_TMP/agent.json\"" \
  >> "$E2E_TMP/agent.log" 2>&1 &
UNSHARE_PID=$!
stop_ns() { [ -n "${UNSHARE_PID:-}" ] && kill_wait "$UNSHARE_PID" 10; UNSHARE_PID=""; }
E2E_CLEANUP_HOOK=stop_ns
for i in $(seq 1 100); do port_listening "$http" && break; sleep 0.1; done
check "the agent listens" port_listening "$http"
rates=""
for i in 1 2 3 4 5 6; do
  r=$(curl -s --max-time 5 "http://127.0.0.1:$http/ratelimit?key=p1-$$" | sed -n 's/.*"rate":\([0-9]*\).*/\1/p')
  rates="$rates $r"
done
is "$rates" " 1 2 3 4 5 6" "as PID 1, the workers answer and count (6 checks on new connections)"
if grep -q "respawning" "$E2E_TMP/agent.log"; then not_ok "no worker exited and was respawned"
else ok "no worker exited and was respawned"; fi
# The master is the namespace's init: its workers are its children.
master=$(pgrep -P "$UNSHARE_PID" -x spoa-ratelimit | head -1)
check "the master runs inside the namespace" test -n "$master"
n=$(pgrep -P "$master" | wc -l)
is "$n" "2" "two workers, children of the PID 1 master"
kill -TERM "$master"
for i in $(seq 1 100); do alive "$UNSHARE_PID" || break; sleep 0.1; done
wait "$UNSHARE_PID"; rc=$?
UNSHARE_PID=""
is "$rc" "0" "the agent stops on SIGTERM (status 0)"
rep=$(grep -E 'AddressSanitizer|LeakSanitizer|runtime error:' "$E2E_TMP/agent.log" | head -n 5)
if [ -z "$rep" ]; then ok "agent log: no sanitizer report"; else not_ok "agent log: no sanitizer report"; fi
diag "$E2E_PASSED passed, $E2E_FAILED failed"
[ "$E2E_FAILED" -eq 0 ]
