#!/usr/bin/env bash
# unix_socket.sh - the agent on a unix socket (issue 7, docs/CONFIG.md
# "listen"): a second agent on the socket of a live one refuses to start
# and leaves it alone, also when it may not connect to it (EACCES); a
# stale socket file (ECONNREFUSED) is replaced; at exit the agent
# removes its own socket, but not a file that replaced it; listen_mode and
# listen_owner set the socket file's permissions and owner.
# Usage: AGENT=/path/to/spoa-ratelimit bash tests/e2e/unix_socket.sh
. "$(dirname "$0")/lib.sh"

e2e_init
sock="$E2E_TMP/agent.sock"

# start_unix LOG: an agent on $sock in the background; sets PID.
start_unix() {
  "$AGENT" -l "unix:$sock" -w 1 >> "$1" 2>&1 &
  PID=$!
}

# wait_sock [PATH]: until PATH ($sock) is a socket a client can connect
# to (10 s).
wait_sock() {
  local i p=${1:-$sock}
  for i in $(seq 1 100); do
    [ -S "$p" ] && ss -Hxl 2>/dev/null | grep -qF "$p" && return 0
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

# A live socket this user may not connect to (EACCES: a 0600 socket of
# another user) is not stale: only ECONNREFUSED says nobody listens. The
# second agent refuses to start, naming the path and the error, and the
# first agent's socket stays. As root (which connects to any socket) the
# second agent runs as nobody, the first one's socket being 0600 in a
# directory nobody may write to; otherwise the socket is made 0000.
acc="$E2E_TMP/shared"
mkdir "$acc" && chmod 0777 "$acc" && chmod 0711 "$E2E_TMP"
asock="$acc/agent.sock"
other=()
if [ "$(id -u)" -eq 0 ]; then
  if setpriv --reuid=nobody --regid=nogroup --clear-groups true 2>/dev/null; then
    other=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
  fi
fi
if [ "$(id -u)" -ne 0 ] || [ ${#other[@]} -gt 0 ]; then
  printf '{"listen": "unix:%s", "workers": 1, "listen_mode": "0600"}\n' "$asock" \
    > "$E2E_TMP/acc.json"
  "$AGENT" -c "$E2E_TMP/acc.json" >> "$E2E_TMP/acc-first.log" 2>&1 &
  accfirst=$!
  check "an agent listens on a 0600 socket" wait_sock "$asock"
  [ "$(id -u)" -ne 0 ] && chmod 0000 "$asock"
  aino=$(stat -c %i "$asock")
  # Bounded: an agent that took the socket over would run on.
  timeout -s TERM 10 "${other[@]}" "$AGENT" -l "unix:$asock" -w 1 \
    > "$E2E_TMP/acc-second.log" 2>&1
  rc=$?
  is "$(( rc != 0 && rc != 124 ))" 1 \
    "a second agent denied access to the live socket exits non-zero at once (got $rc)"
  check "... naming the socket and the error" \
    grep -q "shared/agent.sock: exists, and connecting to it .*: Permission denied; not replacing it" \
    "$E2E_TMP/acc-second.log"
  diag "second agent: $(head -c 300 "$E2E_TMP/acc-second.log")"
  is "$(stat -c %i "$asock" 2>/dev/null)" "$aino" "the first agent's socket file is untouched"
  check "the first agent is alive" alive "$accfirst"
  kill_wait "$accfirst" 10
  check "... and removes its socket at exit" [ ! -e "$asock" ]
else
  diag "root without setpriv: the EACCES case needs another user, skipped"
fi

# listen_mode / listen_owner: the socket file gets them before anyone can
# connect; an owner that does not exist, or that this user may not give
# the file, is refused at start with the reason.
if [ "$(id -u)" -eq 0 ]; then
  owner="nobody:nogroup"
else
  owner="$(id -un):$(id -gn)"
fi
printf '{"listen": "unix:%s", "workers": 1, "listen_mode": "0660", "listen_owner": "%s"}\n' \
  "$sock" "$owner" > "$E2E_TMP/mode.json"
"$AGENT" -c "$E2E_TMP/mode.json" >> "$E2E_TMP/mode.log" 2>&1 &
sixth=$!
check "an agent with listen_mode and listen_owner listens" wait_sock
is "$(stat -c %a "$sock" 2>/dev/null)" "660" "the socket file has mode 0660"
is "$(stat -c %U:%G "$sock" 2>/dev/null)" "$owner" "the socket file belongs to $owner"
kill_wait "$sixth" 10
check "... and is removed at exit" [ ! -e "$sock" ]

printf '{"listen": "unix:%s", "workers": 1, "listen_mode": "0600"}\n' "$sock" > "$E2E_TMP/mode2.json"
"$AGENT" -c "$E2E_TMP/mode2.json" >> "$E2E_TMP/mode2.log" 2>&1 &
seventh=$!
check "an agent with listen_mode 0600 listens" wait_sock
is "$(stat -c %a "$sock" 2>/dev/null)" "600" "the socket file has mode 0600 (umask ignored)"
kill_wait "$seventh" 10

printf '{"listen": "unix:%s", "workers": 1, "listen_owner": "no-such-user-7:root"}\n' "$sock" \
  > "$E2E_TMP/owner.json"
"$AGENT" -c "$E2E_TMP/owner.json" > "$E2E_TMP/owner.log" 2>&1
rc=$?
is "$rc" "2" "an unknown listen_owner user is a configuration error (status 2)"
check "... naming the user" grep -q 'no user "no-such-user-7"' "$E2E_TMP/owner.log"
"$AGENT" -t -c "$E2E_TMP/owner.json" > "$E2E_TMP/owner-t.log" 2>&1
rc=$?
is "$rc" "2" "-t reports it too"
check "no socket was left behind" [ ! -e "$sock" ]
if [ "$(id -u)" -ne 0 ]; then
  printf '{"listen": "unix:%s", "workers": 1, "listen_owner": ":root"}\n' "$sock" \
    > "$E2E_TMP/owner2.json"
  "$AGENT" -c "$E2E_TMP/owner2.json" > "$E2E_TMP/owner2.log" 2>&1
  rc=$?
  check "a group this user may not give is refused (status $rc)" [ "$rc" -ne 0 ]
  check "... with the reason" grep -q "listen_owner: Operation not permitted" "$E2E_TMP/owner2.log"
  check "... and no socket left behind" [ ! -e "$sock" ]
else
  diag "running as root: the chown-refused case needs an unprivileged user, skipped"
fi
finish
