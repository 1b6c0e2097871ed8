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
command -v nginx >/dev/null 2>&1 || { not_ok "nginx is installed (scripts/deps.sh test)"; exit 1; }
command -v python3 >/dev/null 2>&1 || { not_ok "python3 is installed (the slow app)"; exit 1; }
MODULE=${NGINX_MODULE:-$E2E_ROOT/build/nginx/ngx_http_spoa_ratelimit_module.so}
[ -f "$MODULE" ] || { not_ok "the module is built ($MODULE: make nginx-module)"; exit 1; }
diag "nginx: $(nginx -v 2>&1); module: $MODULE"
E2E_PORT_AGENT=$(free_port)
PORT_HTTP=$(free_port)
PORT_NGINX=$(free_port)
PORT_APP=$(free_port)
ADMIN=adm1n-t0ken-e2e

cat > "$E2E_TMP/agent.json" <<EOF
{ "http_listen": "127.0.0.1:$PORT_HTTP", "http_admin_token": "$ADMIN",
  "namespaces": [
    { "name": "default", "window_sizes": [60] },
    { "name": "inflight", "algorithm": "concurrency", "limit": 1, "lease_ms": 60000 } ] }
EOF

# The slow app: answers each request after the seconds its ?s= says
# (threads: several at once).
cat > "$E2E_TMP/app.py" <<'EOF'
import sys, time, urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        q = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
        time.sleep(float(q.get("s", ["0"])[0]))
        self.send_response(200); self.send_header("Content-Length", "4"); self.end_headers()
        self.wfile.write(b"app\n")
    def log_message(self, *a): pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
EOF
python3 "$E2E_TMP/app.py" "$PORT_APP" &
APP_PID=$!

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
  [ -n "$APP_PID" ] && kill_wait "$APP_PID" 5
  APP_PID=""
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
# in_flight KEY: the leases of KEY in flight, as GET /keys shows them.
in_flight() {
  curl -s --max-time 5 -H "Authorization: Bearer $ADMIN" \
    "http://127.0.0.1:$PORT_HTTP/keys?namespace=inflight&key=$1" |
    sed -n 's/.*"in_flight":\([0-9]*\).*/\1/p'
}

key="k-$$-$(date +%s)"
is "$(get "$key")" 200 \
  "a first request passes"
is "$(in_flight "$key")" 0 \
  "its lease was given back after it (log phase)"

# One slow request in flight (the app holds it 3 s).
get "$key" 3 > "$E2E_TMP/slow.code" &
slow=$!
for _ in $(seq 1 100); do [ "$(in_flight "$key")" = 1 ] && break; sleep 0.05; done
is "$(in_flight "$key")" 1 \
  "GET /keys: one lease in flight"
is "$(get "$key")" 429 \
  "a second request of the key, while the first is in flight: 429"
is "$(get "$key-other")" 200 \
  "another key passes meanwhile"
wait "$slow"
is "$(cat "$E2E_TMP/slow.code")" 200 \
  "the slow request passed"
for _ in $(seq 1 100); do [ "$(in_flight "$key")" = 0 ] && break; sleep 0.05; done
is "$(in_flight "$key")" 0 \
  "its lease given back once it was over"
codes=""
for _ in 1 2 3 4 5; do codes="$codes$(get "$key") "; done
is "$codes" "200 200 200 200 200 " \
  "5 requests one after the other all pass (each gives its lease back)"
is "$(in_flight "$key")" 0 \
  "none left in flight"

finish
