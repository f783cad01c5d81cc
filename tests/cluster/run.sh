#!/bin/sh
# The cluster tier (make test-cluster): two FUSE mounts of one GlusterFS
# volume on this machine act as two nodes with a real lock manager between
# them (the brick's features/locks translator).  Usage: run.sh BUILD.
#
# What it checks, each with its control:
#   1. a 1 MiB writer on node A and a reader on node B tear without the shim
#      (buffered and O_DIRECT): the rig can see tears;
#   2. the same with an OFD lock through the file system around every call
#      (ROMIO's way): no tears, so the lock manager orders data here;
#   3. node scope, one RANGESHIM_SHM table per node, still tears: node scope
#      does not reach across nodes (what cluster scope is for);
#   3b. cluster scope (RANGESHIM_SCOPE=cluster, one table and agent per
#      node; fuse.glusterfs is trusted): no tears, buffered and O_DIRECT;
#   3c. the same while node A's table is removed and made again under its
#      writer (control: 3);
#   4. OFD locks through A and B conflict as on a cluster (ofdprobe check);
#   5. test_clusterlock's and test_cluster_adv's cross-node cases on the
#      two mounts;
#   6. a write under the process's own whole-file fcntl lock and flock, in
#      cluster scope, returns;
#   7. fresh data: a reader on another node sees each new generation in
#      cluster scope; control: without the shim, a mount with FUSE's page
#      cache on keeps old data.
# Every race must also have seen the writer (changes > 0): a reader that
# never saw a write proves nothing either way.
#
# Where FUSE or mounting is not allowed it prints "SKIP: reason", exits 0.
set -u
build=$1
here=$(dirname "$0")
. "$here/gluster.sh"

x=$build/cluster/xmount
lib=$(cd "$build" && pwd)/librangeshim.so
secs=${CLUSTER_SECONDS:-2}
fails=0
checks=0

trap 'clu_teardown' EXIT
trap 'exit 130' INT TERM

clu_prepare
case $? in
0) ;;
2) trap - EXIT; exit 0 ;;
*) exit 1 ;;
esac
clu_setup || exit 1

fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
pass() { echo "ok: $*"; }

# race NAME WRITER-ENV READER-ENV XMOUNT-FLAGS: writer on A, reader on B;
# sets torn and changes.
race() {
	name=$1 wenv=$2 renv=$3 flags=$4
	"$x" fill "$CLU_A/$name" || return 1
	# shellcheck disable=SC2086
	env $wenv "$x" write "$CLU_A/$name" --seconds "$secs" $flags >/dev/null &
	wpid=$!
	# shellcheck disable=SC2086
	out=$(env $renv "$x" read "$CLU_B/$name" --seconds "$secs" $flags)
	rrc=$?
	wait $wpid
	wrc=$?
	rm -f "$CLU_A/$name"
	[ $rrc = 0 ] && [ $wrc = 0 ] || { echo "xmount failed: reader $rrc writer $wrc"; return 1; }
	torn=$(echo "$out" | sed -n 's/.*torn=\([0-9]*\).*/\1/p')
	changes=$(echo "$out" | sed -n 's/.*changes=\([0-9]*\).*/\1/p')
	echo "   $out"
}

# expect_torn WHAT WRITER-ENV READER-ENV FLAGS: up to 3 runs until one tears.
expect_torn() {
	checks=$((checks + 1))
	for try in 1 2 3; do
		race "t$checks" "$2" "$3" "$4" || { fail "$1: rig error"; return; }
		if [ "$changes" -gt 0 ] && [ "$torn" -gt 0 ]; then
			pass "$1 tears (run $try)"
			return
		fi
	done
	fail "$1: no torn read in 3 runs (changes=$changes); the control cannot see tears"
}

expect_clean() {
	checks=$((checks + 1))
	race "c$checks" "$2" "$3" "$4" || { fail "$1: rig error"; return; }
	if [ "$changes" = 0 ]; then
		fail "$1: the reader never saw a write, so torn=0 proves nothing"
	elif [ "$torn" != 0 ]; then
		fail "$1: $torn torn reads"
	else
		pass "$1: no torn read in $changes changes"
	fi
}

shmA=/rs-cluster-A.$$
shmB=/rs-cluster-B.$$
nodeA="LD_PRELOAD=$lib RANGESHIM_SHM=$shmA"
nodeB="LD_PRELOAD=$lib RANGESHIM_SHM=$shmB"
for mode in "" --direct; do
	m=${mode:-buffered}; m=${m#--}
	expect_torn "control, no shim, $m" "" "" "$mode"
	expect_clean "OFD lock per call, $m" "" "" "$mode --lock"
	expect_torn "node scope, one table per node, $m (does not protect across nodes)" \
		"$nodeA" "$nodeB" "$mode"
	expect_clean "cluster scope, one table and agent per node, $m" \
		"$nodeA RANGESHIM_SCOPE=cluster" "$nodeB RANGESHIM_SCOPE=cluster" "$mode"
done
# A's table is removed while A's writer and agent run, and a second writer
# of A makes a new table under the same name (docs/design.md (i), "One
# table, one agent"): B's reader must not tear (the old agent served the
# new table and drained only the old one: 154 of 986 reads torn here).
# The control is node scope's tearing above: the same writers and reader.
shmR=/rs-cluster-R.$$
replaced() {
	name=$1 flags=$2
	envR="LD_PRELOAD=$lib RANGESHIM_SHM=$shmR RANGESHIM_SCOPE=cluster"
	"$x" fill "$CLU_A/$name" || return 1
	# shellcheck disable=SC2086
	env $envR "$x" write "$CLU_A/$name" --seconds "$secs" $flags >/dev/null &
	w1=$!
	# shellcheck disable=SC2086
	env $nodeB RANGESHIM_SCOPE=cluster "$x" read "$CLU_B/$name" --seconds $((secs + 1)) \
		$flags >"$CLU_DIR/replaced.out" &
	rp=$!
	sleep 0.5
	rm -f "/dev/shm$shmR"
	# shellcheck disable=SC2086
	env $envR "$x" write "$CLU_A/$name" --seconds "$secs" $flags >/dev/null &
	w2=$!
	wait $w1; w1rc=$?
	wait $w2; w2rc=$?
	wait $rp; rrc=$?
	rm -f "$CLU_A/$name"
	[ $rrc = 0 ] && [ $w1rc = 0 ] && [ $w2rc = 0 ] ||
		{ echo "xmount failed: reader $rrc writers $w1rc $w2rc"; return 1; }
	out=$(cat "$CLU_DIR/replaced.out")
	torn=$(echo "$out" | sed -n 's/.*torn=\([0-9]*\).*/\1/p')
	changes=$(echo "$out" | sed -n 's/.*changes=\([0-9]*\).*/\1/p')
	echo "   $out"
}
for mode in "" --direct; do
	m=${mode:-buffered}; m=${m#--}
	checks=$((checks + 1))
	if ! replaced "r$checks" "$mode"; then
		fail "cluster scope, table replaced, $m: rig error"
	elif [ "$changes" = 0 ]; then
		fail "cluster scope, table replaced, $m: the reader never saw a write"
	elif [ "$torn" != 0 ]; then
		fail "cluster scope, table replaced, $m: $torn torn reads"
	else
		pass "cluster scope, node A's table replaced under its writer, $m: no torn read in $changes changes"
	fi
	rm -f "/dev/shm$shmR"
done
# Fresh data (tests/cluster/fresh.c): A writes a generation, then B reads
# it, in turns, 40 times.  The coherent mounts keep no page cache, so the
# control reads through a third mount, C, with FUSE's page cache on (stock
# mount options): without the shim C keeps old data; in cluster scope the
# give-back and the acquisition's invalidation must make every read fresh,
# on B and on C.
turns() { # WRITER-ENV READER-ENV READER-DIR FLAGS; sets fresh, stale, nr
	d=$CLU_DIR/fifo.$checks
	mkdir -p "$d" && mkfifo "$d/w2r" "$d/r2w" || return 1
	# shellcheck disable=SC2086
	timeout 120 env $1 "$build/cluster/fresh" write "$CLU_A/fresh" 40 "$d" $4 >/dev/null &
	# shellcheck disable=SC2086
	out=$(timeout 120 env $2 "$build/cluster/fresh" read "$3/fresh" "$d" $4)
	rc=$?
	wait $! || rc=1
	rm -rf "$d" "$CLU_A/fresh"
	echo "   $out"
	fresh=$(echo "$out" | sed -n 's/.*fresh=\([0-9]*\).*/\1/p')
	stale=$(echo "$out" | sed -n 's/.*stale=\([0-9]*\).*/\1/p')
	nr=$(echo "$out" | sed -n 's/.*rounds=\([0-9]*\).*/\1/p')
	[ $rc = 0 ] && [ -n "$nr" ]
}
CLU_C=$CLU_DIR/nodeC
mkdir -p "$CLU_C"
mount -t glusterfs -o "log-file=$CLU_DIR/log/nodeC.log" "localhost:/$CLU_VOL" "$CLU_C" ||
	fail "mounting node C (stock mount options) failed"
checks=$((checks + 1))
if turns "" "" "$CLU_C" "" && [ "$stale" -gt 0 ]; then
	pass "control, no shim, node C with a page cache: old data in $stale of $nr turns"
else
	fail "control, no shim, node C: no stale read (${stale:-?} of ${nr:-?}), so the freshness check cannot tell"
fi
for r in B C; do
	for mode in "" --direct; do
		checks=$((checks + 1))
		rd=$CLU_B; [ $r = C ] && rd=$CLU_C
		if turns "$nodeA RANGESHIM_SCOPE=cluster" "$nodeB RANGESHIM_SCOPE=cluster" "$rd" "$mode" &&
		    [ "$fresh" = 40 ]; then
			pass "cluster scope, reader on node $r, ${mode:-buffered}: fresh in all 40 turns"
		else
			fail "cluster scope, reader on node $r, ${mode:-buffered}: ${fresh:-?} of ${nr:-?} fresh"
		fi
	done
done

# The application's own whole-file locks (docs/design.md (i), "Separate
# byte spaces"): a process of node A in cluster scope locks the file (fcntl
# l_len 0; flock, which GlusterFS makes a lock on every byte) and writes
# inside the lock.  The write must return (on e284bb3 it did not).
probe=$build/tests/helpers/cadv_probe
for how in whole flock; do
	checks=$((checks + 1))
	f=$CLU_A/own-$how
	head -c 4096 /dev/zero >"$f"
	out=$(env $nodeA RANGESHIM_SCOPE=cluster timeout 20 "$probe" ownlock "$f" $how 2>&1)
	if echo "$out" | grep -q '^rc=100 '; then
		pass "cluster scope: a write under the process's own $how lock returns"
	else
		fail "cluster scope: a write under the process's own $how lock: ${out:-no answer in 20 s}"
	fi
	rm -f "$f"
done

# The agents hold descriptions on the mounts: let them go idle and exit
# (3-5 s) before the volume is unmounted; then end any left, by pid.
agents_gone() {
	for i in $(seq 50); do
		pids=$(pgrep -f "rangeshim agent --shm ($shmA|$shmB|$shmR)\$") || return 0
		sleep 0.2
	done
	echo "   agents still running after 10 s: $pids; ending them"
	kill $pids 2>/dev/null
}
agents_gone
rm -f "/dev/shm$shmA" "/dev/shm$shmB" "/dev/shm$shmR"

checks=$((checks + 1))
if "$build/cluster/ofdprobe" check "$CLU_A" "$CLU_B"; then
	pass "OFD locks through node A and node B conflict as on a cluster"
else
	fail "ofdprobe check"
fi

# cross_suite TEST SUITE: a Criterion binary's cross-node suite on the two
# mounts (--verbose for the figures; other suites are filtered out).
cross_suite() {
	[ -x "$build/tests/$1" ] || return 0
	checks=$((checks + 1))
	RS_CLUSTER_DIRS="$CLU_A:$CLU_B" "$build/tests/$1" --verbose \
	    --filter "$2/*" --jobs 1 --timeout 120 >"$CLU_DIR/$1.log" 2>&1
	rc=$?
	grep -v 'Test is disabled' "$CLU_DIR/$1.log"
	if [ $rc = 0 ]; then
		pass "$1 across the two mounts"
	else
		fail "$1 across the two mounts"
	fi
}
cross_suite test_clusterlock clusterlock_nodes
cross_suite test_cluster_adv cluster_adv_nodes

echo "cluster: $((checks - fails)) of $checks checks passed"
[ $fails = 0 ]
