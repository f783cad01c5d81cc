/*
 * The node's agent: the owner of its cluster grants (theory in
 * docs/design.md (i) and clusterlock.c).  Its runtime, run by the
 * command's `rangeshim agent` (shim/cli/agent.c, which parses the
 * options and lists a running agent's grants).
 *
 * One agent per user and per node table (RANGESHIM_SHM): the abstract
 * socket name is the singleton lock (a second agent's bind fails and it
 * exits).  Processes in cluster scope start it on first use (cluster.c)
 * and connect once per pin.  For each file the agent keeps its own open
 * file description and runs the cluster grant cache over it; it hands a
 * carrier of that description (make_carrier) to every process that pins,
 * so that the OFD locks live as long as any process of the node might be
 * inside them, even if the agent dies.
 *
 * The agent is also a process of the node table.  Before it gives a
 * cluster grant back (another node asked, or it is idle) it takes an
 * exact EXSH node grant over the range (drain_fn): the node table's own
 * revocation then empties the range of every process's node grant, and
 * waits for calls inside to end.  Only then does it write back, drop the
 * cached pages and unlock; it lets the range go in the node table after.
 *
 * Pre/Post of a pin: between its REPLY (rc 0) and the UNPIN, the cluster
 * grant [gs, ge) named in the reply has a user and cannot be given back;
 * a node grant the process takes meanwhile inside [gs, ge) therefore
 * lies inside a cluster grant that the lock manager granted, and any
 * later give-back drains it first.
 *
 * Each file has a poller thread of its own (file_poller): a give-back
 * waits for the calls inside its range, and must hold up only its file.
 *
 * One table: the socket's name carries the (device, inode) of the node
 * table's file, and every pin the process's (PIN tdev, tino), so that an
 * agent serves only processes whose node grants it drains.  A table
 * removed and made again under the same name is another table, served by
 * another agent; one whose table was removed keeps serving the processes
 * still attached to it (its drains see exactly their node grants) and
 * nobody else, and does not exit idle before they are gone, since no
 * other agent can ever serve them (docs/design.md (i), "One table, one
 * agent").
 *
 * Exits when it has held no file and served no connection for
 * IDLE_EXIT_NS; gives a file's grants back once neither a pin nor a node
 * grant of any process has touched the file for IDLE_FILE_NS.  With all
 * MAX_FILES slots in use, a new file makes room: the least recently
 * pinned file without a pin in progress is forgotten (make_room).
 */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <linux/kcmp.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "clusteragent.h"
#include "fileid.h"
#include "clusterlock.h"
#include "invariant.h"
#include "lockorder.h"
#include "log.h"
#include "nodelock.h"
#include "rangeshim/rangelock.h"
#include "segment.h"

#define MAX_FILES 256
#define IDLE_FILE_NS (2000ULL * 1000000)
#define IDLE_EXIT_NS (3000ULL * 1000000)

struct afile {
	int used;
	uint64_t dev, ino;
	int fd;
	int carrier;            /* what processes keep of fd (make_carrier) */
	int pins;               /* connections using it (files_mu) */
	int lost_drained;
	uint64_t next_poll_ns, idle_since_ns;
	uint32_t drain_idx, drain_gen;
	uint64_t reported_revokes;
	uint64_t desc_id;       /* this agent's pid, and which opening */
	pthread_t poller;       /* polls this file alone (file_poller) */
	int has_poller;         /* 0: tick polls it (no thread could start) */
	int ro;                 /* a read-only description: read locks only */
	int evicting;           /* being forgotten to make room (files_mu) */
	int listers;            /* listings reading it: not to be forgotten (files_mu) */
	uint64_t last_use_ns;   /* last pin in or out (files_mu) */
	_Atomic int stop;       /* tells the file's poller to end */
	struct rs_cl cl;
};

static struct afile files[MAX_FILES];
static pthread_mutex_t files_mu = PTHREAD_MUTEX_INITIALIZER;
static struct rs_nt nt;
static _Atomic int conns;
static _Atomic uint64_t last_activity_ns;
static int verbose;

/* Files as everywhere else (fileid.h).  The path only in the rare error
 * lines: finding it scans our descriptors, and the --foreground lines are
 * printed on the paths that serve pins, where that scan's time changed
 * what the cluster tests' rigs observe. */
#define FILE_NAME(d, i) rs_file_name((char[RS_FILE_NAME_LEN]){ 0 }, RS_FILE_NAME_LEN, (d), (i))
static uint32_t openings;   /* files_mu */
static uint64_t table_dev, table_ino;   /* the node table we serve */
static const char *table_name;

/* files_mu at its level of the lock order (lockorder.h). */
static void files_lock(void)
{
	rs_lk_acquire(RS_LK_AGENT_FILES, &files_mu);
	pthread_mutex_lock(&files_mu);
}

static void files_unlock(void)
{
	rs_lk_release(RS_LK_AGENT_FILES, &files_mu);
	pthread_mutex_unlock(&files_mu);
}

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;

	if (!verbose)
		return;
	va_start(ap, fmt);
	fprintf(stderr, "rangeshim agent[%d]: ", (int)getpid());
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* Cluster data space [0, RS_CL_EOF) to the node table's, where "to the
 * end" is RS_RANGE_EOF. */
static uint64_t node_end(uint64_t e)
{
	return e >= RS_CL_EOF ? RS_RANGE_EOF : e;
}

/* Pre: f->cl.mu held (give_back), so one drain per file at a time.
 * Post: an exact EXSH node grant of ours covers [s, e): no process of
 * the node holds a node grant overlapping it, nor is inside one. */
static void drain(void *arg, uint64_t s, uint64_t e)
{
	struct afile *f = arg;
	struct rs_nt_req q = { .dev = f->dev, .ino = f->ino, .start = s, .end = node_end(e),
			       .mode = RS_G_EXSH, .window = 0, .exact = 1 };
	struct rs_nt_result res;
	char why[256];

	RS_ASSERT(rs_lk_held(RS_LK_CLUSTER, &f->cl));
	while (rs_nt_acquire(&nt, &q, &res, why, sizeof why) < 0) {
		/* Never give a range back undrained: wait, and say why. */
		fprintf(stderr, "rangeshim agent[%d]: cannot drain the node (%s); retrying\n",
			(int)getpid(), why);
		sleep(1);
	}
	f->drain_idx = res.idx;
	f->drain_gen = res.gen;
}

static void undrain(void *arg)
{
	struct afile *f = arg;

	atomic_fetch_sub(&nt.map.seg->grants[f->drain_idx].gw, 1);
	rs_nt_release(&nt, f->drain_idx, f->drain_gen);
}

/* A lost file: every node grant on it goes, so that no call is admitted
 * through a cached one; new pins get -EIO (clusterlock.c). */
static void lost(struct afile *f)
{
	if (f->lost_drained)
		return;
	f->lost_drained = 1;
	fprintf(stderr, "rangeshim agent[%d]: lost the cluster locks of file %s; "
		"calls on it fail with EIO\n", (int)getpid(), FILE_NAME(f->dev, f->ino));
	drain(f, 0, RS_CL_EOF);
	undrain(f);
}

/* Polls one file for other nodes' intent and gives its grants back.  One
 * thread per file, because a give-back drains the node first and waits
 * for calls inside the range: a process stopped inside a call on one
 * file must hold up that file only, not every give-back of the node
 * (cluster_adv::stopped_holder_other_file). */
static void poll_file(struct afile *f)
{
	if (rs_cl_poll(&f->cl) < 0) {
		rs_cl_lock(&f->cl);
		lost(f);
		rs_cl_unlock(&f->cl);
	}
	f->next_poll_ns = now_ns() + rs_cl_poll_interval(&f->cl);
}

static void *file_poller(void *arg)
{
	struct afile *f = arg;

	while (!atomic_load(&f->stop)) {
		uint64_t now = now_ns();

		if (now >= f->next_poll_ns)
			poll_file(f);
		else	/* wake only to poll: at most the 20 ms idle interval */
			usleep((useconds_t)((f->next_poll_ns - now) / 1000 + 1));
	}
	return NULL;
}

/*
 * The lock calls on a read-only description (a file the user may read
 * but not write: cluster_adv::unwritable_file).  Its data-space locks
 * become read locks: F_OFD_SETLK(W) of a write lock would fail with
 * EBADF (and lose the cache), and a GETLK asking about a read lock sees
 * exactly the locks a read lock conflicts with (other nodes' writers).
 * The intent space is left alone: the doorbell's GETLK asks about a
 * write lock to see every reader's intent, and intents are read locks
 * already.  So other nodes' readers share such a file with this node,
 * writers take turns with it, and the agent admits no write on it
 * (serve: -EROFS), since a read lock excludes no other node's reader.
 */
static int ro_lock_fn(int fd, int cmd, struct flock *fl)
{
	if (fl->l_type == F_WRLCK && (uint64_t)fl->l_start < RS_CL_INTENT &&
	    (cmd == F_OFD_SETLK || cmd == F_OFD_SETLKW || cmd == F_OFD_GETLK))
		fl->l_type = F_RDLCK;
	return fcntl(fd, cmd, fl);
}

static int node_busy(const struct afile *f);

/*
 * What a process keeps of our description so that its locks outlive us:
 * not the description itself but a socket whose receive queue holds it
 * in flight, never received.  Closing any fd of a file drops the closing
 * process's own POSIX locks on that file (fs/locks.c: filp_flush calls
 * locks_remove_posix for every close), so a process that kept, and later
 * closed, a copy of ours would lose the application's fcntl locks
 * (SQLite's), as it would if every pin reply brought a copy that the
 * process closed as a duplicate (cluster_adv::own_locks_two_processes).
 * Closing the socket
 * only lets the reference in flight go.  One carrier per description,
 * shared by every process.  Returns the socket, or -1.
 */
static int make_carrier(int fd)
{
	struct rs_ag_msg m = { 0 };
	int sp[2];

	if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sp) < 0)
		return -1;
	if (rs_ag_send(sp[0], &m, fd) < 0) {
		close(sp[0]);
		close(sp[1]);
		return -1;
	}
	close(sp[0]);
	return sp[1];
}

/* The description a process sent back (RS_AG_OLD_FD): the one inside a
 * carrier, peeked (MSG_PEEK installs a new fd and leaves it queued for
 * the carrier's other holders); pfd is closed.  -1 if none. */
static int carried(int pfd)
{
	struct rs_ag_msg m;
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { &m, sizeof m };
	struct msghdr h = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof cbuf };
	int fd = -1;

	if (recvmsg(pfd, &h, MSG_PEEK | MSG_DONTWAIT | MSG_CMSG_CLOEXEC) >= 0)
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
				memcpy(&fd, CMSG_DATA(c), sizeof(int));
	close(pfd);
	return fd;
}

/* The lock manager refuses the file's lock requests for now (clusterlock.c,
 * "Grace periods"): nothing new is granted on it meanwhile; what the node
 * holds stays.  Once per run of refusals. */
static void grace_warn(void *arg)
{
	struct afile *f = arg;
	char link[64], name[PATH_MAX];
	ssize_t n;

	snprintf(link, sizeof link, "/proc/self/fd/%d", f->fd);
	n = readlink(link, name, sizeof name - 1);
	name[n > 0 ? n : 0] = '\0';
	fprintf(stderr, "rangeshim agent[%d]: the lock manager refuses lock requests on file "
		"%s%s%s for now (ENOLCK: a grace period after a server restart?); "
		"waiting it out for up to %llu s before its calls fail with EIO\n", (int)getpid(),
		RS_FILE_ID(f->dev, f->ino), n > 0 ? " " : "", n > 0 ? name : "",
		(unsigned long long)(f->cl.p.grace_max_ns / 1000000000ULL));
}

/* Pre: no pin uses f, and none can start (f->evicting, or files_mu
 * held with f idle).  Post: f's grants are given back, each drained of
 * the node's node grants first (give_back's drain_fn: cached ones are
 * revoked, calls inside are waited for), and its description closed. */
static void forget(struct afile *f)
{
	RS_ASSERT(f->evicting || rs_lk_held(RS_LK_AGENT_FILES, &files_mu));
	if (f->has_poller) {
		atomic_store(&f->stop, 1);
		pthread_join(f->poller, NULL);
	}
	rs_cl_fini(&f->cl);
	close(f->carrier);
	close(f->fd);
}

/*
 * The table is full and a new file needs a slot: forget the least
 * recently pinned file that no pin is using, preferring one on which no
 * process holds a node grant (nothing to drain).  Before, the new file's
 * pin was answered "retry" for ever (cluster_adv::many_files).
 * Pre: files_mu held.  Post: 1 with a slot freed (files_mu was let go
 * meanwhile: the drain waits for calls inside the file, and a call may
 * be pinning another file, which takes files_mu), or 0: every file has a
 * pin in progress or is being forgotten, so the caller waits.
 */
static int make_room(void)
{
	struct afile *v = NULL;
	int v_busy = 1;

	RS_ASSERT(rs_lk_held(RS_LK_AGENT_FILES, &files_mu));
	for (int i = 0; i < MAX_FILES; i++) {
		struct afile *f = &files[i];
		int busy;

		if (!f->used || f->evicting || f->pins || f->listers || !f->has_poller)
			continue;
		busy = node_busy(f);
		if (!v || busy < v_busy || (busy == v_busy && f->last_use_ns < v->last_use_ns)) {
			v = f;
			v_busy = busy;
		}
	}
	if (!v)
		return 0;
	v->evicting = 1;
	files_unlock();
	forget(v);
	say("file %s given back (room for another)", RS_FILE_ID(v->dev, v->ino));
	files_lock();
	v->used = 0;
	v->evicting = 0;
	return 1;
}

/* Find (or, with fd >= 0, open) the file; counts a pin in.  NULL with
 * *err: -ENOENT unknown and no fd, -EPERM it cannot be opened at all,
 * -EAGAIN try again. */
static struct afile *get_file(uint64_t dev, uint64_t ino, int fd, int *err)
{
	struct afile *f = NULL, *free_f = NULL;

	*err = fd >= 0 ? -EAGAIN : -ENOENT;
	files_lock();
again:
	f = NULL;
	free_f = NULL;
	for (int i = 0; i < MAX_FILES; i++) {
		if (files[i].used && files[i].dev == dev && files[i].ino == ino) {
			if (files[i].evicting) {
				/* Its grants are on their way back: wait, then
				 * open it afresh. */
				files_unlock();
				usleep(1000);
				files_lock();
				goto again;
			}
			f = &files[i];
			break;
		}
		if (!files[i].used && !free_f)
			free_f = &files[i];
	}
	if (!f && fd >= 0 && !free_f) {
		if (make_room())
			goto again;
		*err = -EBUSY;
	}
	if (!f && fd >= 0 && free_f) {
		char path[64];
		struct stat st;
		struct rs_cl_params p;
		int own, ro;

		/* A description of our own: reopening through /proc makes a
		 * new one, which is what owns the locks. */
		snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
		own = open(path, O_RDWR | O_CLOEXEC);
		ro = own < 0 && (errno == EACCES || errno == EROFS || errno == EPERM);
		if (ro)	/* read locks need only a readable description */
			own = open(path, O_RDONLY | O_CLOEXEC);
		if (own >= 0 && fstat(own, &st) == 0 && (uint64_t)st.st_dev == dev &&
		    (uint64_t)st.st_ino == ino && (free_f->carrier = make_carrier(own)) >= 0) {
			int carrier = free_f->carrier;

			f = free_f;
			memset(f, 0, sizeof *f);
			f->used = 1;
			f->dev = dev;
			f->ino = ino;
			f->fd = own;
			f->carrier = carrier;
			f->desc_id = (uint64_t)getpid() << 32 | ++openings;
			f->ro = ro;
			rs_cl_params_default(&p);
			if (ro)
				p.lock_fn = ro_lock_fn;
			/* An idle grant is taken within 20 ms of being asked. */
			p.poll_max_ns = 20ULL * 1000000;
			p.drain_fn = drain;
			p.undrain_fn = undrain;
			p.drain_arg = f;
			p.warn_fn = grace_warn;
			rs_cl_init(&f->cl, own, &p);
			f->has_poller = pthread_create(&f->poller, NULL, file_poller, f) == 0;
			say("file %s opened%s", RS_FILE_ID(dev, ino),
			    ro ? " read-only (read locks only)" : "");
		} else if (own >= 0) {
			close(own);
		} else {
			fprintf(stderr, "rangeshim agent[%d]: cannot open file %s (%s): "
				"calls on it fail with EIO\n", (int)getpid(),
				RS_FILE_ID(dev, ino), strerror(errno));
			*err = -EPERM;
		}
	}
	if (f) {
		f->pins++;
		f->last_use_ns = now_ns();
	}
	files_unlock();
	return f;
}

static void put_file(struct afile *f)
{
	files_lock();
	f->pins--;
	f->idle_since_ns = 0;
	f->last_use_ns = now_ns();
	files_unlock();
}



/*
 * A dead agent's description of f, sent back by a process that kept it.
 * Its locks still hold (the node's processes keep it open), and they are
 * this node's: once the node table is drained of f, no call on the node
 * is inside any of them, and unlocking them all through that description
 * is safe.  Without this, our own requests would wait for them for as
 * long as any process keeps the old description.
 */
static void adopt(struct afile *f, int old)
{
	struct flock fl = { .l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };

	rs_cl_lock(&f->cl);
	drain(f, 0, RS_CL_EOF);
	if (fcntl(old, F_OFD_SETLK, &fl) < 0)
		fprintf(stderr, "rangeshim agent[%d]: cannot unlock a dead agent's description: "
			"%s\n", (int)getpid(), strerror(errno));
	undrain(f);
	rs_cl_unlock(&f->cl);
	say("file %s: took over a dead agent's description", RS_FILE_ID(f->dev, f->ino));
}

/* How long one listing waits for the caches of all files together. */
#define LIST_WAIT_NS (500ULL * 1000000)

static int list_msg(struct rs_ag_msg **v, size_t *n, size_t *cap, const struct afile *f)
{
	if (*n == *cap) {
		size_t c = *cap ? 2 * *cap : 64;
		struct rs_ag_msg *t = realloc(*v, c * sizeof *t);

		if (!t)
			return -1;
		*v = t;
		*cap = c;
	}
	memset(&(*v)[*n], 0, sizeof **v);
	(*v)[*n].op = RS_AG_REPLY;
	(*v)[*n].dev = f->dev;
	(*v)[*n].ino = f->ino;
	(*v)[*n].flags = f->ro ? RS_AG_L_RDLCK : 0;
	return 0;
}

/*
 * Every cluster grant of the node, for `rangeshim locks` and `agent
 * --grants`: copy, let go, then send.  files_mu is held only to take the
 * files (listers keeps each from being forgotten meanwhile, without
 * counting as a use); a file's cache is waited for only until a common
 * deadline, since a give-back holds it while it drains the node, which
 * waits for calls inside the range (a stopped process holds it for as
 * long as it is stopped), and such a file is listed as busy; nothing is
 * sent while a lock is held, so a client that stops reading holds up
 * this thread alone.  Before, the listing ran under files_mu and sent
 * under it: a stalled client or a draining file stopped every pin.
 */
static void list_grants(int s)
{
	struct rs_cl_grant g[RS_CL_MAX_GRANTS];
	struct afile *v[MAX_FILES];
	struct rs_ag_msg *out = NULL, r;
	size_t nout = 0, cap = 0;
	struct timespec dl;
	int nv = 0;

	files_lock();
	for (int i = 0; i < MAX_FILES; i++)
		if (files[i].used && !files[i].evicting) {
			files[i].listers++;
			v[nv++] = &files[i];
		}
	files_unlock();
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_nsec += (long)LIST_WAIT_NS;
	dl.tv_sec += dl.tv_nsec / 1000000000L;
	dl.tv_nsec %= 1000000000L;
	for (int k = 0; k < nv; k++) {
		int n = rs_cl_grants_until(&v[k]->cl, g, RS_CL_MAX_GRANTS, &dl);
		uint64_t now = now_ns();

		if (n < 0 && list_msg(&out, &nout, &cap, v[k]) == 0)
			out[nout++].flags |= RS_AG_L_BUSY;
		for (int j = 0; j < n && j < RS_CL_MAX_GRANTS; j++) {
			if (list_msg(&out, &nout, &cap, v[k]) < 0)
				break;
			out[nout].gs = g[j].start;
			out[nout].ge = g[j].end;
			out[nout].locks = g[j].users;
			out[nout].wait_ns = now - g[j].since_ns;
			out[nout].flags |= g[j].wanted ? RS_AG_L_WANTED : 0;
			nout++;
		}
	}
	files_lock();
	for (int k = 0; k < nv; k++)
		v[k]->listers--;
	files_unlock();
	for (size_t k = 0; k < nout; k++)
		if (rs_ag_send(s, &out[k], -1) < 0)
			break;
	free(out);
	memset(&r, 0, sizeof r);
	r.op = RS_AG_REPLY;
	r.rc = 1;
	r.desc_id = (uint64_t)getpid();
	rs_ag_send(s, &r, -1);
}

/* Reads requests on s until a PIN names a file we hold or can open (it may
 * take a second PIN, with the descriptor); answers or drops the others.
 * Returns the file, counted in (get_file), with *mp its PIN and *pfd_oldp
 * the process's old description (-1 if none); NULL: the connection is
 * done. */
static struct afile *serve_get(int s, struct rs_ag_msg *mp, int *pfd_oldp)
{
	int pfd, pfd_old = -1;
	struct rs_ag_msg m, r;
	struct afile *f = NULL;
	int err;

	for (;;) {
		ssize_t got = rs_ag_recv(s, &m, &pfd);

		if (got == (ssize_t)sizeof m && m.op == RS_AG_LIST) {
			list_grants(s);
			return NULL;
		}
		if (got != (ssize_t)sizeof m || m.op != RS_AG_PIN) {
			if (pfd >= 0)
				close(pfd);
			if (pfd_old >= 0)
				close(pfd_old);
			return NULL;
		}
		if (m.tdev != table_dev || m.tino != table_ino) {
			/* Another table's process: our drains would not see
			 * its node grants, so it is never served. */
			if (pfd >= 0)
				close(pfd);
			if (pfd_old >= 0)
				close(pfd_old);
			memset(&r, 0, sizeof r);
			r.op = RS_AG_REPLY;
			r.rc = -ESTALE;
			rs_ag_send(s, &r, -1);
			return NULL;
		}
		/* A carrier: the description it holds serves get_file too. */
		if (pfd >= 0 && (m.flags & RS_AG_OLD_FD))
			pfd = carried(pfd);
		f = get_file(m.dev, m.ino, pfd, &err);
		if (pfd >= 0 && (m.flags & RS_AG_OLD_FD) && pfd_old < 0)
			pfd_old = pfd;	/* kept for adopt() */
		else if (pfd >= 0)
			close(pfd);
		memset(&r, 0, sizeof r);
		r.op = RS_AG_REPLY;
		if (!f) {
			r.rc = (m.flags & RS_AG_HAS_FD) ? err : -ENOENT;
			if (pfd_old >= 0) {
				close(pfd_old);
				pfd_old = -1;
			}
			if (rs_ag_send(s, &r, -1) < 0 || r.rc != -ENOENT)
				return NULL;
			continue;	/* it sends the fd */
		}
		break;
	}
	*mp = m;
	*pfd_oldp = pfd_old;
	return f;
}

/* Whether the old description the process sent (pfd_old, closed here) is
 * ours (RS_AG_CURRENT in r) or a dead agent's, taken over (RS_AG_ADOPTED). */
static void serve_adopt(struct afile *f, const struct rs_ag_msg *m, int pfd_old,
			struct rs_ag_msg *r)
{
	if ((m->flags & RS_AG_OLD_FD) && pfd_old >= 0) {
		/* Ours (the process cannot tell): nothing to take over.
		 * kcmp compares descriptions; where it is missing, only a
		 * description of another agent could be adopted wrongly,
		 * so then nothing is (and limitations.md says so). */
		long same = rs_sys(SYS_kcmp, getpid(), getpid(), KCMP_FILE, f->fd, pfd_old);

		if (same == 0)
			r->flags |= RS_AG_CURRENT;
		else if (same > 0) {
			adopt(f, pfd_old);
			r->flags |= RS_AG_ADOPTED;
		}
	}
	if (pfd_old >= 0)
		close(pfd_old);
}

/*
 * The pin itself: the cluster grant over [m->start, m->end), the REPLY
 * (with the carrier if the process has no copy), held until UNPIN or the
 * connection's end, then released.  Takes f->cl.mu only around reading
 * the counters, never across the acquire or the wait.
 * Pre: f counted in (get_file), f->cl.mu not held.  Post: no grant of
 * this pin held (the caller still puts f).
 */
static void serve_grant(int s, struct afile *f, const struct rs_ag_msg *m, struct rs_ag_msg *r)
{
	uint64_t graces;
	int pfd;

	RS_ASSERT(!rs_lk_held(RS_LK_CLUSTER, &f->cl));
	rs_cl_lock(&f->cl);
	graces = f->cl.st.graces;
	rs_cl_unlock(&f->cl);
	r->rc = rs_cl_acquire_ex(&f->cl, m->start, m->end, &r->gs, &r->ge, &r->locks, &r->wait_ns);
	rs_cl_lock(&f->cl);
	if (f->cl.st.graces != graces && r->rc == 0)
		r->flags |= RS_AG_GRACE;
	r->revokes = f->cl.st.revokes - f->reported_revokes;
	f->reported_revokes = f->cl.st.revokes;
	rs_cl_unlock(&f->cl);
	if (r->rc == -EIO) {
		rs_cl_lock(&f->cl);
		lost(f);
		rs_cl_unlock(&f->cl);
	}
	r->desc_id = f->desc_id;
	/* The carrier goes only to a process without a copy of it: a pin
	 * then needs no descriptor but its connection. */
	if (rs_ag_send(s, r, r->rc == 0 && m->desc_id != f->desc_id ? f->carrier : -1) == 0 &&
	    r->rc == 0) {
		/* Held until UNPIN, or until the process goes away. */
		struct rs_ag_msg u;

		if (rs_ag_recv(s, &u, &pfd) == (ssize_t)sizeof u && pfd >= 0)
			close(pfd);
	}
	if (r->rc == 0)
		rs_cl_release(&f->cl, m->start, m->end);
}

/* One connection: a listing, or one pin from REQUEST to UNPIN. */
static void *serve(void *arg)
{
	int s = (int)(intptr_t)arg, pfd_old = -1;
	struct rs_ag_msg m, r;
	struct afile *f = serve_get(s, &m, &pfd_old);

	if (!f)
		goto out;
	memset(&r, 0, sizeof r);
	r.op = RS_AG_REPLY;
	serve_adopt(f, &m, pfd_old, &r);
	atomic_store(&last_activity_ns, now_ns());
	if ((m.flags & RS_AG_WRITE) && f->ro) {
		/* Only read locks on it: a write would run unexcluded from
		 * other nodes' readers.  The process fails the call. */
		r.rc = -EROFS;
		rs_ag_send(s, &r, -1);
		put_file(f);
		goto out;
	}
	serve_grant(s, f, &m, &r);
	put_file(f);
out:
	close(s);
	atomic_store(&last_activity_ns, now_ns());
	atomic_fetch_sub(&conns, 1);
	return NULL;
}

/* Does any process (other than us) hold or wait for a node grant on f?
 * Under the table lock, which every change of a slot holds. */
static int node_busy(const struct afile *f)
{
	struct rs_segment *seg = nt.map.seg;
	int busy = 0;

	rs_nt_lock_table(&nt);
	for (uint32_t i = 0; i < RS_NGRANT && !busy; i++) {
		const struct rs_seg_grant *g = &seg->grants[i];

		busy = atomic_load(&g->state) != RS_G_FREE && g->owner != nt.me &&
		       g->dev == f->dev && g->ino == f->ino;
	}
	rs_nt_unlock_table(&nt);
	return busy;
}

/*
 * Is our table still the one under its name?  Once a second.  When it
 * was removed (or removed and made again), new processes attach to
 * another table and reach another agent (the name carries the table's
 * identity), and pins of theirs that reached us anyway are refused
 * (serve, -ESTALE).  We keep serving the processes still attached to the
 * old table: they hold node grants there, inside our cluster grants, and
 * our drains see exactly those, so every give-back stays drained.
 * Stopping instead would leave them waiting for ever for pins, or, had
 * we given our grants back, writing under a lock nobody holds.  Said
 * once, in the foreground.
 */
static int table_gone;   /* poller thread only */

static void table_check(uint64_t now, int force)
{
	static uint64_t next;
	char path[300];
	struct stat st, ours;

	if (table_gone || (now < next && !force))
		return;
	next = now + 1000000000ULL;
	if (fstat(nt.map.fd, &ours) < 0)
		return;
	if (ours.st_nlink > 0 && rs_seg_path(table_name, path, sizeof path) == 0 &&
	    stat(path, &st) == 0 && st.st_dev == ours.st_dev && st.st_ino == ours.st_ino)
		return;
	table_gone = 1;
	say("node table '%s' was removed%s: serving only the processes still attached to it, "
	    "until they are gone", table_name[0] ? table_name : "(default)",
	    ours.st_nlink > 0 ? " and made again" : "");
}

/* A removed table's agent is the only one its processes can ever reach
 * (no agent can attach to it by name any more): it stays while any other
 * live process is registered in it, however idle.  Once a second. */
static int table_users(uint64_t now)
{
	static uint64_t next;
	static int users;
	struct rs_segment *seg = nt.map.seg;

	if (now < next)
		return users;
	next = now + 1000000000ULL;
	users = 0;
	for (uint32_t p = 0; p < RS_NPROC && !users; p++)
		users = p != nt.me && atomic_load(&seg->procs[p].state) == RS_PROC_LIVE &&
			rs_seg_alive(&nt.map, p);
	return users;
}

/* Polls the files that have no poller of their own; forgets idle files. */
static void tick(void)
{
	uint64_t now = now_ns();

	for (int i = 0; i < MAX_FILES; i++) {
		struct afile *f = &files[i];
		uint64_t t;
		int poll_it;

		/* used is written under files_mu (get_file, make_room). */
		files_lock();
		poll_it = f->used && !f->evicting && !f->has_poller && now >= f->next_poll_ns;
		files_unlock();
		/* Unlocked: a poll may drain.  Only tick frees a file without
		 * a poller thread (make_room never takes one). */
		if (poll_it)
			poll_file(f);
		files_lock();
		if (!f->used || f->evicting) {
			files_unlock();
			continue;
		}
		/* The time now, not at the tick's start: a poll above, or a
		 * loaded machine, may have held this thread for seconds. */
		t = now_ns();
		if (f->pins || node_busy(f)) {
			f->idle_since_ns = 0;
		} else if (!f->idle_since_ns) {
			f->idle_since_ns = t;
		} else if (t - f->idle_since_ns > IDLE_FILE_NS && !f->listers) {
			/* Nobody on the node uses it: give everything back
			 * (drained, as always) and forget it.  Its poller
			 * cannot be stuck in a drain: no process holds a node
			 * grant on it, and none can get one (pins wait for
			 * files_mu). */
			forget(f);
			f->used = 0;
			say("file %s given back (idle)", RS_FILE_ID(f->dev, f->ino));
		}
		files_unlock();
	}
	table_check(now_ns(), 0);
}

/*
 * Time to exit: no file held, no connection, nothing served for
 * IDLE_EXIT_NS.  Pre: files_mu held, and the caller exits holding it.
 * Every file is opened under files_mu (get_file), so none can be opened
 * between this look and the exit: an agent never exits holding a file,
 * whose cluster locks would stay behind in the carriers of the node's
 * processes (make_carrier) with no agent left to give them back, and
 * other nodes would wait for them for ever.  Everything is read here,
 * not taken from the tick: a tick's count and clock may be seconds old
 * on a loaded machine, and a pin served meanwhile (its file opened in a
 * slot the tick had passed, its connection closed, its activity later
 * than the tick's clock) would look like "no file, idle for ages"
 * (cluster_adv::agent_idle_exit_race).  conns before last_activity_ns: a
 * connection's thread marks the activity before it counts itself out.
 */
static int idle_exit(void)
{
	uint64_t last, now;

	RS_ASSERT(rs_lk_held(RS_LK_AGENT_FILES, &files_mu));
	for (int i = 0; i < MAX_FILES; i++)
		if (files[i].used)
			return 0;
	if (atomic_load(&conns) != 0)
		return 0;
	last = atomic_load(&last_activity_ns);
	now = now_ns();
	if (now <= last || now - last <= IDLE_EXIT_NS)
		return 0;
	/* A table removed in the last second would keep no agent for the
	 * processes still attached to it (their calls fail with EIO), so
	 * look at it now, not a second ago. */
	table_check(now, 1);
	return !(table_gone && table_users(now));
}

static void *poller(void *arg)
{
	(void)arg;
	for (;;) {
		tick();
		files_lock();
		if (idle_exit()) {
			say("idle: exiting");
			exit(0);	/* files_mu held: see idle_exit */
		}
		files_unlock();
		usleep(2000);
	}
	return NULL;
}

/* Every file we serve costs a descriptor, and our starter's soft limit (a
 * shell's `ulimit -n 32`) is no limit of the node's: ours is the hard one. */
static void raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			fprintf(stderr, "rangeshim agent: cannot raise the descriptor limit "
				"to %llu: %s\n", (unsigned long long)rl.rlim_max,
				strerror(errno));
	}
}

/* The table we will serve, made if need be: its identity (table_dev,
 * table_ino) names the socket.  Checked again once registered
 * (table_still_ours).  0, or -1 having said why. */
static int table_identity(const char *shm)
{
	struct rs_seg_map m;
	struct stat st;
	char why[256];

	memset(&m, 0, sizeof m);
	if (rs_seg_attach(&m, shm, 1, why, sizeof why) < 0) {
		fprintf(stderr, "rangeshim agent: cannot attach to the node table: %s\n", why);
		return -1;
	}
	if (fstat(m.fd, &st) < 0) {
		rs_seg_detach(&m);
		return -1;
	}
	table_dev = (uint64_t)st.st_dev;
	table_ino = (uint64_t)st.st_ino;
	rs_seg_detach(&m);
	return 0;
}

/* The listening socket, whose bound name is the singleton lock.  -1 with
 * *rc the exit status: 0 when another agent already serves the table. */
static int agent_socket(const char *shm, int fg, int *rc)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int ls, len;

	len = rs_ag_name(a.sun_path, sizeof a.sun_path, (unsigned)getuid(), shm, table_dev,
			 table_ino);
	ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (ls < 0 || bind(ls, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)len)) < 0) {
		if (errno == EADDRINUSE) {
			if (fg)
				fprintf(stderr, "rangeshim agent: an agent already serves this node table\n");
			*rc = 0;
			return -1;
		}
		fprintf(stderr, "rangeshim agent: socket: %s\n", strerror(errno));
		*rc = 1;
		return -1;
	}
	if (listen(ls, 64) < 0) {
		fprintf(stderr, "rangeshim agent: listen: %s\n", strerror(errno));
		*rc = 1;
		return -1;
	}
	return ls;
}

/* The starter waits for us (the socket is bound already), so the real
 * agent is our child, in a session of its own.  -1: no child. */
static int daemonize(void)
{
	pid_t p = fork();
	int dn;

	if (p < 0)
		return -1;
	if (p > 0)
		_exit(0);
	setsid();
	dn = open("/dev/null", O_RDWR);
	if (dn >= 0) {
		dup2(dn, 0);
		dup2(dn, 1);
		dup2(dn, 2);
		if (dn > 2)
			close(dn);
	}
	return 0;
}

/* Registered in the table, and is it still the one that names our socket
 * (replaced between the two looks: our name is not its name)?  0, or -1
 * having said why. */
static int table_register(const char *shm)
{
	char why[256];
	struct stat st;

	if (rs_nt_register(&nt, shm, why, sizeof why) < 0) {
		fprintf(stderr, "rangeshim agent: cannot attach to the node table: %s\n", why);
		return -1;
	}
	if (fstat(nt.map.fd, &st) < 0 || (uint64_t)st.st_dev != table_dev ||
	    (uint64_t)st.st_ino != table_ino) {
		fprintf(stderr, "rangeshim agent: the node table was replaced while the "
			"agent started; exiting (the next call starts another)\n");
		return -1;
	}
	return 0;
}

/* Serves each connection of our own user's processes in a thread. */
static void accept_loop(int ls)
{
	pthread_t th;

	for (;;) {
		int s = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
		struct ucred cr;
		socklen_t cl = sizeof cr;

		if (s < 0)
			continue;
		/* Only our own user's processes. */
		if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0 || cr.uid != getuid()) {
			close(s);
			continue;
		}
		atomic_fetch_add(&conns, 1);
		if (pthread_create(&th, NULL, serve, (void *)(intptr_t)s) != 0) {
			close(s);
			atomic_fetch_sub(&conns, 1);
			continue;
		}
		pthread_detach(th);
	}
}

int rs_agent_run(const char *shm, int fg)
{
	int ls, rc;
	pthread_t th;

	verbose = fg;
	table_name = shm;
	raise_fd_limit();
	if (table_identity(shm) < 0)
		return 1;
	ls = agent_socket(shm, fg, &rc);
	if (ls < 0)
		return rc;
	if (!fg && daemonize() < 0)
		return 1;
	if (table_register(shm) < 0)
		return 1;
	signal(SIGPIPE, SIG_IGN);
	atomic_store(&last_activity_ns, now_ns());
	say("serving node table '%s'", shm[0] ? shm : "(default)");
	if (pthread_create(&th, NULL, poller, NULL) != 0)
		return 1;
	accept_loop(ls);
	return 0;
}
