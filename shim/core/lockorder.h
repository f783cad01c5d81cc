/*
 * The lock hierarchy, next to the code: every lock of the library and of
 * the agent, one level each, in the order a thread may take them
 * (docs/design.md (h) says why each is where it is).  Debug and sanitizer
 * builds (RS_DEBUG, invariant.h) check it: each thread keeps the locks it
 * holds in thread-local memory, and taking a lock while holding one of a
 * later level fails an RS_ASSERT, as does letting go of a lock the thread
 * does not hold.  Release builds compile all of it out.  The idea is
 * FreeBSD's WITNESS (static lock classes in a fixed order, checked at
 * each acquisition; mtx_assert(MA_OWNED) for the Pre: contracts) and
 * Linux lockdep (the per-task stack of held locks, trylocks exempt from
 * the order); unlike lockdep the order is written here, not learnt.
 *
 * Locks of one level may nest (two offset locks, node grants of two
 * files, range locks of two files): their order within the level is by
 * address or by (st_dev, st_ino), which the call sites keep and this
 * does not check.  Taking a lock the thread already holds is a
 * self-deadlock for the mutexes, and is checked for them.
 *
 * Only the library's own uses are tracked.  The range lock is also an
 * API that programs call directly (rangeshim/rangelock.h): a program may
 * hold a range of its own and call pwrite, which takes an offset lock
 * and a node grant, earlier levels; so rangelock.c tracks only its queue
 * mutex, and the shim's range locks are tracked where the shim takes
 * them (fdtable.h).  Code that runs on a thread which may already hold
 * locks of another context sets them aside first (rs_lk_aside): a vfork
 * child runs on its parent's thread, and a fork handler may run inside a
 * signal handler that interrupted the shim.
 */
#ifndef RS_LOCKORDER_H
#define RS_LOCKORDER_H

#include <stdint.h>

#include "futex.h"
#include "invariant.h"

enum rs_lk_level {
	RS_LK_NONE = 0,
	/* The agent: its file table (agent.c, files_mu), held while an idle
	 * file is forgotten; a file's cluster cache mutex (clusterlock.c,
	 * c->mu), held across the drain of the node, which takes node
	 * grants. */
	RS_LK_AGENT_FILES,
	RS_LK_CLUSTER,
	/* (h) 1: offset locks (fdtable.h, rs_pos_lock). */
	RS_LK_POS,
	/* (h) 2: node grants a call is inside (grants.h), and what
	 * acquiring one takes: the file's acquire_mtx, a cluster pin. */
	RS_LK_GRANT,
	RS_LK_ACQUIRE,
	RS_LK_PIN,
	/* (h) 3: range locks of the shim's calls, dup2 and F_SETFL. */
	RS_LK_RANGE,
	/* Beside them, taken under any of the above and never across a
	 * wait for another process: the attach lock, the fd table mutex
	 * (dup2 holds a range lock there, and the last close of a file
	 * under it gives its grants back: so the grant cache mutex and the
	 * table lock come after it), cluster.c's pin list. */
	RS_LK_ATTACH,           /* grants.c, attach_mtx */
	RS_LK_FDTABLE,          /* fdtable.c, tbl_mtx */
	RS_LK_PFILES,           /* cluster.c, pfiles_mtx */
	RS_LK_GRANTS,           /* a file's grants_mtx (grants.c) */
	/* The node table lock: the process-local mutex, then the word in
	 * the segment (nodelock.c, "The table lock"). */
	RS_LK_NT_LOCAL,
	RS_LK_NT,
	/* Leaves: nothing is taken under them. */
	RS_LK_MOUNTS,           /* fdtable.c, mnt_mtx */
	RS_LK_DEVS,             /* cluster.c, devs_mtx */
	RS_LK_RLQ,              /* a range lock's queue mutex (rangelock.c) */
	RS_LK_NLEVELS
};

/* Does this thread hold a lock of level at obj (any, if obj is NULL; any
 * lock at all, for RS_LK_NONE)?  For RS_ASSERT only: not defined in
 * release builds, where RS_ASSERT never evaluates its expression. */
int rs_lk_held(enum rs_lk_level level, const void *obj);

#ifdef RS_DEBUG
/* Before taking the lock at obj, so that an order that could deadlock is
 * reported rather than hung in. */
#define rs_lk_acquire(level, obj) rs_lk_acquire_at(level, obj, 0, __FILE__, __LINE__, __func__)
/* A trylock that succeeded: recorded, but not checked against the order
 * (it cannot wait, so cannot close a cycle: lockdep's rule). */
#define rs_lk_acquire_try(level, obj) rs_lk_acquire_at(level, obj, 1, __FILE__, __LINE__, __func__)
/* Before letting go of it. */
#define rs_lk_release(level, obj) rs_lk_release_at(level, obj, __FILE__, __LINE__, __func__)
void rs_lk_acquire_at(enum rs_lk_level level, const void *obj, int try, const char *file,
		      int line, const char *func);
void rs_lk_release_at(enum rs_lk_level level, const void *obj, const char *file, int line,
		      const char *func);
/* Set aside what this thread holds: later checks ignore it until
 * rs_lk_restore(token), which also forgets whatever was taken since and
 * not let go (a vfork child killed inside a call). */
unsigned rs_lk_aside(void);
void rs_lk_restore(unsigned token);
#else
#define rs_lk_acquire(level, obj) ((void)sizeof(level), (void)sizeof(obj))
#define rs_lk_acquire_try(level, obj) ((void)sizeof(level), (void)sizeof(obj))
#define rs_lk_release(level, obj) ((void)sizeof(level), (void)sizeof(obj))
#define rs_lk_aside() 0u
#define rs_lk_restore(token) ((void)sizeof(token))
#endif

/* A futex mutex of the library (futex.h) at its level. */
static inline void rs_lk_mutex_lock(enum rs_lk_level level, _Atomic uint32_t *m)
{
	rs_lk_acquire(level, m);
	rs_mutex_lock(m);
}

/* Taken only if free: it cannot wait, so it is recorded, not ordered. */
static inline int rs_lk_mutex_trylock(enum rs_lk_level level, _Atomic uint32_t *m)
{
	if (!rs_mutex_trylock(m))
		return 0;
	rs_lk_acquire_try(level, m);
	return 1;
}

static inline void rs_lk_mutex_unlock(enum rs_lk_level level, _Atomic uint32_t *m)
{
	rs_lk_release(level, m);
	rs_mutex_unlock(m);
}

#endif
