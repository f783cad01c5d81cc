/*
 * Creating, validating and mapping the node lock table segment.
 *
 * Creation race: the creator makes the file with O_EXCL, but may die or be
 * preempted before it is initialised.  Creator and openers therefore both
 * run "flock(LOCK_EX); if not initialised, initialise; unlock", so exactly
 * one initialises, whoever gets there first; the magic number is written
 * last.  An opener that finds the magic number already there (every one
 * after the first) needs no lock (attach_ready).  Everything here uses raw syscalls: the shim's own wrappers are not
 * for its own files.
 */
#include "segment.h"
#include "stride.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "rangeshim/rangelock.h"
#include "rawsyscall.h"

#define WHY(...) snprintf(why, whylen, __VA_ARGS__)

/* Is any process attached to the table file at path (one of our own)?
 * Every attached process holds a liveness byte on it. */
static int has_live_processes(const char *path)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET,
			    .l_start = (off_t)RS_LIVE_BASE, .l_len = RS_NPROC };
	struct stat st;
	int saved = errno, live = 0;
	int fd = (int)rs_sys(SYS_openat, AT_FDCWD, path,
			      O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

	if (fd >= 0) {
		live = rs_fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
		       rs_sys(SYS_fcntl, fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
		rs_sys(SYS_close, fd);
	}
	errno = saved;
	return live;
}

/*
 * The default table, when RANGESHIM_SHM is not set.  /dev/shm is writable
 * by everyone, so anyone can create /dev/shm/rangeshim-<uid> first and keep
 * that user out of node scope.  The per-user runtime directory that
 * logind makes, /run/user/<uid> (mode 0700, ours), cannot be squatted, so
 * the table lives there when it exists.  It is found from the uid, not
 * from $XDG_RUNTIME_DIR, which differs between processes of one user
 * (cron, sudo, services), and all of a user's processes must pick the same
 * table.  The directory appears at a user's first login: a table in
 * /dev/shm that live processes still use keeps being used until they are
 * gone, so a login in the middle of a job does not split it.
 */
static void default_path(char *path, size_t len)
{
	char rt[64], shm[64];
	struct stat st;

	snprintf(shm, sizeof(shm), "/dev/shm/rangeshim-%u", (unsigned)getuid());
	snprintf(rt, sizeof(rt), "/run/user/%u", (unsigned)geteuid());
	if (lstat(rt, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
	    (st.st_mode & 077) == 0 && !has_live_processes(shm))
		snprintf(path, len, "%s/rangeshim-table", rt);
	else
		snprintf(path, len, "%s", shm);
}

int rs_seg_path(const char *name, char *path, size_t len)
{
	size_t n;

	if (name && !name[0]) {
		default_path(path, len);
		return 0;
	}
	n = name ? strlen(name) : 0;
	if (!n || name[0] != '/' || n < 2 || strchr(name + 1, '/') || n > 200 ||
	    len < sizeof("/dev/shm") + n)
		return -1;
	/* Not snprintf: in a forked child, which attaches at its first
	 * write, each libc page that would touch is a fault. */
	memcpy(path, "/dev/shm", 8);
	memcpy(path + 8, name, n + 1);
	return 0;
}

void rs_seg_init(struct rs_segment *s)
{
	struct rs_seg_header *h = &s->hdr;

	memset(s, 0, sizeof(*s));
	h->version = RS_SEG_VERSION;
	h->header_size = sizeof(*h);
	h->nproc = RS_NPROC;
	h->ngrant = RS_NGRANT;
	h->proc_size = sizeof(struct rs_seg_proc);
	h->grant_size = sizeof(struct rs_seg_grant);
	h->total_size = sizeof(*s);
	__atomic_store_n(&h->magic, RS_SEG_MAGIC, __ATOMIC_RELEASE);
}

int rs_seg_check_header(const struct rs_segment *s, char *why, size_t whylen)
{
	const struct rs_seg_header *h = &s->hdr;

	if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != RS_SEG_MAGIC)
		return WHY("bad magic number"), -1;
	if (h->version != RS_SEG_VERSION)
		return WHY("layout version %u, expected %u", h->version, RS_SEG_VERSION), -1;
	if (h->header_size != sizeof(*h) || h->nproc != RS_NPROC || h->ngrant != RS_NGRANT ||
	    h->proc_size != sizeof(struct rs_seg_proc) ||
	    h->grant_size != sizeof(struct rs_seg_grant) || h->total_size != sizeof(*s))
		return WHY("table layout differs from this build's"), -1;
	return 0;
}

int rs_seg_grant_ok(const struct rs_seg_grant *g)
{
	uint64_t gw = atomic_load(&g->gw);

	return g->owner < RS_NPROC &&
	       (g->mode == RS_G_SHARED || g->mode == RS_G_EXSH || g->mode == RS_G_APPEND) &&
	       g->start < g->end && RS_GW_USERS(gw) <= RS_MAX_USERS &&
	       (g->stride == 0 || rs_stride_ok(g->start, g->end, g->stride, g->blen));
}

int rs_seg_check(const struct rs_segment *s, char *why, size_t whylen)
{
	if (rs_seg_check_header(s, why, whylen) < 0)
		return -1;
	for (uint32_t i = 0; i < RS_NPROC; i++) {
		uint32_t st = atomic_load(&s->procs[i].state);

		if (st > RS_PROC_LIVE)
			return WHY("process slot %u has state %u", i, st), -1;
	}
	for (uint32_t i = 0; i < RS_NGRANT; i++) {
		const struct rs_seg_grant *g = &s->grants[i];
		uint32_t st = atomic_load(&g->state);

		if (st > RS_G_WAIT)
			return WHY("grant %u has state %u", i, st), -1;
		if (st != RS_G_FREE && !rs_seg_grant_ok(g))
			return WHY("grant %u is malformed", i), -1;
	}
	return 0;
}

/*
 * Give the table's file every page it needs before it is mapped.  A file
 * sized with ftruncate is sparse, and on a full tmpfs (a container's
 * 64 MiB /dev/shm, a small /run/user/<uid>) the first store to a page
 * that cannot be allocated is a SIGBUS, which would kill the program in
 * the middle of its first write.  fallocate reports ENOSPC instead, and
 * on a file that is already backed allocates nothing, so it is also how
 * an opener checks a table someone else made (an older build, or a
 * creator that died half-way, may have left holes).  fresh: the file is
 * still empty (ours to size).  Where the file system has no fallocate,
 * an empty file is written with zeros (write also says ENOSPC); an
 * existing one cannot be written without racing its users and is taken
 * as it is (limitations.md).  On failure the file is left empty, and the
 * next process tries again.
 */
static int back(int fd, size_t size, int fresh)
{
	static const char zeros[4096];
	int err;

	if (rs_sys(SYS_fallocate, fd, 0, 0L, (long)size) == 0)
		return 0;
	err = errno;
	if (err != EOPNOTSUPP && err != ENOSYS)
		goto fail;
	if (!fresh)
		return 0;
	for (size_t off = 0; off < size; off += sizeof(zeros)) {
		size_t n = size - off < sizeof(zeros) ? size - off : sizeof(zeros);

		errno = 0;
		if (rs_sys(SYS_pwrite64, fd, zeros, (long)n, (long)off) != (long)n) {
			err = errno ? errno : ENOSPC;
			goto fail;
		}
	}
	return 0;
fail:
	if (fresh)
		rs_sys(SYS_ftruncate, fd, 0L);
	errno = err;
	return -1;
}

static int open_file(const char *path, int create)
{
	int flags = O_RDWR | O_NOFOLLOW | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0);

	return (int)rs_sys(SYS_openat, AT_FDCWD, path, flags, 0600);
}

/*
 * Where the table is mapped.  It is mapped at a program's first write to
 * a regular file, long after start-up, so wherever the kernel would put
 * it is free now but may be space the program has set aside: LTP's
 * mmap18 unmaps a reservation below a MAP_GROWSDOWN stack for the stack
 * to grow into; were the table to take the hole, the stack's growth
 * would be a SIGSEGV (test_edge, growsdown_hole).  The kernel fills the main mapping
 * area from the top down, below the stack, and the heap grows up from
 * the executable (0x55.. for PIE, near 4 MiB without), so the table goes
 * between them, in a 64 TiB region programs leave alone: RS_MAP_LO, plus
 * a random multiple of 2 MiB within 1 TiB so that its address is not
 * known in advance.  MAP_FIXED_NOREPLACE never replaces anything; a
 * place that is taken (a sanitizer's shadow, a JIT's reservation) moves
 * on, and after a few tries, or where the address space is smaller (a
 * 39-bit arm64 kernel), the kernel chooses, as it always did.  A kernel
 * before 4.17 takes the flag for a hint, and puts the mapping elsewhere
 * only if the place is taken: that one is given back and the next tried.
 */
#define RS_MAP_LO   0x3f0000000000ull
#define RS_MAP_SPAN (1ull << 40)

static void *map_away(int fd, size_t len)
{
	/* Read once: a forked child, which inherits it, need not touch the
	 * auxiliary vector's pages again. */
	static uint64_t seed;
	uint64_t r = (uint64_t)rs_sys(SYS_getpid) * 0x9e3779b97f4a7c15ull;
	void *p;

#if defined(__SANITIZE_THREAD__)
	/* TSan keeps its shadow where the hint points, and refuses a
	 * mapping there: the kernel's choice (tests only). */
	(void)seed;
	(void)r;
	(void)p;
	return rs_mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
#endif
	/* AT_RANDOM: 16 bytes the kernel gave the process; the last 8, since
	 * glibc takes the first ones for the stack protector's canary. */
	uint64_t sd = __atomic_load_n(&seed, __ATOMIC_RELAXED);

	if (!sd) {
		const unsigned char *rnd = (const unsigned char *)getauxval(AT_RANDOM);

		for (int i = 8; rnd && i < 16; i++)
			sd = sd * 131 + rnd[i];
		sd |= 1;
		__atomic_store_n(&seed, sd, __ATOMIC_RELAXED);
	}
	r += sd;
	for (int i = 0; i < 4; i++, r = r * 0x9e3779b97f4a7c15ull + 1) {
		uintptr_t want = (uintptr_t)(RS_MAP_LO + ((r >> 17) % (RS_MAP_SPAN >> 21) << 21));

		if (sizeof(uintptr_t) < 8)
			break;
		p = rs_mmap((void *)want, len, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
		if (p == (void *)want)
			return p;
		if (p != MAP_FAILED)
			munmap(p, len);
	}
	return rs_mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
}

/*
 * Map the file through an open file description of its own, closed at
 * once: a mapping holds a reference to the description it was made from,
 * and the liveness lock lives as long as its description does.  Mapped
 * from fd itself, a forked child's inherited mapping (or anything else
 * that outlives our fd) would keep a dead process looking alive.
 */
static struct rs_segment *map_separately(const char *path, const struct stat *want, int *err)
{
	struct stat st;
	void *s;
	int mfd = open_file(path, 0);

	if (mfd < 0) {
		*err = errno;
		return NULL;
	}
	if (rs_fstat(mfd, &st) < 0 || st.st_dev != want->st_dev || st.st_ino != want->st_ino) {
		*err = ESTALE;	/* the name leads to another file by now */
		rs_sys(SYS_close, mfd);
		return NULL;
	}
	s = map_away(mfd, sizeof(struct rs_segment));
	*err = errno;
	rs_sys(SYS_close, mfd);
	return s == MAP_FAILED ? NULL : s;
}

/* Only the header decides whether we can use the table at all; a
 * malformed slot is dealt with where it is met (nodelock.c), and must not
 * keep anyone out of node scope. */
static int finish(struct rs_seg_map *m, int fd, struct rs_segment *s, char *why, size_t whylen)
{
	if (rs_seg_check_header(s, why, whylen) < 0) {
		char reason[160];

		snprintf(reason, sizeof(reason), "%s", why);
		WHY("%s: %s", m->path, reason);
		munmap(s, sizeof(*s));
		rs_sys(SYS_close, fd);
		m->dev = m->ino = 0;
		return -1;
	}
	m->seg = s;
	m->fd = fd;
	return 0;
}

/*
 * An initialised table of the right size is mapped without the creation
 * lock: the lock only orders who initialises, and the magic number,
 * written last with a release store, says that someone has.  Hundreds of
 * processes attaching at once (a job's ranks) otherwise queued on the
 * lock, each loser sleeping 10 ms a try.  0 and *sp set (the mapping), or
 * 0 and *sp NULL with why filled and fd closed (a failure that the
 * locked path would meet too), or 1: take the locked path.
 */
static int attach_ready(struct rs_seg_map *m, int fd, char *why, size_t whylen,
			struct rs_segment **sp)
{
	struct stat st;
	struct rs_segment *s;
	int err;

	*sp = NULL;
	if (rs_fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
	    (st.st_mode & 07777) != 0600 || st.st_size != (off_t)sizeof(*s))
		return 1;	/* the locked path says why, or sizes it */
	/* A file whose blocks cover its size has no hole to fill: fallocate
	 * would walk its 579 pages for nothing, in every process. */
	if ((uint64_t)st.st_blocks * 512 < sizeof(*s) && back(fd, sizeof(*s), 0) < 0) {
		err = errno;
		rs_sys(SYS_close, fd);
		if (err == ENOSPC)
			WHY("no space for the %zu bytes of %s: its file system is full",
			    sizeof(*s), m->path);
		else
			WHY("cannot allocate %s: %s", m->path, strerror(err));
		return 0;
	}
	s = map_separately(m->path, &st, &err);
	if (!s)
		return 1;
	if (__atomic_load_n(&s->hdr.magic, __ATOMIC_ACQUIRE) != RS_SEG_MAGIC) {
		munmap(s, sizeof(*s));
		return 1;	/* not initialised yet (or garbage): under the lock */
	}
	m->dev = (uint64_t)st.st_dev;
	m->ino = (uint64_t)st.st_ino;
	*sp = s;
	return 0;
}

int rs_seg_attach(struct rs_seg_map *m, const char *name, int create, char *why, size_t whylen)
{
	struct stat st;
	struct rs_segment *s;
	int fd = -1;
	int err;

	m->seg = NULL;
	m->fd = -1;
	m->fd_slot = NULL;
	m->dev = m->ino = 0;
	if (rs_seg_path(name, m->path, sizeof(m->path)) < 0)
		return WHY("bad segment name '%s'", name ? name : "(none)"), -1;
	/* It exists but for the first process: one open for the others. */
	fd = open_file(m->path, 0);
	if (fd < 0 && create && errno == ENOENT) {
		fd = open_file(m->path, 1);
		if (fd >= 0)
			fchmod(fd, 0600);	/* 0600 whatever the creator's umask */
		else if (errno == EEXIST)	/* created meanwhile by another */
			fd = open_file(m->path, 0);
	}
	if (fd < 0)
		return WHY("cannot open %s: %s", m->path, strerror(errno)), -1;
	if (attach_ready(m, fd, why, whylen, &s) == 0) {
		if (!s)
			return -1;
		return finish(m, fd, s, why, whylen);
	}
	/* Initialisation takes microseconds; a lock held for seconds is a
	 * stuck or hostile holder, and we do not wait on it. */
	for (int tries = 0; rs_sys(SYS_flock, fd, LOCK_EX | LOCK_NB) < 0; tries++) {
		struct timespec ts = { 0, 10 * 1000 * 1000 };

		err = errno;
		if ((err != EWOULDBLOCK && err != EINTR) || tries == 200) {
			rs_sys(SYS_close, fd);
			return WHY("cannot lock %s: %s", m->path,
				   err == EWOULDBLOCK ? "held by another process for 2 s" : strerror(err)), -1;
		}
		nanosleep(&ts, NULL);
	}
	if (rs_fstat(fd, &st) < 0) {
		err = errno;
		rs_sys(SYS_close, fd);
		return WHY("cannot stat %s: %s", m->path, strerror(err)), -1;
	}
	if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 07777) != 0600) {
		rs_sys(SYS_close, fd);
		return WHY("%s is not a regular file of mode 0600 owned by uid %u",
			   m->path, (unsigned)geteuid()), -1;
	}
	if (st.st_size != 0 && st.st_size != (off_t)sizeof(*s)) {
		rs_sys(SYS_close, fd);
		return WHY("%s has size %lld, expected %zu", m->path, (long long)st.st_size,
			   sizeof(*s)), -1;
	}
	if (back(fd, sizeof(*s), st.st_size == 0) < 0) {
		err = errno;
		rs_sys(SYS_close, fd);
		if (err == ENOSPC)
			return WHY("no space for the %zu bytes of %s: its file system is full",
				   sizeof(*s), m->path), -1;
		return WHY("cannot allocate %s: %s", m->path, strerror(err)), -1;
	}
	s = map_separately(m->path, &st, &err);
	if (!s) {
		rs_sys(SYS_close, fd);
		return WHY("cannot map %s: %s", m->path, strerror(err)), -1;
	}
	if (st.st_size == 0 || __atomic_load_n(&s->hdr.magic, __ATOMIC_ACQUIRE) == 0) {
		/* Nobody finished initialising it: a file of zeros is ours to set up. */
		int zero = 1;

		for (size_t i = 0; i < sizeof(s->hdr) && zero; i++)
			zero = ((const unsigned char *)&s->hdr)[i] == 0;
		if (zero)
			rs_seg_init(s);
	}
	rs_sys(SYS_flock, fd, LOCK_UN);
	m->dev = (uint64_t)st.st_dev;
	m->ino = (uint64_t)st.st_ino;
	return finish(m, fd, s, why, whylen);
}

static int map_fd(const struct rs_seg_map *m)
{
	return m->fd_slot ? atomic_load(m->fd_slot) : m->fd;
}

void rs_seg_detach(struct rs_seg_map *m)
{
	if (m->seg)
		munmap(m->seg, sizeof(*m->seg));
	if (map_fd(m) >= 0)
		rs_sys(SYS_close, map_fd(m));
	m->seg = NULL;
	m->fd = -1;
	m->fd_slot = NULL;
}

static int ofd_lock(int fd, int cmd, struct flock *fl, uint32_t slot)
{
	memset(fl, 0, sizeof(*fl));
	fl->l_type = F_WRLCK;
	fl->l_whence = SEEK_SET;
	fl->l_start = (off_t)(RS_LIVE_BASE + slot);
	fl->l_len = 1;
	return (int)rs_sys(SYS_fcntl, fd, cmd, fl);
}

/* Is fd still the file we attached to?  A descriptor table shared with
 * another process (CLONE_FILES) can have our number closed and reused by
 * it.  Maps made elsewhere (the command's) do not record it. */
static int still_ours(const struct rs_seg_map *m, int fd)
{
	struct stat a;

	if (!m->dev && !m->ino)
		return 1;
	return rs_fstat(fd, &a) == 0 && (uint64_t)a.st_dev == m->dev && (uint64_t)a.st_ino == m->ino;
}

_Atomic uint64_t rs_seg_looks;

int rs_seg_alive(const struct rs_seg_map *m, uint32_t slot)
{
	struct flock fl;
	int saved = errno, fd = map_fd(m);
	int r = ofd_lock(fd, F_OFD_GETLK, &fl, slot);

	atomic_fetch_add_explicit(&rs_seg_looks, 1, memory_order_relaxed);

	/* If we cannot tell, assume alive: waiting longer is safe, stealing
	 * is not.  "Dead" is believed only of the table's own file. */
	r = r < 0 || fl.l_type != F_UNLCK || !still_ours(m, fd);
	errno = saved;
	return r;
}

int rs_seg_claim(const struct rs_seg_map *m, uint32_t slot)
{
	struct flock fl;
	int saved = errno;
	int r = ofd_lock(map_fd(m), F_OFD_SETLK, &fl, slot);

	errno = saved;
	return r < 0 ? -1 : 0;
}
