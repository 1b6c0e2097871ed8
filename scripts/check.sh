#!/usr/bin/env bash
# scripts/check.sh - the structure, checked (make check; make test runs it):
#   - the layer rules of docs/ARCHITECTURE.md: nothing below includes
#     anything above; the sync reaches the table through agent/shm_sync.h
#     only (no agent/shm.h included; with a build directory, no function
#     of the table's other files called); the peers codec
#     (agent/peers_wire.[ch]) is pure: C headers only, and with a build
#     directory no call but memchr/memcpy/memmove/memset; the same for the
#     rate limit service's codec (agent/pb_wire.[ch], agent/rls_wire.[ch]:
#     agent/pb_wire.h the one header of ours it includes, and calls between
#     its two files);
#   - no include cycle among agent/, spop/, strategies/;
#   - no source file of agent/, spop/, strategies/ over 1,500 lines
#     (docs/STYLE.md, rule 13), no test file (tests/*.c, tests/lib/) either
#     (rule 14);
#   - every document a comment or a doc cites (docs/*.md, STYLE.md) exists,
#     and every section cited by name exists in its document: in a
#     citation 'docs/<document>.md, "Name"' (a comma or not; it may run
#     over a comment's lines) Name is the start of one of the document's
#     headings, of a paragraph's or a list item's bold lead (**Name.**),
#     or a table row's first cell (`name`: the keys of CONFIG.md),
#     backquotes aside;
#   - with a build directory (scripts/check.sh BUILD_DIR; make check passes
#     its own): no call circle between files, read from the objects' symbols
#     (nm: a file calling a function another file defines; data, such as
#     an ops table or nginx's module, is not a call),
#     the nginx module's objects included when it is built.
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
out=$(grep -nE '#include "agent/(spop_front|spop_handler|http_[a-z]+|stream|worker)' \
  agent/decide*.[ch] agent/delay.c agent/sync*.[ch] 2>/dev/null)
[ -z "$out" ] || bad "decisions or sync include a front or the worker:"$'\n'"$out"
# The fronts: every file with a front's ops table (agent/fronts.h), and
# the files of the SPOP and HTTP fronts.
front_files=$(grep -l '^const struct front_ops [a-z_]* = {' agent/*.c)
out=$(grep -ln '#include "agent/worker.h"' $front_files agent/http_*.c agent/spop_handler.c \
  agent/stream.c 2>/dev/null)
[ -z "$out" ] || bad "a front includes the worker: $out"
# The sync reaches the table through agent/shm_sync.h only (the objects'
# side of it is checked with the call circles below).
out=$(grep -n '#include "agent/shm.h"' agent/sync*.[ch] 2>/dev/null)
[ -z "$out" ] || bad "the sync includes agent/shm.h (its way to the table is agent/shm_sync.h):"$'\n'"$out"
# The peers codec is pure, as spop/ (docs/STYLE.md, rule 2): nothing of ours.
out=$(grep -n '#include' agent/peers_wire.[ch] 2>/dev/null |
  grep -vE '<(limits|stdbool|stddef|stdint|string)\.h>|"agent/peers_wire\.h"')
[ -z "$out" ] || bad "the peers codec includes more than C headers:"$'\n'"$out"
# The rate limit service's codec is pure too: C headers and its own.
out=$(grep -n '#include' agent/pb_wire.[ch] agent/rls_wire.[ch] 2>/dev/null |
  grep -vE '<(stdbool|stddef|stdint|string)\.h>|"agent/(pb_wire|rls_wire)\.h"')
[ -z "$out" ] || bad "the rate limit service's codec includes more than C headers:"$'\n'"$out"

# ---- include cycles among headers (depth-first) ----
cycles=$(awk '
  FNR == 1 { f = FILENAME }
  /^#include "(agent|spop|strategies)\// {
    h = $2; gsub(/"/, "", h)
    if (f != h) print f, h
  }' agent/*.h agent/nginx_module/*.h spop/*.h strategies/*.h | sort -u |
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
for f in agent/*.[ch] agent/nginx_module/*.[ch] spop/*.[ch] strategies/*.[ch]; do
  [ -f "$f" ] || continue
  n=$(wc -l < "$f")
  [ "$n" -le 1500 ] || bad "$f: $n lines (at most 1,500: docs/STYLE.md, rule 13)"
done
for f in tests/*.c tests/lib/*.[ch]; do
  [ -f "$f" ] || continue
  n=$(wc -l < "$f")
  [ "$n" -le 1500 ] || bad "$f: $n lines (at most 1,500: split it by what it tests," \
    "docs/STYLE.md, rule 14)"
done

# ---- cited documents exist ----
for doc in $(grep -rhoE 'docs/[A-Za-z_]+\.(md|8)' agent spop strategies tests bench scripts \
  Makefile README.md docs haproxy-examples nginx-examples 2>/dev/null | sort -u); do
  [ -e "$doc" ] || bad "cited but missing: $doc"
done
# ---- cited sections exist ----
# shellcheck disable=SC2016 # the Perl program is single-quoted on purpose
out=$(find agent spop strategies tests bench scripts docs haproxy-examples nginx-examples \
  Makefile README.md -type f 2>/dev/null | sort | perl -e '
  my %sec;
  sub norm { my $t = shift; $t =~ s/`//g; $t =~ s/\s+/ /g; $t =~ s/^\s+|\s+$//g; return $t }
  for my $d (glob "docs/*.md") {
    open my $h, "<", $d or next;
    while (<$h>) {
      push @{$sec{$d}}, norm($1) if /^#+\s+(.*?)\s*#*\s*$/;      # a heading
      push @{$sec{$d}}, norm($1) if /^\s*(?:[-*]\s+)?\*\*(.+?)\*\*/; # a bold lead
      push @{$sec{$d}}, norm($1) if /^\|\s*`([^`|]+)`\s*\|/;        # a table row
    }
  }
  sub found {
    my ($d, $name) = @_;
    $name = norm($name);
    for my $t (@{$sec{$d} || []}) {
      return 1 if $t eq $name;
      return 1 if index($t, $name) == 0 && substr($t, length $name, 1) =~ /[\s:,.;(]/;
    }
    return 0;
  }
  while (my $f = <STDIN>) {
    chomp $f;
    next unless -f $f;
    open my $h, "<", $f or next;
    local $/;
    my $text = <$h>;
    my @lines = split /\n/, $text, -1;
    # Join a comment or a paragraph that runs over lines, keeping where
    # each line starts (for the line number).
    my ($joined, @at) = ("");
    for my $i (0 .. $#lines) {
      my $l = $lines[$i];
      $l =~ s{^[ \t]*(?:\*(?!\*)|#|//|--)?[ \t]*}{} if $i;
      push @at, [length $joined, $i + 1];
      $joined .= ($i ? " " : "") . $l;
    }
    while ($joined =~ m{(docs/[A-Za-z_]+\.md),?\s+"([^"\\]+)"}g) {
      my ($d, $name, $pos) = ($1, $2, $-[0]);
      next if !-e $d || found($d, $name);
      my $line = 1;
      for (@at) { last if $_->[0] > $pos; $line = $_->[1] }
      print "$f:$line: cites $d, \"$name\": no such section\n";
    }
  }')
[ -z "$out" ] || bad "cited section missing:"$'\n'"$out"
if grep -rnE '(^|[^/])STYLE\.md' agent spop strategies 2>/dev/null | grep -v 'docs/STYLE.md' | grep -q .; then
  bad "a comment cites STYLE.md without docs/: $(grep -rlE '(^|[^/])STYLE\.md' agent spop strategies | tr '\n' ' ')"
fi

# ---- call circles between files (objects' symbols) ----
build=${1:-}
calls=
if [ -n "$build" ] && [ -d "$build" ]; then
  objs=$(find "$build/agent" "$build/spop" "$build/strategies" -name '*.o' 2>/dev/null)
  [ -d build/nginx/objs/addon/nginx ] &&
    objs="$objs $(find build/nginx/objs/addon/nginx -name '*.o')"
  # shellcheck disable=SC2086 # a list of paths without spaces
  circles=$(for o in $objs; do
      nm "$o" 2>/dev/null | awk -v f="$o" '
        NF == 3 && $2 == "T" { print "D", f, $3 }
        NF == 2 && $1 == "U" { print "U", f, $2 }'
    done | awk '
    function name(p) { sub(/^.*\/(agent|spop|strategies|nginx)\//, "", p); return p }
    function visit(n, path,    i, k, parts) {
      if (state[n] == 1) { print "call circle: " path " -> " name(n); return }
      if (state[n] == 2) return
      state[n] = 1
      k = split(adj[n], parts, " ")
      for (i = 1; i <= k; i++) if (parts[i] != "") visit(parts[i], path (path ? " -> " : "") name(n))
      state[n] = 2
    }
    $1 == "D" { owner[$3] = $2; next }
    { nu++; uf[nu] = $2; us[nu] = $3 }
    END {
      for (i = 1; i <= nu; i++) {
        o = owner[us[i]]
        if (o == "" || o == uf[i] || ((uf[i] " " o) in seen)) continue
        seen[uf[i] " " o] = 1
        adj[uf[i]] = adj[uf[i]] " " o
        nodes[uf[i]] = 1
      }
      for (n in nodes) visit(n, "")
    }' | sort -u)
  [ -z "$circles" ] || bad "$circles"
  # The sync calls no function of the table's files but shm_sync.c's.
  # shellcheck disable=SC2086 # a list of paths without spaces
  table=$(for o in $objs; do
      case "$(basename "$o")" in shm_sync.o) ;; shm*.o) nm "$o" 2>/dev/null | awk '$2 == "T" { print $3 }' ;; esac
    done | sort -u)
  # shellcheck disable=SC2086
  out=$(for o in $objs; do
      case "$(basename "$o")" in
        sync*.o) nm "$o" 2>/dev/null | awk -v f="$(basename "$o")" '$1 == "U" { print f ": " $2 }' ;;
      esac
    done | awk -v t="$table" 'BEGIN { n = split(t, a, "\n"); for (i = 1; i <= n; i++) def[a[i]] = 1 }
      ($2 in def) { print }')
  [ -z "$out" ] || bad "the sync calls the table other than through agent/shm_sync.h:"$'\n'"$out"
  # The peers codec allocates, reads, writes, logs and looks at no clock:
  # it calls nothing but mem*() (the sanitizers' hooks aside).
  if [ -f "$build/agent/peers_wire.o" ]; then
    out=$(nm -u "$build/agent/peers_wire.o" 2>/dev/null | awk '{ print $2 }' |
      grep -vE '^(memchr|memcpy|memmove|memset|__(asan|ubsan|sanitizer)_.*|__stack_chk_fail|_GLOBAL_OFFSET_TABLE_)$')
    [ -z "$out" ] || bad "the peers codec calls more than mem*():"$'\n'"$out"
  fi
  # The same for the rate limit service's codec: mem*() and its own files.
  for o in pb_wire rls_wire; do
    [ -f "$build/agent/$o.o" ] || continue
    out=$(nm -u "$build/agent/$o.o" 2>/dev/null | awk '{ print $2 }' |
      grep -vE '^(memchr|memcpy|memmove|memset|pb_[a-z0-9_]+|__(asan|ubsan|sanitizer)_.*|__stack_chk_fail|_GLOBAL_OFFSET_TABLE_)$')
    [ -z "$out" ] || bad "the rate limit service's codec ($o.c) calls more than mem*():"$'\n'"$out"
  done
  calls=", call circles, the sync's way to the table, the codecs' calls"
fi

[ "$fail" -eq 0 ] && echo "check: ok (layers, include cycles, file sizes, test sizes, cited documents and sections$calls)"
exit "$fail"
