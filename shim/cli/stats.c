/*
 * rangeshim stats FILE...|DIR: merge the per-process JSON reports of one job
 * (RANGESHIM_STATS=PATH, shim/preload/stats.c rs_stats_json) into one summary, as
 * Darshan's job summary does for its counters.  `run --stats` prints the
 * same summary for the processes it started.
 *
 * The report is one object: "pid", "program", one unsigned number per
 * counter, "files", the files the process used most (path, dev, ino,
 * lock_waits, node_waits, wait_ns, calls, bytes_read, bytes_written,
 * uncovered; shim/preload/filewaits.c), and "files_other", the sums of its other
 * files.  Counters are
 * read generically, by name, so a library with more counters (the
 * uncovered_* ones) needs no change here; a string value is kept only
 * under "program"/"comm"/"exe", "files" is merged across processes by
 * dev:ino ("files_other" summed), and other nested values are skipped.
 * A file that is not such an object gets one line and is left out: the
 * summary says how many were.
 */
#include "cli.h"

#include <stddef.h>

#define MAX_KEYS 96
#define KEY_LEN 48

#define PATH_LEN 1024
#define MAX_REPORT_FILES 64   /* a report lists 16 (filewaits.h); room for more */
#define TOP_FILES 16          /* the text summary's rows */
#define TOP_FILES_JSON 256    /* --json's */

/* One entry of a report's "files", or of the job's merged list; or the
 * sums of files not listed ("files_other", with nfiles). */
struct file_waits {
	char path[PATH_LEN];          /* "" when the report had null */
	char dev[32];                 /* "major:minor", "" if absent */
	unsigned long long ino, lock_waits, node_waits, wait_ns;
	unsigned long long calls, bytes_read, bytes_written, uncovered, nfiles;
	unsigned procs;               /* reports that listed it (job list) */
};

struct report {
	long pid, ppid;
	unsigned long long uid, start_ns, end_ns;   /* ~0 uid: absent */
	char program[64];
	char host[64], cmdline[1024], job_id[64];
	char skipped[64];             /* why the user left it out, or "" */
	/* A program the shim could not be in (statically linked): why, and
	 * its path; such a report has no counters. */
	char uninstrumented[160], exe_path[256];
	unsigned nkeys;
	char key[MAX_KEYS][KEY_LEN];
	unsigned long long val[MAX_KEYS];
};

struct job {
	unsigned nreports, nbad;
	unsigned ninstrumented;       /* reports with counters */
	unsigned nkeys;
	char key[MAX_KEYS][KEY_LEN];
	unsigned long long total[MAX_KEYS];
	struct report *rep;           /* nreports of them */
	struct file_waits *files;     /* nfiles of them, merged by dev:ino */
	unsigned nfiles;
	struct file_waits other;      /* files no report listed, summed */
	/* The report being read: its "files", merged once it parses. */
	struct file_waits cur[MAX_REPORT_FILES];
	unsigned ncur;
	struct file_waits cur_other;
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

static int hex4(const char *p, const char *end, unsigned *v)
{
	*v = 0;
	if (end - p < 4)
		return -1;
	for (int i = 0; i < 4; i++) {
		char c = p[i];

		*v <<= 4;
		if (c >= '0' && c <= '9')
			*v |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			*v |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			*v |= (unsigned)(c - 'A' + 10);
		else
			return -1;
	}
	return 0;
}

/* Code point cp as UTF-8 into out[*o...], if it fits. */
static void put_utf8(char *out, size_t len, size_t *o, unsigned cp)
{
	unsigned char b[4];
	size_t n;

	if (cp < 0x80)
		b[0] = (unsigned char)cp, n = 1;
	else if (cp < 0x800)
		b[0] = (unsigned char)(0xc0 | cp >> 6), b[1] = (unsigned char)(0x80 | (cp & 0x3f)), n = 2;
	else if (cp < 0x10000)
		b[0] = (unsigned char)(0xe0 | cp >> 12), b[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f)),
		b[2] = (unsigned char)(0x80 | (cp & 0x3f)), n = 3;
	else
		b[0] = (unsigned char)(0xf0 | cp >> 18), b[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f)),
		b[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f)), b[3] = (unsigned char)(0x80 | (cp & 0x3f)),
		n = 4;
	if (*o + n < len) {
		memcpy(out + *o, b, n);
		*o += n;
	}
}

/* A JSON string into out, decoded (truncated to len); -1 if bad. */
static int str(struct src *s, char *out, size_t len)
{
	size_t o = 0;

	if (s->p >= s->end || *s->p != '"')
		return -1;
	for (s->p++; s->p < s->end && *s->p != '"'; s->p++) {
		unsigned cp, lo;
		char c = *s->p;

		if ((unsigned char)c < 0x20)
			return -1;
		if (c != '\\') {
			if (o + 1 < len)
				out[o++] = c;
			continue;
		}
		if (++s->p >= s->end)
			return -1;
		switch (*s->p) {
		case '"': case '\\': case '/': c = *s->p; break;
		case 'b': c = '\b'; break;
		case 'f': c = '\f'; break;
		case 'n': c = '\n'; break;
		case 'r': c = '\r'; break;
		case 't': c = '\t'; break;
		case 'u':
			if (hex4(s->p + 1, s->end, &cp) < 0)
				return -1;
			s->p += 4;
			if (cp >= 0xd800 && cp <= 0xdbff && s->end - s->p > 6 && s->p[1] == '\\' &&
			    s->p[2] == 'u' && hex4(s->p + 3, s->end, &lo) == 0 && lo >= 0xdc00 &&
			    lo <= 0xdfff) {
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
				s->p += 6;
			} else if (cp >= 0xd800 && cp <= 0xdfff) {
				cp = 0xfffd;   /* a lone surrogate */
			}
			if (len)
				put_utf8(out, len, &o, cp);
			continue;
		default:
			return -1;
		}
		if (o + 1 < len)
			out[o++] = c;
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

/* The numbers of a "files" object and where each goes. */
static const struct {
	const char *key;
	size_t off;
} file_nums[] = {
	{ "ino", offsetof(struct file_waits, ino) },
	{ "lock_waits", offsetof(struct file_waits, lock_waits) },
	{ "node_waits", offsetof(struct file_waits, node_waits) },
	{ "wait_ns", offsetof(struct file_waits, wait_ns) },
	{ "calls", offsetof(struct file_waits, calls) },
	{ "bytes_read", offsetof(struct file_waits, bytes_read) },
	{ "bytes_written", offsetof(struct file_waits, bytes_written) },
	{ "uncovered", offsetof(struct file_waits, uncovered) },
	{ "files", offsetof(struct file_waits, nfiles) },
};

/* One object of "files": {"path": ..., "dev": ..., "ino": N, ...}. */
static int file_entry(struct src *s, struct file_waits *f)
{
	memset(f, 0, sizeof(*f));
	if (s->p >= s->end || *s->p++ != '{')
		return -1;
	ws(s);
	if (s->p < s->end && *s->p == '}')
		return s->p++, 0;
	for (;;) {
		char key[KEY_LEN];
		unsigned long long *num = NULL;

		ws(s);
		if (str(s, key, sizeof(key)) < 0)
			return -1;
		ws(s);
		if (s->p >= s->end || *s->p++ != ':')
			return -1;
		ws(s);
		for (size_t i = 0; i < sizeof(file_nums) / sizeof(file_nums[0]); i++)
			if (!strcmp(key, file_nums[i].key))
				num = (unsigned long long *)((char *)f + file_nums[i].off);
		if (num) {
			if (number(s, num) < 0)
				return -1;
		} else if (!strcmp(key, "path") || !strcmp(key, "dev")) {
			/* A string, or null for a name the process did not know. */
			if (s->end - s->p >= 4 && !memcmp(s->p, "null", 4))
				s->p += 4;
			else if (str(s, key[0] == 'p' ? f->path : f->dev,
				     key[0] == 'p' ? sizeof(f->path) : sizeof(f->dev)) < 0)
				return -1;
		} else if (skip_value(s, 3) < 0) {
			return -1;
		}
		ws(s);
		if (s->p < s->end && *s->p == ',') {
			s->p++;
			continue;
		}
		if (s->p < s->end && *s->p == '}')
			return s->p++, 0;
		return -1;
	}
}

/* "files": [...] into j->cur (entries beyond MAX_REPORT_FILES skipped). */
static int files_array(struct src *s, struct job *j)
{
	struct file_waits extra;

	j->ncur = 0;
	if (s->p >= s->end || *s->p++ != '[')
		return -1;
	ws(s);
	if (s->p < s->end && *s->p == ']')
		return s->p++, 0;
	for (;;) {
		ws(s);
		if (file_entry(s, j->ncur < MAX_REPORT_FILES ? &j->cur[j->ncur] : &extra) < 0)
			return -1;
		if (j->ncur < MAX_REPORT_FILES)
			j->ncur++;
		ws(s);
		if (s->p < s->end && *s->p == ',') {
			s->p++;
			continue;
		}
		if (s->p < s->end && *s->p == ']')
			return s->p++, 0;
		return -1;
	}
}

static int parse_report(const char *text, size_t len, struct report *r, struct job *j,
			char *why, size_t whylen)
{
	struct src s = { text, text + len };
	bool have_pid = false;

	memset(r, 0, sizeof(*r));
	r->uid = ~0ull;
	j->ncur = 0;
	memset(&j->cur_other, 0, sizeof(j->cur_other));
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
			    (!strcmp(key, "uninstrumented") || !strcmp(key, "exe_path"))) {
				bool u = key[0] == 'u';

				if (str(&s, u ? r->uninstrumented : r->exe_path,
					u ? sizeof r->uninstrumented : sizeof r->exe_path) < 0)
					return snprintf(why, whylen, "bad string for \"%s\"", key), -1;
			} else if (s.p < s.end && *s.p == '"' &&
			    (!strcmp(key, "program") || !strcmp(key, "comm") || !strcmp(key, "exe") ||
			     !strcmp(key, "host") || !strcmp(key, "cmdline") ||
			     !strcmp(key, "job_id") || !strcmp(key, "skipped"))) {
				char *dst = key[0] == 'h' ? r->host : key[0] == 'c' && key[1] == 'm' ?
					    r->cmdline : key[0] == 'j' ? r->job_id : key[0] == 's' ?
					    r->skipped : r->program;
				size_t dlen = key[0] == 'h' ? sizeof r->host : key[0] == 'c' && key[1] == 'm' ?
					      sizeof r->cmdline : key[0] == 'j' ? sizeof r->job_id :
					      key[0] == 's' ? sizeof r->skipped : sizeof r->program;

				if (str(&s, dst, dlen) < 0)
					return snprintf(why, whylen, "bad string for \"%s\"", key), -1;
			} else if (!strcmp(key, "files") && s.p < s.end && *s.p == '[') {
				if (files_array(&s, j) < 0)
					return snprintf(why, whylen, "bad \"files\" list"), -1;
			} else if (!strcmp(key, "files_other") && s.p < s.end && *s.p == '{') {
				if (file_entry(&s, &j->cur_other) < 0)
					return snprintf(why, whylen, "bad \"files_other\""), -1;
			} else if (s.p < s.end && *s.p >= '0' && *s.p <= '9') {
				if (number(&s, &v) < 0)
					return snprintf(why, whylen, "\"%s\" is not a counter", key), -1;
				if (!strcmp(key, "pid")) {
					r->pid = v <= 0x7fffffff ? (long)v : -1;
					have_pid = true;
				} else if (!strcmp(key, "ppid")) {
					r->ppid = v <= 0x7fffffff ? (long)v : -1;
				} else if (!strcmp(key, "uid")) {
					r->uid = v;
				} else if (!strcmp(key, "start_ns")) {
					r->start_ns = v;
				} else if (!strcmp(key, "end_ns")) {
					r->end_ns = v;
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
	if (!have_pid || (!r->nkeys && !r->uninstrumented[0]))
		return snprintf(why, whylen, "not a rangeshim stats report (no pid and counters)"), -1;
	return 0;
}

/* ---- the job ---- */

static unsigned long long sat_add(unsigned long long a, unsigned long long b)
{
	return a + b < a ? ~0ull : a + b;
}

static void add_counts(struct file_waits *f, const struct file_waits *c)
{
	f->lock_waits = sat_add(f->lock_waits, c->lock_waits);
	f->node_waits = sat_add(f->node_waits, c->node_waits);
	f->wait_ns = sat_add(f->wait_ns, c->wait_ns);
	f->calls = sat_add(f->calls, c->calls);
	f->bytes_read = sat_add(f->bytes_read, c->bytes_read);
	f->bytes_written = sat_add(f->bytes_written, c->bytes_written);
	f->uncovered = sat_add(f->uncovered, c->uncovered);
	f->nfiles = sat_add(f->nfiles, c->nfiles);
}

/* The report's files into the job's list: one entry per file, by dev:ino
 * (by path when a report has no dev); its "files_other" into the job's. */
static void merge_files(struct job *j)
{
	add_counts(&j->other, &j->cur_other);
	memset(&j->cur_other, 0, sizeof(j->cur_other));
	for (unsigned i = 0; i < j->ncur; i++) {
		const struct file_waits *c = &j->cur[i];
		struct file_waits *f = NULL;

		if (!c->lock_waits && !c->node_waits && !c->calls && !c->bytes_read &&
		    !c->bytes_written && !c->uncovered)
			continue;   /* nothing to say of it */

		for (unsigned k = 0; k < j->nfiles && !f; k++) {
			struct file_waits *o = &j->files[k];

			if (c->dev[0] ? !strcmp(o->dev, c->dev) && o->ino == c->ino
				      : !o->dev[0] && !strcmp(o->path, c->path))
				f = o;
		}
		if (!f) {
			struct file_waits *grown = realloc(j->files, (j->nfiles + 1) * sizeof(*grown));

			if (!grown)
				return;
			j->files = grown;
			f = &j->files[j->nfiles++];
			memset(f, 0, sizeof(*f));
			memcpy(f->path, c->path, sizeof(f->path));
			memcpy(f->dev, c->dev, sizeof(f->dev));
			f->ino = c->ino;
		}
		if (!f->path[0] && c->path[0])
			memcpy(f->path, c->path, sizeof(f->path));
		add_counts(f, c);
		f->procs++;
	}
	j->ncur = 0;
}

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
	if (parse_report(buf, (size_t)n, rep, j, why, sizeof(why)) < 0) {
		fprintf(stderr, "rangeshim: skipping %s: %s\n", path, why);
		j->nbad++;
		return;
	}
	j->nreports++;
	j->ninstrumented += !rep->uninstrumented[0];
	merge_files(j);
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
	if (!any_key && !j->ninstrumented)
		fputs("no process of the job was instrumented", out);
	else if (!any_key)
		fputs("not counted by this library (its reports have no uncovered_* counters)", out);
	else if (!*sep)
		fputs("none seen", out);
	fputc('\n', out);
}

/* Did the process do coordinated I/O, or I/O the shim could not
 * coordinate?  The others are folded into one line.  stdio does not count:
 * every shell reads its script through it, and the coverage line already
 * says how often it happened. */
static bool did_io(const struct report *r)
{
	if (value(r, "io_calls") || value(r, "bytes_read") || value(r, "bytes_written"))
		return true;
	for (unsigned i = 0; i < r->nkeys; i++)
		if (!strncmp(r->key[i], "uncovered_", 10) && strcmp(r->key[i], "uncovered_stdio") &&
		    r->val[i])
			return true;
	return false;
}

/* Bytes moved, then calls: the processes that matter first. */
static int io_cmp(const void *a, const void *b)
{
	const struct report *x = *(const struct report *const *)a, *y = *(const struct report *const *)b;
	unsigned long long bx = value(x, "bytes_read") + value(x, "bytes_written");
	unsigned long long by = value(y, "bytes_read") + value(y, "bytes_written");

	if (bx != by)
		return bx < by ? 1 : -1;
	if (value(x, "io_calls") != value(y, "io_calls"))
		return value(x, "io_calls") < value(y, "io_calls") ? 1 : -1;
	return (x->pid > y->pid) - (x->pid < y->pid);
}

/* "bash (80), readlink (40)": the programs of the reports that match
 * want (folded: no I/O; skipped: left out by the user), most first. */
struct tally {
	char program[64];
	unsigned n;
};

static unsigned tally(const struct job *j, int which, struct tally **out)
{
	struct tally *t = calloc(j->nreports + 1, sizeof(*t));
	unsigned n = 0;

	*out = t;
	if (!t)
		return 0;
	for (unsigned i = 0; i < j->nreports; i++) {
		const struct report *r = &j->rep[i];
		unsigned k = 0;

		if (r->uninstrumented[0] ||
		    (which == 0 ? r->skipped[0] || did_io(r) : !r->skipped[0]))
			continue;
		while (k < n && strcmp(t[k].program, r->program))
			k++;
		if (k == n)
			memcpy(t[n++].program, r->program, sizeof(r->program));
		t[k].n++;
	}
	for (unsigned a = 0; a < n; a++)	/* most first, a few entries */
		for (unsigned b = a + 1; b < n; b++)
			if (t[b].n > t[a].n) {
				struct tally x = t[a];

				t[a] = t[b], t[b] = x;
			}
	return n;
}

static void print_tally(FILE *out, const struct tally *t, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		char prog[256];

		escape_text(t[i].program[0] ? t[i].program : "-", prog, sizeof(prog));
		fprintf(out, "%s%s (%u)", i ? ", " : "", prog, t[i].n);
	}
}

static const char *const row_cols[] = { "io_calls", "lock_waits", "node_waits", "bytes_read",
					"bytes_written" };
#define NROW_COLS (sizeof(row_cols) / sizeof(row_cols[0]))

#define TOP_PROCS 16

/* One row per process that did I/O, the most bytes first, at most
 * TOP_PROCS of them and the rest summed on one line; the processes
 * without I/O folded into another. */
static void print_rows(FILE *out, const struct job *j)
{
	const struct report **io = calloc(j->nreports + 1, sizeof(*io));
	struct tally *t;
	unsigned shown = 0, folded = 0, nt;

	if (!io)
		return;
	for (unsigned i = 0; i < j->nreports; i++) {
		if (j->rep[i].skipped[0] || j->rep[i].uninstrumented[0])
			continue;
		if (did_io(&j->rep[i]))
			io[shown++] = &j->rep[i];
		else
			folded++;
	}
	if (shown)
		qsort(io, shown, sizeof(*io), io_cmp);
	fprintf(out, "  processes with I/O (%u of %u), most bytes first:\n", shown, j->nreports);
	fprintf(out, "  %-8s %-16s", "PID", "PROGRAM");
	for (size_t c = 0; c < NROW_COLS; c++)
		fprintf(out, " %14s", row_cols[c]);
	fputc('\n', out);
	for (unsigned i = 0; i < shown && i < TOP_PROCS; i++) {
		const struct report *r = io[i];
		char prog[64];

		escape_text(r->program[0] ? r->program : "-", prog, sizeof(prog));
		fprintf(out, "  %-8ld %-16s", r->pid, prog);
		for (size_t c = 0; c < NROW_COLS; c++)
			fprintf(out, " %14llu", value(r, row_cols[c]));
		fputc('\n', out);
	}
	if (shown > TOP_PROCS) {
		unsigned long long sum[NROW_COLS] = { 0 };

		for (unsigned i = TOP_PROCS; i < shown; i++)
			for (size_t c = 0; c < NROW_COLS; c++)
				sum[c] = sat_add(sum[c], value(io[i], row_cols[c]));
		fprintf(out, "  %-8s %-16s", "+", "the other");
		for (size_t c = 0; c < NROW_COLS; c++)
			fprintf(out, " %14llu", sum[c]);
		fprintf(out, "\n  (%u more process(es) with less I/O, summed above)\n",
			shown - TOP_PROCS);
	}
	free(io);
	nt = tally(j, 0, &t);
	if (folded) {
		fprintf(out, "  + %u process(es) without I/O on coordinated files: ", folded);
		print_tally(out, t, nt);
		fputc('\n', out);
	}
	free(t);
}

static unsigned long long file_bytes(const struct file_waits *f)
{
	return sat_add(f->bytes_read, f->bytes_written);
}

/* The most bytes first, then the most waits, time waited, calls. */
static int file_cmp(const void *a, const void *b)
{
	const struct file_waits *x = a, *y = b;
	unsigned long long wx = sat_add(x->lock_waits, x->node_waits);
	unsigned long long wy = sat_add(y->lock_waits, y->node_waits);

	if (file_bytes(x) != file_bytes(y))
		return file_bytes(x) < file_bytes(y) ? 1 : -1;
	if (wx != wy)
		return wx < wy ? 1 : -1;
	if (x->wait_ns != y->wait_ns)
		return x->wait_ns < y->wait_ns ? 1 : -1;
	if (x->calls != y->calls)
		return x->calls < y->calls ? 1 : -1;
	return strcmp(x->path, y->path);
}

/* "major:minor:inode" of a merged file, or "?" without a dev. */
static void file_id(const struct file_waits *f, char *buf, size_t len)
{
	if (f->dev[0])
		snprintf(buf, len, "%s:%llu", f->dev, f->ino);
	else
		snprintf(buf, len, "?");
}

/* The files beyond the first `from` of the job's list, and those no
 * report listed, summed; their number. */
static unsigned long long other_files(const struct job *j, unsigned from, struct file_waits *o)
{
	*o = j->other;
	for (unsigned i = from; i < j->nfiles; i++)
		add_counts(o, &j->files[i]);
	return sat_add(j->other.nfiles, j->nfiles > from ? j->nfiles - from : 0);
}

/* Per-file totals over the job's processes, as Darshan's job summary
 * gives them: bytes, calls, lock waits (lock_waits, threads, plus
 * node_waits, processes) and their time, the calls the shim could not
 * coordinate; the most bytes first, TOP_FILES rows and one for the rest. */
static void print_files(FILE *out, struct job *j)
{
	unsigned n = j->nfiles < TOP_FILES ? j->nfiles : TOP_FILES;
	struct file_waits o;
	unsigned long long nother;

	if (j->nfiles)	/* qsort wants a valid base even for 0 */
		qsort(j->files, j->nfiles, sizeof(*j->files), file_cmp);
	nother = other_files(j, n, &o);
	if (!j->nfiles && !nother)
		return;
	fprintf(out, "  files, most bytes first (%u of %llu), totals over the job's processes:\n", n,
		j->nfiles + j->other.nfiles);
	fprintf(out, "  %14s %14s %10s %10s %10s %10s %9s %5s  %s\n", "BYTES_READ",
		"BYTES_WRITTEN", "CALLS", "LOCK_WAITS", "NODE_WAITS", "WAIT_MS", "UNCOVERED", "PROCS",
		"FILE");
	for (unsigned i = 0; i < n; i++) {
		const struct file_waits *f = &j->files[i];
		char path[PATH_LEN * 4 + 8], id[64], procs[16];

		escape_text(f->path[0] ? f->path : "?", path, sizeof(path));
		file_id(f, id, sizeof id);
		snprintf(procs, sizeof procs, "%u", f->procs);
		fprintf(out, "  %14llu %14llu %10llu %10llu %10llu %10.1f %9llu %5s  %s %s\n",
			f->bytes_read, f->bytes_written, f->calls, f->lock_waits, f->node_waits,
			(double)f->wait_ns / 1e6, f->uncovered, procs, id, path);
	}
	if (nother)
		fprintf(out, "  %14llu %14llu %10llu %10llu %10llu %10.1f %9llu %5s  (%llu other files)\n",
			o.bytes_read, o.bytes_written, o.calls, o.lock_waits, o.node_waits,
			(double)o.wait_ns / 1e6, o.uncovered, "-", nother);
}

static int report_cmp(const void *a, const void *b)
{
	const struct report *x = a, *y = b;

	return (x->pid > y->pid) - (x->pid < y->pid);
}

/* The job: its first process (the one whose parent is not in the job,
 * earliest started), its span, where and as whom it ran. */
struct header {
	const struct report *root;
	unsigned long long start_ns, end_ns;
	const char *host, *job_id;
	unsigned long long uid;
	bool hosts_differ, uids_differ;
};

static void job_header(const struct job *j, struct header *h)
{
	memset(h, 0, sizeof(*h));
	h->uid = ~0ull;
	for (unsigned i = 0; i < j->nreports; i++) {
		const struct report *r = &j->rep[i];
		bool parent_in = false;

		for (unsigned k = 0; k < j->nreports && !parent_in; k++)
			parent_in = j->rep[k].pid == r->ppid && k != i;
		if (r->start_ns && !parent_in && (!h->root || r->start_ns < h->root->start_ns))
			h->root = r;
		if (r->start_ns && (!h->start_ns || r->start_ns < h->start_ns))
			h->start_ns = r->start_ns;
		if (r->end_ns > h->end_ns)
			h->end_ns = r->end_ns;
		if (r->host[0]) {
			h->hosts_differ |= h->host && strcmp(h->host, r->host);
			if (!h->host)
				h->host = r->host;
		}
		if (r->job_id[0] && !h->job_id)
			h->job_id = r->job_id;
		if (r->uid != ~0ull) {
			h->uids_differ |= h->uid != ~0ull && h->uid != r->uid;
			if (h->uid == ~0ull)
				h->uid = r->uid;
		}
	}
}

static void format_time(char *buf, size_t len, unsigned long long ns)
{
	time_t t = (time_t)(ns / 1000000000ull);
	struct tm tm;
	size_t n;

	if (!ns || !localtime_r(&t, &tm)) {
		snprintf(buf, len, "?");
		return;
	}
	n = strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm);
	n += (size_t)snprintf(buf + n, len - n, ".%03llu", ns / 1000000ull % 1000);
	strftime(buf + n, len - n, " %Z", &tm);
}

static void print_header(FILE *out, const struct job *j, const struct header *h)
{
	char a[64], b[64], cmd[4096 + 8];
	struct tally *t;
	unsigned nt;

	if (!h->start_ns)
		return;	/* reports of a library that does not record these */
	escape_text(h->root && h->root->cmdline[0] ? h->root->cmdline : "?", cmd, sizeof cmd);
	fprintf(out, "  command:  %s\n", cmd);
	format_time(a, sizeof a, h->start_ns);
	format_time(b, sizeof b, h->end_ns);
	fprintf(out, "  start:    %s   end: %s   wall: %.3f s\n", a, b,
		h->end_ns > h->start_ns ? (double)(h->end_ns - h->start_ns) / 1e9 : 0.0);
	escape_text(h->host ? h->host : "?", a, sizeof a);
	fprintf(out, "  host:     %s%s   uid: ", a, h->hosts_differ ? " (and others)" : "");
	if (h->uid == ~0ull)
		fputs("?", out);
	else
		fprintf(out, "%llu%s", h->uid, h->uids_differ ? " (and others)" : "");
	escape_text(h->job_id ? h->job_id : "-", b, sizeof b);
	fprintf(out, "   batch job: %s\n", b);
	nt = tally(j, 1, &t);
	if (nt) {
		fputs("  left out by RANGESHIM_ONLY_CMDS/RANGESHIM_SKIP_CMDS, NOT coordinated: ", out);
		print_tally(out, t, nt);
		fputc('\n', out);
	}
	free(t);
}

/* "N program(s) in the job could not be instrumented: busybox
 * (/usr/bin/busybox, 2 times: statically linked ...)", one entry per
 * path.  Their reports were written for them: by `run --stats` for the
 * program it starts, by the library at the exec for the others. */
static void print_uninstrumented(FILE *out, const struct job *j)
{
	unsigned total = 0;
	const char *sep = ": ";

	for (unsigned i = 0; i < j->nreports; i++)
		total += j->rep[i].uninstrumented[0] != 0;
	fprintf(out, "%u program(s) in the job could not be instrumented", total);
	for (unsigned i = 0; i < j->nreports; i++) {
		const struct report *r = &j->rep[i];
		unsigned times = 0;
		bool first = true;
		char prog[256], path[1024], why[640];

		if (!r->uninstrumented[0])
			continue;
		for (unsigned k = 0; k < j->nreports; k++)
			if (j->rep[k].uninstrumented[0] && !strcmp(j->rep[k].exe_path, r->exe_path)) {
				first &= k >= i;
				times++;
			}
		if (!first)
			continue;	/* listed with an earlier one */
		escape_text(r->program[0] ? r->program : "?", prog, sizeof prog);
		escape_text(r->exe_path[0] ? r->exe_path : "?", path, sizeof path);
		escape_text(r->uninstrumented, why, sizeof why);
		fprintf(out, "%s%s (%s", sep, prog, path);
		if (times > 1)
			fprintf(out, ", %u times", times);
		fprintf(out, ": %s)", why);
		sep = ", ";
	}
	fputc('\n', out);
}

static void print_job(FILE *out, struct job *j)
{
	struct header h;

	fprintf(out, "rangeshim job summary: %u process report(s)", j->nreports);
	if (j->nbad)
		fprintf(out, ", %u file(s) skipped", j->nbad);
	fputs("\n", out);
	if (!j->nreports)
		return;
	job_header(j, &h);
	print_header(out, j, &h);
	{
		unsigned zero = 0;

		/* The counters that say something; the zeros in one line. */
		for (unsigned k = 0; k < j->nkeys; k++) {
			if (!j->total[k] && strcmp(j->key[k], "io_calls")) {
				zero++;
				continue;
			}
			fprintf(out, "  %-22s %20llu\n", j->key[k], j->total[k]);
		}
		if (zero)
			fprintf(out, "  (%u other counters are 0; --json lists them)\n", zero);
	}
	if (j->nreports > 1) {
		qsort(j->rep, j->nreports, sizeof(*j->rep), report_cmp);
		print_rows(out, j);
	}
	print_files(out, j);
	print_coverage_line(out, j);
	print_uninstrumented(out, j);
}

/* ---- --json: the same, as one object ---- */

static void json_u64_or_null(unsigned long long v, bool known)
{
	if (known)
		printf("%llu", v);
	else
		fputs("null", stdout);
}

static void json_tally(const struct job *j, int which)
{
	struct tally *t;
	unsigned nt = tally(j, which, &t);

	putchar('{');
	for (unsigned i = 0; i < nt; i++) {
		fputs(i ? ", " : "", stdout);
		json_string(t[i].program);
		printf(": %u", t[i].n);
	}
	putchar('}');
	free(t);
}

static void print_job_json(struct job *j)
{
	struct header h;

	job_header(j, &h);
	printf("{\"reports\": %u, \"skipped_files\": %u, \"job\": {\"command\": ", j->nreports,
	       j->nbad);
	json_string(h.root && h.root->cmdline[0] ? h.root->cmdline : NULL);
	fputs(", \"start_ns\": ", stdout);
	json_u64_or_null(h.start_ns, h.start_ns != 0);
	fputs(", \"end_ns\": ", stdout);
	json_u64_or_null(h.end_ns, h.end_ns != 0);
	fputs(", \"wall_ns\": ", stdout);
	json_u64_or_null(h.end_ns - h.start_ns, h.start_ns && h.end_ns > h.start_ns);
	fputs(", \"host\": ", stdout);
	json_string(h.host);
	fputs(", \"uid\": ", stdout);
	json_u64_or_null(h.uid, h.uid != ~0ull);
	fputs(", \"batch_job\": ", stdout);
	json_string(h.job_id);
	fputs("}, \"totals\": {", stdout);
	for (unsigned k = 0; k < j->nkeys; k++) {
		fputs(k ? ", " : "", stdout);
		json_string(j->key[k]);
		printf(": %llu", j->total[k]);
	}
	fputs("}, \"files\": [", stdout);
	if (j->nfiles)	/* qsort wants a valid base even for 0 */
		qsort(j->files, j->nfiles, sizeof(*j->files), file_cmp);
	for (unsigned i = 0; i < j->nfiles && i < TOP_FILES_JSON; i++) {
		const struct file_waits *f = &j->files[i];
		char id[64];

		file_id(f, id, sizeof id);
		printf("%s{\"file\": ", i ? ", " : "");
		json_string(f->dev[0] ? id : NULL);
		fputs(", \"path\": ", stdout);
		json_string(f->path[0] ? f->path : NULL);
		printf(", \"bytes_read\": %llu, \"bytes_written\": %llu, \"calls\": %llu, "
		       "\"lock_waits\": %llu, \"node_waits\": %llu, \"wait_ns\": %llu, "
		       "\"uncovered\": %llu, \"procs\": %u}", f->bytes_read, f->bytes_written,
		       f->calls, f->lock_waits, f->node_waits, f->wait_ns, f->uncovered, f->procs);
	}
	{
		struct file_waits o;
		unsigned long long nother = other_files(j, TOP_FILES_JSON, &o);

		printf("], \"other_files\": {\"files\": %llu, \"bytes_read\": %llu, "
		       "\"bytes_written\": %llu, \"calls\": %llu, \"lock_waits\": %llu, "
		       "\"node_waits\": %llu, \"wait_ns\": %llu, \"uncovered\": %llu}",
		       nother, o.bytes_read, o.bytes_written, o.calls, o.lock_waits, o.node_waits,
		       o.wait_ns, o.uncovered);
	}
	fputs(", \"processes\": [", stdout);
	if (j->nreports)
		qsort(j->rep, j->nreports, sizeof(*j->rep), report_cmp);
	for (unsigned i = 0, n = 0; i < j->nreports; i++) {
		const struct report *r = &j->rep[i];

		if (!did_io(r) || r->skipped[0] || r->uninstrumented[0])
			continue;
		printf("%s{\"pid\": %ld, \"program\": ", n++ ? ", " : "", r->pid);
		json_string(r->program);
		fputs(", \"cmdline\": ", stdout);
		json_string(r->cmdline[0] ? r->cmdline : NULL);
		for (size_t c = 0; c < NROW_COLS; c++)
			printf(", \"%s\": %llu", row_cols[c], value(r, row_cols[c]));
		putchar('}');
	}
	fputs("], \"folded\": ", stdout);
	json_tally(j, 0);
	fputs(", \"left_out\": ", stdout);
	json_tally(j, 1);
	fputs(", \"uninstrumented\": [", stdout);
	for (unsigned i = 0, n = 0; i < j->nreports; i++) {
		const struct report *r = &j->rep[i];

		if (!r->uninstrumented[0])
			continue;
		printf("%s{\"pid\": %ld, \"program\": ", n++ ? ", " : "", r->pid);
		json_string(r->program);
		fputs(", \"path\": ", stdout);
		json_string(r->exe_path[0] ? r->exe_path : NULL);
		fputs(", \"why\": ", stdout);
		json_string(r->uninstrumented);
		putchar('}');
	}
	putchar(']');
	fputs("}\n", stdout);
}

int stats_summary(FILE *out, char **paths, int npaths, bool json)
{
	struct job *j = calloc(1, sizeof(*j));
	unsigned n;

	if (!j) {
		perror("rangeshim");
		return -1;
	}
	for (int i = 0; i < npaths; i++)
		add_path(j, paths[i]);
	if (json)
		print_job_json(j);
	else
		print_job(out, j);
	n = j->nreports;
	free(j->files);
	free(j->rep);
	free(j);
	return (int)n;
}

int cmd_stats(const struct command *cmd, int argc, char **argv)
{
	int c;

	bool json = false;

	optind = 1;
	while ((c = iface_getopt(cmd->name, argc, argv)) != -1) {
		if (c == 'h') {
			iface_help(cmd->name, stdout);
			return 0;
		}
		if (c == OPT_STATS_JSON) {
			json = true;
			continue;
		}
		return getopt_error(c, argv);
	}
	if (optind >= argc)
		return usage_error("%s", "stats: name the report files or their directory");
	if (stats_summary(stdout, argv + optind, argc - optind, json) <= 0)
		return 1;
	return fflush(stdout) == 0 ? 0 : 1;
}
