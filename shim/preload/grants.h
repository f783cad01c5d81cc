/*
 * The process side of node scope: which node grants this process holds,
 * cached per file, and the per-call enter/leave on them.  The table itself
 * is nodelock.c.  A call first enters a grant covering its range (EXSH
 * for writes, SHARED or EXSH for reads), then takes the process range
 * lock; it leaves in the reverse order.  Cross-process waits therefore
 * happen only while a thread holds nothing, and grants of several files
 * are entered in (dev, ino) order: no cycle can form.
 */
#ifndef RS_GRANTS_H
#define RS_GRANTS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "fdtable.h"
#include "lockorder.h"
#include "segment.h"

/* Cache words: the grant's generation << 32 | its byte offset in the
 * segment (never 0: the header comes first).  0 is an empty entry.  The
 * offset is below 2^30, so one xor with the grant's word, shifted right
 * by 30, is zero exactly when the generation matches and no wanted bit
 * is set (segment.h): the fast path's whole test. */
#define RS_GWORD_OFF(idx) ((uint32_t)(offsetof(struct rs_segment, grants) + \
				      (size_t)(idx) * sizeof(struct rs_seg_grant)))
#define RS_GWORD_IDX(w) ((uint32_t)((uint32_t)(w) - offsetof(struct rs_segment, grants)) / \
			 (uint32_t)sizeof(struct rs_seg_grant))
#define RS_GWORD_GEN(w) ((uint32_t)((w) >> 32))
_Static_assert(sizeof(struct rs_segment) < (1u << 30), "cache words need offsets below 2^30");

struct rs_gref {
	struct rs_seg_grant *g;     /* NULL: no grant held (node scope off) */
	struct rs_file *file;
};

/* Node scope is in force: attached, or not yet tried. */
extern int rs_node_on;
extern struct rs_segment *rs_node_seg;
extern uint32_t rs_node_me;

void rs_grants_init(void);
int rs_grant_enter_slow(struct rs_file *f, uint64_t start, uint64_t end, unsigned rlmode,
			struct rs_gref *ref);
/*
 * Enter a grant covering [start, end) for a single-threaded process's
 * vector call whose array costs system calls to read (rs_iov_solo): if
 * this process's last acquisition on f met nobody (and none met anyone
 * for a second), acquire, asking for the whole file even when a cached
 * grant covers the range, so that the calls after it need not read their
 * arrays at all; else rs_grant_enter.  With no acquisition on f to go
 * by, a cached grant serves, and a miss asks for the whole file.  One such acquisition per
 * acquisition alone: one that gets less than the whole file stops the
 * asking.  ref->g says whether a grant was entered, as rs_grant_enter's.
 */
int rs_grant_enter_iov(struct rs_file *f, uint64_t start, uint64_t end, unsigned rlmode,
		       struct rs_gref *ref);
/* A user has just left a wanted grant; old is the word before it left:
 * if it was the last, release the grant. */
void rs_grant_idle(struct rs_gref *ref, uint64_t old);
/* rs_grant_file_closed: declared in fdtable.h, which calls it. */
/* Before a clone with CLONE_FILES and without CLONE_VM (grants.c). */
void rs_grants_files_shared(void);
void rs_grants_fork_prepare(void);
void rs_grants_fork_parent(void);
/* files_shared: the child shares our descriptor table (CLONE_FILES). */
void rs_grants_fork_child(int files_shared);
void rs_grants_exit(void);

/* rlmode: the range lock's (RS_RL_READ 1, RS_RL_WRITE 2), or this, for
 * an O_APPEND write on [end of file, infinity): it asks for an APPEND
 * grant, which other processes' appends share (nodelock.c, "Appenders").
 * A cached grant serves a call if its mode has the call's bit (segment.h):
 * a read, SHARED or EXSH; a write, EXSH; an append, EXSH or APPEND. */
#define RS_GRANT_APPEND 4u
_Static_assert((RS_G_SHARED & 1) && (RS_G_EXSH & 1) && !(RS_G_APPEND & 1) &&
	       !(RS_G_SHARED & 2) && (RS_G_EXSH & 2) && !(RS_G_APPEND & 2) &&
	       !(RS_G_SHARED & RS_GRANT_APPEND) && (RS_G_EXSH & RS_GRANT_APPEND) &&
	       (RS_G_APPEND & RS_GRANT_APPEND), "grant modes and call modes out of step");

/*
 * Become a user of grant g while its word still has the generation of w
 * and no wanted bit (w's bits from 30 up): one CAS, so a revoker either
 * sees us inside or has already moved the generation on (segment.h).
 * 1 entered, 0 stale or wanted.
 */
static inline __attribute__((always_inline)) int
rs_grant_join(struct rs_seg_grant *g, uint64_t w, struct rs_gref *ref)
{
	uint64_t v = atomic_load_explicit(&g->gw, memory_order_relaxed);

	while (__builtin_expect(((v ^ w) >> 30) == 0, 1)) {
		if (__builtin_expect(atomic_compare_exchange_weak_explicit(
			    &g->gw, &v, v + 1, memory_order_seq_cst, memory_order_relaxed), 1)) {
			ref->g = g;
			return 1;
		}
	}
	return 0;
}

/* Enter the cached grant w if it covers [start, end) in a mode that
 * serves rlmode: 1 entered; 0 it does not cover; -1 it covers but is
 * stale or wanted (use the slow path). */
static inline __attribute__((always_inline)) int
rs_grant_try(struct rs_segment *seg, uint64_t w, uint64_t start, uint64_t end,
	     unsigned rlmode, struct rs_gref *ref)
{
	struct rs_seg_grant *g = (struct rs_seg_grant *)((char *)seg + (uint32_t)w);

	/* Racy reads, checked by the generation below. */
	if (__atomic_load_n(&g->start, __ATOMIC_ACQUIRE) > start ||
	    end > __atomic_load_n(&g->end, __ATOMIC_RELAXED) ||
	    !(__atomic_load_n(&g->mode, __ATOMIC_RELAXED) & rlmode))
		return 0;
	return rs_grant_join(g, w, ref) ? 1 : -1;
}

/* Look in f's cache for a grant covering [start, end) in a mode that
 * serves rlmode; enter it.  1 on success; 0: use the slow path.  The
 * first entry is tried on its own, without the loop's bookkeeping: a
 * file used through one window, the common case, finds it there. */
static inline __attribute__((always_inline)) int
rs_grant_enter_cached(struct rs_segment *seg, struct rs_file *f, uint64_t start,
		      uint64_t end, unsigned rlmode, struct rs_gref *ref)
{
	uint64_t w = atomic_load_explicit(&f->grants[0], memory_order_acquire);
	int r;

	if (__builtin_expect(w != 0, 1)) {
		r = rs_grant_try(seg, w, start, end, rlmode, ref);
		if (__builtin_expect(r != 0, 1))
			return r > 0;
	}
	for (int i = 1; i < RS_NCACHE; i++) {
		w = atomic_load_explicit(&f->grants[i], memory_order_acquire);
		if (!w)
			continue;
		r = rs_grant_try(seg, w, start, end, rlmode, ref);
		if (r)
			return r > 0;
	}
	return 0;
}

/* A call inside a grant holds a lock of the node grants' level
 * (lockorder.h): entered through the functions below, which record it
 * in debug builds (rs_grant_join does not: rs_grant_enter_slow joins
 * under the file's acquire mutex, and records the grant once it has let
 * go of it), and left through rs_grant_leave_at.  r: whether the entry
 * succeeded.  Release builds: r itself. */
#ifdef RS_DEBUG
static inline int rs_grant_entered(int r, const struct rs_gref *ref)
{
	if (r && ref->g)
		rs_lk_acquire(RS_LK_GRANT, ref->g);
	return r;
}
#else
#define rs_grant_entered(r, ref) (r)
#endif

/* The cached half of rs_grant_enter, which makes no call: 1 if ref->g
 * is a grant covering [start, end) now entered, or 0 with node scope off
 * (ref->g 0); 0 if only rs_grant_enter_slow can tell (nothing entered). */
static inline __attribute__((always_inline)) int
rs_grant_enter_fast(struct rs_file *f, uint64_t start, uint64_t end, unsigned rlmode,
		    struct rs_gref *ref)
{
	struct rs_segment *seg = __atomic_load_n(&rs_node_seg, __ATOMIC_RELAXED);

	if (__builtin_expect(seg != 0, 1))
		return rs_grant_entered(rs_grant_enter_cached(seg, f, start, end, rlmode, ref), ref);
	if (!__atomic_load_n(&rs_node_on, __ATOMIC_RELAXED)) {
		ref->g = 0;
		return 1;
	}
	return 0;
}

/* Enter a grant covering [start, end) if node scope is on; ref->g says
 * whether one was entered.  Returns 1 if it took the slow path (and may
 * have waited), 0 otherwise. */
static inline __attribute__((always_inline)) int
rs_grant_enter(struct rs_file *f, uint64_t start, uint64_t end, unsigned rlmode,
	       struct rs_gref *ref)
{
	if (__builtin_expect(rs_grant_enter_fast(f, start, end, rlmode, ref), 1))
		return 0;
	rs_grant_enter_slow(f, start, end, rlmode, ref);	/* sets ref->g */
	return 1;
}

/*
 * A file's word for the calls at the file offset of a single-threaded
 * process (rs_file.whole): the cache word of a grant of ours on
 * [0, infinity), with RS_WHOLE_RDONLY set if it serves reads only
 * (SHARED; an EXSH one serves every call), or no word; and
 * RS_WHOLE_FRESH.  The word is set by rs_grant_enter_slow when it caches
 * such a grant, and dropped when it leaves the cache.  A call that enters
 * it needs no range at all, and a single-threaded process no range lock
 * either, so it need not learn the file offset: no lseek.  The word is
 * only a guess, as every cache word is: a grant's range and mode never
 * change within one generation (segment.h), and the entry is the same
 * one CAS on gw as rs_grant_try's, so a revoker that got there first
 * (wanted bit, or the grant freed and its generation moved on) fails it,
 * and one that comes after finds us counted in and waits for our leave.
 * RS_WHOLE_FRESH: some description of the file may be fresh
 * (RS_DESC_FRESH); set before such a description is published, cleared
 * by a call that finds its own not fresh.  Losing it only costs an
 * lseek.  Both in one word, so that the call tests one load for both.
 * Grant offsets are multiples of 128 (struct rs_seg_grant): bits 0 and 1
 * are free.  (The bits are defined in fdtable.h.)
 */
_Static_assert(sizeof(struct rs_seg_grant) % 128 == 0 &&
	       offsetof(struct rs_segment, grants) % 128 == 0, "bits 0 and 1 of a grant's word are free");

/* Enter the grant of f's whole-file word h for a call of rlmode: 1
 * entered (ref->g set), 0 not (nothing entered).  A word whose grant has
 * gone (revoked while idle) is dropped by the acquisition that follows
 * (rs_grant_enter_slow), not here: this is inline on every call. */
static inline __attribute__((always_inline)) int
rs_grant_enter_whole(uint64_t h, unsigned rlmode, struct rs_gref *ref)
{
	struct rs_segment *seg = __atomic_load_n(&rs_node_seg, __ATOMIC_RELAXED);
	struct rs_seg_grant *g;

	if (!RS_WHOLE_WORD(h) || (rlmode != 1 && (h & RS_WHOLE_RDONLY)) || !seg)
		return 0;
	g = (struct rs_seg_grant *)((char *)seg + (uint32_t)RS_WHOLE_WORD(h));
	/* The low bits of h lie below the generation and the wanted bits. */
	return rs_grant_entered(rs_grant_join(g, h, ref), ref);
}

/* fp: where the file the grant was entered for is found (the fast path
 * does not store it in ref), read only when the grant is wanted: after
 * the real call the inline path has it in memory, and a load the atomic
 * below keeps in front of it would be paid on every call. */
static inline __attribute__((always_inline)) void
rs_grant_leave_at(struct rs_gref *ref, struct rs_file *const *fp)
{
	struct rs_seg_grant *g = ref->g;
	uint64_t old;

	if (!g)
		return;
	rs_lk_release(RS_LK_GRANT, g);
	old = atomic_fetch_sub_explicit(&g->gw, 1, memory_order_seq_cst);
	/* Any wanted bit: one compare for both bits (users >= 1 here). */
	if (__builtin_expect((uint32_t)old - 1 > RS_GW_USERS_MASK, 0)) {
		ref->file = *fp;
		rs_grant_idle(ref, old);
	}
}

/* f: the file the grant was entered for. */
static inline __attribute__((always_inline)) void
rs_grant_leave(struct rs_gref *ref, struct rs_file *f)
{
	rs_grant_leave_at(ref, &f);
}

#endif
