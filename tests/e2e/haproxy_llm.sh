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
llm_setup
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

llm_budget_checks "http://127.0.0.1:$E2E_PORT_OPEN/" "on the response"

finish
