/* SPDX-License-Identifier: MIT */
/*
 * Alltoall on the host: block p of rank r's sendbuf lands in block r of rank p's
 * recvbuf, exact (memcpy); out of place only.
 *
 *   flag     every rank stages its sendbuf's blocks for the peers, the ranks arrive
 *            and agree, every rank copies its block of every slot into its output
 *   one-pass every rank copies its blocks straight into the peers' recvbufs (which
 *            must be reachable), then waits until every rank is done
 *   staged   each slot cut into one region per rank; slot by slot every rank stages
 *            its chunk of each peer's block in that peer's region, synchronise, every
 *            rank copies its regions of every slot into its output
 *   CMA      every rank pulls its block of every peer's sendbuf into its recvbuf
 *            (process_vm_readv), then waits until every rank is done
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
    for (int p = 0; p < c->nranks; p++) {
        const char *from = p == c->rank ? call->send : coll_flag_data(c, p, slot);
        memcpy((char *)call->recv + (size_t)p * bytes, from + mine, bytes);
    }
}

static comm_status_t direct(struct comm *c, const struct coll_call *call)
{
    int n = c->nranks;
    size_t bytes = call->count * rt_dtype_size(call->dtype);
    uint64_t all = (uint64_t)bytes * (uint64_t)n;
    /* Every peer's output is checked before any is written. */
    char *out[RT_MAX_RANKS];
    for (int p = 0; p < n; p++) {
        const struct shm_arrival *a = shm_arrival_at(c->shm, c->seq, p);
        out[p] =
            p == c->rank ? call->recv : coll_peer_ptr(c, p, a, a->recv, all, "a receive buffer");
        if (out[p] == NULL)
            return COMM_ERR_PEER;
    }
    /* Streaming once every rank's input and output (2 n blocks of every rank) pass the
     * threshold (broadcast.c says why not memcpy's own choice). */
    bool nt = coll_host_streams_footprint(&c->knobs, 2 * (size_t)n * (size_t)all);
    for (int i = 0; i < n; i++) {
        int p = (c->rank + 1 + i) % n;
        void *to[1] = {out[p] + (size_t)c->rank * bytes};
        coll_copy_fanout(to, 1, (const char *)call->send + (size_t)p * bytes, bytes, nt);
    }
    return coll_sync(c, "alltoall (one-pass path, completion)");
}

static comm_status_t staged(struct comm *c, const struct coll_call *call)
{
    int n = c->nranks;
    size_t esize = rt_dtype_size(call->dtype);
    size_t bytes = call->count * esize;
    size_t chunk = coll_region_elems(c, esize, n), region = chunk * esize;
    size_t mine = (size_t)c->rank * bytes;
    for (size_t lo = 0; lo < call->count; lo += chunk) {
        size_t len = (call->count - lo < chunk ? call->count - lo : chunk) * esize;
        size_t at = lo * esize;
        uint32_t slot = coll_next_stage_slot(c);
        for (int q = 0; q < n; q++)
            if (q != c->rank)
                memcpy(coll_region(c, c->rank, slot, q, region),
                       (const char *)call->send + (size_t)q * bytes + at, len);
        memcpy((char *)call->recv + mine + at, (const char *)call->send + mine + at, len);
        comm_status_t st = coll_sync(c, "alltoall (staged path)");
        if (st != COMM_OK)
            return st;
        for (int p = 0; p < n; p++)
            if (p != c->rank)
                memcpy((char *)call->recv + (size_t)p * bytes + at,
                       coll_region(c, p, slot, c->rank, region), len);
    }
    return COMM_OK;
}

static comm_status_t cma(struct comm *c, const struct coll_call *call)
{
    size_t bytes = call->count * rt_dtype_size(call->dtype);
    size_t mine = (size_t)c->rank * bytes;
    memcpy((char *)call->recv + mine, (const char *)call->send + mine, bytes);
    for (int i = 1; i < c->nranks; i++) {
        int p = (c->rank + i) % c->nranks;
        const struct shm_arrival *a = shm_arrival_at(c->shm, c->seq, p);
        comm_status_t st = shm_cma_read(c, p, (char *)call->recv + (size_t)p * bytes,
                                        a->send + mine, bytes, "alltoall's send buffer");
        if (st != COMM_OK)
            return st;
    }
    return coll_sync(c, "alltoall (CMA path, completion)");
}

static const struct coll_host_algo alltoall_algo = {
    .flag_what = "alltoall (flag path)",
    .bulk_what = "alltoall (bulk path handshake)",
    .flag_stage = flag_stage,
    .flag_finish = flag_finish,
    .expose_recv = true,
    .direct = direct,
    .staged = staged,
    .cma = cma,
};

comm_status_t coll_host_alltoall(struct comm *c, const struct coll_call *call)
{
    return coll_host_run(c, call, &alltoall_algo);
}
