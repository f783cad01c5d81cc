/*
 * An adversary's rigs against appenders sharing a description's offset
 * lock (shim/preload/fdtable.h, rs_pos_lock; iolock.h, rs_io_fast_lock).  Run
 * with and without the shim by tests/test_adv_proc.c; prints key=value.
 *
 *   forksig PATH N   a threaded process appends through an O_APPEND
 *              descriptor on its main thread; another thread sends it
 *              SIGUSR1 N times, and the handler forks.  The signal comes
 *              while the main thread is inside its append (most of the
 *              loop is the write), so the child starts inside that call:
 *              it finishes the append when the handler returns, then
 *              makes a call that takes the offset lock exclusively
 *              (lseek) and one that reads at the offset, under alarm(5).
 *              children=N, hung=K (SIGALRM), died=K (another signal).
 *   freshrwf PATH N  a descriptor opened O_RDWR (no O_APPEND: fresh,
 *              offset 0) appends one record with pwritev2(-1, RWF_APPEND),
 *              which moves its offset to end of file, then read()s at the
 *              offset while two threads append records through their own
 *              O_APPEND descriptors.  The read starts at end of file and
 *              must see whole records only.  trials=N, torn=K.
 *   starve PATH MS   64 threads append through one O_APPEND descriptor
 *              while one thread calls lseek(SEEK_CUR) on it in a loop:
 *              counts of each side's calls (progress, not a verdict).
 *   mix PATH MS  four threads append records through one O_RDWR|O_APPEND
 *              descriptor; a thread reads two records at its offset near
 *              the end (lseek, read); a thread makes exclusive calls that
 *              change nothing an append depends on (F_SETFL flipping
 *              O_NONBLOCK, dup2 of a copy onto the number, lseek to the
 *              end).  Then every record must be whole and none lost:
 *              writes=N records=N bad_records=0 size_ok=1.  (The reads
 *              share the appenders' description, so the kernel's own
 *              f_pos_lock keeps them whole without the shim too.)
 *   cancel PATH N    four threads append through one descriptor and
 *              are cancelled (pthread_cancel) N times over, while a
 *              thread reads at its offset; lseek must come back after
 *              each round.  rounds=N.
 *   rotate PATH N    log rotation: dup2 of a new O_APPEND file onto the
 *              number four threads append through, N times; every file
 *              must hold whole records, all together every record
 *              written: writes=K records=K bad_records=0 ragged_files=0.
 *   hexit PATH N     a thread appending through a shared O_APPEND fd is
 *              interrupted by a handler that calls pthread_exit; then
 *              another thread calls lseek under alarm(5), which kills the
 *              process (status 142) if it never comes back: unwinding out
 *              of a handler inside the shim leaks its locks
 *              (limitations.md), before and after appenders shared the
 *              offset lock alike.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REC (3 * 4096)

static const char *path;
static _Atomic int stop;
static int fd_app;
static volatile sig_atomic_t in_child, armed;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void fill(char *b, long id)
{
	memset(b, 'A' + (int)(id % 26), REC);
}

/* Whole records: every REC-aligned run (the read starts on a record)
 * one byte throughout. */
static int torn_at(const unsigned char *b, ssize_t r)
{
	for (ssize_t i = 0; i < r; i += REC) {
		ssize_t e = i + REC < r ? i + REC : r;

		if (e - i != REC)
			return 1;	/* a short tail: part of a record */
		for (ssize_t k = i + 1; k < e; k++)
			if (b[k] != b[i])
				return 1;
	}
	return 0;
}

/* ---- forksig ------------------------------------------------------- */

static void on_usr1(int sig)
{
	pid_t p;

	(void)sig;
	if (in_child || !armed)
		return;
	p = fork();
	if (p == 0) {
		alarm(5);	/* from here: finishing the interrupted append too */
		in_child = 1;
	}
	else if (p > 0)
		in_child = -p;	/* the parent: reap after the call */
}

static void *sender(void *arg)
{
	pthread_t main_t = *(pthread_t *)arg;

	while (!atomic_load(&stop)) {
		struct timespec ts = { 0, 300 * 1000 };

		pthread_kill(main_t, SIGUSR1);
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static __attribute__((noinline)) void child_checks(int fd)
{
	char b[64];

	alarm(5);
	if (lseek(fd, 0, SEEK_CUR) < 0)
		_exit(3);
	if (read(fd, b, sizeof(b)) < 0)
		_exit(4);
	if (write(fd, b, 1) != 1)
		_exit(5);
	_exit(0);
}

/* Large writes: most of the loop's time is inside the append. */
#define FORK_REC (4 << 20)

static int run_forksig(long n)
{
	char *b = malloc(FORK_REC);
	pthread_t me = pthread_self(), t;
	long children = 0, hung = 0, died = 0;
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_usr1;
	sigaction(SIGUSR1, &sa, NULL);
	fd_app = open(path, O_RDWR | O_APPEND | O_CREAT | O_TRUNC, 0644);
	if (fd_app < 0 || !b)
		return 2;
	memset(b, 'f', FORK_REC);
	/* The first call classifies the descriptor; then the sender. */
	if (write(fd_app, b, FORK_REC) != FORK_REC)
		return 2;
	pthread_create(&t, NULL, sender, &me);
	armed = 1;
	while (children < n) {
		if (write(fd_app, b, FORK_REC) != FORK_REC)
			return 2;
		if (in_child == 1) {
			child_checks(fd_app);
		} else if (in_child < 0) {
			pid_t p = -in_child;
			int st;

			pid_t w;

			while ((w = waitpid(p, &st, 0)) < 0 && errno == EINTR)
				;
			in_child = 0;
			if (w == p) {
				children++;
				if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
					hung++;
				else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
					died++;
			}
			if (ftruncate(fd_app, 0) < 0)
				return 2;
		}
	}
	in_child = 1;	/* no more forks */
	atomic_store(&stop, 1);
	pthread_join(t, NULL);
	printf("children=%ld hung=%ld died=%ld\n", children, hung, died);
	return 0;
}

/* ---- freshrwf ------------------------------------------------------ */

static void *tail_appender(void *arg)
{
	long id = (long)arg;
	char *b = malloc(REC);
	int fd = open(path, O_WRONLY | O_APPEND);

	if (fd < 0 || !b)
		abort();
	while (!atomic_load(&stop)) {
		fill(b, id);
		if (write(fd, b, REC) != REC)
			abort();
	}
	close(fd);
	free(b);
	return NULL;
}

static int run_freshrwf(long n)
{
	unsigned char *rb = malloc(4 * REC);
	char *b = malloc(REC);
	pthread_t t[2];
	long trials = 0, torn = 0, moved = 0;
	int fd0 = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);

	if (fd0 < 0 || !rb || !b)
		return 2;
	close(fd0);
	for (long i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, tail_appender, (void *)(i + 1));
	for (long i = 0; i < n; i++) {
		int fd = open(path, O_RDWR);
		struct iovec v = { b, REC };
		ssize_t r;

		if (fd < 0)
			return 2;
		fill(b, 0);
		if (pwritev2(fd, &v, 1, -1, RWF_APPEND) != REC)
			return 2;
		/* The kernel moved the offset to the end of what it wrote. */
		r = read(fd, rb, 4 * REC);
		if (r > 0) {
			trials++;
			torn += torn_at(rb, r);
		}
		if (lseek(fd, 0, SEEK_CUR) != 0)
			moved++;
		close(fd);
		if (i % 64 == 63 && ftruncate(open(path, O_WRONLY), 0) < 0)
			return 2;
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	printf("trials=%ld reads=%ld torn=%ld moved=%ld\n", n, trials, torn, moved);
	return 0;
}

/* ---- starve -------------------------------------------------------- */

static _Atomic long app_calls, seek_calls;

static void *shared_appender(void *arg)
{
	char *b = malloc(256);

	(void)arg;
	memset(b, 'x', 256);
	while (!atomic_load(&stop)) {
		if (write(fd_app, b, 256) != 256)
			abort();
		atomic_fetch_add(&app_calls, 1);
	}
	free(b);
	return NULL;
}

static void *seeker(void *arg)
{
	long bad = 0;

	(void)arg;
	while (!atomic_load(&stop)) {
		off_t o = lseek(fd_app, 0, SEEK_CUR);

		if (o < 0 || o % 256)
			bad++;
		atomic_fetch_add(&seek_calls, 1);
	}
	return (void *)bad;
}

static int run_starve(long ms)
{
	pthread_t t[65];
	void *bad;
	double t0;

	fd_app = open(path, O_RDWR | O_APPEND | O_CREAT | O_TRUNC, 0644);
	if (fd_app < 0)
		return 2;
	for (int i = 0; i < 64; i++)
		pthread_create(&t[i], NULL, shared_appender, NULL);
	pthread_create(&t[64], NULL, seeker, NULL);
	t0 = now();
	for (int s = 0; s < 10; s++) {
		long a0 = atomic_load(&app_calls), s0 = atomic_load(&seek_calls);
		/* A tenth of the run (ms below 10000). */
		struct timespec ts = { 0, (ms % 10000) * 100000L };

		nanosleep(&ts, NULL);
		printf("slice=%d appends=%ld seeks=%ld\n", s, atomic_load(&app_calls) - a0,
		       atomic_load(&seek_calls) - s0);
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < 64; i++)
		pthread_join(t[i], NULL);
	pthread_join(t[64], &bad);
	printf("appends=%ld seeks=%ld bad_seeks=%ld secs=%.2f\n", atomic_load(&app_calls),
	       atomic_load(&seek_calls), (long)bad, now() - t0);
	return 0;
}

/* ---- hexit --------------------------------------------------------- */

static void on_exit_sig(int sig)
{
	(void)sig;
	pthread_exit(NULL);
}

static void *exiting_appender(void *arg)
{
	char *b = malloc(REC);

	(void)arg;
	fill(b, 1);
	for (;;)
		if (write(fd_app, b, REC) != REC)
			abort();
	return NULL;
}

static int run_hexit(long n)
{
	long hung = 0;
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_exit_sig;
	sigaction(SIGUSR2, &sa, NULL);
	fd_app = open(path, O_RDWR | O_APPEND | O_CREAT | O_TRUNC, 0644);
	if (fd_app < 0)
		return 2;
	for (long i = 0; i < n; i++) {
		pthread_t t;
		struct timespec ts = { 0, 2 * 1000 * 1000 };

		pthread_create(&t, NULL, exiting_appender, NULL);
		nanosleep(&ts, NULL);
		pthread_kill(t, SIGUSR2);
		pthread_join(t, NULL);
		alarm(5);
		if (lseek(fd_app, 0, SEEK_CUR) < 0)
			return 2;
		alarm(0);
		if (ftruncate(fd_app, 0) < 0)
			return 2;
	}
	printf("trials=%ld hung=%ld\n", n, hung);
	return 0;
}


/* ---- mix ----------------------------------------------------------- */

static _Atomic long mix_writes, mix_reads, mix_torn, mix_ops;

static void *mix_appender(void *arg)
{
	long id = (long)arg;
	char *b = malloc(REC);

	fill(b, id);
	while (!atomic_load(&stop)) {
		if (write(fd_app, b, REC) != REC)
			abort();
		atomic_fetch_add(&mix_writes, 1);
	}
	free(b);
	return NULL;
}

/* At the shared offset: seek to a record a little before the end, read
 * two records' worth.  Every place the read can start is on a record. */
static void *mix_reader(void *arg)
{
	unsigned char *b = malloc(2 * REC);

	(void)arg;
	while (!atomic_load(&stop)) {
		struct stat st;
		ssize_t r;

		if (fstat(fd_app, &st) < 0)
			abort();
		if (st.st_size < 2 * REC)
			continue;
		if (lseek(fd_app, st.st_size / REC * REC - REC, SEEK_SET) < 0)
			abort();
		r = read(fd_app, b, 2 * REC);
		if (r <= 0)
			continue;
		atomic_fetch_add(&mix_reads, 1);
		atomic_fetch_add(&mix_torn, torn_at(b, r));
	}
	free(b);
	return NULL;
}

/* Exclusive callers that change nothing an append depends on: F_SETFL
 * flipping O_NONBLOCK (O_APPEND kept), dup2 of a copy of the
 * description onto its own number, lseek(SEEK_END). */
static void *mix_noise(void *arg)
{
	int copy = dup(fd_app);

	(void)arg;
	while (!atomic_load(&stop)) {
		int fl = fcntl(fd_app, F_GETFL);

		if (fcntl(fd_app, F_SETFL, fl ^ O_NONBLOCK) < 0)
			abort();
		if (dup2(copy, fd_app) != fd_app)
			abort();
		if (lseek(fd_app, 0, SEEK_END) < 0)
			abort();
		atomic_fetch_add(&mix_ops, 1);
	}
	close(copy);
	return NULL;
}

static int run_mix(long ms)
{
	pthread_t t[8];
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	unsigned char *b = malloc(REC);
	long recs = 0, bad = 0;
	struct stat st;
	int fd;

	fd_app = open(path, O_RDWR | O_APPEND | O_CREAT | O_TRUNC, 0644);
	if (fd_app < 0 || !b)
		return 2;
	for (long i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, mix_appender, (void *)(i + 1));
	pthread_create(&t[4], NULL, mix_reader, NULL);
	pthread_create(&t[5], NULL, mix_noise, NULL);
	nanosleep(&ts, NULL);
	atomic_store(&stop, 1);
	for (int i = 0; i < 6; i++)
		pthread_join(t[i], NULL);
	/* Every append whole and none lost. */
	fd = open(path, O_RDONLY);
	if (fd < 0 || fstat(fd, &st) < 0)
		return 2;
	while (pread(fd, b, REC, recs * REC) == REC) {
		bad += torn_at(b, REC);
		recs++;
	}
	printf("writes=%ld records=%ld bad_records=%ld size_ok=%d reads=%ld torn=%ld ops=%ld\n",
	       atomic_load(&mix_writes), recs, bad, st.st_size == recs * REC,
	       atomic_load(&mix_reads), atomic_load(&mix_torn), atomic_load(&mix_ops));
	return 0;
}

/* ---- cancel -------------------------------------------------------- */

static void *cancel_appender(void *arg)
{
	char b[4096];

	(void)arg;
	memset(b, 'c', sizeof(b));
	for (;;)
		if (write(fd_app, b, sizeof(b)) != (ssize_t)sizeof(b))
			abort();
	return NULL;
}

/* Appenders through one descriptor cancelled over and over while a
 * thread reads at its offset; then lseek must still come back. */
static int run_cancel(long n)
{
	pthread_t reader;

	fd_app = open(path, O_RDWR | O_APPEND | O_CREAT | O_TRUNC, 0644);
	if (fd_app < 0)
		return 2;
	pthread_create(&reader, NULL, mix_reader, NULL);
	for (long i = 0; i < n; i++) {
		pthread_t t[4];
		struct timespec ts = { 0, 500 * 1000 };

		for (int k = 0; k < 4; k++)
			pthread_create(&t[k], NULL, cancel_appender, NULL);
		nanosleep(&ts, NULL);
		for (int k = 0; k < 4; k++)
			pthread_cancel(t[k]);
		for (int k = 0; k < 4; k++)
			pthread_join(t[k], NULL);
		alarm(10);
		if (lseek(fd_app, 0, SEEK_CUR) < 0 || ftruncate(fd_app, 0) < 0)
			return 2;
		alarm(0);
	}
	atomic_store(&stop, 1);
	pthread_join(reader, NULL);
	printf("rounds=%ld reads=%ld\n", n, atomic_load(&mix_reads));
	return 0;
}

/* ---- rotate -------------------------------------------------------- */

/* Log rotation under appenders of one description: dup2 of a new
 * O_APPEND file onto their number, n times.  Every file must hold whole
 * records, and all of them together every record written. */
static int run_rotate(long n)
{
	pthread_t t[4];
	char name[4096];
	unsigned char *b = malloc(REC);
	long recs = 0, bad = 0, ragged = 0;

	snprintf(name, sizeof(name), "%s.0", path);
	fd_app = open(name, O_WRONLY | O_APPEND | O_CREAT | O_TRUNC, 0644);
	if (fd_app < 0 || !b)
		return 2;
	for (long i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, mix_appender, (void *)(i + 1));
	for (long i = 1; i <= n; i++) {
		struct timespec ts = { 0, 1000 * 1000 };
		int fd;

		nanosleep(&ts, NULL);
		snprintf(name, sizeof(name), "%s.%ld", path, i);
		fd = open(name, O_WRONLY | O_APPEND | O_CREAT | O_TRUNC, 0644);
		if (fd < 0 || dup2(fd, fd_app) != fd_app)
			return 2;
		close(fd);
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	for (long i = 0; i <= n; i++) {
		struct stat st;
		long k = 0;
		int fd;

		snprintf(name, sizeof(name), "%s.%ld", path, i);
		fd = open(name, O_RDONLY);
		if (fd < 0 || fstat(fd, &st) < 0)
			return 2;
		while (pread(fd, b, REC, k * REC) == REC) {
			bad += torn_at(b, REC);
			k++;
		}
		ragged += st.st_size != k * REC;
		recs += k;
		close(fd);
		unlink(name);
	}
	printf("writes=%ld records=%ld bad_records=%ld ragged_files=%ld\n",
	       atomic_load(&mix_writes), recs, bad, ragged);
	return 0;
}

int main(int argc, char **argv)
{
	long n;

	if (argc < 4) {
		fprintf(stderr, "usage: adv_app_probe forksig|freshrwf|starve|mix|cancel|rotate|hexit PATH N\n");
		return 2;
	}
	path = argv[2];
	n = atol(argv[3]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(argv[1], "forksig"))
		return run_forksig(n);
	if (!strcmp(argv[1], "freshrwf"))
		return run_freshrwf(n);
	if (!strcmp(argv[1], "starve"))
		return run_starve(n);
	if (!strcmp(argv[1], "rotate"))
		return run_rotate(n);
	if (!strcmp(argv[1], "cancel"))
		return run_cancel(n);
	if (!strcmp(argv[1], "mix"))
		return run_mix(n);
	if (!strcmp(argv[1], "hexit"))
		return run_hexit(n);
	fprintf(stderr, "adv_app_probe: unknown mode %s\n", argv[1]);
	return 2;
}
