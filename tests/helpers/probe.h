/*
 * Shared by the helper programs the suites run (each built as a single
 * file; the Makefile rebuilds them when a header here changes).
 */
#ifndef RS_TESTS_HELPERS_PROBE_H
#define RS_TESTS_HELPERS_PROBE_H

#include <errno.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

static inline int probe_shim_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	if (info->dlpi_name && strstr(info->dlpi_name, "librangeshim"))
		*(int *)data = 1;
	return 0;
}

/* Is the shim loaded into this process? */
static inline int shim_loaded(void)
{
	int found = 0;

	dl_iterate_phdr(probe_shim_cb, &found);
	return found;
}

/* A failed check in a helper: one line naming the place and errno, and
 * the helper's own `failed` set, which it reports at the end. */
#define CHECK(cond, ...)                                                      \
	do {                                                                  \
		if (!(cond)) {                                                \
			printf("FAIL %s:%d: ", __FILE__, __LINE__);           \
			printf(__VA_ARGS__);                                  \
			printf(" (errno %d)\n", errno);                       \
			failed = 1;                                           \
		}                                                             \
	} while (0)

/* Seconds on the monotonic clock. */
static inline double probe_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Every byte of b[0, n) equals the first: one writer's block, not torn. */
static inline int probe_uniform(const unsigned char *b, size_t n)
{
	for (size_t i = 1; i < n; i++)
		if (b[i] != b[0])
			return 0;
	return 1;
}

/*
 * A read of r bytes at off, asked for want bytes, of a file written in
 * records of rec bytes, each by one writer: torn if a short read stops
 * inside a record (end of file is always a record's end) or a record's
 * part in b is not uniform.
 */
static inline int probe_records_torn(const unsigned char *b, ssize_t r, long long off,
				     ssize_t want, long long rec)
{
	if (r < want && (off + r) % rec != 0)
		return 1;
	for (ssize_t p = 0; p < r;) {
		ssize_t end = (ssize_t)((off + p) / rec * rec + rec - off);

		if (end > r)
			end = r;
		if (!probe_uniform(b + p, (size_t)(end - p)))
			return 1;
		p = end;
	}
	return 0;
}

#endif
