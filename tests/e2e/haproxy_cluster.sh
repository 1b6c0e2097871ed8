#!/usr/bin/env bash
# haproxy_cluster.sh - two HAProxy instances, each in front of its own agent
# node (2 workers), the two nodes sharing one Redis (sync_rate 0.2 s).
# One key, limit N per 60 s sliding window, requests alternating between
# the two HAProxy instances as fast as curl goes: sequential (one curl,
# keep-alive), paced, then parallel (curl --parallel); in two namespaces:
#   - "default", admission "auto" (exact: the store's grants far from the
#     limit, the store at it): N - 5 % <= admitted <= N + 1 % in every
#     pattern (below N only by a grant a node got and did not use before
#     the burst ended: docs/CLUSTER.md, "The bound"; as test_cluster_admission);
#   - "local" (admission "local", each node decides from its view): the
#     cluster admits at least N (the limit is not undercounted) and at
#     most N + (nodes - 1) x ceil(r x sync_rate) + slack, where r is the
#     measured request rate of one node: a node learns the other's hits
#     one sync period late, so it may admit what the other admitted
#     meanwhile. The measured over-admission is printed;
#   - afterwards Redis holds every counted request (200s and 429s: the
#     namespace counts denied hits) once the nodes have synced;
#   - no SPOE errors (they would pass uncounted), no sanitizer report in
#     either agent's log, both agents exit 0 on SIGTERM.
# Usage: AGENT=/path/to/spoa-ratelimit bash tests/e2e/haproxy_cluster.sh
. "$(dirname "$0")/lib.sh"

N=${CLUSTER_LIMIT:-100}
SYNC=0.2
NODES=2
SLACK=5
REQS_SEQ=1200
REQS_PAR=1200
REQS_PACED=500
PACED_RATE=200        # requests per second over both nodes
PAR=8

e2e_init
command -v redis-server >/dev/null 2>&1 || die "redis-server is installed"
command -v redis-cli >/dev/null 2>&1 || die "redis-cli is installed"

REDIS_PORT=$(free_port)
PORT_AGENT_B=$(free_port)
FE_A=$(free_port); FE_B=$(free_port)
STATS_A=$(free_port); STATS_B=$(free_port)
REDIS_PID=""; AGENT_B_PID=""; HAPROXY_B_PID=""
diag "redis $REDIS_PORT; node a: agent $E2E_PORT_AGENT haproxy $FE_A; node b: agent $PORT_AGENT_B haproxy $FE_B"

# ---------------------------------------------------------------- setup ---

start_redis "$REDIS_PORT" "$E2E_TMP/redis"

cat > "$E2E_TMP/agent.json" <<EOF
{ "log_level": "info",
  "namespaces": [ { "name": "local", "window_sizes": [60], "sync_rate": $SYNC,
    "strategy": "redis", "admission": "local",
    "strategy_opts": { "host": "127.0.0.1", "port": $REDIS_PORT, "timeout_ms": 100 } },
    { "name": "default", "window_sizes": [60], "sync_rate": $SYNC,
    "strategy": "redis",
    "strategy_opts": { "host": "127.0.0.1", "port": $REDIS_PORT, "timeout_ms": 1000 } } ] }
EOF

# Node a: lib.sh's agent (log agent.log, stopped by finish).
start_agent -c "$E2E_TMP/agent.json" -w 2

# Node b: the same, on its own port (log agent-b.log).
"$AGENT" -l "127.0.0.1:$PORT_AGENT_B" -c "$E2E_TMP/agent.json" -w 2 \
  >> "$E2E_TMP/agent-b.log" 2>&1 &
AGENT_B_PID=$!
for i in $(seq 1 100); do
  port_listening "$PORT_AGENT_B" && break
  alive "$AGENT_B_PID" || die "agent b started"
  sleep 0.1
done
port_listening "$PORT_AGENT_B" || die "agent b listens within 10s"

# start_cluster_haproxy NAME FE_PORT AGENT_PORT STATS_PORT: starts one
# instance in the background (a job of this shell); its pid in CL_PID.
start_cluster_haproxy() {
  local cfg="$E2E_LIB_DIR/conf/haproxy-cluster.cfg" out
  if ! out=$(CL_NAME=$1 CL_PORT_FE=$2 CL_PORT_AGENT=$3 CL_PORT_STATS=$4 \
             "$HAPROXY" -c -q -f "$cfg" 2>&1); then
    diag "$out"
    die "haproxy -c accepts haproxy-cluster.cfg"
  fi
  CL_NAME=$1 CL_PORT_FE=$2 CL_PORT_AGENT=$3 CL_PORT_STATS=$4 \
    "$HAPROXY" -db -f "$cfg" >> "$E2E_TMP/haproxy-$1.log" 2>&1 &
  CL_PID=$!
}

start_cluster_haproxy a "$FE_A" "$E2E_PORT_AGENT" "$STATS_A"
HAPROXY_PID=$CL_PID
start_cluster_haproxy b "$FE_B" "$PORT_AGENT_B" "$STATS_B"
HAPROXY_B_PID=$CL_PID
E2E_PORT_STATS=$STATS_A
wait_server_state UP 10 || die "agent a UP in haproxy a"

# --------------------------------------------------------------- helpers ---

# wait_server_state reads $E2E_PORT_STATS (lib.sh).
# shellcheck disable=SC2034
E2E_PORT_STATS=$STATS_B
wait_server_state UP 10 || die "agent b UP in haproxy b"

# urls COUNT: a curl config alternating between the two frontends.
urls() {
  local i
  for i in $(seq 1 "$1"); do
    if [ $((i % 2)) -eq 1 ]; then echo "url = \"http://127.0.0.1:$FE_A/\""
    else echo "url = \"http://127.0.0.1:$FE_B/\""; fi
  done
}

# run KEY COUNT [curl options...]: COUNT requests; one line per answer,
# "<url> <status> <x-rl-err>", into $E2E_TMP/out; sets ELAPSED_MS.
run() {
  local key=$1 count=$2 t0 t1
  shift 2
  urls "$count" > "$E2E_TMP/urls"
  t0=$(date +%s%N)
  curl -s --no-progress-meter -o /dev/null --max-time 60 "$@" -H "X-Api-Key: $key" -H "X-Limit: $N" \
    -w '%{url} %{http_code} %header{x-rl-err}\n' -K "$E2E_TMP/urls" > "$E2E_TMP/out"
  t1=$(date +%s%N)
  ELAPSED_MS=$(((t1 - t0) / 1000000))
}

# run_one_window PREFIX COUNT [curl options...]: run on a key of its own,
# PREFIX-<run id>-<try> (set in K), within one 60 s window (lib.sh,
# in_one_window): across a window's end the sliding count is weighted down
# and more are admitted than the bounds below allow.
run_one_window() {
  RUN_PREFIX=$1
  shift
  RUN_ARGS=("$@")
  in_one_window 60 15 run_try || diag "every run crossed a window's end"
}
run_try() { K="$RUN_PREFIX-$E2E_RUN_ID-$1"; run "$K" "${RUN_ARGS[@]}"; }

# redis_total KEY [NAMESPACE]: the key's count summed over its 60 s hashes
# in Redis.
redis_total() {
  local h sum=0 v ns=${2:-default}
  for h in $(redis-cli -p "$REDIS_PORT" --scan --pattern "rl:{$ns:*}:60:*"); do
    v=$(redis-cli -p "$REDIS_PORT" hget "$h" "$1")
    [ -n "$v" ] && sum=$(awk -v a="$sum" -v b="$v" 'BEGIN { printf "%.0f", a + b }')
  done
  echo "$sum"
}

# check_variant NAME KEY: the assertions for namespace "local".
check_variant() {
  local name=$1 key=$2 total admitted denied errs other per_node r bound over want got i
  total=$(wc -l < "$E2E_TMP/out")
  admitted=$(grep -c -E ' 200 $' "$E2E_TMP/out")
  denied=$(grep -c -E ' 429 $' "$E2E_TMP/out")
  errs=$(grep -c -E ' [0-9]+ [0-9]+$' "$E2E_TMP/out")
  other=$((total - admitted - denied - errs))
  per_node=$(((total + 1) / 2))
  # r: requests per second of one node over the run.
  r=$(awk -v n="$per_node" -v ms="$ELAPSED_MS" 'BEGIN { printf "%.1f", n * 1000 / (ms > 0 ? ms : 1) }')
  bound=$(awk -v n="$N" -v k="$NODES" -v r="$r" -v s="$SYNC" -v sl="$SLACK" '
    function ceil(x) { return x == int(x) ? x : int(x) + 1 }
    BEGIN { print n + (k - 1) * ceil(r * s) + sl }')
  over=$((admitted - N))
  diag "$name: N=$N, $total requests in ${ELAPSED_MS} ms, r=$r req/s per node, sync_rate $SYNC s:" \
       "admitted $admitted (over-admission $over = $(awk -v o="$over" -v r="$r" -v s="$SYNC" \
       'BEGIN { printf "%.2f", o / (r * s) }') x r x sync_rate), denied $denied," \
       "SPOE errors $errs, other $other; bound $bound"
  is "$errs" "0" "$name: no SPOE errors (they would pass uncounted)"
  is "$other" "0" "$name: every answer is 200 or 429"
  check "$name: at least N=$N admitted (got $admitted)" int_ge "$admitted" "$N"
  check "$name: admitted $admitted <= N + (nodes-1) x ceil(r x sync_rate) + $SLACK = $bound" \
    int_le "$admitted" "$bound"
  # Each node counts its own hits at once: alone it never admits more
  # than N, whatever the sync.
  check "$name: admitted $admitted <= nodes x N = $((NODES * N))" \
    int_le "$admitted" "$((NODES * N))"
  # Every request the agents answered was counted; after two sync periods
  # of quiet Redis holds them all.
  want=$((admitted + denied))
  got=""
  for i in $(seq 1 30); do
    sleep 0.2
    got=$(redis_total "$key" local)
    [ "$got" = "$want" ] && break
  done
  is "$got" "$want" "$name: Redis holds every counted request ($want)"
}

# check_exact NAME KEY: the assertions for namespace "default" (admission
# "auto", here exact): the limit, within 1 %, in every pattern.
check_exact() {
  local name=$1 key=$2 total admitted denied errs other want got i
  total=$(wc -l < "$E2E_TMP/out")
  admitted=$(grep -c -E ' 200 $' "$E2E_TMP/out")
  denied=$(grep -c -E ' 429 $' "$E2E_TMP/out")
  errs=$(grep -c -E ' [0-9]+ [0-9]+$' "$E2E_TMP/out")
  other=$((total - admitted - denied - errs))
  diag "$name, admission exact: N=$N, $total requests in ${ELAPSED_MS} ms: admitted $admitted," \
       "denied $denied, SPOE errors $errs, other $other"
  is "$errs" "0" "$name, exact: no SPOE errors"
  is "$other" "0" "$name, exact: every answer is 200 or 429"
  check "$name, exact: N - 5 % <= admitted $admitted <= N + 1 % (N=$N)" \
    int_between "$admitted" "$((N - N * 5 / 100))" "$((N + N / 100))"
  want=$((admitted + denied))
  got=""
  for i in $(seq 1 30); do
    sleep 0.2
    got=$(redis_total "$key")
    [ "$got" = "$want" ] && break
  done
  is "$got" "$want" "$name, exact: Redis holds every counted request ($want)"
}

# --------------------------------------------------------------- tests ---

# Namespace "default" (admission "auto": exact): the limit within 1 % in
# every pattern (docs/CLUSTER.md, "Exact at the limit").
run_one_window exact-seq "$REQS_SEQ"
check_exact "sequential" "$K"

run_one_window exact-paced "$REQS_PACED" --rate "$PACED_RATE/s"
check_exact "sequential at $PACED_RATE/s" "$K"

run_one_window exact-par "$REQS_PAR" -Z --parallel-max "$PAR" --parallel-immediate
check_exact "parallel x$PAR" "$K"

# The same three patterns on namespace "local" (admission "local"). As
# fast as one curl goes (keep-alive), a node answers more than N in one
# sync period, so each node admits its own N before hearing of the other
# and the bound is loose (close to nodes x N).
run_one_window cluster-seq "$REQS_SEQ" -H "X-Namespace: local"
check_variant "sequential" "$K"

# Paced so that reaching N takes several sync periods: the bound is tight.
run_one_window cluster-paced "$REQS_PACED" --rate "$PACED_RATE/s" -H "X-Namespace: local"
check_variant "sequential at $PACED_RATE/s" "$K"

run_one_window cluster-par "$REQS_PAR" -Z --parallel-max "$PAR" --parallel-immediate -H "X-Namespace: local"
check_variant "parallel x$PAR" "$K"

# --------------------------------------------------------------- finish ---

kill_wait "$HAPROXY_B_PID" 3; HAPROXY_B_PID=""
kill_wait "$HAPROXY_PID" 3; HAPROXY_PID=""
kill_wait "$AGENT_B_PID" 10
is "$?" "0" "agent b exits with status 0 on SIGTERM"
AGENT_B_PID=""
rep=$(grep -E 'AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:|SUMMARY:|respawning' \
  "$E2E_TMP/agent-b.log" 2>/dev/null | head -n 5)
if [ -z "$rep" ]; then ok "agent b log: no sanitizer report"
else not_ok "agent b log: no sanitizer report"; printf '%s\n' "$rep" | sed 's/^/#   /'; fi
if grep -q respawning "$E2E_TMP/agent.log"; then not_ok "agent a: no worker died"; fi
stop_agent
is "$?" "0" "agent a exits with status 0 on SIGTERM"
kill_wait "$REDIS_PID" 3; REDIS_PID=""
finish
