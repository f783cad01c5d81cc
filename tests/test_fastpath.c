/*
 * Criterion suite: the inline paths of issue 10 (read/write/readv/writev
 * at the file offset, O_APPEND writes, stats on the inline path), run
 * through tests/helpers/fast_probe.c with and without the shim.
 *
 *  cursor        writers share one description and write (or writev) at
 *                the file offset; readers read, readv or pread whole
 *                blocks.  The control (no shim) must tear; with the shim
 *                nothing tears.  A shim that locked another range than the
 *                kernel's offset was seen to tear here (checked by hand by
 *                adding a block to the offset the inline path locks).
 *  append        appenders (two sharing a description) and readers across
 *                end of file: a read must end at a record's end.  Control
 *                must tear.
 *  append_trunc  the same while the file is truncated every 20 ms, so the
 *                appenders' end-of-file hints go stale: only the re-check
 *                under the lock keeps them right (without it, 1-6 tears a
 *                run were seen).
 *  timer         a single-threaded process whose only other threads are
 *                glibc's own (SIGEV_THREAD timer callbacks) writing while
 *                the main thread reads: the shim leaves out its thread
 *                locks only with one thread, so nothing tears; the control
 *                (no shim) tears, and the probe must have started with
 *                __libc_single_threaded set, or the test shows nothing.
 *                With rs_solo forced to 1 the shim run tore 837 of 6833
 *                reads (checked by hand).
 *  stats_bytes   bytes_read/bytes_written equal the sum of the calls'
 *                results: short reads, -1 results, copy_file_range and
 *                sendfile asking for more than there is, threads that
 *                exited before the report.  Default and process scope.
 *
 * The shim runs are made with RANGESHIM_STATS set, so the inline path is
 * the one with counting on, and io_calls shows that calls were locked.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define PROBE RS_HELPER("fast_probe")

/* The races' length in seconds (fast_probe's default when NULL). */
static const char *race_secs;

static long long run(const char *mode, const char *dir, int preload, const char *extra,
		     long long *reads, long long *calls)
{
	struct rs_run *r = calloc(1, sizeof(*r));
	char st[PATH_MAX + 32], stpath[PATH_MAX];
	const char *env[3] = { NULL, extra, NULL };
	char *argv[] = { PROBE, (char *)mode, (char *)dir, (char *)race_secs, NULL };
	long long torn;

	snprintf(stpath, sizeof(stpath), "%s/stats.json", dir);
	snprintf(st, sizeof(st), "RANGESHIM_STATS=%s", stpath);
	env[0] = st;
	rs_run(r, argv, env, preload, 60);
	cr_assert_eq(r->status, 0, "fast_probe %s (%s) exited %d: %s", mode,
		     preload ? "shim" : "plain", r->status, r->out);
	torn = rs_field(r->out, "torn");
	*reads = rs_field(r->out, "reads");
	*calls = preload ? rs_stats_file_num(stpath, "io_calls", NULL) : 0;
	cr_log_info("%s %s: %s", mode, preload ? "shim" : "plain", r->out);
	free(r);
	return torn;
}

static void race(const char *mode)
{
	char *base = rs_make_base("/dev/shm", "rs-fast-");
	long long reads, calls, torn = 0;

	char secs[16];
	long long need = RS_SAN[0] ? 5 : 10;

	/* The control: without the shim these reads tear.  One that never
	 * tore (a slow sanitizer run, a loaded machine) runs longer, and is
	 * then skipped with its counts (common.h, RS_STRETCH). */
	for (int k = 1;; k *= 2) {
		snprintf(secs, sizeof(secs), "%d", 3 * k);
		race_secs = secs;
		torn = run(mode, base, 0, NULL, &reads, &calls);
		if (torn > 0 || k >= RS_STRETCH / 2)
			break;
	}
	rs_need(torn, 1, "%s: the control without the shim never tore in %s s (reads=%lld): "
		"nothing to compare with", mode, secs, reads);
	for (int k = 1;; k *= 2) {
		snprintf(secs, sizeof(secs), "%d", 3 * k);
		race_secs = secs;
		torn = run(mode, base, 1, NULL, &reads, &calls);
		cr_expect_eq(torn, 0, "%s: %lld torn reads of %lld with the shim", mode, torn, reads);
		cr_expect_geq(calls, reads, "%s: io_calls=%lld < reads=%lld: calls were not locked",
			      mode, calls, reads);
		if (reads >= need || k >= RS_STRETCH)
			break;
	}
	race_secs = NULL;
	rs_need(reads, need, "%s: only %lld reads with the shim in %s s, too few to mean "
		"anything", mode, reads, secs);
}

TestSuite(fastpath, .fini = rs_remove_bases);

Test(fastpath, cursor, .timeout = 120) { race("cursor"); }
Test(fastpath, append, .timeout = 120) { race("append"); }
Test(fastpath, append_trunc, .timeout = 120) { race("append_trunc"); }

Test(fastpath, timer, .timeout = 120)
{
	char *base = rs_make_base("/dev/shm", "rs-fast-");
	struct rs_run *r = calloc(1, sizeof(*r));
	char *argv[] = { PROBE, "timer", base, NULL };

	/* glibc starts the SIGEV_THREAD helper without pthread_create's
	 * public entry, so TSan never sees that thread and the probe
	 * crashes under it, shim or not. */
	if (strcmp(RS_SAN, "tsan") == 0)
		cr_skip_test("TSan does not see glibc's SIGEV_THREAD threads (the probe crashes without the shim too)");
	/* The probe must start with one thread, or elision never applies. */
	rs_run(r, argv, (const char *[]){ NULL }, 1, 60);
	cr_assert_eq(r->status, 0, "fast_probe timer exited %d: %s", r->status, r->out);
	cr_assert_eq(rs_field(r->out, "single"), 1, "the probe was not single-threaded: %s", r->out);
	free(r);
	race("timer");
}

static void stats_bytes(const char *extra)
{
	char *base = rs_make_base("/dev/shm", "rs-fast-");
	struct rs_run *r = calloc(1, sizeof(*r));
	char st[PATH_MAX + 32], stpath[PATH_MAX];
	const char *env[3] = { NULL, extra, NULL };
	char *argv[] = { PROBE, "stats", base, NULL };
	long long er, ew;

	snprintf(stpath, sizeof(stpath), "%s/stats.json", base);
	snprintf(st, sizeof(st), "RANGESHIM_STATS=%s", stpath);
	env[0] = st;
	rs_run(r, argv, env, 1, 60);
	cr_assert_eq(r->status, 0, "fast_probe stats exited %d: %s", r->status, r->out);
	er = rs_field(r->out, "expect_read");
	ew = rs_field(r->out, "expect_written");
	cr_assert(er > 0 && ew > 0, "no expectations printed: %s", r->out);
	cr_expect_eq(rs_stats_file_num(stpath, "bytes_read", NULL), er,
		     "bytes_read=%lld, the calls returned %lld (%s)",
		     rs_stats_file_num(stpath, "bytes_read", NULL), er, extra ? extra : "default");
	cr_expect_eq(rs_stats_file_num(stpath, "bytes_written", NULL), ew,
		     "bytes_written=%lld, the calls returned %lld (%s)",
		     rs_stats_file_num(stpath, "bytes_written", NULL), ew, extra ? extra : "default");
	free(r);
}

Test(fastpath, stats_bytes, .timeout = 60) { stats_bytes(NULL); }
Test(fastpath, stats_bytes_process, .timeout = 60) { stats_bytes("RANGESHIM_SCOPE=process"); }
Test(fastpath, stats_bytes_mutex, .timeout = 60) { stats_bytes("RANGESHIM_LOCK=mutex"); }
