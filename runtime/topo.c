/* SPDX-License-Identifier: MIT */
/*
 * Host topology through hwloc, loaded once per process, and process liveness through
 * /proc (a dead rank must be noticed even while it is an unreaped zombie).
 */
#include "topo.h"

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

/* Reads /proc/PID/stat: state (field 3) and start time (field 22). */
static int read_stat(pid_t pid, char *state, uint64_t *start)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    /* The command name may contain spaces and parentheses: parse after the last ')'. */
    char *p = strrchr(buf, ')');
    if (p == NULL || p[1] != ' ')
        return -1;
    p += 2;
    *state = *p;
    /* p is at field 3; field 22 is 19 fields further. */
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (p == NULL)
            return -1;
        p++;
    }
    *start = strtoull(p, NULL, 10);
    return 0;
}

uint64_t rt_proc_start_time(pid_t pid)
{
    char state;
    uint64_t start;
    return read_stat(pid, &state, &start) == 0 ? start : 0;
}

int rt_proc_alive(pid_t pid, uint64_t start_time)
{
    char state;
    uint64_t start;
    if (read_stat(pid, &state, &start) != 0)
        return 0;
    if (state == 'Z' || state == 'X' || state == 'x')
        return 0;
    return start_time == 0 || start == start_time;
}
