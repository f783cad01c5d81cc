/*
 * RANGESHIM_STATS counters, per thread (stats.h).
 *
 * Blocks live in a static array, never in thread-local storage, so that a
 * report that reads them while a thread exits reads memory that is always
 * there.  A thread claims a free block on its first count and a pthread
 * key's destructor gives it back at thread exit, after adding it to
 * `rest`, the shared totals.  Threads beyond the array, and counts made
 * after the thread's destructor ran, go to `rest` with atomic adds.  A
 * report taken while a thread is exiting may miss that thread's last
 * counts (the block is zeroed before it is folded): it never counts
 * anything twice.
 */
#include "stats.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "utf8.h"
#include "rawsyscall.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Per-file waits (filewaits.c): in the library, absent from the unit
 * tests that link this file alone. */
unsigned long rs_fw_json(char *buf, unsigned long size, unsigned long n) __attribute__((weak));
unsigned long rs_fw_text(char *buf, unsigned long size, unsigned long n) __attribute__((weak));
void rs_fw_reset(void) __attribute__((weak));
uint64_t rs_fw_total(size_t off) __attribute__((weak));

#define RS_STATS_SLOTS 256

int rs_stats_on;
__thread struct rs_stats *rs_tstat __attribute__((tls_model("initial-exec")));
/* 1: this thread has no block of its own (exited, or none was free). */
static __thread int no_block __attribute__((tls_model("initial-exec")));
static struct rs_stats slots[RS_STATS_SLOTS];
static _Atomic int slot_used[RS_STATS_SLOTS];
static struct rs_stats rest;
static pthread_key_t exit_key;
static _Atomic int key_ok;

#define NFIELDS (sizeof(struct rs_stats) / sizeof(_Atomic uint64_t))

static _Atomic uint64_t *field(struct rs_stats *s, size_t i)
{
	return (_Atomic uint64_t *)s + i;
}

static void fold(struct rs_stats *s)
{
	for (size_t i = 0; i < NFIELDS; i++) {
		uint64_t v = atomic_exchange_explicit(field(s, i), 0, memory_order_relaxed);

		if (v)
			atomic_fetch_add_explicit(field(&rest, i), v, memory_order_relaxed);
	}
}

static void thread_exit(void *arg)
{
	struct rs_stats *s = rs_tstat;

	(void)arg;
	no_block = 1;
	rs_tstat = NULL;
	if (s) {
		fold(s);
		atomic_store_explicit(&slot_used[s - slots], 0, memory_order_release);
	}
}

void rs_count_slow(size_t off, uint64_t n)
{
	if (!no_block && atomic_load_explicit(&key_ok, memory_order_acquire)) {
		for (int i = 0; i < RS_STATS_SLOTS; i++) {
			int z = 0;

			if (atomic_load_explicit(&slot_used[i], memory_order_relaxed) ||
			    !atomic_compare_exchange_strong(&slot_used[i], &z, 1))
				continue;
			/* Non-NULL, so that the destructor runs at thread exit. */
			if (pthread_setspecific(exit_key, &slots[i]) != 0) {
				atomic_store(&slot_used[i], 0);
				break;
			}
			rs_tstat = &slots[i];
			rs_count_add(off, n);
			return;
		}
		no_block = 1;
	}
	atomic_fetch_add_explicit((_Atomic uint64_t *)((char *)&rest + off), n,
				  memory_order_relaxed);
}

/* When this program image started counting (wall clock), for the job's
 * start, end and wall time in `rangeshim stats`. */
static uint64_t start_ns;

static uint64_t wall_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void rs_stats_init(void)
{
	start_ns = wall_ns();
	if (!atomic_load(&key_ok) && pthread_key_create(&exit_key, thread_exit) == 0)
		atomic_store_explicit(&key_ok, 1, memory_order_release);
}

uint64_t rs_stats_get(size_t off)
{
	size_t i = off / sizeof(_Atomic uint64_t);
	uint64_t sum = atomic_load_explicit(field(&rest, i), memory_order_relaxed);

	for (int k = 0; k < RS_STATS_SLOTS; k++)
		sum += atomic_load_explicit(field(&slots[k], i), memory_order_relaxed);
	/* The inline path counts calls and bytes per file. */
	if (rs_fw_total)
		sum += rs_fw_total(off);
	return sum;
}

#define APPEND(fmt, ...)                                                      \
	do {                                                                  \
		int k_ = snprintf(buf + n, n < size ? size - n : 0, fmt, __VA_ARGS__); \
		if (k_ > 0)                                                   \
			n += (unsigned long)k_;                               \
	} while (0)

#define RS_STATS_SUM(name) ((unsigned long long)rs_stats_get(offsetof(struct rs_stats, name)))

unsigned long rs_json_str(char *buf, unsigned long size, unsigned long n, const char *s)
{
	APPEND("%s", "\"");
	for (const unsigned char *p = (const unsigned char *)s; *p;) {
		size_t k = rs_utf8_len(p);

		if (k == 0) {
			APPEND("%s", "\\ufffd");
			k = 1;
		} else if (*p == '"' || *p == '\\') {
			APPEND("\\%c", *p);
		} else if (*p < 0x20 || *p == 0x7f) {
			APPEND("\\u%04x", *p);
		} else {
			APPEND("%.*s", (int)k, (const char *)p);
		}
		p += k;
	}
	APPEND("%s", "\"");
	return n;
}

/* The command line, arguments joined by spaces (/proc/self/cmdline; raw
 * system calls, no allocation: this runs at exit, also from _exit). */
static void cmdline(char *out, size_t len)
{
	long fd = rs_sys(SYS_openat, AT_FDCWD, "/proc/self/cmdline", O_RDONLY | O_CLOEXEC), got = 0;

	out[0] = '\0';
	if (fd < 0)
		return;
	got = rs_sys(SYS_read, fd, out, len - 1);
	rs_sys(SYS_close, fd);
	if (got <= 0)
		return;
	while (got > 0 && out[got - 1] == '\0')
		got--;
	for (long i = 0; i < got; i++)
		if (out[i] == '\0')
			out[i] = ' ';
	out[got] = '\0';
}

/* What a job summary needs of the process: who, where, when, in which
 * batch job, and whether the user left it out (RANGESHIM_*_CMDS). */
static unsigned long job_fields(char *buf, unsigned long size, unsigned long n)
{
	const char *job = getenv("SLURM_JOB_ID"), *pbs = getenv("PBS_JOBID");
	char host[256] = "", cmd[1024];

	if (!job || !*job)
		job = pbs && *pbs ? pbs : NULL;
	if (gethostname(host, sizeof host - 1) < 0)
		host[0] = '\0';
	cmdline(cmd, sizeof cmd);
	APPEND(", \"ppid\": %ld, \"uid\": %lu, \"start_ns\": %llu, \"end_ns\": %llu, \"host\": ",
	       (long)getppid(), (unsigned long)getuid(), (unsigned long long)start_ns,
	       (unsigned long long)wall_ns());
	n = rs_json_str(buf, size, n, host);
	APPEND("%s", ", \"cmdline\": ");
	n = rs_json_str(buf, size, n, cmd);
	APPEND("%s", ", \"job_id\": ");
	if (job)
		n = rs_json_str(buf, size, n, job);
	else
		APPEND("%s", "null");
	APPEND("%s", ", \"skipped\": ");
	if (rs_cfg.skipped)
		n = rs_json_str(buf, size, n, rs_cfg.only_cmds[0] ? "not in RANGESHIM_ONLY_CMDS" :
						     "in RANGESHIM_SKIP_CMDS");
	else
		APPEND("%s", "null");
	return n;
}

int rs_stats_json(char *buf, unsigned long size, long pid)
{
	unsigned long n = 0;

	APPEND("{\"pid\": %ld, \"program\": ", pid);
	/* argv[0]'s last part, set by glibc before any constructor runs;
	 * a fork child keeps its parent's, as ps does. */
	n = rs_json_str(buf, size, n, program_invocation_short_name ? program_invocation_short_name : "");
	n = job_fields(buf, size, n);
#define RS_STATS_JSON(name, doc) APPEND(", \"%s\": %llu", #name, RS_STATS_SUM(name));
	RS_STATS_FIELDS(RS_STATS_JSON)
#undef RS_STATS_JSON
	if (rs_fw_json)
		n = rs_fw_json(buf, size, n);
	APPEND("%s", "}\n");
	return (int)(n < size ? n : size - 1);
}

int rs_stats_text(char *buf, unsigned long size, long pid)
{
	unsigned long n = 0;

	APPEND("rangeshim[%ld] stats:\n", pid);
	if (rs_cfg.skipped)
		APPEND("  %s is %s: its I/O was NOT coordinated (the user's choice)\n",
		       program_invocation_short_name,
		       rs_cfg.only_cmds[0] ? "not in RANGESHIM_ONLY_CMDS" : "in RANGESHIM_SKIP_CMDS");
#define RS_STATS_TEXT(name, doc) APPEND("  %-19s %12llu  %s\n", #name, RS_STATS_SUM(name), doc);
	RS_STATS_FIELDS(RS_STATS_TEXT)
#undef RS_STATS_TEXT
	if (rs_fw_text)
		n = rs_fw_text(buf, size, n);
	return (int)(n < size ? n : size - 1);
}

/* fork's child: the other threads are gone, and so are their counts.
 * Only the blocks in use are cleared (a block is folded to zero before
 * it is given back): a child that writes a page it shares with its
 * parent copies it, a page fault and a TLB flush, and hundreds of forked
 * workers paid for every page of these arrays. */
static void stats_blocks_reset(void)
{
	for (int k = 0; k < RS_STATS_SLOTS; k++) {
		if (!atomic_load_explicit(&slot_used[k], memory_order_relaxed) &&
		    &slots[k] != rs_tstat)
			continue;
		memset((void *)&slots[k], 0, sizeof(slots[k]));
		if (&slots[k] != rs_tstat)
			atomic_store_explicit(&slot_used[k], 0, memory_order_relaxed);
	}
	memset((void *)&rest, 0, sizeof(rest));
}

void rs_stats_reset(void)
{
	/* Nothing counts with stats off (RS_COUNT), and nothing reads these:
	 * the blocks stay as the parent left them, untouched. */
	if (rs_stats_on) {
		start_ns = wall_ns();
		stats_blocks_reset();
	}
	if (rs_fw_reset)
		rs_fw_reset();
}
