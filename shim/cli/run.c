/*
 * rangeshim run: set the environment, then exec CMD.
 *
 * Before the exec it looks at what will run: the loader never preloads
 * into a static binary (no PT_INTERP) and ignores LD_PRELOAD paths in a
 * setuid/setgid program (secure execution), so such a CMD, or a script
 * whose interpreter is one, runs uncoordinated.  One line says so; CMD
 * still runs, as asked.
 *
 * With --stats (no path) it stays as CMD's parent: the processes write
 * JSON reports into a private directory, and after CMD ends one job
 * summary ends with "N calls coordinated; not coordinated: ..." and the
 * programs that could not be instrumented: CMD itself (its report is
 * written here) and any static program the job started (the library
 * writes theirs at the exec: shim/preload/coverage.c).
 */
#include <signal.h>
#include <sys/wait.h>

#include "elfinterp.h"
#include "preload.h"

/* Where execvp would find cmd (malloc'd), or NULL. */
static char *resolve(const char *cmd)
{
	const char *path = getenv("PATH");

	if (strchr(cmd, '/'))
		return strdup(cmd);
	if (!path)
		path = "/bin:/usr/bin";
	for (const char *p = path;; p += strcspn(p, ":") + 1) {
		size_t len = strcspn(p, ":");
		char *full;

		if (asprintf(&full, "%.*s%s%s", (int)len, p, len ? "/" : "", cmd) < 0)
			return NULL;
		if (access(full, X_OK) == 0)
			return full;
		free(full);
		if (!p[len])
			return NULL;
	}
}

/*
 * Why the shim cannot apply to the program at path, or false if it can (or
 * we cannot tell).  depth bounds the script-interpreter chain.
 */
static bool not_coverable(const char *path, char *why, size_t len, int depth)
{
	char head[256], *interp, *end;
	struct stat st;
	ssize_t n;
	int fd, elf;

	if (stat(path, &st) < 0 || !S_ISREG(st.st_mode))
		return false;
	/* Secure execution: the kernel sets AT_SECURE when the effective ids
	 * change, and the loader then ignores preload paths with a '/'. */
	if ((st.st_mode & S_ISUID) && st.st_uid != getuid())
		return snprintf(why, len, "setuid (owner uid %u): the loader ignores LD_PRELOAD "
				"in it", (unsigned)st.st_uid), true;
	if ((st.st_mode & S_ISGID) && st.st_gid != getgid() && st.st_gid != getegid())
		return snprintf(why, len, "setgid (group %u): the loader ignores LD_PRELOAD in it",
				(unsigned)st.st_gid), true;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return false;
	elf = rs_elf_has_interp(fd);
	n = elf < 0 ? pread(fd, head, sizeof(head) - 1, 0) : 0;
	close(fd);
	if (elf == 0)
		return snprintf(why, len, "statically linked (no ELF interpreter): no library "
				"can be preloaded into it"), true;
	if (elf == 1 || n < 3 || head[0] != '#' || head[1] != '!' || depth > 3)
		return false;
	/* "#!INTERP [ARG]": a script runs under its interpreter. */
	head[n] = '\0';
	interp = head + 2 + strspn(head + 2, " \t");
	end = interp + strcspn(interp, " \t\n");
	if (end == interp)
		return false;
	{
		char *arg = end + strspn(end, " \t"), inner[200], *target;
		bool bad;

		arg[strcspn(arg, " \t\n")] = '\0';
		*end = '\0';
		/* #!/usr/bin/env PROG: PROG from PATH is what runs. */
		if (!strcmp(strrchr(interp, '/') ? strrchr(interp, '/') + 1 : interp, "env") &&
		    *arg && *arg != '-')
			target = resolve(arg);
		else
			target = strdup(interp);
		if (!target)
			return false;
		bad = not_coverable(target, inner, sizeof(inner), depth + 1);
		if (bad)
			snprintf(why, len, "a script run by %s, which is %s", target, inner);
		free(target);
		return bad;
	}
}

/* What cannot be instrumented: the program's path and why. */
struct uncovered {
	char *path, why[512];
};

/* One line if cmd cannot be instrumented; then u->path (malloc'd) and
 * u->why name it for the job summary. */
static void warn_uncoverable(const char *cmd, struct uncovered *u)
{
	char *path = resolve(cmd);

	u->path = NULL;
	if (path && not_coverable(path, u->why, sizeof(u->why), 0)) {
		fprintf(stderr, "rangeshim: %s is %s; the shim cannot apply to it, and its I/O "
			"is not coordinated\n", path, u->why);
		u->path = path;
		return;
	}
	free(path);
}

/* The report the library would write for a static program it starts
 * (shim/preload/coverage.c, rs_cov_exec): the one we start gets it from us. */
static void write_uncovered(const char *dir, pid_t pid, const struct uncovered *u, char **argv)
{
	char *fn;
	FILE *f;

	if (asprintf(&fn, "%s/%d.json", dir, (int)pid) < 0)
		return;
	f = fopen(fn, "we");
	free(fn);
	if (!f)
		return;
	fprintf(f, "{\"pid\": %d, \"ppid\": %d, \"uid\": %u, \"program\": ", (int)pid,
		(int)getpid(), (unsigned)getuid());
	json_fstring(f, strrchr(u->path, '/') ? strrchr(u->path, '/') + 1 : u->path);
	fputs(", \"cmdline\": \"", f);
	for (int i = 0; argv[i]; i++) {
		char *q;
		size_t len;

		/* Each word escaped alone, joined by spaces, inside one string. */
		FILE *m = open_memstream(&q, &len);

		if (!m)
			break;
		json_fstring(m, argv[i]);
		fclose(m);
		fprintf(f, "%s%.*s", i ? " " : "", len >= 2 ? (int)(len - 2) : 0, q + 1);
		free(q);
	}
	fputs("\", \"exe_path\": ", f);
	json_fstring(f, u->path);
	fputs(", \"uninstrumented\": ", f);
	json_fstring(f, u->why);
	fputs("}\n", f);
	fclose(f);
}

/* Exit status as a shell reports it. */
static int exit_code(int st)
{
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/*
 * --stats: run CMD as our child with RANGESHIM_STATS=DIR/%p.json, then
 * print the job summary of DIR on stderr and remove it.  Ctrl-C reaches
 * CMD through the process group; we ignore it meanwhile, as time(1) does,
 * so that the summary of an interrupted job is still printed.
 */
static int run_with_summary(char **argv, const struct uncovered *uncovered)
{
	const char *tmp = getenv("TMPDIR");
	char dir[PATH_MAX], var[PATH_MAX + 16];
	struct sigaction ign = { .sa_handler = SIG_IGN }, old_int, old_quit;
	pid_t pid;
	int st, rc;

	snprintf(dir, sizeof(dir), "%s/rangeshim-run.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		fprintf(stderr, "rangeshim: --stats: cannot make a directory for the reports "
			"(%s): %s\n", dir, strerror(errno));
		return EXIT_USAGE;
	}
	snprintf(var, sizeof(var), "%s/%%p.json", dir);
	setenv("RANGESHIM_STATS", var, 1);
	sigaction(SIGINT, &ign, &old_int);
	sigaction(SIGQUIT, &ign, &old_quit);
	pid = fork();
	if (pid == 0) {
		sigaction(SIGINT, &old_int, NULL);
		sigaction(SIGQUIT, &old_quit, NULL);
		execvp(argv[0], argv);
		rc = errno;
		fprintf(stderr, "rangeshim: %s: %s\n", argv[0], strerror(rc));
		_exit(rc == ENOENT ? EXIT_ENOENT : EXIT_CANNOT_INVOKE);
	}
	if (pid < 0) {
		perror("rangeshim: fork");
		rmdir(dir);
		return EXIT_CANNOT_INVOKE;
	}
	if (uncovered->path)
		write_uncovered(dir, pid, uncovered, argv);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGQUIT, &old_quit, NULL);
	rc = exit_code(st);
	{
		char *paths[] = { dir };

		fflush(stderr);
		stats_summary(stderr, paths, 1, false);
	}
	/* Our directory, our files: remove the reports, then it. */
	{
		DIR *d = opendir(dir);
		struct dirent *e;

		while (d && (e = readdir(d)))
			if (e->d_name[0] != '.')
				unlinkat(dirfd(d), e->d_name, 0);
		if (d)
			closedir(d);
		rmdir(dir);
	}
	return rc;
}

int cmd_run(const struct command *cmd, int argc, char **argv)
{
	struct settings s = { 0 };
	int rc = parse_settings(cmd->name, argc, argv, &s);
	char *preload;
	bool summary;

	if (rc >= 0)
		return rc;
	if (optind >= argc)
		return usage_error("%s", "run: missing command");
	if ((rc = check_settings(&s)) >= 0)
		return rc;

	preload = build_preload(&s);
	if (!preload)
		return EXIT_USAGE;
	/* Our environment becomes CMD's: setenv here, then exec. */
	if (setenv("LD_PRELOAD", preload, 1) != 0) {
		perror("rangeshim: setenv");
		return EXIT_USAGE;
	}
	summary = s.value[SET_STATS] && !strcmp(s.value[SET_STATS], "1");
	for (int i = 0; i < SET_COUNT; i++)
		if (s.value[i] && !(i == SET_STATS && summary) &&
		    setenv(setting_names[i].var, s.value[i], 1) != 0) {
			perror("rangeshim: setenv");
			return EXIT_USAGE;
		}
	{
		struct uncovered u;

		warn_uncoverable(argv[optind], &u);
		if (summary) {
			rc = run_with_summary(argv + optind, &u);
			free(u.path);
			return rc;
		}
		free(u.path);
	}

	execvp(argv[optind], argv + optind);
	rc = errno;
	fprintf(stderr, "rangeshim: %s: %s\n", argv[optind], strerror(rc));
	return rc == ENOENT ? EXIT_ENOENT : EXIT_CANNOT_INVOKE;
}
