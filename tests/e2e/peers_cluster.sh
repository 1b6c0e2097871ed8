#!/usr/bin/env bash
# peers_cluster.sh - the agent as a peer of three real HAProxy nodes
# (docs/PEERS.md): each node's peers section lists itself and the agent,
# with tables req_local (tracked: track-sc0 src) and req_cluster (read in
# an ACL: deny over 100 per 10 s), and long_local / long_cluster (600 s,
# read only: the restarts below stay inside one of its windows). The agent
# (2 workers, a state file) sums every node's req_local into req_cluster
# on every node. Run with two mixes of versions, Debian's HAProxy 2.6
# ($HAPROXY) and 3.4 ($HAPROXY3, ../shared/peers/haproxy-3.4/haproxy):
# 2.6 + 2.6 + 3.4, then 2.6 + 3.4 + 3.4 (2.6 alone, saying so, without
# a 3.x binary). For each mix:
#   - the limit: one client spreads 600 requests over the three nodes
#     within 3 s (curl --rate 200/s): 100 to 115 admitted (each node alone
#     would admit 300); every node reads the cluster's count after;
#   - the lag from a node's hit to the others' req_cluster, p50 / p99
#     (reported, not asserted);
#   - 600 requests as fast as one client sends them: the admitted and the
#     bound (docs/CLUSTER.md) with the lag above (reported, not asserted);
#   - string, ipv6 and integer keys, a counter (http_req_cnt) and an
#     array's element (gpc_rate(1)): every node reads the cluster's sum;
#   - a node restarted mid-test: it is taught the sums at once, and its
#     counts are not counted twice (90 requests, node 1 restarted: every
#     node reads 90, then 100 after 10 more through node 1);
#   - the agent restarted on its state file: the nodes reconnect, their
#     dumps and resends count nothing twice (60, restart, 60, then 70);
#   - no sanitizer report, the agent exits 0.
# Counts are asserted, times only reported.
# Usage: AGENT=/path/to/spoa-ratelimit bash tests/e2e/peers_cluster.sh
E2E_TIMEOUT=${E2E_TIMEOUT:-240}
. "$(dirname "$0")/lib.sh"


e2e_init_base
command -v curl >/dev/null 2>&1 || die "curl is installed"
peers_mixes

PEERS_PORT=$(free_port)
HTTP_PORT=$(free_port)
E2E_PORT_AGENT=$(free_port)
peers_ports
E2E_CLEANUP_HOOK=peers_stop_nodes

cat > "$E2E_TMP/agent.json" <<EOF
{ "log_level": "info", "state_file": "$E2E_TMP/state", "http_listen": "127.0.0.1:$HTTP_PORT",
  "peers": { "listen": "127.0.0.1:$PEERS_PORT", "name": "agg" },
  "namespaces": [
    { "name": "api", "window_sizes": [10],
      "haproxy_tables": { "from": "req_local", "into": "req_cluster" } },
    { "name": "long", "window_sizes": [$PEERS_LONG],
      "haproxy_tables": { "from": "rl/long_local", "into": "rl/long_cluster" } },
    { "name": "str", "window_sizes": [$PEERS_LONG],
      "haproxy_tables": { "from": "s_local", "into": "s_cluster", "data_type": "http_req_cnt" } },
    { "name": "v6", "window_sizes": [$PEERS_LONG],
      "haproxy_tables": { "from": "v6_local", "into": "v6_cluster" } },
    { "name": "int", "window_sizes": [$PEERS_LONG],
      "haproxy_tables": { "from": "i_local", "into": "i_cluster", "data_type": "gpc_rate(1)" } } ] }
EOF

# node_cfg I: node I's configuration, with tables of string, ipv6 and
# integer keys, a counter and an array's element, and frontend mt (MT_I)
# that counts them (x-key, x-v6, x-int) and reads their sums (/read).
node_cfg() {
  local mt
  eval "mt=\$MT_$1"
  peers_node_cfg "$1" "$PEERS_PORT" "$PEERS_LIMIT" "$PEERS_LONG" "\
    table s_local type string len 32 size 1k expire ${PEERS_LONG}s store http_req_cnt
    table s_cluster type string len 32 size 1k expire ${PEERS_LONG}s store http_req_cnt
    table v6_local type ipv6 size 1k expire ${PEERS_LONG}s store http_req_rate(${PEERS_LONG}s)
    table v6_cluster type ipv6 size 1k expire ${PEERS_LONG}s store http_req_rate(${PEERS_LONG}s)
    table i_local type integer size 1k expire ${PEERS_LONG}s store gpc_rate(2,${PEERS_LONG}s)
    table i_cluster type integer size 1k expire ${PEERS_LONG}s store gpc_rate(2,${PEERS_LONG}s)" "\
frontend mt
    bind 127.0.0.1:$mt
    acl read path /read
    http-request track-sc0 req.hdr(x-key) table rl/s_local unless read
    http-request track-sc1 req.hdr_ip(x-v6) table rl/v6_local unless read
    http-request track-sc2 req.hdr_val(x-int) table rl/i_local unless read
    http-request sc-inc-gpc(1,2) unless read
    http-request return status 200 content-type text/plain lf-string \"%[req.hdr(x-key),table_http_req_cnt(rl/s_cluster)] %[req.hdr_ip(x-v6),table_http_req_rate(rl/v6_cluster)] %[req.hdr_val(x-int),table_gpc_rate(1,rl/i_cluster)]\\n\" if read
    http-request return status 200 content-type text/plain string ok"
}

# peers_fast LABEL SRC LAG_MS: PEERS_REQS requests from SRC over the three
# nodes as fast as one client sends them; reports the rate, the admitted
# and the bound with LAG_MS (the lag measured above), not asserted.
peers_fast() {
  local t0 t1 ms adm
  t0=$(date +%s%N)
  peers_send "$2" "$PEERS_REQS" 100000 1 2 3
  t1=$(date +%s%N)
  ms=$(( (t1 - t0) / 1000000 ))
  adm=$(count_codes "$E2E_TMP/send.codes" 200)
  diag "$1: $PEERS_REQS requests in $ms ms ($(awk -v n="$PEERS_REQS" -v ms="$ms" 'BEGIN { printf "%.0f", n * 1000 / ms }')/s): $adm admitted; bound with the p99 lag: $(awk -v l="$PEERS_LIMIT" -v n="$PEERS_REQS" -v ms="$ms" -v lag="${3:-0}" 'BEGIN { printf "%.0f", l + 1 + n / ms * lag }')"
}

# wait_up N SECS: until N nodes are up on the agent.
wait_up() { peers_wait_up "$1" "$2" "$HTTP_PORT"; }

# The example (haproxy-examples/haproxy-peers.cfg, agent-peers.json) is
# valid for both versions and for the agent.
ex="$E2E_ROOT/haproxy-examples"
for b in "$H26" ${H34:+"$H34"}; do
  v=$("$b" -v | head -1 | cut -d' ' -f3)
  if out=$("$b" -c -f "$ex/haproxy-peers.cfg" 2>&1); then ok "haproxy-peers.cfg is valid for $v"
  else not_ok "haproxy-peers.cfg is valid for $v"; diag "$out"; fi
done
sed "s#/var/lib/spoa-ratelimit/state#$E2E_TMP/example.state#" "$ex/agent-peers.json" > "$E2E_TMP/example.json"
agent_check() { "$AGENT" -t -c "$1" > /dev/null 2>&1; }
check "agent-peers.json is valid (-t)" agent_check "$E2E_TMP/example.json"

node_cfg 1; node_cfg 2; node_cfg 3
start_agent -c "$E2E_TMP/agent.json" -w 2
m=0
for mix in "${PEERS_MIXES[@]}"; do
  m=$((m + 1))
  peers_mix "$mix"
  label=$PEERS_LABEL
  check "$label: the three nodes are up on the agent" wait_up 3 15

  # ---- the limit: 600 requests within 3 s over three nodes
  src="127.0.$m.10"
  peers_limit "$label" "$src" "$PEERS_REQS" "$PEERS_RATE" "$PEERS_LIMIT" 15
  got=$(peers_wait_reads "$src" 2 "$PEERS_REQS" 5)
  is "$got" "$PEERS_REQS $PEERS_REQS $PEERS_REQS" "$label: every node reads the cluster's $PEERS_REQS (long_cluster)"

  # ---- the lag (reported)
  if command -v python3 >/dev/null 2>&1; then
    read -r p50 p99 mx late <<< "$(peers_lag "127.0.$m.20" 50 2 1 2 3)"
    diag "$label: lag from a hit on node 1 to nodes 2 and 3 (push_ms 50): p50 $p50 ms, p99 $p99 ms, max $mx ms$late"
  fi

  # ---- the bound at a higher rate (reported: docs/CLUSTER.md, "The
  # peers front's bound": admitted <= limit + 1 + rate x lag)
  peers_fast "$label" "127.0.$m.30" "${p99:-}"

  # ---- restarts: a node, then the agent on its state file
  restart_node1() {
    local k
    peers_stop_node 1
    for k in $(seq 1 50); do [ "$(peers_up "$HTTP_PORT")" -le 2 ] && break; sleep 0.1; done
    peers_start_node 1 "$PEERS_B1"
    wait_up 3 15 || diag "node 1 not up again on the agent within 15 s"
  }
  restart_the_agent() {
    stop_agent
    start_agent -c "$E2E_TMP/agent.json" -w 2
    check "$label: the nodes come back to the restarted agent" wait_up 3 15
    sleep 1
  }
  # survive N RESTART MORE WHAT SRC: N requests over the nodes (every node
  # reads N), RESTART, every node still reads N, then N + 10 after 10
  # more through node MORE.
  survive() {
    local n=$1 more=$3 what=$4 src="127.0.$m.$5" got
    peers_send "$src" "$n" 100 1 2 3
    got=$(peers_wait_reads "$src" 2 "$n" 5)
    is "$got" "$n $n $n" "$label: $n requests over the nodes, each reads $n"
    "$2"
    got=$(peers_wait_reads "$src" 2 "$n" 5)
    is "$got" "$n $n $n" "$label: $what: every node reads $n, nothing counted twice"
    sleep 0.5
    is "$(peers_reads "$src" 2)" "$n $n $n" "$label: ... still $n half a second later"
    peers_send "$src" 10 100 "$more"
    got=$(peers_wait_reads "$src" 2 $((n + 10)) 5)
    is "$got" "$((n + 10)) $((n + 10)) $((n + 10))" "$label: 10 more through node $more: every node reads $((n + 10))"
  }
  node_restart() { survive 90 restart_node1 1 "node 1 restarted (taught the sums)" $((30 + $1)); }
  agent_restart() { survive 60 restart_the_agent 2 "the agent restarted on its state file" $((40 + $1)); }
  # ---- string, ipv6 and integer keys; a counter and an array's element
  types() {
    local h=(-H "x-key: #k$m" -H "x-v6: 2001:db8::$m" -H "x-int: $((40 + m))") i k mt got=""
    for k in 1 2 3 4 5; do
      for i in 1 2 3; do eval "mt=\$MT_$i"; curl -s -o /dev/null "${h[@]}" "http://127.0.0.1:$mt/"; done
    done
    for k in $(seq 1 50); do
      got=""
      for i in 1 2 3; do eval "mt=\$MT_$i"; got="$got$(curl -s "${h[@]}" "http://127.0.0.1:$mt/read");"; done
      [ "$got" = "15 15 15;15 15 15;15 15 15;" ] && break
      sleep 0.1
    done
    is "$got" "15 15 15;15 15 15;15 15 15;" "$label: string (http_req_cnt), ipv6 and integer (gpc_rate(1)) keys: every node reads the cluster's 15"
  }
  in_one_window "$PEERS_LONG" 20 types || not_ok "$label: the key types inside one window"
  in_one_window "$PEERS_LONG" 40 node_restart || not_ok "$label: the node restart inside one window"
  in_one_window "$PEERS_LONG" 40 agent_restart || not_ok "$label: the agent restart inside one window"
  peers_stop_nodes
done

grep -q 'answered 50[0-9]' "$E2E_TMP/agent.log" && not_ok "no node was refused" || ok "no node was refused"
finish
