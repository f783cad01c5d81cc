/*
 * Criterion suite: torn reads, with and without the shim.
 *
 * Runs the example checker build/examples/torn_read (see its --help): one
 * writer races readers on one range and every read is checked for a mix
 * of two writes.  Each configuration runs twice for about a second:
 *
 *  control  without the shim.  The torn count is logged; where tearing is
 *           reliably observable (tmpfs, 1 MiB blocks, writer and reader at
 *           the same offset: 60-99% of reads measured, still ~5-20% under
 *           TSan) the control must see torn reads, which proves that the
 *           checker can see a tear at all.  Elsewhere it is only logged.
 *  shim     with librangeshim.so preloaded, --expect-clean: torn must be 0,
 *           the run must be meaningful (reads >= MIN_READS), and the stats
 *           file must show io_calls >= reads + writes, i.e. every read and
 *           write really went through a range lock.
 *
 * Configurations:
 *  tmpfs_pread      /dev/shm, 1 MiB pread/pwrite (control asserted)
 *  ext4_pread       /tmp if it is ext4 (statfs magic and the mount table),
 *                   else skipped; 1 MiB (control logged: ~7-90%)
 *  ext4_direct      the same with O_DIRECT; skipped if opening with O_DIRECT
 *                   fails with EINVAL (control logged)
 *  tmpfs_overlap    two writers on [0,B) and [B/2,3B/2), readers of [0,3B/2),
 *                   plus a final check for interleaved writes (control logged)
 *  tmpfs_use_read   lseek+read / lseek+write at the file offset (asserted)
 *  tmpfs_chk        readers call __pread_chk (asserted)
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <fcntl.h>
#include <mntent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "common.h"


#ifndef RS_SAN
#define RS_SAN ""
#endif

#define TORN RS_EXAMPLE("torn_read")
#define RUN_TIMEOUT 20

/* A sanitized checker runs several times slower. */
#define MIN_READS (RS_SAN[0] ? 10 : 50)

struct cfg {
	const char *name;
	const char *dir;
	const char *extra[3];    /* extra torn_read options, NULL-terminated */
	int assert_control;      /* control must see torn reads */
};

struct result {
	long long reads, torn, writes;
	int status;
};

/* The run's length in seconds (stretched on a loaded machine). */
static char torn_secs[16] = "1";

static void run_torn(const struct cfg *c, const char *file, int preload, const char *stats_path,
		     struct result *res, struct rs_run *r)
{
	char *argv[16];
	char stats_env[300], shm_env[80];
	const char *env[3] = { NULL, NULL, NULL };
	int n = 0;

	argv[n++] = (char *)TORN;
	argv[n++] = (char *)"--file";
	argv[n++] = (char *)file;
	argv[n++] = (char *)"--block";
	argv[n++] = (char *)"1M";
	argv[n++] = (char *)"--seconds";
	argv[n++] = torn_secs;
	argv[n++] = (char *)"--quiet";
	for (int i = 0; c->extra[i]; i++)
		argv[n++] = (char *)c->extra[i];
	if (preload)
		argv[n++] = (char *)"--expect-clean";
	argv[n] = NULL;

	snprintf(shm_env, sizeof(shm_env), "RANGESHIM_SHM=/rs-test-torn-%d", (int)getpid());
	snprintf(stats_env, sizeof(stats_env), "RANGESHIM_STATS=%s", stats_path);
	env[0] = shm_env;
	env[1] = stats_env;
	rs_run(r, argv, env, preload, RUN_TIMEOUT);
	res->status = r->status;
	res->reads = rs_field(r->out, "reads");
	res->torn = rs_field(r->out, "torn");
	res->writes = rs_field(r->out, "writes");
}

static void run_config(const struct cfg *c)
{
	char file[300], stats[300];
	struct rs_run *r = calloc(1, sizeof(*r));
	struct result ctl, shim;
	long long io_calls;

	cr_assert_not_null(r);
	snprintf(file, sizeof(file), "%s/rs-test-torn-%d-%s", c->dir, (int)getpid(), c->name);
	snprintf(stats, sizeof(stats), "/tmp/rs-test-torn-%d-%s.json", (int)getpid(), c->name);

	/* A control that never tore where it must, or a shim run with too
	 * few reads (a loaded machine), runs longer, and is then skipped with
	 * its counts (common.h, RS_STRETCH). */
	for (int k = 1;; k *= 2) {
		snprintf(torn_secs, sizeof(torn_secs), "%d", k);
		run_torn(c, file, 0, stats, &ctl, r);
		unlink(file);
		cr_log_info("%s control (no shim, %d s): status=%d reads=%lld torn=%lld writes=%lld "
			    "(%.1f%%)", c->name, k, ctl.status, ctl.reads, ctl.torn, ctl.writes,
			    ctl.reads > 0 ? 100.0 * (double)ctl.torn / (double)ctl.reads : 0.0);
		cr_assert_eq(ctl.status, 0, "%s control: status %d: %s", c->name, ctl.status,
			     r->out);
		if (ctl.torn > 0 || !c->assert_control || k >= RS_STRETCH / 2)
			break;
	}
	rs_need(ctl.reads, 1, "%s control: no reads in %s s: %s", c->name, torn_secs, r->out);
	if (c->assert_control)
		rs_need(ctl.torn, 1, "%s control saw no torn read in %lld reads: the checker is "
			"not shown to detect tears here", c->name, ctl.reads);

	for (int k = 1;; k *= 2) {
		snprintf(torn_secs, sizeof(torn_secs), "%d", k);
		unlink(stats);
		run_torn(c, file, 1, stats, &shim, r);
		unlink(file);
		io_calls = rs_stats_file_num(stats, "io_calls", NULL);
		unlink(stats);
		/* The node table run_torn named after us: nobody else uses it. */
		snprintf(stats, sizeof(stats), "/dev/shm/rs-test-torn-%d", (int)getpid());
		unlink(stats);
		snprintf(stats, sizeof(stats), "/tmp/rs-test-torn-%d-%s.json", (int)getpid(),
			 c->name);
		cr_log_info("%s shim (%d s): status=%d reads=%lld torn=%lld writes=%lld "
			    "io_calls=%lld", c->name, k, shim.status, shim.reads, shim.torn,
			    shim.writes, io_calls);
		cr_assert_neq(shim.status, -1, "%s shim: timed out after %d s: %s", c->name,
			      RUN_TIMEOUT, r->out);
		cr_assert_eq(shim.torn, 0, "%s shim: %lld torn reads of %lld: %s", c->name,
			     shim.torn, shim.reads, r->out);
		cr_assert_eq(shim.status, 0, "%s shim: status %d: %s", c->name, shim.status,
			     r->out);
		if (shim.reads >= MIN_READS || k >= RS_STRETCH)
			break;
	}
	rs_need(shim.reads, MIN_READS, "%s shim: only %lld reads, not a meaningful run: %s",
		c->name, shim.reads, r->out);
	cr_assert_gt(shim.writes, 0, "%s shim: no writes: %s", c->name, r->out);
	cr_assert_geq(io_calls, shim.reads + shim.writes,
		      "%s shim: stats io_calls=%lld < reads+writes=%lld: some calls were not "
		      "locked (or no stats file %s)", c->name, io_calls,
		      shim.reads + shim.writes, stats);

	if (ctl.torn == 0)
		/* info, not warn: a Criterion warning makes the runner exit 1 */
		cr_log_info("%s control saw no torn read in %lld reads (not asserted here)",
			    c->name, ctl.reads);
	free(r);
}

TestSuite(torn, .timeout = 60);

Test(torn, tmpfs_pread)
{
	static const struct cfg c = { "tmpfs_pread", "/dev/shm", { NULL }, 1 };

	run_config(&c);
}

Test(torn, ext4_pread)
{
	static const struct cfg c = { "ext4_pread", "/tmp", { NULL }, 0 };

	rs_require_ext4(c.dir);
	run_config(&c);
}

Test(torn, ext4_direct)
{
	static const struct cfg c = { "ext4_direct", "/tmp", { "--direct", NULL }, 0 };

	rs_require_ext4(c.dir);
	rs_require_direct(c.dir);
	run_config(&c);
}

Test(torn, tmpfs_overlap)
{
	static const struct cfg c = { "tmpfs_overlap", "/dev/shm", { "--overlap", NULL }, 0 };

	run_config(&c);
}

Test(torn, tmpfs_use_read)
{
	static const struct cfg c = { "tmpfs_use_read", "/dev/shm", { "--use-read", NULL }, 1 };

	run_config(&c);
}

Test(torn, tmpfs_chk)
{
	static const struct cfg c = { "tmpfs_chk", "/dev/shm", { "--chk", NULL }, 1 };

	run_config(&c);
}
