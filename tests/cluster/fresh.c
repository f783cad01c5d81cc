/*
 * fresh: does a reader on one node see what a writer on another node has
 * just written?  Two processes, one per node (one per mount of a cluster
 * file system), take turns through two FIFOs on a local file system:
 *
 *   fresh write PATH ROUNDS DIR [--direct] [--lock] [--block SIZE]
 *   fresh read  PATH DIR [--direct] [--lock] [--drop]
 *
 * DIR holds the FIFOs w2r and r2w (the caller makes them with mkfifo).
 * The writer pre-fills PATH with generation 1 and waits for the reader to
 * have read it (so that the reader's node has it cached, as a long-running
 * reader would); then, ROUNDS times, it rewrites [0, SIZE) (default 1 MiB)
 * with the next generation, one pwrite, and tells the reader which
 * generation that was.  The reader, which keeps one descriptor open all
 * along, preads [0, SIZE) and counts the read as
 *   fresh  every byte is the generation just written;
 *   stale  every byte is one older generation (a cache that was not made
 *          coherent);
 *   torn   not every byte is the same.
 * Then it answers, and the writer goes on.  The turn-taking orders each
 * read after the write it checks, so that on a coherent file system every
 * read is fresh; nothing else orders them.
 *
 * --lock takes an OFD lock through the file system around each pwrite and
 * pread (write and read lock): do the file system's locks alone make its
 * data coherent?  --drop makes the reader call posix_fadvise(DONTNEED) on
 * the range before each read: is the page cache what keeps stale data?
 *
 * Output: the writer "writes=N", the reader
 * "rounds=N fresh=N stale=N torn=N".
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROG "fresh"
#include "../../examples/util.h"

static void ofd(int fd, short type, size_t len)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = 0,
			    .l_len = (off_t)len };

	while (fcntl(fd, F_OFD_SETLKW, &fl) < 0) {
		if (errno != EINTR)
			die("F_OFD_SETLKW", NULL);
	}
}

static void fifo_open(const char *dir, const char *name, int flags, int *fd)
{
	char p[4096];

	snprintf(p, sizeof p, "%s/%s", dir, name);
	*fd = open(p, flags);
	if (*fd < 0)
		die("open", p);
}

/* One byte through a FIFO; false at end of file. */
static bool get(int fd, unsigned char *b)
{
	ssize_t r;

	while ((r = read(fd, b, 1)) < 0 && errno == EINTR)
		;
	if (r < 0)
		die("read", "FIFO");
	return r == 1;
}

static void put(int fd, unsigned char b)
{
	if (write(fd, &b, 1) != 1)
		die("write", "FIFO");
}

int main(int argc, char **argv)
{
	size_t block = 1u << 20;
	bool direct = false, lock = false, drop = false, writer;
	uint64_t v, rounds = 0, fresh = 0, stale = 0, torn = 0, n;
	unsigned char *buf, gen, ack;
	const char *path, *dir;
	int fd, w2r, r2w, i;

	if (argc < 4)
		usage_error("usage: fresh write PATH ROUNDS DIR [--direct] [--lock] [--block SIZE] | "
			    "fresh read PATH DIR [--direct] [--lock] [--drop]");
	writer = !strcmp(argv[1], "write");
	if (!writer && strcmp(argv[1], "read"))
		usage_error("unknown mode '%s'", argv[1]);
	path = argv[2];
	i = 3;
	if (writer) {
		if (argc < 5 || !parse_u64(argv[3], &rounds) || rounds == 0)
			usage_error("write: ROUNDS must be a positive number");
		i = 4;
	}
	dir = argv[i++];
	for (; i < argc; i++) {
		if (!strcmp(argv[i], "--block") && i + 1 < argc) {
			if (!parse_size(argv[++i], &v) || v == 0 || v % 4096)
				usage_error("--block: '%s' is not a multiple of 4096", argv[i]);
			block = (size_t)v;
		} else if (!strcmp(argv[i], "--direct")) {
			direct = true;
		} else if (!strcmp(argv[i], "--lock")) {
			lock = true;
		} else if (!strcmp(argv[i], "--drop") && !writer) {
			drop = true;
		} else {
			usage_error("unknown argument '%s'", argv[i]);
		}
	}
	if (posix_memalign((void **)&buf, 4096, block))
		die("posix_memalign", NULL);

	if (writer) {
		fd = open(path, O_RDWR | O_CREAT | O_TRUNC | (direct ? O_DIRECT : 0), 0644);
		if (fd < 0)
			die("open", path);
		memset(buf, 1, block);
		if (pwrite(fd, buf, block, 0) != (ssize_t)block || fsync(fd) < 0)
			die("pre-fill", path);
		/* Opened in this order by both sides: no deadlock on open. */
		fifo_open(dir, "w2r", O_WRONLY, &w2r);
		fifo_open(dir, "r2w", O_RDONLY, &r2w);
		put(w2r, 1);
		if (!get(r2w, &ack))
			usage_error("the reader went away before the first round");
		gen = 1;
		for (n = 0; n < rounds; n++) {
			gen = gen == 250 ? 2 : gen + 1;
			memset(buf, gen, block);
			if (lock)
				ofd(fd, F_WRLCK, block);
			/* One call, never finished by a second. */
			if (pwrite(fd, buf, block, 0) != (ssize_t)block)
				die("pwrite", path);
			if (lock)
				ofd(fd, F_UNLCK, block);
			put(w2r, gen);
			if (!get(r2w, &ack))
				usage_error("the reader went away after %" PRIu64 " rounds", n);
		}
		printf("writes=%" PRIu64 "\n", n);
		return 0;
	}

	fifo_open(dir, "w2r", O_RDONLY, &w2r);
	fifo_open(dir, "r2w", O_WRONLY, &r2w);
	/* The pre-fill is in the file once the writer says so. */
	if (!get(w2r, &gen))
		usage_error("the writer went away before the first round");
	fd = open(path, O_RDONLY | (direct ? O_DIRECT : 0));
	if (fd < 0)
		die("open", path);
	for (bool first = true;; first = false) {
		ssize_t r;

		if (drop)
			posix_fadvise(fd, 0, (off_t)block, POSIX_FADV_DONTNEED);
		if (lock)
			ofd(fd, F_RDLCK, block);
		r = pread(fd, buf, block, 0);
		if (lock)
			ofd(fd, F_UNLCK, block);
		if (r != (ssize_t)block) {
			fprintf(stderr, PROG ": %s: short read: %zd of %zu\n", path, r, block);
			return 2;
		}
		if (!first) {
			rounds++;
			if (memcmp(buf, buf + 1, block - 1))
				torn++;
			else if (buf[0] == gen)
				fresh++;
			else
				stale++;
		}
		put(r2w, 1);
		if (!get(w2r, &gen))
			break;
	}
	printf("rounds=%" PRIu64 " fresh=%" PRIu64 " stale=%" PRIu64 " torn=%" PRIu64 "\n", rounds,
	       fresh, stale, torn);
	return 0;
}
