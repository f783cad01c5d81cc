/*
 * Per-file lock waits for RANGESHIM_STATS: which files this process
 * waited on, how often and how long, for the report's "files" list and
 * `rangeshim stats`' "top files by lock waits".
 *
 * Recorded only where a wait has already happened (the range lock
 * returned "waited", or a node grant slept), and only when stats are on:
 * the path that does not wait gains no instruction.
 */
#ifndef RS_FILEWAITS_H
#define RS_FILEWAITS_H

#include <stdint.h>

#include "fdtable.h"
#include "stats.h"

/* Files remembered per process, and how many of them a report lists. */
#define RS_FW_SLOTS 64
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

/* Append `, "file_waits_untracked": N, "files": [...]` (the top files by
 * waits) to a JSON report at buf + n; returns the new length. */
unsigned long rs_fw_json(char *buf, unsigned long size, unsigned long n);
/* The same as text lines for the stderr summary. */
unsigned long rs_fw_text(char *buf, unsigned long size, unsigned long n);
/* fork's child: its waits start from nothing, as its counters do. */
void rs_fw_reset(void);

#endif
