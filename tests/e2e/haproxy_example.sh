#!/usr/bin/env bash
# haproxy_example.sh - the shipped haproxy-examples/ configuration works.
# Checks, running the example of $HAPROXY's version (haproxy.cfg before
# 3.1, haproxy-3.cfg from 3.1) + spoe-ratelimit.conf as shipped (only the
# RL_* environment variables set: free loopback ports, small limits, which
# lower the limits of the agent's haproxy-examples/agent.json) against the
# agent on that agent.json (its listen address overridden):
#   - "haproxy -c" accepts it from any working directory (3.1+: the 2.6
#     form as well, its "mode tcp" backend converted);
#   - per client IP (key src, curl --interface 127.x.y.z): exactly
#     RL_LIMIT_IP pass per 60 s, then 429 with Retry-After >= 1 and
#     RateLimit-Policy "per-ip";q=L;w=60 / RateLimit "per-ip";r=0;t=..;
#     another source address has its own counter;
#   - per API key (X-Api-Key, two windows 3/s and 6/min): a burst is
#     denied by the 1 s window, the headers list the key's windows, and
#     two keys from one address are counted apart;
#   - an X-Api-Key over 1024 bytes (an SPOE error, passed uncounted by the
#     open listener) or given twice: 400; one with a comma counted whole;
#   - the workers run SCHED_BATCH behind HAProxy 3.1+, not behind 2.6;
#   - agent stopped: the "open" listener passes (200), the "strict"
#     listener answers 503.
# Usage: AGENT=/path/to/spoa-ratelimit bash tests/e2e/haproxy_example.sh
. "$(dirname "$0")/lib.sh"

e2e_init
ex_name=haproxy.cfg
haproxy_at_least 3 1 && ex_name=haproxy-3.cfg
ex="$E2E_ROOT/haproxy-examples/$ex_name"
diag "HAProxy $E2E_HAPROXY_VERSION: example $ex_name"
# check_example NAME: "haproxy -c" accepts haproxy-examples/NAME, from /.
check_example() {
  local out
  out=$(cd / && "$HAPROXY" -c -f "$E2E_ROOT/haproxy-examples/$1" 2>&1)
  check "haproxy $E2E_HAPROXY_VERSION -c accepts haproxy-examples/$1 (run from /)" test $? -eq 0
  [ -n "$out" ] && diag "$out"
}
check_example "$ex_name"
[ "$ex_name" = haproxy.cfg ] || check_example haproxy.cfg

export RL_BIND="127.0.0.1:$E2E_PORT_OPEN" RL_BIND_STRICT="127.0.0.1:$E2E_PORT_CLOSED"
export RL_AGENT="127.0.0.1:$E2E_PORT_AGENT" RL_APP="127.0.0.1:$E2E_PORT_APP"
export RL_STATS="127.0.0.1:$E2E_PORT_STATS"
export RL_LIMIT_IP=5 RL_LIMIT_KEY_SEC=3 RL_LIMIT_KEY_MIN=6
E2E_HAPROXY_CFG=$ex
E2E_SERVER_BE=spoe-ratelimit
E2E_SERVER_NAME=agent1

start_agent -c "$E2E_ROOT/haproxy-examples/agent.json" -w 2
start_haproxy
wait_server_state UP 15 || die "agent server UP in HAProxy (example config)"

# A random source address in 127.0.0.0/8, different for each call.
rand_ip() { echo "127.$((RANDOM % 200 + 20)).$((RANDOM % 250 + 1)).$((RANDOM % 250 + 1))"; }
ip1=$(rand_ip)
ip2=$(rand_ip)
while [ "$ip2" = "$ip1" ]; do ip2=$(rand_ip); done

# --- per IP ---
wait_window_margin 60 4
codes=""
for i in 1 2 3 4 5 6 7; do codes="$codes $(req_h "$E2E_PORT_OPEN" "$E2E_TMP/ip.$i" --interface "$ip1")"; done
is "$codes" " 200 200 200 200 200 429 429" "per IP ($ip1), limit 5/60s: exactly 5 pass"
h="$E2E_TMP/ip.6"
diag "429: Retry-After: $(hdr "$h" Retry-After) | RateLimit-Policy: $(hdr "$h" RateLimit-Policy) | RateLimit: $(hdr "$h" RateLimit)"
check "per IP 429: Retry-After >= 1" int_ge "$(hdr "$h" Retry-After)" 1
is "$(hdr "$h" RateLimit-Policy)" '"per-ip";q=5;w=60' "per IP 429: RateLimit-Policy \"per-ip\";q=5;w=60"
is "$(sf_param "$(hdr "$h" RateLimit)" r)" "0" "per IP 429: RateLimit r=0"
is "$(hdr "$E2E_TMP/ip.1" RateLimit-Policy)" '"per-ip";q=5;w=60' "per IP 200: RateLimit-Policy too"
is "$(sf_param "$(hdr "$E2E_TMP/ip.1" RateLimit)" r)" "4" "per IP 200: RateLimit r=4 after the first hit"
is "$(req "$E2E_PORT_OPEN" --interface "$ip2")" "200" "another source address ($ip2) has its own counter"

# --- per API key, two windows (the burst within one second; a try again
# on a new key and address) ---
burst_k() {
  ip3=$(rand_ip)
  codes=""
  for i in 1 2 3 4; do codes="$codes $(req_h "$E2E_PORT_OPEN" "$E2E_TMP/k.$i" --interface "$ip3" -H "X-Api-Key: ex-$E2E_RUN_ID-1-$1")"; done
}
wait_window_margin 60 4
in_one_window 1 0 burst_k || diag "every burst crossed a second's end"
is "$codes" " 200 200 200 429" "per API key, 3/s: a burst of 4 has its 4th denied"
pol=$(hdr "$E2E_TMP/k.1" RateLimit-Policy)
rl=$(hdr "$E2E_TMP/k.1" RateLimit)
diag "key 200: RateLimit-Policy: $pol | RateLimit: $rl"
is "$pol" '"per-ip";q=5;w=60, "per-key-sec";q=3;w=1, "per-key-min";q=6;w=60' "per API key: RateLimit-Policy lists per-ip and both key windows"
case $rl in
  '"per-ip";r=4;t='[0-9]*', "per-key-sec";r=2;t='[0-9]*', "per-key-min";r=5;t='[0-9]*) ok "per API key: RateLimit has r for per-ip, per-key-sec, per-key-min" ;;
  *) not_ok "per API key: RateLimit has r for per-ip, per-key-sec, per-key-min" ;;
esac
check "per API key 429: Retry-After >= 1" int_ge "$(hdr "$E2E_TMP/k.4" Retry-After)" 1
# Same address (1 more per-IP hit: 5 in total), another key: its own counters.
is "$(req "$E2E_PORT_OPEN" --interface "$ip3" -H "X-Api-Key: ex-$E2E_RUN_ID-2")" "200" "another API key from the same address has its own counters"

# --- what a client sends cannot skip its per-key check ---
# A key too large for an SPOE frame made the check an SPOE error, which the
# open listener passed uncounted: refused with 400 now (1024 bytes at most).
long=$(head -c 9000 /dev/zero | tr '\0' k)
codes=""
ip5=$(rand_ip)
for i in 1 2 3 4 5; do codes="$codes $(req "$E2E_PORT_OPEN" --interface "$ip5" -H "X-Api-Key: $long")"; done
is "$codes" " 400 400 400 400 400" "a 9000-byte X-Api-Key: 400, never passed uncounted (limit 3/s)"
# Two X-Api-Key fields: the application might read one, the other be counted.
ip6=$(rand_ip)
is "$(req "$E2E_PORT_OPEN" --interface "$ip6" -H "X-Api-Key: ex-$E2E_RUN_ID-3" -H "X-Api-Key: ex-$E2E_RUN_ID-4")" "400" "two X-Api-Key fields: 400"
# A key with a comma is counted whole (req.hdr counted what follows the last comma).
ip7=$(rand_ip)
req "$E2E_PORT_OPEN" --interface "$ip7" -H "X-Api-Key: ex-$E2E_RUN_ID-5, ex-$E2E_RUN_ID-6" > /dev/null
req_h "$E2E_PORT_OPEN" "$E2E_TMP/comma" --interface "$ip7" -H "X-Api-Key: ex-$E2E_RUN_ID-6" > /dev/null
case $(hdr "$E2E_TMP/comma" RateLimit) in
  *'"per-key-min";r=5;'*) ok "an X-Api-Key with a comma is counted as the whole value (its last part alone is another key)" ;;
  *) not_ok "an X-Api-Key with a comma is counted as the whole value (its last part alone is another key)"; diag "RateLimit: $(hdr "$E2E_TMP/comma" RateLimit)" ;;
esac

# --- scheduling: left to the agent, no sched_batch behind HAProxy 2.x ---
# 3.1+'s multiplexer numbers each connection's streams 1, 3, 5...: the
# workers run SCHED_BATCH; a worker serving 2.6 alone runs SCHED_OTHER.
check_sched_policies ""

# --- fail-open / fail-closed ---
ip4=$(rand_ip)
is "$(req "$E2E_PORT_CLOSED" --interface "$ip4")" "200" "strict listener, agent up: 200"
stop_agent
is "$?" "0" "agent exits with status 0 on SIGTERM"
is "$(req "$E2E_PORT_OPEN" --interface "$ip4")" "200" "agent stopped: the open listener passes (200)"
is "$(req "$E2E_PORT_CLOSED" --interface "$ip4")" "503" "agent stopped: the strict listener answers 503"
wait_server_state DOWN 15 || not_ok "agent server marked DOWN (example config)"
is "$(req "$E2E_PORT_OPEN" --interface "$ip4") $(req "$E2E_PORT_CLOSED" --interface "$ip4")" "200 503" "server DOWN: open 200, strict 503"

finish
