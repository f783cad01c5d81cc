# The compatibility and robustness suite; included by the Makefile.
#
#   make compat        real programs (fio, sqlite3, MPI-IO, python, coreutils,
#                      the shell, git, fortified and 64-bit-offset builds,
#                      fork/exec, posix_spawn/vfork) and quick fault tests,
#                      each run without and with the shim, under 5 minutes
#   make soak          the fault tests together for SOAK_SECONDS (default 60)
#   make fuzz          libFuzzer on the segment validation and the config
#                      parser, FUZZ_SECONDS (default 30) each
#
# tests/compat/run.sh and soak.sh install missing tools with apt-get when
# run as root; otherwise they print the command and skip what needs them.

COMPAT_DIR   = $(BUILD)/compat
COMPAT_PROGS = forkexec spawn hammer sigstorm fdchaos limits closeall
COMPAT_BINS  = $(addprefix $(COMPAT_DIR)/,$(COMPAT_PROGS)) \
               $(COMPAT_DIR)/rw_basic.plain $(COMPAT_DIR)/rw_basic.fortify \
               $(COMPAT_DIR)/rw_basic.fob $(COMPAT_DIR)/rw_basic.fortify64
SOAK_SECONDS ?= 60
FUZZ_SECONDS ?= 30
FUZZ_CC      ?= clang
FUZZ_DIR      = $(BUILD)/fuzz
FUZZ_BINS     = $(FUZZ_DIR)/fuzz_segment $(FUZZ_DIR)/fuzz_config

.PHONY: compat soak fuzz compat-progs fuzz-deps

compat-progs: $(COMPAT_BINS)

compat: all $(COMPAT_BINS)
	@bash tests/compat/run.sh $(BUILD)

soak: all $(COMPAT_BINS)
	@SOAK_SECONDS=$(SOAK_SECONDS) bash tests/compat/soak.sh $(BUILD)

$(COMPAT_DIR)/%: tests/compat/%.c tests/compat/compat.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) -lpthread

# One program, four ways: the checks in run.sh look at what each binds to.
$(COMPAT_DIR)/rw_basic.plain: tests/compat/rw_basic.c tests/compat/compat.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -U_FORTIFY_SOURCE -o $@ $< $(LDFLAGS) -lpthread

$(COMPAT_DIR)/rw_basic.fortify: tests/compat/rw_basic.c tests/compat/compat.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -O2 -U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=2 -o $@ $< $(LDFLAGS) -lpthread

$(COMPAT_DIR)/rw_basic.fob: tests/compat/rw_basic.c tests/compat/compat.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -U_FORTIFY_SOURCE -D_FILE_OFFSET_BITS=64 -o $@ $< $(LDFLAGS) -lpthread

$(COMPAT_DIR)/rw_basic.fortify64: tests/compat/rw_basic.c tests/compat/compat.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -O2 -U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=2 -D_FILE_OFFSET_BITS=64 \
	    -o $@ $< $(LDFLAGS) -lpthread

# libFuzzer harnesses link the modules under test directly (no preload).
FUZZ_FLAGS = -std=gnu11 -g -O1 -D_GNU_SOURCE -Iinclude $(SHIM_I) \
             -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined

$(FUZZ_DIR)/fuzz_segment: tests/fuzz/fuzz_segment.c shim/node/segment.c shim/core/log.c $(SHIM_HDRS) | fuzz-deps
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ tests/fuzz/fuzz_segment.c shim/node/segment.c shim/core/log.c -lpthread

$(FUZZ_DIR)/fuzz_config: tests/fuzz/fuzz_config.c shim/preload/config.c shim/core/log.c $(SHIM_HDRS) | fuzz-deps
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ tests/fuzz/fuzz_config.c shim/preload/config.c shim/core/log.c

# clang and its libFuzzer runtime (installed with apt-get when root)
fuzz-deps:
	@sh tests/fuzz/deps.sh

fuzz: all $(FUZZ_BINS)
	@FUZZ_SECONDS=$(FUZZ_SECONDS) sh tests/fuzz/run.sh $(BUILD)
