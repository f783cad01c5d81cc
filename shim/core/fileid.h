/*
 * A file named one way in every message, listing and report:
 * major:minor:inode in decimal (the MAJ:MIN of lslocks and of
 * /proc/self/mountinfo, then the inode), followed by its path where one is
 * known.  /proc/locks writes the same numbers in hex (00:1a:1008866);
 * locks and the stats convert, never print that form.
 *
 * Header-only, so the library, the command and the unit tests share it.
 * rs_file_path scans the caller's own /proc/self/fd with direct system
 * calls and no allocation: it is for slow paths (a message after seconds
 * of waiting, a report at exit), never for a call's fast path.
 */
#ifndef RS_FILEID_H
#define RS_FILEID_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include "rawsyscall.h"

/* "major:minor:inode" fits in 10 + 1 + 10 + 1 + 20 bytes. */
#define RS_FILE_ID_LEN 48
/* The id, " ", and a path of up to this many bytes. */
#define RS_FILE_NAME_LEN (RS_FILE_ID_LEN + 512)

static inline const char *rs_file_id(char *buf, size_t len, uint64_t dev, uint64_t ino)
{
	snprintf(buf, len, "%u:%u:%llu", major((dev_t)dev), minor((dev_t)dev),
		 (unsigned long long)ino);
	return buf;
}

/* The id as an argument of a message: its buffer lives until the end of
 * the enclosing block. */
#define RS_FILE_ID(dev, ino) rs_file_id((char[RS_FILE_ID_LEN]){ 0 }, RS_FILE_ID_LEN, (dev), (ino))

/* A path of (dev, ino) through one of our own descriptors: its length,
 * or -1 when none of them is that file. */
static inline long rs_file_path(uint64_t dev, uint64_t ino, char *out, size_t len)
{
	struct dent { uint64_t ino; int64_t off; unsigned short reclen; unsigned char type; char name[]; };
	char buf[2048];
	long dir, n, got = -1;

	if (len < 2)
		return -1;
	dir = rs_sys(SYS_openat, AT_FDCWD, "/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0)
		return -1;
	while (got < 0 && (n = rs_sys(SYS_getdents64, dir, buf, sizeof(buf))) > 0) {
		for (long at = 0; at < n && got < 0;) {
			struct dent *d = (struct dent *)(buf + at);
			struct stat st;

			at += d->reclen;
			if (d->name[0] < '0' || d->name[0] > '9')
				continue;
			/* stat follows the link to the open file itself. */
			if (rs_sys(SYS_newfstatat, dir, d->name, &st, 0) < 0 ||
			    (uint64_t)st.st_dev != dev || (uint64_t)st.st_ino != ino)
				continue;
			got = rs_sys(SYS_readlinkat, dir, d->name, out, len - 1);
			if (got > 0 && out[0] == '/')
				out[got] = '\0';
			else
				got = -1;
		}
	}
	rs_sys(SYS_close, dir);
	return got;
}

/* "major:minor:inode path", or the id alone when no path is known. */
static inline const char *rs_file_name(char *buf, size_t len, uint64_t dev, uint64_t ino)
{
	char path[RS_FILE_NAME_LEN - RS_FILE_ID_LEN];

	rs_file_id(buf, len, dev, ino);
	if (rs_file_path(dev, ino, path, sizeof path) > 0)
		snprintf(buf, len, "%u:%u:%llu %s", major((dev_t)dev), minor((dev_t)dev),
			 (unsigned long long)ino, path);
	return buf;
}

#endif
