/*
 * Process-wide reader/writer byte-range lock.
 *
 * THEORY
 *
 * Interface.  rs_rangelock_lock(rl, node, start, end, mode) holds the
 * half-open byte range [start, end) of one file for reading or writing;
 * end == RS_RANGE_EOF stands for "to infinity" (appends, truncation).
 * The caller supplies the queue node, normally on its stack, so locking
 * never allocates (a malloc on this path would add its own locks and
 * costs to every call, and could fail).  rs_rangelock_unlock(rl, node) releases it.  The API and its
 * Pre:/Post: contracts follow Lustre's obdclass/range_lock.c.  The lock
 * knows nothing about files or interposition, so it is tested on its own.
 *
 * Common case: a lone holder, two atomic read-modify-writes per
 * lock/unlock pair (below).  Threads working on disjoint regions: lock
 * takes the queue mutex (one uncontended CAS), finds no conflicting
 * request in a queue of a few entries, appends its node and drops the
 * mutex.  Unlock takes the mutex, unlinks the node and finds nobody
 * waiting.  Four atomic read-modify-writes per pair, no syscall.
 *
 * A lone holder.  When nobody else holds or wants any range of the file,
 * the inline path (rangelock_fast.h) takes the lock with one CAS of head
 * from NULL to its node tagged RL_ALONE, and gives it back with one CAS
 * of head from that back to NULL, never touching the mutex: FreeBSD's
 * "cheat mode" (kern_rangelock.c) for the uncontended case.  The tag
 * means: the queue is that one granted node, and tail is not kept.  Only
 * those two transitions happen without the mutex, and only from and to
 * NULL, so a queue that is not empty cannot change under a mutex holder.
 * Everything else first settles the word, under the mutex: a tagged head
 * becomes the node itself, a queue of one granted node (a CAS, which the
 * holder's unlock CAS then fails, so that the holder unlocks under the
 * mutex too); and a node queued into an empty lock goes in by a CAS
 * from NULL, which fails, and makes the request look again, if an inline
 * holder got there first.
 *
 * Overlaps.  A request conflicts with another when the ranges overlap and
 * at least one of them is a writer, or one reads and the other appends;
 * readers share, and appenders share (see Appenders).  The queue is one list
 * in arrival order holding every granted request and every waiting one;
 * a waiting node carries RL_WAITING in its mode.  A request is granted
 * when no granted node conflicts with it and no starved waiter does (see
 * Fairness).  The list is O(queued) to scan, and the queue of one file
 * holds one entry per thread in I/O on it, so a few dozen entries at most:
 * a scan costs less than the cache misses of an interval tree (Lustre
 * keeps one, with sequence numbers for the order; we keep the order in
 * the list).
 *
 * Succession.  Handing a released range to the oldest conflicting
 * waiter, FIFO, as Lustre does, makes a convoy under contention: the new
 * owner is asleep, so every hand-off costs a wake-up and a context switch
 * while the threads that are running, and want the range, wait behind it
 * (4 threads on one 4 KiB block: 6-25x the time of unlocked pwrite).  So
 * succession is competitive, as in the Linux
 * mutex and Go's sync.Mutex: a release only wakes a waiter, and whoever
 * reaches the queue mutex first while the range is free takes it, a
 * running thread ("barging") or the woken one.  The range stays with
 * threads that are on a CPU, and a waiter that is still spinning takes it
 * with no syscall at all.
 *
 * Waiting.  A waiter first spins on its futex word (node->blocked) for
 * up to rs_rl_spin_ns: the holder is usually a short read or write on
 * another CPU, and a wake-up would cost more than the wait.  Then it
 * marks the word SLEEP and sleeps on it.  A release runs the wake pass
 * over the waiters: each one that no granted node and no starved waiter
 * blocks is set WOKEN (and, only if it had gone to SLEEP, woken with a
 * futex wake issued after the queue mutex is dropped), unless a
 * conflicting earlier waiter is already WOKEN and about to try: one
 * release wakes one writer, or all the readers it freed, not a herd.  A
 * WOKEN waiter takes the mutex and tries again; if a barger was faster it
 * waits again, and runs the wake pass itself, since it may have been the
 * reason others were passed over.  So every waiter that nothing blocks
 * is awake or behind an awake conflicting one, and no wake-up is lost.  A
 * wake landing on a node that has meanwhile returned is harmless: futex
 * users re-check their word, and spurious wake-ups are allowed.  A waiter
 * that lost a retry first backs off (4 us, then 8) touching nothing
 * shared, so that the running thread keeps the queue's cache lines
 * instead of trading them with a retry at every release (exponential
 * backoff: Anderson, "The Performance of Spin Lock Alternatives for
 * Shared-Memory Multiprocessors", IEEE TPDS 1990).
 *
 * Fairness.  Barging alone could starve a waiter: threads that relock at
 * once always beat a sleeper, and overlapping readers that come and go
 * can keep a writer's range busy forever.  So a waiter that has waited
 * rs_rl_handoff_ns (measured from its arrival, as Go's starvation mode
 * after 1 ms) marks itself RL_HANDOFF, on its next failed try or when its
 * timed sleep ends.  A starved waiter is the Linux mutex's HANDOFF flag
 * for ranges: no new or woken request that conflicts with it may be
 * granted; the holders drain; the release that frees its range grants it
 * directly, marking it granted before waking it.  Starved waiters are
 * served among themselves in arrival order.  Every request is therefore
 * granted within rs_rl_handoff_ns plus the time the holders and the
 * earlier starved waiters in its way take: nobody starves.
 * Non-conflicting requests never wait for each other, whatever their
 * order: disjoint writers run in parallel, which is the point (Lustre
 * LU-1669, seed 000).
 *
 * Thresholds, measured on our 2-vCPU machines, tmpfs (docs/benchmarks.md,
 * "Contended (threads)", has the tables and the commands):
 *  - Spin 10 us.  A futex wake of a thread sleeping on the other CPU
 *    takes 6-8 us until it runs (ping-pong, one way; 1 us on one CPU), so
 *    by the classic spin-then-block rule (spin for as long as blocking
 *    would cost: Karlin, Li, Manasse and Owicki, SOSP 1991) about 10 us.
 *    Swept over 0, 2, 5, 10, 20 and 50 us: in the contended I/O table
 *    the differences stayed inside the noise (7 rounds), since a woken
 *    sleeper loses to a running barger anyway; in the lock microbenchmark
 *    (four threads on one range) 5-20 us did best (200-220 ns a pair
 *    against 260-310 at 0-2 us and 430 at 50 us).  The shim's calls hold
 *    a range for 1-3 us, well inside 10.
 *  - Hand-off 1 ms, as Go's starvation mode.  Swept over 0, 100 us,
 *    1 ms and 10 ms: 0 (hand off to every waiter at once) is the FIFO
 *    convoy again, 19x unlocked on four threads writing one block and
 *    16x on appends; 100 us still cost 30%; 1 ms and 10 ms were alike,
 *    and 1 ms keeps the worst waits the starvation tests see at 2-10 ms.
 *  - Backoff 4 us after a lost retry.  Lock microbenchmark, two threads
 *    on one range on two CPUs: starting at 250 ns the lock cost 2.7-3x a
 *    pthread_mutex pair, at 1 us 1.2-2x, at 4 us 0.9-1.1x.  4 us is also
 *    about the length of the shim's contended calls.
 *
 * Why not lock-free.  FreeBSD's kern_rangelock.c follows Kogan, Dice and
 * Issa, "Scalable Range Locks for Scalable Address Spaces and Beyond"
 * (EuroSys 2020): a lock-free sorted list of granted ranges with a single
 * CAS until the first conflict.  It wins when many cores hammer one lock
 * with tiny critical sections (page faults on an address space).  Here
 * every critical section is a read or write syscall of a microsecond or
 * more.  Measured: threads on disjoint ranges pay 100-600 ns a
 * pair in the microbenchmark against pthread_mutex's 50-190, depending
 * on whether the threads share a CPU; that gap is the queue's cache line
 * moving between CPUs, which a lock-free list's head CAS moves as well.
 * In I/O the disjoint tables (Lustre seed, random 4 KiB over one region)
 * run at 0.9-1.1 of unlocked within their noise, so at most a fraction of
 * 0.3 us on calls of 2-5 us was there to win.  We keep the simpler queue.
 *
 * Appenders.  An O_APPEND write locks [a lower bound of end of file,
 * infinity) in RS_RL_APPEND mode, which appenders share.  The kernel
 * already orders appends to one file among themselves (each takes the
 * inode lock and writes at the size it finds there: generic_write_checks
 * and the file system's write_iter), so appenders need to exclude only
 * readers, writers and truncaters of the tail, not each other; with a
 * write lock four appending threads would take turns in user space on
 * top of the kernel's turns, at 1.7-2.5x the time of unlocked appends.
 * Sharing is sound for any lower bound L of end of file taken while no
 * shrink can intervene (iolock.h, rs_ap_hint): the kernel writes at
 * end of file >= L, so every byte an appender writes lies in its
 * [L, infinity), and a conflicting request overlapping those bytes waits,
 * whichever appender wrote them.  A stream of appenders cannot starve a
 * reader of the tail: once starved (Fairness), it blocks new appenders
 * like any other conflicting request.
 *
 * Crashes.  A thread cannot die holding a range without its process
 * dying; across processes, the node lock table handles crashes.  After
 * fork() the child has only the forking thread, which held no range (it
 * was not inside the shim), so the child discards every queue with
 * rs_rangelock_reset().  Cancellation is disabled around locked calls
 * (iolock.c), so a waiter never leaves its node queued.
 */
#include "rangeshim/rangelock.h"

#include <stddef.h>

#include "futex.h"
#include "lockorder.h"
#include "rangelock_fast.h"
#include "rawsyscall.h"

/* The queue mutex, a leaf of the lock order (lockorder.h): nothing is
 * taken under it, and it is never held across a wait. */
static inline void qlock(struct rs_rangelock *rl)
{
	rs_lk_mutex_lock(RS_LK_RLQ, &rl->mtx);
}

static inline void qunlock(struct rs_rangelock *rl)
{
	rs_lk_mutex_unlock(RS_LK_RLQ, &rl->mtx);
}

/* The head of a queue that is not empty (it holds a waiter, or the
 * caller's node), read under the mutex: stable then, since the inline
 * path changes head only from or to NULL or a tagged value; read
 * atomically all the same, as the inline path CASes it. */
static inline struct rs_rl_node *qhead(const struct rs_rangelock *rl)
{
	return __atomic_load_n(&rl->head, __ATOMIC_RELAXED);
}

/*
 * Pre:  the queue mutex is held.
 * Post: head is NULL or an untagged queue whose tail is rl->tail; a lone
 *       inline holder found here is now that queue's only, granted node
 *       (its unlock CAS fails from now on, and it unlocks under the
 *       mutex).  Returns head.  Only an inline lock can change head
 *       after this, and only while it is NULL.
 */
static struct rs_rl_node *settle(struct rs_rangelock *rl)
{
	uintptr_t h = (uintptr_t)__atomic_load_n(&rl->head, __ATOMIC_ACQUIRE);

	RS_ASSERT(rs_lk_held(RS_LK_RLQ, &rl->mtx));

	while (h & RS_RL_ALONE) {
		struct rs_rl_node *n = (struct rs_rl_node *)(h & ~(uintptr_t)RS_RL_ALONE);

		/* Acquire: its start, end and mode were stored before its
		 * lock CAS released them.  The node stays alive: its holder
		 * can no longer unlock without this mutex. */
		if (__atomic_compare_exchange_n(&rl->head, (struct rs_rl_node **)&h, n, 0,
						__ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE)) {
			n->prev = NULL;
			n->next = NULL;
			rl->tail = n;
			return n;
		}
	}
	return (struct rs_rl_node *)h;
}

/* Internal flags in node->mode, only on nodes that are waiting. */
#define RL_MODE     7u
#define RL_WAITING  0x100u
#define RL_HANDOFF  0x200u

/* node->blocked: 0 granted; otherwise how the waiter waits. */
#define RL_SPIN  1u   /* spinning: a WOKEN store is enough */
#define RL_SLEEP 2u   /* may be in futex_wait: needs a futex wake */
#define RL_WOKEN 3u   /* the range was free at a release: try again */

#ifndef RS_RL_SPIN_NS
#define RS_RL_SPIN_NS 10000
#endif
#ifndef RS_RL_HANDOFF_NS
#define RS_RL_HANDOFF_NS 1000000
#endif
uint64_t rs_rl_spin_ns = RS_RL_SPIN_NS;
uint64_t rs_rl_handoff_ns = RS_RL_HANDOFF_NS;

/* Futex wakes a release owes, issued after the queue mutex is dropped. */
#define RL_MAXWAKE 8
struct wakes {
	int n;
	_Atomic uint32_t *w[RL_MAXWAKE];
};

static uint64_t clock_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void futex_wait_for(_Atomic uint32_t *addr, uint32_t val, uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000u), (long)(ns % 1000000000u) };
	int saved = errno;

	rs_sys(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, &ts, NULL, 0);
	errno = saved;
}

static inline int overlaps(const struct rs_rl_node *a, uint64_t start, uint64_t end)
{
	return a->start < end && start < a->end;
}

/* Overlapping, and not both readers or both appenders. */
static inline int conflicts(const struct rs_rl_node *a, uint64_t start,
			    uint64_t end, unsigned mode)
{
	return overlaps(a, start, end) &&
	       (((a->mode | mode) & RS_RL_WRITE) || ((a->mode ^ mode) & RL_MODE));
}
_Static_assert(RS_RL_READ == 1 && RS_RL_WRITE == 2 && RS_RL_APPEND == 4 && (RL_MODE & 0x300u) == 0,
	       "mode bits and waiting flags overlap");
_Static_assert(_Alignof(struct rs_rl_node) > RS_RL_ALONE, "no room for the lone-holder tag");

void rs_rangelock_init(struct rs_rangelock *rl)
{
	atomic_init(&rl->mtx, 0);
	rl->nwait = 0;
	rl->head = NULL;
	rl->tail = NULL;
}

void rs_rangelock_reset(struct rs_rangelock *rl)
{
	/* Stores only into a lock that is not free already: a forked
	 * child's store to a page it shares with its parent copies it. */
	if (atomic_load_explicit(&rl->mtx, memory_order_relaxed) ||
	    __atomic_load_n(&rl->nwait, __ATOMIC_RELAXED) ||
	    __atomic_load_n(&rl->head, __ATOMIC_RELAXED) ||
	    __atomic_load_n(&rl->tail, __ATOMIC_RELAXED))
		rs_rangelock_init(rl);
}

/*
 * Pre:  the queue mutex is held; head is the queue's head as settle
 *       returned it (not re-read here: an empty head may turn into an
 *       inline holder's tagged one at any moment, which only settle may
 *       look at), or, for a queue that is not empty, as it stands; self
 *       is NULL (a new request) or queued and waiting.
 * Post: returns 1 if [start, end) in mode may not be granted now: a
 *       granted node conflicts, or a starved waiter does that self must
 *       not overtake (any, unless self is starved too; then only earlier
 *       ones, so that starved waiters are served in arrival order).
 */
static int is_blocked(const struct rs_rl_node *head, const struct rs_rl_node *self,
		      uint64_t start, uint64_t end, unsigned mode)
{
	int before = 1, starved = self && (self->mode & RL_HANDOFF);

	/* Which queue's: the caller's, which passes its head only. */
	RS_ASSERT(rs_lk_held(RS_LK_RLQ, NULL));
	for (const struct rs_rl_node *q = head; q; q = q->next) {
		if (q == self) {
			before = 0;
			continue;
		}
		if (!conflicts(q, start, end, mode))
			continue;
		if (!(q->mode & RL_WAITING))
			return 1;
		if ((q->mode & RL_HANDOFF) && (!starved || before))
			return 1;
	}
	return 0;
}

/* An earlier waiter conflicting with w is already WOKEN: it goes first. */
static int woken_ahead(const struct rs_rangelock *rl, const struct rs_rl_node *w)
{
	for (const struct rs_rl_node *q = qhead(rl); q != w; q = q->next)
		if ((q->mode & RL_WAITING) && conflicts(q, w->start, w->end, w->mode) &&
		    atomic_load_explicit(&q->blocked, memory_order_relaxed) == RL_WOKEN)
			return 1;
	return 0;
}

static void owe_wake(struct wakes *wk, _Atomic uint32_t *word)
{
	if (wk->n < RL_MAXWAKE)
		wk->w[wk->n++] = word;
	else
		rs_futex_wake(word, 1);	/* still under the mutex: node alive */
}

static void pay_wakes(const struct wakes *wk)
{
	for (int i = 0; i < wk->n; i++)
		rs_futex_wake(wk->w[i], 1);
}

/*
 * The wake pass.
 * Pre:  the queue mutex is held.
 * Post: every waiting node that is_blocked() no longer blocks has been
 *       granted (if starved), or set WOKEN, or has an earlier conflicting
 *       WOKEN waiter; the futex wakes this needs are in wk.
 */
static void wake_pass(struct rs_rangelock *rl, struct wakes *wk)
{
	RS_ASSERT(rs_lk_held(RS_LK_RLQ, &rl->mtx));
	for (struct rs_rl_node *w = qhead(rl); w && rl->nwait; w = w->next) {
		uint32_t old;

		if (!(w->mode & RL_WAITING) ||
		    atomic_load_explicit(&w->blocked, memory_order_relaxed) == RL_WOKEN ||
		    is_blocked(qhead(rl), w, w->start, w->end, w->mode & RL_MODE))
			continue;
		if (w->mode & RL_HANDOFF) {
			/* Direct hand-off: granted before it even runs. */
			w->mode &= RL_MODE;
			rl->nwait--;
			rs_tsan_release(w);
			old = atomic_exchange_explicit(&w->blocked, 0, memory_order_release);
		} else {
			if (woken_ahead(rl, w))
				continue;
			old = atomic_exchange_explicit(&w->blocked, RL_WOKEN,
						       memory_order_release);
		}
		if (old == RL_SLEEP)
			owe_wake(wk, &w->blocked);
	}
}

/*
 * Pre:  the queue mutex is held, head settled.
 * Post: 0, node queued last; or -1 with nothing changed, when the queue
 *       was empty and an inline lock took head first (settle again and
 *       look again: there is a holder now).
 */
static int enqueue(struct rs_rangelock *rl, struct rs_rl_node *node,
		   uint64_t start, uint64_t end, unsigned mode)
{
	struct rs_rl_node *empty = NULL;

	RS_ASSERT(rs_lk_held(RS_LK_RLQ, &rl->mtx));
	node->start = start;
	node->end = end;
	node->mode = mode;
	node->next = NULL;
	node->prev = rl->tail;
	if (rl->tail)
		rl->tail->next = node;
	else if (!__atomic_compare_exchange_n(&rl->head, &empty, node, 0, __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED))
		return -1;
	rl->tail = node;
	return 0;
}

/* Queue a new request granted, if nothing blocks it: 0; or 1, blocked,
 * with the queue settled and not empty (so stable under the mutex).
 * Pre: the queue mutex is held. */
static int enqueue_granted(struct rs_rangelock *rl, struct rs_rl_node *node,
			   uint64_t start, uint64_t end, unsigned mode)
{
	RS_ASSERT(rs_lk_held(RS_LK_RLQ, &rl->mtx));
	do {
		if (is_blocked(settle(rl), NULL, start, end, mode))
			return 1;
	} while (enqueue(rl, node, start, end, mode) < 0);
	return 0;
}

/*
 * Pre:  node is queued and waiting; until is 0 (wait as long as it
 *       takes) or a clock_ns() deadline.
 * Post: node->blocked is 0 or RL_WOKEN, or the deadline has passed.
 */
static void await_signal(struct rs_rl_node *node, uint64_t until)
{
	uint64_t spin_end = clock_ns() + rs_rl_spin_ns, t;
	uint32_t v = RL_SPIN;

	/* Waiting under a queue mutex would keep its holders from waking us. */
	RS_ASSERT(!rs_lk_held(RS_LK_RLQ, NULL));

	/* Spin while the holder runs: its call is usually shorter than a
	 * sleep and a wake-up. */
	for (unsigned i = 1;; i++) {
		v = atomic_load_explicit(&node->blocked, memory_order_acquire);
		if (v != RL_SPIN)
			break;
		rs_cpu_relax();
		if (i % 32 == 0 && clock_ns() >= spin_end)
			break;
	}
	if (v == RL_SPIN && atomic_compare_exchange_strong_explicit(&node->blocked, &v,
			RL_SLEEP, memory_order_acquire, memory_order_acquire))
		v = RL_SLEEP;
	while (v == RL_SLEEP) {
		if (!until) {
			rs_futex_wait(&node->blocked, RL_SLEEP);
		} else {
			if ((t = clock_ns()) >= until)
				return;
			futex_wait_for(&node->blocked, RL_SLEEP, until - t);
		}
		v = atomic_load_explicit(&node->blocked, memory_order_acquire);
	}
}

#ifndef RL_BACKOFF_NS
#define RL_BACKOFF_NS 4000
#endif

static void backoff_for(uint64_t ns)
{
	uint64_t end = clock_ns() + ns;

	do {
		for (int i = 0; i < 16; i++)
			rs_cpu_relax();
	} while (clock_ns() < end);
}

/* Is node in rl's queue, or its lone inline holder?  For the Pre:
 * contracts; under the queue mutex. */
static inline int queued(const struct rs_rangelock *rl, const struct rs_rl_node *node)
{
	uintptr_t h = (uintptr_t)__atomic_load_n(&rl->head, __ATOMIC_ACQUIRE);

	if (h & RS_RL_ALONE)
		return (const struct rs_rl_node *)(h & ~(uintptr_t)RS_RL_ALONE) == node;
	for (const struct rs_rl_node *q = (const struct rs_rl_node *)h; q; q = q->next)
		if (q == node)
			return 1;
	return 0;
}

int rs_rangelock_lock(struct rs_rangelock *rl, struct rs_rl_node *node,
		      uint64_t start, uint64_t end, unsigned mode)
{
	uint64_t deadline, backoff = RL_BACKOFF_NS;
	struct wakes wk;

	RS_ASSERT(start < end);
	RS_ASSERT(mode == RS_RL_READ || mode == RS_RL_WRITE || mode == RS_RL_APPEND);
	qlock(rl);
	RS_ASSERT(!queued(rl, node));
	if (!enqueue_granted(rl, node, start, end, mode)) {
		qunlock(rl);
		return 0;
	}
	atomic_store_explicit(&node->blocked, RL_SPIN, memory_order_relaxed);
	/* Blocked, so the queue is not empty: this cannot fail. */
	(void)enqueue(rl, node, start, end, mode | RL_WAITING);
	rl->nwait++;
	qunlock(rl);

	node->since = clock_ns();
	/* When it is starved; deadline = 0 below: starved, wait untimed. */
	deadline = rs_rl_handoff_ns > UINT64_MAX - node->since ? UINT64_MAX :
		   node->since + rs_rl_handoff_ns;
	for (;;) {
		int starve;

		await_signal(node, deadline);
		if (atomic_load_explicit(&node->blocked, memory_order_acquire) == 0)
			break;	/* handed off */
		starve = deadline && clock_ns() >= deadline;
		wk.n = 0;
		qlock(rl);
		if (atomic_load_explicit(&node->blocked, memory_order_relaxed) == 0) {
			qunlock(rl);
			break;
		}
		if (!is_blocked(qhead(rl), node, start, end, mode)) {
			node->mode = mode;
			rl->nwait--;
			atomic_store_explicit(&node->blocked, 0, memory_order_relaxed);
			qunlock(rl);
			return 1;
		}
		if (starve) {
			node->mode |= RL_HANDOFF;
			deadline = 0;
		}
		if (atomic_exchange_explicit(&node->blocked, RL_SPIN,
					     memory_order_relaxed) == RL_WOKEN)
			wake_pass(rl, &wk);	/* we may have held others back */
		qunlock(rl);
		pay_wakes(&wk);
		/* Lost to a barger: back off before looking again, touching
		 * nothing shared, so that the running thread keeps the queue's
		 * cache lines (exponential backoff, Anderson 1990).  Not once
		 * starved: the range may be handed to us at any moment. */
		if (deadline && backoff < rs_rl_spin_ns) {
			backoff_for(backoff);
			backoff *= 2;
		}
	}
	/* Pairs with the release in wake_pass of the granting unlock. */
	rs_tsan_acquire(node);
	return 1;
}

int rs_rangelock_trylock(struct rs_rangelock *rl, struct rs_rl_node *node,
			 uint64_t start, uint64_t end, unsigned mode)
{
	int ok;

	RS_ASSERT(start < end);
	RS_ASSERT(mode == RS_RL_READ || mode == RS_RL_WRITE || mode == RS_RL_APPEND);
	qlock(rl);
	RS_ASSERT(!queued(rl, node));
	ok = !enqueue_granted(rl, node, start, end, mode);
	qunlock(rl);
	return ok ? 0 : -1;
}

/* Pre: rl->mtx held, node queued.  Post: node out of the queue, and the
 * waiters it held back passed to wk (woken by pay_wakes after the mutex). */
static void dequeue(struct rs_rangelock *rl, struct rs_rl_node *node, struct wakes *wk)
{
	RS_ASSERT(rs_lk_held(RS_LK_RLQ, &rl->mtx));
	if (node->prev)
		node->prev->next = node->next;
	else	/* Release: to the next inline lock, once it is NULL. */
		__atomic_store_n(&rl->head, node->next, __ATOMIC_RELEASE);
	if (node->next)
		node->next->prev = node->prev;
	else
		rl->tail = node->prev;
	if (rl->nwait)
		wake_pass(rl, wk);
}

/* Found by identity, never through the node's own links: a request
 * that was never queued has stale ones.  A waiting request (RL_WAITING;
 * woken is still waiting) leaves nwait with it. */
void rs_rangelock_forget(struct rs_rangelock *rl, struct rs_rl_node *node)
{
	struct wakes wk = { .n = 0 };
	struct rs_rl_node *w;

	qlock(rl);
	for (w = settle(rl); w && w != node; w = w->next)
		;
	if (w) {
		if ((node->mode & RL_WAITING) && rl->nwait)
			rl->nwait--;
		dequeue(rl, node, &wk);
	}
	qunlock(rl);
	pay_wakes(&wk);
}

void rs_rangelock_unlock(struct rs_rangelock *rl, struct rs_rl_node *node)
{
	struct wakes wk = { .n = 0 };

	qlock(rl);
	/* A node the inline path locked alone is queued from here on. */
	settle(rl);
	/* Pre: held, not waiting (a waiter's mode changes only under the
	 * mutex, which we hold). */
	RS_ASSERT(queued(rl, node) && !(node->mode & RL_WAITING));
	dequeue(rl, node, &wk);
	qunlock(rl);
	pay_wakes(&wk);
}
