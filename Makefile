# rangeshim: see README.md.  `make` builds the library and the command,
# `make test` the Criterion suites, `make demo` the torn-read demonstration.

BUILD   ?= build
SAN     ?=
CC      ?= cc
PREFIX  ?= /usr/local
DESTDIR ?=

WARN     = -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
BASEFLAGS = -std=gnu11 -O2 -g -D_GNU_SOURCE -Iinclude -Ishim $(WARN)

ifeq ($(SAN),asan)
SANFLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
else ifeq ($(SAN),tsan)
SANFLAGS = -fsanitize=thread -fno-omit-frame-pointer
else
SANFLAGS =
endif

CFLAGS  += $(BASEFLAGS) $(SANFLAGS)
LDFLAGS += $(SANFLAGS)

SHIM_SRCS = shim/init.c shim/interpose.c shim/iolock.c shim/fdtable.c shim/rangelock.c \
            shim/grants.c shim/nodelock.c shim/segment.c \
            shim/config.c shim/stats.c shim/log.c shim/real.c \
            shim/coverage.c shim/cluster.c shim/clusterfs.c
SHIM_OBJS = $(SHIM_SRCS:shim/%.c=$(BUILD)/obj/%.o)
LIB       = $(BUILD)/librangeshim.so
CLI       = $(BUILD)/rangeshim

EXAMPLES  = $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))
HELPERS   = $(patsubst tests/helpers/%.c,$(BUILD)/tests/helpers/%,$(wildcard tests/helpers/*.c))
TESTS     = $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/test_*.c))

# Unit tests link these modules directly, without interposition.
UNIT_SRCS = shim/rangelock.c shim/nodelock.c shim/segment.c shim/config.c shim/log.c \
            shim/real.c shim/stats.c shim/clusterfs.c

.PHONY: all clean test test-asan test-tsan demo deps install check-callgrind

all: $(LIB) $(CLI) $(EXAMPLES)

$(BUILD)/obj/%.o: shim/%.c $(wildcard shim/*.h) include/rangeshim/rangelock.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fPIC -fvisibility=hidden -U_FORTIFY_SOURCE -c $< -o $@

$(LIB): $(SHIM_OBJS)
	$(CC) -shared -o $@ $^ $(LDFLAGS) -Wl,-z,now -Wl,-Bsymbolic-functions -ldl -lpthread

# The command (shim/cli/, one file per subcommand) reads the node table
# with the same code the library uses.
CLI_SRCS = $(wildcard shim/cli/*.c) shim/nodelock.c shim/segment.c shim/log.c shim/clusterlock.c

$(CLI): $(CLI_SRCS) $(wildcard shim/*.h shim/cli/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $(CLI_SRCS) $(LDFLAGS) -lpthread

$(BUILD)/examples/%: examples/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) -lpthread

$(BUILD)/tests/helpers/%: tests/helpers/%.c $(wildcard tests/helpers/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) -lpthread

# A lock manager that fails on demand, preloaded into a test's agent
# (tests/test_cluster.c, lost_lock); no sanitizer: it is only a shim.
FAULTLIB = $(BUILD)/tests/helpers/libfault_fcntl.so
$(FAULTLIB): tests/helpers/lib/fault_fcntl.c
	@mkdir -p $(dir $@)
	$(CC) $(BASEFLAGS) -fPIC -shared -o $@ $< -ldl

$(BUILD)/tests/test_%: tests/test_%.c $(UNIT_SRCS) $(wildcard tests/*.h) $(wildcard shim/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DRS_BUILD_DIR='"$(abspath $(BUILD))"' -DRS_SAN='"$(SAN)"' \
	    -o $@ $< $(UNIT_SRCS) $(LDFLAGS) -lcriterion -lpthread -ldl

deps:
	@sh tests/deps.sh

test: deps
	@$(MAKE) --no-print-directory all $(HELPERS) $(FAULTLIB) $(TESTS)
	@sh tests/run.sh $(BUILD) $(SAN)

test-asan:
	@$(MAKE) --no-print-directory BUILD=build-asan SAN=asan test

test-tsan:
	@$(MAKE) --no-print-directory BUILD=build-tsan SAN=tsan test

demo: all
	@sh examples/demo.sh $(BUILD)

check-callgrind: all $(BUILD)/tests/bench/fastpath
	@sh tests/callgrind.sh $(BUILD)

install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/bin \
	    $(DESTDIR)$(PREFIX)/include/rangeshim $(DESTDIR)$(PREFIX)/share/doc/rangeshim
	install -m 0755 $(LIB) $(DESTDIR)$(PREFIX)/lib/librangeshim.so
	install -m 0755 $(CLI) $(DESTDIR)$(PREFIX)/bin/rangeshim
	install -m 0644 include/rangeshim/rangelock.h $(DESTDIR)$(PREFIX)/include/rangeshim/
	install -m 0644 README.md docs/*.md $(DESTDIR)$(PREFIX)/share/doc/rangeshim/

clean:
	rm -rf build build-asan build-tsan

$(BUILD)/tests/bench/%: tests/bench/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) -lpthread
include tests/bench/bench.mk
include tests/compat/compat.mk
include tests/cluster/cluster.mk
