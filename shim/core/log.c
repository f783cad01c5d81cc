#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "invariant.h"
#include "rawsyscall.h"

int rs_log_level = RS_LOG_WARN;

void (*_Atomic rs_log_wrote)(int fd);

int rs_write_all(int fd, const char *buf, unsigned long len)
{
	void (*wrote)(int) = rs_log_wrote;

	if (wrote)
		wrote(fd);
	while (len > 0) {
		long n = rs_sys(SYS_write, fd, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		buf += n;
		len -= (unsigned long)n;
	}
	return 0;
}

void rs_log(int level, const char *fmt, ...)
{
	char line[512];
	int saved = errno;
	va_list ap;
	int n;

	if (level > rs_log_level)
		return;
	n = snprintf(line, sizeof(line), "rangeshim[%ld]: ", (long)rs_sys(SYS_getpid));
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	rs_write_all(2, line, (unsigned long)n);
	errno = saved;
}

void rs_assert_fail(const char *expr, const char *file, int line, const char *func)
{
	rs_log(RS_LOG_ERROR, "internal check failed: %s (%s:%d, %s): stopping rather "
	       "than run without exclusion", expr, file, line, func);
	abort();
}
