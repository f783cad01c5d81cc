/*
 * rangeshim stats FILE...|DIR: merge the per-process JSON reports of one job
 * (RANGESHIM_STATS=PATH, shim/stats.c rs_stats_json) into one summary, as
 * Darshan's job summary does for its counters.  `run --stats` prints the
 * same summary for the processes it started.
 *
 * The report is one flat object: "pid" and one unsigned number per
 * counter.  Counters are read generically, by name, so a library with
 * more counters (the uncovered_* ones) needs no change here; a string
 * value is kept only under "program"/"comm"/"exe", and nested values are
 * skipped.  A file that is not such an object gets one line and is left
 * out: the summary says how many were.
 */
#include "cli.h"

#define MAX_KEYS 96
#define KEY_LEN 48

struct report {
	long pid;
	char program[64];
	unsigned nkeys;
	char key[MAX_KEYS][KEY_LEN];
	unsigned long long val[MAX_KEYS];
};

struct job {
	unsigned nreports, nbad;
	unsigned nkeys;
	char key[MAX_KEYS][KEY_LEN];
	unsigned long long total[MAX_KEYS];
	struct report *rep;           /* nreports of them */
};

/* ---- a small JSON reader, for the one flat object of a report ---- */

struct src {
	const char *p, *end;
};

static void ws(struct src *s)
{
	while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
		s->p++;
}

/* A string into out (truncated, escapes kept as the escaped byte); -1 if bad. */
static int str(struct src *s, char *out, size_t len)
{
	size_t o = 0;

	if (s->p >= s->end || *s->p != '"')
		return -1;
	for (s->p++; s->p < s->end && *s->p != '"'; s->p++) {
		if ((unsigned char)*s->p < 0x20)
			return -1;
		if (*s->p == '\\' && ++s->p >= s->end)
			return -1;
		if (o + 1 < len)
			out[o++] = *s->p;
	}
	if (s->p >= s->end)
		return -1;
	s->p++;
	if (len)
		out[o] = '\0';
	return 0;
}

static int skip_value(struct src *s, int depth);

static int skip_container(struct src *s, int depth, char close)
{
	char tmp[1];

	s->p++;
	ws(s);
	if (s->p < s->end && *s->p == close)
		return s->p++, 0;
	for (;;) {
		ws(s);
		if (close == '}') {
			if (str(s, tmp, 0) < 0)
				return -1;
			ws(s);
			if (s->p >= s->end || *s->p++ != ':')
				return -1;
		}
		if (skip_value(s, depth + 1) < 0)
			return -1;
		ws(s);
		if (s->p < s->end && *s->p == ',') {
			s->p++;
			continue;
		}
		if (s->p < s->end && *s->p == close)
			return s->p++, 0;
		return -1;
	}
}

static int skip_value(struct src *s, int depth)
{
	char tmp[1];

	ws(s);
	if (depth > 16 || s->p >= s->end)
		return -1;
	if (*s->p == '"')
		return str(s, tmp, 0);
	if (*s->p == '{')
		return skip_container(s, depth, '}');
	if (*s->p == '[')
		return skip_container(s, depth, ']');
	if (*s->p == '-' || (*s->p >= '0' && *s->p <= '9')) {
		while (s->p < s->end && strchr("+-.eE0123456789", *s->p))
			s->p++;
		return 0;
	}
	for (const char *const *w = (const char *const[]){ "true", "false", "null", NULL }; *w; w++)
		if ((size_t)(s->end - s->p) >= strlen(*w) && !memcmp(s->p, *w, strlen(*w)))
			return s->p += strlen(*w), 0;
	return -1;
}

/* An unsigned decimal that fits 64 bits; -1 otherwise (sign, fraction). */
static int number(struct src *s, unsigned long long *v)
{
	unsigned long long n = 0;
	const char *start = s->p;

	for (; s->p < s->end && *s->p >= '0' && *s->p <= '9'; s->p++) {
		unsigned d = (unsigned)(*s->p - '0');

		if (n > (~0ull - d) / 10)
			return -1;
		n = n * 10 + d;
	}
	if (s->p == start || (s->p < s->end && strchr(".eE", *s->p)))
		return -1;
	*v = n;
	return 0;
}

static int parse_report(const char *text, size_t len, struct report *r, char *why, size_t whylen)
{
	struct src s = { text, text + len };
	bool have_pid = false;

	memset(r, 0, sizeof(*r));
	ws(&s);
	if (s.p >= s.end || *s.p++ != '{')
		return snprintf(why, whylen, "not a JSON object"), -1;
	ws(&s);
	if (s.p < s.end && *s.p == '}')
		s.p++;
	else
		for (;;) {
			char key[KEY_LEN];
			unsigned long long v;

			ws(&s);
			if (str(&s, key, sizeof(key)) < 0)
				return snprintf(why, whylen, "bad key at byte %td", s.p - text), -1;
			ws(&s);
			if (s.p >= s.end || *s.p++ != ':')
				return snprintf(why, whylen, "no ':' after \"%s\"", key), -1;
			ws(&s);
			if (s.p < s.end && *s.p == '"' &&
			    (!strcmp(key, "program") || !strcmp(key, "comm") || !strcmp(key, "exe"))) {
				if (str(&s, r->program, sizeof(r->program)) < 0)
					return snprintf(why, whylen, "bad string for \"%s\"", key), -1;
			} else if (s.p < s.end && *s.p >= '0' && *s.p <= '9') {
				if (number(&s, &v) < 0)
					return snprintf(why, whylen, "\"%s\" is not a counter", key), -1;
				if (!strcmp(key, "pid")) {
					r->pid = v <= 0x7fffffff ? (long)v : -1;
					have_pid = true;
				} else if (r->nkeys < MAX_KEYS) {
					snprintf(r->key[r->nkeys], KEY_LEN, "%s", key);
					r->val[r->nkeys++] = v;
				}
			} else if (skip_value(&s, 1) < 0) {
				return snprintf(why, whylen, "bad value for \"%s\"", key), -1;
			}
			ws(&s);
			if (s.p < s.end && *s.p == ',') {
				s.p++;
				continue;
			}
			if (s.p < s.end && *s.p == '}') {
				s.p++;
				break;
			}
			return snprintf(why, whylen, "truncated or malformed after \"%s\"", key), -1;
		}
	ws(&s);
	if (s.p != s.end)
		return snprintf(why, whylen, "text after the object"), -1;
	if (!have_pid || !r->nkeys)
		return snprintf(why, whylen, "not a rangeshim stats report (no pid and counters)"), -1;
	return 0;
}

/* ---- the job ---- */

static void add_report(struct job *j, const char *path)
{
	char buf[65536], why[160];
	struct report *rep;
	ssize_t n = -1;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

	if (fd >= 0) {
		n = read(fd, buf, sizeof(buf));
		if (n == (ssize_t)sizeof(buf)) {
			errno = EFBIG;
			n = -1;
		}
		close(fd);
	}
	if (n < 0) {
		fprintf(stderr, "rangeshim: skipping %s: %s\n", path, strerror(errno));
		j->nbad++;
		return;
	}
	rep = realloc(j->rep, (j->nreports + 1) * sizeof(*rep));
	if (!rep) {
		fprintf(stderr, "rangeshim: skipping %s: %s\n", path, strerror(ENOMEM));
		j->nbad++;
		return;
	}
	j->rep = rep;
	rep += j->nreports;
	if (parse_report(buf, (size_t)n, rep, why, sizeof(why)) < 0) {
		fprintf(stderr, "rangeshim: skipping %s: %s\n", path, why);
		j->nbad++;
		return;
	}
	j->nreports++;
	for (unsigned i = 0; i < rep->nkeys; i++) {
		unsigned k = 0;

		while (k < j->nkeys && strcmp(j->key[k], rep->key[i]))
			k++;
		if (k == j->nkeys) {
			if (k == MAX_KEYS)
				continue;
			memcpy(j->key[k], rep->key[i], KEY_LEN);
			j->nkeys++;
		}
		/* Saturate: a total that wrapped would be a lie. */
		j->total[k] = j->total[k] + rep->val[i] < j->total[k] ? ~0ull
								  : j->total[k] + rep->val[i];
	}
}

static int json_file_name(const struct dirent *e)
{
	size_t n = strlen(e->d_name);

	return n > 5 && !strcmp(e->d_name + n - 5, ".json");
}

static void add_path(struct job *j, const char *path)
{
	struct dirent **names;
	struct stat st;
	int n;

	if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode)) {
		add_report(j, path);
		return;
	}
	n = scandir(path, &names, json_file_name, alphasort);
	if (n < 0) {
		fprintf(stderr, "rangeshim: skipping %s: %s\n", path, strerror(errno));
		j->nbad++;
		return;
	}
	for (int i = 0; i < n; i++) {
		char *p;

		if (asprintf(&p, "%s/%s", path, names[i]->d_name) >= 0) {
			add_report(j, p);
			free(p);
		}
		free(names[i]);
	}
	free(names);
}

static unsigned long long value(const struct report *r, const char *key)
{
	for (unsigned i = 0; i < r->nkeys; i++)
		if (!strcmp(r->key[i], key))
			return r->val[i];
	return 0;
}

static unsigned long long total(const struct job *j, const char *key, bool *found)
{
	for (unsigned k = 0; k < j->nkeys; k++)
		if (!strcmp(j->key[k], key))
			return *found = true, j->total[k];
	return *found = false, 0;
}

/*
 * "N calls coordinated; not coordinated: io_uring (3), stdio (2)", from
 * io_calls and every uncovered_* counter the reports carry.
 */
static void print_coverage_line(FILE *out, const struct job *j)
{
	bool found, any_key = false;
	unsigned long long calls = total(j, "io_calls", &found);
	const char *sep = "";

	fprintf(out, "%llu calls coordinated; not coordinated: ", calls);
	for (unsigned k = 0; k < j->nkeys; k++) {
		if (strncmp(j->key[k], "uncovered_", 10))
			continue;
		any_key = true;
		if (!j->total[k])
			continue;
		fprintf(out, "%s%s (%llu)", sep, j->key[k] + 10, j->total[k]);
		sep = ", ";
	}
	if (!any_key)
		fputs("not counted by this library (its reports have no uncovered_* counters)", out);
	else if (!*sep)
		fputs("none seen", out);
	fputc('\n', out);
}

/* Per-process rows when there is more than one: the counters that say who
 * did the I/O and who waited. */
static void print_rows(FILE *out, const struct job *j)
{
	static const char *const cols[] = { "io_calls", "lock_waits", "node_waits",
					    "bytes_read", "bytes_written" };

	fprintf(out, "  %-8s %-16s", "PID", "PROGRAM");
	for (size_t c = 0; c < sizeof(cols) / sizeof(cols[0]); c++)
		fprintf(out, " %14s", cols[c]);
	fputc('\n', out);
	for (unsigned i = 0; i < j->nreports; i++) {
		const struct report *r = &j->rep[i];
		char prog[64];

		escape_text(r->program[0] ? r->program : "-", prog, sizeof(prog));
		fprintf(out, "  %-8ld %-16s", r->pid, prog);
		for (size_t c = 0; c < sizeof(cols) / sizeof(cols[0]); c++)
			fprintf(out, " %14llu", value(r, cols[c]));
		fputc('\n', out);
	}
}

static int report_cmp(const void *a, const void *b)
{
	const struct report *x = a, *y = b;

	return (x->pid > y->pid) - (x->pid < y->pid);
}

static void print_job(FILE *out, struct job *j)
{
	fprintf(out, "rangeshim job summary: %u process report(s)", j->nreports);
	if (j->nbad)
		fprintf(out, ", %u file(s) skipped", j->nbad);
	fputs("\n", out);
	if (!j->nreports)
		return;
	for (unsigned k = 0; k < j->nkeys; k++)
		fprintf(out, "  %-22s %20llu\n", j->key[k], j->total[k]);
	if (j->nreports > 1) {
		qsort(j->rep, j->nreports, sizeof(*j->rep), report_cmp);
		print_rows(out, j);
	}
	print_coverage_line(out, j);
}

int stats_summary(FILE *out, char **paths, int npaths)
{
	struct job *j = calloc(1, sizeof(*j));
	unsigned n;

	if (!j) {
		perror("rangeshim");
		return -1;
	}
	for (int i = 0; i < npaths; i++)
		add_path(j, paths[i]);
	print_job(out, j);
	n = j->nreports;
	free(j->rep);
	free(j);
	return (int)n;
}

int cmd_stats(const struct command *cmd, int argc, char **argv)
{
	int c;

	(void)cmd;
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, "+:h",
				(const struct option[]){ { "help", no_argument, NULL, 'h' },
							 { NULL, 0, NULL, 0 } }, NULL)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return 0;
		}
		return getopt_error(c, argv);
	}
	if (optind >= argc)
		return usage_error("%s", "stats: name the report files or their directory");
	if (stats_summary(stdout, argv + optind, argc - optind) <= 0)
		return 1;
	return fflush(stdout) == 0 ? 0 : 1;
}
