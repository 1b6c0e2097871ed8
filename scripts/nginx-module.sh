#!/usr/bin/env bash
# Builds the nginx module (agent/nginx_module/) with nginx's own build system
# against Debian's nginx-dev, as Debian builds its libnginx-mod-* packages
# (dh's nginx_mod build system): nginx's configure with the flags of the
# distribution's nginx (/usr/share/nginx/src/conf_flags, --with-compat) and
# the distribution's compiler flags, then `make modules`. The result loads
# into Debian's nginx with load_module.
#
#   scripts/nginx-module.sh configure OUT    nginx's configure into OUT/objs
#   scripts/nginx-module.sh build OUT        OUT/ngx_http_spoa_ratelimit_module.so
#
# NGINX_SRC: nginx's sources for modules (default /usr/share/nginx/src,
# from nginx-dev). Nothing is written there: configure and make run in it,
# their output goes to OUT. NGX_SANITIZE=address,undefined builds the
# module sanitized, for an nginx started with the sanitizer's runtime
# preloaded (tests/e2e/nginx_module.sh does, in its own build directory).
set -eu
what=${1:?configure|build}
out=${2:?output directory}
root=$(cd "$(dirname "$0")/.." && pwd)
src=${NGINX_SRC:-/usr/share/nginx/src}
mod=ngx_http_spoa_ratelimit_module

if [ ! -x "$src/configure" ] || [ ! -f "$src/conf_flags" ]; then
  echo "nginx-module: no nginx sources for modules in $src:" \
       "install Debian's nginx-dev (scripts/deps.sh nginx)" >&2
  exit 1
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)

case $what in
  configure)
    rm -rf "$out/objs"
    # shellcheck disable=SC1091 # NGX_CONF_FLAGS, the configure flags of Debian's nginx
    . "$src/conf_flags"
    # nginx adds -W -Wall -Werror; the project's -Wshadow -Wstrict-prototypes too.
    cflags="$(dpkg-buildflags --get CFLAGS) -fPIC $(dpkg-buildflags --get CPPFLAGS) -Wshadow -Wstrict-prototypes"
    ldflags="$(dpkg-buildflags --get LDFLAGS) -fPIC"
    if [ -n "${NGX_SANITIZE:-}" ]; then
      cflags="$cflags -fsanitize=$NGX_SANITIZE -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
      ldflags="$ldflags -fsanitize=$NGX_SANITIZE"
    fi
    (cd "$src" && ./configure --with-cc-opt="$cflags" --with-ld-opt="$ldflags" \
        "${NGX_CONF_FLAGS[@]}" --add-dynamic-module="$root/agent/nginx_module" \
        --builddir="$out/objs") > "$out/configure.log" 2>&1 || {
      tail -20 "$out/configure.log" >&2
      echo "nginx-module: nginx's configure failed (whole log: $out/configure.log)" >&2
      exit 1
    }
    ;;
  build)
    [ -f "$out/objs/Makefile" ] || "$0" configure "$out"
    make -f "$out/objs/Makefile" -C "$src" modules
    # A new file, renamed over the old one: an nginx running the old one
    # keeps its mapping intact (cp would rewrite it in place).
    cp "$out/objs/$mod.so" "$out/.$mod.so.new"
    mv -f "$out/.$mod.so.new" "$out/$mod.so"
    # It must load into this nginx: nginx -t with only the module.
    if command -v nginx >/dev/null 2>&1 && [ -z "${NGX_SANITIZE:-}" ]; then
      printf 'load_module %s;\nevents {}\n' "$out/$mod.so" > "$out/load-test.conf"
      nginx -q -t -p "$out" -c "$out/load-test.conf" -g "error_log stderr; pid $out/load-test.pid;"
    fi
    echo "nginx-module: $out/$mod.so"
    ;;
  *) echo "usage: $0 configure|build OUT" >&2; exit 2 ;;
esac
