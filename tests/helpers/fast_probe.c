/*
 * fast_probe MODE DIR [SECONDS]: the inline paths of issue 10 under load, for
 * test_fastpath.c, which runs each mode with and without the shim.
 *
 *   cursor  Writers share ONE description and write 256 KiB blocks at the
 *           file offset (write, writev, and pwritev2 at -1 with
 *           RWF_HIPRI), rewinding with lseek every 4 blocks; readers on
 *           their own descriptions lseek and read (or readv, or pread, or
 *           preadv2 at an offset with RWF_HIPRI) whole blocks.  Prints "torn=T reads=R size=S".  A read
 *           is torn when its block mixes two writers' patterns, which
 *           happens without the shim, and with it only if the range
 *           locked is not the range the kernel used.
 *   append  Writers append 64 KiB records to one O_APPEND file (two
 *           threads share a description, two have their own); readers
 *           pread across end of file, and a read is torn when it ends
 *           inside a record (it saw part of an append) or mixes two.
 *           Prints "torn=T reads=R size=S".
 *   append_trunc  The same while another thread truncates the file to 0
 *           every 20 ms (writers then run until the time is up).
 *   timer   The main thread starts single-threaded and creates no thread
 *           itself: a POSIX timer with SIGEV_THREAD makes glibc start its
 *           own helper thread, and each expiry runs a callback on a thread
 *           glibc makes, which pwrites a 256 KiB block at offset 0.  The
 *           main thread preads the block and checks it is whole.  The
 *           shim leaves out its thread locks only while a process has one
 *           thread (iolock.h, rs_solo); if it missed glibc's own threads,
 *           these reads would tear.  Prints "torn=T reads=R single=S",
 *           S being __libc_single_threaded before the timer was made.
 *   stats   A fixed list of calls whose results differ from their
 *           requested lengths (short reads at end of file, -1 results,
 *           copy_file_range and sendfile past the end, writes from exited
 *           threads, and from 300 threads alive at once, more than the
 *           shim has per-thread blocks for).  Prints "expect_read=X expect_written=Y",
 *           the bytes the calls returned, for comparison with the shim's
 *           RANGESHIM_STATS file.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/sendfile.h>
#include <sys/single_threaded.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "probe.h"

#define BLK (256 * 1024)
#define NBLK 4
#define REC (1024 * 1024)

static char dir[4096];
static char path[4200];
static int shared_fd;
static _Atomic int stop;
static _Atomic long torn, reads;
static int truncating;

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec / 1e9;
}

/* A block is whole when every byte equals its first. */
static void *cursor_writer(void *arg)
{
	long id = (long)arg;
	char *b = malloc(BLK);
	struct iovec iov[2];

	for (long k = 0; !atomic_load(&stop); k++) {
		memset(b, (int)(1 + id * 60 + k % 50), BLK);
		if (k % NBLK == 0 && lseek(shared_fd, 0, SEEK_SET) < 0)
			abort();
		if (id & 1) {
			iov[0].iov_base = b;
			iov[0].iov_len = BLK / 2;
			iov[1].iov_base = b + BLK / 2;
			iov[1].iov_len = BLK / 2;
			if (writev(shared_fd, iov, 2) != BLK)
				abort();
		} else if (id == 2) {
			/* At the file offset with a flag that leaves it there. */
			iov[0].iov_base = b;
			iov[0].iov_len = BLK;
			if (pwritev2(shared_fd, iov, 1, -1, RWF_HIPRI) != BLK)
				abort();
		} else if (write(shared_fd, b, BLK) != BLK) {
			abort();
		}
	}
	free(b);
	return NULL;
}

static void *cursor_reader(void *arg)
{
	long id = (long)arg;
	int fd = open(path, O_RDONLY);
	unsigned char *b = malloc(BLK);

	if (fd < 0)
		abort();
	for (long k = 0; !atomic_load(&stop); k++) {
		ssize_t r;

		if (lseek(fd, (off_t)(k % NBLK) * BLK, SEEK_SET) < 0)
			abort();
		/* pread locks where it reads whatever the writers did, so a
		 * writer that locked the wrong range would tear it. */
		if ((k + id) % 3 == 0) {
			struct iovec iov[2] = { { b, BLK / 2 }, { b + BLK / 2, BLK / 2 } };

			r = readv(fd, iov, 2);
		} else if ((k + id) % 3 == 1) {
			r = read(fd, b, BLK);
		} else if ((k / 3) % 2) {
			r = pread(fd, b, BLK, (off_t)(k % NBLK) * BLK);
		} else {
			struct iovec iov[1] = { { b, BLK } };

			r = preadv2(fd, iov, 1, (off_t)(k % NBLK) * BLK, RWF_HIPRI);
		}
		if (r != BLK)
			continue;	/* not written yet */
		atomic_fetch_add(&reads, 1);
		if (!probe_uniform(b, BLK))
			atomic_fetch_add(&torn, 1);
	}
	free(b);
	close(fd);
	return NULL;
}

static void *append_writer(void *arg)
{
	long id = (long)arg;
	int fd = id < 2 ? shared_fd : open(path, O_WRONLY | O_APPEND);
	char *b = malloc(REC);

	if (fd < 0)
		abort();
	for (long k = 0; !atomic_load(&stop) && (truncating || k < 60); k++) {
		memset(b, (int)(1 + id * 60 + k % 50), REC);
		if (write(fd, b, REC) != REC)
			abort();
	}
	if (fd != shared_fd)
		close(fd);
	free(b);
	return NULL;
}

/* Reads across end of file while records are appended: a read must end
 * where a record ends (it saw all of an append or none of it), and each
 * record in it must be whole. */
static void *append_reader(void *arg)
{
	int fd = open(path, O_RDONLY);
	unsigned char *b = malloc(2 * REC);

	(void)arg;
	if (fd < 0)
		abort();
	while (!atomic_load(&stop)) {
		struct stat st;
		off_t off;
		ssize_t r;
		int bad;

		if (fstat(fd, &st) < 0)
			abort();
		if (st.st_size < REC)
			continue;
		off = st.st_size / REC * REC - REC / 2;
		r = pread(fd, b, 2 * REC, off);
		if (r <= REC / 2)
			continue;
		atomic_fetch_add(&reads, 1);
		bad = probe_records_torn(b, r, (long long)off, 2 * REC, REC);
		if (bad && getenv("FAST_PROBE_DEBUG"))
			fprintf(stderr, "torn: off=%lld r=%zd size=%lld b0=%d bmid=%d blast=%d\n",
				(long long)off, r, (long long)st.st_size, b[0], b[REC / 2], b[r - 1]);
		if (bad)
			atomic_fetch_add(&torn, 1);
	}
	free(b);
	close(fd);
	return NULL;
}

/* Shrinks the file under the appenders: their end-of-file hints are then
 * too high, and only the re-check under the lock notices. */
static void *truncator(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		usleep(20000);
		if (ftruncate(shared_fd, 0) < 0)
			abort();
	}
	return NULL;
}

static void race(void *(*w)(void *), void *(*r)(void *), int flags, double secs)
{
	pthread_t t[8];
	struct stat st;
	double t0;

	shared_fd = open(path, O_RDWR | O_CREAT | O_TRUNC | flags, 0600);
	if (shared_fd < 0)
		abort();
	for (long i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, w, (void *)i);
	for (long i = 0; i < 2; i++)
		pthread_create(&t[4 + i], NULL, r, (void *)(i + 1));
	if (truncating)
		pthread_create(&t[6], NULL, truncator, NULL);
	t0 = now();
	while (now() - t0 < secs && atomic_load(&torn) < 20)
		usleep(10000);
	atomic_store(&stop, 1);
	for (int i = 0; i < 6 + truncating; i++)
		pthread_join(t[i], NULL);
	fstat(shared_fd, &st);
	printf("torn=%ld reads=%ld size=%lld\n", atomic_load(&torn), atomic_load(&reads),
	       (long long)st.st_size);
	close(shared_fd);
}

static long long expect_r, expect_w;

static void tally(ssize_t r, int is_write)
{
	if (r > 0)
		*(is_write ? &expect_w : &expect_r) += r;
}

static _Atomic int lingering_done;

static void *stats_thread(void *arg)
{
	int fd = (int)(long)arg & 0xffff;
	char b[1000];

	memset(b, 'x', sizeof(b));
	for (int i = 0; i < 100; i++)
		if (pwrite(fd, b, sizeof(b), (off_t)i * 1000) != (ssize_t)sizeof(b))
			abort();
	if ((long)arg >> 16) {
		/* Still alive when the process exits and the report is made. */
		atomic_store(&lingering_done, 1);
		for (;;)
			pause();
	}
	return NULL;
}

/* 300 threads alive at once: more than the 256 per-thread blocks, so
 * some count into the shared totals. */
static pthread_barrier_t many_bar;

static void *many_thread(void *arg)
{
	int fd = (int)(long)arg;
	char b[10] = "0123456789";

	if (pwrite(fd, b, sizeof(b), 0) != (ssize_t)sizeof(b))
		abort();
	pthread_barrier_wait(&many_bar);
	return NULL;
}

static void stats(void)
{
	char b[8192], p2[4300];
	int fd, fd2, wo;
	off_t o;
	struct iovec iov[2] = { { b, 3000 }, { b + 3000, 3000 } };
	pthread_t t[3];

	memset(b, 'a', sizeof(b));
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	tally(write(fd, b, 5000), 1);
	tally(lseek(fd, 4000, SEEK_SET) < 0 ? -1 : 0, 0);
	tally(read(fd, b, 8192), 0);             /* short: 1000 */
	tally(read(fd, b, 8192), 0);             /* 0 at end of file */
	tally(pread(fd, b, 8192, 2500), 0);      /* short: 2500 */
	tally(preadv(fd, iov, 2, 1000), 0);      /* short: 4000 */
	tally(pwritev(fd, iov, 2, 5000), 1);     /* 6000 */
	tally(pread(fd, b, 100, -1), 0);         /* -1 EINVAL */
	wo = open(path, O_WRONLY);
	tally(read(wo, b, 100), 0);              /* -1 EBADF */
	tally(pread(wo, b, 100, 0), 0);          /* -1 EBADF */
	close(wo);
	snprintf(p2, sizeof(p2), "%s/stats2", dir);
	fd2 = open(p2, O_RDWR | O_CREAT | O_TRUNC, 0600);
	o = 10000;
	/* Asks for 1 MiB from 10000 of an 11000-byte file: moves 1000. */
	{
		ssize_t r = copy_file_range(fd, &o, fd2, NULL, 1 << 20, 0);

		tally(r, 0);
		tally(r, 1);
	}
	o = 0;
	{
		ssize_t r = sendfile(fd2, fd, &o, 1 << 20);	/* 11000 */

		tally(r, 0);
		tally(r, 1);
	}
	/* Threads that have exited, and one still alive at exit. */
	for (int i = 0; i < 2; i++) {
		pthread_create(&t[i], NULL, stats_thread, (void *)(long)fd);
		pthread_join(t[i], NULL);
		expect_w += 100000;
	}
	pthread_create(&t[2], NULL, stats_thread, (void *)((long)fd | 1L << 16));
	while (!atomic_load(&lingering_done))
		usleep(1000);
	expect_w += 100000;
	{
		enum { MANY = 300 };
		pthread_t *m = calloc(MANY, sizeof(*m));
		pthread_attr_t a;

		pthread_attr_init(&a);
		pthread_attr_setstacksize(&a, 64 * 1024);
		pthread_barrier_init(&many_bar, NULL, MANY + 1);
		for (int i = 0; i < MANY; i++)
			if (pthread_create(&m[i], &a, many_thread, (void *)(long)fd) != 0)
				abort();
		pthread_barrier_wait(&many_bar);
		for (int i = 0; i < MANY; i++)
			pthread_join(m[i], NULL);
		expect_w += MANY * 10;
		free(m);
	}
	close(fd2);
	unlink(p2);
	printf("expect_read=%lld expect_written=%lld\n", expect_r, expect_w);
	fflush(stdout);
}

static int timer_fd;
static _Atomic long timer_k;

static void timer_write(union sigval v)
{
	static __thread char *b;
	long k = atomic_fetch_add(&timer_k, 1);

	(void)v;
	if (atomic_load(&stop))
		return;
	if (!b && !(b = malloc(BLK)))
		abort();
	memset(b, (int)(1 + k % 50), BLK);
	/* timer_delete does not wait for a callback in flight: one may
	 * still write after the descriptor is closed. */
	if (pwrite(timer_fd, b, BLK, 0) != BLK && !atomic_load(&stop))
		abort();
}

static void timer_race(void)
{
	int single = __libc_single_threaded;
	struct sigevent ev = { .sigev_notify = SIGEV_THREAD,
			       .sigev_notify_function = timer_write };
	struct itimerspec it = { { 0, 300000 }, { 0, 300000 } };
	unsigned char *b = malloc(BLK);
	long t = 0, r = 0;
	timer_t tm;
	double end;

	timer_fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (timer_fd < 0 || !b || timer_create(CLOCK_MONOTONIC, &ev, &tm) ||
	    timer_settime(tm, 0, &it, NULL))
		abort();
	for (end = now() + 2.0; now() < end;) {
		if (pread(timer_fd, b, BLK, 0) != BLK)
			continue;	/* not written yet */
		r++;
		t += !probe_uniform(b, BLK);
	}
	atomic_store(&stop, 1);
	timer_delete(tm);
	usleep(100000);
	printf("torn=%ld reads=%ld single=%d\n", t, r, single);
	fflush(stdout);
	/* timer_fd stays open until exit: a callback still in flight (past
	 * its stop check, then descheduled on a loaded machine) would write
	 * whatever file reused the number, and the next one opened is the
	 * shim's stats report (io_calls=-1 in fastpath::timer once). */
}

static double secs = 3.0;

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: fast_probe cursor|append|stats DIR\n");
		return 2;
	}
	snprintf(dir, sizeof(dir), "%s", argv[2]);
	snprintf(path, sizeof(path), "%s/fast.dat", dir);
	/* How long the races run (default 3 s; the tests run longer on a
	 * loaded machine). */
	if (argc > 3 && atof(argv[3]) > 0)
		secs = atof(argv[3]);
	if (strcmp(argv[1], "cursor") == 0)
		race(cursor_writer, cursor_reader, 0, secs);
	else if (strcmp(argv[1], "append") == 0)
		race(append_writer, append_reader, O_APPEND, secs);
	else if (strcmp(argv[1], "append_trunc") == 0 && (truncating = 1))
		race(append_writer, append_reader, O_APPEND, secs);
	else if (strcmp(argv[1], "timer") == 0)
		timer_race();
	else if (strcmp(argv[1], "stats") == 0) {
		stats();
		unlink(path);
		exit(0);	/* with the lingering thread still running */
	}
	else
		return 2;
	unlink(path);
	return 0;
}
