/*
 * rangeshim: the command-line front end.
 *
 *   rangeshim run [options] [--] CMD [ARGS...]   run CMD under the shim
 *   rangeshim env [options]                      print what `run` would set
 *   rangeshim locks | clean                      node lock table (not yet)
 *
 * The command only prepares an environment and execs; it never loads the
 * library itself, so nothing here runs inside the application.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef RANGESHIM_VERSION
#define RANGESHIM_VERSION "0.1.0"
#endif

#define LIB_NAME "librangeshim.so"

/* Exit statuses follow env(1) and timeout(1). */
enum {
	EXIT_USAGE = 2,        /* bad usage or no library to preload */
	EXIT_CANNOT_INVOKE = 126,
	EXIT_ENOENT = 127,
};

/* Variables `run` and `env` may set, in the order `env` prints them. */
enum setting {
	SET_SCOPE,
	SET_LOCK,
	SET_PATHS,
	SET_STATS,
	SET_LOG,
	SET_SHM,
	SET_COUNT
};

static const struct {
	const char *opt, *var;
} setting_names[SET_COUNT] = {
	[SET_SCOPE] = { "scope", "RANGESHIM_SCOPE" },
	[SET_LOCK] = { "lock", "RANGESHIM_LOCK" },
	[SET_PATHS] = { "paths", "RANGESHIM_PATHS" },
	[SET_STATS] = { "stats", "RANGESHIM_STATS" },
	[SET_LOG] = { "log", "RANGESHIM_LOG" },
	[SET_SHM] = { "shm", "RANGESHIM_SHM" },
};

/*
 * getopt_long values for the settings: clear of every short option and of
 * 0, which getopt also uses for "unknown long option" in optopt.
 */
#define OPT_SET(i) (0x100 + (i))
#define OPT_LIB OPT_SET(SET_COUNT)

/* What the options of `run` and `env` asked for; NULL means "leave alone". */
struct settings {
	const char *value[SET_COUNT];
	const char *lib;       /* --lib, before canonicalisation */
};

struct command {
	const char *name;
	int (*fn)(const struct command *cmd, int argc, char **argv);
	const char *help;
};

static int cmd_run(const struct command *cmd, int argc, char **argv);
static int cmd_env(const struct command *cmd, int argc, char **argv);
static int cmd_node_table(const struct command *cmd, int argc, char **argv);

static const struct command commands[] = {
	{ "run", cmd_run, "run CMD with the shim preloaded" },
	{ "env", cmd_env, "print the variables `run` would set, for eval" },
	{ "locks", cmd_node_table, "list the node-wide lock table" },
	{ "clean", cmd_node_table, "remove a stale node lock table" },
};

static void usage(FILE *out)
{
	fputs("usage: rangeshim COMMAND [options] [--] [CMD [ARGS...]]\n"
	      "\n"
	      "Commands:\n", out);
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		fprintf(out, "  %-8s%s\n", commands[i].name, commands[i].help);
	fputs("  help    show this text (also -h, --help)\n"
	      "\n"
	      "Options of run and env (each sets a variable for CMD):\n"
	      "  --scope off|process|node   RANGESHIM_SCOPE\n"
	      "  --lock range|mutex         RANGESHIM_LOCK\n"
	      "  --paths LIST               RANGESHIM_PATHS (colon-separated prefixes or globs)\n"
	      "  --stats                    RANGESHIM_STATS=1 (summary on stderr at exit)\n"
	      "  --stats=PATH               RANGESHIM_STATS=PATH (JSON; %p is the pid)\n"
	      "  --log LEVEL                RANGESHIM_LOG\n"
	      "  --shm NAME                 RANGESHIM_SHM (node table segment, e.g. /rangeshim-1000)\n"
	      "  --lib PATH                 library to preload, put first in LD_PRELOAD\n"
	      "\n"
	      "The library is $RANGESHIM_LIB if set, else " LIB_NAME " next to this\n"
	      "program, in ../lib or in ../lib/rangeshim.\n"
	      "\n"
	      "Examples:\n"
	      "  rangeshim run -- ./my_app\n"
	      "  rangeshim run --stats -- dd if=/dev/zero of=out bs=1M count=10\n"
	      "  eval \"$(rangeshim env --scope process)\"\n", out);
}

static int usage_error(const char *fmt, const char *arg)
{
	fputs("rangeshim: ", stderr);
	fprintf(stderr, fmt, arg);
	fputs("\ntry 'rangeshim --help'\n", stderr);
	return EXIT_USAGE;
}

static bool is_one_of(const char *s, const char *const *allowed)
{
	for (; *allowed; allowed++)
		if (strcmp(s, *allowed) == 0)
			return true;
	return false;
}

/*
 * Parse the options shared by `run` and `env`.  Returns -1 when the caller
 * should go on, otherwise the exit status.  Parsing stops at the first
 * non-option ("+"), so `run` passes CMD's own options through untouched.
 */
static int parse_settings(int argc, char **argv, struct settings *s)
{
	static const char *const scopes[] = { "off", "process", "node", NULL };
	static const char *const locks[] = { "range", "mutex", NULL };
	static const struct option longopts[] = {
		{ "scope", required_argument, NULL, OPT_SET(SET_SCOPE) },
		{ "lock", required_argument, NULL, OPT_SET(SET_LOCK) },
		{ "paths", required_argument, NULL, OPT_SET(SET_PATHS) },
		/* Optional, so `--stats CMD` still runs CMD; a path needs '='. */
		{ "stats", optional_argument, NULL, OPT_SET(SET_STATS) },
		{ "log", required_argument, NULL, OPT_SET(SET_LOG) },
		{ "shm", required_argument, NULL, OPT_SET(SET_SHM) },
		{ "lib", required_argument, NULL, OPT_LIB },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	int c;

	/* Our own messages, so every usage error has the same shape. */
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'h':
			usage(stdout);
			return 0;
		case ':':
			return usage_error("option '%s' needs a value",
					   argv[optind - 1]);
		case '?':
			/* optopt: 0 for an unknown long option, 'h' for
			 * --help=X, else the unknown short option. */
			if (optopt == 'h')
				return usage_error("%s", "'--help' takes no value");
			if (optopt) {
				char opt[3] = { '-', (char)optopt, 0 };
				return usage_error("unknown option '%s'", opt);
			}
			return usage_error("unknown option '%s'",
					   argv[optind - 1]);
		case OPT_LIB:
			if (!*optarg)
				return usage_error("%s", "--lib needs a path");
			s->lib = optarg;
			break;
		case OPT_SET(SET_STATS):
			if (optarg && !*optarg)
				return usage_error("%s", "--stats= needs a path");
			s->value[SET_STATS] = optarg ? optarg : "1";
			break;
		default: {
			int i = c - OPT_SET(0);

			/* An empty value would mean "default" to some readers
			 * and "nothing" to others; refuse it here. */
			if (!*optarg)
				return usage_error("option '--%s' needs a non-empty value",
						   setting_names[i].opt);
			if (i == SET_SCOPE && !is_one_of(optarg, scopes))
				return usage_error("bad --scope '%s' (use off, process or node)",
						   optarg);
			if (i == SET_LOCK && !is_one_of(optarg, locks))
				return usage_error("bad --lock '%s' (use range or mutex)",
						   optarg);
			s->value[i] = optarg;
			break;
		}
		}
	}
	return -1;
}

static bool is_regular_file(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/*
 * Find the library and return its canonical absolute path (malloc'd), or
 * NULL after printing an error.  It must be absolute: CMD may chdir before
 * it execs something else, and the loader resolves LD_PRELOAD each time.
 */
static char *find_library(const char *explicit_lib)
{
	static const char *const rel[] = {
		"/" LIB_NAME,                    /* build tree: build/rangeshim */
		"/../lib/" LIB_NAME,             /* make install PREFIX=... */
		"/../lib/rangeshim/" LIB_NAME,   /* distribution packages */
	};
	const char *given = explicit_lib ? explicit_lib : getenv("RANGESHIM_LIB");
	const size_t nrel = sizeof rel / sizeof rel[0];
	char exe[PATH_MAX], tried[sizeof rel / sizeof rel[0]][PATH_MAX];
	char *slash, *lib;
	ssize_t n;

	if (given && *given) {
		lib = realpath(given, NULL);
		if (!lib || !is_regular_file(lib)) {
			fprintf(stderr, "rangeshim: library %s (from %s): %s\n",
				given, explicit_lib ? "--lib" : "RANGESHIM_LIB",
				lib ? "not a regular file" : strerror(errno));
			free(lib);
			return NULL;
		}
		return lib;
	}

	n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n < 0) {
		fprintf(stderr, "rangeshim: cannot locate %s: /proc/self/exe: %s; "
			"set RANGESHIM_LIB\n", LIB_NAME, strerror(errno));
		return NULL;
	}
	exe[n] = '\0';
	slash = strrchr(exe, '/');
	if (slash)
		*slash = '\0';

	for (size_t i = 0; i < nrel; i++) {
		snprintf(tried[i], sizeof tried[i], "%s%s", exe, rel[i]);
		if (is_regular_file(tried[i]) && (lib = realpath(tried[i], NULL)))
			return lib;
	}
	fprintf(stderr, "rangeshim: %s not found; tried", LIB_NAME);
	for (size_t i = 0; i < nrel; i++)
		fprintf(stderr, " %s%s", tried[i], i + 1 < nrel ? "," : ";");
	fputs(" set RANGESHIM_LIB or use --lib\n", stderr);
	return NULL;
}

/*
 * The loader splits LD_PRELOAD at ':' and blanks.  Is lib one of the
 * entries?  Compare canonical paths so `./build/x.so` matches too.
 */
static bool preload_has(const char *preload, const char *lib)
{
	const char *seps = ": \t";
	size_t len;

	for (const char *p = preload; *p; p += len) {
		p += strspn(p, seps);
		len = strcspn(p, seps);
		if (len == 0 || len >= PATH_MAX)
			continue;

		char entry[PATH_MAX], canon[PATH_MAX];

		memcpy(entry, p, len);
		entry[len] = '\0';
		if (strcmp(entry, lib) == 0 ||
		    (strchr(entry, '/') && realpath(entry, canon) &&
		     strcmp(canon, lib) == 0))
			return true;
	}
	return false;
}

/*
 * Work out the full set of assignments: the LD_PRELOAD value (ours first,
 * then what was there) and the settings.  Returns the malloc'd LD_PRELOAD
 * value, or NULL after printing an error.
 */
static char *build_preload(const struct settings *s)
{
	const char *old = getenv("LD_PRELOAD");
	char *lib = find_library(s->lib), *value;

	if (!lib)
		return NULL;
	if (strpbrk(lib, ": \t")) {
		/* The loader would split it into pieces that do not exist. */
		fprintf(stderr, "rangeshim: library path %s contains ':' or a "
			"blank, which LD_PRELOAD cannot express\n", lib);
		free(lib);
		return NULL;
	}
	if (!old || old[strspn(old, ": \t")] == '\0')
		return lib;
	if (preload_has(old, lib)) {
		/* Keep the user's order; loading it twice would not help. */
		free(lib);
		return strdup(old);
	}
	if (asprintf(&value, "%s:%s", lib, old) < 0)
		value = NULL;
	free(lib);
	if (!value)
		perror("rangeshim");
	return value;
}

static int cmd_run(const struct command *cmd, int argc, char **argv)
{
	struct settings s = { 0 };
	int rc = parse_settings(argc, argv, &s);
	char *preload;

	(void)cmd;
	if (rc >= 0)
		return rc;
	if (optind >= argc)
		return usage_error("%s", "run: missing command");

	preload = build_preload(&s);
	if (!preload)
		return EXIT_USAGE;
	/* Our environment becomes CMD's: setenv here, then exec. */
	if (setenv("LD_PRELOAD", preload, 1) != 0) {
		perror("rangeshim: setenv");
		return EXIT_USAGE;
	}
	for (int i = 0; i < SET_COUNT; i++)
		if (s.value[i] && setenv(setting_names[i].var, s.value[i], 1) != 0) {
			perror("rangeshim: setenv");
			return EXIT_USAGE;
		}

	execvp(argv[optind], argv + optind);
	rc = errno;
	fprintf(stderr, "rangeshim: %s: %s\n", argv[optind], strerror(rc));
	return rc == ENOENT ? EXIT_ENOENT : EXIT_CANNOT_INVOKE;
}

/* Print NAME=VALUE for sh, quoting VALUE only when it needs it. */
static void print_assignment(const char *name, const char *value)
{
	static const char safe[] = "abcdefghijklmnopqrstuvwxyz"
				   "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
				   "0123456789_-+=./:,@%";

	printf("%s=", name);
	if (*value && value[strspn(value, safe)] == '\0') {
		fputs(value, stdout);
	} else {
		putchar('\'');
		for (const char *p = value; *p; p++) {
			if (*p == '\'')
				fputs("'\\''", stdout);
			else
				putchar(*p);
		}
		putchar('\'');
	}
	/*
	 * A bare assignment would not reach child processes after eval unless
	 * the variable was already exported (LD_PRELOAD usually is not).
	 * ssh-agent's "X=v; export X" form works in every Bourne shell.
	 */
	printf("; export %s\n", name);
}

static int cmd_env(const struct command *cmd, int argc, char **argv)
{
	struct settings s = { 0 };
	int rc = parse_settings(argc, argv, &s);
	char *preload;

	(void)cmd;
	if (rc >= 0)
		return rc;
	if (optind < argc)
		return usage_error("env: unexpected argument '%s' (did you mean 'run'?)",
				   argv[optind]);

	preload = build_preload(&s);
	if (!preload)
		return EXIT_USAGE;
	print_assignment("LD_PRELOAD", preload);
	for (int i = 0; i < SET_COUNT; i++)
		if (s.value[i])
			print_assignment(setting_names[i].var, s.value[i]);
	free(preload);
	return fflush(stdout) == 0 ? 0 : 1;
}

/* `locks` and `clean` need the shared-memory node table (next milestone). */
static int cmd_node_table(const struct command *cmd, int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "rangeshim: '%s' needs node scope, which this build "
		"does not have yet\n", cmd->name);
	return EXIT_USAGE;
}

int main(int argc, char **argv)
{
	const char *name = argv[1];

	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (!strcmp(name, "--help") || !strcmp(name, "-h") ||
	    !strcmp(name, "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(name, "--version")) {
		puts("rangeshim " RANGESHIM_VERSION);
		return 0;
	}
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (!strcmp(name, commands[i].name))
			return commands[i].fn(&commands[i], argc - 1, argv + 1);

	if (name[0] == '-')
		return usage_error("unknown option '%s' (options go after the command)",
				   name);
	return usage_error("unknown command '%s'", name);
}
