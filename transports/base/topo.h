/* SPDX-License-Identifier: MIT */
/*
 * What every layer may know about the host: its summary (cores, NUMA nodes, caches),
 * which runtime/ fills from hwloc and hands over in struct comm, and process identity
 * for liveness checks.
 */
#ifndef ARCOMM_BASE_TOPO_H
#define ARCOMM_BASE_TOPO_H

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

/* A process's start time (/proc/PID/stat field 22), 0 if it does not exist. */
uint64_t rt_proc_start_time(pid_t pid);

/* Is the process with this pid and start time still running (not a zombie)? */
int rt_proc_alive(pid_t pid, uint64_t start_time);

#endif /* ARCOMM_BASE_TOPO_H */
