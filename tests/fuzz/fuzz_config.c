/*
 * libFuzzer harness for the configuration parser (config.c):
 * rs_config_load and rs_config_path_wanted.
 *
 * The input is split at NUL bytes into up to seven values: RANGESHIM_SCOPE,
 * RANGESHIM_LOCK, RANGESHIM_PATHS, RANGESHIM_STATS, RANGESHIM_LOG,
 * RANGESHIM_SHM, and a path to ask rs_config_path_wanted about.  A variable
 * whose value is missing is unset (NULL).  After loading, the harness
 * asserts the parser's promises:
 *   - every field holds a known value;
 *   - safety is never turned off by a bad value: the scope is "off" only
 *     for exactly "off", the lock is "mutex" only for exactly "mutex";
 *   - the segment name is "/" and at most 200 bytes with no other "/";
 *   - the path list points into the config's own buffer, absolute entries
 *     only, at most RS_MAX_PATHS;
 *   - without a valid RANGESHIM_PATHS, the default set applies (/tmp yes,
 *     /proc no, /dev/shm yes).
 * Invalid values print one line each on stderr; run.sh runs the fuzzer
 * with -close_fd_mask=2 to keep them out of its log.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

#define NVAL 7

static const char *vals[NVAL];
static const char *const names[NVAL - 1] = {
	"RANGESHIM_SCOPE", "RANGESHIM_LOCK", "RANGESHIM_PATHS",
	"RANGESHIM_STATS", "RANGESHIM_LOG", "RANGESHIM_SHM",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *get(const char *name)
{
	for (int i = 0; i < NVAL - 1; i++)
		if (strcmp(name, names[i]) == 0)
			return vals[i];
	return NULL;
}

static void check(int ok)
{
	if (!ok)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct rs_config c;
	char *buf = malloc(size + 1);
	size_t at = 0;
	int n = 0;

	if (!buf)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0';
	for (int i = 0; i < NVAL; i++)
		vals[i] = NULL;
	/* "a\0b\0c": values a, b, c; a trailing NUL ends the last value. */
	while (n < NVAL && at <= size) {
		if (at == size && (size == 0 || buf[size - 1] == '\0'))
			break;
		vals[n++] = buf + at;
		at += strlen(buf + at) + 1;
	}

	rs_config_load(&c, get);

	check(c.scope <= RS_SCOPE_NODE && c.effective == c.scope);
	check(c.lock <= RS_LOCK_MUTEX);
	check(c.stats <= RS_STATS_FILE);
	check(c.log_level >= 0 && c.log_level <= 3);
	check((c.scope == RS_SCOPE_OFF) == (vals[0] && strcmp(vals[0], "off") == 0));
	check((c.lock == RS_LOCK_MUTEX) == (vals[1] && strcmp(vals[1], "mutex") == 0));
	if (c.stats == RS_STATS_FILE)
		check(c.stats_path[0] != '\0' &&
		      memchr(c.stats_path, '\0', sizeof(c.stats_path)) != NULL);
	check(memchr(c.shm_name, '\0', sizeof(c.shm_name)) != NULL);
	check(c.shm_name[0] == '\0' ||
	      (c.shm_name[0] == '/' && strlen(c.shm_name) <= 200 && !strchr(c.shm_name + 1, '/')));
	check(c.npaths >= 0 && c.npaths <= RS_MAX_PATHS);
	check(c.custom_paths == (c.npaths > 0));
	for (int i = 0; i < c.npaths; i++)
		check(c.paths[i] >= c.paths_buf && c.paths[i] < c.paths_buf + sizeof(c.paths_buf) &&
		      c.paths[i][0] == '/');
	if (!c.custom_paths) {
		check(rs_config_path_wanted(&c, "/tmp/x") == 1);
		check(rs_config_path_wanted(&c, "/dev/shm/x") == 1);
		check(rs_config_path_wanted(&c, "/proc/self/status") == 0);
	}
	if (vals[NVAL - 1] && vals[NVAL - 1][0] == '/') {
		int w = rs_config_path_wanted(&c, vals[NVAL - 1]);

		check(w == 0 || w == 1);
	}
	rs_config_path_wanted(&c, "/");
	rs_config_path_wanted(&c, "/scratch/job1/out.dat");
	free(buf);
	return 0;
}
