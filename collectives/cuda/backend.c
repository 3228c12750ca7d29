/* SPDX-License-Identifier: MIT */
/*
 * The CUDA backend: GPUs of one host on the CUDA transport (the shm segment, registered
 * with CUDA), with the kernel and copy-engine paths of allreduce_cuda.c.
 */
#include "backend.h"
#include "coll_cuda.h"
#include "cuda/cuda_comm.h"

static comm_status_t cuda_validate(struct comm *c, const struct coll_call *call, const char *fn)
{
    (void)fn;
    /* The same answer on every rank, before any memory is touched. */
    if (call->op != COMM_SUM ||
        (call->dtype != COMM_F32 && call->dtype != COMM_F16 && call->dtype != COMM_BF16)) {
        rt_error(c, COMM_ERR_UNSUPPORTED,
                 "rank %d: the CUDA transport sums f32, f16 and bf16; %s %s is not supported "
                 "(use a host communicator for it)",
                 c->rank, rt_op_name(call->op), rt_dtype_name(call->dtype));
        return COMM_ERR_UNSUPPORTED;
    }
    return COMM_OK;
}

static comm_status_t cuda_allreduce(struct comm *c, const struct coll_call *call)
{
    comm_status_t st = coll_cuda_allreduce(c, call);
    /* The call is enqueued, and comm_destroy drains it before it leaves: a rank that
     * completed it never fails a peer's. */
    if (st == COMM_OK)
        shm_complete(c);
    return st;
}

static comm_status_t cuda_barrier(struct comm *c)
{
    /* A CUDA rank's GPU may have failed after its last call returned: say so here. */
    comm_status_t st = cuda_check_device(c);
    if (st != COMM_OK)
        return st;
    return coll_host_barrier(c);
}

const struct backend_ops coll_cuda_backend = {
    .name = "cuda",
    .device = COMM_DEVICE_CUDA,
    .probe = cuda_probe,
    .setup = cuda_setup,
    .teardown = cuda_teardown,
    .resolve_knobs = NULL, /* cuda_setup resolves its knobs into struct cuda_comm */
    .validate = cuda_validate,
    .allreduce = cuda_allreduce,
    .allreduce_add = cuda_allreduce,
    .barrier = cuda_barrier,
    .publish_failure = cuda_publish_failure,
    .wake = shm_wake,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
};
