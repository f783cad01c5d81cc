/*
 * The wrappers.  Each one describes its call to iolock.c (what range, at
 * which offset, read or write), makes the real call with the arguments it
 * was given, and returns its result and errno untouched.  They are
 * generated from a handful of shapes; the lock logic lives in iolock.c and
 * the fd bookkeeping in fdtable.c.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <spawn.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include <linux/falloc.h>
#include <linux/fs.h>

#include "coverage.h"
#include "fdtable.h"
#include "iolock.h"
#include "rawsyscall.h"
#include "real.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

#define RS_EXPORT __attribute__((visibility("default")))

/* Fortified entry points and the glibc names without a public prototype. */
int __open_2(const char *, int);
int __open64_2(const char *, int);
int __openat_2(int, const char *, int);
int __openat64_2(int, const char *, int);
ssize_t __read_chk(int, void *, size_t, size_t);
ssize_t __pread_chk(int, void *, size_t, off_t, size_t);
ssize_t __pread64_chk(int, void *, size_t, off_t, size_t);

/* The real call; ENOSYS only while dlsym itself is recursing into us. */
#define REAL(ret, name, args) \
	(__builtin_expect(rs_real.name != NULL, 1) ? rs_real.name args \
						   : (errno = ENOSYS, (ret)-1))

/* ---- data calls: one shape for all ---------------------------------- */

/* What a call's result counts as in the stats: bytes read, written,
 * both (copy_file_range, sendfile) or neither. */
#define RS_B_NONE  0
#define RS_B_READ  1
#define RS_B_WRITE 2
#define RS_B_BOTH  3

static inline __attribute__((always_inline)) void count_bytes(unsigned kind, long long r)
{
	if (kind & RS_B_READ)
		RS_COUNT_BYTES(0, r);
	if (kind & RS_B_WRITE)
		RS_COUNT_BYTES(1, r);
}

/* The general path of a call the inline path may take, and of every other
 * call: begin describes the call to iolock.c (io and r declared). */
#define RS_WRAP_BODY(ret, name, args, begin, bytes)                          \
	begin;                                                               \
	if (__builtin_expect(io.entered < 0, 0)) {                           \
		errno = rs_cl_eio > 1 ? rs_cl_eio : EIO; /* cluster.h */     \
		return (ret)-1;                                              \
	}                                                                    \
	r = REAL(ret, name, args);                                           \
	if (io.entered) {                                                    \
		if (__builtin_expect(rs_stats_on, 0))                        \
			rs_io_count(&io, bytes, (long long)r);               \
		rs_io_end_slow(&io);                                         \
		count_bytes(bytes, (long long)r);                            \
	}                                                                    \
	return r;

/* Calls that never take the inline path. */
#define RS_WRAP(ret, name, params, args, begin, bytes)                       \
	RS_EXPORT ret name params                                            \
	{                                                                    \
		struct rs_io io;                                             \
		ret r;                                                       \
		RS_WRAP_BODY(ret, name, args, begin, bytes)                  \
	}

/*
 * Calls on one fd that do: how is RS_HOW_*, len or (iov, cnt).  The
 * wrapper only picks one of two functions by whether the process is
 * single-threaded (rs_solo), and jumps there with its own arguments:
 * name_solo holds the lean copy (RS_FAST_CALL), which makes no call but
 * the real one and so saves almost no registers (at an explicit offset,
 * its rare calls are made whole by name_undo and the full copy:
 * RS_LEAN_SPLIT in iolock.h); name_mt the full copy
 * of a threaded process, whose range and offset locks may wait.  A
 * wrapper that held either copy itself would make the other pay for its
 * prologue (gcc saves registers before the test).  Each jumps to
 * name_general for what it leaves: the full copies again (RS_FAST), then
 * the general path.
 */
/* One of a wrapper's copies: body, then what it left, in name_general. */
#define RS_WRAP_COPY(ret, name, fn, params, args, body)                     \
	static __attribute__((noinline)) ret fn params                       \
	{                                                                    \
		struct rs_io io;                                             \
		ret r;                                                       \
		body;                                                        \
		return name##_general args;                                  \
	}

#define RS_UNPAREN(...) __VA_ARGS__
/* (x, a, b) from x and (a, b). */
#define RS_PREPEND(x, list) (x, RS_UNPAREN list)

#define RS_WRAP_FAST3(ret, name, params, args, general, mt, lean)            \
	static __attribute__((noinline)) ret name##_general params           \
	{                                                                    \
		general                                                      \
	}                                                                    \
	/* The lean copy's rare undo (RS_FAST_UNDO, iolock.h): the leave    \
	 * and the general call in one call, the arguments passed again. */ \
	static __attribute__((noinline, cold)) ret                           \
	name##_undo RS_PREPEND(struct rs_gref *ref_, params)                 \
	{                                                                    \
		rs_fast_undo(ref_);                                          \
		return name##_general args;                                  \
	}                                                                    \
	RS_WRAP_COPY(ret, name, name##_mt, params, args, mt)                 \
	RS_WRAP_COPY(ret, name, name##_solo, params, args, lean)             \
	RS_EXPORT ret name params                                            \
	{                                                                    \
		if (__builtin_expect(rs_solo(), 1))                          \
			return name##_solo args;                             \
		return name##_mt args;                                       \
	}

#define RS_WRAP_FAST(ret, name, params, args, fd, mode, how, off, len, iov, cnt) \
	RS_WRAP_FAST3(ret, name, params, args,                               \
		struct rs_io io;                                             \
		ret r;                                                       \
		RS_FAST(io, r, fd, mode, how, off, len, iov, cnt, rs_real.name args, ); \
		RS_WRAP_BODY(ret, name, args,                                \
			     rs_io_fast_slow(&io, fd, mode, how, off, len, iov, cnt), \
			     (mode) == RS_RL_WRITE ? RS_B_WRITE : RS_B_READ),  \
		RS_FAST_CALL(io, r, 0, 0, fd, mode, how, off, len, iov, cnt, rs_real.name args, \
			     rs_real.name args),                             \
		RS_FAST_CALL(io, r, 1, 1, fd, mode, how, off, len, iov, cnt, rs_real.name args, \
			     name##_undo RS_PREPEND(&io.gref[0], args)))

#define RS_PREAD(name)                                                        \
	RS_WRAP_FAST(ssize_t, name, (int fd, void *buf, size_t n, off_t off),\
		     (fd, buf, n, off), fd, RS_RL_READ, RS_HOW_OFF, off, n, NULL, 0)
#define RS_PWRITE(name)                                                       \
	RS_WRAP_FAST(ssize_t, name, (int fd, const void *buf, size_t n, off_t off), \
		     (fd, buf, n, off), fd, RS_RL_WRITE, RS_HOW_OFF, off, n, NULL, 0)
#define RS_PREADV(name, mode)                                                 \
	RS_WRAP_FAST(ssize_t, name, (int fd, const struct iovec *iov, int cnt, off_t off), \
		     (fd, iov, cnt, off), fd, mode, RS_HOW_IOV, off, 0, iov, cnt)

RS_PREAD(pread)
RS_PREAD(pread64)
RS_PWRITE(pwrite)
RS_PWRITE(pwrite64)
RS_PREADV(preadv, RS_RL_READ)
RS_PREADV(preadv64, RS_RL_READ)
RS_PREADV(pwritev, RS_RL_WRITE)
RS_PREADV(pwritev64, RS_RL_WRITE)

RS_WRAP_FAST(ssize_t, read, (int fd, void *buf, size_t n), (fd, buf, n),
	     fd, RS_RL_READ, RS_HOW_CURSOR, 0, n, NULL, 0)
RS_WRAP_FAST(ssize_t, write, (int fd, const void *buf, size_t n), (fd, buf, n),
	     fd, RS_RL_WRITE, RS_HOW_CURSOR, 0, n, NULL, 0)
RS_WRAP_FAST(ssize_t, readv, (int fd, const struct iovec *iov, int cnt), (fd, iov, cnt),
	     fd, RS_RL_READ, RS_HOW_CURSOR | RS_HOW_IOV, 0, 0, iov, cnt)
RS_WRAP_FAST(ssize_t, writev, (int fd, const struct iovec *iov, int cnt), (fd, iov, cnt),
	     fd, RS_RL_WRITE, RS_HOW_CURSOR | RS_HOW_IOV, 0, 0, iov, cnt)
RS_WRAP_FAST(ssize_t, __read_chk, (int fd, void *buf, size_t n, size_t buflen),
	     (fd, buf, n, buflen), fd, RS_RL_READ, RS_HOW_CURSOR, 0, n, NULL, 0)
RS_WRAP_FAST(ssize_t, __pread_chk, (int fd, void *buf, size_t n, off_t off, size_t buflen),
	     (fd, buf, n, off, buflen), fd, RS_RL_READ, RS_HOW_OFF, off, n, NULL, 0)
RS_WRAP_FAST(ssize_t, __pread64_chk, (int fd, void *buf, size_t n, off_t off, size_t buflen),
	     (fd, buf, n, off, buflen), fd, RS_RL_READ, RS_HOW_OFF, off, n, NULL, 0)

/* The general path, one target. */
#define RS_WRAP_IO(ret, name, params, args, fd, mode, where, off, len)       \
	RS_WRAP(ret, name, params, args, rs_io_one(&io, fd, mode, where, off, len), RS_B_NONE)

RS_WRAP_IO(off_t, lseek, (int fd, off_t off, int whence), (fd, off, whence),
	   fd, RS_RL_READ, RS_POS_ONLY, 0, 0)
RS_WRAP_IO(off_t, lseek64, (int fd, off_t off, int whence), (fd, off, whence),
	   fd, RS_RL_READ, RS_POS_ONLY, 0, 0)
RS_WRAP_IO(int, ftruncate, (int fd, off_t len), (fd, len),
	   fd, RS_RL_WRITE, RS_TRUNCATE, len, 0)
RS_WRAP_IO(int, ftruncate64, (int fd, off_t len), (fd, len),
	   fd, RS_RL_WRITE, RS_TRUNCATE, len, 0)
/* posix_fallocate may grow the file, and returns an error number. */
RS_WRAP_IO(int, posix_fallocate, (int fd, off_t off, off_t len), (fd, off, len),
	   fd, RS_RL_WRITE, RS_FROM_OFFSET, off, 0)
RS_WRAP_IO(int, posix_fallocate64, (int fd, off_t off, off_t len), (fd, off, len),
	   fd, RS_RL_WRITE, RS_FROM_OFFSET, off, 0)

#ifndef RWF_NOAPPEND
#define RWF_NOAPPEND 0x00000020
#endif

/*
 * Where a pwritev2 writes (kiocb_set_rw_flags in include/linux/fs.h,
 * generic_write_checks in mm/filemap.c): RWF_APPEND at end of file, even
 * without O_APPEND; RWF_NOAPPEND at the offset, even with O_APPEND (or
 * EPERM on an append-only inode, before anything is written).  Offset -1
 * is the file offset (pwritev2 in fs/read_write.c), which the flags move
 * just as they move an explicit offset.  Reads ignore both.
 */
static inline unsigned rwf_place(unsigned mode, int flags)
{
	if (mode != RS_RL_WRITE)
		return 0;
	/* Both at once is EINVAL before anything is written: lock what the
	 * call names, [off, off + len), rather than all of end of file. */
	if (flags & RWF_NOAPPEND)
		return RS_T_NOAPPEND;
	return (flags & RWF_APPEND) ? RS_T_APPEND : 0;
}

/* Flags that leave the range where it is (RWF_HIPRI, RWF_DSYNC,
 * RWF_SYNC, RWF_NOWAIT, unknown ones the kernel refuses, and any flag on
 * a read) take the inline path as preadv/pwritev and readv/writev do, at
 * the offset or, for -1, at the file offset.  RWF_APPEND and RWF_NOAPPEND
 * on a write move it: the general path. */
/* One copy of a *v2 call's inline path (f: RS_FAST, or RS_FAST_CALL with
 * its constants), at the offset or at the file offset. */
#define RS_V2(name, mode, f, ...)                                             \
	do {                                                                  \
		if (__builtin_expect(!rwf_place(mode, flags), 1)) {           \
			if (__builtin_expect(off != -1, 1))                   \
				f(io, r, __VA_ARGS__ fd, mode, RS_HOW_IOV, off, 0, iov, cnt, \
				  rs_real.name(fd, iov, cnt, off, flags),     \
				  name##_undo(&io.gref[0], fd, iov, cnt, off, flags)); \
			else                                                  \
				f(io, r, __VA_ARGS__ fd, mode, RS_HOW_CURSOR | RS_HOW_IOV, off, \
				  0, iov, cnt, rs_real.name(fd, iov, cnt, off, flags), \
				  name##_undo(&io.gref[0], fd, iov, cnt, off, flags)); \
		}                                                             \
	} while (0)

#define RS_PREADV2(name, mode)                                                \
	RS_WRAP_FAST3(ssize_t, name,                                          \
		(int fd, const struct iovec *iov, int cnt, off_t off, int flags), \
		(fd, iov, cnt, off, flags),                                   \
		struct rs_io io;                                              \
		ssize_t r;                                                    \
		RS_V2(name, mode, RS_FAST);                                   \
		RS_WRAP_BODY(ssize_t, name, (fd, iov, cnt, off, flags),       \
			     rwf_place(mode, flags)                           \
			     ? rs_io_iov(&io, fd, mode, off == -1 ? RS_AT_CURSOR : RS_AT_OFFSET, \
					 off, iov, cnt, rwf_place(mode, flags)) \
			     : rs_io_fast_slow(&io, fd, mode, (off == -1 ? RS_HOW_CURSOR : 0) | \
					       RS_HOW_IOV, off, 0, iov, cnt),  \
			     (mode) == RS_RL_WRITE ? RS_B_WRITE : RS_B_READ), \
		RS_V2(name, mode, RS_FAST_CALL, 0, 0,),                        \
		RS_V2(name, mode, RS_FAST_CALL, 1, 1,))

RS_PREADV2(preadv2, RS_RL_READ)
RS_PREADV2(preadv64v2, RS_RL_READ)
RS_PREADV2(pwritev2, RS_RL_WRITE)
RS_PREADV2(pwritev64v2, RS_RL_WRITE)

/* Size-preserving modes touch [off, off+len); the rest may move or grow
 * everything after off.  All of len: vfs_fallocate (fs/open.c) has no
 * MAX_RW_COUNT cap, so a 4 GiB punch must lock 4 GiB. */
static void begin_fallocate(struct rs_io *io, int fd, int mode, off_t off, off_t len)
{
	int keep = (mode & FALLOC_FL_KEEP_SIZE) &&
		   !(mode & (FALLOC_FL_COLLAPSE_RANGE | FALLOC_FL_INSERT_RANGE));
	struct rs_target t = { fd, RS_RL_WRITE, keep ? RS_AT_OFFSET : RS_FROM_OFFSET,
			       RS_T_WHOLE, off, len > 0 ? (uint64_t)len : 0, 0, 0 };

	rs_io_begin(io, &t, 1);
}

#define RS_FALLOCATE(name)                                                    \
	RS_WRAP(int, name, (int fd, int mode, off_t off, off_t len), (fd, mode, off, len), \
		begin_fallocate(&io, fd, mode, off, len), RS_B_NONE)

RS_FALLOCATE(fallocate)
RS_FALLOCATE(fallocate64)

#define RS_TRUNCATE_PATH(name)                                                \
	RS_WRAP(int, name, (const char *path, off_t len), (path, len),       \
		rs_io_begin_path(&io, path, len), RS_B_NONE)

RS_TRUNCATE_PATH(truncate)
RS_TRUNCATE_PATH(truncate64)

/* Read-lock the source, write-lock the destination; iolock.c orders them.
 * whole: RS_T_WHOLE when the kernel may act on all of len. */
static void begin_copy(struct rs_io *io, int in, const off_t *in_off, int out,
		       const off_t *out_off, size_t len, unsigned whole)
{
	struct rs_target t[2] = {
		{ in, RS_RL_READ, in_off ? RS_AT_OFFSET : RS_AT_CURSOR, whole,
		  rs_read_off(in_off), len, 0, 0 },
		{ out, RS_RL_WRITE, out_off ? RS_AT_OFFSET : RS_AT_CURSOR, whole,
		  rs_read_off(out_off), len, 0, 0 },
	};

	rs_io_begin(io, t, 2);
}

/* vfs_copy_file_range (fs/read_write.c) caps len at MAX_RW_COUNT only on
 * its splice fallback; a file system's own ->copy_file_range (NFS, FUSE,
 * Ceph, SMB) gets all of it. */
RS_WRAP(ssize_t, copy_file_range,
	(int in, off_t *in_off, int out, off_t *out_off, size_t len, unsigned flags),
	(in, in_off, out, out_off, len, flags),
	begin_copy(&io, in, in_off, out, out_off, len, RS_T_WHOLE), RS_B_BOTH)

/* do_sendfile (fs/read_write.c) caps count at MAX_RW_COUNT. */
#define RS_SENDFILE(name)                                                     \
	RS_WRAP(ssize_t, name, (int out, int in, off_t *off, size_t count),  \
		(out, in, off, count), begin_copy(&io, in, off, out, NULL, count, 0), RS_B_BOTH)

RS_SENDFILE(sendfile)
RS_SENDFILE(sendfile64)

/* ---- descriptor bookkeeping ----------------------------------------- */

/* A vfork child shares our memory but not our fd table: it must leave
 * the table alone. */
static int enter_fd_slow(void)
{
	if (!rs_enter_slow())
		return 0;
	if (!rs_own_process()) {
		rs_leave_slow();
		return 0;
	}
	return 1;
}

static int opened(int fd, int flags)
{
	if (fd >= 0 && enter_fd_slow()) {
		rs_fdt_opened(fd, flags);
		rs_leave_slow();
	}
	return fd;
}

static mode_t open_mode(int flags, va_list ap)
{
	return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ?
		(mode_t)va_arg(ap, int) : 0;
}

/* open, openat: the mode argument is there only with O_CREAT/O_TMPFILE. */
#define RS_OPEN_VA(name, params, args)                                        \
	RS_EXPORT int name params                                             \
	{                                                                     \
		va_list ap;                                                   \
		mode_t mode;                                                  \
		va_start(ap, flags);                                          \
		mode = open_mode(flags, ap);                                  \
		va_end(ap);                                                   \
		rs_ready();                                                   \
		return opened(REAL(int, name, args), flags);                  \
	}

#define RS_OPEN_FIXED(name, params, args, oflags)                             \
	RS_EXPORT int name params                                             \
	{                                                                     \
		rs_ready();                                                   \
		return opened(REAL(int, name, args), oflags);                 \
	}

RS_OPEN_VA(open, (const char *path, int flags, ...), (path, flags, mode))
RS_OPEN_VA(open64, (const char *path, int flags, ...), (path, flags, mode))
RS_OPEN_VA(openat, (int dirfd, const char *path, int flags, ...), (dirfd, path, flags, mode))
RS_OPEN_VA(openat64, (int dirfd, const char *path, int flags, ...), (dirfd, path, flags, mode))
RS_OPEN_FIXED(creat, (const char *path, mode_t mode), (path, mode), O_CREAT | O_WRONLY | O_TRUNC)
RS_OPEN_FIXED(creat64, (const char *path, mode_t mode), (path, mode), O_CREAT | O_WRONLY | O_TRUNC)
RS_OPEN_FIXED(__open_2, (const char *path, int flags), (path, flags), flags)
RS_OPEN_FIXED(__open64_2, (const char *path, int flags), (path, flags), flags)
RS_OPEN_FIXED(__openat_2, (int dirfd, const char *path, int flags), (dirfd, path, flags), flags)
RS_OPEN_FIXED(__openat64_2, (int dirfd, const char *path, int flags), (dirfd, path, flags), flags)

/* The application's own fstat of a lazy fd classifies it, so that an
 * open costs no fstat of ours (fdtable.h, RS_FD_LAZY).  Only a success
 * says anything; errno is the real call's. */
static void stat_seen(int fd, const struct stat *st)
{
	int saved = errno;

	if (fd >= 0 && (rs_fdt_get(fd) & 3) == RS_FD_LAZY && enter_fd_slow()) {
		rs_fdt_stat_seen(fd, st);
		rs_leave_slow();
	}
	errno = saved;
}

#define RS_FSTAT(name, type)                                                  \
	RS_EXPORT int name(int fd, type *st)                                  \
	{                                                                     \
		int on = rs_ready(), r;                                       \
		r = REAL(int, name, (fd, st));                                \
		if (r == 0 && on)	/* off: no fd table to look at */     \
			stat_seen(fd, (const struct stat *)st);               \
		return r;                                                     \
	}

/* A path the real call accepted: NULL only where the kernel allows it
 * (AT_EMPTY_PATH on Linux 6.11), which glibc's prototype does not say. */
static int empty_path(const char *path)
{
	const char *p = path;

	__asm__("" : "+r"(p));	/* no nonnull assumption from the caller */
	return !p || !p[0];
}

/* fstatat(fd, "", st, AT_EMPTY_PATH) is fstat(fd): glibc's fstat is made
 * that way, and programs call it so. */
#define RS_FSTATAT(name, type)                                                \
	RS_EXPORT int name(int fd, const char *path, type *st, int flags)     \
	{                                                                     \
		int on = rs_ready(), r;                                       \
		r = REAL(int, name, (fd, path, st, flags));                   \
		if (r == 0 && on && (flags & AT_EMPTY_PATH) && empty_path(path)) \
			stat_seen(fd, (const struct stat *)st);               \
		return r;                                                     \
	}

/* struct stat64 is struct stat on the 64-bit ABIs (glibc's
 * __OFF_T_MATCHES_OFF64_T); the fields read are the same either way. */
_Static_assert(sizeof(struct stat64) == sizeof(struct stat), "stat64 is stat");
RS_FSTAT(fstat, struct stat)
RS_FSTAT(fstat64, struct stat64)
RS_FSTATAT(fstatat, struct stat)
RS_FSTATAT(fstatat64, struct stat64)

/*
 * The shim's own descriptor numbers (rs_fd_private), kept out of the
 * application's close/dup2/closefrom.  Not in a vfork child: it has a
 * copy of our descriptor table, whose numbers are its own to close or
 * to dup2 onto, but our memory, where moving a number away (rs_fd_evict)
 * would record the child's new number as ours: the parent's later
 * closefrom would then close its real table descriptor and it would look
 * dead to the table (test_edge, vfork_dup2).  The vfork stub's raised rs_depth tells the
 * child (iolock.h, RS_DEPTH_VFORK).
 */
static inline int in_vfork_child(void)
{
	return RS_LOAD(rs_depth) >= RS_DEPTH_VFORK;
}

static inline int ours(int fd)
{
	return rs_fd_private(fd) && !in_vfork_child();
}

/* Read the entry before the real close: once the fd number is free,
 * another thread may open something else under it. */
static void closed(int fd, uint64_t old)
{
	int saved = errno;

	/* Linux frees the number even when close fails with EINTR or EIO. */
	if (fd >= 0 && old != RS_FD_UNKNOWN) {
		if (enter_fd_slow()) {
			rs_fdt_closed(fd, old);
			rs_leave_slow();
		} else if (RS_LOAD(rs_depth) && rs_own_process()) {
			/* A signal handler inside the shim: the number is free
			 * now and fopen/socket/pipe may reuse it unseen. */
			rs_fdt_forget(fd, old);
		}
	}
	errno = saved;
}

RS_EXPORT int close(int fd)
{
	uint64_t old;
	int r;

	/* Ours: to the application it was open, and now it is closed. */
	if (ours(fd))
		return 0;
	old = rs_ready() ? rs_fdt_get(fd) : RS_FD_UNKNOWN;
	r = REAL(int, close, (fd));
	closed(fd, old);
	return r;
}

/* stdio closes through a glibc-internal call that we do not see. */
RS_EXPORT int fclose(FILE *fp)
{
	uint64_t old;
	int fd, r;

	rs_cov_closing(fp);
	fd = fileno(fp);
	old = rs_ready() ? rs_fdt_get(fd) : RS_FD_UNKNOWN;
	r = REAL(int, fclose, (fp));
	closed(fd, old);
	return r;
}

static void forget_range(unsigned lo, unsigned hi)
{
	int saved = errno;

	if (enter_fd_slow()) {
		rs_fdt_closed_range(lo, hi);
		rs_leave_slow();
	}
	errno = saved;
}

/* Closing a range skips the shim's own fds, lowest first. */
static int close_range_around(unsigned lo, unsigned hi, int flags)
{
	for (int i = 0; i < RS_NPRIVATE && !in_vfork_child(); i++) {
		int p = atomic_load(&rs_private_fd[i]);

		if (p >= 0 && (unsigned)p >= lo && (unsigned)p <= hi && !(flags & CLOSE_RANGE_CLOEXEC)) {
			int r = (unsigned)p > lo ? close_range_around(lo, (unsigned)p - 1, flags) : 0;

			if (r == 0 && (unsigned)p < hi)
				r = close_range_around((unsigned)p + 1, hi, flags);
			return r;
		}
	}
	return REAL(int, close_range, (lo, hi, flags));
}

/* The fork handlers, for forks that run no atfork handler of their own
 * (_Fork, and forks made through syscall()).  Not from a handler that
 * interrupted the shim: its thread may hold the locks prepare takes. */
static int fork_begin(void)
{
	int locked = rs_ready() && !RS_LOAD(rs_depth);

	rs_fdt_lazy_shared();	/* also from a handler: lock-free */

	if (locked)
		rs_fork_prepare();
	return locked;
}

static void fork_end(long r, int locked, long flags)
{
	if (r == 0)
		rs_after_clone_child(flags);
	else if (locked)
		rs_fork_parent();
}

/* _Fork runs no atfork handlers, and its child may call any
 * async-signal-safe function, pwrite among them. */
pid_t _Fork(void);
RS_EXPORT pid_t _Fork(void)
{
	int locked = fork_begin();
	pid_t p = REAL(pid_t, _Fork, ());

	fork_end(p, locked, 0);
	return p;
}

/*
 * Other ways another process comes to share our descriptions, which run
 * no fork handler: glibc's spawns (posix_spawn, and system and popen,
 * which spawn with an internal clone), and a descriptor sent over a
 * socket (SCM_RIGHTS: any control data is taken for one).  Before each,
 * lazy entries are marked shared, so that no call takes a description's
 * offset for 0 after another process may have moved it (fdtable.h).
 * pidfd_getfd, by which a process with ptrace rights takes our
 * descriptor, is not seen (limitations.md).
 */
#define RS_SPAWN(name, search)                                                \
	RS_EXPORT int name(pid_t *pid, const char *path,                      \
			   const posix_spawn_file_actions_t *fa,              \
			   const posix_spawnattr_t *attr, char *const argv[], \
			   char *const envp[])                                \
	{                                                                     \
		rs_ready();                                                   \
		rs_fdt_lazy_shared();                                         \
		int r_ = REAL(int, name, (pid, path, fa, attr, argv, envp));   \
                                                                              \
		if (__builtin_expect(rs_stats_on, 0) && r_ == 0 && pid)       \
			rs_cov_exec(path, argv, search, *pid);                \
		return r_;                                                    \
	}
RS_SPAWN(posix_spawn, 0)
RS_SPAWN(posix_spawnp, 1)

/*
 * Exec: the shim follows into a dynamically linked program through
 * LD_PRELOAD, never into a static one; with per-process reports, that
 * one gets a report naming it (coverage.c, rs_cov_exec).  glibc's execl*,
 * system and its own calls to execve are not seen; the shells and most
 * programs call execve, execv or execvp.
 */
RS_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	if (__builtin_expect(rs_stats_on, 0))
		rs_cov_exec(path, argv, 0, 0);
	return REAL(int, execve, (path, argv, envp));
}

RS_EXPORT int execv(const char *path, char *const argv[])
{
	if (__builtin_expect(rs_stats_on, 0))
		rs_cov_exec(path, argv, 0, 0);
	return REAL(int, execv, (path, argv));
}

RS_EXPORT int execvp(const char *file, char *const argv[])
{
	if (__builtin_expect(rs_stats_on, 0))
		rs_cov_exec(file, argv, 1, 0);
	return REAL(int, execvp, (file, argv));
}

RS_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
	if (__builtin_expect(rs_stats_on, 0))
		rs_cov_exec(file, argv, 1, 0);
	return REAL(int, execvpe, (file, argv, envp));
}

RS_EXPORT int system(const char *cmd)
{
	rs_ready();
	rs_fdt_lazy_shared();
	return REAL(int, system, (cmd));
}

RS_EXPORT FILE *popen(const char *cmd, const char *mode)
{
	rs_ready();
	rs_fdt_lazy_shared();
	if (__builtin_expect(rs_real.popen == NULL, 0)) {
		errno = ENOSYS;
		return NULL;
	}
	return rs_real.popen(cmd, mode);
}

RS_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	rs_ready();
	if (msg && msg->msg_controllen)
		rs_fdt_lazy_shared();
	return REAL(ssize_t, sendmsg, (fd, msg, flags));
}

RS_EXPORT int sendmmsg(int fd, struct mmsghdr *v, unsigned n, int flags)
{
	rs_ready();
	for (unsigned i = 0; v && i < n; i++)
		if (v[i].msg_hdr.msg_controllen) {
			rs_fdt_lazy_shared();
			break;
		}
	return REAL(int, sendmmsg, (fd, v, n, flags));
}

/* A thread cancelled inside a locked call would keep its locks: see
 * rs_cancel_wait. */
RS_EXPORT int pthread_cancel(pthread_t t)
{
	if (rs_ready())
		rs_cancel_wait((unsigned long)t);
	return REAL(int, pthread_cancel, (t));
}

RS_EXPORT int close_range(unsigned lo, unsigned hi, int flags)
{
	int r;

	rs_ready();
	r = lo <= hi ? close_range_around(lo, hi, flags) : REAL(int, close_range, (lo, hi, flags));
	if (r == 0 && !(flags & CLOSE_RANGE_CLOEXEC))
		forget_range(lo, hi);
	return r;
}

RS_EXPORT void closefrom(int lo)
{
	int around = 0;

	rs_ready();
	if (!rs_real.closefrom)
		return;
	for (int i = 0; i < RS_NPRIVATE && !in_vfork_child(); i++)
		around |= lo >= 0 && atomic_load(&rs_private_fd[i]) >= lo;
	if (around)
		close_range_around((unsigned)lo, UINT_MAX, 0);
	else
		rs_real.closefrom(lo);
	if (lo >= 0)
		forget_range((unsigned)lo, UINT_MAX);
}

/* From a handler that interrupted the shim on this thread (which may
 * hold the table mutex): classify newfd on first use. */
static void duped_in_handler(int oldfd, int newfd)
{
	if (newfd >= 0 && newfd != oldfd && RS_LOAD(rs_depth) && rs_own_process())
		rs_fdt_forget(newfd, rs_fdt_get(newfd));
}

static int duped(int oldfd, int newfd)
{
	int saved = errno;

	if (newfd >= 0 && newfd != oldfd && enter_fd_slow()) {
		rs_fdt_duped(oldfd, newfd);
		rs_leave_slow();
	} else {
		duped_in_handler(oldfd, newfd);
	}
	errno = saved;
	return newfd;
}

RS_EXPORT int dup(int fd)
{
	rs_ready();
	return duped(fd, REAL(int, dup, (fd)));
}

/*
 * dup2/dup3 onto a tracked fd (log rotation) re-point newfd inside the
 * kernel, atomically for the application, while other threads may be in
 * a locked call through it.  Without care a call could lock file X's
 * range and have the kernel write file Y.  So the replacement waits for
 * every call of this process on X to leave (a whole-file write lock on
 * X's process range lock, after newfd's offset lock, in the general
 * path's order), and the fd entry moves before the lock is released: a
 * call that read the old entry and locks X afterwards sees the entry
 * changed and starts over (rs_io_at and try_begin re-check it after
 * locking).  No node grant: only this process's threads use its fd table.
 * The thread holds nothing else while it waits.  Skipped where the caller
 * may already hold a shim lock (a handler inside the shim) and in a vfork
 * child (its own fd table, our memory): see enter_fd_slow.
 */
struct dup_hold {
	int entered;            /* rs_depth raised: bookkeeping is ours */
	struct rs_desc *desc;   /* newfd's description, offset lock held */
	struct rs_file *file;   /* its file, whole-file write lock held */
	struct rs_rl_node node;
};

static void dup_begin(struct dup_hold *h, int oldfd, int newfd)
{
	int saved = errno;
	uint64_t e;
	uint32_t fidx;

	h->entered = 0;
	h->desc = NULL;
	h->file = NULL;
	if (oldfd == newfd || newfd < 0 || !enter_fd_slow())
		return;
	/* setfl_begin's Pre, and dup2's: a wrapper not nested in the shim
	 * holds no lock of ours (lockorder.h). */
	RS_ASSERT(!rs_lk_held(RS_LK_NONE, NULL));
	h->entered = 1;
	for (;;) {
		e = rs_fdt_get(newfd);
		/* An inherited fd another thread is about to classify and
		 * lock counts as tracked too. */
		e = rs_fdt_known(newfd);
		if ((e & 3) != RS_FD_TRACKED)
			break;
		h->desc = rs_fdt_desc(e);
		fidx = atomic_load_explicit(&h->desc->file, memory_order_acquire);
		h->file = rs_fdt_file(fidx);
		rs_pos_lock(h->desc);
		rs_rangelock_lock(&h->file->rl, &h->node, 0, RS_RANGE_EOF, RS_RL_WRITE);
		if (rs_fdt_get(newfd) == e &&
		    atomic_load_explicit(&h->desc->file, memory_order_relaxed) == fidx)
			break;
		/* Closed and reused under us: lock what it is now. */
		rs_rangelock_unlock(&h->file->rl, &h->node);
		rs_pos_unlock(h->desc);
		h->desc = NULL;
		h->file = NULL;
	}
	errno = saved;
}

static void dup_unlock(struct dup_hold *h)
{
	if (h->file) {
		rs_rangelock_unlock(&h->file->rl, &h->node);
		rs_pos_unlock(h->desc);
	}
	rs_leave_slow();
}

static int dup_end(struct dup_hold *h, int oldfd, int r)
{
	int saved = errno;

	if (!h->entered) {
		duped_in_handler(oldfd, r);
		errno = saved;
		return r;
	}
	if (r >= 0 && r != oldfd)
		rs_fdt_duped(oldfd, r);
	dup_unlock(h);
	errno = saved;
	return r;
}

#define RS_DUP_ONTO(name, params, args)                                       \
	RS_EXPORT int name params                                             \
	{                                                                     \
		struct dup_hold h;                                            \
		rs_ready();                                                   \
		if (oldfd != newfd && !in_vfork_child())                      \
			rs_fd_evict(newfd);                                   \
		dup_begin(&h, oldfd, newfd);                                  \
		return dup_end(&h, oldfd, REAL(int, name, args));             \
	}

RS_DUP_ONTO(dup2, (int oldfd, int newfd), (oldfd, newfd))
RS_DUP_ONTO(dup3, (int oldfd, int newfd, int flags), (oldfd, newfd, flags))

/*
 * freopen keeps the stream's fd number: it opens the new file at another
 * number, dup3s it onto the old one and closes the temporary, all with
 * glibc-internal calls (libio/freopen.c), and on failure it closes the
 * number.  That is dup2 rotation (freopen(log, "a", stderr) on SIGHUP),
 * so it is guarded the same way, and the number is classified again
 * (F_GETFL and all) before the lock is let go.
 */
static void reopen_end(struct dup_hold *h, int fd)
{
	int saved = errno;

	if (!h->entered) {
		duped_in_handler(-1, fd);
	} else {
		rs_fdt_replaced(fd);
		dup_unlock(h);
	}
	errno = saved;
}

#define RS_FREOPEN(name)                                                      \
	RS_EXPORT FILE *name(const char *path, const char *mode, FILE *fp)   \
	{                                                                     \
		struct dup_hold h;                                            \
		int saved = errno, fd = fp ? fileno(fp) : -1;                 \
		FILE *r;                                                      \
		errno = saved;	/* fileno says EBADF for fmemopen streams */  \
		rs_ready();                                                   \
		if (__builtin_expect(rs_real.name == NULL, 0)) {              \
			errno = ENOSYS;                                       \
			return NULL;                                          \
		}                                                             \
		dup_begin(&h, -1, fd);                                        \
		r = rs_real.name(path, mode, fp);                             \
		reopen_end(&h, fd);                                           \
		rs_cov_stream(r);                                             \
		return r;                                                     \
	}

RS_FREOPEN(freopen)
RS_FREOPEN(freopen64)

/* The description's flags changed behind our back (F_SETFL by a call we
 * do not wrap): read them again.  Untracked fds are read on first use. */
static void flags_changed(int fd)
{
	int saved = errno;

	if (enter_fd_slow()) {
		rs_fdt_setfl(fd);
		rs_leave_slow();
	}
	errno = saved;
}

/*
 * F_SETFL can turn O_APPEND on or off, and with it where every write
 * through the description lands: at end of file or at the offset (or,
 * for pwrite, at end of file or at its offset).  A write that chose its
 * range under the old flags must not run under the new ones.  So the
 * change is made holding the description's offset lock and the file's
 * whole-range write lock, as dup2 is: calls in flight finish first, and
 * the flags we record are in place before anyone locks again; a call
 * that read the old flags before locking sees, once locked, that they
 * changed, and starts over (rs_io_fast and try_begin re-check them).
 * Pre:  no shim lock held by this thread, unless nested in the shim (a
 *       signal handler), when nothing is taken (dup_begin asserts it).
 * Post (setfl_end): rs_desc.flags says what the kernel's flags say, and
 *       no call locked under other flags is still running.
 */
static void setfl_begin(struct dup_hold *h, int fd)
{
	dup_begin(h, -1, fd);
}

static void setfl_end(struct dup_hold *h, int fd, int changed)
{
	int saved = errno;

	if (!h->entered) {
		/* From a signal handler inside the shim: record it at least. */
		if (changed)
			flags_changed(fd);
		errno = saved;
		return;
	}
	if (changed && h->file)
		rs_fdt_setfl(fd);
	dup_unlock(h);
	errno = saved;
}

/* The byte-range lock commands (on x86_64 the *64 ones are the same). */
static inline int lock_cmd(int cmd)
{
	return cmd == F_GETLK || cmd == F_SETLK || cmd == F_SETLKW || cmd == F_OFD_GETLK ||
	       cmd == F_OFD_SETLK || cmd == F_OFD_SETLKW;
}
_Static_assert(F_GETLK64 == F_GETLK && F_SETLK64 == F_SETLK && F_SETLKW64 == F_SETLKW,
	       "lock_cmd knows one set of lock commands");

/* fcntl's third argument is an int or a pointer; passing it on as a
 * pointer-sized value is what glibc itself does.  Lock commands on a
 * cluster file keep the application's range out of the agent's spaces
 * (cluster.c, rs_cluster_lock_args). */
#define RS_FCNTL(name)                                                        \
	RS_EXPORT int name(int fd, int cmd, ...)                              \
	{                                                                     \
		va_list ap;                                                   \
		void *arg;                                                    \
		int r;                                                        \
		va_start(ap, cmd);                                            \
		arg = va_arg(ap, void *);                                     \
		va_end(ap);                                                   \
		rs_ready();                                                   \
		if (__builtin_expect(lock_cmd(cmd), 0)) {                     \
			struct flock fl;                                      \
			if (rs_cluster_lock_args(fd, cmd, arg, &fl)) {        \
				r = REAL(int, name, (fd, cmd, &fl));          \
				return rs_cluster_lock_end(cmd, arg, &fl, r); \
			}                                                     \
		}                                                             \
		if (cmd == F_SETFL) {                                         \
			struct dup_hold h;                                    \
			setfl_begin(&h, fd);                                  \
			r = REAL(int, name, (fd, cmd, arg));                  \
			setfl_end(&h, fd, r == 0);                            \
			return r;                                             \
		}                                                             \
		r = REAL(int, name, (fd, cmd, arg));                          \
		if (r >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC))     \
			return duped(fd, r);                                  \
		return r;                                                     \
	}

RS_FCNTL(fcntl)
RS_FCNTL(fcntl64)

/* lockf calls fcntl inside glibc, where no wrapper sees it: in cluster
 * scope it is made here, as glibc makes it, through the same clamp. */
#define RS_LOCKF(name)                                                        \
	RS_EXPORT int name(int fd, int cmd, off_t len)                        \
	{                                                                     \
		rs_ready();                                                   \
		if (__builtin_expect(rs_cfg.scope == RS_SCOPE_CLUSTER, 0))    \
			return rs_cluster_lockf(fd, cmd, len);                \
		return REAL(int, name, (fd, cmd, len));                       \
	}

RS_LOCKF(lockf)
RS_LOCKF(lockf64)

/* flock where the file system makes it a whole-file lock of the lock
 * manager: the same lock on the data space (rs_cluster_flock_args).  An
 * unlock is made both ways: the description may hold a real flock (taken
 * where the mode refuses the OFD lock, LOCK_EX on a read-only descriptor),
 * which the OFD unlock alone left held, on every byte, until the last
 * close (cluster_adv_nodes::flock_unlock_readonly).  The answer is the real
 * call's. */
RS_EXPORT int flock(int fd, int op)
{
	struct flock fl;
	int cmd;

	rs_ready();
	if (__builtin_expect(rs_cluster_flock_args(fd, op, &cmd, &fl), 0)) {
		int r = REAL(int, fcntl, (fd, cmd, &fl));

		if (fl.l_type != F_UNLCK)
			return r;
	}
	return REAL(int, flock, (fd, op));
}

/* fdopen(fd, "a") turns O_APPEND on with a glibc-internal fcntl
 * (_IO_new_fdopen in libio/iofdopen.c) that no wrapper sees; afterwards
 * a write through fd appends, and must lock from end of file. */
RS_EXPORT FILE *fdopen(int fd, const char *mode)
{
	FILE *fp;

	rs_ready();
	if (__builtin_expect(rs_real.fdopen == NULL, 0)) {
		errno = ENOSYS;
		return NULL;
	}
	{
		struct dup_hold h;

		setfl_begin(&h, fd);
		fp = rs_real.fdopen(fd, mode);
		setfl_end(&h, fd, fp != NULL);
	}
	rs_cov_stream(fp);
	return fp;
}

/*
 * syscall(SYS_fcntl, fd, F_SETFL, O_APPEND) changes O_APPEND as fcntl
 * does, so syscall is wrapped too, for that one case.  The shim's own
 * system calls use rs_sys (rawsyscall.h) and never come here; the ones
 * that stand for the application's (real.c's stand-ins) call
 * rs_app_syscall, the wrapper's body.  A call may arrive before dlsym
 * has answered, or from inside it: so the system call is made here, with
 * the instruction itself, not through glibc's syscall, and nothing is
 * resolved.  Six arguments are always
 * passed, as glibc's syscall does (sysdeps/unix/sysv/linux/x86_64/
 * syscall.S reads the sixth from the caller's stack whether it was given
 * or not); the kernel ignores the ones a call does not take.  The result
 * and errno follow glibc: -4095..-1 is -1 with errno set.  Other
 * architectures are not wrapped (see limitations.md).
 */
/* glibc's clone(3) with CLONE_VM makes a thread glibc does not count
 * (posix_spawn's own clone is internal and never comes here).  glibc
 * exports it twice: __clone is the symbol and clone its weak alias, and a
 * program may call either (tests/test_adv_proc.c, fast_clone_solo), so
 * both are wrapped.  The optional arguments are passed on as read; glibc
 * reads each only when flags ask for it.
 * Without CLONE_VM it makes a process, as fork does but without the
 * atfork handlers: its child keeps the locks the parent's other threads
 * held, and its first call on such a range would wait forever
 * (test_adv_proc, fast_clone_fork).  The child starts in fn, so it is made to start in
 * clone_child first, which forgets them as fork's child does; the fn and
 * arg it needs are on our stack, which the child has a copy of. */
struct clone_start {
	int (*fn)(void *);
	void *arg;
	int flags;
};

static int clone_child(void *p)
{
	const struct clone_start *c = p;

	rs_after_clone_child(c->flags);
	return c->fn(c->arg);
}

#define RS_CLONE_WRAPPER(name)								\
	__attribute__((no_sanitize("address")))						\
	RS_EXPORT int name(int (*fn)(void *), void *stack, int flags, void *arg, ...)	\
	{										\
		va_list ap;								\
		void *ptid, *tls, *ctid;						\
											\
		va_start(ap, arg);							\
		ptid = va_arg(ap, void *);						\
		tls = va_arg(ap, void *);						\
		ctid = va_arg(ap, void *);						\
		va_end(ap);								\
		if ((flags & CLONE_VM) && !(flags & CLONE_VFORK))			\
			RS_STORE(rs_solo_ok, 0);					\
		if (flags & CLONE_VM) {							\
			RS_STORE(rs_vm_shared, 1);					\
			rs_fdt_lazy_shared();						\
		}										\
		if ((flags & CLONE_VM) && (flags & CLONE_VFORK) && !(flags & CLONE_SETTLS)) { \
			/* vfork's child on another stack, on our thread pointer:	\
			 * as vfork's (iolock.c, "vfork children"). */			\
			int d = RS_LOAD(rs_depth), r;					\
			unsigned lk = rs_lk_aside();					\
											\
			RS_STORE(rs_depth, d + RS_DEPTH_VFORK);				\
			r = REAL(int, name, (fn, stack, flags, arg, ptid, tls, ctid));	\
			RS_STORE(rs_depth, d);						\
			rs_lk_restore(lk);						\
			return r < 0 ? r : rs_vfork_parent(r);				\
		}									\
		if (!(flags & CLONE_VM) && fn) {					\
			struct clone_start c = { fn, arg, flags };				\
			int locked, r;							\
											\
			if ((flags & CLONE_FILES) && rs_ready() && !RS_LOAD(rs_depth))	\
				rs_grants_files_shared();				\
			locked = fork_begin();						\
											\
			r = REAL(int, name, (clone_child, stack, flags, &c, ptid, tls, ctid)); \
			if (locked)	/* the child went through clone_child */	\
				rs_fork_parent();					\
			return r;							\
		}									\
		return REAL(int, name, (fn, stack, flags, arg, ptid, tls, ctid));	\
	}
int __clone(int (*fn)(void *), void *stack, int flags, void *arg, ...);
RS_CLONE_WRAPPER(clone)
RS_CLONE_WRAPPER(__clone)

/*
 * vfork.  The child runs on this thread, in our memory, until it execs or
 * exits; its calls must neither use nor leave behind this thread's lock
 * state (iolock.c, "vfork children").  glibc's vfork (sysdeps/unix/sysv/
 * linux/x86_64/vfork.S) pops its return address into a register across
 * the system call, since the child's calls overwrite the stack below the
 * caller, and pushes it back; this one does the same, and around the
 * call raises rs_depth by RS_DEPTH_VFORK, which the child keeps and the
 * parent puts back as it was (the registers it saved it in are its own
 * again after the system call).  The parent then goes on in
 * rs_vfork_done.  x86-64 only: elsewhere libc's vfork is called
 * (limitations.md).
 */
#if defined(__x86_64__)
_Static_assert(RS_DEPTH_VFORK == 0x1000000, "the vfork stub adds 0x1000000");
__asm__(
	"	.text\n"
	"	.globl vfork\n"
	"	.type vfork, @function\n"
	"	.globl __vfork\n"
	"	.type __vfork, @function\n"
	"vfork:\n"
	"__vfork:\n"
	"	subq $8, %rsp\n"		/* 16-byte aligned for the call */
	"	call rs_vfork_prepare\n"
	"	addq $8, %rsp\n"
	"	movq rs_depth@gottpoff(%rip), %rdx\n"
	"	movl %fs:(%rdx), %esi\n"
	"	leal 0x1000000(%rsi), %ecx\n"
	"	movl %ecx, %fs:(%rdx)\n"
	"	popq %rdi\n"
	"	movl $58, %eax\n"		/* SYS_vfork */
	"	syscall\n"
	"	pushq %rdi\n"
	"	testq %rax, %rax\n"
	"	jz 1f\n"
	"	movl %esi, %fs:(%rdx)\n"
	"	movq %rax, %rdi\n"
	"	jmp rs_vfork_done\n"
	"1:	ret\n"
	"	.size vfork, .-vfork\n"
	"	.size __vfork, .-__vfork\n");

/* What this thread held at its vfork, set aside for the lock order
 * checks of debug builds (lockorder.h), as rs_depth is: the child's
 * calls take locks on this thread, and one killed inside a call leaves
 * them recorded here; the parent forgets them (rs_vfork_done).  A vfork
 * child that vforks again (which POSIX leaves undefined) would overwrite
 * it. */
static __thread unsigned vfork_lk __attribute__((tls_model("initial-exec")));

/* Before the child exists: it shares our memory and runs our wrappers
 * with rs_pid unchanged (iolock.h, rs_own_process), and it shares every
 * description, so none of them may still count as fresh (fdtable.h). */
void rs_vfork_prepare(void) __attribute__((used)) RS_HIDDEN;
void rs_vfork_prepare(void)
{
	int saved = errno;

	vfork_lk = rs_lk_aside();
	RS_STORE(rs_vm_shared, 1);
	rs_fdt_lazy_shared();
	errno = saved;
}

long rs_vfork_done(long r) __attribute__((used));
long rs_vfork_done(long r)
{
	rs_lk_restore(vfork_lk);
	if ((unsigned long)r > -4096UL) {
		errno = (int)-r;
		return -1;
	}
	return rs_vfork_parent((int)r);
}
#endif

/*
 * A link-map namespace other than the base one (dlmopen) may load a libc
 * of its own, whose pthread_create clears only its own copy of
 * __libc_single_threaded: ours stays set while that thread calls into
 * the base namespace's I/O, and both threads would take the copy
 * without the range lock (test_edge, dlmopen_thread).  So the first
 * dlmopen into any namespace but the base one turns the single-thread
 * shortcut off for good, before the call: a constructor in the new
 * namespace may make a thread before dlmopen returns.  The fast path
 * pays nothing new: it already reads rs_solo_ok.  Resolved on first use,
 * not in the table of real.h: it is no I/O call, and no call arrives
 * here during start-up.
 */
RS_EXPORT void *dlmopen(Lmid_t lmid, const char *file, int mode)
{
	static void *(*real_dlmopen)(Lmid_t, const char *, int);
	void *(*f)(Lmid_t, const char *, int) = __atomic_load_n(&real_dlmopen, __ATOMIC_ACQUIRE);

	if (lmid != LM_ID_BASE)
		RS_STORE(rs_solo_ok, 0);
	if (!f) {
		f = (void *(*)(Lmid_t, const char *, int))dlsym(RTLD_NEXT, "dlmopen");
		if (!f) {
			errno = ENOSYS;
			return NULL;
		}
		__atomic_store_n(&real_dlmopen, f, __ATOMIC_RELEASE);
	}
	return f(lmid, file, mode);
}

/*
 * glibc exports these functions under a second name as well, the same
 * code (__write is write): no public header declares them, but programs,
 * language runtimes and other libraries call them, and a call through one
 * unwrapped would go round the shim: unlocked writes and reads (torn:
 * test_adv_proc, fast_alias_*), and a close, dup2 or F_SETFL the fd table
 * never sees.
 * Each is its first name's wrapper (whose real call is the same function).
 */
#define RS_ALIAS(ret, second, target, params) \
	RS_EXPORT ret second params __attribute__((alias(#target), copy(target)));
RS_ALIAS(ssize_t, __read, read, (int, void *, size_t))
RS_ALIAS(ssize_t, __write, write, (int, const void *, size_t))
RS_ALIAS(ssize_t, __pread64, pread64, (int, void *, size_t, off_t))
RS_ALIAS(ssize_t, __pwrite64, pwrite64, (int, const void *, size_t, off_t))
RS_ALIAS(off_t, __lseek, lseek, (int, off_t, int))
RS_ALIAS(int, __close, close, (int))
RS_ALIAS(int, __dup2, dup2, (int, int))
RS_ALIAS(int, __fcntl, fcntl, (int, int, ...))

#ifdef RS_HAVE_RAW_SYSCALL

/* A fork made through syscall() (SYS_fork, or SYS_clone with neither a
 * shared address space nor a new stack) runs no atfork handler: without
 * ours the child would keep the parent's grant cache, and enter the
 * parent's EXSH grants as if it were one of its threads, and the range
 * locks the parent's other threads held (a call on such a range would
 * wait forever: test_adv_proc, fast_clone_fork).  clone3 takes its flags and
 * stack through a pointer (struct clone_args: flags first, stack the
 * sixth u64), read here without faulting: one that cannot be read is
 * the kernel's EFAULT. */
static int fork_like(long nr, long flags, long stack)
{
#ifdef SYS_clone3
	if (nr == SYS_clone3) {
		uint64_t ca[6];

		if ((unsigned long)stack < sizeof(ca) ||
		    rs_user_copy(ca, (const void *)flags, sizeof(ca), 0) < 0)
			return 0;
		flags = (long)ca[0];
		stack = (long)ca[5];
		nr = SYS_clone;
	}
#endif
#ifdef SYS_fork
	if (nr == SYS_fork)
		return 1;
#endif
	return nr == SYS_clone && !(flags & (CLONE_VM | CLONE_THREAD | CLONE_VFORK)) && stack == 0;
}

/* The clone flags of a fork-like call (fork_like), for the child's
 * handler: SYS_fork has none; clone3's are read again (fork_like could
 * read them, so this can). */
static long fork_flags(long nr, long a)
{
#ifdef SYS_clone3
	uint64_t ca[1];

	if (nr == SYS_clone3)
		return rs_user_copy(ca, (const void *)a, sizeof(ca), 0) < 0 ? 0 : (long)ca[0];
#endif
	return nr == SYS_clone ? a : 0;
}

/* A thread glibc does not know of (CLONE_VM without CLONE_VFORK, which
 * stops us until the child execs or exits; clone3's flags are behind a
 * pointer, so any clone3): __libc_single_threaded stays set, so rs_solo
 * must learn of it here, before the child can run (iolock.h). */
static int thread_like(long nr, long flags)
{
#ifdef SYS_clone3
	if (nr == SYS_clone3)
		return 1;
#endif
	return nr == SYS_clone && (flags & CLONE_VM) && !(flags & CLONE_VFORK);
}

/* A task sharing our memory (rs_vm_shared): a vfork, or any clone with
 * CLONE_VM (clone3's flags are behind a pointer: any clone3). */
static int vm_like(long nr, long flags)
{
#ifdef SYS_vfork
	if (nr == SYS_vfork)
		return 1;
#endif
	return thread_like(nr, flags) || (nr == SYS_clone && (flags & CLONE_VM));
}

/* System calls, made unlocked through syscall(), that may move a file
 * offset: the first argument's, and sendfile's second or splice's and
 * copy_file_range's third (RS_DESC_FRESH, fdtable.h). */
static int offset_moving(long nr)
{
	return nr == SYS_read || nr == SYS_write || nr == SYS_readv || nr == SYS_writev ||
	       nr == SYS_lseek || nr == SYS_preadv2 || nr == SYS_pwritev2 ||
	       nr == SYS_sendfile || nr == SYS_splice || nr == SYS_copy_file_range;
}

long rs_app_syscall(long nr, long a, long b, long c, long d, long e, long f)
{
	long r;

	if (__builtin_expect(nr == SYS_exit_group, 0))
		rs_exit_report();
	if (__builtin_expect(thread_like(nr, a), 0))
		RS_STORE(rs_solo_ok, 0);
	if (__builtin_expect(offset_moving(nr), 0)) {
		rs_fdt_moved((int)a);
		/* The others' third argument is a count or a whence, not a
		 * descriptor: marking the fd of that number costs it its
		 * fresh offset (an lseek more) for nothing. */
		if (nr == SYS_sendfile || nr == SYS_splice || nr == SYS_copy_file_range)
			rs_fdt_moved((int)(nr == SYS_sendfile ? b : c));
	}
	if (__builtin_expect(vm_like(nr, a), 0)) {
		RS_STORE(rs_vm_shared, 1);
		rs_fdt_lazy_shared();
	}
	if (__builtin_expect(fork_like(nr, a, b), 0)) {
		int locked;

		if ((fork_flags(nr, a) & CLONE_FILES) && rs_ready() && !RS_LOAD(rs_depth))
			rs_grants_files_shared();
		locked = fork_begin();

		r = rs_raw_syscall6(nr, a, b, c, d, e, f);
		fork_end(r, locked, fork_flags(nr, a));
	} else if (__builtin_expect(nr == SYS_fcntl && (int)b == F_SETFL, 0)) {
		struct dup_hold h;

		setfl_begin(&h, (int)a);
		r = rs_raw_syscall6(nr, a, b, c, d, e, f);
		setfl_end(&h, (int)a, r == 0);
	} else {
		r = rs_raw_syscall6(nr, a, b, c, d, e, f);
	}
	if (__builtin_expect(rs_cov_syscall_nr(nr), 0))
		rs_cov_syscall(nr, a, b, r);
	if (__builtin_expect((unsigned long)r > -4096UL, 0)) {
		errno = (int)-r;
		return -1;
	}
	return r;
}

/* va_arg past the arguments given reads the caller's frame, as glibc's
 * assembly does; ASan would take that for an overflow. */
__attribute__((no_sanitize("address")))
RS_EXPORT long syscall(long nr, ...)
{
	va_list ap;
	long a, b, c, d, e, f;

	va_start(ap, nr);
	a = va_arg(ap, long);
	b = va_arg(ap, long);
	c = va_arg(ap, long);
	d = va_arg(ap, long);
	e = va_arg(ap, long);
	f = va_arg(ap, long);
	va_end(ap);
	return rs_app_syscall(nr, a, b, c, d, e, f);
}
#else
long rs_app_syscall(long nr, long a, long b, long c, long d, long e, long f)
{
	return rs_sys(nr, a, b, c, d, e, f);
}
#endif

