/*
 * append_probe MODE PATH MS STOP: appends attacked from the sides where an
 * appender's end-of-file hint could go wrong (iolock.h, rs_ap_hint), for
 * test_append.c, which runs each mode without the shim (the control: it
 * must tear) and with it (nothing may tear).
 *
 * Every mode appends 64 KiB records, each one byte value throughout, and
 * has readers pread 128 KiB across end of file: a read is torn when it
 * ends inside a record (it saw part of an append) or a record in it mixes
 * two values.  Holes read as zeros, which count as whole.  The file is
 * cut to 0 every 20 ms, so that it stays small and every hint goes stale.
 * Runs MS milliseconds or until STOP torn reads (0: never stops early);
 * prints "reads=R torn=T writes=W bad_results=B".
 *
 *   trunc_proc  the truncations come from another process (a child with
 *               its own descriptor): only the node grant it takes, and our
 *               re-acquisition after it, tell the appenders.
 *   fork        the main thread appends, then forks a child that appends
 *               at once (with the hint it inherited) and reads across end
 *               of file, while the parent truncates to 0 right after the
 *               fork.  The parent's threads append and read throughout.
 *   huge        appenders alternate records with write()s asking for
 *               3 GiB from a buffer of which only the first 64 KiB is
 *               mapped: the kernel writes 64 KiB and returns that (a hint
 *               grown by the requested length would be past end of file),
 *               and with nothing mapped it fails with EFAULT.  A result
 *               that differs from that is a bad result.
 *   rwf         half the appenders use pwritev2(RWF_APPEND) on a
 *               descriptor without O_APPEND, and one pwritev2 with
 *               RWF_NOAPPEND writes records at offset 0 of an O_APPEND
 *               descriptor, where the truncations leave the file's start.
 *   beyond      besides the appenders, a thread pwrites records one record
 *               past end of file (a hole before them).
 *   sharedfd    the usual multi-threaded logger: all four appenders
 *               write() through one O_APPEND descriptor (one open file
 *               description, whose offset lock appenders share:
 *               fdtable.h, rs_pos_lock), and besides the two readers a
 *               third reads across end of file through that same
 *               description at its file offset (lseek, then read), so
 *               that calls which must exclude the appenders from the
 *               offset meet them.
 *   fcntl       a thread toggles O_APPEND with fcntl(F_SETFL) on a
 *               descriptor that two threads write() through: each write
 *               lands at end of file or at the file offset (rewound to 0
 *               now and then), whichever the flag said when the kernel
 *               ran it; readers read across end of file and at offset 0.
 *   headreads   not a tearing rig: for test_append.c's count of lock
 *               waits (RANGESHIM_STATS).  The file starts with 8 KiB;
 *               two threads append 100-byte lines through their own
 *               O_APPEND descriptors while one reads the head, pread of
 *               4 KiB at 0, until it has read STOP times (MS only caps
 *               the run).  Appends never touch the head, so a reader
 *               that waits for them waits for locks wider than the
 *               appends (iolock.h, rs_fast_offset: tail_only).  A read
 *               whose bytes are not the first 4 KiB counts as torn.
 *               Run with the shim only: without it there are no locks to
 *               count; its control is a library whose flag is never set.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "probe.h"

#ifndef RWF_APPEND
#define RWF_APPEND 0x00000010
#endif
#ifndef RWF_NOAPPEND
#define RWF_NOAPPEND 0x00000020
#endif

#define REC (64 * 1024)
#define HUGE_LEN (3ull << 30)

static const char *path;
static _Atomic int stop;
static _Atomic long torn, reads, writes, bad_results;
static long stop_after;
static int mode_fork, mode_huge, mode_rwf, mode_beyond, mode_fcntl, mode_sharedfd;
static int mode_headreads;
static int shared_fd;

static void full_write(int fd, const void *b, size_t n)
{
	if (write(fd, b, n) != (ssize_t)n)
		abort();
	atomic_fetch_add(&writes, 1);
}

/* One read across end of file (or at offset 0): 1 if torn. */
static int check_once(int fd, unsigned char *b, int at_start)
{
	struct stat st;
	off_t off;
	ssize_t r;
	int bad;

	if (fstat(fd, &st) < 0)
		abort();
	if (at_start)
		off = 0;
	else if (st.st_size >= REC)
		off = st.st_size / REC * REC - REC / 2;
	else
		return 0;
	r = pread(fd, b, 2 * REC, off);
	if (r <= (at_start ? 0 : REC / 2))
		return 0;
	atomic_fetch_add(&reads, 1);
	bad = probe_records_torn(b, r, (long long)off, 2 * REC, REC);
	if (bad && getenv("APPEND_PROBE_DEBUG"))
		fprintf(stderr, "torn: off=%lld r=%zd size=%lld\n", (long long)off, r,
			(long long)st.st_size);
	return bad;
}

static void note_torn(int bad)
{
	if (bad && atomic_fetch_add(&torn, 1) + 1 >= stop_after && stop_after > 0)
		atomic_store(&stop, 1);
}

static void *reader(void *arg)
{
	int fd = open(path, O_RDONLY);
	unsigned char *b = malloc(2 * REC);
	long i = 0;

	(void)arg;
	if (fd < 0 || !b)
		abort();
	while (!atomic_load(&stop))
		note_torn(check_once(fd, b, mode_fcntl && i++ % 2));
	free(b);
	close(fd);
	return NULL;
}

/*
 * Reads at the shared description's file offset: lseek to the middle of
 * the last whole record, then read one record's length.  Where the read
 * starts is not known for sure (an append may move the offset to end of
 * file between our lseek and the read: the application's own race), but
 * either start is a multiple of half a record, and so is every end of
 * file that whole records leave.  So the read is checked in half records:
 * each one value throughout, and a short read ending on a half record.
 * An append that moves the offset between the shim's own lseek and the
 * read would let the read land where another append is under way.
 */
static void *offset_reader(void *arg)
{
	unsigned char *b = malloc(REC);

	(void)arg;
	if (!b)
		abort();
	while (!atomic_load(&stop)) {
		struct stat st;
		ssize_t r;

		if (fstat(shared_fd, &st) < 0)
			abort();
		if (st.st_size < REC)
			continue;
		if (lseek(shared_fd, st.st_size / REC * REC - REC / 2, SEEK_SET) < 0)
			abort();
		r = read(shared_fd, b, REC);
		if (r <= 0)
			continue;
		atomic_fetch_add(&reads, 1);
		note_torn(probe_records_torn(b, r, 0, REC, REC / 2));
	}
	free(b);
	return NULL;
}

static void *appender(void *arg)
{
	long id = (long)arg;
	int own = open(path, (mode_rwf && id % 2) ? O_WRONLY : O_WRONLY | O_APPEND);
	int fd = id < 2 || mode_fcntl || mode_sharedfd ? shared_fd : own;
	char *b = malloc(REC), *huge_buf = NULL;

	if (own < 0 || !b)
		abort();
	if (mode_huge) {
		/* Each thread its own: a buffer shared while written would
		 * tear records by itself. */
		huge_buf = mmap(NULL, HUGE_LEN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
				-1, 0);
		if (huge_buf == MAP_FAILED || mprotect(huge_buf, REC, PROT_READ | PROT_WRITE) < 0)
			abort();
	}
	for (long k = 0; !atomic_load(&stop); k++) {
		memset(b, (int)(1 + id * 40 + k % 40), REC);
		if (mode_rwf && id % 2) {
			struct iovec v = { b, REC };

			if (pwritev2(fd, &v, 1, k % 2 ? -1 : 0, RWF_APPEND) != REC)
				abort();
			atomic_fetch_add(&writes, 1);
		} else if (mode_rwf && id == 0 && k % 4 == 3) {
			struct iovec v = { b, REC };

			/* At offset 0 of the O_APPEND description. */
			if (pwritev2(fd, &v, 1, 0, RWF_NOAPPEND) != REC)
				abort();
			atomic_fetch_add(&writes, 1);
		} else if (mode_huge && k % 2) {
			ssize_t r;

			memset(huge_buf, (int)(1 + id * 40 + k % 40), REC);
			/* 3 GiB asked, 64 KiB mapped: a short write of 64 KiB. */
			r = write(fd, huge_buf, HUGE_LEN);
			if (r != REC)
				atomic_fetch_add(&bad_results, 1);
			/* Nothing mapped: EFAULT, nothing written. */
			errno = 0;
			r = write(fd, huge_buf + REC, HUGE_LEN - REC);
			if (r != -1 || errno != EFAULT)
				atomic_fetch_add(&bad_results, 1);
			atomic_fetch_add(&writes, 1);
		} else {
			full_write(fd, b, REC);
		}
	}
	if (huge_buf)
		munmap(huge_buf, HUGE_LEN);
	free(b);
	close(own);
	return NULL;
}

#define HEAD 8192
#define HEAD_READ 4096
#define LINE 100

/* headreads: the file's first HEAD bytes, which no append changes. */
static unsigned char head_byte(long i)
{
	return (unsigned char)('a' + i % 26);
}

/* headreads: 100-byte lines through an O_APPEND descriptor of its own. */
static void *line_appender(void *arg)
{
	int fd = open(path, O_WRONLY | O_APPEND);
	char b[LINE];

	if (fd < 0)
		abort();
	memset(b, 'A' + (int)(long)arg, LINE - 1);
	b[LINE - 1] = '\n';
	while (!atomic_load(&stop))
		full_write(fd, b, LINE);
	close(fd);
	return NULL;
}

/* headreads: STOP reads of the head, then stops the appenders. */
static void *head_reader(void *arg)
{
	int fd = open(path, O_RDONLY);
	unsigned char b[HEAD_READ];

	(void)arg;
	if (fd < 0)
		abort();
	while (!atomic_load(&stop) && atomic_load(&reads) < stop_after) {
		int bad = pread(fd, b, HEAD_READ, 0) != HEAD_READ;

		for (long i = 0; !bad && i < HEAD_READ; i++)
			bad = b[i] != head_byte(i);
		atomic_fetch_add(&reads, 1);
		if (bad)
			atomic_fetch_add(&torn, 1);
	}
	atomic_store(&stop, 1);
	close(fd);
	return NULL;
}

/* Records one record past end of file, leaving a hole. */
static void *beyond_writer(void *arg)
{
	int fd = open(path, O_RDWR);
	char *b = malloc(REC);

	(void)arg;
	if (fd < 0 || !b)
		abort();
	for (long k = 0; !atomic_load(&stop); k++) {
		struct stat st;

		memset(b, (int)(200 + k % 40), REC);
		if (fstat(fd, &st) < 0)
			abort();
		if (pwrite(fd, b, REC, (st.st_size + REC - 1) / REC * REC + REC) != REC)
			abort();
		atomic_fetch_add(&writes, 1);
		usleep(200);
	}
	free(b);
	close(fd);
	return NULL;
}

static void *toggler(void *arg)
{
	(void)arg;
	for (long k = 0; !atomic_load(&stop); k++) {
		if (fcntl(shared_fd, F_SETFL, k % 2 ? O_APPEND : 0) < 0)
			abort();
		if (k % 8 == 0)
			lseek(shared_fd, 0, SEEK_SET);
		usleep(50);
	}
	return NULL;
}

static void *truncator(void *arg)
{
	int fd = open(path, O_RDWR);

	(void)arg;
	if (fd < 0)
		abort();
	while (!atomic_load(&stop)) {
		usleep(20000);
		if (ftruncate(fd, 0) < 0)
			abort();
	}
	close(fd);
	return NULL;
}

/* The other process of trunc_proc: cuts the file until killed. */
static pid_t start_truncating_child(void)
{
	pid_t pid = fork();

	if (pid < 0)
		abort();
	if (pid == 0) {
		int fd = open(path, O_RDWR);

		if (fd < 0)
			_exit(3);
		for (;;) {
			usleep(5000);
			if (ftruncate(fd, 0) < 0)
				_exit(4);
		}
	}
	return pid;
}

/* fork: one round of append, fork, truncate; the child appends with the
 * hint it inherited and checks; its torn count is its exit status. */
static void fork_round(int fd, char *b, unsigned char *rb, long k)
{
	pid_t pid;
	int st;

	memset(b, (int)(161 + k % 40), REC);
	full_write(fd, b, REC);
	pid = fork();
	if (pid < 0)
		abort();
	if (pid == 0) {
		int t = 0;

		for (int i = 0; i < 3; i++) {
			memset(b, (int)(121 + i), REC);
			if (write(fd, b, REC) != REC)
				_exit(100);
			t += check_once(fd, rb, 0);
		}
		_exit(t);
	}
	if (ftruncate(fd, 0) < 0)
		abort();
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) >= 100)
		abort();
	atomic_fetch_add(&reads, 3);
	atomic_fetch_add(&writes, 3);
	for (int i = 0; i < WEXITSTATUS(st); i++)
		note_torn(1);
}

int main(int argc, char **argv)
{
	pthread_t t[10];
	int nt = 0, nappend = 4, in_truncator = 1;
	pid_t child = -1;
	double t0, ms;
	const char *m;

	if (argc < 5) {
		fprintf(stderr, "usage: append_probe "
			"trunc_proc|fork|huge|rwf|beyond|fcntl|sharedfd|headreads PATH MS STOP\n");
		return 2;
	}
	m = argv[1];
	path = argv[2];
	ms = atof(argv[3]);
	stop_after = atol(argv[4]);
	mode_fork = !strcmp(m, "fork");
	mode_huge = !strcmp(m, "huge");
	mode_rwf = !strcmp(m, "rwf");
	mode_beyond = !strcmp(m, "beyond");
	mode_fcntl = !strcmp(m, "fcntl");
	mode_sharedfd = !strcmp(m, "sharedfd");
	mode_headreads = !strcmp(m, "headreads");
	if (!mode_fork && !mode_huge && !mode_rwf && !mode_beyond && !mode_fcntl && !mode_sharedfd &&
	    !mode_headreads && strcmp(m, "trunc_proc") != 0) {
		fprintf(stderr, "append_probe: unknown mode %s\n", m);
		return 2;
	}
	shared_fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_APPEND, 0600);
	if (shared_fd < 0)
		abort();
	if (mode_headreads) {
		unsigned char h[HEAD];

		for (long i = 0; i < HEAD; i++)
			h[i] = head_byte(i);
		if (write(shared_fd, h, HEAD) != HEAD)
			abort();
		nappend = 0;
		in_truncator = 0;
		for (long i = 0; i < 2; i++)
			pthread_create(&t[nt++], NULL, line_appender, (void *)i);
		pthread_create(&t[nt++], NULL, head_reader, NULL);
	}
	if (!strcmp(m, "trunc_proc")) {
		child = start_truncating_child();
		in_truncator = 0;
	}
	if (mode_fork) {
		nappend = 2;
		in_truncator = 0;
	}
	if (mode_fcntl)
		nappend = 2;
	for (long i = 0; i < nappend; i++)
		pthread_create(&t[nt++], NULL, appender, (void *)i);
	for (long i = 0; i < 2 && !mode_headreads; i++)
		pthread_create(&t[nt++], NULL, reader, NULL);
	if (in_truncator)
		pthread_create(&t[nt++], NULL, truncator, NULL);
	if (mode_beyond)
		pthread_create(&t[nt++], NULL, beyond_writer, NULL);
	if (mode_fcntl)
		pthread_create(&t[nt++], NULL, toggler, NULL);
	if (mode_sharedfd)
		pthread_create(&t[nt++], NULL, offset_reader, NULL);
	t0 = probe_now();
	if (mode_fork) {
		int fd = open(path, O_WRONLY | O_APPEND);
		char *b = malloc(REC);
		unsigned char *rb = malloc(2 * REC);

		if (fd < 0 || !b || !rb)
			abort();
		for (long k = 0; !atomic_load(&stop) && (probe_now() - t0) * 1000 < ms; k++)
			fork_round(fd, b, rb, k);
		free(b);
		free(rb);
		close(fd);
	} else {
		while (!atomic_load(&stop) && (probe_now() - t0) * 1000 < ms)
			usleep(10000);
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < nt; i++)
		pthread_join(t[i], NULL);
	if (child > 0) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
	}
	close(shared_fd);
	unlink(path);
	printf("reads=%ld torn=%ld writes=%ld bad_results=%ld\n", atomic_load(&reads),
	       atomic_load(&torn), atomic_load(&writes), atomic_load(&bad_results));
	return 0;
}
