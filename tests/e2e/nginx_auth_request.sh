#!/usr/bin/env bash
# nginx_auth_request.sh - Debian's nginx with nginx-examples/nginx.conf in
# front of an app, the agent's HTTP front deciding through auth_request
# (docs/HTTP.md): exact counts per client IP and per API key, the
# RateLimit headers and a 429 with Retry-After, counts shared with HAProxy
# on the same agent, and fail-open when the agent is down.
# Usage: AGENT=/path/to/spoa-ratelimit bash tests/e2e/nginx_auth_request.sh
. "$(dirname "$0")/lib.sh"

e2e_init
command -v nginx >/dev/null 2>&1 || { not_ok "nginx is installed (scripts/deps.sh test)"; exit 1; }
diag "nginx: $(nginx -v 2>&1)"
ex="$E2E_LIB_DIR/../../nginx-examples"
PORT_HTTP=$(free_port)
PORT_NGINX=$(free_port)
PORT_APP=$(free_port)

# The example as it is, on this run's ports, with its include beside it
# and nginx's scratch files in the test directory; and a small app.
sed -e "s/127\.0\.0\.1:8081/127.0.0.1:$PORT_HTTP/; s/127\.0\.0\.1:8082/127.0.0.1:$PORT_APP/" \
    -e "s/listen 8080;/listen 127.0.0.1:$PORT_NGINX;/" \
    -e "s|/etc/nginx/spoa-ratelimit-check.conf|$E2E_TMP/spoa-ratelimit-check.conf|" \
    -e "s|^http {|http {\n    access_log off;\n    client_body_temp_path $E2E_TMP/body;\n    proxy_temp_path $E2E_TMP/proxy;\n    fastcgi_temp_path $E2E_TMP/fastcgi;\n    uwsgi_temp_path $E2E_TMP/uwsgi;\n    scgi_temp_path $E2E_TMP/scgi;\n    server { listen 127.0.0.1:$PORT_APP; location / { return 200 \"app\\\\n\"; } }|" \
    "$ex/nginx.conf" > "$E2E_TMP/nginx.conf"
cp "$ex/spoa-ratelimit-check.conf" "$E2E_TMP/"
sed -e "s/127\.0\.0\.1:8081/127.0.0.1:$PORT_HTTP/" "$ex/agent.json" > "$E2E_TMP/agent.json"

NGINX_G="daemon off; pid $E2E_TMP/nginx.pid; error_log $E2E_TMP/nginx-error.log;"
out=$(nginx -t -p "$E2E_TMP" -c "$E2E_TMP/nginx.conf" -g "$NGINX_G" 2>&1)
check "nginx -t accepts the example" [ $? -eq 0 ]
[ "$E2E_FAILED" -eq 0 ] || { diag "$out"; finish; }
nginx -p "$E2E_TMP" -c "$E2E_TMP/nginx.conf" -g "$NGINX_G" &
NGINX_PID=$!
for i in $(seq 1 100); do port_listening "$PORT_NGINX" && break; sleep 0.1; done
check "nginx listens" port_listening "$PORT_NGINX"

start_agent -c "$E2E_TMP/agent.json" -w 2
for i in $(seq 1 100); do port_listening "$PORT_HTTP" && break; sleep 0.1; done
check "the agent's HTTP front listens" port_listening "$PORT_HTTP"

# ngx PATH [curl args]: status code of a request through nginx.
ngx() { local p=$1; shift; curl -s -o /dev/null --max-time 5 -w '%{http_code}\n' "$@" "http://127.0.0.1:$PORT_NGINX$p" || true; }
ngx_h() { local p=$1 f=$2; shift 2; curl -s -o /dev/null -D "$f" --max-time 5 -w '%{http_code}\n' "$@" "http://127.0.0.1:$PORT_NGINX$p" || true; }

# Per client IP: 100 per sliding 60 s. One hit through HAProxy (same
# agent, same namespace and key) counts too: nginx allows 99 more.
start_haproxy
wait_window_margin 60 20
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

# Per API key: 10 per sliding second, headers on allowed answers.
align_second
: > "$E2E_TMP/codes"
for i in $(seq 1 10); do ngx /api/x -H "X-Api-Key: key-$E2E_RUN_ID" >> "$E2E_TMP/codes"; done
code=$(ngx_h /api/x "$E2E_TMP/h-key" -H "X-Api-Key: key-$E2E_RUN_ID")
echo "$code" >> "$E2E_TMP/codes"
is "$(count_codes "$E2E_TMP/codes" 200)" "10" "10 requests with one API key allowed in a second"
is "$code" "429" "the 11th is denied"
code=$(ngx_h /api/x "$E2E_TMP/h-other" -H "X-Api-Key: other-$E2E_RUN_ID")
is "$code" "200" "another API key is counted apart"
is "$(hdr "$E2E_TMP/h-other" RateLimit-Policy)" '"per-key";q=10;w=1' "200: RateLimit-Policy"
is "$(sf_param "$(hdr "$E2E_TMP/h-other" RateLimit)" r)" "9" "200: RateLimit r=9"
is "$(ngx /api/x)" "401" "no API key: 401"

# Fail-open: the agent stopped, nginx serves unlimited.
stop_agent
is "$?" "0" "agent exits with status 0 on SIGTERM"
: > "$E2E_TMP/codes"
for i in $(seq 1 5); do ngx / >> "$E2E_TMP/codes"; done
is "$(count_codes "$E2E_TMP/codes" 200)" "5" "agent down: requests pass (fail-open)"
is "$(curl -s --max-time 5 "http://127.0.0.1:$PORT_NGINX/")" "app" "... and reach the app"
kill_wait "$NGINX_PID" 5
finish
