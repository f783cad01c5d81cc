/*
 * The node's agent in cluster scope, as a runtime: the one owner of the
 * node's cluster grants (agent.c, at the top; docs/design.md (i)).  The
 * command's `rangeshim agent` (shim/cli/agent.c) parses the options and
 * runs it.
 */
#ifndef RS_AGENT_H
#define RS_AGENT_H

/*
 * Serves the processes of node table shm ("" the default; made if need
 * be) from its socket, in the background unless fg, which also says on
 * stderr what it does.  Pre: called once, as the process's work (its
 * state is the process's, and the command closed every inherited
 * descriptor first).  Returns an exit status: 0 when another agent
 * already serves the table, 1 when the table or the socket cannot be
 * had (having said why); the agent itself exits 0 from its poller once
 * idle, holding no file.
 */
int rs_agent_run(const char *shm, int fg);

#endif
