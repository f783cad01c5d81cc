/* rangeshim run: set the environment, then exec CMD. */
#include "preload.h"

int cmd_run(const struct command *cmd, int argc, char **argv)
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
