/* The one reader of the node lock table, for locks and clean (see table.h). */
#include "table.h"

#include <sys/statvfs.h>

/* The library's rule (config.c) on top of the segment code's: "/." and
 * "/.." would name /dev/shm itself or its parent. */
static bool shm_name_ok(const char *name)
{
	return strcmp(name, "/.") != 0 && strcmp(name, "/..") != 0;
}

/*
 * Options of locks and clean.  -1 when the caller should go on, otherwise
 * the exit status.  The default name is the library's (config.c): a bad
 * RANGESHIM_SHM falls back to it there too, so we show the table the
 * programs really use.
 */
int parse_table_opts(const struct command *cmd, int argc, char **argv,
			    struct table_opts *o)
{
	bool is_locks = !strcmp(cmd->name, "locks");
	const char *name = NULL, *env = getenv("RANGESHIM_SHM");
	char dflt[64], msg[96], *end;
	int c;

	memset(o, 0, sizeof(*o));
	optind = 1;
	while ((c = iface_getopt(cmd->name, argc, argv)) != -1) {
		switch (c) {
		case 'h':
			iface_help(cmd->name, stdout);
			return 0;
		case OPT_SHM:
			name = optarg;
			break;
		case 'J':
			o->json = true;
			break;
		case OPT_FORCE:
			o->force = true;
			break;
		case 'p':
			errno = 0;
			o->pid = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || o->pid <= 0 || o->pid > INT32_MAX)
				return usage_error("bad -p '%s' (a process id, e.g. 1234)", optarg);
			break;
		case 'o':
			o->cols = optarg;
			break;
		case 'u':
			/* lslocks' --notruncate: locks never truncates. */
			break;
		case 'b':
			o->bytes = true;
			break;
		case 'H':
			o->list_columns = true;
			break;
		case OPT_OUTPUT_ALL:
			o->output_all = true;
			break;
		case 'n':
			o->noheadings = true;
			break;
		case 'i':
			o->noinaccessible = true;
			break;
		case 'r':
			o->raw = true;
			break;
		case OPT_WATCH:
			/* A tenth of a second at least, so that a typo cannot
			 * spin a core; a day at most. */
			errno = 0;
			o->watch = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(o->watch >= 0.1 && o->watch <= 86400))
				return usage_error("bad --watch '%s' (seconds, from 0.1 to 86400)",
						   optarg);
			break;
		default:
			return getopt_error(c, argv);
		}
	}
	if (is_locks && o->json && (o->cols || o->raw || o->noheadings || o->output_all))
		return usage_error("%s", "--json takes no -o, --output-all, --raw or --noheadings");
	if (o->cols && o->output_all)
		return usage_error("%s", "-o and --output-all exclude each other");
	if (is_locks) {
		o->paths = argv + optind;
		o->npaths = argc - optind;
	} else if (optind < argc) {
		snprintf(msg, sizeof(msg), "%s: unexpected argument '%%s'", cmd->name);
		return usage_error(msg, argv[optind]);
	}
	snprintf(dflt, sizeof(dflt), "/rangeshim-%u", (unsigned)getuid());
	if (!name && env && *env && shm_name_ok(env) &&
	    rs_seg_path(env, o->path, sizeof(o->path)) == 0)
		name = env;
	else if (!name && env && *env)
		fprintf(stderr, "rangeshim: RANGESHIM_SHM='%s' is not a name like %s; "
			"using the default\n", env, dflt);
	if (!name)
		name = "";	/* the library's default table (segment.c) */
	if ((*name && !shm_name_ok(name)) || rs_seg_path(name, o->path, sizeof(o->path)) < 0)
		return usage_error("bad --shm '%s' (use a name like /rangeshim-1000)", name);
	snprintf(o->name, sizeof(o->name), "%s", name);
	return -1;
}

/*
 * Open the segment file read-only: never create it (a listing must not
 * leave a table behind), never follow a symlink, never block on a FIFO.
 * 0 with *fd set, 1 if there is none, -1 after printing an error.
 */
int open_table(const char *path, int *fd)
{
	*fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (*fd >= 0)
		return 0;
	if (errno == ENOENT)
		return 1;
	if (errno == ELOOP)
		fprintf(stderr, "rangeshim: %s is a symbolic link, not a node lock table\n", path);
	else
		fprintf(stderr, "rangeshim: cannot open %s: %s\n", path, strerror(errno));
	return -1;
}

/* The file checks rs_seg_attach makes: a file the shim refuses is no table. */
static int check_file(const struct stat *st, char *why, size_t whylen)
{
	if (!S_ISREG(st->st_mode))
		snprintf(why, whylen, "not a regular file");
	else if (st->st_uid != geteuid())
		snprintf(why, whylen, "owned by uid %u, not by us (uid %u)",
			 (unsigned)st->st_uid, (unsigned)geteuid());
	else if ((st->st_mode & 07777) != 0600)
		snprintf(why, whylen, "mode %04o, not 0600", (unsigned)(st->st_mode & 07777));
	else if (st->st_size != (off_t)sizeof(struct rs_segment))
		snprintf(why, whylen, "size %lld, not the %zu bytes of this version's layout",
			 (long long)st->st_size, sizeof(struct rs_segment));
	else
		return 0;
	return -1;
}

/*
 * A table that was never set up is empty (the library allocates it whole
 * before it writes anything: segment.c, back()), or, made by an older
 * build with holes, has fewer bytes allocated than its size.  Both mean
 * the file system had no room when it was made; say so, with what is free
 * now, rather than "bad magic number".  0 if neither.
 */
static int unbacked(int fd, const struct stat *st, char *why, size_t whylen)
{
	unsigned long long have = (unsigned long long)st->st_blocks * 512, free_b = 0;
	struct statvfs vfs;

	if (st->st_size != 0 && have >= (unsigned long long)st->st_size)
		return 0;
	if (fstatvfs(fd, &vfs) == 0)
		free_b = (unsigned long long)vfs.f_bavail * vfs.f_frsize;
	snprintf(why, whylen, "never set up: %llu of its %zu bytes are allocated, and its file "
		 "system has %llu bytes free (full when the table was made?)", have,
		 sizeof(struct rs_segment), free_b);
	return -1;
}

static ssize_t pread_all(int fd, void *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pread(fd, (char *)buf + done, len - done, (off_t)done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			break;
		done += (size_t)n;
	}
	return (ssize_t)done;
}

/*
 * Copy the table into seg and validate the copy.  A copy taken while
 * processes update the table can be torn (a grant caught between its
 * fields and its state word, a file being initialised), so only a failure
 * that persists over a few reads is reported as corruption.
 */
int read_table(int fd, struct rs_segment *seg, char *why, size_t whylen)
{
	for (int tries = 0;; tries++) {
		const struct timespec pause = { 0, 10 * 1000 * 1000 };
		struct stat st;
		ssize_t n;

		if (fstat(fd, &st) < 0) {
			snprintf(why, whylen, "fstat: %s", strerror(errno));
			return -1;
		}
		/* A creator may be between its open and its fallocate: retried. */
		if (S_ISREG(st.st_mode) && unbacked(fd, &st, why, whylen) < 0) {
			/* why says it */
		} else if (check_file(&st, why, whylen) == 0) {
			n = pread_all(fd, seg, sizeof(*seg));
			if (n < 0) {
				snprintf(why, whylen, "read: %s", strerror(errno));
				return -1;
			}
			if ((size_t)n != sizeof(*seg))
				snprintf(why, whylen, "shrank to %zd bytes while being read", n);
			else if (rs_seg_check(seg, why, whylen) == 0)
				return 0;
		}
		if (tries == 4)
			return -1;
		nanosleep(&pause, NULL);
	}
}


/*
 * The command and state of an attached process, from /proc/PID/stat.  A
 * process whose liveness byte is free is "dead" whatever /proc says: its
 * pid may name some other process by now.  "?" when /proc has no word on
 * a live one (another pid namespace, hidepid).
 */
void proc_info(struct proc_info *pi, int32_t pid, bool alive)
{
	char comm[64];

	if (!alive) {
		pi->state = "dead";
		/* Bare: the lines that quote it put it in parentheses. */
		snprintf(pi->comm, sizeof(pi->comm), "dead");
		return;
	}
	switch (rs_nt_proc_stat(pid, comm, sizeof(comm))) {
	case 0: pi->state = "?"; break;
	case 'R': pi->state = "running"; break;
	case 'S': pi->state = "sleeping"; break;
	case 'D': pi->state = "disk"; break;      /* uninterruptible */
	case 'I': pi->state = "idle"; break;
	case 'T': pi->state = "stopped"; break;
	case 't': pi->state = "traced"; break;    /* stopped by a debugger */
	case 'Z': pi->state = "zombie"; break;
	case 'X': case 'x': pi->state = "dead"; break;
	default: pi->state = "alive"; break;
	}
	escape_text(comm, pi->comm, sizeof(pi->comm));
}

/* Open, copy and validate the table; 1 if there is none, -1 with why. */
int load_table(const char *path, struct table *t, char *why, size_t whylen)
{
	int rc;

	memset(t, 0, sizeof(*t));
	t->map.fd = -1;
	rc = open_table(path, &t->map.fd);
	if (rc != 0) {
		snprintf(why, whylen, "cannot open");
		return rc;
	}
	t->seg = aligned_alloc(_Alignof(struct rs_segment), sizeof(*t->seg));
	if (!t->seg) {
		snprintf(why, whylen, "%s", strerror(errno));
		return -1;
	}
	t->copied_ns = rs_nt_now_ns();
	if (read_table(t->map.fd, t->seg, why, whylen) < 0)
		return -1;
	for (uint32_t p = 0; p < RS_NPROC; p++) {
		t->alive[p] = atomic_load(&t->seg->procs[p].state) == RS_PROC_LIVE &&
			      rs_seg_alive(&t->map, p);
		proc_info(&t->proc[p], t->seg->procs[p].pid, t->alive[p]);
	}
	return 0;
}

void free_table(struct table *t)
{
	free(t->seg);
	if (t->map.fd >= 0)
		close(t->map.fd);
}

/* Only a plain file of ours can be something the shim made. */
bool ours(const struct stat *st)
{
	return S_ISREG(st->st_mode) && st->st_uid == geteuid();
}

/*
 * Is any byte of the file locked by another open file description?  The
 * shim's only byte locks on it are liveness locks, so this says "some
 * process is attached" for any layout, even one we cannot read.
 */
bool file_locked(int fd)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };

	/* If we cannot tell, say locked: keeping a table is safe, removing
	 * one in use is not. */
	return fcntl(fd, F_OFD_GETLK, &fl) < 0 || fl.l_type != F_UNLCK;
}


void load_fds(struct fd_list *l, int32_t pid)
{
	char dir[64];
	struct dirent *e;
	DIR *d;
	size_t cap = 0;

	l->loaded = true;
	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	d = opendir(dir);
	if (!d)
		return;   /* gone, or not ours to look at: the path stays unknown */
	while ((e = readdir(d))) {
		struct stat st;
		char *end;
		long fd = strtol(e->d_name, &end, 10);

		/* stat follows the magic link to the open file itself, deleted
		 * or not, so its (dev, ino) is the one the shim recorded. */
		if (*end || end == e->d_name || fstatat(dirfd(d), e->d_name, &st, 0) < 0)
			continue;
		if (l->n == cap) {
			struct fd_ent *v = realloc(l->v, (cap = cap ? 2 * cap : 64) * sizeof(*v));

			if (!v)
				break;
			l->v = v;
		}
		l->v[l->n++] = (struct fd_ent){ st.st_dev, st.st_ino, (int)fd };
	}
	closedir(d);
}
