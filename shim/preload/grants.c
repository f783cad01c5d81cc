/*
 * Node grants on the process side: attach to the table on first use, keep
 * the grants this process acquired in a small per-file cache, enter and
 * leave them per call (the inline part is in grants.h), and give them back
 * when they are wanted, when the file is closed, and at exit.
 *
 * A cache entry is one 64-bit word, the grant's generation << 32 | its
 * byte offset in the segment (RS_GWORD_*, grants.h), so readers need no
 * lock: whatever they read is re-validated against the grant's
 * generation in the table after they have counted themselves in.
 * Entries change only under the file's grants_mtx.
 */
#include "grants.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"
#include "config.h"
#include "filewaits.h"
#include "futex.h"
#include "log.h"
#include "nodelock.h"
#include "stats.h"
#include "state.h"
#include "stride.h"
#include "rawsyscall.h"

/* Expansion window for uncontended grants (nodelock.c). */
#define RS_GRANT_WINDOW (4ull << 20)

/*
 * Adaptive grant policy per file.  Expanded, cached grants pay
 * while processes keep to their own regions; where they meet, every
 * expansion takes bytes another process is about to use, and the grants
 * go back and forth between the processes' caches.  So, per file: when
 * RS_MEET_LIMIT acquisitions within RS_MEET_PERIOD_NS met another
 * process's incompatible grant in the request's window (rs_nt_result.met),
 * the file turns *exact*: each acquisition asks for the call's own range,
 * is not cached, and is given back when the call ends (lazily:
 * nodelock.c, "Exact grants"), so the table works as a shared-memory
 * range lock.  Each exact acquisition that still meets another process
 * keeps the file exact for RS_QUIET_NS more; after that long without a
 * meeting, grants are expanded and cached again.  This is Lustre's
 * contended-resource rule (ldlm: ns_contended_locks = 32 conflicting
 * locks make a resource contended for ns_contention_time = 2 s, during
 * which extent locks are not expanded), with thresholds measured here
 * (docs/benchmarks.md, "Choosing the node policy thresholds").
 *
 * The state is the process's own (nothing shared to trust), in a small
 * table indexed by the file object; a collision only costs policy.
 */
#ifndef RS_MEET_LIMIT
#define RS_MEET_LIMIT 8
#endif
#ifndef RS_MEET_PERIOD_NS
#define RS_MEET_PERIOD_NS (100ull * 1000 * 1000)
#endif
#ifndef RS_QUIET_NS
#define RS_QUIET_NS (1000ull * 1000 * 1000)
#endif
/* Window acquisitions on a file without meeting another process before
 * asking for the whole file (policy_whole). */
#ifndef RS_WHOLE_AFTER
#define RS_WHOLE_AFTER 8
#endif
#define NPOLICY 256
/* Strided grants (nodelock.c): at most this many blocks of lookahead,
 * spanning at most this many bytes (a stride beyond half of it is not
 * worth one). */
#ifndef RS_STRIDE_AHEAD
#define RS_STRIDE_AHEAD 1024u
#endif
#define RS_STRIDE_SPAN (64ull << 20)
/* Steps in a row (from one exact request to the next) that keep one
 * stride before a strided grant is asked for.  Random blocks of one length
 * keep a common divisor above it for a few steps too (offsets that happen
 * to be even multiples): from 2 steps, a quarter of random 4 KiB calls
 * asked for lookahead over blocks they never used, which others then had
 * to take back; from 8, about 0.1% do (simulated), and an interleaved
 * rank asks at its 9th call instead of its 3rd. */
#ifndef RS_STRIDE_RUN
#define RS_STRIDE_RUN 8u
#endif

struct policy {
	_Atomic uint64_t dev, ino;
	_Atomic uint64_t period_ns, exact_until_ns, met_ns;
	_Atomic uint32_t meets;
	_Atomic uint32_t alone;       /* acquisitions since the last meeting */
	/* The file's exact requests (stride_plan): the last one's start and
	 * length, the stride they keep to, how many kept to it, and whether
	 * one of those wrote. */
	_Atomic uint64_t pat_last, pat_len, pat_stride;
	_Atomic uint32_t pat_run, pat_wrote;
};

static struct policy policies[NPOLICY];

/* The policy's clock: its periods are 100 ms and more, and the coarse
 * clock costs a few loads where the fine one costs tens of ns. */
static uint64_t coarse_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct policy *policy_of(struct rs_file *f, int reset)
{
	struct policy *p = &policies[(size_t)(f - rs_files) % NPOLICY];
	uint64_t dev = atomic_load(&f->dev), ino = atomic_load(&f->ino);

	if (atomic_load_explicit(&p->dev, memory_order_relaxed) != dev ||
	    atomic_load_explicit(&p->ino, memory_order_relaxed) != ino) {
		if (!reset)
			return NULL;
		atomic_store_explicit(&p->meets, 0, memory_order_relaxed);
		atomic_store_explicit(&p->exact_until_ns, 0, memory_order_relaxed);
		atomic_store_explicit(&p->period_ns, 0, memory_order_relaxed);
		atomic_store_explicit(&p->met_ns, 0, memory_order_relaxed);
		atomic_store_explicit(&p->alone, 0, memory_order_relaxed);
		atomic_store_explicit(&p->pat_len, 0, memory_order_relaxed);
		atomic_store_explicit(&p->pat_stride, 0, memory_order_relaxed);
		atomic_store_explicit(&p->pat_run, 0, memory_order_relaxed);
		atomic_store_explicit(&p->pat_wrote, 0, memory_order_relaxed);
		atomic_store_explicit(&p->dev, dev, memory_order_relaxed);
		atomic_store_explicit(&p->ino, ino, memory_order_relaxed);
	}
	return p;
}

static int policy_exact(const struct policy *p, uint64_t now)
{
	return p && now < atomic_load_explicit(&p->exact_until_ns, memory_order_relaxed);
}

/* May the next acquisition take the whole file if nobody else holds a
 * grant on it?  A write, only once the process has moved through
 * RS_WHOLE_AFTER windows of it without meeting anyone: a process that
 * keeps to its own region (an N-to-1 checkpoint's writer) keeps its
 * windows, and another process arriving at its own region never waits
 * for a whole-file grant to drain.  A read (shared), at once: other
 * readers share it, and only a writer has to take it back (an idle one
 * at once, a busy one after one read call); in return a single-threaded
 * reader's calls at the file offset need no lseek (grants.h,
 * rs_grant_enter_whole), which for a program reading many small files
 * (tar, cp -r) is one system call of every few.  An append, at once
 * too: appenders share it, and with it a process's appends lock from 0
 * and read no size (iolock.h, rs_fast_offset).  And not within
 * RS_QUIET_NS of meeting another process here: two processes taking the
 * whole file from each other in turn would revoke each other on every
 * miss (the window policy's case). */
static int policy_whole(const struct policy *p, uint64_t now, int at_once)
{
	uint64_t met = atomic_load_explicit(&p->met_ns, memory_order_relaxed);

	return (at_once || atomic_load_explicit(&p->alone, memory_order_relaxed) >= RS_WHOLE_AFTER) &&
	       (!met || now - met > RS_QUIET_NS);
}

/* After an acquisition: did it meet another process (met: an
 * incompatible grant in its window; others: any grant on the file, which
 * ends a run of acquisitions alone, as readers sharing a file are not
 * alone on it)? */
static void policy_note(struct policy *p, int exact, int met, int others, uint64_t now)
{
	if (!met && !others) {
		atomic_fetch_add_explicit(&p->alone, 1, memory_order_relaxed);
		return;
	}
	atomic_store_explicit(&p->alone, 0, memory_order_relaxed);
	if (!met)
		return;
	atomic_store_explicit(&p->met_ns, now ? now : 1, memory_order_relaxed);
	if (!exact) {
		if (now - atomic_load_explicit(&p->period_ns, memory_order_relaxed) > RS_MEET_PERIOD_NS) {
			atomic_store_explicit(&p->period_ns, now, memory_order_relaxed);
			atomic_store_explicit(&p->meets, 0, memory_order_relaxed);
		}
		if (atomic_fetch_add_explicit(&p->meets, 1, memory_order_relaxed) + 1 < RS_MEET_LIMIT)
			return;
	}
	atomic_store_explicit(&p->exact_until_ns, now + RS_QUIET_NS, memory_order_relaxed);
}

static uint64_t gcd(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t t = a % b;

		a = b;
		b = t;
	}
	return a;
}

/*
 * An exact request q (the file is shared here): does it continue a run
 * of requests of one length L at starts a multiple of one stride S > L
 * apart?  Once RS_STRIDE_RUN steps have kept to S, q asks for a strided grant
 * (nodelock.c, "Strided grants"): its own block and the next ones of
 * the pattern, RS_STRIDE_AHEAD at most, within RS_STRIDE_SPAN bytes.
 * Any multiple of S, either way, keeps the run: a process that comes
 * back to the first block (write, then read back), or that skips blocks,
 * or whose strided grant was taken back mid-way, goes on with one; a
 * step that is not a multiple of S but has a common divisor with it
 * above L makes that divisor the stride (a process visiting its own
 * blocks in a random order finds their stride so).  A
 * process that has written in the run asks EXSH for its reads too: an
 * EXSH grant serves both, where a SHARED one would be traded for an EXSH
 * one at the next write.
 */
static void stride_plan(struct policy *p, struct rs_nt_req *q)
{
	uint64_t len = q->end - q->start, n;
	uint64_t last = atomic_load_explicit(&p->pat_last, memory_order_relaxed);
	uint64_t S = atomic_load_explicit(&p->pat_stride, memory_order_relaxed);
	uint64_t d = q->start > last ? q->start - last : last - q->start;
	uint32_t run = atomic_load_explicit(&p->pat_run, memory_order_relaxed);
	int same = len == atomic_load_explicit(&p->pat_len, memory_order_relaxed);

	if (same && S > len && d && gcd(d, S) > len) {
		/* A smaller common divisor is a new candidate: its run
		 * starts again. */
		run = gcd(d, S) == S ? run + (run < RS_STRIDE_RUN) : 1;
		S = gcd(d, S);
		atomic_store_explicit(&p->pat_stride, S, memory_order_relaxed);
	} else {
		/* A new candidate: the step from the last request. */
		S = same && q->start > last ? d : 0;
		run = S != 0;
		atomic_store_explicit(&p->pat_stride, S, memory_order_relaxed);
		atomic_store_explicit(&p->pat_wrote, 0, memory_order_relaxed);
	}
	if (q->mode == RS_G_EXSH)
		atomic_store_explicit(&p->pat_wrote, 1, memory_order_relaxed);
	atomic_store_explicit(&p->pat_run, run, memory_order_relaxed);
	atomic_store_explicit(&p->pat_last, q->start, memory_order_relaxed);
	atomic_store_explicit(&p->pat_len, len, memory_order_relaxed);
	if (run < RS_STRIDE_RUN || S <= len || S > RS_STRIDE_SPAN / 2)
		return;
	n = RS_STRIDE_SPAN / S < RS_STRIDE_AHEAD ? RS_STRIDE_SPAN / S : RS_STRIDE_AHEAD;
	if (q->start >= RS_RANGE_EOF - n * S)
		return;		/* the lookahead would run past the end of offsets */
	q->stride = S;
	q->blen = len;
	q->end = q->start + (n - 1) * S + len;
	if (atomic_load_explicit(&p->pat_wrote, memory_order_relaxed))
		q->mode = RS_G_EXSH;
}

int rs_node_on;
struct rs_segment *rs_node_seg;
uint32_t rs_node_me;

static RS_FORKED struct rs_nt table;
/* Mappings of earlier attachments (exit, then attached again): grants
 * entered through them are still left through them. */
static struct rs_segment *old_maps[4];
static RS_FORKED _Atomic uint32_t attach_mtx;
static RS_FORKED int attach_state;   /* 0 not tried, 1 attached, 2 failed */
/* This process shares its parent's descriptor table (rs_grants_fork_child). */
static RS_FORKED int shares_files;

void rs_grants_init(void)
{
	__atomic_store_n(&rs_node_on, rs_cfg.effective >= RS_SCOPE_NODE, __ATOMIC_RELAXED);
}

static void node_off(const char *why)
{
	static _Atomic int said;

	/* In cluster scope every call keeps coming to the slow path, which
	 * fails cluster files' calls with EIO (they must not run without
	 * the node's cluster grants) and passes the others. */
	__atomic_store_n(&rs_node_on, rs_cfg.scope == RS_SCOPE_CLUSTER, __ATOMIC_RELAXED);
	attach_state = 2;
	/* Grants already entered are left through their own pointers; the
	 * mapping stays. */
	__atomic_store_n(&rs_node_seg, NULL, __ATOMIC_RELEASE);
	if (!atomic_exchange(&said, 1))
		rs_log(RS_LOG_ERROR, "node lock table unusable (%s); threads of this process "
		       "are still coordinated, other processes are NOT", why);
}

/* Attach, or attach again after exit unregistered us (a destructor that
 * runs after ours, or a straggling thread, still does I/O: it must not
 * go uncoordinated).  Under attach_mtx, which fork also takes, so no child
 * is forked while the segment's descriptor sits at a low number. */
static int attach_locked(void)
{
	char why[256];
	int again = table.map.seg != NULL;

	RS_ASSERT(rs_lk_held(RS_LK_ATTACH, &attach_mtx));

	if (table.map.seg)
		for (int i = 0; i < 4; i++)
			if (!old_maps[i] || old_maps[i] == table.map.seg) {
				old_maps[i] = table.map.seg;
				break;
			}

	if ((again ? rs_nt_register_again : rs_nt_register)(&table, rs_cfg.shm_name, why,
							     sizeof(why)) < 0) {
		node_off(why);
		return -1;
	}
	/* Out of the application's way (fdtable.h); the app may still move
	 * it, so liveness checks read it from there. */
	table.map.fd = rs_fd_hide(table.map.fd);
	atomic_store(&rs_private_fd[0], table.map.fd);
	table.map.fd_slot = &rs_private_fd[0];
	/* Sharing the parent's descriptor table: our liveness must not hang
	 * on a number the parent may close (rs_grants_fork_child).  A fork
	 * of ours replaces this mapping (above), so it never keeps us alive. */
	if (shares_files && table.map.fd >= 0)
		rs_mmap(table.map.seg, sizeof(struct rs_segment), PROT_READ | PROT_WRITE,
		     MAP_SHARED | MAP_FIXED, table.map.fd, 0);
	rs_node_me = table.me;
	__atomic_store_n(&rs_node_seg, table.map.seg, __ATOMIC_RELEASE);
	attach_state = 1;
	return 0;
}

static int attach(void)
{
	rs_lk_mutex_lock(RS_LK_ATTACH, &attach_mtx);
	if (attach_state == 0)
		attach_locked();
	rs_lk_mutex_unlock(RS_LK_ATTACH, &attach_mtx);
	return attach_state == 1 ? 0 : -1;
}

/* w leaves f's cache: so does the whole-file hint naming it. */
static void whole_drop(struct rs_file *f, uint64_t w)
{
	uint64_t h = atomic_load_explicit(&f->whole, memory_order_relaxed);

	/* Fails if the word changed meanwhile: a stale word only fails its
	 * generation check (grants.h). */
	if (RS_WHOLE_WORD(h) == w)
		atomic_compare_exchange_strong(&f->whole, &h, h & RS_WHOLE_FRESH);
	h = w;
	atomic_compare_exchange_strong(&f->app_whole, &h, 0);
}

/* Has the grant of cache word w gone (revoked while idle: its generation
 * moved on, and nothing told us)?  0 for no word. */
static int word_gone(struct rs_segment *seg, uint64_t w)
{
	struct rs_seg_grant *g = &seg->grants[RS_GWORD_IDX(w) & (RS_NGRANT - 1)];

	return w && RS_GW_GEN(atomic_load_explicit(&g->gw, memory_order_relaxed)) != RS_GWORD_GEN(w);
}

/* f's whole-file words, if their grant has gone: dropped, so that the
 * calls at the file offset stop trying it before their lseek, and
 * appends stop locking from 0. */
static void whole_stale(struct rs_segment *seg, struct rs_file *f)
{
	uint64_t h = atomic_load_explicit(&f->whole, memory_order_relaxed);
	uint64_t a = atomic_load_explicit(&f->app_whole, memory_order_relaxed);

	if (word_gone(seg, RS_WHOLE_WORD(h)))
		atomic_compare_exchange_strong(&f->whole, &h, h & RS_WHOLE_FRESH);
	if (word_gone(seg, a))
		atomic_compare_exchange_strong(&f->app_whole, &a, 0);
}

static void cache_remove(struct rs_file *f, uint64_t w)
{
	uint64_t sw = w;

	if (atomic_compare_exchange_strong(&f->strided, &sw, 0))
		return;
	whole_drop(f, w);
	for (int i = 0; i < RS_NCACHE; i++) {
		uint64_t e = w;

		if (atomic_compare_exchange_strong(&f->grants[i], &e, 0))
			return;
	}
}

static uint64_t word(uint32_t idx, uint32_t gen)
{
	return (uint64_t)gen << 32 | RS_GWORD_OFF(idx);
}

/* Mark our incarnation gen of g as no longer cached: no new user gets
 * in, and the last one out gives it back.  Returns the users inside at
 * that moment, or -1 if g is no longer ours at that generation. */
static int64_t mark_uncached(struct rs_seg_grant *g, uint32_t gen)
{
	uint64_t v = atomic_load(&g->gw);

	for (;;) {
		if (RS_GW_GEN(v) != gen)
			return -1;
		if (atomic_compare_exchange_weak(&g->gw, &v, v | RS_WANTED_SELF))
			return RS_GW_USERS(v);
	}
}

/* Which slot of the table g is, in whichever of our mappings it lies. */
static uint32_t grant_index(const struct rs_seg_grant *g)
{
	struct rs_segment *seg = __atomic_load_n(&rs_node_seg, __ATOMIC_ACQUIRE);

	for (int i = -1; i < 4; i++) {
		struct rs_segment *m = i < 0 ? seg : old_maps[i];

		if (m && g >= m->grants && g < m->grants + RS_NGRANT)
			return (uint32_t)(g - m->grants);
	}
	return UINT32_MAX;
}

void rs_grant_idle(struct rs_gref *ref, uint64_t old)
{
	struct rs_seg_grant *g = ref->g;
	uint32_t idx = grant_index(g), gen = RS_GW_GEN(old);
	uint64_t v;

	ref->g = NULL;
	if (RS_GW_USERS(old) != 1 || idx == UINT32_MAX)
		return;		/* not the last: the last one out does this */
	/* Those waiting for it to drain: it has. */
	rs_nt_wake_grant(g, old);
	if (!(old & RS_WANTED) &&
	    policy_exact(policy_of(ref->file, 0), coarse_ns()))
		/* An exact grant (never cached) whose call has ended: it stays
		 * in the table, idle and closed to new users, for the next scan
		 * to free (nodelock.c). */
		return;
	rs_lk_mutex_lock(RS_LK_GRANTS, &ref->file->grants_mtx);
	v = atomic_load(&g->gw);
	/* Nobody can have come in since: a wanted bit keeps them out. */
	if (RS_GW_USERS(v) == 0 && RS_GW_GEN(v) == gen) {
		cache_remove(ref->file, word(idx, gen));
		rs_nt_release(&table, idx, gen);
		RS_COUNT(node_revokes, 1);
	}
	rs_lk_mutex_unlock(RS_LK_GRANTS, &ref->file->grants_mtx);
}

/*
 * f's strided grant (nodelock.c, "Strided grants"), if one of its blocks
 * holds [start, end) in a mode that serves rlmode: entered, 1; else 0,
 * nothing entered.  Not inline: only calls that miss the plain words
 * (grants.h) come here, so ordinary grants pay nothing for it.  Racy
 * reads of the grant, checked by the generation as in rs_grant_try.
 */
static int strided_enter(struct rs_segment *seg, struct rs_file *f, uint64_t start,
			 uint64_t end, unsigned rlmode, struct rs_gref *ref)
{
	uint64_t w = atomic_load_explicit(&f->strided, memory_order_acquire);
	uint64_t base, gend, stride, len;
	struct rs_seg_grant *g;

	if (!w)
		return 0;
	g = (struct rs_seg_grant *)((char *)seg + (uint32_t)w);
	base = __atomic_load_n(&g->start, __ATOMIC_ACQUIRE);
	gend = __atomic_load_n(&g->end, __ATOMIC_RELAXED);
	stride = __atomic_load_n(&g->stride, __ATOMIC_RELAXED);
	len = __atomic_load_n(&g->blen, __ATOMIC_RELAXED);
	if (!rs_stride_ok(base, gend, stride, len) ||
	    !rs_stride_holds(base, gend, stride, len, start, end) ||
	    !(__atomic_load_n(&g->mode, __ATOMIC_RELAXED) & rlmode) || !rs_grant_join(g, w, ref))
		return 0;
	ref->file = f;
	return 1;
}

/* f's strided word, if its grant has gone (revoked while idle): dropped,
 * so that calls stop trying it. */
static void strided_stale(struct rs_segment *seg, struct rs_file *f)
{
	uint64_t w = atomic_load_explicit(&f->strided, memory_order_relaxed);

	if (word_gone(seg, w))
		atomic_compare_exchange_strong(&f->strided, &w, 0);
}

/* Cache the strided grant w (0: none), in place of the one before: that
 * one is closed to new users and left idle for our next scan to free, as
 * an exact grant is (nodelock.c). */
static void strided_keep(struct rs_segment *seg, struct rs_file *f, uint64_t w)
{
	uint64_t old;

	rs_lk_mutex_lock(RS_LK_GRANTS, &f->grants_mtx);
	old = atomic_exchange(&f->strided, w);
	if (old && old != w)
		mark_uncached(&seg->grants[RS_GWORD_IDX(old) & (RS_NGRANT - 1)], RS_GWORD_GEN(old));
	rs_lk_mutex_unlock(RS_LK_GRANTS, &f->grants_mtx);
}

/* Make room in the cache: drop a stale entry, or give back an idle
 * grant; if all are busy, the new grant is used uncached and released by
 * its last user.  Under f->grants_mtx. */
static int cache_slot(struct rs_file *f)
{
	RS_ASSERT(rs_lk_held(RS_LK_GRANTS, &f->grants_mtx));
	for (int i = 0; i < RS_NCACHE; i++)
		if (atomic_load(&f->grants[i]) == 0)
			return i;
	for (int i = 0; i < RS_NCACHE; i++) {
		uint64_t w = atomic_load(&f->grants[i]);
		uint32_t idx = RS_GWORD_IDX(w);
		int64_t users = mark_uncached(&rs_node_seg->grants[idx & (RS_NGRANT - 1)],
					      RS_GWORD_GEN(w));

		if (users > 0)
			continue;	/* its last user releases it */
		whole_drop(f, w);
		atomic_store(&f->grants[i], 0);
		if (users == 0)
			rs_nt_release(&table, idx, RS_GWORD_GEN(w));
		return i;
	}
	return -1;
}

/* What to ask the table for [start, end) of f, by the file's policy
 * (grants.c, at the top).  Under f->acquire_mtx. */
static void request_of(struct rs_segment *seg, struct rs_file *f, struct policy *pol,
		       struct rs_nt_req *req, uint64_t start, uint64_t end, unsigned rlmode,
		       int cluster, int whole)
{
	RS_ASSERT(rs_lk_held(RS_LK_ACQUIRE, &f->acquire_mtx));
	req->dev = atomic_load(&f->dev);
	req->ino = atomic_load(&f->ino);
	req->start = start;
	req->end = end;
	req->window = RS_GRANT_WINDOW;
	/* A strided grant still cached says the file is shared, as a
	 * meeting does: calls that stay inside it meet nobody. */
	req->exact = policy_exact(pol, coarse_ns()) ||
		     atomic_load_explicit(&f->strided, memory_order_relaxed) != 0;
	req->mode = rlmode == 1 ? RS_G_SHARED : rlmode == RS_GRANT_APPEND ? RS_G_APPEND : RS_G_EXSH;
	req->whole = !req->exact && (whole || policy_whole(pol, coarse_ns(),
							   req->mode != RS_G_EXSH));
	req->bounded = 0;
	req->stride = req->blen = 0;
	/* Never in cluster scope: a cluster grant is one range. */
	if (req->exact && !cluster && req->mode != RS_G_APPEND && end != RS_RANGE_EOF)
		stride_plan(pol, req);
	/* Off the pattern: its grant no longer says anything of the file. */
	if (!req->stride && atomic_load_explicit(&f->strided, memory_order_relaxed))
		strided_keep(seg, f, 0);
}

static void count_acquired(const struct rs_nt_result *res)
{
	RS_COUNT(node_acquires, 1);
	RS_COUNT(node_wanted, res->wanted);
	RS_COUNT(node_revokes, res->revoked);
	RS_COUNT(node_reclaims, res->reclaimed);
	RS_COUNT(node_table_full, res->table_full);
	RS_COUNT(node_evictions, res->evicted);
	if (res->waited) {
		RS_COUNT(node_waits, 1);
		RS_COUNT(node_wait_ns, res->wait_ns);
	}
}

/* A grant just acquired for f, by req, with us counted in: keep it in
 * f's cache, the strided word for a strided one; uncached (closed to new
 * users, given back by its last) if it is exact or the cache is full.
 * 1 if it is cached and the whole file.  Under f->acquire_mtx. */
static int keep_acquired(struct rs_segment *seg, struct rs_file *f, const struct rs_nt_req *req,
			  const struct rs_nt_result *res)
{
	struct rs_seg_grant *g = &seg->grants[res->idx];
	int slot, whole = res->start == 0 && res->end == RS_RANGE_EOF;

	RS_ASSERT(rs_lk_held(RS_LK_ACQUIRE, &f->acquire_mtx));
	if (req->exact && !res->stride) {
		RS_COUNT(node_exact, 1);
		mark_uncached(g, res->gen);	/* ours alone: the call gives it back */
		return 0;
	}
	if (res->stride) {
		RS_COUNT(node_strided, 1);
		strided_keep(seg, f, word(res->idx, res->gen));
		return 0;
	}
	rs_lk_mutex_lock(RS_LK_GRANTS, &f->grants_mtx);
	slot = cache_slot(f);
	if (slot >= 0) {
		atomic_store_explicit(&f->grants[slot], word(res->idx, res->gen), memory_order_release);
		/* The whole file (grants.h, RS_WHOLE_RDONLY): calls at the
		 * file offset may enter it without learning the offset, and
		 * appends from 0 (an appender's: app_whole). */
		if (whole && req->mode == RS_G_APPEND) {
			atomic_store_explicit(&f->app_whole, word(res->idx, res->gen),
					      memory_order_release);
		} else if (whole) {
			uint64_t h = atomic_load_explicit(&f->whole, memory_order_relaxed);

			while (!atomic_compare_exchange_weak(
				&f->whole, &h, word(res->idx, res->gen) | (h & RS_WHOLE_FRESH) |
						       (req->mode == RS_G_SHARED ? RS_WHOLE_RDONLY : 0)))
				;
		}
	} else
		mark_uncached(g, res->gen);
	rs_lk_mutex_unlock(RS_LK_GRANTS, &f->grants_mtx);
	return slot >= 0 && whole;
}

/* Pin the cluster grant around req's range, and bound req by it: as
 * rs_cluster_pin.  A pin may wait for other nodes, so it is ordered
 * before it does (lockorder.h), and held until unpin. */
static int pin_request(struct rs_nt_req *req, uint64_t start, uint64_t end, unsigned rlmode,
		       struct rs_cl_pin *pin)
{
	int pr;

	rs_lk_acquire(RS_LK_PIN, pin);
	pr = rs_cluster_pin(req->dev, req->ino, start, end, rlmode != 1, pin);
	if (pr < 0) {
		rs_lk_release(RS_LK_PIN, pin);
		return pr;
	}
	req->bounded = 1;
	req->lo = pin->lo;
	req->hi = pin->hi;
	return pr;
}

static void unpin(struct rs_cl_pin *pin)
{
	rs_lk_release(RS_LK_PIN, pin);
	rs_cluster_unpin(pin);
}

/* whole: rs_grant_enter_iov's acquisition, which asks for the whole file
 * even though a cached grant may cover [start, end). */
static int enter_slow_body(struct rs_file *f, uint64_t start, uint64_t end, unsigned rlmode,
			   struct rs_gref *ref, int whole)
{
	struct rs_nt_req req;
	struct rs_nt_result res;
	struct policy *pol;
	struct rs_segment *seg;
	struct rs_seg_grant *g;
	char why[256];
	struct rs_cl_pin pin;
	int saved = errno, cluster;

	ref->g = NULL;
	rs_cl_eio = 0;
	/* Cluster scope: a node grant only inside a pinned cluster grant
	 * (cluster.c); without the node table there is neither, so the call
	 * fails rather than run unprotected across nodes. */
	cluster = rs_cfg.scope == RS_SCOPE_CLUSTER && rs_cluster_dev(atomic_load(&f->dev));
	if (!__atomic_load_n(&rs_node_seg, __ATOMIC_ACQUIRE) && attach() < 0) {
		rs_cl_eio = cluster;
		return 0;
	}
	seg = __atomic_load_n(&rs_node_seg, __ATOMIC_ACQUIRE);
	if (!seg) {
		rs_cl_eio = cluster;
		return 0;	/* node scope was turned off meanwhile */
	}
	if (!whole && strided_enter(seg, f, start, end, rlmode, ref))
		return 1;
	/*
	 * One acquisition per file at a time in this process: threads that
	 * miss the cache together would otherwise each take a slot of the
	 * table for the same range (2000 threads filled all 1024).  The
	 * holder waits only for other processes, which never wait for this
	 * lock; our own grants are given back under grants_mtx instead.
	 */
	rs_lk_mutex_lock(RS_LK_ACQUIRE, &f->acquire_mtx);
	whole_stale(seg, f);
	strided_stale(seg, f);
	/* Another thread may have just acquired what we need. */
	if (!whole && (rs_grant_enter_cached(seg, f, start, end, rlmode, ref) ||
		       strided_enter(seg, f, start, end, rlmode, ref))) {
		rs_lk_mutex_unlock(RS_LK_ACQUIRE, &f->acquire_mtx);
		errno = saved;
		return 1;
	}
	pol = policy_of(f, 1);
	request_of(seg, f, pol, &req, start, end, rlmode, cluster, whole);
	if (cluster) {
		/* Pinned until the node grant is in the table: from then on a
		 * give-back of the cluster grant drains it first. */
		int pr = pin_request(&req, start, end, rlmode, &pin);

		if (pr < 0) {
			rs_lk_mutex_unlock(RS_LK_ACQUIRE, &f->acquire_mtx);
			rs_cl_eio = -pr;
			errno = saved;
			return 0;
		}
	}
	/* No lock of ours is held while we wait for other processes: their
	 * holders may need one to give back what we wait for. */
	while (rs_nt_acquire(&table, &req, &res, why, sizeof(why)) < 0) {
		/* Unregistered by exit, and still doing I/O: attach again. */
		int again;

		rs_lk_mutex_lock(RS_LK_ATTACH, &attach_mtx);
		again = table.me < RS_NPROC || attach_locked() == 0;
		rs_lk_mutex_unlock(RS_LK_ATTACH, &attach_mtx);
		if (!again) {
			if (cluster)
				unpin(&pin);
			rs_cl_eio = cluster;
			rs_lk_mutex_unlock(RS_LK_ACQUIRE, &f->acquire_mtx);
			errno = saved;
			return 0;
		}
		seg = __atomic_load_n(&rs_node_seg, __ATOMIC_ACQUIRE);
	}
	if (cluster)
		unpin(&pin);
	count_acquired(&res);
	policy_note(pol, req.exact, res.met, res.others, coarse_ns());
	g = &seg->grants[res.idx];	/* users already counts us */
	/* Not the whole file (another process holds a grant on it, or the
	 * cache is full): no more asking until an acquisition alone. */
	if (!keep_acquired(seg, f, &req, &res) && whole)
		atomic_store_explicit(&pol->alone, 0, memory_order_relaxed);
	rs_lk_mutex_unlock(RS_LK_ACQUIRE, &f->acquire_mtx);
	/* After the mutex: a first wait on f names it (filewaits.c). */
	if (res.waited)
		rs_fw_node_wait(f, res.wait_ns);
	ref->g = g;
	ref->file = f;
	errno = saved;
	return 1;
}

/* The wait for a grant is ordered as the grant itself (lockorder.h): it
 * may wait for other processes, which may wait for anything of ours of a
 * later level.  So a placeholder at ref for the time it takes, and the
 * grant itself once it is entered, the file's acquire mutex let go. */
static int enter_slow(struct rs_file *f, uint64_t start, uint64_t end, unsigned rlmode,
		      struct rs_gref *ref, int whole)
{
	int r;

	rs_lk_acquire(RS_LK_GRANT, ref);
	r = enter_slow_body(f, start, end, rlmode, ref, whole);
	rs_lk_release(RS_LK_GRANT, ref);
	return rs_grant_entered(r, ref);
}

int rs_grant_enter_slow(struct rs_file *f, uint64_t start, uint64_t end, unsigned rlmode,
			struct rs_gref *ref)
{
	return enter_slow(f, start, end, rlmode, ref, 0);
}

int rs_grant_enter_iov(struct rs_file *f, uint64_t start, uint64_t end, unsigned rlmode,
		       struct rs_gref *ref)
{
	struct policy *p = policy_of(f, 0);

	if (!p) {
		/* No acquisition on f yet, or its policy entry taken by
		 * another file's: a cached grant serves, as it would have. */
		if (rs_grant_enter_fast(f, start, end, rlmode, ref))
			return 0;
	} else {
		uint64_t now = coarse_ns();

		/* The last acquisition met nobody, and nobody for a second
		 * (policy_whole): else the ordinary way, usually the cache. */
		if (policy_exact(p, now) || !atomic_load_explicit(&p->alone, memory_order_relaxed) ||
		    !policy_whole(p, now, 1)) {
			rs_grant_enter(f, start, end, rlmode, ref);
			return 0;
		}
	}
	enter_slow(f, start, end, rlmode, ref, 1);
	return 1;
}

int rs_grant_held(uint64_t dev, uint64_t ino)
{
	struct rs_segment *seg = __atomic_load_n(&rs_node_seg, __ATOMIC_ACQUIRE);
	uint32_t me = table.me;

	for (uint32_t i = 0; seg && me < RS_NPROC && i < RS_NGRANT; i++) {
		struct rs_seg_grant *g = &seg->grants[i];

		/* Racy reads: only our own grants matter, and they change
		 * only by us (under a pin, which the caller excludes) or to
		 * free (revoked), which cannot make a held one look free. */
		if (atomic_load(&g->state) != RS_G_FREE &&
		    __atomic_load_n(&g->owner, __ATOMIC_RELAXED) == me &&
		    __atomic_load_n(&g->dev, __ATOMIC_RELAXED) == dev &&
		    __atomic_load_n(&g->ino, __ATOMIC_RELAXED) == ino)
			return 1;
	}
	return 0;
}

static void file_closed(struct rs_file *f)
{
	struct policy *p;

	/* Before anything: the file object may be reused for another file. */
	atomic_store_explicit(&f->whole, 0, memory_order_relaxed);
	if (!__atomic_load_n(&rs_node_seg, __ATOMIC_ACQUIRE))
		return;
	/* Exact grants its calls left wait for our next scan: so that a
	 * closed file leaves nothing in the table, scan now. */
	p = policy_of(f, 0);
	if (p && atomic_load_explicit(&p->exact_until_ns, memory_order_relaxed))
		rs_nt_free_left(&table);
	rs_lk_mutex_lock(RS_LK_GRANTS, &f->grants_mtx);
	for (int i = -1; i < RS_NCACHE; i++) {
		uint64_t w = atomic_exchange(i < 0 ? &f->strided : &f->grants[i], 0);
		uint32_t idx = RS_GWORD_IDX(w);

		if (w && mark_uncached(&rs_node_seg->grants[idx & (RS_NGRANT - 1)], RS_GWORD_GEN(w)) == 0)
			rs_nt_release(&table, idx, RS_GWORD_GEN(w));
	}
	rs_lk_mutex_unlock(RS_LK_GRANTS, &f->grants_mtx);
}

void rs_grant_file_closed(struct rs_file *f)
{
	file_closed(f);
	/* Then our copies of the agent's descriptions of it may go. */
	if (rs_cfg.scope == RS_SCOPE_CLUSTER)
		rs_cluster_file_closed(atomic_load(&f->dev), atomic_load(&f->ino));
}

/*
 * Before we make a process that shares our descriptor table and not our
 * memory (clone with CLONE_FILES): from then on our own table descriptor
 * is a number in a table the other process may change.  Its dup2 onto
 * that number moves our description to a number we never learn of
 * (rs_fd_evict, in its memory), and our own closefrom would then close
 * it: we would look dead and a reader would reclaim our grant while we
 * write (test_edge, clonefiles_dup2).  So, as such a child does for itself (attach_locked),
 * we map the table through the liveness descriptor: the mapping keeps the
 * description, and its lock, for as long as we live, whatever happens to
 * the number.  Before the clone, so that there is no window; the child
 * replaces its copy of the mapping (rs_grants_fork_child), so it never
 * keeps us alive, and so does a fork of ours.  Later attaches do the same
 * (shares_files).
 */
void rs_grants_files_shared(void)
{
	int fd;

	rs_lk_mutex_lock(RS_LK_ATTACH, &attach_mtx);
	shares_files = 1;
	fd = atomic_load(&rs_private_fd[0]);
	if (attach_state == 1 && table.map.seg && fd >= 0)
		rs_mmap(table.map.seg, sizeof(struct rs_segment), PROT_READ | PROT_WRITE,
		     MAP_SHARED | MAP_FIXED, fd, 0);
	rs_lk_mutex_unlock(RS_LK_ATTACH, &attach_mtx);
}

/* No child is forked in the middle of an attach: its descriptor would be
 * inherited at a low number, outside the child's fork handling. */
void rs_grants_fork_prepare(void)
{
	rs_lk_mutex_lock(RS_LK_ATTACH, &attach_mtx);
}

void rs_grants_fork_parent(void)
{
	rs_lk_mutex_unlock(RS_LK_ATTACH, &attach_mtx);
}

/*
 * The child starts with no grant and no slot: the parent's stay the
 * parent's.  It must also drop every reference to the parent's open file
 * description of the segment, which carries the parent's liveness lock:
 * while the child holds one, a parent killed mid-write would look alive
 * to everyone.  The descriptor is closed, and the mapping (made through a
 * description of its own, segment.c, but still the parent's view) is
 * replaced by inert anonymous memory, so no stale pointer can reach the
 * table.  The child attaches afresh on its first coordinated call.
 *
 * A child that shares our descriptor table (clone with CLONE_FILES, no
 * CLONE_VM) must not close it: that descriptor is the parent's own, and
 * closing it would make the parent look dead to everyone, who would then
 * reclaim its grants while it writes (test_edge, clone_files).  It keeps the
 * number among its private ones instead, out of reach of its own close,
 * dup2 and closefrom, and never uses it.  (While the child lives, the
 * shared table keeps the parent's liveness lock even if the parent dies:
 * the others wait longer, they never steal.)  Its own descriptor, in the
 * same shared table, the parent knows nothing of and could close in a
 * close-everything loop, so the child maps the table through it
 * (attach_locked): the mapping keeps its description, and with it the
 * child's liveness lock, for as long as the child lives.
 */
void rs_grants_fork_child(int files_shared)
{
	int parents = atomic_exchange(&rs_private_fd[RS_PRIVATE_PARENT], -1);

	/* Where the descriptor is now (the application may have moved it). */
	table.map.fd = atomic_exchange(&rs_private_fd[0], -1);
	if (files_shared) {
		atomic_store(&rs_private_fd[RS_PRIVATE_PARENT],
			     table.map.fd >= 0 ? table.map.fd : parents);
		table.map.fd = -1;
	} else if (parents >= 0) {
		/* A grandparent's, in a table of our own now: ours to close. */
		rs_sys(SYS_close, parents);
	}
	shares_files = files_shared;
	table.map.fd_slot = NULL;
	if (table.map.seg)
		rs_mmap(table.map.seg, sizeof(struct rs_segment), PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
	rs_nt_forget(&table);	/* closes it */
	__atomic_store_n(&rs_node_seg, NULL, __ATOMIC_RELAXED);
	attach_state = 0;
	atomic_store(&attach_mtx, 0);
	rs_cluster_fork_child();
	rs_grants_init();
}

/*
 * At exit: give back what we hold and our slot.  Other threads, and
 * destructors that run after ours, may still do I/O: they stay
 * coordinated, attaching again if they need a grant (rs_grant_enter_slow).
 */
void rs_grants_exit(void)
{
	rs_lk_mutex_lock(RS_LK_ATTACH, &attach_mtx);
	if (attach_state == 1)
		rs_nt_unregister(&table);
	rs_lk_mutex_unlock(RS_LK_ATTACH, &attach_mtx);
}
