/*
 * procrand: N processes doing random 4 KiB pread/pwrite (half each) over
 * one shared 16 MiB region of a file: the node table's contended case
 * (issue 9).  Prints the wall time per call of one process.
 *
 *   procrand FILE PROCS CALLS [ofd]
 *
 * With "ofd" every call is wrapped in an OFD lock of its range, the way
 * ROMIO's atomic mode does it; run it without the shim for that mode, and
 * under LD_PRELOAD=build/librangeshim.so for rangeshim's.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REGION (16 << 20)
#define BLOCK 4096

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int worker(const char *file, int id, int calls, int ofd)
{
	char buf[BLOCK];
	unsigned s = (unsigned)id * 7919u + 1;
	int fd = open(file, O_RDWR);

	if (fd < 0)
		return 1;
	memset(buf, id, sizeof(buf));
	for (int i = 0; i < calls; i++) {
		off_t off;
		struct flock fl = { .l_whence = SEEK_SET, .l_len = BLOCK };

		s = s * 1103515245u + 12345u;
		off = (off_t)((s >> 8) % (REGION / BLOCK)) * BLOCK;
		fl.l_start = off;
		fl.l_type = (i & 1) ? F_RDLCK : F_WRLCK;
		if (ofd && fcntl(fd, F_OFD_SETLKW, &fl) < 0)
			return 1;
		if (((i & 1) ? pread(fd, buf, BLOCK, off) : pwrite(fd, buf, BLOCK, off)) != BLOCK)
			return 1;
		fl.l_type = F_UNLCK;
		if (ofd && fcntl(fd, F_OFD_SETLK, &fl) < 0)
			return 1;
	}
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	int procs, calls, ofd, fd, bad = 0, st;
	double t0;

	if (argc < 4) {
		fprintf(stderr, "usage: procrand FILE PROCS CALLS [ofd]\n");
		return 2;
	}
	procs = atoi(argv[2]);
	calls = atoi(argv[3]);
	ofd = argc > 4 && !strcmp(argv[4], "ofd");
	fd = open(argv[1], O_RDWR | O_CREAT, 0600);
	if (fd < 0 || ftruncate(fd, REGION) < 0) {
		perror(argv[1]);
		return 2;
	}
	close(fd);
	t0 = now();
	for (int p = 0; p < procs; p++)
		if (fork() == 0)
			_exit(worker(argv[1], p, calls, ofd));
	while (wait(&st) > 0)
		bad += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
	printf("%.2f us/call\n", (now() - t0) * 1e6 / calls);
	return bad != 0;
}
