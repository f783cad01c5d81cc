/*
 * rangeshim check [PATH]: does this file system tear, and does the shim
 * stop it?  The installed-tree version of `make demo`'s first half.
 *
 * A file in PATH (default: the current directory) is raced by one writer
 * thread (--processes: a writer process) rewriting a block with pwrite and
 * reader threads preading it, twice: once without the shim (the control) and once with it.  Each run
 * is this same program re-executed as a hidden worker (`check --worker`),
 * so nothing from the source tree is needed: the shim's leg gets
 * LD_PRELOAD from the same search `run` uses, and the control gets no
 * LD_PRELOAD at all.  The rest of the environment (RANGESHIM_SCOPE,
 * RANGESHIM_PATHS, ...) is passed on, so the check tests the settings the
 * user would run with.
 *
 * Each write fills the block with one byte value (1..255, never 0); a
 * read is torn when its bytes are not all equal, as in
 * examples/torn_read.c.  The worker also reports whether the library is
 * mapped into it, so a preload the loader ignored (a setuid worker, a
 * wrong architecture) is named instead of passing as "no tears".
 *
 * Exit status: 0 when the shim's leg saw no torn read (and did work),
 * 1 when it tore, did nothing, or had no shim; 2 on usage errors or no
 * library; 3 when the file system refused what the check needs (the
 * reason is printed: read-only, no space, not a directory, ...).
 */
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <sys/wait.h>

#include "preload.h"

#define EXIT_FS 3
#define ALIGN 4096
#define MAX_READERS 64

/* ---- the worker: one race, "reads=N torn=N writes=N shim=0|1" ---- */

/* Shared with the writer process under --processes (MAP_SHARED). */
struct race {
	const char *path;
	size_t block;
	bool direct;
	uint64_t deadline_ns;
	atomic_bool stop;
	atomic_int err;        /* first errno of a failed call, or 0 */
	uint64_t child_writes; /* the writer process's count */
};

struct reader {
	pthread_t tid;
	struct race *r;
	uint64_t reads, torn;
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void fail_call(struct race *r)
{
	int z = 0, e = errno ? errno : EIO;

	atomic_compare_exchange_strong(&r->err, &z, e);
	atomic_store(&r->stop, true);
}

static void *writer_main(void *arg)
{
	struct race *r = arg;
	uint64_t *writes = malloc(sizeof(*writes));
	unsigned char *buf = NULL;
	unsigned gen = 1;
	int fd;

	if (!writes || posix_memalign((void **)&buf, ALIGN, r->block)) {
		fail_call(r);
		free(writes);
		return NULL;
	}
	*writes = 0;
	fd = open(r->path, O_WRONLY | O_CLOEXEC | (r->direct ? O_DIRECT : 0));
	if (fd < 0)
		fail_call(r);
	while (fd >= 0 && !atomic_load_explicit(&r->stop, memory_order_relaxed)) {
		ssize_t n;

		gen = gen == 255 ? 1 : gen + 1;
		memset(buf, (int)gen, r->block);
		n = pwrite(fd, buf, r->block, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n != (ssize_t)r->block) {
			if (n >= 0)
				errno = ENOSPC;   /* a short write of a regular file */
			fail_call(r);
			break;
		}
		(*writes)++;
	}
	if (fd >= 0)
		close(fd);
	free(buf);
	return writes;
}

static bool uniform(const unsigned char *p, size_t n)
{
	return p[0] != 0 && memcmp(p, p + 1, n - 1) == 0;
}

static void *reader_main(void *arg)
{
	struct reader *rd = arg;
	struct race *r = rd->r;
	unsigned char *buf = NULL;
	int fd;

	if (posix_memalign((void **)&buf, ALIGN, r->block)) {
		fail_call(r);
		return NULL;
	}
	fd = open(r->path, O_RDONLY | O_CLOEXEC | (r->direct ? O_DIRECT : 0));
	if (fd < 0)
		fail_call(r);
	while (fd >= 0 && !atomic_load_explicit(&r->stop, memory_order_relaxed)) {
		/* One call, never finished by a second: that would itself be
		 * a non-atomic read.  The file is pre-filled, so short is an
		 * error, not a tear. */
		ssize_t n = pread(fd, buf, r->block, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n != (ssize_t)r->block) {
			if (n >= 0)
				errno = EIO;
			fail_call(r);
			break;
		}
		rd->reads++;
		if (!uniform(buf, r->block))
			rd->torn++;
		if ((rd->reads & 15) == 0 && mono_ns() >= r->deadline_ns)
			break;
	}
	atomic_store(&r->stop, true);
	if (fd >= 0)
		close(fd);
	free(buf);
	return NULL;
}

/* Is a library named LIB_NAME mapped into this process? */
static bool shim_mapped(void)
{
	char line[PATH_MAX + 128];
	bool found = false;
	FILE *f = fopen("/proc/self/maps", "re");

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		char *slash = strrchr(line, '/');

		found = slash && !strncmp(slash + 1, LIB_NAME, strlen(LIB_NAME));
	}
	fclose(f);
	return found;
}

/* check --worker FILE BLOCK READERS SECONDS DIRECT PROCESSES */
static int worker(char **argv)
{
	struct race *r = mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
			      -1, 0);
	struct reader rd[MAX_READERS];
	unsigned readers = (unsigned)strtoul(argv[2], NULL, 10);
	uint64_t reads = 0, torn = 0, writes = 0;
	bool procs = argv[5][0] == '1';
	pid_t child = -1;
	pthread_t wt;
	void *wres = NULL;
	int e, st;

	if (r == MAP_FAILED) {
		perror("rangeshim check: mmap");
		return 1;
	}
	r->path = argv[0];
	r->block = (size_t)strtoull(argv[1], NULL, 10);
	r->direct = argv[4][0] == '1';
	r->deadline_ns = mono_ns() + (uint64_t)(strtod(argv[3], NULL) * 1e9);
	atomic_init(&r->stop, false);
	atomic_init(&r->err, 0);
	if (r->block < 2 || readers < 1 || readers > MAX_READERS)
		return EXIT_USAGE;
	if (procs) {
		/* The writer in a process of its own: the shim must then
		 * exclude another process (node scope), not just a thread. */
		fflush(stdout);
		child = fork();
		if (child < 0) {
			perror("rangeshim check: fork");
			return 1;
		}
		if (child == 0) {
			wres = writer_main(r);
			r->child_writes = wres ? *(uint64_t *)wres : 0;
			exit(0);
		}
	} else if ((e = pthread_create(&wt, NULL, writer_main, r))) {
		errno = e;
		perror("rangeshim check: thread");
		return 1;
	}
	for (unsigned i = 0; i < readers; i++) {
		rd[i] = (struct reader){ .r = r };
		if ((e = pthread_create(&rd[i].tid, NULL, reader_main, &rd[i]))) {
			atomic_store(&r->stop, true);
			readers = i;
			break;
		}
	}
	for (unsigned i = 0; i < readers; i++) {
		pthread_join(rd[i].tid, NULL);
		reads += rd[i].reads;
		torn += rd[i].torn;
	}
	atomic_store(&r->stop, true);
	if (procs) {
		while (waitpid(child, &st, 0) < 0 && errno == EINTR)
			;
		writes = r->child_writes;
	} else {
		pthread_join(wt, &wres);
		if (wres)
			writes = *(uint64_t *)wres;
		free(wres);
	}
	printf("reads=%" PRIu64 " torn=%" PRIu64 " writes=%" PRIu64 " shim=%d err=%d\n",
	       reads, torn, writes, shim_mapped(), atomic_load(&r->err));
	return fflush(stdout) == 0 ? 0 : 1;
}

/*
 * check --append-worker FILE RECORD WRITERS SECONDS CAP: WRITERS processes
 * append RECORD-byte records to FILE through O_APPEND descriptors of
 * their own, each record filled with its writer's tag (1..WRITERS), until
 * SECONDS pass or the file would pass CAP bytes.  Then the file is read
 * back record by record: a record whose bytes are not all one tag was
 * interleaved with another's; records written but not in the file (or
 * the file not a whole number of records) were lost.  A 6th argument,
 * "seek", has the writers find the end with lseek and then write, without
 * O_APPEND: the race O_APPEND exists to close, which loses records; the
 * tests use it to show that this read-back sees losses.
 */
struct appenders {
	uint64_t deadline_ns, cap_records;
	atomic_uint_fast64_t total;            /* records written, all writers */
	uint64_t written[MAX_READERS];
	atomic_int err;
};

static void append_writer(struct appenders *a, const char *path, size_t record, int tag,
			  bool seek)
{
	unsigned char *buf = malloc(record);
	int fd = open(path, O_WRONLY | O_CLOEXEC | (seek ? 0 : O_APPEND));

	if (!buf || fd < 0) {
		int z = 0;

		atomic_compare_exchange_strong(&a->err, &z, errno ? errno : ENOMEM);
		_exit(1);
	}
	memset(buf, tag, record);
	/* At least one record each, however late the writer starts: on a
	 * loaded machine the deadline may pass before some writers run, and
	 * a leg that appended nothing proves nothing. */
	for (bool first = true; (first || mono_ns() < a->deadline_ns) &&
				atomic_fetch_add(&a->total, 1) < a->cap_records;
	     first = false) {
		ssize_t n;

		if (seek && lseek(fd, 0, SEEK_END) < 0)
			break;
		n = write(fd, buf, record);
		if (n < 0 && errno == EINTR)
			continue;
		if (n != (ssize_t)record) {
			int z = 0;

			atomic_compare_exchange_strong(&a->err, &z, n < 0 ? errno : ENOSPC);
			break;
		}
		a->written[tag - 1]++;
	}
	close(fd);
	_exit(0);
}

static int append_worker(char **argv)
{
	struct appenders *a = mmap(NULL, sizeof(*a), PROT_READ | PROT_WRITE,
				   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	const char *path = argv[0];
	size_t record = (size_t)strtoull(argv[1], NULL, 10);
	unsigned writers = (unsigned)strtoul(argv[2], NULL, 10);
	uint64_t written = 0, records = 0, interleaved = 0, lost = 0;
	unsigned char *buf;
	struct stat st;
	int fd, st_;

	if (a == MAP_FAILED || record < 2 || writers < 2 || writers > MAX_READERS)
		return EXIT_USAGE;
	a->deadline_ns = mono_ns() + (uint64_t)(strtod(argv[3], NULL) * 1e9);
	a->cap_records = strtoull(argv[4], NULL, 10) / record;
	fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
	if (fd < 0)
		return perror("rangeshim check: open"), 1;
	close(fd);
	fflush(stdout);
	for (unsigned w = 0; w < writers; w++) {
		pid_t p = fork();

		if (p == 0)
			append_writer(a, path, record, (int)w + 1, argv[5] && !strcmp(argv[5], "seek"));
		if (p < 0)
			__atomic_store_n(&a->deadline_ns, 0, __ATOMIC_RELAXED); /* stop the others */
	}
	while (wait(&st_) > 0 || errno == EINTR)
		;
	for (unsigned w = 0; w < writers; w++)
		written += a->written[w];
	buf = malloc(record);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (!buf || fd < 0 || fstat(fd, &st) < 0)
		return perror("rangeshim check: read back"), 1;
	for (off_t off = 0; off + (off_t)record <= st.st_size; off += (off_t)record) {
		if (pread(fd, buf, record, off) != (ssize_t)record)
			return perror("rangeshim check: read back"), 1;
		records++;
		if (!uniform(buf, record) || buf[0] > writers)
			interleaved++;
	}
	close(fd);
	free(buf);
	/* Lost: written but not there, or a tail that is no whole record. */
	lost = (written > records ? written - records : 0) + (st.st_size % (off_t)record != 0);
	printf("appends=%" PRIu64 " records=%" PRIu64 " interleaved=%" PRIu64 " lost=%" PRIu64
	       " shim=%d err=%d\n", written, records, interleaved, lost, shim_mapped(),
	       atomic_load(&a->err));
	return fflush(stdout) == 0 ? 0 : 1;
}

/* ---- the check ---- */

struct leg {
	uint64_t reads, torn, writes;
	uint64_t appends, records, interleaved, lost;   /* the append race */
	int shim, err;
	const char *trouble;   /* why the leg has no result, or NULL */
};

static char test_file[PATH_MAX];

static void remove_test_file(void)
{
	if (test_file[0])
		unlink(test_file);
}

static void on_signal(int sig)
{
	/* Async-signal-safe: unlink, then die of the same signal. */
	if (test_file[0])
		unlink(test_file);
	signal(sig, SIG_DFL);
	raise(sig);
}

static const char *fs_type(const char *dir, char *buf, size_t len)
{
	static const struct { long magic; const char *name; } known[] = {
		{ 0xEF53, "ext4" }, { 0x01021994, "tmpfs" }, { 0x58465342, "xfs" },
		{ 0x9123683E, "btrfs" }, { 0x2FC12FC1, "zfs" }, { 0x6969, "nfs" },
		{ 0x0BD00BD0, "lustre" }, { 0x01161970, "gfs2" }, { 0x65735546, "fuse" },
		{ 0x47504653, "gpfs" }, { 0x794C7630, "overlayfs" }, { 0xFF534D42, "cifs" },
		{ 0x00C36400, "ceph" }, { 0x5346414F, "afs" }, { 0x4D44, "vfat" },
	};
	struct statfs sf;

	if (statfs(dir, &sf) < 0)
		return "unknown fs";
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if ((long)sf.f_type == known[i].magic)
			return known[i].name;
	snprintf(buf, len, "fs type 0x%lx", (unsigned long)sf.f_type);
	return buf;
}

/* A plain-words reason for an errno the file system gave. */
static const char *fs_reason(int e)
{
	switch (e) {
	case EROFS: return "read-only file system";
	case ENOSPC: return "no space left on the file system";
	case EDQUOT: return "disk quota exceeded";
	case ENOTDIR: return "not a directory";
	case ENOENT: return "no such directory";
	case EACCES: case EPERM: return "permission denied (cannot create a file here)";
	case EFBIG: return "file size limit exceeded";
	default: return strerror(e);
	}
}

static int refuse(const char *dir, const char *what, int e)
{
	char shown[PATH_MAX * 4 + 8];

	escape_text(dir, shown, sizeof(shown));
	fprintf(stderr, "rangeshim check: %s: %s%s%s\n", shown, fs_reason(e),
		what ? ": " : "", what ? what : "");
	if (e != ENOTDIR && e != ENOENT)
		fputs("rangeshim check: the check needs a file it can create, fill and "
		      "rewrite in that directory\n", stderr);
	remove_test_file();
	return EXIT_FS;
}

/* Create and pre-fill the test file (generation 1, so no read is short). */
static int make_test_file(const char *dir, size_t block, bool direct)
{
	struct statvfs sv;
	struct stat st;
	unsigned char *buf;
	size_t done = 0;
	int fd;

	if (stat(dir, &st) < 0)
		return refuse(dir, NULL, errno);
	if (!S_ISDIR(st.st_mode))
		return refuse(dir, NULL, ENOTDIR);
	if (statvfs(dir, &sv) == 0) {
		if (sv.f_flag & ST_RDONLY)
			return refuse(dir, NULL, EROFS);
		if ((unsigned long long)sv.f_bavail * sv.f_frsize < block) {
			char need[96];

			snprintf(need, sizeof(need), "%llu bytes free, the check needs %zu",
				 (unsigned long long)sv.f_bavail * sv.f_frsize, block);
			return refuse(dir, need, ENOSPC);
		}
	}
	if ((size_t)snprintf(test_file, sizeof(test_file), "%s/.rangeshim-check.XXXXXX", dir) >=
	    sizeof(test_file)) {
		test_file[0] = '\0';
		return refuse(dir, "path too long", ENAMETOOLONG);
	}
	fd = mkstemp(test_file);
	if (fd < 0) {
		int e = errno;

		test_file[0] = '\0';
		return refuse(dir, NULL, e);
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
	if (posix_memalign((void **)&buf, ALIGN, block)) {
		close(fd);
		perror("rangeshim check");
		return 1;
	}
	memset(buf, 1, block);
	while (done < block) {
		ssize_t n = pwrite(fd, buf + done, block - done, (off_t)done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int e = n < 0 ? errno : ENOSPC;

			free(buf);
			close(fd);
			return refuse(dir, "writing the test file", e);
		}
		done += (size_t)n;
	}
	free(buf);
	if (fsync(fd) < 0 && errno != EINVAL) {
		int e = errno;

		close(fd);
		return refuse(dir, "fsync of the test file", e);
	}
	close(fd);
	if (direct) {
		fd = open(test_file, O_RDONLY | O_DIRECT | O_CLOEXEC);
		if (fd < 0)
			return refuse(dir, "O_DIRECT is not supported here (run without --direct)",
				      errno);
		close(fd);
	}
	return 0;
}

static bool field(const char *s, const char *key, uint64_t *v)
{
	const char *p = strstr(s, key);

	if (!p)
		return false;
	*v = strtoull(p + strlen(key), NULL, 10);
	return true;
}

/*
 * One leg: this program as a worker, with preload (NULL: none).  Waits at
 * most timeout_s seconds: a leg that never ends (a lock that is never
 * granted) is a failure to report, not a hang.
 */
static void run_leg(struct leg *leg, const char *preload, size_t block, unsigned readers,
		    double seconds, bool direct, bool procs, int timeout_s, uint64_t append_cap)
{
	char bs[32], rs[16], ss[32], out[512];
	size_t used = 0;
	uint64_t v, deadline = mono_ns() + (uint64_t)timeout_s * 1000000000ull;
	int pfd[2], st;
	pid_t pid;

	memset(leg, 0, sizeof(*leg));
	snprintf(bs, sizeof(bs), "%zu", block);
	snprintf(rs, sizeof(rs), "%u", readers);
	snprintf(ss, sizeof(ss), "%.3f", seconds);
	if (pipe2(pfd, O_CLOEXEC) < 0) {
		leg->trouble = "pipe failed";
		return;
	}
	fflush(stdout);
	pid = fork();
	if (pid < 0) {
		close(pfd[0]);
		close(pfd[1]);
		leg->trouble = "fork failed";
		return;
	}
	if (pid == 0) {
		dup2(pfd[1], 1);
		if (preload)
			setenv("LD_PRELOAD", preload, 1);
		else
			unsetenv("LD_PRELOAD");
		if (append_cap) {
			char cs[32];

			snprintf(cs, sizeof(cs), "%" PRIu64, append_cap);
			execl("/proc/self/exe", "rangeshim", "check", "--append-worker", test_file,
			      bs, rs, ss, cs, (char *)NULL);
		} else {
			execl("/proc/self/exe", "rangeshim", "check", "--worker", test_file, bs, rs,
			      ss, direct ? "1" : "0", procs ? "1" : "0", (char *)NULL);
		}
		perror("rangeshim check: exec /proc/self/exe");
		_exit(127);
	}
	close(pfd[1]);
	for (;;) {
		struct pollfd p = { .fd = pfd[0], .events = POLLIN };
		uint64_t now = mono_ns();
		ssize_t n;

		if (now >= deadline) {
			kill(pid, SIGKILL);
			leg->trouble = "did not finish in time (a lock that was never granted?)";
			break;
		}
		if (poll(&p, 1, (int)((deadline - now) / 1000000 + 1)) <= 0)
			continue;
		n = read(pfd[0], out + used, sizeof(out) - 1 - used);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		used += (size_t)n;
		if (used == sizeof(out) - 1)
			break;
	}
	out[used] = '\0';
	close(pfd[0]);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (leg->trouble)
		return;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		leg->trouble = WIFSIGNALED(st) ? "the worker was killed by a signal"
					       : "the worker failed";
		return;
	}
	if (append_cap ? !field(out, "appends=", &leg->appends) ||
			 !field(out, "records=", &leg->records) ||
			 !field(out, "interleaved=", &leg->interleaved) ||
			 !field(out, "lost=", &leg->lost) || !field(out, "shim=", &v)
		       : !field(out, "reads=", &leg->reads) || !field(out, "torn=", &leg->torn) ||
			 !field(out, "writes=", &leg->writes) || !field(out, "shim=", &v)) {
		leg->trouble = "the worker printed no result";
		return;
	}
	leg->shim = (int)v;
	if (field(out, "err=", &v))
		leg->err = (int)v;
}

static void print_leg(const char *name, const struct leg *l)
{
	if (l->trouble) {
		printf("  %-18s %s\n", name, l->trouble);
		return;
	}
	printf("  %-18s %" PRIu64 " of %" PRIu64 " reads torn", name, l->torn, l->reads);
	if (l->torn && l->reads)
		printf(" (%.1f%%)", 100.0 * (double)l->torn / (double)l->reads);
	printf(", %" PRIu64 " writes\n", l->writes);
}

static bool parse_block(const char *s, size_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *s == '-')
		return false;
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case '\0': break;
	default: return false;
	}
	if (*end || v < 2 || v > (64ull << 20))
		return false;
	*out = (size_t)v;
	return true;
}

#define APPENDERS 4
#define APPEND_CAP (32ull << 20)

/* The outcome: a word (OK, OK with less proof, FAIL) and one line. */
struct verdict {
	const char *status;
	char line[PATH_MAX * 4 + 512];
};

/* Exit status of the check, and v filled.  a_ctl/a_with NULL: no append
 * race (O_DIRECT). */
static int verdict(const struct leg *ctl, const struct leg *with, const struct leg *a_ctl,
		   const struct leg *a_with, bool procs, const char *dir, struct verdict *v)
{
	const struct leg *all[] = { ctl, with, a_ctl, a_with };
	char shown[PATH_MAX * 4 + 8];

	v->status = "FAIL";
	for (int i = 0; i < 4; i++) {
		const struct leg *l = all[i];

		if (l && !l->trouble && l->err) {
			escape_text(dir, shown, sizeof(shown));
			snprintf(v->line, sizeof v->line, "FAIL: the %s run %s the shim hit an I/O "
				 "error on %s: %s", i < 2 ? "read" : "append", i & 1 ? "with" : "without",
				 shown, fs_reason(l->err));
			return l->err == ENOSPC || l->err == EROFS || l->err == EDQUOT ||
			       l->err == EFBIG ? EXIT_FS : 1;
		}
		if (l && l->trouble) {
			snprintf(v->line, sizeof v->line, "FAIL: the %s run %s the shim %s",
				 i < 2 ? "read" : "append", i & 1 ? "with" : "without", l->trouble);
			return 1;
		}
		if (l && (i & 1) && !l->shim) {
			snprintf(v->line, sizeof v->line, "FAIL: the library was not loaded into the "
				 "run with the shim (LD_PRELOAD ignored?); nothing was checked");
			return 1;
		}
		if (l && !(i & 1) && l->shim) {
			snprintf(v->line, sizeof v->line, "FAIL: the library was loaded into the run "
				 "without the shim (preloaded some other way, e.g. /etc/ld.so.preload); "
				 "the control is void");
			return 1;
		}
	}
	if (!with->writes || !with->reads || !ctl->writes || !ctl->reads ||
	    (a_with && (!a_with->appends || !a_ctl->appends))) {
		snprintf(v->line, sizeof v->line, "FAIL: a run finished no write, read or append; "
			 "a clean result would prove nothing");
		return 1;
	}
	if (with->torn) {
		snprintf(v->line, sizeof v->line, "FAIL: %" PRIu64 " of %" PRIu64 " reads tore with "
			 "the shim. Is this directory outside RANGESHIM_PATHS, or RANGESHIM_SCOPE=off%s?",
			 with->torn, with->reads, procs ? " or process (which does not coordinate "
			 "processes)" : "");
		return 1;
	}
	if (a_with && (a_with->interleaved || a_with->lost)) {
		snprintf(v->line, sizeof v->line, "FAIL: with the shim, %" PRIu64 " of %" PRIu64
			 " appended records were interleaved and %" PRIu64 " lost. Is this directory "
			 "outside RANGESHIM_PATHS, or RANGESHIM_SCOPE off or process?",
			 a_with->interleaved, a_with->records, a_with->lost);
		return 1;
	}
	{
		/* What the appends add: proof when the control lost or mixed
		 * records, a plain statement when it did not. */
		const char *appends = !a_ctl ? "" :
				      a_ctl->interleaved || a_ctl->lost ?
				      " Appends: records were interleaved or lost without the shim, "
				      "and none with it." :
				      " Appends: no record was interleaved or lost, with or without "
				      "the shim (this file system keeps O_APPEND writes whole by itself).";

		if (!ctl->torn) {
			v->status = "OK, with less proof";
			snprintf(v->line, sizeof v->line, "OK, with less proof: no read tore with the "
				 "shim, but none tore without it either (this file system, or this run, "
				 "kept reads whole by itself, as XFS does for buffered I/O); try "
				 "--seconds 10 or --direct.%s", appends);
			return 0;
		}
		v->status = "OK";
		snprintf(v->line, sizeof v->line, "OK: reads tear here without the shim, and none "
			 "tore with it.%s", appends);
		return 0;
	}
}

static void print_append_leg(const char *name, const struct leg *l)
{
	if (l->trouble) {
		printf("  %-18s %s\n", name, l->trouble);
		return;
	}
	printf("  %-18s %" PRIu64 " of %" PRIu64 " appended records interleaved, %" PRIu64
	       " lost\n", name, l->interleaved, l->records, l->lost);
}

static void print_text(const char *dir, const char *fs, const char *preload, size_t block,
		       unsigned readers, double seconds, bool direct, bool procs,
		       const struct leg *ctl, const struct leg *with, const struct leg *a_ctl,
		       const struct leg *a_with, const struct verdict *v)
{
	char shown[PATH_MAX * 4 + 8];

	escape_text(dir, shown, sizeof(shown));
	printf("rangeshim check: %s (%s): %zu-byte pwrite racing %u pread reader(s)%s%s, "
	       "%.1f s per run\n", shown, fs, block, readers,
	       procs ? " in another process" : "", direct ? ", O_DIRECT" : "", seconds);
	if (a_ctl)
		printf("  then %d processes appending %zu-byte records with O_APPEND, %.1f s per "
		       "run\n", APPENDERS, block < (1u << 20) ? block : (size_t)1 << 20, seconds);
	printf("  library: %s\n", preload);
	for (int i = 0; i < SET_COUNT; i++) {
		const char *val = getenv(setting_names[i].var);

		if (val) {
			escape_text(val, shown, sizeof(shown));
			printf("  setting: %s=%s\n", setting_names[i].var, shown);
		}
	}
	print_leg("without rangeshim:", ctl);
	print_leg("with rangeshim:", with);
	if (a_ctl) {
		print_append_leg("appends without:", a_ctl);
		print_append_leg("appends with:", a_with);
	}
	puts(v->line);
}

static void json_leg(const char *name, const struct leg *l, bool append)
{
	printf("\"%s\": {", name);
	if (append)
		printf("\"appends\": %" PRIu64 ", \"records\": %" PRIu64 ", \"interleaved\": %"
		       PRIu64 ", \"lost\": %" PRIu64, l->appends, l->records, l->interleaved, l->lost);
	else
		printf("\"reads\": %" PRIu64 ", \"torn\": %" PRIu64 ", \"writes\": %" PRIu64,
		       l->reads, l->torn, l->writes);
	printf(", \"shim_loaded\": %s, \"trouble\": ", l->shim ? "true" : "false");
	json_string(l->trouble);
	putchar('}');
}

static void print_json(const char *dir, const char *fs, const char *preload, size_t block,
		       unsigned readers, double seconds, bool direct, bool procs,
		       const struct leg *ctl, const struct leg *with, const struct leg *a_ctl,
		       const struct leg *a_with, const struct verdict *v, int rc)
{
	fputs("{\"path\": ", stdout);
	json_string(dir);
	fputs(", \"fs\": ", stdout);
	json_string(fs);
	fputs(", \"library\": ", stdout);
	json_string(preload);
	printf(", \"block\": %zu, \"readers\": %u, \"seconds\": %.3f, \"direct\": %s, "
	       "\"processes\": %s, \"settings\": {", block, readers, seconds,
	       direct ? "true" : "false", procs ? "true" : "false");
	for (int i = 0, n = 0; i < SET_COUNT; i++) {
		const char *val = getenv(setting_names[i].var);

		if (!val)
			continue;
		printf("%s\"%s\": ", n++ ? ", " : "", setting_names[i].var);
		json_string(val);
	}
	fputs("}, \"reads\": {", stdout);
	json_leg("without", ctl, false);
	fputs(", ", stdout);
	json_leg("with", with, false);
	fputs("}, \"appends\": ", stdout);
	if (a_ctl) {
		printf("{\"writers\": %d, \"record\": %zu, ", APPENDERS,
		       block < (1u << 20) ? block : (size_t)1 << 20);
		json_leg("without", a_ctl, true);
		fputs(", ", stdout);
		json_leg("with", a_with, true);
		putchar('}');
	} else {
		fputs("null", stdout);
	}
	fputs(", \"verdict\": ", stdout);
	json_string(v->status);
	fputs(", \"message\": ", stdout);
	json_string(v->line);
	printf(", \"exit\": %d}\n", rc);
}

/* What `rangeshim check` was asked to do (its options). */
struct check_opts {
	struct settings s;
	bool json;
	double seconds;
	size_t block;
	unsigned readers;
	bool direct, procs;
	const char *dir;
};

/* The options and the PATH: -1 to go on, or the exit status (help, a bad
 * option). */
static int check_options(const struct command *cmd, int argc, char **argv,
			 struct check_opts *o)
{
	char *end;
	int c;

	optind = 1;
	while ((c = iface_getopt(cmd->name, argc, argv)) != -1) {
		switch (c) {
		case 'h':
			iface_help(cmd->name, stdout);
			return 0;
		case OPT_SECONDS:
			errno = 0;
			o->seconds = strtod(optarg, &end);
			if (errno || end == optarg || *end ||
			    !(o->seconds >= 0.1 && o->seconds <= 600))
				return usage_error("check: --seconds '%s' is not from 0.1 to 600",
						   optarg);
			break;
		case OPT_BLOCK:
			if (!parse_block(optarg, &o->block))
				return usage_error("check: --block '%s' is not a size from 2 to 64M",
						   optarg);
			break;
		case OPT_READERS:
			o->readers = (unsigned)strtoul(optarg, &end, 10);
			if (*end || !*optarg || o->readers < 1 || o->readers > MAX_READERS)
				return usage_error("check: --readers '%s' is not from 1 to 64", optarg);
			break;
		case OPT_DIRECT:
			o->direct = true;
			break;
		case OPT_PROCS:
			o->procs = true;
			break;
		case OPT_CHECK_JSON:
			o->json = true;
			break;
		case OPT_LIB:
			if (!*optarg)
				return usage_error("%s", "--lib needs a path");
			o->s.lib = optarg;
			break;
		default:
			return getopt_error(c, argv);
		}
	}
	if (optind < argc)
		o->dir = argv[optind++];
	if (optind < argc)
		return usage_error("check: one PATH only, not also '%s'", argv[optind]);
	if (o->direct && o->block % ALIGN)
		return usage_error("check: --direct needs a --block that is a multiple of %s",
				   "4096");
	return -1;
}

/* The LD_PRELOAD of the legs with the shim: ours alone, not the user's
 * others.  NULL: no library (said why). */
static char *check_preload(const struct settings *s)
{
	const char *old = getenv("LD_PRELOAD");
	char *saved = old ? strdup(old) : NULL;
	char *preload;

	unsetenv("LD_PRELOAD");
	preload = build_preload(s);
	if (saved)
		setenv("LD_PRELOAD", saved, 1);
	free(saved);
	return preload;
}

/* The append legs' bytes a run: at most APPEND_CAP and a quarter of the
 * free space, at least 8 records. */
static uint64_t append_cap(const char *dir, size_t record)
{
	struct statvfs sv;
	uint64_t cap = APPEND_CAP;

	if (statvfs(dir, &sv) == 0 && (uint64_t)sv.f_bavail * sv.f_frsize / 4 < cap)
		cap = (uint64_t)sv.f_bavail * sv.f_frsize / 4;
	if (cap < 8 * record)
		cap = 8 * record;
	return cap;
}

int cmd_check(const struct command *cmd, int argc, char **argv)
{
	struct check_opts o = { .seconds = 2.0, .block = 1u << 20, .readers = 1, .dir = "." };
	struct leg ctl, with, actl, awith;
	struct verdict v;
	char *preload, fsbuf[32];
	int rc, timeout_s;

	if (argc == 8 && !strcmp(argv[1], "--worker"))
		return worker(argv + 2);
	if ((argc == 7 || argc == 8) && !strcmp(argv[1], "--append-worker"))
		return append_worker(argv + 2);
	rc = check_options(cmd, argc, argv, &o);
	if (rc >= 0)
		return rc;

	/* The library first: without it there is nothing to check. */
	preload = check_preload(&o.s);
	if (!preload)
		return EXIT_USAGE;
	rc = make_test_file(o.dir, o.block, o.direct);
	if (rc) {
		free(preload);
		return rc;
	}
	atexit(remove_test_file);

	timeout_s = (int)(o.seconds * 3) + 30;
	run_leg(&ctl, NULL, o.block, o.readers, o.seconds, o.direct, o.procs, timeout_s, 0);
	run_leg(&with, preload, o.block, o.readers, o.seconds, o.direct, o.procs, timeout_s, 0);
	if (!o.direct) {
		/* The append race: APPENDERS processes, records of the block
		 * size (at most 1 MiB). */
		size_t record = o.block < (1u << 20) ? o.block : (1u << 20);
		uint64_t cap = append_cap(o.dir, record);

		run_leg(&actl, NULL, record, APPENDERS, o.seconds, false, true, timeout_s, cap);
		run_leg(&awith, preload, record, APPENDERS, o.seconds, false, true, timeout_s, cap);
	}
	rc = verdict(&ctl, &with, o.direct ? NULL : &actl, o.direct ? NULL : &awith, o.procs,
		     o.dir, &v);
	if (o.json)
		print_json(o.dir, fs_type(o.dir, fsbuf, sizeof(fsbuf)), preload, o.block, o.readers,
			   o.seconds, o.direct, o.procs, &ctl, &with, o.direct ? NULL : &actl,
			   o.direct ? NULL : &awith, &v, rc);
	else
		print_text(o.dir, fs_type(o.dir, fsbuf, sizeof(fsbuf)), preload, o.block, o.readers,
			   o.seconds, o.direct, o.procs, &ctl, &with, o.direct ? NULL : &actl,
			   o.direct ? NULL : &awith, &v);
	free(preload);
	return rc;
}
