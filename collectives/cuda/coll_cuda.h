/* SPDX-License-Identifier: MIT */
/*
 * The CUDA allreduce: path selection (kernel path below ARCOMM_COPY_THRESHOLD, copy
 * engines from it), bf16 wire narrowing, and what the CUDA backend (backend.c) calls.
 */
#ifndef ARCOMM_COLL_CUDA_H
#define ARCOMM_COLL_CUDA_H

#include "coll.h"

/* A validated call on a CUDA communicator: enqueued on call->stream, or an error. */
comm_status_t coll_cuda_allreduce(struct comm *c, const struct coll_call *call);

/*
 * What this rank's GPU or a peer reported since the last call: COMM_OK, or the
 * failure, recorded with rt_error (rank, stage, call).
 */
comm_status_t cuda_check_device(struct comm *c);

#endif /* ARCOMM_COLL_CUDA_H */
