/* SPDX-License-Identifier: MIT */
/*
 * The hierarchical reductions.  Small messages (or hosts of unequal rank counts):
 * reduce to each host's leader, allreduce among the leaders, broadcast within the
 * host.  Large messages on equal hosts: reduce-scatter within the host, allreduce of
 * each slice among the ranks of the same local index (every local rank drives the
 * network at once), allgather within the host.  The order of every sum is fixed by the
 * host layout: the host's ranks in rank order, then the hosts as MPI combines them,
 * the same on every rank.  f16 and bf16 reduce in f32 and round once at the end.
 * comm_allreduce_add is this allreduce with the rank's addend added to the sum in the
 * work dtype before the one rounding.  comm_reduce and comm_reduce_scatter are this
 * allreduce with a part of the result kept
 * (simple, and the same bits as allreduce; their traffic is allreduce's).
 */
#include "coll.h"
#include "hier_inter.h"

#include <string.h>

/* Leader scheme: the result in work (n elements of wd) on every rank. */
static comm_status_t reduce_leaders(struct comm *c, void *work, size_t n, comm_dtype_t wd,
                                    comm_op_t op, const struct wire_row *wire, uint64_t deadline)
{
    struct hier_comm *h = hier_of(c);
    bool leader = h->local == 0;
    comm_status_t st = h->iops->reduce(h->intra, work, leader ? work : NULL, n, wd, op, 0, NULL);
    st = hier_intra_failed(c, st, "the reduce to the leader");
    if (leader && h->nhosts > 1) {
        struct hier_inter s = {
            .kind = HIER_INTER_ALLREDUCE,
            .mc = h->link.slice,
            .buf = work,
            .n = n,
            .esize = rt_dtype_size(wd),
            .dtype = wd,
            .op = op,
            .what = "the allreduce among the hosts' leaders",
            .wire = wire,
        };
        st = hier_inter_segments(c, &s, st, deadline);
    }
    if (st != COMM_OK)
        return st;
    st = h->iops->broadcast(h->intra, leader ? work : NULL, work, n, wd, 0, NULL);
    return hier_intra_failed(c, st, "the broadcast from the leader");
}

/* The elements of a slice: ceil(n / nlocal), with a codec a whole number of its blocks,
 * so that the slices cut the vector where the leaders scheme's blocks do. */
static size_t slice_elems(size_t n, size_t L, const struct wire_row *wire)
{
    size_t per = (n + L - 1) / L;
    if (wire != NULL && per % WIRE_BLOCK_ELEMS != 0)
        per += WIRE_BLOCK_ELEMS - per % WIRE_BLOCK_ELEMS;
    return per;
}

/* Slice scheme (equal hosts): the result in work (nlocal * slice_elems elements). */
static comm_status_t reduce_slices(struct comm *c, void *work, size_t n, comm_dtype_t wd,
                                   comm_op_t op, const struct wire_row *wire, uint64_t deadline)
{
    struct hier_comm *h = hier_of(c);
    size_t es = rt_dtype_size(wd), L = (size_t)h->nlocal, per = slice_elems(n, L, wire);
    /* Padding reduces to values nobody reads. */
    memset((char *)work + n * es, 0, (L * per - n) * es);
    void *slice = hier_scratch(c, 1, per * es);
    if (slice == NULL)
        return COMM_ERR_NOMEM;
    comm_status_t st = h->iops->reduce_scatter(h->intra, work, slice, per, wd, op, NULL);
    st = hier_intra_failed(c, st, "the reduce-scatter");
    struct hier_inter s = {
        .kind = HIER_INTER_ALLREDUCE,
        .mc = h->link.slice,
        .buf = slice,
        .n = per,
        .esize = es,
        .dtype = wd,
        .op = op,
        .what = "the allreduce of this rank's slice among the hosts",
        .wire = wire,
    };
    st = hier_inter_segments(c, &s, st, deadline);
    if (st != COMM_OK)
        return st;
    st = h->iops->allgather(h->intra, slice, work, per, wd, NULL);
    return hier_intra_failed(c, st, "the allgather of the slices");
}

/*
 * The reduction over every rank of n elements of dtype at send, in the work dtype, in
 * *out (scratch 0) on every rank.
 */
static comm_status_t reduce_all(struct comm *c, const void *send, size_t n, comm_dtype_t dtype,
                                comm_op_t op, uint64_t deadline, void **out)
{
    struct hier_comm *h = hier_of(c);
    comm_dtype_t wd = hier_work_dtype(dtype);
    comm_op_t wop = op == COMM_AVG ? COMM_SUM : op;
    size_t es = rt_dtype_size(wd), L = (size_t)h->nlocal;
    bool large = h->equal && h->nlocal > 1 && h->nhosts > 1 && n * es >= HIER_LARGE_BYTES;
    const struct wire_row *wire = h->nhosts > 1 ? hier_inter_wire(c, dtype, op, n) : NULL;
    size_t elems = large ? L * slice_elems(n, L, wire) : n;
    void *work = hier_scratch(c, 0, elems * es);
    if (work == NULL)
        return COMM_ERR_NOMEM;
    hier_widen(send, dtype, work, n);
    comm_status_t st = large ? reduce_slices(c, work, n, wd, wop, wire, deadline)
                             : reduce_leaders(c, work, n, wd, wop, wire, deadline);
    if (st == COMM_OK)
        *out = work;
    return st;
}

static int divisor(const struct comm *c, comm_op_t op)
{
    return op == COMM_AVG ? c->nranks : 1;
}

comm_status_t hier_allreduce(struct comm *c, const struct coll_call *call)
{
    uint64_t deadline = rt_comm_deadline(c);
    comm_status_t st = hier_begin(c, call, deadline);
    if (st != COMM_OK || call->count == 0)
        return st;
    void *work;
    st = reduce_all(c, call->send, call->count, call->dtype, call->op, deadline, &work);
    if (st != COMM_OK)
        return st;
    if (call->addend != NULL)
        hier_add(work, call->dtype, call->addend, call->addend_count, call->count);
    hier_narrow(work, call->dtype, call->recv, call->count, divisor(c, call->op));
    return COMM_OK;
}

comm_status_t hier_reduce(struct comm *c, const struct coll_call *call)
{
    uint64_t deadline = rt_comm_deadline(c);
    comm_status_t st = hier_begin(c, call, deadline);
    if (st != COMM_OK || call->count == 0)
        return st;
    void *work;
    st = reduce_all(c, call->send, call->count, call->dtype, call->op, deadline, &work);
    if (st == COMM_OK && c->rank == call->root)
        hier_narrow(work, call->dtype, call->recv, call->count, divisor(c, call->op));
    return st;
}

comm_status_t hier_reduce_scatter(struct comm *c, const struct coll_call *call)
{
    uint64_t deadline = rt_comm_deadline(c);
    comm_status_t st = hier_begin(c, call, deadline);
    if (st != COMM_OK || call->count == 0)
        return st;
    size_t total = (size_t)c->nranks * call->count;
    void *work;
    st = reduce_all(c, call->send, total, call->dtype, call->op, deadline, &work);
    if (st != COMM_OK)
        return st;
    size_t wes = rt_dtype_size(hier_work_dtype(call->dtype));
    const char *mine = (const char *)work + (size_t)c->rank * call->count * wes;
    hier_narrow(mine, call->dtype, call->recv, call->count, divisor(c, call->op));
    return COMM_OK;
}
