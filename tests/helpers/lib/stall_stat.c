/*
 * libstall_stat.so (tests/helpers/lib/): preloaded into `rangeshim agent
 * --foreground` by tests/test_cluster_adv.c (agent_idle_exit_race) to play
 * a loaded machine that stops the agent's poller thread in the middle of
 * a tick, at a point chosen by the test rather than by the scheduler.
 * The first stat() of the path RS_STALL_PATH made by a thread other than
 * the main one (the agent's poller: its first tick's look at the node
 * table's name, table_check) waits until the file RS_STALL_UNTIL exists,
 * at most 60 s; it says "stall: begin" and "stall: end" on stderr.  The
 * main thread's own looks at that path (registration) pass.  Built as a
 * shared object by the Makefile; never preloaded into a test runner.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int stat(const char *restrict path, struct stat *restrict st);

static atomic_int stalled;

static void stall(const char *path)
{
	const char *want = getenv("RS_STALL_PATH"), *until = getenv("RS_STALL_UNTIL");

	if (!want || !until || strcmp(path, want) != 0 || syscall(SYS_gettid) == getpid() ||
	    atomic_exchange(&stalled, 1))
		return;
	fprintf(stderr, "stall: begin\n");
	for (int i = 0; i < 6000 && access(until, F_OK) != 0; i++)
		usleep(10000);
	fprintf(stderr, "stall: end\n");
}

int stat(const char *restrict path, struct stat *restrict st)
{
	int (*real)(const char *restrict, struct stat *restrict) =
		(int (*)(const char *restrict, struct stat *restrict))dlsym(RTLD_NEXT, "stat");

	stall(path);
	return real(path, st);
}
