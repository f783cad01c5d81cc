/*
 * rangeshim locks: list the node lock table's grants, like lslocks, and
 * next to them the cluster grants the node's agent holds through the
 * file system's lock manager (cluster scope, agentq.c): one row each, by
 * file and offset, before the node grants that lie inside it.
 */
#include "table.h"

#include "clusteragent.h"
#include "clusterlock.h"

#define MAX_BLOCKERS 32

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
	int32_t pid;
	uint64_t dev, ino, start, end, since_ns;
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
 * own rule (nodelock.c): same file, overlapping, not both SHARED or both
 * APPEND; a
 * malformed range counts as the whole file. */
static bool conflict(const struct row *a, const struct row *b)
{
	bool a_all = a->start >= a->end, b_all = b->start >= b->end;

	if (a->cluster || b->cluster || a->owner == b->owner || a->dev != b->dev ||
	    a->ino != b->ino)
		return false;
	if (a->mode == b->mode && (a->mode == RS_G_SHARED || a->mode == RS_G_APPEND))
		return false;
	return a_all || b_all || (a->start < b->end && b->start < a->end);
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

/* The HELD and WAIT grants of the copy and the agent's cluster grants,
 * sorted by file and offset. */
static struct row *collect_rows(const struct table *t, const struct agent_grants *a,
				size_t *nrows)
{
	struct fd_list *fds = calloc(RS_NPROC, sizeof(*fds));
	struct row *rows = calloc(RS_NGRANT + a->n, sizeof(*rows));
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
			.since_ns = g->since_ns, .ticket = g->ticket,
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
	if (r->cluster)	/* an OFD lock of the node's: write, or read on a
			 * file the user may not write */
		return r->rdlck ? "CLUSTER-RD" : "CLUSTER";
	return r->mode == RS_G_EXSH ? "EXSH" : r->mode == RS_G_APPEND ? "APPEND" : "SHARED";
}

/* What /proc says about the row's holder (the agent may have no slot). */
static const struct proc_info *row_proc(const struct table *t, const struct row *r)
{
	static const struct proc_info unknown = { "?", "?" };

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
 * what, and whom for.  The explanation issue 8 asks for: a reader stuck
 * behind a `dd` stopped with Ctrl-Z is told so, with the way out.
 */
static void print_waiters(const struct table *t, const struct row *rows, size_t n, uint64_t now)
{
	for (size_t i = 0; i < n; i++) {
		const struct row *r = &rows[i];
		const uint32_t *who = r->nblockers ? r->blockers : r->ahead;
		uint32_t nwho = r->nblockers ? r->nblockers : r->nahead;
		char age[32], range[48], desc[256];

		if (r->state != RS_G_WAIT)
			continue;
		format_age(age, sizeof(age), now, r->since_ns);
		if (r->end == RS_RANGE_EOF)
			snprintf(range, sizeof(range), "%" PRIu64 "-EOF", r->start);
		else
			snprintf(range, sizeof(range), "%" PRIu64 "-%" PRIu64, r->start, r->end);
		printf("waiting: pid %d (%s) for %s %s, %s so far, ", (int)r->pid,
		       t->proc[r->owner].comm, mode_name(r), range, age);
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

/* The text columns, as lslocks: default order, minimum width, alignment. */
enum { C_COMMAND, C_PID, C_PSTATE, C_STATE, C_MODE, C_USERS, C_WANTED, C_AGE,
       C_BLOCKER, C_RANGE, C_DEVINO, C_PATH, NCOLS };

static const struct column {
	const char *name;
	int width;
	bool right;
} columns[NCOLS] = {
	{ "COMMAND", 15, false }, { "PID", 7, true }, { "PSTATE", 8, false },
	{ "STATE", 5, false }, { "MODE", 6, false }, { "USERS", 5, true },
	{ "WANTED", 6, false }, { "AGE", 7, true }, { "BLOCKER", 15, false },
	{ "RANGE", 23, false }, { "DEV:INO", 14, false }, { "PATH", 0, false },
};

/* The chosen columns: "-o" as lslocks takes it (comma-separated names, any
 * case; "+LIST" adds to the default ones).  Returns how many, or -1 after
 * one line on stderr. */
static int parse_columns(const char *spec, int *sel)
{
	int n = 0;

	if (!spec || *spec == '+') {
		for (int c = 0; c < NCOLS; c++)
			sel[n++] = c;
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
				"STATE,MODE,USERS,WANTED,AGE,BLOCKER,RANGE,DEV:INO,PATH)\n",
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
	case C_USERS: snprintf(tmp, sizeof(tmp), "%u", r->users); break;
	case C_WANTED: text = r->state == RS_G_WAIT ? "-" : r->wanted ? "yes" : "no"; break;
	case C_AGE: format_age(tmp, sizeof(tmp), now, r->since_ns); break;
	case C_BLOCKER:
		if (r->state == RS_G_WAIT)
			format_pids(tmp, sizeof(tmp), t, r->blockers, r->nblockers, 3);
		else
			text = "-";
		break;
	case C_RANGE:
		if (r->end == RS_RANGE_EOF)
			snprintf(tmp, sizeof(tmp), "%" PRIu64 "-EOF", r->start);
		else
			snprintf(tmp, sizeof(tmp), "%" PRIu64 "-%" PRIu64, r->start, r->end);
		break;
	case C_DEVINO:
		snprintf(tmp, sizeof(tmp), "%u:%u:%" PRIu64, major((dev_t)r->dev),
			 minor((dev_t)r->dev), r->ino);
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
	char line[512];
	unsigned shown = 0;

	for (size_t i = 0; i < n; i++) {
		const struct row *r = &rows[i];

		if (!r->cluster)
			continue;
		if (!r->busy) {
			shown++;
			continue;
		}
		printf("cluster: %u:%u:%" PRIu64 " %s: grants not read, the agent is giving one "
		       "back (it waits for the calls inside)\n", major((dev_t)r->dev),
		       minor((dev_t)r->dev), r->ino, r->path ? r->path : "?");
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
	unsigned held = 0, waiting = 0, live = 0, dead = 0;

	print_table(t, rows, n, sel, nsel, o, now);
	/* The waiter lines and the summary are for people: --raw is for
	 * programs, which get the rows only. */
	if (o->raw)
		return;
	for (size_t i = 0; i < n; i++) {
		if (rows[i].cluster)
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

/* "dev": "M:m", "ino": N, "path": P (a row's file). */
static void json_file(const struct row *r)
{
	printf("\"dev\": \"%u:%u\", \"ino\": %" PRIu64 ", \"path\": ", major((dev_t)r->dev),
	       minor((dev_t)r->dev), r->ino);
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

		if (r->cluster)
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
	putchar(']');
	json_cluster(t, rows, n, a, now);
	fputs("}\n", stdout);
}

/*
 * Keep the rows of -p PID and of the PATHs (matched by dev:ino, as the
 * table knows files).  After find_blockers: a waiter kept keeps the pids
 * of its blockers even when their rows go.
 */
static size_t filter_rows(struct row *rows, size_t n, long pid, const struct stat *files,
			  int nfiles)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		bool keep = !pid || rows[i].pid == pid;
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
	n = filter_rows(rows, n, o->pid, files, o->npaths);
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
	nsel = parse_columns(o.cols, sel);
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
