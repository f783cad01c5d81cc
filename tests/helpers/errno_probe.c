/*
 * errno_probe DIR: make a fixed list of bad-input, edge and ordinary calls
 * on files created in DIR (which must exist and be empty) and print one
 * line per case:
 *
 *     case=<name> ret=<r> errno=<e>
 *
 * errno is reset to 0 before each call and printed only when ret < 0
 * (errno=0 otherwise; posix_fallocate returns its error number as ret).
 * The keep_errno_* cases instead set errno to 12345 before a successful
 * call and print errno as found afterwards: it must still be 12345.
 * sum_* cases print a file's size as ret and an FNV-1a hash of its
 * contents, so that what the successful calls wrote is compared too.
 * The last line is "done cases=N".
 *
 * test_errno.c runs this with and without the shim and requires identical
 * output.  Nothing printed depends on DIR, the pid or the time.  Cases
 * whose arguments the shim itself might dereference (iovec arrays at an
 * unmapped address) run in a forked child, so that a crash there is
 * reported as "ret=signalN" instead of cutting the output short.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/falloc.h>

#ifndef RWF_APPEND
#define RWF_APPEND 0x10
#endif

static int ncases;
static char buf[65536];
static char rbuf[65536];

/* Pointers the compiler cannot see through, so that -Werror does not
 * object to deliberately bad arguments. */
static void *volatile bad1_v = (void *)1;
static void *volatile null_v;
static volatile int intmax_v = INT_MAX;
/* truncate's path is declared nonnull; call it through a plain pointer so
 * that UBSan (make test-asan) lets the deliberate NULL through. */
static int (*volatile truncate_fn)(const char *, off_t) = truncate;

static void report(const char *name, long long r, int e)
{
	printf("case=%s ret=%lld errno=%d\n", name, r, r < 0 ? e : 0);
	ncases++;
}

#define CASE(name, expr)                                                      \
	do {                                                                  \
		long long r_;                                                 \
		int e_;                                                       \
		errno = 0;                                                    \
		r_ = (long long)(expr);                                       \
		e_ = errno;                                                   \
		report(name, r_, e_);                                         \
	} while (0)

/* A successful call must leave errno alone. */
#define KEEP(name, expr)                                                      \
	do {                                                                  \
		long long r_;                                                 \
		int e_;                                                       \
		errno = 12345;                                                \
		r_ = (long long)(expr);                                       \
		e_ = errno;                                                   \
		printf("case=%s ret=%lld errno=%d\n", name, r_, e_);          \
		ncases++;                                                     \
	} while (0)

static const char *nm(const char *a, const char *b)
{
	static char s[128];

	snprintf(s, sizeof(s), "%s_%s", a, b);
	return s;
}

static void checksum(const char *name, int fd)
{
	struct stat st;
	uint64_t h = 0xcbf29ce484222325ull;
	off_t off = 0;

	if (fstat(fd, &st) < 0) {
		printf("case=%s ret=-1 errno=%d fnv=0\n", name, errno);
		ncases++;
		return;
	}
	while (off < st.st_size && off < (1 << 24)) {
		ssize_t n = pread(fd, rbuf, sizeof(rbuf), off);

		if (n <= 0)
			break;
		for (ssize_t i = 0; i < n; i++) {
			h ^= (unsigned char)rbuf[i];
			h *= 0x100000001b3ull;
		}
		off += n;
	}
	printf("case=%s ret=%lld errno=0 fnv=%016llx read=%lld\n", name,
	       (long long)st.st_size, (unsigned long long)h, (long long)off);
	ncases++;
}

/* For files this process cannot read through the fd it has. */
static void checksum_path(const char *name, const char *path)
{
	int fd = open(path, O_RDONLY);

	checksum(name, fd);
	if (fd >= 0)
		close(fd);
}

/* ---- iovec cases the shim must not dereference more than the kernel ---- */

static long long iov_call(int which, int fd, const struct iovec *iov, int cnt)
{
	switch (which) {
	case 0: return readv(fd, iov, cnt);
	case 1: return writev(fd, iov, cnt);
	case 2: return preadv(fd, iov, cnt, 0);
	case 3: return pwritev(fd, iov, cnt, 0);
	case 4: return preadv2(fd, iov, cnt, 0, 0);
	case 5: return pwritev2(fd, iov, cnt, 0, 0);
	case 6: return preadv2(fd, iov, cnt, -1, 0);
	default: return pwritev2(fd, iov, cnt, -1, 0);
	}
}

static const char *const iov_names[8] = {
	"readv", "writev", "preadv", "pwritev", "preadv2", "pwritev2",
	"preadv2cur", "pwritev2cur",
};

/* fd's descriptor, or with path a file of the child's own that it has just
 * written alone with heap iovec arrays: a single-threaded process alone on
 * a file is granted all of it, and then the shim neither locks a range nor
 * reads the array (shim/preload/iolock.h, rs_iov_solo): the kernel alone meets the
 * bad pointer, as it does without the shim. */
static int case_fd(const char *name, int fd, const char *path)
{
	struct iovec *h;

	if (!path)
		return fd;
	h = malloc(sizeof(*h) * 2);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || !h) {
		printf("case=%s ret=setupfail errno=%d\n", name, errno);
		return -2;
	}
	h[0] = (struct iovec){ buf, 10 };
	h[1] = (struct iovec){ buf + 100, 10 };
	for (int i = 0; i < 3; i++)
		if (pwritev(fd, h, 2, 0) != 20) {
			printf("case=%s ret=warmfail errno=%d\n", name, errno);
			return -2;
		}
	return fd;
}

/* The vector call `which` with iov in a child, on case_fd's descriptor. */
static void fork_case(const char *name, int which, int fd, const char *path,
		      const struct iovec *iov, int cnt)
{
	pid_t p;
	int st;

	fflush(stdout);
	p = fork();
	if (p == 0) {
		long long r;
		int e;

		fd = case_fd(name, fd, path);
		if (fd != -2) {
			errno = 0;
			r = iov_call(which, fd, iov, cnt);
			e = errno;
			printf("case=%s ret=%lld errno=%d\n", name, r, r < 0 ? e : 0);
		}
		fflush(stdout);
		_exit(0);
	}
	if (p < 0 || waitpid(p, &st, 0) != p)
		printf("case=%s ret=forkfail errno=%d\n", name, errno);
	else if (WIFSIGNALED(st))
		printf("case=%s ret=signal%d errno=0\n", name, WTERMSIG(st));
	else if (WEXITSTATUS(st) != 0)
		printf("case=%s ret=exit%d errno=0\n", name, WEXITSTATUS(st));
	ncases++;
}

/* ---- errno under contention ------------------------------------------ */

struct cont {
	int fd_p;               /* pwrite/pread of one shared range */
	int fd_w;               /* write() at a shared file offset */
	atomic_int bad;
};

static void *cont_thread(void *arg)
{
	struct cont *c = arg;
	char blk[4096], in[4096], rec[16];

	memset(blk, 'c', sizeof(blk));
	memset(rec, 'r', sizeof(rec));
	for (int i = 0; i < 2000; i++) {
		ssize_t r;

		errno = 12345;
		r = pwrite(c->fd_p, blk, sizeof(blk), 0);
		if (r != (ssize_t)sizeof(blk) || errno != 12345)
			atomic_fetch_add(&c->bad, 1);
		errno = 12345;
		r = pread(c->fd_p, in, sizeof(in), 0);
		if (r != (ssize_t)sizeof(in) || errno != 12345)
			atomic_fetch_add(&c->bad, 1);
		errno = 12345;
		r = write(c->fd_w, rec, sizeof(rec));
		if (r != (ssize_t)sizeof(rec) || errno != 12345)
			atomic_fetch_add(&c->bad, 1);
		errno = 12345;
		r = lseek(c->fd_w, 0, SEEK_CUR);
		if (r < 0 || errno != 12345)
			atomic_fetch_add(&c->bad, 1);
	}
	return NULL;
}

static void contended(const char *dir)
{
	char p1[PATH_MAX], p2[PATH_MAX];
	struct cont c;
	pthread_t th[4];

	snprintf(p1, sizeof(p1), "%s/contend_p", dir);
	snprintf(p2, sizeof(p2), "%s/contend_w", dir);
	c.fd_p = open(p1, O_RDWR | O_CREAT | O_TRUNC, 0644);
	c.fd_w = open(p2, O_RDWR | O_CREAT | O_TRUNC, 0644);
	atomic_init(&c.bad, 0);
	if (c.fd_p < 0 || c.fd_w < 0 || pwrite(c.fd_p, buf, 4096, 0) != 4096) {
		printf("case=keep_errno_contended ret=-1 errno=%d\n", errno);
		ncases++;
		return;
	}
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, cont_thread, &c);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	printf("case=keep_errno_contended ret=%d errno=0\n", atomic_load(&c.bad));
	ncases++;
	checksum("sum_contend_p", c.fd_p);
	checksum("sum_contend_w", c.fd_w);
	close(c.fd_p);
	close(c.fd_w);
}

int main(int argc, char **argv)
{
	char p_main[PATH_MAX], p_other[PATH_MAX], p_ro[PATH_MAX], p_wo[PATH_MAX];
	char p_app[PATH_MAX], p_gone[PATH_MAX], p_keep[PATH_MAX], p_none[PATH_MAX];
	char p_whole[PATH_MAX];
	int fd_main, fd_other, fd_ro, fd_wo, fd_app, fd_dir, fd_closed, pp[2];
	void *bad1 = bad1_v, *nul = null_v;
	struct iovec iov1[1], iov2[2], *big_iov;
	off_t o1, o2;
	const char *dir;
	long pagesz = sysconf(_SC_PAGESIZE);
	char *pages;

	if (argc != 2) {
		fprintf(stderr, "usage: errno_probe DIR\n");
		return 2;
	}
	dir = argv[1];
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (char)('A' + (i * 7 + i / 251) % 26);
	snprintf(p_main, sizeof(p_main), "%s/main", dir);
	snprintf(p_other, sizeof(p_other), "%s/other", dir);
	snprintf(p_ro, sizeof(p_ro), "%s/ro", dir);
	snprintf(p_wo, sizeof(p_wo), "%s/wo", dir);
	snprintf(p_app, sizeof(p_app), "%s/app", dir);
	snprintf(p_gone, sizeof(p_gone), "%s/gone", dir);
	snprintf(p_keep, sizeof(p_keep), "%s/keep", dir);
	snprintf(p_none, sizeof(p_none), "%s/no/such/file", dir);
	snprintf(p_whole, sizeof(p_whole), "%s/whole", dir);
	iov1[0].iov_base = buf;
	iov1[0].iov_len = 100;
	iov2[0].iov_base = buf;
	iov2[0].iov_len = 50;
	iov2[1].iov_base = buf + 1000;
	iov2[1].iov_len = 70;
	big_iov = calloc(IOV_MAX + 1, sizeof(*big_iov));
	for (int i = 0; i <= IOV_MAX; i++) {
		big_iov[i].iov_base = rbuf;
		big_iov[i].iov_len = 1;
	}

	/* ---- set-up: every result printed, fd numbers included ---- */
	CASE("open_main", fd_main = open(p_main, O_RDWR | O_CREAT | O_TRUNC, 0644));
	CASE("open_other", fd_other = open(p_other, O_RDWR | O_CREAT | O_TRUNC, 0644));
	CASE("open_ro_create", fd_ro = open(p_ro, O_WRONLY | O_CREAT | O_TRUNC, 0644));
	CASE("write_ro_create", write(fd_ro, buf, 5000));
	CASE("close_ro_create", close(fd_ro));
	CASE("open_ro", fd_ro = open(p_ro, O_RDONLY));
	CASE("open_wo", fd_wo = open(p_wo, O_WRONLY | O_CREAT | O_TRUNC, 0644));
	CASE("open_app", fd_app = open(p_app, O_RDWR | O_CREAT | O_TRUNC | O_APPEND, 0644));
	CASE("pipe", pipe(pp));
	CASE("open_dir", fd_dir = open(dir, O_RDONLY | O_DIRECTORY));
	if (fd_main < 0 || fd_other < 0 || fd_ro < 0 || fd_wo < 0 || fd_app < 0 || fd_dir < 0) {
		printf("setup failed\n");
		return 1;
	}

	/* A number that was a tracked regular file a moment ago. */
	CASE("open_gone", fd_closed = open(p_gone, O_RDWR | O_CREAT | O_TRUNC, 0644));
	CASE("pwrite_gone", pwrite(fd_closed, buf, 10, 0));
	CASE("close_gone", close(fd_closed));

	/* ---- EBADF: -1, the closed number, never opened, beyond any table ---- */
	{
		int bads[4] = { -1, fd_closed, 900, intmax_v };
		const char *bn[4] = { "m1", "closed", "high", "intmax" };

		for (int i = 0; i < 4; i++) {
			int b = bads[i];

			CASE(nm("ebadf_read", bn[i]), read(b, rbuf, 10));
			CASE(nm("ebadf_write", bn[i]), write(b, buf, 10));
			CASE(nm("ebadf_pread", bn[i]), pread(b, rbuf, 10, 0));
			CASE(nm("ebadf_pwrite", bn[i]), pwrite(b, buf, 10, 0));
			CASE(nm("ebadf_readv", bn[i]), readv(b, iov1, 1));
			CASE(nm("ebadf_writev", bn[i]), writev(b, iov1, 1));
			CASE(nm("ebadf_preadv", bn[i]), preadv(b, iov1, 1, 0));
			CASE(nm("ebadf_pwritev", bn[i]), pwritev(b, iov1, 1, 0));
			CASE(nm("ebadf_preadv2", bn[i]), preadv2(b, iov1, 1, 0, 0));
			CASE(nm("ebadf_pwritev2", bn[i]), pwritev2(b, iov1, 1, 0, 0));
			CASE(nm("ebadf_preadv2cur", bn[i]), preadv2(b, iov1, 1, -1, 0));
			CASE(nm("ebadf_pwritev2app", bn[i]), pwritev2(b, iov1, 1, 0, RWF_APPEND));
			CASE(nm("ebadf_lseek", bn[i]), lseek(b, 0, SEEK_SET));
			CASE(nm("ebadf_ftruncate", bn[i]), ftruncate(b, 0));
			CASE(nm("ebadf_fallocate", bn[i]), fallocate(b, 0, 0, 10));
			CASE(nm("ebadf_posix_fallocate", bn[i]), posix_fallocate(b, 0, 10));
			o1 = 0;
			o2 = 0;
			CASE(nm("ebadf_cfr_in", bn[i]), copy_file_range(b, &o1, fd_other, &o2, 10, 0));
			o1 = 0;
			o2 = 0;
			CASE(nm("ebadf_cfr_out", bn[i]), copy_file_range(fd_main, &o1, b, &o2, 10, 0));
			CASE(nm("ebadf_cfr_cur", bn[i]), copy_file_range(b, NULL, fd_other, NULL, 10, 0));
			o1 = 0;
			CASE(nm("ebadf_sendfile_out", bn[i]), sendfile(b, fd_main, &o1, 10));
			o1 = 0;
			CASE(nm("ebadf_sendfile_in", bn[i]), sendfile(fd_other, b, &o1, 10));
			CASE(nm("ebadf_sendfile_incur", bn[i]), sendfile(fd_other, b, NULL, 10));
			CASE(nm("ebadf_fcntl", bn[i]), fcntl(b, F_GETFL));
			CASE(nm("ebadf_dup", bn[i]), dup(b));
			CASE(nm("ebadf_close", bn[i]), close(b));
		}
	}

	/* ---- ordinary successful calls (their effect is checksummed) ---- */
	CASE("ok_pwrite", pwrite(fd_main, buf, 8192, 0));
	CASE("ok_pread", pread(fd_main, rbuf, 8192, 0));
	CASE("ok_pread_eof", pread(fd_main, rbuf, 100, 8150));
	CASE("ok_pread_past_eof", pread(fd_main, rbuf, 100, 100000));
	CASE("ok_write", write(fd_main, buf + 3, 333));
	CASE("ok_read", read(fd_main, rbuf, 100));
	CASE("ok_lseek_end", lseek(fd_main, 0, SEEK_END));
	CASE("ok_lseek_set", lseek(fd_main, 10, SEEK_SET));
	CASE("ok_writev", writev(fd_main, iov2, 2));
	CASE("ok_readv", readv(fd_main, iov2, 2));
	CASE("ok_pwritev", pwritev(fd_main, iov2, 2, 9000));
	CASE("ok_preadv", preadv(fd_main, iov2, 2, 8990));
	CASE("ok_pwritev2", pwritev2(fd_main, iov2, 2, 9500, 0));
	CASE("ok_pwritev2_cur", pwritev2(fd_main, iov2, 2, -1, 0));
	CASE("ok_preadv2_cur", preadv2(fd_main, iov2, 2, -1, 0));
	CASE("ok_pwritev2_append", pwritev2(fd_main, iov1, 1, 0, RWF_APPEND));
	CASE("ok_lseek_cur", lseek(fd_main, 0, SEEK_CUR));
	CASE("ok_write_app", write(fd_app, buf, 777));
	CASE("ok_pwrite_app", pwrite(fd_app, buf + 1, 55, 0));
	CASE("ok_lseek_app", lseek(fd_app, 0, SEEK_CUR));
	CASE("ok_ftruncate_grow", ftruncate(fd_other, 20000));
	CASE("ok_ftruncate_shrink", ftruncate(fd_other, 3000));
	CASE("ok_fallocate", fallocate(fd_other, 0, 2000, 5000));
	CASE("ok_fallocate_keep", fallocate(fd_other, FALLOC_FL_KEEP_SIZE, 6000, 5000));
	CASE("ok_posix_fallocate", posix_fallocate(fd_other, 7000, 1000));
	o1 = 100;
	o2 = 1000;
	CASE("ok_cfr", copy_file_range(fd_main, &o1, fd_other, &o2, 3000, 0));
	CASE("ok_cfr_in_off", o1);
	CASE("ok_cfr_out_off", o2);
	CASE("ok_lseek_main0", lseek(fd_main, 200, SEEK_SET));
	CASE("ok_cfr_cur", copy_file_range(fd_main, NULL, fd_other, NULL, 700, 0));
	CASE("ok_cfr_cur_pos", lseek(fd_main, 0, SEEK_CUR));
	o1 = 500;
	CASE("ok_sendfile", sendfile(fd_other, fd_main, &o1, 1234));
	CASE("ok_sendfile_off", o1);
	CASE("ok_sendfile_pipe", sendfile(pp[1], fd_main, NULL, 99));
	CASE("ok_read_pipe", read(pp[0], rbuf, 200));
	CASE("ok_truncate", truncate(p_other, 12000));
	CASE("ok_dup", fd_closed = dup(fd_main));
	CASE("ok_dup_write", write(fd_closed, buf, 17));
	CASE("ok_dup_pos", lseek(fd_main, 0, SEEK_CUR));
	CASE("ok_close_dup", close(fd_closed));
	CASE("close_twice", close(fd_closed));
	CASE("ok_fcntl_setfl", fcntl(fd_wo, F_SETFL, O_APPEND));
	CASE("ok_fcntl_getfl", fcntl(fd_wo, F_GETFL) & O_APPEND);
	CASE("ok_write_wo", write(fd_wo, buf, 10));
	CASE("ok_lseek_wo0", lseek(fd_wo, 0, SEEK_SET));
	CASE("ok_write_wo_app", write(fd_wo, buf, 10));
	CASE("ok_lseek_wo", lseek(fd_wo, 0, SEEK_CUR));

	/* ---- EFAULT ---- */
	CASE("efault_pread_1", pread(fd_main, bad1, 10, 0));
	CASE("efault_pread_null", pread(fd_main, nul, 10, 0));
	CASE("efault_pwrite_1", pwrite(fd_main, bad1, 10, 0));
	CASE("efault_pwrite_null", pwrite(fd_main, nul, 10, 0));
	CASE("efault_lseek0", lseek(fd_main, 0, SEEK_SET));
	CASE("efault_read_1", read(fd_main, bad1, 10));
	CASE("efault_read_null", read(fd_main, nul, 10));
	CASE("efault_write_1", write(fd_main, bad1, 10));
	CASE("efault_write_null", write(fd_main, nul, 10));
	CASE("efault_pos", lseek(fd_main, 0, SEEK_CUR));
	CASE("efault_readv_null", readv(fd_main, nul, 1));
	CASE("efault_writev_1", writev(fd_main, bad1, 1));
	CASE("efault_preadv_null", preadv(fd_main, nul, 1, 0));
	CASE("efault_pwritev_1", pwritev(fd_main, bad1, 1, 0));
	CASE("efault_truncate_null", truncate_fn(nul, 0));

	/* Unmapped iovec arrays: the kernel says EFAULT (or EBADF first). */
	pages = mmap(NULL, (size_t)pagesz * 2, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (pages != MAP_FAILED) {
		struct iovec *gone = (struct iovec *)(void *)(pages + pagesz);
		struct iovec *edge = gone - 1;   /* [0] mapped, [1] not */

		munmap(pages + pagesz, (size_t)pagesz);
		edge->iov_base = buf;
		edge->iov_len = 10;
		for (int w = 0; w < 8; w++) {
			fork_case(nm("efault_unmapped_iov", iov_names[w]), w, fd_main, NULL, gone, 1);
			fork_case(nm("efault_half_iov", iov_names[w]), w, fd_main, NULL, edge, 2);
			fork_case(nm("ebadf_unmapped_iov", iov_names[w]), w, -1, NULL, gone, 1);
			fork_case(nm("espipe_unmapped_iov", iov_names[w]), w, pp[1], NULL, gone, 1);
			fork_case(nm("efault_whole_unmapped_iov", iov_names[w]), w, -1, p_whole,
				  gone, 1);
			fork_case(nm("efault_whole_half_iov", iov_names[w]), w, -1, p_whole,
				  edge, 2);
		}
	}

	/* ---- negative offsets and lengths ---- */
	CASE("einval_pread_neg", pread(fd_main, rbuf, 10, -1));
	CASE("einval_pwrite_neg", pwrite(fd_main, buf, 10, -1));
	CASE("einval_pread_neg_len0", pread(fd_main, rbuf, 0, -1));
	CASE("einval_pwrite_neg_len0", pwrite(fd_main, buf, 0, -1));
	CASE("einval_preadv_neg", preadv(fd_main, iov1, 1, -1));
	CASE("einval_pwritev_neg", pwritev(fd_main, iov1, 1, -1));
	CASE("einval_preadv2_neg2", preadv2(fd_main, iov1, 1, -2, 0));
	CASE("einval_pwritev2_neg2", pwritev2(fd_main, iov1, 1, -2, 0));
	CASE("einval_pwritev2_neg2_app", pwritev2(fd_main, iov1, 1, -2, RWF_APPEND));
	CASE("einval_ftruncate_neg", ftruncate(fd_main, -1));
	CASE("einval_fallocate_negoff", fallocate(fd_main, 0, -1, 10));
	CASE("einval_fallocate_neglen", fallocate(fd_main, 0, 0, -1));
	CASE("einval_fallocate_len0", fallocate(fd_main, 0, 0, 0));
	CASE("einval_posix_fallocate_negoff", posix_fallocate(fd_main, -1, 10));
	CASE("einval_posix_fallocate_neglen", posix_fallocate(fd_main, 0, -1));
	CASE("einval_lseek_neg", lseek(fd_main, -1, SEEK_SET));
	CASE("einval_lseek_whence", lseek(fd_main, 0, 99));
	CASE("enxio_lseek_data", lseek(fd_main, 1 << 30, SEEK_DATA));
	CASE("einval_truncate_neg", truncate(p_main, -1));
	o1 = -1;
	o2 = 0;
	CASE("neg_cfr_in", copy_file_range(fd_main, &o1, fd_other, &o2, 10, 0));
	o1 = 0;
	o2 = -5;
	CASE("neg_cfr_out", copy_file_range(fd_main, &o1, fd_other, &o2, 10, 0));
	o1 = -1;
	CASE("einval_sendfile_neg", sendfile(fd_other, fd_main, &o1, 10));

	/* ---- off + len overflow ---- */
	CASE("ovf_pwrite", pwrite(fd_main, buf, 100, LLONG_MAX - 10));
	CASE("ovf_pread", pread(fd_main, rbuf, 100, LLONG_MAX - 10));
	CASE("ovf_pwrite_max", pwrite(fd_main, buf, 1, LLONG_MAX));
	CASE("ovf_pwritev", pwritev(fd_main, iov1, 1, LLONG_MAX - 10));
	CASE("ovf_preadv", preadv(fd_main, iov1, 1, LLONG_MAX - 10));
	CASE("ovf_pwritev2", pwritev2(fd_main, iov1, 1, LLONG_MAX - 10, 0));
	CASE("ovf_fallocate", fallocate(fd_main, 0, LLONG_MAX - 10, 100));
	CASE("ovf_fallocate_keep", fallocate(fd_main, FALLOC_FL_KEEP_SIZE, LLONG_MAX - 10, 100));
	CASE("ovf_posix_fallocate", posix_fallocate(fd_main, LLONG_MAX - 10, 100));
	o1 = 0;
	o2 = LLONG_MAX - 10;
	CASE("ovf_cfr", copy_file_range(fd_main, &o1, fd_other, &o2, 100, 0));
	{
		struct iovec huge[2] = { { buf, SSIZE_MAX }, { buf, SSIZE_MAX } };

		CASE("ovf_writev_iovsum", writev(fd_main, huge, 2));
		CASE("ovf_pwritev_iovsum", pwritev(fd_main, huge, 2, 0));
		CASE("ovf_preadv_iovsum", preadv(fd_main, huge, 2, 0));
	}

	/* ---- ESPIPE, EISDIR, wrong access mode ---- */
	CASE("espipe_pread", pread(pp[0], rbuf, 1, 0));
	CASE("espipe_pwrite", pwrite(pp[1], buf, 1, 0));
	CASE("espipe_preadv", preadv(pp[0], iov1, 1, 0));
	CASE("espipe_pwritev", pwritev(pp[1], iov1, 1, 0));
	CASE("espipe_pwritev2", pwritev2(pp[1], iov1, 1, 5, 0));
	CASE("espipe_lseek", lseek(pp[0], 0, SEEK_SET));
	CASE("espipe_pwrite_len0", pwrite(pp[1], buf, 0, 0));
	CASE("eisdir_read", read(fd_dir, rbuf, 10));
	CASE("eisdir_pread", pread(fd_dir, rbuf, 10, 0));
	CASE("eisdir_readv", readv(fd_dir, iov1, 1));
	CASE("ebadf_write_dir", write(fd_dir, buf, 10));
	CASE("einval_ftruncate_dir", ftruncate(fd_dir, 0));
	CASE("eisdir_truncate", truncate(dir, 0));
	CASE("ebadf_write_ro", write(fd_ro, buf, 10));
	CASE("ebadf_pwrite_ro", pwrite(fd_ro, buf, 10, 0));
	CASE("ebadf_writev_ro", writev(fd_ro, iov1, 1));
	CASE("ebadf_pwritev2_ro_app", pwritev2(fd_ro, iov1, 1, 0, RWF_APPEND));
	CASE("einval_ftruncate_ro", ftruncate(fd_ro, 0));
	CASE("ebadf_fallocate_ro", fallocate(fd_ro, 0, 0, 10));
	CASE("ebadf_posix_fallocate_ro", posix_fallocate(fd_ro, 0, 10));
	o1 = 0;
	o2 = 0;
	CASE("ebadf_cfr_to_ro", copy_file_range(fd_main, &o1, fd_ro, &o2, 10, 0));
	o1 = 0;
	CASE("ebadf_sendfile_to_ro", sendfile(fd_ro, fd_main, &o1, 10));
	CASE("ebadf_read_wo", read(fd_wo, rbuf, 10));
	CASE("ebadf_pread_wo", pread(fd_wo, rbuf, 10, 0));
	o1 = 0;
	o2 = 0;
	CASE("ebadf_cfr_from_wo", copy_file_range(fd_wo, &o1, fd_main, &o2, 10, 0));
	o1 = 0;
	CASE("ebadf_cfr_to_append", copy_file_range(fd_main, &o1, fd_app, NULL, 10, 0));

	/* ---- iovcnt ---- */
	{
		int cnts[3] = { -1, 0, IOV_MAX + 1 };
		const char *cn[3] = { "m1", "0", "iovmax1" };

		for (int i = 0; i < 3; i++) {
			CASE(nm("iovcnt_readv", cn[i]), readv(fd_main, big_iov, cnts[i]));
			CASE(nm("iovcnt_writev", cn[i]), writev(fd_main, big_iov, cnts[i]));
			CASE(nm("iovcnt_preadv", cn[i]), preadv(fd_main, big_iov, cnts[i], 0));
			CASE(nm("iovcnt_pwritev", cn[i]), pwritev(fd_main, big_iov, cnts[i], 0));
			CASE(nm("iovcnt_preadv2", cn[i]), preadv2(fd_main, big_iov, cnts[i], 0, 0));
			CASE(nm("iovcnt_pwritev2", cn[i]), pwritev2(fd_main, big_iov, cnts[i], 0, 0));
		}
		CASE("iovcnt_readv_max", preadv(fd_main, big_iov, IOV_MAX, 0));
	}

	/* ---- RWF flags ---- */
	CASE("rwf_pwritev2_bad", pwritev2(fd_main, iov1, 1, 0, (int)0x80000000u));
	CASE("rwf_preadv2_bad", preadv2(fd_main, iov1, 1, 0, (int)0x80000000u));
	CASE("rwf_pwritev2_bad_cur", pwritev2(fd_main, iov1, 1, -1, (int)0x80000000u));
	CASE("rwf_pwritev2_bad_app", pwritev2(fd_main, iov1, 1, 0, (int)0x80000000u | RWF_APPEND));
	CASE("rwf_pwritev2_pipe_bad", pwritev2(pp[1], iov1, 1, -1, (int)0x80000000u));

	/* ---- zero length ---- */
	CASE("len0_pread", pread(fd_main, rbuf, 0, 0));
	CASE("len0_pwrite", pwrite(fd_main, buf, 0, 0));
	CASE("len0_pwrite_far", pwrite(fd_main, buf, 0, 1 << 30));
	CASE("len0_read", read(fd_main, rbuf, 0));
	CASE("len0_write", write(fd_main, buf, 0));
	CASE("len0_pread_null", pread(fd_main, nul, 0, 0));
	CASE("len0_pwrite_ro", pwrite(fd_ro, buf, 0, 0));
	CASE("len0_pread_dir", pread(fd_dir, rbuf, 0, 0));
	CASE("len0_pread_badfd", pread(-1, rbuf, 0, 0));
	o1 = 0;
	o2 = 0;
	CASE("len0_cfr", copy_file_range(fd_main, &o1, fd_other, &o2, 0, 0));
	CASE("len0_writev", writev(fd_main, iov1, 0));

	/* ---- descriptor calls ---- */
	CASE("dup2_to_m1", dup2(fd_main, -1));
	CASE("dup2_from_m1", dup2(-1, 50));
	CASE("dup2_to_intmax", dup2(fd_main, intmax_v));
	CASE("dup2_same", dup2(fd_main, fd_main));
	CASE("dup3_same", dup3(fd_main, fd_main, 0));
	CASE("dup3_badflags", dup3(fd_main, 50, 12345));
	CASE("fcntl_dupfd_neg", fcntl(fd_main, F_DUPFD, -1));
	CASE("fcntl_badcmd", fcntl(fd_main, 99999));
	CASE("fcntl_badcmd_m1", fcntl(-1, 99999));
	CASE("fcntl_setfl_m1", fcntl(-1, F_SETFL, O_APPEND));
	CASE("close_m1", close(-1));
	CASE("close_range_bad", close_range(10, 5, 0));
	CASE("close_range_badflags", close_range(900, 910, 0x40000));
	CASE("truncate_enoent", truncate(p_none, 0));
	CASE("truncate_enoent2", truncate("/nonexistent-rangeshim-probe", 0));
	o1 = 0;
	o2 = 10;
	CASE("cfr_overlap", copy_file_range(fd_main, &o1, fd_main, &o2, 100, 0));
	o1 = 0;
	o2 = 10;
	CASE("cfr_overlap_dup", copy_file_range(fd_main, &o1, fd_main, &o2, 100, 0));
	o1 = 0;
	o2 = 0;
	CASE("cfr_badflags", copy_file_range(fd_main, &o1, fd_other, &o2, 10, 1));
	CASE("cfr_to_pipe", copy_file_range(fd_main, NULL, pp[1], NULL, 10, 0));
	o1 = 0;
	CASE("sendfile_same", sendfile(fd_main, fd_main, &o1, 10));

	/* ---- errno preserved by successful calls ---- */
	{
		int k = -1, d = -1;

		KEEP("keep_errno_open", k = open(p_keep, O_RDWR | O_CREAT | O_TRUNC, 0644));
		KEEP("keep_errno_pwrite", pwrite(k, buf, 1000, 0));
		KEEP("keep_errno_pread", pread(k, rbuf, 1000, 0));
		KEEP("keep_errno_write", write(k, buf, 100));
		KEEP("keep_errno_read", read(k, rbuf, 100));
		KEEP("keep_errno_writev", writev(k, iov2, 2));
		KEEP("keep_errno_pwritev2", pwritev2(k, iov2, 2, 10, 0));
		KEEP("keep_errno_lseek", lseek(k, 0, SEEK_END));
		KEEP("keep_errno_ftruncate", ftruncate(k, 4000));
		KEEP("keep_errno_fallocate", fallocate(k, 0, 0, 5000));
		KEEP("keep_errno_posix_fallocate", posix_fallocate(k, 0, 6000));
		KEEP("keep_errno_truncate", truncate(p_keep, 5500));
		o1 = 0;
		o2 = 0;
		KEEP("keep_errno_cfr", copy_file_range(k, &o1, fd_other, &o2, 100, 0));
		o1 = 0;
		KEEP("keep_errno_sendfile", sendfile(fd_other, k, &o1, 100));
		KEEP("keep_errno_dup", d = dup(k));
		KEEP("keep_errno_fcntl_setfl", fcntl(d, F_SETFL, O_APPEND));
		KEEP("keep_errno_write_app", write(d, buf, 10));
		KEEP("keep_errno_close_dup", close(d));
		KEEP("keep_errno_write_pipe", write(pp[1], buf, 3));
		KEEP("keep_errno_read_pipe", read(pp[0], rbuf, 3));
		checksum("sum_keep", k);
		KEEP("keep_errno_close", close(k));
		KEEP("keep_errno_open_ro", k = open(p_keep, O_RDONLY));
		KEEP("keep_errno_close_ro", close(k));
	}
	contended(dir);

	checksum("sum_main", fd_main);
	checksum("sum_other", fd_other);
	checksum("sum_app", fd_app);
	checksum("sum_ro", fd_ro);
	checksum_path("sum_wo", p_wo);
	CASE("final_pos_main", lseek(fd_main, 0, SEEK_CUR));
	CASE("final_pos_other", lseek(fd_other, 0, SEEK_CUR));
	CASE("close_main", close(fd_main));
	CASE("close_other", close(fd_other));
	CASE("close_ro", close(fd_ro));
	CASE("close_wo", close(fd_wo));
	CASE("close_app", close(fd_app));
	CASE("close_dir", close(fd_dir));
	CASE("close_pipe0", close(pp[0]));
	CASE("close_pipe1", close(pp[1]));
	free(big_iov);
	printf("done cases=%d\n", ncases);
	return 0;
}
