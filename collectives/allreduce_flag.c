/* SPDX-License-Identifier: MIT */
/*
 * The flag path (small messages): each rank copies its input into its staging slot,
 * publishes its arrival word, waits for every peer's, and sums all slots in rank order
 * into its output.  One round trip between the ranks; every rank computes the same sum
 * in the same order, so the results are bit-identical.
 */
#include "coll.h"
#include "reduce.h"

#include <string.h>

comm_status_t coll_allreduce_flag(struct comm *c, const struct coll_call *call, bool narrow)
{
    size_t esize = rt_dtype_size(call->dtype);
    bool inline_msg = !narrow && call->addend == NULL && coll_flag_inline(call->count * esize);
    uint32_t slot = inline_msg ? COLL_SLOT_INLINE : call->count ? coll_next_stage_slot(c) : 0;

    struct shm_arrival arrival = coll_arrival_of(call, SHM_PATH_FLAG);
    arrival.flags = (narrow ? SHM_BUF_NARROW : 0u) | (call->addend ? SHM_BUF_ADD : 0u) |
                    (inline_msg ? SHM_BUF_INLINE : 0u);
    if (call->addend)
        arrival.addend_count = call->addend_count;
    if (call->count) {
        /* An inline message is staged here and written to the line with the word. */
        void *mine = inline_msg ? arrival.data : coll_flag_data(c, c->rank, slot);
        if (narrow)
            coll_f32_to_bf16(mine, call->send, call->count);
        else
            memcpy(mine, call->send, call->count * esize);
    }
    comm_status_t st = coll_meet(c, &arrival, "allreduce (flag path)");
    if (st != COMM_OK || call->count == 0)
        return st;

    const void *src[c->nranks];
    for (int p = 0; p < c->nranks; p++)
        src[p] = p == c->rank && !narrow ? call->send : coll_flag_data(c, p, slot);
    void *dst[1] = {call->recv};
    const void *addend[1] = {call->addend};
    struct coll_reduce_args args = {
        .dst = dst,
        .ndst = 1,
        .dst_dtype = call->dtype,
        .src = src,
        .nsrc = c->nranks,
        .src_dtype = narrow ? COMM_BF16 : call->dtype,
        .count = call->count,
        .op = call->op,
        .avg_n = c->nranks,
        .addend = call->addend ? addend : NULL,
        .addend_count = call->addend_count,
    };
    coll_reduce(&args);
    return COMM_OK;
}
