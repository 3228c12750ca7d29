/* SPDX-License-Identifier: MIT */
/*
 * What every host collective's paths share: how a rank publishes its buffers for the
 * one-pass path and how it takes a peer's, and the one driver that picks the path of a
 * call (flag for small messages, then one-pass where every rank reaches every buffer
 * the peers touch, staged otherwise) exactly as allreduce does.
 */
#include "coll.h"

/* Does [p, p + len) lie in the comm_mem_alloc pools, where peers accept offsets? */
static bool in_pool(const struct shm_comm *s, const void *p, size_t len)
{
    return shm_contains(s, p, len) &&
           shm_pool_range(s, (uint64_t)((const uint8_t *)p - s->base), len);
}

uint32_t coll_reach(const struct comm *c, int n, const void *const *bufs, const size_t *lens,
                    uint64_t *out)
{
    const struct shm_comm *s = c->shm;
    if (s->same_process) {
        for (int i = 0; i < n; i++)
            out[i] = (uintptr_t)bufs[i];
        return SHM_BUF_SAME_PROC;
    }
    for (int i = 0; i < n; i++) {
        /* A buffer the peers do not touch publishes the pools' first offset, which
         * every peer's check accepts with length 0. */
        if (lens[i] == 0) {
            out[i] = (uint64_t)(s->pool - s->base);
            continue;
        }
        if (!in_pool(s, bufs[i], lens[i]))
            return 0;
        out[i] = (uint64_t)((const uint8_t *)bufs[i] - s->base);
    }
    return SHM_BUF_IN_SEG;
}

void *coll_peer_ptr(struct comm *c, int p, const struct shm_arrival *a, uint64_t v, uint64_t len,
                    const char *what)
{
    struct shm_comm *s = c->shm;
    if (c->shm->same_process && (a->flags & SHM_BUF_SAME_PROC) && !(a->flags & SHM_BUF_IN_SEG))
        return (void *)(uintptr_t)v;
    if (!c->shm->same_process && (a->flags & SHM_BUF_IN_SEG) && !(a->flags & SHM_BUF_SAME_PROC)) {
        if (shm_pool_range(s, v, len))
            return s->base + v;
        rt_error(c, COMM_ERR_PEER,
                 "rank %d: peer rank %d published %s at offset %llu (%llu bytes) outside the "
                 "segment's buffer pools (bytes %llu to %llu) in call %u: the segment is "
                 "corrupted (a stray write by another process of this user?); restart the job",
                 c->rank, p, what, (unsigned long long)v, (unsigned long long)len,
                 (unsigned long long)(s->pool - s->base), (unsigned long long)s->size, c->seq);
        return NULL;
    }
    rt_error(c, COMM_ERR_PEER,
             "rank %d: peer rank %d published buffer flags 0x%x in call %u, which no rank of "
             "this communicator publishes (%s): the segment is corrupted (a stray write by "
             "another process of this user?); restart the job",
             c->rank, p, a->flags, c->seq,
             c->shm->same_process ? "every rank is a thread of this process"
                                  : "not every rank is a thread of this process");
    return NULL;
}

comm_status_t coll_sync(struct comm *c, const char *what)
{
    shm_progress_publish(c);
    return shm_progress_wait_all(c, what);
}

static comm_status_t run_flag(struct comm *c, const struct coll_call *call,
                              const struct coll_host_algo *algo)
{
    uint32_t slot = call->count ? coll_next_stage_slot(c) : 0;
    if (call->count)
        algo->flag_stage(c, call, shm_slot(c->shm, c->rank, slot));
    struct shm_arrival mine = coll_arrival_of(call, SHM_PATH_FLAG);
    coll_arrive(c, &mine);
    comm_status_t st = coll_wait_arrivals(c, algo->flag_what);
    if (st != COMM_OK || call->count == 0)
        return st;
    algo->flag_finish(c, call, slot);
    return COMM_OK;
}

static comm_status_t run_bulk(struct comm *c, const struct coll_call *call,
                              const struct coll_host_algo *algo)
{
    size_t esize = rt_dtype_size(call->dtype), send_elems, recv_elems;
    coll_call_shape(call, c->rank, c->nranks, &send_elems, &recv_elems);
    const void *bufs[2] = {call->send, call->recv};
    size_t lens[2] = {algo->expose_send ? send_elems * esize : 0,
                      algo->expose_recv ? recv_elems * esize : 0};
    uint64_t out[2];
    struct shm_arrival mine = coll_arrival_of(call, SHM_PATH_BULK);
    mine.flags = coll_reach(c, 2, bufs, lens, out);
    mine.send = out[0];
    mine.recv = out[1];
    coll_arrive(c, &mine);
    comm_status_t st = coll_wait_arrivals(c, algo->bulk_what);
    if (st != COMM_OK || call->count == 0)
        return st;
    /* Only the kinds this rank itself published can be common to all (see allreduce.c). */
    uint32_t all = mine.flags & (SHM_BUF_SAME_PROC | SHM_BUF_IN_SEG);
    for (int p = 0; p < c->nranks; p++)
        all &= shm_arrival_at(c->shm, c->seq, p)->flags;
    return all != 0 ? algo->direct(c, call) : algo->staged(c, call);
}

comm_status_t coll_host_run(struct comm *c, const struct coll_call *call,
                            const struct coll_host_algo *algo)
{
    size_t bytes = call->count * rt_dtype_size(call->dtype);
    comm_status_t st = coll_host_kind_flag(call->kind, &c->knobs, bytes, c->nranks)
                           ? run_flag(c, call, algo)
                           : run_bulk(c, call, algo);
    /* A rank that completed this call never fails a peer's. */
    if (st == COMM_OK)
        shm_complete(c);
    return st;
}
