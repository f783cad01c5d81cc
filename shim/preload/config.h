/* RANGESHIM_* environment variables, parsed once at start-up.
 * docs/configuration.md lists every variable and its default. */
#ifndef RS_CONFIG_H
#define RS_CONFIG_H

#include <stddef.h>

/* Ordered: each scope includes the ones below it (cluster runs node
 * scope too, and keeps it for files it refuses). */
enum rs_scope { RS_SCOPE_OFF = 0, RS_SCOPE_PROCESS = 1, RS_SCOPE_NODE = 2, RS_SCOPE_CLUSTER = 3 };
enum rs_lockmode { RS_LOCK_RANGE = 0, RS_LOCK_MUTEX = 1 };
enum rs_stats_mode { RS_STATS_OFF = 0, RS_STATS_STDERR = 1, RS_STATS_FILE = 2 };

#define RS_MAX_PATHS 32
#define RS_PATHS_BUF 4096

struct rs_config {
	enum rs_scope scope;          /* what the user asked for */
	enum rs_scope effective;      /* what runs (node falls back to process) */
	enum rs_lockmode lock;
	enum rs_stats_mode stats;
	int log_level;
	int custom_paths;             /* RANGESHIM_PATHS given and valid */
	int npaths;
	const char *paths[RS_MAX_PATHS];
	char stats_path[512];
	char shm_name[256];
	char cluster_fs[256];         /* RANGESHIM_CLUSTER_FS, commas, no blanks */
	char paths_buf[RS_PATHS_BUF];
	/* RANGESHIM_ONLY_CMDS / RANGESHIM_SKIP_CMDS (as libfaketime's
	 * FAKETIME_ONLY_CMDS / FAKETIME_SKIP_CMDS): comma-separated program
	 * names.  skipped: this program is left out by the user's choice, so
	 * effective is off; it says so at RANGESHIM_LOG=info and in its
	 * report. */
	char only_cmds[256], skip_cmds[256];
	int skipped;
};

/* get(name) returns the value or NULL; normally getenv.  Every invalid
 * value is reported on one stderr line and replaced by a safe default. */
void rs_config_load(struct rs_config *c, const char *(*get)(const char *name));

/* Is an absolute path coordinated under c? */
int rs_config_path_wanted(const struct rs_config *c, const char *path);

extern struct rs_config rs_cfg;

#endif
