/*
 * Node lock table: EXSH grants in shared memory.
 *
 * THEORY
 *
 * This is GFS2's EXSH glock (seed 004) moved one level up: a process plays
 * the node, its threads play the node's processes, the table plays the
 * DLM.  A process holds a grant on a byte range of a file in one of two
 * modes: SHARED (readers of several processes) or EXSH, exclusive towards
 * other processes and shared by all the threads of the holder, which then
 * order themselves with the process-wide range lock (rangelock.c).
 *
 * Interface.  rs_nt_acquire(table, request) returns a grant; the process
 * keeps it after the call (grants.c caches it) and counts its users in the
 * grant's first cache line, which only the holder writes.  rs_nt_release
 * frees it.  Everything is an index into fixed arrays; nothing in the
 * segment is a pointer.
 *
 * Common case.  A process working in its own region acquires a grant once,
 * expanded when nothing conflicts to the surrounding aligned window
 * (req->window, 4 MiB by default) clipped to the gaps between other
 * processes' grants, the way Lustre's LDLM grows extent locks.  Later calls
 * inside it only increment the user count: no table lock, no shared lock
 * word.  A request that had to revoke someone is not expanded, so two
 * processes that meet in a window settle on disjoint grants instead of
 * taking the window from each other in turn.
 *
 * Conflicts.  Under the table mutex the requester scans the grants of the
 * same file.  An idle grant (users == 0) of another process is revoked
 * directly: freed, its generation bumped, so the holder's cached copy is
 * seen to be stale.  A busy one is marked wanted: its holder admits no new
 * users (the fast path checks the flag after incrementing users, and the
 * requester re-reads users after setting it: each sees the other, both
 * accesses being sequentially consistent), drains, and releases it when
 * the last user leaves, waking the table's futex.  That is GFS2's blocking
 * callback and demote.  No minimum hold time: a grant wanted by another
 * process is given up as soon as its current calls finish, because here a
 * demote costs microseconds, not a DLM round trip, and a hold time would be
 * added latency for every writer that meets another.
 *
 * Fairness.  A requester that must wait records its request in the table
 * as a WAIT entry with a ticket.  Later requests that conflict with an
 * earlier waiting request wait behind it, so a stream of newcomers cannot
 * starve anyone; holders see wanted and drain.
 *
 * Waiting.  Sleep on the table's change counter (a shared futex) with a
 * 20 ms timeout; every wake re-scans.  Every 100 ms of waiting, and on
 * every attach, the liveness of the processes we wait for is checked.
 *
 * Crashes.  Each attached process holds an OFD lock on one byte of the
 * segment file (segment.h): the kernel drops it when the process dies,
 * however it dies, and a new process with the same pid does not hold it.
 * A dead process's grants and slot are freed by whoever waits on them.  The
 * table lock word holds its holder's process slot: a waiter that finds the
 * holder dead (by the same liveness lock) takes it over, re-validates
 * every slot, and carries on; since the table has no lists, only
 * per-slot records whose state word is written last, there is nothing to
 * repair beyond that check.  (A robust pthread mutex would do the same,
 * but its glibc internals would have to be trusted in untrusted memory: a
 * garbage mutex kind makes glibc abort.)  A segment
 * that fails validation is refused; the caller falls back to process scope.
 */
#include "nodelock.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "rangeshim/rangelock.h"

#define WAIT_SLICE_NS   (20ull * 1000 * 1000)
#define LIVENESS_NS     (100ull * 1000 * 1000)
#define LOCK_TIMEOUT_NS (2ull * 1000 * 1000 * 1000)

uint64_t rs_nt_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void wake_all(struct rs_segment *s)
{
	int saved = errno;

	atomic_fetch_add(&s->hdr.change, 1);
	syscall(SYS_futex, &s->hdr.change, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
	errno = saved;
}

static void wait_change(struct rs_segment *s, uint32_t seen, uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) };
	int saved = errno;

	syscall(SYS_futex, &s->hdr.change, FUTEX_WAIT, seen, &ts, NULL, 0);
	errno = saved;
}

static uint32_t lock_id(const struct rs_nt *t)
{
	return t->me < RS_NPROC ? t->me + 1 : RS_LOCK_ANON;
}

/* After taking the lock from a dead or impossible holder: it may have
 * died anywhere inside, so every record is checked anew, and the free
 * slots get a new generation (it may have died inside free_grant,
 * between marking a slot free and bumping its generation). */
static int scrub(struct rs_segment *s, char *why, size_t whylen)
{
	if (rs_seg_check(s, why, whylen) < 0)
		return -1;
	for (uint32_t i = 0; i < RS_NGRANT; i++)
		if (atomic_load(&s->grants[i].state) == RS_G_FREE)
			atomic_fetch_add(&s->grants[i].gw, 1ull << 32);
	return 0;
}

/*
 * Take the table lock.  -1: unusable (corrupt, or held for seconds).
 * A holder that died is found by its liveness lock and the lock taken
 * over; a value no live process could have written is taken over at once;
 * an anonymous holder (a process registering) after a second.
 */
static int table_lock(struct rs_nt *t, char *why, size_t whylen)
{
	struct rs_segment *s = t->map.seg;
	uint32_t me = lock_id(t), seen = 0;
	uint64_t start = rs_nt_now_ns(), seen_since = start, last_live = start;

	for (;;) {
		uint32_t v = 0;
		uint64_t now;
		int steal = 0;

		if (atomic_compare_exchange_strong(&s->hdr.lock, &v, me))
			return 0;
		now = rs_nt_now_ns();
		if (v != seen) {
			seen = v;
			seen_since = now;
		}
		if (me != RS_LOCK_ANON && v == me)
			steal = 0;		/* another thread of ours */
		else if (v == RS_LOCK_ANON)
			steal = now - seen_since > LIVENESS_NS * 10;
		else if (v > RS_NPROC)
			steal = 1;		/* nobody could have written it */
		else if (now - last_live > LIVENESS_NS) {
			last_live = now;
			steal = !rs_seg_alive(&t->map, v - 1);
		}
		if (steal && atomic_compare_exchange_strong(&s->hdr.lock, &v, me)) {
			if (scrub(s, why, whylen) == 0)
				return 0;
			atomic_store(&s->hdr.lock, 0);
			return -1;
		}
		if (now - start > LOCK_TIMEOUT_NS) {
			snprintf(why, whylen, "table lock held for over %llu s",
				 (unsigned long long)(LOCK_TIMEOUT_NS / 1000000000ull));
			return -1;
		}
		atomic_fetch_add(&s->hdr.lock_waiters, 1);
		{
			struct timespec ts = { 0, 10 * 1000 * 1000 };
			int saved = errno;

			syscall(SYS_futex, &s->hdr.lock, FUTEX_WAIT, v, &ts, NULL, 0);
			errno = saved;
		}
		atomic_fetch_sub(&s->hdr.lock_waiters, 1);
	}
}

static void table_unlock(struct rs_nt *t)
{
	struct rs_segment *s = t->map.seg;

	atomic_store(&s->hdr.lock, 0);
	if (atomic_load(&s->hdr.lock_waiters)) {
		int saved = errno;

		syscall(SYS_futex, &s->hdr.lock, FUTEX_WAKE, 1, NULL, NULL, 0);
		errno = saved;
	}
}

static void free_grant(struct rs_seg_grant *g)
{
	uint64_t v = atomic_load(&g->gw);

	atomic_store(&g->state, RS_G_FREE);
	/* Next generation, no wanted bit; a stale holder's racing fetch_or
	 * is either overwritten or cleared again by fill(). */
	while (!atomic_compare_exchange_weak(&g->gw, &v, (uint64_t)(RS_GW_GEN(v) + 1) << 32))
		;
}

/* Under the table mutex. */
static uint32_t reclaim_locked(struct rs_nt *t)
{
	struct rs_segment *s = t->map.seg;
	uint32_t dead = 0;

	for (uint32_t p = 0; p < RS_NPROC; p++) {
		if (p == t->me || atomic_load(&s->procs[p].state) != RS_PROC_LIVE ||
		    rs_seg_alive(&t->map, p))
			continue;
		for (uint32_t i = 0; i < RS_NGRANT; i++) {
			struct rs_seg_grant *g = &s->grants[i];

			if (atomic_load(&g->state) == RS_G_FREE || g->owner != p)
				continue;
			/* Its threads died inside calls: nobody will count them
			 * out, and no thread of a dead process can count in. */
			atomic_store(&g->users, 0);
			free_grant(g);
		}
		atomic_store(&s->procs[p].state, RS_PROC_FREE);
		s->procs[p].gen++;
		dead++;
	}
	/* A grant whose owner slot is free belongs to nobody who will ever
	 * drain or release it (only corruption makes one): nobody may wait
	 * for it forever. */
	for (uint32_t i = 0; i < RS_NGRANT; i++) {
		struct rs_seg_grant *g = &s->grants[i];
		uint32_t o = g->owner;

		if (atomic_load(&g->state) != RS_G_FREE && o < RS_NPROC && o != t->me &&
		    atomic_load(&s->procs[o].state) != RS_PROC_LIVE) {
			atomic_store(&g->users, 0);
			free_grant(g);
			dead++;
		}
	}
	if (dead) {
		atomic_fetch_add(&s->hdr.reclaims, dead);
		wake_all(s);
	}
	return dead;
}

uint32_t rs_nt_reclaim(struct rs_nt *t)
{
	char why[160];
	uint32_t n;

	if (table_lock(t, why, sizeof(why)) < 0)
		return 0;
	n = reclaim_locked(t);
	table_unlock(t);
	return n;
}

static int still_named(const struct rs_nt *t)
{
	struct stat a, b;

	return fstat(t->map.fd, &a) == 0 && stat(t->map.path, &b) == 0 &&
	       a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

static int register_once(struct rs_nt *t, const char *name, char *why, size_t whylen);

/* `rangeshim clean` may unlink the segment between our attach and our
 * claim; then we would be alone on a table nobody else sees.  Check the
 * name still leads to our file once we hold a slot, and start over if not. */
int rs_nt_register(struct rs_nt *t, const char *name, char *why, size_t whylen)
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

static int register_once(struct rs_nt *t, const char *name, char *why, size_t whylen)
{
	struct rs_segment *s;

	t->me = UINT32_MAX;
	t->pid = (int32_t)syscall(SYS_getpid);
	if (rs_seg_attach(&t->map, name, 1, why, whylen) < 0)
		return -1;
	s = t->map.seg;
	if (table_lock(t, why, whylen) < 0) {
		rs_seg_detach(&t->map);
		return -1;
	}
	reclaim_locked(t);
	for (uint32_t p = 0; p < RS_NPROC; p++) {
		if (atomic_load(&s->procs[p].state) != RS_PROC_FREE || rs_seg_claim(&t->map, p) < 0)
			continue;
		/* A slot freed by reclaim may still list grants if its owner
		 * died mid-update; they are the dead owner's, not ours. */
		for (uint32_t i = 0; i < RS_NGRANT; i++)
			if (atomic_load(&s->grants[i].state) != RS_G_FREE && s->grants[i].owner == p)
				free_grant(&s->grants[i]);
		s->procs[p].pid = t->pid;
		s->procs[p].gen++;
		s->procs[p].attached_ns = realtime_ns();
		atomic_store(&s->procs[p].state, RS_PROC_LIVE);
		t->me = p;
		break;
	}
	table_unlock(t);
	if (t->me == UINT32_MAX) {
		snprintf(why, whylen, "all %u process slots of %s are in use", RS_NPROC, t->map.path);
		rs_seg_detach(&t->map);
		return -1;
	}
	return 0;
}

void rs_nt_unregister(struct rs_nt *t)
{
	struct rs_segment *s = t->map.seg;
	char why[160];

	if (!s)
		return;
	if (table_lock(t, why, sizeof(why)) == 0) {
		uint32_t busy = 0;

		for (uint32_t i = 0; i < RS_NGRANT; i++) {
			struct rs_seg_grant *g = &s->grants[i];

			if (atomic_load(&g->state) == RS_G_FREE || g->owner != t->me)
				continue;
			/* A thread still inside a call (exit with threads
			 * running) keeps its grant; our death frees it. */
			atomic_fetch_or(&g->gw, RS_WANTED_SELF);
			if (atomic_load(&g->users) == 0)
				free_grant(g);
			else
				busy++;
		}
		if (!busy) {
			atomic_store(&s->procs[t->me].state, RS_PROC_FREE);
			s->procs[t->me].gen++;
		}
		table_unlock(t);
		wake_all(s);
		if (busy) {
			t->me = UINT32_MAX;
			return;	/* keep the fd: its liveness lock goes when we die */
		}
	}
	/* The mapping stays: at exit, other threads may still be leaving
	 * grants they entered.  The fd (and our liveness lock) goes. */
	if (t->map.fd_slot) {
		int fd = atomic_exchange(t->map.fd_slot, -1);

		if (fd >= 0)
			syscall(SYS_close, fd);
	} else if (t->map.fd >= 0) {
		syscall(SYS_close, t->map.fd);
	}
	t->map.fd = -1;
	t->me = UINT32_MAX;
}

void rs_nt_forget(struct rs_nt *t)
{
	/* The fd shares the parent's open file description, and with it the
	 * parent's liveness lock: close ours so the parent's death shows. */
	if (t->map.fd >= 0)
		syscall(SYS_close, t->map.fd);
	t->map.fd = -1;
	t->map.seg = NULL;
	t->me = UINT32_MAX;
}

static int compatible(unsigned a, unsigned b)
{
	return a == RS_G_SHARED && b == RS_G_SHARED;
}

static int overlaps(const struct rs_seg_grant *g, uint64_t start, uint64_t end)
{
	return g->start < end && start < g->end;
}

static uint32_t find_free(struct rs_segment *s)
{
	for (uint32_t i = 0; i < RS_NGRANT; i++)
		if (atomic_load(&s->grants[i].state) == RS_G_FREE)
			return i;
	return UINT32_MAX;
}

/* Table full: take back an idle grant, anyone's (an idle grant is only a
 * cache).  Returns a free slot or UINT32_MAX. */
static uint32_t evict_idle(struct rs_segment *s)
{
	for (uint32_t i = 0; i < RS_NGRANT; i++) {
		struct rs_seg_grant *g = &s->grants[i];

		if (atomic_load(&g->state) != RS_G_HELD)
			continue;
		atomic_fetch_or(&g->gw, RS_WANTED);
		if (atomic_load(&g->users) == 0) {
			free_grant(g);
			return i;
		}
	}
	return UINT32_MAX;
}

static void fill(struct rs_nt *t, struct rs_seg_grant *g, const struct rs_nt_req *r,
		 uint64_t start, uint64_t end, uint32_t state, uint32_t ticket)
{
	/* users is left alone: a holder of the previous incarnation may be
	 * between its increment and its decrement (it backs off when it
	 * sees the generation moved); resetting it would make that
	 * decrement underflow. */
	/* A new generation: no cached word of an earlier incarnation can
	 * match, whatever happened to the slot before. */
	atomic_store(&g->gw, (uint64_t)(RS_GW_GEN(atomic_load(&g->gw)) + 1) << 32);
	__atomic_store_n(&g->mode, r->mode, __ATOMIC_RELAXED);
	g->owner = t->me;
	g->ticket = ticket;
	g->dev = r->dev;
	g->ino = r->ino;
	/* Read racily by holders' fast paths, which check the generation. */
	__atomic_store_n(&g->start, start, __ATOMIC_RELAXED);
	__atomic_store_n(&g->end, end, __ATOMIC_RELAXED);
	g->since_ns = realtime_ns();
	atomic_store(&g->state, state);
}

int rs_nt_acquire(struct rs_nt *t, const struct rs_nt_req *r, struct rs_nt_result *res,
		  char *why, size_t whylen)
{
	struct rs_segment *s = t->map.seg;
	uint32_t wait_idx = UINT32_MAX, ticket = 0;
	uint64_t t0 = 0, last_live = 0;
	int contended = 0;

	memset(res, 0, sizeof(*res));
	for (;;) {
		uint64_t lo = 0, hi = RS_RANGE_EOF;
		uint32_t conflicts = 0, seen, idx;

		if (table_lock(t, why, whylen) < 0)
			goto fail;
		if (wait_idx != UINT32_MAX &&
		    (atomic_load(&s->grants[wait_idx].state) != RS_G_WAIT ||
		     s->grants[wait_idx].owner != t->me))
			wait_idx = UINT32_MAX;	/* reclaimed from under us: queue again */
		for (uint32_t i = 0; i < RS_NGRANT; i++) {
			struct rs_seg_grant *g = &s->grants[i];
			uint32_t st = atomic_load(&g->state);

			if (st == RS_G_FREE || g->owner == t->me || g->dev != r->dev || g->ino != r->ino)
				continue;
			if (g->owner >= RS_NPROC || g->start >= g->end ||
			    atomic_load(&g->users) > RS_MAX_USERS) {
				snprintf(why, whylen, "grant %u is malformed", i);
				table_unlock(t);
				goto fail;
			}
			if (compatible(g->mode, r->mode))
				continue;
			if (!overlaps(g, r->start, r->end)) {
				/* Room to expand into stops at others' grants. */
				if (g->end <= r->start && g->end > lo)
					lo = g->end;
				if (g->start >= r->end && g->start < hi)
					hi = g->start;
				continue;
			}
			contended = 1;
			if (st == RS_G_WAIT) {
				if (wait_idx == UINT32_MAX || g->ticket < ticket)
					conflicts++;
				continue;
			}
			if (!(atomic_fetch_or(&g->gw, RS_WANTED) & RS_WANTED)) {
				res->wanted++;
				atomic_fetch_add(&s->hdr.wanted_calls, 1);
			}
			if (atomic_load(&g->users) == 0) {
				free_grant(g);
				res->revoked++;
				atomic_fetch_add(&s->hdr.revokes, 1);
				continue;
			}
			conflicts++;
		}
		if (conflicts == 0) {
			uint64_t start = r->start, end = r->end;

			idx = wait_idx != UINT32_MAX ? wait_idx : find_free(s);
			if (idx == UINT32_MAX)
				idx = evict_idle(s);
			if (idx != UINT32_MAX) {
				if (!contended && r->window && end != RS_RANGE_EOF) {
					uint64_t ws = start - start % r->window;
					uint64_t we = end % r->window ? end - end % r->window + r->window : end;

					if (we < end)
						we = RS_RANGE_EOF;	/* wrapped */
					start = ws > lo ? ws : lo;
					end = we < hi ? we : hi;
				}
				/* Counted in before the table is unlocked: an idle
				 * grant is revocable, and this one is about to be used. */
				atomic_fetch_add(&s->grants[idx].users, 1);
				fill(t, &s->grants[idx], r, start, end, RS_G_HELD, 0);
				atomic_fetch_add(&s->hdr.acquires, 1);
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
				if (t0)
					res->wait_ns = rs_nt_now_ns() - t0;
				return 0;
			}
			res->table_full = 1;
		}
		if (wait_idx == UINT32_MAX && conflicts) {
			idx = find_free(s);
			if (idx != UINT32_MAX) {
				ticket = ++s->hdr.next_ticket;
				fill(t, &s->grants[idx], r, r->start, r->end, RS_G_WAIT, ticket);
				wait_idx = idx;
			}
		}
		seen = atomic_load(&s->hdr.change);
		table_unlock(t);
		if (!t0)
			t0 = last_live = rs_nt_now_ns();
		res->waited = 1;
		wait_change(s, seen, WAIT_SLICE_NS);
		if (rs_nt_now_ns() - last_live > LIVENESS_NS) {
			res->reclaimed += rs_nt_reclaim(t);
			last_live = rs_nt_now_ns();
		}
	}
fail:
	if (wait_idx != UINT32_MAX && s->grants[wait_idx].owner == t->me)
		free_grant(&s->grants[wait_idx]);
	return -1;
}

void rs_nt_release(struct rs_nt *t, uint32_t idx, uint32_t gen)
{
	struct rs_segment *s = t->map.seg;
	struct rs_seg_grant *g;
	char why[160];

	if (!s || idx >= RS_NGRANT || table_lock(t, why, sizeof(why)) < 0)
		return;
	g = &s->grants[idx];
	if (atomic_load(&g->state) == RS_G_HELD && g->owner == t->me &&
	    RS_GW_GEN(atomic_load(&g->gw)) == gen)
		free_grant(g);
	table_unlock(t);
	wake_all(s);
}
