/*
 * The command's interface, declared once: its subcommands, their options
 * and the environment variables.  The option parsers (iface_getopt), the
 * help of every subcommand and the global usage are built from these
 * tables, and tests/test_cli.c diffs them against completion.bash, both
 * man pages and docs/configuration.md, so a new option or variable cannot
 * be half-documented.
 */
#ifndef RS_CLI_IFACE_H
#define RS_CLI_IFACE_H

#include <stdio.h>

/* getopt values of long options without a short one, clear of every
 * short option and of 0 (getopt's "unknown long option" in optopt). */
enum {
	/* run and env: 0x100 + enum setting (preload.h), then: */
	OPT_LIB = 0x100 + 16,
	/* locks and clean */
	OPT_SHM = 0x200, OPT_FORCE, OPT_WATCH, OPT_OUTPUT_ALL,
	/* check */
	OPT_SECONDS = 0x300, OPT_BLOCK, OPT_READERS, OPT_DIRECT, OPT_PROCS, OPT_CHECK_JSON,
	OPT_APPEND,
	/* stats */
	OPT_STATS_JSON = 0x400,
};

enum iface_arg { IA_NONE, IA_REQUIRED, IA_OPTIONAL };

struct iface_cmd {
	const char *name;
	const char *args;        /* after "rangeshim NAME" in the usage line */
	const char *summary;     /* one line */
	bool stop_at_operand;    /* getopt "+": CMD's own options pass through */
	const char *notes;       /* more help after the options, or NULL */
};

struct iface_opt {
	const char *cmds;        /* the subcommands that take it, space-separated */
	char short_name;         /* 0: none */
	const char *long_name;   /* without "--"; NULL: none */
	enum iface_arg arg;
	const char *meta;        /* the value's name in help, e.g. "NAME" */
	const char *choices;     /* the values completion offers, space-separated,
				  * or NULL for a free value */
	int val;                 /* what iface_getopt returns for it */
	const char *help;
};

struct iface_env {
	const char *name;
	const char *choices;     /* accepted values, space-separated, or NULL */
	const char *dflt;        /* what an unset variable means */
	const char *summary;
	const char *reader;      /* "library" or "command" */
};

extern const struct iface_cmd iface_cmds[];
extern const struct iface_opt iface_opts[];
extern const struct iface_env iface_envs[];
extern const size_t iface_ncmds, iface_nopts, iface_nenvs;

const struct iface_cmd *iface_cmd(const char *name);
/* Does option o belong to subcommand cmd? */
bool iface_takes(const struct iface_opt *o, const char *cmd);
/* getopt_long over cmd's declared options (opterr off, "+" per the
 * table, ':' for a missing value); call with optind = 1 first. */
int iface_getopt(const char *cmd, int argc, char **argv);
void iface_help(const char *cmd, FILE *out);
void iface_usage(FILE *out);
const struct iface_env *iface_env(const char *name);

#endif
