/*
 * Shared by the Criterion suites: run a helper program, with the shim
 * preloaded in the child's environment only (never into the runner, which
 * forks a worker per test), and capture its output.
 */
#ifndef RANGESHIM_TESTS_COMMON_H
#define RANGESHIM_TESTS_COMMON_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef RS_BUILD_DIR
#define RS_BUILD_DIR "build"
#endif

#define RS_LIB RS_BUILD_DIR "/librangeshim.so"
#define RS_HELPER(name) RS_BUILD_DIR "/tests/helpers/" name
#define RS_EXAMPLE(name) RS_BUILD_DIR "/examples/" name

struct rs_run {
	int status;         /* exit code, or 128 + signal, or -1 on timeout */
	char out[65536];    /* stdout and stderr, interleaved, NUL-terminated */
};

/*
 * Run argv (argv[0] is a path).  env is a NULL-terminated list of
 * "NAME=VALUE" added to the child's environment; preload adds the shim.
 * Kills the child after timeout_s seconds.
 */
static inline int rs_run(struct rs_run *r, char *const argv[], const char *const env[],
			 int preload, int timeout_s)
{
	int pipefd[2];
	size_t used = 0;
	pid_t pid;
	int st;
	struct timespec t0, t1;

	r->status = -1;
	r->out[0] = '\0';
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		dup2(pipefd[1], 1);
		dup2(pipefd[1], 2);
		unsetenv("LD_PRELOAD");
		for (int i = 0; env && env[i]; i++)
			putenv((char *)env[i]);
		if (preload)
			setenv("LD_PRELOAD", RS_LIB, 1);
		execv(argv[0], argv);
		fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(pipefd[1]);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct pollfd p = { pipefd[0], POLLIN, 0 };
		ssize_t n;

		clock_gettime(CLOCK_MONOTONIC, &t1);
		if (t1.tv_sec - t0.tv_sec > timeout_s) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			close(pipefd[0]);
			r->status = -1;
			return -1;
		}
		if (poll(&p, 1, 200) <= 0)
			continue;
		n = read(pipefd[0], r->out + used, sizeof(r->out) - 1 - used);
		if (n <= 0)
			break;
		used += (size_t)n;
		if (used == sizeof(r->out) - 1)
			used = 0;	/* keep the tail: the summary lines come last */
		r->out[used] = '\0';
	}
	close(pipefd[0]);
	waitpid(pid, &st, 0);
	r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	return r->status;
}

/* The value of "key=N" in s, or -1. */
static inline long long rs_field(const char *s, const char *key)
{
	size_t k = strlen(key);

	for (const char *p = s; (p = strstr(p, key)) != NULL; p += k) {
		if ((p == s || p[-1] == ' ' || p[-1] == '\n') && p[k] == '=')
			return strtoll(p + k + 1, NULL, 10);
	}
	return -1;
}

#endif
