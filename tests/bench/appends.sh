#!/bin/sh
# The append rows of issue 9, side by side with another build of the
# library (docs/benchmarks.md, "Appends"):
#
#   sh tests/bench/appends.sh BUILD [BEFORE_LIB] [ROUNDS] [WORKLOAD]
#
# WORKLOAD is threads (iobench contended --work=append, 4 and 2 threads,
# one round per run, the two libraries alternating), threads-fd (the same
# with --work=append-fd: every thread writes through one shared O_APPEND
# descriptor), same (--work=same: every thread pwrites one 4 KiB block),
# or a procrand
# workload (append, ownw, ...; 4 and 2 processes, every mode in every
# round, the order rotated).  Prints each run, then for every mode the
# median time and the median of the ratios to unlocked taken within a
# round (with their range), and the number of runs that found damage.
set -u
B=${1:-build}
BEFORE=${2:-}
R=${3:-9}
W=${4:-threads}
LIB=$B/librangeshim.so
SHM=${BENCH_SHM:-/dev/shm}

summarise() {
	python3 -c '
import sys, statistics as st, collections as c
us = c.defaultdict(dict); bad = c.Counter()
for l in sys.stdin:
    f = l.split()
    if len(f) < 4: continue
    key, mode, v = f[0], f[1], float(f[2])
    us[mode][key] = v
    bad[mode] += int(f[3])
for m in us:
    rs = sorted(us[m][k] / us["unlocked"][k] for k in us[m] if k in us["unlocked"])
    print("  %-16s %8.2f us  x%.2f (%.2f-%.2f)  damage %d" % (m, st.median(us[m].values()),
          st.median(rs), rs[0], rs[-1], bad[m]))
'
}

case $W in
threads) work=append; title="100-byte O_APPEND lines" ;;
threads-fd) work=append-fd; title="100-byte O_APPEND lines, one shared descriptor" ;;
same) work=same; title="pwrite of one 4 KiB block" ;;
*) work= ;;
esac
if [ -n "$work" ]; then
	ib=$B/tests/bench/iobench
	for n in 4 2; do
		echo "== $n threads, $title ($R rounds)"
		r=0
		while [ "$r" -lt "$R" ]; do
			for tag in after ${BEFORE:+before}; do
				lib=$LIB
				[ "$tag" = before ] && lib=$BEFORE
				"$ib" contended --tasks=$n --secs=0.5 --rounds=1 --dir="$SHM" \
				    --work=$work --lib="$lib" 2>&1 | awk -v t="$tag" -v r="$r" -v w="$work" '
					# The row: ... THREADS u1 us u2 us (x) u3 us (x) u4 us (x)
					/ us \(/ { u[1] = $(NF - 10); u[2] = $(NF - 8); u[3] = $(NF - 5); u[4] = $(NF - 2) }
					$1 == w && $2 == "unlocked" { d[1] = $3; d[2] = $5; d[3] = $7; d[4] = $9 }
					END { if (t == "after") print r, "unlocked", u[1], d[1];
					      print r, "ofd-" t, u[2], d[2]; print r, "rangeshim-" t, u[3], d[3];
					      print r, "rs-process-" t, u[4], d[4] }'
			done
			r=$((r + 1))
		done | tee /dev/stderr | summarise
	done
	exit 0
fi

pr=$B/tests/bench/procrand
f=$SHM/appends-$$.dat
shm=/appends-$$
trap 'rm -f "$f" "/dev/shm$shm"' EXIT
modes="unlocked ofd rangeshim rs-process${BEFORE:+ before before-process}"
nm=$(echo $modes | wc -w)
for n in 4 2; do
	echo "== $n processes, procrand $W ($R rounds)"
	r=0
	while [ "$r" -lt "$R" ]; do
		set -- $modes
		k=0
		while [ $k -lt $((r % nm)) ]; do m=$1; shift; set -- "$@" "$m"; k=$((k + 1)); done
		for m in "$@"; do
			case $m in
			unlocked) o=$("$pr" "$f" $n 20000 "$W") ;;
			ofd) o=$("$pr" "$f" $n 20000 "$W" ofd) ;;
			rangeshim) o=$(RANGESHIM_SHM=$shm LD_PRELOAD=$LIB "$pr" "$f" $n 20000 "$W") ;;
			rs-process) o=$(RANGESHIM_SCOPE=process LD_PRELOAD=$LIB "$pr" "$f" $n 20000 "$W" 2>/dev/null) ;;
			before) o=$(RANGESHIM_SHM=$shm LD_PRELOAD=$BEFORE "$pr" "$f" $n 20000 "$W") ;;
			before-process) o=$(RANGESHIM_SCOPE=process LD_PRELOAD=$BEFORE "$pr" "$f" $n 20000 "$W" 2>/dev/null) ;;
			esac
			# "T us/call ... bad=B" or "... torn=B"
			echo "$r $m $(echo "$o" | awk '{ d = 0; for (i = 2; i <= NF; i++) if ($i ~ /^(bad|torn)=/) { split($i, kv, "="); d += kv[2] } print $1, d }')"
		done
		r=$((r + 1))
	done | tee /dev/stderr | summarise
done
