/*
 * shared_writer: N threads write disjoint regions of one shared file.
 *
 * This is the N-to-1 checkpoint pattern of the Lustre range-lock patch:
 * thread t owns bytes [t*REGION, (t+1)*REGION) and writes them in BLOCK-sized
 * pwrite()s.  No two writes overlap, so a range lock should let all threads
 * run in parallel while a per-file mutex serialises them; comparing the
 * write rate unlocked, under rangeshim and under RANGESHIM_LOCK=mutex shows
 * what locking costs.
 *
 * Every 512-byte sector of every block starts with a stamp naming its file
 * offset, its thread and its pass, and the rest of the block is a
 * per-thread pseudo-random body.  Verification rebuilds each block and
 * compares, so a lost, misplaced or foreign write makes a bad block.  The
 * stamps are rewritten in place, so building a block costs a few stores, not
 * a copy: the timed phase measures I/O, not pattern generation.
 *
 * Output: one human line and one machine-readable line
 * "threads=N bytes=N seconds=F mbps=F bad_blocks=N".
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PROG "shared_writer"
#include "util.h"

#define ALIGN 4096
#define SECTOR 512
#define MAX_THREADS 1024

struct opts {
	const char *path;       /* NULL: /tmp/rangeshim-shared-writer.<pid> */
	unsigned threads;
	uint64_t region, block, repeat;
	bool direct, fsync, verify, prealloc, keep, quiet;
};

struct shared {
	const struct opts *o;
	const char *path;
	pthread_barrier_t start;
};

struct worker {
	pthread_t tid;
	struct shared *sh;
	unsigned idx;
};

/* What each sector begins with; written with memcpy, so no alignment need. */
struct stamp {
	uint64_t offset;
	uint32_t thread;
	uint32_t pass;
};

static void usage(FILE *f)
{
	fprintf(f,
"Usage: " PROG " [OPTION]...\n"
"N threads each write their own region of one shared file with pwrite(),\n"
"then the file is read back and checked.  Only the write phase is timed.\n"
"\n"
"  --file PATH     file to write; created or truncated, removed at exit\n"
"                  unless --keep (default /tmp/rangeshim-shared-writer.PID)\n"
"  --threads N     writer threads (default 4)\n"
"  --region SIZE   bytes per thread; suffixes k, m, g (default 64M)\n"
"  --block SIZE    bytes per pwrite (default 64K); must divide --region\n"
"  --repeat K      write each region K times (default 1)\n"
"  --direct        open with O_DIRECT; --block must be a multiple of 4096\n"
"  --fsync         each thread fsyncs after its writes, inside the timing\n"
"  --no-prealloc   do not fallocate the file before the timed phase\n"
"                  (extending writes serialise in most file systems)\n"
"  --no-verify     skip the read-back check\n"
"  --keep          do not remove the file at exit\n"
"  --quiet         print only the machine-readable line\n"
"  --help          show this help\n"
"\n"
"Output: a summary line, then\n"
"\"threads=N bytes=N seconds=F mbps=F bad_blocks=N\" (MB = 10^6 bytes).\n"
"Exit status: 0, 1 if verification found bad blocks, 2 on errors.\n");
}

static void parse_args(int argc, char **argv, struct opts *o)
{
	enum { OPT_FILE = 256, OPT_THREADS, OPT_REGION, OPT_BLOCK, OPT_REPEAT, OPT_DIRECT,
	       OPT_FSYNC, OPT_NO_PREALLOC, OPT_NO_VERIFY, OPT_KEEP, OPT_QUIET, OPT_HELP };
	static const struct option lopts[] = {
		{ "file",        required_argument, NULL, OPT_FILE },
		{ "threads",     required_argument, NULL, OPT_THREADS },
		{ "region",      required_argument, NULL, OPT_REGION },
		{ "block",       required_argument, NULL, OPT_BLOCK },
		{ "repeat",      required_argument, NULL, OPT_REPEAT },
		{ "direct",      no_argument,       NULL, OPT_DIRECT },
		{ "fsync",       no_argument,       NULL, OPT_FSYNC },
		{ "no-prealloc", no_argument,       NULL, OPT_NO_PREALLOC },
		{ "no-verify",   no_argument,       NULL, OPT_NO_VERIFY },
		{ "keep",        no_argument,       NULL, OPT_KEEP },
		{ "quiet",       no_argument,       NULL, OPT_QUIET },
		{ "help",        no_argument,       NULL, OPT_HELP },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t v;
	int c;

	*o = (struct opts){ .threads = 4, .region = 64ULL << 20,
			    .block = 64ULL << 10, .repeat = 1,
			    .verify = true, .prealloc = true };
	/* Leading ':' so we print our own messages; 'h' for the habit. */
	while ((c = getopt_long(argc, argv, ":h", lopts, NULL)) != -1) {
		switch (c) {
		case OPT_FILE:
			if (!*optarg)
				usage_error("--file: empty path");
			o->path = optarg;
			break;
		case OPT_THREADS:
			if (!parse_u64(optarg, &v) || v < 1 || v > MAX_THREADS)
				usage_error("--threads: '%s' is not a number from 1 "
					    "to %d", optarg, MAX_THREADS);
			o->threads = (unsigned)v;
			break;
		case OPT_REGION:
			if (!parse_size(optarg, &v))
				usage_error("--region: invalid size '%s'", optarg);
			o->region = v;
			break;
		case OPT_BLOCK:
			/* Bounded so one pwrite is never split by the kernel's
			 * MAX_RW_COUNT and the buffer is allocatable. */
			if (!parse_size(optarg, &v) || v > (1ULL << 30))
				usage_error("--block: invalid size '%s' (1 to 1G)",
					    optarg);
			o->block = v;
			break;
		case OPT_REPEAT:
			if (!parse_u64(optarg, &v) || v < 1 || v > UINT32_MAX)
				usage_error("--repeat: '%s' is not a positive number",
					    optarg);
			o->repeat = v;
			break;
		case OPT_DIRECT:     o->direct = true; break;
		case OPT_FSYNC:       o->fsync = true; break;
		case OPT_NO_PREALLOC: o->prealloc = false; break;
		case OPT_NO_VERIFY:   o->verify = false; break;
		case OPT_KEEP:        o->keep = true; break;
		case OPT_QUIET:       o->quiet = true; break;
		case 'h':
		case OPT_HELP:
			usage(stdout);
			exit(0);
		case ':':
			usage_error("option '%s' needs an argument", argv[optind - 1]);
		default:
			usage_error("unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		usage_error("unexpected argument '%s'", argv[optind]);
	if (o->region % o->block)
		usage_error("--region %" PRIu64 " is not a multiple of --block %"
			    PRIu64, o->region, o->block);
	if (o->direct && o->block % ALIGN)
		usage_error("--direct needs --block to be a multiple of %d", ALIGN);
	if (o->region > (uint64_t)INT64_MAX / o->threads)
		usage_error("--threads x --region is too large");
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

/* Deterministic per-thread body, so verification can rebuild it. */
static void fill_body(unsigned char *buf, size_t len, unsigned thread)
{
	uint64_t x = 0x9e3779b97f4a7c15ULL * (thread + 1);
	size_t i;

	for (i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		buf[i] = (unsigned char)(x >> 24);
	}
}

static void stamp_block(unsigned char *buf, size_t len, uint64_t off,
			unsigned thread, uint32_t pass)
{
	size_t s;

	for (s = 0; s + sizeof(struct stamp) <= len; s += SECTOR) {
		struct stamp st = { .offset = off + s, .thread = thread,
				    .pass = pass };

		memcpy(buf + s, &st, sizeof st);
	}
}

static void write_all(int fd, const unsigned char *buf, size_t len, off_t off,
		      const char *path)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pwrite(fd, buf + done, len - done, off + (off_t)done);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			die("pwrite", path);
		}
		if (n == 0) {
			fprintf(stderr, PROG ": %s: pwrite returned 0\n", path);
			exit(2);
		}
		done += (size_t)n;
	}
}

static int open_file(const struct shared *sh, int flags)
{
	int fd = open(sh->path, flags | (sh->o->direct ? O_DIRECT : 0));

	if (fd < 0) {
		if (errno == EINVAL && sh->o->direct)
			fprintf(stderr, PROG ": %s: O_DIRECT is not supported on "
				"this file system\n", sh->path);
		die("open", sh->path);
	}
	return fd;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct shared *sh = w->sh;
	const struct opts *o = sh->o;
	size_t len = (size_t)o->block;
	unsigned char *buf = xalloc(len);
	uint64_t base = (uint64_t)w->idx * o->region, off;
	uint32_t pass;
	int fd, rc;

	fill_body(buf, len, w->idx);
	fd = open_file(sh, O_WRONLY);
	/* Setup stays outside the timed phase, which starts at this barrier. */
	rc = pthread_barrier_wait(&sh->start);
	if (rc && rc != PTHREAD_BARRIER_SERIAL_THREAD) {
		errno = rc;
		die("pthread_barrier_wait", NULL);
	}
	for (pass = 0; pass < o->repeat; pass++) {
		for (off = base; off < base + o->region; off += len) {
			stamp_block(buf, len, off, w->idx, pass);
			write_all(fd, buf, len, (off_t)off, sh->path);
		}
	}
	if (o->fsync && fsync(fd) < 0)
		die("fsync", sh->path);
	if (close(fd) < 0)
		die("close", sh->path);
	free(buf);
	return NULL;
}

static char *create_file(const struct opts *o, uint64_t total)
{
	char *path;
	int fd;

	if (o->path) {
		path = strdup(o->path);
	} else {
		char tmp[64];

		snprintf(tmp, sizeof tmp, "/tmp/rangeshim-shared-writer.%ld",
			 (long)getpid());
		path = strdup(tmp);
	}
	if (!path)
		die("strdup", NULL);
	/* O_NOFOLLOW: the default name is predictable and lives in /tmp. */
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | (o->path ? 0 : O_NOFOLLOW),
		  0644);
	if (fd < 0)
		die("cannot create", path);
	if (!o->keep)
		cleanup_path = path;
	/* Allocating writes take the inode lock exclusively in ext4 and
	 * others, which would serialise the threads before any shim could. */
	if (o->prealloc && fallocate(fd, 0, 0, (off_t)total) < 0) {
		if (errno != EOPNOTSUPP)
			die("fallocate", path);
		if (ftruncate(fd, (off_t)total) < 0)
			die("ftruncate", path);
	}
	if (close(fd) < 0)
		die("close", path);
	return path;
}

/* Reads the file back block by block; returns the number of bad blocks. */
static uint64_t verify(const struct shared *sh)
{
	const struct opts *o = sh->o;
	size_t len = (size_t)o->block;
	unsigned char *want = xalloc(len), *got = xalloc(len);
	uint32_t last = (uint32_t)(o->repeat - 1);
	uint64_t bad = 0, off;
	unsigned t;
	int fd = open(sh->path, O_RDONLY);

	if (fd < 0)
		die("open", sh->path);
	for (t = 0; t < o->threads; t++) {
		uint64_t base = (uint64_t)t * o->region;

		fill_body(want, len, t);
		for (off = base; off < base + o->region; off += len) {
			size_t done = 0;

			while (done < len) {
				ssize_t n = pread(fd, got + done, len - done,
						  (off_t)(off + done));

				if (n < 0 && errno == EINTR)
					continue;
				if (n < 0)
					die("pread", sh->path);
				if (n == 0)
					break;   /* file too short: block is bad */
				done += (size_t)n;
			}
			stamp_block(want, len, off, t, last);
			if (done != len || memcmp(want, got, len) != 0) {
				if (bad == 0 && !o->quiet)
					fprintf(stderr, PROG ": first bad block at "
						"offset %" PRIu64 " (thread %u)\n",
						off, t);
				bad++;
			}
		}
	}
	if (close(fd) < 0)
		die("close", sh->path);
	free(want);
	free(got);
	return bad;
}

int main(int argc, char **argv)
{
	struct opts o;
	struct shared sh;
	struct worker *workers;
	struct timespec t0, t1;
	uint64_t bytes, bad = 0;
	double secs, mbps;
	char region_s[32], block_s[32], passes[48] = "";
	unsigned i;
	int rc, fd;

	parse_args(argc, argv, &o);
	if (atexit(remove_file))
		die("atexit", NULL);

	sh.o = &o;
	sh.path = create_file(&o, o.region * o.threads);
	/* Fail cleanly here, not from inside N threads, if O_DIRECT is out. */
	fd = open_file(&sh, O_WRONLY);
	if (close(fd) < 0)
		die("close", sh.path);

	rc = pthread_barrier_init(&sh.start, NULL, o.threads + 1);
	if (rc) {
		errno = rc;
		die("pthread_barrier_init", NULL);
	}
	workers = calloc(o.threads, sizeof *workers);
	if (!workers)
		die("calloc", NULL);
	for (i = 0; i < o.threads; i++) {
		workers[i].sh = &sh;
		workers[i].idx = i;
		rc = pthread_create(&workers[i].tid, NULL, worker_main, &workers[i]);
		if (rc) {
			errno = rc;
			die("pthread_create", NULL);
		}
	}
	rc = pthread_barrier_wait(&sh.start);
	if (rc && rc != PTHREAD_BARRIER_SERIAL_THREAD) {
		errno = rc;
		die("pthread_barrier_wait", NULL);
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (i = 0; i < o.threads; i++) {
		rc = pthread_join(workers[i].tid, NULL);
		if (rc) {
			errno = rc;
			die("pthread_join", NULL);
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	pthread_barrier_destroy(&sh.start);
	free(workers);

	if (o.verify)
		bad = verify(&sh);

	bytes = o.region * o.threads * o.repeat;
	secs = (double)(t1.tv_sec - t0.tv_sec) +
	       (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	mbps = secs > 0 ? (double)bytes / 1e6 / secs : 0;
	if (!o.quiet) {
		fmt_size(region_s, sizeof region_s, o.region);
		fmt_size(block_s, sizeof block_s, o.block);
		if (o.repeat > 1)
			snprintf(passes, sizeof passes, " x %" PRIu64 " passes",
				 o.repeat);
		printf(PROG ": %u threads x %s%s in %s blocks (%s%s): %.1f MB/s, ",
		       o.threads, region_s, passes, block_s,
		       o.direct ? "O_DIRECT" : "buffered", o.fsync ? ", fsync" : "",
		       mbps);
		if (!o.verify)
			printf("verify skipped\n");
		else if (bad)
			printf("verify FAILED: %" PRIu64 " bad blocks\n", bad);
		else
			printf("verify ok\n");
	}
	printf("threads=%u bytes=%" PRIu64 " seconds=%.6f mbps=%.1f bad_blocks=%"
	       PRIu64 "\n", o.threads, bytes, secs, mbps, bad);
	if (fflush(stdout) != 0)
		die("stdout", NULL);
	return bad ? 1 : 0;
}
