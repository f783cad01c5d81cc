/*
 * limits: the edges of the shim's tables and of off_t.
 *
 *   limits files DIR [n=1500]
 *       One process opens n files at once (more than the node table's 1024
 *       grant slots), raising RLIMIT_NOFILE if needed, writes a 4 KiB record
 *       into each, rewrites them in reverse order while all stay open, and
 *       reads every one back.
 *   limits procfiles DIR [procs=4] [n=600]
 *       procs processes each open the same n files and write, at the same
 *       time, their own record into each (procs * n grants wanted at once),
 *       three rounds; then every record of every process is checked.
 *   limits threads DIR [n=2000]
 *       n threads at once, each writes its own 4 KiB record of one shared
 *       file, reads it back, and reads and writes a shared 64 KiB block;
 *       then every record is checked.
 *   limits top DIR
 *       pread, pwrite, readv, writev, read and write at the file offset,
 *       ftruncate, fallocate, posix_fallocate and copy_file_range at and
 *       around LLONG_MAX, then at the largest offset the file system
 *       accepts (found by bisection); prints each result and errno, one per
 *       line, for run.sh to compare with the run without the shim.  Then
 *       two threads write and read overlapping ranges that end there.
 *
 * Prints "limits MODE ok" (and for top the list), exit 0; or a FAIL line.
 */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>

#include "compat.h"

#define REC 4096

static const char *dir;

static void fill_rec(unsigned char *r, long file, long who, int round)
{
	memset(r, 1 + (int)((file * 7 + who * 13 + round) % 251), REC);
	memcpy(r, &file, sizeof(file));
	memcpy(r + 8, &who, sizeof(who));
}

static void raise_nofile(long want)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		die("getrlimit");
	if ((long)rl.rlim_cur >= want)
		return;
	rl.rlim_cur = (rlim_t)want > rl.rlim_max ? rl.rlim_max : (rlim_t)want;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0 || (long)rl.rlim_cur < want)
		die("RLIMIT_NOFILE is %ld, %ld needed", (long)rl.rlim_cur, want);
}

static int mode_files(long n)
{
	int *fds = calloc((size_t)n, sizeof(int));
	unsigned char w[REC], r[REC];
	char path[4200];
	long bad = 0;

	raise_nofile(n + 64);
	for (long i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "%s/many.%ld", dir, i);
		fds[i] = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
		if (fds[i] < 0)
			die("open %s", path);
		fill_rec(w, i, 0, 0);
		if (pwrite_full(fds[i], w, REC, 0) < 0)
			die("pwrite file %ld", i);
	}
	for (long i = n - 1; i >= 0; i--) {
		fill_rec(w, i, 0, 1);
		if (pwrite_full(fds[i], w, REC, REC) < 0 || pread_full(fds[i], r, REC, 0) < 0)
			die("I/O file %ld", i);
		fill_rec(w, i, 0, 0);
		bad += memcmp(w, r, REC) != 0;
	}
	for (long i = 0; i < n; i++) {
		fill_rec(w, i, 0, 1);
		if (pread_full(fds[i], r, REC, REC) < 0)
			die("pread file %ld", i);
		bad += memcmp(w, r, REC) != 0;
		if (close(fds[i]) != 0)
			die("close");
		snprintf(path, sizeof(path), "%s/many.%ld", dir, i);
		unlink(path);
	}
	free(fds);
	fprintf(stderr, "limits files: n=%ld bad=%ld shim=%d\n", n, bad, shim_loaded());
	if (bad) {
		printf("limits files FAIL: %ld records wrong\n", bad);
		return 1;
	}
	printf("limits files ok n=%ld\n", n);
	return 0;
}

static int mode_procfiles(long procs, long n)
{
	char path[4200];
	pid_t pids[64];
	unsigned char w[REC], r[REC];
	long bad = 0, failed = 0;

	if (procs < 1 || procs > 64)
		die("procs must be 1..64");
	raise_nofile(n + 64);
	for (long i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "%s/shared.%ld", dir, i);
		if (close(open(path, O_RDWR | O_CREAT | O_TRUNC, 0644)) != 0)
			die("create %s", path);
	}
	for (long p = 0; p < procs; p++) {
		pids[p] = fork();
		if (pids[p] < 0)
			die("fork");
		if (pids[p] == 0) {
			int *fds = calloc((size_t)n, sizeof(int));

			for (long i = 0; i < n; i++) {
				snprintf(path, sizeof(path), "%s/shared.%ld", dir, i);
				if ((fds[i] = open(path, O_RDWR)) < 0)
					die("open %s", path);
			}
			for (int round = 0; round < 3; round++)
				for (long k = 0; k < n; k++) {
					long i = (k + p * 131) % n;	/* each file once per round */

					fill_rec(w, i, p, round);
					if (pwrite_full(fds[i], w, REC, (off_t)p * REC) < 0 ||
					    pread_full(fds[i], r, REC, (off_t)p * REC) < 0)
						die("proc %ld file %ld", p, i);
					if (memcmp(w, r, REC) != 0)
						die("proc %ld file %ld: read back something else", p, i);
				}
			exit(0);	/* with the shim's destructor: grants given back */
		}
	}
	for (long p = 0; p < procs; p++) {
		int st;

		waitpid(pids[p], &st, 0);
		failed += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	for (long i = 0; i < n; i++) {
		int fd;

		snprintf(path, sizeof(path), "%s/shared.%ld", dir, i);
		if ((fd = open(path, O_RDONLY)) < 0)
			die("open %s", path);
		for (long p = 0; p < procs; p++) {
			fill_rec(w, i, p, 2);
			if (pread_full(fd, r, REC, (off_t)p * REC) < 0 || memcmp(w, r, REC) != 0)
				bad++;
		}
		close(fd);
		unlink(path);
	}
	fprintf(stderr, "limits procfiles: procs=%ld n=%ld failed=%ld bad=%ld shim=%d\n", procs, n,
		failed, bad, shim_loaded());
	if (bad || failed) {
		printf("limits procfiles FAIL: %ld processes failed, %ld records wrong\n", failed, bad);
		return 1;
	}
	printf("limits procfiles ok procs=%ld n=%ld\n", procs, n);
	return 0;
}

static int tfd;
static _Atomic long t_torn, t_bad;
static pthread_barrier_t bar;

static void *thread_main(void *arg)
{
	long i = (long)arg;
	unsigned char w[REC], r[REC];
	unsigned char *blk = xalloc(64 * 1024);

	pthread_barrier_wait(&bar);	/* all of them alive at once */
	fill_rec(w, i, 0, 0);
	if (pwrite_full(tfd, w, REC, (off_t)(1 + i) * 64 * 1024) < 0 ||
	    pread_full(tfd, r, REC, (off_t)(1 + i) * 64 * 1024) < 0 || memcmp(w, r, REC) != 0)
		atomic_fetch_add(&t_bad, 1);
	if (i & 1) {
		memset(blk, 1 + (int)(i % 250), 64 * 1024);
		if (pwrite_full(tfd, blk, 64 * 1024, 0) < 0)
			atomic_fetch_add(&t_bad, 1);
	} else {
		if (pread_full(tfd, blk, 64 * 1024, 0) < 0)
			atomic_fetch_add(&t_bad, 1);
		else if (!uniform(blk, 64 * 1024))
			atomic_fetch_add(&t_torn, 1);
	}
	free(blk);
	pthread_barrier_wait(&bar);	/* and still alive while others finish */
	return NULL;
}

static int mode_threads(long n)
{
	pthread_t *th = calloc((size_t)n, sizeof(pthread_t));
	pthread_attr_t a;
	char path[4200];
	unsigned char w[REC], r[REC];
	long started = 0, bad = 0;

	snprintf(path, sizeof(path), "%s/threads", dir);
	tfd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (tfd < 0)
		die("open %s", path);
	{
		unsigned char *blk = xalloc(64 * 1024);

		if (pwrite_full(tfd, blk, 64 * 1024, 0) < 0)
			die("prefill");
		free(blk);
	}
	pthread_attr_init(&a);
	pthread_attr_setstacksize(&a, 256 * 1024);
	if (pthread_barrier_init(&bar, NULL, (unsigned)n) != 0)
		die("barrier");
	for (long i = 0; i < n; i++) {
		int e = pthread_create(&th[i], &a, thread_main, (void *)i);

		if (e != 0) {
			errno = e;
			die("pthread_create %ld of %ld", i, n);
		}
		started++;
	}
	for (long i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	for (long i = 0; i < n; i++) {
		fill_rec(w, i, 0, 0);
		if (pread_full(tfd, r, REC, (off_t)(1 + i) * 64 * 1024) < 0 || memcmp(w, r, REC) != 0)
			bad++;
	}
	close(tfd);
	unlink(path);
	free(th);
	fprintf(stderr, "limits threads: n=%ld bad=%ld io_bad=%ld torn=%ld shim=%d\n", n, bad,
		(long)t_bad, (long)t_torn, shim_loaded());
	if (bad || t_bad || (t_torn && strict_mode())) {
		printf("limits threads FAIL: bad=%ld io_bad=%ld torn=%ld\n", bad, (long)t_bad,
		       (long)t_torn);
		return 1;
	}
	printf("limits threads ok n=%ld\n", n);
	return 0;
}

/* ---- top of off_t ---- */

static void show(const char *what, long long r)
{
	int e = errno;

	if (r < 0)
		printf("%-44s -1 %s\n", what, strerrorname_np(e) ? strerrorname_np(e) : "?");
	else
		printf("%-44s %lld\n", what, r);
	errno = 0;
}

static _Atomic int top_stop;
static int top_fd;
static off_t top_edge;
static _Atomic long top_torn, top_ops;

static void *top_writer(void *arg)
{
	unsigned char *b = xalloc(8192);

	(void)arg;
	for (int i = 0; !atomic_load(&top_stop); i++) {
		memset(b, i & 1 ? 0x33 : 0x44, 8192);
		/* overlaps the reader's range by half, ends at the edge */
		if (pwrite(top_fd, b, i % 3 ? 8192 : 4096, top_edge - (i % 3 ? 8192 : 4096)) < 0)
			break;
		atomic_fetch_add(&top_ops, 1);
	}
	free(b);
	return NULL;
}

static int mode_top(void)
{
	char path[4200], path2[4200];
	unsigned char *b = xalloc(1 << 20);
	struct iovec iov[2] = { { b, 4096 }, { b + 4096, 4096 } };
	off_t top = LLONG_MAX;
	int fd, fd2;
	pthread_t th;
	uint64_t end;

	snprintf(path, sizeof(path), "%s/top", dir);
	snprintf(path2, sizeof(path2), "%s/top2", dir);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	fd2 = open(path2, O_RDWR | O_CREAT | O_TRUNC | O_APPEND, 0644);
	if (fd < 0 || fd2 < 0)
		die("open %s", path);
	memset(b, 0x5a, 1 << 20);
	errno = 0;
	show("pwrite 4096 @ MAX-4096", pwrite(fd, b, 4096, top - 4096));
	show("pread 4096 @ MAX-4096", pread(fd, b, 4096, top - 4096));
	show("pwrite 4096 @ MAX-100", pwrite(fd, b, 4096, top - 100));
	show("pwrite 1 @ MAX", pwrite(fd, b, 1, top));
	show("pwrite 4096 @ MAX", pwrite(fd, b, 4096, top));
	show("pwrite 1M @ MAX-10", pwrite(fd, b, 1 << 20, top - 10));
	show("pread 4096 @ MAX", pread(fd, b, 4096, top));
	show("pread 4096 @ MAX-1", pread(fd, b, 4096, top - 1));
	show("pread 1M @ MAX-8192", pread(fd, b, 1 << 20, top - 8192));
	show("pwrite 4096 @ -1", pwrite(fd, b, 4096, -1));
	show("pread 4096 @ LLONG_MIN", pread(fd, b, 4096, LLONG_MIN));
	show("pwritev 2x4096 @ MAX-4096", pwritev(fd, iov, 2, top - 4096));
	show("preadv 2x4096 @ MAX-8192", preadv(fd, iov, 2, top - 8192));
	show("pwritev2 2x4096 @ MAX-8192", pwritev2(fd, iov, 2, top - 8192, 0));
	show("preadv2 2x4096 @ MAX-4096", preadv2(fd, iov, 2, top - 4096, 0));
	show("lseek MAX-4096", lseek(fd, top - 4096, SEEK_SET));
	show("write 8192 @ cursor", write(fd, b, 8192));
	show("lseek cur", lseek(fd, 0, SEEK_CUR));
	show("write 1 @ cursor", write(fd, b, 1));
	show("lseek MAX-2048", lseek(fd, top - 2048, SEEK_SET));
	show("read 8192 @ cursor", read(fd, b, 8192));
	show("readv 2x4096 @ cursor", readv(fd, iov, 2));
	show("lseek end", lseek(fd, 0, SEEK_END));
	show("lseek MAX, SEEK_SET", lseek(fd, top, SEEK_SET));
	show("lseek 1, SEEK_CUR (overflow)", lseek(fd, 1, SEEK_CUR));
	show("fstat size == MAX", ({ struct stat st; fstat(fd, &st) < 0 ? -1 : st.st_size == top; }));
	show("ftruncate MAX-1", ftruncate(fd, top - 1));
	show("ftruncate MAX", ftruncate(fd, top));
	show("ftruncate -1", ftruncate(fd, -1));
	show("fallocate keep 4096 @ MAX-4096", fallocate(fd, FALLOC_FL_KEEP_SIZE, top - 4096, 4096));
	show("fallocate keep 4096 @ MAX-10", fallocate(fd, FALLOC_FL_KEEP_SIZE, top - 10, 4096));
	show("fallocate 0 4096 @ MAX-4096", fallocate(fd, 0, top - 4096, 4096));
	show("posix_fallocate 1 @ MAX-1 (error number)", posix_fallocate(fd, top - 1, 1));
	show("ftruncate 8192", ftruncate(fd, 8192));
	show("append 4096 (O_APPEND, size 0)", write(fd2, b, 4096));
	show("ftruncate(append fd) MAX-4096", ftruncate(fd2, top - 4096));
	show("append 4096 (size MAX-4096)", write(fd2, b, 4096));
	show("append 1 (size MAX)", write(fd2, b, 1));
	show("pwritev2 RWF_APPEND 2x4096", pwritev2(fd, iov, 2, 0, RWF_APPEND));
	show("ftruncate MAX-4096", ftruncate(fd, top - 4096));
	{
		off_t in = top - 4096, out = 0;

		show("copy_file_range 4096 from MAX-4096", copy_file_range(fd, &in, fd2, NULL, 4096, 0));
		in = 0;
		out = top - 100;
		show("copy_file_range 4096 to MAX-100", copy_file_range(fd2, &in, fd, &out, 4096, 0));
		out = top;
		show("copy_file_range 4096 to MAX", copy_file_range(fd2, &in, fd, &out, 4096, 0));
	}

	/* The largest offset this file system lets us write a byte at. */
	{
		off_t lo = 0, hi = top, edge;

		if (ftruncate(fd, 0) < 0)
			die("ftruncate");
		while (lo < hi) {
			off_t mid = lo + (hi - lo) / 2 + 1;	/* hi - lo + 1 could overflow */

			if (pwrite(fd, b, 1, mid) == 1)
				lo = mid;
			else
				hi = mid - 1;
			if (ftruncate(fd, 0) < 0)
				die("ftruncate");
		}
		edge = lo + 1;	/* the first offset that cannot be written */
		printf("%-44s %#llx\n", "first unwritable offset", (long long)edge);
		show("pwrite 4096 @ edge-4096", pwrite(fd, b, 4096, edge - 4096));
		show("pwrite 4096 @ edge-100", pwrite(fd, b, 4096, edge - 100));
		show("pwrite 1 @ edge", pwrite(fd, b, 1, edge));
		show("pread 8192 @ edge-4096", pread(fd, b, 8192, edge - 4096));
		show("pwritev 2x4096 @ edge-4096", pwritev(fd, iov, 2, edge - 4096));
		show("lseek edge-100", lseek(fd, edge - 100, SEEK_SET) == edge - 100);
		show("write 4096 @ cursor", write(fd, b, 4096));
		show("write 1 @ cursor", write(fd, b, 1));
		show("append 4096 at edge (O_APPEND)",
		     (ftruncate(fd2, edge - 10) == 0) ? write(fd2, b, 4096) : -1);
		show("ftruncate edge", ftruncate(fd, edge));
		show("ftruncate edge+1", ftruncate(fd, edge + 1));
		show("fallocate keep 4096 @ edge-4096",
		     fallocate(fd, FALLOC_FL_KEEP_SIZE, edge - 4096, 4096));

		/* Two threads on overlapping ranges that end at the edge. */
		top_fd = fd;
		top_edge = edge;
		if (ftruncate(fd, 0) < 0 || pwrite(fd, b, 8192, edge - 8192) != 8192)
			die("pwrite at the edge");
		{
			long reads = 0;

			pthread_create(&th, NULL, top_writer, NULL);
			for (end = now_ns() + 300000000ull; now_ns() < end; reads++) {
				if (pread(fd, b, 8192, edge - 8192) != 8192)
					die("pread at the edge");
				/* the writer writes [edge-8192, edge) or its upper half */
				if (!uniform(b, 4096) || !uniform(b + 4096, 4096))
					atomic_fetch_add(&top_torn, 1);
			}
			atomic_store(&top_stop, 1);
			pthread_join(th, NULL);
			fprintf(stderr, "limits top race: reads=%ld writes=%ld torn=%ld shim=%d\n",
				reads, (long)top_ops, (long)top_torn, shim_loaded());
			printf("top race: done\n");
		}
	}
	close(fd);
	close(fd2);
	unlink(path);
	unlink(path2);
	free(b);
	if (top_torn && strict_mode()) {
		printf("limits top FAIL: %ld torn reads at the top of off_t\n", (long)top_torn);
		return 1;
	}
	printf("limits top ok\n");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		die("usage: limits files|procfiles|threads|top DIR [key=value...]");
	dir = argv[2];
	if (strcmp(argv[1], "files") == 0)
		return mode_files(arg_num(argc, argv, "n", 1500));
	if (strcmp(argv[1], "procfiles") == 0)
		return mode_procfiles(arg_num(argc, argv, "procs", 4), arg_num(argc, argv, "n", 600));
	if (strcmp(argv[1], "threads") == 0)
		return mode_threads(arg_num(argc, argv, "n", 2000));
	if (strcmp(argv[1], "top") == 0)
		return mode_top();
	die("unknown mode %s", argv[1]);
}
