/*
 * The library's state as every layer sees it: whether start-up is done
 * (rs_ready), the start-up and fork hooks init.c runs, and how deep this
 * thread is inside the shim (rs_depth).  Files below the I/O path
 * (cluster.c) include this, not iolock.h, which includes them.
 */
#ifndef RS_STATE_H
#define RS_STATE_H

#include <stddef.h>

#include "config.h"
#include "rawsyscall.h"
#include "real.h"

/* The library's own globals, which the inline paths read on every call:
 * declared hidden here, so that each is one PC-relative load rather than
 * a load of its address first (the symbols are hidden anyway:
 * -fvisibility=hidden). */
#define RS_HIDDEN __attribute__((visibility("hidden")))
extern struct rs_config rs_cfg RS_HIDDEN;
extern struct rs_real rs_real RS_HIDDEN;

enum rs_state { RS_UNINIT = 0, RS_INITIALIZING = 1, RS_READY = 2, RS_DISABLED = 3 };
extern _Atomic int rs_state RS_HIDDEN;
/* Nesting depth of shim calls on this thread; non-zero means a signal
 * handler interrupted the shim, and its calls pass straight through. */
extern __thread int rs_depth __attribute__((tls_model("initial-exec")));

/* Plain accesses TSan can see: rs_depth is read by pthread_cancel's
 * caller on another thread, rs_fast and the node globals change while
 * other threads read them.  Relaxed loads and stores cost nothing extra. */
#define RS_LOAD(x)     __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define RS_STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

static inline void rs_depth_add(int n)
{
	RS_STORE(rs_depth, RS_LOAD(rs_depth) + n);
}

void rs_init_slow(void);
/* The child side of fork and _Fork: forget every lock of other threads. */
void rs_after_fork_child(void);
/* The same for a child of clone (flags: its clone flags; with
 * CLONE_FILES it shares our descriptor table, so it closes nothing). */
void rs_after_clone_child(long flags);
void rs_fork_prepare(void);
void rs_fork_parent(void);
/* Our pid, refreshed in a forked child; a mismatch means a vfork child. */
extern long rs_pid;

/*
 * For the words every fork writes on both sides (the locks its handlers
 * hold across it) and in the child (pid, descriptors, attachment): all in
 * one section, so that they share a page or two.  A store after fork to
 * a page the parent shares copies it, a fault and a TLB flush each; with
 * these spread over eight pages, forked workers paid that eight times
 * (hundreds of processes starting at once: docs/benchmarks.md).
 */
#if defined(__SANITIZE_ADDRESS__)
/* AddressSanitizer puts no redzone around a global of a section of its
 * own: its builds keep them where it checks them. */
#define RS_FORKED
#else
#define RS_FORKED __attribute__((section(".rs_forked")))
#endif
/* A fork child's reset of an atomic x: a store only if x is not zero
 * already, for the same reason. */
#define RS_ZERO_IF_SET(x)                                                      \
	do {                                                                   \
		if (atomic_load_explicit(&(x), memory_order_relaxed))          \
			atomic_store_explicit(&(x), 0, memory_order_relaxed);  \
	} while (0)

/*
 * Set for good once a task that shares our memory but is another process
 * may exist: a vfork (vfork(), syscall(SYS_vfork)) or a clone with
 * CLONE_VM made through us (interpose.c).  Such a task sees rs_pid as we
 * left it, so only a system call can tell it from us; until one may
 * exist, rs_pid is our pid in every task that runs this code (forks
 * refresh it in the child: rs_after_fork_child), and the fd bookkeeping
 * asks the kernel nothing.  Set from the start where vfork is not
 * wrapped (not x86-64).  A vfork or clone made by inline assembly is not
 * seen (limitations.md).
 */
extern char rs_vm_shared RS_HIDDEN;

/* This task is the process rs_pid names, not a vfork child or another
 * process sharing our memory: only they may change the fd table. */
static inline int rs_own_process(void)
{
	return !RS_LOAD(rs_vm_shared) || rs_raw_getpid() == rs_pid;
}

static inline int rs_ready(void)
{
	int s = __atomic_load_n((int *)&rs_state, __ATOMIC_ACQUIRE);

	if (__builtin_expect(s == RS_READY, 1))
		return 1;
	if (s != RS_DISABLED)
		rs_init_slow();
	return __atomic_load_n((int *)&rs_state, __ATOMIC_ACQUIRE) == RS_READY;
}

/* Slow-path bookkeeping (open, close, dup) must not be re-entered from a
 * signal handler on the same thread: the table mutex is not recursive. */
static inline int rs_enter_slow(void)
{
	if (!rs_ready() || RS_LOAD(rs_depth))
		return 0;
	rs_depth_add(1);
	return 1;
}

static inline void rs_leave_slow(void)
{
	rs_depth_add(-1);
}

/* n bytes from src to dst, one of them the application's memory (dst if
 * to_user), without faulting: -1 where the kernel would say EFAULT.
 * process_vm_readv/writev on ourselves; where that is refused (seccomp),
 * a plain copy.  errno is left alone.  (Defined in iolock.c.) */
int rs_user_copy(void *dst, const void *src, size_t n, int to_user);

#endif
