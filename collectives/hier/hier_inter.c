/* SPDX-License-Identifier: MIT */
/*
 * The inter-host steps of the hierarchical collectives: a rank's status first, then
 * its data in segments (HIER_SEGS_IN_FLIGHT nonblocking calls at a time), all waited
 * for against the call's deadline.  The hosts' partial results meet in arcomm's own
 * binomial tree (point to point, combined here), so the bits of a reduction across
 * hosts never depend on the MPI library's choice of algorithm.  A rank whose intra-host step failed
 * still makes the step (its data is then meaningless) so that its failure reaches every rank of the
 * step instead of leaving them blocked in MPI.
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

/* MPI's tag of the tree's messages on an inter-host communicator (nothing else sends
 * point to point there). */
#define HIER_TREE_TAG 0x5472

/* Segments [off, off + n) of buf, HIER_SEGS_IN_FLIGHT at a time: from mc's root to
 * every rank (MPI_Ibcast: a byte copy, so the order of its tree changes no bit). */
static comm_status_t bcast_segments(struct comm *c, const struct hier_inter *s, int root,
                                    uint64_t deadline)
{
    size_t seg = HIER_SEG_BYTES / s->esize ? HIER_SEG_BYTES / s->esize : 1;
    MPI_Request reqs[HIER_SEGS_IN_FLIGHT];
    size_t off = 0;
    while (off < s->n) {
        int nr = 0;
        while (nr < HIER_SEGS_IN_FLIGHT && off < s->n) {
            size_t k = s->n - off < seg ? s->n - off : seg;
            int err = MPI_Ibcast((char *)s->buf + off * s->esize, (int)(k * s->esize), MPI_BYTE,
                                 root, s->mc, &reqs[nr]);
            if (err != MPI_SUCCESS)
                return mpi_link_error(c, err, "MPI_Ibcast");
            nr++;
            off += k;
        }
        comm_status_t st = mpi_link_wait(c, &hier_of(c)->link, reqs, nr, deadline, true, s->what);
        if (st != COMM_OK)
            return st;
    }
    return COMM_OK;
}

/*
 * The hosts' partial results combined in arcomm's order, never the MPI library's (whose
 * in-place allreduce picks its own algorithm: another one, or another collective
 * component, would change the bits): a binomial tree over the ranks of mc, rounds
 * k = 1, 2, 4, ...: rank h, a multiple of 2k, takes partial(h) op partial(h + k) where
 * h + k < H, in the work dtype with the host reduction's own arithmetic (iops->combine:
 * the same NaN and wrap-around rules as on one host); then rank 0's result goes to every
 * rank.  tmp holds HIER_SEGS_IN_FLIGHT segments of a child's data; on a failed wait the
 * receives into it may still be under way, so it is left to MPI (mpi_ctl_done).
 */
static comm_status_t tree_allreduce(struct comm *c, const struct hier_inter *s, uint64_t deadline)
{
    int me = 0, h = 1;
    MPI_Comm_rank(s->mc, &me);
    MPI_Comm_size(s->mc, &h);
    size_t seg = HIER_SEG_BYTES / s->esize ? HIER_SEG_BYTES / s->esize : 1;
    MPI_Datatype type = MPI_BYTE;
    comm_op_t op = s->op == COMM_AVG ? COMM_SUM : s->op; /* AVG divides after the step */
    char *tmp = NULL;
    comm_status_t st = COMM_OK;
    for (int k = 1; k < h && st == COMM_OK; k <<= 1) {
        bool sends = me % (2 * k) == k, receives = me % (2 * k) == 0 && me + k < h;
        if (!sends && !receives)
            continue;
        if (receives && tmp == NULL &&
            (tmp = mpi_ctl_new(HIER_SEGS_IN_FLIGHT * seg * s->esize)) == NULL) {
            rt_error(c, COMM_ERR_NOMEM, "rank %d: out of memory for %s", c->rank, s->what);
            return COMM_ERR_NOMEM;
        }
        int peer = sends ? me - k : me + k;
        for (size_t off = 0; off < s->n && st == COMM_OK;) {
            MPI_Request reqs[HIER_SEGS_IN_FLIGHT];
            size_t first = off, nr = 0;
            while (nr < HIER_SEGS_IN_FLIGHT && off < s->n) {
                size_t n = s->n - off < seg ? s->n - off : seg;
                char *p = (char *)s->buf + off * s->esize;
                int err = sends ? MPI_Isend(p, (int)(n * s->esize), type, peer, HIER_TREE_TAG,
                                            s->mc, &reqs[nr])
                                : MPI_Irecv(tmp + nr * seg * s->esize, (int)(n * s->esize), type,
                                            peer, HIER_TREE_TAG, s->mc, &reqs[nr]);
                if (err != MPI_SUCCESS) {
                    st = mpi_link_error(c, err, sends ? "MPI_Isend" : "MPI_Irecv");
                    break;
                }
                nr++;
                off += n;
            }
            if (st == COMM_OK)
                st = mpi_link_wait(c, &hier_of(c)->link, reqs, (int)nr, deadline, true, s->what);
            if (st != COMM_OK || sends)
                continue;
            /* Mine first, the child's second: partial(h) op partial(h + k). */
            hier_of(c)->iops->combine((char *)s->buf + first * s->esize, tmp, off - first, s->dtype,
                                      op);
        }
        if (sends)
            break; /* its partial went up the tree: it waits for the result */
    }
    if (tmp != NULL)
        mpi_ctl_done(tmp, st == COMM_OK);
    return st == COMM_OK ? bcast_segments(c, s, 0, deadline) : st;
}

comm_status_t hier_inter_segments(struct comm *c, const struct hier_inter *s, comm_status_t mine,
                                  uint64_t deadline)
{
    struct mpi_status_word *w = mpi_ctl_new(2 * sizeof(*w));
    if (w == NULL) {
        rt_error(c, COMM_ERR_NOMEM, "rank %d: out of memory for %s", c->rank, s->what);
        return COMM_ERR_NOMEM;
    }
    MPI_Request req;
    int err = mpi_link_status_start(s->mc, c->rank, mine, &w[0], &w[1], &req);
    if (err != MPI_SUCCESS) {
        mpi_ctl_done(w, true);
        return mpi_link_error(c, err, "MPI_Iallreduce (status)");
    }
    comm_status_t st = s->kind == HIER_INTER_ALLREDUCE ? tree_allreduce(c, s, deadline)
                                                       : bcast_segments(c, s, s->root, deadline);
    if (st == COMM_OK)
        st = mpi_link_wait(c, &hier_of(c)->link, &req, 1, deadline, true, s->what);
    if (st != COMM_OK) {
        mpi_ctl_done(w, false); /* the status request may be under way */
        return st;
    }
    st = mpi_link_status_check(c, mine, &w[1], s->what);
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
