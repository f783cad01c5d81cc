#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

int rs_log_level = RS_LOG_WARN;

int rs_write_all(int fd, const char *buf, unsigned long len)
{
	while (len > 0) {
		long n = syscall(SYS_write, fd, buf, len);

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
	n = snprintf(line, sizeof(line), "rangeshim[%ld]: ", (long)syscall(SYS_getpid));
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	rs_write_all(2, line, (unsigned long)n);
	errno = saved;
}
