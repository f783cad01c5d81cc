/*
 * rangeshim: the command-line front end, one file per subcommand.
 *
 *   main.c      dispatch and the shared option errors
 *   iface.c     the interface declared once: subcommands, options, variables
 *   preload.c   the options of run and env, and finding the library
 *   run.c env.c locks.c clean.c stats.c check.c    the subcommands
 *   table.c     the one reader of the node lock table (locks, clean)
 *   text.c      escaping for terminals and JSON
 *   agent.c     runs the node's agent (shim/cluster/agent.c); agentq.c asks
 *               it for its grants
 *
 * The command only prepares an environment and execs; it never loads the
 * library itself, so nothing here runs inside the application.
 */
#ifndef RS_CLI_H
#define RS_CLI_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "iface.h"

#ifndef RS_VERSION
#define RS_VERSION "0.1.0"
#endif

#define LIB_NAME "librangeshim.so"

/* Exit statuses follow env(1) and timeout(1). */
enum {
	EXIT_USAGE = 2,        /* bad usage or no library to preload */
	EXIT_CANNOT_INVOKE = 126,
	EXIT_ENOENT = 127,
};

/* A subcommand; its synopsis, options and help are in iface.c. */
struct command {
	const char *name;
	int (*fn)(const struct command *cmd, int argc, char **argv);
};

int cmd_run(const struct command *cmd, int argc, char **argv);
int cmd_env(const struct command *cmd, int argc, char **argv);
int cmd_locks(const struct command *cmd, int argc, char **argv);
int cmd_clean(const struct command *cmd, int argc, char **argv);
int cmd_stats(const struct command *cmd, int argc, char **argv);
int cmd_check(const struct command *cmd, int argc, char **argv);

/* stats.c: merge JSON reports (files, or directories of *.json) and print
 * the job summary; returns how many reports were read, -1 on no memory. */
int stats_summary(FILE *out, char **paths, int npaths, bool json);

void usage(FILE *out);
int usage_error(const char *fmt, const char *arg);
bool is_one_of(const char *s, const char *const *allowed);
int getopt_error(int c, char **argv);

/* agentq.c: the cluster grants of the node's agent for node table shm
 * ("" the default), as the library finds that agent. */
struct agent_grant {
	uint64_t dev, ino, start, end;   /* end RS_CL_EOF: to the end */
	uint64_t users, held_ns;
	unsigned flags;                  /* RS_AG_L_* (clusteragent.h) */
};
enum { AGENT_NONE, AGENT_OK, AGENT_SILENT, AGENT_FOREIGN };
struct agent_grants {
	int state;                       /* AGENT_*; only AGENT_OK has grants */
	int32_t pid;                     /* the agent's (FOREIGN: the squatter's); 0 unknown */
	uint32_t uid;                    /* FOREIGN: the squatter's */
	size_t n;
	struct agent_grant *v;
};
int agent_grants(const char *shm, struct agent_grants *a);
void agent_grants_free(struct agent_grants *a);
/* One line (no newline) saying what a listing found. */
void agent_grants_why(char *buf, size_t len, const struct agent_grants *a, const char *shm);

/* text.c */
uint64_t realtime_now_ns(void);
void escape_text(const char *in, char *out, size_t len);
void json_string(const char *s);
void json_fstring(FILE *out, const char *s);
void format_age(char *buf, size_t len, uint64_t now, uint64_t since);

#endif
