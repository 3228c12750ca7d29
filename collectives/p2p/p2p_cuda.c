/* SPDX-License-Identifier: MIT */
/*
 * Sends and receives of device buffers on the CUDA backends, staged through host
 * memory: each call's device buffer is copied to a host copy of its own after the work
 * already on its stream (sends), the host channels move the host copies (p2p_host.c:
 * matching, mismatches, bounded waits and failures as on a host communicator), and each
 * receive's host copy goes to its device buffer on its stream, which the call waits
 * for.  So the calls block their thread as host calls do, and every later call on the
 * stream sees the data.  Both CUDA backends serve them this way: cuda-p2p's direct
 * IPC route for point-to-point is not built yet.
 */
#include "p2p.h"

#include "cuda/coll_cuda.h"

#include <cuda_runtime.h>
#include <stdlib.h>

static size_t bytes_of(const struct coll_p2p *op)
{
    return op->count * rt_dtype_size(op->dtype);
}

static comm_status_t cuda_failed(struct comm *c, const struct coll_p2p *op, const char *what,
                                 cudaError_t e)
{
    rt_error(c, COMM_ERR_SYSTEM, "rank %d: %s rank %d (%zu x %s): %s failed: %s", c->rank,
             op->send ? "comm_send to" : "comm_recv from", op->peer, op->count,
             rt_dtype_name(op->dtype), what, cudaGetErrorString(e));
    return COMM_ERR_SYSTEM;
}

/* Gives each unstarted call its host copy (a send's filled after its stream's work);
 * op->bounce keeps the device buffer meanwhile. */
static comm_status_t stage_in(struct comm *c, struct coll_p2p *ops, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct coll_p2p *op = &ops[i];
        if (op->state == COLL_P2P_DONE || op->bounce != NULL || bytes_of(op) == 0)
            continue;
        void *host = malloc(bytes_of(op));
        if (host == NULL) {
            rt_error(c, COMM_ERR_NOMEM, "rank %d: no memory for a %zu-byte host copy of a %s",
                     c->rank, bytes_of(op), op->send ? "send" : "receive");
            return COMM_ERR_NOMEM;
        }
        op->bounce = op->buf;
        op->buf = host;
        if (!op->send)
            continue;
        cudaStream_t s = op->stream;
        cudaError_t e = cudaStreamSynchronize(s);
        if (e == cudaSuccess)
            e = cudaMemcpy(host, op->bounce, bytes_of(op), cudaMemcpyDefault);
        if (e != cudaSuccess)
            return cuda_failed(c, op, "copying the send buffer to the host", e);
    }
    return COMM_OK;
}

/* Each received host copy to its device buffer, ordered on its stream. */
static comm_status_t stage_out(struct comm *c, struct coll_p2p *ops, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct coll_p2p *op = &ops[i];
        if (op->send || op->bounce == NULL || op->state != COLL_P2P_DONE || op->status != COMM_OK)
            continue;
        cudaStream_t s = op->stream;
        cudaError_t e = cudaMemcpyAsync(op->bounce, op->buf, bytes_of(op), cudaMemcpyDefault, s);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(s);
        if (e != cudaSuccess)
            return cuda_failed(c, op, "copying the received data to the device", e);
    }
    return COMM_OK;
}

comm_status_t coll_cuda_p2p(struct comm *c, struct coll_p2p *ops, size_t n)
{
    comm_status_t st = cuda_check_device(c);
    if (st == COMM_OK)
        st = stage_in(c, ops, n);
    if (st == COMM_OK)
        st = coll_host_p2p(c, ops, n);
    if (st == COMM_OK || st == COMM_ERR_MISMATCH) {
        comm_status_t out = stage_out(c, ops, n);
        st = out != COMM_OK ? out : st;
    }
    return st;
}

int coll_cuda_p2p_poll(struct comm *c, struct coll_p2p *ops, size_t n)
{
    comm_status_t st = stage_in(c, ops, n);
    if (st != COMM_OK)
        return st;
    int r = coll_host_p2p_poll(c, ops, n);
    if (r == 0 || (r < 0 && r != COMM_ERR_MISMATCH))
        return r;
    st = stage_out(c, ops, n);
    return st != COMM_OK ? st : r;
}

comm_status_t coll_cuda_p2p_self(struct comm *c, const struct coll_p2p *send, struct coll_p2p *recv)
{
    cudaStream_t from = send->stream, to = recv->stream;
    cudaError_t e = cudaStreamSynchronize(from);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(recv->buf, send->buf, bytes_of(send), cudaMemcpyDefault, to);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(to);
    return e == cudaSuccess ? COMM_OK : cuda_failed(c, send, "a copy to itself", e);
}

void coll_cuda_p2p_end(struct comm *c, struct coll_p2p *ops, size_t n)
{
    (void)c;
    for (size_t i = 0; i < n; i++) {
        if (ops[i].bounce == NULL)
            continue;
        free(ops[i].buf);
        ops[i].buf = ops[i].bounce;
        ops[i].bounce = NULL;
    }
}
