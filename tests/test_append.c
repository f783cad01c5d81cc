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
