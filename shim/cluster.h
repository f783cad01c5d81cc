/*
 * Cluster scope in the library (issue 11): which files it covers, and
 * (cluster.c) the cluster grant a node grant must lie inside.
 */
#ifndef RS_CLUSTER_H
#define RS_CLUSTER_H

#include <stdint.h>

/* Does cluster scope cover files of device dev?  1 yes, 0 no: node scope
 * for them, after one line per device saying why.  Only in cluster scope;
 * the slow path (a node grant is being acquired). */
int rs_cluster_dev(uint64_t dev);
/* Until the agent is wired in: say once that trusted files keep node scope. */
void rs_cluster_unbuilt(void);

#endif
