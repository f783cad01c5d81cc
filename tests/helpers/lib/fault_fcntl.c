/*
 * libfault_fcntl.so (tests/helpers/lib/): preloaded into `rangeshim agent --foreground` by
 * tests/test_cluster.c (cluster::lost_lock) to play a lock manager that
 * loses the node's locks.  While the file named by RS_FAULT_FILE exists,
 * every OFD lock call fails with ENOLCK, as NFS and Lustre report a lock
 * they lost (the agent must then fail the node's calls with EIO).  Built
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

static int faulty(int cmd)
{
	const char *f = getenv("RS_FAULT_FILE");

	return (cmd == F_OFD_SETLK || cmd == F_OFD_SETLKW || cmd == F_OFD_GETLK) && f &&
	       access(f, F_OK) == 0;
}

static int call(const char *name, int fd, int cmd, void *arg)
{
	int (*real)(int, int, ...) = (int (*)(int, int, ...))dlsym(RTLD_NEXT, name);

	if (faulty(cmd)) {
		errno = ENOLCK;
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
