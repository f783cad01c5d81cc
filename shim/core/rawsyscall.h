/*
 * System calls made with the instruction itself, not through libc: the
 * shim's own lseek/fstat on the fast path leave errno alone, the syscall()
 * wrapper cannot call the syscall() it replaces, and TSan's runtime maps
 * through our mmap before it can run instrumented code.  The result is
 * the kernel's: -4095..-1 is -errno.  RS_HAVE_RAW_SYSCALL says whether
 * this architecture has them; callers keep a libc fallback otherwise.
 */
#ifndef RS_RAWSYSCALL_H
#define RS_RAWSYSCALL_H

#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__aarch64__)
#define RS_HAVE_RAW_SYSCALL 1

static inline __attribute__((always_inline)) long
rs_raw_syscall3(long nr, long a, long b, long c)
{
#if defined(__x86_64__)
	long ret;

	__asm__ __volatile__("syscall"
			     : "=a"(ret)
			     : "a"(nr), "D"(a), "S"(b), "d"(c)
			     : "rcx", "r11", "memory");
	return ret;
#else
	register long x8 __asm__("x8") = nr;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;

	__asm__ __volatile__("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2) : "memory");
	return x0;
#endif
}

static inline __attribute__((always_inline)) long
rs_raw_syscall6(long nr, long a, long b, long c, long d, long e, long f)
{
#if defined(__x86_64__)
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	long ret;

	__asm__ __volatile__("syscall"
			     : "=a"(ret)
			     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			     : "rcx", "r11", "memory");
	return ret;
#else
	register long x8 __asm__("x8") = nr;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;
	register long x3 __asm__("x3") = d;
	register long x4 __asm__("x4") = e;
	register long x5 __asm__("x5") = f;

	__asm__ __volatile__("svc 0"
			     : "+r"(x0)
			     : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
			     : "memory");
	return x0;
#endif
}
#endif

/*
 * The library's own system calls: syscall()'s contract (the result, or -1
 * with errno set), made with the instruction.  Never through syscall()
 * itself: inside the library that name binds to the exported wrapper
 * (-Bsymbolic-functions), whose checks are for the application's calls
 * (the exit report, fork and thread detection, the F_SETFL quiesce, the
 * file offset marks, coverage).  Arguments are widened to long, as the
 * kernel reads them; missing ones are 0.
 */
static inline __attribute__((always_inline)) long
rs_sys6(long nr, long a, long b, long c, long d, long e, long f)
{
#if defined(RS_HAVE_RAW_SYSCALL)
	long r = rs_raw_syscall6(nr, a, b, c, d, e, f);

	if (__builtin_expect((unsigned long)r > -4096UL, 0)) {
		errno = (int)-r;
		return -1;
	}
	return r;
#else
	return syscall(nr, a, b, c, d, e, f);
#endif
}
#define RS_SYS_(nr, a, b, c, d, e, f, ...) \
	rs_sys6((long)(nr), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))
#define rs_sys(...) RS_SYS_(__VA_ARGS__, 0, 0, 0, 0, 0, 0, 0)

/* fstat for the library's own descriptors: not through the exported
 * fstat wrapper, which classifies the application's. */
static inline int rs_fstat(int fd, struct stat *st)
{
#if defined(RS_HAVE_RAW_SYSCALL)
	return (int)rs_sys(SYS_fstat, fd, st);
#else
	return fstat(fd, st);
#endif
}

/* mmap for the library's own memory: not through the exported mmap
 * wrapper, which counts the application's shared mappings.  Inlined, so
 * that the TSan-free stand-in for mmap (coverage.c) stays TSan-free. */
static inline __attribute__((always_inline)) void *
rs_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	long r = rs_sys(SYS_mmap, addr, len, prot, flags, fd, off);

	return r == -1 ? MAP_FAILED : (void *)r;
}

/* getpid, without errno or a libc call (it cannot fail). */
static inline __attribute__((always_inline)) long rs_raw_getpid(void)
{
#if defined(RS_HAVE_RAW_SYSCALL)
	return rs_raw_syscall3(SYS_getpid, 0, 0, 0);
#else
	return syscall(SYS_getpid);
#endif
}

#endif
