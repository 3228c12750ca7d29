/* SPDX-License-Identifier: MIT */
/*
 * The intercepted data-movement calls: MPI_Bcast, MPI_Allgather, MPI_Alltoall.  MPI
 * matches their type signatures, not their handles (2 x MPI_2INT at the root and 4 x
 * MPI_INT elsewhere is one legal broadcast), so arcomm moves the signature's bytes
 * (COMM_U8), whatever the datatype: a type whose bytes are one run is read and written in
 * place, any other is packed into a scratch buffer of the communicator first (and
 * unpacked after).  What decides is the number of bytes and the root, which every rank of
 * a correct program has alike; what MPI reports as an argument error (a bad root, a
 * negative count, send and receive sides of different sizes) goes to MPI.
 */
#include "pmpi.h"

#include <string.h>

/*
 * One side of a served data-movement call: count elements of a type at buf, as a run of
 * bytes arcomm reads or writes.  run: in place (buf + tlb); packed: in scratch buffer i of
 * the communicator.
 */
struct side {
    const void *buf;
    size_t count;
    MPI_Datatype type;
    struct pmpi_layout l;
    size_t bytes;
    char *run; /* where arcomm's bytes are */
    bool packed;
};

/* Where side s's bytes go: in place, or scratch i (NULL: no memory). */
static bool side_place(struct pmpi_comm *pc, struct side *s, int i)
{
    s->packed = !pmpi_layout_run(&s->l, s->count);
    if (!s->packed) {
        s->run = (char *)s->buf + s->l.tlb;
        return true;
    }
    s->run = pmpi_scratch(pc, i, s->bytes);
    return s->run != NULL || s->bytes == 0;
}

/* The sending side's bytes into its run (packed: MPI_Pack); MPI's error code. */
static int side_pack(const struct side *s)
{
    if (!s->packed || s->bytes == 0)
        return MPI_SUCCESS;
    return pmpi_pack(s->buf, s->count, s->type, &s->l, s->run);
}

/* After a served call that returned rc: the receiving side's bytes out of its run
 * (packed: MPI_Unpack); then the call's reference on pc is dropped. */
static int side_unpack(struct pmpi_comm *pc, enum pmpi_call call, const struct side *s, int rc)
{
    if (rc == MPI_SUCCESS && s->packed && s->bytes > 0) {
        /* MPI_Finalize ran in another thread meanwhile (an erroneous program): no MPI. */
        rc = pmpi_comm_final(pc) ? MPI_ERR_OTHER
                                 : pmpi_unpack(s->run, s->count, s->type, &s->l, (void *)s->buf);
        if (rc != MPI_SUCCESS) {
            pmpi_log(PMPI_LOG_ERROR, "rank %d: %s: MPI_Unpack of the result failed", pc->rank,
                     pmpi_call_name(call));
            if (pmpi_comm_mpi_ok(pc))
                PMPI_Comm_call_errhandler(pc->mpi, rc);
        }
    }
    return pmpi_end(pc, rc);
}

/* A failure before arcomm's call (pmpi_local_fail), and the end of the call. */
static int fail(struct pmpi_comm *pc, enum pmpi_call call, int rc, const char *what)
{
    return pmpi_end(pc, pmpi_local_fail(pc, call, rc, what));
}

static int nomem(struct pmpi_comm *pc, enum pmpi_call call)
{
    return fail(pc, call, MPI_ERR_NO_MEM, "no memory for a packed copy");
}

/* The layout and bytes of count elements of type (false: MPI reports the argument). */
static bool side_init(struct side *s, const void *buf, int count, MPI_Datatype type)
{
    s->buf = buf;
    s->count = count < 0 ? 0 : (size_t)count;
    s->type = type;
    return count >= 0 && pmpi_layout(type, &s->l) && pmpi_layout_bytes(&s->l, count, &s->bytes);
}

PMPI_EXPORT int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm)
{
    struct pmpi_comm *pc = pmpi_comm_get(comm);
    struct side s;
    /* A root may leave MPI's broadcast before the others entered it: every handed one
     * counts as such (run ahead). */
    if (!pmpi_serves(pc) || root < 0 || root >= pc->size ||
        !side_init(&s, buffer, count, datatype) || pmpi_small(PMPI_CALL_BCAST, s.bytes)) {
        pmpi_hand(pc, PMPI_CALL_BCAST, true);
        goto to_mpi;
    }
    if (!pmpi_serve(pc, PMPI_CALL_BCAST))
        goto to_mpi;
    if (!side_place(pc, &s, 0))
        return nomem(pc, PMPI_CALL_BCAST);
    bool is_root = pc->rank == root;
    if (is_root && side_pack(&s) != MPI_SUCCESS)
        return fail(pc, PMPI_CALL_BCAST, MPI_ERR_TYPE, "MPI_Pack of the input failed");
    comm_status_t st = comm_broadcast(pc->arc, s.run, s.run, s.bytes, COMM_U8, root, NULL);
    if (pmpi_joins(pc, PMPI_CALL_BCAST, st))
        goto to_mpi;
    int rc = pmpi_done(pc, PMPI_CALL_BCAST, st);
    if (is_root)
        s.packed = false; /* the root's buffer is the input, nothing to unpack */
    return side_unpack(pc, PMPI_CALL_BCAST, &s, rc);
to_mpi:
    return PMPI_Bcast(buffer, count, datatype, root, comm);
}

/*
 * The two sides of MPI_Allgather and MPI_Alltoall.  The receive side: size blocks of
 * recvcount elements of recvtype (one run of size * recvcount elements, the blocks one
 * after the other).  The send side: send_blocks (1 or size) blocks of sendcount elements
 * of sendtype, each as many bytes as a receive block, as MPI requires; in_place: recvbuf
 * itself.  False: a call MPI must see (its arguments, or the two sides' sizes, are wrong).
 */
static bool sides_init(struct pmpi_comm *pc, struct side *send, struct side *recv,
                       const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                       int recvcount, MPI_Datatype recvtype, bool in_place, int send_blocks)
{
    if (!side_init(recv, recvbuf, recvcount, recvtype))
        return false;
    size_t block = recv->bytes, n = (size_t)pc->size;
    if (block > 0 && n > SIZE_MAX / block)
        return false;
    recv->count *= n;
    recv->bytes *= n;
    if (in_place) {
        *send = *recv;
        return true;
    }
    if (!side_init(send, sendbuf, sendcount, sendtype) || send->bytes != block)
        return false;
    send->count *= (size_t)send_blocks;
    send->bytes *= (size_t)send_blocks;
    return true;
}

PMPI_EXPORT int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                              void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    struct pmpi_comm *pc = pmpi_comm_get(comm);
    struct side send, recv;
    bool in_place = sendbuf == MPI_IN_PLACE;
    /* In place, sendcount and sendtype are ignored, as MPI says.  Handed for its
     * arguments (MPI may return at once) or for its size. */
    bool ok = pmpi_serves(pc) && sides_init(pc, &send, &recv, sendbuf, sendcount, sendtype, recvbuf,
                                            recvcount, recvtype, in_place, 1);
    if (!ok || pmpi_small(PMPI_CALL_ALLGATHER, recv.bytes)) {
        pmpi_hand(pc, PMPI_CALL_ALLGATHER, !ok);
        goto to_mpi;
    }
    if (!pmpi_serve(pc, PMPI_CALL_ALLGATHER))
        goto to_mpi;
    size_t block = recv.bytes / (size_t)pc->size;
    if (!side_place(pc, &recv, 1))
        return nomem(pc, PMPI_CALL_ALLGATHER);
    /* This rank's block: arcomm's in-place form when the receive side is in place (its
     * block is there already, or is packed there now), else the send side's run. */
    const char *src = recv.run + (size_t)pc->rank * block;
    if (in_place && recv.packed && block > 0) {
        size_t n = recv.count / (size_t)pc->size;
        int rc = pmpi_pack((const char *)recvbuf + (MPI_Aint)(n * (size_t)pc->rank) * recv.l.extent,
                           n, recvtype, &recv.l, recv.run + (size_t)pc->rank * block);
        if (rc != MPI_SUCCESS)
            return fail(pc, PMPI_CALL_ALLGATHER, rc, "MPI_Pack of the input failed");
    } else if (!in_place) {
        if (!side_place(pc, &send, 0))
            return nomem(pc, PMPI_CALL_ALLGATHER);
        int rc = side_pack(&send);
        if (rc != MPI_SUCCESS)
            return fail(pc, PMPI_CALL_ALLGATHER, rc, "MPI_Pack of the input failed");
        src = send.run;
    }
    comm_status_t st = comm_allgather(pc->arc, src, recv.run, block, COMM_U8, NULL);
    if (pmpi_joins(pc, PMPI_CALL_ALLGATHER, st))
        goto to_mpi;
    return side_unpack(pc, PMPI_CALL_ALLGATHER, &recv, pmpi_done(pc, PMPI_CALL_ALLGATHER, st));
to_mpi:
    return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

PMPI_EXPORT int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                             void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    struct pmpi_comm *pc = pmpi_comm_get(comm);
    struct side send, recv;
    bool in_place = sendbuf == MPI_IN_PLACE;
    bool ok = pmpi_serves(pc) && sides_init(pc, &send, &recv, sendbuf, sendcount, sendtype, recvbuf,
                                            recvcount, recvtype, in_place, pc->size);
    if (!ok || pmpi_small(PMPI_CALL_ALLTOALL, recv.bytes)) {
        pmpi_hand(pc, PMPI_CALL_ALLTOALL, !ok);
        goto to_mpi;
    }
    if (!pmpi_serve(pc, PMPI_CALL_ALLTOALL))
        goto to_mpi;
    /* arcomm's alltoall is out of place only: in place, the input is a copy of recvbuf
     * (packed, or its run copied) in scratch 0. */
    if (!side_place(pc, &recv, 1))
        return nomem(pc, PMPI_CALL_ALLTOALL);
    if (in_place) {
        send.packed = true;
        send.run = pmpi_scratch(pc, 0, send.bytes);
        if (send.run == NULL && send.bytes > 0)
            return nomem(pc, PMPI_CALL_ALLTOALL);
        if (pmpi_layout_run(&send.l, send.count)) {
            if (send.bytes > 0)
                memcpy(send.run, (const char *)recvbuf + send.l.tlb, send.bytes);
        } else if (side_pack(&send) != MPI_SUCCESS) {
            return fail(pc, PMPI_CALL_ALLTOALL, MPI_ERR_TYPE, "MPI_Pack of the input failed");
        }
    } else {
        if (!side_place(pc, &send, 0))
            return nomem(pc, PMPI_CALL_ALLTOALL);
        int rc = side_pack(&send);
        if (rc != MPI_SUCCESS)
            return fail(pc, PMPI_CALL_ALLTOALL, rc, "MPI_Pack of the input failed");
    }
    size_t block = recv.bytes / (size_t)pc->size;
    comm_status_t st = comm_alltoall(pc->arc, send.run, recv.run, block, COMM_U8, NULL);
    if (pmpi_joins(pc, PMPI_CALL_ALLTOALL, st))
        goto to_mpi;
    return side_unpack(pc, PMPI_CALL_ALLTOALL, &recv, pmpi_done(pc, PMPI_CALL_ALLTOALL, st));
to_mpi:
    return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}
