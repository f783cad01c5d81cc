/*
 * attached: what a process pays to start and leave when many others are
 * attached to the node table, which holds up to 4096 of them.
 *
 *   attached FILE N M
 *
 * N processes each make one pwrite to FILE (attaching, under the shim)
 * and stay; then M processes, one after another, each make one pwrite to
 * FILE.x and exit.  Prints the wall time per process of the M, which
 * includes the fork, the attach (registration) and the exit.  Run it
 * with and without LD_PRELOAD=build/librangeshim.so; the difference is
 * the shim's.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Let the holders go, reap them, and leave no file behind. */
static int give_up(const char *what, int gate_w, const char *path)
{
	int st;

	fprintf(stderr, "attached: %s\n", what);
	close(gate_w);
	while (wait(&st) > 0)
		;
	unlink(path);
	return 2;
}

int main(int argc, char **argv)
{
	static char buf[4096];
	char path[4096];
	int n, m, fd, fx, gate[2], ready[2], bad = 0, st;
	double t0, t1;

	if (argc != 4 || (n = atoi(argv[2])) < 0 || (m = atoi(argv[3])) < 1) {
		fprintf(stderr, "usage: attached FILE N M\n");
		return 2;
	}
	snprintf(path, sizeof(path), "%s.x", argv[1]);
	fd = open(argv[1], O_RDWR | O_CREAT, 0600);
	fx = open(path, O_RDWR | O_CREAT, 0600);
	if (fd < 0 || fx < 0 || pipe(gate) < 0 || pipe(ready) < 0) {
		perror("attached");
		return 2;
	}
	for (int i = 0; i < n; i++) {
		pid_t p = fork();

		if (p < 0)
			return give_up("fork failed", gate[1], path);
		if (!p) {
			char y;

			/* Only the parent keeps the write ends: a holder that
			 * fails, or the last one to report, leaves it the end of
			 * file, never a wait. */
			close(gate[1]);
			close(ready[0]);
			if (pwrite(fd, buf, sizeof(buf), (off_t)(i % 256) * 4096) != sizeof(buf) ||
			    write(ready[1], "", 1) != 1)
				_exit(1);
			close(ready[1]);
			(void)!read(gate[0], &y, 1);	/* until the parent closes it */
			_exit(0);
		}
	}
	/* Every holder has written, so every one is attached. */
	close(ready[1]);
	for (int i = 0; i < n; i++) {
		char y;

		if (read(ready[0], &y, 1) != 1)
			return give_up("a holder failed", gate[1], path);
	}
	t0 = now();
	for (int i = 0; i < m; i++) {
		pid_t p = fork();

		if (p < 0)
			return give_up("fork failed", gate[1], path);
		if (!p)
			_exit(pwrite(fx, buf, sizeof(buf), 0) == sizeof(buf) ? 0 : 1);
		if (waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st))
			bad++;
	}
	t1 = now();
	close(gate[1]);
	while (wait(&st) > 0)
		bad += !WIFEXITED(st) || WEXITSTATUS(st);
	unlink(path);
	printf("%.1f us/process\n", (t1 - t0) / m * 1e6);
	return bad ? 1 : 0;
}
