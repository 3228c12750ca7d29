/* SPDX-License-Identifier: MIT */
/*
 * The CMA bulk path, for process ranks whose private buffers the peers reach with
 * process_vm_readv/writev (SHM_BUF_CMA): each rank pulls its slice of every peer's
 * input, chunk by chunk, into a cache-sized scratch, reduces it in rank order (the bits
 * of every other path) into its own output and writes the chunk into every peer's
 * output; then waits until every peer has done the same, since until then peers still
 * read its input and write its output.  One copy in and one out per byte of a slice,
 * where the staged path makes four.  Not for narrowed (bf16) or fused-add calls: those
 * stay staged.
 */
#include "coll.h"

comm_status_t coll_allreduce_cma(struct comm *c, const struct coll_call *call)
{
    int n = c->nranks;
    size_t esize = rt_dtype_size(call->dtype);
    size_t lo, hi;
    coll_slice(call->count, esize, n, c->rank, &lo, &hi);
    uint64_t in[RT_MAX_RANKS], out[RT_MAX_RANKS];
    for (int p = 0; p < n; p++) {
        const struct shm_arrival *a = shm_arrival_at(c->shm, c->seq, p);
        in[p] = a->send + lo * esize;
        out[p] = p == c->rank ? 0 : a->recv + lo * esize;
    }
    comm_status_t st =
        coll_cma_reduce(c, call, in, (const char *)call->send + lo * esize, hi - lo,
                        (char *)call->recv + lo * esize, out, "allreduce (CMA path)");
    if (st != COMM_OK)
        return st;
    return coll_sync(c, "allreduce (CMA path, completion)");
}
