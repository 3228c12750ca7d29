/* SPDX-License-Identifier: MIT */
/*
 * Host topology through hwloc, loaded once per process.
 */
#include "comm_internal.h"

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
