/*
 * rangeshim range lock: reader/writer byte-range lock for the threads of
 * one process.  Usable without the preload library; see shim/core/rangelock.c
 * for the theory.
 *
 * Ranges are half-open, [start, end), and end == RS_RANGE_EOF means "to
 * infinity".  The caller owns the struct rs_rl_node (usually on its stack)
 * for as long as the range is locked; no memory is allocated.
 */
#ifndef RS_RANGELOCK_H
#define RS_RANGELOCK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RS_RANGE_EOF UINT64_MAX

/* Exported by librangeshim.so, so that programs may use the lock directly. */
#define RS_RANGELOCK_API __attribute__((visibility("default")))

enum rs_rl_mode {
	RS_RL_READ = 1,
	RS_RL_WRITE = 2,
	/* Appenders share with each other and exclude readers and writers:
	 * for O_APPEND writes, which the kernel orders among themselves
	 * (rangelock.c, "Appenders"). */
	RS_RL_APPEND = 4,
};

struct rs_rl_node {
	uint64_t start;
	uint64_t end;
	/* RS_RL_READ, _WRITE or _APPEND; while the request waits, also internal
	 * flags (waiting, hand-off), changed only under the queue mutex. */
	uint32_t mode;
	/* The futex word: 0 once the range is granted, non-zero while the
	 * request waits. */
	_Atomic uint32_t blocked;
	struct rs_rl_node *prev;
	struct rs_rl_node *next;
	uint64_t since;            /* a waiter's own clock: when it began */
};

struct rs_rangelock {
	_Atomic uint32_t mtx;      /* guards the queue below; see futex.h */
	uint32_t nwait;            /* queued requests not yet granted */
	/* In arrival order; or tagged with bit 0, the lone holder the
	 * shim's inline path took (shim/core/rangelock_fast.h). */
	struct rs_rl_node *head;
	struct rs_rl_node *tail;
};

#define RS_RANGELOCK_INIT { 0, 0, 0, 0 }

RS_RANGELOCK_API void rs_rangelock_init(struct rs_rangelock *rl);

/*
 * Pre:  start < end; mode is RS_RL_READ, RS_RL_WRITE or RS_RL_APPEND;
 *       node is not queued.
 * Post: [start, end) is held in the given mode: no overlapping range is
 *       held in a conflicting mode (only READ with READ and APPEND with
 *       APPEND are compatible).  Returns 0 when it was granted at
 *       once, 1 when the caller had to wait.  A running caller may take a
 *       free range ahead of earlier waiters, but never ahead of a waiter
 *       that has waited longer than the hand-off threshold (rangelock.c,
 *       "Fairness"), so every request is granted in bounded time as long
 *       as every holder unlocks.
 */
RS_RANGELOCK_API int rs_rangelock_lock(struct rs_rangelock *rl, struct rs_rl_node *node,
		      uint64_t start, uint64_t end, unsigned mode);

/*
 * Pre:  as rs_rangelock_lock.
 * Post: returns 0 and holds the range, or returns -1 and node is not queued
 *       (a held range, or a starved waiter, conflicts).
 */
RS_RANGELOCK_API int rs_rangelock_trylock(struct rs_rangelock *rl, struct rs_rl_node *node,
			 uint64_t start, uint64_t end, unsigned mode);

/*
 * Pre:  node holds its range in rl.
 * Post: the range is released; every waiter that no held range (and no
 *       starved waiter) now blocks has been granted (if starved) or woken
 *       to compete for it, unless a conflicting waiter is already awake.
 */
RS_RANGELOCK_API void rs_rangelock_unlock(struct rs_rangelock *rl, struct rs_rl_node *node);

/*
 * Pre:  node was given to rs_rangelock_lock by a caller that can no
 *       longer run (a vfork child killed in its call), which may have
 *       stopped anywhere outside the queue's mutex: before its request
 *       was queued, while it waited, or holding the range.
 * Post: node is in no queue of rl: a held range is released and a
 *       waiting request withdrawn, each waking whom it held back, as
 *       rs_rangelock_unlock does; a node not queued is left alone.
 */
RS_RANGELOCK_API void rs_rangelock_forget(struct rs_rangelock *rl, struct rs_rl_node *node);

/*
 * Forget every queued request without waking anyone.  Only for a forked
 * child, whose other threads (and the nodes on their stacks) are gone.
 */
RS_RANGELOCK_API void rs_rangelock_reset(struct rs_rangelock *rl);

#ifdef __cplusplus
}
#endif
#endif
