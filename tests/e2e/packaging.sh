#!/usr/bin/env bash
# packaging.sh - make install (issue 10, "Packaging"), into temp dirs only:
# the files and their modes for PREFIX=/usr SYSCONFDIR=/etc under DESTDIR;
# the default config is valid for the agent, kept on reinstall when an
# admin changed it, and removed by uninstall only when unchanged; the
# sysusers.d entry creates the unit's user (in a temp root); the unit
# passes `systemd-analyze verify` (installed with a temp PREFIX, so that
# its ExecStart exists); the man page renders without a groff warning,
# names every option of `-h`, every key of docs/CONFIG.md, the exit
# statuses and signals, and says what SIGHUP does as agent/master.c does.
# Needs no root and no HAProxy; never touches /etc or /usr. A missing tool
# (systemd-analyze, systemd-sysusers, groff, man) skips its checks.
# Usage: AGENT=/path/to/spoa-ratelimit bash tests/e2e/packaging.sh
# shellcheck disable=SC2317 # helpers below run through check
. "$(dirname "$0")/lib.sh"

e2e_init_base
diag "agent: $AGENT; tmp: $E2E_TMP"

T=$E2E_TMP
LOG=$T/agent.log          # every run of the agent; finish checks it for sanitizer reports
MAN=$T/man.txt

skip() { printf 'ok - # SKIP %s\n' "$*"; }
have() { command -v "$1" >/dev/null 2>&1; }
# quiet RC FILE: RC is 0 and nothing was written to FILE (stderr).
quiet() { [ "$1" -eq 0 ] && [ ! -s "$2" ]; }
# lacks ERE TEXT / has ERE TEXT: whether TEXT has a line matching ERE.
lacks() { ! grep -Eq -- "$1" <<<"$2"; }
has() { grep -Eq -- "$1" <<<"$2"; }

# A copy of what make install reads, with the agent under test as the
# binary it installs: the work tree (its build/, ./spoa-ratelimit) is left
# alone, and -o keeps make from rebuilding the binary.
src=$T/src
mkdir -p "$src"
cp -R "$E2E_ROOT/Makefile" "$E2E_ROOT/docs" "$E2E_ROOT/scripts" "$E2E_ROOT/haproxy-examples" "$src/"
cp "$AGENT" "$src/spoa-ratelimit"

# mk TARGET VARS...: make in the copy, outside any make of the caller; the
# output goes to $T/make.out.
mk() {
  env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS make --no-print-directory -C "$src" \
    -o spoa-ratelimit "$@" > "$T/make.out" 2>&1
  local rc=$?
  [ "$rc" -eq 0 ] || sed 's/^/#   /' "$T/make.out"
  return "$rc"
}

# ------------------------------------------------ DESTDIR, PREFIX=/usr ---
stage=$T/stage
conf=$stage/etc/spoa-ratelimit/agent.json
unit=$stage/usr/lib/systemd/system/spoa-ratelimit.service
layout=(PREFIX=/usr SYSCONFDIR=/etc DESTDIR="$stage")

check "make install DESTDIR=... PREFIX=/usr SYSCONFDIR=/etc succeeds" mk install "${layout[@]}"
want="755 usr/bin/spoa-ratelimit
644 usr/share/man/man8/spoa-ratelimit.8
644 usr/lib/systemd/system/spoa-ratelimit.service
644 usr/lib/sysusers.d/spoa-ratelimit.conf
644 etc/spoa-ratelimit/agent.json
644 usr/share/spoa-ratelimit/agent.json
644 usr/share/spoa-ratelimit/haproxy.cfg
644 usr/share/spoa-ratelimit/spoe-ratelimit.conf
644 usr/share/spoa-ratelimit/spoa-ratelimit.rules.yml"
got=$(cd "$stage" && find . -type f -printf '%m %P\n' 2>/dev/null | sort)
is "$got" "$(printf '%s\n' "$want" | sort)" "installed files and modes"
check "the installed binary is the agent" cmp -s "$AGENT" "$stage/usr/bin/spoa-ratelimit"

# unit_has LINE: the unit has exactly this line.
unit_has() { grep -qxF -- "$1" "$unit"; }
check "unit: ExecStart runs /usr/bin with /etc/spoa-ratelimit/agent.json" \
  unit_has "ExecStart=/usr/bin/spoa-ratelimit -c /etc/spoa-ratelimit/agent.json"
# shellcheck disable=SC2016 # $MAINPID is systemd's, not ours
check "unit: ExecReload sends SIGHUP to the main process" unit_has 'ExecReload=/bin/kill -HUP $MAINPID'
check "unit: no placeholder left" lacks '@[A-Z]+@' "$(cat "$unit")"
for line in Type=simple User=spoa-ratelimit Group=spoa-ratelimit RuntimeDirectory=spoa-ratelimit StateDirectory=spoa-ratelimit \
    NoNewPrivileges=yes ProtectSystem=strict PrivateTmp=yes KillMode=mixed; do
  check "unit: $line" unit_has "$line"
done

out=$("$AGENT" -t -c "$conf" 2>&1); rc=$?
printf '%s\n' "$out" >> "$LOG"
is "$rc" 0 "the installed config passes $(basename "$AGENT") -t (${out%%$'\n'*})"

# sysusers.d: the unit's user and group, created in a temp root that has
# only the installed entry (systemd-sysusers finds it by name there).
if have systemd-sysusers; then
  sysroot=$T/sysroot
  mkdir -p "$sysroot/etc" "$sysroot/usr/lib/sysusers.d"
  cp "$stage/usr/lib/sysusers.d/spoa-ratelimit.conf" "$sysroot/usr/lib/sysusers.d/"
  if systemd-sysusers --root="$sysroot" spoa-ratelimit.conf > "$T/sysusers.out" 2>&1; then
    ok "systemd-sysusers --root applies spoa-ratelimit.conf"
  else
    not_ok "systemd-sysusers --root applies spoa-ratelimit.conf"; sed 's/^/#   /' "$T/sysusers.out"
  fi
  check "... creating the user spoa-ratelimit, no login shell" \
    grep -Eq '^spoa-ratelimit:x:[0-9]+:[0-9]+:[^:]*:[^:]*:(/usr)?/s?bin/(nologin|false)$' "$sysroot/etc/passwd"
  check "... and its group" grep -q '^spoa-ratelimit:x:[0-9]*:' "$sysroot/etc/group"
else
  skip "systemd-sysusers not installed (Debian package systemd)"
fi

# An admin's config survives a reinstall and an uninstall.
printf '{"listen": "127.0.0.1:12399", "workers": 1}\n' > "$conf"
mine=$(cat "$conf")
check "make install again succeeds" mk install "${layout[@]}"
is "$(cat "$conf")" "$mine" "reinstall keeps a changed config"
check "... and says so" grep -q "keeping .*agent.json" "$T/make.out"
check "make uninstall succeeds" mk uninstall "${layout[@]}"
is "$(cd "$stage" && find . -type f -printf '%P\n')" "etc/spoa-ratelimit/agent.json" \
  "uninstall removes every file but the changed config"
cp "$src/haproxy-examples/agent.json" "$conf"
check "make uninstall with the config as installed succeeds" mk uninstall "${layout[@]}"
check "... and removes it and its directory" [ ! -e "$stage/etc/spoa-ratelimit" ]

# ------------------------------------- the unit, in a temp PREFIX ---
# systemd-analyze verify checks that ExecStart exists and (with man-db)
# that `man spoa-ratelimit(8)` finds the page: install for real under a
# temp PREFIX, MANPATH pointing at its man dir.
root=$T/root
check "make install PREFIX=<tmp>/usr SYSCONFDIR=<tmp>/etc succeeds" \
  mk install PREFIX="$root/usr" SYSCONFDIR="$root/etc"
runit=$root/usr/lib/systemd/system/spoa-ratelimit.service
manpage=$root/usr/share/man/man8/spoa-ratelimit.8
check "unit: ExecStart has the temp PREFIX and SYSCONFDIR" \
  grep -qxF "ExecStart=$root/usr/bin/spoa-ratelimit -c $root/etc/spoa-ratelimit/agent.json" "$runit"
if have systemd-analyze; then
  manopt=--man=yes
  have man || { manopt=--man=no; diag "man not installed: verify without the man page check"; }
  # verify UNIT_FILE: systemd-analyze verify, stderr in $T/verify.err.
  verify() {
    MANPATH="$root/usr/share/man" systemd-analyze verify "$manopt" "$1" 2> "$T/verify.err"
  }
  verify "$runit"; rc=$?
  is "$rc" 0 "systemd-analyze verify: exit status 0"
  sed 's/^/#   /' "$T/verify.err"
  check "systemd-analyze verify: nothing said about the unit" lacks spoa-ratelimit "$(cat "$T/verify.err")"
  # The check can fail: a typo in a copy is reported.
  sed 's/^ProtectHome=yes$/ProtectHom=yes/' "$runit" > "$T/spoa-ratelimit.service"
  verify "$T/spoa-ratelimit.service"
  check "systemd-analyze verify reports a typo in a copy of the unit" grep -q "ProtectHom" "$T/verify.err"
else
  skip "systemd-analyze not installed (Debian package systemd)"
fi

# ------------------------------------------------------- the man page ---
if have groff; then
  groff -man -ww -z "$manpage" 2> "$T/groff.err"; rc=$?
  sed 's/^/#   /' "$T/groff.err"
  check "groff -man -ww: the man page has no warning (status $rc)" quiet "$rc" "$T/groff.err"
else
  skip "groff not installed (Debian package groff-base)"
fi
if have man; then
  LC_ALL=C MANWIDTH=80 man -l "$manpage" > "$MAN" 2> "$T/man.err"; rc=$?
  sed 's/^/#   /' "$T/man.err"
  check "man -l renders the page (status $rc, nothing on stderr)" quiet "$rc" "$T/man.err"
  for s in NAME SYNOPSIS DESCRIPTION OPTIONS CONFIGURATION SIGNALS "EXIT STATUS" FILES EXAMPLES "SEE ALSO"; do
    check "man page: section $s" grep -qx "$s" "$MAN"
  done

  # section NAME: the rendered lines of one section, without the heading.
  section() { awk -v s="$1" '/^[A-Z]/ { on = ($0 == s); next } on' "$MAN"; }
  # tags NAME [sub]: the tags of a section's items, one word a line: at
  # the item indent, "-c file" gives -c, "max_keys, on_table_full Text"
  # both keys. With sub, only from the first subsection on (no intro).
  tags() {
    section "$1" | awk -v subs="${2:-}" '
      subs != "" && /^   [A-Z]/ { in_subs = 1; next }
      (subs == "" || in_subs) && /^       [^ ]/ {
        s = substr($0, 8)
        if (match(s, /^[-A-Za-z0-9_]+(, [A-Za-z_]+)*/)) {
          n = split(substr(s, 1, RLENGTH), w, ", ")
          for (i = 1; i <= n; i++) print w[i]
        } }'
  }

  "$AGENT" -h > "$T/usage" 2>> "$LOG"
  usage=$(head -n 1 "$T/usage" | sed 's/^usage: //')
  # The first line: the agent itself (the next ones: ctl).
  synopsis=$(section SYNOPSIS | head -n 1 | sed 's/^ *//' | tr -s ' ')
  ctl_ok=yes
  for c in keys reset top "limits +set" "limits +get" "limits +rm"; do
    section SYNOPSIS | grep -qE "spoa-ratelimit +ctl .*$c" || ctl_ok="no ctl $c"
  done
  is "$ctl_ok" yes "man page SYNOPSIS names ctl keys, reset, top and limits set|get|rm"
  is "$(printf '%s' "$synopsis" | tr '[:upper:]' '[:lower:]')" "$(printf '%s' "$usage" | tr '[:upper:]' '[:lower:]')" \
    "man page SYNOPSIS is the usage line of -h"
  opts=$(grep -oE '^  -[a-zA-Z]' "$T/usage" | tr -d ' ')
  check "-h lists options" [ -n "$opts" ]
  for o in $opts; do
    check "man page OPTIONS: $o" grep -qx -- "$o" <(tags OPTIONS)
  done

  keys=$(awk '/^### (Top-level|Namespace) keys/ { on = 1; next } /^#/ { on = 0 }
    on && /^\| `[a-z_]+` \|/ { match($0, /`[a-z_]+`/); print substr($0, RSTART + 1, RLENGTH - 2) }' \
    "$E2E_ROOT/docs/CONFIG.md" | sort -u)
  check "docs/CONFIG.md lists keys" [ "$(printf '%s\n' "$keys" | wc -l)" -ge 20 ]
  named=$(tags CONFIGURATION sub)
  missing=""
  for k in $keys; do
    printf '%s\n' "$named" | grep -qx -- "$k" || missing="$missing $k"
  done
  is "${missing# }" "" "man page CONFIGURATION names every key of docs/CONFIG.md"

  is "$(tags "EXIT STATUS" | tr '\n' ' ')" "0 1 2 " "man page EXIT STATUS: 0, 1, 2"
  for sig in SIGTERM SIGINT SIGHUP; do
    check "man page SIGNALS: $sig" grep -qx -- "$sig" <(tags SIGNALS)
  done
  # SIGHUP as the agent does it: if agent/master.c ignores it, the page
  # says so in the agent's words; if it reloads, the page says that.
  hup=$(section SIGNALS | tr -s ' \n' '  ')
  if grep -q '"SIGHUP ignored' "$E2E_ROOT/agent/master.c"; then
    check "man page SIGHUP: ignored, as agent/master.c logs" \
      has 'SIGHUP ignored: restart the agent to change its config' "$hup"
  else
    check "man page SIGHUP: re-reads the configuration, as agent/master.c does" \
      has 'SIGHUP Re-reads the configuration file \(reload\)' "$hup"
  fi
else
  skip "man not installed (Debian package man-db)"
fi

finish
