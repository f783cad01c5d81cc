/*
 * The node lock table: EXSH grants in shared memory.  Table logic only;
 * no interposition, so it is tested on its own (tests/test_nodelock.c).
 * grants.c is the process side: which grants this process caches.
 */
#ifndef RS_NODELOCK_H
#define RS_NODELOCK_H

#include <stddef.h>
#include <stdint.h>

#include "segment.h"

/* A process's handle on the table. */
struct rs_nt {
	struct rs_seg_map map;
	uint32_t me;          /* our process slot */
	int32_t pid;
	_Atomic uint32_t local;  /* one thread of ours at the table lock at a time */
	uint32_t nonce;          /* this registration's, in the lock word */
};

/* Blocked on a live process this long: say whom we wait for. */
extern uint64_t rs_nt_warn_ns;
/* A waiter sleeps at most this long between scans (20 ms). */
extern uint64_t rs_nt_slice_ns;
/* A starved waiter holds later requests back only while its last scan
 * is younger than this (RS_PRESENT_NS, segment.h). */
extern uint64_t rs_nt_present_ns;
/* A waiter nobody overtook is starved after this long (100 ms); one
 * overtaken, after 1 ms. */
extern uint64_t rs_nt_starve_ns;
/* A table-lock waiter sleeps at most this long (10 ms), and a wake in
 * flight holds other wakes back for this long (2 ms). */
extern uint64_t rs_nt_lock_sleep_ns;
extern uint32_t rs_nt_woken_ms;
/* A registrant looks for the dead at every slot of a table of up to
 * RS_NT_SWEEP_WHOLE processes, else at RS_NT_SWEEP_SLOTS of them
 * (nodelock.c, sweep_suspects). */
#define RS_NT_SWEEP_WHOLE 64u
#define RS_NT_SWEEP_SLOTS 16u
/* A grant waiter's watch before it sleeps, in pauses: where the budget
 * starts, and the bounds it learns within (nodelock.c, spin_budget).
 * -DGRANT_SPIN=N sets the most (benchmarks.md tunes it that way). */
#ifdef GRANT_SPIN
#define RS_NT_SPIN_MAX GRANT_SPIN
#else
#define RS_NT_SPIN_MAX 400
#endif
#define RS_NT_SPIN_MIN (RS_NT_SPIN_MAX < 32 ? RS_NT_SPIN_MAX : 32)
/* The budget after a watch of budget pauses that saw the word change
 * (changed) or not. */
uint32_t rs_nt_spin_next(uint32_t budget, int changed);

struct rs_nt_req {
	uint64_t dev, ino;
	uint64_t start, end;  /* [start, end); end may be RS_RANGE_EOF */
	unsigned mode;        /* RS_G_SHARED, RS_G_EXSH or RS_G_APPEND */
	uint64_t window;      /* expand to this alignment when uncontended */
	int exact;            /* grant exactly [start, end): the file is contended */
	int whole;            /* no other process has a grant on the file: grant
			       * all of it (SHARED and EXSH; "A lone process") */
	int bounded;          /* expand only within [lo, hi): cluster scope's */
	uint64_t lo, hi;      /* cluster grant, which holds [start, end) */
	/* Strided ("Strided grants"): only the blocks of blen bytes at
	 * start + k*stride below end; the first is the call's range.
	 * With exact set; never with bounded.  0: all of [start, end). */
	uint64_t stride, blen;
};

struct rs_nt_result {
	uint32_t idx, gen;
	uint64_t start, end;  /* what was granted (expanded) */
	int waited;           /* slept at least once */
	uint64_t wait_ns;
	uint32_t revoked;     /* idle grants of others revoked directly */
	uint32_t wanted;      /* busy grants of others marked wanted */
	uint32_t reclaimed;   /* dead processes whose grants were freed */
	int table_full;       /* had to wait for a free slot */
	uint32_t evicted;     /* idle grants taken back to make room */
	int met;              /* another process had an incompatible grant in
			       * the request's window: the file is shared here */
	int others;           /* another process had a grant (any) on the file */
	uint64_t stride, blen;  /* a strided grant's (0: a plain one) */
};

/* Attach to the segment named name (creating it) and take a process slot.
 * 0, or -1 with a one-line reason. */
int rs_nt_register(struct rs_nt *t, const char *name, char *why, size_t whylen);
/* The same on a handle that was registered before and unregistered,
 * which other threads may still be using (exit, then a straggler). */
int rs_nt_register_again(struct rs_nt *t, const char *name, char *why, size_t whylen);
/* Release every grant and the slot; close the fd.  The mapping is kept
 * (other threads may still touch grants they hold). */
void rs_nt_unregister(struct rs_nt *t);
/* Forget the segment without touching it: a forked child's copy. */
void rs_nt_forget(struct rs_nt *t);
/* Drop the wakes this thread owes (a vfork child's, dead inside a hold:
 * rs_vfork_parent). */
void rs_nt_wakes_forget(void);

/*
 * Pre:  registered; req->start < req->end.
 * Post: 0 and res->idx is a grant held by us, covering the request, with
 *       no other process holding an incompatible overlapping grant, and
 *       with one user counted in (the caller's; leave it by decrementing
 *       gw as for any grant); -1 only when not registered.
 * Never gives up: waits for live holders however long they take (and
 * says whom it waits for after rs_nt_warn_ns), takes over only from the
 * dead, re-checking their liveness as it waits.
 */
int rs_nt_acquire(struct rs_nt *t, const struct rs_nt_req *req, struct rs_nt_result *res,
		  char *why, size_t whylen);

/* Pre: we hold grant idx at generation gen.  Post: it is free, waiters woken.
 * A grant revoked meanwhile (gen moved on) is left alone. */
void rs_nt_release(struct rs_nt *t, uint32_t idx, uint32_t gen);

/* g's word was old before a change (the last user left): wake whoever
 * sleeps on it, if old says someone does (RS_SLEEPERS). */
void rs_nt_wake_grant(struct rs_seg_grant *g, uint64_t old);

/* Free the exact grants our calls have left (nodelock.c, "Exact
 * grants"), which the next scan would otherwise free. */
void rs_nt_free_left(struct rs_nt *t);

/* Free the slots and grants of dead processes; returns how many died. */
uint32_t rs_nt_reclaim(struct rs_nt *t);

uint64_t rs_nt_now_ns(void);

/* "pid 1234 (dd), stopped (...)": for messages about whom we wait for. */
void rs_nt_describe(int32_t pid, char *buf, size_t len);
/* pid's command (into comm, "?" if unknown) and its /proc state letter
 * ('R', 'S', 'T', ...), or 0 if /proc has no word on it. */
char rs_nt_proc_stat(int32_t pid, char *comm, size_t commlen);

/* The table lock itself, for tests that play a holder stopped inside. */
void rs_nt_lock_table(struct rs_nt *t);
void rs_nt_unlock_table(struct rs_nt *t);

#endif
