/*
 * Which files cluster scope may use (issue 11): only those on a file
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

/* The mount that files of device (major, minor) lie on, from the
 * mountinfo text in path; 0, or -1 if none matches. */
int rs_mnt_find(const char *path, unsigned major, unsigned minor, struct rs_mnt *m);

#endif
