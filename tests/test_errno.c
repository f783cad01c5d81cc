/*
 * Result-and-errno equivalence (BRIEF §2, "Never change a result").
 *
 * build/tests/helpers/errno_probe makes a fixed list of about 380 calls
 * (EBADF on -1, on a just-closed tracked fd, on a never-opened and on an
 * out-of-table number for every wrapped call; EFAULT; negative offsets;
 * off+len overflow; ESPIPE; EISDIR; wrong access mode; bad iovcnt; bad RWF
 * flags; zero lengths; dup2/dup3/fcntl/close misuse; truncate; overlapping
 * copy_file_range; ordinary successful calls whose effect is checksummed;
 * errno preserved across successful calls, also under lock contention)
 * and prints "case=NAME ret=R errno=E" for each.
 *
 * Each test runs the probe once without the shim and once with it (in the
 * default configuration, with RANGESHIM_LOCK=mutex, and with
 * RANGESHIM_SCOPE=process; on /tmp and on /dev/shm) and requires:
 *  - exit status 0 and exactly PROBE_CASES case lines, then "done";
 *  - identical output, line by line;
 *  - a table of known kernel answers in both outputs, so that the probe
 *    keeps testing what its case names say;
 *  - errno=12345 on every keep_errno_* line;
 *  - the shim really was active: its RANGESHIM_STATS file shows at least
 *    the 24000 locked calls of the contended case.
 * The cases that pass an unmapped iovec array run in forked children of
 * the probe and are compared in a test of their own (iov_pointers_*), so
 * that a crash there is reported by name without hiding the rest; the
 * efault_whole_* ones first write a file of their own alone with heap
 * arrays, so that the shim, granted the whole file, passes the array to
 * the kernel unread.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

#define PROBE_CASES 381
#define PROBE "errno_probe"

/* ---- small utilities ---------------------------------------------------- */

/* Split into lines (in place); returns the count. */
static int split_lines(char *s, char **lines, int max)
{
	int n = 0;

	for (char *p = s; *p && n < max;) {
		char *e = strchr(p, '\n');

		lines[n++] = p;
		if (!e)
			break;
		*e = '\0';
		p = e + 1;
	}
	return n;
}

static int is_iov_family(const char *line)
{
	return strstr(line, "_unmapped_iov_") || strstr(line, "_half_iov_");
}

/* The line for case NAME, or NULL. */
static const char *find_case(char **lines, int n, const char *name)
{
	size_t k = strlen(name);

	for (int i = 0; i < n; i++)
		if (strncmp(lines[i], "case=", 5) == 0 && strncmp(lines[i] + 5, name, k) == 0 &&
		    lines[i][5 + k] == ' ')
			return lines[i];
	return NULL;
}

/* ---- running the probe -------------------------------------------------- */

struct outcome {
	struct rs_run run;
	char *lines[1024];
	int nlines;
	int ncases;
};

static void run_probe(struct outcome *o, const char *base, const char *tag,
		      const char *const extra_env[], int preload)
{
	char dir[PATH_MAX];
	char *argv[3];

	snprintf(dir, sizeof(dir), "%s/%s", base, tag);
	cr_assert_eq(mkdir(dir, 0700), 0, "mkdir %s: %s", dir, strerror(errno));
	argv[0] = (char *)RS_HELPER(PROBE);
	argv[1] = dir;
	argv[2] = NULL;
	rs_run(&o->run, argv, extra_env, preload, 20);
	cr_assert_eq(o->run.status, 0, "%s run (%s) exited with status %d; output tail:\n%s",
		     PROBE, tag, o->run.status,
		     o->run.out + (strlen(o->run.out) > 3000 ? strlen(o->run.out) - 3000 : 0));
	o->nlines = split_lines(o->run.out, o->lines, 1024);
	o->ncases = 0;
	for (int i = 0; i < o->nlines; i++)
		o->ncases += strncmp(o->lines[i], "case=", 5) == 0;
	cr_assert_eq(o->ncases, PROBE_CASES, "%s run (%s) printed %d cases, expected %d",
		     PROBE, tag, o->ncases, PROBE_CASES);
	cr_assert(o->nlines > 0 && strncmp(o->lines[o->nlines - 1], "done cases=", 11) == 0,
		  "%s run (%s): last line is not the done line", PROBE, tag);
	cr_assert_eq(atoi(o->lines[o->nlines - 1] + 11), PROBE_CASES,
		     "%s run (%s): done line says %s", PROBE, tag, o->lines[o->nlines - 1]);
}

/* Known kernel answers, checked in every run (with and without the shim). */
struct expect {
	const char *name;
	const char *what;       /* the "ret=R errno=E" part */
	const char *alt;        /* an accepted alternative, or NULL */
};

static const struct expect expected[] = {
	{ "ebadf_read_m1", "ret=-1 errno=9", NULL },
	{ "efault_whole_unmapped_iov_pwritev", "ret=-1 errno=14", NULL },
	{ "efault_whole_half_iov_writev", "ret=-1 errno=14", NULL },
	{ "efault_whole_half_iov_preadv2cur", "ret=-1 errno=14", NULL },
	{ "ebadf_pwrite_closed", "ret=-1 errno=9", NULL },
	{ "ebadf_pwritev2app_closed", "ret=-1 errno=9", NULL },
	{ "ebadf_preadv2_high", "ret=-1 errno=9", NULL },
	{ "ebadf_writev_intmax", "ret=-1 errno=9", NULL },
	{ "ebadf_lseek_closed", "ret=-1 errno=9", NULL },
	{ "ebadf_ftruncate_closed", "ret=-1 errno=9", NULL },
	{ "ebadf_fallocate_closed", "ret=-1 errno=9", NULL },
	{ "ebadf_posix_fallocate_m1", "ret=9 errno=0", NULL },
	{ "ebadf_posix_fallocate_closed", "ret=9 errno=0", NULL },
	{ "ebadf_cfr_in_closed", "ret=-1 errno=9", NULL },
	{ "ebadf_cfr_out_closed", "ret=-1 errno=9", NULL },
	{ "ebadf_sendfile_out_closed", "ret=-1 errno=9", NULL },
	{ "ebadf_sendfile_in_closed", "ret=-1 errno=9", NULL },
	{ "ok_pwrite", "ret=8192 errno=0", NULL },
	{ "ok_pread", "ret=8192 errno=0", NULL },
	{ "efault_pread_1", "ret=-1 errno=14", NULL },
	{ "efault_pread_null", "ret=-1 errno=14", NULL },
	{ "efault_pwrite_1", "ret=-1 errno=14", NULL },
	{ "efault_pwrite_null", "ret=-1 errno=14", NULL },
	{ "efault_read_1", "ret=-1 errno=14", NULL },
	{ "efault_write_null", "ret=-1 errno=14", NULL },
	{ "efault_pos", "ret=0 errno=0", NULL },
	{ "einval_pread_neg", "ret=-1 errno=22", NULL },
	{ "einval_pwrite_neg", "ret=-1 errno=22", NULL },
	{ "einval_pwrite_neg_len0", "ret=-1 errno=22", NULL },
	{ "einval_preadv_neg", "ret=-1 errno=22", NULL },
	{ "einval_pwritev_neg", "ret=-1 errno=22", NULL },
	{ "einval_preadv2_neg2", "ret=-1 errno=22", NULL },
	{ "einval_ftruncate_neg", "ret=-1 errno=22", NULL },
	{ "einval_fallocate_negoff", "ret=-1 errno=22", NULL },
	{ "ovf_pwrite", "ret=-1 errno=27", "ret=-1 errno=22" },
	{ "espipe_pread", "ret=-1 errno=29", NULL },
	{ "espipe_pwrite", "ret=-1 errno=29", NULL },
	{ "eisdir_read", "ret=-1 errno=21", NULL },
	{ "ebadf_write_ro", "ret=-1 errno=9", NULL },
	{ "iovcnt_readv_m1", "ret=-1 errno=22", NULL },
	{ "iovcnt_writev_iovmax1", "ret=-1 errno=22", NULL },
	{ "iovcnt_preadv_iovmax1", "ret=-1 errno=22", NULL },
	{ "iovcnt_pwritev_m1", "ret=-1 errno=22", NULL },
	{ "iovcnt_readv_0", "ret=0 errno=0", NULL },
	{ "rwf_pwritev2_bad", "ret=-1 errno=95", NULL },
	{ "len0_pread", "ret=0 errno=0", NULL },
	{ "len0_pwrite", "ret=0 errno=0", NULL },
	{ "dup2_to_m1", "ret=-1 errno=9", NULL },
	{ "dup2_to_intmax", "ret=-1 errno=9", NULL },
	{ "fcntl_badcmd", "ret=-1 errno=22", NULL },
	{ "close_twice", "ret=-1 errno=9", NULL },
	{ "truncate_enoent", "ret=-1 errno=2", NULL },
	{ "cfr_overlap", "ret=-1 errno=22", NULL },
	{ "keep_errno_contended", "ret=0 errno=0", NULL },
};

static void check_expected(struct outcome *o, const char *tag)
{
	for (size_t i = 0; i < sizeof(expected) / sizeof(expected[0]); i++) {
		const char *l = find_case(o->lines, o->nlines, expected[i].name);
		const char *got;

		cr_assert_not_null(l, "%s: case %s missing", tag, expected[i].name);
		got = l + 5 + strlen(expected[i].name) + 1;
		cr_expect(strcmp(got, expected[i].what) == 0 ||
			  (expected[i].alt && strcmp(got, expected[i].alt) == 0),
			  "%s: case %s gave \"%s\", expected \"%s\"", tag, expected[i].name,
			  got, expected[i].what);
	}
	for (int i = 0; i < o->nlines; i++) {
		if (strncmp(o->lines[i], "case=keep_errno_", 16) != 0 ||
		    strncmp(o->lines[i], "case=keep_errno_contended ", 26) == 0)
			continue;
		cr_expect(strstr(o->lines[i], " errno=12345") != NULL,
			  "%s: a successful call changed errno: %s", tag, o->lines[i]);
	}
}

/* Compare one family of lines (iov: the unmapped-iovec cases, or the rest). */
static void compare(struct outcome *a, struct outcome *b, const char *tag, int iov)
{
	int diffs = 0, compared = 0;

	cr_assert_eq(a->nlines, b->nlines, "%s: %d lines with the shim, %d without",
		     tag, b->nlines, a->nlines);
	for (int i = 0; i < a->nlines; i++) {
		if (is_iov_family(a->lines[i]) != iov)
			continue;
		compared++;
		if (strcmp(a->lines[i], b->lines[i]) != 0) {
			if (diffs < 40)
				cr_log_error("%s: line %d differs:\n  without shim: %s\n  with shim:    %s",
					     tag, i + 1, a->lines[i], b->lines[i]);
			diffs++;
		}
	}
	cr_assert(compared >= (iov ? 48 : PROBE_CASES - 48),
		  "%s: only %d lines compared", tag, compared);
	cr_assert_eq(diffs, 0, "%s: %d of %d lines differ with the shim (first: see log)",
		     tag, diffs, compared);
}

/* Baseline, then the shim with cfg; iov selects which family is compared. */
static void equivalence(const char *parent, const char *cfg_env, const char *tag, int iov)
{
	char *base = rs_make_base(parent, "rs-errno-");
	char stats_env[PATH_MAX + 32], stats_path[PATH_MAX];
	const char *env[4] = { NULL, NULL, NULL, NULL };
	struct outcome *plain = calloc(1, sizeof(*plain));
	struct outcome *shim = calloc(1, sizeof(*shim));
	char *js;

	run_probe(plain, base, "plain", NULL, 0);
	check_expected(plain, "without shim");

	snprintf(stats_path, sizeof(stats_path), "%s/stats.json", base);
	snprintf(stats_env, sizeof(stats_env), "RANGESHIM_STATS=%s", stats_path);
	env[0] = stats_env;
	env[1] = cfg_env;
	run_probe(shim, base, "shim", env, 1);
	if (!iov)
		check_expected(shim, tag);

	js = rs_read_file(stats_path, NULL);
	cr_assert_not_null(js, "%s: the shim wrote no stats file %s", tag, stats_path);
	cr_assert_geq(rs_json_num(js, "io_calls"), 24000,
		      "%s: io_calls=%lld: the shim did not lock the probe's calls (%s)",
		      tag, rs_json_num(js, "io_calls"), js);
	free(js);

	compare(plain, shim, tag, iov);
	rs_rm_rf(base);
	free(base);
	free(plain);
	free(shim);
}

TestSuite(errno_equiv, .fini = rs_remove_bases);

/* The probe itself, without the shim: it runs, prints every case, and the
 * kernel answers what the case names claim. */
Test(errno_equiv, probe_sane, .timeout = 30)
{
	char *base = rs_make_base("/tmp", "rs-errno-");
	struct outcome *o = calloc(1, sizeof(*o));

	run_probe(o, base, "plain", NULL, 0);
	check_expected(o, "without shim");
	/* No line may carry a crash marker without the shim. */
	for (int i = 0; i < o->nlines; i++)
		cr_expect(strstr(o->lines[i], "ret=signal") == NULL &&
			  strstr(o->lines[i], "ret=exit") == NULL, "%s", o->lines[i]);
	rs_rm_rf(base);
	free(base);
	free(o);
}

Test(errno_equiv, same_default_tmp, .timeout = 40) { equivalence("/tmp", NULL, "default /tmp", 0); }
Test(errno_equiv, same_mutex_tmp, .timeout = 40) { equivalence("/tmp", "RANGESHIM_LOCK=mutex", "mutex /tmp", 0); }
Test(errno_equiv, same_process_tmp, .timeout = 40) { equivalence("/tmp", "RANGESHIM_SCOPE=process", "process /tmp", 0); }
Test(errno_equiv, same_default_shm, .timeout = 40) { equivalence("/dev/shm", NULL, "default /dev/shm", 0); }
Test(errno_equiv, same_mutex_shm, .timeout = 40) { equivalence("/dev/shm", "RANGESHIM_LOCK=mutex", "mutex /dev/shm", 0); }
Test(errno_equiv, same_process_shm, .timeout = 40) { equivalence("/dev/shm", "RANGESHIM_SCOPE=process", "process /dev/shm", 0); }

/* readv/writev/preadv/pwritev/preadv2/pwritev2 with an iovec array that is
 * (partly) unmapped: the kernel answers EFAULT, or EBADF/ESPIPE first. */
Test(errno_equiv, iov_pointers_default, .timeout = 40) { equivalence("/dev/shm", NULL, "iov default", 1); }
Test(errno_equiv, iov_pointers_mutex, .timeout = 40) { equivalence("/tmp", "RANGESHIM_LOCK=mutex", "iov mutex", 1); }
