/*
 * holes_probe MODE ARGS: the rigs of test_holes.c, one per hole of issue 8
 * that the shim closed on the process side.  Each tear rig runs threads
 * for at most MS milliseconds (stopping early once STOP torn reads were
 * seen, so that a control that tears ends quickly; 0 = never) and prints
 *   reads=N torn=N writes=N
 * A read is torn if it is a mix of two states that no single call left
 * behind.  Exit status 1 with a "FAIL ..." line if the rig itself failed.
 *
 *   rwf FILE               pwritev2 with RWF_NOAPPEND / RWF_APPEND / both
 *                          on descriptors with and without O_APPEND.
 *                          Prints r.<step>=<result>/<errno> and the file's
 *                          contents: the same with or without the shim.
 *   noappend FILE MS STOP  one thread rewrites [0, 1 MiB) of an O_APPEND
 *                          fd with pwritev2(RWF_NOAPPEND), alternating two
 *                          letters; another preads [0, 1 MiB).
 *   punch FILE MS STOP     a sparse file of 3 GiB + 1 MiB: one thread
 *                          punches [0, 4 GiB) (KEEP_SIZE), one rewrites the
 *                          1 MiB at 3 GiB with 'A', one reads it.  A read
 *                          of zeros and 'A's mixed is torn.
 *   dup2 FX FY MS STOP     log rotation: fd N is dup2'd onto FX and FY in
 *                          turn by one thread while another pwrites 1 MiB
 *                          blocks at 0 through N (alternating letters);
 *                          readers pread [0, 1 MiB) of FX and FY through
 *                          their own fds.
 *   freopen FX FY MS STOP  the same rotation done by freopen(FX or FY,
 *                          "r+", fp) on the stream whose fd N the writer
 *                          pwrites through (glibc keeps N with an internal
 *                          dup3).
 *   append HOW FILE MS STOP
 *                          two descriptions of FILE opened without O_APPEND
 *                          get it through HOW (fdopen: fdopen(fd, "a");
 *                          syscall: syscall(SYS_fcntl, fd, F_SETFL, ...);
 *                          inherit:FD1:FD2: the test passed two O_APPEND
 *                          fds).  One thread appends 1 MiB blocks through
 *                          them in turn with write(); a reader preads the
 *                          block at end of file.  A short or mixed block
 *                          is torn.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <linux/falloc.h>
#include <linux/fs.h>

#include "probe.h"

static int failed;

#ifndef RWF_NOAPPEND
#define RWF_NOAPPEND 0x00000020
#endif

/*
 * TSan models a descriptor as a memory location: freopen's replacement of
 * the stream's fd while another thread pwrites through it is a race to it,
 * and that race is the rig (without the shim it is the tear the control
 * must see).  dup2 is modelled as synchronising, so only freopen is
 * suppressed.
 */
#if defined(__SANITIZE_THREAD__)
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void)
{
	return "race:reopener\n";
}
#endif

#define BLK (1u << 20)
#define GIB (1ull << 30)

static atomic_int stop;
static atomic_long reads, torn, writes;
static long stop_after;

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* Is buf[0..n) one byte value throughout?  (memcmp against itself one
 * byte on: libc's speed even in sanitizer builds, whose byte loops are
 * slow enough to hide the tear.) */
static int uniform(const unsigned char *buf, size_t n)
{
	return n < 2 || memcmp(buf, buf + 1, n - 1) == 0;
}

static void count_read(int is_torn)
{
	atomic_fetch_add(&reads, 1);
	if (is_torn && atomic_fetch_add(&torn, 1) + 1 >= stop_after && stop_after > 0)
		atomic_store(&stop, 1);
}

static void *xbuf(int c)
{
	void *b = malloc(BLK);

	if (!b) {
		perror("malloc");
		exit(2);
	}
	memset(b, c, BLK);
	return b;
}

/* Start the threads, let them run for ms, stop them, print the counts. */
static void run_rig(void *(*fn[])(void *), void *arg[], int n, int ms)
{
	pthread_t th[8];
	double t0 = now_ms();

	for (int i = 0; i < n; i++)
		pthread_create(&th[i], NULL, fn[i], arg[i]);
	while (!atomic_load(&stop) && now_ms() - t0 < ms)
		usleep(10000);
	atomic_store(&stop, 1);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	printf("reads=%ld torn=%ld writes=%ld\n", atomic_load(&reads), atomic_load(&torn),
	       atomic_load(&writes));
}

/* ---- rwf: where each pwritev2 writes ------------------------------------ */

static void step(const char *name, ssize_t r)
{
	printf("r.%s=%zd/%d\n", name, r, r < 0 ? errno : 0);
}

static ssize_t pw2(int fd, const char *s, off_t off, int flags)
{
	struct iovec iov = { (void *)s, strlen(s) };

	errno = 0;
	return pwritev2(fd, &iov, 1, off, flags);
}

static int m_rwf(const char *file)
{
	int a = open(file, O_RDWR | O_CREAT | O_TRUNC | O_APPEND, 0600);
	int p = open(file, O_RDWR);
	char buf[64] = "";
	ssize_t n;

	CHECK(a >= 0 && p >= 0, "open %s", file);
	step("append_write", write(a, "AAAA", 4));                   /* AAAA */
	step("noappend_at_0", pw2(a, "BB", 0, RWF_NOAPPEND));        /* BBAA */
	step("seek", lseek(a, 1, SEEK_SET));
	step("noappend_at_cur", pw2(a, "C", -1, RWF_NOAPPEND));      /* BCAA */
	step("cur_after", lseek(a, 0, SEEK_CUR));                    /* 2 */
	step("append_at_0", pw2(p, "DD", 0, RWF_APPEND));            /* BCAADD */
	step("p_cur", lseek(p, 0, SEEK_CUR));                        /* 0 */
	step("append_at_cur", pw2(p, "E", -1, RWF_APPEND));          /* BCAADDE */
	step("p_cur_after", lseek(p, 0, SEEK_CUR));                  /* 7 */
	step("both", pw2(p, "F", 0, RWF_APPEND | RWF_NOAPPEND));     /* EINVAL */
	step("o_append_at_0", pw2(a, "G", 0, 0));                    /* BCAADDEG */
	step("noappend_bad_off", pw2(a, "H", -2, RWF_NOAPPEND));     /* EINVAL */
	step("unknown_flag", pw2(a, "I", 0, 0x40000000));            /* EOPNOTSUPP */
	n = pread(p, buf, sizeof(buf) - 1, 0);
	CHECK(n >= 0, "pread");
	buf[n > 0 ? n : 0] = '\0';
	printf("content=%s\n", buf);
	/* Locked calls to be counted as appends: the O_APPEND write, the two
	 * RWF_APPEND writes, the plain pwritev2 on the O_APPEND fd and the
	 * one with a flag the shim does not know (the kernel refuses it, but
	 * an unknown flag cannot be assumed to move the write). */
	printf("expect_appends=5\n");
	close(a);
	close(p);
	return failed;
}

/* ---- noappend ----------------------------------------------------------- */

static int rig_fd;

static void *noappend_writer(void *arg)
{
	unsigned char *b[2] = { xbuf('x'), xbuf('y') };

	(void)arg;
	for (long i = 0; !atomic_load(&stop); i++) {
		struct iovec iov = { b[i & 1], BLK };

		if (pwritev2(rig_fd, &iov, 1, 0, RWF_NOAPPEND) != (ssize_t)BLK) {
			CHECK(0, "pwritev2");
			break;
		}
		atomic_fetch_add(&writes, 1);
	}
	free(b[0]);
	free(b[1]);
	return NULL;
}

/* pread [off, off + BLK) of fd: torn unless one byte value throughout. */
struct reader {
	int fd[2];
	off_t off;
};

static void *uniform_reader(void *arg)
{
	struct reader *r = arg;
	unsigned char *b = xbuf(0);

	for (long i = 0; !atomic_load(&stop); i++) {
		int fd = r->fd[i & 1];
		ssize_t n = pread(fd, b, BLK, r->off);

		if (n != (ssize_t)BLK) {
			CHECK(0, "pread %zd", n);
			break;
		}
		count_read(!uniform(b, BLK));
	}
	free(b);
	return NULL;
}

static int m_noappend(const char *file, int ms)
{
	void *(*fn[2])(void *) = { noappend_writer, uniform_reader };
	struct reader r;
	void *arg[2] = { NULL, &r };
	unsigned char *b = xbuf('x');

	rig_fd = open(file, O_RDWR | O_CREAT | O_TRUNC | O_APPEND, 0600);
	r.fd[0] = r.fd[1] = open(file, O_RDONLY);
	r.off = 0;
	CHECK(rig_fd >= 0 && r.fd[0] >= 0, "open %s", file);
	CHECK(write(rig_fd, b, BLK) == (ssize_t)BLK, "fill");
	free(b);
	if (!failed)
		run_rig(fn, arg, 2, ms);
	/* Every block went to [0, 1 MiB): none was appended. */
	CHECK(lseek(rig_fd, 0, SEEK_END) == (off_t)BLK, "size");
	return failed;
}

/* ---- punch -------------------------------------------------------------- */

#define PUNCH_AT (3 * GIB)

static void *puncher(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		if (fallocate(rig_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
			      (off_t)(4 * GIB)) != 0) {
			CHECK(0, "fallocate");
			break;
		}
	}
	return NULL;
}

static void *punch_writer(void *arg)
{
	unsigned char *b = xbuf('A');

	(void)arg;
	while (!atomic_load(&stop)) {
		if (pwrite(rig_fd, b, BLK, (off_t)PUNCH_AT) != (ssize_t)BLK) {
			CHECK(0, "pwrite");
			break;
		}
		atomic_fetch_add(&writes, 1);
	}
	free(b);
	return NULL;
}

static int m_punch(const char *file, int ms)
{
	void *(*fn[3])(void *) = { puncher, punch_writer, uniform_reader };
	struct reader r;
	void *arg[3] = { NULL, NULL, &r };

	rig_fd = open(file, O_RDWR | O_CREAT | O_TRUNC, 0600);
	r.fd[0] = r.fd[1] = open(file, O_RDONLY);
	r.off = (off_t)PUNCH_AT;
	CHECK(rig_fd >= 0 && r.fd[0] >= 0, "open %s", file);
	CHECK(ftruncate(rig_fd, (off_t)(PUNCH_AT + BLK)) == 0, "ftruncate");
	if (fallocate(rig_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, BLK) != 0) {
		printf("punch=unsupported\n");
		return 0;
	}
	if (!failed)
		run_rig(fn, arg, 3, ms);
	return failed;
}

/* ---- dup2 --------------------------------------------------------------- */

static int rot_fd, fx, fy;

static void *rotator(void *arg)
{
	(void)arg;
	for (long i = 0; !atomic_load(&stop); i++) {
		if (dup2((i & 1) ? fy : fx, rot_fd) != rot_fd) {
			CHECK(0, "dup2");
			break;
		}
	}
	return NULL;
}

static void *dup_writer(void *arg)
{
	unsigned char *b[2] = { xbuf('x'), xbuf('y') };

	(void)arg;
	for (long i = 0; !atomic_load(&stop); i++) {
		if (pwrite(rot_fd, b[i & 1], BLK, 0) != (ssize_t)BLK) {
			CHECK(0, "pwrite");
			break;
		}
		atomic_fetch_add(&writes, 1);
	}
	free(b[0]);
	free(b[1]);
	return NULL;
}

/* The two files a rotation switches between, one block of 'x' each. */
static void open_pair(const char *x, const char *y)
{
	unsigned char *b = xbuf('x');

	fx = open(x, O_RDWR | O_CREAT | O_TRUNC, 0600);
	fy = open(y, O_RDWR | O_CREAT | O_TRUNC, 0600);
	CHECK(fx >= 0 && fy >= 0, "open");
	CHECK(pwrite(fx, b, BLK, 0) == (ssize_t)BLK && pwrite(fy, b, BLK, 0) == (ssize_t)BLK,
	      "fill");
	free(b);
}

static int m_dup2(const char *x, const char *y, int ms)
{
	void *(*fn[3])(void *) = { rotator, dup_writer, uniform_reader };
	struct reader r;
	void *arg[3] = { NULL, NULL, &r };

	open_pair(x, y);
	rot_fd = dup(fx);
	r.fd[0] = open(x, O_RDONLY);
	r.fd[1] = open(y, O_RDONLY);
	r.off = 0;
	CHECK(rot_fd >= 0 && r.fd[0] >= 0 && r.fd[1] >= 0, "open readers");
	if (!failed)
		run_rig(fn, arg, 3, ms);
	return failed;
}

/* ---- freopen ------------------------------------------------------------ */

static FILE *rot_fp;
static const char *rot_path[2];

static void *reopener(void *arg)
{
	(void)arg;
	for (long i = 0; !atomic_load(&stop); i++) {
		if (freopen(rot_path[(i + 1) & 1], "r+", rot_fp) != rot_fp ||
		    fileno(rot_fp) != rot_fd) {
			CHECK(0, "freopen kept neither the stream nor fd %d", rot_fd);
			atomic_store(&stop, 1);
			break;
		}
	}
	return NULL;
}

static int m_freopen(const char *x, const char *y, int ms)
{
	void *(*fn[3])(void *) = { reopener, dup_writer, uniform_reader };
	struct reader r;
	void *arg[3] = { NULL, NULL, &r };

	open_pair(x, y);
	rot_path[0] = x;
	rot_path[1] = y;
	rot_fp = fopen(x, "r+");
	CHECK(rot_fp != NULL, "fopen %s", x);
	if (failed)
		return failed;
	rot_fd = fileno(rot_fp);
	r.fd[0] = fx;
	r.fd[1] = fy;
	r.off = 0;
	run_rig(fn, arg, 3, ms);
	return failed;
}

/* ---- append ------------------------------------------------------------- */

static int app_fd[2];

static void *appender(void *arg)
{
	unsigned char *b[2] = { xbuf('x'), xbuf('y') };

	(void)arg;
	for (long i = 0; !atomic_load(&stop); i++) {
		/* Keep the file small: truncation is locked too. */
		if (i % 16 == 15 && ftruncate(app_fd[0], 0) != 0) {
			CHECK(0, "ftruncate");
			break;
		}
		if (write(app_fd[i & 1], b[i & 1], BLK) != (ssize_t)BLK) {
			CHECK(0, "write");
			break;
		}
		atomic_fetch_add(&writes, 1);
	}
	free(b[0]);
	free(b[1]);
	return NULL;
}

/* The block being appended: nothing (not there yet) or all of it, in one
 * letter. */
static void *tail_reader(void *arg)
{
	int fd = *(int *)arg;
	unsigned char *b = xbuf(0);

	while (!atomic_load(&stop)) {
		struct stat st;
		ssize_t n;

		if (fstat(fd, &st) != 0) {
			CHECK(0, "fstat");
			break;
		}
		n = pread(fd, b, BLK, st.st_size / BLK * BLK);
		if (n < 0) {
			CHECK(0, "pread");
			break;
		}
		if (n > 0)
			count_read(n != (ssize_t)BLK || !uniform(b, BLK));
	}
	free(b);
	return NULL;
}

static int m_append(const char *how, const char *file, int ms)
{
	void *(*fn[2])(void *) = { appender, tail_reader };
	int rfd;
	void *arg[2] = { NULL, &rfd };

	if (strncmp(how, "inherit:", 8) == 0) {
		if (sscanf(how + 8, "%d:%d", &app_fd[0], &app_fd[1]) != 2) {
			CHECK(0, "bad %s", how);
			return 1;
		}
		CHECK(fcntl(app_fd[0], F_GETFL) & O_APPEND, "inherited fd without O_APPEND");
	} else {
		for (int i = 0; i < 2; i++) {
			app_fd[i] = open(file, O_WRONLY | O_CREAT | (i ? 0 : O_TRUNC), 0600);
			CHECK(app_fd[i] >= 0, "open %s", file);
			if (strcmp(how, "fdopen") == 0) {
				CHECK(fdopen(app_fd[i], "a") != NULL, "fdopen");
			} else if (strcmp(how, "syscall") == 0) {
				long fl = syscall(SYS_fcntl, app_fd[i], F_GETFL);

				CHECK(syscall(SYS_fcntl, app_fd[i], F_SETFL, fl | O_APPEND) == 0,
				      "syscall F_SETFL");
			} else {
				CHECK(0, "unknown HOW %s", how);
			}
		}
	}
	CHECK(fcntl(app_fd[1], F_GETFL) & O_APPEND, "no O_APPEND");
	rfd = open(file, O_RDONLY);
	CHECK(rfd >= 0, "open reader");
	if (!failed)
		run_rig(fn, arg, 2, ms);
	return failed;
}

int main(int argc, char **argv)
{
	int rc = 2;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 5)
		stop_after = atol(argv[argc - 1]);
	if (argc >= 3 && strcmp(argv[1], "rwf") == 0)
		rc = m_rwf(argv[2]);
	else if (argc >= 5 && strcmp(argv[1], "noappend") == 0)
		rc = m_noappend(argv[2], atoi(argv[3]));
	else if (argc >= 5 && strcmp(argv[1], "punch") == 0)
		rc = m_punch(argv[2], atoi(argv[3]));
	else if (argc >= 6 && strcmp(argv[1], "dup2") == 0)
		rc = m_dup2(argv[2], argv[3], atoi(argv[4]));
	else if (argc >= 6 && strcmp(argv[1], "freopen") == 0)
		rc = m_freopen(argv[2], argv[3], atoi(argv[4]));
	else if (argc >= 6 && strcmp(argv[1], "append") == 0)
		rc = m_append(argv[2], argv[3], atoi(argv[4]));
	else
		fprintf(stderr, "usage: holes_probe MODE ARGS (see the source)\n");
	if (rc == 0 && failed)
		rc = 1;
	return rc;
}
