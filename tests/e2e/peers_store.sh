#!/usr/bin/env bash
# peers_store.sh - two agents on one Redis, three real HAProxy nodes
# (docs/PEERS.md, "Several agents"): nodes 1 and 2 list agent A as their
# peer, node 3 agent B; each agent counts its nodes' req_local and syncs
# the counts through Redis (sync_rate $SYNC), and pushes the cluster's sum
# (every node's, through the store) into req_cluster on its nodes. Run
# with two mixes of versions, Debian's HAProxy 2.6 ($HAPROXY) and 3.4
# ($HAPROXY3): 2.6 + 2.6 + 3.4, then 2.6 + 3.4 + 3.4. For each mix:
#   - the limit: one client spreads 600 requests over the three nodes
#     within 3 s (200 a second): 100 to 115 admitted (each node alone
#     would admit 300); every node reads the cluster's 600 after
#     (long_cluster, a 600 s window), and Redis holds 600;
#   - the lag from a hit on node 1 to node 2 (the same agent) and to node
#     3 (the other agent, through the store), p50 / p99 (reported);
#   - agent A restarted on its state file, then again without one (a
#     table made afresh): nothing counted twice, in the nodes' reads or
#     in Redis (60 requests, restart, 60, then 70 after 10 more through
#     node 1);
#   - no sanitizer report, both agents exit 0.
# Counts are asserted, times only reported.
# Usage: AGENT=/path/to/spoa-ratelimit bash tests/e2e/peers_store.sh
E2E_TIMEOUT=${E2E_TIMEOUT:-300}
. "$(dirname "$0")/lib.sh"

SYNC=${PEERS_SYNC:-0.05}
PUSH_MS=${PEERS_PUSH_MS:-50}

e2e_init_base
command -v curl >/dev/null 2>&1 || die "curl is installed"
command -v redis-server >/dev/null 2>&1 || die "redis-server is installed"
command -v redis-cli >/dev/null 2>&1 || die "redis-cli is installed"
peers_mixes

REDIS_PORT=$(free_port)
E2E_PORT_AGENT=$(free_port); PORT_B=$(free_port)
PEERS_A=$(free_port); PEERS_B=$(free_port)
HTTP_A=$(free_port); HTTP_B=$(free_port)
peers_ports
REDIS_PID=""
cleanup() {
  peers_stop_nodes
  stop_agent_as b
  [ -n "$REDIS_PID" ] && kill_wait "$REDIS_PID" 3
}
E2E_CLEANUP_HOOK=cleanup

start_redis "$REDIS_PORT" "$E2E_TMP/redis"

# agent_cfg FILE PEERS HTTP [STATE]: an agent's configuration.
agent_cfg() {
  local ns store
  store="\"sync_rate\": $SYNC, \"strategy\": \"redis\", \"strategy_opts\": { \"host\": \"127.0.0.1\", \"port\": $REDIS_PORT, \"timeout_ms\": 500 }"
  cat > "$1" <<EOF
{ "log_level": "info", ${4:+\"state_file\": \"$4\",} "http_listen": "127.0.0.1:$3",
  "peers": { "listen": "127.0.0.1:$2", "name": "agg", "push_ms": $PUSH_MS },
  "namespaces": [
    { "name": "api", "window_sizes": [10], $store,
      "haproxy_tables": { "from": "req_local", "into": "req_cluster" } },
    { "name": "long", "window_sizes": [$PEERS_LONG], $store,
      "haproxy_tables": { "from": "long_local", "into": "long_cluster" } } ] }
EOF
}
agent_cfg "$E2E_TMP/a.json" "$PEERS_A" "$HTTP_A" "$E2E_TMP/a.state"
agent_cfg "$E2E_TMP/a-fresh.json" "$PEERS_A" "$HTTP_A"
agent_cfg "$E2E_TMP/b.json" "$PEERS_B" "$HTTP_B" "$E2E_TMP/b.state"

# Nodes 1 and 2 on agent A, node 3 on agent B.
node_cfg() { peers_node_cfg "$1" "$2" "$PEERS_LIMIT" "$PEERS_LONG"; }
node_cfg 1 "$PEERS_A"; node_cfg 2 "$PEERS_A"; node_cfg 3 "$PEERS_B"

# is_redis SRC WANT WHAT: Redis holds WANT for SRC in long (within 5 s).
is_redis() {
  local n got
  for n in $(seq 1 50); do
    got=$(redis_total "$REDIS_PORT" long "$1" "$PEERS_LONG")
    [ "$got" = "$2" ] && break
    sleep 0.1
  done
  is "$got" "$2" "$3: Redis holds $2"
}

start_agent -c "$E2E_TMP/a.json" -w 2
start_agent_as b "$PORT_B" -c "$E2E_TMP/b.json" -w 2
m=0
for mix in "${PEERS_MIXES[@]}"; do
  m=$((m + 1))
  peers_mix "$mix" "nodes 1 and 2 on agent A, node 3 on agent B, Redis between"
  label=$PEERS_LABEL
  check "$label: nodes 1 and 2 are up on agent A" peers_wait_up 2 15 "$HTTP_A"
  check "$label: node 3 is up on agent B" peers_wait_up 1 15 "$HTTP_B"

  # ---- the limit: 600 requests within 3 s over the three nodes
  src="127.0.$m.10"
  peers_limit "$label" "$src" "$PEERS_REQS" "$PEERS_RATE" "$PEERS_LIMIT" 15
  got=$(peers_wait_reads "$src" 2 "$PEERS_REQS" 5)
  is "$got" "$PEERS_REQS $PEERS_REQS $PEERS_REQS" "$label: every node reads the cluster's $PEERS_REQS (long_cluster)"
  is_redis "$src" "$PEERS_REQS" "$label: the cluster's $PEERS_REQS"

  # ---- the lag (reported): to the same agent's node, to the other's
  # (a key every node has counted: an agent pushes the keys its nodes
  # count, docs/PEERS.md)
  if command -v python3 >/dev/null 2>&1; then
    src="127.0.$m.20"
    peers_send "$src" 3 100 1 2 3
    peers_wait_reads "$src" 2 3 5 > /dev/null
    read -r p50 p99 mx late <<< "$(peers_lag "$src" 50 2 1 2)"
    diag "$label: lag from a hit on node 1 to node 2 (agent A, push_ms $PUSH_MS): p50 $p50 ms, p99 $p99 ms, max $mx ms$late"
    read -r p50 p99 mx late <<< "$(peers_lag "$src" 50 2 1 3)"
    diag "$label: lag from a hit on node 1 to node 3 (agent B through Redis, sync_rate $SYNC): p50 $p50 ms, p99 $p99 ms, max $mx ms$late"
  fi

  # ---- agent A restarted: on its state file, then afresh
  # survive N CFG WHAT SRC: N requests over the nodes (every node reads
  # N, Redis holds N), agent A restarted on CFG, every node still reads
  # N and Redis holds N, then N + 10 after 10 more through node 1.
  survive() {
    local n=$1 cfg=$2 what=$3 src="127.0.$m.$4" got
    peers_send "$src" "$n" 100 1 2 3
    got=$(peers_wait_reads "$src" 2 "$n" 5)
    is "$got" "$n $n $n" "$label: $n requests over the nodes, each reads $n"
    is_redis "$src" "$n" "$label: $n requests"
    stop_agent
    start_agent -c "$cfg" -w 2
    check "$label: nodes 1 and 2 come back to agent A" peers_wait_up 2 15 "$HTTP_A"
    sleep 1
    got=$(peers_wait_reads "$src" 2 "$n" 5)
    is "$got" "$n $n $n" "$label: $what: every node reads $n, nothing counted twice"
    is_redis "$src" "$n" "$label: $what"
    peers_send "$src" 10 100 1
    got=$(peers_wait_reads "$src" 2 $((n + 10)) 5)
    is "$got" "$((n + 10)) $((n + 10)) $((n + 10))" "$label: $what: 10 more through node 1, every node reads $((n + 10))"
    is_redis "$src" $((n + 10)) "$label: $what, 10 more"
  }
  on_state() { survive 60 "$E2E_TMP/a.json" "agent A restarted on its state file" $((30 + $1)); }
  afresh() { survive 60 "$E2E_TMP/a-fresh.json" "agent A restarted without a state file" $((40 + $1)); }
  in_one_window "$PEERS_LONG" 40 on_state || not_ok "$label: the restart on the state file inside one window"
  in_one_window "$PEERS_LONG" 40 afresh || not_ok "$label: the restart afresh inside one window"
  # Back on its state file for the next mix.
  stop_agent
  start_agent -c "$E2E_TMP/a.json" -w 2
  peers_stop_nodes
done

grep -q 'answered 50[0-9]' "$E2E_TMP"/agent*.log && not_ok "no node was refused" || ok "no node was refused"
stop_agent_as b
is "$?" 0 "agent B exits with status 0 on SIGTERM"
check "agent B's log: no sanitizer report" agent_log_clean b
finish
