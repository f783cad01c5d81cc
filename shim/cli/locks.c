/*
 * rangeshim locks: list the node lock table's grants, like lslocks, and
 * next to them the cluster grants the node's agent holds through the
 * file system's lock manager (cluster scope, agentq.c): one row each, by
 * file and offset, before the node grants that lie inside it.  The
 * kernel's own locks (/proc/locks: fcntl, OFD, flock) on the files of the
 * table, or open in an attached process, are rows of their own kind, so
 * a job stuck in its own lock does not look idle.
 */
#include "table.h"

#include <signal.h>

#include "clusteragent.h"
#include "clusterlock.h"
#include "fileid.h"
#include "stride.h"

#define MAX_BLOCKERS 32
#define MAX_KERNEL 4096   /* kernel locks listed at most */

/* One grant, copied out of the table with its holder resolved. */
struct row {
	uint32_t idx, owner, state, mode, users, ticket;
	bool wanted, alive;
	/* A WAIT entry that holds later requests back: starved, and its
	 * owner scanned within RS_PRESENT_NS (nodelock.c, "Fairness"). */
	bool present;
	/* A cluster grant of the node's agent (owner: the agent's slot, or
	 * RS_NPROC if it has none); busy: its file's grants are unknown (the
	 * agent is giving one back), a line, not a row of the table. */
	bool cluster, busy, rdlck;
	/* A kernel lock from /proc/locks: its type, read or write, and for
	 * a blocked request the pid of the lock it waits behind (0: none
	 * known).  kpi: its process, which may not be attached. */
	const char *ktype;
	bool kwrite;
	int32_t kblocker;
	struct proc_info kpi;
	int32_t pid;
	uint64_t dev, ino, start, end, since_ns;
	/* A strided grant's blocks (nodelock.c, "Strided grants"): blen
	 * bytes every stride bytes from start; stride 0: all of the range. */
	uint64_t stride, blen;
	char *path;                   /* malloc'd, or NULL if not found */
	/* A WAIT entry: the process slots whose HELD grants block it (as
	 * lslocks' BLOCKER), and those queued ahead of it on its range. */
	uint32_t nblockers, nahead;   /* how many; the first MAX_BLOCKERS are kept */
	uint32_t blockers[MAX_BLOCKERS], ahead[MAX_BLOCKERS];
};


/* The path of (dev, ino) as process slot p has it open, or NULL. */
static char *path_in(const struct table *t, struct fd_list *fds, uint32_t p,
		     uint64_t dev, uint64_t ino)
{
	int32_t pid = t->seg->procs[p].pid;

	if (pid <= 0)
		return NULL;
	if (!fds[p].loaded)
		load_fds(&fds[p], pid);
	for (size_t i = 0; i < fds[p].n; i++) {
		char link[64], target[PATH_MAX];
		ssize_t n;

		if (fds[p].v[i].dev != dev || fds[p].v[i].ino != ino)
			continue;
		snprintf(link, sizeof(link), "/proc/%d/fd/%d", (int)pid, fds[p].v[i].fd);
		n = readlink(link, target, sizeof(target) - 1);
		if (n > 0) {
			target[n] = '\0';
			return strdup(target);
		}
	}
	return NULL;
}

/* The path of (dev, ino) as process pid (not attached) has it open. */
static char *path_of_pid(int32_t pid, uint64_t dev, uint64_t ino)
{
	struct fd_list l = { 0 };
	char *path = NULL;

	load_fds(&l, pid);
	for (size_t i = 0; i < l.n && !path; i++) {
		char link[64], target[PATH_MAX];
		ssize_t n;

		if (l.v[i].dev != dev || l.v[i].ino != ino)
			continue;
		snprintf(link, sizeof(link), "/proc/%d/fd/%d", (int)pid, l.v[i].fd);
		n = readlink(link, target, sizeof(target) - 1);
		if (n > 0) {
			target[n] = '\0';
			path = strdup(target);
		}
	}
	free(l.v);
	return path;
}

/* Name a grant's file: from its holder's fds first, else any live process's
 * (a holder may keep a cached grant on a file it has just closed). */
static char *find_path(const struct table *t, struct fd_list *fds, const struct row *r)
{
	char *path = r->alive ? path_in(t, fds, r->owner, r->dev, r->ino) : NULL;

	for (uint32_t p = 0; p < RS_NPROC && !path; p++)
		if (t->alive[p] && p != r->owner)
			path = path_in(t, fds, p, r->dev, r->ino);
	return path;
}

static int row_cmp(const void *a, const void *b)
{
	const struct row *x = a, *y = b;

	if (x->dev != y->dev)
		return x->dev < y->dev ? -1 : 1;
	if (x->ino != y->ino)
		return x->ino < y->ino ? -1 : 1;
	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	if (x->cluster != y->cluster)	/* the cluster grant, then those inside */
		return x->cluster ? -1 : 1;
	return (int)x->state - (int)y->state;
}

/* Do grants a and b of two processes exclude each other?  The table's
 * own rule (nodelock.c): same file, sharing a byte (block by block for
 * strided grants, stride.h), not both SHARED or both APPEND; a malformed
 * range counts as the whole file. */
static bool conflict(const struct row *a, const struct row *b)
{
	bool a_all = a->start >= a->end, b_all = b->start >= b->end;

	if (a->cluster || b->cluster || a->ktype || b->ktype || a->owner == b->owner || a->dev != b->dev ||
	    a->ino != b->ino)
		return false;
	if (a->mode == b->mode && (a->mode == RS_G_SHARED || a->mode == RS_G_APPEND))
		return false;
	return a_all || b_all ||
	       rs_stride_meet(a->start, a->end, a->stride, a->blen, b->start, b->end, b->stride,
			      b->blen);
}

static void add_slot(uint32_t *v, uint32_t *n, uint32_t slot)
{
	for (uint32_t i = 0; i < *n && i < MAX_BLOCKERS; i++)
		if (v[i] == slot)
			return;
	if (*n < MAX_BLOCKERS)
		v[*n] = slot;
	(*n)++;
}

/*
 * What a WAIT entry waits for: the processes whose HELD grants conflict
 * with it (lslocks' BLOCKER), and those whose conflicting requests were
 * queued before it and hold it back (starved, their owners running:
 * it goes after them).  The holders those wait for block it too, and are
 * listed as its BLOCKERs: a stopped waiter holds nobody back, so the
 * process at the root of a queue is always a holder.
 */
static void find_blockers(const struct row *rows, size_t n, struct row *w)
{
	for (size_t i = 0; i < n; i++) {
		const struct row *h = &rows[i];

		if (h == w || !conflict(h, w))
			continue;
		if (h->state == RS_G_HELD) {
			add_slot(w->blockers, &w->nblockers, h->owner);
		} else if (h->present && h->ticket < w->ticket) {
			add_slot(w->ahead, &w->nahead, h->owner);
			for (size_t j = 0; j < n; j++)
				if (rows[j].state == RS_G_HELD && conflict(&rows[j], h))
					add_slot(w->blockers, &w->nblockers, rows[j].owner);
		}
	}
}

/* The process slot of the agent (pid), or RS_NPROC. */
static uint32_t agent_slot(const struct table *t, int32_t pid)
{
	for (uint32_t p = 0; pid > 0 && p < RS_NPROC; p++)
		if (atomic_load(&t->seg->procs[p].state) == RS_PROC_LIVE &&
		    t->seg->procs[p].pid == pid)
			return p;
	return RS_NPROC;
}

/* Is (dev, ino) a file of the rows, or open in a live attached process
 * (fds of every live slot, loaded here)?  Never the table's own file,
 * which every attached process has open and OFD-locks for liveness. */
static bool coordinated(const struct table *t, struct fd_list *fds, const struct row *rows,
			size_t n, const struct stat *seg, uint64_t dev, uint64_t ino)
{
	if (dev == (uint64_t)seg->st_dev && ino == (uint64_t)seg->st_ino)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!rows[i].ktype && rows[i].dev == dev && rows[i].ino == ino)
			return true;
	for (uint32_t p = 0; p < RS_NPROC; p++) {
		if (!t->alive[p])
			continue;
		if (!fds[p].loaded)
			load_fds(&fds[p], t->seg->procs[p].pid);
		for (size_t i = 0; i < fds[p].n; i++)
			if (fds[p].v[i].dev == dev && fds[p].v[i].ino == ino)
				return true;
	}
	return false;
}

/* Is this OFD lock the agent's: a cluster grant listed as such already,
 * or its grant and intent byte spaces past RS_CL_EOF (clusterlock.h)? */
static bool agents_own(const struct row *rows, size_t n, const char *type, uint64_t dev,
		       uint64_t ino, uint64_t start, const char *endw)
{
	uint64_t end = !strcmp(endw, "EOF") ? RS_RANGE_EOF : strtoull(endw, NULL, 10) + 1;

	if (!strcmp(type, "OFDLCK") && start >= RS_CL_EOF)
		return true;
	for (size_t i = 0; i < n && !strcmp(type, "OFDLCK"); i++)
		if (rows[i].cluster && rows[i].dev == dev && rows[i].ino == ino &&
		    rows[i].start == start && rows[i].end == end)
			return true;
	return false;
}

/* The slot of a live attached process pid, or RS_NPROC. */
static uint32_t live_slot(const struct table *t, int32_t pid)
{
	for (uint32_t p = 0; pid > 0 && p < RS_NPROC; p++)
		if (t->alive[p] && t->seg->procs[p].pid == pid)
			return p;
	return RS_NPROC;
}

/*
 * The kernel's locks on coordinated files, from /proc/locks, appended at
 * rows + n (room for max).  A line is "ID: [-> ]TYPE ADVISORY MODE PID
 * MAJ:MIN:INO START END", MAJ:MIN in hex, END inclusive or EOF; a "->"
 * line is a request blocked behind the lock of the same ID before it.
 * OFD locks have no pid (-1): the process is the one that opened the
 * description, which the kernel does not say.
 */
static size_t kernel_rows(const struct table *t, struct fd_list *fds, struct row *rows, size_t n,
			  size_t max)
{
	FILE *f = fopen("/proc/locks", "re");
	char line[256];
	struct stat seg;
	size_t n0 = n;
	int32_t holder_pid = 0;
	unsigned holder_id = 0;

	if (!f)
		return n;
	if (fstat(t->map.fd, &seg) < 0)
		memset(&seg, 0, sizeof seg);
	while (n < max && fgets(line, sizeof line, f)) {
		char type[16], adv[16], mode[16], endw[24], *p = line;
		unsigned id, maj, min;
		unsigned long long ino, start;
		int pid, used;
		bool blocked;
		struct row *r = &rows[n];

		if (sscanf(p, "%u:%n", &id, &used) != 1)
			continue;
		p += used;
		p += strspn(p, " ");
		blocked = !strncmp(p, "->", 2);
		if (blocked)
			p += 2;
		if (sscanf(p, "%15s %15s %15s %d %x:%x:%llu %llu %23s", type, adv, mode, &pid, &maj,
			   &min, &ino, &start, endw) != 9)
			continue;
		if (!blocked) {
			holder_id = id;
			holder_pid = pid;
		}
		if (strcmp(type, "POSIX") && strcmp(type, "OFDLCK") && strcmp(type, "FLOCK"))
			continue;	/* leases and delegations lock no bytes */
		if (!coordinated(t, fds, rows, n0, &seg, (uint64_t)makedev(maj, min), ino) ||
		    agents_own(rows, n0, type, (uint64_t)makedev(maj, min), ino, start, endw))
			continue;
		*r = (struct row){
			.ktype = !strcmp(type, "POSIX") ? "POSIX" : !strcmp(type, "FLOCK") ? "FLOCK" :
				 "OFDLCK",
			.kwrite = strcmp(mode, "READ") != 0,
			.state = blocked ? RS_G_WAIT : RS_G_HELD,
			.kblocker = blocked && holder_id == id ? holder_pid : 0,
			.pid = pid, .dev = (uint64_t)makedev(maj, min), .ino = ino, .start = start,
			.end = !strcmp(endw, "EOF") ? RS_RANGE_EOF : strtoull(endw, NULL, 10) + 1,
		};
		r->owner = live_slot(t, pid);
		r->alive = pid > 0 && (r->owner < RS_NPROC || kill(pid, 0) == 0 || errno == EPERM);
		if (r->owner < RS_NPROC) {
			r->kpi = t->proc[r->owner];
		} else if (pid > 0) {
			proc_info(&r->kpi, pid, r->alive);
		} else {
			snprintf(r->kpi.comm, sizeof r->kpi.comm, "?");
			r->kpi.state = "?";
			r->alive = true;	/* an OFD lock lives as long as its description */
		}
		r->path = r->owner < RS_NPROC ? path_in(t, fds, r->owner, r->dev, r->ino) :
			  pid > 0 ? path_of_pid(pid, r->dev, r->ino) : NULL;
		for (uint32_t s = 0; s < RS_NPROC && !r->path; s++)
			if (t->alive[s])
				r->path = path_in(t, fds, s, r->dev, r->ino);
		n++;
	}
	fclose(f);
	return n;
}

/* The HELD and WAIT grants of the copy and the agent's cluster grants,
 * sorted by file and offset. */
static struct row *collect_rows(const struct table *t, const struct agent_grants *a,
				size_t *nrows)
{
	struct fd_list *fds = calloc(RS_NPROC, sizeof(*fds));
	struct row *rows = calloc(RS_NGRANT + a->n + MAX_KERNEL, sizeof(*rows));
	uint32_t aslot = agent_slot(t, a->pid);
	uint64_t now = realtime_now_ns();
	size_t n = 0;

	if (!fds || !rows) {
		free(fds);
		free(rows);
		return NULL;
	}
	for (uint32_t i = 0; i < RS_NGRANT; i++) {
		const struct rs_seg_grant *g = &t->seg->grants[i];
		uint32_t st = atomic_load(&g->state);
		struct row *r = &rows[n];

		if (st != RS_G_HELD && st != RS_G_WAIT)
			continue;
		/* rs_seg_check vetted the copy; the index is checked again
		 * where it is used, as everywhere else. */
		if (g->owner >= RS_NPROC)
			continue;
		*r = (struct row){
			.idx = i, .owner = g->owner, .state = st, .mode = g->mode,
			.users = RS_GW_USERS(atomic_load(&g->gw)),
			.wanted = RS_GW_WANTED(atomic_load(&g->gw)) != 0,
			.alive = t->alive[g->owner],
			.pid = t->seg->procs[g->owner].pid,
			.dev = g->dev, .ino = g->ino, .start = g->start, .end = g->end,
			.stride = rs_stride_ok(g->start, g->end, g->stride, g->blen) ? g->stride : 0,
			.blen = g->blen, .since_ns = g->since_ns, .ticket = g->ticket,
			.present = st == RS_G_WAIT && (g->flags & RS_WF_STARVED) &&
				   (int64_t)(t->copied_ns - g->beat_ns) < (int64_t)RS_PRESENT_NS,
		};
		r->path = find_path(t, fds, r);
		n++;
	}
	for (size_t i = 0; i < a->n; i++) {
		const struct agent_grant *g = &a->v[i];
		struct row *r = &rows[n++];

		*r = (struct row){
			.idx = (uint32_t)i, .owner = aslot, .state = RS_G_HELD, .mode = RS_G_EXSH,
			.users = (uint32_t)g->users, .wanted = g->flags & RS_AG_L_WANTED,
			.alive = aslot < RS_NPROC && t->alive[aslot], .pid = a->pid,
			.dev = g->dev, .ino = g->ino, .start = g->start,
			.end = g->end >= RS_CL_EOF ? RS_RANGE_EOF : g->end,
			.since_ns = now - g->held_ns, .cluster = true,
			.busy = g->flags & RS_AG_L_BUSY, .rdlck = g->flags & RS_AG_L_RDLCK,
		};
		r->path = find_path(t, fds, r);
	}
	n = kernel_rows(t, fds, rows, n, RS_NGRANT + a->n + MAX_KERNEL);
	/* A file no attached process has open may be named by a kernel
	 * lock's process. */
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < n && !rows[i].path; j++)
			if (rows[j].path && rows[j].dev == rows[i].dev && rows[j].ino == rows[i].ino)
				rows[i].path = strdup(rows[j].path);
	for (uint32_t p = 0; p < RS_NPROC; p++)
		free(fds[p].v);
	free(fds);
	qsort(rows, n, sizeof(*rows), row_cmp);
	for (size_t i = 0; i < n; i++)
		if (rows[i].state == RS_G_WAIT)
			find_blockers(rows, n, &rows[i]);
	*nrows = n;
	return rows;
}

static const char *mode_name(const struct row *r)
{
	static const char *const kmodes[][2] = { { "POSIX:READ", "POSIX:WRITE" },
		{ "OFDLCK:READ", "OFDLCK:WRITE" }, { "FLOCK:READ", "FLOCK:WRITE" } };

	if (r->ktype)
		return kmodes[r->ktype[0] == 'P' ? 0 : r->ktype[0] == 'O' ? 1 : 2][r->kwrite];
	if (r->cluster)	/* an OFD lock of the node's: write, or read on a
			 * file the user may not write */
		return r->rdlck ? "CLUSTER-RD" : "CLUSTER";
	return r->mode == RS_G_EXSH ? "EXSH" : r->mode == RS_G_APPEND ? "APPEND" : "SHARED";
}

/* What /proc says about the row's holder (the agent may have no slot). */
static const struct proc_info *row_proc(const struct table *t, const struct row *r)
{
	static const struct proc_info unknown = { "?", "?" };

	if (r->ktype)
		return &r->kpi;
	return r->owner < RS_NPROC ? &t->proc[r->owner] : &unknown;
}

static const char *state_name(uint32_t state)
{
	return state == RS_G_WAIT ? "WAIT" : "HELD";
}

static int32_t slot_pid(const struct table *t, uint32_t slot)
{
	return slot < RS_NPROC ? t->seg->procs[slot].pid : 0;
}

/* "1234,5678" (at most max of them, then "+N"), or "-" if there are none. */
static void format_pids(char *buf, size_t len, const struct table *t, const uint32_t *slots,
			uint32_t n, uint32_t max)
{
	size_t o = 0;

	snprintf(buf, len, "-");
	for (uint32_t i = 0; i < n && i < MAX_BLOCKERS && o + 16 < len; i++) {
		int32_t pid = slot_pid(t, slots[i]);

		if (i == max) {
			snprintf(buf + o, len - o, ",+%u", n - i);
			return;
		}
		if (pid > 0)
			o += (size_t)snprintf(buf + o, len - o, "%s%d", i ? "," : "", (int)pid);
		else
			o += (size_t)snprintf(buf + o, len - o, "%s?", i ? "," : "");
	}
	if (n > MAX_BLOCKERS && o + 16 < len)
		snprintf(buf + o, len - o, ",+%u", n - MAX_BLOCKERS);
}

/* "pid 1234 (dd), stopped (SIGSTOP or Ctrl-Z; SIGCONT resumes it)" */
static void describe_slot(char *buf, size_t len, const struct table *t, uint32_t slot)
{
	int32_t pid = slot_pid(t, slot);

	if (slot < RS_NPROC && t->alive[slot] && pid > 0)
		rs_nt_describe(pid, buf, len);
	else if (pid > 0)
		snprintf(buf, len, "pid %d, dead (its grants go to the next waiter)", (int)pid);
	else
		snprintf(buf, len, "slot %u, dead", slot);
}

/*
 * One line per WAIT entry, after the table: who waits, how long, for
 * what, and whom for, so that a stuck waiter can be explained: a reader
 * stuck behind a `dd` stopped with Ctrl-Z is told so, with the way out.
 */
static void print_waiters(const struct table *t, const struct row *rows, size_t n, uint64_t now)
{
	for (size_t i = 0; i < n; i++) {
		const struct row *r = &rows[i];
		const uint32_t *who = r->nblockers ? r->blockers : r->ahead;
		uint32_t nwho = r->nblockers ? r->nblockers : r->nahead;
		char age[32], range[48], desc[256], id[RS_FILE_ID_LEN], path[PATH_MAX * 4];

		if (r->state != RS_G_WAIT)
			continue;
		escape_text(r->path ? r->path : "?", path, sizeof path);
		format_age(age, sizeof(age), now, r->since_ns);
		if (r->end == RS_RANGE_EOF)
			snprintf(range, sizeof(range), "%" PRIu64 "-EOF", r->start);
		else
			snprintf(range, sizeof(range), "%" PRIu64 "-%" PRIu64, r->start, r->end);
		if (r->ktype)
			format_age(age, sizeof(age), 1, 0);	/* the kernel does not say */
		printf("waiting: pid %d (%s) for %s %s of file %s %s, %s so far, ", (int)r->pid,
		       row_proc(t, r)->comm, mode_name(r), range,
		       rs_file_id(id, sizeof id, r->dev, r->ino), path, age);
		if (r->ktype) {
			/* The kernel queues it, not the table: its own lock. */
			if (r->kblocker > 0) {
				rs_nt_describe(r->kblocker, desc, sizeof(desc));
				printf("blocked in the kernel by the lock of %s\n", desc);
			} else {
				puts("blocked in the kernel by an OFD lock (no pid)");
			}
			continue;
		}
		if (!nwho) {
			/* Nothing in its way: it takes the range when it next
			 * runs; a stopped waiter holds nobody back meanwhile. */
			if (t->proc[r->owner].state && !strcmp(t->proc[r->owner].state, "stopped"))
				puts("on nobody now; it is stopped and holds nobody back (it takes "
				     "the range when it runs, if the range is free)");
			else
				puts("on nobody now (about to be granted)");
			continue;
		}
		fputs(r->nblockers ? "blocked by " : "queued behind the earlier request of ", stdout);
		for (uint32_t k = 0; k < nwho && k < 4 && k < MAX_BLOCKERS; k++) {
			describe_slot(desc, sizeof(desc), t, who[k]);
			printf("%s%s", k ? "; " : "", desc);
		}
		if (nwho > 4)
			printf("; and %u more", nwho - 4);
		putchar('\n');
	}
}

/* The text columns, as lslocks: default order, minimum width, alignment.
 * The first NDEFAULT are the default ones; --output-all shows all. */
enum { C_COMMAND, C_PID, C_PSTATE, C_STATE, C_MODE, C_USERS, C_WANTED, C_AGE,
       C_BLOCKER, C_RANGE, C_DEVINO, C_PATH, NDEFAULT,
       C_TYPE = NDEFAULT, C_START, C_END, C_SIZE, NCOLS };

static const struct column {
	const char *name;
	int width;
	bool right;
	const char *help;
} columns[NCOLS] = {
	{ "COMMAND", 15, false, "the holder's command, (dead) if its liveness lock is gone" },
	{ "PID", 7, true, "the holder's pid" },
	{ "PSTATE", 8, false, "the holder's process state: running, sleeping, stopped, ..." },
	{ "STATE", 5, false, "HELD, or WAIT for a queued request" },
	{ "MODE", 6, false, "EXSH, SHARED, APPEND, CLUSTER; kernel locks TYPE:READ or TYPE:WRITE" },
	{ "USERS", 5, true, "calls in progress inside the grant" },
	{ "WANTED", 6, false, "whether another process asked for it back" },
	{ "AGE", 7, true, "time since it was granted, or queued" },
	{ "BLOCKER", 15, false, "for a WAIT entry, the pids whose locks block it" },
	{ "RANGE", 23, false, "START-END in bytes, END excluded; EOF: to infinity; a strided "
			      "grant adds \"stride S len L\": only L bytes every S" },
	{ "DEV:INO", 14, false, "the file, major:minor:inode" },
	{ "PATH", 0, false, "the file's path, ? if no process shows it" },
	{ "TYPE", 7, false, "NODE (table grant), CLUSTER (agent), POSIX, OFDLCK or FLOCK (kernel)" },
	{ "START", 10, true, "first byte of the range" },
	{ "END", 10, true, "last byte of the range (included, as lslocks), EOF: to infinity" },
	{ "SIZE", 6, true, "bytes in the range (lslocks: the file's size), human-readable unless --bytes" },
};

/* --bytes: SIZE in bytes. */
static bool size_in_bytes;

/* lslocks -H: the columns and what they mean. */
static void list_columns(void)
{
	printf("%-8s %s\n", "COLUMN", "MEANING");
	for (int c = 0; c < NCOLS; c++)
		printf("%-8s %s%s\n", columns[c].name, columns[c].help, c < NDEFAULT ? "" : " (-o)");
}

/* 4096 -> "4K", as lslocks' SIZE (powers of 1024). */
static void human_size(char *buf, size_t len, uint64_t v)
{
	static const char units[] = "BKMGTPE";
	int u = 0;
	double d = (double)v;

	while (d >= 1024 && u < 6) {
		d /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%" PRIu64 "B", v);
	else if (d < 10 && d != (double)(uint64_t)d)
		snprintf(buf, len, "%.1f%c", d, units[u]);
	else
		snprintf(buf, len, "%.0f%c", d, units[u]);
}

/* The chosen columns: "-o" as lslocks takes it (comma-separated names, any
 * case; "+LIST" adds to the default ones).  Returns how many, or -1 after
 * one line on stderr. */
static int parse_columns(const char *spec, int *sel)
{
	int n = 0;

	if (!spec || *spec == '+' || !strcmp(spec, "all")) {
		for (int c = 0; c < (spec && !strcmp(spec, "all") ? NCOLS : NDEFAULT); c++)
			sel[n++] = c;
		if (spec && !strcmp(spec, "all"))
			return n;
		if (!spec)
			return n;
		spec++;
	}
	for (const char *p = spec;; p++) {
		size_t l = strcspn(p, ",");
		int c = 0;

		while (c < NCOLS && !(strlen(columns[c].name) == l &&
				      !strncasecmp(columns[c].name, p, l)))
			c++;
		if (c == NCOLS || n == 4 * NCOLS) {
			fprintf(stderr, "rangeshim: %s column '%.*s' (columns: COMMAND,PID,PSTATE,"
				"STATE,MODE,USERS,WANTED,AGE,BLOCKER,RANGE,DEV:INO,PATH,TYPE,START,"
				"END,SIZE; 'rangeshim locks -H' says what they mean)\n",
				c == NCOLS ? "unknown" : "too many", (int)l, p);
			return -1;
		}
		sel[n++] = c;
		p += l;
		if (!*p)
			return n;
	}
}

/* Cell c of row r, escaped; with raw, spaces too, so that fields split. */
static void format_cell(char *buf, size_t len, const struct table *t, const struct row *r,
			int c, uint64_t now, bool raw)
{
	const struct proc_info *pi = row_proc(t, r);
	char tmp[PATH_MAX * 4 + 1];
	const char *text = tmp;

	switch (c) {
	case C_COMMAND: text = r->alive ? pi->comm : "(dead)"; break;
	case C_PID:
		if (r->pid > 0)
			snprintf(tmp, sizeof(tmp), "%d", (int)r->pid);
		else
			text = "?";
		break;
	case C_PSTATE: text = r->alive ? pi->state : "dead"; break;
	case C_STATE: text = state_name(r->state); break;
	case C_MODE: text = mode_name(r); break;
	case C_USERS:
		if (r->ktype)
			text = "-";
		else
			snprintf(tmp, sizeof(tmp), "%u", r->users);
		break;
	case C_WANTED:
		text = r->state == RS_G_WAIT || r->ktype ? "-" : r->wanted ? "yes" : "no";
		break;
	case C_TYPE: text = r->ktype ? r->ktype : r->cluster ? "CLUSTER" : "NODE"; break;
	case C_START: snprintf(tmp, sizeof(tmp), "%" PRIu64, r->start); break;
	case C_END:
		if (r->end == RS_RANGE_EOF)
			text = "EOF";
		else
			snprintf(tmp, sizeof(tmp), "%" PRIu64, r->end > r->start ? r->end - 1 : r->start);
		break;
	case C_SIZE:
		if (r->end == RS_RANGE_EOF)
			text = "EOF";
		else if (size_in_bytes)
			snprintf(tmp, sizeof(tmp), "%" PRIu64, r->end - r->start);
		else
			human_size(tmp, sizeof(tmp), r->end - r->start);
		break;
	case C_AGE: format_age(tmp, sizeof(tmp), now, r->since_ns); break;
	case C_BLOCKER:
		if (r->ktype && r->state == RS_G_WAIT && r->kblocker > 0)
			snprintf(tmp, sizeof(tmp), "%d", (int)r->kblocker);
		else if (r->ktype)
			text = "-";
		else if (r->state == RS_G_WAIT)
			format_pids(tmp, sizeof(tmp), t, r->blockers, r->nblockers, 3);
		else
			text = "-";
		break;
	case C_RANGE:
		if (r->end == RS_RANGE_EOF)
			snprintf(tmp, sizeof(tmp), "%" PRIu64 "-EOF", r->start);
		else if (r->stride)	/* only its blocks: say which */
			snprintf(tmp, sizeof(tmp), "%" PRIu64 "-%" PRIu64 " stride %" PRIu64
				 " len %" PRIu64, r->start, r->end, r->stride, r->blen);
		else
			snprintf(tmp, sizeof(tmp), "%" PRIu64 "-%" PRIu64, r->start, r->end);
		break;
	case C_DEVINO:
		rs_file_id(tmp, sizeof(tmp), r->dev, r->ino);
		break;
	default:
		/* comm is escaped already (table.c); a path is any bytes. */
		escape_text(r->path ? r->path : "?", tmp, sizeof(tmp));
		break;
	}
	if (!raw) {
		snprintf(buf, len, "%s", text);
		return;
	}
	size_t o = 0;
	for (const char *p = text; *p && o + 5 < len; p++) {
		if (*p == ' ' || *p == '\\')
			o += (size_t)snprintf(buf + o, len - o, "\\x%02x", (unsigned char)*p);
		else
			buf[o++] = *p;
	}
	buf[o] = '\0';
}

/* Rows as columns: aligned (widths grow to the longest cell, the last
 * column is not padded), or raw (one space between fields, as lslocks). */
static void print_table(const struct table *t, const struct row *rows, size_t n,
			const int *sel, int nsel, const struct table_opts *o, uint64_t now)
{
	int width[4 * NCOLS];
	char cell[PATH_MAX * 4 + 1];

	for (int k = 0; k < nsel; k++) {
		width[k] = o->raw ? 0 : columns[sel[k]].width;
		for (size_t i = 0; i < n && !o->raw && k < nsel - 1; i++) {
			if (rows[i].busy)
				continue;
			format_cell(cell, sizeof(cell), t, &rows[i], sel[k], now, false);
			if ((int)strlen(cell) > width[k])
				width[k] = (int)strlen(cell);
		}
		if (k == nsel - 1)
			width[k] = 0;
	}
	for (size_t i = 0; n && i <= n; i++) {
		if ((i == 0 && o->noheadings) || (i && rows[i - 1].busy))
			continue;
		for (int k = 0; k < nsel; k++) {
			const struct column *c = &columns[sel[k]];

			if (i)
				format_cell(cell, sizeof(cell), t, &rows[i - 1], sel[k], now, o->raw);
			else
				snprintf(cell, sizeof(cell), "%s", c->name);
			printf("%s%*s", k ? " " : "", c->right ? width[k] : -width[k], cell);
		}
		putchar('\n');
	}
}

/* After the node table's summary: the files whose cluster grants the
 * agent could not read (it is giving one back, waiting for the calls
 * inside: the WAIT lines say whom for), and one line about the agent. */
static void print_cluster(const struct row *rows, size_t n, const struct table_opts *o,
			  const struct agent_grants *a)
{
	const char *scope = getenv("RANGESHIM_SCOPE");
	char line[512];
	unsigned shown = 0, cluster = 0;

	/* Cluster lines belong to cluster scope: an agent that answers, a
	 * cluster grant, or a caller in cluster scope, who wants to hear
	 * that no agent runs. */
	for (size_t i = 0; i < n; i++)
		cluster += rows[i].cluster;
	if (!cluster && a->state == AGENT_NONE && !(scope && !strcmp(scope, "cluster")))
		return;
	for (size_t i = 0; i < n; i++) {
		const struct row *r = &rows[i];

		if (!r->cluster)
			continue;
		if (!r->busy) {
			shown++;
			continue;
		}
		char id[RS_FILE_ID_LEN], path[PATH_MAX * 4];

		escape_text(r->path ? r->path : "?", path, sizeof path);
		printf("cluster: %s %s: grants not read, the agent is giving one "
		       "back (it waits for the calls inside)\n", rs_file_id(id, sizeof id, r->dev, r->ino),
		       path);
	}
	if (a->state == AGENT_OK && (o->pid || o->npaths) && shown != a->n)
		printf("cluster: %u of the agent's %zu grants shown (pid %d holds them)\n", shown,
		       a->n, (int)a->pid);
	else {
		agent_grants_why(line, sizeof(line), a, o->name);
		printf("cluster: %s\n", line);
	}
}

static void print_rows_text(const struct table *t, const struct row *rows, size_t n,
			    const int *sel, int nsel, const struct table_opts *o,
			    const struct agent_grants *a)
{
	uint64_t now = realtime_now_ns();
	unsigned held = 0, waiting = 0, live = 0, dead = 0, kernel = 0;

	print_table(t, rows, n, sel, nsel, o, now);
	/* The waiter lines and the summary are for people: --raw is for
	 * programs, which get the rows only. */
	if (o->raw)
		return;
	for (size_t i = 0; i < n; i++) {
		kernel += rows[i].ktype != NULL;
		if (rows[i].cluster || rows[i].ktype)
			continue;
		if (rows[i].state == RS_G_WAIT)
			waiting++;
		else
			held++;
	}
	print_waiters(t, rows, n, now);
	for (uint32_t p = 0; p < RS_NPROC; p++) {
		if (atomic_load(&t->seg->procs[p].state) != RS_PROC_LIVE)
			continue;
		if (o->pid && t->seg->procs[p].pid != o->pid)
			continue;
		if (t->alive[p])
			live++;
		else
			dead++;
	}
	printf("%u grants held, %u waiting, %u live processes", held, waiting, live);
	if (dead)
		printf(", %u dead (not yet reclaimed)", dead);
	if (kernel)
		printf("; %u kernel lock(s) (fcntl, OFD, flock) on these files", kernel);
	putchar('\n');
	print_cluster(rows, n, o, a);
}

/* A slot that never recorded a pid says 0 or garbage: null, not a pid. */
static void json_pid(int32_t pid)
{
	if (pid > 0)
		printf("%d", (int)pid);
	else
		fputs("null", stdout);
}

/* "COMMAND", "process_state": "STATE" (the caller has written the key
 * "command": before). */
static void json_proc(const struct proc_info *pi, bool alive)
{
	if (alive && strcmp(pi->comm, "?"))
		json_string(pi->comm);
	else
		fputs("null", stdout);
	fputs(", \"process_state\": ", stdout);
	json_string(alive ? pi->state : "dead");
}

/* The pids of process slots, as a JSON array (null for a slot without one). */
static void json_pids(const struct table *t, const uint32_t *slots, uint32_t n)
{
	putchar('[');
	for (uint32_t i = 0; i < n && i < MAX_BLOCKERS; i++) {
		fputs(i ? ", " : "", stdout);
		json_pid(slot_pid(t, slots[i]));
	}
	putchar(']');
}

/* "file": "M:m:I", "dev": "M:m", "ino": N, "path": P (a row's file). */
static void json_file(const struct row *r)
{
	char id[RS_FILE_ID_LEN];

	printf("\"file\": \"%s\", \"dev\": \"%u:%u\", \"ino\": %" PRIu64 ", \"path\": ",
	       rs_file_id(id, sizeof id, r->dev, r->ino), major((dev_t)r->dev), minor((dev_t)r->dev),
	       r->ino);
	json_string(r->path);
}

/* The file and range of a row, then its mode. */
static void json_range(const struct row *r)
{
	json_file(r);
	printf(", \"start\": %" PRIu64 ", \"end\": ", r->start);
	if (r->end == RS_RANGE_EOF)
		fputs("null", stdout);
	else
		printf("%" PRIu64, r->end);
	if (r->stride)
		printf(", \"stride\": %" PRIu64 ", \"len\": %" PRIu64, r->stride, r->blen);
	printf(", \"mode\": \"%s\"", mode_name(r));
}

/* The row's holder and use: pid to process_state. */
static void json_holder(const struct table *t, const struct row *r, uint64_t now)
{
	fputs(", \"pid\": ", stdout);
	json_pid(r->pid);
	printf(", \"alive\": %s, \"users\": %u, \"wanted\": %s, \"age_ns\": ",
	       r->alive ? "true" : "false", r->users, r->wanted ? "true" : "false");
	if (r->since_ns == 0 || r->since_ns > now)
		fputs("null", stdout);
	else
		printf("%" PRIu64, now - r->since_ns);
	fputs(", \"command\": ", stdout);
	json_proc(row_proc(t, r), r->alive);
}

/* "cluster": the node's agent and its grants (rows with cluster set). */
static void json_cluster(const struct table *t, const struct row *rows, size_t n,
			 const struct agent_grants *a, uint64_t now)
{
	static const char *const states[] = { [AGENT_NONE] = "none", [AGENT_OK] = "running",
		[AGENT_SILENT] = "no answer", [AGENT_FOREIGN] = "another user" };
	const char *sep = "";

	fputs(", \"cluster\": {\"agent\": ", stdout);
	json_string(states[a->state]);
	fputs(", \"pid\": ", stdout);
	json_pid(a->state == AGENT_NONE ? 0 : a->pid);
	fputs(", \"grants\": [", stdout);
	for (size_t i = 0; i < n; i++) {
		if (!rows[i].cluster || rows[i].busy)
			continue;
		printf("%s{", sep);
		json_range(&rows[i]);
		json_holder(t, &rows[i], now);
		putchar('}');
		sep = ", ";
	}
	fputs("], \"busy\": [", stdout);
	sep = "";
	for (size_t i = 0; i < n; i++) {
		if (!rows[i].busy)
			continue;
		printf("%s{", sep);
		json_file(&rows[i]);
		putchar('}');
		sep = ", ";
	}
	fputs("]}", stdout);
}

/* t may be NULL: no table, so nothing in it.  pid: only that process
 * (-p), or 0. */
static void print_rows_json(const char *path, const struct table *t,
			    const struct row *rows, size_t n, long pid,
			    const struct agent_grants *a)
{
	uint64_t now = realtime_now_ns();
	const char *sep = "";

	fputs("{\"segment\": ", stdout);
	json_string(path);
	fputs(", \"processes\": [", stdout);
	for (uint32_t p = 0; t && p < RS_NPROC; p++) {
		if (atomic_load(&t->seg->procs[p].state) != RS_PROC_LIVE ||
		    (pid && t->seg->procs[p].pid != pid))
			continue;
		printf("%s{\"slot\": %u, \"pid\": ", sep, p);
		json_pid(t->seg->procs[p].pid);
		printf(", \"alive\": %s, \"command\": ", t->alive[p] ? "true" : "false");
		json_proc(&t->proc[p], t->alive[p]);
		putchar('}');
		sep = ", ";
	}
	fputs("], \"grants\": [", stdout);
	sep = "";
	for (size_t i = 0; i < n; i++) {
		const struct row *r = &rows[i];

		if (r->cluster || r->ktype)
			continue;
		printf("%s{\"slot\": %u, ", sep, r->idx);
		sep = ", ";
		json_range(r);
		printf(", \"state\": \"%s\", \"owner\": %u", state_name(r->state), r->owner);
		json_holder(t, r, now);
		/* A WAIT entry: how long it has waited, and for whom. */
		fputs(", \"waited_ns\": ", stdout);
		if (r->state != RS_G_WAIT || r->since_ns == 0 || r->since_ns > now)
			fputs("null", stdout);
		else
			printf("%" PRIu64, now - r->since_ns);
		fputs(", \"blockers\": ", stdout);
		json_pids(t, r->blockers, r->nblockers);
		fputs(", \"queued_behind\": ", stdout);
		json_pids(t, r->ahead, r->nahead);
		putchar('}');
	}
	fputs("], \"kernel_locks\": [", stdout);
	sep = "";
	for (size_t i = 0; i < n; i++) {
		const struct row *r = &rows[i];

		if (!r->ktype)
			continue;
		printf("%s{", sep);
		sep = ", ";
		json_range(r);
		printf(", \"type\": \"%s\", \"state\": \"%s\", \"pid\": ", r->ktype,
		       state_name(r->state));
		json_pid(r->pid);
		fputs(", \"command\": ", stdout);
		json_proc(&r->kpi, r->alive);
		fputs(", \"blocker\": ", stdout);
		json_pid(r->kblocker);
		putchar('}');
	}
	putchar(']');
	json_cluster(t, rows, n, a, now);
	fputs("}\n", stdout);
}

/*
 * Keep the rows of -p PID and of the PATHs (matched by dev:ino, as the
 * table knows files), and with -i only those whose path is known (as
 * lslocks -i leaves out a lock whose path it cannot read: no process that
 * shows the file lets us see its descriptors, or none has it open).
 * After find_blockers: a waiter kept keeps the pids of its blockers even
 * when their rows go.
 */
static size_t filter_rows(struct row *rows, size_t n, long pid, const struct stat *files,
			  int nfiles, bool noinaccessible)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		bool keep = (!pid || rows[i].pid == pid) && (!noinaccessible || rows[i].path);
		bool file = nfiles == 0;

		for (int f = 0; f < nfiles && !file; f++)
			file = rows[i].dev == (uint64_t)files[f].st_dev &&
			       rows[i].ino == (uint64_t)files[f].st_ino;
		if (keep && file)
			rows[k++] = rows[i];
		else
			free(rows[i].path);
	}
	return k;
}

/* One listing; 0, or 1 when the table is unusable or output fails. */
static int list_once(const struct table_opts *o, const struct stat *files, const int *sel,
		     int nsel)
{
	struct table t;
	struct stat st;
	struct row *rows;
	struct agent_grants a = { .state = AGENT_NONE };
	char why[256];
	size_t n = 0;
	int rc = load_table(o->path, &t, why, sizeof(why));

	if (rc == 1) {
		/* No table, no locks: not an error. */
		if (o->json)
			print_rows_json(o->path, NULL, NULL, 0, o->pid, &a);
		else if (!o->raw)
			printf("no node lock table at %s\n", o->path);
		free_table(&t);
		return fflush(stdout) == 0 ? 0 : 1;
	}
	if (rc < 0) {
		if (t.map.fd >= 0)
			fprintf(stderr, "rangeshim: %s is not a usable node lock table: %s; "
				"the shim refuses it too%s\n", o->path, why,
				fstat(t.map.fd, &st) == 0 && ours(&st) ? " ('rangeshim clean' "
				"removes it once no process has it open)" : "");
		free_table(&t);
		return 1;
	}
	/* The node's cluster grants, from its agent (none: not an error). */
	agent_grants(o->name, &a);
	rows = collect_rows(&t, &a, &n);
	if (!rows) {
		perror("rangeshim");
		agent_grants_free(&a);
		free_table(&t);
		return 1;
	}
	n = filter_rows(rows, n, o->pid, files, o->npaths, o->noinaccessible);
	if (o->json)
		print_rows_json(o->path, &t, rows, n, o->pid, &a);
	else
		print_rows_text(&t, rows, n, sel, nsel, o, &a);
	for (size_t i = 0; i < n; i++)
		free(rows[i].path);
	free(rows);
	agent_grants_free(&a);
	free_table(&t);
	return fflush(stdout) == 0 ? 0 : 1;
}

int cmd_locks(const struct command *cmd, int argc, char **argv)
{
	struct table_opts o;
	struct stat *files;
	int sel[4 * NCOLS], nsel, rc = parse_table_opts(cmd, argc, argv, &o);

	if (rc >= 0)
		return rc;
	if (o.list_columns) {
		list_columns();
		return fflush(stdout) == 0 ? 0 : 1;
	}
	size_in_bytes = o.bytes;
	nsel = parse_columns(o.output_all ? "all" : o.cols, sel);
	if (nsel < 0)
		return EXIT_USAGE;
	files = calloc((size_t)o.npaths + 1, sizeof(*files));
	if (!files) {
		perror("rangeshim");
		return 1;
	}
	for (int i = 0; i < o.npaths; i++) {
		if (stat(o.paths[i], &files[i]) < 0) {
			fprintf(stderr, "rangeshim: locks: cannot stat '%s': %s\n", o.paths[i],
				strerror(errno));
			free(files);
			return 1;
		}
	}
	/* --watch: until interrupted, a timestamp line then a listing (for
	 * --json, one object a line, without the timestamp: JSON Lines).
	 * Each listing is flushed, so a pipe sees it at once. */
	for (;;) {
		if (o.watch && !o.json) {
			char stamp[64];
			struct timespec now;
			struct tm tm;

			clock_gettime(CLOCK_REALTIME, &now);
			strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S",
				 localtime_r(&now.tv_sec, &tm));
			printf("%s--- %s.%03ld, every %gs ---\n", rc == -1 ? "" : "\n", stamp,
			       now.tv_nsec / 1000000, o.watch);
		}
		rc = list_once(&o, files, sel, nsel);
		if (!o.watch)
			break;
		struct timespec ts = { (time_t)o.watch,
				       (long)((o.watch - (double)(time_t)o.watch) * 1e9) };
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
	free(files);
	return rc;
}
