/*
 * Criterion suite: the `rangeshim` command's view of the node table
 * (locks, clean), run as a separate program (build/rangeshim) against a
 * table of the test's own (RANGESHIM_SHM=/rangeshim-cli-test.<pid>).
 *
 * The holders are forked children of this runner that attach to the table
 * by the table code linked in directly (nodelock.c), so that a holder can
 * be stopped exactly inside a grant; waiters are real programs under the
 * shim (node_probe closehold, LD_PRELOAD in their environment only).
 *
 *  locks_blocker_stopped   A holder counted into an EXSH grant on
 *                          [0, 1 MiB) stops itself (SIGSTOP); a writer
 *                          under the shim must queue behind it.  `locks`
 *                          shows the WAIT entry with BLOCKER = the holder's
 *                          pid, the holder's PSTATE "stopped", a line that
 *                          says whom the waiter waits for; `locks --json`
 *                          the same (blockers, process_state, waited_ns).
 *                          `clean --force` refuses meanwhile.  After
 *                          SIGCONT the holder leaves, the writer completes
 *                          and nothing waits.
 *  clean_force_refuses     `clean --force` refuses while an attached
 *                          process lives (naming its pid, its state and how
 *                          to proceed) and leaves the table; once it has
 *                          exited, `clean` removes it.
 *  locks_options           With a live holder's EXSH grant: -p of its pid
 *                          shows the row and -p of another pid nothing;
 *                          the data file as PATH shows it, another file
 *                          nothing; -o picks and orders columns (an unknown
 *                          one is one error line, exit 2); --noheadings
 *                          drops the heading; --raw separates fields by one
 *                          space where the aligned table pads; --watch,
 *                          run under timeout(1), prints >= 2 snapshots.
 *  clean_dead_only         A table whose only process died without
 *                          detaching (its slot and grant still listed) is
 *                          removed by plain `clean`.
 *  check_*                 `rangeshim check`: no tear with the shim on
 *                          tmpfs; the controls (RANGESHIM_SCOPE=off, libm
 *                          renamed librangeshim.so, a library under another
 *                          name, process scope against a writer process)
 *                          must fail it; refusals (not a directory, none,
 *                          no permission, read-only, full) exit 3.
 *  stats_*                 `rangeshim stats`: merging, per-program rows,
 *                          per-file totals over a job's processes (bytes,
 *                          calls, waits, uncovered calls; a file with I/O
 *                          but no wait, one with no uncovered call, are
 *                          the controls), the per-process bound (16 files
 *                          and a sum), escaped program names.
 *  locks_noinaccessible    -i leaves out a grant whose path is unknown;
 *                          the same grant with its file open stays.
 *  locks_strided           a strided grant's row says "stride S len L"
 *                          after its range (JSON: stride, len); a plain
 *                          one's does not.
 *  run_stats_names_*       `run --stats` counts and names the programs the
 *                          shim could not be in: CMD itself, and a static
 *                          program two levels down (control: a dynamic one
 *                          in its place, 0).
 */
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "common.h"
#include "config.h"
#include "nodelock.h"

#define RS_CLI RS_BUILD_DIR "/rangeshim"
#define MIB (1024ull * 1024ull)

static char shm_name[96], shm_path[300], shm_env[128], data[256];

/*
 * Files a killed run of this suite left: the pid in the name is a test
 * worker's, so a name whose process is gone is stale (teardown never ran).
 */
static void sweep_stale(void)
{
	static const char *const pre[] = { "rs-cli-test.", "rangeshim-cli-test." };
	DIR *d = opendir("/dev/shm");
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		for (size_t i = 0; i < sizeof(pre) / sizeof(pre[0]); i++) {
			size_t n = strlen(pre[i]);
			char *end, p[300];
			long pid;

			if (strncmp(e->d_name, pre[i], n))
				continue;
			pid = strtol(e->d_name + n, &end, 10);
			if (end == e->d_name + n || (*end && *end != '.') || pid <= 0 ||
			    pid == getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
				continue;
			snprintf(p, sizeof(p), "/dev/shm/%s", e->d_name);
			unlink(p);
		}
	}
	closedir(d);
}

static void setup(void)
{
	int fd;

	sweep_stale();

	snprintf(shm_name, sizeof(shm_name), "/rangeshim-cli-test.%d", (int)getpid());
	rs_seg_path(shm_name, shm_path, sizeof(shm_path));
	unlink(shm_path);
	snprintf(shm_env, sizeof(shm_env), "RANGESHIM_SHM=%s", shm_name);
	snprintf(data, sizeof(data), "/dev/shm/rs-cli-test.%d.data", (int)getpid());
	fd = open(data, O_RDWR | O_CREAT | O_TRUNC, 0600);
	cr_assert_geq(fd, 0, "create %s: %s", data, strerror(errno));
	cr_assert_eq(ftruncate(fd, (off_t)(2 * MIB)), 0);
	close(fd);
}

static void teardown(void)
{
	char other[300];

	/* locks_options' second file, also when a failed assert skipped its
	 * own unlink. */
	snprintf(other, sizeof(other), "%s.other", data);
	unlink(other);
	unlink(shm_path);
	unlink(data);
	rs_remove_bases();
}

TestSuite(cli, .init = setup, .fini = teardown, .timeout = 90);

/*
 * A holder: attach, take an EXSH grant on [0, 1 MiB) of the data file with
 * ourselves counted in (as a thread inside a pwrite would be), say so on
 * the pipe, then either stop ourselves (stop=1) or wait for a byte on the
 * command pipe; then leave the grant, release it and detach (or, die=1,
 * exit without detaching, as a killed process would).
 */
struct holder {
	pid_t pid;
	int ready, cmd;   /* read end: "ready" byte; write end: "go" byte */
};

/* Set: the next holders keep the data file open while they hold, so that
 * `locks` can name it (otherwise no process shows it: PATH ?). */
static bool holder_opens;
/* Set: the next holders' grant is strided, 512 bytes every 1 KiB of
 * [0, 64 KiB) (nodelock.c, "Strided grants"), instead of [0, 1 MiB). */
static bool holder_strided;

static void holder_start(struct holder *h, int stop, int die)
{
	int rp[2], cp[2];
	char c;

	cr_assert_eq(pipe2(rp, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(cp, O_CLOEXEC), 0);
	h->pid = fork();
	cr_assert_geq(h->pid, 0);
	if (h->pid == 0) {
		struct rs_nt t;
		struct rs_nt_result res;
		struct stat st;
		char why[256];

		close(rp[0]);
		close(cp[1]);
		memset(&t, 0, sizeof(t));
		if (stat(data, &st) < 0 || rs_nt_register(&t, shm_name, why, sizeof(why)) < 0)
			_exit(2);
		if (holder_opens && open(data, O_RDONLY) < 0)
			_exit(2);
		struct rs_nt_req q = { .dev = st.st_dev, .ino = st.st_ino, .start = 0,
				       .end = MIB, .mode = RS_G_EXSH, .window = 0 };
		if (holder_strided)
			q = (struct rs_nt_req){ .dev = st.st_dev, .ino = st.st_ino, .start = 0,
						.end = 63 * 1024 + 512, .mode = RS_G_EXSH,
						.exact = 1, .stride = 1024, .blen = 512 };
		if (rs_nt_acquire(&t, &q, &res, why, sizeof(why)) < 0)
			_exit(3);
		c = 'r';
		if (write(rp[1], &c, 1) != 1)
			_exit(4);
		if (stop)
			raise(SIGSTOP);
		else if (read(cp[0], &c, 1) < 0)
			_exit(5);
		if (die)
			_exit(0);
		atomic_fetch_sub(&t.map.seg->grants[res.idx].gw, 1);
		rs_nt_release(&t, res.idx, res.gen);
		rs_nt_unregister(&t);
		_exit(0);
	}
	close(rp[1]);
	close(cp[0]);
	h->ready = rp[0];
	h->cmd = cp[1];
	cr_assert_eq(read(h->ready, &c, 1), 1, "the holder did not get its grant");
}

static int holder_finish(struct holder *h)
{
	int st;
	char c = 'g';

	/* A holder started with stop=1 never reads its pipe and may have
	 * exited already: EPIPE then, and no SIGPIPE to kill the test. */
	signal(SIGPIPE, SIG_IGN);
	if (write(h->cmd, &c, 1) != 1 && errno != EPIPE)
		cr_log_warn("holder pipe: %s", strerror(errno));
	cr_assert_eq(waitpid(h->pid, &st, 0), h->pid);
	close(h->ready);
	close(h->cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* A writer under the shim: node_probe closehold writes [0, 64 KiB);
 * its stderr goes to log (NULL: nowhere). */
static pid_t start_writer_to(const char *log)
{
	pid_t p = fork();

	cr_assert_geq(p, 0);
	if (p == 0) {
		int null = log ? open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600) : open("/dev/null", O_WRONLY);

		dup2(null, 1);
		dup2(null, 2);
		unsetenv("LD_PRELOAD");
		setenv("RANGESHIM_SHM", shm_name, 1);
		setenv("LD_PRELOAD", RS_LIB, 1);
		char file[300];
		snprintf(file, sizeof(file), "file=%s", data);
		execl(RS_HELPER("node_probe"), "node_probe", "closehold", file, "hold_ms=0",
		      "keep_open=0", (char *)NULL);
		_exit(127);
	}
	return p;
}

static pid_t start_writer(void)
{
	return start_writer_to(NULL);
}

static int cli(struct rs_run *r, const char *cmd, const char *opt)
{
	char *argv[] = { RS_CLI, (char *)cmd, "--shm", shm_name, (char *)opt, NULL };

	return rs_run(r, argv, NULL, 0, 30);
}

/* The whitespace-separated fields of the first line of s containing key. */
static int line_fields(const char *s, const char *key, char f[][64], int max)
{
	const char *p = strstr(s, key), *b, *e;
	int n = 0;

	if (!p)
		return 0;
	for (b = p; b > s && b[-1] != '\n'; b--)
		;
	e = strchr(p, '\n');
	if (!e)
		e = p + strlen(p);
	while (b < e && n < max) {
		size_t l;

		while (b < e && (*b == ' ' || *b == '\t'))
			b++;
		l = strcspn(b, " \t\n");
		if (!l)
			break;
		snprintf(f[n++], 64, "%.*s", (int)(l < 63 ? l : 63), b);
		b += l;
	}
	return n;
}

/* Does some occurrence of key in s have a number after it? */
static bool has_number(const char *s, const char *key)
{
	for (const char *p = s; (p = strstr(p, key)); p++)
		if (p[strlen(key)] >= '0' && p[strlen(key)] <= '9')
			return true;
	return false;
}

static bool exists(const char *p)
{
	struct stat st;

	return lstat(p, &st) == 0;
}

Test(cli, locks_blocker_stopped)
{
	struct holder h;
	struct rs_run *r = malloc(sizeof(*r));
	char f[16][64], want[64], hpid[16];
	int st, nf = 0, w_rc;
	pid_t w;

	cr_assert(r);
	holder_start(&h, 1, 0);
	cr_assert_eq(waitpid(h.pid, &st, WUNTRACED), h.pid);
	cr_assert(WIFSTOPPED(st), "the holder did not stop");
	w = start_writer();

	/* The writer must queue: wait until the table shows it (generous).
	 * A listing is a snapshot taken slot by slot: one made while the
	 * writer registers may show its wait before its process slot (as
	 * "(dead)"); the next shows both. */
	for (int i = 0; i < 300; i++) {
		cr_assert_eq(cli(r, "locks", NULL), 0, "locks: %s", r->out);
		if (strstr(r->out, " WAIT ") && line_fields(r->out, " WAIT ", f, 16) >= 2 &&
		    atoi(f[1]) == (int)w)
			break;
		usleep(50 * 1000);
	}
	cr_log_info("rangeshim locks with a stopped holder:\n%s", r->out);
	cr_assert(strstr(r->out, " WAIT "), "the writer never queued:\n%s", r->out);
	snprintf(hpid, sizeof(hpid), "%d", (int)h.pid);

	/* COMMAND PID PSTATE STATE MODE USERS WANTED AGE BLOCKER RANGE ... */
	nf = line_fields(r->out, " WAIT ", f, 16);
	cr_assert_geq(nf, 10, "%s", r->out);
	cr_assert_eq(atoi(f[1]), (int)w, "waiter pid %s, not %d:\n%s", f[1], (int)w, r->out);
	cr_assert_str_eq(f[3], "WAIT");
	cr_assert_str_eq(f[8], hpid, "BLOCKER %s, not the holder %s:\n%s", f[8], hpid, r->out);
	nf = line_fields(r->out, " HELD ", f, 16);
	cr_assert_geq(nf, 10, "%s", r->out);
	cr_assert_str_eq(f[1], hpid, "%s", r->out);
	cr_assert_str_eq(f[2], "stopped", "holder PSTATE %s:\n%s", f[2], r->out);
	cr_assert_str_eq(f[6], "yes", "the holder's grant is not marked wanted:\n%s", r->out);
	snprintf(want, sizeof(want), "blocked by pid %d (", (int)h.pid);
	cr_assert(strstr(r->out, want) && strstr(r->out, "stopped (SIGSTOP"),
		  "no line saying the waiter is blocked by a stopped holder:\n%s", r->out);

	cr_assert_eq(cli(r, "locks", "--json"), 0, "%s", r->out);
	cr_log_info("rangeshim locks --json:\n%s", r->out);
	snprintf(want, sizeof(want), "\"blockers\": [%d]", (int)h.pid);
	cr_assert(strstr(r->out, want), "no %s:\n%s", want, r->out);
	cr_assert(strstr(r->out, "\"process_state\": \"stopped\""), "%s", r->out);
	cr_assert(strstr(r->out, "\"state\": \"WAIT\""), "%s", r->out);
	cr_assert(has_number(r->out, "\"waited_ns\": "), "no waited_ns for the WAIT entry:\n%s",
		  r->out);

	/* Nor may clean take the table from under them, --force or not. */
	cr_assert_neq(cli(r, "clean", "--force"), 0, "clean --force removed a table in use:\n%s",
		      r->out);
	cr_assert(exists(shm_path), "clean --force removed %s", shm_path);
	cr_assert(strstr(r->out, hpid) && strstr(r->out, "stopped"), "%s", r->out);

	/* Resume: the holder leaves, the writer gets through, nothing waits. */
	kill(h.pid, SIGCONT);
	cr_assert_eq(holder_finish(&h), 0);
	for (int i = 0; i < 600 && waitpid(w, &st, WNOHANG) == 0; i++)
		usleep(50 * 1000);
	if (waitpid(w, &st, WNOHANG) == 0) {
		kill(w, SIGKILL);
		waitpid(w, &st, 0);
		cr_assert_fail("the writer did not finish after the holder resumed");
	}
	w_rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	cr_assert_eq(w_rc, 0, "the writer exited with %d", w_rc);
	cr_assert_eq(cli(r, "locks", NULL), 0);
	cr_assert_null(strstr(r->out, " WAIT "), "%s", r->out);
	free(r);
}

Test(cli, clean_force_refuses)
{
	struct holder h;
	struct rs_run *r = malloc(sizeof(*r));
	char hpid[16];

	cr_assert(r);
	holder_start(&h, 0, 0);
	snprintf(hpid, sizeof(hpid), "pid %d (", (int)h.pid);
	for (int force = 0; force < 2; force++) {
		cr_assert_eq(cli(r, "clean", force ? "--force" : NULL), 1, "clean%s: %s",
			     force ? " --force" : "", r->out);
		cr_log_info("clean%s with a live process:\n%s", force ? " --force" : "", r->out);
		cr_assert(exists(shm_path), "clean%s removed a table in use", force ? " --force" : "");
		/* The holder sleeps in a pause loop, but under load /proc
		 * can catch it running between two sleeps. */
		cr_assert(strstr(r->out, hpid) &&
			  (strstr(r->out, "), sleeping") || strstr(r->out, "), running")),
			  "the refusal does not name %s and its state:\n%s", hpid, r->out);
		cr_assert(strstr(r->out, "not removing"), "%s", r->out);
	}
	cr_assert_eq(holder_finish(&h), 0);
	cr_assert_eq(cli(r, "clean", "--force"), 0, "%s", r->out);
	cr_assert_not(exists(shm_path), "clean --force left %s after its process exited", shm_path);
	cr_assert_eq(cli(r, "clean", NULL), 0, "%s", r->out);
	cr_assert(strstr(r->out, "nothing to clean"), "%s", r->out);
	free(r);
}

static void rs_write_text(const char *path, const char *text);

/* `rangeshim locks --shm NAME ARGS...` (at most 8 ARGS, NULL-terminated). */
static int locks_args(struct rs_run *r, const char *a0, ...)
{
	char *argv[16] = { RS_CLI, "locks", "--shm", shm_name };
	int n = 4;
	va_list ap;

	va_start(ap, a0);
	for (const char *a = a0; a && n < 12; a = va_arg(ap, const char *))
		argv[n++] = (char *)a;
	va_end(ap);
	argv[n] = NULL;
	return rs_run(r, argv, NULL, 0, 30);
}

static int count_of(const char *s, const char *key)
{
	int n = 0;

	for (const char *p = s; (p = strstr(p, key)); p += strlen(key))
		n++;
	return n;
}

Test(cli, locks_options)
{
	struct holder h;
	struct rs_run *r = malloc(sizeof(*r));
	char hpid[16], row[64], other[300], f[16][64];

	cr_assert(r);
	snprintf(other, sizeof(other), "%s.other", data);
	rs_write_text(other, "x");
	holder_start(&h, 0, 0);
	snprintf(hpid, sizeof(hpid), "%d", (int)h.pid);
	snprintf(row, sizeof(row), " %s ", hpid);

	/* Control: no filter shows the holder's row. */
	cr_assert_eq(locks_args(r, NULL), 0, "%s", r->out);
	cr_assert(strstr(r->out, row) && strstr(r->out, " HELD "), "%s", r->out);
	cr_assert(strstr(r->out, "COMMAND"), "%s", r->out);

	/* -p: the holder's pid shows it, another pid (ours: not attached) not. */
	cr_assert_eq(locks_args(r, "-p", hpid, NULL), 0, "%s", r->out);
	cr_assert(strstr(r->out, row) && strstr(r->out, "1 grants held"), "%s", r->out);
	snprintf(f[0], 64, "%d", (int)getpid());
	cr_assert_eq(locks_args(r, "-p", f[0], NULL), 0, "%s", r->out);
	cr_assert_null(strstr(r->out, " HELD "), "-p %s shows another's grant:\n%s", f[0], r->out);
	cr_assert(strstr(r->out, "0 grants held"), "%s", r->out);
	cr_assert_eq(locks_args(r, "-p", "0", NULL), 2, "%s", r->out);

	/* PATH: matched by dev:ino. */
	cr_assert_eq(locks_args(r, data, NULL), 0, "%s", r->out);
	cr_assert(strstr(r->out, row), "locks %s misses its grant:\n%s", data, r->out);
	cr_assert_eq(locks_args(r, other, NULL), 0, "%s", r->out);
	cr_assert_null(strstr(r->out, " HELD "), "locks %s shows %s's grant:\n%s", other, data,
		       r->out);
	cr_assert_eq(locks_args(r, other, data, NULL), 0, "%s", r->out);
	cr_assert(strstr(r->out, row), "%s", r->out);

	/* -o: the chosen columns in the chosen order, any case. */
	cr_assert_eq(locks_args(r, "-o", "mode,PID", NULL), 0, "%s", r->out);
	cr_assert_eq(line_fields(r->out, "PID", f, 16), 2, "%s", r->out);
	cr_assert_str_eq(f[0], "MODE", "%s", r->out);
	cr_assert_eq(line_fields(r->out, "EXSH", f, 16), 2, "%s", r->out);
	cr_assert_str_eq(f[1], hpid, "%s", r->out);
	cr_assert_eq(locks_args(r, "-o", "PID,NOPE", NULL), 2, "%s", r->out);
	cr_assert(strstr(r->out, "unknown column 'NOPE'"), "%s", r->out);
	cr_assert_eq(count_of(r->out, "\n"), 1, "not one line:\n%s", r->out);

	/* --noheadings: the row stays, the heading goes. */
	cr_assert_eq(locks_args(r, "--noheadings", NULL), 0, "%s", r->out);
	cr_assert(strstr(r->out, row), "%s", r->out);
	cr_assert_null(strstr(r->out, "COMMAND"), "%s", r->out);

	/* --raw: one space between fields; the aligned table pads PID. */
	cr_assert_eq(locks_args(r, "-o", "PID,MODE", NULL), 0, "%s", r->out);
	cr_assert(strstr(r->out, "    PID MODE"), "%s", r->out);
	cr_assert_eq(locks_args(r, "-o", "PID,MODE,RANGE", "--raw", NULL), 0, "%s", r->out);
	snprintf(f[0], 64, "PID MODE RANGE\n%s EXSH 0-", hpid);
	cr_assert_eq(strncmp(r->out, f[0], strlen(f[0])), 0, "%s", r->out);
	cr_assert_null(strstr(r->out, "  "), "%s", r->out);
	cr_assert_null(strstr(r->out, "grants held"), "%s", r->out);

	/* --watch: repeats until killed; a bad interval is refused. */
	{
		/* 5 s for two rounds 0.2 s apart: TSan on a loaded machine
		 * printed only one in 1.5 s. */
		char *argv[] = { "/usr/bin/timeout", "-s", "INT", "5", RS_CLI, "locks",
				 "--shm", shm_name, "-p", hpid, "--watch", "0.2", NULL };

		rs_run(r, argv, NULL, 0, 30);
		cr_log_info("locks --watch 0.2 for 5 s:\n%s", r->out);
		cr_assert_eq(r->status, 124, "%s", r->out);
		cr_assert_geq(count_of(r->out, ", every 0.2s ---"), 2, "%s", r->out);
		cr_assert_geq(count_of(r->out, row), 2, "%s", r->out);
	}
	cr_assert_eq(locks_args(r, "--watch", "0", NULL), 2, "%s", r->out);
	cr_assert_eq(locks_args(r, "--watch", "x", NULL), 2, "%s", r->out);

	cr_assert_eq(holder_finish(&h), 0);
	unlink(other);
	free(r);
}

Test(cli, clean_dead_only)
{
	struct holder h;
	struct rs_run *r = malloc(sizeof(*r));

	cr_assert(r);
	holder_start(&h, 0, 1);
	cr_assert_eq(holder_finish(&h), 0);
	cr_assert_eq(cli(r, "locks", NULL), 0);
	cr_assert(strstr(r->out, "dead"), "the dead holder is not shown dead:\n%s", r->out);
	cr_assert_eq(cli(r, "clean", NULL), 0, "%s", r->out);
	cr_assert(strstr(r->out, "1 dead process(es) and 1 grant(s)"), "%s", r->out);
	cr_assert_not(exists(shm_path));
	free(r);
}

/* ---- run's coverage warnings, run --stats, stats, RANGESHIM_SHM ---- */

static void rs_write_text(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	cr_assert_geq(fd, 0, "create %s: %s", path, strerror(errno));
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

static const char *shm_value;

static const char *get_shm(const char *v)
{
	return strcmp(v, "RANGESHIM_SHM") ? NULL : shm_value;
}

static int run_cli(struct rs_run *r, char *const argv[], const char *const env[])
{
	return rs_run(r, argv, env, 0, 60);
}

/* A static binary, a script run by one and a setuid binary each get the
 * line; a dynamic one (the control) does not. */
Test(cli, run_warns_uncoverable)
{
	struct rs_run r;
	char *base = rs_make_base("/tmp", "rs-cli-run."), script[PATH_MAX], suid[PATH_MAX];
	char buf[8192];
	int in, out;
	ssize_t n;

	char *dyn[] = { RS_CLI, "run", "--", "/bin/true", NULL };
	run_cli(&r, dyn, NULL);
	cr_assert_eq(r.status, 0, "%s", r.out);
	cr_assert_null(strstr(r.out, "cannot apply"), "warned about /bin/true: %s", r.out);

	if (access("/sbin/ldconfig", X_OK) == 0) {
		char *st[] = { RS_CLI, "run", "--", "/sbin/ldconfig", "--version", NULL };

		run_cli(&r, st, NULL);
		cr_assert(strstr(r.out, "statically linked") && strstr(r.out, "cannot apply"),
			  "no warning for static /sbin/ldconfig: %s", r.out);
		snprintf(script, sizeof(script), "%s/s.sh", base);
		rs_write_text(script, "#!/sbin/ldconfig\n");
		chmod(script, 0755);
		char *sc[] = { RS_CLI, "run", "--", script, NULL };
		run_cli(&r, sc, NULL);
		cr_assert(strstr(r.out, "a script run by /sbin/ldconfig, which is statically linked"),
			  "no warning for a script of a static interpreter: %s", r.out);
	}
	if (getuid() != 0)
		return;   /* only root can make a file of another owner */
	snprintf(suid, sizeof(suid), "%s/suid", base);
	in = open("/bin/true", O_RDONLY);
	out = open(suid, O_WRONLY | O_CREAT | O_TRUNC, 0755);
	cr_assert(in >= 0 && out >= 0);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		cr_assert_eq(write(out, buf, (size_t)n), n);
	close(in);
	close(out);
	cr_assert_eq(chown(suid, 65534, (gid_t)-1), 0);
	cr_assert_eq(chmod(suid, 04755), 0);
	char *su[] = { RS_CLI, "run", "--", suid, NULL };
	run_cli(&r, su, NULL);
	cr_assert(strstr(r.out, "is setuid (owner uid 65534)"), "no setuid warning: %s", r.out);
}

/* run --stats: one job summary over the processes, the coverage line, and
 * its report directory removed. */
Test(cli, run_stats_summary)
{
	struct rs_run r;
	char *base = rs_make_base("/tmp", "rs-cli-stats."), cmd[PATH_MAX * 2], tmpdir[PATH_MAX + 8];
	char *sh[] = { RS_CLI, "run", "--stats", "--", "/bin/sh", "-c", cmd, NULL };
	const char *env[] = { tmpdir, shm_env, NULL };
	const char *p;

	snprintf(tmpdir, sizeof(tmpdir), "TMPDIR=%s", base);
	snprintf(cmd, sizeof(cmd), "dd if=/dev/zero of=%s bs=64k count=4 2>/dev/null; "
		 "cat %s > %s.copy; exit 3", data, data, data);
	run_cli(&r, sh, env);
	cr_assert_eq(r.status, 3, "CMD's exit status is run's: %d\n%s", r.status, r.out);
	cr_assert(strstr(r.out, "rangeshim job summary: "), "%s", r.out);
	p = strstr(r.out, " calls coordinated; not coordinated: ");
	cr_assert_not_null(p, "%s", r.out);
	while (p > r.out && p[-1] >= '0' && p[-1] <= '9')
		p--;
	cr_assert_gt(atol(p), 0, "nothing coordinated: %s", r.out);
	cr_assert_eq(rmdir(base), 0, "run --stats left files in %s: %s", base, strerror(errno));
	mkdir(base, 0700);
	snprintf(cmd, sizeof(cmd), "%s.copy", data);
	unlink(cmd);
}

/* stats merges good reports, skips bad ones with a line each, and reads
 * uncovered_* counters by name. */
Test(cli, stats_merges_and_skips)
{
	struct rs_run r;
	char *base = rs_make_base("/tmp", "rs-cli-merge."), f[PATH_MAX];

	snprintf(f, sizeof(f), "%s/1.json", base);
	rs_write_text(f, "{\"pid\": 11, \"io_calls\": 5, \"lock_waits\": 2, \"uncovered_io_uring\": 3, "
		      "\"uncovered_stdio\": 0}\n");
	snprintf(f, sizeof(f), "%s/2.json", base);
	rs_write_text(f, "{\"pid\": 12, \"io_calls\": 7, \"lock_waits\": 1, \"uncovered_io_uring\": 0, "
		      "\"uncovered_stdio\": 2, \"files\": [{\"path\": \"x\"}]}\n");
	snprintf(f, sizeof(f), "%s/3.json", base);
	rs_write_text(f, "{\"pid\": 13, \"io_calls\": 7");
	snprintf(f, sizeof(f), "%s/4.json", base);
	rs_write_text(f, "garbage\n");
	char *argv[] = { RS_CLI, "stats", base, NULL };
	run_cli(&r, argv, NULL);
	cr_assert_eq(r.status, 0, "%s", r.out);
	cr_assert(strstr(r.out, "2 process report(s), 2 file(s) skipped"), "%s", r.out);
	cr_assert(strstr(r.out, "3.json: truncated or malformed"), "%s", r.out);
	cr_assert(strstr(r.out, "4.json: not a JSON object"), "%s", r.out);
	cr_assert(strstr(r.out, "io_calls                                 12"), "%s", r.out);
	cr_assert(strstr(r.out, "12 calls coordinated; not coordinated: io_uring (3), stdio (2)\n"),
		  "%s", r.out);
	char *bad[] = { RS_CLI, "stats", f, NULL };
	run_cli(&r, bad, NULL);
	cr_assert_eq(r.status, 1, "no report read must fail: %s", r.out);
}

/* "/." and "/.." name directories: refused when read, default table used. */
Test(cli, shm_dot_names_refused)
{
	struct rs_run r;
	const char *name;
	struct rs_config c;

	for (int i = 0; i < 2; i++) {
		name = i ? "/.." : "/.";
		shm_value = name;
		rs_config_load(&c, get_shm);
		cr_assert_str_eq(c.shm_name, "", "RANGESHIM_SHM=%s accepted", name);
		char *argv[] = { RS_CLI, "locks", "--shm", (char *)name, NULL };
		run_cli(&r, argv, NULL);
		cr_assert_eq(r.status, 2, "locks --shm %s: %s", name, r.out);
	}
}

/* ---- rangeshim check ---- */

static const char *check_leg_line(const char *out, const char *leg)
{
	const char *p = strstr(out, leg);

	return p ? p + strlen(leg) : "";
}

/* The shim's leg of `check` on tmpfs: no torn read, the torn counts of
 * both legs printed, and the test file gone afterwards. */
Test(cli, check_fixes_tears)
{
	struct rs_run r;
	char *base = rs_make_base("/dev/shm", "rs-cli-check.");
	char *argv[] = { RS_CLI, "check", "--seconds", "1", base, NULL };
	const char *env[] = { shm_env, NULL };
	const char *w;

	run_cli(&r, argv, env);
	cr_assert_eq(r.status, 0, "check failed:\n%s", r.out);
	cr_assert(strstr(r.out, "(tmpfs)"), "no fs type: %s", r.out);
	cr_assert(strstr(r.out, "library: " RS_BUILD_DIR "/librangeshim.so"), "%s", r.out);
	cr_assert(has_number(r.out, "without rangeshim: "), "no control count: %s", r.out);
	w = check_leg_line(r.out, "with rangeshim:    ");
	cr_assert(!strncmp(w, "0 of ", 5) && atol(w + 5) > 0, "shim leg: %s", r.out);
	cr_assert(strstr(r.out, "OK"), "%s", r.out);
	cr_assert_eq(rmdir(base), 0, "check left its file in %s: %s", base, strerror(errno));
	mkdir(base, 0700);
}

/* The path of a real shared library that locks nothing (libm). */
static const char *some_other_library(void)
{
	static char path[PATH_MAX];
	void *h = dlopen("libm.so.6", RTLD_NOW);
	Dl_info info;

	cr_assert_not_null(h, "dlopen libm.so.6: %s", dlerror());
	cr_assert(dladdr(dlsym(h, "cos"), &info) && info.dli_fname, "no path for libm");
	cr_assert_not_null(realpath(info.dli_fname, path), "%s", info.dli_fname);
	return path;
}

/*
 * Controls: `check` must fail when the shim's leg is not protected.
 * RANGESHIM_SCOPE=off in the environment is passed on (so it tears); a
 * sabotaged librangeshim.so (libm under that name: loaded, locks nothing)
 * tears; a library under another name is reported as not loaded.
 */
Test(cli, check_controls_fail)
{
	struct rs_run r;
	char *base = rs_make_base("/dev/shm", "rs-cli-check.");
	char fake[PATH_MAX], lib_opt[PATH_MAX + 8], buf[65536];
	const char *other = some_other_library(), *w;
	const char *off_env[] = { shm_env, "RANGESHIM_SCOPE=off", NULL };
	const char *env[] = { shm_env, NULL };
	int in, out;
	ssize_t n;

	char *argv[] = { RS_CLI, "check", "--seconds", "2", base, NULL };
	run_cli(&r, argv, off_env);
	cr_assert_eq(r.status, 1, "RANGESHIM_SCOPE=off must fail the check:\n%s", r.out);
	cr_assert(strstr(r.out, "setting: RANGESHIM_SCOPE=off"), "%s", r.out);
	cr_assert(strstr(r.out, "reads tore with the shim"), "%s", r.out);

	snprintf(fake, sizeof(fake), "%s/librangeshim.so", base);
	in = open(other, O_RDONLY);
	out = open(fake, O_WRONLY | O_CREAT | O_TRUNC, 0755);
	cr_assert(in >= 0 && out >= 0);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		cr_assert_eq(write(out, buf, (size_t)n), n);
	close(in);
	close(out);
	snprintf(lib_opt, sizeof(lib_opt), "--lib=%s", fake);
	char *sab[] = { RS_CLI, "check", "--seconds", "2", lib_opt, base, NULL };
	run_cli(&r, sab, env);
	cr_assert_eq(r.status, 1, "a library that locks nothing must fail the check:\n%s", r.out);
	w = check_leg_line(r.out, "with rangeshim:    ");
	cr_assert_gt(atol(w), 0, "the sabotaged leg tore nothing: %s", r.out);
	unlink(fake);

	snprintf(lib_opt, sizeof(lib_opt), "--lib=%s", other);
	char *notours[] = { RS_CLI, "check", "--seconds", "0.5", lib_opt, base, NULL };
	run_cli(&r, notours, env);
	cr_assert_eq(r.status, 1, "%s", r.out);
	cr_assert(strstr(r.out, "the library was not loaded"), "%s", r.out);
	cr_assert_eq(rmdir(base), 0, "check left files in %s", base);
	mkdir(base, 0700);
}

/* What the file system refuses: exit 3 and the reason.  A read-only and a
 * full tmpfs are mounted in a private mount namespace (root only). */
Test(cli, check_fs_refusals)
{
	struct rs_run r;
	char *base = rs_make_base("/tmp", "rs-cli-check."), missing[PATH_MAX], sh[PATH_MAX * 3];
	char *notdir[] = { RS_CLI, "check", data, NULL };

	run_cli(&r, notdir, NULL);
	cr_assert_eq(r.status, 3, "%s", r.out);
	cr_assert(strstr(r.out, "not a directory"), "%s", r.out);
	snprintf(missing, sizeof(missing), "%s/nope", base);
	char *nodir[] = { RS_CLI, "check", missing, NULL };
	run_cli(&r, nodir, NULL);
	cr_assert_eq(r.status, 3, "%s", r.out);
	cr_assert(strstr(r.out, "no such directory"), "%s", r.out);
	char *usage[] = { RS_CLI, "check", "--seconds", "0", base, NULL };
	run_cli(&r, usage, NULL);
	cr_assert_eq(r.status, 2, "%s", r.out);

	/* A directory the user may not write: as root, check as nobody. */
	if (getuid() == 0 && access("/usr/bin/setpriv", X_OK) == 0) {
		char *nobody[] = { "/usr/bin/setpriv", "--reuid=65534", "--regid=65534",
				   "--clear-groups", RS_CLI, "check", base, NULL };

		cr_assert_eq(chmod(base, 0755), 0);
		run_cli(&r, nobody, NULL);
		cr_assert_eq(r.status, 3, "%s", r.out);
		cr_assert(strstr(r.out, "permission denied"), "%s", r.out);
	}

	char *probe[] = { "/usr/bin/unshare", "-m", "true", NULL };
	if (getuid() != 0 || access(probe[0], X_OK) || rs_run(&r, probe, NULL, 0, 10) != 0) {
		cr_log_warn("check_fs_refusals: no private mount namespace; read-only and full "
			    "file systems not tried");
		return;
	}
	for (int i = 0; i < 2; i++) {
		snprintf(sh, sizeof(sh), "mount -t tmpfs -o %s none %s && exec %s check --seconds 0.5 %s",
			 i ? "size=512k" : "ro,size=1m", base, RS_CLI, base);
		char *argv[] = { "/usr/bin/unshare", "-m", "/bin/sh", "-c", sh, NULL };
		run_cli(&r, argv, NULL);
		cr_assert_eq(r.status, 3, "%s", r.out);
		cr_assert(strstr(r.out, i ? "no space left" : "read-only file system"), "%s", r.out);
	}
}

/* ---- per-file waits and program names in the reports ---- */

/*
 * A job of four programs under the shim, each writing its JSON report:
 * node_probe's writer and reader processes race on file A (node waits),
 * torn_read's threads race on file B (range-lock waits), dd copies B to C
 * with nobody in its way.  `stats` must name each program, and rank A and
 * B in the per-file table with the right kind of wait; C, which had I/O
 * but no wait, is the control: listed for its bytes, with no wait.
 */
Test(cli, stats_top_files_by_waits)
{
	char key[PATH_MAX + 4];
	struct rs_run r;
	char *base = rs_make_base("/dev/shm", "rs-cli-waits."), stats_env[PATH_MAX + 32];
	char a[PATH_MAX], b[PATH_MAX], c[PATH_MAX], fa[PATH_MAX + 8], fb[PATH_MAX + 8];
	char iff[PATH_MAX + 8], off[PATH_MAX + 8], f[12][64];
	const char *env[] = { stats_env, shm_env, NULL };
	const char *p;

	snprintf(stats_env, sizeof(stats_env), "RANGESHIM_STATS=%s/%%p.json", base);
	snprintf(a, sizeof(a), "%s.A", data);
	snprintf(b, sizeof(b), "%s.B", data);
	snprintf(c, sizeof(c), "%s.C", data);
	snprintf(fa, sizeof(fa), "file=%s", a);
	snprintf(fb, sizeof(fb), "%s", b);
	char *probe[] = { RS_HELPER("node_probe"), "torn", fa, "writers=1", "readers=1",
			  "block=1048576", "seconds=1", NULL };
	rs_run(&r, probe, env, 1, 60);
	cr_assert_eq(r.status, 0, "node_probe: %s", r.out);
	char *torn[] = { RS_EXAMPLE("torn_read"), "--file", fb, "--keep", "--seconds", "0.5", NULL };
	rs_run(&r, torn, env, 1, 60);
	cr_assert_eq(r.status, 0, "torn_read: %s", r.out);
	snprintf(iff, sizeof(iff), "if=%s", b);
	snprintf(off, sizeof(off), "of=%s", c);
	char *dd[] = { "/bin/dd", iff, off, "bs=64k", NULL };
	rs_run(&r, dd, env, 1, 60);
	cr_assert_eq(r.status, 0, "dd: %s", r.out);

	char *argv[] = { RS_CLI, "stats", base, NULL };
	run_cli(&r, argv, NULL);
	unlink(a);
	unlink(b);
	unlink(c);
	cr_assert_eq(r.status, 0, "%s", r.out);
	cr_assert(strstr(r.out, " node_probe ") && strstr(r.out, " torn_read ") && strstr(r.out, " dd "),
		  "a program is not named:\n%s", r.out);
	cr_assert(strstr(r.out, "files, most bytes first ("), "no file ranking:\n%s", r.out);
	/* BYTES_READ BYTES_WRITTEN CALLS LOCK_WAITS NODE_WAITS WAIT_MS
	 * UNCOVERED PROCS MAJ:MIN:INO PATH */
	/* The row, not the job's command line, which names A too. */
	snprintf(key, sizeof key, " %s\n", c);
	cr_assert_eq(line_fields(r.out, key, f, 12), 10, "C not listed:\n%s", r.out);
	cr_assert_gt(atoll(f[1]), 0, "C was written:\n%s", r.out);
	cr_assert(atoll(f[3]) == 0 && atoll(f[4]) == 0, "C had no wait:\n%s", r.out);
	snprintf(key, sizeof key, " %s\n", a);
	cr_assert_eq(line_fields(r.out, key, f, 12), 10, "A not listed:\n%s", r.out);
	cr_assert_gt(atoll(f[4]), 0, "A's waits are node waits:\n%s", r.out);
	cr_assert_geq(atoi(f[7]), 1, "%s", r.out);
	snprintf(key, sizeof key, " %s\n", b);
	cr_assert_eq(line_fields(r.out, key, f, 12), 10, "B not listed:\n%s", r.out);
	cr_assert_gt(atoll(f[3]), 0, "B's waits are range-lock waits:\n%s", r.out);
	cr_assert_eq(atoll(f[4]), 0, "B was used by one process only:\n%s", r.out);
	/* torn_read, then dd's read of it */
	cr_assert_eq(atoi(f[7]), 2, "%s", r.out);
	p = strstr(r.out, "LOCK_WAITS");
	cr_assert(p && strstr(p, a) && strstr(p, b), "%s", r.out);
}

/* The report's program name is argv[0]'s last part, escaped as JSON; the
 * command decodes it again and shows control characters as \xNN. */
Test(cli, stats_program_name_escaped)
{
	struct rs_run r;
	char *base = rs_make_base("/tmp", "rs-cli-prog."), link[PATH_MAX], rep[PATH_MAX];
	char stats_env[PATH_MAX + 32], *js;
	const char *env[] = { stats_env, shm_env, NULL };

	snprintf(link, sizeof(link), "%s/we\"ird\\\nn\xc3\xa9\xff", base);
	cr_assert_eq(symlink("/bin/true", link), 0, "%s", strerror(errno));
	snprintf(rep, sizeof(rep), "%s/r.json", base);
	snprintf(stats_env, sizeof(stats_env), "RANGESHIM_STATS=%s", rep);
	char *argv[] = { link, NULL };
	rs_run(&r, argv, env, 1, 30);
	cr_assert_eq(r.status, 0, "%s", r.out);
	js = rs_read_file(rep, NULL);
	cr_assert_not_null(js, "no report");
	cr_assert(strstr(js, "\"program\": \"we\\\"ird\\\\\\u000an\xc3\xa9\\ufffd\""),
		  "program not escaped: %s", js);
	cr_assert(strstr(js, "\"files\": []"), "no files list: %s", js);
	free(js);
	unlink(link);
	char *st[] = { RS_CLI, "stats", rep, rep, NULL };
	run_cli(&r, st, NULL);
	cr_assert_eq(r.status, 0, "%s", r.out);
	cr_assert(strstr(r.out, " we\"ird\\\\x0an\xc3\xa9\xef\xbf\xbd "), "program decoded: %s", r.out);
}

/* Files of several reports merge by dev:ino and rank by bytes, waits, then time;
 * a report whose "files" is malformed is skipped, with the reason. */
Test(cli, stats_files_merge_and_rank)
{
	struct rs_run r;
	char *base = rs_make_base("/tmp", "rs-cli-rank."), fn[PATH_MAX];
	const char *p1, *p2, *p3;

	snprintf(fn, sizeof(fn), "%s/1.json", base);
	rs_write_text(fn, "{\"pid\": 1, \"program\": \"a\", \"io_calls\": 1, \"files\": ["
		      "{\"path\": \"/x/low\", \"dev\": \"1:2\", \"ino\": 5, \"lock_waits\": 1, \"node_waits\": 0, \"wait_ns\": 9000000},"
		      "{\"path\": \"/x/high\", \"dev\": \"1:2\", \"ino\": 6, \"lock_waits\": 3, \"node_waits\": 0, \"wait_ns\": 1}]}");
	snprintf(fn, sizeof(fn), "%s/2.json", base);
	rs_write_text(fn, "{\"pid\": 2, \"program\": \"b\", \"io_calls\": 1, \"files\": ["
		      "{\"path\": \"/x/low-other-name\", \"dev\": \"1:2\", \"ino\": 5, \"lock_waits\": 0, \"node_waits\": 1, \"wait_ns\": 1},"
		      "{\"path\": \"/x/mid\", \"dev\": \"1:2\", \"ino\": 7, \"lock_waits\": 0, \"node_waits\": 2, \"wait_ns\": 5000000}]}");
	snprintf(fn, sizeof(fn), "%s/3.json", base);
	rs_write_text(fn, "{\"pid\": 3, \"io_calls\": 1, \"files\": [{\"path\": 7}]}");
	char *argv[] = { RS_CLI, "stats", base, NULL };
	run_cli(&r, argv, NULL);
	cr_assert_eq(r.status, 0, "%s", r.out);
	cr_assert(strstr(r.out, "3.json: bad \"files\" list"), "%s", r.out);
	cr_assert(strstr(r.out, "files, most bytes first (3 of 3)"), "%s", r.out);
	p1 = strstr(r.out, "/x/high");
	p2 = strstr(r.out, "/x/mid");
	p3 = strstr(r.out, "/x/low");
	cr_assert(p1 && p2 && p3 && p1 < p3 && p3 < p2,
		  "not ranked high (3 waits), low (2, 9 ms), mid (2, 5 ms):\n%s", r.out);
	cr_assert(strstr(r.out, "          1          1        9.0         0     2  1:2:5 /x/low\n"),
		  "low merged over both reports:\n%s", r.out);
	cr_assert_null(strstr(r.out, "low-other-name"), "%s", r.out);
}

/* 2-byte blocks hardly ever tear, even without the shim: the verdict must
 * then say the check proves less (and still pass); whichever way the
 * control went, the verdict must match its count. */
Test(cli, check_clean_control_says_less)
{
	struct rs_run r;
	char *base = rs_make_base("/dev/shm", "rs-cli-check.");
	/* Long enough for every leg to write under TSan on a loaded
	 * machine (0.5 s once gave the append leg none: "proves nothing"). */
	char *argv[] = { RS_CLI, "check", "--block", "2", "--seconds", RS_SLOW > 1 ? "2" : "0.5",
			 base, NULL };
	const char *env[] = { shm_env, NULL };
	const char *ctl;

	run_cli(&r, argv, env);
	cr_assert_eq(r.status, 0, "%s", r.out);
	ctl = check_leg_line(r.out, "without rangeshim: ");
	cr_assert(*ctl >= '0' && *ctl <= '9', "%s", r.out);
	if (atol(ctl) == 0)
		cr_assert(strstr(r.out, "OK, with less proof: ") &&
			  strstr(r.out, "none tore without it"), "%s", r.out);
	else
		cr_assert(strstr(r.out, "OK: reads tear here without the shim"), "%s", r.out);
}

/* --processes: the writer is a process of its own, so the shim's leg needs
 * node scope.  Control: RANGESHIM_SCOPE=process coordinates only threads,
 * and must fail the check. */
Test(cli, check_processes_needs_node_scope)
{
	struct rs_run r;
	char *base = rs_make_base("/dev/shm", "rs-cli-check.");
	char *argv[] = { RS_CLI, "check", "--processes", "--seconds", "1.5", base, NULL };
	const char *env[] = { shm_env, NULL };
	const char *proc_env[] = { shm_env, "RANGESHIM_SCOPE=process", NULL };
	const char *w;

	run_cli(&r, argv, env);
	cr_assert_eq(r.status, 0, "%s", r.out);
	cr_assert(strstr(r.out, "reader(s) in another process"), "%s", r.out);
	w = check_leg_line(r.out, "with rangeshim:    ");
	cr_assert(!strncmp(w, "0 of ", 5) && atol(w + 5) > 0, "%s", r.out);
	run_cli(&r, argv, proc_env);
	cr_assert_eq(r.status, 1, "process scope must not pass a check across processes:\n%s", r.out);
	cr_assert(strstr(r.out, "does not coordinate processes"), "%s", r.out);
	cr_assert_eq(rmdir(base), 0, "check left files in %s", base);
	mkdir(base, 0700);
}

/* ---- the interface, declared once (shim/cli/iface.c), and its docs ---- */

#include "cli/iface.c"

/* s with roff's "\-" as "-" (malloc'd). */
static char *unroff(const char *s)
{
	char *o = malloc(strlen(s) + 1), *q = o;

	cr_assert(o);
	for (; *s; s++) {
		if (s[0] == '\\' && s[1] == '-')
			s++;
		*q++ = *s;
	}
	*q = '\0';
	return o;
}

static char *read_src(const char *rel)
{
	char path[PATH_MAX];
	char *s;

	snprintf(path, sizeof path, "%s/%s", RS_SRC_DIR, rel);
	s = rs_read_file(path, NULL);
	cr_assert(s, "cannot read %s", path);
	return s;
}

/* The text from the first line starting with `from` up to the next line
 * starting with any of `to` (NULL-terminated), malloc'd, or NULL. */
static char *part(const char *doc, const char *from, const char *const *to)
{
	const char *b = NULL, *e = NULL;

	for (const char *l = doc; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		if (!b) {
			if (!strncmp(l, from, strlen(from)))
				b = l;
			continue;
		}
		for (const char *const *t = to; *t && !e; t++)
			if (!strncmp(l, *t, strlen(*t)))
				e = l;
		if (e)
			break;
	}
	if (!b)
		return NULL;
	if (!e)
		e = b + strlen(b);
	return strndup(b, (size_t)(e - b));
}

/* Does text contain the option word w ("--json", "-J") on its own (not
 * inside a longer option or word)? */
static bool has_word(const char *text, const char *w)
{
	size_t n = strlen(w);

	for (const char *p = strstr(text, w); p; p = strstr(p + 1, w)) {
		bool before = p == text || !(isalnum((unsigned char)p[-1]) || p[-1] == '-' ||
					     p[-1] == '_');
		bool after = !(isalnum((unsigned char)p[n]) || p[n] == '-' || p[n] == '_');

		if (before && after)
			return true;
	}
	return false;
}

/* Is "--name" an option of one of cmds (space-separated)? */
static bool declared_long(const char *name, const char *cmds)
{
	for (size_t i = 0; i < iface_nopts; i++) {
		const struct iface_opt *o = &iface_opts[i];

		if (!o->long_name || strcmp(o->long_name, name))
			continue;
		for (const char *p = cmds; *p; p += strcspn(p, " "), p += strspn(p, " ")) {
			char c[16];

			snprintf(c, sizeof c, "%.*s", (int)strcspn(p, " "), p);
			if (iface_takes(o, c))
				return true;
		}
	}
	return false;
}

/* Every "--word" in text (not "--" alone) is an option of one of cmds;
 * the strays are listed in bad. */
static int strays(const char *text, const char *cmds, char *bad, size_t len)
{
	int n = 0;

	bad[0] = '\0';
	for (const char *p = strstr(text, "--"); p; p = strstr(p + 2, "--")) {
		char w[64];
		size_t k = 0;

		if ((p > text && (isalnum((unsigned char)p[-1]) || p[-1] == '-')) ||
		    !islower((unsigned char)p[2]))
			continue;
		for (const char *q = p + 2; (islower((unsigned char)*q) || *q == '-') && k < 63; q++)
			w[k++] = *q;
		while (k && w[k - 1] == '-')
			k--;
		w[k] = '\0';
		if (!declared_long(w, cmds)) {
			n++;
			snprintf(bad + strlen(bad), len - strlen(bad), " --%s", w);
		}
	}
	return n;
}

/* Each option of cmd is in text, as its short and its long form; the
 * missing ones are listed in miss.  skip_help: --help need not be. */
static int missing(const char *text, const char *cmd, bool skip_help, bool both,
		   char *miss, size_t len)
{
	int n = 0;

	miss[0] = '\0';
	for (size_t i = 0; i < iface_nopts; i++) {
		const struct iface_opt *o = &iface_opts[i];
		char l[64] = "", s[4] = "";

		if (!iface_takes(o, cmd) || (skip_help && o->val == 'h'))
			continue;
		if (o->long_name)
			snprintf(l, sizeof l, "--%s", o->long_name);
		if (o->short_name)
			snprintf(s, sizeof s, "-%c", o->short_name);
		if ((*l && !has_word(text, l) && (both || !*s || !has_word(text, s))) ||
		    (*s && both && !has_word(text, s))) {
			n++;
			snprintf(miss + strlen(miss), len - strlen(miss), " %s%s%s", s, *s && *l ? "/" : "", l);
		}
	}
	return n;
}

/* Every value of a choice option or variable is in text. */
static int missing_choices(const char *text, const char *choices, char *miss, size_t len)
{
	int n = 0;

	miss[0] = '\0';
	for (const char *p = choices; p && *p; p += strspn(p, " ")) {
		char w[32];
		size_t k = strcspn(p, " ");

		snprintf(w, sizeof w, "%.*s", (int)k, p);
		p += k;
		if (!has_word(text, w)) {
			n++;
			snprintf(miss + strlen(miss), len - strlen(miss), " %s", w);
		}
	}
	return n;
}

/* Every RANGESHIM_X in text is a declared variable. */
static int stray_vars(const char *text, char *bad, size_t len)
{
	int n = 0;

	bad[0] = '\0';
	for (const char *p = strstr(text, "RANGESHIM_"); p; p = strstr(p + 1, "RANGESHIM_")) {
		char w[64];
		size_t k = strspn(p, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_");

		if (k <= 10 || k >= sizeof w)
			continue;
		snprintf(w, sizeof w, "%.*s", (int)k, p);
		while (w[strlen(w) - 1] == '_')
			w[strlen(w) - 1] = '\0';
		if (!iface_env(w) && strlen(w) > 10) {
			n++;
			snprintf(bad + strlen(bad), len - strlen(bad), " %s", w);
		}
	}
	return n;
}

/* `rangeshim CMD --help` of every subcommand: its own usage line, every
 * option it declares (short and long), the values of each choice, and no
 * option it does not take. */
Test(cli, interface_help_agrees)
{
	char bad[1024];

	for (size_t i = 0; i < iface_ncmds; i++) {
		const char *cmd = iface_cmds[i].name;
		char *argv[] = { RS_CLI, (char *)cmd, "--help", NULL }, want[64];
		struct rs_run r;

		rs_run(&r, argv, NULL, 0, 30);
		cr_assert_eq(r.status, 0, "%s --help: exit %d\n%s", cmd, r.status, r.out);
		snprintf(want, sizeof want, "usage: rangeshim %s ", cmd);
		cr_expect(!strncmp(r.out, want, strlen(want)), "%s --help is not its own:\n%s", cmd, r.out);
		cr_expect(!missing(r.out, cmd, false, true, bad, sizeof bad),
			  "%s --help omits%s", cmd, bad);
		cr_expect(!strays(r.out, cmd, bad, sizeof bad), "%s --help names%s, not options of %s",
			  cmd, bad, cmd);
		for (size_t k = 0; k < iface_nopts; k++)
			if (iface_takes(&iface_opts[k], cmd))
				cr_expect(!missing_choices(r.out, iface_opts[k].choices, bad, sizeof bad),
					  "%s --help: --%s omits the values%s", cmd,
					  iface_opts[k].long_name, bad);
	}
}

/* completion.bash offers exactly the declared subcommands, each one's
 * options, and the values of each choice option. */
Test(cli, interface_completion_agrees)
{
	char *comp = read_src("shim/cli/completion.bash"), bad[1024], want[512] = "";
	const char *p = strstr(comp, "local commands=\"");

	cr_assert(p, "completion.bash: no commands list");
	for (size_t i = 0; i < iface_ncmds; i++)
		snprintf(want + strlen(want), sizeof want - strlen(want), "%s ", iface_cmds[i].name);
	strcat(want, "help\"");
	cr_expect(!strncmp(p + strlen("local commands=\""), want, strlen(want)),
		  "completion.bash commands: %.80s, want %s", p, want);
	for (size_t i = 0; i < iface_ncmds; i++) {
		const char *cmd = iface_cmds[i].name;
		char head[32], *block, *tail;
		const char *const ends[] = { "        run)", "        env)", "        locks)",
					     "        stats)", "        check)", "        agent)",
					     "        clean)", "    esac", NULL };

		snprintf(head, sizeof head, "        %s)", cmd);
		block = part(comp, head, ends);
		cr_assert(block, "completion.bash has no case for %s", cmd);
		tail = strchr(block, '\n');	/* from after the case label */
		cr_expect(!missing(tail ? tail : "", cmd, false, true, bad, sizeof bad),
			  "completion of %s omits%s", cmd, bad);
		cr_expect(!strays(tail ? tail : "", cmd, bad, sizeof bad),
			  "completion of %s offers%s, not options of %s", cmd, bad, cmd);
		free(block);
	}
	for (size_t k = 0; k < iface_nopts; k++) {
		const struct iface_opt *o = &iface_opts[k];
		char head[64], *line;

		if (!o->choices)
			continue;
		snprintf(head, sizeof head, "        --%s)", o->long_name);
		line = part(comp, head, (const char *const[]){ "        -", "    esac", NULL });
		cr_assert(line, "completion.bash offers no values for --%s", o->long_name);
		cr_expect(strstr(line, o->choices), "completion of --%s: %s, want \"%s\"",
			  o->long_name, line, o->choices);
		free(line);
	}
	free(comp);
}

/* rangeshim(1): every subcommand in SYNOPSIS, in a section of its own that
 * names every option it takes and no other, and in EXIT STATUS; the
 * command's variables in ENVIRONMENT. */
Test(cli, interface_man1_agrees)
{
	char *raw = read_src("docs/man/rangeshim.1"), *man = unroff(raw), bad[1024];
	const char *const sh[] = { ".SH", ".SS", NULL }, *const sh_only[] = { ".SH", NULL };
	char *syn = part(man, ".SH SYNOPSIS", sh_only), *ex = part(man, ".SH EXIT STATUS", sh_only);
	char *envs = part(man, ".SH ENVIRONMENT", sh_only);

	cr_assert(syn && ex && envs, "rangeshim.1 lacks SYNOPSIS, EXIT STATUS or ENVIRONMENT");
	for (size_t i = 0; i < iface_ncmds; i++) {
		const char *cmd = iface_cmds[i].name;
		char want[64], *sec;

		snprintf(want, sizeof want, ".SY rangeshim\n.B %s\n", cmd);
		cr_expect(strstr(syn, want), "rangeshim.1 SYNOPSIS omits %s", cmd);
		snprintf(want, sizeof want, ".B %s\n", cmd);
		cr_expect(strstr(ex, want), "rangeshim.1 EXIT STATUS omits %s", cmd);
		snprintf(want, sizeof want, ".SS %s ", cmd);
		sec = part(man, want, sh);
		cr_assert(sec, "rangeshim.1 has no section '%s'", want);
		if (!strcmp(cmd, "env") && strstr(sec, "Same options as\n.BR run")) {
			/* True only if env takes no option that run does not. */
			for (size_t k = 0; k < iface_nopts; k++)
				cr_expect(!iface_takes(&iface_opts[k], "env") ||
					  iface_takes(&iface_opts[k], "run") ||
					  (iface_opts[k].long_name &&
					   declared_long(iface_opts[k].long_name, "run")),
					  "rangeshim.1 says env has run's options; --%s is env's only",
					  iface_opts[k].long_name);
			free(sec);
			sec = part(man, ".SS run ", sh);
			cmd = "run";
		}
		cr_expect(!missing(sec, cmd, true, false, bad, sizeof bad),
			  "rangeshim.1, %s: omits%s", cmd, bad);
		cr_expect(!strays(sec, cmd, bad, sizeof bad), "rangeshim.1, %s: names%s, not its options",
			  cmd, bad);
		for (size_t k = 0; k < iface_nopts; k++)
			if (iface_takes(&iface_opts[k], cmd))
				cr_expect(!missing_choices(sec, iface_opts[k].choices, bad, sizeof bad),
					  "rangeshim.1, %s --%s omits%s", cmd, iface_opts[k].long_name, bad);
		free(sec);
	}
	for (size_t i = 0; i < iface_nenvs; i++)
		if (!strcmp(iface_envs[i].reader, "command"))
			cr_expect(strstr(envs, iface_envs[i].name), "rangeshim.1 ENVIRONMENT omits %s",
				  iface_envs[i].name);
	cr_expect(!stray_vars(man, bad, sizeof bad), "rangeshim.1 names undeclared%s", bad);
	free(syn), free(ex), free(envs), free(man), free(raw);
}

/* rangeshim(7) and configuration.md: every variable, its values, and no
 * other; configuration.md also every subcommand and option. */
Test(cli, interface_man7_config_agree)
{
	char *raw = read_src("docs/man/rangeshim.7"), *man = unroff(raw), bad[1024];
	char *conf = read_src("docs/configuration.md");
	char *syn = part(man, ".SH SYNOPSIS", (const char *const[]){ ".SH", NULL });

	cr_assert(syn, "rangeshim.7 has no SYNOPSIS");
	cr_expect(!strstr(syn, "/usr/local"), "rangeshim.7 SYNOPSIS hard-codes a prefix:\n%s", syn);
	cr_expect(!stray_vars(man, bad, sizeof bad), "rangeshim.7 names undeclared%s", bad);
	cr_expect(!stray_vars(conf, bad, sizeof bad), "configuration.md names undeclared%s", bad);
	for (size_t i = 0; i < iface_nenvs; i++) {
		const struct iface_env *e = &iface_envs[i];
		char head[64], *sec;

		snprintf(head, sizeof head, ".B %s\n", e->name);
		if (!strcmp(e->reader, "library"))
			cr_expect(strstr(man, head), "rangeshim.7 has no entry '.B %s'", e->name);
		snprintf(head, sizeof head, "## %s\n", e->name);
		sec = part(conf, head, (const char *const[]){ "## ", NULL });
		cr_assert(sec, "configuration.md has no section %s", head);
		cr_expect(!missing_choices(sec, e->choices, bad, sizeof bad),
			  "configuration.md, %s omits%s", e->name, bad);
		free(sec);
	}
	for (size_t i = 0; i < iface_ncmds; i++) {
		const char *cmd = iface_cmds[i].name;
		char want[64], *sec = NULL;

		snprintf(want, sizeof want, "rangeshim %s ", cmd);
		cr_expect(strstr(conf, want), "configuration.md never shows '%s'", want);
		/* The "### ..." section whose title names the subcommand. */
		for (const char *l = strstr(conf, "\n### "); l && !sec; l = strstr(l + 1, "\n### ")) {
			char title[128];

			snprintf(title, sizeof title, "%.*s", (int)strcspn(l + 5, "\n"), l + 5);
			if (has_word(title, cmd))
				sec = part(l + 1, "### ", (const char *const[]){ "## ", "### ", NULL });
		}
		cr_assert(sec, "configuration.md has no '### ' section naming %s", cmd);
		cr_expect(!missing(sec, cmd, true, false, bad, sizeof bad),
			  "configuration.md, %s: omits%s", cmd, bad);
		for (size_t k = 0; k < iface_nopts; k++)
			if (iface_takes(&iface_opts[k], cmd))
				cr_expect(!missing_choices(sec, iface_opts[k].choices, bad, sizeof bad),
					  "configuration.md, %s --%s omits%s", cmd,
					  iface_opts[k].long_name, bad);
		free(sec);
	}
	free(syn), free(man), free(raw), free(conf);
}

/* run checks every value before it starts anything: a bad one is one line
 * naming the option and the value, exit 2, and CMD never ran (control: the
 * same run with good values runs it).  --stats=PATH gets its directory
 * made; the control, the same PATH through the variable alone, shows the
 * library's "cannot write" that the check prevents. */
Test(cli, run_validates_first)
{
	static const char *const bad[][2] = {
		{ "--log", "loud" }, { "--shm", "no-slash" }, { "--shm", "/a/b" },
		{ "--shm", "/.." }, { "--paths", "rel/dir:/tmp" }, { "--paths", ":::" },
		{ "--scope", "nodes" }, { "--lock", "spin" },
	};
	char *base = rs_make_base("/tmp", "rs-cli-val."), marker[PATH_MAX], stats[PATH_MAX + 32];
	char var[PATH_MAX + 48];
	struct rs_run r;

	snprintf(marker, sizeof marker, "%s/ran", base);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char *argv[] = { RS_CLI, "run", (char *)bad[i][0], (char *)bad[i][1], "--", "touch",
				 marker, NULL };
		const char *nl;

		run_cli(&r, argv, NULL);
		nl = strchr(r.out, '\n');
		cr_expect_eq(r.status, 2, "run %s %s: exit %d\n%s", bad[i][0], bad[i][1], r.status, r.out);
		cr_expect(nl && !nl[1], "run %s %s: not one line:\n%s", bad[i][0], bad[i][1], r.out);
		cr_expect(strstr(r.out, bad[i][0]) && strstr(r.out, bad[i][1]),
			  "run %s %s: the line does not name both:\n%s", bad[i][0], bad[i][1], r.out);
		cr_expect(!exists(marker), "run %s %s started the command", bad[i][0], bad[i][1]);
	}
	{
		char *argv[] = { RS_CLI, "run", "--log", "info", "--shm", shm_name, "--paths", base,
				 "--scope", "cluster", "--lock", "mutex", "--", "touch", marker, NULL };

		run_cli(&r, argv, NULL);
		cr_expect_eq(r.status, 0, "the control run failed: %d\n%s", r.status, r.out);
		cr_expect(exists(marker), "the control run did not run the command");
	}

	snprintf(stats, sizeof stats, "%s/job/deep/%%p.json", base);
	{
		char *argv[] = { RS_CLI, "run", "--shm", shm_name, NULL, "--", "sh", "-c",
				 "cat /dev/null; cat /dev/null", NULL };
		char dir[PATH_MAX + 16];
		DIR *d;
		struct dirent *e;
		int n = 0;

		/* Control: the variable alone, the directory missing. */
		snprintf(var, sizeof var, "RANGESHIM_STATS=%s", stats);
		argv[4] = "--lib=" RS_LIB;
		run_cli(&r, argv, (const char *const[]){ var, NULL });
		cr_expect(strstr(r.out, "cannot write"), "control: no 'cannot write' line:\n%s", r.out);

		snprintf(var, sizeof var, "--stats=%s", stats);
		argv[4] = var;
		run_cli(&r, argv, NULL);
		cr_expect_eq(r.status, 0, "run --stats=%s: %d\n%s", stats, r.status, r.out);
		cr_expect(!strstr(r.out, "cannot write"), "run --stats=PATH:\n%s", r.out);
		snprintf(dir, sizeof dir, "%s/job/deep", base);
		d = opendir(dir);
		cr_assert(d, "run did not make %s", dir);
		while ((e = readdir(d)))
			n += strstr(e->d_name, ".json") != NULL;
		closedir(d);
		cr_expect(n >= 3, "%d reports in %s, want one per process (sh, cat, cat)", n, dir);
	}
	rs_rm_rf(base);
	free(base);
}

/* One file, one spelling: the waiter's 5 s line and `locks` both name the
 * file major:minor:inode (decimal) and by its path. */
Test(cli, files_named_one_way)
{
	struct holder h;
	struct rs_run *r = malloc(sizeof(*r));
	char log[PATH_MAX], id[64], want[PATH_MAX + 80], *text = NULL;
	struct stat st;
	int status;
	pid_t w;

	cr_assert(r);
	cr_assert_eq(stat(data, &st), 0);
	snprintf(id, sizeof id, "%u:%u:%llu", major(st.st_dev), minor(st.st_dev),
		 (unsigned long long)st.st_ino);
	snprintf(log, sizeof log, "%s.writer-log", data);
	holder_start(&h, 1, 0);
	cr_assert_eq(waitpid(h.pid, &status, WUNTRACED), h.pid);
	w = start_writer_to(log);
	/* The waiter speaks after about 5 s; give it 20. */
	for (int i = 0; i < 200; i++) {
		free(text);
		text = rs_read_file(log, NULL);
		if (text && strstr(text, "blocked for"))
			break;
		usleep(100 * 1000);
	}
	cr_assert_eq(cli(r, "locks", NULL), 0, "%s", r->out);
	kill(h.pid, SIGCONT);
	cr_assert_eq(holder_finish(&h), 0);
	waitpid(w, &status, 0);
	cr_assert(text && strstr(text, "blocked for"), "the waiter never said it waited:\n%s",
		  text ? text : "(no log)");
	snprintf(want, sizeof want, "file %s %s ", id, data);
	cr_expect(strstr(text, want), "the waiter's line does not say '%s':\n%s", want, text);
	snprintf(want, sizeof want, "of file %s %s, ", id, data);
	cr_expect(strstr(r->out, want), "locks' waiter line does not say '%s':\n%s", want, r->out);
	{
		char f[16][64];

		cr_assert_geq(line_fields(r->out, " HELD ", f, 16), 12, "%s", r->out);
		cr_expect_str_eq(f[10], id, "locks' DEV:INO is %s, not %s:\n%s", f[10], id, r->out);
		cr_expect(strstr(r->out, data), "locks does not name %s:\n%s", data, r->out);
	}
	free(text);
	unlink(log);
	free(r);
}

/* A process of the job holding the kernel's own locks on a coordinated
 * file (fcntl, OFD, flock), and one on a file nobody coordinates (the
 * control: the kernel lists it, locks must not). */
static pid_t kernel_locker(const char *other, int *release)
{
	int rp[2], cp[2];
	pid_t p;
	char c;

	cr_assert_eq(pipe2(rp, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(cp, O_CLOEXEC), 0);
	p = fork();
	cr_assert_geq(p, 0);
	if (p == 0) {
		int a = open(data, O_RDWR), b = open(data, O_RDWR), d = open(data, O_RDONLY);
		int o = open(other, O_RDWR | O_CREAT, 0600);
		struct flock w = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 100 };
		struct flock rd = { .l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 200, .l_len = 100 };
		struct flock ow = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10 };

		if (a < 0 || b < 0 || d < 0 || o < 0 || fcntl(a, F_SETLK, &w) < 0 ||
		    fcntl(b, F_OFD_SETLK, &rd) < 0 || flock(d, LOCK_SH) < 0 ||
		    fcntl(o, F_SETLK, &ow) < 0)
			_exit(2);
		close(rp[0]);
		close(cp[1]);
		if (write(rp[1], "r", 1) != 1 || read(cp[0], &c, 1) < 0)
			_exit(3);
		_exit(0);
	}
	close(rp[1]);
	close(cp[0]);
	cr_assert_eq(read(rp[0], &c, 1), 1, "the kernel locker did not take its locks");
	close(rp[0]);
	*release = cp[1];
	return p;
}

/* locks beside lslocks: its options (-J -n -r -u -b -o --output-all -H),
 * START/END/SIZE, the kernel's locks on coordinated files as rows of
 * their own kind, cluster lines only in cluster scope. */
Test(cli, locks_like_lslocks)
{
	struct holder h;
	struct rs_run *r = malloc(sizeof(*r));
	char other[300], pid[16], id[64], want[128], *proc;
	const char *node_env[] = { "RANGESHIM_SCOPE=node", NULL };
	const char *cl_env[] = { "RANGESHIM_SCOPE=cluster", NULL };
	struct stat st, ost;
	int release, status;
	pid_t k;

	cr_assert(r);
	snprintf(other, sizeof other, "%s.other", data);
	holder_start(&h, 0, 0);
	k = kernel_locker(other, &release);
	snprintf(pid, sizeof pid, "%d", (int)k);
	cr_assert_eq(stat(other, &ost), 0);
	cr_assert_eq(stat(data, &st), 0);

	/* The control: the kernel has the lock on the other file. */
	{
		/* /proc files have no size: read until the end. */
		FILE *f = fopen("/proc/locks", "r");
		size_t got = 0;

		proc = calloc(1, 1 << 20);
		cr_assert(f && proc);
		got = fread(proc, 1, (1 << 20) - 1, f);
		proc[got] = '\0';
		fclose(f);
	}
	snprintf(want, sizeof want, "%02x:%02x:%llu ", major(ost.st_dev), minor(ost.st_dev),
		 (unsigned long long)ost.st_ino);
	cr_assert(proc && strstr(proc, want), "/proc/locks does not list %s:\n%s", want, proc);
	free(proc);

	locks_args(r, NULL);
	cr_log_info("locks with kernel locks:\n%s", r->out);
	cr_assert_eq(r->status, 0, "%s", r->out);
	cr_expect(strstr(r->out, " POSIX:WRITE ") && strstr(r->out, " OFDLCK:READ ") &&
		  strstr(r->out, " FLOCK:READ "), "no row for each kernel lock:\n%s", r->out);
	snprintf(id, sizeof id, "%u:%u:%llu", major(ost.st_dev), minor(ost.st_dev),
		 (unsigned long long)ost.st_ino);
	cr_expect(!strstr(r->out, id), "locks lists the uncoordinated file %s:\n%s", id, r->out);
	cr_expect(strstr(r->out, "3 kernel lock(s)"), "the summary does not count them:\n%s", r->out);
	{
		char f[16][64];

		cr_assert_geq(line_fields(r->out, " POSIX:WRITE ", f, 16), 12, "%s", r->out);
		cr_expect_str_eq(f[1], pid, "the POSIX row's pid %s, not %s", f[1], pid);
		cr_expect_str_eq(f[9], "0-100", "the POSIX row's range %s", f[9]);
	}

	locks_args(r, "-J", NULL);
	cr_expect(strstr(r->out, "\"kernel_locks\": [{") && strstr(r->out, "\"type\": \"OFDLCK\""),
		  "-J has no kernel_locks:\n%s", r->out);
	locks_args(r, "-n", "-r", "-b", "-u", "-o", "PID,TYPE,START,END,SIZE", NULL);
	snprintf(want, sizeof want, "%d NODE 0 1048575 1048576\n", (int)h.pid);
	cr_expect(strstr(r->out, want), "-n -r -b -o ... lacks '%s':\n%s", want, r->out);
	snprintf(want, sizeof want, "%s POSIX 0 99 100\n", pid);
	cr_expect(strstr(r->out, want), "-n -r -b -o ... lacks '%s':\n%s", want, r->out);
	cr_expect(!strstr(r->out, "PID"), "-n printed a heading:\n%s", r->out);
	locks_args(r, "--output-all", NULL);
	cr_expect(strstr(r->out, " TYPE ") && strstr(r->out, " START ") && strstr(r->out, " END ") &&
		  strstr(r->out, " SIZE"), "--output-all lacks TYPE/START/END/SIZE:\n%s", r->out);
	cr_expect(strstr(r->out, " 1M"), "SIZE is not human-readable by default:\n%s", r->out);
	locks_args(r, "-H", NULL);
	cr_expect(r->status == 0 && strstr(r->out, "SIZE ") && strstr(r->out, "BLOCKER "),
		  "-H: %d\n%s", r->status, r->out);

	/* Cluster lines: none in node scope; the control, cluster scope
	 * without an agent, says so. */
	{
		char *argv[] = { RS_CLI, "locks", "--shm", shm_name, NULL };

		run_cli(r, argv, node_env);
		cr_expect(!strstr(r->out, "cluster"), "node scope printed a cluster line:\n%s", r->out);
		run_cli(r, argv, cl_env);
		cr_expect(strstr(r->out, "cluster: "), "cluster scope: no line about the agent:\n%s",
			  r->out);
	}
	cr_expect(!strstr(r->out, "(("), "doubled parentheses:\n%s", r->out);

	close(release);
	waitpid(k, &status, 0);
	cr_expect_eq(WEXITSTATUS(status), 0);
	cr_assert_eq(holder_finish(&h), 0);
	unlink(other);
	free(r);
}

/* The job summary: a header (command, start/end/wall, host, uid, batch
 * job), processes without I/O folded into one line, programs left out by
 * RANGESHIM_SKIP_CMDS / RANGESHIM_ONLY_CMDS named as not coordinated, and
 * --json.  The control: the same job without the skip list, where cat's
 * reads are coordinated and it is a row of its own. */
Test(cli, stats_job_summary)
{
	char *base = rs_make_base("/tmp", "rs-cli-job."), cmd[PATH_MAX * 3], stats[PATH_MAX + 32];
	char dir[PATH_MAX + 8], want[512];
	struct rs_run *r = malloc(sizeof(*r)), *js = malloc(sizeof(*js));
	const char *skip_env[] = { "SLURM_JOB_ID=4242", "RANGESHIM_SKIP_CMDS=cat,true",
				   "RANGESHIM_LOG=info", NULL };
	const char *plain_env[] = { "SLURM_JOB_ID=4242", NULL };

	cr_assert(r && js);
	snprintf(cmd, sizeof cmd, "dd if=/dev/zero of=%s bs=64k count=4 2>/dev/null; basename x >/dev/null; "
		 "cat %s >/dev/null; /bin/true", data, data);
	for (int leg = 0; leg < 2; leg++) {
		snprintf(dir, sizeof dir, "%s/%d", base, leg);
		snprintf(stats, sizeof stats, "--stats=%s/%%p.json", dir);
		{
			char *argv[] = { RS_CLI, "run", "--shm", shm_name, stats, "--", "/bin/sh", "-c",
					 cmd, NULL };

			run_cli(r, argv, leg ? plain_env : skip_env);
		}
		cr_assert_eq(r->status, 0, "run: %s", r->out);
		if (!leg)
			cr_expect(strstr(r->out, "cat is in RANGESHIM_SKIP_CMDS: its I/O is NOT coordinated"),
				  "no info line for the skipped cat:\n%s", r->out);
		{
			char *argv[] = { RS_CLI, "stats", dir, NULL };
			char *jargv[] = { RS_CLI, "stats", "--json", dir, NULL };

			run_cli(r, argv, NULL);
			run_cli(js, jargv, NULL);
		}
		cr_log_info("stats, %s:\n%s", leg ? "control" : "cat and true skipped", r->out);
		cr_assert_eq(r->status, 0, "%s", r->out);
		cr_assert_eq(js->status, 0, "%s", js->out);
		snprintf(want, sizeof want, "  command:  /bin/sh -c dd if=/dev/zero of=%s", data);
		cr_expect(strstr(r->out, want), "no command line in the header:\n%s", r->out);
		cr_expect(strstr(r->out, "  start:    ") && strstr(r->out, " wall: "), "%s", r->out);
		snprintf(want, sizeof want, "   uid: %u   batch job: 4242\n", (unsigned)getuid());
		cr_expect(strstr(r->out, want), "no uid or batch job '%s':\n%s", want, r->out);
		cr_expect(strstr(r->out, "without I/O on coordinated files: ") &&
			  strstr(r->out, "basename (1)"), "basename not folded:\n%s", r->out);
		cr_expect(!strstr(r->out, " basename         "), "basename has a row:\n%s", r->out);
		cr_expect(strstr(r->out, " dd "), "dd has no row:\n%s", r->out);
		cr_expect(strstr(js->out, "\"batch_job\": \"4242\"") &&
			  strstr(js->out, "\"folded\": {") && strstr(js->out, "\"basename\": 1"),
			  "--json:\n%s", js->out);
		if (!leg) {
			cr_expect(strstr(r->out, "NOT coordinated: ") && strstr(r->out, "cat (1)") &&
				  strstr(r->out, "true (1)"), "cat and true not named as left out:\n%s",
				  r->out);
			cr_expect(!strstr(r->out, " cat    "), "a skipped cat has a row:\n%s", r->out);
			cr_expect(strstr(js->out, "\"left_out\": {\"cat\": 1, \"true\": 1}") ||
				  strstr(js->out, "\"left_out\": {\"true\": 1, \"cat\": 1}"),
				  "--json left_out:\n%s", js->out);
		} else {
			cr_expect(strstr(r->out, " cat  "), "control: cat's reads have no row:\n%s", r->out);
			cr_expect(!strstr(r->out, "NOT coordinated"), "control:\n%s", r->out);
		}
	}
	{
		/* A bad list: one line, and every program stays coordinated. */
		char *argv[] = { RS_CLI, "run", "--shm", shm_name, "--", "/bin/true", NULL };

		run_cli(r, argv, (const char *const[]){ "RANGESHIM_SKIP_CMDS=a/b", NULL });
		cr_expect(strstr(r->out, "RANGESHIM_SKIP_CMDS='a/b' is not") &&
			  strstr(r->out, "every program is coordinated"), "%s", r->out);
	}
	rs_rm_rf(base);
	free(base);
	free(r);
	free(js);
}

/* Bypasses said once by default: a process that stored through a
 * writable shared mapping of a coordinated file (unless it holds its own
 * lock through the mapping's descriptor, as SQLite does), and one that set up
 * io_uring, say so in one line at exit, at the default log level, naming
 * the kind and (where the kind has one) the file.  Controls: the same
 * programs on a file RANGESHIM_PATHS leaves out say nothing about it, and
 * stdio (at info only) stays quiet. */
Test(cli, bypass_said_once_at_exit)
{
	char *base = rs_make_base("/dev/shm", "rs-cli-bypass."), file[PATH_MAX], id[64];
	char want[PATH_MAX + 256], paths[PATH_MAX + 32], shm[128];
	struct rs_run *r = malloc(sizeof(*r));
	struct stat st;
	int fd;

	cr_assert(r);
	snprintf(file, sizeof file, "%s/mapped", base);
	fd = open(file, O_RDWR | O_CREAT | O_TRUNC, 0600);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, 65536), 0);
	close(fd);
	cr_assert_eq(stat(file, &st), 0);
	snprintf(id, sizeof id, "%u:%u:%llu", major(st.st_dev), minor(st.st_dev),
		 (unsigned long long)st.st_ino);
	snprintf(shm, sizeof shm, "RANGESHIM_SHM=%s", shm_name);
	{
		char *argv[] = { RS_HELPER("cov_probe"), "mmap", file, NULL };

		rs_run(r, argv, (const char *const[]){ shm, NULL }, 1, 60);
		cr_assert_eq(r->status, 0, "%s", r->out);
		cr_expect_eq(count_of(r->out, "NOT coordinated"), 1, "not one line:\n%s", r->out);
		snprintf(want, sizeof want, "NOT coordinated in this process: stores through a writable "
			 "MAP_SHARED mapping of a coordinated file (2, first: file %s %s)", id, file);
		cr_expect(strstr(r->out, want), "no '%s':\n%s", want, r->out);

		snprintf(paths, sizeof paths, "RANGESHIM_PATHS=%s/elsewhere", base);
		rs_run(r, argv, (const char *const[]){ shm, paths, NULL }, 1, 60);
		cr_assert_eq(r->status, 0, "%s", r->out);
		cr_expect(!strstr(r->out, "NOT coordinated"), "control: a file left out:\n%s", r->out);
	}
	{
		/* The same mappings under a lock the program holds itself
		 * (SQLite's WAL index): its own coordination, not said; the
		 * run above, without the lock, is the control. */
		char *argv[] = { RS_HELPER("cov_probe"), "mmap_locked", file, NULL };

		rs_run(r, argv, (const char *const[]){ shm, NULL }, 1, 60);
		cr_assert_eq(r->status, 0, "%s", r->out);
		cr_expect(!strstr(r->out, "NOT coordinated"), "a locked mapping was said:\n%s", r->out);
	}
	{
		char *argv[] = { RS_HELPER("cov_probe"), "uring", file, NULL };

		rs_run(r, argv, (const char *const[]){ shm, NULL }, 1, 60);
		if (strstr(r->out, "ENOSYS") || strstr(r->out, "not supported"))
			cr_log_warn("io_uring unavailable here: %s", r->out);
		else
			cr_expect(strstr(r->out, "NOT coordinated in this process: I/O submitted through "
					 "an io_uring ring (") && strstr(r->out, "files not known)"),
				  "io_uring not said:\n%s", r->out);
	}
	{
		char *argv[] = { RS_HELPER("cov_probe"), "stdio", file, NULL };

		rs_run(r, argv, (const char *const[]){ shm, NULL }, 1, 60);
		cr_assert_eq(r->status, 0, "%s", r->out);
		cr_expect(!strstr(r->out, "NOT coordinated"), "stdio spoke at the default level:\n%s",
			  r->out);
	}
	rs_rm_rf(base);
	free(base);
	free(r);
}

/* check races O_APPEND writers too, and says so in text and --json.  The
 * read-back must be able to see losses: the control is the same worker
 * with lseek-then-write instead of O_APPEND, the race O_APPEND closes,
 * run until it loses a record (bounded; skipped with its counts if this
 * machine never interleaves them). */
Test(cli, check_appends_and_json)
{
	char *base = rs_make_base("/dev/shm", "rs-cli-app."), file[PATH_MAX];
	struct rs_run *r = malloc(sizeof(*r));
	char lib[PATH_MAX + 8];
	uint64_t lost = 0, runs = 0;
	int fd;

	cr_assert(r);
	snprintf(lib, sizeof lib, "--lib=%s", RS_LIB);
	{
		char *argv[] = { RS_CLI, "check", lib, "--seconds", "0.5", "--block", "64k", base, NULL };

		run_cli(r, argv, NULL);
		cr_log_info("check:\n%s", r->out);
		cr_assert_eq(r->status, 0, "%s", r->out);
		cr_expect(strstr(r->out, "processes appending 65536-byte records with O_APPEND"),
			  "%s", r->out);
		cr_expect(strstr(r->out, "  appends without:  ") &&
			  strstr(r->out, "  appends with:      0 of "), "%s", r->out);
		cr_expect(strstr(r->out, " appended records interleaved, 0 lost\n"), "%s", r->out);
		cr_expect(strstr(r->out, " Appends: "), "the verdict says nothing of appends:\n%s",
			  r->out);
	}
	{
		char *argv[] = { RS_CLI, "check", "--json", lib, "--seconds", "0.5", "--block", "64k",
				 base, NULL };

		run_cli(r, argv, NULL);
		cr_assert_eq(r->status, 0, "%s", r->out);
		cr_expect(r->out[0] == '{' && strstr(r->out, "\"appends\": {\"writers\": 4, \"record\": 65536, ") &&
			  strstr(r->out, "\"interleaved\": 0, \"lost\": 0, \"shim_loaded\": true") &&
			  strstr(r->out, "\"verdict\": \"OK") && strstr(r->out, "\"exit\": 0}\n"),
			  "--json:\n%s", r->out);
		cr_expect(!strchr(strchr(r->out, '\n') + 1, '\n'), "--json is not one line:\n%s", r->out);
	}
	snprintf(file, sizeof file, "%s/seek", base);
	fd = open(file, O_RDWR | O_CREAT | O_TRUNC, 0600);
	cr_assert_geq(fd, 0);
	close(fd);
	for (; runs < 20 && !lost; runs++) {
		char *argv[] = { RS_CLI, "check", "--append-worker", file, "65536", "4", "0.5", "8388608",
				 "seek", NULL };

		run_cli(r, argv, NULL);
		cr_assert_eq(r->status, 0, "%s", r->out);
		cr_assert_geq(rs_field(r->out, "lost"), 0, "no lost= from the worker: %s", r->out);
		lost = (uint64_t)rs_field(r->out, "lost");
	}
	if (!lost)
		cr_skip_test("lseek-then-write lost no record in %llu runs here: %s",
			     (unsigned long long)runs, r->out);
	cr_log_info("the control lost %llu record(s) in run %llu: %s", (unsigned long long)lost,
		    (unsigned long long)runs, r->out);
	rs_rm_rf(base);
	free(base);
	free(r);
}

/* run --stats names the program it started that could not be instrumented
 * (a static binary writes no report); the control, a dynamic one, is not
 * named. */
Test(cli, run_stats_names_uninstrumented)
{
	struct rs_run r;
	char tmpdir[PATH_MAX + 8], *base = rs_make_base("/tmp", "rs-cli-static.");
	const char *env[] = { tmpdir, NULL };

	if (access("/sbin/ldconfig", X_OK) != 0)
		cr_skip_test("no /sbin/ldconfig to serve as a static binary");
	snprintf(tmpdir, sizeof tmpdir, "TMPDIR=%s", base);
	{
		char *argv[] = { RS_CLI, "run", "--stats", "--", "/sbin/ldconfig", "--version", NULL };

		run_cli(&r, argv, env);
		cr_expect(strstr(r.out, "1 program(s) in the job could not be instrumented: "
				 "ldconfig (/sbin/ldconfig: statically linked"), "%s", r.out);
	}
	{
		char *argv[] = { RS_CLI, "run", "--stats", "--", "/bin/true", NULL };

		run_cli(&r, argv, env);
		cr_expect(strstr(r.out, "rangeshim job summary: 1 process report(s)") &&
			  strstr(r.out, "\n0 program(s) in the job could not be instrumented\n"),
			  "control:\n%s", r.out);
	}
	rs_rm_rf(base);
	free(base);
}

/* The numbers of the per-file row of `stats` whose FILE is id path. */
static bool file_row(const char *out, const char *id, const char *path, unsigned long long v[8])
{
	char key[PATH_MAX + 80], f[12][64];

	snprintf(key, sizeof key, " %s %s\n", id, path);
	if (line_fields(out, key, f, 12) != 10)
		return false;
	for (int i = 0; i < 8; i++)
		v[i] = strtoull(f[i], NULL, 10);
	return true;
}

static void file_id_of(const char *path, char *id, size_t len)
{
	struct stat st;

	cr_assert_eq(stat(path, &st), 0, "%s: %s", path, strerror(errno));
	snprintf(id, len, "%u:%u:%llu", major(st.st_dev), minor(st.st_dev),
		 (unsigned long long)st.st_ino);
}

/*
 * Per-file totals over a job's processes (`run --stats DIR`, then `stats
 * DIR` and --json): four dd processes write 25 blocks each to W, a fifth
 * reads it back: W's row says 409600 bytes written and read by 5
 * processes, named major:minor:inode path.  cov_probe maps M writable and
 * shared: M's row has uncovered calls, W's (the control) none.  cat reads
 * 40 files of 100 bytes: its report lists RS_FW_REPORT (16) of them and
 * sums the other 24 in "files_other", and the summary's rows plus its
 * "other files" line add up to the job's bytes_read and io_calls, so that
 * nothing is lost or counted twice by the bound.
 */
Test(cli, stats_per_file_totals)
{
	char *base = rs_make_base("/dev/shm", "rs-cli-perfile."), w[PATH_MAX], m[PATH_MAX];
	char many[PATH_MAX], cmd[PATH_MAX * 6], stats[PATH_MAX + 32], dir[PATH_MAX], id[64];
	struct rs_run *r = malloc(sizeof(*r)), *js = malloc(sizeof(*js));
	unsigned long long v[8], sum_read = 0, sum_calls = 0;
	char f[12][64];
	const char *p;
	int fd;

	cr_assert(r && js);
	snprintf(w, sizeof w, "%s/W", base);
	snprintf(m, sizeof m, "%s/M", base);
	snprintf(many, sizeof many, "%s/many", base);
	snprintf(dir, sizeof dir, "%s/reports", base);
	cr_assert_eq(mkdir(many, 0700), 0);
	fd = open(m, O_RDWR | O_CREAT | O_TRUNC, 0600);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, 65536), 0);
	close(fd);
	for (int i = 0; i < 40; i++) {
		char fn[PATH_MAX + 16], text[101];

		snprintf(fn, sizeof fn, "%s/%02d", many, i);
		memset(text, 'a' + i % 26, 100);
		text[100] = '\0';
		rs_write_text(fn, text);
	}
	snprintf(cmd, sizeof cmd,
		 "for i in 0 1 2 3; do dd if=/dev/zero of=%s bs=4096 count=25 seek=$((i*25)) "
		 "conv=notrunc 2>/dev/null & done; wait; dd if=%s of=/dev/null bs=4096 2>/dev/null; "
		 "%s mmap %s; cat %s/* >/dev/null", w, w, RS_HELPER("cov_probe"), m, many);
	snprintf(stats, sizeof stats, "--stats=%s/%%p.json", dir);
	{
		char *argv[] = { RS_CLI, "run", "--shm", shm_name, stats, "--", "/bin/sh", "-c", cmd,
				 NULL };
		char *sargv[] = { RS_CLI, "stats", dir, NULL };
		char *jargv[] = { RS_CLI, "stats", "--json", dir, NULL };

		run_cli(r, argv, NULL);
		cr_assert_eq(r->status, 0, "run: %s", r->out);
		run_cli(r, sargv, NULL);
		run_cli(js, jargv, NULL);
	}
	cr_log_info("stats:\n%s", r->out);
	cr_assert_eq(r->status, 0, "%s", r->out);
	cr_assert_eq(js->status, 0, "%s", js->out);

	file_id_of(w, id, sizeof id);
	cr_assert(file_row(r->out, id, w, v), "no row '%s %s':\n%s", id, w, r->out);
	cr_expect_eq(v[1], 409600, "W: bytes written, 4 x 25 x 4096:\n%s", r->out);
	cr_expect_eq(v[0], 409600, "W: bytes read back:\n%s", r->out);
	cr_expect_geq(v[2], 201, "W: 100 writes, 101 reads at least:\n%s", r->out);
	cr_expect_eq(v[6], 0, "W: no uncovered call (control):\n%s", r->out);
	cr_expect_eq(v[7], 5, "W: 5 processes:\n%s", r->out);
	p = strstr(r->out, "files, most bytes first (");
	cr_expect(p && strstr(p, w) && strstr(p, w) < strstr(p, many),
		  "W, the most bytes, is not first:\n%s", r->out);

	file_id_of(m, id, sizeof id);
	cr_assert(file_row(r->out, id, m, v), "no row '%s %s':\n%s", id, m, r->out);
	cr_expect_geq(v[6], 1, "M: its shared writable mapping is not counted:\n%s", r->out);

	/* The rows and the "other files" line add up to the job's totals. */
	for (p = strstr(r->out, "files, most bytes first ("); p && (p = strchr(p, '\n'));) {
		p++;
		if (!strncmp(p, "  ", 2) && isdigit((unsigned char)p[strspn(p, " ")]) &&
		    line_fields(p, "", f, 12) >= 8) {
			sum_read += strtoull(f[0], NULL, 10);
			sum_calls += strtoull(f[2], NULL, 10);
		}
	}
	cr_expect(strstr(r->out, " (") && strstr(r->out, " other files)\n"),
		  "no 'other files' line:\n%s", r->out);
	cr_assert_eq(line_fields(r->out, "  bytes_read ", f, 4), 2, "%s", r->out);
	cr_expect_eq(sum_read, strtoull(f[1], NULL, 10), "files' bytes_read do not add up:\n%s",
		     r->out);
	cr_assert_eq(line_fields(r->out, "  io_calls ", f, 4), 2, "%s", r->out);
	cr_expect_eq(sum_calls, strtoull(f[1], NULL, 10), "files' calls do not add up:\n%s",
		     r->out);

	/* cat's own report: 16 files listed, 24 summed. */
	{
		DIR *d = opendir(dir);
		struct dirent *e;
		bool found = false;

		cr_assert_not_null(d);
		while ((e = readdir(d))) {
			char fn[PATH_MAX + 300], *t;

			snprintf(fn, sizeof fn, "%s/%s", dir, e->d_name);
			t = e->d_name[0] != '.' ? rs_read_file(fn, NULL) : NULL;
			if (t && strstr(t, "\"program\": \"cat\"")) {
				found = true;
				cr_expect_eq(count_of(t, "{\"path\": "), 16, "cat lists not 16:\n%s", t);
				cr_expect(strstr(t, "\"files_other\": {\"files\": 24, ") &&
					  strstr(t, "\"bytes_read\": 2400, "), "cat's other files:\n%s", t);
			}
			free(t);
		}
		closedir(d);
		cr_expect(found, "no report of cat");
	}
	file_id_of(w, id, sizeof id);
	{
		char want[PATH_MAX + 200];

		snprintf(want, sizeof want, "{\"file\": \"%s\", \"path\": \"%s\", \"bytes_read\": 409600, "
			 "\"bytes_written\": 409600, ", id, w);
		cr_expect(strstr(js->out, want), "--json has no '%s':\n%s", want, js->out);
		/* Every file a report listed (up to 256), and cat's 24 others. */
		cr_expect(strstr(js->out, "\"other_files\": {\"files\": 24, \"bytes_read\": 2400, "),
			  "--json other_files:\n%s", js->out);
	}
	rs_rm_rf(base);
	free(base);
	free(r);
	free(js);
}

/*
 * locks -i/--noinaccessible, as lslocks -i: an entry whose file path
 * cannot be determined (PATH ?: here the holder has the file's grant but
 * no descriptor of it, and no other process has it open) is left out, in
 * the table and in --json.  Control: the same holder with the file open
 * is named, and -i keeps its row.
 */
Test(cli, locks_noinaccessible)
{
	struct holder h;
	struct rs_run *r = malloc(sizeof(*r));
	char row[64], f[16][64];

	cr_assert(r);
	for (int open_it = 0; open_it < 2; open_it++) {
		holder_opens = open_it;
		holder_start(&h, 0, 0);
		snprintf(row, sizeof(row), " %d ", (int)h.pid);
		cr_assert_eq(locks_args(r, "-o", "PID,PATH", NULL), 0, "%s", r->out);
		cr_assert_eq(line_fields(r->out, row, f, 16), 2, "no row:\n%s", r->out);
		cr_assert_str_eq(f[1], open_it ? data : "?", "%s", r->out);
		cr_assert_eq(locks_args(r, "-i", "-o", "PID,PATH", NULL), 0, "%s", r->out);
		if (open_it)
			cr_expect(strstr(r->out, row), "-i left out a named entry:\n%s", r->out);
		else
			cr_expect_null(strstr(r->out, row), "-i kept PATH ?:\n%s", r->out);
		cr_assert_eq(locks_args(r, "--noinaccessible", "--json", NULL), 0, "%s", r->out);
		cr_expect(open_it ? strstr(r->out, "\"slot\": ") != NULL
				  : strstr(r->out, "\"grants\": []") != NULL,
			  "--json -i, file %s:\n%s", open_it ? "open" : "not open", r->out);
		cr_assert_eq(holder_finish(&h), 0);
	}
	holder_opens = false;
	free(r);
}

/*
 * A static program started two levels down a `run --stats` job (a shell
 * that starts a shell that starts it, and once more by the first shell
 * through PATH) is counted and named in the job summary: the library
 * writes its report at the exec.  Control: the same job with a dynamic
 * program in its place says 0.  The static program is built here with
 * cc -static (skipped where the C library has no static archive).
 */
Test(cli, run_stats_names_static_descendants)
{
	struct rs_run *r = malloc(sizeof(*r));
	char *base = rs_make_base("/tmp", "rs-cli-static2."), src[PATH_MAX], bin[PATH_MAX];
	char dyn[PATH_MAX], cmd[PATH_MAX * 4], tmpdir[PATH_MAX + 8], path[PATH_MAX + 64];
	const char *env[] = { tmpdir, path, NULL };

	cr_assert(r);
	snprintf(src, sizeof src, "%s/st.c", base);
	snprintf(bin, sizeof bin, "%s/stwriter", base);
	snprintf(dyn, sizeof dyn, "%s/dynwriter", base);
	rs_write_text(src, "#include <stdio.h>\nint main(int c, char **v)\n{\n\tFILE *f = c > 1 ? "
		      "fopen(v[1], \"w\") : NULL;\n\tif (f) {\n\t\tfputs(\"x\\n\", f);\n"
		      "\t\tfclose(f);\n\t}\n\treturn 0;\n}\n");
	{
		char *cc[] = { "/usr/bin/cc", "-static", "-O2", "-o", bin, src, NULL };
		char *cd[] = { "/usr/bin/cc", "-O2", "-o", dyn, src, NULL };

		rs_run(r, cc, NULL, 0, 120);
		if (r->status != 0)
			cr_skip_test("cannot link a static program here: %s", r->out);
		rs_run(r, cd, NULL, 0, 120);
		cr_assert_eq(r->status, 0, "%s", r->out);
	}
	snprintf(tmpdir, sizeof tmpdir, "TMPDIR=%s", base);
	snprintf(path, sizeof path, "PATH=%s:/usr/bin:/bin", base);
	for (int leg = 0; leg < 2; leg++) {
		const char *prog = leg ? "dynwriter" : "stwriter";

		snprintf(cmd, sizeof cmd, "/bin/sh -c '%s/%s %s/o1; echo hi > %s/o2'; %s %s/o3",
			 base, prog, base, base, prog, base);
		char *argv[] = { RS_CLI, "run", "--shm", shm_name, "--stats", "--", "/bin/sh", "-c",
				 cmd, NULL };

		run_cli(r, argv, env);
		cr_log_info("%s:\n%s", prog, r->out);
		cr_assert_eq(r->status, 0, "%s", r->out);
		if (!leg) {
			char want[PATH_MAX + 128];

			snprintf(want, sizeof want, "\n2 program(s) in the job could not be "
				 "instrumented: stwriter (%s, 2 times: statically linked", bin);
			cr_expect(strstr(r->out, want), "no '%s':\n%s", want, r->out);
		} else {
			cr_expect(strstr(r->out, "\n0 program(s) in the job could not be instrumented\n"),
				  "control:\n%s", r->out);
			cr_expect(strstr(r->out, " dynwriter "), "control: no dynwriter row:\n%s",
				  r->out);
		}
	}
	rs_rm_rf(base);
	free(base);
	free(r);
}

/*
 * A strided grant is listed with what it holds: its extent, then
 * "stride S len L" (JSON: "stride" and "len").  Control: the plain
 * grant of the same holder has neither.
 */
Test(cli, locks_strided)
{
	struct holder h;
	struct rs_run *r = malloc(sizeof(*r));

	cr_assert(r);
	holder_strided = true;
	holder_start(&h, 0, 0);
	holder_strided = false;
	locks_args(r, NULL);
	cr_log_info("locks with a strided grant:\n%s", r->out);
	cr_assert_eq(r->status, 0, "%s", r->out);
	cr_expect(strstr(r->out, " 0-65024 stride 1024 len 512 "),
		  "the strided grant is not listed with its stride:\n%s", r->out);
	locks_args(r, "-J", NULL);
	cr_expect(strstr(r->out, "\"start\": 0, \"end\": 65024, \"stride\": 1024, \"len\": 512"),
		  "-J lacks the stride:\n%s", r->out);
	cr_assert_eq(holder_finish(&h), 0);
	holder_start(&h, 0, 0);
	locks_args(r, NULL);
	cr_expect(strstr(r->out, " 0-1048576 ") && !strstr(r->out, "stride"),
		  "control: a plain grant listed otherwise:\n%s", r->out);
	locks_args(r, "-J", NULL);
	cr_expect(!strstr(r->out, "\"stride\""), "control: -J gives a plain grant a stride:\n%s",
		  r->out);
	cr_assert_eq(holder_finish(&h), 0);
	free(r);
}
