# spoa-ratelimit - HAProxy SPOE agent for cluster-wide sliding-window rate limiting.
#
#   make            build ./spoa-ratelimit
#   make run        install missing packages, build, run on the built-in config
#   make test       install missing packages, build with ASan+UBSan, run every test
#   make check      the structure: layer rules, file sizes, cited documents
#   make fuzz       libFuzzer over the SPOP codec, the HTTP parser, the peers codec and the
#                   rate limit service's codec (bounded time)
#   make bench      benchmarks (bench/)
#   make demo       multi-node demo on loopback: Redis, two agents, two HAProxy
#   make nginx-module   the nginx module (build/nginx/*.so) for Debian's nginx
#   make SANITIZE=address,undefined   sanitized build (in build/san)

PREFIX  ?= /usr/local
DESTDIR ?=
# Install locations. Packagers set SYSCONFDIR=/etc (the default config is
# then /etc/spoa-ratelimit/agent.json); the unit gets BINDIR and SYSCONFDIR.
BINDIR      ?= $(PREFIX)/bin
SYSCONFDIR  ?= $(PREFIX)/etc
MANDIR      ?= $(PREFIX)/share/man
UNITDIR     ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
# The nginx module goes where Debian's nginx loads modules from, whatever
# PREFIX says (its load_module snippet names modules/, i.e. /usr/lib/nginx/modules),
# with the snippet in modules-available and enabled in /etc/nginx/modules-enabled,
# as Debian's libnginx-mod-* packages do.
NGINX_MODDIR       ?= /usr/lib/nginx/modules
NGINX_MODAVAILDIR  ?= /usr/share/nginx/modules-available
NGINX_MODENABLEDIR ?= /etc/nginx/modules-enabled
CC      ?= cc
SANITIZE ?=
FUZZ_SECONDS ?= 60

PKGS      := hiredis libpq jansson yaml-0.1 libnghttp2
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lev -lm
TEST_LIBS  := $(shell pkg-config --libs criterion 2>/dev/null || echo -lcriterion)

CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wstrict-prototypes -Werror \
           -MMD -MP -I. $(PKG_CFLAGS)
LDFLAGS ?=

ifneq ($(SANITIZE),)
BUILD   ?= build/san
CFLAGS  += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=$(SANITIZE)
else
BUILD   ?= build/rel
endif

# agent/nginx_module/spoa_client.c: the nginx module's SPOP client core (pure C, no
# nginx), in the library for its unit test; the module itself is built by
# nginx's build system (make nginx-module).
LIB_SRCS  := $(wildcard spop/*.c strategies/*.c) $(filter-out agent/main.c,$(wildcard agent/*.c)) \
             agent/nginx_module/spoa_client.c
LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/%.o)
LIB       := $(BUILD)/libspoarl.a
AGENT     := $(BUILD)/spoa-ratelimit

TEST_SRCS := $(wildcard tests/test_*.c)
TEST_BINS := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)
TEST_HELPER_SRCS := $(wildcard tests/lib/*.c)
TEST_HELPER_OBJS := $(TEST_HELPER_SRCS:%.c=$(BUILD)/%.o)

BENCH_SRCS := $(wildcard bench/*.c)
BENCH_BINS := $(BENCH_SRCS:bench/%.c=$(BUILD)/bench/%)

.PHONY: all run test test-run unit e2e fuzz bench demo clean install uninstall deps-build deps-test check \
        nginx-module install-nginx-module install-nginx-module-files deps-demo

# No .SECONDARY: with it make takes every target for an intermediate file
# and does not build a missing object (a new .c) when the library is newer
# than its sources. The library also depends on the list of its sources, so
# a file added or removed rebuilds it (no stale object stays in the archive).
LIB_LIST  := $(BUILD)/libspoarl.list
$(shell mkdir -p $(BUILD) && echo '$(sort $(LIB_SRCS))' | cmp -s - $(LIB_LIST) 2>/dev/null || echo '$(sort $(LIB_SRCS))' > $(LIB_LIST))

all: spoa-ratelimit

spoa-ratelimit: $(AGENT)
	cp $< $@

$(AGENT): $(BUILD)/agent/main.o $(LIB)
	$(CC) $(CFLAGS) -o $@ $^ $(LDFLAGS) $(PKG_LIBS)

$(LIB): $(LIB_OBJS) $(LIB_LIST)
	@rm -f $@
	ar rcs $@ $(LIB_OBJS)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/tests/%: tests/%.c $(TEST_HELPER_OBJS) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(TEST_HELPER_OBJS) $(LIB) $(LDFLAGS) $(TEST_LIBS) $(PKG_LIBS)

$(BUILD)/bench/%: bench/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDFLAGS) $(PKG_LIBS)

# The Redis sync bench starts its servers and cluster with the tests' fixtures.
BENCH_REDIS_OBJS := $(BUILD)/tests/lib/redis_server.o $(BUILD)/tests/lib/redis_cluster.o
$(BUILD)/bench/bench_sync_redis: bench/bench_sync_redis.c $(BENCH_REDIS_OBJS) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BENCH_REDIS_OBJS) $(LIB) $(LDFLAGS) $(PKG_LIBS)

# The nginx module, built by nginx's own build system against Debian's
# nginx-dev (scripts/nginx-module.sh); not sanitized: it runs in Debian's
# nginx. Its SPOP client core is unit-tested under ASan (tests/test_ngx_core.c).
NGX_OUT  := build/nginx
NGX_MOD  := $(NGX_OUT)/ngx_http_spoa_ratelimit_module.so
NGX_SRCS := $(wildcard agent/nginx_module/*.c agent/nginx_module/*.h) spop/spop.c spop/spop.h spop/spop-t.h \
            agent/hash.c agent/hash.h

nginx-module:
	@scripts/deps.sh nginx
	$(MAKE) $(NGX_MOD)

$(NGX_OUT)/objs/Makefile: agent/nginx_module/config scripts/nginx-module.sh
	scripts/nginx-module.sh configure $(NGX_OUT)

$(NGX_MOD): $(NGX_OUT)/objs/Makefile $(NGX_SRCS)
	scripts/nginx-module.sh build $(NGX_OUT)

# The same with ASan and UBSan, for Debian's nginx with the sanitizers'
# runtime preloaded (tests/e2e/nginx_module_asan.sh).
NGX_SAN_OUT := build/nginx-san
NGX_SAN_MOD := $(NGX_SAN_OUT)/ngx_http_spoa_ratelimit_module.so

$(NGX_SAN_OUT)/objs/Makefile: agent/nginx_module/config scripts/nginx-module.sh
	NGX_SANITIZE=address,undefined scripts/nginx-module.sh configure $(NGX_SAN_OUT)

$(NGX_SAN_MOD): $(NGX_SAN_OUT)/objs/Makefile $(NGX_SRCS)
	NGX_SANITIZE=address,undefined scripts/nginx-module.sh build $(NGX_SAN_OUT)

deps-build:
	@scripts/deps.sh build

deps-test:
	@scripts/deps.sh test

run: deps-build
	$(MAKE) spoa-ratelimit
	./spoa-ratelimit

# The whole suite, sanitized: unit tests (Criterion), protocol tests against
# the agent, end-to-end tests through Debian's HAProxy.
test: deps-test
	$(MAKE) SANITIZE=address,undefined test-run

# The structure is checked first (on the objects just built), then the tests.
test-run: $(AGENT) $(TEST_BINS) $(NGX_MOD) $(NGX_SAN_MOD)
	@scripts/check.sh $(BUILD)
	tests/run.sh $(BUILD)

# The structure, checked: layer rules, include cycles, file sizes, cited
# documents, call circles between files (scripts/check.sh, docs/STYLE.md).
check: $(LIB)
	@scripts/check.sh $(BUILD)

unit: $(TEST_BINS)
	tests/run.sh $(BUILD) unit

e2e: $(AGENT) $(NGX_MOD) $(NGX_SAN_MOD)
	tests/run.sh $(BUILD) e2e

fuzz:
	@scripts/deps.sh fuzz
	@mkdir -p build/fuzz/corpus build/fuzz/corpus-http build/fuzz/corpus-peers build/fuzz/corpus-rls
	clang -std=c11 -D_GNU_SOURCE -O1 -g -I. -fsanitize=fuzzer,address,undefined \
	    -o build/fuzz/fuzz_spop tests/fuzz/fuzz_spop.c spop/*.c
	clang -std=c11 -D_GNU_SOURCE -O1 -g -I. -fsanitize=fuzzer,address,undefined \
	    -o build/fuzz/fuzz_http tests/fuzz/fuzz_http.c agent/http_parse.c
	clang -std=c11 -D_GNU_SOURCE -O1 -g -I. -fsanitize=fuzzer,address,undefined \
	    -fno-sanitize-recover=undefined -o build/fuzz/fuzz_peers tests/fuzz/fuzz_peers.c agent/peers_wire.c
	clang -std=c11 -D_GNU_SOURCE -O1 -g -I. -fsanitize=fuzzer,address,undefined \
	    -fno-sanitize-recover=undefined -o build/fuzz/fuzz_rls tests/fuzz/fuzz_rls.c \
	    agent/rls_wire.c agent/pb_wire.c
	build/fuzz/fuzz_spop -max_total_time=$(FUZZ_SECONDS) -max_len=20000 \
	    -artifact_prefix=build/fuzz/ build/fuzz/corpus tests/fuzz/seeds > build/fuzz/log 2>&1; \
	    rc=$$?; tail -5 build/fuzz/log; [ $$rc -eq 0 ] || exit $$rc; \
	build/fuzz/fuzz_http -max_total_time=$(FUZZ_SECONDS) -max_len=40000 \
	    -artifact_prefix=build/fuzz/http- build/fuzz/corpus-http tests/fuzz/seeds-http \
	    > build/fuzz/log-http 2>&1; rc=$$?; tail -5 build/fuzz/log-http; [ $$rc -eq 0 ] || exit $$rc; \
	build/fuzz/fuzz_peers -max_total_time=$(FUZZ_SECONDS) -max_len=20000 \
	    -artifact_prefix=build/fuzz/peers- build/fuzz/corpus-peers tests/fuzz/seeds-peers \
	    > build/fuzz/log-peers 2>&1; rc=$$?; tail -5 build/fuzz/log-peers; [ $$rc -eq 0 ] || exit $$rc; \
	build/fuzz/fuzz_rls -max_total_time=$(FUZZ_SECONDS) -max_len=20000 \
	    -artifact_prefix=build/fuzz/rls- build/fuzz/corpus-rls tests/fuzz/seeds-rls \
	    > build/fuzz/log-rls 2>&1; rc=$$?; tail -5 build/fuzz/log-rls; exit $$rc

bench: deps-build
	$(MAKE) $(AGENT) $(BENCH_BINS)
	@if [ -x /usr/share/nginx/src/configure ]; then $(MAKE) $(NGX_MOD); \
	else echo "no nginx-dev: the nginx part runs without the module (scripts/deps.sh bench)"; fi
	bench/run.sh $(BUILD)

# Multi-node demo on loopback (scripts/demo.sh): Redis, two agents, two
# HAProxy nodes, a curl walkthrough of the cluster-wide limit (< 60 s).
demo: deps-demo
	$(MAKE) $(AGENT)
	scripts/demo.sh $(AGENT)

deps-demo:
	@scripts/deps.sh demo

# make install [PREFIX=/usr/local] [SYSCONFDIR=$(PREFIX)/etc] [DESTDIR=stage]:
# the binary, the man page, the systemd unit (paths filled in), the
# sysusers.d entry for its user, the examples, and the default config
# (haproxy-examples/agent.json) unless one is there already. Needs no root
# with DESTDIR. Creating the user and enabling the unit: README, Installing.
INSTALL_CONF := $(DESTDIR)$(SYSCONFDIR)/spoa-ratelimit/agent.json
INSTALL_UNIT := $(DESTDIR)$(UNITDIR)/spoa-ratelimit.service

install: spoa-ratelimit
	install -D -m 0755 spoa-ratelimit $(DESTDIR)$(BINDIR)/spoa-ratelimit
	install -D -m 0644 haproxy-examples/haproxy.cfg $(DESTDIR)$(PREFIX)/share/spoa-ratelimit/haproxy.cfg
	install -D -m 0644 haproxy-examples/spoe-ratelimit.conf $(DESTDIR)$(PREFIX)/share/spoa-ratelimit/spoe-ratelimit.conf
	install -D -m 0644 haproxy-examples/agent.json $(DESTDIR)$(PREFIX)/share/spoa-ratelimit/agent.json
	install -D -m 0644 haproxy-examples/prometheus/spoa-ratelimit.rules.yml $(DESTDIR)$(PREFIX)/share/spoa-ratelimit/spoa-ratelimit.rules.yml
	install -D -m 0644 docs/spoa-ratelimit.8 $(DESTDIR)$(MANDIR)/man8/spoa-ratelimit.8
	install -D -m 0644 scripts/systemd/spoa-ratelimit.sysusers $(DESTDIR)$(SYSUSERSDIR)/spoa-ratelimit.conf
	install -d -m 0755 $(DESTDIR)$(UNITDIR)
	sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' \
	    scripts/systemd/spoa-ratelimit.service.in > $(INSTALL_UNIT)
	chmod 0644 $(INSTALL_UNIT)
	@if [ -e $(INSTALL_CONF) ]; then echo "keeping $(INSTALL_CONF)"; \
	else echo "install -D -m 0644 haproxy-examples/agent.json $(INSTALL_CONF)"; \
	    install -D -m 0644 haproxy-examples/agent.json $(INSTALL_CONF); fi
	@if [ -f $(NGX_MOD) ]; then $(MAKE) --no-print-directory install-nginx-module-files; \
	else echo "no $(NGX_MOD): the nginx module is not installed (make nginx-module first)"; fi

# The nginx module as Debian's libnginx-mod-* packages install theirs: the
# .so in $(NGINX_MODDIR), the load_module snippet in $(NGINX_MODAVAILDIR),
# enabled by a link in $(NGINX_MODENABLEDIR) (priority 50). nginx loads it
# at its next start or reload (nginx -t first).
NGX_SNIPPET := mod-http-spoa-ratelimit.conf

install-nginx-module: nginx-module
	$(MAKE) --no-print-directory install-nginx-module-files

install-nginx-module-files:
	install -D -m 0644 $(NGX_MOD) $(DESTDIR)$(NGINX_MODDIR)/ngx_http_spoa_ratelimit_module.so
	install -D -m 0644 agent/nginx_module/$(NGX_SNIPPET) $(DESTDIR)$(NGINX_MODAVAILDIR)/$(NGX_SNIPPET)
	install -d -m 0755 $(DESTDIR)$(NGINX_MODENABLEDIR)
	ln -sf $(NGINX_MODAVAILDIR)/$(NGX_SNIPPET) $(DESTDIR)$(NGINX_MODENABLEDIR)/50-$(NGX_SNIPPET)

# The config goes only if it is still the one installed (else it is kept).
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/spoa-ratelimit
	rm -rf $(DESTDIR)$(PREFIX)/share/spoa-ratelimit
	rm -f $(DESTDIR)$(MANDIR)/man8/spoa-ratelimit.8 $(INSTALL_UNIT) \
	    $(DESTDIR)$(SYSUSERSDIR)/spoa-ratelimit.conf
	rm -f $(DESTDIR)$(NGINX_MODENABLEDIR)/50-$(NGX_SNIPPET) \
	    $(DESTDIR)$(NGINX_MODAVAILDIR)/$(NGX_SNIPPET) \
	    $(DESTDIR)$(NGINX_MODDIR)/ngx_http_spoa_ratelimit_module.so
	@if cmp -s haproxy-examples/agent.json $(INSTALL_CONF); then rm -f $(INSTALL_CONF); \
	    rmdir $(DESTDIR)$(SYSCONFDIR)/spoa-ratelimit 2>/dev/null || true; \
	elif [ -e $(INSTALL_CONF) ]; then echo "keeping $(INSTALL_CONF) (changed since install)"; fi

clean:
	rm -rf build spoa-ratelimit

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
