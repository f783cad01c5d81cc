/*
 * The real libc functions behind every wrapper, resolved once with
 * dlsym(RTLD_NEXT).  The list is the single table every wrapper and the
 * resolver are generated from (Darshan's darshan-posix.c keeps the same
 * shape).
 */
#ifndef RS_REAL_H
#define RS_REAL_H

#include <pthread.h>
#include <stdio.h>
#include <sys/types.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>

/* X(return type, name, parameter list) */
#define RS_REAL_CALLS(X) \
	X(int, open, (const char *, int, ...)) \
	X(int, open64, (const char *, int, ...)) \
	X(int, openat, (int, const char *, int, ...)) \
	X(int, openat64, (int, const char *, int, ...)) \
	X(int, creat, (const char *, mode_t)) \
	X(int, creat64, (const char *, mode_t)) \
	X(int, __open_2, (const char *, int)) \
	X(int, __open64_2, (const char *, int)) \
	X(int, __openat_2, (int, const char *, int)) \
	X(int, __openat64_2, (int, const char *, int)) \
	X(int, close, (int)) \
	X(int, close_range, (unsigned, unsigned, int)) \
	X(void, closefrom, (int)) \
	X(pid_t, _Fork, (void)) \
	X(int, clone, (int (*)(void *), void *, int, void *, ...)) \
	X(int, __clone, (int (*)(void *), void *, int, void *, ...)) \
	X(int, pthread_cancel, (pthread_t)) \
	X(int, fclose, (FILE *)) \
	X(FILE *, fdopen, (int, const char *)) \
	X(FILE *, freopen, (const char *, const char *, FILE *)) \
	X(FILE *, freopen64, (const char *, const char *, FILE *)) \
	X(int, dup, (int)) \
	X(int, dup2, (int, int)) \
	X(int, dup3, (int, int, int)) \
	X(int, fcntl, (int, int, ...)) \
	X(int, fcntl64, (int, int, ...)) \
	X(int, flock, (int, int)) \
	X(int, lockf, (int, int, off_t)) \
	X(int, lockf64, (int, int, off_t)) \
	X(ssize_t, read, (int, void *, size_t)) \
	X(ssize_t, write, (int, const void *, size_t)) \
	X(ssize_t, pread, (int, void *, size_t, off_t)) \
	X(ssize_t, pread64, (int, void *, size_t, off_t)) \
	X(ssize_t, pwrite, (int, const void *, size_t, off_t)) \
	X(ssize_t, pwrite64, (int, const void *, size_t, off_t)) \
	X(ssize_t, readv, (int, const struct iovec *, int)) \
	X(ssize_t, writev, (int, const struct iovec *, int)) \
	X(ssize_t, preadv, (int, const struct iovec *, int, off_t)) \
	X(ssize_t, preadv64, (int, const struct iovec *, int, off_t)) \
	X(ssize_t, pwritev, (int, const struct iovec *, int, off_t)) \
	X(ssize_t, pwritev64, (int, const struct iovec *, int, off_t)) \
	X(ssize_t, preadv2, (int, const struct iovec *, int, off_t, int)) \
	X(ssize_t, preadv64v2, (int, const struct iovec *, int, off_t, int)) \
	X(ssize_t, pwritev2, (int, const struct iovec *, int, off_t, int)) \
	X(ssize_t, pwritev64v2, (int, const struct iovec *, int, off_t, int)) \
	X(ssize_t, __read_chk, (int, void *, size_t, size_t)) \
	X(ssize_t, __pread_chk, (int, void *, size_t, off_t, size_t)) \
	X(ssize_t, __pread64_chk, (int, void *, size_t, off_t, size_t)) \
	X(off_t, lseek, (int, off_t, int)) \
	X(off_t, lseek64, (int, off_t, int)) \
	X(int, ftruncate, (int, off_t)) \
	X(int, ftruncate64, (int, off_t)) \
	X(int, truncate, (const char *, off_t)) \
	X(int, truncate64, (const char *, off_t)) \
	X(int, fallocate, (int, int, off_t, off_t)) \
	X(int, fallocate64, (int, int, off_t, off_t)) \
	X(int, posix_fallocate, (int, off_t, off_t)) \
	X(int, posix_fallocate64, (int, off_t, off_t)) \
	X(ssize_t, copy_file_range, (int, off_t *, int, off_t *, size_t, unsigned)) \
	X(ssize_t, sendfile, (int, int, off_t *, size_t)) \
	X(ssize_t, sendfile64, (int, int, off_t *, size_t)) \
	X(int, fstat, (int, struct stat *)) \
	X(int, fstat64, (int, struct stat64 *)) \
	X(int, fstatat, (int, const char *, struct stat *, int)) \
	X(int, fstatat64, (int, const char *, struct stat64 *, int)) \
	X(int, posix_spawn, (pid_t *, const char *, const posix_spawn_file_actions_t *, \
			     const posix_spawnattr_t *, char *const *, char *const *)) \
	X(int, posix_spawnp, (pid_t *, const char *, const posix_spawn_file_actions_t *, \
			      const posix_spawnattr_t *, char *const *, char *const *)) \
	X(int, system, (const char *)) \
	X(int, execve, (const char *, char *const *, char *const *)) \
	X(int, execv, (const char *, char *const *)) \
	X(int, execvp, (const char *, char *const *)) \
	X(int, execvpe, (const char *, char *const *, char *const *)) \
	X(FILE *, popen, (const char *, const char *)) \
	X(ssize_t, sendmsg, (int, const struct msghdr *, int)) \
	X(int, sendmmsg, (int, struct mmsghdr *, unsigned, int))

struct rs_real {
#define RS_REAL_PTR(ret, name, params) ret (*name) params;
	RS_REAL_CALLS(RS_REAL_PTR)
#undef RS_REAL_PTR
};

/* Starts out pointing at raw-syscall stand-ins, so a call that arrives
 * before or during resolution (dlsym recursion) still works. */
extern struct rs_real rs_real;

/* Idempotent; resolves every entry.  Safe to call from any wrapper. */
void rs_real_resolve(void);

/* The application's system call nr, with what it does to the shim's
 * state (file offsets, forks, F_SETFL): the body of the exported
 * syscall() (interpose.c), for calls made on the application's behalf.
 * The result and errno are syscall()'s. */
long rs_app_syscall(long nr, long a, long b, long c, long d, long e, long f);

#endif
