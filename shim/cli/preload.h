/* The options of `run` and `env`, and the library they preload. */
#ifndef RS_CLI_PRELOAD_H
#define RS_CLI_PRELOAD_H

#include "cli.h"
#include "iface.h"

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

struct setting_name {
	const char *opt, *var;
};

extern const struct setting_name setting_names[SET_COUNT];

/*
 * getopt_long values for the settings: clear of every short option and of
 * 0, which getopt also uses for "unknown long option" in optopt.
 */
#define OPT_SET(i) (0x100 + (i))

/* What the options of `run` and `env` asked for; NULL means "leave alone". */
struct settings {
	const char *value[SET_COUNT];
	const char *lib;       /* --lib, before canonicalisation */
};

int parse_settings(const char *cmd, int argc, char **argv, struct settings *s);
int check_settings(const struct settings *s);
char *build_preload(const struct settings *s);

#endif
