# GlusterFS on one machine as a two-node cluster file system; sourced by
# tests/cluster/run.sh and bench.sh (POSIX sh).
#
#   clu_prepare        checks and installs; on "cannot run here" it prints
#                      one "SKIP: reason" line and returns 2, on a real
#                      failure it says why and returns 1
#   clu_setup          glusterd, a one-brick volume, two FUSE mounts
#                      $CLU_A and $CLU_B ("node A" and "node B"); with
#                      CLU_STOCK set, stock volume and mount options
#   clu_teardown       unmounts, stops the volume, ends the daemons it
#                      started (by their pid files), removes the brick;
#                      safe to call twice and after a partial setup
#
# Why this configuration (measured; docs/benchmarks.md "Cluster"):
# - The brick is on 127.0.0.2 because the gluster CLI refuses localhost and
#   127.0.0.1 as brick hosts; the mounts still use localhost.
# - Client-side caching translators are switched off and the mounts use
#   direct-io-mode and zero attribute/entry timeouts.  With stock options a
#   reader on mount B sees stale data even under OFD locks, and an O_DIRECT
#   writer's data is still in write-behind when its unlock reaches the lock
#   server, so locked O_DIRECT reads tear.  Cluster scope needs a file system
#   whose locks order data; this is the configuration where they do.
# - glusterd's port 24007 and /var/run/gluster are fixed, so one instance
#   per machine: a running glusterd is a reason to skip, never to share.

CLU_VOL=rangeshim$$
CLU_DIR=${CLU_DIR:-${TMPDIR:-/tmp}/rangeshim-cluster.$$}
CLU_A=$CLU_DIR/nodeA
CLU_B=$CLU_DIR/nodeB
CLU_OFF="performance.write-behind performance.read-ahead
 performance.readdir-ahead performance.io-cache performance.quick-read
 performance.stat-prefetch performance.open-behind performance.nl-cache
 performance.md-cache-statfs"
CLU_MOUNT_OPTS=direct-io-mode=enable,attribute-timeout=0,entry-timeout=0,negative-timeout=0
clu_started=""

clu_now() { date +%s.%N; }
clu_secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

clu_prepare() {
	if [ "$(id -u)" != 0 ]; then
		echo "SKIP: the cluster tier mounts file systems and needs root"
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
	# Port 24007 (5DC7) listening (state 0A), from /proc: no ss needed,
	# and a glusterd zombie that init has not reaped yet does not count.
	if awk '$4 == "0A" && $2 ~ /:5DC7$/ { f = 1 } END { exit !f }' \
	    /proc/net/tcp /proc/net/tcp6 2>/dev/null; then
		echo "SKIP: a glusterd already runs here (port 24007 and /var/run/gluster allow one per machine)"
		return 2
	fi
	if ! mkdir -p "$CLU_DIR/probe"; then
		echo "cluster: cannot create $CLU_DIR" >&2
		return 1
	fi
	if ! mount -t tmpfs rangeshim-probe "$CLU_DIR/probe" 2>/dev/null; then
		rmdir "$CLU_DIR/probe" "$CLU_DIR" 2>/dev/null
		echo "SKIP: mounting is not allowed here (no CAP_SYS_ADMIN)"
		return 2
	fi
	umount "$CLU_DIR/probe"
	rmdir "$CLU_DIR/probe" "$CLU_DIR"
	if ! command -v glusterd >/dev/null 2>&1 || ! command -v mount.glusterfs >/dev/null 2>&1; then
		if ! command -v apt-get >/dev/null 2>&1; then
			echo "SKIP: GlusterFS is not installed and there is no apt-get to install it"
			return 2
		fi
		t0=$(clu_now)
		echo "cluster: installing glusterfs-server glusterfs-client"
		export DEBIAN_FRONTEND=noninteractive
		if ! { apt-get install -y -qq --no-install-recommends \
			glusterfs-server glusterfs-client >/dev/null 2>&1 ||
		      { apt-get update -qq >/dev/null &&
			apt-get install -y -qq --no-install-recommends \
			glusterfs-server glusterfs-client >/dev/null; }; }; then
			echo "cluster: apt-get could not install GlusterFS" >&2
			return 1
		fi
		echo "cluster: installed in $(clu_secs "$t0" "$(clu_now)") s"
	fi
	return 0
}

# The last lines of every log, for a failure report.
clu_logs() {
	for f in "$CLU_DIR"/log/*.log "$CLU_DIR"/log/bricks/*.log; do
		[ -f "$f" ] || continue
		echo "--- $f" >&2
		tail -n 5 "$f" >&2
	done
}

clu_setup() {
	t0=$(clu_now)
	mkdir -p "$CLU_DIR/wd" "$CLU_DIR/brick" "$CLU_DIR/log" "$CLU_A" "$CLU_B" || return 1
	sed "s#/var/lib/glusterd#$CLU_DIR/wd#" /etc/glusterfs/glusterd.vol >"$CLU_DIR/glusterd.vol" || return 1
	# -l makes glusterd put its logs, and its bricks' logs, under log/.
	if ! glusterd -f "$CLU_DIR/glusterd.vol" -p "$CLU_DIR/glusterd.pid" \
	    -l "$CLU_DIR/log/glusterd.log" --log-level=WARNING; then
		echo "cluster: glusterd did not start" >&2
		clu_logs
		return 1
	fi
	clu_started=1
	i=0
	until gluster --mode=script volume list >/dev/null 2>&1; do
		i=$((i + 1))
		if [ $i -ge 100 ]; then
			echo "cluster: glusterd does not answer after 10 s" >&2
			clu_logs
			return 1
		fi
		sleep 0.1
	done
	if ! gluster --mode=script volume create "$CLU_VOL" "127.0.0.2:$CLU_DIR/brick" force >/dev/null; then
		echo "cluster: volume create failed" >&2
		clu_logs
		return 1
	fi
	[ -n "${CLU_STOCK:-}" ] || for o in $CLU_OFF; do
		gluster --mode=script volume set "$CLU_VOL" "$o" off >/dev/null ||
			{ echo "cluster: volume set $o off failed" >&2; return 1; }
	done
	if ! gluster --mode=script volume start "$CLU_VOL" >/dev/null; then
		echo "cluster: volume start failed" >&2
		clu_logs
		return 1
	fi
	for n in A B; do
		eval "m=\$CLU_$n"
		opts=log-file=$CLU_DIR/log/node$n.log
		[ -n "${CLU_STOCK:-}" ] || opts=$opts,$CLU_MOUNT_OPTS
		if ! mount -t glusterfs -o "$opts" \
		    "localhost:/$CLU_VOL" "$m"; then
			echo "cluster: mounting node $n failed" >&2
			clu_logs
			return 1
		fi
	done
	# The mounts answer before the client has connected to the brick.
	i=0
	until : >"$CLU_A/.ready" 2>/dev/null && [ -e "$CLU_B/.ready" ]; do
		i=$((i + 1))
		if [ $i -ge 100 ]; then
			echo "cluster: the mounts do not see one volume after 10 s" >&2
			clu_logs
			return 1
		fi
		sleep 0.1
	done
	rm -f "$CLU_A/.ready"
	echo "cluster: GlusterFS volume $CLU_VOL up, mounted at $CLU_A and $CLU_B in $(clu_secs "$t0" "$(clu_now)") s"
}

# Only what this run started: the mounts under CLU_DIR, the volume
# CLU_VOL, and the processes named by pid files under CLU_DIR or the
# volume's own run directory.
clu_teardown() {
	[ -d "$CLU_DIR" ] || return 0
	t0=$(clu_now)
	# nodeC: run.sh's freshness control mounts the volume a third time.
	for m in "$CLU_A" "$CLU_B" "$CLU_DIR/nodeC"; do
		if grep -q " $m " /proc/mounts 2>/dev/null; then
			umount "$m" 2>/dev/null || umount -l "$m"
		fi
	done
	if [ -n "$clu_started" ]; then
		gluster --mode=script volume stop "$CLU_VOL" force >/dev/null 2>&1
		gluster --mode=script volume delete "$CLU_VOL" >/dev/null 2>&1
		for p in /var/run/gluster/vols/"$CLU_VOL"/*.pid "$CLU_DIR"/glusterd.pid; do
			[ -f "$p" ] || continue
			pid=$(cat "$p" 2>/dev/null)
			case $pid in ''|*[!0-9]*) continue ;; esac
			kill "$pid" 2>/dev/null
			i=0
			while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do
				# A zombie is gone for our purposes.
				case $(awk '{print $3}' /proc/"$pid"/stat 2>/dev/null) in Z|'') break ;; esac
				sleep 0.1
				i=$((i + 1))
			done
			kill -0 "$pid" 2>/dev/null &&
				[ "$(awk '{print $3}' /proc/"$pid"/stat 2>/dev/null)" != Z ] &&
				kill -9 "$pid" 2>/dev/null
		done
		rm -rf /var/run/gluster/vols/"$CLU_VOL"
		clu_started=""
	fi
	# The brick holds xattrs and a .glusterfs tree; all of it is ours.
	if grep -q " $CLU_DIR/" /proc/mounts 2>/dev/null; then
		echo "cluster: a mount under $CLU_DIR is still busy; leaving it" >&2
		return 1
	fi
	rm -rf "$CLU_DIR"
	echo "cluster: torn down in $(clu_secs "$t0" "$(clu_now)") s"
}
