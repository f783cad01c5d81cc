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
#include <errno.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include "cluster.h"
#include "config.h"
#include "fdtable.h"
#include "grants.h"
#include "rangelock_fast.h"
#include "rawsyscall.h"
#include "real.h"
#include "stats.h"

/* The library's own globals, which the inline paths read on every call:
 * declared hidden here, so that each is one PC-relative load rather than
 * a load of its address first (the symbols are hidden anyway:
 * -fvisibility=hidden). */
#define RS_HIDDEN __attribute__((visibility("hidden")))
extern _Atomic uint64_t *rs_fd_entries RS_HIDDEN;
extern struct rs_desc *rs_descs RS_HIDDEN;
extern struct rs_file *rs_files RS_HIDDEN;
extern int rs_node_on RS_HIDDEN;
extern struct rs_segment *rs_node_seg RS_HIDDEN;
extern struct rs_real rs_real RS_HIDDEN;
extern struct rs_config rs_cfg RS_HIDDEN;

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

int rs_iov_len(const struct iovec *iov, int cnt, uint64_t *len);
/* *p read the way the kernel would, or -1 if it faults (the real call
 * then fails with EFAULT, and nothing is locked); 0 for NULL. */
int64_t rs_read_off(const off_t *p);

struct rs_hold {
	struct rs_rl_node node;
	struct rs_file *file;
};

struct rs_io {
	int fast;               /* taken by the inline path: 1, or 2 for an append */
	struct rs_desc *fdesc;  /* the inline path holds its offset lock */
	uint64_t eof;           /* an inline append: end of file under the lock */
	int cancel_off;         /* we disabled cancellation; the old state */
	int ngrefs;
	struct rs_gref gref[2]; /* node grants entered, in (dev, ino) order */
	int entered;            /* this call raised rs_depth; -1: fail it with EIO */
	int nholds, npos;
	struct rs_desc *pos[2];
	struct rs_hold hold[2];
};

enum rs_state { RS_UNINIT = 0, RS_INITIALIZING = 1, RS_READY = 2, RS_DISABLED = 3 };
extern _Atomic int rs_state RS_HIDDEN;
/* Ready, coordinating, range mode, no stats: rs_io_at's inline path. */
extern int rs_fast RS_HIDDEN;
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

/* How the inline path finds its range (constants, so each wrapper's copy
 * keeps only its own steps). */
#define RS_HOW_OFF    0u  /* [off, off + len): pread, pwrite */
#define RS_HOW_CURSOR 1u  /* at the file offset, under the offset lock */
#define RS_HOW_IOV    2u  /* len is the sum of an iovec array */

void rs_io_fast_slow(struct rs_io *io, int fd, unsigned mode, unsigned how, int64_t off,
		     uint64_t len, const struct iovec *iov, int cnt);
/* End of file, for an append; errno is left alone. */
int rs_append_size(int fd, uint64_t *size);

static inline __attribute__((always_inline)) int rs_fstat_size(int fd, uint64_t *size)
{
#if defined(__x86_64__)
	struct stat st;
	long ret = rs_raw_syscall3(SYS_fstat, fd, (long)&st, 0);

	*size = (uint64_t)st.st_size;
	return ret == 0 ? 0 : -1;
#else
	return rs_append_size(fd, size);
#endif
}

/* The end of file this thread last appended at, and the file: a lower
 * bound of end of file for its next append, unless the file shrank,
 * which the re-check under the lock sees. */
struct rs_ap_hint {
	struct rs_file *file;
	uint64_t eof;
};
extern __thread struct rs_ap_hint rs_ap __attribute__((tls_model("initial-exec")));

/* lseek(fd, 0, SEEK_CUR), made here rather than through libc's wrapper:
 * it cannot fail on a tracked regular file except with EBADF (closed
 * under us), and then the general path runs the call again.  errno is
 * left alone either way. */
static inline __attribute__((always_inline)) int64_t rs_lseek_cur(int fd)
{
#if defined(__x86_64__)
	return rs_raw_syscall3(SYS_lseek, fd, 0, SEEK_CUR);
#else
	int saved = errno;
	int64_t r = rs_real.lseek(fd, 0, SEEK_CUR);

	errno = saved;
	return r;
#endif
}

/* glibc's record of where the main thread's stack begins (ld.so). */
extern void *__libc_stack_end;

/*
 * The sum of an iovec array read directly, without a system call, when
 * the array lies on the calling thread's own stack between the wrapper's
 * frame (lo) and the stack's top: that memory is mapped, so the read
 * cannot fault.  The top is the thread pointer for threads glibc made
 * (the thread descriptor sits at the top of their stack mapping) and
 * __libc_stack_end for the main thread, whose thread pointer lies below
 * its stack.  A stack switched to elsewhere (coroutines, sigaltstack) is
 * normally further than 64 MiB from both and fails the test; one mapped
 * within 64 MiB below a thread's stack would pass it, and a bad pointer
 * between the two would then fault here rather than give EFAULT
 * (limitations.md).  Anywhere else the
 * array is read with process_vm_readv (rs_iov_len), so that a bad pointer
 * still gives EFAULT.  Returns 0 for an array to read the careful way,
 * including any iov_len above RS_MAX_RW (the general path saturates).
 */
static inline __attribute__((always_inline)) int
rs_iov_len_stack(const void *lo, const struct iovec *iov, int cnt, uint64_t *len)
{
	uintptr_t a = (uintptr_t)iov, l = (uintptr_t)lo;
	uintptr_t tp = (uintptr_t)__builtin_thread_pointer();
	uintptr_t top = tp > l ? tp : (uintptr_t)__libc_stack_end;
	uintptr_t room = top - l, at = a - l;
	uint64_t sum = 0, any = 0;

	/* at < room: l <= a < top (unsigned); then the whole array below top. */
	if (!(room <= (64u << 20) && at < room && (unsigned)(cnt - 1) < 1024u &&
	      (uintptr_t)cnt * sizeof(*iov) <= room - at))
		return 0;
	for (int i = 0; i < cnt; i++) {
		sum += iov[i].iov_len;
		any |= iov[i].iov_len;
	}
	if (any > RS_MAX_RW)
		return 0;
	*len = sum;
	return 1;
}

/*
 * The inline path of every data call on one fd: pread/pwrite (RS_HOW_OFF),
 * read/write (RS_HOW_CURSOR), the vector calls (| RS_HOW_IOV), and
 * writes on an O_APPEND description.  A tracked fd and no contention:
 * one load of the fd entry, two of the description, [the offset lock and
 * one lseek for the file offset], the node grant, the range lock, one
 * re-check of the entry.  Anything else, including a failed re-check,
 * goes the general way (iolock.c).  how is a constant in every caller.
 */
static inline __attribute__((always_inline)) void
rs_io_fast(struct rs_io *io, int fd, unsigned mode, unsigned how, int64_t off, uint64_t len,
	   const struct iovec *iov, int cnt)
{
	_Atomic uint64_t *ep;
	struct rs_desc *desc;
	struct rs_file *file;
	uint64_t e, start, end;
	uint32_t fidx;
	int d, append = 0;

	/* Count ourselves in before reading rs_fast: rs_cancel_wait()
	 * depends on that order (iolock.c). */
	d = RS_LOAD(rs_depth);
	RS_STORE(rs_depth, d + 1);
	atomic_signal_fence(memory_order_seq_cst);
	/* One test for all the reasons to take the general path.  For an
	 * offset call, (off | (len - 1)) < 0: a negative offset or a zero
	 * length; a vector call's length is known only below. */
	if (__builtin_expect(d != 0 || !RS_LOAD(rs_fast) ||
			     (((how & RS_HOW_CURSOR) ? 0 : (int64_t)off) |
			      ((how & RS_HOW_IOV) ? 0 : (int64_t)(len - 1))) < 0, 0)) {
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
		RS_COUNT(passthrough, 1);
		io->fast = 0;
		io->entered = 0;
		return;
	}
	desc = rs_fdt_desc(e);
	fidx = atomic_load_explicit(&desc->file, memory_order_acquire);
	if (mode == RS_RL_WRITE &&
	    __builtin_expect(atomic_load_explicit(&desc->flags, memory_order_relaxed) &
			     RS_DESC_APPEND, 0)) {
		/* pwrite on O_APPEND appends too (pwrite(2), BUGS): rare,
		 * left to the general path. */
		if (!(how & RS_HOW_CURSOR)) {
			RS_STORE(rs_depth, 0);
			goto general;
		}
		append = 1;
	}
	file = rs_fdt_file(fidx);
	if (how & RS_HOW_IOV) {
		/* Once, for the lock; the kernel reads the array again. */
		if (!rs_iov_len_stack(io, iov, cnt, &len) && rs_iov_len(iov, cnt, &len) < 0)
			len = 0;	/* the kernel fails it: the general path passes it */
		if (__builtin_expect(len == 0, 0)) {
			RS_STORE(rs_depth, 0);
			goto general;
		}
	}
	if (how & RS_HOW_CURSOR) {
		/* Nothing in this process moves the offset while we hold the
		 * offset lock; lseek tells us where the kernel will start.
		 * (Nothing cheaper is safe: stdio, dprintf, another process
		 * sharing the description move it unseen; design.md (d).) */
		rs_mutex_lock(&desc->pos_mtx);
		if (append) {
			uint64_t size;

			if (__builtin_expect(RS_LOAD(rs_ap.file) == file, 1))
				off = (int64_t)RS_LOAD(rs_ap.eof);
			else if (rs_fstat_size(fd, &size) == 0)
				off = (int64_t)size;
			else
				off = -1;
		} else {
			off = rs_lseek_cur(fd);
		}
		if (__builtin_expect(off < 0, 0)) {
			rs_mutex_unlock(&desc->pos_mtx);
			RS_STORE(rs_depth, 0);
			goto general;
		}
		io->fdesc = desc;
	}
	start = (uint64_t)off;
	/* off < 2^63 and the clamped len < 2^31: no overflow. */
	end = append ? RS_RANGE_EOF : start + (len > RS_MAX_RW ? RS_MAX_RW : len);
	/* Other processes first, then the other threads (grants.h). */
	if (__builtin_expect(rs_grant_enter(file, start, end, append ? RS_GRANT_APPEND : mode,
					    &io->gref[0]), 0) &&
	    __builtin_expect(!io->gref[0].g && RS_LOAD(rs_cl_eio), 0)) {
		/* Cluster lock lost: the general path fails the call. */
		if (how & RS_HOW_CURSOR)
			rs_mutex_unlock(&desc->pos_mtx);
		RS_STORE(rs_depth, 0);
		goto general;
	}
	if (__builtin_expect(rs_rangelock_lock_fast(&file->rl, &io->hold[0].node, start, end, mode),
			     0))
		RS_COUNT(lock_waits, 1);
	if (append) {
		/* ZFS's RL_APPEND re-check: end of file under the lock.  It
		 * cannot grow past start now (every coordinated write there
		 * conflicts with us), but a truncation since the hint was
		 * taken may have moved it below: then the general path, which
		 * re-reads it before and after locking. */
		if (__builtin_expect(rs_fstat_size(fd, &io->eof) < 0 || io->eof < start, 0))
			goto undo;
	}
	/* Re-checked even when the lock was free at once: a dup2 onto fd
	 * may have run to completion between our read of the entry and our
	 * lock, and only the entry tells (interpose.c, dup_begin).  The
	 * entry alone suffices: one equal to e is the same incarnation of
	 * the description, so of the file too (new_entry, fdtable.c). */
	if (__builtin_expect(atomic_load_explicit(ep, memory_order_acquire) != e, 0))
		goto undo;
	io->hold[0].file = file;
	io->fast = 1 + append;
	return;
undo:
	rs_rangelock_unlock(&file->rl, &io->hold[0].node);
	rs_grant_leave(&io->gref[0], file);
	if (how & RS_HOW_CURSOR)
		rs_mutex_unlock(&desc->pos_mtx);
	if (append)
		RS_STORE(rs_ap.file, NULL);
	RS_STORE(rs_depth, 0);
general:
	rs_io_fast_slow(io, fd, mode, how, off, len, iov, cnt);
}

/* pread/pwrite and friends, [off, off + len) of one fd. */
static inline __attribute__((always_inline)) void
rs_io_at(struct rs_io *io, int fd, unsigned mode, int64_t off, uint64_t len)
{
	rs_io_fast(io, fd, mode, RS_HOW_OFF, off, len, NULL, 0);
}

/*
 * After a call the inline path took (io->fast), with its result r.
 * Stats, when on, cost a few adds to this thread's own counters.
 */
static inline __attribute__((always_inline)) void
rs_io_end_fast(struct rs_io *io, unsigned mode, unsigned how, long long r)
{
	/* unlock saves errno itself on its (contended) wake path. */
	rs_rangelock_unlock_fast(&io->hold[0].file->rl, &io->hold[0].node);
	rs_grant_leave(&io->gref[0], io->hold[0].file);
	if (how & RS_HOW_CURSOR) {
		if (mode == RS_RL_WRITE && io->fast == 2) {
			/* End of file now, unless the write failed. */
			RS_STORE(rs_ap.file, io->hold[0].file);
			RS_STORE(rs_ap.eof, io->eof + (r > 0 ? (uint64_t)r : 0));
		}
		rs_mutex_unlock(&io->fdesc->pos_mtx);
	}
	RS_STORE(rs_depth, 0);	/* the fast path runs only from depth 0 */
	if (__builtin_expect(rs_stats_on, 0)) {
		RS_COUNT(io_calls, 1);
		RS_COUNT_BYTES(mode == RS_RL_WRITE, r);
		if (mode == RS_RL_WRITE && (how & RS_HOW_CURSOR) && io->fast == 2)
			RS_COUNT(appends, 1);
	}
}

/* One fd, one range: the general path for all but pread/pwrite. */
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

/* The vector calls with flags (preadv2, pwritev2): the general path.  The
 * length is read from the array only once the fd is known to be tracked
 * (rs_iov_len). */
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
