/*
 * Asking the node's agent (shim/cluster/agent.c) for its cluster grants, for
 * `rangeshim locks` and `rangeshim agent --grants`.  The rendezvous is the
 * library's (shim/preload/cluster.c): the abstract socket named after our uid and
 * the node table's name.  Like the rest of `locks`, this must not hang on
 * a stuck node: every receive has a timeout, and an agent that does not
 * answer in time is said to, not waited for.
 */
#include "cli.h"

#include <stddef.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>

#include "clusteragent.h"
#include "clusterlock.h"
#include "segment.h"

/* The agent waits at most 0.5 s for a busy file's cache (agent.c,
 * list_grants); this leaves it room on a loaded node. */
#define AGENT_ANSWER_S 3

/* The agent's name carries the identity of the table it serves: the
 * one under shm's name now (a removed table's agent serves only the
 * processes still attached to it, agent.c). */
static int agent_name(struct sockaddr_un *addr, const char *shm)
{
	char path[300];
	struct stat st;

	if (rs_seg_path(shm, path, sizeof path) < 0 || stat(path, &st) < 0)
		memset(&st, 0, sizeof st);
	return rs_ag_name(addr->sun_path, sizeof addr->sun_path, (unsigned)getuid(), shm,
			  (uint64_t)st.st_dev, (uint64_t)st.st_ino);
}

int agent_grants(const char *shm, struct agent_grants *a)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int len = agent_name(&addr, shm);
	struct timeval tv = { AGENT_ANSWER_S, 0 };
	struct rs_ag_msg m = { .op = RS_AG_LIST }, r;
	struct ucred cr = { 0 };
	socklen_t crl = sizeof cr;
	size_t cap = 0;
	int s, fd;

	memset(a, 0, sizeof *a);
	a->state = AGENT_NONE;
	s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0 || connect(s, (struct sockaddr *)&addr,
			     (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)len)) < 0) {
		if (s >= 0)
			close(s);
		return a->state;
	}
	/* Only our own user's agent, as the library trusts (cluster.c). */
	if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cr, &crl) < 0 || cr.uid != getuid()) {
		a->state = AGENT_FOREIGN;
		a->uid = cr.uid;
		a->pid = cr.pid;
		close(s);
		return a->state;
	}
	a->state = AGENT_SILENT;
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	if (rs_ag_send(s, &m, -1) < 0)
		goto out;
	while (rs_ag_recv(s, &r, &fd) == (ssize_t)sizeof r && r.op == RS_AG_REPLY) {
		struct agent_grant *g;

		if (fd >= 0)
			close(fd);
		if (r.rc == 1) {
			a->state = AGENT_OK;
			a->pid = (int32_t)r.desc_id;
			break;
		}
		if (a->n == cap) {
			size_t c = cap ? 2 * cap : 16;
			struct agent_grant *v = realloc(a->v, c * sizeof *v);

			if (!v)
				break;	/* said as no answer: the listing is incomplete */
			a->v = v;
			cap = c;
		}
		g = &a->v[a->n++];
		*g = (struct agent_grant){ .dev = r.dev, .ino = r.ino, .start = r.gs,
					   .end = r.ge, .users = r.locks, .held_ns = r.wait_ns,
					   .flags = r.flags };
	}
out:
	close(s);
	if (a->state != AGENT_OK) {
		free(a->v);
		a->v = NULL;
		a->n = 0;
	}
	return a->state;
}

void agent_grants_free(struct agent_grants *a)
{
	free(a->v);
	a->v = NULL;
	a->n = 0;
}

void agent_grants_why(char *buf, size_t len, const struct agent_grants *a, const char *shm)
{
	const char *name = shm && shm[0] ? shm : "(default)";
	size_t held = 0;

	for (size_t i = 0; i < a->n; i++)
		held += !(a->v[i].flags & RS_AG_L_BUSY);

	switch (a->state) {
	case AGENT_NONE:
		snprintf(buf, len, "no agent serves node table '%s' (nothing held through the lock "
			 "manager)", name);
		break;
	case AGENT_FOREIGN:
		snprintf(buf, len, "the agent's socket name for node table '%s' is held by another "
			 "user (uid %u, pid %d), so our agent cannot run", name,
			 (unsigned)a->uid, (int)a->pid);
		break;
	case AGENT_SILENT:
		snprintf(buf, len, "the agent of node table '%s' did not answer within %d s; its "
			 "grants are not shown", name, AGENT_ANSWER_S);
		break;
	default:
		snprintf(buf, len, "the agent (pid %d) of node table '%s' holds %zu grants through "
			 "the lock manager", (int)a->pid, name, held);
		break;
	}
}
