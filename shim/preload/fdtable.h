/*
 * The fd table: which descriptors belong to coordinated files, and the
 * per-file state (the range lock) they share.
 *
 * Three levels, as the kernel has them:
 *   fd number --> description (struct rs_desc: file offset lock, O_APPEND)
 *             --> file (struct rs_file: keyed by st_dev/st_ino, range lock)
 * dup'd descriptors share a description; every open of the same file in
 * the process shares the file, so all of them share one range lock.
 *
 * Lookup is one load from an array indexed by fd.  Descriptions and files
 * live in arrays that are reserved once and never unmapped: an object is
 * recycled for another file but never freed, so a thread that read a stale
 * fd entry still points at valid memory, and it re-validates the entry
 * after locking (see iolock.c).  All changes go through one mutex on the
 * slow path (open, close, dup, first use of an inherited fd).
 */
#ifndef RS_FDTABLE_H
#define RS_FDTABLE_H

#include <stdatomic.h>
#include <stdint.h>

#include "futex.h"
#include "lockorder.h"
#include "rangelock_fast.h"
#include "rangeshim/rangelock.h"

/* fd entry values */
#define RS_FD_UNKNOWN 0u   /* never seen, or closed: classify on use */
#define RS_FD_PASS    1u   /* seen: not a coordinated regular file */
#define RS_FD_TRACKED 2u   /* (generation << 32) | (desc index << 2) | 2 */
/* Opened by a wrapped open, not classified yet: (generation << 32) |
 * (RS_DESC_* of its open flags << 2) | 3.  Classified at its first use
 * (rs_fdt_known), or from the application's own fstat of it
 * (rs_fdt_stat_seen), so that an open costs no system call of ours and a
 * descriptor used only for fstat, getdents or fchdir none at all. */
#define RS_FD_LAZY    3u
/* In a lazy entry: another process may have used the description since
 * the open (a fork, a spawn, a vfork or clone, a descriptor sent), so its
 * file offset may have moved from 0 (rs_fdt_lazy_shared). */
#define RS_FD_LAZY_SHARED (RS_DESC_FRESH << 3)

#define RS_DESC_APPEND 1u
#define RS_DESC_DIRECT 2u
/* Opened by this process and used by nobody since: the file offset is
 * still 0.  Set when a lazy entry nobody else can have used is
 * classified; cleared, under the offset lock, by the first call that
 * uses or moves the offset (an append at the offset moves it too:
 * pwritev2 at -1 with RWF_APPEND), by anything that lets another process share
 * the description (rs_fdt_lazy_shared), by F_SETFL and fdopen (stdio
 * then moves it unseen), and by a raw system call that may move it
 * (rs_fdt_moved).  A call at the offset that finds it set under the
 * offset lock starts at 0 without an lseek. */
#define RS_DESC_FRESH  4u

/* rs_file.whole (grants.h): the grant serves reads only; some
 * description of the file may be fresh (RS_DESC_FRESH); the word. */
#define RS_WHOLE_RDONLY 1ull
#define RS_WHOLE_FRESH  2ull
#define RS_WHOLE_WORD(h) ((h) & ~(RS_WHOLE_RDONLY | RS_WHOLE_FRESH))

/* Node grants this process caches for a file: words of grants.h. */
#define RS_NCACHE 4

/* A file's I/O on the inline path, for RANGESHIM_STATS' per-file totals
 * (filewaits.h): atomic adds, by whichever thread used the file. */
struct rs_fio {
	_Atomic uint64_t calls, bytes_read, bytes_written;
};

struct rs_file {
	struct rs_rangelock rl;
	_Atomic uint64_t dev;
	_Atomic uint64_t ino;
	uint32_t refs;          /* descriptions using it (table mutex) */
	uint32_t hnext;         /* hash chain or free list, index + 1 */
	_Atomic uint64_t grants[RS_NCACHE];   /* see grants.c */
	/* One of those words whose grant is [0, infinity), or none, and
	 * RS_WHOLE_* bits: a call at the file offset of a single-threaded
	 * process enters it without learning the offset (grants.h). */
	_Atomic uint64_t whole;
	/* The cache word of an APPEND grant of ours on [0, infinity), or 0:
	 * appends then lock from 0 (iolock.h, rs_fast_offset). */
	_Atomic uint64_t app_whole;
	/* A strided grant's word, or 0: tried only when the words above
	 * miss, so that the fast path pays nothing for it (grants.c). */
	_Atomic uint64_t strided;
	_Atomic uint32_t grants_mtx;
	_Atomic uint32_t acquire_mtx;         /* one acquisition at a time */
	/* Set for good once a call that is not an append waited for this
	 * file's range lock: appenders then lock only the tail, never the
	 * whole file (iolock.h, rs_fast_offset). */
	_Atomic uint32_t tail_only;
	/* Where the inline path counts this file's calls and bytes when
	 * stats are on: never NULL once the file is in the table (a shared
	 * record for files beyond the per-file table, or with stats off).
	 * Atomic because a recycled file is reused under a thread that still
	 * holds the old pointer (it may count one call to the new file). */
	_Atomic(struct rs_fio *) fio;
} __attribute__((aligned(64)));

struct rs_desc {
	_Atomic uint32_t pos;       /* the offset lock (rs_pos_lock, below) */
	_Atomic uint32_t flags;
	_Atomic uint32_t file;      /* index into the file array */
	uint32_t refs;              /* fds using it (table mutex) */
};

/* Clear d's RS_DESC_FRESH; seen is d->flags as the caller read it, so
 * that the common case (not fresh) writes nothing to a line that other
 * threads read. */
static inline __attribute__((always_inline)) void rs_desc_unfresh(struct rs_desc *d,
								   uint32_t seen)
{
	if (seen & RS_DESC_FRESH)
		atomic_fetch_and_explicit(&d->flags, ~RS_DESC_FRESH, memory_order_relaxed);
}

/* Take RS_DESC_FRESH: 1 if it was set (the offset is 0), and it is clear
 * now.  Pre: d's offset lock held, so that no call of ours moved the
 * offset since it was set. */
static inline int rs_desc_take_fresh(struct rs_desc *d)
{
	RS_ASSERT(rs_lk_held(RS_LK_POS, d));
	return (atomic_load_explicit(&d->flags, memory_order_relaxed) & RS_DESC_FRESH) &&
	       (atomic_fetch_and_explicit(&d->flags, ~RS_DESC_FRESH, memory_order_relaxed) &
		RS_DESC_FRESH);
}

/*
 * The offset lock of a description: exclusive for a call that uses or
 * moves the file offset (read and write at the offset, lseek, and the
 * shim's own dup2 and F_SETFL), shared among appenders.
 *
 * An append does not use the offset: the kernel writes it at end of file
 * and only then sets the offset past it.  So appenders need to exclude
 * the calls that find their range from the offset (an append between
 * such a call's lseek and its real call would move it off the range it
 * locked), not each other: the kernel already orders O_APPEND writes to
 * one description (the description's f_pos_lock, then the inode lock).
 * Were each appender to take the lock exclusively, the threads of a
 * logger that share one O_APPEND descriptor would take turns in user
 * space on top of the kernel's turns (design.md (d), "Appenders share
 * the offset lock").
 *
 * One word: RS_POS_HELD, held exclusively; RS_POS_SLEEP, a waiter may
 * sleep on the word; above them, the count of appenders inside, in units
 * of RS_POS_APP.  Every change is a read-modify-write of the one word, so
 * an exclusive holder and an appender cannot both miss each other.
 *  - Exclusive: a CAS from 0 to HELD, as the plain mutex's; else claim
 *    HELD as soon as it is clear (appenders may still be inside), and
 *    wait for the count to drain (rs_pos_lock_slow).  Unlock subtracts
 *    HELD, so that the counts of appenders that looked in meanwhile stay.
 *  - Appender: add RS_POS_APP; if HELD was set, take it back and wait
 *    until HELD clears, then try again (rs_pos_app_slow).  An exclusive
 *    caller claims HELD past any number of appenders, so a stream of
 *    appenders cannot starve it.
 * Ordering: held only before a call's node grants and range locks (the
 * order of iolock.c), so a holder waiting to drain appenders holds
 * nothing they wait for; an appender waits for HELD holding nothing.
 */
#define RS_POS_HELD  1u
#define RS_POS_SLEEP 2u
#define RS_POS_APP   4u

void rs_pos_lock_slow(struct rs_desc *d);
void rs_pos_app_slow(struct rs_desc *d);
void rs_pos_wake(struct rs_desc *d);

/* Each takes or lets go of the lock, and tells the lock order checks
 * of debug builds (lockorder.h); the word operations alone are the
 * _word ones, for rs_pos_app_slow, which steps out and in again while it
 * waits. */
static inline __attribute__((always_inline)) void rs_pos_lock(struct rs_desc *d)
{
	uint32_t c = 0;

	rs_lk_acquire(RS_LK_POS, d);
	if (__builtin_expect(atomic_compare_exchange_strong_explicit(&d->pos, &c, RS_POS_HELD,
			memory_order_acquire, memory_order_relaxed), 1))
		rs_tsan_acquire(&d->pos);
	else
		rs_pos_lock_slow(d);
}

static inline __attribute__((always_inline)) void rs_pos_unlock(struct rs_desc *d)
{
	rs_lk_release(RS_LK_POS, d);
	rs_tsan_release(&d->pos);
	if (__builtin_expect(atomic_fetch_sub_explicit(&d->pos, RS_POS_HELD, memory_order_release) !=
			     RS_POS_HELD, 0))
		rs_pos_wake(d);
}

/* Returns once the caller is inside as an appender. */
static inline __attribute__((always_inline)) void rs_pos_app_enter(struct rs_desc *d)
{
	rs_lk_acquire(RS_LK_POS, d);
	if (__builtin_expect(atomic_fetch_add_explicit(&d->pos, RS_POS_APP, memory_order_acquire) &
			     RS_POS_HELD, 0))
		rs_pos_app_slow(d);
	rs_tsan_acquire(&d->pos);
}

static inline __attribute__((always_inline)) void rs_pos_app_leave_word(struct rs_desc *d)
{
	rs_tsan_release(&d->pos);
	/* A sleeper may be an exclusive caller draining the count: it looks
	 * again, and sleeps again until the last appender is out. */
	if (__builtin_expect(atomic_fetch_sub_explicit(&d->pos, RS_POS_APP, memory_order_release) &
			     RS_POS_SLEEP, 0))
		rs_pos_wake(d);
}

static inline __attribute__((always_inline)) void rs_pos_app_leave(struct rs_desc *d)
{
	rs_lk_release(RS_LK_POS, d);
	rs_pos_app_leave_word(d);
}

/*
 * The shim's own range locks, tracked by the lock order checks of debug
 * builds (lockorder.h) here rather than in rangelock.c: a program that
 * uses the range lock directly may hold a range of its own across a
 * pwrite, which takes earlier levels, and that is not ours to flag.  In
 * every file of the library that takes a range lock (this header comes
 * before any such call), the four calls below are the tracked ones;
 * rs_rangelock_forget stays untracked: it withdraws a vfork child's
 * node, whose tracking the parent has already dropped (rs_lk_restore).
 * Release builds call the functions themselves.
 */
#ifdef RS_DEBUG
static inline __attribute__((always_inline)) int
rs_rl_lock_fast_tracked(struct rs_rangelock *rl, struct rs_rl_node *node, uint64_t start,
			uint64_t end, unsigned mode)
{
	rs_lk_acquire(RS_LK_RANGE, rl);
	return (rs_rangelock_lock_fast)(rl, node, start, end, mode);
}

static inline __attribute__((always_inline)) int
rs_rl_lock_tracked(struct rs_rangelock *rl, struct rs_rl_node *node, uint64_t start,
		   uint64_t end, unsigned mode)
{
	rs_lk_acquire(RS_LK_RANGE, rl);
	return (rs_rangelock_lock)(rl, node, start, end, mode);
}

static inline __attribute__((always_inline)) void
rs_rl_unlock_fast_tracked(struct rs_rangelock *rl, struct rs_rl_node *node)
{
	rs_lk_release(RS_LK_RANGE, rl);
	(rs_rangelock_unlock_fast)(rl, node);
}

static inline __attribute__((always_inline)) void
rs_rl_unlock_tracked(struct rs_rangelock *rl, struct rs_rl_node *node)
{
	rs_lk_release(RS_LK_RANGE, rl);
	(rs_rangelock_unlock)(rl, node);
}

#define rs_rangelock_lock_fast(...) rs_rl_lock_fast_tracked(__VA_ARGS__)
#define rs_rangelock_lock(...) rs_rl_lock_tracked(__VA_ARGS__)
#define rs_rangelock_unlock_fast(...) rs_rl_unlock_fast_tracked(__VA_ARGS__)
#define rs_rangelock_unlock(...) rs_rl_unlock_tracked(__VA_ARGS__)
#endif

/* A fixed size, reserved but not committed, so the bound is a constant. */
#define RS_FD_CAP (1u << 22)
#define rs_fd_cap RS_FD_CAP
extern _Atomic uint64_t *rs_fd_entries;
extern struct rs_desc *rs_descs;
extern struct rs_file *rs_files;

int rs_fdt_init(void);

/*
 * The shim's own descriptors (the node segment, the stats copy of stderr)
 * live at high numbers so that the application's numbering is unchanged,
 * and are kept out of the application's close/dup2/closefrom so that they
 * survive daemon-style "close everything" loops.
 */
#define RS_NPRIVATE 3
/* [0] the node segment, [1] the stats copy of stderr, [2] in a child
 * that shares its parent's descriptor table (clone with CLONE_FILES and
 * without CLONE_VM), the parent's segment descriptor: not ours to use or
 * to let the application close (grants.c, rs_grants_fork_child). */
#define RS_PRIVATE_PARENT 2
extern _Atomic int rs_private_fd[RS_NPRIVATE];
/* Make room for the high numbers while the process has one thread. */
void rs_fd_grow_table(void);
/* Duplicate fd to a high number (close-on-exec) and close fd; -1 on error. */
int rs_fd_hide(int fd);
/* The same duplicate, with fd left open: a copy of an application's fd
 * must never be closed again (that drops the process's POSIX locks on
 * its file). */
int rs_fd_hidden_copy(int fd);
static inline int rs_fd_private(int fd)
{
	for (int i = 0; i < RS_NPRIVATE; i++)
		if (fd >= 0 && atomic_load_explicit(&rs_private_fd[i], memory_order_relaxed) == fd)
			return 1;
	return 0;
}
/* Before the application takes number fd (dup2 onto it): move ours away. */
void rs_fd_evict(int fd);

static inline uint64_t rs_fdt_get(int fd)
{
	/* Beyond the table: "unknown", so that classification says so. */
	if (__builtin_expect((unsigned)fd >= rs_fd_cap, 0))
		return fd < 0 ? RS_FD_PASS : RS_FD_UNKNOWN;
	return atomic_load_explicit(&rs_fd_entries[fd], memory_order_acquire);
}

static inline uint32_t rs_fdt_desc_idx(uint64_t e)
{
	return (uint32_t)e >> 2;
}

static inline struct rs_desc *rs_fdt_desc(uint64_t e)
{
	return &rs_descs[rs_fdt_desc_idx(e)];
}

static inline struct rs_file *rs_fdt_file(uint32_t idx)
{
	return &rs_files[idx];
}

/* First use of an fd we did not see opened; returns the new entry, or
 * RS_FD_UNKNOWN when fd is not open (the real call reports the error). */
uint64_t rs_fdt_classify(int fd);
/* After a successful open/creat of fd with these open flags. */
void rs_fdt_opened(int fd, int flags);
/* fd's entry, classified if it was unknown or lazy: tracked, pass, or
 * RS_FD_UNKNOWN when fd is not open. */
static inline uint64_t rs_fdt_known(int fd)
{
	uint64_t e = rs_fdt_get(fd);

	if (e == RS_FD_UNKNOWN || (e & 3) == RS_FD_LAZY)
		e = rs_fdt_classify(fd);
	return e;
}
struct stat;
/* The application's fstat of fd returned st: classify a lazy fd from it. */
void rs_fdt_stat_seen(int fd, const struct stat *st);
/* A system call we do not lock (syscall(SYS_read, fd, ...)) may move
 * fd's file offset. */
void rs_fdt_moved(int fd);
/* Before another process may share our descriptions (fork, spawn, vfork,
 * clone, a descriptor sent over a socket): mark every lazy entry shared,
 * and no description fresh.
 * Lock-free: also from a signal handler inside the shim, or a vfork. */
void rs_fdt_lazy_shared(void);
/* After close(fd); old is the entry read before the real close. */
void rs_fdt_closed(int fd, uint64_t old);
/* After close_range/closefrom: forget every fd in [lo, hi]. */
void rs_fdt_closed_range(unsigned lo, unsigned hi);
/* From a signal handler that interrupted the shim on this thread (which
 * may hold the table mutex): reset fd's entry to unknown if it is still
 * old, without the mutex; the description's reference is leaked, which
 * only keeps one object from being recycled. */
void rs_fdt_forget(int fd, uint64_t old);
/* After dup/dup2/dup3/F_DUPFD made newfd a copy of oldfd. */
void rs_fdt_duped(int oldfd, int newfd);
/* After fd was re-pointed unseen (freopen's internal dup3) or closed:
 * classify it again, replacing its entry in one step. */
void rs_fdt_replaced(int fd);
/* After F_SETFL on fd: re-read the description's flags. */
void rs_fdt_setfl(int fd);
/* For truncate(path): the file object for (dev, ino), or -1. */
int64_t rs_fdt_find(uint64_t dev, uint64_t ino);

void rs_fdt_fork_prepare(void);
void rs_fdt_fork_parent(void);
void rs_fdt_fork_child(void);

/*
 * What the fd table tells the layers above it.  Declared here, below
 * them, so that fdtable.c includes neither grants.h nor filewaits.h.
 */
/* f just entered the fd table (fd: a descriptor of it, or -1): where its
 * inline-path counts go.  A record of its own when stats are on and one
 * is free, else the shared one (filewaits.c). */
struct rs_fio *rs_fw_file_io(struct rs_file *f, int fd);
/* Last description of f closed: give its grants back (grants.c). */
void rs_grant_file_closed(struct rs_file *f);

#endif
