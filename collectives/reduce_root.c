/* SPDX-License-Identifier: MIT */
/*
 * Reduce on the host (comm_reduce; reduce.c is the element-wise engine): the reduction
 * of every rank's sendbuf into the root's recvbuf, in rank order 0..nranks-1 for every
 * element, so that it has the bits allreduce gives, whatever the root.
 *
 *   eager    (ARCOMM_REDUCE_EAGER, reduce_eager.c) every rank but the root posts its
 *            call and input in its eager ring and returns; the root checks and reduces
 *   flag     every rank but the root stages its input, the ranks arrive and agree,
 *            the root reduces every slot (its own input read in place)
 *   one-pass every rank reduces its slice of every rank's input straight into the
 *            root's recvbuf, then waits until every rank is done
 *   staged   slot by slot: the ranks but the root stage their chunk, synchronise, and
 *            the root reduces the chunk while they stage the next one
 *   CMA      every rank pulls its slice of every peer's input chunk by chunk
 *            (process_vm_readv), reduces it and writes it into the root's recvbuf
 *            (process_vm_writev), then waits until every rank is done
 */
#include "coll.h"
#include "reduce.h"

#include <string.h>

static void flag_stage(struct comm *c, const struct coll_call *call, void *slot)
{
    if (c->rank != call->root)
        memcpy(slot, call->send, call->count * rt_dtype_size(call->dtype));
}

static void flag_finish(struct comm *c, const struct coll_call *call, uint32_t slot)
{
    if (c->rank != call->root)
        return;
    const void *src[RT_MAX_RANKS];
    for (int p = 0; p < c->nranks; p++)
        src[p] = p == c->rank ? call->send : coll_flag_data(c, p, slot);
    coll_reduce_block(call, call->recv, src, c->nranks, call->count, 0, false);
}

static comm_status_t direct(struct comm *c, const struct coll_call *call)
{
    int n = c->nranks;
    size_t esize = rt_dtype_size(call->dtype);
    uint64_t bytes = (uint64_t)call->count * esize;
    size_t lo, hi;
    coll_slice(call->count, esize, n, c->rank, &lo, &hi);
    /* Every peer's buffers are checked before any is touched, by every rank. */
    const struct shm_arrival *ra = shm_arrival_at(c->shm, c->seq, call->root);
    char *dst = c->rank == call->root
                    ? call->recv
                    : coll_peer_ptr(c, call->root, ra, ra->recv, bytes, "a receive buffer");
    if (dst == NULL)
        return COMM_ERR_PEER;
    const void *src[RT_MAX_RANKS];
    for (int p = 0; p < n; p++) {
        const struct shm_arrival *a = shm_arrival_at(c->shm, c->seq, p);
        const char *in =
            p == c->rank ? call->send : coll_peer_ptr(c, p, a, a->send, bytes, "a send buffer");
        if (in == NULL)
            return COMM_ERR_PEER;
        src[p] = in + lo * esize;
    }
    if (hi > lo)
        coll_reduce_block(call, dst + lo * esize, src, n, hi - lo, lo,
                          coll_host_streams(&c->knobs, n, (size_t)bytes));
    return coll_sync(c, "reduce (one-pass path, completion)");
}

static comm_status_t staged(struct comm *c, const struct coll_call *call)
{
    size_t esize = rt_dtype_size(call->dtype);
    struct coll_pipe pp;
    coll_pipe_begin(&pp, c, call->root, call->count, esize, COLL_PIPE_CHUNK_BYTES);
    bool root = c->rank == call->root;
    for (size_t k = 0; k < pp.rounds; k++) {
        size_t lo = k * pp.chunk;
        size_t len = call->count - lo < pp.chunk ? call->count - lo : pp.chunk;
        const char *mine = (const char *)call->send + lo * esize;
        comm_status_t st;
        if (root) {
            st = coll_pipe_wait(&pp, false, k + 1, "reduce (staged path)");
            if (st != COMM_OK)
                return st;
            const void *src[RT_MAX_RANKS];
            for (int p = 0; p < c->nranks; p++)
                src[p] = p == c->rank ? mine : coll_pipe_place(&pp, p, k);
            coll_reduce_block(call, (char *)call->recv + lo * esize, src, c->nranks, len, lo,
                              false);
        } else {
            if (k >= pp.places) {
                st = coll_pipe_wait(&pp, true, k + 1 - pp.places, "reduce (staged path)");
                if (st != COMM_OK)
                    return st;
            }
            memcpy(coll_pipe_place(&pp, c->rank, k), mine, len * esize);
        }
        shm_progress_publish(c);
    }
    return root ? COMM_OK
                : coll_pipe_wait(&pp, true, pp.rounds, "reduce (staged path, completion)");
}

static comm_status_t cma(struct comm *c, const struct coll_call *call)
{
    size_t esize = rt_dtype_size(call->dtype);
    size_t lo, hi;
    coll_slice(call->count, esize, c->nranks, c->rank, &lo, &hi);
    bool root = c->rank == call->root;
    uint64_t in[RT_MAX_RANKS], out[RT_MAX_RANKS] = {0};
    for (int p = 0; p < c->nranks; p++)
        in[p] = shm_arrival_at(c->shm, c->seq, p)->send + lo * esize;
    if (!root)
        out[call->root] = shm_arrival_at(c->shm, c->seq, call->root)->recv + lo * esize;
    comm_status_t st =
        coll_cma_reduce(c, call, in, (const char *)call->send + lo * esize, hi - lo,
                        root ? (char *)call->recv + lo * esize : NULL, out, "reduce (CMA path)");
    if (st != COMM_OK)
        return st;
    return coll_sync(c, "reduce (CMA path, completion)");
}

static const struct coll_host_algo reduce_algo = {
    .flag_what = "reduce (flag path)",
    .bulk_what = "reduce (bulk path handshake)",
    .flag_stage = flag_stage,
    .flag_finish = flag_finish,
    .expose_send = true,
    .expose_recv = true, /* the root's; the others publish none */
    .direct = direct,
    .staged = staged,
    .cma = cma,
};

comm_status_t coll_host_reduce(struct comm *c, const struct coll_call *call)
{
    if (coll_reduce_eager_takes(c, call))
        return coll_reduce_eager(c, call);
    return coll_host_run(c, call, &reduce_algo);
}
