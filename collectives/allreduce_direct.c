/*
 * The one-pass bulk path, for ranks that can reach each other's buffers (thread ranks
 * of one process, or comm_mem_alloc buffers): each rank reduces its slice straight from
 * every peer's input and writes it straight into every peer's output — the fewest
 * bytes any allreduce can move — then waits until every peer has done the same, since
 * until then peers still read its input and write its output.
 */
#include "coll.h"
#include "reduce.h"

/* A peer's buffer as this rank can address it. */
static void *peer_ptr(const struct comm *c, const struct shm_arrival *a, uint64_t v)
{
    if (a->flags & SHM_BUF_IN_SEG)
        return c->shm->base + v;
    return (void *)(uintptr_t)v;
}

comm_status_t coll_allreduce_direct(struct comm *c, const struct coll_call *call, bool narrow)
{
    int n = c->nranks;
    size_t esize = comm_dtype_size(call->dtype);
    size_t lo, hi;
    coll_slice(call->count, esize, n, c->rank, &lo, &hi);

    if (hi > lo) {
        const void *src[n];
        void *dst[n];
        const void *addend[n];
        bool any_addend = false;
        for (int p = 0; p < n; p++) {
            const struct shm_arrival *a = shm_arrival_at(c->shm, c->seq, p);
            src[p] = (const char *)peer_ptr(c, a, a->send) + lo * esize;
            dst[p] = (char *)peer_ptr(c, a, a->recv) + lo * esize;
            addend[p] = NULL;
            if (a->flags & SHM_BUF_ADD) {
                /* Each rank's own addend, lined up with where this slice starts. */
                addend[p] = peer_ptr(c, a, a->addend);
                any_addend = true;
            }
        }
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
            .nt_store = 2 * (size_t)n * call->count * esize >= c->knobs.nt_threshold,
        };
        coll_reduce(&args);
    }
    shm_progress_publish(c);
    return shm_progress_wait_all(c, "allreduce (one-pass bulk path, completion)");
}
