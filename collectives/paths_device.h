/* SPDX-License-Identifier: MIT */
/*
 * The device backends' path tables (paths_device.c): the CUDA transports' and the Hexagon
 * sessions' rows, resolved for a communicator, and the plan of a call.  The rows are
 * paths.h's; the plan function is the one every CUDA call takes its path from.
 */
#ifndef ARCOMM_COLL_PATHS_DEVICE_H
#define ARCOMM_COLL_PATHS_DEVICE_H

#include "paths.h"

/* Device copy-ring slots per peer (transports/cuda/cuda_comm.h's CUDA_TSLOTS_MAX, which
 * allreduce_cuda.c asserts equal): the ring bounds the kernel path of the collectives
 * beyond allreduce.  Here for the builds without CUDA headers. */
#define CUDA_PATHS_TSLOTS 4

/* The default rows of a device set, in the order they are tried; NULL for the host's. */
const struct coll_path_row *coll_device_path_rows(enum coll_paths_set set, size_t *n);
/* The set of a backend by its name ("cuda", "cuda-p2p", "hexagon"); COLL_PATHS_SET_END
 * for any other. */
enum coll_paths_set coll_device_paths_set(const char *backend_name);

/*
 * ARCOMM_PATHS for a device set: coll_paths_parse_for, and each item's path must serve
 * the collectives it names (cuda-p2p's one-shot and two-shot allreduce only, direct the
 * others; Hexagon's session allreduce only).  COMM_ERR_INVALID naming the item.
 */
comm_status_t coll_device_paths_parse(enum coll_paths_set set, const char *text,
                                      struct coll_paths_overrides *out, char *err, size_t errlen);

/* What a device communicator (or a configuration without one) is, for its rows. */
struct coll_device_paths_config {
    enum coll_paths_set set;
    int nranks;
    bool threads;            /* every rank a thread of one process */
    uint64_t copy_threshold; /* ARCOMM_COPY_THRESHOLD resolved (UINT64_MAX: off) */
    uint64_t ring;           /* bytes of the copy ring (the peers' fetched chunks) */
};

/* The configuration of a communicator of set from its knobs as set (c->knobs: "auto"
 * resolved here as the backends' setup resolves it), one formula for the calls and for
 * comm_paths_query. */
void coll_device_paths_config(enum coll_paths_set set, const struct rt_knobs *set_knobs, int nranks,
                              bool threads, struct coll_device_paths_config *out);

/* The rows one communicator tries: the one-rank row, then the overrides, then the
 * defaults; those that cannot apply left out (an override never reaches one rank). */
void coll_device_paths_resolve(const struct coll_device_paths_config *cfg,
                               const struct coll_paths_overrides *ov, struct coll_paths *out);

/* Bytes of the allreduce that serves a call of kind on the LL kernel: bytes per rank,
 * times n for allgather and reduce_scatter, n^2 for alltoall (a "staged" row's sizes). */
uint64_t coll_cuda_ll_bytes(enum coll_kind kind, uint64_t bytes, int nranks);

/*
 * The plan of a call: the first row that matches (plan->path COLL_PATH_NONE and row -1
 * when none does).  A kernel row of a collective beyond allreduce applies only while its
 * allreduce fits half the copy ring (t->room).  Every rank computes the same plan: the
 * table comes from agreed knobs and the rank count, the call's words are compared.
 */
void coll_device_paths_plan(const struct coll_paths *t, const struct coll_plan_ask *ask,
                            struct coll_plan *plan);

#endif /* ARCOMM_COLL_PATHS_DEVICE_H */
