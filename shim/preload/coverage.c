/*
 * Noticing I/O the shim sees but cannot coordinate, so that users learn
 * what was not protected instead of trusting a silent shim.
 *
 * Each kind below is counted in the stats as uncovered_KIND and named on
 * stderr the first time it happens in a process, at RANGESHIM_LOG=info.
 * At the default level, one line at exit names the kinds that bypassed
 * the locks of coordinated files in this process, with the first file of
 * each (major:minor:inode and path, fileid.h) where the kind names one:
 * io_uring, Linux AIO, POSIX AIO and writable shared mappings, which
 * ordinary tools do not use.  stdio and splice stay at info: coreutils
 * use stdio all the time, and every such line would cry wolf.
 * Nothing here changes what a call does: the wrappers make the real call
 * with the arguments they were given and return its result and errno.
 * stdio and splice are looked at only when stats or info logging is on,
 * so that the default leaves the fd table as it was for them.
 *
 * What is counted, and when (docs/limitations.md says why each one is
 * out of reach):
 *  - calls: splice and POSIX AIO requests naming a coordinated file, when
 *    they are made, whatever their result (as io_calls counts);
 *  - objects: io_uring rings, Linux AIO contexts, writable MAP_SHARED
 *    mappings and stdio streams of coordinated files, once each, when
 *    they have been created.
 *
 * Rings and AIO contexts: liburing makes its system calls with inline
 * assembly, so no wrapper sees them.  Debian's libaio and fio's io_uring
 * engine go through syscall(), which interpose.c hands to us.  The rest
 * are found when the report is written: AIO rings in /proc/self/maps
 * ("/[aio]"), and io_uring descriptors in /proc/self/fd
 * ("anon_inode:[io_uring]") once the maps show a ring's mapping, minus the
 * ones already counted (the idea of reading
 * /proc/self/maps for what a preload library cannot intercept is
 * Darshan's and lsof's; the code is ours).
 */
#include <aio.h>
#include <errno.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "coverage.h"
#include "fdtable.h"
#include "iolock.h"
#include "log.h"
#include "filewaits.h"
#include "stats.h"
#include "rawsyscall.h"
#include "real.h"
#include "fileid.h"
#include "elfinterp.h"

#include <stdlib.h>

#define RS_EXPORT __attribute__((visibility("default")))

/* X(kind, what is not coordinated); counted as uncovered_<kind>. */
#define RS_COV_KINDS(X) \
	X(io_uring,  "I/O submitted through an io_uring ring") \
	X(aio,       "I/O submitted through a Linux AIO context (io_setup/io_submit)") \
	X(posix_aio, "POSIX AIO (aio_read/aio_write/lio_listio) on a coordinated file") \
	X(splice,    "splice on a coordinated file") \
	X(mmap,      "stores through a writable MAP_SHARED mapping of a coordinated file") \
	X(stdio,     "reads and writes through a stdio stream on a coordinated file")

enum {
#define RS_COV_ENUM(kind, what) COV_##kind,
	RS_COV_KINDS(RS_COV_ENUM)
#undef RS_COV_ENUM
	COV_NKINDS
};

static const char *const cov_name[COV_NKINDS] = {
#define RS_COV_NAME(kind, what) #kind,
	RS_COV_KINDS(RS_COV_NAME)
#undef RS_COV_NAME
};

static const char *const cov_what[COV_NKINDS] = {
#define RS_COV_WHAT(kind, what) what,
	RS_COV_KINDS(RS_COV_WHAT)
#undef RS_COV_WHAT
};

/* ---- the real calls ------------------------------------------------- */

/*
 * TSan's runtime maps memory through our mmap while it is being set up
 * (its symbolizer, from _dl_init, before any constructor): anything
 * instrumented on that path crashes the program.  So mmap and this
 * stand-in are left uninstrumented, and the stand-in makes the system
 * call itself (rs_mmap) rather than through the instrumented
 * rs_app_syscall.
 */
#if defined(__SANITIZE_THREAD__)
#define RS_NO_TSAN __attribute__((no_sanitize_thread))
#else
#define RS_NO_TSAN
#endif

RS_NO_TSAN static void *raw_mmap(void *a, size_t n, int prot, int flags, int fd, off_t off)
{
	return rs_mmap(a, n, prot, flags, fd, off);
}

static ssize_t raw_splice(int in, loff_t *ioff, int out, loff_t *ooff, size_t n, unsigned fl)
{
	return rs_app_syscall(SYS_splice, in, (long)ioff, out, (long)ooff, (long)n, fl);
}

/* X(return type, name, parameter list), as real.h's table. */
#define RS_COV_CALLS(X) \
	X(void *, mmap, (void *, size_t, int, int, int, off_t)) \
	X(void *, mmap64, (void *, size_t, int, int, int, off64_t)) \
	X(ssize_t, splice, (int, loff_t *, int, loff_t *, size_t, unsigned)) \
	X(int, aio_read, (struct aiocb *)) \
	X(int, aio_write, (struct aiocb *)) \
	X(int, aio_read64, (struct aiocb64 *)) \
	X(int, aio_write64, (struct aiocb64 *)) \
	X(int, lio_listio, (int, struct aiocb *const[], int, struct sigevent *)) \
	X(int, lio_listio64, (int, struct aiocb64 *const[], int, struct sigevent *)) \
	X(FILE *, fopen, (const char *, const char *)) \
	X(FILE *, fopen64, (const char *, const char *))

static struct {
#define RS_COV_PTR(ret, name, params) ret (*name) params;
	RS_COV_CALLS(RS_COV_PTR)
#undef RS_COV_PTR
} cov_real = {
	/* The shim's own tables are mapped before dlsym has answered. */
	.mmap = raw_mmap, .mmap64 = raw_mmap, .splice = raw_splice,
};

void rs_cov_resolve(void)
{
#define RS_COV_RESOLVE(ret, name, params) { \
		void *p = dlsym(RTLD_NEXT, #name); \
		if (p) \
			__atomic_store_n(&cov_real.name, (ret (*) params)p, __ATOMIC_RELEASE); \
	}
	RS_COV_CALLS(RS_COV_RESOLVE)
#undef RS_COV_RESOLVE
}

/* The real call; ENOSYS (with the call's failure value) only while dlsym
 * itself is recursing into us. */
#define COV_REAL(fail, name, args)                                            \
	(__builtin_expect(__atomic_load_n(&cov_real.name, __ATOMIC_ACQUIRE) != NULL, 1) \
		 ? cov_real.name args : (errno = ENOSYS, (fail)))

/* ---- counting and naming -------------------------------------------- */

static _Atomic int said[COV_NKINDS];
/* Standard streams already counted (bits: stdin, stdout, stderr). */
static _Atomic int std_counted;
/* For the line at exit: how many of each kind, and the first file of
 * each (claimed by the first to set named_state 1, readable at 2). */
static _Atomic unsigned long seen_count[COV_NKINDS];
static _Atomic int named_state[COV_NKINDS];
static char first_file[COV_NKINDS][RS_FILE_NAME_LEN];
/* Of seen_count[COV_mmap], mappings the program locks itself. */
static _Atomic unsigned long mmap_own_locked;

void rs_cov_fork_child(void)
{
	RS_ZERO_IF_SET(std_counted);
	for (int i = 0; i < COV_NKINDS; i++) {
		RS_ZERO_IF_SET(said[i]);
		RS_ZERO_IF_SET(seen_count[i]);
		RS_ZERO_IF_SET(named_state[i]);
	}
	RS_ZERO_IF_SET(mmap_own_locked);
}

/* Is anyone listening?  Otherwise the wrappers only pass calls on.  Not
 * before start-up has finished (it maps the shim's tables), and not in a
 * process that coordinates nothing (RANGESHIM_SCOPE=off). */
static inline int cov_on(void)
{
	return (RS_LOAD(rs_stats_on) || RS_LOAD(rs_log_level) >= RS_LOG_INFO) &&
	       atomic_load_explicit(&rs_state, memory_order_acquire) == RS_READY;
}

/* The kinds the line at exit names are watched also when nobody listens. */
static inline int said_at_exit(int kind)
{
	return kind != COV_stdio && kind != COV_splice;
}

static inline int cov_on_kind(int kind)
{
	return cov_on() || (said_at_exit(kind) &&
			    atomic_load_explicit(&rs_state, memory_order_acquire) == RS_READY);
}

static void say(int kind, int fd)
{
	char link[40], path[256] = "";
	long n = -1;

	if (fd >= 0) {
		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		n = rs_sys(SYS_readlinkat, AT_FDCWD, link, path, sizeof(path) - 1);
	}
	path[n > 0 ? n : 0] = '\0';
	if (fd >= 0)
		rs_info("NOT coordinated: %s (fd %d%s%s); counted as uncovered_%s",
			cov_what[kind], fd, path[0] ? ", " : "", path, cov_name[kind]);
	else
		rs_info("NOT coordinated: %s; counted as uncovered_%s",
			cov_what[kind], cov_name[kind]);
}

/* The first file of kind, for the line at exit. */
static void name_first(int kind, int fd)
{
	struct stat st;
	char path[RS_FILE_NAME_LEN - RS_FILE_ID_LEN], link[40];
	int z = 0;
	long n;

	if (fd < 0 || !atomic_compare_exchange_strong(&named_state[kind], &z, 1))
		return;
	if (rs_sys(SYS_fstat, fd, &st) < 0) {
		snprintf(first_file[kind], sizeof first_file[kind], "fd %d", fd);
	} else {
		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		n = rs_sys(SYS_readlinkat, AT_FDCWD, link, path, sizeof(path) - 1);
		path[n > 0 ? n : 0] = '\0';
		rs_file_id(first_file[kind], sizeof first_file[kind], (uint64_t)st.st_dev,
			   (uint64_t)st.st_ino);
		if (n > 0) {
			size_t l = strlen(first_file[kind]);

			snprintf(first_file[kind] + l, sizeof first_file[kind] - l, " %s", path);
		}
	}
	atomic_store_explicit(&named_state[kind], 2, memory_order_release);
}

/* One more of kind; fd (or -1) names the file in the info line. */
static void noticed(int kind, int fd)
{
	int saved = errno;

	atomic_fetch_add_explicit(&seen_count[kind], 1, memory_order_relaxed);
	name_first(kind, fd);
	switch (kind) {
#define RS_COV_COUNT(k, what) case COV_##k: RS_COUNT(uncovered_##k, 1); break;
	RS_COV_KINDS(RS_COV_COUNT)
#undef RS_COV_COUNT
	}
	/* And for its file, when the call names one. */
	if (__builtin_expect(rs_stats_on, 0) && fd >= 0)
		rs_fw_uncovered(fd);
	if (RS_LOAD(rs_log_level) >= RS_LOG_INFO &&
	    !atomic_exchange_explicit(&said[kind], 1, memory_order_relaxed))
		say(kind, fd);
	errno = saved;
}

enum look {
	CLASSIFY,       /* an fd first seen here is classified, as its first
			 * coordinated call would do */
	FRESH,          /* fopen just opened it, under a number whose entry
			 * may be stale: classify it afresh */
	LOOK_ONLY,      /* report time: no table mutex (see rs_cov_scan) */
};

/* An fd the table does not know, judged as fdtable.c's wanted() would,
 * with raw system calls and without the table. */
static int would_coordinate(int fd)
{
	char link[40], path[4096];
	struct stat st;
	long n;

	if (rs_sys(SYS_fstat, fd, &st) < 0 || !S_ISREG(st.st_mode))
		return 0;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = rs_sys(SYS_readlinkat, AT_FDCWD, link, path, sizeof(path) - 1);
	if (n <= 0 || path[0] != '/')
		return 1;
	path[n] = '\0';
	return rs_config_path_wanted(&rs_cfg, path);
}

/*
 * Is fd a coordinated file?  Not from a signal handler inside the shim
 * (the table mutex may be held), and a vfork child only looks: it shares
 * our memory, not our fds.
 */
static int coordinated(int fd, enum look how)
{
	int saved = errno, r;
	uint64_t e;

	if (fd < 0)
		return 0;
	if (how == LOOK_ONLY) {
		e = rs_fdt_get(fd);
		r = e == RS_FD_UNKNOWN || (e & 3) == RS_FD_LAZY ? would_coordinate(fd)
							      : (e & 3) == RS_FD_TRACKED;
		errno = saved;
		return r;
	}
	if (!rs_enter_slow())
		return 0;
	e = rs_fdt_get(fd);
	if ((how == FRESH || e == RS_FD_UNKNOWN || (e & 3) == RS_FD_LAZY) && rs_own_process()) {
		if (how == FRESH)
			rs_fdt_replaced(fd);
		else
			rs_fdt_classify(fd);
		e = rs_fdt_get(fd);
	}
	rs_leave_slow();
	errno = saved;
	return (e & 3) == RS_FD_TRACKED;
}

static void notice_fd(int kind, int fd)
{
	if (cov_on_kind(kind) && coordinated(fd, CLASSIFY))
		noticed(kind, fd);
}

/* ---- the wrappers --------------------------------------------------- */

/* Look before the call: a call is counted whatever its result. */
#define RS_COV_BEFORE(ret, name, params, args, fail, look)                    \
	RS_EXPORT ret name params                                             \
	{                                                                     \
		rs_ready();                                                   \
		look;                                                         \
		return COV_REAL(fail, name, args);                            \
	}

/* Look at what the call made (r): an object is counted once it exists. */
#define RS_COV_AFTER(ret, name, params, args, fail, look)                     \
	RS_EXPORT ret name params                                             \
	{                                                                     \
		ret r;                                                        \
		rs_ready();                                                   \
		r = COV_REAL(fail, name, args);                               \
		look;                                                         \
		return r;                                                     \
	}

/* splice moves file data through a pipe inside the kernel, with no call
 * we lock.  vmsplice and tee take only pipes, so the file data they see
 * came through a splice, which is counted. */
RS_COV_BEFORE(ssize_t, splice,
	      (int in, loff_t *in_off, int out, loff_t *out_off, size_t len, unsigned flags),
	      (in, in_off, out, out_off, len, flags), -1,
	      if (cov_on()) {
		      if (coordinated(in, CLASSIFY))
			      noticed(COV_splice, in);
		      else if (coordinated(out, CLASSIFY))
			      noticed(COV_splice, out);
	      })

/* glibc's POSIX AIO runs the requests on its own threads with internal
 * calls.  The aiocb is read only as glibc itself reads it first thing
 * (the prototypes say non-NULL; NULL crashes there, and here). */
#define RS_COV_AIO(name, cb_t)                                                \
	RS_COV_BEFORE(int, name, (cb_t *cb), (cb), -1,                        \
		      notice_fd(COV_posix_aio, cb->aio_fildes))

RS_COV_AIO(aio_read, struct aiocb)
RS_COV_AIO(aio_write, struct aiocb)
RS_COV_AIO(aio_read64, struct aiocb64)
RS_COV_AIO(aio_write64, struct aiocb64)

/* One count per request; glibc rejects a bad mode before it reads the
 * list, and skips NULL entries and LIO_NOP. */
#define RS_COV_LIO(name, cb_t)                                                \
	RS_COV_BEFORE(int, name,                                              \
		      (int mode, cb_t *const list[], int n, struct sigevent *sig), \
		      (mode, list, n, sig), -1,                               \
		      if ((mode == LIO_WAIT || mode == LIO_NOWAIT) && cov_on_kind(COV_posix_aio)) \
			      for (int i = 0; i < n; i++)                     \
				      if (list[i] && list[i]->aio_lio_opcode != LIO_NOP) \
					      notice_fd(COV_posix_aio, list[i]->aio_fildes))

RS_COV_LIO(lio_listio, struct aiocb)
RS_COV_LIO(lio_listio64, struct aiocb64)

/*
 * glibc opens the stream's file with an internal open that our open
 * wrapper does not see, and reads and writes it the same way.  The fd is
 * classified here (only when someone listens), which also replaces any
 * stale entry the number had.  The standard streams are open before
 * main, with no call to see: one that has a buffer has been read or
 * written through, which is looked at when it is closed and at report
 * time, and counted once.
 */
extern FILE _IO_2_1_stdin_, _IO_2_1_stdout_, _IO_2_1_stderr_;

static int std_bit(const FILE *fp)
{
	return fp == &_IO_2_1_stdin_ ? 1 : fp == &_IO_2_1_stdout_ ? 2 :
	       fp == &_IO_2_1_stderr_ ? 4 : 0;
}

static void notice_stream(FILE *fp, enum look how)
{
	int saved = errno, fd, bit;

	if (!fp || !cov_on())
		return;
	fd = fp->_fileno;
	bit = std_bit(fp);
	if (fd >= 0 && coordinated(fd, how) &&
	    !(bit && (atomic_fetch_or(&std_counted, bit) & bit)))
		noticed(COV_stdio, fd);
	errno = saved;
}

void rs_cov_stream(FILE *fp)
{
	notice_stream(fp, CLASSIFY);
}

/* No call into stdio, which may hold the stream's lock. */
static void notice_std(FILE *fp, enum look how)
{
	if (fp->_IO_buf_base && cov_on())
		notice_stream(fp, how);
}

void rs_cov_closing(FILE *fp)
{
	if (std_bit(fp))
		notice_std(fp, CLASSIFY);
}

#define RS_COV_FOPEN(name)                                                    \
	RS_COV_AFTER(FILE *, name, (const char *path, const char *mode), (path, mode), \
		     NULL, notice_stream(r, FRESH))

RS_COV_FOPEN(fopen)
RS_COV_FOPEN(fopen64)

/*
 * Stores through a shared writable mapping reach the file without a
 * call.  Read-only and private mappings are not counted.  The shim maps
 * its own tables through here too (-Bsymbolic-functions): those calls
 * are made during start-up or from inside a wrapper (rs_depth raised),
 * and anonymous maps (allocators) leave at the first test.
 */
static inline __attribute__((always_inline)) int shared_writable(int prot, int flags, int fd)
{
	int type = flags & MAP_TYPE;

	return fd >= 0 && (prot & PROT_WRITE) && !(flags & MAP_ANONYMOUS) &&
	       (type == MAP_SHARED || type == MAP_SHARED_VALIDATE);
}

/*
 * Does the program hold a lock of its own through fd's description?
 * SQLite's WAL index (-shm) and LMDB's lock file are mapped shared and
 * writable, and the program orders its stores with fcntl locks taken
 * through the same descriptor: the kernel lists those in fdinfo.  Such a
 * mapping is still counted (stats), but the line at exit leaves it out:
 * the program coordinates that file itself, and naming it in every
 * SQLite process would teach users to ignore the line.
 */
static int locked_by_program(int fd)
{
	char path[48], buf[1024];
	long f, n;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	f = rs_sys(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
	if (f < 0)
		return 0;
	n = rs_sys(SYS_read, f, buf, sizeof(buf) - 1);
	rs_sys(SYS_close, f);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	return strstr(buf, "\nlock:") != NULL;
}

static void notice_map(void *p, int fd)
{
	if (p == MAP_FAILED || RS_LOAD(rs_depth) || !cov_on_kind(COV_mmap) ||
	    rs_fd_private(fd) || !coordinated(fd, CLASSIFY))
		return;
	if (locked_by_program(fd)) {
		atomic_fetch_add_explicit(&mmap_own_locked, 1, memory_order_relaxed);
		noticed(COV_mmap, -1);
	} else {
		noticed(COV_mmap, fd);
	}
}

#define RS_COV_MMAP(name, off_t_)                                             \
	RS_EXPORT RS_NO_TSAN                                                  \
	void *name(void *addr, size_t len, int prot, int flags, int fd, off_t_ off) \
	{                                                                     \
		void *p = COV_REAL(MAP_FAILED, name, (addr, len, prot, flags, fd, off)); \
		if (__builtin_expect(shared_writable(prot, flags, fd), 0))   \
			notice_map(p, fd);                                    \
		return p;                                                     \
	}

RS_COV_MMAP(mmap, off_t)
RS_COV_MMAP(mmap64, off64_t)

/* ---- rings and contexts --------------------------------------------- */

/*
 * Which rings (fd + 1) and AIO contexts (the ring's address, which is the
 * context id io_setup returns) were counted when created, so that the
 * scan at report time counts only the others.  Errors go one way only,
 * down: a ring closed and another opened under its number by liburing is
 * taken for the first, and once a set is full (the last slot says so)
 * nothing more is found by submitting or by the scan (docs/limitations.md).
 */
#define COV_SEEN 64
#define COV_FULL (~0UL)
static _Atomic unsigned long seen_uring[COV_SEEN];
static _Atomic unsigned long seen_aio[COV_SEEN];

/* Known, or not knowable (full). */
static int seen(_Atomic unsigned long *set, unsigned long v)
{
	for (int i = 0; i < COV_SEEN; i++) {
		unsigned long x = atomic_load_explicit(&set[i], memory_order_relaxed);

		if (x == v || x == COV_FULL)
			return 1;
		if (x == 0)
			return 0;
	}
	return 1;
}

/* 1 if v is new and now remembered; 0 if known or the set is full. */
static int remember(_Atomic unsigned long *set, unsigned long v)
{
	for (int i = 0; i < COV_SEEN; i++) {
		unsigned long x = 0;

		if (atomic_compare_exchange_strong(&set[i], &x, i == COV_SEEN - 1 ? COV_FULL : v))
			return i < COV_SEEN - 1;
		if (x == v || x == COV_FULL)
			return 0;
	}
	return 0;
}

void rs_cov_syscall(long nr, long a, long b, long r)
{
	unsigned long ctx;

	if ((unsigned long)r > -4096UL || !cov_on_kind(COV_io_uring))
		return;		/* failed: nothing was made */
	if (nr == SYS_io_uring_setup) {
		remember(seen_uring, (unsigned long)r + 1);
		noticed(COV_io_uring, -1);
	} else if (nr == SYS_io_setup) {
		/* Written by the kernel: readable. */
		ctx = *(const unsigned long *)b;
		remember(seen_aio, ctx);
		noticed(COV_aio, -1);
	} else if (nr == SYS_io_submit && remember(seen_aio, (unsigned long)a)) {
		noticed(COV_aio, -1);
	}
}

/*
 * The scan runs where the report is written, which may be _exit in a
 * child forked from a threaded parent, or in a thread while another one
 * holds the fd table's mutex: it uses raw system calls and the stack
 * only, no stdio, no malloc, none of the shim's locks.
 */
struct dirent64_ {
	uint64_t ino;
	int64_t off;
	unsigned short reclen;
	unsigned char type;
	char name[];
};

static int small_atoi(const char *s)
{
	int n = 0;

	if (!*s)
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || n > 100000000)
			return -1;
		n = n * 10 + (*s - '0');
	}
	return n;
}

static void scan_fds(void)
{
	static const char ring[] = "anon_inode:[io_uring]";
	char buf[4096], link[64];
	long dir, n, k;

	dir = rs_sys(SYS_openat, AT_FDCWD, "/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0)
		return;
	while ((n = rs_sys(SYS_getdents64, dir, buf, sizeof(buf))) > 0) {
		for (long at = 0; at < n;) {
			struct dirent64_ *d = (struct dirent64_ *)(buf + at);
			int fd = small_atoi(d->name);

			at += d->reclen;
			if (fd < 0 || fd == dir)
				continue;
			k = rs_sys(SYS_readlinkat, dir, d->name, link, sizeof(link));
			if (k == (long)sizeof(ring) - 1 && memcmp(link, ring, (size_t)k) == 0 &&
			    !seen(seen_uring, (unsigned long)fd + 1))
				noticed(COV_io_uring, -1);
		}
	}
	rs_sys(SYS_close, dir);
}

/* Does s (len bytes) hold what (a string literal)? */
#define HOLDS(s, len, what) holds(s, len, what, sizeof(what) - 1)

static int holds(const char *s, size_t len, const char *what, size_t n)
{
	for (size_t i = 0; i + n <= len; i++)
		if (memcmp(s + i, what, n) == 0)
			return 1;
	return 0;
}

/* One line of /proc/self/maps: an AIO ring nobody counted yet?  An
 * io_uring ring's mapping sets *uring. */
static void maps_line(const char *s, size_t len, int *uring)
{
	unsigned long start = 0;
	size_t i;

	if (HOLDS(s, len, " anon_inode:[io_uring]"))
		*uring = 1;
	if (!HOLDS(s, len, " /[aio]"))
		return;
	for (i = 0; i < len; i++) {
		char c = s[i];
		int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;

		if (v < 0)
			break;
		start = start * 16 + (unsigned long)v;
	}
	if (!seen(seen_aio, start))
		noticed(COV_aio, -1);
}

/*
 * PROCMAP_QUERY (Linux 6.11, include/uapi/linux/fs.h): the kernel hands
 * over one mapping at a time, here only shared ones, instead of every
 * mapping as text.  Rings of both kinds are shared mappings, and few
 * others are: at exit the query took 11 us where the text took 46
 * (docs/benchmarks.md).  Declared here: Debian 12's headers predate it.
 */
struct pm_query {
	uint64_t size, query_flags, query_addr;
	uint64_t vma_start, vma_end, vma_flags, vma_page_size, vma_offset, inode;
	uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
	uint64_t vma_name_addr, build_id_addr;
};
#define PM_QUERY _IOWR('f', 17, struct pm_query)
#define PM_SHARED 0x08u
#define PM_COVERING_OR_NEXT 0x10u

/* Does the name (len bytes, NUL included) start with what (a literal)? */
#define NAMED(name, len, what) \
	((len) >= sizeof(what) && memcmp(name, what, sizeof(what) - 1) == 0)

/* Returns whether an io_uring ring is mapped, or -1 if the kernel cannot
 * say (before 6.11, or a name longer than ours): then read the text.
 * Nothing is noticed until the last mapping has answered, so that a
 * query cut short counts nothing twice. */
static __attribute__((noinline)) int query_maps(long fd)
{
	char name[4096];
	uint64_t addr = 0;
	int uring = 0, naio = 0;

	/* Written by the kernel, through an ioctl valgrind does not know:
	 * memcheck would take every name as unset. */
	memset(name, 0, 32);
	for (;;) {
		struct pm_query q = {
			.size = sizeof(q),
			.query_flags = PM_SHARED | PM_COVERING_OR_NEXT,
			.query_addr = addr,
			.vma_name_addr = (uintptr_t)name,
			.vma_name_size = sizeof(name),
		};

		if (rs_sys(SYS_ioctl, fd, PM_QUERY, &q) < 0)
			break;
		if (q.vma_end <= addr)
			return -1;	/* no progress: trust the text */
		addr = q.vma_end;
		if (NAMED(name, q.vma_name_size, "anon_inode:[io_uring]"))
			uring = 1;
		if (NAMED(name, q.vma_name_size, "/[aio]") && !seen(seen_aio, q.vma_start))
			naio++;
	}
	if (errno != ENOENT)
		return -1;
	while (naio--)
		noticed(COV_aio, -1);
	return uring;
}

/* The text of fd, /proc/self/maps: whether an io_uring ring is mapped. */
static __attribute__((noinline)) int read_maps(long fd)
{
	char buf[4096];
	int uring = 0;
	size_t have = 0;
	long n;
	int cut = 0;	/* inside the rest of a line too long for buf */

	while ((n = rs_sys(SYS_read, fd, buf + have, sizeof(buf) - have)) > 0) {
		size_t end = have + (size_t)n, from = 0;

		for (size_t i = 0; i < end; i++)
			if (buf[i] == '\n') {
				if (!cut)
					maps_line(buf + from, i - from, &uring);
				cut = 0;
				from = i + 1;
			}
		/* A line longer than buf (a long path): its start address
		 * and " /[aio]" come first, so its head is enough. */
		if (from == 0 && end == sizeof(buf)) {
			if (!cut)
				maps_line(buf, end, &uring);
			cut = 1;
			from = end;
		}
		have = end - from;
		memmove(buf, buf + from, have);
	}
	return uring;
}

/* Returns whether an io_uring ring is mapped.  The query and the text
 * each have a page of stack, one after the other (noinline): the scan
 * may run on a thread's small stack. */
static int scan_maps(void)
{
	long fd = rs_sys(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC);
	int uring;

	if (fd < 0)
		return 1;	/* cannot tell: look at the descriptors */
	uring = query_maps(fd);
	if (uring < 0)
		uring = read_maps(fd);
	rs_sys(SYS_close, fd);
	return uring;
}

/*
 * Once, at exit, at the default log level: what bypassed the locks of
 * coordinated files here.  At info every kind was named when it first
 * happened, so this would say it twice.
 */
static void say_at_exit(void)
{
	char line[1024];
	size_t n = 0;

	if (RS_LOAD(rs_log_level) >= RS_LOG_INFO)
		return;
	for (int k = 0; k < COV_NKINDS && n < sizeof line; k++) {
		unsigned long c = atomic_load_explicit(&seen_count[k], memory_order_relaxed);

		if (k == COV_mmap)
			c -= atomic_load_explicit(&mmap_own_locked, memory_order_relaxed);
		if (!c || !said_at_exit(k))
			continue;
		n += (size_t)snprintf(line + n, sizeof line - n, "%s%s (%lu", n ? "; " : "",
				      cov_what[k], c);
		if (n < sizeof line && atomic_load_explicit(&named_state[k], memory_order_acquire) == 2)
			n += (size_t)snprintf(line + n, sizeof line - n, ", first: file %s",
					      first_file[k]);
		else if (n < sizeof line && (k == COV_io_uring || k == COV_aio))
			n += (size_t)snprintf(line + n, sizeof line - n, ", files not known");
		if (n < sizeof line)
			n += (size_t)snprintf(line + n, sizeof line - n, ")");
	}
	if (n)
		rs_warn("NOT coordinated in this process: %s", line);
}

void rs_cov_scan(void)
{
	int saved = errno;

	if (atomic_load_explicit(&rs_state, memory_order_acquire) != RS_READY)
		return;
	/* A ring submits through memory it shares with the kernel, so a
	 * ring in use is mapped: the descriptors (a look at each) are read
	 * only when the mappings show one, and most processes pay one read
	 * of /proc/self/maps at exit. */
	if (scan_maps())
		scan_fds();
	if (cov_on()) {
		notice_std(&_IO_2_1_stdin_, LOOK_ONLY);
		notice_std(&_IO_2_1_stdout_, LOOK_ONLY);
		notice_std(&_IO_2_1_stderr_, LOOK_ONLY);
	}
	say_at_exit();
	errno = saved;
}

/* The program execvp would run for file, into out; 0 if found. */
static int exec_target(const char *file, int search, char *out, size_t len)
{
	const char *path = getenv("PATH");

	if (!search || strchr(file, '/')) {
		snprintf(out, len, "%s", file);
		return 0;
	}
	if (!path)
		path = "/bin:/usr/bin";
	for (const char *p = path;; p += strcspn(p, ":") + 1) {
		size_t n = strcspn(p, ":");

		snprintf(out, len, "%.*s%s%s", (int)n, p, n ? "/" : "", file);
		if (rs_sys(SYS_faccessat, AT_FDCWD, out, X_OK) == 0)
			return 0;
		if (!p[n])
			return -1;
	}
}

/*
 * Only raw system calls, snprintf and the stack: this may run in a vfork
 * child, whose memory is its parent's.  Only the exec's file is looked
 * at, never the I/O path.  The report carries no counters: "uninstrumented"
 * says why there are none.
 */
void rs_cov_exec(const char *file, char *const argv[], int search, long pid)
{
	static const char why[] = "statically linked (no ELF interpreter): no library "
				  "can be preloaded into it";
	char target[1024], cmd[1024], buf[4096];
	unsigned long n = 0;
	int saved = errno;
	struct timespec ts;

	if (!rs_stats_on || rs_cfg.stats != RS_STATS_FILE || !strstr(rs_cfg.stats_path, "%p") ||
	    !file || exec_target(file, search, target, sizeof target) < 0 ||
	    rs_elf_path_has_interp(target) != 0) {
		errno = saved;
		return;
	}
	cmd[0] = '\0';
	for (size_t i = 0, k = 0; argv && argv[i] && k + 1 < sizeof cmd; i++) {
		int w = snprintf(cmd + k, sizeof cmd - k, "%s%s", i ? " " : "", argv[i]);

		if (w < 0)
			break;
		k += (size_t)w;
	}
	/* A vfork child shares rs_pid with its parent: ask the kernel. */
	if (!pid)
		pid = rs_sys(SYS_getpid);
	clock_gettime(CLOCK_REALTIME, &ts);
#define APPEND_S(s) n = rs_json_str(buf, sizeof buf, n, (s))
#define APPEND_F(...)                                                           \
	do {                                                                    \
		int k_ = snprintf(buf + n, n < sizeof buf ? sizeof buf - n : 0, __VA_ARGS__); \
		if (k_ > 0)                                                     \
			n += (unsigned long)k_;                                 \
	} while (0)
	APPEND_F("{\"pid\": %ld, \"ppid\": %ld, \"uid\": %lu, \"start_ns\": %llu, \"end_ns\": %llu, "
		 "\"program\": ", pid, pid == rs_sys(SYS_getpid) ? (long)rs_sys(SYS_getppid) : (long)rs_sys(SYS_getpid), (unsigned long)getuid(),
		 (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec,
		 (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec);
	APPEND_S(strrchr(target, '/') ? strrchr(target, '/') + 1 : target);
	APPEND_F("%s", ", \"cmdline\": ");
	APPEND_S(cmd);
	APPEND_F("%s", ", \"exe_path\": ");
	APPEND_S(target);
	APPEND_F("%s", ", \"uninstrumented\": ");
	APPEND_S(why);
	APPEND_F("%s", "}\n");
#undef APPEND_S
#undef APPEND_F
	if (n < sizeof buf)
		rs_write_stats_file(rs_cfg.stats_path, pid, buf, (int)n);
	errno = saved;
}
