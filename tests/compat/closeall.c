/*
 * closeall: daemon-style "close every descriptor" code in a process that
 * is already using the node lock table, then I/O that must still be
 * coordinated with other processes.
 *
 *   closeall FILE [seconds=1]
 *
 * For each way of closing everything (closefrom(3); close_range(3, ~0U);
 * close() of every number up to 65535; dup2 of /dev/null onto every number
 * then close), a child process writes FILE once (so that it holds a node
 * grant), closes everything that way, opens FILE again and rewrites one
 * 1 MiB block at offset 0 with alternating bytes for the given time.  The
 * parent, another process, reads the block meanwhile: a read that mixes
 * the two bytes is torn.  If the child's liveness descriptor had been
 * closed, the parent would take it for dead, take its grant and tear.
 * Torn reads fail under RS_COMPAT_STRICT=1.  Prints "closeall ok".
 */
#include <signal.h>
#include <sys/wait.h>

#include "compat.h"

#define SZ (1 << 20)

static void close_everything(int how)
{
	switch (how) {
	case 0:
		closefrom(3);
		break;
	case 1:
		close_range(3, ~0U, 0);
		break;
	case 2:
		for (int i = 3; i < 65536; i++)
			close(i);
		break;
	default:
		for (int i = 3; i < 65536; i++) {
			dup2(0, i);
			close(i);
		}
		break;
	}
}

static const char *names[] = { "closefrom", "close_range", "close-loop", "dup2-close-loop" };

int main(int argc, char **argv)
{
	double secs;
	unsigned char *b;
	long torn_total = 0;
	int fd, bad = 0;

	if (argc < 2)
		die("usage: closeall FILE [seconds=S]");
	secs = atof(arg_str(argc, argv, "seconds", "1"));
	b = xalloc(SZ);
	fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || pwrite_full(fd, b, SZ, 0) < 0)
		die("create %s", argv[1]);
	for (int how = 0; how < 4; how++) {
		int pfd[2], st;
		long reads = 0, torn = 0;
		char c;
		pid_t p;

		if (pipe(pfd) < 0)
			die("pipe");
		p = fork();
		if (p < 0)
			die("fork");
		if (p == 0) {
			int f = open(argv[1], O_RDWR);
			long n = 0;

			if (f < 0 || pwrite_full(f, b, SZ, 0) < 0)
				die("child first write");
			/* stdin must survive for the dup2 loop; fds 0-2 stay */
			if (pfd[1] < 3)
				die("pipe on a low fd");
			if (write(pfd[1], "r", 1) != 1)	/* ready: attached */
				die("pipe write");
			close_everything(how);
			f = open(argv[1], O_RDWR);
			if (f < 0)
				die("child reopen");
			for (uint64_t end = now_ns() + (uint64_t)(secs * 1e9); now_ns() < end; n++) {
				memset(b, n & 1 ? 'a' : 'b', SZ);
				if (pwrite_full(f, b, SZ, 0) < 0)
					die("child pwrite");
			}
			_exit(0);
		}
		close(pfd[1]);
		if (read(pfd[0], &c, 1) != 1)
			die("child did not start");
		close(pfd[0]);
		for (;;) {
			pid_t w = waitpid(p, &st, WNOHANG);

			if (w == p)
				break;
			if (pread_full(fd, b, SZ, 0) < 0)
				die("parent pread");
			reads++;
			torn += !uniform(b, SZ);
		}
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "closeall: %s child status %#x\n", names[how], st);
			bad++;
		}
		fprintf(stderr, "closeall: %s: %ld reads, %ld torn, shim=%d\n", names[how], reads, torn,
			shim_loaded());
		torn_total += torn;
	}
	close(fd);
	if (bad || (torn_total && strict_mode())) {
		printf("closeall FAIL: %d children failed, %ld torn reads\n", bad, torn_total);
		return 1;
	}
	printf("closeall ok\n");
	return 0;
}
