/* Diagnostics on stderr, written with the raw syscall so that the shim's
 * own output never goes through its wrappers or through stdio buffers. */
#ifndef RS_LOG_H
#define RS_LOG_H

enum rs_log_level {
	RS_LOG_ERROR = 0,
	RS_LOG_WARN = 1,
	RS_LOG_INFO = 2,
	RS_LOG_DEBUG = 3,
};

extern int rs_log_level;

void rs_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Writes all of buf to fd with raw syscalls; returns 0 or -1. */
int rs_write_all(int fd, const char *buf, unsigned long len);
/* Told, when set, of each descriptor rs_write_all is about to write to:
 * fd may be the application's stderr on a regular file, whose offset
 * the write moves, and the layer that tracks file offsets must know (it
 * sets this before it tracks any). */
extern void (*_Atomic rs_log_wrote)(int fd);

#define rs_warn(...)  rs_log(RS_LOG_WARN, __VA_ARGS__)
#define rs_info(...)  rs_log(RS_LOG_INFO, __VA_ARGS__)
#define rs_debug(...) rs_log(RS_LOG_DEBUG, __VA_ARGS__)

#endif
