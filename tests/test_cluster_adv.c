/*
 * Adversarial Criterion suite for cluster scope on simulated nodes (issue
 * 11): each test is a reproducer of one defect found by attacking the
 * agent and the pins, with a control that shows the rig can see it (the
 * same call without the shim, or in node scope).  A simulated node is a
 * node table of its own (RANGESHIM_SHM) with RANGESHIM_SCOPE=cluster and
 * RANGESHIM_CLUSTER_FS=tmpfs,ext4; the shim is preloaded only into the
 * helper (cadv_probe).
 *
 * Tests marked .disabled reproduce a defect that is not fixed yet; the
 * comment above each names it and the fix it needs.  To run them, build
 * with -DCADV_RUN_DISABLED (after `make all`, from the worktree):
 *   cc -std=gnu11 -D_GNU_SOURCE -Iinclude -Ishim -DCADV_RUN_DISABLED \
 *      -DRS_BUILD_DIR="\"$PWD/build\"" -DRS_SAN='""' -o /tmp/cadv \
 *      tests/test_cluster_adv.c -lcriterion && /tmp/cadv
 *
 *  offset_beyond_2_62  pread and pwrite at offsets >= 2^62 (where the
 *              cluster intent space mirrors the data space) return what
 *              the real calls return, not EIO.
 *  own_fcntl_lock      a process holding its own POSIX lock on a cluster
 *              file writes inside it (it deadlocked with the agent).
 *  own_whole_file_locks  the same under a whole-file lock: fcntl l_len 0,
 *              F_OFD_SETLKW, lockf, flock.
 *  own_locks_shared    a whole-file lock keeps its meaning: F_GETLK says
 *              len 0, other processes of the node and of another node
 *              are refused, other nodes' I/O runs, a second pin keeps it.
 *  agent_idle_exit_race  node A's agent, its poller stopped mid-tick
 *              (libstall_stat.so) while a process of A pins a file and
 *              keeps it, does not exit idle when the tick goes on: node
 *              B's write of the file returns (the tick's stale count and
 *              clock made it exit holding the grant, and B waited for ever).
 *  agent_killed_says_why  node A's agent SIGKILLed while a process of A
 *              holds a cached grant: node B's write waits (the process's
 *              copy keeps the lock) and says in one line that another
 *              node holds the range and why it may stay held (it was
 *              silent); once A's process exits, B's write returns.
 *  own_unlock_all      an unlock "to the end" also drops a lock the
 *              process placed past 2^61 (it was cut at 2^61 and left it,
 *              and the next write deadlocked with the agent).
 *  cluster_adv_nodes::flock_unlock_readonly  (two mounts of a cluster
 *              file system, RS_CLUSTER_DIRS) flock(LOCK_UN) after a
 *              LOCK_EX on a read-only descriptor lets the lock go (the
 *              real flock stayed held, and writes waited for ever).
 *  own_high_lock_says_why  a write waiting for the process's own lock
 *              wholly past 2^61 (a limitation) says why (it was silent).
 *  exec_keeps_stdin_lock  a program started with a POSIX lock on its
 *              stdin or (stats on stderr) its stderr keeps it (the
 *              library's start dropped it).
 *  foreign_whole_lock_under_io  (disabled: not fixed) a process without
 *              the shim gets a whole-file lock while a node writes the
 *              file (it waits until the node goes idle).
 *  own_lock_bad_args   lock calls with bad pointers return the real
 *              calls' EFAULT, in cluster scope too.
 *  sqlite      three sqlite3 writers on two nodes finish, 150 rows, ok.
 *  unwritable_file     reading a file the user may not write returns
 *              (it hung: the agent needed a writable description).
 *  unwritable_write    a write through a descriptor opened before the
 *              file became read-only fails with EIO and one line,
 *              without writing (the agent holds read locks only).
 *  many_files          more than 256 cluster files held open at once: the
 *              257th call returns (it hung: agent table full; now the
 *              least recently pinned idle file makes room).
 *  copies_beyond_64    a process keeps the agent's description of every
 *              file (it kept only 64: after an agent crash, the 65th
 *              file's cluster lock was gone while the process still held
 *              a node grant on it).
 *  stopped_holder_other_file  a SIGSTOPped process of node A inside a
 *              call on file X must not keep A from giving back other
 *              files: node B's write of an idle file Y returns (it hung
 *              while one poller thread served every file).
 *  locks_while_draining  `rangeshim locks` of node A while A's agent is
 *              giving file X back and waits for a process stopped inside
 *              a call on X: the listing returns, says X is busy, and a new
 *              process of A is served a pin on file Z meanwhile (the
 *              listing held the agent's file table while it waited for
 *              X: it hung, and every pin of the node with it).
 *  carrier_truncated   a process with one free descriptor: the pin's
 *              reply carries the agent's description, which cannot be
 *              installed (MSG_CTRUNC).  The write fails with EMFILE, or it
 *              succeeded only with a copy kept (the lock survives the
 *              agent's SIGKILL); it went ahead without one, and the lock
 *              went with the agent under the process's cached grant.  With
 *              no free descriptor the write fails with EMFILE too (it
 *              retried for ever).  Control: three free descriptors, the
 *              write succeeds and the lock survives the agent.
 *  carriers_released   1100 files opened, written and closed one by one
 *              under a soft limit of 1024 descriptors: all written, and a
 *              few descriptors open at the end (it kept one copy per file
 *              ever written, stopped after 1000 files and retried for
 *              ever).  Control: node scope, the same count of descriptors.
 *  own_lock_past_2_61  (a limitation, checked as limitations.md states
 *              it) the process's own lock calls wholly past 2^61 meet its
 *              node's agent's grant: F_GETLK reports a write lock of pid
 *              -1, lockf(F_TEST) fails with EACCES, F_SETLK with EAGAIN.
 *              Control: node scope, where no agent holds anything, the
 *              same calls find the range free.
 *  squatted_socket     another user binds the agent's abstract socket name
 *              first: our cluster calls wait (fail safe), and now say
 *              so, naming the squatter's uid and pid (it was silent).
 */
#include "common.h"

#include <dirent.h>
#include <grp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "clusteragent.h"

#define PROBE RS_HELPER("cadv_probe")

/* The reproducers of unfixed defects are off in `make test`; build with
 * -DCADV_RUN_DISABLED to run them (they fail on the current code). */
#ifdef CADV_RUN_DISABLED
#define CADV_DISABLED false
#else
#define CADV_DISABLED true
#endif
#define EOF62 (1LL << 62)
/* How long a call that must return may take before the test calls it
 * stuck: generous, since a loaded machine (two suites side by side at load
 * 20) took over 10 s to start a second node's agent and answer a pin. */
#define RETURN_S 30

struct cenv {
	char shm[96], scope[64];
	const char *env[5];
};

static void cenv(struct cenv *c, const char *test, char node, const char *scope)
{
	snprintf(c->shm, sizeof c->shm, "RANGESHIM_SHM=/rs-cadv-%s-%c.%d", test, node,
		 (int)getpid());
	snprintf(c->scope, sizeof c->scope, "RANGESHIM_SCOPE=%s", scope);
	c->env[0] = c->shm;
	c->env[1] = c->scope;
	c->env[2] = "RANGESHIM_CLUSTER_FS=tmpfs,ext4";
	c->env[3] = NULL;
}

static void unlink_tables(const char *test)
{
	char p[PATH_MAX];

	for (char node = 'a'; node <= 'b'; node++) {
		snprintf(p, sizeof p, "/dev/shm/rs-cadv-%s-%c.%d", test, node, (int)getpid());
		unlink(p);
	}
}

/* Pids of the agents serving node table /rs-cadv-TEST-NODE.PID. */
static int agents_of(const char *test, char node, pid_t *out, int max)
{
	return rs_node_agents("cadv", test, node, out, max);
}

static void kill_agents(const char *test)
{
	rs_kill_node_agents("cadv", test);
}

/* Is any byte of path locked by anyone? */
static int locked_by_anyone(const char *path)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };
	int fd = open(path, O_RDWR);

	cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(fcntl(fd, F_OFD_GETLK, &fl), 0);
	close(fd);
	return fl.l_type != F_UNLCK;
}

static void make_file(const char *path, long long size)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);

	cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(ftruncate(fd, size), 0);
	close(fd);
}

/* Start argv with env and the shim, in the background. */
static void start(struct rs_bg *b, const char *const env[], char *const argv[])
{
	rs_bg_start_env(b, env, 1, argv);
}

/* Run the probe on node A of test; *rc, *err, *ms from its line. */
static int probe(const char *test, const char *scope, int preload, int timeout_s,
		 char *const argv[], long long *rc, long long *err, long long *ms)
{
	static struct rs_run r;
	struct cenv c;

	cenv(&c, test, 'a', scope);
	rs_run(&r, argv, c.env, preload, timeout_s);
	cr_log_info("%s %s%s: status %d: %s", test, scope, preload ? "" : " (no shim)", r.status,
		    r.out);
	*rc = rs_field(r.out, "rc");
	*err = rs_field(r.out, "errno");
	*ms = rs_field(r.out, "ms");
	return r.status == 0 && strstr(r.out, "verdict=PASS") ? 0 : -1;
}

/* A new 4 KiB file of test's on tmpfs; its name in path (PATH_MAX). */
static void shm_file(char *path, const char *test)
{
	snprintf(path, PATH_MAX, "/dev/shm/rs-cadv-%s.%d", test, (int)getpid());
	make_file(path, 4096);
}

/* The end of test: its agents, its file and its node tables go. */
static void end_test(const char *test, const char *path)
{
	kill_agents(test);
	unlink(path);
	unlink_tables(test);
}

/* PROBE MODE PATH on node A of test in cluster scope, without the shim
 * (r0, which must exit 0) and with it (r1), each killed after timeout_s. */
static void real_and_shim(const char *test, const char *mode, const char *path, int timeout_s,
			  struct rs_run *r0, struct rs_run *r1)
{
	struct cenv c;

	cenv(&c, test, 'a', "cluster");
	rs_run(r0, (char *[]){ PROBE, (char *)mode, (char *)path, NULL }, c.env, 0, timeout_s);
	rs_run(r1, (char *[]){ PROBE, (char *)mode, (char *)path, NULL }, c.env, 1, timeout_s);
	cr_log_info("%s: real %d %s / shim %d %s", mode, r0->status, r0->out, r1->status,
		    r1->out);
	cr_assert_eq(r0->status, 0, "control: %s", r0->out);
}

/* real_and_shim on a new 4 KiB file of test's on tmpfs (shm_file). */
static void shm_real_and_shim(const char *test, const char *mode, char *path,
			      struct rs_run *r0, struct rs_run *r1)
{
	shm_file(path, test);
	real_and_shim(test, mode, path, RETURN_S, r0, r1);
}

/*
 * Offsets at and beyond 2^62.  The cluster intent space mirrors the data
 * space at 2^62 + offset, so cluster grants covered only [0, 2^62); the pin
 * refused every call starting there with EIO, which changed the result of
 * calls the kernel allows (tmpfs files may reach 2^63 - 1): a pread at
 * 2^62 past the end of file returns 0, a pwrite there writes.  Control:
 * the same calls without the shim (the expected results, and proof that
 * the file system takes them).  The data space now ends at 2^61 (the
 * grant space lies above it), so a write between 2^61 and 2^62 is checked
 * too.
 */
Test(cluster_adv, offset_beyond_2_62, .timeout = 60)
{
	char path[PATH_MAX], off[32], off2[32];
	long long rc0, e0, rc1, e1, ms;
	struct stat st;

	snprintf(path, sizeof path, "/dev/shm/rs-cadv-off.%d", (int)getpid());
	snprintf(off, sizeof off, "%lld", EOF62);
	snprintf(off2, sizeof off2, "%lld", EOF62 + 4096);
	make_file(path, 8192);
	/* Read past the end, at 2^62. */
	cr_assert_eq(probe("off", "cluster", 0, RETURN_S, (char *[]){ PROBE, "pread", path, off, "10", NULL },
			   &rc0, &e0, &ms), 0);
	cr_assert_eq(probe("off", "cluster", 1, RETURN_S, (char *[]){ PROBE, "pread", path, off, "10", NULL },
			   &rc1, &e1, &ms), 0);
	cr_expect_eq(rc1, rc0, "pread at 2^62: shim rc %lld errno %lld, real rc %lld errno %lld",
		     rc1, e1, rc0, e0);
	cr_expect_eq(e1, e0);
	/* Write at 2^62 + 4096, then at 2^62 (the real call first, on its own
	 * offset, so that both see a file of the same shape). */
	cr_assert_eq(probe("off", "cluster", 0, RETURN_S, (char *[]){ PROBE, "pwrite", path, off2, "10", NULL },
			   &rc0, &e0, &ms), 0);
	cr_assert_eq(probe("off", "cluster", 1, RETURN_S, (char *[]){ PROBE, "pwrite", path, off, "10", NULL },
			   &rc1, &e1, &ms), 0);
	cr_expect_eq(rc1, rc0, "pwrite at 2^62: shim rc %lld errno %lld, real rc %lld errno %lld",
		     rc1, e1, rc0, e0);
	cr_expect_eq(e1, e0);
	/* Between the data space's end (2^61) and 2^62. */
	snprintf(off, sizeof off, "%lld", EOF62 / 2 + 4096);
	cr_assert_eq(probe("off", "cluster", 1, RETURN_S, (char *[]){ PROBE, "pwrite", path, off, "10", NULL },
			   &rc1, &e1, &ms), 0);
	cr_expect_eq(rc1, 10, "pwrite at 2^61 + 4096: rc %lld errno %lld", rc1, e1);
	/* Straddling 2^61: starts in the data space, ends beyond it. */
	snprintf(off, sizeof off, "%lld", EOF62 / 2 - 5);
	cr_assert_eq(probe("off", "cluster", 1, RETURN_S, (char *[]){ PROBE, "pwrite", path, off, "10", NULL },
			   &rc1, &e1, &ms), 0);
	cr_expect_eq(rc1, 10, "pwrite across 2^61: rc %lld errno %lld", rc1, e1);
	/* Straddling 2^62. */
	snprintf(off, sizeof off, "%lld", EOF62 - 5);
	cr_assert_eq(probe("off", "cluster", 1, RETURN_S, (char *[]){ PROBE, "pwrite", path, off, "10", NULL },
			   &rc1, &e1, &ms), 0);
	cr_expect_eq(rc1, 10, "pwrite across 2^62: rc %lld errno %lld", rc1, e1);
	cr_assert_eq(stat(path, &st), 0);
	cr_expect_eq((long long)st.st_size, EOF62 + 4096 + 10);
	kill_agents("off");
	cr_expect(!locked_by_anyone(path), "a lock was left on the file");
	unlink(path);
	unlink_tables("off");
}

/*
 * DEFECT (fixed: separate byte spaces, clusterlock.h and cluster.c
 * rs_cluster_lock_args): an application that takes its own fcntl lock on
 * a cluster file (SQLite, ROMIO's atomic mode, any NFS database: the
 * users issue 11 names) and then writes inside it deadlocked with its
 * node's agent.  The agent's OFD write locks sat on the data bytes, so
 * the pin made the agent wait in F_OFD_SETLKW for the application's
 * POSIX lock while the application waited for the pin.  Observed on
 * e284bb3: the pwrite never returned (killed after 10 s); node scope:
 * 0 ms.  Now the agent's locks live in the grant space above 2^61 and
 * the library keeps the application's lock calls below it.
 */
Test(cluster_adv, own_fcntl_lock, .timeout = 60)
{
	char path[PATH_MAX];
	long long rc, e, ms;

	snprintf(path, sizeof path, "/dev/shm/rs-cadv-fl.%d", (int)getpid());
	make_file(path, 4096);
	/* Control: node scope writes under the process's own lock at once. */
	cr_assert_eq(probe("fl", "node", 1, RETURN_S, (char *[]){ PROBE, "fcntllock", path, NULL },
			   &rc, &e, &ms), 0);
	cr_expect_eq(rc, 100);
	cr_expect_eq(probe("fl", "cluster", 1, RETURN_S, (char *[]){ PROBE, "fcntllock", path, NULL },
			   &rc, &e, &ms), 0,
		     "cluster scope: a write under the process's own fcntl lock did not return in 30 s");
	cr_expect_eq(rc, 100);
	kill_agents("fl");
	unlink(path);
	unlink_tables("fl");
}

/*
 * The other ways an application locks a whole file, then writes inside
 * the lock: fcntl with l_len 0 (F_SETLKW and F_OFD_SETLKW: "to the end"
 * reached into the agent's spaces; on e284bb3 the write failed with EIO,
 * the agent's intent lock having met the application's lock), lockf
 * (glibc calls fcntl internally, out of any wrapper's sight) and flock
 * (which NFS, Lustre and GlusterFS make a whole-file lock of the lock
 * manager; on tmpfs it is local, so here it checks only that it is
 * passed on).  Each must return what node scope returns (rc 100), in
 * cluster scope too.
 */
Test(cluster_adv, own_whole_file_locks, .timeout = 120)
{
	static const char *const hows[] = { "whole", "ofd", "lockf", "flock" };
	char path[PATH_MAX];
	long long rc, e, ms;

	snprintf(path, sizeof path, "/dev/shm/rs-cadv-wl.%d", (int)getpid());
	for (size_t i = 0; i < sizeof hows / sizeof hows[0]; i++) {
		char *how = (char *)hows[i];

		make_file(path, 4096);
		cr_assert_eq(probe("wl", "node", 1, RETURN_S,
				   (char *[]){ PROBE, "ownlock", path, how, NULL }, &rc, &e, &ms), 0);
		cr_expect_eq(rc, 100, "%s, node scope: rc %lld errno %lld", how, rc, e);
		cr_expect_eq(probe("wl", "cluster", 1, RETURN_S,
				   (char *[]){ PROBE, "ownlock", path, how, NULL }, &rc, &e, &ms), 0,
			     "%s: a write under the process's own lock did not return in 30 s", how);
		cr_expect_eq(rc, 100, "%s, cluster scope: rc %lld errno %lld", how, rc, e);
	}
	kill_agents("wl");
	unlink(path);
	unlink_tables("wl");
}

/*
 * DEFECT (fixed: unlocks are made as they are, cluster.c lock_prep): a
 * process that locked a byte wholly past 2^61 (passed unclamped, into the
 * grant space) and then unlocked "to the end" from 0, as the kernel lets
 * it drop everything, kept the high lock: the library had cut the unlock
 * at 2^61 too.  The lock then sat on the grant of data byte 10, so the
 * process's next write there waited for the agent, whose F_OFD_SETLKW
 * waited for the process.  Observed on 915143f: left=1 (F_WRLCK), and the
 * pwrite never returned (killed after 10 s).  Control: without the shim,
 * left=2 (F_UNLCK) and the write returns 100.
 */
Test(cluster_adv, own_unlock_all, .timeout = 60)
{
	char path[PATH_MAX];
	static struct rs_run r0, r1;

	shm_real_and_shim("ua", "unlockall", path, &r0, &r1);
	cr_assert_eq(rs_field(r0.out, "left"), F_UNLCK, "control: %s", r0.out);
	cr_assert_eq(rs_field(r0.out, "rc"), 100, "control: %s", r0.out);
	cr_expect_eq(r1.status, 0, "cluster scope: the write after the unlock did not return in "
		     "30 s: %s", r1.out);
	cr_expect_eq(rs_field(r1.out, "left"), F_UNLCK, "the unlock \"to the end\" left the lock "
		     "past 2^61: %s", r1.out);
	cr_expect_eq(rs_field(r1.out, "rc"), 100, "%s", r1.out);
	end_test("ua", path);
}

/*
 * DEFECT (fixed: flock's LOCK_UN is made both ways, interpose.c flock),
 * on file systems that make flock a whole-file lock of the lock manager
 * (GlusterFS here; NFS, Lustre flock): flock(LOCK_EX) on a read-only
 * descriptor is made as the real flock (the OFD write lock would be
 * refused for the mode), but its LOCK_UN was made as an OFD unlock only,
 * so the real flock stayed held, on every byte, until the last close:
 * another description's LOCK_EX|LOCK_NB failed with EWOULDBLOCK after the
 * unlock, and a write to the file waited for ever (the node's agent
 * waited for the lock in the grant space).  Observed on 915143f over two
 * GlusterFS mounts: nb=-1 nberrno=11, then no answer in 20 s.  Control:
 * the same without the shim (nb=0, rc=100).  Runs where RS_CLUSTER_DIRS
 * names two mounts of one cluster file system (make test-cluster).
 */
Test(cluster_adv_nodes, flock_unlock_readonly, .timeout = 90)
{
	const char *dirs = getenv("RS_CLUSTER_DIRS");
	char path[PATH_MAX];
	static struct rs_run r0, r1;
	int fd;

	if (!dirs || !strchr(dirs, ':'))
		cr_skip_test("RS_CLUSTER_DIRS=DIR-A:DIR-B is not set (make test-cluster sets it)");
	snprintf(path, sizeof path, "%.*s/fu.%d", (int)(strchr(dirs, ':') - dirs), dirs,
		 (int)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(ftruncate(fd, 4096), 0);
	close(fd);
	real_and_shim("fu", "flockun", path, 20, &r0, &r1);
	cr_assert_eq(rs_field(r0.out, "nb"), 0, "control: %s", r0.out);
	cr_assert_eq(rs_field(r0.out, "rc"), 100, "control: %s", r0.out);
	cr_expect_eq(rs_field(r1.out, "nb"), 0, "the real flock outlived LOCK_UN: %s", r1.out);
	cr_expect_eq(r1.status, 0, "cluster scope: the write after LOCK_UN did not return in "
		     "20 s: %s", r1.out);
	cr_expect_eq(rs_field(r1.out, "rc"), 100, "%s", r1.out);
	end_test("fu", path);
}

/*
 * DEFECT (half fixed: the wait now says why; the wait itself is a
 * limitation): a process that holds its own lock wholly past 2^61 (passed
 * unclamped, into the grant space: here on the mirror of data byte 10)
 * and writes byte 10 waits for its agent, whose F_OFD_SETLKW waits for
 * the process (limitations.md).  It waited in silence; "every wait ends
 * or says why" (the agent runs detached, its stderr is /dev/null).  Now
 * a call whose pin has no answer in 5 s asks who holds its grant's range
 * and names the process (cluster.c, await_reply).  Observed on 915143f:
 * no line in 10 s.
 * Control: in node scope the same write returns 100 at once.
 */
Test(cluster_adv, own_high_lock_says_why, .timeout = 60)
{
	char path[PATH_MAX], want[64];
	static struct rs_run r;
	struct cenv c;
	long long pid;

	shm_file(path, "hl");
	cenv(&c, "hl", 'a', "node");
	rs_run(&r, (char *[]){ PROBE, "highlock", path, NULL }, c.env, 1, RETURN_S);
	cr_log_info("highlock, node scope: %d %s", r.status, r.out);
	cr_assert_eq(r.status, 0, "control: %s", r.out);
	cr_assert_eq(rs_field(r.out, "rc"), 100, "control: %s", r.out);
	cenv(&c, "hl", 'a', "cluster");
	/* Waits for ever; the line comes after 5 s. */
	rs_run(&r, (char *[]){ PROBE, "highlock", path, NULL }, c.env, 1, 15);
	cr_log_info("highlock, cluster scope: %d %s", r.status, r.out);
	pid = rs_field(r.out, "pid");
	cr_assert_gt(pid, 0, "%s", r.out);
	snprintf(want, sizeof want, "lock of process %lld (this process", pid);
	cr_expect(r.status == 0 || strstr(r.out, want), "the write waits for the process's own "
		  "lock past 2^61 and nothing says so: %s", r.out);
	end_test("hl", path);
}

/* Start PROBE stream PATH with fd lfd (0 or 2) an fd of path that holds a
 * POSIX lock on [0, 10), taken before execve (a process keeps its locks
 * across it);
 * with the shim when preload.  Returns the child; *type is what F_GETLK
 * from here says of [0, 10) half a second later. */
static pid_t exec_locked(const char *path, const struct cenv *c, int preload, int lfd,
			 short *type)
{
	struct flock q = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10 };
	int fd;
	pid_t p = fork();

	cr_assert_geq(p, 0);
	if (p == 0) {
		struct flock fl = q;

		fd = open("/dev/null", O_WRONLY);
		if (fd < 0 || dup2(fd, 1) < 0)
			_exit(1);
		fd = open(path, O_RDWR);
		if (fd < 0 || dup2(fd, lfd) < 0 || fcntl(lfd, F_SETLK, &fl) < 0)
			_exit(1);
		for (int i = 0; c->env[i]; i++)
			putenv((char *)c->env[i]);
		if (preload)
			setenv("LD_PRELOAD", RS_LIB, 1);
		else
			unsetenv("LD_PRELOAD");
		execv(PROBE, (char *[]){ PROBE, "stream", (char *)path, "1", "2", NULL });
		_exit(127);
	}
	usleep(500000);
	fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0);
	cr_assert_eq(fcntl(fd, F_GETLK, &q), 0);
	close(fd);
	*type = q.l_type;
	return p;
}

/*
 * DEFECT (fixed: rs_fd_grow_table dups an eventfd of its own, fdtable.c),
 * in every scope: a program started with a POSIX lock on its stdin (taken
 * by a wrapper before execve: a process keeps its locks across it) lost
 * the lock when the library started, which grew the fd table by dup'ing
 * fd 0 to a high number and closing the copy; closing any fd of a file
 * drops the process's POSIX locks on it.  With RANGESHIM_STATS=1 (stderr) a
 * lock on stderr went the same way (init.c copied fd 2 twice and closed
 * the first copy).  Observed on 915143f: F_GETLK from another process
 * finds [0, 10) unlocked half a second after exec.  Control: the same
 * without the shim (locked).
 */
Test(cluster_adv, exec_keeps_stdin_lock, .timeout = 60)
{
	char path[PATH_MAX];
	struct cenv c;
	short type;
	int st;
	pid_t p;

	snprintf(path, sizeof path, "/dev/shm/rs-cadv-ex.%d", (int)getpid());
	make_file(path, 1 << 20);
	cenv(&c, "ex", 'a', "cluster");
	/* Stats on stderr: the library keeps a copy of fd 2. */
	c.env[3] = "RANGESHIM_STATS=1";
	c.env[4] = NULL;
	for (int lfd = 0; lfd <= 2; lfd += 2) {
		p = exec_locked(path, &c, 0, lfd, &type);
		cr_assert_eq(waitpid(p, &st, 0), p);
		cr_assert_eq(type, F_WRLCK, "control: the lock on fd %d did not survive exec "
			     "without the shim", lfd);
		p = exec_locked(path, &c, 1, lfd, &type);
		cr_assert_eq(waitpid(p, &st, 0), p);
		cr_expect_eq(type, F_WRLCK, "the library dropped the lock the program was started "
			     "with on fd %d", lfd);
	}
	end_test("ex", path);
}

/* F_SETLKW of the whole file from a child without the shim, killed by
 * SIGALRM after secs: 1 if it got the lock in time. */
static int foreign_whole_lock(const char *path, unsigned secs)
{
	int st;
	pid_t c = fork();

	cr_assert_geq(c, 0);
	if (c == 0) {
		struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
		int fd = open(path, O_RDWR);

		alarm(secs);
		_exit(fd >= 0 && fcntl(fd, F_SETLKW, &fl) == 0 ? 0 : 1);
	}
	cr_assert_eq(waitpid(c, &st, 0), c);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/*
 * DEFECT (not fixed; limitations.md): a process without the shim that
 * asks for a whole-file lock waits for as long as any node keeps using
 * the file.  Its F_SETLKW reaches the grant space, where a node's cached
 * grant holds it, but a blocked request is invisible to the holders'
 * doorbell (only a held lock in the intent space rings it), so the grant
 * is given back only when its node goes idle (2 s after the last call).
 * Without the shim the lock is granted at once (nobody holds a lock).
 * Observed on 915143f: no lock in 4 s while a node-A process writes back
 * to back.  Control: the same writer in node scope, where the lock comes
 * at once.  The fix needs the waiter to announce itself, which a program
 * without the shim does not do (or holders that give back unasked).
 */
Test(cluster_adv, foreign_whole_lock_under_io, .timeout = 60, .disabled = CADV_DISABLED)
{
	static const char *const scopes[] = { "node", "cluster" };	/* control first */
	char path[PATH_MAX];
	struct rs_bg w;
	struct cenv c;

	snprintf(path, sizeof path, "/dev/shm/rs-cadv-fw.%d", (int)getpid());
	make_file(path, 1 << 20);
	for (int i = 0; i < 2; i++) {
		cenv(&c, "fw", 'a', scopes[i]);
		start(&w, c.env, (char *[]){ PROBE, "stream", path, "1", "6", NULL });
		usleep(500000);
		cr_expect(foreign_whole_lock(path, 4), "%s scope: a process without the shim got "
			  "no whole-file lock in 4 s while node A wrote", scopes[i]);
		rs_bg_finish(&w, 20000);
	}
	end_test("fw", path);
}

/*
 * Lock calls with bad arguments on a cluster file return what the real
 * calls return: an unmapped struct flock (EFAULT), and an F_GETLK whose
 * answer cannot be written back (a read-only page: EFAULT).  The library
 * reads and writes the application's struct through process_vm_* and
 * must neither crash nor invent a result.  Control: the same calls
 * without the shim.
 */
Test(cluster_adv, own_lock_bad_args, .timeout = 60)
{
	char path[PATH_MAX];
	static struct rs_run r0, r1;

	shm_real_and_shim("bl", "badlk", path, &r0, &r1);
	cr_assert_eq(r1.status, 0, "with the shim: %s", r1.out);
	cr_expect_eq(rs_field(r1.out, "rc1"), rs_field(r0.out, "rc1"));
	cr_expect_eq(rs_field(r1.out, "e1"), rs_field(r0.out, "e1"));
	cr_expect_eq(rs_field(r1.out, "rc"), rs_field(r0.out, "rc"));
	cr_expect_eq(rs_field(r1.out, "errno"), rs_field(r0.out, "errno"));
	end_test("bl", path);
}

static void touch(const char *path, const char *suffix)
{
	char p[PATH_MAX + 16];
	int fd;

	snprintf(p, sizeof p, "%s%s", path, suffix);
	fd = open(p, O_WRONLY | O_CREAT, 0600);
	cr_assert_geq(fd, 0, "%s: %s", p, strerror(errno));
	close(fd);
}

/* trylock [off, off+len) from node, in cluster scope: its rc and errno. */
static long long trylock(const char *test, char node, const char *path, const char *off,
			 const char *len, long long *err)
{
	static struct rs_run r;
	struct cenv c;

	cenv(&c, test, node, "cluster");
	rs_run(&r, (char *[]){ PROBE, "trylock", (char *)path, (char *)off, (char *)len, NULL },
	       c.env, 1, RETURN_S);
	cr_log_info("trylock from node %c: status %d: %s", node, r.status, r.out);
	cr_assert_eq(r.status, 0, "trylock from node %c: %s", node, r.out);
	*err = rs_field(r.out, "errno");
	return rs_field(r.out, "rc");
}

/*
 * The application's own locks keep their meaning in cluster scope.  A
 * process of node A holds a whole-file write lock (l_len 0) and writes
 * inside it:
 *  - F_GETLK from another process of A reports the lock as the kernel
 *    would: start 0, len 0 ("to the end"), the holder's pid (the library
 *    makes it [0, 2^61) and gives the answer back as it was asked);
 *    lockf(F_TEST) sees it (EACCES);
 *  - another process of A and a process of node B are refused the bytes
 *    (EAGAIN): the clamp moved nothing that conflicts;
 *  - node B's own I/O on the file still runs (the agent's grants do not
 *    wait for the application's lock: on e284bb3 they did);
 *  - after node B's write took the cluster grant away, the holder writes
 *    again (a new pin, whose reply brings the agent's description once
 *    more) and still holds its lock.  The library used to keep that
 *    description as an fd of the file and close the duplicate, and any
 *    close of an fd of a file drops the process's POSIX locks on it:
 *    the lock was silently gone (the agent now hands over a socket that
 *    carries the description, agent.c make_carrier);
 *  - once the holder ends, the bytes are free.
 */
Test(cluster_adv, own_locks_shared, .timeout = 120)
{
	char path[PATH_MAX], go[PATH_MAX + 8], stop[PATH_MAX + 8];
	static struct rs_run r;
	struct rs_bg hold;
	struct cenv ca, cb;
	long long rc, err;

	snprintf(path, sizeof path, "/dev/shm/rs-cadv-ol.%d", (int)getpid());
	snprintf(go, sizeof go, "%s.go", path);
	snprintf(stop, sizeof stop, "%s.stop", path);
	unlink(go);
	unlink(stop);
	make_file(path, 1 << 21);
	cenv(&ca, "ol", 'a', "cluster");
	cenv(&cb, "ol", 'b', "cluster");
	start(&hold, ca.env, (char *[]){ PROBE, "ownlock", path, "whole", "60", NULL });
	cr_assert(rs_bg_wait_for(&hold, "held", 10000), "the holder's write did not return: %s",
		  hold.out);
	cr_expect_eq(rs_field(hold.out, "rc"), 100, "holder: %s", hold.out);

	rs_run(&r, (char *[]){ PROBE, "getlk", path, NULL }, ca.env, 1, RETURN_S);
	cr_log_info("getlk: %d %s", r.status, r.out);
	cr_assert_eq(r.status, 0);
	cr_expect_eq(rs_field(r.out, "type"), F_WRLCK, "getlk: %s", r.out);
	cr_expect_eq(rs_field(r.out, "start"), 0, "getlk: %s", r.out);
	cr_expect_eq(rs_field(r.out, "len"), 0, "getlk did not report \"to the end\": %s", r.out);
	cr_expect_eq(rs_field(r.out, "pid"), hold.pid, "getlk: %s", r.out);

	rc = trylock("ol", 'a', path, "0", "100", &err);
	cr_expect(rc == -1 && err == EAGAIN, "node A's other process locked the holder's bytes "
		  "(rc %lld errno %lld)", rc, err);
	rs_run(&r, (char *[]){ PROBE, "lockftest", path, NULL }, ca.env, 1, RETURN_S);
	cr_log_info("lockftest: %d %s", r.status, r.out);
	cr_expect(rs_field(r.out, "rc") == -1 && rs_field(r.out, "errno") == EACCES,
		  "lockf(F_TEST) did not see the holder's lock: %s", r.out);
	rc = trylock("ol", 'b', path, "4096", "0", &err);
	cr_expect(rc == -1 && err == EAGAIN, "node B locked the holder's bytes (rc %lld errno %lld)",
		  rc, err);

	/* Node B's I/O runs under node A's whole-file lock, and takes the
	 * cluster grant from node A. */
	rs_run(&r, (char *[]){ PROBE, "pwrite", path, "1048576", "100", NULL }, cb.env, 1, RETURN_S);
	cr_log_info("node B pwrite: %d %s", r.status, r.out);
	if (r.status != 0) {
		/* Seen twice beside a second make test and not reproduced
		 * alone: leave the next one its two nodes' listings. */
		static struct rs_run l;

		for (int n = 0; n < 2; n++) {
			const char *shm = strchr((n ? cb : ca).shm, '=') + 1;

			rs_run(&l, (char *[]){ RS_BUILD_DIR "/rangeshim", "locks", "--shm",
					       (char *)shm, NULL }, NULL, 0, 15);
			cr_log_error("node %c while B's write was stuck: %s", 'A' + n, l.out);
		}
	}
	cr_expect_eq(r.status, 0, "node B's write did not return under node A's lock: %s", r.out);
	cr_expect_eq(rs_field(r.out, "rc"), 100);

	/* The holder pins again, and keeps its lock. */
	touch(path, ".go");
	cr_assert(rs_bg_wait_for(&hold, "again\n", 10000), "the holder's second write: %s",
		  hold.out);
	cr_expect_eq(rs_field(hold.out, "again"), 100, "holder: %s", hold.out);
	rc = trylock("ol", 'a', path, "0", "100", &err);
	cr_expect(rc == -1 && err == EAGAIN, "the holder lost its lock at its second pin "
		  "(another process of node A got it: rc %lld errno %lld)", rc, err);
	rc = trylock("ol", 'b', path, "0", "100", &err);
	cr_expect(rc == -1 && err == EAGAIN, "the holder lost its lock at its second pin "
		  "(node B got it: rc %lld errno %lld)", rc, err);

	touch(path, ".stop");
	cr_expect_eq(rs_bg_finish(&hold, 10000), 0, "holder: %s", hold.out);
	rc = trylock("ol", 'b', path, "0", "0", &err);
	cr_expect_eq(rc, 0, "the bytes stayed locked after the holder ended (errno %lld)", err);
	kill_agents("ol");
	unlink(go);
	unlink(stop);
	unlink(path);
	unlink_tables("ol");
}

/* How many threads pid runs (/proc/PID/status), or -1. */
static int threads_of(pid_t pid)
{
	char p[64], line[256];
	int n = -1;
	FILE *f;

	snprintf(p, sizeof p, "/proc/%d/status", (int)pid);
	f = fopen(p, "r");
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "Threads: %d", &n) == 1)
			break;
	if (f)
		fclose(f);
	return n;
}

/*
 * A node's agent never exits idle while it holds a file.  Node A's agent
 * runs in the foreground with libstall_stat.so, which stops its poller in
 * the middle of its first tick (after the tick has counted the agent's
 * files: none yet), as a loaded machine does at random; meanwhile a
 * process of A writes a file (its pin opens the file in the agent, takes
 * the cluster grant, and ends: the connection is closed) and keeps it
 * open, its node grant cached.  Then the tick goes on.  Node B's write of
 * the file must return: A's agent gives the grant back.  Before, the
 * tick went on from its stale count ("no file") and its stale clock, read
 * before the pin (now - last activity wrapped round: "idle for ages"),
 * and the agent exited holding the grant; the holder's copy of the
 * agent's description kept the lock, no agent of A was left to give it
 * back, and B waited for ever (own_locks_shared failed so, 3 runs in 10
 * beside a second `make test`).  Control: the rig checks that the tick
 * was stopped before the pin and let go only after the pin's connection
 * was gone; run on the agent before the fix, B's write never returns.
 */
Test(cluster_adv, agent_idle_exit_race, .timeout = 120)
{
	char dir[PATH_MAX], f0[PATH_MAX + 8], until[PATH_MAX + 8], shm[96];
	static char pre[PATH_MAX + 16], spath[PATH_MAX + 16], suntil[PATH_MAX + 24];
	static struct rs_run r;
	struct rs_bg ag, hold;
	struct cenv ca, cb;
	int n = -1;

	snprintf(dir, sizeof dir, "/dev/shm/rs-cadv-ie.%d", (int)getpid());
	snprintf(f0, sizeof f0, "%s/f0", dir);
	snprintf(until, sizeof until, "%s.go", dir);
	snprintf(shm, sizeof shm, "/rs-cadv-ie-a.%d", (int)getpid());
	snprintf(pre, sizeof pre, "LD_PRELOAD=%s", RS_BUILD_DIR "/tests/helpers/libstall_stat.so");
	snprintf(spath, sizeof spath, "RS_STALL_PATH=/dev/shm%s", shm);
	snprintf(suntil, sizeof suntil, "RS_STALL_UNTIL=%s", until);
	unlink(until);
	cr_assert_eq(mkdir(dir, 0700), 0, "%s: %s", dir, strerror(errno));
	cenv(&ca, "ie", 'a', "cluster");
	cenv(&cb, "ie", 'b', "cluster");
	rs_bg_start_env(&ag, (const char *const[]){ pre, spath, suntil, NULL }, 0,
			(char *[]){ RS_BUILD_DIR "/rangeshim", "agent", "--shm", shm, "--foreground",
				    NULL });
	cr_assert(rs_bg_wait_for(&ag, "stall: begin", 10000),
		  "rig: node A's agent's poller was not stopped in its tick: %s", ag.out);
	start(&hold, ca.env, (char *[]){ PROBE, "many", dir, "1", "60", NULL });
	cr_assert(rs_bg_wait_for(&hold, "verdict=", RETURN_S * 1000),
		  "node A's write did not return: %s / agent: %s", hold.out, ag.out);
	cr_expect_eq(rs_field(hold.out, "rc"), 0, "node A's write: %s", hold.out);
	/* The pin's connection gone (its thread ended): left are the main
	 * thread, the poller (stopped) and the file's poller. */
	for (int i = 0; i < 1000 && (n = threads_of(ag.pid)) > 3; i++)
		usleep(10000);
	cr_log_info("agent_idle_exit_race: agent threads %d before the tick goes on", n);
	touch(dir, ".go");
	cr_assert(rs_bg_wait_for(&ag, "stall: end", 10000), "rig: the tick was not let go: %s",
		  ag.out);

	rs_run(&r, (char *[]){ PROBE, "pwrite", f0, "0", "100", NULL }, cb.env, 1, RETURN_S);
	rs_bg_wait_for(&ag, "\n\n", 200);	/* what the agent said meanwhile */
	cr_log_info("agent_idle_exit_race: node B's write: %d %s; node A's agent: %s", r.status,
		    r.out, ag.out);
	cr_expect(r.status == 0 && rs_field(r.out, "rc") == 100,
		  "node B's write did not return while node A's process held the file "
		  "(status %d: %s); node A's agent said: %s", r.status, r.out, ag.out);

	kill(hold.pid, SIGKILL);
	rs_bg_finish(&hold, 0);
	rs_bg_finish(&ag, 0);	/* never prints a verdict: killed */
	kill_agents("ie");
	unlink(until);
	rs_rm_rf(dir);
	unlink_tables("ie");
}

/*
 * A node whose agent is gone keeps other nodes waiting, and they say why.
 * A process of node A holds a whole-file lock and writes (its pin brings
 * a copy of the agent's description; its node grant stays cached); A's
 * agent is SIGKILLed.  The copy keeps the cluster lock (so a call still
 * inside it would stay excluded), and no agent of A is left to give it
 * back: node B's write waits, as fail safe wants, but it must say so
 * within 30 s, in one line that another node holds the range and that a
 * gone agent's lock stays with its node's processes until one of them
 * needs a new grant, or they close the file or exit (it was silent).
 * The holder's second write needs no pin (its cached grant covers it),
 * so the lock stays; once the holder exits, its copy goes with it, and
 * B's write returns.
 */
Test(cluster_adv, agent_killed_says_why, .timeout = 120)
{
	char path[PATH_MAX], go[PATH_MAX + 8], stop[PATH_MAX + 8];
	struct rs_bg hold, b;
	struct cenv ca, cb;
	pid_t ag[8];
	int n, said;

	snprintf(path, sizeof path, "/dev/shm/rs-cadv-ak.%d", (int)getpid());
	snprintf(go, sizeof go, "%s.go", path);
	snprintf(stop, sizeof stop, "%s.stop", path);
	unlink(go);
	unlink(stop);
	make_file(path, 1 << 21);
	cenv(&ca, "ak", 'a', "cluster");
	cenv(&cb, "ak", 'b', "cluster");
	start(&hold, ca.env, (char *[]){ PROBE, "ownlock", path, "whole", "90", NULL });
	cr_assert(rs_bg_wait_for(&hold, "held", RETURN_S * 1000),
		  "the holder's write did not return: %s", hold.out);
	n = rs_node_agents("cadv", "ak", 'a', ag, 8);
	cr_assert_eq(n, 1, "node A's agents after the holder's write: %d", n);
	cr_assert_eq(kill(ag[0], SIGKILL), 0);
	for (int i = 0; i < 500 && kill(ag[0], 0) == 0; i++)
		usleep(10000);

	start(&b, cb.env, (char *[]){ PROBE, "pwrite", path, "1048576", "100", NULL });
	said = rs_bg_wait_for(&b, "another node holds", RETURN_S * 1000);
	cr_log_info("agent_killed_says_why: node B's write while A has no agent: %s", b.out);
	cr_expect(said, "node B's write waited without saying why: %s", b.out);
	cr_expect(!strstr(b.out, "verdict="), "rig: node B's write returned while node A's "
		  "dead agent's lock was kept: %s", b.out);

	/* The holder writes inside its cached grant and exits: its copy
	 * goes, and the lock with it. */
	touch(path, ".go");
	touch(path, ".stop");
	cr_expect_eq(rs_bg_finish(&hold, RETURN_S * 1000), 0, "holder: %s", hold.out);
	cr_expect_eq(rs_field(hold.out, "again"), 100, "holder: %s", hold.out);
	cr_expect(rs_bg_wait_for(&b, "verdict=", RETURN_S * 1000),
		  "node B's write did not return after node A's holder exited: %s", b.out);
	cr_expect_eq(rs_field(b.out, "rc"), 100, "node B's write: %s", b.out);
	rs_bg_finish(&b, 10000);
	kill_agents("ak");
	unlink(go);
	unlink(stop);
	unlink(path);
	unlink_tables("ak");
}

#define SQLITE3 "/usr/bin/sqlite3"

/*
 * SQLite end to end: it locks its database with fcntl (bytes at 1 GiB,
 * whole-file reads of the lock state) and writes pages under those
 * locks.  Two processes on node A and one on node B insert 50 rows each,
 * one transaction a row, with a busy timeout; all three must finish, no
 * insert may fail, and the database must hold 150 rows and pass its
 * integrity check.  On e284bb3 the agent's grants covered SQLite's lock
 * bytes: every writer failed with "database is locked".
 */
Test(cluster_adv, sqlite, .timeout = 180)
{
	char path[PATH_MAX], sql[8192];
	static struct rs_run r;
	static struct rs_bg w[3];
	static const char nodes[] = { 'a', 'a', 'b' };
	struct cenv c[3];
	size_t used;

	if (access(SQLITE3, X_OK) != 0)
		cr_skip_test(SQLITE3 " is not installed");
	snprintf(path, sizeof path, "/dev/shm/rs-cadv-sq.%d", (int)getpid());
	unlink(path);
	rs_run(&r, (char *[]){ SQLITE3, path, "create table t(a integer, w integer);", NULL },
	       (const char *[]){ NULL }, 0, RETURN_S);
	cr_assert_eq(r.status, 0, "create: %s", r.out);
	for (int k = 0; k < 3; k++) {
		used = 0;
		for (int i = 0; i < 50; i++)
			used += (size_t)snprintf(sql + used, sizeof sql - used,
						 "insert into t values(%d, %d);", i, k);
		snprintf(sql + used, sizeof sql - used,
			 "select 'verdict=' || count(*) from t where w = %d;", k);
		cenv(&c[k], "sq", nodes[k], "cluster");
		start(&w[k], c[k].env, (char *[]){ SQLITE3, "-bail", "-cmd", ".timeout 30000", path,
						    sql, NULL });
	}
	for (int k = 0; k < 3; k++) {
		int st = rs_bg_finish(&w[k], 90000);

		cr_log_info("sqlite writer %d (node %c): %d %s", k, nodes[k], st, w[k].out);
		cr_expect_eq(st, 0, "writer %d (node %c) failed or hung: %s", k, nodes[k], w[k].out);
		cr_expect_eq(rs_field(w[k].out, "verdict"), 50, "writer %d: %s", k, w[k].out);
	}
	rs_run(&r, (char *[]){ SQLITE3, path, "select 'rows=' || count(*) from t; pragma "
			       "integrity_check;", NULL }, (const char *[]){ NULL }, 0, RETURN_S);
	cr_expect_eq(rs_field(r.out, "rows"), 150, "%s", r.out);
	cr_expect(strstr(r.out, "\nok") != NULL, "integrity check: %s", r.out);
	kill_agents("sq");
	unlink(path);
	unlink_tables("sq");
}

/*
 * DEFECT (fixed: the agent falls back to a read-only description and
 * read locks, agent.c ro_lock_fn): a cluster file the user may read but
 * not write
 * (input data sets, mode 0444, another user's file) cannot be read in
 * cluster scope: the agent reopens the file O_RDWR to own write locks,
 * fails with EACCES, answers the pin -EACCES, and rs_cluster_pin retries
 * every 20 ms for ever, saying once "the node's agent did not answer a
 * pin (it may have died)", which is not why.  Observed: the pread never
 * returns (killed after 10 s); without cluster scope it returns 100.
 * Now the agent keeps a read-only description for such files and holds
 * read (F_RDLCK) cluster grants on it, admitting only reads
 * (unwritable_write).
 */
Test(cluster_adv, unwritable_file, .timeout = 60)
{
	char path[PATH_MAX], uid[32];
	long long rc, e, ms;
	struct cenv c;
	static struct rs_run r;

	snprintf(path, sizeof path, "/dev/shm/rs-cadv-ro.%d", (int)getpid());
	make_file(path, 4096);
	if (geteuid() == 0)
		snprintf(uid, sizeof uid, "CADV_UID=65534");	/* read as nobody */
	else
		cr_assert_eq(chmod(path, 0444), 0);
	/* Control: node scope reads it at once (as the same user). */
	cenv(&c, "ro", 'a', "node");
	c.env[3] = geteuid() == 0 ? uid : NULL;
	c.env[4] = NULL;
	rs_run(&r, (char *[]){ PROBE, "pread", path, "0", "100", NULL }, c.env, 1, RETURN_S);
	cr_log_info("unwritable node: %d %s", r.status, r.out);
	cr_assert_eq(r.status, 0);
	cr_expect_eq(rs_field(r.out, "rc"), 100);
	cenv(&c, "ro", 'a', "cluster");
	c.env[3] = geteuid() == 0 ? uid : NULL;
	c.env[4] = NULL;
	rs_run(&r, (char *[]){ PROBE, "pread", path, "0", "100", NULL }, c.env, 1, RETURN_S);
	cr_log_info("unwritable cluster: %d %s", r.status, r.out);
	cr_expect_eq(r.status, 0, "cluster scope: a read of a read-only file did not return in 30 s");
	cr_expect_eq(rs_field(r.out, "rc"), 100);
	(void)rc;
	(void)e;
	(void)ms;
	kill_agents("ro");
	unlink(path);
	unlink_tables("ro");
}

/*
 * The other half of unwritable_file: the agent holds only read locks on a
 * file it could open only read-only, and a read lock does not exclude
 * other nodes' readers, so a write there (it can come only through a
 * descriptor opened while the user could write) must not run.  The
 * process opens the file read-write, makes it 0444, reads (the agent
 * opens it read-only), then writes: the write fails with EIO, says why in
 * one line, and writes nothing.  Control: node scope, the same steps,
 * the write returns 100 (the real result; the shim has nothing to refuse
 * there), and the bytes land.
 */
static void rowrite_run(const char *scope, struct rs_run *r)
{
	char path[PATH_MAX], uid[32];
	struct cenv c;

	snprintf(path, sizeof path, "/dev/shm/rs-cadv-row.%d", (int)getpid());
	make_file(path, 4096);
	cenv(&c, "row", 'a', scope);
	if (geteuid() == 0) {
		/* read and written as nobody, who owns the file */
		cr_assert_eq(chown(path, 65534, 65534), 0);
		snprintf(uid, sizeof uid, "CADV_UID=65534");
		c.env[3] = uid;
	}
	rs_run(r, (char *[]){ PROBE, "rowrite", path, NULL }, c.env, 1, RETURN_S);
	cr_log_info("rowrite %s: %d %s", scope, r->status, r->out);
}

static int first_byte(void)
{
	char path[PATH_MAX], b = 0;
	int fd;

	snprintf(path, sizeof path, "/dev/shm/rs-cadv-row.%d", (int)getpid());
	fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, &b, 1, 0), 1);
	close(fd);
	unlink(path);
	return b;
}

Test(cluster_adv, unwritable_write, .timeout = 60)
{
	static struct rs_run r;

	rowrite_run("node", &r);
	cr_assert_eq(r.status, 0);
	cr_expect_eq(rs_field(r.out, "rrc"), 100);
	cr_expect_eq(rs_field(r.out, "rc"), 100, "control: node scope's write did not write");
	cr_expect_eq(first_byte(), 'a', "control: node scope's write did not land");
	rowrite_run("cluster", &r);
	cr_assert_eq(r.status, 0, "cluster scope: read-then-write of a read-only file hung");
	cr_assert(strstr(r.out, "verdict=PASS"), "the probe did not report");
	cr_expect_eq(rs_field(r.out, "rrc"), 100, "the read of the read-only file failed");
	cr_expect_eq(rs_field(r.out, "rc"), -1, "the write on a read-locked file ran");
	cr_expect_eq(rs_field(r.out, "errno"), EIO);
	cr_expect(strstr(r.out, "holds it read-only"), "no line says why the write failed");
	cr_expect_eq(first_byte(), 0, "the refused write changed the file");
	kill_agents("row");
	unlink_tables("row");
}

/*
 * DEFECT (fixed: agent.c make_room): the agent serves at most MAX_FILES
 * (256) files, and
 * keeps a file while any node grant of the node is on it (cached node
 * grants stay while the file is open).  A process that keeps 300 cluster
 * files open and writes each once hangs at the 257th: get_file finds no
 * slot, the pin is answered -EACCES, and the process retries for ever.
 * Observed: not done after 20 s; node scope: done.  Now a full table
 * forgets the least recently pinned file with no pin in progress (its
 * give-back drains, so the cached node grants go first); only a table
 * whose every file has a pin in progress waits, with a line.
 */
Test(cluster_adv, many_files, .timeout = 120 * RS_SLOW)
{
	char *dir = rs_make_base("/dev/shm", "rs-cadv-many.");
	long long rc, e, ms;

	/* A bound for a hang, not a speed: 300 pins took over 20 s under
	 * TSan on a loaded machine. */
	cr_assert_eq(probe("many", "node", 1, 30 * RS_SLOW,
			   (char *[]){ PROBE, "many", dir, "300", NULL }, &rc, &e, &ms), 0);
	cr_expect_eq(rc, 0);
	rs_rm_rf(dir);
	cr_assert_eq(mkdir(dir, 0700), 0);
	cr_expect_eq(probe("many", "cluster", 1, 30 * RS_SLOW,
			   (char *[]){ PROBE, "many", dir, "300", NULL }, &rc, &e, &ms), 0,
		     "cluster scope: 300 open files were not written in %d s", 30 * RS_SLOW);
	cr_expect_eq(rc, 0);
	kill_agents("many");
	rs_remove_bases();
	unlink_tables("many");
}

/*
 * DEFECT (fixed: the copy table grows, cluster.c pfile_keep): the process
 * kept copies of the agent's descriptions in a table of NPFILE (64) slots (cluster.c, pfile_keep);
 * the 65th file's copy is closed at once.  Those copies are what keeps an
 * OFD lock alive under a running call when the agent dies (design.md (i),
 * "Agent crash").  Observed: a process with 70 cluster files open, each
 * written once (node grants cached), and its agent SIGKILLed: files 0-63
 * stay locked, 64-69 are unlocked, while the process still holds node
 * grants there and may write through the fast path as another node takes
 * the range.  Control: file 0 is still locked after the kill, and every
 * file was locked before it.  Now a copy is closed only once an agent has
 * adopted it (drained and unlocked it); the table grows on the slow path.
 */
Test(cluster_adv, copies_beyond_64, .timeout = 90)
{
	char *dir = rs_make_base("/dev/shm", "rs-cadv-cp.");
	char f[PATH_MAX];
	static struct rs_bg b;
	struct cenv c;
	pid_t ag[8];
	int n;

	cenv(&c, "cp", 'a', "cluster");
	start(&b, c.env, (char *[]){ PROBE, "many", dir, "70", "20", NULL });
	cr_assert(rs_bg_wait_for(&b, "verdict=PASS", 30000), "writer: %s", b.out);
	for (int i = 0; i < 70; i++) {
		snprintf(f, sizeof f, "%s/f%d", dir, i);
		cr_assert(locked_by_anyone(f), "file %d not locked by the agent", i);
	}
	n = agents_of("cp", 'a', ag, 8);
	cr_assert_eq(n, 1, "node A has %d agents", n);
	cr_assert_eq(kill(ag[0], SIGKILL), 0);
	usleep(300000);
	snprintf(f, sizeof f, "%s/f0", dir);
	cr_expect(locked_by_anyone(f), "control: file 0 lost its lock with the agent");
	for (int i = 64; i < 70; i++) {
		snprintf(f, sizeof f, "%s/f%d", dir, i);
		cr_expect(locked_by_anyone(f),
			  "file %d lost its cluster lock with the agent while the process holds "
			  "a node grant on it", i);
	}
	kill(b.pid, SIGKILL);
	rs_bg_finish(&b, 1000);
	kill_agents("cp");
	rs_remove_bases();
	unlink_tables("cp");
}

/* Node-table name of node `node` of test, for a probe's environment. */
static void node_of(struct cenv *c, const char *test, char node)
{
	cenv(c, test, node, "cluster");
}

/*
 * Stop pid where it is inside its pwrite: a stop lands on the return from
 * the system call, before the shim releases, unless the process was
 * between calls (preempted in user space on a loaded machine).  The
 * kernel names the call a stopped task was in (/proc/PID/syscall, 18 is
 * pwrite64 on x86-64); otherwise let it run a moment and try again.
 * Returns whether it is stopped inside a pwrite.
 */
static int stop_in_pwrite(pid_t pid)
{
	for (int attempt = 0; attempt < 50; attempt++) {
		long nr;

		if (kill(pid, SIGSTOP) != 0)
			return 0;
		for (int i = 0; i < 200; i++) {	/* until it is stopped */
			char sp[64], st[512];
			FILE *f;
			char *c;

			snprintf(sp, sizeof sp, "/proc/%d/stat", (int)pid);
			f = fopen(sp, "r");
			if (!f)
				return 0;
			c = fgets(st, sizeof st, f) ? strrchr(st, ')') : NULL;
			fclose(f);
			if (c && c[1] == ' ' && c[2] == 'T')
				break;
			usleep(5000);
		}
		nr = rs_proc_syscall(pid);
#ifdef __x86_64__
		if (nr == SYS_pwrite64)
			return 1;
#else
		if (nr >= 0)
			return 1;
#endif
		kill(pid, SIGCONT);
		usleep(20000);
	}
	return 0;
}

/*
 * One round of stopped_holder_other_file: node A holds Y (a process keeps
 * it open, idle) and streams 64 MiB pwrites to X; with stop, the streamer
 * is SIGSTOPped (inside a call, so inside its node grant: the stop lands
 * on the return from the write, before the shim releases).  Node B then
 * asks for X (it must wait: fail-safe) and for Y.  Returns whether B's
 * write of Y finished within RETURN_S; *bx whether B's write of X did.
 */
static int stopped_round(const char *test, int stop, int *bx)
{
	char dir[PATH_MAX], x[PATH_MAX + 8];
	static struct rs_bg hy, w, b;
	static struct rs_run r;
	struct cenv ca, cb;
	int ok;

	snprintf(dir, sizeof dir, "/dev/shm/rs-cadv-%s-%d.%d", test, stop, (int)getpid());
	snprintf(x, sizeof x, "%s/x", dir);
	cr_assert_eq(mkdir(dir, 0700), 0);
	make_file(x, 1 << 20);
	node_of(&ca, test, 'a');
	node_of(&cb, test, 'b');
	start(&hy, ca.env, (char *[]){ PROBE, "many", dir, "1", "30", NULL });	/* dir/f0 = Y */
	cr_assert(rs_bg_wait_for(&hy, "verdict=", 10000), "Y holder: %s", hy.out);
	start(&w, ca.env, (char *[]){ PROBE, "stream", x, "64", "30", NULL });
	usleep(1000000);
	if (stop && !stop_in_pwrite(w.pid)) {
		kill(w.pid, SIGKILL);
		kill(hy.pid, SIGKILL);
		rs_bg_finish(&w, 1000);
		rs_bg_finish(&hy, 1000);
		kill_agents(test);
		rs_rm_rf(dir);
		unlink_tables(test);
		cr_skip_test("the streamer was never stopped inside its pwrite in 50 tries "
			     "(a loaded machine)");
	}
	start(&b, cb.env, (char *[]){ PROBE, "pwrite", x, "0", "100", NULL });
	usleep(500000);
	snprintf(x, sizeof x, "%s/f0", dir);
	rs_run(&r, (char *[]){ PROBE, "pwrite", x, "0", "100", NULL }, cb.env, 1, RETURN_S);
	cr_log_info("%s stop=%d: B's write of Y: status %d %s", test, stop, r.status, r.out);
	ok = r.status == 0 && rs_field(r.out, "rc") == 100;
	*bx = rs_bg_wait_for(&b, "verdict=", stop ? 500 : RETURN_S * 1000);
	kill(w.pid, SIGCONT);
	kill(w.pid, SIGKILL);
	kill(hy.pid, SIGKILL);
	rs_bg_finish(&b, 10000);
	rs_bg_finish(&w, 1000);
	rs_bg_finish(&hy, 1000);
	kill_agents(test);
	rs_rm_rf(dir);
	unlink_tables(test);
	return ok;
}

/*
 * DEFECT (fixed: one poller thread per file, agent.c file_poller).  The
 * agent's single poller polled every file in turn and gave grants back
 * inline (tick -> rs_cl_poll -> give_back -> drain), and the drain waits
 * for calls inside the range to end.  So one process stopped (or merely
 * slow) inside a call on file X stalled the poller, and with it every
 * give-back of every other file of the node: another node waited for
 * file Y, which nobody on node A was using, for as long as the process on
 * X was stopped.  Observed before the fix: B's write of Y not done in 5 s
 * (node A's streamer on X SIGSTOPped); 20-30 ms when it is not stopped
 * (control).  B's write of X still waits while the streamer is stopped
 * (it really is inside its grant: expected, fail-safe; the rig checks it).
 */
Test(cluster_adv, stopped_holder_other_file, .timeout = 120)
{
	int bx;

	cr_assert(stopped_round("sh", 0, &bx), "control: B could not write Y with A running");
	cr_assert(bx, "control: B could not write X with A's streamer running");
	cr_expect(stopped_round("sh", 1, &bx),
		  "B's write of an idle file Y of node A hung while a process of A is stopped "
		  "inside a call on another file");
	cr_expect(!bx, "the streamer was not stopped inside its grant (rig): B wrote X");
}

/*
 * DEFECT (fixed: agent.c, list_grants copies, lets go, then sends, and
 * waits for a busy file's cache only until a deadline).  The listing of
 * the agent's cluster grants (`rangeshim locks`, `agent --grants`) held
 * the agent's file table lock while it read each file's cache and while
 * it sent.  A give-back holds a file's cache while it drains the node,
 * which waits for the calls inside the range: with a process of node A
 * stopped inside a call on X and node B asking for X, the listing waited
 * for X for as long as the process was stopped, and every new pin of
 * node A waited for the file table behind it.  Rig check: B's write of X
 * stays blocked (the drain really waits); control: Z's pin before the
 * listing is served.
 */
Test(cluster_adv, locks_while_draining, .timeout = 120)
{
	char dir[PATH_MAX], x[PATH_MAX + 8], z[PATH_MAX + 8], shm[96];
	static struct rs_bg w, b;
	static struct rs_run r, lz;
	struct cenv ca, cb;
	uint64_t t0, t1;

	snprintf(dir, sizeof dir, "/dev/shm/rs-cadv-ld.%d", (int)getpid());
	snprintf(x, sizeof x, "%s/x", dir);
	snprintf(z, sizeof z, "%s/z", dir);
	snprintf(shm, sizeof shm, "/rs-cadv-ld-a.%d", (int)getpid());
	cr_assert_eq(mkdir(dir, 0700), 0);
	make_file(x, 1 << 20);
	make_file(z, 4096);
	node_of(&ca, "ld", 'a');
	node_of(&cb, "ld", 'b');
	start(&w, ca.env, (char *[]){ PROBE, "stream", x, "64", "30", NULL });
	usleep(1000000);
	if (!stop_in_pwrite(w.pid)) {
		kill(w.pid, SIGKILL);
		rs_bg_finish(&w, 1000);
		kill_agents("ld");
		rs_rm_rf(dir);
		unlink_tables("ld");
		cr_skip_test("the streamer was never stopped inside its pwrite in 50 tries "
			     "(a loaded machine)");
	}
	/* Control: node A serves a pin on Z while nobody waits for X.  Made
	 * after the stop, which may take a few tries: Z's grant must still
	 * be cached (not yet given back idle) when the listing runs. */
	rs_run(&lz, (char *[]){ PROBE, "pwrite", z, "0", "100", NULL }, ca.env, 1, RETURN_S);
	cr_assert_eq(rs_field(lz.out, "rc"), 100, "control: A's write of Z: %s", lz.out);
	start(&b, cb.env, (char *[]){ PROBE, "pwrite", x, "0", "100", NULL });
	usleep(500000);
	cr_assert(!rs_bg_wait_for(&b, "verdict=", 500),
		  "rig: B wrote X while A's streamer is stopped inside it: %s", b.out);
	/* Node B's agent may take seconds on a loaded machine to start and
	 * ask for X: list again until node A's agent is seen draining it. */
	for (int i = 0; i < 2 * RETURN_S; i++) {
		t0 = rs_bg_now_ns();
		rs_run(&r, (char *[]){ RS_BUILD_DIR "/rangeshim", "locks", "--shm", shm, NULL },
		       NULL, 0, 15);
		t1 = rs_bg_now_ns();
		if (r.status != 0 || strstr(r.out, "is giving one back"))
			break;
		usleep(500000);
	}
	cr_log_info("locks while draining: status %d in %.0f ms:\n%s", r.status,
		    (double)(t1 - t0) / 1e6, r.out);
	cr_expect_eq(r.status, 0, "`rangeshim locks` of node A did not return: %s", r.out);
	cr_expect(strstr(r.out, "is giving one back"), "no line says X is busy:\n%s", r.out);
	cr_expect(strstr(r.out, " CLUSTER "), "the other file's grant is not listed:\n%s", r.out);
	/* Node A serves a new pin on Z meanwhile (with a listing running
	 * too, as the defect needed it). */
	{
		static struct rs_bg l2;

		rs_bg_start_env(&l2, (const char *const[]){ NULL }, 0, (char *[]){ RS_BUILD_DIR "/rangeshim", "agent",
							  "--grants", "--shm", shm, NULL });
		rs_run(&lz, (char *[]){ PROBE, "pwrite", z, "0", "100", NULL }, ca.env, 1, RETURN_S);
		cr_log_info("A's write of Z while draining X: status %d %s", lz.status, lz.out);
		cr_expect(lz.status == 0 && rs_field(lz.out, "rc") == 100,
			  "node A's write of Z hung behind the listing: %s", lz.out);
		rs_bg_finish(&l2, 10000);
	}
	kill(w.pid, SIGCONT);
	kill(w.pid, SIGKILL);
	rs_bg_finish(&b, 10000);
	rs_bg_finish(&w, 1000);
	kill_agents("ld");
	rs_rm_rf(dir);
	unlink_tables("ld");
}

/*
 * DEFECT (half fixed: the wait is now said, at error level, naming the
 * squatter; the wait itself remains): the agent's rendezvous is an
 * abstract Unix socket
 * whose name anyone can compute (uid and an FNV hash of RANGESHIM_SHM)
 * and anyone can bind.  connect_agent rightly refuses a listener of
 * another uid, but then rs_cluster_pin only spawns an agent (whose bind
 * fails with EADDRINUSE, so it exits 0) and retries for ever; the one
 * line it says is at warning level, below the default log level, so the
 * call hangs without a word.  Any local user can so stop all cluster
 * scope I/O of another.  Observed (as root, squatter uid 65534): the
 * pwrite not done in 8 s; control without the squatter: done at once.
 * Fix: rendezvous where only the user can create it (a socket file in a
 * directory the user owns, mode 0700, checked with lstat, e.g. under
 * $XDG_RUNTIME_DIR or /tmp/rangeshim-UID), and when a listener of another
 * uid answers, say so at error level, naming its uid and pid.
 * Needs root (to be another user); skipped otherwise.  What the test
 * checks now: while squatted, the call does not run (it is killed after
 * 8 s: fail safe, never unlocked), and its output names the squatter's
 * uid and pid in one line.  The rendezvous fix would make it return.
 */
Test(cluster_adv, squatted_socket, .timeout = 60)
{
	char path[PATH_MAX], shm[96];
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	long long rc, e, ms;
	int p[2], len;
	pid_t sq;
	char c;

	if (geteuid() != 0)
		cr_skip_test("needs root, to squat the socket as another user");
	snprintf(path, sizeof path, "/dev/shm/rs-cadv-sqf.%d", (int)getpid());
	make_file(path, 4096);
	/* Control: no squatter. */
	cr_assert_eq(probe("sq", "cluster", 1, RETURN_S, (char *[]){ PROBE, "pwrite", path, "0", "100", NULL },
			   &rc, &e, &ms), 0);
	cr_assert_eq(rc, 100);
	kill_agents("sq");
	snprintf(shm, sizeof shm, "/rs-cadv-sq-a.%d", (int)getpid());
	{
		char tp[PATH_MAX];
		struct stat tst;

		snprintf(tp, sizeof tp, "/dev/shm%s", shm);
		cr_assert_eq(stat(tp, &tst), 0, "the control made no table %s", tp);
		len = rs_ag_name(a.sun_path, sizeof a.sun_path, 0, shm, (uint64_t)tst.st_dev,
				 (uint64_t)tst.st_ino);
	}
	cr_assert_eq(pipe(p), 0);
	sq = fork();
	cr_assert_geq(sq, 0);
	if (sq == 0) {
		int s;

		if (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 ||
		    setresuid(65534, 65534, 65534) < 0)
			_exit(1);
		s = socket(AF_UNIX, SOCK_STREAM, 0);
		if (s < 0 || bind(s, (struct sockaddr *)&a,
				  (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)len)) < 0 ||
		    listen(s, 8) < 0)
			_exit(1);
		if (write(p[1], "k", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(p[1]);
	cr_assert_eq(read(p[0], &c, 1), 1, "the squatter could not bind");
	close(p[0]);
	{
		static struct rs_run r;
		struct cenv cs;
		char want[64];

		cenv(&cs, "sq", 'a', "cluster");
		rs_run(&r, (char *[]){ PROBE, "pwrite", path, "0", "100", NULL }, cs.env, 1, 8);
		cr_log_info("squatted: status %d: %s", r.status, r.out);
		cr_expect(!strstr(r.out, "verdict=PASS"),
			  "a pwrite ran while another user held the agent's socket name");
		snprintf(want, sizeof want, "(uid 65534, pid %d)", (int)sq);
		cr_expect(strstr(r.out, want), "no line names the squatter %s", want);
	}
	kill(sq, SIGKILL);
	waitpid(sq, NULL, 0);
	kill_agents("sq");
	unlink(path);
	unlink_tables("sq");
}

/*
 * One round of carrier_truncated: node A's agent knows FILE (another
 * process wrote it just before, so the pin needs no fd of ours), and the
 * probe, with `nfree` descriptors free, writes it.  Returns the write's
 * rc; *err its errno; *kept whether FILE was still locked after A's agent
 * was SIGKILLed while the probe held its node grant (only asked when the
 * write succeeded; else -1).
 */
static long long trunc_round(const char *test, int nfree, long long *err, int *kept)
{
	char dir[PATH_MAX], f[PATH_MAX + 8], warm[PATH_MAX + 8], go[PATH_MAX + 16], nf[16];
	static struct rs_bg b;
	long long rc, e, ms;
	struct cenv c;
	pid_t ag[8];
	int n;

	snprintf(dir, sizeof dir, "/dev/shm/rs-cadv-%s-%d.%d", test, nfree, (int)getpid());
	snprintf(f, sizeof f, "%s/f", dir);
	snprintf(warm, sizeof warm, "%s/w", dir);
	snprintf(go, sizeof go, "%s.go", f);
	snprintf(nf, sizeof nf, "%d", nfree);
	cr_assert_eq(mkdir(dir, 0700), 0);
	make_file(f, 4096);
	cenv(&c, test, 'a', "cluster");
	start(&b, c.env, (char *[]){ PROBE, "limit", f, warm, nf, "20", NULL });
	cr_assert(rs_bg_wait_for(&b, "ready", 20000), "limited probe: %s", b.out);
	/* The agent learns FILE from another process, which exits (closing
	 * its copy) within the agent's idle time for the file. */
	cr_assert_eq(probe(test, "cluster", 1, 20, (char *[]){ PROBE, "pwrite", f, "0", "100", NULL },
			   &rc, &e, &ms), 0);
	cr_assert_eq(rc, 100);
	close(open(go, O_CREAT | O_WRONLY, 0600));
	cr_assert(rs_bg_wait_for(&b, "verdict=", 20000),
		  "%d free: the write did not return in 20 s: %s", nfree, b.out);
	rc = rs_field(strstr(b.out, "rc="), "rc");
	*err = rs_field(strstr(b.out, "rc="), "errno");
	*kept = -1;
	if (rc == 100) {
		n = agents_of(test, 'a', ag, 8);
		cr_assert_eq(n, 1, "node A has %d agents", n);
		cr_assert_eq(kill(ag[0], SIGKILL), 0);
		usleep(300000);
		*kept = locked_by_anyone(f);
	}
	cr_log_info("%s, %d free: rc=%lld errno=%lld kept=%d (%s)", test, nfree, rc, *err, *kept,
		    b.out);
	kill(b.pid, SIGKILL);
	rs_bg_finish(&b, 1000);
	kill_agents(test);
	rs_rm_rf(dir);
	unlink(go);
	unlink_tables(test);
	return rc;
}

/*
 * DEFECT (fixed: clusteragent.h rs_ag_recv reports MSG_CTRUNC, cluster.c
 * refuses such a pin and fails the call at the descriptor limit).  A
 * process with one free descriptor: the pin's connection takes it, the
 * reply's copy of the agent's description finds no number and the kernel
 * drops it (MSG_CTRUNC), and the pin went ahead without a copy: once the
 * agent died, the node's lock went with it while the process wrote under
 * its cached grant (another node read 1399-2504 of 1625-2945 reads torn).
 * With no free descriptor, the pin retried for ever.
 */
Test(cluster_adv, carrier_truncated, .timeout = 150)
{
	long long rc, e;
	int kept;

	/* Control: room for the pin, a copy is kept, the lock outlives the
	 * agent (the rig sees a copy kept). */
	rc = trunc_round("trc", 3, &e, &kept);
	cr_assert_eq(rc, 100, "control: 3 free descriptors, the write failed (errno %lld)", e);
	cr_assert_eq(kept, 1, "control: the lock went with the agent although a copy was kept");
	rc = trunc_round("tr1", 1, &e, &kept);
	if (rc == 100)
		cr_expect_eq(kept, 1, "one free descriptor: the write went ahead without a copy of "
			     "the agent's description (the lock went with the agent)");
	else
		cr_expect(rc == -1 && e == EMFILE, "one free descriptor: rc %lld errno %lld, "
			  "not EMFILE", rc, e);
	rc = trunc_round("tr0", 0, &e, &kept);
	if (rc == 100)
		cr_expect_eq(kept, 1, "no free descriptor: the write went ahead without a copy");
	else
		cr_expect(rc == -1 && e == EMFILE, "no free descriptor: rc %lld errno %lld, not "
			  "EMFILE", rc, e);
	rs_remove_bases();
}

/* Run seq under scope on node A; its fds= and rc. */
static int seq_round(const char *test, const char *scope, const char *n, long long *rc)
{
	char *dir = rs_make_base("/dev/shm", "rs-cadv-seq.");
	static struct rs_run r;
	struct cenv c;
	int fds;

	cenv(&c, test, 'a', scope);
	/* A bound for a hang (a carrier never given back stops the run at
	 * EMFILE long before it), not a speed verdict: 26 s under TSan alone,
	 * over 60 s beside two other sanitizer runs. */
	rs_run(&r, (char *[]){ PROBE, "seq", dir, (char *)n, "1024", NULL }, c.env, 1,
	       60 * RS_SLOW);
	cr_log_info("%s %s: status %d: %s", test, scope, r.status, r.out);
	cr_assert(r.status == 0 && strstr(r.out, "verdict=PASS"),
		  "%s: %s files one by one under ulimit -n 1024 not done in %d s: %s", scope, n,
		  60 * RS_SLOW, r.out);
	*rc = rs_field(r.out, "rc");
	fds = (int)rs_field(r.out, "fds");
	kill_agents(test);
	rs_remove_bases();
	unlink_tables(test);
	return fds;
}

/*
 * DEFECT (fixed: cluster.c rs_cluster_file_closed, called when a file's
 * last fd closes).  A process kept one copy of the agent's description
 * (a carrier socket) per distinct file for its whole life: opening,
 * writing and closing 1100 files one by one under `ulimit -n 1024`
 * stopped after 1000 files with 1006 descriptors open, retrying a pin
 * for ever; deleted files kept their space.  Now the copies of a file
 * go when it is closed and the process holds no grant on it.
 */
Test(cluster_adv, carriers_released, .timeout = 120 + 120 * RS_SLOW)
{
	long long rc;
	int node_fds, fds;

	node_fds = seq_round("seqn", "node", "1100", &rc);
	cr_assert_eq(rc, 0, "control: node scope failed %lld writes", rc);
	fds = seq_round("seqc", "cluster", "1100", &rc);
	cr_expect_eq(rc, 0, "cluster scope: %lld of 1100 writes failed", rc);
	cr_expect_leq(fds, node_fds + 2, "cluster scope ended with %d descriptors open, node "
		      "scope with %d", fds, node_fds);
}

/*
 * LIMITATION (stated in limitations.md, "The application's own locks on
 * cluster files"): lock calls wholly past 2^61 land among the agents'
 * lock words.  This checks that the statement is what happens, so that
 * the documentation and the byte spaces cannot drift apart.
 */
Test(cluster_adv, own_lock_past_2_61, .timeout = 60)
{
	static struct rs_run r;
	char path[PATH_MAX];
	struct cenv c;

	shm_file(path, "hi");
	cenv(&c, "hi", 'a', "node");
	rs_run(&r, (char *[]){ PROBE, "highown", path, NULL }, c.env, 1, 20);
	cr_log_info("node scope: %s", r.out);
	cr_assert(strstr(r.out, "verdict=PASS"), "control: %s", r.out);
	cr_assert_eq(rs_field(r.out, "gtype"), F_UNLCK, "control: node scope found a lock: %s",
		     r.out);
	cr_assert_eq(rs_field(r.out, "trc"), 0, "control: %s", r.out);
	cr_assert_eq(rs_field(r.out, "rc"), 0, "control: %s", r.out);
	unlink_tables("hi");
	cenv(&c, "hi", 'a', "cluster");
	rs_run(&r, (char *[]){ PROBE, "highown", path, NULL }, c.env, 1, 20);
	cr_log_info("cluster scope: %s", r.out);
	cr_assert(strstr(r.out, "verdict=PASS"), "%s", r.out);
	cr_expect_eq(rs_field(r.out, "gtype"), F_WRLCK, "%s", r.out);
	cr_expect_eq(rs_field(r.out, "gpid"), -1, "%s", r.out);
	cr_expect(rs_field(r.out, "trc") == -1 && rs_field(r.out, "terr") == EACCES, "%s", r.out);
	cr_expect(rs_field(r.out, "rc") == -1 && rs_field(r.out, "errno") == EAGAIN, "%s", r.out);
	end_test("hi", path);
}
