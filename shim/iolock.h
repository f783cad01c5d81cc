/*
 * What each intercepted call locks, in one place (BRIEF §2, "What each
 * call locks").  A wrapper describes its call as one or two targets, calls
 * rs_io_begin (or rs_io_at), makes the real call, and calls rs_io_end_fast
 * or rs_io_end_slow.
 */
#ifndef RS_IOLOCK_H
#define RS_IOLOCK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.h"
#include "fdtable.h"
#include "grants.h"
#include "rangelock_fast.h"
#include "stats.h"

enum rs_where {
	RS_AT_OFFSET,   /* [off, off + len) */
	RS_AT_CURSOR,   /* [file offset, + len): read, write, readv, writev */
	RS_FROM_OFFSET, /* [off, EOF): size may grow (fallocate) */
	RS_TRUNCATE,    /* [min(size, off), EOF): ftruncate to off */
	RS_POS_ONLY,    /* only the file offset lock: lseek */
};

/* rs_target.flags */
#define RS_T_APPEND   1u  /* RWF_APPEND: at end of file, whatever O_APPEND says */
#define RS_T_NOAPPEND 2u  /* RWF_NOAPPEND: at the offset, even with O_APPEND */
#define RS_T_WHOLE    4u  /* the kernel acts on all of len: no MAX_RW_COUNT cap */

struct rs_target {
	int fd;
	unsigned mode;          /* RS_RL_READ or RS_RL_WRITE */
	enum rs_where where;
	unsigned flags;         /* RS_T_* */
	int64_t off;
	uint64_t len;           /* or, with iov set, computed from it */
	const struct iovec *iov;
	int iovcnt;
};

struct iovec;
int rs_iov_len(const struct iovec *iov, int cnt, uint64_t *len);
/* *p read the way the kernel would, or -1 if it faults (the real call
 * then fails with EFAULT, and nothing is locked); 0 for NULL. */
int64_t rs_read_off(const off_t *p);

struct rs_hold {
	struct rs_rl_node node;
	struct rs_file *file;
};

struct rs_io {
	int fast;               /* taken by rs_io_at's fast path */
	int cancel_off;         /* we disabled cancellation; the old state */
	int ngrefs;
	struct rs_gref gref[2]; /* node grants entered, in (dev, ino) order */
	int entered;            /* this call raised rs_depth */
	int nholds, npos;
	struct rs_desc *pos[2];
	struct rs_hold hold[2];
};

enum rs_state { RS_UNINIT = 0, RS_INITIALIZING = 1, RS_READY = 2, RS_DISABLED = 3 };
extern _Atomic int rs_state;
/* Ready, coordinating, range mode, no stats: rs_io_at's inline path. */
extern int rs_fast;
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
/* Before pthread_cancel(t): from now on calls keep cancellation out of
 * their locked section, and t is not inside one (iolock.c). */
void rs_cancel_wait(unsigned long t);
/* The child side of fork and _Fork: forget every lock of other threads. */
void rs_after_fork_child(void);
void rs_fork_prepare(void);
void rs_fork_parent(void);
/* Our pid, refreshed in a forked child; a mismatch means a vfork child. */
extern long rs_pid;

static inline int rs_ready(void)
{
	int s = __atomic_load_n((int *)&rs_state, __ATOMIC_ACQUIRE);

	if (__builtin_expect(s == RS_READY, 1))
		return 1;
	if (s != RS_DISABLED)
		rs_init_slow();
	return __atomic_load_n((int *)&rs_state, __ATOMIC_ACQUIRE) == RS_READY;
}

void rs_io_begin(struct rs_io *io, const struct rs_target *t, int n);
void rs_io_at_slow(struct rs_io *io, int fd, unsigned mode, int64_t off, uint64_t len);
void rs_io_end_slow(struct rs_io *io);

/*
 * The read/write family never moves more than this in one call
 * (MAX_RW_COUNT): vfs_read/vfs_write and do_sendfile cap count, and
 * import_iovec caps an iovec's total (fs/read_write.c, lib/iov_iter.c).
 * Other calls act on all of their length: fallocate (vfs_fallocate in
 * fs/open.c) and copy_file_range through a file system's own method
 * (NFS, FUSE, Ceph: vfs_copy_file_range), so they must not be capped.
 */
#define RS_MAX_RW 0x7ffff000ull

/* [start, start + len) saturated at RS_RANGE_EOF. */
static inline uint64_t range_end_whole(uint64_t start, uint64_t len)
{
	return start > RS_RANGE_EOF - len ? RS_RANGE_EOF : start + len;
}

/* The same for one read or write: the kernel stops at RS_MAX_RW. */
static inline uint64_t range_end(uint64_t start, uint64_t len)
{
	return range_end_whole(start, len > RS_MAX_RW ? RS_MAX_RW : len);
}

/*
 * pread/pwrite and friends, [off, off + len) of one fd: the common case,
 * inlined into the wrappers so that it stays short.  A tracked fd, no
 * O_APPEND, no contention: one load of the fd entry, two of the
 * description, the range lock, one re-check of the entry.  Anything else,
 * including a failed re-check, goes the general way (iolock.c).
 */
static inline __attribute__((always_inline)) void
rs_io_at(struct rs_io *io, int fd, unsigned mode, int64_t off, uint64_t len)
{
	_Atomic uint64_t *ep;
	struct rs_desc *desc;
	struct rs_file *file;
	uint64_t e, start, end;
	uint32_t fidx;
	int d;

	/* Count ourselves in before reading rs_fast: rs_cancel_wait()
	 * depends on that order (iolock.c). */
	d = RS_LOAD(rs_depth);
	RS_STORE(rs_depth, d + 1);
	atomic_signal_fence(memory_order_seq_cst);
	/* One test for all the reasons to take the general path. */
	/* (off | (len - 1)) < 0: a negative offset or a zero length. */
	if (__builtin_expect(d != 0 || !RS_LOAD(rs_fast) ||
			     ((int64_t)off | (int64_t)(len - 1)) < 0, 0)) {
		RS_STORE(rs_depth, d);
		if (rs_state == RS_DISABLED) {
			io->fast = 0;
			io->entered = 0;
			return;
		}
		goto general;
	}
	/* A negative fd or one beyond the table: the general path says
	 * which (rs_fdt_get). */
	if (__builtin_expect((unsigned)fd >= RS_FD_CAP, 0)) {
		RS_STORE(rs_depth, 0);
		goto general;
	}
	/* Kept for the re-check below, which then costs one load. */
	ep = &rs_fd_entries[fd];
	e = atomic_load_explicit(ep, memory_order_acquire);
	if (__builtin_expect((e & 3) != RS_FD_TRACKED, 0)) {
		RS_STORE(rs_depth, 0);
		if (e != RS_FD_PASS)
			goto general;
		io->fast = 0;
		io->entered = 0;
		return;
	}
	desc = rs_fdt_desc(e);
	fidx = atomic_load_explicit(&desc->file, memory_order_acquire);
	if (__builtin_expect(mode == RS_RL_WRITE &&
			     (atomic_load_explicit(&desc->flags, memory_order_relaxed) &
			      RS_DESC_APPEND), 0)) {
		RS_STORE(rs_depth, 0);
		goto general;
	}
	file = rs_fdt_file(fidx);
	start = (uint64_t)off;
	/* off < 2^63 and the clamped len < 2^31: no overflow. */
	end = start + (len > RS_MAX_RW ? RS_MAX_RW : len);
	/* Other processes first, then the other threads (grants.h). */
	rs_grant_enter(file, start, end, mode, &io->gref[0]);
	rs_rangelock_lock_fast(&file->rl, &io->hold[0].node, start, end, mode);
	/* Re-checked even when the lock was free at once: a dup2 onto fd
	 * may have run to completion between our read of the entry and our
	 * lock, and only the entry tells (interpose.c, dup_begin).  The
	 * entry alone suffices: one equal to e is the same incarnation of
	 * the description, so of the file too (new_entry, fdtable.c). */
	if (__builtin_expect(atomic_load_explicit(ep, memory_order_acquire) != e, 0)) {
		rs_rangelock_unlock(&file->rl, &io->hold[0].node);
		rs_grant_leave(&io->gref[0], file);
		RS_STORE(rs_depth, 0);
		goto general;
	}
	io->hold[0].file = file;
	io->fast = 1;
	return;
general:
	rs_io_at_slow(io, fd, mode, off, len);
}

/* After a call rs_io_at took the fast way (io->fast). */
static inline __attribute__((always_inline)) void
rs_io_end_fast(struct rs_io *io)
{
	/* unlock saves errno itself on its (contended) wake path. */
	rs_rangelock_unlock_fast(&io->hold[0].file->rl, &io->hold[0].node);
	rs_grant_leave(&io->gref[0], io->hold[0].file);
	RS_STORE(rs_depth, 0);	/* the fast path runs only from depth 0 */
}


/* One fd, one range. */
static inline __attribute__((always_inline)) void
rs_io_one(struct rs_io *io, int fd, unsigned mode,
			     enum rs_where where, int64_t off, uint64_t len)
{
	struct rs_target t = { fd, mode, where, 0, off, len, 0, 0 };

	if (where == RS_AT_OFFSET)
		rs_io_at(io, fd, mode, off, len);
	else
		rs_io_begin(io, &t, 1);
}

/* The vector calls: the length is read from the array only once the fd
 * is known to be tracked (rs_iov_len). */
static inline void rs_io_iov(struct rs_io *io, int fd, unsigned mode, enum rs_where where,
			     int64_t off, const struct iovec *iov, int cnt, unsigned flags)
{
	struct rs_target t = { fd, mode, where, flags, off, 0, iov, cnt };

	rs_io_begin(io, &t, 1);
}

/* truncate(path, len): lock the file if this process has it open. */
void rs_io_begin_path(struct rs_io *io, const char *path, int64_t len);

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

#endif
