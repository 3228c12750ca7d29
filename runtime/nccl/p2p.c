/* SPDX-License-Identifier: MIT */
/*
 * ncclSend and ncclRecv on arcomm's comm_send and comm_recv.  Calls are kept until the
 * outermost ncclGroupEnd (at once outside a group), then posted in one arcomm group
 * (comm_group_start ... comm_group_end), which runs them all together: matched in call
 * order per pair, a send and receive that disagree failing with COMM_ERR_MISMATCH on
 * both, waits, aborts and dead peers as arcomm's always are, and no deadlock for a pair
 * or ring of sends and receives.  arcomm's own group matches sends to oneself with
 * receives from oneself.  The CUDA backends stage device buffers through host memory
 * and block until the data moved (collectives/p2p/p2p_cuda.c), so a call cannot be
 * captured into a CUDA graph.  ncclGather and ncclScatter are groups of these.
 */
#include "face.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct p2p_op {
    struct ncclComm *comm;
    bool send;
    void *buf;
    size_t count;
    comm_dtype_t dt;
    int peer;
    cudaStream_t stream;
    const char *fn;
};

static _Thread_local struct p2p_op *ops;
static _Thread_local int nops, cap_ops;

static bool stream_capturing(cudaStream_t s)
{
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(s, &cap) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return cap != cudaStreamCaptureStatusNone;
}

/* The kept calls as one arcomm group; the first failure, named by its call. */
static ncclResult_t run_all(void)
{
    ncclResult_t r = ncclSuccess;
    for (int i = 0; i < nops; i++)
        if (ops[i].count > 0 && stream_capturing(ops[i].stream))
            return nccl_fail(ncclInvalidUsage,
                             "%s: rank %d: a send or receive is being captured into a CUDA "
                             "graph, which arcomm's sends and receives (staged through the "
                             "host, blocking) cannot be; make it outside the capture",
                             ops[i].fn, ops[i].comm->rank);
    (void)comm_group_start();
    for (int i = 0; i < nops; i++) {
        struct p2p_op *o = &ops[i];
        comm_status_t st = o->send
                               ? comm_send(o->comm->c, o->buf, o->count, o->dt, o->peer, o->stream)
                               : comm_recv(o->comm->c, o->buf, o->count, o->dt, o->peer, o->stream);
        if (st != COMM_OK && r == ncclSuccess)
            r = nccl_fail_comm(o->comm, o->fn, st);
    }
    comm_status_t st = comm_group_end();
    if (st != COMM_OK && r == ncclSuccess) {
        /* The communicator whose message says why: the first that failed. */
        struct ncclComm *why = ops[0].comm;
        for (int i = 0; i < nops; i++)
            if (ops[i].comm->c != NULL && comm_last_error(ops[i].comm->c)[0] != '\0') {
                why = ops[i].comm;
                break;
            }
        r = nccl_fail_comm(why, "ncclGroupEnd (its ncclSend/ncclRecv)", st);
    }
    return r;
}

ncclResult_t nccl_p2p_flush(void)
{
    if (nops == 0)
        return ncclSuccess;
    ncclResult_t r = run_all();
    nops = 0;
    free(ops);
    ops = NULL;
    cap_ops = 0;
    return r;
}

static ncclResult_t keep(struct ncclComm *comm, bool send, const void *buf, size_t count,
                         ncclDataType_t datatype, int peer, cudaStream_t stream, const char *fn)
{
    ncclResult_t r = nccl_comm_enter(comm, fn);
    comm_dtype_t dt = COMM_U8;
    if (r == ncclSuccess)
        r = nccl_map_dtype(datatype, false, &dt, fn);
    if (r == ncclSuccess && (peer < 0 || peer >= comm->nranks))
        r = nccl_fail(ncclInvalidArgument, "%s: rank %d: peer %d is out of range 0..%d", fn,
                      comm->rank, peer, comm->nranks - 1);
    if (r == ncclSuccess && buf == NULL && count > 0)
        r = nccl_fail(ncclInvalidArgument, "%s: rank %d: the buffer is NULL for %zu elements", fn,
                      comm->rank, count);
    if (r == ncclSuccess && nops == cap_ops) {
        int ncap = cap_ops ? 2 * cap_ops : 16;
        struct p2p_op *n = realloc(ops, (size_t)ncap * sizeof(*n));
        if (n == NULL)
            r = nccl_fail(ncclSystemError, "%s: out of memory", fn);
        else {
            ops = n;
            cap_ops = ncap;
        }
    }
    if (r != ncclSuccess)
        return nccl_group_result(r);
    ops[nops++] = (struct p2p_op){.comm = comm,
                                  .send = send,
                                  .buf = (void *)buf,
                                  .count = count,
                                  .dt = dt,
                                  .peer = peer,
                                  .stream = stream,
                                  .fn = fn};
    return nccl_in_group() ? ncclSuccess : nccl_p2p_flush();
}

NCCL_API ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
                               int peer, ncclComm_t comm, cudaStream_t stream)
{
    return keep(comm, true, sendbuff, count, datatype, peer, stream, "ncclSend");
}
NCCL_ALIAS(ncclSend);

NCCL_API ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                               ncclComm_t comm, cudaStream_t stream)
{
    return keep(comm, false, recvbuff, count, datatype, peer, stream, "ncclRecv");
}
NCCL_ALIAS(ncclRecv);

/* ncclGather and ncclScatter (NCCL 2.28's, beyond 2.19's nccl.h): declared here. */
NCCL_API ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                                 ncclDataType_t datatype, int root, ncclComm_t comm,
                                 cudaStream_t stream);
NCCL_API ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                                  ncclDataType_t datatype, int root, ncclComm_t comm,
                                  cudaStream_t stream);

/*
 * A gather is a group of sends to the root and the root's receives from every rank
 * (rank p's count elements at p * count of its recvbuff); a scatter the other way.  The
 * root's own block is a copy within the group, or nothing in place (gather: sendbuff at
 * root * count of recvbuff; scatter: recvbuff at root * count of sendbuff).  Inside a
 * program's group the sends and receives join it; otherwise the group is this call's.
 */
static ncclResult_t rooted(struct ncclComm *comm, bool gather, const void *sendbuff, void *recvbuff,
                           size_t count, ncclDataType_t datatype, int root, cudaStream_t stream,
                           const char *fn)
{
    ncclResult_t r = nccl_comm_ready(comm, fn);
    comm_dtype_t dt = COMM_U8;
    if (r == ncclSuccess)
        r = nccl_map_dtype(datatype, false, &dt, fn);
    if (r != ncclSuccess)
        return nccl_group_result(r);
    size_t bytes = count * comm_dtype_size(dt), all = 0;
    bool is_root = comm->rank == root;
    /* The buffer of n blocks (the root's) and the buffer of one (every rank's). */
    const char *many = gather ? recvbuff : sendbuff, *one = gather ? sendbuff : recvbuff;
    if (root < 0 || root >= comm->nranks)
        r = nccl_fail(ncclInvalidArgument, "%s: rank %d: root %d is out of range 0..%d", fn,
                      comm->rank, root, comm->nranks - 1);
    else if (__builtin_mul_overflow(bytes, (size_t)comm->nranks, &all) ||
             bytes / comm_dtype_size(dt) != count)
        r = nccl_fail(ncclInvalidArgument, "%s: rank %d: %zu elements per rank overflow", fn,
                      comm->rank, count);
    else if (count > 0 && (one == NULL || (is_root && many == NULL)))
        r = nccl_fail(ncclInvalidArgument, "%s: rank %d: %s is NULL for %zu elements", fn,
                      comm->rank,
                      one == NULL ? (gather ? "sendbuff" : "recvbuff")
                                  : (gather ? "the root's recvbuff" : "the root's sendbuff"),
                      count);
    if (r != ncclSuccess || count == 0)
        return nccl_group_result(r);
    bool in_place = is_root && one == many + (size_t)root * bytes;
    ncclResult_t e = ncclGroupStart();
    if (e == ncclSuccess && !in_place)
        e = keep(comm, gather, (void *)one, count, datatype, root, stream, fn);
    for (int p = 0; p < comm->nranks && e == ncclSuccess && is_root; p++)
        if (p != root || !in_place)
            e = keep(comm, !gather, (void *)(many + (size_t)p * bytes), count, datatype, p, stream,
                     fn);
    ncclResult_t end = ncclGroupEnd();
    return e != ncclSuccess ? e : end;
}

NCCL_API ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                                 ncclDataType_t datatype, int root, ncclComm_t comm,
                                 cudaStream_t stream)
{
    return rooted(comm, true, sendbuff, recvbuff, count, datatype, root, stream, "ncclGather");
}
NCCL_ALIAS(ncclGather);

NCCL_API ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                                  ncclDataType_t datatype, int root, ncclComm_t comm,
                                  cudaStream_t stream)
{
    return rooted(comm, false, sendbuff, recvbuff, count, datatype, root, stream, "ncclScatter");
}
NCCL_ALIAS(ncclScatter);
