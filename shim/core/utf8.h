/* Valid UTF-8 sequences, for JSON (which is Unicode text) made from paths
 * and program names (which are any bytes).  Shared by the library's
 * reports and the command. */
#ifndef RS_UTF8_H
#define RS_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length of the valid UTF-8 sequence at p (NUL-terminated), or 0. */
static inline size_t rs_utf8_len(const unsigned char *p)
{
	uint32_t cp, min;
	size_t n;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		n = 2, cp = p[0] & 0x1fu, min = 0x80;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		n = 3, cp = p[0] & 0x0fu, min = 0x800;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		n = 4, cp = p[0] & 0x07u, min = 0x10000;
	else
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)   /* also stops at the terminator */
			return 0;
		cp = cp << 6 | (p[i] & 0x3fu);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

#endif
