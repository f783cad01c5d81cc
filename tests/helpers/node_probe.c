/*
 * node_probe: several processes on one file, for tests/test_node.c.
 *
 * Each subcommand is an orchestrator that starts worker processes (fork +
 * exec of this program, so that every worker is a fresh process that
 * initialises the preloaded shim itself and opens the file itself), lets
 * them race, collects their counts and prints one line of "key=N" pairs
 * and "verdict=PASS|FAIL <why>".  The orchestrator runs under the same
 * environment (LD_PRELOAD or not) as the workers; it does no I/O on the
 * data file while they run.
 *
 *   node_probe torn    file=F writers=N readers=M block=B seconds=S
 *                      [overlap=1] [direct=1] [rw=1]
 *       Writers pwrite B bytes of one value at 0 (with overlap=1, odd
 *       writers at B/2); readers pread [0,B) (overlap: [0,3B/2)) and count
 *       reads that no serial order of whole writes explains.  rw=1 uses
 *       lseek+read/write at the file offset.  Prints reads, torn, writes,
 *       final_torn (overlap: the file after the writers stopped).
 *       whole=1 (with one reader): the reader first reads one page in
 *       each of ten 4 MiB windows, alone, to be granted the whole file.
 *       vec=K: every write and read is a pwritev/preadv (rw=1: writev/
 *       readv) of K iovecs in an array on the heap.  wfirst=1: readers
 *       start 300 ms after the writers; rfirst=1: writers after readers.
 *       idle=K first starts K idle processes that each attach to the node
 *       table (a read far beyond the raced range) and stay until the end;
 *       prints idle_attached, how many of them hold the table.
 *   node_probe mixed   file=F writers=N seconds=S size=Z [direct=1]
 *       Writer i writes 64 KiB of byte i+1 at random multiples of 32 KiB;
 *       afterwards every 32 KiB chunk must be uniform (each write covers
 *       two whole chunks, so any serial order leaves them so).
 *   node_probe region  file=F procs=N len=L io=I
 *       Process i writes [i*L, (i+1)*L) in I-byte pwrites, in order.
 *       Prints each worker's pid (for its RANGESHIM_STATS file).
 *   node_probe hammer  file=F procs=N seconds=S kill_ms=K size=Z block=B
 *       N workers pwrite/pread B bytes at random 4 KiB-aligned offsets in
 *       [0,Z), counting progress in a shared page; one is SIGKILLed every K
 *       ms and replaced.  Prints kills, max_stall_ms (longest time any
 *       survivor, or a replacement, went without progress after a kill),
 *       torn_pages seen by reads, mixed_pages in the final file.
 *   node_probe fork    file=F mode=disjoint|same|exec|race|gone
 *       A process with a cached grant forks; the child does I/O on the
 *       same file (disjoint range, the parent's range, or after exec) and
 *       exits; the parent goes on writing.  race: a parent thread keeps
 *       writing 1 MiB blocks while the child reads them and counts tears.
 *       gone: the default table and /run/user/<euid> are removed before
 *       the fork, as at a logout (run with RANGESHIM_SHM empty, as root).
 *   node_probe forkstorm file=F count=N
 *       N processes, one after another, each attach (a pwrite), fork a
 *       child that sleeps until the orchestrator lets it go, and exit
 *       normally (glibc daemon(), pre-fork servers, Python's fork start
 *       method).  Then a fresh process writes: it must be in node scope.
 *       The sleeping children are released at the end.
 *   node_probe forkkill file=F count=N
 *       N rounds: a writer caches a grant, forks a sleeping child, and
 *       rewrites [0, 1 MiB) in a loop until it is SIGKILLed; then another
 *       process writes the same range.  Prints max_ms, how long that
 *       write took at worst: the dead writer's grant must be reclaimed
 *       although its child lives on.
 *   node_probe forkleak file=F count=N
 *       N fresh processes; in each, a thread makes the first coordinated
 *       call (the attach) while the main thread forks children as fast as
 *       it can.  Every child looks for the node table in its descriptors
 *       and in its mappings.  Prints leaks (children that found it) and
 *       children, and parents_holding (workers that see the table in
 *       themselves: the detector's control).
 *   node_probe selftest file=F seconds=S
 *       One process, a writer thread and a reader thread on 1 MiB blocks
 *       (torn must be 0), then a write/read-back check.
 *   node_probe lone    file=F size=Z count=N
 *       One process alone on a file of up to Z bytes: N calls at random
 *       4 KiB blocks, a pwrite every 16th, a pread otherwise (of a hole,
 *       or past the end: short).  No truncation, whose lock would run to
 *       infinity and cover everything by itself.  Prints calls and pid
 *       (for its RANGESHIM_STATS file).
 *   node_probe stride  file=F procs=N count=C block=B seconds=S [cross=1]
 *                      [shuffle=1]
 *       N ranks (processes) on interleaved blocks of B bytes: rank r owns
 *       blocks j*N + r, j < C.  Each pass, a rank pwrites all of its
 *       blocks in order (each of one byte value, new each pass), then
 *       preads them back and counts blocks that are not of one value
 *       (torn).  Passes until S seconds are up, at least one (S=0: one).
 *       cross=1: a third process meanwhile alternates a pwrite of 4 whole
 *       blocks (2 of each rank's, with N=2) and a pread of 4 blocks
 *       starting mid-block, counting block portions not of one value.
 *       threads=T: T threads in each rank do the same at once, each
 *       writing values of its own (so that a read can tear inside a
 *       rank too).
 *       shuffle=1: each rank visits its blocks in a random order (the
 *       shim's lookahead, the blocks after the call's, seldom holds the
 *       next one).  Prints calls (the ranks'), torn,
 *       cross_reads, cross_writes and each rank's pid.
 *   node_probe closehold file=F hold_ms=T [keep_open=1]
 *       Opens, writes, closes (unless keep_open), prints "closed" and
 *       sleeps T ms so that the test can look at the table meanwhile.
 *
 * Sizes take K/M suffixes.  Every line says shim=0|1 (librangeshim mapped).
 * Exit status: 0 PASS, 1 FAIL, 2 setup error, 3 O_DIRECT unsupported.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "probe.h"

#define KIB 1024ull
#define MIB (1024ull * 1024ull)
#define PAGE 4096ull
#define MAXKIDS 32

struct args {
	const char *file, *mode, *progress;
	long long block, size, len, io, off, start_ns, seed;
	double seconds;
	int writers, readers, procs, id, nw, slot;
	int direct, rw, overlap, kill_ms, hold_ms, keep_open, count, idle, whole;
	int vec, wfirst, rfirst;
	int cross, shuffle, threads;
};

static struct args A = {
	.block = (long long)MIB, .size = (long long)MIB, .len = 16 * (long long)MIB,
	.io = 4096, .seconds = 1.0, .writers = 1, .readers = 1, .procs = 2, .nw = 1,
	.kill_ms = 300, .hold_ms = 1000, .count = 10, .threads = 1,
};
static char self_exe[4096];

/* ---- small utilities ---- */

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char *fmt, ...)
{
	va_list ap;
	int e = errno;

	fprintf(stdout, "node_probe[%d]: ", (int)getpid());
	va_start(ap, fmt);
	vfprintf(stdout, fmt, ap);
	va_end(ap);
	fprintf(stdout, ": %s\nverdict=FAIL setup\n", strerror(e));
	fflush(stdout);
	exit(2);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static void sleep_until(uint64_t t)
{
	uint64_t n = now_ns();

	if (t > n)
		sleep_ns(t - n);
}

static void *xalloc(size_t n)
{
	void *p;

	if (posix_memalign(&p, PAGE, n ? n : 1) != 0)
		die("posix_memalign %zu", n);
	return p;
}

static uint64_t rnd_state;

static uint64_t rnd(void)
{
	rnd_state ^= rnd_state >> 12;
	rnd_state ^= rnd_state << 25;
	rnd_state ^= rnd_state >> 27;
	return rnd_state * 2685821657736338717ull;
}

static int uniform(const unsigned char *p, size_t n)
{
	uint64_t w;

	memset(&w, p[0], sizeof(w));
	for (size_t i = 0; i + 8 <= n; i += 8) {
		uint64_t x;

		memcpy(&x, p + i, 8);
		if (x != w)
			return 0;
	}
	for (size_t i = n & ~(size_t)7; i < n; i++)
		if (p[i] != p[0])
			return 0;
	return 1;
}

static int open_data(int direct)
{
	int fd = open(A.file, O_RDWR | (direct ? O_DIRECT : 0));

	if (fd < 0 && direct && errno == EINVAL) {
		printf("skip=1 direct_unsupported=1 verdict=PASS\n");
		fflush(stdout);
		exit(3);
	}
	if (fd < 0)
		die("open %s", A.file);
	return fd;
}

/* vec: buf as A.vec iovecs, in an array on the heap (the shim reads such
 * an array with system calls, unless it needs no range: iolock.h,
 * rs_iov_solo). */
static struct iovec *vec_of(const void *buf, size_t n)
{
	static struct iovec *v;
	size_t part = n / (size_t)A.vec;

	if (!v && !(v = malloc(sizeof(*v) * (size_t)A.vec)))
		die("malloc");
	for (int i = 0; i < A.vec; i++)
		v[i] = (struct iovec){ (char *)buf + (size_t)i * part,
				       i == A.vec - 1 ? n - (size_t)i * part : part };
	return v;
}

static ssize_t full_pwrite(int fd, const void *buf, size_t n, off_t off)
{
	if (A.vec && A.rw) {
		if (lseek(fd, off, SEEK_SET) != off)
			return -1;
		return writev(fd, vec_of(buf, n), A.vec);
	}
	if (A.vec)
		return pwritev(fd, vec_of(buf, n), A.vec, off);
	if (A.rw) {
		if (lseek(fd, off, SEEK_SET) != off)
			return -1;
		return write(fd, buf, n);
	}
	return pwrite(fd, buf, n, off);
}

static ssize_t full_pread(int fd, void *buf, size_t n, off_t off)
{
	if (A.vec && A.rw) {
		if (lseek(fd, off, SEEK_SET) != off)
			return -1;
		return readv(fd, vec_of(buf, n), A.vec);
	}
	if (A.vec)
		return preadv(fd, vec_of(buf, n), A.vec, off);
	if (A.rw) {
		if (lseek(fd, off, SEEK_SET) != off)
			return -1;
		return read(fd, buf, n);
	}
	return pread(fd, buf, n, off);
}

/* Create A.file with len bytes of value v, synced (O_DIRECT then finds
 * allocated blocks). */
static void prefill(size_t len, int v)
{
	unsigned char *buf = xalloc(MIB);
	int fd = open(A.file, O_RDWR | O_CREAT | O_TRUNC, 0600);

	if (fd < 0)
		die("create %s", A.file);
	memset(buf, v, MIB);
	for (size_t done = 0; done < len;) {
		size_t k = len - done < MIB ? len - done : MIB;

		if (pwrite(fd, buf, k, (off_t)done) != (ssize_t)k)
			die("prefill %s", A.file);
		done += k;
	}
	fsync(fd);
	close(fd);
	free(buf);
}

static long long parse_size(const char *s)
{
	char *end;
	long long v = strtoll(s, &end, 10);

	if (*end == 'K' || *end == 'k')
		v *= 1024;
	else if (*end == 'M' || *end == 'm')
		v *= 1024 * 1024;
	else if (*end == 'G' || *end == 'g')
		v *= 1024 * 1024 * 1024;
	return v;
}

static void parse(int argc, char **argv)
{
	for (int i = 2; i < argc; i++) {
		char *eq = strchr(argv[i], '=');
		const char *k = argv[i], *v;
		size_t kl;

		if (!eq) {
			fprintf(stderr, "node_probe: bad argument '%s'\n", argv[i]);
			exit(2);
		}
		v = eq + 1;
		kl = (size_t)(eq - k);
#define IS(name) (kl == strlen(name) && strncmp(k, name, kl) == 0)
		if (IS("file")) A.file = v;
		else if (IS("mode")) A.mode = v;
		else if (IS("progress")) A.progress = v;
		else if (IS("block")) A.block = parse_size(v);
		else if (IS("size")) A.size = parse_size(v);
		else if (IS("len")) A.len = parse_size(v);
		else if (IS("io")) A.io = parse_size(v);
		else if (IS("off")) A.off = parse_size(v);
		else if (IS("start")) A.start_ns = strtoll(v, NULL, 10);
		else if (IS("seed")) A.seed = strtoll(v, NULL, 10);
		else if (IS("seconds")) A.seconds = strtod(v, NULL);
		else if (IS("writers")) A.writers = atoi(v);
		else if (IS("readers")) A.readers = atoi(v);
		else if (IS("procs")) A.procs = atoi(v);
		else if (IS("id")) A.id = atoi(v);
		else if (IS("nw")) A.nw = atoi(v);
		else if (IS("slot")) A.slot = atoi(v);
		else if (IS("direct")) A.direct = atoi(v);
		else if (IS("rw")) A.rw = atoi(v);
		else if (IS("whole")) A.whole = atoi(v);
		else if (IS("vec")) A.vec = atoi(v);
		else if (IS("wfirst")) A.wfirst = atoi(v);
		else if (IS("rfirst")) A.rfirst = atoi(v);
		else if (IS("overlap")) A.overlap = atoi(v);
		else if (IS("kill_ms")) A.kill_ms = atoi(v);
		else if (IS("hold_ms")) A.hold_ms = atoi(v);
		else if (IS("keep_open")) A.keep_open = atoi(v);
		else if (IS("count")) A.count = atoi(v);
		else if (IS("idle")) A.idle = atoi(v);
		else if (IS("cross")) A.cross = atoi(v);
		else if (IS("shuffle")) A.shuffle = atoi(v);
		else if (IS("threads")) A.threads = atoi(v);
		else {
			fprintf(stderr, "node_probe: unknown key in '%s'\n", argv[i]);
			exit(2);
		}
#undef IS
	}
	if (!A.file) {
		fprintf(stderr, "node_probe: file= is required\n");
		exit(2);
	}
}

/* ---- workers: fork + exec of ourselves, output through a pipe ---- */

struct kid {
	pid_t pid;
	int fd;
	int status;
	size_t used;
	char out[2048];
};

struct argvb {
	int n;
	char *v[40];
	char pool[40][512];
};

static void ab(struct argvb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void ab(struct argvb *b, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(b->pool[b->n], sizeof(b->pool[0]), fmt, ap);
	va_end(ap);
	b->v[b->n] = b->pool[b->n];
	b->n++;
	b->v[b->n] = NULL;
}

static void base_args(struct argvb *b, const char *role)
{
	b->n = 0;
	ab(b, "%s", self_exe);
	ab(b, "%s", role);
	ab(b, "file=%s", A.file);
	ab(b, "direct=%d", A.direct);
	ab(b, "rw=%d", A.rw);
	ab(b, "whole=%d", A.whole);
	ab(b, "vec=%d", A.vec);
	ab(b, "wfirst=%d", A.wfirst);
	ab(b, "rfirst=%d", A.rfirst);
	ab(b, "block=%lld", A.block);
	ab(b, "size=%lld", A.size);
	ab(b, "seconds=%g", A.seconds);
	ab(b, "start=%lld", A.start_ns);
}

static void spawn(struct kid *k, struct argvb *b)
{
	int p[2];

	if (pipe2(p, O_CLOEXEC) < 0)
		die("pipe");
	fflush(stdout);
	k->pid = fork();
	if (k->pid < 0)
		die("fork");
	if (k->pid == 0) {
		dup2(p[1], 1);
		execv(self_exe, b->v);
		_exit(127);
	}
	close(p[1]);
	k->fd = p[0];
	k->used = 0;
	k->out[0] = '\0';
	k->status = -1;
}

/* Read every kid's output to EOF and reap it; kill those still running
 * at the deadline.  Returns how many did not exit 0. */
static int collect(struct kid *k, int n, double timeout_s)
{
	uint64_t deadline = now_ns() + (uint64_t)(timeout_s * 1e9);
	int open_n = n, bad = 0;

	while (open_n > 0 && now_ns() < deadline) {
		struct pollfd p[MAXKIDS];
		int map[MAXKIDS], m = 0;

		for (int i = 0; i < n; i++)
			if (k[i].fd >= 0) {
				p[m].fd = k[i].fd;
				p[m].events = POLLIN;
				map[m++] = i;
			}
		if (poll(p, (nfds_t)m, 100) <= 0)
			continue;
		for (int j = 0; j < m; j++) {
			struct kid *c = &k[map[j]];
			ssize_t r;

			if (!(p[j].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			r = read(c->fd, c->out + c->used, sizeof(c->out) - 1 - c->used);
			if (r > 0) {
				c->used += (size_t)r;
				c->out[c->used] = '\0';
				if (c->used == sizeof(c->out) - 1)
					c->used = 0;
			} else {
				close(c->fd);
				c->fd = -1;
				open_n--;
			}
		}
	}
	for (int i = 0; i < n; i++) {
		int st;

		if (k[i].fd >= 0) {
			kill(k[i].pid, SIGKILL);
			close(k[i].fd);
			k[i].fd = -1;
			printf("worker %d (pid %d) timed out\n", i, (int)k[i].pid);
		}
		waitpid(k[i].pid, &st, 0);
		k[i].status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		if (k[i].status == 3) {
			printf("skip=1 direct_unsupported=1 verdict=PASS\n");
			exit(3);
		}
		if (k[i].status != 0) {
			printf("worker %d (pid %d) status %d: %s\n", i, (int)k[i].pid, k[i].status,
			       k[i].out);
			bad++;
		}
	}
	return bad;
}

static long long field(const char *s, const char *key)
{
	size_t kl = strlen(key);

	for (const char *p = s; (p = strstr(p, key)) != NULL; p += kl)
		if ((p == s || p[-1] == ' ' || p[-1] == '\n') && p[kl] == '=')
			return strtoll(p + kl + 1, NULL, 10);
	return 0;
}

static long long sum(const struct kid *k, int n, const char *key)
{
	long long s = 0;

	for (int i = 0; i < n; i++)
		s += field(k[i].out, key);
	return s;
}

static void verdict(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void verdict(int ok, const char *fmt, ...)
{
	va_list ap;

	printf("shim=%d verdict=%s", shim_loaded(), ok ? "PASS" : "FAIL ");
	va_start(ap, fmt);
	if (!ok)
		vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	exit(ok ? 0 : 1);
}

/* ---- torn ---- */

static int torn_check(const unsigned char *b, size_t block, int overlap)
{
	size_t h = block / 2;

	if (!overlap)
		return !uniform(b, block);
	if (!uniform(b, h) || !uniform(b + h, h) || !uniform(b + 2 * h, h))
		return 1;
	return b[h] != b[0] && b[h] != b[2 * h];
}

/* Wait for the workers' common start; returns the end of the timed window. */
static uint64_t timed_window(void)
{
	sleep_until((uint64_t)A.start_ns);
	return now_ns() + (uint64_t)(A.seconds * 1e9);
}

/* A timed writer's last words: its counts; exit status 1 if a write failed. */
static void writer_exit(int fd, uint64_t writes, uint64_t errs) __attribute__((noreturn));
static void writer_exit(int fd, uint64_t writes, uint64_t errs)
{
	close(fd);
	printf("writes=%llu write_errors=%llu\n", (unsigned long long)writes,
	       (unsigned long long)errs);
	exit(errs ? 1 : 0);
}

static void role_torn_writer(void)
{
	size_t block = (size_t)A.block;
	unsigned char *buf = xalloc(block);
	int fd = open_data(A.direct);
	off_t off = A.overlap && (A.id & 1) ? (off_t)(block / 2) : 0;
	uint64_t end, writes = 0, errs = 0;

	end = timed_window();
	if (A.rfirst)	/* the readers alone first (as wfirst, below) */
		sleep_until(now_ns() + 300000000ull);
	while (now_ns() < end) {
		memset(buf, 1 + (int)((writes * (uint64_t)A.nw + (uint64_t)A.id) % 255), block);
		if (full_pwrite(fd, buf, block, off) != (ssize_t)block)
			errs++;
		writes++;
	}
	writer_exit(fd, writes, errs);
}

static void role_torn_reader(void)
{
	size_t len = (size_t)(A.overlap ? A.block + A.block / 2 : A.block);
	unsigned char *buf = xalloc(len);
	int fd = open_data(A.direct);
	uint64_t end, reads = 0, torn = 0, errs = 0;

	/* whole: alone on the file, move through ten 4 MiB windows before
	 * the writers start, so that the node table grants this reader the
	 * whole file (nodelock.c, "A lone process"), and its reads at the
	 * file offset enter that grant without an lseek (grants.h,
	 * rs_grant_enter_whole) when the writers come to take it. */
	for (int i = 0; A.whole && i < 10; i++)
		if (pread(fd, buf, PAGE, (off_t)i * 4 * (off_t)MIB) != PAGE)
			errs++;
	end = timed_window();
	/* wfirst: arrive while the writers are under way, alone at first
	 * (a single-threaded writer of heap iovec arrays is then granted
	 * the whole file, and writes without reading its arrays). */
	if (A.wfirst)
		sleep_until(now_ns() + 300000000ull);
	while (now_ns() < end) {
		if (full_pread(fd, buf, len, 0) != (ssize_t)len) {
			errs++;
			continue;
		}
		reads++;
		torn += (uint64_t)torn_check(buf, (size_t)A.block, A.overlap);
	}
	close(fd);
	printf("reads=%llu torn=%llu read_errors=%llu\n", (unsigned long long)reads,
	       (unsigned long long)torn, (unsigned long long)errs);
	exit(errs ? 1 : 0);
}

static int holds_table(void);

/* An idle process: attach (a read far from the raced range), say on
 * stdout whether we hold the table, and stay until stdin closes. */
static void role_torn_idle(void)
{
	char c;
	int fd = open(A.file, O_RDONLY);

	if (fd < 0 || pread(fd, &c, 1, (off_t)(64 * MIB + (uint64_t)A.id * 4 * MIB)) < 0)
		_exit(2);
	c = holds_table() ? '1' : '0';
	if (write(1, &c, 1) != 1)
		_exit(2);
	while (read(0, &c, 1) > 0)
		;
	close(fd);
	exit(0);
}

/* Start A.idle idle processes and wait until each has attached (or
 * failed to).  Returns how many hold the table; *release, when closed,
 * lets them go. */
static int start_idle(pid_t *pids, int *release)
{
	int ready[2], go[2], attached = 0;
	struct argvb b;

	if (pipe2(ready, O_CLOEXEC) < 0 || pipe2(go, O_CLOEXEC) < 0)
		die("pipe");
	for (int i = 0; i < A.idle; i++) {
		base_args(&b, "ti");
		ab(&b, "id=%d", i);
		fflush(stdout);
		pids[i] = fork();
		if (pids[i] < 0)
			die("fork");
		if (pids[i] == 0) {
			dup2(ready[1], 1);
			dup2(go[0], 0);
			execv(self_exe, b.v);
			_exit(127);
		}
	}
	close(ready[1]);
	close(go[0]);
	for (int i = 0; i < A.idle; i++) {
		char c;

		if (read(ready[0], &c, 1) != 1)
			break;	/* one died: its status says so */
		attached += c == '1';
	}
	close(ready[0]);
	*release = go[1];
	return attached;
}

static int stop_idle(const pid_t *pids, int release)
{
	int bad = 0;

	close(release);
	for (int i = 0; i < A.idle; i++) {
		int st;

		if (waitpid(pids[i], &st, 0) != pids[i] || !WIFEXITED(st) || WEXITSTATUS(st)) {
			printf("idle worker %d (pid %d) status 0x%x\n", i, (int)pids[i], st);
			bad++;
		}
	}
	return bad;
}

static void cmd_torn(void)
{
	struct kid k[MAXKIDS];
	struct argvb b;
	int n = 0, bad, idle_attached = 0, release = -1;
	size_t len = (size_t)(A.overlap ? A.block + A.block / 2 : A.block);
	long long final_torn = 0;
	pid_t *idle = xalloc(sizeof(pid_t) * (size_t)(A.idle + 1));

	if (A.writers + A.readers > MAXKIDS || A.block <= 0 || A.block % (long long)PAGE)
		die("bad sizes");
	/* whole: room for the readers' walk through ten 4 MiB windows. */
	prefill(A.whole && len < 40 * MIB ? 40 * MIB : len, 1);
	if (A.idle > 0)
		idle_attached = start_idle(idle, &release);
	A.start_ns = (long long)(now_ns() + 300000000ull);
	for (int i = 0; i < A.writers; i++) {
		base_args(&b, "tw");
		ab(&b, "id=%d", i);
		ab(&b, "nw=%d", A.writers);
		ab(&b, "overlap=%d", A.overlap);
		spawn(&k[n++], &b);
	}
	for (int i = 0; i < A.readers; i++) {
		base_args(&b, "tr");
		ab(&b, "overlap=%d", A.overlap);
		spawn(&k[n++], &b);
	}
	bad = collect(k, n, A.seconds + 20);
	if (A.overlap) {
		unsigned char *buf = xalloc(len);
		int fd = open(A.file, O_RDONLY);

		if (fd < 0 || pread(fd, buf, len, 0) != (ssize_t)len)
			die("final read");
		final_torn = torn_check(buf, (size_t)A.block, 1);
		close(fd);
		free(buf);
	}
	if (A.idle > 0)
		bad += stop_idle(idle, release);
	printf("procs=%d reads=%lld torn=%lld writes=%lld final_torn=%lld errors=%lld "
	       "idle_attached=%d ", n,
	       sum(k, n, "reads"), sum(k, n, "torn"), sum(k, n, "writes"), final_torn,
	       sum(k, n, "read_errors") + sum(k, n, "write_errors"), idle_attached);
	unlink(A.file);
	verdict(bad == 0, "%d workers failed", bad);
}

/* ---- lone ---- */

static void cmd_lone(void)
{
	unsigned char *buf = xalloc(4096);
	uint64_t blocks = (uint64_t)A.size / 4096, calls = 0;
	int fd;

	unlink(A.file);
	fd = open(A.file, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd < 0 || blocks == 0)
		die("lone setup");
	rnd_state = 12345;
	for (int i = 0; i < A.count; i++) {
		off_t off = (off_t)(rnd() % blocks * 4096);
		ssize_t n;

		if (i % 16 == 0) {
			memset(buf, i & 0xff, 4096);
			n = pwrite(fd, buf, 4096, off);
		} else {
			n = pread(fd, buf, 4096, off);
		}
		if (n < 0 || (i % 16 == 0 && n != 4096))
			die("lone I/O");
		calls++;
	}
	close(fd);
	unlink(A.file);
	printf("calls=%llu pid=%d ", (unsigned long long)calls, (int)getpid());
	verdict(1, "%s", "");
}

/* ---- mixed ---- */

#define CHUNK ((size_t)(32 * KIB))

static void role_mixed_writer(void)
{
	size_t block = 2 * CHUNK;
	unsigned char *buf = xalloc(block);
	int fd = open_data(A.direct);
	uint64_t nchunks = (uint64_t)A.size / CHUNK, end, writes = 0, errs = 0;

	rnd_state = 0x9e3779b97f4a7c15ull ^ ((uint64_t)getpid() << 20) ^ (uint64_t)A.id;
	memset(buf, A.id + 1, block);
	end = timed_window();
	while (now_ns() < end) {
		off_t off = (off_t)((rnd() % (nchunks - 1)) * CHUNK);

		if (full_pwrite(fd, buf, block, off) != (ssize_t)block)
			errs++;
		writes++;
	}
	writer_exit(fd, writes, errs);
}

static void cmd_mixed(void)
{
	struct kid k[MAXKIDS];
	struct argvb b;
	size_t size = (size_t)A.size;
	unsigned char *buf;
	long long mixed = 0, badval = 0, written = 0;
	int bad, fd;

	if (A.writers > MAXKIDS || A.writers > 254 || size < 2 * CHUNK || size % CHUNK)
		die("bad sizes");
	prefill(size, 0);
	A.start_ns = (long long)(now_ns() + 300000000ull);
	for (int i = 0; i < A.writers; i++) {
		base_args(&b, "mw");
		ab(&b, "id=%d", i);
		spawn(&k[i], &b);
	}
	bad = collect(k, A.writers, A.seconds + 20);
	buf = xalloc(size);
	fd = open(A.file, O_RDONLY);
	if (fd < 0 || pread(fd, buf, size, 0) != (ssize_t)size)
		die("final read");
	close(fd);
	for (size_t c = 0; c < size; c += CHUNK) {
		if (!uniform(buf + c, CHUNK)) {
			if (mixed < 5) {
				printf("chunk %zu mixed:", c / CHUNK);
				for (size_t p = 0; p < CHUNK; p += PAGE)
					printf(" %d", buf[c + p]);
				printf("\n");
			}
			mixed++;
		} else if (buf[c] > A.writers) {
			badval++;
		} else if (buf[c]) {
			written++;
		}
	}
	printf("chunks=%zu written_chunks=%lld mixed_chunks=%lld bad_values=%lld writes=%lld ",
	       size / CHUNK, written, mixed, badval, sum(k, A.writers, "writes"));
	free(buf);
	unlink(A.file);
	verdict(bad == 0, "%d workers failed", bad);
}

/* ---- region ---- */

static void role_region_writer(void)
{
	size_t io = (size_t)A.io;
	unsigned char *buf = xalloc(io);
	int fd = open_data(A.direct);
	uint64_t errs = 0, writes = 0;

	memset(buf, A.id + 1, io);
	sleep_until((uint64_t)A.start_ns);
	for (long long o = A.off; o < A.off + A.len; o += (long long)io) {
		if (pwrite(fd, buf, io, (off_t)o) != (ssize_t)io)
			errs++;
		writes++;
	}
	close(fd);
	printf("pid=%d writes=%llu write_errors=%llu\n", (int)getpid(),
	       (unsigned long long)writes, (unsigned long long)errs);
	exit(errs ? 1 : 0);
}

static void cmd_region(void)
{
	struct kid k[MAXKIDS];
	struct argvb b;
	int bad, fd;
	uint64_t t0, t1;

	if (A.procs > MAXKIDS || A.io <= 0 || A.len % A.io)
		die("bad sizes");
	fd = open(A.file, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		die("create %s", A.file);
	close(fd);
	A.start_ns = (long long)(now_ns() + 300000000ull);
	for (int i = 0; i < A.procs; i++) {
		base_args(&b, "rg");
		ab(&b, "id=%d", i);
		ab(&b, "off=%lld", A.overlap ? 0 : (long long)i * A.len);
		ab(&b, "len=%lld", A.len);
		ab(&b, "io=%lld", A.io);
		spawn(&k[i], &b);
	}
	t0 = now_ns();
	bad = collect(k, A.procs, 60);
	t1 = now_ns();
	for (int i = 0; i < A.procs; i++)
		printf("worker%d_pid=%lld worker%d_writes=%lld\n", i, field(k[i].out, "pid"), i,
		       field(k[i].out, "writes"));
	printf("procs=%d wall_ms=%.0f ", A.procs, (double)(t1 - t0) / 1e6 - 300);
	unlink(A.file);
	verdict(bad == 0, "%d workers failed", bad);
}

/* ---- hammer ---- */

struct progress {
	_Atomic uint64_t ops[MAXKIDS];
	_Atomic uint64_t torn_pages[MAXKIDS];
};

static struct progress *map_progress(int create)
{
	int fd = open(A.progress, O_RDWR | (create ? O_CREAT | O_TRUNC : 0), 0600);
	struct progress *p;

	if (fd < 0)
		die("open %s", A.progress);
	if (create && ftruncate(fd, 4096) < 0)
		die("ftruncate %s", A.progress);
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		die("mmap %s", A.progress);
	close(fd);
	return p;
}

static void role_hammer(void)
{
	size_t block = (size_t)A.block;
	unsigned char *wbuf = xalloc(block), *rbuf = xalloc(block);
	struct progress *pr = map_progress(0);
	int fd = open_data(A.direct);
	uint64_t npos = ((uint64_t)A.size - block) / PAGE + 1, gen = 0;

	rnd_state = 0x243f6a8885a308d3ull ^ ((uint64_t)getpid() << 16);
	for (;;) {
		off_t wo = (off_t)((rnd() % npos) * PAGE), ro = (off_t)((rnd() % npos) * PAGE);
		uint64_t torn = 0;

		memset(wbuf, 1 + (int)((uint64_t)A.slot * 31 + gen++) % 255, block);
		if (pwrite(fd, wbuf, block, wo) != (ssize_t)block)
			die("pwrite");
		if (pread(fd, rbuf, block, ro) != (ssize_t)block)
			die("pread");
		for (size_t p = 0; p < block; p += PAGE)
			torn += (uint64_t)!uniform(rbuf + p, PAGE);
		if (torn)
			atomic_fetch_add(&pr->torn_pages[A.slot], torn);
		atomic_fetch_add(&pr->ops[A.slot], 1);
	}
}

static void cmd_hammer(void)
{
	struct kid k[MAXKIDS];
	struct argvb b;
	struct progress *pr;
	uint64_t pend_t[MAXKIDS] = { 0 }, pend_c[MAXKIDS] = { 0 };
	uint64_t max_stall = 0, t_end, next_kill, total_ops = 0, torn = 0;
	int kills = 0, worst = -1, mixed = 0, fd;
	size_t size = (size_t)A.size;
	unsigned char *buf;
	char prog[4200];

	if (A.procs > MAXKIDS || A.procs < 2)
		die("bad procs");
	snprintf(prog, sizeof(prog), "%s.progress", A.file);
	A.progress = prog;
	pr = map_progress(1);
	prefill(size, 0);
	for (int i = 0; i < A.procs; i++) {
		base_args(&b, "hm");
		ab(&b, "slot=%d", i);
		ab(&b, "progress=%s", prog);
		spawn(&k[i], &b);
	}
	/* Everyone under way first. */
	for (uint64_t t = now_ns() + 10000000000ull;;) {
		int all = 1;

		for (int i = 0; i < A.procs; i++)
			all &= atomic_load(&pr->ops[i]) > 0;
		if (all)
			break;
		if (now_ns() > t) {
			for (int i = 0; i < A.procs; i++)
				kill(k[i].pid, SIGKILL);
			die("workers did not start");
		}
		sleep_ns(1000000);
	}
	t_end = now_ns() + (uint64_t)(A.seconds * 1e9);
	next_kill = now_ns() + (uint64_t)A.kill_ms * 1000000ull;
	for (;;) {
		uint64_t now = now_ns();
		int pending = 0;

		for (int i = 0; i < A.procs; i++) {
			if (!pend_t[i])
				continue;
			if (atomic_load(&pr->ops[i]) > pend_c[i]) {
				if (now - pend_t[i] > max_stall) {
					max_stall = now - pend_t[i];
					worst = i;
				}
				pend_t[i] = 0;
			} else {
				pending = 1;
				if (now - pend_t[i] > max_stall) {
					max_stall = now - pend_t[i];
					worst = i;
				}
			}
		}
		if (now >= t_end && (!pending || now > t_end + 3000000000ull))
			break;
		if (now < t_end && now >= next_kill) {
			int v = kills % A.procs;
			int st;

			kill(k[v].pid, SIGKILL);
			waitpid(k[v].pid, &st, 0);
			close(k[v].fd);
			total_ops += atomic_load(&pr->ops[v]);
			atomic_store(&pr->ops[v], 0);
			for (int i = 0; i < A.procs; i++) {
				if (i != v && !pend_t[i]) {
					pend_t[i] = now;
					pend_c[i] = atomic_load(&pr->ops[i]);
				}
			}
			base_args(&b, "hm");
			ab(&b, "slot=%d", v);
			ab(&b, "progress=%s", prog);
			spawn(&k[v], &b);
			pend_t[v] = now;	/* the replacement must get going too */
			pend_c[v] = 0;
			kills++;
			next_kill += (uint64_t)A.kill_ms * 1000000ull;
		}
		sleep_ns(1000000);
	}
	for (int i = 0; i < A.procs; i++) {
		int st;

		kill(k[i].pid, SIGKILL);
		waitpid(k[i].pid, &st, 0);
		close(k[i].fd);
		total_ops += atomic_load(&pr->ops[i]);
		torn += atomic_load(&pr->torn_pages[i]);
	}
	buf = xalloc(size);
	fd = open(A.file, O_RDONLY);
	if (fd < 0 || pread(fd, buf, size, 0) != (ssize_t)size)
		die("final read");
	close(fd);
	for (size_t p = 0; p < size; p += PAGE)
		mixed += !uniform(buf + p, PAGE);
	printf("kills=%d max_stall_ms=%.0f worst_slot=%d ops=%llu torn_pages=%llu mixed_pages=%d ",
	       kills, (double)max_stall / 1e6, worst, (unsigned long long)total_ops,
	       (unsigned long long)torn, mixed);
	munmap(pr, 4096);
	unlink(prog);
	unlink(A.file);
	free(buf);
	verdict(1, "%s", "");
}

/* ---- fork ---- */

struct racer {
	int fd;
	_Atomic int stop;
	uint64_t writes;
};

static void *race_writer(void *arg)
{
	struct racer *r = arg;
	unsigned char *buf = xalloc(MIB);
	int v = 1;

	while (!atomic_load(&r->stop)) {
		memset(buf, v, MIB);
		v = v % 250 + 1;
		if (pwrite(r->fd, buf, MIB, 0) != (ssize_t)MIB)
			break;
		r->writes++;
	}
	free(buf);
	return NULL;
}

static int write_block(int fd, int v, off_t off, size_t len)
{
	unsigned char *buf = xalloc(len);
	int r;

	memset(buf, v, len);
	r = pwrite(fd, buf, len, off) == (ssize_t)len ? 0 : -1;
	free(buf);
	return r;
}

/* Exec'd child: count= writes of io bytes at off, then read them back. */
static void role_fork_child(void)
{
	int fd = open_data(0);

	for (int i = 0; i < A.count; i++)
		if (write_block(fd, 0xC, (off_t)A.off, (size_t)A.io) < 0)
			die("pwrite");
	close(fd);
	printf("pid=%d child_writes=%d\n", (int)getpid(), A.count);
	exit(0);
}

static int child_reads(int fd, double seconds, uint64_t *reads)
{
	unsigned char *buf = xalloc(MIB);
	uint64_t end = now_ns() + (uint64_t)(seconds * 1e9);
	int torn = 0;

	*reads = 0;
	while (now_ns() < end) {
		if (pread(fd, buf, MIB, 0) != (ssize_t)MIB)
			return -1;
		torn += !uniform(buf, MIB);
		(*reads)++;
	}
	free(buf);
	return torn;
}

static void cmd_fork(void)
{
	const char *mode = A.mode ? A.mode : "disjoint";
	int race = strcmp(mode, "race") == 0;
	int fd = open(A.file, O_RDWR | O_CREAT | O_TRUNC, 0600);
	int p[2], st, status = -1, bad = 0;
	struct racer rc = { .fd = fd };
	pthread_t th;
	pid_t pid;
	char line[256] = "";
	ssize_t n;
	uint64_t deadline;

	if (fd < 0)
		die("create %s", A.file);
	/* One node grant, expanded over [0, 4 MiB), cached by the parent. */
	if (write_block(fd, 0xA, 0, MIB) < 0 || write_block(fd, 0xA, 64 * KIB, 64 * KIB) < 0)
		die("pwrite");
	if (race)
		pthread_create(&th, NULL, race_writer, &rc);
	if (strcmp(mode, "gone") == 0) {
		/* A logout under a live job: the default table and its private
		 * directory go.  The child must attach elsewhere, not fail on
		 * the path its parent chose. */
		char rt[64], table[128];

		snprintf(rt, sizeof(rt), "/run/user/%u", (unsigned)geteuid());
		snprintf(table, sizeof(table), "%s/rangeshim-table", rt);
		if (unlink(table) < 0 || rmdir(rt) < 0)
			die("remove %s", table);
	}
	if (pipe(p) < 0)
		die("pipe");
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		close(p[0]);
		if (strcmp(mode, "exec") == 0) {
			char a1[4200], a2[64];
			char *av[] = { self_exe, (char *)"fc", a1, a2, (char *)"io=65536",
				       (char *)"count=10", NULL };

			snprintf(a1, sizeof(a1), "file=%s", A.file);
			snprintf(a2, sizeof(a2), "off=0");
			dup2(p[1], 1);
			execv(self_exe, av);
			_exit(127);
		}
		if (race) {
			uint64_t reads;
			int torn = child_reads(fd, 0.5, &reads);

			n = snprintf(line, sizeof(line), "child_reads=%llu child_torn=%d",
				     (unsigned long long)reads, torn);
			if (write(p[1], line, (size_t)n) < 0)
				_exit(3);
			exit(torn < 0 ? 1 : 0);
		}
		/* disjoint: another window; same: the parent's window. */
		off_t off = strcmp(mode, "same") == 0 ? 0 : (off_t)(8 * MIB);
		int fd2;

		for (int i = 0; i < 10; i++)
			if (write_block(fd, 0xC, off, 64 * KIB) < 0)
				_exit(1);
		/* The same through a description of its own. */
		fd2 = open(A.file, O_RDWR);
		if (fd2 < 0 || write_block(fd2, 0xC, off + (off_t)(64 * KIB), 64 * KIB) < 0)
			_exit(1);
		close(fd2);
		close(fd);
		n = snprintf(line, sizeof(line), "child_writes=11");
		if (write(p[1], line, (size_t)n) < 0)
			_exit(3);
		exit(0);	/* destructors run: the stats file is written */
	}
	close(p[1]);
	deadline = now_ns() + 15000000000ull;
	for (;;) {
		pid_t w = waitpid(pid, &st, WNOHANG);

		if (w == pid) {
			status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
			break;
		}
		if (now_ns() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			status = -1;
			break;
		}
		sleep_ns(1000000);
	}
	n = read(p[0], line, sizeof(line) - 1);
	line[n > 0 ? n : 0] = '\0';
	close(p[0]);
	if (race) {
		atomic_store(&rc.stop, 1);
		pthread_join(th, NULL);
	}
	/* The parent's grant over [0, 4 MiB) serves these without a new
	 * acquisition unless the child took the range from it. */
	for (int i = 0; i < 10; i++)
		if (write_block(fd, 0xB, (off_t)(128 * KIB), 64 * KIB) < 0)
			bad++;
	/* The child's data is visible where it wrote. */
	if (strcmp(mode, "same") == 0 || strcmp(mode, "exec") == 0) {
		unsigned char c = 0;

		if (pread(fd, &c, 1, 0) != 1 || c != 0xC) {
			printf("child's write not seen: byte 0 is 0x%x\n", c);
			bad++;
		}
	}
	close(fd);
	printf("parent_pid=%d child_pid=%d child_status=%d %s race_writes=%llu ", (int)getpid(),
	       (int)pid, status, line, (unsigned long long)rc.writes);
	unlink(A.file);
	verdict(status == 0 && bad == 0, "child status %d, %d parent errors", status, bad);
}

/* ---- fork storms: a forked child must not keep its parent alive ---- */

/* Exec'd worker: attach, fork a child that sleeps on fd slot= (a pipe
 * the orchestrator holds open), exit.  With kill_ms=1 it keeps writing
 * until killed instead of exiting. */
static void role_fork_sleeper(void)
{
	int fd = open(A.file, O_RDWR);
	pid_t pid;

	if (fd < 0 || write_block(fd, 0x5, 0, 4096) < 0)
		_exit(2);
	pid = fork();
	if (pid < 0)
		_exit(2);
	if (pid == 0) {
		char c;

		close(fd);
		while (read(A.slot, &c, 1) < 0 && errno == EINTR)
			;
		_exit(0);
	}
	close(A.slot);
	if (!A.kill_ms)
		exit(0);
	printf("writing\n");
	fflush(stdout);
	for (;;)
		if (write_block(fd, 0x6, 0, MIB) < 0)
			_exit(2);
}

static pid_t spawn_sleeper(int rfd, int kill_mode, int out)
{
	char a1[4200], a2[32], a3[32];
	char *av[] = { self_exe, (char *)"fk", a1, a2, a3, NULL };
	pid_t pid;

	snprintf(a1, sizeof(a1), "file=%s", A.file);
	snprintf(a2, sizeof(a2), "slot=%d", rfd);
	snprintf(a3, sizeof(a3), "kill_ms=%d", kill_mode);
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		if (out >= 0)
			dup2(out, 1);
		execv(self_exe, av);
		_exit(127);
	}
	return pid;
}

static void cmd_forkstorm(void)
{
	int fd = open(A.file, O_RDWR | O_CREAT | O_TRUNC, 0600), p[2], st, bad = 0;

	if (fd < 0 || write_block(fd, 0x1, 0, 4096) < 0)
		die("create %s", A.file);
	close(fd);
	/* The write end stays with us alone; the children get EOF when we go. */
	if (pipe(p) < 0 || fcntl(p[1], F_SETFD, FD_CLOEXEC) < 0)
		die("pipe");
	for (int i = 0; i < A.count; i++) {
		pid_t pid = spawn_sleeper(p[0], 0, -1);

		if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
			bad++;
	}
	close(p[0]);
	/* A newcomer (this process, never attached so far) must get a slot. */
	fd = open(A.file, O_RDWR);
	if (fd < 0 || write_block(fd, 0x2, 0, 4096) < 0)
		bad++;
	printf("forked=%d failed=%d ", A.count, bad);
	fflush(stdout);
	close(fd);
	close(p[1]);
	while (wait(NULL) > 0)
		;
	verdict(bad == 0, "%d workers failed", bad);
}

static void cmd_forkkill(void)
{
	int fd = open(A.file, O_RDWR | O_CREAT | O_TRUNC, 0600), p[2], q[2], st;
	uint64_t worst = 0;

	if (fd < 0 || write_block(fd, 0x1, 0, MIB) < 0)
		die("create %s", A.file);
	if (pipe(p) < 0 || fcntl(p[1], F_SETFD, FD_CLOEXEC) < 0)
		die("pipe");
	for (int i = 0; i < A.count; i++) {
		char line[64];
		pid_t w;
		uint64_t t0;
		FILE *f;

		if (pipe(q) < 0)
			die("pipe");
		w = spawn_sleeper(p[0], 1, q[1]);
		close(q[1]);
		f = fdopen(q[0], "r");
		if (!f || !fgets(line, sizeof(line), f))
			die("writer did not start");
		/* Somewhere inside its stream of 1 MiB writes. */
		sleep_ns(20000000ull + (uint64_t)(rnd() % 30) * 1000000ull);
		kill(w, SIGKILL);
		waitpid(w, &st, 0);
		fclose(f);
		t0 = now_ns();
		if (write_block(fd, 0x7, 0, MIB) < 0)
			die("pwrite after the kill");
		if (now_ns() - t0 > worst)
			worst = now_ns() - t0;
	}
	close(p[0]);
	close(p[1]);
	while (wait(NULL) > 0)
		;
	printf("rounds=%d max_ms=%llu ", A.count, (unsigned long long)(worst / 1000000ull));
	verdict(1, "%s", "");
}

/* ---- fork during the first attach ---- */

/* Does this process hold the node table open or mapped?  The table is the
 * one RANGESHIM_SHM names (the tests always set it). */
static int holds_table(void)
{
	const char *name = getenv("RANGESHIM_SHM");
	char path[300], link[4200], fdpath[300], line[4400];
	struct dirent *e;
	size_t pl;
	DIR *d;
	FILE *f;
	int found = 0;

	if (!name || !*name)
		return 0;
	snprintf(path, sizeof(path), "/dev/shm%s", name);
	pl = strlen(path);
	d = opendir("/proc/self/fd");
	while (d && (e = readdir(d))) {
		ssize_t n;

		snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%s", e->d_name);
		n = readlink(fdpath, link, sizeof(link) - 1);
		if (n > 0) {
			link[n] = '\0';
			/* Exactly: the data files share the table's prefix. */
			found |= strcmp(link, path) == 0;
		}
	}
	if (d)
		closedir(d);
	f = fopen("/proc/self/maps", "r");
	while (f && fgets(line, sizeof(line), f)) {
		size_t n = strlen(line);

		found |= n >= pl + 2 && line[n - 1] == '\n' && line[n - 2 - pl] == ' ' &&
			 strncmp(line + n - 1 - pl, path, pl) == 0;
	}
	if (f)
		fclose(f);
	return found;
}

static void *attach_thread(void *arg)
{
	int fd = open(A.file, O_RDWR);

	(void)arg;
	if (fd < 0 || write_block(fd, 0x3, 0, 4096) < 0)
		_exit(2);
	close(fd);
	return NULL;
}

static void role_fork_leak(void)
{
	pthread_t th;
	int leaks = 0, kids = 0, st;

	pthread_create(&th, NULL, attach_thread, NULL);
	for (int i = 0; i < 40; i++) {
		pid_t pid = fork();

		if (pid == 0)
			_exit(holds_table() ? 1 : 0);
		if (pid > 0 && waitpid(pid, &st, 0) == pid) {
			kids++;
			leaks += WIFEXITED(st) && WEXITSTATUS(st) == 1;
		}
	}
	pthread_join(th, NULL);
	/* The detector's control: the attached parent must be seen to hold it. */
	printf("%d %d %d\n", leaks, kids, holds_table());
	exit(0);
}

static void cmd_forkleak(void)
{
	int fd = open(A.file, O_RDWR | O_CREAT | O_TRUNC, 0600);
	long leaks = 0, kids = 0, seen = 0;

	if (fd < 0 || write_block(fd, 0x1, 0, 4096) < 0)
		die("create %s", A.file);
	close(fd);
	for (int i = 0; i < A.count; i++) {
		char a1[4200], out[64] = "";
		char *av[] = { self_exe, (char *)"fl", a1, NULL };
		int p[2], st, l = 0, k = 0, h = 0;
		pid_t pid;
		ssize_t n;

		snprintf(a1, sizeof(a1), "file=%s", A.file);
		if (pipe(p) < 0)
			die("pipe");
		fflush(stdout);
		pid = fork();
		if (pid == 0) {
			dup2(p[1], 1);
			execv(self_exe, av);
			_exit(127);
		}
		close(p[1]);
		n = read(p[0], out, sizeof(out) - 1);
		out[n > 0 ? n : 0] = '\0';
		close(p[0]);
		waitpid(pid, &st, 0);
		if (sscanf(out, "%d %d %d", &l, &k, &h) != 3)
			die("worker said '%s'", out);
		leaks += l;
		kids += k;
		seen += h;
	}
	printf("leaks=%ld children=%ld parents_holding=%ld ", leaks, kids, seen);
	verdict(leaks == 0, "%ld children of a process held its node table", leaks);
}

/* ---- selftest ---- */

struct st_shared {
	int fd;
	uint64_t end;
	uint64_t reads, torn, writes;
};

static void *st_writer(void *arg)
{
	struct st_shared *s = arg;
	unsigned char *buf = xalloc(MIB);
	int v = 1;

	while (now_ns() < s->end) {
		memset(buf, v, MIB);
		v = v % 250 + 1;
		if (pwrite(s->fd, buf, MIB, 0) != (ssize_t)MIB)
			break;
		s->writes++;
	}
	free(buf);
	return NULL;
}

static void cmd_selftest(void)
{
	struct st_shared s;
	pthread_t th;
	unsigned char *buf = xalloc(MIB), *chk = xalloc(MIB);
	int bad = 0;

	prefill(MIB, 1);
	s.fd = open(A.file, O_RDWR);
	if (s.fd < 0)
		die("open %s", A.file);
	s.end = now_ns() + (uint64_t)(A.seconds * 1e9);
	s.reads = s.torn = s.writes = 0;
	pthread_create(&th, NULL, st_writer, &s);
	while (now_ns() < s.end) {
		if (pread(s.fd, buf, MIB, 0) != (ssize_t)MIB) {
			bad++;
			break;
		}
		s.reads++;
		s.torn += (uint64_t)!uniform(buf, MIB);
	}
	pthread_join(th, NULL);
	/* Correct results: a pattern written is read back. */
	for (size_t i = 0; i < MIB; i++)
		buf[i] = (unsigned char)(i * 7 + i / 4096);
	if (pwrite(s.fd, buf, MIB, 0) != (ssize_t)MIB || pread(s.fd, chk, MIB, 0) != (ssize_t)MIB ||
	    memcmp(buf, chk, MIB) != 0)
		bad++;
	close(s.fd);
	printf("reads=%llu torn=%llu writes=%llu verify_errors=%d ", (unsigned long long)s.reads,
	       (unsigned long long)s.torn, (unsigned long long)s.writes, bad);
	unlink(A.file);
	verdict(bad == 0 && s.torn == 0, "torn=%llu verify_errors=%d",
		(unsigned long long)s.torn, bad);
}

/* ---- stride ---- */

/* Is every block portion of buf (len bytes read at off) of one value? */
static int portions_uniform(const unsigned char *buf, uint64_t off, size_t len, uint64_t bs)
{
	for (size_t i = 0; i < len;) {
		size_t n = (size_t)(bs - (off + i) % bs);

		if (n > len - i)
			n = len - i;
		if (!uniform(buf + i, n))
			return 0;
		i += n;
	}
	return 1;
}

static long long *stride_order(long long n)
{
	long long *order = calloc((size_t)n, sizeof(*order));

	if (!order)
		die("calloc");
	for (long long j = 0; j < n; j++)
		order[j] = j;
	rnd_state = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull | 1;
	for (long long j = n - 1; A.shuffle && j > 0; j--) {
		long long k = (long long)(rnd() % (uint64_t)(j + 1)), t = order[j];

		order[j] = order[k];
		order[k] = t;
	}
	return order;
}

struct stride_thread {
	pthread_t tid;
	int fd, t;
	const long long *order;
	uint64_t deadline, writes, reads, torn, errs;
};

static void *stride_thread_main(void *arg)
{
	struct stride_thread *s = arg;
	size_t bs = (size_t)A.block;
	unsigned char *buf = xalloc(bs), *rd = xalloc(bs);

	for (int pass = 0; pass == 0 || now_ns() < s->deadline; pass++) {
		/* Ranks' values 1..120, new each pass and thread; the
		 * crosser's 200 up. */
		memset(buf, 1 + (A.id * 61 + pass * 7 + s->t) % 120, bs);
		for (long long j = 0; j < A.count; j++, s->writes++)
			if (pwrite(s->fd, buf, bs, (off_t)((s->order[j] * A.procs + A.id) * A.block)) !=
			    (ssize_t)bs)
				s->errs++;
		for (long long j = 0; j < A.count; j++, s->reads++) {
			if (pread(s->fd, rd, bs, (off_t)((s->order[j] * A.procs + A.id) * A.block)) !=
			    (ssize_t)bs)
				s->errs++;
			else if (!uniform(rd, bs))
				s->torn++;
		}
	}
	free(buf);
	free(rd);
	return NULL;
}

static void role_stride_rank(void)
{
	struct stride_thread th[8] = { { 0 } };
	long long *order = stride_order(A.count);
	int fd = open_data(0), n = A.threads < 1 ? 1 : A.threads > 8 ? 8 : A.threads;
	uint64_t writes = 0, reads = 0, torn = 0, errs = 0;

	sleep_until((uint64_t)A.start_ns);
	for (int t = 0; t < n; t++) {
		th[t] = (struct stride_thread){ .fd = fd, .t = t, .order = order,
						.deadline = now_ns() + (uint64_t)(A.seconds * 1e9) };
		if (t && pthread_create(&th[t].tid, NULL, stride_thread_main, &th[t]) != 0)
			die("pthread_create");
	}
	stride_thread_main(&th[0]);
	for (int t = 0; t < n; t++) {
		if (t)
			pthread_join(th[t].tid, NULL);
		writes += th[t].writes;
		reads += th[t].reads;
		torn += th[t].torn;
		errs += th[t].errs;
	}
	close(fd);
	printf("pid=%d writes=%llu reads=%llu torn=%llu errors=%llu\n", (int)getpid(),
	       (unsigned long long)writes, (unsigned long long)reads, (unsigned long long)torn,
	       (unsigned long long)errs);
	exit(errs ? 1 : 0);
}

/* Ranges across the ranks' blocks: whole blocks written, reads from the
 * middle of one, so that every call meets blocks of both ranks. */
static void role_stride_cross(void)
{
	uint64_t bs = (uint64_t)A.block, nb = (uint64_t)A.count * (uint64_t)A.procs;
	unsigned char *buf = xalloc(5 * bs);
	int fd = open_data(0);
	uint64_t deadline, writes = 0, reads = 0, torn = 0, errs = 0;

	rnd_state = (uint64_t)getpid() * 0x2545f4914f6cdd1dull | 1;
	sleep_until((uint64_t)A.start_ns);
	deadline = now_ns() + (uint64_t)(A.seconds * 1e9);
	for (uint64_t i = 0; nb > 5 && now_ns() < deadline; i++) {
		uint64_t k = rnd() % (nb - 5);

		if (i % 2) {
			memset(buf, 200 + (int)(i / 2 % 50), 4 * bs);
			if (pwrite(fd, buf, 4 * bs, (off_t)(k * bs)) != (ssize_t)(4 * bs))
				errs++;
			writes++;
		} else {
			uint64_t off = k * bs + bs / 2;
			ssize_t r = pread(fd, buf, 4 * bs, (off_t)off);

			if (r != (ssize_t)(4 * bs))
				errs++;
			else if (!portions_uniform(buf, off, (size_t)r, bs))
				torn++;
			reads++;
		}
	}
	close(fd);
	printf("pid=%d cross_writes=%llu cross_reads=%llu torn=%llu errors=%llu\n", (int)getpid(),
	       (unsigned long long)writes, (unsigned long long)reads, (unsigned long long)torn,
	       (unsigned long long)errs);
	exit(errs ? 1 : 0);
}

static void cmd_stride(void)
{
	struct kid k[MAXKIDS];
	struct argvb b;
	int n = A.procs + (A.cross != 0), bad;

	if (A.procs < 1 || n > MAXKIDS || A.block <= 0 || A.count <= 0)
		die("bad sizes");
	/* Whole from the start, so that every read is full. */
	prefill((size_t)(A.count * A.procs * A.block), 0x7f);
	A.start_ns = (long long)(now_ns() + 300000000ull);
	for (int i = 0; i < n; i++) {
		base_args(&b, i < A.procs ? "sw" : "sc");
		ab(&b, "id=%d", i);
		ab(&b, "procs=%d", A.procs);
		ab(&b, "count=%d", A.count);
		ab(&b, "shuffle=%d", A.shuffle);
		ab(&b, "threads=%d", A.threads);
		spawn(&k[i], &b);
	}
	bad = collect(k, n, 120 + A.seconds);
	for (int i = 0; i < A.procs; i++)
		printf("rank%d_pid=%lld ", i, field(k[i].out, "pid"));
	printf("calls=%lld torn=%lld cross_reads=%lld cross_writes=%lld ",
	       sum(k, A.procs, "writes") + sum(k, A.procs, "reads"), sum(k, n, "torn"),
	       sum(k, n, "cross_reads"), sum(k, n, "cross_writes"));
	unlink(A.file);
	verdict(bad == 0 && sum(k, n, "torn") == 0, "%d workers failed, %lld torn", bad,
		sum(k, n, "torn"));
}

/* ---- closehold ---- */

static void cmd_closehold(void)
{
	int fd = open(A.file, O_RDWR | O_CREAT | O_TRUNC, 0600);

	if (fd < 0)
		die("create %s", A.file);
	if (write_block(fd, 0x5, 0, 64 * KIB) < 0 || write_block(fd, 0x5, 8 * MIB, 64 * KIB) < 0)
		die("pwrite");
	if (!A.keep_open)
		close(fd);
	printf("pid=%d closed=%d\n", (int)getpid(), !A.keep_open);
	fflush(stdout);
	sleep_ns((uint64_t)A.hold_ms * 1000000ull);
	if (A.keep_open)
		close(fd);
	verdict(1, "%s", "");
}

int main(int argc, char **argv)
{
	ssize_t n;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 3) {
		fprintf(stderr, "usage: node_probe torn|mixed|region|hammer|fork|selftest|closehold "
			"file=F [key=value...]\n");
		return 2;
	}
	n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
	if (n <= 0)
		die("readlink /proc/self/exe");
	self_exe[n] = '\0';
	parse(argc, argv);
	if (!strcmp(argv[1], "ti"))
		role_torn_idle();
	else if (!strcmp(argv[1], "tw"))
		role_torn_writer();
	else if (!strcmp(argv[1], "tr"))
		role_torn_reader();
	else if (!strcmp(argv[1], "mw"))
		role_mixed_writer();
	else if (!strcmp(argv[1], "rg"))
		role_region_writer();
	else if (!strcmp(argv[1], "hm"))
		role_hammer();
	else if (!strcmp(argv[1], "fc"))
		role_fork_child();
	else if (!strcmp(argv[1], "fk"))
		role_fork_sleeper();
	else if (!strcmp(argv[1], "forkstorm"))
		cmd_forkstorm();
	else if (!strcmp(argv[1], "forkkill"))
		cmd_forkkill();
	else if (!strcmp(argv[1], "fl"))
		role_fork_leak();
	else if (!strcmp(argv[1], "forkleak"))
		cmd_forkleak();
	else if (!strcmp(argv[1], "lone"))
		cmd_lone();
	else if (!strcmp(argv[1], "torn"))
		cmd_torn();
	else if (!strcmp(argv[1], "mixed"))
		cmd_mixed();
	else if (!strcmp(argv[1], "region"))
		cmd_region();
	else if (!strcmp(argv[1], "hammer"))
		cmd_hammer();
	else if (!strcmp(argv[1], "fork"))
		cmd_fork();
	else if (!strcmp(argv[1], "selftest"))
		cmd_selftest();
	else if (!strcmp(argv[1], "closehold"))
		cmd_closehold();
	else if (!strcmp(argv[1], "sw"))
		role_stride_rank();
	else if (!strcmp(argv[1], "sc"))
		role_stride_cross();
	else if (!strcmp(argv[1], "stride"))
		cmd_stride();
	fprintf(stderr, "node_probe: unknown command %s\n", argv[1]);
	return 2;
}
