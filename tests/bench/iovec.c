/*
 * One process, no contention: pwritev of CNT iovecs of LEN bytes, the
 * array on the heap, at offset 0 of one file, N times.  Prints the
 * microseconds per call (CLOCK_MONOTONIC over the loop, after one
 * warm-up call that attaches the shim and takes the first grant).
 * tests/bench/scale.sh runs it with and without the shim, interleaved.
 *
 *   iovec FILE N [CNT [LEN]]      (defaults 1024 iovecs of 16 bytes)
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	long n = argc > 2 ? atol(argv[2]) : 20000;
	int cnt = argc > 3 ? atoi(argv[3]) : 1024;
	size_t len = argc > 4 ? (size_t)atol(argv[4]) : 16;
	struct iovec *v = malloc(sizeof(*v) * (size_t)cnt);
	char *buf = malloc(len * (size_t)cnt);
	struct timespec t0, t1;
	int fd;

	if (argc < 2 || !v || !buf || cnt < 1 || n < 1) {
		fprintf(stderr, "usage: iovec FILE N [CNT [LEN]]\n");
		return 2;
	}
	fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0) {
		perror(argv[1]);
		return 2;
	}
	for (int i = 0; i < cnt; i++) {
		buf[(size_t)i * len] = (char)i;
		v[i] = (struct iovec){ buf + (size_t)i * len, len };
	}
	if (pwritev(fd, v, cnt, 0) != (ssize_t)(len * (size_t)cnt)) {
		perror("iovec: warm-up");
		return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long i = 0; i < n; i++)
		if (pwritev(fd, v, cnt, 0) != (ssize_t)(len * (size_t)cnt)) {
			perror("iovec: pwritev");
			return 1;
		}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	close(fd);
	unlink(argv[1]);
	printf("%.3f us/call\n",
	       ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 1e3 /
		       (double)n);
	return 0;
}
