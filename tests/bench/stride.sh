#!/bin/sh
# The strided-access bar (docs/benchmarks.md, "Strided access"): two
# ranks write, then read back, their own interleaved 512-byte blocks of
# one tmpfs file (tests/bench/mpistride), plain and under the shim in
# alternate order, one pair of runs a round:
#
#   sh tests/bench/stride.sh BUILD [ROUNDS] [BLOCKS] [BLOCK_BYTES]
#
# Prints each run (us per call of a rank in each phase, wall and CPU
# time, the latter user and system: on a loaded machine wall time also
# counts waiting for a CPU; under the shim
# also the ranks' node acquisitions and strided grants, from their
# RANGESHIM_STATS files), then the medians, the median of the per-round
# ratios shim/plain (with their range), and /proc/loadavg before and after.
set -u
B=${1:-build}
R=${2:-7}
N=${3:-20000}
BS=${4:-512}
LIB=$B/librangeshim.so
P=$B/tests/bench/mpistride
SHM=${BENCH_SHM:-/dev/shm}
f=$SHM/mpistride-$$.dat
st=$(mktemp -d)
shm=${RANGESHIM_SHM:-/rangeshim-bench-stride-$$}
[ -x "$P" ] || { echo "stride.sh: $P not built (make $P)" >&2; exit 2; }
res=$st/runs

# key=N from the stats file of each pid in $1 (comma-separated), summed.
stat_sum() {
	s=0
	for p in $(echo "$1" | tr , ' '); do
		v=$(sed -n "s/.*\"$2\": \([0-9]*\).*/\1/p" "$st/$p.json" 2>/dev/null)
		s=$((s + ${v:-0}))
	done
	echo $s
}

echo "loadavg before: $(cat /proc/loadavg)"
echo "2 ranks x $N blocks of $BS bytes, $SHM; write then read; $R rounds, modes alternating"
: >"$res"
r=0
while [ "$r" -lt "$R" ]; do
	if [ $((r % 2)) = 0 ]; then order="plain shim"; else order="shim plain"; fi
	for m in $order; do
		if [ "$m" = plain ]; then
			o=$("$P" "$f" 2 "$N" "$BS") || echo "  round $r plain: damage or error: $o"
			extra=""
		else
			o=$(RANGESHIM_SHM=$shm RANGESHIM_STATS="$st/%p.json" LD_PRELOAD=$LIB \
				"$P" "$f" 2 "$N" "$BS") || echo "  round $r shim: damage or error: $o"
			pids=$(echo "$o" | sed -n 's/.*pids=\([0-9,]*\).*/\1/p')
			extra="acquires=$(stat_sum "$pids" node_acquires) strided=$(stat_sum "$pids" node_strided) exact=$(stat_sum "$pids" node_exact)"
		fi
		echo "  round $r $m $o $extra"
		echo "$r $m $o $extra" >>"$res"
	done
	r=$((r + 1))
done
python3 - "$res" <<'PY'
import sys, statistics as st, collections as c
v = c.defaultdict(dict)
for l in open(sys.argv[1]):
    f = l.split()
    kv = dict(x.split("=", 1) for x in f[2:] if "=" in x)
    v[f[1]][f[0]] = kv
for ph in ("write_us", "read_us", "write_cpu_us", "read_cpu_us"):
    p = [float(v["plain"][k][ph]) for k in v["plain"]]
    s = [float(v["shim"][k][ph]) for k in v["shim"]]
    rs = sorted(float(v["shim"][k][ph]) / float(v["plain"][k][ph]) for k in v["shim"] if k in v["plain"])
    print("  %-10s plain %6.3f us  shim %6.3f us  shim/plain x%.2f (%.2f-%.2f)" %
          (ph[:-3], st.median(p), st.median(s), st.median(rs), rs[0], rs[-1]))
acq = [int(v["shim"][k]["acquires"]) for k in v["shim"]]
calls = [int(v["shim"][k]["calls"]) for k in v["shim"]]
bad = sum(int(v[m][k]["bad"]) for m in v for k in v[m])
print("  node acquisitions per run: %s of %d calls (max %.3f%%); blocks read back wrong: %d" %
      (",".join(map(str, acq)), calls[0], 100.0 * max(acq) / calls[0], bad))
PY
echo "loadavg after: $(cat /proc/loadavg)"
rm -rf "$st" "$f" "/dev/shm$shm"
