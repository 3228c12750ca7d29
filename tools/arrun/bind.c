/* SPDX-License-Identifier: MIT */
/*
 * arrun --bind: where each rank runs.  The plan is made once, in arrun, before any
 * fork; a child only applies its own cpuset (spawn.c), so every rank sees the same
 * topology and the placement is the same from run to run.
 */
#include "arrun.h"

#include <errno.h>
#include <stdio.h>
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

/* The logical indexes of the cores (or PUs, when the topology has no cores) in set. */
static char *describe(hwloc_topology_t topo, hwloc_obj_type_t unit, hwloc_const_bitmap_t set,
                      int numa_node)
{
    hwloc_bitmap_t idx = hwloc_bitmap_alloc();
    char *list = NULL, *text = NULL;
    hwloc_obj_t o = NULL;

    if (!idx)
        return NULL;
    while ((o = hwloc_get_next_obj_inside_cpuset_by_type(topo, set, unit, o)) != NULL)
        hwloc_bitmap_set(idx, o->logical_index);
    if (hwloc_bitmap_list_asprintf(&list, idx) >= 0) {
        const char *word = unit == HWLOC_OBJ_CORE ? "cores" : "processing units";
        int rc = numa_node >= 0 ? asprintf(&text, "NUMA node %d, %s %s", numa_node, word, list)
                                : asprintf(&text, "%s %s", word, list);
        if (rc < 0)
            text = NULL;
    }
    free(list);
    hwloc_bitmap_free(idx);
    return text;
}

/*
 * --bind core: rank r on cores [r*n, r*n + n) mod the number of cores, n being
 * --cpus-per-rank (1 when not given).  Returns the number of ranks that share a core
 * with another rank, or -ENOMEM.
 */
static int plan_cores(const struct arrun_opts *opts, struct arrun_binding *b, hwloc_obj_t *objs,
                      int nobjs)
{
    int per = opts->cpus_per_rank > 0 ? opts->cpus_per_rank : 1;
    int *users = calloc((size_t)nobjs, sizeof(*users));
    int sharing = 0;

    if (!users)
        return -ENOMEM;
    for (int i = 0; i < opts->nranks; i++) {
        b->sets[i] = hwloc_bitmap_alloc();
        if (!b->sets[i])
            goto err_nomem;
        for (int j = 0; j < per; j++) {
            int k = (int)(((long)i * per + j) % nobjs);
            hwloc_bitmap_or(b->sets[i], b->sets[i], objs[k]->cpuset);
            users[k]++;
        }
    }
    for (int i = 0; i < opts->nranks; i++) {
        for (int j = 0; j < per; j++) {
            if (users[((long)i * per + j) % nobjs] > 1) {
                sharing++;
                break;
            }
        }
    }
    free(users);
    return sharing;

err_nomem:
    free(users);
    return -ENOMEM;
}

/* The cores (or PUs) of a NUMA node, which --cpus-per-rank must not exceed. */
static int node_cores(hwloc_topology_t topo, hwloc_obj_type_t unit, hwloc_obj_t node)
{
    return hwloc_get_nbobjs_inside_cpuset_by_type(topo, node->cpuset, unit);
}

int arrun_binding_plan(const struct arrun_opts *opts, struct arrun_binding *b)
{
    hwloc_obj_type_t type = opts->bind == ARRUN_BIND_NUMA ? HWLOC_OBJ_NUMANODE : HWLOC_OBJ_CORE;
    hwloc_obj_type_t unit = HWLOC_OBJ_CORE; /* what --cpus-per-rank counts */
    const char *what = opts->bind == ARRUN_BIND_NUMA ? "NUMA nodes" : "cores";
    int per = opts->cpus_per_rank;
    hwloc_obj_t *objs = NULL;
    int nobjs, sharing = 0, status;

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
    /* Some virtual machines report PUs but no cores: PUs stand in for them. */
    if (hwloc_get_nbobjs_by_type(b->topo, HWLOC_OBJ_CORE) <= 0)
        unit = HWLOC_OBJ_PU;

    nobjs = collect(b->topo, type == HWLOC_OBJ_CORE ? unit : type, &objs);
    if (unit == HWLOC_OBJ_PU && type == HWLOC_OBJ_CORE)
        what = "processing units";
    if (nobjs < 0) {
        arrun_msg("out of memory planning the binding");
        return -ENOMEM;
    }
    if (nobjs == 0) {
        if (opts->verbose >= 1 || per > 0)
            arrun_msg("%s: the topology shows no %s with cpus; ranks run unbound",
                      per > 0 ? "warning" : "note", what);
        goto err_objs;
    }

    /* Asking for more cores than a rank can get is a mistake, not something to wrap. */
    if (per > 0 && type == HWLOC_OBJ_CORE && per > nobjs) {
        arrun_msg("--cpus-per-rank %d: this host has %d %s", per, nobjs, what);
        status = -EINVAL;
        goto err_status;
    }
    if (per > 0 && type == HWLOC_OBJ_NUMANODE) {
        for (int k = 0; k < nobjs && k < opts->nranks; k++) {
            int have = node_cores(b->topo, unit, objs[k]);
            if (per > have) {
                arrun_msg("--cpus-per-rank %d: NUMA node %u has %d %s", per, objs[k]->logical_index,
                          have, unit == HWLOC_OBJ_CORE ? "cores" : "processing units");
                status = -EINVAL;
                goto err_status;
            }
        }
    }

    b->sets = calloc((size_t)opts->nranks, sizeof(*b->sets));
    b->where = calloc((size_t)opts->nranks, sizeof(*b->where));
    if (!b->sets || !b->where)
        goto err_nomem;
    if (type == HWLOC_OBJ_CORE) {
        sharing = plan_cores(opts, b, objs, nobjs);
        if (sharing < 0)
            goto err_nomem;
    } else {
        for (int i = 0; i < opts->nranks; i++) {
            /* Round robin: more ranks than nodes share them, in the same order again. */
            b->sets[i] = hwloc_bitmap_dup(objs[i % nobjs]->cpuset);
            if (!b->sets[i])
                goto err_nomem;
        }
        /* A node's ranks share its cores when together they ask for more than it has. */
        for (int k = 0; per > 0 && k < nobjs; k++) {
            int on_node = opts->nranks / nobjs + (k < opts->nranks % nobjs ? 1 : 0);
            if ((long)on_node * per > node_cores(b->topo, unit, objs[k]))
                sharing += on_node;
        }
    }
    for (int i = 0; i < opts->nranks; i++) {
        int node = type == HWLOC_OBJ_NUMANODE ? (int)objs[i % nobjs]->logical_index : -1;
        b->where[i] = describe(b->topo, unit, b->sets[i], node);
        if (!b->where[i])
            goto err_nomem;
        if (opts->verbose >= 2) {
            char *list = NULL;
            hwloc_bitmap_list_asprintf(&list, b->sets[i]);
            arrun_msg("rank %d binds to cpus %s", i, list ? list : "?");
            free(list);
        }
    }
    if (per > 0 && sharing > 0)
        arrun_msg("warning: %d ranks x %d core%s on %d %.*s: %d of the %d ranks share cores",
                  opts->nranks, per, per == 1 ? "" : "s", nobjs,
                  (int)strlen(what) - (nobjs == 1 ? 1 : 0), what, sharing, opts->nranks);
    else if (opts->nranks > nobjs && opts->verbose >= 1)
        arrun_msg("note: %d ranks on %d %s: ranks share them", opts->nranks, nobjs, what);
    free(objs);
    return 0;

err_nomem:
    arrun_msg("out of memory planning the binding");
    free(objs);
    arrun_binding_free(b);
    return -ENOMEM;
err_status:
    free(objs);
    arrun_binding_free(b);
    return status;
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
    if (b->where) {
        for (int i = 0; i < b->nranks; i++)
            free(b->where[i]);
        free(b->where);
        b->where = NULL;
    }
    if (b->topo) {
        hwloc_topology_destroy(b->topo);
        b->topo = NULL;
    }
}
