#!/usr/bin/env bash
# haproxy_namespace.sh - the agent's JSON configuration (-c) is used.
# Checks, with an agent started with -c (namespaces "default" and "api";
# "api" has one 10 s window, fixed, count_denied false):
#   - "$AGENT -t -c FILE" accepts the file, and refuses it with a listen
#     host name that does not resolve;
#   - a request naming namespace api (window 10, limit 3) is limited: 3 of
#     5 pass, RateLimit-Policy shows w=10;
#   - count_denied false: denied hits are not counted (a cost-0 read after
#     the denials still sees rate 3);
#   - the same key in namespace default has its own counter;
#   - a window the namespace does not have (60 in api), an unknown
#     namespace: txn.rl.error is set and the request is not denied;
#   - namespace "trial" (shadow): over its limit nothing is denied, and
#     txn.rl.shadow_exceeded says what would have been.
# Usage: AGENT=/path/to/spoa-ratelimit bash tests/e2e/haproxy_namespace.sh
. "$(dirname "$0")/lib.sh"

e2e_init
cfg="$E2E_TMP/agent.json"
cat > "$cfg" <<EOF
{
  "listen": "127.0.0.1:$E2E_PORT_AGENT",
  "workers": 2,
  "namespaces": [
    { "name": "default", "window_sizes": [1, 60, 3600] },
    { "name": "api", "window_sizes": [10], "window_type": "fixed", "count_denied": false },
    { "name": "trial", "window_sizes": [60], "shadow": true }
  ]
}
EOF
out=$("$AGENT" -t -c "$cfg" 2>&1)
check "agent -t accepts the configuration" test $? -eq 0
[ -n "$out" ] && diag "$out"
# A listen host name that does not resolve fails -t, as it would the start.
sed 's/"listen": "127.0.0.1:/"listen": "no-such-host.invalid:/' "$cfg" > "$E2E_TMP/badhost.json"
out=$(timeout 60 "$AGENT" -t -c "$E2E_TMP/badhost.json" 2>&1)
is "$?" "2" "agent -t refuses a listen host name that does not resolve (status 2)"
check "... naming the address" grep -q "cannot listen: no-such-host.invalid:$E2E_PORT_AGENT" <<< "$out"

start_agent -c "$cfg" -w 2
start_haproxy
wait_server_state UP 10 || die "agent server UP in HAProxy"

K="ns-$E2E_RUN_ID"
api() { req_h "$E2E_PORT_OPEN" "$1" -H "X-Api-Key: $KA" -H "X-Namespace: api" -H "X-Window: 10" -H "X-Limit: 3" "${@:2}"; }

# api's window is fixed: the hits and the read in one window.
burst_api() {
  KA="$K$1"
  codes=""
  for i in 1 2 3 4 5; do codes="$codes $(api "$E2E_TMP/a.$i")"; done
  api "$E2E_TMP/a.read" -H "X-Cost: 0" > /dev/null
}
in_one_window 10 3 burst_api || diag "every burst crossed a window's end"
is "$codes" " 200 200 200 429 429" "namespace api, window 10, limit 3: 3 of 5 pass"
is "$(hdr "$E2E_TMP/a.1" RateLimit-Policy)" '"e2e";q=3;w=10' "RateLimit-Policy shows the namespace's window (w=10)"
is "$(hdr "$E2E_TMP/a.1" X-RL-Error)" "" "no error for a valid namespace/window"
is "$(hdr "$E2E_TMP/a.read" X-RL-Rate)" "3" "count_denied false: the 2 denied hits were not counted (rate 3)"

codes=""
for i in 1 2; do codes="$codes $(req "$E2E_PORT_OPEN" -H "X-Api-Key: $KA" -H "X-Limit: 3")"; done
is "$codes" " 200 200" "the same key in namespace default has its own counter"

c=$(req_h "$E2E_PORT_OPEN" "$E2E_TMP/bad.w" -H "X-Api-Key: $K-w" -H "X-Namespace: api" -H "X-Window: 60" -H "X-Limit: 1")
e=$(hdr "$E2E_TMP/bad.w" X-RL-Error)
diag "window 60 in api: $c, error '$e'"
if [ "$c" = 200 ] && [ -n "$e" ]; then ok "a window the namespace lacks: error set, not denied"
else not_ok "a window the namespace lacks: error set, not denied"; fi

c=$(req_h "$E2E_PORT_OPEN" "$E2E_TMP/bad.ns" -H "X-Api-Key: $K-n" -H "X-Namespace: nosuch" -H "X-Limit: 1")
e=$(hdr "$E2E_TMP/bad.ns" X-RL-Error)
diag "unknown namespace: $c, error '$e'"
if [ "$c" = 200 ] && [ -n "$e" ]; then ok "an unknown namespace: error set, not denied"
else not_ok "an unknown namespace: error set, not denied"; fi

c=$(req "$E2E_PORT_CLOSED" -H "X-Api-Key: $K-n" -H "X-Namespace: nosuch" -H "X-Limit: 1")
is "$c" "503" "an unknown namespace on the fail-closed frontend: 503 (no decision)"

# Shadow: 4 requests over a limit of 2 all pass; the last two say they
# would have been denied; the counts go on as usual.
codes="" shadows=""
for i in 1 2 3 4; do
  codes="$codes $(req_h "$E2E_PORT_OPEN" "$E2E_TMP/sh.$i" -H "X-Api-Key: $K-s" -H "X-Namespace: trial" -H "X-Window: 60" -H "X-Limit: 2")"
  shadows="$shadows $(hdr "$E2E_TMP/sh.$i" X-RL-Shadow)"
done
is "$codes" " 200 200 200 200" "shadow namespace: nothing denied over the limit"
is "$shadows" " 0 0 1 1" "shadow namespace: shadow_exceeded on the hits it would deny"
is "$(hdr "$E2E_TMP/sh.4" X-RL-Rate)" "4" "shadow namespace: every hit counted"

stop_agent
is "$?" "0" "agent exits with status 0 on SIGTERM"
finish
