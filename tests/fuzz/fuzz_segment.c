/*
 * libFuzzer harness for rs_seg_check, the validation every process applies
 * to the node lock table before trusting it (segment.c).  The segment is
 * untrusted memory: anything may be in it.
 *
 * The input is turned into a segment copy in one of two ways, chosen by its
 * first byte:
 *   'T'  a valid empty table (the header this build writes), then the rest
 *        of the input as patches: [u32 offset][u8 length][bytes], each
 *        written at offset modulo the segment size, so that the fuzzer
 *        reaches the slot checks behind the header;
 *   else the input itself, copied over a zeroed segment.
 * Then rs_seg_check runs on it, and when it accepts the copy, the harness
 * asserts what the rest of the shim relies on: every process slot's state
 * is FREE or LIVE, and every grant in use has a known state and mode, an
 * owner below RS_NPROC, start < end and at most RS_MAX_USERS users.  The
 * reason it gives for a refusal must be a NUL-terminated line.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segment.h"

static struct rs_segment *seg;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char why[200];
	int r;

	if (!seg) {
		seg = aligned_alloc(4096, sizeof(struct rs_segment));
		if (!seg)
			abort();
	}
	memset(seg, 0, sizeof(*seg));
	if (size > 0 && data[0] == 'T') {
		rs_seg_init(seg);	/* a valid table, then patched by the input */
		for (size_t i = 1; i + 5 <= size;) {
			uint32_t off;
			size_t len = data[i + 4];

			memcpy(&off, data + i, 4);
			i += 5;
			if (len > size - i)
				len = size - i;
			off %= (uint32_t)sizeof(*seg);
			if (len > sizeof(*seg) - off)
				len = sizeof(*seg) - off;
			memcpy((char *)seg + off, data + i, len);
			i += len;
		}
	} else {
		memcpy(seg, data, size < sizeof(*seg) ? size : sizeof(*seg));
	}

	memset(why, 0x7f, sizeof(why));
	r = rs_seg_check(seg, why, sizeof(why));
	if (r != 0) {
		if (r != -1 || memchr(why, '\0', sizeof(why)) == NULL || strchr(why, '\n'))
			abort();	/* refusals come with a one-line reason */
		return 0;
	}
	/* Accepted: the invariants the table code relies on. */
	if (seg->hdr.magic != RS_SEG_MAGIC || seg->hdr.version != RS_SEG_VERSION ||
	    seg->hdr.nproc != RS_NPROC || seg->hdr.ngrant != RS_NGRANT)
		abort();
	for (uint32_t i = 0; i < RS_NPROC; i++)
		if (seg->procs[i].state > RS_PROC_LIVE)
			abort();
	for (uint32_t i = 0; i < RS_NGRANT; i++) {
		const struct rs_seg_grant *g = &seg->grants[i];

		if (g->state > RS_G_WAIT)
			abort();
		if (g->state == RS_G_FREE)
			continue;
		if (g->owner >= RS_NPROC || (g->mode != RS_G_SHARED && g->mode != RS_G_EXSH) ||
		    g->start >= g->end ||
		    RS_GW_USERS(atomic_load_explicit(&g->gw, memory_order_relaxed)) > RS_MAX_USERS)
			abort();
	}
	return 0;
}
