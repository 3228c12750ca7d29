/* SPDX-License-Identifier: MIT */
/*
 * nccl_procs' send/receive cases (ncclSend/ncclRecv): a ring, an alltoall, ncclGather
 * and ncclScatter, outside a group, a count mismatch, and a group of them captured into
 * a CUDA graph (0 elements too) and replayed with fresh inputs; every word checked.
 */
#include "nccl_procs.h"

/* Word i of rank r's p2p data (block b of it: i counts on from b * count). */
static uint32_t p2p_salted(int r, size_t i, uint32_t salt)
{
    return ((uint32_t)r << 24) ^ (uint32_t)(i * 2654435761u) ^ (salt * 0x9e3779b9u);
}

static uint32_t p2p_word(int r, size_t i)
{
    return p2p_salted(r, i, 0);
}

/* Sends and receives of count u32 per peer: fills and checks the host side. */
static size_t p2p_check(const uint32_t *got, int from, size_t off, size_t count, int rank,
                        const char *what, char *why, size_t len)
{
    for (size_t i = 0; i < count; i++)
        if (got[i] != p2p_word(from, off + i)) {
            snprintf(why, len, "rank %d: %s: element %zu from rank %d is 0x%08x, want 0x%08x", rank,
                     what, i, from, got[i], p2p_word(from, off + i));
            return 1;
        }
    return 0;
}

/* NCCL 2.28's, beyond 2.19's nccl.h (which these tests are built against). */
ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                        int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);

/*
 * ncclGather to the last rank (out of place: every rank sends block `rank` of its data)
 * and ncclScatter from it (in place at the root: its own block stays where it is).
 * dsend holds block b of this rank's data at b * count; drecv has room for n blocks.
 */
static size_t gather_scatter(int rank, int n, size_t count, ncclComm_t comm, cudaStream_t st,
                             void *dsend, void *drecv, uint32_t *got, char *why, size_t len)
{
    int root = n - 1;
    size_t block = count * 4, wrong = 0;
    TC_CUDA(cudaMemset(drecv, 0xff, block * (size_t)n));
    TC_CUDA(cudaDeviceSynchronize());
    ncclResult_t e =
        ncclGather((char *)dsend + (size_t)rank * block, drecv, count, ncclUint32, root, comm, st);
    if (e != ncclSuccess) {
        snprintf(why, len, "rank %d: ncclGather: %s: %s", rank, ncclGetErrorString(e),
                 ncclGetLastError(comm));
        return 1;
    }
    TC_CUDA(cudaStreamSynchronize(st));
    if (rank == root) {
        TC_CUDA(cudaMemcpy(got, drecv, block * (size_t)n, cudaMemcpyDeviceToHost));
        for (int p = 0; p < n && wrong == 0; p++)
            wrong += p2p_check(got + (size_t)p * count, p, (size_t)p * count, count, rank,
                               "ncclGather", why, len);
    }
    /* Only the root's buffer is read; on the others the output is drecv. */
    TC_CUDA(cudaMemset(drecv, 0xff, block * (size_t)n));
    TC_CUDA(cudaDeviceSynchronize());
    void *out = rank == root ? (char *)dsend + (size_t)root * block : drecv;
    e = ncclScatter(dsend, out, count, ncclUint32, root, comm, st);
    if (e != ncclSuccess) {
        snprintf(why, len, "rank %d: ncclScatter: %s: %s", rank, ncclGetErrorString(e),
                 ncclGetLastError(comm));
        return 1;
    }
    TC_CUDA(cudaStreamSynchronize(st));
    TC_CUDA(cudaMemcpy(got, out, block, cudaMemcpyDeviceToHost));
    wrong += p2p_check(got, root, (size_t)rank * count, count, rank, "ncclScatter", why, len);
    return wrong;
}

/*
 * Sends and receives captured into a CUDA graph in global capture mode, as nccl-tests'
 * -G does, after the pairs exist: (a) the rank's own block copied with cudaMemcpyAsync
 * and a group of sends and receives with every other rank (hypercube_perf's shape), (b)
 * an alltoall whose group holds a send to and a receive from oneself (alltoall_perf's),
 * (c) a group of sends and receives of 0 elements (nccl-tests' -G starts at 0 bytes), all
 * in one graph, replayed with fresh inputs; every element checked.  The send buffer is
 * left as p2p_word filled it.  Returns the wrong elements.
 */
static size_t p2p_graph(int rank, int n, ncclComm_t comm, size_t count, void *dsend, void *drecv,
                        uint32_t *h, uint32_t *got, char *why, size_t len)
{
    size_t blk = count * 4, bytes = blk * (size_t)n, wrong = 0;
    void *drecv2 = NULL;
    cudaStream_t s;
    TC_CUDA(cudaMalloc(&drecv2, bytes));
    TC_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    ncclResult_t e = ncclSuccess, e2 = ncclSuccess;
    TC_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    cudaError_t ce =
        cudaMemcpyAsync((char *)drecv + (size_t)rank * blk, (char *)dsend + (size_t)rank * blk, blk,
                        cudaMemcpyDeviceToDevice, s);
    ncclGroupStart();
    for (int p = 0; p < n && e == ncclSuccess; p++) {
        if (p == rank)
            continue;
        e = ncclSend((char *)dsend + (size_t)p * blk, count, ncclUint32, p, comm, s);
        if (e == ncclSuccess)
            e = ncclRecv((char *)drecv + (size_t)p * blk, count, ncclUint32, p, comm, s);
    }
    e2 = ncclGroupEnd();
    if (e == ncclSuccess)
        e = e2;
    ncclGroupStart();
    for (int p = 0; p < n && e == ncclSuccess; p++) {
        e = ncclSend((char *)dsend + (size_t)p * blk, count, ncclUint32, p, comm, s);
        if (e == ncclSuccess)
            e = ncclRecv((char *)drecv2 + (size_t)p * blk, count, ncclUint32, p, comm, s);
    }
    e2 = ncclGroupEnd();
    if (e == ncclSuccess)
        e = e2;
    ncclGroupStart();
    for (int p = 0; p < n && e == ncclSuccess; p++) {
        e = ncclSend(dsend, 0, ncclUint32, p, comm, s);
        if (e == ncclSuccess)
            e = ncclRecv(drecv2, 0, ncclUint32, p, comm, s);
    }
    e2 = ncclGroupEnd();
    if (e == ncclSuccess)
        e = e2;
    cudaError_t ee = cudaStreamEndCapture(s, &g);
    if (ce != cudaSuccess || e != ncclSuccess || ee != cudaSuccess) {
        snprintf(why, len,
                 "rank %d: sends and receives captured in global mode: copy %s, calls %s (%s), "
                 "end of capture %s",
                 rank, cudaGetErrorString(ce), ncclGetErrorString(e), ncclGetLastError(comm),
                 cudaGetErrorString(ee));
        wrong = 1;
        goto out;
    }
    TC_CUDA(cudaGraphInstantiate(&ge, g, 0));
    for (uint32_t salt = 1; salt <= 3 && wrong == 0; salt++) {
        for (size_t i = 0; i < count * (size_t)n; i++)
            h[i] = p2p_salted(rank, i, salt);
        TC_CUDA(cudaMemcpy(dsend, h, bytes, cudaMemcpyHostToDevice));
        TC_CUDA(cudaMemset(drecv, 0xff, bytes));
        TC_CUDA(cudaMemset(drecv2, 0xff, bytes));
        TC_CUDA(cudaDeviceSynchronize());
        TC_CUDA(cudaGraphLaunch(ge, s));
        TC_CUDA(cudaStreamSynchronize(s));
        for (int k = 0; k < 2 && wrong == 0; k++) {
            TC_CUDA(cudaMemcpy(got, k ? drecv2 : drecv, bytes, cudaMemcpyDeviceToHost));
            for (int p = 0; p < n && wrong == 0; p++)
                for (size_t i = 0; i < count && wrong == 0; i++) {
                    uint32_t want = p2p_salted(p, (size_t)rank * count + i, salt);
                    if (got[(size_t)p * count + i] != want) {
                        snprintf(why, len,
                                 "rank %d: graph replay %u, %s: element %zu from rank %d is "
                                 "0x%08x, want 0x%08x",
                                 rank, salt,
                                 k ? "alltoall with a send to itself"
                                   : "own block copied, sends and receives with the others",
                                 i, p, got[(size_t)p * count + i], want);
                        wrong = 1;
                    }
                }
        }
    }
out:
    for (size_t i = 0; i < count * (size_t)n; i++)
        h[i] = p2p_word(rank, i);
    TC_CUDA(cudaMemcpy(dsend, h, bytes, cudaMemcpyHostToDevice));
    if (ge != NULL)
        TC_CUDA(cudaGraphExecDestroy(ge));
    if (g != NULL)
        TC_CUDA(cudaGraphDestroy(g));
    TC_CUDA(cudaStreamDestroy(s));
    TC_CUDA(cudaFree(drecv2));
    return wrong;
}

/*
 * ncclSend/ncclRecv: a ring in one group (even ranks call the send first, odd ranks the
 * receive), an alltoall of grouped sends and receives (each peer and oneself, as
 * nccl-tests' alltoall_perf does), ncclGather and ncclScatter (built on them), rank 0
 * to rank 1 outside a group, and on a
 * communicator split off for it, a send and a receive that disagree on the count: both
 * fail.  Returns the wrong elements.
 */
size_t p2p_cases(int rank, int n, ncclComm_t comm, cudaStream_t st, char *why, size_t len)
{
    const size_t count = 1000 + 7 * (size_t)n;
    size_t bytes = count * 4 * (size_t)n;
    uint32_t *h = malloc(bytes), *got = malloc(bytes);
    void *dsend = NULL, *drecv = NULL;
    TC_CUDA(cudaMalloc(&dsend, bytes));
    TC_CUDA(cudaMalloc(&drecv, bytes));
    for (size_t i = 0; i < count * (size_t)n; i++)
        h[i] = p2p_word(rank, i);
    TC_CUDA(cudaMemcpy(dsend, h, bytes, cudaMemcpyHostToDevice));
    size_t wrong = 0;
    ncclResult_t e = ncclSuccess;

    /* The ring. */
    int right = (rank + 1) % n, left = (rank + n - 1) % n;
    TC_CUDA(cudaMemset(drecv, 0xff, bytes));
    TC_CUDA(cudaDeviceSynchronize());
    ncclGroupStart();
    if (rank % 2 == 0) {
        e = ncclSend(dsend, count, ncclUint32, right, comm, st);
        if (e == ncclSuccess)
            e = ncclRecv(drecv, count, ncclUint32, left, comm, st);
    } else {
        e = ncclRecv(drecv, count, ncclUint32, left, comm, st);
        if (e == ncclSuccess)
            e = ncclSend(dsend, count, ncclUint32, right, comm, st);
    }
    ncclResult_t ge = ncclGroupEnd();
    if (e != ncclSuccess || ge != ncclSuccess) {
        snprintf(why, len, "rank %d: ring: %s / %s: %s", rank, ncclGetErrorString(e),
                 ncclGetErrorString(ge), ncclGetLastError(comm));
        wrong = 1;
        goto out;
    }
    TC_CUDA(cudaStreamSynchronize(st));
    TC_CUDA(cudaMemcpy(got, drecv, count * 4, cudaMemcpyDeviceToHost));
    wrong += p2p_check(got, left, 0, count, rank, "ring", why, len);

    /* The alltoall: block p of each rank's send to rank p, into block (sender). */
    TC_CUDA(cudaMemset(drecv, 0xff, bytes));
    TC_CUDA(cudaDeviceSynchronize());
    ncclGroupStart();
    for (int p = 0; p < n && e == ncclSuccess; p++) {
        e = ncclSend((char *)dsend + (size_t)p * count * 4, count, ncclUint32, p, comm, st);
        if (e == ncclSuccess)
            e = ncclRecv((char *)drecv + (size_t)p * count * 4, count, ncclUint32, p, comm, st);
    }
    ge = ncclGroupEnd();
    if (e != ncclSuccess || ge != ncclSuccess) {
        snprintf(why, len, "rank %d: alltoall of sends and receives: %s / %s: %s", rank,
                 ncclGetErrorString(e), ncclGetErrorString(ge), ncclGetLastError(comm));
        wrong = 1;
        goto out;
    }
    TC_CUDA(cudaStreamSynchronize(st));
    TC_CUDA(cudaMemcpy(got, drecv, bytes, cudaMemcpyDeviceToHost));
    for (int p = 0; p < n && wrong == 0; p++)
        wrong += p2p_check(got + (size_t)p * count, p, (size_t)rank * count, count, rank,
                           "alltoall of sends and receives", why, len);
    if (wrong == 0)
        wrong = gather_scatter(rank, n, count, comm, st, dsend, drecv, got, why, len);
    if (wrong == 0)
        wrong = p2p_graph(rank, n, comm, count, dsend, drecv, h, got, why, len);
    if (wrong || n < 2)
        goto out;

    /* Outside a group: rank 0 to rank 1. */
    TC_CUDA(cudaMemset(drecv, 0xff, bytes));
    TC_CUDA(cudaDeviceSynchronize());
    if (rank == 0)
        e = ncclSend(dsend, count, ncclUint32, 1, comm, st);
    else if (rank == 1)
        e = ncclRecv(drecv, count, ncclUint32, 0, comm, st);
    if (e != ncclSuccess) {
        snprintf(why, len, "rank %d: a send outside a group: %s: %s", rank, ncclGetErrorString(e),
                 ncclGetLastError(comm));
        wrong = 1;
        goto out;
    }
    TC_CUDA(cudaStreamSynchronize(st));
    if (rank == 1) {
        TC_CUDA(cudaMemcpy(got, drecv, count * 4, cudaMemcpyDeviceToHost));
        wrong += p2p_check(got, 0, 0, count, rank, "a send outside a group", why, len);
    }

    /* A send and a receive that disagree, on a communicator of their own. */
    ncclComm_t sub = NULL;
    e = ncclCommSplit(comm, 0, rank, &sub, NULL);
    if (e != ncclSuccess || sub == NULL) {
        snprintf(why, len, "rank %d: ncclCommSplit: %s", rank, ncclGetLastError(comm));
        wrong = 1;
        goto out;
    }
    if (rank < 2) {
        e = rank == 0 ? ncclSend(dsend, count, ncclUint32, 1, sub, st)
                      : ncclRecv(drecv, count + 1, ncclUint32, 0, sub, st);
        cudaError_t ce = cudaStreamSynchronize(st);
        (void)cudaGetLastError();
        /* A failure found on the GPU shows at the pair's next call at the latest. */
        ncclResult_t e2 = rank == 0 ? ncclSend(dsend, count, ncclUint32, 1, sub, st)
                                    : ncclRecv(drecv, count, ncclUint32, 0, sub, st);
        (void)cudaStreamSynchronize(st);
        (void)cudaGetLastError();
        ncclResult_t async = ncclSuccess;
        (void)ncclCommGetAsyncError(sub, &async);
        if (e == ncclSuccess && ce == cudaSuccess && e2 == ncclSuccess && async == ncclSuccess) {
            snprintf(why, len, "rank %d: a send of %zu and a receive of %zu elements succeeded",
                     rank, count, count + 1);
            wrong = 1;
        }
        ncclCommAbort(sub);
    } else {
        ncclCommDestroy(sub);
    }
out:
    TC_CUDA(cudaFree(dsend));
    TC_CUDA(cudaFree(drecv));
    free(h);
    free(got);
    return wrong;
}
