/*
 * Criterion suite: process-level robustness under the shim.
 *
 * Every case runs tests/helpers/proc_probe (one subcommand per case) once
 * with the shim preloaded and, where a comparison means something, once
 * without it as the control.  The probe prints "key=N" counts and a line
 * "verdict=PASS|FAIL"; it runs under a 20 s rs_run() timeout, so a
 * deadlock shows up as status -1 instead of a hung suite.  The shim is
 * preloaded only into the probe, never into this runner.
 *
 *  fork_with_locks_held  Five threads keep the shim busy: two pwrite the
 *              same 1 MiB range (one holds it, one queues), one preads an
 *              overlapping range and pwrites the next, one does lseek+write
 *              (the file-offset lock), one opens/preads/closes (the fd
 *              table mutex).  The main thread forks 50 times; each child at
 *              once pwrites and preads those same ranges, writes at the
 *              shared cursor, opens the file again, and _exit(0)s.  Every
 *              child must exit 0 within 5 s.
 *  raw_fork_with_locks_held  The same with _Fork(), which runs no atfork
 *              handlers (its child may call only async-signal-safe
 *              functions, which pwrite/pread/open/close are).  The shim
 *              wraps _Fork to run its fork handlers itself.
 *  exec        With the same background threads running, 5 rounds of
 *              fork+execve, posix_spawn (with a file action opening the
 *              file as fd 20) and vfork+execve of the probe itself, which
 *              in the new image checks that the shim is (or is not) loaded
 *              as in the parent, does pwrite/pread on the inherited fd and
 *              lseek+write/read on a fresh open, and verifies the data.
 *  signal_restart, signal_norestart  A setitimer(ITIMER_REAL, 100 us)
 *              SIGALRM handler, installed with and without SA_RESTART,
 *              pwrites the same range the main thread is pwriting (a peer
 *              thread with SIGALRM blocked pwrites it too, so the main
 *              thread also waits for the lock) and writes at the cursor of
 *              a second tracked fd that the main loop also writes.  ~1 s.
 *              The handler must have written (>0) with no error, the main
 *              loop must finish, the second file's size must equal every
 *              byte written to it, and the EINTR behaviour must match the
 *              control: no EINTR or short write on the regular files, and
 *              a blocking pipe read interrupted (EINTR) without SA_RESTART
 *              and restarted with it.  With the shim, the stats must show
 *              reentrant > 0: the handler did run inside the shim.
 *  signal_close_then_fopen  A one-shot SIGALRM handler closes a tracked fd
 *              while its thread is inside the shim (stats: reentrant > 0),
 *              then fopen() (whose open the shim cannot see) reuses that
 *              number for a new file; a writer on it and a reader on a
 *              separate open of the new file must see no torn read.  The close
 *              is recorded without the table mutex (rs_fdt_forget).
 *  close_race  Four threads pread/pwrite/preadv/pwritev and lseek+read/
 *              write on four fd numbers while a fifth close()s and
 *              re-open()s them, close_range()s them, dup2()s/dup3()s other
 *              files onto them and F_DUPFDs.  Each I/O must return success
 *              or EBADF; no crash, no deadlock; the stats JSON
 *              (RANGESHIM_STATS=path with %p) must be written, so the
 *              process exited normally.  fd_races is only logged.
 *  many_threads  200 threads (half on a shared fd, half on their own) do
 *              four 3000-byte pwrite/pwritev each to disjoint ranges
 *              (neighbours share pages), released together by a barrier;
 *              the whole file is then verified.
 *
 * Scratch files are /dev/shm/rs-test-proc-<pid>-<case>.{a,b,c}; the probe
 * removes them and so does the test.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common.h"


#define PROBE RS_HELPER("proc_probe")
/* A bound for a hang, not a speed: forks and execs of sanitized programs
 * took 13 s of 20 on a loaded machine, and TSan's 50 forks with and
 * without the shim together over 60 s beside a second suite.  Each test
 * runs at most two probes, which the suite's timeout leaves room for. */
#define PROBE_TIMEOUT (RS_SLOW > 1 ? 100 : 40)

struct ctx {
	char base[256];
	char shm_env[128];
	char stats_env[256];
	char stats_glob[256];
	const char *env[4];
};

static void ctx_init(struct ctx *c, const char *tag, int stats)
{
	int n = 0;

	snprintf(c->base, sizeof(c->base), "/dev/shm/rs-test-proc-%d-%s", (int)getpid(), tag);
	/* Our own segment name, should node scope ever use one. */
	snprintf(c->shm_env, sizeof(c->shm_env), "RANGESHIM_SHM=/rs-test-proc-%d", (int)getpid());
	c->env[n++] = c->shm_env;
	if (stats) {
		snprintf(c->stats_env, sizeof(c->stats_env),
			 "RANGESHIM_STATS=/tmp/rs-test-proc-%d-%s.%%p.json", (int)getpid(), tag);
		snprintf(c->stats_glob, sizeof(c->stats_glob),
			 "/tmp/rs-test-proc-%d-%s.*.json", (int)getpid(), tag);
		c->env[n++] = c->stats_env;
	} else {
		c->stats_glob[0] = '\0';
	}
	c->env[n] = NULL;
}

static void remove_stats(const struct ctx *c)
{
	glob_t g;

	if (!c->stats_glob[0] || glob(c->stats_glob, 0, NULL, &g) != 0)
		return;
	for (size_t i = 0; i < g.gl_pathc; i++)
		unlink(g.gl_pathv[i]);
	globfree(&g);
}

static void ctx_cleanup(const struct ctx *c)
{
	static const char *const sfx[] = { ".a", ".b", ".c" };
	char p[300];

	for (int i = 0; i < 3; i++) {
		snprintf(p, sizeof(p), "%s%s", c->base, sfx[i]);
		unlink(p);
	}
	remove_stats(c);
	shm_unlink(c->shm_env + strlen("RANGESHIM_SHM="));
}

/* Run the probe; arg3/arg4 may be NULL. */
static struct rs_run *probe(const struct ctx *c, int preload, const char *cmd,
			    const char *arg3, const char *arg4)
{
	struct rs_run *r = calloc(1, sizeof(*r));
	char *argv[] = { (char *)PROBE, (char *)cmd, (char *)c->base, (char *)arg3,
			 (char *)arg4, NULL };

	cr_assert_not_null(r);
	if (!arg3)
		argv[3] = NULL;
	rs_run(r, argv, c->env, preload, PROBE_TIMEOUT);
	cr_log_info("proc_probe %s %s (%s): status %d: %s", cmd, arg3 ? arg3 : "",
		    preload ? "shim" : "control", r->status, r->out);
	return r;
}

static void expect_pass(const struct rs_run *r, int preload, const char *what)
{
	cr_assert_neq(r->status, -1, "%s (%s): timed out after %d s (deadlock?): %s", what,
		      preload ? "shim" : "control", PROBE_TIMEOUT, r->out);
	cr_assert_eq(r->status, 0, "%s (%s): exit status %d: %s", what,
		     preload ? "shim" : "control", r->status, r->out);
	cr_assert_not_null(strstr(r->out, "verdict=PASS"), "%s (%s): no PASS verdict: %s",
			   what, preload ? "shim" : "control", r->out);
	cr_assert_eq(rs_field(r->out, "shim"), preload,
		     "%s: the shim was %sloaded, expected %d: %s", what,
		     rs_field(r->out, "shim") ? "" : "not ", preload, r->out);
}

/* The value of "key": N in the JSON of the first stats file, or -1. */
static long long stats_field(const struct ctx *c, const char *key, int *found)
{
	glob_t g;
	long long v = -1;

	*found = 0;
	if (glob(c->stats_glob, 0, NULL, &g) != 0)
		return -1;
	if (g.gl_pathc)
		v = rs_stats_file_num(g.gl_pathv[0], key, found);
	globfree(&g);
	return v;
}

/*
 * Run "proc_probe CMD BASE ARG" without and then with the shim in a fresh
 * ctx (tag and stats as for ctx_init); the caller reads any stats it wants,
 * then calls ctx_cleanup.
 */
static void probe_both(struct ctx *c, const char *tag, int stats, const char *cmd,
		       const char *arg, struct rs_run **ctl, struct rs_run **shim)
{
	ctx_init(c, tag, stats);
	*ctl = probe(c, 0, cmd, arg, NULL);
	*shim = probe(c, 1, cmd, arg, NULL);
}

/* probe_both without stats, cleaned up; both runs must pass. */
static void probe_both_pass(const char *tag, const char *cmd, const char *arg,
			    const char *what, struct rs_run **ctl, struct rs_run **shim)
{
	struct ctx c;

	probe_both(&c, tag, 0, cmd, arg, ctl, shim);
	ctx_cleanup(&c);
	expect_pass(*ctl, 0, what);
	expect_pass(*shim, 1, what);
}

TestSuite(process, .timeout = 2 * PROBE_TIMEOUT + 20);

Test(process, fork_with_locks_held)
{
	struct rs_run *ctl, *shim;

	probe_both_pass("fork", "fork", "50", "fork", &ctl, &shim);
	cr_expect_eq(rs_field(shim->out, "ok"), 50, "%s", shim->out);
	cr_expect_eq(rs_field(shim->out, "hung"), 0, "%s", shim->out);
	free(ctl);
	free(shim);
}

Test(process, raw_fork_with_locks_held)
{
	struct rs_run *ctl, *shim;

	/* TSan's own locks deadlock a _Fork() child of a threaded program,
	 * with or without the shim: _Fork runs none of TSan's fork handlers. */
	if (strcmp(RS_SAN, "tsan") == 0)
		cr_skip_test("_Fork under TSan deadlocks inside TSan itself");
	probe_both_pass("rawfork", "fork-raw", "20", "_Fork", &ctl, &shim);
	free(ctl);
	free(shim);
}

Test(process, exec)
{
	struct rs_run *ctl, *shim;

	probe_both_pass("exec", "exec", "5", "exec", &ctl, &shim);
	cr_expect_eq(rs_field(shim->out, "fork_exec"), 5, "%s", shim->out);
	cr_expect_eq(rs_field(shim->out, "spawn"), 5, "%s", shim->out);
	cr_expect_eq(rs_field(shim->out, "vfork"), 5, "%s", shim->out);
	free(ctl);
	free(shim);
}

static void signal_case(const char *mode)
{
	struct ctx c;
	struct rs_run *ctl, *shim;
	int restart = strcmp(mode, "restart") == 0, found;
	long long reentrant;

	probe_both(&c, mode, 1, "signal", mode, &ctl, &shim);
	reentrant = stats_field(&c, "reentrant", &found);
	ctx_cleanup(&c);
	expect_pass(ctl, 0, "signal");
	expect_pass(shim, 1, "signal");
	cr_assert_gt(rs_field(shim->out, "main_loops"), 0, "%s", shim->out);
	cr_assert_gt(rs_field(shim->out, "handler_pwrites"), 0, "%s", shim->out);
	cr_assert_gt(rs_field(shim->out, "handler_writes"), 0, "%s", shim->out);
	cr_assert_eq(rs_field(shim->out, "handler_errors"), 0, "%s", shim->out);
	cr_assert_eq(rs_field(shim->out, "size_ok"), 1, "%s", shim->out);
	/* EINTR semantics as without the shim. */
	cr_assert_eq(rs_field(shim->out, "eintr") > 0, rs_field(ctl->out, "eintr") > 0,
		     "EINTR on regular files differs: shim %s control %s", shim->out, ctl->out);
	cr_assert_eq(rs_field(shim->out, "short") > 0, rs_field(ctl->out, "short") > 0,
		     "short writes differ: shim %s control %s", shim->out, ctl->out);
	cr_assert_eq(rs_field(shim->out, "pipe_eintr"), rs_field(ctl->out, "pipe_eintr"),
		     "pipe read EINTR differs: shim %s control %s", shim->out, ctl->out);
	cr_assert_eq(rs_field(shim->out, "pipe_eintr"), restart ? 0 : 1, "%s", shim->out);
	cr_assert(found, "no stats file %s was written", c.stats_glob);
	cr_log_info("signal %s: reentrant=%lld", mode, reentrant);
	cr_expect_gt(reentrant, 0, "the handler never interrupted a call inside the shim "
		     "(reentrant=%lld): the case did not test what it should", reentrant);
	free(ctl);
	free(shim);
}

Test(process, signal_restart)
{
	signal_case("restart");
}

Test(process, signal_norestart)
{
	signal_case("norestart");
}

Test(process, signal_close_then_fopen)
{
	struct ctx c;
	struct rs_run *ctl, *shim;
	long long reentrant;
	int found;

	/* The handler must land inside the shim at least once; a slow
	 * (sanitized, loaded) run may make too few calls: longer, then skip
	 * (common.h, RS_STRETCH). */
	for (int k = 1;; k *= 2) {
		char secs[16];

		snprintf(secs, sizeof secs, "%.1f", 0.5 * k);
		probe_both(&c, "sigclose", 1, "signal-close", secs, &ctl, &shim);
		reentrant = stats_field(&c, "reentrant", &found);
		ctx_cleanup(&c);
		if (reentrant > 0 || k >= RS_STRETCH)
			break;
		free(ctl);
		free(shim);
	}
	rs_need(reentrant, 1, "the handler never ran inside the shim: %s", shim->out);
	/* Without the shim the reads tear: the verdict is FAIL by design. */
	cr_assert(ctl->status == 0 || ctl->status == 1, "control: status %d: %s", ctl->status,
		  ctl->out);
	cr_log_info("signal-close control: reads=%lld torn=%lld", rs_field(ctl->out, "reads"),
		    rs_field(ctl->out, "torn"));
	cr_assert_eq(rs_field(shim->out, "reused"), 1,
		     "fopen did not reuse the closed number; the case proves nothing: %s",
		     shim->out);
	expect_pass(shim, 1, "signal-close");
	free(ctl);
	free(shim);
}

Test(process, close_race)
{
	struct ctx c;
	struct rs_run *ctl, *shim;
	long long races, calls;
	int found;

	probe_both(&c, "close", 1, "close-race", "1", &ctl, &shim);
	races = stats_field(&c, "fd_races", &found);
	calls = stats_field(&c, "io_calls", &found);
	ctx_cleanup(&c);
	expect_pass(ctl, 0, "close-race");
	expect_pass(shim, 1, "close-race");
	cr_assert_eq(rs_field(shim->out, "bad"), 0, "%s", shim->out);
	cr_assert(found, "no stats file %s: the probe did not exit normally", c.stats_glob);
	cr_assert_geq(races, 0, "stats JSON has no fd_races");
	cr_assert_gt(calls, 0, "stats JSON shows no locked calls: io_calls=%lld", calls);
	cr_log_info("close-race: io_calls=%lld fd_races=%lld, ebadf shim=%lld control=%lld",
		    calls, races, rs_field(shim->out, "ebadf"), rs_field(ctl->out, "ebadf"));
	free(ctl);
	free(shim);
}

Test(process, many_threads)
{
	struct rs_run *ctl, *shim;

	probe_both_pass("many", "many", "200", "many", &ctl, &shim);
	cr_assert_eq(rs_field(shim->out, "writes"), 800, "%s", shim->out);
	cr_assert_eq(rs_field(shim->out, "mismatches"), 0, "%s", shim->out);
	free(ctl);
	free(shim);
}

/* pthread_cancel of threads inside locked calls must not leave locks held
 * (a leak shows as the probe hanging past its timeout). */
Test(process, cancel_inside_locked_call, .timeout = 60)
{
	char file[128];
	char shm[48];
	char env_shm[96];
	const char *env[] = { env_shm, NULL };
	char *argv[] = { RS_HELPER("cancel_probe"), file, "20", NULL };
	struct rs_run *r;

	/* ASan leaves the redzones of frames a cancellation unwound poisoned
	 * and then trips over them in its own thread teardown, with or
	 * without the shim (a sanitizer limitation, not ours). */
	if (strcmp(RS_SAN, "asan") == 0)
		cr_skip_test("pthread_cancel under ASan reports its own unwinding");
	r = malloc(sizeof(*r));
	cr_assert(r);
	snprintf(file, sizeof(file), "/dev/shm/rs-cancel-%d", (int)getpid());
	snprintf(shm, sizeof(shm), "/rs-cancel-shm-%d", (int)getpid());
	snprintf(env_shm, sizeof(env_shm), "RANGESHIM_SHM=%s", shm);
	rs_run(r, argv, env, 0, 20);
	cr_expect_eq(r->status, 0, "control: %s", r->out);
	rs_run(r, argv, env, 1, 20);
	cr_expect_eq(r->status, 0, "with the shim (status -1 is a hang): %s", r->out);
	cr_expect(strstr(r->out, "verdict=PASS"), "%s", r->out);
	snprintf(file, sizeof(file), "/dev/shm%s", shm);
	unlink(file);
	free(r);
}
