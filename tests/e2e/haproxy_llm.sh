#!/usr/bin/env bash
# haproxy_llm.sh - token budgets per tenant behind HAProxy (issue 33,
# docs/PROTOCOL.md "Costs known after the response"):
# haproxy-examples/haproxy-llm.cfg and spoe-llm.conf as shipped (ports
# rewritten through the environment), the agent's namespace "llm" with
# 10000 tokens per minute and 1000000 per day per tenant (X-Tenant), each
# request reserving an estimate of 1000, the app answering what it cost
# in X-Usage-Tokens (conf/slow_app.py, t=N):
#   - the response-side `settle` message replaces the estimate by the
#     header's cost in both windows (6000 after one request of 6000);
#   - a second request of 6000 is admitted (6000 + 1000 <= 10000), and
#     the tenant, at 12000, is denied (429) on the next request; another
#     tenant passes; a request without X-Tenant is refused (401).
# Run with HAProxy 2.6 and 3.x (tests/run.sh runs haproxy_*.sh with both).
# Usage: AGENT=/path/to/spoa-ratelimit [HAPROXY=...] bash tests/e2e/haproxy_llm.sh
. "$(dirname "$0")/lib.sh"

e2e_init
PORT_HTTP=$(free_port)
cat > "$E2E_TMP/agent.json" <<JSON
{ "http_listen": "127.0.0.1:$PORT_HTTP",
  "namespaces": [
    { "name": "default", "window_sizes": [60] },
    { "name": "llm", "window_sizes": [60, 86400],
      "limit": { "60": 10000, "86400": 1000000 }, "settle_ms": 600000 } ] }
JSON
command -v python3 >/dev/null 2>&1 || { not_ok "python3 is installed (the app)"; exit 1; }
python3 "$E2E_LIB_DIR/conf/slow_app.py" "$E2E_PORT_APP" &
APP_PID=$!
stop_app() { kill_wait "$APP_PID" 5; }
E2E_CLEANUP_HOOK=stop_app

start_agent -c "$E2E_TMP/agent.json" -w 2
export RL_BIND="127.0.0.1:$E2E_PORT_OPEN" RL_AGENT="127.0.0.1:$E2E_PORT_AGENT"
export RL_APP="127.0.0.1:$E2E_PORT_APP" RL_STATS="127.0.0.1:$E2E_PORT_STATS"
export RL_SPOE_CONF="$E2E_ROOT/haproxy-examples/spoe-llm.conf"
E2E_HAPROXY_CFG="$E2E_ROOT/haproxy-examples/haproxy-llm.cfg"
start_haproxy
diag "HAProxy $E2E_HAPROXY_VERSION"

# get TENANT TOKENS: the code of a request of TENANT ("" for none) whose
# response says it cost TOKENS.
get() {
  curl -s -o /dev/null --max-time 20 -w '%{http_code}\n' ${1:+-H "X-Tenant: $1"} \
    "http://127.0.0.1:$E2E_PORT_OPEN/?t=$2" || true
}
# tokens TENANT WINDOW: what the agent counts for TENANT in WINDOW.
tokens() {
  curl -s --max-time 5 "http://127.0.0.1:$PORT_HTTP/ratelimit?namespace=llm&key=$1&window=$2&cost=0" |
    sed -n 's/.*"rate":\([0-9]*\).*/\1/p'
}
# wait_tokens TENANT N: until TENANT counts N in the minute (at most 5 s).
wait_tokens() {
  local i
  for i in $(seq 1 100); do
    [ "$(tokens "$1" 60)" = "$2" ] && return 0
    sleep 0.05
  done
  return 1
}

tenant="t$RANDOM$RANDOM"
other="u$RANDOM$RANDOM"
wait_window_margin 60 20
is "$(get "$tenant" 6000)" 200 "a first request passes"
wait_tokens "$tenant" 6000
is "$(tokens "$tenant" 60)" 6000 "settled on the response: its 6000 tokens in the minute"
is "$(tokens "$tenant" 86400)" 6000 "... and in the day"
is "$(get "$tenant" 6000)" 200 "a second one passes (6000 + an estimate of 1000 <= 10000)"
wait_tokens "$tenant" 12000
is "$(tokens "$tenant" 60)" 12000 "the tenant at 12000 tokens"
is "$(get "$tenant" 10)" 429 "over its budget: denied on the next request"
is "$(tokens "$tenant" 60)" 12000 "a denied request counts nothing"
is "$(get "$other" 10)" 200 "another tenant passes"
is "$(get "" 10)" 401 "no tenant: refused"

finish
