/*
 * cov_probe: does I/O the shim sees but cannot coordinate, one kind per
 * subcommand, for tests/test_coverage.c, which reads the uncovered_*
 * counters from the RANGESHIM_STATS reports.
 *
 *   cov_probe plain FILE      pread/pwrite only (the control: all zero)
 *   cov_probe controls FILE   the same calls on what is not coordinated
 *                             (/dev/null, /proc, pipes, private and
 *                             read-only mappings): all zero
 *   cov_probe mmap FILE       two writable MAP_SHARED mappings (mmap, mmap64)
 *   cov_probe mmap_locked FILE  the same, made as SQLite makes its WAL
 *                             index: under an fcntl lock of the program's
 *                             own, held through the mapping's descriptor
 *   cov_probe stdio FILE      fopen, fopen64, freopen, fdopen: four streams
 *   cov_probe splice FILE     three splices from FILE into a pipe
 *   cov_probe posix_aio FILE  aio_write, aio_read, lio_listio(w, NOP, r): 4
 *   cov_probe uring FILE      one ring through syscall() (closed) and, on
 *                             x86-64, one made with the instruction itself
 *                             (and mapped) and one through syscall(), both
 *                             left open: 3
 *   cov_probe aio FILE        io_setup through syscall() and a write through
 *                             io_submit; on x86-64 one more context made
 *                             with the instruction; both left open: 2 (1
 *                             elsewhere)
 *   cov_probe exit KIND FILE  a forked child pwrites FILE and leaves with
 *                             KIND: _exit, _Exit or exit_group; prints child=PID
 *   cov_probe vfork FILE      a vfork child leaves with _exit; child=PID
 *   cov_probe forks N FILE    N forked children leave with _exit while a
 *                             thread keeps pwriting (locks held at fork)
 *
 * Each prints "skip=WHY" when the kernel refuses what it needs, and then
 * "done shim=0|1"; the exit status is 0, or 1 after a FAIL line.
 */
#include <aio.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/aio_abi.h>
#include <linux/io_uring.h>

#include "probe.h"

static int failed;
static char block[4096];

static int open_file(const char *path)
{
	int fd = open(path, O_RDWR | O_CREAT, 0600);

	CHECK(fd >= 0, "open %s", path);
	CHECK(pwrite(fd, block, sizeof(block), 0) == (ssize_t)sizeof(block), "pwrite");
	CHECK(pwrite(fd, block, sizeof(block), 16384) == (ssize_t)sizeof(block), "pwrite");
	return fd;
}

/* The system call made with the instruction, as liburing does. */
static long insn_syscall(long nr, long a, long b)
{
#if defined(__x86_64__)
	long r;

	__asm__ __volatile__("syscall" : "=a"(r) : "a"(nr), "D"(a), "S"(b)
			     : "rcx", "r11", "memory");
	return r;
#else
	(void)nr, (void)a, (void)b;
	return -ENOSYS;
#endif
}

static void plain(const char *path)
{
	char buf[4096];
	int fd = open_file(path);

	for (int i = 0; i < 8; i++)
		CHECK(pread(fd, buf, sizeof(buf), 4096 * (i % 4)) >= 0, "pread");
	close(fd);
}

static void controls(const char *path)
{
	int fd = open_file(path), nul = open("/dev/null", O_RDWR), p[2];
	struct aiocb cb = { 0 };
	const struct aiocb *list[1] = { &cb };
	FILE *f;
	void *m;

	/* Mappings of a coordinated file that cannot store into it. */
	m = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
	CHECK(m != MAP_FAILED, "mmap shared read-only");
	munmap(m, 4096);
	m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	CHECK(m != MAP_FAILED, "mmap private");
	munmap(m, 4096);
	m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(m != MAP_FAILED, "mmap anonymous");
	munmap(m, 4096);
	/* Streams, splices and AIO on files that are not coordinated. */
	f = fopen("/proc/self/status", "r");
	CHECK(f != NULL, "fopen /proc/self/status");
	if (f)
		fclose(f);
	CHECK(pipe(p) == 0, "pipe");
	CHECK(write(p[1], block, 100) == 100, "write pipe");
	CHECK(splice(p[0], NULL, nul, NULL, 100, 0) == 100, "splice pipe to /dev/null");
	cb.aio_fildes = nul;
	cb.aio_buf = block;
	cb.aio_nbytes = 100;
	cb.aio_lio_opcode = LIO_WRITE;
	CHECK(aio_write(&cb) == 0, "aio_write /dev/null");
	CHECK(aio_suspend(list, 1, NULL) == 0 || errno == EINTR, "aio_suspend");
	CHECK(aio_return(&cb) == 100, "aio_return");
	/* A failed fopen makes no stream. */
	CHECK(fopen("/nonexistent/x", "r") == NULL, "fopen nonexistent");
	close(p[0]);
	close(p[1]);
	close(nul);
	close(fd);
}

static void maps_on(int fd)
{
	char *a = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	char *b = mmap64(NULL, 4096, PROT_WRITE, MAP_SHARED, fd, 16384);

	CHECK(a != MAP_FAILED && b != MAP_FAILED, "mmap");
	if (a != MAP_FAILED) {
		a[0] = 'x';
		munmap(a, 4096);
	}
	if (b != MAP_FAILED)
		munmap(b, 4096);
	close(fd);
}

static void maps(const char *path)
{
	maps_on(open_file(path));
}

static void maps_locked(const char *path)
{
	int fd = open_file(path);
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 128, .l_len = 1 };

	CHECK(fcntl(fd, F_SETLK, &fl) == 0, "fcntl F_SETLK");
	maps_on(fd);
}

static void streams(const char *path)
{
	FILE *a, *b, *c, *d;
	char buf[16];
	int fd;

	close(open_file(path));
	a = fopen(path, "r+");
	CHECK(a != NULL, "fopen");
	CHECK(a && fwrite("abc", 1, 3, a) == 3, "fwrite");
	b = fopen64(path, "r");
	CHECK(b != NULL, "fopen64");
	CHECK(b && fread(buf, 1, sizeof(buf), b) > 0, "fread");
	/* freopen keeps b's number and points it at the file again. */
	c = freopen(path, "r", b);
	CHECK(c != NULL, "freopen");
	fd = open(path, O_RDONLY);
	d = fd >= 0 ? fdopen(fd, "r") : NULL;
	CHECK(d != NULL, "fdopen");
	if (a)
		fclose(a);
	if (c)
		fclose(c);
	if (d)
		fclose(d);
}

static void splices(const char *path)
{
	int fd = open_file(path), p[2];
	char buf[4096];

	CHECK(pipe(p) == 0, "pipe");
	for (int i = 0; i < 3; i++) {
		loff_t off = 0;

		CHECK(splice(fd, &off, p[1], NULL, 1000, 0) == 1000, "splice");
		CHECK(read(p[0], buf, sizeof(buf)) == 1000, "read pipe");
	}
	close(p[0]);
	close(p[1]);
	close(fd);
}

static void wait_aio(struct aiocb *cb, ssize_t want)
{
	const struct aiocb *list[1] = { cb };

	while (aio_error(cb) == EINPROGRESS)
		aio_suspend(list, 1, NULL);
	CHECK(aio_return(cb) == want, "aio_return");
}

static void posix_aio(const char *path)
{
	int fd = open_file(path);
	char buf[4096];
	struct aiocb w = { 0 }, r = { 0 }, nop = { 0 };
	struct aiocb *list[3] = { &w, &nop, &r };

	w.aio_fildes = r.aio_fildes = nop.aio_fildes = fd;
	w.aio_buf = block;
	r.aio_buf = buf;
	w.aio_nbytes = r.aio_nbytes = 4096;
	w.aio_lio_opcode = LIO_WRITE;
	r.aio_lio_opcode = LIO_READ;
	nop.aio_lio_opcode = LIO_NOP;
	CHECK(aio_write(&w) == 0, "aio_write");
	wait_aio(&w, 4096);
	CHECK(aio_read(&r) == 0, "aio_read");
	wait_aio(&r, 4096);
	CHECK(lio_listio(LIO_WAIT, list, 3, NULL) == 0, "lio_listio");
	close(fd);
}

static void uring(void)
{
	struct io_uring_params p;
	long a, b, c;

	memset(&p, 0, sizeof(p));
	a = syscall(SYS_io_uring_setup, 4, &p);
	if (a < 0) {
		printf("skip=io_uring_setup: %s\n", strerror(errno));
		return;
	}
	close((int)a);
	memset(&p, 0, sizeof(p));
	b = syscall(SYS_io_uring_setup, 4, &p);
	CHECK(b >= 0, "io_uring_setup");
	memset(&p, 0, sizeof(p));
	c = insn_syscall(SYS_io_uring_setup, 4, (long)&p);
	if (c == -ENOSYS)
		printf("skip=no inline system call on this architecture\n");
	else
		CHECK(c >= 0, "io_uring_setup (instruction): %ld", c);
	/* Its submission ring mapped, as liburing maps it: the report looks
	 * for ring descriptors when the maps show a ring. */
	if (c >= 0)
		CHECK(mmap(NULL, p.sq_off.array + p.sq_entries * sizeof(unsigned),
			   PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, (int)c,
			   IORING_OFF_SQ_RING) != MAP_FAILED, "mmap of the ring");
	/* b and c stay open: the report finds c and knows b. */
}

static void linux_aio(const char *path)
{
	aio_context_t ctx = 0, ctx2 = 0;
	struct iocb cb, *cbs[1] = { &cb };
	struct io_event ev;
	int fd = open_file(path);
	long r;

	if (syscall(SYS_io_setup, 8, &ctx) < 0) {
		printf("skip=io_setup: %s\n", strerror(errno));
		close(fd);
		return;
	}
	memset(&cb, 0, sizeof(cb));
	cb.aio_fildes = (unsigned)fd;
	cb.aio_lio_opcode = IOCB_CMD_PWRITE;
	cb.aio_buf = (unsigned long)block;
	cb.aio_nbytes = 4096;
	CHECK(syscall(SYS_io_submit, ctx, 1, cbs) == 1, "io_submit");
	CHECK(syscall(SYS_io_getevents, ctx, 1, 1, &ev, NULL) == 1, "io_getevents");
	/* ctx stays too: destroyed, its address could come back for ctx2. */
	r = insn_syscall(SYS_io_setup, 8, (long)&ctx2);
	if (r == -ENOSYS)
		printf("skip=no inline system call on this architecture\n");
	else
		CHECK(r == 0, "io_setup (instruction): %ld", r);
	close(fd);
	/* ctx2 stays: the report finds its ring in /proc/self/maps. */
}

static void child_exit(const char *kind, const char *path)
{
	int fd = open_file(path), st;
	pid_t pid = fork();

	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		pwrite(fd, block, 100, 0);
		if (strcmp(kind, "_Exit") == 0)
			_Exit(0);
		if (strcmp(kind, "exit_group") == 0)
			syscall(SYS_exit_group, 0);
		_exit(0);
	}
	printf("child=%d\n", (int)pid);
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "child");
	close(fd);
}

static void vfork_exit(const char *path)
{
	int fd = open_file(path), st;
	pid_t pid = vfork();

	if (pid == 0)
		_exit(0);
	CHECK(pid > 0, "vfork");
	printf("child=%d\n", (int)pid);
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "child");
	close(fd);
}

static atomic_int stop;
static int hammer_fd;

static void *hammer(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop))
		pwrite(hammer_fd, block, sizeof(block), 0);
	return NULL;
}

static void forks(int n, const char *path)
{
	pthread_t t;
	int st, bad = 0;

	hammer_fd = open_file(path);
	pthread_create(&t, NULL, hammer, NULL);
	for (int i = 0; i < n; i++) {
		pid_t pid = fork();

		if (pid == 0) {
			pwrite(hammer_fd, block, 10, 8192);
			_exit(0);
		}
		if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
			bad++;
	}
	atomic_store(&stop, 1);
	pthread_join(t, NULL);
	CHECK(bad == 0, "%d children failed", bad);
	printf("children=%d\n", n);
	close(hammer_fd);
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : "";
	const char *path = argv[argc - 1];

	setvbuf(stdout, NULL, _IOLBF, 0);
	memset(block, 'b', sizeof(block));
	if (argc < 3) {
		fprintf(stderr, "usage: cov_probe COMMAND [ARG] FILE\n");
		return 2;
	}
	if (strcmp(cmd, "plain") == 0)
		plain(path);
	else if (strcmp(cmd, "controls") == 0)
		controls(path);
	else if (strcmp(cmd, "mmap_locked") == 0)
		maps_locked(path);
	else if (strcmp(cmd, "mmap") == 0)
		maps(path);
	else if (strcmp(cmd, "stdio") == 0)
		streams(path);
	else if (strcmp(cmd, "splice") == 0)
		splices(path);
	else if (strcmp(cmd, "posix_aio") == 0)
		posix_aio(path);
	else if (strcmp(cmd, "uring") == 0)
		uring();
	else if (strcmp(cmd, "aio") == 0)
		linux_aio(path);
	else if (strcmp(cmd, "exit") == 0 && argc == 4)
		child_exit(argv[2], path);
	else if (strcmp(cmd, "vfork") == 0)
		vfork_exit(path);
	else if (strcmp(cmd, "forks") == 0 && argc == 4)
		forks(atoi(argv[2]), path);
	else {
		fprintf(stderr, "cov_probe: unknown command %s\n", cmd);
		return 2;
	}
	printf("done shim=%d\n", shim_loaded());
	return failed;
}
