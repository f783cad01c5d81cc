#!/bin/sh
# Instructions the shim adds to one intercepted pwrite/pread on a single
# thread, counted by callgrind (repeatable, unlike time).  Usage:
#   tests/callgrind.sh BUILD [LIMIT]
# Prints "fastpath: N instructions added per call" for each configuration
# and exits 1 if any exceeds LIMIT (default 150, BRIEF §2).
set -eu
build=$1
limit=${2:-150}
prog=$build/tests/bench/fastpath
n=20000
command -v valgrind >/dev/null 2>&1 || { echo "callgrind.sh: valgrind is not installed" >&2; exit 2; }
dir=$(mktemp -d)
trap 'rm -rf "$dir" /dev/shm/rangeshim-callgrind.$$' EXIT

count() { # label, env...
	label=$1; shift
	env RANGESHIM_SHM=/rangeshim-callgrind.$$ "$@" valgrind --tool=callgrind --collect-atstart=no \
	    --toggle-collect=io_loop --callgrind-out-file="$dir/out" \
	    "$prog" /dev/shm/rangeshim-fastpath.$$ $n >"$dir/log" 2>&1 ||
	    { cat "$dir/log" >&2; exit 2; }
	awk '/^summary:|^totals:/ { print $2; exit }' "$dir/out"
}

base=$(count plain)
status=0
for cfg in "default" "RANGESHIM_SCOPE=process"; do
	if [ "$cfg" = default ]; then
		ir=$(count shim LD_PRELOAD="$build/librangeshim.so")
	else
		ir=$(count shim LD_PRELOAD="$build/librangeshim.so" "$cfg")
	fi
	per=$(( (ir - base) / (2 * n) ))
	verdict=ok
	[ "$per" -le "$limit" ] || { verdict="OVER the limit of $limit"; status=1; }
	echo "fastpath: $per instructions added per pwrite/pread ($cfg; plain $((base / (2 * n))) per call in user space): $verdict"
done
exit $status
