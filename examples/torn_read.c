/*
 * torn_read: a POSIX read/write atomicity checker.
 *
 * POSIX.1-2017 §2.9.7 says a read() or pread() of a regular file must see
 * either all or none of a concurrent write() or pwrite().  Linux does not
 * promise that for buffered I/O (reads take no inode lock) nor for O_DIRECT,
 * so this program races writers against readers and counts how often a
 * reader sees a mix of two writes.
 *
 * Each write fills its whole range with one byte value, a generation number
 * that cycles through 1..255.  Zero is never written, so a hole or a short
 * fill shows up as torn too.  A read is torn when the bytes it returns are
 * not what some serial order of whole writes could have produced.
 *
 * With --overlap two writers race on partially overlapping ranges:
 *   writer A writes [0, B)        with generation gA
 *   writer B writes [B/2, 3B/2)   with generation gB
 * and readers read [0, 3B/2).  In any serial order each of the three halves
 * [0,B/2), [B/2,B), [B,3B/2) is uniform, and the shared middle holds the
 * value of whichever write came last, so it must equal one of the outer
 * halves.  After all threads stop, the file is checked once more: a middle
 * that is still mixed means two writes interleaved (write/write tearing).
 *
 * Output: one human line and one machine-readable line
 * "reads=N torn=N writes=N" that tests parse.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PROG "torn_read"
#include "util.h"

/*
 * The fortified entry point that _FORTIFY_SOURCE builds call instead of
 * pread(); a shim that forgets it silently leaves such programs unlocked.
 */
extern ssize_t __pread_chk(int, void *, size_t, off_t, size_t);

#define ALIGN 4096
#define MAX_READERS 1024

struct opts {
	const char *path;        /* NULL: make one in /dev/shm */
	size_t block;
	unsigned readers;
	double seconds;          /* 0: no time limit */
	uint64_t max_reads;      /* 0: no read limit */
	bool direct, overlap, use_read, chk, quiet, keep, expect_clean;
};

struct shared {
	const struct opts *o;
	const char *path;
	off_t read_off;
	size_t read_len;
	struct timespec deadline;
	atomic_bool stop;
	atomic_uint_fast64_t claimed;   /* reads handed out under --reads */
};

struct reader {
	pthread_t tid;
	struct shared *sh;
	uint64_t reads, torn;
};

struct writer {
	pthread_t tid;
	struct shared *sh;
	off_t off;
	uint64_t writes;
};

static void usage(FILE *f)
{
	fprintf(f,
"Usage: " PROG " [OPTION]...\n"
"Race pwrite() against pread() on one range of a regular file and count\n"
"reads that see a mix of two writes (torn reads).\n"
"\n"
"  --file PATH     file to use; created or truncated, removed at exit unless\n"
"                  --keep (default: a new file in /dev/shm)\n"
"  --block SIZE    bytes per write and read; suffixes k, m, g (default 1M)\n"
"  --readers N     reader threads (default 1)\n"
"  --seconds S     run for S seconds, fractions allowed (default 2)\n"
"  --reads N       stop after N reads in total; with --seconds, whichever\n"
"                  comes first; without it, no time limit\n"
"  --direct        open with O_DIRECT; SIZE must be a multiple of 4096\n"
"                  (8192 with --overlap)\n"
"  --overlap       two writers on partially overlapping ranges [0,B) and\n"
"                  [B/2,3B/2); readers read [0,3B/2)\n"
"  --use-read      lseek()+read() and lseek()+write() instead of pread/pwrite\n"
"  --chk           readers call __pread_chk(), the fortified pread\n"
"  --expect-clean  exit 1 if any read was torn\n"
"  --keep          do not remove the file at exit\n"
"  --quiet         print only the machine-readable line\n"
"  --help          show this help\n"
"\n"
"Output: a summary line, then \"reads=N torn=N writes=N\".\n"
"Exit status: 0, or 1 with --expect-clean and torn reads, 2 on errors.\n");
}

static void parse_args(int argc, char **argv, struct opts *o)
{
	enum { OPT_FILE = 256, OPT_BLOCK, OPT_READERS, OPT_SECONDS, OPT_READS, OPT_DIRECT,
	       OPT_OVERLAP, OPT_USE_READ, OPT_CHK, OPT_EXPECT, OPT_KEEP, OPT_QUIET, OPT_HELP };
	static const struct option lopts[] = {
		{ "file",         required_argument, NULL, OPT_FILE },
		{ "block",        required_argument, NULL, OPT_BLOCK },
		{ "readers",      required_argument, NULL, OPT_READERS },
		{ "seconds",      required_argument, NULL, OPT_SECONDS },
		{ "reads",        required_argument, NULL, OPT_READS },
		{ "direct",       no_argument,       NULL, OPT_DIRECT },
		{ "overlap",      no_argument,       NULL, OPT_OVERLAP },
		{ "use-read",     no_argument,       NULL, OPT_USE_READ },
		{ "chk",          no_argument,       NULL, OPT_CHK },
		{ "expect-clean", no_argument,       NULL, OPT_EXPECT },
		{ "keep",         no_argument,       NULL, OPT_KEEP },
		{ "quiet",        no_argument,       NULL, OPT_QUIET },
		{ "help",         no_argument,       NULL, OPT_HELP },
		{ NULL, 0, NULL, 0 },
	};
	bool seconds_given = false;
	uint64_t v;
	int c;

	*o = (struct opts){ .block = 1u << 20, .readers = 1, .seconds = 2.0 };
	/* Leading ':' so we print our own messages; 'h' for the habit. */
	while ((c = getopt_long(argc, argv, ":h", lopts, NULL)) != -1) {
		switch (c) {
		case OPT_FILE:
			if (!*optarg)
				usage_error("--file: empty path");
			o->path = optarg;
			break;
		case OPT_BLOCK:
			if (!parse_size(optarg, &v) || v > (uint64_t)SSIZE_MAX / 2)
				usage_error("--block: invalid size '%s'", optarg);
			o->block = (size_t)v;
			break;
		case OPT_READERS:
			if (!parse_u64(optarg, &v) || v < 1 || v > MAX_READERS)
				usage_error("--readers: '%s' is not a number from 1 to 1024",
					    optarg);
			o->readers = (unsigned)v;
			break;
		case OPT_SECONDS: {
			char *end;

			errno = 0;
			o->seconds = strtod(optarg, &end);
			if (errno || end == optarg || *end != '\0' ||
			    !(o->seconds > 0) || o->seconds > 1e6)
				usage_error("--seconds: '%s' is not a positive number",
					    optarg);
			seconds_given = true;
			break;
		}
		case OPT_READS:
			if (!parse_u64(optarg, &v) || v < 1)
				usage_error("--reads: '%s' is not a positive number",
					    optarg);
			o->max_reads = v;
			break;
		case OPT_DIRECT:  o->direct = true; break;
		case OPT_OVERLAP:  o->overlap = true; break;
		case OPT_USE_READ: o->use_read = true; break;
		case OPT_CHK:      o->chk = true; break;
		case OPT_EXPECT:   o->expect_clean = true; break;
		case OPT_KEEP:     o->keep = true; break;
		case OPT_QUIET:    o->quiet = true; break;
		case 'h':
		case OPT_HELP:
			usage(stdout);
			exit(0);
		case ':':
			usage_error("option '%s' needs an argument", argv[optind - 1]);
			break;
		default:
			usage_error("unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		usage_error("unexpected argument '%s'", argv[optind]);
	if (o->max_reads && !seconds_given)
		o->seconds = 0;
	if (o->chk && o->use_read)
		usage_error("--chk and --use-read are mutually exclusive");
	if (o->overlap && o->block % 2)
		usage_error("--overlap needs an even --block, not %zu", o->block);
	if (o->direct) {
		size_t unit = o->overlap ? 2 * ALIGN : ALIGN;

		if (o->block % unit)
			usage_error("--direct%s needs --block to be a multiple "
				    "of %zu", o->overlap ? " --overlap" : "", unit);
	}
}

static void *xalloc(size_t len)
{
	void *p;
	int rc = posix_memalign(&p, ALIGN, len);

	if (rc) {
		errno = rc;
		die("posix_memalign", NULL);
	}
	return p;
}

static int open_file(const struct shared *sh, int flags)
{
	int fd = open(sh->path, flags | (sh->o->direct ? O_DIRECT : 0));

	if (fd < 0) {
		if (errno == EINVAL && sh->o->direct)
			fprintf(stderr, PROG ": %s: O_DIRECT not supported here\n",
				sh->path);
		die("open", sh->path);
	}
	return fd;
}

static void write_all(const struct shared *sh, int fd, const unsigned char *buf,
		      size_t len, off_t off)
{
	size_t done = 0;

	/* A regular file never returns a short write in practice; if it
	 * does, finishing the rest keeps the file free of stale bytes. */
	while (done < len) {
		ssize_t n;

		if (sh->o->use_read) {
			if (lseek(fd, off + (off_t)done, SEEK_SET) < 0)
				die("lseek", sh->path);
			n = write(fd, buf + done, len - done);
		} else {
			n = pwrite(fd, buf + done, len - done, off + (off_t)done);
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			die(sh->o->use_read ? "write" : "pwrite", sh->path);
		}
		if (n == 0) {
			fprintf(stderr, PROG ": %s: write returned 0\n", sh->path);
			exit(2);
		}
		done += (size_t)n;
	}
}

/*
 * One read call, never retried for the remainder: finishing a short read
 * with a second call would itself be a non-atomic read.  The file is
 * pre-filled, so a short read is an error, not a tear.
 */
static void read_once(const struct shared *sh, int fd, unsigned char *buf,
		      size_t len, off_t off)
{
	const struct opts *o = sh->o;
	ssize_t n;

	do {
		if (o->use_read) {
			if (lseek(fd, off, SEEK_SET) < 0)
				die("lseek", sh->path);
			n = read(fd, buf, len);
		} else if (o->chk) {
			n = __pread_chk(fd, buf, len, off, len);
		} else {
			n = pread(fd, buf, len, off);
		}
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		die(o->use_read ? "read" : o->chk ? "__pread_chk" : "pread",
		    sh->path);
	if ((size_t)n != len) {
		fprintf(stderr, PROG ": %s: short read: %zd of %zu bytes\n",
			sh->path, n, len);
		exit(2);
	}
}

static bool uniform(const unsigned char *p, size_t n)
{
	/* memcmp of a buffer against itself shifted by one byte is the
	 * fastest portable "all bytes equal" test. */
	return n == 0 || (p[0] != 0 && memcmp(p, p + 1, n - 1) == 0);
}

static bool is_torn(const struct opts *o, const unsigned char *buf)
{
	size_t h = o->block / 2;

	if (!o->overlap)
		return !uniform(buf, o->block);
	if (!uniform(buf, h) || !uniform(buf + h, h) || !uniform(buf + 2 * h, h))
		return true;
	return buf[h] != buf[0] && buf[h] != buf[2 * h];
}

static bool past(const struct timespec *deadline)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec > deadline->tv_sec ||
	       (now.tv_sec == deadline->tv_sec && now.tv_nsec >= deadline->tv_nsec);
}

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	struct shared *sh = r->sh;
	const struct opts *o = sh->o;
	unsigned char *buf = xalloc(sh->read_len);
	int fd = open_file(sh, O_RDONLY);

	for (;;) {
		if (atomic_load_explicit(&sh->stop, memory_order_relaxed))
			break;
		if (o->max_reads &&
		    atomic_fetch_add_explicit(&sh->claimed, 1,
					      memory_order_relaxed) >= o->max_reads)
			break;
		if (o->seconds > 0 && past(&sh->deadline))
			break;
		read_once(sh, fd, buf, sh->read_len, sh->read_off);
		r->reads++;
		if (is_torn(o, buf))
			r->torn++;
	}
	/* The first reader to finish ends the run for everyone. */
	atomic_store_explicit(&sh->stop, true, memory_order_relaxed);
	if (close(fd) < 0)
		die("close", sh->path);
	free(buf);
	return NULL;
}

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	struct shared *sh = w->sh;
	size_t len = sh->o->block;
	unsigned char *buf = xalloc(len);
	int fd = open_file(sh, O_WRONLY);
	unsigned gen = 1;   /* the pre-fill value; the first write uses 2 */

	while (!atomic_load_explicit(&sh->stop, memory_order_relaxed)) {
		gen = gen == 255 ? 1 : gen + 1;
		memset(buf, (int)gen, len);
		write_all(sh, fd, buf, len, w->off);
		w->writes++;
	}
	if (close(fd) < 0)
		die("close", sh->path);
	free(buf);
	return NULL;
}

static char *make_file(const struct opts *o)
{
	char *path;
	int fd;

	if (o->path) {
		path = strdup(o->path);
		if (!path)
			die("strdup", NULL);
		fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
		if (fd < 0)
			die("cannot create", path);
	} else {
		path = strdup("/dev/shm/torn_read.XXXXXX");
		if (!path)
			die("strdup", NULL);
		fd = mkstemp(path);
		if (fd < 0)
			die("cannot create a file in", "/dev/shm");
	}
	if (!o->keep)
		cleanup_path = path;
	if (close(fd) < 0)
		die("close", path);
	return path;
}

/* Generation 1 everywhere, so no read is ever short or sees a hole. */
static void prefill(const struct shared *sh, size_t len)
{
	unsigned char *buf = xalloc(len);
	int fd = open_file(sh, O_WRONLY);
	size_t done = 0;

	memset(buf, 1, len);
	while (done < len) {
		ssize_t n = pwrite(fd, buf + done, len - done, (off_t)done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			die("pre-fill pwrite", sh->path);
		done += (size_t)n;
	}
	if (fsync(fd) < 0)
		die("fsync", sh->path);
	if (close(fd) < 0)
		die("close", sh->path);
	free(buf);
}

static double since(const struct timespec *t0)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - t0->tv_sec) +
	       (double)(now.tv_nsec - t0->tv_nsec) / 1e9;
}

int main(int argc, char **argv)
{
	struct opts o;
	struct shared sh;
	struct reader *readers;
	struct writer writers[2];
	unsigned nwriters, i;
	uint64_t reads = 0, torn = 0, writes = 0;
	struct timespec t0;
	double elapsed;
	bool final_mixed = false;
	int rc;

	parse_args(argc, argv, &o);
	if (atexit(remove_file))
		die("atexit", NULL);

	memset(&sh, 0, sizeof sh);
	sh.o = &o;
	sh.read_off = 0;
	sh.read_len = o.overlap ? o.block + o.block / 2 : o.block;
	atomic_init(&sh.stop, false);
	atomic_init(&sh.claimed, 0);
	sh.path = make_file(&o);
	prefill(&sh, sh.read_len);

	readers = calloc(o.readers, sizeof *readers);
	if (!readers)
		die("calloc", NULL);
	nwriters = o.overlap ? 2 : 1;
	for (i = 0; i < nwriters; i++)
		writers[i] = (struct writer){ .sh = &sh,
					      .off = (off_t)(i * (o.block / 2)) };

	clock_gettime(CLOCK_MONOTONIC, &t0);
	sh.deadline = t0;
	if (o.seconds > 0) {
		double whole = (double)(time_t)o.seconds;

		sh.deadline.tv_sec += (time_t)o.seconds;
		sh.deadline.tv_nsec += (long)((o.seconds - whole) * 1e9);
		if (sh.deadline.tv_nsec >= 1000000000L) {
			sh.deadline.tv_sec++;
			sh.deadline.tv_nsec -= 1000000000L;
		}
	}

	for (i = 0; i < nwriters; i++) {
		rc = pthread_create(&writers[i].tid, NULL, writer_main, &writers[i]);
		if (rc) {
			errno = rc;
			die("pthread_create", NULL);
		}
	}
	for (i = 0; i < o.readers; i++) {
		readers[i].sh = &sh;
		rc = pthread_create(&readers[i].tid, NULL, reader_main, &readers[i]);
		if (rc) {
			errno = rc;
			die("pthread_create", NULL);
		}
	}
	for (i = 0; i < o.readers; i++) {
		rc = pthread_join(readers[i].tid, NULL);
		if (rc) {
			errno = rc;
			die("pthread_join", NULL);
		}
		reads += readers[i].reads;
		torn += readers[i].torn;
	}
	elapsed = since(&t0);
	atomic_store(&sh.stop, true);
	for (i = 0; i < nwriters; i++) {
		rc = pthread_join(writers[i].tid, NULL);
		if (rc) {
			errno = rc;
			die("pthread_join", NULL);
		}
		writes += writers[i].writes;
	}

	if (o.overlap) {
		/* Quiescent now: a mixed middle can only be two interleaved
		 * writes, so it counts as a torn result even though no reader
		 * raced it. */
		unsigned char *buf = xalloc(sh.read_len);
		int fd = open_file(&sh, O_RDONLY);

		read_once(&sh, fd, buf, sh.read_len, 0);
		final_mixed = is_torn(&o, buf);
		if (final_mixed) {
			fprintf(stderr, PROG ": final state after all writers "
				"stopped is mixed: writes interleaved\n");
			torn++;
		}
		if (close(fd) < 0)
			die("close", sh.path);
		free(buf);
	}

	if (!o.quiet) {
		printf(PROG ": %zu-byte blocks, %u reader(s)%s%s%s%s, %.1f s, %s: "
		       "%" PRIu64 " reads, %" PRIu64 " torn (%.1f%%)\n",
		       o.block, o.readers,
		       o.overlap ? ", 2 overlapping writers" : "",
		       o.direct ? ", O_DIRECT" : "",
		       o.use_read ? ", read()/write()" : "",
		       o.chk ? ", __pread_chk" : "",
		       elapsed, sh.path, reads, torn,
		       reads ? 100.0 * (double)torn / (double)reads : 0.0);
	}
	printf("reads=%" PRIu64 " torn=%" PRIu64 " writes=%" PRIu64 "\n",
	       reads, torn, writes);
	if (fflush(stdout) != 0)
		die("stdout", NULL);

	free(readers);
	if (o.expect_clean && torn > 0)
		return 1;
	return 0;
}
