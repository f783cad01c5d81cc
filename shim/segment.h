/*
 * The node lock table's shared-memory segment: layout, creation,
 * validation and mapping.  The table logic is in nodelock.c.
 *
 * The segment is untrusted memory: any process of the user, or a bug, may
 * write anything into it.  Nothing in it is a pointer; every index read
 * from it is bounds-checked before use; every wait on it has a timeout.
 */
#ifndef RS_SEGMENT_H
#define RS_SEGMENT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define RS_SEG_MAGIC   0x31304d4853534752ull   /* "RGSSHM01" */
#define RS_SEG_VERSION 3u
#define RS_NPROC       256u
#define RS_NGRANT      1024u
/* Liveness: each attached process holds an OFD write lock on one byte of
 * the segment file at RS_LIVE_BASE + its slot; the kernel drops it when
 * the process dies, so a dead holder is told from a live one exactly, and
 * a reused pid cannot pass for it. */
#define RS_LIVE_BASE   (1ull << 40)
#define RS_LOCK_ANON   0x10000u
/* More threads than this in one grant means the count is garbage. */
#define RS_MAX_USERS   (1u << 20)

enum rs_proc_state { RS_PROC_FREE = 0, RS_PROC_LIVE = 1 };
enum rs_grant_state { RS_G_FREE = 0, RS_G_HELD = 1, RS_G_WAIT = 2 };
enum rs_grant_mode { RS_G_SHARED = 1, RS_G_EXSH = 2 };
/* Wanted bits (low half of gw): any bit set means "admit no new user;
 * the last user leaving releases the grant". */
#define RS_GW_GEN(v)    ((uint32_t)((v) >> 32))
#define RS_GW_WANTED(v) ((uint32_t)(v))
#define RS_WANTED        1u   /* another process needs it (set by revokers) */
#define RS_WANTED_SELF   2u   /* no longer in the holder's cache */

struct rs_seg_proc {
	_Atomic uint32_t state;
	int32_t pid;
	uint32_t gen;
	uint32_t pad;
	uint64_t attached_ns;       /* CLOCK_REALTIME, for `rangeshim locks` */
	uint64_t pad2[5];
};

struct rs_seg_grant {
	/* The holder's line: users is written only by the holder's threads
	 * (the fast path touches nothing else); the rest changes only under
	 * the table mutex, when the slot is filled or freed. */
	_Atomic uint32_t users;
	_Atomic uint32_t state;
	uint32_t mode;
	uint32_t owner;             /* proc slot */
	uint32_t ticket;            /* FIFO order of waiting requests */
	uint32_t pad0;
	uint64_t dev, ino;
	uint64_t start, end;        /* [start, end), end == RS_RANGE_EOF: infinity */
	uint64_t since_ns;          /* CLOCK_REALTIME when granted or queued */
	/* Written by other processes (revokers).  gen << 32 | wanted bits:
	 * one load tells the fast path both "still the incarnation I cached"
	 * and "nobody asked for it"; gen is bumped whenever the slot is freed. */
	_Atomic uint64_t gw __attribute__((aligned(64)));
	uint64_t pad[7];
};

struct rs_seg_header {
	uint64_t magic;
	uint32_t version;
	uint32_t header_size;
	uint32_t nproc, ngrant;
	uint32_t proc_size, grant_size;
	uint64_t total_size;
	/* The table lock: 0, or the holder's process slot + 1 (RS_LOCK_ANON
	 * while a process registers).  Our own futex lock rather than a
	 * robust pthread mutex, whose glibc internals (kind, robust-list
	 * pointers) would have to be trusted from untrusted memory. */
	_Atomic uint32_t lock;
	_Atomic uint32_t lock_waiters;
	_Atomic uint32_t change __attribute__((aligned(64)));  /* futex: bumped on release */
	uint32_t next_ticket;
	_Atomic uint64_t acquires, revokes, wanted_calls, reclaims;
};

struct rs_segment {
	struct rs_seg_header hdr __attribute__((aligned(4096)));
	struct rs_seg_proc procs[RS_NPROC];
	struct rs_seg_grant grants[RS_NGRANT];
};

/* Process-local view of the mapped segment. */
struct rs_seg_map {
	struct rs_segment *seg;
	int fd;                      /* holds our liveness lock; O_CLOEXEC */
	_Atomic int *fd_slot;        /* if set, where fd is published (and moved) */
	char path[300];
};

/*
 * Open or create the segment named name ("/rangeshim-1000"), created
 * O_EXCL|O_NOFOLLOW with mode 0600, and validate it (owner, mode, size,
 * magic, version, layout, every slot).  Returns 0, or -1 with a reason in
 * why (one line, for the warning).
 */
int rs_seg_attach(struct rs_seg_map *m, const char *name, int create, char *why, size_t whylen);
void rs_seg_detach(struct rs_seg_map *m);
/* An empty, valid table: what a creator writes (magic last). */
void rs_seg_init(struct rs_segment *s);
/* Full consistency check of the slots; 0 if every field is in range. */
int rs_seg_check(const struct rs_segment *s, char *why, size_t whylen);
/* Path of the file behind a segment name, under /dev/shm. */
int rs_seg_path(const char *name, char *path, size_t len);

/* Is the process in slot `slot` alive?  1 alive, 0 dead. */
int rs_seg_alive(const struct rs_seg_map *m, uint32_t slot);
/* Take our liveness lock on slot; 0, or -1 if someone live holds it. */
int rs_seg_claim(const struct rs_seg_map *m, uint32_t slot);

#endif
