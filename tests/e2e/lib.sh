# shellcheck shell=bash
# tests/e2e/lib.sh - helpers for the end-to-end tests through HAProxy
# (Debian's 2.6 by default; any other with HAPROXY=/path/to/haproxy).
# Not a test: sourced by tests/e2e/haproxy_*.sh (when run directly, as
# tests/run.sh does with every tests/e2e/*.sh, it does nothing).
#
#   . "$(dirname "$0")/lib.sh"
#   e2e_init                      temp dir, ports, cleanup trap, watchdog;
#                                 $HAPROXY made absolute, its version shown
#   e2e_init_base                 the same without HAProxy and ports
#   e2e_setup                     temp dir, cleanup trap, watchdog only
#   haproxy_at_least 3 1          is $HAPROXY 3.1 or later?
#   start_agent [args...]         $AGENT -l 127.0.0.1:$E2E_PORT_AGENT args...
#   start_haproxy                 \$E2E_HAPROXY_CFG or conf/haproxy-e2e.cfg
#   wait_server_state UP 10       poll the stats CSV
#   code=$(req "$E2E_PORT_OPEN" -H 'X-Api-Key: k1')
#   ok "desc" / not_ok "desc" / check "desc" cmd... / is got want "desc"
#   finish                        summary line, exit status
#
# Every process started here (agent, its workers, haproxy, background
# curls) is killed by the EXIT trap, whatever happens. Lines starting with
# "#" are diagnostics; "ok - ..." / "not ok - ..." are results.

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  # Executed rather than sourced: nothing to test here.
  exit 0
fi

set -u

E2E_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
E2E_ROOT=$(cd "$E2E_LIB_DIR/../.." && pwd)
E2E_PASSED=0
E2E_FAILED=0
E2E_TMP=""
E2E_WATCHDOG_PID=""
AGENT_PID=""
AGENT_WORKERS_SEEN=""
# The HAProxy binary every test runs (tests/run.sh runs the HAProxy tests
# once more with HAProxy 3.x).
HAPROXY=${HAPROXY:-haproxy}
E2E_HAPROXY_VERSION=""
HAPROXY_PID=""
# Whole-script time limit (seconds); the watchdog ends the script after it.
E2E_TIMEOUT=${E2E_TIMEOUT:-100}

diag() { printf '# %s\n' "$*"; }

ok() { E2E_PASSED=$((E2E_PASSED + 1)); printf 'ok - %s\n' "$*"; }

not_ok() { E2E_FAILED=$((E2E_FAILED + 1)); printf 'not ok - %s\n' "$*"; }

# check "desc" cmd args... : ok if the command succeeds.
check() {
  local desc=$1; shift
  if "$@"; then ok "$desc"; else not_ok "$desc"; fi
}

# is GOT WANT "desc" : string equality, shows both on failure.
is() {
  if [ "$1" = "$2" ]; then ok "$3"; else not_ok "$3"; diag "  got '$1', want '$2'"; fi
}

# Integer helpers that are false (not an error) on non-numbers.
is_int() { case ${1:-x} in ''|*[!0-9]*) return 1 ;; *) return 0 ;; esac; }
int_ge() { is_int "$1" && is_int "$2" && [ "$1" -ge "$2" ]; }
int_le() { is_int "$1" && is_int "$2" && [ "$1" -le "$2" ]; }
int_between() { int_ge "$1" "$2" && int_le "$1" "$3"; }

die() {
  not_ok "$*"
  dump_logs
  exit 1
}

# ---------------------------------------------------------------- setup ---

e2e_init() {
  if ! command -v "$HAPROXY" >/dev/null 2>&1; then
    not_ok "haproxy is installed (HAPROXY='$HAPROXY')"; exit 1
  fi
  # Absolute, so that it still runs from another directory.
  case $HAPROXY in
    */*) HAPROXY="$(cd "$(dirname "$HAPROXY")" && pwd)/$(basename "$HAPROXY")" ;;
  esac
  E2E_HAPROXY_VERSION=$("$HAPROXY" -v 2>/dev/null | sed -n '1s/^HAProxy version \([^ ]*\).*/\1/p')
  command -v curl >/dev/null 2>&1 || { not_ok "curl is installed"; exit 1; }
  e2e_init_base

  E2E_PORT_AGENT=$(free_port)
  E2E_PORT_OPEN=$(free_port)
  E2E_PORT_CLOSED=$(free_port)
  E2E_PORT_TWO=$(free_port)
  E2E_PORT_NOPIPE=$(free_port)
  E2E_PORT_APP=$(free_port)
  E2E_PORT_STATS=$(free_port)
  export E2E_DIR=$E2E_TMP E2E_SPOE_CONF="$E2E_LIB_DIR/conf/spoe-e2e.conf"
  export E2E_PORT_AGENT E2E_PORT_OPEN E2E_PORT_CLOSED E2E_PORT_TWO E2E_PORT_NOPIPE E2E_PORT_APP E2E_PORT_STATS
  # Unique per run, so keys never meet counts of an earlier run (the agent
  # is fresh each time anyway; this also helps when reading logs).
  # shellcheck disable=SC2034 # used by the tests
  E2E_RUN_ID="$$-$(date +%s)"
  diag "agent: $AGENT"
  diag "haproxy: $(command -v "$HAPROXY"), version ${E2E_HAPROXY_VERSION:-unknown}"
  diag "tmp: $E2E_TMP; ports: agent $E2E_PORT_AGENT open $E2E_PORT_OPEN closed $E2E_PORT_CLOSED two $E2E_PORT_TWO nopipe $E2E_PORT_NOPIPE app $E2E_PORT_APP stats $E2E_PORT_STATS"
}

# e2e_init_base: what a test of the agent needs, with HAProxy or without:
# $AGENT (or the built one), then e2e_setup.
# nginx and the module (make nginx-module) are there: MODULE is the
# module's path ($NGINX_MODULE, else build/nginx/); exits as a failure
# otherwise.
e2e_need_nginx_module() {
  command -v nginx >/dev/null 2>&1 || { not_ok "nginx is installed (scripts/deps.sh test)"; exit 1; }
  MODULE=${NGINX_MODULE:-$E2E_ROOT/build/nginx/ngx_http_spoa_ratelimit_module.so}
  [ -f "$MODULE" ] || { not_ok "the module is built ($MODULE: make nginx-module)"; exit 1; }
}

e2e_init_base() {
  if [ -z "${AGENT:-}" ]; then
    for c in "$E2E_ROOT/build/san/spoa-ratelimit" "$E2E_ROOT/spoa-ratelimit"; do
      if [ -x "$c" ]; then AGENT=$c; break; fi
    done
  fi
  if [ -z "${AGENT:-}" ] || [ ! -x "$AGENT" ]; then
    not_ok "agent binary: set AGENT to the spoa-ratelimit binary (AGENT='${AGENT:-}')"
    exit 1
  fi
  e2e_setup
}

# e2e_setup: the temp dir $E2E_TMP, the cleanup trap and the watchdog,
# without the agent and HAProxy that e2e_init also requires. A test that
# starts things lib.sh does not know sets E2E_CLEANUP_HOOK to a function
# that stops them; the EXIT trap runs it first.
E2E_CLEANUP_HOOK=""
e2e_setup() {
  E2E_TMP=$(mktemp -d "${TMPDIR:-/tmp}/spoa-e2e.XXXXXX") || { not_ok "mktemp"; exit 1; }
  trap e2e_cleanup EXIT
  trap 'diag "interrupted"; exit 130' INT HUP
  trap 'not_ok "test finished within its time limit (terminated; E2E_TIMEOUT=${E2E_TIMEOUT}s)"; exit 124' TERM
  e2e_start_watchdog
}

# The watchdog sends TERM to this script after E2E_TIMEOUT seconds; the
# TERM trap exits, which runs the EXIT trap (cleanup).
e2e_start_watchdog() {
  local main=$$
  (
    sp=""
    trap '[ -n "$sp" ] && kill "$sp" 2>/dev/null && wait "$sp" 2>/dev/null; exit 0' TERM
    sleep "$E2E_TIMEOUT" &
    sp=$!
    wait "$sp"
    kill -TERM "$main" 2>/dev/null
  ) &
  E2E_WATCHDOG_PID=$!
}

# Is PID alive (and not a zombie waiting to be reaped)?
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]
}

# kill_wait PID [SECONDS]: TERM, wait up to SECONDS, then KILL. Returns the
# exit status of PID (a child of this shell).
kill_wait() {
  local pid=$1 secs=${2:-5} i=0
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null
  while alive "$pid"; do
    i=$((i + 1))
    if [ "$i" -gt $((secs * 10)) ]; then
      diag "pid $pid still alive ${secs}s after SIGTERM: SIGKILL"
      kill -KILL "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      return 137
    fi
    sleep 0.1
  done
  wait "$pid" 2>/dev/null
}

e2e_cleanup() {
  local rc=$? p
  trap - EXIT INT HUP TERM
  if [ -n "$E2E_CLEANUP_HOOK" ]; then "$E2E_CLEANUP_HOOK"; fi
  # Background jobs of the test (curl loops).
  for p in $(jobs -pr); do
    case $p in "$E2E_WATCHDOG_PID"|"$AGENT_PID"|"$HAPROXY_PID") continue ;; esac
    kill -TERM "$p" 2>/dev/null
  done
  if [ -n "$HAPROXY_PID" ]; then kill_wait "$HAPROXY_PID" 3; HAPROXY_PID=""; fi
  if [ -n "$AGENT_PID" ]; then
    AGENT_WORKERS_SEEN="$AGENT_WORKERS_SEEN $(pgrep -P "$AGENT_PID" 2>/dev/null | tr '\n' ' ')"
    kill_wait "$AGENT_PID" 5
    AGENT_PID=""
  fi
  # Workers that outlived their master (must not happen; never leave them).
  for p in $AGENT_WORKERS_SEEN; do
    if alive "$p"; then
      diag "agent worker $p outlived its master: SIGKILL"
      kill -KILL "$p" 2>/dev/null
    fi
  done
  if [ -n "$E2E_WATCHDOG_PID" ]; then
    kill -TERM "$E2E_WATCHDOG_PID" 2>/dev/null
    wait "$E2E_WATCHDOG_PID" 2>/dev/null
  fi
  wait 2>/dev/null
  if [ "$E2E_FAILED" -gt 0 ] || [ "$rc" -ne 0 ]; then
    dump_logs
    if [ -n "$E2E_TMP" ]; then diag "logs kept in $E2E_TMP"; fi
  elif [ -n "$E2E_TMP" ] && [ -z "${E2E_KEEP:-}" ]; then
    rm -rf "$E2E_TMP"
  fi
  if [ "$rc" -eq 0 ] && [ "$E2E_FAILED" -gt 0 ]; then rc=1; fi
  exit "$rc"
}

E2E_LOGS_DUMPED=""
dump_logs() {
  [ -n "$E2E_LOGS_DUMPED" ] && return 0
  E2E_LOGS_DUMPED=1
  local f
  for f in "$E2E_TMP"/agent*.log "$E2E_TMP"/haproxy.log; do
    [ -s "$f" ] || continue
    diag "---- last lines of $(basename "$f") (without stats/app_responder lines)"
    grep -v -E 'stats/<STATS>|app_responder/<NOSRV>' "$f" | tail -n 30 | sed 's/^/#   /'
  done
}

# finish: stops the agent if still running, checks its log for sanitizer
# reports and crashes, prints the summary and exits.
finish() {
  local rep
  if [ -n "$AGENT_PID" ]; then
    stop_agent
    is "$?" "0" "agent exits with status 0 on SIGTERM"
  fi
  rep=$(grep -E 'AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:|SUMMARY:' "$E2E_TMP/agent.log" 2>/dev/null | head -n 5)
  if [ -z "$rep" ]; then ok "agent log: no sanitizer report"
  else not_ok "agent log: no sanitizer report"; printf '%s\n' "$rep" | sed 's/^/#   /'; fi
  diag "$E2E_PASSED passed, $E2E_FAILED failed"
  [ "$E2E_FAILED" -eq 0 ] && exit 0
  exit 1
}

# ---------------------------------------------------------------- ports ---

# A free loopback TCP port: random in 20000-32767, below the kernel's
# ephemeral ports (32768-60999: what a bind to port 0 or a client's
# connect gets, the C tests' servers included), not listening nor used by
# any socket, not already handed out by this script. Under tests/run.sh,
# which runs several scripts at once, each of its RUN_SLOTS slots has its
# own band of that range (RUN_SLOT): two scripts never race for one port.
free_port() {
  # Called as $(free_port), in a subshell: the ports handed out so far are
  # kept in a file, so that one run never gets the same port twice.
  local p i used="${E2E_TMP:-}/ports.used" lo=20000 width=12768
  if [ -n "${RUN_SLOTS:-}" ] && [ -n "${RUN_SLOT:-}" ] && [ "$RUN_SLOT" -lt "$RUN_SLOTS" ]; then
    width=$((12768 / RUN_SLOTS)); lo=$((20000 + RUN_SLOT * width))
  fi
  for i in $(seq 1 200); do
    p=$((lo + (RANDOM * 32768 + RANDOM) % width))
    if [ -n "${E2E_TMP:-}" ] && grep -qx "$p" "$used" 2>/dev/null; then continue; fi
    if [ -z "$(ss -Htan "( sport = :$p or dport = :$p )" 2>/dev/null)" ]; then
      [ -n "${E2E_TMP:-}" ] && echo "$p" >> "$used"
      echo "$p"
      return 0
    fi
  done
  echo "free_port: no free port found" >&2
  return 1
}

port_listening() { [ -n "$(ss -Htln "sport = :$1" 2>/dev/null)" ]; }

# ---------------------------------------------------------------- agent ---

# start_agent [extra args...]: starts $AGENT in the background on
# 127.0.0.1:$E2E_PORT_AGENT (default -w 2 unless -w is given) and waits
# until it listens. Log: $E2E_TMP/agent.log (appended across restarts).
start_agent() {
  local args=("$@") has_w="" a i
  for a in "${args[@]}"; do [ "$a" = -w ] && has_w=1; done
  [ -n "$has_w" ] || args+=(-w 2)
  echo "=== $(date +%T.%N) start: $AGENT -l 127.0.0.1:$E2E_PORT_AGENT ${args[*]}" >> "$E2E_TMP/agent.log"
  "$AGENT" -l "127.0.0.1:$E2E_PORT_AGENT" "${args[@]}" >> "$E2E_TMP/agent.log" 2>&1 &
  AGENT_PID=$!
  for i in $(seq 1 100); do
    if port_listening "$E2E_PORT_AGENT"; then
      # Wait for the workers too (they may be the ones listening).
      sleep 0.1
      AGENT_WORKERS_SEEN="$AGENT_WORKERS_SEEN $(agent_workers | tr '\n' ' ')"
      return 0
    fi
    if ! kill -0 "$AGENT_PID" 2>/dev/null; then
      wait "$AGENT_PID"; a=$?
      AGENT_PID=""
      die "agent started (it exited with status $a)"
    fi
    sleep 0.1
  done
  die "agent listens on 127.0.0.1:$E2E_PORT_AGENT within 10s"
}

# stop_agent: SIGTERM, wait; returns the agent's exit status.
stop_agent() {
  local rc
  [ -n "$AGENT_PID" ] || return 0
  AGENT_WORKERS_SEEN="$AGENT_WORKERS_SEEN $(agent_workers | tr '\n' ' ')"
  kill_wait "$AGENT_PID" 5
  rc=$?
  AGENT_PID=""
  echo "=== $(date +%T.%N) stopped, status $rc" >> "$E2E_TMP/agent.log"
  return "$rc"
}

# Child processes (workers) of the agent's master, one pid per line.
agent_workers() {
  [ -n "$AGENT_PID" ] || return 0
  pgrep -P "$AGENT_PID" 2>/dev/null
}

# start_redis PORT DIR: a redis-server on 127.0.0.1:PORT, no persistence,
# its files in DIR and its log in DIR.log; pid in REDIS_PID (the caller
# stops it); waits until it answers PING.
start_redis() {
  local i
  mkdir -p "$2"
  redis-server --port "$1" --bind 127.0.0.1 --save "" --appendonly no \
    --daemonize no --dir "$2" > "$2.log" 2>&1 &
  REDIS_PID=$!
  for i in $(seq 1 100); do
    [ "$(redis-cli -p "$1" ping 2>/dev/null)" = PONG ] && return 0
    alive "$REDIS_PID" || die "redis-server started"
    sleep 0.1
  done
  die "redis-server answers PING"
}

# -------------------------------------------------------------- haproxy ---

# haproxy3_binary: the HAProxy 3.x binary tests/run.sh runs the HAProxy
# tests again with ($HAPROXY3, else ../shared/peers/haproxy-3.4/haproxy
# from the project's root), made absolute; nothing when there is none.
haproxy3_binary() {
  local b=${HAPROXY3:-$E2E_ROOT/../shared/peers/haproxy-3.4/haproxy}
  [ -x "$b" ] || return 0
  case $b in */*) b="$(cd "$(dirname "$b")" && pwd)/$(basename "$b")" ;; esac
  "$b" -v 2>/dev/null | grep -q '^HAProxy version 3\.' && echo "$b"
}

# haproxy_at_least MAJOR MINOR: $HAPROXY's version is MAJOR.MINOR or later.
haproxy_at_least() {
  local maj min
  IFS=.- read -r maj min _ <<< "$E2E_HAPROXY_VERSION"
  is_int "$maj" && is_int "$min" || return 1
  [ "$maj" -gt "$1" ] || { [ "$maj" -eq "$1" ] && [ "$min" -ge "$2" ]; }
}

# start_haproxy: runs haproxy in the foreground (-db) on $E2E_HAPROXY_CFG
# (default: conf/haproxy-e2e.cfg) with the e2e environment, waits for the
# stats page. Log: $E2E_TMP/haproxy.log.
start_haproxy() {
  local cfg=${E2E_HAPROXY_CFG:-$E2E_LIB_DIR/conf/haproxy-e2e.cfg} out i
  if ! out=$("$HAPROXY" -c -q -f "$cfg" 2>&1); then
    diag "$out"
    die "haproxy -c accepts $cfg"
  fi
  "$HAPROXY" -db -f "$cfg" >> "$E2E_TMP/haproxy.log" 2>&1 &
  HAPROXY_PID=$!
  for i in $(seq 1 100); do
    if curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$E2E_PORT_STATS/stats"; then
      return 0
    fi
    if ! kill -0 "$HAPROXY_PID" 2>/dev/null; then
      HAPROXY_PID=""
      die "haproxy started"
    fi
    sleep 0.1
  done
  die "haproxy answers on its stats port within 10s"
}

# check_sched_policies LABEL: after 30 requests to the open listener
# (random source addresses), the agent's workers run SCHED_BATCH behind
# HAProxy 3.1+ (every one of them), and a worker serving 2.x alone runs
# SCHED_OTHER (docs/CONFIG.md, sched_batch). LABEL ends the checks' names.
check_sched_policies() {
  local label=$1 i policies
  for i in $(seq 1 30); do
    req "$E2E_PORT_OPEN" --interface "127.$((RANDOM % 200 + 20)).$((RANDOM % 250 + 1)).$((RANDOM % 250 + 1))" > /dev/null
  done
  policies=$(for p in $(agent_workers); do chrt -p "$p" | sed -n 's/.*scheduling policy: //p'; done | sort -u | tr '\n' ' ')
  diag "workers' scheduling policies: $policies"
  if haproxy_at_least 3 1; then
    is "$policies" "SCHED_BATCH " "HAProxy $E2E_HAPROXY_VERSION$label: every worker runs SCHED_BATCH"
  else
    case $policies in
      *SCHED_OTHER*) ok "HAProxy $E2E_HAPROXY_VERSION$label: a worker serving it alone runs SCHED_OTHER" ;;
      *) not_ok "HAProxy $E2E_HAPROXY_VERSION$label: a worker serving it alone runs SCHED_OTHER" ;;
    esac
  fi
}

# stats_field BACKEND SERVER COLUMN: one column of HAProxy's stats CSV for
# a server (status, check_status, check_desc, chkfail, ...).
stats_field() {
  curl -s --max-time 2 "http://127.0.0.1:$E2E_PORT_STATS/stats;csv" |
    awk -F, -v be="$1" -v srv="$2" -v name="$3" '
      NR == 1 { sub(/^# /, ""); for (i = 1; i <= NF; i++) if ($i == name) col = i; next }
      col && $1 == be && $2 == srv { print $col }'
}

# server_status [backend] [server]: the status column (UP, DOWN, "UP 1/2",
# "DOWN 1/2", MAINT, ...). Defaults: the e2e config's agent server.
E2E_SERVER_BE=spoe-agents
E2E_SERVER_NAME=agent1
server_status() {
  stats_field "${1:-$E2E_SERVER_BE}" "${2:-$E2E_SERVER_NAME}" status
}

# wait_server_state STATE SECONDS: polls until the status is exactly STATE.
wait_server_state() {
  local want=$1 secs=${2:-10} i st=""
  for i in $(seq 1 $((secs * 10))); do
    st=$(server_status "$E2E_SERVER_BE" "$E2E_SERVER_NAME")
    [ "$st" = "$want" ] && return 0
    sleep 0.1
  done
  diag "server status is '$st', waited ${secs}s for '$want'"
  return 1
}

# ------------------------------------------------------------- requests ---

# req PORT [curl args...]: prints the HTTP status code (000 on failure).
req() {
  local port=$1; shift
  curl -s -o /dev/null --max-time 5 -w '%{http_code}\n' "$@" "http://127.0.0.1:$port/" || true
}

# req_h PORT FILE [curl args...]: response headers to FILE, prints the code.
req_h() {
  local port=$1 file=$2; shift 2
  curl -s -o /dev/null -D "$file" --max-time 5 -w '%{http_code}\n' "$@" "http://127.0.0.1:$port/" || true
}

# hdr FILE NAME: value of header NAME (case-insensitive, no CR); several
# field lines are joined with ", " as HTTP says they combine.
hdr() {
  [ -f "$1" ] || { echo; return 0; }
  tr -d '\r' < "$1" | awk -v n="$2" '
    BEGIN { n = tolower(n) }
    { i = index($0, ":")
      if (i && tolower(substr($0, 1, i - 1)) == n) {
        v = substr($0, i + 1); sub(/^[ \t]+/, "", v)
        all = (seen++ ? all ", " : "") v } }
    END { print all }'
}

# leases_setup APP_PORT: what the e2e tests of a concurrency limit share
# (haproxy_leases.sh, nginx_concurrency.sh): $E2E_TMP/agent.json with the
# HTTP front on $PORT_HTTP (http_admin_token $ADMIN, both chosen here) and
# the namespace "inflight", 1 request in flight per key, leases of 60 s
# (only a release frees one within a test); the slow app
# (conf/slow_app.py) on APP_PORT, stopped by leases_stop_app.
leases_setup() {
  PORT_HTTP=$(free_port)
  ADMIN=adm1n-t0ken-e2e
  cat > "$E2E_TMP/agent.json" <<EOF
{ "http_listen": "127.0.0.1:$PORT_HTTP", "http_admin_token": "$ADMIN",
  "namespaces": [
    { "name": "default", "window_sizes": [60] },
    { "name": "inflight", "algorithm": "concurrency", "limit": 1, "lease_ms": 60000 } ] }
EOF
  command -v python3 >/dev/null 2>&1 || { not_ok "python3 is installed (the slow app)"; exit 1; }
  python3 "$E2E_LIB_DIR/conf/slow_app.py" "$1" &
  LEASES_APP_PID=$!
}
LEASES_APP_PID=""
leases_stop_app() { [ -n "$LEASES_APP_PID" ] && kill_wait "$LEASES_APP_PID" 5; LEASES_APP_PID=""; }

# in_flight PORT TOKEN NAMESPACE KEY: the leases of KEY in flight in a
# concurrency namespace, as the agent's GET /keys (HTTP front on PORT,
# http_admin_token TOKEN) shows them.
in_flight() {
  curl -s --max-time 5 -H "Authorization: Bearer $2" \
    "http://127.0.0.1:$1/keys?namespace=$3&key=$4" |
    sed -n 's/.*"in_flight":\([0-9]*\).*/\1/p'
}

# wait_in_flight PORT TOKEN NAMESPACE KEY N: until KEY has N leases in
# flight (at most 5 s).
wait_in_flight() {
  local i
  for i in $(seq 1 100); do
    [ "$(in_flight "$1" "$2" "$3" "$4")" = "$5" ] && return 0
    sleep 0.05
  done
  return 1
}

# llm_setup: what the e2e tests of token budgets share (haproxy_llm.sh,
# nginx_llm.sh): $E2E_TMP/agent.json with the HTTP front on $PORT_HTTP
# (chosen here) and the namespace "llm", 10000 tokens per minute and
# 1000000 per day, settle_ms 600000.
llm_setup() {
  PORT_HTTP=$(free_port)
  cat > "$E2E_TMP/agent.json" <<EOF
{ "http_listen": "127.0.0.1:$PORT_HTTP",
  "namespaces": [
    { "name": "default", "window_sizes": [60] },
    { "name": "llm", "window_sizes": [60, 86400],
      "limit": { "60": 10000, "86400": 1000000 }, "settle_ms": 600000 } ] }
EOF
  command -v python3 >/dev/null 2>&1 || { not_ok "python3 is installed (the app)"; exit 1; }
}

# llm_tokens TENANT WINDOW: what the agent counts for TENANT in WINDOW.
llm_tokens() {
  curl -s --max-time 5 "http://127.0.0.1:$PORT_HTTP/ratelimit?namespace=llm&key=$1&window=$2&cost=0" |
    sed -n 's/.*"rate":\([0-9]*\).*/\1/p'
}

# llm_wait_tokens TENANT N: until TENANT counts N in the minute (at most 5 s).
llm_wait_tokens() {
  local i
  for i in $(seq 1 100); do
    [ "$(llm_tokens "$1" 60)" = "$2" ] && return 0
    sleep 0.05
  done
  return 1
}

# llm_get URL TENANT TOKENS: the code of a request of TENANT ("" for none)
# whose response says it cost TOKENS (conf/slow_app.py, t=N).
llm_get() {
  curl -s -o /dev/null --max-time 20 -w '%{http_code}\n' ${2:+-H "X-Tenant: $2"} \
    "$1?t=$3" || true
}

# llm_budget_checks URL WHERE: a proxy at URL in front of the app, each
# request reserving 1000 of its tenant's (X-Tenant) budget and settling it
# (WHERE: how, for the messages): settled to the header's cost in both
# windows, a tenant over its budget denied on the next request, another
# tenant passes, no tenant refused (401).
llm_budget_checks() {
  local url=$1 where=$2 tenant="t$RANDOM$RANDOM" other="u$RANDOM$RANDOM"
  wait_window_margin 60 20
  is "$(llm_get "$url" "$tenant" 6000)" 200 "a first request passes"
  llm_wait_tokens "$tenant" 6000
  is "$(llm_tokens "$tenant" 60)" 6000 "settled $where: its 6000 tokens in the minute"
  is "$(llm_tokens "$tenant" 86400)" 6000 "... and in the day"
  is "$(llm_get "$url" "$tenant" 6000)" 200 \
    "a second one passes (6000 + an estimate of 1000 <= 10000)"
  llm_wait_tokens "$tenant" 12000
  is "$(llm_tokens "$tenant" 60)" 12000 "the tenant at 12000 tokens"
  is "$(llm_get "$url" "$tenant" 10)" 429 "over its budget: denied on the next request"
  is "$(llm_tokens "$tenant" 60)" 12000 "a denied request counts nothing"
  is "$(llm_get "$url" "$other" 10)" 200 "another tenant passes"
  is "$(llm_get "$url" "" 10)" 401 "no tenant: refused"
}

# sf_param VALUE NAME: the ;NAME=<int> parameter of a structured field item
# ('"e2e";r=0;t=12' -> r gives 0).
sf_param() {
  printf '%s\n' "$1" | sed -n "s/.*;$2=\\([0-9][0-9]*\\).*/\\1/p" | head -n 1
}

# count_codes FILE CODE: number of lines equal to CODE.
count_codes() { grep -cx "$2" "$1" 2>/dev/null || true; }

# ------------------------------------------------------------------ time ---

# wait_window_margin SIZE MARGIN: if fewer than MARGIN seconds are left in
# the current SIZE-second window (windows start at multiples of SIZE since
# the epoch), sleep into the next one, so a burst stays inside one window.
wait_window_margin() {
  local size=$1 margin=$2 now left
  now=$(date +%s)
  left=$((size - now % size))
  if [ "$left" -le "$margin" ]; then
    diag "waiting ${left}s for the next ${size}s window"
    sleep "$left.1"
  fi
}

# align_second: sleep until 20 ms after the start of the next second.
align_second() {
  local ns rem
  ns=$(date +%N)
  rem=$((1020000000 - 10#$ns))
  sleep "$((rem / 1000000000)).$(printf '%09d' $((rem % 1000000000)))"
}

# in_one_window SIZE MARGIN FN [PAUSE]: a burst whose counts a window's end
# would change (a sliding rate weighted down, a fixed or a 1 s window
# started afresh) at a usable moment. Waits until MARGIN seconds are left
# in the SIZE-second window (SIZE 1: for the start of a second), runs
# FN TRY, and runs it again when the window changed meanwhile (the clock
# read before and after it), at most 3 times: FN counts on keys of its own
# for each TRY (1, 2, 3), or on the same ones when PAUSE seconds before a
# try again let their counts go (two windows' time); it leaves its results
# where the checks after it look. Returns 0, or 1 when every try crossed a
# window's end.
in_one_window() {
  local size=$1 margin=$2 fn=$3 pause=${4:-0} try w0
  for try in 1 2 3; do
    [ "$try" -gt 1 ] && [ "$pause" != 0 ] && sleep "$pause"
    if [ "$size" -le 1 ]; then align_second; else wait_window_margin "$size" "$margin"; fi
    w0=$(( $(date +%s) / size ))
    "$fn" "$try"
    [ $(( $(date +%s) / size )) = "$w0" ] && return 0
    diag "a ${size} s window ended during $fn (try $try): once more, on new keys"
  done
  return 1
}

# ---------------------------------------------------------------- peers ---
# HAProxy nodes that list the agent as a peer (tests/e2e/peers_*.sh).
# Node I (1..3) has its configuration in $E2E_TMP/node$I.cfg (the script
# writes it) and the ports PEER_$I (its own peer), FE_$I (the frontend
# that counts and limits), RD_$I (a frontend answering what it reads of
# its cluster tables, one column per table), set by peers_ports; its pid
# is PEERS_NODE_PIDS[I], stopped by peers_stop_nodes (set
# E2E_CLEANUP_HOOK=peers_stop_nodes).
PEERS_NODE_PIDS=("" "" "" "")
# The issue's case: a limit of PEERS_LIMIT per 10 s on req_cluster,
# PEERS_REQS requests spread over the three nodes at PEERS_RATE a second
# (within 3 s); PEERS_LONG: the long tables' period (s), within which the
# counts the checks read stay put.
PEERS_LIMIT=100
PEERS_REQS=600
PEERS_RATE=200
PEERS_LONG=600

# peers_ports: PEER_I, FE_I, RD_I, MT_I (a spare frontend) for nodes 1..3.
peers_ports() {
  local i
  for i in 1 2 3; do
    eval "PEER_$i=\$(free_port) FE_$i=\$(free_port) RD_$i=\$(free_port) MT_$i=\$(free_port)"
  done
}

# peers_node_cfg I AGENT_PEERS LIMIT LONG [TABLES] [FRONTENDS]: writes node
# I's configuration: its peers section "rl" (itself and the agent on port
# AGENT_PEERS, nothing else: nodes must not share their counting tables)
# with req_local (tracked) and req_cluster (read: deny over LIMIT per 10
# s), long_local and long_cluster (a LONG-second period, read only), and
# TABLES; frontend fe (FE_I) counting and limiting, rd (RD_I) answering
# "<req_cluster> <long_cluster>" for the client's address; and FRONTENDS.
peers_node_cfg() {
  local i=$1 peer fe rd
  eval "peer=\$PEER_$i fe=\$FE_$i rd=\$RD_$i"
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
    peer agg 127.0.0.1:$2
    table req_local type ip size 100k expire 10s store http_req_rate(10s)
    table req_cluster type ip size 100k expire 60s store http_req_rate(10s)
    table long_local type ip size 100k expire ${4}s store http_req_rate(${4}s)
    table long_cluster type ip size 100k expire $((2 * $4))s store http_req_rate(${4}s)
${5:-}
frontend fe
    bind 127.0.0.1:$fe
    http-request track-sc0 src table rl/req_local
    http-request track-sc1 src table rl/long_local
    http-request deny deny_status 429 if { src,table_http_req_rate(rl/req_cluster) gt $3 }
    http-request return status 200 content-type text/plain string ok
frontend rd
    bind 127.0.0.1:$rd
    http-request return status 200 content-type text/plain lf-string "%[src,table_http_req_rate(rl/req_cluster)] %[src,table_http_req_rate(rl/long_cluster)]\n"
${6:-}
EOF
}

# peers_mixes: PEERS_MIXES, the versions of nodes 1..3 the peers tests run
# (Debian's HAProxy 2.6 as $HAPROXY, 3.x as haproxy3_binary): 2.6 + 2.6 +
# 3.4, then 2.6 + 3.4 + 3.4 (2.6 alone, saying so, without a 3.x binary).
peers_mixes() {
  local h26=${HAPROXY:-haproxy} h34
  command -v "$h26" >/dev/null 2>&1 || die "haproxy is installed (HAPROXY='$h26')"
  H26=$h26
  h34=$(haproxy3_binary)
  H34=$h34
  if [ -n "$h34" ]; then
    PEERS_MIXES=("$h26 $h26 $h34" "$h26 $h34 $h34")
  else
    diag "no HAProxy 3.x (HAPROXY3 or ../shared/peers/haproxy-3.4/haproxy): 2.6 nodes only"
    PEERS_MIXES=("$h26 $h26 $h26")
  fi
}

# peers_label BIN...: "2.6+2.6+3.4", the versions of the nodes' binaries.
peers_label() {
  local b label=""
  for b in "$@"; do
    label="$label${label:++}$("$b" -v | sed -n '1s/^HAProxy version \([0-9]*\.[0-9]*\).*/\1/p')"
  done
  echo "$label"
}

# peers_start_node I BIN: node I on HAProxy BIN (-L node<I>, its
# configuration checked first), waits until its RD port answers.
peers_start_node() {
  local i=$1 bin=$2 rd out n
  eval "rd=\$RD_$i"
  out=$("$bin" -c -q -f "$E2E_TMP/node$i.cfg" 2>&1) || { diag "$out"; die "haproxy -c accepts node$i.cfg"; }
  echo "=== $(date +%T.%N) start $bin" >> "$E2E_TMP/node$i.log"
  "$bin" -db -L "node$i" -f "$E2E_TMP/node$i.cfg" >> "$E2E_TMP/node$i.log" 2>&1 &
  PEERS_NODE_PIDS[$i]=$!
  for n in $(seq 1 100); do
    curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$rd/" && return 0
    alive "${PEERS_NODE_PIDS[$i]}" || die "node$i ($bin) started"
    sleep 0.1
  done
  die "node$i answers within 10s"
}

# peers_mix MIX [WHAT]: nodes 1, 2 and 3 started on the binaries of MIX
# ("BIN1 BIN2 BIN3", one of PEERS_MIXES; their configurations written) at
# a moment that leaves 30 s of PEERS_LONG's window; PEERS_B1..3 get the
# binaries, PEERS_LABEL the versions ("2.6+2.6+3.4").
peers_mix() {
  read -r PEERS_B1 PEERS_B2 PEERS_B3 <<< "$1"
  PEERS_LABEL=$(peers_label "$PEERS_B1" "$PEERS_B2" "$PEERS_B3")
  diag "---- nodes on HAProxy $PEERS_LABEL${2:+: $2}"
  wait_window_margin "$PEERS_LONG" 30
  peers_start_node 1 "$PEERS_B1"; peers_start_node 2 "$PEERS_B2"; peers_start_node 3 "$PEERS_B3"
}

# peers_stop_node I; peers_stop_nodes: every node started.
peers_stop_node() {
  [ -n "${PEERS_NODE_PIDS[$1]}" ] && kill_wait "${PEERS_NODE_PIDS[$1]}" 3
  PEERS_NODE_PIDS[$1]=""
}
peers_stop_nodes() {
  local i
  for i in 1 2 3; do peers_stop_node "$i"; done
}

# peers_up HTTP_PORT...: the peers sessions of the agents whose HTTP fronts
# these are (their connections gauge), added up.
peers_up() {
  local p n=0 k
  for p in "$@"; do
    k=$(curl -s --max-time 2 "http://127.0.0.1:$p/metrics" |
      awk '/^spoa_ratelimit_connections\{front="peers"\}/ { n = $2 } END { print n + 0 }')
    n=$((n + k))
  done
  echo "$n"
}

# peers_wait_up N SECS HTTP_PORT...: until N nodes are up on those agents.
peers_wait_up() {
  local want=$1 secs=$2 n
  shift 2
  for n in $(seq 1 $((secs * 10))); do
    [ "$(peers_up "$@")" -ge "$want" ] && return 0
    sleep 0.1
  done
  return 1
}

# peers_reads SRC COLUMN: what nodes 1, 2 and 3 read for SRC (the COLUMN
# of their RD answer).
peers_reads() {
  local i rd out=""
  for i in 1 2 3; do
    eval "rd=\$RD_$i"
    out="$out $(curl -s --max-time 2 --interface "$1" "http://127.0.0.1:$rd/" | awk -v c="$2" '{ print $c }')"
  done
  echo "${out# }"
}

# peers_wait_reads SRC COLUMN WANT SECS: until every node reads WANT;
# prints what they read last.
peers_wait_reads() {
  local n got=""
  for n in $(seq 1 $(($4 * 10))); do
    got=$(peers_reads "$1" "$2")
    [ "$got" = "$3 $3 $3" ] && { echo "$got"; return 0; }
    sleep 0.1
  done
  echo "$got"
  return 1
}

# peers_send SRC N RATE NODES...: N requests from SRC spread over NODES
# (round robin), RATE a second; their statuses in $E2E_TMP/send.codes.
peers_send() {
  local src=$1 n=$2 rate=$3 args=() k i fe
  shift 3
  for k in $(seq 1 "$n"); do
    i=${*:$(( (k - 1) % $# + 1 )):1}
    eval "fe=\$FE_$i"
    args+=(-o /dev/null "http://127.0.0.1:$fe/")
  done
  curl -s --rate "$rate/s" --interface "$src" -w '%{http_code}\n' "${args[@]}" > "$E2E_TMP/send.codes"
}

# peers_limit LABEL SRC REQS RATE LIMIT SLACK: REQS requests from SRC over
# the three nodes at RATE a second: LIMIT to LIMIT + SLACK admitted, each
# answered 200 or 429; PEERS_ADMITTED gets the count, PEERS_MS the time.
peers_limit() {
  local label=$1 src=$2 reqs=$3 rate=$4 limit=$5 slack=$6 t0 t1 denied
  t0=$(date +%s%N)
  peers_send "$src" "$reqs" "$rate" 1 2 3
  t1=$(date +%s%N)
  PEERS_ADMITTED=$(count_codes "$E2E_TMP/send.codes" 200)
  PEERS_MS=$(( (t1 - t0) / 1000000 ))
  denied=$(count_codes "$E2E_TMP/send.codes" 429)
  diag "$label: $reqs requests in $PEERS_MS ms: $PEERS_ADMITTED admitted, $denied denied"
  if int_between "$PEERS_ADMITTED" "$limit" $((limit + slack)); then
    ok "$label: $limit to $((limit + slack)) of $reqs admitted over three nodes ($PEERS_ADMITTED)"
  else
    not_ok "$label: $limit to $((limit + slack)) of $reqs admitted over three nodes ($PEERS_ADMITTED)"
  fi
  is "$((PEERS_ADMITTED + denied))" "$reqs" "$label: every request answered 200 or 429"
}

# peers_lag SRC SAMPLES COLUMN HIT_NODE READ_NODE...: ms from a request to
# HIT_NODE until every READ_NODE reads it (COLUMN of their RD answer, a
# table whose window does not end meanwhile: one more than it read
# before), SAMPLES times, 20 to 120 ms apart (at random: a fixed pace
# would fall in step with the agent's pushes); prints "p50 p99 max" and
# the first hit not read within 1 s.
peers_lag() {
  local src=$1 n=$2 col=$3 hit=$4 fe rds=() i rd
  shift 4
  eval "fe=\$FE_$hit"
  for i in "$@"; do eval "rd=\$RD_$i"; rds+=("$rd"); done
  python3 - "$src" "$n" "$col" "$fe" "${rds[@]}" <<'PY'
import http.client, random, sys, time
src, n, col, fe = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) - 1, int(sys.argv[4])
rds = [int(p) for p in sys.argv[5:]]
def conn(p): return http.client.HTTPConnection("127.0.0.1", p, timeout=2, source_address=(src, 0))
hit, reads = conn(fe), [conn(p) for p in rds]
def get(c):
    c.request("GET", "/"); return c.getresponse().read().decode()
lags, late = [], ""
base = [int(get(r).split()[col]) for r in reads]
for k in range(1, n + 1):
    t0 = time.monotonic()
    get(hit)
    left = set(range(len(reads)))
    seen = {}
    while left and time.monotonic() - t0 < 1:
        for i in list(left):
            seen[i] = int(get(reads[i]).split()[col])
            if seen[i] >= base[i] + k:
                left.discard(i)
    lags.append((time.monotonic() - t0) * 1000)
    if left and not late:
        late = " (hit %d: read %s after 1 s)" % (k, seen)
    time.sleep(0.02 + random.random() * 0.1)   # not in step with any period
lags.sort()
print("%.1f %.1f %.1f%s" % (lags[len(lags) // 2], lags[min(len(lags) - 1, int(len(lags) * 0.99))], lags[-1], late))
PY
}

# redis_total PORT NS KEY W: the field KEY summed over the hashes of
# namespace NS's windows of W seconds in the Redis on PORT (the agent's
# layout, strategies/redis_resp.c).
redis_total() {
  redis-cli -p "$1" --scan --pattern "rl:{$2:*}:$4:*" | while read -r h; do
    redis-cli -p "$1" hget "$h" "$3"
  done | awk '{ s += $1 } END { print s + 0 }'
}

# start_agent_as NAME PORT [args...]: another agent than start_agent's, on
# 127.0.0.1:PORT (default -w 2 unless -w is given), its log
# $E2E_TMP/agent-NAME.log (appended across restarts), its pid in
# E2E_AGENT_<NAME>; waits until it listens. stop_agent_as NAME stops it
# and returns its exit status; agent_log_clean NAME: no sanitizer report
# in its log. The script stops it in its E2E_CLEANUP_HOOK.
start_agent_as() {
  local name=$1 port=$2 args=() has_w="" a pid i
  shift 2
  args=("$@")
  for a in "${args[@]}"; do [ "$a" = -w ] && has_w=1; done
  [ -n "$has_w" ] || args+=(-w 2)
  echo "=== $(date +%T.%N) start: $AGENT -l 127.0.0.1:$port ${args[*]}" >> "$E2E_TMP/agent-$name.log"
  "$AGENT" -l "127.0.0.1:$port" "${args[@]}" >> "$E2E_TMP/agent-$name.log" 2>&1 &
  pid=$!
  eval "E2E_AGENT_$name=$pid"
  for i in $(seq 1 100); do
    port_listening "$port" && { sleep 0.1; return 0; }
    alive "$pid" || die "agent $name started"
    sleep 0.1
  done
  die "agent $name listens on 127.0.0.1:$port within 10s"
}
stop_agent_as() {
  local pid rc
  eval "pid=\${E2E_AGENT_$1:-}"
  [ -n "$pid" ] || return 0
  kill_wait "$pid" 5
  rc=$?
  eval "E2E_AGENT_$1="
  echo "=== $(date +%T.%N) stopped, status $rc" >> "$E2E_TMP/agent-$1.log"
  return "$rc"
}
agent_log_clean() {
  ! grep -qE 'AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:' "$E2E_TMP/agent-$1.log" 2>/dev/null
}
