/* SPDX-License-Identifier: MIT */
/*
 * The intercepted reductions and the barrier (moves.c has the data-movement calls).  Each
 * looks up its communicator's state, decides whether arcomm serves this call (an
 * intra-communicator arcomm joined, a datatype and op of the table, a size the settings
 * give arcomm) and otherwise hands the call to PMPI_* unchanged.  What MPI reports as an
 * argument error (a bad root, a negative count, MPI_IN_PLACE where MPI has none) is handed
 * on too, so that MPI's error class reaches the program.  The decision reads only what
 * MPI has every rank of a correct program pass alike (for a predefined op: the same
 * datatype, count, op and root), so that all ranks take the same side.
 */
#include "pmpi.h"

#include <string.h>

PMPI_EXPORT int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                              MPI_Op op, MPI_Comm comm)
{
    struct pmpi_comm *pc = pmpi_comm_get(comm);
    comm_dtype_t dt;
    comm_op_t cop;
    if (pc == NULL || pc->arc == NULL || count < 0 || !pmpi_reduce_dtype(datatype, &dt) ||
        !pmpi_op(op, &cop) ||
        pmpi_small(PMPI_CALL_ALLREDUCE, (size_t)count * comm_dtype_size(dt)) ||
        (count > 0 && (recvbuf == NULL || sendbuf == NULL))) {
        pmpi_hand(pc, PMPI_CALL_ALLREDUCE);
        return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
    }
    const void *src = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    comm_status_t st = comm_allreduce(pc->arc, src, recvbuf, (size_t)count, dt, cop, NULL);
    return pmpi_end(pc, pmpi_done(pc, PMPI_CALL_ALLREDUCE, st));
}

PMPI_EXPORT int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                           MPI_Op op, int root, MPI_Comm comm)
{
    struct pmpi_comm *pc = pmpi_comm_get(comm);
    comm_dtype_t dt;
    comm_op_t cop;
    if (pc == NULL || pc->arc == NULL || count < 0 || root < 0 || root >= pc->size ||
        !pmpi_reduce_dtype(datatype, &dt) || !pmpi_op(op, &cop) ||
        pmpi_small(PMPI_CALL_REDUCE, (size_t)count * comm_dtype_size(dt)) ||
        /* MPI_IN_PLACE is the root's only; recvbuf is significant at the root only. */
        (sendbuf == MPI_IN_PLACE && pc->rank != root) ||
        (count > 0 && (sendbuf == NULL || (pc->rank == root && recvbuf == NULL)))) {
        pmpi_hand(pc, PMPI_CALL_REDUCE);
        return PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
    }
    const void *src = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    void *dst = pc->rank == root ? recvbuf : NULL;
    comm_status_t st = comm_reduce(pc->arc, src, dst, (size_t)count, dt, cop, root, NULL);
    return pmpi_end(pc, pmpi_done(pc, PMPI_CALL_REDUCE, st));
}

PMPI_EXPORT int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount,
                                         MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
{
    struct pmpi_comm *pc = pmpi_comm_get(comm);
    comm_dtype_t dt;
    comm_op_t cop;
    if (pc == NULL || pc->arc == NULL || recvcount < 0 || !pmpi_reduce_dtype(datatype, &dt) ||
        !pmpi_op(op, &cop) ||
        pmpi_small(PMPI_CALL_REDUCE_SCATTER_BLOCK,
                   (size_t)recvcount * comm_dtype_size(dt) * (size_t)pc->size) ||
        (recvcount > 0 && (recvbuf == NULL || sendbuf == NULL))) {
        pmpi_hand(pc, PMPI_CALL_REDUCE_SCATTER_BLOCK);
        return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
    }
    size_t n = (size_t)recvcount, bytes = n * comm_dtype_size(dt);
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
    return pmpi_end(pc, pmpi_done(pc, PMPI_CALL_REDUCE_SCATTER_BLOCK, st));
}

PMPI_EXPORT int MPI_Barrier(MPI_Comm comm)
{
    struct pmpi_comm *pc = pmpi_comm_get(comm);
    if (pc == NULL || pc->arc == NULL) {
        pmpi_hand(pc, PMPI_CALL_BARRIER);
        return PMPI_Barrier(comm);
    }
    return pmpi_end(pc, pmpi_done(pc, PMPI_CALL_BARRIER, comm_barrier(pc->arc)));
}

PMPI_EXPORT int MPI_Finalize(void)
{
    pmpi_finalize();
    return PMPI_Finalize();
}
