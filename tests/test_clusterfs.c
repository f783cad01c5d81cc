/*
 * Criterion suite for cluster scope's choice of files (shim/cluster/clusterfs.c,
 * shim/preload/cluster.c, RANGESHIM_SCOPE=cluster and RANGESHIM_CLUSTER_FS in
 * shim/preload/config.c).
 *
 *  parse_*     rs_mnt_parse on sample /proc/self/mountinfo lines: optional
 *              fields, super options, a line without the "-" separator.
 *  decide_*    which types and options are trusted: NFS without and with
 *              nolock/local_lock, Lustre with and without flock, GFS2
 *              localflocks, GlusterFS, unknown FUSE, local file systems,
 *              and RANGESHIM_CLUSTER_FS's list (exact names only).
 *  flock_posix which file systems make flock a whole-file lock of the lock
 *              manager (NFS, Lustre with flock, GlusterFS).
 *  lock_clamp  the application's lock ranges kept inside the data space:
 *              "to the end" and ranges reaching past it are cut there,
 *              the rest (and ranges the kernel refuses) left as they are;
 *              F_GETLK answers ending there become "to the end" again.
 *  find_self   this process's own mountinfo has the mount of /dev/shm.
 *  config_*    the scope and the list are parsed; bad lists are dropped.
 *  refuse_tmpfs  a program in cluster scope reading a tmpfs file prints one
 *              line naming tmpfs and why, and still takes a node grant (node
 *              scope kept); controls: no such line in node scope, nor with
 *              RANGESHIM_CLUSTER_FS=tmpfs.
 */
#include "common.h"

#include <sys/sysmacros.h>

#include "clusterfs.h"
#include "config.h"

/* Parsing and deciding only: anything slower than this is a hang. */
TestSuite(clusterfs, .timeout = 60);

static struct rs_mnt parse_ok(const char *line)
{
	struct rs_mnt m;

	cr_assert_eq(rs_mnt_parse(line, &m), 0, "did not parse: %s", line);
	return m;
}

Test(clusterfs, parse_optional_fields)
{
	struct rs_mnt m = parse_ok("36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 shared:7 - "
				   "ext3 /dev/root rw,errors=continue\n");

	cr_assert_eq(m.major, 98);
	cr_assert_eq(m.minor, 0);
	cr_assert_str_eq(m.point, "/mnt/parent");
	cr_assert_str_eq(m.fstype, "ext3");
	cr_assert(rs_mnt_has_opt(m.opts, "noatime"));
	cr_assert(rs_mnt_has_opt(m.opts, "errors"), "super options are kept: %s", m.opts);
	cr_assert(!rs_mnt_has_opt(m.opts, "error"), "options match whole names only");
}

Test(clusterfs, parse_no_optional_fields)
{
	struct rs_mnt m = parse_ok("120 25 0:52 / /scratch rw,relatime - nfs4 srv:/export "
				   "rw,vers=4.2,rsize=1048576,hard,proto=tcp,local_lock=none,addr=10.0.0.2");

	cr_assert_eq(m.major, 0);
	cr_assert_eq(m.minor, 52);
	cr_assert_str_eq(m.fstype, "nfs4");
	cr_assert(rs_mnt_has_opt(m.opts, "local_lock"));
}

Test(clusterfs, parse_rejects_malformed)
{
	struct rs_mnt m;

	cr_assert_eq(rs_mnt_parse("36 35 98:0 /mnt1 /mnt/parent rw ext3 /dev/root rw", &m), -1,
		     "no separator");
	cr_assert_eq(rs_mnt_parse("36 35 x:y / /a rw - ext4 /dev/sda rw", &m), -1, "bad device");
	cr_assert_eq(rs_mnt_parse("", &m), -1);
	cr_assert_eq(rs_mnt_parse("36 35 8:1 / /a rw -", &m), -1, "no type");
}

static int ok(const char *line, const char *trusted, char *why, size_t n)
{
	struct rs_mnt m = parse_ok(line);

	why[0] = '\0';
	return rs_mnt_cluster_ok(&m, trusted, why, n);
}

#define TRUSTED(line) do {                                                    \
		char w_[400];                                                 \
		cr_assert_eq(ok(line, NULL, w_, sizeof w_), 1, "refused (%s): %s", w_, line); \
	} while (0)
#define REFUSED(line, needle) do {                                            \
		char w_[400];                                                 \
		cr_assert_eq(ok(line, NULL, w_, sizeof w_), 0, "trusted: %s", line); \
		cr_assert(strstr(w_, needle), "reason '%s' lacks '%s'", w_, needle); \
	} while (0)

Test(clusterfs, decide_nfs)
{
	TRUSTED("1 2 0:50 / /n rw - nfs4 s:/e rw,vers=4.2,hard,local_lock=none,addr=1.2.3.4");
	TRUSTED("1 2 0:50 / /n rw - nfs s:/e rw,vers=3,hard");
	TRUSTED("1 2 0:50 / /n rw - nfs s:/e rw,vers=3,local_lock=flock");
	REFUSED("1 2 0:50 / /n rw - nfs s:/e rw,vers=3,nolock", "nolock");
	REFUSED("1 2 0:50 / /n rw - nfs4 s:/e rw,local_lock=posix", "local_lock=posix");
	REFUSED("1 2 0:50 / /n rw - nfs s:/e rw,local_lock=all", "local_lock=all");
}

Test(clusterfs, decide_lustre_gfs2)
{
	TRUSTED("1 2 0:60 / /l rw - lustre 10.0.0.1@tcp:/fs rw,flock,lazystatfs");
	REFUSED("1 2 0:60 / /l rw - lustre 10.0.0.1@tcp:/fs rw,localflock", "localflock");
	REFUSED("1 2 0:60 / /l rw - lustre 10.0.0.1@tcp:/fs rw,lazystatfs", "without flock");
	TRUSTED("1 2 253:3 / /g rw - gfs2 /dev/vg/g rw,relatime");
	REFUSED("1 2 253:3 / /g rw - gfs2 /dev/vg/g rw,localflocks", "localflocks");
}

Test(clusterfs, decide_others)
{
	TRUSTED("1 2 0:70 / /c rw - ceph 10.0.0.1:/ rw,name=admin");
	TRUSTED("1 2 0:71 / /gl rw - fuse.glusterfs localhost:/v rw,user_id=0");
	TRUSTED("1 2 0:72 / /gp rw - gpfs gpfs0 rw");
	REFUSED("1 2 0:73 / /s rw - fuse.sshfs h:/ rw,user_id=0", "FUSE");
	REFUSED("1 2 0:74 / /x rw - fuse x rw", "FUSE");
	REFUSED("1 2 0:27 / /dev/shm rw - tmpfs tmpfs rw", "tmpfs is not a cluster");
	REFUSED("1 2 8:1 / / rw - ext4 /dev/sda1 rw", "ext4");
	REFUSED("1 2 0:40 / /z rw - zfs pool/z rw", "zfs");
}

Test(clusterfs, decide_trusted_list)
{
	char w[400];

	cr_assert_eq(ok("1 2 0:27 / /dev/shm rw - tmpfs tmpfs rw", "tmpfs,ext4", w, sizeof w), 1);
	cr_assert_eq(ok("1 2 8:1 / / rw - ext4 /dev/sda1 rw", "tmpfs,ext4", w, sizeof w), 1);
	cr_assert_eq(ok("1 2 8:1 / / rw - ext4 /dev/sda1 rw", "ext", w, sizeof w), 0,
		     "a prefix of a name is not the name");
	cr_assert_eq(ok("1 2 8:1 / / rw - ext4 /dev/sda1 rw", "ext4x", w, sizeof w), 0);
	/* The list trusts what the user names, even an NFS mount with
	 * nolock: it is the user's word (configuration.md says so). */
	cr_assert_eq(ok("1 2 0:50 / /n rw - nfs s:/e rw,nolock", "nfs", w, sizeof w), 1);
}

/* Which file systems make flock() a whole-file lock of the lock manager
 * (the library then makes it on the data space, cluster.c). */
Test(clusterfs, flock_posix)
{
	static const struct { const char *line; int want; } c[] = {
		{ "1 2 0:50 / /n rw - nfs4 s:/e rw,vers=4.2,local_lock=none", 1 },
		{ "1 2 0:50 / /n rw - nfs s:/e rw,vers=3,local_lock=flock", 0 },
		{ "1 2 0:50 / /n rw - nfs s:/e rw,vers=3,local_lock=all", 0 },
		{ "1 2 0:60 / /l rw - lustre 10.0.0.1@tcp:/fs rw,flock", 1 },
		{ "1 2 0:60 / /l rw - lustre 10.0.0.1@tcp:/fs rw,localflock", 0 },
		{ "1 2 0:61 / /g rw - fuse.glusterfs h:/v rw,user_id=0", 1 },
		{ "1 2 0:62 / /c rw - ceph 1.2.3.4:/ rw,name=x", 0 },
		{ "1 2 253:1 / /x rw - gfs2 /dev/dm-1 rw", 0 },
		{ "1 2 0:26 / /dev/shm rw - tmpfs tmpfs rw", 0 },
	};

	for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
		struct rs_mnt m = parse_ok(c[i].line);

		cr_expect_eq(rs_mnt_flock_posix(&m), c[i].want, "%s", c[i].line);
	}
}

/* The application's lock ranges kept inside the data space [0, L). */
Test(clusterfs, lock_clamp)
{
	const int64_t L = INT64_C(1) << 61;
	static const struct {
		short whence;
		int64_t start, len, base;
		int rewritten;
		int64_t want_start, want_len;
	} c[] = {
		{ SEEK_SET, 0, 0, 0, 1, 0, INT64_C(1) << 61 },          /* whole file */
		{ SEEK_SET, 100, 0, 0, 1, 100, (INT64_C(1) << 61) - 100 },
		{ SEEK_CUR, 5, 0, 4096, 1, 4101, (INT64_C(1) << 61) - 4101 },
		{ SEEK_END, -10, 0, 1000, 1, 990, (INT64_C(1) << 61) - 990 },
		{ SEEK_SET, 0, 100, 0, 0, 0, 100 },                     /* inside */
		{ SEEK_SET, (INT64_C(1) << 61) - 1, 1, 0, 0, (INT64_C(1) << 61) - 1, 1 },
		{ SEEK_SET, (INT64_C(1) << 61) - 1, 2, 0, 1, (INT64_C(1) << 61) - 1, 1 },
		{ SEEK_SET, INT64_C(1) << 61, 0, 0, 0, INT64_C(1) << 61, 0 }, /* past: as is */
		{ SEEK_SET, (INT64_C(1) << 61) + 10, -20, 0, 1, (INT64_C(1) << 61) - 10, 10 },
		{ SEEK_SET, -1, 0, 0, 0, -1, 0 },                       /* EINVAL: as is */
		{ SEEK_SET, 5, -10, 0, 0, 5, -10 },                     /* EINVAL: as is */
		{ SEEK_CUR, INT64_MAX, 0, 1, 0, INT64_MAX, 0 },         /* EOVERFLOW */
		{ SEEK_SET, 10, INT64_MAX, 0, 0, 10, INT64_MAX },       /* EOVERFLOW */
		{ 7, 0, 0, 0, 0, 0, 0 },                                /* bad whence */
	};

	for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
		struct flock fl = { .l_type = F_WRLCK, .l_whence = c[i].whence,
				    .l_start = c[i].start, .l_len = c[i].len };
		int r = rs_lock_clamp(&fl, c[i].base, L);

		cr_expect_eq(r, c[i].rewritten, "case %zu: %d", i, r);
		cr_expect_eq(fl.l_start, c[i].want_start, "case %zu: start %lld", i,
			     (long long)fl.l_start);
		cr_expect_eq(fl.l_len, c[i].want_len, "case %zu: len %lld", i, (long long)fl.l_len);
		cr_expect_eq(fl.l_whence, r ? SEEK_SET : c[i].whence, "case %zu", i);
	}
	/* F_GETLK answers: only a lock ending exactly at L was "to the end". */
	{
		struct flock a = { .l_type = F_WRLCK, .l_start = 100, .l_len = L - 100 };
		struct flock b = { .l_type = F_WRLCK, .l_start = 100, .l_len = L - 101 };
		struct flock u = { .l_type = F_UNLCK, .l_start = 0, .l_len = L };

		rs_lock_unclamp(&a, L);
		rs_lock_unclamp(&b, L);
		rs_lock_unclamp(&u, L);
		cr_expect_eq(a.l_len, 0);
		cr_expect_eq(b.l_len, L - 101);
		cr_expect_eq(u.l_len, L);
	}
}

Test(clusterfs, find_self)
{
	struct stat st;
	struct rs_mnt m;

	cr_assert_eq(stat("/dev/shm", &st), 0);
	cr_assert_eq(rs_mnt_find("/proc/self/mountinfo", major(st.st_dev), minor(st.st_dev), &m), 0);
	cr_assert_str_eq(m.point, "/dev/shm");
	cr_assert_str_eq(m.fstype, "tmpfs");
	cr_assert_eq(rs_mnt_find("/proc/self/mountinfo", 4095, 1048575, &m), -1);
}

static const char *cfg_scope, *cfg_fs;

static const char *get_cfg(const char *name)
{
	if (strcmp(name, "RANGESHIM_SCOPE") == 0)
		return cfg_scope;
	if (strcmp(name, "RANGESHIM_CLUSTER_FS") == 0)
		return cfg_fs;
	return NULL;
}

Test(clusterfs, config_parse)
{
	struct rs_config c;

	cfg_scope = "cluster";
	cfg_fs = "tmpfs,ext4,fuse.glusterfs";
	rs_config_load(&c, get_cfg);
	cr_assert_eq(c.scope, RS_SCOPE_CLUSTER);
	cr_assert_str_eq(c.cluster_fs, "tmpfs,ext4,fuse.glusterfs");
	cfg_scope = NULL;
	cfg_fs = NULL;
	rs_config_load(&c, get_cfg);
	cr_assert_eq(c.scope, RS_SCOPE_NODE, "node stays the default");
	cr_assert_str_eq(c.cluster_fs, "");
	static const char *const bad[] = { "tmpfs ext4", ",tmpfs", "tmpfs,", "a,,b", "x;y" };

	cfg_scope = "cluster";
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		cfg_fs = bad[i];
		rs_config_load(&c, get_cfg);
		cr_assert_str_eq(c.cluster_fs, "", "'%s' was accepted", bad[i]);
		cr_assert_eq(c.scope, RS_SCOPE_CLUSTER);
	}
}

/* Lines of out containing needle. */
static int count_lines(const char *out, const char *needle)
{
	int n = 0;

	for (const char *p = out; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

/* The number after counter name in the stats summary, or -1. */
static long long summary_num(const char *out, const char *name)
{
	const char *p = strstr(out, name);

	return p ? strtoll(p + strlen(name), NULL, 10) : -1;
}

/* dd reads path (one read: one node grant) with the shim preloaded. */
static void run_dd(struct rs_run *r, const char *path, const char *scope, const char *fs)
{
	char inarg[PATH_MAX + 8], shm[64], sc[64], cf[128];
	char *argv[] = { "/bin/dd", inarg, "of=/dev/null", "status=none", NULL };
	const char *env[] = { shm, sc, cf, "RANGESHIM_STATS=1", NULL };

	snprintf(inarg, sizeof inarg, "if=%s", path);
	snprintf(shm, sizeof shm, "RANGESHIM_SHM=/rs-clfs.%d", (int)getpid());
	snprintf(sc, sizeof sc, "RANGESHIM_SCOPE=%s", scope);
	snprintf(cf, sizeof cf, "RANGESHIM_CLUSTER_FS=%s", fs);
	cr_assert_eq(rs_run(r, argv, env, 1, 20), 0, "dd failed: %s", r->out);
}

Test(clusterfs, refuse_tmpfs)
{
	char path[PATH_MAX], shm[64];
	static struct rs_run r;
	int fd;

	snprintf(path, sizeof path, "/dev/shm/rs-clfs-data.%d", (int)getpid());
	snprintf(shm, sizeof shm, "/dev/shm/rs-clfs.%d", (int)getpid());
	fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
	cr_assert(fd >= 0);
	cr_assert_eq(write(fd, "data\n", 5), 5);
	close(fd);

	run_dd(&r, path, "cluster", "");
	cr_expect_eq(count_lines(r.out, "cluster scope:"), 1, "not one line: %s", r.out);
	cr_expect(strstr(r.out, "files on /dev/shm keep node scope: tmpfs is not a cluster file system"),
		  "the line does not say why: %s", r.out);
	cr_expect_geq(summary_num(r.out, "node_acquires "), 1, "node scope not kept: %s", r.out);

	/* Controls: node scope says nothing; a trusted tmpfs is not refused. */
	run_dd(&r, path, "node", "");
	cr_expect_eq(count_lines(r.out, "cluster scope:"), 0, "%s", r.out);
	run_dd(&r, path, "cluster", "tmpfs");
	cr_expect(!strstr(r.out, "files on /dev/shm keep node scope"), "trusted tmpfs refused: %s", r.out);
	unlink(path);
	unlink(shm);
}
