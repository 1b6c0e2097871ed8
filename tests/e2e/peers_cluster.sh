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

LIMIT=100
REQS=600
RATE=200            # requests per second over the three nodes
LONG=600            # the long tables' period (s)

e2e_init_base
command -v curl >/dev/null 2>&1 || die "curl is installed"
H26=${HAPROXY:-haproxy}
command -v "$H26" >/dev/null 2>&1 || die "haproxy is installed (HAPROXY='$H26')"
H34=$(haproxy3_binary)
if [ -n "$H34" ]; then
  MIXES=("$H26 $H26 $H34" "$H26 $H34 $H34")
else
  diag "no HAProxy 3.x (HAPROXY3 or ../shared/peers/haproxy-3.4/haproxy): 2.6 nodes only"
  MIXES=("$H26 $H26 $H26")
fi

PEERS_PORT=$(free_port)
HTTP_PORT=$(free_port)
E2E_PORT_AGENT=$(free_port)
for i in 1 2 3; do
  eval "PEER_$i=\$(free_port) FE_$i=\$(free_port) RD_$i=\$(free_port) MT_$i=\$(free_port)"
done
NODE_PIDS=("" "" "" "")
stop_nodes() {
  local i
  for i in 1 2 3; do
    [ -n "${NODE_PIDS[$i]}" ] && kill_wait "${NODE_PIDS[$i]}" 3
    NODE_PIDS[$i]=""
  done
}
E2E_CLEANUP_HOOK=stop_nodes

cat > "$E2E_TMP/agent.json" <<EOF
{ "log_level": "info", "state_file": "$E2E_TMP/state", "http_listen": "127.0.0.1:$HTTP_PORT",
  "peers": { "listen": "127.0.0.1:$PEERS_PORT", "name": "agg" },
  "namespaces": [
    { "name": "api", "window_sizes": [10],
      "haproxy_tables": { "from": "req_local", "into": "req_cluster" } },
    { "name": "long", "window_sizes": [$LONG],
      "haproxy_tables": { "from": "rl/long_local", "into": "rl/long_cluster" } },
    { "name": "str", "window_sizes": [$LONG],
      "haproxy_tables": { "from": "s_local", "into": "s_cluster", "data_type": "http_req_cnt" } },
    { "name": "v6", "window_sizes": [$LONG],
      "haproxy_tables": { "from": "v6_local", "into": "v6_cluster" } },
    { "name": "int", "window_sizes": [$LONG],
      "haproxy_tables": { "from": "i_local", "into": "i_cluster", "data_type": "gpc_rate(1)" } } ] }
EOF

# node_cfg I: node I's configuration (its peers section: itself and the
# agent, nothing else: nodes must not share their counting tables).
node_cfg() {
  local i=$1 peer fe rd mt
  eval "peer=\$PEER_$i fe=\$FE_$i rd=\$RD_$i mt=\$MT_$i"
  cat > "$E2E_TMP/node$i.cfg" <<EOF
global
    stats socket $E2E_TMP/node$i.sock level admin
defaults
    mode http
    timeout connect 1s
    timeout client 5s
    timeout server 5s
peers rl
    peer node$i 127.0.0.1:$peer
    peer agg 127.0.0.1:$PEERS_PORT
    table req_local type ip size 100k expire 10s store http_req_rate(10s)
    table req_cluster type ip size 100k expire 60s store http_req_rate(10s)
    table long_local type ip size 100k expire ${LONG}s store http_req_rate(${LONG}s)
    table long_cluster type ip size 100k expire $((2 * LONG))s store http_req_rate(${LONG}s)
    table s_local type string len 32 size 1k expire ${LONG}s store http_req_cnt
    table s_cluster type string len 32 size 1k expire ${LONG}s store http_req_cnt
    table v6_local type ipv6 size 1k expire ${LONG}s store http_req_rate(${LONG}s)
    table v6_cluster type ipv6 size 1k expire ${LONG}s store http_req_rate(${LONG}s)
    table i_local type integer size 1k expire ${LONG}s store gpc_rate(2,${LONG}s)
    table i_cluster type integer size 1k expire ${LONG}s store gpc_rate(2,${LONG}s)
frontend fe
    bind 127.0.0.1:$fe
    http-request track-sc0 src table rl/req_local
    http-request track-sc1 src table rl/long_local
    http-request deny deny_status 429 if { src,table_http_req_rate(rl/req_cluster) gt $LIMIT }
    http-request return status 200 content-type text/plain string ok
frontend rd
    bind 127.0.0.1:$rd
    http-request return status 200 content-type text/plain lf-string "%[src,table_http_req_rate(rl/req_cluster)] %[src,table_http_req_rate(rl/long_cluster)]\n"
frontend mt
    bind 127.0.0.1:$mt
    acl read path /read
    http-request track-sc0 req.hdr(x-key) table rl/s_local unless read
    http-request track-sc1 req.hdr_ip(x-v6) table rl/v6_local unless read
    http-request track-sc2 req.hdr_val(x-int) table rl/i_local unless read
    http-request sc-inc-gpc(1,2) unless read
    http-request return status 200 content-type text/plain lf-string "%[req.hdr(x-key),table_http_req_cnt(rl/s_cluster)] %[req.hdr_ip(x-v6),table_http_req_rate(rl/v6_cluster)] %[req.hdr_val(x-int),table_gpc_rate(1,rl/i_cluster)]\n" if read
    http-request return status 200 content-type text/plain string ok
EOF
}

# start_node I BIN: node I on HAProxy BIN (-L node<I>), waits for its read port.
start_node() {
  local i=$1 bin=$2 rd out n
  eval "rd=\$RD_$i"
  node_cfg "$i"
  out=$("$bin" -c -q -f "$E2E_TMP/node$i.cfg" 2>&1) || { diag "$out"; die "haproxy -c accepts node$i.cfg"; }
  echo "=== $(date +%T.%N) start $bin" >> "$E2E_TMP/node$i.log"
  "$bin" -db -L "node$i" -f "$E2E_TMP/node$i.cfg" >> "$E2E_TMP/node$i.log" 2>&1 &
  NODE_PIDS[$i]=$!
  for n in $(seq 1 100); do
    curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$rd/" && return 0
    alive "${NODE_PIDS[$i]}" || die "node$i ($bin) started"
    sleep 0.1
  done
  die "node$i answers within 10s"
}

# up_count: the agent's peers sessions (its connections gauge).
up_count() {
  curl -s --max-time 2 "http://127.0.0.1:$HTTP_PORT/metrics" |
    awk '/^spoa_ratelimit_connections\{front="peers"\}/ { n = $2 } END { print n + 0 }'
}

# wait_up N SECS: until N nodes are up on the agent.
wait_up() {
  local n
  for n in $(seq 1 $(($2 * 10))); do
    [ "$(up_count)" -ge "$1" ] && return 0
    sleep 0.1
  done
  return 1
}

# reads SRC COLUMN: what each node reads for SRC (1: req_cluster, 2: long_cluster).
reads() {
  local i rd out=""
  for i in 1 2 3; do
    eval "rd=\$RD_$i"
    out="$out $(curl -s --max-time 2 --interface "$1" "http://127.0.0.1:$rd/" | awk -v c="$2" '{ print $c }')"
  done
  echo "${out# }"
}

# wait_reads SRC COLUMN WANT SECS: until every node reads WANT.
wait_reads() {
  local n got=""
  for n in $(seq 1 $(($4 * 10))); do
    got=$(reads "$1" "$2")
    [ "$got" = "$3 $3 $3" ] && { echo "$got"; return 0; }
    sleep 0.1
  done
  echo "$got"
  return 1
}

# send SRC N NODES...: N requests from SRC spread over NODES, 100 a second.
send() {
  local src=$1 n=$2 args=() k i fe
  shift 2
  for k in $(seq 1 "$n"); do
    i=${*:$(( (k - 1) % $# + 1 )):1}
    eval "fe=\$FE_$i"
    args+=(-o /dev/null "http://127.0.0.1:$fe/")
  done
  curl -s --rate 100/s --interface "$src" -w '%{http_code}\n' "${args[@]}" > "$E2E_TMP/send.codes"
}

# lag SRC SAMPLES: ms from a request to node 1 until nodes 2 and 3 read it
# (long_cluster: no window ends meanwhile), SAMPLES times; prints "p50 p99
# max" and the first hit not read within 1 s.
lag() {
  python3 - "$1" "$2" "$FE_1" "$RD_2" "$RD_3" <<'PY'
import http.client, sys, time
src, n, fe, rds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), [int(p) for p in sys.argv[4:]]
def conn(p): return http.client.HTTPConnection("127.0.0.1", p, timeout=2, source_address=(src, 0))
hit, reads = conn(fe), [conn(p) for p in rds]
def get(c):
    c.request("GET", "/"); return c.getresponse().read().decode()
lags, late = [], ""
for k in range(1, n + 1):
    t0 = time.monotonic()
    get(hit)
    left = set(range(len(reads)))
    seen = {}
    while left and time.monotonic() - t0 < 1:
        for i in list(left):
            seen[i] = int(get(reads[i]).split()[1])
            if seen[i] >= k:
                left.discard(i)
    lags.append((time.monotonic() - t0) * 1000)
    if left and not late:
        late = " (hit %d: read %s after 1 s)" % (k, seen)
    time.sleep(0.02)
lags.sort()
print("%.1f %.1f %.1f%s" % (lags[len(lags) // 2], lags[min(len(lags) - 1, int(len(lags) * 0.99))], lags[-1], late))
PY
}

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

start_agent -c "$E2E_TMP/agent.json" -w 2
m=0
for mix in "${MIXES[@]}"; do
  m=$((m + 1))
  read -r b1 b2 b3 <<< "$mix"
  label=""
  for b in $b1 $b2 $b3; do
    label="$label${label:++}$("$b" -v | sed -n '1s/^HAProxy version \([0-9]*\.[0-9]*\).*/\1/p')"
  done
  diag "---- nodes on HAProxy $label"
  wait_window_margin "$LONG" 30
  start_node 1 "$b1"; start_node 2 "$b2"; start_node 3 "$b3"
  check "$label: the three nodes are up on the agent" wait_up 3 15

  # ---- the limit: 600 requests within 3 s over three nodes
  src="127.0.$m.10"
  args=()
  for k in $(seq 1 $REQS); do
    i=$(( (k - 1) % 3 + 1 )); eval "fe=\$FE_$i"
    args+=(-o /dev/null "http://127.0.0.1:$fe/")
  done
  t0=$(date +%s%N)
  curl -s --rate "$RATE/s" --interface "$src" -w '%{http_code}\n' "${args[@]}" > "$E2E_TMP/limit.codes"
  t1=$(date +%s%N)
  admitted=$(count_codes "$E2E_TMP/limit.codes" 200)
  denied=$(count_codes "$E2E_TMP/limit.codes" 429)
  diag "$label: $REQS requests in $(( (t1 - t0) / 1000000 )) ms: $admitted admitted, $denied denied"
  if int_between "$admitted" "$LIMIT" $((LIMIT + 15)); then
    ok "$label: $LIMIT to $((LIMIT + 15)) of $REQS admitted over three nodes ($admitted)"
  else
    not_ok "$label: $LIMIT to $((LIMIT + 15)) of $REQS admitted over three nodes ($admitted)"
  fi
  is "$((admitted + denied))" "$REQS" "$label: every request answered 200 or 429"
  got=$(wait_reads "$src" 2 "$REQS" 5)
  is "$got" "$REQS $REQS $REQS" "$label: every node reads the cluster's $REQS (long_cluster)"

  # ---- the lag (reported)
  if command -v python3 >/dev/null 2>&1; then
    read -r p50 p99 mx late <<< "$(lag "127.0.$m.20" 50)"
    diag "$label: lag from a hit on node 1 to nodes 2 and 3 (push_ms 50): p50 $p50 ms, p99 $p99 ms, max $mx ms$late"
  fi

  # ---- restarts: a node, then the agent on its state file
  restart_node1() {
    local k
    kill_wait "${NODE_PIDS[1]}" 3
    for k in $(seq 1 50); do [ "$(up_count)" -le 2 ] && break; sleep 0.1; done
    start_node 1 "$b1"
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
    send "$src" "$n" 1 2 3
    got=$(wait_reads "$src" 2 "$n" 5)
    is "$got" "$n $n $n" "$label: $n requests over the nodes, each reads $n"
    "$2"
    got=$(wait_reads "$src" 2 "$n" 5)
    is "$got" "$n $n $n" "$label: $what: every node reads $n, nothing counted twice"
    sleep 0.5
    is "$(reads "$src" 2)" "$n $n $n" "$label: ... still $n half a second later"
    send "$src" 10 "$more"
    got=$(wait_reads "$src" 2 $((n + 10)) 5)
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
  in_one_window "$LONG" 20 types || not_ok "$label: the key types inside one window"
  in_one_window "$LONG" 40 node_restart || not_ok "$label: the node restart inside one window"
  in_one_window "$LONG" 40 agent_restart || not_ok "$label: the agent restart inside one window"
  stop_nodes
done

grep -q 'answered 50[0-9]' "$E2E_TMP/agent.log" && not_ok "no node was refused" || ok "no node was refused"
finish
