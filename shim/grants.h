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
#include "segment.h"

/* Cache words: the grant's byte offset in the segment (never 0: the
 * header comes first) << 32 | generation.  0 is an empty entry. */
#define RS_GWORD_OFF(idx) ((uint32_t)(offsetof(struct rs_segment, grants) + \
				      (size_t)(idx) * sizeof(struct rs_seg_grant)))
#define RS_GWORD_IDX(w) ((uint32_t)(((w) >> 32) - offsetof(struct rs_segment, grants)) / \
			 (uint32_t)sizeof(struct rs_seg_grant))

struct rs_gref {
	struct rs_seg_grant *g;     /* NULL: no grant held (node scope off) */
	uint64_t w;                 /* the cache word (RS_GWORD_*) */
	struct rs_file *file;
};

/* Node scope is in force: attached, or not yet tried. */
extern int rs_node_on;
extern struct rs_segment *rs_node_seg;
extern uint32_t rs_node_me;

void rs_grants_init(void);
int rs_grant_enter_slow(struct rs_file *f, uint64_t start, uint64_t end, unsigned rlmode,
			struct rs_gref *ref);
/* ref holds one user of its grant: give it up, releasing the grant if it
 * is wanted, stale or no longer cached. */
void rs_grant_drop(struct rs_gref *ref);
/* The last user has just left: release if wanted or uncached. */
void rs_grant_idle(struct rs_gref *ref);
/* Last description of f closed: give its grants back. */
void rs_grant_file_closed(struct rs_file *f);
void rs_grants_fork_child(void);
void rs_grants_exit(void);

/* Look in f's cache for a grant covering [start, end) in a mode that
 * serves rlmode; enter it.  1 on success; 0: use the slow path. */
static inline __attribute__((always_inline)) int
rs_grant_enter_cached(struct rs_segment *seg, struct rs_file *f, uint64_t start,
		      uint64_t end, unsigned rlmode, struct rs_gref *ref)
{
	for (int i = 0; i < RS_NCACHE; i++) {
		uint64_t w = atomic_load_explicit(&f->grants[i], memory_order_acquire);
		struct rs_seg_grant *g;

		if (!w)
			continue;
		g = (struct rs_seg_grant *)((char *)seg + (w >> 32));
		/* Racy reads, checked by the generation below. */
		if (__atomic_load_n(&g->start, __ATOMIC_RELAXED) > start ||
		    end > __atomic_load_n(&g->end, __ATOMIC_RELAXED) ||
		    (rlmode == 2 && __atomic_load_n(&g->mode, __ATOMIC_RELAXED) != RS_G_EXSH))
			continue;
		/* Dekker with the revoker: it sets wanted, then reads users.
		 * The same generation means the same incarnation of the slot,
		 * which was ours: freeing bumps it. */
		atomic_fetch_add_explicit(&g->users, 1, memory_order_seq_cst);
		ref->g = g;
		ref->w = w;
		if (__builtin_expect(atomic_load_explicit(&g->gw, memory_order_seq_cst) == w << 32, 1))
			return 1;
		ref->file = f;
		rs_grant_drop(ref);
		return 0;
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
	struct rs_segment *seg = __atomic_load_n(&rs_node_seg, __ATOMIC_RELAXED);

	if (__builtin_expect(seg != 0, 1)) {
		if (__builtin_expect(rs_grant_enter_cached(seg, f, start, end, rlmode, ref), 1))
			return 0;
	} else if (!__atomic_load_n(&rs_node_on, __ATOMIC_RELAXED)) {
		ref->g = 0;
		return 0;
	}
	rs_grant_enter_slow(f, start, end, rlmode, ref);	/* sets ref->g */
	return 1;
}

/* f: the file the grant was entered for (the fast path does not store it). */
static inline __attribute__((always_inline)) void
rs_grant_leave(struct rs_gref *ref, struct rs_file *f)
{
	struct rs_seg_grant *g = ref->g;

	if (!g)
		return;
	if (atomic_fetch_sub_explicit(&g->users, 1, memory_order_seq_cst) == 1 &&
	    RS_GW_WANTED(atomic_load_explicit(&g->gw, memory_order_seq_cst))) {
		ref->file = f;
		rs_grant_idle(ref);
	}
}

#endif
