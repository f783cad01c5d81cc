/*
 * Per-file lock waits (filewaits.h).
 *
 * A fixed table of RS_FW_SLOTS files keyed by dev:ino, claimed lock-free
 * on a file's first wait.  A slot goes 0 (free) -> 1 (being claimed: its
 * key is being written) -> 2 (in use) and never back, except in a fork
 * child, where only one thread is left.  A thread that meets a slot in
 * state 1 waits for it to become 2 before comparing keys, so one file never
 * gets two slots.  Files met when the table is full count in `untracked`.
 *
 * The claiming thread also records the file's name, once: from the
 * caller's path if absolute, else /proc/self/fd/FD if that is still the
 * file (fstat), else by looking through
 * /proc/self/fd for a descriptor of ours on that file (a node wait knows
 * no fd).  Only raw system calls and the stack: no malloc, no stdio, so it
 * is safe wherever a wait can happen.  The report reads the name only once
 * `named` says it is complete.
 */
#include "filewaits.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "futex.h"

#define PATH_LEN 256

struct slot {
	_Atomic uint32_t state;
	_Atomic uint32_t named;
	_Atomic uint64_t dev, ino;
	_Atomic uint64_t lock_waits, node_waits, wait_ns;
	char path[PATH_LEN];
};

static struct slot slots[RS_FW_SLOTS];
static _Atomic uint64_t untracked;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static long link_of(int dir, const char *name, char *out)
{
	long n = syscall(SYS_readlinkat, dir, name, out, PATH_LEN - 1);

	if (n > 0)
		out[n] = '\0';
	return n;
}

/* Some descriptor of ours on f, found through /proc/self/fd. */
static long name_by_scan(struct rs_file *f, char *out)
{
	struct dent { uint64_t ino; int64_t off; unsigned short reclen; unsigned char type; char name[]; };
	char buf[2048];
	long dir, n, got = -1;

	dir = syscall(SYS_openat, AT_FDCWD, "/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0)
		return -1;
	while (got < 0 && (n = syscall(SYS_getdents64, dir, buf, sizeof(buf))) > 0) {
		for (long at = 0; at < n && got < 0;) {
			struct dent *d = (struct dent *)(buf + at);
			int fd = 0;
			uint64_t e;

			at += d->reclen;
			if (d->name[0] < '0' || d->name[0] > '9')
				continue;
			for (const char *c = d->name; *c >= '0' && *c <= '9'; c++)
				fd = fd * 10 + (*c - '0');
			if (fd == dir)
				continue;
			e = rs_fdt_get(fd);
			if ((e & 3u) != RS_FD_TRACKED ||
			    rs_fdt_file(atomic_load_explicit(&rs_fdt_desc(e)->file,
							     memory_order_relaxed)) != f)
				continue;
			got = link_of((int)dir, d->name, out);
		}
	}
	syscall(SYS_close, dir);
	return got;
}

static void name_slot(struct slot *s, struct rs_file *f, int fd, const char *path)
{
	char link[32];
	long n = -1;

	if (path && path[0] == '/') {
		size_t l = strlen(path);

		if (l >= PATH_LEN)
			l = PATH_LEN - 1;
		memcpy(s->path, path, l);
		s->path[l] = '\0';
		n = (long)l;
	} else if (fd >= 0) {
		struct stat st;

		/* Another thread may have closed fd and opened something else
		 * on its number since our lock: the name must be f's. */
		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		n = link_of(AT_FDCWD, link, s->path);
		if (n > 0 && (syscall(SYS_fstat, fd, &st) < 0 ||
			      (uint64_t)st.st_dev != atomic_load_explicit(&s->dev, memory_order_relaxed) ||
			      (uint64_t)st.st_ino != atomic_load_explicit(&s->ino, memory_order_relaxed)))
			n = -1;
	}
	if (n <= 0)
		n = name_by_scan(f, s->path);
	if (n > 0)
		atomic_store_explicit(&s->named, 1, memory_order_release);
}

/* f's slot, claimed (and named) if it is the first wait on f; NULL when
 * the table is full. */
static struct slot *slot_of(struct rs_file *f, int fd, const char *path)
{
	uint64_t dev = atomic_load_explicit(&f->dev, memory_order_relaxed);
	uint64_t ino = atomic_load_explicit(&f->ino, memory_order_relaxed);

	for (int i = 0; i < RS_FW_SLOTS; i++) {
		struct slot *s = &slots[i];
		uint32_t st = atomic_load_explicit(&s->state, memory_order_acquire);

		if (st == 0) {
			uint32_t z = 0;

			if (atomic_compare_exchange_strong(&s->state, &z, 1)) {
				atomic_store_explicit(&s->dev, dev, memory_order_relaxed);
				atomic_store_explicit(&s->ino, ino, memory_order_relaxed);
				atomic_store_explicit(&s->state, 2, memory_order_release);
				name_slot(s, f, fd, path);
				return s;
			}
			st = z;
		}
		while (st == 1) {
			rs_cpu_relax();
			st = atomic_load_explicit(&s->state, memory_order_acquire);
		}
		if (st == 2 && atomic_load_explicit(&s->dev, memory_order_relaxed) == dev &&
		    atomic_load_explicit(&s->ino, memory_order_relaxed) == ino)
			return s;
	}
	return NULL;
}

static void note(struct rs_file *f, int fd, const char *path, int node, uint64_t ns)
{
	struct slot *s = slot_of(f, fd, path);

	if (!s) {
		atomic_fetch_add_explicit(&untracked, 1, memory_order_relaxed);
		return;
	}
	atomic_fetch_add_explicit(node ? &s->node_waits : &s->lock_waits, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->wait_ns, ns, memory_order_relaxed);
}

/* Both keep errno: the real call comes next, and a call that succeeds
 * must leave errno as the caller had it, with or without the shim. */
void rs_fw_lock_wait(struct rs_file *f, int fd, const char *path, const struct rs_rl_node *node)
{
	int saved = errno;
	uint64_t t = now_ns();

	note(f, fd, path, 0, node->since && node->since < t ? t - node->since : 0);
	errno = saved;
}

void rs_fw_node_wait(struct rs_file *f, uint64_t ns)
{
	int saved = errno;

	if (__builtin_expect(rs_stats_on, 0))
		note(f, -1, NULL, 1, ns);
	errno = saved;
}

static uint64_t waits(const struct slot *s)
{
	return atomic_load_explicit(&s->lock_waits, memory_order_relaxed) +
	       atomic_load_explicit(&s->node_waits, memory_order_relaxed);
}

/* The top RS_FW_REPORT slots by waits (then time), into top[]. */
static int rank(const struct slot **top)
{
	int n = 0;

	for (int i = 0; i < RS_FW_SLOTS; i++) {
		const struct slot *s = &slots[i];
		int at;

		if (atomic_load_explicit(&s->state, memory_order_acquire) != 2 || !waits(s))
			continue;
		for (at = n; at > 0; at--) {
			const struct slot *o = top[at - 1];

			if (waits(o) > waits(s) ||
			    (waits(o) == waits(s) && atomic_load_explicit(&o->wait_ns, memory_order_relaxed) >=
						     atomic_load_explicit(&s->wait_ns, memory_order_relaxed)))
				break;
			if (at < RS_FW_REPORT)
				top[at] = o;
		}
		if (at < RS_FW_REPORT) {
			top[at] = s;
			if (n < RS_FW_REPORT)
				n++;
		}
	}
	return n;
}

#define APPEND(fmt, ...)                                                      \
	do {                                                                  \
		int k_ = snprintf(buf + n, n < size ? size - n : 0, fmt, __VA_ARGS__); \
		if (k_ > 0)                                                   \
			n += (unsigned long)k_;                               \
	} while (0)

unsigned long rs_fw_json(char *buf, unsigned long size, unsigned long n)
{
	const struct slot *top[RS_FW_REPORT];
	int k = rank(top);

	APPEND(", \"file_waits_untracked\": %llu, \"files\": [",
	       (unsigned long long)atomic_load_explicit(&untracked, memory_order_relaxed));
	for (int i = 0; i < k; i++) {
		const struct slot *s = top[i];
		uint64_t dev = atomic_load_explicit(&s->dev, memory_order_relaxed);

		APPEND("%s{\"path\": ", i ? ", " : "");
		if (atomic_load_explicit(&s->named, memory_order_acquire))
			n = rs_json_str(buf, size, n, s->path);
		else
			APPEND("%s", "null");
		APPEND(", \"dev\": \"%u:%u\", \"ino\": %llu, \"lock_waits\": %llu, \"node_waits\": %llu, "
		       "\"wait_ns\": %llu}", major(dev), minor(dev),
		       (unsigned long long)atomic_load_explicit(&s->ino, memory_order_relaxed),
		       (unsigned long long)atomic_load_explicit(&s->lock_waits, memory_order_relaxed),
		       (unsigned long long)atomic_load_explicit(&s->node_waits, memory_order_relaxed),
		       (unsigned long long)atomic_load_explicit(&s->wait_ns, memory_order_relaxed));
	}
	APPEND("%s", "]");
	return n;
}

unsigned long rs_fw_text(char *buf, unsigned long size, unsigned long n)
{
	const struct slot *top[RS_FW_REPORT];
	int k = rank(top);

	if (!k)
		return n;
	APPEND("  top files by lock waits (lock_waits node_waits wait_ms path):%s\n", "");
	for (int i = 0; i < k; i++) {
		const struct slot *s = top[i];

		char shown[PATH_LEN];
		size_t l = 0;

		/* A name is any bytes: keep control characters off the terminal. */
		if (atomic_load_explicit(&s->named, memory_order_acquire))
			for (; s->path[l] && l + 1 < sizeof(shown); l++)
				shown[l] = (unsigned char)s->path[l] < 0x20 || s->path[l] == 0x7f
					   ? '?' : s->path[l];
		else
			shown[l++] = '?';
		shown[l] = '\0';
		APPEND("  %10llu %10llu %10.1f  %s\n",
		       (unsigned long long)atomic_load_explicit(&s->lock_waits, memory_order_relaxed),
		       (unsigned long long)atomic_load_explicit(&s->node_waits, memory_order_relaxed),
		       (double)atomic_load_explicit(&s->wait_ns, memory_order_relaxed) / 1e6, shown);
	}
	return n;
}

void rs_fw_reset(void)
{
	const unsigned char *c = (const unsigned char *)slots;

	/* Only if something is there: a fork's child that writes a page it
	 * shares with its parent copies it (stats.c, rs_stats_reset). */
	for (size_t i = 0; i < sizeof(slots); i++)
		if (c[i]) {
			memset((void *)slots, 0, sizeof(slots));
			break;
		}
	if (atomic_load_explicit(&untracked, memory_order_relaxed))
		atomic_store_explicit(&untracked, 0, memory_order_relaxed);
}
