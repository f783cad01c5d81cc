/*
 * Start-up and shutdown: resolve the real functions, read the
 * configuration, reserve the tables, and register the fork handlers.
 *
 * Start-up runs from the constructor, or earlier from the first
 * intercepted call if another library's constructor does I/O before ours
 * runs.  Calls made while it is under way on the same thread (dlsym
 * recursion) pass straight through; other threads wait the few
 * microseconds it takes.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "config.h"
#include "coverage.h"
#include "fdtable.h"
#include "grants.h"
#include "iolock.h"
#include "lockorder.h"
#include "log.h"
#include "real.h"
#include "stats.h"
#include "rawsyscall.h"

_Atomic int rs_state;
/* RANGESHIM_STATS=1 writes to a copy of stderr taken at start-up: dd, cat
 * and friends close fd 2 before library destructors run. */
static int stats_fd = -1;
static struct stat stats_st;
RS_FORKED long rs_pid __attribute__((aligned(64)));
static __thread int initializing_here __attribute__((tls_model("initial-exec")));
/* The report is written once: by the destructor, or by an exit that
 * skips it (rs_exit_report). */
static RS_FORKED _Atomic int reported;

static const char *env(const char *name)
{
	return getenv(name);
}

/* What this thread held when its fork began, set aside for the lock
 * order checks of debug builds (lockorder.h): fork may be called from a
 * signal handler that interrupted the shim, whose locks are not the
 * fork handlers' to be ordered after.  NO_FORK: no fork under way. */
#define NO_FORK (~0u)
static __thread unsigned fork_lk __attribute__((tls_model("initial-exec"))) = NO_FORK;

static void fork_lk_restore(void)
{
	if (fork_lk != NO_FORK)
		rs_lk_restore(fork_lk);
	fork_lk = NO_FORK;
}

/* Lock order: the attach lock, then the fd table's (attach hides its
 * descriptor through the fd table). */
void rs_fork_prepare(void)
{
	fork_lk = rs_lk_aside();
	rs_grants_fork_prepare();
	rs_fdt_fork_prepare();
}

void rs_fork_parent(void)
{
	rs_fdt_fork_parent();
	rs_grants_fork_parent();
	fork_lk_restore();
}

void rs_after_fork_child(void)
{
	rs_after_clone_child(0);
}

void rs_after_clone_child(long flags)
{
	/* The locks prepare took are reset below, not let go. */
	fork_lk_restore();
	rs_fdt_fork_child();
	rs_grants_fork_child((flags & CLONE_FILES) != 0);
	rs_stats_reset();
	rs_cov_fork_child();
	if (atomic_load(&reported))
		atomic_store(&reported, 0);
	rs_pid = rs_sys(SYS_getpid);
}

void rs_init_slow(void)
{
	int s = RS_UNINIT;
	int saved = errno;
	int final = RS_READY;

	if (!atomic_compare_exchange_strong(&rs_state, &s, RS_INITIALIZING)) {
		if (s == RS_INITIALIZING && !initializing_here)
			while (atomic_load(&rs_state) == RS_INITIALIZING)
				sched_yield();
		return;
	}
	initializing_here = 1;
	rs_log_wrote = rs_fdt_moved;
	rs_real_resolve();
	rs_cov_resolve();
	rs_exit_resolve();
	rs_config_load(&rs_cfg, env);
	rs_stats_on = rs_cfg.stats != RS_STATS_OFF;
	if (rs_stats_on)
		rs_stats_init();
	rs_pid = rs_sys(SYS_getpid);
	if (rs_cfg.effective == RS_SCOPE_OFF) {
		final = RS_DISABLED;
	} else if (rs_fdt_init() < 0) {
		rs_log(RS_LOG_ERROR, "cannot reserve the fd table (%s); "
		       "I/O is NOT coordinated in this process", strerror(errno));
		final = RS_DISABLED;
	} else {
		pthread_atfork(rs_fork_prepare, rs_fork_parent, rs_after_fork_child);
		if (rs_cfg.effective >= RS_SCOPE_NODE || rs_cfg.stats == RS_STATS_STDERR)
			rs_fd_grow_table();
	}
	if (rs_cfg.stats == RS_STATS_STDERR) {
		/* One copy, never closed: closing a copy of a locked stderr
		 * file would drop the process's POSIX lock on it. */
		stats_fd = rs_fd_hidden_copy(2);
		if (stats_fd >= 0 && rs_fstat(stats_fd, &stats_st) < 0)
			stats_fd = -1;
		atomic_store(&rs_private_fd[1], stats_fd);
	}
	rs_grants_init();
	initializing_here = 0;
	/* Stats count on the inline path too (per-thread counters). */
	RS_STORE(rs_fast, final == RS_READY && rs_cfg.lock == RS_LOCK_RANGE);
	atomic_store(&rs_state, final);
	errno = saved;
}

__attribute__((constructor)) static void rs_ctor(void)
{
	if (atomic_load(&rs_state) == RS_UNINIT)
		rs_init_slow();
}

void rs_write_stats_file(const char *tmpl, long pid, const char *text, int len)
{
	char path[600];
	size_t n = 0;
	int fd;

	for (const char *p = tmpl; *p && n < sizeof(path) - 24; p++) {
		if (p[0] == '%' && p[1] == 'p') {
			n += (size_t)snprintf(path + n, sizeof(path) - n, "%ld", pid);
			p++;
		} else {
			path[n++] = *p;
		}
	}
	path[n] = '\0';
	fd = (int)rs_sys(SYS_openat, AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	/* strerrordesc_np, not strerror: this may run in _exit in a child
	 * forked from a threaded parent, where gettext's lock may be held. */
	if (fd < 0 || rs_write_all(fd, text, (unsigned long)len) < 0)
		rs_log(RS_LOG_ERROR, "RANGESHIM_STATS: cannot write %s: %s", path,
		       strerrordesc_np(errno) ? strerrordesc_np(errno) : "unknown error");
	if (fd >= 0)
		rs_sys(SYS_close, fd);
}

/*
 * Uses atomics, snprintf into the stack and raw system calls only, and
 * takes no lock: it also runs from _exit, often in a child forked from a
 * threaded parent, where a lock another thread held at fork stays held.
 */
static void write_report(void)
{
	/* Static, not on the stack: up to 16 escaped file names (filewaits.h)
	 * would not fit a small thread stack.  `reported` lets one caller in. */
	static char buf[40960];
	int saved = errno, len;

	if (atomic_exchange(&reported, 1))
		return;
	rs_cov_scan();
	if (!rs_stats_on)
		return;
	if (rs_cfg.stats == RS_STATS_FILE) {
		len = rs_stats_json(buf, sizeof(buf), rs_pid);
		rs_write_stats_file(rs_cfg.stats_path, rs_pid, buf, len);
	} else {
		struct stat st;
		int fd = 2;

		/* Use our copy only if it is still the same file. */
		stats_fd = atomic_load(&rs_private_fd[1]);
		if (stats_fd >= 0 && rs_fstat(stats_fd, &st) == 0 &&
		    st.st_dev == stats_st.st_dev && st.st_ino == stats_st.st_ino)
			fd = stats_fd;
		len = rs_stats_text(buf, sizeof(buf), rs_pid);
		rs_write_all(fd, buf, (unsigned long)len);
	}
	errno = saved;
}

__attribute__((destructor)) static void rs_dtor(void)
{
	/* Give our grants back now rather than leave them to be reclaimed. */
	rs_grants_exit();
	write_report();
}

/*
 * _exit, _Exit and syscall(SYS_exit_group) end the process without
 * destructors: fio's jobs, the child side of fork-then-exec code.  Only
 * the report is written; the grants are left for the others to reclaim
 * from a dead process, as after a crash (giving them back takes a lock).
 * Not in a vfork child, which shares our memory and counters.
 */
void rs_exit_report(void)
{
	int s = atomic_load(&rs_state);

	if ((s == RS_READY || s == RS_DISABLED) && rs_sys(SYS_getpid) == rs_pid)
		write_report();
}

#define RS_EXPORT __attribute__((visibility("default")))
#define RS_EXIT_CALLS(X) X(_exit) X(_Exit)

#define RS_EXIT_PTR(name) static void (*real##name)(int);
RS_EXIT_CALLS(RS_EXIT_PTR)

void rs_exit_resolve(void)
{
#define RS_EXIT_RESOLVE(name) \
	__atomic_store_n(&real##name, (void (*)(int))dlsym(RTLD_NEXT, #name), __ATOMIC_RELEASE);
	RS_EXIT_CALLS(RS_EXIT_RESOLVE)
}

/* Sanitizer runtimes wrap _exit too: go through the next one. */
#define RS_EXIT_WRAP(name)                                                    \
	RS_EXPORT void name(int status)                                       \
	{                                                                     \
		void (*f)(int) = __atomic_load_n(&real##name, __ATOMIC_ACQUIRE); \
		rs_exit_report();                                             \
		if (f)                                                        \
			f(status);                                            \
		for (;;)                                                      \
			rs_sys(SYS_exit_group, status);                      \
	}
RS_EXIT_CALLS(RS_EXIT_WRAP)
