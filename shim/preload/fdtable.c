#include "fdtable.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/kcmp.h>

#include "config.h"
#include "futex.h"
#include "log.h"
#include "real.h"
#include "stats.h"
#include "state.h"
#include "rawsyscall.h"

#define MAX_DESCS   (1u << 20)
#define MAX_FILES   (1u << 20)
#define HASH_SIZE   (1u << 16)

_Atomic uint64_t *rs_fd_entries;
struct rs_desc *rs_descs;
struct rs_file *rs_files;

static RS_FORKED _Atomic uint32_t tbl_mtx __attribute__((aligned(64)));

/* The table mutex, with the lock order checks of debug builds
 * (lockorder.h: under offset and range locks, as dup2 holds them; over
 * the grant cache mutex and the table lock, which the last close of a
 * file takes to give its grants back). */
static void tbl_lock(void)
{
	rs_lk_mutex_lock(RS_LK_FDTABLE, &tbl_mtx);
}

static void tbl_unlock(void)
{
	rs_lk_mutex_unlock(RS_LK_FDTABLE, &tbl_mtx);
}

static uint32_t *buckets;          /* file index + 1, 0 = empty */
static uint32_t files_used, descs_used;
static uint32_t file_free, desc_free;  /* index + 1 */
static uint32_t desc_gen;          /* incarnations of descriptions so far */
static unsigned fd_high;           /* highest fd ever given an entry + 1 */

RS_FORKED _Atomic int rs_private_fd[RS_NPRIVATE] = { -1, -1, -1 };

static long hide_low(void)
{
	struct rlimit rl;
	long low = 1000;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    (rlim_t)low >= rl.rlim_cur)
		low = rl.rlim_cur > 64 ? (long)rl.rlim_cur - 32 : 3;
	return low;
}

/*
 * Growing a shared fd table past its size makes the kernel wait for an RCU
 * grace period (expand_fdtable), 10 ms or more, but only once the process
 * has threads.  Grow it now, at start-up, while there is usually one
 * thread, so that the later move of the segment fd costs nothing.  The
 * table never shrinks, so the temporary descriptor is closed at once.
 * It is an eventfd of our own, never a copy of fd 0-2: closing any fd of
 * a file drops the process's POSIX locks on that file, and a process
 * keeps its locks across execve, so a copy of a locked stdin closed here
 * dropped the lock the program was started with
 * (cluster_adv::exec_keeps_stdin_lock).
 */
void rs_fd_grow_table(void)
{
	int saved = errno;
	long low = hide_low();
	long fd = rs_sys(SYS_eventfd2, 0, EFD_CLOEXEC), nfd;

	if (fd >= 0) {
		nfd = rs_sys(SYS_fcntl, (int)fd, F_DUPFD_CLOEXEC, low);
		if (nfd >= 0)
			rs_sys(SYS_close, nfd);
		rs_sys(SYS_close, fd);
	}
	errno = saved;
}

int rs_fd_hidden_copy(int fd)
{
	long low = hide_low();
	int saved = errno, nfd;

	nfd = (int)rs_sys(SYS_fcntl, fd, F_DUPFD_CLOEXEC, low);
	if (nfd < 0)
		nfd = (int)rs_sys(SYS_fcntl, fd, F_DUPFD_CLOEXEC, 3);
	errno = saved;
	return nfd;
}

int rs_fd_hide(int fd)
{
	int saved = errno, nfd = rs_fd_hidden_copy(fd);

	rs_sys(SYS_close, fd);
	errno = saved;
	return nfd;
}

void rs_fd_evict(int fd)
{
	for (int i = 0; i < RS_NPRIVATE; i++) {
		int mine = fd;

		if (fd < 0 || !atomic_compare_exchange_strong(&rs_private_fd[i], &mine, -1))
			continue;
		/* Keeps the open file description, and so any lock on it. */
		atomic_store(&rs_private_fd[i], rs_fd_hide(mine));
	}
}

static void *reserve(size_t bytes)
{
	/* Reserved, not committed: untouched pages cost nothing. */
	void *p = rs_mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

int rs_fdt_init(void)
{
	rs_fd_entries = reserve(RS_FD_CAP * sizeof(*rs_fd_entries));
	rs_descs = reserve(MAX_DESCS * sizeof(*rs_descs));
	rs_files = reserve(MAX_FILES * sizeof(*rs_files));
	buckets = reserve(HASH_SIZE * sizeof(*buckets));
	if (!rs_fd_entries || !rs_descs || !rs_files || !buckets)
		return -1;
	return 0;
}

static uint32_t hash_of(uint64_t dev, uint64_t ino)
{
	uint64_t h = (dev * 0x9e3779b97f4a7c15ull) ^ (ino * 0xc2b2ae3d27d4eb4full);

	return (uint32_t)(h >> 40) & (HASH_SIZE - 1);
}

/* All helpers below run under tbl_mtx. */

static int64_t find_file(uint64_t dev, uint64_t ino)
{
	RS_ASSERT(rs_lk_held(RS_LK_FDTABLE, &tbl_mtx));
	for (uint32_t i = buckets[hash_of(dev, ino)]; i; i = rs_files[i - 1].hnext) {
		struct rs_file *f = &rs_files[i - 1];

		if (atomic_load_explicit(&f->dev, memory_order_relaxed) == dev &&
		    atomic_load_explicit(&f->ino, memory_order_relaxed) == ino)
			return i - 1;
	}
	return -1;
}

/* fd: a descriptor of the file, to name it in the stats. */
static int64_t get_file(uint64_t dev, uint64_t ino, int fd)
{
	int64_t idx = find_file(dev, ino);
	uint32_t h = hash_of(dev, ino);
	struct rs_file *f;

	if (idx >= 0) {
		rs_files[idx].refs++;
		return idx;
	}
	if (file_free) {
		idx = file_free - 1;
		file_free = rs_files[idx].hnext;
	} else if (files_used < MAX_FILES) {
		idx = files_used++;
		rs_rangelock_init(&rs_files[idx].rl);
	} else {
		return -1;
	}
	/* A recycled file keeps its lock: a thread holding a stale pointer
	 * may still be queued there, and will leave after re-validating. */
	f = &rs_files[idx];
	atomic_store_explicit(&f->dev, dev, memory_order_relaxed);
	atomic_store_explicit(&f->ino, ino, memory_order_relaxed);
	f->refs = 1;
	atomic_store_explicit(&f->tail_only, 0, memory_order_relaxed);
	f->hnext = buckets[h];
	buckets[h] = (uint32_t)idx + 1;
	/* Before any call can find the file through a descriptor. */
	atomic_store_explicit(&f->fio, rs_fw_file_io(f, fd), memory_order_relaxed);
	RS_COUNT(files_opened, 1);
	return idx;
}

static void put_file(uint32_t idx)
{
	struct rs_file *f = &rs_files[idx];
	uint32_t *link;

	if (--f->refs > 0)
		return;
	/* Closed by every fd of this process: no state stays in the table. */
	rs_grant_file_closed(f);
	link = &buckets[hash_of(atomic_load_explicit(&f->dev, memory_order_relaxed),
				atomic_load_explicit(&f->ino, memory_order_relaxed))];
	while (*link && *link != idx + 1)
		link = &rs_files[*link - 1].hnext;
	if (*link)
		*link = f->hnext;
	/* Never matches a real file again until reused. */
	atomic_store_explicit(&f->dev, UINT64_MAX, memory_order_relaxed);
	atomic_store_explicit(&f->ino, UINT64_MAX, memory_order_relaxed);
	f->hnext = file_free;
	file_free = idx + 1;
}

static int64_t new_desc(uint32_t file, uint32_t flags)
{
	int64_t idx;
	struct rs_desc *d;

	if (desc_free) {
		idx = desc_free - 1;
		desc_free = rs_descs[idx].refs;
	} else if (descs_used < MAX_DESCS) {
		idx = descs_used++;
	} else {
		return -1;
	}
	d = &rs_descs[idx];
	atomic_store_explicit(&d->flags, flags, memory_order_relaxed);
	atomic_store_explicit(&d->file, file, memory_order_release);
	d->refs = 1;
	return idx;
}

static void put_desc(uint32_t idx)
{
	struct rs_desc *d = &rs_descs[idx];

	RS_ASSERT(rs_lk_held(RS_LK_FDTABLE, &tbl_mtx));
	if (--d->refs > 0)
		return;
	put_file(atomic_load_explicit(&d->file, memory_order_relaxed));
	/* Free list threaded through refs; d->file stays valid for stale
	 * readers until the desc is reused. */
	d->refs = desc_free;
	desc_free = idx + 1;
}

static void drop_entry(uint64_t e)
{
	if ((e & 3) == RS_FD_TRACKED)
		put_desc(rs_fdt_desc_idx(e));
}

/* The entry of a new description: a fresh generation in the high half, so
 * that no entry read before a close can equal one made after it, even
 * when the fd number and the recycled description index are the same
 * (rs_io_at re-checks the entry alone). */
static uint64_t new_entry(uint32_t desc)
{
	return ((uint64_t)++desc_gen << 32) | ((uint64_t)desc << 2) | RS_FD_TRACKED;
}

static void set_entry(int fd, uint64_t e)
{
	uint64_t old;

	RS_ASSERT(rs_lk_held(RS_LK_FDTABLE, &tbl_mtx));
	old = atomic_exchange_explicit(&rs_fd_entries[fd], e, memory_order_acq_rel);
	if ((unsigned)fd >= fd_high)
		__atomic_store_n(&fd_high, (unsigned)fd + 1, __ATOMIC_RELAXED);
	drop_entry(old);
}

static uint32_t desc_flags(int oflags)
{
	return ((oflags & O_APPEND) ? RS_DESC_APPEND : 0) |
	       ((oflags & O_DIRECT) ? RS_DESC_DIRECT : 0);
}

/*
 * Devices whose every file the default path filter coordinates, so that
 * classifying one of their files needs no readlink of /proc/self/fd.
 * The default filter leaves out /proc, /sys and /dev (but /dev/shm), and
 * a file's path is its mount's mount point followed by its path in the
 * mount: so every file of a mount is wanted when its mount point is, and
 * no boundary of the filter lies below the mount point (or each such
 * boundary is a mount point itself, which hides what lies under it: "/"
 * with /proc, /sys and /dev mounted).  A device is in the list when each
 * of its mounts in /proc/self/mountinfo is such a mount.  Only "wanted"
 * is cached, never "not wanted": a verdict gone stale (a mount made
 * later) can only coordinate a file the filter would leave out, which
 * costs a lock and never exclusion.  A device not in the list (a file
 * under /proc, /sys or /dev, a btrfs subvolume's own st_dev, a mount made
 * after the list was read) is asked by path as before; mountinfo is read
 * again at most once per such device, so a new mount is learnt.  A read
 * caches every device in the list, not only the one asked about.
 * RANGESHIM_PATHS always asks by path.
 */
#define MNT_DEVS 512
static RS_FORKED _Atomic uint32_t mnt_mtx;
static uint64_t mnt_dev[MNT_DEVS];     /* in the order learnt */
static unsigned char mnt_ok[MNT_DEVS];
static _Atomic unsigned mnt_n;         /* entries published */
static _Atomic int mnt_read;           /* the list was read, or could not be */

static const char *const bounds[] = { "/proc", "/sys", "/dev", "/dev/shm" };

/* Is path equal to, or below, dir? */
static int path_under(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	return strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

struct mnt {
	uint64_t dev;
	char point[256];
};

/* Parse mountinfo into m (at most max); the count, or -1. */
static int read_mounts(struct mnt *m, int max)
{
	static char buf[65536];	/* under mnt_mtx */
	long fd = rs_sys(SYS_openat, AT_FDCWD, "/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
	size_t len = 0;
	int n = 0;

	if (fd < 0)
		return -1;
	for (;;) {
		long r = rs_sys(SYS_read, fd, buf + len, sizeof(buf) - 1 - len);

		if (r <= 0)
			break;
		len += (size_t)r;
		if (len == sizeof(buf) - 1)
			break;
	}
	rs_sys(SYS_close, fd);
	if (len == sizeof(buf) - 1)
		return -1;	/* too many mounts to read whole: ask by path */
	buf[len] = '\0';
	for (char *line = buf, *next; line && *line && n < max; line = next) {
		unsigned maj, min;
		char point[256];

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		/* id parent major:minor root mount-point ... */
		if (sscanf(line, "%*u %*u %u:%u %*s %255s", &maj, &min, point) != 3)
			continue;
		m[n].dev = makedev(maj, min);
		memcpy(m[n].point, point, sizeof(point));
		n++;
	}
	return n;
}

static int is_point(const struct mnt *m, int n, const char *path)
{
	for (int i = 0; i < n; i++)
		if (strcmp(m[i].point, path) == 0)
			return 1;
	return 0;
}

/* Every file of a mount at m[k] wanted by the default filter? */
static int mount_wanted(const struct mnt *m, int n, int k)
{
	const char *pt = m[k].point;

	if (pt[0] != '/' || !rs_config_path_wanted(&rs_cfg, pt))
		return 0;
	for (size_t b = 0; b < sizeof(bounds) / sizeof(bounds[0]); b++)
		if (path_under(bounds[b], pt) && strcmp(bounds[b], pt) != 0 &&
		    !is_point(m, n, bounds[b]))
			return 0;
	return 1;
}

/* dev's verdict among the first k cached, if there. */
static int dev_cached(uint64_t dev, unsigned k, int *ok)
{
	for (unsigned i = 0; i < k; i++)
		if (mnt_dev[i] == dev) {
			*ok = mnt_ok[i];
			return 1;
		}
	return 0;
}

/*
 * Read the mount list and cache the verdict of every device in it, and
 * of dev (0: none) as "ask by path" if the list lacks it.  Every device
 * at once: a child forked after one read finds the devices of the
 * descriptors it inherits cached, and reads no list of its own
 * (rs_fdt_fork_prepare).
 * Pre: mnt_mtx is held.
 */
static void learn_mounts(uint64_t dev)
{
	static struct mnt m[512];	/* under mnt_mtx */
	unsigned k = atomic_load_explicit(&mnt_n, memory_order_relaxed);
	int n = k < MNT_DEVS ? read_mounts(m, 512) : -1, ok;

	RS_ASSERT(atomic_load_explicit(&mnt_mtx, memory_order_relaxed) != 0);
	for (int i = 0; i < n && k < MNT_DEVS; i++) {
		if (dev_cached(m[i].dev, k, &ok))
			continue;
		/* Its earlier mounts would have cached it: look from here. */
		ok = 1;
		for (int j = i; j < n && ok; j++)
			if (m[j].dev == m[i].dev && !mount_wanted(m, n, j))
				ok = 0;
		mnt_dev[k] = m[i].dev;
		mnt_ok[k] = (unsigned char)ok;
		k++;
	}
	if (dev && k < MNT_DEVS && !dev_cached(dev, k, &ok)) {
		mnt_dev[k] = dev;
		mnt_ok[k] = 0;
		k++;
	}
	atomic_store_explicit(&mnt_n, k, memory_order_release);
	atomic_store_explicit(&mnt_read, 1, memory_order_relaxed);
}

/* 1: every file of dev is wanted, known without its path. */
static int dev_wanted(uint64_t dev)
{
	unsigned k = atomic_load_explicit(&mnt_n, memory_order_acquire);
	int ok = 0;

	if (rs_cfg.custom_paths)
		return 0;
	if (dev_cached(dev, k, &ok))
		return ok;
	if (k >= MNT_DEVS)
		return 0;
	rs_lk_mutex_lock(RS_LK_MOUNTS, &mnt_mtx);
	if (!dev_cached(dev, atomic_load_explicit(&mnt_n, memory_order_relaxed), &ok)) {
		learn_mounts(dev);
		ok = 0;
		(void)dev_cached(dev, atomic_load_explicit(&mnt_n, memory_order_relaxed), &ok);
	}
	rs_lk_mutex_unlock(RS_LK_MOUNTS, &mnt_mtx);
	return ok;
}

/* Is this regular file one we coordinate?  Fills dev/ino from st. */
static int wanted_st(int fd, const struct stat *st, uint64_t *dev, uint64_t *ino)
{
	char link[64], path[PATH_MAX];
	ssize_t n;

	if (!S_ISREG(st->st_mode))
		return 0;
	*dev = st->st_dev;
	*ino = st->st_ino;
	if (dev_wanted(*dev))
		return 1;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof(path) - 1);
	if (n <= 0 || path[0] != '/')
		/* No /proc (chroot, early boot) or an unnamed file: coordinate;
		 * a path filter may only narrow what we can name. */
		return 1;
	path[n] = '\0';
	return rs_config_path_wanted(&rs_cfg, path);
}

/* The same, with one fstat of fd: -1 if it fails. */
static int wanted(int fd, uint64_t *dev, uint64_t *ino)
{
	struct stat st;

	if (rs_fstat(fd, &st) < 0)
		return -1;
	return wanted_st(fd, &st, dev, ino);
}

/* An inherited fd may share its description with one we know (2>&1):
 * that fd's entry, or RS_FD_UNKNOWN.  kcmp answers exactly; without it, a
 * separate description is the conservative guess for the offset lock
 * only. */
static uint64_t shared_desc(int fd, uint32_t file)
{
	long pid = rs_sys(SYS_getpid);

	for (unsigned i = 0; i < fd_high; i++) {
		uint64_t e = atomic_load_explicit(&rs_fd_entries[i], memory_order_relaxed);

		if ((e & 3) != RS_FD_TRACKED || (int)i == fd ||
		    atomic_load_explicit(&rs_fdt_desc(e)->file, memory_order_relaxed) != file)
			continue;
		if (rs_sys(SYS_kcmp, pid, pid, KCMP_FILE, fd, i) == 0)
			return e;
	}
	return RS_FD_UNKNOWN;
}

/* How install learns of fd: */
enum how {
	OPENED,         /* by a wrapped open: its flags are known */
	FIRST_USE,      /* unknown until now; another thread may race us */
	REPLACED,       /* re-pointed by a call we wrap (freopen) */
	LAZY_USE,       /* lazy (RS_FD_LAZY): flags known, a new description;
			   another thread may race us */
};

/* A replaced fd that turned out closed: forget it. */
static uint64_t forget_replaced(int fd)
{
	tbl_lock();
	set_entry(fd, RS_FD_UNKNOWN);
	tbl_unlock();
	return RS_FD_UNKNOWN;
}

/* lazy: for LAZY_USE, the lazy entry, which the new one replaces only if
 * it is still there; st: fd's stat, if the application just made one. */
static uint64_t install(int fd, int oflags, enum how how, uint64_t lazy, const struct stat *st)
{
	uint64_t dev = 0, ino = 0, e, shared = RS_FD_UNKNOWN;
	int saved = errno;
	int64_t file, desc = -1;
	int fresh = how == OPENED || how == LAZY_USE;
	int w = st ? wanted_st(fd, st, &dev, &ino) : wanted(fd, &dev, &ino);

	if (w < 0) {
		errno = saved;
		return how == REPLACED ? forget_replaced(fd) : RS_FD_UNKNOWN;
	}
	/* Not opened before our eyes: O_APPEND may have been set anywhere
	 * (inherited, fdopen's internal fcntl, a raw F_SETFL), so ask. */
	if (!fresh && w) {
		oflags = rs_real.fcntl(fd, F_GETFL);
		if (oflags < 0) {
			/* Closed under us: -1 would read as O_APPEND|O_DIRECT. */
			errno = saved;
			return how == REPLACED ? forget_replaced(fd) : RS_FD_UNKNOWN;
		}
	}
	errno = saved;
	tbl_lock();
	e = RS_FD_PASS;
	if (w) {
		file = get_file(dev, ino, fd);
		if (file >= 0) {
			if (!fresh)
				shared = shared_desc(fd, (uint32_t)file);
			if (shared != RS_FD_UNKNOWN) {
				rs_fdt_desc(shared)->refs++;
				/* One kernel description: what it says now holds
				 * for every fd we know it by. */
				atomic_store_explicit(&rs_fdt_desc(shared)->flags,
						      desc_flags(oflags), memory_order_relaxed);
				put_file((uint32_t)file);
			} else {
				/* A lazy entry nobody else can have used: its
				 * offset is still where open put it. */
				uint32_t fr = how == LAZY_USE && !(lazy & RS_FD_LAZY_SHARED) &&
						 !(oflags & O_APPEND) ? RS_DESC_FRESH : 0;

				desc = new_desc((uint32_t)file, desc_flags(oflags) | fr);
				if (desc < 0)
					put_file((uint32_t)file);
				else if (fr)	/* before the entry is published */
					atomic_fetch_or(&rs_files[file].whole, RS_WHOLE_FRESH);
			}
		}
		if (shared != RS_FD_UNKNOWN) {
			e = shared;
		} else if (desc >= 0) {
			e = new_entry((uint32_t)desc);
		} else {
			RS_COUNT(table_full, 1);
			rs_log(RS_LOG_ERROR, "fd table full: fd %d is not coordinated", fd);
		}
	}
	/* A replacement goes in with one exchange: were the entry unknown
	 * for a moment, a thread that looked at the old file before the
	 * replacement could install that in its place. */
	if (how == OPENED || how == REPLACED) {
		set_entry(fd, e);
	} else {
		uint64_t expect = how == LAZY_USE ? lazy : RS_FD_UNKNOWN;

		/* Lost a race with another thread classifying the same fd. */
		if (!atomic_compare_exchange_strong(&rs_fd_entries[fd], &expect, e)) {
			drop_entry(e);
			e = expect;
		} else if ((unsigned)fd >= fd_high) {
			__atomic_store_n(&fd_high, (unsigned)fd + 1, __ATOMIC_RELAXED);
		}
	}
	tbl_unlock();
	return e;
}

static void beyond_table(int fd)
{
	static _Atomic int said;
	int saved = errno;
	long open_fd = rs_sys(SYS_fcntl, fd, F_GETFD);

	errno = saved;
	if (open_fd < 0)
		return;		/* not open: the real call reports EBADF */
	RS_COUNT(table_full, 1);
	if (!atomic_exchange(&said, 1))
		rs_log(RS_LOG_ERROR, "fd %d is beyond the fd table (%u entries): I/O on "
		       "such fds is NOT coordinated", fd, rs_fd_cap);
}

/* d's offset may move, or have moved, unseen: not fresh. */
static void desc_unfresh_now(struct rs_desc *d)
{
	rs_desc_unfresh(d, atomic_load_explicit(&d->flags, memory_order_relaxed));
}

/* A lazy entry's open flags, as desc_flags made them. */
static uint32_t lazy_flags(uint64_t e)
{
	return (uint32_t)e >> 2;
}

static int lazy_oflags(uint64_t e)
{
	return ((lazy_flags(e) & RS_DESC_APPEND) ? O_APPEND : 0) |
	       ((lazy_flags(e) & RS_DESC_DIRECT) ? O_DIRECT : 0);
}

_Static_assert(((RS_DESC_APPEND | RS_DESC_DIRECT) << 2) < RS_FD_LAZY_SHARED &&
	       RS_FD_LAZY_SHARED < (1u << 31), "lazy entry bits overlap");

/* Returns whether a lazy entry was seen: the fork handler's to know. */
static int lazy_shared(void)
{
	unsigned hi = __atomic_load_n(&fd_high, __ATOMIC_RELAXED);
	int lazy = 0;

	if (!rs_fd_entries)
		return 0;
	for (unsigned fd = 0; fd < hi; fd++) {
		uint64_t e = atomic_load_explicit(&rs_fd_entries[fd], memory_order_relaxed);

		while ((e & 3) == RS_FD_LAZY && !(e & RS_FD_LAZY_SHARED) &&
		       !atomic_compare_exchange_weak(&rs_fd_entries[fd], &e, e | RS_FD_LAZY_SHARED))
			;
		lazy |= (e & 3) == RS_FD_LAZY;
		if ((e & 3) == RS_FD_TRACKED)
			desc_unfresh_now(rs_fdt_desc(e));
	}
	return lazy;
}

void rs_fdt_lazy_shared(void)
{
	(void)lazy_shared();
}

void rs_fdt_moved(int fd)
{
	uint64_t e;

	if (fd < 0 || (unsigned)fd >= rs_fd_cap || !rs_fd_entries)
		return;
	e = rs_fdt_get(fd);

	while ((e & 3) == RS_FD_LAZY && !(e & RS_FD_LAZY_SHARED) &&
	       !atomic_compare_exchange_weak(&rs_fd_entries[fd], &e, e | RS_FD_LAZY_SHARED))
		;
	if ((e & 3) == RS_FD_TRACKED)
		desc_unfresh_now(rs_fdt_desc(e));
}

uint64_t rs_fdt_classify(int fd)
{
	uint64_t e;

	if (fd < 0)
		return RS_FD_PASS;
	if ((unsigned)fd >= rs_fd_cap) {
		beyond_table(fd);
		return RS_FD_PASS;
	}
	while (((e = rs_fdt_get(fd)) & 3) == RS_FD_LAZY) {
		uint64_t r = install(fd, lazy_oflags(e), LAZY_USE, e, NULL);

		if ((r & 3) != RS_FD_LAZY) {
			/* Not open any more (closed where we did not see it):
			 * forget it, as a close would. */
			if (r == RS_FD_UNKNOWN)
				atomic_compare_exchange_strong(&rs_fd_entries[fd], &e,
							       RS_FD_UNKNOWN);
			return r;
		}
		/* Marked shared, or opened again, meanwhile: once more. */
	}
	if (e != RS_FD_UNKNOWN)
		return e;
	return install(fd, 0, FIRST_USE, 0, NULL);
}

void rs_fdt_stat_seen(int fd, const struct stat *st)
{
	uint64_t e = rs_fdt_get(fd);

	if ((e & 3) == RS_FD_LAZY)
		install(fd, lazy_oflags(e), LAZY_USE, e, st);
}

void rs_fdt_opened(int fd, int flags)
{
	if ((unsigned)fd >= rs_fd_cap) {
		beyond_table(fd);
		return;
	}
	/* A directory (O_DIRECTORY succeeded) or an O_PATH descriptor is
	 * never read or written: nothing to classify. */
	if (flags & (O_DIRECTORY | O_PATH)) {
		tbl_lock();
		set_entry(fd, RS_FD_PASS);
		tbl_unlock();
		return;
	}
	tbl_lock();
	set_entry(fd, ((uint64_t)++desc_gen << 32) | ((uint64_t)desc_flags(flags) << 2) |
			      RS_FD_LAZY);
	tbl_unlock();
}

void rs_fdt_closed(int fd, uint64_t old)
{
	if ((unsigned)fd >= rs_fd_cap)
		return;
	tbl_lock();
	/* If another thread has already reused the number, its entry stays. */
	if (atomic_compare_exchange_strong(&rs_fd_entries[fd], &old, RS_FD_UNKNOWN))
		drop_entry(old);
	tbl_unlock();
}

void rs_fdt_forget(int fd, uint64_t old)
{
	if (fd >= 0 && (unsigned)fd < rs_fd_cap)
		atomic_compare_exchange_strong(&rs_fd_entries[fd], &old, RS_FD_UNKNOWN);
}

void rs_fdt_closed_range(unsigned lo, unsigned hi)
{
	tbl_lock();
	for (unsigned fd = lo; fd < fd_high && fd <= hi; fd++)
		drop_entry(atomic_exchange(&rs_fd_entries[fd], RS_FD_UNKNOWN));
	tbl_unlock();
}

void rs_fdt_duped(int oldfd, int newfd)
{
	uint64_t e = rs_fdt_get(oldfd);

	if ((unsigned)newfd >= rs_fd_cap)
		return;
	if (e == RS_FD_UNKNOWN || (e & 3) == RS_FD_LAZY)
		e = rs_fdt_classify(oldfd);
	tbl_lock();
	/* Re-read under the mutex: oldfd may have been closed meanwhile.
	 * Two fds never share a lazy entry: each would make a description
	 * of its own for one description of the kernel's. */
	e = rs_fdt_get(oldfd);
	if ((e & 3) == RS_FD_LAZY)
		e = RS_FD_UNKNOWN;
	if ((e & 3) == RS_FD_TRACKED)
		rs_fdt_desc(e)->refs++;
	set_entry(newfd, e);
	tbl_unlock();
}

void rs_fdt_replaced(int fd)
{
	if (fd >= 0 && (unsigned)fd < rs_fd_cap)
		install(fd, 0, REPLACED, 0, NULL);
}

void rs_fdt_setfl(int fd)
{
	uint64_t e = rs_fdt_get(fd);
	int saved = errno;
	int fl;

	if ((e & 3) != RS_FD_TRACKED)
		return;
	fl = rs_real.fcntl(fd, F_GETFL);
	errno = saved;
	if (fl >= 0)
		atomic_store_explicit(&rs_fdt_desc(e)->flags, desc_flags(fl), memory_order_relaxed);
}

int64_t rs_fdt_find(uint64_t dev, uint64_t ino)
{
	int64_t idx;

	tbl_lock();
	idx = find_file(dev, ino);
	tbl_unlock();
	return idx;
}

/*
 * A child classifies the lazy descriptors it inherits at their first use,
 * and what it learns stays its own: a list read in the parent is read
 * once for the whole family, one read in each child is read once per
 * child (about 60 us each; docs/benchmarks.md).  So the parent reads it
 * before the first fork that hands one down: once, even if it cannot be
 * read (too long, no /proc), which each child then finds out for itself.
 * Not if another thread is reading it now (the mutex is tried, not waited
 * for: fork may come from a handler of a signal that interrupted that
 * read).
 */
void rs_fdt_fork_prepare(void)
{
	if (lazy_shared() && !rs_cfg.custom_paths &&
	    !atomic_load_explicit(&mnt_read, memory_order_relaxed) &&
	    rs_lk_mutex_trylock(RS_LK_MOUNTS, &mnt_mtx)) {
		if (!atomic_load_explicit(&mnt_read, memory_order_relaxed))
			learn_mounts(0);
		rs_lk_mutex_unlock(RS_LK_MOUNTS, &mnt_mtx);
	}
	tbl_lock();
}

void rs_fdt_fork_parent(void)
{
	tbl_unlock();
}

/* The child has one thread, which was not inside the shim: every queued
 * range and held offset lock belonged to threads that do not exist here. */
void rs_fdt_fork_child(void)
{
	for (uint32_t i = 0; i < files_used; i++) {
		struct rs_file *f = &rs_files[i];

		rs_rangelock_reset(&f->rl);
		/* The parent's node grants stay the parent's. */
		for (int k = 0; k < RS_NCACHE; k++)
			RS_ZERO_IF_SET(f->grants[k]);
		RS_ZERO_IF_SET(f->whole);
		RS_ZERO_IF_SET(f->app_whole);
		RS_ZERO_IF_SET(f->strided);
		RS_ZERO_IF_SET(f->grants_mtx);
		RS_ZERO_IF_SET(f->acquire_mtx);
	}
	for (uint32_t i = 0; i < descs_used; i++)
		RS_ZERO_IF_SET(rs_descs[i].pos);
	atomic_store_explicit(&mnt_mtx, 0, memory_order_relaxed);
	atomic_store_explicit(&tbl_mtx, 0, memory_order_release);
}

/* Wait until none of mask's bits is set in the offset lock's word: spin
 * a little (the holder is usually one short system call on another CPU),
 * then sleep on the word with RS_POS_SLEEP set.  Returns the word. */
static uint32_t pos_wait(struct rs_desc *d, uint32_t mask)
{
	uint32_t v = atomic_load_explicit(&d->pos, memory_order_acquire);

	for (int i = 0; v & mask; i++) {
		if (i < RS_SPIN_LIMIT) {
			rs_cpu_relax();
		} else {
			if (!(v & RS_POS_SLEEP)) {
				v = atomic_fetch_or_explicit(&d->pos, RS_POS_SLEEP,
							     memory_order_acquire);
				if (!(v & mask))
					break;
				v |= RS_POS_SLEEP;
			}
			rs_futex_wait(&d->pos, v);
		}
		v = atomic_load_explicit(&d->pos, memory_order_acquire);
	}
	return v;
}

void rs_pos_lock_slow(struct rs_desc *d)
{
	uint32_t v = atomic_load_explicit(&d->pos, memory_order_relaxed);

	for (;;) {
		if (v & RS_POS_HELD)
			v = pos_wait(d, RS_POS_HELD);
		else if (atomic_compare_exchange_weak_explicit(&d->pos, &v, v | RS_POS_HELD,
							       memory_order_acquire,
							       memory_order_relaxed))
			break;
	}
	/* Ours; the appenders inside finish first, and no new one enters. */
	pos_wait(d, ~(RS_POS_HELD | RS_POS_SLEEP));
	rs_tsan_acquire(&d->pos);
}

void rs_pos_app_slow(struct rs_desc *d)
{
	do {
		rs_pos_app_leave_word(d);
		pos_wait(d, RS_POS_HELD);
	} while (atomic_fetch_add_explicit(&d->pos, RS_POS_APP, memory_order_acquire) &
		 RS_POS_HELD);
}

/* A change a sleeper may wait for (HELD cleared, or an appender out):
 * wake them all, each looks again and sleeps again if it must.
 * Rare: it needs appenders and calls at the offset on one description
 * at once, or two calls at the offset that met. */
void rs_pos_wake(struct rs_desc *d)
{
	if (atomic_fetch_and_explicit(&d->pos, ~RS_POS_SLEEP, memory_order_relaxed) & RS_POS_SLEEP)
		rs_futex_wake(&d->pos, INT_MAX);
}
