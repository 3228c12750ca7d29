/* SPDX-License-Identifier: MIT */
/*
 * The intercepted MPI calls.  Each looks up its communicator's state, decides whether
 * arcomm serves this call (an intra-communicator arcomm joined, a valid call with a
 * datatype and op of the table, an MPI_IN_PLACE form it knows) and otherwise hands the
 * call to PMPI_* unchanged.  What MPI reports as an argument error (a bad root, a
 * negative count, a NULL buffer) is handed on too, so that MPI's error class reaches the
 * program.  The decision reads only what MPI has every rank pass alike (datatype, count,
 * op, root, MPI_IN_PLACE), so that all ranks take the same side.
 */
#include "pmpi.h"

#include <string.h>

/* The entry points the program's calls resolve to (the build hides everything else). */
#define PMPI_EXPORT __attribute__((visibility("default")))

/* The bytes of n elements of dtype from p. */
static inline char *at(const void *p, size_t n, comm_dtype_t dtype)
{
    return (char *)p + n * comm_dtype_size(dtype);
}

/* Counts a call handed to PMPI (pc NULL: nothing is counted when the library is off). */
static inline void handed(struct pmpi_comm *pc, enum pmpi_call call)
{
    if (pc != NULL)
        pc->handed[call]++;
    else if (!pmpi_settings.off)
        pmpi_count_stateless(call);
}

/* Out of memory for a served call's copy: not handed on (the peers are in arcomm's call
 * already), an error through comm's error handler. */
static int pmpi_nomem(struct pmpi_comm *pc, enum pmpi_call call, size_t bytes)
{
    pmpi_log(PMPI_LOG_ERROR, "rank %d: %s: no memory for a copy of %zu bytes", pc->rank,
             pmpi_call_name(call), bytes);
    PMPI_Comm_call_errhandler(pc->mpi, MPI_ERR_NO_MEM);
    return MPI_ERR_NO_MEM;
}

/* Too small for arcomm to win (pmpi_settings.min_bytes): n elements of dtype, times k. */
static inline bool small(enum pmpi_call call, size_t n, comm_dtype_t dtype, int k)
{
    return n * comm_dtype_size(dtype) * (size_t)k < pmpi_settings.min_bytes[call];
}

/* A broadcast of n elements of dtype for MPI: under PMPI_EAGER_BYTES, one that arcomm's
 * eager broadcast does not cover (pmpi_settings.bcast_eager_max). */
static inline bool small_bcast(size_t n, comm_dtype_t dtype)
{
    size_t bytes = n * comm_dtype_size(dtype);
    if (small(PMPI_CALL_BCAST, n, dtype, 1))
        return true;
    size_t eager = pmpi_settings.bcast_eager_max;
    return eager != SIZE_MAX && bytes < PMPI_EAGER_BYTES && (eager == 0 || bytes > eager);
}

static inline int served(struct pmpi_comm *pc, enum pmpi_call call, comm_status_t st)
{
    if (st != COMM_OK)
        return pmpi_fail(pc, call, st);
    pc->served[call]++;
    return MPI_SUCCESS;
}

PMPI_EXPORT int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                              MPI_Op op, MPI_Comm comm)
{
    struct pmpi_comm *pc = pmpi_comm_get(comm);
    comm_dtype_t dt;
    comm_op_t cop;
    if (pc == NULL || pc->arc == NULL || count < 0 || !pmpi_reduce_dtype(datatype, &dt) ||
        !pmpi_op(op, &cop) || small(PMPI_CALL_ALLREDUCE, (size_t)count, dt, 1) ||
        (count > 0 && (recvbuf == NULL || sendbuf == NULL))) {
        handed(pc, PMPI_CALL_ALLREDUCE);
        return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
    }
    const void *src = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    return served(pc, PMPI_CALL_ALLREDUCE,
                  comm_allreduce(pc->arc, src, recvbuf, (size_t)count, dt, cop, NULL));
}

PMPI_EXPORT int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                           MPI_Op op, int root, MPI_Comm comm)
{
    struct pmpi_comm *pc = pmpi_comm_get(comm);
    comm_dtype_t dt;
    comm_op_t cop;
    if (pc == NULL || pc->arc == NULL || count < 0 || root < 0 || root >= pc->size ||
        !pmpi_reduce_dtype(datatype, &dt) || !pmpi_op(op, &cop) ||
        small(PMPI_CALL_REDUCE, (size_t)count, dt, 1) ||
        /* MPI_IN_PLACE is the root's only; recvbuf is significant at the root only. */
        (sendbuf == MPI_IN_PLACE && pc->rank != root) ||
        (count > 0 && (sendbuf == NULL || (pc->rank == root && recvbuf == NULL)))) {
        handed(pc, PMPI_CALL_REDUCE);
        return PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
    }
    const void *src = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    void *dst = pc->rank == root ? recvbuf : NULL;
    return served(pc, PMPI_CALL_REDUCE,
                  comm_reduce(pc->arc, src, dst, (size_t)count, dt, cop, root, NULL));
}

PMPI_EXPORT int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm)
{
    struct pmpi_comm *pc = pmpi_comm_get(comm);
    comm_dtype_t dt;
    size_t n;
    if (pc == NULL || pc->arc == NULL || root < 0 || root >= pc->size ||
        !pmpi_move_dtype(datatype, count, &dt, &n) || small_bcast(n, dt) ||
        (n > 0 && buffer == NULL)) {
        handed(pc, PMPI_CALL_BCAST);
        return PMPI_Bcast(buffer, count, datatype, root, comm);
    }
    return served(pc, PMPI_CALL_BCAST, comm_broadcast(pc->arc, buffer, buffer, n, dt, root, NULL));
}

PMPI_EXPORT int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                              void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    struct pmpi_comm *pc = pmpi_comm_get(comm);
    comm_dtype_t dt;
    size_t n;
    bool in_place = sendbuf == MPI_IN_PLACE;
    /* Out of place: the same type and count on both sides (other signature-equal forms
     * go to PMPI).  In place, sendcount and sendtype are ignored, as MPI says. */
    if (pc == NULL || pc->arc == NULL ||
        (!in_place && (sendtype != recvtype || sendcount != recvcount)) ||
        !pmpi_move_dtype(recvtype, recvcount, &dt, &n) ||
        small(PMPI_CALL_ALLGATHER, n, dt, pc->size) ||
        (n > 0 && (recvbuf == NULL || sendbuf == NULL))) {
        handed(pc, PMPI_CALL_ALLGATHER);
        return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    }
    /* In place, this rank's block is already in recvbuf: arcomm's in-place form. */
    const void *src = in_place ? at(recvbuf, (size_t)pc->rank * n, dt) : sendbuf;
    return served(pc, PMPI_CALL_ALLGATHER, comm_allgather(pc->arc, src, recvbuf, n, dt, NULL));
}

PMPI_EXPORT int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount,
                                         MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
{
    struct pmpi_comm *pc = pmpi_comm_get(comm);
    comm_dtype_t dt;
    comm_op_t cop;
    if (pc == NULL || pc->arc == NULL || recvcount < 0 || !pmpi_reduce_dtype(datatype, &dt) ||
        !pmpi_op(op, &cop) ||
        small(PMPI_CALL_REDUCE_SCATTER_BLOCK, (size_t)recvcount, dt, pc->size) ||
        (recvcount > 0 && (recvbuf == NULL || sendbuf == NULL))) {
        handed(pc, PMPI_CALL_REDUCE_SCATTER_BLOCK);
        return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
    }
    size_t n = (size_t)recvcount;
    if (sendbuf != MPI_IN_PLACE)
        return served(pc, PMPI_CALL_REDUCE_SCATTER_BLOCK,
                      comm_reduce_scatter(pc->arc, sendbuf, recvbuf, n, dt, cop, NULL));
    /* In place, the input is recvbuf (size blocks) and the result goes to its first
     * block, the others left as they were (as Open MPI leaves them): rank 0's is
     * arcomm's in-place form, the others' result goes through scratch. */
    if (pc->rank == 0)
        return served(pc, PMPI_CALL_REDUCE_SCATTER_BLOCK,
                      comm_reduce_scatter(pc->arc, recvbuf, recvbuf, n, dt, cop, NULL));
    size_t bytes = n * comm_dtype_size(dt);
    void *out = pmpi_scratch(pc, bytes);
    if (out == NULL && bytes > 0)
        return pmpi_nomem(pc, PMPI_CALL_REDUCE_SCATTER_BLOCK, bytes);
    comm_status_t st = comm_reduce_scatter(pc->arc, recvbuf, out, n, dt, cop, NULL);
    if (st == COMM_OK && bytes > 0)
        memcpy(recvbuf, out, bytes);
    return served(pc, PMPI_CALL_REDUCE_SCATTER_BLOCK, st);
}

PMPI_EXPORT int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                             void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    struct pmpi_comm *pc = pmpi_comm_get(comm);
    comm_dtype_t dt;
    size_t n;
    bool in_place = sendbuf == MPI_IN_PLACE;
    if (pc == NULL || pc->arc == NULL ||
        (!in_place && (sendtype != recvtype || sendcount != recvcount)) ||
        !pmpi_move_dtype(recvtype, recvcount, &dt, &n) ||
        small(PMPI_CALL_ALLTOALL, n, dt, pc->size) ||
        (n > 0 && (recvbuf == NULL || sendbuf == NULL))) {
        handed(pc, PMPI_CALL_ALLTOALL);
        return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    }
    const void *src = sendbuf;
    if (in_place) {
        /* arcomm's alltoall is out of place only: the input is a copy of recvbuf. */
        size_t bytes = (size_t)pc->size * n * comm_dtype_size(dt);
        void *copy = pmpi_scratch(pc, bytes);
        if (copy == NULL && bytes > 0)
            return pmpi_nomem(pc, PMPI_CALL_ALLTOALL, bytes);
        if (bytes > 0)
            memcpy(copy, recvbuf, bytes);
        src = copy;
    }
    return served(pc, PMPI_CALL_ALLTOALL, comm_alltoall(pc->arc, src, recvbuf, n, dt, NULL));
}

PMPI_EXPORT int MPI_Barrier(MPI_Comm comm)
{
    struct pmpi_comm *pc = pmpi_comm_get(comm);
    if (pc == NULL || pc->arc == NULL) {
        handed(pc, PMPI_CALL_BARRIER);
        return PMPI_Barrier(comm);
    }
    return served(pc, PMPI_CALL_BARRIER, comm_barrier(pc->arc));
}

PMPI_EXPORT int MPI_Finalize(void)
{
    pmpi_finalize();
    return PMPI_Finalize();
}
