/*
 * proc_probe: process-level robustness probes for tests/test_process.c.
 *
 * Each subcommand races something a process does (fork, exec, a signal
 * handler, close, many threads) against threads doing I/O on regular
 * files, with or without the shim preloaded, and prints one line of
 * "key=N" counts followed by "verdict=PASS" or "verdict=FAIL <why>".  The
 * test runs it under a timeout, so a deadlock fails instead of hanging.
 *
 *   proc_probe fork       BASE [FORKS]    fork while other threads hold locks
 *   proc_probe fork-raw   BASE [FORKS]    the same with _Fork (no atfork handlers)
 *   proc_probe exec       BASE [ROUNDS]   fork+execve, posix_spawn, vfork+execve
 *   proc_probe signal     BASE restart|norestart
 *                                         SIGALRM handler doing I/O inside the shim
 *   proc_probe signal-close BASE [SECONDS] close() in a handler inside the shim,
 *                                         then fopen() reuses the number
 *   proc_probe close-race BASE [SECONDS]  close/open/dup2 racing with I/O
 *   proc_probe many       BASE [THREADS]  many threads, disjoint pwrites, verify
 *   proc_probe io-child   FILE FD SHIM    (internal) exec'd by "exec"
 *
 * BASE is a path prefix: the probe creates BASE.a, BASE.b, BASE.c and
 * removes them before it exits.  Every line also says shim=0|1, whether
 * librangeshim.so is mapped, so the test knows the preload took effect.
 *
 * Exit status: 0 when the verdict is PASS, 1 on FAIL, 2 on setup errors.
 */
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "probe.h"

extern char **environ;

#define MIB (1u << 20)
#define KIB (1u << 10)

static char self_exe[4096];
static char path_a[4200], path_b[4200], path_c[4200];

static void die(const char *what, const char *arg) __attribute__((noreturn));
static void die(const char *what, const char *arg)
{
	int e = errno;

	fprintf(stderr, "proc_probe: %s%s%s: %s\n", what, arg ? " " : "", arg ? arg : "",
		strerror(e));
	printf("verdict=FAIL setup\n");
	fflush(stdout);
	unlink(path_a);
	unlink(path_b);
	unlink(path_c);
	exit(2);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_us(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static void *xalloc(size_t n)
{
	void *p;

	if (posix_memalign(&p, 4096, n) != 0)
		die("posix_memalign", NULL);
	return p;
}

static void set_paths(const char *base)
{
	snprintf(path_a, sizeof(path_a), "%s.a", base);
	snprintf(path_b, sizeof(path_b), "%s.b", base);
	snprintf(path_c, sizeof(path_c), "%s.c", base);
}

static void remove_files(void)
{
	unlink(path_a);
	unlink(path_b);
	unlink(path_c);
}

/* Create path with len bytes of value v. */
static void make_file(const char *path, size_t len, int v)
{
	unsigned char *buf = xalloc(len ? len : 1);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	size_t done = 0;

	if (fd < 0)
		die("create", path);
	memset(buf, v, len);
	while (done < len) {
		ssize_t n = pwrite(fd, buf + done, len - done, (off_t)done);

		if (n <= 0)
			die("prefill", path);
		done += (size_t)n;
	}
	close(fd);
	free(buf);
}

static int open_rw(const char *path)
{
	int fd = open(path, O_RDWR);

	if (fd < 0)
		die("open", path);
	return fd;
}

static int full_pwrite(int fd, const void *buf, size_t n, off_t off)
{
	return pwrite(fd, buf, n, off) == (ssize_t)n ? 0 : -1;
}

static int full_pread(int fd, void *buf, size_t n, off_t off)
{
	return pread(fd, buf, n, off) == (ssize_t)n ? 0 : -1;
}

/* Wait up to timeout_s for pid; kill it if it does not finish.
 * Returns its exit code, 128+sig, or -1 on timeout. */
static int wait_child(pid_t pid, double timeout_s)
{
	double end = now_s() + timeout_s;
	int st;

	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);

		if (r == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		if (r < 0 && errno != EINTR)
			return -2;
		if (now_s() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return -1;
		}
		sleep_us(500);
	}
}

static void start_thread(pthread_t *t, void *(*fn)(void *), void *arg)
{
	pthread_attr_t attr;
	int rc;

	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 * KIB);
	rc = pthread_create(t, &attr, fn, arg);
	pthread_attr_destroy(&attr);
	if (rc) {
		errno = rc;
		die("pthread_create", NULL);
	}
}

static int verdict(int ok, const char *why)
{
	if (ok)
		printf("verdict=PASS\n");
	else
		printf("verdict=FAIL %s\n", why);
	fflush(stdout);
	return ok ? 0 : 1;
}

/* ---- background lock holders (fork, exec) ----------------------------- */

/*
 * Threads that keep range locks, offset locks and the fd table busy, so
 * that a fork or exec in another thread very likely happens while some
 * shim lock is held or waited for.
 */
struct bg {
	atomic_int stop;
	atomic_ulong ops;
	int fd_a, fd_b;
	pthread_t t[5];
	int n;
};

struct bg_arg {
	struct bg *bg;
	int role;
};

static struct bg_arg bg_args[5];

static void *bg_main(void *p)
{
	struct bg_arg *a = p;
	struct bg *bg = a->bg;
	unsigned char *buf = xalloc(MIB);

	memset(buf, 'A' + a->role, MIB);
	while (!atomic_load_explicit(&bg->stop, memory_order_relaxed)) {
		switch (a->role) {
		case 0:
		case 1:
			/* Same range: one holds, the other queues. */
			if (full_pwrite(bg->fd_a, buf, MIB, 0) < 0)
				die("bg pwrite", NULL);
			break;
		case 2:
			/* Overlapping reader and a neighbouring writer. */
			if (full_pread(bg->fd_a, buf, MIB, MIB / 2) < 0 ||
			    full_pwrite(bg->fd_a, buf, MIB, MIB) < 0)
				die("bg pread/pwrite", NULL);
			break;
		case 3:
			/* The file-offset lock of fd_b. */
			if (lseek(bg->fd_b, 0, SEEK_SET) < 0 ||
			    write(bg->fd_b, buf, 64 * KIB) != 64 * KIB)
				die("bg write", NULL);
			break;
		default: {
			/* The fd table mutex: open, first use, close. */
			int fd = open(path_a, O_RDONLY);

			if (fd < 0)
				die("bg open", path_a);
			if (full_pread(fd, buf, 4 * KIB, 0) < 0)
				die("bg pread", NULL);
			close(fd);
			break;
		}
		}
		atomic_fetch_add_explicit(&bg->ops, 1, memory_order_relaxed);
	}
	free(buf);
	return NULL;
}

static void bg_start(struct bg *bg, int n)
{
	atomic_init(&bg->stop, 0);
	atomic_init(&bg->ops, 0);
	bg->n = n;
	for (int i = 0; i < n; i++) {
		bg_args[i].bg = bg;
		bg_args[i].role = i;
		start_thread(&bg->t[i], bg_main, &bg_args[i]);
	}
	/* Let them get going. */
	while (atomic_load(&bg->ops) < (unsigned long)n * 4)
		sleep_us(200);
}

static void bg_stop(struct bg *bg)
{
	atomic_store(&bg->stop, 1);
	for (int i = 0; i < bg->n; i++)
		pthread_join(bg->t[i], NULL);
}

/* ---- fork ------------------------------------------------------------- */

static unsigned char *child_buf;
static int child_fd_a, child_fd_b;

/* Runs in the forked child: the same ranges the parent's threads hold.
 * Exit codes say which step failed. */
static void child_io(void) __attribute__((noreturn));
static void child_io(void)
{
	int fd;

	memset(child_buf, 'c', MIB);
	if (full_pwrite(child_fd_a, child_buf, MIB, 0) < 0)
		_exit(10);
	if (full_pread(child_fd_a, child_buf, MIB, 0) < 0)
		_exit(11);
	if (full_pwrite(child_fd_a, child_buf, MIB, MIB) < 0)
		_exit(12);
	if (lseek(child_fd_b, 0, SEEK_SET) < 0 ||
	    write(child_fd_b, child_buf, 64 * KIB) != 64 * KIB)
		_exit(13);
	fd = open(path_a, O_RDWR);
	if (fd < 0)
		_exit(14);
	if (full_pread(fd, child_buf, MIB, MIB / 2) < 0)
		_exit(15);
	if (close(fd) < 0)
		_exit(16);
	_exit(0);
}

static int cmd_fork(const char *base, int forks, int raw)
{
	struct bg bg;
	int ok = 0, hung = 0, failed = 0, done = 0, first_bad = 0;

	set_paths(base);
	make_file(path_a, 2 * MIB + MIB / 2, 1);
	make_file(path_b, 64 * KIB, 1);
	child_buf = xalloc(MIB);
	bg.fd_a = child_fd_a = open_rw(path_a);
	bg.fd_b = child_fd_b = open_rw(path_b);
	bg_start(&bg, 5);

	for (int i = 0; i < forks; i++) {
		pid_t pid;
		int rc;

		fflush(stdout);
		pid = raw ? _Fork() : fork();
		if (pid < 0)
			die("fork", NULL);
		if (pid == 0)
			child_io();
		done++;
		rc = wait_child(pid, 5.0);
		if (rc == 0) {
			ok++;
		} else if (rc == -1) {
			hung++;
			/* One deadlock is the answer; do not wait for more. */
			break;
		} else {
			failed++;
			if (!first_bad)
				first_bad = rc;
		}
		sleep_us(1000 + (i % 7) * 300);
	}
	bg_stop(&bg);
	close(bg.fd_a);
	close(bg.fd_b);
	remove_files();
	printf("shim=%d forks=%d ok=%d hung=%d failed=%d first_bad=%d bg_ops=%lu\n",
	       shim_loaded(), done, ok, hung, failed, first_bad, atomic_load(&bg.ops));
	return verdict(ok == forks && hung == 0 && failed == 0,
		       hung ? "child hung" : "child failed");
}

/* ---- exec ------------------------------------------------------------- */

/* The exec'd child: I/O on an inherited fd and on a fresh open. */
static int cmd_io_child(const char *file, int fd, int expect_shim)
{
	unsigned char *buf = xalloc(64 * KIB), *back = xalloc(64 * KIB);
	const off_t off = 3 * MIB;
	int fd2;

	if (shim_loaded() != expect_shim)
		return 3;
	memset(buf, 'x', 64 * KIB);
	if (full_pwrite(fd, buf, 64 * KIB, off) < 0)
		return 4;
	if (full_pread(fd, back, 64 * KIB, off) < 0 || memcmp(buf, back, 64 * KIB))
		return 5;
	fd2 = open(file, O_RDWR);
	if (fd2 < 0)
		return 6;
	memset(buf, 'y', 64 * KIB);
	if (lseek(fd2, off, SEEK_SET) != off || write(fd2, buf, 64 * KIB) != 64 * KIB)
		return 7;
	if (lseek(fd2, off, SEEK_SET) != off || read(fd2, back, 64 * KIB) != 64 * KIB ||
	    memcmp(buf, back, 64 * KIB))
		return 8;
	if (close(fd2) < 0)
		return 9;
	free(buf);
	free(back);
	return 0;
}

static int cmd_exec(const char *base, int rounds)
{
	struct bg bg;
	int shim = shim_loaded();
	int fe_ok = 0, sp_ok = 0, vf_ok = 0, bad = 0, first_bad = 0;
	char fdstr[16], shimstr[4];
	char *args[6];

	set_paths(base);
	make_file(path_a, 3 * MIB + 64 * KIB, 1);
	make_file(path_b, 64 * KIB, 1);
	bg.fd_a = open_rw(path_a);   /* inherited across exec: no O_CLOEXEC */
	bg.fd_b = open_rw(path_b);
	snprintf(fdstr, sizeof(fdstr), "%d", bg.fd_a);
	snprintf(shimstr, sizeof(shimstr), "%d", shim);
	args[0] = self_exe;
	args[1] = (char *)"io-child";
	args[2] = path_a;
	args[3] = fdstr;
	args[4] = shimstr;
	args[5] = NULL;
	bg_start(&bg, 5);

	for (int i = 0; i < rounds; i++) {
		pid_t pid;
		int rc;
		posix_spawn_file_actions_t fa;
		char *spawn_args[6];

		/* fork + execve */
		fflush(stdout);
		pid = fork();
		if (pid < 0)
			die("fork", NULL);
		if (pid == 0) {
			execve(self_exe, args, environ);
			_exit(127);
		}
		rc = wait_child(pid, 5.0);
		if (rc == 0) {
			fe_ok++;
		} else {
			bad++;
			if (!first_bad)
				first_bad = 1000 + rc;
		}

		/* posix_spawn, with a file action that opens the file as fd 20 */
		memcpy(spawn_args, args, sizeof(args));
		spawn_args[3] = (char *)"20";
		posix_spawn_file_actions_init(&fa);
		posix_spawn_file_actions_addopen(&fa, 20, path_a, O_RDWR, 0);
		rc = posix_spawn(&pid, self_exe, &fa, NULL, spawn_args, environ);
		posix_spawn_file_actions_destroy(&fa);
		if (rc != 0) {
			errno = rc;
			die("posix_spawn", self_exe);
		}
		rc = wait_child(pid, 5.0);
		if (rc == 0) {
			sp_ok++;
		} else {
			bad++;
			if (!first_bad)
				first_bad = 2000 + rc;
		}

		/* vfork + execve: the child only execs. */
		pid = vfork();
		if (pid < 0)
			die("vfork", NULL);
		if (pid == 0) {
			execve(self_exe, args, environ);
			_exit(127);
		}
		rc = wait_child(pid, 5.0);
		if (rc == 0) {
			vf_ok++;
		} else {
			bad++;
			if (!first_bad)
				first_bad = 3000 + rc;
		}
		if (bad)
			break;
	}
	bg_stop(&bg);
	close(bg.fd_a);
	close(bg.fd_b);
	remove_files();
	printf("shim=%d rounds=%d fork_exec=%d spawn=%d vfork=%d bad=%d first_bad=%d\n",
	       shim, rounds, fe_ok, sp_ok, vf_ok, bad, first_bad);
	return verdict(fe_ok == rounds && sp_ok == rounds && vf_ok == rounds,
		       "a child failed or hung");
}

/* ---- signal ----------------------------------------------------------- */

#define SIG_BLOCK_LEN (64 * KIB)
#define SIG_H_LEN 4096
#define SIG_B_LEN 16

static int sig_fd_a, sig_fd_b, sig_pipe_w = -1;
static unsigned char sig_hbuf[SIG_H_LEN];
static atomic_ulong h_calls, h_pwrites, h_writes, h_errors, h_bytes_b;
static atomic_int sig_pipe_mode, sig_stop;

static void on_alarm(int sig)
{
	int saved = errno;
	ssize_t n;

	(void)sig;
	atomic_fetch_add(&h_calls, 1);
	if (atomic_load(&sig_pipe_mode)) {
		errno = saved;
		return;
	}
	/* The same range the main loop is writing, from inside the shim. */
	n = pwrite(sig_fd_a, sig_hbuf, SIG_H_LEN, 0);
	if (n == SIG_H_LEN)
		atomic_fetch_add(&h_pwrites, 1);
	else
		atomic_fetch_add(&h_errors, 1);
	/* Another tracked fd, at its file offset. */
	n = write(sig_fd_b, sig_hbuf, SIG_B_LEN);
	if (n == SIG_B_LEN) {
		atomic_fetch_add(&h_writes, 1);
		atomic_fetch_add(&h_bytes_b, SIG_B_LEN);
	} else {
		atomic_fetch_add(&h_errors, 1);
	}
	errno = saved;
}

/* A second writer of the same range with SIGALRM blocked, so that the
 * main thread also has to wait for the lock while signals arrive. */
static void *sig_peer(void *p)
{
	unsigned char *buf = xalloc(SIG_BLOCK_LEN);
	sigset_t set;

	(void)p;
	sigemptyset(&set);
	sigaddset(&set, SIGALRM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	memset(buf, 'p', SIG_BLOCK_LEN);
	while (!atomic_load_explicit(&sig_stop, memory_order_relaxed)) {
		if (full_pwrite(sig_fd_a, buf, SIG_BLOCK_LEN, 0) < 0)
			die("peer pwrite", NULL);
		sched_yield();
	}
	free(buf);
	return NULL;
}

/* Gives the blocked pipe read its byte after 100 ms (SIGALRM blocked:
 * the signals go to the reader).  A thread rather than the handler, since
 * TSan defers handlers until the interrupted call returns. */
static void *sig_pipe_writer(void *p)
{
	(void)p;
	sleep_us(100000);
	if (write(sig_pipe_w, "z", 1) != 1)
		atomic_fetch_add(&h_errors, 1);
	return NULL;
}

static void set_timer(long us)
{
	struct itimerval it = { { 0, us }, { 0, us } };

	if (setitimer(ITIMER_REAL, &it, NULL) < 0)
		die("setitimer", NULL);
}

static int cmd_signal(const char *base, int restart, double seconds)
{
	struct sigaction sa;
	unsigned char *buf = xalloc(SIG_BLOCK_LEN);
	unsigned char b16[SIG_B_LEN];
	unsigned long loops = 0, eintr = 0, shortw = 0, errs = 0, bytes_b = 0;
	int pipefd[2], pipe_eintr = -1, size_ok;
	pthread_t peer;
	struct stat st;
	double end;
	sigset_t set;

	set_paths(base);
	make_file(path_a, SIG_BLOCK_LEN, 1);
	sig_fd_a = open_rw(path_a);
	sig_fd_b = open(path_b, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (sig_fd_b < 0)
		die("create", path_b);
	memset(sig_hbuf, 'h', sizeof(sig_hbuf));
	memset(buf, 'm', SIG_BLOCK_LEN);
	memset(b16, 'b', sizeof(b16));

	/* The peer is created with SIGALRM blocked, so it never runs the handler. */
	sigemptyset(&set);
	sigaddset(&set, SIGALRM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	start_thread(&peer, sig_peer, NULL);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	sa.sa_flags = restart ? SA_RESTART : 0;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGALRM, &sa, NULL) < 0)
		die("sigaction", NULL);
	set_timer(100);
	end = now_s() + seconds;
	while (now_s() < end) {
		ssize_t n = pwrite(sig_fd_a, buf, SIG_BLOCK_LEN, 0);

		if (n < 0 && errno == EINTR)
			eintr++;
		else if (n < 0)
			errs++;
		else if (n != SIG_BLOCK_LEN)
			shortw++;
		n = write(sig_fd_b, b16, SIG_B_LEN);
		if (n < 0 && errno == EINTR)
			eintr++;
		else if (n < 0)
			errs++;
		else if (n != SIG_B_LEN)
			shortw++;
		if (n > 0)
			bytes_b += (unsigned long)n;
		loops++;
	}
	set_timer(0);
	atomic_store(&sig_stop, 1);
	pthread_join(peer, NULL);

	/* Every write at the cursor of fd_b, the handler's included, landed. */
	if (fstat(sig_fd_b, &st) < 0)
		die("fstat", path_b);
	size_ok = (unsigned long)st.st_size == bytes_b + atomic_load(&h_bytes_b);

	/* EINTR on a blocking read of a pipe (passed through by the shim):
	 * signals every 2 ms; with SA_RESTART the read restarts until the
	 * writer thread's byte arrives after 100 ms, without it the first
	 * signal interrupts it. */
	if (pipe(pipefd) < 0)
		die("pipe", NULL);
	sig_pipe_w = pipefd[1];
	atomic_store(&sig_pipe_mode, 1);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	start_thread(&peer, sig_pipe_writer, NULL);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	set_timer(2000);
	{
		char c;
		ssize_t n = read(pipefd[0], &c, 1);

		pipe_eintr = n < 0 && errno == EINTR ? 1 : n == 1 ? 0 : -1;
	}
	set_timer(0);
	pthread_join(peer, NULL);
	signal(SIGALRM, SIG_IGN);
	atomic_store(&sig_pipe_mode, 0);
	close(pipefd[0]);
	close(pipefd[1]);
	close(sig_fd_a);
	close(sig_fd_b);
	remove_files();

	printf("shim=%d restart=%d main_loops=%lu handler_pwrites=%lu handler_writes=%lu "
	       "handler_errors=%lu eintr=%lu short=%lu errors=%lu size_ok=%d pipe_eintr=%d\n",
	       shim_loaded(), restart, loops, atomic_load(&h_pwrites), atomic_load(&h_writes),
	       atomic_load(&h_errors), eintr, shortw, errs, size_ok, pipe_eintr);
	free(buf);
	return verdict(loops > 0 && atomic_load(&h_pwrites) > 0 && atomic_load(&h_writes) > 0 &&
		       atomic_load(&h_errors) == 0 && errs == 0 && shortw == 0 && size_ok &&
		       pipe_eintr == (restart ? 0 : 1),
		       "see counts");
}

/* ---- close from a signal handler, then a number reused behind our back - */

/*
 * A SIGALRM handler interrupts the main thread while it is (very likely)
 * inside the shim, and closes fd X there; it then pwrites fd A, so the
 * shim's "reentrant" counter tells the test that the handler did run
 * inside the shim.  After that, fopen() (whose open the shim does not see)
 * gets the number X for a third file C.  A writer on that stream's fd and
 * a reader on a separate open of C must then share C's range lock: with
 * the shim no read of C may be torn.
 */
static int sc_fd_x, sc_fd_a, sc_wfd;
static atomic_int sc_fired, sc_stop;

static void sc_on_alarm(int sig)
{
	int saved = errno;
	static unsigned char b[512];

	(void)sig;
	if (!atomic_exchange(&sc_fired, 1)) {
		close(sc_fd_x);
		if (pwrite(sc_fd_a, b, sizeof(b), 0) != (ssize_t)sizeof(b))
			atomic_store(&sc_fired, 2);
	}
	errno = saved;
}

static void *sc_writer(void *p)
{
	unsigned char *buf = xalloc(MIB);
	int gen = 1;

	(void)p;
	while (!atomic_load_explicit(&sc_stop, memory_order_relaxed)) {
		gen = gen % 250 + 2;
		memset(buf, gen, MIB);
		if (full_pwrite(sc_wfd, buf, MIB, 0) < 0)
			die("writer pwrite", path_c);
	}
	free(buf);
	return NULL;
}

static int cmd_signal_close(const char *base, double seconds)
{
	struct sigaction sa;
	struct itimerval it = { { 0, 0 }, { 0, 200 } };
	unsigned char *buf = xalloc(64 * KIB), *rbuf = xalloc(MIB);
	unsigned long reads = 0, torn = 0;
	pthread_t w;
	FILE *fp;
	int rfd, reused;
	double end;

	set_paths(base);
	make_file(path_a, 64 * KIB, 1);
	make_file(path_b, 4 * KIB, 1);
	sc_fd_a = open_rw(path_a);
	sc_fd_x = open_rw(path_b);
	memset(buf, 'm', 64 * KIB);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = sc_on_alarm;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGALRM, &sa, NULL) < 0)
		die("sigaction", NULL);
	if (setitimer(ITIMER_REAL, &it, NULL) < 0)
		die("setitimer", NULL);
	while (!atomic_load(&sc_fired))
		if (full_pwrite(sc_fd_a, buf, 64 * KIB, 0) < 0)
			die("pwrite", path_a);

	fp = fopen(path_c, "w+");
	if (!fp)
		die("fopen", path_c);
	sc_wfd = fileno(fp);
	reused = sc_wfd == sc_fd_x;
	memset(rbuf, 1, MIB);
	if (full_pwrite(sc_wfd, rbuf, MIB, 0) < 0)
		die("prefill", path_c);
	rfd = open(path_c, O_RDONLY);
	if (rfd < 0)
		die("open", path_c);
	start_thread(&w, sc_writer, NULL);
	end = now_s() + seconds;
	while (now_s() < end) {
		if (full_pread(rfd, rbuf, MIB, 0) < 0)
			die("pread", path_c);
		reads++;
		if (rbuf[0] == 0 || memcmp(rbuf, rbuf + 1, MIB - 1) != 0)
			torn++;
	}
	atomic_store(&sc_stop, 1);
	pthread_join(w, NULL);
	fclose(fp);
	close(rfd);
	close(sc_fd_a);
	remove_files();
	free(buf);
	free(rbuf);
	printf("shim=%d reused=%d handler_ok=%d reads=%lu torn=%lu\n", shim_loaded(), reused,
	       atomic_load(&sc_fired) == 1, reads, torn);
	return verdict(torn == 0 && reads > 0 && atomic_load(&sc_fired) == 1,
		       "torn reads of a file whose fd number a handler's close freed");
}

/* ---- close racing with I/O -------------------------------------------- */

#define CR_TARGETS 4
#define CR_IO_THREADS 4
#define CR_FILE_LEN (256 * KIB)
#define CR_IO_LEN (4 * KIB)

static int cr_target[CR_TARGETS];
static int cr_fd_b, cr_fd_c;
static atomic_int cr_stop;
static atomic_ulong cr_io, cr_ok, cr_ebadf, cr_bad, cr_closer_ops;
static atomic_int cr_first_bad_errno, cr_first_bad_op;

struct cr_arg {
	unsigned seed;
};

static void cr_result(int op, ssize_t n, size_t want, int cursor_read)
{
	atomic_fetch_add_explicit(&cr_io, 1, memory_order_relaxed);
	if (n == (ssize_t)want || (cursor_read && n >= 0)) {
		atomic_fetch_add_explicit(&cr_ok, 1, memory_order_relaxed);
	} else if (n < 0 && errno == EBADF) {
		atomic_fetch_add_explicit(&cr_ebadf, 1, memory_order_relaxed);
	} else {
		int zero = 0;

		atomic_fetch_add_explicit(&cr_bad, 1, memory_order_relaxed);
		if (atomic_compare_exchange_strong(&cr_first_bad_errno, &zero, n < 0 ? errno : -1))
			atomic_store(&cr_first_bad_op, op);
	}
}

static void *cr_io_main(void *p)
{
	struct cr_arg *a = p;
	unsigned char *buf = xalloc(2 * CR_IO_LEN);
	unsigned s = a->seed;

	memset(buf, 'i', 2 * CR_IO_LEN);
	while (!atomic_load_explicit(&cr_stop, memory_order_relaxed)) {
		int fd, op;
		off_t off;
		struct iovec iov[2] = { { buf, CR_IO_LEN / 2 }, { buf + CR_IO_LEN, CR_IO_LEN / 2 } };

		s = s * 1103515245u + 12345u;
		fd = cr_target[(s >> 8) % CR_TARGETS];
		op = (int)((s >> 16) % 6);
		off = (off_t)(((s >> 4) % (CR_FILE_LEN / CR_IO_LEN - 1)) * CR_IO_LEN);
		switch (op) {
		case 0:
			cr_result(op, pread(fd, buf, CR_IO_LEN, off), CR_IO_LEN, 0);
			break;
		case 1:
			cr_result(op, pwrite(fd, buf, CR_IO_LEN, off), CR_IO_LEN, 0);
			break;
		case 2:
			cr_result(op, preadv(fd, iov, 2, off), CR_IO_LEN, 0);
			break;
		case 3:
			cr_result(op, pwritev(fd, iov, 2, off), CR_IO_LEN, 0);
			break;
		case 4:
			/* At the cursor: another thread may move it, so any
			 * length is a valid read; EBADF from lseek counts too. */
			if (lseek(fd, off, SEEK_SET) < 0)
				cr_result(op, -1, CR_IO_LEN, 1);
			else
				cr_result(op, read(fd, buf, CR_IO_LEN), CR_IO_LEN, 1);
			break;
		default:
			if (lseek(fd, off, SEEK_SET) < 0)
				cr_result(op, -1, CR_IO_LEN, 0);
			else
				cr_result(op, write(fd, buf, CR_IO_LEN), CR_IO_LEN, 0);
			break;
		}
	}
	free(buf);
	return NULL;
}

/* Put a fresh description of path at number fd (it must be closed now). */
static void cr_reopen_at(int fd, const char *path)
{
	int nfd = open(path, O_RDWR);

	if (nfd < 0)
		die("reopen", path);
	if (nfd != fd) {
		if (dup2(nfd, fd) < 0)
			die("dup2", NULL);
		close(nfd);
	}
}

static void *cr_closer_main(void *p)
{
	unsigned s = 7;
	const char *paths[3] = { path_a, path_b, path_c };

	(void)p;
	while (!atomic_load_explicit(&cr_stop, memory_order_relaxed)) {
		int fd, op, tmp;
		const char *path;

		s = s * 1103515245u + 12345u;
		fd = cr_target[(s >> 8) % CR_TARGETS];
		op = (int)((s >> 16) % 5);
		path = paths[(s >> 20) % 3];
		switch (op) {
		case 0:
			close(fd);
			cr_reopen_at(fd, path);
			break;
		case 1:
			/* Another file's description replaces it atomically. */
			if (dup2((s >> 24) & 1 ? cr_fd_b : cr_fd_c, fd) < 0)
				die("dup2", NULL);
			break;
		case 2:
			if (close_range((unsigned)fd, (unsigned)fd, 0) < 0)
				die("close_range", NULL);
			cr_reopen_at(fd, path);
			break;
		case 3:
			tmp = open(path, O_RDWR | O_CLOEXEC);
			if (tmp < 0)
				die("open", path);
			if (dup3(tmp, fd, 0) < 0)
				die("dup3", NULL);
			close(tmp);
			break;
		default:
			tmp = fcntl(cr_fd_b, F_DUPFD, 100);
			if (tmp < 0)
				die("F_DUPFD", NULL);
			if (dup2(tmp, fd) < 0)
				die("dup2", NULL);
			close(tmp);
			break;
		}
		atomic_fetch_add_explicit(&cr_closer_ops, 1, memory_order_relaxed);
		if ((s >> 12) % 4 == 0)
			sched_yield();
	}
	return NULL;
}

static int cmd_close_race(const char *base, double seconds)
{
	pthread_t io[CR_IO_THREADS], closer;
	struct cr_arg args[CR_IO_THREADS];

	set_paths(base);
	make_file(path_a, CR_FILE_LEN, 'a');
	make_file(path_b, CR_FILE_LEN, 'b');
	make_file(path_c, CR_FILE_LEN, 'c');
	cr_fd_b = open_rw(path_b);
	cr_fd_c = open_rw(path_c);
	for (int i = 0; i < CR_TARGETS; i++)
		cr_target[i] = open_rw(path_a);
	for (int i = 0; i < CR_IO_THREADS; i++) {
		args[i].seed = 1234u + 77u * (unsigned)i;
		start_thread(&io[i], cr_io_main, &args[i]);
	}
	start_thread(&closer, cr_closer_main, NULL);
	sleep_us((long)(seconds * 1e6));
	atomic_store(&cr_stop, 1);
	for (int i = 0; i < CR_IO_THREADS; i++)
		pthread_join(io[i], NULL);
	pthread_join(closer, NULL);
	for (int i = 0; i < CR_TARGETS; i++)
		close(cr_target[i]);
	close(cr_fd_b);
	close(cr_fd_c);
	remove_files();
	printf("shim=%d io=%lu ok=%lu ebadf=%lu bad=%lu first_bad_errno=%d first_bad_op=%d "
	       "closer_ops=%lu\n", shim_loaded(), atomic_load(&cr_io), atomic_load(&cr_ok),
	       atomic_load(&cr_ebadf), atomic_load(&cr_bad), atomic_load(&cr_first_bad_errno),
	       atomic_load(&cr_first_bad_op), atomic_load(&cr_closer_ops));
	return verdict(atomic_load(&cr_bad) == 0 && atomic_load(&cr_io) > 0 &&
		       atomic_load(&cr_closer_ops) > 0, "an I/O returned neither success nor EBADF");
}

/* ---- many threads ----------------------------------------------------- */

#define MANY_BS 3000u      /* not page aligned: neighbours share pages */
#define MANY_ITERS 4

static int many_fd, many_threads;
static pthread_barrier_t many_barrier;
static atomic_ulong many_writes, many_errors;

static unsigned char many_pattern(int t, int k, size_t i)
{
	return (unsigned char)(1 + (t * 31 + k * 7 + (int)(i / 512)) % 251);
}

static void *many_main(void *p)
{
	int t = (int)(intptr_t)p;
	unsigned char *buf = xalloc(MANY_BS);
	int fd = many_fd;

	/* Odd threads use their own open file description. */
	if (t & 1) {
		fd = open(path_a, O_RDWR);
		if (fd < 0)
			die("open", path_a);
	}
	pthread_barrier_wait(&many_barrier);
	for (int k = 0; k < MANY_ITERS; k++) {
		off_t off = (off_t)((size_t)(k * many_threads + t) * MANY_BS);
		ssize_t n;

		for (size_t i = 0; i < MANY_BS; i++)
			buf[i] = many_pattern(t, k, i);
		if (k == 1) {
			struct iovec iov[2] = { { buf, 1000 }, { buf + 1000, MANY_BS - 1000 } };

			n = pwritev(fd, iov, 2, off);
		} else {
			n = pwrite(fd, buf, MANY_BS, off);
		}
		if (n == (ssize_t)MANY_BS)
			atomic_fetch_add(&many_writes, 1);
		else
			atomic_fetch_add(&many_errors, 1);
	}
	if (t & 1)
		close(fd);
	free(buf);
	return NULL;
}

static int cmd_many(const char *base, int nthreads)
{
	pthread_t *t = calloc((size_t)nthreads, sizeof(*t));
	size_t len = (size_t)nthreads * MANY_ITERS * MANY_BS;
	unsigned char *all = xalloc(len);
	unsigned long mismatches = 0;

	if (!t)
		die("calloc", NULL);
	set_paths(base);
	make_file(path_a, 0, 0);
	many_fd = open_rw(path_a);
	many_threads = nthreads;
	pthread_barrier_init(&many_barrier, NULL, (unsigned)nthreads);
	for (int i = 0; i < nthreads; i++)
		start_thread(&t[i], many_main, (void *)(intptr_t)i);
	for (int i = 0; i < nthreads; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&many_barrier);

	if (pread(many_fd, all, len, 0) != (ssize_t)len)
		die("verify pread", path_a);
	for (int k = 0; k < MANY_ITERS; k++)
		for (int i = 0; i < nthreads; i++) {
			const unsigned char *c = all + (size_t)(k * nthreads + i) * MANY_BS;

			for (size_t j = 0; j < MANY_BS; j++)
				if (c[j] != many_pattern(i, k, j)) {
					mismatches++;
					break;
				}
		}
	close(many_fd);
	remove_files();
	printf("shim=%d threads=%d writes=%lu errors=%lu mismatches=%lu\n", shim_loaded(),
	       nthreads, atomic_load(&many_writes), atomic_load(&many_errors), mismatches);
	free(all);
	free(t);
	return verdict(mismatches == 0 && atomic_load(&many_errors) == 0 &&
		       atomic_load(&many_writes) == (unsigned long)nthreads * MANY_ITERS,
		       "lost or wrong writes");
}

/* ---- main ------------------------------------------------------------- */

#ifdef __SANITIZE_THREAD__
/*
 * close-race races I/O against close/dup2 on the same fd numbers on
 * purpose, and TSan reports each such pair as a race on the "file
 * descriptor".  Those reports have a libc interceptor as their top frame;
 * races inside the shim or this program have their own code on top and
 * are still reported.
 */
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void)
{
	return "race_top:pread\nrace_top:pread64\nrace_top:pwrite\nrace_top:pwrite64\n"
	       "race_top:preadv\nrace_top:preadv64\nrace_top:pwritev\nrace_top:pwritev64\n"
	       "race_top:read\nrace_top:write\nrace_top:lseek\nrace_top:lseek64\n"
	       "race_top:open\nrace_top:open64\nrace_top:close\nrace_top:dup2\n"
	       "race_top:dup3\nrace_top:fcntl\nrace_top:close_range\nrace_top:fstat\n"
	       "race_top:fstat64\nrace_top:readlink\n";
}
#endif

static void usage(void) __attribute__((noreturn));
static void usage(void)
{
	fprintf(stderr,
		"usage: proc_probe fork|fork-raw BASE [FORKS]\n"
		"       proc_probe exec BASE [ROUNDS]\n"
		"       proc_probe signal BASE restart|norestart [SECONDS]\n"
		"       proc_probe signal-close BASE [SECONDS]\n"
		"       proc_probe close-race BASE [SECONDS]\n"
		"       proc_probe many BASE [THREADS]\n"
		"       proc_probe io-child FILE FD EXPECT_SHIM\n");
	exit(2);
}

int main(int argc, char **argv)
{
	ssize_t n;

	if (argc < 3)
		usage();
	n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
	if (n <= 0)
		die("readlink", "/proc/self/exe");
	self_exe[n] = '\0';
	setvbuf(stdout, NULL, _IOLBF, 0);

	if (strcmp(argv[1], "io-child") == 0) {
		if (argc != 5)
			usage();
		return cmd_io_child(argv[2], atoi(argv[3]), atoi(argv[4]));
	}
	if (strcmp(argv[1], "fork") == 0 || strcmp(argv[1], "fork-raw") == 0)
		return cmd_fork(argv[2], argc > 3 ? atoi(argv[3]) : 50,
				strcmp(argv[1], "fork-raw") == 0);
	if (strcmp(argv[1], "exec") == 0)
		return cmd_exec(argv[2], argc > 3 ? atoi(argv[3]) : 5);
	if (strcmp(argv[1], "signal") == 0) {
		if (argc < 4 || (strcmp(argv[3], "restart") && strcmp(argv[3], "norestart")))
			usage();
		return cmd_signal(argv[2], strcmp(argv[3], "restart") == 0,
				  argc > 4 ? atof(argv[4]) : 1.0);
	}
	if (strcmp(argv[1], "signal-close") == 0)
		return cmd_signal_close(argv[2], argc > 3 ? atof(argv[3]) : 0.5);
	if (strcmp(argv[1], "close-race") == 0)
		return cmd_close_race(argv[2], argc > 3 ? atof(argv[3]) : 1.0);
	if (strcmp(argv[1], "many") == 0)
		return cmd_many(argv[2], argc > 3 ? atoi(argv[3]) : 200);
	usage();
}
