/* rangeshim env: print what `run` would set, for eval. */
#include "preload.h"

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

int cmd_env(const struct command *cmd, int argc, char **argv)
{
	struct settings s = { 0 };
	int rc = parse_settings(cmd->name, argc, argv, &s);
	char *preload;

	if (rc >= 0)
		return rc;
	if (optind < argc)
		return usage_error("env: unexpected argument '%s' (did you mean 'run'?)",
				   argv[optind]);
	if ((rc = check_settings(&s)) >= 0)
		return rc;

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
