/*
 * sigstorm: a high-rate SIGALRM storm whose handler itself writes to
 * tracked files, while threads do I/O on them.
 *
 *   sigstorm DIR [seconds=3] [threads=4] [usec=50] [storm_gap_us=0]
 *
 * SIGALRM comes from an interval timer (every usec microseconds) and from a
 * thread that sends it to the workers in turn with pthread_kill, 8 at a
 * time, then yields (or sleeps storm_gap_us).  The
 * handler (installed without SA_RESTART) saves errno and:
 *   - pwrites its own 64-byte record, numbered n, into DIR/records (slot
 *     n mod 2^20);
 *   - appends a 32-byte line numbered n with write() to DIR/lines, an
 *     O_APPEND descriptor;
 *   - every 4th time, pwrites a 4 KiB block of DIR/data in a region that
 *     only handlers write (the same file the threads lock).
 * The worker threads pwrite and pread 64 KiB blocks of DIR/data: their own
 * blocks (a read must return their last write) and one shared block (a
 * torn read counts; it fails under RS_COMPAT_STRICT=1).  No call on a
 * regular file may fail with EINTR or return short.
 *
 * EINTR semantics are checked on a pipe: a thread blocked in read() on an
 * empty pipe must see EINTR from a SIGALRM (no SA_RESTART) and never from
 * a SIGUSR1 (SA_RESTART), as without the shim.
 *
 * A watchdog ends the run with "DEADLOCK" if, after the run time, no
 * call completes for 30 s.  At the end every record and line must be there, intact.
 */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/time.h>

#include "compat.h"

#define BLK (64 * 1024)
#define REC 64
#define LINE 32
#define HBLK 4096
#define HBASE (16 * MIB)
#define HNBLK 16
/* The records file wraps after this many: a long soak stays at 64 MiB. */
#define NREC (1L << 20)

static int fd_data, fd_rec, fd_lines;
static _Atomic long hcount, hfail;
static _Atomic int stop;
static _Atomic long eintr_bad, short_io, torn, ops;
static int nthreads;
static pthread_t workers[64];
static _Atomic int handlers_on = 1;

static void fmt_line(char *l, long n)
{
	/* "sig NNNNNNNNN ....\n", exactly LINE bytes; by hand, because it
	 * runs in the handler */
	unsigned long v = (unsigned long)n % 1000000000ul;

	memcpy(l, "sig ", 4);
	for (int i = 12; i >= 4; i--, v /= 10)
		l[i] = (char)('0' + v % 10);
	l[13] = ' ';
	memset(l + 14, '.', LINE - 15);
	l[LINE - 1] = '\n';
	l[LINE] = '\0';
}

static void handler(int sig)
{
	int saved = errno;
	long n;
	unsigned char rec[REC];
	char l[LINE + 1];

	(void)sig;
	if (!atomic_load(&handlers_on)) {
		errno = saved;
		return;
	}
	n = atomic_fetch_add(&hcount, 1);
	memset(rec, (int)(n % 251) + 1, sizeof(rec));
	memcpy(rec, &n, sizeof(n));
	if (pwrite(fd_rec, rec, REC, (off_t)(n % NREC) * REC) != REC)
		atomic_fetch_add(&hfail, 1);
	fmt_line(l, n);
	if (write(fd_lines, l, LINE) != LINE)
		atomic_fetch_add(&hfail, 1);
	if (n % 4 == 0) {
		static unsigned char blk[HNBLK][HBLK];	/* one buffer per block */
		int b = (int)((n / 4) % HNBLK);

		/* Two handlers may fill the same buffer at once; what lands in
		 * the file must still be one of the fills, so give each block
		 * a value that only depends on the block. */
		memset(blk[b], 0x40 + b, HBLK);
		if (pwrite(fd_data, blk[b], HBLK, (off_t)(HBASE + (uint64_t)b * HBLK)) != HBLK)
			atomic_fetch_add(&hfail, 1);
	}
	errno = saved;
}

static void restart_handler(int sig)
{
	(void)sig;
}

static void check_io(ssize_t r, size_t want, const char *what)
{
	if (r == (ssize_t)want)
		return;
	if (r < 0 && errno == EINTR)
		atomic_fetch_add(&eintr_bad, 1);
	else
		atomic_fetch_add(&short_io, 1);
	fprintf(stderr, "sigstorm: %s returned %zd (errno %d)\n", what, r, r < 0 ? errno : 0);
}

static void *worker(void *arg)
{
	long t = (long)arg;
	unsigned char *b = xalloc(BLK), *r = xalloc(BLK);
	uint64_t s = 77 + (uint64_t)t;
	off_t own = (off_t)(t + 1) * BLK;

	for (unsigned gen = 0; !atomic_load(&stop); gen++) {
		memset(b, 1 + (int)((t * 7 + gen) % 250), BLK);
		check_io(pwrite(fd_data, b, BLK, own), BLK, "pwrite own");
		check_io(pread(fd_data, r, BLK, own), BLK, "pread own");
		if (memcmp(b, r, BLK) != 0) {
			fprintf(stderr, "sigstorm: thread %ld read back something else\n", t);
			atomic_fetch_add(&short_io, 1);
		}
		if (rnd(&s) & 1) {
			check_io(pwrite(fd_data, b, BLK, 0), BLK, "pwrite shared");
		} else {
			check_io(pread(fd_data, r, BLK, 0), BLK, "pread shared");
			if (!uniform(r, BLK))
				atomic_fetch_add(&torn, 1);
		}
		atomic_fetch_add(&ops, 1);
	}
	free(b);
	free(r);
	return NULL;
}

static long storm_gap_us;

static void *storm(void *arg)
{
	(void)arg;
	for (long i = 0; !atomic_load(&stop); i++) {
		pthread_kill(workers[i % nthreads], SIGALRM);
		if (i % 8 == 0) {
			if (storm_gap_us)
				usleep((useconds_t)storm_gap_us);
			else
				sched_yield();
		}
	}
	return NULL;
}

/* Progress for the watchdog: any I/O by a worker or a handler, and the
 * phases after the storm. */
static _Atomic long phase;
static long progress(void)
{
	return atomic_load(&ops) + atomic_load(&hcount) + atomic_load(&phase);
}

/* A thread blocked in read() on an empty pipe: with signal sig (and the
 * other one blocked), count EINTR returns until data arrives. */
struct piper {
	int fds[2];
	int sig;
	pthread_t th;
	long eintr, got;
};

static void *pipe_reader(void *arg)
{
	struct piper *p = arg;
	sigset_t m;
	char c;

	sigemptyset(&m);
	sigaddset(&m, p->sig == SIGALRM ? SIGUSR1 : SIGALRM);
	pthread_sigmask(SIG_BLOCK, &m, NULL);
	for (;;) {
		ssize_t r = read(p->fds[0], &c, 1);

		if (r == 1) {
			p->got++;
			if (c == 'q')
				return NULL;
		} else if (r < 0 && errno == EINTR) {
			p->eintr++;
		} else {
			fprintf(stderr, "sigstorm: pipe read %zd errno %d\n", r, errno);
			return NULL;
		}
	}
}

static int pipe_check(struct piper *p)
{
	char q = 'q';

	if (pipe(p->fds) < 0)
		die("pipe");
	pthread_create(&p->th, NULL, pipe_reader, p);
	for (int i = 0; i < 50; i++) {
		sleep_ms(2);
		pthread_kill(p->th, p->sig);
	}
	sleep_ms(5);
	if (write(p->fds[1], &q, 1) != 1)
		die("pipe write");
	pthread_join(p->th, NULL);
	close(p->fds[0]);
	close(p->fds[1]);
	return 0;
}

int main(int argc, char **argv)
{
	char path[4200];
	double seconds;
	long usec, bad = 0, lines = 0;
	struct sigaction sa;
	struct itimerval it;
	pthread_t st;
	struct watchdog_arg wd = { "sigstorm", 0, progress };
	struct piper pa = { .sig = SIGALRM }, pu = { .sig = SIGUSR1 };
	unsigned char rec[REC];
	char *seen;
	FILE *f;

	if (argc < 2)
		die("usage: sigstorm DIR [seconds=S] [threads=T] [usec=U]");
	seconds = atof(arg_str(argc, argv, "seconds", "3"));
	nthreads = (int)arg_num(argc, argv, "threads", 4);
	usec = arg_num(argc, argv, "usec", 50);
	storm_gap_us = arg_num(argc, argv, "storm_gap_us", 0);
	if (nthreads < 1 || nthreads > 64)
		die("threads must be 1..64");
	wd.seconds = seconds;
	start_watchdog(&wd);

	snprintf(path, sizeof(path), "%s/data", argv[1]);
	fd_data = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	snprintf(path, sizeof(path), "%s/records", argv[1]);
	fd_rec = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	snprintf(path, sizeof(path), "%s/lines", argv[1]);
	fd_lines = open(path, O_RDWR | O_CREAT | O_TRUNC | O_APPEND, 0644);
	if (fd_data < 0 || fd_rec < 0 || fd_lines < 0)
		die("open in %s", argv[1]);
	/* the shared block exists before anyone reads it */
	if (ftruncate(fd_data, (off_t)(nthreads + 1) * BLK) < 0)
		die("ftruncate");

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handler;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = 0;		/* no SA_RESTART */
	sigaction(SIGALRM, &sa, NULL);
	sa.sa_handler = restart_handler;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, NULL);

	/* EINTR semantics first, on a quiet process. */
	atomic_store(&handlers_on, 0);
	pipe_check(&pa);
	pipe_check(&pu);
	atomic_store(&handlers_on, 1);

	for (long t = 0; t < nthreads; t++)
		pthread_create(&workers[t], NULL, worker, (void *)t);
	pthread_create(&st, NULL, storm, NULL);
	it.it_interval.tv_sec = 0;
	it.it_interval.tv_usec = usec;
	it.it_value = it.it_interval;
	setitimer(ITIMER_REAL, &it, NULL);
	sleep_ms((unsigned)(seconds * 1000));
	atomic_store(&stop, 1);
	memset(&it, 0, sizeof(it));
	setitimer(ITIMER_REAL, &it, NULL);
	pthread_join(st, NULL);
	atomic_fetch_add(&phase, 1);
	for (int t = 0; t < nthreads; t++) {
		pthread_join(workers[t], NULL);
		atomic_fetch_add(&phase, 1);
	}
	atomic_store(&handlers_on, 0);

	/* Every record intact: slot s holds the last n with n % NREC == s. */
	seen = calloc((size_t)hcount + 1, 1);
	for (long s = 0; s < hcount && s < NREC; s++) {
		long got, n = s + (hcount - 1 - s) / NREC * NREC;

		if (pread(fd_rec, rec, REC, (off_t)s * REC) != REC) {
			bad++;
			continue;
		}
		memcpy(&got, rec, sizeof(got));
		if (got != n || !uniform(rec + sizeof(got), REC - sizeof(got)) ||
		    rec[sizeof(got)] != (unsigned char)((n % 251) + 1)) {
			if (bad < 5)
				fprintf(stderr, "sigstorm: record %ld is wrong\n", n);
			bad++;
		}
	}
	for (int b = 0; b < HNBLK; b++) {
		unsigned char blk[HBLK];
		ssize_t r = pread(fd_data, blk, HBLK, (off_t)(HBASE + (uint64_t)b * HBLK));

		if (r == HBLK && !(uniform(blk, HBLK) && blk[0] == 0x40 + b)) {
			fprintf(stderr, "sigstorm: handler block %d is wrong\n", b);
			bad++;
		}
	}
	snprintf(path, sizeof(path), "%s/lines", argv[1]);
	f = fopen(path, "r");
	if (!f)
		die("fopen %s", path);
	{
		char got[128], want[LINE + 1];
		unsigned long n;

		while (fgets(got, sizeof(got), f)) {
			lines++;
			if (sscanf(got, "sig %lu", &n) != 1 || (long)n >= hcount) {
				bad++;
				continue;
			}
			fmt_line(want, (long)n);
			if (strcmp(got, want) != 0 || seen[n]++) {
				if (bad < 5)
					fprintf(stderr, "sigstorm: bad line %s", got);
				bad++;
			}
		}
	}
	fclose(f);
	if (lines != hcount) {
		fprintf(stderr, "sigstorm: %ld lines for %ld handler runs\n", lines, (long)hcount);
		bad++;
	}
	if (pa.eintr == 0) {
		fprintf(stderr, "sigstorm: read() on a pipe never returned EINTR without SA_RESTART\n");
		bad++;
	}
	if (pu.eintr != 0) {
		fprintf(stderr, "sigstorm: read() on a pipe returned EINTR with SA_RESTART\n");
		bad++;
	}
	fprintf(stderr,
		"sigstorm: seconds=%.1f threads=%d handlers=%ld ops=%ld handler_failures=%ld "
		"eintr_on_files=%ld short=%ld torn=%ld pipe_eintr=%ld/%ld bad=%ld shim=%d\n",
		seconds, nthreads, (long)hcount, (long)ops, (long)hfail, (long)eintr_bad,
		(long)short_io, (long)torn, pa.eintr, pu.eintr, bad, shim_loaded());
	if (bad || hfail || eintr_bad || short_io || (torn && strict_mode()) || hcount < 100) {
		printf("sigstorm FAIL: bad=%ld handler_failures=%ld eintr=%ld short=%ld torn=%ld handlers=%ld\n",
		       bad, (long)hfail, (long)eintr_bad, (long)short_io, (long)torn, (long)hcount);
		return 1;
	}
	printf("sigstorm ok\n");
	return 0;
}
