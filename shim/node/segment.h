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
#define RS_SEG_VERSION 10u
/* A node runs hundreds of processes (MPI ranks, tools): 4096 slots, and
 * four grant slots per process.  At 64 and 128 bytes a slot the segment
 * is 2.3 MiB.  A registrant that still finds every slot held by a live
 * process waits for one (nodelock.c, "Registration"); it never runs
 * without the table. */
#define RS_NPROC       4096u
#define RS_NGRANT      16384u
/* Grants are chained per file: a file's grants hang off one of these
 * buckets (by its (dev, ino)), so an acquisition looks at the grants of
 * its own file, not at the whole table (nodelock.c, "Per-file chains"). */
#define RS_NBUCKET     1024u
/* Liveness: each attached process holds an OFD write lock on one byte of
 * the segment file at RS_LIVE_BASE + its slot; the kernel drops it when
 * the process dies, so a dead holder is told from a live one exactly, and
 * a reused pid cannot pass for it. */
#define RS_LIVE_BASE   (1ull << 40)
/* The table lock word: the holder's slot + 1 in the low 13 bits, and a
 * nonce drawn at registration above them, so that a registrant that
 * inherits a dead holder's slot is never taken for that holder (nodelock.c). */
#define RS_LOCK_SLOT_BITS 13
#define RS_LOCK_SLOT(v)   ((v) & ((1u << RS_LOCK_SLOT_BITS) - 1))
#define RS_LOCK_ID(slot, nonce) (((slot) + 1) | ((nonce) << RS_LOCK_SLOT_BITS))
_Static_assert(RS_NPROC < (1u << RS_LOCK_SLOT_BITS), "lock word slot field too small");
_Static_assert((RS_NGRANT & (RS_NGRANT - 1)) == 0, "grant indices are masked (grants.c)");
/* More threads than this in one grant means the count is garbage. */
#define RS_MAX_USERS   (1u << 20)

enum rs_proc_state { RS_PROC_FREE = 0, RS_PROC_LIVE = 1 };
enum rs_grant_state { RS_G_FREE = 0, RS_G_HELD = 1, RS_G_WAIT = 2 };
/* RS_G_APPEND: O_APPEND writes, compatible with other processes'
 * appends, which the kernel orders on one node, and with nothing else, so
 * readers and truncaters of the tail are still excluded (nodelock.c,
 * "Appenders").  The values are sets of the calls a cached grant of that
 * mode serves, so the fast path's test is one AND with the call's mode
 * (grants.h): bit 0 reads (RS_RL_READ), bit 1 writes (RS_RL_WRITE),
 * bit 2 appends (RS_GRANT_APPEND).  EXSH serves all three; an APPEND
 * grant only appends, since other processes append inside it. */
enum rs_grant_mode { RS_G_SHARED = 1, RS_G_EXSH = 7, RS_G_APPEND = 4 };
/* A WAIT entry that has waited long enough: later requests queue behind
 * it while its owner is present (nodelock.c, "Fairness"). */
#define RS_WF_STARVED 1u
/* Present: a waiter's last scan (beat_ns) is at most this old.  A waiter
 * wakes at least every 20 ms (rs_nt_slice_ns) while it runs; one that is
 * stopped, frozen or not scheduled stops beating, and after this long
 * its place in the queue holds nobody back. */
#define RS_PRESENT_NS (50ull * 1000 * 1000)
/*
 * A grant's state word, gw: generation << 32 | wanted bits | users.
 *
 * One word, so that every decision about a grant is one compare-and-swap
 * on it: a thread enters only if the generation is the one it cached and
 * no wanted bit is set, a revoker frees only if users is 0, and nobody can
 * count itself into an incarnation of the slot it did not mean (a stale
 * cache word fails the CAS; it never touches another grant's count).
 * Wanted bits mean "admit no new user; the last user leaving releases the
 * grant".  The generation moves on whenever the slot is freed.
 */
#define RS_GW_GEN(v)     ((uint32_t)((v) >> 32))
#define RS_WANTED        (1u << 31)   /* another process needs it (revokers) */
#define RS_WANTED_SELF   (1u << 30)   /* no longer in the holder's cache */
/* Someone sleeps on the word's low half (a futex): whoever changes the
 * word from a value with this bit wakes them (nodelock.c, "Waiting").
 * Set only on WAIT entries and on grants with a wanted bit, so it never
 * lets anyone in or keeps anyone out of the fast path. */
#define RS_SLEEPERS      (1u << 29)
#define RS_GW_USERS_MASK ((1u << 29) - 1)
#define RS_GW_WANTED(v)  ((uint32_t)(v) & (RS_WANTED | RS_WANTED_SELF))
#define RS_GW_USERS(v)   ((uint32_t)(v) & RS_GW_USERS_MASK)
#define RS_GW_FREE(gen)  ((uint64_t)(gen) << 32)
/* The futex word: gw's low half (wanted bits, sleepers, users). */
#define RS_GW_FUTEX(g) ((_Atomic uint32_t *)(void *)&(g)->gw + \
			(__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__))

struct rs_seg_proc {
	_Atomic uint32_t state;
	int32_t pid;
	uint32_t gen;
	uint32_t pad;
	uint64_t attached_ns;       /* CLOCK_REALTIME, for `rangeshim locks` */
	uint64_t pad2[5];
};

struct rs_seg_grant {
	/* Changes only under the table lock, when the slot is filled or
	 * freed; the fast path reads start, end and mode racily and trusts
	 * them only if gw still has the generation it cached. */
	uint32_t next;              /* next grant of its bucket's chain + 1; 0 ends it */
	_Atomic uint32_t state;
	uint32_t mode;
	uint32_t owner;             /* proc slot */
	uint32_t ticket;            /* order of requests: a WAIT entry's, or a grant's stamp */
	uint32_t flags;             /* RS_WF_*: of WAIT entries */
	uint64_t dev, ino;
	uint64_t start, end;        /* [start, end), end == RS_RANGE_EOF: infinity */
	uint64_t since_ns;          /* CLOCK_REALTIME when granted or queued */
	/* The state word (RS_GW_*): the holder's threads count themselves
	 * in and out, other processes set wanted bits and free it. */
	_Atomic uint64_t gw __attribute__((aligned(64)));
	/* A WAIT entry: CLOCK_MONOTONIC of its owner's last scan.  Written
	 * under the table lock; a garbage value only costs fairness. */
	uint64_t beat_ns;
	/* A strided grant (nodelock.c, "Strided grants") holds only the
	 * blocks of blen bytes at start + k*stride below end (stride.h);
	 * stride 0: all of [start, end).  Written and read as start is. */
	uint64_t stride, blen;
	uint64_t pad[4];
};

struct rs_seg_header {
	uint64_t magic;
	uint32_t version;
	uint32_t header_size;
	uint32_t nproc, ngrant;
	uint32_t proc_size, grant_size;
	uint64_t total_size;
	/* The table lock: 0, or the holder's process slot + 1.  A process
	 * claims its slot's liveness byte before it first takes the lock, so
	 * every holder can be checked for life.  Our own futex lock rather
	 * than a robust pthread mutex, whose glibc internals (kind,
	 * robust-list pointers) would have to be trusted from untrusted
	 * memory. */
	_Atomic uint32_t lock;
	_Atomic uint32_t lock_waiters;
	/* Waiters sleep on lock_seq, bumped at every release; lock_woken
	 * says when the last wake went out (ms), until its waiter runs
	 * (nodelock.c, table_unlock_as).  Both in what was padding: the
	 * layout is unchanged.  A process of an earlier build waits on lock
	 * itself and wakes there, so between builds a waiter may sleep its
	 * whole 10 ms (limitations.md). */
	_Atomic uint32_t lock_seq;
	_Atomic uint32_t lock_woken;
	/* Where the next registrant's look for the dead starts (nodelock.c,
	 * "Registration"); a hint, taken modulo procs_hi.  In the line's
	 * padding, so that the version-10 layout holds (below). */
	_Atomic uint32_t sweep_at;
	_Atomic uint32_t change __attribute__((aligned(64)));  /* futex: bumped on release */
	_Atomic uint32_t change_waiters;                       /* asleep on change */
	uint32_t next_ticket;
	/* Under the table lock: grant slots at or above used_hi are all
	 * FREE, and nused slots are not.  Scans stop at used_hi and check the
	 * count, so a value that hides a grant is noticed (nodelock.c). */
	uint32_t used_hi, nused;
	/* Every process slot ever claimed lies below this (nodelock.c,
	 * "Registration"); raised by claimants, a hint only. */
	_Atomic uint32_t procs_hi;
	_Atomic uint64_t acquires, revokes, wanted_calls, reclaims;
	/* Under the table lock, an index of the grant slots, rebuilt from
	 * the slots whenever it disagrees with them (nodelock.c, "Per-file
	 * chains"): each bucket's chain of used slots and their number, and
	 * a bit per slot, set while it is used (where to find a free one). */
	struct { uint32_t head, count; } chains[RS_NBUCKET];
	uint64_t used_map[RS_NGRANT / 64];
};

/* The header's first line ends where every version-10 build expects it:
 * a field added to it must fit in its padding. */
_Static_assert(__builtin_offsetof(struct rs_seg_header, change) == 64, "header layout moved");

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
	uint64_t dev, ino;           /* the file fd was opened on; 0 if not known */
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
/* Header and layout: what attach requires.  0 if usable. */
int rs_seg_check_header(const struct rs_segment *s, char *why, size_t whylen);
/* Full consistency check of the slots; 0 if every field is in range
 * (for tools: the library copes with malformed slots one by one). */
int rs_seg_check(const struct rs_segment *s, char *why, size_t whylen);
/* A non-free grant's fields are in range. */
int rs_seg_grant_ok(const struct rs_seg_grant *g);
/* Path of the file behind a segment name: /dev/shm/NAME, or for the
 * empty name (RANGESHIM_SHM unset) the default table (segment.c). */
int rs_seg_path(const char *name, char *path, size_t len);

/* Is the process in slot `slot` alive?  1 alive, 0 dead.  A system
 * call that walks the lock of every attached process. */
int rs_seg_alive(const struct rs_seg_map *m, uint32_t slot);
/* How many rs_seg_alive looks this process has made (tests count them). */
extern _Atomic uint64_t rs_seg_looks;
/* Take our liveness lock on slot; 0, or -1 if someone live holds it. */
int rs_seg_claim(const struct rs_seg_map *m, uint32_t slot);

#endif
