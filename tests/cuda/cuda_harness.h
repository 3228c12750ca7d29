/* SPDX-License-Identifier: MIT */
/*
 * The CUDA tests' harness: element types emulated on the host, random cases, the
 * expected results (bit for bit and against float64), rank contexts on their GPUs, and
 * jobs of thread ranks driven by a thread per rank or by one thread in either order.
 */
#ifndef ARCOMM_TESTS_CUDA_HARNESS_H
#define ARCOMM_TESTS_CUDA_HARNESS_H

#include "arcomm.h"
#include "cuda_check.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_RANKS 8

/* One allreduce to run and check. */
struct kase {
    comm_dtype_t dtype;
    size_t count;
    bool inplace;
    size_t offset;       /* elements past a 256-byte aligned base: unaligned when odd */
    size_t addend_count; /* 0 = plain allreduce */
    bool narrow;         /* f32 expected to travel as bf16 */
    int codec;           /* WIRE_INT8 / WIRE_FP8: expected to travel in that block codec */
    uint64_t seed;
};

/* The expected bits (host emulation) and the float64 reference check for element i. */
struct expect {
    void *bits;    /* count elements of dtype */
    double *ref;   /* float64 sum + addend */
    double *bound; /* allowed |result - ref| */
};

/* A rank: its GPU, communicator, stream, device buffers and host copies. */
struct rank_ctx {
    int rank, nranks, device;
    comm_t *comm;
    cudaStream_t stream;
    void *dbuf, *drecv, *dadd; /* device: send (and in place), recv, addend */
    size_t cap;                /* bytes of each device buffer */
    void *hin, *hout;          /* host copies */
};

/* Thread ranks of one communicator, and the cases they run. */
struct job {
    int nranks;
    comm_id_t id;
    struct rank_ctx r[MAX_RANKS];
    pthread_barrier_t bar;
    const struct kase *cases;
    size_t ncases;
    int timeout_ms;
    void *addend; /* host addend of the current case */
    void *inputs[MAX_RANKS];
};

size_t esize(comm_dtype_t t);
float get_f(const void *buf, size_t i, comm_dtype_t t);
void fill(void *buf, size_t n, comm_dtype_t t, uint64_t seed);
uint64_t input_seed(const struct kase *k, int r);
/* The codec ARCOMM_WIRE names in this process's environment (WIRE_BF16 when unset). */
int env_codec(void);
void make_expect(const struct kase *k, int nranks, void *const *inputs, const void *addend,
                 struct expect *e);
void free_expect(struct expect *e);
long check_output(const struct kase *k, int rank, const void *out, const struct expect *e);
void rank_alloc(struct rank_ctx *r, size_t cap);
void rank_free(struct rank_ctx *r);
void stage_case(struct rank_ctx *r, const struct kase *k, const void *addend_host, void **send,
                void **recv, void **add);
comm_status_t enqueue(struct rank_ctx *r, const struct kase *k, void *send, void *recv, void *add);
void fetch(struct rank_ctx *r, const struct kase *k, const void *recv);
void job_init(struct job *j, int nranks, int timeout_ms, size_t cap);
void job_destroy(struct job *j);
void verify_case(struct job *j, const struct kase *k, void *const *recv);
void *addend_for(const struct kase *k);
void run_single_thread(struct job *j, const struct kase *cases, size_t n, bool reverse);
void run_threads(struct job *j, const struct kase *cases, size_t n);

#endif /* ARCOMM_TESTS_CUDA_HARNESS_H */
