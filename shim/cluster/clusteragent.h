/*
 * The wire protocol between a process in cluster scope (shim/preload/cluster.c)
 * and its node's agent (`rangeshim agent`, shim/cluster/agent.c): one Unix
 * stream connection per pin, in the abstract namespace, named per user
 * and per node table: the table's name and the (device, inode) of its
 * file, so that an agent serves only the processes of the one table it
 * drains (a table removed and made again under the same name is another
 * table, with another agent).  docs/design.md (i) has the reasoning.
 *
 *   process -> agent   PIN {dev, ino, start, end, desc_id, tdev, tino}
 *                      [+ the process's fd of the file, SCM_RIGHTS, when
 *                      the agent asked for it]
 *   agent -> process   REPLY {rc, gs, ge, locks, wait_ns, desc_id}  [+ the
 *                      agent's own description, when rc is 0 and the
 *                      process does not hold it already (PIN's desc_id)]
 *   process -> agent   UNPIN (or the connection closes: same)
 *
 * Between REPLY and UNPIN the cluster grant [gs, ge) cannot be given
 * back, so the node grant the process takes meanwhile lies inside it.
 */
#ifndef RS_CLUSTERAGENT_H
#define RS_CLUSTERAGENT_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "rawsyscall.h"

#define RS_AG_PIN   1u
#define RS_AG_UNPIN 2u
#define RS_AG_REPLY 3u
#define RS_AG_LIST  4u   /* `rangeshim locks`, `agent --grants`: one REPLY
			  * per grant (dev, ino, gs, ge; locks = users,
			  * wait_ns = held for ns, flags RS_AG_L_*), then
			  * rc 1 with desc_id = the agent's pid */

#define RS_AG_L_WANTED 1u  /* LIST: another node waits for the grant */
#define RS_AG_L_RDLCK  2u  /* LIST: a read lock (a file the user cannot write) */
#define RS_AG_L_BUSY   4u  /* LIST: no grant, the file's cache stayed busy (a
			    * give-back draining the node): its grants unknown */

#define RS_AG_HAS_FD  2u   /* PIN: my fd of the file comes with this */
#define RS_AG_OLD_FD  4u   /* PIN: the fd is a dead agent's description:
			    * drain the node and unlock everything on it */
#define RS_AG_ADOPTED 8u   /* REPLY: done; the old description holds no lock */
#define RS_AG_CURRENT 16u  /* REPLY: that description is the agent's own */
#define RS_AG_WRITE   32u  /* PIN: for a write (the agent may hold only read
			    * locks on a file the user cannot write) */
#define RS_AG_GRACE   64u  /* REPLY: the lock manager refused the file's lock
			    * requests for a while (ENOLCK: a grace period?)
			    * and this pin waited it out */

/* REPLY rc: 0, -EIO (the lock was lost: fail the call), -ENOENT (send
 * the fd: the agent does not know the file), -EROFS (a write on a file
 * the agent holds read-only: fail the call), -EPERM (the agent cannot
 * open the file at all: fail the call), -EBUSY (the agent's file table
 * is full of files with pins in progress: wait), -ESTALE (the agent
 * serves another node table than the process's: wait), other -errno
 * (retry). */
struct rs_ag_msg {
	uint32_t op, flags;
	int64_t rc;
	uint64_t dev, ino, start, end;   /* PIN; cluster data space */
	uint64_t gs, ge;                 /* REPLY: the grant holding it */
	uint64_t locks, wait_ns;         /* REPLY: what the pin cost */
	uint64_t revokes;                /* REPLY: give-backs to other nodes not yet reported */
	uint64_t desc_id;                /* REPLY: which description of the agent's the fd is;
					  * PIN: the one the process holds a copy of (0: none) */
	uint64_t tdev, tino;             /* PIN: the process's node table (its file) */
};

/* The socket's name (abstract: name[0] is NUL); returns its length for
 * the address.  uid, the node table's name (RANGESHIM_SHM, "" for the
 * default) and the (device, inode) of the table's file, hashed so that
 * any allowed name fits. */
static inline int rs_ag_name(char *buf, size_t len, unsigned uid, const char *shm,
			     uint64_t tdev, uint64_t tino)
{
	uint64_t h = 1469598103934665603ULL;

	for (const char *p = shm; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ULL;
	for (int i = 0; i < 16; i++)
		h = (h ^ (unsigned char)((i < 8 ? tdev : tino) >> (8 * (i & 7)))) *
		    1099511628211ULL;
	buf[0] = '\0';
	return 1 + snprintf(buf + 1, len - 1, "rangeshim-agent2.%u.%016llx", uid,
			    (unsigned long long)h);
}

/* One message each way, with at most one descriptor (SCM_RIGHTS): the
 * agent and the library speak through these two alone.  A received
 * descriptor is close-on-exec; *fd is -1 when none came.  A descriptor
 * that came but could not be installed (no free number: the kernel sets
 * MSG_CTRUNC and drops it) makes the message unusable: -1 with errno
 * EMFILE, what the kernel's own allocation of the number failed with
 * (a pin must never go ahead without the copy it carried). */
static inline ssize_t rs_ag_recv(int s, struct rs_ag_msg *m, int *fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { m, sizeof *m };
	struct msghdr h = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof cbuf };
	ssize_t n;

	*fd = -1;
	do
		n = recvmsg(s, &h, MSG_CMSG_CLOEXEC | MSG_WAITALL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return n;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
		    c->cmsg_len >= CMSG_LEN(sizeof(int)))
			memcpy(fd, CMSG_DATA(c), sizeof(int));
	if (h.msg_flags & MSG_CTRUNC) {
		if (*fd >= 0)	/* not close(): the library wraps it */
			rs_sys(SYS_close, *fd);
		*fd = -1;
		errno = EMFILE;
		return -1;
	}
	return n;
}

static inline int rs_ag_send(int s, const struct rs_ag_msg *m, int fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { (void *)m, sizeof *m };
	struct msghdr h = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (fd >= 0) {
		struct cmsghdr *c;

		memset(cbuf, 0, sizeof cbuf);
		h.msg_control = cbuf;
		h.msg_controllen = sizeof cbuf;
		c = CMSG_FIRSTHDR(&h);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	/* Not sendmsg(): the library wraps it. */
	return rs_sys(SYS_sendmsg, s, &h, MSG_NOSIGNAL) == (long)sizeof *m ? 0 : -1;
}

#endif
