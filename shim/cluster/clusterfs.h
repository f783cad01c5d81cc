/*
 * Which files cluster scope may use: only those on a file
 * system whose byte-range locks reach every node.  Pure parsing and policy
 * here (unit-tested on sample /proc/self/mountinfo lines by
 * tests/test_clusterfs.c); the per-file cache of the decision is cluster.c.
 */
#ifndef RS_CLUSTERFS_H
#define RS_CLUSTERFS_H

#include <stddef.h>
#include <stdint.h>

struct rs_mnt {
	unsigned major, minor;   /* st_dev of files on it */
	char point[256];         /* mount point (octal escapes left as is) */
	char fstype[64];         /* as in mountinfo: "nfs4", "fuse.glusterfs" */
	char opts[512];          /* per-mount options, then ",", then the super options */
};

/* One mountinfo line (proc(5)).  Returns 0, or -1 for a line not in that
 * format. */
int rs_mnt_parse(const char *line, struct rs_mnt *m);

/* Is comma-separated opt list opts holding the option name (exactly, or
 * as name=value)? */
int rs_mnt_has_opt(const char *opts, const char *name);

/*
 * Pre: m parsed; trusted is RANGESHIM_CLUSTER_FS (comma-separated fs type
 * names, may be NULL or empty).
 * Post: 1 when the file system's locks are cluster-wide (cluster scope),
 * 0 when not, with a reason of the form "tmpfs is a local file system" in
 * why.
 */
int rs_mnt_cluster_ok(const struct rs_mnt *m, const char *trusted, char *why, size_t whylen);

/*
 * Does the file system take flock() to its lock manager as a lock on the
 * whole byte range, which would meet the cluster grants (docs/design.md
 * (i), "Separate byte spaces")?  NFS does (nfs_flock in fs/nfs/file.c:
 * flock simulated with POSIX locks on the server) unless mounted
 * local_lock=flock or all; Lustre mounted flock does (an LDLM flock lock
 * on [0, EOF]); FUSE file systems that take flocks do (fuse_file_flock in
 * fs/fuse/file.c sends a SETLK of [0, OFFSET_MAX] with FUSE_LK_FLOCK):
 * GlusterFS is the one trusted here.  Local flocks (tmpfs, ext4, GFS2's
 * and Ceph's own flock locks) never meet fcntl locks.
 */
int rs_mnt_flock_posix(const struct rs_mnt *m);

/*
 * The application's lock range kept inside the data space [0, limit)
 * (cluster scope: the agent's lock words live above it).  fl as given to
 * fcntl, whence resolved to base (0, the file offset, or the size).
 * Post: 1 with fl rewritten to SEEK_SET [start, limit) when the range
 * starts below limit and reaches past it (l_len 0 among them); 0 with fl
 * unchanged when it lies inside, lies wholly at or past limit, or is one
 * the kernel refuses (a bad whence, a negative start, an overflow:
 * flock_to_posix_lock in fs/locks.c), which the call reports itself.
 */
struct flock;
int rs_lock_clamp(struct flock *fl, int64_t base, int64_t limit);
/* An F_GETLK answer: a lock ending exactly at limit is reported as one
 * "to the end" (l_len 0), which is what a clamped one was. */
void rs_lock_unclamp(struct flock *fl, int64_t limit);

/* The mount that files of device (major, minor) lie on, from the
 * mountinfo text in path; 0, or -1 if none matches. */
int rs_mnt_find(const char *path, unsigned major, unsigned minor, struct rs_mnt *m);

#endif
