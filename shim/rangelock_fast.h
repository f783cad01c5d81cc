/*
 * Inline fast paths of the range lock for the shim's per-call path: when
 * the file's queue is empty (lock) or holds only the caller (unlock), the
 * queue mutex is taken and dropped around a handful of stores and nothing
 * else.  Every other case is the out-of-line code in rangelock.c, entered
 * with the mutex still held, so the two paths cannot disagree and a
 * contended call takes the mutex once.
 */
#ifndef RS_RANGELOCK_FAST_H
#define RS_RANGELOCK_FAST_H

#include "futex.h"
#include "rangeshim/rangelock.h"

/*
 * Succession thresholds (rangelock.c, "Thresholds"): how long a waiter
 * spins before it sleeps, and how long it waits before it is starved and
 * the range is handed to it.  Not part of the API; tests and benchmarks
 * that link rangelock.c may change them before any lock is used.
 */
extern uint64_t rs_rl_spin_ns;
extern uint64_t rs_rl_handoff_ns;

/*
 * rs_rangelock_unlock entered with the queue mutex already held, for
 * unlock_fast when the caller is not alone in the queue: a contended
 * unlock takes the mutex once, not twice.  (lock_fast does not do the
 * same: every way of writing its fallback so cost 2 more instructions on
 * its hot path, measured with tests/callgrind.sh.)
 * Pre:  as rs_rangelock_unlock, and the caller holds rl->mtx.
 * Post: as rs_rangelock_unlock; rl->mtx has been released.
 */
void rs_rangelock_unlock_locked(struct rs_rangelock *rl, struct rs_rl_node *node);

static inline __attribute__((always_inline)) int
rs_rangelock_lock_fast(struct rs_rangelock *rl, struct rs_rl_node *node,
		       uint64_t start, uint64_t end, unsigned mode)
{
	uint32_t c = 0;

	if (__builtin_expect(atomic_compare_exchange_strong_explicit(&rl->mtx, &c, 1,
			memory_order_acquire, memory_order_relaxed), 1)) {
		if (__builtin_expect(rl->head == NULL, 1)) {
			rs_tsan_acquire(&rl->mtx);
			node->start = start;
			node->end = end;
			node->mode = mode;
			/* mode without flags: granted.  blocked and since are
			 * read only on waiting nodes. */
			node->prev = NULL;
			node->next = NULL;
			rl->head = node;
			rl->tail = node;
			rs_mutex_unlock(&rl->mtx);
			return 0;
		}
		/* Let the general path queue behind whoever is there. */
		rs_tsan_acquire(&rl->mtx);
		rs_mutex_unlock(&rl->mtx);
	}
	return rs_rangelock_lock(rl, node, start, end, mode);
}

static inline __attribute__((always_inline)) void
rs_rangelock_unlock_fast(struct rs_rangelock *rl, struct rs_rl_node *node)
{
	uint32_t c = 0;

	if (__builtin_expect(atomic_compare_exchange_strong_explicit(&rl->mtx, &c, 1,
			memory_order_acquire, memory_order_relaxed), 1)) {
		rs_tsan_acquire(&rl->mtx);
		if (__builtin_expect(rl->head == node && node->next == NULL, 1)) {
			rl->head = NULL;
			rl->tail = NULL;
			rs_mutex_unlock(&rl->mtx);
			return;
		}
		rs_rangelock_unlock_locked(rl, node);
		return;
	}
	rs_rangelock_unlock(rl, node);
}

#endif
