/*
 * spawn: posix_spawn, posix_spawnp and vfork while other threads write.
 *
 *   spawn FILE [iters=N] [threads=T]
 *
 * T threads rewrite and read back their own 64 KiB blocks of FILE.  The
 * main thread starts N children, round robin:
 *   0  posix_spawn of this program, stdout opened by a file action on
 *      FILE.log with O_APPEND; the child writes one line with write(1);
 *   1  vfork, then dup2 of an O_APPEND fd of FILE.log onto 1 and close of
 *      the original in the child, then execv of this program (as 0);
 *   2  vfork, then _exit at once;
 *   3  posix_spawnp of "sh -c 'echo LINE >> FILE.log'" found on PATH.
 * Afterwards FILE.log must hold exactly one intact line per child of modes
 * 0, 1 and 3, and each thread's block its last write.
 */
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "compat.h"

#define BLK (64 * 1024)
#define LINE 32

extern char **environ;

static int fd;
static _Atomic int stop;
static long bad, expect, lines;
static _Atomic long thread_writes;

static void *writer(void *arg)
{
	long t = (long)arg;
	unsigned char *b = xalloc(BLK), *r = xalloc(BLK);

	for (unsigned gen = 0; !atomic_load(&stop); gen++) {
		memset(b, 1 + (int)((t * 13 + gen) % 250), BLK);
		if (pwrite_full(fd, b, BLK, (off_t)t * BLK) < 0 ||
		    pread_full(fd, r, BLK, (off_t)t * BLK) < 0)
			die("thread %ld I/O", t);
		if (memcmp(b, r, BLK) != 0)
			die("thread %ld: its block does not hold its last write", t);
		atomic_fetch_add(&thread_writes, 1);
	}
	free(b);
	free(r);
	return NULL;
}

static void line_for(char *buf, long i)
{
	/* exactly LINE bytes with the newline (i < 10^8) */
	snprintf(buf, LINE + 1, "spawn %08lu m%u .............\n", (unsigned long)i % 100000000,
		 (unsigned)(i & 3));
}

/* vfork in functions of their own: the child borrows their frames only. */
static pid_t __attribute__((noinline)) vfork_exec(int lfd, char **cargv)
{
	pid_t p = vfork();

	if (p == 0) {
		if (dup2(lfd, 1) != 1)
			_exit(126);
		close(lfd);
		execv(cargv[0], cargv);
		_exit(127);
	}
	return p;
}

static pid_t __attribute__((noinline)) vfork_exit(void)
{
	pid_t p = vfork();

	if (p == 0)
		_exit(0);
	return p;
}

static int child_main(long i)
{
	char l[LINE + 1];

	line_for(l, i);
	if (write(1, l, LINE) != LINE)
		die("child write");
	return 0;
}

int main(int argc, char **argv)
{
	pthread_t th[64];
	char logpath[4200], num[32], cmd[4400], l[LINE + 1];
	long iters;
	int nthreads;
	FILE *f;

	if (argc >= 3 && strcmp(argv[1], "child") == 0)
		return child_main(atol(argv[2]));
	if (argc < 2)
		die("usage: spawn FILE [iters=N] [threads=T]");
	iters = arg_num(argc, argv, "iters", 200);
	nthreads = (int)arg_num(argc, argv, "threads", 4);
	if (nthreads < 1 || nthreads > 64)
		die("threads must be 1..64");
	snprintf(logpath, sizeof(logpath), "%s.log", argv[1]);
	fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		die("open %s", argv[1]);
	if (close(open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0644)) != 0)
		die("create %s", logpath);
	for (long t = 0; t < nthreads; t++)
		if (pthread_create(&th[t], NULL, writer, (void *)t) != 0)
			die("pthread_create");
	for (long i = 0; i < iters; i++) {
		char *cargv[5] = { argv[0], (char *)"child", num, NULL, NULL };
		posix_spawn_file_actions_t fa;
		pid_t p = -1;
		int lfd, e;

		snprintf(num, sizeof(num), "%ld", i);
		switch (i % 4) {
		case 0:
			posix_spawn_file_actions_init(&fa);
			posix_spawn_file_actions_addopen(&fa, 1, logpath, O_WRONLY | O_APPEND, 0);
			e = posix_spawn(&p, argv[0], &fa, NULL, cargv, environ);
			posix_spawn_file_actions_destroy(&fa);
			if (e != 0) {
				errno = e;
				die("posix_spawn");
			}
			expect++;
			break;
		case 1:
			lfd = open(logpath, O_WRONLY | O_APPEND);
			if (lfd < 0)
				die("open %s", logpath);
			p = vfork_exec(lfd, cargv);
			if (p < 0)
				die("vfork");
			close(lfd);
			expect++;
			break;
		case 2:
			p = vfork_exit();
			if (p < 0)
				die("vfork");
			break;
		default:
			line_for(l, i);
			l[LINE - 1] = '\0';
			snprintf(cmd, sizeof(cmd), "echo '%s' >> '%s'", l, logpath);
			cargv[0] = (char *)"sh";
			cargv[1] = (char *)"-c";
			cargv[2] = cmd;
			e = posix_spawnp(&p, "sh", NULL, NULL, cargv, environ);
			if (e != 0) {
				errno = e;
				die("posix_spawnp");
			}
			expect++;
			break;
		}
		if (wait_child(p, "spawn", i) < 0)
			bad++;
	}
	atomic_store(&stop, 1);
	for (int t = 0; t < nthreads; t++)
		pthread_join(th[t], NULL);
	close(fd);
	f = fopen(logpath, "r");
	if (!f)
		die("fopen %s", logpath);
	{
		char got[256];
		char *seen = calloc((size_t)iters + 1, 1);

		while (fgets(got, sizeof(got), f)) {
			long i;
			char want[LINE + 1];

			lines++;
			if (sscanf(got, "spawn %ld", &i) != 1 || i < 0 || i >= iters) {
				fprintf(stderr, "spawn: bad line in log: %s", got);
				bad++;
				continue;
			}
			line_for(want, i);
			if (strcmp(got, want) != 0 || seen[i]++) {
				fprintf(stderr, "spawn: wrong or repeated line: %s", got);
				bad++;
			}
		}
		free(seen);
	}
	fclose(f);
	if (lines != expect) {
		fprintf(stderr, "spawn: %ld lines in the log, expected %ld\n", lines, expect);
		bad++;
	}
	fprintf(stderr, "spawn: children=%ld lines=%ld thread_writes=%ld bad=%ld shim=%d\n", iters,
		lines, (long)thread_writes, bad, shim_loaded());
	if (bad) {
		printf("spawn FAIL: %ld problems\n", bad);
		return 1;
	}
	printf("spawn ok children=%ld lines=%ld\n", iters, lines);
	return 0;
}
