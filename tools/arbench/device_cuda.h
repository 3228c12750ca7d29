/* SPDX-License-Identifier: MIT */
/*
 * arbench's CUDA side: the buffer backend of --device cuda (device memory of one GPU
 * per rank, the rank's own non-blocking stream) and the NCCL peer of --compare nccl
 * (libnccl.so.2 loaded at run time: the build needs no NCCL, only CUDA).
 */
#ifndef ARBENCH_DEVICE_CUDA_H
#define ARBENCH_DEVICE_CUDA_H

#include "bench_common.h"

/* Fills *out with a backend on GPU ordinal (its ctx owned by it).  0, or -1 after
 * printing why. */
int bench_cuda_open(int ordinal, struct bench_device *out);
void bench_cuda_close(struct bench_device *d);
/* The rank's stream (a cudaStream_t) for the collectives under test. */
void *bench_cuda_stream(const struct bench_device *d);
/* How many GPUs this process sees (0 when none or no driver). */
int bench_cuda_count(void);

#define BENCH_NCCL_ID_BYTES 128
/* Loads libnccl.so.2; 0, or -1 after printing why. */
int bench_nccl_load(void);
int bench_nccl_unique_id(unsigned char id[BENCH_NCCL_ID_BYTES]);
/* Joins the NCCL communicator as rank of nranks on the current GPU. */
int bench_nccl_init(void **comm, int nranks, const unsigned char id[BENCH_NCCL_ID_BYTES], int rank,
                    int ordinal);
struct bench_nccl_ctx {
    void *comm;
    void *stream;
};
/* NCCL's collectives as a struct bench_coll over x (ncclAllReduce, ncclBroadcast,
 * ncclReduce, ncclAllGather, ncclReduceScatter, ncclAlltoAll: NULL when the loaded NCCL
 * lacks it, as before 2.28). */
struct bench_coll bench_nccl_coll(struct bench_nccl_ctx *x);
void bench_nccl_destroy(void *comm);

#endif /* ARBENCH_DEVICE_CUDA_H */
