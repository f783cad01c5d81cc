# CephFS on one machine as a two-node cluster file system; sourced by
# tests/cluster/ceph_run.sh and bench.sh (POSIX sh).  The CephFS
# counterpart of gluster.sh, with the same three functions:
#
#   ceph_prepare       checks and installs; on "cannot run here" it prints
#                      one "SKIP: reason" line and returns 2, on a real
#                      failure it says why and returns 1
#   ceph_setup         one mon, one mgr, one memstore OSD, one MDS, a file
#                      system, and two ceph-fuse mounts $CEPH_A and $CEPH_B
#                      with distinct client names (client.A, client.B: two
#                      MDS sessions, so two nodes); CEPH_FUSE_OPTS is added
#                      to both ceph-fuse command lines (for example
#                      --fuse_disable_pagecache=true).  Returns 2 with a
#                      "SKIP: reason" line when a daemon cannot run here.
#   ceph_teardown      unmounts, ends the daemons it started (by the pids
#                      it recorded), removes the scratch folder; safe to
#                      call twice and after a partial setup
#
# Why this configuration (measured; docs/benchmarks.md "Cluster scope on
# CephFS"):
# - Everything a daemon keeps (mon store, OSD and MDS data, sockets, logs,
#   pid files) is under $CEPH_DIR, named by one ceph.conf passed with -c:
#   nothing under /etc/ceph or /var/lib/ceph is read or written, and no
#   systemd unit runs.  The OSD keeps its objects in memory (memstore).
# - The daemons listen on $CEPH_IP (127.0.0.3: GlusterFS's tier uses
#   127.0.0.2 and port 24007) and on their own port range, so the tier can
#   run beside the GlusterFS one.
# - auth none, pools of size 1, one placement group each: a lock manager
#   and a data path, with nothing to configure.
# - Two ceph-fuse processes are two clients of the MDS, each with its own
#   session, caps and page cache: exactly what two nodes have.  The MDS
#   keeps the byte-range locks (fcntl and flock), so OFD locks through A
#   and B conflict as on a cluster.

CEPH_DIR=${CEPH_DIR:-${TMPDIR:-/tmp}/rangeshim-ceph.$$}
CEPH_A=$CEPH_DIR/nodeA
CEPH_B=$CEPH_DIR/nodeB
CEPH_IP=${CEPH_IP:-127.0.0.3}
CEPH_MON_PORT=${CEPH_MON_PORT:-3310}
CEPH_FS=rangeshim
CEPH_CONF=$CEPH_DIR/ceph.conf
CEPH_PKGS="ceph-mon ceph-mgr ceph-osd ceph-mds ceph-fuse ceph-common"
# The MDS evicts a client whose session went silent after this many
# seconds (Ceph's default is 60, its least 30); the eviction check waits for it.
CEPH_SESSION_TIMEOUT=${CEPH_SESSION_TIMEOUT:-30}
ceph_pids=""

ceph_now() { date +%s.%N; }
ceph_secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
cephc() { timeout 30 ceph -c "$CEPH_CONF" "$@"; }

ceph_prepare() {
	if [ "$(id -u)" != 0 ]; then
		echo "SKIP: the CephFS tier mounts file systems and needs root"
		return 2
	fi
	if [ ! -c /dev/fuse ]; then
		echo "SKIP: no /dev/fuse on this machine, so no FUSE mounts"
		return 2
	fi
	if ! (exec 3<>/dev/fuse) 2>/dev/null; then
		echo "SKIP: /dev/fuse cannot be opened here (container without FUSE access)"
		return 2
	fi
	# The daemons use 0.45-1 GiB; below 1.5 GiB free they would starve
	# the machine (or be killed by the OOM killer half way).
	avail=$(awk '/^MemAvailable:/ { print int($2 / 1024) }' /proc/meminfo 2>/dev/null)
	if [ -n "$avail" ] && [ "$avail" -lt 1536 ]; then
		echo "SKIP: only $avail MiB of memory available; the Ceph daemons need about 1 GiB"
		return 2
	fi
	if ! mkdir -p "$CEPH_DIR/probe"; then
		echo "ceph: cannot create $CEPH_DIR" >&2
		return 1
	fi
	if ! mount -t tmpfs rangeshim-probe "$CEPH_DIR/probe" 2>/dev/null; then
		rmdir "$CEPH_DIR/probe" "$CEPH_DIR" 2>/dev/null
		echo "SKIP: mounting is not allowed here (no CAP_SYS_ADMIN)"
		return 2
	fi
	umount "$CEPH_DIR/probe"
	rmdir "$CEPH_DIR/probe" "$CEPH_DIR"
	missing=""
	for b in ceph-mon ceph-mgr ceph-osd ceph-mds ceph-fuse ceph monmaptool; do
		command -v $b >/dev/null 2>&1 || missing="$missing $b"
	done
	if [ -n "$missing" ]; then
		if ! command -v apt-get >/dev/null 2>&1; then
			echo "SKIP: Ceph is not installed ($missing) and there is no apt-get to install it"
			return 2
		fi
		t0=$(ceph_now)
		echo "ceph: installing $CEPH_PKGS"
		export DEBIAN_FRONTEND=noninteractive
		# shellcheck disable=SC2086
		if ! { apt-get install -y -qq --no-install-recommends $CEPH_PKGS >/dev/null 2>&1 ||
		      { apt-get update -qq >/dev/null 2>&1 &&
			apt-get install -y -qq --no-install-recommends $CEPH_PKGS >/dev/null 2>&1; }; }; then
			# No network or no such packages: the environment, not
			# the code under test.
			echo "SKIP: apt-get could not install $CEPH_PKGS"
			return 2
		fi
		echo "ceph: installed in $(ceph_secs "$t0" "$(ceph_now)") s"
	fi
	return 0
}

# The last lines of every log, for a failure report.
ceph_logs() {
	for f in "$CEPH_DIR"/log/*.log; do
		[ -f "$f" ] || continue
		echo "--- $f" >&2
		tail -n 8 "$f" >&2
	done
}

# ceph_start NAME CMD...: start a daemon in the foreground, in the
# background; its pid is recorded for ceph_teardown.
ceph_start() {
	n=$1
	shift
	"$@" >>"$CEPH_DIR/log/$n.out" 2>&1 &
	ceph_pids="$ceph_pids $!"
	echo $! >"$CEPH_DIR/run/$n.pid"
}

# ceph_wait SECS WHAT CMD...: retry CMD every 0.2 s for SECS seconds.
ceph_wait() {
	cw_secs=$1 cw_what=$2
	shift 2
	i=0
	until "$@" >/dev/null 2>&1; do
		i=$((i + 1))
		if [ $i -ge $((cw_secs * 5)) ]; then
			echo "ceph: $cw_what after $cw_secs s" >&2
			return 1
		fi
		sleep 0.2
	done
}

ceph_write_conf() {
	fsid=$(cat /proc/sys/kernel/random/uuid)
	cat >"$CEPH_CONF" <<EOF
[global]
fsid = $fsid
mon host = v2:$CEPH_IP:$CEPH_MON_PORT
public addr = $CEPH_IP
ms bind msgr1 = false
ms bind port min = 7300
ms bind port max = 7400
auth cluster required = none
auth service required = none
auth client required = none
auth allow insecure global id reclaim = false
osd pool default size = 1
osd pool default min size = 1
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
osd objectstore = memstore
memstore device bytes = 1073741824
run dir = $CEPH_DIR/run
admin socket = $CEPH_DIR/run/\$name.asok
log file = $CEPH_DIR/log/\$name.log
pid file = $CEPH_DIR/run/\$name.daemon.pid
crash dir = $CEPH_DIR/crash
keyring = $CEPH_DIR/keyring
mon data = $CEPH_DIR/mon/\$id
mgr data = $CEPH_DIR/mgr/\$id
osd data = $CEPH_DIR/osd/\$id
mds data = $CEPH_DIR/mds/\$id
osd max object name len = 256
osd max object namespace len = 64
mgr initial modules =
[mon]
mon data avail crit = 1
mon data avail warn = 2
[osd]
osd memory target = 536870912
EOF
}

ceph_setup() {
	t0=$(ceph_now)
	mkdir -p "$CEPH_DIR/run" "$CEPH_DIR/log" "$CEPH_DIR/crash" "$CEPH_DIR/mon/a" \
		"$CEPH_DIR/mgr/x" "$CEPH_DIR/osd/0" "$CEPH_DIR/mds/a" "$CEPH_A" "$CEPH_B" || return 1
	ceph_write_conf || return 1
	: >"$CEPH_DIR/keyring"
	if ! monmaptool --create --fsid "$fsid" --addv a "[v2:$CEPH_IP:$CEPH_MON_PORT]" \
	    "$CEPH_DIR/monmap" >/dev/null 2>"$CEPH_DIR/log/monmap.out" ||
	   ! ceph-mon -c "$CEPH_CONF" --mkfs -i a --monmap "$CEPH_DIR/monmap" \
	    >"$CEPH_DIR/log/mkfs.out" 2>&1; then
		echo "SKIP: ceph-mon cannot create its store here: $(tail -n 1 "$CEPH_DIR"/log/*.out)"
		return 2
	fi
	ceph_start mon ceph-mon -c "$CEPH_CONF" -i a -f
	if ! ceph_wait 30 "the mon does not answer" cephc mon stat; then
		ceph_logs
		echo "SKIP: the Ceph monitor does not run here (see its log above)"
		return 2
	fi
	ceph_start mgr ceph-mgr -c "$CEPH_CONF" -i x -f
	osd_uuid=$(cat /proc/sys/kernel/random/uuid)
	id=$(cephc osd new "$osd_uuid" 2>>"$CEPH_DIR/log/setup.out")
	if [ "$id" != 0 ] || ! ceph-osd -c "$CEPH_CONF" -i 0 --mkfs --osd-uuid "$osd_uuid" \
	    >>"$CEPH_DIR/log/setup.out" 2>&1; then
		tail -n 5 "$CEPH_DIR/log/setup.out" >&2
		ceph_logs
		echo "SKIP: the Ceph OSD cannot be created here (see above)"
		return 2
	fi
	ceph_start osd ceph-osd -c "$CEPH_CONF" -i 0 -f
	for p in meta data; do
		if ! cephc osd pool create "$CEPH_FS-$p" 1 1 >>"$CEPH_DIR/log/setup.out" 2>&1; then
			echo "ceph: creating pool $CEPH_FS-$p failed" >&2
			tail -n 3 "$CEPH_DIR/log/setup.out" >&2
			return 1
		fi
	done
	if ! cephc fs new "$CEPH_FS" "$CEPH_FS-meta" "$CEPH_FS-data" >>"$CEPH_DIR/log/setup.out" 2>&1 ||
	   ! cephc fs set "$CEPH_FS" session_timeout "$CEPH_SESSION_TIMEOUT" >>"$CEPH_DIR/log/setup.out" 2>&1; then
		echo "ceph: creating the file system failed" >&2
		tail -n 3 "$CEPH_DIR/log/setup.out" >&2
		return 1
	fi
	ceph_start mds ceph-mds -c "$CEPH_CONF" -i a -f
	if ! ceph_wait 60 "the MDS is not active" sh -c \
	    "timeout 20 ceph -c '$CEPH_CONF' mds stat 2>/dev/null | grep -q 'up:active'"; then
		ceph_logs
		echo "SKIP: the Ceph MDS did not become active here (see its log above)"
		return 2
	fi
	for n in A B; do
		eval "m=\$CEPH_$n"
		# shellcheck disable=SC2086
		ceph_start "fuse$n" ceph-fuse -f -c "$CEPH_CONF" -n "client.$n" \
			--client_fs "$CEPH_FS" ${CEPH_FUSE_OPTS:-} "$m"
	done
	for n in A B; do
		eval "m=\$CEPH_$n"
		if ! ceph_wait 30 "node $n is not mounted" \
		    grep -q " $m fuse.ceph-fuse " /proc/mounts; then
			ceph_logs
			echo "SKIP: ceph-fuse cannot mount here (see its log above)"
			return 2
		fi
	done
	if ! ceph_wait 20 "the mounts do not see one file system" \
	    sh -c ": >'$CEPH_A/.ready' && [ -e '$CEPH_B/.ready' ]"; then
		ceph_logs
		return 1
	fi
	rm -f "$CEPH_A/.ready"
	echo "ceph: CephFS $CEPH_FS up on $CEPH_IP, mounted at $CEPH_A (client.A) and $CEPH_B (client.B)${CEPH_FUSE_OPTS:+ with $CEPH_FUSE_OPTS} in $(ceph_secs "$t0" "$(ceph_now)") s"
}

# ceph_gone PID: end PID (TERM, then KILL after 5 s); a zombie counts as
# gone.
ceph_gone() {
	kill "$1" 2>/dev/null || return 0
	i=0
	while kill -0 "$1" 2>/dev/null && [ $i -lt 50 ]; do
		case $(awk '{print $3}' /proc/"$1"/stat 2>/dev/null) in Z|'') return 0 ;; esac
		sleep 0.1
		i=$((i + 1))
	done
	kill -9 "$1" 2>/dev/null
	return 0
}

# Only what this run started: the two mounts under CEPH_DIR and the
# daemons whose pids it recorded.  The file system's data lives in the
# OSD's memory and its store under CEPH_DIR, so removing that folder
# removes the cluster.
ceph_teardown() {
	[ -d "$CEPH_DIR" ] || return 0
	t0=$(ceph_now)
	for m in "$CEPH_A" "$CEPH_B"; do
		if grep -q " $m " /proc/mounts 2>/dev/null; then
			umount "$m" 2>/dev/null || umount -l "$m"
		fi
	done
	# The clients first, then the MDS, the OSD, the mgr, the mon.
	for n in fuseA fuseB mds osd mgr mon; do
		f=$CEPH_DIR/run/$n.pid
		[ -f "$f" ] || continue
		pid=$(cat "$f" 2>/dev/null)
		case $pid in ''|*[!0-9]*) continue ;; esac
		ceph_gone "$pid"
		wait "$pid" 2>/dev/null
		rm -f "$f"
	done
	ceph_pids=""
	if grep -q " $CEPH_DIR/" /proc/mounts 2>/dev/null; then
		echo "ceph: a mount under $CEPH_DIR is still busy; leaving it" >&2
		return 1
	fi
	rm -rf "$CEPH_DIR"
	echo "ceph: torn down in $(ceph_secs "$t0" "$(ceph_now)") s"
}
