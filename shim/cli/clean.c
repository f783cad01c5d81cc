/* rangeshim clean: remove a node table no live process uses. */
#include "table.h"


/*
 * The pids of the processes that have the file open, from /proc: for a
 * table whose slots cannot be read, the kernel's word is the only one.
 * Returns how many were found (at most max are stored).
 */
static unsigned openers(const struct stat *seg, int32_t *out, unsigned max)
{
	unsigned n = 0;
	struct dirent *e;
	DIR *d = opendir("/proc");

	while (d && (e = readdir(d))) {
		struct fd_list l = { 0 };
		char *end;
		long pid = strtol(e->d_name, &end, 10);

		/* Not us: we have it open to look at it. */
		if (*end || end == e->d_name || pid <= 0 || pid > INT32_MAX || pid == getpid())
			continue;
		load_fds(&l, (int32_t)pid);
		for (size_t i = 0; i < l.n; i++) {
			if (l.v[i].dev != seg->st_dev || l.v[i].ino != seg->st_ino)
				continue;
			if (n < max)
				out[n] = (int32_t)pid;
			n++;
			break;
		}
		free(l.v);
	}
	if (d)
		closedir(d);
	return n;
}

/*
 * flock(LOCK_EX), as rs_seg_attach holds it while it creates and
 * initialises a table: holding it, we never judge a table that is being
 * set up.  Bounded: a process stuck holding it must not hang us.
 */
static int lock_setup(int fd)
{
	const struct timespec pause = { 0, 10 * 1000 * 1000 };

	for (int i = 0; i < 200; i++) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			return 0;
		if (errno != EWOULDBLOCK && errno != EINTR)
			return -1;
		nanosleep(&pause, NULL);
	}
	return -1;
}

/* Who is attached to the table behind fd: every slot byte is probed for
 * its liveness lock whatever the slots say (what they say is untrusted);
 * pids come from the copy, if it is readable. */
struct census {
	bool readable;
	unsigned nlive, nstale, ngrants, npids;
	int32_t pids[RS_NPROC];
	char why[256];
};

static void take_census(int fd, struct rs_segment *seg, struct census *c)
{
	struct rs_seg_map map = { .fd = fd, .fd_slot = NULL };

	memset(c, 0, sizeof(*c));
	c->readable = seg && read_table(fd, seg, c->why, sizeof(c->why)) == 0;
	for (uint32_t p = 0; p < RS_NPROC; p++) {
		if (rs_seg_alive(&map, p)) {
			c->nlive++;
			if (c->readable && seg->procs[p].pid > 0)
				c->pids[c->npids++] = seg->procs[p].pid;
		} else if (c->readable && atomic_load(&seg->procs[p].state) == RS_PROC_LIVE) {
			c->nstale++;
		}
	}
	for (uint32_t i = 0; c->readable && i < RS_NGRANT; i++)
		c->ngrants += atomic_load(&seg->grants[i].state) != RS_G_FREE;
}

/*
 * The refusal: who is alive, in what state, and what to do.  A table is
 * never removed under a live process, --force or not: the process would
 * keep the old table, processes started later would make a new one, and
 * the two groups would not exclude each other.
 */
static void refuse_live(const char *path, const struct stat *st, struct census *c)
{
	int32_t *pids = c->pids;
	unsigned n = c->npids;
	char desc[256];

	if (!n)   /* an unreadable table: ask the kernel who has it open */
		n = openers(st, pids, RS_NPROC);
	fprintf(stderr, "rangeshim: %s is in use by %u live process(es); not removing it "
		"(not even with --force: they would keep this table while processes started "
		"later made a new one, and the two groups would not exclude each other):\n",
		path, c->nlive);
	for (unsigned i = 0; i < n && i < RS_NPROC; i++) {
		rs_nt_describe(pids[i], desc, sizeof(desc));
		fprintf(stderr, "  %s\n", desc);
	}
	if (!n)
		fputs("  (their pids are not visible from here)\n", stderr);
	fputs("Let them finish, or end them (a stopped one: kill -CONT PID resumes it, "
	      "kill PID ends it), then run 'rangeshim clean' again; the slots of dead "
	      "processes do not count.\n", stderr);
}

/* Put a table we moved aside back under its name.  If a process created
 * a new table there meanwhile, swap them: the new one's processes find
 * their table no longer named and attach again (rs_nt_register), unless
 * one had finished attaching already, which is said loudly. */
static void put_back(const char *aside, const char *path)
{
	struct rs_seg_map nm = { .fd = -1 };
	unsigned nlive = 0;

	if (renameat2(AT_FDCWD, aside, AT_FDCWD, path, RENAME_NOREPLACE) == 0)
		return;
	if (errno != EEXIST || renameat2(AT_FDCWD, aside, AT_FDCWD, path, RENAME_EXCHANGE) < 0) {
		fprintf(stderr, "rangeshim: cannot put %s back from %s: %s; its processes no "
			"longer exclude new ones until it is moved back (mv %s %s)\n",
			path, aside, strerror(errno), aside, path);
		return;
	}
	nm.fd = open(aside, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	for (uint32_t p = 0; nm.fd >= 0 && p < RS_NPROC; p++)
		nlive += (unsigned)rs_seg_alive(&nm, p);
	if (nm.fd >= 0)
		close(nm.fd);
	if (nlive)
		fprintf(stderr, "rangeshim: %u process(es) attached to a table created at %s in "
			"the moment it was aside; they do not exclude the processes of %s: "
			"restart them\n", nlive, path, path);
	unlink(aside);
}

/* May the table (open at fd, *st its stat) be removed, as seen from here:
 * ours, not being set up, no live process, no other lock unless --force?
 * Leaves *seg allocated for the second census, *c and *foreign filled.
 * 0, or 1 having said why not. */
static int may_remove(const struct table_opts *o, int fd, struct stat *st,
		      struct rs_segment **seg, struct census *c, bool *foreign)
{
	if (fstat(fd, st) < 0 || !ours(st)) {
		fprintf(stderr, "rangeshim: %s is not a regular file owned by uid %u; "
			"not removing\n", o->path, (unsigned)geteuid());
		return 1;
	}
	if (lock_setup(fd) < 0) {
		fprintf(stderr, "rangeshim: %s stays locked by a process setting it up; "
			"not removing\n", o->path);
		return 1;
	}
	*seg = aligned_alloc(_Alignof(struct rs_segment), sizeof(**seg));
	take_census(fd, *seg, c);
	if (c->nlive) {
		refuse_live(o->path, st, c);
		return 1;
	}
	/* Some other lock, on no slot's liveness byte: not a process attached
	 * to this table (a foreign lock, or another layout's).  --force
	 * removes the table anyway. */
	*foreign = file_locked(fd);
	if (*foreign && !o->force) {
		fprintf(stderr, "rangeshim: %s is locked by another process, though no process "
			"is attached to it as a table; not removing (--force removes it)\n", o->path);
		return 1;
	}
	return 0;
}

/*
 * A process may be attaching right now: it claims a slot, then checks
 * that the name still leads to its file (rs_nt_register).  So move the
 * file aside first, look again, and only then unlink: a process that
 * claimed before the move is seen now, and one that claims after it
 * finds its file unnamed and attaches again, to a new table.
 * The exit status; *removed when we unlinked it.
 */
static int remove_aside(const struct table_opts *o, int fd, const struct stat *st,
			struct rs_segment *seg, struct census *c, bool *removed)
{
	char aside[sizeof(o->path) + 64];
	const char *slash;
	struct stat now;

	*removed = false;
	slash = strrchr(o->path, '/');
	snprintf(aside, sizeof(aside), "%.*s/.rangeshim-clean.%d.%llx",
		 (int)(slash ? slash - o->path : 0), o->path, (int)getpid(),
		 (unsigned long long)realtime_now_ns());
	if (renameat2(AT_FDCWD, o->path, AT_FDCWD, aside, RENAME_NOREPLACE) < 0) {
		if (errno == ENOENT) {
			printf("nothing to clean: %s was removed meanwhile\n", o->path);
			return 0;
		}
		fprintf(stderr, "rangeshim: cannot move %s aside to remove it: %s; "
			"not removing\n", o->path, strerror(errno));
		return 1;
	}
	/* Remove the file we examined, not one created under its name since. */
	if (lstat(aside, &now) < 0 || now.st_dev != st->st_dev || now.st_ino != st->st_ino) {
		put_back(aside, o->path);
		fprintf(stderr, "rangeshim: %s was replaced while we looked at it; "
			"not removing\n", o->path);
		return 1;
	}
	take_census(fd, seg, c);
	if (c->nlive || (file_locked(fd) && !o->force)) {
		put_back(aside, o->path);
		if (c->nlive)
			refuse_live(o->path, st, c);
		else
			fprintf(stderr, "rangeshim: %s was locked by another process meanwhile; "
				"not removing\n", o->path);
		return 1;
	}
	if (unlink(aside) < 0) {
		fprintf(stderr, "rangeshim: cannot remove %s (moved aside from %s): %s\n",
			aside, o->path, strerror(errno));
		return 1;
	}
	*removed = true;
	return 0;
}

int cmd_clean(const struct command *cmd, int argc, char **argv)
{
	struct table_opts o;
	struct stat st;
	struct census c;
	int fd = -1;
	struct rs_segment *seg = NULL;
	bool foreign, removed;
	int rc = parse_table_opts(cmd, argc, argv, &o);

	if (rc >= 0)
		return rc;
	rc = open_table(o.path, &fd);
	if (rc == 1) {
		printf("nothing to clean: no node lock table at %s\n", o.path);
		return 0;
	}
	if (rc < 0)
		return 1;
	rc = may_remove(&o, fd, &st, &seg, &c, &foreign);
	if (rc)
		goto out;
	rc = remove_aside(&o, fd, &st, seg, &c, &removed);
	if (!removed)
		goto out;
	if (!c.readable)
		printf("removed %s: an unusable table (%s), and no process was attached%s\n",
		       o.path, c.why, foreign ? " (another lock on it was overridden by --force)" : "");
	else if (c.nstale || c.ngrants)
		printf("removed %s: no live process; it still listed %u dead process(es) "
		       "and %u grant(s)\n", o.path, c.nstale, c.ngrants);
	else
		printf("removed %s: no process was attached%s\n", o.path,
		       foreign ? " (another lock on it was overridden by --force)" : "");
out:
	free(seg);
	close(fd);
	return rc;
}
