/*
 * The node's cluster grant cache for one file (cluster scope).
 *
 * THEORY
 *
 * Interface.  rs_cl_acquire(c, start, end) returns once [start, end) lies
 * inside one cluster grant of this node: a byte range this node holds as
 * an OFD write lock, through the file system's own lock manager, on one
 * private open file description (c->fd), on the range's mirror in the
 * grant space (RS_CL_GRANTS + [start, end)).  rs_cl_release ends that use.
 * rs_cl_poll, called every rs_cl_poll_interval() by whoever runs the
 * cache (the node's agent, agent.c), gives grants back to other nodes
 * that ask.  The module knows nothing about the node table or interposition
 * (like rangelock.c, it is tested on its own); in cluster scope the node
 * table's grants nest inside these, and the process range locks inside
 * those (docs/design.md, "Cluster scope").
 *
 * Why one description per node and file.  An OFD lock belongs to an open
 * file description, everywhere from the local kernel to NFSv4, Lustre,
 * GFS2 plocks and the GlusterFS locks translator.  So one description is
 * one lock owner, and the node, not each process, is the owner: the idea
 * of dlm_controld's plock_ownership (a node owns a resource and serves
 * plocks locally until another node needs it) and of Lustre's node-held
 * DLM extent locks.  Grants are exclusive between nodes (write locks);
 * sharing within the node is the node table's business (EXSH).  Shared
 * cluster grants for readers on several nodes are a later step.
 *
 * Common case.  A covering grant exists: one mutex round trip, no system
 * call.  The first request of a region takes a lock request or two.
 *
 * Expansion, exact where nodes meet.  A miss locks the largest window
 * around [start, end) that nothing conflicts with, as Lustre's server
 * grows extent locks: the window starts as the gap between this node's
 * neighbouring grants (the whole data space for the first request) and
 * is tried with a non-blocking F_OFD_SETLK.  On EAGAIN, F_OFD_GETLK names
 * one conflicting lock and the window is cut just short of it; another
 * node's intent in the window cuts it the same way, so a node never grabs
 * a range someone is queued for.  When the conflict overlaps [start, end)
 * itself the node waits for exactly [start, end).  So grants grow while
 * nothing conflicts and stop where nodes meet (growing into a
 * neighbour's region would make the two ping-pong).  At most 16 cuts,
 * then the exact range.
 *
 * Overlaps with the node's own grants.  A request that one grant covers is
 * a hit.  A request straddling grants (or a grant and a gap) never waits
 * on the lock manager while holding them: it waits until they are idle,
 * gives them back (write-back, invalidate, unlock), and asks afresh.
 * Holding a grant while blocked for another is the hold-and-wait that
 * deadlocks two nodes growing towards each other.  Meanwhile the straddled
 * grants are marked wanted, so after their hold time they admit nobody
 * new and drain.
 *
 * Separate byte spaces.  The lock words never sit on the data bytes: an
 * OFD lock is advisory and excludes only other lock owners, so where it
 * lies matters only for whom it meets.  On the data bytes it met the
 * application's own fcntl locks, and an application that wrote inside
 * its own lock waited for its pin while the agent's SETLKW waited for
 * the application (cluster_adv::own_fcntl_lock).  In the grant space it
 * meets only other nodes' grants: the library keeps every application
 * lock call on a cluster file inside the data space (cluster.c,
 * rs_cluster_lock_args).  Nothing is lost by moving them: the lock
 * managers' cache work on lock and unlock is whole-file (NFS do_setlk
 * and do_unlk flush and invalidate the whole mapping), and the range's
 * own write-back and invalidation are done here, on the data range.
 *
 * Waiting and intent.  fcntl locks have no callbacks, so a waiter first
 * read-locks the mirror of its range in the intent space (RS_CL_INTENT
 * + range), then blocks in F_OFD_SETLKW on its grant-space mirror, then
 * drops the intent.  Holders poll: one F_OFD_GETLK over the whole intent space
 * (the doorbell; read locks there conflict with the write lock GETLK
 * asks about, and a description never sees its own), and only when it
 * rings one GETLK per grant.  Poll interval: poll_min_ns after activity,
 * doubling to poll_max_ns when idle.  Measured on GlusterFS, a GETLK
 * costs about 60 us (docs/benchmarks.md, "Cluster").
 *
 * Giving back.  A grant that another node wants is given back by the
 * poll, or by its last user's release, once it is idle and has been held
 * for the minimum hold time.  Until then it admits users; after it, a
 * wanted grant admits nobody new, so it drains.  Giving back writes the
 * range back (sync_file_range, fdatasync where that is refused), drops
 * its cached pages (POSIX_FADV_DONTNEED) and unlocks it.  After a grant is
 * acquired its new part is invalidated the same way before anyone is
 * admitted: the lock manager of a FUSE file system does not do it
 * (measured: 99 of 100 locked reads stale on stock GlusterFS mounts).
 *
 * Hold time (GFS2 glocks: GL_GLOCK_DFT_HOLD HZ/5; gfs2_glock_update_hold_time
 * adds GL_GLOCK_HOLD_INCR when an acquisition waited over a second, up to
 * GL_GLOCK_MAX_HOLD).  Ours starts at 20 ms, in [5 ms, 200 ms]: it grows by
 * 10 ms after an acquisition that waited over 100 ms (this node is being
 * starved of a contended range, so let it do more per turn), and shrinks by
 * 5 ms at each give-back (it is being asked, so turn faster).  The hold time
 * applies only to other nodes' intent, never to this node's own requests.
 *
 * Fairness.  Between nodes, the hold time bounds how long a holder keeps a
 * wanted range, and a node that waited long gets a longer turn.  Lock
 * managers that grant blocked requests in order (lockd, GlusterFS's locks
 * translator) hand a given-back range to the waiter; a local kernel only
 * wakes its SETLKW waiters, and the node that gave the range back, still
 * running, takes it again before the woken waiter runs (simulated nodes
 * on tmpfs: a reader gets about 1 read a second against a writer in a
 * loop, clusterlock::torn).  So for one hold time after giving back a wanted
 * grant, a node defers to other nodes' intent: an acquisition that finds
 * intent over its range (one F_OFD_GETLK) sleeps poll_min_ns and looks
 * again, until the intent is gone or the time is up (courtesy()).  Within the node, requests that find a
 * pending or draining grant wait on c->cv and try again.
 *
 * Grace periods.  After a server restart the lock manager grants only
 * reclaims for a while (90 s by default for lockd and nfsd); the client
 * kernel reclaims the node's held locks by itself.  What fcntl shows
 * during it (Linux fs/lockd/clntproc.c, fs/nfs/nfs4proc.c): NLM's
 * nlmclnt_call and NFSv4's nfs4_handle_exception retry a request refused
 * with DENIED_GRACE_PERIOD / NFS4ERR_GRACE inside the kernel (every 5 s,
 * or backing off from 0.1 to 15 s), so SETLK, SETLKW and GETLK all just
 * block until the grace period ends; what escapes is ENOLCK (lockd maps
 * DENIED_GRACE_PERIOD and DENIED_NOLOCKS, "no locks left now", to it).
 * A request refused with ENOLCK has changed nothing the node holds, so it
 * is transient: acquisitions back off (0.1 s doubling to 2 s) and retry,
 * a poll that meets it skips that poll, and p.warn_fn says so once per
 * run of refusals.  Only when the refusals last longer than grace_max_ns
 * (150 s by default: the default grace period and then some) is the
 * cache lost, as below.  An unlock that fails is never transient: the
 * node can no longer say what it holds.
 *
 * Failures fail safe (never run without exclusion).  Any error from a lock call
 * other than EINTR, the EAGAIN of a non-blocking try and a request's
 * ENOLCK within a grace period (EIO, ESTALE, EBADF, a failed unlock,
 * ENOLCK beyond it, ...) marks the whole cache lost: which locks the
 * server still has is unknown.  From then on acquire returns -EIO, never an
 * unprotected success; rs_cl_check() tells calls already inside a grant
 * to fail with EIO.  Recovery is a new description and a new cache.
 * Crashes: if the process holding the description dies, the kernel drops
 * its locks; a node crash is the lock manager's to resolve (leases,
 * eviction, fencing).  This module adds no lease of its own.
 *
 * Locking.  c->mu guards the table; it is held across the poll's GETLKs and
 * give-backs (round trips of the file system) but never across a blocking
 * SETLKW, which runs with the range marked PENDING.
 */
#include "clusterlock.h"

#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lockorder.h"

#define MS 1000000ULL
#define HOLD_INCR_NS (10 * MS)
#define HOLD_DECR_NS (5 * MS)
#define LONG_WAIT_NS (100 * MS)
#define MAX_CUTS 16

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

void rs_cl_params_default(struct rs_cl_params *p)
{
	*p = (struct rs_cl_params){
		.hold_ns = 20 * MS, .hold_min_ns = 5 * MS, .hold_max_ns = 200 * MS,
		.poll_min_ns = 5 * MS, .poll_max_ns = 50 * MS, .lock_fn = NULL,
		.grace_max_ns = 150000 * MS,
	};
}

static int sys_fcntl(int fd, int cmd, struct flock *fl)
{
	return fcntl(fd, cmd, fl);
}

/*
 * One lock call on the mirror of [start, end) (a data-space range) in the
 * space at base: RS_CL_GRANTS or RS_CL_INTENT.
 * Post: 0, or -errno; on F_OFD_GETLK, *type and [*cs, *ce) name the
 * conflicting lock (type F_UNLCK: none), mapped back to the data space
 * and cut to it: a lock reaching in from below (a process without the
 * shim locking "to the end of the file") starts at 0, one reaching past
 * the space ends at RS_CL_EOF.
 */
static int lk(struct rs_cl *c, int cmd, short type, uint64_t base, uint64_t start, uint64_t end,
	      short *ctype, uint64_t *cs, uint64_t *ce)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET,
			    .l_start = (off_t)(base + start), .l_len = (off_t)(end - start) };
	int rc;

	do
		rc = c->p.lock_fn(c->fd, cmd, &fl);
	while (rc < 0 && errno == EINTR);
	if (rc < 0)
		return -errno;
	if (cmd == F_OFD_GETLK) {
		uint64_t a = (uint64_t)fl.l_start;
		uint64_t b = fl.l_len == 0 ? UINT64_MAX : a + (uint64_t)fl.l_len;

		*ctype = fl.l_type;
		*cs = a < base ? 0 : a - base;
		*ce = b >= base + RS_CL_EOF ? RS_CL_EOF : b - base;
	}
	return 0;
}

/* c->mu, with the lock order checks of debug builds (lockorder.h): held
 * across the drain of the node (drain_fn), which takes node grants. */
void rs_cl_lock(struct rs_cl *c)
{
	rs_lk_acquire(RS_LK_CLUSTER, c);
	pthread_mutex_lock(&c->mu);
}

void rs_cl_unlock(struct rs_cl *c)
{
	rs_lk_release(RS_LK_CLUSTER, c);
	pthread_mutex_unlock(&c->mu);
}

/*
 * A request was refused with rc (-errno).  Pre: c->mu held.  Post: true
 * if that is a grace period's refusal to wait out (-ENOLCK, and the run
 * of them has lasted at most grace_max_ns; the first of a run is said
 * through warn_fn); false: a real failure.
 */
static bool in_grace(struct rs_cl *c, int rc)
{
	uint64_t now = now_ns();

	RS_ASSERT(rs_lk_held(RS_LK_CLUSTER, c));

	if (rc != -ENOLCK)
		return false;
	if (!c->grace_since) {
		c->grace_since = now;
		c->grace_ns = 100 * MS;
		c->st.graces++;
		if (c->p.warn_fn)
			c->p.warn_fn(c->p.drain_arg);
	}
	return now - c->grace_since < c->p.grace_max_ns;
}

/* Pre: c->mu held.  Post: every grant is unusable; waiters are woken. */
static void set_lost(struct rs_cl *c, int err)
{
	RS_ASSERT(rs_lk_held(RS_LK_CLUSTER, c));
	if (!c->lost)
		c->lost = err ? err : EIO;
	pthread_cond_broadcast(&c->cv);
}

int rs_cl_init(struct rs_cl *c, int fd, const struct rs_cl_params *p)
{
	memset(c, 0, sizeof *c);
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	c->fd = fd;
	if (p)
		c->p = *p;
	else
		rs_cl_params_default(&c->p);
	if (!c->p.lock_fn)
		c->p.lock_fn = sys_fcntl;
	if (c->p.hold_min_ns > c->p.hold_max_ns)
		c->p.hold_min_ns = c->p.hold_max_ns;
	c->hold_ns = c->p.hold_ns < c->p.hold_min_ns ? c->p.hold_min_ns :
		     c->p.hold_ns > c->p.hold_max_ns ? c->p.hold_max_ns : c->p.hold_ns;
	c->poll_ns = c->p.poll_min_ns;
	return 0;
}

static bool overlaps(const struct rs_cl_grant *g, uint64_t s, uint64_t e)
{
	return g->state != RS_CL_FREE && g->start < e && s < g->end;
}

static bool draining(const struct rs_cl *c, const struct rs_cl_grant *g, uint64_t now)
{
	return g->wanted && now - g->since_ns >= c->hold_ns;
}

/* Drop [s, e) from this node's page cache; len 0 is "to the end". */
static void invalidate(struct rs_cl *c, uint64_t s, uint64_t e)
{
	posix_fadvise(c->fd, (off_t)s, e >= RS_CL_EOF ? 0 : (off_t)(e - s),
		      POSIX_FADV_DONTNEED);
}

/*
 * Pre: c->mu held; g HELD with no users.
 * Post: g's data is written back and out of the cache, its lock released,
 * its slot free; or the cache is lost.  Returns 0 or -EIO.
 */
static int give_back(struct rs_cl *c, struct rs_cl_grant *g)
{
	uint64_t len = g->end >= RS_CL_EOF ? 0 : g->end - g->start;
	short t;
	uint64_t a, b;
	int rc;

	RS_ASSERT(rs_lk_held(RS_LK_CLUSTER, c));
	RS_ASSERT(g->state == RS_CL_HELD && g->users == 0);

	/* Cluster scope: no node grant inside survives this (the drain
	 * waits for calls inside to end), so nothing of this node touches
	 * the range once the lock manager gives it to another node. */
	if (c->p.drain_fn)
		c->p.drain_fn(c->p.drain_arg, g->start, g->end);
	if (sync_file_range(c->fd, (off_t)g->start, (off_t)len,
			    SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
			    SYNC_FILE_RANGE_WAIT_AFTER) < 0 &&
	    (errno == EINVAL || errno == ESPIPE || errno == ENOSYS))
		fdatasync(c->fd);
	invalidate(c, g->start, g->end);
	rc = lk(c, F_OFD_SETLK, F_UNLCK, RS_CL_GRANTS, g->start, g->end, &t, &a, &b);
	if (g->wanted)
		c->courtesy_until = now_ns() + c->hold_ns;
	g->state = RS_CL_FREE;
	if (c->p.undrain_fn)
		c->p.undrain_fn(c->p.drain_arg);
	pthread_cond_broadcast(&c->cv);
	if (rc) {
		set_lost(c, -rc);
		return -EIO;
	}
	return 0;
}

static struct rs_cl_grant *free_slot(struct rs_cl *c)
{
	struct rs_cl_grant *g, *idle = NULL;

	for (g = c->g; g < c->g + RS_CL_MAX_GRANTS; g++) {
		if (g->state == RS_CL_FREE)
			return g;
		if (g->state == RS_CL_HELD && !g->users &&
		    (!idle || g->since_ns < idle->since_ns))
			idle = g;
	}
	/* Table full: the oldest idle grant goes back voluntarily. */
	if (idle && give_back(c, idle) == 0)
		return idle;
	return NULL;
}

/*
 * Cut the window [*lo, *hi) around [s, e) short of a conflict [a, b).
 * Returns false when the conflict overlaps [s, e): wait for it.
 */
static bool cut(uint64_t s, uint64_t e, uint64_t a, uint64_t b, uint64_t *lo, uint64_t *hi)
{
	if (b <= s) {
		if (b > *lo)
			*lo = b;
		return true;
	}
	if (a >= e) {
		if (a < *hi)
			*hi = a;
		return true;
	}
	return false;
}

/*
 * Fairness (see the theory): wait while another node's intent lies over
 * [s, e), for as long as the courtesy window after our last give-back of
 * a wanted grant lasts (until; 0 when there was none: no GETLK at all).
 * Pre: c->mu not held.  Post: the window is over
 * or nobody else is waiting for [s, e) now; a failed GETLK ends the wait
 * (the acquisition's own lock calls then meet the failure).
 */
static void courtesy(struct rs_cl *c, uint64_t s, uint64_t e, uint64_t until)
{
	struct timespec ts = { (time_t)(c->p.poll_min_ns / 1000000000ULL),
				(long)(c->p.poll_min_ns % 1000000000ULL) };
	short t;
	uint64_t a, b;

	RS_ASSERT(!rs_lk_held(RS_LK_CLUSTER, c));

	while (now_ns() < until &&
	       lk(c, F_OFD_GETLK, F_WRLCK, RS_CL_INTENT, s, e, &t, &a, &b) == 0 && t != F_UNLCK)
		nanosleep(&ts, NULL);
}

/*
 * Pre: c->mu not held; [s, e) inside [*lo, *hi), which holds no grant of
 * this node.  Post: 1 with [*lo, *hi) locked, 0 when [s, e) itself is
 * contended (nothing locked), or -errno.
 */
static int try_expand(struct rs_cl *c, uint64_t s, uint64_t e, uint64_t *lo, uint64_t *hi,
		      uint64_t *locks, uint64_t *polls)
{
	int i, rc;

	RS_ASSERT(!rs_lk_held(RS_LK_CLUSTER, c));

	for (i = 0; i < MAX_CUTS; i++) {
		short t;
		uint64_t a, b;

		if (*lo < s || *hi > e) {
			/* Someone queued inside the window keeps it. */
			(*polls)++;
			rc = lk(c, F_OFD_GETLK, F_WRLCK, RS_CL_INTENT, *lo, *hi, &t, &a, &b);
			if (rc)
				return rc;
			if (t != F_UNLCK) {
				if (!cut(s, e, a, b, lo, hi))
					return 0;
				continue;
			}
		}
		(*locks)++;
		rc = lk(c, F_OFD_SETLK, F_WRLCK, RS_CL_GRANTS, *lo, *hi, &t, &a, &b);
		if (rc == 0)
			return 1;
		if (rc != -EAGAIN && rc != -EACCES)
			return rc;
		rc = lk(c, F_OFD_GETLK, F_WRLCK, RS_CL_GRANTS, *lo, *hi, &t, &a, &b);
		if (rc)
			return rc;
		if (t != F_UNLCK && !cut(s, e, a, b, lo, hi))
			return 0;
	}
	return 0;
}

/*
 * Pre: c->mu not held; nothing of [s, e) is this node's.
 * Post: 0 with [s, e) write-locked, or -errno.  Announces itself in the
 * intent space for as long as it waits.
 *
 * A write lock over the intent space is a whole-file lock of a process
 * without the shim (the library keeps the application's below
 * RS_CL_EOF): the intent read lock is refused while it lasts.  It rings
 * every holder's doorbell as intent would, so that is no reason to call
 * the cache lost (which would fail this node's calls with EIO); but the
 * waiter must not block without intent either.  Once the foreign lock
 * goes, a node that then holds the range and keeps using it is told by
 * nothing to give it back, and a SETLKW made without intent would wait
 * for ever behind it (clusterlock::foreign_lock_then_busy_node).  So
 * without intent the waiter only tries the range, and asks for its
 * intent again one short poll interval later.
 */
static int wait_exact(struct rs_cl *c, uint64_t s, uint64_t e, uint64_t *locks)
{
	short t;
	uint64_t a, b;
	int rc, rc2;

	RS_ASSERT(!rs_lk_held(RS_LK_CLUSTER, c));

	for (;;) {
		struct timespec ts = { (time_t)(c->p.poll_min_ns / 1000000000ULL),
					(long)(c->p.poll_min_ns % 1000000000ULL) };

		rc = lk(c, F_OFD_SETLK, F_RDLCK, RS_CL_INTENT, s, e, &t, &a, &b);
		if (rc != -EAGAIN && rc != -EACCES)
			break;
		(*locks)++;
		rc = lk(c, F_OFD_SETLK, F_WRLCK, RS_CL_GRANTS, s, e, &t, &a, &b);
		if (rc != -EAGAIN && rc != -EACCES)
			return rc;
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
	if (rc)
		return rc;
	(*locks)++;
	rc2 = lk(c, F_OFD_SETLKW, F_WRLCK, RS_CL_GRANTS, s, e, &t, &a, &b);
	rc = lk(c, F_OFD_SETLK, F_UNLCK, RS_CL_INTENT, s, e, &t, &a, &b);
	/* A failed unlock is never a grace period's to wait out. */
	if (rc)
		return rc == -ENOLCK ? -EIO : rc;
	return rc2;
}

int rs_cl_acquire(struct rs_cl *c, uint64_t s, uint64_t e)
{
	return rs_cl_acquire_ex(c, s, e, NULL, NULL, NULL, NULL);
}

/* The acquisition's report to the caller: any out pointer may be NULL. */
static void acquired(uint64_t *gs, uint64_t *ge, uint64_t *locks_out, uint64_t *wait_out,
		     uint64_t lo, uint64_t hi, uint64_t locks, uint64_t waited)
{
	if (gs)
		*gs = lo;
	if (ge)
		*ge = hi;
	if (locks_out)
		*locks_out = locks;
	if (wait_out)
		*wait_out = waited;
}

/*
 * Either a grant of this node already covers [s, e), and we join it as
 * one more user, or every grant overlapping [s, e) is given back first
 * (waiting for those pending or in use), so that a new one can be asked.
 * Pre: c->mu held.  Post: c->mu held; 1 with the covering grant's users
 * counted up and its bounds in [*gs, *ge); 0 with no grant of this node
 * overlapping [s, e); or -EIO with the cache lost.
 */
static int join_or_clear(struct rs_cl *c, uint64_t s, uint64_t e, uint64_t *gs, uint64_t *ge)
{
	struct rs_cl_grant *g;
	uint64_t now;

	RS_ASSERT(rs_lk_held(RS_LK_CLUSTER, c));

	for (;;) {
		bool busy = false, gave = false;

		if (c->lost)
			return -EIO;
		now = now_ns();
		for (g = c->g; g < c->g + RS_CL_MAX_GRANTS; g++) {
			if (g->state == RS_CL_HELD && g->start <= s && e <= g->end &&
			    !draining(c, g, now)) {
				g->users++;
				*gs = g->start;
				*ge = g->end;
				return 1;
			}
		}
		for (g = c->g; g < c->g + RS_CL_MAX_GRANTS; g++) {
			if (!overlaps(g, s, e))
				continue;
			if (g->state == RS_CL_PENDING || g->users) {
				/* Straddled grants drain once held long enough. */
				if (g->state == RS_CL_HELD)
					g->wanted = true;
				busy = true;
			} else if (give_back(c, g) < 0) {
				break;
			} else {
				gave = true;
			}
		}
		if (busy)
			pthread_cond_wait(&c->cv, &c->mu);
		else if (!gave)
			break;
	}
	return c->lost ? -EIO : 0;
}

/* The window: the gap between this node's neighbouring grants around
 * [s, e), which a new grant may take.  Pre: c->mu held. */
static void window(const struct rs_cl *c, uint64_t s, uint64_t e, uint64_t *lo, uint64_t *hi)
{
	const struct rs_cl_grant *g;

	RS_ASSERT(rs_lk_held(RS_LK_CLUSTER, c));

	*lo = 0;
	*hi = RS_CL_EOF;
	for (g = c->g; g < c->g + RS_CL_MAX_GRANTS; g++) {
		if (g->state == RS_CL_FREE)
			continue;
		if (g->end <= s && g->end > *lo)
			*lo = g->end;
		if (g->start >= e && g->start < *hi)
			*hi = g->start;
	}
}

/*
 * The lock manager's part: as much of the window [*lo, *hi) as is free,
 * else [s, e) alone, waited for; a refusal in a grace period is asked
 * again after a back-off, from the whole window.  Counts what it costs in
 * *locks, *polls, *waited.
 * Pre: c->mu not held; this node's PENDING grant reserves [*lo, *hi).
 * Post: c->mu not held; >= 0 with [*lo, *hi) (inside the window, around
 * [s, e)) write-locked, or -errno.
 */
static int lock_window(struct rs_cl *c, uint64_t s, uint64_t e, uint64_t *lo, uint64_t *hi,
		       uint64_t *locks, uint64_t *polls, uint64_t *waited)
{
	uint64_t t0;
	int rc;

	RS_ASSERT(!rs_lk_held(RS_LK_CLUSTER, c));

	for (uint64_t wlo = *lo, whi = *hi;;) {
		uint64_t pause;

		rc = try_expand(c, s, e, lo, hi, locks, polls);
		if (rc == 0) {
			t0 = now_ns();
			*lo = s;
			*hi = e;
			rc = wait_exact(c, s, e, locks);
			*waited += now_ns() - t0;
		}
		if (rc != -ENOLCK)
			break;
		/* Refused for now (a grace period?): back off, ask again. */
		rs_cl_lock(c);
		if (c->lost || !in_grace(c, rc)) {
			rs_cl_unlock(c);
			break;
		}
		pause = c->grace_ns;
		c->grace_ns = pause * 2 > 2000 * MS ? 2000 * MS : pause * 2;
		rs_cl_unlock(c);
		usleep((useconds_t)(pause / 1000));
		*lo = wlo;
		*hi = whi;
	}
	return rc;
}

/*
 * The outcome of lock_window (rc) in the cache: the pending grant p
 * becomes the held grant [lo, hi) with us as its one user, or on failure
 * is freed and the cache lost; the counters are added to the stats.
 * Pre: c->mu not held; p this acquisition's PENDING grant.  Post: c->mu
 * not held; 0 with p HELD, or -EIO.
 */
static int admit(struct rs_cl *c, struct rs_cl_grant *p, int rc, uint64_t lo, uint64_t hi,
		 uint64_t locks, uint64_t polls, uint64_t waited)
{
	RS_ASSERT(!rs_lk_held(RS_LK_CLUSTER, c));
	rs_cl_lock(c);
	c->st.locks += locks;
	c->st.polls += polls;
	c->st.wait_ns += waited;
	if (rc < 0) {
		p->state = RS_CL_FREE;
		set_lost(c, -rc);
		rs_cl_unlock(c);
		return -EIO;
	}
	c->grace_since = 0;
	/* Invalidate before admitting anyone: another node wrote here. */
	invalidate(c, lo, hi);
	*p = (struct rs_cl_grant){ .start = lo, .end = hi, .since_ns = now_ns(),
				   .users = 1, .state = RS_CL_HELD };
	if (waited > LONG_WAIT_NS)
		c->hold_ns = c->hold_ns + HOLD_INCR_NS > c->p.hold_max_ns ?
			     c->p.hold_max_ns : c->hold_ns + HOLD_INCR_NS;
	c->poll_ns = c->p.poll_min_ns;
	pthread_cond_broadcast(&c->cv);
	rs_cl_unlock(c);
	return 0;
}

int rs_cl_acquire_ex(struct rs_cl *c, uint64_t s, uint64_t e, uint64_t *gs, uint64_t *ge,
		     uint64_t *locks_out, uint64_t *wait_out)
{
	struct rs_cl_grant *p;
	uint64_t lo, hi, until, waited = 0, locks = 0, polls = 0;
	int rc;

	if (s >= e)
		return -EINVAL;
	if (e > RS_CL_EOF)
		return -EOVERFLOW;
	rs_cl_lock(c);
	rc = join_or_clear(c, s, e, &lo, &hi);
	if (rc != 0) {
		rs_cl_unlock(c);
		if (rc < 0)
			return rc;
		acquired(gs, ge, locks_out, wait_out, lo, hi, 0, 0);
		return 0;
	}
	window(c, s, e, &lo, &hi);
	p = free_slot(c);
	if (!p) {
		rs_cl_unlock(c);
		return c->lost ? -EIO : -ENOLCK;
	}
	/* A pending grant reserves its whole window: two requests of this
	 * node expanding into one region would both succeed (one owner), and
	 * giving one back would then unlock the other. */
	*p = (struct rs_cl_grant){ .start = lo, .end = hi, .state = RS_CL_PENDING };
	until = c->courtesy_until;
	rs_cl_unlock(c);
	courtesy(c, s, e, until);

	rc = lock_window(c, s, e, &lo, &hi, &locks, &polls, &waited);
	rc = admit(c, p, rc, lo, hi, locks, polls, waited);
	if (rc < 0)
		return rc;
	acquired(gs, ge, locks_out, wait_out, lo, hi, locks, waited);
	return 0;
}

static void shorten_hold(struct rs_cl *c)
{
	c->hold_ns = c->hold_ns < c->p.hold_min_ns + HOLD_DECR_NS ?
		     c->p.hold_min_ns : c->hold_ns - HOLD_DECR_NS;
}

void rs_cl_release(struct rs_cl *c, uint64_t s, uint64_t e)
{
	struct rs_cl_grant *g;

	rs_cl_lock(c);
	for (g = c->g; g < c->g + RS_CL_MAX_GRANTS; g++) {
		if (g->state != RS_CL_HELD || !g->users || g->start > s || e > g->end)
			continue;
		if (--g->users == 0) {
			if (draining(c, g, now_ns()) && !c->lost && give_back(c, g) == 0) {
				c->st.revokes++;
				shorten_hold(c);
			}
			pthread_cond_broadcast(&c->cv);
		}
		break;
	}
	rs_cl_unlock(c);
}

int rs_cl_poll(struct rs_cl *c)
{
	struct rs_cl_grant *g;
	short t;
	uint64_t a, b, now;
	int rc, gave = 0, held = 0;

	rs_cl_lock(c);
	if (c->lost) {
		rs_cl_unlock(c);
		return -EIO;
	}
	for (g = c->g; g < c->g + RS_CL_MAX_GRANTS; g++)
		held += g->state == RS_CL_HELD;
	if (!held)
		goto idle;
	/* The doorbell: is anybody waiting for anything in this file? */
	c->st.polls++;
	rc = lk(c, F_OFD_GETLK, F_WRLCK, RS_CL_INTENT, 0, RS_CL_EOF, &t, &a, &b);
	if (rc && in_grace(c, rc))
		goto idle;	/* ask again at the next poll */
	if (rc)
		goto lost;
	c->grace_since = 0;
	if (t == F_UNLCK)
		goto idle;
	now = now_ns();
	for (g = c->g; g < c->g + RS_CL_MAX_GRANTS; g++) {
		if (g->state != RS_CL_HELD)
			continue;
		if (!g->wanted) {
			c->st.polls++;
			rc = lk(c, F_OFD_GETLK, F_WRLCK, RS_CL_INTENT, g->start, g->end,
				&t, &a, &b);
			if (rc && in_grace(c, rc))
				continue;
			if (rc)
				goto lost;
			g->wanted = t != F_UNLCK;
		}
		if (g->wanted && !g->users && draining(c, g, now)) {
			if (give_back(c, g) < 0) {
				rs_cl_unlock(c);
				return -EIO;
			}
			c->st.revokes++;
			shorten_hold(c);
			gave++;
		}
	}
	c->poll_ns = c->p.poll_min_ns;
	rs_cl_unlock(c);
	return gave;
idle:
	c->poll_ns = c->poll_ns * 2 > c->p.poll_max_ns ? c->p.poll_max_ns : c->poll_ns * 2;
	rs_cl_unlock(c);
	return 0;
lost:
	set_lost(c, -rc);
	rs_cl_unlock(c);
	return -EIO;
}

uint64_t rs_cl_poll_interval(struct rs_cl *c)
{
	uint64_t v;

	rs_cl_lock(c);
	v = c->poll_ns;
	rs_cl_unlock(c);
	return v;
}

/* Pre: c->mu held (and let go here). */
static int copy_grants(struct rs_cl *c, struct rs_cl_grant *out, int max)
{
	int n = 0;
	struct rs_cl_grant *g;

	RS_ASSERT(rs_lk_held(RS_LK_CLUSTER, c));

	for (g = c->g; g < c->g + RS_CL_MAX_GRANTS; g++) {
		if (g->state != RS_CL_HELD)
			continue;
		if (n < max)
			out[n] = *g;
		n++;
	}
	rs_cl_unlock(c);
	return n;
}

int rs_cl_grants(struct rs_cl *c, struct rs_cl_grant *out, int max)
{
	rs_cl_lock(c);
	return copy_grants(c, out, max);
}

int rs_cl_grants_until(struct rs_cl *c, struct rs_cl_grant *out, int max,
		       const struct timespec *deadline)
{
	int rc;

	rs_lk_acquire(RS_LK_CLUSTER, c);
	while ((rc = pthread_mutex_timedlock(&c->mu, deadline)) == EINTR)
		;
	if (rc) {
		rs_lk_release(RS_LK_CLUSTER, c);
		return -EBUSY;
	}
	return copy_grants(c, out, max);
}

int rs_cl_check(struct rs_cl *c)
{
	int lost;

	rs_cl_lock(c);
	lost = c->lost;
	rs_cl_unlock(c);
	return lost ? -EIO : 0;
}

void rs_cl_fini(struct rs_cl *c)
{
	struct rs_cl_grant *g;

	rs_cl_lock(c);
	for (g = c->g; g < c->g + RS_CL_MAX_GRANTS; g++)
		if (g->state == RS_CL_HELD)
			give_back(c, g);
	rs_cl_unlock(c);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
}
