/*
 * iobench: the benchmarks behind `make bench` (issue 4, BRIEF §5).
 *
 * Subcommands that print a table:
 *   lustre   tasks writing their own regions, in the five modes of the
 *            Lustre seed table (file-per-task, unlocked, mutex, ofd,
 *            rangeshim); threads or processes, buffered or O_DIRECT
 *   gfs2     1..N writer processes, "children see" and "parent sees" as
 *            in the GFS2 seed's iozone table
 *   mixed    readers with writers on other regions, and on their own
 *   small    512-byte pwrite: nanoseconds per call in each mode
 *   lock     the range lock alone against pthread_mutex, pthread_rwlock
 *            and OFD locks (links shim/core/rangelock.c; no shim, no I/O)
 *   contended threads of one process on the same bytes: one 4 KiB block,
 *            random 4 KiB blocks of a shared region, O_APPEND lines
 *            (issue 9), with torn-read and line checks
 *   scope    which scope the shim really runs in its default setting
 *
 * The table subcommands never do the timed I/O themselves.  For every
 * cell they run this program again (/proc/self/exe) with an internal
 * run-* subcommand, in an environment made for the mode: LD_PRELOAD of
 * the shim for `mutex` and `rangeshim`, no preload for the others.  That
 * is the only way to compare preloaded and plain runs in one invocation,
 * and it keeps the process that prints the tables free of the shim.
 *
 * Each cell is the best of a few rounds (see best()), and the modes of
 * one row are run interleaved (rotating which goes first) so that drift
 * hits all of them alike.  Next to the figures every table prints ratios to
 * `unlocked` from the same run: on a 2-core machine absolute figures
 * move from run to run, ratios measured side by side hold.
 *
 * Benchmarks measure; they never fail on a slow result.  The exit status
 * is non-zero only when something could not be run.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rangeshim/rangelock.h"
#include "rangelock_fast.h"
#include "../../examples/util.h"

#define PROG "iobench"
#define ALIGN 4096
#define MAX_LIST 16
#define MAX_TASKS 256
#define MAX_ROUNDS 15
#define OUT_MAX 4096

extern char **environ;

/* ------------------------------------------------------------------ */
/* Modes                                                              */

enum mode { M_FPT, M_UNLOCKED, M_MUTEX, M_OFD, M_RANGESHIM, M_COUNT };

static const char *const mode_names[M_COUNT] = {
	"file-per-task", "unlocked", "mutex", "ofd", "rangeshim",
};

static bool mode_preloads(enum mode m)
{
	return m == M_MUTEX || m == M_RANGESHIM;
}

static int mode_parse(const char *s)
{
	for (int m = 0; m < M_COUNT; m++)
		if (strcmp(s, mode_names[m]) == 0)
			return m;
	return -1;
}

/* ------------------------------------------------------------------ */
/* Options: one set for every subcommand; each uses the ones it needs. */

enum layout { L_ALONE, L_DISJOINT, L_OVERLAP };
static const char *const layout_names[] = { "alone", "disjoint", "overlap" };

struct opts {
	const char *dir;        /* where the table subcommands put files */
	const char *lib;        /* the shim, for LD_PRELOAD */
	const char *dat;        /* data file for the plots, or NULL */
	const char *file;       /* run-*: the file (file-per-task: its prefix) */
	const char *scope;      /* RANGESHIM_SCOPE for rangeshim, or NULL */
	const char *shm;        /* RANGESHIM_SHM for the shim's runs, or NULL */
	unsigned list[MAX_LIST];/* task, writer or thread counts */
	int nlist;
	bool procs, direct;
	uint64_t total;         /* lustre: bytes per pass, all tasks together */
	uint64_t size;          /* gfs2: bytes per writer; run: per task */
	uint64_t block;
	unsigned passes;        /* lustre/run: each task writes its region N times */
	unsigned rounds;
	double secs;
	double timeout;         /* seconds before a run counts as hung */
	unsigned readers, writers;
	int mode;               /* run-*: enum mode */
	int layout;             /* run-mixed */
	bool work_set;          /* contended: --work= names the one workload */
	unsigned tasks;         /* run: task count */
};

/* ------------------------------------------------------------------ */
/* Small helpers                                                      */

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

static void die(const char *fmt, ...)
{
	va_list ap;
	int e = errno;

	fprintf(stderr, PROG ": ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (e)
		fprintf(stderr, ": %s", strerror(e));
	fprintf(stderr, "\n");
	exit(2);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *xalloc(size_t len)
{
	void *p;
	int rc = posix_memalign(&p, ALIGN, len);

	if (rc) {
		errno = rc;
		die("posix_memalign(%zu)", len);
	}
	return p;
}

static bool parse_uint(const char *s, unsigned lo, unsigned hi, unsigned *out)
{
	char *end;
	unsigned long v;

	if (*s < '0' || *s > '9')
		return false;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return false;
	*out = (unsigned)v;
	return true;
}

static bool parse_list(const char *s, struct opts *o)
{
	char buf[256], *save = NULL;

	if (strlen(s) >= sizeof buf)
		return false;
	strcpy(buf, s);
	o->nlist = 0;
	for (char *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
		if (o->nlist == MAX_LIST || !parse_uint(p, 1, MAX_TASKS, &o->list[o->nlist]))
			return false;
		o->nlist++;
	}
	return o->nlist > 0;
}

static const char *fs_name(const char *dir)
{
	struct statfs sf;

	if (statfs(dir, &sf) < 0)
		return "?";
	switch ((unsigned long)sf.f_type) {
	case TMPFS_MAGIC:        return "tmpfs";
	case EXT4_SUPER_MAGIC:   return "ext4";
	case XFS_SUPER_MAGIC:    return "xfs";
	case BTRFS_SUPER_MAGIC:  return "btrfs";
	case NFS_SUPER_MAGIC:    return "nfs";
	case OVERLAYFS_SUPER_MAGIC: return "overlayfs";
	default:                 return "other";
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(const double *v, unsigned n)
{
	double s[MAX_ROUNDS];

	/* A hung or failed round makes the whole cell unknown, not better. */
	for (unsigned i = 0; i < n; i++)
		if (isnan(v[i]))
			return NAN;
	memcpy(s, v, n * sizeof *s);
	qsort(s, n, sizeof *s, cmp_double);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/*
 * The best of n rounds: the highest rate (or, with lowest, the lowest
 * cost).  Other work on the machine only ever slows a run down, never
 * speeds it up, so the best round is the one least disturbed; on shared
 * 2-core machines it is a steadier figure than the median.
 */
static double best(const double *v, unsigned n, bool lowest)
{
	double b = v[0];

	for (unsigned i = 0; i < n; i++) {
		if (isnan(v[i]))
			return NAN;
		if (lowest ? v[i] < b : v[i] > b)
			b = v[i];
	}
	return b;
}

/* The value of "key=" in a child's output line; dies if it is missing. */
static double field(const char *text, const char *key)
{
	size_t k = strlen(key);

	for (const char *p = text; (p = strstr(p, key)) != NULL; p += k)
		if ((p == text || p[-1] == ' ' || p[-1] == '\n') && p[k] == '=')
			return strtod(p + k + 1, NULL);
	die("child output has no %s: '%s'", key, text);
}

/* ------------------------------------------------------------------ */
/* Files the table subcommands create; removed at exit and on signals. */

#define MAX_FILES (MAX_TASKS + 8)
static char created[MAX_FILES][256];

static void track_file(const char *path)
{
	for (int i = 0; i < MAX_FILES; i++)
		if (!created[i][0]) {
			snprintf(created[i], sizeof created[i], "%s", path);
			return;
		}
	die("too many files");
}

static void remove_file(const char *path)
{
	unlink(path);
	for (int i = 0; i < MAX_FILES; i++)
		if (strcmp(created[i], path) == 0)
			created[i][0] = '\0';
}

static void cleanup_files(void)
{
	for (int i = 0; i < MAX_FILES; i++)
		if (created[i][0])
			unlink(created[i]);
}

/* The run in progress: its own process group, out of reach of the
 * terminal's ^C, so on_signal takes it down with us. */
static volatile sig_atomic_t current_run;

/* kill and unlink are async-signal-safe: an interrupted benchmark leaves
 * neither processes nor files behind. */
static void on_signal(int sig)
{
	if (current_run > 0)
		kill(-(pid_t)current_run, SIGKILL);
	cleanup_files();
	signal(sig, SIG_DFL);
	raise(sig);
}

static void install_cleanup(void)
{
	atexit(cleanup_files);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
}

static void write_full(int fd, const void *buf, size_t len, uint64_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pwrite(fd, (const char *)buf + done, len - done,
				   (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			die("pwrite at %" PRIu64, off + done);
		done += (size_t)n;
	}
}

static void read_full(int fd, void *buf, size_t len, uint64_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			die("pread at %" PRIu64, off + done);
		done += (size_t)n;
	}
}

/*
 * Creates a file of len bytes, allocated and written once.  Allocation
 * first: extending or allocating writes take the inode lock exclusively
 * in ext4 and most others, which would serialise the writers before any
 * lock of ours could matter.  Then one untimed write pass, so every run
 * overwrites written blocks (no unwritten-extent conversion in the timed
 * phase) and buffered runs find the pages in the cache: the runs then
 * differ only in how the writers are locked, not in which came first.
 */
static void create_file(const char *path, uint64_t len, bool direct, uint64_t block)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW, 0600);
	char *buf;

	if (fd < 0)
		die("create %s", path);
	track_file(path);
	if (fallocate(fd, 0, 0, (off_t)len) < 0 && errno != EOPNOTSUPP)
		die("fallocate %s", path);
	close(fd);
	fd = open(path, O_WRONLY | (direct ? O_DIRECT : 0));
	if (fd < 0)
		die("open %s", path);
	buf = xalloc(block);
	memset(buf, 0x5a, block);
	for (uint64_t off = 0; off < len; off += block)
		write_full(fd, buf, (size_t)(len - off < block ? len - off : block), off);
	free(buf);
	close(fd);
}

/* Can this directory do O_DIRECT?  tmpfs, for one, refuses it. */
static bool direct_ok(const char *dir)
{
	char path[256];
	int fd;

	snprintf(path, sizeof path, "%s/iobench-%ld.direct", dir, (long)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_DIRECT, 0600);
	if (fd >= 0) {
		close(fd);
		unlink(path);
		return true;
	}
	if (errno != EINVAL)
		die("open %s", path);
	unlink(path);
	errno = 0;
	return false;
}


/* ------------------------------------------------------------------ */
/* Running a cell: this program again, in the mode's environment.      */

struct args {
	char *v[48];
	char store[3072];
	size_t used;
	int n;
};

static void arg(struct args *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void arg(struct args *a, const char *fmt, ...)
{
	va_list ap;
	int k;

	if (a->n + 1 >= (int)(sizeof a->v / sizeof a->v[0]))
		die("too many arguments");
	va_start(ap, fmt);
	k = vsnprintf(a->store + a->used, sizeof a->store - a->used, fmt, ap);
	va_end(ap);
	if (k < 0 || (size_t)k >= sizeof a->store - a->used)
		die("arguments too long");
	a->v[a->n++] = a->store + a->used;
	a->v[a->n] = NULL;
	a->used += (size_t)k + 1;
}

/*
 * The environment for a child in mode m: ours without LD_PRELOAD and
 * RANGESHIM_* (a setting left in the caller's shell must not leak into
 * the baseline columns), then the mode's settings, shmvar
 * (RANGESHIM_SHM=..., or NULL) and extra (a NULL-terminated list, or NULL).
 */
static char **mode_env(const struct opts *o, enum mode m, const char *const *extra,
		       const char *shmvar)
{
	static char preload[1100], scope[64];
	size_t n = 0, i = 0;
	char **env;

	while (environ[n])
		n++;
	env = calloc(n + 8, sizeof *env);
	if (!env)
		die("calloc");
	for (char **e = environ; *e; e++)
		if (strncmp(*e, "LD_PRELOAD=", 11) != 0 && strncmp(*e, "RANGESHIM_", 10) != 0)
			env[i++] = *e;
	if (mode_preloads(m)) {
		snprintf(preload, sizeof preload, "LD_PRELOAD=%s", o->lib);
		env[i++] = preload;
	}
	if (mode_preloads(m) && shmvar)
		env[i++] = (char *)shmvar;
	if (m == M_MUTEX)
		env[i++] = "RANGESHIM_LOCK=mutex";
	if (m == M_RANGESHIM && o->scope) {
		snprintf(scope, sizeof scope, "RANGESHIM_SCOPE=%s", o->scope);
		env[i++] = scope;
	}
	for (int k = 0; extra && extra[k] && k < 4; k++)
		env[i++] = (char *)extra[k];
	env[i] = NULL;
	return env;
}

static size_t read_all(int fd, char *buf, size_t size)
{
	size_t got = 0;

	for (;;) {
		ssize_t k = read(fd, buf + got, size - 1 - got);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		got += (size_t)k;
		if (got == size - 1)
			break;
	}
	buf[got] = '\0';
	return got;
}

/* Set when a run failed or hung: the tables go on, the exit status says so. */
static bool any_failed;

/*
 * What a run wrote to stderr, shortened: the first lines, then a count.
 * A shim that complains once per call would otherwise bury the tables.
 */
static void show_stderr(int fd, enum mode m)
{
	char buf[OUT_MAX], *p, *nl;
	unsigned lines = 0, shown = 0;
	off_t off = 0;
	ssize_t k;

	while ((k = pread(fd, buf, sizeof buf - 1, off)) > 0) {
		buf[k] = '\0';
		for (p = buf; (nl = strchr(p, '\n')) != NULL; p = nl + 1) {
			if (shown < 3) {
				fprintf(stderr, "  [%s run] %.*s\n", mode_names[m], (int)(nl - p), p);
				shown++;
			}
			lines++;
		}
		/* Restart the next read at the last partial line. */
		off += p > buf ? p - buf : k;
	}
	if (lines > shown)
		fprintf(stderr, "  [%s run] ... and %u more lines on stderr\n", mode_names[m],
			lines - shown);
}

/*
 * Runs argv in mode m and puts its stdout in out; returns false if the
 * run failed or did not finish within o->timeout seconds.  A run that
 * hangs (a lock that is never granted is exactly what a benchmark of a
 * lock can find) is killed with its whole process group, and its cell is
 * printed as nan, so one bad mode cannot eat the time budget.  The run's
 * stderr goes to a memfd: with err it is returned there (the scope probe
 * reads the shim's log), otherwise shown shortened (show_stderr).
 */
static bool spawn(const struct opts *o, enum mode m, const char *const *extra,
		  const struct args *a, char *out, size_t outsz, char *err, size_t errsz)
{
	static unsigned runs;
	char shmvar[128], shmpath[128];
	int po[2], efd, status = 0;
	char **env;
	double deadline = now() + o->timeout;
	bool hung = false;
	size_t got = 0;
	ssize_t k;
	pid_t pid;

	/* Each run gets a fresh node table, as after a reboot: a run that
	 * damages its table must not skew the next one. */
	if (o->shm) {
		snprintf(shmvar, sizeof shmvar, "RANGESHIM_SHM=%s-%u", o->shm, runs);
		snprintf(shmpath, sizeof shmpath, "/dev/shm%s-%u", o->shm, runs++);
	}
	env = mode_env(o, m, extra, o->shm ? shmvar : NULL);
	if (pipe2(po, O_CLOEXEC) < 0)
		die("pipe");
	efd = memfd_create("iobench-stderr", MFD_CLOEXEC);
	if (efd < 0)
		die("memfd_create");
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		setpgid(0, 0);
		dup2(po[1], 1);
		dup2(efd, 2);
		execve("/proc/self/exe", a->v, env);
		_exit(127);
	}
	setpgid(pid, pid);   /* both sides, so that neither order races */
	current_run = pid;
	free(env);
	close(po[1]);
	/* stdout reaches EOF when the run and all its tasks have exited. */
	while (got < outsz - 1) {
		struct pollfd pf = { .fd = po[0], .events = POLLIN };
		int ms = (int)((deadline - now()) * 1000), n;
		ssize_t r;

		if (ms <= 0 || (n = poll(&pf, 1, ms)) == 0) {
			hung = true;
			break;
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			die("poll");
		}
		r = read(po[0], out + got, outsz - 1 - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	out[got] = '\0';
	close(po[0]);
	if (hung)
		kill(-pid, SIGKILL);
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			die("waitpid");
	current_run = 0;
	if (o->shm)
		unlink(shmpath);
	if (err) {
		k = pread(efd, err, errsz - 1, 0);
		err[k > 0 ? k : 0] = '\0';
	} else {
		show_stderr(efd, m);
	}
	close(efd);
	if (hung) {
		fprintf(stderr, PROG ": the %s run '%s %s' did not finish in %.0f s: killed, "
			"its cell reads nan\n", mode_names[m], a->v[1], a->n > 3 ? a->v[3] : "",
			o->timeout);
	} else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, PROG ": the %s run '%s %s' failed (wait status 0x%x), its cell "
			"reads nan\n", mode_names[m], a->v[1], a->n > 3 ? a->v[3] : "",
			(unsigned)status);
		kill(-pid, SIGKILL);  /* tasks it may have left behind */
	} else {
		return true;
	}
	any_failed = true;
	return false;
}

/* ------------------------------------------------------------------ */
/* scope: what the shim's default scope really runs as.                */

/*
 * Node scope can fall back to process scope (a build without the node
 * table, a segment it cannot use), and then processes do not coordinate
 * with each other: the multi-process `mutex` and `rangeshim` columns
 * measure something else, and the table must say so.  Ask the shim rather
 * than guess: in node scope it counts node_acquires, and with
 * RANGESHIM_LOG=debug a fallback names itself.
 */
static const char *effective_scope(const struct opts *o)
{
	static char result[80];
	char path[256], statsvar[300], json[OUT_MAX], out[OUT_MAX], err[OUT_MAX];
	const char *extra[] = { statsvar, "RANGESHIM_LOG=debug", NULL };
	struct args a = { .n = 0 };
	double acquires = 0;
	char *p;
	int fd;

	if (result[0])
		return result;
	snprintf(path, sizeof path, "%s/iobench-%ld.probe", o->dir, (long)getpid());
	snprintf(statsvar, sizeof statsvar, "RANGESHIM_STATS=%s.json", path);
	track_file(path);
	track_file(statsvar + strlen("RANGESHIM_STATS="));
	arg(&a, PROG);
	arg(&a, "run-probe");
	arg(&a, "--file=%s", path);
	if (!spawn(o, M_RANGESHIM, extra, &a, out, sizeof out, err, sizeof err)) {
		remove_file(path);
		snprintf(result, sizeof result, "unknown (the probe failed)");
		return result;
	}
	remove_file(path);
	snprintf(path + strlen(path), sizeof path - strlen(path), ".json");
	fd = open(path, O_RDONLY);
	if (fd >= 0) {
		read_all(fd, json, sizeof json);
		close(fd);
		remove_file(path);
		p = strstr(json, "\"node_acquires\":");
		if (p)
			acquires = strtod(p + 16, NULL);
	}
	if (acquires > 0)
		snprintf(result, sizeof result, "node");
	else if (o->scope && strcmp(o->scope, "node") != 0)
		snprintf(result, sizeof result, "%s", o->scope);
	else if (strstr(err, "not built"))
		snprintf(result, sizeof result, "process (node scope is not built)");
	else
		snprintf(result, sizeof result, "process (node scope is not in force)");
	return result;
}

static void print_scope_note(const struct opts *o, bool procs)
{
	const char *s = effective_scope(o);

	printf("  rangeshim and mutex run in %s scope", s);
	if (!procs)
		printf(".\n");
	else if (strncmp(s, "node", 4) == 0)
		printf(": processes coordinate through the node table.\n");
	else
		printf(": each process locks only among its own\n"
		       "  threads, so between these processes mutex and rangeshim "
		       "coordinate nothing.\n");
}

/* ------------------------------------------------------------------ */
/* run: one timed write phase (internal; the tables run it).           */

struct task_res {
	double t0, t1;
	uint64_t bytes;
};

struct task {
	const struct opts *o;
	pthread_barrier_t *start;
	struct task_res *res;
	unsigned idx;
	pthread_t tid;
};

/* ROMIO's way: an fcntl lock on exactly the bytes of the call. */
static void ofd_lock(int fd, short type, uint64_t off, uint64_t len)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET,
			    .l_start = (off_t)off, .l_len = (off_t)len };

	while (fcntl(fd, type == F_UNLCK ? F_OFD_SETLK : F_OFD_SETLKW, &fl) < 0)
		if (errno != EINTR)
			die("fcntl(F_OFD_SETLKW)");
}

static int task_open(const struct opts *o, unsigned idx, int flags)
{
	char path[300];
	int fd;

	if (o->mode == M_FPT)
		snprintf(path, sizeof path, "%s.%u", o->file, idx);
	else
		snprintf(path, sizeof path, "%s", o->file);
	fd = open(path, flags | (o->direct ? O_DIRECT : 0));
	if (fd < 0)
		die("open %s", path);
	return fd;
}

static void task_write(const struct opts *o, int fd, unsigned idx, const char *buf,
		       struct task_res *r)
{
	uint64_t base = o->mode == M_FPT ? 0 : (uint64_t)idx * o->size;
	bool ofd = o->mode == M_OFD;

	r->t0 = now();
	for (unsigned p = 0; p < o->passes; p++)
		for (uint64_t off = base; off < base + o->size; off += o->block) {
			if (ofd)
				ofd_lock(fd, F_WRLCK, off, o->block);
			write_full(fd, buf, (size_t)o->block, off);
			if (ofd)
				ofd_lock(fd, F_UNLCK, off, o->block);
		}
	r->t1 = now();
	r->bytes = o->size * o->passes;
}

/*
 * One untimed write of the task's first block, in the mode's own way,
 * before the start signal.  The first tracked call of a process or thread
 * pays one-time costs (attaching the node table, a first grant: about
 * 10 ms from a new thread in node scope when this was written, see
 * docs/benchmarks.md).  A run of a few hundred milliseconds would carry
 * them as a steady-state loss that a long run would not see; `small`
 * reports them separately.
 */
static void task_warm(const struct opts *o, int fd, unsigned idx, const char *buf)
{
	uint64_t off = o->mode == M_FPT ? 0 : (uint64_t)idx * o->size;

	if (o->mode == M_OFD)
		ofd_lock(fd, F_WRLCK, off, o->block);
	write_full(fd, buf, (size_t)o->block, off);
	if (o->mode == M_OFD)
		ofd_lock(fd, F_UNLCK, off, o->block);
}

static char *task_buffer(const struct opts *o, unsigned idx)
{
	char *buf = xalloc((size_t)o->block);

	memset(buf, 'a' + (int)(idx % 26), (size_t)o->block);
	return buf;
}

static void *task_thread(void *arg)
{
	struct task *t = arg;
	char *buf = task_buffer(t->o, t->idx);
	int fd = task_open(t->o, t->idx, O_WRONLY);

	task_warm(t->o, fd, t->idx, buf);
	pthread_barrier_wait(t->start);
	task_write(t->o, fd, t->idx, buf, t->res);
	close(fd);
	free(buf);
	return NULL;
}

/* Processes start together when the parent closes the "go" pipe. */
static void task_process(const struct opts *o, unsigned idx, int ready_w, int go_r,
			 struct task_res *res)
{
	char *buf = task_buffer(o, idx);
	int fd = task_open(o, idx, O_WRONLY);
	char c = 'r';

	task_warm(o, fd, idx, buf);
	if (write(ready_w, &c, 1) != 1)
		die("write ready");
	close(ready_w);
	while (read(go_r, &c, 1) < 0 && errno == EINTR)
		;
	task_write(o, fd, idx, buf, res);
	close(fd);
	_exit(0);
}

static int cmd_run(const struct opts *o)
{
	unsigned n = o->tasks;
	struct task_res *res;
	double t0, end = 0, children = 0;
	uint64_t bytes = 0;

	/* Shared, so that process tasks can report their own times. */
	res = mmap(NULL, n * sizeof *res, PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (res == MAP_FAILED)
		die("mmap");
	if (o->procs) {
		int ready[2], go[2], status;
		pid_t pids[MAX_TASKS];
		char c[MAX_TASKS];
		size_t got = 0;

		if (pipe(ready) < 0 || pipe(go) < 0)
			die("pipe");
		fflush(stdout);
		for (unsigned i = 0; i < n; i++) {
			pids[i] = fork();
			if (pids[i] < 0)
				die("fork");
			if (pids[i] == 0) {
				close(go[1]);
				close(ready[0]);
				task_process(o, i, ready[1], go[0], &res[i]);
			}
		}
		close(ready[1]);
		close(go[0]);
		while (got < n) {
			ssize_t k = read(ready[0], c, n - got);

			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0)
				die("a task died before starting");
			got += (size_t)k;
		}
		t0 = now();
		close(go[1]);
		for (unsigned i = 0; i < n; i++) {
			while (waitpid(pids[i], &status, 0) < 0)
				if (errno != EINTR)
					die("waitpid");
			if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
				errno = 0;
				die("task %u failed", i);
			}
		}
	} else {
		struct task *tasks = calloc(n, sizeof *tasks);
		pthread_barrier_t start;

		if (!tasks)
			die("calloc");
		pthread_barrier_init(&start, NULL, n + 1);
		for (unsigned i = 0; i < n; i++) {
			tasks[i] = (struct task){ .o = o, .start = &start, .res = &res[i], .idx = i };
			errno = pthread_create(&tasks[i].tid, NULL, task_thread, &tasks[i]);
			if (errno)
				die("pthread_create");
		}
		pthread_barrier_wait(&start);
		t0 = now();
		for (unsigned i = 0; i < n; i++)
			pthread_join(tasks[i].tid, NULL);
		pthread_barrier_destroy(&start);
		free(tasks);
	}
	for (unsigned i = 0; i < n; i++) {
		bytes += res[i].bytes;
		/* The clock starts when the first task starts: a thread released
		 * by the barrier can run before the main thread takes t0. */
		if (res[i].t0 < t0)
			t0 = res[i].t0;
		if (res[i].t1 > end)
			end = res[i].t1;
		children += (double)res[i].bytes / (res[i].t1 - res[i].t0);
	}
	printf("bytes=%" PRIu64 " wall=%.6f children=%.3f\n", bytes, end - t0, children / 1e6);
	return 0;
}

/* What the tables ask of one run. */
struct write_res {
	double parent;   /* total bytes / wall time, MB/s */
	double children; /* sum of each task's own rate, MB/s */
};

static struct write_res run_write(const struct opts *o, enum mode m, unsigned tasks,
				  uint64_t size, unsigned passes, const char *file)
{
	struct args a = { .n = 0 };
	char out[OUT_MAX];
	struct write_res r;

	arg(&a, PROG);
	arg(&a, "run");
	arg(&a, "--mode=%s", mode_names[m]);
	arg(&a, "--tasks=%u", tasks);
	arg(&a, "--size=%" PRIu64, size);
	arg(&a, "--block=%" PRIu64, o->block);
	arg(&a, "--passes=%u", passes);
	arg(&a, "--file=%s", file);
	if (o->procs)
		arg(&a, "--procs");
	if (o->direct)
		arg(&a, "--direct");
	if (!spawn(o, m, NULL, &a, out, sizeof out, NULL, 0))
		return (struct write_res){ NAN, NAN };
	r.parent = field(out, "bytes") / field(out, "wall") / 1e6;
	r.children = field(out, "children");
	return r;
}

/* ------------------------------------------------------------------ */
/* lustre: the seed 000 table.                                         */

static void cmd_lustre(const struct opts *o)
{
	double mbps[M_COUNT][MAX_ROUNDS], med[M_COUNT];
	char shared[256], fpt[256], tot[32], blk[32];
	FILE *dat = NULL;

	fmt_size(tot, sizeof tot, o->total);
	fmt_size(blk, sizeof blk, o->block);
	printf("\n== Lustre seed table (seed 000): %s, %s pwrite of %s blocks, %s %s ==\n",
	       o->procs ? "processes" : "threads", o->direct ? "O_DIRECT" : "buffered",
	       blk, o->dir, fs_name(o->dir));
	if (o->direct && !direct_ok(o->dir)) {
		printf("  skipped: %s (%s) refuses O_DIRECT; set BENCH_DIR to a disk file "
		       "system to run this table\n", o->dir, fs_name(o->dir));
		return;
	}
	printf("  each task writes its own region of one shared file (file-per-task: its own "
	       "file);\n  %s per run over all tasks%s, file allocated and written once "
	       "beforehand;\n  MB/s = bytes / wall time, best of %u rounds, modes "
	       "interleaved\n", tot, o->passes > 1 ? " per pass" : "", o->rounds);
	if (o->passes > 1)
		printf("  each task writes its region %u times per run\n", o->passes);
	print_scope_note(o, o->procs);
	if (o->dat) {
		dat = fopen(o->dat, "w");
		if (!dat)
			die("%s", o->dat);
		fprintf(dat, "# tasks file-per-task unlocked mutex ofd rangeshim (MB/s)\n");
	}
	printf("\n  %5s %13s %9s %9s %9s %9s | %13s %6s %6s %9s | %s\n", "", "", "", "", "",
	       "MB/s", "", "", "", "x unlocked", "unlocked");
	printf("  %5s %13s %9s %9s %9s %9s | %13s %6s %6s %9s | %s\n", "tasks",
	       mode_names[M_FPT], mode_names[M_UNLOCKED], mode_names[M_MUTEX],
	       mode_names[M_OFD], mode_names[M_RANGESHIM], mode_names[M_FPT],
	       mode_names[M_MUTEX], mode_names[M_OFD], mode_names[M_RANGESHIM], "spread");
	snprintf(shared, sizeof shared, "%s/iobench-%ld.shared", o->dir, (long)getpid());
	snprintf(fpt, sizeof fpt, "%s/iobench-%ld.fpt", o->dir, (long)getpid());
	create_file(shared, o->total, o->direct, o->block);
	for (int li = 0; li < o->nlist; li++) {
		unsigned n = o->list[li];
		uint64_t region = o->total / n / o->block * o->block;
		char path[300];
		double lo = 1e300, hi = 0;

		if (region == 0) {
			printf("  %5u  skipped: %s is less than one block per task\n", n, tot);
			continue;
		}
		for (unsigned i = 0; i < n; i++) {
			snprintf(path, sizeof path, "%s.%u", fpt, i);
			create_file(path, region, o->direct, o->block);
		}
		for (unsigned r = 0; r < o->rounds; r++)
			for (int k = 0; k < M_COUNT; k++) {
				enum mode m = (enum mode)((k + (int)r) % M_COUNT);

				mbps[m][r] = run_write(o, m, n, region, o->passes,
						       m == M_FPT ? fpt : shared).parent;
			}
		for (unsigned i = 0; i < n; i++) {
			snprintf(path, sizeof path, "%s.%u", fpt, i);
			remove_file(path);
		}
		for (int m = 0; m < M_COUNT; m++)
			med[m] = best(mbps[m], o->rounds, false);
		for (unsigned r = 0; r < o->rounds; r++) {
			lo = mbps[M_UNLOCKED][r] < lo ? mbps[M_UNLOCKED][r] : lo;
			hi = mbps[M_UNLOCKED][r] > hi ? mbps[M_UNLOCKED][r] : hi;
		}
		printf("  %5u %13.1f %9.1f %9.1f %9.1f %9.1f | %13.2f %6.2f %6.2f %9.2f | %4.0f%%\n",
		       n, med[M_FPT], med[M_UNLOCKED], med[M_MUTEX], med[M_OFD], med[M_RANGESHIM],
		       med[M_FPT] / med[M_UNLOCKED], med[M_MUTEX] / med[M_UNLOCKED],
		       med[M_OFD] / med[M_UNLOCKED], med[M_RANGESHIM] / med[M_UNLOCKED],
		       100 * (hi - lo) / med[M_UNLOCKED]);
		fflush(stdout);
		if (dat)
			fprintf(dat, "%u %.1f %.1f %.1f %.1f %.1f\n", n, med[M_FPT], med[M_UNLOCKED],
				med[M_MUTEX], med[M_OFD], med[M_RANGESHIM]);
	}
	remove_file(shared);
	if (dat)
		fclose(dat);
	printf("  (spread: (max - min) / max of the unlocked rounds: the noise to read the "
	       "ratios against)\n");
}

/* ------------------------------------------------------------------ */
/* gfs2: the seed 004 table.                                           */

static void cmd_gfs2(const struct opts *o)
{
	static const enum mode modes[] = { M_UNLOCKED, M_OFD, M_RANGESHIM };
	enum { NM = sizeof modes / sizeof modes[0] };
	double ch[NM][MAX_ROUNDS], pa[NM][MAX_ROUNDS], mc[NM], mp[NM];
	unsigned maxw = 0;
	char shared[256], sz[32], blk[32];
	FILE *dat = NULL;
	struct opts po = *o;

	po.procs = true;
	for (int i = 0; i < o->nlist; i++)
		maxw = o->list[i] > maxw ? o->list[i] : maxw;
	fmt_size(sz, sizeof sz, o->size);
	fmt_size(blk, sizeof blk, o->block);
	printf("\n== GFS2 seed table (seed 004): writer processes, %s pwrite of %s blocks, "
	       "%s %s ==\n", o->direct ? "O_DIRECT" : "buffered", blk, o->dir, fs_name(o->dir));
	if (o->direct && !direct_ok(o->dir)) {
		printf("  skipped: %s refuses O_DIRECT\n", o->dir);
		return;
	}
	printf("  each writer process writes its own %s region of one shared file %u "
	       "time%s (allocated\n  and written once beforehand); best of %u rounds; "
	       "MB/s.\n  children see = sum of each writer's own rate; parent sees = all "
	       "bytes / wall time\n", sz, o->passes, o->passes > 1 ? "s" : "", o->rounds);
	print_scope_note(&po, true);
	if (o->dat) {
		dat = fopen(o->dat, "w");
		if (!dat)
			die("%s", o->dat);
		fprintf(dat, "# writers unlocked-children unlocked-parent ofd-children "
			"ofd-parent rangeshim-children rangeshim-parent (MB/s)\n");
	}
	snprintf(shared, sizeof shared, "%s/iobench-%ld.gfs2", o->dir, (long)getpid());
	create_file(shared, o->size * maxw, o->direct, o->block);
	printf("\n");
	for (int li = 0; li < o->nlist; li++) {
		unsigned n = o->list[li];

		for (unsigned r = 0; r < o->rounds; r++)
			for (unsigned k = 0; k < NM; k++) {
				unsigned j = (k + r) % NM;
				struct write_res w = run_write(&po, modes[j], n, o->size,
							       o->passes, shared);

				ch[j][r] = w.children;
				pa[j][r] = w.parent;
			}
		for (unsigned j = 0; j < NM; j++) {
			mc[j] = best(ch[j], o->rounds, false);
			mp[j] = best(pa[j], o->rounds, false);
		}
		printf("  Children see throughput for %2u writers  unlocked %8.1f  ofd %8.1f "
		       "(%.2fx)  rangeshim %8.1f (%.2fx)\n", n, mc[0], mc[1], mc[1] / mc[0],
		       mc[2], mc[2] / mc[0]);
		printf("  Parent sees throughput for %2u writers   unlocked %8.1f  ofd %8.1f "
		       "(%.2fx)  rangeshim %8.1f (%.2fx)\n\n", n, mp[0], mp[1], mp[1] / mp[0],
		       mp[2], mp[2] / mp[0]);
		fflush(stdout);
		if (dat)
			fprintf(dat, "%u %.1f %.1f %.1f %.1f %.1f %.1f\n", n, mc[0], mp[0], mc[1],
				mp[1], mc[2], mp[2]);
	}
	remove_file(shared);
	if (dat)
		fclose(dat);
	printf("  (Nx: ratio to unlocked in the same run)\n");
}

/* ------------------------------------------------------------------ */
/* run-mixed and mixed: readers next to writers.                       */

struct mixer {
	const struct opts *o;
	pthread_barrier_t *start;
	atomic_bool *stop;
	bool writer;
	unsigned region;
	uint64_t bytes;
	pthread_t tid;
};

static void *mixer_thread(void *arg)
{
	struct mixer *t = arg;
	const struct opts *o = t->o;
	uint64_t base = (uint64_t)t->region * o->size;
	char *buf = task_buffer(o, t->region);
	int fd = open(o->file, t->writer ? O_WRONLY : O_RDONLY);
	bool ofd = o->mode == M_OFD;
	short type = t->writer ? F_WRLCK : F_RDLCK;

	if (fd < 0)
		die("open %s", o->file);
	/* Untimed first call, for the reason task_warm gives. */
	if (t->writer)
		write_full(fd, buf, (size_t)o->block, base);
	else
		read_full(fd, buf, (size_t)o->block, base);
	pthread_barrier_wait(t->start);
	while (!atomic_load_explicit(t->stop, memory_order_relaxed)) {
		for (uint64_t off = base; off < base + o->size; off += o->block) {
			if (ofd)
				ofd_lock(fd, type, off, o->block);
			if (t->writer)
				write_full(fd, buf, (size_t)o->block, off);
			else
				read_full(fd, buf, (size_t)o->block, off);
			if (ofd)
				ofd_lock(fd, F_UNLCK, off, o->block);
			t->bytes += o->block;
			if (atomic_load_explicit(t->stop, memory_order_relaxed))
				break;
		}
	}
	close(fd);
	free(buf);
	return NULL;
}

/*
 * Writers own regions 0..W-1.  Readers read regions W.. (alone: with no
 * writer running; disjoint: while the writers write theirs) or the
 * writers' own regions (overlap).
 */
static int cmd_run_mixed(const struct opts *o)
{
	unsigned nw = o->layout == L_ALONE ? 0 : o->writers, n = nw + o->readers;
	struct mixer *t = calloc(n, sizeof *t);
	pthread_barrier_t start;
	atomic_bool stop = false;
	struct timespec ts = { (time_t)o->secs, (long)((o->secs - (double)(time_t)o->secs) * 1e9) };
	uint64_t rb = 0, wb = 0;
	double t0, t1;

	if (!t)
		die("calloc");
	pthread_barrier_init(&start, NULL, n + 1);
	for (unsigned i = 0; i < n; i++) {
		bool w = i < nw;
		unsigned j = i - nw;

		t[i] = (struct mixer){ .o = o, .start = &start, .stop = &stop, .writer = w,
				       .region = w ? i : o->layout == L_OVERLAP ? j % o->writers
						       : o->writers + j };
		errno = pthread_create(&t[i].tid, NULL, mixer_thread, &t[i]);
		if (errno)
			die("pthread_create");
	}
	pthread_barrier_wait(&start);
	t0 = now();
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
	atomic_store(&stop, true);
	for (unsigned i = 0; i < n; i++) {
		pthread_join(t[i].tid, NULL);
		*(t[i].writer ? &wb : &rb) += t[i].bytes;
	}
	t1 = now();
	printf("rbytes=%" PRIu64 " wbytes=%" PRIu64 " secs=%.6f\n", rb, wb, t1 - t0);
	free(t);
	return 0;
}

static void run_mixed(const struct opts *o, enum mode m, int layout, const char *file,
		      const char *const *extra, double *rmbps, double *wmbps)
{
	struct args a = { .n = 0 };
	char out[OUT_MAX];
	double secs;

	arg(&a, PROG);
	arg(&a, "run-mixed");
	arg(&a, "--mode=%s", mode_names[m]);
	arg(&a, "--layout=%s", layout_names[layout]);
	arg(&a, "--readers=%u", o->readers);
	arg(&a, "--writers=%u", o->writers);
	arg(&a, "--size=%" PRIu64, o->size);
	arg(&a, "--block=%" PRIu64, o->block);
	arg(&a, "--secs=%g", o->secs);
	arg(&a, "--file=%s", file);
	if (!spawn(o, m, extra, &a, out, sizeof out, NULL, 0)) {
		*rmbps = *wmbps = NAN;
		return;
	}
	secs = field(out, "secs");
	*rmbps = field(out, "rbytes") / secs / 1e6;
	*wmbps = field(out, "wbytes") / secs / 1e6;
}

/* lock_waits of one rangeshim run with RANGESHIM_STATS (not timed). */
static double waits_of(const struct opts *o, int layout, const char *file, double *calls)
{
	char path[300], var[320], json[OUT_MAX];
	const char *extra[] = { var, NULL };
	double r, w, waits = -1;
	char *p;
	int fd;

	snprintf(path, sizeof path, "%s.stats.json", file);
	snprintf(var, sizeof var, "RANGESHIM_STATS=%s", path);
	track_file(path);
	run_mixed(o, M_RANGESHIM, layout, file, extra, &r, &w);
	*calls = -1;
	fd = open(path, O_RDONLY);
	if (fd >= 0) {
		read_all(fd, json, sizeof json);
		close(fd);
		if ((p = strstr(json, "\"lock_waits\":")))
			waits = strtod(p + 13, NULL);
		if ((p = strstr(json, "\"io_calls\":")))
			*calls = strtod(p + 11, NULL);
	}
	remove_file(path);
	return waits;
}

static void cmd_mixed(const struct opts *o)
{
	static const enum mode modes[] = { M_UNLOCKED, M_MUTEX, M_OFD, M_RANGESHIM };
	enum { NM = sizeof modes / sizeof modes[0] };
	double rd[NM][3][MAX_ROUNDS], wr[NM][3][MAX_ROUNDS], mr[3], mw[3], calls;
	char file[256], sz[32], blk[32];
	unsigned regions = o->writers + o->readers;

	fmt_size(sz, sizeof sz, o->size);
	fmt_size(blk, sizeof blk, o->block);
	printf("\n== Readers and writers: %u reader and %u writer threads, %s blocks, %s %s ==\n",
	       o->readers, o->writers, blk, o->dir, fs_name(o->dir));
	printf("  each thread loops over its own %s region for %.2f s; best of %u rounds.\n"
	       "  alone: readers only; elsewhere: writers write other regions (readers must "
	       "not wait);\n  same: writers write the regions being read (readers must "
	       "wait: that is the atomicity).\n", sz, o->secs, o->rounds);
	snprintf(file, sizeof file, "%s/iobench-%ld.mixed", o->dir, (long)getpid());
	create_file(file, o->size * regions, false, o->block);
	for (unsigned r = 0; r < o->rounds; r++)
		for (unsigned k = 0; k < NM; k++) {
			unsigned j = (k + r) % NM;

			for (int l = 0; l < 3; l++)
				run_mixed(o, modes[j], l, file, NULL, &rd[j][l][r], &wr[j][l][r]);
		}
	printf("\n  %-10s %20s %22s %22s | %22s\n", "", "reader MB/s", "", "",
	       "writer MB/s");
	printf("  %-10s %9s %24s %24s | %11s %11s\n", "mode", "alone",
	       "writers elsewhere (x)", "writers same (x)", "elsewhere", "same");
	for (unsigned j = 0; j < NM; j++) {
		for (int l = 0; l < 3; l++) {
			mr[l] = best(rd[j][l], o->rounds, false);
			mw[l] = best(wr[j][l], o->rounds, false);
		}
		printf("  %-10s %9.1f %15.1f (%5.2fx) %15.1f (%5.2fx) | %11.1f %11.1f\n",
		       mode_names[modes[j]], mr[L_ALONE], mr[L_DISJOINT],
		       mr[L_DISJOINT] / mr[L_ALONE], mr[L_OVERLAP], mr[L_OVERLAP] / mr[L_ALONE],
		       mw[L_DISJOINT], mw[L_OVERLAP]);
	}
	printf("  (x: reader rate relative to the same mode's readers alone; with writers "
	       "elsewhere unlocked\n  readers lose only what the 2 threads' share of caches "
	       "and memory costs)\n");
	{
		double u = best(rd[0][L_DISJOINT], o->rounds, false);

		printf("  readers next to writers elsewhere, as a share of unlocked readers: "
		       "mutex %.2f, ofd %.2f, rangeshim %.2f\n",
		       best(rd[1][L_DISJOINT], o->rounds, false) / u,
		       best(rd[2][L_DISJOINT], o->rounds, false) / u,
		       best(rd[3][L_DISJOINT], o->rounds, false) / u);
	}
	{
		double wd = waits_of(o, L_DISJOINT, file, &calls);
		double cd = calls, wo = waits_of(o, L_OVERLAP, file, &calls);

		printf("  rangeshim lock waits (RANGESHIM_STATS run, untimed): writers elsewhere "
		       "%.0f of %.0f calls; writers same %.0f of %.0f calls\n", wd, cd, wo, calls);
	}
	remove_file(file);
}

/* ------------------------------------------------------------------ */
/* run-small and small: the per-call cost of a 512-byte pwrite.        */

#define SMALL 512
#define SMALL_SLOTS 64

static int cmd_run_small(const struct opts *o)
{
	static char buf[SMALL];
	int fd = open(o->file, O_RDWR);
	bool ofd = o->mode == M_OFD;
	uint64_t calls = 0, i;
	double t0, t1, deadline;

	if (fd < 0)
		die("open %s", o->file);
	memset(buf, 's', sizeof buf);
	/* Warm up: first calls fault in the shim's tables and the pages. */
	for (i = 0; i < 2000; i++)
		write_full(fd, buf, SMALL, (i % SMALL_SLOTS) * SMALL);
	t0 = now();
	deadline = t0 + o->secs;
	do {
		for (i = 0; i < 1024; i++, calls++) {
			uint64_t off = (calls % SMALL_SLOTS) * SMALL;

			if (ofd)
				ofd_lock(fd, F_WRLCK, off, SMALL);
			if (pwrite(fd, buf, SMALL, (off_t)off) != SMALL)
				die("pwrite");
			if (ofd)
				ofd_lock(fd, F_UNLCK, off, SMALL);
		}
		t1 = now();
	} while (t1 < deadline);
	close(fd);
	printf("calls=%" PRIu64 " secs=%.6f ns=%.2f\n", calls, t1 - t0,
	       (t1 - t0) * 1e9 / (double)calls);
	return 0;
}

/*
 * run-first: how long the first pwrite of a process takes, made by the
 * main thread (--layout=alone) or by a thread it starts (otherwise).  The
 * throughput runs keep this out of their timing (task_warm); here it is
 * measured on its own.
 */
struct first {
	const char *file;
	double ns;
};

static void *first_call(void *arg)
{
	struct first *f = arg;
	static char buf[ALIGN];
	int fd = open(f->file, O_WRONLY);
	double t0;

	if (fd < 0)
		die("open %s", f->file);
	t0 = now();
	write_full(fd, buf, sizeof buf, 0);
	f->ns = (now() - t0) * 1e9;
	close(fd);
	return NULL;
}

static int cmd_run_first(const struct opts *o)
{
	struct first f = { .file = o->file };
	pthread_t tid;

	if (o->layout == L_ALONE) {
		first_call(&f);
	} else {
		errno = pthread_create(&tid, NULL, first_call, &f);
		if (errno)
			die("pthread_create");
		pthread_join(tid, NULL);
	}
	printf("ns=%.0f\n", f.ns);
	return 0;
}

static void first_calls(const struct opts *o, const char *file)
{
	static const enum mode modes[] = { M_UNLOCKED, M_RANGESHIM };
	double ns[2][2][MAX_ROUNDS];

	for (unsigned r = 0; r < o->rounds; r++)
		for (int j = 0; j < 2; j++)
			for (int t = 0; t < 2; t++) {
				struct args a = { .n = 0 };
				char out[OUT_MAX];

				arg(&a, PROG);
				arg(&a, "run-first");
				arg(&a, "--mode=%s", mode_names[modes[j]]);
				arg(&a, "--layout=%s", layout_names[t ? L_DISJOINT : L_ALONE]);
				arg(&a, "--file=%s", file);
				ns[j][t][r] = spawn(o, modes[j], NULL, &a, out, sizeof out, NULL, 0)
					      ? field(out, "ns") : NAN;
			}
	printf("\n  first 4 KiB pwrite of a new process, median (kept out of the other "
	       "tables' timing;\n  each shim run starts with a fresh node table):\n"
	       "    from its main thread:    %s %8.1f us, %s %8.1f us\n"
	       "    from a thread it starts: %s %8.1f us, %s %8.1f us\n",
	       mode_names[M_UNLOCKED], median(ns[0][0], o->rounds) / 1e3,
	       mode_names[M_RANGESHIM], median(ns[1][0], o->rounds) / 1e3,
	       mode_names[M_UNLOCKED], median(ns[0][1], o->rounds) / 1e3,
	       mode_names[M_RANGESHIM], median(ns[1][1], o->rounds) / 1e3);
}

static void cmd_small(const struct opts *o)
{
	static const enum mode modes[] = { M_UNLOCKED, M_OFD, M_RANGESHIM, M_MUTEX };
	enum { NM = sizeof modes / sizeof modes[0] };
	double ns[NM][MAX_ROUNDS], med[NM], low[NM];
	char file[256];

	printf("\n== Small writes: 512-byte pwrite, one thread, %s %s ==\n", o->dir,
	       fs_name(o->dir));
	printf("  ns per call (ofd: including its fcntl lock and unlock), %.2f s per run, "
	       "median of %u rounds, modes interleaved\n\n", o->secs, o->rounds);
	snprintf(file, sizeof file, "%s/iobench-%ld.small", o->dir, (long)getpid());
	create_file(file, SMALL * SMALL_SLOTS, false, SMALL);
	for (unsigned r = 0; r < o->rounds; r++)
		for (unsigned k = 0; k < NM; k++) {
			unsigned j = (k + r) % NM;
			struct args a = { .n = 0 };
			char out[OUT_MAX];

			arg(&a, PROG);
			arg(&a, "run-small");
			arg(&a, "--mode=%s", mode_names[modes[j]]);
			arg(&a, "--secs=%g", o->secs);
			arg(&a, "--file=%s", file);
			ns[j][r] = spawn(o, modes[j], NULL, &a, out, sizeof out, NULL, 0)
				   ? field(out, "ns") : NAN;
		}
	printf("  %-10s %9s %11s %10s | %9s %11s\n", "mode", "ns/call", "x unlocked",
	       "added ns", "best", "x unlocked");
	for (unsigned j = 0; j < NM; j++) {
		med[j] = median(ns[j], o->rounds);
		low[j] = best(ns[j], o->rounds, true);
		printf("  %-10s %9.1f %11.2f %10.1f | %9.1f %11.2f\n", mode_names[modes[j]],
		       med[j], med[j] / med[0], med[j] - med[0], low[j], low[j] / low[0]);
	}
	printf("  (best: the fastest round; interference from other work only ever adds time)\n");
	if (o->dat) {
		FILE *dat = fopen(o->dat, "w");

		if (!dat)
			die("%s", o->dat);
		fprintf(dat, "# mode ns-per-call-median ns-per-call-best\n");
		for (unsigned j = 0; j < NM; j++)
			fprintf(dat, "%s %.1f %.1f\n", mode_names[modes[j]], med[j], low[j]);
		fclose(dat);
	}
	printf("\n  per call, rangeshim is %.2fx faster than ofd (best rounds: %.2fx); "
	       "target at least 3x: %s\n", med[1] / med[2], low[1] / low[2],
	       med[1] / med[2] >= 3 ? "met" : "MISSED");
	first_calls(o, file);
	remove_file(file);
}

/* ------------------------------------------------------------------ */
/* contended: threads of one process meeting on the same bytes (i9).   */

/* append-fd: the usual multi-threaded logger, every thread writing lines
 * through one O_APPEND descriptor that the process opened once (one open
 * file description, whose offset the kernel locks for each write). */
enum work { W_SAME, W_RANDOM, W_APPEND, W_APPEND_FD, W_COUNT };
static const char *const work_names[W_COUNT] = { "same", "random", "append", "append-fd" };
static const char *const work_titles[W_COUNT] = {
	"same 4 KiB block, pwrite",
	"random 4 KiB r/w, 16 MiB",
	"O_APPEND 100-byte lines",
	"O_APPEND lines, one fd",
};
#define W_IS_APPEND(w) ((w) == W_APPEND || (w) == W_APPEND_FD)
/* append-fd: the descriptor every thread writes through. */
static int ct_shared_fd = -1;

#define CT_BLOCK 4096
#define CT_REGION (16u << 20)
#define CT_LINE 100
#define CT_CHECK_EVERY 16   /* same: one checking pread per 16 pwrites */

struct ct_thread {
	const struct opts *o;
	pthread_barrier_t *start;
	atomic_bool *stop;
	unsigned idx;
	uint64_t calls, torn;
	pthread_t tid;
};

/* A block is written whole with one byte value; anything else read back
 * is a torn or mixed read. */
static bool ct_uniform(const unsigned char *b, size_t n)
{
	for (size_t i = 1; i < n; i++)
		if (b[i] != b[0])
			return false;
	return true;
}

/* Line k of thread t: "t<t> <k> " padded with a per-line letter, then a
 * check digit and '\n'; exactly CT_LINE bytes. */
static void ct_line(char *l, unsigned t, uint64_t k)
{
	int n = snprintf(l, CT_LINE, "t%u %" PRIu64 " ", t, k);
	unsigned sum = 0;

	memset(l + n, 'a' + (int)((t + k) % 26), (size_t)(CT_LINE - 2 - n));
	for (int i = 0; i < CT_LINE - 2; i++)
		sum += (unsigned char)l[i];
	l[CT_LINE - 2] = (char)('0' + sum % 10);
	l[CT_LINE - 1] = '\n';
}

static void *ct_thread_main(void *arg)
{
	struct ct_thread *t = arg;
	const struct opts *o = t->o;
	int work = o->layout;
	bool ofd = o->mode == M_OFD;
	int fd = work == W_APPEND_FD ? ct_shared_fd
				     : open(o->file, work == W_APPEND ? O_WRONLY | O_APPEND : O_RDWR);
	unsigned char *wbuf = xalloc(CT_BLOCK), *rbuf = xalloc(CT_BLOCK);
	uint64_t rng = 0x9e3779b97f4a7c15ull * (t->idx + 1), k = 0;
	char line[CT_LINE];

	if (fd < 0)
		die("open %s", o->file);
	pthread_barrier_wait(t->start);
	while (!atomic_load_explicit(t->stop, memory_order_relaxed)) {
		for (int i = 0; i < 16; i++, k++) {
			uint64_t off = 0;
			bool rd = false;

			rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
			if (work == W_SAME) {
				rd = k % CT_CHECK_EVERY == CT_CHECK_EVERY - 1;
			} else if (work == W_RANDOM) {
				off = (rng >> 8) % (CT_REGION / CT_BLOCK) * CT_BLOCK;
				rd = rng & 1;
			} else {
				ct_line(line, t->idx, k);
				if (ofd)
					ofd_lock(fd, F_WRLCK, 0, 0);
				if (write(fd, line, CT_LINE) != CT_LINE)
					die("append");
				if (ofd)
					ofd_lock(fd, F_UNLCK, 0, 0);
				continue;
			}
			if (ofd)
				ofd_lock(fd, rd ? F_RDLCK : F_WRLCK, off, CT_BLOCK);
			if (rd) {
				read_full(fd, rbuf, CT_BLOCK, off);
				t->torn += !ct_uniform(rbuf, CT_BLOCK);
			} else {
				memset(wbuf, 'A' + (int)((t->idx * 7 + k) % 58), CT_BLOCK);
				write_full(fd, wbuf, CT_BLOCK, off);
			}
			if (ofd)
				ofd_lock(fd, F_UNLCK, off, CT_BLOCK);
		}
		t->calls += 16;
	}
	if (work != W_APPEND_FD)
		close(fd);
	free(wbuf);
	free(rbuf);
	return NULL;
}

/* Every appended line whole and each thread's lines in order: returns the
 * number of bad lines (counting missing bytes as a bad line). */
static uint64_t ct_check_append(const char *path, const struct ct_thread *t, unsigned n)
{
	uint64_t next[MAX_TASKS] = { 0 }, bad = 0, lines = 0, want = 0;
	char l[CT_LINE], expect[CT_LINE];
	FILE *f = fopen(path, "r");

	if (!f)
		die("open %s", path);
	while (fread(l, 1, CT_LINE, f) == CT_LINE) {
		unsigned tt;
		uint64_t kk;

		lines++;
		if (sscanf(l, "t%u %" SCNu64 " ", &tt, &kk) != 2 || tt >= n || kk != next[tt]) {
			bad++;
			continue;
		}
		ct_line(expect, tt, kk);
		bad += memcmp(l, expect, CT_LINE) != 0;
		next[tt] = kk + 1;
	}
	if (ftell(f) % CT_LINE)
		bad++;
	fclose(f);
	for (unsigned i = 0; i < n; i++)
		want += t[i].calls;
	/* A line still being written at stop was counted by nobody. */
	return bad + (lines < want ? want - lines : 0);
}

static int cmd_run_contended(const struct opts *o)
{
	unsigned n = o->tasks;
	struct ct_thread *t = calloc(n, sizeof *t);
	pthread_barrier_t start;
	atomic_bool stop = false;
	struct timespec ts = { (time_t)o->secs, (long)((o->secs - (double)(time_t)o->secs) * 1e9) };
	uint64_t calls = 0, torn = 0;
	double t0, t1;

	if (!t)
		die("calloc");
	if (W_IS_APPEND(o->layout)) {
		int fd = open(o->file, O_WRONLY | O_TRUNC);

		if (fd < 0)
			die("truncate %s", o->file);
		close(fd);
	}
	if (o->layout == W_APPEND_FD && (ct_shared_fd = open(o->file, O_WRONLY | O_APPEND)) < 0)
		die("open %s", o->file);
	pthread_barrier_init(&start, NULL, n + 1);
	for (unsigned i = 0; i < n; i++) {
		t[i] = (struct ct_thread){ .o = o, .start = &start, .stop = &stop, .idx = i };
		errno = pthread_create(&t[i].tid, NULL, ct_thread_main, &t[i]);
		if (errno)
			die("pthread_create");
	}
	pthread_barrier_wait(&start);
	t0 = now();
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
	atomic_store(&stop, true);
	for (unsigned i = 0; i < n; i++) {
		pthread_join(t[i].tid, NULL);
		calls += t[i].calls;
		torn += t[i].torn;
	}
	t1 = now();
	if (ct_shared_fd >= 0)
		close(ct_shared_fd);
	if (W_IS_APPEND(o->layout))
		torn = ct_check_append(o->file, t, n);
	/* One thread's time per call: threads x wall / calls. */
	printf("calls=%" PRIu64 " torn=%" PRIu64 " ns=%.1f\n", calls, torn,
	       (t1 - t0) * 1e9 * n / (double)calls);
	free(t);
	return 0;
}

enum { CM_UNLOCKED, CM_OFD, CM_RANGESHIM, CM_PROCESS, CM_COUNT };
static const char *const cm_names[CM_COUNT] = { "unlocked", "ofd", "rangeshim", "rs-process" };

static double run_contended(const struct opts *o, int cm, int work, unsigned n,
			    const char *file, double *torn)
{
	static const enum mode cm_mode[CM_COUNT] = { M_UNLOCKED, M_OFD, M_RANGESHIM, M_RANGESHIM };
	struct opts po = *o;
	struct args a = { .n = 0 };
	char out[OUT_MAX];

	if (cm == CM_PROCESS)
		po.scope = "process";
	arg(&a, PROG);
	arg(&a, "run-contended");
	arg(&a, "--mode=%s", mode_names[cm_mode[cm]]);
	arg(&a, "--work=%s", work_names[work]);
	arg(&a, "--tasks=%u", n);
	arg(&a, "--secs=%g", o->secs);
	arg(&a, "--file=%s", file);
	if (!spawn(&po, cm_mode[cm], NULL, &a, out, sizeof out, NULL, 0)) {
		*torn += NAN;
		return NAN;
	}
	*torn += field(out, "torn");
	return field(out, "ns");
}

static void cmd_contended(const struct opts *o)
{
	double ns[CM_COUNT][MAX_ROUNDS], med[CM_COUNT], torn[W_COUNT][CM_COUNT] = { { 0 } };
	double same4 = NAN, append4 = NAN, appendfd4 = NAN;
	char file[256], log[256];
	int fd;

	snprintf(file, sizeof file, "%s/iobench-%ld.contended", o->dir, (long)getpid());
	create_file(file, CT_REGION, false, CT_BLOCK);
	/* Appends get a file of their own: each run starts it empty. */
	snprintf(log, sizeof log, "%s/iobench-%ld.log", o->dir, (long)getpid());
	if ((fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0600)) < 0)
		die("create %s", log);
	close(fd);
	track_file(log);
	printf("\n== Contended (threads): the threads of one process meet on one file, %s %s ==\n",
	       o->dir, fs_name(o->dir));
	printf("  us = one thread's time per call (threads x wall / calls); (x) = that over "
	       "unlocked in the same round;\n  %.2f s per run, median of %u rounds, modes "
	       "interleaved.  same: every thread pwrites [0, 4K),\n  one checking pread per "
	       "%d calls; random: pread or pwrite (half each) of a random 4 KiB block of\n"
	       "  16 MiB; append: write() of 100-byte lines to one O_APPEND file (ofd: a "
	       "whole-file lock per line).\n  append-fd: the same through one O_APPEND "
	       "descriptor all threads share (ofd: the\n  locks of one description do not "
	       "exclude each other: that column is a cost only).\n  rs-process: the shim with RANGESHIM_SCOPE=process "
	       "(the range lock alone), as reference.\n\n", o->secs, o->rounds, CT_CHECK_EVERY);
	printf("  %-26s %7s", "workload", "threads");
	for (int c = 0; c < CM_COUNT; c++)
		printf(" %19s", cm_names[c]);
	printf("\n");
	for (int w = 0; w < W_COUNT; w++) {
		if (o->work_set && w != o->layout)
			continue;
		for (int li = 0; li < o->nlist; li++) {
			unsigned n = o->list[li];
			double ratio[CM_COUNT][MAX_ROUNDS];

			for (unsigned r = 0; r < o->rounds; r++) {
				for (int k = 0; k < CM_COUNT; k++) {
					int c = (k + (int)r) % CM_COUNT;

					ns[c][r] = run_contended(o, c, w, n,
								 W_IS_APPEND(w) ? log : file,
								 &torn[w][c]);
				}
				for (int c = 0; c < CM_COUNT; c++)
					ratio[c][r] = ns[c][r] / ns[CM_UNLOCKED][r];
			}
			printf("  %-26s %7u", work_titles[w], n);
			for (int c = 0; c < CM_COUNT; c++) {
				med[c] = median(ns[c], o->rounds);
				if (c == CM_UNLOCKED)
					printf(" %9.2f us        ", med[c] / 1e3);
				else
					printf(" %9.2f us (%4.2fx)", med[c] / 1e3,
					       median(ratio[c], o->rounds));
			}
			printf("\n");
			fflush(stdout);
			if (n == 4 && w == W_SAME)
				same4 = median(ratio[CM_RANGESHIM], o->rounds);
			if (n == 4 && w == W_APPEND)
				append4 = median(ratio[CM_RANGESHIM], o->rounds);
			if (n == 4 && w == W_APPEND_FD)
				appendfd4 = median(ratio[CM_RANGESHIM], o->rounds);
		}
	}
	printf("\n  correctness, all rounds (torn or mixed reads; for append, bad or missing "
	       "lines):\n");
	for (int w = 0; w < W_COUNT; w++) {
		printf("    %-8s", work_names[w]);
		for (int c = 0; c < CM_COUNT; c++)
			printf("  %s %.0f", cm_names[c], torn[w][c]);
		printf("%s\n", torn[w][CM_RANGESHIM] == 0 && torn[w][CM_PROCESS] == 0 ? "" :
		       "   <- the shim let a conflict through");
	}
	if (!isnan(same4))
		printf("  rangeshim / unlocked, 4 threads, same block: %.2fx (bar 2, goal 1.3): %s\n",
		       same4, same4 <= 1.3 ? "goal met" : same4 <= 2 ? "bar met" : "MISSED");
	if (!isnan(append4))
		printf("  rangeshim / unlocked, 4 threads, append:     %.2fx (bar 1.5, goal 1.2): %s\n",
		       append4, append4 <= 1.2 ? "goal met" : append4 <= 1.5 ? "bar met" : "MISSED");
	if (!isnan(appendfd4))
		printf("  rangeshim / unlocked, 4 threads, one fd:     %.2fx (bar 1.5): %s\n",
		       appendfd4, appendfd4 <= 1.5 ? "bar met" : "MISSED");
	remove_file(file);
	remove_file(log);
}

/* ------------------------------------------------------------------ */
/* lock: the range lock alone.                                         */

enum lk { LK_RANGE, LK_FAST, LK_MUTEX, LK_RWLOCK, LK_OFD, LK_COUNT };
static const char *const lk_names[LK_COUNT] = {
	"rangelock", "rangelock-fast", "pthread_mutex", "pthread_rwlock", "ofd",
};

enum pat { P_DISJOINT, P_OVERLAP, P_READ, P_COUNT };
static const char *const pat_names[P_COUNT] = {
	"disjoint writers: thread t write-locks [4K*t, 4K*(t+1))",
	"overlapping writers: every thread write-locks [0, 4K)",
	"overlapping readers: every thread read-locks [0, 4K)",
};

#define LK_SPAN 4096
#define LK_BATCH 64

struct lk_bench {
	enum lk kind;
	enum pat pat;
	struct rs_rangelock rl;
	pthread_mutex_t mu;
	pthread_rwlock_t rw;
	const char *path;
	pthread_barrier_t start;
	atomic_bool stop;
};

struct lk_thread {
	struct lk_bench *b;
	unsigned idx;
	uint64_t pairs;
	pthread_t tid;
};

static void *lk_thread_main(void *arg)
{
	struct lk_thread *t = arg;
	struct lk_bench *b = t->b;
	uint64_t start = b->pat == P_DISJOINT ? (uint64_t)t->idx * LK_SPAN : 0;
	bool rd = b->pat == P_READ;
	unsigned mode = rd ? RS_RL_READ : RS_RL_WRITE;
	int fd = -1;

	/* OFD locks belong to the open file description: one per thread,
	 * as each ROMIO process has its own. */
	if (b->kind == LK_OFD && (fd = open(b->path, O_RDWR)) < 0)
		die("open %s", b->path);
	pthread_barrier_wait(&b->start);
	while (!atomic_load_explicit(&b->stop, memory_order_relaxed)) {
		for (int i = 0; i < LK_BATCH; i++) {
			struct rs_rl_node node;

			switch (b->kind) {
			case LK_RANGE:
				rs_rangelock_lock(&b->rl, &node, start, start + LK_SPAN, mode);
				rs_rangelock_unlock(&b->rl, &node);
				break;
			case LK_FAST:
				rs_rangelock_lock_fast(&b->rl, &node, start, start + LK_SPAN, mode);
				rs_rangelock_unlock_fast(&b->rl, &node);
				break;
			case LK_MUTEX:
				pthread_mutex_lock(&b->mu);
				pthread_mutex_unlock(&b->mu);
				break;
			case LK_RWLOCK:
				if (rd)
					pthread_rwlock_rdlock(&b->rw);
				else
					pthread_rwlock_wrlock(&b->rw);
				pthread_rwlock_unlock(&b->rw);
				break;
			default:
				ofd_lock(fd, rd ? F_RDLCK : F_WRLCK, start, LK_SPAN);
				ofd_lock(fd, F_UNLCK, start, LK_SPAN);
				break;
			}
		}
		t->pairs += LK_BATCH;
	}
	if (fd >= 0)
		close(fd);
	return NULL;
}

/*
 * Pairs per second with n threads; `held` other ranges stay locked the
 * whole time, far from the ones being measured (by another owner, so the
 * kernel cannot merge them).  Returns the aggregate rate.
 */
static double lk_measure(const struct opts *o, enum lk kind, enum pat pat, unsigned n,
			 const char *path, unsigned held)
{
	struct lk_bench b = { .kind = kind, .pat = pat, .path = path };
	struct lk_thread t[MAX_TASKS];
	struct timespec ts = { (time_t)o->secs, (long)((o->secs - (double)(time_t)o->secs) * 1e9) };
	struct rs_rl_node *nodes = NULL;
	uint64_t pairs = 0;
	double t0, t1;
	int hfd = -1;

	rs_rangelock_init(&b.rl);
	pthread_mutex_init(&b.mu, NULL);
	pthread_rwlock_init(&b.rw, NULL);
	atomic_init(&b.stop, false);
	if (held) {
		uint64_t base = (uint64_t)(MAX_TASKS + 1) * LK_SPAN;

		nodes = calloc(held, sizeof *nodes);
		if (!nodes || (hfd = open(path, O_RDWR)) < 0)
			die("held locks");
		for (unsigned i = 0; i < held; i++) {
			uint64_t s = base + 2 * (uint64_t)i * LK_SPAN;

			if (kind == LK_OFD)
				ofd_lock(hfd, F_WRLCK, s, LK_SPAN);
			else
				rs_rangelock_lock(&b.rl, &nodes[i], s, s + LK_SPAN, RS_RL_WRITE);
		}
	}
	pthread_barrier_init(&b.start, NULL, n + 1);
	for (unsigned i = 0; i < n; i++) {
		t[i] = (struct lk_thread){ .b = &b, .idx = i };
		errno = pthread_create(&t[i].tid, NULL, lk_thread_main, &t[i]);
		if (errno)
			die("pthread_create");
	}
	pthread_barrier_wait(&b.start);
	t0 = now();
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
	atomic_store(&b.stop, true);
	for (unsigned i = 0; i < n; i++) {
		pthread_join(t[i].tid, NULL);
		pairs += t[i].pairs;
	}
	t1 = now();
	if (held) {
		if (kind != LK_OFD)
			for (unsigned i = 0; i < held; i++)
				rs_rangelock_unlock(&b.rl, &nodes[i]);
		close(hfd);   /* drops its OFD locks */
		free(nodes);
	}
	pthread_barrier_destroy(&b.start);
	pthread_rwlock_destroy(&b.rw);
	pthread_mutex_destroy(&b.mu);
	return (double)pairs / (t1 - t0);
}

static void cmd_lock(const struct opts *o)
{
	double rate[LK_COUNT][MAX_ROUNDS], med[LK_COUNT];
	char path[256];
	int fd;

	snprintf(path, sizeof path, "%s/iobench-%ld.lock", o->dir, (long)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW, 0600);
	if (fd < 0)
		die("create %s", path);
	close(fd);
	track_file(path);
	printf("\n== Lock microbenchmark: lock + unlock pairs, no I/O (OFD on %s %s) ==\n",
	       o->dir, fs_name(o->dir));
	printf("  rangelock: rs_rangelock_lock/unlock (shim/core/rangelock.c); rangelock-fast: the "
	       "inline path\n  the shim's pread/pwrite take (shim/core/rangelock_fast.h); %.2f s per "
	       "cell, median of %u rounds (not the best: a lucky\n  round in which the threads "
	       "seldom met would flatter a slow contended path).\n  ns = one thread's time per pair (threads x wall / "
	       "pairs); M/s = million pairs per second, all threads;\n  rangelock/ofd = "
	       "rangelock pairs per second over ofd pairs per second (above 1: faster);\n  rangelock/mutex = "
	       "rangelock time per pair over pthread_mutex's (issue 9's goal: at most 2).\n", o->secs, o->rounds);
	if (o->list[o->nlist - 1] > 2)
		printf("  More threads than the %ld cores: contended rows measure the scheduler "
		       "as much as the lock.\n", sysconf(_SC_NPROCESSORS_ONLN));
	for (int p = 0; p < P_COUNT; p++) {
		printf("\n  %s\n  %7s", pat_names[p], "threads");
		for (int k = 0; k < LK_COUNT; k++)
			printf(" %19s", lk_names[k]);
		printf(" | rangelock/ofd  ns: rangelock/mutex\n");
		for (int li = 0; li < o->nlist; li++) {
			unsigned n = o->list[li];

			for (unsigned r = 0; r < o->rounds; r++)
				for (int k = 0; k < LK_COUNT; k++) {
					int j = (k + (int)r) % LK_COUNT;

					rate[j][r] = lk_measure(o, (enum lk)j, (enum pat)p, n, path, 0);
				}
			printf("  %7u", n);
			for (int k = 0; k < LK_COUNT; k++) {
				med[k] = median(rate[k], o->rounds);
				printf(" %6.0f ns %6.2f M/s", 1e9 * n / med[k], med[k] / 1e6);
			}
			printf(" | %12.1fx %20.2fx\n", med[LK_RANGE] / med[LK_OFD],
			       med[LK_MUTEX] / med[LK_RANGE]);
			fflush(stdout);
		}
	}
	printf("\n  one thread, while 1000 other ranges of the file are held (the kernel keeps "
	       "a file's locks\n  on a list; so does the range lock, but the shim queues at most "
	       "one range per thread in I/O)\n  %7s %19s %19s\n", "held", lk_names[LK_RANGE],
	       lk_names[LK_OFD]);
	for (unsigned held = 0; held <= 1000; held += 1000) {
		double rr[MAX_ROUNDS], ro[MAX_ROUNDS], mr, mo;

		for (unsigned r = 0; r < o->rounds; r++) {
			rr[r] = lk_measure(o, LK_RANGE, P_DISJOINT, 1, path, held);
			ro[r] = lk_measure(o, LK_OFD, P_DISJOINT, 1, path, held);
		}
		mr = median(rr, o->rounds);
		mo = median(ro, o->rounds);
		printf("  %7u %6.0f ns %6.3f M/s %6.0f ns %6.3f M/s\n", held, 1e9 / mr, mr / 1e6,
		       1e9 / mo, mo / 1e6);
	}
	remove_file(path);
}

/* ------------------------------------------------------------------ */

static int cmd_run_probe(const struct opts *o)
{
	static char buf[ALIGN];
	int fd = open(o->file, O_RDWR | O_CREAT | O_TRUNC, 0600);

	if (fd < 0)
		die("open %s", o->file);
	write_full(fd, buf, sizeof buf, 0);
	close(fd);
	printf("ok=1\n");
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
"Usage: " PROG " COMMAND [OPTION]...   (tests/bench/bench.sh runs them all)\n"
"  lustre  [--procs] [--direct] [--tasks=1,2,4] [--total=SIZE] [--passes=N]\n"
"  gfs2    [--tasks=1,2,4] [--size=SIZE per writer]\n"
"  mixed   [--readers=N] [--writers=N] [--size=SIZE] [--secs=S]\n"
"  small   [--secs=S]\n"
"  lock    [--tasks=1,2,4 (threads)] [--secs=S]\n"
"  contended [--tasks=2,4 (threads)] [--secs=S] [--work=same|random|append (one)]\n"
"  scope   print the scope the shim really runs in by default\n"
"Common: --dir=DIR (files go here; default /tmp) --lib=PATH (librangeshim.so)\n"
"        --block=SIZE --rounds=N --dat=FILE (plot data) --scope=S (RANGESHIM_SCOPE\n"
"        for the rangeshim mode; default: unset, the shim's default)\n"
"        --timeout=S (a run still going after S seconds is killed; default 60)\n"
"        --shm=NAME (each shim run gets RANGESHIM_SHM=NAME-N, removed after the\n"
"        run; default /iobench-PID; empty: the shim's default segment)\n"
"Internal: run, run-mixed, run-small, run-first, run-probe, run-contended\n"
"        (--mode, --file, --work=same|random|append, ...)\n");
}

static void parse_args(int argc, char **argv, struct opts *o)
{
	enum { O_DIR = 256, O_LIB, O_DAT, O_FILE, O_SCOPE, O_SHM, O_TASKS, O_PROCS, O_DIRECT_, O_TOTAL,
	       O_SIZE, O_BLOCK, O_PASSES, O_ROUNDS, O_SECS, O_READERS, O_WRITERS, O_MODE,
	       O_LAYOUT, O_TIMEOUT, O_WORK, O_HELP };
	static const struct option lopts[] = {
		{ "dir", required_argument, NULL, O_DIR },
		{ "lib", required_argument, NULL, O_LIB },
		{ "dat", required_argument, NULL, O_DAT },
		{ "file", required_argument, NULL, O_FILE },
		{ "scope", required_argument, NULL, O_SCOPE },
		{ "shm", required_argument, NULL, O_SHM },
		{ "tasks", required_argument, NULL, O_TASKS },
		{ "procs", no_argument, NULL, O_PROCS },
		{ "direct", no_argument, NULL, O_DIRECT_ },
		{ "total", required_argument, NULL, O_TOTAL },
		{ "size", required_argument, NULL, O_SIZE },
		{ "block", required_argument, NULL, O_BLOCK },
		{ "passes", required_argument, NULL, O_PASSES },
		{ "rounds", required_argument, NULL, O_ROUNDS },
		{ "secs", required_argument, NULL, O_SECS },
		{ "readers", required_argument, NULL, O_READERS },
		{ "writers", required_argument, NULL, O_WRITERS },
		{ "mode", required_argument, NULL, O_MODE },
		{ "layout", required_argument, NULL, O_LAYOUT },
		{ "timeout", required_argument, NULL, O_TIMEOUT },
		{ "work", required_argument, NULL, O_WORK },
		{ "help", no_argument, NULL, O_HELP },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	char *end;

	*o = (struct opts){ .dir = "/tmp", .lib = "build/librangeshim.so",
			    .list = { 1, 2, 4 }, .nlist = 3, .total = 256ULL << 20,
			    .size = 32ULL << 20, .block = 64ULL << 10, .passes = 1,
			    .rounds = 3, .secs = 0.3, .timeout = 60, .readers = 1, .writers = 1,
			    .mode = M_UNLOCKED, .tasks = 1 };
	optind = 2;
	while ((c = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
		switch (c) {
		case O_DIR: o->dir = optarg; break;
		case O_LIB: o->lib = optarg; break;
		case O_DAT: o->dat = optarg; break;
		case O_FILE: o->file = optarg; break;
		case O_SCOPE: o->scope = *optarg ? optarg : NULL; break;
		case O_SHM: o->shm = optarg; break;
		case O_TASKS:
			if (!parse_list(optarg, o))
				goto bad;
			o->tasks = o->list[0];
			break;
		case O_PROCS: o->procs = true; break;
		case O_DIRECT_: o->direct = true; break;
		case O_TOTAL: if (!parse_size(optarg, &o->total)) goto bad; break;
		case O_SIZE: if (!parse_size(optarg, &o->size)) goto bad; break;
		case O_BLOCK:
			if (!parse_size(optarg, &o->block) || o->block > (1ULL << 30))
				goto bad;
			break;
		case O_PASSES: if (!parse_uint(optarg, 1, 1000, &o->passes)) goto bad; break;
		case O_ROUNDS:
			if (!parse_uint(optarg, 1, MAX_ROUNDS, &o->rounds))
				goto bad;
			break;
		case O_SECS:
			o->secs = strtod(optarg, &end);
			if (*end || !(o->secs > 0 && o->secs < 3600))
				goto bad;
			break;
		case O_READERS: if (!parse_uint(optarg, 1, MAX_TASKS / 2, &o->readers)) goto bad; break;
		case O_WRITERS: if (!parse_uint(optarg, 1, MAX_TASKS / 2, &o->writers)) goto bad; break;
		case O_MODE: if ((o->mode = mode_parse(optarg)) < 0) goto bad; break;
		case O_LAYOUT:
			for (o->layout = 0; o->layout < 3; o->layout++)
				if (strcmp(optarg, layout_names[o->layout]) == 0)
					break;
			if (o->layout == 3)
				goto bad;
			break;
		case O_TIMEOUT:
			o->timeout = strtod(optarg, &end);
			if (*end || !(o->timeout >= 1 && o->timeout < 86400))
				goto bad;
			break;
		case O_WORK:
			for (o->layout = 0; o->layout < W_COUNT; o->layout++)
				if (strcmp(optarg, work_names[o->layout]) == 0)
					break;
			if (o->layout == W_COUNT)
				goto bad;
			o->work_set = true;
			break;
		case O_HELP: usage(stdout); exit(0);
		default: usage(stderr); exit(2);
		}
	}
	if (optind < argc) {
		fprintf(stderr, PROG ": unexpected argument '%s'\n", argv[optind]);
		exit(2);
	}
	if (o->direct && o->block % ALIGN) {
		fprintf(stderr, PROG ": --direct needs --block to be a multiple of %d\n", ALIGN);
		exit(2);
	}
	return;
bad:
	fprintf(stderr, PROG ": invalid value '%s' for %s\n", optarg, argv[optind - 1]);
	exit(2);
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : "";
	struct opts o;

	if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
		usage(stdout);
		return 0;
	}
	parse_args(argc, argv, &o);
	/* Internal subcommands: one measurement, in whatever environment the
	 * table process gave us. */
	if (!strncmp(cmd, "run", 3) && !o.file) {
		fprintf(stderr, PROG ": %s needs --file\n", cmd);
		return 2;
	}
	if (!strcmp(cmd, "run"))
		return cmd_run(&o);
	if (!strcmp(cmd, "run-mixed"))
		return cmd_run_mixed(&o);
	if (!strcmp(cmd, "run-small"))
		return cmd_run_small(&o);
	if (!strcmp(cmd, "run-probe"))
		return cmd_run_probe(&o);
	if (!strcmp(cmd, "run-first"))
		return cmd_run_first(&o);
	if (!strcmp(cmd, "run-contended"))
		return cmd_run_contended(&o);

	if (getenv("LD_PRELOAD"))
		fprintf(stderr, PROG ": note: LD_PRELOAD is set for the table process; "
			"its runs get their own environment\n");
	install_cleanup();
	/*
	 * The shim's runs get node tables of their own (spawn): the default
	 * segment belongs to whatever else the user runs, and a benchmark
	 * should neither disturb it nor be disturbed by it.  --shm= (empty)
	 * uses the shim's default.  Our files and segments are named
	 * iobench-PID*, not rangeshim-*: whatever clears stale rangeshim-*
	 * segments from /dev/shm took a benchmark file away mid-run once.
	 */
	if (!o.shm) {
		static char name[64];

		snprintf(name, sizeof name, "/iobench-%ld", (long)getpid());
		o.shm = name;
	} else if (!*o.shm) {
		o.shm = NULL;
	}
	if (!strcmp(cmd, "lustre"))
		cmd_lustre(&o);
	else if (!strcmp(cmd, "gfs2"))
		cmd_gfs2(&o);
	else if (!strcmp(cmd, "mixed"))
		cmd_mixed(&o);
	else if (!strcmp(cmd, "small"))
		cmd_small(&o);
	else if (!strcmp(cmd, "lock"))
		cmd_lock(&o);
	else if (!strcmp(cmd, "contended"))
		cmd_contended(&o);
	else if (!strcmp(cmd, "scope"))
		printf("%s\n", effective_scope(&o));
	else {
		usage(stderr);
		return 2;
	}
	if (any_failed)
		printf("\n" PROG ": some runs failed or hung (their cells read nan); see the "
		       "messages above\n");
	return fflush(stdout) == 0 && !any_failed ? 0 : 1;
}
