# The cluster tier (issue 11); included by the Makefile.
#
#   make test-cluster    two FUSE mounts of one GlusterFS volume as two nodes:
#                        torn-read races with controls, cross-mount OFD lock
#                        checks, test_clusterlock across the mounts.  Installs
#                        GlusterFS when root; prints "SKIP: reason" and
#                        succeeds where FUSE or mounting is not allowed.
#   make bench-cluster   ofdprobe's figures and the cluster-scope table
#                        (bench_scope.sh) for docs/benchmarks.md "Cluster";
#                        CLUSTER_FS=ceph runs them on CephFS instead
#   make test-ceph       the same kind of tier on CephFS (ceph.sh builds a
#                        single-host CephFS: two ceph-fuse clients as two
#                        nodes); installs Ceph when root, SKIPs likewise
#   make bench-ceph      make bench-cluster CLUSTER_FS=ceph
#
# Not part of `make test`: it mounts file systems and starts daemons.
# .ci/run runs test-cluster but not test-ceph: installing Ceph took 2-6 min
# on these machines and the tier about 3.5 min more, which would take
# .ci/run (about 5 min) too near its 15-minute bound.

CLUSTER_BINS = $(BUILD)/cluster/xmount $(BUILD)/cluster/ofdprobe $(BUILD)/cluster/fresh
CLUSTER_FS  ?= gluster

.PHONY: test-cluster bench-cluster test-ceph bench-ceph

$(BUILD)/cluster/%: tests/cluster/%.c examples/util.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) -lpthread

test-cluster: all $(CLUSTER_BINS) $(BUILD)/tests/test_clusterlock $(BUILD)/tests/test_cluster_adv $(BUILD)/tests/helpers/cadv_probe
	@sh tests/cluster/run.sh $(BUILD)

bench-cluster: all $(CLUSTER_BINS) $(BUILD)/tests/helpers/clu_probe
	@sh tests/cluster/$(if $(filter ceph,$(CLUSTER_FS)),bench_ceph.sh,bench.sh) $(BUILD)

test-ceph: all $(CLUSTER_BINS) $(BUILD)/tests/test_clusterlock $(BUILD)/tests/test_cluster_adv \
		$(BUILD)/tests/helpers/cadv_probe $(BUILD)/tests/helpers/clu_probe $(FAULTLIB)
	@sh tests/cluster/ceph_run.sh $(BUILD)

bench-ceph:
	@$(MAKE) --no-print-directory bench-cluster CLUSTER_FS=ceph

# test_clusterlock links the cluster grant cache (the agent runs it; the
# library does not link it), and what a debug build's checks need
# (lockorder.c, log.c); an explicit rule wins over the Makefile's pattern
# rule for tests.
$(BUILD)/tests/test_clusterlock: tests/test_clusterlock.c shim/cluster/clusterlock.c shim/cluster/clusterlock.h \
		shim/core/lockorder.c shim/core/lockorder.h shim/core/log.c tests/common.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DRS_BUILD_DIR='"$(abspath $(BUILD))"' -DRS_SAN='"$(SAN)"' \
	    -o $@ $< shim/cluster/clusterlock.c shim/core/lockorder.c shim/core/log.c \
	    $(LDFLAGS) -lcriterion -lpthread
