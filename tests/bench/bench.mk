# Benchmarks (issue 4).  The Makefile ends with
#     include tests/bench/bench.mk
# and this adds:
#   make bench        every table in one run, then the scale table
#                     (tests/bench/scale.sh); FULL=1 for the long version
#                     (docs/benchmarks.md)
#   make bench-fio    examples/fio/*.fio without and with the shim
#   make bench-plot   PNG plots of the Lustre and GFS2 tables in docs/img/
# It uses BUILD, CC, CFLAGS and LDFLAGS from the Makefile.  Nothing here is
# part of `make test`: benchmarks measure, tests check.

FULL ?= 0
BENCH_BINS = $(BUILD)/tests/bench/iobench $(BUILD)/tests/bench/fastpath $(BUILD)/tests/bench/procrand \
	     $(BUILD)/tests/bench/manyfiles $(BUILD)/tests/bench/idlegrants $(BUILD)/tests/bench/iovec \
	     $(BUILD)/tests/bench/mpistride $(BUILD)/tests/bench/attached

.PHONY: bench bench-fio bench-plot

# iobench links the range lock itself for its lock microbenchmark, so it
# needs this explicit rule rather than the Makefile's one-file pattern rule
# (an explicit rule wins).
# (A debug build's lock checks need lockorder.c and log.c.)
$(BUILD)/tests/bench/iobench: tests/bench/iobench.c shim/core/rangelock.c shim/core/rangelock_fast.h \
		shim/core/futex.h include/rangeshim/rangelock.h shim/core/lockorder.c shim/core/log.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ tests/bench/iobench.c shim/core/rangelock.c shim/core/lockorder.c \
	    shim/core/log.c $(LDFLAGS) -lpthread

# $(call bench_need,COMMAND,DEBIAN-PACKAGE): install the package when we are
# root and have apt-get; otherwise say what to run, and stop.
bench_need = command -v $(1) >/dev/null 2>&1 || { \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "$@: installing $(2)"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(2) >/dev/null 2>&1 || \
		{ apt-get update -q >/dev/null && \
		  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(2) >/dev/null; }; \
	else \
		echo "$@: $(1) is not installed; run: sudo apt-get install $(2)" >&2; exit 1; \
	fi; }

bench: all $(BENCH_BINS)
	@FULL=$(FULL) sh tests/bench/bench.sh $(BUILD)
	@sh tests/bench/scale.sh $(BUILD)

bench-fio: all
	@$(call bench_need,fio,fio)
	@sh tests/bench/fio.sh $(BUILD)

bench-plot: all $(BENCH_BINS)
	@$(call bench_need,gnuplot,gnuplot-nox)
	@sh tests/bench/plot.sh $(BUILD) docs/img
