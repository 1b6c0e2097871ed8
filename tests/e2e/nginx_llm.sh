#!/usr/bin/env bash
# nginx_llm.sh - the nginx module and token budgets per tenant (issue 33,
# docs/NGINX.md "Costs known after the response"):
# nginx-examples/nginx-llm.conf as shipped (ports and paths rewritten),
# the agent's namespace "llm" with 10000 tokens per minute and 1000000
# per day, each request reserving an estimate of 1000 in both, the app
# answering what it cost in X-Usage-Tokens (conf/slow_app.py, t=N):
#   - spoa_ratelimit_settle $upstream_http_x_usage_tokens settles the
#     reservation in the log phase: 6000 tokens in the minute and the day
#     after one request of 6000;
#   - a second request of 6000 passes, and the tenant at 12000 is denied
#     (429) on the next request; another tenant passes; no tenant: 401.
# Usage: AGENT=/path/to/spoa-ratelimit NGINX_MODULE=/path/to/module.so \
#        bash tests/e2e/nginx_llm.sh
# shellcheck disable=SC2317 # the cleanup hook runs from lib.sh
E2E_TIMEOUT=${E2E_TIMEOUT:-90}
. "$(dirname "$0")/lib.sh"

e2e_init_base
e2e_need_nginx_module
diag "nginx: $(nginx -v 2>&1); module: $MODULE"
E2E_PORT_AGENT=$(free_port)
PORT_NGINX=$(free_port)
PORT_APP=$(free_port)

llm_setup
scratch="    access_log off;\n    client_body_temp_path $E2E_TMP/body;\n    proxy_temp_path $E2E_TMP/proxy;\n    fastcgi_temp_path $E2E_TMP/fastcgi;\n    uwsgi_temp_path $E2E_TMP/uwsgi;\n    scgi_temp_path $E2E_TMP/scgi;"
sed -e "s|^include /etc/nginx/modules-enabled/\*.conf;|load_module $MODULE;|" \
    -e "s/127\.0\.0\.1:12345/127.0.0.1:$E2E_PORT_AGENT/; s/127\.0\.0\.1:8082/127.0.0.1:$PORT_APP/" \
    -e "s/listen 8080;/listen 127.0.0.1:$PORT_NGINX;/; s/^worker_processes auto;/worker_processes 1;/" \
    -e "s/spoa_ratelimit_timeout 50ms;/spoa_ratelimit_timeout 2s;/" \
    -e "s|^http {|http {\n$scratch|" \
    "$E2E_ROOT/nginx-examples/nginx-llm.conf" > "$E2E_TMP/nginx.conf"

python3 "$E2E_LIB_DIR/conf/slow_app.py" "$PORT_APP" &
APP_PID=$!
NGINX_PID=""
stop_all() {
  [ -n "$NGINX_PID" ] && kill_wait "$NGINX_PID" 5
  NGINX_PID=""
  kill_wait "$APP_PID" 5
}
E2E_CLEANUP_HOOK=stop_all

g="daemon off; pid $E2E_TMP/nginx.pid; error_log $E2E_TMP/nginx-error.log info;"
start_agent -c "$E2E_TMP/agent.json" -w 2
out=$(nginx -t -p "$E2E_TMP" -c "$E2E_TMP/nginx.conf" -g "$g" 2>&1) || { not_ok "nginx -t: $out"; finish; }
nginx -p "$E2E_TMP" -c "$E2E_TMP/nginx.conf" -g "$g" &
NGINX_PID=$!
for _ in $(seq 1 100); do port_listening "$PORT_NGINX" && port_listening "$PORT_APP" && break; sleep 0.1; done
check "nginx and the app listen" port_listening "$PORT_NGINX"

llm_budget_checks "http://127.0.0.1:$PORT_NGINX/v1/chat" "in the log phase"

finish
