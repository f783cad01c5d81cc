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
trap 'rm -f "/dev/shm/rangeshim-test.$$"' EXIT
status=0
total=0
failed=0
for t in "$build"/tests/test_*; do
	[ -x "$t" ] || continue
	echo "== $t"
	if "$t" --jobs 2 --timeout 120; then
		:
	else
		echo "tests/run.sh: $t exited with status $?" >&2
		status=1
		failed=$((failed + 1))
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
echo "suites: $((total - failed)) passed, $failed failed"
exit $status
