/*
 * eofcost FILE [ROUNDS] [APPENDS]: what asking for end of file costs an
 * append (docs/benchmarks.md, "Appends").  1, 2 and 4 appenders, threads
 * and then processes, each with its own O_APPEND descriptor of FILE,
 * write 100-byte lines; every mode but "write" makes one more system call
 * before each line, the candidates for the shim's re-check of end of file
 * under its lock (iolock.h, rs_fstat_size):
 *
 *   write      the line alone
 *   fstat      fstat(fd)
 *   statx ""   statx(fd, "", AT_EMPTY_PATH, STATX_SIZE)
 *   statx NULL statx(fd, NULL, AT_EMPTY_PATH, STATX_SIZE) (Linux 6.11)
 *   lseek END  lseek(fd, 0, SEEK_END): moves the file offset
 *   getppid    a system call that does nothing, for the floor
 *
 * Prints, per row, one appender's time per line (wall / lines per
 * appender, median over the rounds) and the median of its ratio to
 * "write" within each round.  All modes run in every round, in turn.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../helpers/probe.h"

enum { M_WRITE, M_FSTAT, M_STATX_EMPTY, M_STATX_NULL, M_LSEEK, M_NULL, M_COUNT };
static const char *const names[M_COUNT] = { "write", "fstat", "statx \"\"", "statx NULL",
					    "lseek END", "getppid" };
#define MAXR 64

static const char *path;
static int mode;
static long appends;

static void *appender(void *arg)
{
	int fd = open(path, O_WRONLY | O_APPEND);
	char line[100];
	struct stat st;
	struct statx sx;

	(void)arg;
	if (fd < 0) {
		perror(path);
		exit(1);
	}
	memset(line, 'x', sizeof(line) - 1);
	line[sizeof(line) - 1] = '\n';
	for (long i = 0; i < appends; i++) {
		switch (mode) {
		case M_FSTAT:
			syscall(SYS_fstat, fd, &st);
			break;
		case M_STATX_EMPTY:
			syscall(SYS_statx, fd, "", AT_EMPTY_PATH, STATX_SIZE, &sx);
			break;
		case M_STATX_NULL:
			syscall(SYS_statx, fd, NULL, AT_EMPTY_PATH, STATX_SIZE, &sx);
			break;
		case M_LSEEK:
			syscall(SYS_lseek, fd, 0, SEEK_END);
			break;
		case M_NULL:
			syscall(SYS_getppid);
			break;
		}
		if (write(fd, line, sizeof(line)) != (ssize_t)sizeof(line)) {
			perror("write");
			exit(1);
		}
	}
	close(fd);
	return NULL;
}

/* One run: us per line for one appender. */
static double run(int n, int procs)
{
	pthread_t t[4];
	int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
	double t0;

	if (fd < 0) {
		perror(path);
		exit(1);
	}
	close(fd);
	t0 = probe_now();
	for (int i = 0; i < n; i++) {
		if (!procs) {
			pthread_create(&t[i], NULL, appender, NULL);
		} else if (fork() == 0) {
			appender(NULL);
			_exit(0);
		}
	}
	for (int i = 0; i < n; i++) {
		if (!procs)
			pthread_join(t[i], NULL);
		else
			wait(NULL);
	}
	return (probe_now() - t0) * 1e6 / (double)appends;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
	int rounds = argc > 2 ? atoi(argv[2]) : 9;

	if (argc < 2 || rounds < 1 || rounds > MAXR) {
		fprintf(stderr, "usage: eofcost FILE [ROUNDS (1-%d)] [APPENDS]\n", MAXR);
		return 2;
	}
	path = argv[1];
	appends = argc > 3 ? atol(argv[3]) : 50000;
	printf("one appender's us per 100-byte line (x: over write alone, same round), "
	       "median of %d rounds\n", rounds);
	for (int procs = 0; procs < 2; procs++) {
		for (int n = 1; n <= 4; n *= 2) {
			double us[M_COUNT][MAXR], ratio[M_COUNT][MAXR];

			for (int r = 0; r < rounds; r++)
				for (mode = 0; mode < M_COUNT; mode++)
					us[mode][r] = run(n, procs);
			for (int m = 0; m < M_COUNT; m++)
				for (int r = 0; r < rounds; r++)
					ratio[m][r] = us[m][r] / us[M_WRITE][r];
			printf("%d %-9s", n, procs ? "processes" : "threads");
			for (int m = 0; m < M_COUNT; m++)
				printf("  %s %.2f (x%.2f)", names[m], median(us[m], rounds),
				       median(ratio[m], rounds));
			printf("\n");
		}
	}
	unlink(path);
	return 0;
}
