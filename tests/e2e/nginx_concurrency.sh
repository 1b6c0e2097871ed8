#!/usr/bin/env bash
# nginx_concurrency.sh - the nginx module and a concurrency limit (issue
# 32, docs/NGINX.md "Concurrency limits"): a location with limit 1 in
# flight per key in front of a slow app:
#   - while one request is in flight, another of the same key is denied
#     (429), another key's passes;
#   - the module gives its lease back in its log phase, without a
#     directive: once the slow request is over, the next one passes at
#     once (leases of 60 s: only a release can free it), and 5 requests
#     one after the other all pass;
#   - GET /keys shows the leases in flight (1 during, 0 after).
# Usage: AGENT=/path/to/spoa-ratelimit NGINX_MODULE=/path/to/module.so \
#        bash tests/e2e/nginx_concurrency.sh
# shellcheck disable=SC2016,SC2317 # nginx variables in single quotes; the cleanup hook runs from lib.sh
E2E_TIMEOUT=${E2E_TIMEOUT:-90}
. "$(dirname "$0")/lib.sh"

e2e_init_base
e2e_need_nginx_module
diag "nginx: $(nginx -v 2>&1); module: $MODULE"
E2E_PORT_AGENT=$(free_port)
PORT_NGINX=$(free_port)
PORT_APP=$(free_port)
leases_setup "$PORT_APP"

# nginx's scratch paths in the test directory.
scratch=$(for t in client_body proxy fastcgi uwsgi scgi; do
  printf '    %s_temp_path %s;\n' "$t" "$E2E_TMP/$t"; done)
cat > "$E2E_TMP/nginx.conf" <<EOF
load_module $MODULE;
events { worker_connections 256; }
http {
    access_log off;
$scratch
    spoa_ratelimit_agent 127.0.0.1:$E2E_PORT_AGENT;
    spoa_ratelimit_timeout 2s;
    spoa_ratelimit_fail closed;
    server {
        listen 127.0.0.1:$PORT_NGINX;
        location / {
            spoa_ratelimit key=\$http_x_key namespace=inflight window=1;
            proxy_pass http://127.0.0.1:$PORT_APP;
        }
    }
}
EOF

NGINX_PID=""
stop_all() {
  [ -n "$NGINX_PID" ] && kill_wait "$NGINX_PID" 5
  NGINX_PID=""
  leases_stop_app
}
E2E_CLEANUP_HOOK=stop_all

g="daemon off; pid $E2E_TMP/nginx.pid; error_log $E2E_TMP/nginx-error.log info; worker_processes 1;"
start_agent -c "$E2E_TMP/agent.json" -w 2
out=$(nginx -t -p "$E2E_TMP" -c "$E2E_TMP/nginx.conf" -g "$g" 2>&1) || { not_ok "nginx -t: $out"; finish; }
nginx -p "$E2E_TMP" -c "$E2E_TMP/nginx.conf" -g "$g" &
NGINX_PID=$!
for _ in $(seq 1 100); do port_listening "$PORT_NGINX" && port_listening "$PORT_APP" && break; sleep 0.1; done
check "nginx and the app listen" port_listening "$PORT_NGINX"

# get KEY [SECONDS]: the code of a request of key KEY the app holds SECONDS.
get() {
  curl -s -o /dev/null --max-time 20 -w '%{http_code}\n' -H "X-Key: $1" \
    "http://127.0.0.1:$PORT_NGINX/?s=${2:-0}" || true
}
# leases KEY: the leases of KEY in flight (GET /keys).
leases() { in_flight "$PORT_HTTP" "$ADMIN" inflight "$1"; }

key="k-$$-$(date +%s)"
is "$(get "$key")" 200 \
  "a first request passes"
is "$(leases "$key")" 0 \
  "its lease was given back after it (log phase)"

# One slow request in flight (the app holds it 3 s).
get "$key" 3 > "$E2E_TMP/slow.code" &
slow=$!
wait_in_flight "$PORT_HTTP" "$ADMIN" inflight "$key" 1
is "$(leases "$key")" 1 \
  "GET /keys: one lease in flight"
is "$(get "$key")" 429 \
  "a second request of the key, while the first is in flight: 429"
is "$(get "$key-other")" 200 \
  "another key passes meanwhile"
wait "$slow"
is "$(cat "$E2E_TMP/slow.code")" 200 \
  "the slow request passed"
wait_in_flight "$PORT_HTTP" "$ADMIN" inflight "$key" 0
is "$(leases "$key")" 0 \
  "its lease given back once it was over"
codes=""
for _ in 1 2 3 4 5; do codes="$codes$(get "$key") "; done
is "$codes" "200 200 200 200 200 " \
  "5 requests one after the other all pass (each gives its lease back)"
is "$(leases "$key")" 0 \
  "none left in flight"

finish
