/* rangeshim: dispatch to the subcommands, and the usage text. */
#include "cli.h"

int cmd_agent(const struct command *cmd, int argc, char **argv);

static const struct command commands[] = {
	{ "run", cmd_run, "run CMD with the shim preloaded" },
	{ "env", cmd_env, "print the variables `run` would set, for eval" },
	{ "locks", cmd_locks, "list the node lock table's grants, like lslocks" },
	{ "stats", cmd_stats, "merge the JSON stats reports of a job (FILE...|DIR) into one summary" },
	{ "check", cmd_check, "race writers and readers in PATH without and with the shim" },
	{ "agent", cmd_agent, "the node's owner of cluster grants (started on first use)" },
	{ "clean", cmd_clean, "remove the node lock table if no live process is attached" },
};

void usage(FILE *out)
{
	fputs("usage: rangeshim COMMAND [options] [--] [CMD [ARGS...] | PATH...]\n"
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
	      "program, in ../lib or in ../lib/rangeshim"
#ifdef RS_LIBDIR
	      ", or in " RS_LIBDIR
#endif
	      ".\n"
	      "\n"
	      "Options of locks and clean:\n"
	      "  --shm NAME   node table segment (default: $RANGESHIM_SHM, else /rangeshim-UID;\n"
	      "               the file is /dev/shm/NAME)\n"
	      "  --json       locks: print one JSON object instead of the table\n"
	      "  -p PID       locks: only the grants and waits of process PID\n"
	      "  -o COLS      locks: these columns, comma-separated (+COLS: added to the\n"
	      "               default ones): COMMAND,PID,PSTATE,STATE,MODE,USERS,WANTED,\n"
	      "               AGE,BLOCKER,RANGE,DEV:INO,PATH\n"
	      "  --noheadings locks: no heading line\n"
	      "  --raw        locks: fields separated by one space, unaligned (spaces in\n"
	      "               them as \\x20), and only the rows: no waiter lines, no summary\n"
	      "  --watch SECS locks: list again every SECS seconds (0.1 to 86400) until\n"
	      "               interrupted, each listing after a '--- TIME ---' line\n"
	      "  PATH...      locks: only the grants on these files (same device and inode)\n"
	      "  --force      clean: also remove a table that is locked by something other than\n"
	      "               an attached process (a corrupt or foreign table).  It never removes\n"
	      "               a table while a process attached to it is alive: clean lists those\n"
	      "               processes (pid, command, state) and leaves the table alone\n"
	      "\n"
	      "locks shows each grant's byte range [START-END) (END excluded, EOF: to\n"
	      "infinity), mode (EXSH: exclusive to other processes, SHARED: readers,\n"
	      "APPEND: O_APPEND writers, who share the tail with each other only),\n"
	      "state (HELD, or WAIT for a queued request), holder and its process state\n"
	      "(PSTATE: running, sleeping, stopped, zombie, dead...), users (calls in\n"
	      "progress), whether another process wants it, and its age (for WAIT: how\n"
	      "long it has waited).  BLOCKER lists, for a WAIT entry, the pids whose\n"
	      "grants block it, as lslocks does; a line per waiter then says whom it\n"
	      "waits for and in what state that process is (e.g. stopped by Ctrl-Z).\n"
	      "In cluster scope, locks also asks the node's agent of the same node table\n"
	      "for its cluster grants (MODE CLUSTER, held through the file system's lock\n"
	      "manager; WANTED: another node waits for it), listed before the grants\n"
	      "inside them; a line says which agent holds how many, or that none runs.\n"
	      "\n"
	      "Options of check [PATH] (PATH: a directory, default the current one):\n"
	      "  --seconds S  each of the two runs lasts S seconds (default 2)\n"
	      "  --block SIZE bytes per write and read, suffix k or M (default 1M)\n"
	      "  --readers N  reader threads (default 1)\n"
	      "  --direct     O_DIRECT reads and writes\n"
	      "  --processes  the writer in a process of its own (node scope), not a thread\n"
	      "  --lib PATH   library to check (default: found as for run)\n"
	      "  check exits 0 when no read tore with the shim, 1 when some did (or the\n"
	      "  library was not loaded), 3 when the file system refused the test file\n"
	      "\n"
	      "Examples:\n"
	      "  rangeshim run -- ./my_app\n"
	      "  rangeshim run --stats -- dd if=/dev/zero of=out bs=1M count=10\n"
	      "  eval \"$(rangeshim env --scope process)\"\n"
	      "  rangeshim check /scratch/$USER\n"
	      "  rangeshim locks --json | python3 -m json.tool\n"
	      "  rangeshim locks --watch 1 -o PID,STATE,BLOCKER,RANGE data.bin\n", out);
}

int usage_error(const char *fmt, const char *arg)
{
	fputs("rangeshim: ", stderr);
	fprintf(stderr, fmt, arg);
	fputs("\ntry 'rangeshim --help'\n", stderr);
	return EXIT_USAGE;
}

bool is_one_of(const char *s, const char *const *allowed)
{
	for (; *allowed; allowed++)
		if (strcmp(s, *allowed) == 0)
			return true;
	return false;
}

/* The getopt errors of every command, in one shape. */
int getopt_error(int c, char **argv)
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
