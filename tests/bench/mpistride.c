/*
 * mpistride: the canonical non-atomic MPI-IO pattern, without MPI.  RANKS
 * processes (forked) share one file in interleaved blocks: rank r owns
 * blocks k with k % RANKS == r.  All ranks pwrite their BLOCKS blocks in
 * order, meet at a barrier, then pread them back in order and check them
 * (each block is of one byte value, its rank's).
 *
 *   mpistride FILE [RANKS [BLOCKS [BLOCK_BYTES]]]     (2, 20000, 512)
 *
 * Prints one line: calls (of all ranks), write_us and read_us (a rank's
 * wall time per call in the phase, the mean over ranks), write_cpu_us and
 * read_cpu_us (its CPU time per call, user and system), bad (blocks read
 * back wrong) and pids (for RANGESHIM_STATS files).  Run it plain, and
 * under LD_PRELOAD=build/librangeshim.so (tests/bench/stride.sh does
 * both, rounds interleaved).  Exit status 1 if a call failed or a block
 * was wrong.
 */
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct shared {
	_Atomic int arrived;
	double write_s[64], read_s[64], write_cpu[64], read_cpu[64];
	long bad[64];
	int pid[64];
};

static double clock_s(clockid_t c)
{
	struct timespec t;

	clock_gettime(c, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static double now(void)
{
	return clock_s(CLOCK_MONOTONIC);
}

/* The rank's own CPU time: on a loaded machine, wall time also counts
 * the time it waited to be scheduled. */
static double cpu(void)
{
	return clock_s(CLOCK_PROCESS_CPUTIME_ID);
}

/* All ranks at the nth barrier: count up to n * ranks. */
static void barrier(struct shared *sh, int ranks, int n)
{
	atomic_fetch_add(&sh->arrived, 1);
	while (atomic_load(&sh->arrived) < n * ranks)
		sched_yield();
}

static int rank_main(const char *path, struct shared *sh, int r, int ranks, long blocks,
		     size_t bs)
{
	unsigned char *buf = malloc(bs), *rd = malloc(bs);
	int fd = open(path, O_RDWR), err = 0;
	double t, c;

	if (fd < 0 || !buf || !rd)
		return 1;
	memset(buf, 'a' + r % 26, bs);
	sh->pid[r] = getpid();
	barrier(sh, ranks, 1);
	t = now();
	c = cpu();
	for (long j = 0; j < blocks; j++)
		err |= pwrite(fd, buf, bs, (off_t)((j * ranks + r) * (long)bs)) != (ssize_t)bs;
	sh->write_cpu[r] = cpu() - c;
	sh->write_s[r] = now() - t;
	barrier(sh, ranks, 2);
	t = now();
	c = cpu();
	for (long j = 0; j < blocks; j++) {
		err |= pread(fd, rd, bs, (off_t)((j * ranks + r) * (long)bs)) != (ssize_t)bs;
		sh->bad[r] += memcmp(rd, buf, bs) != 0;
	}
	sh->read_cpu[r] = cpu() - c;
	sh->read_s[r] = now() - t;
	close(fd);
	return err;
}

int main(int argc, char **argv)
{
	int ranks = argc > 2 ? atoi(argv[2]) : 2, status = 0;
	long blocks = argc > 3 ? atol(argv[3]) : 20000;
	size_t bs = argc > 4 ? (size_t)atol(argv[4]) : 512;
	struct shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	double w = 0, rd = 0, wc = 0, rc = 0;
	long bad = 0;
	int fd;

	if (argc < 2 || ranks < 1 || ranks > 64 || blocks < 1 || bs < 1 || sh == MAP_FAILED) {
		fprintf(stderr, "usage: mpistride FILE [RANKS [BLOCKS [BLOCK_BYTES]]]\n");
		return 2;
	}
	fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0) {
		perror(argv[1]);
		return 2;
	}
	close(fd);
	for (int r = 0; r < ranks; r++) {
		pid_t p = fork();

		if (p == 0)
			_exit(rank_main(argv[1], sh, r, ranks, blocks, bs));
		if (p < 0)
			return 2;
	}
	for (int r = 0; r < ranks; r++) {
		int st;

		if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
			status = 1;
	}
	printf("calls=%ld", 2 * blocks * ranks);
	for (int r = 0; r < ranks; r++) {
		w += sh->write_s[r] / (double)blocks * 1e6 / ranks;
		rd += sh->read_s[r] / (double)blocks * 1e6 / ranks;
		wc += sh->write_cpu[r] / (double)blocks * 1e6 / ranks;
		rc += sh->read_cpu[r] / (double)blocks * 1e6 / ranks;
		bad += sh->bad[r];
	}
	printf(" write_us=%.3f read_us=%.3f write_cpu_us=%.3f read_cpu_us=%.3f bad=%ld pids=", w, rd,
	       wc, rc, bad);
	for (int r = 0; r < ranks; r++)
		printf("%s%d", r ? "," : "", sh->pid[r]);
	printf("\n");
	unlink(argv[1]);
	return status || bad ? 1 : 0;
}
