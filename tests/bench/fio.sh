#!/bin/sh
# fio.sh BUILD: what `make bench-fio` runs.  Each job file in examples/fio/
# runs under fio without the shim (unlocked), with it (rangeshim) and with
# RANGESHIM_LOCK=mutex, interleaved for ROUNDS rounds after one untimed
# warm-up, and the best rounds are printed side by side with their ratio
# to unlocked (as in `make bench`: other work on the machine only ever
# slows a run, so the best round is the least disturbed).  fio is the
# client users trust; its numbers should agree in shape with `make bench`.
set -eu

if [ $# -ne 1 ] || [ ! -d "$1" ]; then
	echo "usage: sh tests/bench/fio.sh BUILD" >&2
	exit 2
fi
B=$(cd "$1" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
LIB=$B/librangeshim.so
ROUNDS=${ROUNDS:-3}
command -v fio >/dev/null 2>&1 || { echo "fio.sh: fio is not installed (apt-get install fio)" >&2; exit 2; }
[ -f "$LIB" ] || { echo "fio.sh: $LIB not found; run 'make all'" >&2; exit 2; }

# The job files write /tmp/rangeshim-fio-shared (their directory= and
# filename=); it stays between runs so each run overwrites allocated blocks.
FILE=/tmp/rangeshim-fio-shared
work=$(mktemp -d)
trap 'rm -rf "$work"; rm -f "$FILE"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# run MODE JOB: read and write bandwidth in MB/s from fio's terse v3 line
# (field 7: read KiB/s, field 48: write KiB/s; group_reporting sums the
# jobs of a group, and the lines of several groups are added up here).
run() {
	mode=$1 job=$2
	case $mode in
	unlocked)  set -- env -u LD_PRELOAD ;;
	rangeshim) set -- env LD_PRELOAD="$LIB" ;;
	mutex)     set -- env LD_PRELOAD="$LIB" RANGESHIM_LOCK=mutex ;;
	esac
	"$@" fio --output-format=terse --terse-version=3 "$job" >"$work/out" 2>"$work/err" || {
		echo "fio.sh: fio failed ($mode, $job):" >&2
		cat "$work/err" >&2
		return 1
	}
	awk -F';' '$1 == 3 { r += $7; w += $48 }
		END { printf "%.1f %.1f\n", r * 1.024 / 1000, w * 1.024 / 1000 }' "$work/out"
}

best() { sort -n | tail -n 1; }

echo "fio $(fio --version | sed 's/^fio-//'): examples/fio/*.fio without and with the shim (${LIB#"$SRC"/})"
echo "MB/s (10^6 bytes), best of $ROUNDS rounds after one warm-up; (x): ratio to unlocked"
echo "file: $FILE ($(df -PT /tmp | awk 'NR == 2 { print $2 }')), $(nproc) cores, Linux $(uname -r)"
printf '\n%-16s %-6s %10s %20s %20s\n' job "" unlocked rangeshim mutex
status=0
for job in "$SRC"/examples/fio/*.fio; do
	name=$(basename "$job" .fio)
	run unlocked "$job" >/dev/null || { status=1; continue; }
	: >"$work/unlocked"; : >"$work/rangeshim"; : >"$work/mutex"
	for r in $(seq "$ROUNDS"); do
		# Rotate the order so that drift does not favour one mode.
		case $(( r % 3 )) in
		1) order="unlocked rangeshim mutex" ;;
		2) order="rangeshim mutex unlocked" ;;
		0) order="mutex unlocked rangeshim" ;;
		esac
		for m in $order; do
			run "$m" "$job" >>"$work/$m" || status=1
		done
	done
	for col in 1 2; do
		if [ "$col" = 1 ]; then what="read"; else what="write"; fi
		u=$(cut -d' ' -f$col "$work/unlocked" | best)
		[ "$(awk -v u="$u" 'BEGIN { print (u > 0) }')" = 1 ] || continue
		rs=$(cut -d' ' -f$col "$work/rangeshim" | best)
		mx=$(cut -d' ' -f$col "$work/mutex" | best)
		awk -v n="$name" -v w="$what" -v u="$u" -v r="$rs" -v m="$mx" 'BEGIN {
			printf "%-16s %-6s %10.1f %12.1f (%4.2fx) %12.1f (%4.2fx)\n", n, w, u, r, r / u, m, m / u }'
	done
done
exit $status
