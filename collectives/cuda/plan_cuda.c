/* SPDX-License-Identifier: MIT */
/*
 * A CUDA communicator's path table (paths_device.c's rows, resolved once the ranks met) and
 * the plan of each call from it: the one place where a CUDA call's path is decided.
 */
#include "coll_cuda.h"
#include "backend.h"
#include "paths_device.h"

#include <stdlib.h>

_Static_assert(CUDA_PATHS_TSLOTS == CUDA_TSLOTS_MAX,
               "paths_device.c sizes the copy ring as the transport makes it");

comm_status_t cuda_paths_parse(struct comm *c, struct coll_paths_overrides *ov)
{
    char why[320];
    enum coll_paths_set set = coll_device_paths_set(c->ops->name);
    comm_status_t st = coll_device_paths_parse(set, c->knobs.paths, ov, why, sizeof(why));
    if (st != COMM_OK)
        rt_error(c, st, "rank %d: %s", c->rank, why);
    return st;
}

comm_status_t cuda_paths_setup(struct comm *c, const struct coll_paths_overrides *ov)
{
    struct cuda_comm *x = cuda_of(c);
    struct coll_device_paths_config cfg;
    coll_device_paths_config(coll_device_paths_set(c->ops->name), &c->knobs, c->nranks,
                             c->shm->same_process, &cfg);
    /* The calls take the transport's own numbers; comm_paths_query computes them from
     * the knobs by the same formula (a difference would be an arcomm bug: said once). */
    uint64_t ring = (uint64_t)(c->nranks > 1 ? c->nranks - 1 : 1) * x->tslots * x->g.chunk_max;
    if (cfg.copy_threshold != x->k.copy_threshold || cfg.ring != ring)
        rt_log(c, RT_LOG_WARN,
               "rank %d: the path table's copy threshold %llu and copy ring %llu differ from "
               "the transport's %llu and %llu: comm_paths_query without a communicator shows "
               "the former; an arcomm bug, please report it",
               c->rank, (unsigned long long)cfg.copy_threshold, (unsigned long long)cfg.ring,
               (unsigned long long)x->k.copy_threshold, (unsigned long long)ring);
    cfg.copy_threshold = x->k.copy_threshold;
    cfg.ring = ring;
    struct coll_paths *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        rt_error(c, COMM_ERR_NOMEM, "rank %d: out of memory for the path table (%zu bytes)",
                 c->rank, sizeof(*t));
        return COMM_ERR_NOMEM;
    }
    coll_device_paths_resolve(&cfg, ov, t);
    for (int i = 0; i < ov->n; i++) {
        bool kept = false;
        for (int j = 0; j < t->nrows; j++)
            kept = kept || t->row[j].item == ov->row[i].item;
        if (!kept)
            rt_log(c, RT_LOG_WARN,
                   "rank %d: ARCOMM_PATHS item %d cannot apply to this communicator (%d %s "
                   "ranks on %s): its calls take the next row that matches",
                   c->rank, ov->row[i].item, c->nranks, c->shm->same_process ? "thread" : "process",
                   c->ops->name);
    }
    x->paths = t;
    return COMM_OK;
}

void cuda_paths_teardown(struct comm *c)
{
    struct cuda_comm *x = cuda_of(c);
    struct coll_paths *t = x != NULL ? x->paths : NULL;
    cuda_teardown(c);
    free(t);
}

void cuda_plan(const struct comm *c, const struct coll_call *call, struct coll_plan *plan)
{
    struct coll_plan_ask ask = {
        .kind = call->kind,
        .bytes = (uint64_t)call->count * rt_dtype_size(call->dtype),
        .plain = true,
    };
    coll_device_paths_plan(cuda_of(c)->paths, &ask, plan);
}
