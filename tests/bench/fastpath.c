/*
 * The loop whose instructions callgrind counts: N pwrite and N pread of
 * 512 bytes on one tmpfs file, single-threaded.  tests/callgrind.sh runs it
 * with and without the shim and divides the difference by the call count.
 * Only io_loop is collected (--toggle-collect), so start-up is not counted.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((noinline, noclone)) long io_loop(int fd, long n, char *buf);
long io_loop(int fd, long n, char *buf)
{
	long bytes = 0;

	for (long i = 0; i < n; i++) {
		bytes += pwrite(fd, buf, 512, (off_t)(i % 64) * 512);
		bytes += pread(fd, buf, 512, (off_t)(i % 64) * 512);
	}
	return bytes;
}

int main(int argc, char **argv)
{
	const char *path = argc > 1 ? argv[1] : "/dev/shm/rangeshim-fastpath";
	long n = argc > 2 ? atol(argv[2]) : 10000;
	static char buf[512];
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	long bytes;

	if (fd < 0) {
		perror(path);
		return 2;
	}
	bytes = io_loop(fd, n, buf);
	close(fd);
	unlink(path);
	if (bytes != n * 1024) {
		fprintf(stderr, "fastpath: short I/O (%ld of %ld bytes)\n", bytes, n * 1024);
		return 1;
	}
	printf("calls=%ld\n", 2 * n);
	return 0;
}
