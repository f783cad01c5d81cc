/* The options of `run` and `env`, and finding the library to preload. */
#include "preload.h"
#include "config.h"

const struct setting_name setting_names[SET_COUNT] = {
	[SET_SCOPE] = { "scope", "RANGESHIM_SCOPE" },
	[SET_LOCK] = { "lock", "RANGESHIM_LOCK" },
	[SET_PATHS] = { "paths", "RANGESHIM_PATHS" },
	[SET_STATS] = { "stats", "RANGESHIM_STATS" },
	[SET_LOG] = { "log", "RANGESHIM_LOG" },
	[SET_SHM] = { "shm", "RANGESHIM_SHM" },
};

/*
 * Parse the options shared by `run` and `env`.  Returns -1 when the caller
 * should go on, otherwise the exit status.  Parsing stops at the first
 * non-option ("+"), so `run` passes CMD's own options through untouched.
 */
int parse_settings(const char *cmd, int argc, char **argv, struct settings *s)
{
	static const char *const scopes[] = { "off", "process", "node", "cluster", NULL };
	static const char *const locks[] = { "range", "mutex", NULL };
	int c;

	/* Our own messages, so every usage error has the same shape. */
	optind = 1;
	while ((c = iface_getopt(cmd, argc, argv)) != -1) {
		switch (c) {
		case 'h':
			iface_help(cmd, stdout);
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
				return usage_error("bad --scope '%s' (use off, process, node or cluster)",
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

/* mkdir -p of the directory part of path (up to the last '/'). */
static int make_parents(const char *path)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');

	if (!slash || slash == path)
		return 0;
	if ((size_t)(slash - path) >= sizeof dir)
		return errno = ENAMETOOLONG, -1;
	memcpy(dir, path, (size_t)(slash - path));
	dir[slash - path] = '\0';
	for (char *p = dir + 1;; p++) {
		if (*p == '/' || !*p) {
			char c = *p;

			*p = '\0';
			if (mkdir(dir, 0777) < 0 && errno != EEXIST)
				return -1;
			*p = c;
			if (!c)
				break;
		}
	}
	return access(dir, W_OK | X_OK);
}

/*
 * The values the library would refuse or fail on, refused before anything
 * starts: the library's rules (config.c) on one line each, so that a typo
 * never turns into a line per process of the job.  --stats=PATH gets its
 * directory made, as the reports need it.  -1 to go on, else the status.
 */
int check_settings(const struct settings *s)
{
	static const char *const logs[] = { "error", "warn", "info", "debug", "0", "1", "2", "3", NULL };
	const char *v;

	if ((v = s->value[SET_LOG]) && !is_one_of(v, logs))
		return usage_error("bad --log '%s' (use error, warn, info, debug or 0 to 3)", v);
	if ((v = s->value[SET_SHM]) &&
	    (v[0] != '/' || !v[1] || strlen(v) > 200 || strchr(v + 1, '/') || !strcmp(v, "/.") ||
	     !strcmp(v, "/..")))
		return usage_error("bad --shm '%s' (a '/', then 1 to 199 bytes without '/', "
				   "not . or ..; e.g. /rangeshim-job42)", v);
	if ((v = s->value[SET_PATHS])) {
		int n = 0;

		if (strlen(v) >= RS_PATHS_BUF)
			return usage_error("bad --paths: longer than %s bytes", "4095");
		for (const char *p = v; *p; p += strcspn(p, ":")) {
			p += strspn(p, ":");
			if (!*p)
				break;
			if (*p != '/') {
				char msg[PATH_MAX + 64];

				snprintf(msg, sizeof msg, "bad --paths '%%s': entry '%.*s' is not "
					 "absolute", (int)strcspn(p, ":"), p);
				return usage_error(msg, v);
			}
			n++;
		}
		if (n == 0)
			return usage_error("bad --paths '%s': no absolute path or glob", v);
		if (n > RS_MAX_PATHS)
			return usage_error("bad --paths '%s': more than 32 entries", v);
	}
	if ((v = s->value[SET_STATS]) && strcmp(v, "1") != 0 && strcmp(v, "0") != 0) {
		if (strlen(v) >= 512)
			return usage_error("bad --stats=PATH '%s': 512 bytes or more", v);
		if (make_parents(v) < 0) {
			fprintf(stderr, "rangeshim: --stats=%s: cannot make or write its directory: "
				"%s\n", v, strerror(errno));
			return EXIT_USAGE;
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
#ifdef RS_LIBDIR
	/* make install's LIBDIR, compiled in: a LIBDIR that is not ../lib
	 * (lib64, a multiarch directory). */
	if (is_regular_file(RS_LIBDIR "/" LIB_NAME) && (lib = realpath(RS_LIBDIR "/" LIB_NAME, NULL)))
		return lib;
#endif
	fprintf(stderr, "rangeshim: %s not found; tried", LIB_NAME);
	for (size_t i = 0; i < nrel; i++)
		fprintf(stderr, " %s%s", tried[i], i + 1 < nrel ? "," : ";");
#ifdef RS_LIBDIR
	fputs(" " RS_LIBDIR "/" LIB_NAME ";", stderr);
#endif
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
char *build_preload(const struct settings *s)
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
