/*
 * What the shim cannot coordinate is counted and named, never silent
 * (issue 12; shim/preload/coverage.c, docs/limitations.md).
 *
 * build/tests/helpers/cov_probe does one kind of uncoordinated I/O per
 * subcommand, with the shim preloaded and RANGESHIM_STATS writing one
 * JSON report per process into a fresh directory.  Each test sums a
 * counter over those reports and requires:
 *  - the exact count the probe's calls make for its own kind, and zero
 *    for every other uncovered_* counter;
 *  - the controls (plain pread/pwrite; the same uncoordinated calls on
 *    /dev/null, /proc, pipes, and private or read-only mappings) leave
 *    every uncovered_* counter at zero, with all six keys in the JSON;
 *  - RANGESHIM_LOG=info names a kind once however often it happens, and
 *    the default level prints nothing;
 *  - real programs: fio's io_uring, libaio, posixaio and splice engines,
 *    sort and sed each make their counter non-zero; fio's psync engine
 *    and cat (read/write) leave them zero;
 *  - reports from _exit, _Exit and syscall(SYS_exit_group) in forked
 *    children (fio's jobs have one too), none from a vfork child (not
 *    under TSan, whose vfork is a fork), and every child of a parent
 *    whose other thread holds locks at fork.
 * fio is skipped, saying so, when it is not installed or the kernel
 * refuses an engine; sanitizer builds skip the real programs, which are
 * not built with the sanitizer the preloaded shim needs.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

#ifndef RS_SAN
#define RS_SAN ""
#endif

#define PROBE RS_HELPER("cov_probe")
#define NO_PMQUERY RS_HELPER("no_pmquery")

static const char *const kinds[] = {
	"uncovered_io_uring", "uncovered_aio", "uncovered_posix_aio",
	"uncovered_splice", "uncovered_mmap", "uncovered_stdio",
};
#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))

struct job {
	char *base;             /* the test's directory */
	char file[PATH_MAX];    /* base/data */
	char stats_env[PATH_MAX + 32];
	char log_env[64];
	struct rs_run run;
};

static struct job *job_new(void)
{
	struct job *j = calloc(1, sizeof(*j));

	cr_assert(j);
	j->base = rs_make_base("/tmp", "rs-cov-");
	snprintf(j->file, sizeof(j->file), "%s/data", j->base);
	snprintf(j->stats_env, sizeof(j->stats_env), "RANGESHIM_STATS=%s/st.%%p.json", j->base);
	snprintf(j->log_env, sizeof(j->log_env), "RANGESHIM_LOG=warn");
	return j;
}

/* Run argv with the shim, stats on, from the job's directory. */
static void job_run(struct job *j, char *const argv[], int timeout_s)
{
	const char *env[] = { j->stats_env, j->log_env, NULL };
	char cwd[PATH_MAX];

	cr_assert_not_null(getcwd(cwd, sizeof(cwd)));
	cr_assert_eq(chdir(j->base), 0);
	rs_run(&j->run, argv, env, 1, timeout_s);
	cr_assert_eq(chdir(cwd), 0);
}

/* The sum of key over every report in the directory; *nreports counts
 * them, and a report without the key fails the test. */
static long long sum_key(struct job *j, const char *key, int *nreports)
{
	DIR *d = opendir(j->base);
	struct dirent *e;
	long long sum = 0;
	int n = 0;

	cr_assert_not_null(d);
	while ((e = readdir(d)) != NULL) {
		char path[PATH_MAX + 300];
		long long v;

		if (strncmp(e->d_name, "st.", 3) != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", j->base, e->d_name);
		v = rs_stats_file_num(path, key, NULL);
		cr_assert_geq(v, 0, "%s has no \"%s\"", path, key);
		sum += v;
		n++;
	}
	closedir(d);
	if (nreports)
		*nreports = n;
	return sum;
}

static int skipped(struct job *j)
{
	const char *s = strstr(j->run.out, "skip=");

	if (!s)
		return 0;
	cr_log_info("cov_probe: %.200s", s);
	return 1;
}

/* Run cov_probe CMD and require want of the one kind (NULL: none) and
 * zero of the others. */
static struct job *probe_in(const char *pmquery, const char *cmd, const char *kind,
			    long long want);

static struct job *probe(const char *cmd, const char *kind, long long want)
{
	return probe_in(NULL, cmd, kind, want);
}

/* The same, with the kernel's PROCMAP_QUERY failing with errno pmquery
 * (no_pmquery), unless NULL.  Returns before any check if seccomp is
 * refused ("skip=seccomp" in the output). */
static struct job *probe_in(const char *pmquery, const char *cmd, const char *kind,
			    long long want)
{
	struct job *j = job_new();
	char *plain[] = { PROBE, (char *)cmd, j->file, NULL };
	char *wrapped[] = { NO_PMQUERY, (char *)pmquery, PROBE, (char *)cmd, j->file, NULL };
	int n;

	job_run(j, pmquery ? wrapped : plain, 60);
	if (pmquery && strstr(j->run.out, "skip=seccomp"))
		return j;
	cr_assert_eq(j->run.status, 0, "cov_probe %s: %s", cmd, j->run.out);
	cr_assert(strstr(j->run.out, "done shim=1"), "%s", j->run.out);
	cr_assert_geq(sum_key(j, "io_calls", &n), 0);
	cr_assert_geq(n, 1, "no stats report in %s", j->base);
	for (size_t i = 0; i < NKINDS; i++) {
		long long v = sum_key(j, kinds[i], NULL);

		if (kind && strcmp(kinds[i], kind) == 0)
			cr_expect_eq(v, want, "cov_probe %s: %s=%lld, want %lld", cmd, kinds[i], v, want);
		else
			cr_expect_eq(v, 0, "cov_probe %s: %s=%lld, want 0", cmd, kinds[i], v);
	}
	return j;
}

TestSuite(coverage, .fini = rs_remove_bases, .timeout = 120);

/* ---- the controls ------------------------------------------------------ */

Test(coverage, plain_pread_pwrite_leave_every_counter_zero)
{
	struct job *j = probe("plain", NULL, 0);

	/* The shim was at work: the calls were coordinated. */
	cr_expect_geq(sum_key(j, "io_calls", NULL), 10, "%s", j->run.out);
}

Test(coverage, uncoordinated_targets_are_not_counted)
{
	probe("controls", NULL, 0);
}

/* ---- one kind each ---------------------------------------------------- */

Test(coverage, writable_shared_mappings)
{
	probe("mmap", "uncovered_mmap", 2);
}

Test(coverage, stdio_streams)
{
	/* fopen, fopen64, freopen, fdopen. */
	probe("stdio", "uncovered_stdio", 4);
}

Test(coverage, splice)
{
	probe("splice", "uncovered_splice", 3);
}

Test(coverage, posix_aio_requests)
{
	/* aio_write, aio_read, and lio_listio's two requests (not its NOP). */
	probe("posix_aio", "uncovered_posix_aio", 4);
}

Test(coverage, io_uring_rings)
{
	struct job *j;

#if defined(__x86_64__)
	/* Through syscall() (closed, and kept) and one made with the
	 * instruction, found at exit: the kept one is not counted twice. */
	j = probe("uring", "uncovered_io_uring", 3);
#else
	j = probe("uring", "uncovered_io_uring", 2);
#endif
	if (skipped(j))
		cr_skip_test("the kernel refuses io_uring_setup: %s", j->run.out);
}

Test(coverage, linux_aio_contexts)
{
	struct job *j;

#if defined(__x86_64__)
	j = probe("aio", "uncovered_aio", 2);
#else
	j = probe("aio", "uncovered_aio", 1);
#endif
	if (skipped(j))
		cr_skip_test("the kernel refuses io_setup: %s", j->run.out);
}

/* ---- how the exit scan looks at the mappings ---------------------------- */

/*
 * Rings made with the instruction itself are found at exit, among the
 * shared mappings the kernel lists through PROCMAP_QUERY (Linux 6.11), or
 * in the text of /proc/self/maps where the kernel does not know the query
 * (ENOTTY): the same counts either way.  The control: a kernel that
 * answers "no such mapping" (ENOENT) to every query hides them, so the
 * scan did take the kernel's answer.  Elsewhere than x86-64 no ring is
 * made that way, and the control has nothing to hide.
 */
static void rings_at_exit(const char *pmquery, long long uring, long long aio)
{
	struct job *j = probe_in(pmquery, "uring", "uncovered_io_uring", uring);

	if (skipped(j))
		cr_skip_test("%s", j->run.out);
	j = probe_in(pmquery, "aio", "uncovered_aio", aio);
	if (skipped(j))
		cr_skip_test("%s", j->run.out);
}

Test(coverage, rings_found_at_exit_without_the_query)
{
#if defined(__x86_64__)
	rings_at_exit("ENOTTY", 3, 2);
#else
	rings_at_exit("ENOTTY", 2, 1);
#endif
}

Test(coverage, rings_found_at_exit_come_from_the_query)
{
#if defined(__x86_64__)
	rings_at_exit("ENOENT", 2, 1);
#else
	cr_skip_test("no ring is made with the instruction on this architecture");
#endif
}

/*
 * The query's answer is written by the kernel through an ioctl valgrind
 * does not know, so memcheck must not see the scan read it unset: a
 * program run under valgrind with the shim preloaded reports nothing
 * that the program did not do.  Not in sanitizer builds, whose shim
 * cannot run under valgrind.
 */
Test(coverage, exit_scan_is_clean_under_memcheck)
{
	struct job *j = job_new();
	char *argv[] = { (char *)"/usr/bin/valgrind", (char *)"-q", (char *)"--error-exitcode=9",
			 PROBE, (char *)"uring", j->file, NULL };

	if (RS_SAN[0])
		cr_skip_test("a sanitizer build (%s)", RS_SAN);
	if (access(argv[0], X_OK) != 0)
		cr_skip_test("no valgrind (tests/deps.sh installs it)");
	job_run(j, argv, 120);
	cr_expect_eq(j->run.status, 0, "memcheck found errors, or the probe failed:\n%s",
		     j->run.out);
	cr_expect(strstr(j->run.out, "done shim=1"), "%s", j->run.out);
}

/* ---- the info line ---------------------------------------------------- */

static int count(const char *s, const char *needle)
{
	int n = 0;

	for (; (s = strstr(s, needle)) != NULL; s += strlen(needle))
		n++;
	return n;
}

Test(coverage, info_names_each_kind_once_and_warn_is_quiet)
{
	struct job *j = job_new();
	char *argv[] = { PROBE, "stdio", j->file, NULL };

	snprintf(j->log_env, sizeof(j->log_env), "RANGESHIM_LOG=info");
	job_run(j, argv, 60);
	cr_assert_eq(j->run.status, 0, "%s", j->run.out);
	cr_expect_eq(count(j->run.out, "NOT coordinated"), 1, "%s", j->run.out);
	cr_expect(strstr(j->run.out, "stdio stream on a coordinated file"), "%s", j->run.out);
	cr_expect(strstr(j->run.out, j->file), "the line names the file: %s", j->run.out);
	cr_expect(strstr(j->run.out, "uncovered_stdio"), "%s", j->run.out);
	cr_expect_eq(sum_key(j, "uncovered_stdio", NULL), 4);

	/* The default level: the same calls, counted, and not a word. */
	j = job_new();
	argv[2] = j->file;
	job_run(j, argv, 60);
	cr_assert_eq(j->run.status, 0, "%s", j->run.out);
	cr_expect_null(strstr(j->run.out, "rangeshim["), "%s", j->run.out);
	cr_expect_eq(sum_key(j, "uncovered_stdio", NULL), 4);
}

Test(coverage, info_without_stats_still_names_it)
{
	struct job *j = job_new();
	char *argv[] = { PROBE, "mmap", j->file, NULL };
	int n;

	snprintf(j->stats_env, sizeof(j->stats_env), "RANGESHIM_STATS=0");
	snprintf(j->log_env, sizeof(j->log_env), "RANGESHIM_LOG=info");
	job_run(j, argv, 60);
	cr_assert_eq(j->run.status, 0, "%s", j->run.out);
	cr_expect_eq(count(j->run.out, "NOT coordinated"), 1, "%s", j->run.out);
	cr_expect(strstr(j->run.out, "MAP_SHARED mapping of a coordinated file"), "%s", j->run.out);
	sum_key(j, "io_calls", &n);
	cr_expect_eq(n, 0, "no report without RANGESHIM_STATS");
}

/* ---- reports from exits that skip destructors ------------------------- */

static long long child_key(struct job *j, const char *key, int *found)
{
	const char *c = strstr(j->run.out, "child=");
	char path[PATH_MAX + 64];

	cr_assert_not_null(c, "%s", j->run.out);
	snprintf(path, sizeof(path), "%s/st.%ld.json", j->base, strtol(c + 6, NULL, 10));
	return rs_stats_file_num(path, key, found);
}

static void exit_reports(const char *kind)
{
	struct job *j = job_new();
	char *argv[] = { PROBE, "exit", (char *)kind, j->file, NULL };
	int found, n;

	job_run(j, argv, 60);
	cr_assert_eq(j->run.status, 0, "%s", j->run.out);
	/* The child's own counters: its one pwrite. */
	cr_expect_eq(child_key(j, "io_calls", &found), 1, "child leaving with %s", kind);
	cr_expect(found, "no report from the child that left with %s", kind);
	sum_key(j, "io_calls", &n);
	cr_expect_eq(n, 2, "parent and child: %d reports", n);
}

Test(coverage, report_from__exit)
{
	exit_reports("_exit");
}

Test(coverage, report_from__Exit)
{
	exit_reports("_Exit");
}

Test(coverage, report_from_exit_group_through_syscall)
{
	exit_reports("exit_group");
}

Test(coverage, no_report_from_a_vfork_child)
{
	struct job *j;
	char *argv[] = { PROBE, "vfork", NULL, NULL };
	int found, n;

	/* TSan's vfork interceptor makes a real fork, whose child reports. */
	if (strcmp(RS_SAN, "tsan") == 0)
		cr_skip_test("TSan turns vfork into fork");
	j = job_new();
	argv[2] = j->file;
	job_run(j, argv, 60);
	cr_assert_eq(j->run.status, 0, "%s", j->run.out);
	child_key(j, "io_calls", &found);
	cr_expect_not(found, "a vfork child shares its parent's counters: no report");
	/* And the parent's report is still written (the child did not mark
	 * it done in their shared memory). */
	cr_expect_eq(sum_key(j, "io_calls", &n), 2);
	cr_expect_eq(n, 1);
}

Test(coverage, forked_children_report_while_another_thread_holds_locks)
{
	struct job *j = job_new();
	char *argv[] = { PROBE, "forks", "30", j->file, NULL };
	int n;

	/* A lock another thread held at fork stays held in the child: a
	 * report that took one would hang here (the timeout fails it). */
	job_run(j, argv, 90);
	cr_assert_eq(j->run.status, 0, "status -1 is a hang: %s", j->run.out);
	sum_key(j, "io_calls", &n);
	cr_expect_eq(n, 31, "30 children and the parent: %d reports", n);
}

Test(coverage, stderr_summary_from__exit)
{
	struct job *j = job_new();
	char *argv[] = { PROBE, "exit", "_exit", j->file, NULL };
	char heading[64];
	const char *c;

	snprintf(j->stats_env, sizeof(j->stats_env), "RANGESHIM_STATS=1");
	job_run(j, argv, 60);
	cr_assert_eq(j->run.status, 0, "%s", j->run.out);
	c = strstr(j->run.out, "child=");
	cr_assert_not_null(c, "%s", j->run.out);
	snprintf(heading, sizeof(heading), "rangeshim[%ld] stats:", strtol(c + 6, NULL, 10));
	cr_expect(strstr(j->run.out, heading), "no summary from the child: %s", j->run.out);
	cr_expect(strstr(j->run.out, "uncovered_stdio"), "%s", j->run.out);
}

/* ---- real programs ---------------------------------------------------- */

static void need_real_programs(void)
{
	if (RS_SAN[0])
		cr_skip_test("sanitizer build: real programs cannot load the %s shim", RS_SAN);
}

static void need_fio(void)
{
	need_real_programs();
	if (access("/usr/bin/fio", X_OK) != 0) {
		cr_log_info("skipping: fio is not installed (apt-get install fio)");
		cr_skip_test("fio is not installed (apt-get install fio)");
	}
}

/* fio ENGINE on the job's file; the sum of key over its reports. */
static long long fio(struct job *j, const char *engine, const char *key, int *nreports)
{
	char eng[64], file[PATH_MAX + 16];
	char *argv[] = { "/usr/bin/fio", "--name=cov", file, "--size=1M", "--bs=4k",
			 "--rw=randrw", eng, "--iodepth=4", "--minimal", NULL };

	snprintf(eng, sizeof(eng), "--ioengine=%s", engine);
	snprintf(file, sizeof(file), "--filename=%s", j->file);
	job_run(j, argv, 60);
	if (j->run.status != 0) {
		cr_log_info("skipping: fio --ioengine=%s fails here: %.300s", engine, j->run.out);
		cr_skip_test("fio --ioengine=%s fails here: %.300s", engine, j->run.out);
	}
	return sum_key(j, key, nreports);
}

static void fio_engine(const char *engine, const char *key)
{
	struct job *j;
	long long v;
	int n;

	need_fio();
	j = job_new();
	v = fio(j, engine, key, &n);
	cr_expect_gt(v, 0, "fio --ioengine=%s: %s=%lld", engine, key, v);
	/* fio's job runs in a forked child that leaves with _exit. */
	cr_expect_geq(n, 2, "fio --ioengine=%s: %d reports (the job's is missing)", engine, n);
}

Test(coverage, fio_io_uring)
{
	fio_engine("io_uring", "uncovered_io_uring");
}

Test(coverage, fio_libaio)
{
	fio_engine("libaio", "uncovered_aio");
}

Test(coverage, fio_posixaio)
{
	fio_engine("posixaio", "uncovered_posix_aio");
}

Test(coverage, fio_splice)
{
	fio_engine("splice", "uncovered_splice");
}

Test(coverage, fio_psync_control)
{
	struct job *j;
	int n;

	need_fio();
	j = job_new();
	cr_expect_gt(fio(j, "psync", "io_calls", &n), 0);
	cr_expect_geq(n, 2);
	for (size_t i = 0; i < NKINDS; i++)
		cr_expect_eq(sum_key(j, kinds[i], NULL), 0, "fio psync: %s", kinds[i]);
}

/* PROG ARGS... with the job's file written first; the sum of key. */
static long long program(struct job *j, char *const argv[], const char *key)
{
	FILE *f = fopen(j->file, "w");

	cr_assert_not_null(f);
	fputs("pear\napple\nfig\n", f);
	fclose(f);
	job_run(j, argv, 60);
	cr_assert_eq(j->run.status, 0, "%s: %s", argv[0], j->run.out);
	return sum_key(j, key, NULL);
}

Test(coverage, sort_and_sed_use_stdio)
{
	struct job *j;
	char out[PATH_MAX + 8];

	need_real_programs();
	j = job_new();
	snprintf(out, sizeof(out), "%s/out", j->base);
	{
		char *argv[] = { "/usr/bin/sort", j->file, "-o", out, NULL };

		/* The input stream and the output stream. */
		cr_expect_geq(program(j, argv, "uncovered_stdio"), 2, "sort: %s", j->run.out);
	}
	j = job_new();
	{
		char *argv[] = { "/bin/sed", "-n", "p", j->file, NULL };

		cr_expect_geq(program(j, argv, "uncovered_stdio"), 1, "sed: %s", j->run.out);
	}
	/* The control: cat reads and writes with read/write, coordinated. */
	j = job_new();
	{
		char *argv[] = { "/bin/cat", j->file, NULL };

		cr_expect_eq(program(j, argv, "uncovered_stdio"), 0, "cat: %s", j->run.out);
		cr_expect_gt(sum_key(j, "io_calls", NULL), 0, "cat: %s", j->run.out);
	}
}

Test(coverage, standard_streams_redirected_to_files)
{
	struct job *j;

	need_real_programs();
	j = job_new();
	{
		/* sort reads stdin and writes stdout through stdio; the shell
		 * opened both files, so there is no fopen to see. */
		char *argv[] = { "/bin/sh", "-c", "exec /usr/bin/sort < data > out", NULL };

		cr_expect_eq(program(j, argv, "uncovered_stdio"), 2, "%s", j->run.out);
	}
	j = job_new();
	{
		char *argv[] = { "/bin/sh", "-c", "exec /bin/cat < data > out", NULL };

		cr_expect_eq(program(j, argv, "uncovered_stdio"), 0, "%s", j->run.out);
	}
}
