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
 *   clonefiles FILE HOW MS  this process writes a 1 MiB record (so that
 *                 it holds a node grant), then makes a process that
 *                 shares its descriptor table and not its memory
 *                 (HOW "clone": glibc's clone(CLONE_FILES | SIGCHLD);
 *                 "syscall": syscall(SYS_clone, CLONE_FILES | SIGCHLD,
 *                 0, ...)), which exits at once; then it pwrites 1 MiB
 *                 records of changing value at offset 0 while a forked
 *                 reader process preads them for MS ms.  Prints the
 *                 reader's "reads=R torn=T".
 *   clonefiles_closefrom FILE MS  the other way round: the process made
 *                 by clone(CLONE_FILES | SIGCHLD) is the writer, and once
 *                 it holds a grant the parent closes every descriptor
 *                 above FILE's with closefrom (a daemon's clean-up; the
 *                 parent's shim knows nothing of the child's table
 *                 descriptor in the shared table).  A forked reader then
 *                 preads for MS ms.  Prints "reads=R torn=T".
 *   vfork_kill FILE READER MS  this process writes a 1 MiB record (a
 *                 node grant held), then vforks a child that pwrites
 *                 256 MiB to FILE and is killed (SIGKILL, by a thread of
 *                 ours) inside that call.  Then this process pwrites 1 MiB
 *                 records of changing value at offset 0 while a reader
 *                 preads them for MS ms: READER "process" is a forked
 *                 process, "thread" a thread of ours (for process scope).
 *                 Prints "child=killed" (or what became of the child),
 *                 the reader's "reads=R torn=T", and "reader=stuck" if it
 *                 made no progress for 10 s (it waited on what the dead
 *                 child left).
 *   clone_vfork_kill FILE READER MS  the same with the child made by
 *                 clone(CLONE_VM | CLONE_VFORK | SIGCHLD) on a stack of
 *                 its own.
 *   vfork_dup2 FILE MS  this process writes a 1 MiB record (attached, a
 *                 grant held), then vforks a child that dup2s FILE's fd
 *                 onto the number of our node table descriptor (found in
 *                 /proc/self/fd by RANGESHIM_SHM's name; a number that is
 *                 free in its own fd table, to the child) and exits, as
 *                 a child that passes a descriptor at a fixed number
 *                 does.  Then this process closes every descriptor above
 *                 FILE's (closefrom, a daemon's clean-up) and pwrites
 *                 1 MiB records of changing value at offset 0 while a
 *                 forked reader preads them for MS ms.  Prints
 *                 "table=N" (-1 without the shim) and the reader's
 *                 "reads=R torn=T".
 *   vfork_exit FILE MS  this process writes a 1 MiB record (attached, a
 *                 grant held), then vforks a child whose execve fails and
 *                 which then calls exit(127), not _exit (common in
 *                 fork-then-exec code moved to vfork): atexit handlers
 *                 and destructors run in the child, in our memory.  Then
 *                 this process pwrites 1 MiB records of changing value at
 *                 offset 0 while a forked reader preads them for MS ms.
 *                 Prints "child=N" (its exit status) and the reader's
 *                 "reads=R torn=T".
 *   seg_truncate FILE  this process writes a 1 MiB record (attached, a
 *                 grant held), then truncates its node table's file to 0
 *                 bytes by a raw system call, as another process of the
 *                 same user (or a bug) can, and writes FILE again.
 *                 Prints "table=N" (-1 without the shim: nothing to
 *                 truncate) and "survived" after the second write.
 *   vfork_mt FILE MS  a thread of ours pwrites 1 MiB records of changing
 *                 value at offset 0 while the main thread, for MS ms,
 *                 vforks children that each pwrite one 1 MiB record
 *                 there and _exit, and posix_spawns /bin/true between
 *                 them (glibc's posix_spawn: clone(CLONE_VM |
 *                 CLONE_VFORK) inside libc); a forked reader preads the
 *                 records.  Prints "children=C spawns=S" and the
 *                 reader's "reads=R torn=T".
 *   clonefiles_dup2 FILE MS  as vfork_dup2, with the child made by
 *                 clone(CLONE_FILES | SIGCHLD): it shares our descriptor
 *                 table, not our memory, and dup2s FILE's fd onto our
 *                 node table descriptor's number.  Then this process
 *                 closes every descriptor above FILE's (closefrom) and
 *                 writes while a forked reader reads.  Prints "table=N"
 *                 and the reader's "reads=R torn=T".
 *   vfork_wait_kill FILE  a thread of ours pwrites 64 MiB records to FILE
 *                 at offset 0 in a loop while a vfork child pwrites 4 KiB
 *                 there, which must wait for the thread's range lock
 *                 (process scope), and is killed (SIGKILL, by another
 *                 thread of ours) 2 ms in, while it waits.  Then the
 *                 thread stops and this process pwrites 4 KiB once more:
 *                 "after=ok", or "after=stuck" if that call has not
 *                 returned in 10 s (it waits behind the dead child's
 *                 queued lock).  Prints "child=killed" (or its status).
 *   vfork_redirect FILE MS  this process writes to a pipe (so that its
 *                 fd number is known to the shim as one that passes
 *                 through), then, for MS ms, vforks children that dup2
 *                 FILE's fd onto that number, as a redirection does, and
 *                 pwrite a 1 MiB record of changing value at offset 0
 *                 through it before they _exit; a forked reader preads
 *                 the records.  Prints "children=C" and the reader's
 *                 "reads=R torn=T".
 *   vfork_emfile FILE  this process writes FILE (attached), lowers its
 *                 descriptor limit to 64 and opens /dev/null until EMFILE,
 *                 then vforks a child that pwrites 1 byte to FILE and
 *                 _exits with 0, or with the call's errno.  Prints
 *                 "child=E" (0: written; -1: killed).  A child that waits
 *                 for a descriptor it can never get hangs the program
 *                 (the test's timeout ends it).
 *   cfr_dup2 F G  opens X and Y on F and Z on G (none truncated); a
 *                 thread copy_file_range(X, &0, Y, &4096, 4096) with
 *                 explicit offsets (no offset lock held) while the main
 *                 thread waits for SIGUSR1 (the test sends it once the
 *                 thread waits for F's node grant, which the test holds),
 *                 then dup2(Z, Y) and prints "dup2 done"; then prints the
 *                 thread's "cfr=R" (R: the result, or -errno) and
 *                 "verdict=done".
 *   growsdown FILE  LTP mmap18's first case: reserve 256 pages plus a
 *                 thread stack, unmap it all and map only the stack's top
 *                 with MAP_GROWSDOWN, leaving the hole below for the stack
 *                 to grow into; then make this process's first write to a
 *                 regular file (where the shim maps its node table), and
 *                 run a thread on that stack down to its bottom.  Prints
 *                 "grew=ok", or dies of SIGSEGV (status 139) if anything
 *                 was mapped in the hole.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
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
/* Reads made so far, in memory a forked reader shares (vfork_kill). */
static _Atomic long *reads_done;

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
		if (reads_done)
			atomic_fetch_add(reads_done, 1);
		torn += !probe_uniform(b, BIG);
	} while ((probe_now() - t0) * 1e3 < ms);
	printf("reads=%ld torn=%ld\n", reads, torn);
	free(b);
}

/* ---- clonefiles ------------------------------------------------------ */

static int clone_exit(void *arg)
{
	(void)arg;
	return 0;
}

static int clonefiles(const char *how, double ms)
{
	char *stk = malloc(1 << 16);
	pid_t c, reader;
	int st;

	fill_records();	/* our first write: attached, a grant held */
	if (!strcmp(how, "syscall")) {
		c = (pid_t)syscall(SYS_clone, CLONE_FILES | SIGCHLD, 0, 0, 0, 0);
		if (c == 0)
			_exit(0);
	} else {
		c = clone(clone_exit, stk + (1 << 16), CLONE_FILES | SIGCHLD, NULL);
	}
	if (c < 0 || waitpid(c, &st, 0) != c) {
		printf("verdict=skip clone: %s\n", strerror(errno));
		return 0;
	}
	fflush(stdout);
	reader = fork();
	if (reader == 0) {
		read_for(ms);
		fflush(stdout);
		_exit(0);
	}
	for (long k = 1; waitpid(reader, &st, WNOHANG) == 0; k++)
		if (pwrite(fd, wbuf[k % 2], BIG, 0) != BIG)
			abort();
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		printf("reader=status %d\n", st);
	return 0;
}

static _Atomic int *shared_flags;	/* [0] the child holds a grant, [1] stop */

static int clone_writer(void *arg)
{
	(void)arg;
	if (pwrite(fd, wbuf[0], BIG, 0) != BIG)
		return 3;
	atomic_store(&shared_flags[0], 1);
	for (long k = 1; !atomic_load(&shared_flags[1]); k++)
		if (pwrite(fd, wbuf[k % 2], BIG, 0) != BIG)
			return 4;
	return 0;
}

static int clonefiles_closefrom(double ms)
{
	char *stk = malloc(1 << 16);
	pid_t c, reader;
	int st;

	shared_flags = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (shared_flags == MAP_FAILED || !stk)
		abort();
	fill_records();
	c = clone(clone_writer, stk + (1 << 16), CLONE_FILES | SIGCHLD, NULL);
	if (c < 0) {
		printf("verdict=skip clone: %s\n", strerror(errno));
		return 0;
	}
	while (!atomic_load(&shared_flags[0]))
		sched_yield();
	closefrom(fd + 1);
	fflush(stdout);
	reader = fork();
	if (reader == 0) {
		read_for(ms);
		fflush(stdout);
		_exit(0);
	}
	waitpid(reader, &st, 0);
	atomic_store(&shared_flags[1], 1);
	waitpid(c, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		printf("writer=status %d\n", st);
	return 0;
}

/* ---- vfork_kill ------------------------------------------------------- */

#define HUGE (256 << 20)

static volatile pid_t vchild;

static void *killer(void *arg)
{
	(void)arg;
	while (!vchild)
		sched_yield();
	usleep(3000);	/* well inside a 256 MiB pwrite */
	kill(vchild, SIGKILL);
	return NULL;
}

static void *read_thread(void *arg)
{
	read_for(*(double *)arg);
	atomic_store(&stop_writer, 1);
	return NULL;
}

static int clone_vfork_child(void *huge)
{
	vchild = getpid();
	(void)!pwrite(fd, huge, HUGE, 0);
	return 0;
}

/* The vfork, in a frame of its own: the child's pwrite is killed.  With
 * by_clone, the child is made by clone(CLONE_VM | CLONE_VFORK) and runs
 * on a stack of its own, as posix_spawn's does. */
static __attribute__((noinline)) pid_t vfork_writer(char *huge, int by_clone)
{
	static char stk[1 << 16] __attribute__((aligned(16)));
	pid_t c;

	if (by_clone)
		return clone(clone_vfork_child, stk + sizeof(stk), CLONE_VM | CLONE_VFORK | SIGCHLD,
			     huge);
	c = vfork();

	if (c == 0) {
		vchild = getpid();
		(void)!pwrite(fd, huge, HUGE, 0);
		_exit(0);
	}
	return c;
}

static int vfork_kill(const char *how, double ms, int by_clone)
{
	char *huge = malloc(HUGE);
	pthread_t kt, rt;
	pid_t c, reader = -1;
	int st;
	long last = -1;
	double quiet = probe_now();

	reads_done = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (!huge || reads_done == MAP_FAILED)
		abort();
	memset(huge, 'z', HUGE);
	fill_records();
	if (pthread_create(&kt, NULL, killer, NULL))
		abort();
	c = vfork_writer(huge, by_clone);
	if (c < 0 || waitpid(c, &st, 0) != c)
		abort();
	pthread_join(kt, NULL);
	if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)
		printf("child=killed\n");
	else
		printf("child=status %d\n", st);
	fflush(stdout);
	/* The killed child left [0, 1 MiB) half written: one whole record
	 * first, so that a torn read is a race, not that leftover. */
	if (pwrite(fd, wbuf[0], BIG, 0) != BIG)
		abort();
	if (!strcmp(how, "thread")) {
		if (pthread_create(&rt, NULL, read_thread, &ms))
			abort();
	} else {
		reader = fork();
		if (reader == 0) {
			read_for(ms);
			fflush(stdout);
			_exit(0);
		}
	}
	/* Write until the reader is done; a reader that makes no progress
	 * for 10 s waits on something nobody will give back. */
	for (long k = 1;; k++) {
		if (reader > 0 ? waitpid(reader, &st, WNOHANG) != 0 : atomic_load(&stop_writer))
			break;
		if (pwrite(fd, wbuf[k % 2], BIG, 0) != BIG)
			abort();
		if (atomic_load(reads_done) != last) {
			last = atomic_load(reads_done);
			quiet = probe_now();
		} else if (probe_now() - quiet > 10 + ms / 1e3) {
			printf("reader=stuck\n");
			fflush(stdout);
			_exit(0);
		}
	}
	if (reader < 0)
		pthread_join(rt, NULL);
	return 0;
}

/* ---- vfork_dup2 ------------------------------------------------------ */

/* The number of our node table descriptor, or -1. */
static int table_fd(void)
{
	const char *shm = getenv("RANGESHIM_SHM");
	char want[300], p[300], l[512];
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = -1;

	if (!d || !shm)
		return d ? (closedir(d), -1) : -1;
	snprintf(want, sizeof(want), "/dev/shm%s", shm);
	while ((e = readdir(d))) {
		ssize_t k;

		snprintf(p, sizeof(p), "/proc/self/fd/%s", e->d_name);
		k = readlink(p, l, sizeof(l) - 1);
		if (k <= 0)
			continue;
		l[k] = 0;
		if (!strcmp(l, want))
			n = atoi(e->d_name);
	}
	closedir(d);
	return n;
}

static __attribute__((noinline)) pid_t vfork_dup2_child(int n)
{
	pid_t c = vfork();

	if (c == 0) {
		if (n >= 0)
			dup2(fd, n);
		_exit(0);
	}
	return c;
}

static int vfork_dup2(double ms)
{
	pid_t c, reader;
	int st, n;

	fill_records();	/* our first write: attached, a grant held */
	n = table_fd();
	printf("table=%d\n", n);
	c = vfork_dup2_child(n);
	if (c < 0 || waitpid(c, &st, 0) != c)
		abort();
	closefrom(fd + 1);
	fflush(stdout);
	reader = fork();
	if (reader == 0) {
		read_for(ms);
		fflush(stdout);
		_exit(0);
	}
	for (long k = 1; waitpid(reader, &st, WNOHANG) == 0; k++)
		if (pwrite(fd, wbuf[k % 2], BIG, 0) != BIG)
			abort();
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		printf("reader=status %d\n", st);
	return 0;
}

static __attribute__((noinline)) pid_t vfork_exit_child(void)
{
	pid_t c = vfork();

	if (c == 0) {
		char *argv[] = { "/nonexistent/rs-edge-probe", NULL };

		execv(argv[0], argv);
		exit(127);
	}
	return c;
}

static int vfork_exit(double ms)
{
	pid_t c, reader;
	int st;

	fill_records();	/* our first write: attached, a grant held */
	fflush(stdout);	/* the child's exit flushes stdio in our memory */
	c = vfork_exit_child();
	if (c < 0 || waitpid(c, &st, 0) != c)
		abort();
	printf("child=%d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	fflush(stdout);
	reader = fork();
	if (reader == 0) {
		read_for(ms);
		fflush(stdout);
		_exit(0);
	}
	for (long k = 1; waitpid(reader, &st, WNOHANG) == 0; k++)
		if (pwrite(fd, wbuf[k % 2], BIG, 0) != BIG)
			abort();
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		printf("reader=status %d\n", st);
	return 0;
}

static int seg_truncate(void)
{
	char l[PATH_MAX], p[64];
	ssize_t k;
	int n;

	fill_records();
	n = table_fd();
	printf("table=%d\n", n);
	fflush(stdout);
	if (n >= 0) {
		snprintf(p, sizeof(p), "/proc/self/fd/%d", n);
		k = readlink(p, l, sizeof(l) - 1);
		if (k <= 0)
			abort();
		l[k] = 0;
		if (syscall(SYS_truncate, l, 0L) < 0)
			abort();
	}
	if (pwrite(fd, wbuf[1], BIG, 0) != BIG)
		abort();
	printf("survived\n");
	return 0;
}

static __attribute__((noinline)) pid_t vfork_write_child(long k)
{
	pid_t c = vfork();

	if (c == 0) {
		if (pwrite(fd, wbuf[k % 2], BIG, 0) != BIG)
			_exit(3);
		_exit(0);
	}
	return c;
}

static int vfork_mt(double ms)
{
	extern char **environ;
	char *targv[] = { "/bin/true", NULL };
	pthread_t w;
	pid_t c, reader;
	long children = 0, spawns = 0;
	double t0;
	int st;

	fill_records();
	reader = fork();
	if (reader == 0) {
		read_for(ms);
		fflush(stdout);
		_exit(0);
	}
	if (pthread_create(&w, NULL, writer, NULL))
		abort();
	t0 = probe_now();
	for (long k = 0; (probe_now() - t0) * 1e3 < ms; k++) {
		c = vfork_write_child(k);
		if (c < 0 || waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st))
			printf("child=status %d\n", st);
		children++;
		if (posix_spawn(&c, targv[0], NULL, NULL, targv, environ) == 0 &&
		    waitpid(c, &st, 0) == c)
			spawns++;
	}
	atomic_store(&stop_writer, 1);
	pthread_join(w, NULL);
	printf("children=%ld spawns=%ld\n", children, spawns);
	fflush(stdout);
	waitpid(reader, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		printf("reader=status %d\n", st);
	return 0;
}

static int clone_dup2_child(void *arg)
{
	int n = *(int *)arg;

	if (n >= 0 && dup2(fd, n) != n)
		return 3;
	return 0;
}

static int clonefiles_dup2(double ms)
{
	char *stk = malloc(1 << 16);
	pid_t c, reader;
	int st, n;

	if (!stk)
		abort();
	fill_records();	/* our first write: attached, a grant held */
	n = table_fd();
	printf("table=%d\n", n);
	c = clone(clone_dup2_child, stk + (1 << 16), CLONE_FILES | SIGCHLD, &n);
	if (c < 0 || waitpid(c, &st, 0) != c) {
		printf("verdict=skip clone: %s\n", strerror(errno));
		return 0;
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		printf("child=status %d\n", st);
	closefrom(fd + 1);
	fflush(stdout);
	reader = fork();
	if (reader == 0) {
		read_for(ms);
		fflush(stdout);
		_exit(0);
	}
	for (long k = 1; waitpid(reader, &st, WNOHANG) == 0; k++)
		if (pwrite(fd, wbuf[k % 2], BIG, 0) != BIG)
			abort();
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		printf("reader=status %d\n", st);
	return 0;
}

static void *big_writer(void *arg)
{
	while (!atomic_load(&stop_writer))
		if (pwrite(fd, arg, 64 << 20, 0) != 64 << 20)
			abort();
	return NULL;
}

static void *killer2(void *arg)
{
	(void)arg;
	while (!vchild)
		sched_yield();
	usleep(2000);	/* inside the child's wait for the writer's lock */
	kill(vchild, SIGKILL);
	return NULL;
}

static void stuck(int sig)
{
	(void)sig;
	(void)!write(1, "after=stuck\n", 12);
	_exit(0);
}

static __attribute__((noinline)) pid_t vfork_small_child(const char *b)
{
	pid_t c = vfork();

	if (c == 0) {
		vchild = getpid();
		(void)!pwrite(fd, b, 4096, 0);
		_exit(0);
	}
	return c;
}

static int vfork_wait_kill(void)
{
	static char small[4096];
	char *big = malloc(64 << 20);
	pthread_t w, kt;
	pid_t c;
	int st;

	if (!big)
		abort();
	memset(big, 'w', 64 << 20);
	if (pwrite(fd, big, 64 << 20, 0) != 64 << 20)
		abort();
	if (pthread_create(&w, NULL, big_writer, big))
		abort();
	usleep(1000);
	if (pthread_create(&kt, NULL, killer2, NULL))
		abort();
	c = vfork_small_child(small);
	if (c < 0 || waitpid(c, &st, 0) != c)
		abort();
	pthread_join(kt, NULL);
	if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)
		printf("child=killed\n");
	else
		printf("child=status %d\n", st);
	atomic_store(&stop_writer, 1);
	fflush(stdout);
	signal(SIGALRM, stuck);
	alarm(10);
	pthread_join(w, NULL);
	if (pwrite(fd, small, sizeof(small), 0) != (ssize_t)sizeof(small))
		abort();
	alarm(0);
	printf("after=ok\n");
	return 0;
}

static __attribute__((noinline)) pid_t vfork_redirect_child(int n, long k)
{
	pid_t c = vfork();

	if (c == 0) {
		if (dup2(fd, n) != n || pwrite(n, wbuf[k % 2], BIG, 0) != BIG)
			_exit(3);
		_exit(0);
	}
	return c;
}

static int vfork_redirect(double ms)
{
	int p[2], st;
	long children = 0;
	pid_t c, reader;
	double t0;

	if (pipe(p) < 0 || write(p[1], "x", 1) != 1)
		abort();
	fill_records();
	reader = fork();
	if (reader == 0) {
		read_for(ms);
		fflush(stdout);
		_exit(0);
	}
	t0 = probe_now();
	for (long k = 1; (probe_now() - t0) * 1e3 < ms; k++) {
		c = vfork_redirect_child(p[1], k);
		if (c < 0 || waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st))
			printf("child=status %d\n", st);
		children++;
	}
	printf("children=%ld\n", children);
	fflush(stdout);
	waitpid(reader, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		printf("reader=status %d\n", st);
	return 0;
}

static __attribute__((noinline)) pid_t vfork_emfile_child(void)
{
	pid_t c = vfork();

	if (c == 0) {
		ssize_t r = pwrite(fd, "y", 1, 0);

		_exit(r == 1 ? 0 : errno);
	}
	return c;
}

static int vfork_emfile(void)
{
	struct rlimit rl = { 64, 64 };
	pid_t c;
	int st, n = 0;

	if (pwrite(fd, "x", 1, 0) != 1)
		abort();
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max > 64)
		rl.rlim_max = 64;
	rl.rlim_cur = 64;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
		printf("verdict=skip setrlimit: %s\n", strerror(errno));
		return 0;
	}
	while (open("/dev/null", O_RDONLY) >= 0)
		n++;
	printf("filled=%d\n", n);
	fflush(stdout);
	c = vfork_emfile_child();
	if (c < 0 || waitpid(c, &st, 0) != c)
		abort();
	printf("child=%d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	return 0;
}

/* ---- growsdown ------------------------------------------------------- */

static long page;

/* The lowest address of a stack of stack_size whose top mapped_size
 * bytes are mapped MAP_GROWSDOWN, with 256 free pages below it (the
 * kernel's stack_guard_gap), as mmap18's allocate_stack. */
static char *allocate_stack(size_t stack_size, size_t mapped_size)
{
	size_t reserved = 256 * (size_t)page + stack_size;
	char *start = mmap(NULL, reserved, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (start == MAP_FAILED || munmap(start, reserved) < 0 ||
	    mmap(start + reserved - mapped_size, mapped_size, PROT_READ | PROT_WRITE,
		 MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_GROWSDOWN, -1, 0) == MAP_FAILED)
		abort();
	return start + reserved - stack_size;
}

static __attribute__((noinline)) void *deeper(void *limit)
{
	volatile char pad[64];

	pad[0] = 1;
	if ((char *)&limit < (char *)limit)
		return (void *)(long)pad[0];
	return deeper(limit);
}

/* How many mappings of /proc/self/maps overlap [lo, hi). */
static int mapped_in(const char *lo, const char *hi)
{
	FILE *f = fopen("/proc/self/maps", "r");
	unsigned long a, b;
	char line[512];
	int n = 0;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%lx-%lx", &a, &b) == 2 && a < (unsigned long)hi &&
		    b > (unsigned long)lo)
			n++;
	fclose(f);
	return n;
}

static int growsdown(void)
{
	size_t stack_size = 8 * (size_t)PTHREAD_STACK_MIN;
	char *stack;
	pthread_attr_t attr;
	pthread_t t;

	page = sysconf(_SC_PAGESIZE);
	stack = allocate_stack(stack_size, PTHREAD_STACK_MIN);
	/* The process's first write to a regular file. */
	if (pwrite(fd, "x", 1, 0) != 1)
		abort();
	/* The hole and its guard gap: from 256 pages below the stack's
	 * bottom to the mapped top. */
	printf("in_hole=%d\n", mapped_in(stack - 256 * page, stack + stack_size - PTHREAD_STACK_MIN));
	fflush(stdout);
	if (pthread_attr_init(&attr) || pthread_attr_setstack(&attr, stack, stack_size) ||
	    pthread_create(&t, &attr, deeper, stack + page) || pthread_join(t, NULL))
		abort();
	printf("grew=ok\n");
	return 0;
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

/* ---- cfr_dup2 ----------------------------------------------------------- */

static int cfr_x, cfr_y;
static ssize_t cfr_result;

static void *cfr_copier(void *arg)
{
	off_t in = 0, out = 4096;

	(void)arg;
	cfr_result = copy_file_range(cfr_x, &in, cfr_y, &out, 4096, 0);
	if (cfr_result < 0)
		cfr_result = -errno;
	return NULL;
}

static int cfr_dup2(const char *f, const char *g)
{
	sigset_t usr1;
	pthread_t t;
	int z, sig;

	cfr_x = open(f, O_RDWR);
	cfr_y = open(f, O_RDWR);
	z = open(g, O_RDWR);
	if (cfr_x < 0 || cfr_y < 0 || z < 0)
		abort();
	/* Blocked before the thread exists (it inherits the mask), so the
	 * test's signal, sent once the thread waits, is never lost. */
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	if (pthread_sigmask(SIG_BLOCK, &usr1, NULL) || pthread_create(&t, NULL, cfr_copier, NULL))
		abort();
	if (sigwait(&usr1, &sig))
		abort();
	if (dup2(z, cfr_y) != cfr_y)
		abort();
	printf("dup2 done\n");
	fflush(stdout);
	pthread_join(t, NULL);
	printf("cfr=%zd\nverdict=done\n", cfr_result);
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
	if (!strcmp(argv[1], "cfr_dup2") && argc >= 4)
		return cfr_dup2(path, argv[3]);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		abort();
	if ((!strcmp(argv[1], "vfork_kill") || !strcmp(argv[1], "clone_vfork_kill")) && argc >= 5) {
		vfork_kill(argv[3], atof(argv[4]), argv[1][0] == 'c');
	} else if (!strcmp(argv[1], "clonefiles_dup2") && argc >= 4) {
		clonefiles_dup2(atof(argv[3]));
	} else if (!strcmp(argv[1], "vfork_wait_kill")) {
		vfork_wait_kill();
	} else if (!strcmp(argv[1], "vfork_redirect") && argc >= 4) {
		vfork_redirect(atof(argv[3]));
	} else if (!strcmp(argv[1], "vfork_emfile")) {
		vfork_emfile();
	} else if (!strcmp(argv[1], "vfork_mt") && argc >= 4) {
		vfork_mt(atof(argv[3]));
	} else if (!strcmp(argv[1], "seg_truncate")) {
		seg_truncate();
	} else if (!strcmp(argv[1], "vfork_exit") && argc >= 4) {
		vfork_exit(atof(argv[3]));
	} else if (!strcmp(argv[1], "vfork_dup2") && argc >= 4) {
		vfork_dup2(atof(argv[3]));
	} else if (!strcmp(argv[1], "clonefiles_closefrom") && argc >= 4) {
		clonefiles_closefrom(atof(argv[3]));
	} else if (!strcmp(argv[1], "clonefiles") && argc >= 5) {
		clonefiles(argv[3], atof(argv[4]));
	} else if (!strcmp(argv[1], "growsdown")) {
		growsdown();
	} else if (!strcmp(argv[1], "dlmopen") && argc >= 4) {
		dlmopen_race(atof(argv[3]));
	} else {
		fprintf(stderr, "edge_probe: unknown mode %s\n", argv[1]);
		return 2;
	}
	close(fd);
	unlink(path);
	return 0;
}
