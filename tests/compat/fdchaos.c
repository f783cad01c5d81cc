/*
 * fdchaos: threads close, dup2 over and reopen descriptor numbers while
 * other threads do I/O on those very numbers.
 *
 *   fdchaos DIR [seconds=3] [io=4] [chaos=2]
 *
 * Eight fixed numbers (200..207) are the targets.  Chaos threads put on
 * them, at random: one of four regular files (through dup2, dup3, open +
 * dup2, F_DUPFD onto a freed number), a pipe, /dev/null or a directory; or
 * close them (close, close_range).  I/O threads pwrite, pread, write and
 * read (after lseek) 64 KiB blocks on random target numbers.
 *
 * What is verified:
 *   - every call returns a full transfer, or what the kernel can return
 *     for such a race: EBADF, ESPIPE, EISDIR, EAGAIN (the pipe), EINVAL
 *     (lseek on a pipe), 0 from /dev/null; anything else is counted;
 *   - every 64 KiB block of the four files is uniform afterwards;
 *   - afterwards the process is still sound: every target closed, a fresh
 *     file's writer/reader race runs to completion with no torn read
 *     (under RS_COMPAT_STRICT=1), and the number of open descriptors is
 *     what it was before the chaos;
 *   - no deadlock (a watchdog prints DEADLOCK when, after the run time,
 *     nothing moves for 30 s).
 */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "compat.h"

#define BLK (64 * 1024)
#define FSIZE (1 * MIB)
#define NFILES 4
#define NSLOT 8
#define SLOT0 200

static int base_fd[NFILES], pipe_fd[2], null_fd, dir_fd;
static _Atomic int stop;
static _Atomic long unexpected, ops, chaos_ops, ok_io, ebadf;
static char dir[4096];

/* Open descriptors below 1000: the shim keeps its own (the node table's
 * segment, opened on first use) at 1000 or above. */
static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.' && atoi(e->d_name) < 1000;
	closedir(d);
	return n - 1;	/* the directory's own fd */
}

static void judge(ssize_t r, size_t want, int is_read, const char *what, int slot)
{
	int e = errno;

	if (r == (ssize_t)want || (is_read && r == 0)) {
		atomic_fetch_add(&ok_io, 1);
		return;
	}
	if (r < 0 && e == EBADF) {
		atomic_fetch_add(&ebadf, 1);
		return;
	}
	if (r < 0 && (e == ESPIPE || e == EISDIR || e == EAGAIN || e == EINVAL))
		return;
	if (atomic_fetch_add(&unexpected, 1) < 10)
		fprintf(stderr, "fdchaos: %s on fd %d returned %zd (errno %d: %s)\n", what, slot, r,
			r < 0 ? e : 0, r < 0 ? strerror(e) : "short");
}

static void *io_thread(void *arg)
{
	long t = (long)arg;
	unsigned char *b = xalloc(BLK), *r = xalloc(BLK);
	uint64_t s = 0xabcdef + (uint64_t)t;

	memset(b, 1 + (int)t, BLK);
	while (!atomic_load(&stop)) {
		int slot = SLOT0 + (int)(rnd(&s) % NSLOT);
		off_t off = (off_t)(rnd(&s) % (FSIZE / BLK)) * BLK;

		switch (rnd(&s) % 4) {
		case 0:
			judge(pwrite(slot, b, BLK, off), BLK, 0, "pwrite", slot);
			break;
		case 1:
			judge(pread(slot, r, BLK, off), BLK, 1, "pread", slot);
			break;
		case 2:
			if (lseek(slot, off, SEEK_SET) < 0 && errno != EBADF && errno != ESPIPE) {
				judge(-1, BLK, 0, "lseek", slot);
				break;
			}
			/* The offset may be moved by another thread meanwhile; at
			 * most the write lands elsewhere, or short at the end. */
			{
				ssize_t w = write(slot, b, BLK);

				if (w > 0 && w < BLK)
					w = BLK;	/* a pipe with room for less */
				judge(w, BLK, 0, "write", slot);
			}
			break;
		default:
			if (lseek(slot, off, SEEK_SET) < 0 && errno != EBADF && errno != ESPIPE) {
				judge(-1, BLK, 1, "lseek", slot);
				break;
			}
			{
				ssize_t g = read(slot, r, BLK);

				if (g > 0 && g < BLK)
					g = 0;	/* a pipe, or a moved offset near the end */
				judge(g, BLK, 1, "read", slot);
			}
			break;
		}
		atomic_fetch_add(&ops, 1);
	}
	free(b);
	free(r);
	return NULL;
}

static void *chaos_thread(void *arg)
{
	uint64_t s = 0x5eed + (uint64_t)(long)arg;
	char path[4200];

	while (!atomic_load(&stop)) {
		int slot = SLOT0 + (int)(rnd(&s) % NSLOT);
		int src, tmp;

		switch (rnd(&s) % 10) {
		case 0:
			close(slot);
			break;
		case 1:
			close_range((unsigned)slot, (unsigned)slot, 0);
			break;
		case 2:
		case 3:
			dup2(base_fd[rnd(&s) % NFILES], slot);
			break;
		case 4:
			dup3(base_fd[rnd(&s) % NFILES], slot, O_CLOEXEC);
			break;
		case 5:
			snprintf(path, sizeof(path), "%s/f%d", dir, (int)(rnd(&s) % NFILES));
			tmp = open(path, O_RDWR);
			if (tmp >= 0) {
				dup2(tmp, slot);
				close(tmp);
			}
			break;
		case 6:
			/* F_DUPFD onto the number just freed (if nobody beats us) */
			close(slot);
			tmp = fcntl(base_fd[rnd(&s) % NFILES], F_DUPFD, slot);
			if (tmp >= 0 && tmp != slot)
				close(tmp);
			break;
		case 7:
			src = rnd(&s) & 1 ? pipe_fd[1] : pipe_fd[0];
			dup2(src, slot);
			break;
		case 8:
			dup2(null_fd, slot);
			break;
		default:
			dup2(dir_fd, slot);
			break;
		}
		atomic_fetch_add(&chaos_ops, 1);
	}
	return NULL;
}

/* Progress for the watchdog: calls made by any thread, and the checks
 * after the chaos. */
static _Atomic long phase;
static long progress(void)
{
	return atomic_load(&ops) + atomic_load(&chaos_ops) + atomic_load(&phase);
}

/* A writer and a reader on a fresh file for a moment: the shim's state
 * must have survived the chaos. */
static _Atomic int race_stop;
static int race_fd;

static void *race_writer(void *arg)
{
	unsigned char *b = xalloc(256 * 1024);

	(void)arg;
	for (int i = 0; !atomic_load(&race_stop); i++) {
		memset(b, i & 1 ? 0x11 : 0x22, 256 * 1024);
		if (pwrite_full(race_fd, b, 256 * 1024, 0) < 0)
			die("race pwrite");
	}
	free(b);
	return NULL;
}

int main(int argc, char **argv)
{
	double seconds;
	int nio, nchaos, fds_before, fds_after;
	long mixed = 0, torn = 0, reads = 0;
	pthread_t th[64], rw;
	struct watchdog_arg wd = { "fdchaos", 0, progress };
	char path[4200];
	unsigned char *b;

	if (argc < 2)
		die("usage: fdchaos DIR [seconds=S] [io=N] [chaos=N]");
	snprintf(dir, sizeof(dir), "%s", argv[1]);
	seconds = atof(arg_str(argc, argv, "seconds", "3"));
	nio = (int)arg_num(argc, argv, "io", 4);
	nchaos = (int)arg_num(argc, argv, "chaos", 2);
	if (nio < 1 || nchaos < 1 || nio + nchaos > 64)
		die("bad thread counts");
	wd.seconds = seconds;
	start_watchdog(&wd);
	signal(SIGPIPE, SIG_IGN);
	fds_before = count_fds();

	b = xalloc(FSIZE);
	for (int i = 0; i < NFILES; i++) {
		snprintf(path, sizeof(path), "%s/f%d", dir, i);
		base_fd[i] = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
		if (base_fd[i] < 0)
			die("open %s", path);
		memset(b, 0xE0 + i, FSIZE);
		if (pwrite_full(base_fd[i], b, FSIZE, 0) < 0)
			die("prefill");
	}
	if (pipe2(pipe_fd, O_NONBLOCK) < 0)
		die("pipe");
	null_fd = open("/dev/null", O_RDWR);
	dir_fd = open(dir, O_RDONLY | O_DIRECTORY);
	if (null_fd < 0 || dir_fd < 0)
		die("open /dev/null or %s", dir);
	for (int i = 0; i < NSLOT; i++)
		dup2(base_fd[i % NFILES], SLOT0 + i);

	for (long t = 0; t < nio; t++)
		pthread_create(&th[t], NULL, io_thread, (void *)t);
	for (long t = 0; t < nchaos; t++)
		pthread_create(&th[nio + t], NULL, chaos_thread, (void *)t);
	/* Drain the pipe now and then so that writes keep being attempted. */
	for (uint64_t end = now_ns() + (uint64_t)(seconds * 1e9); now_ns() < end;) {
		char sink[65536];

		while (read(pipe_fd[0], sink, sizeof(sink)) > 0)
			;
		sleep_ms(10);
	}
	atomic_store(&stop, 1);
	for (int t = 0; t < nio + nchaos; t++) {
		pthread_join(th[t], NULL);
		atomic_fetch_add(&phase, 1);
	}

	for (int i = 0; i < NSLOT; i++)
		close(SLOT0 + i);
	for (int i = 0; i < NFILES; i++) {
		if (pread_full(base_fd[i], b, FSIZE, 0) < 0)
			die("final pread");
		for (size_t o = 0; o < FSIZE; o += BLK)
			if (!uniform(b + o, BLK)) {
				fprintf(stderr, "fdchaos: f%d block %zu is mixed\n", i, o / BLK);
				mixed++;
			}
		close(base_fd[i]);
	}
	close(pipe_fd[0]);
	close(pipe_fd[1]);
	close(null_fd);
	close(dir_fd);

	snprintf(path, sizeof(path), "%s/after", dir);
	race_fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (race_fd < 0)
		die("open %s", path);
	memset(b, 0x11, 256 * 1024);
	if (pwrite_full(race_fd, b, 256 * 1024, 0) < 0)
		die("pwrite after");
	pthread_create(&rw, NULL, race_writer, NULL);
	for (uint64_t end = now_ns() + 500000000ull; now_ns() < end; reads++) {
		atomic_fetch_add(&phase, 1);
		if (pread_full(race_fd, b, 256 * 1024, 0) < 0)
			die("pread after");
		torn += !uniform(b, 256 * 1024);
	}
	atomic_store(&race_stop, 1);
	pthread_join(rw, NULL);
	close(race_fd);
	fds_after = count_fds();

	fprintf(stderr,
		"fdchaos: seconds=%.1f io_threads=%d chaos_threads=%d ops=%ld full=%ld ebadf=%ld "
		"chaos_ops=%ld unexpected=%ld mixed_blocks=%ld after: reads=%ld torn=%ld "
		"fds %d->%d shim=%d\n",
		seconds, nio, nchaos, (long)ops, (long)ok_io, (long)ebadf, (long)chaos_ops,
		(long)unexpected, mixed, reads, torn, fds_before, fds_after, shim_loaded());
	if (unexpected || mixed || fds_after != fds_before || (torn && strict_mode()) ||
	    ok_io == 0) {
		printf("fdchaos FAIL: unexpected=%ld mixed=%ld torn=%ld fds %d->%d\n", (long)unexpected,
		       mixed, torn, fds_before, fds_after);
		return 1;
	}
	printf("fdchaos ok\n");
	return 0;
}
