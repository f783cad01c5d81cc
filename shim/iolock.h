/*
 * What each intercepted call locks, in one place (BRIEF §2, "What each
 * call locks").  A wrapper describes its call as one or two targets, calls
 * rs_io_begin, makes the real call, and calls rs_io_end.
 */
#ifndef RANGESHIM_IOLOCK_H
#define RANGESHIM_IOLOCK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "fdtable.h"

enum rs_where {
	RS_AT_OFFSET,   /* [off, off + len) */
	RS_AT_CURSOR,   /* [file offset, + len): read, write, readv, writev */
	RS_FROM_OFFSET, /* [off, EOF): size may grow (fallocate) */
	RS_TRUNCATE,    /* [min(size, off), EOF): ftruncate to off */
	RS_POS_ONLY,    /* only the file offset lock: lseek */
};

struct rs_target {
	int fd;
	unsigned mode;          /* RS_RL_READ or RS_RL_WRITE */
	enum rs_where where;
	int force_append;       /* RWF_APPEND */
	int64_t off;
	uint64_t len;
};

struct rs_hold {
	struct rs_rl_node node;
	struct rs_file *file;
};

struct rs_io {
	int entered;            /* this call raised rs_depth */
	int nholds, npos;
	int written;            /* for stats: bytes written rather than read */
	struct rs_desc *pos[2];
	struct rs_hold hold[2];
};

enum rs_state { RS_UNINIT = 0, RS_INITIALIZING = 1, RS_READY = 2, RS_DISABLED = 3 };
extern _Atomic int rs_state;
/* Nesting depth of shim calls on this thread; non-zero means a signal
 * handler interrupted the shim, and its calls pass straight through. */
extern __thread int rs_depth __attribute__((tls_model("initial-exec")));

void rs_init_slow(void);
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
void rs_io_end(struct rs_io *io, ssize_t result);

/* One fd, one range: the common case. */
static inline void rs_io_one(struct rs_io *io, int fd, unsigned mode,
			     enum rs_where where, int64_t off, uint64_t len)
{
	struct rs_target t = { fd, mode, where, 0, off, len };

	rs_io_begin(io, &t, 1);
}

/* truncate(path, len): lock the file if this process has it open. */
void rs_io_begin_path(struct rs_io *io, const char *path, int64_t len);

/* Slow-path bookkeeping (open, close, dup) must not be re-entered from a
 * signal handler on the same thread: the table mutex is not recursive. */
static inline int rs_enter_slow(void)
{
	if (!rs_ready() || rs_depth)
		return 0;
	rs_depth++;
	return 1;
}

static inline void rs_leave_slow(void)
{
	rs_depth--;
}

#endif
