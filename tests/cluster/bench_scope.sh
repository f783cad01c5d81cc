#!/bin/sh
# The cluster-scope table of make bench-cluster (issue 11), on two mounts
# of one GlusterFS volume as two nodes.  Usage: bench_scope.sh BUILD A B.
# Modes, interleaved in every round: unlocked (no shim), ofd (an OFD lock
# through the file system around every call, ROMIO's atomic mode), node
# (the shim, one node table per node: no protection across nodes), and
# cluster (RANGESHIM_SCOPE=cluster, one table and agent per node).
# Prints every round's figures, then the medians, as Markdown; then the
# revocation of an idle cached grant (REVOKES hand-overs, default 40).
# ROUNDS=0 measures the revocation alone; OFD_RW=0 leaves out the ofd
# mode's reader/writer race (bench_ceph.sh: it hangs ceph-fuse).
set -u
build=$1 A=$2 B=$3
rounds=${ROUNDS:-3}
revokes=${REVOKES:-40}
p=$build/tests/helpers/clu_probe
lib=$(cd "$build" && pwd)/librangeshim.so
tmp=$(mktemp -d)
shmA=/rs-bench-A.$$ shmB=/rs-bench-B.$$
MB=16
modes="unlocked ofd node cluster"

envof() { # MODE SHM
	case $1 in
	unlocked|ofd) echo "RS_BENCH=1" ;;
	node) echo "LD_PRELOAD=$lib RANGESHIM_SHM=$2" ;;
	cluster) echo "LD_PRELOAD=$lib RANGESHIM_SHM=$2 RANGESHIM_SCOPE=cluster" ;;
	esac
}
field() { sed -n "s/.*$2=\([0-9.]*\).*/\1/p" "$1"; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# disjoint MODE: A writes [0,16M), B [16M,32M) of one file in 4 KiB
# pwrites, at the same time; MB/s of both (32 MiB / the slower one's time).
disjoint() {
	f=dj.$$; extra=""; [ "$1" = ofd ] && extra=ofd
	rm -f "$A/$f"
	# shellcheck disable=SC2046
	env $(envof "$1" $shmA) "$p" region "$A/$f" 0 $((MB << 20)) 4096 $extra >"$tmp/a" &
	# shellcheck disable=SC2046
	env $(envof "$1" $shmB) "$p" region "$B/$f" $((MB << 20)) $((MB << 20)) 4096 $extra >"$tmp/b"
	wait
	rm -f "$A/$f"
	awk -v a="$(field "$tmp/a" secs)" -v b="$(field "$tmp/b" secs)" -v mb=$MB \
	    'BEGIN { t = a > b ? a : b; printf "%.1f", 2 * mb / t }'
}

# rw MODE: a 1 MiB writer on A, a reader on B, 3 s: "reads torn writes".
rw() {
	f=rw.$$; lock=""
	rm -f "$A/$f"
	# ofd mode: xmount's --lock is the lock-per-call rig for this one
	if [ "$1" = ofd ] && [ "${OFD_RW:-1}" = 0 ]; then
		echo "- - -"
	elif [ "$1" = ofd ]; then
		"$build/cluster/xmount" fill "$A/$f" >/dev/null
		"$build/cluster/xmount" write "$A/$f" --seconds 3 --lock >"$tmp/w" &
		"$build/cluster/xmount" read "$B/$f" --seconds 3 --lock >"$tmp/r"
		wait
		echo "$(field "$tmp/r" reads) $(field "$tmp/r" torn) $(field "$tmp/r" changes)"
	else
		# shellcheck disable=SC2046
		env $(envof "$1" $shmA) "$p" write "$A/$f" 3 >"$tmp/w" &
		# shellcheck disable=SC2046
		env $(envof "$1" $shmB) "$p" read "$B/$f" 3 >"$tmp/r"
		wait
		echo "$(field "$tmp/r" reads) $(field "$tmp/r" torn) $(field "$tmp/w" writes)"
	fi
	rm -f "$A/$f"
}

# contended MODE: one writer per node on the same 64 KiB for 5 s:
# "writes/s A-share%".
contended() {
	f=ct.$$
	[ "$1" = ofd ] && { echo "- -"; return; }
	rm -f "$A/$f"
	# shellcheck disable=SC2046
	env $(envof "$1" $shmA) "$p" hammer "$A/$f" 5 65536 >"$tmp/a" &
	# shellcheck disable=SC2046
	env $(envof "$1" $shmB) "$p" hammer "$B/$f" 5 65536 >"$tmp/b"
	wait
	rm -f "$A/$f"
	awk -v a="$(field "$tmp/a" writes)" -v b="$(field "$tmp/b" writes)" \
	    'BEGIN { printf "%.0f %.0f", (a + b) / 5, 100 * a / (a + b) }'
}

# revoke: each node pwrites 4 KiB at 0 every 200 ms, node B 100 ms out of
# phase with node A, so that every write takes the grant the other node
# has held idle for about 100 ms.  REVOKES/2 + 1 writes each; the first of
# each node (it starts the node's agent) is left out.  Prints the times
# of the hand-overs in us, one a line.
revoke() {
	f=rv.$$ n=$((revokes / 2 + 1))
	rm -f "$A/$f"
	: >"$A/$f"
	# shellcheck disable=SC2046
	env $(envof cluster $shmA) "$p" timed "$A/$f" $n 200 >"$tmp/ta" &
	sleep 0.1
	# shellcheck disable=SC2046
	env $(envof cluster $shmB) "$p" timed "$B/$f" $n 200 >"$tmp/tb"
	wait
	rm -f "$A/$f"
	for t in ta tb; do
		grep -q verdict=PASS "$tmp/$t" || { echo "revoke: $(cat "$tmp/$t")" >&2; return 1; }
		sed -n 's/.*us=\([0-9,]*\).*/\1/p' "$tmp/$t" | tr ',' '\n' | tail -n +2
	done
}

[ "$rounds" -gt 0 ] && {
echo "#### Cluster scope: disjoint writers, reader/writer, contended writers"
echo
echo "Rounds (modes interleaved in each):"
echo
for r in $(seq "$rounds"); do
	for m in $modes; do
		d=$(disjoint $m); w=$(rw $m); c=$(contended $m)
		echo "- round $r, $m: disjoint ${d} MB/s; reader/writer reads,torn,writes(changes for ofd) = $w; contended writes/s,A% = $c"
		echo "$d" >>"$tmp/dj.$m"
		echo "$w" >>"$tmp/rw.$m"
		echo "$c" >>"$tmp/ct.$m"
	done
done
echo
echo "| mode | disjoint writers, MB/s (median) | x unlocked | reader/writer: reads, torn (all rounds) | contended: writes/s, node A share (median) |"
echo "|---|---|---|---|---|"
u=$(median <"$tmp/dj.unlocked")
for m in $modes; do
	d=$(median <"$tmp/dj.$m")
	reads=$(awk '{print $1}' "$tmp/rw.$m" | median)
	torn=$(awk '{s += $2} END {print s}' "$tmp/rw.$m")
	cw=$(awk '{print $1}' "$tmp/ct.$m" | median)
	cs=$(awk '{print $2}' "$tmp/ct.$m" | median)
	echo "| $m | $d | $(awk -v a="$d" -v b="$u" 'BEGIN { printf "%.2f", a / b }') | $reads, $torn torn | $cw, $cs% |"
done
echo
}
echo "#### Cluster scope: revocation of an idle cached grant"
echo
revoke >"$tmp/rv" || exit 1
echo "$(wc -l <"$tmp/rv") hand-overs (4 KiB pwrite at 0, each node every 200 ms, 100 ms apart):" \
     "median $(median <"$tmp/rv" | awk '{printf "%.1f", $1 / 1000}') ms," \
     "max $(sort -g "$tmp/rv" | tail -1 | awk '{printf "%.1f", $1 / 1000}') ms" \
     "(issue 11: median <= 30 ms, max <= 100 ms)"
echo "- times, ms: $(awk '{printf "%s%.1f", (NR > 1 ? ", " : ""), $1 / 1000}' "$tmp/rv")"
# The agents hold descriptions on the mounts: wait for them to exit.
for i in $(seq 50); do
	pgrep -f "rangeshim agent --shm ($shmA|$shmB)\$" >/dev/null || break
	sleep 0.2
done
rm -rf "$tmp" "/dev/shm$shmA" "/dev/shm$shmB"
