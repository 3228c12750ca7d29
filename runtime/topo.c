/* SPDX-License-Identifier: MIT */
/*
 * Host topology through hwloc, loaded once per process.
 */
#include "comm_internal.h"
#include "topo_numa.h"

#include <fcntl.h>
#include <hwloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct rt_topo_summary summary;
static hwloc_topology_t topology;
static pthread_once_t topo_once = PTHREAD_ONCE_INIT;

static size_t cache_size(hwloc_topology_t t, hwloc_obj_type_t type)
{
    size_t best = 0;
    int n = hwloc_get_nbobjs_by_type(t, type);
    for (int i = 0; i < n; i++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(t, type, i);
        if (o->attr && o->attr->cache.size > best)
            best = o->attr->cache.size;
    }
    return best;
}

static void topo_load(void)
{
    summary.packages = summary.numa_nodes = summary.cores = summary.pus = 1;
    if (hwloc_topology_init(&topology) != 0)
        return;
    if (hwloc_topology_load(topology) != 0) {
        hwloc_topology_destroy(topology);
        topology = NULL;
        return;
    }
    /* hwloc restricts to the allowed cpuset by default: what a rank can really use. */
    int v;
    if ((v = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_PACKAGE)) > 0)
        summary.packages = v;
    if ((v = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_NUMANODE)) > 0)
        summary.numa_nodes = v;
    if ((v = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_CORE)) > 0)
        summary.cores = v;
    if ((v = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_PU)) > 0)
        summary.pus = v;
    summary.l1d_bytes = cache_size(topology, HWLOC_OBJ_L1CACHE);
    summary.l2_bytes = cache_size(topology, HWLOC_OBJ_L2CACHE);
    summary.l3_bytes = cache_size(topology, HWLOC_OBJ_L3CACHE);
}

const struct rt_topo_summary *rt_topo_summary(void)
{
    pthread_once(&topo_once, topo_load);
    return &summary;
}

int rt_topo_current_numa_node(void)
{
    rt_topo_summary();
    if (topology == NULL || summary.numa_nodes < 2)
        return -1;
    int cpu = sched_getcpu();
    if (cpu < 0)
        return -1;
    hwloc_obj_t pu = hwloc_get_pu_obj_by_os_index(topology, (unsigned)cpu);
    if (pu == NULL)
        return -1;
    hwloc_obj_t node =
        hwloc_get_next_obj_covering_cpuset_by_type(topology, pu->cpuset, HWLOC_OBJ_NUMANODE, NULL);
    return node ? (int)node->os_index : -1;
}

int rt_topo_rank_nodes(hwloc_topology_t t, int nranks, int *node)
{
    int cores = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
    int nodes = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
    for (int r = 0; r < nranks; r++) {
        node[r] = 0;
        if (cores <= 0 || nodes < 2)
            continue;
        hwloc_obj_t core = hwloc_get_obj_by_type(t, HWLOC_OBJ_CORE, (unsigned)(r % cores));
        hwloc_obj_t n =
            hwloc_get_next_obj_covering_cpuset_by_type(t, core->cpuset, HWLOC_OBJ_NUMANODE, NULL);
        node[r] = n ? (int)n->logical_index : 0;
    }
    return nodes > 0 ? nodes : 1;
}

void rt_numa_plan_make(const int *node, int nranks, struct rt_numa_plan *plan)
{
    memset(plan, 0, sizeof(*plan));
    plan->nranks = nranks;
    for (int r = 0; r < nranks; r++) {
        int id = node[r] < 0 ? -1 : node[r], m = 0;
        while (m < plan->nodes && plan->node_id[m] != id)
            m++;
        if (m == plan->nodes) {
            if (plan->nodes == RT_NUMA_MAX_NODES)
                m = 0; /* more nodes than a plan keeps: the rest count as the first */
            else
                plan->node_id[plan->nodes++] = id;
        }
        plan->node_of[r] = m;
        plan->size[m]++;
    }
    for (int m = 1; m < plan->nodes; m++)
        plan->first[m] = plan->first[m - 1] + plan->size[m - 1];
    int fill[RT_NUMA_MAX_NODES] = {0};
    plan->contiguous = true;
    for (int r = 0; r < nranks; r++) {
        int m = plan->node_of[r];
        plan->members[plan->first[m] + fill[m]++] = r;
        if (r > 0 && m != plan->node_of[r - 1] && fill[m] > 1)
            plan->contiguous = false;
    }
    bool shared = false;
    for (int m = 0; m < plan->nodes; m++)
        shared = shared || plan->size[m] >= 2;
    plan->staged = plan->nodes >= 2 && shared;
    for (int o = 0; o < nranks; o++) {
        plan->flat_crossings += (uint64_t)(nranks - plan->size[plan->node_of[o]]);
        plan->staged_crossings += (uint64_t)(plan->nodes - 1);
    }
}

int rt_numa_relay(const struct rt_numa_plan *plan, int owner, int m)
{
    if (plan->node_of[owner] == m)
        return owner;
    return plan->members[plan->first[m] + owner % plan->size[m]];
}
