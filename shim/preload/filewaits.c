/*
 * Per-file figures (filewaits.h).
 *
 * A fixed table of RS_FW_SLOTS files keyed by dev:ino, claimed lock-free
 * when the fd table first meets a file (stats on), or on a file's first
 * wait or uncovered call.  A slot goes 0 (free) -> 1 (being claimed: its
 * key is being written) -> 2 (in use) and never back: a fork child zeroes
 * the counts and keeps the keys, because its open files still point at
 * their slots.  A thread that meets a slot in state 1 waits for it to
 * become 2 before comparing keys, so one file never gets two slots.  Files
 * met when the table is full share `other`; their waits also count in
 * `untracked`.
 *
 * The claiming thread also records the file's name, once: from the
 * caller's path if absolute, else /proc/self/fd/FD if that is still the
 * file (fstat), else by looking through
 * /proc/self/fd for a descriptor of ours on that file.  Only raw system
 * calls and the stack: no malloc, no stdio, so it is safe wherever a wait
 * can happen.  The report reads the name only once `named` says it is
 * complete.
 */
#include "filewaits.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "fileid.h"
#include "futex.h"
#include "rawsyscall.h"
#include "state.h"

#define PATH_LEN 256

struct slot {
	_Atomic uint32_t state;
	_Atomic uint32_t named;
	_Atomic uint64_t dev, ino;
	_Atomic uint64_t lock_waits, node_waits, wait_ns;
	_Atomic uint64_t calls, bytes_read, bytes_written;  /* general path */
	_Atomic uint64_t uncovered;
	struct rs_fio fio;                                 /* inline path */
	char path[PATH_LEN];
};

static struct slot slots[RS_FW_SLOTS];
/* Every file beyond the table, together; never named. */
static struct slot other;
static _Atomic uint64_t untracked, other_files;
/* Above every slot ever claimed. */
static _Atomic int slots_hi;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static long link_of(int dir, const char *name, char *out)
{
	long n = rs_sys(SYS_readlinkat, dir, name, out, PATH_LEN - 1);

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

	dir = rs_sys(SYS_openat, AT_FDCWD, "/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0)
		return -1;
	while (got < 0 && (n = rs_sys(SYS_getdents64, dir, buf, sizeof(buf))) > 0) {
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
	rs_sys(SYS_close, dir);
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
		if (n > 0 && (rs_sys(SYS_fstat, fd, &st) < 0 ||
			      (uint64_t)st.st_dev != atomic_load_explicit(&s->dev, memory_order_relaxed) ||
			      (uint64_t)st.st_ino != atomic_load_explicit(&s->ino, memory_order_relaxed)))
			n = -1;
	}
	if (n <= 0)
		n = f ? name_by_scan(f, s->path)
		      : rs_file_path(atomic_load_explicit(&s->dev, memory_order_relaxed),
				     atomic_load_explicit(&s->ino, memory_order_relaxed), s->path,
				     PATH_LEN);
	if (n > 0)
		atomic_store_explicit(&s->named, 1, memory_order_release);
}

/* The slot of dev:ino (f: its file record, or NULL), claimed (and named)
 * if it is the first time; NULL when the table is full. */
static struct slot *slot_at(uint64_t dev, uint64_t ino, struct rs_file *f, int fd,
			    const char *path)
{
	for (int i = 0; i < RS_FW_SLOTS; i++) {
		struct slot *s = &slots[i];
		uint32_t st = atomic_load_explicit(&s->state, memory_order_acquire);

		if (st == 0) {
			uint32_t z = 0;
			int hi = atomic_load_explicit(&slots_hi, memory_order_relaxed);

			/* Raised first, so that a fork in the middle of the
			 * claim still sees this slot (rs_fw_reset). */
			while (hi <= i && !atomic_compare_exchange_weak_explicit(
				       &slots_hi, &hi, i + 1, memory_order_relaxed,
				       memory_order_relaxed))
				;
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

static struct slot *slot_of(struct rs_file *f, int fd, const char *path)
{
	return slot_at(atomic_load_explicit(&f->dev, memory_order_relaxed),
		       atomic_load_explicit(&f->ino, memory_order_relaxed), f, fd, path);
}

/* The slot whose inline-path record f points at. */
static struct slot *slot_from_fio(struct rs_fio *c)
{
	return (struct slot *)((char *)c - offsetof(struct slot, fio));
}

struct rs_fio *rs_fw_file_io(struct rs_file *f, int fd)
{
	struct slot *s = NULL;
	int saved = errno;

	if (rs_stats_on) {
		s = slot_of(f, fd, NULL);
		if (!s)
			atomic_fetch_add_explicit(&other_files, 1, memory_order_relaxed);
	}
	errno = saved;
	return s ? &s->fio : &other.fio;
}

static void add(_Atomic uint64_t *c, uint64_t v)
{
	atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

void rs_fw_general(struct rs_file *f, unsigned rw, long long r)
{
	struct rs_fio *c = atomic_load_explicit(&f->fio, memory_order_relaxed);
	struct slot *s = c ? slot_from_fio(c) : &other;

	add(&s->calls, 1);
	if (r > 0) {
		if (rw & 1)
			add(&s->bytes_read, (uint64_t)r);
		if (rw & 2)
			add(&s->bytes_written, (uint64_t)r);
	}
}

void rs_fw_uncovered(int fd)
{
	struct stat st;
	struct slot *s;
	int saved = errno;

	if (fd < 0 || rs_sys(SYS_fstat, fd, &st) < 0) {
		errno = saved;
		return;
	}
	s = slot_at((uint64_t)st.st_dev, (uint64_t)st.st_ino, NULL, fd, NULL);
	add(&(s ? s : &other)->uncovered, 1);
	errno = saved;
}

uint64_t rs_fw_total(size_t off)
{
	size_t k;
	uint64_t sum = 0;

	if (off == offsetof(struct rs_stats, io_calls))
		k = offsetof(struct rs_fio, calls);
	else if (off == offsetof(struct rs_stats, bytes_read))
		k = offsetof(struct rs_fio, bytes_read);
	else if (off == offsetof(struct rs_stats, bytes_written))
		k = offsetof(struct rs_fio, bytes_written);
	else
		return 0;
	for (int i = 0, hi = atomic_load_explicit(&slots_hi, memory_order_relaxed); i <= hi; i++) {
		struct rs_fio *c = i < hi ? &slots[i].fio : &other.fio;

		sum += atomic_load_explicit((_Atomic uint64_t *)((char *)c + k), memory_order_relaxed);
	}
	return sum;
}

static void note(struct rs_file *f, int fd, const char *path, int node, uint64_t ns)
{
	struct slot *s = slot_of(f, fd, path);

	if (!s) {
		atomic_fetch_add_explicit(&untracked, 1, memory_order_relaxed);
		s = &other;
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

#define LD(x) atomic_load_explicit(&(x), memory_order_relaxed)

static uint64_t waits(const struct slot *s)
{
	return LD(s->lock_waits) + LD(s->node_waits);
}

static uint64_t calls(const struct slot *s)
{
	return LD(s->calls) + LD(s->fio.calls);
}

static uint64_t bytes_read(const struct slot *s)
{
	return LD(s->bytes_read) + LD(s->fio.bytes_read);
}

static uint64_t bytes_written(const struct slot *s)
{
	return LD(s->bytes_written) + LD(s->fio.bytes_written);
}

static uint64_t bytes(const struct slot *s)
{
	return bytes_read(s) + bytes_written(s);
}

static int active(const struct slot *s)
{
	return calls(s) || bytes(s) || waits(s) || LD(s->uncovered);
}

/* Does a come before b: more bytes, then more waits, more time waited,
 * more calls. */
static int before(const struct slot *a, const struct slot *b)
{
	if (bytes(a) != bytes(b))
		return bytes(a) > bytes(b);
	if (waits(a) != waits(b))
		return waits(a) > waits(b);
	if (LD(a->wait_ns) != LD(b->wait_ns))
		return LD(a->wait_ns) > LD(b->wait_ns);
	return calls(a) > calls(b);
}

/* The top RS_FW_REPORT slots with anything to say, into top[]; *rest
 * the number of the others. */
static int rank(const struct slot **top, int *rest)
{
	int n = 0;

	*rest = 0;
	for (int i = 0; i < RS_FW_SLOTS; i++) {
		const struct slot *s = &slots[i];
		int at;

		if (atomic_load_explicit(&s->state, memory_order_acquire) != 2 || !active(s))
			continue;
		for (at = n; at > 0 && before(s, top[at - 1]); at--)
			if (at < RS_FW_REPORT)
				top[at] = top[at - 1];
		if (at < RS_FW_REPORT) {
			if (n == RS_FW_REPORT)
				++*rest;	/* the last one fell off */
			top[at] = s;
			if (n < RS_FW_REPORT)
				n++;
		} else {
			++*rest;
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

/* The counts of one file, or of the files summed in o. */
struct sums {
	uint64_t calls, bytes_read, bytes_written, lock_waits, node_waits, wait_ns, uncovered;
};

static void sum_into(struct sums *o, const struct slot *s)
{
	o->calls += calls(s);
	o->bytes_read += bytes_read(s);
	o->bytes_written += bytes_written(s);
	o->lock_waits += LD(s->lock_waits);
	o->node_waits += LD(s->node_waits);
	o->wait_ns += LD(s->wait_ns);
	o->uncovered += LD(s->uncovered);
}

static unsigned long sums_json(char *buf, unsigned long size, unsigned long n, const struct sums *o)
{
	APPEND("\"lock_waits\": %llu, \"node_waits\": %llu, \"wait_ns\": %llu, \"calls\": %llu, "
	       "\"bytes_read\": %llu, \"bytes_written\": %llu, \"uncovered\": %llu",
	       (unsigned long long)o->lock_waits, (unsigned long long)o->node_waits,
	       (unsigned long long)o->wait_ns, (unsigned long long)o->calls,
	       (unsigned long long)o->bytes_read, (unsigned long long)o->bytes_written,
	       (unsigned long long)o->uncovered);
	return n;
}

/* The files not listed: the ranked-out slots and `other`. */
static void rest_sums(const struct slot *const *top, int k, struct sums *o)
{
	memset(o, 0, sizeof(*o));
	for (int i = 0; i < RS_FW_SLOTS; i++) {
		const struct slot *s = &slots[i];
		int listed = 0;

		if (atomic_load_explicit(&s->state, memory_order_acquire) != 2 || !active(s))
			continue;
		for (int t = 0; t < k && !listed; t++)
			listed = top[t] == s;
		if (!listed)
			sum_into(o, s);
	}
	sum_into(o, &other);
}

unsigned long rs_fw_json(char *buf, unsigned long size, unsigned long n)
{
	const struct slot *top[RS_FW_REPORT];
	int rest, k = rank(top, &rest);
	struct sums o;

	APPEND(", \"file_waits_untracked\": %llu, \"files\": [", (unsigned long long)LD(untracked));
	for (int i = 0; i < k; i++) {
		const struct slot *s = top[i];
		uint64_t dev = LD(s->dev);
		struct sums one = { 0 };

		APPEND("%s{\"path\": ", i ? ", " : "");
		if (atomic_load_explicit(&s->named, memory_order_acquire))
			n = rs_json_str(buf, size, n, s->path);
		else
			APPEND("%s", "null");
		APPEND(", \"dev\": \"%u:%u\", \"ino\": %llu, ", major(dev), minor(dev),
		       (unsigned long long)LD(s->ino));
		sum_into(&one, s);
		n = sums_json(buf, size, n, &one);
		APPEND("%s", "}");
	}
	rest_sums(top, k, &o);
	/* files: the ranked-out ones, and every first meeting of a file
	 * beyond the table (a file reopened there counts again). */
	APPEND("], \"files_other\": {\"files\": %llu, ",
	       (unsigned long long)rest + (unsigned long long)LD(other_files));
	n = sums_json(buf, size, n, &o);
	APPEND("%s", "}");
	return n;
}

unsigned long rs_fw_text(char *buf, unsigned long size, unsigned long n)
{
	const struct slot *top[RS_FW_REPORT];
	int rest, k = rank(top, &rest);
	struct sums o;

	if (!k)
		return n;
	/* Words, not the counters' names: a line per counter name. */
	APPEND("  files, most bytes first (bytes read, written, calls, lock waits, node waits, "
	       "ms waited, uncovered calls, file):%s\n", "");
	for (int i = 0; i < k; i++) {
		const struct slot *s = top[i];
		char shown[PATH_LEN], id[RS_FILE_ID_LEN];
		size_t l = 0;

		/* A name is any bytes: keep control characters off the terminal. */
		if (atomic_load_explicit(&s->named, memory_order_acquire))
			for (; s->path[l] && l + 1 < sizeof(shown); l++)
				shown[l] = (unsigned char)s->path[l] < 0x20 || s->path[l] == 0x7f
					   ? '?' : s->path[l];
		else
			shown[l++] = '?';
		shown[l] = '\0';
		rs_file_id(id, sizeof id, LD(s->dev), LD(s->ino));
		APPEND("  %12llu %12llu %8llu %8llu %8llu %10.1f %6llu  %s %s\n",
		       (unsigned long long)bytes_read(s), (unsigned long long)bytes_written(s),
		       (unsigned long long)calls(s), (unsigned long long)LD(s->lock_waits),
		       (unsigned long long)LD(s->node_waits), (double)LD(s->wait_ns) / 1e6,
		       (unsigned long long)LD(s->uncovered), id, shown);
	}
	rest_sums(top, k, &o);
	if (rest || LD(other_files))
		APPEND("  %12llu %12llu %8llu %8llu %8llu %10.1f %6llu  (%llu other files)\n",
		       (unsigned long long)o.bytes_read, (unsigned long long)o.bytes_written,
		       (unsigned long long)o.calls, (unsigned long long)o.lock_waits,
		       (unsigned long long)o.node_waits, (double)o.wait_ns / 1e6,
		       (unsigned long long)o.uncovered,
		       (unsigned long long)rest + (unsigned long long)LD(other_files));
	return n;
}

/* Counts only: the keys stay, because the files this process still has
 * open point at their slots. */
static void zero(struct slot *s)
{
	_Atomic uint64_t *c[] = { &s->lock_waits, &s->node_waits, &s->wait_ns, &s->calls,
				  &s->bytes_read, &s->bytes_written, &s->uncovered,
				  &s->fio.calls, &s->fio.bytes_read, &s->fio.bytes_written };

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++)
		RS_ZERO_IF_SET(*c[i]);
}

void rs_fw_reset(void)
{
	/* Stores only where something is there: a fork's child that writes
	 * a page it shares with its parent copies it (stats.c,
	 * rs_stats_reset).  Only up to the highest slot ever claimed: a
	 * child of a process that met few files reads few pages (each one a
	 * fault in a fresh child). */
	int hi = atomic_load_explicit(&slots_hi, memory_order_relaxed);

	for (int i = 0; i < hi; i++) {
		uint32_t st = atomic_load_explicit(&slots[i].state, memory_order_relaxed);

		/* A claim another thread had begun at the fork never ends
		 * here: free the slot, or every later claim would spin on it. */
		if (st == 1)
			atomic_compare_exchange_strong(&slots[i].state, &st, 0);
		zero(&slots[i]);
	}
	zero(&other);
	RS_ZERO_IF_SET(untracked);
	RS_ZERO_IF_SET(other_files);
}
