/* SPDX-License-Identifier: MIT */
/*
 * The inter-host steps of the hierarchical collectives: a rank's status first, then
 * its data in segments (HIER_SEGS_IN_FLIGHT nonblocking calls at a time), all waited
 * for against the call's deadline.  A rank whose intra-host step failed still makes
 * the step (its data is then meaningless) so that its failure reaches every rank of
 * the step instead of leaving them blocked in MPI.
 */
#include "hier_inter.h"

#include <stdio.h>

comm_status_t hier_intra_failed(struct comm *c, comm_status_t st, const char *what)
{
    if (st == COMM_OK)
        return st;
    rt_error(c, st, "rank %d: %s on this host failed: %s", c->rank, what,
             hier_of(c)->iops->last_error(hier_of(c)->intra));
    return st;
}

comm_status_t hier_inter_segments(struct comm *c, const struct hier_inter *s, comm_status_t mine,
                                  uint64_t deadline)
{
    size_t seg = HIER_SEG_BYTES / s->esize;
    if (seg == 0)
        seg = 1;
    MPI_Datatype type = s->kind == HIER_INTER_ALLREDUCE ? mpi_link_dtype(s->dtype) : MPI_BYTE;
    MPI_Op op = mpi_link_op(&hier_of(c)->link, s->op, s->dtype);
    struct mpi_status_word *w = mpi_ctl_new(2 * sizeof(*w));
    if (w == NULL) {
        rt_error(c, COMM_ERR_NOMEM, "rank %d: out of memory for %s", c->rank, s->what);
        return COMM_ERR_NOMEM;
    }
    MPI_Request reqs[1 + HIER_SEGS_IN_FLIGHT];
    int err = mpi_link_status_start(s->mc, c->rank, mine, &w[0], &w[1], &reqs[0]);
    if (err != MPI_SUCCESS) {
        mpi_ctl_done(w, true);
        return mpi_link_error(c, err, "MPI_Iallreduce (status)");
    }
    int nr = 1;
    size_t off = 0;
    for (;;) {
        while (nr < 1 + HIER_SEGS_IN_FLIGHT && off < s->n) {
            size_t k = s->n - off < seg ? s->n - off : seg;
            char *p = (char *)s->buf + off * s->esize;
            if (s->kind == HIER_INTER_ALLREDUCE)
                err = MPI_Iallreduce(MPI_IN_PLACE, p, (int)k, type, op, s->mc, &reqs[nr]);
            else
                err = MPI_Ibcast(p, (int)(k * s->esize), MPI_BYTE, s->root, s->mc, &reqs[nr]);
            if (err != MPI_SUCCESS) {
                mpi_ctl_done(w, false); /* the status request may be under way */
                return mpi_link_error(
                    c, err, s->kind == HIER_INTER_ALLREDUCE ? "MPI_Iallreduce" : "MPI_Ibcast");
            }
            nr++;
            off += k;
        }
        comm_status_t st = mpi_link_wait(c, &hier_of(c)->link, reqs, nr, deadline, true, s->what);
        if (st != COMM_OK) {
            mpi_ctl_done(w, false);
            return st;
        }
        nr = 0;
        if (off >= s->n)
            break;
    }
    comm_status_t st = mpi_link_status_check(c, mine, &w[1], s->what);
    mpi_ctl_done(w, true);
    return st;
}

comm_status_t hier_inter_one(struct comm *c, MPI_Comm mc, MPI_Request *data, int err,
                             const char *call, comm_status_t mine, uint64_t deadline,
                             const char *what)
{
    if (err != MPI_SUCCESS)
        return mpi_link_error(c, err, call);
    struct mpi_status_word *w = mpi_ctl_new(2 * sizeof(*w));
    if (w == NULL) {
        rt_error(c, COMM_ERR_NOMEM, "rank %d: out of memory for %s", c->rank, what);
        return COMM_ERR_NOMEM; /* the data request is left to MPI, as on any failure */
    }
    MPI_Request reqs[2] = {*data, MPI_REQUEST_NULL};
    err = mpi_link_status_start(mc, c->rank, mine, &w[0], &w[1], &reqs[1]);
    if (err != MPI_SUCCESS) {
        mpi_ctl_done(w, true);
        return mpi_link_error(c, err, "MPI_Iallreduce (status)");
    }
    comm_status_t st = mpi_link_wait(c, &hier_of(c)->link, reqs, 2, deadline, true, what);
    bool completed = st == COMM_OK;
    if (completed)
        st = mpi_link_status_check(c, mine, &w[1], what);
    mpi_ctl_done(w, completed);
    return st;
}
