/* SPDX-License-Identifier: MIT */
/*
 * The one-pass bulk path, for ranks that can reach each other's buffers (thread ranks
 * of one process, or comm_mem_alloc buffers): each rank reduces its slice straight from
 * every peer's input and writes it straight into every peer's output — the fewest
 * bytes any allreduce can move — then waits until every peer has done the same, since
 * until then peers still read its input and write its output.
 */
#include "coll.h"
#include "reduce.h"

comm_status_t coll_allreduce_direct(struct comm *c, const struct coll_call *call, bool narrow)
{
    int n = c->nranks;
    size_t esize = rt_dtype_size(call->dtype);
    size_t lo, hi;
    coll_slice(call->count, esize, n, c->rank, &lo, &hi);
    /* count, dtype and addend_count are this rank's own (the handshake checked that
     * every peer's equal them), so these lengths cannot overflow. */
    uint64_t bytes = (uint64_t)call->count * esize;
    uint64_t addend_bytes = (uint64_t)call->addend_count * esize;

    /* Every peer's buffers are checked before any is touched, by every rank: a bad
     * one fails the call on every rank before anyone writes. */
    const void *src[n];
    void *dst[n];
    const void *addend[n];
    bool any_addend = false;
    for (int p = 0; p < n; p++) {
        const struct shm_arrival *a = shm_arrival_at(c->shm, c->seq, p);
        const char *in = coll_peer_ptr(c, p, a, a->send, bytes, "a send buffer");
        char *out = in ? coll_peer_ptr(c, p, a, a->recv, bytes, "a receive buffer") : NULL;
        if (out == NULL)
            return COMM_ERR_PEER;
        src[p] = in + lo * esize;
        dst[p] = out + lo * esize;
        addend[p] = NULL;
        if (a->flags & SHM_BUF_ADD) {
            /* Each rank's own addend, lined up with where this slice starts. */
            addend[p] = coll_peer_ptr(c, p, a, a->addend, addend_bytes, "an addend");
            if (addend[p] == NULL)
                return COMM_ERR_PEER;
            any_addend = true;
        }
    }
    if (hi > lo) {
        struct coll_reduce_args args = {
            .dst = dst,
            .ndst = n,
            .dst_dtype = call->dtype,
            .src = src,
            .nsrc = n,
            .src_dtype = call->dtype,
            .round_bf16 = narrow,
            .count = hi - lo,
            .op = call->op,
            .addend = any_addend ? addend : NULL,
            .addend_count = call->addend_count,
            .offset = lo,
            .nt_store = coll_host_streams(&c->knobs, n, call->count * esize),
        };
        coll_reduce(&args);
    }
    shm_progress_publish(c);
    return shm_progress_wait_all(c, "allreduce (one-pass bulk path, completion)");
}
