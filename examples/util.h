/*
 * Option helpers shared by the examples and tests/bench/iobench.c, each
 * built as a single file: include this header by relative path.
 */
#ifndef RS_EXAMPLES_UTIL_H
#define RS_EXAMPLES_UTIL_H

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Accepts 4096, 64k, 1M, 2g (binary multiples).  Rejects 0 and overflow. */
static inline bool parse_size(const char *s, uint64_t *out)
{
	char *end;
	uint64_t v, mult = 1;

	if (*s < '0' || *s > '9')
		return false;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return false;
	switch (*end) {
	case 'k': case 'K': mult = 1ULL << 10; end++; break;
	case 'm': case 'M': mult = 1ULL << 20; end++; break;
	case 'g': case 'G': mult = 1ULL << 30; end++; break;
	default: break;
	}
	if (*end != '\0' || v == 0 || v > UINT64_MAX / mult)
		return false;
	*out = v * mult;
	return true;
}

/* A plain decimal number, 0 allowed; no sign, no suffix. */
static inline bool parse_u64(const char *s, uint64_t *out)
{
	char *end;

	if (*s < '0' || *s > '9')
		return false;
	errno = 0;
	*out = strtoull(s, &end, 10);
	return errno == 0 && *end == '\0';
}

/* v in the largest binary unit that divides it: "64 MiB", "4 KiB", "100 B". */
static inline void fmt_size(char *buf, size_t n, uint64_t v)
{
	if (v % (1ULL << 30) == 0)
		snprintf(buf, n, "%" PRIu64 " GiB", v >> 30);
	else if (v % (1ULL << 20) == 0)
		snprintf(buf, n, "%" PRIu64 " MiB", v >> 20);
	else if (v % (1ULL << 10) == 0)
		snprintf(buf, n, "%" PRIu64 " KiB", v >> 10);
	else
		snprintf(buf, n, "%" PRIu64 " B", v);
}

#ifdef PROG
#include <stdarg.h>
#include <string.h>

#include <unistd.h>

/*
 * The file to remove at exit.  Global only because exit() may be called
 * from any thread on an I/O error and the file must not be left behind.
 */
static char *cleanup_path;

static inline void remove_file(void)
{
	if (cleanup_path)
		unlink(cleanup_path);
}

/* Report a failed system call (errno) and exit 2. */
static inline __attribute__((noreturn)) void die(const char *what, const char *path)
{
	int e = errno;

	if (path)
		fprintf(stderr, PROG ": %s %s: %s\n", what, path, strerror(e));
	else
		fprintf(stderr, PROG ": %s: %s\n", what, strerror(e));
	exit(2);
}

/* A bad command line: one line, a pointer to --help, exit 2. */
static inline __attribute__((noreturn, format(printf, 1, 2))) void
usage_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, PROG ": ");
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '" PROG " --help' for more information.\n");
	exit(2);
}
#endif

#endif
