/*
 * Criterion suite: the installed tree.  `make install` into a scratch
 * DESTDIR, then from there: `rangeshim check` and `rangeshim run` find the
 * installed library (not the build tree's), both man pages render and
 * lint clean, pkg-config resolves the header's flags and a program
 * compiles with them, bash completion completes, and benchmarks.md's
 * pictures resolve in the installed doc directory.  Then `make uninstall`
 * must leave exactly the files that were there before (a foreign one is
 * planted first, and must survive).  Last, an install with LIBDIR=.../lib64
 * (not PREFIX/lib): the command must find the library there.
 *
 * The leftover check is shown to fail: a file that install did not put
 * down, planted in the doc directory, must be reported after uninstall,
 * and the installed tree must match `make install-manifest` file for file
 * (so a file missing from the list, which uninstall would leave behind,
 * fails the test too).
 */
#include <dirent.h>
#include <ftw.h>

#include "common.h"

#define PREFIX "/usr/local"

static char dest[256];

/* ---- the tree's files ---- */

#define MAX_FILES 256
struct files {
	int n;
	char path[MAX_FILES][PATH_MAX];   /* relative to dest, with a leading / */
};

static struct files *walk_into;

static int walk_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)ftw;
	if (flag != FTW_F && flag != FTW_SL)
		return 0;
	cr_assert_lt(walk_into->n, MAX_FILES);
	snprintf(walk_into->path[walk_into->n++], PATH_MAX, "%s", p + strlen(dest));
	return 0;
}

static int cmp_path(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* Every file and symlink under dest, sorted. */
static void list_files(struct files *f)
{
	f->n = 0;
	walk_into = f;
	nftw(dest, walk_one, 16, FTW_PHYS);
	qsort(f->path, (size_t)f->n, PATH_MAX, cmp_path);
}

static bool has(const struct files *f, const char *p)
{
	for (int i = 0; i < f->n; i++)
		if (!strcmp(f->path[i], p))
			return true;
	return false;
}

/* Files in after but not in before, one a line, into out ("" if none). */
static void extra(const struct files *after, const struct files *before, char *out, size_t len)
{
	size_t o = 0;

	out[0] = '\0';
	for (int i = 0; i < after->n && o < len; i++)
		if (!has(before, after->path[i]))
			o += (size_t)snprintf(out + o, len - o, "%s\n", after->path[i]);
}

/* ---- running things ---- */

/* make TARGET with DESTDIR=dest PREFIX=/usr/local, or with these two
 * settings instead (a = "PREFIX=...", b = "LIBDIR=...", no DESTDIR). */
static void make_with(struct rs_run *r, const char *target, const char *a, const char *b)
{
	char d[PATH_MAX + 16];
	char *argv[] = { "/usr/bin/env", "-u", "MAKEFLAGS", "-u", "MFLAGS", "-u", "MAKELEVEL",
			 "make", "-s", "--no-print-directory", "-C", RS_SRC_DIR,
			 "BUILD=" RS_BUILD_DIR, "SAN=" RS_SAN, a ? (char *)a : "PREFIX=" PREFIX,
			 b ? (char *)b : d, (char *)target, NULL };

	snprintf(d, sizeof(d), "DESTDIR=%s", dest);
	rs_run(r, argv, NULL, 0, 300);
}

static void make_target(struct rs_run *r, const char *target)
{
	make_with(r, target, NULL, NULL);
}

static char scratch[300];

/* Trees of runs that were killed before teardown: their pid is gone. */
static void sweep_stale(void)
{
	DIR *d = opendir("/tmp");
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		char *end, p[300];
		long pid;

		if (strncmp(e->d_name, "rs-install.", 11))
			continue;
		pid = strtol(e->d_name + 11, &end, 10);
		if (end == e->d_name + 11 || (*end && strcmp(end, ".scratch")) || pid <= 0 ||
		    pid == getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		snprintf(p, sizeof(p), "/tmp/%s", e->d_name);
		rs_rm_rf(p);
	}
	closedir(d);
}

static void setup(void)
{
	sweep_stale();
	snprintf(dest, sizeof(dest), "/tmp/rs-install.%d", (int)getpid());
	snprintf(scratch, sizeof(scratch), "%s.scratch", dest);
	rs_rm_rf(dest);
	rs_rm_rf(scratch);
	cr_assert_eq(mkdir(dest, 0755), 0, "%s: %s", dest, strerror(errno));
	cr_assert_eq(mkdir(scratch, 0755), 0, "%s: %s", scratch, strerror(errno));
}

static void teardown(void)
{
	rs_rm_rf(dest);
	rs_rm_rf(scratch);
}

TestSuite(install, .init = setup, .fini = teardown, .timeout = 400);

static void write_text(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	cr_assert_geq(fd, 0, "create %s: %s", path, strerror(errno));
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

static bool have(const char *prog)
{
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "/usr/bin/%s", prog);
	return access(p, X_OK) == 0;
}

Test(install, tree_works_and_uninstalls_clean, .timeout = 400)
{
	static struct files before, after, gone;
	static struct rs_run r;
	char bin[PATH_MAX], lib[PATH_MAX], p[PATH_MAX * 2], cmd[PATH_MAX * 4], diff[8192];
	char *base = scratch;
	char *manifest, *line;
	const char *s;

	/* A file of someone else's in a shared directory: must survive. */
	snprintf(cmd, sizeof(cmd), "mkdir -p %s" PREFIX "/bin && echo other > %s" PREFIX "/bin/other-tool",
		 dest, dest);
	cr_assert_eq(system(cmd), 0);
	list_files(&before);

	make_target(&r, "install");
	cr_assert_eq(r.status, 0, "make install failed:\n%s", r.out);
	list_files(&after);

	/* The staged tree is the manifest, file for file. */
	make_target(&r, "install-manifest");
	cr_assert_eq(r.status, 0, "%s", r.out);
	manifest = strdup(r.out);
	int nman = 0;
	for (line = strtok(manifest, "\n"); line; line = strtok(NULL, "\n"), nman++)
		cr_assert(has(&after, line), "%s is in the manifest but was not installed", line);
	free(manifest);
	cr_assert_eq(after.n - before.n, nman, "install put down %d files, the manifest lists %d",
		     after.n - before.n, nman);
	cr_assert_geq(nman, 12, "too few files installed: %d", nman);

	snprintf(bin, sizeof(bin), "%s" PREFIX "/bin/rangeshim", dest);
	snprintf(lib, sizeof(lib), "%s" PREFIX "/lib/librangeshim.so", dest);

	/* check and run from the installed tree use the installed library. */
	{
		char *argv[] = { bin, "check", "--seconds", "1", base, NULL };
		char shm[64], shm_file[96];
		const char *env[] = { shm, NULL };

		snprintf(shm, sizeof(shm), "RANGESHIM_SHM=/rangeshim-install-test.%d", (int)getpid());
		snprintf(shm_file, sizeof(shm_file), "/dev/shm/rangeshim-install-test.%d", (int)getpid());
		unsetenv("RANGESHIM_LIB");
		rs_run(&r, argv, env, 0, 60);
		unlink(shm_file);
		cr_assert_eq(r.status, 0, "installed check failed:\n%s", r.out);
		snprintf(p, sizeof(p), "library: %s\n", lib);
		cr_assert(strstr(r.out, p), "check did not use %s:\n%s", lib, r.out);
		s = strstr(r.out, "with rangeshim:    ");
		cr_assert(s && !strncmp(s + 19, "0 of ", 5), "%s", r.out);
	}
	{
		char *argv[] = { bin, "run", "--", "/bin/sh", "-c", "echo \"preload=$LD_PRELOAD\"", NULL };

		rs_run(&r, argv, NULL, 0, 30);
		cr_assert_eq(r.status, 0, "%s", r.out);
		snprintf(p, sizeof(p), "preload=%s\n", lib);
		cr_assert(strstr(r.out, p), "run did not preload %s:\n%s", lib, r.out);
	}

	/* Both man pages: man finds and renders them; groff lints them. */
	for (int sec = 1; sec <= 7; sec += 6) {
		snprintf(p, sizeof(p), "%s" PREFIX "/share/man/man%d/rangeshim.%d", dest, sec, sec);
		cr_assert_eq(access(p, R_OK), 0, "%s not installed", p);
		if (have("man")) {
			snprintf(cmd, sizeof(cmd), "MANPATH=%s" PREFIX "/share/man MANPAGER=cat MANWIDTH=80 "
				 "man %d rangeshim 2>&1", dest, sec);
			char *argv[] = { "/bin/sh", "-c", cmd, NULL };
			rs_run(&r, argv, NULL, 0, 30);
			cr_assert_eq(r.status, 0, "man %d rangeshim: %s", sec, r.out);
			snprintf(p, sizeof(p), "RANGESHIM(%d)", sec);
			cr_assert(strstr(r.out, p) && strstr(r.out, "NAME"), "man %d: %s", sec, r.out);
			cr_assert(strstr(r.out, sec == 1 ? "rangeshim check" : "RANGESHIM_SCOPE"),
				  "man %d lacks its content: %s", sec, r.out);
		} else {
			cr_log_warn("man(1) is not installed; pages linted with groff only");
		}
		cr_assert(have("groff"), "groff is needed to lint the man pages (tests/deps.sh)");
		snprintf(cmd, sizeof(cmd), "groff -man -ww -z %s" PREFIX "/share/man/man%d/rangeshim.%d 2>&1",
			 dest, sec, sec);
		char *lint[] = { "/bin/sh", "-c", cmd, NULL };
		rs_run(&r, lint, NULL, 0, 30);
		cr_assert(r.status == 0 && !r.out[0], "groff warns on rangeshim.%d:\n%s", sec, r.out);
	}

	/* pkg-config: the header's flags, and a program that compiles with them. */
	cr_assert(have("pkg-config"), "pkg-config is needed (tests/deps.sh)");
	snprintf(p, sizeof(p), "%s/use.c", base);
	write_text(p, "#include <rangeshim/rangelock.h>\n"
		      "int main(void) { struct rs_rl_node n; (void)n; return RS_RL_READ == 1 ? 0 : 1; }\n");
	snprintf(cmd, sizeof(cmd), "PKG_CONFIG_PATH=%s" PREFIX "/lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=%s "
		 "pkg-config --cflags rangeshim", dest, dest);
	{
		char *argv[] = { "/bin/sh", "-c", cmd, NULL };

		rs_run(&r, argv, NULL, 0, 30);
		cr_assert_eq(r.status, 0, "pkg-config: %s", r.out);
		snprintf(p, sizeof(p), "-I%s" PREFIX "/include", dest);
		cr_assert(strstr(r.out, p), "pkg-config --cflags: %s", r.out);
	}
	snprintf(cmd + strlen(cmd), sizeof(cmd) - strlen(cmd),
		 " | xargs -I{} sh -c 'cc -std=gnu11 -Wall -Werror {} -fsyntax-only %s/use.c'", base);
	{
		char *argv[] = { "/bin/sh", "-c", cmd, NULL };

		rs_run(&r, argv, NULL, 0, 60);
		cr_assert_eq(r.status, 0, "compiling against the installed header: %s", r.out);
	}

	/* Bash completion completes subcommands and check's options. */
	snprintf(cmd, sizeof(cmd), "source %s" PREFIX "/share/bash-completion/completions/rangeshim; "
		 "COMP_WORDS=(rangeshim ch); COMP_CWORD=1; _rangeshim; echo \"1:${COMPREPLY[*]}\"; "
		 "COMP_WORDS=(rangeshim check --se); COMP_CWORD=2; _rangeshim; echo \"2:${COMPREPLY[*]}\"",
		 dest);
	{
		char *argv[] = { "/bin/bash", "--norc", "-c", cmd, NULL };

		rs_run(&r, argv, NULL, 0, 30);
		cr_assert(strstr(r.out, "1:check\n") && strstr(r.out, "2:--seconds\n"),
			  "completion: %s", r.out);
	}

	/* benchmarks.md's pictures resolve in the installed doc directory. */
	snprintf(p, sizeof(p), "%s" PREFIX "/share/doc/rangeshim/benchmarks.md", dest);
	{
		char *md = rs_read_file(p, NULL);
		int pics = 0;

		cr_assert_not_null(md, "%s not installed", p);
		for (const char *q = md; (q = strstr(q, "](img/")); q++) {
			char img[PATH_MAX * 2];
			size_t l = strcspn(q + 2, ")");

			snprintf(img, sizeof(img), "%s" PREFIX "/share/doc/rangeshim/%.*s", dest,
				 (int)l, q + 2);
			cr_assert_eq(access(img, R_OK), 0, "benchmarks.md links %s, not installed", img);
			pics++;
		}
		free(md);
		cr_assert_gt(pics, 0, "benchmarks.md links no picture");
	}

	/* Uninstall: exactly the files of before are left. */
	make_target(&r, "uninstall");
	cr_assert_eq(r.status, 0, "make uninstall failed:\n%s", r.out);
	list_files(&gone);
	extra(&gone, &before, diff, sizeof(diff));
	cr_assert_str_empty(diff, "make uninstall left behind:\n%s", diff);
	cr_assert(has(&gone, "/usr/local/bin/other-tool"), "uninstall removed a file not its own");
	snprintf(p, sizeof(p), "%s" PREFIX "/share/doc/rangeshim", dest);
	cr_assert_neq(access(p, F_OK), 0, "uninstall left the doc directory");
	snprintf(p, sizeof(p), "%s" PREFIX "/include/rangeshim", dest);
	cr_assert_neq(access(p, F_OK), 0, "uninstall left the include directory");

	/* Control: a file uninstall does not know must be found left behind. */
	make_target(&r, "install");
	cr_assert_eq(r.status, 0, "%s", r.out);
	snprintf(p, sizeof(p), "%s" PREFIX "/share/doc/rangeshim/img/planted.png", dest);
	write_text(p, "x");
	make_target(&r, "uninstall");
	cr_assert_eq(r.status, 0, "%s", r.out);
	cr_assert(strstr(r.out, "holds files that install did not put there"), "%s", r.out);
	list_files(&gone);
	extra(&gone, &before, diff, sizeof(diff));
	cr_assert_str_eq(diff, "/usr/local/share/doc/rangeshim/img/planted.png\n",
			 "the leftover check missed the planted file: '%s'", diff);

	/* A LIBDIR that is not PREFIX/lib (lib64): the installed command
	 * finds the library through the LIBDIR compiled into it. */
	{
		char pre[PATH_MAX], libdir[PATH_MAX], exe[PATH_MAX], want[PATH_MAX];

		snprintf(pre, sizeof(pre), "PREFIX=%s/p", scratch);
		snprintf(libdir, sizeof(libdir), "LIBDIR=%s/p/lib64", scratch);
		make_with(&r, "install", pre, libdir);
		cr_assert_eq(r.status, 0, "%s", r.out);
		snprintf(exe, sizeof(exe), "%s/p/bin/rangeshim", scratch);
		char *argv[] = { exe, "run", "--", "/bin/sh", "-c", "echo \"preload=$LD_PRELOAD\"", NULL };
		rs_run(&r, argv, NULL, 0, 30);
		snprintf(want, sizeof(want), "preload=%s/p/lib64/librangeshim.so\n", scratch);
		cr_assert(strstr(r.out, want), "LIBDIR not found by the command: %s", r.out);
		make_with(&r, "uninstall", pre, libdir);
		cr_assert_eq(r.status, 0, "%s", r.out);
		snprintf(cmd, sizeof(cmd), "test -z \"$(find %s/p ! -type d)\"", scratch);
		cr_assert_eq(system(cmd), 0, "uninstall with LIBDIR left files in %s/p", scratch);
	}
}
