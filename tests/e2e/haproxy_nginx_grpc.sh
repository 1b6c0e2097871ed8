#!/usr/bin/env bash
# haproxy_nginx_grpc.sh - one key, three peers, one counter (issue 31: "the
# same counters as SPOP: a key hit through HAProxy, nginx and gRPC counts
# once per hit"): an envoy_config domain "edge" (remote_address, 100 an
# hour) hit in turns by a real HAProxy (SPOE, conf/haproxy-e2e.cfg: the
# key and namespace from request headers), Debian's nginx with the module
# (make nginx-module) and a real gRPC client (Debian's python3-grpcio,
# tests/lib/grpc_client.py). HAProxy and nginx send the key the domain's
# descriptor counts under (docs/ENVOY.md, "The descriptor tree"):
# "remote_address=10.0.0.1". Each answer says the hits of all three so far
# (HAProxy's rate, nginx's and gRPC's remaining), and the HTTP front reads
# the sum. tests/run.sh runs it with HAProxy 2.6 and again with 3.x.
# Usage: AGENT=/path/to/spoa-ratelimit NGINX_MODULE=/path/to/module.so \
#        [HAPROXY=/path/to/haproxy] bash tests/e2e/haproxy_nginx_grpc.sh
# shellcheck disable=SC2016 # nginx variables in single quotes
E2E_TIMEOUT=${E2E_TIMEOUT:-200}
. "$(dirname "$0")/lib.sh"

e2e_init
e2e_need_nginx_module
/usr/bin/python3 -c 'import grpc, google.protobuf' 2>/dev/null ||
  { not_ok "/usr/bin/python3 has python3-grpcio (scripts/deps.sh test)"; exit 1; }
PORT_GRPC=$(free_port)
PORT_HTTP=$(free_port)
PORT_NGINX=$(free_port)
KEY=remote_address=10.0.0.1

cat > "$E2E_TMP/edge.yaml" <<EOF
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 100}
EOF
cat > "$E2E_TMP/agent.json" <<EOF
{ "grpc_listen": "127.0.0.1:$PORT_GRPC", "http_listen": "127.0.0.1:$PORT_HTTP",
  "envoy_config": "$E2E_TMP/edge.yaml", "namespaces": [{ "name": "edge" }] }
EOF
mkdir -p "$E2E_TMP/www" && echo ok > "$E2E_TMP/www/rl"
cat > "$E2E_TMP/nginx.conf" <<EOF
load_module $MODULE;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path $E2E_TMP/body;
    spoa_ratelimit_agent 127.0.0.1:$E2E_PORT_AGENT;
    spoa_ratelimit_timeout 2s;
    spoa_ratelimit_fail closed;
    server {
        listen 127.0.0.1:$PORT_NGINX;
        add_header X-RL-Remaining \$spoa_ratelimit_remaining always;
        location /rl {
            spoa_ratelimit key=\$http_x_key namespace=edge window=3600 limit=100;
            root $E2E_TMP/www;
        }
    }
}
EOF

NGINX_PID=""
stop_nginx() {
  [ -n "$NGINX_PID" ] && kill_wait "$NGINX_PID" 5
  NGINX_PID=""
}
E2E_CLEANUP_HOOK=stop_nginx

# The hour's window: the nine hits stay in one (a count read across its
# end would be weighted down).
left=$((3600 - $(date +%s) % 3600))
if [ "$left" -lt 90 ]; then diag "waiting ${left}s for the next hour"; sleep $((left + 1)); fi

start_agent -c "$E2E_TMP/agent.json"
start_haproxy
g="daemon off; pid $E2E_TMP/nginx.pid; error_log $E2E_TMP/nginx-error.log info; worker_processes 1;"
out=$(nginx -t -p "$E2E_TMP" -c "$E2E_TMP/nginx.conf" -g "$g" 2>&1) || { diag "$out"; die "nginx -t"; }
nginx -p "$E2E_TMP" -c "$E2E_TMP/nginx.conf" -g "$g" &
NGINX_PID=$!
for _ in $(seq 1 100); do
  port_listening "$PORT_NGINX" && port_listening "$PORT_GRPC" && break
  sleep 0.1
done
check "nginx and the gRPC front listen" port_listening "$PORT_NGINX"

via_haproxy() {
  req_h "$E2E_PORT_OPEN" "$E2E_TMP/h" -H "X-Namespace: edge" -H "X-Api-Key: $KEY" \
    -H "X-Window: 3600" -H "X-Limit: 100" > /dev/null
  hdr "$E2E_TMP/h" X-RL-Rate
}
via_nginx() {
  curl -s -o /dev/null -D "$E2E_TMP/h" --max-time 10 -H "X-Key: $KEY" \
    "http://127.0.0.1:$PORT_NGINX/rl" || true
  hdr "$E2E_TMP/h" X-RL-Remaining
}
via_grpc() {
  /usr/bin/python3 "$E2E_ROOT/tests/lib/grpc_client.py" "127.0.0.1:$PORT_GRPC" rls \
    '{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}]}' |
    sed -n 's/.*"limit_remaining":\([0-9]*\).*/\1/p'
}

n=0
for round in 1 2 3; do
  n=$((n + 1)); is "$(via_haproxy)" "$n" "round $round: HAProxy's hit is hit $n (its rate)"
  n=$((n + 1)); is "$(via_nginx)" "$((100 - n))" "round $round: nginx's hit is hit $n (its remaining)"
  n=$((n + 1)); is "$(via_grpc)" "$((100 - n))" "round $round: gRPC's hit is hit $n (its limit_remaining)"
done
rate=$(curl -s --max-time 10 "http://127.0.0.1:$PORT_HTTP/ratelimit?namespace=edge&key=remote_address%3D10.0.0.1&window=3600&cost=0" |
  sed -n 's/.*"rate":\([0-9]*\).*/\1/p')
is "$rate" 9 "the HTTP front reads 9 hits: each counted once, whoever sent it"
stop_nginx
finish
