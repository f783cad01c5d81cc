#ifndef RS_CLI_TABLE_H
#define RS_CLI_TABLE_H

#include "cli.h"
#include "iface.h"
#include "rangeshim/rangelock.h"
#include "nodelock.h"
#include "segment.h"

/*
 * ---- locks and clean: the node lock table ----
 *
 * The segment is untrusted memory (segment.h), and these commands must work
 * whether its processes are alive, dead or wrote garbage into it.  So they
 * never map it and never take its mutex: they pread a private copy (a torn
 * snapshot is fine for a listing, and a file shrunk under us gives a short
 * read, not a SIGBUS), validate that copy with rs_seg_check and then use
 * only the copy.  Liveness comes from the kernel: OFD lock probes through
 * our own open file description, which holds no lock itself.
 */


struct table_opts {
	char path[300];        /* /dev/shm/NAME */
	char name[256];        /* NAME as RANGESHIM_SHM says it ("" the default), which
				* also names the node's cluster agent */
	bool json, force;
	/* locks only: */
	bool noheadings, raw;
	bool noinaccessible;   /* -i: leave out rows without a path */
	bool bytes, output_all, list_columns;  /* -b, --output-all, -H */
	long pid;              /* -p: 0 for every process */
	const char *cols;      /* -o: NULL for the default columns */
	double watch;          /* --watch SECONDS: 0 for one listing */
	char **paths;          /* positional PATHs: only grants on these files */
	int npaths;
};

/* What /proc says about an attached process. */
struct proc_info {
	char comm[64];                /* escaped; "?" if /proc has no word on it */
	const char *state;            /* running, sleeping, stopped, ..., dead */
};

/* A validated private copy of the table, and an fd to probe liveness on. */
struct table {
	struct rs_seg_map map;        /* only fd is used, by rs_seg_alive */
	struct rs_segment *seg;       /* malloc'd copy, never the segment */
	bool alive[RS_NPROC];         /* LIVE slot whose process still holds its byte */
	struct proc_info proc[RS_NPROC];   /* of LIVE slots */
	uint64_t copied_ns;           /* CLOCK_MONOTONIC when seg was read (waiters' beats) */
};

/* The (dev, ino) of each open fd of a process, to name grants' files. */
struct fd_list {
	bool loaded;
	size_t n;
	struct fd_ent {
		uint64_t dev, ino;
		int fd;
	} *v;
};

int parse_table_opts(const struct command *cmd, int argc, char **argv, struct table_opts *o);
int open_table(const char *path, int *fd);
int read_table(int fd, struct rs_segment *seg, char *why, size_t whylen);
int load_table(const char *path, struct table *t, char *why, size_t whylen);
void free_table(struct table *t);
bool ours(const struct stat *st);
bool file_locked(int fd);
void load_fds(struct fd_list *l, int32_t pid);
void proc_info(struct proc_info *pi, int32_t pid, bool alive);

#endif
