/*
 * Criterion suite: an adversary's reproducers against the process-side
 * lock paths.  The rigs are in tests/helpers/adv_proc_probe.c (appends);
 * each runs as a control without the shim, which must show the defect,
 * and with it, where it must not.
 *
 * append_cut_*  the file is cut to 0 while the rig holds appenders and
 *               readers off, in ways no lock of the shim sees; then four
 *               threads append 64 KiB records and two read the head.  An
 *               end-of-file hint trusted without an fstat under the lock
 *               (h-append, b4ade4a: trusted while the in-process truncate
 *               generation ap_tgen stands, refreshed every 16th append)
 *               locked [stale L, inf) while the kernel wrote at 0, so the
 *               readers of the head were not excluded.  Torn reads in
 *               two 3 s runs there: fopen_w 6397 and 23605 (of 14453 and
 *               35097 reads), freopen_w 7975 and 10733, cut_noshim 4305
 *               and 8910, cut_otrunc 9948 and 5967, cut_path 8137 and
 *               4504; main and the fix 0 (main: fopen_w 0 of 12139,
 *               cut_path 0 of 2034).  The controls tore in every run.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <stdio.h>
#include <stdlib.h>

#include "common.h"

#ifndef RS_SAN
#define RS_SAN ""
#endif

#define APROBE RS_HELPER("adv_proc_probe")
/* A sanitized rig runs several times slower. */
#define MIN_READS (RS_SAN[0] ? 5 : 50)

TestSuite(adv_proc, .timeout = 120, .fini = rs_remove_bases);

struct counts {
	long long reads, torn, writes, cuts;
};

static void aprobe(const char *mode, const char *dir, int preload, const char *ms,
		   struct counts *c, struct rs_run *r)
{
	char file[PATH_MAX], shm[80];
	const char *env[2] = { shm, NULL };
	char *argv[] = { APROBE, (char *)mode, file, (char *)ms, NULL };

	snprintf(file, sizeof(file), "%s/cut.dat", dir);
	snprintf(shm, sizeof(shm), "RANGESHIM_SHM=/rs-test-advproc-%d", (int)getpid());
	rs_run(r, argv, env, preload, 60);
	c->reads = rs_field(r->out, "reads");
	c->torn = rs_field(r->out, "torn");
	c->writes = rs_field(r->out, "writes");
	c->cuts = rs_field(r->out, "cuts");
}

static void cut_race(const char *mode)
{
	char *base = rs_make_base("/dev/shm", "rs-advproc-");
	struct rs_run *r = calloc(1, sizeof(*r));
	struct counts ctl = { 0 }, shim;
	char shmpath[120];

	cr_assert_not_null(r);
	/* The control: the same rig without the shim tears (appends at the
	 * head race the readers of the head). */
	for (int i = 0; i < 3 && ctl.torn <= 0; i++) {
		aprobe(mode, base, 0, "1000", &ctl, r);
		cr_assert_eq(r->status, 0, "%s control exited %d: %s", mode, r->status, r->out);
	}
	cr_log_info("%s control (no shim): %s", mode, r->out);
	cr_assert_gt(ctl.torn, 0, "%s: control without the shim never tore in 3 runs: %s", mode,
		     r->out);

	aprobe(mode, base, 1, "3000", &shim, r);
	snprintf(shmpath, sizeof(shmpath), "/dev/shm/rs-test-advproc-%d", (int)getpid());
	unlink(shmpath);
	cr_log_info("%s shim: %s", mode, r->out);
	cr_assert_eq(r->status, 0, "%s shim exited %d: %s", mode, r->status, r->out);
	cr_expect_eq(shim.torn, 0, "%s: %lld torn reads of %lld with the shim", mode, shim.torn,
		     shim.reads);
	cr_expect_geq(shim.reads, MIN_READS, "%s: only %lld reads, too few to mean anything",
		      mode, shim.reads);
	cr_expect_gt(shim.cuts, 10, "%s: only %lld cuts", mode, shim.cuts);
	cr_expect_gt(shim.writes, 0, "%s: no writes", mode);
	free(r);
}

Test(adv_proc, append_cut_fopen_w) { cut_race("fopen_w"); }
Test(adv_proc, append_cut_freopen_w) { cut_race("freopen_w"); }
Test(adv_proc, append_cut_noshim) { cut_race("cut_noshim"); }
Test(adv_proc, append_cut_path) { cut_race("cut_path"); }
Test(adv_proc, append_cut_otrunc) { cut_race("cut_otrunc"); }

