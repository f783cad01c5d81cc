/*
 * Cluster scope, the library side (issue 11; docs/design.md (i)).
 *
 * Which files: those on a file system whose locks reach other nodes
 * (clusterfs.c decides from /proc/self/mountinfo).  The decision depends
 * only on the device, so it is made once per device and remembered; a
 * refused device gets one line, at level error, that says why, and its
 * files keep node scope.
 */
#include "cluster.h"

#include <stdatomic.h>
#include <sys/sysmacros.h>

#include "clusterfs.h"
#include "config.h"
#include "futex.h"
#include "log.h"

#define NDEV 64

static struct {
	uint64_t dev;
	int ok;
} devs[NDEV];
static int ndev;
static _Atomic uint32_t devs_mtx;

static int decide(uint64_t dev)
{
	struct rs_mnt m;
	char why[400];

	if (rs_mnt_find("/proc/self/mountinfo", major(dev), minor(dev), &m) < 0) {
		rs_log(RS_LOG_ERROR, "cluster scope: no mount of device %u:%u in "
		       "/proc/self/mountinfo, so its locks cannot be known to be cluster-wide; "
		       "its files keep node scope", major(dev), minor(dev));
		return 0;
	}
	if (rs_mnt_cluster_ok(&m, rs_cfg.cluster_fs, why, sizeof why))
		return 1;
	rs_log(RS_LOG_ERROR, "cluster scope: files on %s keep node scope: %s "
	       "(RANGESHIM_CLUSTER_FS=%s would trust it)", m.point, why, m.fstype);
	return 0;
}

int rs_cluster_dev(uint64_t dev)
{
	int ok;

	rs_mutex_lock(&devs_mtx);
	for (int i = 0; i < ndev; i++)
		if (devs[i].dev == dev) {
			ok = devs[i].ok;
			rs_mutex_unlock(&devs_mtx);
			return ok;
		}
	ok = decide(dev);
	/* A full table decides again next time (and says so again): rare,
	 * and never less safe. */
	if (ndev < NDEV)
		devs[ndev++] = (typeof(devs[0])){ dev, ok };
	rs_mutex_unlock(&devs_mtx);
	return ok;
}

void rs_cluster_unbuilt(void)
{
	static _Atomic int said;

	if (!atomic_exchange(&said, 1))
		rs_log(RS_LOG_ERROR, "cluster scope: cluster grants are not built in this version; "
		       "files on trusted cluster file systems keep node scope (other nodes are NOT "
		       "coordinated)");
}
