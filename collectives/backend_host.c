/* SPDX-License-Identifier: MIT */
/*
 * The host backend: ranks of one host (threads or processes) on the shm segment, with
 * the host paths (host_paths.c, allreduce.c) and its path table (paths.c).
 */
#include "backend.h"
#include "p2p/p2p.h"
#include "host.h"

#include <stdio.h>
#include <stdlib.h>

/* The host backend's own state, then the segment.  A malformed ARCOMM_PATHS fails here,
 * before the segment: comm_init tells the peers (their join fails alike). */
static comm_status_t host_setup(struct comm *c)
{
    struct coll_host *h = calloc(1, sizeof(*h));
    if (h == NULL) {
        rt_error(c, COMM_ERR_NOMEM,
                 "rank %d: out of memory for the host backend's state (%zu "
                 "bytes)",
                 c->rank, sizeof(*h));
        return COMM_ERR_NOMEM;
    }
    char why[320];
    comm_status_t st = coll_paths_parse(c->knobs.paths, &h->overrides, why, sizeof(why));
    if (st != COMM_OK) {
        rt_error(c, st, "rank %d: %s", c->rank, why);
        free(h);
        return st;
    }
    c->xport = h;
    st = shm_segment_create_or_attach(c);
    if (st != COMM_OK) {
        c->xport = NULL;
        free(h);
    }
    return st;
}

static void host_teardown(struct comm *c)
{
    shm_segment_detach(c);
    struct coll_host *h = coll_host_of(c);
    if (h != NULL) {
        free(h->scratch);
        free(h->cma_scratch);
        free(h->cma_tune);
        free(h);
    }
    c->xport = NULL;
}

static void host_resolve_knobs(struct comm *c)
{
    /* The host paths' defaults depend on whether all ranks are threads of this process,
     * known once they met. */
    bool auto_flag = c->knobs.flag_threshold == RT_SIZE_AUTO;
    coll_host_knobs.used(&c->knobs, c->topo, c->nranks, c->shm->same_process);
    /*
     * Process ranks that all run with the shared heap (agreed at join) reach each
     * other's buffers from the heap's smallest allocation on, as thread ranks do: there
     * the one-pass path beats the flag path's copies (2 ranks, 64-512 KiB: 1.1-3.4 us
     * against 2.8-22 us, docs/PERFORMANCE.md).  Smaller buffers are glibc's and keep
     * the flag path; so does a buffer the program did not get from malloc (it stages).
     */
    if (auto_flag && c->shm->heap && c->knobs.flag_threshold != RT_SIZE_OFF) {
        uint64_t below = c->shm->heap_min > 1024 ? c->shm->heap_min - 1 : 1024;
        if (below < c->knobs.flag_threshold)
            c->knobs.flag_threshold = below;
    }
    /* Some rank cannot reach its peers through CMA (the segment's probe, the same
     * answer on every rank): no call takes that path, nor leaves the flag path for it. */
    if (!c->shm->cma)
        c->knobs.cma_threshold = RT_SIZE_OFF;
    /* The path table of these ranks, from the knobs just resolved. */
    struct coll_host *h = coll_host_of(c);
    struct coll_paths_config cfg = {
        .nranks = c->nranks,
        .threads = c->shm->same_process,
        .cma = c->shm->cma,
        .cma_fast = c->shm->cma_fast,
        .k = &c->knobs,
    };
    coll_paths_resolve(&cfg, &h->overrides, &h->table);
    for (int i = 0; i < h->overrides.n; i++) {
        bool kept = false;
        for (int j = 0; j < h->table.nrows; j++)
            kept = kept || h->table.row[j].item == h->overrides.row[i].item;
        if (!kept)
            rt_log(c, RT_LOG_WARN,
                   "rank %d: ARCOMM_PATHS item %d cannot apply to this communicator (%d %s "
                   "ranks%s): its calls take the next row that matches",
                   c->rank, h->overrides.row[i].item, c->nranks,
                   c->shm->same_process ? "thread" : "process",
                   c->shm->cma ? "" : ", no single copy between them");
    }
    /* The eager calls publish without fences (broadcast_eager.c). */
    if (coll_eager_on(&c->knobs))
        c->shm->lax_wake_ns = COLL_EAGER_WAKE_NS;
}

const struct backend_knobs coll_host_knobs = {
    .name = "shm",
    .reads = RT_KNOB_MASK_COMMON | RT_KNOB_MASK_HOST,
    .used = coll_host_resolve_knobs,
};

const struct backend_knobs *const coll_knob_views[3] = {
    &coll_host_knobs,
    &coll_cuda_knobs,
    &coll_hexagon_knobs,
};

static comm_status_t host_validate(struct comm *c, const struct coll_call *call, const char *fn)
{
    if (call->stream != NULL) {
        rt_error(c, COMM_ERR_INVALID,
                 "rank %d: %s: stream must be NULL on a host communicator (it is %p)", c->rank, fn,
                 call->stream);
        return COMM_ERR_INVALID;
    }
    return COMM_OK;
}

const struct backend_ops coll_host_backend = {
    .name = "shm",
    .device = COMM_DEVICE_HOST,
    .knobs = &coll_host_knobs,
    .probe = shm_probe,
    .setup = host_setup,
    .teardown = host_teardown,
    .resolve_knobs = host_resolve_knobs,
    .validate = host_validate,
    .allreduce = coll_host_allreduce,
    .allreduce_add = coll_host_allreduce,
    .barrier = coll_host_barrier,
    .broadcast = coll_host_broadcast,
    .reduce = coll_host_reduce,
    .allgather = coll_host_allgather,
    .reduce_scatter = coll_host_reduce_scatter,
    .alltoall = coll_host_alltoall,
    .p2p = coll_host_p2p,
    .p2p_poll = coll_host_p2p_poll,
    .publish_failure = shm_publish_failure,
    .wake = shm_wake,
    .mem_alloc = shm_pool_alloc,
    .mem_free = shm_pool_free,
};
