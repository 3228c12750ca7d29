/* SPDX-License-Identifier: MIT */
/*
 * The hierarchical collectives that move data: broadcast (within the root's host, among
 * the leaders, within every other host), allgather (among the ranks of one local index
 * then within the host where hosts are equal; else within the host, among the leaders,
 * within the host), alltoall (flat: one MPI_Ialltoall over every rank), barrier (the
 * descriptor exchange is one over every rank).
 */
#include "hier_inter.h"

#include <limits.h>
#include <string.h>

comm_status_t hier_barrier(struct comm *c)
{
    struct coll_call call = {.kind = COLL_BARRIER, .dtype = COMM_U8, .op = COMM_SUM};
    return hier_begin(c, &call, rt_comm_deadline(c));
}

comm_status_t hier_broadcast(struct comm *c, const struct coll_call *call)
{
    struct hier_comm *h = hier_of(c);
    uint64_t deadline = rt_comm_deadline(c);
    comm_status_t st = hier_begin(c, call, deadline);
    if (st != COMM_OK || call->count == 0)
        return st;
    int root_host = h->host_of[call->root];
    bool on_root_host = h->host == root_host, leader = h->local == 0;
    if (on_root_host) {
        const void *send = c->rank == call->root ? call->send : NULL;
        st = h->iops->broadcast(h->intra, send, call->recv, call->count, call->dtype,
                                h->local_of[call->root], NULL);
        st = hier_intra_failed(c, st, "the broadcast within the root's host");
    }
    if (leader && h->nhosts > 1) {
        struct hier_inter s = {
            .kind = HIER_INTER_BCAST,
            .mc = h->link.slice,
            .buf = call->recv,
            .n = call->count,
            .esize = rt_dtype_size(call->dtype),
            .root = root_host,
            .what = "the broadcast among the hosts' leaders",
        };
        st = hier_inter_segments(c, &s, st, deadline);
    }
    if (st != COMM_OK || h->nhosts == 1)
        return st;
    if (on_root_host) {
        /* Has every host got it?  The leader breaks this host's communicator if not. */
        st = h->iops->barrier(h->intra);
        return hier_intra_failed(c, st, "the barrier after the broadcast");
    }
    st = h->iops->broadcast(h->intra, leader ? call->recv : NULL, call->recv, call->count,
                            call->dtype, 0, NULL);
    return hier_intra_failed(c, st, "the broadcast from the leader");
}

/* Equal hosts: among the ranks of this local index, then within the host. */
static comm_status_t allgather_slices(struct comm *c, const struct coll_call *call, void **out,
                                      uint64_t deadline)
{
    struct hier_comm *h = hier_of(c);
    size_t b = call->count * rt_dtype_size(call->dtype), H = (size_t)h->nhosts;
    void *tmp = hier_scratch(c, 1, H * b), *all = hier_scratch(c, 0, H * (size_t)h->nlocal * b);
    if (tmp == NULL || all == NULL)
        return COMM_ERR_NOMEM;
    MPI_Request req;
    int err =
        MPI_Iallgather(call->send, (int)b, MPI_BYTE, tmp, (int)b, MPI_BYTE, h->link.slice, &req);
    comm_status_t st = hier_inter_one(c, h->link.slice, &req, err, "MPI_Iallgather", COMM_OK,
                                      deadline, "the allgather among the hosts");
    if (st != COMM_OK)
        return st;
    st = h->iops->allgather(h->intra, tmp, all, H * call->count, call->dtype, NULL);
    if (st != COMM_OK)
        return hier_intra_failed(c, st, "the allgather within the host");
    /* all holds local index j's blocks of the hosts in slice order: j * H + slice rank. */
    for (int w = 0; w < c->nranks; w++)
        memcpy((char *)call->recv + (size_t)w * b,
               (char *)all + ((size_t)h->local_of[w] * H + (size_t)h->slice_rank_of[w]) * b, b);
    *out = all;
    return COMM_OK;
}

/* Any hosts: within the host, among the leaders, then within the host again. */
static comm_status_t allgather_leaders(struct comm *c, const struct coll_call *call,
                                       uint64_t deadline)
{
    struct hier_comm *h = hier_of(c);
    size_t b = call->count * rt_dtype_size(call->dtype);
    void *mine = hier_scratch(c, 1, (size_t)h->nlocal * b);
    void *all = hier_scratch(c, 0, (size_t)c->nranks * b);
    if (mine == NULL || all == NULL)
        return COMM_ERR_NOMEM;
    comm_status_t st =
        h->iops->allgather(h->intra, call->send, mine, call->count, call->dtype, NULL);
    st = hier_intra_failed(c, st, "the allgather within the host");
    if (h->local == 0 && h->nhosts > 1) {
        int counts[RT_MAX_RANKS], displs[RT_MAX_RANKS];
        for (int k = 0; k < h->nhosts; k++) {
            counts[k] = (int)((size_t)h->host_size[k] * b);
            displs[k] = (int)((size_t)h->host_off[k] * b);
        }
        MPI_Request req;
        int err = MPI_Iallgatherv(mine, (int)((size_t)h->nlocal * b), MPI_BYTE, all, counts, displs,
                                  MPI_BYTE, h->link.slice, &req);
        st = hier_inter_one(c, h->link.slice, &req, err, "MPI_Iallgatherv", st, deadline,
                            "the allgather among the hosts' leaders");
    } else if (h->local == 0) {
        memcpy(all, mine, (size_t)h->nlocal * b);
    }
    if (st != COMM_OK)
        return st;
    st = h->iops->broadcast(h->intra, h->local == 0 ? all : NULL, all,
                            (size_t)c->nranks * call->count, call->dtype, 0, NULL);
    if (st != COMM_OK)
        return hier_intra_failed(c, st, "the broadcast from the leader");
    /* all is in host order: host_off of the rank's host, then its local index. */
    for (int w = 0; w < c->nranks; w++)
        memcpy((char *)call->recv + (size_t)w * b,
               (char *)all + ((size_t)h->host_off[h->host_of[w]] + (size_t)h->local_of[w]) * b, b);
    return COMM_OK;
}

comm_status_t hier_allgather(struct comm *c, const struct coll_call *call)
{
    struct hier_comm *h = hier_of(c);
    uint64_t deadline = rt_comm_deadline(c);
    comm_status_t st = hier_begin(c, call, deadline);
    if (st != COMM_OK || call->count == 0)
        return st;
    if (h->equal && h->nhosts > 1) {
        void *all;
        return allgather_slices(c, call, &all, deadline);
    }
    return allgather_leaders(c, call, deadline);
}

comm_status_t hier_alltoall(struct comm *c, const struct coll_call *call)
{
    struct hier_comm *h = hier_of(c);
    uint64_t deadline = rt_comm_deadline(c);
    comm_status_t st = hier_begin(c, call, deadline);
    if (st != COMM_OK || call->count == 0)
        return st;
    int b = (int)(call->count * rt_dtype_size(call->dtype));
    MPI_Request req;
    int err = MPI_Ialltoall(call->send, b, MPI_BYTE, call->recv, b, MPI_BYTE, h->link.world, &req);
    return hier_inter_one(c, h->link.world, &req, err, "MPI_Ialltoall", COMM_OK, deadline,
                          "the alltoall over every rank");
}
