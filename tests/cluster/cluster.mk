# The cluster tier (issue 11); included by the Makefile.
#
#   make test-cluster    two FUSE mounts of one GlusterFS volume as two nodes:
#                        torn-read races with controls, cross-mount OFD lock
#                        checks, test_clusterlock across the mounts.  Installs
#                        GlusterFS when root; prints "SKIP: reason" and
#                        succeeds where FUSE or mounting is not allowed.
#   make bench-cluster   ofdprobe's figures for docs/benchmarks.md "Cluster"
#
# Not part of `make test`: it mounts file systems and starts daemons.

CLUSTER_BINS = $(BUILD)/cluster/xmount $(BUILD)/cluster/ofdprobe

.PHONY: test-cluster bench-cluster

$(BUILD)/cluster/%: tests/cluster/%.c examples/util.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) -lpthread

test-cluster: all $(CLUSTER_BINS)
	@sh tests/cluster/run.sh $(BUILD)

bench-cluster: all $(CLUSTER_BINS)
	@sh tests/cluster/bench.sh $(BUILD)
