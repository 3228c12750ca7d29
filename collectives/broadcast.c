/* SPDX-License-Identifier: MIT */
/*
 * Broadcast on the host: root's sendbuf into every rank's recvbuf, exact (memcpy).
 *
 *   flag     the root copies its input into its staging slot, the ranks arrive and
 *            agree, every other rank copies the root's slot into its output
 *   one-pass every rank copies straight from the root's sendbuf (which must be
 *            reachable: a thread rank's, or in the comm_mem_alloc pools), then waits
 *            until every rank is done reading it
 *   staged   the root stages the message slot by slot, alternating its two slots;
 *            one synchronisation per slot, the others copying slot k while the root
 *            fills slot k + 1
 *   CMA      every other rank pulls the root's sendbuf into its recvbuf
 *            (process_vm_readv), then waits until every rank is done reading it
 */
#include "coll.h"
#include "reduce.h"

#include <string.h>

static void flag_stage(struct comm *c, const struct coll_call *call, void *slot)
{
    if (c->rank == call->root)
        memcpy(slot, call->send, call->count * rt_dtype_size(call->dtype));
}

static void flag_finish(struct comm *c, const struct coll_call *call, uint32_t slot)
{
    size_t bytes = call->count * rt_dtype_size(call->dtype);
    if (c->rank != call->root)
        memcpy(call->recv, coll_flag_data(c, call->root, slot), bytes);
    else if (call->recv != call->send)
        memcpy(call->recv, call->send, bytes);
}

/* A whole message into this rank's output, streaming once the root's input and every
 * output (n + 1 blocks) pass the threshold: glibc's memcpy picks its own point from
 * the cache CPUID reports (on a VM the host's), and kept 64 MiB calls on cached stores
 * at 0.53-0.80 of the ceiling against 1.04-1.26 streamed (2 thread ranks, Xeon VM). */
static void own_copy(struct comm *c, void *dst, const void *src, size_t bytes)
{
    void *to[1] = {dst};
    coll_copy_fanout(to, 1, src, bytes,
                     coll_host_streams_footprint(&c->knobs, (size_t)(c->nranks + 1) * bytes));
}

static comm_status_t direct(struct comm *c, const struct coll_call *call)
{
    size_t bytes = call->count * rt_dtype_size(call->dtype);
    const struct shm_arrival *a = shm_arrival_at(c->shm, c->seq, call->root);
    const void *src = c->rank == call->root
                          ? call->send
                          : coll_peer_ptr(c, call->root, a, a->send, bytes, "a send buffer");
    if (src == NULL)
        return COMM_ERR_PEER;
    if (call->recv != src)
        own_copy(c, call->recv, src, bytes);
    return coll_sync(c, "broadcast (one-pass path, completion)");
}

static comm_status_t staged(struct comm *c, const struct coll_call *call)
{
    size_t esize = rt_dtype_size(call->dtype);
    struct coll_pipe pp;
    coll_pipe_begin(&pp, c, call->root, call->count, esize, COLL_PIPE_CHUNK_BYTES);
    bool root = c->rank == call->root;
    for (size_t k = 0; k < pp.rounds; k++) {
        size_t lo = k * pp.chunk;
        size_t len = (call->count - lo < pp.chunk ? call->count - lo : pp.chunk) * esize;
        const char *from = (const char *)call->send + lo * esize;
        char *to = (char *)call->recv + lo * esize;
        comm_status_t st;
        if (root) {
            if (k >= pp.places) {
                st = coll_pipe_wait(&pp, false, k + 1 - pp.places, "broadcast (staged path)");
                if (st != COMM_OK)
                    return st;
            }
            memcpy(coll_pipe_place(&pp, c->rank, k), from, len);
            shm_progress_publish(c);
            /* The own copy while the peers take theirs. */
            if (to != from)
                memcpy(to, from, len);
        } else {
            st = coll_pipe_wait(&pp, true, k + 1, "broadcast (staged path)");
            if (st != COMM_OK)
                return st;
            memcpy(to, coll_pipe_place(&pp, call->root, k), len);
            shm_progress_publish(c);
        }
    }
    return root ? coll_pipe_wait(&pp, false, pp.rounds, "broadcast (staged path, completion)")
                : COMM_OK;
}

static comm_status_t cma(struct comm *c, const struct coll_call *call)
{
    size_t bytes = call->count * rt_dtype_size(call->dtype);
    comm_status_t st = COMM_OK;
    if (c->rank != call->root) {
        const struct shm_arrival *a = shm_arrival_at(c->shm, c->seq, call->root);
        st = shm_cma_read(c, call->root, call->recv, a->send, bytes, "broadcast's send buffer");
    } else if (call->recv != call->send) {
        own_copy(c, call->recv, call->send, bytes);
    }
    if (st != COMM_OK)
        return st;
    return coll_sync(c, "broadcast (CMA path, completion)");
}

static const struct coll_host_algo broadcast_algo = {
    .flag_what = "broadcast (flag path)",
    .bulk_what = "broadcast (bulk path handshake)",
    .flag_stage = flag_stage,
    .flag_finish = flag_finish,
    .expose_send = true, /* the root's; the others publish none */
    .direct = direct,
    .staged = staged,
    .cma = cma,
};

comm_status_t coll_host_broadcast(struct comm *c, const struct coll_call *call)
{
    if (coll_bcast_eager_takes(c, call))
        return coll_bcast_eager(c, call);
    return coll_host_run(c, call, &broadcast_algo);
}
