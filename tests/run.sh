#!/usr/bin/env bash
# Runs the test suite and prints one closing line "N passed, N failed".
#   tests/run.sh BUILD_DIR [unit|e2e|all]
# Unit tests are the Criterion binaries in BUILD_DIR/tests; e2e tests are
# tests/e2e/*.sh, each printing "ok - ..." / "not ok - ..." lines and
# exiting non-zero on failure. They get the agent binary in $AGENT and
# HAProxy in $HAPROXY (default: haproxy, Debian's 2.6), the nginx module
# in $NGINX_MODULE (default build/nginx/, make nginx-module); then the HAProxy
# ones (tests/e2e/haproxy_*.sh) run again with HAProxy 3.x from
# $HAPROXY3 (default ../shared/peers/haproxy-3.4/haproxy), skipped with a
# message when it is not there.
#
# Several at once. The suite mostly waits (windows rolling, sync periods,
# stores and proxies starting: make test used 4 minutes of CPU in 14 of
# wall time, run one after the other), so its items run side by side, in
# two lanes:
#   - the cluster lane: the binaries built on tests/lib/clustertest (three
#     agents on a store each), one after the other; they also take a lock
#     file in turn (clustertest.h), so never two clusters of agents at once;
#   - the pool: every other binary and e2e script, RUN_JOBS at a time
#     (default 2).
# Each item's output is kept apart and printed whole, in the usual order,
# once everything has run. RUN_JOBS=1 and RUN_LANES=1 run everything one
# after the other, as before.
set -u
cd "$(dirname "$0")/.."
build=${1:?build dir}
what=${2:-all}
jobs_max=${RUN_JOBS:-2}
lanes=${RUN_LANES:-2}
export AGENT="$PWD/$build/spoa-ratelimit"
# The nginx module (make nginx-module) for tests/e2e/nginx_module.sh.
export NGINX_MODULE=${NGINX_MODULE:-$PWD/build/nginx/ngx_http_spoa_ratelimit_module.so}
export NGINX_MODULE_SAN=${NGINX_MODULE_SAN:-$PWD/build/nginx-san/ngx_http_spoa_ratelimit_module.so}
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}
# libcriterion's runner leaks 48 bytes of its own; our code is not suppressed.
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
passed=0 failed=0 failed_names=()
out_dir=$(mktemp -d /tmp/spoa-run.XXXXXX)
trap 'rm -rf "$out_dir"' EXIT
t_start=$SECONDS

# ---- the items: kind|path|label, in the order their results are printed
items=() cluster=()
if [ "$what" = all ] || [ "$what" = unit ]; then
  for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    # A binary whose source is gone (a test file split or renamed) is
    # left over from an older build: not run.
    src="tests/$(basename "$t").c"
    [ -f "$src" ] || continue
    items+=("unit|$t|")
    grep -q 'tests/lib/clustertest.h' "$src" && cluster+=("$((${#items[@]} - 1))")
  done
fi
if [ "$what" = all ] || [ "$what" = e2e ]; then
  for t in tests/e2e/*.sh; do
    [ "$(basename "$t")" = lib.sh ] && continue
    [ -f "$t" ] || continue
    items+=("e2e|$t|")
  done
  haproxy3=${HAPROXY3:-../shared/peers/haproxy-3.4/haproxy}
  if [ -x "$haproxy3" ]; then
    for t in tests/e2e/haproxy_*.sh; do
      items+=("e2e|$t| (HAProxy 3.x: $haproxy3)")
    done
  fi
fi

# run_item I: item I run, its output in $out_dir/I.out, its exit status
# and seconds in $out_dir/I.rc ("RC SECONDS"), written last.
run_item() {
  local i=$1 kind path label t0 rc
  IFS='|' read -r kind path label <<< "${items[$i]}"
  t0=$SECONDS
  if [ "$kind" = unit ]; then
    "$path" --jobs 2 > "$out_dir/$i.out" 2>&1; rc=$?
  elif [ -n "$label" ]; then
    HAPROXY=$haproxy3 bash "$path" > "$out_dir/$i.out" 2>&1; rc=$?
  else
    bash "$path" > "$out_dir/$i.out" 2>&1; rc=$?
  fi
  echo "$rc $((SECONDS - t0))" > "$out_dir/$i.rc"
}

in_cluster() {
  local c
  for c in "${cluster[@]}"; do [ "$c" = "$1" ] && return 0; done
  return 1
}

# ---- run: the cluster lane in the background, the pool beside it
if [ "$lanes" -gt 1 ] && [ ${#cluster[@]} -gt 0 ]; then
  ( for c in "${cluster[@]}"; do run_item "$c"; done ) &
  lane_pid=$!
else
  lane_pid=
fi
# Each pool item runs in a slot of its own (RUN_SLOT, 0..RUN_JOBS-1), so
# that the e2e scripts' free_port draws from the slot's band of ports
# (tests/e2e/lib.sh): two scripts at once never pick the same one.
slot_pid=()
for i in "${!items[@]}"; do
  if [ -n "$lane_pid" ] && in_cluster "$i"; then continue; fi
  slot=
  while [ -z "$slot" ]; do
    for ((s = 0; s < jobs_max; s++)); do
      if [ -z "${slot_pid[$s]:-}" ] || ! kill -0 "${slot_pid[$s]}" 2>/dev/null; then
        slot=$s; break
      fi
    done
    [ -z "$slot" ] && wait -n
  done
  RUN_SLOT=$slot RUN_SLOTS=$jobs_max run_item "$i" &
  slot_pid[$slot]=$!
done
wait

# ---- the results, in order
unit_result() {
  local t=$1 out=$2 rc=$3 secs=$4 syn p f c
  echo "$out" | grep -E '^\[(FAIL|----|WARN)\]|Synthesis|ERROR|runtime error' | head -40
  echo "# $(basename "$t"): $secs s"
  syn=$(echo "$out" | grep 'Synthesis' | tail -1)
  p=$(echo "$syn" | sed -n 's/.*Passing: \([0-9]*\).*/\1/p')
  f=$(echo "$syn" | sed -n 's/.*Failing: \([0-9]*\).*/\1/p')
  c=$(echo "$syn" | sed -n 's/.*Crashing: \([0-9]*\).*/\1/p')
  passed=$((passed + ${p:-0}))
  failed=$((failed + ${f:-0} + ${c:-0}))
  if [ "$rc" -ne 0 ] || [ -z "$syn" ]; then
    [ -z "$syn" ] && { echo "$out" | tail -20; failed=$((failed + 1)); }
    failed_names+=("$(basename "$t")")
  fi
}

e2e_result() {
  local t=$1 label=$2 out=$3 rc=$4 secs=$5 p f
  echo "== $t$label"
  echo "$out" | grep -E '^(ok|not ok)|^#' | head -60
  # Failures past the first 60 lines too, each with the comment lines after it.
  echo "$out" | grep -E '^(ok|not ok)|^#' | tail -n +61 | awk '/^not ok/ { p = 1; print; next } /^ok/ { p = 0 } p'
  echo "# $(basename "$t")$label: $secs s"
  p=$(echo "$out" | grep -c '^ok ')
  f=$(echo "$out" | grep -c '^not ok')
  passed=$((passed + p)); failed=$((failed + f))
  if [ "$rc" -ne 0 ]; then
    [ "$f" -eq 0 ] && { echo "$out" | tail -30; failed=$((failed + 1)); }
    failed_names+=("$(basename "$t")$label")
  fi
}

for i in "${!items[@]}"; do
  IFS='|' read -r kind path label <<< "${items[$i]}"
  rc=1 secs=0
  [ -f "$out_dir/$i.rc" ] && read -r rc secs < "$out_dir/$i.rc"
  out=$(cat "$out_dir/$i.out" 2>/dev/null)
  if [ "$kind" = unit ]; then
    unit_result "$path" "$out" "$rc" "$secs"
  else
    e2e_result "$path" "$label" "$out" "$rc" "$secs"
  fi
done
if [ "$what" = all ] || [ "$what" = e2e ]; then
  [ -x "$haproxy3" ] || echo "== skipped: the HAProxy e2e tests with HAProxy 3.x ($haproxy3 not found;" \
                            "set HAPROXY3 to an HAProxy 3.1+ binary)"
fi

[ ${#failed_names[@]} -gt 0 ] && echo "failing: ${failed_names[*]}"
echo "$passed passed, $failed failed in $((SECONDS - t_start)) s"
[ "$failed" -eq 0 ] && [ ${#failed_names[@]} -eq 0 ]
