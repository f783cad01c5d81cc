/*
 * Inline fast paths of the range lock for the shim's per-call path: a
 * lock that nobody else holds or wants is taken with one CAS of its head
 * and given back with one more, without the queue mutex (rangelock.c,
 * "A lone holder").  Every other case is the out-of-line code in
 * rangelock.c, which settles the head under the mutex first, so the two
 * paths cannot disagree.
 */
#ifndef RS_RANGELOCK_FAST_H
#define RS_RANGELOCK_FAST_H

#include "futex.h"
#include "invariant.h"
#include "rangeshim/rangelock.h"

/*
 * Succession thresholds (rangelock.c, "Thresholds"): how long a waiter
 * spins before it sleeps, and how long it waits before it is starved and
 * the range is handed to it.  Not part of the API; tests and benchmarks
 * that link rangelock.c may change them before any lock is used.
 */
extern uint64_t rs_rl_spin_ns;
extern uint64_t rs_rl_handoff_ns;

/* head tagged with this bit: the node is the lock's lone holder, taken
 * inline (rangelock.c, "A lone holder"). */
#define RS_RL_ALONE 1u

/* Pre:  as rs_rangelock_lock.  Post: as rs_rangelock_lock; a lock that
 * was empty is now held by node alone, through head. */
static inline __attribute__((always_inline)) int
rs_rangelock_lock_fast(struct rs_rangelock *rl, struct rs_rl_node *node,
		       uint64_t start, uint64_t end, unsigned mode)
{
	struct rs_rl_node *empty = NULL;

	RS_ASSERT(start < end);
	RS_ASSERT(mode == RS_RL_READ || mode == RS_RL_WRITE || mode == RS_RL_APPEND);
	/* Read by whoever settles the head (acquire), never by us. */
	node->start = start;
	node->end = end;
	node->mode = mode;
	if (__builtin_expect(__atomic_compare_exchange_n(
		    &rl->head, &empty, (struct rs_rl_node *)((uintptr_t)node | RS_RL_ALONE), 0,
		    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED), 1))
		return 0;
	return rs_rangelock_lock(rl, node, start, end, mode);
}

/* Pre:  as rs_rangelock_unlock.  Post: as rs_rangelock_unlock.  The CAS
 * fails once anyone else has settled the head: then node is queued, and
 * the general unlock takes it out and wakes whom it should. */
static inline __attribute__((always_inline)) void
rs_rangelock_unlock_fast(struct rs_rangelock *rl, struct rs_rl_node *node)
{
	struct rs_rl_node *alone = (struct rs_rl_node *)((uintptr_t)node | RS_RL_ALONE);

	if (__builtin_expect(__atomic_compare_exchange_n(&rl->head, &alone, NULL, 0,
							 __ATOMIC_RELEASE, __ATOMIC_RELAXED), 1))
		return;
	rs_rangelock_unlock(rl, node);
}

#endif
