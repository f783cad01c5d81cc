# rangeshim: see README.md.  `make` builds the library and the command,
# `make test` the Criterion suites, `make demo` the torn-read demonstration.

BUILD   ?= build
SAN     ?=
CC      ?= cc
PREFIX  ?= /usr/local
DESTDIR ?=

WARN     = -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
# The library's layers, lowest first (docs/design.md, "The map"): a file
# sees the headers of its own folder and of the folders below it, so an
# include that points upward does not compile.  Everything else (the
# command, tests, examples) sees them all.
LAYER_I_core    = -Ishim/core
LAYER_I_node    = $(LAYER_I_core) -Ishim/node
LAYER_I_cluster = $(LAYER_I_node) -Ishim/cluster
LAYER_I_preload = $(LAYER_I_cluster) -Ishim/preload
SHIM_I    = $(LAYER_I_preload) -Ishim
BASEFLAGS = -std=gnu11 -O2 -g -D_GNU_SOURCE -Iinclude $(SHIM_I) $(WARN)

ifeq ($(SAN),asan)
SANFLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
else ifeq ($(SAN),tsan)
SANFLAGS = -fsanitize=thread -fno-omit-frame-pointer
else
SANFLAGS =
endif

# RS_ASSERT (shim/core/invariant.h) is compiled into debug and sanitizer
# builds, out of release ones.
DEBUG ?=
ifneq ($(SAN)$(DEBUG),)
DEBUGFLAGS = -DRS_DEBUG
endif

CFLAGS  += $(BASEFLAGS) $(SANFLAGS) $(DEBUGFLAGS)
LDFLAGS += $(SANFLAGS)

SHIM_SRCS = $(wildcard shim/core/*.c shim/node/*.c) shim/cluster/clusterfs.c \
            $(wildcard shim/preload/*.c)
SHIM_HDRS = $(wildcard shim/*/*.h)
SHIM_OBJS = $(SHIM_SRCS:shim/%.c=$(BUILD)/obj/%.o)
LIB       = $(BUILD)/librangeshim.so
CLI       = $(BUILD)/rangeshim

EXAMPLES  = $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))
HELPERS   = $(patsubst tests/helpers/%.c,$(BUILD)/tests/helpers/%,$(wildcard tests/helpers/*.c))
TESTS     = $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/test_*.c))

# Unit tests link these modules directly, without interposition.
UNIT_SRCS = shim/core/rangelock.c shim/core/lockorder.c shim/node/nodelock.c shim/node/segment.c \
            shim/preload/config.c shim/core/log.c shim/preload/stats.c \
            shim/cluster/clusterfs.c

.PHONY: all clean test test-asan test-tsan demo deps install uninstall install-manifest check-callgrind FORCE

all: $(LIB) $(CLI) $(EXAMPLES)

$(BUILD)/obj/%.o: shim/%.c $(SHIM_HDRS) include/rangeshim/rangelock.h
	@mkdir -p $(dir $@)
	$(CC) $(filter-out $(SHIM_I),$(CFLAGS)) $(LAYER_I_$(firstword $(subst /, ,$*))) -fPIC -fvisibility=hidden -U_FORTIFY_SOURCE -c $< -o $@

$(LIB): $(SHIM_OBJS)
	$(CC) -shared -o $@ $^ $(LDFLAGS) -Wl,-z,now -Wl,-Bsymbolic-functions -ldl -lpthread

# The command (shim/cli/, one file per subcommand) reads the node table
# with the same code the library uses, and runs the node's agent, a
# component of cluster scope (shim/cluster/agent.c), not of the library.
CLI_SRCS = $(wildcard shim/cli/*.c) shim/node/nodelock.c shim/node/segment.c shim/core/log.c \
           shim/core/lockorder.c shim/cluster/clusterlock.c shim/cluster/agent.c

$(CLI): $(CLI_SRCS) $(SHIM_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $(CLI_SRCS) $(LDFLAGS) -lpthread

$(BUILD)/examples/%: examples/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) -lpthread

$(BUILD)/tests/helpers/%: tests/helpers/%.c $(wildcard tests/helpers/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) -lpthread

# Shims preloaded into a test's agent (tests/helpers/lib/): a lock manager
# that fails on demand (libfault_fcntl.so, tests/test_cluster.c lost_lock),
# a poller stopped mid-tick (libstall_stat.so, tests/test_cluster_adv.c
# agent_idle_exit_race); no sanitizer: they are only shims.
FAULTLIB = $(BUILD)/tests/helpers/libfault_fcntl.so
PRELOADLIBS = $(patsubst tests/helpers/lib/%.c,$(BUILD)/tests/helpers/lib%.so,$(wildcard tests/helpers/lib/*.c))
$(BUILD)/tests/helpers/lib%.so: tests/helpers/lib/%.c
	@mkdir -p $(dir $@)
	$(CC) $(BASEFLAGS) -fPIC -shared -o $@ $< -ldl

$(BUILD)/tests/test_%: tests/test_%.c $(UNIT_SRCS) $(wildcard tests/*.h) $(SHIM_HDRS) $(wildcard shim/cli/iface.*)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DRS_BUILD_DIR='"$(abspath $(BUILD))"' -DRS_SAN='"$(SAN)"' -DRS_SRC_DIR='"$(abspath .)"' \
	    -o $@ $< $(UNIT_SRCS) $(LDFLAGS) -lcriterion -lpthread -ldl

deps:
	@sh tests/deps.sh

test: deps
	@$(MAKE) --no-print-directory all $(HELPERS) $(PRELOADLIBS) $(TESTS)
	@sh tests/structure.sh . $(BUILD)
	@sh tests/run.sh $(BUILD) $(SAN)

test-asan:
	@$(MAKE) --no-print-directory BUILD=build-asan SAN=asan test

test-tsan:
	@$(MAKE) --no-print-directory BUILD=build-tsan SAN=tsan test

demo: all
	@sh examples/demo.sh $(BUILD)

check-callgrind: all $(BUILD)/tests/bench/fastpath
	@sh tests/callgrind.sh $(BUILD)

# ---- install / uninstall ------------------------------------------------
# The GNU directory variables, each overridable; DESTDIR stages the tree.
BINDIR      ?= $(PREFIX)/bin
LIBDIR      ?= $(PREFIX)/lib
INCLUDEDIR  ?= $(PREFIX)/include
DATAROOTDIR ?= $(PREFIX)/share
MANDIR      ?= $(DATAROOTDIR)/man
DOCDIR      ?= $(DATAROOTDIR)/doc/rangeshim
BASHCOMPDIR ?= $(DATAROOTDIR)/bash-completion/completions
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig

# Every file install puts down, relative to DESTDIR: uninstall removes
# exactly these, and tests/test_install.c checks the staged tree against
# this list (`make install-manifest` prints it).
DOC_FILES   = README.md $(wildcard docs/*.md)
IMG_FILES   = $(wildcard docs/img/*)
INSTALLED   = $(BINDIR)/rangeshim $(LIBDIR)/librangeshim.so \
              $(INCLUDEDIR)/rangeshim/rangelock.h $(PKGCONFIGDIR)/rangeshim.pc \
              $(MANDIR)/man1/rangeshim.1 $(MANDIR)/man7/rangeshim.7 \
              $(BASHCOMPDIR)/rangeshim \
              $(addprefix $(DOCDIR)/,$(notdir $(DOC_FILES))) \
              $(addprefix $(DOCDIR)/img/,$(notdir $(IMG_FILES)))
# Directories that are ours alone, removed by uninstall when empty.
OWN_DIRS    = $(DOCDIR)/img $(DOCDIR) $(INCLUDEDIR)/rangeshim

# The installed command is built with LIBDIR compiled in, so that it finds
# the library wherever LIBDIR puts it (not only in ../lib).
INST_CLI = $(BUILD)/install/rangeshim
$(INST_CLI): $(CLI_SRCS) $(SHIM_HDRS) FORCE
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DRS_LIBDIR='"$(LIBDIR)"' -o $@.tmp $(CLI_SRCS) $(LDFLAGS) -lpthread
	mv $@.tmp $@

$(BUILD)/install/rangeshim.pc: include/rangeshim.pc.in FORCE
	@mkdir -p $(dir $@)
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' \
	    -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@VERSION@|$(VERSION)|g' $< > $@

# One version, the command's (shim/cli/cli.h).
VERSION := $(shell sed -n 's/^#define RS_VERSION "\(.*\)"/\1/p' shim/cli/cli.h)

install: $(LIB) $(INST_CLI) $(BUILD)/install/rangeshim.pc
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR)/rangeshim \
	    $(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man7 \
	    $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(DOCDIR)/img
	install -m 0755 $(INST_CLI) $(DESTDIR)$(BINDIR)/rangeshim
	install -m 0755 $(LIB) $(DESTDIR)$(LIBDIR)/librangeshim.so
	install -m 0644 include/rangeshim/rangelock.h $(DESTDIR)$(INCLUDEDIR)/rangeshim/
	install -m 0644 $(BUILD)/install/rangeshim.pc $(DESTDIR)$(PKGCONFIGDIR)/rangeshim.pc
	install -m 0644 docs/man/rangeshim.1 $(DESTDIR)$(MANDIR)/man1/rangeshim.1
	install -m 0644 docs/man/rangeshim.7 $(DESTDIR)$(MANDIR)/man7/rangeshim.7
	install -m 0644 shim/cli/completion.bash $(DESTDIR)$(BASHCOMPDIR)/rangeshim
	install -m 0644 $(DOC_FILES) $(DESTDIR)$(DOCDIR)/
	install -m 0644 $(IMG_FILES) $(DESTDIR)$(DOCDIR)/img/

uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALLED))
	@for d in $(addprefix $(DESTDIR),$(OWN_DIRS)); do \
	    if [ -d "$$d" ] && ! rmdir "$$d" 2>/dev/null; then \
	        echo "uninstall: left $$d: it holds files that install did not put there"; fi; done

install-manifest:
	@printf '%s\n' $(INSTALLED)

FORCE:

clean:
	rm -rf build build-asan build-tsan

$(BUILD)/tests/bench/%: tests/bench/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) -lpthread
include tests/bench/bench.mk
include tests/compat/compat.mk
include tests/cluster/cluster.mk
