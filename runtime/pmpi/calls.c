/* SPDX-License-Identifier: MIT */
/*
 * The intercepted reductions and the barrier (moves.c has the data-movement calls).  Each
 * looks up its communicator's state, decides whether arcomm serves this call (an
 * intra-communicator arcomm joined, a datatype and op of the table, a size the settings
 * give arcomm) and otherwise hands the call to PMPI_* unchanged.  What MPI reports as an
 * argument error (a bad root, a negative count, MPI_IN_PLACE where MPI has none) is handed
 * on too, so that MPI's error class reaches the program.  The decision reads only what
 * MPI has every rank of a correct program pass alike (for a predefined op: the same
 * datatype, count, op and root), so that all ranks take the same side; where an erroneous
 * program's ranks do not, the call goes to MPI on all of them (waits.c), and so every
 * call does at one of three points: the decision (pmpi_hand), before arcomm's call
 * (pmpi_serve) and after it (pmpi_joins).
 */
#include "pmpi.h"

#include <string.h>

PMPI_EXPORT int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                              MPI_Op op, MPI_Comm comm)
{
    struct pmpi_comm *pc = pmpi_comm_get(comm);
    comm_dtype_t dt;
    comm_op_t cop;
    /* Handed for its arguments (MPI may return at once) or for its size. */
    bool ok = pmpi_serves(pc) && count >= 0 && pmpi_reduce_dtype(datatype, &dt) &&
              pmpi_op(op, &cop) && !(count > 0 && (recvbuf == NULL || sendbuf == NULL));
    if (!ok || pmpi_small(PMPI_CALL_ALLREDUCE, (size_t)count * comm_dtype_size(dt))) {
        pmpi_hand(pc, PMPI_CALL_ALLREDUCE, !ok);
        goto to_mpi;
    }
    if (!pmpi_serve(pc, PMPI_CALL_ALLREDUCE))
        goto to_mpi;
    const void *src = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    comm_status_t st = comm_allreduce(pc->arc, src, recvbuf, (size_t)count, dt, cop, NULL);
    if (pmpi_joins(pc, PMPI_CALL_ALLREDUCE, st))
        goto to_mpi;
    return pmpi_end(pc, pmpi_done(pc, PMPI_CALL_ALLREDUCE, st));
to_mpi:
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}

PMPI_EXPORT int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                           MPI_Op op, int root, MPI_Comm comm)
{
    struct pmpi_comm *pc = pmpi_comm_get(comm);
    comm_dtype_t dt;
    comm_op_t cop;
    /* A non-root may leave MPI's reduce before the root entered it: every handed one
     * counts as such (run ahead). */
    if (!pmpi_serves(pc) || count < 0 || root < 0 || root >= pc->size ||
        !pmpi_reduce_dtype(datatype, &dt) || !pmpi_op(op, &cop) ||
        pmpi_small(PMPI_CALL_REDUCE, (size_t)count * comm_dtype_size(dt)) ||
        /* MPI_IN_PLACE is the root's only; recvbuf is significant at the root only. */
        (sendbuf == MPI_IN_PLACE && pc->rank != root) ||
        (count > 0 && (sendbuf == NULL || (pc->rank == root && recvbuf == NULL)))) {
        pmpi_hand(pc, PMPI_CALL_REDUCE, true);
        goto to_mpi;
    }
    if (!pmpi_serve(pc, PMPI_CALL_REDUCE))
        goto to_mpi;
    const void *src = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    void *dst = pc->rank == root ? recvbuf : NULL;
    comm_status_t st = comm_reduce(pc->arc, src, dst, (size_t)count, dt, cop, root, NULL);
    if (pmpi_joins(pc, PMPI_CALL_REDUCE, st))
        goto to_mpi;
    return pmpi_end(pc, pmpi_done(pc, PMPI_CALL_REDUCE, st));
to_mpi:
    return PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
}

PMPI_EXPORT int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount,
                                         MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
{
    struct pmpi_comm *pc = pmpi_comm_get(comm);
    comm_dtype_t dt;
    comm_op_t cop;
    bool ok = pmpi_serves(pc) && recvcount >= 0 && pmpi_reduce_dtype(datatype, &dt) &&
              pmpi_op(op, &cop) && !(recvcount > 0 && (recvbuf == NULL || sendbuf == NULL));
    size_t n = (size_t)recvcount, bytes = ok ? n * comm_dtype_size(dt) : 0;
    if (!ok || pmpi_small(PMPI_CALL_REDUCE_SCATTER_BLOCK, bytes * (size_t)pc->size)) {
        pmpi_hand(pc, PMPI_CALL_REDUCE_SCATTER_BLOCK, !ok);
        goto to_mpi;
    }
    if (!pmpi_serve(pc, PMPI_CALL_REDUCE_SCATTER_BLOCK))
        goto to_mpi;
    comm_status_t st;
    if (sendbuf != MPI_IN_PLACE) {
        st = comm_reduce_scatter(pc->arc, sendbuf, recvbuf, n, dt, cop, NULL);
    } else if (pc->rank == 0) {
        /* In place, the input is recvbuf (size blocks) and the result goes to its first
         * block, the others left as they were (as Open MPI leaves them): rank 0's is
         * arcomm's in-place form, the others' result goes through scratch. */
        st = comm_reduce_scatter(pc->arc, recvbuf, recvbuf, n, dt, cop, NULL);
    } else {
        void *out = pmpi_scratch(pc, 0, bytes);
        if (out == NULL && bytes > 0)
            return pmpi_end(pc, pmpi_local_fail(pc, PMPI_CALL_REDUCE_SCATTER_BLOCK, MPI_ERR_NO_MEM,
                                                "no memory for a copy of the result"));
        st = comm_reduce_scatter(pc->arc, recvbuf, out, n, dt, cop, NULL);
        if (st == COMM_OK && bytes > 0)
            memcpy(recvbuf, out, bytes);
    }
    if (pmpi_joins(pc, PMPI_CALL_REDUCE_SCATTER_BLOCK, st))
        goto to_mpi;
    return pmpi_end(pc, pmpi_done(pc, PMPI_CALL_REDUCE_SCATTER_BLOCK, st));
to_mpi:
    return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
}

PMPI_EXPORT int MPI_Barrier(MPI_Comm comm)
{
    struct pmpi_comm *pc = pmpi_comm_get(comm);
    if (!pmpi_serves(pc)) {
        pmpi_hand(pc, PMPI_CALL_BARRIER, false);
        goto to_mpi;
    }
    if (!pmpi_serve(pc, PMPI_CALL_BARRIER))
        goto to_mpi;
    comm_status_t st = comm_barrier(pc->arc);
    if (pmpi_joins(pc, PMPI_CALL_BARRIER, st))
        goto to_mpi;
    return pmpi_end(pc, pmpi_done(pc, PMPI_CALL_BARRIER, st));
to_mpi:
    return PMPI_Barrier(comm);
}

PMPI_EXPORT int MPI_Finalize(void)
{
    pmpi_finalize();
    return PMPI_Finalize();
}
