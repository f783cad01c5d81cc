/*
 * Strided grants' arithmetic (nodelock.c, "Strided grants"): a set of
 * equal blocks [base + k*stride, base + k*stride + len) for every k >= 0
 * with base + k*stride < end, each clipped to end.  Shared by the table
 * (conflicts), the process (its cached entry) and `rangeshim locks`.
 * Pure functions of their arguments: the values may come from untrusted
 * memory, so every one copes with any input and errs towards "meets".
 */
#ifndef RS_STRIDE_H
#define RS_STRIDE_H

#include <stdint.h>

/* A stride that describes blocks with gaps between them: anything else
 * (0, a block as long as the stride, a garbage value) is taken as the
 * plain range [base, end), which holds every block of any stride. */
static inline int rs_stride_ok(uint64_t base, uint64_t end, uint64_t stride, uint64_t len)
{
	return stride != 0 && len != 0 && len < stride && base < end;
}

/* The first block of (base, end, stride, len), a well-formed set
 * (rs_stride_ok), that meets [a, c): its index, or UINT64_MAX if none. */
static inline uint64_t rs_stride_first(uint64_t base, uint64_t end, uint64_t stride,
				       uint64_t len, uint64_t a, uint64_t c)
{
	uint64_t k, in;

	if (a < base)
		a = base;
	if (c > end)
		c = end;
	if (a >= c)
		return UINT64_MAX;
	k = (a - base) / stride;
	in = (a - base) % stride;	/* where a lies in block k's period */
	if (in < len)
		return k;
	/* Block k + 1 starts at a + (stride - in). */
	return stride - in < c - a ? k + 1 : UINT64_MAX;
}

/* Does one block of (base, end, stride, len), a well-formed set
 * (rs_stride_ok), hold all of [a, c), a non-empty range? */
static inline int rs_stride_holds(uint64_t base, uint64_t end, uint64_t stride, uint64_t len,
				  uint64_t a, uint64_t c)
{
	uint64_t in;

	if (a < base || c > end || a >= c)
		return 0;
	in = (a - base) % stride;	/* where a lies in its block's period */
	return in < len && c - a <= len - in;
}

/* Do two sets of blocks of one stride miss each other whatever their
 * extents?  Only when their blocks sit at disjoint offsets modulo it. */
static inline int rs_stride_apart(uint64_t base1, uint64_t len1, uint64_t base2,
				  uint64_t len2, uint64_t stride)
{
	uint64_t d = (base2 % stride + stride - base1 % stride) % stride;

	return d >= len1 && stride - d >= len2;
}

/* Do (b1, e1, s1, l1) and (b2, e2, s2, l2) share a byte?  A stride of
 * 0, or one that is not well formed, is the plain range.  Two strided
 * sets of different strides are compared as one set against the other's
 * range: never "apart" when they are not. */
static inline int rs_stride_meet(uint64_t b1, uint64_t e1, uint64_t s1, uint64_t l1,
				 uint64_t b2, uint64_t e2, uint64_t s2, uint64_t l2)
{
	if (!(b1 < e2 && b2 < e1))
		return 0;
	s1 = rs_stride_ok(b1, e1, s1, l1) ? s1 : 0;
	s2 = rs_stride_ok(b2, e2, s2, l2) ? s2 : 0;
	if (s1 && s1 == s2 && rs_stride_apart(b1, l1, b2, l2, s1))
		return 0;
	if (s1)
		return rs_stride_first(b1, e1, s1, l1, b2, e2) != UINT64_MAX;
	if (s2)
		return rs_stride_first(b2, e2, s2, l2, b1, e1) != UINT64_MAX;
	return 1;
}

#endif
