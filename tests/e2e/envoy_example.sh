#!/usr/bin/env bash
# envoy_example.sh - the shipped Envoy example (docs/envoy-example/) works
# as docs/ENVOY.md, "The example", says. No Envoy binary exists here (Debian
# has none): tests/lib/envoy_actions.py makes, from envoy.yaml's own
# rate_limits actions, the RateLimitRequest Envoy would send for a request,
# and a real gRPC client (python3-grpcio, tests/lib/grpc_client.py) sends
# it to the agent on the example's agent.json and ratelimit.yaml:
#   - envoy.yaml's filter names the domain of ratelimit.yaml, asks the
#     agent's grpc_listen port (HTTP/2 prior knowledge), V3, fail open,
#     Envoy's own X-RateLimit headers off; "spoa-ratelimit -t" accepts
#     agent.json with ratelimit.yaml;
#   - GET / with X-Api-Key: two descriptors, 600 a minute per address and
#     100 a second per key, the RateLimit fields of both; the partner's
#     key 1000 ("partner"); without the header one descriptor;
#   - POST /login: five per address in 15 minutes, the sixth OVER_LIMIT
#     with Retry-After and a problem document; a GET /login asks nothing.
# Usage: AGENT=/path/to/spoa-ratelimit bash tests/e2e/envoy_example.sh
# shellcheck disable=SC2317 # has() is called through check
. "$(dirname "$0")/lib.sh"

e2e_init_base
/usr/bin/python3 -c 'import grpc, google.protobuf, yaml' 2>/dev/null ||
  { not_ok "/usr/bin/python3 has python3-grpcio and python3-yaml (scripts/deps.sh test)"; exit 1; }
ex=$E2E_ROOT/docs/envoy-example
E2E_PORT_AGENT=$(free_port)
PORT_GRPC=$(free_port)
PORT_HTTP=$(free_port)

# envoy.yaml and the agent's files agree: the domain, the port, HTTP/2.
is "$(/usr/bin/python3 "$E2E_ROOT/tests/lib/envoy_actions.py" "$ex/envoy.yaml" settings)" \
  "domain=$(sed -n 's/^domain: //p' "$ex/ratelimit.yaml") transport=V3 failure_mode_deny=False x_headers=OFF port=$(sed -n 's/.*"grpc_listen": "127.0.0.1:\([0-9]*\)".*/\1/p' "$ex/agent.json") h2=True" \
  "envoy.yaml asks ratelimit.yaml's domain at agent.json's grpc_listen over HTTP/2, V3, fail open, no X-RateLimit headers"

# The example's agent.json on free ports, its envoy_config the shipped YAML.
sed -e "s/127\.0\.0\.1:8089/127.0.0.1:$PORT_GRPC/; s/127\.0\.0\.1:8081/127.0.0.1:$PORT_HTTP/" \
    -e "s|\"envoy_config\": \"[^\"]*\"|\"envoy_config\": \"$ex/ratelimit.yaml\"|" \
    "$ex/agent.json" > "$E2E_TMP/agent.json"
out=$("$AGENT" -t -c "$E2E_TMP/agent.json" 2>&1)
check "spoa-ratelimit -t accepts agent.json with ratelimit.yaml" test $? -eq 0
[ -n "$out" ] && diag "$out"

# The login window (900 s): its six calls stay in one.
left=$((900 - $(date +%s) % 900))
if [ "$left" -lt 60 ]; then diag "waiting ${left}s for the next 900 s window"; sleep $((left + 1)); fi
start_agent -c "$E2E_TMP/agent.json" -w 1
for _ in $(seq 1 100); do port_listening "$PORT_GRPC" && break; sleep 0.1; done

# ask METHOD PATH ADDR [NAME=VALUE...]: Envoy's request for it, answered.
ask() {
  local rq
  rq=$(/usr/bin/python3 "$E2E_ROOT/tests/lib/envoy_actions.py" "$ex/envoy.yaml" "$@")
  [ "$rq" = none ] && { echo none; return; }
  /usr/bin/python3 "$E2E_ROOT/tests/lib/grpc_client.py" "127.0.0.1:$PORT_GRPC" rls "$rq"
}
has() { case $1 in *"$2"*) return 0 ;; *) diag "  in: $1"; return 1 ;; esac; }

r=$(ask GET / 10.0.0.1 x-api-key=k1)
check "GET / with a key: OK" has "$r" 'OK {"overall_code":"OK"'
check "... per address: 600 a minute, 599 left" \
  has "$r" '{"code":"OK","current_limit":{"requests_per_unit":600,"unit":"MINUTE"},"duration_until_reset":'
check "... 599 left" has "$r" '"limit_remaining":599'
check "... per key: 100 a second" has "$r" '"current_limit":{"requests_per_unit":100,"unit":"SECOND"}'
check "... RateLimit-Policy of both, named by descriptor" \
  has "$r" '{"key":"ratelimit-policy","value":"\"edge-0\";q=600;w=60, \"edge-1\";q=100;w=1"}'
r=$(ask GET / 10.0.0.1 x-api-key=partner-1)
check "the partner's key: 1000, named" \
  has "$r" '"current_limit":{"name":"partner","requests_per_unit":1000,"unit":"SECOND"}'
r=$(ask GET /page 10.0.0.1)
check "without X-Api-Key: one descriptor, the address's third hit" has "$r" '"limit_remaining":597'
check "... and only it" test "$(grep -o '"code":' <<< "$r" | wc -l)" -eq 1
is "$(ask GET /login 10.0.0.2)" none "GET /login: Envoy asks nothing"
for i in 1 2 3 4 5; do
  r=$(ask POST /login 10.0.0.2)
  # (limit_remaining 0 is proto3's default, left out of the JSON: the
  # RateLimit field says it)
  check "POST /login $i of 5: OK, $((5 - i)) left" has "$r" '\"edge\";r='"$((5 - i))"';'
  check "... OK" has "$r" '{"overall_code":"OK"'

done
check "... its limit: 5, named login (a 900 s window: no unit)" \
  has "$r" '"current_limit":{"name":"login","requests_per_unit":5}'
r=$(ask POST /login 10.0.0.2)
check "the sixth: OVER_LIMIT" has "$r" '"overall_code":"OVER_LIMIT"'
check "... with Retry-After" has "$r" '{"key":"retry-after","value":"'
check "... and a problem document" has "$r" '{"key":"content-type","value":"application/problem+json"}'
check "... another address logs in" has "$(ask POST /login 10.0.0.3)" '"overall_code":"OK"'
finish
