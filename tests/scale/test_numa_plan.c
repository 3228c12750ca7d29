/* SPDX-License-Identifier: MIT */
/*
 * The NUMA placement logic (runtime/topo_numa.h) on hosts this machine is not: hwloc's
 * synthetic 2- and 4-socket topologies and the 2-node XML of tests/arinfo.  Which node
 * each rank falls in (one per core, in core order, wrapping), and the plan: node groups
 * in rank order, node staging only where it pays, the all-gather's crossings cut to one
 * per node, each relay a rank of the node it serves.
 */
#include "topo_numa.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

static hwloc_topology_t synthetic(const char *desc)
{
    hwloc_topology_t t;
    assert_int_equal(hwloc_topology_init(&t), 0);
    assert_int_equal(hwloc_topology_set_synthetic(t, desc), 0);
    assert_int_equal(hwloc_topology_load(t), 0);
    return t;
}

/* Every relay lies in the node it serves, and is the owner in the owner's own node. */
static void check_relays(const struct rt_numa_plan *p)
{
    for (int o = 0; o < p->nranks; o++)
        for (int m = 0; m < p->nodes; m++) {
            int r = rt_numa_relay(p, o, m);
            assert_int_equal(p->node_of[r], m);
            if (p->node_of[o] == m)
                assert_int_equal(r, o);
        }
}

static void two_sockets(void **s)
{
    (void)s;
    hwloc_topology_t t = synthetic("Package:2 NUMANode:1 Core:8 PU:2");
    int node[20];
    assert_int_equal(rt_topo_rank_nodes(t, 16, node), 2);
    for (int r = 0; r < 16; r++)
        assert_int_equal(node[r], r / 8);
    struct rt_numa_plan p;
    rt_numa_plan_make(node, 16, &p);
    assert_int_equal(p.nodes, 2);
    assert_int_equal(p.size[0], 8);
    assert_int_equal(p.size[1], 8);
    assert_true(p.contiguous);
    assert_true(p.staged);
    /* Each of 16 slices read by the 8 ranks of the other node, or crossing once. */
    assert_int_equal(p.flat_crossings, 16 * 8);
    assert_int_equal(p.staged_crossings, 16);
    check_relays(&p);
    /* Relays spread over the node: owners 0..7 into node 1 take ranks 8..15. */
    for (int o = 0; o < 8; o++)
        assert_int_equal(rt_numa_relay(&p, o, 1), 8 + o);

    /* 20 ranks on 16 cores: ranks 16..19 wrap onto node 0, so the nodes interleave. */
    assert_int_equal(rt_topo_rank_nodes(t, 20, node), 2);
    assert_int_equal(node[16], 0);
    rt_numa_plan_make(node, 20, &p);
    assert_false(p.contiguous);
    assert_int_equal(p.size[0], 12);
    assert_int_equal(p.members[p.first[0] + 8], 16); /* groups stay in rank order */
    check_relays(&p);
    hwloc_topology_destroy(t);
}

static void four_sockets(void **s)
{
    (void)s;
    hwloc_topology_t t = synthetic("Package:4 NUMANode:1 L3Cache:1 Core:4 PU:1");
    int node[16];
    assert_int_equal(rt_topo_rank_nodes(t, 16, node), 4);
    struct rt_numa_plan p;
    rt_numa_plan_make(node, 16, &p);
    assert_int_equal(p.nodes, 4);
    for (int m = 0; m < 4; m++) {
        assert_int_equal(p.size[m], 4);
        assert_int_equal(p.node_id[m], m);
    }
    assert_int_equal(p.flat_crossings, 16 * 12);
    assert_int_equal(p.staged_crossings, 16 * 3);
    assert_true(p.staged);
    check_relays(&p);
    /* 3 ranks over 4 sockets: one a node, nothing to share within a node. */
    rt_numa_plan_make(node, 3, &p);
    assert_int_equal(p.nodes, 1); /* ranks 0..2 are all on socket 0 */
    assert_false(p.staged);
    int spread[3] = {0, 1, 2};
    rt_numa_plan_make(spread, 3, &p);
    assert_int_equal(p.nodes, 3);
    assert_false(p.staged);
    hwloc_topology_destroy(t);
}

static void one_node(void **s)
{
    (void)s;
    hwloc_topology_t t = synthetic("Package:1 Core:16 PU:1");
    int node[16];
    assert_int_equal(rt_topo_rank_nodes(t, 16, node), 1);
    struct rt_numa_plan p;
    rt_numa_plan_make(node, 16, &p);
    assert_int_equal(p.nodes, 1);
    assert_false(p.staged);
    assert_int_equal(p.flat_crossings, 0);
    int unknown[4] = {-1, -1, -1, -1};
    rt_numa_plan_make(unknown, 4, &p);
    assert_int_equal(p.nodes, 1);
    assert_false(p.staged);
    hwloc_topology_destroy(t);
}

/* The 2-node XML host of arinfo's golden tests. */
static void xml_host(void **s)
{
    (void)s;
    const char *xml = getenv("NUMA_PLAN_XML");
    if (xml == NULL)
        skip();
    hwloc_topology_t t;
    assert_int_equal(hwloc_topology_init(&t), 0);
    assert_int_equal(hwloc_topology_set_xml(t, xml), 0);
    assert_int_equal(hwloc_topology_load(t), 0);
    int cores = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
    int node[RT_MAX_RANKS];
    assert_int_equal(rt_topo_rank_nodes(t, cores, node), 2);
    struct rt_numa_plan p;
    rt_numa_plan_make(node, cores, &p);
    assert_int_equal(p.nodes, 2);
    assert_true(p.contiguous);
    assert_true(p.staged);
    check_relays(&p);
    hwloc_topology_destroy(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(two_sockets),
        cmocka_unit_test(four_sockets),
        cmocka_unit_test(one_node),
        cmocka_unit_test(xml_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
