#!/usr/bin/env bash
# nginx_module_asan.sh - the nginx module built with ASan and UBSan
# (build/nginx-san, make test builds it) in Debian's nginx with the
# sanitizers' runtime preloaded, under load while everything around it
# fails: two workers, requests on kept-alive connections from four
# clients, the agent stopped and restarted twice and paused past the
# stuck limit, clients giving up while their requests wait, 5000-byte
# keys (digested under spoa_ratelimit_key_secret: the agent allows frames
# of 1024 bytes) beside short ones sent whole, an nginx reload, then nginx
# stopped. Passes when no sanitizer
# report was written, no worker crashed and the requests were answered.
# Usage: AGENT=... NGINX_MODULE_SAN=/path/to/sanitized/module.so \
#        bash tests/e2e/nginx_module_asan.sh
# shellcheck disable=SC2016,SC2317 # nginx variables in single quotes; the cleanup hook runs from lib.sh
E2E_TIMEOUT=${E2E_TIMEOUT:-120}
. "$(dirname "$0")/lib.sh"

e2e_init_base
command -v nginx >/dev/null 2>&1 || { not_ok "nginx is installed (scripts/deps.sh test)"; exit 1; }
command -v curl >/dev/null 2>&1 || { not_ok "curl is installed"; exit 1; }
MODULE=${NGINX_MODULE_SAN:-$E2E_ROOT/build/nginx-san/ngx_http_spoa_ratelimit_module.so}
[ -f "$MODULE" ] || { not_ok "the sanitized module is built ($MODULE: make $MODULE)"; exit 1; }
# The runtimes the module was linked with, preloaded into nginx.
preload=$(ldd "$MODULE" | awk '/lib(asan|ubsan)\.so/ { printf "%s%s", sep, $3; sep = ":" }')
case $preload in *libasan*) ;; *) not_ok "the module is linked with ASan ($preload)"; exit 1 ;; esac
diag "module: $MODULE; preload: $preload; tmp: $E2E_TMP"

E2E_PORT_AGENT=$(free_port)
PORT_NGINX=$(free_port)
PORT_APP=$(free_port)
cat > "$E2E_TMP/agent.json" <<EOF
{ "max_frame_size": 1024, "namespaces": [ { "name": "default", "window_sizes": [1, 60] } ] }
EOF
cat > "$E2E_TMP/nginx.conf" <<EOF
load_module $MODULE;
worker_processes 2;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $E2E_TMP/body;
    proxy_temp_path $E2E_TMP/proxy;
    fastcgi_temp_path $E2E_TMP/fastcgi;
    uwsgi_temp_path $E2E_TMP/uwsgi;
    scgi_temp_path $E2E_TMP/scgi;
    spoa_ratelimit_agent 127.0.0.1:$E2E_PORT_AGENT;
    spoa_ratelimit_timeout 30ms;
    spoa_ratelimit_key_secret "the sanitized module's secret";
    upstream app { server 127.0.0.1:$PORT_APP; keepalive 8; }
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    server { listen 127.0.0.1:$PORT_APP; location / { return 200 "app\\n"; } }
    server {
        listen 127.0.0.1:$PORT_NGINX;
        add_header X-RL "\$spoa_ratelimit_remaining \$spoa_ratelimit_exceeded \$spoa_ratelimit_error" always;
        location / {
            spoa_ratelimit key=\$remote_addr window=60 limit=1000000;
            spoa_ratelimit key=\$request_uri window=1 limit=20;
            spoa_ratelimit key=\$http_x_key window=60 limit=5;
            proxy_pass http://app;
        }
        location /closed/ {
            spoa_ratelimit_fail closed;
            spoa_ratelimit key=\$request_uri window=1 limit=20;
            proxy_pass http://app;
        }
    }
}
EOF

NGINX_PID=""
LOAD_PIDS=()
stop_all() {
  local p
  for p in "${LOAD_PIDS[@]}"; do kill "$p" 2>/dev/null; done
  [ -n "$NGINX_PID" ] && kill_wait "$NGINX_PID" 10
  NGINX_PID=""
}
E2E_CLEANUP_HOOK=stop_all

export_san="ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:log_path=$E2E_TMP/asan"
export_ubsan="UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:log_path=$E2E_TMP/ubsan"
g="daemon off; pid $E2E_TMP/nginx.pid; error_log $E2E_TMP/nginx-error.log info;"
out=$(env LD_PRELOAD="$preload" "$export_san" "$export_ubsan" nginx -t -p "$E2E_TMP" -c "$E2E_TMP/nginx.conf" -g "$g" 2>&1)
check "nginx -t with the sanitized module" [ $? -eq 0 ]
[ -n "$out" ] && diag "$out"

start_agent -c "$E2E_TMP/agent.json" -w 2
env LD_PRELOAD="$preload" "$export_san" "$export_ubsan" nginx -p "$E2E_TMP" -c "$E2E_TMP/nginx.conf" -g "$g" &
NGINX_PID=$!
for i in $(seq 1 100); do port_listening "$PORT_NGINX" && break; sleep 0.1; done
check "nginx listens" port_listening "$PORT_NGINX"
w=$(pgrep -P "$NGINX_PID" | head -n 1)
check "the sanitizer runtime is in nginx's worker" grep -q libasan "/proc/$w/maps"

# Four clients, 40 requests per connection, until the deadline; their
# status codes in load-N.
big=$(head -c 5000 /dev/zero | tr '\0' 'b')
deadline=$(( $(date +%s) + 14 ))
for n in 1 2 3 4; do
  (
    while [ "$(date +%s)" -lt "$deadline" ]; do
      urls=()
      for i in $(seq 1 40); do
        case $((i % 4)) in
          0) urls+=(-o /dev/null "http://127.0.0.1:$PORT_NGINX/closed/$n-$i") ;;
          *) urls+=(-o /dev/null "http://127.0.0.1:$PORT_NGINX/u$((i % 7))") ;;
        esac
      done
      if [ "$n" = 4 ]; then
        curl -s --max-time 5 -w '%{http_code}\n' -H "X-Key: ${big}$n" "${urls[@]}"
      else
        curl -s --max-time 5 -w '%{http_code}\n' -H "X-Key: k$n" "${urls[@]}"
      fi
    done > "$E2E_TMP/load-$n"
  ) &
  LOAD_PIDS+=($!)
done

sleep 1.5
stop_agent; sleep 0.7
start_agent -c "$E2E_TMP/agent.json" -w 2
sleep 1.5
# shellcheck disable=SC2046
kill -STOP "$AGENT_PID" $(agent_workers)
for i in $(seq 1 20); do curl -s -o /dev/null --max-time 0.01 "http://127.0.0.1:$PORT_NGINX/gone$i" & done
sleep 2.5
# shellcheck disable=SC2046
kill -CONT "$AGENT_PID" $(agent_workers)
sleep 1.5
kill -HUP "$NGINX_PID"
sleep 1.5
stop_agent; sleep 0.3
start_agent -c "$E2E_TMP/agent.json" -w 2
for p in "${LOAD_PIDS[@]}"; do wait "$p"; done
LOAD_PIDS=()

total=$(cat "$E2E_TMP"/load-* | grep -c .)
answered=$(cat "$E2E_TMP"/load-* | grep -cE '^(200|429|503)$')
diag "requests: $total; 200: $(cat "$E2E_TMP"/load-* | grep -c '^200$'), 429: $(cat "$E2E_TMP"/load-* | grep -c '^429$'), 503: $(cat "$E2E_TMP"/load-* | grep -c '^503$')"
check "the load ran ($total requests)" int_ge "$total" 400
is "$answered" "$total" "every request got 200, 429 or 503"
code=$(curl -s -o /dev/null --max-time 5 -w '%{http_code}' -H "X-Key: after" "http://127.0.0.1:$PORT_NGINX/after")
is "$code" "200" "nginx still answers"

kill_wait "$NGINX_PID" 10
NGINX_PID=""
reports=$(cat "$E2E_TMP"/asan* "$E2E_TMP"/ubsan* 2>/dev/null | head -n 30)
if [ -z "$reports" ]; then ok "no ASan or UBSan report from nginx with the module"
else not_ok "no ASan or UBSan report from nginx with the module"; printf '%s\n' "$reports" | sed 's/^/#   /'; fi
bad=$(grep -E '\[(alert|crit|emerg)\]|exited on signal' "$E2E_TMP/nginx-error.log" | head -5)
if [ -z "$bad" ]; then ok "nginx's error log: no alert, crit, emerg or crashed worker"
else not_ok "nginx's error log: no alert, crit, emerg or crashed worker"; printf '%s\n' "$bad" | sed 's/^/#   /'; fi
finish
