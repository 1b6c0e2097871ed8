#!/usr/bin/env bash
# scripts/check.sh - the structure, checked (make check; make test runs it):
#   - the layer rules of docs/ARCHITECTURE.md: nothing below includes
#     anything above;
#   - no include cycle among agent/, spop/, strategies/;
#   - no source file of agent/, spop/, strategies/ over 1,500 lines
#     (docs/STYLE.md, rule 13);
#   - every document a comment or a doc cites (docs/*.md, STYLE.md) exists.
# Prints one line per problem and exits 1 if there is any.
set -u
cd "$(dirname "$0")/.." || exit 2
fail=0
bad() { echo "check: $*"; fail=1; }

# ---- layers ----
out=$(grep -n '#include "agent/' spop/*.[ch] strategies/*.[ch] 2>/dev/null)
[ -z "$out" ] || bad "spop/ or strategies/ include agent/:"$'\n'"$out"
out=$(grep -n '#include "strategies/' spop/*.[ch] 2>/dev/null)
[ -z "$out" ] || bad "spop/ includes strategies/:"$'\n'"$out"
out=$(grep -nE '#include "agent/(conn|handler|http_[a-z]+|stream|worker)' \
  agent/decide*.[ch] agent/delay.c agent/sync*.[ch] 2>/dev/null)
[ -z "$out" ] || bad "decisions or sync include a front or the worker:"$'\n'"$out"
out=$(grep -ln '#include "agent/worker.h"' agent/conn.c agent/http_*.c agent/handler.c \
  agent/stream.c 2>/dev/null)
[ -z "$out" ] || bad "a front includes the worker: $out"

# ---- include cycles among headers (depth-first) ----
cycles=$(awk '
  FNR == 1 { f = FILENAME }
  /^#include "(agent|spop|strategies)\// {
    h = $2; gsub(/"/, "", h)
    if (f != h) print f, h
  }' agent/*.h agent/nginx/*.h spop/*.h strategies/*.h | sort -u |
  awk '
  { adj[$1] = adj[$1] " " $2; nodes[$1] = 1; nodes[$2] = 1 }
  function visit(n,    m, i, k, parts) {
    if (state[n] == 1) { print "cycle through " n; return }
    if (state[n] == 2) return
    state[n] = 1
    k = split(adj[n], parts, " ")
    for (i = 1; i <= k; i++) if (parts[i] != "") visit(parts[i])
    state[n] = 2
  }
  END { for (n in nodes) visit(n) }' | sort -u)
[ -z "$cycles" ] || bad "include cycle:"$'\n'"$cycles"

# ---- file sizes ----
for f in agent/*.[ch] agent/nginx/*.[ch] spop/*.[ch] strategies/*.[ch]; do
  [ -f "$f" ] || continue
  n=$(wc -l < "$f")
  [ "$n" -le 1500 ] || bad "$f: $n lines (at most 1,500: docs/STYLE.md, rule 13)"
done

# ---- cited documents exist ----
for doc in $(grep -rhoE 'docs/[A-Za-z_]+\.(md|8)' agent spop strategies tests bench scripts \
  Makefile README.md docs haproxy-examples nginx-examples 2>/dev/null | sort -u); do
  [ -e "$doc" ] || bad "cited but missing: $doc"
done
if grep -rnE '(^|[^/])STYLE\.md' agent spop strategies 2>/dev/null | grep -v 'docs/STYLE.md' | grep -q .; then
  bad "a comment cites STYLE.md without docs/: $(grep -rlE '(^|[^/])STYLE\.md' agent spop strategies | tr '\n' ' ')"
fi

[ "$fail" -eq 0 ] && echo "check: ok (layers, include cycles, file sizes, cited documents)"
exit "$fail"
