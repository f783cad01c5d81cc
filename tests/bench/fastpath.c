/*
 * The loops whose instructions callgrind counts, single-threaded, 512-byte
 * calls on one tmpfs file.  tests/callgrind.sh runs each with and without
 * the shim and divides the difference by the call count.  Only io_loop is
 * collected (--toggle-collect), so start-up and the rewinds between phases
 * are not counted.
 *
 *   fastpath PATH N MODE [thread]
 *   pwrite  N pwrite + N pread at offsets below 32 KiB
 *   rw      N write, rewind, N read at the file offset
 *   vec     N pwritev + N preadv of two 256-byte iovecs
 *   vec2    the same with pwritev2 + preadv2 and RWF_HIPRI (a flag that
 *           leaves the range where it is)
 *   writev  N writev of two 256-byte iovecs at the file offset
 *   append  N write on an O_APPEND descriptor
 *
 * The calls at the file offset run in chunks of 4096 (2 MiB), with a
 * rewind (an ftruncate for appends) between them outside io_loop, so that
 * every row counts calls inside one node grant, as the pwrite row does;
 * growing a file costs one grant acquisition per 4 MiB on top.
 *
 * With "thread", a second thread sleeps in read(2) on a pipe throughout:
 * the process is no longer single-threaded, so the shim takes its range
 * and offset locks (iolock.h, rs_solo), as in any threaded program.
 *
 * Prints calls=C, the number of calls io_loop made.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define CHUNK 4096

enum { PWRITE, PREAD, WRITE, READ, PWRITEV, PREADV, PWRITEV2, WRITEV, APPEND };

__attribute__((noinline, noclone)) long io_loop(int fd, long n, char *buf, int op);
long io_loop(int fd, long n, char *buf, int op)
{
	struct iovec iov[2] = { { buf, 256 }, { buf + 256, 256 } };
	long bytes = 0;

	for (long i = 0; i < n; i++) {
		off_t off = (off_t)(i % 64) * 512;

		switch (op) {
		case PWRITE:
			bytes += pwrite(fd, buf, 512, off);
			bytes += pread(fd, buf, 512, off);
			break;
		case WRITE:
		case APPEND:
			bytes += write(fd, buf, 512);
			break;
		case READ:
			bytes += read(fd, buf, 512);
			break;
		case PWRITEV:
			bytes += pwritev(fd, iov, 2, off);
			bytes += preadv(fd, iov, 2, off);
			break;
		case PWRITEV2:
			bytes += pwritev2(fd, iov, 2, off, RWF_HIPRI);
			bytes += preadv2(fd, iov, 2, off, RWF_HIPRI);
			break;
		case WRITEV:
			bytes += writev(fd, iov, 2);
			break;
		}
	}
	return bytes;
}

static int wake[2];

static void *sleeper(void *arg)
{
	char c;

	(void)arg;
	return (void *)read(wake[0], &c, 1);
}

int main(int argc, char **argv)
{
	const char *path = argc > 1 ? argv[1] : "/dev/shm/rangeshim-fastpath";
	long n = argc > 2 ? atol(argv[2]) : 10000;
	const char *mode = argc > 3 ? argv[3] : "pwrite";
	static char buf[512];
	long bytes, calls = n;
	int fd;

	pthread_t t;
	int threaded = argc > 4 && strcmp(argv[4], "thread") == 0;

	if (threaded && (pipe(wake) || pthread_create(&t, NULL, sleeper, NULL))) {
		perror("fastpath: thread");
		return 2;
	}
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | (strcmp(mode, "append") == 0 ? O_APPEND : 0),
		  0600);
	if (fd < 0) {
		perror(path);
		return 2;
	}
	/* One call before the counted loops: attaching to the node table and
	 * the first grant acquisition are start-up, not the per-call cost
	 * (a table of thousands of process slots would spread its
	 * registration scan over the calls). */
	if (pwrite(fd, buf, 1, 0) != 1) {
		perror("fastpath: warm-up");
		return 2;
	}
	if (strcmp(mode, "pwrite") == 0) {
		bytes = io_loop(fd, n, buf, PWRITE);
		calls = 2 * n;
	} else if (strcmp(mode, "rw") == 0) {
		bytes = 0;
		for (long done = 0; done < n; done += CHUNK) {
			long k = n - done < CHUNK ? n - done : CHUNK;

			lseek(fd, 0, SEEK_SET);
			bytes += io_loop(fd, k, buf, WRITE);
			lseek(fd, 0, SEEK_SET);
			bytes += io_loop(fd, k, buf, READ);
		}
		calls = 2 * n;
	} else if (strcmp(mode, "vec") == 0 || strcmp(mode, "vec2") == 0) {
		bytes = io_loop(fd, n, buf, strcmp(mode, "vec") == 0 ? PWRITEV : PWRITEV2);
		calls = 2 * n;
	} else if (strcmp(mode, "writev") == 0 || strcmp(mode, "append") == 0) {
		int op = strcmp(mode, "writev") == 0 ? WRITEV : APPEND;

		bytes = 0;
		for (long done = 0; done < n; done += CHUNK) {
			if (op == APPEND ? ftruncate(fd, 0) : lseek(fd, 0, SEEK_SET)) {
				perror("fastpath: rewind");
				return 2;
			}
			bytes += io_loop(fd, n - done < CHUNK ? n - done : CHUNK, buf, op);
		}
	} else {
		fprintf(stderr, "fastpath: unknown mode %s\n", mode);
		return 2;
	}
	close(fd);
	unlink(path);
	if (threaded && (write(wake[1], "x", 1) != 1 || pthread_join(t, NULL))) {
		perror("fastpath: join");
		return 2;
	}
	if (bytes != calls * 512) {
		fprintf(stderr, "fastpath: short I/O (%ld of %ld bytes)\n", bytes, calls * 512);
		return 1;
	}
	printf("calls=%ld\n", calls);
	return 0;
}
