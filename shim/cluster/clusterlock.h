/*
 * The node's cluster grant cache for one file: byte ranges held
 * by this node as OFD write locks through one private open file
 * description, cached until another node asks for them.  Theory in
 * clusterlock.c.  Run by the node's agent (shim/cluster/agent.c).
 *
 * Ranges are half-open [start, end) in the data space [0, RS_CL_EOF);
 * end == RS_CL_EOF means "to the end of the data space" (appends,
 * truncation).  The lock words live above it, where no application lock
 * reaches (the library clamps those to the data space, cluster.c): a
 * grant on [start, end) is an OFD write lock on RS_CL_GRANTS + [start,
 * end), and a waiter read-locks RS_CL_INTENT + its range.  Byte spaces:
 *   [0, 2^61)           data: the application's own locks stay here
 *   [2^61, 2^62)        grant space, mirroring the data space
 *   [2^62, 2^62 + 2^61) intent space, mirroring it again
 * (docs/design.md (i), "Separate byte spaces").
 */
#ifndef RS_CLUSTERLOCK_H
#define RS_CLUSTERLOCK_H

#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#define RS_CL_EOF (UINT64_C(1) << 61)
#define RS_CL_GRANTS RS_CL_EOF
#define RS_CL_INTENT (UINT64_C(1) << 62)
#define RS_CL_MAX_GRANTS 64

struct rs_cl_params {
	uint64_t hold_ns;      /* initial minimum hold time */
	uint64_t hold_min_ns;  /* the adaptive hold time stays in [min, max] */
	uint64_t hold_max_ns;
	uint64_t poll_min_ns;  /* poll interval after activity ... */
	uint64_t poll_max_ns;  /* ... doubling up to this when idle */
	/* fcntl for the lock calls; tests inject lock-manager failures. */
	int (*lock_fn)(int fd, int cmd, struct flock *fl);
	/* Cluster scope: before a grant is given back, empty it of the
	 * node's users (the node grants inside); after, let them in again.
	 * NULL: nothing to drain (the cache's own users are all there is). */
	void (*drain_fn)(void *arg, uint64_t start, uint64_t end);
	void (*undrain_fn)(void *arg);
	void *drain_arg;
	/* Lock-manager grace periods (clusterlock.c, "Grace periods"): a
	 * request refused with ENOLCK is retried for up to grace_max_ns
	 * (then the cache is lost), and warn_fn(drain_arg) is called once
	 * when such a wait begins (NULL: nothing said). */
	uint64_t grace_max_ns;
	void (*warn_fn)(void *arg);
};

enum rs_cl_state { RS_CL_FREE = 0, RS_CL_HELD, RS_CL_PENDING };

struct rs_cl_grant {
	uint64_t start, end;
	uint64_t since_ns;     /* CLOCK_MONOTONIC when the lock was granted */
	unsigned users;        /* callers between acquire and release */
	unsigned char state;   /* enum rs_cl_state */
	bool wanted;           /* another node's intent overlaps it */
	bool merging;          /* a pending grant will absorb it */
};

struct rs_cl_stats {
	uint64_t locks;        /* lock requests sent to the file system */
	uint64_t revokes;      /* grants given back because another node asked */
	uint64_t wait_ns;      /* time spent blocked in F_OFD_SETLKW */
	uint64_t polls;        /* F_OFD_GETLK calls on the intent space */
	uint64_t graces;       /* runs of ENOLCK refusals waited out or begun */
};

struct rs_cl {
	pthread_mutex_t mu;
	pthread_cond_t cv;     /* a grant left PENDING, or was given back */
	int fd;                /* the private description; not ours to close */
	int lost;              /* 0, or the errno that lost every grant */
	uint64_t grace_since;  /* first ENOLCK of a run of them, 0 if none */
	uint64_t grace_ns;     /* the next retry's back-off */
	uint64_t courtesy_until; /* a wanted grant went back: defer to waiters until */
	struct rs_cl_params p;
	uint64_t hold_ns;      /* the adaptive minimum hold time */
	uint64_t poll_ns;      /* the adaptive poll interval */
	struct rs_cl_grant g[RS_CL_MAX_GRANTS];
	struct rs_cl_stats st;
};

/* Defaults: hold 20 ms in [5 ms, 200 ms], poll every 5 to 50 ms, wait
 * out grace periods of up to 150 s. */
void rs_cl_params_default(struct rs_cl_params *p);
/* Pre: fd is an open description of a regular file that nothing else in
 * the process locks through.  Post: an empty cache over fd; returns 0. */
int rs_cl_init(struct rs_cl *c, int fd, const struct rs_cl_params *p);
/* Blocks until [start, end) lies inside one grant of this node, counted as
 * one user of it.  Returns 0, or -EIO once a lock was lost (never an
 * unprotected success), -EOVERFLOW for ranges outside the data space,
 * -ENOLCK when the grant table is full of grants in use. */
int rs_cl_acquire(struct rs_cl *c, uint64_t start, uint64_t end);
/* The same, also saying which grant [*gs, *ge) holds the range, and what
 * this acquisition cost: lock requests sent (*locks) and ns blocked in
 * F_OFD_SETLKW (*wait_ns).  Any out pointer may be NULL. */
int rs_cl_acquire_ex(struct rs_cl *c, uint64_t start, uint64_t end, uint64_t *gs, uint64_t *ge,
		     uint64_t *locks, uint64_t *wait_ns);
/* Ends one use of the grant holding [start, end) (the range of a
 * successful acquire).  A wanted grant whose hold time has passed is
 * given back by its last user. */
void rs_cl_release(struct rs_cl *c, uint64_t start, uint64_t end);
/* Looks for other nodes' intent on this node's grants; gives back those
 * idle and past their hold time.  Returns how many it gave back, or -EIO
 * once a lock was lost.  Call it every rs_cl_poll_interval() ns. */
int rs_cl_poll(struct rs_cl *c);
uint64_t rs_cl_poll_interval(struct rs_cl *c);
/* Copies up to max held grants into out; returns how many there are. */
int rs_cl_grants(struct rs_cl *c, struct rs_cl_grant *out, int max);
/* The same, waiting for the cache no later than deadline (CLOCK_REALTIME);
 * -EBUSY when it stays busy: a poll or give-back holds it across round
 * trips of the file system, and a give-back across the drain of the
 * node, which waits for the calls inside the range (a listing must not
 * wait for a stopped process). */
int rs_cl_grants_until(struct rs_cl *c, struct rs_cl_grant *out, int max,
		       const struct timespec *deadline);
/* 0 while every grant is intact, else -EIO: calls inside a grant check it
 * after their I/O and fail with EIO rather than report unprotected work. */
int rs_cl_check(struct rs_cl *c);
/* Pre: no users.  Writes back and unlocks every grant. */
void rs_cl_fini(struct rs_cl *c);
/* c's mutex (c->mu), at its level of the lock order (lockorder.h), for
 * the agent's own short sections on c's counters and its lost file. */
void rs_cl_lock(struct rs_cl *c);
void rs_cl_unlock(struct rs_cl *c);

#endif
