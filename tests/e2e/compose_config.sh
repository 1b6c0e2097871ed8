#!/usr/bin/env bash
# tests/e2e/compose_config.sh - static checks of the multi-node demo
# (haproxy-examples/docker-compose.yml, cluster-*.json). No Docker engine
# is needed: "docker-compose config" only parses and validates
# (tests/e2e/docker_demo.sh runs the demo).
#
#   - docker-compose -f haproxy-examples/docker-compose.yml config -q,
#     without and with --profile postgres, and the services each one runs;
#   - every image is a local spoa-ratelimit/... one, built by one service;
#   - the agent configurations with "$AGENT -t -c FILE" (-t creates the
#     strategy without connecting, so no store is needed);
#   - the HAProxy configuration with the demo's environment (haproxy -c),
#     when haproxy is installed.
#
# docker-compose (Debian 12 package, v1.29) is installed with apt-get when
# it is missing and we are root; otherwise those checks print "ok # skip".
# Prints "ok - ..." / "not ok - ..." lines, exits non-zero on a failure.
set -u
cd "$(dirname "$0")/../.." || exit 1
dir=haproxy-examples
compose_file=$dir/docker-compose.yml
failed=0

ok() { printf 'ok - %s\n' "$*"; }
not_ok() { printf 'not ok - %s\n' "$*"; failed=$((failed + 1)); }
skip() { printf 'ok # skip %s\n' "$*"; }
diag() { printf '%s\n' "$@" | sed 's/^/# /'; }

# ------------------------------------------------------------ compose ---
compose=""
if command -v docker-compose >/dev/null 2>&1; then
  compose=docker-compose
elif [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  diag "installing docker-compose (apt-get)"
  if ! out=$(DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends docker-compose 2>&1); then
    # The package lists may be missing or stale.
    out=$( (DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 update -qq &&
            DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends docker-compose) 2>&1)
  fi
  if command -v docker-compose >/dev/null 2>&1; then
    compose=docker-compose
  else
    diag "$(printf '%s\n' "$out" | tail -5)"
  fi
fi

# The services of the resolved file that belong to profile $1 ("" = the
# services without a profile, the ones a plain "up" starts), sorted, on one
# line. docker-compose 1.29's "config --services" ignores profiles, so the
# normalized "config" output is read instead.
services() {
  "$compose" -f "$compose_file" config 2>/dev/null | awk -v want="$1" '
    /^[^ ]/ { insvc = ($0 == "services:"); next }
    !insvc { next }
    /^  [^ ][^:]*:$/ { if (svc != "") done(); svc = substr($1, 1, length($1) - 1); prof = ""; inprof = 0; next }
    /^    profiles:/ { inprof = 1; next }
    inprof && /^ *- / { prof = prof " " $2; next }
    /^    [^ ]/ { inprof = 0 }
    function done() { if ((want == "" && prof == "") || index(prof " ", " " want " ")) print svc }
    END { if (svc != "") done() }' | sort | tr '\n' ' ' | sed 's/ $//'
}

if [ -z "$compose" ]; then
  skip "docker-compose config: docker-compose not installed (apt-get install docker-compose, as root)"
  skip "docker-compose config --profile postgres: docker-compose not installed"
else
  diag "$("$compose" version --short 2>/dev/null || "$compose" --version)"
  if out=$("$compose" -f "$compose_file" config -q 2>&1); then
    ok "docker-compose config -q: $compose_file is valid"
  else
    not_ok "docker-compose config -q: $compose_file is valid"; diag "$out"
  fi
  got=$(services "")
  want="agent-a agent-b haproxy-a haproxy-b redis"
  if [ "$got" = "$want" ]; then
    ok "default profile runs: $got"
  else
    not_ok "default profile runs: $want"; diag "got: $got"
  fi
  if out=$("$compose" -f "$compose_file" --profile postgres config -q 2>&1); then
    ok "docker-compose --profile postgres config -q is valid"
  else
    not_ok "docker-compose --profile postgres config -q is valid"; diag "$out"
  fi
  got=$(services postgres)
  want="agent-pg-a agent-pg-b haproxy-pg-a haproxy-pg-b postgres"
  if [ "$got" = "$want" ]; then
    ok "profile postgres adds: $got"
  else
    not_ok "profile postgres adds: $want"; diag "got: $got"
  fi
  # No image comes from a registry: each is spoa-ratelimit/..., built by
  # exactly one service (two building one tag at once fail with BuildKit).
  got=$("$compose" -f "$compose_file" --profile postgres config 2>/dev/null | awk '
    /^[^ ]/ { insvc = ($0 == "services:"); next }
    !insvc { next }
    /^  [^ ]/ { if (img != "") print img, b; img = ""; b = 0; next }
    /^    build:/ { b = 1 }
    /^    image:/ { img = $2 }
    END { if (img != "") print img, b }' |
    awk '{ n[$1] += $2 } END { for (i in n) printf "%s=%d\n", i, n[i] }' | sort | tr '\n' ' ' | sed 's/ $//')
  want="spoa-ratelimit/agent=1 spoa-ratelimit/haproxy:2.6=1 spoa-ratelimit/postgres:15=1 spoa-ratelimit/redis:7=1"
  if [ "$got" = "$want" ]; then
    ok "local images only, each built by one service: $got"
  else
    not_ok "local images only, each built by one service: $want"; diag "got: $got"
  fi
  # Every file the compose file mounts or builds from exists.
  missing=""
  for f in haproxy.cfg spoe-ratelimit.conf cluster-redis.json cluster-postgres.json Dockerfile \
           docker/haproxy/Dockerfile docker/redis/Dockerfile docker/postgres/Dockerfile \
           docker/postgres/entrypoint.sh; do
    [ -f "$dir/$f" ] || missing="$missing $f"
  done
  if [ -z "$missing" ]; then ok "files used by the compose file exist"; else not_ok "files used by the compose file exist (missing:$missing)"; fi
fi

# ------------------------------------------- agent configurations (-t) ---
agent=${AGENT:-}
[ -z "$agent" ] && [ -x ./spoa-ratelimit ] && agent=./spoa-ratelimit
if [ -z "$agent" ] || [ ! -x "$agent" ]; then
  skip "spoa-ratelimit -t: no agent binary (set AGENT or run make)"
else
  for f in "$dir"/cluster-redis.json "$dir"/cluster-postgres.json; do
    if out=$("$agent" -t -c "$f" 2>&1); then
      ok "spoa-ratelimit -t -c $f: $out"
    else
      not_ok "spoa-ratelimit -t -c $f"; diag "$out"
    fi
  done
fi

# The compose file's store addresses match the agent configurations.
ip_of() { sed -n "/^  $1:/,/^  [a-z]/s/.*ipv4_address: *\([0-9.]*\).*/\1/p" "$compose_file" | head -1; }
redis_ip=$(ip_of redis) pg_ip=$(ip_of postgres)
if [ -n "$redis_ip" ] && grep -q "\"host\": *\"$redis_ip\"" "$dir/cluster-redis.json"; then
  ok "cluster-redis.json points at the redis service ($redis_ip)"
else
  not_ok "cluster-redis.json points at the redis service ('$redis_ip')"
fi
if [ -n "$pg_ip" ] && grep -q "host=$pg_ip " "$dir/cluster-postgres.json"; then
  ok "cluster-postgres.json points at the postgres service ($pg_ip)"
else
  not_ok "cluster-postgres.json points at the postgres service ('$pg_ip')"
fi

# ---------------------------------------- HAProxy with the demo's env ---
if command -v haproxy >/dev/null 2>&1; then
  if out=$(env RL_BIND=0.0.0.0:8080 RL_BIND_STRICT=0.0.0.0:8081 RL_APP=127.0.0.1:8090 \
           RL_STATS=0.0.0.0:8404 RL_AGENT=10.250.47.21:12345 RL_LIMIT_IP=1000 \
           RL_LIMIT_KEY_SEC=100 RL_LIMIT_KEY_MIN=10 haproxy -c -f "$dir/haproxy.cfg" 2>&1); then
    ok "haproxy -c accepts haproxy.cfg with the compose environment"
  else
    not_ok "haproxy -c accepts haproxy.cfg with the compose environment"; diag "$out"
  fi
else
  skip "haproxy -c: haproxy not installed"
fi

[ "$failed" -eq 0 ]
