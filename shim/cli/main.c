/* rangeshim: dispatch to the subcommands, and the usage text. */
#include "cli.h"

int cmd_agent(const struct command *cmd, int argc, char **argv);

static const struct command commands[] = {
	{ "run", cmd_run },
	{ "env", cmd_env },
	{ "locks", cmd_locks },
	{ "stats", cmd_stats },
	{ "check", cmd_check },
	{ "agent", cmd_agent },
	{ "clean", cmd_clean },
};

void usage(FILE *out)
{
	iface_usage(out);
}

/* The subcommand being run, for the pointer to its help. */
static const char *current = "";

/* One line: what is wrong, and where the help is. */
int usage_error(const char *fmt, const char *arg)
{
	fputs("rangeshim: ", stderr);
	fprintf(stderr, fmt, arg);
	fprintf(stderr, " (see 'rangeshim %s%s--help')\n", current, *current ? " " : "");
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
		if (!strcmp(name, commands[i].name) && (current = commands[i].name))
			return commands[i].fn(&commands[i], argc - 1, argv + 1);

	if (name[0] == '-')
		return usage_error("unknown option '%s' (options go after the command)",
				   name);
	return usage_error("unknown command '%s'", name);
}
