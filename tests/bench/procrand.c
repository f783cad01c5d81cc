/*
 * procrand: N processes meeting on one file, the node table's contended
 * cases (issue 9).  Prints the wall time per call of one process and what
 * it checked: every read of a block must see one write whole (a block is
 * written with one byte value throughout), every appended line must be
 * intact.
 *
 *   procrand FILE PROCS CALLS [WORKLOAD] [ofd]
 *
 * WORKLOAD:
 *   rand    (default) random 4 KiB pread/pwrite, half each, over one shared
 *           16 MiB region
 *   rand1m  the same over one shared 1 MiB region (256 blocks): hundreds
 *           of processes meet on few blocks (the scale cell)
 *   same    pwrite of the same 4 KiB block, one checking pread per 16
 *   stride  each process pwrites and preads its own 64 KiB blocks,
 *           interleaved with the others' (block k belongs to process k % N)
 *   pair    the same with 2 blocks per process: grants can settle on
 *           each process's own blocks (nodelock.c, "Expansion")
 *   own     random 4 KiB pread/pwrite, each process in its own 16 MiB
 *           (the disjoint case, for comparison: no process meets another)
 *   ownw    the same with pwrite only: issue 9's "disjoint regions"
 *           target (processes each writing their own 16 MiB)
 *   append  100-byte lines written to an O_APPEND file (FILE is truncated
 *           first), checked line by line at the end
 *
 * With "together" every process is forked before any starts, and the
 * clock starts when they do: all of them are alive for the whole run.
 * Without it, the first processes may finish while the parent is still
 * forking the last, and never meet them.
 *
 * With "ofd" every call is wrapped in an OFD lock of its range (appends:
 * the whole file), the way ROMIO's atomic mode does it; run it without
 * the shim for that mode, and under LD_PRELOAD=build/librangeshim.so for
 * rangeshim's.  Exit status 1 if a call failed or a check found damage.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REGION (16 << 20)
#define BLOCK 4096
#define SBLOCK (64 << 10)
#define LINE 100

enum { RAND, SAME, STRIDE, PAIR, OWN, APPEND, OWNW, RAND1M };

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int uniform(const unsigned char *b, size_t n)
{
	for (size_t i = 1; i < n; i++)
		if (b[i] != b[0])
			return 0;
	return 1;
}

/* Returns the number of torn reads, or -1 if a call failed. */
static long worker(const char *file, int id, int procs, int calls, int work, int ofd)
{
	static unsigned char buf[SBLOCK];
	unsigned s = (unsigned)id * 7919u + 1;
	long torn = 0;
	int fd = open(file, work == APPEND ? O_WRONLY | O_APPEND : O_RDWR);

	if (fd < 0)
		return -1;
	for (int i = 0; i < calls; i++) {
		struct flock fl = { .l_whence = SEEK_SET };
		size_t len = work == STRIDE || work == PAIR ? SBLOCK : BLOCK;
		/* same: mostly writes, a checking read per 16 calls, as the
		 * threads' table does (iobench contended); else half each. */
		int rd = work == SAME ? i % 16 == 15 : work == OWNW ? 0 : i & 1;
		off_t off = 0;
		ssize_t n;

		s = s * 1103515245u + 12345u;
		if (work == RAND)
			off = (off_t)((s >> 8) % (REGION / BLOCK)) * BLOCK;
		else if (work == RAND1M)
			off = (off_t)((s >> 8) % ((1 << 20) / BLOCK)) * BLOCK;
		else if (work == OWN || work == OWNW)
			off = (off_t)id * REGION + (off_t)((s >> 8) % (REGION / BLOCK)) * BLOCK;
		else if (work == STRIDE)
			off = (off_t)(((s >> 8) % (REGION / SBLOCK / procs)) * procs + id) * SBLOCK;
		else if (work == PAIR)
			off = (off_t)(((s >> 8) % 2) * procs + id) * SBLOCK;
		if (work == APPEND) {
			len = LINE;
			rd = 0;
			snprintf((char *)buf, sizeof(buf), "%08d %08d ", id, i);
			memset(buf + 18, 'a' + id % 26, LINE - 19);
			buf[LINE - 1] = '\n';
		} else if (!rd) {
			memset(buf, (id * 31 + i) & 0xff, len);
		}
		fl.l_start = work == APPEND ? 0 : off;
		fl.l_len = work == APPEND ? 0 : (off_t)len;
		fl.l_type = rd ? F_RDLCK : F_WRLCK;
		if (ofd && fcntl(fd, F_OFD_SETLKW, &fl) < 0)
			return -1;
		if (work == APPEND)
			n = write(fd, buf, len);
		else
			n = rd ? pread(fd, buf, len, off) : pwrite(fd, buf, len, off);
		fl.l_type = F_UNLCK;
		if (ofd && fcntl(fd, F_OFD_SETLK, &fl) < 0)
			return -1;
		if (n != (ssize_t)len)
			return -1;
		torn += rd && !uniform(buf, len);
	}
	close(fd);
	return torn;
}

/* Every line: "ID SEQ " then one letter repeated, then '\n'; each
 * process's sequence numbers in order. */
static long check_lines(const char *file, int procs, int calls, long *lines)
{
	FILE *f = fopen(file, "r");
	char line[LINE + 2];
	int next[1024] = { 0 };
	long bad = 0;

	*lines = 0;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		int id, seq;

		++*lines;
		if (strlen(line) != LINE || sscanf(line, "%8d %8d ", &id, &seq) != 2 ||
		    id < 0 || id >= procs || seq != next[id]) {
			bad++;
			continue;
		}
		next[id]++;
		for (int i = 18; i < LINE - 1; i++)
			if (line[i] != 'a' + id % 26) {
				bad++;
				break;
			}
	}
	fclose(f);
	if (*lines != (long)procs * calls)
		bad++;
	return bad;
}

int main(int argc, char **argv)
{
	int procs, calls, ofd = 0, work = RAND, fd, bad = 0, st, together = 0, gate[2] = { -1, -1 };
	long *torn;
	double t0, t;

	if (argc < 4) {
		fprintf(stderr, "usage: procrand FILE PROCS CALLS [rand|rand1m|same|stride|pair|own|ownw|append] [ofd] [together]\n");
		return 2;
	}
	procs = atoi(argv[2]);
	calls = atoi(argv[3]);
	for (int i = 4; i < argc; i++) {
		if (!strcmp(argv[i], "ofd"))
			ofd = 1;
		else if (!strcmp(argv[i], "together"))
			together = 1;
		else if (!strcmp(argv[i], "rand"))
			work = RAND;
		else if (!strcmp(argv[i], "rand1m"))
			work = RAND1M;
		else if (!strcmp(argv[i], "same"))
			work = SAME;
		else if (!strcmp(argv[i], "stride"))
			work = STRIDE;
		else if (!strcmp(argv[i], "pair"))
			work = PAIR;
		else if (!strcmp(argv[i], "own"))
			work = OWN;
		else if (!strcmp(argv[i], "append"))
			work = APPEND;
		else if (!strcmp(argv[i], "ownw"))
			work = OWNW;
		else {
			fprintf(stderr, "procrand: unknown argument '%s'\n", argv[i]);
			return 2;
		}
	}
	if (procs < 1 || procs > 1024 || calls < 1) {
		fprintf(stderr, "procrand: bad PROCS or CALLS\n");
		return 2;
	}
	/* Appends start from an empty file; the others from a region of
	 * zeros, written before the clock starts, so that no run times page
	 * allocation and no read sees an earlier run's blocks. */
	fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0) {
		perror(argv[1]);
		return 2;
	}
	if (work != APPEND) {
		static char zero[1 << 20];

		for (off_t o = 0; o < (off_t)REGION * (work == OWN || work == OWNW ? procs : 1);
		     o += (off_t)sizeof(zero))
			if (pwrite(fd, zero, sizeof(zero), o) != (ssize_t)sizeof(zero)) {
				perror(argv[1]);
				return 2;
			}
	}
	close(fd);
	torn = mmap(NULL, sizeof(long) * (size_t)procs, PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (torn == MAP_FAILED)
		return 2;
	/* Each process waits for end of file on the gate: when the parent
	 * closes its write end, after the last fork. */
	if (together && pipe(gate) < 0) {
		perror("pipe");
		return 2;
	}
	t0 = now();
	for (int p = 0; p < procs; p++)
		if (fork() == 0) {
			if (together) {
				char c;

				close(gate[1]);
				while (read(gate[0], &c, 1) < 0 && errno == EINTR)
					;
			}
			torn[p] = worker(argv[1], p, procs, calls, work, ofd);
			exit(torn[p] < 0);	/* exit: the shim writes its stats */
		}
	if (together) {
		close(gate[0]);
		t0 = now();
		close(gate[1]);
	}
	while (wait(&st) > 0)
		bad += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
	t = (now() - t0) * 1e6 / calls;
	if (work == APPEND) {
		long lines, b = check_lines(argv[1], procs, calls, &lines);

		printf("%.2f us/call lines=%ld bad=%ld\n", t, lines, b);
		bad += b != 0;
	} else {
		long sum = 0;

		for (int p = 0; p < procs; p++)
			sum += torn[p] > 0 ? torn[p] : 0;
		printf("%.2f us/call torn=%ld\n", t, sum);
		bad += sum != 0;
	}
	return bad != 0;
}
