/*
 * The lock-order checks of debug builds (lockorder.h).  Per thread, the
 * locks it holds, in the order taken: a few at a time (a call holds at
 * most two offset locks, two grants and two range locks, and the
 * short mutexes inside), so a small array scanned whole, as lockdep's
 * held_locks.  Nothing here is shared between threads.
 */
#include "lockorder.h"

#ifdef RS_DEBUG
#include <stdio.h>

#define HELD_MAX 32

struct held {
	const void *obj;
	unsigned char level;
};

/* base: entries below it belong to a context set aside (rs_lk_aside).
 * Initial-exec, as rs_depth: no allocation on a thread's first use,
 * which may be inside a signal handler. */
static __thread struct {
	struct held h[HELD_MAX];
	unsigned char n, base;
} self __attribute__((tls_model("initial-exec")));

static const char *const names[RS_LK_NLEVELS] = {
	[RS_LK_NONE] = "none",
	[RS_LK_CLUSTER] = "a cluster cache mutex",
	[RS_LK_POS] = "an offset lock",
	[RS_LK_GRANT] = "a node grant",
	[RS_LK_ACQUIRE] = "a file's acquire mutex",
	[RS_LK_PIN] = "a cluster pin",
	[RS_LK_RANGE] = "a range lock",
	[RS_LK_ATTACH] = "the attach lock",
	[RS_LK_FDTABLE] = "the fd table mutex",
	[RS_LK_PFILES] = "the pin list mutex",
	[RS_LK_GRANTS] = "a file's grant cache mutex",
	[RS_LK_NT_LOCAL] = "the node table's local mutex",
	[RS_LK_NT] = "the node table lock",
	[RS_LK_MOUNTS] = "the mount list mutex",
	[RS_LK_DEVS] = "the cluster device mutex",
	[RS_LK_RLQ] = "a range lock's queue mutex",
};

/* Levels whose locks are plain mutexes: taking one's own again would
 * never return.  The others may be held twice at one address (two
 * appenders' shares, two users of one grant, two ranges of one lock). */
static int exclusive(unsigned level)
{
	return level != RS_LK_POS && level != RS_LK_GRANT && level != RS_LK_PIN &&
	       level != RS_LK_RANGE;
}

static __attribute__((noreturn)) void fail(const char *pre, unsigned level, unsigned other,
					   const char *post, const char *file, int line,
					   const char *func)
{
	char msg[240];

	snprintf(msg, sizeof(msg), "lock order (docs/design.md (h)): %s%s%s%s%s", pre,
		 level < RS_LK_NLEVELS ? names[level] : "a lock of no level",
		 other ? " while holding " : "", other ? names[other] : "", post);
	rs_assert_fail(msg, file, line, func);
}

void rs_lk_acquire_at(enum rs_lk_level level, const void *obj, int try, const char *file,
		      int line, const char *func)
{
	if (level <= RS_LK_NONE || level >= RS_LK_NLEVELS)
		fail("taking ", RS_LK_NLEVELS, 0, "", file, line, func);
	for (unsigned i = self.base; i < self.n; i++) {
		unsigned l = self.h[i].level;

		if (!try && l > (unsigned)level)
			fail("taking ", level, l, "", file, line, func);
		if (l == (unsigned)level && self.h[i].obj == obj && exclusive(l))
			fail("taking again ", level, 0, ", which would wait for itself", file, line,
			     func);
	}
	if (self.n >= HELD_MAX)
		fail("taking ", level, 0, " with too many locks held", file, line, func);
	self.h[self.n].obj = obj;
	self.h[self.n].level = (unsigned char)level;
	self.n++;
}

void rs_lk_release_at(enum rs_lk_level level, const void *obj, const char *file, int line,
		      const char *func)
{
	/* The latest first: locks are usually let go in reverse. */
	for (unsigned i = self.n; i-- > self.base;) {
		if (self.h[i].level != (unsigned)level || self.h[i].obj != obj)
			continue;
		for (unsigned k = i + 1; k < self.n; k++)
			self.h[k - 1] = self.h[k];
		self.n--;
		return;
	}
	fail("letting go of ", level, 0, ", which this thread does not hold", file, line, func);
}

int rs_lk_held(enum rs_lk_level level, const void *obj)
{
	if (level == RS_LK_NONE)
		return self.n > self.base;
	for (unsigned i = self.base; i < self.n; i++)
		if (self.h[i].level == (unsigned)level && (!obj || self.h[i].obj == obj))
			return 1;
	return 0;
}

unsigned rs_lk_aside(void)
{
	unsigned token = (unsigned)self.base << 8 | self.n;

	self.base = self.n;
	return token;
}

void rs_lk_restore(unsigned token)
{
	self.n = (unsigned char)(token & 0xff);
	self.base = (unsigned char)(token >> 8);
}
#else
/* Release builds: nothing to keep (lockorder.h). */
typedef int rs_lk_nothing;
#endif
