#!/usr/bin/env bash
# docker_demo.sh - the Docker demo (haproxy-examples/docker-compose.yml,
# CLUSTER-DEMO.md) for real, on a Docker engine with no registry:
#
#   - installs docker.io, docker-compose and debootstrap when missing (as
#     root, scripts/deps.sh docker); uses the engine DOCKER_HOST (or the
#     default socket) reaches, else starts its own dockerd (data under
#     build/docker, its socket in a temp dir) and stops it by pid;
#   - the base image spoa-ratelimit/debian:12 (scripts/docker-base.sh,
#     debootstrap) when it does not exist yet; it is kept between runs;
#   - builds the demo's images (docker-compose build, --profile postgres)
#     and checks that the agent image has no compiler and stays small;
#   - "docker-compose up -d" under its own project name, host ports picked
#     free on 127.0.0.1 (DEMO_PORT_* / DEMO_STATS_*), waits until every
#     HAProxy node sees its agent UP;
#   - one API key through both HAProxy nodes of the Redis cluster, then of
#     the PostgreSQL cluster: the demo's limit (10 per minute per key) holds
#     for the cluster: LIMIT..LIMIT+SLACK admitted, the rest 429, both
#     nodes deny at the end; the store holds the counters;
#   - Redis stopped: both nodes still answer, each from its own count
#     (the first LIMIT requests of a new key are 200 on each node), and
#     the agents log that they count locally;
#   - agent-a stopped: node A's fail-open listener lets every request
#     through (200), as haproxy.cfg says;
#   - "docker-compose down -v": no container or network of the project is
#     left; the images stay (layer cache for the next run).
#
# Prints "ok # skip <reason>" and exits 0 when Docker cannot be installed
# or started here (not root, no cgroups, ...), when the base image is
# missing and cannot be built (not root, Debian mirror unreachable), or
# when SPOA_SKIP_DOCKER is set. Runs are serialized by a lock file (the
# demo's network has a fixed subnet), $SPOA_DOCKER_LOCK.
. "$(dirname "$0")/lib.sh"

E2E_TIMEOUT=${DOCKER_DEMO_TIMEOUT:-1200}
LIMIT=10       # RL_LIMIT_KEY_MIN in docker-compose.yml
# A request whose decision misses HAProxy's "timeout processing" (100 ms,
# spoe-ratelimit.conf) passes uncounted on the fail-open listener: allow
# one per node when the store is down. Up, the cluster admits exactly
# LIMIT (docs/CLUSTER.md) but for the answers it says it did not decide
# (X-RateLimit-Degraded), at most MAX_DEGRADED of 2 x REQS.
SLACK=1
MAX_DEGRADED=5
REQS=15        # per node and per cluster: 30 requests for a limit of 10
AGENT_MAX_MB=120
COMPOSE_FILE=$E2E_ROOT/haproxy-examples/docker-compose.yml
BASE_IMAGE=spoa-ratelimit/debian:12
DOCKER_DIR=${SPOA_DOCKER_DIR:-$E2E_ROOT/build/docker}
LOCK=${SPOA_DOCKER_LOCK:-/tmp/spoa-ratelimit-docker.lock}
PROJECT=spoa-demo-$$
DOCKERD_PID="" DOCKERD_RUN="" UP=""
T0=$(date +%s)

skip_all() { printf 'ok # skip %s\n' "$*"; exit 0; }
since() { echo $(($(date +%s) - $1)); }
is_root() { [ "$(id -u)" -eq 0 ]; }
COMPOSE=(docker-compose -p "$PROJECT" -f "$COMPOSE_FILE" --profile postgres)
compose() { "${COMPOSE[@]}" "$@"; }

# ---------------------------------------------------------- teardown ---

save_logs() {
  compose logs --no-color agent-a agent-b agent-pg-a agent-pg-b > "$E2E_TMP/agent.log" 2>&1
  compose logs --no-color haproxy-a haproxy-b haproxy-pg-a haproxy-pg-b > "$E2E_TMP/haproxy.log" 2>&1
}

compose_down() {
  timeout 180 docker-compose -p "$1" -f "$COMPOSE_FILE" --profile postgres \
    down -v --remove-orphans -t 5 > "$E2E_TMP/down.log" 2>&1
}

stop_dockerd() {
  local rc
  [ -n "$DOCKERD_PID" ] || return 0
  kill_wait "$DOCKERD_PID" 30
  rc=$?
  DOCKERD_PID=""
  # Its exec root holds mounts only while it runs; never remove through one.
  if [ -n "$DOCKERD_RUN" ] && ! grep -q " $DOCKERD_RUN/" /proc/self/mountinfo; then
    rm -rf "$DOCKERD_RUN"
  fi
  return "$rc"
}

# The EXIT trap's first step (lib.sh): whatever is still up goes.
docker_cleanup() {
  if [ -n "$UP" ]; then
    save_logs
    compose_down "$PROJECT" || diag "docker-compose down failed: see $E2E_TMP/down.log"
    UP=""
  fi
  stop_dockerd || diag "dockerd did not stop on SIGTERM"
}

e2e_setup
E2E_CLEANUP_HOOK=docker_cleanup
[ -n "${SPOA_SKIP_DOCKER:-}" ] && skip_all "SPOA_SKIP_DOCKER is set"

# ------------------------------------------------------------- tools ---

if is_root; then
  if ! out=$("$E2E_ROOT/scripts/deps.sh" docker 2>&1); then
    diag "$(printf '%s\n' "$out" | tail -n 3)"
    skip_all "docker.io / docker-compose / debootstrap cannot be installed (scripts/deps.sh docker)"
  fi
fi
for t in docker docker-compose curl ss flock; do
  command -v "$t" >/dev/null 2>&1 || skip_all "$t is not installed (as root: scripts/deps.sh docker)"
done
docker info >/dev/null 2>&1 || is_root ||
  skip_all "no Docker engine answers and starting one needs root"

exec 9>> "$LOCK"
if ! flock -n 9; then
  diag "another run holds $LOCK: waiting for it"
  flock -w 900 9 || { not_ok "lock $LOCK taken within 900 s"; exit 1; }
fi

# ------------------------------------------------------------ engine ---

if docker info >/dev/null 2>&1; then
  diag "Docker engine: ${DOCKER_HOST:-the default socket} (left running)"
else
  command -v dockerd >/dev/null 2>&1 || skip_all "dockerd is not installed (scripts/deps.sh docker)"
  DOCKERD_RUN=$(mktemp -d /tmp/spoa-dockerd.XXXXXX)
  mkdir -p "$DOCKER_DIR"
  # Its own configuration file: a system daemon.json must not apply.
  echo '{}' > "$DOCKERD_RUN/daemon.json"
  dockerd --config-file "$DOCKERD_RUN/daemon.json" --data-root "$DOCKER_DIR/root" \
    --exec-root "$DOCKERD_RUN/exec" --pidfile "$DOCKERD_RUN/dockerd.pid" \
    -H "unix://$DOCKERD_RUN/docker.sock" > "$E2E_TMP/dockerd.log" 2>&1 9>&- &
  DOCKERD_PID=$!
  export DOCKER_HOST=unix://$DOCKERD_RUN/docker.sock
  for i in $(seq 1 300); do
    docker info >/dev/null 2>&1 && break
    alive "$DOCKERD_PID" || break
    sleep 0.1
  done
  if ! docker info >/dev/null 2>&1; then
    diag "$(grep -E 'level=(error|fatal)|failed' "$E2E_TMP/dockerd.log" | tail -n 3)"
    stop_dockerd
    skip_all "dockerd does not start here (see the lines above)"
  fi
  diag "started dockerd (pid $DOCKERD_PID), data in $DOCKER_DIR/root"
fi

# A run that was killed may have left its project behind (its containers
# restart with the engine): the demo's fixed subnet would then be taken.
for p in $(docker ps -a --format '{{.Label "com.docker.compose.project"}}' | grep '^spoa-demo-' | sort -u); do
  diag "removing project $p left by an earlier run"
  compose_down "$p" || diag "could not remove $p: see $E2E_TMP/down.log"
done

# -------------------------------------------------------------- images ---

if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  ok "base image $BASE_IMAGE is there (kept from an earlier run)"
else
  is_root || skip_all "base image $BASE_IMAGE missing and debootstrap needs root"
  mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
  curl -sfI --max-time 10 "$mirror/dists/bookworm/Release" >/dev/null ||
    skip_all "base image $BASE_IMAGE missing and the Debian mirror $mirror does not answer"
  t=$(date +%s)
  if out=$(timeout 900 "$E2E_ROOT/scripts/docker-base.sh" 2>&1); then
    ok "base image $BASE_IMAGE built by scripts/docker-base.sh ($(since "$t") s)"
  else
    not_ok "scripts/docker-base.sh builds $BASE_IMAGE"
    diag "$(printf '%s\n' "$out" | tail -n 10)"
    exit 1
  fi
fi

t=$(date +%s)
if timeout 900 "${COMPOSE[@]}" build > "$E2E_TMP/build.log" 2>&1; then
  ok "docker-compose build: every image of the demo, FROM $BASE_IMAGE ($(since "$t") s)"
else
  not_ok "docker-compose build"
  grep -v '^ ---> \|^Removing intermediate' "$E2E_TMP/build.log" | tail -n 15 | sed 's/^/#   /'
  exit 1
fi

size_mb() { echo $(($(docker image inspect -f '{{.Size}}' "$1") / 1000000)); }
diag "image sizes (MB): agent $(size_mb spoa-ratelimit/agent), haproxy $(size_mb spoa-ratelimit/haproxy:2.6), redis $(size_mb spoa-ratelimit/redis:7), postgres $(size_mb spoa-ratelimit/postgres:15), base $(size_mb "$BASE_IMAGE")"
cc=$(docker run --rm --entrypoint /bin/sh spoa-ratelimit/agent -c \
     'for c in cc gcc make ld; do command -v $c; done; true' 2>&1)
is "$cc" "" "agent image: no compiler, linker or make (multi-stage build)"
mb=$(size_mb spoa-ratelimit/agent)
if int_le "$mb" "$AGENT_MAX_MB"; then ok "agent image is small: $mb MB (at most $AGENT_MAX_MB)"
else not_ok "agent image is small: $mb MB (at most $AGENT_MAX_MB)"; fi

# ------------------------------------------------------------------ up ---

export DEMO_PORT_A DEMO_PORT_B DEMO_STATS_A DEMO_STATS_B
export DEMO_PORT_PG_A DEMO_PORT_PG_B DEMO_STATS_PG_A DEMO_STATS_PG_B
for v in DEMO_PORT_A DEMO_PORT_B DEMO_STATS_A DEMO_STATS_B \
         DEMO_PORT_PG_A DEMO_PORT_PG_B DEMO_STATS_PG_A DEMO_STATS_PG_B; do
  printf -v "$v" '%s' "$(free_port)"
done
diag "project $PROJECT; redis cluster on 127.0.0.1:$DEMO_PORT_A / :$DEMO_PORT_B, postgres cluster on :$DEMO_PORT_PG_A / :$DEMO_PORT_PG_B"
t=$(date +%s)
UP=1
if timeout 300 "${COMPOSE[@]}" up -d > "$E2E_TMP/up.log" 2>&1; then
  ok "docker-compose up -d: redis, postgres, 4 agents, 4 HAProxy nodes ($(since "$t") s)"
else
  not_ok "docker-compose up -d"
  tail -n 15 "$E2E_TMP/up.log" | sed 's/^/#   /'
  exit 1
fi

# Every HAProxy node has seen its agent answer a health check (option
# spop-check: L7OK; a server is UP before its first check) within 60 s.
t=$(date +%s)
down=""
for i in $(seq 1 120); do
  down=""
  for p in "$DEMO_STATS_A" "$DEMO_STATS_B" "$DEMO_STATS_PG_A" "$DEMO_STATS_PG_B"; do
    st=$(E2E_PORT_STATS=$p stats_field spoe-ratelimit agent1 status)
    chk=$(E2E_PORT_STATS=$p stats_field spoe-ratelimit agent1 check_status)
    [ "$st/$chk" = UP/L7OK ] || down="$down :$p=${st:-none}/${chk:-none}"
  done
  [ -z "$down" ] && break
  sleep 0.5
done
if [ -z "$down" ]; then ok "the 4 HAProxy nodes see their agent UP, health check L7OK ($(since "$t") s)"
else not_ok "the 4 HAProxy nodes see their agent UP, health check L7OK, within 60 s (stats$down)"; exit 1; fi

# -------------------------------------------------------------- checks ---

RUN_ID="$$-$(date +%s)"

# one NODE PORT KEY: one request with X-Api-Key KEY; prints "NODE CODE DEG",
# DEG being the X-RateLimit-Degraded header (haproxy.cfg: "store" when the
# agent decided alone, its store away; "agent" when the agent did not
# answer in time) or "-".
one() {
  local h="$E2E_TMP/one.hdr" code deg
  code=$(req_h "$2" "$h" -H "X-Api-Key: $3")
  deg=$(hdr "$h" X-RateLimit-Degraded)
  echo "$1 $code ${deg:--}"
}

# burst FILE PORT_A PORT_B KEY COUNT: COUNT requests to each node with
# X-Api-Key KEY, alternating A and B; FILE gets the lines of one().
burst() {
  local file=$1 pa=$2 pb=$3 key=$4 n=$5 i
  : > "$file"
  for i in $(seq 1 "$n"); do
    one a "$pa" "$key" >> "$file"
    one b "$pb" "$key" >> "$file"
  done
}

# burst_try TRY: burst with BURST_ARGS (FILE PORT_A PORT_B KEY COUNT), the
# key made KEY-TRY.
burst_try() {
  burst "${BURST_ARGS[0]}" "${BURST_ARGS[1]}" "${BURST_ARGS[2]}" "${BURST_ARGS[3]}-$1" "${BURST_ARGS[4]}"
}

# codes FILE NODE CODE [DEG]: how many answers of NODE (a, b or .) were
# CODE (with X-RateLimit-Degraded DEG: store, agent, - for none, . for any).
codes() {
  awk -v n="$2" -v c="$3" -v d="${4:-.}" \
    '($1 == n || n == ".") && $2 == c && ($3 == d || (d == "." && $3 != "-")) { k++ }
     END { print k + 0 }' "$1"
}

# cluster_limit NAME PORT_A PORT_B: one key through both nodes of a cluster.
# The cluster admits LIMIT, no more, except answers it did not decide
# (X-RateLimit-Degraded: a store statement over its timeout_ms, or HAProxy's
# timeout processing on a busy machine): those are fail-open by design and
# counted apart; more than MAX_DEGRADED of them fails too.
# (the burst within one 60 s window, lib.sh in_one_window: across its end
# the sliding count is weighted down and more are admitted)
cluster_limit() {
  local name=$1 f="$E2E_TMP/$1.codes" admitted a b other deg deg_all
  BURST_ARGS=("$f" "$2" "$3" "$name-$RUN_ID" "$REQS")
  in_one_window 60 10 burst_try || diag "every burst crossed a window's end"
  admitted=$(awk '$2 == 200' "$f" | wc -l)
  a=$(awk '$1 == "a" && $2 == 200' "$f" | wc -l) b=$(awk '$1 == "b" && $2 == 200' "$f" | wc -l)
  deg=$(codes "$f" . 200 .) deg_all=$(awk '$3 != "-"' "$f" | wc -l)
  other=$(awk '$2 != 200 && $2 != 429' "$f" | wc -l)
  [ "$deg_all" -eq 0 ] || diag "$name: $deg_all answer(s) not decided by the cluster ($deg admitted): $(awk '$3 != "-"' "$f" | tr '\n' ' ')"
  if int_between "$admitted" "$LIMIT" $((LIMIT + deg)) && int_le "$deg_all" "$MAX_DEGRADED"; then
    ok "$name: one key through both nodes: $admitted of $((2 * REQS)) admitted (node a $a, node b $b; $deg fail-open), limit $LIMIT per minute for the cluster"
  else
    not_ok "$name: one key through both nodes: $admitted of $((2 * REQS)) admitted (node a $a, node b $b), want $LIMIT..$LIMIT + the $deg fail-open ones (at most $MAX_DEGRADED)"
    diag "  $(tr '\n' ' ' < "$f")"
  fi
  is "$other" 0 "$name: every answer is 200 or 429"
  if [ "$a" -gt 0 ] && [ "$b" -gt 0 ] && [ "$(tail -n 2 "$f" | cut -d' ' -f1,2 | tr '\n' ' ')" = "a 429 b 429 " ]; then
    ok "$name: both nodes admitted part of it and both deny at the end"
  else
    not_ok "$name: both nodes admitted part of it and both deny at the end"
    diag "  $(tr '\n' ' ' < "$f")"
  fi
}

cluster_limit redis "$DEMO_PORT_A" "$DEMO_PORT_B"
n=$(compose exec -T redis redis-cli --scan --pattern 'rl:{default*' 2>/dev/null | wc -l)
if int_ge "$n" 1; then ok "redis holds the cluster's counters ($n keys rl:{default...)"
else not_ok "redis holds the cluster's counters (keys rl:{default...)"; fi

cluster_limit postgres "$DEMO_PORT_PG_A" "$DEMO_PORT_PG_B"
n=$(compose exec -T postgres psql -U ratelimit -tAc 'SELECT count(*) FROM rl_counters' 2>/dev/null | tr -d '[:space:]')
if int_ge "$n" 1; then ok "postgres holds the cluster's counters ($n rows in rl_counters)"
else not_ok "postgres holds the cluster's counters (rows in rl_counters: '$n')"; fi

# Redis down: each agent decides on its share of the limit (the two nodes
# counted each other: LIMIT / 2 each for a new key; docs/CLUSTER.md,
# "When the store is down"), nothing is refused, and the cluster still
# stops at LIMIT: the agents decide without waiting for the store once
# they know it is away (and at most cluster-redis.json's timeout_ms,
# 50 ms, before), less than HAProxy waits for the agent (timeout
# processing 100 ms), so the agent decides before HAProxy would give up
# and pass the request.
if compose stop redis > "$E2E_TMP/stop.log" 2>&1; then ok "redis container stopped"
else not_ok "redis container stopped"; fi
f="$E2E_TMP/redis-down.codes"
BURST_ARGS=("$f" "$DEMO_PORT_A" "$DEMO_PORT_B" "carol-$RUN_ID" 12)
in_one_window 60 10 burst_try || diag "every burst crossed a window's end"
SHARE=$((LIMIT / 2))
first_a=$(awk '$1 == "a"' "$f" | head -n "$SHARE" | awk '$2 == 200' | wc -l)
first_b=$(awk '$1 == "b"' "$f" | head -n "$SHARE" | awk '$2 == 200' | wc -l)
other=$(awk '$2 != 200 && $2 != 429' "$f" | wc -l)
adm_a=$(awk '$1 == "a" && $2 == 200' "$f" | wc -l)
adm_b=$(awk '$1 == "b" && $2 == 200' "$f" | wc -l)
if [ "$first_a" -eq "$SHARE" ] && [ "$first_b" -eq "$SHARE" ] && [ "$other" -eq 0 ] &&
   int_le "$adm_a" $((SHARE + SLACK)) && int_le "$adm_b" $((SHARE + SLACK)); then
  ok "redis down: every request answered, the first $SHARE on each node 200, each node stops at its share (admitted: a $adm_a, b $adm_b of 12 each; limit $LIMIT for the cluster)"
else
  not_ok "redis down: every request answered, the first $SHARE on each node 200, each stops at its share"
  diag "  $(tr '\n' ' ' < "$f")"
fi
# Decided by the agent alone: every admitted answer says so.
if [ "$(codes "$f" . 200 -)" -eq 0 ] && [ "$(codes "$f" . 200 store)" -ge 1 ]; then
  ok "redis down: every admitted answer carries X-RateLimit-Degraded ($(codes "$f" . 200 store) store, $(codes "$f" . 200 agent) agent)"
else
  not_ok "redis down: every admitted answer carries X-RateLimit-Degraded"
  diag "  $(tr '\n' ' ' < "$f")"
fi
sleep 0.5
if compose logs --no-color agent-a agent-b 2>/dev/null | grep -q 'counting locally'; then
  ok "redis down: the agents log that they count locally"
else
  not_ok "redis down: the agents log that they count locally"
fi

# Agent down: HAProxy's fail-open listener lets everything through.
if compose stop agent-a > "$E2E_TMP/stop.log" 2>&1; then ok "agent-a container stopped"
else not_ok "agent-a container stopped"; fi
f="$E2E_TMP/agent-down.codes"
: > "$f"
for i in $(seq 1 12); do one a "$DEMO_PORT_A" "dave-$RUN_ID" >> "$f"; done
is "$(codes "$f" a 200 agent)" 12 "agent-a down: node A's fail-open listener answers 200 to all 12 requests, each with X-RateLimit-Degraded: agent"

# -------------------------------------------------------------- down ---

save_logs
t=$(date +%s)
if compose_down "$PROJECT"; then
  ok "docker-compose down -v ($(since "$t") s)"
else
  not_ok "docker-compose down -v"
  tail -n 10 "$E2E_TMP/down.log" | sed 's/^/#   /'
fi
UP=""
left=$(docker ps -aq --filter "label=com.docker.compose.project=$PROJECT"
       docker network ls -q --filter "label=com.docker.compose.project=$PROJECT"
       docker volume ls -q --filter "label=com.docker.compose.project=$PROJECT")
is "$(printf '%s' "$left" | wc -w)" 0 "no container, network or volume of $PROJECT is left"

if [ -n "$DOCKERD_PID" ]; then
  stop_dockerd
  is "$?" 0 "dockerd stops on SIGTERM"
fi
diag "$E2E_PASSED passed, $E2E_FAILED failed in $(since "$T0") s"
[ "$E2E_FAILED" -eq 0 ]
