/* SPDX-License-Identifier: MIT */
/*
 * One rank's side of a case (nccl_cases.h) through the NCCL API: device buffers on the
 * current GPU, inputs in, outputs poisoned, the call, the copy back and the check.  The
 * GPU tests (one thread driving every rank, or a process per rank) share it; they run
 * over arcomm's libnccl and, as a check of the tests themselves, over a real NCCL.
 */
#ifndef ARCOMM_TESTS_NCCL_HARNESS_H
#define ARCOMM_TESTS_NCCL_HARNESS_H

#include "nccl_cases.h"

#include <cuda_runtime.h>
#include <stdlib.h>

struct tc_rank {
    void *dsend, *drecv; /* what the call is given */
    void *dbase;         /* the allocation(s) to free */
    void *dbase2;
    void *dscalar; /* a premultiplied sum's device scalar */
    unsigned char *hin, *hout;
    size_t out_bytes; /* what tc_done copies back from drecv */
    ncclRedOp_t op;
};

#define TC_CUDA(call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

/* Buffers and inputs of rank r for case c, on the current device; 0 or an ncclResult_t. */
static inline int tc_setup(const struct tcase *c, int r, int n, ncclComm_t comm, struct tc_rank *b)
{
    memset(b, 0, sizeof(*b));
    size_t es = tc_esize(c->dtype);
    size_t se = tc_send_elems(c, n), re = tc_recv_elems(c, n);
    size_t sb = (se ? se : 1) * es, rb = (re ? re : 1) * es;
    b->hin = malloc(sb > rb ? sb : rb);
    b->hout = malloc(sb > rb ? sb : rb);
    if (!b->hin || !b->hout)
        exit(2);
    tc_fill(c, r, b->hin, n);
    b->out_bytes = re * es;
    b->op = c->op;
    if (c->kind == TC_BCAST) {
        TC_CUDA(cudaMalloc(&b->dbase, rb));
        TC_CUDA(cudaMemset(b->dbase, TC_POISON, rb));
        if (r == c->root)
            TC_CUDA(cudaMemcpy(b->dbase, b->hin, c->count * es, cudaMemcpyHostToDevice));
        b->dsend = b->drecv = b->dbase;
    } else if (c->inplace && c->kind == TC_ALLGATHER) {
        TC_CUDA(cudaMalloc(&b->dbase, rb));
        TC_CUDA(cudaMemset(b->dbase, TC_POISON, rb));
        b->drecv = b->dbase;
        b->dsend = (char *)b->dbase + (size_t)r * c->count * es;
        TC_CUDA(cudaMemcpy(b->dsend, b->hin, c->count * es, cudaMemcpyHostToDevice));
    } else if (c->inplace && c->kind == TC_REDUCE_SCATTER) {
        TC_CUDA(cudaMalloc(&b->dbase, sb));
        TC_CUDA(cudaMemcpy(b->dbase, b->hin, se * es, cudaMemcpyHostToDevice));
        b->dsend = b->dbase;
        b->drecv = (char *)b->dbase + (size_t)r * c->count * es;
    } else if (c->inplace) {
        TC_CUDA(cudaMalloc(&b->dbase, sb));
        TC_CUDA(cudaMemcpy(b->dbase, b->hin, se * es, cudaMemcpyHostToDevice));
        b->dsend = b->drecv = b->dbase;
    } else {
        TC_CUDA(cudaMalloc(&b->dbase, sb));
        TC_CUDA(cudaMalloc(&b->dbase2, rb));
        TC_CUDA(cudaMemcpy(b->dbase, b->hin, se * es, cudaMemcpyHostToDevice));
        TC_CUDA(cudaMemset(b->dbase2, TC_POISON, rb));
        b->dsend = b->dbase;
        b->drecv = b->dbase2;
    }
    if (c->premul) {
        unsigned char scalar[8];
        tc_put(scalar, c->dtype, 0, tc_scalar(c, r));
        void *where = scalar;
        ncclScalarResidence_t res = ncclScalarHostImmediate;
        if (c->premul == 2) {
            TC_CUDA(cudaMalloc(&b->dscalar, 8));
            TC_CUDA(cudaMemcpy(b->dscalar, scalar, es, cudaMemcpyHostToDevice));
            where = b->dscalar;
            res = ncclScalarDevice;
        }
        ncclResult_t rr = ncclRedOpCreatePreMulSum(&b->op, where, c->dtype, res, comm);
        if (rr != ncclSuccess)
            return (int)rr;
    }
    TC_CUDA(cudaDeviceSynchronize());
    return 0;
}

/* The call (enqueued on stream). */
static inline ncclResult_t tc_call(const struct tcase *c, ncclComm_t comm, struct tc_rank *b,
                                   cudaStream_t s)
{
    switch (c->kind) {
    case TC_ALLREDUCE:
        return ncclAllReduce(b->dsend, b->drecv, c->count, c->dtype, b->op, comm, s);
    case TC_BROADCAST:
        return ncclBroadcast(b->dsend, b->drecv, c->count, c->dtype, c->root, comm, s);
    case TC_BCAST:
        return ncclBcast(b->drecv, c->count, c->dtype, c->root, comm, s);
    case TC_REDUCE:
        return ncclReduce(b->dsend, b->drecv, c->count, c->dtype, b->op, c->root, comm, s);
    case TC_ALLGATHER:
        return ncclAllGather(b->dsend, b->drecv, c->count, c->dtype, comm, s);
    case TC_REDUCE_SCATTER:
        return ncclReduceScatter(b->dsend, b->drecv, c->count, c->dtype, b->op, comm, s);
    }
    return ncclInternalError;
}

/* The rank's resources of case c freed (its premultiplied sum destroyed); 1 when that
 * fails (said in why), else 0. */
static inline size_t tc_release(const struct tcase *c, int r, ncclComm_t comm, struct tc_rank *b,
                                char *why, size_t why_len)
{
    size_t wrong = 0;
    if (c->premul && ncclRedOpDestroy(b->op, comm) != ncclSuccess) {
        snprintf(why, why_len, "rank %d: ncclRedOpDestroy failed", r);
        wrong++;
    }
    TC_CUDA(cudaFree(b->dbase));
    if (b->dbase2)
        TC_CUDA(cudaFree(b->dbase2));
    if (b->dscalar)
        TC_CUDA(cudaFree(b->dscalar));
    free(b->hin);
    free(b->hout);
    return wrong;
}

/* After the stream is done: the output back, checked; the rank's resources freed.
 * Returns the wrong elements; *hash is the output's (ranks compare them). */
static inline size_t tc_done(const struct tcase *c, int r, int n, ncclComm_t comm,
                             struct tc_rank *b, uint64_t *hash, char *why, size_t why_len)
{
    if (b->out_bytes)
        TC_CUDA(cudaMemcpy(b->hout, b->drecv, b->out_bytes, cudaMemcpyDeviceToHost));
    size_t wrong = tc_check(c, r, n, b->hout, why, why_len);
    *hash = tc_hash(b->hout, b->out_bytes);
    return wrong + tc_release(c, r, comm, b, why, why_len);
}

/*
 * Case c (out of place, or an allreduce in place) captured into a CUDA graph once, then
 * run 2 * replays times with fresh inputs (c->salt + 1, + 2, ...) and a poisoned
 * output: the graph launched, and between launches the same call made eagerly on the
 * same buffers, each checked.  Returns the wrong elements (the first described in why);
 * *hash is the last output's; the rank's resources freed.
 */
static inline size_t tc_graph(const struct tcase *c, int r, int n, ncclComm_t comm, cudaStream_t s,
                              int replays, uint64_t *hash, char *why, size_t why_len)
{
    struct tc_rank b;
    why[0] = '\0';
    int se = tc_setup(c, r, n, comm, &b);
    if (se != 0) {
        snprintf(why, why_len, "rank %d: setup: %s: %s", r, ncclGetErrorString((ncclResult_t)se),
                 ncclGetLastError(comm));
        return 1;
    }
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    TC_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    ncclResult_t e = tc_call(c, comm, &b, s);
    cudaError_t ce = cudaStreamEndCapture(s, &g);
    if (e != ncclSuccess || ce != cudaSuccess) {
        snprintf(why, why_len, "rank %d: captured call: %s (%s); end of capture: %s", r,
                 ncclGetErrorString(e), ncclGetLastError(comm), cudaGetErrorString(ce));
        return 1;
    }
    TC_CUDA(cudaGraphInstantiate(&ge, g, 0));
    size_t es = tc_esize(c->dtype), wrong = 0;
    struct tcase v = *c;
    for (int k = 0; k < 2 * replays && wrong == 0; k++) {
        v.salt = c->salt + 1u + (unsigned)k;
        tc_fill(&v, r, b.hin, n);
        TC_CUDA(cudaMemcpy(b.dsend, b.hin, tc_send_elems(c, n) * es, cudaMemcpyHostToDevice));
        if (!c->inplace && b.out_bytes)
            TC_CUDA(cudaMemset(b.drecv, TC_POISON, b.out_bytes));
        /* Both ran on the legacy stream, which s (non-blocking) does not wait for. */
        TC_CUDA(cudaDeviceSynchronize());
        if (k % 2 == 0) {
            TC_CUDA(cudaGraphLaunch(ge, s));
        } else if ((e = tc_call(&v, comm, &b, s)) != ncclSuccess) {
            snprintf(why, why_len, "rank %d: the eager call after replay %d: %s (%s)", r, k / 2,
                     ncclGetErrorString(e), ncclGetLastError(comm));
            wrong++;
            break;
        }
        TC_CUDA(cudaStreamSynchronize(s));
        if (b.out_bytes)
            TC_CUDA(cudaMemcpy(b.hout, b.drecv, b.out_bytes, cudaMemcpyDeviceToHost));
        wrong += tc_check(&v, r, n, b.hout, why, why_len);
        *hash = tc_hash(b.hout, b.out_bytes);
    }
    TC_CUDA(cudaGraphExecDestroy(ge));
    TC_CUDA(cudaGraphDestroy(g));
    return wrong + tc_release(c, r, comm, &b, why, why_len);
}

/* Outputs that must be the same bits on every rank. */
static inline bool tc_same_on_all(const struct tcase *c)
{
    return c->kind == TC_ALLREDUCE || c->kind == TC_BROADCAST || c->kind == TC_BCAST ||
           c->kind == TC_ALLGATHER;
}

/* Is the libnccl loaded arcomm's (2.19.3) or a real NCCL (the tests' own check)? */
static inline bool tc_is_arcomm(void)
{
    int v = 0;
    return ncclGetVersion(&v) == ncclSuccess && v == NCCL_VERSION_CODE;
}

#endif /* ARCOMM_TESTS_NCCL_HARNESS_H */
