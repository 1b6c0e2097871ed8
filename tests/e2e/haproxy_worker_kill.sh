#!/usr/bin/env bash
# haproxy_worker_kill.sh - a worker killed with SIGKILL loses no count.
# Checks, with the agent running 2 workers (-w 2) behind HAProxy:
#   - after 4 hits of a key (limit 10), SIGKILL of one worker (a child of
#     the master, from pgrep -P) is followed by a replacement worker;
#   - the counts survive: the next hit sees rate 5, and of 10 more hits
#     exactly 6 pass (10 in total), all answered by the agent (no SPOE
#     error, no 5xx);
#   - the same after killing the other original worker as well;
#   - under load (4 background loops of requests), killing a worker leaves
#     every request answered with 200/429 (SPOE errors are counted and
#     shown: requests in flight on the killed worker's connections may see
#     one, and then pass uncounted: fail-open);
#   - the master still exits with status 0 on SIGTERM.
# Usage: AGENT=/path/to/spoa-ratelimit bash tests/e2e/haproxy_worker_kill.sh
. "$(dirname "$0")/lib.sh"

e2e_init
start_agent -w 2
start_haproxy
wait_server_state UP 10 || die "agent server UP in HAProxy"

K="kill-$E2E_RUN_ID"

# wait_replaced OLDPID: until the master has 2 workers again, none OLDPID.
wait_replaced() {
  local old=$1 i w
  for i in $(seq 1 100); do
    w=$(agent_workers | tr '\n' ' ')
    case " $w" in *" $old "*) ;; *) [ "$(echo "$w" | wc -w)" -ge 2 ] && return 0 ;; esac
    sleep 0.1
  done
  diag "workers now: $w"
  return 1
}

# kill_one_and_check TAG KEY: 4 hits, SIGKILL a worker, then 1 + 9 hits.
kill_one_and_check() {
  local tag=$1 key=$2 victim before after codes h rate errs
  wait_window_margin 60 6
  for i in 1 2 3 4; do req "$E2E_PORT_OPEN" -H "X-Api-Key: $key" -H "X-Limit: 10" > /dev/null; done
  before=$(agent_workers | tr '\n' ' ')
  victim=$(agent_workers | head -n 1)
  if [ -z "$victim" ]; then not_ok "$tag: the agent has worker processes"; return; fi
  AGENT_WORKERS_SEEN="$AGENT_WORKERS_SEEN $before"
  diag "$tag: workers '$before', SIGKILL $victim"
  kill -KILL "$victim"
  if wait_replaced "$victim"; then
    after=$(agent_workers | tr '\n' ' ')
    AGENT_WORKERS_SEEN="$AGENT_WORKERS_SEEN $after"
    ok "$tag: the master replaced the killed worker ($before-> $after)"
  else
    not_ok "$tag: the master replaced the killed worker within 10s"
  fi
  sleep 0.3
  h="$E2E_TMP/h-$tag"
  codes=$(req_h "$E2E_PORT_OPEN" "$h.1" -H "X-Api-Key: $key" -H "X-Limit: 10")
  rate=$(hdr "$h.1" X-RL-Rate)
  errs=$(hdr "$h.1" X-RL-Err)
  for i in $(seq 2 10); do
    codes="$codes $(req_h "$E2E_PORT_OPEN" "$h.$i" -H "X-Api-Key: $key" -H "X-Limit: 10")"
    [ -n "$(hdr "$h.$i" X-RL-Err)" ] && errs="$errs $i:$(hdr "$h.$i" X-RL-Err)"
  done
  is "$rate" "5" "$tag: the first hit after the kill sees the 4 earlier hits (rate 5)"
  is "$codes" "200 200 200 200 200 200 429 429 429 429" "$tag: exactly 6 of the next 10 pass (10 in total)"
  is "$errs" "" "$tag: no SPOE error after the kill"
}

kill_one_and_check "first kill" "$K-a"
kill_one_and_check "second kill" "$K-b"

# --- under load: 4 client loops of 60 requests, a worker killed mid-way ---
# (the 240 hits and their count in one window: across its end the sliding
# count is weighted down)
load_and_kill() {
  local l p
  loaders=""
  for l in 1 2 3 4; do
    (
      for i in $(seq 1 60); do
        curl -s -o /dev/null -D "$E2E_TMP/lh.$l" --max-time 5 -w '%{http_code}' \
          -H "X-Api-Key: $K-load$1" -H "X-Limit: 100000" "http://127.0.0.1:$E2E_PORT_OPEN/"
        printf ' %s\n' "$(hdr "$E2E_TMP/lh.$l" X-RL-Err)"
      done > "$E2E_TMP/load.$l"
    ) &
    loaders="$loaders $!"
  done
  sleep 0.4
  victim=$(agent_workers | head -n 1)
  AGENT_WORKERS_SEEN="$AGENT_WORKERS_SEEN $(agent_workers | tr '\n' ' ')"
  [ -n "$victim" ] && kill -KILL "$victim"
  wait_replaced "${victim:-none}" || diag "no replacement under load"
  AGENT_WORKERS_SEEN="$AGENT_WORKERS_SEEN $(agent_workers | tr '\n' ' ')"
  for p in $loaders; do wait "$p"; done
  req_h "$E2E_PORT_OPEN" "$E2E_TMP/hl" -H "X-Api-Key: $K-load$1" -H "X-Limit: 100000" -H "X-Cost: 0" > /dev/null
}
in_one_window 60 8 load_and_kill || diag "every run crossed a window's end"
cat "$E2E_TMP"/load.[1-4] > "$E2E_TMP/load"
total=$(wc -l < "$E2E_TMP/load")
answered=$(grep -c -E '^(200|429) ' "$E2E_TMP/load")
errors=$(grep -c -E '^[0-9]+ [0-9]+$' "$E2E_TMP/load")
is "$answered/$total" "240/240" "under load: every request answered 200/429 across the kill"
diag "under load: $errors of 240 requests saw an SPOE error (passed uncounted, fail-open)"
counted=$(hdr "$E2E_TMP/hl" X-RL-Rate)
diag "under load: the agent counted $counted hits (240 sent, $errors errors)"
# A hit counted by the killed worker just before it died has no answer, so
# the count may exceed 240 - errors, never 240.
check "under load: every hit answered by the agent was counted (240 - errors <= count <= 240)" \
  int_between "$counted" $((240 - errors)) 240

stop_agent
is "$?" "0" "the master exits with status 0 on SIGTERM after worker replacements"
finish
