/*
 * Turning a call into locks.
 *
 * The common case, a data call on one tracked fd, is inlined into its
 * wrapper (RS_FAST in iolock.h): one load of the fd entry, two of the
 * description, [the offset lock and an lseek, or an append's statx], the
 * node grant, one range lock, one re-check of the entry.  Everything
 * else (contention, end of file moved, two files, flags) is here, so
 * that the wrappers in interpose.c stay one line each.
 *
 * Order, to stay deadlock-free: a call first takes the offset locks of
 * the descriptions it uses at their file offset (lowest address first),
 * then its node grants (in (st_dev, st_ino) order), then its range locks
 * (lowest file address first); docs/design.md (h) lists every lock of
 * the library in that order.  Two ranges of one file are merged into one
 * lock on their hull: a starved waiter makes later arrivals queue behind
 * it, so taking two ranges of the same file one after the other can
 * deadlock against a request queued between them.
 *
 * fd reuse: the entry read at the start may be stale by the time the lock
 * is granted (another thread closed the fd and maybe opened another file
 * under the same number).  Objects are never freed (fdtable.h), so the
 * stale pointers are safe to use, and after locking we check that the fd
 * still maps to the same description and file; if not, we let go and
 * start over.  What the application does with an fd it closes under
 * itself is its own race, as without the shim.
 */
#include "iolock.h"

#include <errno.h>
#include <limits.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"
#include "config.h"
#include "futex.h"
#include "grants.h"
#include "log.h"
#include "nodelock.h"
#include "real.h"
#include "stats.h"
#include "rawsyscall.h"

__thread int rs_depth __attribute__((tls_model("initial-exec")));
int rs_fast;
char rs_solo_ok = 1;
#if defined(__x86_64__)
char rs_vm_shared;
#else
char rs_vm_shared = 1;	/* vfork is not wrapped here: always ask */
#endif
/* pthread_cancel has been called: locked sections disable cancellation. */
static _Atomic int cancel_mode;
/* This thread is in a locked section with cancellation disabled. */
static __thread int cancel_safe __attribute__((tls_model("initial-exec")));

/*
 * Thread cancellation.  The real read or write is a cancellation point;
 * a thread cancelled there would leave its range locks and grants held for
 * ever.  So once the application has called pthread_cancel, every call
 * takes the general path, which disables cancellation across its locked
 * section and acts on a pending request (pthread_testcancel) once it has
 * let go.  The calls already under way when cancel_mode is first set are
 * the race: rs_cancel_wait waits for the target to leave the shim.  Its
 * rs_depth is found from its thread pointer: on x86-64 glibc a pthread_t
 * is the thread pointer, and an initial-exec TLS variable sits at the same
 * offset from it in every thread.  The fast path raises rs_depth before it
 * reads rs_fast; membarrier makes that store visible before we read it.
 */
/* Reads another thread's TLS, which TSan takes for a race with its own
 * TLS set-up: it is the one deliberate cross-thread plain read here. */
__attribute__((no_sanitize("thread")))
void rs_cancel_wait(unsigned long t)
{
	long off = (char *)&rs_depth - (char *)pthread_self();
	long off_safe = (char *)&cancel_safe - (char *)pthread_self();
	volatile int *depth = (volatile int *)((char *)t + off);
	volatile int *safe = (volatile int *)((char *)t + off_safe);
	static _Atomic int registered;
	int saved = errno;
	uint64_t waited = 0;

	if (!atomic_exchange(&cancel_mode, 1)) {
		RS_STORE(rs_fast, 0);
		if (rs_sys(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0)
			atomic_store(&registered, 1);
	}
	if (atomic_load(&registered))
		rs_sys(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
	else
		usleep(20000);	/* no membarrier: let in-flight checks settle */
	if (t == (unsigned long)pthread_self())
		goto out;
	while (*depth > 0 && !*safe) {
		usleep(200);
		if ((waited += 200) == 2000000)
			rs_log(RS_LOG_WARN, "pthread_cancel: waiting for the target thread "
			       "to leave a locked call");
	}
out:
	errno = saved;
}

static void cancel_off(struct rs_io *io)
{
	int old = PTHREAD_CANCEL_DISABLE;

	io->cancel_off = 0;
	if (atomic_load_explicit(&cancel_mode, memory_order_relaxed) &&
	    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old) == 0) {
		io->cancel_off = old == PTHREAD_CANCEL_ENABLE ? 2 : 1;
		RS_STORE(cancel_safe, 1);
	}
}

static void cancel_on(struct rs_io *io)
{
	int old;

	if (!io->cancel_off)
		return;
	RS_STORE(cancel_safe, 0);
	pthread_setcancelstate(io->cancel_off == 2 ? PTHREAD_CANCEL_ENABLE : PTHREAD_CANCEL_DISABLE,
			       &old);
	if (io->cancel_off == 2)
		pthread_testcancel();
}


static int file_size(int fd, uint64_t *size)
{
	struct stat st;

	if (rs_fstat(fd, &st) < 0)
		return -1;
	*size = (uint64_t)st.st_size;
	return 0;
}

/*
 * Length of an iovec array, read the way the kernel would: through a
 * copy that reports EFAULT instead of faulting, so a bad pointer makes the
 * real call fail as it would without us.  Only data calls on tracked files
 * get here, after the fd was looked up.  Returns -1 for an array the
 * kernel rejects; a sum past 2^64 saturates (the lock runs to EOF).
 */
__thread struct rs_stk rs_stk __attribute__((tls_model("initial-exec")));

/* glibc's record of where the main thread's stack begins (ld.so). */
extern void *__libc_stack_end;

/*
 * process_vm_readv/writev on ourselves, named by the pid the kernel gives
 * now, never by rs_pid: a process made by a fork we did not see (a clone
 * by inline assembly), or one sharing our memory (vfork, clone(CLONE_VM)),
 * has our rs_pid, and through it would read another process's memory
 * (the parent's copy at the same address, or, once the parent is gone and
 * its pid reused, a stranger's), or take ESRCH for a refusal and copy an
 * unchecked pointer.  One getpid beside a call that is a system call
 * already.  -1 with errno set as the kernel says; the caller keeps errno.
 */
static long vm_copy(int to_user, const struct iovec *ours, unsigned long nours,
		    const struct iovec *theirs, unsigned long ntheirs)
{
	return rs_sys(to_user ? SYS_process_vm_writev : SYS_process_vm_readv, rs_raw_getpid(),
		      ours, nours, theirs, ntheirs, 0);
}

/* The sum of k lengths, saturated at UINT64_MAX.  Lengths below 2^53
 * (any real one) cannot overflow a plain sum of at most IOV_MAX of them,
 * so the common case is two operations an entry, in independent chains
 * the CPU runs side by side; only an array with a length at or above
 * 2^53 is summed again with a test at each step. */
static uint64_t iov_sum(const struct iovec *v, int k)
{
	uint64_t s0 = 0, s1 = 0, o0 = 0, o1 = 0, sum = 0;
	int i = 0;

	_Static_assert((uint64_t)IOV_MAX << 53 != 0 && ((uint64_t)IOV_MAX << 53) >> 53 == IOV_MAX,
		       "IOV_MAX lengths below 2^53 fit a plain sum");
	for (; i + 1 < k; i += 2) {
		s0 += v[i].iov_len;
		o0 |= v[i].iov_len;
		s1 += v[i + 1].iov_len;
		o1 |= v[i + 1].iov_len;
	}
	if (i < k) {
		s0 += v[i].iov_len;
		o0 |= v[i].iov_len;
	}
	if (__builtin_expect(((o0 | o1) >> 53) == 0, 1))
		return s0 + s1;
	for (i = 0; i < k; i++)
		sum = sum + v[i].iov_len < sum ? UINT64_MAX : sum + v[i].iov_len;
	return sum;
}

/* Every 4 KiB page of [l, top) readable, as one stack mapping is: a
 * frame on a coroutine's stack (makecontext) mapped within 64 MiB below
 * the thread's leaves the thread's guard page, or a hole, in between
 * (test_adv_proc, fast_iov_coroutine), and the coroutine's stack may be
 * unmapped later while the window would still claim it.  One byte a
 * page, read through process_vm_readv, which fails on a PROT_NONE or
 * unmapped page instead of faulting; refused (seccomp), it cannot tell,
 * and the frame is taken as before (on the thread's stack unless a
 * coroutine's lies within 64 MiB of its top: limitations.md).
 * The thread's own stack is readable from its bottom to the top, so a
 * page found unreadable lies below it, and so does every frame below
 * that page: stk_bad remembers the highest such page, and a coroutine's
 * later careful calls are refused without reading its stack again. */
static __thread uintptr_t stk_bad __attribute__((tls_model("initial-exec")));

static __attribute__((noinline)) int stack_readable(uintptr_t l, uintptr_t top)
{
	struct iovec remote[32];
	char sink[32];
	struct iovec local = { sink, 0 };
	uintptr_t p = l;

	while (p < top) {
		unsigned k = 0;
		int saved = errno, err;
		long r;

		for (; k < 32 && p < top; k++, p = (p | 4095) + 1)
			remote[k] = (struct iovec){ (void *)p, 1 };
		local.iov_len = k;
		r = vm_copy(0, &local, 1UL, remote, (unsigned long)k);
		err = errno;
		errno = saved;
		if (r != (long)k) {
			if (r < 0 && err != EFAULT)
				return 1;
			/* The first page not read in full: r bytes were. */
			stk_bad = (uintptr_t)remote[r < 0 ? 0 : r].iov_base;
			return 0;
		}
	}
	return 1;
}

/* [our frame, top of this thread's stack) for rs_iov_len_stack: mapped
 * for as long as the thread lives.  Our frame lies below the thread
 * pointer on a thread glibc made, above it on the main thread.  Left
 * unknown on a stack we cannot place: a top more than 64 MiB away (a
 * coroutine or signal stack, where the frame is not on the thread's own
 * stack).  The window starts at room, an array of our own frame as long
 * as the longest array read inline: stored as lo = its end, so that
 * rs_iov_len_stack checks only where an array ends.  Writing its first
 * byte makes sure it is mapped (the main thread's stack grows on that
 * fault); the calls below push their return addresses lower still.
 * noinline: the room is needed once per thread, not on every careful
 * read. */
static __attribute__((noinline)) void find_stack(void)
{
	volatile char room[RS_IOV_ROOM];
	uintptr_t l = (uintptr_t)room;
	uintptr_t tp = (uintptr_t)__builtin_thread_pointer();
	uintptr_t top = tp > l ? tp : (uintptr_t)__libc_stack_end;
	uintptr_t max = 64u << 20;
	struct rlimit rl;
	stack_t ss;

	room[0] = 0;
	/* The kernel places no mapping of its choosing within the stack
	 * size limit (plus a guard gap) below the main thread's stack top
	 * (mmap_base in mm/util.c), so a frame that close is on that stack,
	 * and everything from it to the top is the stack's own mapping. */
	/* A frame on the signal stack says nothing of the thread's own
	 * stack, and that memory may be unmapped later while the window
	 * would still claim it (test_adv_proc, fast_iov_altstack). */
	if (sigaltstack(NULL, &ss) == 0 && (ss.ss_flags & SS_ONSTACK))
		return;
	if (tp <= l && getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur < max)
		max = (uintptr_t)rl.rlim_cur;
	if (top > l + RS_IOV_ROOM && top - l <= max && l >= stk_bad && stack_readable(l, top)) {
		RS_STORE(rs_stk.lo, l + RS_IOV_ROOM);
		RS_STORE(rs_stk.span, top - l - RS_IOV_ROOM);
	}
}

/*
 * Arrays longer than a stack chunk are read whole into one of these, in
 * one system call (one per 64 entries would be 16 for a 1024-entry
 * pwritev).  Static, not on the stack: IOV_MAX entries are 16 KiB, more
 * than a small thread stack may have left.  A thread takes a free one or,
 * when all are in use (more threads in long vector calls at once, or a
 * slot left taken by a thread that a fork left behind), reads in chunks.
 */
#define IOV_POOL 4
#define IOV_CHUNK 64
static struct iovec iov_pool[IOV_POOL][IOV_MAX];
static _Atomic unsigned char iov_pool_busy[IOV_POOL];

int rs_iov_len(const struct iovec *iov, int cnt, uint64_t *len)
{
	struct iovec chunk[IOV_CHUNK], *buf = chunk;
	uint64_t sum = 0;
	int step = IOV_CHUNK, slot = -1, ret = 0;

	if (!RS_LOAD(rs_stk.span) ||
	    (uintptr_t)__builtin_frame_address(0) < RS_LOAD(rs_stk.lo))
		find_stack();	/* a first call, or one from deeper down */

	if (cnt < 0 || cnt > IOV_MAX)
		return -1;
	for (int i = 0; cnt > IOV_CHUNK && i < IOV_POOL; i++) {
		if (!atomic_load_explicit(&iov_pool_busy[i], memory_order_relaxed) &&
		    !atomic_exchange_explicit(&iov_pool_busy[i], 1, memory_order_acquire)) {
			slot = i;
			buf = iov_pool[i];
			step = IOV_MAX;
			break;
		}
	}
	for (int done = 0; done < cnt;) {
		int k = cnt - done < step ? cnt - done : step;
		struct iovec local = { buf, sizeof(buf[0]) * (size_t)k };
		struct iovec remote = { (void *)(iov + done), sizeof(buf[0]) * (size_t)k };
		int saved = errno, err;
		long r = vm_copy(0, &local, 1UL, &remote, 1UL);

		err = errno;
		errno = saved;
		if (r != (long)remote.iov_len) {
			if (r >= 0 || err == EFAULT) {
				ret = -1;
				break;
			}
			/* process_vm_readv refused (seccomp): trust the array. */
			for (int i = 0; i < k; i++)
				buf[i] = iov[done + i];
		}
		{
			uint64_t part = iov_sum(buf, k);

			sum = sum + part < sum ? UINT64_MAX : sum + part;
		}
		done += k;
	}
	if (slot >= 0)
		atomic_store_explicit(&iov_pool_busy[slot], 0, memory_order_release);
	*len = sum;
	return ret;
}

int rs_iov_solo(int fd, struct rs_file *f, unsigned mode, unsigned how, int64_t off,
		const struct iovec *iov, int cnt, struct rs_gref *ref)
{
	uint64_t len, start;

	if (rs_grant_enter_whole(atomic_load_explicit(&f->whole, memory_order_relaxed), mode, ref))
		return 1;
	if (!__atomic_load_n(&rs_node_seg, __ATOMIC_RELAXED) &&
	    !__atomic_load_n(&rs_node_on, __ATOMIC_RELAXED)) {
		ref->g = NULL;	/* node scope off: no other process to order */
		return 1;
	}
	if (rs_iov_len(iov, cnt, &len) < 0 || len == 0)
		return -1;
	/* Alone, nothing in this process moves the offset until we return. */
	start = (how & RS_HOW_CURSOR) ? (uint64_t)rs_lseek_cur(fd) : (uint64_t)off;
	if ((int64_t)start < 0)
		return -1;
	rs_grant_enter_iov(f, start, range_end(start, len), mode, ref);
	/* The cluster lock lost: the general path fails the call. */
	return rs_grant_lost(ref) ? -1 : 1;
}

static int file_key_less(struct rs_file *a, struct rs_file *b)
{
	uint64_t da = atomic_load(&a->dev), db = atomic_load(&b->dev);

	return da != db ? da < db : atomic_load(&a->ino) < atomic_load(&b->ino);
}

int rs_user_copy(void *dst, const void *src, size_t n, int to_user)
{
	struct iovec ours = { to_user ? (void *)src : dst, n };
	struct iovec theirs = { to_user ? dst : (void *)src, n };
	int saved = errno, err;
	long r = vm_copy(to_user, &ours, 1UL, &theirs, 1UL);

	err = errno;
	errno = saved;
	if (r == (long)n)
		return 0;
	if (r >= 0 || err == EFAULT)
		return -1;
	memcpy(dst, src, n);	/* refused (seccomp): trust the pointer */
	return 0;
}

int64_t rs_read_off(const off_t *p)
{
	int64_t v;

	if (!p)
		return 0;
	if (rs_user_copy(&v, p, sizeof v, 0) < 0)
		v = -1;
	return v;
}

struct plan {
	int fd;
	uint64_t entry;
	struct rs_desc *desc;
	uint32_t file_idx;
	struct rs_file *file;
	unsigned mode;
	enum rs_where where;
	int append;
	unsigned fl_append;     /* RS_DESC_APPEND as read when planning */
	uint64_t start, end;
};

static void leave_grants(struct rs_io *io)
{
	while (io->ngrefs > 0) {
		struct rs_gref *r = &io->gref[--io->ngrefs];

		rs_grant_leave(r, r->file);
	}
}

/* Let go of the range locks only (a re-plan keeps the offset locks). */
static void unlock_ranges(struct rs_io *io)
{
	while (io->nholds > 0) {
		struct rs_hold *h = &io->hold[--io->nholds];

		rs_rangelock_unlock(&h->file->rl, &h->node);
	}
}

/* Release, in the reverse of the order taken: range locks, grants,
 * offset locks. */
static void release(struct rs_io *io)
{
	unlock_ranges(io);
	leave_grants(io);
	if (io->pos_app) {
		rs_pos_app_leave(io->pos[--io->npos]);
		io->pos_app = 0;
	}
	while (io->npos > 0)
		rs_pos_unlock(io->pos[--io->npos]);
}

/* Where does the lock start?  -1: cannot tell (fd went bad): pass. */
static int compute(struct plan *p, const struct rs_target *t)
{
	uint64_t size;

	if (p->append) {
		/* An append at the file offset (pwritev2 at -1 with
		 * RWF_APPEND on a descriptor without O_APPEND) leaves the
		 * offset at end of file: no longer 0 (RS_DESC_FRESH).  We
		 * hold the offset lock. */
		if (p->where == RS_AT_CURSOR)
			rs_desc_take_fresh(p->desc);
		if (rs_append_eof(p->fd, &size) < 0)
			return -1;
		p->start = size;
		p->end = RS_RANGE_EOF;
	} else if (p->where == RS_TRUNCATE) {
		if (file_size(p->fd, &size) < 0)
			return -1;
		p->start = size < (uint64_t)t->off ? size : (uint64_t)t->off;
		p->end = RS_RANGE_EOF;
	} else if (p->where == RS_AT_CURSOR && rs_desc_take_fresh(p->desc)) {
		/* Under the offset lock: nobody has used the offset since
		 * the open (fdtable.h, RS_DESC_FRESH). */
		p->start = 0;
	} else if (p->where == RS_AT_CURSOR) {
		off_t cur = rs_real.lseek(p->fd, 0, SEEK_CUR);

		if (cur < 0)
			return -1;
		p->start = (uint64_t)cur;
	} else if (p->where == RS_FROM_OFFSET) {
		p->start = (uint64_t)t->off;
		p->end = RS_RANGE_EOF;
	} else {
		p->start = (uint64_t)t->off;
	}
	if (!p->append && (p->where == RS_AT_CURSOR || p->where == RS_AT_OFFSET))
		p->end = (t->flags & RS_T_WHOLE) ? range_end_whole(p->start, t->len)
						 : range_end(p->start, t->len);
	if (rs_cfg.lock == RS_LOCK_MUTEX) {
		p->start = 0;
		p->end = RS_RANGE_EOF;
	}
	return 0;
}

/* Under the lock, end of file may have moved below where we started (a
 * truncation finished between reading it and the grant); then start
 * over.  An append re-checks as the inline path does (rs_append_moved). */
static int still_covers(const struct plan *p, const struct rs_target *t)
{
	uint64_t size;

	if ((!p->append && p->where != RS_TRUNCATE) || rs_cfg.lock == RS_LOCK_MUTEX)
		return 1;
	if (p->append)
		return !rs_append_moved(p->fd, p->start, &size);
	if (file_size(p->fd, &size) < 0)
		return 1;
	return (size < (uint64_t)t->off ? size : (uint64_t)t->off) >= p->start;
}

/* Still the call planned (rs_io_changed, as on the inline path). */
static int valid(const struct plan *p)
{
	uint64_t now = rs_fdt_get(p->fd);

	RS_ASSERT(now != p->entry ||
		  atomic_load_explicit(&p->desc->file, memory_order_relaxed) == p->file_idx);
	return !rs_io_changed(now, p->entry, p->desc, p->mode, p->fl_append);
}

/* Nothing held: what the wrappers need to see for a call passed through. */
static void io_clear(struct rs_io *io)
{
	io->entered = 0;
	io->nholds = 0;
	io->npos = 0;
	io->pos_app = 0;
	io->ngrefs = 0;
}

/*
 * Plan: one plan per tracked target, read from its fd entry.
 * Pre:  rs_depth raised; nothing held; n is 1 or 2.
 * Post: the number of plans (0: nothing to lock), or -1 for a call to
 *       pass through (an iovec array the kernel rejects, or an empty
 *       one); nothing held either way.
 */
static int plan_targets(struct plan *p, const struct rs_target *t, int n)
{
	int np = 0;

	RS_ASSERT(RS_LOAD(rs_depth) > 0 && n >= 1 && n <= 2);
	for (int i = 0; i < n; i++) {
		uint64_t e = rs_fdt_known(t[i].fd);

		if ((e & 3) != RS_FD_TRACKED)
			continue;
		if (t[i].iov && rs_iov_len(t[i].iov, t[i].iovcnt, &((struct rs_target *)t)[i].len) < 0)
			return -1;	/* the kernel will say EFAULT or EINVAL */
		if (t[i].iov && t[i].len == 0 && !(t[i].flags & RS_T_APPEND))
			return -1;
		p[np].fd = t[i].fd;
		p[np].entry = e;
		p[np].desc = rs_fdt_desc(e);
		p[np].file_idx = atomic_load_explicit(&p[np].desc->file, memory_order_acquire);
		p[np].file = rs_fdt_file(p[np].file_idx);
		p[np].mode = t[i].mode;
		p[np].where = t[i].where;
		/* Two-file calls (copy_file_range, sendfile) refuse O_APPEND
		 * destinations themselves, so only single targets append. */
		/* Only data writes append; ftruncate and fallocate on an
		 * O_APPEND descriptor act where they say.  pwritev2's
		 * RWF_APPEND and RWF_NOAPPEND override O_APPEND for one call
		 * (kiocb_set_rw_flags in include/linux/fs.h); both at once
		 * is EINVAL before anything is written. */
		p[np].fl_append = atomic_load_explicit(&p[np].desc->flags, memory_order_relaxed) &
				  RS_DESC_APPEND;
		p[np].append = n == 1 && t[i].mode == RS_RL_WRITE &&
			(t[i].where == RS_AT_OFFSET || t[i].where == RS_AT_CURSOR) &&
			((t[i].flags & RS_T_APPEND) ||
			 (!(t[i].flags & RS_T_NOAPPEND) && p[np].fl_append));
		np++;
	}
	return np;
}

/*
 * Offset locks, lowest address first, of the plans at the file offset;
 * an append's (always a call's only target) shared with other appenders,
 * as on the inline path (fdtable.h, rs_pos_lock).
 * Pre:  rs_depth raised; nothing held (io cleared).
 * Post: io->pos[0 .. npos) held, in address order; io->pos_app set when
 *       the one held is an appender's.
 */
static void lock_offsets(struct rs_io *io, const struct plan *p, int np)
{
	RS_ASSERT(RS_LOAD(rs_depth) > 0 && io->npos == 0 && io->nholds == 0 && io->ngrefs == 0);
	if (np == 1 && p[0].append) {
		io->pos[io->npos++] = p[0].desc;
		io->pos_app = 1;
		rs_pos_app_enter(p[0].desc);
		return;
	}
	for (int i = 0; i < np; i++) {
		RS_ASSERT(!p[i].append);	/* an append is a call's only target */
		if (p[i].where != RS_AT_CURSOR && p[i].where != RS_POS_ONLY)
			continue;
		if (io->npos == 1 && io->pos[0] == p[i].desc)
			continue;
		io->pos[io->npos++] = p[i].desc;
	}
	if (io->npos == 2 && io->pos[0] > io->pos[1]) {
		struct rs_desc *tmp = io->pos[0];

		io->pos[0] = io->pos[1];
		io->pos[1] = tmp;
	}
	for (int i = 0; i < io->npos; i++)
		rs_pos_lock(io->pos[i]);
}

/* Two plans on one file become one on their hull (see "Order" above);
 * two files are put in address order, as the range locks are taken. */
static void order_plans(struct plan *p, int *np)
{
	if (*np == 2 && p[0].file == p[1].file) {
		p[0].start = p[0].start < p[1].start ? p[0].start : p[1].start;
		p[0].end = p[0].end > p[1].end ? p[0].end : p[1].end;
		p[0].mode = RS_RL_WRITE;
		*np = 1;
	} else if (*np == 2 && p[0].file > p[1].file) {
		struct plan tmp = p[0];

		p[0] = p[1];
		p[1] = tmp;
	}
}

/*
 * The general path's grant-enter, rs_io_grant, recording the grant in io
 * for release (the inline path leaves ref->file unset; leave_grants
 * needs it).
 * Pre:  rs_depth raised; io->ngrefs < 2.
 * Post: 0 with the grant entered and counted in io (or nothing to enter:
 *       node scope off); 1 with nothing entered: the cluster lock is lost.
 */
static int enter_grant(struct rs_io *io, struct rs_file *f, uint64_t start, uint64_t end,
		       unsigned gmode)
{
	struct rs_gref *ref = &io->gref[io->ngrefs];

	RS_ASSERT(io->ngrefs < 2);
	if (rs_io_grant(f, start, end, gmode, ref, 0))
		return 1;
	ref->file = f;
	if (ref->g)
		io->ngrefs++;
	return 0;
}

/*
 * Grants, then range locks, for the plans as computed.
 * Pre:  rs_depth raised; the plans' offset locks held; no grant or range
 *       lock held; plans ordered (order_plans).
 * Post: 0 with every plan's grant (in (dev, ino) order, the same in every
 *       process) and range lock (in address order) held, *waited raised
 *       by the range locks waited for; 1 with nothing but the offset
 *       locks held: the cluster lock is lost.
 */
static int lock_ranges(struct rs_io *io, const struct plan *p, int np, int *waited)
{
	RS_ASSERT(RS_LOAD(rs_depth) > 0 && io->nholds == 0 && io->ngrefs == 0);
	for (int k = 0; k < np; k++) {
		int i = np == 2 && file_key_less(p[1].file, p[0].file) ? 1 - k : k;

		/* Appenders of different processes share the tail
		 * (RS_G_APPEND); the range lock below stays a write. */
		if (enter_grant(io, p[i].file, p[i].start, p[i].end,
				p[i].append ? RS_GRANT_APPEND : p[i].mode)) {
			leave_grants(io);
			return 1;
		}
	}
	for (int i = 0; i < np; i++) {
		struct rs_hold *h = &io->hold[io->nholds];
		/* Appenders share the tail (rangelock.c, "Appenders"), but not
		 * under RANGESHIM_LOCK=mutex: one lock a file. */
		unsigned m = p[i].append && rs_cfg.lock != RS_LOCK_MUTEX ? RS_RL_APPEND : p[i].mode;

		h->file = p[i].file;
		*waited += rs_io_range(h->file, &h->node, p[i].start, p[i].end, m, p[i].fd, NULL);
		io->nholds++;
	}
	return 0;
}

/*
 * Plan, lock and validate one call: the general path's lock protocol.
 * Pre:  rs_depth raised; nothing held (io cleared); errno saved by the
 *       caller (our lseek and fstat calls may set it).
 * Post: 1 with everything held and recorded in io; 0 to pass the call
 *       through, 2 to fail it (cluster lock lost: EIO), -1 to start over,
 *       each with nothing held.
 */
static int try_begin(struct rs_io *io, const struct rs_target *t, int n)
{
	/* q: the plans as made, one per target in the targets' order, which
	 * are validated; p: the same, computed and ordered (order_plans may
	 * swap them, or merge two on one file into their hull), which are
	 * locked. */
	struct plan p[2], q[2];
	int np, nq, waited = 0;

	RS_ASSERT(RS_LOAD(rs_depth) > 0 && io->npos == 0 && io->nholds == 0 && io->ngrefs == 0);
	nq = np = plan_targets(p, t, n);
	if (np <= 0)
		return 0;
	memcpy(q, p, sizeof(struct plan) * (size_t)nq);
	lock_offsets(io, p, np);
	if (t[0].where == RS_POS_ONLY) {
		/* lseek may move the offset (compute clears it for the
		 * other calls at the offset). */
		rs_desc_take_fresh(p[0].desc);
		if (!valid(&p[0])) {
			release(io);
			return -1;
		}
		return 1;
	}
	for (;;) {
		int covers = 1;

		for (int i = 0; i < np; i++) {
			if (compute(&p[i], &t[i]) < 0) {
				release(io);
				return 0;
			}
		}
		order_plans(p, &np);
		if (lock_ranges(io, p, np, &waited)) {
			release(io);
			return 2;	/* cluster lock lost: EIO */
		}
		for (int i = 0; i < np; i++)
			covers &= still_covers(&p[i], &t[i]);
		if (covers)
			break;
		RS_COUNT(append_retries, 1);
		unlock_ranges(io);
		leave_grants(io);
		memcpy(p, q, sizeof(struct plan) * (size_t)nq);
		np = nq;
	}
	for (int i = 0; i < nq; i++) {
		if (!valid(&q[i])) {
			RS_COUNT(fd_races, 1);
			release(io);
			return -1;
		}
	}
	/* Bytes are counted by the wrapper, from the call's result. */
	if (__builtin_expect(rs_stats_on, 0)) {
		RS_COUNT(io_calls, 1);
		RS_COUNT(lock_waits, waited);
		for (int i = 0; i < np; i++)
			RS_COUNT(appends, p[i].append);
	}
	return 1;
}

/*
 * vfork children.  A vfork child runs on its parent's thread, in its
 * memory, until it execs or exits: as one of the parent's threads, its
 * calls would raise the parent thread's rs_depth and count themselves into
 * the parent's grants and range locks.  Killed inside a call, it would
 * leave them so: every later call of the parent would pass through
 * unlocked (rs_depth stays raised), and the grant would stay busy until
 * the parent exits (test_edge, vfork_killed).  So a vfork child never touches the
 * parent's lock state.  The vfork wrapper raises rs_depth by
 * RS_DEPTH_VFORK for the child (interpose.c), which sends every call of
 * the child here, and restores it in the parent, whatever the child did.
 * Here each call locks its files whole, for writing (vfork children make
 * few calls before exec, and an exact range is not worth the code):
 *  - node scope: the child registers in the node table as the process it
 *    is, with a liveness lock on a descriptor of its own fd table, takes
 *    an exact EXSH grant, and gives grant and slot back at the end of the
 *    call.  The parent's grants conflict with it like any other process's,
 *    so the parent's other threads are excluded too.  Killed, the child is
 *    dead to the table like any process, and its grant is reclaimed.
 *  - process scope (or no usable table): the file's range lock, with a
 *    node in this thread's TLS, not on the child's stack, so that the
 *    parent can withdraw it (rs_vfork_parent, rs_rangelock_forget) when
 *    the child was killed holding it or waiting for it.
 * The state lives in TLS (per parent thread: each has at most one vfork
 * child), never in the parent's own structures.  A child killed inside
 * the shim's own short critical sections (the fd table's mutex, the range
 * lock's word) is not covered (limitations.md).
 */
struct vf_state {
	struct rs_nt nt;              /* node scope: the child's own slot */
	int registered;               /* nt holds a slot (and a mapping) */
	int ngrants;
	uint32_t gidx[2], ggen[2];
	int nnodes;                   /* process scope: range locks held */
	struct rs_file *file[2];
	struct rs_rl_node node[2];
};
static __thread struct vf_state vf __attribute__((tls_model("initial-exec")));

/* Leave the grants and the slot: at the end of the child's call. */
static void vf_unregister(void)
{
	struct rs_segment *s = vf.nt.map.seg;

	for (int i = 0; i < vf.ngrants && s; i++) {
		struct rs_seg_grant *g = &s->grants[vf.gidx[i] & (RS_NGRANT - 1)];
		uint64_t v = atomic_load(&g->gw);

		while (RS_GW_GEN(v) == vf.ggen[i] && RS_GW_USERS(v) > 0 &&
		       !atomic_compare_exchange_weak(&g->gw, &v, v - 1))
			;
	}
	vf.ngrants = 0;
	rs_nt_unregister(&vf.nt);
	rs_seg_detach(&vf.nt.map);
	vf.registered = 0;
}

/* A file a vfork child's call names, by (dev, ino). */
struct vf_key {
	uint64_t dev, ino;
};

/*
 * Plan, a vfork child's call: the regular files it names, in (dev, ino)
 * order, at most one entry a file.  Not the fd table's word on the
 * descriptor: that table is the parent's, and the child's number may
 * name another file by now (a redirection, dup2 of a file onto the
 * number of a pipe of the parent's, would pass its writes through
 * unlocked; test_edge, vfork_redirect).  So a regular file outside
 * RANGESHIM_PATHS is locked here too: more exclusion, never less.
 * Pre:  rs_depth == RS_DEPTH_VFORK (a vfork child); n is 1 or 2.
 * Post: the number of files in k; errno as it was.
 */
static int vf_plan(struct vf_key *k, const struct rs_target *t, int n)
{
	struct vf_key x;
	int m = 0, saved = errno;

	RS_ASSERT(RS_LOAD(rs_depth) == RS_DEPTH_VFORK && n >= 1 && n <= 2);
	for (int i = 0; i < n && i < 2; i++) {
		struct stat st;

		if (t[i].where == RS_POS_ONLY)
			continue;
		if (rs_fstat(t[i].fd, &st) < 0 || !S_ISREG(st.st_mode))
			continue;
		k[m].dev = (uint64_t)st.st_dev;
		k[m].ino = (uint64_t)st.st_ino;
		if (m == 1 && k[0].dev == k[1].dev && k[0].ino == k[1].ino)
			continue;
		m++;
	}
	errno = saved;
	if (m == 2 && (k[1].dev < k[0].dev || (k[1].dev == k[0].dev && k[1].ino < k[0].ino))) {
		x = k[0];
		k[0] = k[1];
		k[1] = x;
	}
	return m;
}

/*
 * Node scope, a vfork child: register in the node table as the process
 * it is and take an exact EXSH grant on each file, whole.
 * Pre:  rs_depth raised above RS_DEPTH_VFORK (the child's nested calls
 *       pass); vf holds nothing; node scope on and attached.
 * Post: 0 with vf registered and every grant held (waiting for them as
 *       long as it takes: never on unlocked); -1 with nothing held and
 *       errno EMFILE or ENFILE: no descriptor to register with, so the
 *       call must fail (rs_cl_eio set to it).
 */
static int vf_lock_node(const struct vf_key *k, int m)
{
	char why[256];

	RS_ASSERT(RS_LOAD(rs_depth) > RS_DEPTH_VFORK && !vf.registered && !vf.ngrants);
	/* errno is cleared first: the application's own EMFILE may still be
	 * in it when the registration fails for another reason. */
	for (int tries = 0; (errno = 0, rs_nt_register(&vf.nt, rs_cfg.shm_name, why,
						       sizeof(why))) < 0; tries++) {
		struct timespec ts = { 0, 10 * 1000 * 1000 };

		/* No descriptor for the registration: the child's fd table
		 * changes only by the child, which waits here, and its parent
		 * is stopped until it exits, so waiting would hang the program
		 * for good (test_edge, vfork_emfile).  The call fails with
		 * EMFILE (ENFILE), said once, without being made, as a cluster
		 * pin's does (limitations.md). */
		if (errno == EMFILE || errno == ENFILE) {
			static _Atomic int said;

			if (!atomic_exchange(&said, 1))
				rs_log(RS_LOG_ERROR, "a vfork child's call fails with %s: "
				       "it has no free descriptor to register in the "
				       "node lock table with (%s)",
				       errno == EMFILE ? "EMFILE" : "ENFILE", why);
			rs_cl_eio = errno;
			return -1;
		}
		/* The parent attached, so the table exists: a full slot table,
		 * say, frees up.  Wait; never go on unlocked. */
		if (tries == 500)
			rs_log(RS_LOG_WARN, "a vfork child waits for a slot in the node "
			       "lock table (%s)", why);
		nanosleep(&ts, NULL);
	}
	vf.registered = 1;
	for (int i = 0; i < m; i++) {
		struct rs_nt_req req = { .dev = k[i].dev, .ino = k[i].ino,
					 .start = 0, .end = RS_RANGE_EOF,
					 .mode = RS_G_EXSH, .exact = 1 };
		struct rs_nt_result res;

		while (rs_nt_acquire(&vf.nt, &req, &res, why, sizeof(why)) < 0) {
			struct timespec ts = { 0, 10 * 1000 * 1000 };

			nanosleep(&ts, NULL);
		}
		vf.gidx[i] = res.idx;
		vf.ggen[i] = res.gen;
		vf.ngrants = i + 1;
	}
	return 0;
}

/*
 * Process scope, a vfork child: each file's range lock, whole, with a
 * node in this thread's TLS that the parent can withdraw.
 * Pre:  rs_depth raised above RS_DEPTH_VFORK; vf holds no range lock.
 * Post: every file some thread of the parent has open locked, counted in
 *       vf.nnodes before it is queued.
 */
static void vf_lock_process(const struct vf_key *k, int m)
{
	RS_ASSERT(RS_LOAD(rs_depth) > RS_DEPTH_VFORK && vf.nnodes == 0);
	for (int i = 0; i < m; i++) {
		int64_t idx = rs_fdt_find(k[i].dev, k[i].ino);

		if (idx < 0)
			continue;	/* no thread of the parent has it open */
		/* Counted before it is queued: killed waiting, the node
		 * stays in the queue, and the parent must withdraw it
		 * (rs_vfork_parent; test_edge, vfork_wait_killed). */
		vf.file[vf.nnodes] = rs_fdt_file((uint32_t)idx);
		vf.nnodes++;
		atomic_signal_fence(memory_order_seq_cst);
		rs_rangelock_lock(&vf.file[vf.nnodes - 1]->rl, &vf.node[vf.nnodes - 1], 0,
				  RS_RANGE_EOF, RS_RL_WRITE);
	}
}

/* A vfork child's call: plan, then lock in the scope in force (above,
 * "vfork children").
 * Pre:  rs_depth == RS_DEPTH_VFORK; io cleared.
 * Post: io->entered 2 with the files locked (vfork_end lets go), 0 with
 *       nothing to lock, or -1 for a call that must fail; errno as it
 *       was. */
static void vfork_begin(struct rs_io *io, const struct rs_target *t, int n)
{
	struct vf_key k[2];
	int m, saved = errno;

	RS_ASSERT(RS_LOAD(rs_depth) == RS_DEPTH_VFORK && io->entered == 0);
	m = vf_plan(k, t, n);
	if (!m)
		return;
	rs_depth_add(1);	/* the child's nested calls (its signal handlers) pass */
	io->entered = 2;
	if (__atomic_load_n(&rs_node_on, __ATOMIC_RELAXED) &&
	    __atomic_load_n(&rs_node_seg, __ATOMIC_ACQUIRE)) {
		if (vf_lock_node(k, m) < 0) {
			rs_depth_add(-1);
			io->entered = -1;
		}
	} else {
		vf_lock_process(k, m);
	}
	errno = saved;
}

static void vfork_end(void)
{
	/* Uncounted only once unlocked: see rs_vfork_parent. */
	while (vf.nnodes > 0) {
		rs_rangelock_unlock(&vf.file[vf.nnodes - 1]->rl, &vf.node[vf.nnodes - 1]);
		atomic_signal_fence(memory_order_seq_cst);
		vf.nnodes--;
	}
	if (vf.registered)
		vf_unregister();
	rs_depth_add(-1);
}

int rs_vfork_parent(int pid)
{
	int saved = errno;

	/* The child is gone (exited, exec'd or killed): what it still held,
	 * or waited for, or had not yet queued, it did in a call it never
	 * finished. */
	while (vf.nnodes > 0) {
		vf.nnodes--;
		rs_rangelock_forget(&vf.file[vf.nnodes]->rl, &vf.node[vf.nnodes]);
	}
	if (vf.registered) {
		/* Its slot died with its descriptor (its own fd table): the
		 * table reclaims slot and grant.  The mapping was made in our
		 * memory, and the descriptor number is not ours to close. */
		if (vf.nt.map.seg)
			munmap(vf.nt.map.seg, sizeof(struct rs_segment));
		memset(&vf.nt, 0, sizeof(vf.nt));
		vf.registered = 0;
		vf.ngrants = 0;
	}
	/* Dead inside a hold of its table, the child leaves the wakes it
	 * owed on this thread, naming the view just unmapped. */
	rs_nt_wakes_forget();
	errno = saved;
	return pid;
}

void rs_io_begin(struct rs_io *io, const struct rs_target *t, int n)
{
	int r, saved;

	io_clear(io);
	if (!rs_ready())
		return;
	if (__builtin_expect(RS_LOAD(rs_depth) == RS_DEPTH_VFORK, 0)) {
		vfork_begin(io, t, n);
		return;
	}
	if (RS_LOAD(rs_depth)) {
		RS_COUNT(reentrant, 1);
		/* Unlocked, from a handler: it may move the offset unseen. */
		for (int i = 0; i < n; i++)
			if (t[i].where == RS_AT_CURSOR || t[i].where == RS_POS_ONLY)
				rs_fdt_moved(t[i].fd);
		return;
	}
	for (int i = 0; i < n; i++) {
		/* Nothing to lock, or a bad argument the real call rejects
		 * (negative offset); either way the kernel touches no data. */
		if (t[i].where == RS_POS_ONLY)
			continue;
		if ((t[i].where == RS_AT_OFFSET || t[i].where == RS_AT_CURSOR) &&
		    t[i].len == 0 && !t[i].iov && !(t[i].flags & RS_T_APPEND))
			return;
		if (t[i].where != RS_AT_CURSOR && t[i].off < 0)
			return;
	}
	rs_depth_add(1);
	atomic_signal_fence(memory_order_seq_cst);	/* see rs_cancel_wait */
	/* Our lseek and fstat calls must not leave their errno behind (the
	 * real call may succeed): one save here covers them all. */
	saved = errno;
	while ((r = try_begin(io, t, n)) < 0)
		;
	errno = saved;
	if (r == 0 || r == 2) {
		rs_depth_add(-1);
		if (r == 2)
			io->entered = -1;	/* the wrapper fails the call with EIO */
		else
			RS_COUNT(passthrough, 1);
		return;
	}
	cancel_off(io);
	io->entered = 1;
}

void rs_io_at_slow(struct rs_io *io, int fd, unsigned mode, int64_t off, uint64_t len)
{
	struct rs_target t = { fd, mode, RS_AT_OFFSET, 0, off, len, 0, 0 };

	if (RS_LOAD(rs_fast) && !RS_LOAD(rs_depth) && (rs_fdt_get(fd) & 3) == RS_FD_PASS) {
		RS_COUNT(passthrough, 1);
		io_clear(io);
		return;
	}
	rs_io_begin(io, &t, 1);
}

void rs_io_fast_slow(struct rs_io *io, int fd, unsigned mode, unsigned how, int64_t off,
		     uint64_t len, const struct iovec *iov, int cnt)
{
	struct rs_target t = { fd, mode, (how & RS_HOW_CURSOR) ? RS_AT_CURSOR : RS_AT_OFFSET, 0,
			       off, len, (how & RS_HOW_IOV) ? iov : NULL, cnt };

	if (how == RS_HOW_OFF)
		rs_io_at_slow(io, fd, mode, off, len);
	else
		rs_io_begin(io, &t, 1);
}

__thread struct rs_ap_hint rs_ap __attribute__((tls_model("initial-exec")));

char rs_statx_ok = 1;

/* fstat without leaving errno behind (the inline append path has not
 * saved it).  A statx that failed for a reason other than the fd (a
 * kernel before 6.11 rejects the NULL path with EFAULT; seccomp filters
 * answer ENOSYS or EPERM) is not tried again. */
int rs_append_size(int fd, uint64_t *size, long ret)
{
	int saved, r;

	if (ret == -EFAULT || ret == -ENOSYS || ret == -EPERM || ret == -EINVAL)
		RS_STORE(rs_statx_ok, 0);
	saved = errno;
	r = file_size(fd, size);

	errno = saved;
	return r;
}

int rs_append_eof(int fd, uint64_t *size)
{
	return rs_fstat_size(fd, size);
}

void rs_io_count(const struct rs_io *io, unsigned rw, long long r)
{
	/* Calls with a range lock, as io_calls counts them (not lseek,
	 * which takes only the offset lock). */
	for (int i = 0; i < io->nholds; i++) {
		const struct rs_hold *h = &io->hold[i];
		unsigned m = h->node.mode & (RS_RL_READ | RS_RL_WRITE | RS_RL_APPEND);

		if (i && h->file == io->hold[0].file)
			continue;	/* a copy within one file: one entry */
		/* Two files of a copy: the source is the one read. */
		rs_fw_general(h->file, rw != 3 || io->nholds == 1 ? rw : m == RS_RL_READ ? 1 : 2, r);
	}
}

void rs_io_end_slow(struct rs_io *io)
{
	int saved;

	if (io->entered <= 0)
		return;
	saved = errno;
	if (io->entered == 2) {
		vfork_end();
		errno = saved;
		return;
	}
	release(io);
	rs_depth_add(-1);
	errno = saved;
	cancel_on(io);
}

void rs_io_begin_path(struct rs_io *io, const char *path, int64_t len)
{
	struct stat st;
	int64_t idx;
	int saved = errno;
	struct rs_file *f;
	uint64_t start;

	io_clear(io);
	if (!rs_ready() || RS_LOAD(rs_depth) || len < 0 || !path)
		return;
	rs_depth_add(1);
	for (;;) {
		if (stat(path, &st) < 0 || !S_ISREG(st.st_mode) ||
		    (idx = rs_fdt_find(st.st_dev, st.st_ino)) < 0) {
			/* Not open in this process: no thread here can race it. */
			errno = saved;
			rs_depth_add(-1);
			return;
		}
		f = rs_fdt_file((uint32_t)idx);
		start = (uint64_t)st.st_size < (uint64_t)len ? (uint64_t)st.st_size : (uint64_t)len;
		if (rs_cfg.lock == RS_LOCK_MUTEX)
			start = 0;
		io->hold[0].file = f;
		if (enter_grant(io, f, start, RS_RANGE_EOF, RS_RL_WRITE)) {
			errno = saved;
			rs_depth_add(-1);
			io->entered = -1;	/* cluster lock lost: EIO */
			return;
		}
		if (rs_io_range(f, &io->hold[0].node, start, RS_RANGE_EOF, RS_RL_WRITE, -1, path))
			RS_COUNT(lock_waits, 1);
		io->nholds = 1;
		if (stat(path, &st) == 0 &&
		    atomic_load_explicit(&f->dev, memory_order_relaxed) == (uint64_t)st.st_dev &&
		    atomic_load_explicit(&f->ino, memory_order_relaxed) == (uint64_t)st.st_ino &&
		    (rs_cfg.lock == RS_LOCK_MUTEX ||
		     ((uint64_t)st.st_size < (uint64_t)len ? (uint64_t)st.st_size : (uint64_t)len) >= start))
			break;
		release(io);
	}
	errno = saved;
	RS_COUNT(io_calls, 1);
	cancel_off(io);
	io->entered = 1;
}
