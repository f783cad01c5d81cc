/*
 * edge_probe MODE ...: rigs for the edges of fail-safe locking
 * (tests/test_edge.c runs each without the shim, the control, and with
 * it).
 *
 *   sparse FILE SIZE  ftruncate FILE to SIZE and store to every page of a
 *                 shared mapping of it: how the node table was made
 *                 before it was allocated whole.  On a full tmpfs this
 *                 dies of SIGBUS (status 135): the control of full_shm.
 *   write FILE    write 64 KiB records of one value to FILE and read them
 *                 back: "verdict=ok" if the file holds every byte.
 *   dlmopen FILE MS  a thread made by the pthread_create of a libc loaded
 *                 into a new link-map namespace (dlmopen(LM_ID_NEWLM))
 *                 pwrites 1 MiB records of changing value at offset 0
 *                 while the main thread preads them for MS ms.  Only
 *                 the new namespace's __libc_single_threaded is cleared.
 *                 Prints "reads=R torn=T".
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/single_threaded.h>
#include <sys/wait.h>
#include <unistd.h>

#include "probe.h"

#define BIG (1 << 20)

static const char *path;
static int fd;

/* ---- sparse, write ---------------------------------------------------- */

static int sparse(const char *file, long size)
{
	int f = open(file, O_RDWR | O_CREAT | O_TRUNC, 0600);
	char *p;

	if (f < 0 || ftruncate(f, size) < 0) {
		printf("verdict=skip cannot make %s: %s\n", file, strerror(errno));
		return 0;
	}
	p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
	if (p == MAP_FAILED) {
		printf("verdict=skip cannot map %s: %s\n", file, strerror(errno));
		return 0;
	}
	memset(p, 1, (size_t)size);	/* SIGBUS here on a full tmpfs */
	printf("touched=%ld\n", size);
	return 0;
}

static int write_back(const char *file)
{
	static char rec[64 * 1024], got[64 * 1024];
	int f = open(file, O_RDWR | O_CREAT | O_TRUNC, 0600);
	int bad = 0;

	if (f < 0)
		abort();
	for (int i = 0; i < 16; i++) {
		memset(rec, 'a' + i, sizeof(rec));
		if (write(f, rec, sizeof(rec)) != (ssize_t)sizeof(rec))
			bad++;
	}
	for (int i = 0; i < 16; i++) {
		memset(rec, 'a' + i, sizeof(rec));
		if (pread(f, got, sizeof(got), (off_t)i * (off_t)sizeof(got)) != (ssize_t)sizeof(got) ||
		    memcmp(rec, got, sizeof(got)))
			bad++;
	}
	close(f);
	printf(bad ? "verdict=bad %d records\n" : "verdict=ok\n", bad);
	return 0;
}

/* ---- a writer thread and a reading main thread ------------------------ */

static _Atomic int stop_writer;
static unsigned char *wbuf[2];

static void *writer(void *arg)
{
	(void)arg;
	for (long k = 0; !atomic_load(&stop_writer); k++)
		if (pwrite(fd, wbuf[k % 2], BIG, 0) != BIG)
			abort();
	return NULL;
}

static void fill_records(void)
{
	for (int i = 0; i < 2; i++) {
		wbuf[i] = malloc(BIG);
		if (!wbuf[i])
			abort();
		memset(wbuf[i], 'a' + i, BIG);
	}
	if (pwrite(fd, wbuf[0], BIG, 0) != BIG)
		abort();
}

/* Read [0, BIG) for ms milliseconds; prints reads and torn. */
static void read_for(double ms)
{
	unsigned char *b = malloc(BIG);
	long reads = 0, torn = 0;
	double t0 = probe_now();

	if (!b)
		abort();
	do {
		if (pread(fd, b, BIG, 0) != BIG)
			abort();
		reads++;
		torn += !probe_uniform(b, BIG);
	} while ((probe_now() - t0) * 1e3 < ms);
	printf("reads=%ld torn=%ld\n", reads, torn);
	free(b);
}

/* ---- dlmopen ---------------------------------------------------------- */

static int dlmopen_race(double ms)
{
	int (*create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
	int (*join)(pthread_t, void **);
	void *h = dlmopen(LM_ID_NEWLM, "libc.so.6", RTLD_NOW | RTLD_LOCAL);
	pthread_t t;

	if (!h) {
		printf("verdict=skip dlmopen libc.so.6: %s\n", dlerror());
		return 0;
	}
	create = (int (*)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *))
		dlsym(h, "pthread_create");
	join = (int (*)(pthread_t, void **))dlsym(h, "pthread_join");
	if (!create || !join) {
		printf("verdict=skip no pthread_create in the new namespace\n");
		return 0;
	}
	fill_records();
	if (create(&t, NULL, writer, NULL)) {
		printf("verdict=skip the new namespace's pthread_create failed\n");
		return 0;
	}
	/* Ours is still set: the premise of the rig. */
	printf("single_threaded=%d\n", (int)__libc_single_threaded);
	read_for(ms);
	atomic_store(&stop_writer, 1);
	join(t, NULL);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: edge_probe MODE FILE ...\n");
		return 2;
	}
	path = argv[2];
	if (!strcmp(argv[1], "sparse") && argc >= 4)
		return sparse(path, atol(argv[3]));
	if (!strcmp(argv[1], "write"))
		return write_back(path);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		abort();
	if (!strcmp(argv[1], "dlmopen") && argc >= 4) {
		dlmopen_race(atof(argv[3]));
	} else {
		fprintf(stderr, "edge_probe: unknown mode %s\n", argv[1]);
		return 2;
	}
	close(fd);
	unlink(path);
	return 0;
}
