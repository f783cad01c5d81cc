/*
 * The node table attacked the way an adversary would (issue 8's "fail
 * safe, never open"): exits, forks and kills at awkward moments, stray
 * writes into the segment, signal storms.  Each attack has a control that
 * shows the same rig tears without the shim, so that a 0 means something.
 *
 * Tests marked .disabled reproduce holes that are still open on this
 * branch; each says what goes wrong and why.
 *
 * The helper is tests/helpers/adv_probe.c; it is run with the shim
 * preloaded in its own environment, never in this runner.  This runner
 * links nodelock.c and segment.c directly, to look at the table and to
 * play "another process on the node" (a registrant, a stray writer).
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "nodelock.h"
#include "segment.h"

#define ADV RS_HELPER("adv_probe")
/* Holes still open are disabled; build with -DADV_OPEN=false to run them:
 *   cc ... -DADV_OPEN=false tests/test_adversary.c ... (see the Makefile's
 *   rule for build/tests/test_%, and add the flag). */
#ifndef ADV_OPEN
#define ADV_OPEN true
#endif
#define MIB "1048576"

static char shm_name[80], shm_path[128], shm_env[128], dir[128];
static int counter;

static void setup(void)
{
	counter++;
	snprintf(shm_name, sizeof(shm_name), "/rs-adv-%d-%d", (int)getpid(), counter);
	rs_seg_path(shm_name, shm_path, sizeof(shm_path));
	unlink(shm_path);
	snprintf(shm_env, sizeof(shm_env), "RANGESHIM_SHM=%s", shm_name);
	snprintf(dir, sizeof(dir), "/dev/shm/rs-adv-%d-%d.d", (int)getpid(), counter);
	mkdir(dir, 0700);
}

static void teardown(void)
{
	rs_rm_rf(dir);
	unlink(shm_path);
}

TestSuite(adversary, .init = setup, .fini = teardown, .timeout = 90);

static const char *data(const char *tag)
{
	static char p[4][200];
	static int i;

	i = (i + 1) % 4;
	snprintf(p[i], sizeof(p[i]), "%s/%s", dir, tag);
	return p[i];
}

/* ---- background helpers ---- */





/* Run a helper to completion, with the table's name in its environment. */
static struct rs_run *run(int preload, int timeout_s, char *const argv[])
{
	struct rs_run *r = malloc(sizeof(*r));
	const char *env[] = { shm_env, NULL };

	cr_assert_not_null(r);
	rs_run(r, argv, env, preload, timeout_s);
	return r;
}

/* "other processes are NOT": a process that dropped out of node scope. */
static int fell_open(const char *out)
{
	return strstr(out, "are NOT") != NULL;
}

/* The table's view, for the tests that play a stray writer. */
static struct rs_segment *map_table(struct rs_seg_map *m)
{
	char why[300];

	for (int i = 0; i < 200; i++) {
		if (rs_seg_attach(m, shm_name, 0, why, sizeof(why)) == 0)
			return m->seg;
		usleep(10000);
	}
	cr_assert_fail("no node table %s: %s", shm_name, why);
	return NULL;
}

static int32_t slot_of(struct rs_segment *s, pid_t pid, int ms)
{
	for (int t = 0; t < ms / 5; t++) {
		for (uint32_t i = 0; i < RS_NPROC; i++)
			if (s->procs[i].pid == pid && atomic_load(&s->procs[i].state) == RS_PROC_LIVE)
				return (int32_t)i;
		usleep(5000);
	}
	return -1;
}

/*
 * A writer and a reader of one 1 MiB block at 0, in two processes, for
 * secs; attack() runs meanwhile (in this process).  Returns the reader's
 * torn count (-1: it hung).
 */
static long long rw_rig(int preload, const char *tag, const char *secs,
			void (*attack)(pid_t writer, pid_t reader, void *arg), void *arg,
			long long *reads)
{
	const char *f = data(tag);
	char *wargv[] = { ADV, "w", (char *)f, MIB, (char *)secs, NULL };
	char *rargv[] = { ADV, "r", (char *)f, MIB, (char *)secs, NULL };
	struct rs_bg w, r;
	long long torn;
	int rok;

	rs_bg_start(&w, shm_env, preload, wargv);
	rs_bg_start(&r, shm_env, preload, rargv);
	if (attack)
		attack(w.pid, r.pid, arg);
	/* Both run for secs (under 5): 20 s more means hung. */
	rs_bg_finish(&r, 20000);
	rs_bg_finish(&w, 20000);
	rok = strstr(r.out, "verdict=") ? 0 : -1;
	cr_log_info("%s (shim %d): writer: %s reader: %s", tag, preload, w.out, r.out);
	cr_assert(!fell_open(w.out) && !fell_open(r.out), "%s: fell open: %s %s", tag,
		  w.out, r.out);
	torn = rok == 0 ? rs_field(r.out, "torn") : -1;
	*reads = rs_field(r.out, "reads");
	return torn;
}

/* ==== 1. fork through syscall(SYS_fork) ==============================
 *
 * The shim interposes syscall() (for F_SETFL) but does not see a fork
 * made through it: no atfork handler runs, so the child keeps the
 * parent's grant cache, mapping and slot, and enters the parent's EXSH
 * grant on the fast path as if it were one of the parent's threads.  Its
 * reads then run inside the parent's writes (the process range lock is
 * not shared across fork).
 */
static struct rs_run *rawfork(int preload, const char *how)
{
	char *argv[] = { ADV, "rawfork", (char *)data("rawfork"), MIB, "1.5", (char *)how, NULL };

	return run(preload, 30, argv);
}

/* Controls run again, up to CONTROL_TRIES times, until they tear: a
 * slow (sanitizer) or loaded machine may need more than one go; the rigs
 * with a length run twice as long each time (common.h, RS_STRETCH).  One
 * that never tore is skipped with its counts, never failed. */
#define CONTROL_TRIES 4

/* secs (text) times 2^i, at most 4 times (rw_rig waits 20 s for the
 * end), into buf. */
static const char *longer(char *buf, size_t len, const char *secs, int i)
{
	snprintf(buf, len, "%g", atof(secs) * (double)(1 << (i < 2 ? i : 2)));
	return buf;
}

Test(adversary, rawfork_control_no_shim_tears)
{
	long long torn = 0;

	for (int i = 0; i < CONTROL_TRIES && torn == 0; i++) {
		struct rs_run *r = rawfork(0, "raw");

		cr_log_info("%s", r->out);
		cr_assert_eq(r->status, 0, "%s", r->out);
		torn = rs_field(r->out, "child_torn");
		free(r);
	}
	rs_need(torn, 1, "the rig never tore in %d tries: nothing to compare with", CONTROL_TRIES);
}

Test(adversary, fork_libc_child_excluded)
{
	struct rs_run *r = rawfork(1, "libc");

	cr_log_info("%s", r->out);
	cr_assert_eq(r->status, 0, "%s", r->out);
	cr_assert_gt(rs_field(r->out, "child_reads"), 0, "%s", r->out);
	cr_assert_eq(rs_field(r->out, "child_torn"), 0, "%s", r->out);
	free(r);
}

/* Was open: 1366 of 1808 child reads torn (fixed: interpose.c's
 * syscall() runs the fork handlers around a fork-like call). */
Test(adversary, rawfork_child_excluded)
{
	struct rs_run *r = rawfork(1, "raw");

	cr_log_info("%s", r->out);
	cr_assert_eq(r->status, 0, "%s", r->out);
	cr_assert_gt(rs_field(r->out, "child_reads"), 0, "%s", r->out);
	cr_assert_eq(rs_field(r->out, "child_torn"), 0,
		     "a child forked by syscall(SYS_fork) shares its parent's grant: %s", r->out);
	free(r);
}

/* ==== 2. exit while a thread waits for a grant =======================
 *
 * rs_nt_unregister (the destructor) sets t->me = UINT32_MAX, but a thread
 * already inside rs_nt_acquire's wait loop never looks at it again: its
 * table_lock uses id UINT32_MAX + 1 == 0 (a CAS 0 -> 0 that "takes" the
 * lock without taking it), fills a grant whose owner is UINT32_MAX, and
 * writes under it.  Others free that grant at once (owner names no slot)
 * and write too; its leave then decrements whatever grant now lives in
 * that slot, which leaves users = 0x3fffffff in another process's grant:
 * that range is blocked for good (two innocent processes hung), or, if
 * the count lands on 0 while its holder is inside, torn.  The window is a
 * destructor (or stdio's flush of a slow pipe) that runs after ours while
 * the thread waits.
 */
static void exit_storm(pid_t w, pid_t r, void *arg)
{
	int *bad = arg;

	(void)w;
	(void)r;
	for (int i = 0; i < 15; i++) {
		char *argv[] = { ADV, "exitwait", (char *)data("exit"), MIB, "40", "150", NULL };
		struct rs_run *x = run(*bad >= 0, 20, argv);

		if (strstr(x->out, "overwritten"))
			*bad = 1;
		free(x);
	}
}

Test(adversary, exit_waiting_control_no_shim_tears)
{
	long long reads, torn;
	int bad = -1;

	char secs[16];

	torn = 0;
	for (int i = 0; i < CONTROL_TRIES && torn == 0; i++)
		torn = rw_rig(0, "exit", longer(secs, sizeof(secs), "3", i), exit_storm, &bad,
			      &reads);
	rs_need(torn, 1, "the rig never tore (reads %lld): nothing to compare with", reads);
}

/* Was open: the reader hung for good (users = 0x3fffffff on the writer's
 * grant), and "the table lock was overwritten (it holds 2, not our 0)"
 * from the exiting processes.  Fixed: table_lock re-reads t->me under the
 * local mutex and fails once unregistered; unregister clears t->me
 * before it releases the table lock. */
Test(adversary, exit_with_waiting_thread)
{
	long long reads, torn;
	int bad = 0;

	torn = rw_rig(1, "exit", "3", exit_storm, &bad, &reads);
	cr_assert_eq(bad, 0, "an exiting process used the table under id 0");
	cr_assert_neq(torn, -1, "the reader hung: a grant's user count was corrupted");
	cr_assert_eq(torn, 0, "%lld of %lld reads torn", torn, reads);
}

/* ==== 3. stray writes that make a live holder look gone ===============
 *
 * reclaim_locked frees every grant whose owner slot is not LIVE or names
 * no slot, busy or not ("their threads died inside calls").  But a slot's
 * state word, and a grant's owner field, are untrusted: one stray store
 * there makes a live writer's busy grant look orphaned, and the next
 * reclaim (any registrant; any waiter after 100 ms) frees it under the
 * writer's feet.  Only the liveness byte says who is dead.
 */
struct stray {
	int what;	/* 0 nothing, 1 writer's slot state := FREE,
			 * 2 owner of writer's grants := out of range */
};

static void stray_writes(pid_t w, pid_t r, void *arg)
{
	struct stray *a = arg;
	struct rs_seg_map m;
	struct rs_segment *s = map_table(&m);
	int32_t ws = slot_of(s, w, 5000);
	struct rs_nt t;
	char why[300];
	uint64_t end;

	(void)r;
	cr_assert_geq(ws, 0, "the writer never attached");
	cr_assert_eq(rs_nt_register(&t, shm_name, why, sizeof(why)), 0, "%s", why);
	end = rs_nt_now_ns() + 2000000000ull;
	while (rs_nt_now_ns() < end) {
		if (a->what == 1)
			atomic_store(&s->procs[ws].state, RS_PROC_FREE);
		if (a->what == 2)
			for (uint32_t i = 0; i < RS_NGRANT; i++)
				if (atomic_load(&s->grants[i].state) == RS_G_HELD &&
				    s->grants[i].owner == (uint32_t)ws)
					s->grants[i].owner = 7777;
		/* What any newcomer does when it registers. */
		rs_nt_reclaim(&t);
		usleep(2000);
	}
	rs_nt_unregister(&t);
	rs_seg_detach(&m);
}

Test(adversary, stray_control_no_shim_tears)
{
	struct stray a = { 0 };
	long long reads = 0, torn = 0;

	char secs[16];

	for (int i = 0; i < CONTROL_TRIES && torn == 0; i++)
		torn = rw_rig(0, "stray", longer(secs, sizeof(secs), "2.5", i), NULL, &a, &reads);
	rs_need(torn, 1, "the rig never tore (reads %lld): nothing to compare with", reads);
}

Test(adversary, stray_control_reclaims_alone_do_not_tear)
{
	struct stray a = { 0 };
	long long reads, torn = rw_rig(1, "stray", "2.5", stray_writes, &a, &reads);

	cr_assert_gt(reads, 0);
	cr_assert_eq(torn, 0, "%lld of %lld reads torn", torn, reads);
}

/* A live writer's slot state set to FREE, with a third party reclaiming
 * every 2 ms.  Before 168dd6a its busy grants were freed by every reclaim
 * (13 of 1313 reads torn); since, they are only revoked when idle (busy
 * ones are marked wanted).  Disabled after that for 2-6 torn reads of
 * ~1000 seen then, cause unknown; enabled again on 2026-12-01 when 0 of
 * 98,000 reads tore in 38 runs (this branch, main at 96dd5da, and 168dd6a
 * itself, also with reclaims in a tight loop and under two CPU hogs).  If
 * it tears again, that is a real hole, not noise. */
Test(adversary, stray_slot_state_free)
{
	struct stray a = { 1 };
	long long reads, torn = rw_rig(1, "stray", "2.5", stray_writes, &a, &reads);

	cr_assert_gt(reads, 0);
	cr_assert_eq(torn, 0, "%lld of %lld reads torn", torn, reads);
}

/* Was open (fixed: such grants go only when idle): a busy grant whose
 * owner field is out of range was freed at once,
 * by reclaim and by rs_nt_acquire's scan, although "a grant with garbage
 * fields blocks its range".  Seen: the reader hung (the writer's leave
 * decremented the freed slot's next incarnation: a user count of
 * 0x3fffffff), or torn reads. */
Test(adversary, stray_grant_owner)
{
	struct stray a = { 2 };
	long long reads, torn = rw_rig(1, "stray", "2.5", stray_writes, &a, &reads);

	cr_assert_neq(torn, -1, "the reader hung");
	cr_assert_eq(torn, 0, "%lld of %lld reads torn", torn, reads);
}

/* ==== 4. fork-and-exit storms and a parent killed while its child
 * sleeps are in test_node.c (fork_storm_leaves_no_slot,
 * fork_killed_parent_reclaimed, fork_children_hold_no_table). ==== */

/* ==== 5. SIGSTOP/SIGCONT storm on holders and registrants ============ */

static void stop_storm(pid_t w, pid_t r, void *arg)
{
	pid_t who[3] = { w, r, 0 };
	uint64_t end = rs_nt_now_ns() + 2000000000ull;
	unsigned seed = 1;

	(void)arg;
	for (int n = 0; rs_nt_now_ns() < end; n++) {
		/* A registrant too: a fresh writer every few rounds. */
		if (n % 8 == 0) {
			char *argv[] = { ADV, "w", (char *)data("stop"), MIB, "0.2", NULL };
			struct rs_bg x;

			rs_bg_start(&x, shm_env, 1, argv);
			who[2] = x.pid;
			usleep((useconds_t)(rand_r(&seed) % 3000));
			kill(x.pid, SIGSTOP);
			usleep(30000);
			kill(x.pid, SIGCONT);
			rs_bg_finish(&x, 20000);
			cr_assert(!fell_open(x.out), "%s", x.out);
			continue;
		}
		pid_t p = who[rand_r(&seed) % 2];

		kill(p, SIGSTOP);
		usleep(5000 + (useconds_t)(rand_r(&seed) % 40000));
		kill(p, SIGCONT);
		usleep((useconds_t)(rand_r(&seed) % 5000));
	}
}

Test(adversary, sigstop_storm_control_no_shim_tears)
{
	long long reads = 0, torn = 0;

	char secs[16];

	for (int i = 0; i < CONTROL_TRIES && torn == 0; i++)
		torn = rw_rig(0, "stop", longer(secs, sizeof(secs), "3", i), stop_storm, NULL,
			      &reads);
	rs_need(torn, 1, "the rig never tore (reads %lld): nothing to compare with", reads);
}

Test(adversary, sigstop_storm)
{
	long long reads, torn = rw_rig(1, "stop", "3", stop_storm, NULL, &reads);

	cr_assert_gt(reads, 0);
	cr_assert_eq(torn, 0, "%lld of %lld reads torn", torn, reads);
}
