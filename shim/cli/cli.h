/*
 * rangeshim: the command-line front end, one file per subcommand.
 *
 *   main.c      dispatch, usage and the shared option errors
 *   preload.c   the options of run and env, and finding the library
 *   run.c env.c locks.c clean.c stats.c check.c    the subcommands
 *   table.c     the one reader of the node lock table (locks, clean)
 *   text.c      escaping for terminals and JSON
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

struct command {
	const char *name;
	int (*fn)(const struct command *cmd, int argc, char **argv);
	const char *help;
};

int cmd_run(const struct command *cmd, int argc, char **argv);
int cmd_env(const struct command *cmd, int argc, char **argv);
int cmd_locks(const struct command *cmd, int argc, char **argv);
int cmd_clean(const struct command *cmd, int argc, char **argv);
int cmd_stats(const struct command *cmd, int argc, char **argv);
int cmd_check(const struct command *cmd, int argc, char **argv);

/* stats.c: merge JSON reports (files, or directories of *.json) and print
 * the job summary; returns how many reports were read, -1 on no memory. */
int stats_summary(FILE *out, char **paths, int npaths);

void usage(FILE *out);
int usage_error(const char *fmt, const char *arg);
bool is_one_of(const char *s, const char *const *allowed);
int getopt_error(int c, char **argv);

/* text.c */
uint64_t realtime_now_ns(void);
void escape_text(const char *in, char *out, size_t len);
void json_string(const char *s);
void format_age(char *buf, size_t len, uint64_t now, uint64_t since);

#endif
