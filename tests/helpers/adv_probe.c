/*
 * adv_probe: small building blocks for tests/test_adversary.c, which
 * attacks the node table the way an adversary would.  Each mode prints
 * one line of "key=N" pairs ending in "verdict=DONE".
 *
 *   adv_probe w FILE LEN SECONDS
 *       pwrite LEN bytes of one value (1, 2, 3, ...) at 0 for SECONDS.
 *   adv_probe r FILE LEN SECONDS
 *       pread [0, LEN) for SECONDS; a read whose bytes differ is torn.
 *   adv_probe exitwait FILE LEN RUN_MS HOLD_MS
 *       A thread writes LEN-byte blocks at 0 without pause; the main
 *       thread exits after RUN_MS, and stdio's flush at exit (after every
 *       library destructor) then takes HOLD_MS: a program whose stdout is
 *       a slow pipe.  The writer thread keeps writing meanwhile, and
 *       stops (between writes) before the process ends.
 *   adv_probe rawfork FILE LEN SECONDS [libc]
 *       Writes once (a grant in the cache), then forks with
 *       syscall(SYS_fork) (libc: fork()); the parent keeps writing LEN
 *       blocks at 0, the child reads them and counts tears.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "probe.h"

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int open_rw(const char *f)
{
	int fd = open(f, O_RDWR | O_CREAT, 0600);

	if (fd < 0) {
		printf("open %s: %s\nverdict=SETUP\n", f, strerror(errno));
		exit(2);
	}
	return fd;
}

static char *block(size_t len)
{
	char *b = malloc(len);

	if (!b)
		exit(2);
	return b;
}

static long long write_loop(int fd, size_t len, uint64_t until, int val0)
{
	char *b = block(len);
	long long n = 0;

	for (int v = val0; !until || now_ns() < until; v = v % 250 + 1) {
		memset(b, v, len);
		if (pwrite(fd, b, len, 0) != (ssize_t)len)
			break;
		n++;
	}
	free(b);
	return n;
}

static int uniform(const char *b, size_t len)
{
	for (size_t i = 1; i < len; i++)
		if (b[i] != b[0])
			return 0;
	return 1;
}

static void read_loop(int fd, size_t len, uint64_t until, long long *reads, long long *torn)
{
	char *b = block(len);

	*reads = *torn = 0;
	while (now_ns() < until) {
		if (pread(fd, b, len, 0) != (ssize_t)len)
			continue;
		++*reads;
		*torn += !uniform(b, len);
	}
	free(b);
}

/* ---- exitwait ---- */

static int ew_fd;
static size_t ew_len;
static _Atomic long long ew_writes;
static _Atomic int ew_stop, ew_stopped;
static long ew_hold_ms;

static void *ew_writer(void *a)
{
	char *b = block(ew_len);

	(void)a;
	for (int v = 100; !ew_stop; v = v % 250 + 1) {
		memset(b, v, ew_len);
		if (pwrite(ew_fd, b, ew_len, 0) == (ssize_t)ew_len)
			ew_writes++;
	}
	ew_stopped = 1;
	for (;;)
		pause();
	return NULL;
}

static ssize_t slow_cookie_write(void *c, const char *buf, size_t n)
{
	(void)c;
	(void)buf;
	sleep_ms(ew_hold_ms);
	/* Not killed inside a write by exit_group: a write cut short
	 * leaves a mixed block that no lock could have prevented. */
	ew_stop = 1;
	while (!ew_stopped)
		sleep_ms(1);
	return (ssize_t)n;
}

static int exitwait(const char *file, size_t len, long run_ms, long hold_ms)
{
	cookie_io_functions_t io = { .write = slow_cookie_write };
	FILE *slow = fopencookie(NULL, "w", io);
	pthread_t t;

	ew_fd = open_rw(file);
	ew_len = len;
	ew_hold_ms = hold_ms;
	setvbuf(slow, NULL, _IOFBF, 4096);
	fputs("pending", slow);	/* flushed by exit, after the destructors */
	pthread_create(&t, NULL, ew_writer, NULL);
	sleep_ms(run_ms);
	printf("writes=%lld verdict=DONE\n", (long long)ew_writes);
	fflush(stdout);
	exit(0);
}

/* ---- rawfork ---- */

static int rawfork(const char *file, size_t len, double secs, int libc)
{
	int fd = open_rw(file);
	int p[2];
	pid_t pid;
	char *b = block(len);

	memset(b, 7, len);
	if (pwrite(fd, b, len, 0) != (ssize_t)len)
		return 2;
	if (pipe(p) < 0)
		return 2;
	pid = libc ? fork() : (pid_t)syscall(SYS_fork);
	if (pid == 0) {
		long long reads, torn;

		close(p[0]);
		read_loop(fd, len, now_ns() + (uint64_t)(secs * 1e9), &reads, &torn);
		dprintf(p[1], "child_reads=%lld child_torn=%lld", reads, torn);
		_exit(0);
	}
	close(p[1]);
	{
		long long w = write_loop(fd, len, now_ns() + (uint64_t)(secs * 1e9), 1);
		char out[200] = "";
		ssize_t n;
		int st;

		n = read(p[0], out, sizeof(out) - 1);
		out[n > 0 ? n : 0] = '\0';
		waitpid(pid, &st, 0);
		printf("writes=%lld %s shim=%d verdict=DONE\n", w, out, shim_loaded());
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *m = argc > 2 ? argv[1] : "";
	const char *f = argc > 2 ? argv[2] : "";

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(m, "w") && argc == 5) {
		int fd = open_rw(f);
		long long n = write_loop(fd, strtoull(argv[3], 0, 0),
					 now_ns() + (uint64_t)(atof(argv[4]) * 1e9), 1);

		printf("writes=%lld shim=%d verdict=DONE\n", n, shim_loaded());
		return 0;
	}
	if (!strcmp(m, "r") && argc == 5) {
		int fd = open_rw(f);
		long long reads, torn;

		read_loop(fd, strtoull(argv[3], 0, 0), now_ns() + (uint64_t)(atof(argv[4]) * 1e9),
			  &reads, &torn);
		printf("reads=%lld torn=%lld shim=%d verdict=DONE\n", reads, torn, shim_loaded());
		return 0;
	}
	if (!strcmp(m, "exitwait") && argc == 6)
		return exitwait(f, strtoull(argv[3], 0, 0), atol(argv[4]), atol(argv[5]));
	if (!strcmp(m, "rawfork") && argc >= 5)
		return rawfork(f, strtoull(argv[3], 0, 0), atof(argv[4]),
			       argc > 5 && !strcmp(argv[5], "libc"));
	fprintf(stderr, "usage: see the comment at the top of adv_probe.c\n");
	return 2;
}
