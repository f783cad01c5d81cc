/*
 * libfault_fcntl.so (tests/helpers/lib/): preloaded into `rangeshim agent --foreground` by
 * tests/test_cluster.c (cluster::lost_lock) to play a lock manager that
 * loses the node's locks.  While the file named by RS_FAULT_FILE exists,
 * every OFD lock call fails with RS_FAULT_ERRNO (a number; default
 * ENOLCK): EIO as a lock manager reports a lock it lost (the agent must
 * then fail the node's calls with EIO), ENOLCK as lockd reports a grace
 * period's refusal (the agent must wait it out).  With RS_FAULT_REQUESTS
 * set, unlocks pass: in a grace period lockd and the NFSv4 client retry
 * an unlock themselves, and only requests see the refusal.  Built
 * as a shared object by the Makefile; never preloaded into a test runner.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

int fcntl(int fd, int cmd, ...);
int fcntl64(int fd, int cmd, ...);

static int faulty(int cmd, const struct flock *fl)
{
	const char *f = getenv("RS_FAULT_FILE");

	if (cmd != F_OFD_SETLK && cmd != F_OFD_SETLKW && cmd != F_OFD_GETLK)
		return 0;
	if (getenv("RS_FAULT_REQUESTS") && cmd != F_OFD_GETLK && fl->l_type == F_UNLCK)
		return 0;
	return f && access(f, F_OK) == 0;
}

static int call(const char *name, int fd, int cmd, void *arg)
{
	int (*real)(int, int, ...) = (int (*)(int, int, ...))dlsym(RTLD_NEXT, name);

	if (faulty(cmd, arg)) {
		const char *e = getenv("RS_FAULT_ERRNO");

		errno = e && atoi(e) > 0 ? atoi(e) : ENOLCK;
		return -1;
	}
	return real(fd, cmd, arg);
}

int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	return call("fcntl", fd, cmd, arg);
}

int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	return call("fcntl64", fd, cmd, arg);
}
