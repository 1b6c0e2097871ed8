#!/usr/bin/env bash
# scripts/docker-base.sh - the Debian 12 base image of the Docker demo,
# made without a registry: debootstrap (variant minbase) from a Debian
# mirror, trimmed the way Docker's debian:12-slim is, then "docker import".
# Every image of haproxy-examples/docker-compose.yml is built FROM it.
#
#   scripts/docker-base.sh            build it unless it exists
#   scripts/docker-base.sh --force    build it again (e.g. for new updates)
#
# Needs root (debootstrap, chroot), debootstrap (apt-get install
# debootstrap), a Docker engine the client reaches (DOCKER_HOST) and the
# mirror. Takes about a minute. Environment:
#   BASE_IMAGE      the tag made (default spoa-ratelimit/debian:12)
#   DEBIAN_MIRROR   default http://deb.debian.org/debian
#   DEBIAN_SECURITY default http://deb.debian.org/debian-security
#   DOCKER          the Docker client (default docker)
set -eu
image=${BASE_IMAGE:-spoa-ratelimit/debian:12}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${DEBIAN_SECURITY:-http://deb.debian.org/debian-security}
docker=${DOCKER:-docker}
suite=bookworm

force=""
case "${1:-}" in
  --force) force=1 ;;
  "") ;;
  *) echo "usage: $0 [--force]" >&2; exit 2 ;;
esac

if [ -z "$force" ] && "$docker" image inspect "$image" >/dev/null 2>&1; then
  echo "$image exists (--force builds it again)"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "$0: debootstrap needs root" >&2
  exit 1
fi
command -v debootstrap >/dev/null 2>&1 || { echo "$0: run as root: apt-get install debootstrap" >&2; exit 1; }
"$docker" info >/dev/null 2>&1 || { echo "$0: no Docker engine answers (DOCKER_HOST=${DOCKER_HOST:-})" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/spoa-base.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
root=$tmp/rootfs

echo "debootstrap --variant=minbase $suite from $mirror" >&2
if ! debootstrap --variant=minbase "$suite" "$root" "$mirror" > "$tmp/debootstrap.log" 2>&1; then
  tail -n 20 "$tmp/debootstrap.log" >&2
  exit 1
fi

# The suite, its updates and security updates, as in Docker's debian:12.
cat > "$root/etc/apt/sources.list" <<EOF
deb $mirror $suite main
deb $mirror $suite-updates main
deb $security $suite-security main
EOF
# No init runs in a container: package scripts must not start services.
printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"
chmod 0755 "$root/usr/sbin/policy-rc.d"
# Small images: no documentation, manuals or translations (the copyright
# files stay), no recommended packages, no package lists left behind.
cat > "$root/etc/dpkg/dpkg.cfg.d/spoa-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
EOF
cat > "$root/etc/apt/apt.conf.d/spoa-slim" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
EOF

# The security updates released since the point release.
echo "apt-get upgrade in the new tree" >&2
if ! { chroot "$root" apt-get update -qq &&
       DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get upgrade -y -qq; } > "$tmp/upgrade.log" 2>&1; then
  tail -n 20 "$tmp/upgrade.log" >&2
  exit 1
fi

# What the dpkg excludes keep out of later installs, out of this one too;
# and the host's files debootstrap copied (Docker mounts its own).
find "$root/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
rm -rf "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/* \
       "$root"/usr/share/lintian/* "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* \
       "$root"/var/cache/debconf/*-old "$root"/var/log/*.log "$root"/var/log/apt/*
: > "$root/etc/hostname"
: > "$root/etc/resolv.conf"

tar --numeric-owner -C "$root" -c . |
  "$docker" import --change 'CMD ["/bin/bash"]' \
    --message "debootstrap --variant=minbase $suite $mirror, trimmed (scripts/docker-base.sh)" \
    - "$image" > /dev/null
"$docker" image ls "$image"
