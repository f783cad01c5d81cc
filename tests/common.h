/*
 * Shared by the Criterion suites: run a helper program, with the shim
 * preloaded in the child's environment only (never into the runner, which
 * forks a worker per test), and capture its output.
 */
#ifndef RS_TESTS_COMMON_H
#define RS_TESTS_COMMON_H

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <dirent.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <mntent.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nodelock.h"

#ifndef RS_BUILD_DIR
#define RS_BUILD_DIR "build"
#endif

/*
 * Criterion under TSan: BoxFort picks its arena addresses with rand_r()
 * inside TSan's shadow window, so the runner usually dies at start
 * ("Could not initialize inheritable arena"; Criterion issue #274).  This
 * rand_r steers those addresses into application memory.  TSan builds of
 * the suites only.
 */
#if defined(__SANITIZE_THREAD__) && defined(__x86_64__) && !defined(RS_TSAN_RAND_R)
#define RS_TSAN_RAND_R 1
int rand_r(unsigned *seed);
int rand_r(unsigned *seed)
{
	*seed = *seed * 1103515245u + 12345u;
	return (int)(0x350000u + ((*seed >> 8) % 0x18000u));
}
#endif

/*
 * Sanitized programs start, fork and run several times slower: bounds on
 * how long a probe may take (never a verdict on speed) grow by this.
 */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define RS_SLOW 3
#else
#define RS_SLOW 1
#endif

/*
 * Samples under load.  A leg that gathered too few samples to mean
 * anything (a loaded machine reads a few dozen blocks where an idle one
 * reads thousands), or a control that never tore, is run again, twice as
 * long each time, until it has run RS_STRETCH times its first length;
 * if it still has too few, the test is skipped with its counts.  It is
 * never failed for that: a busy machine is no defect, and timing never
 * decides a verdict.  Usage:
 *   for (int k = 1; ; k *= 2) { run the leg for k * its length;
 *           if (enough || k >= RS_STRETCH) break; }
 *   rs_need(have, need, "what: counts ...");
 */
#define RS_STRETCH 8
#define rs_need(have, need, ...)                                              \
	do {                                                                  \
		if ((long long)(have) < (long long)(need))                    \
			cr_skip_test(__VA_ARGS__);                            \
	} while (0)

#define RS_LIB RS_BUILD_DIR "/librangeshim.so"
#define RS_HELPER(name) RS_BUILD_DIR "/tests/helpers/" name
#define RS_EXAMPLE(name) RS_BUILD_DIR "/examples/" name

struct rs_run {
	int status;         /* exit code, or 128 + signal, or -1 on timeout */
	char out[65536];    /* stdout and stderr, interleaved, NUL-terminated */
};

/*
 * Run argv (argv[0] is a path).  env is a NULL-terminated list of
 * "NAME=VALUE" added to the child's environment; preload adds the shim.
 * Kills the child after timeout_s seconds.
 */
static inline int rs_run(struct rs_run *r, char *const argv[], const char *const env[],
			 int preload, int timeout_s)
{
	int pipefd[2];
	size_t used = 0;
	pid_t pid;
	int st;
	struct timespec t0, t1;

	r->status = -1;
	r->out[0] = '\0';
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		dup2(pipefd[1], 1);
		dup2(pipefd[1], 2);
		unsetenv("LD_PRELOAD");
		for (int i = 0; env && env[i]; i++)
			putenv((char *)env[i]);
		if (preload)
			setenv("LD_PRELOAD", RS_LIB, 1);
		execv(argv[0], argv);
		fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(pipefd[1]);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct pollfd p = { pipefd[0], POLLIN, 0 };
		ssize_t n;

		clock_gettime(CLOCK_MONOTONIC, &t1);
		if (t1.tv_sec - t0.tv_sec > timeout_s) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			close(pipefd[0]);
			r->status = -1;
			return -1;
		}
		if (poll(&p, 1, 200) <= 0)
			continue;
		n = read(pipefd[0], r->out + used, sizeof(r->out) - 1 - used);
		if (n <= 0)
			break;
		used += (size_t)n;
		if (used == sizeof(r->out) - 1)
			used = 0;	/* keep the tail: the summary lines come last */
		r->out[used] = '\0';
	}
	close(pipefd[0]);
	waitpid(pid, &st, 0);
	r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	return r->status;
}

/* The system call pid is in, or has stopped in, as the kernel names it
 * (/proc/PID/syscall); -1 if it is running or cannot be read. */
static inline long rs_proc_syscall(pid_t pid)
{
	char path[64], buf[256];
	long nr = -1;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%d/syscall", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (fgets(buf, sizeof buf, f) && strncmp(buf, "running", 7) != 0)
		nr = strtol(buf, NULL, 10);
	fclose(f);
	return nr;
}

/* The value of "key=N" in s, or -1. */
static inline long long rs_field(const char *s, const char *key)
{
	size_t k = strlen(key);

	for (const char *p = s; (p = strstr(p, key)) != NULL; p += k) {
		if ((p == s || p[-1] == ' ' || p[-1] == '\n') && p[k] == '=')
			return strtoll(p + k + 1, NULL, 10);
	}
	return -1;
}

/* ---- files and directories --------------------------------------------- */

static inline int rs_rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(p);
	return 0;
}

/* rm -rf dir, ignoring errors. */
static inline void rs_rm_rf(const char *dir)
{
	nftw(dir, rs_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* The whole file, NUL-terminated (malloc'd), or NULL; its length in *len. */
static inline char *rs_read_file(const char *path, long *len)
{
	FILE *f = fopen(path, "r");
	char *s;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	s = calloc(1, (size_t)n + 1);
	if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
		free(s);
		s = NULL;
	}
	fclose(f);
	if (len)
		*len = n;
	return s;
}

/* "key": N in a flat JSON object, or -1. */
static inline long long rs_json_num(const char *js, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = js ? strstr(js, pat) : NULL;
	if (!p)
		return -1;
	return strtoll(p + strlen(pat), NULL, 10);
}

/*
 * Every directory a test makes with rs_make_base(), removed by the suite's
 * .fini (rs_remove_bases) even when an assertion ends the test early (each
 * test runs in its own process).  add == NULL removes them all.
 */
#define RS_MAX_BASES 8
static inline void rs_bases(const char *add)
{
	static char bases[RS_MAX_BASES][PATH_MAX];
	static int nbases;

	if (add) {
		if (nbases < RS_MAX_BASES)
			strcpy(bases[nbases++], add);
		return;
	}
	for (int i = 0; i < nbases; i++)
		rs_rm_rf(bases[i]);
	nbases = 0;
}

static inline void rs_remove_bases(void)
{
	rs_bases(NULL);
}

/* A new directory PARENT/PREFIXXXXXXX (malloc'd), removed at the suite's end. */
static inline char *rs_make_base(const char *parent, const char *prefix)
{
	char *b = malloc(PATH_MAX);

	snprintf(b, PATH_MAX, "%s/%sXXXXXX", parent, prefix);
	cr_assert_not_null(mkdtemp(b), "mkdtemp under %s: %s", parent, strerror(errno));
	rs_bases(b);
	return b;
}

/*
 * "key": N in the stats JSON file at path (its first 8 KiB), or -1; *found
 * (if not NULL) says whether the file could be opened.
 */
static inline long long rs_stats_file_num(const char *path, const char *key, int *found)
{
	char buf[8192];
	FILE *f = fopen(path, "r");
	size_t n;

	if (found)
		*found = f != NULL;
	if (!f)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	return rs_json_num(buf, key);
}

/* ---- skipping tests the file system cannot run ------------------------- */

#define RS_EXT4_MAGIC 0xEF53

/* Is dir on ext4?  The statfs magic is shared by ext2/3/4, so also look
 * the mount up (longest mount point that is a prefix of dir). */
static inline int rs_on_ext4(const char *dir, char *why, size_t whylen)
{
	struct statfs sfs;
	FILE *m;
	struct mntent *e;
	size_t best = 0;
	char fstype[64] = "";

	if (statfs(dir, &sfs) < 0) {
		snprintf(why, whylen, "statfs %s: %s", dir, strerror(errno));
		return 0;
	}
	if (sfs.f_type != RS_EXT4_MAGIC) {
		snprintf(why, whylen, "%s is not ext4 (f_type 0x%lx)", dir, (unsigned long)sfs.f_type);
		return 0;
	}
	m = setmntent("/proc/self/mounts", "r");
	while (m && (e = getmntent(m)) != NULL) {
		size_t k = strlen(e->mnt_dir);

		if (strncmp(dir, e->mnt_dir, k) == 0 &&
		    (dir[k] == '\0' || dir[k] == '/' || k == 1) && k >= best) {
			best = k;
			snprintf(fstype, sizeof(fstype), "%s", e->mnt_type);
		}
	}
	if (m)
		endmntent(m);
	if (fstype[0] && strcmp(fstype, "ext4") != 0) {
		snprintf(why, whylen, "%s is on %s, not ext4", dir, fstype);
		return 0;
	}
	return 1;
}

/* Skip the test unless dir is on ext4. */
static inline void rs_require_ext4(const char *dir)
{
	char why[300];

	if (!rs_on_ext4(dir, why, sizeof(why))) {
		cr_log_info("skipping: %s", why);
		cr_skip_test("%s", why);
	}
}

/* Skip the test unless files under dir can be opened with O_DIRECT. */
static inline void rs_require_direct(const char *dir)
{
	char path[300];
	int fd;

	snprintf(path, sizeof(path), "%s/rs-test-%d-direct-probe", dir, (int)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_DIRECT, 0600);
	if (fd < 0 && errno == EINVAL) {
		cr_log_info("skipping: O_DIRECT is not supported on %s", dir);
		cr_skip_test("O_DIRECT is not supported on %s", dir);
	}
	cr_assert_geq(fd, 0, "open %s: %s", path, strerror(errno));
	close(fd);
	unlink(path);
}

/*
 * A helper program running in the background, its stdout and stderr
 * collected: for tests that act on a process while it runs (stop it,
 * inspect the table).  env_entry ("RANGESHIM_SHM=...") is put into its
 * environment; preload says whether the shim is.
 */
struct rs_bg {
	pid_t pid;
	int fd;
	size_t used;
	char out[16384];
};

static inline uint64_t rs_bg_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Is pid the leader of its session?  A serving agent is (it calls
 * setsid); the starter it forks from, still alive for a moment on a
 * loaded machine, is not. */
static inline int rs_session_leader(const char *pid)
{
	char p[300], buf[512], *close_paren;
	ssize_t len;
	int fd, sid = 0;

	snprintf(p, sizeof p, "/proc/%s/stat", pid);
	fd = open(p, O_RDONLY);
	if (fd < 0)
		return 0;
	len = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (len <= 0)
		return 0;
	buf[len] = '\0';
	/* pid (comm) state ppid pgrp session ... */
	close_paren = strrchr(buf, ')');
	if (!close_paren || sscanf(close_paren + 1, " %*c %*d %*d %d", &sid) != 1)
		return 0;
	return sid == atoi(pid);
}

/* Pids of the `rangeshim agent --shm SHM` processes that serve (cluster
 * scope): not their starters, which exit once the agent is forked. */
static inline int rs_agents_of(const char *want, pid_t *out, int max)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d)) && n < max) {
		char p[300], buf[1024];
		ssize_t len;
		int fd;

		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(p, sizeof p, "/proc/%s/cmdline", e->d_name);
		fd = open(p, O_RDONLY);
		if (fd < 0)
			continue;
		len = read(fd, buf, sizeof buf - 1);
		close(fd);
		if (len <= 0)
			continue;
		buf[len] = '\0';
		/* argv: PATH agent --shm NAME */
		const char *a1 = buf + strlen(buf) + 1;

		if (a1 < buf + len && strcmp(a1, "agent") == 0) {
			const char *a2 = a1 + strlen(a1) + 1, *a3 = a2 + strlen(a2) + 1;

			if (a3 < buf + len && strcmp(a2, "--shm") == 0 && strcmp(a3, want) == 0 &&
			    rs_session_leader(e->d_name))
				out[n++] = (pid_t)atoi(e->d_name);
		}
	}
	if (d)
		closedir(d);
	return n;
}

/* The agents of one test's simulated nodes, whose tables are named
 * "/rs-SUITE-TEST-NODE.PID" (NODE 'a' or 'b'). */
static inline int rs_node_agents(const char *suite, const char *test, char node, pid_t *out,
				 int max)
{
	char want[128];

	snprintf(want, sizeof want, "/rs-%s-%s-%c.%d", suite, test, node, (int)getpid());
	return rs_agents_of(want, out, max);
}

/* Has pid exited: gone (no state to read), or a zombie nobody has
 * reaped yet?  Its locks, descriptors and socket names go at exit,
 * before the zombie. */
static inline int rs_pid_exited(pid_t pid)
{
	char comm[64], state = rs_nt_proc_stat((int32_t)pid, comm, sizeof comm);

	return state == 0 || state == 'Z' || state == 'X';
}

/* SIGKILL both nodes' agents of a test and wait until they have exited
 * (5 s at most): with several sanitizer suites on 2 CPUs a killed agent
 * still held its socket name after the fixed 100 ms this used to wait,
 * and a test that binds that name next failed.  Then a moment more for
 * the kernel to drop their locks, as before. */
static inline void rs_kill_node_agents(const char *suite, const char *test)
{
	pid_t p[16];
	int n = 0;

	for (char node = 'a'; node <= 'b'; node++) {
		int k = rs_node_agents(suite, test, node, p + n, 8);

		for (int i = 0; i < k; i++)
			kill(p[n + i], SIGKILL);
		n += k;
	}
	for (int i = 0, tries = 0; i < n && tries < 500; tries++) {
		if (rs_pid_exited(p[i]))
			i++;
		else
			usleep(10000);
	}
	usleep(100000);
}

/* Start argv in the background with the entries of env (NULL-ended)
 * added to its environment, and the shim if preload. */
static inline void rs_bg_start_env(struct rs_bg *b, const char *const env[], int preload,
				   char *const argv[])
{
	int p[2];

	cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
	b->pid = fork();
	cr_assert_geq(b->pid, 0);
	if (b->pid == 0) {
		dup2(p[1], 1);
		dup2(p[1], 2);
		unsetenv("LD_PRELOAD");
		for (int i = 0; env[i]; i++)
			putenv((char *)env[i]);
		if (preload)
			setenv("LD_PRELOAD", RS_LIB, 1);
		execv(argv[0], argv);
		_exit(127);
	}
	close(p[1]);
	b->fd = p[0];
	b->used = 0;
	b->out[0] = '\0';
}

static inline void rs_bg_start(struct rs_bg *b, char *env_entry, int preload, char *const argv[])
{
	const char *env[] = { env_entry, NULL };

	rs_bg_start_env(b, env, preload, argv);
}

/* Read until needle appears (1), or ms pass or EOF (0). */
static inline int rs_bg_wait_for(struct rs_bg *b, const char *needle, int ms)
{
	uint64_t end = rs_bg_now_ns() + (uint64_t)ms * 1000000ull;

	while (!strstr(b->out, needle)) {
		struct pollfd p = { b->fd, POLLIN, 0 };
		ssize_t n;

		if (rs_bg_now_ns() > end || b->used >= sizeof(b->out) - 1)
			return 0;
		if (poll(&p, 1, 50) <= 0)
			continue;
		n = read(b->fd, b->out + b->used, sizeof(b->out) - 1 - b->used);
		if (n <= 0)
			return 0;
		b->used += (size_t)n;
		b->out[b->used] = '\0';
	}
	return 1;
}

/* Wait for its verdict line, killing it after ms; its exit status (128 +
 * signal if it died), with what it printed in b->out. */
static inline int rs_bg_finish(struct rs_bg *b, int ms)
{
	int st;

	if (!rs_bg_wait_for(b, "verdict=", ms))
		kill(b->pid, SIGKILL);
	waitpid(b->pid, &st, 0);
	rs_bg_wait_for(b, "\n\n", 200);	/* drain what is left */
	close(b->fd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

#endif
