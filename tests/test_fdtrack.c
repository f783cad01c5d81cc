/*
 * fd bookkeeping under the shim, checked through results and through the
 * RANGESHIM_STATS JSON (counters in shim/preload/stats.h).  The scenarios run in
 * build/tests/helpers/fd_probe; the shim is preloaded there only.
 *
 *  passthrough  (a) record writes to a regular file are locked one call
 *               each (io_calls == N, bytes_written == N*101), while writes
 *               to a pipe, /dev/null and a socket, and the reads draining
 *               them, are not (they count as passthrough); on /dev/shm and
 *               on /tmp.
 *  sharing      (b) two opens of one file (also through a hard link) share
 *               one lock: files_opened == 1, and a read through one fd
 *               waits for a write that holds the lock through the other
 *               (made deterministic with userfaultfd, with a no-shim
 *               control; timing-based without it); two different files:
 *               files_opened == 2 and no waiting.
 *  paths        (c) RANGESHIM_PATHS: a directory includes files under it and
 *               excludes others (also a sibling whose name merely starts
 *               with the same string); trailing slash; several entries; a
 *               glob on names; a glob on directories; an invalid value
 *               prints exactly one stderr line naming RANGESHIM_PATHS and
 *               the value, and falls back to coordinating everything; an
 *               invalid entry next to a valid one is reported once and the
 *               valid entry applies.
 *  config       (d) bad RANGESHIM_SCOPE / _LOCK / _LOG values: one stderr line
 *               each, naming the variable, the value and the replacement,
 *               and the program still runs and is still coordinated; all
 *               three at once give three lines; valid values give none;
 *               RANGESHIM_SCOPE=off gives io_calls == 0.
 *  append       (e) threads appending 101-byte records through one shared
 *               O_APPEND fd and through their own O_APPEND opens: exactly N
 *               whole records, none interleaved, appends == N (range and
 *               mutex modes); F_SETFL O_APPEND switches an fd to append
 *               mode (appends counted only after the switch), and so does
 *               setting/clearing it through a dup'd fd.
 *  dup          (f) dup/dup2/dup3/F_DUPFD/F_DUPFD_CLOEXEC share the file
 *               offset: the results are identical with and without the
 *               shim and match the expected offsets and contents; dup2 of
 *               a pipe or of another file onto a tracked fd replaces it
 *               (io_calls counts exactly the calls on files);
 *               close_range and closefrom forget their fds: a pipe that
 *               gets the same numbers is not locked; CLOSE_RANGE_CLOEXEC
 *               and a failing close_range forget nothing.
 *  inherit      (g) stdout inherited as an O_APPEND regular file (opened
 *               and dup2'd by the test before exec): records written to
 *               fd 1 by several threads are whole, the file's earlier
 *               contents survive, io_calls == appends == records.
 *  stats        (h) RANGESHIM_STATS=1 prints a summary containing io_calls
 *               on stderr; a path with %p gets a file named with the
 *               helper's pid, holding valid JSON with io_calls,
 *               lock_waits, node_acquires and node_revokes.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sys/sysmacros.h>

#include "common.h"

#define REC 101
#define HELPER RS_HELPER("fd_probe")

/* ---- files and JSON ------------------------------------------------------ */

static const char *js_ws(const char *p)
{
	while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
		p++;
	return p;
}

static const char *js_string(const char *p)
{
	if (*p++ != '"')
		return NULL;
	while (*p && *p != '"') {
		if ((unsigned char)*p < 0x20)
			return NULL;
		if (*p == '\\') {
			p++;
			if (*p == 'u') {
				for (int i = 1; i <= 4; i++)
					if (!isxdigit((unsigned char)p[i]))
						return NULL;
				p += 4;
			} else if (!*p || !strchr("\"\\/bfnrt", *p)) {
				return NULL;
			}
		}
		p++;
	}
	return *p == '"' ? p + 1 : NULL;
}

static const char *js_number(const char *p)
{
	if (*p == '-')
		p++;
	if (*p == '0')
		p++;
	else if (*p >= '1' && *p <= '9')
		while (isdigit((unsigned char)*p))
			p++;
	else
		return NULL;
	if (*p == '.') {
		if (!isdigit((unsigned char)*++p))
			return NULL;
		while (isdigit((unsigned char)*p))
			p++;
	}
	if (*p == 'e' || *p == 'E') {
		p++;
		if (*p == '+' || *p == '-')
			p++;
		if (!isdigit((unsigned char)*p))
			return NULL;
		while (isdigit((unsigned char)*p))
			p++;
	}
	return p;
}

static const char *js_value(const char *p, int depth)
{
	p = js_ws(p);
	if (depth > 32)
		return NULL;
	if (*p == '{' || *p == '[') {
		char close = *p == '{' ? '}' : ']';

		p = js_ws(p + 1);
		if (*p == close)
			return p + 1;
		for (;;) {
			if (close == '}') {
				p = js_string(js_ws(p));
				if (!p)
					return NULL;
				p = js_ws(p);
				if (*p++ != ':')
					return NULL;
			}
			p = js_value(p, depth + 1);
			if (!p)
				return NULL;
			p = js_ws(p);
			if (*p == close)
				return p + 1;
			if (*p++ != ',')
				return NULL;
		}
	}
	if (*p == '"')
		return js_string(p);
	if (strncmp(p, "true", 4) == 0)
		return p + 4;
	if (strncmp(p, "false", 5) == 0)
		return p + 5;
	if (strncmp(p, "null", 4) == 0)
		return p + 4;
	return js_number(p);
}

/* A whole JSON document whose top level is an object. */
static int json_valid_object(const char *s)
{
	const char *p = js_ws(s);

	if (*p != '{')
		return 0;
	p = js_value(p, 0);
	return p && *js_ws(p) == '\0';
}

/* ---- running the probe --------------------------------------------------- */

struct res {
	struct rs_run run;
	char stats_path[PATH_MAX];
	char *js;               /* the stats JSON, or NULL */
};

/*
 * Run fd_probe MODE ARGS... (NULL-terminated) with env (NULL-terminated,
 * may be NULL) plus RANGESHIM_STATS=<base>/st-<tag>.json when preloaded.
 * Requires exit status 0 and, when preloaded, a valid stats file.
 */
static struct res *probe(const char *base, const char *tag, const char *const *env,
			 int preload, const char *mode, ...)
{
	struct res *r = calloc(1, sizeof(*r));
	const char *e[16];
	char *argv[16];
	char stats_env[PATH_MAX + 32];
	int ne = 0, na = 0;
	va_list ap;
	const char *a;

	snprintf(r->stats_path, sizeof(r->stats_path), "%s/st-%s.json", base, tag);
	snprintf(stats_env, sizeof(stats_env), "RANGESHIM_STATS=%s", r->stats_path);
	if (preload)
		e[ne++] = stats_env;
	for (int i = 0; env && env[i] && ne < 15; i++)
		e[ne++] = env[i];
	e[ne] = NULL;
	argv[na++] = (char *)HELPER;
	argv[na++] = (char *)mode;
	va_start(ap, mode);
	while ((a = va_arg(ap, const char *)) != NULL && na < 15)
		argv[na++] = (char *)a;
	va_end(ap);
	argv[na] = NULL;
	rs_run(&r->run, argv, e, preload, 15);
	cr_assert_eq(r->run.status, 0, "[%s] fd_probe %s exited with %d:\n%s", tag, mode,
		     r->run.status, r->run.out);
	if (preload) {
		r->js = rs_read_file(r->stats_path, NULL);
		cr_assert_not_null(r->js, "[%s] no stats file %s", tag, r->stats_path);
		cr_assert(json_valid_object(r->js), "[%s] stats file is not valid JSON: %s",
			  tag, r->js);
		unlink(r->stats_path);
	}
	return r;
}

static void res_free(struct res *r)
{
	free(r->js);
	free(r);
}

static long long stat_of(const struct res *r, const char *key)
{
	long long v = rs_json_num(r->js, key);

	cr_assert_geq(v, 0, "stats have no %s: %s", key, r->js);
	return v;
}

/* Lines of s containing sub. */
static int count_lines(const char *s, const char *sub)
{
	int n = 0;

	for (const char *p = s; p && *p;) {
		const char *e = strchr(p, '\n');
		size_t len = e ? (size_t)(e - p) : strlen(p);

		if (memmem(p, len, sub, strlen(sub)))
			n++;
		p = e ? e + 1 : NULL;
	}
	return n;
}

/* The first line of s containing sub, copied into buf. */
static const char *line_with(const char *s, const char *sub, char *buf, size_t size)
{
	const char *p = strstr(s, sub), *b, *e;

	buf[0] = '\0';
	if (!p)
		return buf;
	for (b = p; b > s && b[-1] != '\n'; b--)
		;
	e = strchr(p, '\n');
	if (!e)
		e = p + strlen(p);
	snprintf(buf, size, "%.*s", (int)(e - b), b);
	return buf;
}

/*
 * The file holds prefix_len bytes of something else, then exactly
 * nletters * per_letter records of 100 equal letters from 'a' (then 'A'
 * after 'z') and '\n', each letter per_letter times.  NULL or what is wrong.
 */
static const char *check_records(const char *path, long prefix_len, int nletters,
				 int per_letter, char *why, size_t size)
{
	long len;
	char *s = rs_read_file(path, &len);
	int counts[52] = { 0 };
	long want = prefix_len + (long)REC * nletters * per_letter;

	if (!s) {
		snprintf(why, size, "cannot read %s", path);
		return why;
	}
	if (len != want) {
		snprintf(why, size, "%s is %ld bytes, expected %ld", path, len, want);
		free(s);
		return why;
	}
	for (long off = prefix_len; off < len; off += REC) {
		char c = s[off];
		int idx = c >= 'a' && c <= 'z' ? c - 'a' : c >= 'A' && c <= 'Z' ? c - 'A' + 26 : -1;

		if (idx < 0 || idx >= nletters || s[off + REC - 1] != '\n') {
			snprintf(why, size, "record at %ld is damaged (starts %.20s)", off, s + off);
			free(s);
			return why;
		}
		for (int i = 1; i < REC - 1; i++) {
			if (s[off + i] != c) {
				snprintf(why, size, "record at %ld is interleaved: byte %d is '%c' in a "
					 "'%c' record", off, i, s[off + i], c);
				free(s);
				return why;
			}
		}
		counts[idx]++;
	}
	for (int i = 0; i < nletters; i++) {
		if (counts[i] != per_letter) {
			snprintf(why, size, "letter %d has %d records, expected %d", i, counts[i],
				 per_letter);
			free(s);
			return why;
		}
	}
	free(s);
	return NULL;
}

static char *path_in(const char *base, const char *name)
{
	char *p = malloc(PATH_MAX);

	snprintf(p, PATH_MAX, "%s/%s", base, name);
	return p;
}

TestSuite(fdtrack, .fini = rs_remove_bases);

/* ---- (a) passthrough ------------------------------------------------------ */

static void passthrough_on(const char *parent)
{
	char *base = rs_make_base(parent, "rs-fdt-"), *file = path_in(base, "data");
	struct res *r = probe(base, "pass", NULL, 1, "passthrough", file, "50", NULL);

	cr_assert_eq(rs_field(r->run.out, "expect_io"), 50, "%s", r->run.out);
	cr_expect_eq(stat_of(r, "io_calls"), 50, "io_calls: only the 50 file writes lock: %s", r->js);
	cr_expect_eq(stat_of(r, "bytes_written"), rs_field(r->run.out, "expect_bytes_written"),
		     "bytes_written: %s", r->js);
	cr_expect_geq(stat_of(r, "passthrough"), rs_field(r->run.out, "expect_pass"),
		      "pipe, /dev/null and socket calls pass through: %s", r->js);
	cr_expect_eq(stat_of(r, "files_opened"), 1, "files_opened: %s", r->js);
	cr_expect_eq(stat_of(r, "appends"), 0, "appends: %s", r->js);
	res_free(r);
	rs_rm_rf(base);
	free(file);
	free(base);
}

Test(fdtrack, passthrough_shm, .timeout = 30) { passthrough_on("/dev/shm"); }
Test(fdtrack, passthrough_tmp, .timeout = 30) { passthrough_on("/tmp"); }

/* ---- (b) one lock per file ------------------------------------------------ */

/*
 * Deterministic where userfaultfd is available: a writer is parked inside
 * pwrite through the first fd, holding its lock; a buffered pread through
 * the second fd (which the kernel serves without the inode lock, as the
 * no-shim control shows) must wait for it exactly when both fds are one
 * file.  Without userfaultfd, fall back to timing: a 4 KiB writer through
 * one fd must at some point wait for 4 MiB writes through the other.
 */
static void sharing_case(const char *base, const char *tag, const char *a, const char *b,
			 int same)
{
	char tag0[64];
	struct res *plain, *r;

	snprintf(tag0, sizeof(tag0), "%s-plain", tag);
	plain = probe(base, tag0, NULL, 0, "holdlock", a, b, NULL);
	if (rs_field(plain->run.out, "uffd") == 1) {
		cr_assert_eq(rs_field(plain->run.out, "reader_blocked"), 0,
			     "[%s] without the shim the kernel already blocks the reader; "
			     "this check cannot work here", tag);
		r = probe(base, tag, NULL, 1, "holdlock", a, b, NULL);
		cr_assert_eq(rs_field(r->run.out, "uffd"), 1, "%s", r->run.out);
		cr_expect_eq(rs_field(r->run.out, "reader_blocked"), same, "[%s] %s", tag,
			     same ? "a read through a second fd of the same file did not wait "
				    "for a write holding the lock through the first"
				  : "a read of another file waited for a writer");
		cr_expect_eq(stat_of(r, "lock_waits"), same, "[%s] %s", tag, r->js);
	} else {
		cr_log_info("[%s] userfaultfd unavailable (%s); timing-based check", tag,
			    plain->run.out);
		r = probe(base, tag, NULL, 1, "twoopen", a, b, "1000", NULL);
		if (same)
			cr_expect_gt(stat_of(r, "lock_waits"), 0,
				     "[%s] writes through two fds of one file never waited for "
				     "each other: %s", tag, r->js);
		else
			cr_expect_eq(stat_of(r, "lock_waits"), 0, "[%s] %s", tag, r->js);
	}
	cr_expect_eq(stat_of(r, "files_opened"), same ? 1 : 2, "[%s] %s: %s", tag,
		     same ? "two opens of one file must share one file object"
			  : "two files are two file objects", r->js);
	res_free(plain);
	res_free(r);
}

Test(fdtrack, two_opens_share_one_lock, .timeout = 30)
{
	char *base = rs_make_base("/dev/shm", "rs-fdt-");
	char *f = path_in(base, "shared"), *g = path_in(base, "other"), *h = path_in(base, "link");
	int fd = open(f, O_WRONLY | O_CREAT, 0644);

	cr_assert_geq(fd, 0);
	close(fd);
	cr_assert_eq(link(f, h), 0, "link: %s", strerror(errno));
	sharing_case(base, "same", f, f, 1);
	sharing_case(base, "hardlink", f, h, 1);
	sharing_case(base, "different", f, g, 0);
	rs_rm_rf(base);
	free(f);
	free(g);
	free(h);
	free(base);
}

/* ---- (c) RANGESHIM_PATHS --------------------------------------------------- */

struct paths_fixture {
	char *base, *inc, *exc, *incx;
	char *inc_dat, *inc_txt, *exc_dat, *incx_dat;
};

static void paths_setup(struct paths_fixture *p)
{
	p->base = rs_make_base("/dev/shm", "rs-fdt-");
	p->inc = path_in(p->base, "inc");
	p->exc = path_in(p->base, "exc");
	p->incx = path_in(p->base, "incx");
	cr_assert_eq(mkdir(p->inc, 0700), 0);
	cr_assert_eq(mkdir(p->exc, 0700), 0);
	cr_assert_eq(mkdir(p->incx, 0700), 0);
	p->inc_dat = path_in(p->inc, "f.dat");
	p->inc_txt = path_in(p->inc, "f.txt");
	p->exc_dat = path_in(p->exc, "f.dat");
	p->incx_dat = path_in(p->incx, "f.dat");
}

static void paths_teardown(struct paths_fixture *p)
{
	rs_rm_rf(p->base);
	free(p->base);
	free(p->inc);
	free(p->exc);
	free(p->incx);
	free(p->inc_dat);
	free(p->inc_txt);
	free(p->exc_dat);
	free(p->incx_dat);
}

/* Run "write FILE 5" (10 calls) with RANGESHIM_PATHS=value; check io_calls
 * and the number of stderr lines mentioning RANGESHIM_PATHS. */
static struct res *paths_run(struct paths_fixture *p, const char *tag, const char *value,
			     const char *file, long long want_io, int want_lines)
{
	char env0[PATH_MAX * 2];
	const char *env[2] = { env0, NULL };
	struct res *r;

	snprintf(env0, sizeof(env0), "RANGESHIM_PATHS=%s", value);
	r = probe(p->base, tag, env, 1, "write", file, "5", NULL);
	cr_assert_eq(rs_field(r->run.out, "writes"), 5, "[%s] %s", tag, r->run.out);
	cr_expect_eq(stat_of(r, "io_calls"), want_io,
		     "[%s] RANGESHIM_PATHS=%s, file %s: io_calls %lld, expected %lld", tag,
		     value, file, stat_of(r, "io_calls"), want_io);
	if (want_io == 0)
		cr_expect_eq(stat_of(r, "passthrough"), 10, "[%s] excluded calls pass: %s",
			     tag, r->js);
	cr_expect_eq(count_lines(r->run.out, "RANGESHIM_PATHS"), want_lines,
		     "[%s] RANGESHIM_PATHS=%s: expected %d stderr line(s) about it, got:\n%s",
		     tag, value, want_lines, r->run.out);
	cr_expect_eq(count_lines(r->run.out, "rangeshim["), want_lines,
		     "[%s] unexpected shim messages:\n%s", tag, r->run.out);
	return r;
}

Test(fdtrack, paths_prefix, .timeout = 30)
{
	struct paths_fixture p;
	char v[PATH_MAX * 2];

	paths_setup(&p);
	res_free(paths_run(&p, "in", p.inc, p.inc_dat, 10, 0));
	res_free(paths_run(&p, "out", p.inc, p.exc_dat, 0, 0));
	res_free(paths_run(&p, "sibling", p.inc, p.incx_dat, 0, 0));
	snprintf(v, sizeof(v), "%s/", p.inc);
	res_free(paths_run(&p, "slash", v, p.inc_dat, 10, 0));
	snprintf(v, sizeof(v), "/nonexistent-rangeshim:%s", p.inc);
	res_free(paths_run(&p, "multi_in", v, p.inc_dat, 10, 0));
	res_free(paths_run(&p, "multi_out", v, p.exc_dat, 0, 0));
	/* A file under /tmp is not under a /dev/shm entry. */
	{
		char *base2 = rs_make_base("/tmp", "rs-fdt-"), *f2 = path_in(base2, "f.dat");

		res_free(paths_run(&p, "tmp_out", p.inc, f2, 0, 0));
		rs_rm_rf(base2);
		free(base2);
		free(f2);
	}
	paths_teardown(&p);
}

Test(fdtrack, paths_glob, .timeout = 30)
{
	struct paths_fixture p;
	char v[PATH_MAX * 2];

	paths_setup(&p);
	snprintf(v, sizeof(v), "%s/*.dat", p.inc);
	res_free(paths_run(&p, "glob_in", v, p.inc_dat, 10, 0));
	res_free(paths_run(&p, "glob_txt", v, p.inc_txt, 0, 0));
	res_free(paths_run(&p, "glob_other_dir", v, p.exc_dat, 0, 0));
	snprintf(v, sizeof(v), "%s/*/f.dat", p.base);
	res_free(paths_run(&p, "glob_dir_inc", v, p.inc_dat, 10, 0));
	res_free(paths_run(&p, "glob_dir_exc", v, p.exc_dat, 10, 0));
	res_free(paths_run(&p, "glob_dir_txt", v, p.inc_txt, 0, 0));
	snprintf(v, sizeof(v), "%s/in?/f.[dx]at", p.base);
	res_free(paths_run(&p, "glob_q", v, p.inc_dat, 10, 0));
	res_free(paths_run(&p, "glob_q_exc", v, p.exc_dat, 0, 0));
	paths_teardown(&p);
}

Test(fdtrack, paths_invalid_falls_back_to_all, .timeout = 30)
{
	struct paths_fixture p;
	struct res *r;
	char line[1024];

	paths_setup(&p);
	r = paths_run(&p, "relative", "relative/path", p.exc_dat, 10, 1);
	line_with(r->run.out, "RANGESHIM_PATHS", line, sizeof(line));
	cr_expect(strstr(line, "relative/path") != NULL, "the line names the value: %s", line);
	cr_expect(strstr(line, "instead") || strstr(line, "using"),
		  "the line says what is used instead: %s", line);
	res_free(r);
	paths_teardown(&p);
}

Test(fdtrack, paths_invalid_entry_beside_valid, .timeout = 30)
{
	struct paths_fixture p;
	struct res *r;
	char v[PATH_MAX * 2], line[1024];

	paths_setup(&p);
	snprintf(v, sizeof(v), "rel-entry:%s", p.inc);
	r = paths_run(&p, "mixed_in", v, p.inc_dat, 10, 1);
	line_with(r->run.out, "RANGESHIM_PATHS", line, sizeof(line));
	cr_expect(strstr(line, "rel-entry") != NULL, "the line names the entry: %s", line);
	res_free(r);
	res_free(paths_run(&p, "mixed_out", v, p.exc_dat, 0, 1));
	paths_teardown(&p);
}

/* ---- (d) bad configuration --------------------------------------------------- */

/* "write FILE 5" with one setting; returns the result for more checks. */
static struct res *cfg_run(const char *base, const char *tag, const char *setting,
			   long long want_io, int want_lines)
{
	const char *env[2] = { setting, NULL };
	char *file = path_in(base, tag);
	struct res *r = probe(base, tag, env, 1, "write", file, "5", NULL);

	cr_assert_eq(rs_field(r->run.out, "writes"), 5, "[%s] the program did not run through:\n%s",
		     tag, r->run.out);
	cr_expect_eq(stat_of(r, "io_calls"), want_io, "[%s] %s: io_calls %lld, expected %lld",
		     tag, setting, stat_of(r, "io_calls"), want_io);
	cr_expect_eq(count_lines(r->run.out, "rangeshim["), want_lines,
		     "[%s] %s: expected %d stderr line(s), got:\n%s", tag, setting, want_lines,
		     r->run.out);
	free(file);
	return r;
}

static void bad_value(const char *var, const char *value, const char *dflt)
{
	char *base = rs_make_base("/dev/shm", "rs-fdt-");
	char setting[256], line[1024];
	struct res *r;

	snprintf(setting, sizeof(setting), "%s=%s", var, value);
	r = cfg_run(base, "bad", setting, 10, 1);
	line_with(r->run.out, "rangeshim[", line, sizeof(line));
	cr_expect(strstr(line, var) != NULL, "the line names %s: %s", var, line);
	cr_expect(strstr(line, value) != NULL, "the line names the value %s: %s", value, line);
	cr_expect(strstr(line, dflt) != NULL, "the line names the replacement %s: %s", dflt, line);
	res_free(r);
	rs_rm_rf(base);
	free(base);
}

Test(fdtrack, bad_scope, .timeout = 30) { bad_value("RANGESHIM_SCOPE", "bogus-scope", "node"); }
Test(fdtrack, bad_lock, .timeout = 30) { bad_value("RANGESHIM_LOCK", "bogus-lock", "range"); }
Test(fdtrack, bad_log, .timeout = 30) { bad_value("RANGESHIM_LOG", "bogus-log", "warn"); }

Test(fdtrack, all_bad_at_once, .timeout = 30)
{
	char *base = rs_make_base("/dev/shm", "rs-fdt-"), *file = path_in(base, "f");
	const char *env[] = { "RANGESHIM_SCOPE=xx1", "RANGESHIM_LOCK=xx2", "RANGESHIM_LOG=xx3", NULL };
	struct res *r = probe(base, "allbad", env, 1, "write", file, "5", NULL);

	cr_expect_eq(stat_of(r, "io_calls"), 10, "%s", r->js);
	cr_expect_eq(count_lines(r->run.out, "rangeshim["), 3, "%s", r->run.out);
	cr_expect_eq(count_lines(r->run.out, "RANGESHIM_SCOPE='xx1'"), 1, "%s", r->run.out);
	cr_expect_eq(count_lines(r->run.out, "RANGESHIM_LOCK='xx2'"), 1, "%s", r->run.out);
	cr_expect_eq(count_lines(r->run.out, "RANGESHIM_LOG='xx3'"), 1, "%s", r->run.out);
	res_free(r);
	rs_rm_rf(base);
	free(file);
	free(base);
}

Test(fdtrack, good_values_are_quiet, .timeout = 30)
{
	char *base = rs_make_base("/dev/shm", "rs-fdt-");

	res_free(cfg_run(base, "off", "RANGESHIM_SCOPE=off", 0, 0));
	res_free(cfg_run(base, "process", "RANGESHIM_SCOPE=process", 10, 0));
	res_free(cfg_run(base, "node", "RANGESHIM_SCOPE=node", 10, 0));
	res_free(cfg_run(base, "mutex", "RANGESHIM_LOCK=mutex", 10, 0));
	res_free(cfg_run(base, "range", "RANGESHIM_LOCK=range", 10, 0));
	res_free(cfg_run(base, "log", "RANGESHIM_LOG=error", 10, 0));
	res_free(cfg_run(base, "log2", "RANGESHIM_LOG=2", 10, 0));
	rs_rm_rf(base);
	free(base);
}

/* ---- (e) O_APPEND ----------------------------------------------------------- */

static void appenders(const char *setting)
{
	char *base = rs_make_base("/dev/shm", "rs-fdt-"), *file = path_in(base, "log");
	const char *env[2] = { setting, NULL };
	struct res *r = probe(base, "append", env, 1, "append", file, "4", "150", NULL);
	char why[256];
	const char *bad;

	bad = check_records(file, 0, 8, 150, why, sizeof(why));
	cr_expect_null(bad, "%s: %s", setting ? setting : "default", bad);
	cr_expect_eq(rs_field(r->run.out, "records"), 1200, "%s", r->run.out);
	cr_expect_eq(stat_of(r, "appends"), 1200, "every record write is an append: %s", r->js);
	cr_expect_eq(stat_of(r, "io_calls"), 1200, "%s", r->js);
	cr_expect_eq(stat_of(r, "bytes_written"), 1200 * REC, "%s", r->js);
	res_free(r);
	rs_rm_rf(base);
	free(file);
	free(base);
}

Test(fdtrack, append_threads_range, .timeout = 30) { appenders(NULL); }
Test(fdtrack, append_threads_mutex, .timeout = 30) { appenders("RANGESHIM_LOCK=mutex"); }

Test(fdtrack, append_without_shim_same_layout, .timeout = 30)
{
	/* The checker itself, on the same scenario without the shim. */
	char *base = rs_make_base("/dev/shm", "rs-fdt-"), *file = path_in(base, "log");
	struct res *r = probe(base, "append0", NULL, 0, "append", file, "3", "50", NULL);
	char why[256];

	cr_expect_null(check_records(file, 0, 6, 50, why, sizeof(why)), "%s", why);
	cr_expect_not_null(check_records(file, 0, 6, 49, why, sizeof(why)),
			   "the record checker accepts a wrong count");
	res_free(r);
	rs_rm_rf(base);
	free(file);
	free(base);
}

Test(fdtrack, setfl_append, .timeout = 30)
{
	char *base = rs_make_base("/dev/shm", "rs-fdt-"), *file = path_in(base, "s");
	struct res *r = probe(base, "setfl", NULL, 1, "setfl", file, "7", NULL);

	cr_assert_eq(rs_field(r->run.out, "expect_appends"), 8, "%s", r->run.out);
	cr_expect_eq(stat_of(r, "appends"), 8,
		     "after F_SETFL O_APPEND exactly the 7 + 1 appending writes lock from EOF: %s",
		     r->js);
	res_free(r);
	rs_rm_rf(base);
	free(file);
	free(base);
}

/* ---- (f) dup family, close_range, closefrom ----------------------------------- */

static const char *const dup_expect[] = {
	"r.pos_a1=8/0", "r.dup2=40/0", "r.pos_b1=12/0", "r.dup3=41/0", "r.pos_c1=16/0",
	"r.dupfd=50/0", "r.pos_d1=20/0", "r.dupfd_cloexec=60/0", "r.pos_e1=24/0",
	"r.pos_f1=28/0", "r.r_d=28/0", "r.read_d=AAAABBBBCCCCDDDDEEEEFFFFGGGG",
	"r.pos_b3=28/0", "r.pw_x_pipe=-1/29", "r.w_x_pipe=4/0", "r.read_pipe=pipe",
	"r.pos_y=6/0", "content.f1=AAHHBBBBCCCCDDDDEEEEFFFFGGGG", "content.f2=XXXX",
	"content.f3=QQYYZZ!?",
};

Test(fdtrack, dup_shares_description, .timeout = 30)
{
	char *base = rs_make_base("/dev/shm", "rs-fdt-");
	char *f1 = path_in(base, "f1"), *f2 = path_in(base, "f2"), *f3 = path_in(base, "f3");
	struct res *plain = probe(base, "dup0", NULL, 0, "dup", f1, f2, f3, NULL);
	struct res *shim = probe(base, "dup1", NULL, 1, "dup", f1, f2, f3, NULL);
	struct res *mutex;
	const char *menv[] = { "RANGESHIM_LOCK=mutex", NULL };

	for (size_t i = 0; i < sizeof(dup_expect) / sizeof(dup_expect[0]); i++) {
		cr_expect_eq(count_lines(plain->run.out, dup_expect[i]), 1,
			     "without shim: %s missing", dup_expect[i]);
		cr_expect_eq(count_lines(shim->run.out, dup_expect[i]), 1,
			     "with shim: %s missing", dup_expect[i]);
	}
	cr_expect_str_eq(shim->run.out, plain->run.out, "results differ with the shim");
	cr_expect_eq(stat_of(shim, "io_calls"), rs_field(shim->run.out, "expect_io"),
		     "locked calls: expected exactly the %lld calls on files: %s",
		     rs_field(shim->run.out, "expect_io"), shim->js);
	cr_expect_eq(stat_of(shim, "fd_races"), 0, "%s", shim->js);

	mutex = probe(base, "dup2", menv, 1, "dup", f1, f2, f3, NULL);
	cr_expect_str_eq(mutex->run.out, plain->run.out, "results differ with the shim (mutex)");
	res_free(plain);
	res_free(shim);
	res_free(mutex);
	rs_rm_rf(base);
	free(f1);
	free(f2);
	free(f3);
	free(base);
}

Test(fdtrack, close_range_and_closefrom_forget, .timeout = 30)
{
	char *base = rs_make_base("/dev/shm", "rs-fdt-"), *file = path_in(base, "c");
	struct res *r = probe(base, "cr", NULL, 1, "closerange", file, NULL);

	cr_assert_eq(rs_field(r->run.out, "expect_io"), 7, "%s", r->run.out);
	cr_expect_eq(stat_of(r, "io_calls"), 7,
		     "pwrite/pread on pipes that reuse closed numbers must not lock: %s", r->js);
	cr_expect_geq(stat_of(r, "passthrough"), 8, "%s", r->js);
	res_free(r);
	rs_rm_rf(base);
	free(file);
	free(base);
}

/* ---- (g) inherited stdout ------------------------------------------------------- */

/* fork; in the child open out_path O_APPEND as fd 1, err_path as fd 2, and
 * exec argv with the shim preloaded.  Returns the exit status, -1 on timeout. */
static int run_redirected(const char *out_path, const char *err_path, char *const argv[],
			  const char *const env[], int timeout_s)
{
	struct timespec t0, t1, ms10 = { 0, 10 * 1000 * 1000 };
	pid_t pid = fork(), w;
	int st;

	if (pid < 0)
		return -2;
	if (pid == 0) {
		int fo = open(out_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
		int fe = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		if (fo < 0 || fe < 0)
			_exit(126);
		dup2(fo, 1);
		dup2(fe, 2);
		close(fo);
		close(fe);
		unsetenv("LD_PRELOAD");
		for (int i = 0; env && env[i]; i++)
			putenv((char *)env[i]);
		setenv("LD_PRELOAD", RS_LIB, 1);
		execv(argv[0], argv);
		_exit(127);
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		w = waitpid(pid, &st, WNOHANG);
		if (w == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if (t1.tv_sec - t0.tv_sec > timeout_s) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return -1;
		}
		nanosleep(&ms10, NULL);
	}
}

static void inherited_stdout(const char *parent, const char *setting)
{
	char *base = rs_make_base(parent, "rs-fdt-");
	char *out = path_in(base, "out"), *err = path_in(base, "err"), *st = path_in(base, "st.json");
	char stats_env[PATH_MAX + 32], why[256];
	const char *env[3] = { stats_env, setting, NULL };
	char *argv[] = { (char *)HELPER, (char *)"stdout", (char *)"6", (char *)"200", NULL };
	const char *header = "earlier contents\n";
	int fd, status;
	char *js, *errtext;

	snprintf(stats_env, sizeof(stats_env), "RANGESHIM_STATS=%s", st);
	fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, header, strlen(header)), (ssize_t)strlen(header));
	close(fd);

	status = run_redirected(out, err, argv, env, 15);
	errtext = rs_read_file(err, NULL);
	cr_assert_eq(status, 0, "helper exited with %d; stderr:\n%s", status,
		     errtext ? errtext : "");
	cr_expect(errtext && errtext[0] == '\0', "unexpected stderr: %s", errtext);
	cr_expect_null(check_records(out, (long)strlen(header), 6, 200, why, sizeof(why)),
		       "%s", why);
	{
		char *s = rs_read_file(out, NULL);

		cr_expect(s && strncmp(s, header, strlen(header)) == 0,
			  "the appends overwrote what the file held");
		free(s);
	}
	js = rs_read_file(st, NULL);
	cr_assert_not_null(js, "no stats file");
	cr_assert(json_valid_object(js), "%s", js);
	cr_expect_eq(rs_json_num(js, "io_calls"), 1200,
		     "writes to an inherited regular-file stdout are coordinated: %s", js);
	cr_expect_eq(rs_json_num(js, "appends"), 1200,
		     "the inherited fd's O_APPEND is honoured: %s", js);
	free(js);
	free(errtext);
	rs_rm_rf(base);
	free(out);
	free(err);
	free(st);
	free(base);
}

Test(fdtrack, inherited_append_stdout_shm, .timeout = 30) { inherited_stdout("/dev/shm", NULL); }
Test(fdtrack, inherited_append_stdout_tmp, .timeout = 30) { inherited_stdout("/tmp", NULL); }
Test(fdtrack, inherited_append_stdout_mutex, .timeout = 30)
{
	inherited_stdout("/dev/shm", "RANGESHIM_LOCK=mutex");
}

/* ---- (h) RANGESHIM_STATS ----------------------------------------------------------- */

Test(fdtrack, stats_summary_on_stderr, .timeout = 30)
{
	char *base = rs_make_base("/dev/shm", "rs-fdt-"), *file = path_in(base, "f");
	const char *env[] = { "RANGESHIM_STATS=1", NULL };
	char *argv[] = { (char *)HELPER, (char *)"write", file, (char *)"5", NULL };
	struct rs_run *r = calloc(1, sizeof(*r));
	char line[512];
	const char *p;

	rs_run(r, argv, env, 1, 15);
	cr_assert_eq(r->status, 0, "%s", r->out);
	line_with(r->out, "io_calls", line, sizeof(line));
	cr_assert(line[0], "no io_calls in the summary:\n%s", r->out);
	p = strstr(line, "io_calls") + strlen("io_calls");
	cr_expect_eq(strtoll(p, NULL, 10), 10, "summary line: %s", line);
	cr_expect_eq(count_lines(r->out, "lock_waits"), 1, "%s", r->out);
	free(r);
	rs_rm_rf(base);
	free(file);
	free(base);
}

Test(fdtrack, stats_file_with_pid, .timeout = 30)
{
	char *base = rs_make_base("/dev/shm", "rs-fdt-"), *file = path_in(base, "f");
	char env0[PATH_MAX + 32], path[PATH_MAX], literal[PATH_MAX];
	const char *env[] = { env0, NULL };
	char *argv[] = { (char *)HELPER, (char *)"pid", file, (char *)"4", NULL };
	struct rs_run *r = calloc(1, sizeof(*r));
	long long pid;
	char *js;
	static const char *const keys[] = { "io_calls", "lock_waits", "node_acquires",
					    "node_revokes" };

	snprintf(env0, sizeof(env0), "RANGESHIM_STATS=%s/stats.%%p.json", base);
	rs_run(r, argv, env, 1, 15);
	cr_assert_eq(r->status, 0, "%s", r->out);
	pid = rs_field(r->out, "pid");
	cr_assert_gt(pid, 0, "%s", r->out);
	snprintf(path, sizeof(path), "%s/stats.%lld.json", base, pid);
	snprintf(literal, sizeof(literal), "%s/stats.%%p.json", base);
	cr_expect_neq(access(literal, F_OK), 0, "%%p was not replaced");
	js = rs_read_file(path, NULL);
	cr_assert_not_null(js, "no stats file %s", path);
	cr_expect(json_valid_object(js), "not valid JSON: %s", js);
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		cr_expect_geq(rs_json_num(js, keys[i]), 0, "key %s missing: %s", keys[i], js);
	cr_expect_eq(rs_json_num(js, "io_calls"), 8, "%s", js);
	cr_expect_eq(rs_json_num(js, "pid"), pid, "%s", js);
	/* The validator rejects what it should. */
	cr_expect(!json_valid_object("{\"a\": 1,}"));
	cr_expect(!json_valid_object("{\"a\": 01}"));
	cr_expect(!json_valid_object("{\"a\": 1} x"));
	cr_expect(json_valid_object("{\"a\": [1, -2.5e3, \"x\\n\", true, null, {}]}"));
	free(js);
	free(r);
	rs_rm_rf(base);
	free(file);
	free(base);
}

/* ---- (i) forked children ------------------------------------------------ */

/*
 * Children of one parent that use a descriptor the parent opened and never
 * used classify it at their first use (a lazy entry); the parent reads the
 * mount list before it forks, so that they need not: one read of
 * /proc/self/mountinfo for the whole family.  Counted with strace.  The
 * control: children that open the file themselves, after the fork, each
 * read the list, and strace sees each of those reads.
 */

/* strace's path on PATH, into out; 0 if found. */
static int find_strace(char *out, size_t len)
{
	const char *path = getenv("PATH");

	for (const char *p = path ? path : "/usr/bin:/bin"; *p;) {
		size_t n = strcspn(p, ":");

		snprintf(out, len, "%.*s/strace", (int)n, p);
		if (n && access(out, X_OK) == 0)
			return 0;
		p += n + (p[n] == ':');
	}
	return -1;
}

/* Skips the test unless a read of the mount list can be cached for dir's
 * device: the list is read whole (under 64 KiB, fdtable.c) and names the
 * device (a btrfs subvolume's st_dev is not in it). */
static void require_cached_mounts(const char *dir)
{
	static char mi[1 << 20];
	char want[48];
	struct stat st;
	long len = 0, k;
	int named, fd = open("/proc/self/mountinfo", O_RDONLY);

	if (fd < 0)
		cr_skip_test("no /proc/self/mountinfo");
	/* procfs has no size to seek to: read until the end. */
	while (len < (long)sizeof(mi) - 1 &&
	       (k = read(fd, mi + len, sizeof(mi) - 1 - (size_t)len)) > 0)
		len += k;
	close(fd);
	mi[len] = '\0';
	cr_assert_eq(stat(dir, &st), 0);
	snprintf(want, sizeof(want), " %u:%u ", major(st.st_dev), minor(st.st_dev));
	named = strstr(mi, want) != NULL;
	if (len >= 65535 || !named)
		cr_skip_test("the mount list is %ld bytes, and %s %s: the shim asks by path here",
			     len, named ? "names" : "does not name", want);
}

/* After fd_probe forked ran under strace (r): its reads of the mount
 * list in the strace log. */
static int reads_logged(const struct rs_run *r, const char *log)
{
	char *text;
	int n;

	cr_assert_eq(r->status, 0, "%s", r->out);
	cr_assert(strstr(r->out, "children_failed=0"), "%s", r->out);
	text = rs_read_file(log, NULL);
	cr_assert_not_null(text, "no strace log");
	n = count_lines(text, "/proc/self/mountinfo");
	free(text);
	return n;
}

static int mountinfo_reads(const char *how)
{
	char *base = rs_make_base("/tmp", "rs-fdt-"), *file = path_in(base, "f");
	char *log = path_in(base, "strace.log"), strace[PATH_MAX];
	char *argv[] = { strace, (char *)"-f", (char *)"-qq", (char *)"-e", (char *)"trace=openat",
			 (char *)"-o", log, (char *)HELPER, (char *)"forked", file, (char *)"4",
			 (char *)how, NULL };
	char *probe[] = { strace, (char *)"-f", (char *)"-o", (char *)"/dev/null",
			  (char *)"/bin/true", NULL };
	struct rs_run *r = calloc(1, sizeof(*r));
	int n;

	if (find_strace(strace, sizeof(strace)) != 0)
		cr_skip_test("no strace on PATH (tests/deps.sh installs it)");
	rs_run(r, probe, NULL, 0, 30);
	if (r->status != 0)
		cr_skip_test("strace cannot trace here: %s", r->out);
	require_cached_mounts(base);
	rs_run(r, argv, NULL, 1, 30);
	n = reads_logged(r, log);
	free(r);
	rs_rm_rf(base);
	free(log);
	free(file);
	free(base);
	return n;
}

Test(fdtrack, forked_children_read_no_mount_list, .timeout = 30)
{
	cr_expect_eq(mountinfo_reads("inherit"), 1);
}

Test(fdtrack, forked_children_opening_read_their_own, .timeout = 30)
{
	cr_expect_eq(mountinfo_reads("own"), 4);
}

/*
 * A mount list too long to read whole (64 KiB, fdtable.c) caches nothing,
 * and the shim asks by path instead.  The parent tries it once before its
 * first fork, not before every fork: with 4 children, 5 reads (the
 * parent's and one per child).  Made with 1000 tmpfs mounts in
 * a mount namespace of the test's own; skipped where that is refused.
 */
Test(fdtrack, forked_children_with_an_unreadable_mount_list, .timeout = 60)
{
	char *base = rs_make_base("/tmp", "rs-fdt-"), *file = path_in(base, "f");
	char *log = path_in(base, "strace.log"), strace[PATH_MAX], script[4 * PATH_MAX + 512];
	char *argv[] = { (char *)"/usr/bin/unshare", (char *)"-m", (char *)"--propagation",
			 (char *)"private", (char *)"/bin/sh", (char *)"-c", script, NULL };
	struct rs_run *r = calloc(1, sizeof(*r));

	if (find_strace(strace, sizeof(strace)) != 0)
		cr_skip_test("no strace on PATH (tests/deps.sh installs it)");
	snprintf(script, sizeof(script),
		 "i=0; while [ $i -lt 1000 ]; do mkdir -p %s/m/$i && "
		 "mount -t tmpfs -o size=4k none %s/m/$i || { echo SKIP mount; exit 0; }; "
		 "i=$((i + 1)); done; "
		 "[ $(wc -c </proc/self/mountinfo) -ge 65536 ] || { echo SKIP short; exit 0; }; "
		 "LD_PRELOAD=%s exec %s -f -qq -e trace=openat -o %s %s forked %s 4 inherit",
		 base, base, RS_LIB, strace, log, HELPER, file);
	rs_run(r, argv, NULL, 0, 50);
	if (r->status != 0 && !strstr(r->out, "children_failed"))
		cr_skip_test("no mount namespace here: %s", r->out);
	if (strstr(r->out, "SKIP"))
		cr_skip_test("%s", r->out);
	cr_expect_eq(reads_logged(r, log), 5, "%s", r->out);
	free(r);
	rs_rm_rf(base);
	free(log);
	free(file);
	free(base);
}
