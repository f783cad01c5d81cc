#include "real.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/*
 * Stand-ins used until dlsym has answered.  Another preloaded library (an
 * allocator, a tracer) may do I/O from inside our dlsym call; those calls
 * land here and must neither recurse into dlsym nor fail.  The calls such
 * code makes are the plain syscalls below; the rest report ENOSYS.
 * They are the application's calls, so they go through rs_app_syscall,
 * which follows what they do to file offsets and F_SETFL.
 */
#define APP_SYS_(nr, a, b, c, d, e, f, ...) \
	rs_app_syscall((long)(nr), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))
#define app_sys(...) APP_SYS_(__VA_ARGS__, 0, 0, 0, 0, 0, 0, 0)

static mode_t va_mode(int flags, va_list ap)
{
	return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

static int raw_open(const char *p, int flags, ...)
{
	va_list ap;
	mode_t m;

	va_start(ap, flags);
	m = va_mode(flags, ap);
	va_end(ap);
	return (int)app_sys(SYS_openat, AT_FDCWD, p, flags, m);
}

static int raw_openat(int dirfd, const char *p, int flags, ...)
{
	va_list ap;
	mode_t m;

	va_start(ap, flags);
	m = va_mode(flags, ap);
	va_end(ap);
	return (int)app_sys(SYS_openat, dirfd, p, flags, m);
}

static int raw_close(int fd) { return (int)app_sys(SYS_close, fd); }
static ssize_t raw_read(int fd, void *b, size_t n) { return app_sys(SYS_read, fd, b, n); }
static ssize_t raw_write(int fd, const void *b, size_t n) { return app_sys(SYS_write, fd, b, n); }
static ssize_t raw_pread(int fd, void *b, size_t n, off_t o) { return app_sys(SYS_pread64, fd, b, n, o); }
static ssize_t raw_pwrite(int fd, const void *b, size_t n, off_t o) { return app_sys(SYS_pwrite64, fd, b, n, o); }
static off_t raw_lseek(int fd, off_t o, int w) { return (off_t)app_sys(SYS_lseek, fd, o, w); }
#if defined(SYS_newfstatat)
/* struct stat is the kernel's on the 64-bit architectures that have
 * newfstatat; elsewhere these wait for dlsym (ENOSYS until then). */
static int raw_fstat(int fd, struct stat *st) { return (int)app_sys(SYS_fstat, fd, st); }
static int raw_fstat64(int fd, struct stat64 *st) { return (int)app_sys(SYS_fstat, fd, st); }
static int raw_fstatat(int d, const char *p, struct stat *st, int fl)
{
	return (int)app_sys(SYS_newfstatat, d, p, st, fl);
}
static int raw_fstatat64(int d, const char *p, struct stat64 *st, int fl)
{
	return (int)app_sys(SYS_newfstatat, d, p, st, fl);
}
#define RS_RAW_FSTAT .fstat = raw_fstat, .fstat64 = raw_fstat64, \
		     .fstatat = raw_fstatat, .fstatat64 = raw_fstatat64,
#else
#define RS_RAW_FSTAT
#endif

static int raw_fcntl(int fd, int cmd, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	return (int)app_sys(SYS_fcntl, fd, cmd, arg);
}

struct rs_real rs_real = {
	.open = raw_open, .open64 = raw_open,
	.openat = raw_openat, .openat64 = raw_openat,
	.close = raw_close, .read = raw_read, .write = raw_write,
	.pread = raw_pread, .pread64 = raw_pread,
	.pwrite = raw_pwrite, .pwrite64 = raw_pwrite,
	.lseek = raw_lseek, .lseek64 = raw_lseek,
	.fcntl = raw_fcntl, .fcntl64 = raw_fcntl,
	RS_RAW_FSTAT
};

static _Atomic int resolved;
static __thread int resolving __attribute__((tls_model("initial-exec")));

void rs_real_resolve(void)
{
	struct rs_real r = rs_real;

	if (atomic_load_explicit(&resolved, memory_order_acquire) || resolving)
		return;
	resolving = 1;
	/* Resolve into a copy, then publish each pointer: a concurrent caller
	 * sees either the stand-in or the real function, never NULL. */
#define RS_REAL_RESOLVE(ret, name, params) { \
		void *p = dlsym(RTLD_NEXT, #name); \
		if (p) \
			r.name = (ret (*) params)p; \
	}
	RS_REAL_CALLS(RS_REAL_RESOLVE)
#undef RS_REAL_RESOLVE
#define RS_REAL_PUBLISH(ret, name, params) \
	__atomic_store_n(&rs_real.name, r.name, __ATOMIC_RELEASE);
	RS_REAL_CALLS(RS_REAL_PUBLISH)
#undef RS_REAL_PUBLISH
	atomic_store_explicit(&resolved, 1, memory_order_release);
	resolving = 0;
}
