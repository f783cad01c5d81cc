/*
 * idlegrants: two processes writing random 4 KiB blocks of one shared
 * 16 MiB region (they meet everywhere, so their grants turn exact:
 * nodelock.c, "Exact grants") while a third process holds IDLE cached
 * grants on other files and does nothing.  The "idle grants" row of the
 * scale table (tests/bench/scale.sh): an acquisition's cost should follow
 * the grants of its own file, not the table's.  Prints the wall time per
 * write of one writer, and the writers' CPU time (user and system) per
 * write, which a machine shared with other work disturbs less.
 *
 *   idlegrants DIR IDLE CALLS
 *
 * The idle process opens IDLE files DIR/idle.N, writes 4 KiB once to each
 * and keeps them open (its grants stay cached), then waits until the
 * writers are done.  IDLE 0 is the same run without it.  Exit status 1 if
 * a call failed.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REGION (16 << 20)
#define BLOCK 4096

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int idle(const char *dir, int n, int ready, int done)
{
	static char buf[BLOCK];
	char path[4096], c = 1;
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)n + 64) {
		rl.rlim_cur = (rlim_t)n + 64 < rl.rlim_max ? (rlim_t)n + 64 : rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	for (int i = 0; i < n; i++) {
		int fd;

		snprintf(path, sizeof(path), "%s/idle.%d", dir, i);
		fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
		if (fd < 0 || pwrite(fd, buf, sizeof(buf), 0) != (ssize_t)sizeof(buf)) {
			perror(path);
			return 1;
		}
	}
	if (write(ready, &c, 1) != 1 || read(done, &c, 1) < 0)
		return 1;
	return 0;
}

static int writer(const char *file, int id, int calls)
{
	static char buf[BLOCK];
	unsigned long long x = 88172645463325252ull + (unsigned long long)id * 7919u;
	int fd = open(file, O_RDWR);

	if (fd < 0)
		return 1;
	memset(buf, 'a' + id, sizeof(buf));
	for (int i = 0; i < calls; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		if (pwrite(fd, buf, BLOCK, (off_t)(x % (REGION / BLOCK)) * BLOCK) != BLOCK)
			return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static char zero[1 << 20];
	char path[4096], c;
	int n, calls, fd, st, bad = 0, ready[2], done[2];
	pid_t ip = -1;
	double t0, t, cpu = 0;
	struct rusage ru;

	if (argc != 4 || (n = atoi(argv[2])) < 0 || (calls = atoi(argv[3])) < 1) {
		fprintf(stderr, "usage: idlegrants DIR IDLE CALLS\n");
		return 2;
	}
	snprintf(path, sizeof(path), "%s/region", argv[1]);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0) {
		perror(path);
		return 2;
	}
	for (off_t o = 0; o < REGION; o += (off_t)sizeof(zero))
		if (pwrite(fd, zero, sizeof(zero), o) != (ssize_t)sizeof(zero)) {
			perror(path);
			return 2;
		}
	close(fd);
	if (pipe(ready) < 0 || pipe(done) < 0)
		return 2;
	if (n > 0) {
		ip = fork();
		if (ip == 0) {
			close(done[1]);
			exit(idle(argv[1], n, ready[1], done[0]));
		}
		if (read(ready[0], &c, 1) != 1)
			return 2;
	}
	t0 = now();
	for (int w = 0; w < 2; w++)
		if (fork() == 0)
			exit(writer(path, w, calls));
	for (int w = 0; w < 2; w++) {
		if (wait4(-1, &st, 0, &ru) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
			bad++;
		cpu += (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
		       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
	}
	t = (now() - t0) * 1e6 / calls;
	close(done[1]);
	if (ip > 0 && (waitpid(ip, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0))
		bad++;
	printf("%.2f us/call cpu=%.2f bad=%d\n", t, cpu * 1e6 / (2.0 * calls), bad);
	return bad != 0;
}
