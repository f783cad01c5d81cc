#!/bin/sh
# Instructions the shim adds to one intercepted data call on a single
# thread, counted by callgrind (repeatable, unlike time), against the same
# program without the shim.  Usage:
#   tests/callgrind.sh BUILD [LIMIT [STATS_LIMIT]]
# Prints one row per call and configuration, and exits 1 if a row adds
# more than its ceiling, or if RANGESHIM_STATS costs more than STATS_LIMIT
# (default 20) on top of the same call without it (issue 10).  Each row's
# ceiling is the figure measured when it was set, plus 5%, so that no row
# gets worse unnoticed; LIMIT (default 150, the bar of BRIEF §2) is what
# every row should meet, and rows over it say so on every run.
# docs/benchmarks.md explains what each row pays for.  The rows marked
# "a second thread" run the same loop with another thread alive (asleep),
# so that the range and offset locks a single-threaded process leaves out
# (iolock.h, rs_solo) stay measured.
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

# count MODE [ENV...]: prints "instructions calls"; MODE is the program's
# mode word, and "thread" after it if a second thread is to be alive.
count() {
	mode=$1; shift
	# shellcheck disable=SC2086 # $mode is one or two words
	env RANGESHIM_SHM=/rangeshim-callgrind.$$ "$@" valgrind --tool=callgrind --collect-atstart=no \
	    --toggle-collect=io_loop --callgrind-out-file="$dir/out" \
	    "$prog" /dev/shm/rangeshim-fastpath.$$ $n $mode >"$dir/log" 2>&1 ||
	    { cat "$dir/log" >&2; exit 2; }
	ir=$(awk '/^summary:|^totals:/ { print $2; exit }' "$dir/out")
	calls=$(sed -n 's/^calls=//p' "$dir/log")
	echo "$ir $calls"
}

status=0
# row LABEL CEILING MODE [ENV...]: one line, checked against CEILING;
# sets $per.
row() {
	label=$1; ceiling=$2; mode=$3; shift 3
	plain=$(count "$mode")
	base=${plain% *}
	shim=$(count "$mode" LD_PRELOAD="$lib" "$@")
	calls=${shim#* }
	per=$(( (${shim% *} - base) / calls ))
	if [ "$per" -gt "$ceiling" ]; then
		verdict="OVER the ceiling of $ceiling"; status=1
	elif [ "$per" -gt "$limit" ]; then
		verdict="within its ceiling of $ceiling, NOT within the bar of $limit"
	else
		verdict=ok
	fi
	printf 'fastpath: %4d instructions added per call: %-52s (plain %d per call in user space): %s\n' \
	    "$per" "$label" "$((base / calls))" "$verdict"
}

row "pwrite/pread" 111 pwrite
fast=$per
row "pwrite/pread, RANGESHIM_SCOPE=process" 87 pwrite RANGESHIM_SCOPE=process
row "read/write at the file offset" 119 rw
row "pwritev/preadv, 2 iovecs" 140 vec
row "writev at the file offset, 2 iovecs" 144 writev
row "pwritev2/preadv2, 2 iovecs, RWF_HIPRI" 151 vec2
row "write on an O_APPEND descriptor" 152 append
row "pwrite/pread, a second thread" 130 "pwrite thread"
row "read/write at the file offset, a second thread" 147 "rw thread"
row "pwritev/preadv, 2 iovecs, a second thread" 160 "vec thread"
row "writev at the file offset, a second thread" 183 "writev thread"
row "pwrite/pread, RANGESHIM_STATS set" 118 pwrite RANGESHIM_STATS="$dir/stats.json"
extra=$((per - fast))
if [ "$extra" -le "$stats_limit" ]; then
	echo "fastpath: RANGESHIM_STATS adds $extra instructions per pwrite/pread: ok"
else
	echo "fastpath: RANGESHIM_STATS adds $extra instructions per pwrite/pread: OVER the limit of $stats_limit"
	status=1
fi
exit $status
