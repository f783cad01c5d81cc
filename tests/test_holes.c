/*
 * Criterion suite: the process-side holes of issue 8, one test each, each
 * with its control.  The rigs are in tests/helpers/holes_probe.c.
 *
 *  control  the same rig without the shim, for up to CONTROL_MS, stopping
 *           after STOP_AFTER torn reads: it must tear at least once, which
 *           shows that the rig can see the tear the shim must prevent.
 *  shim     librangeshim.so preloaded, for SHIM_MS: no torn read, and
 *           enough reads and writes for the run to mean something.
 *
 * Measured on this machine (2 vCPU, tmpfs, kernel 6.18), 3 s per run with
 * the library built from main, which had the holes, against this branch:
 *   noappend  pwritev2(RWF_NOAPPEND) on O_APPEND      main 580   now 0
 *   punch     4 GiB KEEP_SIZE punch vs block at 3 GiB  main 1784  now 0
 *   dup2      dup2 rotation under a pwrite             main 134   now 0
 *   freopen   the same through freopen(.., "r+", fp)   main 77    now 0
 *   fdopen    O_APPEND set by fdopen(fd, "a")          main 21329 now 0
 *   syscall   O_APPEND set by syscall(SYS_fcntl)       main 29940 now 0
 * (inherit was already right on main; it guards the F_GETFL on first use.)
 *
 *  rwf      not a race: where each pwritev2 flag combination writes, and
 *           what it returns, is the same with and without the shim, and
 *           the stats count exactly the calls that write at end of file
 *           as appends (so RWF_NOAPPEND did not lock [EOF, inf)).
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "common.h"

#ifndef RS_SAN
#define RS_SAN ""
#endif

#define HELPER RS_HELPER("holes_probe")
#define CONTROL_MS "3000"
#define SHIM_MS "2000"
#define STOP_AFTER "5"
/* A sanitized rig runs several times slower. */
#define MIN_READS (RS_SAN[0] ? 5 : 50)
#define RUN_TIMEOUT 30

TestSuite(holes, .timeout = 90, .fini = rs_remove_bases);

struct counts {
	long long reads, torn, writes;
};

static char shm_env[80];

/* Run holes_probe with argv[1..] = args (NULL-terminated). */
static void probe(struct rs_run *r, int preload, const char *scope, const char *const *args,
		  struct counts *c)
{
	char *argv[16];
	const char *env[3] = { shm_env, scope, NULL };
	int n = 0;

	snprintf(shm_env, sizeof(shm_env), "RANGESHIM_SHM=/rs-test-holes-%d", (int)getpid());
	argv[n++] = (char *)HELPER;
	for (int i = 0; args[i] && n < 15; i++)
		argv[n++] = (char *)args[i];
	argv[n] = NULL;
	rs_run(r, argv, env, preload, RUN_TIMEOUT);
	c->reads = rs_field(r->out, "reads");
	c->torn = rs_field(r->out, "torn");
	c->writes = rs_field(r->out, "writes");
}

static void cleanup_shm(void)
{
	char p[120];

	snprintf(p, sizeof(p), "/dev/shm/rs-test-holes-%d", (int)getpid());
	unlink(p);
}

/*
 * The rig is args with the duration and stop count appended: the control
 * without the shim must tear, the shim run must not.
 */
static void tear_case(const char *name, const char *scope, const char *const *args, int nargs)
{
	struct rs_run *r = calloc(1, sizeof(*r));
	const char *a[16];
	char ms[16];
	struct counts ctl, shim;

	cr_assert_not_null(r);
	for (int i = 0; i < nargs; i++)
		a[i] = args[i];

	/* A control that never tore (a loaded machine) runs longer, and is
	 * then skipped with its counts; so is a shim run with too few reads
	 * (common.h, RS_STRETCH). */
	for (int k = 1;; k *= 2) {
		snprintf(ms, sizeof(ms), "%d", k * atoi(CONTROL_MS));
		a[nargs] = ms;
		a[nargs + 1] = STOP_AFTER;
		a[nargs + 2] = NULL;
		probe(r, 0, NULL, a, &ctl);
		cr_log_info("%s control (no shim, %s ms): status=%d reads=%lld torn=%lld "
			    "writes=%lld", name, ms, r->status, ctl.reads, ctl.torn, ctl.writes);
		if (strstr(r->out, "punch=unsupported")) {
			free(r);
			cr_skip_test("%s: hole punching is not supported here", name);
		}
		cr_assert_eq(r->status, 0, "%s control: status %d: %s", name, r->status, r->out);
		if (ctl.torn > 0 || k >= RS_STRETCH / 2)
			break;
	}
	rs_need(ctl.torn, 1, "%s control saw no torn read in %lld reads: the rig is not shown to "
		"detect the tear here: %s", name, ctl.reads, r->out);

	for (int k = 1;; k *= 2) {
		snprintf(ms, sizeof(ms), "%d", k * atoi(SHIM_MS));
		a[nargs] = ms;
		a[nargs + 1] = "0";
		probe(r, 1, scope, a, &shim);
		cleanup_shm();
		cr_log_info("%s shim%s%s (%s ms): status=%d reads=%lld torn=%lld writes=%lld", name,
			    scope ? " " : "", scope ? scope : "", ms, r->status, shim.reads,
			    shim.torn, shim.writes);
		cr_assert_neq(r->status, -1, "%s shim: timed out: %s", name, r->out);
		cr_assert_eq(shim.torn, 0, "%s shim: %lld torn reads of %lld: %s", name, shim.torn,
			     shim.reads, r->out);
		cr_assert_eq(r->status, 0, "%s shim: status %d: %s", name, r->status, r->out);
		if (shim.reads >= MIN_READS || k >= RS_STRETCH)
			break;
	}
	rs_need(shim.reads, MIN_READS, "%s shim: only %lld reads, not a meaningful run: %s",
		name, shim.reads, r->out);
	cr_assert_gt(shim.writes, 0, "%s shim: no writes: %s", name, r->out);
	free(r);
}

static char *in_base(const char *base, const char *name)
{
	char *p = malloc(PATH_MAX);

	snprintf(p, PATH_MAX, "%s/%s", base, name);
	return p;
}

/* Item 1: RWF_NOAPPEND on an O_APPEND fd writes at off; lock there. */
Test(holes, rwf_noappend_node)
{
	char *base = rs_make_base("/dev/shm", "rs-holes-");
	const char *args[] = { "noappend", in_base(base, "f") };

	tear_case("rwf_noappend", NULL, args, 2);
}

Test(holes, rwf_noappend_process)
{
	char *base = rs_make_base("/dev/shm", "rs-holes-");
	const char *args[] = { "noappend", in_base(base, "f") };

	tear_case("rwf_noappend", "RANGESHIM_SCOPE=process", args, 2);
}

/* Item 1, unit: every flag combination writes where it would without the
 * shim, and only the calls that write at end of file lock as appends. */
Test(holes, rwf_flags_place_the_lock)
{
	char *base = rs_make_base("/dev/shm", "rs-holes-");
	char *file = in_base(base, "f");
	char *stats = in_base(base, "st.json");
	char stats_env[PATH_MAX + 32];
	char *argv[] = { (char *)HELPER, (char *)"rwf", file, NULL };
	const char *env[] = { stats_env, NULL };
	struct rs_run *plain = calloc(1, sizeof(*plain)), *shim = calloc(1, sizeof(*shim));
	long long expect;
	char *js;

	cr_assert(plain && shim);
	snprintf(stats_env, sizeof(stats_env), "RANGESHIM_STATS=%s", stats);
	rs_run(plain, argv, NULL, 0, RUN_TIMEOUT);
	cr_assert_eq(plain->status, 0, "without the shim: %s", plain->out);
	cr_assert(strstr(plain->out, "content=BCAADDEG"), "the kernel did not write where this "
		  "test expects (RWF_NOAPPEND needs Linux 6.9): %s", plain->out);
	rs_run(shim, argv, env, 1, RUN_TIMEOUT);
	cr_assert_eq(shim->status, 0, "with the shim: %s", shim->out);
	cr_assert_str_eq(shim->out, plain->out, "results differ with the shim");
	expect = rs_field(shim->out, "expect_appends");
	js = rs_read_file(stats, NULL);
	cr_assert_not_null(js, "no stats file %s", stats);
	cr_assert_eq(rs_json_num(js, "appends"), expect,
		     "calls locked from end of file: %lld, expected %lld: %s",
		     rs_json_num(js, "appends"), expect, js);
	free(js);
	free(plain);
	free(shim);
}

/* Item 5: a 4 GiB punch acts on all of it; the block at 3 GiB is inside. */
Test(holes, fallocate_beyond_2g)
{
	char *base = rs_make_base("/dev/shm", "rs-holes-");
	const char *args[] = { "punch", in_base(base, "f") };

	tear_case("fallocate_beyond_2g", NULL, args, 2);
}

/* Item 8: dup2 rotation under a writer. */
Test(holes, dup2_rotation)
{
	char *base = rs_make_base("/dev/shm", "rs-holes-");
	const char *args[] = { "dup2", in_base(base, "x"), in_base(base, "y") };

	tear_case("dup2_rotation", NULL, args, 3);
}

/* Item 8 again: freopen rotates with a glibc-internal dup3. */
Test(holes, freopen_rotation)
{
	char *base = rs_make_base("/dev/shm", "rs-holes-");
	const char *args[] = { "freopen", in_base(base, "x"), in_base(base, "y") };

	tear_case("freopen_rotation", NULL, args, 3);
}

/* Item 9: O_APPEND set where no wrapped fcntl sees it. */
Test(holes, append_by_fdopen)
{
	char *base = rs_make_base("/dev/shm", "rs-holes-");
	const char *args[] = { "append", "fdopen", in_base(base, "f") };

	tear_case("append_by_fdopen", NULL, args, 3);
}

Test(holes, append_by_raw_fcntl)
{
	char *base = rs_make_base("/dev/shm", "rs-holes-");
	const char *args[] = { "append", "syscall", in_base(base, "f") };

	tear_case("append_by_raw_fcntl", NULL, args, 3);
}

Test(holes, append_inherited)
{
	char *base = rs_make_base("/dev/shm", "rs-holes-");
	char *file = in_base(base, "f");
	char how[64];
	int a = open(file, O_WRONLY | O_CREAT | O_APPEND, 0600);
	int b = open(file, O_WRONLY | O_APPEND);
	const char *args[] = { "append", how, file };

	cr_assert(a >= 0 && b >= 0, "open %s: %s", file, strerror(errno));
	snprintf(how, sizeof(how), "inherit:%d:%d", a, b);
	tear_case("append_inherited", NULL, args, 3);
	close(a);
	close(b);
}
