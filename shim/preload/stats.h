/* Counters for RANGESHIM_STATS.  Only touched when stats are on, so the
 * default fast path pays one predictable branch.  A new counter is one
 * line in RS_STATS_FIELDS, counted with RS_COUNT(name, n). */
#ifndef RS_STATS_H
#define RS_STATS_H

#include <stdatomic.h>
#include <stddef.h>
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
	X(node_evictions,  "idle grants of any process taken back to make room, oldest first") \
	X(node_exact,      "exact, uncached grants acquired on files processes share") \
	X(node_strided,    "strided grants acquired: the blocks a process uses next on a shared file") \
	X(cluster_locks,   "lock requests the node's agent sent to the file system for us") \
	X(cluster_revokes, "cluster grants the node gave back to other nodes (reported once)") \
	X(cluster_wait_ns, "nanoseconds the agent waited on the lock manager for us") \
	X(bytes_read,      "bytes moved by locked reads (their results)") \
	X(bytes_written,   "bytes moved by locked writes (their results)") \
	X(appends,         "O_APPEND writes locked from end of file") \
	X(append_retries,  "O_APPEND/truncate locks retaken because the file shrank") \
	X(passthrough,     "calls passed straight through (untracked fd or file)") \
	X(reentrant,       "calls from a signal handler inside the shim, passed through") \
	X(files_opened,    "coordinated files first seen (by dev:ino)") \
	X(fd_races,        "calls retried because their fd was closed or reused meanwhile") \
	X(uncovered_io_uring,  "io_uring rings set up: their I/O is not coordinated") \
	X(uncovered_aio,       "Linux AIO contexts used: their I/O is not coordinated") \
	X(uncovered_posix_aio, "POSIX AIO requests on coordinated files, not coordinated") \
	X(uncovered_splice,    "splice calls on coordinated files, not coordinated") \
	X(uncovered_mmap,      "writable MAP_SHARED mappings of coordinated files") \
	X(uncovered_stdio,     "stdio streams opened on coordinated files, not coordinated") \
	X(table_full,      "descriptors left uncoordinated because a table was full")

/*
 * Counting is per thread: each thread adds to a block of its own, so a
 * counter costs a load, an add and a store on a line no other thread
 * writes (no atomic read-modify-write, no shared cache line).
 * (The inline path's io_calls and bytes go to the file's record instead,
 * filewaits.h: atomic adds on a line the file's users share.)
 * A thread's first count claims a block (rs_count_slow); when the thread
 * exits its block is folded into the shared totals.  The report functions
 * below sum the totals and every live block, so their callers need not
 * know any of this.
 */
struct rs_stats {
#define RS_STATS_DECL(name, doc) _Atomic uint64_t name;
	RS_STATS_FIELDS(RS_STATS_DECL)
#undef RS_STATS_DECL
};

extern int rs_stats_on __attribute__((visibility("hidden")));
/* This thread's block; NULL until its first count, and again once the
 * thread has exited (its late counts go to the shared totals). */
extern __thread struct rs_stats *rs_tstat __attribute__((tls_model("initial-exec")));
void rs_count_slow(size_t off, uint64_t n);

static inline __attribute__((always_inline)) void rs_count_add(size_t off, uint64_t n)
{
	struct rs_stats *s = rs_tstat;
	_Atomic uint64_t *c;

	if (__builtin_expect(s == NULL, 0)) {
		rs_count_slow(off, n);
		return;
	}
	/* Only this thread writes the block; relaxed load and store are a
	 * plain add, and let the report read it from another thread. */
	c = (_Atomic uint64_t *)((char *)s + off);
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
			      memory_order_relaxed);
}

#define RS_COUNT(field, n)                                                     \
	do {                                                                   \
		if (__builtin_expect(rs_stats_on, 0))                          \
			rs_count_add(offsetof(struct rs_stats, field), (uint64_t)(n)); \
	} while (0)

/* Bytes a call moved: its result, when it is positive (never the length
 * asked for, and never a -1 taken for 2^64 - 1). */
#define RS_COUNT_BYTES(is_write, r)                                            \
	do {                                                                   \
		if ((long long)(r) > 0) {                                      \
			if (is_write)                                          \
				RS_COUNT(bytes_written, (r));                  \
			else                                                   \
				RS_COUNT(bytes_read, (r));                     \
		}                                                              \
	} while (0)

/* Append s to buf + n as a JSON string (bytes that are not UTF-8 become
 * U+FFFD); returns the new length.  For names in reports. */
unsigned long rs_json_str(char *buf, unsigned long size, unsigned long n, const char *s);
/* Render as JSON into buf; returns the length.  Used for files and tests.
 * The object has "pid", "program", every counter, and the per-file waits
 * of filewaits.h when the library has them. */
int rs_stats_json(char *buf, unsigned long size, long pid);
/* Human summary, one counter a line.  Both sum every thread's block. */
int rs_stats_text(char *buf, unsigned long size, long pid);
/* One counter summed over the threads (tests, the reports). */
uint64_t rs_stats_get(size_t off);
/* Write text to the report path tmpl with %p as pid (init.c). */
void rs_write_stats_file(const char *tmpl, long pid, const char *text, int len);
/* Stats are on: make thread exits fold their blocks (once, at start-up). */
void rs_stats_init(void);
/* The child of fork: only the calling thread is left; zero everything. */
void rs_stats_reset(void);

#endif
