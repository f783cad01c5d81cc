#!/bin/sh
# What `make fuzz` needs: clang with its libFuzzer runtime.  As root we
# install it with apt-get; otherwise we say what to run.
set -eu
cc=${FUZZ_CC:-clang}
probe() {
	printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n);\nint LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' |
	    "$cc" -x c -fsanitize=fuzzer,address -o /tmp/rangeshim-fuzz-probe.$$ - >/dev/null 2>&1
	r=$?
	rm -f /tmp/rangeshim-fuzz-probe.$$
	return $r
}
command -v "$cc" >/dev/null 2>&1 && probe && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "tests/fuzz/deps.sh: installing clang and libFuzzer" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	# libclang-rt-dev is the libFuzzer runtime of Debian's default clang
	apt-get install -y -qq clang libclang-rt-dev >/dev/null 2>&1 ||
	    apt-get install -y -qq clang >/dev/null
	probe && exit 0
fi
echo "tests/fuzz/deps.sh: $cc cannot build libFuzzer targets; install with:" >&2
echo "    sudo apt-get install -y clang libclang-rt-dev" >&2
exit 1
