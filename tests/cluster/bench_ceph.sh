#!/bin/sh
# make bench-cluster CLUSTER_FS=ceph (make bench-ceph): ofdprobe's
# measurements and the cluster-scope table (bench_scope.sh) on two
# ceph-fuse clients of a single-host CephFS (ceph.sh), first with
# ceph-fuse's default options, then with --fuse_disable_pagecache=true
# (no kernel page cache under the clients).  Usage: bench_ceph.sh BUILD.
# Output is Markdown.
#
# The reader/writer row of an OFD lock per call is left out here
# (OFD_RW=0): 1 MiB buffered writes on A and reads on B, each under an
# OFD lock, hung both processes and ceph-fuse's requests for ten minutes
# on this machine (docs/benchmarks.md "Cluster scope on CephFS").
set -u
build=$1
here=$(dirname "$0")
. "$here/ceph.sh"
# As root only (ceph_prepare skips otherwise): another user could not open
# root's lock file, and a failed redirection of exec ends the script.
if [ "$(id -u)" = 0 ] && command -v flock >/dev/null 2>&1; then
	exec 9>>/tmp/ceph.lock
	flock -n 9 || { echo "ceph: another run holds /tmp/ceph.lock; waiting" >&2; flock 9; }
fi
ceph_prepare
case $? in 0) ;; 2) exit 0 ;; *) exit 1 ;; esac
trap 'ceph_teardown >&2' EXIT
trap 'exit 130' INT TERM
echo "machine: $(nproc) cores, $(uname -r), $(ceph --version | sed 's/ (.*//')"
for opts in "" --fuse_disable_pagecache=true; do
	echo
	echo "### ceph-fuse ${opts:-default options}"
	echo
	# shellcheck disable=SC2034  # read by ceph_setup
	CEPH_FUSE_OPTS=$opts
	ceph_setup >&2
	case $? in 0) ;; 2) exit 0 ;; *) exit 1 ;; esac
	"$build/cluster/ofdprobe" bench "$CEPH_A" "$CEPH_B" "$CEPH_DIR" || exit 1
	echo
	OFD_RW=0 sh "$here/bench_scope.sh" "$build" "$CEPH_A" "$CEPH_B" || exit 1
	ceph_teardown >&2
done
