/*
 * Criterion suite: appends attacked where their end-of-file hint, or the
 * append mode they share, could let a reader see part of an append
 * (iolock.h, rs_ap_hint; rangelock.c, "Appenders").  The rigs are in
 * tests/helpers/append_probe.c; each runs as a control without the shim,
 * which must tear, and with it, where nothing may tear.
 *
 *  trunc_proc  another process cuts the file to 0 every 5 ms.  (When the
 *              hint was trusted until a truncate generation moved, that
 *              generation's bump on a new node grant compiled out tore
 *              29-3526 reads per 3 s run; the fstat under the lock now
 *              sees every such cut: tests/test_adv_proc.c.)
 *  fork        appends across fork: a child appends at once with the hint
 *              it inherited while the parent truncates (44-93 torn per
 *              3 s run with a trusted hint and no bump at fork).
 *  huge        write()s asking for 3 GiB of which 64 KiB is mapped (a
 *              short write) or nothing (EFAULT): the results must be the
 *              kernel's, and the hint must grow by what was written.
 *  rwf         pwritev2 with RWF_APPEND (no O_APPEND) and RWF_NOAPPEND (on
 *              O_APPEND) among plain appenders.
 *  beyond      a pwrite one record past end of file among the appenders.
 *  sharedfd    four threads append through one O_APPEND descriptor,
 *              sharing its offset lock (fdtable.h, rs_pos_lock), while
 *              threads read across end of file, one of them through that
 *              descriptor at its file offset.
 *  fcntl       O_APPEND toggled by fcntl(F_SETFL) under two writers of
 *              one description.  The library before setfl_begin tore 2-6
 *              reads per 2 s run here (a write locked for one flag value
 *              ran under the other); now 0.
 *  readers_end_head_locks
 *              two threads append 100-byte lines while one preads the
 *              file's first 4 KiB (8 KiB before the appends), 50000 times,
 *              in node and in process scope.  Appends lock from 0 only
 *              until a call of another kind has waited for the file's
 *              range lock (iolock.h, rs_fast_offset: tail_only); then
 *              from end of file, which the head's reads never meet.  The
 *              run's lock waits (RANGESHIM_STATS) stay at those of the
 *              first meeting: 1-6 per run.  With the flag never set
 *              (control: its store in rs_io_range compiled out) reader
 *              and appenders kept meeting: 79-1244 waits per run.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <stdio.h>
#include <stdlib.h>

#include "common.h"

#ifndef RS_SAN
#define RS_SAN ""
#endif

#define PROBE RS_HELPER("append_probe")
/* A sanitized rig runs several times slower. */
#define MIN_READS (RS_SAN[0] ? 5 : 50)

TestSuite(append, .timeout = 120, .fini = rs_remove_bases);

struct counts {
	long long reads, torn, writes, bad;
};

static void probe(const char *mode, const char *dir, int preload, const char *ms,
		  const char *stop, struct counts *c, struct rs_run *r)
{
	char file[PATH_MAX], shm[80];
	const char *env[2] = { shm, NULL };
	char *argv[] = { PROBE, (char *)mode, file, (char *)ms, (char *)stop, NULL };

	snprintf(file, sizeof(file), "%s/append.dat", dir);
	snprintf(shm, sizeof(shm), "RANGESHIM_SHM=/rs-test-append-%d", (int)getpid());
	rs_run(r, argv, env, preload, 60);
	c->reads = rs_field(r->out, "reads");
	c->torn = rs_field(r->out, "torn");
	c->writes = rs_field(r->out, "writes");
	c->bad = rs_field(r->out, "bad_results");
}

static void race(const char *mode)
{
	char *base = rs_make_base("/dev/shm", "rs-append-");
	struct rs_run *r = calloc(1, sizeof(*r));
	struct counts ctl = { 0 }, shim;
	char shmpath[120];

	cr_assert_not_null(r);
	/* The control: without the shim these reads tear.  One that never
	 * tore (a slow sanitizer run, a loaded machine) runs longer, and is
	 * then skipped with its counts (common.h, RS_STRETCH). */
	for (int k = 1;; k *= 2) {
		char ms[16];

		snprintf(ms, sizeof(ms), "%d", k * 3000);
		probe(mode, base, 0, ms, "5", &ctl, r);
		cr_assert_eq(r->status, 0, "%s control exited %d: %s", mode, r->status, r->out);
		if (ctl.torn > 0 || k >= RS_STRETCH / 2)
			break;
	}
	cr_log_info("%s control (no shim): %s", mode, r->out);
	cr_assert_eq(ctl.bad, 0, "%s: the kernel's own results were not as expected: %s", mode,
		     r->out);
	rs_need(ctl.torn, 1, "%s: the control without the shim never tore (reads=%lld): "
		"nothing to compare with: %s", mode, ctl.reads, r->out);

	for (int k = 1;; k *= 2) {
		char ms[16];

		snprintf(ms, sizeof(ms), "%d", k * 2000);
		probe(mode, base, 1, ms, "0", &shim, r);
		cr_log_info("%s shim (%s ms): %s", mode, ms, r->out);
		cr_assert_eq(r->status, 0, "%s shim exited %d: %s", mode, r->status, r->out);
		cr_expect_eq(shim.torn, 0, "%s: %lld torn reads of %lld with the shim", mode,
			     shim.torn, shim.reads);
		cr_expect_eq(shim.bad, 0, "%s: %lld results differ from the kernel's", mode,
			     shim.bad);
		if (shim.reads >= MIN_READS || k >= RS_STRETCH)
			break;
	}
	snprintf(shmpath, sizeof(shmpath), "/dev/shm/rs-test-append-%d", (int)getpid());
	unlink(shmpath);
	cr_expect_gt(shim.writes, 0, "%s: no writes", mode);
	rs_need(shim.reads, MIN_READS, "%s: only %lld reads with the shim, too few to mean "
		"anything", mode, shim.reads);
	free(r);
}

Test(append, trunc_proc) { race("trunc_proc"); }
Test(append, fork) { race("fork"); }
Test(append, huge) { race("huge"); }
Test(append, rwf) { race("rwf"); }
Test(append, beyond) { race("beyond"); }
Test(append, fcntl) { race("fcntl"); }
Test(append, sharedfd) { race("sharedfd"); }

/*
 * readers_end_head_locks: one run of append_probe headreads in scope
 * (stats written to base); its lock waits out, and its reads in *reads.
 * Counts, not time, decide: the reader stops after HEAD_READS reads
 * whatever the machine's speed (45 s only caps a very slow run, which is
 * then skipped).
 */
#define HEAD_READS 50000
/* Waits the first meeting of reader and appenders may take before the
 * flag stops whole-file append locks: the reader's own, and an appender's
 * or two that planned from 0 just before.  1-6 seen; the control's fewest
 * were 79. */
#define HEAD_WAITS_MAX 20

static long long head_waits(const char *base, const char *scope, long long *reads)
{
	char file[PATH_MAX], stats[PATH_MAX], shm[80], sc[40], st[PATH_MAX + 20], n[16];
	const char *env[] = { shm, sc, st, NULL };
	char *argv[] = { PROBE, "headreads", file, "45000", n, NULL };
	struct rs_run *r = calloc(1, sizeof(*r));
	long long torn, writes, waits;
	int found;

	cr_assert_not_null(r);
	snprintf(file, sizeof(file), "%s/head.dat", base);
	snprintf(stats, sizeof(stats), "%s/stats-%s.json", base, scope);
	snprintf(shm, sizeof(shm), "RANGESHIM_SHM=/rs-test-append-%d", (int)getpid());
	snprintf(sc, sizeof(sc), "RANGESHIM_SCOPE=%s", scope);
	snprintf(st, sizeof(st), "RANGESHIM_STATS=%s", stats);
	snprintf(n, sizeof(n), "%d", HEAD_READS);
	rs_run(r, argv, env, 1, 55);
	cr_log_info("headreads %s: %s", scope, r->out);
	cr_assert_eq(r->status, 0, "headreads %s exited %d: %s", scope, r->status, r->out);
	*reads = rs_field(r->out, "reads");
	torn = rs_field(r->out, "torn");
	writes = rs_field(r->out, "writes");
	free(r);
	waits = rs_stats_file_num(stats, "lock_waits", &found);
	cr_assert(found && waits >= 0, "headreads %s: no lock_waits in %s", scope, stats);
	cr_log_info("headreads %s: %lld lock waits, %lld reads, %lld appends", scope, waits, *reads,
		    writes);
	cr_expect_eq(torn, 0, "headreads %s: %lld reads of the head were not its bytes", scope,
		     torn);
	cr_expect_gt(writes, 0, "headreads %s: no appends beside the reads", scope);
	return waits;
}

Test(append, readers_end_head_locks)
{
	char *base = rs_make_base("/dev/shm", "rs-append-");
	const char *scopes[] = { "node", "process" };
	long long met = 0, fewest = HEAD_READS;
	char shmpath[120];

	for (int i = 0; i < 2; i++) {
		long long reads, w = head_waits(base, scopes[i], &reads);

		cr_expect_leq(w, HEAD_WAITS_MAX,
			      "%s scope: %lld lock waits over %lld reads of the head beside "
			      "appenders (at most %d: appends should have locked only the "
			      "tail after the reader's first wait)",
			      scopes[i], w, reads, HEAD_WAITS_MAX);
		met += w;
		if (reads < fewest)
			fewest = reads;
	}
	snprintf(shmpath, sizeof(shmpath), "/dev/shm/rs-test-append-%d", (int)getpid());
	unlink(shmpath);
	rs_need(fewest, HEAD_READS, "headreads: only %lld of %d reads before the cap",
		fewest, HEAD_READS);
	/* No wait at all: reader and appenders never met (a loaded machine
	 * ran them apart), and the flag was never tried. */
	rs_need(met, 1, "headreads: no lock waits in either scope: reader and appenders never "
		"met, nothing shown");
}
