/*
 * rangeshim agent: the command's side of the node's agent.  It parses
 * the options, lists a running agent's grants (--grants, through
 * agentq.c), and otherwise runs the agent, whose runtime is in
 * shim/cluster/agent.c (a component of cluster scope, not a command).
 */
#include "cli.h"

#include <sys/syscall.h>

#include "agent.h"
#include "clusteragent.h"
#include "clusterlock.h"
#include "fileid.h"
#include "table.h"

int cmd_agent(const struct command *cmd, int argc, char **argv);

/* The path of (dev, ino) as the agent pid has it open, escaped; "?" if
 * none is found. */
static void agent_path(struct fd_list *fds, int32_t pid, uint64_t dev, uint64_t ino, char *out,
		       size_t len)
{
	char link[64], name[PATH_MAX];

	snprintf(out, len, "?");
	if (pid <= 0)
		return;
	if (!fds->loaded)
		load_fds(fds, pid);
	for (size_t i = 0; i < fds->n; i++) {
		ssize_t n;

		if (fds->v[i].dev != dev || fds->v[i].ino != ino)
			continue;
		snprintf(link, sizeof link, "/proc/%d/fd/%d", (int)pid, fds->v[i].fd);
		n = readlink(link, name, sizeof name - 1);
		if (n > 0 && name[0] == '/') {
			name[n] = '\0';
			escape_text(name, out, len);
			return;
		}
	}
}

/* `rangeshim agent --grants`: ask the running agent. */
static int print_grants(const char *shm)
{
	struct fd_list fds = { 0 };
	struct agent_grants a;
	char line[512];

	if (agent_grants(shm, &a) != AGENT_OK) {
		agent_grants_why(line, sizeof line, &a, shm);
		puts(line);
		return 0;
	}
	printf("%-20s %20s %20s %6s %6s %10s %s\n", "DEV:INO", "START", "END", "USERS",
	       "WANTED", "HELD_MS", "PATH");
	for (size_t k = 0; k < a.n; k++) {
		const struct agent_grant *g = &a.v[k];
		char file[RS_FILE_ID_LEN], end[24], path[PATH_MAX * 4];

		rs_file_id(file, sizeof file, g->dev, g->ino);
		/* The agent holds every file it locks open: its fds name it. */
		agent_path(&fds, a.pid, g->dev, g->ino, path, sizeof path);
		if (g->flags & RS_AG_L_BUSY) {
			printf("%-20s busy: a grant is being given back (the node drains) %s\n", file,
			       path);
			continue;
		}
		if (g->end >= RS_CL_EOF)
			snprintf(end, sizeof end, "EOF");
		else
			snprintf(end, sizeof end, "%llu", (unsigned long long)g->end);
		printf("%-20s %20llu %20s %6llu %6s %10llu %s\n", file, (unsigned long long)g->start,
		       end, (unsigned long long)g->users, g->flags & RS_AG_L_WANTED ? "yes" : "no",
		       (unsigned long long)(g->held_ns / 1000000), path);
	}
	free(fds.v);
	agent_grants_free(&a);
	return 0;
}

/* The options: -1 to go on, or the exit status (help, a bad option). */
static int agent_options(const struct command *cmd, int argc, char **argv, const char **shm,
			 int *fg, int *grants)
{
	int c;

	optind = 1;
	while ((c = iface_getopt(cmd->name, argc, argv)) != -1) {
		switch (c) {
		case 'f':
			*fg = 1;
			break;
		case 'g':
			*grants = 1;
			break;
		case OPT_SHM:
			*shm = optarg;
			break;
		case 'h':
			iface_help(cmd->name, stdout);
			return 0;
		default:
			return getopt_error(c, argv);
		}
	}
	return -1;
}

int cmd_agent(const struct command *cmd, int argc, char **argv)
{
	const char *shm = getenv("RANGESHIM_SHM");
	int fg = 0, grants = 0, rc;

	/* Nothing of the process that started us: its pipes, its files. */
	rs_sys(SYS_close_range, 3U, ~0U, 0);
	rc = agent_options(cmd, argc, argv, &shm, &fg, &grants);
	if (rc >= 0)
		return rc;
	if (!shm)
		shm = "";
	if (grants)
		return print_grants(shm);
	return rs_agent_run(shm, fg);
}
