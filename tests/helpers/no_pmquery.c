/*
 * no_pmquery: run a program whose PROCMAP_QUERY ioctls (Linux 6.11) fail,
 * for tests/test_coverage.c: the exit scan of the shim asks the kernel
 * for shared mappings that way, and reads /proc/self/maps as text where
 * the kernel does not know the query.
 *
 *   no_pmquery ENOTTY PROGRAM ARGS...   as a kernel before 6.11 answers
 *   no_pmquery ENOENT PROGRAM ARGS...   "no such mapping" at once: the
 *                                       scan must then find no ring, which
 *                                       shows that it asked the kernel
 *
 * A seccomp filter, kept across the exec, makes every ioctl whose request
 * is the query's fail with that errno; every other call runs.
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

/* _IOWR('f', 17, struct procmap_query), a struct of 104 bytes. */
#define PM_QUERY _IOWR('f', 17, char[104])

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#endif

#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define LOW_WORD 4
#else
#define LOW_WORD 0
#endif

int main(int argc, char **argv)
{
	int err;

	if (argc < 3 || (strcmp(argv[1], "ENOTTY") != 0 && strcmp(argv[1], "ENOENT") != 0)) {
		fprintf(stderr, "usage: no_pmquery ENOTTY|ENOENT PROGRAM [ARGS...]\n");
		return 2;
	}
	err = strcmp(argv[1], "ENOTTY") == 0 ? ENOTTY : ENOENT;
	struct sock_filter f[] = {
#ifdef ARCH
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
#endif
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_ioctl, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
			 offsetof(struct seccomp_data, args[1]) + LOW_WORD),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)PM_QUERY, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ((unsigned)err & SECCOMP_RET_DATA)),
	};
	struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]), .filter = f };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0) {
		/* Said the way cov_probe says what the kernel refuses. */
		printf("skip=seccomp: %s\n", strerror(errno));
		return 0;
	}
	execvp(argv[2], argv + 2);
	perror(argv[2]);
	return 127;
}
