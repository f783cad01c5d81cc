/*
 * Criterion suite for the node lock table (shim/node/nodelock.c, shim/node/segment.c),
 * linked directly: no interposition.
 *
 * Several "processes" are simulated with fork(): each agent is a child of
 * the test worker that registers on the same segment itself and then obeys
 * commands sent over a pipe (acquire, enter/leave a grant, release, lock the
 * table lock, die...), answering each with a reply.  The test process only
 * maps the segment (rs_seg_attach, no slot) to look at the table, or to play
 * the part of a corrupting writer.  An agent asked to acquire a range that
 * must wait simply does not answer: the test polls its reply pipe with a
 * timeout to tell "waiting" from "granted".
 *
 *  create_mode       register creates the segment: regular file, mode 0600,
 *                    our uid, the layout's size; slots are LIVE with our pid,
 *                    FREE again after unregister.  Also under umask 0277.
 *  disjoint          disjoint requests are granted at once, expanded to the
 *                    4 MiB window and clipped at others' grants, never
 *                    overlapping them; nobody is revoked or waits.
 *  busy_waits        an overlapping EXSH request waits while the holder's
 *                    grant has users > 0 (marked wanted, a WAIT entry queued)
 *                    and is granted once the holder drains and releases.
 *  idle_revoked      an idle grant of another process is revoked directly:
 *                    no wait, the holder's generation moves on.
 *  shared_modes      SHARED+SHARED coexist (no revoke); EXSH waits for busy
 *                    SHARED holders and SHARED for a busy EXSH holder.
 *  sigkill_busy      a holder SIGKILLed with a busy grant is reclaimed and
 *                    the waiter is granted within 2 s of the kill.
 *  dead_in_lock      a process killed (by us, or by itself) while holding the
 *                    table lock (taken as nodelock.c takes it): the next
 *                    acquire works within 2 s, also when the dead one held a
 *                    busy grant, and the lock is free afterwards.
 *  full_slots_wait   every process slot held by a live process: a
 *                    registrant waits (one line says why), never returns
 *                    without a slot, and takes the first one freed.
 *  stopped_*         a live holder of the table lock, or a registrant,
 *                    stopped with SIGSTOP: nobody takes the lock or gets a
 *                    grant meanwhile, the waiter names it, all goes on once
 *                    it resumes.
 *  malformed_user_count  garbage counts in free slots and in a held grant:
 *                    a busy grant is never revoked, the garbage one blocks
 *                    its range only, its owner's death frees it.
 *  scan_bounds_hide_nothing  a file chain that hides a busy grant is
 *                    noticed and rebuilt.
 *  chain_garbage     a cycle, a garbage count and a link out of range in
 *                    the chains: rebuilt, the busy grant still excludes.
 *  reclaimed_slot_reusable  after a busy holder is reclaimed, the slots the
 *                    table hands out next carry no stale user count: idle
 *                    grants in them are revoked at once.
 *  unregister_*      unregister frees idle grants and the slot at once; a
 *                    grant with a call still inside stays (nobody else may
 *                    get the range) until the process dies, then is
 *                    reclaimed within 2 s.
 *  registration_looks_*  with 300 slots attached, 5 of them dead, a
 *                    registrant makes at most 16 liveness looks (and one
 *                    per suspect), and the dead are reclaimed within 19
 *                    registrations (control: a table of 40 is looked at
 *                    whole, by the first).
 *  pid_reuse         a dead slot whose pid field names a live process (ours,
 *                    1) is reclaimed; a live slot whose pid field names a
 *                    dead pid is not: liveness is the OFD lock, not the pid.
 *  corrupt_random    200 seeded corruptions of a copy of a real segment
 *                    (header fields, slot states, grant owner/mode/range,
 *                    random bytes) in a forked child under alarm(): every bad
 *                    header is refused with a reason, a bad slot is coped
 *                    with where it is met, none crashes or hangs.
 *  corrupt_orphan    a busy HELD/WAIT grant whose owner slot is FREE (only
 *                    corruption makes one): a request for its range must not
 *                    wait for it forever.
 *  corrupt_lock      garbage in the table lock word (impossible values, a
 *                    free slot's, waiters): register and
 *                    acquire return within a few seconds, no crash.
 *  bad_files         mode 0644/0660/0700, wrong sizes, a symlink, a FIFO, a
 *                    directory, a garbage file: refused with a reason.
 *  foreign_owner     a segment owned by another uid (root only): refused.
 *  fifo              A busy; B queues; C asks later: C is not granted
 *                    before B, and not while B holds it.  Also a newcomer
 *                    that overlaps only B's queued request waits behind it.
 *  waiter_behind_older_holder_*, overtaken_*  a waiter that only waits
 *                    for an older holder is not starved: a newcomer
 *                    overlapping only its request passes (control: the
 *                    old rule, 1 ms of any waiting, queues it); one
 *                    overtaken by a later grant, busy, idle or left by
 *                    then, is starved at once, and the newcomer queues
 *                    behind it, also across the ticket counter's wrap.
 *  stopped_waiter_*  a waiter stopped after it was starved holds nobody
 *                    back: a holder keeps cycling (count, with a control
 *                    under the old rule: 0), and requests queued behind
 *                    requests queued behind it are granted (transitive);
 *                    one queued behind a running waiter names the holder
 *                    at the root, and `rangeshim locks` lists it as the
 *                    BLOCKER.
 *  table_lock_killed_waiter  a table-lock waiter killed in its sleep
 *                    leaves its count behind; a later sleeper is still
 *                    woken at the next release (control: with every wake
 *                    held back it is not).
 *  default_table_chosen_afresh  a forked child that attaches after its
 *                    parent left, once /run/user/<uid> appeared, picks the
 *                    table a newcomer picks (root only).
 *  exact_left_grant_freed_by_any_walk  another process's walk of the
 *                    file frees a left exact grant out of its way (not a
 *                    revoke); an idle cached grant as far away stays
 *                    (control).
 *  spin_budget_learns  a grant waiter's spin budget (nodelock.c,
 *                    spin_budget) falls to RS_NT_SPIN_MIN after spins that
 *                    saw nothing change, climbs back to RS_NT_SPIN_MAX
 *                    after spins that did, and stays between the two.
 *  whole_file_when_alone  a process alone on a file is granted [0, EOF);
 *                    a second process revokes it (idle) and the first one
 *                    is back to windows.
 *  strided_*         strided grants (nodelock.c, "Strided grants"): two
 *                    processes' grants of one stride at disjoint offsets
 *                    coexist, idle, untouched (control: offsets that
 *                    overlap revoke); an exact request in a gap leaves one
 *                    alone, one across a block revokes it, a request that
 *                    expands takes its whole extent; another process's
 *                    grant in the way of a later block cuts the request
 *                    before that block, one in the way of the first makes
 *                    it a plain exact request.
 *  table_full        every grant slot idle: a new request evicts the least
 *                    recently granted one; all busy:
 *                    it waits (table_full) until one is released.  A
 *                    starved waiter evicts one for its WAIT entry, so a
 *                    newcomer does not pass it.
 *  lockorder::*      the lock checks of debug builds (shim/core/lockorder.h)
 *                    are live: in a child, letting go of a table lock not
 *                    held, taking a table's local mutex under another
 *                    table's lock (against the order), and releasing a
 *                    grant index out of range (rs_nt_release's Pre:) abort
 *                    with the check's message in a debug or sanitizer
 *                    build; a release build runs the same code to the end
 *                    without it (compiled out).  Each build is the other's
 *                    control: the abort is the check's, not the rig's.
 *
 * Every wait is bounded (reply timeouts, alarm() in forked children,
 * .timeout on every test); agents die with their test (PR_SET_PDEATHSIG)
 * and are killed in the fini.  Segment names are /rs-t-<pid>-<n>, removed
 * in the fini.
 */
#include <criterion/criterion.h>

#include "common.h"
#include <criterion/logging.h>

#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "invariant.h"
#include "lockorder.h"
#include "nodelock.h"
#include "stride.h"
#include "rangeshim/rangelock.h"
#include "segment.h"


#define MIB (1ull << 20)
#define KIB (1ull << 10)
#define WINDOW (4 * MIB)
#define DEV 7
#define INO 4242
/* Something that must happen: a bound for a hang, so it grows with the
 * sanitizers' slowdown (ASan at load 20 once took over 3 s to let a
 * woken waiter answer: nodelock::fifo). */
#define MUST_MS (3000 * RS_SLOW)
/* Something that must not happen gets this long to show itself. */
#define MUSTNT_MS 300

/* ---- agents ---- */

enum op {
	OP_REGISTER = 1, OP_ACQUIRE, OP_ENTER, OP_LEAVE, OP_RELEASE, OP_GW,
	OP_LOCK_TABLE, OP_DIE, OP_UNREGISTER, OP_ACQUIRE_MANY, OP_ENTER_ALL,
	OP_UMASK, OP_UNLOCK_TABLE, OP_REGISTER_STOP, OP_STDERR, OP_MARK_SELF, OP_LEAVE_WAKE,
	OP_FREE_LEFT,
};

struct cmd {
	int op;
	unsigned mode;
	int enter;              /* OP_ACQUIRE: count ourselves in afterwards */
	int exact;              /* OP_ACQUIRE: rs_nt_req.exact */
	int whole;              /* OP_ACQUIRE: rs_nt_req.whole */
	uint32_t idx, gen, n;
	uint64_t dev, ino, start, end, window;
	uint64_t stride, blen;  /* OP_ACQUIRE: a strided request */
	char name[128];
};

struct rep {
	int rc;
	int lost;               /* entered a grant that was revoked meanwhile */
	uint32_t me, idx, gen, users;
	uint64_t start, end, wait_ns, gw, seq, stride, blen;
	int waited, table_full, met;
	uint32_t revoked, wanted, reclaimed;
	uint64_t looks;         /* OP_REGISTER: the liveness looks it made */
	char why[200];
};

struct agent {
	pid_t pid;
	int cmd_fd, rep_fd;
	uint32_t me;
};

#define MAX_AGENTS 8
#define MAX_PATHS 8
static struct agent agents[MAX_AGENTS];
static int nagents;
static char seg_name[64], seg_path[128];
static char extra_paths[MAX_PATHS][128];
static int nextra;
static _Atomic uint64_t *seq;    /* shared with the agents: order of grants */
static int name_counter;

static int write_full(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n) {
		ssize_t k = write(fd, p, n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

static int read_full(int fd, void *buf, size_t n)
{
	char *p = buf;

	while (n) {
		ssize_t k = read(fd, p, n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static uint64_t now_ns(void)
{
	return rs_nt_now_ns();
}

/* The agent's side. */
static void agent_main(int cfd, int rfd) __attribute__((noreturn));
static void agent_main(int cfd, int rfd)
{
	struct rs_nt t;
	int registered = 0;

	memset(&t, 0, sizeof(t));
	for (;;) {
		struct cmd c;
		struct rep r;

		if (read_full(cfd, &c, sizeof(c)) < 0)
			_exit(0);
		memset(&r, 0, sizeof(r));
		switch (c.op) {
		case OP_UMASK:
			umask((mode_t)c.n);
			break;
		case OP_REGISTER:
			r.looks = atomic_load(&rs_seg_looks);
			r.rc = rs_nt_register(&t, c.name, r.why, sizeof(r.why));
			r.looks = atomic_load(&rs_seg_looks) - r.looks;
			registered = r.rc == 0;
			r.me = t.me;
			break;
		case OP_ACQUIRE: {
			struct rs_nt_req q = { .dev = c.dev, .ino = c.ino, .start = c.start, .end = c.end,
						 .mode = c.mode, .window = c.window, .exact = c.exact,
						 .whole = c.whole, .stride = c.stride, .blen = c.blen };
			struct rs_nt_result res;

			r.rc = rs_nt_acquire(&t, &q, &res, r.why, sizeof(r.why));
			r.met = res.met;
			if (r.rc == 0) {
				struct rs_seg_grant *g = &t.map.seg->grants[res.idx];

				r.idx = res.idx;
				r.gen = res.gen;
				r.start = res.start;
				r.end = res.end;
				r.stride = res.stride;
				r.blen = res.blen;
				r.waited = res.waited;
				r.wait_ns = res.wait_ns;
				r.revoked = res.revoked;
				r.wanted = res.wanted;
				r.reclaimed = res.reclaimed;
				r.table_full = res.table_full;
				/* rs_nt_acquire returns the grant with the caller
				 * counted in (nodelock.h): keep that user, or
				 * leave at once for an idle cached grant. */
				if (c.enter) {
					/* Nobody may have taken it meanwhile. */
					sleep_ms(20);
					if (RS_GW_GEN(atomic_load(&g->gw)) != res.gen)
						r.lost = 1;
				} else {
					atomic_fetch_sub(&g->gw, 1);
				}
				r.gw = atomic_load(&g->gw);
			}
			r.seq = atomic_fetch_add(seq, 1);
			break;
		}
		case OP_ACQUIRE_MANY:
			/* n grants of 4 KiB, 8 KiB apart, not expanded. */
			for (uint32_t i = 0; i < c.n && r.rc == 0; i++) {
				struct rs_nt_req q = { .dev = c.dev, .ino = c.ino,
						       .start = c.start + i * 8 * KIB,
						       .end = c.start + i * 8 * KIB + 4 * KIB,
						       .mode = c.mode, .window = 0 };
				struct rs_nt_result res;

				r.rc = rs_nt_acquire(&t, &q, &res, r.why, sizeof(r.why));
				if (r.rc == 0)	/* idle, cached */
					atomic_fetch_sub(&t.map.seg->grants[res.idx].gw, 1);
				r.idx = res.idx;
				r.gen = res.gen;
				r.table_full |= res.table_full;
			}
			break;
		case OP_ENTER_ALL:
			/* Count ourselves in on every grant we hold. */
			for (uint32_t i = 0; i < RS_NGRANT; i++) {
				struct rs_seg_grant *g = &t.map.seg->grants[i];

				if (atomic_load(&g->state) == RS_G_HELD && g->owner == t.me) {
					atomic_fetch_add(&g->gw, 1);
					r.users++;
				}
			}
			break;
		case OP_ENTER:
			r.users = RS_GW_USERS(atomic_fetch_add(&t.map.seg->grants[c.idx].gw, 1) + 1);
			r.gw = atomic_load(&t.map.seg->grants[c.idx].gw);
			break;
		case OP_LEAVE:
			r.users = RS_GW_USERS(atomic_fetch_sub(&t.map.seg->grants[c.idx].gw, 1) - 1);
			r.gw = atomic_load(&t.map.seg->grants[c.idx].gw);
			break;
		case OP_MARK_SELF:	/* as grants.c does with an exact grant */
			r.gw = atomic_fetch_or(&t.map.seg->grants[c.idx].gw, RS_WANTED_SELF);
			break;
		case OP_LEAVE_WAKE: {	/* rs_grant_leave, then rs_grant_idle's wake */
			struct rs_seg_grant *g = &t.map.seg->grants[c.idx];
			uint64_t old = atomic_fetch_sub(&g->gw, 1);

			if (RS_GW_USERS(old) == 1)
				rs_nt_wake_grant(g, old);
			r.users = RS_GW_USERS(old) - 1;
			r.gw = atomic_load(&g->gw);
			break;
		}
		case OP_FREE_LEFT:	/* what closing an exact file does */
			rs_nt_free_left(&t);
			break;
		case OP_RELEASE:
			rs_nt_release(&t, c.idx, c.gen);
			break;
		case OP_GW:
			r.gw = atomic_load(&t.map.seg->grants[c.idx].gw);
			r.users = RS_GW_USERS(r.gw);
			break;
		case OP_LOCK_TABLE:
			/* Take the table lock as nodelock.c does, under our slot. */
			rs_nt_lock_table(&t);
			if (c.n == 1) {	/* die inside, by our own hand */
				write_full(rfd, &r, sizeof(r));
				raise(SIGKILL);
			}
			if (c.n == 2) {	/* stop inside (Ctrl-Z), let go once resumed */
				write_full(rfd, &r, sizeof(r));
				raise(SIGSTOP);
				rs_nt_unlock_table(&t);
			}
			break;
		case OP_REGISTER_STOP: {
			/* The first half of a registration, stopped inside: slot
			 * claimed, table lock taken, slot not yet LIVE. */
			uint32_t p;

			r.rc = rs_seg_attach(&t.map, c.name, 1, r.why, sizeof(r.why));
			for (p = 0; r.rc == 0 && p < RS_NPROC; p++)
				if (atomic_load(&t.map.seg->procs[p].state) == RS_PROC_FREE &&
				    rs_seg_claim(&t.map, p) == 0)
					break;
			t.me = p;
			r.me = p;
			if (r.rc == 0 && p < RS_NPROC) {
				/* As register_once: named, then locked. */
				t.map.seg->procs[p].pid = (int32_t)getpid();
				rs_nt_lock_table(&t);
				write_full(rfd, &r, sizeof(r));
				raise(SIGSTOP);
				rs_nt_unlock_table(&t);
			} else {
				r.rc = -1;
			}
			break;
		}
		case OP_STDERR: {
			int fd = open(c.name, O_WRONLY | O_CREAT | O_TRUNC, 0600);

			r.rc = fd < 0 ? -1 : dup2(fd, 2);
			if (fd >= 0)
				close(fd);
			break;
		}
		case OP_UNLOCK_TABLE:
			rs_nt_unlock_table(&t);
			break;
		case OP_DIE:
			raise(SIGKILL);
			break;
		case OP_UNREGISTER:
			if (registered)
				rs_nt_unregister(&t);
			registered = 0;
			break;
		default:
			r.rc = -1;
		}
		if (write_full(rfd, &r, sizeof(r)) < 0)
			_exit(0);
	}
}

static struct agent *agent_start(void)
{
	int c[2], r[2];
	pid_t ppid = getpid();
	struct agent *a;
	pid_t pid;

	cr_assert_lt(nagents, MAX_AGENTS);
	cr_assert_eq(pipe(c), 0);
	cr_assert_eq(pipe(r), 0);
	pid = fork();
	cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != ppid)
			_exit(0);
		close(c[1]);
		close(r[0]);
		for (int i = 0; i < nagents; i++) {
			close(agents[i].cmd_fd);
			close(agents[i].rep_fd);
		}
		agent_main(c[0], r[1]);
	}
	close(c[0]);
	close(r[1]);
	a = &agents[nagents++];
	a->pid = pid;
	a->cmd_fd = c[1];
	a->rep_fd = r[0];
	a->me = UINT32_MAX;
	return a;
}

static void agent_send(struct agent *a, const struct cmd *c)
{
	cr_assert_eq(write_full(a->cmd_fd, c, sizeof(*c)), 0, "agent %d: send: %s", (int)a->pid,
		     strerror(errno));
}

/* 1 and *r filled if the agent answered within ms, 0 if not. */
static int agent_poll(struct agent *a, struct rep *r, int ms)
{
	struct pollfd p = { a->rep_fd, POLLIN, 0 };
	int k;

	do
		k = poll(&p, 1, ms);
	while (k < 0 && errno == EINTR);
	if (k <= 0)
		return 0;
	cr_assert_eq(read_full(a->rep_fd, r, sizeof(*r)), 0, "agent %d died (reply pipe closed)",
		     (int)a->pid);
	return 1;
}

static struct rep agent_wait(struct agent *a, int ms, const char *what)
{
	struct rep r;

	cr_assert(agent_poll(a, &r, ms), "agent %d: no answer to %s within %d ms", (int)a->pid,
		  what, ms);
	return r;
}

static struct rep agent_do(struct agent *a, const struct cmd *c, const char *what)
{
	agent_send(a, c);
	return agent_wait(a, MUST_MS, what);
}

static void agent_register(struct agent *a)
{
	struct cmd c = { .op = OP_REGISTER };
	struct rep r;

	snprintf(c.name, sizeof(c.name), "%s", seg_name);
	r = agent_do(a, &c, "register");
	cr_assert_eq(r.rc, 0, "agent %d: register failed: %s", (int)a->pid, r.why);
	cr_assert_lt(r.me, RS_NPROC);
	a->me = r.me;
}

static struct cmd acq_cmd(uint64_t start, uint64_t end, unsigned mode, uint64_t window, int enter)
{
	struct cmd c = { .op = OP_ACQUIRE, .mode = mode, .enter = enter, .dev = DEV, .ino = INO,
			 .start = start, .end = end, .window = window };

	return c;
}

static struct rep acquire(struct agent *a, uint64_t start, uint64_t end, unsigned mode,
			  uint64_t window, int enter)
{
	struct cmd c = acq_cmd(start, end, mode, window, enter);
	struct rep r = agent_do(a, &c, "acquire");

	cr_assert_eq(r.rc, 0, "agent %d: acquire [%llu,%llu) failed: %s", (int)a->pid,
		     (unsigned long long)start, (unsigned long long)end, r.why);
	cr_assert_eq(r.lost, 0, "agent %d: grant %u revoked before it could be entered",
		     (int)a->pid, r.idx);
	cr_assert_lt(r.idx, RS_NGRANT);
	cr_assert_leq(r.start, start);
	cr_assert_geq(r.end, end);
	return r;
}

static uint32_t simple(struct agent *a, int op, uint32_t idx, uint32_t gen)
{
	struct cmd c = { .op = op, .idx = idx, .gen = gen };
	struct rep r = agent_do(a, &c, "command");

	return op == OP_GW ? (uint32_t)RS_GW_GEN(r.gw) : r.users;
}

static void agent_kill(struct agent *a)
{
	int st;

	kill(a->pid, SIGKILL);
	waitpid(a->pid, &st, 0);
	a->pid = -1;
}

/* ---- the test's own view of the segment ---- */

static struct rs_seg_map view;

static struct rs_segment *view_attach(void)
{
	char why[300];

	if (!view.seg)
		cr_assert_eq(rs_seg_attach(&view, seg_name, 0, why, sizeof(why)), 0,
			     "attach %s: %s", seg_name, why);
	return view.seg;
}

/* The grants other than FREE owned by slot me: count, and find one. */
static int grants_of(uint32_t me, uint32_t state, uint32_t *idx)
{
	struct rs_segment *s = view_attach();
	int n = 0;

	for (uint32_t i = 0; i < RS_NGRANT; i++) {
		if (atomic_load(&s->grants[i].state) == state && s->grants[i].owner == me) {
			if (idx)
				*idx = i;
			n++;
		}
	}
	return n;
}

/* An exact call's end, as grants.c makes it: the grant is marked as no
 * longer cached, and its last user leaves, waking those who wait. */
static void exact_call_ends(struct agent *a, uint32_t idx)
{
	simple(a, OP_MARK_SELF, idx, 0);
	simple(a, OP_LEAVE_WAKE, idx, 0);
}

/* Slot me's WAIT entry, once it is there: a waiter shows itself in the
 * table only once starved (nodelock.c, "Fairness": overtaken and 1 ms,
 * or rs_nt_starve_ns of waiting, 100 ms), and sees that when it next
 * scans.  Returns how many it has then. */
static int wait_queued(uint32_t me, uint32_t *idx)
{
	uint64_t end = now_ns() + MUST_MS * 1000000ull;
	int n;

	while ((n = grants_of(me, RS_G_WAIT, idx)) == 0 && now_ns() < end)
		usleep(2000);
	return n;
}

/* Do two grants share a byte?  Block by block (a strided grant's blocks
 * listed one by one, not by stride.h's arithmetic, which this checks). */
static int grants_share(const struct rs_seg_grant *a, const struct rs_seg_grant *b)
{
	uint64_t i = 0, j = 0;

	for (;;) {
		uint64_t as = a->start + i * a->stride, bs = b->start + j * b->stride;
		uint64_t ae = a->stride ? as + a->blen : a->end, be = b->stride ? bs + b->blen : b->end;

		if (as >= a->end || bs >= b->end || (a->stride == 0 && i) || (b->stride == 0 && j))
			return 0;
		ae = ae < a->end ? ae : a->end;
		be = be < b->end ? be : b->end;
		if (as < be && bs < ae)
			return 1;
		if (ae <= be)
			i++;
		else
			j++;
	}
}

/* No two HELD grants of different owners overlap unless both SHARED. */
static void assert_no_conflicting_grants(void)
{
	struct rs_segment *s = view_attach();

	for (uint32_t i = 0; i < RS_NGRANT; i++) {
		const struct rs_seg_grant *a = &s->grants[i];

		if (atomic_load(&a->state) != RS_G_HELD)
			continue;
		for (uint32_t j = i + 1; j < RS_NGRANT; j++) {
			const struct rs_seg_grant *b = &s->grants[j];

			if (atomic_load(&b->state) != RS_G_HELD || a->owner == b->owner ||
			    a->dev != b->dev || a->ino != b->ino)
				continue;
			if (a->mode == RS_G_SHARED && b->mode == RS_G_SHARED)
				continue;
			cr_assert(!grants_share(a, b),
				  "grants %u [%llu,%llu) of slot %u and %u [%llu,%llu) of slot %u "
				  "overlap", i, (unsigned long long)a->start,
				  (unsigned long long)a->end, a->owner, j,
				  (unsigned long long)b->start, (unsigned long long)b->end, b->owner);
		}
	}
}

/* ---- fixtures ---- */

static void setup(void)
{
	snprintf(seg_name, sizeof(seg_name), "/rs-t-%d-%d", (int)getpid(), ++name_counter);
	rs_seg_path(seg_name, seg_path, sizeof(seg_path));
	unlink(seg_path);
	seq = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(seq, MAP_FAILED);
	nagents = 0;
	nextra = 0;
	memset(&view, 0, sizeof(view));
	view.fd = -1;
}

static void teardown(void)
{
	for (int i = 0; i < nagents; i++) {
		if (agents[i].pid > 0)
			agent_kill(&agents[i]);
		close(agents[i].cmd_fd);
		close(agents[i].rep_fd);
	}
	nagents = 0;
	if (view.seg)
		rs_seg_detach(&view);
	unlink(seg_path);
	for (int i = 0; i < nextra; i++) {
		struct stat st;

		if (lstat(extra_paths[i], &st) == 0 && S_ISDIR(st.st_mode))
			rmdir(extra_paths[i]);
		else
			unlink(extra_paths[i]);
	}
	munmap((void *)seq, 4096);
}

/* A further name, removed in the fini. */
static const char *extra_name(char *name, size_t len, const char *tag)
{
	cr_assert_lt(nextra, MAX_PATHS);
	snprintf(name, len, "/rs-t-%d-%d-%s", (int)getpid(), name_counter, tag);
	rs_seg_path(name, extra_paths[nextra], sizeof(extra_paths[0]));
	unlink(extra_paths[nextra]);
	return extra_paths[nextra++];
}

TestSuite(nodelock, .init = setup, .fini = teardown, .timeout = 30);

/* ---- tests ---- */

static void check_created(void)
{
	struct stat st;

	cr_assert_eq(lstat(seg_path, &st), 0, "stat %s: %s", seg_path, strerror(errno));
	cr_assert(S_ISREG(st.st_mode), "%s is not a regular file", seg_path);
	cr_assert_eq(st.st_mode & 07777, 0600, "%s has mode %o, not 0600", seg_path,
		     (unsigned)(st.st_mode & 07777));
	cr_assert_eq(st.st_uid, geteuid(), "%s owned by uid %u", seg_path, (unsigned)st.st_uid);
	cr_assert_eq((size_t)st.st_size, sizeof(struct rs_segment), "%s has size %lld", seg_path,
		     (long long)st.st_size);
}

Test(nodelock, create_mode)
{
	struct agent *a = agent_start(), *b = agent_start();
	struct rs_segment *s;
	struct cmd un = { .op = OP_UNREGISTER };

	agent_register(a);
	check_created();
	agent_register(b);
	cr_assert_neq(a->me, b->me, "two processes got the same slot %u", a->me);
	s = view_attach();
	cr_assert_eq(atomic_load(&s->procs[a->me].state), RS_PROC_LIVE);
	cr_assert_eq(s->procs[a->me].pid, a->pid);
	cr_assert_eq(atomic_load(&s->procs[b->me].state), RS_PROC_LIVE);
	cr_assert_eq(s->procs[b->me].pid, b->pid);
	cr_assert(rs_seg_alive(&view, a->me), "live agent's slot seen as dead");
	acquire(a, 0, 4 * KIB, RS_G_EXSH, WINDOW, 0);
	agent_do(a, &un, "unregister");
	cr_assert_eq(atomic_load(&s->procs[a->me].state), RS_PROC_FREE,
		     "slot still LIVE after unregister");
	cr_assert_eq(grants_of(a->me, RS_G_HELD, NULL), 0, "grants left after unregister");
	check_created();
}

/* The creator's umask must not make the segment unusable. */
Test(nodelock, create_mode_umask)
{
	struct agent *a = agent_start();
	struct cmd c = { .op = OP_UMASK, .n = 0277 };

	agent_do(a, &c, "umask");
	agent_register(a);
	check_created();
}

Test(nodelock, disjoint)
{
	struct agent *a = agent_start(), *b = agent_start(), *c = agent_start();
	struct rep ra, rb, rc, rb2, rc2;

	agent_register(a);
	agent_register(b);
	agent_register(c);

	/* Uncontended: the whole aligned window. */
	ra = acquire(a, 4 * KIB, 8 * KIB, RS_G_EXSH, WINDOW, 0);
	cr_assert_eq(ra.start, 0);
	cr_assert_eq(ra.end, WINDOW, "A's grant [%llu,%llu) not expanded to the window",
		     (unsigned long long)ra.start, (unsigned long long)ra.end);
	rb = acquire(b, 6 * MIB, 6 * MIB + 4 * KIB, RS_G_EXSH, WINDOW, 0);
	cr_assert_eq(rb.start, WINDOW);
	cr_assert_eq(rb.end, 2 * WINDOW);
	cr_assert(!ra.waited && !rb.waited && !rb.revoked && !rb.wanted,
		  "disjoint requests waited or revoked");
	/* Expansion stops at others' grants, on both sides. */
	rc = acquire(c, 9 * MIB, 9 * MIB + 4 * KIB, RS_G_EXSH, 0, 0);
	cr_assert_eq(rc.start, 9 * MIB);
	cr_assert_eq(rc.end, 9 * MIB + 4 * KIB, "a request with window 0 was expanded");
	rb2 = acquire(b, 8 * MIB, 8 * MIB + 4 * KIB, RS_G_EXSH, WINDOW, 0);
	cr_assert_eq(rb2.start, 8 * MIB);
	cr_assert_eq(rb2.end, 9 * MIB, "B's second grant [%llu,%llu) not clipped at C's",
		     (unsigned long long)rb2.start, (unsigned long long)rb2.end);
	rc2 = acquire(c, 11 * MIB, 11 * MIB + 4 * KIB, RS_G_EXSH, WINDOW, 0);
	/* Clipped at the end of B's grant; C's own grants do not count. */
	cr_assert_eq(rc2.start, 9 * MIB, "C's grant [%llu,%llu) not clipped at B's",
		     (unsigned long long)rc2.start, (unsigned long long)rc2.end);
	cr_assert_eq(rc2.end, 3 * WINDOW);
	cr_assert(!rb2.waited && !rc.waited && !rc2.waited && !rb2.revoked && !rc.revoked &&
		  !rc2.revoked, "disjoint requests waited or revoked");
	/* Nobody lost anything. */
	cr_assert_eq(simple(a, OP_GW, ra.idx, 0), ra.gen, "A's grant was revoked");
	cr_assert_eq(simple(b, OP_GW, rb.idx, 0), rb.gen, "B's grant was revoked");
	cr_assert_eq(simple(c, OP_GW, rc.idx, 0), rc.gen, "C's grant was revoked");
	assert_no_conflicting_grants();
	/* Another file's grants do not get in the way at all. */
	{
		struct cmd q = acq_cmd(0, 4 * KIB, RS_G_EXSH, WINDOW, 0);
		struct rep r;

		q.ino = INO + 1;
		r = agent_do(b, &q, "acquire other file");
		cr_assert_eq(r.rc, 0, "%s", r.why);
		cr_assert(r.start == 0 && r.end == WINDOW && !r.revoked && !r.waited);
	}
}

/* An overlapping EXSH request waits for a busy grant, then gets it. */
Test(nodelock, busy_waits)
{
	struct agent *a = agent_start(), *b = agent_start();
	struct rep ra, rb;
	struct cmd q = acq_cmd(32 * KIB, 96 * KIB, RS_G_EXSH, WINDOW, 0);
	struct rs_segment *s;
	uint32_t widx = 0;
	uint64_t t0;

	agent_register(a);
	agent_register(b);
	ra = acquire(a, 0, 64 * KIB, RS_G_EXSH, WINDOW, 0);
	cr_assert_eq(simple(a, OP_ENTER, ra.idx, 0), 1);
	agent_send(b, &q);
	cr_assert_not(agent_poll(b, &rb, MUSTNT_MS),
		      "B was granted [32K,96K) while A's overlapping grant was busy");
	s = view_attach();
	cr_assert(RS_GW_WANTED(atomic_load(&s->grants[ra.idx].gw)) & RS_WANTED,
		  "A's busy grant was not marked wanted");
	cr_assert_eq(RS_GW_GEN(atomic_load(&s->grants[ra.idx].gw)), ra.gen,
		     "A's busy grant was revoked");
	cr_assert_eq(wait_queued(b->me, &widx), 1, "B has no WAIT entry");
	cr_assert(s->grants[widx].start == 32 * KIB && s->grants[widx].end == 96 * KIB);
	/* A drains and releases, as grants.c does when its last user leaves. */
	t0 = now_ns();
	cr_assert_eq(simple(a, OP_LEAVE, ra.idx, 0), 0);
	simple(a, OP_RELEASE, ra.idx, ra.gen);
	rb = agent_wait(b, MUST_MS, "acquire after release");
	cr_assert_eq(rb.rc, 0, "%s", rb.why);
	cr_assert(rb.waited, "B's result does not say it waited");
	cr_assert_lt(now_ns() - t0, 1000000000ull, "B granted only %.3f s after the release",
		     (double)(now_ns() - t0) / 1e9);
	cr_assert(rb.start <= 32 * KIB && rb.end >= 96 * KIB);
	cr_assert_neq(simple(a, OP_GW, ra.idx, 0), ra.gen, "A's released grant kept its generation");
	cr_assert_eq(grants_of(b->me, RS_G_WAIT, NULL), 0, "B's WAIT entry left behind");
	cr_assert_eq(grants_of(a->me, RS_G_HELD, NULL), 0);
	assert_no_conflicting_grants();
}

Test(nodelock, idle_revoked)
{
	struct agent *a = agent_start(), *b = agent_start();
	struct rep ra, rb;
	uint64_t t0;

	agent_register(a);
	agent_register(b);
	ra = acquire(a, 0, 64 * KIB, RS_G_EXSH, WINDOW, 0);
	cr_assert_eq(ra.end, WINDOW);
	t0 = now_ns();
	rb = acquire(b, 32 * KIB, 96 * KIB, RS_G_EXSH, WINDOW, 0);
	cr_assert_not(rb.waited, "B waited for A's idle grant");
	cr_assert_lt(now_ns() - t0, 500000000ull);
	cr_assert_geq(rb.revoked, 1, "B's result counts no revoke");
	cr_assert_neq(simple(a, OP_GW, ra.idx, 0), ra.gen,
		      "A's idle grant kept its generation after being revoked");
	cr_assert_eq(grants_of(a->me, RS_G_HELD, NULL), 0);
	/* Contended: not expanded over the window it took from A. */
	cr_assert(rb.start == 32 * KIB && rb.end == 96 * KIB,
		  "B's grant [%llu,%llu) was expanded although it revoked A's",
		  (unsigned long long)rb.start, (unsigned long long)rb.end);
	/* A asking again takes it back the same way: B is idle. */
	ra = acquire(a, 0, 64 * KIB, RS_G_EXSH, WINDOW, 0);
	cr_assert_not(ra.waited);
	cr_assert_neq(simple(b, OP_GW, rb.idx, 0), rb.gen);
	assert_no_conflicting_grants();
}

Test(nodelock, shared_modes)
{
	struct agent *a = agent_start(), *b = agent_start(), *c = agent_start();
	struct rep ra, rb, rc;
	struct cmd q = acq_cmd(0, 64 * KIB, RS_G_EXSH, 0, 0);

	agent_register(a);
	agent_register(b);
	agent_register(c);
	/* SHARED + SHARED: both granted, neither revoked, even when idle. */
	ra = acquire(a, 0, 64 * KIB, RS_G_SHARED, 0, 0);
	rb = acquire(b, 32 * KIB, 96 * KIB, RS_G_SHARED, 0, 0);
	cr_assert(!rb.waited && !rb.revoked && !rb.wanted, "SHARED+SHARED conflicted");
	cr_assert_eq(simple(a, OP_GW, ra.idx, 0), ra.gen, "A's SHARED grant was revoked by B's");
	cr_assert_eq(RS_GW_WANTED(view_attach()->grants[ra.idx].gw), 0,
		     "A's SHARED grant was marked wanted by a SHARED request");
	simple(a, OP_ENTER, ra.idx, 0);
	simple(b, OP_ENTER, rb.idx, 0);
	/* EXSH against two busy SHARED holders waits for both. */
	agent_send(c, &q);
	cr_assert_not(agent_poll(c, &rc, MUSTNT_MS), "EXSH granted over busy SHARED grants");
	simple(a, OP_LEAVE, ra.idx, 0);
	simple(a, OP_RELEASE, ra.idx, ra.gen);
	cr_assert_not(agent_poll(c, &rc, MUSTNT_MS), "EXSH granted while B's SHARED was busy");
	simple(b, OP_LEAVE, rb.idx, 0);
	simple(b, OP_RELEASE, rb.idx, rb.gen);
	rc = agent_wait(c, MUST_MS, "EXSH after SHARED released");
	cr_assert_eq(rc.rc, 0, "%s", rc.why);
	cr_assert(rc.waited);
	simple(c, OP_ENTER, rc.idx, 0);
	/* SHARED against a busy EXSH waits too. */
	q = acq_cmd(16 * KIB, 20 * KIB, RS_G_SHARED, 0, 0);
	agent_send(a, &q);
	cr_assert_not(agent_poll(a, &ra, MUSTNT_MS), "SHARED granted over a busy EXSH grant");
	simple(c, OP_LEAVE, rc.idx, 0);
	simple(c, OP_RELEASE, rc.idx, rc.gen);
	ra = agent_wait(a, MUST_MS, "SHARED after EXSH released");
	cr_assert_eq(ra.rc, 0, "%s", ra.why);
	/* An idle SHARED is revoked by EXSH directly, and an idle EXSH by SHARED. */
	rc = acquire(c, 0, 32 * KIB, RS_G_EXSH, 0, 0);	/* A's [16K,20K) is idle */
	cr_assert_geq(rc.revoked, 1);
	rb = acquire(b, 0, 4 * KIB, RS_G_SHARED, 0, 0);
	cr_assert(!rb.waited && rb.revoked >= 1, "SHARED did not revoke an idle EXSH");
	assert_no_conflicting_grants();
}

Test(nodelock, sigkill_busy)
{
	struct agent *a = agent_start(), *b = agent_start();
	struct rep ra, rb;
	struct cmd q = acq_cmd(0, 64 * KIB, RS_G_EXSH, WINDOW, 0);
	uint64_t t0, dt;

	agent_register(a);
	agent_register(b);
	ra = acquire(a, 0, 64 * KIB, RS_G_EXSH, WINDOW, 0);
	simple(a, OP_ENTER, ra.idx, 0);
	agent_send(b, &q);
	cr_assert_not(agent_poll(b, &rb, MUSTNT_MS), "B granted over A's busy grant");
	t0 = now_ns();
	kill(a->pid, SIGKILL);
	rb = agent_wait(b, MUST_MS, "acquire after the holder was killed");
	dt = now_ns() - t0;
	waitpid(a->pid, NULL, 0);
	a->pid = -1;
	cr_log_info("waiter granted %.0f ms after the holder's SIGKILL", (double)dt / 1e6);
	cr_assert_eq(rb.rc, 0, "%s", rb.why);
	cr_assert_lt(dt, 2000000000ull, "waiter granted only %.3f s after the kill",
		     (double)dt / 1e9);
	cr_assert_geq(rb.reclaimed, 1, "B's result counts no reclaim");
	cr_assert_eq(atomic_load(&view_attach()->procs[a->me].state), RS_PROC_FREE,
		     "dead holder's slot not freed");
	cr_assert_eq(grants_of(a->me, RS_G_HELD, NULL), 0, "dead holder's grants not freed");
}

/*
 * The slot of a grant reclaimed from a holder killed while busy is used
 * again: the dead holder's user count must not come with it.  Every grant
 * acquired afterwards must be revocable once idle.
 */
Test(nodelock, reclaimed_slot_reusable)
{
	struct agent *a = agent_start(), *b = agent_start(), *c = agent_start();
	struct cmd q = acq_cmd(0, 64 * KIB, RS_G_EXSH, 0, 0);
	struct rs_segment *s;
	struct rep ra, rb, rc;

	agent_register(a);
	agent_register(b);
	agent_register(c);
	ra = acquire(a, 0, 64 * KIB, RS_G_EXSH, 0, 1);	/* busy: a call in progress */
	agent_send(b, &q);
	cr_assert_not(agent_poll(b, &rb, MUSTNT_MS));
	agent_kill(a);
	rb = agent_wait(b, MUST_MS, "acquire after the busy holder was killed");
	cr_assert_eq(rb.rc, 0, "%s", rb.why);
	/* Many grants, idle, in every slot the table hands out next. */
	s = view_attach();
	for (int i = 0; i < 4; i++) {
		uint64_t off = (uint64_t)(i + 1) * MIB;
		uint32_t users;
		uint64_t t0;

		rc = acquire(c, off, off + 4 * KIB, RS_G_EXSH, 0, 0);
		users = RS_GW_USERS(atomic_load(&s->grants[rc.idx].gw));
		cr_assert_eq(users, 0, "C's idle grant %u (slot of A's was %u) has users=%u",
			     rc.idx, ra.idx, users);
		t0 = now_ns();
		rb = acquire(b, off, off + 4 * KIB, RS_G_EXSH, 0, 0);
		cr_assert_not(rb.waited, "B waited %.0f ms for C's idle grant %u",
			      (double)(now_ns() - t0) / 1e6, rc.idx);
	}
}

static void dead_in_lock(int self, int with_grant)
{
	struct agent *a = agent_start(), *b = agent_start();
	struct cmd lk = { .op = OP_LOCK_TABLE, .n = (uint32_t)self };
	struct rep ra, rb;
	uint64_t t0, dt;

	agent_register(a);
	agent_register(b);
	if (with_grant) {
		ra = acquire(a, 0, 64 * KIB, RS_G_EXSH, WINDOW, 0);
		simple(a, OP_ENTER, ra.idx, 0);
	}
	ra = agent_do(a, &lk, "take the table lock");
	cr_assert_eq(ra.rc, 0, "could not take the table lock");
	if (self) {
		int st;

		cr_assert_eq(waitpid(a->pid, &st, 0), a->pid);
		cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
		a->pid = -1;
	} else {
		agent_kill(a);
	}
	t0 = now_ns();
	rb = acquire(b, 32 * KIB, 96 * KIB, RS_G_EXSH, WINDOW, 0);
	dt = now_ns() - t0;
	if (with_grant)
		cr_assert_geq(rb.reclaimed, 1, "the dead holder's busy grant was not reclaimed");
	/* (Checked before anyone else registers: a newcomer may reuse the slot.) */
	cr_assert_eq(grants_of(a->me, RS_G_HELD, NULL), 0, "dead process's grants not freed");
	cr_log_info("acquire after a death in the table lock took %.0f ms", (double)dt / 1e6);
	cr_assert_lt(dt, 2000000000ull, "acquire took %.3f s", (double)dt / 1e9);
	/* And the lock is usable afterwards: again, and by a newcomer. */
	acquire(b, 8 * MIB, 8 * MIB + 1, RS_G_EXSH, WINDOW, 0);
	{
		struct agent *c = agent_start();
		struct rep rc;

		agent_register(c);
		rc = acquire(c, 16 * MIB, 16 * MIB + 1, RS_G_EXSH, WINDOW, 0);
		cr_assert_not(rc.waited);
	}
	cr_assert_eq(atomic_load(&view_attach()->hdr.lock), 0,
		     "table lock still taken after the recovery");
}

Test(nodelock, dead_in_lock_killed)
{
	dead_in_lock(0, 0);
}

Test(nodelock, dead_in_lock_self)
{
	dead_in_lock(1, 0);
}

Test(nodelock, dead_in_lock_busy_grant)
{
	dead_in_lock(0, 1);
}

/* Wait until pid is stopped (SIGSTOP it sent itself). */
static void wait_stopped(pid_t pid)
{
	int st;

	cr_assert_eq(waitpid(pid, &st, WUNTRACED), pid, "waitpid: %s", strerror(errno));
	cr_assert(WIFSTOPPED(st), "agent %d did not stop (status 0x%x)", (int)pid, st);
}

static int file_has(const char *path, const char *needle)
{
	char buf[4096];
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;

	if (f)
		fclose(f);
	buf[n] = '\0';
	cr_log_info("%s: %s", path, buf);
	return strstr(buf, needle) != NULL;
}

/*
 * A live process stopped inside the table lock (Ctrl-Z, SIGSTOP, a
 * debugger, the cgroup freezer), or stopped in the middle of registering:
 * nobody takes the lock from it, however long it stays stopped; a waiter
 * says whom it waits for; everyone carries on once it resumes.  (Before:
 * after 2 s the others declared the table unusable and ran without
 * exclusion; a registrant's lock was taken after 1 s with no liveness
 * check.)  MUSTNT here is longer than both old limits.
 */
static void stopped_in_lock(int registrant)
{
	struct agent *a = agent_start(), *b = agent_start(), *c = agent_start();
	struct cmd q = acq_cmd(0, 64 * KIB, RS_G_EXSH, WINDOW, 0);
	struct cmd reg = { .op = OP_REGISTER };
	struct cmd err = { .op = OP_STDERR };
	struct rep ra, rb, rc;
	char log[100];

	snprintf(log, sizeof(log), "/tmp/rs-stopped-%d.log", (int)getpid());
	snprintf(err.name, sizeof(err.name), "%s", log);
	agent_do(b, &err, "redirect stderr");
	agent_register(b);
	if (registrant) {
		struct cmd rs = { .op = OP_REGISTER_STOP };

		snprintf(rs.name, sizeof(rs.name), "%s", seg_name);
		ra = agent_do(a, &rs, "half a registration");
	} else {
		struct cmd lk = { .op = OP_LOCK_TABLE, .n = 2 };

		agent_register(a);
		acquire(a, 0, 64 * KIB, RS_G_EXSH, WINDOW, 0);
		ra = agent_do(a, &lk, "take the table lock and stop");
	}
	cr_assert_eq(ra.rc, 0, "%s", ra.why);
	if (!registrant)
		ra.me = a->me;
	wait_stopped(a->pid);
	cr_assert_eq(RS_LOCK_SLOT(atomic_load(&view_attach()->hdr.lock)), ra.me + 1,
		     "the lock word does not name the stopped holder's slot");
	agent_send(b, &q);
	snprintf(reg.name, sizeof(reg.name), "%s", seg_name);
	agent_send(c, &reg);
	cr_assert_not(agent_poll(b, &rb, 3500),
		      "B got a grant while a live process held the table lock, stopped");
	cr_assert_not(agent_poll(c, &rc, 10), "C registered while a live process held the table lock");
	cr_assert_eq(RS_LOCK_SLOT(atomic_load(&view_attach()->hdr.lock)), ra.me + 1,
		     "the table lock was taken from a live, stopped holder");
	kill(a->pid, SIGCONT);
	agent_wait(a, MUST_MS, "the resumed holder lets go");
	rb = agent_wait(b, MUST_MS, "B's acquire once the holder resumed");
	cr_assert_eq(rb.rc, 0, "%s", rb.why);
	rc = agent_wait(c, MUST_MS, "C's registration once the holder resumed");
	cr_assert_eq(rc.rc, 0, "%s", rc.why);
	cr_assert(file_has(log, "blocked for"), "B never said it was blocked");
	{
		char pid[32];

		snprintf(pid, sizeof(pid), "pid %d (", (int)a->pid);
		cr_assert(file_has(log, pid), "B's warning does not name the holder, %s", pid);
		cr_assert(file_has(log, "stopped"), "B's warning does not say the holder is stopped");
	}
	cr_assert_not(file_has(log, "NOT"), "B announced running without exclusion");
	unlink(log);
}

Test(nodelock, stopped_lock_holder, .timeout = 40)
{
	rs_nt_warn_ns = 1000000000ull;	/* agents inherit it */
	stopped_in_lock(0);
}

Test(nodelock, stopped_registrant, .timeout = 40)
{
	rs_nt_warn_ns = 1000000000ull;
	stopped_in_lock(1);
}

/*
 * Every process slot held by a live process (here one description of the
 * test's holds every liveness byte but the first agent's, and the slots
 * say LIVE): a registrant must not return without a slot, as running
 * without the table would be a fail-open.  It waits, says why in one
 * line, and takes the first slot whose holder goes.  The control: the
 * same registrant gets a slot at once when one is free.
 */
Test(nodelock, full_slots_wait, .timeout = 60)
{
	struct agent *a = agent_start(), *b = agent_start();
	struct cmd reg = { .op = OP_REGISTER }, err = { .op = OP_STDERR };
	struct rs_segment *s;
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
	struct rep rb;
	char log[100];
	uint32_t freed;
	int fd;

	agent_register(a);
	s = view_attach();
	fd = open(seg_path, O_RDWR);
	cr_assert_geq(fd, 0, "%s", strerror(errno));
	for (uint32_t p = 0; p < RS_NPROC; p++) {
		if (p == a->me)
			continue;
		s->procs[p].pid = getpid();
		atomic_store(&s->procs[p].state, RS_PROC_LIVE);
	}
	fl.l_start = (off_t)RS_LIVE_BASE;
	fl.l_len = (off_t)a->me;
	cr_assert(a->me == 0 || fcntl(fd, F_OFD_SETLK, &fl) == 0, "%s", strerror(errno));
	fl.l_start = (off_t)(RS_LIVE_BASE + a->me + 1);
	fl.l_len = (off_t)(RS_NPROC - a->me - 1);
	cr_assert_eq(fcntl(fd, F_OFD_SETLK, &fl), 0, "%s", strerror(errno));

	snprintf(log, sizeof(log), "/tmp/rs-full-%d.log", (int)getpid());
	snprintf(err.name, sizeof(err.name), "%s", log);
	agent_do(b, &err, "redirect stderr");
	snprintf(reg.name, sizeof(reg.name), "%s", seg_name);
	agent_send(b, &reg);
	cr_assert_not(agent_poll(b, &rb, 1500),
		      "B returned from register (rc %d, slot %u: %s) with every slot held", rb.rc,
		      rb.me, rb.why);
	cr_assert(file_has(log, "process slots"), "B did not say why it waits");
	cr_assert(file_has(log, "waiting"), "B did not say it waits");
	cr_assert_not(file_has(log, "NOT"), "B announced running without exclusion");

	/* One holder goes: B takes its slot. */
	freed = a->me == 77 ? 78 : 77;
	fl.l_type = F_UNLCK;
	fl.l_start = (off_t)(RS_LIVE_BASE + freed);
	fl.l_len = 1;
	cr_assert_eq(fcntl(fd, F_OFD_SETLK, &fl), 0, "%s", strerror(errno));
	rb = agent_wait(b, MUST_MS, "B's registration once a slot was freed");
	cr_assert_eq(rb.rc, 0, "%s", rb.why);
	cr_assert_eq(rb.me, freed, "B registered in slot %u, not the freed %u", rb.me, freed);
	close(fd);
	unlink(log);

	/* Control: with free slots, registration does not wait. */
	{
		struct agent *c = agent_start();

		agent_register(c);
		cr_assert_neq(c->me, freed);
	}
}

/*
 * A malformed user count (docs/limitations.md's old race could leave
 * 0xffffffff on a free slot; a stray write can put anything anywhere).
 * Free slots carrying garbage words: the next grant filled into one must
 * still count its holder, so a busy grant is not revoked.  A held grant
 * with an impossible count blocks its own range only: the rest of the
 * table works, nobody is refused, and its owner's death frees it.
 */
/*
 * Acquisitions walk only their file's chain (nodelock.c, "Per-file
 * chains") and check it against the bucket's count and the slots.  A
 * chain that would hide a busy grant (a stray write) must be noticed: the
 * request still waits for the grant, and the chains and counts are
 * rebuilt from the slots (used_hi, lowered by the same write, too).
 */
Test(nodelock, scan_bounds_hide_nothing)
{
	struct agent *a = agent_start(), *b = agent_start();
	struct cmd q = acq_cmd(0, 64 * KIB, RS_G_EXSH, WINDOW, 0);
	struct rs_segment *s;
	struct rep ra, rb;
	uint32_t k, n, found = 0;

	agent_register(a);
	agent_register(b);
	acquire(a, 32 * MIB, 32 * MIB + 4096, RS_G_EXSH, 0, 0);	/* slot 0 */
	ra = acquire(a, 0, 64 * KIB, RS_G_EXSH, WINDOW, 1);	/* busy, above it */
	s = view_attach();
	cr_assert_gt(ra.idx, 0);
	for (k = 0; k < RS_NBUCKET && s->hdr.chains[k].head != ra.idx + 1; k++)
		;
	cr_assert_lt(k, RS_NBUCKET, "A's newest grant heads no chain");
	s->hdr.chains[k].head = s->grants[ra.idx].next;	/* hides A's busy grant */
	s->hdr.used_hi = ra.idx;
	agent_send(b, &q);
	cr_assert_not(agent_poll(b, &rb, MUSTNT_MS), "B was granted a range its chain hid");
	cr_assert_gt(s->hdr.used_hi, ra.idx, "used_hi was not repaired");
	n = s->hdr.chains[k].head;
	for (uint32_t steps = 0; n && n <= RS_NGRANT && steps < RS_NGRANT; steps++, n = s->grants[n - 1].next)
		found |= n == ra.idx + 1;
	cr_assert(found, "the chain was not rebuilt");
	simple(a, OP_LEAVE, ra.idx, 0);
	rb = agent_wait(b, MUST_MS, "B once A left");
	cr_assert_eq(rb.rc, 0, "%s", rb.why);
}

/*
 * Garbage in a chain (a cycle, an impossible count, a link out of range):
 * the walk stops, the index is rebuilt, and a busy grant still keeps the
 * request out until its call leaves.
 */
Test(nodelock, chain_garbage)
{
	struct agent *a = agent_start(), *b = agent_start();
	struct cmd q = acq_cmd(0, 64 * KIB, RS_G_EXSH, WINDOW, 0);
	struct rs_segment *s;
	struct rep ra, rb;
	uint32_t k;

	agent_register(a);
	agent_register(b);
	ra = acquire(a, 0, 64 * KIB, RS_G_EXSH, WINDOW, 1);	/* busy */
	s = view_attach();
	for (k = 0; k < RS_NBUCKET && s->hdr.chains[k].head != ra.idx + 1; k++)
		;
	cr_assert_lt(k, RS_NBUCKET, "A's grant heads no chain");
	s->grants[ra.idx].next = ra.idx + 1;	/* a cycle */
	s->hdr.chains[k].count = UINT32_MAX;
	s->hdr.chains[(k + 1) % RS_NBUCKET].head = RS_NGRANT + 7;
	agent_send(b, &q);
	cr_assert_not(agent_poll(b, &rb, MUSTNT_MS), "B was granted over A's busy grant");
	/* A's grant and B's WAIT entry. */
	cr_assert_eq(s->hdr.chains[k].count, 2, "the chain's count was not rebuilt (%u)", s->hdr.chains[k].count);
	cr_assert_neq(s->grants[ra.idx].next, ra.idx + 1, "the cycle was not broken");
	cr_assert_eq(s->hdr.chains[(k + 1) % RS_NBUCKET].head, 0, "a link out of range was kept");
	simple(a, OP_LEAVE, ra.idx, 0);
	rb = agent_wait(b, MUST_MS, "B once A left");
	cr_assert_eq(rb.rc, 0, "%s", rb.why);
}

Test(nodelock, malformed_user_count)
{
	struct agent *a = agent_start(), *b = agent_start(), *c = agent_start();
	struct cmd q = acq_cmd(0, 64 * KIB, RS_G_EXSH, WINDOW, 0);
	struct rs_segment *s;
	struct rep ra, rb;

	agent_register(a);
	agent_register(b);
	s = view_attach();
	for (uint32_t i = 0; i < RS_NGRANT; i++)
		if (atomic_load(&s->grants[i].state) == RS_G_FREE)
			atomic_store(&s->grants[i].gw, RS_GW_FREE(RS_GW_GEN(atomic_load(&s->grants[i].gw))) |
							    0xffffffffull);
	ra = acquire(a, 0, 64 * KIB, RS_G_EXSH, WINDOW, 1);	/* a call inside */
	cr_assert_eq(RS_GW_USERS(atomic_load(&s->grants[ra.idx].gw)), 1,
		     "a grant filled into a garbage slot counts %u users, not its one",
		     RS_GW_USERS(atomic_load(&s->grants[ra.idx].gw)));
	agent_send(b, &q);
	cr_assert_not(agent_poll(b, &rb, MUSTNT_MS), "B got A's busy grant: it was revoked");
	cr_assert_eq(RS_GW_GEN(atomic_load(&s->grants[ra.idx].gw)), ra.gen, "A's busy grant was revoked");
	/* Now garbage in A's held grant itself: its range stays blocked ... */
	atomic_store(&s->grants[ra.idx].gw, RS_GW_FREE(ra.gen) | RS_WANTED | 0x3fffffffull);
	cr_assert_not(agent_poll(b, &rb, MUSTNT_MS), "B got a grant with a garbage user count");
	/* ... and only its range: another range, and a newcomer, still work. */
	agent_register(c);
	rb = acquire(c, 8 * MIB, 8 * MIB + 4096, RS_G_EXSH, WINDOW, 0);
	cr_assert_eq(rb.rc, 0, "%s", rb.why);
	/* The owner's death frees it. */
	agent_kill(a);
	rb = agent_wait(b, MUST_MS, "B's acquire once the owner of the garbage grant died");
	cr_assert_eq(rb.rc, 0, "%s", rb.why);
}

/* Unregister gives back idle grants and the slot at once. */
Test(nodelock, unregister_frees)
{
	struct agent *a = agent_start(), *b = agent_start();
	struct cmd un = { .op = OP_UNREGISTER };
	struct rs_segment *s;
	struct rep rb;

	agent_register(a);
	agent_register(b);
	acquire(a, 0, 64 * KIB, RS_G_EXSH, WINDOW, 0);
	acquire(a, 8 * MIB, 8 * MIB + 1, RS_G_SHARED, WINDOW, 0);
	agent_do(a, &un, "unregister");
	s = view_attach();
	cr_assert_eq(atomic_load(&s->procs[a->me].state), RS_PROC_FREE, "slot kept");
	cr_assert_eq(grants_of(a->me, RS_G_HELD, NULL), 0, "idle grants kept after unregister");
	rb = acquire(b, 0, 16 * MIB, RS_G_EXSH, WINDOW, 0);
	cr_assert(!rb.waited && !rb.revoked && !rb.reclaimed);
}

/*
 * Unregister while a call is still inside a grant (exit with threads
 * running): that grant must stay, and the waiter must not get it, until
 * the process is gone; then it is reclaimed within about a second.
 */
Test(nodelock, unregister_busy_kept_until_death)
{
	struct agent *a = agent_start(), *b = agent_start();
	struct cmd q = acq_cmd(0, 64 * KIB, RS_G_EXSH, WINDOW, 0);
	struct cmd un = { .op = OP_UNREGISTER };
	struct rep ra, rb;
	uint64_t t0;

	agent_register(a);
	agent_register(b);
	ra = acquire(a, 0, 64 * KIB, RS_G_EXSH, WINDOW, 1);	/* a call inside */
	agent_send(b, &q);
	cr_assert_not(agent_poll(b, &rb, MUSTNT_MS));
	agent_do(a, &un, "unregister");
	cr_assert_not(agent_poll(b, &rb, 2 * MUSTNT_MS),
		      "B was granted a range while A's call was still inside it");
	cr_assert_eq(simple(a, OP_GW, ra.idx, 0), ra.gen, "A's busy grant was freed by unregister");
	t0 = now_ns();
	agent_kill(a);
	rb = agent_wait(b, MUST_MS, "acquire after the unregistered holder died");
	cr_assert_eq(rb.rc, 0, "%s", rb.why);
	cr_assert_lt(now_ns() - t0, 2000000000ull);
}

/*
 * pid reuse.  A dead process's slot whose pid field now names a live
 * process (the pid was reused) must still be reclaimed; a live process
 * whose pid field names a dead pid must not be.
 */
static void pid_reuse_dead(int32_t fake_pid)
{
	struct agent *a = agent_start(), *b = agent_start();
	struct cmd q = acq_cmd(0, 64 * KIB, RS_G_EXSH, WINDOW, 0);
	struct rs_segment *s;
	struct rep ra, rb;
	uint64_t t0, dt;

	agent_register(a);
	agent_register(b);
	ra = acquire(a, 0, 64 * KIB, RS_G_EXSH, WINDOW, 0);
	simple(a, OP_ENTER, ra.idx, 0);
	s = view_attach();
	agent_kill(a);
	s->procs[a->me].pid = fake_pid;
	t0 = now_ns();
	agent_send(b, &q);
	rb = agent_wait(b, MUST_MS, "acquire from a dead holder whose pid is reused");
	dt = now_ns() - t0;
	cr_assert_eq(rb.rc, 0, "%s", rb.why);
	cr_assert_lt(dt, 2000000000ull);
	cr_assert_geq(rb.reclaimed, 1);
	cr_assert_eq(atomic_load(&s->procs[a->me].state), RS_PROC_FREE,
		     "dead slot with live pid %d kept", (int)fake_pid);
	/* A newcomer's register reclaims too: same thing through another path. */
}

/*
 * Registration's look for the dead.  nlive slots stand for other
 * processes (LIVE, their liveness bytes locked by descriptors of this
 * test) and ndead more for dead ones (LIVE, bytes free).  A newcomer
 * makes at most 16 liveness looks however many are attached (64 and
 * fewer are looked at whole), besides one more for each suspect it
 * confirms, and the dead are all reclaimed within one registration per
 * 16 slots.  Looking at every slot, as
 * registration did, makes a look per slot at every registration: with
 * 1,000 processes attached, 4 ms to start one.
 */

static void sweep_run(uint32_t nlive, uint32_t ndead, uint64_t *first_looks,
		      uint32_t *left_after_first, uint32_t *registrations)
{
	uint32_t nslot = nlive + ndead, every = nslot / ndead;
	struct agent *x = agent_start(), *a = agent_start();
	struct cmd reg = { .op = OP_REGISTER }, un = { .op = OP_UNREGISTER };
	struct rs_segment *s;
	/* One description holds every live slot's byte: the bytes differ. */
	int fd, *live = calloc(nslot, sizeof(int));

	cr_assert(live);
	agent_register(x);		/* slot 0; the others from 1 */
	s = view_attach();
	fd = open(seg_path, O_RDWR | O_CLOEXEC);
	cr_assert_geq(fd, 0, "open %s: %s", seg_path, strerror(errno));
	for (uint32_t i = 0; i < nslot; i++) {
		uint32_t p = 1 + i;
		struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET,
				    .l_start = (off_t)(RS_LIVE_BASE + p), .l_len = 1 };

		live[i] = i % every != every / 2;
		if (live[i])
			cr_assert_eq(fcntl(fd, F_OFD_SETLK, &fl), 0, "lock slot %u: %s", p,
				     strerror(errno));
		s->procs[p].pid = getpid();
		atomic_store(&s->procs[p].state, RS_PROC_LIVE);
	}
	atomic_store(&s->hdr.procs_hi, nslot + 1);
	snprintf(reg.name, sizeof(reg.name), "%s", seg_name);
	*registrations = 0;
	for (int dead_left = 1; dead_left && *registrations < 2 * nslot / RS_NT_SWEEP_SLOTS + 2;) {
		struct rep r = agent_do(a, &reg, "register");

		cr_assert_eq(r.rc, 0, "%s", r.why);
		/* Its slot: the first free one, maybe a reclaimed one. */
		agent_do(a, &un, "unregister");
		dead_left = 0;
		for (uint32_t i = 0; i < nslot; i++)
			dead_left += !live[i] && atomic_load(&s->procs[1 + i].state) != RS_PROC_FREE;
		if (!(*registrations)++) {
			*first_looks = r.looks;
			*left_after_first = (uint32_t)dead_left;
		}
		cr_assert_leq(r.looks, nslot + 1 <= RS_NT_SWEEP_WHOLE ? nslot + 1 + ndead : RS_NT_SWEEP_SLOTS + ndead,
			      "registration %u made %llu liveness looks with %u slots attached",
			      *registrations, (unsigned long long)r.looks, nslot + 1);
	}
	for (uint32_t i = 0; i < nslot; i++) {
		if (live[i])
			cr_assert_eq(atomic_load(&s->procs[1 + i].state), RS_PROC_LIVE,
				     "live slot %u reclaimed", 1 + i);
		else
			cr_assert_eq(atomic_load(&s->procs[1 + i].state), RS_PROC_FREE,
				     "dead slot %u still LIVE after %u registrations", 1 + i,
				     *registrations);
	}
	close(fd);
	free(live);
}

Test(nodelock, registration_looks_bounded)
{
	uint64_t looks;
	uint32_t left, regs;

	sweep_run(295, 5, &looks, &left, &regs);
	cr_assert_leq(regs, (300 + RS_NT_SWEEP_SLOTS - 1) / RS_NT_SWEEP_SLOTS,
		      "the dead were reclaimed only after %u registrations", regs);
	cr_assert_gt(left, 0, "the first registrant looked at every slot (%llu looks)",
		     (unsigned long long)looks);
}

/* Control: a table of 64 or fewer attached is looked at whole by every
 * registrant; the counts above come from the same looks. */
Test(nodelock, registration_looks_at_a_small_table_whole)
{
	uint64_t looks;
	uint32_t left, regs;

	sweep_run(38, 2, &looks, &left, &regs);
	cr_assert_eq(regs, 1);
	cr_assert_eq(left, 0);
	cr_assert_geq(looks, 40, "only %llu looks at 40 slots", (unsigned long long)looks);
}

Test(nodelock, spin_budget_learns)
{
	/* Signed: a -DGRANT_SPIN=0 build has bounds of 0. */
	long long min = RS_NT_SPIN_MIN, max = RS_NT_SPIN_MAX, lo = max, hi = min;
	uint32_t b = RS_NT_SPIN_MAX;

	/* Holders that never came free while watched: down to the floor
	 * within a few dozen waits, never below it. */
	for (int i = 0; i < 64; i++) {
		b = rs_nt_spin_next(b, 0);
		cr_assert_geq((long long)b, min, "budget %u below the floor after %d misses", b, i + 1);
	}
	cr_assert_leq((long long)b, min + 8, "budget %u still high after 64 misses", b);
	/* Holders that came free: back to the full spin, never above it. */
	for (int i = 0; i < 64; i++) {
		b = rs_nt_spin_next(b, 1);
		cr_assert_leq((long long)b, max, "budget %u above the ceiling after %d hits", b, i + 1);
	}
	cr_assert_geq((long long)b, max - 8, "budget %u still low after 64 hits", b);
	/* Half and half: well inside the bounds, at neither (a build with
	 * -DGRANT_SPIN may leave them too close to tell). */
	for (int i = 0; i < 256; i++) {
		b = rs_nt_spin_next(b, i & 1);
		if (i >= 128) {
			lo = (long long)b < lo ? (long long)b : lo;
			hi = (long long)b > hi ? (long long)b : hi;
		}
	}
	if (max - min >= 64)
		cr_assert(lo > min + (max - min) / 8 && hi < max - (max - min) / 8,
			  "alternating hits and misses settled at %lld..%lld", lo, hi);
}

Test(nodelock, pid_reuse_dead_slot_live_pid)
{
	pid_reuse_dead((int32_t)getpid());
}

Test(nodelock, pid_reuse_dead_slot_pid1)
{
	pid_reuse_dead(1);
}

Test(nodelock, pid_reuse_register_path)
{
	struct agent *a = agent_start(), *b;
	struct rep ra, rb;
	struct rs_segment *s;

	agent_register(a);
	ra = acquire(a, 0, 64 * KIB, RS_G_EXSH, WINDOW, 0);
	simple(a, OP_ENTER, ra.idx, 0);
	s = view_attach();
	agent_kill(a);
	s->procs[a->me].pid = (int32_t)getpid();
	b = agent_start();
	agent_register(b);
	cr_assert_eq(atomic_load(&s->procs[a->me].state) == RS_PROC_FREE ||
		     s->procs[a->me].pid == b->pid, 1, "dead slot with a live pid kept at register");
	rb = acquire(b, 0, 64 * KIB, RS_G_EXSH, WINDOW, 0);
	cr_assert_not(rb.waited, "waited for the grants of a dead process already reclaimed");
}

Test(nodelock, pid_reuse_live_slot_dead_pid)
{
	struct agent *a = agent_start(), *b = agent_start();
	struct cmd q = acq_cmd(0, 64 * KIB, RS_G_EXSH, WINDOW, 0);
	struct rs_segment *s;
	struct rep ra, rb;
	pid_t dead = fork();

	if (dead == 0)
		_exit(0);
	cr_assert_gt(dead, 0);
	waitpid(dead, NULL, 0);
	agent_register(a);
	agent_register(b);
	ra = acquire(a, 0, 64 * KIB, RS_G_EXSH, WINDOW, 0);
	simple(a, OP_ENTER, ra.idx, 0);
	s = view_attach();
	s->procs[a->me].pid = (int32_t)dead;
	agent_send(b, &q);
	/* Several liveness checks (every 100 ms of waiting) pass meanwhile. */
	cr_assert_not(agent_poll(b, &rb, 3 * MUSTNT_MS),
		      "B took a live holder's busy grant because its pid field names a dead pid");
	cr_assert_eq(atomic_load(&s->procs[a->me].state), RS_PROC_LIVE, "live holder reclaimed");
	cr_assert_eq(simple(a, OP_GW, ra.idx, 0), ra.gen);
	simple(a, OP_LEAVE, ra.idx, 0);
	simple(a, OP_RELEASE, ra.idx, ra.gen);
	rb = agent_wait(b, MUST_MS, "acquire after release");
	cr_assert_eq(rb.rc, 0, "%s", rb.why);
	cr_assert_eq(rb.reclaimed, 0);
}

/* ---- corrupted segments ---- */

static uint64_t rng_state;

static uint64_t rnd(void)
{
	/* xorshift64* */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 2685821657736338717ull;
}

/* A value of the field's width, different from bad. */
static uint32_t rnd_not(uint32_t good)
{
	uint32_t v;

	do
		v = (uint32_t)rnd() >> (rnd() % 32);
	while (v == good);
	return v;
}

/* A real segment with live-looking processes and grants, copied. */
static struct rs_segment *template_segment(void)
{
	struct agent *a = agent_start(), *b = agent_start();
	struct rs_segment *copy;
	struct rep r;

	agent_register(a);
	agent_register(b);
	r = acquire(a, 0, 64 * KIB, RS_G_EXSH, WINDOW, 0);
	simple(a, OP_ENTER, r.idx, 0);
	acquire(b, 8 * MIB, 8 * MIB + 64 * KIB, RS_G_SHARED, WINDOW, 0);
	{
		struct cmd q = acq_cmd(0, 64 * KIB, RS_G_EXSH, 0, 0);

		agent_send(b, &q);	/* leaves a WAIT entry */
		cr_assert_not(agent_poll(b, &r, 100));
	}
	copy = aligned_alloc(4096, sizeof(*copy));
	cr_assert_not_null(copy);
	memcpy(copy, view_attach(), sizeof(*copy));
	/* The lock may be taken right now by the waiter: the copy's must
	 * look free. */
	atomic_store(&copy->hdr.lock, 0);
	atomic_store(&copy->hdr.lock_waiters, 0);
	atomic_store(&copy->hdr.lock_woken, 0);
	agent_kill(a);
	agent_kill(b);
	return copy;
}

static int write_segment(const char *path, const void *buf, size_t len, mode_t mode)
{
	int fd;

	unlink(path);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL, mode);
	if (fd < 0)
		return -1;
	if (fchmod(fd, mode) < 0 || write_full(fd, buf, len) < 0) {
		close(fd);
		return -1;
	}
	return close(fd);
}

/* Corrupt copy in place; returns 1 if the result must be refused.  Only
 * a bad header is refused: a malformed slot is coped with where it is
 * met (it may block its range, never the table), so those must work. */
static int corrupt(struct rs_segment *s, int kind, char *what, size_t len)
{
	uint32_t i;
	struct rs_seg_grant *g;

	switch (kind) {
	case 0:
		s->hdr.magic = ((uint64_t)rnd_not(0) << 32 | rnd()) ^ RS_SEG_MAGIC;
		if (s->hdr.magic == RS_SEG_MAGIC)
			s->hdr.magic = 0x1;
		snprintf(what, len, "magic=0x%llx", (unsigned long long)s->hdr.magic);
		return 1;
	case 1:
		s->hdr.version = rnd_not(RS_SEG_VERSION);
		snprintf(what, len, "version=%u", s->hdr.version);
		return 1;
	case 2: {
		uint32_t *f[] = { &s->hdr.header_size, &s->hdr.nproc, &s->hdr.ngrant,
				  &s->hdr.proc_size, &s->hdr.grant_size };
		int k = (int)(rnd() % 6);

		if (k == 5) {
			s->hdr.total_size = rnd_not((uint32_t)sizeof(*s)) ^ ((uint64_t)rnd() << 32);
			if (s->hdr.total_size == sizeof(*s))
				s->hdr.total_size++;
			snprintf(what, len, "total_size=%llu", (unsigned long long)s->hdr.total_size);
		} else {
			*f[k] = rnd_not(*f[k]);
			snprintf(what, len, "header field %d=%u", k, *f[k]);
		}
		return 1;
	}
	case 3:
		i = (uint32_t)(rnd() % RS_NPROC);
		atomic_store(&s->procs[i].state, RS_PROC_LIVE + 1 + (uint32_t)(rnd() % 0xfffffff0u));
		snprintf(what, len, "proc %u state=%u", i, atomic_load(&s->procs[i].state));
		return 0;
	case 4:
		i = (uint32_t)(rnd() % RS_NGRANT);
		atomic_store(&s->grants[i].state, RS_G_WAIT + 1 + (uint32_t)(rnd() % 0xfffffff0u));
		snprintf(what, len, "grant %u state=%u", i, atomic_load(&s->grants[i].state));
		return 0;
	case 5:
	case 6:
	case 7:
		i = (uint32_t)(rnd() % RS_NGRANT);
		g = &s->grants[i];
		atomic_store(&g->state, rnd() & 1 ? RS_G_HELD : RS_G_WAIT);
		g->owner = (uint32_t)(rnd() % RS_NPROC);
		g->mode = rnd() & 1 ? RS_G_SHARED : RS_G_EXSH;
		g->start = rnd() % (64 * MIB);
		g->end = g->start + 1 + rnd() % MIB;
		g->dev = DEV;
		g->ino = INO;
		if (kind == 5) {
			g->owner = RS_NPROC + (uint32_t)(rnd() % 0xfffff000u);
			snprintf(what, len, "grant %u owner=%u", i, g->owner);
		} else if (kind == 6) {
			g->mode = rnd_not(RS_G_SHARED);
			if (g->mode == RS_G_EXSH)
				g->mode = 0;
			snprintf(what, len, "grant %u mode=%u", i, g->mode);
		} else {
			g->end = g->start - rnd() % (g->start + 1);
			snprintf(what, len, "grant %u [%llu,%llu)", i, (unsigned long long)g->start,
				 (unsigned long long)g->end);
		}
		return 0;
	default: {
		/* Random bytes anywhere in the slot arrays: may or may not be
		 * valid; must not crash or hang either way. */
		unsigned char *p = (unsigned char *)s->procs;
		size_t span = sizeof(s->procs) + sizeof(s->grants);
		int n = 1 + (int)(rnd() % 64);

		for (int k = 0; k < n; k++)
			p[rnd() % span] = (unsigned char)rnd();
		snprintf(what, len, "%d random bytes in the slots", n);
		return 0;
	}
	}
}

#define NCORRUPT 200
#define NKINDS 9

/* Runs in a forked child: 0 if all went well, else prints why. */
static int corruption_run(const struct rs_segment *tmpl, const char *name, const char *path)
{
	struct rs_segment *s = aligned_alloc(4096, sizeof(*s));
	int bad = 0, refused = 0, accepted = 0;

	if (!s)
		return 1;
	rng_state = 0x9e3779b97f4a7c15ull;
	for (int i = 0; i < NCORRUPT; i++) {
		char what[200], why[300] = "";
		struct rs_seg_map m;
		struct rs_nt t;
		int must_refuse, r;

		memcpy(s, tmpl, sizeof(*s));
		must_refuse = corrupt(s, i % NKINDS, what, sizeof(what));
		if (write_segment(path, s, sizeof(*s), 0600) < 0) {
			printf("write %s: %s\n", path, strerror(errno));
			return 1;
		}
		r = rs_seg_attach(&m, name, 0, why, sizeof(why));
		if (r == 0)
			rs_seg_detach(&m);
		if (r < 0 && !why[0]) {
			printf("#%d (%s): refused without a reason\n", i, what);
			bad++;
		}
		if (must_refuse && r == 0) {
			printf("#%d (%s): accepted by rs_seg_attach\n", i, what);
			bad++;
		}
		why[0] = '\0';
		r = rs_nt_register(&t, name, why, sizeof(why));
		if (must_refuse && r == 0) {
			printf("#%d (%s): accepted by rs_nt_register\n", i, what);
			bad++;
		}
		if (r < 0 && !why[0]) {
			printf("#%d (%s): register refused without a reason\n", i, what);
			bad++;
		}
		if (r == 0) {
			struct rs_nt_req q = { .dev = DEV, .ino = INO, .start = 0, .end = 64 * KIB,
				       .mode = RS_G_EXSH, .window = WINDOW };
			struct rs_nt_result res;

			accepted++;
			/* Whatever it says, it must say it. */
			if (rs_nt_acquire(&t, &q, &res, why, sizeof(why)) == 0) {
				atomic_fetch_sub(&t.map.seg->grants[res.idx].gw, 1);
				rs_nt_release(&t, res.idx, res.gen);
			}
			q.start = 8 * MIB;
			q.end = 8 * MIB + 4096;
			q.mode = RS_G_SHARED;
			if (rs_nt_acquire(&t, &q, &res, why, sizeof(why)) == 0) {
				atomic_fetch_sub(&t.map.seg->grants[res.idx].gw, 1);
				rs_nt_release(&t, res.idx, res.gen);
			}
			rs_nt_unregister(&t);
		} else {
			refused++;
		}
		unlink(path);
	}
	printf("corruptions=%d refused=%d accepted=%d bad=%d\n", NCORRUPT, refused, accepted, bad);
	free(s);
	return bad != 0;
}

/* Fork, run fn(template, name, path) under alarm(secs), with a fresh
 * template segment and the extra segment name ending in tag; assert it
 * exited 0.  Its stdout goes to a pipe and into the log. */
static void run_guarded(int secs, int (*fn)(const struct rs_segment *, const char *, const char *),
			const char *tag)
{
	struct rs_segment *tmpl = template_segment();
	char name[80];
	const char *path = extra_name(name, sizeof(name), tag);
	int p[2], st;
	pid_t pid;
	static char out[16384];
	size_t used = 0;
	ssize_t k;

	cr_assert_eq(pipe(p), 0);
	fflush(NULL);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(p[1], 1);
		close(p[0]);
		alarm((unsigned)secs);
		st = fn(tmpl, name, path);
		fflush(stdout);
		_exit(st);
	}
	close(p[1]);
	while ((k = read(p[0], out + used, sizeof(out) - 1 - used)) > 0)
		used += (size_t)k;
	out[used] = '\0';
	close(p[0]);
	waitpid(pid, &st, 0);
	cr_log_info("%s", out);
	cr_assert_not(WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM,
		      "hung: still running after %d s: %s", secs, out);
	cr_assert_not(WIFSIGNALED(st), "crashed with signal %d: %s",
		      WIFSIGNALED(st) ? WTERMSIG(st) : 0, out);
	cr_assert_eq(WEXITSTATUS(st), 0, "%s", out);
	free(tmpl);
}

Test(nodelock, corrupt_random, .timeout = 60)
{
	run_guarded(40, corruption_run, "c");
}

/*
 * A busy grant whose owner slot is FREE: no live process will ever drain
 * it, and the liveness check looks only at LIVE slots.  Only corruption
 * (or a bug) makes one, and a request for its range must not wait for it
 * forever: the brief wants every wait to end with liveness re-checked.
 */
static int orphan_run(const struct rs_segment *tmpl, const char *name, const char *path)
{
	struct rs_segment *s = aligned_alloc(4096, sizeof(*s));
	int bad = 0;

	if (!s)
		return 1;
	for (int variant = 0; variant < 2; variant++) {
		uint32_t state = variant == 0 ? RS_G_HELD : RS_G_WAIT;
		struct rs_nt t;
		struct rs_nt_req q = { .dev = DEV, .ino = INO, .start = 0, .end = 64 * KIB,
				       .mode = RS_G_EXSH, .window = WINDOW };
		struct rs_nt_result res;
		char why[300] = "";
		uint32_t free_slot = RS_NPROC - 1;
		uint64_t t0;
		int r;

		memcpy(s, tmpl, sizeof(*s));
		for (uint32_t i = 0; i < RS_NGRANT; i++)
			atomic_store(&s->grants[i].state, RS_G_FREE);
		atomic_store(&s->procs[free_slot].state, RS_PROC_FREE);
		atomic_store(&s->grants[5].state, state);
		atomic_store(&s->grants[5].gw, 3);
		s->grants[5].owner = free_slot;
		s->grants[5].mode = RS_G_EXSH;
		s->grants[5].ticket = 0;
		s->grants[5].dev = DEV;
		s->grants[5].ino = INO;
		s->grants[5].start = 0;
		s->grants[5].end = MIB;
		if (write_segment(path, s, sizeof(*s), 0600) < 0)
			return 1;
		if (rs_nt_register(&t, name, why, sizeof(why)) < 0) {
			printf("%s orphan: refused at register (%s): fine\n",
			       variant ? "WAIT" : "HELD", why);
			continue;
		}
		printf("%s orphan: register accepted, acquiring its range...\n",
		       variant ? "WAIT" : "HELD");
		fflush(stdout);
		t0 = rs_nt_now_ns();
		r = rs_nt_acquire(&t, &q, &res, why, sizeof(why));
		printf("  acquire returned %d after %.0f ms (%s)\n", r,
		       (double)(rs_nt_now_ns() - t0) / 1e6, r ? why : "granted");
		if (rs_nt_now_ns() - t0 > 3000000000ull) {
			printf("  too slow\n");
			bad++;
		}
		rs_nt_unregister(&t);
		unlink(path);
	}
	free(s);
	return bad != 0;
}

Test(nodelock, corrupt_orphan, .timeout = 30)
{
	run_guarded(10, orphan_run, "o");
}

/* Garbage in the table lock word: impossible holders, a free slot's,
 * an anonymous (registering) holder that never finishes, garbage waiters.
 * Each must be taken over within a few seconds, or the table refused. */
static int lock_run(const struct rs_segment *tmpl, const char *name, const char *path)
{
	struct rs_segment *s = aligned_alloc(4096, sizeof(*s));
	const uint32_t locks[] = { RS_NPROC + 1, RS_NPROC + 7, 0xdeadbeefu, 0xffffffffu,
				   RS_NPROC, 17, 1, 0x10000u, 0x10001u };
	int bad = 0;

	if (!s)
		return 1;
	for (size_t v = 0; v < sizeof(locks) / sizeof(locks[0]) + 1; v++) {
		struct rs_nt t;
		struct rs_nt_req q = { .dev = DEV, .ino = INO, .start = 0, .end = 64 * KIB,
				       .mode = RS_G_EXSH, .window = WINDOW };
		struct rs_nt_result res;
		char why[300] = "";
		uint64_t t0 = rs_nt_now_ns(), dt;
		int r;

		memcpy(s, tmpl, sizeof(*s));
		if (v < sizeof(locks) / sizeof(locks[0])) {
			atomic_store(&s->hdr.lock, locks[v]);
			printf("lock=0x%x: ", locks[v]);
		} else {
			atomic_store(&s->hdr.lock_waiters, 0xfffffff0u);
			printf("lock_waiters=0xfffffff0: ");
		}
		if (write_segment(path, s, sizeof(*s), 0600) < 0)
			return 1;
		fflush(stdout);
		r = rs_nt_register(&t, name, why, sizeof(why));
		if (r == 0) {
			r = rs_nt_acquire(&t, &q, &res, why, sizeof(why));
			if (r == 0)
				atomic_fetch_sub(&t.map.seg->grants[res.idx].gw, 1);
			rs_nt_unregister(&t);
		}
		dt = rs_nt_now_ns() - t0;
		printf("%d after %.0f ms (%s)\n", r, (double)dt / 1e6, r ? why : "ok");
		if (dt > 3000000000ull) {
			printf("  too slow\n");
			bad++;
		}
		fflush(stdout);
		unlink(path);
	}
	free(s);
	return bad != 0;
}

Test(nodelock, corrupt_lock, .timeout = 60)
{
	run_guarded(45, lock_run, "m");
}

static void expect_refused(const char *name, const char *what)
{
	struct rs_seg_map m;
	struct rs_nt t;
	char why[300] = "";
	int r;

	r = rs_seg_attach(&m, name, 0, why, sizeof(why));
	if (r == 0)
		rs_seg_detach(&m);
	cr_assert_eq(r, -1, "%s: accepted by rs_seg_attach", what);
	cr_assert_neq(why[0], '\0', "%s: refused without a reason", what);
	cr_log_info("%s: refused: %s", what, why);
	why[0] = '\0';
	r = rs_seg_attach(&m, name, 1, why, sizeof(why));
	if (r == 0)
		rs_seg_detach(&m);
	cr_assert_eq(r, -1, "%s: accepted by rs_seg_attach(create)", what);
	why[0] = '\0';
	r = rs_nt_register(&t, name, why, sizeof(why));
	if (r == 0)
		rs_nt_unregister(&t);
	cr_assert_eq(r, -1, "%s: accepted by rs_nt_register", what);
	cr_assert_neq(why[0], '\0');
}

Test(nodelock, bad_files)
{
	struct rs_seg_map m;
	struct rs_segment *good;
	char why[300], other[80];
	const char *other_path;
	static const mode_t modes[] = { 0644, 0660, 0700, 0400, 0604, 04600 };
	const long seg = (long)sizeof(struct rs_segment);
	const long sizes[] = { 1, 4096, seg - 4096, seg - 1, seg + 1, seg + 4096, 2 * seg };

	cr_assert_eq(rs_seg_attach(&m, seg_name, 1, why, sizeof(why)), 0, "%s", why);
	good = aligned_alloc(4096, sizeof(*good));
	cr_assert_not_null(good);
	memcpy(good, m.seg, sizeof(*good));
	rs_seg_detach(&m);

	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		char what[64];

		cr_assert_eq(chmod(seg_path, modes[i]), 0);
		snprintf(what, sizeof(what), "mode %04o", (unsigned)modes[i]);
		expect_refused(seg_name, what);
	}
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		char what[64];
		long sz = sizes[i];

		cr_assert_eq(write_segment(seg_path, good, sizeof(*good), 0600), 0);
		cr_assert_eq(truncate(seg_path, sz), 0);
		snprintf(what, sizeof(what), "size %ld", sz);
		expect_refused(seg_name, what);
	}
	/* Garbage of the right size. */
	{
		unsigned char *junk = aligned_alloc(4096, sizeof(*good));

		cr_assert_not_null(junk);
		rng_state = 12345;
		for (size_t i = 0; i < sizeof(*good); i++)
			junk[i] = (unsigned char)rnd();
		cr_assert_eq(write_segment(seg_path, junk, sizeof(*good), 0600), 0);
		expect_refused(seg_name, "random bytes");
		free(junk);
	}
	/* A symlink to a good segment. */
	other_path = extra_name(other, sizeof(other), "target");
	cr_assert_eq(write_segment(other_path, good, sizeof(*good), 0600), 0);
	unlink(seg_path);
	cr_assert_eq(symlink(other_path, seg_path), 0, "symlink: %s", strerror(errno));
	expect_refused(seg_name, "symlink");
	unlink(seg_path);
	/* A FIFO (opening it O_RDWR does not block) and a directory. */
	cr_assert_eq(mkfifo(seg_path, 0600), 0);
	alarm(10);
	expect_refused(seg_name, "fifo");
	alarm(0);
	unlink(seg_path);
	cr_assert_eq(mkdir(seg_path, 0700), 0);
	expect_refused(seg_name, "directory");
	rmdir(seg_path);
	free(good);
}

Test(nodelock, foreign_owner)
{
	struct rs_seg_map m;
	char why[300];

	if (geteuid() != 0)
		cr_skip_test("needs root to chown the segment to another uid");
	cr_assert_eq(rs_seg_attach(&m, seg_name, 1, why, sizeof(why)), 0, "%s", why);
	rs_seg_detach(&m);
	cr_assert_eq(chown(seg_path, 65534, 65534), 0, "chown: %s", strerror(errno));
	expect_refused(seg_name, "owned by uid 65534");
}

/*
 * FIFO: A holds a busy grant; B asks and queues; then C asks for an
 * overlapping range.  B must be granted first, and C not while B holds it.
 */
Test(nodelock, fifo)
{
	struct agent *a = agent_start(), *b = agent_start(), *c = agent_start();
	struct cmd qb = acq_cmd(0, 64 * KIB, RS_G_EXSH, 0, 1);
	struct cmd qc = acq_cmd(32 * KIB, 48 * KIB, RS_G_EXSH, 0, 1);
	struct rep ra, rb, rc;
	uint32_t widx;

	agent_register(a);
	agent_register(b);
	agent_register(c);
	ra = acquire(a, 0, 64 * KIB, RS_G_EXSH, WINDOW, 0);
	simple(a, OP_ENTER, ra.idx, 0);
	agent_send(b, &qb);
	cr_assert_not(agent_poll(b, &rb, MUSTNT_MS));
	cr_assert_eq(wait_queued(b->me, &widx), 1, "B did not queue");
	agent_send(c, &qc);
	cr_assert_not(agent_poll(c, &rc, MUSTNT_MS));
	cr_assert_eq(wait_queued(c->me, NULL), 1, "C did not queue");
	/* A drains and lets go: B is next, and enters the grant. */
	simple(a, OP_LEAVE, ra.idx, 0);
	simple(a, OP_RELEASE, ra.idx, ra.gen);
	rb = agent_wait(b, MUST_MS, "B's acquire after A released");
	cr_assert_eq(rb.rc, 0, "%s", rb.why);
	cr_assert_eq(rb.lost, 0, "B's fresh grant was revoked before B could use it");
	cr_assert_not(agent_poll(c, &rc, MUSTNT_MS), "C granted while B holds its busy grant");
	simple(b, OP_LEAVE, rb.idx, 0);
	simple(b, OP_RELEASE, rb.idx, rb.gen);
	rc = agent_wait(c, MUST_MS, "C's acquire after B released");
	cr_assert_eq(rc.rc, 0, "%s", rc.why);
	cr_assert_eq(rc.lost, 0);
	cr_assert_lt(rb.seq, rc.seq, "C (seq %llu) was granted before B (seq %llu)",
		     (unsigned long long)rc.seq, (unsigned long long)rb.seq);
}

static void wait_starved(struct agent *v);

/* A newcomer overlapping only a starved waiter (not the holder) queues
 * behind it.  Before its waiter marks itself starved (here 100 ms of
 * waiting, nobody having overtaken it; seen by the waiter while it runs:
 * nodelock.c), a newcomer may take the free range: that is the
 * competitive phase, so the test waits for the mark (a loaded machine
 * once let C in first while B had not run).  And
 * a starved waiter that has not scanned for RS_PRESENT_NS counts as not
 * running and holds nobody back (stopped_waiter_* test that rule): under
 * TSan on a loaded machine B went 50 ms unscheduled and C rightly went
 * first, so here B counts as running however long it sleeps.
 */
Test(nodelock, fifo_newcomer_behind_waiter)
{
	struct agent *a, *b, *c;
	struct cmd qb = acq_cmd(0, 128 * KIB, RS_G_EXSH, 0, 1);
	struct cmd qc = acq_cmd(96 * KIB, 112 * KIB, RS_G_EXSH, 0, 1);
	struct rep ra, rb, rc;

	rs_nt_present_ns = 1000ull * 1000 * 1000 * 1000;	/* agents inherit it */
	a = agent_start();
	b = agent_start();
	c = agent_start();

	agent_register(a);
	agent_register(b);
	agent_register(c);
	ra = acquire(a, 0, 64 * KIB, RS_G_EXSH, 0, 0);
	simple(a, OP_ENTER, ra.idx, 0);
	agent_send(b, &qb);	/* B: [0,128K) waits for A's [0,64K) */
	cr_assert_not(agent_poll(b, &rb, MUSTNT_MS));
	wait_starved(b);
	agent_send(c, &qc);	/* C: [96K,112K), free, but B asked first */
	cr_assert_not(agent_poll(c, &rc, MUSTNT_MS),
		      "C overtook B's earlier overlapping request");
	simple(a, OP_LEAVE, ra.idx, 0);
	simple(a, OP_RELEASE, ra.idx, ra.gen);
	rb = agent_wait(b, MUST_MS, "B after A released");
	cr_assert_eq(rb.rc, 0, "%s", rb.why);
	cr_assert_eq(rb.lost, 0);
	simple(b, OP_LEAVE, rb.idx, 0);
	simple(b, OP_RELEASE, rb.idx, rb.gen);
	rc = agent_wait(c, MUST_MS, "C after B released");
	cr_assert_eq(rc.rc, 0, "%s", rc.why);
	cr_assert_lt(rb.seq, rc.seq);
}

/* V's WAIT entry, once it has waited long enough to be starved. */
static void wait_starved(struct agent *v)
{
	uint32_t widx = 0;
	int n = wait_queued(v->me, &widx);

	cr_assert(n == 1 && (view_attach()->grants[widx].flags & RS_WF_STARVED),
		  "V never queued as starved (%d WAIT entries)", n);
}

static struct rep acquire_exact(struct agent *a, uint64_t start, uint64_t end, int enter)
{
	struct cmd c = acq_cmd(start, end, RS_G_EXSH, WINDOW, enter);
	struct rep r;

	c.exact = 1;
	r = agent_do(a, &c, "exact acquire");
	cr_assert_eq(r.rc, 0, "%s", r.why);
	cr_assert_eq(r.lost, 0);
	return r;
}

/* An exact grant of [start, end) whose call has come and gone: left in
 * the table, idle and closed, for the next walk of its chain to free. */
static struct rep acquire_left(struct agent *a, uint64_t start, uint64_t end)
{
	struct rep r = acquire_exact(a, start, end, 1);

	exact_call_ends(a, r.idx);
	return r;
}

/*
 * Starved means overtaken, not merely waiting.  V waits for A's busy
 * grant, older than V's request, for 300 ms; C then asks for a free range
 * that overlaps only V's request.  With the waiting rule long (60 s), V
 * waited only for a holder that was there first: C goes through at once
 * (on an oversubscribed node such waits are holders descheduled, and
 * queueing behind them made every hand-over wait for the scheduler).
 * Control: the rule before, every waiter starved after 1 ms
 * (rs_nt_starve_ns = 1 ms), queues C behind V.  Returns whether C got in
 * while A still held.
 */
enum overtake { NOT_OVERTAKEN, OVERTAKEN_BUSY, OVERTAKEN_IDLE, OVERTAKEN_LEFT };

/* rs_nt_starve_ns: longer than any test, or the rule before (1 ms). */
#define LONG_NS (60ull * 1000 * 1000 * 1000)
#define MS_NS   (1000ull * 1000)

/* Stop V where it does not hold the table lock (it wakes every 20 ms
 * to walk the chain under it), so that others can still acquire. */
static void stop_outside_table_lock(struct agent *v)
{
	struct rs_segment *s = view_attach();

	for (int i = 0;; i++) {
		kill(v->pid, SIGSTOP);
		wait_stopped(v->pid);
		if (RS_LOCK_SLOT(atomic_load(&s->hdr.lock)) != v->me + 1)
			return;
		kill(v->pid, SIGCONT);
		cr_assert_lt(i, 1000, "V held the table lock every time it was stopped");
		usleep(1000);
	}
}

struct waiter_rig {
	uint64_t starve_ns;     /* rs_nt_starve_ns for the agents */
	enum overtake overtake;
	int expect_pass;        /* wait for C to pass (MUST_MS), not for it to stay out */
	uint32_t next_ticket;   /* the ticket the table hands out next, if not 0 */
	int full_table;         /* F fills every slot but A's with idle grants first */
};

static int newcomer_passes_waiter(struct waiter_rig o)
{
	struct agent *a, *v, *x = NULL, *c, *f = NULL;
	struct cmd qv = acq_cmd(0, 128 * KIB, RS_G_EXSH, 0, 1);
	struct cmd qc = acq_cmd(100 * KIB, 112 * KIB, RS_G_EXSH, 0, 1);
	struct rep ra, rv, rx = { 0 }, rc;
	struct rs_segment *s;
	uint32_t vt;
	uint64_t until;
	int passed = 0;

	rs_nt_starve_ns = o.starve_ns;	/* agents inherit it */
	rs_nt_present_ns = 1000ull * 1000 * 1000 * 1000;
	a = agent_start();
	v = agent_start();
	c = agent_start();
	agent_register(a);
	agent_register(v);
	agent_register(c);
	if (o.next_ticket)
		view_attach()->hdr.next_ticket = o.next_ticket - 1;
	if (o.full_table) {
		struct cmd many = { .op = OP_ACQUIRE_MANY, .mode = RS_G_EXSH, .dev = DEV,
				    .ino = INO + 1, .start = 0, .n = RS_NGRANT - 1 };
		struct rep r;

		f = agent_start();
		agent_register(f);
		agent_send(f, &many);
		r = agent_wait(f, 60000, "16383 acquires");
		cr_assert_eq(r.rc, 0, "%s", r.why);
	}
	ra = acquire(a, 0, 64 * KIB, RS_G_EXSH, 0, 1);
	if (f)
		cr_assert_eq(grants_of(f->me, RS_G_HELD, NULL) + 1, RS_NGRANT, "the table is not full");
	agent_send(v, &qv);	/* V: [0,128K) waits for A's [0,64K) */
	cr_assert_not(agent_poll(v, &rv, MUSTNT_MS), "V granted while A is inside");
	/* V has looked: it marks A's grant wanted in the same hold of the
	 * table lock in which it takes its ticket, the table's last. */
	s = view_attach();
	until = now_ns() + MUST_MS * 1000000ull;
	while (!(atomic_load(&s->grants[ra.idx].gw) & RS_WANTED) && now_ns() < until)
		usleep(1000);
	cr_assert(atomic_load(&s->grants[ra.idx].gw) & RS_WANTED, "V never met A's grant");
	vt = s->hdr.next_ticket;
	if (o.overtake != NOT_OVERTAKEN) {
		/* X: [64K,96K), free, granted over V's head: V has been
		 * overtaken, and says so at its next scan, whether X is
		 * still inside then or is done and its grant idle. */
		x = agent_start();
		agent_register(x);
		if (o.overtake != OVERTAKEN_BUSY)	/* V must not look while X is inside */
			stop_outside_table_lock(v);
		if (o.overtake == OVERTAKEN_LEFT) {	/* an exact call's, left */
			rx = acquire_left(x, 64 * KIB, 96 * KIB);
			x = NULL;
		} else {
			rx = acquire(x, 64 * KIB, 96 * KIB, RS_G_EXSH, 0, 1);
		}
		if (o.overtake == OVERTAKEN_IDLE) {	/* cached, nobody inside */
			simple(x, OP_LEAVE, rx.idx, 0);
			x = NULL;
		}
		if (o.overtake != OVERTAKEN_BUSY)
			kill(v->pid, SIGCONT);
	}
	/* Starved by now, if the rule says so: seen at V's next scan. */
	if (o.overtake != NOT_OVERTAKEN || o.starve_ns < MUSTNT_MS * 1000000ull)
		wait_starved(v);
	agent_send(c, &qc);	/* C: [100K,112K), free, but V asked first */
	if (o.expect_pass) {
		passed = agent_poll(c, &rc, MUST_MS);
	} else {
		/* Kept out only once it has looked: behind V's entry it takes
		 * the next ticket.  Then it must stay out. */
		until = now_ns() + MUST_MS * 1000000ull;
		while (s->hdr.next_ticket == vt && now_ns() < until &&
		       !(passed = agent_poll(c, &rc, 1)))
			;
		cr_assert(passed || s->hdr.next_ticket != vt, "C never looked");
		passed = passed || agent_poll(c, &rc, MUSTNT_MS);
	}
	if (passed) {
		cr_assert_eq(rc.rc, 0, "%s", rc.why);
		simple(c, OP_LEAVE, rc.idx, 0);
		simple(c, OP_RELEASE, rc.idx, rc.gen);
	}
	simple(a, OP_LEAVE, ra.idx, 0);
	simple(a, OP_RELEASE, ra.idx, ra.gen);
	if (x) {
		simple(x, OP_LEAVE, rx.idx, 0);
		simple(x, OP_RELEASE, rx.idx, rx.gen);
	}
	rv = agent_wait(v, MUST_MS, "V after A (and X) released");
	cr_assert_eq(rv.rc, 0, "%s", rv.why);
	simple(v, OP_LEAVE, rv.idx, 0);
	simple(v, OP_RELEASE, rv.idx, rv.gen);
	if (!passed) {
		rc = agent_wait(c, MUST_MS, "C after V released");
		cr_assert_eq(rc.rc, 0, "%s", rc.why);
		cr_assert_lt(rv.seq, rc.seq, "C, queued behind V, was granted first");
	}
	return passed;
}

Test(nodelock, waiter_behind_older_holder_not_starved, .timeout = 60)
{
	cr_assert(newcomer_passes_waiter((struct waiter_rig){ .starve_ns = LONG_NS, .expect_pass = 1 }),
		  "C queued behind V, which nobody overtook: it only waited for an older holder");
}

Test(nodelock, waiter_behind_older_holder_control, .timeout = 60)
{
	cr_assert_not(newcomer_passes_waiter((struct waiter_rig){ .starve_ns = MS_NS }),
		      "control: with every 1 ms of waiting starving its waiter, C still passed V: "
		      "the rig does not show the queue");
}

/* The other half of the rule: V overtaken by X (granted after V asked)
 * is starved at once, whatever rs_nt_starve_ns says, and C then waits
 * behind it; also when X was done before V looked again (on an
 * oversubscribed node a call takes microseconds and a waiter's next look
 * milliseconds).  waiter_behind_older_holder_not_starved is their
 * control: the same rig without X lets C through. */
Test(nodelock, overtaken_waiter_starved, .timeout = 60)
{
	cr_assert_not(newcomer_passes_waiter((struct waiter_rig){ .starve_ns = LONG_NS,
								  .overtake = OVERTAKEN_BUSY }),
		      "C passed V, which X had overtaken");
}

/* Across the ticket counter's wrap: V starved with the last ticket before
 * it, C's is 0.  A plain comparison of tickets let C, and every request
 * queued after the wrap, pass V for good; waiter_behind_older_holder_control
 * is the same rig away from the wrap. */
Test(nodelock, starved_waiter_kept_across_ticket_wrap, .timeout = 60)
{
	cr_assert_not(newcomer_passes_waiter((struct waiter_rig){ .starve_ns = MS_NS,
								  .next_ticket = UINT32_MAX }),
		      "C (ticket 0) passed V, starved with ticket %u", UINT32_MAX);
}

Test(nodelock, overtaken_by_a_finished_request_starved, .timeout = 60)
{
	cr_assert_not(newcomer_passes_waiter((struct waiter_rig){ .starve_ns = LONG_NS,
								  .overtake = OVERTAKEN_IDLE }),
		      "C passed V, which X had overtaken and left idle before V looked again");
	teardown();
	setup();
	cr_assert_not(newcomer_passes_waiter((struct waiter_rig){ .starve_ns = LONG_NS,
								  .overtake = OVERTAKEN_LEFT }),
		      "C passed V, which X's exact call had overtaken and left before V looked again");
}

/* A's acquire/release cycles on [0, 64K) for ms: how many completed.  An
 * acquire still unanswered at the end is left pending (*pending). */
static int cycles(struct agent *a, int ms, int max, int *pending)
{
	uint64_t end = now_ns() + (uint64_t)ms * 1000000ull;
	int n = 0;

	*pending = 0;
	while (n < max && now_ns() < end) {
		struct cmd q = acq_cmd(0, 64 * KIB, RS_G_EXSH, 0, 0);
		struct rep r;
		int left = (int)((end - now_ns()) / 1000000ull) + 1;

		agent_send(a, &q);
		if (!agent_poll(a, &r, left)) {
			*pending = 1;
			break;
		}
		cr_assert_eq(r.rc, 0, "%s", r.why);
		simple(a, OP_RELEASE, r.idx, r.gen);
		n++;
	}
	return n;
}

/*
 * A process stopped (SIGSTOP) while it waits for a range, after it has
 * waited long enough to be starved: it holds nobody back.  A holder keeps
 * acquiring and releasing the range while it is stopped (40 cycles, with
 * ms as a bound for a hang, not a speed), and the waiter gets the range
 * when it resumes.  Control: the same rig with a presence window longer
 * than the test (the rule before: a starved entry held everyone back
 * whoever it belonged to) lets the holder complete no cycle in 2 s, which
 * shows the count can see the throttle.
 */
static int stopped_waiter_rig(int *alone_per_s, int ms)
{
	struct agent *a = agent_start(), *v = agent_start();
	struct cmd qv = acq_cmd(0, 64 * KIB, RS_G_EXSH, 0, 0);
	struct rep ra, rv;
	int n, pending;

	agent_register(a);
	agent_register(v);
	ra = acquire(a, 0, 64 * KIB, RS_G_EXSH, 0, 0);
	simple(a, OP_ENTER, ra.idx, 0);
	agent_send(v, &qv);
	cr_assert_not(agent_poll(v, &rv, MUSTNT_MS), "V granted while A is inside");
	wait_starved(v);
	kill(v->pid, SIGSTOP);
	wait_stopped(v->pid);
	simple(a, OP_LEAVE, ra.idx, 0);
	simple(a, OP_RELEASE, ra.idx, ra.gen);
	n = cycles(a, ms, 40, &pending);
	kill(v->pid, SIGCONT);
	rv = agent_wait(v, MUST_MS, "V's acquire once it resumed");
	cr_assert_eq(rv.rc, 0, "%s", rv.why);
	if (pending) {
		struct rep r = agent_wait(a, MUST_MS, "A's acquire once V resumed");

		cr_assert_eq(r.rc, 0, "%s", r.why);
		simple(a, OP_RELEASE, r.idx, r.gen);
		pending = 0;
	}
	if (alone_per_s)
		*alone_per_s = cycles(a, 1000, INT_MAX, &pending);
	cr_assert_not(pending, "A blocked with nobody waiting");
	return n;
}

Test(nodelock, stopped_waiter_holds_nobody_back, .timeout = 120)
{
	int ctl, n, alone = 0;

	uint64_t t0;

	rs_nt_present_ns = 1000ull * 1000 * 1000 * 1000;	/* agents inherit it */
	ctl = stopped_waiter_rig(NULL, 2000);
	teardown();
	setup();
	rs_nt_present_ns = RS_PRESENT_NS;
	t0 = now_ns();
	n = stopped_waiter_rig(&alone, 5 * MUST_MS);
	cr_log_info("holder cycles with a starved waiter stopped: %d in %.2f s (rig included); "
		    "alone afterwards: %d/s; control (stopped waiter holds all back): %d in 2 s",
		    n, (double)(now_ns() - t0) / 1e9, alone, ctl);
	cr_assert_leq(ctl, 1, "control: the holder completed %d cycles behind a stopped starved "
		      "waiter under the old rule: the rig does not see the throttle", ctl);
	cr_assert_eq(n, 40, "the holder completed only %d of 40 cycles within %d ms while a "
		     "starved waiter was stopped", n, 5 * MUST_MS);
}

/*
 * The transitive case: V (stopped, starved) waited for A's busy grant on
 * [0, 64K); W1 asks for [32K, 128K) and W2 for [96K, 160K), which
 * overlaps W1's request and neither A's nor V's.  W2 waits behind W1,
 * W1 behind A, a real holder: after a second W2 names A, and `rangeshim
 * locks` lists A as W2's BLOCKER.  Once A lets go, W1 and then W2 are
 * granted while V stays stopped.  Control: under the old rule (presence
 * longer than the test) W1 is not granted while V is stopped.
 */
static int transitive_rig(int control)
{
	struct agent *a = agent_start(), *v = agent_start(), *w1 = agent_start(),
		     *w2 = agent_start();
	struct cmd qv = acq_cmd(0, 64 * KIB, RS_G_EXSH, 0, 0);
	struct cmd q1 = acq_cmd(32 * KIB, 128 * KIB, RS_G_EXSH, 0, 1);
	struct cmd q2 = acq_cmd(96 * KIB, 160 * KIB, RS_G_EXSH, 0, 1);
	struct cmd err = { .op = OP_STDERR };
	struct rep ra, rv, r1, r2;
	char log[100], apid[32];
	int granted;

	snprintf(log, sizeof(log), "/tmp/rs-trans-%d.log", (int)getpid());
	snprintf(err.name, sizeof(err.name), "%s", log);
	agent_do(w2, &err, "redirect stderr");
	agent_register(a);
	agent_register(v);
	agent_register(w1);
	agent_register(w2);
	ra = acquire(a, 0, 64 * KIB, RS_G_EXSH, 0, 0);
	simple(a, OP_ENTER, ra.idx, 0);
	agent_send(v, &qv);
	wait_starved(v);
	kill(v->pid, SIGSTOP);
	wait_stopped(v->pid);
	agent_send(w1, &q1);
	cr_assert_not(agent_poll(w1, &r1, MUSTNT_MS), "W1 granted while A is inside");
	wait_starved(w1);
	agent_send(w2, &q2);
	cr_assert_not(agent_poll(w2, &r2, 1500), "W2 granted (rc %d, %s, [%llu,%llu)) while W1 "
		      "waits ahead of it (control %d)", r2.rc, r2.why, (unsigned long long)r2.start,
		      (unsigned long long)r2.end, control);
	snprintf(apid, sizeof(apid), "pid %d (", (int)a->pid);
	if (!control) {
		char cmd[300], out[4096];
		FILE *p;
		size_t k;

		cr_assert(file_has(log, apid), "W2 did not name the holder A (%s)", apid);
		snprintf(cmd, sizeof(cmd), "%s/rangeshim locks --shm %s -o PID,STATE,BLOCKER 2>&1",
			 RS_BUILD_DIR, seg_name);
		p = popen(cmd, "r");
		cr_assert_not_null(p);
		k = fread(out, 1, sizeof(out) - 1, p);
		out[k] = '\0';
		pclose(p);
		cr_log_info("%s", out);
		snprintf(cmd, sizeof(cmd), "%d WAIT %d", (int)w2->pid, (int)a->pid);
		{
			/* Columns are padded: compare with runs of blanks squeezed. */
			char sq[4096];
			size_t o = 0;

			for (size_t i = 0; out[i] && o + 1 < sizeof(sq); i++)
				if (!(out[i] == ' ' && o && sq[o - 1] == ' '))
					sq[o++] = out[i];
			sq[o] = '\0';
			cr_assert(strstr(sq, cmd), "locks does not list A (%d) as W2's BLOCKER: %s",
				  (int)a->pid, out);
		}
	}
	simple(a, OP_LEAVE, ra.idx, 0);
	simple(a, OP_RELEASE, ra.idx, ra.gen);
	granted = agent_poll(w1, &r1, control ? 1000 : MUST_MS);
	if (granted) {
		cr_assert_eq(r1.rc, 0, "%s", r1.why);
		simple(w1, OP_LEAVE, r1.idx, 0);
		simple(w1, OP_RELEASE, r1.idx, r1.gen);
		r2 = agent_wait(w2, MUST_MS, "W2 after W1 let go");
		cr_assert_eq(r2.rc, 0, "%s", r2.why);
		simple(w2, OP_LEAVE, r2.idx, 0);
		simple(w2, OP_RELEASE, r2.idx, r2.gen);
	}
	kill(v->pid, SIGCONT);
	rv = agent_wait(v, MUST_MS, "V once it resumed");
	cr_assert_eq(rv.rc, 0, "%s", rv.why);
	unlink(log);
	return granted;
}

/* Until pid sleeps in a futex wait (an agent waiting for a command is in
 * read): counted in lock_waiters is not yet asleep, and a waiter that is
 * not asleep at the release sees lock_seq moved and takes the lock
 * without any wake, whatever the wake rule. */
static void wait_in_futex(pid_t pid)
{
	uint64_t t0 = now_ns();
	long nr;

	while ((nr = rs_proc_syscall(pid)) != SYS_futex) {
		cr_assert_lt(now_ns() - t0, (uint64_t)MUST_MS * 1000000,
			     "pid %d not asleep in a futex (in system call %ld)", (int)pid, nr);
		sleep_ms(5);
	}
}

/*
 * A table-lock waiter killed in its sleep never takes its count out of
 * lock_waiters.  A release then finds a waiter to wake and nobody asleep,
 * and the wake it sends reaches nobody: that wake must not hold back the
 * next real sleeper's (table_unlock_as: one older than rs_nt_woken_ms
 * no longer counts).  Waiters sleep 30 s here, so one that is not woken
 * cannot pass for one that is.  Returns whether B was woken at A's
 * second release.
 */
static int killed_waiter_rig(void)
{
	struct agent *a = agent_start(), *k = agent_start(), *b = agent_start();
	struct cmd lk = { .op = OP_LOCK_TABLE }, un = { .op = OP_UNLOCK_TABLE };
	struct rs_segment *s;
	struct rep r;

	agent_register(a);
	agent_register(k);
	agent_register(b);
	s = view_attach();
	agent_do(a, &lk, "A takes the table lock");
	agent_send(k, &lk);
	wait_in_futex(k->pid);
	agent_kill(k);
	agent_do(a, &un, "A lets go: the wake finds nobody");
	sleep_ms(100);		/* that wake is old now */
	agent_do(a, &lk, "A takes the table lock again");
	agent_send(b, &lk);
	wait_in_futex(b->pid);
	cr_assert_geq(atomic_load(&s->hdr.lock_waiters), 2, "K's count was taken out");
	agent_do(a, &un, "A lets go again");
	return agent_poll(b, &r, MUST_MS);
}

Test(nodelock, table_lock_killed_waiter, .timeout = 60)
{
	rs_nt_lock_sleep_ns = 30ull * 1000 * 1000 * 1000;	/* agents inherit it */
	cr_assert(killed_waiter_rig(), "B slept on after the release: a dead waiter's wake held "
		  "it back");
}

Test(nodelock, table_lock_killed_waiter_control, .timeout = 60)
{
	/* Every wake holds the others back for good, as a flag cleared
	 * only by the woken waiter would: B sleeps through the release. */
	rs_nt_lock_sleep_ns = 30ull * 1000 * 1000 * 1000;
	rs_nt_woken_ms = UINT32_MAX;
	cr_assert_not(killed_waiter_rig(), "control: B was woken although every wake was held "
		      "back; the rig cannot tell");
}

/* In a child: register on the default table, write its path to fd. */
static void register_default(int fd)
{
	struct rs_nt t;
	char why[256];

	memset(&t, 0, sizeof(t));
	if (rs_nt_register(&t, "", why, sizeof(why)) < 0)
		snprintf(t.map.path, sizeof(t.map.path), "error: %s", why);
	if (write_full(fd, t.map.path, sizeof(t.map.path)) < 0)
		_exit(2);
}

/*
 * The default table depends on who is alive when a process attaches
 * (segment.c, default_path): a /dev/shm table is kept only while it has
 * live processes.  A child forked by a process attached there, which
 * first attaches after its parent left and /run/user/<uid> appeared, must
 * pick the table a newcomer picks; had it kept its parent's choice, the
 * two would be live on two tables, excluding nothing.
 */
Test(nodelock, default_table_chosen_afresh, .timeout = 60)
{
	char rt[64], shm[64], first[300], child[300], fresh[300];
	struct stat st;
	int go[2], out[2], shut[2], st_w;
	pid_t p;

	if (geteuid() != 0)
		cr_skip_test("needs root to make /run/user/<uid>");
	snprintf(rt, sizeof(rt), "/run/user/%u", (unsigned)geteuid());
	snprintf(shm, sizeof(shm), "/dev/shm/rangeshim-%u", (unsigned)getuid());
	if (lstat(rt, &st) == 0 || lstat(shm, &st) == 0)
		cr_skip_test("%s or %s exists (a real session or table): not ours to move", rt,
			     shm);
	cr_assert_eq(mkdir("/run/user", 0755) == 0 || errno == EEXIST, 1);
	cr_assert_eq(pipe(go), 0);
	cr_assert_eq(pipe(out), 0);
	cr_assert_eq(pipe(shut), 0);
	p = fork();
	cr_assert_geq(p, 0);
	if (p == 0) {
		struct rs_nt t;
		char why[256], c;
		pid_t k;

		memset(&t, 0, sizeof(t));
		if (rs_nt_register(&t, "", why, sizeof(why)) < 0)
			_exit(3);
		if (write_full(out[1], t.map.path, sizeof(t.map.path)) < 0)
			_exit(2);
		k = fork();
		if (k == 0) {
			/* As the library's fork handler: not the parent's
			 * liveness, not its slot. */
			close(t.map.fd);
			close(shut[1]);	/* the parent's description is ours no more */
			if (read(go[0], &c, 1) != 1)
				_exit(4);
			register_default(out[1]);
			_exit(0);
		}
		rs_nt_unregister(&t);	/* the parent leaves */
		rs_seg_detach(&t.map);
		_exit(k > 0 ? 0 : 5);
	}
	cr_assert_eq(waitpid(p, &st_w, 0), p);
	cr_assert(WIFEXITED(st_w) && WEXITSTATUS(st_w) == 0, "parent status %d", st_w);
	cr_assert_eq(read_full(out[0], first, sizeof(first)), 0);
	cr_assert_str_eq(first, shm, "the parent attached to %s", first);
	/* Until the child has closed its copy of the parent's descriptor,
	 * which holds the parent's liveness byte: the parent looks alive. */
	close(shut[1]);
	cr_assert_eq(read(shut[0], &st_w, 1), 0);
	cr_assert_eq(mkdir(rt, 0700), 0, "mkdir %s: %s", rt, strerror(errno));	/* a login */
	p = fork();
	cr_assert_geq(p, 0);
	if (p == 0) {
		register_default(out[1]);	/* a newcomer */
		_exit(0);
	}
	cr_assert_eq(read_full(out[0], fresh, sizeof(fresh)), 0);
	cr_assert_eq(write(go[1], "g", 1), 1);
	cr_assert_eq(read_full(out[0], child, sizeof(child)), 0);
	waitpid(p, NULL, 0);
	unlink(shm);
	snprintf(first, sizeof(first), "%s/rangeshim-table", rt);
	unlink(first);
	rmdir(rt);
	cr_assert_str_eq(child, fresh, "the parent's child attached to %s, a newcomer to %s",
			 child, fresh);
}

Test(nodelock, stopped_waiter_not_transitive, .timeout = 60)
{
	int ctl;

	rs_nt_warn_ns = 1000000000ull;	/* agents inherit it */
	rs_nt_present_ns = 1000ull * 1000 * 1000 * 1000;
	ctl = transitive_rig(1);
	teardown();
	setup();
	/* Long enough that W1, running, counts even on a loaded machine
	 * (it wakes every 20 ms), and V, stopped for 2 s before A lets go,
	 * does not. */
	rs_nt_present_ns = 1000ull * 1000 * 1000;
	cr_assert(transitive_rig(0), "W1 was not granted while a stopped waiter sat ahead of it");
	cr_assert_not(ctl, "control: W1 was granted past a stopped starved waiter under the old "
		      "rule: the rig does not show the block");
}

/*
 * A process alone on a file is granted all of it (req.whole), and keeps
 * it however it moves; when another process arrives, the idle whole-file
 * grant is revoked, and the first one's next grant is a window again,
 * clipped at the newcomer's.
 */
Test(nodelock, whole_file_when_alone)
{
	struct agent *a = agent_start(), *b = agent_start();
	struct cmd q = acq_cmd(100 * MIB, 100 * MIB + 4 * KIB, RS_G_EXSH, WINDOW, 0);
	struct rep ra, rb;

	agent_register(a);
	agent_register(b);
	q.whole = 1;
	ra = agent_do(a, &q, "acquire, alone");
	cr_assert_eq(ra.rc, 0, "%s", ra.why);
	cr_assert_eq(ra.start, 0, "a lone process got [%llu, %llu), not the whole file",
		     (unsigned long long)ra.start, (unsigned long long)ra.end);
	cr_assert_eq(ra.end, RS_RANGE_EOF, "a lone process got [%llu, %llu), not the whole file",
		     (unsigned long long)ra.start, (unsigned long long)ra.end);
	/* B arrives elsewhere in the file: A's idle grant goes. */
	q.start = 8 * MIB;
	q.end = 8 * MIB + 4 * KIB;
	rb = agent_do(b, &q, "acquire by a second process");
	cr_assert_eq(rb.rc, 0, "%s", rb.why);
	cr_assert_eq(rb.revoked, 1, "B did not revoke A's whole-file grant");
	cr_assert(rb.start > 0 || rb.end < RS_RANGE_EOF, "B took the whole file from A");
	cr_assert_neq(simple(a, OP_GW, ra.idx, 0), ra.gen, "A's grant was not revoked");
	/* A again: no longer alone, a window clipped at B's grant. */
	q.start = 0;
	q.end = 4 * KIB;
	ra = agent_do(a, &q, "acquire with B present");
	cr_assert_eq(ra.rc, 0, "%s", ra.why);
	cr_assert_leq(ra.end, rb.start, "A's grant [%llu, %llu) overlaps B's [%llu, %llu)",
		      (unsigned long long)ra.start, (unsigned long long)ra.end,
		      (unsigned long long)rb.start, (unsigned long long)rb.end);
	cr_assert_eq(ra.end, WINDOW, "A's grant [%llu, %llu) is not its window",
		     (unsigned long long)ra.start, (unsigned long long)ra.end);
	assert_no_conflicting_grants();
}

Test(nodelock, table_full, .timeout = 120)
{
	struct agent *a = agent_start(), *b = agent_start();
	struct cmd many = { .op = OP_ACQUIRE_MANY, .mode = RS_G_EXSH, .dev = DEV, .ino = INO,
			    .start = 0, .n = RS_NGRANT };
	struct cmd all = { .op = OP_ENTER_ALL };
	struct cmd q = acq_cmd(64 * MIB, 64 * MIB + 4096, RS_G_EXSH, 0, 0);
	struct rep r, rb;
	uint32_t held;

	agent_register(a);
	agent_register(b);
	/* 16384 acquisitions, each scanning the slots in use: seconds
	 * on a loaded machine. */
	agent_send(a, &many);
	r = agent_wait(a, 60000, "16384 acquires");
	cr_assert_eq(r.rc, 0, "%s", r.why);
	held = (uint32_t)grants_of(a->me, RS_G_HELD, NULL);
	cr_assert_eq(held, RS_NGRANT, "A holds %u grants", held);
	/* Slot 0 becomes A's most recent grant (granted again, later than
	 * the others by more than the coarse clock's tick). */
	sleep_ms(50);
	simple(a, OP_RELEASE, 0, simple(a, OP_GW, 0, 0));
	many.n = 1;
	r = agent_do(a, &many, "slot 0 again");
	cr_assert_eq(r.rc, 0, "%s", r.why);
	cr_assert_eq(grants_of(a->me, RS_G_HELD, NULL), RS_NGRANT);
	/* All idle: one is evicted, the least recently granted (not slot 0,
	 * which the slot order would take), no wait. */
	{
		uint32_t gen0 = simple(a, OP_GW, 0, 0);

		rb = acquire(b, 64 * MIB, 64 * MIB + 4096, RS_G_EXSH, 0, 0);
		cr_assert_neq(rb.idx, 0u, "the most recent grant was evicted, not the oldest");
		cr_assert_eq(simple(a, OP_GW, 0, 0), gen0, "A's most recent grant was revoked");
	}
	cr_assert_not(rb.waited, "waited although idle grants could be evicted");
	cr_assert_eq(grants_of(a->me, RS_G_HELD, NULL), RS_NGRANT - 1);
	simple(b, OP_RELEASE, rb.idx, rb.gen);
	/* Fill the free slot again, make all of A's busy: B must wait. */
	many.start = 32 * MIB;
	many.n = 1;
	r = agent_do(a, &many, "one more acquire");
	cr_assert_eq(r.rc, 0, "%s", r.why);
	r = agent_do(a, &all, "enter all");
	cr_assert_eq(r.users, RS_NGRANT);
	agent_send(b, &q);
	cr_assert_not(agent_poll(b, &rb, MUSTNT_MS), "granted although the table is full of busy grants");
	/* One of A's grants drains and is released: B gets its slot. */
	simple(a, OP_LEAVE, 7, 0);
	simple(a, OP_RELEASE, 7, simple(a, OP_GW, 7, 0));
	rb = agent_wait(b, MUST_MS, "acquire after a slot was freed");
	cr_assert_eq(rb.rc, 0, "%s", rb.why);
	cr_assert(rb.table_full, "result does not report the full table");
	cr_assert_eq(rb.idx, 7u);
}

/*
 * A starved waiter in a table full of idle grants still gets its WAIT
 * entry (it evicts one, an idle grant being a cache), so a newcomer that
 * could itself evict one does not pass it.  F holds every slot but one,
 * idle, on another file; A holds the last one, busy; V waits, starved
 * after 1 ms here.  Without the eviction V had no entry and C passed.
 */
Test(nodelock, starved_waiter_queues_in_full_table, .timeout = 120)
{
	cr_assert_not(newcomer_passes_waiter((struct waiter_rig){ .starve_ns = MS_NS,
								  .full_table = 1 }),
		      "C passed V, starved in a full table");
}

/* ---- exact grants and waiting on the grant (issue 9) ---- */

/*
 * An exact request gets the call's range, though nothing stops expansion;
 * met says whether another process had a grant in its window.  Control:
 * the same request without exact is expanded.
 */
Test(nodelock, exact_not_expanded)
{
	struct agent *a = agent_start(), *b = agent_start();
	struct rep ra, rb, rc, rd;

	agent_register(a);
	agent_register(b);
	ra = acquire(a, 0, 4 * KIB, RS_G_EXSH, 0, 1);
	rb = acquire_exact(b, 64 * KIB, 68 * KIB, 0);
	cr_assert_eq(rb.start, 64 * KIB, "exact grant starts at %llu", (unsigned long long)rb.start);
	cr_assert_eq(rb.end, 68 * KIB, "exact grant ends at %llu", (unsigned long long)rb.end);
	cr_assert(rb.met, "A's grant in the same 4 MiB window was not reported");
	cr_assert_not(rb.waited);
	rc = acquire_exact(b, 8 * MIB, 8 * MIB + 4 * KIB, 0);
	cr_assert_eq(rc.end - rc.start, 4 * KIB);
	cr_assert_not(rc.met, "met reported in a window nobody else uses");
	/* Control: the same kind of request, not exact, is expanded. */
	rd = acquire(b, 12 * MIB, 12 * MIB + 4 * KIB, RS_G_EXSH, WINDOW, 0);
	cr_assert_eq(rd.start, 12 * MIB);
	cr_assert_eq(rd.end, 16 * MIB, "control: not expanded to the window");
	(void)ra;
}

/*
 * An exact grant its call has left (RS_WANTED_SELF, no user) stays in the
 * table until a scan meets it: a conflicting request revokes it without
 * waiting, and the owner's own next acquisition frees the ones it left.
 */
Test(nodelock, exact_left_grant_freed)
{
	struct agent *a = agent_start(), *b = agent_start();
	struct rep ra, ra2, rb;
	struct rs_segment *s;

	agent_register(a);
	agent_register(b);
	ra = acquire_left(a, 0, 4 * KIB);
	s = view_attach();
	cr_assert_eq(atomic_load(&s->grants[ra.idx].state), RS_G_HELD,
		     "the left grant was freed at once (expected lazily)");
	cr_assert_eq(RS_GW_USERS(atomic_load(&s->grants[ra.idx].gw)), 0);
	/* Its owner's next acquisition elsewhere frees it. */
	ra2 = acquire_exact(a, 1 * MIB, 1 * MIB + 4 * KIB, 1);
	cr_assert_neq(RS_GW_GEN(atomic_load(&s->grants[ra.idx].gw)), ra.gen,
		      "A's left grant survived A's next scan");
	cr_assert_eq(grants_of(a->me, RS_G_HELD, NULL), 1);
	/* Closing the file frees what its calls left, and nothing busy. */
	ra = acquire_left(a, 2 * MIB, 2 * MIB + 4 * KIB);
	simple(a, OP_FREE_LEFT, 0, 0);
	cr_assert_neq(RS_GW_GEN(atomic_load(&s->grants[ra.idx].gw)), ra.gen,
		      "rs_nt_free_left left A's left grant");
	cr_assert_eq(grants_of(a->me, RS_G_HELD, NULL), 1, "rs_nt_free_left freed a busy grant");
	/* Another process meets the second one once it is left. */
	exact_call_ends(a, ra2.idx);
	rb = acquire(b, 1 * MIB, 1 * MIB + 4 * KIB, RS_G_EXSH, 0, 0);
	cr_assert_not(rb.waited, "waited for a grant nobody is in");
	cr_assert_geq(rb.revoked, 1);
	cr_assert_eq(grants_of(a->me, RS_G_HELD, NULL), 0);
}

/*
 * Anyone's walk of the file frees a left exact grant, not only a request
 * in its way: B's acquisition far from A's left grant frees it (not
 * counted as revoked: it was not in B's way).  Control in the same rig:
 * A's idle cached grant, as far from B, is only a cache and stays.
 */
Test(nodelock, exact_left_grant_freed_by_any_walk)
{
	struct agent *a = agent_start(), *b = agent_start();
	struct rep left, kept, rb;
	struct rs_segment *s;

	agent_register(a);
	agent_register(b);
	kept = acquire(a, 8 * MIB, 8 * MIB + 4 * KIB, RS_G_EXSH, 0, 0);
	left = acquire_left(a, 0, 4 * KIB);
	s = view_attach();
	cr_assert_eq(RS_GW_GEN(atomic_load(&s->grants[left.idx].gw)), left.gen,
		     "A's left grant went before anyone walked the chain");
	rb = acquire_exact(b, 1 * MIB, 1 * MIB + 4 * KIB, 0);
	cr_assert_neq(RS_GW_GEN(atomic_load(&s->grants[left.idx].gw)), left.gen,
		      "B's walk left A's left exact grant in the chain");
	cr_assert_eq(rb.revoked, 0, "a grant out of B's way counted as revoked");
	cr_assert_eq(RS_GW_GEN(atomic_load(&s->grants[kept.idx].gw)), kept.gen,
		     "control: B's walk freed A's idle cached grant, out of its way");
	cr_assert_eq(grants_of(a->me, RS_G_HELD, NULL), 1);
}

/*
 * A waiter sleeps on the grant in its way and is woken when that grant's
 * last user leaves (WAKE_LEAVE), or when its holder releases it (WAKE_
 * RELEASE: the wake is sent under the table lock, owed until the lock is
 * released, nodelock.c wakes_flush).  The sleep slice is 30 s here, so
 * only the wake can let B in within a few seconds.  Control: a leave that
 * does not wake leaves B asleep.
 */
enum { WAKE_NONE, WAKE_LEAVE, WAKE_RELEASE };

static void grant_wake(int wake)
{
	struct agent *a, *b;
	struct cmd q = acq_cmd(0, 4 * KIB, RS_G_EXSH, 0, 0);
	struct rep ra, rb;

	rs_nt_slice_ns = 30ull * 1000 * 1000 * 1000;	/* agents inherit it */
	a = agent_start();
	b = agent_start();
	agent_register(a);
	agent_register(b);
	ra = acquire_exact(a, 0, 4 * KIB, 1);
	if (wake != WAKE_RELEASE)
		simple(a, OP_MARK_SELF, ra.idx, 0);
	agent_send(b, &q);
	cr_assert_not(agent_poll(b, &rb, MUSTNT_MS), "B granted over A's busy grant");
	cr_assert(atomic_load(&view_attach()->grants[ra.idx].gw) & RS_SLEEPERS,
		  "B does not sleep on A's grant");
	simple(a, wake == WAKE_LEAVE ? OP_LEAVE_WAKE : OP_LEAVE, ra.idx, 0);
	if (wake == WAKE_RELEASE) {
		/* A cached grant, wanted by B: idle now, still A's. */
		cr_assert_not(agent_poll(b, &rb, 1000), "B woke at a leave that sent no wake");
		simple(a, OP_RELEASE, ra.idx, ra.gen);
		rb = agent_wait(b, MUST_MS, "B after A released its grant");
		cr_assert_eq(rb.rc, 0, "%s", rb.why);
	} else if (wake == WAKE_LEAVE) {
		rb = agent_wait(b, MUST_MS, "B after A's last user left");
		cr_assert_eq(rb.rc, 0, "%s", rb.why);
		cr_assert_geq(rb.revoked, 1, "B did not take A's left grant");
	} else {
		cr_assert_not(agent_poll(b, &rb, 1000), "control: B woke without a wake");
	}
}

Test(nodelock, grant_wake_ends_wait)
{
	grant_wake(WAKE_LEAVE);
}

Test(nodelock, grant_release_wake_ends_wait)
{
	grant_wake(WAKE_RELEASE);
}

Test(nodelock, grant_wake_control_no_wake)
{
	grant_wake(WAKE_NONE);
}

/*
 * A vfork child that dies inside a hold of the table lock leaves the
 * wakes it owed in its parent thread's TLS (the child ran on that
 * thread's pointer), naming words of a mapping the parent then unmaps
 * (iolock.c, rs_vfork_parent).  The parent's next release of its own
 * table sends them: to whatever is mapped there by then.  Here a free
 * slot has RS_SLEEPERS, the child takes the lock over from its own slot's
 * stale id (scrub, which owes the wake) and exits inside; the parent
 * unmaps the child's view, puts a shared page with a futex sleeper at
 * the owed address, and takes and releases its own hold.  The sleeper
 * must not be woken.  Control (VW_UNLOCK): the child lets go of the lock
 * before it exits.
 */
enum { VW_DIE_INSIDE, VW_UNLOCK };
static struct rs_nt vw_child_nt;
static int vw_mode;
static _Atomic uint32_t *vw_addr;

static int vw_child(void *arg)
{
	char why[200];
	struct rs_segment *s;
	uint32_t slot;

	(void)arg;
	memset(&vw_child_nt, 0, sizeof(vw_child_nt));
	if (rs_nt_register(&vw_child_nt, seg_name, why, sizeof(why)) < 0)
		syscall(SYS_exit, 3);
	s = vw_child_nt.map.seg;
	slot = vw_child_nt.me;
	vw_addr = RS_GW_FUTEX(&s->grants[RS_NGRANT - 1]);
	/* A sleeper's bit on a free slot: scrub owes it a wake. */
	atomic_fetch_or(&s->grants[RS_NGRANT - 1].gw, RS_SLEEPERS);
	/* Our slot under another nonce: a dead predecessor's, taken over at once. */
	atomic_store(&s->hdr.lock, RS_LOCK_ID(slot, (vw_child_nt.nonce + 1) & 0xff));
	rs_nt_lock_table(&vw_child_nt);
	if (vw_mode == VW_UNLOCK)
		rs_nt_unlock_table(&vw_child_nt);
	syscall(SYS_exit, 0);	/* dies inside the hold in VW_DIE_INSIDE */
	return 0;
}

struct vw_sleeper {
	_Atomic uint32_t *addr;
	long rc;
	int err;
};

static void *vw_sleep(void *arg)
{
	struct vw_sleeper *v = arg;
	struct timespec ts = { 3, 0 };

	v->rc = syscall(SYS_futex, v->addr, FUTEX_WAIT, 0, &ts, NULL, 0);
	v->err = errno;
	return NULL;
}

static void vfork_wakes(int mode)
{
	static char stack[256 * 1024] __attribute__((aligned(16)));
	struct rs_nt p;
	char why[200];
	int st = 0;
	pid_t pid;
	uintptr_t page;
	void *m;
	struct vw_sleeper v;
	pthread_t th;
	unsigned lk;

	if (!strcmp(RS_SAN, "tsan"))
		cr_skip_test("ThreadSanitizer takes a raw clone() for a fork and then "
			     "refuses the sleeper thread");
	memset(&p, 0, sizeof(p));
	cr_assert_eq(rs_nt_register(&p, seg_name, why, sizeof(why)), 0, "%s", why);
	vw_mode = mode;
	/* As rs_vfork_prepare and rs_vfork_parent: the child's locks are
	 * its own, not this thread's, in the debug build's lock order. */
	lk = rs_lk_aside();
	pid = clone(vw_child, stack + sizeof(stack), CLONE_VM | CLONE_VFORK | SIGCHLD, NULL);
	rs_lk_restore(lk);
	cr_assert_gt(pid, 0);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
	/* As rs_vfork_parent: the child's view goes, and so do the wakes it
	 * owed on this thread. */
	cr_assert_eq(munmap(vw_child_nt.map.seg, sizeof(struct rs_segment)), 0);
	rs_nt_wakes_forget();
	page = (uintptr_t)vw_addr & ~(uintptr_t)4095;
	m = mmap((void *)page, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED,
		 -1, 0);
	cr_assert_eq(m, (void *)page);
	v.addr = vw_addr;
	cr_assert_eq(pthread_create(&th, NULL, vw_sleep, &v), 0);
	usleep(200 * 1000);
	/* Our own hold (the lock goes over from the dead child, if it died
	 * inside, after a liveness look), and its release. */
	rs_nt_lock_table(&p);
	rs_nt_unlock_table(&p);
	pthread_join(th, NULL);
	cr_expect(v.rc == -1 && v.err == ETIMEDOUT,
		  "a futex sleeper at an address the child's view no longer has was woken "
		  "by our release (rc %ld, %s)", v.rc, strerror(v.err));
	rs_nt_unregister(&p);
}

Test(nodelock, vfork_died_inside_owes_no_wake)
{
	vfork_wakes(VW_DIE_INSIDE);
}

Test(nodelock, vfork_died_inside_control_unlocked)
{
	vfork_wakes(VW_UNLOCK);
}

/* A holder killed with a sleeper on its grant: nobody wakes the futex;
 * the sleep slice and the liveness check let the waiter in. */
Test(nodelock, grant_sleeper_holder_killed)
{
	struct agent *a = agent_start(), *b = agent_start();
	struct cmd q = acq_cmd(0, 4 * KIB, RS_G_EXSH, 0, 0);
	struct rep ra, rb;

	agent_register(a);
	agent_register(b);
	ra = acquire_exact(a, 0, 4 * KIB, 1);
	simple(a, OP_MARK_SELF, ra.idx, 0);
	agent_send(b, &q);
	cr_assert_not(agent_poll(b, &rb, MUSTNT_MS));
	cr_assert(atomic_load(&view_attach()->grants[ra.idx].gw) & RS_SLEEPERS);
	agent_kill(a);
	rb = agent_wait(b, MUST_MS, "B after A was killed");
	cr_assert_eq(rb.rc, 0, "%s", rb.why);
	cr_assert_geq(rb.reclaimed, 1);
}

/*
 * A waiter killed in the queue: C sleeps on B's WAIT entry (its nearest
 * predecessor).  B's death frees the entry (reclaim), which wakes C; once
 * A has left, C is granted.
 */
Test(nodelock, grant_queue_waiter_killed)
{
	struct agent *a = agent_start(), *b = agent_start(), *c = agent_start();
	struct cmd qb = acq_cmd(0, 4 * KIB, RS_G_EXSH, 0, 0);
	struct cmd qc = acq_cmd(0, 4 * KIB, RS_G_EXSH, 0, 0);
	struct rep ra, rb, rc;
	uint32_t widx = 0;

	agent_register(a);
	agent_register(b);
	agent_register(c);
	ra = acquire_exact(a, 0, 4 * KIB, 1);
	simple(a, OP_MARK_SELF, ra.idx, 0);
	agent_send(b, &qb);
	cr_assert_not(agent_poll(b, &rb, MUSTNT_MS));
	cr_assert_eq(wait_queued(b->me, &widx), 1, "B did not queue");
	agent_send(c, &qc);
	cr_assert_not(agent_poll(c, &rc, MUSTNT_MS), "C overtook B, which waited > 100 ms");
	/* C spins, then sleeps; between its bounded sleeps it may be awake
	 * (slow under TSan), so look for the bit for up to MUST_MS. */
	{
		uint64_t until = now_ns() + MUST_MS * 1000000ull;

		while (!(atomic_load(&view_attach()->grants[widx].gw) & RS_SLEEPERS) &&
		       now_ns() < until)
			usleep(1000);
	}
	cr_assert(atomic_load(&view_attach()->grants[widx].gw) & RS_SLEEPERS,
		  "C does not sleep on B's entry");
	agent_kill(b);
	cr_assert_not(agent_poll(c, &rc, MUSTNT_MS), "C granted over A's busy grant");
	simple(a, OP_LEAVE_WAKE, ra.idx, 0);
	rc = agent_wait(c, MUST_MS, "C after B died and A left");
	cr_assert_eq(rc.rc, 0, "%s", rc.why);
	cr_assert_eq(grants_of(b->me, RS_G_WAIT, NULL), 0, "dead B's queue entry is still there");
}

/*
 * Appenders share the tail with each other, not with readers or
 * truncaters of it.  A and B append (RS_G_APPEND on [end, infinity)): B
 * does not wait for busy A, and that is no meeting (appends stay cached).
 * A reader of the tail and a truncation wait for both.  Control: an EXSH
 * request for the same tail waits.
 */
Test(nodelock, append_mode_shared)
{
	struct agent *a = agent_start(), *b = agent_start(), *c = agent_start();
	struct agent *d = agent_start();
	struct cmd qa = acq_cmd(100, RS_RANGE_EOF, RS_G_APPEND, WINDOW, 1);
	struct cmd qb = acq_cmd(200, RS_RANGE_EOF, RS_G_APPEND, WINDOW, 1);
	struct cmd qc = acq_cmd(150, 250, RS_G_SHARED, WINDOW, 0);
	struct cmd qd = acq_cmd(50, RS_RANGE_EOF, RS_G_EXSH, WINDOW, 0);
	struct cmd qx = acq_cmd(300, RS_RANGE_EOF, RS_G_EXSH, WINDOW, 0);
	struct rep ra, rb, rc, rd, rx;

	agent_register(a);
	agent_register(b);
	agent_register(c);
	agent_register(d);
	qa.exact = qb.exact = 1;
	ra = agent_do(a, &qa, "A's append");
	cr_assert_eq(ra.rc, 0, "%s", ra.why);
	rb = agent_do(b, &qb, "B's append");
	cr_assert_eq(rb.rc, 0, "%s", rb.why);
	cr_assert_not(rb.waited, "B's append waited for A's");
	cr_assert_not(rb.met, "another process's append counted as a meeting");
	agent_send(c, &qc);
	agent_send(d, &qd);
	cr_assert_not(agent_poll(c, &rc, MUSTNT_MS), "a reader of the tail ran with appenders");
	cr_assert_not(agent_poll(d, &rd, MUSTNT_MS), "a truncation ran with appenders");
	/* Control: EXSH for the same tail waits. */
	agent_send(a, &qx);
	cr_assert_not(agent_poll(a, &rx, MUSTNT_MS), "control: an EXSH append did not wait");
	exact_call_ends(b, rb.idx);
	cr_assert_not(agent_poll(c, &rc, MUSTNT_MS), "the reader ran while A appends");
	agent_kill(a);	/* A's append grant goes with A */
	rc = agent_wait(c, MUST_MS, "the reader after both appenders left");
	cr_assert_eq(rc.rc, 0, "%s", rc.why);
}

/* ---- strided grants ---- */

/* n blocks of blen bytes, stride apart, from start, in mode; the grant
 * idle afterwards (cached, nobody inside). */
static struct rep acquire_strided(struct agent *a, uint64_t start, uint64_t stride,
				  uint64_t blen, uint64_t n, unsigned mode)
{
	struct cmd c = acq_cmd(start, start + (n - 1) * stride + blen, mode, WINDOW, 0);
	struct rep r;

	c.exact = 1;
	c.stride = stride;
	c.blen = blen;
	r = agent_do(a, &c, "strided acquire");
	cr_assert_eq(r.rc, 0, "%s", r.why);
	return r;
}


/* Which calls a cached strided grant serves by itself (grants.c,
 * strided_enter): a range inside one block, never one across a gap. */
Test(nodelock, stride_holds)
{
	/* Blocks [1024 + k*4096, +512) below 1024 + 3*4096. */
	const uint64_t b = 1024, e = 1024 + 3 * 4096, s = 4096, l = 512;

	cr_assert(rs_stride_holds(b, e, s, l, b, b + l), "the first block whole");
	cr_assert(rs_stride_holds(b, e, s, l, b + 2 * s + 100, b + 2 * s + 512), "a tail of the last");
	cr_assert_not(rs_stride_holds(b, e, s, l, b + 100, b + l + 1), "one byte into the gap");
	cr_assert_not(rs_stride_holds(b, e, s, l, b + l, b + s), "the gap itself");
	cr_assert_not(rs_stride_holds(b, e, s, l, b, b + s + l), "two blocks and the gap between");
	cr_assert_not(rs_stride_holds(b, e, s, l, b - 1, b + 10), "from before the first block");
	cr_assert_not(rs_stride_holds(b, e, s, l, e, e + 10), "past the end");
	cr_assert_not(rs_stride_holds(b, e, s, l, b + 10, b + 10), "an empty range");
}
/* Idle strided grants of one stride at disjoint offsets coexist; at
 * overlapping offsets the later request revokes the earlier grant. */
Test(nodelock, strided_apart)
{
	struct agent *a = agent_start(), *b = agent_start(), *c = agent_start();
	struct rep ra, rb, rc;
	struct rs_segment *s;

	agent_register(a);
	agent_register(b);
	agent_register(c);
	s = view_attach();
	ra = acquire_strided(a, 0, KIB, 512, 64, RS_G_EXSH);
	cr_assert_eq(ra.stride, KIB, "A's request was not granted strided");
	cr_assert_eq(ra.end, 63 * KIB + 512);
	rb = acquire_strided(b, 512, KIB, 512, 64, RS_G_EXSH);
	cr_assert_eq(rb.stride, KIB, "B's blocks sit between A's, yet B was not granted strided");
	cr_assert_eq(rb.end, 64 * KIB, "B's lookahead was cut: [%llu, %llu)",
		     (unsigned long long)rb.start, (unsigned long long)rb.end);
	cr_assert_eq(rb.revoked + rb.wanted, 0);
	cr_assert_not(rb.waited);
	cr_assert_eq(RS_GW_GEN(atomic_load(&s->grants[ra.idx].gw)), ra.gen, "A's grant was revoked");
	/* Control: C's blocks overlap A's and B's: its first block takes
	 * theirs (idle: revoked), as any exact request would. */
	rc = acquire_strided(c, 256, KIB, 512, 64, RS_G_EXSH);
	cr_assert_eq(rc.stride, 0, "control: C granted strided over A's and B's blocks");
	cr_assert_eq(rc.end - rc.start, 512);
	cr_assert_eq(rc.revoked, 2, "control: C revoked %u grants, not A's and B's", rc.revoked);
	assert_no_conflicting_grants();
}

/* A plain request meets a strided grant only where it meets a block;
 * one that expands takes its whole extent. */
Test(nodelock, strided_exact_in_gap)
{
	struct agent *a = agent_start(), *b = agent_start();
	struct rep ra, rb;
	struct rs_segment *s;

	agent_register(a);
	agent_register(b);
	s = view_attach();
	ra = acquire_strided(a, 0, KIB, 512, 64, RS_G_EXSH);
	rb = acquire_exact(b, 512, KIB, 0);
	cr_assert_eq(rb.revoked + rb.wanted, 0, "an exact request in a gap took A's grant");
	rb = acquire_exact(b, 9 * KIB + 512, 10 * KIB, 0);
	cr_assert_eq(RS_GW_GEN(atomic_load(&s->grants[ra.idx].gw)), ra.gen, "A's grant was revoked");
	/* Across a gap and the next block: A's grant goes (idle). */
	rb = acquire_exact(b, 20 * KIB + 768, 21 * KIB + 256, 0);
	cr_assert_eq(rb.revoked, 1, "a request across A's block left A's grant");
	cr_assert_neq(RS_GW_GEN(atomic_load(&s->grants[ra.idx].gw)), ra.gen);
	/* A request that expands takes the whole extent, gap or not. */
	ra = acquire_strided(a, 64 * KIB, KIB, 512, 64, RS_G_EXSH);
	cr_assert_eq(ra.stride, KIB);
	rb = acquire(b, 64 * KIB + 512, 65 * KIB, RS_G_EXSH, WINDOW, 0);
	cr_assert_eq(rb.revoked, 1, "a request that expands kept clear of A's grant's gaps");
	assert_no_conflicting_grants();
}

/* Lookahead never waits or revokes: it stops before another process's
 * grant; a grant on the call's own block makes a plain exact request. */
Test(nodelock, strided_cut)
{
	struct agent *a = agent_start(), *b = agent_start();
	struct rep ra, rb;
	struct rs_segment *s;

	agent_register(a);
	agent_register(b);
	s = view_attach();
	ra = acquire_exact(a, 10 * KIB, 10 * KIB + 512, 0);
	rb = acquire_strided(b, 0, KIB, 512, 64, RS_G_EXSH);
	cr_assert_eq(rb.stride, KIB);
	cr_assert_eq(rb.end, 9 * KIB + 512, "B's lookahead not cut before A's block: ends at %llu",
		     (unsigned long long)rb.end);
	cr_assert_eq(rb.revoked + rb.wanted, 0);
	cr_assert_eq(RS_GW_GEN(atomic_load(&s->grants[ra.idx].gw)), ra.gen);
	/* A's grant one block on: B keeps its first block only, plain. */
	rb = acquire_strided(b, 9 * KIB, KIB, 512, 64, RS_G_EXSH);
	cr_assert_eq(rb.stride, 0);
	cr_assert_eq(rb.end, 9 * KIB + 512);
	/* On the call's own block: decided as an exact request (A's is
	 * idle: revoked). */
	rb = acquire_strided(b, 10 * KIB, KIB, 512, 64, RS_G_EXSH);
	cr_assert_eq(rb.stride, 0);
	cr_assert_eq(rb.start, 10 * KIB);
	cr_assert_eq(rb.end, 10 * KIB + 512);
	cr_assert_eq(rb.revoked, 1);
	assert_no_conflicting_grants();
}

/* ---- lock checks (lockorder) ---- */

static char lo_names[2][64];

static void lo_setup(void)
{
	for (int i = 0; i < 2; i++)
		snprintf(lo_names[i], sizeof(lo_names[i]), "/rs-lo-%d-%d", (int)getpid(), i);
}

static void lo_teardown(void)
{
	char path[128];

	for (int i = 0; i < 2; i++) {
		rs_seg_path(lo_names[i], path, sizeof(path));
		unlink(path);
	}
}

TestSuite(lockorder, .init = lo_setup, .fini = lo_teardown, .timeout = 30);

enum lo_case { LO_UNLOCK_NOT_HELD, LO_OUT_OF_ORDER, LO_RELEASE_BAD_IDX };

/* In a child, stderr to a pipe: register on the first table and break
 * the rule of lo_case.  Exits 0 if it gets through. */
static void lo_child(enum lo_case c, int wfd)
{
	struct rs_nt a, b;
	char why[200];

	dup2(wfd, 2);
	alarm(20);
	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	if (rs_nt_register(&a, lo_names[0], why, sizeof(why)) < 0)
		_exit(3);
	switch (c) {
	case LO_UNLOCK_NOT_HELD:
		/* Release builds: the lock word is not ours, which is said
		 * (a stray write) and left alone. */
		rs_nt_unlock_table(&a);
		break;
	case LO_OUT_OF_ORDER:
		/* Another table's local mutex under this one's lock: a later
		 * level first.  Two tables, so release builds do not wait. */
		rs_nt_lock_table(&a);
		if (rs_nt_register(&b, lo_names[1], why, sizeof(why)) < 0)
			_exit(3);
		rs_nt_unregister(&b);
		rs_nt_unlock_table(&a);
		break;
	case LO_RELEASE_BAD_IDX:
		/* Release builds: refused by the bounds check, nothing done. */
		rs_nt_release(&a, RS_NGRANT + 5, 1);
		break;
	}
	rs_nt_unregister(&a);
	_exit(0);
}

/* Runs lo_child(c); returns its wait status, its stderr in out. */
static int lo_run(enum lo_case c, char *out, size_t len)
{
	int p[2], st = 0;
	size_t n = 0;
	ssize_t k;
	pid_t pid;

	cr_assert_eq(pipe(p), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(p[0]);
		lo_child(c, p[1]);
	}
	close(p[1]);
	while (n + 1 < len && (k = read(p[0], out + n, len - 1 - n)) != 0) {
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			break;
		n += (size_t)k;
	}
	out[n] = '\0';
	close(p[0]);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	return st;
}

static void lo_expect(enum lo_case c, const char *msg)
{
	char out[2048];
	int st = lo_run(c, out, sizeof(out));

	cr_assert(!(WIFEXITED(st) && WEXITSTATUS(st) == 3), "the child could not register: %s",
		  out);
	if (RS_DEBUG_BUILD) {
		cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT,
			  "a debug build went on past the check (status %#x): %s", st, out);
		cr_assert(strstr(out, "internal check failed") && strstr(out, msg),
			  "the abort does not say \"%s\": %s", msg, out);
	} else {
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
			  "a release build stopped (status %#x): %s", st, out);
		cr_assert_null(strstr(out, "internal check failed"), "%s", out);
	}
}

Test(lockorder, unlock_not_held)
{
	lo_expect(LO_UNLOCK_NOT_HELD,
		  "letting go of the node table lock, which this thread does not hold");
}

Test(lockorder, out_of_order)
{
	lo_expect(LO_OUT_OF_ORDER,
		  "taking the node table's local mutex while holding the node table lock");
}

Test(lockorder, pre_contract)
{
	lo_expect(LO_RELEASE_BAD_IDX, "idx < RS_NGRANT");
}
