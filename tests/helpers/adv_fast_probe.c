/*
 * adv_fast_probe MODE PATH: adversarial rigs against the inline path's
 * shortcuts (tests/test_adv_proc.c).  Prints "verdict=ok" or
 * "verdict=bad ..." and exits 0; a crash is the rig's exit status.
 *
 *   iov_altstack  a thread runs a signal handler on an alternate stack
 *                 mapped just below its own stack and makes a writev
 *                 with a heap iovec array there (the careful path, which
 *                 on h-fastpath records [its frame, top of stack) as
 *                 mapped for the thread's life: rs_stk, iolock.h).  The
 *                 alternate stack is then unmapped, and a writev whose
 *                 iovec pointer lies in the unmapped memory must fail
 *                 with EFAULT, as it does without the shim.
 *   iov_coroutine the same with a coroutine (makecontext) instead of a
 *                 signal handler: a thread runs a coroutine whose stack
 *                 is mapped just below its own stack (no SS_ONSTACK to
 *                 tell), which makes a writev with a heap iovec array;
 *                 the coroutine's stack is then unmapped, and a writev
 *                 whose iovec pointer lies there must fail with EFAULT.
 *   iov_first     a thread's first vector calls, before the careful path
 *                 has run on it (rs_stk unknown: lo 0, span 0), pass the
 *                 iovec pointer 8: writev, readv, pwritev and preadv must
 *                 each fail with EFAULT, on the main thread and on a
 *                 thread glibc made.
 *   solo_signal TRIALS  forked children, one a trial, each
 *                 single-threaded, pread 256 KiB records at offset 0 in a
 *                 loop under a 20 us interval timer; the SIGALRM handler,
 *                 once it interrupts the shim's own code (with no shim:
 *                 at once), makes a thread that pwrites records of
 *                 changing value at 0, and the child reads 50 more.  A
 *                 call that chose the single-thread copy (no range lock)
 *                 before the handler ran goes on without a lock while
 *                 the new thread writes (pthread_create is not
 *                 async-signal-safe, but works).  Prints "trials=N
 *                 torn=T": trials with a torn read.
 *   alias FN MS   a thread writes 1 MiB records of changing value at
 *                 offset 0 through libc's function FN, looked up with
 *                 dlsym (pwrite64, __pwrite64, write, __write: the
 *                 underscored names are the same functions, exported by
 *                 glibc under both names), while the main thread preads
 *                 them.  Prints "reads=R torn=T".
 *   clone_fork    clone(fn, stack, SIGCHLD, arg), a process, no thread,
 *                 made by glibc's clone function (which runs no atfork
 *                 handler) while another thread holds the range of a
 *                 256 MiB pwrite; the child pwrites the same range (an
 *                 async-signal-safe call, as in a _Fork child) under a 5 s
 *                 alarm.  Prints "child=ok" or "child=status N".
 *   clone3_fork   the same with the process made by syscall(SYS_clone3)
 *                 as a fork (no CLONE_VM, no stack).
 *   clone_solo FN MS  a second thread made with glibc's clone function
 *                 named FN ("clone" or "__clone", both exported by libc,
 *                 the second strong, the first its weak alias), with a
 *                 copy of the main thread's TLS block of its own, not
 *                 through pthread_create: __libc_single_threaded stays
 *                 set.  It pwrites 1 MiB records of one byte value at
 *                 offset 0 while the main thread preads them: a read
 *                 that mixes values is torn.  Prints "reads=R torn=T".
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <dlfcn.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <link.h>
#include <sys/wait.h>
#include <unistd.h>

#define ALT (256 * 1024)

static const char *path;
static int fd;
static char *alt;

static void on_usr1(int sig)
{
	static char data[16] = "0123456789abcdef";
	struct iovec *v = malloc(sizeof(*v));

	(void)sig;
	if (!v)
		abort();
	v->iov_base = data;
	v->iov_len = sizeof(data);
	if (writev(fd, v, 1) != (ssize_t)sizeof(data))
		abort();
	free(v);
}

/* A stack of the rig's own just below the thread's stack and its guard:
 * within 64 MiB of the thread pointer, at the top of the stack mapping.
 * NULL (and a skip verdict) if that cannot be mapped. */
static char *map_below_stack(void)
{
	pthread_attr_t a;
	void *lo;
	size_t size, guard;
	char *m;

	if (pthread_getattr_np(pthread_self(), &a) || pthread_attr_getstack(&a, &lo, &size) ||
	    pthread_attr_getguardsize(&a, &guard))
		abort();
	m = mmap((char *)lo - guard - ALT - 4096, ALT, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (m == MAP_FAILED) {
		printf("verdict=skip could not map below the stack: %s\n", strerror(errno));
		return NULL;
	}
	return m;
}

/* alt unmapped now: a writev whose iovec is its last must say EFAULT. */
static void writev_gone(void)
{
	const struct iovec *gone = (const struct iovec *)(alt + ALT - sizeof(struct iovec));
	ssize_t r;
	int e;

	if (munmap(alt, ALT))
		abort();
	errno = 0;
	r = writev(fd, gone, 1);
	e = errno;
	if (r == -1 && e == EFAULT)
		printf("verdict=ok writev=-1 errno=EFAULT\n");
	else
		printf("verdict=bad writev=%zd errno=%d (%s)\n", r, e, strerror(e));
	fflush(stdout);
}

static void *altstack_thread(void *arg)
{
	stack_t ss = { 0 }, off = { .ss_flags = SS_DISABLE };
	struct sigaction sa = { 0 };

	(void)arg;
	if (!(alt = map_below_stack()))
		return NULL;
	ss.ss_sp = alt;
	ss.ss_size = ALT;
	sa.sa_handler = on_usr1;
	sa.sa_flags = SA_ONSTACK;
	if (sigaltstack(&ss, NULL) || sigaction(SIGUSR1, &sa, NULL))
		abort();
	pthread_kill(pthread_self(), SIGUSR1);
	if (sigaltstack(&off, NULL))
		abort();
	writev_gone();
	return NULL;
}

/* ---- iov_coroutine ------------------------------------------------ */

static ucontext_t co_main, co_ctx;

static void co_body(void)
{
	on_usr1(0);	/* a writev of a heap array: the careful path */
}

static void *coroutine_thread(void *arg)
{
	(void)arg;
	/* As a coroutine library would place it: an mmap of its own. */
	if (!(alt = map_below_stack()))
		return NULL;
	if (getcontext(&co_ctx))
		abort();
	co_ctx.uc_stack.ss_sp = alt;
	co_ctx.uc_stack.ss_size = ALT;
	co_ctx.uc_link = &co_main;
	makecontext(&co_ctx, co_body, 0);
	if (swapcontext(&co_main, &co_ctx))
		abort();
	writev_gone();
	return NULL;
}

/* ---- solo_signal -------------------------------------------------- */

#define SREC (256 * 1024)

static uintptr_t shim_lo, shim_hi;
static _Atomic int spawned, sstop;
static unsigned char *srec[2];
static pthread_t swriter;

static int find_shim(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	(void)arg;
	if (!info->dlpi_name || !strstr(info->dlpi_name, "rangeshim"))
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
			shim_lo = info->dlpi_addr + ph->p_vaddr;
			shim_hi = shim_lo + ph->p_memsz;
		}
	}
	return 1;
}

static void *swrite_main(void *arg)
{
	(void)arg;
	for (unsigned i = 0; !atomic_load(&sstop); i++)
		if (pwrite(fd, srec[i & 1], SREC, 0) != SREC)
			abort();
	return NULL;
}

static void on_alrm(int sig, siginfo_t *si, void *uc)
{
	uintptr_t pc = (uintptr_t)((ucontext_t *)uc)->uc_mcontext.gregs[REG_RIP];
	int saved = errno;

	(void)sig;
	(void)si;
	if (atomic_load(&spawned) || (shim_hi && !getenv("ADV_ANYPC") && (pc < shim_lo || pc >= shim_hi)))
		return;
	atomic_store(&spawned, 1);
	if (pthread_create(&swriter, NULL, swrite_main, NULL))
		abort();
	errno = saved;
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int solo_trial(void)
{
	struct sigaction sa = { 0 };
	timer_t tm;
	struct sigevent ev = { .sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGALRM };
	struct itimerspec it = { { 0, 20000 }, { 0, 20000 } };
	unsigned char *b = malloc(SREC);
	int torn = 0, after = 0;
	double t0 = now_ms();

	if (getenv("ADV_SPAWN_FIRST")) {
		atomic_store(&spawned, 1);
		if (pthread_create(&swriter, NULL, swrite_main, NULL))
			abort();
	}
	sa.sa_sigaction = on_alrm;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	if (!b || sigaction(SIGALRM, &sa, NULL) || timer_create(CLOCK_MONOTONIC, &ev, &tm) ||
	    timer_settime(tm, 0, &it, NULL))
		abort();
	while (after < 50 && now_ms() - t0 < 2000) {
		if (pread(fd, b, SREC, 0) != SREC)
			abort();
		if (memchr(b, b[0] ^ 2, SREC))	/* 'A' and 'C' in one read */
			torn = 1;
		if (atomic_load(&spawned))
			after++;
	}
	timer_delete(tm);
	atomic_store(&sstop, 1);
	if (atomic_load(&spawned))
		pthread_join(swriter, NULL);
	return atomic_load(&spawned) ? torn : 2;
}

static void solo_signal(int trials)
{
	int torn = 0, done = 0;

	dl_iterate_phdr(find_shim, NULL);
	for (int i = 0; i < 2; i++) {
		srec[i] = malloc(SREC);
		if (!srec[i])
			abort();
		memset(srec[i], 'A' + i * 2, SREC);	/* 'A', 'C': values differ in 2 */
	}
	if (pwrite(fd, srec[0], SREC, 0) != SREC)
		abort();
	for (int i = 0; i < trials; i++) {
		int st;
		pid_t p = fork();

		if (p == 0)
			_exit(solo_trial());
		if (p < 0 || waitpid(p, &st, 0) != p || !WIFEXITED(st))
			abort();
		if (WEXITSTATUS(st) < 2)
			done++;
		torn += WEXITSTATUS(st) == 1;
	}
	printf("trials=%d torn=%d\n", done, torn);
}

/* ---- alias ---------------------------------------------------------- */

static ssize_t (*alias_pw)(int, const void *, size_t, off_t);
static ssize_t (*alias_w)(int, const void *, size_t);
static _Atomic int alias_stop;
static unsigned char *arec[2];
#define AREC (1 << 20)

static void *alias_writer(void *arg)
{
	int wfd = open(path, O_WRONLY);

	(void)arg;
	if (wfd < 0)
		abort();
	for (unsigned i = 0; !atomic_load(&alias_stop); i++) {
		ssize_t r;

		if (alias_w) {
			if (lseek(wfd, 0, SEEK_SET) != 0)
				abort();
			r = alias_w(wfd, arec[i & 1], AREC);
		} else {
			r = alias_pw(wfd, arec[i & 1], AREC, 0);
		}
		if (r != AREC)
			abort();
	}
	close(wfd);
	return NULL;
}

static void alias_race(const char *fn, double ms)
{
	pthread_t t;
	unsigned char *b = malloc(AREC);
	long reads = 0, torn = 0;
	struct timespec t0, t1;

	if (strstr(fn, "pwrite"))
		alias_pw = (ssize_t (*)(int, const void *, size_t, off_t))dlsym(RTLD_DEFAULT, fn);
	else
		alias_w = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_DEFAULT, fn);
	if (!b || (!alias_pw && !alias_w)) {
		printf("verdict=skip no %s\n", fn);
		return;
	}
	for (int i = 0; i < 2; i++) {
		arec[i] = malloc(AREC);
		if (!arec[i])
			abort();
		memset(arec[i], 'A' + 2 * i, AREC);
	}
	if (pwrite(fd, arec[0], AREC, 0) != AREC || pthread_create(&t, NULL, alias_writer, NULL))
		abort();
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		if (pread(fd, b, AREC, 0) != AREC)
			abort();
		reads++;
		torn += memchr(b, b[0] ^ 2, AREC) != NULL;
		clock_gettime(CLOCK_MONOTONIC, &t1);
	} while ((t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6 < ms);
	atomic_store(&alias_stop, 1);
	pthread_join(t, NULL);
	printf("reads=%ld torn=%ld\n", reads, torn);
}

/* ---- clone_fork ---------------------------------------------------- */

#define BIGW (256 << 20)

static _Atomic int bigw_stop, bigw_in;
static char *bigw;

static void *bigw_main(void *arg)
{
	(void)arg;
	while (!atomic_load(&bigw_stop)) {
		atomic_store(&bigw_in, 1);
		if (pwrite(fd, bigw, BIGW, 0) != BIGW)
			abort();
	}
	return NULL;
}

static int clone_child(void *arg)
{
	(void)arg;
	alarm(5);
	return pwrite(fd, "x", 1, 4096) == 1 ? 0 : 3;
}

static void clone_fork(int by_clone3)
{
	pthread_t t;
	char *stk = malloc(1 << 20);
	int st;
	pid_t p;

	bigw = malloc(BIGW);
	if (!bigw || !stk)
		abort();
	memset(bigw, 'a', BIGW);
	if (pthread_create(&t, NULL, bigw_main, NULL))
		abort();
	while (!atomic_load(&bigw_in))
		sched_yield();
	usleep(2000);	/* well inside a 256 MiB pwrite */
	if (by_clone3) {
		/* A fork by clone3 through syscall(): the child returns here. */
		uint64_t ca[8] = { 0, 0, 0, 0, SIGCHLD, 0, 0, 0 };

		p = (pid_t)syscall(SYS_clone3, ca, sizeof(ca));
		if (p == 0)
			_exit(clone_child(NULL));
	} else {
		p = clone(clone_child, stk + (1 << 20), SIGCHLD, NULL);
	}
	if (p < 0 || waitpid(p, &st, 0) != p)
		abort();
	atomic_store(&bigw_stop, 1);
	pthread_join(t, NULL);
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		printf("child=ok\n");
	else
		printf("child=status %d\n", st);
}

/* ---- iov_first ------------------------------------------------------ */

static int first_bad;

/* Each call through a pointer, so that the compiler's access checks do
 * not see the constant; volatile so that it is read at the call. */
static void *volatile bad_iov = (void *)8;

static void iov_first_calls(const char *who)
{
	const struct iovec *v = bad_iov;
	const char *name[4] = { "writev", "readv", "pwritev", "preadv" };

	for (int i = 0; i < 4; i++) {
		ssize_t r;
		int e;

		errno = 0;
		r = i == 0 ? writev(fd, v, 1) : i == 1 ? readv(fd, v, 1) :
		    i == 2 ? pwritev(fd, v, 1, 0) : preadv(fd, v, 1, 0);
		e = errno;
		if (r != -1 || e != EFAULT) {
			printf("%s %s=%zd errno=%d\n", who, name[i], r, e);
			first_bad++;
		}
		fflush(stdout);
	}
}

static void *iov_first_thread(void *arg)
{
	(void)arg;
	iov_first_calls("thread");
	return NULL;
}

/* ---- clone_solo ---------------------------------------------------- */

#define BIG (1 << 20)

static _Atomic int stop_writer;
static unsigned char *wbuf[2];

static int writer(void *arg)
{
	(void)arg;
	for (long k = 0; !atomic_load(&stop_writer); k++)
		if (pwrite(fd, wbuf[k % 2], BIG, 0) != BIG)
			break;
	return 0;
}

/* A TLS block of the thread's own: the main thread's static TLS and its
 * thread descriptor, copied, with the descriptor's self pointers moved
 * (x86-64: the descriptor at the thread pointer, TLS below it). */
static void *copy_tls(void)
{
	void (*info)(size_t *, size_t *) =
		(void (*)(size_t *, size_t *))dlsym(RTLD_DEFAULT, "_dl_get_tls_static_info");
	const unsigned *tcbp = dlsym(RTLD_DEFAULT, "_thread_db_sizeof_pthread");
	size_t size, align;
	char *tp = __builtin_thread_pointer(), *blk, *ntp;

	if (!info || !tcbp)
		return NULL;
	info(&size, &align);
	if (align < 64)
		align = 64;
	blk = aligned_alloc(align, (size + align) / align * align);
	if (!blk)
		return NULL;
	memcpy(blk, tp - (size - *tcbp), size);
	ntp = blk + (size - *tcbp);
	((void **)ntp)[0] = ntp;	/* tcbhead_t.tcb */
	((void **)ntp)[2] = ntp;	/* tcbhead_t.self */
	return ntp;
}

extern int __clone(int (*fn)(void *), void *stack, int flags, void *arg, ...);

static int clone_solo(const char *fn, double ms)
{
	const int flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD |
			  CLONE_SYSVSEM | CLONE_SETTLS | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID;
	static _Atomic pid_t ctid;
	pid_t ptid;
	unsigned char *rbuf = malloc(BIG);
	char *stack = mmap(NULL, BIG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	void *ntp = copy_tls();
	long reads = 0, torn = 0;
	struct timespec t0, t1;
	int r;

	if (!rbuf || stack == MAP_FAILED || !ntp) {
		printf("verdict=skip cannot set up a thread by hand\n");
		return 0;
	}
	for (int i = 0; i < 2; i++) {
		wbuf[i] = malloc(BIG);
		if (!wbuf[i])
			abort();
		memset(wbuf[i], 'a' + i, BIG);
	}
	if (pwrite(fd, wbuf[0], BIG, 0) != BIG)
		abort();
	atomic_store(&ctid, 1);
	if (!strcmp(fn, "__clone"))
		r = __clone(writer, stack + BIG, flags, NULL, &ptid, ntp, &ctid);
	else
		r = clone(writer, stack + BIG, flags, NULL, &ptid, ntp, &ctid);
	if (r < 0) {
		printf("verdict=skip %s: %s\n", fn, strerror(errno));
		return 0;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		ssize_t n = pread(fd, rbuf, BIG, 0);

		if (n != BIG)
			abort();
		reads++;
		for (size_t i = 1; i < BIG; i++)
			if (rbuf[i] != rbuf[0]) {
				torn++;
				break;
			}
		clock_gettime(CLOCK_MONOTONIC, &t1);
	} while ((t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6 < ms);
	atomic_store(&stop_writer, 1);
	/* CLONE_CHILD_CLEARTID: the kernel zeroes ctid and wakes us. */
	while (atomic_load(&ctid) != 0)
		syscall(SYS_futex, &ctid, FUTEX_WAIT, ptid, NULL, NULL, 0);
	printf("reads=%ld torn=%ld\n", reads, torn);
	return 0;
}

int main(int argc, char **argv)
{
	pthread_t t;

	if (argc < 3) {
		fprintf(stderr, "usage: adv_fast_probe iov_altstack|iov_first PATH | clone_solo PATH FN MS\n");
		return 2;
	}
	path = argv[2];
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		abort();
	if (!strcmp(argv[1], "iov_altstack")) {
		/* A thread glibc made: its thread pointer tops its stack. */
		pthread_create(&t, NULL, altstack_thread, NULL);
		pthread_join(t, NULL);
	} else if (!strcmp(argv[1], "iov_coroutine")) {
		pthread_create(&t, NULL, coroutine_thread, NULL);
		pthread_join(t, NULL);
	} else if (!strcmp(argv[1], "clone_fork") || !strcmp(argv[1], "clone3_fork")) {
		clone_fork(argv[1][5] == '3');
	} else if (!strcmp(argv[1], "alias") && argc >= 5) {
		alias_race(argv[3], atof(argv[4]));
	} else if (!strcmp(argv[1], "solo_signal") && argc >= 4) {
		solo_signal(atoi(argv[3]));
	} else if (!strcmp(argv[1], "iov_first")) {
		iov_first_calls("main");
		pthread_create(&t, NULL, iov_first_thread, NULL);
		pthread_join(t, NULL);
		printf(first_bad ? "verdict=bad %d calls\n" : "verdict=ok\n", first_bad);
	} else if (!strcmp(argv[1], "clone_solo") && argc >= 5) {
		clone_solo(argv[3], atof(argv[4]));
	} else {
		fprintf(stderr, "adv_fast_probe: unknown mode %s\n", argv[1]);
		return 2;
	}
	close(fd);
	unlink(path);
	return 0;
}
