/*
 * Cluster scope, the library side (docs/design.md (i)).
 *
 * THEORY
 *
 * Which files: those on a file system whose locks reach other nodes
 * (clusterfs.c decides from /proc/self/mountinfo).  The decision depends
 * only on the device, so it is made once per device and remembered; a
 * refused device gets one line, at level error, that says why, and its
 * files keep node scope.
 *
 * The one rule: a node grant on a cluster file is acquired only while
 * this process holds a pin on a cluster grant of its node's agent that
 * contains it (rs_cluster_pin, then rs_nt_acquire bounded to the pinned
 * grant, then rs_cluster_unpin; grants.c).  The agent gives a cluster
 * grant back only after draining every node grant inside it (agent.c).
 * Pre of a call: it runs only inside a node grant (node scope).  Post:
 * while it runs, its node holds the lock manager's lock on its range.
 * Nothing here is on the inline fast path: a cached node grant is valid
 * exactly as long as its cluster grant, so the fast path needs no check.
 *
 * Fail safe: no agent answering means waiting (and saying so), never
 * running; a lost lock means EIO (rs_cl_eio), never running.  Each pin
 * reply carries the agent's own description, kept here, so that the
 * agent's locks outlive the agent while this process might be inside
 * them; a new agent takes a dead one's over (agent.c, adopt).
 */
#include "cluster.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clusteragent.h"
#include "clusterfs.h"
#include "clusterlock.h"
#include "fileid.h"
#include "fdtable.h"
#include "state.h"
#include "real.h"
#include "rangeshim/rangelock.h"
#include "stats.h"
#include "config.h"
#include "futex.h"
#include "invariant.h"
#include "lockorder.h"
#include "log.h"
#include "rawsyscall.h"

#define NDEV 64

/* Written under devs_mtx, entry first and then ndev (release), so that a
 * nested call may read the decisions made so far without it (lock_file). */
static struct {
	uint64_t dev;
	int ok;
	int flock_posix;	/* rs_mnt_flock_posix */
} devs[NDEV];
static _Atomic int ndev;
static RS_FORKED _Atomic uint32_t devs_mtx;

static int decide(uint64_t dev, int *flock_posix)
{
	struct rs_mnt m;
	char why[400];

	*flock_posix = 0;
	if (rs_mnt_find("/proc/self/mountinfo", major(dev), minor(dev), &m) < 0) {
		rs_log(RS_LOG_ERROR, "cluster scope: no mount of device %u:%u in "
		       "/proc/self/mountinfo, so its locks cannot be known to be cluster-wide; "
		       "its files keep node scope", major(dev), minor(dev));
		return 0;
	}
	*flock_posix = rs_mnt_flock_posix(&m);
	if (rs_mnt_cluster_ok(&m, rs_cfg.cluster_fs, why, sizeof why))
		return 1;
	rs_log(RS_LOG_ERROR, "cluster scope: files on %s keep node scope: %s "
	       "(RANGESHIM_CLUSTER_FS=%s would trust it)", m.point, why, m.fstype);
	return 0;
}

/* The decision for dev, and whether flocks there are whole-file locks of
 * the lock manager. */
static int cluster_dev(uint64_t dev, int *flock_posix)
{
	int ok, n;

	rs_lk_mutex_lock(RS_LK_DEVS, &devs_mtx);
	n = atomic_load_explicit(&ndev, memory_order_relaxed);
	for (int i = 0; i < n; i++)
		if (devs[i].dev == dev) {
			ok = devs[i].ok;
			*flock_posix = devs[i].flock_posix;
			rs_lk_mutex_unlock(RS_LK_DEVS, &devs_mtx);
			return ok;
		}
	ok = decide(dev, flock_posix);
	/* A full table decides again next time (and says so again): rare,
	 * and never less safe. */
	if (n < NDEV) {
		devs[n].dev = dev;
		devs[n].ok = ok;
		devs[n].flock_posix = *flock_posix;
		atomic_store_explicit(&ndev, n + 1, memory_order_release);
	}
	rs_lk_mutex_unlock(RS_LK_DEVS, &devs_mtx);
	return ok;
}

int rs_cluster_dev(uint64_t dev)
{
	int flock_posix;

	return cluster_dev(dev, &flock_posix);
}

/*
 * Pins (docs/design.md (i), shim/cluster/clusteragent.h).  A node grant on a
 * cluster file is acquired only while a pin holds the cluster grant that
 * will contain it; the pin is one connection to the node's agent.
 */
__thread int rs_cl_eio __attribute__((tls_model("initial-exec")));

/*
 * Copies of the agent's descriptions, kept as long as this process lives
 * (hidden at high numbers, close-on-exec): an OFD lock lives as long as
 * its description, so the agent's locks outlive the agent while a
 * process that may be inside them lives.  What is kept is the agent's
 * carrier of the description (agent.c, make_carrier: a socket holding it
 * in flight), never an fd of the file: this process closes copies
 * (duplicates, adopted ones), and closing any fd of a file drops the
 * application's POSIX locks on it.  One per description the agent
 * opened (desc_id), since an agent that died and one started after it
 * have different descriptions, and the dead one's locks may still hold
 * calls of ours.
 *
 * Theory: a copy is closed only after an agent said it holds no lock of
 * ours any more (ADOPTED: it drained the node and unlocked everything
 * through it).  Pre of pfile_keep: fd is the description the agent just
 * answered a pin with.  Post: a copy of it is in the table (or the pin
 * is refused: pfile_keep returns -1 and nothing was closed that may hold
 * a lock).  So the table grows (on the slow path only: pins) instead of
 * dropping a copy: dropping the 65th copy of 64 would unlock that file
 * if the agent died under running calls (cluster_adv::copies_beyond_64).
 * A newer description of the same file from the agent means the older
 * one was closed by an agent (given back idle) or belongs to a dead one;
 * either way the agent decides: the older copy loses its "current" mark,
 * so the next pin of the file sends it for adoption, and only then is it
 * closed.  That bounds the copies of a file without trusting a guess.
 *
 * The other way a copy goes: the process is inside none of the file's
 * locks any more.  Once every fd of the file is closed, no pin of it is
 * in progress (inpin) and the node table holds no grant of ours on it
 * (rs_grant_held: cached, in use or waited for), no call of ours can be
 * inside any of the file's cluster grants, through any description, so
 * every copy of the file is closed (rs_cluster_file_closed).  So a
 * process keeps at most one copy per open cluster file (plus dead agents'
 * ones until adopted), not one per file it ever wrote
 * (cluster_adv::carriers_released), and a deleted file's space is not
 * held by us.  Both checks are made under pfiles_mtx, which a pin takes
 * to count itself in before it asks the agent and out only after its
 * node grant is in the table: a grant made after the check was pinned
 * after it, and so brings a copy of its own.
 *
 * Pins ask the agent for its description only when they hold no copy of
 * it (PIN's desc_id), so a pin on a file already held needs one
 * descriptor (its connection).  A pin whose reply carried a description
 * that could not be installed (MSG_CTRUNC: no free number) is refused,
 * never used: without the copy, the agent's death would unlock the range
 * under our calls (cluster_adv::carrier_truncated).
 */
struct pfile {
	uint64_t dev, ino, id, seq;
	int fd;          /* + 1; 0: free */
	int current;     /* the answering agent said it is its own */
};
static struct pfile *pfiles;
static size_t npfile;    /* slots in pfiles (pfiles_mtx) */
static uint64_t pfile_seq;
static RS_FORKED _Atomic uint32_t pfiles_mtx;

/* Files with a pin in progress (pfiles_mtx); more at once than slots
 * counts in inpin_over, which keeps every copy (never less safe). */
#define NINPIN 64
static struct {
	uint64_t dev, ino;
	unsigned n;
} inpin[NINPIN];
static unsigned inpin_over;

static int pin_begin(uint64_t dev, uint64_t ino)
{
	int slot = -1;

	rs_lk_mutex_lock(RS_LK_PFILES, &pfiles_mtx);
	for (int i = 0; i < NINPIN; i++) {
		if (inpin[i].n && inpin[i].dev == dev && inpin[i].ino == ino) {
			slot = i;
			break;
		}
		if (!inpin[i].n && slot < 0)
			slot = i;
	}
	if (slot >= 0) {
		inpin[slot].dev = dev;
		inpin[slot].ino = ino;
		inpin[slot].n++;
	} else {
		inpin_over++;
	}
	rs_lk_mutex_unlock(RS_LK_PFILES, &pfiles_mtx);
	return slot;
}

/* Pre: slot is what pin_begin returned for this pin. */
static void pin_end(int slot)
{
	RS_ASSERT(slot >= -1 && slot < NINPIN);
	rs_lk_mutex_lock(RS_LK_PFILES, &pfiles_mtx);
	if (slot >= 0 && slot < NINPIN && inpin[slot].n)
		inpin[slot].n--;
	else if (slot < 0 && inpin_over)
		inpin_over--;
	rs_lk_mutex_unlock(RS_LK_PFILES, &pfiles_mtx);
}

/* The description of (dev, ino) this process holds a copy of and that
 * the answering agent said is its own: the agent need not send it. */
static uint64_t pfile_have(uint64_t dev, uint64_t ino)
{
	uint64_t id = 0;

	rs_lk_mutex_lock(RS_LK_PFILES, &pfiles_mtx);
	for (size_t i = 0; i < npfile; i++)
		if (pfiles[i].fd && pfiles[i].dev == dev && pfiles[i].ino == ino &&
		    pfiles[i].current)
			id = pfiles[i].id;
	rs_lk_mutex_unlock(RS_LK_PFILES, &pfiles_mtx);
	return id;
}

/* Is (dev, ino) kept with the description id? */
static int pfile_holds(uint64_t dev, uint64_t ino, uint64_t id)
{
	int have = 0;

	rs_lk_mutex_lock(RS_LK_PFILES, &pfiles_mtx);
	for (size_t i = 0; i < npfile && !have; i++)
		have = pfiles[i].fd && pfiles[i].dev == dev && pfiles[i].ino == ino &&
		       pfiles[i].id == id;
	rs_lk_mutex_unlock(RS_LK_PFILES, &pfiles_mtx);
	return have;
}

/* pfiles_mtx, or 0 when it stays held: the close path may run in a
 * signal handler that interrupted its own thread's pin (which holds it).
 * Skipping there keeps the copies, never less safe. */
static int pfiles_trylock(void)
{
	for (int i = 0; i < RS_SPIN_LIMIT; i++) {
		if (rs_lk_mutex_trylock(RS_LK_PFILES, &pfiles_mtx))
			return 1;
		rs_cpu_relax();
	}
	return 0;
}

void rs_cluster_file_closed(uint64_t dev, uint64_t ino)
{
	int busy;

	if (!pfiles_trylock())
		return;
	busy = inpin_over != 0;
	for (int i = 0; i < NINPIN && !busy; i++)
		busy = inpin[i].n && inpin[i].dev == dev && inpin[i].ino == ino;
	for (size_t i = 0; i < npfile && !busy; i++)
		if (pfiles[i].fd && pfiles[i].dev == dev && pfiles[i].ino == ino) {
			/* Asked once, and only when there is a copy to close. */
			if (rs_grant_held(dev, ino)) {
				busy = 1;
				break;
			}
			rs_sys(SYS_close, pfiles[i].fd - 1);
			pfiles[i].fd = 0;
		}
	rs_lk_mutex_unlock(RS_LK_PFILES, &pfiles_mtx);
}

/* Pre: pfiles_mtx held.  Post: pfiles has twice the slots (at least
 * 64), or -1 and it is unchanged.  mmap, not malloc: the shim must not
 * depend on the application's allocator. */
static int pfile_grow(void)
{
	size_t n = npfile ? npfile * 2 : 64;
	struct pfile *t = rs_mmap(NULL, n * sizeof *t, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	RS_ASSERT(rs_lk_held(RS_LK_PFILES, &pfiles_mtx));
	if (t == MAP_FAILED)
		return -1;
	if (pfiles) {
		memcpy(t, pfiles, npfile * sizeof *t);
		munmap(pfiles, npfile * sizeof *t);
	}
	pfiles = t;
	npfile = n;
	return 0;
}

/* fd moved to a hidden number, or fd itself if no number is free: the
 * description must never be lost on the way (rs_fd_hide closes fd even
 * when it finds no new number). */
static int pfile_hide(int fd)
{
	int d = (int)rs_sys(SYS_fcntl, fd, F_DUPFD_CLOEXEC, 3), h;

	if (d < 0)
		return fd;
	h = rs_fd_hide(d);
	if (h < 0)
		return fd;
	rs_sys(SYS_close, fd);
	return h;
}

static int pfile_keep(uint64_t dev, uint64_t ino, uint64_t id, int fd)
{
	int slot = -1;

	RS_ASSERT(fd >= 0);
	rs_lk_mutex_lock(RS_LK_PFILES, &pfiles_mtx);
	for (size_t i = 0; i < npfile; i++) {
		if (pfiles[i].fd && pfiles[i].dev == dev && pfiles[i].ino == ino) {
			if (pfiles[i].id == id) {
				slot = -2;	/* have it */
				pfiles[i].current = 1;
				continue;
			}
			/* Superseded: the next pin asks the agent about it. */
			pfiles[i].current = 0;
		}
		if (!pfiles[i].fd && slot == -1)
			slot = (int)i;
	}
	if (slot == -1) {
		slot = (int)npfile;
		if (pfile_grow() < 0) {
			rs_lk_mutex_unlock(RS_LK_PFILES, &pfiles_mtx);
			return -1;
		}
	}
	if (slot >= 0) {
		/* The agent sends its own description with every reply. */
		pfiles[slot] = (struct pfile){ dev, ino, id, ++pfile_seq, pfile_hide(fd) + 1, 1 };
		fd = -1;
	}
	rs_lk_mutex_unlock(RS_LK_PFILES, &pfiles_mtx);
	if (fd >= 0)	/* a second copy of one we keep */
		rs_sys(SYS_close, fd);
	return 0;
}

/* A copy of (dev, ino) not yet known to be the answering agent's own
 * (agent pid apid): the agent takes it over if it is a dead agent's.
 * -1 if none; *slot says which, for pfile_drop and pfile_current. */
static int pfile_old(uint64_t dev, uint64_t ino, int *slot)
{
	int fd = -1;

	*slot = -1;
	rs_lk_mutex_lock(RS_LK_PFILES, &pfiles_mtx);
	for (size_t i = 0; i < npfile; i++)
		if (pfiles[i].fd && pfiles[i].dev == dev && pfiles[i].ino == ino &&
		    !pfiles[i].current) {
			*slot = (int)i;
			fd = pfiles[i].fd - 1;
			break;
		}
	rs_lk_mutex_unlock(RS_LK_PFILES, &pfiles_mtx);
	return fd;
}

/* The agent said the copy in slot is its own description: send it no
 * more, unless the agent changes (a connection to another agent pid
 * clears the marks: pfile_agent). */
static void pfile_current(int slot, int fd)
{
	rs_lk_mutex_lock(RS_LK_PFILES, &pfiles_mtx);
	if (slot >= 0 && (size_t)slot < npfile && pfiles[slot].fd == fd + 1)
		pfiles[slot].current = 1;
	rs_lk_mutex_unlock(RS_LK_PFILES, &pfiles_mtx);
}

static void pfile_agent(pid_t pid)
{
	static pid_t last;

	rs_lk_mutex_lock(RS_LK_PFILES, &pfiles_mtx);
	if (pid != last)
		for (size_t i = 0; i < npfile; i++)
			pfiles[i].current = 0;
	last = pid;
	rs_lk_mutex_unlock(RS_LK_PFILES, &pfiles_mtx);
}

/* The new agent unlocked everything on that old description: drop it. */
static void pfile_drop(int slot, int fd)
{
	if (slot < 0)
		return;
	rs_lk_mutex_lock(RS_LK_PFILES, &pfiles_mtx);
	if ((size_t)slot < npfile && pfiles[slot].fd == fd + 1) {
		pfiles[slot].fd = 0;
		rs_sys(SYS_close, fd);
	}
	rs_lk_mutex_unlock(RS_LK_PFILES, &pfiles_mtx);
}

/* An fd of ours on (dev, ino), for the agent to open its own description
 * from; -1 if none, -errno if /proc/self/fd cannot be opened.  Once per
 * file and agent. */
static int find_fd(uint64_t dev, uint64_t ino)
{
	char buf[4096];
	int dir = (int)rs_sys(SYS_openat, AT_FDCWD, "/proc/self/fd",
			       O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	long n;

	if (dir < 0)
		return -errno;
	while ((n = rs_sys(SYS_getdents64, dir, buf, sizeof buf)) > 0) {
		for (long off = 0; off < n;) {
			struct linux_dirent64 {
				uint64_t ino;
				int64_t off;
				unsigned short reclen;
				unsigned char type;
				char name[];
			} *d = (void *)(buf + off);
			struct stat st;
			int fd = atoi(d->name);

			off += d->reclen;
			if (d->name[0] < '0' || d->name[0] > '9' || fd == dir)
				continue;
			if (rs_sys(SYS_fstat, fd, &st) == 0 && S_ISREG(st.st_mode) &&
			    (uint64_t)st.st_dev == dev && (uint64_t)st.st_ino == ino) {
				rs_sys(SYS_close, dir);
				return fd;
			}
		}
	}
	rs_sys(SYS_close, dir);
	return -1;
}

/* A description sent to the agent is shared with another process: lazy
 * entries stop taking their offset for 0 (fdtable.h), as they do when
 * the application sends one (the sendmsg wrapper). */
static int send_to_agent(int s, const struct rs_ag_msg *m, int fd)
{
	if (fd >= 0)
		rs_fdt_lazy_shared();
	return rs_ag_send(s, m, fd);
}


/*
 * A pin waits for as long as a lock in the grant space lasts.  Other
 * nodes' grants end; a process's own lock there (one the application
 * placed wholly past 2^61, a whole-file lock of a program without the
 * shim, a flock the library could not move: limitations.md) may wait for
 * this very call, and the agent, which runs detached, cannot say so.  So
 * after PIN_SAY_MS without an answer the process asks the lock manager
 * once who holds the range's grant (F_OFD_GETLK: its owner is no
 * process, so this process's own locks show too) and names the holder
 * when it is this process or its lock reaches up from the data space
 * (cluster_adv::own_high_lock_says_why).  Another node's grant lies wholly
 * in the grant space, and over FUSE or NFS its pid may be a remote one:
 * it is not named.  Such a wait ends when that node's agent gives the
 * range back; if that agent is gone, the copies of its description that
 * the node's processes keep hold the lock until one of them pins the
 * file again (a call its cached grants do not cover), or they close the
 * file or exit (limitations.md), which may be never.  Nothing on
 * this node can tell which, so after PIN_OTHER_SAY_MS the process says
 * that another node holds the range, and what to look at there
 * (cluster_adv::agent_killed_says_why).  Once per process each: a hint,
 * not a log.
 */
#define PIN_SAY_MS 5000
#define PIN_OTHER_SAY_MS 10000

static void await_reply(int s, const struct rs_ag_msg *sent)
{
	static _Atomic int said, said_other;
	struct pollfd p = { .fd = s, .events = POLLIN };
	struct flock q = { .l_type = F_WRLCK, .l_whence = SEEK_SET,
			   .l_start = (off_t)(RS_CL_GRANTS + sent->start),
			   .l_len = (off_t)(sent->end - sent->start) };
	int fd;

	if ((atomic_load_explicit(&said, memory_order_relaxed) &&
	     atomic_load_explicit(&said_other, memory_order_relaxed)) ||
	    poll(&p, 1, PIN_SAY_MS) != 0)
		return;
	fd = find_fd(sent->dev, sent->ino);
	if (fd < 0 || rs_sys(SYS_fcntl, fd, F_OFD_GETLK, &q) < 0 || q.l_type == F_UNLCK)
		return;
	if (q.l_pid <= 0 || (q.l_pid != getpid() && (uint64_t)q.l_start >= RS_CL_GRANTS)) {
		if (atomic_load_explicit(&said_other, memory_order_relaxed) ||
		    poll(&p, 1, PIN_OTHER_SAY_MS - PIN_SAY_MS) != 0 || atomic_exchange(&said_other, 1))
			return;
		rs_log(RS_LOG_WARN, "cluster scope: a call on bytes [%llu, %llu) of file %s "
		       "has waited %d s for its cluster lock, which another node holds; it goes on "
		       "when that node's agent gives the range back.  If that agent is gone "
		       "(killed; `rangeshim locks` on that node names no agent), the range stays "
		       "held by the copies of its description that the node's processes keep, "
		       "until one of them needs a new grant on the file, or they close it or exit",
		       (unsigned long long)sent->start, (unsigned long long)sent->end,
		       RS_FILE_ID(sent->dev, sent->ino),
		       PIN_OTHER_SAY_MS / 1000);
		return;
	}
	if (atomic_exchange(&said, 1))
		return;
	rs_log(RS_LOG_ERROR, "cluster scope: a call on bytes [%llu, %llu) of file %s has "
	       "waited %d s for its cluster lock, which a lock of process %d%s holds: that lock "
	       "reaches above 2^61, where cluster scope keeps its own locks (a whole-file lock of "
	       "a program without the shim, a lock wholly past 2^61, or a flock the library could "
	       "not move); the call goes on when it goes", (unsigned long long)sent->start,
	       (unsigned long long)sent->end, RS_FILE_ID(sent->dev, sent->ino), PIN_SAY_MS / 1000, (int)q.l_pid,
	       q.l_pid == getpid() ? " (this process: it waits for itself)" : "");
}

/* 0 with the reply; -2: it carried a descriptor no number was free for
 * (rs_ag_recv); -1: no reply. */
static int recv_msg(int s, const struct rs_ag_msg *sent, struct rs_ag_msg *m, int *fd)
{
	ssize_t n;

	await_reply(s, sent);
	n = rs_ag_recv(s, m, fd);
	if (n < 0 && errno == EMFILE)
		return -2;
	return n == (ssize_t)sizeof *m && m->op == RS_AG_REPLY ? 0 : -1;
}

/*
 * A pin needs descriptors: its connection, and a copy of the agent's
 * description when the process holds none, and /proc/self/fd once per
 * file.  At the descriptor limit it cannot have them, and waiting would
 * wait for the application to close something, which it may never do
 * (a process of 1006 descriptors under `ulimit -n 1024` retried for
 * ever).  The call fails instead, with the errno of the call that found
 * no descriptor (socket's EMFILE or ENFILE; a descriptor dropped from a
 * reply is the kernel's EMFILE): never run without the lock, and never
 * hang.  Once per process, a line says so.
 */
static int fd_limit(int err, uint64_t dev, uint64_t ino)
{
	static _Atomic int said;

	if (!atomic_exchange(&said, 1))
		rs_log(RS_LOG_ERROR, "cluster scope: a call on file %s fails with %s: no "
		       "descriptor is free for its cluster lock (a connection to the node's agent, "
		       "or a copy of its description); close some files or raise `ulimit -n`",
		       RS_FILE_ID(dev, ino),
		       err == ENFILE ? "ENFILE" : "EMFILE");
	return -err;
}

/* The node table this process is attached to: its file's (device,
 * inode), which the agent must share (0, 0 if not attached); returns
 * whether that file was removed (no agent can attach to it any more). */
static int table_id(uint64_t *tdev, uint64_t *tino)
{
	int fd = atomic_load(&rs_private_fd[0]);
	struct stat st;

	*tdev = *tino = 0;
	if (fd < 0 || rs_sys(SYS_fstat, fd, &st) != 0)
		return 0;
	*tdev = (uint64_t)st.st_dev;
	*tino = (uint64_t)st.st_ino;
	return st.st_nlink == 0;
}

/* A connection to our user's agent of this node table (tdev, tino), or
 * -1; *pid is the agent's.  *err is the errno of a socket() refused for
 * want of a descriptor (EMFILE, ENFILE), else 0. */
static int connect_agent(pid_t *pid, uint64_t tdev, uint64_t tino, int *err)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int len = rs_ag_name(a.sun_path, sizeof a.sun_path, (unsigned)getuid(), rs_cfg.shm_name,
			     tdev, tino);
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct ucred cr;
	socklen_t cl = sizeof cr;

	*err = 0;
	if (s < 0) {
		if (errno == EMFILE || errno == ENFILE)
			*err = errno;
		return -1;
	}
	if (connect(s, (struct sockaddr *)&a,
		    (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)len)) < 0 ||
	    getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0) {
		rs_sys(SYS_close, s);
		return -1;
	}
	if (cr.uid != getuid()) {
		static _Atomic int said;

		/* Anyone can bind an abstract name: trust only our own user,
		 * and say who is in the way, since our own agent cannot bind
		 * while it is (cluster_adv::squatted_socket).  Waiting is the
		 * fail-safe answer: nothing runs without a cluster grant. */
		if (!atomic_exchange(&said, 1))
			rs_log(RS_LOG_ERROR, "cluster scope: the agent's socket name @%s is held "
			       "by another user (uid %u, pid %d), so our agent cannot start; cluster "
			       "calls wait until that process lets it go", a.sun_path + 1,
			       (unsigned)cr.uid, (int)cr.pid);
		rs_sys(SYS_close, s);
		return -1;
	}
	*pid = cr.pid;
	return s;
}

/* The command next to the library: build/rangeshim beside
 * build/librangeshim.so, or PREFIX/bin/rangeshim beside PREFIX/lib. */
static int agent_path(char *buf, size_t len)
{
	Dl_info info;
	char *slash;

	if (!dladdr((void *)rs_cluster_dev, &info) || !info.dli_fname ||
	    strlen(info.dli_fname) + 16 > len)
		return -1;
	strcpy(buf, info.dli_fname);
	slash = strrchr(buf, '/');
	if (!slash)
		return -1;
	strcpy(slash + 1, "rangeshim");
	if (access(buf, X_OK) == 0)
		return 0;
	strcpy(slash + 1, "../bin/rangeshim");
	return access(buf, X_OK);
}

extern char **environ;

/* Start the agent; it forks itself into the background once its socket
 * is bound, so the child we wait for exits at once. */
static void spawn_agent(void)
{
	char path[4096];
	char *argv[] = { path, "agent", "--shm", rs_cfg.shm_name, NULL };
	char *envp[256];
	posix_spawn_file_actions_t fa;
	int n = 0, st;
	pid_t pid;

	if (agent_path(path, sizeof path) < 0) {
		static _Atomic int said;

		if (!atomic_exchange(&said, 1))
			rs_log(RS_LOG_ERROR, "cluster scope: no rangeshim command next to the "
			       "library (PREFIX/bin/rangeshim or beside librangeshim.so) to start "
			       "the node's agent; start `rangeshim agent` yourself");
		return;
	}
	/* Not preloaded: the agent's own I/O is not the application's. */
	for (char **e = environ; e && *e && n < 255; e++)
		if (strncmp(*e, "LD_PRELOAD=", 11) != 0)
			envp[n++] = *e;
	envp[n] = NULL;
	/* None of our descriptors: at our descriptor limit the agent could
	 * not even load its libraries (it inherits the limit and every
	 * descriptor not close-on-exec). */
	if (posix_spawn_file_actions_init(&fa) != 0)
		return;
#if __GLIBC_PREREQ(2, 34)
	posix_spawn_file_actions_addclosefrom_np(&fa, 3);
#endif
	/* The agent inherits descriptors 0 to 2, as any spawned child
	 * would (the posix_spawn wrapper, which is the application's). */
	rs_fdt_lazy_shared();
	if (rs_real.posix_spawn(&pid, path, &fa, NULL, argv, envp) == 0)
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
	posix_spawn_file_actions_destroy(&fa);
}

/* Our node table's file was removed and no agent answers for it: none
 * ever will (an agent attaches by name), so calls fail with EIO, once
 * said, rather than wait for ever. */
static int table_removed(uint64_t dev, uint64_t ino)
{
	static _Atomic int said;

	if (!atomic_exchange(&said, 1))
		rs_log(RS_LOG_ERROR, "cluster scope: calls on file %s fail with EIO: this "
		       "process's node table was removed and its agent is gone, and no agent can "
		       "attach to a removed table (restart the program to use the new one)",
		       RS_FILE_ID(dev, ino));
	return -EIO;
}

/*
 * One pin, in steps (rs_cluster_pin).  An attempt reaches the node's
 * agent (pin_connect), asks it for the cluster grant (pin_ask), judges
 * its answer (pin_judge) and keeps the copy of its description that the
 * grant needs (pin_keep).  Each step returns 0 to go on, PIN_AGAIN to
 * try again after 20 ms (pin_again closes what the attempt opened), or
 * -errno: the call fails, never runs.  Only a whole attempt's success
 * leaves the connection, which is the pin, open.
 */
#define PIN_AGAIN 1

struct pin_try {
	struct rs_ag_msg m;	/* the request */
	struct rs_ag_msg r;	/* the agent's answer */
	uint64_t dev, ino;
	uint64_t t0;		/* when no agent was first found; 0 before */
	uint64_t have;		/* the desc_id asked with: a copy we hold */
	uint32_t wflag;
	pid_t apid;		/* the answering agent (its listener) */
	int sock;		/* this attempt's connection, -1 before */
	int rfd;		/* the copy of the description in the answer, -1 if none */
	int old, oldslot;	/* a copy sent for adoption (pfile_old), -1 if none */
	int warned, nomem, busy, stale;	/* lines said once per pin */
};

/* Pre: this attempt holds no connection (t->sock < 0).  Post: 0 with
 * t->sock a connection to our user's agent of our node table (t->apid);
 * PIN_AGAIN while none answers (one was started); or -errno: no
 * descriptor is free, or the table was removed and its agent is gone. */
static int pin_connect(struct pin_try *t)
{
	int ferr;
	uint64_t now;

	RS_ASSERT(t->sock < 0);
	t->sock = connect_agent(&t->apid, t->m.tdev, t->m.tino, &ferr);
	if (t->sock >= 0)
		return 0;
	if (ferr)
		return fd_limit(ferr, t->dev, t->ino);
	now = rs_cluster_now_ns();
	if (!t->t0)
		t->t0 = now;
	if (!t->warned && now - t->t0 > 1000000000ULL) {
		t->warned = 1;
		rs_log(RS_LOG_WARN, "cluster scope: waiting for the node's agent "
		       "(rangeshim agent); nothing new is granted until it runs");
	}
	/* A removed table's agent stays while its processes live
	 * (agent.c); once it is gone no agent can attach to the table,
	 * and waiting would be for ever. */
	if (now - t->t0 > 2000000000ULL && table_id(&t->m.tdev, &t->m.tino))
		return table_removed(t->dev, t->ino);
	spawn_agent();
	t->sock = connect_agent(&t->apid, t->m.tdev, t->m.tino, &ferr);
	if (t->sock >= 0)
		return 0;
	return ferr ? fd_limit(ferr, t->dev, t->ino) : PIN_AGAIN;
}

/* Pre: t->sock is connected to the agent.  Post: 0 with t->r the agent's
 * answer to the pin (after our own fd of the file, when the agent had
 * none to open the file from: -ENOENT) and t->rfd the copy of its
 * description it carried, or -1; the agent holds the grant for us while
 * the connection lasts if t->r.rc is 0.  PIN_AGAIN: no answer.  -errno:
 * no descriptor was free (for /proc/self/fd, or the copy in the answer,
 * which was dropped: the pin must not be used). */
static int pin_ask(struct pin_try *t)
{
	int rc, fd;

	RS_ASSERT(t->sock >= 0);
	/* A dead agent's description we still hold: the new agent takes its
	 * locks over (agent.c, adopt).  The pid is the listener's (the
	 * agent's starter), stable for one agent's life. */
	pfile_agent(t->apid);
	t->old = pfile_old(t->dev, t->ino, &t->oldslot);
	t->m.desc_id = t->have = pfile_have(t->dev, t->ino);
	t->m.flags = (t->old >= 0 ? RS_AG_OLD_FD : 0) | t->wflag;
	if (send_to_agent(t->sock, &t->m, t->old) < 0 ||
	    (rc = recv_msg(t->sock, &t->m, &t->r, &t->rfd)) == -1)
		return PIN_AGAIN;
	if (rc == -2)
		return fd_limit(EMFILE, t->dev, t->ino);
	t->m.flags = t->wflag;
	if (t->r.rc != -ENOENT)
		return 0;
	fd = find_fd(t->dev, t->ino);
	if (fd == -EMFILE || fd == -ENFILE)
		return fd_limit(-fd, t->dev, t->ino);
	t->m.flags |= RS_AG_HAS_FD;
	if (fd < 0 || send_to_agent(t->sock, &t->m, fd) < 0 ||
	    (rc = recv_msg(t->sock, &t->m, &t->r, &t->rfd)) == -1)
		return PIN_AGAIN;
	return rc == -2 ? fd_limit(EMFILE, t->dev, t->ino) : 0;
}

/* Post: 0 when the agent holds the grant for us (t->r.rc 0); PIN_AGAIN
 * when waiting may end the refusal (saying why, once per pin); -EIO when
 * it cannot: the node lost the file's locks, or only the user can change
 * the refusal (a chmod), so waiting would hang. */
static int pin_judge(struct pin_try *t)
{
	int rc = t->r.rc;

	if (rc == -ESTALE) {
		/* Cannot be, but for a hash collision of the names: never be
		 * served by another table's agent. */
		if (!t->stale++)
			rs_log(RS_LOG_ERROR, "cluster scope: the agent that answered serves "
			       "another node table than this process's; waiting for ours");
		t->warned = 1;
		return PIN_AGAIN;
	}
	if (rc == -EROFS || rc == -EPERM) {
		static _Atomic int said;

		if (!atomic_exchange(&said, 1))
			rs_log(RS_LOG_ERROR, "cluster scope: %s file %s fail with "
			       "EIO: the node's agent %s", rc == -EROFS ? "writes to" :
			       "calls on", RS_FILE_ID(t->dev, t->ino),
			       rc == -EROFS ? "holds it read-only (the user may not write "
			       "it), so it cannot lock it for writing" :
			       "cannot open it (the user may neither read nor write it)");
		return -EIO;
	}
	if (rc == -EIO)
		return -EIO;
	if (rc == -EACCES && !t->warned) {
		t->warned = 1;
		rs_log(RS_LOG_ERROR, "cluster scope: the node's agent cannot open file "
		       "%s, which cluster locks need; waiting (this user needs "
		       "permission to open it)", RS_FILE_ID(t->dev, t->ino));
	}
	if (rc == -EBUSY && !t->busy++) {
		t->warned = 1;
		rs_log(RS_LOG_ERROR, "cluster scope: the node's agent holds as many files "
		       "as it can, and a call is in progress on every one; waiting for "
		       "one to end");
	}
	return rc != 0 ? PIN_AGAIN : 0;
}

/* Pre: the agent holds the grant for us (t->r.rc 0).  Post: 0 with a
 * copy of the agent's description of the file (t->r.desc_id) kept by
 * this process, the answer's own copy (t->rfd) now in pfiles; or
 * PIN_AGAIN: no copy is held (never go ahead without one: an agent
 * crash would unlock the range under our calls). */
static int pin_keep(struct pin_try *t)
{
	RS_ASSERT(t->r.rc == 0 && t->sock >= 0);
	if (t->r.flags & RS_AG_ADOPTED)
		pfile_drop(t->oldslot, t->old);
	else if (t->r.flags & RS_AG_CURRENT)
		pfile_current(t->oldslot, t->old);
	/* The agent sent no copy, and we hold none of this description:
	 * asked again, with desc_id 0, the agent sends it. */
	if (t->rfd < 0 && (t->r.desc_id != t->have || !pfile_holds(t->dev, t->ino, t->r.desc_id)))
		return PIN_AGAIN;
	if (t->rfd >= 0 && pfile_keep(t->dev, t->ino, t->r.desc_id, t->rfd) < 0) {
		if (!t->nomem++)
			rs_log(RS_LOG_ERROR, "cluster scope: no memory to keep the agent's "
			       "description of file %s (it keeps the locks if the agent "
			       "dies); waiting", RS_FILE_ID(t->dev, t->ino));
		t->warned = 1;
		return PIN_AGAIN;
	}
	t->rfd = -1;
	return 0;
}

/* An attempt that will not be used: close what it opened (the agent
 * releases the grant when the connection closes). */
static void pin_close(struct pin_try *t)
{
	if (t->rfd >= 0)
		rs_sys(SYS_close, t->rfd);
	if (t->sock >= 0)
		rs_sys(SYS_close, t->sock);
	t->rfd = t->sock = -1;
}

/* Post: the attempt closed, 20 ms later.  An agent that was reached and
 * did not grant gets one line per pin. */
static void pin_again(struct pin_try *t)
{
	int reached = t->sock >= 0;

	pin_close(t);
	if (reached && !t->warned) {
		t->warned = 1;
		rs_log(RS_LOG_WARN, "cluster scope: the node's agent did not answer a pin "
		       "(it may have died); asking again");
	}
	usleep(20000);
}

int rs_cluster_pin(uint64_t dev, uint64_t ino, uint64_t s, uint64_t e, int write,
		   struct rs_cl_pin *p)
{
	/*
	 * Cluster grants lock only [0, RS_CL_EOF): the intent space mirrors
	 * it above.  Bytes at and beyond RS_CL_EOF (tmpfs allows files up to
	 * 2^63 - 1) are stood for by the last byte below it: every range
	 * that reaches past RS_CL_EOF pins a cluster range that ends at
	 * RS_CL_EOF and so holds that byte, so any two calls that meet up
	 * there exclude each other across nodes as on any other byte.  The
	 * node grant still covers the real range (RS_RANGE_EOF above).
	 */
	struct pin_try t = { .m = { .op = RS_AG_PIN, .dev = dev, .ino = ino,
				    .start = s >= RS_CL_EOF ? RS_CL_EOF - 1 : s,
				    .end = e >= RS_CL_EOF ? RS_CL_EOF : e },
			     .dev = dev, .ino = ino, .wflag = write ? RS_AG_WRITE : 0,
			     .sock = -1, .rfd = -1 };
	int saved = errno, pslot, rc;

	table_id(&t.m.tdev, &t.m.tino);
	/* Counted in until rs_cluster_unpin: no copy of the file is closed
	 * meanwhile (rs_cluster_file_closed). */
	pslot = pin_begin(dev, ino);
	do {
		rc = pin_connect(&t);
		if (rc == 0)
			rc = pin_ask(&t);
		if (rc == 0)
			rc = pin_judge(&t);
		if (rc == 0)
			rc = pin_keep(&t);
		if (rc == PIN_AGAIN)
			pin_again(&t);
	} while (rc == PIN_AGAIN);
	if (rc < 0) {
		pin_close(&t);
		pin_end(pslot);
		errno = saved;
		return rc;
	}
	if (t.r.flags & RS_AG_GRACE)
		rs_log(RS_LOG_WARN, "cluster scope: the lock manager refused lock requests on "
		       "file %s for a while (ENOLCK: a grace period after a server "
		       "restart?); this call waited it out", RS_FILE_ID(dev, ino));
	RS_COUNT(cluster_locks, t.r.locks);
	RS_COUNT(cluster_wait_ns, t.r.wait_ns);
	RS_COUNT(cluster_revokes, t.r.revokes);
	p->sock = t.sock;
	p->pslot = pslot;
	p->lo = t.r.gs;
	p->hi = t.r.ge >= RS_CL_EOF ? RS_RANGE_EOF : t.r.ge;
	RS_ASSERT(p->lo <= s && e <= p->hi);
	errno = saved;
	return 0;
}

void rs_cluster_unpin(struct rs_cl_pin *p)
{
	struct rs_ag_msg m = { .op = RS_AG_UNPIN };

	RS_ASSERT(p->sock >= 0);
	rs_ag_send(p->sock, &m, -1);
	rs_sys(SYS_close, p->sock);
	p->sock = -1;
	pin_end(p->pslot);
}

uint64_t rs_cluster_now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

/* A forked child: another thread may have held either lock at fork. */
void rs_cluster_fork_child(void)
{
	atomic_store(&devs_mtx, 0);
	atomic_store(&pfiles_mtx, 0);
	/* The parent's pins in progress are not the child's.  Only those
	 * there are: a store to a page shared with the parent copies it. */
	for (size_t i = 0; i < NINPIN; i++)
		if (inpin[i].n)
			memset(&inpin[i], 0, sizeof inpin[i]);
	if (inpin_over)
		inpin_over = 0;
}

/*
 * The application's own locks on cluster files (docs/design.md (i),
 * "Separate byte spaces").  The agent's lock words live at and above
 * RS_CL_EOF (2^61; clusterlock.h), so an application lock must never
 * reach there: one that did would meet the agent's grants, and an
 * application writing inside its own lock would wait for its pin while
 * the agent waited for the application (cluster_adv::own_fcntl_lock).
 * So every lock call on a cluster file that starts below RS_CL_EOF and
 * reaches past it (l_len 0, "to the end", above all) is made on [start,
 * RS_CL_EOF) instead, and an F_GETLK answer ending exactly there is given
 * back as "to the end".  Unlocks are made as they are: they meet no other
 * owner's lock, and an unlock "to the end" must also drop locks the
 * application placed wholly past 2^61 (clamped, it left them there, in
 * the grant space, where they made the agent wait for the application).  Nothing else changes: the lock goes to the same
 * lock manager on the same bytes, between the same owners, with the
 * call's own result and errno.  Files in node or process scope, and
 * calls in other scopes, pass untouched.  A range wholly at or past
 * 2^61 (2 EiB) is passed as it is: nothing in the data space stands for
 * it, and no file system in cluster scope holds such a file
 * (limitations.md).
 */

/* Does cluster scope cover fd's file?  *st is its stat.  A nested call (a
 * signal handler that interrupted the shim, which may hold devs_mtx) asks
 * only the decisions made so far and takes an undecided device as covered:
 * clamping a lock past 2^61 is invisible, a deadlock is not. */
static int lock_file(int fd, struct stat *st, int *flock_posix)
{
	int n;

	*flock_posix = 0;
	if (rs_cfg.scope != RS_SCOPE_CLUSTER || rs_sys(SYS_fstat, fd, st) < 0 ||
	    !S_ISREG(st->st_mode))
		return 0;
	if (rs_enter_slow()) {
		int ok = cluster_dev((uint64_t)st->st_dev, flock_posix);

		rs_leave_slow();
		return ok;
	}
	n = atomic_load_explicit(&ndev, memory_order_acquire);
	for (int i = 0; i < n; i++)
		if (devs[i].dev == (uint64_t)st->st_dev) {
			*flock_posix = devs[i].flock_posix;
			return devs[i].ok;
		}
	return 1;
}

static int getlk_cmd(int cmd)
{
	return cmd == F_GETLK || cmd == F_OFD_GETLK;
}

/* Pre: fl is our copy of a lock call's argument.  Post: 1 when the call
 * must be made with fl (now kept inside the data space, or an F_GETLK
 * whose answer needs rs_lock_unclamp), 0 to make it as it was. */
static int lock_prep(int fd, int cmd, struct flock *fl)
{
	struct stat st;
	int64_t base = 0;
	int flock_posix;

	/* An unlock meets no other owner's lock: made as it is, "to the end"
	 * also drops what the application locked wholly past 2^61 (passed
	 * unclamped), as the real call does (cluster_adv::own_unlock_all). */
	if (fl->l_type == F_UNLCK && !getlk_cmd(cmd))
		return 0;
	if (!lock_file(fd, &st, &flock_posix))
		return 0;
	if (fl->l_whence == SEEK_CUR)
		base = (int64_t)rs_sys(SYS_lseek, fd, 0, SEEK_CUR);
	else if (fl->l_whence == SEEK_END)
		base = (int64_t)st.st_size;
	if (base < 0)
		return 0;
	return rs_lock_clamp(fl, base, (int64_t)RS_CL_EOF) || getlk_cmd(cmd);
}

int rs_cluster_lock_args(int fd, int cmd, const void *arg, struct flock *fl)
{
	int saved = errno, r;

	if (rs_cfg.scope != RS_SCOPE_CLUSTER || !arg)
		return 0;
	r = rs_user_copy(fl, arg, sizeof *fl, 0) == 0 && lock_prep(fd, cmd, fl);
	errno = saved;
	return r;
}

int rs_cluster_lock_end(int cmd, void *arg, struct flock *fl, int r)
{
	int saved = errno;

	if (r < 0 || !getlk_cmd(cmd))
		return r;
	/* fcntl_getlk (fs/locks.c): no conflict changes l_type alone. */
	if (fl->l_type == F_UNLCK) {
		struct flock app;

		if (rs_user_copy(&app, arg, sizeof app, 0) == 0) {
			app.l_type = F_UNLCK;
			if (rs_user_copy(arg, &app, sizeof app, 1) == 0) {
				errno = saved;
				return r;
			}
		}
	} else {
		rs_lock_unclamp(fl, (int64_t)RS_CL_EOF);
		if (rs_user_copy(arg, fl, sizeof *fl, 1) == 0) {
			errno = saved;
			return r;
		}
	}
	errno = EFAULT;
	return -1;
}

/* glibc's lockf (io/lockf64.c), with its fcntl calls made as the
 * application's own fcntl calls are: glibc calls fcntl internally, where
 * no wrapper sees it. */
int rs_cluster_lockf(int fd, int cmd, off_t len)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_CUR, .l_start = 0, .l_len = len };
	int fcmd, r;

	switch (cmd) {
	case F_TEST:
		fl.l_type = F_RDLCK;
		fcmd = F_GETLK;
		break;
	case F_ULOCK:
		fl.l_type = F_UNLCK;
		fcmd = F_SETLK;
		break;
	case F_LOCK:
		fcmd = F_SETLKW;
		break;
	case F_TLOCK:
		fcmd = F_SETLK;
		break;
	default:
		errno = EINVAL;
		return -1;
	}
	{
		int saved = errno;

		lock_prep(fd, fcmd, &fl);
		errno = saved;
	}
	r = rs_real.fcntl(fd, fcmd, &fl);
	if (cmd != F_TEST || r < 0)
		return r;
	if (fl.l_type == F_UNLCK || fl.l_pid == getpid())
		return 0;
	errno = EACCES;
	return -1;
}

/*
 * flock on a cluster file whose file system makes it a whole-file lock of
 * the lock manager (rs_mnt_flock_posix): that lock would reach the
 * agent's spaces.  It is made as what the file system makes of it, a
 * lock owned by the open file description, on the data space: an OFD
 * lock on [0, RS_CL_EOF), which the same lock manager sees, conflicting
 * with the same locks (other descriptions' flocks and everybody's fcntl
 * locks), released by the same last close.  Post: 1 with *cmd and *fl the
 * fcntl call to make instead, or 0: make the real flock (another file, an
 * invalid operation, or a descriptor whose mode the OFD lock would refuse
 * with EBADF where the real flock may succeed: limitations.md).
 */
int rs_cluster_flock_args(int fd, int op, int *cmd, struct flock *fl)
{
	struct stat st;
	int flock_posix, acc, saved = errno, ok;
	short type;

	switch (op & ~LOCK_NB) {
	case LOCK_SH:
		type = F_RDLCK;
		break;
	case LOCK_EX:
		type = F_WRLCK;
		break;
	case LOCK_UN:
		type = F_UNLCK;
		break;
	default:
		return 0;
	}
	if (rs_cfg.scope != RS_SCOPE_CLUSTER)
		return 0;
	ok = lock_file(fd, &st, &flock_posix) && flock_posix;
	acc = ok ? (int)rs_sys(SYS_fcntl, fd, F_GETFL) : -1;
	errno = saved;
	if (acc < 0)
		return 0;
	acc &= O_ACCMODE;
	if ((type == F_RDLCK && acc == O_WRONLY) || (type == F_WRLCK && acc == O_RDONLY))
		return 0;
	*cmd = type == F_UNLCK || (op & LOCK_NB) ? F_OFD_SETLK : F_OFD_SETLKW;
	*fl = (struct flock){ .l_type = type, .l_whence = SEEK_SET, .l_start = 0,
			      .l_len = (off_t)RS_CL_EOF };
	return 1;
}
