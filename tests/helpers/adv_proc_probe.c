/*
 * adv_proc_probe MODE PATH MS: adversarial rigs for the process-side lock
 * paths (tests/test_adv_proc.c runs each without the shim, the control
 * that must tear, and with it, where nothing may tear).
 *
 * The "cut" modes attack the appenders' end-of-file hint (iolock.h,
 * rs_ap_hint), which is trusted while the file's ap_tgen has not moved:
 * they shrink the file in ways that do not move it.  Four threads append
 * 64 KiB records (one byte value each) through O_APPEND descriptors, two
 * readers pread [0, 256 KiB), where the appends after a cut land.  After
 * every 4 appends (no more are made until then) the main thread cuts the
 * file to 0 while appenders and readers are held off by a pthread rwlock
 * of the rig's own: the cut never races an append or a read, so whatever
 * tears afterwards is an append and a read that the shim let run
 * together.  A read is torn when it ends inside a record
 * or mixes two values in one record.
 *
 *   fopen_w     the cut is fopen(PATH, "w") + fclose in this process
 *               (glibc's internal open(O_TRUNC), which no wrapper sees).
 *   freopen_w   freopen(PATH, "w", stream) + fclose in this process.
 *   cut_noshim  another process without the shim ftruncates (logrotate's
 *               copytruncate, a shell's "> file" in a program not run
 *               under rangeshim).
 *   cut_path    another process under the shim (same table) calls
 *               truncate(PATH, 0) without having the file open.
 *   cut_otrunc  another process under the shim opens PATH with O_TRUNC.
 *   openat2_self  this process opens PATH with O_TRUNC through
 *               syscall(SYS_openat2), which the shim passes on unlocked.
 *   creat_self  this process creat()s PATH.
 *
 * With ADV_NO_STATX=1 in the environment a seccomp filter fails statx
 * with ENOSYS first, as on a kernel or in a container without it: the
 * shim's append re-check then falls back to fstat (iolock.h,
 * rs_fstat_size), which must guard the appends as well.  It adds
 * "nostatx=1" once the filter is seen to work.  ADV_NO_STATX=0 makes the
 * filter answer statx with 0 instead, a success that fills nothing (a
 * seccomp ERRNO of 0, or a supervisor that fakes the call): the shim must
 * not take what is left in its buffer for end of file.
 *
 * Prints "reads=R torn=T writes=W cuts=C".
 *
 * adv_proc_probe cut HOW PATH: the other process of the cut_* modes.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/openat2.h>
#include <linux/seccomp.h>
#include <time.h>
#include <unistd.h>

#include "probe.h"

#define REC (64 * 1024)
#define NAPPEND 4
#define NREAD 2
#define SPAN (4 * REC)

extern char **environ;

static const char *path, *mode, *self;
static _Atomic int stop;
static _Atomic long torn, reads, writes, cuts, since_cut;
#define PER_CUT 4
static pthread_rwlock_t quiet;

/* One pread of [off, off + SPAN): 1 if torn. */
static int check_at(int fd, unsigned char *b, off_t off)
{
	ssize_t r = pread(fd, b, SPAN, off);
	int bad;

	if (r <= 0)
		return 0;
	atomic_fetch_add(&reads, 1);
	bad = probe_records_torn(b, r, (long long)off, SPAN, REC);
	if (bad && getenv("ADV_PROBE_DEBUG"))
		fprintf(stderr, "torn: off=%lld r=%zd\n", (long long)off, r);
	return bad;
}

static void *reader(void *arg)
{
	int fd = open(path, O_RDONLY);
	unsigned char *b = malloc(SPAN);

	(void)arg;
	if (fd < 0 || !b)
		abort();
	while (!atomic_load(&stop)) {
		pthread_rwlock_rdlock(&quiet);
		if (check_at(fd, b, 0))
			atomic_fetch_add(&torn, 1);
		pthread_rwlock_unlock(&quiet);
	}
	free(b);
	close(fd);
	return NULL;
}

static void *appender(void *arg)
{
	long id = (long)arg;
	int fd = open(path, O_WRONLY | O_APPEND);
	char *b = malloc(REC);

	if (fd < 0 || !b)
		abort();
	for (long k = 0; !atomic_load(&stop); k++) {
		memset(b, (int)(1 + id * 50 + k % 50), REC);
		/* Every append lands in [0, SPAN): PER_CUT of them per cut. */
		if (atomic_fetch_add(&since_cut, 1) >= PER_CUT) {
			atomic_fetch_sub(&since_cut, 1);
			usleep(20);
			continue;
		}
		pthread_rwlock_rdlock(&quiet);
		if (write(fd, b, REC) != REC)
			abort();
		pthread_rwlock_unlock(&quiet);
		atomic_fetch_add(&writes, 1);
	}
	free(b);
	close(fd);
	return NULL;
}

/* Run ourselves as "cut HOW PATH", with or without the shim. */
static void cut_by_process(const char *how, int keep_preload)
{
	char *argv[] = { (char *)self, "cut", (char *)how, (char *)path, NULL };
	char *env[256];
	int n = 0, st;
	pid_t pid;

	for (char **e = environ; *e && n < 255; e++)
		if (keep_preload || strncmp(*e, "LD_PRELOAD=", 11) != 0)
			env[n++] = *e;
	env[n] = NULL;
	pid = fork();
	if (pid < 0)
		abort();
	if (pid == 0) {
		execve(self, argv, env);
		_exit(127);
	}
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "cut %s failed: %d\n", how, st);
		abort();
	}
}

static void cut(void)
{
	if (!strcmp(mode, "fopen_w")) {
		FILE *f = fopen(path, "w");

		if (!f)
			abort();
		fclose(f);
	} else if (!strcmp(mode, "freopen_w")) {
		FILE *f = fopen("/dev/null", "r");

		if (!f || !(f = freopen(path, "w", f)))
			abort();
		fclose(f);
	} else if (!strcmp(mode, "openat2_self")) {
		struct open_how how = { .flags = O_WRONLY | O_TRUNC };
		int fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof(how));

		if (fd < 0 || close(fd) < 0)
			abort();
	} else if (!strcmp(mode, "creat_self")) {
		int fd = creat(path, 0600);

		if (fd < 0 || close(fd) < 0)
			abort();
	} else if (!strcmp(mode, "cut_noshim")) {
		cut_by_process("ftruncate", 0);
	} else if (!strcmp(mode, "cut_path")) {
		cut_by_process("truncate", 1);
	} else if (!strcmp(mode, "cut_otrunc")) {
		cut_by_process("otrunc", 1);
	} else {
		fprintf(stderr, "adv_proc_probe: unknown mode %s\n", mode);
		exit(2);
	}
	atomic_fetch_add(&cuts, 1);
}

static int cut_main(const char *how, const char *p)
{
	int fd;

	if (!strcmp(how, "ftruncate")) {
		fd = open(p, O_RDWR);
		return fd < 0 || ftruncate(fd, 0) < 0 || close(fd) < 0;
	}
	if (!strcmp(how, "truncate"))
		return truncate(p, 0) < 0;
	if (!strcmp(how, "otrunc")) {
		fd = open(p, O_WRONLY | O_TRUNC);
		return fd < 0 || close(fd) < 0;
	}
	return 2;
}

#if defined(__x86_64__)
#define PROBE_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define PROBE_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

/* statx fails with err (ENOSYS; 0: "succeeds" without doing anything)
 * from now on, in this process and its children: 1 if it does. */
static int no_statx(int err)
{
#ifdef PROBE_AUDIT_ARCH
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PROBE_AUDIT_ARCH, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_statx, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (unsigned)err),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { sizeof(f) / sizeof(f[0]), f };
	struct statx sx = { .stx_mask = 0xdead };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
		return 0;
	if (!err)
		return syscall(SYS_statx, AT_FDCWD, "/", 0, STATX_SIZE, &sx) == 0 &&
		       sx.stx_mask == 0xdead;
	return syscall(SYS_statx, AT_FDCWD, "/", 0, STATX_SIZE, &sx) < 0 && errno == err;
#else
	return 0;
#endif
}

int main(int argc, char **argv)
{
	int nostatx = 0;
	pthread_t t[NAPPEND + NREAD];
	pthread_rwlockattr_t a;
	double t0, ms;
	int fd;

	if (argc == 4 && !strcmp(argv[1], "cut"))
		return cut_main(argv[2], argv[3]);
	if (argc < 4) {
		fprintf(stderr, "usage: adv_proc_probe MODE PATH MS\n");
		return 2;
	}
	self = argv[0];
	mode = argv[1];
	path = argv[2];
	ms = atof(argv[3]);
	/* Writer preference: the cut must not wait behind a stream of
	 * appends and reads. */
	pthread_rwlockattr_init(&a);
	pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&quiet, &a);
	if (getenv("ADV_NO_STATX"))
		nostatx = no_statx(strcmp(getenv("ADV_NO_STATX"), "0") ? ENOSYS : 0);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		abort();
	close(fd);
	for (long i = 0; i < NAPPEND; i++)
		pthread_create(&t[i], NULL, appender, (void *)i);
	for (int i = 0; i < NREAD; i++)
		pthread_create(&t[NAPPEND + i], NULL, reader, NULL);
	t0 = probe_now();
	while ((probe_now() - t0) * 1000 < ms) {
		while (atomic_load(&writes) < atomic_load(&cuts) * PER_CUT + PER_CUT &&
		       (probe_now() - t0) * 1000 < ms)
			usleep(20);
		pthread_rwlock_wrlock(&quiet);
		cut();
		atomic_store(&since_cut, 0);
		pthread_rwlock_unlock(&quiet);
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < NAPPEND + NREAD; i++)
		pthread_join(t[i], NULL);
	unlink(path);
	printf("reads=%ld torn=%ld writes=%ld cuts=%ld%s\n", atomic_load(&reads), atomic_load(&torn),
	       atomic_load(&writes), atomic_load(&cuts), nostatx ? " nostatx=1" : "");
	return 0;
}
