/* SPDX-License-Identifier: MIT */
/*
 * Reduce_scatter on the host: rank r receives the reduction of block r of every rank's
 * sendbuf, in rank order 0..nranks-1 for every element, so that every block has the
 * bits allreduce gives.  In place (recvbuf == sendbuf + rank * recvcount) the other
 * blocks of sendbuf are only read.
 *
 *   flag     every rank stages its sendbuf's other blocks, the ranks arrive and agree,
 *            every rank reduces its block of every slot (its own read in place)
 *   one-pass every rank reduces its block straight from every rank's sendbuf (which
 *            must be reachable), then waits until every rank is done
 *   staged   each slot cut into one region per rank; slot by slot every rank stages
 *            its chunk of each peer's block in that peer's region, synchronise, every
 *            rank reduces its regions of every slot
 *   CMA      every rank pulls its block of every peer's sendbuf chunk by chunk
 *            (process_vm_readv) and reduces it, then waits until every rank is done
 */
#include "coll.h"
#include "reduce.h"

#include <string.h>

static void flag_stage(struct comm *c, const struct coll_call *call, void *slot)
{
    size_t bytes = call->count * rt_dtype_size(call->dtype);
    for (int q = 0; q < c->nranks; q++)
        if (q != c->rank)
            memcpy((char *)slot + (size_t)q * bytes, (const char *)call->send + (size_t)q * bytes,
                   bytes);
}

static void flag_finish(struct comm *c, const struct coll_call *call, uint32_t slot)
{
    size_t bytes = call->count * rt_dtype_size(call->dtype);
    size_t mine = (size_t)c->rank * bytes;
    const void *src[RT_MAX_RANKS];
    for (int p = 0; p < c->nranks; p++)
        src[p] = (const char *)(p == c->rank ? call->send : coll_flag_data(c, p, slot)) + mine;
    coll_reduce_block(call, call->recv, src, c->nranks, call->count, 0, false);
}

static comm_status_t direct(struct comm *c, const struct coll_call *call)
{
    int n = c->nranks;
    size_t bytes = call->count * rt_dtype_size(call->dtype);
    uint64_t all = (uint64_t)bytes * (uint64_t)n;
    const void *src[RT_MAX_RANKS];
    for (int p = 0; p < n; p++) {
        const struct shm_arrival *a = shm_arrival_at(c->shm, c->seq, p);
        const char *in =
            p == c->rank ? call->send : coll_peer_ptr(c, p, a, a->send, all, "a send buffer");
        if (in == NULL)
            return COMM_ERR_PEER;
        src[p] = in + (size_t)c->rank * bytes;
    }
    coll_reduce_block(call, call->recv, src, n, call->count, 0,
                      coll_host_streams(&c->knobs, n, bytes));
    return coll_sync(c, "reduce_scatter (one-pass path, completion)");
}

static comm_status_t staged(struct comm *c, const struct coll_call *call)
{
    int n = c->nranks;
    size_t esize = rt_dtype_size(call->dtype);
    size_t bytes = call->count * esize;
    size_t chunk = coll_region_elems(c, esize, n), region = chunk * esize;
    for (size_t lo = 0; lo < call->count; lo += chunk) {
        size_t len = call->count - lo < chunk ? call->count - lo : chunk;
        uint32_t slot = coll_next_stage_slot(c);
        for (int q = 0; q < n; q++)
            if (q != c->rank)
                memcpy(coll_region(c, c->rank, slot, q, region),
                       (const char *)call->send + (size_t)q * bytes + lo * esize, len * esize);
        comm_status_t st = coll_sync(c, "reduce_scatter (staged path)");
        if (st != COMM_OK)
            return st;
        const void *src[RT_MAX_RANKS];
        for (int p = 0; p < n; p++)
            src[p] = p == c->rank ? (const char *)call->send + (size_t)c->rank * bytes + lo * esize
                                  : coll_region(c, p, slot, c->rank, region);
        coll_reduce_block(call, (char *)call->recv + lo * esize, src, n, len, 0, false);
    }
    return COMM_OK;
}

static comm_status_t cma(struct comm *c, const struct coll_call *call)
{
    size_t bytes = call->count * rt_dtype_size(call->dtype);
    size_t mine = (size_t)c->rank * bytes;
    uint64_t in[RT_MAX_RANKS];
    for (int p = 0; p < c->nranks; p++)
        in[p] = shm_arrival_at(c->shm, c->seq, p)->send + mine;
    comm_status_t st = coll_cma_reduce(c, call, in, (const char *)call->send + mine, call->count,
                                       call->recv, NULL, "reduce_scatter (CMA path)");
    if (st != COMM_OK)
        return st;
    return coll_sync(c, "reduce_scatter (CMA path, completion)");
}

static const struct coll_host_algo reduce_scatter_algo = {
    .flag_what = "reduce_scatter (flag path)",
    .bulk_what = "reduce_scatter (bulk path handshake)",
    .flag_stage = flag_stage,
    .flag_finish = flag_finish,
    .expose_send = true,
    .direct = direct,
    .staged = staged,
    .cma = cma,
};

comm_status_t coll_host_reduce_scatter(struct comm *c, const struct coll_call *call)
{
    return coll_host_run(c, call, &reduce_scatter_algo);
}
