/* SPDX-License-Identifier: MIT */
/*
 * The Open MPI peer's collectives (arbench-mpi, and arbench --mpi --compare mpi): MPI_Allreduce,
 * MPI_Bcast, MPI_Reduce, MPI_Allgather, MPI_Reduce_scatter_block and MPI_Alltoall on
 * MPI_COMM_WORLD behind bench_coll, and the benchmark's bookkeeping through MPI.  f16 and
 * bf16 travel as MPI_UINT16_T with a user op that reduces in f32 and rounds once per
 * pairwise step.
 */
#include "mpi_peer.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

/* The user op of f16/bf16: the dtype and op it serves are set before each sweep. */
static comm_dtype_t half_dtype;
static comm_op_t half_op;

static void half_op_fn(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    bench_half_reduce(inout, in, (size_t)*len, half_dtype, half_op);
}

static int mpi_failed(int err, const char *what, size_t count)
{
    if (err == MPI_SUCCESS)
        return 0;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, msg, &len);
    fprintf(stderr, "arbench: MPI peer: %s(count %zu) failed: %s\n", what, count, msg);
    return -1;
}

/* MPI counts are int; arbench's sizes stay far below, but say so rather than wrap. */
static int too_big(size_t count, size_t per)
{
    if (count <= (size_t)INT_MAX / (per ? per : 1))
        return 0;
    fprintf(stderr, "arbench: MPI peer: count %zu is beyond MPI's int counts\n", count);
    return -1;
}

/* In place is MPI_IN_PLACE, as an MPI application would call it. */
static int coll_allreduce(void *ctx, const void *send, void *recv, size_t count, comm_dtype_t dtype,
                          comm_op_t op)
{
    struct mpi_peer *m = ctx;
    (void)dtype;
    (void)op;
    if (too_big(count, 1))
        return -1;
    return mpi_failed(MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, m->type,
                                    m->op, MPI_COMM_WORLD),
                      "MPI_Allreduce", count);
}

static int coll_broadcast(void *ctx, const void *send, void *recv, size_t count, comm_dtype_t dtype,
                          int root)
{
    struct mpi_peer *m = ctx;
    (void)dtype;
    if (too_big(count, 1))
        return -1;
    if (m->rank == root && send != recv)
        memcpy(recv, send, count * m->esize);
    return mpi_failed(MPI_Bcast(recv, (int)count, m->type, root, MPI_COMM_WORLD), "MPI_Bcast",
                      count);
}

static int coll_reduce(void *ctx, const void *send, void *recv, size_t count, comm_dtype_t dtype,
                       comm_op_t op, int root)
{
    struct mpi_peer *m = ctx;
    (void)dtype;
    (void)op;
    if (too_big(count, 1))
        return -1;
    const void *s = m->rank == root && send == recv ? MPI_IN_PLACE : send;
    return mpi_failed(MPI_Reduce(s, recv, (int)count, m->type, m->op, root, MPI_COMM_WORLD),
                      "MPI_Reduce", count);
}

static int coll_allgather(void *ctx, const void *send, void *recv, size_t sendcount,
                          comm_dtype_t dtype)
{
    struct mpi_peer *m = ctx;
    (void)dtype;
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (too_big(sendcount, (size_t)size))
        return -1;
    /* arcomm's in-place form: sendbuf is this rank's block of recvbuf. */
    const void *s =
        (const char *)send == (const char *)recv + (size_t)m->rank * sendcount * m->esize
            ? MPI_IN_PLACE
            : send;
    return mpi_failed(
        MPI_Allgather(s, (int)sendcount, m->type, recv, (int)sendcount, m->type, MPI_COMM_WORLD),
        "MPI_Allgather", sendcount);
}

static int coll_reduce_scatter(void *ctx, const void *send, void *recv, size_t recvcount,
                               comm_dtype_t dtype, comm_op_t op)
{
    struct mpi_peer *m = ctx;
    (void)dtype;
    (void)op;
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (too_big(recvcount, (size_t)size))
        return -1;
    /* arcomm's in-place form (recvbuf is block rank of sendbuf) is MPI's MPI_IN_PLACE on
     * the whole buffer, whose result lands at its start (bench_rank.rs_inplace_at_start). */
    if ((const char *)recv == (const char *)send + (size_t)m->rank * recvcount * m->esize)
        return mpi_failed(MPI_Reduce_scatter_block(MPI_IN_PLACE, (void *)send, (int)recvcount,
                                                   m->type, m->op, MPI_COMM_WORLD),
                          "MPI_Reduce_scatter_block", recvcount);
    return mpi_failed(
        MPI_Reduce_scatter_block(send, recv, (int)recvcount, m->type, m->op, MPI_COMM_WORLD),
        "MPI_Reduce_scatter_block", recvcount);
}

static int coll_alltoall(void *ctx, const void *send, void *recv, size_t count, comm_dtype_t dtype)
{
    struct mpi_peer *m = ctx;
    (void)dtype;
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (too_big(count, (size_t)size))
        return -1;
    return mpi_failed(
        MPI_Alltoall(send, (int)count, m->type, recv, (int)count, m->type, MPI_COMM_WORLD),
        "MPI_Alltoall", count);
}

static int sync_mpi(void *ctx, void *vals, size_t n, enum bench_red red)
{
    (void)ctx;
    MPI_Datatype t = red == BENCH_MAX_F64 ? MPI_DOUBLE : MPI_INT64_T;
    MPI_Op op = red == BENCH_SUM_I64 ? MPI_SUM : red == BENCH_MIN_I64 ? MPI_MIN : MPI_MAX;
    return MPI_Allreduce(MPI_IN_PLACE, vals, (int)n, t, op, MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
}

void mpi_peer_init(struct mpi_peer *m, comm_dtype_t dtype, comm_op_t op, int rank)
{
    static const MPI_Datatype types[] = {
        [COMM_F32] = MPI_FLOAT,    [COMM_F16] = MPI_UINT16_T, [COMM_BF16] = MPI_UINT16_T,
        [COMM_F64] = MPI_DOUBLE,   [COMM_I32] = MPI_INT32_T,  [COMM_I64] = MPI_INT64_T,
        [COMM_I8] = MPI_INT8_T,    [COMM_U8] = MPI_UINT8_T,   [COMM_U32] = MPI_UINT32_T,
        [COMM_U64] = MPI_UINT64_T,
    };
    m->type = types[dtype];
    m->rank = rank;
    m->esize = bench_dtype_size(dtype);
    m->half = dtype == COMM_F16 || dtype == COMM_BF16;
    if (m->half) {
        half_dtype = dtype;
        half_op = op;
        MPI_Op_create(half_op_fn, 1, &m->op);
    } else {
        m->op = op == COMM_SUM    ? MPI_SUM
                : op == COMM_PROD ? MPI_PROD
                : op == COMM_MAX  ? MPI_MAX
                                  : MPI_MIN;
    }
}

void mpi_peer_fini(struct mpi_peer *m)
{
    if (m->half)
        MPI_Op_free(&m->op);
}

struct bench_coll mpi_peer_coll(struct mpi_peer *m)
{
    struct bench_coll coll = {.allreduce = coll_allreduce,
                              .broadcast = coll_broadcast,
                              .reduce = coll_reduce,
                              .allgather = coll_allgather,
                              .reduce_scatter = coll_reduce_scatter,
                              .alltoall = coll_alltoall,
                              .ctx = m};
    return coll;
}

struct bench_sync mpi_peer_sync(void)
{
    struct bench_sync sync = {.reduce = sync_mpi, .same_bytes = NULL, .ctx = NULL};
    return sync;
}
