/*
 * Which file systems have cluster-wide locks: cluster scope refuses the
 * others, whose locks would exclude nothing beyond one node.  The facts
 * (docs/design.md (i)):
 *
 *   nfs, nfs4      NLM or NFSv4 lock state on the server, unless mounted
 *                  nolock or local_lock=posix|all (then locks are local;
 *                  local_lock=flock and =none leave fcntl locks remote)
 *   lustre         LDLM locks only with -o flock; localflock and the
 *                  default (noflock) keep them local or refuse them
 *   gfs2           plocks through dlm_controld, unless localflocks
 *   ceph           MDS-held locks (the kernel client; fuse.ceph-fuse too)
 *   fuse.glusterfs the locks translator on the bricks
 *   gpfs           its token manager
 *
 * Everything else is refused: local file systems (their locks are this
 * kernel's only), and unknown FUSE file systems (a FUSE daemon may keep
 * locks to itself).  RANGESHIM_CLUSTER_FS adds types the user trusts;
 * tests use it to run simulated nodes on tmpfs and ext4.  The trust is
 * the user's word: nothing here can check that a file system's locks
 * reach other machines, only that its options do not say they do not.
 */
#include "clusterfs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "rawsyscall.h"

/* Copy the next space-separated field of *p into out; 0, or -1 if none. */
static int field(const char **p, char *out, size_t len)
{
	const char *s = *p, *e;
	size_t n;

	while (*s == ' ')
		s++;
	if (!*s || *s == '\n')
		return -1;
	for (e = s; *e && *e != ' ' && *e != '\n'; e++)
		;
	n = (size_t)(e - s);
	if (out) {
		if (n >= len)
			n = len - 1;
		memcpy(out, s, n);
		out[n] = '\0';
	}
	*p = e;
	return 0;
}

int rs_mnt_parse(const char *line, struct rs_mnt *m)
{
	const char *p = line;
	char tok[512], mnt_opts[256], super_opts[256];
	int sep = 0;

	memset(m, 0, sizeof(*m));
	/* mount ID, parent ID, major:minor, root, mount point, options */
	if (field(&p, NULL, 0) < 0 || field(&p, NULL, 0) < 0 || field(&p, tok, sizeof tok) < 0 ||
	    sscanf(tok, "%u:%u", &m->major, &m->minor) != 2 || field(&p, NULL, 0) < 0 ||
	    field(&p, m->point, sizeof m->point) < 0 || field(&p, mnt_opts, sizeof mnt_opts) < 0)
		return -1;
	/* Optional fields, up to the lone "-". */
	while (field(&p, tok, sizeof tok) == 0) {
		if (strcmp(tok, "-") == 0) {
			sep = 1;
			break;
		}
	}
	if (!sep || field(&p, m->fstype, sizeof m->fstype) < 0 || field(&p, NULL, 0) < 0)
		return -1;
	if (field(&p, super_opts, sizeof super_opts) < 0)
		super_opts[0] = '\0';
	snprintf(m->opts, sizeof m->opts, "%s,%s", mnt_opts, super_opts);
	return 0;
}

/* Is name=value, or name alone when value is NULL, one of opts' entries? */
static int has(const char *opts, const char *name, const char *value)
{
	size_t n = strlen(name);

	for (const char *s = opts; *s;) {
		const char *e = strchr(s, ',');
		size_t len = e ? (size_t)(e - s) : strlen(s);

		if (len >= n && strncmp(s, name, n) == 0) {
			if (!value && (len == n || s[n] == '='))
				return 1;
			if (value && s[n] == '=' && len - n - 1 == strlen(value) &&
			    strncmp(s + n + 1, value, len - n - 1) == 0)
				return 1;
		}
		if (!e)
			break;
		s = e + 1;
	}
	return 0;
}

int rs_mnt_has_opt(const char *opts, const char *name)
{
	return has(opts, name, NULL);
}

static int listed(const char *list, const char *type)
{
	return list && *list && has(list, type, NULL);
}

int rs_mnt_cluster_ok(const struct rs_mnt *m, const char *trusted, char *why, size_t whylen)
{
	const char *t = m->fstype;

	/* The user's word first: it is how simulated nodes run on tmpfs. */
	if (listed(trusted, t))
		return 1;
	if (strcmp(t, "nfs") == 0 || strcmp(t, "nfs4") == 0) {
		if (has(m->opts, "nolock", NULL)) {
			snprintf(why, whylen, "%s is mounted nolock: its locks are local to this machine", t);
			return 0;
		}
		if (has(m->opts, "local_lock", "posix") || has(m->opts, "local_lock", "all")) {
			snprintf(why, whylen, "%s is mounted local_lock=%s: its fcntl locks are local to "
				 "this machine", t, has(m->opts, "local_lock", "all") ? "all" : "posix");
			return 0;
		}
		return 1;
	}
	if (strcmp(t, "lustre") == 0) {
		if (has(m->opts, "flock", NULL))
			return 1;
		snprintf(why, whylen, "lustre is mounted without flock (%s): its locks are not "
			 "cluster-wide", has(m->opts, "localflock", NULL) ? "localflock" : "the default");
		return 0;
	}
	if (strcmp(t, "gfs2") == 0) {
		if (!has(m->opts, "localflocks", NULL))
			return 1;
		snprintf(why, whylen, "gfs2 is mounted localflocks: its locks are local to this machine");
		return 0;
	}
	if (strcmp(t, "ceph") == 0 || strcmp(t, "fuse.ceph-fuse") == 0 ||
	    strcmp(t, "fuse.glusterfs") == 0 || strcmp(t, "gpfs") == 0)
		return 1;
	if (strncmp(t, "fuse", 4) == 0)
		snprintf(why, whylen, "%s is a FUSE file system not known to forward locks to other "
			 "machines", t);
	else
		snprintf(why, whylen, "%s is not a cluster file system known to rangeshim: its locks "
			 "are this machine's only", t);
	return 0;
}

int rs_mnt_flock_posix(const struct rs_mnt *m)
{
	const char *t = m->fstype;

	if (strcmp(t, "nfs") == 0 || strcmp(t, "nfs4") == 0)
		return !has(m->opts, "local_lock", "flock") && !has(m->opts, "local_lock", "all");
	if (strcmp(t, "lustre") == 0)
		return has(m->opts, "flock", NULL);
	return strcmp(t, "fuse.glusterfs") == 0;
}

int rs_lock_clamp(struct flock *fl, int64_t base, int64_t limit)
{
	int64_t s, e;	/* inclusive, as fs/locks.c */

	if (fl->l_whence != SEEK_SET && fl->l_whence != SEEK_CUR && fl->l_whence != SEEK_END)
		return 0;
	if (fl->l_start > INT64_MAX - base)
		return 0;
	s = base + fl->l_start;
	if (s < 0)
		return 0;
	if (fl->l_len > 0) {
		if (fl->l_len - 1 > INT64_MAX - s)
			return 0;
		e = s + (fl->l_len - 1);
	} else if (fl->l_len < 0) {
		if (s + fl->l_len < 0)
			return 0;
		e = s - 1;
		s += fl->l_len;
	} else {
		e = INT64_MAX;
	}
	if (e < limit || s >= limit)
		return 0;
	fl->l_whence = SEEK_SET;
	fl->l_start = (off_t)s;
	fl->l_len = (off_t)(limit - s);
	return 1;
}

void rs_lock_unclamp(struct flock *fl, int64_t limit)
{
	if (fl->l_type != F_UNLCK && fl->l_len > 0 && fl->l_start <= limit - fl->l_len &&
	    fl->l_start + fl->l_len == limit)
		fl->l_len = 0;
}

/* Read with raw system calls: the library's own open/read/fopen are
 * wrappers (and -Bsymbolic-functions binds our calls to them). */
int rs_mnt_find(const char *path, unsigned major, unsigned minor, struct rs_mnt *m)
{
	char buf[8192];
	struct rs_mnt cur;
	size_t have = 0;
	int found = -1, eof = 0;
	int fd = (int)rs_sys(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	while (!eof || have) {
		char *nl;

		if (!eof && have < sizeof buf - 1) {
			long r = rs_sys(SYS_read, fd, buf + have, sizeof buf - 1 - have);

			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				eof = 1;
			else
				have += (size_t)r;
		}
		buf[have] = '\0';
		nl = strchr(buf, '\n');
		if (!nl) {
			if (!eof && have < sizeof buf - 1)
				continue;
			nl = buf + have;	/* the last line, or one too long: cut */
		}
		*nl = '\0';
		/* The last match: a later mount over the same device (a bind
		 * mount remounted) carries the options in force. */
		if (rs_mnt_parse(buf, &cur) == 0 && cur.major == major && cur.minor == minor) {
			*m = cur;
			found = 0;
		}
		if (nl == buf + have) {
			have = 0;
		} else {
			have -= (size_t)(nl + 1 - buf);
			memmove(buf, nl + 1, have);
		}
	}
	rs_sys(SYS_close, fd);
	return found;
}
