/* Counters for RANGESHIM_STATS.  Only touched when stats are on, so the
 * default fast path pays one predictable branch. */
#ifndef RS_STATS_H
#define RS_STATS_H

#include <stdatomic.h>
#include <stdint.h>

#define RS_STATS_FIELDS(X) \
	X(io_calls,        "intercepted calls on coordinated files that took a lock") \
	X(lock_waits,      "range-lock acquisitions that had to wait") \
	X(node_acquires,   "node-table grants acquired (node scope)") \
	X(node_revokes,    "node-table grants given back or revoked (node scope)") \
	X(node_wanted,     "busy grants of other processes asked to drain") \
	X(node_waits,      "node-table acquisitions that had to wait") \
	X(node_wait_ns,    "nanoseconds spent waiting for node grants") \
	X(node_reclaims,   "dead processes whose grants were reclaimed") \
	X(node_table_full, "acquisitions that found the node table full") \
	X(node_exact,      "exact, uncached grants acquired on files processes share") \
	X(bytes_read,      "bytes requested by locked reads") \
	X(bytes_written,   "bytes requested by locked writes") \
	X(appends,         "O_APPEND writes locked from end of file") \
	X(append_retries,  "O_APPEND/truncate locks retaken because the file shrank") \
	X(passthrough,     "calls passed straight through (untracked fd or file)") \
	X(reentrant,       "calls from a signal handler inside the shim, passed through") \
	X(files_opened,    "coordinated files first seen (by dev:ino)") \
	X(fd_races,        "calls retried because their fd was closed or reused meanwhile") \
	X(table_full,      "descriptors left uncoordinated because a table was full")

struct rs_stats {
#define RS_STATS_DECL(name, doc) _Atomic uint64_t name;
	RS_STATS_FIELDS(RS_STATS_DECL)
#undef RS_STATS_DECL
};

extern struct rs_stats rs_stats;
extern int rs_stats_on;

#define RS_COUNT(field, n)                                                     \
	do {                                                                   \
		if (__builtin_expect(rs_stats_on, 0))                          \
			atomic_fetch_add_explicit(&rs_stats.field, (uint64_t)(n), \
						  memory_order_relaxed);       \
	} while (0)

/* Bytes the call asked for: the fast path does not see the result. */
#define RS_COUNT_BYTES(is_write, n)                                            \
	do {                                                                   \
		if (is_write)                                                  \
			RS_COUNT(bytes_written, n);                            \
		else                                                           \
			RS_COUNT(bytes_read, n);                               \
	} while (0)

/* Render as JSON into buf; returns the length.  Used for files and tests. */
int rs_stats_json(char *buf, unsigned long size, long pid);
/* Human summary, one counter a line. */
int rs_stats_text(char *buf, unsigned long size, long pid);
void rs_stats_reset(void);

#endif
