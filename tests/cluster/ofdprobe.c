/*
 * ofdprobe: what OFD locks do through two mounts of one cluster file system
 * ("node A" and "node B"), the facts cluster scope is built on.
 *
 *   ofdprobe check DIR-A DIR-B [flock-apart]
 *                                     assert cross-mount conflicts; exit 1
 *                                     with the first one that does not hold;
 *                                     flock-apart: flock and fcntl locks are
 *                                     separate (CephFS), not one (GlusterFS)
 *   ofdprobe bench DIR-A DIR-B [LOCAL-DIR]
 *                                     measure and print: lock round trips,
 *                                     F_OFD_GETLK polling, wake-up after a
 *                                     remote unlock, 4 KiB pwrites from two
 *                                     mounts unlocked and locked per call,
 *                                     and whether a lock makes B see A's data
 *
 * DIR-A and DIR-B name the same directory through different mounts.
 * LOCAL-DIR (a local file system) gives the same round trip for scale.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROG "ofdprobe"
#include "../../examples/util.h"

static char path_a[4096], path_b[4096];

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int lk(int fd, int cmd, short type, off_t start, off_t len)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET,
			    .l_start = start, .l_len = len };
	int rc;

	do
		rc = fcntl(fd, cmd, &fl);
	while (rc < 0 && errno == EINTR && cmd == F_OFD_SETLKW);
	return rc;
}

static int xopen(const char *p, int flags)
{
	int fd = open(p, flags, 0644);

	if (fd < 0)
		die("open", p);
	return fd;
}

static int failures;

#define CHECK(cond, ...) do { \
	if (cond) { printf("  ok   "); printf(__VA_ARGS__); printf("\n"); } \
	else { printf("  FAIL "); printf(__VA_ARGS__); printf(" (errno %s)\n", strerror(errno)); failures++; } \
} while (0)

static int check(bool flock_apart)
{
	int a = xopen(path_a, O_RDWR | O_CREAT | O_TRUNC);
	int b = xopen(path_b, O_RDWR);
	int a2 = xopen(path_a, O_RDWR);
	int d = dup(a);
	struct flock fl;

	CHECK(lk(a, F_OFD_SETLK, F_WRLCK, 0, 100) == 0, "A write-locks [0,100)");
	errno = 0;
	CHECK(lk(b, F_OFD_SETLK, F_WRLCK, 50, 100) < 0 && errno == EAGAIN,
	      "B's write lock on [50,150) fails with EAGAIN");
	errno = 0;
	CHECK(lk(b, F_OFD_SETLK, F_RDLCK, 0, 1) < 0 && errno == EAGAIN,
	      "B's read lock on [0,1) fails with EAGAIN");
	CHECK(lk(b, F_OFD_SETLK, F_WRLCK, 100, 100) == 0, "B write-locks the disjoint [100,200)");
	fl = (struct flock){ .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10 };
	CHECK(fcntl(b, F_OFD_GETLK, &fl) == 0 && fl.l_type == F_WRLCK &&
	      fl.l_start == 0 && fl.l_len == 100,
	      "B's F_OFD_GETLK on [0,10) reports A's lock [0,100) (got type %d [%jd,+%jd) pid %d)",
	      fl.l_type, (intmax_t)fl.l_start, (intmax_t)fl.l_len, fl.l_pid);
	fl = (struct flock){ .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 1000, .l_len = 10 };
	CHECK(fcntl(b, F_OFD_GETLK, &fl) == 0 && fl.l_type == F_UNLCK,
	      "B's F_OFD_GETLK on the free [1000,1010) reports F_UNLCK");
	errno = 0;
	CHECK(lk(a2, F_OFD_SETLK, F_WRLCK, 0, 1) < 0 && errno == EAGAIN,
	      "a second description on A conflicts with the first");
	CHECK(lk(d, F_OFD_SETLK, F_WRLCK, 0, 1) == 0, "a dup of A's description shares its lock");
	/* Far above any data: where the intent range will live. */
	CHECK(lk(a, F_OFD_SETLK, F_RDLCK, (off_t)1 << 62, 4096) == 0,
	      "A read-locks [2^62, 2^62+4096) (the intent space)");
	fl = (struct flock){ .l_type = F_WRLCK, .l_whence = SEEK_SET,
			     .l_start = (off_t)1 << 62, .l_len = 1 };
	CHECK(fcntl(b, F_OFD_GETLK, &fl) == 0 && fl.l_type == F_RDLCK,
	      "B's F_OFD_GETLK sees A's read lock at 2^62");
	CHECK(lk(a, F_OFD_SETLK, F_UNLCK, 0, 0) == 0, "A unlocks everything");
	CHECK(lk(b, F_OFD_SETLK, F_WRLCK, 50, 100) == 0, "B's write lock on [50,150) now succeeds");
	CHECK(lk(b, F_OFD_SETLK, F_UNLCK, 0, 0) == 0, "B unlocks everything");
	/* What the library's flock on a cluster file rests on (clusterfs.c,
	 * rs_mnt_flock_posix): GlusterFS takes flock to its lock manager as a
	 * lock on every byte, so it meets fcntl locks, and reaches 2^61.  The
	 * CephFS MDS keeps flock and fcntl locks in two tables, so a real
	 * flock never meets the agent's grants; it still meets the other
	 * node's flock. */
	CHECK(flock(a, LOCK_EX) == 0, "A flocks the file");
	fl = (struct flock){ .l_type = F_RDLCK, .l_whence = SEEK_SET,
			     .l_start = (off_t)1 << 61, .l_len = 1 };
	if (!flock_apart) {
		CHECK(fcntl(b, F_OFD_GETLK, &fl) == 0 && fl.l_type == F_WRLCK,
		      "B's F_OFD_GETLK at 2^61 sees A's flock (got type %d [%jd,+%jd))", fl.l_type,
		      (intmax_t)fl.l_start, (intmax_t)fl.l_len);
	} else {
		fl.l_start = 0;
		fl.l_len = 0;
		CHECK(fcntl(b, F_OFD_GETLK, &fl) == 0 && fl.l_type == F_UNLCK,
		      "B's F_OFD_GETLK of the whole file does not see A's flock (got type %d)",
		      fl.l_type);
		CHECK(flock(b, LOCK_EX | LOCK_NB) < 0 && errno == EWOULDBLOCK,
		      "B's flock(LOCK_EX|LOCK_NB) meets A's flock");
	}
	CHECK(flock(a, LOCK_UN) == 0, "A unflocks the file");
	close(d);
	close(a2);
	close(a);
	close(b);
	unlink(path_a);
	return failures ? 1 : 0;
}

static int cmp_d(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return a < b ? -1 : a > b;
}

static void stats(const char *what, double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_d);
	printf("| %s | %d | %.1f | %.1f | %.1f |\n", what, n, v[n / 2],
	       v[(n * 99) / 100], v[n - 1]);
}

#define N 1000
static double lat[N];

static void round_trips(const char *what, const char *p)
{
	int fd = xopen(p, O_RDWR | O_CREAT), i;

	for (i = 0; i < N; i++) {
		double t = now_us();

		if (lk(fd, F_OFD_SETLKW, F_WRLCK, 4096, 4096) || lk(fd, F_OFD_SETLK, F_UNLCK, 4096, 4096))
			die("lock round trip", p);
		lat[i] = now_us() - t;
	}
	stats(what, lat, N);
	close(fd);
}

static void getlk_poll(const char *what, int fd, off_t start)
{
	int i;

	for (i = 0; i < N; i++) {
		struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET,
				    .l_start = start, .l_len = 1 };
		double t = now_us();

		if (fcntl(fd, F_OFD_GETLK, &fl))
			die("F_OFD_GETLK", path_b);
		lat[i] = now_us() - t;
	}
	stats(what, lat, N);
}

struct waker { int fd; double acquired; };

static void *blocked_b(void *arg)
{
	struct waker *w = arg;

	if (lk(w->fd, F_OFD_SETLKW, F_WRLCK, 0, 4096))
		die("B F_OFD_SETLKW", path_b);
	w->acquired = now_us();
	lk(w->fd, F_OFD_SETLK, F_UNLCK, 0, 4096);
	return NULL;
}

static void wakeups(int a, int b)
{
	enum { T = 20 };
	double v[T];
	int i;

	for (i = 0; i < T; i++) {
		struct waker w = { .fd = b };
		pthread_t t;
		double released;

		if (lk(a, F_OFD_SETLKW, F_WRLCK, 0, 4096))
			die("A lock", path_a);
		pthread_create(&t, NULL, blocked_b, &w);
		usleep(20000);  /* B is queued at the lock server by now */
		released = now_us();
		lk(a, F_OFD_SETLK, F_UNLCK, 0, 4096);
		pthread_join(t, NULL);
		v[i] = w.acquired - released;
	}
	stats("B's blocked SETLKW returns after A's unlock", v, T);
}

/* Two processes, one per mount, each writing its own 16 MiB in 4 KiB
 * pwrites; returns the wall time of the slower in seconds. */
static double two_node_writes(bool locked)
{
	const size_t per = 16u << 20, bs = 4096;
	double t0 = now_us();
	pid_t pid[2];
	int i, st;

	for (i = 0; i < 2; i++) {
		pid[i] = fork();
		if (pid[i] == 0) {
			int fd = xopen(i ? path_b : path_a, O_WRONLY);
			char buf[4096];
			off_t base = (off_t)(i * per), o;

			memset(buf, 'a' + i, bs);
			for (o = 0; o < (off_t)per; o += (off_t)bs) {
				if (locked && lk(fd, F_OFD_SETLKW, F_WRLCK, base + o, (off_t)bs))
					_exit(3);
				if (pwrite(fd, buf, bs, base + o) != (ssize_t)bs)
					_exit(4);
				if (locked && lk(fd, F_OFD_SETLK, F_UNLCK, base + o, (off_t)bs))
					_exit(5);
			}
			_exit(close(fd) ? 6 : 0);
		}
	}
	for (i = 0; i < 2; i++)
		if (waitpid(pid[i], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
			die("writer child", NULL);
	return (now_us() - t0) / 1e6;
}

/*
 * Does taking a lock on B make B's read see what A wrote under its lock?
 * B reads first (so it has the old data cached if it caches at all), then
 * A writes generation g under a write lock, then B locks and reads.
 */
static void coherence(const char *what, bool a_sync, int b_inval)
{
	enum { T = 100 };
	int a = xopen(path_a, O_RDWR), b = xopen(path_b, b_inval == 2 ? O_RDWR | O_DIRECT : O_RDWR);
	unsigned char *buf;
	int i, stale = 0;

	if (posix_memalign((void **)&buf, 4096, 4096))
		die("posix_memalign", NULL);
	for (i = 0; i < T; i++) {
		unsigned char g = (unsigned char)(i % 250 + 2);

		if (pread(b, buf, 4096, 0) != 4096)
			die("B pread", path_b);
		lk(a, F_OFD_SETLKW, F_WRLCK, 0, 4096);
		memset(buf, g, 4096);
		if (pwrite(a, buf, 4096, 0) != 4096)
			die("A pwrite", path_a);
		if (a_sync && fdatasync(a))
			die("fdatasync", path_a);
		lk(a, F_OFD_SETLK, F_UNLCK, 0, 4096);
		lk(b, F_OFD_SETLKW, F_RDLCK, 0, 4096);
		if (b_inval == 1)
			posix_fadvise(b, 0, 4096, POSIX_FADV_DONTNEED);
		if (pread(b, buf, 4096, 0) != 4096)
			die("B pread", path_b);
		lk(b, F_OFD_SETLK, F_UNLCK, 0, 4096);
		stale += buf[0] != g || buf[4095] != g;
	}
	printf("| %s | %d | %d |\n", what, T, stale);
	free(buf);
	close(a);
	close(b);
}

static int bench(const char *local)
{
	int a = xopen(path_a, O_RDWR | O_CREAT | O_TRUNC), b = xopen(path_b, O_RDWR);
	char lpath[4096];
	double un, lo;
	char buf[4096];

	memset(buf, 1, sizeof buf);
	if (pwrite(a, buf, sizeof buf, 0) != (ssize_t)sizeof buf || fsync(a))
		die("pre-fill", path_a);
	printf("| measure (µs) | n | median | p99 | max |\n|---|---:|---:|---:|---:|\n");
	round_trips("F_OFD_SETLKW + unlock through mount A", path_a);
	if (local) {
		snprintf(lpath, sizeof lpath, "%s/ofdprobe.local", local);
		round_trips("F_OFD_SETLKW + unlock, local file system", lpath);
		unlink(lpath);
	}
	if (lk(a, F_OFD_SETLK, F_WRLCK, 0, 4096))
		die("A lock", path_a);
	getlk_poll("F_OFD_GETLK on B, range held by A", b, 0);
	getlk_poll("F_OFD_GETLK on B, free range", b, 1 << 20);
	lk(a, F_OFD_SETLK, F_UNLCK, 0, 4096);
	wakeups(a, b);

	un = two_node_writes(false);
	lo = two_node_writes(true);
	printf("\n| 2 mounts × 16 MiB in 4 KiB pwrites | seconds | MiB/s | µs per call |\n|---|---:|---:|---:|\n");
	printf("| unlocked | %.2f | %.1f | %.0f |\n", un, 32 / un, un * 1e6 / 4096);
	printf("| OFD lock per call (ROMIO) | %.2f | %.1f | %.0f |\n", lo, 32 / lo, lo * 1e6 / 4096);
	printf("| ratio locked/unlocked | %.2f | | |\n", lo / un);

	printf("\n| A writes 4 KiB under a write lock, then B locks and reads | trials | stale reads on B |\n|---|---:|---:|\n");
	coherence("buffered, nothing else", false, 0);
	coherence("A fdatasync before unlock", true, 0);
	coherence("B posix_fadvise(DONTNEED) after lock", false, 1);
	coherence("A fdatasync + B DONTNEED", true, 1);
	coherence("B reads with O_DIRECT", false, 2);
	coherence("A fdatasync + B O_DIRECT", true, 2);
	close(a);
	close(b);
	unlink(path_a);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 4 || (strcmp(argv[1], "check") && strcmp(argv[1], "bench")))
		usage_error("usage: ofdprobe check DIR-A DIR-B [flock-apart] | bench DIR-A DIR-B [LOCAL-DIR]");
	snprintf(path_a, sizeof path_a, "%s/ofdprobe.%d", argv[2], (int)getpid());
	snprintf(path_b, sizeof path_b, "%s/ofdprobe.%d", argv[3], (int)getpid());
	if (!strcmp(argv[1], "check"))
		return check(argc > 4 && !strcmp(argv[4], "flock-apart"));
	return bench(argc > 4 ? argv[4] : NULL);
}
