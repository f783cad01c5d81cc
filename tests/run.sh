#!/bin/sh
# Run every Criterion suite of a build; usage: tests/run.sh BUILD [SAN].
# The suites find the library and the helpers through RS_BUILD_DIR, and
# preload the shim only into the helper programs they exec, never into
# the Criterion runner itself.
set -u
build=$1
san=${2:-}
case $san in
asan)
	# The shim is preloaded before the ASan runtime the helpers link.
	export ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0:abort_on_error=1
	export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ;;
tsan)
	export TSAN_OPTIONS=halt_on_error=1:report_signal_unsafe=0 ;;
esac
# A node lock table of our own, so that tests neither meet a user's
# segment nor leave theirs behind.
export RANGESHIM_SHM="/rangeshim-test.$$"
status=0
total=0
failed=0
# Each suite's output is also kept, so that the last lines of the run (all
# that a CI page may show) name the failed tests and their messages.
logdir=$(mktemp -d)
trap 'rm -f "/dev/shm/rangeshim-test.$$"; rm -rf "$logdir"' EXIT
failures=""
# Criterion applies the smaller of --timeout and a test's own .timeout, so
# this is only the backstop for tests that set none: it stays above every
# test's own (sanitizer builds run their tests 3 times longer, RS_SLOW).
backstop=400
[ -n "$san" ] && backstop=720
for t in "$build"/tests/test_*; do
	[ -x "$t" ] || continue
	echo "== $t"
	log="$logdir/$(basename "$t")"
	rc=0
	{ "$t" --jobs 2 --timeout "$backstop" 2>&1 || echo $? >"$log.rc"; } | tee "$log"
	[ -f "$log.rc" ] && rc=$(cat "$log.rc")
	if [ "$rc" != 0 ]; then
		echo "tests/run.sh: $t exited with status $rc" >&2
		status=1
		failed=$((failed + 1))
		failures="$failures $log"
	fi
	total=$((total + 1))
done
# The fast path's cost in instructions (not time: repeatable on a noisy
# machine); sanitizer builds count their own instrumentation, so skip them.
if [ -z "$san" ]; then
	echo "== fast-path instruction count (callgrind)"
	if make --no-print-directory -s BUILD="$build" "$build/tests/bench/fastpath" &&
	    sh tests/callgrind.sh "$build"; then
		:
	else
		status=1
		failed=$((failed + 1))
	fi
	total=$((total + 1))
fi
if [ "$total" = 0 ]; then
	echo "tests/run.sh: no test suites in $build/tests" >&2
	exit 1
fi
for log in $failures; do
	echo "== failed in $(basename "$log"):"
	grep -E '^\[FAIL\]|[Cc]rash|[Tt]imed out' "$log"
	grep -E '^\[----\]' "$log" | head -n 12
done
echo "suites: $((total - failed)) passed, $failed failed"
exit $status
