#!/usr/bin/env bash
# nginx_module.sh - Debian's nginx with the ngx_http_spoa_ratelimit_module
# (make nginx-module), talking SPOP to the agent:
#   - nginx-examples/nginx-module.conf as shipped (ports, paths and the
#     load_module line rewritten): exact counts per client IP, counts shared
#     with HAProxy and the HTTP front on the same agent, 429 with
#     Retry-After and the RateLimit headers, two limits in one location
#     (one NOTIFY, one decision), no API key 401;
#   - hostile keys: "k&cost=0", "a b=c", control bytes, a 5000-byte key
#     are counted as those keys, never a bypass;
#   - long keys and the agent's max_frame_size: a 2000-byte key at the
#     default frame goes whole (the HTTP front reads its count); at
#     max_frame_size 1024 a 1,000-byte key is digested and limited; the
#     41-byte "#"+SHA-1 literal of a key has its own counter; the digest key
#     is random per configuration (a reload starts digested keys afresh)
#     unless spoa_ratelimit_key_secret sets it; at 256 bytes a location
#     that cannot fit is logged once and its long-key requests get "request
#     too big";
#   - the variables, an empty key skipping its limit, an agent's error
#     answer (unknown namespace) under fail open and fail closed;
#   - the agent stopped (fail open: 200 at once, "agent down"; fail
#     closed: 503 with Retry-After: 1), paused (the timeout, then the
#     connection given up as stuck and requests failing at once), restarted
#     (nginx reconnects);
#   - two workers (two connections each to the agent, exact counts across
#     them), nginx reload (counts go on, the old workers leave);
#   - make install's files (Debian's layout) load into nginx;
#   - configuration errors refused by nginx -t.
# Usage: AGENT=/path/to/spoa-ratelimit NGINX_MODULE=/path/to/module.so \
#        bash tests/e2e/nginx_module.sh
# shellcheck disable=SC2016,SC2317 # nginx variables in single quotes; the cleanup hook runs from lib.sh
E2E_TIMEOUT=${E2E_TIMEOUT:-170}
. "$(dirname "$0")/lib.sh"

e2e_init
e2e_need_nginx_module
diag "nginx: $(nginx -v 2>&1); module: $MODULE"
ex=$E2E_ROOT/nginx-examples
PORT_HTTP=$(free_port)
PORT_NGINX=$(free_port)
PORT_APP=$(free_port)
PORT_T=$(free_port)
TOKEN=$(sed -n 's/.*"http_token": *"\([^"]*\)".*/\1/p' "$ex/agent.json")

# The example's agent.json (HTTP front on its port), plus a namespace for
# the test's own locations.
sed -e "s/127\.0\.0\.1:8081/127.0.0.1:$PORT_HTTP/" \
    -e 's/"namespaces": \[/"namespaces": [\n    { "name": "t", "window_sizes": [1, 60] },\n    { "name": "held", "window_sizes": [8], "window_type": "fixed", "limit": 20, "delay_max_ms": 8000 },\n    { "name": "victim", "window_sizes": [60], "limit": 10 },/' \
    "$ex/agent.json" > "$E2E_TMP/agent.json"

# nginx's scratch paths in the test directory, and an app that answers
# "app" (its /echo: what it got as X-Api-Key).
scratch="    access_log off;\n    client_body_temp_path $E2E_TMP/body;\n    proxy_temp_path $E2E_TMP/proxy;\n    fastcgi_temp_path $E2E_TMP/fastcgi;\n    uwsgi_temp_path $E2E_TMP/uwsgi;\n    scgi_temp_path $E2E_TMP/scgi;"
app="    server { listen 127.0.0.1:$PORT_APP; location / { return 200 \"app\\\\n\"; } }"

# The example on these ports, the module loaded from the build.
sed -e "s|^include /etc/nginx/modules-enabled/\*.conf;|load_module $MODULE;|" \
    -e "s/127\.0\.0\.1:12345/127.0.0.1:$E2E_PORT_AGENT/; s/127\.0\.0\.1:8082/127.0.0.1:$PORT_APP/" \
    -e "s/listen 8080;/listen 127.0.0.1:$PORT_NGINX;/" \
    -e "s|^http {|http {\n$scratch\n$app|" \
    "$ex/nginx-module.conf" > "$E2E_TMP/main.conf"

# The test's own server, inside http (before its closing brace, the last
# line of the example): the variables as headers, fail open and closed.
[ "$(tail -n 1 "$E2E_TMP/main.conf")" = "}" ] || die "the example ends with http's closing brace"
sed -i '$d' "$E2E_TMP/main.conf"
cat >> "$E2E_TMP/main.conf" <<EOF
    server {
        listen 127.0.0.1:$PORT_T;
        add_header X-RL-Remaining \$spoa_ratelimit_remaining always;
        add_header X-RL-Reset \$spoa_ratelimit_reset always;
        add_header X-RL-Retry-After \$spoa_ratelimit_retry_after always;
        add_header X-RL-Exceeded \$spoa_ratelimit_exceeded always;
        add_header X-RL-Error \$spoa_ratelimit_error always;
        add_header X-RL-Limit \$spoa_ratelimit_limit always;
        add_header X-RL-Window \$spoa_ratelimit_window always;
        location /open {
            spoa_ratelimit key=\$http_x_key namespace=t window=60 limit=3;
            proxy_pass http://app;
        }
        location /closed {
            spoa_ratelimit_fail closed;
            spoa_ratelimit key=\$http_x_key namespace=t window=60 limit=3;
            proxy_pass http://app;
        }
        location /two {
            spoa_ratelimit key=\$http_x_key namespace=t window=1 limit=\$http_x_limit_sec;
            spoa_ratelimit key=\$http_x_key2 namespace=t window=60 limit=\$http_x_limit_min;
            proxy_pass http://app;
        }
        location /badns {
            spoa_ratelimit key=\$http_x_key namespace=no-such-namespace window=60 limit=3;
            proxy_pass http://app;
        }
        location /badns-closed {
            spoa_ratelimit_fail closed;
            spoa_ratelimit key=\$http_x_key namespace=no-such-namespace window=60 limit=3;
            proxy_pass http://app;
        }
        location /redir {
            spoa_ratelimit key=\$http_x_key namespace=t window=60 limit=1;
            error_page 429 = @over;
            proxy_pass http://app;
        }
        location @over {
            spoa_ratelimit key=\$http_x_key namespace=t window=60 limit=1;
            proxy_pass http://app;
        }
        location /attack {
            spoa_ratelimit_timeout 10s;
            spoa_ratelimit key=\$arg_k namespace=held window=8;
            root $E2E_TMP/www;
        }
        location /victim {
            spoa_ratelimit_fail closed;
            spoa_ratelimit_timeout 1s;
            spoa_ratelimit key=victim-$E2E_RUN_ID namespace=victim window=60;
            root $E2E_TMP/www;
        }
        location /cost {
            spoa_ratelimit key=\$http_x_key namespace=t window=60 limit=10 cost=\$http_x_cost;
            proxy_pass http://app;
        }
        location /four {
            spoa_ratelimit key=\$http_x_key namespace=t window=60 limit=3;
            spoa_ratelimit key=\$http_x_key2 namespace=t window=60 limit=3;
            spoa_ratelimit key=\$http_x_key3 namespace=t window=60 limit=3;
            spoa_ratelimit key=\$http_x_key4 namespace=t window=60 limit=3;
            proxy_pass http://app;
        }
    }
}
EOF

NGINX_PID=""
NGINX_PIDFILE=$E2E_TMP/nginx.pid
stop_nginx() {
  [ -n "$NGINX_PID" ] && kill_wait "$NGINX_PID" 5
  NGINX_PID=""
}
E2E_CLEANUP_HOOK=stop_nginx

# start_nginx CONF [WORKERS]: nginx in the foreground, its master's pid in NGINX_PID.
start_nginx() {
  local conf=$1 workers=${2:-1} g out rc i
  g="daemon off; pid $NGINX_PIDFILE; error_log $E2E_TMP/nginx-error.log info; worker_processes $workers;"
  sed -i '/^worker_processes/d' "$conf"
  out=$(nginx -t -p "$E2E_TMP" -c "$conf" -g "$g" 2>&1)
  rc=$?
  check "nginx -t accepts $(basename "$conf")" [ "$rc" -eq 0 ]
  [ "$rc" -eq 0 ] || { diag "$out"; finish; }
  nginx -p "$E2E_TMP" -c "$conf" -g "$g" &
  NGINX_PID=$!
  for i in $(seq 1 100); do port_listening "$PORT_NGINX" && break; sleep 0.1; done
  check "nginx listens" port_listening "$PORT_NGINX"
}

# nginx_workers: pids of nginx's workers, one per line.
nginx_workers() { pgrep -P "$NGINX_PID" 2>/dev/null; }

# reload_nginx: SIGHUP, until none of the old workers is left; sets
# RELOAD_BEFORE, RELOAD_AFTER (the workers' pids) and returns false if
# some old one stayed 5 s.
reload_nginx() {
  local i
  RELOAD_BEFORE=$(nginx_workers | sort | tr '\n' ' ')
  kill -HUP "$NGINX_PID"
  for i in $(seq 1 50); do
    RELOAD_AFTER=$(nginx_workers | sort | tr '\n' ' ')
    [ -n "$RELOAD_AFTER" ] && ! same_worker && return 0
    sleep 0.1
  done
  return 1
}
# same_worker: is a pid in both RELOAD_BEFORE and RELOAD_AFTER?
same_worker() {
  [ "$(comm -12 <(tr ' ' '\n' <<< "$RELOAD_BEFORE" | sed '/^$/d') \
                <(tr ' ' '\n' <<< "$RELOAD_AFTER" | sed '/^$/d') | wc -l)" -ne 0 ]
}

# Connections from nginx to the agent (established, nginx's side).
agent_conns() {
  ss -Htn state established "( dport = :$E2E_PORT_AGENT )" 2>/dev/null | wc -l
}

# wait_agent_conns N SECONDS: until nginx holds N connections to the agent.
wait_agent_conns() {
  local i
  for i in $(seq 1 $(($2 * 10))); do [ "$(agent_conns)" -eq "$1" ] && return 0; sleep 0.1; done
  return 1
}

ngx() { local p=$1; shift; curl -s -o /dev/null --max-time 5 -w '%{http_code}\n' "$@" "http://127.0.0.1:$PORT_NGINX$p" || true; }
ngx_h() { local p=$1 f=$2; shift 2; curl -s -o /dev/null -D "$f" --max-time 5 -w '%{http_code}\n' "$@" "http://127.0.0.1:$PORT_NGINX$p" || true; }
# ngx_n N PATH [curl args]: N requests on one connection, codes space-separated.
ngx_n() {
  local n=$1 p=$2 i urls=(); shift 2
  for i in $(seq 1 "$n"); do urls+=(-o /dev/null "http://127.0.0.1:$PORT_NGINX$p"); done
  curl -s --max-time 10 -w '%{http_code} ' "$@" "${urls[@]}" | sed 's/ $//' || true
}
# t PATH FILE [curl args]: a request to the test server, headers to FILE.
t() { local p=$1 f=$2; shift 2; curl -s -o /dev/null -D "$f" --max-time 5 -w '%{http_code}' "$@" "http://127.0.0.1:$PORT_T$p" || true; }
same() { local i s=""; for i in $(seq 1 "$1"); do s="$s $2"; done; echo "${s# }"; }
agent_rate() {
  curl -s --max-time 5 -H "Authorization: Bearer $TOKEN" -H "X-RateLimit-Key: $2" \
    "http://127.0.0.1:$PORT_HTTP/ratelimit?namespace=$1&cost=0&window=${3:-1}" |
    sed -n 's/.*"rate":\([0-9]*\).*/\1/p'
}
front_hit() {
  curl -s -o /dev/null --max-time 5 -w '%{http_code}' -H "Authorization: Bearer $TOKEN" \
    -H "X-RateLimit-Key: $2" "http://127.0.0.1:$PORT_HTTP/ratelimit?namespace=$1"
}

start_agent -c "$E2E_TMP/agent.json" -w 2
for i in $(seq 1 100); do port_listening "$PORT_HTTP" && break; sleep 0.1; done
start_nginx "$E2E_TMP/main.conf" 1
check "nginx's worker holds 2 connections to the agent" wait_agent_conns 2 5

# ---------------------------------------------------- the example: per IP ---
# 100 per sliding 60 s for 127.0.0.1: one hit through HAProxy, one through
# the HTTP front, 98 through nginx; the next is denied everywhere.
start_haproxy
wait_window_margin 60 30
code=$(req "$E2E_PORT_OPEN" -H 'X-Api-Key: 127.0.0.1' -H 'X-Namespace: per-ip' -H 'X-Window: 60' -H 'X-Limit: 100')
is "$code" "200" "a hit through HAProxy on namespace per-ip, key 127.0.0.1"
is "$(front_hit per-ip 127.0.0.1)" "200" "a hit through the HTTP front on the same key"
codes=$(ngx_n 98 /)
is "$codes" "$(same 98 200)" "98 requests through nginx allowed (100 with HAProxy's and the front's)"
code=$(ngx_h / "$E2E_TMP/h-deny")
is "$code" "429" "the 101st hit of the client IP is denied with 429 by nginx"
is "$(hdr "$E2E_TMP/h-deny" RateLimit-Policy)" '"per-ip";q=100;w=60' "429: RateLimit-Policy"
is "$(sf_param "$(hdr "$E2E_TMP/h-deny" RateLimit)" r)" "0" "429: RateLimit r=0"
ra=$(hdr "$E2E_TMP/h-deny" Retry-After)
# (3 over 100 per sliding 60 s may take more than a window to fall back)
check "429: Retry-After is a positive number ($ra)" int_between "$ra" 1 120
code=$(req "$E2E_PORT_OPEN" -H 'X-Api-Key: 127.0.0.1' -H 'X-Namespace: per-ip' -H 'X-Window: 60' -H 'X-Limit: 100')
is "$code" "429" "HAProxy denies the key nginx used up"
is "$(front_hit per-ip 127.0.0.1)" "403" "so does the HTTP front (403: http_deny_status of agent.json)"
is "$(agent_rate per-ip 127.0.0.1 60)" "103" "the agent counted every hit, denied ones too (100 + 3)"

# -------------------------------------------- the example: per key and IP ---
# /api/: 10 per key per second and the per-IP limit, in one NOTIFY. The
# per-IP limit is used up above: a fresh agent namespace state is not
# possible, so the per-IP limit of /api/ is checked with the count instead.
stop_agent
start_agent -c "$E2E_TMP/agent.json" -w 2
check "nginx connects to the restarted agent" wait_agent_conns 2 10
# The 11 requests within one second (lib.sh, in_one_window); each try
# counts 11 more per client IP.
api_burst() {
  codes=$(ngx_n 11 /api/x -H "X-Api-Key: key-$E2E_RUN_ID-$1")
  api_tries=$1
}
in_one_window 1 0 api_burst || diag "every burst crossed a second's end"
is "$codes" "$(same 10 200) 429" "/api/: 10 requests with one API key in a second, then 429"
is "$(agent_rate per-ip 127.0.0.1 60)" "$((11 * api_tries))" "... each also counted per client IP (two limits, one NOTIFY)"
code=$(ngx_h /api/x "$E2E_TMP/h-other" -H "X-Api-Key: other-$E2E_RUN_ID")
is "$code" "200" "another API key is counted apart"
is "$(hdr "$E2E_TMP/h-other" RateLimit-Policy)" '"api";q=10;w=1' "200: RateLimit-Policy of the most restrictive limit"
is "$(sf_param "$(hdr "$E2E_TMP/h-other" RateLimit)" r)" "9" "200: RateLimit r=9"
is "$(ngx /api/x)" "401" "no API key: 401"
is "$(agent_rate per-ip 127.0.0.1 60)" "$((11 * api_tries + 1))" "... not counted"

# key_burst KEY: 11 requests with X-Api-Key KEY, then the agent's count
# of KEY (read through the HTTP front, which refuses control characters),
# within one second; sets KB_CODES and KB_RATE (false if no try fitted in a
# second).
key_burst() { KB_KEY=$1; in_one_window 1 0 key_burst_try 1; }
key_burst_try() {
  KB_CODES=$(ngx_n 11 /api/x -H "X-Api-Key: $KB_KEY")
  KB_RATE=$(agent_rate per-key "$KB_KEY")
}
big=$(head -c 5000 /dev/zero | tr '\0' 'k')
for k in 'k2&cost=0' 'k4&limit=1000000' 'a b=c' $'ctl\x01x' $'utf8-\xc3\xa9-\xff' "${big}1"; do
  kd=$(printf '%q' "$k"); [ ${#k} -gt 100 ] && kd="a ${#k}-byte key"
  if key_burst "$k"; then
    is "$KB_CODES" "$(same 10 200) 429" "API key $kd: 10 allowed in a second, then 429"
    case $k in
      *$'\x01'*) ;;
      *) is "$KB_RATE" "11" "API key $kd: the agent counted 11 hits for exactly that key" ;;
    esac
  else
    not_ok "API key $kd: a burst within one second (3 tries)"
  fi
done
# Two 5000-byte keys differing in their last byte are two keys.
if key_burst "${big}2"; then
  is "$KB_CODES" "$(same 10 200) 429" "another 5000-byte key (its last byte differs) is counted apart"
else
  not_ok "a burst within one second (3 tries)"
fi

# ------------------------------------------------------------- variables ---
k=v-$E2E_RUN_ID
: > "$E2E_TMP/codes"
for i in 1 2 3; do t /open "$E2E_TMP/h-v$i" -H "X-Key: $k" >> "$E2E_TMP/codes"; echo >> "$E2E_TMP/codes"; done
code=$(t /open "$E2E_TMP/h-v4" -H "X-Key: $k")
is "$(count_codes "$E2E_TMP/codes" 200) $code" "3 429" "limit=3 in the directive: 3 allowed, the 4th 429"
is "$(hdr "$E2E_TMP/h-v1" X-RL-Remaining) $(hdr "$E2E_TMP/h-v1" X-RL-Exceeded) $(hdr "$E2E_TMP/h-v1" X-RL-Limit) $(hdr "$E2E_TMP/h-v1" X-RL-Window)" \
  "2 0 3 60" "\$spoa_ratelimit_remaining/_exceeded/_limit/_window after the 1st"
rs=$(hdr "$E2E_TMP/h-v1" X-RL-Reset)
check "\$spoa_ratelimit_reset is 1..60 ($rs)" int_between "$rs" 1 60
is "$(hdr "$E2E_TMP/h-v1" X-RL-Retry-After)$(hdr "$E2E_TMP/h-v1" X-RL-Error)" "" "no retry_after, no error when allowed"
is "$(hdr "$E2E_TMP/h-v4" X-RL-Remaining) $(hdr "$E2E_TMP/h-v4" X-RL-Exceeded)" "0 1" "the 4th: remaining 0, exceeded 1"
ra=$(hdr "$E2E_TMP/h-v4" X-RL-Retry-After)
is "$(hdr "$E2E_TMP/h-v4" Retry-After)" "$ra" "Retry-After is \$spoa_ratelimit_retry_after ($ra)"
code=$(t /open "$E2E_TMP/h-empty")
is "$code" "200" "an empty key skips the limit: 200"
is "$(hdr "$E2E_TMP/h-empty" X-RL-Remaining)$(hdr "$E2E_TMP/h-empty" X-RL-Error)" "" "... nothing asked, no variable"
# Two limits, one decision: the most restrictive answers.
k2=w-$E2E_RUN_ID
code=$(t /two "$E2E_TMP/h-two" -H "X-Key: $k" -H "X-Key2: $k2" -H "X-Limit-Sec: 50" -H "X-Limit-Min: 2")
is "$code $(hdr "$E2E_TMP/h-two" X-RL-Remaining) $(hdr "$E2E_TMP/h-two" X-RL-Window)" "200 1 60" \
  "two limits: the plain variables are the most restrictive one's (remaining 1 of 2 per minute)"
t /two "$E2E_TMP/h-two" -H "X-Key: $k" -H "X-Key2: $k2" -H "X-Limit-Sec: 50" -H "X-Limit-Min: 2" > /dev/null
code=$(t /two "$E2E_TMP/h-two" -H "X-Key: $k" -H "X-Key2: $k2" -H "X-Limit-Sec: 50" -H "X-Limit-Min: 2")
is "$code $(hdr "$E2E_TMP/h-two" X-RL-Exceeded)" "429 1" "... the 3rd is over the per-minute one: 429"
code=$(t /two "$E2E_TMP/h-two2" -H "X-Key: $k" -H "X-Limit-Sec: 50" -H "X-Limit-Min: 2")
is "$code" "200" "... without X-Key2 that limit is skipped: 200"
# cost=0 reads without counting; a decimal cost counts half.
kc=c-$E2E_RUN_ID
t /cost "$E2E_TMP/h-c" -H "X-Key: $kc" -H "X-Cost: 0" > /dev/null
t /cost "$E2E_TMP/h-c" -H "X-Key: $kc" -H "X-Cost: 0.5" > /dev/null
t /cost "$E2E_TMP/h-c" -H "X-Key: $kc" -H "X-Cost: 0" > /dev/null
is "$(hdr "$E2E_TMP/h-c" X-RL-Remaining)" "9" "cost=0 reads, cost=0.5 counts half (remaining 9 of 10)"
# A denial sent elsewhere by error_page: not counted again there, the
# variables still hold the decision.
kr=r-$E2E_RUN_ID
t /redir "$E2E_TMP/h-r1" -H "X-Key: $kr" > /dev/null
code=$(t /redir "$E2E_TMP/h-r2" -H "X-Key: $kr")
is "$code $(hdr "$E2E_TMP/h-r2" X-RL-Exceeded) $(hdr "$E2E_TMP/h-r2" X-RL-Remaining)" "200 1 0" \
  "error_page 429 = @over: @over serves, with the decision's variables"
is "$(agent_rate t "$kr" 60)" "2" "... and counted once per request (2 hits, @over has a limit too)"
# An answer without a decision (unknown namespace).
code=$(t /badns "$E2E_TMP/h-bad" -H "X-Key: $k")
is "$code" "200" "the agent's error answer (unknown namespace), fail open: 200"
err=$(hdr "$E2E_TMP/h-bad" X-RL-Error)
check "... \$spoa_ratelimit_error is the agent's ($err)" [ -n "$err" ]
is "$(hdr "$E2E_TMP/h-bad" X-RL-Exceeded)" "" "... and \$spoa_ratelimit_exceeded is empty"
code=$(t /badns-closed "$E2E_TMP/h-badc" -H "X-Key: $k")
is "$code $(hdr "$E2E_TMP/h-badc" Retry-After)" "503 1" "fail closed: 503 with Retry-After: 1"

# ----------------------------------- long keys, the agent's frame size ---
# A key goes whole when the NOTIFY fits the agent's max-frame-size: the
# agent digests a long key itself, as it does HAProxy's and the HTTP
# front's (one counter). When it would not fit, the module sends the
# digest under its own key; the agent digests every "#" key again, so a
# client's literal never names it. /open: limit 3 per 60 s.
sha1_literal() { printf '#%s' "$(printf '%s' "$1" | sha1sum | cut -d' ' -f1)"; }
# long_key N: an N-byte key of this run.
long_key() { printf '%s-%s' "$(head -c $(($1 - ${#E2E_RUN_ID} - 1)) /dev/zero | tr '\0' "$2")" "$E2E_RUN_ID"; }
# burst N KEY: N requests to /open with X-Key KEY, the codes; the last's headers in h-burst.
burst() {
  local i codes=""
  for i in $(seq 1 "$1"); do codes="$codes $(t /open "$E2E_TMP/h-burst" -H "X-Key: $2")"; done
  echo "${codes# }"
}
wait_window_margin 60 15
k=$(long_key 2000 L)
is "$(burst 4 "$k")" "200 200 200 429" "a 2000-byte key at the default frame size: 3 served, then 429"
is "$(agent_rate t "$k" 60)" "4" "... sent whole: the HTTP front reads its count (the agent's digest, as for HAProxy)"
is "$(burst 1 "$(sha1_literal "$k")") $(hdr "$E2E_TMP/h-burst" X-RL-Remaining)" "200 2" \
  "its 41-byte '#'+SHA-1 literal has a counter of its own"

# The agent at max_frame_size 1024: a 1,000-byte key does not fit whole.
sed 's/^{/{\n  "max_frame_size": 1024,/' "$E2E_TMP/agent.json" > "$E2E_TMP/agent-1024.json"
stop_agent
start_agent -c "$E2E_TMP/agent-1024.json" -w 2
check "nginx connects to the agent at max_frame_size 1024" wait_agent_conns 2 10
k=$(long_key 1000 M)
codes=$(burst 4 "$k")
is "$codes $(hdr "$E2E_TMP/h-burst" X-RL-Error)" "200 200 200 429 " \
  "agent max_frame_size 1024, a 1,000-byte key: 3 served, then 429 (its digest fits the frame)"
is "$(agent_rate t "$k" 60)" "0" "... counted under the module's digest, not under the key's own name"
is "$(burst 4 "$(sha1_literal "$k")")" "200 200 200 429" \
  "its 41-byte '#'+SHA-1 literal: a counter of its own (3 served, then 429)"
k9=$(long_key 900 N)
is "$(burst 1 "$k9") $(agent_rate t "$k9" 60)" "200 1" "a 900-byte key fits the 1024-byte frame: sent whole"
# No spoa_ratelimit_key_secret: the digest key is the configuration's,
# chosen again at a reload.
check "nginx reload (random digest key)" reload_nginx
check "... the new worker connects" wait_agent_conns 2 5
is "$(burst 1 "$k") $(hdr "$E2E_TMP/h-burst" X-RL-Remaining)" "200 2" \
  "after a reload without spoa_ratelimit_key_secret, the 1,000-byte key's digest is another: counted afresh"
# With it: the same digest whatever the reload.
sed -i "s|^http {|http {\n    spoa_ratelimit_key_secret \"e2e secret of $E2E_RUN_ID\";|" "$E2E_TMP/main.conf"
check "nginx reload (spoa_ratelimit_key_secret)" reload_nginx
check "... the new worker connects" wait_agent_conns 2 5
k=$(long_key 1000 P)
is "$(burst 3 "$k")" "200 200 200" "with spoa_ratelimit_key_secret: a 1,000-byte key, 3 served"
check "nginx reload (the same secret)" reload_nginx
check "... the new worker connects" wait_agent_conns 2 5
is "$(burst 1 "$k")" "429" "... and denied after a reload: the secret's digest is the same"

# The agent at its smallest max_frame_size, 256 bytes: /four needs more
# with every key digested (4 x 80 bytes): said once in nginx's log, its
# requests with long keys get no decision; short ones fit.
sed 's/^{/{\n  "max_frame_size": 256,/' "$E2E_TMP/agent.json" > "$E2E_TMP/agent-256.json"
stop_agent
start_agent -c "$E2E_TMP/agent-256.json" -w 2
check "nginx connects to the agent at max_frame_size 256" wait_agent_conns 2 10
k=$(long_key 100 Q)
code=$(t /four "$E2E_TMP/h-four" -H "X-Key: $k" -H "X-Key2: 2$k" -H "X-Key3: 3$k" -H "X-Key4: 4$k")
is "$code $(hdr "$E2E_TMP/h-four" X-RL-Error)" "200 request too big" \
  "max_frame_size 256, four 100-byte keys: no decision, 'request too big' (fail open)"
code=$(t /four "$E2E_TMP/h-four" -H "X-Key: $k")
is "$code $(hdr "$E2E_TMP/h-four" X-RL-Remaining)" "200 2" "... one of them alone fits: decided"
said=$(grep -c 'allows frames of 256 bytes, the limits at .*main.conf:[0-9]* need 335 with every key digested' "$E2E_TMP/nginx-error.log")
is "$said" "1" "nginx logs once that the agent's frame is too small for /four's limits"

# ---------------------------------------------------------- agent down ---
stop_agent
is "$?" "0" "agent exits with status 0 on SIGTERM"
sleep 0.3
s0=$(date +%s%N)
code=$(t /open "$E2E_TMP/h-down" -H "X-Key: down-$E2E_RUN_ID")
ms=$(( ($(date +%s%N) - s0) / 1000000 ))
is "$code" "200" "agent down, fail open: 200"
is "$(hdr "$E2E_TMP/h-down" X-RL-Error)" "agent down" "... \$spoa_ratelimit_error 'agent down'"
# At once, not after the timeout: the error says so ('timeout' else); the
# time is only reported (a busy machine takes 50 ms for anything).
diag "... answered in ${ms} ms (spoa_ratelimit_timeout 50 ms)"
code=$(t /closed "$E2E_TMP/h-downc" -H "X-Key: down-$E2E_RUN_ID")
is "$code $(hdr "$E2E_TMP/h-downc" Retry-After)" "503 1" "agent down, fail closed: 503 with Retry-After: 1"
is "$(ngx_n 5 /)" "$(same 5 200)" "the example (fail open) serves while the agent is down"

# ---------------------------------------------------- agent restarted ---
start_agent -c "$E2E_TMP/agent.json" -w 2
check "nginx reconnects to the restarted agent (backoff at most 2 s)" wait_agent_conns 2 5
code=$(t /open "$E2E_TMP/h-back" -H "X-Key: back-$E2E_RUN_ID")
is "$code $(hdr "$E2E_TMP/h-back" X-RL-Remaining)" "200 2" "decided again after the restart"

# ----------------------------------------------------------- timeout ---
# shellcheck disable=SC2046
kill -STOP "$AGENT_PID" $(agent_workers)
s0=$(date +%s%N)
code=$(t /open "$E2E_TMP/h-to" -H "X-Key: to-$E2E_RUN_ID")
ms=$(( ($(date +%s%N) - s0) / 1000000 ))
is "$code" "200" "agent paused, fail open: 200"
is "$(hdr "$E2E_TMP/h-to" X-RL-Error)" "timeout" "... \$spoa_ratelimit_error 'timeout'"
check "... after the 50 ms timeout ($ms ms)" int_between "$ms" 45 900
code=$(t /closed "$E2E_TMP/h-toc" -H "X-Key: to-$E2E_RUN_ID")
is "$code" "503" "agent paused, fail closed: 503"
# Nothing back for a second: the connections are given up as stuck, new
# ones get no AGENT-HELLO within a second: the agent is down, requests
# fail at once.
sleep 1.2
for i in 1 2 3 4 5 6 7 8; do t /open "$E2E_TMP/h-st" -H "X-Key: st-$E2E_RUN_ID" > /dev/null; sleep 0.2; done
s0=$(date +%s%N)
code=$(t /open "$E2E_TMP/h-st" -H "X-Key: st-$E2E_RUN_ID")
ms=$(( ($(date +%s%N) - s0) / 1000000 ))
is "$code $(hdr "$E2E_TMP/h-st" X-RL-Error)" "200 agent down" "a paused agent is found down"
# ... and requests no longer wait the timeout: the error says so, the time
# is only reported.
diag "... answered in ${ms} ms (spoa_ratelimit_timeout 50 ms)"
# shellcheck disable=SC2046
kill -CONT "$AGENT_PID" $(agent_workers)
check "nginx reconnects once the agent runs again" wait_agent_conns 2 6
code=$(t /open "$E2E_TMP/h-cont" -H "X-Key: cont-$E2E_RUN_ID")
is "$code $(hdr "$E2E_TMP/h-cont" X-RL-Remaining)" "200 2" "decided again"

# ------------------------------------ held hits hold up no one else ---
# One nginx worker carries every request over its 2 connections to the
# agent. 640 requests at once to a location whose namespace delays (16
# keys, 20 per fixed 8 s window each: 20 admitted at once, 20 held per key
# until the next window, 5 s or more away), then, while they are held, 30
# requests to another location with its own limit of 10 (fail closed,
# timeout 1 s): exactly 10 served and 20 denied, none waiting for its
# timeout (503). The agent used to stop reading a connection with 64
# answers held: every request behind them waited for the next window.
# (Static files: no upstream connection per request. nginx's workers run
# as nobody: the files must be readable to them.)
mkdir -p "$E2E_TMP/www"
echo attack > "$E2E_TMP/www/attack"
echo victim > "$E2E_TMP/www/victim"
chmod o+x "$E2E_TMP"; chmod -R o+rX "$E2E_TMP/www"
held_now() {
  curl -s --max-time 5 "http://127.0.0.1:$PORT_HTTP/metrics" |
    sed -n 's/^spoa_ratelimit_delay_held{namespace="held"} \([0-9]*\)$/\1/p'
}
: > "$E2E_TMP/attack.cfg"
for i in $(seq 0 639); do
  printf 'url = "http://127.0.0.1:%s/attack?k=atk%s-%s"\noutput = "/dev/null"\n' \
    "$PORT_T" "$((i % 16))" "$E2E_RUN_ID" >> "$E2E_TMP/attack.cfg"
done
wait_window_margin 8 5
curl -s --parallel --parallel-immediate --parallel-max 640 --max-time 20 -w '%{http_code}\n' \
  -K "$E2E_TMP/attack.cfg" > "$E2E_TMP/attack.codes" 2>/dev/null &
attack_pid=$!
held=0
for i in $(seq 1 40); do
  held=$(held_now); int_ge "$held" 160 && break
  sleep 0.05
done
check "the attack holds more than 2 x 64 hits in the agent ($held)" int_ge "$held" 160
s0=$(date +%s%N)
urls=()
for i in $(seq 1 30); do urls+=(-o /dev/null "http://127.0.0.1:$PORT_T/victim"); done
curl -s --max-time 60 -w '%{http_code}\n' "${urls[@]}" > "$E2E_TMP/victim.codes" || true
ms=$(( ($(date +%s%N) - s0) / 1000000 ))
held_after=$(held_now)
is "$(count_codes "$E2E_TMP/victim.codes" 200) $(count_codes "$E2E_TMP/victim.codes" 429) $(count_codes "$E2E_TMP/victim.codes" 503)" \
  "10 20 0" "during the attack the other location's limit holds: 10 served, 20 denied, none timed out"
check "... while hits were still held ($held_after)" int_ge "$held_after" 1
diag "30 requests to the victim location in $ms ms, $held_after attack hits held meanwhile"
wait "$attack_pid"
n200=$(count_codes "$E2E_TMP/attack.codes" 200)
n429=$(count_codes "$E2E_TMP/attack.codes" 429)
is "$((n200 + n429))" "640" "every attack request answered 200 or 429 ($n200 admitted, $n429 denied)"

# --------------------------------------------- two workers, reload ---
stop_nginx
start_nginx "$E2E_TMP/main.conf" 2
check "2 workers hold 2 connections each to the agent" wait_agent_conns 4 5
# 30 new connections (one request each): both workers take some; the
# count is exact across them.
kw=workers-$E2E_RUN_ID
: > "$E2E_TMP/codes"
for i in $(seq 1 15); do t /open "$E2E_TMP/h-w" -H "X-Key: $kw" >> "$E2E_TMP/codes"; echo >> "$E2E_TMP/codes"; done
is "$(count_codes "$E2E_TMP/codes" 200) $(count_codes "$E2E_TMP/codes" 429)" "3 12" "15 requests over 2 workers, limit 3: exactly 3 allowed"
reload_nginx
check "nginx reload: the old workers left, new ones run ($RELOAD_BEFORE-> $RELOAD_AFTER)" \
  [ -n "$RELOAD_AFTER" ] && ! same_worker
check "... holding 2 connections each to the agent" wait_agent_conns 4 5
code=$(t /open "$E2E_TMP/h-rl" -H "X-Key: $kw")
is "$code $(hdr "$E2E_TMP/h-rl" X-RL-Remaining)" "429 0" "after the reload the count goes on (still over)"
code=$(t /open "$E2E_TMP/h-rl2" -H "X-Key: reload-$E2E_RUN_ID")
is "$code $(hdr "$E2E_TMP/h-rl2" X-RL-Remaining)" "200 2" "... a new key starts at 1"
stop_nginx
bad=$(grep -E '\[(alert|crit|emerg)\]|exited on signal' "$E2E_TMP/nginx-error.log" | grep -v 'connect() .* failed' | head -5)
if [ -z "$bad" ]; then ok "nginx's error log: no alert, crit, emerg or crashed worker"
else not_ok "nginx's error log: no alert, crit, emerg or crashed worker"; printf '%s\n' "$bad" | sed 's/^/#   /'; fi

# ------------------------------------------------------- make install ---
stage=$E2E_TMP/stage
if env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS make --no-print-directory -C "$E2E_ROOT" \
     install-nginx-module-files DESTDIR="$stage" NGX_MOD="$MODULE" > "$E2E_TMP/make.out" 2>&1; then
  ok "make install-nginx-module-files DESTDIR=..."
else
  not_ok "make install-nginx-module-files DESTDIR=..."; sed 's/^/#   /' "$E2E_TMP/make.out"
fi
got=$(cd "$stage" && find . \( -type f -o -type l \) -printf '%m %P %l\n' | sort)
want="644 usr/lib/nginx/modules/ngx_http_spoa_ratelimit_module.so 
644 usr/share/nginx/modules-available/mod-http-spoa-ratelimit.conf 
777 etc/nginx/modules-enabled/50-mod-http-spoa-ratelimit.conf /usr/share/nginx/modules-available/mod-http-spoa-ratelimit.conf"
is "$got" "$(sort <<< "$want")" "installed as Debian's module packages do (module, snippet, enabled link)"
is "$(cat "$stage/usr/share/nginx/modules-available/mod-http-spoa-ratelimit.conf")" \
  "load_module modules/ngx_http_spoa_ratelimit_module.so;" "the snippet loads modules/ngx_http_spoa_ratelimit_module.so"
# nginx with the staged snippet (its prefix made the staged /usr/lib/nginx,
# so that modules/ is the staged module directory).
sed -e "s|/usr/share/nginx/modules-available|$stage/usr/share/nginx/modules-available|" \
  "$stage/usr/share/nginx/modules-available/mod-http-spoa-ratelimit.conf" > /dev/null
cat > "$E2E_TMP/installed.conf" <<EOF
include $stage/usr/share/nginx/modules-available/mod-http-spoa-ratelimit.conf;
events {}
http { spoa_ratelimit_agent 127.0.0.1:$E2E_PORT_AGENT; server { listen 127.0.0.1:$PORT_NGINX; location / { spoa_ratelimit key=\$remote_addr window=60; } } }
EOF
out=$(nginx -t -p "$stage/usr/lib/nginx/" -c "$E2E_TMP/installed.conf" -g "error_log stderr; pid $E2E_TMP/t.pid;" 2>&1)
check "nginx -t loads the installed module through the snippet" [ $? -eq 0 ]
[ -n "$out" ] && diag "$out"

# ------------------------------------------------ configuration errors ---
# conf_err NAME HTTP-BODY: nginx -t refuses it, its message names the problem.
conf_err() {
  local name=$1 body=$2 want=$3 out
  printf 'load_module %s;\nevents {}\nhttp {\n%s\n}\n' "$MODULE" "$body" > "$E2E_TMP/bad.conf"
  if ! out=$(nginx -t -p "$E2E_TMP" -c "$E2E_TMP/bad.conf" -g "error_log stderr; pid $E2E_TMP/t.pid;" 2>&1) &&
     grep -q -- "$want" <<< "$out"; then ok "nginx -t refuses $name"
  else not_ok "nginx -t refuses $name"; diag "$out"; fi
}
loc() { printf 'spoa_ratelimit_agent 127.0.0.1:1; server { listen 127.0.0.1:%s; location / { %s } }' "$PORT_NGINX" "$1"; }
conf_err "a limit without key=" "$(loc 'spoa_ratelimit window=60;')" "needs key= and window="
conf_err "a limit without window=" "$(loc 'spoa_ratelimit key=$remote_addr;')" "needs key= and window="
conf_err "an unknown parameter" "$(loc 'spoa_ratelimit key=$remote_addr window=1 burst=5;')" 'unknown parameter "burst"'
conf_err "a parameter twice" "$(loc 'spoa_ratelimit key=a key=b window=1;')" 'duplicate parameter "key"'
conf_err "limits without an agent" "server { listen 127.0.0.1:$PORT_NGINX; location / { spoa_ratelimit key=a window=1; } }" "without spoa_ratelimit_agent"
conf_err "limits in a server without an agent (another has one)" "server { listen 127.0.0.1:$PORT_NGINX; spoa_ratelimit_agent 127.0.0.1:1; } server { listen 127.0.0.1:$PORT_T; location / { spoa_ratelimit key=a window=1; } }" "in a server without spoa_ratelimit_agent"
conf_err "an agent without a port" "spoa_ratelimit_agent 127.0.0.1;" "no port"
conf_err "a status out of 400..599" "$(loc 'spoa_ratelimit_status 200;')" "must be between 400 and 599"
conf_err "a fail mode other than open or closed" "$(loc 'spoa_ratelimit_fail maybe;')" "invalid value"
conf_err "a timeout of 0" "$(loc 'spoa_ratelimit_timeout 0;')" "must not be 0"
conf_err "33 limits in a location" "$(loc "$(for i in $(seq 1 33); do printf 'spoa_ratelimit key=k%s window=1; ' "$i"; done)")" "at most 32"
ns600=$(head -c 600 /dev/zero | tr '\0' n)
conf_err "limits that fit no frame even with their keys digested" \
  "$(loc "$(for i in $(seq 1 32); do printf 'spoa_ratelimit key=$http_x_k%s window=1 namespace=%s; ' "$i" "$ns600"; done)")" \
  "over the largest SPOP frame (16380 bytes)"
conf_err "a key secret under 16 bytes" "spoa_ratelimit_key_secret short;" "must be 16 to 255 bytes long"
conf_err "a key secret twice" "spoa_ratelimit_key_secret 0123456789abcdef; spoa_ratelimit_key_secret 0123456789abcdef;" "is duplicate"
conf_err "a key secret in a server" "server { spoa_ratelimit_key_secret 0123456789abcdef; }" "not allowed here"

finish
