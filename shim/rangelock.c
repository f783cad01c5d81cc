/*
 * Process-wide reader/writer byte-range lock.
 *
 * THEORY
 *
 * Interface.  rs_rangelock_lock(rl, node, start, end, mode) holds the
 * half-open byte range [start, end) of one file for reading or writing;
 * end == RS_RANGE_EOF stands for "to infinity" (appends, truncation).
 * The caller supplies the queue node, normally on its stack, so locking
 * never allocates (OpenZFS learnt in issue #142 what a malloc on this path
 * costs).  rs_rangelock_unlock(rl, node) releases it.  The lock knows
 * nothing about files or interposition, so it is tested on its own.
 *
 * Common case.  One thread, or threads working on disjoint regions: lock
 * takes the queue mutex (one uncontended CAS), finds no conflicting
 * request in a queue of a few entries, appends its node and drops the
 * mutex.  Unlock takes the mutex, unlinks the node and finds nobody to
 * wake.  Four atomic read-modify-writes per lock/unlock pair (the
 * mutex's CAS and releasing exchange, twice), no syscall; the shim inlines
 * this case (rangelock_fast.h).
 *
 * Overlaps.  A request conflicts with a queued one when the ranges overlap
 * and at least one of them is a writer; readers share.  As in Lustre's
 * obdclass/range_lock.c, a new request counts the earlier queued requests
 * it conflicts with, granted or still waiting, into node->blocked, and is
 * granted when that count is zero.  Unlock walks the requests queued after
 * the departing one and decrements the count of each it conflicted with;
 * whoever reaches zero is woken.  Lustre keeps the queue in an interval
 * tree and assigns sequence numbers for the order; we keep one FIFO list,
 * whose order is the sequence.  The list is O(queued) to scan, and the
 * queue of one file holds one entry per thread in I/O on it, so a few
 * dozen entries at most: a scan costs less than the cache miss an
 * interval tree's rebalancing would.
 *
 * Waiting.  The waiter spins briefly on node->blocked (the holder may be
 * a short write to the page cache), then sleeps on it as a private futex.
 * The waker decrements under the queue mutex and issues the wake while
 * still holding it, because the node lives on the waiter's stack: once the
 * waiter sees zero it may return and reuse that memory.  A wake that lands
 * on reused memory is harmless, since every futex user re-checks its word.
 *
 * Fairness.  Strict FIFO among conflicting requests: a request waits for
 * every earlier conflicting request, including waiting ones, so a writer
 * queued behind readers is never overtaken by later readers and nobody
 * starves.  Non-conflicting requests never wait for each other, whatever
 * their order: disjoint writers run in parallel, which is the point
 * (Lustre LU-1669, seed 000).
 *
 * Why not lock-free.  FreeBSD's kern_rangelock.c follows Kogan, Dice and
 * Issa, "Scalable Range Locks for Scalable Address Spaces and Beyond"
 * (EuroSys 2020): a lock-free sorted list of granted ranges with a single
 * CAS until the first conflict.  It wins when many cores hammer one lock
 * with tiny critical sections (page faults on an address space).  Here
 * every critical section is a read or write syscall of a microsecond or
 * more, so a 20 ns queue mutex is not the bottleneck, and that design
 * retries conflicting requests instead of queueing them, which gives up
 * the FIFO guarantee.  We keep the simpler, fair queue.
 *
 * Crashes.  A thread cannot die holding a range without its process
 * dying; across processes, the node lock table handles crashes.  After
 * fork() the child has only the forking thread, which held no range (it
 * was not inside the shim), so the child discards every queue with
 * rs_rangelock_reset().
 */
#include "rangeshim/rangelock.h"

#include <stddef.h>

#include "futex.h"

#define RS_WAIT_SPINS 200

static inline int overlaps(const struct rs_rl_node *a, uint64_t start, uint64_t end)
{
	return a->start < end && start < a->end;
}

static inline int conflicts(const struct rs_rl_node *a, uint64_t start,
			    uint64_t end, unsigned mode)
{
	return overlaps(a, start, end) &&
	       (a->mode == RS_RL_WRITE || mode == RS_RL_WRITE);
}

void rs_rangelock_init(struct rs_rangelock *rl)
{
	atomic_init(&rl->mtx, 0);
	rl->pad = 0;
	rl->head = NULL;
	rl->tail = NULL;
}

void rs_rangelock_reset(struct rs_rangelock *rl)
{
	rs_rangelock_init(rl);
}

static uint32_t count_conflicts(const struct rs_rangelock *rl, uint64_t start,
				uint64_t end, unsigned mode)
{
	uint32_t n = 0;

	for (const struct rs_rl_node *q = rl->head; q; q = q->next)
		n += conflicts(q, start, end, mode);
	return n;
}

static void enqueue(struct rs_rangelock *rl, struct rs_rl_node *node,
		    uint64_t start, uint64_t end, unsigned mode, uint32_t blocked)
{
	node->start = start;
	node->end = end;
	node->mode = mode;
	atomic_store_explicit(&node->blocked, blocked, memory_order_relaxed);
	node->next = NULL;
	node->prev = rl->tail;
	if (rl->tail)
		rl->tail->next = node;
	else
		rl->head = node;
	rl->tail = node;
}

static void wait_granted(struct rs_rl_node *node)
{
	uint32_t v;

	for (int i = 0; i < RS_WAIT_SPINS; i++) {
		if (atomic_load_explicit(&node->blocked, memory_order_acquire) == 0)
			return;
		rs_cpu_relax();
	}
	while ((v = atomic_load_explicit(&node->blocked, memory_order_acquire)) != 0)
		rs_futex_wait(&node->blocked, v);
}

int rs_rangelock_lock(struct rs_rangelock *rl, struct rs_rl_node *node,
		      uint64_t start, uint64_t end, unsigned mode)
{
	uint32_t blocked;

	rs_mutex_lock(&rl->mtx);
	blocked = count_conflicts(rl, start, end, mode);
	enqueue(rl, node, start, end, mode, blocked);
	rs_mutex_unlock(&rl->mtx);
	if (blocked == 0)
		return 0;
	wait_granted(node);
	/* Pairs with the release in rs_rangelock_unlock of each blocker. */
	rs_tsan_acquire(node);
	return 1;
}

int rs_rangelock_trylock(struct rs_rangelock *rl, struct rs_rl_node *node,
			 uint64_t start, uint64_t end, unsigned mode)
{
	int ok;

	rs_mutex_lock(&rl->mtx);
	ok = count_conflicts(rl, start, end, mode) == 0;
	if (ok)
		enqueue(rl, node, start, end, mode, 0);
	rs_mutex_unlock(&rl->mtx);
	return ok ? 0 : -1;
}

void rs_rangelock_unlock(struct rs_rangelock *rl, struct rs_rl_node *node)
{
	rs_mutex_lock(&rl->mtx);
	for (struct rs_rl_node *q = node->next; q; q = q->next) {
		if (!conflicts(q, node->start, node->end, node->mode))
			continue;
		rs_tsan_release(q);
		if (atomic_fetch_sub_explicit(&q->blocked, 1, memory_order_release) == 1)
			rs_futex_wake(&q->blocked, 1);
	}
	if (node->prev)
		node->prev->next = node->next;
	else
		rl->head = node->next;
	if (node->next)
		node->next->prev = node->prev;
	else
		rl->tail = node->prev;
	rs_mutex_unlock(&rl->mtx);
}
