#include "stats.h"

#include <stdio.h>
#include <string.h>

struct rs_stats rs_stats;
int rs_stats_on;

#define APPEND(fmt, ...)                                                      \
	do {                                                                  \
		int k_ = snprintf(buf + n, n < size ? size - n : 0, fmt, __VA_ARGS__); \
		if (k_ > 0)                                                   \
			n += (unsigned long)k_;                               \
	} while (0)

int rs_stats_json(char *buf, unsigned long size, long pid)
{
	unsigned long n = 0;

	APPEND("{\"pid\": %ld", pid);
#define RS_STATS_JSON(name, doc) \
	APPEND(", \"%s\": %llu", #name, \
	       (unsigned long long)atomic_load_explicit(&rs_stats.name, memory_order_relaxed));
	RS_STATS_FIELDS(RS_STATS_JSON)
#undef RS_STATS_JSON
	APPEND("%s", "}\n");
	return (int)(n < size ? n : size - 1);
}

int rs_stats_text(char *buf, unsigned long size, long pid)
{
	unsigned long n = 0;

	APPEND("rangeshim[%ld] stats:\n", pid);
#define RS_STATS_TEXT(name, doc) \
	APPEND("  %-15s %12llu  %s\n", #name, \
	       (unsigned long long)atomic_load_explicit(&rs_stats.name, memory_order_relaxed), doc);
	RS_STATS_FIELDS(RS_STATS_TEXT)
#undef RS_STATS_TEXT
	return (int)(n < size ? n : size - 1);
}

void rs_stats_reset(void)
{
#define RS_STATS_ZERO(name, doc) atomic_store_explicit(&rs_stats.name, 0, memory_order_relaxed);
	RS_STATS_FIELDS(RS_STATS_ZERO)
#undef RS_STATS_ZERO
}
