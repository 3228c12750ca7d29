/* SPDX-License-Identifier: MIT */
/*
 * ncclGroupStart/End.  arcomm's CUDA collectives only enqueue (the arrival handshake
 * runs in kernels), so a collective inside a group is made at once, on whichever
 * communicator, and one thread may drive several.  What would block is an init or a
 * split, which wait for every rank: inside a group they run in threads of their own
 * (comms.c), joined here at the outermost ncclGroupEnd.  The group's result is its
 * first failure, whether a call already returned it or a joined init produced it.
 */
#include "face.h"

#include <stdlib.h>

static _Thread_local int depth;
static _Thread_local ncclResult_t first_failure;
static _Thread_local struct ncclComm **pending;
static _Thread_local int npending, cap;

bool nccl_in_group(void)
{
    return depth > 0;
}

ncclResult_t nccl_group_result(ncclResult_t r)
{
    if (depth > 0 && r != ncclSuccess && r != ncclInProgress && first_failure == ncclSuccess)
        first_failure = r;
    return r;
}

void nccl_group_add_job(struct ncclComm *comm)
{
    if (npending == cap) {
        int ncap = cap ? 2 * cap : 8;
        struct ncclComm **n = realloc(pending, (size_t)ncap * sizeof(*n));
        if (n == NULL) {
            /* Joined now instead: correct, only no longer concurrent with the others. */
            nccl_comm_join(comm);
            return;
        }
        pending = n;
        cap = ncap;
    }
    pending[npending++] = comm;
}

NCCL_API ncclResult_t ncclGroupStart(void)
{
    depth++;
    return ncclSuccess;
}
NCCL_ALIAS(ncclGroupStart);

NCCL_API ncclResult_t ncclGroupEnd(void)
{
    if (depth == 0)
        return nccl_fail(ncclInvalidUsage, "ncclGroupEnd: no ncclGroupStart to end");
    if (--depth > 0)
        return ncclSuccess;
    for (int i = 0; i < npending; i++) {
        struct ncclComm *comm = pending[i];
        nccl_comm_join(comm);
        int r = atomic_load(&comm->init_result);
        if (r != ncclSuccess) {
            depth++; /* counted as the group's, then closed again */
            nccl_group_result(nccl_fail((ncclResult_t)r, "ncclGroupEnd: %s", comm->errmsg));
            depth--;
        }
        if (comm->nocolor)
            nccl_comm_free(comm);
    }
    npending = 0;
    free(pending);
    pending = NULL;
    cap = 0;
    /* The group's sends and receives, now that every init of the group is done. */
    ncclResult_t pr = nccl_p2p_flush();
    if (pr != ncclSuccess && first_failure == ncclSuccess)
        first_failure = pr;
    ncclResult_t r = first_failure;
    first_failure = ncclSuccess;
    return r;
}
NCCL_ALIAS(ncclGroupEnd);
