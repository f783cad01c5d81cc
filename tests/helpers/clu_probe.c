/*
 * clu_probe: one process of a simulated cluster node, for
 * tests/test_cluster.c.  Which node it is on is its RANGESHIM_SHM (each
 * node has a table of its own); the test sets RANGESHIM_SCOPE and
 * RANGESHIM_CLUSTER_FS.
 *
 *   clu_probe write  FILE SECS [direct]   pwrite 1 MiB of one byte value
 *                                         at 0, a new value each time
 *   clu_probe read   FILE SECS [direct]   pread [0, 1 MiB) and count reads
 *                                         that are not of one value (torn);
 *                                         max_gap_ms: longest pread;
 *                                         stale_mixed: mixed reads equal to
 *                                         the one before (a killed writer's
 *                                         partial write, not a race)
 *   clu_probe write  FILE SECS reopen     the same, closing and reopening
 *                                         the file every 20 writes (which
 *                                         gives the node grants back)
 *   clu_probe hammer FILE SECS LEN        pwrite LEN bytes at 0 as often as
 *                                         it can; prints writes=N (fairness)
 *   clu_probe timed  FILE N MS            N rounds: sleep MS ms, then one
 *                                         4 KiB pwrite at 0, timed; prints
 *                                         us=T1,T2,... (with the other node
 *                                         doing the same, each call takes
 *                                         an idle grant from the other node)
 *   clu_probe twice  FILE MS              open, 4 KiB pwrite at 0, close;
 *                                         print "first", sleep MS ms, and
 *                                         again (no grant held between)
 *   clu_probe region FILE OFF LEN IO [ofd]  pwrite [OFF, OFF+LEN) in IO-byte
 *                                         calls, in order (ofd: each under
 *                                         an OFD lock); prints secs=
 * Each prints "key=N ... verdict=PASS", or verdict=FAIL and why.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "probe.h"

#define MiB (1u << 20)

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int open_file(const char *path, int direct)
{
	int fd = open(path, O_RDWR | O_CREAT | (direct ? O_DIRECT : 0), 0600);

	if (fd < 0) {
		printf("verdict=FAIL open %s: %s\n", path, strerror(errno));
		exit(1);
	}
	return fd;
}

int main(int argc, char **argv)
{
	unsigned char *buf;
	int fd, direct;
	double end;

	if (argc < 4) {
		fprintf(stderr, "usage: clu_probe write|read FILE SECS [direct] | region FILE OFF LEN IO\n");
		return 2;
	}
	if (posix_memalign((void **)&buf, 4096, MiB))
		return 1;
	if (strcmp(argv[1], "hammer") == 0) {
		double stop = now_s() + atof(argv[3]);
		size_t len = (size_t)atoll(argv[4]);
		long long writes = 0;

		fd = open_file(argv[2], 0);
		memset(buf, 'h', MiB);
		while (now_s() < stop) {
			if (pwrite(fd, buf, len, 0) != (ssize_t)len) {
				printf("writes=%lld verdict=FAIL pwrite: %s\n", writes, strerror(errno));
				return 1;
			}
			writes++;
		}
		printf("writes=%lld verdict=PASS\n", writes);
		return 0;
	}
	if (strcmp(argv[1], "twice") == 0) {
		setvbuf(stdout, NULL, _IONBF, 0);
		memset(buf, 't', 4096);
		for (int i = 0; i < 2; i++) {
			if (i) {
				printf("first ");
				usleep((useconds_t)atoi(argv[3]) * 1000);
			}
			fd = open_file(argv[2], 0);
			if (pwrite(fd, buf, 4096, 0) != 4096) {
				printf("verdict=FAIL pwrite %d: %s\n", i + 1, strerror(errno));
				return 1;
			}
			close(fd);
		}
		printf("verdict=PASS\n");
		return 0;
	}
	if (strcmp(argv[1], "timed") == 0) {
		int n = atoi(argv[3]), ms = atoi(argv[4]);

		fd = open_file(argv[2], 0);
		memset(buf, 't', 4096);
		printf("us=");
		for (int i = 0; i < n; i++) {
			double t0;

			usleep((useconds_t)ms * 1000);
			t0 = now_s();
			if (pwrite(fd, buf, 4096, 0) != 4096) {
				printf(" verdict=FAIL pwrite: %s\n", strerror(errno));
				return 1;
			}
			printf("%s%.0f", i ? "," : "", (now_s() - t0) * 1e6);
		}
		printf(" verdict=PASS\n");
		return 0;
	}
	if (strcmp(argv[1], "region") == 0) {
		long long off = atoll(argv[3]), len = atoll(argv[4]), io = atoll(argv[5]);

		int ofd = argc > 6 && strcmp(argv[6], "ofd") == 0;
		double t0;

		fd = open_file(argv[2], 0);
		memset(buf, 'r', MiB);
		t0 = now_s();
		for (long long o = off; o < off + len; o += io) {
			struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = o,
					    .l_len = io };

			/* ROMIO's atomic mode: a lock through the file system
			 * around every call. */
			if (ofd && fcntl(fd, F_OFD_SETLKW, &fl) < 0) {
				printf("verdict=FAIL lock: %s\n", strerror(errno));
				return 1;
			}
			if (pwrite(fd, buf, (size_t)io, o) != io) {
				printf("verdict=FAIL pwrite at %lld: %s\n", o, strerror(errno));
				return 1;
			}
			fl.l_type = F_UNLCK;
			if (ofd && fcntl(fd, F_OFD_SETLK, &fl) < 0) {
				printf("verdict=FAIL unlock: %s\n", strerror(errno));
				return 1;
			}
		}
		printf("pid=%d secs=%.4f verdict=PASS\n", (int)getpid(), now_s() - t0);
		return 0;
	}
	direct = argc > 4 && strcmp(argv[4], "direct") == 0;
	int reopen = argc > 4 && strcmp(argv[4], "reopen") == 0;
	fd = open_file(argv[2], direct);
	end = now_s() + atof(argv[3]);
	if (strcmp(argv[1], "write") == 0) {
		long long writes = 0;

		while (now_s() < end) {
			memset(buf, 1 + (int)(writes % 250), MiB);
			if (pwrite(fd, buf, MiB, 0) != (ssize_t)MiB) {
				printf("writes=%lld verdict=FAIL pwrite: %s\n", writes, strerror(errno));
				return 1;
			}
			writes++;
			if (reopen && writes % 20 == 0) {
				close(fd);
				fd = open_file(argv[2], 0);
			}
		}
		printf("writes=%lld verdict=PASS\n", writes);
		return 0;
	}
	if (strcmp(argv[1], "read") == 0) {
		long long reads = 0, torn = 0, stale = 0;
		double last = now_s(), gap = 0;
		unsigned char *prev = malloc(MiB);
		int mixed, prev_mixed = 0, prev_torn = 0;

		while (now_s() < end) {
			ssize_t n = pread(fd, buf, MiB, 0);
			double t = now_s();

			if (t - last > gap)
				gap = t - last;
			last = t;

			if (n < 0) {
				printf("reads=%lld torn=%lld verdict=FAIL pread: %s\n", reads, torn,
				       strerror(errno));
				return 1;
			}
			if (n != (ssize_t)MiB || buf[0] == 0)
				continue;	/* nothing written yet */
			reads++;
			mixed = 0;
			for (size_t i = 1; i < MiB; i++)
				if (buf[i] != buf[0]) {
					mixed = 1;
					break;
				}
			if (mixed && prev_mixed && memcmp(buf, prev, MiB) == 0) {
				/* The same mix twice: nobody writes any more, so
				 * it is a dead writer's partial write, not a race. */
				if (prev_torn) {
					torn--;
					stale++;
				}
				stale++;
				prev_torn = 0;
			} else if (mixed) {
				torn++;
				prev_torn = 1;
			} else {
				prev_torn = 0;
			}
			if (mixed)
				memcpy(prev, buf, MiB);
			prev_mixed = mixed;
		}
		printf("reads=%lld torn=%lld stale_mixed=%lld max_gap_ms=%d verdict=PASS\n", reads,
		       torn, stale, (int)(gap * 1000));
		return 0;
	}
	fprintf(stderr, "clu_probe: unknown mode %s\n", argv[1]);
	return 2;
}
