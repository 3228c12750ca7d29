/* SPDX-License-Identifier: MIT */
/*
 * What the runtime needs to know about the host: cores, NUMA nodes, caches (hwloc,
 * loaded once per process), and process identity for liveness checks.
 */
#ifndef ARCOMM_RT_TOPO_H
#define ARCOMM_RT_TOPO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct rt_topo_summary {
    int packages;
    int numa_nodes;
    int cores;        /* usable by this process (allowed cpuset) */
    int pus;          /* hardware threads usable by this process */
    size_t l1d_bytes; /* per core */
    size_t l2_bytes;  /* per core */
    size_t l3_bytes;  /* largest last-level cache */
};

/* The host's summary; hwloc is loaded once per process (without I/O devices). */
const struct rt_topo_summary *rt_topo_summary(void);

/* The NUMA node of the CPU this thread runs on now, or -1 when unknown/single node. */
int rt_topo_current_numa_node(void);

/* A process's start time (/proc/PID/stat field 22), 0 if it does not exist. */
uint64_t rt_proc_start_time(pid_t pid);

/* Is the process with this pid and start time still running (not a zombie)? */
int rt_proc_alive(pid_t pid, uint64_t start_time);

#endif /* ARCOMM_RT_TOPO_H */
