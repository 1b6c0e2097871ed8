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
set -u
cd "$(dirname "$0")/.."
build=${1:?build dir}
what=${2:-all}
export AGENT="$PWD/$build/spoa-ratelimit"
# The nginx module (make nginx-module) for tests/e2e/nginx_module.sh.
export NGINX_MODULE=${NGINX_MODULE:-$PWD/build/nginx/ngx_http_spoa_ratelimit_module.so}
export NGINX_MODULE_SAN=${NGINX_MODULE_SAN:-$PWD/build/nginx-san/ngx_http_spoa_ratelimit_module.so}
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}
# libcriterion's runner leaks 48 bytes of its own; our code is not suppressed.
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
passed=0 failed=0 failed_names=()

if [ "$what" = all ] || [ "$what" = unit ]; then
  for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    # A binary whose source is gone (a test file split or renamed) is
    # left over from an older build: not run.
    [ -f "tests/$(basename "$t").c" ] || continue
    out=$("$t" --jobs 2 2>&1); rc=$?
    echo "$out" | grep -E '^\[(FAIL|----)\]|Synthesis|ERROR|runtime error' | head -40
    syn=$(echo "$out" | grep 'Synthesis' | tail -1)
    p=$(echo "$syn" | sed -n 's/.*Passing: \([0-9]*\).*/\1/p')
    f=$(echo "$syn" | sed -n 's/.*Failing: \([0-9]*\).*/\1/p')
    c=$(echo "$syn" | sed -n 's/.*Crashing: \([0-9]*\).*/\1/p')
    passed=$((passed + ${p:-0}))
    failed=$((failed + ${f:-0} + ${c:-0}))
    if [ $rc -ne 0 ] || [ -z "$syn" ]; then
      [ -z "$syn" ] && { echo "$out" | tail -20; failed=$((failed + 1)); }
      failed_names+=("$(basename "$t")")
    fi
  done
fi

# e2e SCRIPT [LABEL]: runs one e2e script and adds up its results.
e2e() {
  local t=$1 label=${2:-} out rc p f
  echo "== $t$label"
  out=$(bash "$t" 2>&1); rc=$?
  echo "$out" | grep -E '^(ok|not ok)|^#' | head -60
  # Failures past the first 60 lines too, each with the comment lines after it.
  echo "$out" | grep -E '^(ok|not ok)|^#' | tail -n +61 | awk '/^not ok/ { p = 1; print; next } /^ok/ { p = 0 } p'
  p=$(echo "$out" | grep -c '^ok ')
  f=$(echo "$out" | grep -c '^not ok')
  passed=$((passed + p)); failed=$((failed + f))
  if [ $rc -ne 0 ]; then
    [ "$f" -eq 0 ] && { echo "$out" | tail -30; failed=$((failed + 1)); }
    failed_names+=("$(basename "$t")$label")
  fi
}

if [ "$what" = all ] || [ "$what" = e2e ]; then
  for t in tests/e2e/*.sh; do
    [ "$(basename "$t")" = lib.sh ] && continue
    [ -f "$t" ] || continue
    e2e "$t"
  done
  haproxy3=${HAPROXY3:-../shared/peers/haproxy-3.4/haproxy}
  if [ -x "$haproxy3" ]; then
    for t in tests/e2e/haproxy_*.sh; do
      HAPROXY=$haproxy3 e2e "$t" " (HAProxy 3.x: $haproxy3)"
    done
  else
    echo "== skipped: the HAProxy e2e tests with HAProxy 3.x ($haproxy3 not found;" \
         "set HAPROXY3 to an HAProxy 3.1+ binary)"
  fi
fi

[ ${#failed_names[@]} -gt 0 ] && echo "failing: ${failed_names[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ ${#failed_names[@]} -eq 0 ]
