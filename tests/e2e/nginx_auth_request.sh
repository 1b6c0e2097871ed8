#!/usr/bin/env bash
# nginx_auth_request.sh - Debian's nginx with nginx-examples/nginx.conf in
# front of an app, the agent's HTTP front deciding through auth_request
# (docs/HTTP.md), the example's files as shipped (only ports and scratch
# paths rewritten):
#   - exact counts per client IP and per API key, the RateLimit headers
#     and a 429 with Retry-After, counts shared with HAProxy on one agent;
#   - the agent asks for the example's http_token: 401 without it;
#   - a client over its limit stays at 429 whatever it sends: 70 padding
#     headers, its own Authorization, X-RateLimit-Key or
#     X-RateLimit-Namespace, a query, a body (plain or chunked);
#   - an API key with "&", "%", "=" or spaces ("k2&cost=0",
#     "k4&limit=1000000", ...) or non-ASCII bytes is counted as that key (10
#     per second, then 429; the agent holds exactly that key), one with
#     control characters is denied (503): never served unlimited; with two
#     X-Api-Key fields the app gets one, the value that was counted;
#   - fail-open only when the agent cannot answer: stopped, or paused
#     (the check times out): 200; the agent answering an error (nginx with
#     a wrong token, an agent.json without the namespace): 503, not served.
# Usage: AGENT=/path/to/spoa-ratelimit bash tests/e2e/nginx_auth_request.sh
# (NGINX_EXAMPLES=DIR runs another copy of nginx-examples/, e.g. an older
# one, to see which cases it fails.)
E2E_TIMEOUT=${E2E_TIMEOUT:-150}
. "$(dirname "$0")/lib.sh"

e2e_init
command -v nginx >/dev/null 2>&1 || { not_ok "nginx is installed (scripts/deps.sh test)"; exit 1; }
diag "nginx: $(nginx -v 2>&1)"
ex=${NGINX_EXAMPLES:-$E2E_LIB_DIR/../../nginx-examples}
diag "example: $ex"
PORT_HTTP=$(free_port)
PORT_NGINX=$(free_port)
PORT_APP=$(free_port)
PORT_NGINX2=$(free_port)
PORT_APP2=$(free_port)
PORT_ECHO=$(free_port)
TOKEN=$(sed -n 's/.*"http_token": *"\([^"]*\)".*/\1/p' "$ex/agent.json")

# nginx_conf NAME PORT APP_PORT: $E2E_TMP/NAME.conf, the example as it is on
# these ports, including $E2E_TMP/NAME-check.conf (a copy of the include
# file; the caller may change it), with nginx's scratch files in the test
# directory and a small app.
nginx_conf() {
  local name=$1 port=$2 app=$3
  sed -e "s/127\.0\.0\.1:8081/127.0.0.1:$PORT_HTTP/; s/127\.0\.0\.1:8082/127.0.0.1:$app/" \
      -e "s/listen 8080;/listen 127.0.0.1:$port;/" \
      -e "s|/etc/nginx/spoa-ratelimit-check.conf|$E2E_TMP/$name-check.conf|" \
      -e "s|^http {|http {\n    access_log off;\n    client_body_temp_path $E2E_TMP/body;\n    proxy_temp_path $E2E_TMP/proxy;\n    fastcgi_temp_path $E2E_TMP/fastcgi;\n    uwsgi_temp_path $E2E_TMP/uwsgi;\n    scgi_temp_path $E2E_TMP/scgi;\n    server { listen 127.0.0.1:$app; location / { return 200 \"app\\\\n\"; } location /api/echo { proxy_pass http://127.0.0.1:$PORT_ECHO; } }|" \
      "$ex/nginx.conf" > "$E2E_TMP/$name.conf"
  cp "$ex/spoa-ratelimit-check.conf" "$E2E_TMP/$name-check.conf"
}

# start_nginx NAME PORT: nginx on $E2E_TMP/NAME.conf; its pid in NGINX_PID_<NAME>.
start_nginx() {
  local name=$1 port=$2 g out rc pid i
  g="daemon off; pid $E2E_TMP/$name.pid; error_log $E2E_TMP/$name-error.log;"
  out=$(nginx -t -p "$E2E_TMP" -c "$E2E_TMP/$name.conf" -g "$g" 2>&1)
  rc=$?
  check "nginx -t accepts the example ($name)" [ "$rc" -eq 0 ]
  [ "$rc" -eq 0 ] || { diag "$out"; finish; }
  nginx -p "$E2E_TMP" -c "$E2E_TMP/$name.conf" -g "$g" &
  pid=$!
  printf -v "NGINX_PID_$name" '%s' "$pid"
  for i in $(seq 1 100); do port_listening "$port" && break; sleep 0.1; done
  check "nginx listens ($name)" port_listening "$port"
}
NGINX_PID_main=""
NGINX_PID_badtoken=""
ECHO_PID=""
stop_nginxes() {
  [ -n "$NGINX_PID_main" ] && kill_wait "$NGINX_PID_main" 5
  [ -n "$NGINX_PID_badtoken" ] && kill_wait "$NGINX_PID_badtoken" 5
  [ -n "$ECHO_PID" ] && kill_wait "$ECHO_PID" 5
  NGINX_PID_main=""
  NGINX_PID_badtoken=""
  ECHO_PID=""
}
E2E_CLEANUP_HOOK=stop_nginxes

# What the app sees of X-Api-Key (the app's /api/echo): an HAProxy answering
# "<number of X-Api-Key fields>:<the last one>".
cat > "$E2E_TMP/echo.cfg" <<EOF
defaults
    mode http
    timeout connect 2s
    timeout client 10s
    timeout server 10s
listen echo
    bind 127.0.0.1:$PORT_ECHO
    http-request return status 200 content-type text/plain lf-string "%[req.fhdr_cnt(x-api-key)]:%[req.fhdr(x-api-key)]"
EOF
"$HAPROXY" -db -f "$E2E_TMP/echo.cfg" >> "$E2E_TMP/echo.log" 2>&1 &
ECHO_PID=$!

nginx_conf main "$PORT_NGINX" "$PORT_APP"
sed -e "s/127\.0\.0\.1:8081/127.0.0.1:$PORT_HTTP/" "$ex/agent.json" > "$E2E_TMP/agent.json"
start_nginx main "$PORT_NGINX"
start_agent -c "$E2E_TMP/agent.json" -w 2
for i in $(seq 1 100); do port_listening "$PORT_HTTP" && break; sleep 0.1; done
check "the agent's HTTP front listens" port_listening "$PORT_HTTP"

# ngx PATH [curl args]: status code of a request through nginx.
ngx() { local p=$1; shift; curl -s -o /dev/null --max-time 5 -w '%{http_code}\n' "$@" "http://127.0.0.1:$PORT_NGINX$p" || true; }
ngx_h() { local p=$1 f=$2; shift 2; curl -s -o /dev/null -D "$f" --max-time 5 -w '%{http_code}\n' "$@" "http://127.0.0.1:$PORT_NGINX$p" || true; }
# ngx_n N PATH [curl args]: N requests by one curl (one kept-alive
# connection), their codes on one line, space-separated.
ngx_n() {
  local n=$1 p=$2 i urls=(); shift 2
  for i in $(seq 1 "$n"); do urls+=(-o /dev/null "http://127.0.0.1:$PORT_NGINX$p"); done
  curl -s --max-time 10 -w '%{http_code} ' "$@" "${urls[@]}" | sed 's/ $//' || true
}
# same N CODE: N times CODE, space-separated.
same() { local i s=""; for i in $(seq 1 "$1"); do s="$s $2"; done; echo "${s# }"; }
# agent_rate NAMESPACE KEY: the agent's count of KEY (read with cost 0,
# straight from its HTTP front, with the example's token).
agent_rate() {
  curl -s --max-time 5 -H "Authorization: Bearer $TOKEN" -H "X-RateLimit-Key: $2" \
    "http://127.0.0.1:$PORT_HTTP/ratelimit?namespace=$1&cost=0" |
    sed -n 's/.*"rate":\([0-9]*\).*/\1/p'
}

# Per client IP: 100 per sliding 60 s. One hit through HAProxy (same
# agent, same namespace and key) counts too: nginx allows 99 more.
start_haproxy
wait_window_margin 60 30
code=$(req "$E2E_PORT_OPEN" -H 'X-Api-Key: 127.0.0.1' -H 'X-Namespace: per-ip' -H 'X-Window: 60' -H 'X-Limit: 100')
is "$code" "200" "a hit through HAProxy on namespace per-ip, key 127.0.0.1"
: > "$E2E_TMP/codes"
for i in $(seq 1 99); do ngx / >> "$E2E_TMP/codes"; done
is "$(count_codes "$E2E_TMP/codes" 200)" "99" "99 requests through nginx allowed (100 with HAProxy's)"
# The checks go over kept-alive connections (HEAD, spoa-ratelimit-check.conf):
# a closed connection leaves a TIME-WAIT on one side or the other.
tw=$(ss -tanH state time-wait "( sport = :$PORT_HTTP or dport = :$PORT_HTTP )" 2>/dev/null | wc -l)
check "nginx keeps its connections to the agent alive ($tw of 99 checks closed one)" int_between "$tw" 0 5
code=$(ngx_h / "$E2E_TMP/h-deny")
is "$code" "429" "the 101st hit of the client IP is denied with 429"
is "$(hdr "$E2E_TMP/h-deny" RateLimit-Policy)" '"per-ip";q=100;w=60' "429: RateLimit-Policy"
is "$(sf_param "$(hdr "$E2E_TMP/h-deny" RateLimit)" r)" "0" "429: RateLimit r=0"
ra=$(hdr "$E2E_TMP/h-deny" Retry-After)
check "429: Retry-After is a positive number ($ra)" int_between "$ra" 1 60
# HAProxy sees nginx's hits: the same key is over its limit there too.
code=$(req "$E2E_PORT_OPEN" -H 'X-Api-Key: 127.0.0.1' -H 'X-Namespace: per-ip' -H 'X-Window: 60' -H 'X-Limit: 100')
is "$code" "429" "HAProxy denies the key nginx used up"

# Over its limit, the client stays at 429 whatever it sends.
pad=()
for i in $(seq 1 70); do pad+=(-H "X-Pad-$i: $i"); done
is "$(ngx_n 20 / "${pad[@]}")" "$(same 20 429)" "over the limit: 20 requests with 70 X-Pad headers each stay 429"
is "$(ngx_n 5 / -H 'Authorization: Bearer not-the-token')" "$(same 5 429)" "... with its own Authorization: 429"
is "$(ngx_n 5 / -H "Authorization: Bearer $TOKEN")" "$(same 5 429)" "... with the agent's own token as Authorization: 429"
is "$(ngx_n 5 / -H 'X-RateLimit-Key: someone-else')" "$(same 5 429)" "... with its own X-RateLimit-Key: 429"
is "$(ngx_n 5 / -H 'X-RateLimit-Namespace: default')" "$(same 5 429)" "... with its own X-RateLimit-Namespace: 429"
is "$(ngx_n 5 '/?key=x&namespace=default&limit=1000000&cost=0')" "$(same 5 429)" "... with a query of its own: 429"
head -c 20000 /dev/zero | tr '\0' 'b' > "$E2E_TMP/req-body"
is "$(ngx_n 3 / --data-binary "@$E2E_TMP/req-body")" "$(same 3 429)" "... with a 20 KB body: 429"
is "$(ngx_n 3 / -H 'Transfer-Encoding: chunked' --data-binary "@$E2E_TMP/req-body")" "$(same 3 429)" "... with a chunked body: 429"

# The agent's HTTP front asks for the example's token.
code=$(curl -s -o /dev/null --max-time 5 -w '%{http_code}' "http://127.0.0.1:$PORT_HTTP/ratelimit?namespace=per-ip&key=probe")
is "$code" "401" "the agent asks for a token (http_token in agent.json): 401 without one"
code=$(curl -s -o /dev/null --max-time 5 -w '%{http_code}' -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PORT_HTTP/ratelimit?namespace=per-ip&key=probe")
is "$code" "200" "... 200 with the token of the example"

# Per API key: 10 per sliding second, headers on allowed answers (the 11
# requests within one second, lib.sh in_one_window).
api_burst() {
  : > "$E2E_TMP/codes"
  for i in $(seq 1 10); do ngx /api/x -H "X-Api-Key: key-$E2E_RUN_ID-$1" >> "$E2E_TMP/codes"; done
  code=$(ngx_h /api/x "$E2E_TMP/h-key" -H "X-Api-Key: key-$E2E_RUN_ID-$1")
  echo "$code" >> "$E2E_TMP/codes"
}
in_one_window 1 0 api_burst || diag "every burst crossed a second's end"
is "$(count_codes "$E2E_TMP/codes" 200)" "10" "10 requests with one API key allowed in a second"
is "$code" "429" "the 11th is denied"
code=$(ngx_h /api/x "$E2E_TMP/h-other" -H "X-Api-Key: other-$E2E_RUN_ID")
is "$code" "200" "another API key is counted apart"
is "$(hdr "$E2E_TMP/h-other" RateLimit-Policy)" '"per-key";q=10;w=1' "200: RateLimit-Policy"
is "$(sf_param "$(hdr "$E2E_TMP/h-other" RateLimit)" r)" "9" "200: RateLimit r=9"
is "$(ngx /api/x)" "401" "no API key: 401"

# key_burst KEY: 11 requests with X-Api-Key KEY, then the agent's count of
# KEY, all within one second (per-key's window): a burst that straddled
# two seconds is made again 2 s later (the key's counts gone by then).
# Sets KB_CODES and KB_RATE; false if no try fitted in a second.
key_burst() { KB_KEY=$1; in_one_window 1 0 key_burst_try 1; }
key_burst_try() {
  KB_CODES=$(ngx_n 11 /api/x -H "X-Api-Key: $KB_KEY")
  KB_RATE=$(agent_rate per-key "$KB_KEY")
}
for k in 'k2&cost=0' 'k3%zz' 'k4&limit=1000000' 'k5&namespace=per-ip' 'a b=c' $'utf8-\xc3\xa9-\xff'; do
  kd=$(printf '%q' "$k")
  if key_burst "$k"; then
    is "$KB_CODES" "$(same 10 200) 429" "API key $kd: 10 allowed in a second, then 429"
    is "$KB_RATE" "11" "API key $kd: the agent counted 11 hits for exactly that key"
  else
    not_ok "API key $kd: a burst within one second (3 tries)"
  fi
done
# Two X-Api-Key fields: the app gets one field, and its value is the key
# that was counted (the agent holds 1 hit for it).
seen=$(curl -s --max-time 5 -H "X-Api-Key: one-$E2E_RUN_ID" -H "X-Api-Key: two-$E2E_RUN_ID" "http://127.0.0.1:$PORT_NGINX/api/echo")
diag "two X-Api-Key fields, the app saw (fields:last) '$seen'"
is "${seen%%:*}" "1" "two X-Api-Key fields: the app gets one"
is "$(agent_rate per-key "${seen#*:}")" "1" "... the key that was counted"
# Control characters: the agent refuses the key (400), the check fails
# closed (503), never served.
is "$(ngx_n 3 /api/x -H $'X-Api-Key: ctl\x01x')" "$(same 3 503)" "API key with a control character: denied (503), never served"
is "$(ngx_n 3 /api/x -H $'X-Api-Key: del\x7fx')" "$(same 3 503)" "API key with DEL: denied (503)"
is "$(curl -s --max-time 5 -H $'X-Api-Key: ctl\x01x' "http://127.0.0.1:$PORT_NGINX/api/x")" "rate limit check failed" "... with the example's body, not the app's"

# The agent answering an error denies: nginx with a wrong token (a second
# nginx, its include file's token changed).
nginx_conf badtoken "$PORT_NGINX2" "$PORT_APP2"
sed -i -e 's/Bearer [^"]*"/Bearer not-the-agents-token"/' "$E2E_TMP/badtoken-check.conf"
start_nginx badtoken "$PORT_NGINX2"
code=$(curl -s -o "$E2E_TMP/b-bad" --max-time 5 -w '%{http_code}' -H "X-Api-Key: fresh-$E2E_RUN_ID" "http://127.0.0.1:$PORT_NGINX2/api/x")
is "$code" "503" "nginx with a wrong token: the agent's 401 denies (503)"
is "$(cat "$E2E_TMP/b-bad")" "rate limit check failed" "... not served"
code=$(curl -s -o /dev/null --max-time 5 -w '%{http_code}' "http://127.0.0.1:$PORT_NGINX2/")
is "$code" "503" "... on / too"
kill_wait "$NGINX_PID_badtoken" 5
NGINX_PID_badtoken=""

# Fail-open when the agent cannot answer: paused, the checks time out
# (504 in nginx) and the requests pass, over the limit or not.
# shellcheck disable=SC2046
kill -STOP "$AGENT_PID" $(agent_workers)
: > "$E2E_TMP/codes"
for i in 1 2 3; do ngx / >> "$E2E_TMP/codes"; done
is "$(count_codes "$E2E_TMP/codes" 200)" "3" "agent paused: the checks time out, requests pass (fail-open)"
is "$(curl -s --max-time 5 "http://127.0.0.1:$PORT_NGINX/api/x" -H "X-Api-Key: paused-$E2E_RUN_ID")" "app" "... and reach the app"
# shellcheck disable=SC2046
kill -CONT "$AGENT_PID" $(agent_workers)

# Fail-open: the agent stopped, nginx serves unlimited.
stop_agent
is "$?" "0" "agent exits with status 0 on SIGTERM"
: > "$E2E_TMP/codes"
for i in $(seq 1 5); do ngx / >> "$E2E_TMP/codes"; done
is "$(count_codes "$E2E_TMP/codes" 200)" "5" "agent down: requests pass (fail-open)"
is "$(curl -s --max-time 5 "http://127.0.0.1:$PORT_NGINX/")" "app" "... and reach the app"

# The agent answering an error denies: an agent.json without per-key.
sed -e '/"per-key"/d' "$E2E_TMP/agent.json" > "$E2E_TMP/agent-no-per-key.json"
start_agent -c "$E2E_TMP/agent-no-per-key.json" -w 1
for i in $(seq 1 100); do port_listening "$PORT_HTTP" && break; sleep 0.1; done
code=$(curl -s -o "$E2E_TMP/b-nons" --max-time 5 -w '%{http_code}' -H "X-Api-Key: nons-$E2E_RUN_ID" "http://127.0.0.1:$PORT_NGINX/api/x")
is "$code" "503" "agent without the namespace (400): denied (503)"
is "$(cat "$E2E_TMP/b-nons")" "rate limit check failed" "... not served"
stop_nginxes
finish
