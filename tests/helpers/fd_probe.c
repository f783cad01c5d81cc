/*
 * fd_probe MODE ARGS: descriptor bookkeeping scenarios for test_fdtrack.c.
 * Each mode does its I/O, checks what it can check itself (exit status 1
 * and a "FAIL ..." line if not), and prints key=value lines; the counts
 * the shim should have seen are printed as expect_* so that the test can
 * hold them against the RANGESHIM_STATS JSON.
 *
 *   passthrough FILE N     N record writes to FILE; N writes each to a pipe,
 *                          /dev/null and a socket (+ the reads that drain
 *                          them, + a pwrite on the pipe).  expect_io=N,
 *                          expect_pass=<the calls on non-files>.
 *   twoopen F1 F2 MS       open F1 and F2 (the same file or not), write
 *                          through both; for MS ms one thread rewrites 4 MiB
 *                          at 0 through the first fd while another writes
 *                          4 KiB inside that range through the second.
 *   holdlock F1 F2         a writer thread is parked inside pwrite(F1, 0,
 *                          2 pages) by a userfaultfd on its source buffer,
 *                          i.e. while it holds its lock; then a buffered
 *                          pread of bytes 100..199 of F2 (which takes no
 *                          inode lock in the kernel) runs.  Prints uffd=0
 *                          if userfaultfd is unavailable, else
 *                          reader_blocked=1 if that read had not finished
 *                          after a second (it only finishes once the
 *                          writer is released).
 *   write FILE N           N pwrites of records, then N preads to verify.
 *                          expect_io=2N.
 *   append FILE NT NR      NT threads append NR records each through one
 *                          shared O_APPEND fd, NT more through their own
 *                          O_APPEND opens (write and writev alternately).
 *                          Records: 100 times one letter, then '\n'.
 *   setfl FILE K           F_SETFL O_APPEND on an fd opened without it; K
 *                          writes after lseek(0) must append; clearing and
 *                          setting it again through a dup'd fd.
 *   dup F1 F2 F3           dup/dup2/dup3/F_DUPFD/F_DUPFD_CLOEXEC share the
 *                          file offset; dup2 of a pipe and of another file
 *                          onto a tracked fd.  Prints r.<step>=<result>
 *                          lines that must be the same with or without
 *                          the shim.
 *   closerange FILE        close_range and closefrom forget their fds: a
 *                          pipe that reuses the numbers is not locked.
 *   stdout NT NR           NT threads write NR records each to fd 1.
 *   pid FILE N             prints pid=<getpid()>, then N pwrites to FILE.
 *   forked FILE N HOW      N forked children each pwrite a record to FILE
 *                          and exit; HOW is "inherit" (the parent opened
 *                          FILE and never used it: a lazy descriptor) or
 *                          "own" (each child opens FILE itself).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/userfaultfd.h>

#include "probe.h"

static int failed;

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

#define REC 101

static void record(char *r, char letter)
{
	memset(r, letter, REC - 1);
	r[REC - 1] = '\n';
}

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* ---- passthrough ------------------------------------------------------- */

/* Read back exactly n bytes, counting the read calls. */
static long drain(int fd, long n)
{
	char b[4096];
	long calls = 0;

	while (n > 0) {
		ssize_t r = read(fd, b, n < (long)sizeof(b) ? (size_t)n : sizeof(b));

		calls++;
		if (r <= 0)
			break;
		n -= r;
	}
	CHECK(n == 0, "drain left %ld bytes", n);
	return calls;
}

static int m_passthrough(const char *file, int n)
{
	char r[REC];
	int fd, nul, p[2], s[2];
	long pass = 0;

	record(r, 'p');
	fd = open(file, O_RDWR | O_CREAT | O_TRUNC, 0644);
	nul = open("/dev/null", O_WRONLY);
	CHECK(fd >= 0 && nul >= 0, "open");
	CHECK(pipe(p) == 0, "pipe");
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, s) == 0, "socketpair");
	for (int i = 0; i < n; i++) {
		CHECK(write(fd, r, REC) == REC, "write file");
		CHECK(write(p[1], r, 10) == 10, "write pipe");
		CHECK(write(nul, r, REC) == REC, "write /dev/null");
		CHECK(write(s[0], r, 10) == 10, "write socket");
		pass += 3;
	}
	pass += drain(p[0], 10L * n);
	pass += drain(s[1], 10L * n);
	errno = 0;
	CHECK(pwrite(p[1], r, 1, 0) == -1 && errno == ESPIPE, "pwrite on a pipe");
	pass++;
	CHECK(lseek(fd, 0, SEEK_END) == (off_t)REC * n, "file size");
	close(fd);
	close(nul);
	close(p[0]);
	close(p[1]);
	close(s[0]);
	close(s[1]);
	printf("expect_io=%d\nexpect_pass=%ld\nexpect_bytes_written=%d\n", n, pass, n * REC);
	return failed;
}

/* ---- twoopen ----------------------------------------------------------- */

struct two {
	int fd1, fd2;
	double until;
	long n1, n2;
};

static void *big_writer(void *arg)
{
	struct two *t = arg;
	size_t len = 4u << 20;
	char *b = malloc(len);

	memset(b, 'B', len);
	while (now_ms() < t->until) {
		CHECK(pwrite(t->fd1, b, len, 0) == (ssize_t)len, "big pwrite");
		t->n1++;
	}
	free(b);
	return NULL;
}

static void *small_writer(void *arg)
{
	struct two *t = arg;
	char b[4096];

	memset(b, 's', sizeof(b));
	while (now_ms() < t->until) {
		CHECK(pwrite(t->fd2, b, sizeof(b), 4096) == (ssize_t)sizeof(b), "small pwrite");
		t->n2++;
	}
	return NULL;
}

static int m_twoopen(const char *f1, const char *f2, int ms)
{
	struct two t = { 0 };
	pthread_t a, b;
	struct stat s1, s2;

	t.fd1 = open(f1, O_RDWR | O_CREAT | O_TRUNC, 0644);
	t.fd2 = open(f2, O_RDWR | O_CREAT, 0644);
	CHECK(t.fd1 >= 0 && t.fd2 >= 0, "open");
	CHECK(write(t.fd1, "one", 3) == 3, "write fd1");
	CHECK(write(t.fd2, "two", 3) == 3, "write fd2");
	fstat(t.fd1, &s1);
	fstat(t.fd2, &s2);
	printf("same_file=%d\n", s1.st_ino == s2.st_ino && s1.st_dev == s2.st_dev);
	t.until = now_ms() + ms;
	pthread_create(&a, NULL, big_writer, &t);
	pthread_create(&b, NULL, small_writer, &t);
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	printf("big_writes=%ld\nsmall_writes=%ld\n", t.n1, t.n2);
	close(t.fd1);
	close(t.fd2);
	return failed;
}

/* ---- holdlock ----------------------------------------------------------- */

struct hold {
	int fd;
	char *buf;
	size_t len;
	ssize_t r;
	atomic_int done;
};

static void *hold_writer(void *arg)
{
	struct hold *h = arg;

	h->r = pwrite(h->fd, h->buf, h->len, 0);
	atomic_store(&h->done, 1);
	return NULL;
}

static void *hold_reader(void *arg)
{
	struct hold *h = arg;

	h->r = pread(h->fd, h->buf, h->len, 100);
	atomic_store(&h->done, 1);
	return NULL;
}

static int m_holdlock(const char *f1, const char *f2)
{
	size_t ps = (size_t)sysconf(_SC_PAGESIZE);
	struct hold w = { 0 }, r = { 0 };
	char *src, rb[100];
	struct uffdio_api api = { .api = UFFD_API };
	struct uffdio_register reg;
	struct uffdio_copy cp;
	struct uffd_msg msg;
	struct pollfd pfd;
	pthread_t tw, tr;
	int uffd, fd1, fd2, blocked;

	fd1 = open(f1, O_RDWR | O_CREAT | O_TRUNC, 0644);
	fd2 = open(f2, O_RDWR | O_CREAT, 0644);
	src = malloc(2 * ps);
	CHECK(fd1 >= 0 && fd2 >= 0 && src, "open");
	memset(src, 'i', 2 * ps);
	CHECK(pwrite(fd1, src, 2 * ps, 0) == (ssize_t)(2 * ps), "fill f1");
	CHECK(pwrite(fd2, src, 2 * ps, 0) == (ssize_t)(2 * ps), "fill f2");
	uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api) < 0) {
		printf("uffd=0\nuffd_errno=%d\n", errno);
		return failed;
	}
	w.buf = mmap(NULL, 2 * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(w.buf != MAP_FAILED, "mmap");
	memset(w.buf, 'W', ps);                 /* page 1 present, page 2 missing */
	reg.range.start = (unsigned long)(w.buf + ps);
	reg.range.len = ps;
	reg.mode = UFFDIO_REGISTER_MODE_MISSING;
	if (ioctl(uffd, UFFDIO_REGISTER, &reg) < 0) {
		printf("uffd=0\nuffd_errno=%d\n", errno);
		return failed;
	}
	w.fd = fd1;
	w.len = 2 * ps;
	pthread_create(&tw, NULL, hold_writer, &w);
	/* Wait until the writer is stuck in the kernel copying page 2. */
	pfd.fd = uffd;
	pfd.events = POLLIN;
	CHECK(poll(&pfd, 1, 5000) == 1, "no page fault from the writer");
	CHECK(read(uffd, &msg, sizeof(msg)) == sizeof(msg) &&
	      msg.event == UFFD_EVENT_PAGEFAULT, "uffd event");
	CHECK(!atomic_load(&w.done), "the writer finished without its page");

	r.fd = fd2;
	r.buf = rb;
	r.len = sizeof(rb);
	pthread_create(&tr, NULL, hold_reader, &r);
	for (int i = 0; i < 200 && !atomic_load(&r.done); i++)
		usleep(5000);
	blocked = !atomic_load(&r.done);

	memset(src, 'U', ps);
	cp.dst = (unsigned long)(w.buf + ps);
	cp.src = (unsigned long)src;
	cp.len = ps;
	cp.mode = 0;
	cp.copy = 0;
	CHECK(ioctl(uffd, UFFDIO_COPY, &cp) == 0, "UFFDIO_COPY");
	pthread_join(tw, NULL);
	pthread_join(tr, NULL);
	CHECK(w.r == (ssize_t)(2 * ps), "writer: %zd", w.r);
	CHECK(r.r == (ssize_t)sizeof(rb), "reader: %zd", r.r);
	/* A blocked reader ran after the write: it must see the new bytes. */
	if (blocked)
		CHECK(rb[0] == 'W', "blocked reader saw '%c'", rb[0]);
	printf("uffd=1\nreader_blocked=%d\n", blocked);
	close(uffd);
	close(fd1);
	close(fd2);
	free(src);
	return failed;
}

/* ---- write ------------------------------------------------------------- */

static int m_write(const char *file, int n)
{
	char r[REC], in[REC];
	int fd = open(file, O_RDWR | O_CREAT | O_TRUNC, 0644);

	CHECK(fd >= 0, "open %s", file);
	for (int i = 0; i < n; i++) {
		record(r, (char)('a' + i % 26));
		CHECK(pwrite(fd, r, REC, (off_t)i * REC) == REC, "pwrite %d", i);
	}
	for (int i = 0; i < n; i++) {
		record(r, (char)('a' + i % 26));
		CHECK(pread(fd, in, REC, (off_t)i * REC) == REC && memcmp(in, r, REC) == 0,
		      "record %d reads back wrong", i);
	}
	close(fd);
	printf("writes=%d\nexpect_io=%d\n", n, 2 * n);
	return failed;
}

/* ---- append ------------------------------------------------------------ */

struct app {
	const char *file;
	int fd;                 /* shared fd, or -1: open our own */
	char letter;
	int nrec;
};

static void *appender(void *arg)
{
	struct app *a = arg;
	char r[REC];
	int fd = a->fd;

	if (fd < 0)
		fd = open(a->file, O_WRONLY | O_APPEND);
	CHECK(fd >= 0, "open O_APPEND");
	record(r, a->letter);
	for (int i = 0; i < a->nrec; i++) {
		if (i % 2 == 0) {
			CHECK(write(fd, r, REC) == REC, "append write");
		} else {
			struct iovec v[2] = { { r, REC - 1 }, { r + REC - 1, 1 } };

			CHECK(writev(fd, v, 2) == REC, "append writev");
		}
	}
	if (a->fd < 0)
		close(fd);
	return NULL;
}

static int m_append(const char *file, int nt, int nr)
{
	pthread_t th[52];
	struct app a[52];
	int fd;

	if (nt < 1 || nt > 26)
		return 2;
	fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
	CHECK(fd >= 0, "open");
	for (int i = 0; i < 2 * nt; i++) {
		a[i].file = file;
		a[i].fd = i < nt ? fd : -1;
		a[i].letter = (char)(i < 26 ? 'a' + i : 'A' + i - 26);
		a[i].nrec = nr;
		pthread_create(&th[i], NULL, appender, &a[i]);
	}
	for (int i = 0; i < 2 * nt; i++)
		pthread_join(th[i], NULL);
	CHECK(lseek(fd, 0, SEEK_END) == (off_t)REC * 2 * nt * nr, "size");
	close(fd);
	printf("records=%d\nexpect_appends=%d\n", 2 * nt * nr, 2 * nt * nr);
	return failed;
}

/* ---- setfl ------------------------------------------------------------- */

static int m_setfl(const char *file, int k)
{
	char r[REC], in[REC];
	int fd = open(file, O_RDWR | O_CREAT | O_TRUNC, 0644), d;

	CHECK(fd >= 0, "open");
	record(r, 'a');
	CHECK(write(fd, r, REC) == REC, "first write");
	CHECK(fcntl(fd, F_SETFL, O_APPEND) == 0, "F_SETFL O_APPEND");
	record(r, 'b');
	for (int i = 0; i < k; i++) {
		CHECK(lseek(fd, 0, SEEK_SET) == 0, "lseek");
		CHECK(write(fd, r, REC) == REC, "append %d", i);
	}
	CHECK(lseek(fd, 0, SEEK_CUR) == (off_t)REC * (k + 1), "appended to the end");
	/* Clear it through a dup (same description), write at 0. */
	d = dup(fd);
	CHECK(fcntl(d, F_SETFL, 0) == 0, "F_SETFL 0");
	record(r, 'c');
	CHECK(lseek(fd, 0, SEEK_SET) == 0, "lseek");
	CHECK(write(fd, r, REC) == REC, "overwrite");
	/* Set it again through the dup; the original fd appends. */
	CHECK(fcntl(d, F_SETFL, O_APPEND) == 0, "F_SETFL O_APPEND via dup");
	record(r, 'd');
	CHECK(lseek(fd, 0, SEEK_SET) == 0, "lseek");
	CHECK(write(fd, r, REC) == REC, "append via flag set on dup");
	CHECK(lseek(fd, 0, SEEK_END) == (off_t)REC * (k + 2), "size");
	for (int i = 0; i < k + 2; i++) {
		char want = i == 0 ? 'c' : i == k + 1 ? 'd' : 'b';

		record(r, want);
		CHECK(pread(fd, in, REC, (off_t)i * REC) == REC && memcmp(in, r, REC) == 0,
		      "record %d is not %c", i, want);
	}
	close(d);
	close(fd);
	printf("expect_appends=%d\n", k + 1);
	return failed;
}

/* ---- dup --------------------------------------------------------------- */

static long expect_io;

#define R(name, expr)                                                         \
	do {                                                                  \
		long long r_;                                                 \
		errno = 0;                                                    \
		r_ = (long long)(expr);                                       \
		printf("r.%s=%lld/%d\n", name, r_, r_ < 0 ? errno : 0);       \
	} while (0)
/* A call on a coordinated file: the shim must lock it exactly once. */
#define IO(name, expr)                                                        \
	do {                                                                  \
		expect_io++;                                                  \
		R(name, expr);                                                \
	} while (0)

static void print_file(const char *name, const char *path)
{
	char b[256];
	int fd = open(path, O_RDONLY);
	ssize_t n;

	expect_io++;
	n = pread(fd, b, sizeof(b) - 1, 0);
	b[n > 0 ? n : 0] = '\0';
	printf("content.%s=%s\n", name, b);
	close(fd);
}

static int m_dup(const char *f1, const char *f2, const char *f3)
{
	int a, b, c, d, e, f, x, y, p[2];
	char in[64] = { 0 };

	a = open(f1, O_RDWR | O_CREAT | O_TRUNC, 0644);
	CHECK(a >= 0, "open");
	IO("w_a", write(a, "AAAA", 4));
	R("dup", b = dup(a));
	IO("w_b", write(b, "BBBB", 4));
	R("pos_a1", lseek(a, 0, SEEK_CUR));
	R("dup2", c = dup2(a, 40));
	IO("w_c", write(c, "CCCC", 4));
	R("pos_b1", lseek(b, 0, SEEK_CUR));
	R("dup3", d = dup3(a, 41, O_CLOEXEC));
	IO("w_d", write(d, "DDDD", 4));
	R("pos_c1", lseek(c, 0, SEEK_CUR));
	R("dupfd", e = fcntl(a, F_DUPFD, 50));
	IO("w_e", write(e, "EEEE", 4));
	R("pos_d1", lseek(d, 0, SEEK_CUR));
	R("dupfd_cloexec", f = fcntl(a, F_DUPFD_CLOEXEC, 60));
	IO("w_f", write(f, "FFFF", 4));
	R("pos_e1", lseek(e, 0, SEEK_CUR));
	R("close_a", close(a));
	IO("w_b2", write(b, "GGGG", 4));
	R("pos_f1", lseek(f, 0, SEEK_CUR));
	R("seek_c", lseek(c, 0, SEEK_SET));
	IO("r_d", read(d, in, 28));
	printf("r.read_d=%s\n", in);
	R("pos_b2", lseek(b, 0, SEEK_CUR));
	IO("pw_e", pwrite(e, "HH", 2, 2));
	R("pos_b3", lseek(b, 0, SEEK_CUR));

	/* dup2 of a pipe onto a tracked fd: the fd is a pipe now. */
	x = open(f2, O_RDWR | O_CREAT | O_TRUNC, 0644);
	CHECK(x >= 0, "open");
	IO("w_x", write(x, "XXXX", 4));
	R("pipe", pipe(p));
	R("dup2_pipe_over_x", dup2(p[1], x));
	R("pw_x_pipe", pwrite(x, "y", 1, 0));          /* ESPIPE, not locked */
	R("w_x_pipe", write(x, "pipe", 4));
	memset(in, 0, sizeof(in));
	R("r_pipe", read(p[0], in, 4));
	printf("r.read_pipe=%s\n", in);

	/* dup2 of another file onto it: the fd follows that file now. */
	y = open(f3, O_RDWR | O_CREAT | O_TRUNC, 0644);
	CHECK(y >= 0, "open");
	IO("w_y", write(y, "YYYY", 4));
	R("dup2_y_over_x", dup2(y, x));
	IO("w_x_y", write(x, "ZZ", 2));
	R("pos_y", lseek(y, 0, SEEK_CUR));
	IO("pw_x_y", pwrite(x, "QQ", 2, 0));
	R("close_y", close(y));
	IO("w_x_y2", write(x, "!", 1));
	/* dup2 onto itself changes nothing. */
	R("dup2_self", dup2(x, x));
	IO("w_x_self", write(x, "?", 1));

	R("close_b", close(b));
	R("close_c", close(c));
	R("close_d", close(d));
	R("close_e", close(e));
	R("close_f", close(f));
	R("close_x", close(x));
	R("close_p0", close(p[0]));
	R("close_p1", close(p[1]));
	print_file("f1", f1);
	print_file("f2", f2);
	print_file("f3", f3);
	printf("expect_io=%ld\n", expect_io);
	return failed;
}

/* ---- closerange --------------------------------------------------------- */

/* n1 and n2 were just closed: a new pipe gets both numbers, and calls on
 * them behave as on a pipe (not locked as the file they were); with
 * check_data, what is read back must be what was written. */
static void check_pipe_reuses(int n1, int n2, int check_data)
{
	int p[2];
	char in[8];

	CHECK(pipe(p) == 0 && p[0] == n1 && p[1] == n2, "pipe reuses %d %d (got %d %d)",
	      n1, n2, p[0], p[1]);
	errno = 0;
	CHECK(pwrite(p[1], "x", 1, 0) == -1 && errno == ESPIPE, "pwrite on the reused number");
	errno = 0;
	CHECK(pread(p[0], in, 1, 0) == -1 && errno == ESPIPE, "pread on the reused number");
	CHECK(write(p[1], "abc", 3) == 3, "write pipe");
	CHECK(read(p[0], in, 3) == 3 && (!check_data || memcmp(in, "abc", 3) == 0),
	      "read pipe");
	close(p[0]);
	close(p[1]);
}

static int m_closerange(const char *file)
{
	int n1, n2, k;
	char in[8];

	/* Fds inherited from the runner would break the numbering below; they
	 * were never seen by the shim, so close them behind its back. */
	syscall(SYS_close_range, 3U, ~0U, 0);

	/* close_range */
	n1 = open(file, O_RDWR | O_CREAT | O_TRUNC, 0644);
	n2 = open(file, O_RDWR);
	CHECK(n1 >= 0 && n2 == n1 + 1, "two consecutive fds (%d %d)", n1, n2);
	CHECK(pwrite(n1, "aaaa", 4, 0) == 4, "pwrite n1");
	CHECK(pwrite(n2, "bbbb", 4, 4) == 4, "pwrite n2");
	CHECK(close_range((unsigned)n1, (unsigned)n2, 0) == 0, "close_range");
	check_pipe_reuses(n1, n2, 1);

	/* closefrom */
	n1 = open(file, O_RDWR);
	n2 = open(file, O_RDWR);
	CHECK(n1 >= 0 && n2 == n1 + 1, "two consecutive fds (%d %d)", n1, n2);
	CHECK(pwrite(n1, "cccc", 4, 8) == 4, "pwrite n1");
	CHECK(pwrite(n2, "dddd", 4, 12) == 4, "pwrite n2");
	closefrom(n1);
	errno = 0;
	CHECK(fcntl(n1, F_GETFD) == -1 && errno == EBADF, "closefrom closed n1");
	check_pipe_reuses(n1, n2, 0);

	/* CLOSE_RANGE_CLOEXEC closes nothing: the fd stays coordinated. */
	k = open(file, O_RDWR);
	CHECK(close_range((unsigned)k, (unsigned)k, CLOSE_RANGE_CLOEXEC) == 0, "cloexec");
	CHECK(pwrite(k, "eeee", 4, 16) == 4, "pwrite after CLOSE_RANGE_CLOEXEC");
	/* A failing close_range forgets nothing either. */
	errno = 0;
	CHECK(close_range((unsigned)k, (unsigned)k, 0x40000) == -1 && errno == EINVAL,
	      "bad flags");
	CHECK(pwrite(k, "ffff", 4, 20) == 4, "pwrite after a failed close_range");
	CHECK(pread(k, in, 4, 0) == 4 && memcmp(in, "aaaa", 4) == 0, "content");
	close(k);
	printf("expect_io=7\n");
	return failed;
}

/* ---- stdout ------------------------------------------------------------ */

struct outw {
	char letter;
	int nrec;
};

static void *stdout_writer(void *arg)
{
	struct outw *w = arg;
	char r[REC];

	record(r, w->letter);
	for (int i = 0; i < w->nrec; i++)
		if (write(1, r, REC) != REC) {
			fprintf(stderr, "FAIL write to stdout: %s\n", strerror(errno));
			failed = 1;
		}
	return NULL;
}

static int m_stdout(int nt, int nr)
{
	pthread_t th[26];
	struct outw w[26];

	if (nt < 1 || nt > 26)
		return 2;
	for (int i = 0; i < nt; i++) {
		w[i].letter = (char)('a' + i);
		w[i].nrec = nr;
		pthread_create(&th[i], NULL, stdout_writer, &w[i]);
	}
	for (int i = 0; i < nt; i++)
		pthread_join(th[i], NULL);
	return failed;
}

/* ---- pid --------------------------------------------------------------- */

static int m_pid(const char *file, int n)
{
	printf("pid=%ld\n", (long)getpid());
	return m_write(file, n);
}

/* ---- forked ------------------------------------------------------------ */

static int m_forked(const char *file, int n, const char *how)
{
	int inherit = strcmp(how, "inherit") == 0, fd = -1, st, bad = 0;
	char r[REC];

	if (inherit && (fd = open(file, O_RDWR | O_CREAT, 0644)) < 0)
		return 2;
	record(r, 'f');
	for (int i = 0; i < n; i++) {
		pid_t p = fork();

		if (p == 0) {
			int cfd = inherit ? fd : open(file, O_RDWR | O_CREAT, 0644);

			exit(cfd < 0 || pwrite(cfd, r, REC, (off_t)i * REC) != REC);
		}
		if (p < 0)
			return 2;
	}
	while (wait(&st) > 0)
		bad += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
	printf("children_failed=%d\n", bad);
	return bad != 0;
}

int main(int argc, char **argv)
{
	int rc = 2;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 4 && strcmp(argv[1], "passthrough") == 0)
		rc = m_passthrough(argv[2], atoi(argv[3]));
	else if (argc >= 5 && strcmp(argv[1], "twoopen") == 0)
		rc = m_twoopen(argv[2], argv[3], atoi(argv[4]));
	else if (argc >= 4 && strcmp(argv[1], "holdlock") == 0)
		rc = m_holdlock(argv[2], argv[3]);
	else if (argc >= 4 && strcmp(argv[1], "write") == 0)
		rc = m_write(argv[2], atoi(argv[3]));
	else if (argc >= 5 && strcmp(argv[1], "append") == 0)
		rc = m_append(argv[2], atoi(argv[3]), atoi(argv[4]));
	else if (argc >= 4 && strcmp(argv[1], "setfl") == 0)
		rc = m_setfl(argv[2], atoi(argv[3]));
	else if (argc >= 5 && strcmp(argv[1], "dup") == 0)
		rc = m_dup(argv[2], argv[3], argv[4]);
	else if (argc >= 3 && strcmp(argv[1], "closerange") == 0)
		rc = m_closerange(argv[2]);
	else if (argc >= 4 && strcmp(argv[1], "stdout") == 0)
		rc = m_stdout(atoi(argv[2]), atoi(argv[3]));
	else if (argc >= 4 && strcmp(argv[1], "pid") == 0)
		rc = m_pid(argv[2], atoi(argv[3]));
	else if (argc >= 5 && strcmp(argv[1], "forked") == 0)
		rc = m_forked(argv[2], atoi(argv[3]), argv[4]);
	else
		fprintf(stderr, "usage: fd_probe MODE ARGS (see the source)\n");
	if (rc == 0 && failed)
		rc = 1;
	return rc;
}
