/* RS_ASSERT: a Pre:/Post: contract checked where it is cheap to check.
 *
 * Debug builds (`make DEBUG=1`) and the sanitizer builds (`make test-asan`,
 * `make test-tsan`) compile the checks in; a failed one prints the
 * expression, file, line and function on stderr and aborts, since a broken
 * lock invariant means exclusion can no longer be trusted (docs/design.md,
 * "The fail-safe principle").  Release builds compile them out: the
 * expression is still type-checked but never evaluated, so the fast path's
 * instruction counts (tests/callgrind.sh) do not move.  The anchors do the
 * same: KASSERT in FreeBSD, ASSERT in OpenZFS, assert(unixMutexHeld()) in
 * SQLite. */
#ifndef RS_INVARIANT_H
#define RS_INVARIANT_H

#ifdef RS_DEBUG
#define RS_ASSERT(cond) \
	((cond) ? (void)0 : rs_assert_fail(#cond, __FILE__, __LINE__, __func__))
#define RS_DEBUG_BUILD 1
#else
#define RS_ASSERT(cond) ((void)sizeof(!(cond)))
#define RS_DEBUG_BUILD 0
#endif

__attribute__((noreturn, cold)) void rs_assert_fail(const char *expr, const char *file,
						    int line, const char *func);

#endif
