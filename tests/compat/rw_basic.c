/*
 * rw_basic: read/write/pread/pwrite/readv/writev/lseek on one file, then a
 * writer thread racing a reader thread on 256 KiB blocks.  compat.mk builds
 * it three ways: plain, with -O2 -D_FORTIFY_SOURCE=2 (read and pread bind
 * to __read_chk and __pread_chk / __pread64_chk) and with
 * -D_FILE_OFFSET_BITS=64 (pread64, pwrite64, lseek64, open64).  run.sh
 * checks the bindings with nm, and that the shim counted the calls.
 *
 *   rw_basic FILE [seconds]
 *
 * Prints "rw_basic sum=HEX" (the deterministic file's checksum) and the
 * race's counts; exit 0 if every call returned what it should, and (under
 * RS_COMPAT_STRICT=1) no read was torn.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include "compat.h"

#define REC 4096
#define NREC 64
#define RACE (256 * 1024)

static char path_race[4200];
static _Atomic int stop;
static unsigned char rbuf[RACE];	/* a fixed object: fortify knows its size */
/* Lengths the compiler cannot prove safe, so that fortified builds call
 * __read_chk and __pread_chk instead of the plain functions. */
static volatile size_t opaque_zero;

static void *writer(void *arg)
{
	int fd = *(int *)arg;
	unsigned char *b = xalloc(RACE);
	long n = 0;

	while (!atomic_load(&stop)) {
		memset(b, (int)(n++ % 2 ? 0xAA : 0x55), RACE);
		if (pwrite(fd, b, RACE, 0) != RACE)
			die("race pwrite");
	}
	free(b);
	return (void *)n;
}

int main(int argc, char **argv)
{
	unsigned char rec[REC], back[REC];
	struct iovec iov[2];
	uint64_t sum = 1469598103934665603ull;
	double secs = argc > 2 ? atof(argv[2]) : 1.0;
	long reads = 0, torn = 0;
	pthread_t t;
	void *wn;
	off_t o;
	int fd;

	if (argc < 2) {
		fprintf(stderr, "usage: rw_basic FILE [seconds]\n");
		return 2;
	}
	fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		die("open %s", argv[1]);
	for (int i = 0; i < NREC; i++) {
		memset(rec, i, sizeof(rec));
		if (write(fd, rec, sizeof(rec)) != REC)
			die("write %d", i);
	}
	if ((o = lseek(fd, 0, SEEK_CUR)) != NREC * REC)
		die("lseek says %lld", (long long)o);
	if (lseek(fd, 0, SEEK_SET) != 0)
		die("lseek 0");
	for (int i = 0; i < NREC; i++) {
		size_t want = sizeof(back) - (size_t)(i % 3) + opaque_zero;

		if (read(fd, back, want) != (ssize_t)want || back[0] != i || !uniform(back, want))
			die("read %d", i);
		if (lseek(fd, (off_t)(sizeof(back) - want), SEEK_CUR) < 0)
			die("lseek cur");
	}
	for (int i = NREC - 1; i >= 0; i -= 7) {
		size_t want = sizeof(back) - (size_t)(i % 5) + opaque_zero;

		if (pread(fd, back, want, (off_t)i * REC) != (ssize_t)want || back[0] != i ||
		    !uniform(back, want))
			die("pread %d", i);
	}
	/* Overwrite odd records in place, two at a time through writev. */
	for (int i = 1; i + 2 < NREC; i += 4) {
		unsigned char a[REC], b[REC];

		memset(a, 0xF0 | (i & 15), sizeof(a));
		memset(b, 0x0F, sizeof(b));
		iov[0] = (struct iovec){ a, sizeof(a) };
		iov[1] = (struct iovec){ b, sizeof(b) };
		if (lseek(fd, (off_t)i * REC, SEEK_SET) != (off_t)i * REC)
			die("lseek %d", i);
		if (writev(fd, iov, 2) != 2 * REC)
			die("writev %d", i);
	}
	for (int i = 2; i < NREC; i += 8) {
		memset(rec, 0x80 + i, sizeof(rec));
		if (pwrite(fd, rec, sizeof(rec), (off_t)i * REC) != REC)
			die("pwrite %d", i);
	}
	if (lseek(fd, 0, SEEK_SET) != 0)
		die("lseek");
	for (int i = 0; i < NREC; i += 2) {
		iov[0] = (struct iovec){ rec, sizeof(rec) };
		iov[1] = (struct iovec){ back, sizeof(back) };
		if (readv(fd, iov, 2) != 2 * REC)
			die("readv %d", i);
		for (int k = 0; k < REC; k++)
			sum = (sum ^ rec[k]) * 1099511628211ull;
		for (int k = 0; k < REC; k++)
			sum = (sum ^ back[k]) * 1099511628211ull;
	}
	/* A second description of the file, opened with flags the compiler
	 * cannot see (fortified: __open_2), shares its range lock. */
	{
		int fd2 = open(argv[1], O_RDONLY | (int)opaque_zero);

		if (fd2 < 0 || pread(fd2, back, sizeof(back) + opaque_zero, 3 * REC) != REC ||
		    back[0] != 3 || close(fd2) != 0)
			die("second open");
	}
	/* Past the end: 0, as without the shim. */
	if (read(fd, back, sizeof(back)) != 0 || pread(fd, back, sizeof(back), 1 << 30) != 0)
		die("read past EOF");
	if (close(fd) != 0)
		die("close");
	printf("rw_basic sum=%016llx\n", (unsigned long long)sum);
	fflush(stdout);

	/* The race: a torn read is a mix of 0x55 and 0xAA. */
	snprintf(path_race, sizeof(path_race), "%s.race", argv[1]);
	fd = open(path_race, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		die("open %s", path_race);
	memset(rbuf, 0x55, sizeof(rbuf));
	if (pwrite(fd, rbuf, sizeof(rbuf), 0) != RACE)
		die("pwrite race");
	if (pthread_create(&t, NULL, writer, &fd) != 0)
		die("pthread_create");
	for (uint64_t end = now_ns() + (uint64_t)(secs * 1e9); now_ns() < end; reads++) {
		size_t want = sizeof(rbuf) - (size_t)(reads & 1) + opaque_zero;

		if (pread(fd, rbuf, want, 0) != (ssize_t)want)
			die("race pread");
		torn += !uniform(rbuf, want);
	}
	atomic_store(&stop, 1);
	pthread_join(t, &wn);
	close(fd);
	unlink(path_race);
	fprintf(stderr, "rw_basic race: reads=%ld writes=%ld torn=%ld shim=%d\n", reads, (long)wn,
		torn, shim_loaded());
	if (torn && strict_mode()) {
		printf("rw_basic FAIL: %ld of %ld reads torn under the shim\n", torn, reads);
		return 1;
	}
	return 0;
}
