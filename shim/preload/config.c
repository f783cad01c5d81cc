#include "config.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

struct rs_config rs_cfg;

static int parse_choice(const char *var, const char *val, const char *const *names,
			int n, int dflt, const char *dflt_name)
{
	for (int i = 0; i < n; i++)
		if (names[i] && strcmp(val, names[i]) == 0)
			return i;
	rs_log(RS_LOG_ERROR, "%s='%s' is not valid; using '%s'", var, val, dflt_name);
	return dflt;
}

static void load_scope(struct rs_config *c, const char *v)
{
	static const char *const names[] = { "off", "process", "node", "cluster" };

	c->scope = RS_SCOPE_NODE;
	if (v && *v)
		c->scope = parse_choice("RANGESHIM_SCOPE", v, names, 4, RS_SCOPE_NODE, "node");
	/* Node scope may still fall back to process scope at run time, with
	 * a warning, if the segment cannot be used (grants.c). */
	c->effective = c->scope;
}

static void load_lock(struct rs_config *c, const char *v)
{
	static const char *const names[] = { "range", "mutex" };

	c->lock = RS_LOCK_RANGE;
	if (v && *v)
		c->lock = parse_choice("RANGESHIM_LOCK", v, names, 2, RS_LOCK_RANGE, "range");
}

static void load_log(struct rs_config *c, const char *v)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };

	c->log_level = RS_LOG_WARN;
	if (!v || !*v)
		return;
	if (v[0] >= '0' && v[0] <= '3' && v[1] == '\0') {
		c->log_level = v[0] - '0';
		return;
	}
	c->log_level = parse_choice("RANGESHIM_LOG", v, names, 4, RS_LOG_WARN, "warn");
}

static void load_stats(struct rs_config *c, const char *v)
{
	c->stats = RS_STATS_OFF;
	if (!v || !*v || strcmp(v, "0") == 0)
		return;
	if (strcmp(v, "1") == 0) {
		c->stats = RS_STATS_STDERR;
		return;
	}
	if (strlen(v) >= sizeof(c->stats_path)) {
		rs_log(RS_LOG_ERROR, "RANGESHIM_STATS path is longer than %zu bytes; "
		       "printing the summary to stderr instead", sizeof(c->stats_path) - 1);
		c->stats = RS_STATS_STDERR;
		return;
	}
	strcpy(c->stats_path, v);
	c->stats = RS_STATS_FILE;
}

/* Bad entries are dropped, all named on one line; if none is left, the
 * default set applies: widening coverage is the safe direction. */
static void load_paths(struct rs_config *c, const char *v)
{
	static const char dflt[] = "using the default (every regular file outside /proc, /sys and /dev, "
				   "and /dev/shm)";
	char bad[256] = "";
	size_t nbad = 0;
	char *save = NULL;

	c->custom_paths = 0;
	c->npaths = 0;
	if (!v || !*v)
		return;
	if (strlen(v) >= sizeof(c->paths_buf)) {
		rs_log(RS_LOG_ERROR, "RANGESHIM_PATHS is longer than %zu bytes; %s",
		       sizeof(c->paths_buf) - 1, dflt);
		return;
	}
	strcpy(c->paths_buf, v);
	for (char *p = strtok_r(c->paths_buf, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
		if (p[0] != '/') {
			/* The list is cut short at sizeof(bad); the count is not. */
			if (nbad < sizeof(bad))
				nbad += (size_t)snprintf(bad + nbad, sizeof(bad) - nbad, "%s'%s'",
							 nbad ? ", " : "", p);
			continue;
		}
		if (c->npaths == RS_MAX_PATHS) {
			rs_log(RS_LOG_ERROR, "RANGESHIM_PATHS has more than %d entries; %s",
			       RS_MAX_PATHS, dflt);
			c->npaths = 0;
			return;
		}
		c->paths[c->npaths++] = p;
	}
	if (c->npaths == 0)
		rs_log(RS_LOG_ERROR, "RANGESHIM_PATHS='%s' has no absolute path or glob; %s", v, dflt);
	else if (nbad)
		rs_log(RS_LOG_ERROR, "RANGESHIM_PATHS entries %s are not absolute; "
		       "ignoring them and using the other %d", bad, c->npaths);
	c->custom_paths = c->npaths > 0;
}

/* Empty means the default table, which segment.c finds (a private
 * runtime directory, else /dev/shm). */
static void load_shm(struct rs_config *c, const char *v)
{
	c->shm_name[0] = '\0';
	if (v && *v) {
		/* segment.c puts it under /dev/shm and allows 200 bytes. */
		/* "/." and "/.." name /dev/shm itself or its parent: a
		 * directory, which would fail only at attach, leaving other
		 * processes uncoordinated. */
		if (v[0] == '/' && v[1] && strlen(v) <= 200 && !strchr(v + 1, '/') &&
		    strcmp(v, "/.") != 0 && strcmp(v, "/..") != 0) {
			strcpy(c->shm_name, v);
			return;
		}
		rs_log(RS_LOG_ERROR, "RANGESHIM_SHM='%s' is not a name like /rangeshim-%u "
		       "(a '/', then up to 199 bytes without '/', not . or ..); using the default table", v,
		       (unsigned)getuid());
	}
}

/* File-system type names to trust in cluster scope (clusterfs.c).  A
 * bad list is dropped whole: trusting fewer types is the safe side. */
static void load_cluster_fs(struct rs_config *c, const char *v)
{
	c->cluster_fs[0] = '\0';
	if (!v || !*v)
		return;
	if (strlen(v) >= sizeof(c->cluster_fs) || strspn(v, "abcdefghijklmnopqrstuvwxyz"
							 "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-,") != strlen(v) ||
	    v[0] == ',' || v[strlen(v) - 1] == ',' || strstr(v, ",,")) {
		rs_log(RS_LOG_ERROR, "RANGESHIM_CLUSTER_FS='%s' is not a comma-separated list of file "
		       "system types (as in /proc/self/mountinfo, at most %zu bytes); trusting none "
		       "beyond the built-in ones", v, sizeof(c->cluster_fs) - 1);
		return;
	}
	strcpy(c->cluster_fs, v);
}

/* Is name one of the comma-separated list? */
static int listed(const char *list, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = list; *p; p += strcspn(p, ","), p += *p == ',')
		if (strcspn(p, ",") == n && !strncmp(p, name, n))
			return 1;
	return 0;
}

/*
 * RANGESHIM_ONLY_CMDS and RANGESHIM_SKIP_CMDS, after libfaketime's
 * FAKETIME_ONLY_CMDS and FAKETIME_SKIP_CMDS: program names (the last part
 * of argv[0], as ps shows them), comma-separated.  A program left out runs
 * uncoordinated because the user asked for it, and says so (info); a bad
 * list, or both lists, leaves every program in: coordinating more is the
 * safe side.
 */
static void load_cmds(struct rs_config *c, const char *only, const char *skip, const char *prog)
{
	const char *what = NULL;

	c->only_cmds[0] = c->skip_cmds[0] = '\0';
	c->skipped = 0;
	if (only && *only && skip && *skip) {
		rs_log(RS_LOG_ERROR, "RANGESHIM_ONLY_CMDS and RANGESHIM_SKIP_CMDS are both set; "
		       "ignoring both: every program is coordinated");
		return;
	}
	for (int i = 0; i < 2; i++) {
		const char *v = i ? skip : only, *var = i ? "RANGESHIM_SKIP_CMDS" : "RANGESHIM_ONLY_CMDS";
		char *dst = i ? c->skip_cmds : c->only_cmds;

		if (!v || !*v)
			continue;
		if (strlen(v) >= sizeof(c->only_cmds) || v[0] == ',' || v[strlen(v) - 1] == ',' ||
		    strstr(v, ",,") || strpbrk(v, "/ \t")) {
			rs_log(RS_LOG_ERROR, "%s='%s' is not a comma-separated list of program names "
			       "(at most %zu bytes, no '/' or blanks); ignoring it: every program is "
			       "coordinated", var, v, sizeof(c->only_cmds) - 1);
			return;
		}
		strcpy(dst, v);
	}
	if (!prog || !*prog)
		return;
	if (c->only_cmds[0] && !listed(c->only_cmds, prog))
		what = "not in RANGESHIM_ONLY_CMDS";
	else if (c->skip_cmds[0] && listed(c->skip_cmds, prog))
		what = "in RANGESHIM_SKIP_CMDS";
	if (!what || c->scope == RS_SCOPE_OFF)
		return;
	c->skipped = 1;
	c->effective = RS_SCOPE_OFF;
	rs_log(RS_LOG_INFO, "%s is %s: its I/O is NOT coordinated (the user's choice)", prog, what);
}

void rs_config_load(struct rs_config *c, const char *(*get)(const char *name))
{
	memset(c, 0, sizeof(*c));
	/* The log level first, so that it governs the messages below. */
	load_log(c, get("RANGESHIM_LOG"));
	rs_log_level = c->log_level;
	load_scope(c, get("RANGESHIM_SCOPE"));
	load_lock(c, get("RANGESHIM_LOCK"));
	load_stats(c, get("RANGESHIM_STATS"));
	load_paths(c, get("RANGESHIM_PATHS"));
	load_shm(c, get("RANGESHIM_SHM"));
	load_cluster_fs(c, get("RANGESHIM_CLUSTER_FS"));
	load_cmds(c, get("RANGESHIM_ONLY_CMDS"), get("RANGESHIM_SKIP_CMDS"),
		  program_invocation_short_name);
}

static int under(const char *path, const char *prefix)
{
	size_t n = strlen(prefix);

	while (n > 1 && prefix[n - 1] == '/')
		n--;
	return strncmp(path, prefix, n) == 0 && (path[n] == '\0' || path[n] == '/' ||
						 (n == 1 && prefix[0] == '/'));
}

/* A glob names files or directories: "/scratch/job*" covers everything
 * below each matching directory, as a prefix would. */
static int glob_under(const char *path, const char *glob)
{
	char buf[4096];
	size_t n = strlen(path);

	if (n >= sizeof(buf))
		return 0;
	memcpy(buf, path, n + 1);
	for (;;) {
		char *slash;

		if (fnmatch(glob, buf, FNM_PATHNAME | FNM_PERIOD) == 0)
			return 1;
		slash = strrchr(buf, '/');
		if (!slash || slash == buf)
			return 0;
		*slash = '\0';
	}
}

int rs_config_path_wanted(const struct rs_config *c, const char *path)
{
	if (!c->custom_paths) {
		/* Kernel interfaces, not data; /dev/shm is ordinary tmpfs that
		 * processes share on purpose, so it stays coordinated. */
		if (under(path, "/proc") || under(path, "/sys"))
			return 0;
		return !under(path, "/dev") || under(path, "/dev/shm");
	}
	for (int i = 0; i < c->npaths; i++) {
		const char *p = c->paths[i];

		if (strpbrk(p, "*?[")) {
			if (glob_under(path, p))
				return 1;
		} else if (under(path, p)) {
			return 1;
		}
	}
	return 0;
}
