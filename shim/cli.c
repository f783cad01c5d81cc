/*
 * rangeshim: the command-line front end.
 *
 *   rangeshim run [options] [--] CMD [ARGS...]   run CMD under the shim
 *   rangeshim env [options]                      print what `run` would set
 *   rangeshim locks [--shm NAME] [--json]        list the node lock table
 *   rangeshim clean [--shm NAME] [--force]       remove a node table no live process uses
 *
 * The command only prepares an environment and execs; it never loads the
 * library itself, so nothing here runs inside the application.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "rangeshim/rangelock.h"
#include "nodelock.h"
#include "segment.h"

#ifndef RS_VERSION
#define RS_VERSION "0.1.0"
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
static int cmd_locks(const struct command *cmd, int argc, char **argv);
static int cmd_clean(const struct command *cmd, int argc, char **argv);

static const struct command commands[] = {
	{ "run", cmd_run, "run CMD with the shim preloaded" },
	{ "env", cmd_env, "print the variables `run` would set, for eval" },
	{ "locks", cmd_locks, "list the node lock table's grants, like lslocks" },
	{ "clean", cmd_clean, "remove the node lock table if no live process is attached" },
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
	      "Options of locks and clean:\n"
	      "  --shm NAME   node table segment (default: $RANGESHIM_SHM, else /rangeshim-UID;\n"
	      "               the file is /dev/shm/NAME)\n"
	      "  --json       locks: print one JSON object instead of the table\n"
	      "  --force      clean: also remove a table that is locked by something other than\n"
	      "               an attached process (a corrupt or foreign table).  It never removes\n"
	      "               a table while a process attached to it is alive: clean lists those\n"
	      "               processes (pid, command, state) and leaves the table alone\n"
	      "\n"
	      "locks shows each grant's byte range [START-END) (END excluded, EOF: to\n"
	      "infinity), mode (EXSH: exclusive to other processes, SHARED: readers),\n"
	      "state (HELD, or WAIT for a queued request), holder and its process state\n"
	      "(PSTATE: running, sleeping, stopped, zombie, dead...), users (calls in\n"
	      "progress), whether another process wants it, and its age (for WAIT: how\n"
	      "long it has waited).  BLOCKER lists, for a WAIT entry, the pids whose\n"
	      "grants block it, as lslocks does; a line per waiter then says whom it\n"
	      "waits for and in what state that process is (e.g. stopped by Ctrl-Z).\n"
	      "\n"
	      "Examples:\n"
	      "  rangeshim run -- ./my_app\n"
	      "  rangeshim run --stats -- dd if=/dev/zero of=out bs=1M count=10\n"
	      "  eval \"$(rangeshim env --scope process)\"\n"
	      "  rangeshim locks --json | python3 -m json.tool\n", out);
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

/* The getopt errors of every command, in one shape. */
static int getopt_error(int c, char **argv)
{
	if (c == ':')
		return usage_error("option '%s' needs a value", argv[optind - 1]);
	/* optopt: 0 for an unknown long option, 'h' for --help=X, else the
	 * unknown short option. */
	if (optopt == 'h')
		return usage_error("%s", "'--help' takes no value");
	if (optopt) {
		char opt[3] = { '-', (char)optopt, 0 };
		return usage_error("unknown option '%s'", opt);
	}
	return usage_error("unknown option '%s'", argv[optind - 1]);
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
		case '?':
			return getopt_error(c, argv);
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

/*
 * ---- locks and clean: the node lock table ----
 *
 * The segment is untrusted memory (segment.h), and these commands must work
 * whether its processes are alive, dead or wrote garbage into it.  So they
 * never map it and never take its mutex: they pread a private copy (a torn
 * snapshot is fine for a listing, and a file shrunk under us gives a short
 * read, not a SIGBUS), validate that copy with rs_seg_check and then use
 * only the copy.  Liveness comes from the kernel: OFD lock probes through
 * our own open file description, which holds no lock itself.
 */

/* getopt values for the options of locks and clean, clear of OPT_SET(). */
enum { OPT_SHM = 0x200, OPT_JSON, OPT_FORCE };

struct table_opts {
	char path[300];        /* /dev/shm/NAME */
	bool json, force;
};

/* What /proc says about an attached process. */
struct proc_info {
	char comm[64];                /* escaped; "?" if /proc has no word on it */
	const char *state;            /* running, sleeping, stopped, ..., dead */
};

/* A validated private copy of the table, and an fd to probe liveness on. */
struct table {
	struct rs_seg_map map;        /* only fd is used, by rs_seg_alive */
	struct rs_segment *seg;       /* malloc'd copy, never the segment */
	bool alive[RS_NPROC];         /* LIVE slot whose process still holds its byte */
	struct proc_info proc[RS_NPROC];   /* of LIVE slots */
};

#define MAX_BLOCKERS 32

/* One grant, copied out of the table with its holder resolved. */
struct row {
	uint32_t idx, owner, state, mode, users, ticket;
	bool wanted, alive;
	int32_t pid;
	uint64_t dev, ino, start, end, since_ns;
	char *path;                   /* malloc'd, or NULL if not found */
	/* A WAIT entry: the process slots whose HELD grants block it (as
	 * lslocks' BLOCKER), and those queued ahead of it on its range. */
	uint32_t nblockers, nahead;   /* how many; the first MAX_BLOCKERS are kept */
	uint32_t blockers[MAX_BLOCKERS], ahead[MAX_BLOCKERS];
};

/*
 * Options of locks and clean.  -1 when the caller should go on, otherwise
 * the exit status.  The default name is the library's (config.c): a bad
 * RANGESHIM_SHM falls back to it there too, so we show the table the
 * programs really use.
 */
static int parse_table_opts(const struct command *cmd, int argc, char **argv,
			    struct table_opts *o)
{
	static const struct option longopts[] = {
		{ "shm", required_argument, NULL, OPT_SHM },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "force", no_argument, NULL, OPT_FORCE },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	bool is_locks = !strcmp(cmd->name, "locks");
	const char *name = NULL, *env = getenv("RANGESHIM_SHM");
	char dflt[64], msg[96];
	int c;

	memset(o, 0, sizeof(*o));
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case 'h':
			usage(stdout);
			return 0;
		case OPT_SHM:
			name = optarg;
			break;
		case OPT_JSON:
		case OPT_FORCE:
			if (is_locks != (c == OPT_JSON)) {
				snprintf(msg, sizeof(msg), "%s takes no option '%s'",
					 cmd->name, argv[optind - 1]);
				return usage_error("%s", msg);
			}
			o->json |= c == OPT_JSON;
			o->force |= c == OPT_FORCE;
			break;
		default:
			return getopt_error(c, argv);
		}
	}
	if (optind < argc) {
		snprintf(msg, sizeof(msg), "%s: unexpected argument '%%s'", cmd->name);
		return usage_error(msg, argv[optind]);
	}
	snprintf(dflt, sizeof(dflt), "/rangeshim-%u", (unsigned)getuid());
	if (!name && env && *env && rs_seg_path(env, o->path, sizeof(o->path)) == 0)
		name = env;
	else if (!name && env && *env)
		fprintf(stderr, "rangeshim: RANGESHIM_SHM='%s' is not a name like %s; "
			"using the default\n", env, dflt);
	if (!name)
		name = "";	/* the library's default table (segment.c) */
	if (rs_seg_path(name, o->path, sizeof(o->path)) < 0)
		return usage_error("bad --shm '%s' (use a name like /rangeshim-1000)", name);
	return -1;
}

/*
 * Open the segment file read-only: never create it (a listing must not
 * leave a table behind), never follow a symlink, never block on a FIFO.
 * 0 with *fd set, 1 if there is none, -1 after printing an error.
 */
static int open_table(const char *path, int *fd)
{
	*fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (*fd >= 0)
		return 0;
	if (errno == ENOENT)
		return 1;
	if (errno == ELOOP)
		fprintf(stderr, "rangeshim: %s is a symbolic link, not a node lock table\n", path);
	else
		fprintf(stderr, "rangeshim: cannot open %s: %s\n", path, strerror(errno));
	return -1;
}

/* The file checks rs_seg_attach makes: a file the shim refuses is no table. */
static int check_file(const struct stat *st, char *why, size_t whylen)
{
	if (!S_ISREG(st->st_mode))
		snprintf(why, whylen, "not a regular file");
	else if (st->st_uid != geteuid())
		snprintf(why, whylen, "owned by uid %u, not by us (uid %u)",
			 (unsigned)st->st_uid, (unsigned)geteuid());
	else if ((st->st_mode & 07777) != 0600)
		snprintf(why, whylen, "mode %04o, not 0600", (unsigned)(st->st_mode & 07777));
	else if (st->st_size != (off_t)sizeof(struct rs_segment))
		snprintf(why, whylen, "size %lld, not the %zu bytes of this version's layout",
			 (long long)st->st_size, sizeof(struct rs_segment));
	else
		return 0;
	return -1;
}

static ssize_t pread_all(int fd, void *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pread(fd, (char *)buf + done, len - done, (off_t)done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			break;
		done += (size_t)n;
	}
	return (ssize_t)done;
}

/*
 * Copy the table into seg and validate the copy.  A copy taken while
 * processes update the table can be torn (a grant caught between its
 * fields and its state word, a file being initialised), so only a failure
 * that persists over a few reads is reported as corruption.
 */
static int read_table(int fd, struct rs_segment *seg, char *why, size_t whylen)
{
	for (int tries = 0;; tries++) {
		const struct timespec pause = { 0, 10 * 1000 * 1000 };
		struct stat st;
		ssize_t n;

		if (fstat(fd, &st) < 0) {
			snprintf(why, whylen, "fstat: %s", strerror(errno));
			return -1;
		}
		if (check_file(&st, why, whylen) == 0) {
			n = pread_all(fd, seg, sizeof(*seg));
			if (n < 0) {
				snprintf(why, whylen, "read: %s", strerror(errno));
				return -1;
			}
			if ((size_t)n != sizeof(*seg))
				snprintf(why, whylen, "shrank to %zd bytes while being read", n);
			else if (rs_seg_check(seg, why, whylen) == 0)
				return 0;
		}
		if (tries == 4)
			return -1;
		nanosleep(&pause, NULL);
	}
}

static void escape_text(const char *in, char *out, size_t len);

/*
 * The command and state of an attached process, from /proc/PID/stat.  A
 * process whose liveness byte is free is "dead" whatever /proc says: its
 * pid may name some other process by now.  "?" when /proc has no word on
 * a live one (another pid namespace, hidepid).
 */
static void proc_info(struct proc_info *pi, int32_t pid, bool alive)
{
	char comm[64];

	if (!alive) {
		pi->state = "dead";
		snprintf(pi->comm, sizeof(pi->comm), "(dead)");
		return;
	}
	switch (rs_nt_proc_stat(pid, comm, sizeof(comm))) {
	case 0: pi->state = "?"; break;
	case 'R': pi->state = "running"; break;
	case 'S': pi->state = "sleeping"; break;
	case 'D': pi->state = "disk"; break;      /* uninterruptible */
	case 'I': pi->state = "idle"; break;
	case 'T': pi->state = "stopped"; break;
	case 't': pi->state = "traced"; break;    /* stopped by a debugger */
	case 'Z': pi->state = "zombie"; break;
	case 'X': case 'x': pi->state = "dead"; break;
	default: pi->state = "alive"; break;
	}
	escape_text(comm, pi->comm, sizeof(pi->comm));
}

/* Open, copy and validate the table; 1 if there is none, -1 with why. */
static int load_table(const char *path, struct table *t, char *why, size_t whylen)
{
	int rc;

	memset(t, 0, sizeof(*t));
	t->map.fd = -1;
	rc = open_table(path, &t->map.fd);
	if (rc != 0) {
		snprintf(why, whylen, "cannot open");
		return rc;
	}
	t->seg = aligned_alloc(_Alignof(struct rs_segment), sizeof(*t->seg));
	if (!t->seg) {
		snprintf(why, whylen, "%s", strerror(errno));
		return -1;
	}
	if (read_table(t->map.fd, t->seg, why, whylen) < 0)
		return -1;
	for (uint32_t p = 0; p < RS_NPROC; p++) {
		t->alive[p] = atomic_load(&t->seg->procs[p].state) == RS_PROC_LIVE &&
			      rs_seg_alive(&t->map, p);
		proc_info(&t->proc[p], t->seg->procs[p].pid, t->alive[p]);
	}
	return 0;
}

static void free_table(struct table *t)
{
	free(t->seg);
	if (t->map.fd >= 0)
		close(t->map.fd);
}

/* Only a plain file of ours can be something the shim made. */
static bool ours(const struct stat *st)
{
	return S_ISREG(st->st_mode) && st->st_uid == geteuid();
}

/*
 * Is any byte of the file locked by another open file description?  The
 * shim's only byte locks on it are liveness locks, so this says "some
 * process is attached" for any layout, even one we cannot read.
 */
static bool file_locked(int fd)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };

	/* If we cannot tell, say locked: keeping a table is safe, removing
	 * one in use is not. */
	return fcntl(fd, F_OFD_GETLK, &fl) < 0 || fl.l_type != F_UNLCK;
}

static uint64_t realtime_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Length of the valid UTF-8 sequence at p, or 0: JSON text is Unicode,
 * while a path is any bytes. */
static size_t utf8_len(const unsigned char *p)
{
	uint32_t cp, min;
	size_t n;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		n = 2, cp = p[0] & 0x1fu, min = 0x80;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		n = 3, cp = p[0] & 0x0fu, min = 0x800;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		n = 4, cp = p[0] & 0x07u, min = 0x10000;
	else
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)   /* also stops at the terminator */
			return 0;
		cp = cp << 6 | (p[i] & 0x3fu);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

/* Control characters or stray bytes in a path or a command name would
 * garble the terminal or the columns: show them as \xNN. */
static void escape_text(const char *in, char *out, size_t len)
{
	size_t o = 0;

	for (const unsigned char *p = (const unsigned char *)in; *p && o + 5 < len;) {
		size_t n = utf8_len(p);

		if (n == 0 || *p < 0x20 || *p == 0x7f) {
			o += (size_t)snprintf(out + o, len - o, "\\x%02x", *p);
			n = 1;
		} else if (o + n + 1 < len) {
			memcpy(out + o, p, n);
			o += n;
		} else {
			break;
		}
		p += n;
	}
	out[o] = '\0';
}

/* A JSON string, or null; bytes that are not UTF-8 become U+FFFD. */
static void json_string(const char *s)
{
	if (!s) {
		fputs("null", stdout);
		return;
	}
	putchar('"');
	for (const unsigned char *p = (const unsigned char *)s; *p;) {
		size_t n = utf8_len(p);

		if (n == 0) {
			fputs("\\ufffd", stdout);
			n = 1;
		} else if (*p == '"' || *p == '\\') {
			printf("\\%c", *p);
		} else if (*p < 0x20 || *p == 0x7f) {
			printf("\\u%04x", *p);
		} else {
			fwrite(p, 1, n, stdout);
		}
		p += n;
	}
	putchar('"');
}

/* The (dev, ino) of each open fd of a process, to name grants' files. */
struct fd_list {
	bool loaded;
	size_t n;
	struct fd_ent {
		uint64_t dev, ino;
		int fd;
	} *v;
};

static void load_fds(struct fd_list *l, int32_t pid)
{
	char dir[64];
	struct dirent *e;
	DIR *d;
	size_t cap = 0;

	l->loaded = true;
	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	d = opendir(dir);
	if (!d)
		return;   /* gone, or not ours to look at: the path stays unknown */
	while ((e = readdir(d))) {
		struct stat st;
		char *end;
		long fd = strtol(e->d_name, &end, 10);

		/* stat follows the magic link to the open file itself, deleted
		 * or not, so its (dev, ino) is the one the shim recorded. */
		if (*end || end == e->d_name || fstatat(dirfd(d), e->d_name, &st, 0) < 0)
			continue;
		if (l->n == cap) {
			struct fd_ent *v = realloc(l->v, (cap = cap ? 2 * cap : 64) * sizeof(*v));

			if (!v)
				break;
			l->v = v;
		}
		l->v[l->n++] = (struct fd_ent){ st.st_dev, st.st_ino, (int)fd };
	}
	closedir(d);
}

/* The path of (dev, ino) as process slot p has it open, or NULL. */
static char *path_in(const struct table *t, struct fd_list *fds, uint32_t p,
		     uint64_t dev, uint64_t ino)
{
	int32_t pid = t->seg->procs[p].pid;

	if (pid <= 0)
		return NULL;
	if (!fds[p].loaded)
		load_fds(&fds[p], pid);
	for (size_t i = 0; i < fds[p].n; i++) {
		char link[64], target[PATH_MAX];
		ssize_t n;

		if (fds[p].v[i].dev != dev || fds[p].v[i].ino != ino)
			continue;
		snprintf(link, sizeof(link), "/proc/%d/fd/%d", (int)pid, fds[p].v[i].fd);
		n = readlink(link, target, sizeof(target) - 1);
		if (n > 0) {
			target[n] = '\0';
			return strdup(target);
		}
	}
	return NULL;
}

/* Name a grant's file: from its holder's fds first, else any live process's
 * (a holder may keep a cached grant on a file it has just closed). */
static char *find_path(const struct table *t, struct fd_list *fds, const struct row *r)
{
	char *path = r->alive ? path_in(t, fds, r->owner, r->dev, r->ino) : NULL;

	for (uint32_t p = 0; p < RS_NPROC && !path; p++)
		if (t->alive[p] && p != r->owner)
			path = path_in(t, fds, p, r->dev, r->ino);
	return path;
}

static int row_cmp(const void *a, const void *b)
{
	const struct row *x = a, *y = b;

	if (x->dev != y->dev)
		return x->dev < y->dev ? -1 : 1;
	if (x->ino != y->ino)
		return x->ino < y->ino ? -1 : 1;
	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return (int)x->state - (int)y->state;
}

/* Do grants a and b of two processes exclude each other?  The table's
 * own rule (nodelock.c): same file, overlapping, not both SHARED; a
 * malformed range counts as the whole file. */
static bool conflict(const struct row *a, const struct row *b)
{
	bool a_all = a->start >= a->end, b_all = b->start >= b->end;

	if (a->owner == b->owner || a->dev != b->dev || a->ino != b->ino)
		return false;
	if (a->mode == RS_G_SHARED && b->mode == RS_G_SHARED)
		return false;
	return a_all || b_all || (a->start < b->end && b->start < a->end);
}

static void add_slot(uint32_t *v, uint32_t *n, uint32_t slot)
{
	for (uint32_t i = 0; i < *n && i < MAX_BLOCKERS; i++)
		if (v[i] == slot)
			return;
	if (*n < MAX_BLOCKERS)
		v[*n] = slot;
	(*n)++;
}

/*
 * What a WAIT entry waits for: the processes whose HELD grants conflict
 * with it (lslocks' BLOCKER), and those whose conflicting requests were
 * queued before it (FIFO: it goes after them).
 */
static void find_blockers(const struct row *rows, size_t n, struct row *w)
{
	for (size_t i = 0; i < n; i++) {
		const struct row *h = &rows[i];

		if (h == w || !conflict(h, w))
			continue;
		if (h->state == RS_G_HELD)
			add_slot(w->blockers, &w->nblockers, h->owner);
		else if (h->ticket < w->ticket)
			add_slot(w->ahead, &w->nahead, h->owner);
	}
}

/* The HELD and WAIT grants of the copy, sorted by file and offset. */
static struct row *collect_rows(const struct table *t, size_t *nrows)
{
	struct fd_list *fds = calloc(RS_NPROC, sizeof(*fds));
	struct row *rows = calloc(RS_NGRANT, sizeof(*rows));
	size_t n = 0;

	if (!fds || !rows) {
		free(fds);
		free(rows);
		return NULL;
	}
	for (uint32_t i = 0; i < RS_NGRANT; i++) {
		const struct rs_seg_grant *g = &t->seg->grants[i];
		uint32_t st = atomic_load(&g->state);
		struct row *r = &rows[n];

		if (st != RS_G_HELD && st != RS_G_WAIT)
			continue;
		/* rs_seg_check vetted the copy; the index is checked again
		 * where it is used, as everywhere else. */
		if (g->owner >= RS_NPROC)
			continue;
		*r = (struct row){
			.idx = i, .owner = g->owner, .state = st, .mode = g->mode,
			.users = RS_GW_USERS(atomic_load(&g->gw)),
			.wanted = RS_GW_WANTED(atomic_load(&g->gw)) != 0,
			.alive = t->alive[g->owner],
			.pid = t->seg->procs[g->owner].pid,
			.dev = g->dev, .ino = g->ino, .start = g->start, .end = g->end,
			.since_ns = g->since_ns, .ticket = g->ticket,
		};
		r->path = find_path(t, fds, r);
		n++;
	}
	for (uint32_t p = 0; p < RS_NPROC; p++)
		free(fds[p].v);
	free(fds);
	qsort(rows, n, sizeof(*rows), row_cmp);
	for (size_t i = 0; i < n; i++)
		if (rows[i].state == RS_G_WAIT)
			find_blockers(rows, n, &rows[i]);
	*nrows = n;
	return rows;
}

static void format_age(char *buf, size_t len, uint64_t now, uint64_t since)
{
	uint64_t ns = now - since, s = ns / 1000000000ull;

	if (since == 0 || since > now)
		snprintf(buf, len, "-");   /* unset, or a clock step */
	else if (s < 60)
		snprintf(buf, len, "%.1fs", (double)ns / 1e9);
	else if (s < 3600)
		snprintf(buf, len, "%um%us", (unsigned)(s / 60), (unsigned)(s % 60));
	else if (s < 86400)
		snprintf(buf, len, "%uh%um", (unsigned)(s / 3600), (unsigned)(s / 60 % 60));
	else
		snprintf(buf, len, "%ud%uh", (unsigned)(s / 86400), (unsigned)(s / 3600 % 24));
}

static const char *mode_name(uint32_t mode)
{
	return mode == RS_G_EXSH ? "EXSH" : "SHARED";
}

static const char *state_name(uint32_t state)
{
	return state == RS_G_WAIT ? "WAIT" : "HELD";
}

static int32_t slot_pid(const struct table *t, uint32_t slot)
{
	return slot < RS_NPROC ? t->seg->procs[slot].pid : 0;
}

/* "1234,5678" (at most max of them, then "+N"), or "-" if there are none. */
static void format_pids(char *buf, size_t len, const struct table *t, const uint32_t *slots,
			uint32_t n, uint32_t max)
{
	size_t o = 0;

	snprintf(buf, len, "-");
	for (uint32_t i = 0; i < n && i < MAX_BLOCKERS && o + 16 < len; i++) {
		int32_t pid = slot_pid(t, slots[i]);

		if (i == max) {
			snprintf(buf + o, len - o, ",+%u", n - i);
			return;
		}
		if (pid > 0)
			o += (size_t)snprintf(buf + o, len - o, "%s%d", i ? "," : "", (int)pid);
		else
			o += (size_t)snprintf(buf + o, len - o, "%s?", i ? "," : "");
	}
	if (n > MAX_BLOCKERS && o + 16 < len)
		snprintf(buf + o, len - o, ",+%u", n - MAX_BLOCKERS);
}

/* "pid 1234 (dd), stopped (SIGSTOP or Ctrl-Z; SIGCONT resumes it)" */
static void describe_slot(char *buf, size_t len, const struct table *t, uint32_t slot)
{
	int32_t pid = slot_pid(t, slot);

	if (slot < RS_NPROC && t->alive[slot] && pid > 0)
		rs_nt_describe(pid, buf, len);
	else if (pid > 0)
		snprintf(buf, len, "pid %d, dead (its grants go to the next waiter)", (int)pid);
	else
		snprintf(buf, len, "slot %u, dead", slot);
}

/*
 * One line per WAIT entry, after the table: who waits, how long, for
 * what, and whom for.  The explanation issue 8 asks for: a reader stuck
 * behind a `dd` stopped with Ctrl-Z is told so, with the way out.
 */
static void print_waiters(const struct table *t, const struct row *rows, size_t n, uint64_t now)
{
	for (size_t i = 0; i < n; i++) {
		const struct row *r = &rows[i];
		const uint32_t *who = r->nblockers ? r->blockers : r->ahead;
		uint32_t nwho = r->nblockers ? r->nblockers : r->nahead;
		char age[32], range[48], desc[256];

		if (r->state != RS_G_WAIT)
			continue;
		format_age(age, sizeof(age), now, r->since_ns);
		if (r->end == RS_RANGE_EOF)
			snprintf(range, sizeof(range), "%" PRIu64 "-EOF", r->start);
		else
			snprintf(range, sizeof(range), "%" PRIu64 "-%" PRIu64, r->start, r->end);
		printf("waiting: pid %d (%s) for %s %s, %s so far, ", (int)r->pid,
		       t->proc[r->owner].comm, mode_name(r->mode), range, age);
		if (!nwho) {
			puts("on nobody now (about to be granted)");
			continue;
		}
		fputs(r->nblockers ? "blocked by " : "queued behind the earlier request of ", stdout);
		for (uint32_t k = 0; k < nwho && k < 4 && k < MAX_BLOCKERS; k++) {
			describe_slot(desc, sizeof(desc), t, who[k]);
			printf("%s%s", k ? "; " : "", desc);
		}
		if (nwho > 4)
			printf("; and %u more", nwho - 4);
		putchar('\n');
	}
}

static void print_rows_text(const struct table *t, const struct row *rows, size_t n)
{
	uint64_t now = realtime_now_ns();
	unsigned held = 0, waiting = 0, live = 0, dead = 0;

	if (n)
		printf("%-15s %7s %-8s %-5s %-6s %5s %-6s %7s %-15s %-23s %-14s %s\n", "COMMAND",
		       "PID", "PSTATE", "STATE", "MODE", "USERS", "WANTED", "AGE", "BLOCKER", "RANGE",
		       "DEV:INO", "PATH");
	for (size_t i = 0; i < n; i++) {
		const struct row *r = &rows[i];
		const struct proc_info *pi = &t->proc[r->owner];
		char pid[16], age[32], range[48], file[64], blk[64], path[PATH_MAX * 4 + 1];

		if (r->pid > 0)
			snprintf(pid, sizeof(pid), "%d", (int)r->pid);
		else
			snprintf(pid, sizeof(pid), "?");
		format_age(age, sizeof(age), now, r->since_ns);
		if (r->end == RS_RANGE_EOF)
			snprintf(range, sizeof(range), "%" PRIu64 "-EOF", r->start);
		else
			snprintf(range, sizeof(range), "%" PRIu64 "-%" PRIu64, r->start, r->end);
		snprintf(file, sizeof(file), "%u:%u:%" PRIu64, major((dev_t)r->dev),
			 minor((dev_t)r->dev), r->ino);
		if (r->state == RS_G_WAIT)
			format_pids(blk, sizeof(blk), t, r->blockers, r->nblockers, 3);
		else
			snprintf(blk, sizeof(blk), "-");
		escape_text(r->path ? r->path : "?", path, sizeof(path));
		printf("%-15s %7s %-8s %-5s %-6s %5u %-6s %7s %-15s %-23s %-14s %s\n",
		       r->alive ? pi->comm : "(dead)", pid, r->alive ? pi->state : "dead",
		       state_name(r->state), mode_name(r->mode), r->users,
		       r->state == RS_G_WAIT ? "-" : r->wanted ? "yes" : "no", age, blk, range,
		       file, path);
		if (r->state == RS_G_WAIT)
			waiting++;
		else
			held++;
	}
	print_waiters(t, rows, n, now);
	for (uint32_t p = 0; p < RS_NPROC; p++) {
		if (atomic_load(&t->seg->procs[p].state) != RS_PROC_LIVE)
			continue;
		if (t->alive[p])
			live++;
		else
			dead++;
	}
	printf("%u grants held, %u waiting, %u live processes", held, waiting, live);
	if (dead)
		printf(", %u dead (not yet reclaimed)", dead);
	putchar('\n');
}

/* A slot that never recorded a pid says 0 or garbage: null, not a pid. */
static void json_pid(int32_t pid)
{
	if (pid > 0)
		printf("%d", (int)pid);
	else
		fputs("null", stdout);
}

/* "COMMAND", "process_state": "STATE" (the caller has written the key
 * "command": before). */
static void json_proc(const struct proc_info *pi, bool alive)
{
	if (alive && strcmp(pi->comm, "?"))
		json_string(pi->comm);
	else
		fputs("null", stdout);
	fputs(", \"process_state\": ", stdout);
	json_string(alive ? pi->state : "dead");
}

/* The pids of process slots, as a JSON array (null for a slot without one). */
static void json_pids(const struct table *t, const uint32_t *slots, uint32_t n)
{
	putchar('[');
	for (uint32_t i = 0; i < n && i < MAX_BLOCKERS; i++) {
		fputs(i ? ", " : "", stdout);
		json_pid(slot_pid(t, slots[i]));
	}
	putchar(']');
}

/* t may be NULL: no table, so nothing in it. */
static void print_rows_json(const char *path, const struct table *t,
			    const struct row *rows, size_t n)
{
	uint64_t now = realtime_now_ns();
	const char *sep = "";

	fputs("{\"segment\": ", stdout);
	json_string(path);
	fputs(", \"processes\": [", stdout);
	for (uint32_t p = 0; t && p < RS_NPROC; p++) {
		if (atomic_load(&t->seg->procs[p].state) != RS_PROC_LIVE)
			continue;
		printf("%s{\"slot\": %u, \"pid\": ", sep, p);
		json_pid(t->seg->procs[p].pid);
		printf(", \"alive\": %s, \"command\": ", t->alive[p] ? "true" : "false");
		json_proc(&t->proc[p], t->alive[p]);
		putchar('}');
		sep = ", ";
	}
	fputs("], \"grants\": [", stdout);
	for (size_t i = 0; i < n; i++) {
		const struct row *r = &rows[i];

		printf("%s{\"slot\": %u, \"dev\": \"%u:%u\", \"ino\": %" PRIu64 ", \"path\": ",
		       i ? ", " : "", r->idx, major((dev_t)r->dev), minor((dev_t)r->dev), r->ino);
		json_string(r->path);
		printf(", \"start\": %" PRIu64 ", \"end\": ", r->start);
		if (r->end == RS_RANGE_EOF)
			fputs("null", stdout);
		else
			printf("%" PRIu64, r->end);
		printf(", \"mode\": \"%s\", \"state\": \"%s\", \"owner\": %u, \"pid\": ",
		       mode_name(r->mode), state_name(r->state), r->owner);
		json_pid(r->pid);
		printf(", \"alive\": %s, \"users\": %u, \"wanted\": %s, \"age_ns\": ",
		       r->alive ? "true" : "false", r->users, r->wanted ? "true" : "false");
		if (r->since_ns == 0 || r->since_ns > now)
			fputs("null", stdout);
		else
			printf("%" PRIu64, now - r->since_ns);
		fputs(", \"command\": ", stdout);
		json_proc(&t->proc[r->owner], r->alive);
		/* A WAIT entry: how long it has waited, and for whom. */
		fputs(", \"waited_ns\": ", stdout);
		if (r->state != RS_G_WAIT || r->since_ns == 0 || r->since_ns > now)
			fputs("null", stdout);
		else
			printf("%" PRIu64, now - r->since_ns);
		fputs(", \"blockers\": ", stdout);
		json_pids(t, r->blockers, r->nblockers);
		fputs(", \"queued_behind\": ", stdout);
		json_pids(t, r->ahead, r->nahead);
		putchar('}');
	}
	fputs("]}\n", stdout);
}

static int cmd_locks(const struct command *cmd, int argc, char **argv)
{
	struct table_opts o;
	struct table t;
	struct stat st;
	struct row *rows;
	char why[256];
	size_t n = 0;
	int rc = parse_table_opts(cmd, argc, argv, &o);

	if (rc >= 0)
		return rc;
	rc = load_table(o.path, &t, why, sizeof(why));
	if (rc == 1) {
		/* No table, no locks: not an error. */
		if (o.json)
			print_rows_json(o.path, NULL, NULL, 0);
		else
			printf("no node lock table at %s\n", o.path);
		free_table(&t);
		return 0;
	}
	if (rc < 0) {
		if (t.map.fd >= 0)
			fprintf(stderr, "rangeshim: %s is not a usable node lock table: %s; "
				"the shim refuses it too%s\n", o.path, why,
				fstat(t.map.fd, &st) == 0 && ours(&st) ? " ('rangeshim clean' "
				"removes it once no process has it open)" : "");
		free_table(&t);
		return 1;
	}
	rows = collect_rows(&t, &n);
	if (!rows) {
		perror("rangeshim");
		free_table(&t);
		return 1;
	}
	if (o.json)
		print_rows_json(o.path, &t, rows, n);
	else
		print_rows_text(&t, rows, n);
	for (size_t i = 0; i < n; i++)
		free(rows[i].path);
	free(rows);
	free_table(&t);
	return fflush(stdout) == 0 ? 0 : 1;
}

/*
 * The pids of the processes that have the file open, from /proc: for a
 * table whose slots cannot be read, the kernel's word is the only one.
 * Returns how many were found (at most max are stored).
 */
static unsigned openers(const struct stat *seg, int32_t *out, unsigned max)
{
	unsigned n = 0;
	struct dirent *e;
	DIR *d = opendir("/proc");

	while (d && (e = readdir(d))) {
		struct fd_list l = { 0 };
		char *end;
		long pid = strtol(e->d_name, &end, 10);

		/* Not us: we have it open to look at it. */
		if (*end || end == e->d_name || pid <= 0 || pid > INT32_MAX || pid == getpid())
			continue;
		load_fds(&l, (int32_t)pid);
		for (size_t i = 0; i < l.n; i++) {
			if (l.v[i].dev != seg->st_dev || l.v[i].ino != seg->st_ino)
				continue;
			if (n < max)
				out[n] = (int32_t)pid;
			n++;
			break;
		}
		free(l.v);
	}
	if (d)
		closedir(d);
	return n;
}

/*
 * flock(LOCK_EX), as rs_seg_attach holds it while it creates and
 * initialises a table: holding it, we never judge a table that is being
 * set up.  Bounded: a process stuck holding it must not hang us.
 */
static int lock_setup(int fd)
{
	const struct timespec pause = { 0, 10 * 1000 * 1000 };

	for (int i = 0; i < 200; i++) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			return 0;
		if (errno != EWOULDBLOCK && errno != EINTR)
			return -1;
		nanosleep(&pause, NULL);
	}
	return -1;
}

/* Who is attached to the table behind fd: every slot byte is probed for
 * its liveness lock whatever the slots say (what they say is untrusted);
 * pids come from the copy, if it is readable. */
struct census {
	bool readable;
	unsigned nlive, nstale, ngrants, npids;
	int32_t pids[RS_NPROC];
	char why[256];
};

static void take_census(int fd, struct rs_segment *seg, struct census *c)
{
	struct rs_seg_map map = { .fd = fd, .fd_slot = NULL };

	memset(c, 0, sizeof(*c));
	c->readable = seg && read_table(fd, seg, c->why, sizeof(c->why)) == 0;
	for (uint32_t p = 0; p < RS_NPROC; p++) {
		if (rs_seg_alive(&map, p)) {
			c->nlive++;
			if (c->readable && seg->procs[p].pid > 0)
				c->pids[c->npids++] = seg->procs[p].pid;
		} else if (c->readable && atomic_load(&seg->procs[p].state) == RS_PROC_LIVE) {
			c->nstale++;
		}
	}
	for (uint32_t i = 0; c->readable && i < RS_NGRANT; i++)
		c->ngrants += atomic_load(&seg->grants[i].state) != RS_G_FREE;
}

/*
 * The refusal: who is alive, in what state, and what to do.  A table is
 * never removed under a live process, --force or not: the process would
 * keep the old table, processes started later would make a new one, and
 * the two groups would not exclude each other (issue 8).
 */
static void refuse_live(const char *path, const struct stat *st, struct census *c)
{
	int32_t *pids = c->pids;
	unsigned n = c->npids;
	char desc[256];

	if (!n)   /* an unreadable table: ask the kernel who has it open */
		n = openers(st, pids, RS_NPROC);
	fprintf(stderr, "rangeshim: %s is in use by %u live process(es); not removing it "
		"(not even with --force: they would keep this table while processes started "
		"later made a new one, and the two groups would not exclude each other):\n",
		path, c->nlive);
	for (unsigned i = 0; i < n && i < RS_NPROC; i++) {
		rs_nt_describe(pids[i], desc, sizeof(desc));
		fprintf(stderr, "  %s\n", desc);
	}
	if (!n)
		fputs("  (their pids are not visible from here)\n", stderr);
	fputs("Let them finish, or end them (a stopped one: kill -CONT PID resumes it, "
	      "kill PID ends it), then run 'rangeshim clean' again; the slots of dead "
	      "processes do not count.\n", stderr);
}

/* Put a table we moved aside back under its name.  If a process created
 * a new table there meanwhile, swap them: the new one's processes find
 * their table no longer named and attach again (rs_nt_register), unless
 * one had finished attaching already, which is said loudly. */
static void put_back(const char *aside, const char *path)
{
	struct rs_seg_map nm = { .fd = -1 };
	unsigned nlive = 0;

	if (renameat2(AT_FDCWD, aside, AT_FDCWD, path, RENAME_NOREPLACE) == 0)
		return;
	if (errno != EEXIST || renameat2(AT_FDCWD, aside, AT_FDCWD, path, RENAME_EXCHANGE) < 0) {
		fprintf(stderr, "rangeshim: cannot put %s back from %s: %s; its processes no "
			"longer exclude new ones until it is moved back (mv %s %s)\n",
			path, aside, strerror(errno), aside, path);
		return;
	}
	nm.fd = open(aside, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	for (uint32_t p = 0; nm.fd >= 0 && p < RS_NPROC; p++)
		nlive += (unsigned)rs_seg_alive(&nm, p);
	if (nm.fd >= 0)
		close(nm.fd);
	if (nlive)
		fprintf(stderr, "rangeshim: %u process(es) attached to a table created at %s in "
			"the moment it was aside; they do not exclude the processes of %s: "
			"restart them\n", nlive, path, path);
	unlink(aside);
}

static int cmd_clean(const struct command *cmd, int argc, char **argv)
{
	struct table_opts o;
	struct stat st, now;
	struct census c;
	int fd = -1;
	struct rs_segment *seg = NULL;
	char aside[sizeof(o.path) + 64];
	const char *slash;
	bool foreign;
	int rc = parse_table_opts(cmd, argc, argv, &o);

	if (rc >= 0)
		return rc;
	rc = open_table(o.path, &fd);
	if (rc == 1) {
		printf("nothing to clean: no node lock table at %s\n", o.path);
		return 0;
	}
	if (rc < 0)
		return 1;
	rc = 1;
	if (fstat(fd, &st) < 0 || !ours(&st)) {
		fprintf(stderr, "rangeshim: %s is not a regular file owned by uid %u; "
			"not removing\n", o.path, (unsigned)geteuid());
		goto out;
	}
	if (lock_setup(fd) < 0) {
		fprintf(stderr, "rangeshim: %s stays locked by a process setting it up; "
			"not removing\n", o.path);
		goto out;
	}
	seg = aligned_alloc(_Alignof(struct rs_segment), sizeof(*seg));
	take_census(fd, seg, &c);
	if (c.nlive) {
		refuse_live(o.path, &st, &c);
		goto out;
	}
	/* Some other lock, on no slot's liveness byte: not a process attached
	 * to this table (a foreign lock, or another layout's).  --force
	 * removes the table anyway. */
	foreign = file_locked(fd);
	if (foreign && !o.force) {
		fprintf(stderr, "rangeshim: %s is locked by another process, though no process "
			"is attached to it as a table; not removing (--force removes it)\n", o.path);
		goto out;
	}
	/*
	 * A process may be attaching right now: it claims a slot, then checks
	 * that the name still leads to its file (rs_nt_register).  So move the
	 * file aside first, look again, and only then unlink: a process that
	 * claimed before the move is seen now, and one that claims after it
	 * finds its file unnamed and attaches again, to a new table.
	 */
	slash = strrchr(o.path, '/');
	snprintf(aside, sizeof(aside), "%.*s/.rangeshim-clean.%d.%llx",
		 (int)(slash ? slash - o.path : 0), o.path, (int)getpid(),
		 (unsigned long long)realtime_now_ns());
	if (renameat2(AT_FDCWD, o.path, AT_FDCWD, aside, RENAME_NOREPLACE) < 0) {
		if (errno == ENOENT) {
			printf("nothing to clean: %s was removed meanwhile\n", o.path);
			rc = 0;
		} else {
			fprintf(stderr, "rangeshim: cannot move %s aside to remove it: %s; "
				"not removing\n", o.path, strerror(errno));
		}
		goto out;
	}
	/* Remove the file we examined, not one created under its name since. */
	if (lstat(aside, &now) < 0 || now.st_dev != st.st_dev || now.st_ino != st.st_ino) {
		put_back(aside, o.path);
		fprintf(stderr, "rangeshim: %s was replaced while we looked at it; "
			"not removing\n", o.path);
		goto out;
	}
	take_census(fd, seg, &c);
	if (c.nlive || (file_locked(fd) && !o.force)) {
		put_back(aside, o.path);
		if (c.nlive)
			refuse_live(o.path, &st, &c);
		else
			fprintf(stderr, "rangeshim: %s was locked by another process meanwhile; "
				"not removing\n", o.path);
		goto out;
	}
	if (unlink(aside) < 0) {
		fprintf(stderr, "rangeshim: cannot remove %s (moved aside from %s): %s\n",
			aside, o.path, strerror(errno));
		goto out;
	}
	rc = 0;
	if (!c.readable)
		printf("removed %s: an unusable table (%s), and no process was attached%s\n",
		       o.path, c.why, foreign ? " (another lock on it was overridden by --force)" : "");
	else if (c.nstale || c.ngrants)
		printf("removed %s: no live process; it still listed %u dead process(es) "
		       "and %u grant(s)\n", o.path, c.nstale, c.ngrants);
	else
		printf("removed %s: no process was attached%s\n", o.path,
		       foreign ? " (another lock on it was overridden by --force)" : "");
out:
	free(seg);
	close(fd);
	return rc;
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
		puts("rangeshim " RS_VERSION);
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
