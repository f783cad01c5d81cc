/* The command's interface, declared once (see iface.h). */
#include "cli.h"
#include "iface.h"
#include "preload.h"

const struct iface_cmd iface_cmds[] = {
	{ "run", "[options] [--] CMD [ARGS...]", "run CMD with the shim preloaded", true,
	  "Option parsing stops at CMD, so CMD's own options pass through.  Every value\n"
	  "is checked before CMD starts: a bad one is one line and exit 2.\n"
	  "Exit status: CMD's own (128 + signal with --stats); 2 for a usage error or\n"
	  "no library; 126 when CMD cannot be executed; 127 when it is not found.\n" },
	{ "env", "[options]", "print the variables `run` would set, for eval", true,
	  "Each line is NAME=VALUE; export NAME, for eval in any Bourne shell.\n" },
	{ "locks", "[options] [PATH...]", "list the node lock table's grants, like lslocks", false,
	  "Each grant: its byte range START-END (END excluded; EOF: to infinity; a\n"
	  "strided grant adds \"stride S len L\": L bytes every S only), mode\n"
	  "(EXSH: exclusive to other processes; SHARED: readers; APPEND: O_APPEND\n"
	  "writers), state (HELD, or WAIT for a queued request), holder and its process\n"
	  "state, calls in progress, whether another process wants it, and its age.\n"
	  "BLOCKER lists, for a WAIT entry, the pids whose grants block it.  Files are\n"
	  "named major:minor:inode and by path where a process has them open.  The\n"
	  "kernel's own locks on those files (fcntl, OFD, flock; /proc/locks) are rows\n"
	  "of kind POSIX, OFDLCK or FLOCK.  In cluster scope (RANGESHIM_SCOPE=cluster),\n"
	  "the node agent's cluster grants are listed too, as MODE CLUSTER.\n"
	  "The default table is /run/user/UID/rangeshim-table where that directory\n"
	  "exists, else /dev/shm/rangeshim-UID.\n"
	  "Exit status: 0, also when there is no table; 1 when it is unusable; 2 for a\n"
	  "usage error.\n" },
	{ "stats", "[options] FILE...|DIR", "sum up a job from the JSON reports of its processes", true,
	  "Reads the reports that RANGESHIM_STATS=PATH (%p: the pid) made, or every\n"
	  "*.json in DIR: a job header, per-file totals across processes, and one row\n"
	  "per process that did I/O (the others folded into one line).\n"
	  "Exit status: 0; 1 when no report could be read; 2 for a usage error.\n" },
	{ "check", "[options] [PATH]", "race writers and readers in PATH without and with the shim", false,
	  "PATH is a directory, default the current one.  Exit status: 0 when no read\n"
	  "tore with the shim; 1 when some did, or the library was not loaded; 2 for a\n"
	  "usage error; 3 when the file system refused the test file.\n" },
	{ "agent", "[options]", "the node's owner of cluster grants (started on first use)", true,
	  "The library starts it in cluster scope (RANGESHIM_SCOPE=cluster) and it exits\n"
	  "when idle.  Exit status: 0; 1 when it cannot serve; 2 for a usage error.\n" },
	{ "clean", "[options]", "remove the node lock table if no live process is attached", false,
	  "It never removes a table while a process attached to it lives; it lists those\n"
	  "processes instead.  The default table is /run/user/UID/rangeshim-table where\n"
	  "that directory exists, else /dev/shm/rangeshim-UID.\n"
	  "Exit status: 0 when removed or nothing to clean; 1 when it refused or\n"
	  "failed; 2 for a usage error.\n" },
};

#define RUN_ENV "run env"

const struct iface_opt iface_opts[] = {
	{ RUN_ENV, 0, "scope", IA_REQUIRED, "SCOPE", "off process node cluster", 0x100 + SET_SCOPE,
	  "RANGESHIM_SCOPE: which processes coordinate" },
	{ RUN_ENV, 0, "lock", IA_REQUIRED, "LOCK", "range mutex", 0x100 + SET_LOCK,
	  "RANGESHIM_LOCK: byte ranges, or one lock per file" },
	{ RUN_ENV, 0, "paths", IA_REQUIRED, "LIST", NULL, 0x100 + SET_PATHS,
	  "RANGESHIM_PATHS: colon-separated absolute prefixes or globs" },
	{ "run", 0, "stats", IA_OPTIONAL, "PATH", NULL, 0x100 + SET_STATS,
	  "alone: a JSON report per process in a private directory, then the job\n"
	  "summary on stderr; =PATH: RANGESHIM_STATS=PATH (%p: the pid; the\n"
	  "directory is created)" },
	{ "env", 0, "stats", IA_OPTIONAL, "PATH", NULL, 0x100 + SET_STATS,
	  "alone: RANGESHIM_STATS=1 (a summary on stderr at each exit);\n"
	  "=PATH: RANGESHIM_STATS=PATH (%p: the pid)" },
	{ RUN_ENV, 0, "log", IA_REQUIRED, "LEVEL", "error warn info debug", 0x100 + SET_LOG,
	  "RANGESHIM_LOG: the library's log level" },
	{ RUN_ENV, 0, "shm", IA_REQUIRED, "NAME", NULL, 0x100 + SET_SHM,
	  "RANGESHIM_SHM: the node table, a name like /rangeshim-1000" },
	{ RUN_ENV " check", 0, "lib", IA_REQUIRED, "PATH", NULL, OPT_LIB,
	  "the library to preload (default: $RANGESHIM_LIB, else found next to\n"
	  "this program, in ../lib or ../lib/rangeshim)" },

	{ "locks clean agent", 0, "shm", IA_REQUIRED, "NAME", NULL, OPT_SHM,
	  "the node table (default: $RANGESHIM_SHM, else the default table)" },
	{ "locks", 'J', "json", IA_NONE, NULL, NULL, 'J', "one JSON object instead of the table" },
	{ "locks", 'p', "pid", IA_REQUIRED, "PID", NULL, 'p',
	  "only the grants and waits of process PID" },
	{ "locks", 'o', "output", IA_REQUIRED, "COLS", NULL, 'o',
	  "these columns, comma-separated (+COLS: added to the default ones)" },
	{ "locks", 0, "output-all", IA_NONE, NULL, NULL, OPT_OUTPUT_ALL,
	  "every column, also TYPE, START, END and SIZE" },
	{ "locks", 'n', "noheadings", IA_NONE, NULL, NULL, 'n', "no heading line" },
	{ "locks", 'i', "noinaccessible", IA_NONE, NULL, NULL, 'i',
	  "leave out the entries whose file path cannot be determined (PATH ?)" },
	{ "locks", 'r', "raw", IA_NONE, NULL, NULL, 'r',
	  "fields one space apart, unaligned (blanks as \\x20), rows only" },
	{ "locks", 'u', "notruncate", IA_NONE, NULL, NULL, 'u',
	  "accepted as in lslocks; locks never truncates a column" },
	{ "locks", 'b', "bytes", IA_NONE, NULL, NULL, 'b',
	  "SIZE in bytes, not in a human-readable form" },
	{ "locks", 'H', "list-columns", IA_NONE, NULL, NULL, 'H',
	  "list the columns and what they mean, and exit" },
	{ "locks", 0, "watch", IA_REQUIRED, "SECS", NULL, OPT_WATCH,
	  "list again every SECS seconds (0.1 to 86400) until interrupted" },
	{ "clean", 0, "force", IA_NONE, NULL, NULL, OPT_FORCE,
	  "also remove a table locked by something other than an attached process" },

	{ "stats", 0, "json", IA_NONE, NULL, NULL, OPT_STATS_JSON,
	  "one JSON object: the job, its totals, files and processes" },

	{ "check", 0, "seconds", IA_REQUIRED, "S", NULL, OPT_SECONDS,
	  "each of the two runs lasts S seconds (default 2)" },
	{ "check", 0, "block", IA_REQUIRED, "SIZE", NULL, OPT_BLOCK,
	  "bytes per write and read, suffix k or M (default 1M)" },
	{ "check", 0, "readers", IA_REQUIRED, "N", NULL, OPT_READERS, "reader threads (default 1)" },
	{ "check", 0, "direct", IA_NONE, NULL, NULL, OPT_DIRECT, "O_DIRECT reads and writes" },
	{ "check", 0, "json", IA_NONE, NULL, NULL, OPT_CHECK_JSON,
	  "one JSON object: both races, without and with the shim, and the verdict" },
	{ "check", 0, "processes", IA_NONE, NULL, NULL, OPT_PROCS,
	  "the writer in a process of its own (node scope), not a thread" },

	{ "agent", 'f', "foreground", IA_NONE, NULL, NULL, 'f',
	  "stay in the foreground and say what it does" },
	{ "agent", 'g', "grants", IA_NONE, NULL, NULL, 'g',
	  "list the cluster grants the running agent holds" },

	{ "run env locks stats check agent clean", 'h', "help", IA_NONE, NULL, NULL, 'h',
	  "this text" },
};

const struct iface_env iface_envs[] = {
	{ "RANGESHIM_SCOPE", "off process node cluster", "node",
	  "which processes coordinate", "library" },
	{ "RANGESHIM_CLUSTER_FS", NULL, "none beyond the built-in types",
	  "extra file-system types whose locks cluster scope trusts", "library" },
	{ "RANGESHIM_LOCK", "range mutex", "range", "byte ranges, or one lock per file", "library" },
	{ "RANGESHIM_PATHS", NULL, "every regular file outside /proc, /sys and /dev (but /dev/shm)",
	  "which files are coordinated: colon-separated prefixes or globs", "library" },
	{ "RANGESHIM_SHM", NULL, "/run/user/UID/rangeshim-table, else /dev/shm/rangeshim-UID", "the node table's name, e.g. /rangeshim-1000",
	  "library" },
	{ "RANGESHIM_STATS", NULL, "no report",
	  "1: a summary on stderr at exit; a path (%p: the pid): a JSON report", "library" },
	{ "RANGESHIM_LOG", "error warn info debug", "warn", "the log level", "library" },
	{ "RANGESHIM_ONLY_CMDS", NULL, "every program",
	  "coordinate only these programs (comma-separated names)", "library" },
	{ "RANGESHIM_SKIP_CMDS", NULL, "none",
	  "leave these programs uncoordinated, by choice (comma-separated names)", "library" },
	{ "RANGESHIM_LIB", NULL, "found next to the command, in ../lib or ../lib/rangeshim",
	  "the library run, env and check preload", "command" },
};

const size_t iface_ncmds = sizeof iface_cmds / sizeof iface_cmds[0];
const size_t iface_nopts = sizeof iface_opts / sizeof iface_opts[0];
const size_t iface_nenvs = sizeof iface_envs / sizeof iface_envs[0];

const struct iface_cmd *iface_cmd(const char *name)
{
	for (size_t i = 0; i < iface_ncmds; i++)
		if (!strcmp(iface_cmds[i].name, name))
			return &iface_cmds[i];
	return NULL;
}

const struct iface_env *iface_env(const char *name)
{
	for (size_t i = 0; i < iface_nenvs; i++)
		if (!strcmp(iface_envs[i].name, name))
			return &iface_envs[i];
	return NULL;
}

bool iface_takes(const struct iface_opt *o, const char *cmd)
{
	size_t n = strlen(cmd);

	for (const char *p = o->cmds; *p; p += strcspn(p, " "), p += strspn(p, " "))
		if (strcspn(p, " ") == n && !strncmp(p, cmd, n))
			return true;
	return false;
}

int iface_getopt(const char *cmd, int argc, char **argv)
{
	static const char *built_for;
	static struct option lo[sizeof iface_opts / sizeof iface_opts[0] + 1];
	static char so[2 * sizeof iface_opts / sizeof iface_opts[0] + 4];
	const struct iface_cmd *c = iface_cmd(cmd);

	if (!built_for || strcmp(built_for, cmd)) {
		size_t nl = 0, ns = 0;

		if (c && c->stop_at_operand)
			so[ns++] = '+';
		so[ns++] = ':';
		for (size_t i = 0; i < iface_nopts; i++) {
			const struct iface_opt *o = &iface_opts[i];
			int has = o->arg == IA_NONE ? no_argument :
				  o->arg == IA_REQUIRED ? required_argument : optional_argument;

			if (!iface_takes(o, cmd))
				continue;
			if (o->long_name)
				lo[nl++] = (struct option){ o->long_name, has, NULL, o->val };
			if (o->short_name) {
				so[ns++] = o->short_name;
				if (o->arg != IA_NONE)
					so[ns++] = ':';
			}
		}
		lo[nl] = (struct option){ NULL, 0, NULL, 0 };
		so[ns] = '\0';
		built_for = cmd;
		opterr = 0;
	}
	return getopt_long(argc, argv, so, lo, NULL);
}

/* "-J, --json", "    --shm NAME", "--stats[=PATH]" */
static void opt_words(const struct iface_opt *o, char *buf, size_t len)
{
	size_t n = 0;

	n += (size_t)snprintf(buf + n, len - n, o->short_name ? "-%c%s" : "    ",
			      o->short_name, o->long_name ? ", " : "");
	if (o->long_name && n < len)
		n += (size_t)snprintf(buf + n, len - n, "--%s", o->long_name);
	if (n >= len)
		return;
	if (o->arg == IA_OPTIONAL)
		snprintf(buf + n, len - n, "[=%s]", o->meta);
	else if (o->arg == IA_REQUIRED)
		snprintf(buf + n, len - n, " %s", o->choices ? "" : o->meta);
	if (o->arg == IA_REQUIRED && o->choices) {
		/* The values themselves: "--scope off|process|node|cluster". */
		n = strlen(buf);
		for (const char *p = o->choices; *p && n < len; p += strspn(p, " ")) {
			size_t w = strcspn(p, " ");

			n += (size_t)snprintf(buf + n, len - n, "%s%.*s",
					      p == o->choices ? "" : "|", (int)w, p);
			p += w;
		}
	}
}

void iface_help(const char *cmd, FILE *out)
{
	const struct iface_cmd *c = iface_cmd(cmd);

	if (!c)
		return;
	fprintf(out, "usage: rangeshim %s %s\n%c%s.\n\nOptions:\n", c->name, c->args,
		c->summary[0] - 'a' + 'A', c->summary + 1);
	for (size_t i = 0; i < iface_nopts; i++) {
		const struct iface_opt *o = &iface_opts[i];
		char words[96];

		if (!iface_takes(o, cmd))
			continue;
		opt_words(o, words, sizeof words);
		fprintf(out, "  %-36s ", words);
		for (const char *h = o->help; *h; h++) {
			fputc(*h, out);
			if (*h == '\n')
				fprintf(out, "%39s", "");
		}
		fputc('\n', out);
	}
	if (c->notes)
		fprintf(out, "\n%s", c->notes);
}

void iface_usage(FILE *out)
{
	fputs("usage: rangeshim COMMAND [options] [--] [CMD [ARGS...] | PATH...]\n"
	      "\n"
	      "Commands:\n", out);
	for (size_t i = 0; i < iface_ncmds; i++)
		fprintf(out, "  %-8s%s\n", iface_cmds[i].name, iface_cmds[i].summary);
	fputs("  help    show this text (also -h, --help); --version: the version\n"
	      "\n"
	      "'rangeshim COMMAND --help' lists the options of COMMAND.\n"
	      "\n"
	      "Environment:\n", out);
	for (size_t i = 0; i < iface_nenvs; i++)
		fprintf(out, "  %-22s%s\n  %-22sdefault: %s\n", iface_envs[i].name,
			iface_envs[i].summary, "", iface_envs[i].dflt);
	fputs("\n"
	      "Examples:\n"
	      "  rangeshim run -- ./my_app\n"
	      "  rangeshim run --stats -- dd if=/dev/zero of=out bs=1M count=10\n"
	      "  eval \"$(rangeshim env --scope process)\"\n"
	      "  rangeshim check /scratch/$USER\n"
	      "  rangeshim locks --json | python3 -m json.tool\n"
	      "  rangeshim locks --watch 1 -o PID,STATE,BLOCKER,RANGE data.bin\n", out);
}
