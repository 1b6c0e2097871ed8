#!/usr/bin/env bash
# Installs the Debian packages a target needs, only those missing.
# Usage: scripts/deps.sh build|run|test|bench|fuzz|demo|docker|nginx
# As root it runs apt-get; otherwise it prints the exact command and fails.
set -eu
what=${1:-build}
pkgs="build-essential pkg-config libev-dev libhiredis-dev libpq-dev libjansson-dev libyaml-dev libnghttp2-dev"
case "$what" in
  build|run) ;;
  # The nginx module (make nginx-module): nginx's sources for modules.
  nginx) pkgs="$pkgs nginx nginx-dev" ;;
  test)  pkgs="$pkgs libcriterion-dev haproxy nginx nginx-dev curl redis-server redis-sentinel postgresql clang docker-compose iproute2 procps systemd man-db groff-base prometheus python3-grpcio python3-protobuf nghttp2-client" ;;
  bench) pkgs="$pkgs haproxy nginx nginx-dev curl wrk redis-server postgresql valgrind iproute2 procps nghttp2-client python3-protobuf" ;;
  demo)  pkgs="$pkgs haproxy curl redis-server iproute2 procps" ;;
  fuzz)  pkgs="$pkgs clang libclang-rt-14-dev" ;;
  # The Docker demo's test: Debian's engine and compose, debootstrap for
  # the base image (scripts/docker-base.sh).
  docker) pkgs="docker.io docker-compose debootstrap curl iproute2" ;;
  *) echo "usage: $0 build|run|test|bench|fuzz|demo|docker|nginx" >&2; exit 2 ;;
esac
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
cmd="apt-get install -y --no-install-recommends$missing"
if [ "$(id -u)" -ne 0 ]; then
  echo "missing Debian packages:$missing" >&2
  echo "run as root: apt-get update && $cmd" >&2
  exit 1
fi
echo "deps: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=300 update -qq >&2
# The haproxy and redis packages would start system services; we run our own.
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d.spoa && chmod +x /usr/sbin/policy-rc.d.spoa
[ -e /usr/sbin/policy-rc.d ] || { cp /usr/sbin/policy-rc.d.spoa /usr/sbin/policy-rc.d; added=1; }
apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends $missing >&2
[ "${added:-0}" = 1 ] && rm -f /usr/sbin/policy-rc.d
rm -f /usr/sbin/policy-rc.d.spoa
