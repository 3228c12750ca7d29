/* SPDX-License-Identifier: MIT */
/*
 * ncclGroupStart/End.  arcomm's CUDA collectives only enqueue (the arrival handshake
 * runs in kernels), so a collective inside a group is made at once, on whichever
 * communicator, and one thread may drive several.  What would block is an init or a
 * split, which wait for every rank: inside a group they run in threads of their own
 * (comms.c).  A group of blocking communicators joins them at the outermost
 * ncclGroupEnd; a group of nonblocking ones (config.blocking = 0) leaves them running
 * and ncclGroupEnd returns ncclInProgress, as NCCL's does: each communicator's
 * ncclCommGetAsyncError says when it is done.  One group holds one kind: a call on a
 * communicator of the other kind fails with ncclInvalidArgument (NCCL's rule).  The
 * group's result is its first failure, whether a call already returned it or a joined
 * init produced it.
 */
#include "face.h"

#include <stdlib.h>

static _Thread_local int depth;
static _Thread_local ncclResult_t first_failure;
static _Thread_local struct ncclComm **pending;
static _Thread_local int npending, cap;
/* The group's kind: -1 until a call on a communicator sets it, else its blocking. */
static _Thread_local int group_blocking = -1;
/* A nonblocking init or split of the group runs on: ncclGroupEnd says ncclInProgress. */
static _Thread_local bool in_progress;

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

ncclResult_t nccl_group_enter(bool blocking, const char *fn)
{
    if (depth == 0)
        return ncclSuccess;
    if (group_blocking == -1)
        group_blocking = blocking;
    if (group_blocking == (int)blocking)
        return ncclSuccess;
    return nccl_group_result(nccl_fail(
        ncclInvalidArgument,
        "%s: a %s communicator in a group of %s ones: a group holds one kind (as in NCCL); end "
        "the group first, or give every communicator of the group the same config.blocking",
        fn, blocking ? "blocking" : "nonblocking", blocking ? "nonblocking" : "blocking"));
}

void nccl_group_add_job(struct ncclComm *comm)
{
    if (!comm->blocking) {
        /* Not kept: ncclCommGetAsyncError or its first use joins it (a split's child
         * without a color is its parent's, comms.c). */
        in_progress = true;
        return;
    }
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
    group_blocking = -1;
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
    bool running = in_progress;
    in_progress = false;
    return r == ncclSuccess && running ? ncclInProgress : r;
}
NCCL_ALIAS(ncclGroupEnd);
