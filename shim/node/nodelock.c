/*
 * Node lock table: EXSH grants in shared memory.
 *
 * THEORY
 *
 * This is GFS2's EXSH glock (seed 004) moved one level down: a process plays
 * the node, its threads play the node's processes, the table plays the
 * DLM.  A process holds a grant on a byte range of a file in one of three
 * modes: SHARED (readers of several processes), EXSH, exclusive towards
 * other processes and shared by all the threads of the holder, which then
 * order themselves with the process-wide range lock (rangelock.c), or
 * APPEND (below).
 *
 * Interface.  rs_nt_acquire(table, request) returns a grant with the
 * caller counted in; the process keeps it after the call (grants.c caches
 * it) and counts its users in the grant's word, gw = generation | wanted
 * bits | users (segment.h).  rs_nt_release frees it.  Everything is an
 * index into fixed arrays; nothing in the segment is a pointer.
 *
 * Common case.  A process working in its own region acquires a grant once,
 * expanded when nothing conflicts to the surrounding aligned window
 * (req->window, 4 MiB by default) clipped to the gaps between other
 * processes' grants, the way Lustre's LDLM grows extent locks.  Later calls
 * inside it only CAS the user count: no table lock.  A request that had to
 * revoke someone is not expanded, so two processes that meet in a window
 * settle on disjoint grants instead of taking the window from each other
 * in turn.
 *
 * A lone process.  When no other process has any grant on the file and
 * the process's own policy has seen it move through 8 windows without
 * meeting another one there, nor within a second (req->whole, grants.c),
 * a request is granted the whole file, [0, infinity), in its mode (an
 * appender's too, so that its appends need not know where end of file
 * is: iolock.h): one process moving anywhere in a file makes one
 * acquisition (GFS2 grants a node the whole inode's glock).  When another
 * process arrives, it meets that grant as any other: an idle one is
 * revoked, a busy one drained, and both go on with windows.
 *
 * Conflicts.  Under the table lock the requester walks its file's chain
 * (below) for the grants of other processes on the same file.  Each
 * conflicting grant is decided by one CAS on its word: with no users it is
 * revoked (its generation moves on, so the holder's cached copy is seen
 * to be stale); otherwise it is marked wanted, its holder admits no new
 * users, drains, and releases it when the last user leaves, waking the
 * sleepers.  That is GFS2's blocking callback and demote.  No minimum hold
 * time: a demote here costs microseconds, not a DLM round trip, and a hold
 * time would be added latency for every writer that meets another.
 *
 * Per-file chains.  Each used grant slot hangs in the chain of one of
 * RS_NBUCKET buckets, chosen by its file's (dev, ino); the header keeps
 * each bucket's head and count, and a bit per slot saying it is used.
 * So an acquisition looks at its own file's grants (and a colliding
 * file's, rarely), not at every grant of the table: two writers of one
 * file pay the same with 900 idle grants on other files as without, and
 * a free slot is found from the bits, lowest first.  The index is kept
 * under the table lock, where slots are filled (linked once dev and ino
 * are written) and freed (unlinked as the state turns FREE), and it is
 * only ever an index of the slots: a walk that meets a free slot, a
 * slot of another bucket, an index out of range, or a number of slots
 * other than the bucket's count rebuilds every chain, the bits and the
 * counts from the slots themselves (recount) and walks again, and so
 * does whoever takes the lock over from a dead holder (scrub).  A
 * process's own exact grants left on other files are freed by their
 * close, or by whoever meets them, as any idle grant.
 *
 * Exact grants.  Where processes meet, expansion takes bytes another
 * process is about to use, and cached grants go back and forth.  So a
 * file that keeps meeting others turns exact (the policy is the process's
 * own, grants.c): req->exact asks for the call's range only, the grant is
 * marked RS_WANTED_SELF at once (never cached), and its call's leave makes
 * it idle and closed to new users.  Nobody takes the table lock for that:
 * the next walk of its chain frees it (free_if_left), whoever's it is, so
 * a chain holds the busy grants and the waiters, not one leftover per
 * process that ever worked on the file.  The table
 * then works as a shared-memory range lock costing one table-lock pass per
 * call (Lustre's answer to contended extents, LOCKNOEXPAND, in the same
 * spirit).  rs_nt_result.met tells the policy whether another process had
 * an incompatible grant within the request's aligned window.
 *
 * Strided grants.  Processes that share a file by interleaving blocks
 * (MPI ranks writing blocks k with k % nranks == rank) keep meeting, so
 * the file turns exact, and each call then costs a table pass.  Lustre
 * answers that pattern with lockahead: extent locks asked for the blocks
 * the process will use next.  Here a process whose exact requests on a
 * file keep the same length L at offsets a multiple of a stride S > L
 * apart asks for a strided grant (req->stride, req->blen): the blocks
 * [start + k*S, start + k*S + L) below req->end, the first being the
 * call's own, in the call's mode or EXSH (grants.c decides, and caches
 * it in a word of its own, looked at only when the plain cache misses,
 * so the fast path pays nothing for it).  The request never waits or revokes
 * for its lookahead: a grant of another process in the way of a later
 * block cuts the request before that block (stride_cut), as window
 * expansion stops at others' grants, and one in the way of the call's
 * block makes it a plain exact request.  Conflicts compare blocks
 * (stride.h): a range meets a strided grant iff it meets one of its
 * blocks, two strided grants of one stride meet iff their blocks sit at
 * overlapping offsets modulo it, and anything else is compared as one
 * against the other's whole extent, which may only say "meets" too
 * often.  A request that expands (not exact) takes a strided grant's
 * whole extent as in its way: it would otherwise grow over its blocks.
 * Once granted, a strided grant is revoked or drained as any other: a
 * third process whose range crosses its blocks takes it back whole.
 * Never in cluster scope (req->bounded): a cluster grant is one range.
 *
 * Appenders.  The kernel orders O_APPEND writes to one file on a node, so
 * appenders need not exclude each other, only readers and truncaters of
 * the tail.  An append asks for RS_G_APPEND on [end of file, infinity),
 * compatible with other processes' appends and with nothing else, and
 * caches it like any grant: processes appending to one log each keep
 * theirs and append on the fast path.  An append grant starts at the end
 * of file its caller saw, and the file only grows while it is held
 * (truncation is excluded), so every later append of its holder lands
 * inside it too.  It serves appends only, never reads or other writes.
 *
 * Fairness.  A requester that must wait takes a ticket, the next of the
 * table's counter; a grant is stamped with the last ticket handed out (a
 * queued request's keeps its own), so a waiter that meets in its way a
 * grant stamped with its ticket or later, busy or idle by then, has been
 * overtaken.  Once overtaken and waiting STARVE_NS (1 ms) it is starved:
 * it records its request in the table as a WAIT entry, marked starved,
 * and later requests that conflict with it wait behind it, so a stream
 * of newcomers cannot starve anyone; holders see wanted and drain.  A
 * waiter nobody overtook waits only for holders that were there first,
 * and is starved after rs_nt_starve_ns (100 ms) all the same; so is one
 * whose evidence went before it looked (the overtaker released, or
 * another walk freed its left grant): 100 ms is the bound, 1 ms what a
 * waiter that sees it gets.  Only waiters move the counter (a ticket per
 * grant would wrap it within hours), and tickets are compared by age
 * from it (ticket_since).  Linux's mutex asks for its hand-off on the
 * same evidence: a woken waiter that lost the lock to a spinner
 * (MUTEX_FLAG_HANDOFF, kernel/locking/mutex.c).  On an oversubscribed node a wait of
 * milliseconds is a holder that is not running, not starvation: when
 * every such wait starved its waiter, 256 processes on one region queued
 * behind each other and each hand-over waited for the scheduler
 * (docs/benchmarks.md, "Scale").  A starved entry holds others back only
 * while its owner runs: every scan of a waiter stamps its entry
 * (beat_ns), and a waiter wakes at least every slice (20 ms), so an
 * entry whose stamp is older than RS_PRESENT_NS (50 ms) belongs to a
 * process that is stopped, frozen or not being scheduled, and holds
 * nobody back; it takes its range when it runs again, if the range is
 * free then.  Handing a range to a waiter that cannot take it now would
 * make everyone wait for the scheduler (or for a SIGCONT that may never
 * come); so the starvation bound is for running waiters.  A request
 * queued behind a running waiter names, once it is time to say so, the
 * holder that the waiter waits for (held_in_way): the root of the queue
 * is always a holder.  Before the entry is starved, a running newcomer
 * may take a range that has just come free: a strict FIFO hand-off to a
 * sleeper made every call on a contended block wait for a context switch
 * (4 processes on one 4 KiB block: 30 us per call against 10 for OFD
 * locks).  This is the competitive succession of the range lock
 * (rangelock.c), after Linux's mutex HANDOFF and Go's starvation mode
 * (1 ms).
 *
 * Waiting.  On the thing waited for: a waiter sleeps on the low half of
 * the word of the grant in its way, or of its nearest predecessor's WAIT
 * entry, after setting RS_SLEEPERS in it (wait_grant); whoever changes a
 * word that has the bit (its last user leaving, a release, a revoke, a
 * WAIT entry becoming a grant) wakes its sleepers (wake_grant), once
 * it has let go of the table lock if it changed the word under it
 * (wakes_flush): a woken process may take the waker's CPU at once, and
 * a table-lock holder put off the CPU keeps every process of the node
 * waiting.  So a release wakes its own waiters and nobody else, and a
 * queue wakes one waiter at a time.  Before sleeping it watches the
 * word for up to RS_NT_SPIN_MAX pauses (about 16 us): a call inside a grant takes
 * microseconds, and while its holder runs, a look beats a sleep and a
 * wake-up (measured: docs/benchmarks.md).  How long it watches is learnt
 * from how its last watches ended (spin_budget), since on a node with
 * hundreds of processes per CPU the holder is often not running.  A
 * table-lock waiter watches the lock word for RS_SPIN_LIMIT pauses before
 * it sleeps.  With nothing specific in the way (a full table) it
 * sleeps on the table's change counter instead.  Every sleep has a 20 ms
 * timeout, and every wake re-scans.  Every 100 ms of waiting, and on every
 * attach, the liveness of the processes we wait for is checked.  A live
 * holder is waited for however long it takes (stopped, traced, frozen);
 * after rs_nt_warn_ns the waiter says whom it waits for.
 *
 * Crashes.  Each attached process holds an OFD lock on one byte of the
 * segment file (segment.h): the kernel drops it when the process dies,
 * however it dies, and a new process with the same pid does not hold it.
 * Only that byte says who is dead; a dead process's grants and slot are
 * freed by whoever waits on them.  The table lock word names its holder's
 * slot (and a nonce of its registration): a waiter that finds the holder
 * dead takes it over and scrubs the loose ends (scrub(): fresh words
 * for free slots; counts, bits and chains rebuilt from the slots).  Fail safe:
 * nothing in the segment ever makes an attached process run without
 * exclusion; only a process that could never attach (a bad header) runs
 * in process scope, and says so.
 *
 * Registration.  A registrant claims the first slot that says FREE and
 * whose liveness byte it can lock, and only if none, the first LIVE one
 * whose owner is gone (one look each: with hundreds of processes attached,
 * a look at every LIVE slot on the way made registration quadratic).  It
 * reclaims the dead below procs_hi, which every claimant raises past its
 * slot first: all of them while there are at most 64 slots there, else
 * the 16 after where the last registrant stopped (sweep_suspects), since
 * each look walks every attached process's lock and a look at all of
 * them would make a node's start cubic in its processes.  It looks at the
 * suspects' bytes (system calls) before taking the table lock and again
 * under it only for them, so that hundreds of registrants do not hold
 * the lock for hundreds of system calls each.
 * When every one of the 4096 slots is held by a live process, it says so
 * in one line and waits (on the change counter, every unregistration
 * bumps it, and every 100 ms looking at the bytes again): a process that
 * cannot get a slot never runs without the table.
 */
#include "nodelock.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "futex.h"
#include "lockorder.h"
#include "log.h"
#include "rangeshim/rangelock.h"
#include "fileid.h"
#include "stride.h"
#include "rawsyscall.h"

#define WAIT_SLICE_NS   (20ull * 1000 * 1000)
#define LIVENESS_NS     (100ull * 1000 * 1000)
/* A value in the lock word that names no slot is given this long to go
 * away (a holder releasing it) before it is taken for garbage. */
#define GARBAGE_NS      (1000ull * 1000 * 1000)
/* A request overtaken by a later one and waiting at least this long
 * makes later ones queue behind it; before, they may take what it waits
 * for (competitive succession, as the range lock does between threads:
 * rangelock.c). */
#ifndef STARVE_NS
#define STARVE_NS       (1000ull * 1000)
#endif

/* After this long blocked on a live process, say who it is (once per
 * wait), as the kernel's hung-task warning does.  Tests lower it. */
uint64_t rs_nt_warn_ns = 5ull * 1000 * 1000 * 1000;
/* The longest sleep of a waiter between scans.  Tests raise it to show
 * that a wake, not the timeout, ended a wait. */
uint64_t rs_nt_slice_ns = WAIT_SLICE_NS;
/* A starved waiter whose last scan is older than this holds nobody
 * back (segment.h).  Tests raise it so that their control runs without
 * that rule. */
uint64_t rs_nt_present_ns = RS_PRESENT_NS;
/* A waiter that nobody overtook is starved after this long all the
 * same.  Tests lower it to reach the queue without arranging an
 * overtaking, or raise it to show that the overtaking did it. */
uint64_t rs_nt_starve_ns = 100ull * 1000 * 1000;
/* The longest sleep of a table-lock waiter, and how long a wake sent
 * to one holds other wakes back (table_unlock_as).  Tests raise the
 * first to show that a wake, not the timeout, ended a wait, and the
 * second for their control. */
uint64_t rs_nt_lock_sleep_ns = 10ull * 1000 * 1000;
uint32_t rs_nt_woken_ms = 2;

uint64_t rs_nt_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* For `rangeshim locks` only: the coarse clock costs a few loads. */
static uint64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A release bumps the change counter, and makes the system call only if
 * someone sleeps on it: most releases meet nobody.  Dekker with
 * wait_change: the waiter counts itself in, then re-reads the counter; we
 * bump the counter, then read the count (both sequentially consistent),
 * so either we see the sleeper or it sees the bump.  A garbage count only
 * costs a useless wake, or a sleeper its 20 ms slice. */
static void wake_all(struct rs_segment *s)
{
	int saved = errno;

	atomic_fetch_add(&s->hdr.change, 1);
	if (atomic_load(&s->hdr.change_waiters))
		rs_sys(SYS_futex, &s->hdr.change, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
	errno = saved;
}

static void wait_change(struct rs_segment *s, uint32_t seen, uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) };
	int saved = errno;

	atomic_fetch_add(&s->hdr.change_waiters, 1);
	if (atomic_load(&s->hdr.change) == seen)
		rs_sys(SYS_futex, &s->hdr.change, FUTEX_WAIT, seen, &ts, NULL, 0);
	atomic_fetch_sub(&s->hdr.change_waiters, 1);
	errno = saved;
}

static void wake_word(_Atomic uint32_t *w)
{
	int saved = errno;

	rs_sys(SYS_futex, w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
	errno = saved;
}

/*
 * Wakes owed by this thread's hold of the table lock, sent once it is
 * released (wakes_flush), as the kernel's wake_q defers the wakes of a
 * locked section.  A wake may make the woken process run at once, in
 * place of the waker (wakeup preemption): sent under the table lock, it
 * puts the holder off the CPU with the lock held, and every process of
 * the node that comes to the lock meanwhile sleeps on it.  At 256
 * processes on one region, 0.4-0.9% of the holds send a wake, and sent
 * under the lock they made two thirds of the holds that last over 50 us,
 * each of which puts about 25 processes to sleep (docs/benchmarks.md,
 * "Convoys").  Late by the rest of the section, a wake is still only a
 * nudge: the word has changed already, and a sleeper compares it.
 */
#define WAKES_OWED 16
struct wakes_owed {
	int on;                     /* this thread holds the table lock */
	unsigned n;
	_Atomic uint32_t *w[WAKES_OWED];
};
static __thread struct wakes_owed wakes_owed __attribute__((tls_model("initial-exec")));

static void wakes_flush(void)
{
	struct wakes_owed *o = &wakes_owed;

	o->on = 0;
	for (unsigned i = 0; i < o->n; i++)
		wake_word(o->w[i]);
	o->n = 0;
}

/* g's word was old and has changed: wake whoever sleeps on it, now or,
 * under the table lock, once it is released. */
static void wake_grant(struct rs_seg_grant *g, uint64_t old)
{
	struct wakes_owed *o = &wakes_owed;

	if (!(old & RS_SLEEPERS))
		return;
	if (o->on && o->n < WAKES_OWED) {
		for (unsigned i = 0; i < o->n; i++)
			if (o->w[i] == RS_GW_FUTEX(g))
				return;
		o->w[o->n++] = RS_GW_FUTEX(g);
		return;
	}
	wake_word(RS_GW_FUTEX(g));
}

void rs_nt_wake_grant(struct rs_seg_grant *g, uint64_t old)
{
	if (old & RS_SLEEPERS)
		wake_word(RS_GW_FUTEX(g));
}

/*
 * How long a waiter watches a grant word before sleeping, learnt from how
 * the last watches ended, as glibc's adaptive mutex learns its spin count
 * (__spins += (cnt - __spins) / 8, nptl/pthread_mutex_lock.c), but from
 * the outcome: a watch that saw the word change moves the budget an
 * eighth of the way to RS_NT_SPIN_MAX, one that did not, to RS_NT_SPIN_MIN.
 * A watch pays only while the holder runs: with a few processes per CPU
 * nearly every one does, and the budget stays near RS_NT_SPIN_MAX; with
 * hundreds, a holder is often descheduled inside its call, and full
 * watches of such holders took 8% of the node's CPU (perf, 256 processes
 * on one region).  One word for the process: a lost update between
 * threads only skews it.
 */
static _Atomic uint32_t spin_budget = RS_NT_SPIN_MAX;

uint32_t rs_nt_spin_next(uint32_t budget, int changed)
{
	int32_t to = changed ? RS_NT_SPIN_MAX : RS_NT_SPIN_MIN;

	return (uint32_t)((int32_t)budget + (to - (int32_t)budget) / 8);
}

/*
 * Sleep until g's word changes from what keeps us out: g is still the
 * incarnation gen, and a WAIT entry (is_wait) or a grant with users and a
 * wanted bit (we set it in the scan).  Anything else: return at once and
 * scan again.  The sleepers bit asks whoever changes the word to wake us
 * (wake_grant); the futex compares the whole low half, so a change
 * between our look and our sleep is never slept through.
 */
static void wait_grant(struct rs_seg_grant *g, uint32_t gen, int is_wait, uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) };
	uint64_t v = atomic_load(&g->gw);
	int saved = errno;

	/* A call inside a grant takes microseconds: while its holder runs,
	 * a short look beats a sleep and a wake-up. */
	uint32_t budget = atomic_load_explicit(&spin_budget, memory_order_relaxed);

	for (uint32_t i = 0; i < budget; i++) {
		if (RS_GW_GEN(v) != gen || (!is_wait && RS_GW_USERS(v) == 0)) {
			/* Changed before the first pause: the watch bought
			 * nothing, and says nothing of whether one pays. */
			if (i)
				atomic_store_explicit(&spin_budget, rs_nt_spin_next(budget, 1),
						      memory_order_relaxed);
			return;
		}
		rs_cpu_relax();
		v = atomic_load_explicit(&g->gw, memory_order_relaxed);
	}
	atomic_store_explicit(&spin_budget, rs_nt_spin_next(budget, 0), memory_order_relaxed);
	for (;;) {
		if (RS_GW_GEN(v) != gen)
			return;
		if (!is_wait && (RS_GW_USERS(v) == 0 || !RS_GW_WANTED(v)))
			return;
		if ((v & RS_SLEEPERS) || atomic_compare_exchange_weak(&g->gw, &v, v | RS_SLEEPERS))
			break;
	}
	rs_sys(SYS_futex, RS_GW_FUTEX(g), FUTEX_WAIT, (uint32_t)(v | RS_SLEEPERS), &ts, NULL, 0);
	errno = saved;
}

/*
 * The command and state letter of pid from /proc/PID/stat, read with raw
 * syscalls (the shim's wrappers are not for its own files).  The pid comes
 * from untrusted memory; it is only ever looked up and printed.
 */
char rs_nt_proc_stat(int32_t pid, char *comm, size_t commlen)
{
	char path[48], stat[512];
	int saved = errno;
	long n = -1;
	char state = 0;
	int fd;

	snprintf(comm, commlen, "?");
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = pid > 0 ? (int)rs_sys(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC) : -1;
	if (fd >= 0) {
		n = rs_sys(SYS_read, fd, stat, sizeof(stat) - 1);
		rs_sys(SYS_close, fd);
	}
	if (n > 0) {
		/* The command may hold ')' itself: the last one ends it. */
		char *open, *close;

		stat[n] = '\0';
		open = strchr(stat, '(');
		close = strrchr(stat, ')');
		if (open && close && close > open && close[1] == ' ' && commlen) {
			size_t c = (size_t)(close - open - 1);

			if (c >= commlen)
				c = commlen - 1;
			memcpy(comm, open + 1, c);
			comm[c] = '\0';
			state = close[2];
		}
	}
	errno = saved;
	return state;
}

/* "pid 1234 (dd), stopped (...)": whom a waiter waits for. */
void rs_nt_describe(int32_t pid, char *buf, size_t len)
{
	char comm[64];
	const char *state;

	switch (rs_nt_proc_stat(pid, comm, sizeof(comm))) {
	case 0: state = "state unknown"; break;
	case 'R': state = "running"; break;
	case 'S': state = "sleeping"; break;
	case 'D': state = "in uninterruptible sleep"; break;
	case 'T': state = "stopped (SIGSTOP or Ctrl-Z; SIGCONT resumes it)"; break;
	case 't': state = "stopped by a debugger"; break;
	case 'Z': state = "a zombie"; break;
	default: state = "alive"; break;
	}
	snprintf(buf, len, "pid %d (%s), %s", (int)pid, comm, state);
}

static int32_t slot_pid(const struct rs_segment *s, uint32_t slot)
{
	return slot < RS_NPROC ? s->procs[slot].pid : -1;
}

/* The bucket of a file's chain. */
static uint32_t bucket_of(uint64_t dev, uint64_t ino)
{
	uint64_t h = ino * 0x9e3779b97f4a7c15ull ^ (dev + 0x632be59bd9b4e019ull) * 0xc2b2ae3d27d4eb4full;

	return (uint32_t)(h >> 40) % RS_NBUCKET;
}

static void map_set(struct rs_segment *s, uint32_t idx)
{
	s->hdr.used_map[idx / 64] |= 1ull << (idx % 64);
}

static void map_clear(struct rs_segment *s, uint32_t idx)
{
	s->hdr.used_map[idx / 64] &= ~(1ull << (idx % 64));
}

static int map_test(const struct rs_segment *s, uint32_t idx)
{
	return (int)(s->hdr.used_map[idx / 64] >> (idx % 64) & 1);
}

/* Book-keeping of used_hi/nused and the used map (segment.h), under the
 * table lock.  Counts move before a slot becomes used and after it
 * becomes free, so a death in between leaves nused too high: a mismatch,
 * never a hidden grant. */
static int slot_using(struct rs_segment *s, uint32_t idx)
{
	if (atomic_load(&s->grants[idx].state) != RS_G_FREE)
		return 0;
	s->hdr.nused++;
	if (s->hdr.used_hi <= idx)
		s->hdr.used_hi = idx + 1;
	map_set(s, idx);
	return 1;
}

/* Into its file's chain, once its dev and ino are written (fill). */
static void chain_link(struct rs_segment *s, uint32_t idx)
{
	struct rs_seg_grant *g = &s->grants[idx];
	uint32_t b = bucket_of(g->dev, g->ino);

	g->next = s->hdr.chains[b].head;
	s->hdr.chains[b].head = idx + 1;
	s->hdr.chains[b].count++;
}

/* The link that names the grant a walk is looking at (rs_nt_acquire),
 * so that freeing it costs no search of its chain.  Ours while we hold
 * the table lock, which one thread of a process holds at a time. */
static uint32_t *walk_at;

/* Out of its chain; a chain that does not hold it (only a stray write
 * makes one) is left for the next walk to find wrong and rebuild. */
static void chain_unlink(struct rs_segment *s, uint32_t idx)
{
	struct rs_seg_grant *g = &s->grants[idx];
	uint32_t b = bucket_of(g->dev, g->ino), *at = &s->hdr.chains[b].head;

	if (walk_at && *walk_at == idx + 1)
		at = walk_at;

	for (uint32_t steps = 0; *at && steps <= RS_NGRANT; steps++) {
		uint32_t n = *at;

		if (n > RS_NGRANT)
			return;
		if (n == idx + 1) {
			*at = g->next;
			g->next = 0;
			if (s->hdr.chains[b].count)
				s->hdr.chains[b].count--;
			return;
		}
		at = &s->grants[n - 1].next;
	}
}

static void slot_freed(struct rs_segment *s, uint32_t idx)
{
	if (s->hdr.nused)
		s->hdr.nused--;
	chain_unlink(s, idx);
	map_clear(s, idx);
	/* The top slot went: used_hi comes down to the highest used one. */
	if (idx + 1 == s->hdr.used_hi)
		while (s->hdr.used_hi && !map_test(s, s->hdr.used_hi - 1))
			s->hdr.used_hi--;
}

/* The state word last, once the grant's word has moved on. */
static void mark_free(struct rs_segment *s, struct rs_seg_grant *g)
{
	if (atomic_exchange(&g->state, RS_G_FREE) != RS_G_FREE)
		slot_freed(s, (uint32_t)(g - s->grants));
}

/* A freed slot: the next generation, no users, no wanted bits; only
 * then does its state say FREE, so nobody can count into it meanwhile. */
static void free_grant(struct rs_segment *s, struct rs_seg_grant *g)
{
	uint64_t v = atomic_load(&g->gw);

	while (!atomic_compare_exchange_weak(&g->gw, &v, RS_GW_FREE(RS_GW_GEN(v) + 1)))
		;
	mark_free(s, g);
	wake_grant(g, v);
}

/* Revoke g if nobody is inside it; otherwise mark it wanted.  One CAS
 * decides, so a holder entering at the same moment either gets in first
 * (and we mark it) or finds the generation moved on.  1 if revoked. */
static int revoke_or_want(struct rs_segment *s, struct rs_seg_grant *g, unsigned bit,
			  int *newly_wanted)
{
	uint64_t v = atomic_load(&g->gw);

	*newly_wanted = 0;
	for (;;) {
		if (RS_GW_USERS(v) == 0) {
			if (atomic_compare_exchange_weak(&g->gw, &v, RS_GW_FREE(RS_GW_GEN(v) + 1))) {
				mark_free(s, g);
				wake_grant(g, v);
				return 1;
			}
		} else if (v & bit) {
			return 0;
		} else if (atomic_compare_exchange_weak(&g->gw, &v, v | bit)) {
			*newly_wanted = 1;
			return 0;
		}
	}
}

/* An exact grant (see "Exact grants" above) whose call has ended: the
 * holder marked it RS_WANTED_SELF and left it with no user, so nobody can
 * enter it again; free it.  One CAS from the value seen, as a revoke. */
static int free_if_left(struct rs_segment *s, struct rs_seg_grant *g)
{
	uint64_t v = atomic_load(&g->gw);

	if ((v & RS_WANTED_SELF) && RS_GW_USERS(v) == 0 &&
	    atomic_compare_exchange_strong(&g->gw, &v, RS_GW_FREE(RS_GW_GEN(v) + 1))) {
		mark_free(s, g);
		wake_grant(g, v);
		return 1;
	}
	return 0;
}

/* used_hi, nused, the used map and the chains from the slots
 * themselves: whatever they said before (a death half-way through a
 * change, a stray write), they now say what the slots say. */
static void recount(struct rs_segment *s)
{
	uint32_t n = 0, hi = 0;

	memset(s->hdr.chains, 0, sizeof(s->hdr.chains));
	memset(s->hdr.used_map, 0, sizeof(s->hdr.used_map));
	for (uint32_t i = RS_NGRANT; i-- > 0;)
		if (atomic_load(&s->grants[i].state) != RS_G_FREE) {
			n++;
			if (!hi)
				hi = i + 1;
			map_set(s, i);
			chain_link(s, i);	/* from the top: chains run in slot order */
		}
	s->hdr.nused = n;
	s->hdr.used_hi = hi;
}

/* After taking the lock from a dead holder: it may have died anywhere
 * inside.  Records are written state-last and grants are freed by one
 * CAS on their word, so the only loose ends are a slot it was filling or
 * freeing (every free slot gets a clean word of a new generation) and the
 * counts, map and chains (rebuilt from the slots). */
static void scrub(struct rs_segment *s)
{
	for (uint32_t i = 0; i < RS_NGRANT; i++)
		if (atomic_load(&s->grants[i].state) == RS_G_FREE)
			wake_grant(&s->grants[i], atomic_exchange(&s->grants[i].gw,
				   RS_GW_FREE(RS_GW_GEN(atomic_load(&s->grants[i].gw)) + 1)));
	recount(s);
}

/* lock_woken's stamp for a wake sent at CLOCK_MONOTONIC ns: ms, never 0
 * (0 says no wake is in flight). */
static uint32_t woken_stamp(uint64_t ns)
{
	uint32_t ms = (uint32_t)(ns / 1000000);

	return ms + !ms;
}

/*
 * A table-lock waiter's sleep, until a release moves lock_seq from seq.
 * Counted in lock_waiters throughout.  Behind a wake in flight, which
 * may have reached nobody (table_unlock_as), the next release may send
 * none: then no longer than that wake holds the others back.
 */
static void lock_sleep(struct rs_segment *s, uint32_t seq, uint64_t now)
{
	uint64_t ns = rs_nt_lock_sleep_ns, held = ((uint64_t)rs_nt_woken_ms + 1) * 1000000;
	struct timespec ts;
	uint32_t w;
	int saved = errno;

	atomic_fetch_add(&s->hdr.lock_waiters, 1);
	w = atomic_load(&s->hdr.lock_woken);
	if (w && woken_stamp(now) - w < rs_nt_woken_ms && held < ns)
		ns = held;
	ts.tv_sec = (time_t)(ns / 1000000000ull);
	ts.tv_nsec = (long)(ns % 1000000000ull);
	rs_sys(SYS_futex, &s->hdr.lock_seq, FUTEX_WAIT, seq, &ts, NULL, 0);
	atomic_fetch_sub(&s->hdr.lock_waiters, 1);
	/* Woken or not, we run: the next release may wake another. */
	if (atomic_load(&s->hdr.lock_woken))
		atomic_store(&s->hdr.lock_woken, 0);
	errno = saved;
}

/* Watch the table lock for RS_SPIN_LIMIT pauses, as the process-local
 * mutexes do (futex.h): 1 if it came free (try again), 0 if its holder
 * kept it (sleep).  A running holder keeps it for well under a
 * microsecond, a sleep and its wake cost several, and on a busy node one
 * acquisition in ten finds the other CPU's process inside. */
static int table_spin(struct rs_segment *s)
{
	for (int i = 0; i < RS_SPIN_LIMIT; i++) {
		rs_cpu_relax();
		if (atomic_load_explicit(&s->hdr.lock, memory_order_relaxed) == 0)
			return 1;
	}
	return 0;
}

/*
 * The table lock.
 *
 * Pre:  t->me is our process slot, whose liveness byte we hold, or
 *       UINT32_MAX once unregistered.
 * Post: 0 and hdr.lock == t->me + 1, and no other live process is inside;
 *       or -1 (nothing taken) if t->me is not a slot any more: another
 *       thread unregistered us (exit) while this one was waiting, and a
 *       thread must never use the table under an id it does not own.
 *
 * Threads of one process take t->local first, so within a process only
 * one thread ever contends for the shared word, and our own id in it can
 * only be a dead previous owner's of our slot (we hold the slot's byte,
 * so that owner is dead).  A holder is taken over only when it is
 * provably dead: its liveness byte is free, looked at every LIVENESS_NS
 * of waiting.  A live holder is waited for
 * however long it takes; after rs_nt_warn_ns the waiter says whom it
 * waits for.  A value naming no slot (only a stray write makes one) is
 * taken over once it has stood still for GARBAGE_NS.
 */
static int table_lock(struct rs_nt *t)
{
	struct rs_segment *s;
	uint32_t me, slot, seen = 0;
	uint64_t start = 0, seen_since = 0, last_live = 0;
	int warned = 0;

	/* The order is checked before any wait (lockorder.h), and a thread
	 * of ours that holds the lock already would wait for itself. */
	rs_lk_mutex_lock(RS_LK_NT_LOCAL, &t->local);
	/* Read under the local mutex: rs_nt_unregister changes them under it. */
	s = t->map.seg;
	slot = __atomic_load_n(&t->me, __ATOMIC_RELAXED);
	if (!s || slot >= RS_NPROC) {
		RS_ASSERT(slot == UINT32_MAX || !s);
		rs_lk_mutex_unlock(RS_LK_NT_LOCAL, &t->local);
		return -1;
	}
	rs_lk_acquire(RS_LK_NT, t);
	me = RS_LOCK_ID(slot, t->nonce);
	for (;;) {
		/* Read before the try: a release after it changes the value,
		 * and our sleep on it does not begin. */
		uint32_t seq = atomic_load(&s->hdr.lock_seq), v = 0, vs;
		uint64_t now;
		int steal = 0;

		if (atomic_compare_exchange_strong(&s->hdr.lock, &v, me)) {
			wakes_owed.on = 1;
			return 0;
		}
		vs = RS_LOCK_SLOT(v);
		now = rs_nt_now_ns();
		/* The holder's liveness is looked at once we have waited
		 * LIVENESS_NS, not at the first miss: a look is a system call
		 * that walks every attached process's lock, and on a busy node
		 * most misses are a live holder's few microseconds. */
		if (!start)
			start = seen_since = last_live = now;
		if (v != seen) {
			seen = v;
			seen_since = now;
		}
		/* Our slot under any id: only a dead predecessor of ours
		 * (the local mutex keeps our own threads out).  Taking it
		 * changes the word, so a waiter that judged the predecessor
		 * dead cannot also take it from under us (its CAS fails). */
		if (vs == slot + 1)
			steal = 1;
		else if (vs == 0 || vs > RS_NPROC)
			steal = now - seen_since > GARBAGE_NS;
		else if (now - last_live > LIVENESS_NS) {
			last_live = now;
			steal = !rs_seg_alive(&t->map, vs - 1);
		}
		if (steal && atomic_compare_exchange_strong(&s->hdr.lock, &v, me)) {
			wakes_owed.on = 1;
			scrub(s);
			return 0;
		}
		if (!steal && !warned && now - start > rs_nt_warn_ns && vs && vs <= RS_NPROC) {
			char who[160];

			warned = 1;
			rs_nt_describe(slot_pid(s, vs - 1), who, sizeof(who));
			rs_log(RS_LOG_WARN, "blocked for %llu s on the node lock table %s, held by %s; "
			       "waiting (no lock is given up while its holder lives)",
			       (unsigned long long)((now - start) / 1000000000ull), t->map.path, who);
		}
		if (table_spin(s))
			continue;
		/* The time after the watch: a wake sent during it must not
		 * look newer than now (lock_sleep). */
		lock_sleep(s, seq, rs_nt_now_ns());
	}
}

/* Release from our own id only: a lock that is no longer ours (only a
 * stray write can do that) is left to whoever has it. */
static void table_unlock_as(struct rs_nt *t, uint32_t slot)
{
	struct rs_segment *s = t->map.seg;
	uint32_t id = RS_LOCK_ID(slot, t->nonce), me = id;

	/* This thread's word, not the segment's: a stray write may change
	 * that, and is survived (below), not a broken contract of ours. */
	rs_lk_release(RS_LK_NT, t);
	if (!atomic_compare_exchange_strong(&s->hdr.lock, &me, 0))
		rs_log(RS_LOG_ERROR, "node lock table %s: the table lock was overwritten "
		       "(it holds %#x, not our %#x): the segment is being written by something "
		       "other than rangeshim", t->map.path, me, id);
	atomic_fetch_add(&s->hdr.lock_seq, 1);
	/* One wake at a time, as Go's sync.Mutex does (mutexWoken).  A
	 * waiter stays counted from before its sleep until after it, and on
	 * an oversubscribed node it may wait milliseconds to run on either
	 * side: waking at every release meanwhile made a system call per
	 * acquisition that woke nobody.  lock_woken holds when the last
	 * wake went out (ms, never 0); the woken waiter clears it when it
	 * runs, and one preempted before its sleep finds lock_seq moved and
	 * does not sleep.  A wake rs_nt_woken_ms old went to one that does
	 * not run (stopped, dead, far back in the run queue), or to nobody
	 * (the count of a waiter killed asleep, or garbage, stays): it no
	 * longer holds the others back, and those who went to sleep behind
	 * it look again by then (lock_sleep). */
	if (atomic_load(&s->hdr.lock_waiters)) {
		uint32_t now = woken_stamp(rs_nt_now_ns());
		uint32_t w = atomic_load(&s->hdr.lock_woken);

		if ((!w || now - w >= rs_nt_woken_ms) &&
		    atomic_compare_exchange_strong(&s->hdr.lock_woken, &w, now)) {
			int saved = errno;

			rs_sys(SYS_futex, &s->hdr.lock_seq, FUTEX_WAKE, 1, NULL, NULL, 0);
			errno = saved;
		}
	}
	rs_lk_mutex_unlock(RS_LK_NT_LOCAL, &t->local);
	wakes_flush();
}

static void table_unlock(struct rs_nt *t)
{
	table_unlock_as(t, t->me);
}

void rs_nt_lock_table(struct rs_nt *t)
{
	(void)table_lock(t);
}

void rs_nt_unlock_table(struct rs_nt *t)
{
	table_unlock(t);
}

void rs_nt_free_left(struct rs_nt *t)
{
	struct rs_segment *s = t->map.seg;

	if (!s || t->me >= RS_NPROC || table_lock(t) < 0)
		return;
	for (uint32_t i = 0; i < s->hdr.used_hi && i < RS_NGRANT; i++)
		if (atomic_load(&s->grants[i].state) == RS_G_HELD && s->grants[i].owner == t->me)
			free_if_left(s, &s->grants[i]);
	table_unlock(t);
}

/* A process slot that is not FREE (LIVE, or garbage) and whose liveness
 * byte nobody holds belonged to a process that is gone. */
static int slot_dead(struct rs_nt *t, uint32_t p)
{
	return p != t->me && atomic_load(&t->map.seg->procs[p].state) != RS_PROC_FREE &&
	       !rs_seg_alive(&t->map, p);
}

/*
 * Which process slots look dead, outside the table lock: each look at a
 * liveness byte is a system call, and with thousands of slots they must
 * not be made while every other process waits for the lock.  Under the
 * lock, reclaim_locked looks again at the suspects only (a slot seen
 * alive here that dies meanwhile is found by the next reclaim).
 */
static uint32_t dead_suspects(struct rs_nt *t, unsigned char *gone, uint32_t lim)
{
	uint32_t n = 0;

	if (lim > RS_NPROC)
		lim = RS_NPROC;
	memset(gone + lim, 0, RS_NPROC - lim);
	for (uint32_t p = 0; p < lim; p++) {
		gone[p] = (unsigned char)slot_dead(t, p);
		n += gone[p];
	}
	return n;
}

/*
 * A registrant's look for the dead: every slot below procs_hi when there
 * are at most RS_NT_SWEEP_WHOLE of them, else the next RS_NT_SWEEP_SLOTS
 * after where the last registrant's look ended (sweep_at), round
 * procs_hi.  Each look is a system call that walks the lock of every
 * attached process, so a look at every slot would cost each registration
 * the square of the processes attached, and a node's start the cube:
 * 4 ms per process with 1,000 attached (docs/benchmarks.md, "Scale").
 * A dead process's slot is still found within procs_hi /
 * RS_NT_SWEEP_SLOTS registrations, and its grants by anyone who waits
 * for them (acq_wait, within 100 ms).
 */
static uint32_t sweep_suspects(struct rs_nt *t, unsigned char *gone)
{
	struct rs_segment *s = t->map.seg;
	uint32_t hi = atomic_load(&s->hdr.procs_hi), from, n = 0;

	if (hi > RS_NPROC)
		hi = RS_NPROC;
	if (hi <= RS_NT_SWEEP_WHOLE)
		return dead_suspects(t, gone, hi);
	memset(gone, 0, RS_NPROC);
	from = atomic_fetch_add(&s->hdr.sweep_at, RS_NT_SWEEP_SLOTS) % hi;
	for (uint32_t k = 0; k < RS_NT_SWEEP_SLOTS; k++) {
		uint32_t p = (from + k) % hi;

		gone[p] = (unsigned char)slot_dead(t, p);
		n += gone[p];
	}
	return n;
}

/* Under the table lock: a bound above which every grant slot is FREE.
 * used_hi is checked against nused; a mismatch (a death between a count
 * and a state, or a stray write) is repaired by counting every slot. */
static uint32_t trusted_hi(struct rs_segment *s)
{
	uint32_t hi = s->hdr.used_hi < RS_NGRANT ? s->hdr.used_hi : RS_NGRANT, n = 0;

	for (uint32_t i = 0; i < hi; i++)
		n += atomic_load(&s->grants[i].state) != RS_G_FREE;
	if (n != s->hdr.nused) {
		recount(s);
		hi = s->hdr.used_hi;
	}
	return hi;
}

/* Under the table lock; gone: dead_suspects' answer (nsusp of them),
 * confirmed here. */
static uint32_t reclaim_locked(struct rs_nt *t, unsigned char *gone, uint32_t nsusp)
{
	struct rs_segment *s = t->map.seg;
	uint32_t dead = 0, hi = trusted_hi(s);

	for (uint32_t p = 0; nsusp && p < RS_NPROC; p++) {
		if (gone[p])
			gone[p] = (unsigned char)slot_dead(t, p);
		dead += gone[p];
	}
	nsusp = dead;
	/* Grants of the dead: their threads died inside calls; nobody can
	 * count into them, nobody will drain them.  Only the liveness byte
	 * says who is dead.  A grant whose owner field names no slot, or a
	 * slot whose state word is not LIVE, may be a live holder's under a
	 * stray write (or a registrant's predecessor's): it goes only once
	 * nobody is inside, as any other grant would. */
	for (uint32_t i = 0; i < hi; i++) {
		struct rs_seg_grant *g = &s->grants[i];
		uint32_t o = g->owner;
		int ignored;

		if (atomic_load(&g->state) == RS_G_FREE || o == t->me)
			continue;
		if (o < RS_NPROC && gone[o]) {
			free_grant(s, g);
			continue;
		}
		if (o < RS_NPROC && atomic_load(&s->procs[o].state) == RS_PROC_LIVE)
			continue;
		if (o < RS_NPROC && !rs_seg_alive(&t->map, o))
			free_grant(s, g);		/* dead, its slot word garbage */
		else if (!revoke_or_want(s, g, RS_WANTED, &ignored))
			continue;
		dead++;
	}
	for (uint32_t p = 0; nsusp && p < RS_NPROC; p++) {
		if (!gone[p])
			continue;
		atomic_store(&s->procs[p].state, RS_PROC_FREE);
		__atomic_add_fetch(&s->procs[p].gen, 1, __ATOMIC_RELAXED);
	}
	if (dead) {
		atomic_fetch_add(&s->hdr.reclaims, dead);
		wake_all(s);
	}
	return dead;
}

uint32_t rs_nt_reclaim(struct rs_nt *t)
{
	unsigned char gone[RS_NPROC];
	uint32_t n, nsusp;

	if (!t->map.seg || t->me >= RS_NPROC)
		return 0;
	nsusp = dead_suspects(t, gone, RS_NPROC);
	if (table_lock(t) < 0)
		return 0;
	n = reclaim_locked(t, gone, nsusp);
	table_unlock(t);
	return n;
}

static int still_named(const struct rs_nt *t)
{
	struct stat a, b;

	return rs_fstat(t->map.fd, &a) == 0 && stat(t->map.path, &b) == 0 &&
	       a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

static int register_once(struct rs_nt *t, const char *name, char *why, size_t whylen);
static int register_loop(struct rs_nt *t, const char *name, char *why, size_t whylen);

int rs_nt_register(struct rs_nt *t, const char *name, char *why, size_t whylen)
{
	atomic_store(&t->local, 0);	/* a fresh handle */
	return register_loop(t, name, why, whylen);
}

/* Again, after rs_nt_unregister, on a handle other threads of ours may
 * still be using: t->local is left alone (a thread asleep on it would
 * never be woken if it were reset under it). */
int rs_nt_register_again(struct rs_nt *t, const char *name, char *why, size_t whylen)
{
	return register_loop(t, name, why, whylen);
}

/* `rangeshim clean` may unlink the segment between our attach and our
 * claim; then we would be alone on a table nobody else sees.  Check the
 * name still leads to our file once we hold a slot, and start over if not. */
static int register_loop(struct rs_nt *t, const char *name, char *why, size_t whylen)
{
	for (int tries = 0; tries < 3; tries++) {
		if (register_once(t, name, why, whylen) < 0)
			return -1;
		if (still_named(t))
			return 0;
		rs_nt_unregister(t);
		rs_seg_detach(&t->map);
	}
	snprintf(why, whylen, "the segment keeps being removed under us");
	return -1;
}

/*
 * A registrant first claims a slot's liveness byte, then takes the table
 * lock under that slot's id: from its first instant inside, it can be told
 * from the dead, so nobody takes the lock from it while it lives.
 */
static int register_once(struct rs_nt *t, const char *name, char *why, size_t whylen)
{
	unsigned char gone[RS_NPROC];
	uint32_t nsusp;
	struct rs_segment *s;

	__atomic_store_n(&t->me, UINT32_MAX, __ATOMIC_RELAXED);
	t->pid = (int32_t)rs_sys(SYS_getpid);
	if (rs_seg_attach(&t->map, name, 1, why, whylen) < 0)
		return -1;
	s = t->map.seg;
	for (uint64_t t0 = 0, last_named = 0;;) {
		uint32_t seen = atomic_load(&s->hdr.change);
		uint64_t now;

		/* A slot that says FREE first, one claim each (with hundreds
		 * of processes attached, a liveness look at every LIVE slot on
		 * the way made registration quadratic); then any slot whose
		 * owner is gone. */
		for (uint32_t p = 0, pass = 0; pass < 2; p = p + 1 < RS_NPROC ? p + 1 : (pass++, 0)) {
			uint32_t st = atomic_load(&s->procs[p].state);

			/* A cheap look first; the byte decides. */
			if (pass == 0 ? st != RS_PROC_FREE
				      : st == RS_PROC_LIVE && rs_seg_alive(&t->map, p))
				continue;
			if (rs_seg_claim(&t->map, p) < 0)
				continue;
			/* Registration's reclaim looks below this mark only. */
			for (uint32_t hi = atomic_load(&s->hdr.procs_hi);
			     hi <= p && !atomic_compare_exchange_weak(&s->hdr.procs_hi, &hi, p + 1);)
				;
			/* A nonce no earlier holder of this slot had (segment.h). */
			t->nonce = __atomic_add_fetch(&s->procs[p].gen, 1, __ATOMIC_RELAXED) &
				   ((1u << (32 - RS_LOCK_SLOT_BITS)) - 1);
			__atomic_store_n(&t->me, p, __ATOMIC_RELAXED);
			break;
		}
		if (t->me != UINT32_MAX)
			break;
		/* Every slot is held by a live process.  Running without the
		 * table would let this process's calls tear other processes'
		 * reads: wait for a slot, as a lock waits for its holder.  A
		 * process that leaves bumps the change counter; one that dies
		 * is seen by the next scan of the liveness bytes. */
		now = rs_nt_now_ns();
		if (!t0) {
			t0 = last_named = now;
			rs_log(RS_LOG_WARN, "all %u process slots of the node lock table %s are held "
			       "by live processes; waiting for one to be freed before any "
			       "coordinated I/O (no call runs without the table)",
			       RS_NPROC, t->map.path);
		}
		if (now - last_named > LIVENESS_NS * 10) {
			/* Removed under us (`rangeshim clean`): a table nobody
			 * else sees would coordinate nothing; attach afresh. */
			last_named = now;
			if (!still_named(t)) {
				rs_seg_detach(&t->map);
				if (rs_seg_attach(&t->map, name, 1, why, whylen) < 0)
					return -1;
				s = t->map.seg;
				continue;
			}
		}
		wait_change(s, seen, LIVENESS_NS);
	}
	/* Ours alone while we hold its byte: name ourselves before we take
	 * the lock, so that whoever waits for us can say who we are. */
	s->procs[t->me].pid = t->pid;
	/* Each claimant raises procs_hi before its slot turns LIVE:
	 * every LIVE slot lies below it.  A wrong value
	 * (a stray write) only leaves dead slots to the next reclaim of a
	 * waiter, which looks at every slot. */
	nsusp = sweep_suspects(t, gone);
	(void)table_lock(t);	/* cannot fail: t->me is ours */
	reclaim_locked(t, gone, nsusp);
	/* Our slot may still list a dead previous owner's grants. */
	for (uint32_t i = 0, hi = trusted_hi(s); i < hi; i++)
		if (atomic_load(&s->grants[i].state) != RS_G_FREE && s->grants[i].owner == t->me)
			free_grant(s, &s->grants[i]);
	s->procs[t->me].pid = t->pid;
	__atomic_add_fetch(&s->procs[t->me].gen, 1, __ATOMIC_RELAXED);
	s->procs[t->me].attached_ns = realtime_ns();
	atomic_store(&s->procs[t->me].state, RS_PROC_LIVE);
	table_unlock(t);
	return 0;
}

void rs_nt_unregister(struct rs_nt *t)
{
	struct rs_segment *s = t->map.seg;
	uint32_t busy = 0;

	uint32_t me = t->me;

	if (!s || me >= RS_NPROC || table_lock(t) < 0)
		return;
	for (uint32_t i = 0, hi = trusted_hi(s); i < hi; i++) {
		struct rs_seg_grant *g = &s->grants[i];
		int ignored;

		if (atomic_load(&g->state) == RS_G_FREE || g->owner != t->me)
			continue;
		/* A thread still inside a call (exit with threads running)
		 * keeps its grant; its last user or our death frees it. */
		if (!revoke_or_want(s, g, RS_WANTED_SELF, &ignored))
			busy++;
	}
	if (!busy) {
		atomic_store(&s->procs[me].state, RS_PROC_FREE);
		__atomic_add_fetch(&s->procs[me].gen, 1, __ATOMIC_RELAXED);
		/* Before the lock goes: a thread of ours that waits in
		 * rs_nt_acquire must find itself unregistered when it next
		 * takes the lock, not go on under a slot it no longer has. */
		__atomic_store_n(&t->me, UINT32_MAX, __ATOMIC_RELAXED);
	}
	table_unlock_as(t, me);
	wake_all(s);
	if (busy)
		return;	/* keep slot and fd: the liveness lock goes when we die */
	/* The mapping stays: at exit, other threads may still be leaving
	 * grants they entered.  The fd (and our liveness lock) goes. */
	if (t->map.fd_slot) {
		int fd = atomic_exchange(t->map.fd_slot, -1);

		if (fd >= 0)
			rs_sys(SYS_close, fd);
	} else if (t->map.fd >= 0) {
		rs_sys(SYS_close, t->map.fd);
	}
	t->map.fd = -1;
}

void rs_nt_forget(struct rs_nt *t)
{
	/* The fd shares the parent's open file description, and with it the
	 * parent's liveness lock: close ours so the parent's death shows. */
	if (t->map.fd >= 0)
		rs_sys(SYS_close, t->map.fd);
	t->map.fd = -1;
	t->map.seg = NULL;
	t->me = UINT32_MAX;
	atomic_store(&t->local, 0);
	/* Wakes owed by a hold of the parent's that this thread copied
	 * are the parent's to send. */
	rs_nt_wakes_forget();
}

/* This thread owes no wake: a fork child's copy of its parent's list,
 * or what a vfork child (which runs on its parent's thread pointer)
 * left in it when it died inside a hold, naming words of a mapping
 * that its parent unmaps (rs_vfork_parent): sent at this thread's next
 * release, they would go to whatever is mapped there by then. */
void rs_nt_wakes_forget(void)
{
	wakes_owed.on = 0;
	wakes_owed.n = 0;
}

/* Unknown modes (only a stray write makes one) are compatible with
 * nothing. */
static int compatible(unsigned a, unsigned b)
{
	return a == b && (a == RS_G_SHARED || a == RS_G_APPEND);
}

/* A malformed range (only a stray write makes one) is taken to cover the
 * whole file: it may block, it may not let anyone through. */
static int overlaps(const struct rs_seg_grant *g, uint64_t start, uint64_t end)
{
	uint64_t gs = g->start, ge = g->end;

	if (gs >= ge)
		return 1;
	return gs < end && start < ge;
}

/* Is g in the way of request r?  A request that expands (not exact)
 * takes g's whole extent for its own, as it takes its gaps to grow in;
 * an exact or strided one compares blocks (stride.h).  A malformed
 * range is the whole file, as in overlaps. */
static int in_way(const struct rs_seg_grant *g, const struct rs_nt_req *r)
{
	if (!r->exact || g->start >= g->end)
		return overlaps(g, r->start, r->end);
	return rs_stride_meet(g->start, g->end, g->stride, g->blen,
			      r->start, r->end, r->stride, r->blen);
}

/*
 * A strided request r (exact, never waiting for its lookahead) meets
 * g, another process's grant in an incompatible mode: keep the blocks
 * before the first that g is in the way of.  0: r goes on (cut, or g
 * was not in its way); -1: g is in the way of the call's own block, and
 * r is now that block alone, to be decided as any exact request (scan
 * again).  g as its whole extent, unless both share a stride and sit
 * apart (stride.h): conservative, never "apart" when they are not.
 */
static int stride_cut(const struct rs_seg_grant *g, struct rs_nt_req *r)
{
	uint64_t gs = g->start, ge = g->end, k;

	if (gs >= ge) {
		gs = 0;
		ge = RS_RANGE_EOF;
	} else if (g->stride == r->stride && rs_stride_ok(gs, ge, g->stride, g->blen) &&
		   rs_stride_apart(gs, g->blen, r->start, r->blen, r->stride)) {
		return 0;
	}
	k = rs_stride_first(r->start, r->end, r->stride, r->blen, gs, ge);
	if (k == UINT64_MAX)
		return 0;
	r->end = r->start + (k ? (k - 1) * r->stride : 0) + r->blen;
	/* One block left is the call's range: a plain exact request. */
	if (k <= 1)
		r->stride = r->blen = 0;
	return k ? 0 : -1;
}

/* The lowest free slot: the used map says where to look, the state
 * decides (a bit that is wrong is put right on the way).  Should the map
 * say that none is free, every state is looked at. */
static uint32_t find_free(struct rs_segment *s)
{
	for (uint32_t w = 0; w < RS_NGRANT / 64; w++)
		for (uint64_t m = ~s->hdr.used_map[w]; m; m &= m - 1) {
			uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(m);

			if (atomic_load(&s->grants[i].state) == RS_G_FREE)
				return i;
			map_set(s, i);
		}
	for (uint32_t i = 0; i < RS_NGRANT; i++)
		if (atomic_load(&s->grants[i].state) == RS_G_FREE)
			return i;
	return UINT32_MAX;
}

/* Table full: take back an idle grant, anyone's (an idle grant is only a
 * cache), the least recently granted first; failing that (it was entered
 * meanwhile), the first idle one, marking the busy ones passed on the way
 * wanted so that they come back when their calls end.  Returns a free
 * slot or UINT32_MAX. */
static uint32_t evict_idle(struct rs_segment *s)
{
	uint32_t best = UINT32_MAX;
	uint64_t oldest = UINT64_MAX;
	int ignored;

	for (uint32_t i = 0; i < RS_NGRANT; i++) {
		const struct rs_seg_grant *g = &s->grants[i];

		if (atomic_load(&g->state) == RS_G_HELD && RS_GW_USERS(atomic_load(&g->gw)) == 0 &&
		    g->since_ns < oldest) {
			oldest = g->since_ns;
			best = i;
		}
	}
	if (best != UINT32_MAX && revoke_or_want(s, &s->grants[best], RS_WANTED, &ignored))
		return best;
	for (uint32_t i = 0; i < RS_NGRANT; i++) {
		struct rs_seg_grant *g = &s->grants[i];

		if (atomic_load(&g->state) != RS_G_HELD)
			continue;
		if (revoke_or_want(s, g, RS_WANTED, &ignored))
			return i;
	}
	return UINT32_MAX;
}

/* users: 1 to hand the grant over with the caller counted in. */
static void fill(struct rs_nt *t, uint32_t idx, const struct rs_nt_req *r,
		 uint64_t start, uint64_t end, uint32_t state, uint32_t ticket, uint32_t users)
{
	struct rs_seg_grant *g = &t->map.seg->grants[idx];
	int link = slot_using(t->map.seg, idx);

	/* A used slot is refilled only for its own file (a WAIT entry
	 * turning into its grant); any other stays in its chain no more. */
	if (!link && (g->dev != r->dev || g->ino != r->ino)) {
		chain_unlink(t->map.seg, idx);
		link = 1;
	}
	__atomic_store_n(&g->mode, r->mode, __ATOMIC_RELAXED);
	g->owner = t->me;
	g->ticket = ticket;
	g->flags = 0;
	g->dev = r->dev;
	g->ino = r->ino;
	if (link)
		chain_link(t->map.seg, idx);
	/* Read racily by holders' fast paths, which check the generation. */
	__atomic_store_n(&g->start, start, __ATOMIC_RELAXED);
	__atomic_store_n(&g->end, end, __ATOMIC_RELAXED);
	__atomic_store_n(&g->stride, r->stride, __ATOMIC_RELAXED);
	__atomic_store_n(&g->blen, r->stride ? r->blen : 0, __ATOMIC_RELAXED);
	g->since_ns = realtime_ns();
	g->beat_ns = state == RS_G_WAIT ? rs_nt_now_ns() : 0;
	/* A new generation: no cached word of an earlier incarnation can
	 * match, whatever happened to the slot before. */
	wake_grant(g, atomic_exchange(&g->gw, RS_GW_FREE(RS_GW_GEN(atomic_load(&g->gw)) + 1) | users));
	atomic_store(&g->state, state);
}

/* Is the process in slot o alive?  A slot number out of range (a stray
 * write) is "not known alive": it asks for a full reclaim, which copes. */
static int owner_alive(struct rs_nt *t, uint32_t o)
{
	return o < RS_NPROC && (o == t->me || rs_seg_alive(&t->map, o));
}

struct blocker {
	uint32_t owner;
	uint64_t start, end;
};

/* A HELD grant of another process in the way of WAIT entry e (for the
 * message of a request queued behind e: whom the queue waits for).
 * Under the table lock; hi from the scan. */
static void held_in_way(const struct rs_segment *s, const struct rs_seg_grant *e,
			struct blocker *b)
{
	uint32_t n = s->hdr.chains[bucket_of(e->dev, e->ino)].head;

	for (uint32_t steps = 0; n && n <= RS_NGRANT && steps < RS_NGRANT; steps++) {
		const struct rs_seg_grant *g = &s->grants[n - 1];

		n = g->next;
		if (atomic_load(&g->state) != RS_G_HELD || g->owner == e->owner ||
		    g->dev != e->dev || g->ino != e->ino || compatible(g->mode, e->mode) ||
		    !overlaps(g, e->start, e->end))
			continue;
		*b = (struct blocker){ g->owner, g->start, g->end };
		return;
	}
}

static void say_blocked(struct rs_nt *t, const struct rs_nt_req *r, const struct blocker *b,
			uint64_t waited_ns)
{
	char who[160], file[RS_FILE_NAME_LEN];

	rs_nt_describe(slot_pid(t->map.seg, b->owner), who, sizeof(who));
	rs_log(RS_LOG_WARN, "blocked for %llu s on a node grant of file %s bytes "
	       "[%llu, %llu), held by %s; waiting (no lock is given up while its holder lives)",
	       (unsigned long long)(waited_ns / 1000000000ull),
	       rs_file_name(file, sizeof file, r->dev, r->ino), (unsigned long long)r->start,
	       (unsigned long long)r->end, who);
}

/* The aligned window around request r: where it would expand to, and
 * where another process's grant means the file is shared. */
static inline void acq_window(const struct rs_nt_req *r, uint64_t *ws, uint64_t *we)
{
	*ws = r->start;
	*we = r->end;
	if (r->window && r->end != RS_RANGE_EOF) {
		*ws = r->start - r->start % r->window;
		*we = r->end % r->window ? r->end - r->end % r->window + r->window : r->end;
		if (*we < r->end)
			*we = RS_RANGE_EOF;	/* wrapped */
	}
}

/*
 * Was ticket (or stamp) a handed out at or after b?  By age, counted back
 * from the table's counter: every live ticket and stamp was handed out
 * within the last 2^32, so ages order them totally, across the counter's
 * wrap too (a plain comparison there put every request queued after the
 * wrap ahead of every starved one from before it, for good).  A build
 * older than the stamps compares plainly: the two disagree only at the
 * wrap.
 * Pre:  the table lock is held (only waiters move the counter, under it).
 */
static inline int ticket_since(const struct rs_segment *s, uint32_t a, uint32_t b)
{
	uint32_t n = s->hdr.next_ticket;

	return n - a <= n - b;
}

/* What one walk of the file's chain found, for the grant, queue and wait
 * steps of rs_nt_acquire.  The sl_* fields and now last for one round
 * (one table lock), the rest for one walk. */
struct acq_scan {
	uint64_t lo, top;       /* room to expand into, between others' grants */
	uint32_t conflicts;     /* entries in the request's way */
	int others;             /* another process has a grant on the file */
	struct blocker blk;     /* the first busy grant in the way */
	uint32_t via;           /* the first running starved waiter in the way */
	/* What to sleep on (wait_grant): our nearest predecessor in the
	 * queue, the earlier WAIT entry with the highest ticket, so that
	 * each release or hand-over wakes one waiter, not all; with none,
	 * a busy grant in our way. */
	uint32_t sl_idx, sl_gen, sl_ticket, sl_owner;
	uint64_t now, sl_ns;
	int sl_wait;
	int overtaken;          /* a grant in the way, busy or freed, was granted since our ticket */
};

/*
 * Another process's WAIT entry g (slot i) in our request's way.  Only a
 * starved one ahead of us in the queue counts, and only while its owner
 * runs: a stopped or unscheduled waiter takes the range when it runs
 * again, if it is free.  The latest such entry is the one to sleep on.
 * Pre:  the table lock is held.
 */
static inline void acq_meet_waiter(struct rs_nt *t, struct rs_seg_grant *g, uint32_t i,
				   int queued, uint32_t ticket,
				   struct rs_nt_result *res, struct acq_scan *sc)
{
	struct rs_segment *s = t->map.seg;
	uint64_t age;

	RS_ASSERT(rs_lk_held(RS_LK_NT, t));
	if (!(g->flags & RS_WF_STARVED) || (queued && ticket_since(s, g->ticket, ticket)))
		return;
	if (!sc->now)
		sc->now = rs_nt_now_ns();
	age = sc->now - g->beat_ns;
	if (age >= rs_nt_present_ns) {
		/* Not running, or dead: a dead waiter's entry is freed now
		 * (one liveness look, only for an entry that stopped
		 * beating), so that it does not sit in the queue until the
		 * next reclaim. */
		if (g->owner < RS_NPROC && !owner_alive(t, g->owner)) {
			free_grant(s, g);
			res->reclaimed++;
			atomic_fetch_add(&s->hdr.reclaims, 1);
		}
		return;
	}
	sc->conflicts++;
	if (sc->via == UINT32_MAX)
		sc->via = i;
	if (!sc->sl_wait || !ticket_since(s, sc->sl_ticket, g->ticket)) {
		sc->sl_idx = i;
		sc->sl_owner = g->owner;
		sc->sl_gen = RS_GW_GEN(atomic_load(&g->gw));
		sc->sl_ticket = g->ticket;
		sc->sl_wait = 1;
		/* Wake when it would stop counting. */
		if (rs_nt_present_ns - age < sc->sl_ns)
			sc->sl_ns = rs_nt_present_ns - age + 1000000;
	}
}

/*
 * Another process's grant g (slot i) in our request's way, HELD (or in a
 * state only a stray write makes): either way it goes only once nobody
 * is inside it.  Revoked at once if idle; else marked wanted, and a
 * conflict, the first one to sleep on unless a waiter is.  Granted since
 * our request took its ticket (its stamp is ours or later), it overtook
 * us, even if it is idle by now.
 * Pre:  the table lock is held.
 */
static inline void acq_meet_held(struct rs_segment *s, struct rs_seg_grant *g, uint32_t i,
				 int queued, uint32_t ticket,
				 struct rs_nt_result *res, struct acq_scan *sc)
{
	int newly;

	RS_ASSERT(rs_lk_held(RS_LK_NT, NULL));	/* s: of the table ours holds */
	if (queued && ticket_since(s, g->ticket, ticket))
		sc->overtaken = 1;
	if (revoke_or_want(s, g, RS_WANTED, &newly)) {
		res->revoked++;
		atomic_fetch_add(&s->hdr.revokes, 1);
		return;
	}
	if (newly) {
		res->wanted++;
		atomic_fetch_add(&s->hdr.wanted_calls, 1);
	}
	if (sc->blk.owner == UINT32_MAX)
		sc->blk = (struct blocker){ g->owner, g->start, g->end };
	if (sc->sl_idx == UINT32_MAX) {
		sc->sl_idx = i;
		sc->sl_owner = g->owner;
		sc->sl_gen = RS_GW_GEN(atomic_load(&g->gw));
		sc->sl_wait = 0;
	}
	sc->conflicts++;
}

/*
 * g, HELD, if an exact call left it: freed, whoever's.  Nobody can enter
 * it again, and a chain that kept the others' until they were in
 * someone's way grew with the processes on the file, and so did every
 * walk under the table lock.  Another's on our file still says someone
 * else was here (others, met), and one in our way counts as revoked, as
 * it did when only a request in its way freed it, and may have overtaken
 * us (acq_meet_held).  1 if freed.
 * Pre:  the table lock is held.
 */
static inline int acq_free_left(struct rs_nt *t, struct rs_seg_grant *g,
				const struct rs_nt_req *r, uint64_t ws, uint64_t we, int queued,
				uint32_t ticket, struct rs_nt_result *res, struct acq_scan *sc)
{
	struct rs_segment *s = t->map.seg;

	RS_ASSERT(rs_lk_held(RS_LK_NT, t));
	if (!free_if_left(s, g))
		return 0;
	/* Freed, its fields stay as they were until a fill, which only a
	 * holder of the table lock makes. */
	if (g->owner == t->me || g->dev != r->dev || g->ino != r->ino)
		return 1;
	sc->others = 1;
	if (compatible(g->mode, r->mode))
		return 1;
	res->met |= overlaps(g, ws, we);
	if (in_way(g, r)) {
		res->revoked++;
		atomic_fetch_add(&s->hdr.revokes, 1);
		if (queued && ticket_since(s, g->ticket, ticket))
			sc->overtaken = 1;
	}
	return 1;
}

#define ACQ_WALKED 0  /* the chain walked in full, consistent */
#define ACQ_CUT    1  /* a strided request was cut: walk again */
#define ACQ_BAD    2  /* the chain does not say what the slots say */

/*
 * One walk of bucket b's chain for request r (ours to cut), counting what
 * is in its way into sc: wants or revokes busy grants of other processes,
 * frees our own left-behind exact grants and dead starved waiters.
 * Pre:  the table lock is held; sc's round fields are set.
 * Post: ACQ_WALKED with sc filled; ACQ_CUT (walk_at cleared) or ACQ_BAD
 *       with sc partly filled, to be walked again.  *wait_idx is cleared
 *       if our queue entry was reclaimed from under us.
 */
static inline int acq_walk(struct rs_nt *t, uint32_t b, struct rs_nt_req *r, uint64_t ws,
			   uint64_t we, uint32_t *wait_idx, int queued, uint32_t ticket, int *contended,
			   struct rs_nt_result *res, struct acq_scan *sc)
{
	struct rs_segment *s = t->map.seg;
	uint32_t walked = 0, count = s->hdr.chains[b].count, prev = UINT32_MAX, n;
	uint32_t *at = &s->hdr.chains[b].head;
	int bad = 0;

	RS_ASSERT(rs_lk_held(RS_LK_NT, t));
	sc->lo = 0;
	sc->top = RS_RANGE_EOF;
	sc->conflicts = 0;
	sc->others = 0;
	sc->blk.owner = UINT32_MAX;
	sc->via = UINT32_MAX;
	sc->sl_ns = rs_nt_slice_ns;
	if (*wait_idx != UINT32_MAX &&
	    (atomic_load(&s->grants[*wait_idx].state) != RS_G_WAIT ||
	     s->grants[*wait_idx].owner != t->me))
		*wait_idx = UINT32_MAX;	/* reclaimed from under us: queue again */
	if (*wait_idx != UINT32_MAX)	/* we run: our place in the queue counts */
		s->grants[*wait_idx].beat_ns = sc->now = rs_nt_now_ns();
	/* Our file's chain: every used slot of the bucket, each once.
	 * The next link is read before the grant is looked at, since
	 * freeing it takes it out of the chain. */
	for (n = s->hdr.chains[b].head; n; ) {
		uint32_t i = n - 1, st;
		struct rs_seg_grant *g;

		if (n > RS_NGRANT || walked >= count || walked++ >= RS_NGRANT) {
			bad = 1;
			break;
		}
		/* The link that names i: the previous grant's, if it
		 * is still in the chain. */
		if (prev != UINT32_MAX && *at == prev + 1)
			at = &s->grants[prev].next;
		prev = i;
		walk_at = at;
		g = &s->grants[i];
		n = g->next;
		/* A chase of links misses once per entry; fetching the next
		 * entry (and its word, on a line of its own) while this one is
		 * looked at overlaps the misses: with hundreds of processes a
		 * chain holds 10 to 40 entries, walked under the table lock. */
		if (n && n <= RS_NGRANT) {
			__builtin_prefetch(&s->grants[n - 1]);
			__builtin_prefetch(&s->grants[n - 1].gw);
		}
		st = atomic_load(&g->state);
		if (st == RS_G_FREE || bucket_of(g->dev, g->ino) != b) {
			bad = 1;
			break;
		}
		if (st == RS_G_HELD && acq_free_left(t, g, r, ws, we, queued, ticket, res, sc))
			continue;
		if (g->owner == t->me)
			continue;
		if (g->dev != r->dev || g->ino != r->ino)
			continue;
		sc->others = 1;
		/* An owner naming no slot (a stray write) is no reason to
		 * let anyone in: such a grant goes as any other, once
		 * nobody is inside (revoke_or_want below). */
		if (compatible(g->mode, r->mode))
			continue;
		if (overlaps(g, ws, we))
			res->met = 1;
		if (r->stride) {
			/* Lookahead takes only blocks nobody holds. */
			if (stride_cut(g, r) < 0) {
				walk_at = NULL;
				return ACQ_CUT;
			}
			continue;
		}
		if (!in_way(g, r)) {
			/* Room to expand into stops at others' grants. */
			if (g->end <= r->start && g->end > sc->lo)
				sc->lo = g->end;
			if (g->start >= r->end && g->start < sc->top)
				sc->top = g->start;
			continue;
		}
		*contended = 1;
		if (st == RS_G_WAIT)
			acq_meet_waiter(t, g, i, queued, ticket, res, sc);
		else	/* HELD, or a state only a stray write makes */
			acq_meet_held(s, g, i, queued, ticket, res, sc);
	}
	return bad || walked != count ? ACQ_BAD : ACQ_WALKED;
}

/*
 * Nothing in the way of r: take our queue entry, a free slot or an
 * evicted idle one, expanded as far as the scan allows, counted in.
 * Pre:  the table lock is held; sc->conflicts == 0.
 * Post: 0 with the table unlocked and res filled as rs_nt_acquire's
 *       Post says; -1 with the lock still held and res->table_full set
 *       when no slot could be had.
 */
static inline int acq_grant(struct rs_nt *t, const struct rs_nt_req *r, uint64_t ws,
			    uint64_t we, uint32_t wait_idx, int queued, uint32_t ticket,
			    int contended, uint64_t t0,
			    const struct acq_scan *sc, struct rs_nt_result *res)
{
	struct rs_segment *s = t->map.seg;
	uint64_t start = r->start, end = r->end;
	uint32_t idx;

	RS_ASSERT(rs_lk_held(RS_LK_NT, t) && sc->conflicts == 0);
	idx = wait_idx != UINT32_MAX ? wait_idx : find_free(s);
	if (idx == UINT32_MAX) {
		idx = evict_idle(s);
		res->evicted += idx != UINT32_MAX;
	}
	if (idx == UINT32_MAX) {
		res->table_full = 1;
		return -1;
	}
	if (!contended && !r->exact && r->whole && !sc->others) {
		start = 0;
		end = RS_RANGE_EOF;
	} else if (!contended && !r->exact && r->window && end != RS_RANGE_EOF) {
		start = ws > sc->lo ? ws : sc->lo;
		end = we < sc->top ? we : sc->top;
	}
	/* A node grant never leaves its cluster grant. */
	if (r->bounded) {
		start = start > r->lo ? start : r->lo;
		end = end < r->hi ? end : r->hi;
	}
	/* Counted in before the table is unlocked: an idle
	 * grant is revocable, and this one is about to be used.  Stamped
	 * with the last ticket handed out (a queued request keeps its
	 * own), so that a waiter whose ticket it is or precedes knows it
	 * was overtaken; stamping takes no ticket, so the counter moves
	 * only with waiters and its plain order stays a total one. */
	fill(t, idx, r, start, end, RS_G_HELD, queued ? ticket : s->hdr.next_ticket, 1);
	atomic_fetch_add(&s->hdr.acquires, 1);
	res->others = sc->others;
	res->gen = RS_GW_GEN(atomic_load(&s->grants[idx].gw));
	table_unlock(t);
	/* Requests queued behind ours wait for a WAIT entry,
	 * which marks nothing wanted; now that it is a grant,
	 * let them mark it, instead of sleeping out their
	 * slice while we keep it. */
	if (wait_idx != UINT32_MAX)
		wake_all(s);
	res->idx = idx;
	res->start = start;
	res->end = end;
	res->stride = r->stride;
	res->blen = r->blen;
	if (t0)
		res->wait_ns = rs_nt_now_ns() - t0;
	return 0;
}

/*
 * Something is in r's way: name whom a queue of running waiters waits
 * for when it is time to say so; take a place in the order of requests
 * (the next ticket) if we have none, and once starved, show it to later
 * requests (a WAIT entry with that ticket, starved from the start).  An
 * entry only for the starved: the others hold nobody back, and a chain
 * that kept one for every waiter was mostly waiters on an oversubscribed
 * node (110 of 121 entries a walk, 256 processes on one region), walked
 * under the table lock at every acquisition.
 * Pre:  the table lock is held.
 * Post: *queued with our *ticket; *wait_idx is our WAIT entry if starved,
 *       unless the table is full.
 */
static inline void acq_queue(struct rs_nt *t, const struct rs_nt_req *r, uint32_t *wait_idx,
			     int *queued, uint32_t *ticket, int starved, uint64_t t0,
			     int warned, struct acq_scan *sc, struct rs_nt_result *res)
{
	struct rs_segment *s = t->map.seg;
	uint32_t idx;

	RS_ASSERT(rs_lk_held(RS_LK_NT, t));
	/* Queued behind a running waiter only: whom does the queue
	 * wait for?  Looked up only when it is time to say so. */
	if (!warned && sc->blk.owner == UINT32_MAX && sc->via != UINT32_MAX && t0 &&
	    rs_nt_now_ns() - t0 > rs_nt_warn_ns)
		held_in_way(s, &s->grants[sc->via], &sc->blk);
	if (!*queued) {
		*ticket = ++s->hdr.next_ticket;
		*queued = 1;
	}
	if (starved && *wait_idx == UINT32_MAX && sc->conflicts) {
		/* An idle grant is a cache: a starved waiter without its
		 * entry could be passed by every newcomer that evicts one. */
		idx = find_free(s);
		if (idx == UINT32_MAX) {
			idx = evict_idle(s);
			res->evicted += idx != UINT32_MAX;
		}
		if (idx != UINT32_MAX) {
			fill(t, idx, r, r->start, r->end, RS_G_WAIT, *ticket, 0);
			s->grants[idx].flags |= RS_WF_STARVED;
			*wait_idx = idx;
		}
	}
}

/*
 * Sleep until what keeps r out may have changed (the entry sc chose, or
 * the table's change counter from seen), then look at the liveness of
 * whom we wait for, and say whom we are blocked by once it has lasted.
 * Pre:  the table lock is not held.
 */
static inline void acq_wait(struct rs_nt *t, const struct rs_nt_req *r, uint32_t seen,
			    uint64_t *t0, uint64_t *last_live, int *warned,
			    const struct acq_scan *sc, struct rs_nt_result *res)
{
	struct rs_segment *s = t->map.seg;

	/* It sleeps: under the table lock every other process would wait too. */
	RS_ASSERT(!rs_lk_held(RS_LK_NT, NULL));
	if (!*t0)
		*t0 = *last_live = rs_nt_now_ns();
	res->waited = 1;
	if (sc->sl_idx < RS_NGRANT)
		wait_grant(&s->grants[sc->sl_idx], sc->sl_gen, sc->sl_wait, sc->sl_ns);
	else
		wait_change(s, seen, rs_nt_slice_ns);
	/* The liveness of what we wait for: the owners of the entry we
	 * sleep on and of the first grant in our way (one system call
	 * each); only if one is dead, or we wait for no one in
	 * particular, every slot's (a full reclaim: with hundreds of
	 * waiters, each looking at every slot every 100 ms made the
	 * looks grow with the square of the processes). */
	if (rs_nt_now_ns() - *last_live > LIVENESS_NS) {
		if (sc->sl_idx >= RS_NGRANT || !owner_alive(t, sc->sl_owner) ||
		    (sc->blk.owner != UINT32_MAX && !owner_alive(t, sc->blk.owner)))
			res->reclaimed += rs_nt_reclaim(t);
		*last_live = rs_nt_now_ns();
	}
	if (!*warned && sc->blk.owner != UINT32_MAX && rs_nt_now_ns() - *t0 > rs_nt_warn_ns) {
		*warned = 1;
		say_blocked(t, r, &sc->blk, rs_nt_now_ns() - *t0);
	}
}

/* In rounds, each under the table lock: walk the file's chain (acq_walk);
 * with nothing in the way, take the grant (acq_grant); else queue
 * (acq_queue), unlock, and wait (acq_wait).  Contract in nodelock.h. */
int rs_nt_acquire(struct rs_nt *t, const struct rs_nt_req *req, struct rs_nt_result *res,
		  char *why, size_t whylen)
{
	/* Ours to cut (stride_cut): a strided request shrinks as it scans. */
	struct rs_nt_req rq = *req;
	const struct rs_nt_req *r = &rq;
	struct rs_segment *s = t->map.seg;
	uint32_t wait_idx = UINT32_MAX, ticket = 0;
	uint64_t t0 = 0, last_live = 0, ws, we;
	int contended = 0, warned = 0, queued = 0, overtaken = 0, starved = 0;

	/* Registration is not asserted: exit may unregister us while another
	 * thread waits here, and the Post says -1 for that. */
	RS_ASSERT(req->start < req->end);
	memset(res, 0, sizeof(*res));
	if (!s || t->me >= RS_NPROC) {
		snprintf(why, whylen, "not attached to the node lock table");
		return -1;
	}
	if (rq.stride && (!rq.exact || rq.bounded || rq.end == RS_RANGE_EOF ||
			  !rs_stride_ok(rq.start, rq.end, rq.stride, rq.blen)))
		rq.stride = rq.blen = 0;
	acq_window(r, &ws, &we);
	for (;;) {
		struct acq_scan sc = { .blk = { UINT32_MAX, 0, 0 }, .sl_idx = UINT32_MAX,
				       .sl_owner = UINT32_MAX };
		uint32_t seen, b;
		int w;

		if (table_lock(t) < 0) {
			/* Unregistered meanwhile (exit): our queue entry went
			 * with our grants; the caller attaches again. */
			snprintf(why, whylen, "not attached to the node lock table");
			return -1;
		}
		b = bucket_of(r->dev, r->ino);
		for (;;) {
			w = acq_walk(t, b, &rq, ws, we, &wait_idx, queued, ticket, &contended,
				     res, &sc);
			if (w == ACQ_CUT)
				continue;
			overtaken |= sc.overtaken;
			if (queued && !starved) {
				uint64_t waited = rs_nt_now_ns() - t0;

				starved = (overtaken && waited >= STARVE_NS) || waited >= rs_nt_starve_ns;
			}
			walk_at = NULL;
			if (w == ACQ_WALKED)
				break;
			/* The chain does not say what the slots say (a stray
			 * write: a death inside is scrubbed by the next holder of
			 * the lock): rebuild every chain from the slots, look again. */
			recount(s);
		}
		if (sc.conflicts == 0 &&
		    acq_grant(t, r, ws, we, wait_idx, queued, ticket, contended, t0, &sc, res) == 0)
			return 0;
		acq_queue(t, r, &wait_idx, &queued, &ticket, starved, t0, warned, &sc, res);
		seen = atomic_load(&s->hdr.change);
		table_unlock(t);
		acq_wait(t, r, seen, &t0, &last_live, &warned, &sc, res);
	}
}

void rs_nt_release(struct rs_nt *t, uint32_t idx, uint32_t gen)
{
	struct rs_segment *s = t->map.seg;
	struct rs_seg_grant *g;

	/* idx comes from our own memory (a cache word, a result), never
	 * from the segment: out of range, it is our bug.  That the grant is
	 * still ours at gen is the segment's to say, and it may have moved
	 * on (revoked meanwhile), which is no broken contract. */
	RS_ASSERT(idx < RS_NGRANT);
	if (!s || idx >= RS_NGRANT || t->me >= RS_NPROC || table_lock(t) < 0)
		return;
	g = &s->grants[idx];
	if (atomic_load(&g->state) == RS_G_HELD && g->owner == t->me) {
		uint64_t v = atomic_load(&g->gw);

		/* Only our incarnation, and only once nobody is inside. */
		while (RS_GW_GEN(v) == gen && RS_GW_USERS(v) == 0) {
			if (atomic_compare_exchange_weak(&g->gw, &v, RS_GW_FREE(gen + 1))) {
				mark_free(s, g);
				wake_grant(g, v);
				break;
			}
		}
	}
	table_unlock(t);
	wake_all(s);
}
