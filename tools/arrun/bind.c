/* SPDX-License-Identifier: MIT */
/*
 * arrun --bind: where each rank runs.  The plan is made once, in arrun, before any
 * fork; a child only applies its own cpuset (spawn.c), so every rank sees the same
 * topology and the placement is the same from run to run.
 */
#include "arrun.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The objects ranks are spread over, in hwloc's logical order. */
static int collect(hwloc_topology_t topo, hwloc_obj_type_t type, hwloc_obj_t **out)
{
    int n = hwloc_get_nbobjs_by_type(topo, type);
    hwloc_obj_t *objs;
    int k = 0;

    if (n <= 0)
        return 0;
    objs = calloc((size_t)n, sizeof(*objs));
    if (!objs)
        return -ENOMEM;
    for (int i = 0; i < n; i++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(topo, type, (unsigned)i);
        /* A NUMA node of memory only (CXL, HBM) has no cpu to run a rank on. */
        if (o && o->cpuset && !hwloc_bitmap_iszero(o->cpuset))
            objs[k++] = o;
    }
    *out = objs;
    return k;
}

int arrun_binding_plan(const struct arrun_opts *opts, struct arrun_binding *b)
{
    hwloc_obj_type_t type = opts->bind == ARRUN_BIND_NUMA ? HWLOC_OBJ_NUMANODE : HWLOC_OBJ_CORE;
    const char *what = opts->bind == ARRUN_BIND_NUMA ? "NUMA nodes" : "cores";
    hwloc_obj_t *objs = NULL;
    int nobjs;

    memset(b, 0, sizeof(*b));
    b->nranks = opts->nranks;
    if (opts->bind == ARRUN_BIND_NONE)
        return 0;

    if (hwloc_topology_init(&b->topo) < 0) {
        arrun_msg("warning: cannot set up hwloc: %s; ranks run unbound", strerror(errno));
        b->topo = NULL;
        return 0;
    }
    if (hwloc_topology_load(b->topo) < 0) {
        arrun_msg("warning: cannot read the topology: %s; ranks run unbound", strerror(errno));
        goto err_topo;
    }

    nobjs = collect(b->topo, type, &objs);
    if (nobjs == 0 && type == HWLOC_OBJ_CORE) {
        /* Some virtual machines report PUs but no cores. */
        what = "processing units";
        nobjs = collect(b->topo, HWLOC_OBJ_PU, &objs);
    }
    if (nobjs < 0) {
        arrun_msg("out of memory planning the binding");
        return -ENOMEM;
    }
    if (nobjs == 0) {
        if (opts->verbose >= 1)
            arrun_msg("note: the topology shows no %s with cpus; ranks run unbound", what);
        goto err_objs;
    }

    b->sets = calloc((size_t)opts->nranks, sizeof(*b->sets));
    if (!b->sets)
        goto err_nomem;
    for (int i = 0; i < opts->nranks; i++) {
        /* Round robin: more ranks than objects share them, in the same order again. */
        b->sets[i] = hwloc_bitmap_dup(objs[i % nobjs]->cpuset);
        if (!b->sets[i])
            goto err_nomem;
        if (opts->verbose >= 2) {
            char *list = NULL;
            hwloc_bitmap_list_asprintf(&list, b->sets[i]);
            arrun_msg("rank %d binds to cpus %s", i, list ? list : "?");
            free(list);
        }
    }
    if (opts->nranks > nobjs && opts->verbose >= 1)
        arrun_msg("note: %d ranks on %d %s: ranks share them", opts->nranks, nobjs, what);
    free(objs);
    return 0;

err_nomem:
    arrun_msg("out of memory planning the binding");
    free(objs);
    arrun_binding_free(b);
    return -ENOMEM;
err_objs:
    free(objs);
err_topo:
    hwloc_topology_destroy(b->topo);
    b->topo = NULL;
    return 0;
}

void arrun_binding_free(struct arrun_binding *b)
{
    if (b->sets) {
        for (int i = 0; i < b->nranks; i++)
            hwloc_bitmap_free(b->sets[i]); /* accepts NULL */
        free(b->sets);
        b->sets = NULL;
    }
    if (b->topo) {
        hwloc_topology_destroy(b->topo);
        b->topo = NULL;
    }
}
