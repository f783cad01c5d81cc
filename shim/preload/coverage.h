/*
 * Noticing I/O the shim sees but cannot coordinate (coverage.c): counted
 * as the uncovered_* stats, and named once at RANGESHIM_LOG=info.
 */
#ifndef RS_COVERAGE_H
#define RS_COVERAGE_H

#include <stdio.h>
#include <sys/syscall.h>

/* Resolve the real calls behind coverage.c's wrappers (start-up). */
void rs_cov_resolve(void);
/* A fork child is a process of its own: it names each kind again. */
void rs_cov_fork_child(void);
/* At report time: rings and AIO contexts still open that no wrapper saw
 * created (liburing and others make the system call themselves). */
void rs_cov_scan(void);
/* Before an exec of file (search: by PATH, as execvp) with argv, or
 * after a spawn of it as process pid (0: the exec, this process): if it
 * is statically linked, the shim will not be in it, so with per-process
 * reports (RANGESHIM_STATS=PATH with %p) write its report now, naming it
 * as not instrumented, for `rangeshim stats`.  errno is left alone. */
void rs_cov_exec(const char *file, char *const argv[], int search, long pid);
/* A stream fdopen or freopen made. */
void rs_cov_stream(FILE *fp);
/* Before fclose(fp): a standard stream used on a coordinated file. */
void rs_cov_closing(FILE *fp);

/* syscall() numbers whose result coverage.c wants to see. */
static inline int rs_cov_syscall_nr(long nr)
{
	return nr == SYS_io_setup || nr == SYS_io_submit || nr == SYS_io_uring_setup;
}

/* After syscall(nr, a, b, ...) returned r (raw: -errno on failure). */
void rs_cov_syscall(long nr, long a, long b, long r);

/* In init.c: the stats report for exits that skip destructors (_exit,
 * _Exit, syscall(SYS_exit_group)); and the real _exit and _Exit. */
void rs_exit_report(void);
void rs_exit_resolve(void);

#endif
