/* SPDX-License-Identifier: MIT */
/*
 * MPI as the link between hosts: datatype and op maps, the bounded wait every
 * inter-host step ends with, the status every step carries, and freeing.
 */
#include "mpi_link.h"

#include <sched.h>
#include <stdio.h>
#include <time.h>

MPI_Datatype mpi_link_dtype(comm_dtype_t dtype)
{
    switch (dtype) {
    case COMM_F32:
        return MPI_FLOAT;
    case COMM_F64:
        return MPI_DOUBLE;
    case COMM_I32:
        return MPI_INT32_T;
    case COMM_I64:
        return MPI_INT64_T;
    case COMM_I8:
        return MPI_INT8_T;
    case COMM_U8:
        return MPI_UINT8_T;
    case COMM_U32:
        return MPI_UINT32_T;
    case COMM_U64:
        return MPI_UINT64_T;
    default:
        return MPI_DATATYPE_NULL; /* f16, bf16: the hierarchical paths widen them to f32 */
    }
}

/* inout[i] += in[i] modulo 256: the same bits for MPI_INT8_T and MPI_UINT8_T. */
static void sum8_wrap(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    const uint8_t *a = in;
    uint8_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = (uint8_t)(b[i] + a[i]);
}

int mpi_link_ops_create(struct mpi_link *l)
{
    return MPI_Op_create(sum8_wrap, 1, &l->sum8);
}

MPI_Op mpi_link_op(const struct mpi_link *l, comm_op_t op, comm_dtype_t dtype)
{
    if ((op == COMM_SUM || op == COMM_AVG) && (dtype == COMM_I8 || dtype == COMM_U8))
        return l->sum8;
    switch (op) {
    case COMM_MAX:
        return MPI_MAX;
    case COMM_MIN:
        return MPI_MIN;
    case COMM_PROD:
        return MPI_PROD;
    default:
        return MPI_SUM; /* SUM, and AVG's sum */
    }
}

comm_status_t mpi_link_error(struct comm *c, int err, const char *call)
{
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(err, text, &len);
    rt_error(c, COMM_ERR_SYSTEM, "rank %d: %s failed: %s (MPI error %d); check the MPI job",
             c->rank, call, text, err);
    return COMM_ERR_SYSTEM;
}

comm_status_t mpi_link_wait(struct comm *c, MPI_Request *reqs, int n, uint64_t deadline,
                            bool abortable, const char *what)
{
    uint64_t start = 0, now = 0;
    for (unsigned polls = 0;; polls++) {
        int done = 0;
        int err = MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
        if (err != MPI_SUCCESS)
            return mpi_link_error(c, err, "MPI_Testall");
        if (done)
            return COMM_OK;
        if (abortable && atomic_load(&c->aborted)) {
            rt_error(c, COMM_ERR_ABORTED,
                     "rank %d: comm_abort was called on this communicator during %s (call %u)",
                     c->rank, what, c->seq);
            return COMM_ERR_ABORTED;
        }
        /* A clock reading costs more than a poll: read it every 64 polls. */
        if ((polls & 63) != 63)
            continue;
        now = rt_now_ns();
        if (start == 0)
            start = now;
        if (rt_passed(deadline, now)) {
            rt_error(c, COMM_ERR_TIMEOUT,
                     "rank %d: timed out after %ld ms in %s (call %u): a rank of another host "
                     "did not arrive (it may not have made this call, or it is stuck or dead); "
                     "every rank must make the same calls in the same order, or raise "
                     "ARCOMM_TIMEOUT_MS",
                     c->rank, c->timeout_ms, what, c->seq);
            return COMM_ERR_TIMEOUT;
        }
        /* MPI's nonblocking collectives progress only inside MPI calls: keep polling,
         * yielding the core (oversubscribed hosts need the peers to run), and sleep
         * only once a wait has lasted long enough to be a late peer, not a transfer. */
        if (now - start > 20000000ull) {
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        } else {
            sched_yield();
        }
    }
}

int mpi_link_status_start(MPI_Comm mc, int rank, comm_status_t mine, struct mpi_status_word *in,
                          struct mpi_status_word *out, MPI_Request *req)
{
    in->neg_status = -(int64_t)mine;
    in->rank = mine == COMM_OK ? -1 : rank;
    return MPI_Iallreduce(in, out, 2, MPI_INT64_T, MPI_MAX, mc, req);
}

comm_status_t mpi_link_status_check(struct comm *c, comm_status_t st,
                                    const struct mpi_status_word *out, const char *what)
{
    if (st != COMM_OK)
        return st;
    if (out->neg_status == 0)
        return COMM_OK;
    comm_status_t theirs = (comm_status_t)(-out->neg_status);
    rt_error(c, COMM_ERR_PEER,
             "rank %d: rank %lld failed in %s of call %u (%s); see that rank's comm_last_error",
             c->rank, (long long)out->rank, what, c->seq, rt_status_string(theirs));
    return COMM_ERR_PEER;
}

void mpi_link_free(struct mpi_link *l)
{
    int finalized = 0;
    MPI_Finalized(&finalized);
    MPI_Comm *all[] = {&l->slice, &l->host, &l->world};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        if (*all[i] != MPI_COMM_NULL && !finalized)
            MPI_Comm_free(all[i]);
        *all[i] = MPI_COMM_NULL;
    }
    if (l->sum8 != MPI_OP_NULL && !finalized)
        MPI_Op_free(&l->sum8);
    l->sum8 = MPI_OP_NULL;
}
