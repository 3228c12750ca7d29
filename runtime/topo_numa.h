/* SPDX-License-Identifier: MIT */
/*
 * NUMA placement of a communicator's ranks (topo.c): which node each rank falls in, and
 * the plan that keeps crossings between nodes to one per node where the result must
 * stay the rank-order reduction.  Pure functions of a topology and a placement, so that
 * the tests drive them with hwloc's synthetic 2- and 4-socket hosts and arinfo prints
 * what the library would do.
 */
#ifndef ARCOMM_RT_TOPO_NUMA_H
#define ARCOMM_RT_TOPO_NUMA_H

#include "comm_base.h"

#include <hwloc.h>
#include <stdbool.h>
#include <stdint.h>

#define RT_NUMA_MAX_NODES 64

/*
 * The node (hwloc logical index, 0 when the host has none) of each of nranks ranks
 * placed one per core in hwloc's logical core order, wrapping when the ranks outnumber
 * the cores: where arrun --bind core and mpirun --bind-to core put them.  Returns the
 * number of NUMA nodes of the topology (at least 1).
 */
int rt_topo_rank_nodes(hwloc_topology_t t, int nranks, int *node);

/*
 * The plan.  Reducing within a node first and crossing once with a node's partial result
 * would change the order of the additions (rank order interleaves the nodes' ranks or
 * continues one node's sum with the next node's elements one by one), so the crossings
 * saved are the data's, not partial sums': each slice's owner still reads every rank's
 * raw input (each input byte crosses at most once, as on the flat paths), and the
 * result of a slice crosses once into each other node, where one rank of that node
 * (the relay) copies it into node-local scratch that the node's ranks read, instead of
 * every rank of every other node reading it across.
 */
struct rt_numa_plan {
    int nranks;
    int nodes;                      /* distinct nodes the ranks fall in */
    int node_of[RT_MAX_RANKS];      /* rank -> plan node 0..nodes-1 (order of first rank) */
    int node_id[RT_NUMA_MAX_NODES]; /* plan node -> the topology's node index */
    int first[RT_NUMA_MAX_NODES];   /* plan node -> its first entry in members */
    int size[RT_NUMA_MAX_NODES];    /* plan node -> its ranks */
    int members[RT_MAX_RANKS];      /* ranks grouped by plan node, each group in rank order */
    bool contiguous;                /* every node's ranks are consecutive rank numbers */
    bool staged;                    /* node staging pays: >= 2 nodes, one with >= 2 ranks */
    uint64_t flat_crossings;        /* slice results read across nodes, per slice set */
    uint64_t staged_crossings;      /* the same with one crossing per node */
};

/* The plan for ranks on nodes node[0..nranks) (any integers; -1: unknown, one node). */
void rt_numa_plan_make(const int *node, int nranks, struct rt_numa_plan *plan);

/* The rank of plan node m that copies slice owner's result into m (its one crossing),
 * spread over m's ranks; the owner itself when it lies in m. */
int rt_numa_relay(const struct rt_numa_plan *plan, int owner, int m);

#endif /* ARCOMM_RT_TOPO_NUMA_H */
