/*
 * Futex primitives and the tiny mutex that guards short critical sections
 * (a range lock's queue, the fd table's slow path).  No allocation, no
 * syscall unless there is contention.
 *
 * The mutex is the three-state futex mutex of Drepper, "Futexes Are
 * Tricky" (2011), §5: 0 free, 1 locked, 2 locked with possible sleepers.
 */
#ifndef RS_FUTEX_H
#define RS_FUTEX_H

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "rawsyscall.h"

#if defined(__SANITIZE_THREAD__)
#define RS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RS_TSAN 1
#endif
#endif

#ifdef RS_TSAN
/* TSan cannot see futexes; tell it about the happens-before edges. */
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define rs_tsan_acquire(a) __tsan_acquire((void *)(a))
#define rs_tsan_release(a) __tsan_release((void *)(a))
#else
#define rs_tsan_acquire(a) ((void)(a))
#define rs_tsan_release(a) ((void)(a))
#endif

static inline void rs_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* Errors (EAGAIN: value changed; EINTR: signal) all mean "re-check". */
static inline void rs_futex_wait(_Atomic uint32_t *addr, uint32_t val)
{
	int saved = errno;
	rs_sys(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
	errno = saved;
}

static inline void rs_futex_wake(_Atomic uint32_t *addr, int n)
{
	int saved = errno;
	rs_sys(SYS_futex, addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
	errno = saved;
}

#define RS_SPIN_LIMIT 100

static inline void rs_mutex_lock(_Atomic uint32_t *m)
{
	uint32_t c = 0;

	if (atomic_compare_exchange_strong_explicit(m, &c, 1,
			memory_order_acquire, memory_order_relaxed)) {
		rs_tsan_acquire(m);
		return;
	}
	/* Holders never sleep or do I/O inside, so spinning briefly pays. */
	for (int i = 0; i < RS_SPIN_LIMIT; i++) {
		rs_cpu_relax();
		c = 0;
		if (atomic_load_explicit(m, memory_order_relaxed) == 0 &&
		    atomic_compare_exchange_weak_explicit(m, &c, 1,
				memory_order_acquire, memory_order_relaxed)) {
			rs_tsan_acquire(m);
			return;
		}
	}
	if (c != 2)
		c = atomic_exchange_explicit(m, 2, memory_order_acquire);
	while (c != 0) {
		rs_futex_wait(m, 2);
		c = atomic_exchange_explicit(m, 2, memory_order_acquire);
	}
	rs_tsan_acquire(m);
}

/* 1 if m was free and is now ours; never waits. */
static inline int rs_mutex_trylock(_Atomic uint32_t *m)
{
	uint32_t c = 0;

	if (!atomic_compare_exchange_strong_explicit(m, &c, 1, memory_order_acquire,
						     memory_order_relaxed))
		return 0;
	rs_tsan_acquire(m);
	return 1;
}

static inline void rs_mutex_unlock(_Atomic uint32_t *m)
{
	rs_tsan_release(m);
	if (atomic_exchange_explicit(m, 0, memory_order_release) == 2)
		rs_futex_wake(m, 1);
}

#endif
