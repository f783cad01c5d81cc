/*
 * manyfiles: one process with NFILES files open, making CALLS random
 * 4 KiB pwrites and preads across them (half each), the "files 1-10k per
 * process" row of the scale table.  Prints the wall time per call.
 *
 *   manyfiles DIR NFILES CALLS
 *
 * Each file is 64 KiB; the descriptor limit is raised to fit.  Exit
 * status 1 if a call failed.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	char buf[4096], path[4096];
	struct rlimit rl;
	unsigned long long x = 88172645463325252ull;
	int n, calls, *fds;
	double t;

	if (argc != 4 || (n = atoi(argv[2])) < 1 || (calls = atoi(argv[3])) < 1) {
		fprintf(stderr, "usage: manyfiles DIR NFILES CALLS\n");
		return 2;
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)n + 64) {
		rl.rlim_cur = (rlim_t)n + 64 < rl.rlim_max ? (rlim_t)n + 64 : rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	fds = calloc((size_t)n, sizeof(*fds));
	memset(buf, 'x', sizeof(buf));
	for (int i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "%s/f%d", argv[1], i);
		fds[i] = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
		if (fds[i] < 0 || ftruncate(fds[i], 65536) < 0) {
			perror(path);
			return 1;
		}
	}
	t = now();
	for (int i = 0; i < calls; i++) {
		int f, ok;
		off_t off;

		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		f = (int)(x % (unsigned)n);
		off = (off_t)((x >> 20) % 16) * 4096;
		ok = (i & 1) ? pread(fds[f], buf, sizeof(buf), off) == (ssize_t)sizeof(buf)
			     : pwrite(fds[f], buf, sizeof(buf), off) == (ssize_t)sizeof(buf);
		if (!ok) {
			perror("manyfiles: I/O");
			return 1;
		}
	}
	t = now() - t;
	printf("%.3f us/call\n", t * 1e6 / calls);
	for (int i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "%s/f%d", argv[1], i);
		close(fds[i]);
		unlink(path);
	}
	free(fds);
	return 0;
}
