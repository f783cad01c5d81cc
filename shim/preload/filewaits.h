/*
 * Per-file figures for RANGESHIM_STATS: for each file this process used,
 * its calls and bytes, its lock waits and their time, and the calls the
 * shim could not coordinate on it (uncovered: mmap, splice, POSIX AIO,
 * stdio), for the report's "files" list and `rangeshim stats`' per-file
 * totals over a job.
 *
 * Waits are recorded only where a wait has already happened (the range
 * lock returned "waited", or a node grant slept), and only when stats are
 * on.  Calls and bytes are counted where the stats counters already are:
 * the inline path adds to the record its file points at (rs_file.fio),
 * inside the branch it takes only when stats are on, in place of the
 * process-wide counters (their totals include these records: rs_fw_total);
 * the general path adds to both (rs_fw_general).  A file gets its record
 * when the fd table first meets it; files beyond RS_FW_SLOTS share one
 * record, reported as "other files".
 */
#ifndef RS_FILEWAITS_H
#define RS_FILEWAITS_H

#include <stdint.h>

#include "fdtable.h"
#include "stats.h"

/* Files remembered per process, and how many of them a report lists
 * (the most bytes first; the rest are summed in "files_other"). */
#define RS_FW_SLOTS 512
#define RS_FW_REPORT 16

/* A range-lock wait on f that just ended; node is the waiter's node
 * (its `since` is when the wait began).  fd is a descriptor of f, or -1;
 * path f's name if the caller has it, or NULL. */
void rs_fw_lock_wait(struct rs_file *f, int fd, const char *path, const struct rs_rl_node *node);
/* A node-grant wait on f of ns nanoseconds. */
void rs_fw_node_wait(struct rs_file *f, uint64_t ns);

#define RS_FILE_LOCK_WAIT(f, fd, path, node)                                   \
	do {                                                                   \
		if (__builtin_expect(rs_stats_on, 0))                          \
			rs_fw_lock_wait((f), (fd), (path), (node));            \
	} while (0)

/* rs_fw_file_io: declared in fdtable.h, which calls it. */
/* A general-path call on f that returned r: one call, and r bytes read
 * (rw 1), written (rw 2) or both (3), when r > 0.  Stats on only. */
void rs_fw_general(struct rs_file *f, unsigned rw, long long r);
/* An uncovered call on fd (a coordinated file): counted for its file. */
void rs_fw_uncovered(int fd);
/* The inline path's part of a process-wide counter (io_calls,
 * bytes_read, bytes_written; 0 for the others): the sum of the records. */
uint64_t rs_fw_total(size_t off);

/* Append `, "file_waits_untracked": N, "files": [...], "files_other":
 * {...}` (the top files by bytes, then by waits) to a JSON report at
 * buf + n; returns the new length. */
unsigned long rs_fw_json(char *buf, unsigned long size, unsigned long n);
/* The same as text lines for the stderr summary. */
unsigned long rs_fw_text(char *buf, unsigned long size, unsigned long n);
/* fork's child: its waits start from nothing, as its counters do. */
void rs_fw_reset(void);

#endif
