/*
 * What each intercepted call locks, in one place (docs/design.md (d),
 * "What each call locks").  A wrapper describes its call as one or two targets, calls
 * rs_io_begin (or rs_io_at), makes the real call, and calls rs_io_end_fast
 * or rs_io_end_slow.
 */
#ifndef RS_IOLOCK_H
#define RS_IOLOCK_H

#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/single_threaded.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include "cluster.h"
#include "config.h"
#include "invariant.h"
#include "fdtable.h"
#include "filewaits.h"
#include "grants.h"
#include "state.h"
#include "rangelock_fast.h"
#include "rawsyscall.h"
#include "real.h"
#include "stats.h"

extern _Atomic uint64_t *rs_fd_entries RS_HIDDEN;
extern struct rs_desc *rs_descs RS_HIDDEN;
extern struct rs_file *rs_files RS_HIDDEN;
extern int rs_node_on RS_HIDDEN;
extern struct rs_segment *rs_node_seg RS_HIDDEN;

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
	struct rs_desc *fdesc;  /* the inline path holds its offset lock */
	uint64_t eof;           /* an inline append: end of file under the lock */
	int cancel_off;         /* we disabled cancellation; the old state */
	int ngrefs;
	struct rs_gref gref[2]; /* node grants entered, in (dev, ino) order */
	int entered;            /* this call raised rs_depth; -1: fail it with EIO */
	int nholds, npos;
	int pos_app;            /* pos[0] held as an appender's (shared) */
	struct rs_desc *pos[2];
	struct rs_hold hold[2];
};

/* Ready, coordinating, range mode, no stats: rs_io_at's inline path. */
extern int rs_fast RS_HIDDEN;

/*
 * A node grant that could not be entered because this node lost the
 * file's cluster lock: rs_grant_enter's slow path leaves ref->g NULL and
 * sets rs_cl_eio (cluster.h).  The call must then fail (EIO, the general
 * path's answer), never run without exclusion.  ref->g NULL alone is
 * not enough: node scope off enters nothing either, and the call runs.
 */
static inline __attribute__((always_inline)) int rs_grant_lost(const struct rs_gref *ref)
{
	return !ref->g && RS_LOAD(rs_cl_eio);
}

/* rs_grant_enter, and 1 if the call must fail because the cluster lock
 * is lost (nothing entered); 0 with ref entered, or ref->g NULL when
 * there is nothing to enter.  Only the slow path can lose it. */
static inline __attribute__((always_inline)) int
rs_grant_enter_lost(struct rs_file *f, uint64_t start, uint64_t end, unsigned rlmode,
		    struct rs_gref *ref)
{
	return __builtin_expect(rs_grant_enter(f, start, end, rlmode, ref), 0) &&
	       __builtin_expect(rs_grant_lost(ref), 0);
}

/* rs_depth while a vfork child of this thread runs (interpose.c, vfork):
 * above any nesting, so that the child's calls take the general path,
 * where rs_io_begin gives them a lock of their own (iolock.c, "vfork
 * children"). */
#define RS_DEPTH_VFORK (1 << 24)
/* The parent's side, after a vfork child has exited or exec'd: let go of
 * whatever a child killed inside a call left held.  Returns pid. */
int rs_vfork_parent(int pid);

/* Before pthread_cancel(t): from now on calls keep cancellation out of
 * their locked section, and t is not inside one (iolock.c). */
void rs_cancel_wait(unsigned long t);

/* Cleared for good before a thread glibc does not know of is made
 * (clone or syscall(SYS_clone) with CLONE_VM, any clone3: interpose.c). */
extern char rs_solo_ok RS_HIDDEN;

/*
 * This thread is the process's only thread, so no other thread can be
 * inside a call or enter one until this call returns: the inline path
 * may leave out the range lock and the offset lock, which only order the
 * threads of this process (the node grant, which orders processes, is
 * still entered).
 * Pre:  called at the start of a call, before anything is locked.
 * Post: 1 only if no other thread of the process exists now; none can
 *       exist before this thread returns from the call, because only
 *       this thread could make one.
 * Why it holds: glibc's pthread_create clears __libc_single_threaded
 * (its own copy and the executable's, for copy relocations) before the
 * clone, for its internal threads too (timer and mq_notify helpers, AIO),
 * and never sets it again; the write comes before the new thread, and
 * every later one, in happens-before, so any thread of a process that
 * has more than one reads 0.  Threads made without glibc clear
 * rs_solo_ok first, in the one place such a clone is made through us.
 * A clone(2) made by inline assembly, not through libc, is not seen
 * (limitations.md); nor would it be by glibc itself.
 */
static inline __attribute__((always_inline)) int rs_solo(void)
{
	return __libc_single_threaded && RS_LOAD(rs_solo_ok);
}

void rs_io_begin(struct rs_io *io, const struct rs_target *t, int n);
void rs_io_at_slow(struct rs_io *io, int fd, unsigned mode, int64_t off, uint64_t len);
void rs_io_end_slow(struct rs_io *io);
/* Stats on, before rs_io_end_slow: the call's files get one call each,
 * and r bytes read (rw 1), written (rw 2), or for a copy (3) read on the
 * source's and written on the destination's (filewaits.h). */
void rs_io_count(const struct rs_io *io, unsigned rw, long long r);

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
/* End of file by fstat, for an append, after statx (below) returned ret;
 * errno is left alone. */
int rs_append_size(int fd, uint64_t *size, long ret);
/* statx with a NULL path works here (cleared by rs_append_size). */
extern char rs_statx_ok RS_HIDDEN;

/*
 * End of file, for an append, by statx(fd, NULL, AT_EMPTY_PATH,
 * STATX_SIZE): the size as fstat gives it (the same getattr, with
 * AT_STATX_SYNC_AS_STAT), without fstat's cost.  Measured on tmpfs
 * (docs/benchmarks.md, "Appends"): fstat adds 0.65-0.9 us to a 0.7-1 us
 * 100-byte append, statx with a NULL path 0.45 us, a system call that
 * does nothing 0.2-0.25 us; fstat fills and converts the whole struct
 * stat (uid and gid mapping, times) and copies 144 bytes out.  A NULL
 * path needs Linux 6.11; older kernels fail it (EFAULT), as seccomp
 * filters may (ENOSYS, EPERM), and then rs_append_size turns statx off
 * and uses fstat.
 * lseek(fd, 0, SEEK_END), cheaper still, is not used: it moves the file
 * offset, which a write that then fails would leave moved (design.md (d),
 * "Appends").
 */
static inline __attribute__((always_inline)) int rs_fstat_size(int fd, uint64_t *size)
{
	long ret = -ENOSYS;

#if defined(RS_HAVE_RAW_SYSCALL)
	if (__builtin_expect(RS_LOAD(rs_statx_ok), 1)) {
		struct statx sx;

		/* A "success" that filled nothing (a seccomp filter's
		 * SECCOMP_RET_ERRNO of 0, a supervisor faking the call) must
		 * read as 0, not as whatever this stack slot held last, which
		 * may be a stale end of file above the real one (test_adv_proc,
		 * append_cut_statx0: torn reads).  One store. */
		sx.stx_size = 0;
		ret = rs_raw_syscall6(SYS_statx, fd, 0, AT_EMPTY_PATH, STATX_SIZE, (long)&sx, 0);
		/* stx_mask is not tested: the kernel zeroes what a file
		 * system leaves unfilled (vfs_getattr_nosec, cp_statx), the
		 * store above covers a call that never reached it, and a
		 * size of 0 is always on the safe side here (the first append
		 * locks from 0; the re-check finds end of file below its start
		 * and goes the general way). */
		if (__builtin_expect(ret == 0, 1)) {
			*size = sx.stx_size;
			return 0;
		}
	}
#endif
	return rs_append_size(fd, size, ret);
}

/* rs_fstat_size out of line, for an append without a hint of its own
 * (rare, once per file and thread): the wrappers keep one inline copy,
 * the re-check's. */
int rs_append_eof(int fd, uint64_t *size);

/*
 * Validate an append, under its locks, on both paths: end of file now,
 * in *eof; nonzero if it cannot be read or lies below start, where the
 * append's locks begin, and then the call lets go and plans again.  End
 * of file cannot shrink while the locks are held (every coordinated
 * shrink conflicts with them), only grow; but an uncoordinated shrink may
 * have moved it below start before they were granted (rs_ap_hint, below;
 * ZFS's RL_APPEND re-check).  Read the same way as the plan read it
 * (rs_fstat_size, rs_append_eof), so that a re-plan agrees with it.
 */
static inline __attribute__((always_inline)) int rs_append_moved(int fd, uint64_t start,
								 uint64_t *eof)
{
	return rs_fstat_size(fd, eof) < 0 || *eof < start;
}

/*
 * An appender's end-of-file hint: the end of file this thread's last
 * append to the file left (the start it locked plus what it wrote), a
 * guess at where the next append will land, so that it can lock
 * [L, infinity) without asking the kernel first.  Only a guess: it is
 * not trusted to be a lower bound of end of file.  Locking from L is sound only while
 * L <= end of file, and a shrink that no lock of ours sees (a truncation
 * by a process without the shim, by one in another table, or in process
 * scope by any other process; open(O_TRUNC), truncate(path) without the
 * file open and fopen("w") by any process, this one included) leaves
 * every thread's hint above end of file, for as many appends as it
 * trusted it: each would write below its lock, and readers would see
 * torn data (tests/test_adv_proc.c, append_cut_*).  So the append re-reads end of
 * file under its lock (rs_fstat_size: statx, or fstat), which sees every
 * shrink that finished before the lock was granted, and goes the general
 * way when a shrink moved it below L (ZFS's RL_APPEND re-check).
 */
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

/* Where this thread's stack is known to be mapped, for rs_iov_len_stack:
 * [lo - RS_IOV_ROOM, lo + span), from a frame of the careful path
 * (rs_iov_len) to the stack's top, found once per thread (iolock.c,
 * find_stack); span 0 until then.  The room below lo is as long as the
 * longest array read inline, so that only an array's end is checked. */
struct rs_stk {
	uintptr_t lo, span;
};
extern __thread struct rs_stk rs_stk __attribute__((tls_model("initial-exec")));
#define RS_IOV_FAST 64
#define RS_IOV_ROOM (RS_IOV_FAST * sizeof(struct iovec))

/*
 * The sum of an iovec array read directly, without a system call, when
 * the array lies in the part of the calling thread's own stack that is
 * known to be mapped: from a frame of the careful path (rs_iov_len) to
 * the stack's top.  Stack memory stays mapped as long as the thread
 * lives: a thread glibc made keeps its stack mapping, and the kernel
 * never shrinks the main thread's stack mapping.  So the read cannot
 * fault.  The top is the thread pointer for threads glibc made (the
 * thread descriptor sits at the top of their stack mapping) and
 * __libc_stack_end for the main thread, whose thread pointer lies below
 * its stack.  An array anywhere else (the heap, a coroutine stack,
 * sigaltstack), or of more than RS_IOV_FAST entries, is read with
 * process_vm_readv (rs_iov_len), so that a bad pointer still gives
 * EFAULT.  Returns 1 with the sum in *len, or 0 for an array to read the
 * careful way: one of those, one with an iov_len or a sum at or above
 * RS_MAX_RW (rs_iov_len saturates its sum; the caller clamps it), one of
 * empty buffers.
 */
static inline __attribute__((always_inline)) int
rs_iov_len_stack(const struct iovec *iov, int cnt, uint64_t *len)
{
	uint64_t sum = 0, any = 0;
	uintptr_t stop = (uintptr_t)iov + (uintptr_t)cnt * sizeof(*iov);
	const struct iovec *v = iov;

	/* 1 to RS_IOV_FAST entries, and one compare: the array's end, less
	 * lo, below span.  Then the end lies in [lo, lo + span), and the
	 * start at most RS_IOV_ROOM below lo, which the window holds too.
	 * An end below lo wraps the difference far above span; span 0,
	 * unknown, admits nothing (test_adv_proc, fast_iov_first). */
	if (!((unsigned)(cnt - 1) < RS_IOV_FAST &&
	      stop - RS_LOAD(rs_stk.lo) < RS_LOAD(rs_stk.span)))
		return 0;
	do {
		uint64_t n = v->iov_len;

		sum += n;
		any |= n;
	} while ((uintptr_t)++v != stop);
	/* One compare: every length below RS_MAX_RW (then a sum of at most
	 * RS_IOV_FAST of them cannot wrap), and sum - 1 below it too: a sum
	 * in [1, RS_MAX_RW], which needs no clamp (all 0 wraps sum - 1). */
	*len = sum;
	return (any | (sum - 1)) < RS_MAX_RW;
}

/*
 * The careful half of a single-threaded process's vector call whose
 * array is not read inline (an array off the stack or a long one), not
 * an append.  Alone, a grant that covers all of the file, or node scope
 * off, leaves no range to lock: no other thread exists, and no other
 * process can touch any of the file while we are inside the grant.  Then
 * the array is not read at all, and the kernel reads it as it would
 * without us (a bad pointer fails the real call, EFAULT, as a bad count
 * does, EINVAL).  Else it is read once, and the grant for its range is
 * entered here, asking for the whole file if this process is alone on
 * it (rs_grant_enter_iov), so that the next calls need not read theirs.
 * Returns 1 with ref entered (or ref->g 0, node scope off) covering all
 * the call may touch: the caller locks nothing more; -1 for the general
 * path (an array that cannot be read, an empty one, a cluster grant
 * lost), nothing entered.  mode: RS_RL_READ or RS_RL_WRITE.
 */
int rs_iov_solo(int fd, struct rs_file *f, unsigned mode, unsigned how, int64_t off,
		const struct iovec *iov, int cnt, struct rs_gref *ref);

/* What the inline path did (rs_io_fast_body); the wrapper acts on it. */
#define RS_FAST_PASS    (-1) /* not ours to lock: the real call alone */
#define RS_FAST_GENERAL 0    /* nothing held: the general path, from the start */
#define RS_FAST_LOCKED  1    /* locked: the real call, then rs_io_end_fast */
#define RS_FAST_APPEND  2    /* the same, for an append at end of file */
/* The lean copy only: a grant is still entered (io->gref[0], its file in
 * .file) and rs_depth raised; rs_fast_undo leaves it, then the general
 * path runs the call. */
#define RS_FAST_UNDO    3

/*
 * The lean copies whose rare calls are made out of line, whole: the
 * grant's leave after a failed re-check (RS_FAST_UNDO: one cold call
 * makes the leave and the general call, the wrapper's name_undo), and
 * the first count of a pass-through (left to the full copy, which counts
 * it).  Then no value of the call is needed after any call but the real
 * one, and gcc keeps the arguments in the registers they came in (2 to 4
 * fewer moves and saves per call, callgrind).  Only the copies at an
 * explicit offset: in write_solo the same change made gcc allocate worse
 * (3 more per write), and the copies at the file offset keep both calls.
 */
#define RS_LEAN_SPLIT(lean, how) ((lean) && !((how) & RS_HOW_CURSOR))

/*
 * The lock protocol, in the steps every call takes in this order: plan
 * the range (a vector call's length in rs_io_fast_lock, the file offset
 * in rs_fast_offset), the offset lock (rs_fast_offset), the node grant
 * and the range lock (rs_io_grant, rs_io_range), validate (rs_fast_valid),
 * and on failure release in reverse (rs_fast_release_pos).  The general
 * path (iolock.c, try_begin) takes the same steps for up to two files
 * and shares every one that decides something: the grant-enter and the
 * range lock above, the offset's freshness (rs_desc_take_fresh), the
 * append re-check (rs_append_moved) and the validation (rs_io_changed).
 * Here each step is always_inline and its flags (how, solo, lean,
 * append) are constants, so that every wrapper's copy keeps only its own
 * steps and the steps cost nothing as calls (tests/callgrind.sh).
 */

/* A step's outcome. */
#define RS_STEP_NEXT    0 /* done: go on to the next step */
#define RS_STEP_ENTERED 1 /* a grant entered that covers all the call may
			   * touch: go to the range lock (an append's, not
			   * solo) and validate */
#define RS_STEP_GENERAL 2 /* nothing of this step held: the general path */

/*
 * Enter the node grant for [start, end) of f, in ref: the one grant-enter
 * of every path (gmode: the range lock's mode, or RS_GRANT_APPEND).
 * lean: a copy that makes no call, which leaves a grant not cached to
 * the full copy.
 * Pre:  rs_depth raised (a revoker's wait, signal handlers' calls).
 * Post: 0 with ref->g entered, or ref->g NULL with nothing to enter (node
 *       scope off); 1 with nothing entered: the cluster lock is lost
 *       (the call must fail with EIO, rs_grant_lost), or, lean, the grant
 *       is not cached.
 */
static inline __attribute__((always_inline)) int
rs_io_grant(struct rs_file *f, uint64_t start, uint64_t end, unsigned gmode, struct rs_gref *ref,
	    const int lean)
{
	RS_ASSERT(RS_LOAD(rs_depth) > 0 && f && start < end);
	if (lean)
		return !__builtin_expect(rs_grant_enter_fast(f, start, end, gmode, ref), 1);
	return rs_grant_enter_lost(f, start, end, gmode, ref);
}

/*
 * Take f's range lock on [start, end) with node, waiting if it is busy;
 * the wait is recorded for f's stats (fd: a descriptor of f or -1, path
 * its name or NULL).  Used by every path.
 * Pre:  rs_depth raised; the node grant for the range entered (grants
 *       before range locks: iolock.c, "Order").
 * Post: the range is held by node; 1 if the call waited for it, else 0.
 */
static inline __attribute__((always_inline)) int
rs_io_range(struct rs_file *f, struct rs_rl_node *node, uint64_t start, uint64_t end,
	    unsigned mode, int fd, const char *path)
{
	RS_ASSERT(RS_LOAD(rs_depth) > 0 && f && node && start < end);
	if (__builtin_expect(rs_rangelock_lock_fast(&f->rl, node, start, end, mode), 0)) {
		RS_FILE_LOCK_WAIT(f, fd, path, node);
		/* Written once: the word shares its line with the file's
		 * lock words. */
		if (mode != RS_RL_APPEND &&
		    !atomic_load_explicit(&f->tail_only, memory_order_relaxed))
			atomic_store_explicit(&f->tail_only, 1, memory_order_relaxed);
		return 1;
	}
	return 0;
}

/* Release the offset lock rs_fast_offset took (none when solo: no other
 * thread to order). */
static inline __attribute__((always_inline)) void
rs_fast_release_pos(struct rs_desc *desc, const int solo, const int append)
{
	RS_ASSERT(solo || (atomic_load_explicit(&desc->pos, memory_order_relaxed) &
			   (append ? ~(RS_POS_HELD | RS_POS_SLEEP) : RS_POS_HELD)));
	if (!solo && append)
		rs_pos_app_leave(desc);
	else if (!solo)
		rs_pos_unlock(desc);
}

/*
 * Offset lock and plan, a call at the file offset: take the offset lock
 * (shared among appenders, who do not use the offset: fdtable.h,
 * rs_pos_lock), then learn where the call starts.  Nothing in this
 * process moves the offset while we hold the offset lock; lseek tells us
 * where the kernel will start.  (Nothing cheaper is safe: stdio,
 * dprintf, another process sharing the description move it unseen;
 * design.md (d).)
 * Pre:  rs_depth raised; desc and file the tracked entry's; nothing held.
 * Post: RS_STEP_NEXT with the offset lock held (not solo; io->fdesc set)
 *       and *off the start (an append's: 0 in process scope, or the hint
 *       or end of file, checked again under the locks by rs_fast_valid);
 *       RS_STEP_ENTERED with a whole-file grant entered in io->gref[0]:
 *       solo, or an append's from 0 (*off 0; the offset lock held, not
 *       solo, and io->fdesc set);
 *       RS_STEP_GENERAL with nothing held.
 */
static inline __attribute__((always_inline)) int
rs_fast_offset(struct rs_io *io, int fd, unsigned mode, int64_t *off, struct rs_desc *desc,
	       struct rs_file *file, const int solo, const int lean, const int append)
{
	RS_ASSERT(RS_LOAD(rs_depth) > 0 && desc && file && (!lean || solo));
	if (!solo && append)
		rs_pos_app_enter(desc);
	else if (!solo)
		rs_pos_lock(desc);
	if (append) {
		uint64_t size;

		/* From 0, where no other process can lose by it: in process
		 * scope (no grants), or inside a grant of ours on the whole
		 * file (RS_WHOLE_*, or an appender's), entered from its word
		 * here so that a stale one falls back to the tail instead of
		 * asking the table for the whole file.  The append lands at
		 * end of file, at or above 0 whatever shrank it, so nothing
		 * needs checking under the locks (rs_fast_valid).  With other
		 * threads, only until a call of another kind has waited for
		 * them (tail_only): a whole-file append lock would hold
		 * readers of the file off for as long as appenders come. */
		if (solo || !atomic_load_explicit(&file->tail_only, memory_order_relaxed)) {
			uint64_t h = atomic_load_explicit(&file->whole, memory_order_relaxed);
			uint64_t a = atomic_load_explicit(&file->app_whole, memory_order_relaxed);

			if (!__atomic_load_n(&rs_node_on, __ATOMIC_RELAXED)) {
				*off = 0;
				goto have_start;
			}
			if ((a || (RS_WHOLE_WORD(h) && !(h & RS_WHOLE_RDONLY))) &&
			    rs_grant_enter_whole(a ? a : h, RS_RL_APPEND, &io->gref[0])) {
				*off = 0;
				if (!solo)
					io->fdesc = desc;
				return RS_STEP_ENTERED;
			}
		}
		/* Our own hint (an end of file, so never negative), or end of
		 * file now (checked again under the locks). */
		if (__builtin_expect(RS_LOAD(rs_ap.file) == file, 1))
			*off = (int64_t)RS_LOAD(rs_ap.eof);
		else if (rs_append_eof(fd, &size) == 0)
			*off = (int64_t)size;
		else
			goto unlock_pos;
	} else {
		/* Alone, one load tells both whether a grant of ours covers
		 * the whole file, so that there is no range and no offset to
		 * learn, and whether our description may be fresh (grants.h,
		 * RS_WHOLE_*).  With other threads, the flags under the
		 * offset lock. */
		uint64_t h = solo ? atomic_load_explicit(&file->whole, memory_order_relaxed)
				  : atomic_load_explicit(&desc->flags, memory_order_relaxed) &
					    RS_DESC_FRESH;

		if (__builtin_expect(h != 0, 0)) {
			uint32_t dfl = atomic_load_explicit(&desc->flags, memory_order_relaxed);

			if (solo && rs_grant_enter_whole(h, mode, &io->gref[0])) {
				rs_desc_unfresh(desc, dfl);
				return RS_STEP_ENTERED;
			}
			if (dfl & RS_DESC_FRESH) {
				/* The lean copy may yet leave the call to the full
				 * one (a grant not cached, the first call on a
				 * file), which must find the flag still set: it
				 * has the rest of the call to make.  Lean is
				 * solo: no offset lock to let go of. */
				if (lean)
					return RS_STEP_GENERAL;
				/* Under the offset lock (or alone): nobody has
				 * used the offset since the open (fdtable.h). */
				rs_desc_unfresh(desc, dfl);
				*off = 0;
				goto have_off;
			}
			/* Ours is not fresh: stop looking (a fresh one of
			 * another description then pays an lseek). */
			if (solo && (h & RS_WHOLE_FRESH))
				atomic_fetch_and_explicit(&file->whole, ~RS_WHOLE_FRESH,
							  memory_order_relaxed);
		}
		*off = rs_lseek_cur(fd);
		if (__builtin_expect(*off < 0, 0))
			goto unlock_pos;
	have_off:;
	}
have_start:
	if (!solo)	/* the offset lock to let go of at the end */
		io->fdesc = desc;
	return RS_STEP_NEXT;
unlock_pos:
	rs_fast_release_pos(desc, solo, append);
	return RS_STEP_GENERAL;
}

/*
 * Has the call changed since it was planned?  Both paths' check, under
 * the locks.  now: fd's entry read again; e: as planned.  An equal entry
 * is the same incarnation of the description, so of its file too
 * (new_entry, fdtable.c): a dup2 onto fd that ran between the plan and
 * the locks shows here, and only here (interpose.c, dup_begin).  A write
 * also re-reads O_APPEND (want: RS_DESC_APPEND or 0, as planned), which
 * decided where it writes: an fcntl(F_SETFL) that changed it waited for
 * calls in flight and set it before we locked (interpose.c, setfl_begin).
 * Nonzero when changed.
 */
static inline __attribute__((always_inline)) int
rs_io_changed(uint64_t now, uint64_t e, struct rs_desc *desc, unsigned mode, uint32_t want)
{
	return (now != e) |
	       (mode == RS_RL_WRITE &&
		(atomic_load_explicit(&desc->flags, memory_order_relaxed) & RS_DESC_APPEND) != want);
}

/*
 * Validate, under the locks: is this still the call we planned?
 * An append: is start still at or below end of file (rs_append_moved)?
 * If not, the general path plans it again from end of file.  io->eof
 * keeps end of file for the next hint.
 * Every call re-checks the entry and O_APPEND (rs_io_changed), even when
 * the lock was free at once.
 * Alone at the file offset, the entry's address is found again from fd
 * (rs_fd_entries never moves once set, fdtable.c) rather than kept
 * across the lseek: one value fewer to keep there, which gcc would spill
 * in write_solo (tests/callgrind.sh counts it).
 * Pre:  the offset lock (at the file offset, not solo), the grant and
 *       the range lock (not solo) held for [start, ...).
 * Post: 1 if the call may go ahead as planned, 0 if it must let go and
 *       take the general path.  Nothing is taken or released.
 */
static inline __attribute__((always_inline)) int
rs_fast_valid(struct rs_io *io, int fd, unsigned mode, unsigned how, uint64_t start,
	      _Atomic uint64_t *ep, uint64_t e, struct rs_desc *desc, const int solo,
	      const int append)
{
	RS_ASSERT(RS_LOAD(rs_depth) > 0 && desc);
	/* From 0 there is nothing to check: end of file is at or above it
	 * (and 0 plus what the append writes a hint at or below it). */
	if (append && (start == 0 ? (io->eof = 0, 0)
				  : __builtin_expect(rs_append_moved(fd, start, &io->eof), 0)))
		return 0;
	return !__builtin_expect(rs_io_changed(atomic_load_explicit((solo && (how & RS_HOW_CURSOR))
									    ? &rs_fd_entries[fd] : ep,
								    memory_order_acquire),
					       e, desc, mode, append ? RS_DESC_APPEND : 0), 0);
}

/*
 * The inline path's lock protocol (rs_io_fast_body), once the entry and
 * the description are read: plan, offset lock, grant, range lock,
 * validate, and on failure release in reverse.  append is a constant in
 * each copy, so that a call pays for the append steps only when it is
 * one.
 * Pre:  rs_depth raised; e the tracked entry read from ep, desc and file
 *       its description and file; append: a write that found O_APPEND
 *       set in the description's flags (not append: found it clear).
 * Post: RS_FAST_LOCKED or RS_FAST_APPEND with everything held and
 *       recorded in io; or RS_FAST_GENERAL with nothing held and rs_depth
 *       back at 0; or, lean at an explicit offset, RS_FAST_UNDO with the
 *       grant still entered (io->gref[0], its file in .file) and rs_depth
 *       raised.
 */
static inline __attribute__((always_inline)) int
rs_io_fast_lock(struct rs_io *io, int fd, unsigned mode, unsigned how, int64_t off, uint64_t len,
		const struct iovec *iov, int cnt, const int solo, const int lean,
		const int append, _Atomic uint64_t *ep, uint64_t e, struct rs_desc *desc,
		struct rs_file *file)
{
	uint64_t start = 0, end = 0;
	/* Appenders share the tail with appenders, in both locks
	 * (rangelock.c and nodelock.c, "Appenders"); one mode for both
	 * locks: the values agree (below). */
	const unsigned lmode = append ? RS_RL_APPEND : mode;
	int s;

	RS_ASSERT(RS_LOAD(rs_depth) == 1 && desc && file && ep == &rs_fd_entries[fd]);
	RS_ASSERT(!append || (mode == RS_RL_WRITE && (how & RS_HOW_CURSOR)));
	/* Plan, a vector call: the array's length, read once for the lock
	 * (the kernel reads it again), inline from the stack when it can
	 * be.  The careful path's result goes through memory, so it has a
	 * variable of its own and len stays in a register.  (Kept here,
	 * not in a step of its own: gcc lays the threaded copies out one
	 * instruction worse then.) */
	if (how & RS_HOW_IOV) {
		if (__builtin_expect(!rs_iov_len_stack(iov, cnt, &len), 0)) {
			uint64_t n;

			if (lean)
				goto general;
			if (solo && !append) {
				/* Entered, or the general path (rs_iov_solo). */
				if (rs_iov_solo(fd, file, mode, how, off, iov, cnt, &io->gref[0]) < 0)
					goto general;
				/* The kernel moves the offset: not fresh now. */
				if (how & RS_HOW_CURSOR)
					rs_desc_unfresh(desc, atomic_load_explicit(
								      &desc->flags,
								      memory_order_relaxed));
				goto entered;
			}
			/* A failed read: the kernel fails the call; an empty
			 * array: nothing to lock.  The general path passes
			 * both through. */
			if (rs_iov_len(iov, cnt, &n) < 0 || n == 0)
				goto general;
			len = n > RS_MAX_RW ? RS_MAX_RW : n;
		}
	}
	if (how & RS_HOW_CURSOR) {
		s = rs_fast_offset(io, fd, mode, &off, desc, file, solo, lean, append);
		if (s == RS_STEP_ENTERED) {
			/* An append's grant from 0 (start is 0): its range
			 * lock, with other threads, from 0 too. */
			end = append ? RS_RANGE_EOF : 0;
			goto entered;
		}
		if (s == RS_STEP_GENERAL)
			goto general;
	}
	start = (uint64_t)off;
	/* off < 2^63 and the clamped len < 2^31: no overflow.  A vector
	 * call's len is clamped already. */
	end = append ? RS_RANGE_EOF
		     : start + ((how & RS_HOW_IOV) || len <= RS_MAX_RW ? len : RS_MAX_RW);
	/* Other processes first, then the other threads (grants.h).  Not
	 * cached (lean: the full copy enters it), or the cluster lock lost
	 * (the general path fails the call): nothing entered. */
	if (rs_io_grant(file, start, end, lmode, &io->gref[0], lean))
		goto unlock_pos;
entered:
	if (!solo && rs_io_range(file, &io->hold[0].node, start, end, lmode, fd, NULL))
		RS_COUNT(lock_waits, 1);
	if (__builtin_expect(!rs_fast_valid(io, fd, mode, how, start, ep, e, desc, solo, append),
			     0))
		goto undo;
	io->hold[0].file = file;
	return append ? RS_FAST_APPEND : RS_FAST_LOCKED;
undo:
	if (!solo)
		rs_rangelock_unlock(&file->rl, &io->hold[0].node);
	if (append)
		RS_STORE(rs_ap.file, NULL);
	if (RS_LEAN_SPLIT(lean, how)) {
		/* The leave may call (rs_grant_idle): rs_depth stays raised
		 * until it is done (rs_fast_undo), as here. */
		io->gref[0].file = file;
		return RS_FAST_UNDO;
	}
	rs_grant_leave(&io->gref[0], file);
unlock_pos:
	if (how & RS_HOW_CURSOR)
		rs_fast_release_pos(desc, solo, append);
general:
	RS_STORE(rs_depth, 0);
	return RS_FAST_GENERAL;
}

/*
 * The inline path of every data call on one fd: pread/pwrite (RS_HOW_OFF),
 * read/write (RS_HOW_CURSOR), the vector calls (| RS_HOW_IOV), and
 * writes on an O_APPEND description.  A tracked fd and no contention:
 * one load of the fd entry, two of the description, [the offset lock and
 * one lseek for the file offset], the node grant, the range lock, one
 * re-check of the entry.  Anything else, including a failed re-check,
 * returns RS_FAST_GENERAL with nothing held, and the wrapper goes the
 * general way (iolock.c); RS_FAST_PASS for a call not to lock at all.
 * how and solo are constants in every copy.
 */
static inline __attribute__((always_inline)) int
rs_io_fast_body(struct rs_io *io, int fd, unsigned mode, unsigned how, int64_t off, uint64_t len,
		const struct iovec *iov, int cnt, const int solo, const int lean)
{
	_Atomic uint64_t *ep;
	struct rs_desc *desc;
	uint64_t e;
	uint32_t fidx, fl = 0;
	int d;

	/* Count ourselves in before reading rs_fast: rs_cancel_wait()
	 * depends on that order (iolock.c).  From inside the shim (d != 0)
	 * the call passes through, without reading rs_fast, so only depth 0
	 * needs the store, and it stores a constant. */
	d = RS_LOAD(rs_depth);
	if (__builtin_expect(d == 0, 1))
		RS_STORE(rs_depth, 1);
	atomic_signal_fence(memory_order_seq_cst);
	/* One test for all the reasons to take the general path.  For an
	 * offset call, (off | (len - 1)) < 0: a negative offset or a zero
	 * length; a vector call's length is known only below. */
	if (__builtin_expect(d != 0 || !RS_LOAD(rs_fast) ||
			     (((how & RS_HOW_CURSOR) ? 0 : (int64_t)off) |
			      ((how & RS_HOW_IOV) ? 0 : (int64_t)(len - 1))) < 0, 0)) {
		RS_STORE(rs_depth, d);
		return rs_state == RS_DISABLED ? RS_FAST_PASS : RS_FAST_GENERAL;
	}
	/* A negative fd or one beyond the table: the general path says
	 * which (rs_fdt_get). */
	if (__builtin_expect((unsigned)fd >= RS_FD_CAP, 0))
		goto general;
	/* Kept for the re-check, which then costs one load. */
	ep = &rs_fd_entries[fd];
	e = atomic_load_explicit(ep, memory_order_acquire);
	if (__builtin_expect((e & 3) != RS_FD_TRACKED, 0)) {
		if (e != RS_FD_PASS)
			goto general;
		/* Counting may call (rs_count_slow): see RS_LEAN_SPLIT. */
		if (RS_LEAN_SPLIT(lean, how) && __builtin_expect(rs_stats_on, 0))
			goto general;
		RS_STORE(rs_depth, 0);
		if (!RS_LEAN_SPLIT(lean, how))
			RS_COUNT(passthrough, 1);
		return RS_FAST_PASS;
	}
	desc = rs_fdt_desc(e);
	fidx = atomic_load_explicit(&desc->file, memory_order_acquire);
	if (mode == RS_RL_WRITE) {
		fl = atomic_load_explicit(&desc->flags, memory_order_relaxed);
		if (__builtin_expect(fl & RS_DESC_APPEND, 0)) {
			/* pwrite on O_APPEND appends too (pwrite(2), BUGS): rare,
			 * left to the general path. */
			if (!(how & RS_HOW_CURSOR))
				goto general;
			return rs_io_fast_lock(io, fd, mode, how, off, len, iov, cnt, solo, lean,
					       1, ep, e, desc, rs_fdt_file(fidx));
		}
	}
	return rs_io_fast_lock(io, fd, mode, how, off, len, iov, cnt, solo, lean, 0, ep, e, desc,
			       rs_fdt_file(fidx));
general:
	RS_STORE(rs_depth, 0);
	return RS_FAST_GENERAL;
}

_Static_assert(RS_RL_APPEND == RS_GRANT_APPEND && RS_RL_READ == 1 && RS_RL_WRITE == 2,
	       "the range lock's modes are the node grant's call modes");

/*
 * After a call the inline path took (RS_FAST_LOCKED, or RS_FAST_APPEND:
 * append), with its result r; solo and append are the constants the
 * wrapper's copy began with.  Stats, when on, cost two adds to the
 * file's record (filewaits.h).
 */
static inline __attribute__((always_inline)) void
rs_io_end_fast(struct rs_io *io, unsigned mode, unsigned how, long long r, const int solo,
	       const int append)
{
	/* unlock saves errno itself on its (contended) wake path. */
	if (!solo)
		rs_rangelock_unlock_fast(&io->hold[0].file->rl, &io->hold[0].node);
	rs_grant_leave_at(&io->gref[0], &io->hold[0].file);
	if (how & RS_HOW_CURSOR) {
		if (append) {
			/* End of file now, unless the write failed. */
			RS_STORE(rs_ap.file, io->hold[0].file);
			RS_STORE(rs_ap.eof, io->eof + (r > 0 ? (uint64_t)r : 0));
		}
		rs_fast_release_pos(io->fdesc, solo, append);
	}
	RS_STORE(rs_depth, 0);	/* the fast path runs only from depth 0 */
	if (__builtin_expect(rs_stats_on, 0)) {
		/* The file's record, not this thread's block: the per-file
		 * totals need it, and io_calls and the bytes sum it
		 * (rs_fw_total).  An atomic add on a line the file's users
		 * share, as its range lock's is. */
		struct rs_fio *c = atomic_load_explicit(&io->hold[0].file->fio,
							memory_order_relaxed);

		atomic_fetch_add_explicit(&c->calls, 1, memory_order_relaxed);
		if (r > 0)
			atomic_fetch_add_explicit(mode == RS_RL_WRITE ? &c->bytes_written
								  : &c->bytes_read,
						  (uint64_t)r, memory_order_relaxed);
		if (append)
			RS_COUNT(appends, 1);
	}
}

/*
 * A whole intercepted call on its inline path, solo and lean constants:
 * begin, the real call (call, an expression of r's type), end.  Falls
 * through, with nothing held, when the call is the general path's
 * (RS_FAST_GENERAL); returns from the wrapper otherwise.  The locking
 * half hands back a value, not a field of io, so that each outcome is
 * its own straight path and nothing is re-read after the real call to
 * find which one it was.
 * lean: a copy that makes no call besides the real one, so that nothing
 * it keeps needs a register saved across a call (the prologue of the
 * wrapper is then a few instructions); it leaves the cases that would
 * call (an iovec array off the stack, a grant not cached, and, not solo,
 * a busy range lock) to the full copy, from the start.
 * undo: the expression that returns the call's result after
 * RS_FAST_UNDO (the wrapper's name_undo, with the arguments and
 * &io.gref[0]); used only by the lean copies.
 */
#define RS_FAST_CALL(io, r, solo, lean, fd, mode, how, off, len, iov, cnt, call, undo) \
	do {                                                                         \
		int k_ = rs_io_fast_body(&(io), fd, mode, how, off, len, iov, cnt,   \
					 solo, lean);                                \
		if (__builtin_expect(k_ == RS_FAST_LOCKED, 1)) {                     \
			r = call;                                                    \
			rs_io_end_fast(&(io), mode, how, (long long)r, solo, 0);     \
			return r;                                                    \
		}                                                                    \
		if ((mode) == RS_RL_WRITE && ((how) & RS_HOW_CURSOR) &&              \
		    k_ == RS_FAST_APPEND) {                                          \
			r = call;                                                    \
			rs_io_end_fast(&(io), mode, how, (long long)r, solo, 1);     \
			return r;                                                    \
		}                                                                    \
		if (k_ == RS_FAST_PASS)                                              \
			return call;                                                 \
		if (RS_LEAN_SPLIT(lean, how) && k_ == RS_FAST_UNDO)                  \
			return undo;                                                 \
	} while (0)

/* After RS_FAST_UNDO, in the wrapper's cold name_undo, which then makes
 * the general call. */
static inline __attribute__((always_inline)) void rs_fast_undo(struct rs_gref *ref)
{
	rs_grant_leave(ref, ref->file);
	RS_STORE(rs_depth, 0);
}

/*
 * The full inline path in two copies, one for a single-threaded process
 * (see rs_solo), each whole from begin to end: a threaded process pays
 * one test for the locks a single-threaded one leaves out, not one at
 * each lock and again after the call.  Falls through to the general
 * path.  undo: as RS_FAST_CALL's, unused here (no lean copy).
 */
#define RS_FAST(io, r, fd, mode, how, off, len, iov, cnt, call, undo)               \
	do {                                                                         \
		if (rs_solo())                                                       \
			RS_FAST_CALL(io, r, 1, 0, fd, mode, how, off, len, iov, cnt, call, call); \
		else                                                                 \
			RS_FAST_CALL(io, r, 0, 0, fd, mode, how, off, len, iov, cnt, call, call); \
	} while (0)

/* One fd, one range, not at an explicit offset: the general path. */
static inline __attribute__((always_inline)) void
rs_io_one(struct rs_io *io, int fd, unsigned mode,
			     enum rs_where where, int64_t off, uint64_t len)
{
	struct rs_target t = { fd, mode, where, 0, off, len, 0, 0 };

	rs_io_begin(io, &t, 1);
}

/* The vector calls with flags that move the range (pwritev2 with
 * RWF_APPEND or RWF_NOAPPEND): the general path.  The length is read
 * from the array only once the fd is known to be tracked (rs_iov_len). */
static inline void rs_io_iov(struct rs_io *io, int fd, unsigned mode, enum rs_where where,
			     int64_t off, const struct iovec *iov, int cnt, unsigned flags)
{
	struct rs_target t = { fd, mode, where, flags, off, 0, iov, cnt };

	rs_io_begin(io, &t, 1);
}

/* truncate(path, len): lock the file if this process has it open. */
void rs_io_begin_path(struct rs_io *io, const char *path, int64_t len);

#endif
