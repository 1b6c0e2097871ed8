#!/usr/bin/env bash
# bench/run.sh - the benchmark suite (issue 4): prints a summary and writes
# it as Markdown to build/bench/results.md. What each part measures, and how
# to read it, is docs/BENCHMARKS.md.
#
#   bench/run.sh BUILD_DIR [PART...]      (make bench runs it on build/rel)
#
# PART is any of
#   core     BUILD_DIR/bench/bench_core, if built
#   spop     the agent (1 and 2 workers) under bench/spop_load, modes
#            ratelimit and noop: max msgs/s, latency, latency at half load
#   http     the HTTP front (1 and 2 workers) under wrk: checks/s, p99
#   e2e      HAProxy 2.6 + wrk: A (direct), B (stick table), C (SPOE +
#            agent), interleaved A B C A B C ..., medians, ratios to A
#   versions the same SPOE frontend on HAProxy 2.6 and 3.x ($BENCH_HAPROXY3,
#            default ../shared/peers/haproxy-3.4/haproxy; skipped when absent),
#            each interleaved with plain, wrk -c50: req/s ratio, HAProxy and
#            agent CPU per request, p99; the lean answer, 3.x's recommended
#            settings, the agent on a unix socket (see part_versions; about
#            9 minutes)
#   grpc     the gRPC front (docs/ENVOY.md): one worker, one HTTP/2
#            connection, 64 streams in flight (h2load -c1 -m64), a fixed
#            ShouldRateLimit counted: decisions/s, p99 (h2load's per-request log)
#   peers    HAProxy 2.6 and 3.x with the agent as their peer (issue 30):
#            plain, a stick table, the peers configuration's two tables
#            without a peer and with the agent, interleaved, wrk -c50, 5
#            rounds (not in the default; about 8 minutes; see part_peers)
#   nginx    nginx alone, with limit_req, with auth_request to the HTTP front
#            and with the module over SPOP (make nginx-module), interleaved
#   sync     BUILD_DIR/bench/bench_sync_redis (one Redis, then a 3-master Redis
#            Cluster, same run) and bench_sync_pg, if built
#   profile  perf profile of one worker under spop_load (not in the default)
#   alloc    heap allocations (valgrind) for N and 10 N messages (idem)
#   baseline this agent vs $BENCH_BASELINE (an older binary), interleaved:
#            SPOP msgs/s, HTTP checks/s and the variants of $BENCH_BASELINE_VARIANT
#            (C) (not in the default)
#   scale    N agents (one worker each) on one Redis for each N of
#            $BENCH_SCALE_NODES (10 50 100), one spop_load driving them all:
#            Redis CPU and commands per agent, idle and at a steady load, and
#            a key shared by all held at its limit (not in the default; 1 to 2
#            minutes per N; knobs BENCH_SCALE_*: see part_scale)
#   store    what one node costs Redis: idle, 1,000 hits/s on 1 and 100
#            keys (commands/s, command µs/s, Redis CPU), this agent and
#            $BENCH_BASELINE if given, interleaved (not in the default)
#   top      the heavy-hitters summaries (GET /top) on the SPOP hit path:
#            off, default, every hit recorded, interleaved (not in the default)
# Default: $BENCH_PARTS, else core spop http grpc e2e versions nginx sync (about 20
# minutes on 2 cores, half of it part versions); profile and alloc add
# about a minute more.
#
# Knobs (environment): BENCH_SPOP_SECONDS (5), BENCH_SPOP_ROUNDS (3),
# BENCH_CONNS (8), BENCH_INFLIGHT (32), BENCH_KEYS (10000),
# BENCH_E2E_SECONDS (10), BENCH_E2E_ROUNDS (3), BENCH_E2E_CONNS (32),
# BENCH_E2E_VARIANTS ("A B C D E F"; D, E and F sync through Redis: see
# variant_cfg and variant_setup), BENCH_F_LIMIT (20000: F's limit per
# second), BENCH_VERSIONS_CONNS (50), BENCH_VERSIONS_SECONDS (8),
# BENCH_VERSIONS_ROUNDS (3), BENCH_VERSIONS_VARIANTS, BENCH_VERSIONS_QUIET_WAIT
# (120), BENCH_HAPROXY3, BENCH_OUT (build/bench).
#
# Every process started here is recorded and stopped by pid on exit
# (agents with their workers, HAProxy, load generators), whatever happens.
set -u
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD

BUILD=${1:-build/rel}
shift || true
PARTS=${*:-${BENCH_PARTS:-core spop http grpc e2e versions nginx sync}}

case $BUILD in
  /*) BDIR=$BUILD ;;
  *) BDIR=$ROOT/$BUILD ;;
esac
AGENT=$BDIR/spoa-ratelimit
LOAD=$BDIR/bench/spop_load
OUT=${BENCH_OUT:-$ROOT/build/bench}
case $OUT in /*) ;; *) OUT=$ROOT/$OUT ;; esac   # absolute: unix sockets live in RAW
RAW=$OUT/raw
MD=$OUT/results.md

SPOP_SECONDS=${BENCH_SPOP_SECONDS:-5}
SPOP_ROUNDS=${BENCH_SPOP_ROUNDS:-3}
CONNS=${BENCH_CONNS:-8}
INFLIGHT=${BENCH_INFLIGHT:-32}
KEYS=${BENCH_KEYS:-10000}
E2E_SECONDS=${BENCH_E2E_SECONDS:-10}
E2E_ROUNDS=${BENCH_E2E_ROUNDS:-3}
E2E_CONNS=${BENCH_E2E_CONNS:-32}
E2E_VARIANTS=${BENCH_E2E_VARIANTS:-A B C D E F}
F_LIMIT=${BENCH_F_LIMIT:-20000}
CLK_TCK=$(getconf CLK_TCK)

mkdir -p "$OUT" "$RAW"
: > "$MD"

# ------------------------------------------------------------ processes ---

PIDS=()          # every background process started here

# alive PID: running and not a zombie.
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]
}

# stop_pid PID [SECONDS]: SIGTERM, wait, SIGKILL after SECONDS (5).
stop_pid() {
  local pid=$1 secs=${2:-5} i=0
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null; return 0; }
  while alive "$pid"; do
    i=$((i + 1))
    if [ "$i" -gt $((secs * 20)) ]; then
      echo "# pid $pid still alive ${secs}s after SIGTERM: SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null
      break
    fi
    sleep 0.05
  done
  wait "$pid" 2>/dev/null
  return 0
}

cleanup() {
  local p
  trap - EXIT INT TERM HUP
  # SIGTERM to all first (part scale may leave a hundred agents, each
  # taking its time to flush), then each waited for, SIGKILL if need be.
  for p in "${PIDS[@]}"; do
    alive "$p" && kill -TERM "$p" 2>/dev/null
  done
  for p in "${PIDS[@]}"; do
    alive "$p" && stop_pid "$p" 3
  done
  reap_workers
}

# Workers of the agents started here: they die with their master
# (PR_SET_PDEATHSIG); any still there once it is gone is killed, after
# checking that the pid is still one of our agent's processes.
WORKER_PIDS=()
reap_workers() {
  local p i
  for p in "${WORKER_PIDS[@]}"; do
    for i in $(seq 1 40); do alive "$p" || break; sleep 0.05; done
    if alive "$p" && [ "$(readlink "/proc/$p/exe" 2>/dev/null)" = "$(readlink -f "$AGENT")" ]; then
      echo "# agent worker $p outlived its master: SIGKILL" >&2
      kill -KILL "$p" 2>/dev/null
    fi
  done
  WORKER_PIDS=()
}
trap cleanup EXIT
trap 'echo "bench: interrupted" >&2; exit 130' INT TERM HUP

# forget PID: drop from PIDS once stopped.
forget() {
  local p keep=()
  for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
  PIDS=("${keep[@]}")
}

# free_port VAR: sets VAR to a free loopback TCP port, never handed out
# twice by this script (so not called in a subshell).
USED_PORTS=" "
free_port() {
  local p i
  for i in $(seq 1 200); do
    p=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
    case $USED_PORTS in *" $p "*) continue ;; esac
    if [ -z "$(ss -Htan "( sport = :$p or dport = :$p )" 2>/dev/null)" ]; then
      USED_PORTS="$USED_PORTS$p "
      printf -v "$1" '%s' "$p"
      return 0
    fi
  done
  echo "bench: no free port" >&2
  return 1
}

# listening PORT: something listens on it (a path: a unix socket is there).
listening() {
  case $1 in
    /*) [ -S "$1" ] ;;
    *) [ -n "$(ss -Htln "sport = :$1" 2>/dev/null)" ] ;;
  esac
}

# Pinning: CPU 0 for the system under test, CPU 1 for the load generator,
# when there are two CPUs and taskset.
if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null 2>&1; then
  PIN0=(taskset -c 0)
  PIN1=(taskset -c 1)
else
  PIN0=()
  PIN1=()
fi

AGENT_PID=""
# start_agent PORT PIN(0|1|none) [agent args...]: starts the agent, waits
# until it listens and its workers are up. Log: $RAW/agent-PORT.log.
start_agent() {
  agent_launch "$@" && agent_wait "$1" "$AGENT_PID"
}

# agent_launch PORT PIN(0|1|none) [agent args...]: starts the agent in the
# background (AGENT_PID, recorded), without waiting for it. PORT may be a
# unix socket's path (/...).
agent_launch() {
  local port=$1 pin=$2 pin_cmd=() addr=127.0.0.1:$1
  shift 2
  [ "$pin" = 0 ] && pin_cmd=("${PIN0[@]}")
  case $port in /*) addr=$port ;; esac
  "${pin_cmd[@]}" "$AGENT" -l "$addr" "$@" > "$RAW/agent-${port##*/}.log" 2>&1 &
  AGENT_PID=$!
  PIDS+=("$AGENT_PID")
}

# agent_wait PORT PID: waits until the agent PID listens on PORT and its
# workers are up (recorded in WORKER_PIDS).
agent_wait() {
  local port=$1 pid=$2 i
  for i in $(seq 1 100); do
    if listening "$port" && [ -n "$(pgrep -P "$pid")" ]; then
      sleep 0.1
      # shellcheck disable=SC2207
      WORKER_PIDS+=($(pgrep -P "$pid"))
      return 0
    fi
    alive "$pid" || break
    sleep 0.1
  done
  echo "bench: the agent did not start on $port:" >&2
  tail -5 "$RAW/agent-${port##*/}.log" >&2
  return 1
}

stop_agent() {
  if [ -n "$AGENT_PID" ]; then
    stop_pid "$AGENT_PID" 5
    forget "$AGENT_PID"
    AGENT_PID=""
    reap_workers
  fi
  # Variants D and E: their Redis goes with their agent.
  if [ -n "${VARIANT_REDIS_PID:-}" ]; then
    stop_pid "$VARIANT_REDIS_PID"
    forget "$VARIANT_REDIS_PID"
    VARIANT_REDIS_PID=""
  fi
}

# ticks PID...: utime + stime (fields 14 and 15 of /proc/PID/stat), summed,
# in clock ticks. The comm field may hold spaces: count after its ')'.
ticks() {
  local p s sum=0
  for p in "$@"; do
    s=$(cat "/proc/$p/stat" 2>/dev/null) || continue
    s=${s##*) }
    # shellcheck disable=SC2086
    set -- $s
    sum=$((sum + ${12} + ${13}))
  done
  echo "$sum"
}

# sysio PID...: read()/write() system calls so far (syscr + syscw of
# /proc/PID/io; recv/send on sockets and epoll are not counted there: the
# agent reads with read() and writes with send(), so this counts its reads).
sysio() {
  local p sum=0 r w
  for p in "$@"; do
    r=$(sed -n 's/^syscr: //p' "/proc/$p/io" 2>/dev/null)
    w=$(sed -n 's/^syscw: //p' "/proc/$p/io" 2>/dev/null)
    sum=$((sum + ${r:-0} + ${w:-0}))
  done
  echo "$sum"
}

# The agent's master and workers.
agent_pids() { [ -n "$AGENT_PID" ] || return 0; echo "$AGENT_PID"; pgrep -P "$AGENT_PID"; }

# CPU ticks, and read/write system calls, of the agent's master and
# workers together.
agent_ticks() {
  local pids
  mapfile -t pids < <(agent_pids)
  ticks "${pids[@]}"
}
agent_sysio() {
  local pids
  mapfile -t pids < <(agent_pids)
  sysio "${pids[@]}"
}

# split_share "pid:ticks ..." "pid:ticks ...": each pid's share of the
# ticks spent between the two readings.
split_share() {
  printf '%s\n%s\n' "$1" "$2" | awk '
    NR == 1 { for (i = 1; i <= NF; i++) { split($i, a, ":"); t0[a[1]] = a[2] } }
    NR == 2 { for (i = 1; i <= NF; i++) { split($i, a, ":"); d[a[1]] = a[2] - t0[a[1]]; s += d[a[1]] } }
    END { sep = ""; for (p in d) { printf "%sworker %s %.0f %%", sep, p, s ? 100 * d[p] / s : 0; sep = ", " }
          printf "\n" }'
}

# median: of the numbers on stdin (the lower middle for an even count).
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "" }'; }

# field LINE NAME: value of NAME=... in a RESULT line.
field() { printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1; }

# redis_stats PORT: "CALLS USEC CPU_US": the calls of the commands the
# agent sends (evalsha, eval, hmget: an HMGET inside a push script counts
# too), the microseconds Redis spent in them (INFO commandstats; a script's
# include what runs inside it), and Redis's own CPU (INFO cpu: user + sys).
redis_stats() {
  { redis-cli -p "$1" INFO commandstats; redis-cli -p "$1" INFO cpu; } 2>/dev/null | tr -d '\r' | awk -F'[:,=]' '
    /^cmdstat_(evalsha|eval|hmget):/ { c += $3; u += $5 }
    /^used_cpu_(user|sys):/ { cpu += $2 }
    END { printf "%d %d %.0f\n", c, u, cpu * 1e6 }'
}

md() { printf '%s\n' "$*" >> "$MD"; }
say() { printf '%s\n' "$*"; }

machine_info() {
  local model kernel hav rv pv
  model=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)
  kernel=$(uname -r)
  hav=$(haproxy -v 2>/dev/null | head -n 1 | awk '{print $3}')
  rv=$(redis-server --version 2>/dev/null | sed -n 's/.* v=\([^ ]*\).*/\1/p')
  pv=$(psql --version 2>/dev/null | sed -n 's/.*(PostgreSQL) \([0-9.]*\).*/\1/p')
  md "# Benchmark results"
  md ""
  md "Written by \`bench/run.sh $BUILD\` on $(date -u +%Y-%m-%dT%H:%MZ); see docs/BENCHMARKS.md."
  md ""
  md "| | |"
  md "|---|---|"
  md "| CPUs | $(nproc) × ${model:-?} |"
  md "| kernel | $kernel |"
  md "| HAProxy | ${hav:-not installed} |"
  md "| nginx | $(nginx -v 2>&1 | sed -n 's|.*nginx/||p' | grep . || echo 'not installed') |"
  md "| wrk | $(wrk --version 2>&1 | awk 'NR == 1 { print $2 }' | grep . || echo 'not installed') |"
  md "| Redis | ${rv:-not installed} |"
  md "| PostgreSQL | ${pv:-not installed} |"
  md "| load at start | $(uptime | sed 's/.*load average: //') (1, 5, 15 min) |"
  md ""
}

# other_busy: how busy the CPUs are (%), over one second (/proc/stat: 100 %
# - idle - iowait); called while this script runs nothing, so all of it is
# other work.
other_busy() {
  local a b
  a=$(awk '/^cpu / { printf "%d %d\n", $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9, $5 + $6 }' /proc/stat)
  sleep 1
  b=$(awk '/^cpu / { printf "%d %d\n", $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9, $5 + $6 }' /proc/stat)
  printf '%s %s\n' "$a" "$b" |
    awk '{ t = $3 - $1; i = $4 - $2; printf "%.0f\n", (t > 0) ? 100 * (t - i) / t : 0 }'
}

# wait_quiet MAX_SECONDS: waits until other work keeps the CPUs under 10 %
# busy (one-second samples), at most MAX_SECONDS; prints the last sample.
wait_quiet() {
  local busy t0=$SECONDS
  while :; do
    busy=$(other_busy)
    if [ "$busy" -le 10 ] || [ $((SECONDS - t0)) -ge "$1" ]; then
      echo "$busy"
      return 0
    fi
    sleep 4
  done
}

# busy_check WHEN: how busy the CPUs are with other work, sampled over one
# second while this script runs nothing (/proc/stat: 100 % - idle - iowait).
# Noted in results.md before each part, with a warning above 10 %: the
# numbers then measure the other load as much as the agent.
busy_check() {
  local busy
  busy=$(other_busy)
  if [ "$busy" -gt 10 ]; then
    say "WARNING: the CPUs were $busy % busy with other work before $1: the numbers will be noisy"
    md "**Warning: before $1 the CPUs were $busy % busy with other work (1 s sample): these numbers are noisy.**"
    md ""
  else
    md "Other work on the CPUs before $1: $busy % (1 s sample)."
    md ""
  fi
}

# ------------------------------------------------------------------ core ---

part_core() {
  local b=$BDIR/bench/bench_core out rc
  say "== core"
  md "## 1. Core (bench_core)"
  md ""
  if [ ! -x "$b" ]; then
    say "bench_core not built: skipped"
    md "Not built (\`$BUILD/bench/bench_core\`): skipped."
    md ""
    return 0
  fi
  out=$(timeout 300 "$b" 2>&1); rc=$?
  printf '%s\n' "$out"
  md "\`$BUILD/bench/bench_core\` (exit status $rc):"
  md ""
  md '```'
  md "$out"
  md '```'
  md ""
}

# ------------------------------------------------------------------ spop ---

# spop_run TAG PIN(1|none) ARGS...: one spop_load run, RESULT line on stdout,
# with agent_cpu_us= added when AGENT_PID is set: the agent's CPU time
# (master + workers) over the whole run ÷ every message ACKed in it, a
# figure that other load on the machine disturbs much less than msgs/s.
spop_run() {
  local tag=$1 pin=$2 line pin_cmd=() t0=0 t1=0 n
  shift 2
  [ "$pin" = 1 ] && pin_cmd=("${PIN1[@]}")
  [ -n "$AGENT_PID" ] && t0=$(agent_ticks)
  line=$(timeout $((SPOP_SECONDS + 30)) "${pin_cmd[@]}" "$LOAD" -q -d "$SPOP_SECONDS" -w 1 \
         -c "$CONNS" -k "$INFLIGHT" -n "$KEYS" "$@" 2>>"$RAW/spop_load.err" | grep '^RESULT')
  [ -n "$AGENT_PID" ] && t1=$(agent_ticks)
  [ -n "$line" ] || line="RESULT failed=1 msgs_per_s=0 errors=1"
  n=$(field "$line" total_acks)
  if [ -n "$AGENT_PID" ] && [ "${n:-0}" -gt 0 ]; then
    line="$line agent_cpu_us=$(awk -v d=$((t1 - t0)) -v t="$CLK_TCK" -v n="$n" 'BEGIN { printf "%.3f", d / t / n * 1e6 }')"
  fi
  echo "$tag $line" >> "$RAW/spop.txt"
  echo "$line"
}

# spop_pick TAG [FIELD]: of the runs tagged TAG, the one with the median
# FIELD (default msgs_per_s; open-loop runs all have the same rate and are
# picked by p99_us instead).
spop_pick() {
  local want by=${2:-}
  if [ -z "$by" ]; then
    case $1 in *-half) by=p99_us ;; *) by=msgs_per_s ;; esac
  fi
  want=$(grep "^$1 " "$RAW/spop.txt" | while read -r _ l; do field "$l" "$by"; done | median)
  grep "^$1 " "$RAW/spop.txt" | while read -r _ l; do
    if [ "$(field "$l" "$by")" = "$want" ]; then echo "$l"; break; fi
  done
}

part_spop() {
  local w port pin r half mode tag line
  say "== spop (agent alone, bench/spop_load)"
  if [ ! -x "$LOAD" ] || [ ! -x "$AGENT" ]; then
    say "spop_load or the agent not built: skipped"
    md "## 2. SPOP: not built, skipped"; md ""
    return 0
  fi
  : > "$RAW/spop.txt"
  : > "$RAW/spop-split.txt"
  for w in 1 2; do
    free_port port || return 1
    # One worker: agent on CPU 0, load generator on CPU 1. Two workers:
    # nothing pinned, the three processes share both CPUs.
    if [ "$w" = 1 ]; then pin=0; else pin=none; fi
    start_agent "$port" "$pin" -w "$w" || return 1
    local t0 t1 wp
    wp=$(pgrep -P "$AGENT_PID" | tr '\n' ' ')
    for r in $(seq 1 "$SPOP_ROUNDS"); do
      for mode in ratelimit noop; do
        # shellcheck disable=SC2086
        t0=$(for p in $wp; do echo "$p:$(ticks "$p")"; done | tr '\n' ' ')
        line=$(spop_run "w$w-$mode-max" "${pin/0/1}" -p "$port" -m "$mode")
        t1=$(for p in $wp; do echo "$p:$(ticks "$p")"; done | tr '\n' ' ')
        say "workers=$w round=$r $line"
        [ "$w" = 2 ] && echo "round $r, $mode: $(split_share "$t0" "$t1")" >> "$RAW/spop-split.txt"
      done
    done
    # Latency at half of the measured ratelimit maximum, both modes at the
    # same rate (open loop: latency counts from when a message was due).
    half=$(field "$(spop_pick "w$w-ratelimit-max")" msgs_per_s)
    half=$(( ${half:-0} / 2 ))
    if [ "$half" -gt 0 ]; then
      local hr=$SPOP_ROUNDS
      [ "$w" = 2 ] && hr=1
      for r in $(seq 1 "$hr"); do
        for mode in ratelimit noop; do
          line=$(spop_run "w$w-$mode-half" "${pin/0/1}" -p "$port" -m "$mode" -r "$half")
          say "workers=$w round=$r half-load $line"
        done
      done
    fi
    stop_agent
  done

  md "## 2. SPOP: the agent alone (bench/spop_load)"
  md ""
  md "\`spop_load -c $CONNS -k $INFLIGHT -n $KEYS -d $SPOP_SECONDS -w 1\`: $CONNS connections, $INFLIGHT NOTIFYs in flight on each, $KEYS keys,"
  md "${SPOP_SECONDS} s measured after 1 s of warm-up; max = closed loop (\`-r 0\`), half = open loop at half the"
  md "measured ratelimit maximum (\`-r\`). One worker: agent on CPU 0, load generator on CPU 1."
  md "Two workers: nothing pinned. Each row is the median (by msgs/s; half load: by p99) of $SPOP_ROUNDS runs (half load with 2 workers: 1 run);"
  md "its latencies are that run's. Latency: from send (or, open loop, from when due) to ACK received."
  md "Agent CPU µs/msg: the agent's utime+stime (master + workers) during the run ÷ messages ACKed in it."
  md ""
  md "| workers | mode | load | msgs/s | p50 µs | p99 µs | p99.9 µs | errors | load gen CPU | agent CPU µs/msg |"
  md "|---|---|---|---|---|---|---|---|---|---|"
  for w in 1 2; do
    for tag in max half; do
      for mode in ratelimit noop; do
        line=$(spop_pick "w$w-$mode-$tag")
        [ -n "$line" ] || continue
        local lbl=$tag
        [ "$tag" = half ] && lbl="half ($(field "$line" rate_target)/s)"
        md "| $w | $mode | $lbl | $(field "$line" msgs_per_s) | $(field "$line" p50_us) | $(field "$line" p99_us) | $(field "$line" p999_us) | $(field "$line" errors) | $(field "$line" client_cpu) | $(field "$line" agent_cpu_us) |"
      done
    done
  done
  md ""
  # Price of rate limiting: time per message, ratelimit over noop.
  local rl1 no1 rl1h
  rl1=$(field "$(spop_pick w1-ratelimit-max)" msgs_per_s)
  no1=$(field "$(spop_pick w1-noop-max)" msgs_per_s)
  rl1h=$(spop_pick w1-ratelimit-half)
  if [ -n "$rl1" ] && [ -n "$no1" ] && [ "${rl1:-0}" -gt 0 ]; then
    SPOP_OVERHEAD=$(awk -v a="$no1" -v b="$rl1" 'BEGIN { printf "%.0f", (a / b - 1) * 100 }')
  else
    SPOP_OVERHEAD=""
  fi
  SPOP_RL1=$rl1
  SPOP_P99_HALF=$(field "$rl1h" p99_us)
  SPOP_HALF_RATE=$(field "$rl1h" rate_target)
  local rlc noc
  rlc=$(spop_pick w1-ratelimit-max | tr ' ' '\n' | sed -n 's/^agent_cpu_us=//p')
  noc=$(spop_pick w1-noop-max | tr ' ' '\n' | sed -n 's/^agent_cpu_us=//p')
  SPOP_OVERHEAD_CPU=""
  if [ -n "$rlc" ] && [ -n "$noc" ]; then
    SPOP_OVERHEAD_CPU=$(awk -v a="$rlc" -v b="$noc" 'BEGIN { if (b > 0) printf "%.0f", (a / b - 1) * 100 }')
  fi
  md "One worker: rate limiting costs ${SPOP_OVERHEAD:-?} % more time per message than noop (noop msgs/s ÷ ratelimit msgs/s − 1),"
  md "${SPOP_OVERHEAD_CPU:-?} % more agent CPU per message."
  if [ -s "$RAW/spop-split.txt" ]; then
    md ""
    md "Two workers, each worker's share of the agent's CPU time in each max run (the workers all accept"
    md "on one listening socket, so how the $CONNS connections spread is up to the kernel):"
    md ""
    while read -r l; do md "- $l"; done < "$RAW/spop-split.txt"
  fi
  md ""
  md "Every run (tag, then spop_load's RESULT line):"
  md ""
  md '```'
  while read -r l; do md "$l"; done < "$RAW/spop.txt"
  md '```'
  md ""
}

# ------------------------------------------------------------------- e2e ---

# variant_cfg V: the HAProxy configuration of variant V (bench/haproxy/).
variant_cfg() {
  case $1 in
    A) echo "$ROOT/bench/haproxy/a-direct.cfg" ;;
    B) echo "$ROOT/bench/haproxy/b-stick-table.cfg" ;;
    # D and E: the same HAProxy as C; only the agent's config differs.
    C|D|E) echo "$ROOT/bench/haproxy/c-spoe-local.cfg" ;;
    F) echo "$ROOT/bench/haproxy/f-near-limit.cfg" ;;
    *) local f
       for f in "$ROOT"/bench/haproxy/"$(echo "$1" | tr '[:upper:]' '[:lower:]')"-*.cfg; do
         [ -f "$f" ] && { echo "$f"; break; }
       done ;;
  esac
}

# variant_setup V AGENT_PORT: starts what variant V needs besides HAProxy.
# Sets VARIANT_AGENT=1 when an agent runs (its CPU is then measured).
variant_setup() {
  VARIANT_AGENT="" VARIANT_METRICS_PORT=""
  case $1 in
    A|B) return 0 ;;
    C)
      # Local strategy (the built-in default namespace: 60 s is one of its
      # windows), one worker, pinned with HAProxy on CPU 0.
      start_agent "$2" 0 -w 1 || return 1
      VARIANT_AGENT=1
      ;;
    D|E|F)
      # Redis on CPU 1 (with wrk), the agent synchronising the default
      # namespace through it: D every 0.1 s (admission "auto": exact, from
      # the store's grants while far from the limit), E on every hit
      # (sync_rate 0), F as D with every request at its limit
      # (f-near-limit.cfg; denied hits not counted, so the sliding rate
      # stays at the limit and each hit it frees is admitted by Redis).
      local rport rate=0.1 cfgf adm=""
      [ "$1" = E ] && rate=0
      [ "$1" = F ] && adm='"count_denied":false,'
      free_port rport || return 1
      "${PIN1[@]}" redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no \
        > "$RAW/redis-$1-$rport.log" 2>&1 &
      VARIANT_REDIS_PID=$!
      VARIANT_REDIS_PORT=$rport
      PIDS+=("$VARIANT_REDIS_PID")
      for i in $(seq 1 50); do listening "$rport" && break; sleep 0.05; done
      cfgf=$RAW/agent-$1.json
      printf '{"namespaces":[{"name":"default","window_sizes":[1,60,3600],%s"sync_rate":%s,"strategy":"redis","strategy_opts":{"host":"127.0.0.1","port":%s,"timeout_ms":100}}]}\n' \
        "$adm" "$rate" "$rport" > "$cfgf"
      start_agent "$2" 0 -w 1 -c "$cfgf" || return 1
      VARIANT_AGENT=1
      ;;
    P)
      # The agent as the node's peer (part peers, p-peers.cfg): one
      # worker, pinned with HAProxy on CPU 0; its peers listener is
      # BENCH_PEER_AGENT, HAProxy's own BENCH_PEER_SELF; its HTTP front
      # (GET /metrics: the updates it counted, the sums it pushed) on a
      # port of its own.
      local pport sport hport cfgf
      free_port pport && free_port sport && free_port hport || return 1
      export BENCH_PEER_AGENT=127.0.0.1:$pport BENCH_PEER_SELF=127.0.0.1:$sport
      VARIANT_METRICS_PORT=$hport
      cfgf=$RAW/agent-P.json
      printf '{"http_listen":"127.0.0.1:%s","peers":{"listen":"127.0.0.1:%s","name":"agg"},"namespaces":[{"name":"rl","window_sizes":[10],"limit":1000000000,"haproxy_tables":{"from":"rl/req_local","into":"rl/req_cluster"}}]}\n' \
        "$hport" "$pport" > "$cfgf"
      start_agent "$2" 0 -w 1 -c "$cfgf" || return 1
      VARIANT_AGENT=1
      ;;
    Q)
      # P's control: a second HAProxy (q-peer.cfg, the same binary as the
      # node's, E2E_HAPROXY) as the node's peer "agg" in the agent's place,
      # pinned with the node on CPU 0; measured as P's agent is.
      local pport sport
      free_port pport && free_port sport || return 1
      export BENCH_PEER_AGENT=127.0.0.1:$pport BENCH_PEER_SELF=127.0.0.1:$sport
      "${PIN0[@]}" "${E2E_HAPROXY:-haproxy}" -db -f "$ROOT/bench/haproxy/q-peer.cfg" \
        > "$RAW/haproxy-Q-peer.log" 2>&1 &
      AGENT_PID=$!
      PIDS+=("$AGENT_PID")
      for i in $(seq 1 100); do listening "$pport" && break; alive "$AGENT_PID" || break; sleep 0.05; done
      listening "$pport" || { echo "bench: the peer HAProxy did not start:" >&2; tail -5 "$RAW/haproxy-Q-peer.log" >&2; return 1; }
      VARIANT_AGENT=1
      ;;
    *)
      echo "bench: variant $1 has no setup yet" >&2
      return 1
      ;;
  esac
}

# peers_stats PORT: "UPDATES PUSHES": the nodes' updates the agent counted
# and the sums it pushed so far (GET /metrics on its HTTP front: every
# namespace's spoa_ratelimit_peers_updates_total, _pushes_total).
peers_stats() {
  curl -s "http://127.0.0.1:$1/metrics" 2>/dev/null | awk '
    /^spoa_ratelimit_peers_updates_total/ { u += $NF }
    /^spoa_ratelimit_peers_pushes_total/ { p += $NF }
    END { printf "%d %d\n", u, p }'
}

# wrk_field FILE WHAT: requests | rps | p50_us | p99_us | non2xx | sockerr
wrk_field() {
  local f=$1
  case $2 in
    requests) sed -n 's/^ *\([0-9][0-9]*\) requests in .*/\1/p' "$f" ;;
    rps) sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p' "$f" ;;
    p50_us|p99_us)
      local pct=${2%_us}; pct=${pct#p}
      awk -v want="$pct%" '$1 == want {
          v = $2; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v)
          m = (u == "us") ? 1 : (u == "ms") ? 1000 : (u == "s") ? 1000000 : (u == "m") ? 60000000 : 0
          printf "%.0f\n", v * m; exit }' "$f" ;;
    non2xx) sed -n 's/^ *Non-2xx or 3xx responses: *\([0-9]*\).*/\1/p' "$f" | grep . || echo 0 ;;
    sockerr)
      sed -n 's/^ *Socket errors: *//p' "$f" |
        awk -F, '{ s = 0; for (i = 1; i <= NF; i++) { n = $i; gsub(/[^0-9]/, "", n); s += n } print s }' |
        grep . || echo 0 ;;
  esac
}

# e2e_run V ROUND: one fresh run of variant V; appends a row to e2e.txt:
# V round rps requests p50_us p99_us haproxy_us_per_req agent_us_per_req
# errors agent_reads_per_req, and for D, E, F (with Redis): redis_cmds_per_req
# redis_cmd_us_per_req redis_cpu_us_per_req (redis_stats)
# The caller may set (part versions): E2E_HAPROXY (the binary, default
# haproxy), E2E_CFG and E2E_SPOE (the configurations, default the
# variant's), E2E_SETUP (the variant whose setup runs, default V),
# E2E_WRK_CONNS and E2E_WRK_SECONDS (default BENCH_E2E_CONNS and _SECONDS).
e2e_run() {
  local v=$1 round=$2 cfg fe ag hp i h0 h1 a0 a1 s0 s1 reqs f rps p50 p99 hcpu acpu asys errs spoe
  local r0="" r1="" rstat=""
  local hbin=${E2E_HAPROXY:-haproxy} wconns=${E2E_WRK_CONNS:-$E2E_CONNS} wsecs=${E2E_WRK_SECONDS:-$E2E_SECONDS}
  cfg=${E2E_CFG:-$(variant_cfg "$v")}
  if [ -z "$cfg" ] || [ ! -f "$cfg" ]; then
    echo "bench: no configuration for variant $v" >&2
    return 1
  fi
  free_port fe && free_port ag || return 1
  local agent_addr=127.0.0.1:$ag
  if [ -n "${E2E_UNIX:-}" ]; then
    # The agent on a unix socket (part versions, the U... variants).
    ag=$RAW/agent-$v-$round.sock
    rm -f "$ag"
    agent_addr=unix@$ag
  fi
  variant_setup "${E2E_SETUP:-$v}" "$ag" || return 1
  spoe=${E2E_SPOE:-$ROOT/bench/haproxy/spoe-bench.conf}
  if [ "$v" = F ]; then
    # One key at its limit: a 1 s window, limit BENCH_F_LIMIT per second.
    spoe=$RAW/spoe-near-limit.conf
    sed "s/window=int(60) limit=int(1000000000)/window=int(1) limit=int($F_LIMIT)/" \
      "$ROOT/bench/haproxy/spoe-bench.conf" > "$spoe"
  fi
  BENCH_FE=127.0.0.1:$fe BENCH_AGENT=$agent_addr BENCH_SPOE_CONF=$spoe \
    "${PIN0[@]}" "$hbin" -db -f "$cfg" > "$RAW/haproxy-$v-$round.log" 2>&1 &
  hp=$!
  PIDS+=("$hp")
  for i in $(seq 1 100); do
    listening "$fe" && break
    alive "$hp" || break
    sleep 0.05
  done
  if ! listening "$fe"; then
    echo "bench: haproxy ($v) did not start:" >&2
    tail -5 "$RAW/haproxy-$v-$round.log" >&2
    stop_pid "$hp"; forget "$hp"; stop_agent
    return 1
  fi
  # Warm-up: connections to the agent, caches, stick table entry.
  "${PIN1[@]}" wrk -t1 -c"$wconns" -d1s "http://127.0.0.1:$fe/" > /dev/null 2>&1
  h0=$(ticks "$hp")
  [ -n "$VARIANT_AGENT" ] && { a0=$(agent_ticks); s0=$(agent_sysio); }
  [ -n "${VARIANT_REDIS_PID:-}" ] && r0=$(redis_stats "$VARIANT_REDIS_PORT")
  [ -n "${VARIANT_METRICS_PORT:-}" ] && r0="$(peers_stats "$VARIANT_METRICS_PORT") 0"
  f=$RAW/wrk-$v-$round.txt
  # E2E_WATCH (profile part only): system calls, context switches and
  # samples of the worker and of HAProxy.
  local watch=()
  if [ -n "${E2E_WATCH:-}" ] && [ -n "$VARIANT_AGENT" ]; then
    local wk pid who evs=raw_syscalls:sys_enter,context-switches
    for who in read recvfrom recvmsg sendto sendmsg epoll_wait; do evs=$evs,syscalls:sys_enter_$who; done
    wk=$(pgrep -P "$AGENT_PID" | head -n 1)
    for who in agent haproxy; do
      pid=$wk; [ "$who" = haproxy ] && pid=$hp
      perf stat -x, -o "$RAW/e2e-$v-$who-syscalls.txt" -p "$pid" -e "$evs" -- sleep "$wsecs" \
        > /dev/null 2>&1 &
      watch+=("$!")
      perf record -q -e cpu-clock -F 4999 -p "$pid" -o "$RAW/perf-e2e-$v-$who.data" -- sleep "$wsecs" \
        > /dev/null 2>&1 &
      watch+=("$!")
    done
    PIDS+=("${watch[@]}")
  fi
  "${PIN1[@]}" wrk -t1 -c"$wconns" -d"${wsecs}s" --latency "http://127.0.0.1:$fe/" > "$f" 2>&1
  for i in "${watch[@]}"; do wait "$i" 2>/dev/null; forget "$i"; done
  # CPU read before anything is stopped (a stopped worker's ticks are gone).
  h1=$(ticks "$hp")
  [ -n "$VARIANT_AGENT" ] && { a1=$(agent_ticks); s1=$(agent_sysio); }
  if [ -n "${VARIANT_METRICS_PORT:-}" ]; then
    r1="$(peers_stats "$VARIANT_METRICS_PORT") 0"
  elif [ -n "$r0" ]; then
    r1=$(redis_stats "$VARIANT_REDIS_PORT")
  fi
  # E2E_IDLE=SECONDS: the agent's CPU over that long once the load has
  # stopped, HAProxy still connected (E2E_IDLE_TICKS: its ticks).
  E2E_IDLE_TICKS=-
  if [ -n "${E2E_IDLE:-}" ] && [ -n "$VARIANT_AGENT" ]; then
    local i0
    sleep 0.5
    i0=$(agent_ticks)
    sleep "$E2E_IDLE"
    E2E_IDLE_TICKS=$(( $(agent_ticks) - i0 ))
  fi
  stop_pid "$hp"; forget "$hp"
  stop_agent
  reqs=$(wrk_field "$f" requests)
  rps=$(wrk_field "$f" rps)
  p50=$(wrk_field "$f" p50_us)
  p99=$(wrk_field "$f" p99_us)
  errs=$(( $(wrk_field "$f" non2xx) + $(wrk_field "$f" sockerr) ))
  if [ -z "$reqs" ] || [ "$reqs" -eq 0 ]; then
    echo "bench: wrk ($v) made no request:" >&2
    tail -5 "$f" >&2
    return 1
  fi
  hcpu=$(awk -v d=$((h1 - h0)) -v t="$CLK_TCK" -v n="$reqs" 'BEGIN { printf "%.2f", d / t / n * 1e6 }')
  acpu=- asys=-
  if [ -n "$VARIANT_AGENT" ]; then
    acpu=$(awk -v d=$((a1 - a0)) -v t="$CLK_TCK" -v n="$reqs" 'BEGIN { printf "%.2f", d / t / n * 1e6 }')
    asys=$(awk -v d=$((s1 - s0)) -v n="$reqs" 'BEGIN { printf "%.2f", d / n }')
  fi
  if [ -n "$r1" ]; then
    rstat=$(printf '%s %s\n' "$r0" "$r1" | awk -v n="$reqs" \
      '{ printf "%.4f %.3f %.3f", ($4 - $1) / n, ($5 - $2) / n, ($6 - $3) / n }')
  fi
  echo "$v $round $rps $reqs $p50 $p99 $hcpu $acpu $errs $asys${rstat:+ $rstat}" >> "${E2E_TXT:-$RAW/e2e.txt}"
  local rlabel=redis_cmds/req,cmd_us/req,cpu_us/req
  [ -n "${VARIANT_METRICS_PORT:-}" ] && rlabel=peers_updates/req,pushes/req,-
  say "variant=$v round=$round req/s=$rps p50_us=$p50 p99_us=$p99 haproxy_us/req=$hcpu agent_us/req=$acpu agent_reads/req=$asys errors=$errs${rstat:+ $rlabel=$rstat}"
}

# e2e_median V COLUMN (1-based in e2e.txt)
e2e_median() { awk -v v="$1" -v c="$2" '$1 == v && $c != "-" { print $c }' "$RAW/e2e.txt" | median; }

# haproxy_and_wrk: installs wrk if missing (scripts/deps.sh bench); fails,
# saying the part is skipped, when haproxy or wrk is still missing.
haproxy_and_wrk() {
  if ! command -v wrk >/dev/null 2>&1; then
    scripts/deps.sh bench >&2 || true
  fi
  if ! command -v haproxy >/dev/null 2>&1 || ! command -v wrk >/dev/null 2>&1; then
    say "haproxy or wrk missing (scripts/deps.sh bench): skipped"
    md "haproxy or wrk missing (\`scripts/deps.sh bench\` installs them): skipped."
    md ""
    return 1
  fi
}

part_e2e() {
  local r v a ah rps
  say "== e2e (HAProxy + wrk)"
  md "## 3. End to end: HAProxy 2.6 + wrk"
  md ""
  haproxy_and_wrk || return 0
  : > "$RAW/e2e.txt"
  for r in $(seq 1 "$E2E_ROUNDS"); do
    for v in $E2E_VARIANTS; do
      e2e_run "$v" "$r" || say "variant $v round $r failed"
    done
  done
  a=$(e2e_median A 3)
  ah=$(e2e_median A 7)
  md "\`wrk -t1 -c$E2E_CONNS -d${E2E_SECONDS}s --latency\` on CPU 1; HAProxy (\`nbthread 1\`) and the agent (1 worker) on CPU 0."
  md "Each variant is started fresh for each run (1 s wrk warm-up, not measured), in the order"
  md "$(echo "$E2E_VARIANTS" | tr -d ' ') × $E2E_ROUNDS rounds; each column is the median over the rounds. CPU per request:"
  md "utime+stime (/proc/PID/stat) during the measured run ÷ requests; the agent's is its master's plus its worker's."
  md "× A (CPU): A's HAProxy CPU per request ÷ (this variant's HAProxy + agent CPU per request): what × A tends"
  md "to when CPU 0 is the bottleneck, and much less sensitive to other load on the machine than req/s."
  md ""
  md "| variant | req/s | × A | × A (CPU) | p50 µs | p99 µs | HAProxy CPU µs/req | agent CPU µs/req | errors |"
  md "|---|---|---|---|---|---|---|---|---|"
  for v in $E2E_VARIANTS; do
    rps=$(e2e_median "$v" 3)
    [ -n "$rps" ] || { md "| $v | failed | | | | | | | |"; continue; }
    local ratio=- cratio=- hc ac
    hc=$(e2e_median "$v" 7)
    ac=$(e2e_median "$v" 8)
    [ -n "$a" ] && ratio=$(awk -v x="$rps" -v y="$a" 'BEGIN { printf "%.2f", x / y }')
    [ -n "$ah" ] && cratio=$(awk -v a="$ah" -v h="$hc" -v g="${ac:-0}" 'BEGIN { if (h + g > 0) printf "%.2f", a / (h + g); else print "-" }')
    md "| $v | $rps | $ratio | $cratio | $(e2e_median "$v" 5) | $(e2e_median "$v" 6) | $hc | ${ac:--} | $(awk -v v="$v" '$1 == v { s += $9 } END { print s + 0 }' "$RAW/e2e.txt") |"
    if [ "$v" = C ]; then E2E_C_RATIO=$ratio; E2E_C_CRATIO=$cratio; E2E_C_AGENT=$ac; fi
  done
  md ""
  md "A: HAProxy answers (\`http-request return\`). B: + stick table (\`track-sc0 src\`, \`sc_http_req_rate\`)."
  md "C: + SPOE filter asking this agent (local strategy) for every request. D: the same, the agent syncing"
  md "its counters with Redis (on CPU 1) every 0.1 s. E: the same with sync_rate 0 (a Redis round trip per request)."
  md "D admits with Redis's grants (admission \"auto\", exact): far from the limit, hits spend them locally."
  md "F: D with one key at its limit, $F_LIMIT per 1 s sliding window (denied hits not counted): each hit"
  md "the sliding window frees is admitted by Redis, the others denied from the node's view (200 with"
  md "X-RL-Denied, so that only unanswered requests count as errors)."
  md "Errors: non-2xx + socket errors, all rounds."
  md ""
  local rv any_redis=""
  for v in $E2E_VARIANTS; do
    [ -n "$(e2e_median "$v" 11)" ] && any_redis=1
  done
  if [ -n "$any_redis" ]; then
    md "What the variants with Redis cost it, per request (medians; redis_stats in bench/run.sh: commands the"
    md "agent sends, EVALSHA / EVAL / HMGET, the µs INFO commandstats gives them, Redis's own CPU from INFO cpu):"
    md ""
    md "| variant | Redis commands/req | Redis command µs/req | Redis CPU µs/req |"
    md "|---|---|---|---|"
    for rv in $E2E_VARIANTS; do
      [ -n "$(e2e_median "$rv" 11)" ] || continue
      md "| $rv | $(e2e_median "$rv" 11) | $(e2e_median "$rv" 12) | $(e2e_median "$rv" 13) |"
    done
    md ""
  fi
  md "Every run (variant, round, req/s, requests, p50 µs, p99 µs, HAProxy µs/req, agent µs/req, errors,"
  md "agent read()/write() calls per request: syscr+syscw of /proc/PID/io, which do not count send();"
  md "with Redis: its commands, command µs and CPU µs per request):"
  md ""
  md '```'
  while read -r l; do md "$l"; done < "$RAW/e2e.txt"
  md '```'
  md ""
}

# -------------------------------------------------------------- versions ---

# part_versions: the same SPOE frontend on Debian's HAProxy (2.6) and on
# HAProxy 3.x ($BENCH_HAPROXY3, default ../shared/peers/haproxy-3.4/haproxy
# from the repository's root), each interleaved with plain HAProxy, wrk
# -c$BENCH_VERSIONS_CONNS (50: one SPOE stream per concurrent request).
# Variants (BENCH_VERSIONS_VARIANTS):
#   A26  2.6, plain (a-direct.cfg)
#   C26  2.6, SPOE + agent, the default answer (c-spoe-local.cfg, spoe-bench.conf)
#   L26  2.6, the same with the lean answer (spoe-bench-lean.conf)
#   A34  3.x, plain
#   C34  3.x, SPOE + agent, the default answer (c-spoe-local.cfg as for 2.6)
#   AT34 3.x, plain with the recommended global settings (a3-direct-tuned.cfg)
#   CR34 3.x, the default answer with the recommended settings
#   R34  3.x, the lean answer and the recommended settings (c3-spoe-recommended.cfg)
#   U... a variant with the agent on a unix socket (UC26, UC34, UCR34, UR34:
#        HAProxy and the agent on one host, no TCP stack and no connection
#        tracking between them)
#   O26, O34  as C26 and C34 with the agent $BENCH_BASELINE (an older binary),
#        added when it is set
# Ratios are medians of the per-round ratios to the round's plain run (AT34
# for R34's second ratio). After each agent run, the agent's CPU over 2 s
# with HAProxy still connected and no traffic (an idle agent: 0 %).
VERSIONS_CONNS=${BENCH_VERSIONS_CONNS:-50}
VERSIONS_SECONDS=${BENCH_VERSIONS_SECONDS:-8}
VERSIONS_ROUNDS=${BENCH_VERSIONS_ROUNDS:-3}
VERSIONS_VARIANTS=${BENCH_VERSIONS_VARIANTS:-A26 C26 UC26 L26 A34 C34 UC34 AT34 CR34 UCR34 R34 UR34}
VERSIONS_QUIET_WAIT=${BENCH_VERSIONS_QUIET_WAIT:-120}
HAPROXY3=${BENCH_HAPROXY3:-$ROOT/../shared/peers/haproxy-3.4/haproxy}

# versions_run V ROUND: one run of variant V (part versions).
versions_run() {
  local v=$1 r=$2 hb cfg spoe=$ROOT/bench/haproxy/spoe-bench.conf setup=A save=$AGENT rc=0
  local base=$1 unix=""
  case $v in U?*) base=${v#U}; unix=1 ;; esac
  case $v in
    *26) hb=haproxy ;;
    *34) hb=$HAPROXY3 ;;
  esac
  case $base in
    A26|A34) cfg=$ROOT/bench/haproxy/a-direct.cfg ;;
    AT34) cfg=$ROOT/bench/haproxy/a3-direct-tuned.cfg ;;
    C26|C34) cfg=$ROOT/bench/haproxy/c-spoe-local.cfg; setup=C ;;
    O26|O34) cfg=$ROOT/bench/haproxy/c-spoe-local.cfg; setup=C; AGENT=$BENCH_BASELINE ;;
    L26) cfg=$ROOT/bench/haproxy/c-spoe-local.cfg; spoe=$ROOT/bench/haproxy/spoe-bench-lean.conf; setup=C ;;
    CR34) cfg=$ROOT/bench/haproxy/c3-spoe-recommended.cfg; setup=C ;;
    R34) cfg=$ROOT/bench/haproxy/c3-spoe-recommended.cfg; spoe=$ROOT/bench/haproxy/spoe-bench-lean.conf; setup=C ;;
    *) echo "bench: unknown versions variant $v" >&2; return 1 ;;
  esac
  E2E_UNIX=$unix E2E_HAPROXY=$hb E2E_CFG=$cfg E2E_SPOE=$spoe E2E_SETUP=$setup E2E_WRK_CONNS=$VERSIONS_CONNS \
    E2E_WRK_SECONDS=$VERSIONS_SECONDS E2E_TXT=$RAW/versions.txt E2E_IDLE=2 e2e_run "$v" "$r" || rc=1
  AGENT=$save
  [ "$rc" = 0 ] && [ "$setup" = C ] && echo "$v $r $E2E_IDLE_TICKS" >> "$RAW/versions-idle.txt"
  return "$rc"
}

# versions_ratio V PLAIN COLUMN [FILE]: the median over the rounds of V's
# COLUMN (3: req/s) divided by PLAIN's in the same round (FILE: versions.txt).
versions_ratio() {
  awk -v v="$1" -v a="$2" -v c="${3:-3}" '$1 == v { x[$2] = $c } $1 == a { y[$2] = $c }
    END { for (r in x) if (r in y && y[r] > 0) printf "%.2f\n", x[r] / y[r] }' "${4:-$RAW/versions.txt}" | median
}

# versions_list VARIANTS SED: the variants to run, on one line: SED adds
# the baseline's (O...) when BENCH_BASELINE is set; HAProxy 3.x's (...34)
# are left out when $HAPROXY3 is not there (two_haproxies says so).
versions_list() {
  local all=$1 v vs=""
  if [ -n "${BENCH_BASELINE:-}" ] && [ -x "${BENCH_BASELINE:-}" ]; then
    all=$(echo "$all" | sed "$2")
  fi
  for v in $all; do
    [[ $v == *34 ]] && [ ! -x "$HAPROXY3" ] && continue
    vs="$vs $v"
  done
  echo "$vs"
}

# two_haproxies: what parts versions and peers need first: haproxy and wrk
# (else false: the part is skipped), HAProxy 3.x's version in H3V, or a
# note that its variants are skipped.
two_haproxies() {
  haproxy_and_wrk || return 1
  H3V=$("$HAPROXY3" -v 2>/dev/null | awk 'NR == 1 { print $3 }')
  if [ ! -x "$HAPROXY3" ]; then
    say "no HAProxy 3.x at $HAPROXY3 (BENCH_HAPROXY3): its variants skipped"
    md "No HAProxy 3.x at \`$HAPROXY3\` (set \`BENCH_HAPROXY3\`): its variants are skipped."
    md ""
  fi
}

part_versions() {
  local r v vs="" h3v plain ratio cr hc ac
  say "== versions (HAProxy 2.6 and 3.x, the same SPOE frontend)"
  md "## 3c. HAProxy 2.6 and 3.x: the same SPOE frontend"
  md ""
  two_haproxies || return 0
  h3v=$H3V
  vs=$(versions_list "$VERSIONS_VARIANTS" 's/\bC26\b/O26 C26/; s/\bC34\b/O34 C34/')
  : > "$RAW/versions.txt"; : > "$RAW/versions-idle.txt"
  local loads="" b worst
  for r in $(seq 1 "$VERSIONS_ROUNDS"); do
    # Each run starts when other work leaves the CPUs (nearly) idle, or
    # after BENCH_VERSIONS_QUIET_WAIT seconds of waiting for it; the
    # round's busiest sample is reported.
    worst=0
    for v in $vs; do
      b=$(wait_quiet "$VERSIONS_QUIET_WAIT")
      [ "$b" -gt "$worst" ] && worst=$b
      [ "$b" -gt 10 ] && say "variant $v round $r starts with the CPUs $b % busy with other work"
      versions_run "$v" "$r" || say "variant $v round $r failed"
    done
    loads="$loads${loads:+, }$worst %"
  done
  md "\`wrk -t1 -c$VERSIONS_CONNS -d${VERSIONS_SECONDS}s --latency\` on CPU 1; HAProxy (\`nbthread 1\`) and the agent"
  md "(1 worker, default configuration) on CPU 0; HAProxy $(haproxy -v 2>/dev/null | awk 'NR == 1 { print $3 }') (\`haproxy\`) and ${h3v:-3.x} (\`$HAPROXY3\`)."
  md "$(echo "$vs" | tr -s ' ' | sed 's/^ //') × $VERSIONS_ROUNDS rounds, each variant started fresh; req/s, p99, CPU: medians over"
  md "the rounds; × plain: the median of the per-round ratios to the same round's plain run of the same"
  md "HAProxy (CR34, R34, UCR34, UR34: to A34, and in brackets to AT34, plain with the same global settings);"
  md "U...: the agent on a unix socket (HAProxy's server \`unix@PATH\`). Idle: the agent's"
  md "CPU over 2 s after the load stopped, HAProxy still connected. Each run waits (up to ${VERSIONS_QUIET_WAIT} s) until other"
  md "work keeps the CPUs under 10 % busy (1 s samples); the busiest sample of each round: $loads."
  [ -n "${BENCH_BASELINE:-}" ] && md "O26, O34: as C26, C34 with the agent \`$BENCH_BASELINE\` (the baseline)."
  md ""
  md "| variant | HAProxy | req/s | × plain | p50 µs | p99 µs | HAProxy CPU µs/req | agent CPU µs/req | agent reads/req | idle agent CPU | errors |"
  md "|---|---|---|---|---|---|---|---|---|---|---|"
  for v in $vs; do
    local rps hv
    rps=$(awk -v v="$v" '$1 == v { print $3 }' "$RAW/versions.txt" | median)
    [ -n "$rps" ] || { md "| $v | | failed | | | | | | | | |"; continue; }
    rps=$(printf '%.0f' "$rps")
    case $v in *26) plain=A26; hv=2.6 ;; *) plain=A34; hv=${h3v:-3.x} ;; esac
    ratio=-
    case $v in
      A26|A34) ratio=1.00 ;;
      AT34) ratio=$(versions_ratio AT34 A34) ;;
      R34|CR34|UR34|UCR34) ratio="$(versions_ratio "$v" A34) ($(versions_ratio "$v" AT34))" ;;
      *) ratio=$(versions_ratio "$v" "$plain") ;;
    esac
    hc=$(awk -v v="$v" '$1 == v { print $7 }' "$RAW/versions.txt" | median)
    ac=$(awk -v v="$v" '$1 == v && $8 != "-" { print $8 }' "$RAW/versions.txt" | median)
    cr=$(awk -v v="$v" '$1 == v && $10 != "-" { print $10 }' "$RAW/versions.txt" | median)
    local idle
    idle=$(awk -v v="$v" -v t="$CLK_TCK" '$1 == v && $3 != "-" { s += $3; n++ }
      END { if (n) printf "%.2f %%", 100 * s / t / (2 * n); else print "-" }' "$RAW/versions-idle.txt")
    md "| $v | $hv | $rps | $ratio | $(awk -v v="$v" '$1 == v { print $5 }' "$RAW/versions.txt" | median) | $(awk -v v="$v" '$1 == v { print $6 }' "$RAW/versions.txt" | median) | $hc | ${ac:--} | ${cr:--} | $idle | $(awk -v v="$v" '$1 == v { s += $9 } END { print s + 0 }' "$RAW/versions.txt") |"
    case $v in
      C26) V_C26=$ratio; V_C26_AGENT=$ac ;;
      C34) V_C34=$ratio; V_C34_AGENT=$ac ;;
      CR34) V_CR34=$(versions_ratio CR34 A34) ;;
      R34) V_R34=$(versions_ratio R34 A34); V_R34T=$(versions_ratio R34 AT34) ;;
      UCR34) V_UCR34=$(versions_ratio UCR34 A34) ;;
      UR34) V_UR34=$(versions_ratio UR34 A34); V_UR34T=$(versions_ratio UR34 AT34) ;;
    esac
  done
  md ""
  md "Every run (variant, round, req/s, requests, p50 µs, p99 µs, HAProxy µs/req, agent µs/req, errors,"
  md "agent read()/write() calls per request): \`$RAW/versions.txt\`; idle ticks: \`versions-idle.txt\`."
  md ""
}

# ----------------------------------------------------------------- peers ---

# part_peers: HAProxy 2.6 and 3.x with the agent as their peer (issue 30,
# docs/PEERS.md), each interleaved with plain HAProxy and HAProxy's own
# stick tables, wrk -c$BENCH_PEERS_CONNS (50, as part versions).
# Variants (BENCH_PEERS_VARIANTS; 26: `haproxy`, 34: $BENCH_HAPROXY3):
#   A26, A34  plain (a-direct.cfg)
#   B26, B34  a stick table, track-sc0 and sc_http_req_rate (b-stick-table.cfg)
#   T26, T34  the peers variant's two tables, no peer: track-sc0 in
#             req_local, table_http_req_rate(req_cluster) in an ACL
#             (p-tables.cfg)
#   P26, P34  the same tables in a peers section with the agent as the
#             node's peer (1 worker, pinned with HAProxy on CPU 0): the
#             node streams req_local to it, it pushes the sums into
#             req_cluster (p-peers.cfg)
#   Q26, Q34  P's control: a second HAProxy as the node's peer in the
#             agent's place (q-peer.cfg), which pushes nothing back: what
#             the peers protocol costs the node with any peer (not in the
#             default)
#   O26, O34  as P26, P34 with the agent $BENCH_BASELINE (an older binary),
#             added after P26 and P34 when it is set
# Ratios: the median of the per-round ratios to the same round's plain run
# of the same HAProxy. P's rows also give the updates the agent counted
# and the sums it pushed per request (its /metrics).
PEERS_CONNS=${BENCH_PEERS_CONNS:-50}
PEERS_SECONDS=${BENCH_PEERS_SECONDS:-8}
PEERS_ROUNDS=${BENCH_PEERS_ROUNDS:-5}
PEERS_VARIANTS=${BENCH_PEERS_VARIANTS:-A26 B26 T26 P26 A34 B34 T34 P34}
PEERS_QUIET_WAIT=${BENCH_PEERS_QUIET_WAIT:-20}

# peers_run V ROUND: one run of variant V (part peers).
peers_run() {
  local v=$1 hb cfg setup=A save=$AGENT rc=0
  case $v in
    *26) hb=haproxy ;;
    *34) hb=$HAPROXY3 ;;
    *) echo "bench: unknown peers variant $v" >&2; return 1 ;;
  esac
  case $v in
    A*) cfg=$ROOT/bench/haproxy/a-direct.cfg ;;
    B*) cfg=$ROOT/bench/haproxy/b-stick-table.cfg ;;
    T*) cfg=$ROOT/bench/haproxy/p-tables.cfg ;;
    P*) cfg=$ROOT/bench/haproxy/p-peers.cfg; setup=P ;;
    Q*) cfg=$ROOT/bench/haproxy/p-peers.cfg; setup=Q ;;
    O*) cfg=$ROOT/bench/haproxy/p-peers.cfg; setup=P; AGENT=$BENCH_BASELINE ;;
    *) echo "bench: unknown peers variant $v" >&2; return 1 ;;
  esac
  E2E_HAPROXY=$hb E2E_CFG=$cfg E2E_SETUP=$setup E2E_WRK_CONNS=$PEERS_CONNS \
    E2E_WRK_SECONDS=$PEERS_SECONDS E2E_TXT=$RAW/peers.txt e2e_run "$v" "$2" || rc=1
  AGENT=$save
  return "$rc"
}

# peers_cpu_ratio V PLAIN: the median over the rounds of PLAIN's HAProxy
# CPU per request divided by V's HAProxy and agent (or peer) CPU per
# request in the same round: what × plain tends to when CPU 0 is the
# bottleneck, much less sensitive than req/s to other work on the machine.
peers_cpu_ratio() {
  awk -v v="$1" -v a="$2" '$1 == v { x[$2] = $7 + ($8 == "-" ? 0 : $8) } $1 == a { y[$2] = $7 }
    END { for (r in x) if (r in y && x[r] > 0) printf "%.2f\n", y[r] / x[r] }' "$RAW/peers.txt" | median
}

# peers_col V COLUMN: the median over the rounds of V's COLUMN in peers.txt.
peers_col() { awk -v v="$1" -v c="$2" '$1 == v && $c != "-" && $c != "" { print $c }' "$RAW/peers.txt" | median; }

part_peers() {
  local r v vs="" h3v plain ratio b worst loads=""
  say "== peers (HAProxy 2.6 and 3.x, the agent as their peer)"
  md "## 3d. HAProxy 2.6 and 3.x with the agent as their peer"
  md ""
  two_haproxies || return 0
  h3v=$H3V
  vs=$(versions_list "$PEERS_VARIANTS" 's/\bP26\b/P26 O26/; s/\bP34\b/P34 O34/')
  : > "$RAW/peers.txt"
  for r in $(seq 1 "$PEERS_ROUNDS"); do
    worst=0
    for v in $vs; do
      b=$(wait_quiet "$PEERS_QUIET_WAIT")
      [ "$b" -gt "$worst" ] && worst=$b
      peers_run "$v" "$r" || say "variant $v round $r failed"
    done
    loads="$loads${loads:+, }$worst %"
  done
  md "\`wrk -t1 -c$PEERS_CONNS -d${PEERS_SECONDS}s --latency\` on CPU 1; HAProxy (\`nbthread 1\`) and the agent"
  md "(1 worker) on CPU 0; HAProxy $(haproxy -v 2>/dev/null | awk 'NR == 1 { print $3 }') (\`haproxy\`) and ${h3v:-3.x} (\`$HAPROXY3\`)."
  md "$(echo "$vs" | tr -s ' ' | sed 's/^ //') × $PEERS_ROUNDS rounds, each variant started fresh; req/s, p99, CPU: medians over"
  md "the rounds; × plain: the median of the per-round ratios to the same round's plain run of the same HAProxy."
  md "Each run waits (up to ${PEERS_QUIET_WAIT} s) until other work keeps the CPUs under 10 % busy; the busiest"
  md "sample of each round: $loads. Updates/req: the nodes' updates the agent counted per request, pushes/req:"
  md "the sums it pushed back (its /metrics)."
  [ -n "${BENCH_BASELINE:-}" ] && md "O26, O34: as P26, P34 with the agent \`$BENCH_BASELINE\` (the baseline)."
  md ""
  md "| variant | HAProxy | req/s | × plain | × plain (CPU) | p50 µs | p99 µs | HAProxy CPU µs/req | agent CPU µs/req | updates/req | pushes/req | errors |"
  md "|---|---|---|---|---|---|---|---|---|---|---|---|"
  for v in $vs; do
    local rps hv up pu
    rps=$(peers_col "$v" 3)
    [ -n "$rps" ] || { md "| $v | | failed | | | | | | | | | |"; continue; }
    rps=$(printf '%.0f' "$rps")
    case $v in *26) plain=A26; hv=2.6 ;; *) plain=A34; hv=${h3v:-3.x} ;; esac
    ratio=$(versions_ratio "$v" "$plain" 3 "$RAW/peers.txt")
    up=$(peers_col "$v" 11); pu=$(peers_col "$v" 12)
    md "| $v | $hv | $rps | $ratio | $(peers_cpu_ratio "$v" "$plain") | $(peers_col "$v" 5) | $(peers_col "$v" 6) | $(peers_col "$v" 7) | $(peers_col "$v" 8 | grep . || echo -) | ${up:--} | ${pu:--} | $(awk -v v="$v" '$1 == v { s += $9 } END { print s + 0 }' "$RAW/peers.txt") |"
    case $v in
      P26) PEERS_P26=$ratio; PEERS_P26_CPU=$(peers_cpu_ratio P26 A26) ;;
      P34) PEERS_P34=$ratio; PEERS_P34_CPU=$(peers_cpu_ratio P34 A34) ;;
    esac
  done
  md ""
  md "Every run (variant, round, req/s, requests, p50 µs, p99 µs, HAProxy µs/req, agent µs/req, errors,"
  md "agent read()/write() calls per request, updates/req, pushes/req): \`$RAW/peers.txt\`."
  md ""
}

# -------------------------------------------------------------- baseline ---

# part_baseline: this agent against an older binary ($BENCH_BASELINE), in one
# interleaved run: per round, old then new, each for one spop_load ratelimit
# max run (1 worker) and one variant C run. What a refactoring costs.
part_baseline() {
  local base=${BENCH_BASELINE:-} rounds=${BENCH_BASELINE_ROUNDS:-5} r b port hport line save=$AGENT
  local bv=${BENCH_BASELINE_VARIANT:-C}
  say "== baseline (this agent vs ${base:-?}, interleaved)"
  md "## 5. Before/after: this agent vs a baseline binary"
  md ""
  if [ -z "$base" ] || [ ! -x "$base" ] || [ ! -x "$LOAD" ]; then
    say "BENCH_BASELINE unset or not executable, or spop_load not built: skipped"
    md "\`BENCH_BASELINE=/path/to/old/spoa-ratelimit\` not given (or spop_load not built): skipped."; md ""
    return 0
  fi
  : > "$RAW/baseline-spop.txt"; : > "$RAW/baseline-http.txt"
  rm -f "$RAW"/baseline-e2e-*.txt
  for r in $(seq 1 "$rounds"); do
    for b in old new; do
      if [ "$b" = old ]; then AGENT=$base; else AGENT=$save; fi
      free_port port || { AGENT=$save; return 1; }
      start_agent "$port" 0 -w 1 || { AGENT=$save; return 1; }
      line=$(spop_run "baseline-$b" 1 -p "$port" -m ratelimit)
      stop_agent
      echo "$b $r $(field "$line" msgs_per_s) $(field "$line" agent_cpu_us)" >> "$RAW/baseline-spop.txt"
      say "baseline $b round=$r $line"
      if command -v wrk >/dev/null 2>&1; then
        # The HTTP front alone, one check at a time per connection (as
        # part 2b's w1-d1).
        free_port port && free_port hport || { AGENT=$save; return 1; }
        printf '{"http_listen": "127.0.0.1:%s", "namespaces": [{"name": "default", "window_sizes": [60], "limit": 1000000000}]}\n' \
          "$hport" > "$RAW/baseline-http.json"
        start_agent "$port" 0 -w 1 -c "$RAW/baseline-http.json" || { AGENT=$save; return 1; }
        http_lua "$RAW/http-1.lua" 1
        "${PIN1[@]}" wrk -t1 -c"$HTTP_CONNS" -d1s -s "$RAW/http-1.lua" "http://127.0.0.1:$hport" > /dev/null 2>&1
        "${PIN1[@]}" wrk -t1 -c"$HTTP_CONNS" -d"${HTTP_SECONDS}s" --latency -s "$RAW/http-1.lua" \
          "http://127.0.0.1:$hport" > "$RAW/baseline-http-$b-$r.txt" 2>&1
        stop_agent
        echo "$b $r $(wrk_field "$RAW/baseline-http-$b-$r.txt" rps)" >> "$RAW/baseline-http.txt"
        say "baseline $b round=$r http checks/s=$(wrk_field "$RAW/baseline-http-$b-$r.txt" rps)"
      fi
      if command -v haproxy >/dev/null 2>&1 && command -v wrk >/dev/null 2>&1; then
        for v in $bv; do
          E2E_TXT=$RAW/baseline-e2e-$v-$b.txt e2e_run "$v" "$r" || say "baseline $b variant $v round $r failed"
        done
      fi
    done
  done
  AGENT=$save
  md "Baseline: \`$base\`; this agent: \`$AGENT\`. $rounds rounds, each: baseline then this agent, for"
  md "\`spop_load -m ratelimit\` at max (1 worker, as in part 2), the HTTP front under wrk (1 worker, one check at a"
  md "time per connection, as part 2b) and one run of each variant of \"$bv\" (as in part 3). Medians."
  md ""
  md "| measurement | baseline | this agent | change |"
  md "|---|---|---|---|"
  bl_row() { # LABEL OLD NEW
    md "| $1 | ${2:--} | ${3:--} | $(awk -v o="${2:-0}" -v n="${3:-0}" 'BEGIN { if (o > 0) printf "%+.1f %%", (n / o - 1) * 100; else print "-" }') |"
  }
  bl_col() { # FILE COLUMN [TAG]: the median of a column (of the rows tagged TAG)
    awk -v c="$2" -v t="${3:-}" 't == "" || $1 == t { print $c }' "$1" | median
  }
  bl_row "SPOP ratelimit msgs/s, 1 worker" "$(bl_col "$RAW/baseline-spop.txt" 3 old)" \
    "$(bl_col "$RAW/baseline-spop.txt" 3 new)"
  bl_row "SPOP agent CPU µs/msg" "$(bl_col "$RAW/baseline-spop.txt" 4 old)" \
    "$(bl_col "$RAW/baseline-spop.txt" 4 new)"
  if [ -s "$RAW/baseline-http.txt" ]; then
    bl_row "HTTP checks/s, 1 worker (wrk -c$HTTP_CONNS)" "$(bl_col "$RAW/baseline-http.txt" 3 old)" \
      "$(bl_col "$RAW/baseline-http.txt" 3 new)"
  fi
  for v in $bv; do
    local o=$RAW/baseline-e2e-$v-old.txt n=$RAW/baseline-e2e-$v-new.txt
    [ -s "$o" ] && [ -s "$n" ] || continue
    bl_row "variant $v req/s" "$(bl_col "$o" 3)" \
      "$(bl_col "$n" 3)"
    bl_row "variant $v agent CPU µs/req" "$(bl_col "$o" 8)" \
      "$(bl_col "$n" 8)"
    if [ -n "$(bl_col "$n" 11)" ]; then
      bl_row "variant $v Redis commands/req" "$(bl_col "$o" 11)" \
        "$(bl_col "$n" 11)"
      bl_row "variant $v Redis command µs/req" "$(bl_col "$o" 12)" \
        "$(bl_col "$n" 12)"
      bl_row "variant $v Redis CPU µs/req" "$(bl_col "$o" 13)" \
        "$(bl_col "$n" 13)"
    fi
  done
  md ""
  md "Every run: \`$RAW/baseline-spop.txt\` (binary, round, msgs/s, agent µs/msg), \`baseline-e2e-V-old|new.txt\` (as e2e.txt)."
  md ""
}

# ------------------------------------------------------------------- top ---

# part_top: what the heavy-hitters summaries (GET /top) cost the hit path:
# the agent (1 worker) under spop_load -m ratelimit at max, over
# $BENCH_KEYS keys, with the default summaries (top_keys 64, top_sample 16),
# with every hit recorded (top_sample 1) and with none (top_keys 0),
# interleaved, BENCH_TOP_ROUNDS (5) rounds; medians of msgs/s and agent
# CPU per message.
part_top() {
  local rounds=${BENCH_TOP_ROUNDS:-5} r v port line
  say "== top (the heavy-hitters summaries on the hit path)"
  md "## 6. The heavy-hitters summaries on the hit path (part \`top\`)"
  md ""
  if [ ! -x "$LOAD" ]; then
    say "spop_load not built: skipped"; md "spop_load not built: skipped."; md ""
    return 0
  fi
  printf '{"top_keys": 64, "top_sample": 16}\n' > "$RAW/top-default.json"
  printf '{"top_keys": 64, "top_sample": 1}\n' > "$RAW/top-every.json"
  printf '{"top_keys": 0}\n' > "$RAW/top-off.json"
  : > "$RAW/top.txt"
  for r in $(seq 1 "$rounds"); do
    for v in off default every; do
      free_port port || return 1
      start_agent "$port" 0 -w 1 -c "$RAW/top-$v.json" || return 1
      line=$(spop_run "top-$v" 1 -p "$port" -m ratelimit)
      stop_agent
      echo "$v $r $(field "$line" msgs_per_s) $(field "$line" agent_cpu_us)" >> "$RAW/top.txt"
      say "top $v round=$r msgs/s=$(field "$line" msgs_per_s) agent_us/msg=$(field "$line" agent_cpu_us)"
    done
  done
  local off_m off_c
  off_m=$(awk '$1 == "off" { print $3 }' "$RAW/top.txt" | median)
  off_c=$(awk '$1 == "off" { print $4 }' "$RAW/top.txt" | median)
  md "\`spop_load -m ratelimit\` at max ($KEYS keys, $CONNS connections, $INFLIGHT in flight each), the agent"
  md "(1 worker) on CPU 0, the load on CPU 1; off, default, every hit interleaved, $rounds rounds; medians."
  md ""
  md "| summaries | msgs/s | vs off | agent CPU µs/msg | vs off |"
  md "|---|---|---|---|---|"
  for v in off default every; do
    local m c
    m=$(awk -v v="$v" '$1 == v { print $3 }' "$RAW/top.txt" | median)
    c=$(awk -v v="$v" '$1 == v { print $4 }' "$RAW/top.txt" | median)
    md "| $v ($(tr -d '{}"\n' < "$RAW/top-$v.json")) | $m | $(awk -v a="$m" -v b="$off_m" 'BEGIN { printf "%+.1f %%", (a / b - 1) * 100 }') | $c | $(awk -v a="$c" -v b="$off_c" 'BEGIN { printf "%+.1f %%", (a / b - 1) * 100 }') |"
  done
  md ""
}

# ----------------------------------------------------------------- store ---

# store_window SECONDS CMD...: runs CMD (or sleeps SECONDS without one) and
# prints "CALLS USEC CPU_US SECONDS": what Redis ($STORE_PORT) spent meanwhile
# (redis_stats) and the wall time it took.
store_window() {
  local secs=$1 a b t0 t1
  shift
  a=$(redis_stats "$STORE_PORT"); t0=$(date +%s.%N)
  if [ $# -gt 0 ]; then "$@" > /dev/null 2>&1; else sleep "$secs"; fi
  b=$(redis_stats "$STORE_PORT"); t1=$(date +%s.%N)
  printf '%s %s %s %s\n' "$a" "$b" "$t0" "$t1" | awk '{ printf "%d %d %.0f %.3f\n", $4 - $1, $5 - $2, $6 - $3, $8 - $7 }'
}

# store_monitor SECONDS: the commands clients sent Redis ($STORE_PORT) per
# second over SECONDS (MONITOR, which shows what scripts run as "[0 lua]":
# left out), our own MONITOR and INFO excepted.
store_monitor() {
  timeout "$1" redis-cli -p "$STORE_PORT" MONITOR 2>/dev/null |
    awk -v s="$1" '/^[0-9.]+ \[[0-9]+ [^]]*\] "/ && !/ lua\] / && !/"(MONITOR|INFO)"/ { n++ }
                   END { printf "%.1f\n", n / s }'
}

# part_store: what one node costs Redis (issue 18's cost model): one agent
# (1 worker), one namespace with sync_rate 0.1 s and admission auto, its
# own Redis; idle with one key known, then 1,000 hits/s on one key, then
# on 100 keys (spop_load -r 1000: limit 1,000,000, far from it). Per
# second: the commands it sent (MONITOR, for 3 s after the rest), the µs
# INFO commandstats gives the commands it sends and Redis's CPU (INFO
# cpu). With BENCH_BASELINE, the baseline binary too, interleaved.
# Rounds: BENCH_STORE_ROUNDS (3), seconds: BENCH_STORE_SECONDS (10).
part_store() {
  local rounds=${BENCH_STORE_ROUNDS:-3} secs=${BENCH_STORE_SECONDS:-10} save=$AGENT
  local r b bins=(new) port rpid cfg w ph lp
  say "== store (what one node costs Redis)"
  md "## 6. What one node costs Redis"
  md ""
  if [ ! -x "$LOAD" ] || ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
    say "spop_load, redis-server or redis-cli missing: skipped"
    md "spop_load, redis-server or redis-cli missing: skipped."; md ""
    return 0
  fi
  [ -n "${BENCH_BASELINE:-}" ] && [ -x "$BENCH_BASELINE" ] && bins=(old new)
  : > "$RAW/store.txt"
  for r in $(seq 1 "$rounds"); do
    for b in "${bins[@]}"; do
      if [ "$b" = old ]; then AGENT=$BENCH_BASELINE; else AGENT=$save; fi
      free_port STORE_PORT && free_port port || { AGENT=$save; return 1; }
      "${PIN1[@]}" redis-server --port "$STORE_PORT" --bind 127.0.0.1 --save "" --appendonly no \
        > "$RAW/redis-store-$STORE_PORT.log" 2>&1 &
      rpid=$!
      PIDS+=("$rpid")
      for w in $(seq 1 50); do listening "$STORE_PORT" && break; sleep 0.05; done
      cfg=$RAW/agent-store.json
      printf '{"namespaces":[{"name":"default","window_sizes":[60],"sync_rate":0.1,"strategy":"redis","strategy_opts":{"host":"127.0.0.1","port":%s,"timeout_ms":100}}]}\n' \
        "$STORE_PORT" > "$cfg"
      if ! start_agent "$port" 0 -w 1 -c "$cfg"; then
        stop_pid "$rpid"; forget "$rpid"; AGENT=$save; return 1
      fi
      "${PIN1[@]}" "$LOAD" -p "$port" -c 1 -k 1 -n 1 -N 1 -d 0.5 -w 0 -q > /dev/null 2>&1
      sleep 2
      ph="$(store_window "$secs") $(store_monitor 3)"
      echo "$b $r idle $ph" >> "$RAW/store.txt"; say "store $b round=$r idle: $ph"
      for w in 1 100; do
        "${PIN1[@]}" "$LOAD" -p "$port" -c 1 -k 16 -n "$w" -r 1000 -d "$((secs + 5))" -w 0 -q \
          > /dev/null 2>&1 &
        lp=$!
        PIDS+=("$lp")
        sleep 1
        ph="$(store_window "$secs") $(store_monitor 3)"
        wait "$lp" 2>/dev/null; forget "$lp"
        echo "$b $r 1k-${w}key $ph" >> "$RAW/store.txt"; say "store $b round=$r 1k/s, $w key(s): $ph"
      done
      stop_agent
      stop_pid "$rpid"; forget "$rpid"
    done
  done
  AGENT=$save
  md "One agent (1 worker) and its own Redis, namespace \"default\" with \`sync_rate\` 0.1 s and admission auto"
  md "(exact: grants far from the limit). idle: one key known, nothing sent for ${secs} s. 1k/s: \`spop_load -r 1000\`"
  md "(limit 1,000,000) for ${secs} s on one key, then on 100. Per second, medians over $rounds rounds: the commands the"
  md "agent sent (MONITOR, 3 s more), the µs INFO commandstats gives the ones it sends (EVALSHA, EVAL, HMGET; a"
  md "script's include what it runs, and an HMGET inside a push script counts twice), Redis's own CPU (INFO cpu,"
  md "user + sys, ms/s: Redis's own timers included, about 2-3 ms/s here with no client at all)."
  md ""
  md "| phase | binary | commands/s | command µs/s | Redis CPU ms/s |"
  md "|---|---|---|---|---|"
  for ph in idle 1k-1key 1k-100key; do
    for b in "${bins[@]}"; do
      md "| $ph | $([ "$b" = old ] && echo baseline || echo this agent) | $(awk -v b="$b" -v p="$ph" '$1 == b && $3 == p { print $8 }' "$RAW/store.txt" | median) | $(awk -v b="$b" -v p="$ph" '$1 == b && $3 == p { printf "%.0f\n", $5 / $7 }' "$RAW/store.txt" | median) | $(awk -v b="$b" -v p="$ph" '$1 == b && $3 == p { printf "%.2f\n", $6 / $7 / 1000 }' "$RAW/store.txt" | median) |"
    done
  done
  md ""
  md "Every run: \`$RAW/store.txt\` (binary, round, phase, calls, command µs, CPU µs, seconds, commands/s by MONITOR)."
  md ""
}

# ------------------------------------------------------------------ sync ---

part_sync() {
  local b out rc any=""
  say "== sync"
  md "## 4. Synchronisation (bench_sync_*)"
  md ""
  for b in bench_sync_redis bench_sync_pg; do
    [ -x "$BDIR/bench/$b" ] || continue
    any=1
    out=$(timeout 300 "$BDIR/bench/$b" 2>&1); rc=$?
    printf '%s\n' "$out"
    md "\`$BUILD/bench/$b\` (exit status $rc):"
    md ""
    md '```'
    md "$out"
    md '```'
    md ""
  done
  if [ -z "$any" ]; then
    say "no bench_sync_* built: skipped"
    md "No \`bench_sync_*\` built: skipped."
    md ""
  fi
}

# --------------------------------------------------------------- profile ---

# Where the worker's time goes, two ways: perf samples (cpu-clock, which
# works without hardware counters) under the closed-loop load, kernel
# included; and callgrind's exact instruction counts (user space only) for
# a fixed number of messages, immune to other load on the machine.
part_profile() {
  local port mode w pp data cg n=100000 total
  say "== profile"
  md "## Profile of one worker"
  md ""
  # BENCH_PROFILE_E2E=only: only the agent behind HAProxy (profile_e2e).
  if [ "${BENCH_PROFILE_E2E:-}" = only ]; then
    profile_e2e
    return 0
  fi
  if perf stat -e task-clock true > /dev/null 2>&1; then
    for mode in ratelimit noop; do
      free_port port || return 1
      start_agent "$port" 0 -w 1 || return 1
      w=$(pgrep -P "$AGENT_PID" | head -n 1)
      data=$RAW/perf-$mode.data
      perf record -q -e cpu-clock -F 4999 -p "$w" -o "$data" -- sleep $((SPOP_SECONDS + 1)) \
        > /dev/null 2>&1 &
      pp=$!
      PIDS+=("$pp")
      spop_run "profile-$mode" 1 -p "$port" -m "$mode" > /dev/null
      wait "$pp" 2>/dev/null; forget "$pp"
      stop_agent
      md "perf, mode $mode: \`perf record -e cpu-clock -F 4999 -p WORKER\` during \`spop_load -m $mode\`"
      md "(closed loop, pinned as in part 2); \`perf report --no-children --sort dso\`, then \`--sort symbol\`:"
      md ""
      md '```'
      md "$(perf report -i "$data" --no-children --sort dso --stdio 2>/dev/null |
            grep -E '^ +[0-9.]+%' | head -n 4)"
      md ""
      md "$(perf report -i "$data" --no-children --sort symbol --stdio 2>/dev/null |
            grep -E '^ +[0-9.]+%' | sed 's/ *$//' | head -n 20)"
      md '```'
      md ""
      say "perf $mode: $data"
    done
  else
    md "perf does not work here: perf part skipped."
    md ""
  fi
  if ! command -v valgrind > /dev/null 2>&1; then
    md "valgrind missing: callgrind part skipped."; md ""
    profile_e2e
    return 0
  fi
  # long: ratelimit with keys of 120 bytes (-K), each kept by its digest.
  local margs
  for mode in ratelimit noop long; do
    margs=(-m "$mode")
    [ "$mode" = long ] && margs=(-m ratelimit -K 120)
    free_port port || return 1
    # Only what runs inside worker_run() is counted: not the master's
    # start-up, which the forked worker would otherwise inherit.
    valgrind --tool=callgrind --trace-children=yes --log-file="$RAW/cg-$mode-%p.log" \
      --callgrind-out-file="$RAW/cg-$mode-%p.out" --toggle-collect=worker_run \
      "$AGENT" -l "127.0.0.1:$port" -w 1 > "$RAW/agent-cg-$mode.log" 2>&1 &
    AGENT_PID=$!
    PIDS+=("$AGENT_PID")
    for i in $(seq 1 200); do
      listening "$port" && [ -n "$(pgrep -P "$AGENT_PID")" ] && break
      sleep 0.1
    done
    sleep 0.5
    w=$(pgrep -P "$AGENT_PID" | head -n 1)
    timeout 300 "$LOAD" -q -p "$port" -c "$CONNS" -k "$INFLIGHT" -n "$KEYS" -w 0 -d 600 -N "$n" \
      "${margs[@]}" > /dev/null 2>&1
    stop_agent
    cg=$RAW/cg-$mode-$w.out
    [ -s "$cg" ] || { md "callgrind, mode $mode: no output"; continue; }
    total=$(callgrind_annotate "$cg" 2>/dev/null | sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,)
    md "callgrind, mode $mode: the worker executed $(awk -v t="$total" -v n="$n" 'BEGIN { printf "%.0f", t / n }') instructions per message in user space"
    md "($n messages, \`spop_load -c $CONNS -k $INFLIGHT -N $n ${margs[*]}\`). Top functions, self (exclusive) then inclusive:"
    md ""
    md "| self: function | % | instr/msg |"
    md "|---|---|---|"
    callgrind_annotate --auto=no "$cg" 2>/dev/null | cg_rows "$n" 12 >> "$MD"
    md ""
    md "| inclusive: function | % | instr/msg |"
    md "|---|---|---|"
    callgrind_annotate --auto=no --inclusive=yes "$cg" 2>/dev/null |
      cg_rows "$n" 40 | grep -E '\| (handler_notify|put_result[^ ]*|snprintf|spop_put_set_var|rl_hit|rl_hit_skey|hash_digest|shm_find|spop_msg_next|spop_args_next|spop_frame_decode|spop_frame_begin|window_weight|key_text|msg_suffix) \(' >> "$MD"
    md ""
    say "callgrind $mode: $cg"
  done

  profile_e2e
}

# The agent behind HAProxy (variant C, or BENCH_PROFILE_VARIANT), on HAProxy
# 2.6 and on 3.x (BENCH_HAPROXY3, if present), wrk -c50: system calls and
# context switches per request of both, and where both spend their time,
# kernel included.
profile_e2e() {
  local pv=${BENCH_PROFILE_VARIANT:-C}
  if perf stat -e raw_syscalls:sys_enter true > /dev/null 2>&1 && command -v wrk > /dev/null 2>&1 &&
     command -v haproxy > /dev/null 2>&1; then
    local reqs hv name hb who f
    md "Variant $pv (part 3's configuration; the agent's default configuration), \`wrk -c$VERSIONS_CONNS\`, on each"
    md "HAProxy, the agent's worker and HAProxy watched for the whole wrk run (\`perf stat -e"
    md "raw_syscalls:sys_enter,context-switches,syscalls:sys_enter_{read,recvfrom,recvmsg,sendto,sendmsg,epoll_wait}\`,"
    md "\`perf record -e cpu-clock -F 4999\`; perf adds its own cost, so CPU per request is higher than in parts 3 and 3c)."
    md "Per request:"
    md ""
    md "| HAProxy | process | system calls | read/recv | send | epoll_wait | context switches | CPU µs |"
    md "|---|---|---|---|---|---|---|---|"
    for hv in 26 34; do
      hb=haproxy
      if [ "$hv" = 34 ]; then
        [ -x "$HAPROXY3" ] || continue
        hb=$HAPROXY3
      fi
      name=$pv$hv
      E2E_WATCH=1 E2E_HAPROXY=$hb E2E_SETUP=$pv E2E_CFG=$(variant_cfg "$pv") E2E_WRK_CONNS=$VERSIONS_CONNS \
        E2E_TXT=$RAW/e2e-profile.txt e2e_run "$name" profile || continue
      reqs=$(wrk_field "$RAW/wrk-$name-profile.txt" requests)
      for who in haproxy agent; do
        f=$RAW/e2e-$name-$who-syscalls.txt
        md "| $("$hb" -v 2>/dev/null | awk 'NR == 1 { print $3 }') | $who | $(awk -F, -v n="$reqs" '
            $3 ~ /raw_syscalls/ { a = $1 } $3 ~ /enter_(read|recvfrom|recvmsg)$/ { r += $1 }
            $3 ~ /enter_(sendto|sendmsg)$/ { w += $1 } $3 ~ /epoll_wait/ { e = $1 } $3 ~ /context-switches/ { c = $1 }
            END { printf "%.2f | %.2f | %.2f | %.2f | %.2f", a / n, r / n, w / n, e / n, c / n }' "$f") | $(
            awk -v v="$name" -v c="$([ "$who" = haproxy ] && echo 7 || echo 8)" '$1 == v { print $c }' "$RAW/e2e-profile.txt") |"
      done
    done
    md ""
    for hv in 26 34; do
      name=$pv$hv
      for who in haproxy agent; do
        f=$RAW/perf-e2e-$name-$who.data
        [ -s "$f" ] || continue
        md "$who samples behind HAProxy ${hv:0:1}.${hv:1} (\`perf report --sort dso\`, then \`--sort symbol\`):"
        md ""
        md '```'
        md "$(perf report -i "$f" --no-children --sort dso --stdio 2>/dev/null | grep -E '^ +[0-9.]+%' | head -n 4)"
        md ""
        md "$(perf report -i "$f" --no-children --sort symbol --stdio 2>/dev/null |
              grep -E '^ +[0-9.]+%' | sed 's/ *$//' | head -n 16)"
        md '```'
        md ""
      done
    done
  fi
}

# cg_rows MESSAGES COUNT: the first COUNT function lines of callgrind_annotate
# (stdin) as Markdown rows: function (file), %, instructions per message.
cg_rows() {
  sed 's/( */(/' | awk -v n="$1" -v max="$2" '
    /file:function/ { on = 1; next }
    on && /^-+$/ { next }
    on && NF == 0 { exit }
    on && rows < max {
      ir = $1; gsub(/,/, "", ir); pct = $2; gsub(/[()]/, "", pct)
      fn = $3; k = split(fn, parts, ":"); f = parts[k]; file = parts[1]; sub(/.*\//, "", file)
      if (seen[f]++) next        # listed once per path spelling
      rows++
      printf "| %s (%s) | %s | %.0f |\n", f, file, pct, ir / n }'
}

# ----------------------------------------------------------------- alloc ---

# Heap allocations of a worker (valgrind memcheck's "total heap usage") for
# N and 10 N messages sent over the same time (12 s, paced), so that what
# depends on time only (libev grows an internal array the first time a
# connection's timer fires, 5 s in) is the same in both runs: equal counts
# mean nothing is allocated per message.
part_alloc() {
  local n port w m log mlog line i
  say "== alloc"
  md "## Heap allocations per message (valgrind)"
  md ""
  if ! command -v valgrind >/dev/null 2>&1; then
    md "valgrind missing: skipped."; md ""
    return 0
  fi
  md "| messages | worker: total heap usage | master: total heap usage |"
  md "|---|---|---|"
  for n in 10000 100000; do
    free_port port || return 1
    rm -f "$RAW"/vg-*.log
    valgrind --tool=memcheck --trace-children=yes --log-file="$RAW/vg-%p.log" \
      "$AGENT" -l "127.0.0.1:$port" -w 1 > "$RAW/agent-vg-$n.log" 2>&1 &
    AGENT_PID=$!
    PIDS+=("$AGENT_PID")
    for i in $(seq 1 200); do
      listening "$port" && [ -n "$(pgrep -P "$AGENT_PID")" ] && break
      sleep 0.1
    done
    sleep 0.5
    w=$(pgrep -P "$AGENT_PID" | head -n 1)
    line=$(timeout 300 "$LOAD" -q -p "$port" -c 1 -k 64 -w 0 -d 600 -N "$n" -r $((n / 12)) 2>&1 |
           grep '^RESULT')
    m=$AGENT_PID
    stop_agent
    log=$(sed -n 's/.*total heap usage: //p' "$RAW/vg-$w.log" 2>/dev/null)
    mlog=$(sed -n 's/.*total heap usage: //p' "$RAW/vg-$m.log" 2>/dev/null)
    md "| $n ($(field "$line" msgs) ACKed in $(field "$line" duration_s) s, errors $(field "$line" errors)) | ${log:-?} | ${mlog:-?} |"
    say "alloc $n messages: worker: ${log:-?}"
  done
  md ""
  md "Command: \`valgrind --trace-children=yes --log-file=vg-%p.log spoa-ratelimit -l 127.0.0.1:PORT -w 1\`, then"
  md "\`spop_load -p PORT -c 1 -k 64 -w 0 -N MESSAGES -r MESSAGES/12\`, then SIGTERM; the worker's log (its pid) has its summary."
  md ""
}

# ------------------------------------------------------------------ main ---

# ------------------------------------------------------------------ http ---

HTTP_SECONDS=${BENCH_HTTP_SECONDS:-5}
HTTP_ROUNDS=${BENCH_HTTP_ROUNDS:-3}
HTTP_CONNS=${BENCH_HTTP_CONNS:-32}

# http_lua FILE DEPTH: a wrk script asking /ratelimit for KEYS keys in
# turn, DEPTH requests pipelined per write (1: one at a time), each far
# below its namespace's limit (1e9, configured: an HTTP caller names none
# where none is; the check, not a denial, is measured).
http_lua() {
  cat > "$1" <<LUA
local n = 0
request = function()
  local r = {}
  for i = 1, $2 do
    n = n + 1
    r[i] = wrk.format("GET", "/ratelimit?key=k" .. (n % $KEYS) .. "&window=60")
  end
  return table.concat(r)
end
LUA
}

part_http() {
  local w d port hport pin r cfg f rps p99 a0 a1 reqs acpu tag
  say "== http (the HTTP front alone, wrk)"
  md "## 2b. HTTP front: the agent alone (wrk)"
  md ""
  if ! command -v wrk >/dev/null 2>&1 || [ ! -x "$AGENT" ]; then
    say "wrk or the agent missing: skipped"; md "wrk or the agent missing: skipped."; md ""
    return 0
  fi
  : > "$RAW/http.txt"; rm -f "$RAW/http-w1-d16"
  for w in 1 2; do
    free_port port && free_port hport || return 1
    cfg=$RAW/http-agent.json
    printf '{"http_listen": "127.0.0.1:%s", "namespaces": [{"name": "default", "window_sizes": [60], "limit": 1000000000}]}\n' \
      "$hport" > "$cfg"
    if [ "$w" = 1 ]; then pin=0; else pin=none; fi
    start_agent "$port" "$pin" -w "$w" -c "$cfg" || return 1
    for d in 1 16; do
      http_lua "$RAW/http-$d.lua" "$d"
      for r in $(seq 1 "$HTTP_ROUNDS"); do
        f=$RAW/http-w$w-d$d-$r.txt
        # 1 s warm-up, then the measured run.
        "${PIN1[@]}" wrk -t1 -c"$HTTP_CONNS" -d1s -s "$RAW/http-$d.lua" "http://127.0.0.1:$hport" \
          > /dev/null 2>&1
        a0=$(agent_ticks)
        if [ "$w" = 1 ]; then
          "${PIN1[@]}" wrk -t1 -c"$HTTP_CONNS" -d"${HTTP_SECONDS}s" --latency -s "$RAW/http-$d.lua" \
            "http://127.0.0.1:$hport" > "$f" 2>&1
        else
          wrk -t1 -c"$HTTP_CONNS" -d"${HTTP_SECONDS}s" --latency -s "$RAW/http-$d.lua" \
            "http://127.0.0.1:$hport" > "$f" 2>&1
        fi
        a1=$(agent_ticks)
        rps=$(wrk_field "$f" rps); reqs=$(wrk_field "$f" requests); p99=$(wrk_field "$f" p99_us)
        acpu=$(awk -v d=$((a1 - a0)) -v t="$CLK_TCK" -v n="${reqs:-0}" 'BEGIN { if (n > 0) printf "%.2f", d / t / n * 1e6; else print "-" }')
        echo "w$w-d$d $r ${rps:-0} ${p99:-0} $acpu $(wrk_field "$f" non2xx) $(wrk_field "$f" sockerr)" >> "$RAW/http.txt"
        say "http workers=$w pipeline=$d round=$r checks/s=$rps p99_us=$p99 agent_us/check=$acpu non2xx=$(wrk_field "$f" non2xx)"
      done
    done
    stop_agent
  done
  md "\`wrk -t1 -c$HTTP_CONNS -d${HTTP_SECONDS}s --latency\` with a Lua script asking \`/ratelimit\` for $KEYS keys in turn"
  md "(keep-alive; every check counted, none over its limit), one request at a time per connection or 16 pipelined."
  md "One worker: agent on CPU 0, wrk on CPU 1; two workers: nothing pinned. Median of $HTTP_ROUNDS runs (by"
  md "checks/s), 1 s warm-up each. p99 is per wrk request (16 checks when pipelined)."
  md ""
  md "| workers | pipelined | checks/s | p99 µs | agent CPU µs/check | non-2xx | socket errors |"
  md "|---|---|---|---|---|---|---|"
  for tag in w1-d1 w1-d16 w2-d1 w2-d16; do
    awk -v t="$tag" '$1 == t' "$RAW/http.txt" | sort -k3 -g | awk '{ v[NR] = $0 } END { if (NR) print v[int((NR + 1) / 2)] }' |
      while read -r t _ rps p99 acpu non sock; do
        w=${t%%-*}; d=${t##*-d}
        md "| ${w#w} | $d | $(printf '%.0f' "$rps") | $p99 | $acpu | $non | $sock |"
        [ "$t" = w1-d16 ] && echo "$rps" > "$RAW/http-w1-d16"
      done
  done
  md ""
}

# ----------------------------------------------------------------- nginx ---

NGINX_PID=""
NGINX_MODULE=${BENCH_NGINX_MODULE:-$ROOT/build/nginx/ngx_http_spoa_ratelimit_module.so}
# nginx_start CONF: nginx in the foreground on CONF (prefix $RAW/nginx).
nginx_start() {
  local port=$2 i
  mkdir -p "$RAW/nginx"
  "${PIN0[@]}" nginx -p "$RAW/nginx" -c "$1" \
    -g "daemon off; pid $RAW/nginx/nginx.pid; error_log $RAW/nginx/error.log; worker_processes 1;" &
  NGINX_PID=$!
  PIDS+=("$NGINX_PID")
  for i in $(seq 1 100); do listening "$port" && return 0; alive "$NGINX_PID" || break; sleep 0.05; done
  echo "bench: nginx did not start" >&2; tail -5 "$RAW/nginx/error.log" >&2
  return 1
}

nginx_stop() { [ -n "$NGINX_PID" ] && { stop_pid "$NGINX_PID" 5; forget "$NGINX_PID"; NGINX_PID=""; }; }

# nginx_conf OUT VARIANT FRONT APP AGENT_HTTP AGENT_SPOP: the nginx
# examples on these ports (their limits are the agent's: see part_nginx).
#   alone     nginx-examples/nginx.conf without its auth_request lines:
#             nginx proxying to the app
#   limitreq  the same with nginx's own limit_req in location / (per
#             client IP, a rate out of reach)
#   auth      nginx-examples/nginx.conf: auth_request to the HTTP front
#   module    nginx-examples/nginx-module.conf: the module, SPOP
nginx_conf() {
  local out=$1 v=$2 fe=$3 app=$4 ah=$5 spop=$6 src=nginx.conf
  [ "$v" = module ] && src=nginx-module.conf
  sed -e "s/127\.0\.0\.1:8081/127.0.0.1:$ah/; s/127\.0\.0\.1:8082/127.0.0.1:$app/" \
      -e "s/127\.0\.0\.1:12345/127.0.0.1:$spop/" \
      -e "s|^include /etc/nginx/modules-enabled/\*.conf;|load_module $NGINX_MODULE;|" \
      -e "s/listen 8080;/listen 127.0.0.1:$fe;/" \
      -e "s|/etc/nginx/spoa-ratelimit-check.conf|$ROOT/nginx-examples/spoa-ratelimit-check.conf|" \
      -e "s|^http {|http {\n    access_log off;\n    client_body_temp_path $RAW/nginx/body;\n    proxy_temp_path $RAW/nginx/proxy;\n    fastcgi_temp_path $RAW/nginx/fastcgi;\n    uwsgi_temp_path $RAW/nginx/uwsgi;\n    scgi_temp_path $RAW/nginx/scgi;\n    server { listen 127.0.0.1:$app; location / { return 200 \"app\\\\n\"; } }|" \
      "$ROOT/nginx-examples/$src" |
    case $v in
      auth|module) cat ;;
      alone) sed -e '/auth_request/d; /$rl_/d' ;;
      limitreq) sed -e '/auth_request/d; /$rl_/d' \
          -e "s|^http {|http {\n    limit_req_zone \$binary_remote_addr zone=bench:10m rate=1000000r/s;|" \
          -e '0,/^        location \/ {/s//        location \/ {\n            limit_req zone=bench burst=1000000 nodelay;/' ;;
    esac |
    sed -e '/^worker_processes/d' > "$out"
}

GRPC_SECONDS=${BENCH_GRPC_SECONDS:-5}
GRPC_ROUNDS=${BENCH_GRPC_ROUNDS:-3}

# The gRPC front: one worker on CPU 0, h2load on CPU 1, one connection, 64
# streams in flight, the same ShouldRateLimit (one descriptor, counted,
# never over its limit) for GRPC_SECONDS; p99 from h2load's log of every
# request.
part_grpc() {
  local port gport cfg yaml body url r f rps p99 n
  say "== grpc (the gRPC front: one worker, one connection, h2load -m64)"
  md "## 2c. gRPC front: one worker, one HTTP/2 connection (h2load)"
  md ""
  if ! command -v h2load >/dev/null 2>&1 || [ ! -x "$AGENT" ] ||
     ! /usr/bin/python3 -c 'import google.protobuf' 2>/dev/null; then
    say "h2load, python3-protobuf or the agent missing: skipped"
    md "h2load, python3-protobuf or the agent missing: skipped."; md ""
    return 0
  fi
  free_port port && free_port gport || return 1
  yaml=$RAW/grpc-envoy.yaml cfg=$RAW/grpc-agent.json body=$RAW/grpc-body.bin
  printf 'domain: bench\ndescriptors:\n  - {key: client, rate_limit: {unit: second, requests_per_unit: 1000000000}}\n' \
    > "$yaml"
  printf '{"grpc_listen": "127.0.0.1:%s", "envoy_config": "%s"}\n' "$gport" "$yaml" > "$cfg"
  /usr/bin/python3 -c 'import sys; b = bytes.fromhex(sys.argv[1]); sys.stdout.buffer.write(b"\0" + len(b).to_bytes(4, "big") + b)' \
    "$(/usr/bin/python3 tests/lib/rls_pb.py encode request \
       '{"domain":"bench","descriptors":[{"entries":[{"key":"client","value":"10.0.0.1"}]}]}')" > "$body"
  url=http://127.0.0.1:$gport/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
  start_agent "$port" 0 -w 1 -c "$cfg" || return 1
  : > "$RAW/grpc.txt"
  for r in $(seq 1 "$GRPC_ROUNDS"); do
    f=$RAW/grpc-$r.txt; rm -f "$RAW/grpc-$r.log"
    "${PIN1[@]}" h2load -c1 -m64 -D1 -d "$body" -H 'content-type: application/grpc' \
      -H 'te: trailers' "$url" > /dev/null 2>&1
    "${PIN1[@]}" h2load -c1 -m64 -D"$GRPC_SECONDS" -d "$body" -H 'content-type: application/grpc' \
      -H 'te: trailers' --log-file="$RAW/grpc-$r.log" "$url" > "$f" 2>&1
    rps=$(awk '/^finished in/ { gsub(",", "", $4); printf "%d", $4 }' "$f")
    n=$(awk '/^requests:/ { print $8 }' "$f")
    p99=$(awk -F'\t' '{ print $3 }' "$RAW/grpc-$r.log" | sort -n |
          awk '{ v[NR] = $1 } END { i = int(NR * 0.99); if (i < 1) i = 1; print v[i] }')
    echo "$r ${rps:-0} ${p99:-0} ${n:-0}" >> "$RAW/grpc.txt"
    say "grpc round=$r decisions/s=$rps p99_us=$p99 succeeded=$n"
  done
  stop_agent
  md "\`h2load -c1 -m64 -D$GRPC_SECONDS -d BODY -H 'content-type: application/grpc' -H 'te: trailers' URL\`:"
  md "one ShouldRateLimit (one descriptor, counted under a limit of 10^9 a second), one worker on CPU 0,"
  md "h2load on CPU 1, 1 s warm-up, median of $GRPC_ROUNDS runs (by decisions/s); p99 from h2load's"
  md "\`--log-file\` (each request's time to its last byte)."
  md ""
  md "| decisions/s | p99 |"
  md "|---:|---:|"
  sort -k2 -n "$RAW/grpc.txt" | awk -v n="$GRPC_ROUNDS" 'NR == int((n + 1) / 2) { printf "| %d | %.2f ms |\n", $2, $3 / 1000 }' >> "$MD"
  md ""
}

part_nginx() {
  local r v fe app ah port f rps p99 n0 n1 a0 a1 reqs ncpu acpu variants="alone limitreq auth module"
  say "== nginx (alone, limit_req, auth_request to the HTTP front, the module over SPOP)"
  md "## 3b. nginx: alone, limit_req, auth_request to the HTTP front, the module"
  md ""
  if ! command -v nginx >/dev/null 2>&1 || ! command -v wrk >/dev/null 2>&1; then
    say "nginx or wrk missing: skipped"; md "nginx or wrk missing (\`scripts/deps.sh bench\`): skipped."; md ""
    return 0
  fi
  if [ ! -f "$NGINX_MODULE" ]; then
    variants="alone limitreq auth"
    say "no $NGINX_MODULE (make nginx-module): the module variant is skipped"
    md "No \`$NGINX_MODULE\` (\`make nginx-module\`): the module variant is skipped."; md ""
  fi
  : > "$RAW/nginx.txt"
  free_port port && free_port ah || return 1
  # nginx-examples/agent.json on these ports, the per-IP limit out of reach.
  sed -e "s/127\.0\.0\.1:8081/127.0.0.1:$ah/" \
      -e '/"per-ip"/s/"limit": *[0-9]*/"limit": 1000000000/' \
    "$ROOT/nginx-examples/agent.json" > "$RAW/nginx-agent.json"
  grep -q '"limit": 1000000000' "$RAW/nginx-agent.json" ||
    { echo "bench: no per-ip limit to raise in nginx-examples/agent.json" >&2; return 1; }
  start_agent "$port" 0 -w 1 -c "$RAW/nginx-agent.json" || return 1
  for r in $(seq 1 "$E2E_ROUNDS"); do
    for v in $variants; do
      free_port fe && free_port app || return 1
      nginx_conf "$RAW/nginx-$v.conf" "$v" "$fe" "$app" "$ah" "$port"
      nginx_start "$RAW/nginx-$v.conf" "$fe" || return 1
      f=$RAW/nginx-$v-$r.txt
      "${PIN1[@]}" wrk -t1 -c"$E2E_CONNS" -d1s "http://127.0.0.1:$fe/" > /dev/null 2>&1
      n0=$(ticks "$NGINX_PID" $(pgrep -P "$NGINX_PID")); a0=$(agent_ticks)
      "${PIN1[@]}" wrk -t1 -c"$E2E_CONNS" -d"${E2E_SECONDS}s" --latency "http://127.0.0.1:$fe/" > "$f" 2>&1
      n1=$(ticks "$NGINX_PID" $(pgrep -P "$NGINX_PID")); a1=$(agent_ticks)
      rps=$(wrk_field "$f" rps); reqs=$(wrk_field "$f" requests); p99=$(wrk_field "$f" p99_us)
      ncpu=$(awk -v d=$((n1 - n0)) -v t="$CLK_TCK" -v n="${reqs:-0}" 'BEGIN { if (n > 0) printf "%.2f", d / t / n * 1e6; else print "-" }')
      acpu=-
      case $v in auth|module)
        acpu=$(awk -v d=$((a1 - a0)) -v t="$CLK_TCK" -v n="${reqs:-0}" 'BEGIN { if (n > 0) printf "%.2f", d / t / n * 1e6; else print "-" }') ;;
      esac
      echo "$v $r ${rps:-0} ${p99:-0} $ncpu $acpu $(wrk_field "$f" non2xx)" >> "$RAW/nginx.txt"
      say "nginx variant=$v round=$r req/s=$rps p99_us=$p99 nginx_us/req=$ncpu agent_us/req=$acpu non2xx=$(wrk_field "$f" non2xx)"
      nginx_stop
    done
  done
  stop_agent
  md "nginx-examples/nginx.conf and nginx-module.conf (location \`/\`, per-IP limit raised out of reach) with"
  md "\`worker_processes 1\`, nginx and the agent (1 worker) on CPU 0, \`wrk -t1 -c$E2E_CONNS -d${E2E_SECONDS}s\` on CPU 1."
  md "alone: nginx.conf without its auth_request lines (nginx proxying to the app); limitreq: the same with"
  md "\`limit_req\` per client IP; auth: nginx.conf (auth_request to the HTTP front); module: nginx-module.conf"
  md "(one NOTIFY per request). Interleaved $variants × $E2E_ROUNDS; medians."
  md ""
  md "| variant | req/s | × alone | × alone by CPU | p99 µs | nginx CPU µs/req | agent CPU µs/req | non-2xx |"
  md "|---|---|---|---|---|---|---|---|"
  local alone auth alone_cpu auth_cpu cpu
  alone=$(awk '$1 == "alone" { print $3 }' "$RAW/nginx.txt" | median)
  auth=$(awk '$1 == "auth" { print $3 }' "$RAW/nginx.txt" | median)
  # CPU per request on CPU 0 (nginx + agent): less moved by other work on
  # the machine than req/s; "× alone by CPU" is alone's over the variant's.
  alone_cpu=$(awk '$1 == "alone" { print $5 }' "$RAW/nginx.txt" | median)
  auth_cpu=$(awk '$1 == "auth" { print $5 + $6 }' "$RAW/nginx.txt" | median)
  for v in $variants; do
    rps=$(awk -v v="$v" '$1 == v { print $3 }' "$RAW/nginx.txt" | median)
    p99=$(awk -v v="$v" '$1 == v { print $4 }' "$RAW/nginx.txt" | median)
    ncpu=$(awk -v v="$v" '$1 == v { print $5 }' "$RAW/nginx.txt" | median)
    acpu=$(awk -v v="$v" '$1 == v && $6 != "-" { print $6 }' "$RAW/nginx.txt" | median)
    cpu=$(awk -v v="$v" '$1 == v { print $5 + ($6 == "-" ? 0 : $6) }' "$RAW/nginx.txt" | median)
    md "| $v | $(printf '%.0f' "${rps:-0}") | $(awk -v a="$rps" -v b="$alone" 'BEGIN { if (b > 0) printf "%.2f", a / b }') | $(awk -v a="$alone_cpu" -v b="$cpu" 'BEGIN { if (b > 0) printf "%.2f", a / b }') | $p99 | $ncpu | ${acpu:--} | $(awk -v v="$v" '$1 == v { s += $7 } END { print s + 0 }' "$RAW/nginx.txt") |"
    if [ "$v" = module ]; then
      NGINX_MOD_ALONE=$(awk -v a="$rps" -v b="$alone" 'BEGIN { if (b > 0) printf "%.2f", a / b }')
      NGINX_MOD_AUTH=$(awk -v a="$rps" -v b="$auth" 'BEGIN { if (b > 0) printf "%.2f", a / b }')
      NGINX_MOD_ALONE_CPU=$(awk -v a="$alone_cpu" -v b="$cpu" 'BEGIN { if (b > 0) printf "%.2f", a / b }')
      NGINX_MOD_AUTH_CPU=$(awk -v a="$auth_cpu" -v b="$cpu" 'BEGIN { if (b > 0) printf "%.2f", a / b }')
    fi
  done
  md ""
  # Each round's ratios: the medians above hide how much the noise moved.
  if [[ " $variants " == *" module "* ]]; then
    md "Per round, module ÷ alone and module ÷ auth by req/s: $(awk '{ v[$1 " " $2] = $3 } END { for (r = 1; (("alone " r) in v); r++) printf "%s%.2f / %.2f", (r > 1 ? ", " : ""), v["module " r] / v["alone " r], v["module " r] / v["auth " r] }' "$RAW/nginx.txt");"
    md "by CPU: $(awk '{ v[$1 " " $2] = $5 + ($6 == "-" ? 0 : $6) } END { for (r = 1; (("alone " r) in v); r++) printf "%s%.2f / %.2f", (r > 1 ? ", " : ""), v["alone " r] / v["module " r], v["auth " r] / v["module " r] }' "$RAW/nginx.txt")."
    md ""
  fi
}

# ----------------------------------------------------------------- scale ---

# Part scale: N agents (one worker each) on one Redis, all driven by one
# spop_load (-P: one port per agent, -r per agent), at N = each of
# BENCH_SCALE_NODES. What one Redis spends per node, idle and under a
# steady load, and whether a key shared by all nodes, hit above its limit,
# gets its limit. How to read it: docs/BENCHMARKS.md, docs/CLUSTER.md
# "Scale by simulation".
SCALE_NODES=${BENCH_SCALE_NODES:-10 50 100}
SCALE_RATE=${BENCH_SCALE_RATE:-100}              # hits/s per agent
SCALE_KEYS=${BENCH_SCALE_KEYS:-10}               # other keys, each hit by every agent
SCALE_HOT_EVERY=${BENCH_SCALE_HOT_EVERY:-10}     # every 10th hit of each agent: the hot key
SCALE_WINDOW=${BENCH_SCALE_WINDOW:-10}           # the window of every key, s
SCALE_LIMIT=${BENCH_SCALE_LIMIT:-}               # default: half its hits per window
SCALE_SYNC=${BENCH_SCALE_SYNC:-0.1}
SCALE_TIMEOUT_MS=${BENCH_SCALE_TIMEOUT_MS:-100}
SCALE_MAX_KEYS=${BENCH_SCALE_MAX_KEYS:-4096}
SCALE_IDLE=${BENCH_SCALE_IDLE_SECONDS:-10}
SCALE_WARMUP=${BENCH_SCALE_WARMUP:-20}           # two windows: every key has a previous one
SCALE_SECONDS=${BENCH_SCALE_SECONDS:-40}
# Phantom nodes: this many more entries kept fresh in the namespace's node
# hash (the heartbeats' HGETALL reads them all; the agents count them, and
# size their grants by them): a heartbeat costs what it would with N +
# phantoms nodes, without running them.
SCALE_PHANTOMS=${BENCH_SCALE_PHANTOMS:-0}

SCALE_RPORT=""
SCALE_REDIS_PID=""
SCALE_PHANTOM_PID=""
SCALE_MASTERS=()      # the agents (masters) of the run
SCALE_PIDS=()         # masters and workers: their CPU is measured
SCALE_PORTS=()        # SPOP ports
SCALE_HPORTS=()       # HTTP ports (/metrics)

# scale_snap TAG [metrics]: the time, Redis's CPU and command counts, the
# agents' CPU ticks and the machine's CPU use now, into $RAW/scale-TAG.*;
# with "metrics", every agent's /metrics too (after the rest: it takes a
# while, and the agents' CPU for it is not in this reading).
scale_snap() {
  local f=$RAW/scale-$1 hp
  date +%s.%N > "$f.time"
  redis-cli -p "$SCALE_RPORT" INFO cpu 2>/dev/null | tr -d '\r' > "$f.cpu"
  redis-cli -p "$SCALE_RPORT" INFO commandstats 2>/dev/null | tr -d '\r' > "$f.cmd"
  ticks "${SCALE_PIDS[@]}" > "$f.ticks"
  awk '/^cpu / { printf "%d %d\n", $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9, $5 + $6 }' /proc/stat > "$f.stat"
  : > "$f.metrics"
  if [ "${2:-}" = metrics ]; then
    for hp in "${SCALE_HPORTS[@]}"; do
      curl -s --max-time 2 "http://127.0.0.1:$hp/metrics" >> "$f.metrics" 2>/dev/null
    done
  fi
}

# scale_cmds A B: per Redis command, calls and usec between readings A and
# B (INFO commandstats): "name calls usec" lines.
scale_cmds() {
  awk -F'[:,=]' '/^cmdstat_/ {
      n = substr($1, 9)
      if (FILENAME == ARGV[1]) { c0[n] = $3; u0[n] = $5 } else { c1[n] = $3; u1[n] = $5 } }
    END { for (n in c1) if (c1[n] - c0[n] > 0) print n, c1[n] - c0[n], u1[n] - u0[n] }' \
    "$RAW/scale-$1.cmd" "$RAW/scale-$2.cmd" | sort -k2,2nr
}

# scale_calls A B REGEX: calls of the commands matching REGEX between A and B.
scale_calls() { scale_cmds "$1" "$2" | awk -v re="$3" '$1 ~ re { s += $2 } END { print s + 0 }'; }
scale_usec() { scale_cmds "$1" "$2" | awk -v re="$3" '$1 ~ re { s += $3 } END { print s + 0 }'; }

# The commands an agent sends itself; the others Redis runs inside its
# scripts (HMGET: one per push call, HGET: two per admission, HGETALL: one
# per heartbeat), and INFO is this script's.
SCALE_TOP='^(eval|evalsha|script\|load|auth|select|role|ping|wait|hello|asking|client\|.*|cluster\|.*)$'

# scale_dt A B: seconds between readings A and B.
scale_dt() { awk '{ if (NR == 1) a = $1; else b = $1 } END { printf "%.3f", b - a }' "$RAW/scale-$1.time" "$RAW/scale-$2.time"; }

# scale_rcpu A B: Redis's CPU seconds (used_cpu_sys + used_cpu_user) between A and B.
scale_rcpu() {
  awk -F: '/^used_cpu_(sys|user):/ { s[FILENAME] += $2 } END { printf "%.3f", s[ARGV[2]] - s[ARGV[1]] }' \
    "$RAW/scale-$1.cpu" "$RAW/scale-$2.cpu"
}

# scale_msum TAG REGEX: the sum, over every agent, of the /metrics lines
# matching REGEX.
scale_msum() { awk -v re="$2" '$0 ~ re { s += $NF } END { printf "%.0f", s }' "$RAW/scale-$1.metrics"; }
scale_mdelta() { echo $(( $(scale_msum "$2" "$3") - $(scale_msum "$1" "$3") )); }

# scale_sync_p99 A B: the 99th percentile of the agents' sync cycle time
# between A and B, as the bucket bound of the summed histograms.
scale_sync_p99() {
  awk '/^spoa_ratelimit_sync_duration_seconds_bucket/ {
      le = $1; sub(/.*le="/, "", le); sub(/".*/, "", le)
      if (FILENAME == ARGV[1]) b0[le] += $NF; else b1[le] += $NF }
    END { n = b1["+Inf"] - b0["+Inf"]; if (n <= 0) { print "-"; exit }
          m = split("0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 +Inf", les, " ")
          for (i = 1; i <= m; i++) if (b1[les[i]] - b0[les[i]] >= 0.99 * n) { print ((les[i] == "+Inf") ? "> 5 s" : "<= " les[i] * 1000 " ms"); exit } }' \
    "$RAW/scale-$1.metrics" "$RAW/scale-$2.metrics"
}

# scale_phantoms COUNT: COUNT more fields in the node hash of the agents'
# namespace (found in Redis: "*:nodes}"), set to the time every 0.5 s (a
# node counts for 3 sync periods + 1 s), until scale_stop.
scale_phantoms() {
  local key i args=()
  key=$(redis-cli -p "$SCALE_RPORT" --scan --pattern '*:nodes}' 2>/dev/null | head -n 1)
  [ -n "$key" ] || return 1
  for i in $(seq 1 "$1"); do args+=("phantom-$i" NOW); done
  (
    trap 'exit 0' TERM
    while :; do
      redis-cli -p "$SCALE_RPORT" HSET "$key" "${args[@]/#NOW/$(date +%s.%N)}" > /dev/null 2>&1
      sleep 0.5
    done
  ) &
  SCALE_PHANTOM_PID=$!
  PIDS+=("$SCALE_PHANTOM_PID")
}

# scale_stop: every agent of the run (SIGTERM to all, then each waited for),
# then its Redis.
scale_stop() {
  local p
  if [ -n "$SCALE_PHANTOM_PID" ]; then
    stop_pid "$SCALE_PHANTOM_PID"; forget "$SCALE_PHANTOM_PID"; SCALE_PHANTOM_PID=""
  fi
  for p in "${SCALE_MASTERS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${SCALE_MASTERS[@]}"; do stop_pid "$p" 10; forget "$p"; done
  reap_workers
  SCALE_MASTERS=(); SCALE_PIDS=(); SCALE_PORTS=(); SCALE_HPORTS=()
  AGENT_PID=""
  if [ -n "$SCALE_REDIS_PID" ]; then
    stop_pid "$SCALE_REDIS_PID"; forget "$SCALE_REDIS_PID"; SCALE_REDIS_PID=""
  fi
}

# scale_fits N: can this machine hold N agents (open files of spop_load and
# Redis, processes, memory)? Says why not.
scale_fits() {
  local n=$1 nofile nproc_max avail
  nofile=$(ulimit -n); nproc_max=$(ulimit -u)
  avail=$(awk '/^MemAvailable:/ { print int($2 / 1024) }' /proc/meminfo)
  if [ "$nofile" != unlimited ] && [ "$nofile" -lt $((2 * n + 64)) ]; then
    echo "open files limit $nofile < $((2 * n + 64))"; return 1
  fi
  if [ "$nproc_max" != unlimited ] && [ "$nproc_max" -lt $((2 * n + 256)) ]; then
    echo "process limit $nproc_max < $((2 * n + 256))"; return 1
  fi
  # An agent with a small table: ~4 MB of its own (master + worker, PSS),
  # the table ~220 bytes per max_keys entry; 32 MB each to be safe.
  if [ "${avail:-0}" -lt $((32 * n + 512)) ]; then
    echo "${avail:-?} MB available < $((32 * n + 512)) MB"; return 1
  fi
  return 0
}

# scale_run N: one run at N agents; appends a line of name=value fields to
# $RAW/scale.txt.
scale_run() {
  local n=$1 i port hport cfg limit lp line why ports="" t0 mk
  if ! why=$(scale_fits "$n"); then
    say "scale: $n agents do not fit: $why"
    echo "n=$n failed=1 why=$(echo "$why" | tr ' ' '_')" >> "$RAW/scale.txt"
    return 0
  fi
  limit=${SCALE_LIMIT:-$(awk -v n="$n" -v r="$SCALE_RATE" -v e="$SCALE_HOT_EVERY" -v w="$SCALE_WINDOW" \
    'BEGIN { printf "%d", n * r / e * w / 2 }')}
  mk=$SCALE_MAX_KEYS
  [ "$mk" -lt $((4 * SCALE_KEYS + 64)) ] && mk=$((4 * SCALE_KEYS + 64))
  local load_start; load_start=$(uptime | sed 's/.*load average: //')
  free_port SCALE_RPORT || return 1
  redis-server --port "$SCALE_RPORT" --bind 127.0.0.1 --save "" --appendonly no \
    > "$RAW/scale-redis-$n.log" 2>&1 &
  SCALE_REDIS_PID=$!
  PIDS+=("$SCALE_REDIS_PID")
  for i in $(seq 1 100); do listening "$SCALE_RPORT" && break; sleep 0.05; done
  listening "$SCALE_RPORT" || { say "scale: redis-server did not start"; scale_stop; return 1; }
  # The agents: all launched, then each waited for.
  t0=$(date +%s)
  for i in $(seq 1 "$n"); do
    if ! free_port port || ! free_port hport; then scale_stop; return 1; fi
    cfg=$RAW/scale-agent-$n-$i.json
    printf '{"max_keys":%s,"http_listen":"127.0.0.1:%s","namespaces":[{"name":"default","window_sizes":%s,"sync_rate":%s,"count_denied":false,"strategy":"redis","strategy_opts":{"host":"127.0.0.1","port":%s,"timeout_ms":%s}}]}\n' \
      "$mk" "$hport" "[$SCALE_WINDOW]" \
      "$SCALE_SYNC" "$SCALE_RPORT" "$SCALE_TIMEOUT_MS" > "$cfg"
    agent_launch "$port" none -w 1 -c "$cfg"
    SCALE_MASTERS+=("$AGENT_PID"); SCALE_PORTS+=("$port"); SCALE_HPORTS+=("$hport")
  done
  for i in $(seq 0 $((n - 1))); do
    if ! agent_wait "${SCALE_PORTS[$i]}" "${SCALE_MASTERS[$i]}"; then
      say "scale: agent $((i + 1)) of $n did not start"; scale_stop; return 1
    fi
  done
  AGENT_PID=""
  for i in "${SCALE_MASTERS[@]}"; do
    SCALE_PIDS+=("$i")
    # shellcheck disable=SC2207
    SCALE_PIDS+=($(pgrep -P "$i"))
  done
  say "scale: $n agents up in $(( $(date +%s) - t0 )) s (Redis on port $SCALE_RPORT)"
  ports=$(IFS=,; echo "${SCALE_PORTS[*]}")
  # Every agent heartbeats once it runs: let them all count each other.
  sleep 2
  if [ "$SCALE_PHANTOMS" -gt 0 ]; then
    scale_phantoms "$SCALE_PHANTOMS" || { say "scale: no node hash in Redis"; scale_stop; return 1; }
    sleep 2
  fi
  # Idle: agents up, no traffic.
  scale_snap "$n-idle0"
  sleep "$SCALE_IDLE"
  scale_snap "$n-idle1" metrics
  # Steady load: one spop_load for all, per agent SCALE_RATE hits/s over
  # SCALE_KEYS keys, every SCALE_HOT_EVERY-th on the hot key.
  "$LOAD" -q -P "$ports" -c 1 -k 16 -r "$SCALE_RATE" -n "$SCALE_KEYS" -W "$SCALE_WINDOW" -m ratelimit \
    -H "$SCALE_HOT_EVERY:$SCALE_WINDOW:$limit" -w "$SCALE_WARMUP" -d "$SCALE_SECONDS" \
    > "$RAW/scale-$n-load.txt" 2> "$RAW/scale-$n-load.err" &
  lp=$!
  PIDS+=("$lp")
  sleep "$SCALE_WARMUP"
  scale_snap "$n-load0" metrics
  sleep "$SCALE_SECONDS"
  scale_snap "$n-load1" metrics
  wait "$lp"; forget "$lp"
  local load_end; load_end=$(uptime | sed 's/.*load average: //')
  scale_cmds "$n-idle0" "$n-idle1" > "$RAW/scale-$n-idle.cmds"
  scale_cmds "$n-load0" "$n-load1" > "$RAW/scale-$n-load.cmds"
  line=$(grep '^RESULT' "$RAW/scale-$n-load.txt")
  [ -n "$line" ] || line="RESULT failed=1 errors=1"
  grep '^HOT' "$RAW/scale-$n-load.txt" | sed "s/^/n=$n /" >> "$RAW/scale-hot.txt"
  scale_stop

  local di dl ri rl ai al bi bl
  di=$(scale_dt "$n-idle0" "$n-idle1"); dl=$(scale_dt "$n-load0" "$n-load1")
  ri=$(scale_rcpu "$n-idle0" "$n-idle1"); rl=$(scale_rcpu "$n-load0" "$n-load1")
  ai=$(( $(cat "$RAW/scale-$n-idle1.ticks") - $(cat "$RAW/scale-$n-idle0.ticks") ))
  al=$(( $(cat "$RAW/scale-$n-load1.ticks") - $(cat "$RAW/scale-$n-load0.ticks") ))
  bl=$(awk '{ if (NR == 1) { t = $1; i = $2 } else { dt = $1 - t; di = $2 - i } }
            END { printf "%.2f", (dt > 0) ? (dt - di) / dt * c : 0 }' c="$(nproc)" \
       "$RAW/scale-$n-load0.stat" "$RAW/scale-$n-load1.stat")
  bi=$(awk '{ if (NR == 1) { t = $1; i = $2 } else { dt = $1 - t; di = $2 - i } }
            END { printf "%.2f", (dt > 0) ? (dt - di) / dt * c : 0 }' c="$(nproc)" \
       "$RAW/scale-$n-idle0.stat" "$RAW/scale-$n-idle1.stat")
  local top_i top_l ev_i ev_l es_l pu_l ad_l hb_l evu_l esu_l evu_i
  top_i=$(scale_calls "$n-idle0" "$n-idle1" "$SCALE_TOP"); top_l=$(scale_calls "$n-load0" "$n-load1" "$SCALE_TOP")
  ev_i=$(scale_calls "$n-idle0" "$n-idle1" '^eval$'); ev_l=$(scale_calls "$n-load0" "$n-load1" '^eval$')
  evu_i=$(scale_usec "$n-idle0" "$n-idle1" '^eval$'); evu_l=$(scale_usec "$n-load0" "$n-load1" '^eval$')
  es_l=$(scale_calls "$n-load0" "$n-load1" '^evalsha$'); esu_l=$(scale_usec "$n-load0" "$n-load1" '^evalsha$')
  pu_l=$(scale_calls "$n-load0" "$n-load1" '^hmget$')
  ad_l=$(( $(scale_calls "$n-load0" "$n-load1" '^hget$') / 2 ))
  hb_l=$(scale_calls "$n-load0" "$n-load1" '^hgetall$')
  local nodes_min nodes_max
  nodes_min=$(awk '/^spoa_ratelimit_store_nodes/ { if (m == "" || $NF < m) m = $NF } END { print m + 0 }' "$RAW/scale-$n-load1.metrics")
  nodes_max=$(awk '/^spoa_ratelimit_store_nodes/ { if ($NF > m) m = $NF } END { print m + 0 }' "$RAW/scale-$n-load1.metrics")
  {
    printf 'n=%s phantoms=%s limit=%s window=%s idle_s=%s load_s=%s' "$n" "$SCALE_PHANTOMS" "$limit" "$SCALE_WINDOW" "$di" "$dl"
    printf ' redis_cpu_idle=%s redis_cpu_load=%s' "$(awk -v a="$ri" -v d="$di" 'BEGIN { printf "%.4f", a / d }')" \
      "$(awk -v a="$rl" -v d="$dl" 'BEGIN { printf "%.4f", a / d }')"
    printf ' agents_cpu_idle=%s agents_cpu_load=%s' \
      "$(awk -v a="$ai" -v t="$CLK_TCK" -v d="$di" 'BEGIN { printf "%.4f", a / t / d }')" \
      "$(awk -v a="$al" -v t="$CLK_TCK" -v d="$dl" 'BEGIN { printf "%.4f", a / t / d }')"
    printf ' machine_busy_idle=%s machine_busy_load=%s' "$bi" "$bl"
    printf ' top_idle=%s top_load=%s eval_idle=%s eval_load=%s evalsha_load=%s pushes_load=%s admits_load=%s heartbeats_load=%s' \
      "$top_i" "$top_l" "$ev_i" "$ev_l" "$es_l" "$pu_l" "$ad_l" "$hb_l"
    printf ' eval_usec_idle=%s eval_usec_load=%s evalsha_usec_load=%s' "$evu_i" "$evu_l" "$esu_l"
    printf ' adm_store=%s adm_grant=%s adm_view=%s adm_degraded=%s' \
      "$(scale_mdelta "$n-load0" "$n-load1" 'admissions_total.*by="store"')" \
      "$(scale_mdelta "$n-load0" "$n-load1" 'admissions_total.*by="grant"')" \
      "$(scale_mdelta "$n-load0" "$n-load1" 'admissions_total.*by="view"')" \
      "$(scale_mdelta "$n-load0" "$n-load1" 'admissions_total.*by="degraded"')"
    printf ' cycles_ok=%s cycles_failed=%s sync_p99=%s nodes_min=%s nodes_max=%s nodes_idle_min=%s' \
      "$(scale_mdelta "$n-load0" "$n-load1" 'sync_cycles_total.*result="ok"')" \
      "$(scale_mdelta "$n-load0" "$n-load1" 'sync_cycles_total.*result="failed"')" \
      "$(scale_sync_p99 "$n-load0" "$n-load1" | tr ' ' '_')" "$nodes_min" "$nodes_max" \
      "$(awk '/^spoa_ratelimit_store_nodes/ { if (m == "" || $NF < m) m = $NF } END { print m + 0 }' "$RAW/scale-$n-idle1.metrics")"
    printf ' loadavg_start=%s loadavg_end=%s' "$(echo "$load_start" | tr -d ' ')" "$(echo "$load_end" | tr -d ' ')"
    printf ' %s\n' "${line#RESULT }"
  } >> "$RAW/scale.txt"
  say "scale: n=$n $(tail -n 1 "$RAW/scale.txt")"
}

part_scale() {
  local n l
  say "== scale (N agents on one Redis, one spop_load for all)"
  md "## 6. Scale by simulation: N agents on one Redis"
  md ""
  if [ ! -x "$LOAD" ] || [ ! -x "$AGENT" ] || ! command -v redis-server > /dev/null 2>&1 ||
     ! command -v redis-cli > /dev/null 2>&1 || ! command -v curl > /dev/null 2>&1; then
    say "spop_load, the agent, redis-server, redis-cli or curl missing: skipped"
    md "spop_load, the agent, redis-server, redis-cli or curl missing: skipped."; md ""
    return 0
  fi
  : > "$RAW/scale.txt"; : > "$RAW/scale-hot.txt"
  for n in $SCALE_NODES; do
    scale_run "$n" || say "scale: run at $n agents failed"
  done
  scale_report
}

# scale_report: the tables of part scale, from $RAW/scale.txt.
scale_report() {
  local l n dl di lbl
  md "N agents (\`spoa-ratelimit -w 1\`, nothing pinned) on one redis-server, each agent's namespace"
  md "\`default\` synced every ${SCALE_SYNC} s (admission auto: exact), one window of ${SCALE_WINDOW} s (sliding),"
  md "\`count_denied\` false, \`max_keys\` $SCALE_MAX_KEYS (at least 4 x keys), \`timeout_ms\` $SCALE_TIMEOUT_MS."
  md "Idle: ${SCALE_IDLE} s with the agents up and no traffic. Load: one \`spop_load -P <every agent's port> -c 1"
  md "-k 16 -r $SCALE_RATE -n $SCALE_KEYS -W $SCALE_WINDOW -H $SCALE_HOT_EVERY:$SCALE_WINDOW:LIMIT -w $SCALE_WARMUP -d $SCALE_SECONDS\`:"
  md "$SCALE_RATE hits/s per agent, open loop, over $SCALE_KEYS keys hit by every agent (limit 10^6: far from it),"
  md "and every ${SCALE_HOT_EVERY}th hit of every agent on one key \"hot\" with LIMIT per ${SCALE_WINDOW} s"
  md "(default: half of what it gets, so it is held at its limit). Measured after a warm-up of $SCALE_WARMUP s (every"
  md "key has a previous window then). Redis CPU: used_cpu_sys + used_cpu_user"
  md "(INFO cpu) over the measured time, 100 % = one core. Commands: INFO commandstats; the agents send"
  md "EVAL (heartbeat: one per sync cycle) and EVALSHA (a push: one per hash of the node's active counters"
  md "per cycle; an admission: one per hit the store decides); Redis runs HMGET once per push, HGET twice"
  md "per admission, HGETALL once per heartbeat inside them. Measured on this branch as it is."
  if [ "$SCALE_PHANTOMS" -gt 0 ]; then
    md "With $SCALE_PHANTOMS phantom nodes: that many more entries kept fresh in the namespace's node hash"
    md "(one HSET of them all every 0.5 s, in the commands below as hset), so every heartbeat reads and the"
    md "agents count N + $SCALE_PHANTOMS nodes (their grants are sized by that count too)."
  fi
  md ""
  md "**Store cost.**"
  md ""
  md "| agents | Redis CPU idle | per agent | commands/s per agent idle | Redis CPU at load | per agent | commands/s per agent at load | of which heartbeat / push / admission | Redis µs per heartbeat (idle, load) | µs per EVALSHA |"
  md "|---|---|---|---|---|---|---|---|---|---|"
  while read -r l; do
    n=$(field "$l" n)
    if [ -n "$(field "$l" failed)" ]; then md "| $n | failed: $(field "$l" why | tr '_' ' ') | | | | | | | | |"; continue; fi
    lbl=$n; [ "$(field "$l" phantoms)" -gt 0 ] && lbl="$n (+$(field "$l" phantoms) phantom)"
    di=$(field "$l" idle_s); dl=$(field "$l" load_s)
    md "$(awk -v lbl="$lbl" -v n="$n" -v di="$di" -v dl="$dl" -v ri="$(field "$l" redis_cpu_idle)" -v rl="$(field "$l" redis_cpu_load)" \
      -v ti="$(field "$l" top_idle)" -v tl="$(field "$l" top_load)" -v hb="$(field "$l" eval_load)" \
      -v pu="$(field "$l" pushes_load)" -v ad="$(field "$l" admits_load)" -v ei="$(field "$l" eval_idle)" \
      -v eui="$(field "$l" eval_usec_idle)" -v eul="$(field "$l" eval_usec_load)" \
      -v es="$(field "$l" evalsha_load)" -v esu="$(field "$l" evalsha_usec_load)" 'BEGIN {
        printf "| %s | %.1f %% | %.3f %% | %.1f | %.1f %% | %.3f %% | %.1f | %.1f / %.1f / %.1f | %.0f, %.0f | %.1f |",
          lbl, ri * 100, ri * 100 / n, ti / di / n, rl * 100, rl * 100 / n, tl / dl / n,
          hb / dl / n, pu / dl / n, ad / dl / n, ei ? eui / ei : 0, hb ? eul / hb : 0, es ? esu / es : 0 }')"
  done < "$RAW/scale.txt"
  md ""
  md "**The limit.** The hot key's admitted hits per ${SCALE_WINDOW} s window (the agent's windows, by when"
  md "each answer came), over the windows wholly inside the measured time; the bound of the issue is"
  md "limit x 1.01 + N. Degraded: admitted by a node alone (the store did not answer within \`timeout_ms\`)."
  md ""
  md "| agents | hits/s, all agents | errors | p50 / p99 ms | limit | windows | admitted min - max | max ÷ limit | bound | within | degraded | admissions/s: store / grant / view / degraded |"
  md "|---|---|---|---|---|---|---|---|---|---|---|---|"
  while read -r l; do
    n=$(field "$l" n)
    [ -n "$(field "$l" failed)" ] && continue
    lbl=$n; [ "$(field "$l" phantoms)" -gt 0 ] && lbl="$n (+$(field "$l" phantoms) phantom)"
    dl=$(field "$l" load_s)
    md "$(awk -v lbl="$lbl" -v n="$n" -v dl="$dl" -v r="$(field "$l" msgs_per_s)" -v e="$(field "$l" errors)" \
      -v p50="$(field "$l" p50_us)" -v p99="$(field "$l" p99_us)" -v lim="$(field "$l" hot_limit)" \
      -v w="$(field "$l" hot_windows)" -v mn="$(field "$l" hot_admitted_min)" -v mx="$(field "$l" hot_admitted_max)" \
      -v dg="$(field "$l" hot_degraded)" -v as="$(field "$l" adm_store)" -v ag="$(field "$l" adm_grant)" \
      -v av="$(field "$l" adm_view)" -v ad="$(field "$l" adm_degraded)" 'BEGIN {
        bound = lim * 1.01 + n
        printf "| %s | %.0f | %d | %.2f / %.2f | %d | %d | %d - %d | %.4f | %.0f | %s | %d | %.0f / %.0f / %.0f / %.0f |",
          lbl, r, e, p50 / 1000, p99 / 1000, lim, w, mn, mx, lim ? mx / lim : 0, bound,
          (w > 0 && mx <= bound) ? "yes" : (w > 0 ? "**no**" : "-"), dg,
          as / dl, ag / dl, av / dl, ad / dl }')"
  done < "$RAW/scale.txt"
  md ""
  md "**The agents and the machine** ($(nproc) CPUs, shared: Redis, every agent and spop_load run on them)."
  md ""
  md "| agents | agents' CPU, all (cores) | per agent, ms/s | spop_load CPU | machine busy (cores) idle, load | sync cycle p99 | nodes counted (min - max) | load average start → end |"
  md "|---|---|---|---|---|---|---|---|"
  while read -r l; do
    n=$(field "$l" n)
    [ -n "$(field "$l" failed)" ] && continue
    lbl=$n; [ "$(field "$l" phantoms)" -gt 0 ] && lbl="$n (+$(field "$l" phantoms) phantom)"
    md "$(awk -v lbl="$lbl" -v n="$n" -v ai="$(field "$l" agents_cpu_idle)" -v al="$(field "$l" agents_cpu_load)" 'BEGIN {
        printf "| %s | %.2f idle, %.2f load | %.2f idle, %.2f load |", lbl, ai, al, ai * 1000 / n, al * 1000 / n }') $(field "$l" client_cpu) | $(field "$l" machine_busy_idle), $(field "$l" machine_busy_load) | $(field "$l" sync_p99 | tr '_' ' ') | $(field "$l" nodes_min) - $(field "$l" nodes_max) (idle: $(field "$l" nodes_idle_min) min) | $(field "$l" loadavg_start) → $(field "$l" loadavg_end) |"
  done < "$RAW/scale.txt"
  md ""
  md "The hot key's windows (spop_load's HOT lines; complete=1: wholly measured):"
  md ""
  md '```'
  while read -r l; do md "$l"; done < "$RAW/scale-hot.txt"
  md '```'
  md ""
  md "Redis commands at load, per run (name, calls, usec; \`$RAW/scale-N-{idle,load}.cmds\`):"
  md ""
  md '```'
  for n in $SCALE_NODES; do
    [ -s "$RAW/scale-$n-load.cmds" ] || continue
    md "N=$n: $(tr '\n' ';' < "$RAW/scale-$n-load.cmds" | sed 's/;$//; s/;/; /g')"
  done
  md '```'
  md ""
  md "Every run, all fields: \`$RAW/scale.txt\`."
  md ""
}

targets() {
  md "## Targets (issues 4, 8, 19, 21 and 30)"
  md ""
  md "| target | measured | |"
  md "|---|---|---|"
  if [ -n "${SPOP_RL1:-}" ]; then
    md "| ≥ 1,000,000 ratelimit msgs/s, 1 worker | $SPOP_RL1 | $(awk -v x="$SPOP_RL1" 'BEGIN { print (x >= 1000000) ? "met" : "missed" }') |"
    md "| p99 < 100 µs at half load | ${SPOP_P99_HALF:-?} µs at ${SPOP_HALF_RATE:-?}/s | $(awk -v x="${SPOP_P99_HALF:-1e9}" -v r="${SPOP_HALF_RATE:-0}" 'BEGIN { print (x < 100 && r >= 500000) ? "met" : (x < 100) ? "met at half the measured max (below 500,000/s)" : "missed" }') |"
    md "| rate limiting ≤ 15 % over noop | ${SPOP_OVERHEAD:-?} % by msgs/s, ${SPOP_OVERHEAD_CPU:-?} % by agent CPU | $(awk -v x="${SPOP_OVERHEAD:-1e9}" 'BEGIN { print (x <= 15) ? "met" : "missed" }') |"
  fi
  if [ -n "${E2E_C_RATIO:-}" ]; then
    md "| agent CPU ≤ 3 µs per request (C) | ${E2E_C_AGENT:-?} µs | $(awk -v x="${E2E_C_AGENT:-1e9}" 'BEGIN { print (x <= 3) ? "met" : "missed" }') |"
    md "| C ≥ 0.45 × A | $E2E_C_RATIO by req/s, ${E2E_C_CRATIO:-?} by CPU | $(awk -v x="$E2E_C_RATIO" 'BEGIN { print (x >= 0.45) ? "met" : "missed" }') (by req/s) |"
  fi
  if [ -n "${NGINX_MOD_ALONE:-}" ]; then
    md "| nginx + module ≥ 0.8 × nginx alone | $NGINX_MOD_ALONE by req/s, $NGINX_MOD_ALONE_CPU by CPU | $(awk -v x="$NGINX_MOD_ALONE" 'BEGIN { print (x >= 0.8) ? "met" : "missed" }') (by req/s) |"
    md "| nginx + module ≥ 2.5 × nginx + auth_request | $NGINX_MOD_AUTH by req/s, $NGINX_MOD_AUTH_CPU by CPU | $(awk -v x="$NGINX_MOD_AUTH" 'BEGIN { print (x >= 2.5) ? "met" : "missed" }') (by req/s) |"
  fi
  if [ -n "${V_C34:-}" ] || [ -n "${V_C26:-}" ]; then
    md "| HAProxy 3.x, default answer ≥ 0.42 × plain | ${V_C34:-?} | $(awk -v x="${V_C34:-0}" 'BEGIN { print (x >= 0.42) ? "met" : "missed" }') |"
    md "| HAProxy 3.x, default answer, recommended settings ≥ 0.42 × plain | ${V_CR34:-?} | $(awk -v x="${V_CR34:-0}" 'BEGIN { print (x >= 0.42) ? "met" : "missed" }') |"
    md "| HAProxy 3.x, agent CPU ≤ 3 µs per request | ${V_C34_AGENT:-?} µs | $(awk -v x="${V_C34_AGENT:-1e9}" 'BEGIN { print (x <= 3) ? "met" : "missed" }') |"
    md "| HAProxy 3.x, lean answer + recommended settings ≥ 0.5 × plain | ${V_R34:-?} (${V_R34T:-?} × plain tuned alike) | $(awk -v x="${V_R34:-0}" 'BEGIN { print (x >= 0.5) ? "met" : "missed" }') |"
    [ -n "${V_UCR34:-}" ] && md "| HAProxy 3.x, default answer, recommended settings and a unix socket ≥ 0.42 × plain | $V_UCR34 | $(awk -v x="$V_UCR34" 'BEGIN { print (x >= 0.42) ? "met" : "missed" }') |"
    [ -n "${V_UR34:-}" ] && md "| HAProxy 3.x, lean answer, recommended settings and a unix socket ≥ 0.5 × plain | $V_UR34 (${V_UR34T:-?} × plain tuned alike) | $(awk -v x="$V_UR34" 'BEGIN { print (x >= 0.5) ? "met" : "missed" }') |"
    md "| HAProxy 2.6 ≥ 0.67 × plain | ${V_C26:-?} | $(awk -v x="${V_C26:-0}" 'BEGIN { print (x >= 0.67) ? "met" : "missed" }') |"
    md "| HAProxy 2.6, agent CPU ≤ 1.5 µs per request | ${V_C26_AGENT:-?} µs | $(awk -v x="${V_C26_AGENT:-1e9}" 'BEGIN { print (x <= 1.5) ? "met" : "missed" }') |"
  fi
  if [ -n "${PEERS_P26:-}" ] || [ -n "${PEERS_P34:-}" ]; then
    md "| HAProxy 2.6, the agent as its peer ≥ 0.90 × plain | ${PEERS_P26:-?} by req/s, ${PEERS_P26_CPU:-?} by CPU | $(awk -v x="${PEERS_P26:-0}" 'BEGIN { print (x >= 0.90) ? "met" : "missed" }') (by req/s) |"
    md "| HAProxy 3.x, the agent as its peer ≥ 0.90 × plain | ${PEERS_P34:-?} by req/s, ${PEERS_P34_CPU:-?} by CPU | $(awk -v x="${PEERS_P34:-0}" 'BEGIN { print (x >= 0.90) ? "met" : "missed" }') (by req/s) |"
  fi
  if [ -s "$RAW/http-w1-d16" ] && [[ " $PARTS " == *" http "* ]]; then
    local h; h=$(cat "$RAW/http-w1-d16")
    md "| HTTP front ≥ 300,000 checks/s, 1 worker (pipelined) | $(printf '%.0f' "$h") | $(awk -v x="$h" 'BEGIN { print (x >= 300000) ? "met" : "missed" }') |"
  fi
  md ""
}

for part in $PARTS; do
  case $part in
    core|spop|http|grpc|e2e|versions|peers|nginx|sync|profile|alloc|baseline|scale|store|top) ;;
    *) echo "bench: unknown part '$part' (core spop http grpc e2e versions peers nginx sync profile alloc baseline scale store top)" >&2; exit 2 ;;
  esac
done
start=$(date +%s)
machine_info
for part in $PARTS; do
  busy_check "part $part"
  "part_$part"
done
targets
md "Load at the end: $(uptime | sed 's/.*load average: //'). Total time: $(( $(date +%s) - start )) s."
say ""
say "==================== summary ($MD)"
cat "$MD"
