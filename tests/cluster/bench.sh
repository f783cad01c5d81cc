#!/bin/sh
# make bench-cluster: ofdprobe's measurements on two GlusterFS mounts, in
# the configuration the cluster tier uses, then the stock-option coherence
# rows for comparison.  Usage: bench.sh BUILD.  Output is Markdown.
set -u
build=$1
here=$(dirname "$0")
. "$here/gluster.sh"
trap 'clu_teardown' EXIT
trap 'exit 130' INT TERM
clu_prepare
case $? in 0) ;; 2) trap - EXIT; exit 0 ;; *) exit 1 ;; esac
echo "machine: $(nproc) cores, $(uname -r), $(glusterfs --version | head -1)"
echo
echo "### Coherent configuration (the cluster tier's)"
clu_setup || exit 1
"$build/cluster/ofdprobe" bench "$CLU_A" "$CLU_B" "$CLU_DIR" || exit 1
echo
sh "$here/bench_scope.sh" "$build" "$CLU_A" "$CLU_B" || exit 1
clu_teardown
echo
echo "### Stock volume options and mount options"
CLU_STOCK=1
CLU_VOL=rangeshim$$s
clu_setup || exit 1
"$build/cluster/ofdprobe" bench "$CLU_A" "$CLU_B" || exit 1
# The 1 MiB race of the cluster tier with an OFD lock around every call,
# on stock options: do locks alone order data here?
x=$build/cluster/xmount
for mode in "" --direct; do
	"$x" fill "$CLU_A/race" || exit 1
	"$x" write "$CLU_A/race" --seconds 3 --lock $mode >/dev/null &
	echo "stock, 1 MiB writer on A and reader on B, OFD lock per call ${mode:---buffered}: $("$x" read "$CLU_B/race" --seconds 3 --lock $mode)"
	wait
done
