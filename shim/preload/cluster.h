/*
 * Cluster scope in the library: which files it covers, and
 * (cluster.c) the cluster grant a node grant must lie inside.
 */
#ifndef RS_CLUSTER_H
#define RS_CLUSTER_H

#include <stdint.h>
#include <sys/types.h>

/* Does cluster scope cover files of device dev?  1 yes, 0 no: node scope
 * for them, after one line per device saying why.  Only in cluster scope;
 * the slow path (a node grant is being acquired). */
int rs_cluster_dev(uint64_t dev);

/* A pin: the agent holds the cluster grant [lo, hi) (node space: hi is
 * RS_RANGE_EOF for "to the end") for us until rs_cluster_unpin. */
struct rs_cl_pin {
	int sock;
	int pslot;	/* counted in as a pin in progress (cluster.c, inpin) */
	uint64_t lo, hi;
};

/*
 * Pre: [s, e) is a node request on file (dev, ino) in cluster scope; the
 * caller holds no node grant it would refuse to give back for it.
 * Post: 0 with a cluster grant of this node holding [s, e) pinned in *p,
 * and a copy of the agent's description of the file kept by this
 * process; or -EIO: the node lost the file's cluster locks; or -EMFILE,
 * -ENFILE: no descriptor was free for the pin (the call must fail with
 * that errno, never run).  Waits, saying why, while no agent answers.
 */
int rs_cluster_pin(uint64_t dev, uint64_t ino, uint64_t s, uint64_t e, int write,
		   struct rs_cl_pin *p);
/* Pre: *p is a pin rs_cluster_pin returned, not yet unpinned.  Post: the
 * agent may give its grant back; the pin no longer counts in. */
void rs_cluster_unpin(struct rs_cl_pin *p);
/* Every fd of this process on (dev, ino) is closed: close our copies of
 * the agent's descriptions of it, unless a pin of it is in progress or
 * the node table holds a grant of ours on it (rs_grant_held). */
void rs_cluster_file_closed(uint64_t dev, uint64_t ino);
/* grants.c: does the node table hold a grant of this process (cached, in
 * use or waited for) on (dev, ino)? */
int rs_grant_held(uint64_t dev, uint64_t ino);
uint64_t rs_cluster_now_ns(void);
void rs_cluster_fork_child(void);

/* The application's own lock calls (cluster.c, "Separate byte spaces").
 * rs_cluster_lock_args: 1 with *fl the argument to pass instead of arg to
 * fcntl's lock command cmd on fd, then rs_cluster_lock_end(cmd, arg, fl,
 * result) gives the result back; 0: pass the call as it is.  Neither
 * changes errno but to report what the kernel would (EFAULT). */
struct flock;
int rs_cluster_lock_args(int fd, int cmd, const void *arg, struct flock *fl);
int rs_cluster_lock_end(int cmd, void *arg, struct flock *fl, int r);
int rs_cluster_lockf(int fd, int cmd, off_t len);
int rs_cluster_flock_args(int fd, int op, int *cmd, struct flock *fl);

/* Set by the slow path when a cluster file's call must fail: the errno
 * to fail it with when above 1 (EMFILE, ENFILE: rs_cluster_pin), else
 * EIO; read only after the slow path ran. */
extern __thread int rs_cl_eio __attribute__((tls_model("initial-exec")));

#endif
