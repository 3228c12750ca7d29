/* SPDX-License-Identifier: MIT */
/*
 * The CUDA collectives: allreduce (its path from the call's plan, plan_cuda.c: by default
 * the kernel path below ARCOMM_COPY_THRESHOLD, copy engines from it; bf16 wire narrowing),
 * the collectives beyond allreduce (host-staged through the pinned segment,
 * collectives_cuda.c), and what the CUDA backend (backend.c) calls.
 */
#ifndef ARCOMM_COLL_CUDA_H
#define ARCOMM_COLL_CUDA_H

#include "coll.h"
#include "cuda/cuda_comm.h"
#include "paths.h"
#include "wire.h"
#include "kernels.h"

/*
 * The path table (plan_cuda.c).  cuda_paths_parse: ARCOMM_PATHS for c's backend, before
 * the transport's setup (a malformed item, or one naming another backend's path, fails
 * comm_init alike on every rank: the string is agreed).  cuda_paths_setup: the table,
 * once the transport is set up (x->paths).  cuda_paths_teardown: the transport's
 * teardown, then the table.  cuda_plan: the plan of a call, once per call.
 */
comm_status_t cuda_paths_parse(struct comm *c, struct coll_paths_overrides *ov);
comm_status_t cuda_paths_setup(struct comm *c, const struct coll_paths_overrides *ov);
void cuda_paths_teardown(struct comm *c);
void cuda_plan(const struct comm *c, const struct coll_call *call, struct coll_plan *plan);

/* What the CUDA backends (backend.c, backend_p2p.c) refuse of a well-formed call. */
comm_status_t cuda_validate(struct comm *c, const struct coll_call *call, const char *fn);
/* A validated call on a CUDA communicator, on its plan's path: enqueued on call->stream,
 * or an error. */
comm_status_t coll_cuda_allreduce(struct comm *c, const struct coll_call *call,
                                  const struct coll_plan *plan);
/* cuda-p2p (allreduce_p2p.c): one-shot and two-shot through the peers' device regions. */
comm_status_t coll_cuda_p2p_allreduce(struct comm *c, const struct coll_call *call,
                                      const struct coll_plan *plan);
/* cuda-p2p (collectives_p2p.c): broadcast, allgather, alltoall as direct copies. */
comm_status_t coll_cuda_p2p_move(struct comm *c, const struct coll_call *call);
/* cuda-p2p (collectives_p2p.c): reduce_scatter (the two-shot reduce-scatter half), and
 * reduce (every rank pushes to the root). */
comm_status_t coll_cuda_p2p_reduce_scatter(struct comm *c, const struct coll_call *call);
comm_status_t coll_cuda_p2p_reduce(struct comm *c, const struct coll_call *call);
/* An allreduce path: run enqueues a call whose contributions travel in codec, one the
 * path carries (carry) or WIRE_NONE, as wire_pick chose it. */
struct cuda_allreduce_path {
    comm_status_t (*run)(struct comm *c, const struct coll_call *call, enum wire_codec codec);
    const struct wire_carry *carry;
};
/* What the LL-round paths carry (the kernel path, cuda-p2p): bf16 for f32 sums. */
extern const struct wire_carry cuda_carry_bf16_sums;
/* Allreduce on a transport's two paths as the plan says: small (kernel, one-shot), large
 * (copy, two-shot); local: cuda_single_rank.  The device's reports checked, the call
 * ordered, the codec chosen by wire_pick from ARCOMM_WIRE and ARCOMM_WIRE_THRESHOLD (agreed
 * at join) and what the path carries.  coll_cuda_allreduce is this over the kernel and
 * copy-engine paths. */
comm_status_t cuda_allreduce_planned(struct comm *c, const struct coll_call *call,
                                     const struct coll_plan *plan,
                                     const struct cuda_allreduce_path *small,
                                     const struct cuda_allreduce_path *large);
/* Allreduce's kernel path for call (an allreduce), the ranks comparing the call as
 * instead (the collective a caller made, served through it): enqueued after
 * cuda_call_begin. */
comm_status_t cuda_kernel_path_as(struct comm *c, const struct coll_call *call,
                                  const struct coll_call *as, bool narrow);
/* Broadcast, reduce, allgather, reduce_scatter and alltoall (call->kind says which) on
 * the host-staged transport's paths as the plan says: kernel, copy or local. */
comm_status_t coll_cuda_staged(struct comm *c, const struct coll_call *call,
                               const struct coll_plan *plan);
/* A call of a one-rank communicator, enqueued after cuda_call_begin: a device copy, or
 * (reductions, allreduce with its addend) the add kernel over the one input. */
comm_status_t cuda_single_rank(struct comm *c, const struct coll_call *call);

/*
 * What this rank's GPU or a peer reported since the last call: COMM_OK, or the
 * failure, recorded with rt_error (rank, stage, call).
 */
comm_status_t cuda_check_device(struct comm *c);

/* allreduce_cuda.c: what every CUDA collective's enqueueing shares. */

/* Records a failed CUDA runtime call (a cudaError_t) or driver call: COMM_ERR_SYSTEM. */
comm_status_t cuda_launch_failed(struct comm *c, const char *what, int e);
comm_status_t cuda_driver_failed(struct comm *c, const char *what, CUresult r);
bool cuda_aligned16(const void *p);
/* The kernels' view of a call: buffers, regions, counters, timeout and descriptor
 * (collective, count, dtype, op, root, path, narrowing, addend). */
void cuda_fill_common(struct comm *c, const struct coll_call *call, bool narrow,
                      enum cuda_path path, struct cuda_kcommon *k);
/*
 * The start of a call with count > 0 after cuda_check_device: c's GPU made current
 * (the caller's is kept in *prev), a stream that cannot be captured refused
 * (COMM_ERR_UNSUPPORTED), the call ordered after the previous one (in a capture: the
 * graph's replays after whatever came before them).  On failure the device is already
 * restored.
 */
comm_status_t cuda_call_begin(struct comm *c, const struct coll_call *call, int *prev);
/* Its end: on success the call's end is recorded (ev_done); the device is restored.
 * Returns st, or the failure of that record. */
comm_status_t cuda_call_end(struct comm *c, const struct coll_call *call, comm_status_t st,
                            int prev);

/*
 * A copy-engine call's pieces (allreduce's copy path and collectives_cuda.c): the begin
 * kernel that takes the call's number and chunks on the device, with both copy streams
 * ordered after it; one step of a copy stream (publish, then wait: struct
 * cuda_wait_args, nothing launched when it has neither); the end, where the caller's
 * stream joins both copy streams.
 */
comm_status_t cuda_copy_begin(struct comm *c, const struct coll_call *call, uint32_t chunks);
comm_status_t cuda_copy_step(struct comm *c, const struct cuda_wait_args *w, cudaStream_t s);
/* Publishes this rank's counter at off (ready or h2d) = the call's first chunk + rel, right
 * after the stream's copies: never behind a wait of the same call (streams may share a
 * hardware queue, and a publish queued behind a spinning wait deadlocked on the lent
 * H200, 2026-12-01). */
comm_status_t cuda_copy_publish(struct comm *c, const struct cuda_wait_args *base, uint32_t off,
                                uint32_t rel, cudaStream_t s);
comm_status_t cuda_copy_end(struct comm *c, const struct coll_call *call);

#endif /* ARCOMM_COLL_CUDA_H */
