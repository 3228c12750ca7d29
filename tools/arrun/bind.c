/* SPDX-License-Identifier: MIT */
/*
 * arrun --bind: where each rank runs.  The plan is made once, in arrun, before any
 * fork; a child only applies its own cpuset (spawn.c), so every rank sees the same
 * topology and the placement is the same from run to run.
 *
 * Ranks are placed within the cpus arrun itself may run on (its affinity, as taskset or
 * numactl set it, and its cgroup's cpuset, as a container or a batch system sets it),
 * as mpirun does: two jobs started on disjoint cpusets never share a core.  A core (or
 * NUMA node) counts when some of its cpus are allowed, and a rank gets only those.  The
 * topology is the whole host's (hwloc would leave a cgroup's disallowed cpus out), so
 * that logical indexes are the host's and a cgroup's restriction is seen, and said, as
 * an affinity's is.
 */
#include "arrun.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The objects ranks are spread over, in hwloc's logical order: those with allowed cpus. */
static int collect(hwloc_topology_t topo, hwloc_obj_type_t type, hwloc_const_bitmap_t allowed,
                   hwloc_obj_t **out)
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
        if (o && o->cpuset && hwloc_bitmap_intersects(o->cpuset, allowed))
            objs[k++] = o;
    }
    *out = objs;
    return k;
}

/* How many objects of type unit have cpus in set. */
static int count_units(hwloc_topology_t topo, hwloc_obj_type_t unit, hwloc_const_bitmap_t set)
{
    int n = hwloc_get_nbobjs_by_type(topo, unit), k = 0;

    for (int i = 0; i < n; i++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(topo, unit, (unsigned)i);
        if (o && o->cpuset && hwloc_bitmap_intersects(o->cpuset, set))
            k++;
    }
    return k;
}

/* The logical indexes of the cores (or PUs, when the topology has no cores) with cpus in
 * set (a core of which only some cpus are allowed counts). */
static char *describe(hwloc_topology_t topo, hwloc_obj_type_t unit, hwloc_const_bitmap_t set,
                      int numa_node)
{
    hwloc_bitmap_t idx = hwloc_bitmap_alloc();
    char *list = NULL, *text = NULL;
    int n = hwloc_get_nbobjs_by_type(topo, unit);

    if (!idx)
        return NULL;
    for (int i = 0; i < n; i++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(topo, unit, (unsigned)i);
        if (o && o->cpuset && hwloc_bitmap_intersects(o->cpuset, set))
            hwloc_bitmap_set(idx, o->logical_index);
    }
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
 * --cpus-per-rank (1 when not given), each core's allowed cpus.  Returns the number of
 * ranks that share a core with another rank, or -ENOMEM.
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
        hwloc_bitmap_and(b->sets[i], b->sets[i], b->allowed);
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

/* The allowed cores (or PUs) of a NUMA node, which --cpus-per-rank must not exceed. */
static int node_cores(const struct arrun_binding *b, hwloc_obj_type_t unit, hwloc_obj_t node)
{
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    int n = 0;

    if (set) {
        hwloc_bitmap_and(set, node->cpuset, b->allowed);
        n = count_units(b->topo, unit, set);
        hwloc_bitmap_free(set);
    }
    return n;
}

/*
 * The cpus ranks may be placed on: arrun's own affinity (what fork passes to every rank
 * anyway) within those its cgroup allows (hwloc's allowed cpuset).  0, or -ENOMEM.
 * b->restricted says whether that leaves out some of the host's cpus.
 */
static int find_allowed(struct arrun_binding *b)
{
    hwloc_const_bitmap_t all = hwloc_topology_get_allowed_cpuset(b->topo);

    b->allowed = hwloc_bitmap_alloc();
    if (!b->allowed)
        return -ENOMEM;
    /* The calling thread's: arrun has one, and it is the one fork copies. */
    if (hwloc_get_cpubind(b->topo, b->allowed, HWLOC_CPUBIND_THREAD) < 0)
        hwloc_bitmap_copy(b->allowed, all);
    hwloc_bitmap_and(b->allowed, b->allowed, all);
    if (hwloc_bitmap_iszero(b->allowed))
        hwloc_bitmap_copy(b->allowed, all); /* hwloc and the kernel disagree: trust hwloc */
    b->restricted =
        !hwloc_bitmap_isincluded(hwloc_topology_get_topology_cpuset(b->topo), b->allowed);
    return 0;
}

/* " (arrun may run only on PUs LIST)" when arrun's cpus are restricted, else "". */
static void scope_text(const struct arrun_binding *b, char *buf, size_t len)
{
    char *list = NULL;

    buf[0] = '\0';
    if (!b->restricted || hwloc_bitmap_list_asprintf(&list, b->allowed) < 0)
        return;
    snprintf(buf, len, " (arrun may run only on PUs %s)", list);
    free(list);
}

int arrun_binding_plan(const struct arrun_opts *opts, struct arrun_binding *b)
{
    hwloc_obj_type_t type = opts->bind == ARRUN_BIND_NUMA ? HWLOC_OBJ_NUMANODE : HWLOC_OBJ_CORE;
    hwloc_obj_type_t unit = HWLOC_OBJ_CORE; /* what --cpus-per-rank counts */
    const char *what = opts->bind == ARRUN_BIND_NUMA ? "NUMA nodes" : "cores";
    int per = opts->cpus_per_rank;
    hwloc_obj_t *objs = NULL;
    int nobjs, sharing = 0, status;
    char scope[256];

    memset(b, 0, sizeof(*b));
    b->nranks = opts->nranks;
    if (opts->bind == ARRUN_BIND_NONE)
        return 0;

    if (hwloc_topology_init(&b->topo) < 0) {
        arrun_msg("warning: cannot set up hwloc: %s; ranks run unbound", strerror(errno));
        b->topo = NULL;
        return 0;
    }
    /* The whole host: a cgroup's cpuset then shows as one (find_allowed). */
    if (hwloc_topology_set_flags(b->topo, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED) < 0 ||
        hwloc_topology_load(b->topo) < 0) {
        arrun_msg("warning: cannot read the topology: %s; ranks run unbound", strerror(errno));
        goto err_topo;
    }
    if (find_allowed(b) < 0)
        goto err_nomem;
    scope_text(b, scope, sizeof(scope));
    /* Some virtual machines report PUs but no cores: PUs stand in for them. */
    if (hwloc_get_nbobjs_by_type(b->topo, HWLOC_OBJ_CORE) <= 0)
        unit = HWLOC_OBJ_PU;

    nobjs = collect(b->topo, type == HWLOC_OBJ_CORE ? unit : type, b->allowed, &objs);
    if (unit == HWLOC_OBJ_PU && type == HWLOC_OBJ_CORE)
        what = "processing units";
    if (nobjs < 0)
        goto err_nomem;
    if (nobjs == 0) {
        if (opts->verbose >= 1 || per > 0)
            arrun_msg("%s: the topology shows no %s with cpus%s; ranks run unbound",
                      per > 0 ? "warning" : "note", what, scope);
        goto err_objs;
    }
    if (opts->report_bindings && b->restricted) {
        char *list = NULL;
        hwloc_bitmap_list_asprintf(&list, b->allowed);
        arrun_msg("binding within the cpus arrun may run on (its affinity and cgroup): PUs %s, "
                  "%d of this host's %d %s",
                  list ? list : "?", count_units(b->topo, unit, b->allowed),
                  hwloc_get_nbobjs_by_type(b->topo, unit),
                  unit == HWLOC_OBJ_CORE ? "cores" : "processing units");
        free(list);
    }

    /* Asking for more cores than a rank can get is a mistake, not something to wrap. */
    if (per > 0 && type == HWLOC_OBJ_CORE && per > nobjs) {
        if (b->restricted)
            arrun_msg("--cpus-per-rank %d: arrun may run on %d %.*s%s", per, nobjs,
                      (int)strlen(what) - (nobjs == 1 ? 1 : 0), what, scope);
        else
            arrun_msg("--cpus-per-rank %d: this host has %d %.*s", per, nobjs,
                      (int)strlen(what) - (nobjs == 1 ? 1 : 0), what);
        status = -EINVAL;
        goto err_status;
    }
    if (per > 0 && type == HWLOC_OBJ_NUMANODE) {
        for (int k = 0; k < nobjs && k < opts->nranks; k++) {
            int have = node_cores(b, unit, objs[k]);
            if (per > have) {
                arrun_msg("--cpus-per-rank %d: NUMA node %u has %d %s%s", per,
                          objs[k]->logical_index, have,
                          unit == HWLOC_OBJ_CORE ? "cores" : "processing units",
                          b->restricted ? " that arrun may run on" : "");
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
            b->sets[i] = hwloc_bitmap_alloc();
            if (!b->sets[i])
                goto err_nomem;
            hwloc_bitmap_and(b->sets[i], objs[i % nobjs]->cpuset, b->allowed);
        }
        /* A node's ranks share its cores when together they ask for more than it has. */
        for (int k = 0; per > 0 && k < nobjs; k++) {
            int on_node = opts->nranks / nobjs + (k < opts->nranks % nobjs ? 1 : 0);
            if ((long)on_node * per > node_cores(b, unit, objs[k]))
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
    /*
     * Ranks that share cores still run (round robin, as the docs promise), but never
     * silently: mpirun refuses to bind more processes than cpus without being told to;
     * arrun goes on and says so, once, unless told with --oversubscribe.
     */
    if (sharing > 0 && (!opts->oversubscribe || opts->verbose >= 1))
        arrun_msg("warning: %d rank%s x %d core%s on %d %.*s%s: %d of the %d ranks share cores",
                  opts->nranks, opts->nranks == 1 ? "" : "s", per > 0 ? per : 1, per > 1 ? "s" : "",
                  nobjs, (int)strlen(what) - (nobjs == 1 ? 1 : 0), what, scope, sharing,
                  opts->nranks);
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
    hwloc_bitmap_free(b->allowed);
    b->allowed = NULL;
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
    hwloc_bitmap_free(b->allowed); /* accepts NULL */
    b->allowed = NULL;
    if (b->topo) {
        hwloc_topology_destroy(b->topo);
        b->topo = NULL;
    }
}
