/* SPDX-License-Identifier: MIT */
/*
 * Allgather on the host: rank r's sendbuf lands at recvbuf + r * sendcount on every
 * rank, exact (memcpy).
 *
 *   flag     every rank stages its block, the ranks arrive and agree, every rank
 *            copies every slot into its output
 *   one-pass every rank copies its block straight into every rank's recvbuf (which
 *            must be reachable), then waits until every rank is done
 *   staged   a pipeline of chunks through a ring of places in every rank's two
 *            slots: every rank stages its chunk k, then copies the peers' chunk k
 *            into its output while they may already stage chunk k + 1
 *   CMA      every rank pulls every peer's sendbuf into its recvbuf (process_vm_readv:
 *            one copy per byte), then waits until every rank is done
 */
#include "coll.h"
#include "reduce.h"

#include <string.h>

static void flag_stage(struct comm *c, const struct coll_call *call, void *slot)
{
    (void)c;
    memcpy(slot, call->send, call->count * rt_dtype_size(call->dtype));
}

static void flag_finish(struct comm *c, const struct coll_call *call, uint32_t slot)
{
    size_t bytes = call->count * rt_dtype_size(call->dtype);
    for (int p = 0; p < c->nranks; p++) {
        char *to = (char *)call->recv + (size_t)p * bytes;
        const void *from = p == c->rank ? call->send : coll_flag_data(c, p, slot);
        if (to != from)
            memcpy(to, from, bytes);
    }
}

static comm_status_t direct(struct comm *c, const struct coll_call *call)
{
    int n = c->nranks;
    size_t bytes = call->count * rt_dtype_size(call->dtype);
    uint64_t all = (uint64_t)bytes * (uint64_t)n;
    /* Every peer's output is checked before any is written. */
    char *out[RT_MAX_RANKS];
    for (int p = 0; p < n; p++) {
        const struct shm_arrival *a = shm_arrival_at(c->shm, c->seq, p);
        out[p] =
            p == c->rank ? call->recv : coll_peer_ptr(c, p, a, a->recv, all, "a receive buffer");
        if (out[p] == NULL)
            return COMM_ERR_PEER;
    }
    /* Starting at the next rank spreads the writers over the outputs.  Chunk by chunk
     * to every output, so that the input is read from memory once; streaming once all
     * inputs and outputs (n + 1 blocks of every rank) pass the threshold. */
    void *to[RT_MAX_RANKS];
    for (int i = 0; i < n; i++) {
        int p = (c->rank + 1 + i) % n;
        to[i] = out[p] + (size_t)c->rank * bytes;
    }
    coll_copy_fanout(to, n, call->send, bytes,
                     coll_host_streams_footprint(&c->knobs, (size_t)(n + 1) * n * bytes));
    return coll_sync(c, "allgather (one-pass path, completion)");
}

/*
 * The staged pipeline with every rank producing and consuming (coll_pipe, no root): in
 * round k a rank fills place k of its ring with its chunk k (once every rank drained
 * round k - places from it), publishes a step, copies its own chunk into its output,
 * waits until every rank produced round k and copies their chunks, and publishes a step
 * again: 2 steps a round on every rank, so that step 2k + 1 says "produced round k" and
 * 2k + 2 "consumed round k".  A rank fills round k + 1 while its peers still copy round
 * k; it returns once every rank consumed the last round (the next call may write any
 * place).
 */
static comm_status_t staged(struct comm *c, const struct coll_call *call)
{
    size_t esize = rt_dtype_size(call->dtype);
    size_t bytes = call->count * esize;
    struct coll_pipe pp;
    coll_pipe_begin(&pp, c, -1, call->count, esize, COLL_PIPE_CHUNK_BYTES_ALLGATHER);
    for (size_t k = 0; k < pp.rounds; k++) {
        size_t lo = k * pp.chunk;
        size_t len = (call->count - lo < pp.chunk ? call->count - lo : pp.chunk) * esize;
        const char *from = (const char *)call->send + lo * esize;
        char *own = (char *)call->recv + (size_t)c->rank * bytes + lo * esize;
        comm_status_t st;
        if (k >= pp.places) {
            st = coll_pipe_wait(&pp, false, 2 * (k - pp.places) + 2, "allgather (staged path)");
            if (st != COMM_OK)
                return st;
        }
        memcpy(coll_pipe_place(&pp, c->rank, k), from, len);
        shm_progress_publish(c);
        if (own != from)
            memcpy(own, from, len);
        st = coll_pipe_wait(&pp, false, 2 * k + 1, "allgather (staged path)");
        if (st != COMM_OK)
            return st;
        for (int i = 1; i < c->nranks; i++) {
            int p = (c->rank + i) % c->nranks;
            memcpy((char *)call->recv + (size_t)p * bytes + lo * esize, coll_pipe_place(&pp, p, k),
                   len);
        }
        shm_progress_publish(c);
    }
    return coll_pipe_wait(&pp, false, 2 * pp.rounds, "allgather (staged path, completion)");
}

static comm_status_t cma(struct comm *c, const struct coll_call *call)
{
    size_t bytes = call->count * rt_dtype_size(call->dtype);
    char *own = (char *)call->recv + (size_t)c->rank * bytes;
    if (own != call->send)
        memcpy(own, call->send, bytes);
    /* Starting at the next rank spreads the readers over the inputs. */
    for (int i = 1; i < c->nranks; i++) {
        int p = (c->rank + i) % c->nranks;
        const struct shm_arrival *a = shm_arrival_at(c->shm, c->seq, p);
        comm_status_t st = shm_cma_read(c, p, (char *)call->recv + (size_t)p * bytes, a->send,
                                        bytes, "allgather's send buffer");
        if (st != COMM_OK)
            return st;
    }
    return coll_sync(c, "allgather (CMA path, completion)");
}

static const struct coll_host_algo allgather_algo = {
    .flag_what = "allgather (flag path)",
    .bulk_what = "allgather (bulk path handshake)",
    .flag_stage = flag_stage,
    .flag_finish = flag_finish,
    .expose_recv = true,
    .direct = direct,
    .staged = staged,
    .cma = cma,
};

comm_status_t coll_host_allgather(struct comm *c, const struct coll_call *call)
{
    return coll_host_run(c, call, &allgather_algo);
}
