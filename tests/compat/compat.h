/*
 * Shared by the programs of the compatibility and fault suite
 * (tests/compat/run.sh, tests/compat/soak.sh).  Each program runs the same
 * way without and with the shim; RS_COMPAT_STRICT=1 in the environment
 * (set by run.sh for the run under the shim) turns checks that only the
 * shim can make hold, such as "no torn read", into failures.  Without it,
 * such counts are only reported.
 *
 * Arguments are key=value pairs; sizes take K, M or G suffixes.
 */
#ifndef RS_COMPAT_H
#define RS_COMPAT_H

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdint.h>
#include <signal.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define KIB 1024ull
#define MIB (1024ull * 1024)

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static inline void __attribute__((noreturn, format(printf, 1, 2))) die(const char *fmt, ...)
{
	char buf[512];
	int e = errno;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if (n > (int)sizeof(buf) - 80)
		n = (int)sizeof(buf) - 80;
	n += snprintf(buf + n, sizeof(buf) - (size_t)n, " (errno %d: %s)\n", e, strerror(e));
	/* Straight to the kernel: callers may be in a signal handler or a
	 * vfork child, and stdio may be mid-buffer. */
	if (syscall(SYS_write, 2, buf, (size_t)n) < 0)
		_exit(2);
	_exit(2);
}

/*
 * Wait for child p (number i of program who) for up to 20 s, polling so
 * that a hung child is killed rather than hanging the case.  0: exited 0;
 * -1: other status (reported); -2: hung (reported and killed).
 */
static inline int wait_child(pid_t p, const char *who, long i)
{
	uint64_t t0 = now_ns();
	int st = 0;

	for (;;) {
		pid_t w = waitpid(p, &st, WNOHANG);

		if (w == p)
			break;
		if (w < 0)
			die("waitpid");
		if (now_ns() - t0 > 20000000000ull) {
			fprintf(stderr, "%s: child %ld (mode %ld) hung for 20 s\n", who, i, i % 4);
			kill(p, SIGKILL);
			waitpid(p, &st, 0);
			return -2;
		}
		sleep_ms(1);
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "%s: child %ld (mode %ld) status %#x\n", who, i, i % 4, st);
		return -1;
	}
	return 0;
}

static inline void *xalloc(size_t n)
{
	void *p = NULL;

	if (posix_memalign(&p, 4096, n ? n : 1) != 0)
		die("out of memory (%zu bytes)", n);
	memset(p, 0, n);
	return p;
}

/* A shared anonymous mapping that survives fork. */
static inline void *shared_map(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		die("mmap %zu", n);
	return p;
}

static inline int uniform(const unsigned char *p, size_t n)
{
	for (size_t i = 1; i < n; i++)
		if (p[i] != p[0])
			return 0;
	return 1;
}

/* xorshift64*, one state per thread */
static inline uint64_t rnd(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545f4914f6cdd1dull;
}

static inline int strict_mode(void)
{
	const char *s = getenv("RS_COMPAT_STRICT");

	return s && *s == '1';
}

/* Is librangeshim.so mapped into this process? */
static inline int shim_loaded(void)
{
	char line[512];
	FILE *f = fopen("/proc/self/maps", "r");
	int found = 0;

	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, "librangeshim") != NULL;
	fclose(f);
	return found;
}

/* key=value arguments */
static inline const char *arg_str(int argc, char **argv, const char *key, const char *dflt)
{
	size_t k = strlen(key);

	for (int i = 1; i < argc; i++)
		if (strncmp(argv[i], key, k) == 0 && argv[i][k] == '=')
			return argv[i] + k + 1;
	return dflt;
}

static inline long long arg_num(int argc, char **argv, const char *key, long long dflt)
{
	const char *v = arg_str(argc, argv, key, NULL);
	char *end;
	long long n;

	if (!v)
		return dflt;
	n = strtoll(v, &end, 0);
	switch (*end) {
	case 'k': case 'K': n *= 1024; break;
	case 'm': case 'M': n *= 1024 * 1024; break;
	case 'g': case 'G': n *= 1024ll * 1024 * 1024; break;
	default: break;
	}
	return n;
}

/* Full pwrite/pread; returns 0, or -1 with errno. */
static inline int pwrite_full(int fd, const void *buf, size_t n, off_t off)
{
	ssize_t r = pwrite(fd, buf, n, off);

	if (r == (ssize_t)n)
		return 0;
	if (r >= 0)
		errno = EIO;
	return -1;
}

static inline int pread_full(int fd, void *buf, size_t n, off_t off)
{
	ssize_t r = pread(fd, buf, n, off);

	if (r == (ssize_t)n)
		return 0;
	if (r >= 0)
		errno = EIO;
	return -1;
}

/*
 * A deadlock is a run that stops moving, not one that is slow: on a
 * loaded machine a signal storm with and without the shim both overran
 * a fixed bound.  The watchdog prints "NAME DEADLOCK" and exits 3 once
 * the run time is over and progress() has not changed for 30 s.
 */
struct watchdog_arg {
	const char *name;
	double seconds;
	long (*progress)(void);
};

static inline void *watchdog_thread(void *p)
{
	const struct watchdog_arg *w = p;
	uint64_t start = now_ns(), moved = start;
	long last = w->progress();

	for (;;) {
		uint64_t t;
		long now;

		sleep_ms(100);
		t = now_ns();
		now = w->progress();
		if (now != last) {
			last = now;
			moved = t;
		}
		if (t - start > (uint64_t)(w->seconds * 1e9) && t - moved > 30000000000ull)
			break;
	}
	printf("%s DEADLOCK: no progress for 30 s after the run time\n", w->name);
	fflush(stdout);
	_exit(3);
}

static inline void start_watchdog(struct watchdog_arg *w)
{
	pthread_t t;

	if (pthread_create(&t, NULL, watchdog_thread, w) != 0)
		die("pthread_create watchdog");
	pthread_detach(t);
}

#endif
