/*
 * xmount: one side of a torn-read race between two processes that reach one
 * file through different paths, i.e. through two mounts of one cluster file
 * system acting as two nodes (examples/torn_read.c runs both sides in one
 * process on one path, which cannot model two nodes).
 *
 *   xmount fill  PATH [--block SIZE]            pre-fill with generation 1
 *   xmount write PATH [--block SIZE] [--seconds S] [--direct] [--lock]
 *   xmount read  PATH [--block SIZE] [--seconds S] [--direct] [--lock]
 *
 * The writer rewrites [0, SIZE) with one byte value cycling through 1..255.
 * The reader preads [0, SIZE) and counts reads that are not uniform (torn)
 * and reads whose value differs from the previous read (changes).  A run
 * with changes=0 saw no write at all, so its torn=0 proves nothing; the
 * cluster tier treats that as a failure of the rig, not a pass.
 *
 * --lock takes an OFD lock through the file system around every call (a
 * write lock for writes, a read lock for reads): ROMIO's way on NFS, and the
 * positive control showing the lock manager does give exclusion across
 * mounts.  Output: "reads=N torn=N changes=N" or "writes=N".
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PROG "xmount"
#include "../../examples/util.h"

static void ofd(int fd, short type, size_t len)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET,
			    .l_start = 0, .l_len = (off_t)len };

	while (fcntl(fd, F_OFD_SETLKW, &fl) < 0) {
		if (errno != EINTR)
			die("F_OFD_SETLKW", NULL);
	}
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	const char *mode, *path;
	size_t block = 1u << 20;
	double seconds = 2, end;
	bool direct = false, lock = false;
	unsigned char *buf;
	uint64_t v, n = 0, torn = 0, changes = 0;
	int fd, i, prev = -1;

	if (argc < 3)
		usage_error("usage: xmount fill|write|read PATH [--block SIZE] "
			    "[--seconds S] [--direct] [--lock]");
	mode = argv[1];
	path = argv[2];
	for (i = 3; i < argc; i++) {
		if (!strcmp(argv[i], "--block") && i + 1 < argc) {
			if (!parse_size(argv[++i], &v) || v % 4096)
				usage_error("--block: '%s' is not a multiple of 4096", argv[i]);
			block = (size_t)v;
		} else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
			seconds = atof(argv[++i]);
			if (!(seconds > 0))
				usage_error("--seconds: '%s' is not positive", argv[i]);
		} else if (!strcmp(argv[i], "--direct")) {
			direct = true;
		} else if (!strcmp(argv[i], "--lock")) {
			lock = true;
		} else {
			usage_error("unknown argument '%s'", argv[i]);
		}
	}
	if (posix_memalign((void **)&buf, 4096, block))
		die("posix_memalign", NULL);

	if (!strcmp(mode, "fill")) {
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd < 0)
			die("open", path);
		memset(buf, 1, block);
		if (pwrite(fd, buf, block, 0) != (ssize_t)block || fsync(fd) < 0)
			die("pre-fill", path);
		return close(fd) < 0 ? 2 : 0;
	}
	if (strcmp(mode, "write") && strcmp(mode, "read"))
		usage_error("unknown mode '%s'", mode);

	fd = open(path, (*mode == 'w' ? O_WRONLY : O_RDONLY) | (direct ? O_DIRECT : 0));
	if (fd < 0)
		die("open", path);
	end = now() + seconds;
	if (*mode == 'w') {
		unsigned gen = 1;

		while (now() < end) {
			gen = gen == 255 ? 1 : gen + 1;
			memset(buf, (int)gen, block);
			if (lock)
				ofd(fd, F_WRLCK, block);
			/* One call, never finished by a second: a short write
			 * is reported, not hidden. */
			if (pwrite(fd, buf, block, 0) != (ssize_t)block)
				die("pwrite", path);
			if (lock)
				ofd(fd, F_UNLCK, block);
			n++;
		}
		printf("writes=%" PRIu64 "\n", n);
		return 0;
	}
	while (now() < end) {
		ssize_t r;

		if (lock)
			ofd(fd, F_RDLCK, block);
		r = pread(fd, buf, block, 0);
		if (lock)
			ofd(fd, F_UNLCK, block);
		if (r != (ssize_t)block) {
			fprintf(stderr, PROG ": %s: short read: %zd of %zu\n", path, r, block);
			return 2;
		}
		n++;
		if (buf[0] == 0 || memcmp(buf, buf + 1, block - 1))
			torn++;
		if (buf[0] != prev)
			changes += prev >= 0;
		prev = buf[0];
	}
	printf("reads=%" PRIu64 " torn=%" PRIu64 " changes=%" PRIu64 "\n", n, torn, changes);
	return 0;
}
