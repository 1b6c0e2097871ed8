#!/usr/bin/env bash
# unix_socket.sh - the agent on a unix socket (issue 7, docs/CONFIG.md
# "listen"): a second agent on the socket of a live one refuses to start
# and leaves it alone; a stale socket file is replaced; at exit the agent
# removes its own socket, but not a file that replaced it.
# Usage: AGENT=/path/to/spoa-ratelimit bash tests/e2e/unix_socket.sh
. "$(dirname "$0")/lib.sh"

e2e_init
sock="$E2E_TMP/agent.sock"

# start_unix LOG: an agent on $sock in the background; sets PID.
start_unix() {
  "$AGENT" -l "unix:$sock" -w 1 >> "$1" 2>&1 &
  PID=$!
}

# wait_sock: until $sock is a socket a client can connect to (10 s).
wait_sock() {
  local i
  for i in $(seq 1 100); do
    [ -S "$sock" ] && ss -Hxl 2>/dev/null | grep -qF "$sock" && return 0
    sleep 0.1
  done
  return 1
}

start_unix "$E2E_TMP/first.log"
first=$PID
check "first agent listens on $sock" wait_sock
ino=$(stat -c %i "$sock")

"$AGENT" -l "unix:$sock" -w 1 > "$E2E_TMP/second.log" 2>&1
rc=$?
check "a second agent on the live socket exits non-zero (got $rc)" [ "$rc" -ne 0 ]
check "it says why, naming the socket" grep -q "agent.sock: another process is listening" "$E2E_TMP/second.log"
diag "second agent: $(head -c 300 "$E2E_TMP/second.log")"
is "$(stat -c %i "$sock" 2>/dev/null)" "$ino" "the first agent's socket file is untouched"
check "the first agent still listens" wait_sock
check "the first agent is alive" alive "$first"

kill_wait "$first" 10
check "the agent removed its own socket at exit" [ ! -e "$sock" ]

# A stale socket (nobody listening) is replaced.
start_unix "$E2E_TMP/third.log"
third=$PID
check "third agent listens" wait_sock
kill -KILL "$third"; wait "$third" 2>/dev/null
check "a SIGKILLed agent leaves a stale socket file" [ -S "$sock" ]
pkill -KILL -P "$third" 2>/dev/null
sleep 0.3
start_unix "$E2E_TMP/fourth.log"
fourth=$PID
check "a new agent replaces a stale socket" wait_sock

# A file that replaced our socket is not ours to remove.
rm -f "$sock"; echo keep > "$sock"
kill_wait "$fourth" 10
check "a file that replaced the socket is left in place" grep -qx keep "$sock"
rm -f "$sock"

echo data > "$E2E_TMP/not-a-socket"
"$AGENT" -l "unix:$E2E_TMP/not-a-socket" -w 1 > "$E2E_TMP/fifth.log" 2>&1
rc=$?
check "a path that is not a socket is refused (status $rc)" [ "$rc" -ne 0 ]
check "... saying so" grep -q "exists and is not a socket" "$E2E_TMP/fifth.log"
check "... and left in place" grep -qx data "$E2E_TMP/not-a-socket"
finish
