/*
 * Node grants on the process side: attach to the table on first use, keep
 * the grants this process acquired in a small per-file cache, enter and
 * leave them per call (the inline part is in grants.h), and give them back
 * when they are wanted, when the file is closed, and at exit.
 *
 * A cache entry is one 64-bit word: the grant's byte offset in the
 * segment << 32 | its generation (RS_GWORD_*),
 * so readers need no lock: whatever they read is re-validated against the
 * grant's generation in the table after they have counted themselves in.
 * Entries change under grants_mtx of the file.
 */
#include "grants.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "config.h"
#include "futex.h"
#include "log.h"
#include "nodelock.h"
#include "stats.h"

/* Expansion window for uncontended grants (nodelock.c). */
#define RS_GRANT_WINDOW (4ull << 20)

int rs_node_on;
struct rs_segment *rs_node_seg;
uint32_t rs_node_me;

static struct rs_nt table;
static _Atomic uint32_t attach_mtx;
static int attach_state;   /* 0 not tried, 1 attached, 2 failed */

void rs_grants_init(void)
{
	__atomic_store_n(&rs_node_on, rs_cfg.effective == RS_SCOPE_NODE, __ATOMIC_RELAXED);
}

static void node_off(const char *why)
{
	static _Atomic int said;

	__atomic_store_n(&rs_node_on, 0, __ATOMIC_RELAXED);
	attach_state = 2;
	/* Grants already entered are left through their own pointers; the
	 * mapping stays. */
	__atomic_store_n(&rs_node_seg, NULL, __ATOMIC_RELEASE);
	if (!atomic_exchange(&said, 1))
		rs_log(RS_LOG_ERROR, "node lock table unusable (%s); threads of this process "
		       "are still coordinated, other processes are NOT", why);
}

static int attach(void)
{
	char why[256];

	rs_mutex_lock(&attach_mtx);
	if (attach_state == 0) {
		if (rs_nt_register(&table, rs_cfg.shm_name, why, sizeof(why)) == 0) {
			/* Out of the application's way (fdtable.h); the app may
			 * still move it, so liveness checks read it from there. */
			table.map.fd = rs_fd_hide(table.map.fd);
			atomic_store(&rs_private_fd[0], table.map.fd);
			table.map.fd_slot = &rs_private_fd[0];
			rs_node_me = table.me;
			__atomic_store_n(&rs_node_seg, table.map.seg, __ATOMIC_RELEASE);
			attach_state = 1;
		} else {
			node_off(why);
		}
	}
	rs_mutex_unlock(&attach_mtx);
	return attach_state == 1 ? 0 : -1;
}

static void cache_remove(struct rs_file *f, uint64_t w)
{
	for (int i = 0; i < RS_NCACHE; i++) {
		uint64_t e = w;

		if (atomic_compare_exchange_strong(&f->grants[i], &e, 0))
			return;
	}
}

static uint64_t word(uint32_t idx, uint32_t gen)
{
	return (uint64_t)RS_GWORD_OFF(idx) << 32 | gen;
}

void rs_grant_idle(struct rs_gref *ref)
{
	struct rs_seg_grant *g = ref->g;
	uint64_t w = ref->w;
	uint32_t idx = RS_GWORD_IDX(w), gen = (uint32_t)w;

	rs_mutex_lock(&ref->file->grants_mtx);
	/* Someone may have come in meanwhile; then they will see to it. */
	if (atomic_load(&g->users) == 0 &&
	    (RS_GW_WANTED(atomic_load(&g->gw)) || RS_GW_GEN(atomic_load(&g->gw)) != gen)) {
		cache_remove(ref->file, w);
		if (RS_GW_GEN(atomic_load(&g->gw)) == gen) {
			rs_nt_release(&table, idx, gen);
			RS_COUNT(node_revokes, 1);
		}
	}
	rs_mutex_unlock(&ref->file->grants_mtx);
	ref->g = NULL;
}

void rs_grant_drop(struct rs_gref *ref)
{
	struct rs_seg_grant *g = ref->g;

	if (atomic_fetch_sub(&g->users, 1) == 1) {
		rs_grant_idle(ref);
		return;
	}
	if (RS_GW_GEN(atomic_load(&g->gw)) != (uint32_t)ref->w) {
		rs_mutex_lock(&ref->file->grants_mtx);
		cache_remove(ref->file, ref->w);
		rs_mutex_unlock(&ref->file->grants_mtx);
	}
	ref->g = NULL;
}

/* Make room in the cache: give back an idle grant; if all are busy, the
 * new grant is used uncached and released by its last user. */
static int cache_slot(struct rs_file *f)
{
	for (int i = 0; i < RS_NCACHE; i++)
		if (atomic_load(&f->grants[i]) == 0)
			return i;
	for (int i = 0; i < RS_NCACHE; i++) {
		uint64_t w = atomic_load(&f->grants[i]);
		uint32_t idx = RS_GWORD_IDX(w);
		struct rs_seg_grant *g = &rs_node_seg->grants[idx & (RS_NGRANT - 1)];

		/* Dekker with a thread entering it: mark first, then look. */
		atomic_fetch_or(&g->gw, RS_WANTED_SELF);
		if (atomic_load(&g->users) != 0)
			continue;	/* its last user releases it */
		atomic_store(&f->grants[i], 0);
		rs_nt_release(&table, idx, (uint32_t)w);
		return i;
	}
	return -1;
}

int rs_grant_enter_slow(struct rs_file *f, uint64_t start, uint64_t end, unsigned rlmode,
			struct rs_gref *ref)
{
	struct rs_nt_req req;
	struct rs_nt_result res;
	struct rs_segment *seg;
	struct rs_seg_grant *g;
	char why[256];
	int slot, saved = errno;

	ref->g = NULL;
	if (!__atomic_load_n(&rs_node_seg, __ATOMIC_ACQUIRE) && attach() < 0)
		return 0;
	seg = __atomic_load_n(&rs_node_seg, __ATOMIC_ACQUIRE);
	if (!seg)
		return 0;	/* node scope was turned off meanwhile */
	/*
	 * One acquisition per file at a time in this process: threads that
	 * miss the cache together would otherwise each take a slot of the
	 * table for the same range (2000 threads filled all 1024).  The
	 * holder waits only for other processes, which never wait for this
	 * lock; our own grants are given back under grants_mtx instead.
	 */
	rs_mutex_lock(&f->acquire_mtx);
	/* Another thread may have just acquired what we need. */
	if (rs_grant_enter_cached(seg, f, start, end, rlmode, ref)) {
		rs_mutex_unlock(&f->acquire_mtx);
		errno = saved;
		return 1;
	}
	req.dev = atomic_load(&f->dev);
	req.ino = atomic_load(&f->ino);
	req.start = start;
	req.end = end;
	req.mode = rlmode == 2 ? RS_G_EXSH : RS_G_SHARED;
	req.window = RS_GRANT_WINDOW;
	/* No lock of ours is held while we wait for other processes: their
	 * holders may need one to give back what we wait for. */
	if (rs_nt_acquire(&table, &req, &res, why, sizeof(why)) < 0) {
		rs_mutex_unlock(&f->acquire_mtx);
		node_off(why);
		errno = saved;
		return 0;
	}
	RS_COUNT(node_acquires, 1);
	RS_COUNT(node_wanted, res.wanted);
	RS_COUNT(node_revokes, res.revoked);
	RS_COUNT(node_reclaims, res.reclaimed);
	RS_COUNT(node_table_full, res.table_full);
	if (res.waited) {
		RS_COUNT(node_waits, 1);
		RS_COUNT(node_wait_ns, res.wait_ns);
	}
	g = &seg->grants[res.idx];	/* users already counts us */
	rs_mutex_lock(&f->grants_mtx);
	slot = cache_slot(f);
	if (slot >= 0)
		atomic_store_explicit(&f->grants[slot], word(res.idx, res.gen), memory_order_release);
	else
		atomic_fetch_or(&g->gw, RS_WANTED_SELF);
	rs_mutex_unlock(&f->grants_mtx);
	rs_mutex_unlock(&f->acquire_mtx);
	ref->g = g;
	ref->w = word(res.idx, res.gen);
	ref->file = f;
	errno = saved;
	return 1;
}

void rs_grant_file_closed(struct rs_file *f)
{
	if (!__atomic_load_n(&rs_node_seg, __ATOMIC_ACQUIRE))
		return;
	rs_mutex_lock(&f->grants_mtx);
	for (int i = 0; i < RS_NCACHE; i++) {
		uint64_t w = atomic_exchange(&f->grants[i], 0);
		uint32_t idx = RS_GWORD_IDX(w);
		struct rs_seg_grant *g;

		if (!w)
			continue;
		g = &rs_node_seg->grants[idx & (RS_NGRANT - 1)];
		atomic_fetch_or(&g->gw, RS_WANTED_SELF);
		if (atomic_load(&g->users) == 0)
			rs_nt_release(&table, idx, (uint32_t)w);
	}
	rs_mutex_unlock(&f->grants_mtx);
}

/* The child starts with no grant: the parent's stay the parent's. */
void rs_grants_fork_child(void)
{
	if (attach_state == 1) {
		table.map.fd = atomic_load(&rs_private_fd[0]);
		rs_nt_forget(&table);
		atomic_store(&rs_private_fd[0], -1);
	}
	__atomic_store_n(&rs_node_seg, NULL, __ATOMIC_RELAXED);
	attach_state = 0;
	atomic_store(&attach_mtx, 0);
	rs_grants_init();
}

/* At exit other threads may still be doing I/O: new calls stop using
 * node grants first, then ours are given back. */
void rs_grants_exit(void)
{
	__atomic_store_n(&rs_node_on, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&rs_node_seg, NULL, __ATOMIC_RELEASE);
	if (attach_state == 1)
		rs_nt_unregister(&table);
	attach_state = 2;
}
