/*
 * forkexec: fork, and fork+exec, over and over while other threads write.
 *
 *   forkexec FILE [iters=N] [threads=T]
 *
 * T threads each rewrite their own 64 KiB block and read it back (it must
 * hold exactly what they wrote last), and all of them also write and read
 * one shared 64 KiB block (a torn read there counts, and fails under
 * RS_COMPAT_STRICT=1).  Meanwhile the main thread forks N times, round
 * robin:
 *   0  the child pwrites its 4 KiB record and _exits (no exec);
 *   1  the child execs this program, which opens the file and pwrites its
 *      record and reads the shared block;
 *   2  the child execs /bin/true;
 *   3  the child does I/O on the inherited fd at the shared file offset
 *      (lseek + write), then _exits.
 * A child that has not finished within 20 s counts as hung (a lock held
 * across fork).  At the end every record must be there.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "compat.h"

#define BLK (64 * 1024)
#define REC 4096
#define RECBASE (4 * MIB)

static int fd;
static int nthreads;
static _Atomic int stop;
static _Atomic long torn, thread_writes;
static const char *self;
static const char *path;

static void *writer(void *arg)
{
	long t = (long)arg;
	unsigned char *b = xalloc(BLK), *r = xalloc(BLK);
	uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(t + 1);
	off_t own = (off_t)t * BLK, shared = (off_t)nthreads * BLK;

	for (unsigned gen = 0; !atomic_load(&stop); gen++) {
		int v = 1 + (int)((t * 17 + gen) % 250);

		memset(b, v, BLK);
		if (pwrite_full(fd, b, BLK, own) < 0)
			die("thread %ld pwrite", t);
		if (pread_full(fd, r, BLK, own) < 0)
			die("thread %ld pread", t);
		if (memcmp(b, r, BLK) != 0)
			die("thread %ld: its own block does not hold its last write", t);
		if (rnd(&s) & 1) {
			if (pwrite_full(fd, b, BLK, shared) < 0)
				die("thread %ld shared pwrite", t);
		} else {
			if (pread_full(fd, r, BLK, shared) < 0)
				die("thread %ld shared pread", t);
			if (!uniform(r, BLK))
				atomic_fetch_add(&torn, 1);
		}
		atomic_fetch_add(&thread_writes, 1);
	}
	free(b);
	free(r);
	return NULL;
}

static void write_record(int f, long i)
{
	unsigned char rec[REC];

	memset(rec, 1 + (int)(i % 251), sizeof(rec));
	if (pwrite_full(f, rec, sizeof(rec), (off_t)(RECBASE + (uint64_t)i * REC)) < 0)
		die("child %ld pwrite", i);
}

/* The exec'd child: a fresh process under the same environment. */
static int child_main(long i)
{
	unsigned char *r = xalloc(BLK);
	int f = open(path, O_RDWR);

	if (f < 0)
		die("child open %s", path);
	write_record(f, i);
	if (pread_full(f, r, BLK, 0) < 0)
		die("child pread");
	close(f);
	return 0;
}

static void run_child(long i)
{
	char num[32], *argv[5];

	switch (i % 4) {
	case 0:
		write_record(fd, i);
		_exit(0);
	case 1:
		snprintf(num, sizeof(num), "%ld", i);
		argv[0] = (char *)self;
		argv[1] = (char *)"child";
		argv[2] = (char *)path;
		argv[3] = num;
		argv[4] = NULL;
		execv(self, argv);
		die("execv %s", self);
	case 2:
		argv[0] = (char *)"true";
		argv[1] = NULL;
		execv("/bin/true", argv);
		die("execv /bin/true");
	default: {
		/* The description is shared with the parent; only this child
		 * uses its offset, and only for the record. */
		unsigned char rec[REC];

		memset(rec, 1 + (int)(i % 251), sizeof(rec));
		if (lseek(fd, (off_t)(RECBASE + (uint64_t)i * REC), SEEK_SET) < 0)
			die("child lseek");
		if (write(fd, rec, sizeof(rec)) != REC)
			die("child write");
		_exit(0);
	}
	}
}

int main(int argc, char **argv)
{
	pthread_t th[64];
	long iters, hung = 0, bad = 0;
	unsigned char rec[REC];

	self = argv[0];
	if (argc >= 4 && strcmp(argv[1], "child") == 0) {
		path = argv[2];
		return child_main(atol(argv[3]));
	}
	if (argc < 2)
		die("usage: forkexec FILE [iters=N] [threads=T]");
	path = argv[1];
	iters = arg_num(argc, argv, "iters", 200);
	nthreads = (int)arg_num(argc, argv, "threads", 4);
	if (nthreads < 1 || nthreads > 64)
		die("threads must be 1..64");
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		die("open %s", path);
	/* the shared block exists before anyone reads it */
	if (ftruncate(fd, (off_t)RECBASE) < 0)
		die("ftruncate");
	for (long t = 0; t < nthreads; t++)
		if (pthread_create(&th[t], NULL, writer, (void *)t) != 0)
			die("pthread_create");
	for (long i = 0; i < iters; i++) {
		pid_t p = fork();
		int r;

		if (p < 0)
			die("fork");
		if (p == 0)
			run_child(i);
		r = wait_child(p, "forkexec", i);
		hung += r == -2;
		bad += r == -1;
	}
	atomic_store(&stop, 1);
	for (int t = 0; t < nthreads; t++)
		pthread_join(th[t], NULL);
	for (long i = 0; i < iters; i++) {
		if (i % 4 == 2)
			continue;
		if (pread_full(fd, rec, REC, (off_t)(RECBASE + (uint64_t)i * REC)) < 0)
			die("pread record %ld", i);
		if (rec[0] != 1 + (int)(i % 251) || !uniform(rec, REC)) {
			fprintf(stderr, "forkexec: record %ld is wrong (first byte %d)\n", i, rec[0]);
			bad++;
		}
	}
	close(fd);
	fprintf(stderr, "forkexec: forks=%ld thread_writes=%ld torn=%ld hung=%ld bad=%ld shim=%d\n",
		iters, (long)thread_writes, (long)torn, hung, bad, shim_loaded());
	if (hung || bad || (torn && strict_mode())) {
		printf("forkexec FAIL: hung=%ld bad=%ld torn=%ld\n", hung, bad, (long)torn);
		return 1;
	}
	printf("forkexec ok forks=%ld\n", iters);
	return 0;
}
