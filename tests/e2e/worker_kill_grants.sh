#!/usr/bin/env bash
# worker_kill_grants.sh - a worker killed while an admission it sent waits
# for the store does not leave its key without grants.
#
# Admission exact (docs/CLUSTER.md "Exact at the limit"): far from the
# limit a node admits from a grant of the store, asked by an admission
# alone in flight for its key. The count in flight and the "asking" mark
# live in the shared table; a worker killed between sending and the answer
# never ends them. The master ends them when it reaps the worker
# (rl_worker_gone); before, the key went to the store hit by hit until its
# window ended.
#
# Checks, with one agent (one worker, HTTP front) on a real redis-server:
#   - the first hits of a key (limit 6400) are admitted, one grant serves
#     most of them;
#   - redis paused (SIGSTOP), a hit whose cost is more than the grant left
#     goes to the store and waits; the worker is SIGKILLed meanwhile, the
#     master replaces it; redis resumed (SIGCONT);
#   - 300 more hits of the key: all admitted, and the store decided at most
#     a few of them (the others came from a new grant): the key asks for
#     grants again;
#   - the master logs the replacement; exit status 0 on SIGTERM, no
#     sanitizer report.
# Usage: AGENT=/path/to/spoa-ratelimit bash tests/e2e/worker_kill_grants.sh
. "$(dirname "$0")/lib.sh"

E2E_TIMEOUT=${E2E_TIMEOUT:-120}
e2e_init_base
command -v redis-server >/dev/null 2>&1 || die "redis-server is installed"
command -v redis-cli >/dev/null 2>&1 || die "redis-cli is installed"
command -v curl >/dev/null 2>&1 || die "curl is installed"

E2E_PORT_AGENT=$(free_port)
HTTP_PORT=$(free_port)
REDIS_PORT=$(free_port)
REDIS_PID=""
K="grant-$$-$(date +%s)"
LIMIT=6400
diag "agent $E2E_PORT_AGENT, http $HTTP_PORT, redis $REDIS_PORT; tmp $E2E_TMP"

stop_redis() {
  [ -n "$REDIS_PID" ] || return 0
  kill -CONT "$REDIS_PID" 2>/dev/null
  kill_wait "$REDIS_PID" 3
  REDIS_PID=""
}
E2E_CLEANUP_HOOK=stop_redis

start_redis "$REDIS_PORT" "$E2E_TMP/redis"

# timeout_ms 5 s: the admission sent to the paused store is still waiting
# when its worker is killed.
cat > "$E2E_TMP/agent.json" <<EOF
{ "log_level": "info", "http_listen": "127.0.0.1:$HTTP_PORT",
  "namespaces": [ { "name": "default", "window_sizes": [3600], "limit": $LIMIT, "sync_rate": 0.2,
    "strategy": "redis", "admission": "exact",
    "strategy_opts": { "host": "127.0.0.1", "port": $REDIS_PORT, "timeout_ms": 5000 } } ] }
EOF
start_agent -c "$E2E_TMP/agent.json" -w 1
for i in $(seq 1 100); do port_listening "$HTTP_PORT" && break; sleep 0.1; done

url() { echo "http://127.0.0.1:$HTTP_PORT/ratelimit?key=$K&cost=${1:-1}"; }

# hits N: N hits of cost 1 over one kept-alive connection; prints how many
# were admitted (200).
hits() {
  local urls=() i
  for i in $(seq 1 "$1"); do urls+=("$(url)"); done
  curl -s -o /dev/null --max-time 60 -w '%{http_code}\n' "${urls[@]}" | grep -c '^200$'
}

# by WHAT: admissions_total of the namespace decided by WHAT (store, grant).
by() {
  curl -s --max-time 5 "http://127.0.0.1:$HTTP_PORT/metrics" |
    sed -n "s/^spoa_ratelimit_admissions_total{namespace=\"default\",by=\"$1\"} \\([0-9]*\\)$/\\1/p"
}

# The window (3600 s) must not end during the test.
wait_window_margin 3600 30

n=$(hits 50)
is "$n" 50 "the first 50 hits of a key limited to $LIMIT are admitted"
g=$(by grant) s=$(by store)
diag "by grant $g, by store $s"
check "a grant of the store served most of them (grant $g >= 40)" int_ge "${g:-0}" 40

# A hit of cost 500 is more than the grant left: it goes to the store,
# which is paused, and waits there (timeout_ms 5 s).
kill -STOP "$REDIS_PID"
curl -s -o /dev/null --max-time 10 "$(url 500)" &
inflight=$!
sleep 0.5
old=$(agent_workers | tr -d '\n')
kill -KILL "$old"
wait "$inflight" 2>/dev/null
new=""
for i in $(seq 1 100); do
  new=$(agent_workers | tr -d '\n')
  [ -n "$new" ] && [ "$new" != "$old" ] && break
  sleep 0.1
done
check "the master replaced the killed worker ($old -> $new)" test -n "$new" -a "$new" != "$old"
kill -CONT "$REDIS_PID"
for i in $(seq 1 100); do port_listening "$HTTP_PORT" && curl -s -o /dev/null --max-time 2 \
  "http://127.0.0.1:$HTTP_PORT/healthz" && break; sleep 0.1; done

g0=$(by grant) s0=$(by store)
n=$(hits 300)
g1=$(by grant) s1=$(by store)
diag "after the kill: 300 hits, by grant $((g1 - g0)), by store $((s1 - s0))"
is "$n" 300 "after the kill: 300 more hits admitted"
check "after the kill: the key asks for grants again: at most 10 of 300 hits decided by the store ($((s1 - s0)))" \
  int_le "$((s1 - s0))" 10
check "the master logged the replacement" grep -q "killed by signal 9, respawning" "$E2E_TMP/agent.log"

finish
