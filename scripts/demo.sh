#!/usr/bin/env bash
# scripts/demo.sh - the multi-node demo, natively on loopback (make demo).
#
#   scripts/demo.sh [AGENT_BINARY]        (default: $AGENT or ./spoa-ratelimit)
#
# Starts, on free 127.0.0.1 ports and from Debian packages:
#   redis-server                      the shared store
#   two spoa-ratelimit agents         haproxy-examples/cluster-redis.json,
#                                     pointed at that Redis (sync every 0.2 s)
#   two HAProxy 2.6 nodes             haproxy-examples/haproxy.cfg, each with
#                                     its own agent and its own local responder
# then walks through the cluster-wide per-API-key limit (10 per minute) with
# curl, stops Redis to show fail-open local counting, starts it again to show
# the pending counts reach it, and stops everything it started (by pid).
# Same topology as haproxy-examples/docker-compose.yml; see
# haproxy-examples/CLUSTER-DEMO.md. Takes 15-45 s (it may wait for the
# start of a minute so that the 60 s windows do not roll over mid-demo).
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
EX=$ROOT/haproxy-examples

AGENT=${1:-${AGENT:-./spoa-ratelimit}}
LIMIT_MIN=10          # per API key per minute (RL_LIMIT_KEY_MIN)
GAP=0.3               # seconds between requests: > sync_rate (0.2 s)

say() { printf '%s\n' "$*"; }
hdr() { printf '\n== %s\n' "$*"; }
fail() { printf 'demo: %s\n' "$*" >&2; exit 1; }

# ------------------------------------------------------------- checks ---
missing=""
for c in haproxy redis-server redis-cli curl ss; do
  command -v "$c" >/dev/null 2>&1 || missing="$missing $c"
done
if [ -n "$missing" ]; then
  fail "missing commands:$missing
  as root: apt-get install -y haproxy redis-server curl iproute2"
fi
[ -x "$AGENT" ] || fail "no agent binary at '$AGENT' (run make first)"

# --------------------------------------------------- processes, cleanup ---
TMP=$(mktemp -d /tmp/spoa-demo.XXXXXX)
PIDS=()          # everything started here, in start order
REDIS_PID=""

stop_pid() {     # stop_pid PID: TERM, wait up to 5 s, then KILL
  local pid=$1 i
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null
  for i in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  return 0
}

cleanup() {
  local i
  trap - EXIT INT TERM
  # Reverse order: HAProxy first, then the agents (they flush to Redis),
  # Redis last.
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do stop_pid "${PIDS[i]}"; done
  if [ -n "${KEEP_LOGS:-}" ]; then
    say "logs kept in $TMP"
  else
    rm -rf "$TMP"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A free loopback TCP port: random in 20000-59999, nothing listening or
# connected on it, and not handed out before by this script.
USED=" "
free_port() {
  local p n
  for n in $(seq 1 200); do
    p=$((20000 + RANDOM % 40000))
    case $USED in *" $p "*) continue ;; esac
    if [ -z "$(ss -Htan "( sport = :$p or dport = :$p )" 2>/dev/null)" ]; then
      USED="$USED$p "
      echo "$p"
      return 0
    fi
  done
  fail "no free port found"
}
listening() { [ -n "$(ss -Htln "sport = :$1" 2>/dev/null)" ]; }

# wait_listen PORT PID WHAT: up to 5 s.
wait_listen() {
  local i
  for i in $(seq 1 50); do
    listening "$1" && return 0
    kill -0 "$2" 2>/dev/null || break
    sleep 0.1
  done
  fail "$3 did not start; its log:
$(tail -20 "$TMP/$3.log" 2>/dev/null)"
}

P_REDIS=$(free_port)
P_AGENT_A=$(free_port) P_AGENT_B=$(free_port)
P_A=$(free_port) P_A_STRICT=$(free_port) P_A_APP=$(free_port) P_A_STATS=$(free_port)
P_B=$(free_port) P_B_STRICT=$(free_port) P_B_APP=$(free_port) P_B_STATS=$(free_port)

start_redis() {
  redis-server --bind 127.0.0.1 --port "$P_REDIS" --save '' --appendonly no \
    --daemonize no --logfile '' >>"$TMP/redis.log" 2>&1 &
  REDIS_PID=$!
  PIDS+=("$REDIS_PID")
  wait_listen "$P_REDIS" "$REDIS_PID" redis
}

# The cluster configuration, with this Redis instead of the compose one.
sed -e 's/"host": *"[^"]*"/"host": "127.0.0.1"/' \
    -e "s/\"port\": *[0-9]*/\"port\": $P_REDIS/" \
    "$EX/cluster-redis.json" >"$TMP/agent.json"
if ! out=$("$AGENT" -t -c "$TMP/agent.json" -l "127.0.0.1:$P_AGENT_A" 2>&1); then
  fail "agent configuration rejected: $out"
fi

start_agent() {  # start_agent NAME PORT
  "$AGENT" -c "$TMP/agent.json" -l "127.0.0.1:$2" >>"$TMP/agent-$1.log" 2>&1 &
  PIDS+=("$!")
  wait_listen "$2" "$!" "agent-$1"
}

start_haproxy() {  # start_haproxy NAME PORT STRICT APP STATS AGENT_PORT
  env RL_BIND="127.0.0.1:$2" RL_BIND_STRICT="127.0.0.1:$3" RL_APP="127.0.0.1:$4" \
      RL_STATS="127.0.0.1:$5" RL_AGENT="127.0.0.1:$6" \
      RL_LIMIT_IP=1000 RL_LIMIT_KEY_SEC=100 RL_LIMIT_KEY_MIN=$LIMIT_MIN \
      haproxy -db -f "$EX/haproxy.cfg" >>"$TMP/haproxy-$1.log" 2>&1 &
  PIDS+=("$!")
  wait_listen "$2" "$!" "haproxy-$1"
}

# ------------------------------------------------------------ requests ---
# req NODE KEY: one request; prints "<code> <per-key-min remaining or ->"
# and the time in ms.
req() {
  local port out code hdrs r ms
  case $1 in A) port=$P_A ;; B) port=$P_B ;; A!) port=$P_A_STRICT ;; esac
  out=$(curl -s -o /dev/null -D - --max-time 3 -H "X-Api-Key: $2" \
        -w 'CODE %{http_code} %{time_total}\n' "http://127.0.0.1:$port/" 2>/dev/null)
  code=$(printf '%s\n' "$out" | sed -n 's/^CODE \([0-9]*\) .*/\1/p')
  ms=$(printf '%s\n' "$out" | sed -n 's/^CODE [0-9]* \([0-9.]*\).*/\1/p' | awk '{printf "%d", $1 * 1000 + 0.5}')
  hdrs=$(printf '%s\n' "$out" | tr -d '\r' | grep -i '^ratelimit:')
  r=$(printf '%s\n' "$hdrs" | sed -n 's/.*"per-key-min";r=\([0-9]*\);t=\([0-9]*\).*/"per-key-min";r=\1;t=\2/p' | head -1)
  printf '%s %s %s\n' "${code:-000}" "${r:--}" "${ms:-?}"
}

PASSED=0 DENIED=0 OTHER=0 FIRST_R=""
# burst NODE KEY COUNT: COUNT requests GAP s apart, one line each.
# FIRST_R = the per-key-min remaining of the first one.
burst() {
  local i code r ms res
  for i in $(seq 1 "$3"); do
    read -r code r ms < <(req "$1" "$2")
    [ "$i" = 1 ] && FIRST_R=$(printf '%s' "$r" | sed -n 's/.*;r=\([0-9]*\);.*/\1/p')
    case $code in
      200) res="allowed"; PASSED=$((PASSED + 1)) ;;
      429) res="DENIED "; DENIED=$((DENIED + 1)) ;;
      *) res="?      "; OTHER=$((OTHER + 1)) ;;
    esac
    printf '  node %-2s key=%-6s #%-2d -> %s %s  RateLimit: %s  (%s ms)\n' \
      "${1%!}" "$2" "$i" "$code" "$res" "$r" "$ms"
    sleep "$GAP"
  done
}
reset_count() { PASSED=0 DENIED=0 OTHER=0; }

# The HGET of FIELD in every 60 s-window hash of Redis (sum over buckets).
redis_total() {
  local k v sum=0
  while read -r k; do
    [ -n "$k" ] || continue
    v=$(redis-cli -p "$P_REDIS" --raw HGET "$k" "$1" 2>/dev/null)
    case $v in ''|*[!0-9.]*) ;; *) sum=$(awk -v a="$sum" -v b="$v" 'BEGIN { print a + b }') ;; esac
  done < <(redis-cli -p "$P_REDIS" --raw --scan --pattern 'rl:{default:*}:60:*' 2>/dev/null)
  echo "$sum"
}

# ---------------------------------------------------------------- start ---
T0=$(date +%s)
start_redis
start_agent a "$P_AGENT_A"
start_agent b "$P_AGENT_B"
start_haproxy a "$P_A" "$P_A_STRICT" "$P_A_APP" "$P_A_STATS" "$P_AGENT_A"
start_haproxy b "$P_B" "$P_B_STRICT" "$P_B_APP" "$P_B_STATS" "$P_AGENT_B"

cat <<EOF
spoa-ratelimit multi-node demo (agent: $AGENT)

  node A: HAProxy 127.0.0.1:$P_A  ->  agent A 127.0.0.1:$P_AGENT_A  \\
                                                              >-- Redis 127.0.0.1:$P_REDIS
  node B: HAProxy 127.0.0.1:$P_B  ->  agent B 127.0.0.1:$P_AGENT_B  /

  HAProxy: haproxy-examples/haproxy.cfg with RL_LIMIT_KEY_MIN=$LIMIT_MIN
           (X-Api-Key: $LIMIT_MIN requests per sliding minute; per second 100, per IP 1000)
  agents:  haproxy-examples/cluster-redis.json: namespace "default" synced
           through Redis every 0.2 s (each agent counts in its own memory,
           pushes its diffs and reads back the cluster totals)
EOF

# Warm-up (no API key): both nodes answer through their agents.
for n in A B; do
  ready=""
  for i in $(seq 1 50); do
    port=$P_A; [ "$n" = B ] && port=$P_B
    if curl -s -o /dev/null -D - --max-time 2 "http://127.0.0.1:$port/" 2>/dev/null | grep -qi '^ratelimit:'; then
      ready=1; break
    fi
    sleep 0.1
  done
  [ -n "$ready" ] || fail "node $n does not answer with RateLimit headers; logs in $TMP"
done

# The per-minute windows start at multiples of 60 s (UTC). The walkthrough
# needs ~20 s inside one window; wait for the next one if less is left.
left=$((60 - $(date +%s) % 60))
if [ "$left" -lt 22 ]; then
  say ""
  say "(waiting ${left}s for the next minute window, so none rolls over mid-demo)"
  sleep "$left"
fi

# ----------------------------------------------------------- step 1, 2 ---
hdr "1. key 'alice': 8 requests to node A"
reset_count
burst A alice 8
a_pass=$PASSED

hdr "2. the same key 'alice': 8 requests to node B"
reset_count
burst B alice 8
b_pass=$PASSED
alice_total=$((a_pass + b_pass))
say ""
say "  -> alice: $a_pass allowed on node A + $b_pass allowed on node B = $alice_total of 16."
if [ "$alice_total" -le $((LIMIT_MIN + 1)) ]; then
  say "     The limit of $LIMIT_MIN per minute held for the cluster, not per node: node B"
  say "     knew about node A's hits through Redis (16 would pass without the sync)."
  if [ "$FIRST_R" = $((LIMIT_MIN - 1)) ]; then
    say "     Node B's first alice request still showed r=$FIRST_R: a node learns a key's"
    say "     cluster count at its next sync (<= 0.2 s) after it first sees the key, so"
    say "     what a new node admits in that first period can exceed the limit."
  fi
else
  say "     More than $LIMIT_MIN passed: the nodes did not see each other's counts (is the sync working?)."
fi

# -------------------------------------------------------------- step 3 ---
hdr "3. another key 'bob' on node B (alice is still blocked there)"
reset_count
burst B bob 3
burst B alice 1
say ""
say "  -> bob has his own counter: remaining $((LIMIT_MIN - 1)), $((LIMIT_MIN - 2)), $((LIMIT_MIN - 3)); alice still gets 429."
say "     Redis holds the hits (denied ones included) of the current 60 s window:"
say "     alice = $(redis_total key:alice), bob = $(redis_total key:bob)."

# -------------------------------------------------------------- step 4 ---
hdr "4. Redis stops: key 'carol', 12 requests to node A and 12 to node B"
stop_pid "$REDIS_PID"
say "  (redis-server pid $REDIS_PID stopped)"
sleep 0.5
reset_count
GAP=0.1               # no sync to wait for now
burst A carol 12
ca=$PASSED
burst B carol 12
cb=$((PASSED - ca))
GAP=0.3
n_other=""
[ "$OTHER" -gt 0 ] && n_other=" ($OTHER were neither 200 nor 429)"
code=$(req 'A!' dave | cut -d' ' -f1)
say ""
say "  -> every request was answered quickly$n_other: the agents keep deciding from"
say "     their own counters (fail-open for the store). Each node now enforces the"
say "     limit alone: carol got $ca on node A + $cb on node B = $((ca + cb)) allowed, not $LIMIT_MIN."
say "     (The fail-closed listener is unaffected too - the agent still answers: $code.)"
for n in a b; do
  line=$(grep -m1 'store:.*counting locally' "$TMP/agent-$n.log" | sed 's/^[^ ]* //')
  [ -n "$line" ] && say "     agent $n log: $line"
done

# -------------------------------------------------------------- step 5 ---
hdr "5. Redis starts again (empty, no persistence)"
start_redis
# Up to ~4 s: the agents reconnect with a backoff of at most 2 s.
back=0
for i in $(seq 1 50); do
  back=0
  for n in a b; do grep -q 'store is back' "$TMP/agent-$n.log" && back=$((back + 1)); done
  [ "$back" -eq 2 ] && break
  sleep 0.1
done
sleep 0.5
for n in a b; do
  line=$(grep -m1 'store is back' "$TMP/agent-$n.log" | sed 's/^[^ ]* //')
  [ -n "$line" ] && say "  agent $n log: $line"
done
say "  Redis now holds carol = $(redis_total key:carol) (the hits counted while it was down were kept and pushed)."
reset_count
burst A carol 1
burst B carol 1
say ""
say "  -> both nodes see the cluster total for carol again and deny."

hdr "summary"
cat <<EOF
  - One API key, two HAProxy nodes: $alice_total of 16 requests passed with a limit of $LIMIT_MIN/min;
    the agents share their counts through Redis every 0.2 s.
  - Keys are independent (bob was not affected by alice).
  - With Redis down nothing failed: each agent counted locally (the limit
    then holds per node), and the counts reached Redis once it was back.
  Finished in $(( $(date +%s) - T0 )) s; stopping what the demo started.
EOF
