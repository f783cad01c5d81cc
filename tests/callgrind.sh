#!/bin/sh
# Instructions the shim adds to one intercepted data call on a single
# thread, counted by callgrind (repeatable, unlike time), against the same
# program without the shim.  Usage:
#   tests/callgrind.sh BUILD [LIMIT [STATS_LIMIT]]
# Prints one row per call and configuration, and exits 1 if any row adds
# more than LIMIT instructions per call (default 150, BRIEF §2), or if
# RANGESHIM_STATS costs more than STATS_LIMIT (default 20) on top of the
# same call without it (issue 10).
set -eu
build=$1
limit=${2:-150}
stats_limit=${3:-20}
prog=$build/tests/bench/fastpath
lib=$build/librangeshim.so
n=20000
command -v valgrind >/dev/null 2>&1 || { echo "callgrind.sh: valgrind is not installed" >&2; exit 2; }
dir=$(mktemp -d)
trap 'rm -rf "$dir" /dev/shm/rangeshim-callgrind.$$ /dev/shm/rangeshim-fastpath.$$' EXIT

# count MODE [ENV...]: prints "instructions calls"
count() {
	mode=$1; shift
	env RANGESHIM_SHM=/rangeshim-callgrind.$$ "$@" valgrind --tool=callgrind --collect-atstart=no \
	    --toggle-collect=io_loop --callgrind-out-file="$dir/out" \
	    "$prog" /dev/shm/rangeshim-fastpath.$$ $n "$mode" >"$dir/log" 2>&1 ||
	    { cat "$dir/log" >&2; exit 2; }
	ir=$(awk '/^summary:|^totals:/ { print $2; exit }' "$dir/out")
	calls=$(sed -n 's/^calls=//p' "$dir/log")
	echo "$ir $calls"
}

status=0
# row LABEL MODE [ENV...]: one line, checked against the limit; sets $per.
row() {
	label=$1; mode=$2; shift 2
	plain=$(count "$mode")
	base=${plain% *}
	shim=$(count "$mode" LD_PRELOAD="$lib" "$@")
	calls=${shim#* }
	per=$(( (${shim% *} - base) / calls ))
	verdict=ok
	[ "$per" -le "$limit" ] || { verdict="OVER the limit of $limit"; status=1; }
	printf 'fastpath: %4d instructions added per call: %-44s (plain %d per call in user space): %s\n' \
	    "$per" "$label" "$((base / calls))" "$verdict"
}

row "pwrite/pread" pwrite
fast=$per
row "pwrite/pread, RANGESHIM_SCOPE=process" pwrite RANGESHIM_SCOPE=process
row "read/write at the file offset" rw
row "pwritev/preadv, 2 iovecs" vec
row "writev at the file offset, 2 iovecs" writev
row "write on an O_APPEND descriptor" append
row "pwrite/pread, RANGESHIM_STATS set" pwrite RANGESHIM_STATS="$dir/stats.json"
extra=$((per - fast))
if [ "$extra" -le "$stats_limit" ]; then
	echo "fastpath: RANGESHIM_STATS adds $extra instructions per pwrite/pread: ok"
else
	echo "fastpath: RANGESHIM_STATS adds $extra instructions per pwrite/pread: OVER the limit of $stats_limit"
	status=1
fi
exit $status
