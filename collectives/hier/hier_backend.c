/* SPDX-License-Identifier: MIT */
/*
 * The hierarchical backend's table and what every call shares: the descriptor
 * exchange, how a failure reaches the other ranks, scratch memory, teardown.
 */
#include "hier.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The descriptor: what each rank calls, and its status (one MPI_Iallreduce, MAX). */
enum {
    D_KIND,
    D_COUNT,
    D_DTYPE,
    D_OP,
    D_ROOT,
    D_ADDEND, /* comm_allreduce_add's addend_count, 0 for every other call */
    D_FIELDS, /* each field travels as v and as -v: MAX of both says min and max */
    D_NEG_STATUS = 2 * D_FIELDS,
    D_FAILED_RANK,
    D_LEN,
};

static const char *const field_name[D_FIELDS] = {"collective", "count", "dtype",
                                                 "op",         "root",  "addend_count"};

const char *hier_kind_name(enum coll_kind kind)
{
    static const char *const names[COLL_KIND_END] = {
        [COLL_ALLREDUCE] = "allreduce",
        [COLL_BROADCAST] = "broadcast",
        [COLL_REDUCE] = "reduce",
        [COLL_ALLGATHER] = "allgather",
        [COLL_REDUCE_SCATTER] = "reduce_scatter",
        [COLL_ALLTOALL] = "alltoall",
        [COLL_BARRIER] = "barrier",
        [COLL_SPLIT] = "split",
    };
    return kind >= COLL_ALLREDUCE && kind < COLL_KIND_END ? names[kind] : "?";
}

/* The exchange itself: every rank of the communicator, bounded by deadline; its
 * buffers are MPI's to write until it completes (mpi_ctl_new). */
static comm_status_t exchange(struct comm *c, const int64_t *fields, comm_status_t mine,
                              uint64_t deadline, int64_t *out)
{
    struct hier_comm *h = hier_of(c);
    int64_t *in = mpi_ctl_new(2 * D_LEN * sizeof(int64_t));
    if (in == NULL) {
        rt_error(c, COMM_ERR_NOMEM, "rank %d: out of memory for the call descriptor", c->rank);
        return COMM_ERR_NOMEM;
    }
    int64_t *res = in + D_LEN;
    for (int i = 0; i < D_FIELDS; i++) {
        in[i] = fields[i];
        in[D_FIELDS + i] = -fields[i];
    }
    in[D_NEG_STATUS] = -(int64_t)mine;
    in[D_FAILED_RANK] = mine == COMM_OK ? -1 : c->rank;
    h->desc_seq = c->seq;
    h->desc_sent = true;
    MPI_Request req;
    int err = MPI_Iallreduce(in, res, D_LEN, MPI_INT64_T, MPI_MAX, h->link.world, &req);
    if (err != MPI_SUCCESS) {
        mpi_ctl_done(in, true);
        return mpi_link_error(c, err, "MPI_Iallreduce (call descriptor)");
    }
    /* A failing rank still completes it (past an abort too): the peers need its part. */
    comm_status_t st = mpi_link_wait(c, &h->link, &req, 1, deadline, mine == COMM_OK,
                                     "the call descriptor exchange");
    if (st == COMM_OK)
        memcpy(out, res, D_LEN * sizeof(int64_t));
    mpi_ctl_done(in, st == COMM_OK);
    return st;
}

comm_status_t hier_begin(struct comm *c, const struct coll_call *call, uint64_t deadline)
{
    int64_t fields[D_FIELDS] = {
        call->kind, (int64_t)call->count, call->dtype,
        call->op,   call->root,           call->addend != NULL ? (int64_t)call->addend_count : 0};
    if (!coll_kind_reduces(call->kind))
        fields[D_OP] = 0;
    int64_t out[D_LEN];
    comm_status_t st = exchange(c, fields, COMM_OK, deadline, out);
    if (st != COMM_OK)
        return st;
    if (out[D_NEG_STATUS] != 0) {
        comm_status_t theirs = (comm_status_t)(-out[D_NEG_STATUS]);
        rt_error(c, COMM_ERR_PEER,
                 "rank %d: rank %lld failed before call %u (%s); see that rank's "
                 "comm_last_error",
                 c->rank, (long long)out[D_FAILED_RANK], c->seq, rt_status_string(theirs));
        return COMM_ERR_PEER;
    }
    for (int i = 0; i < D_FIELDS; i++) {
        int64_t hi = out[i], lo = -out[D_FIELDS + i];
        if (hi == lo)
            continue;
        rt_error(c, COMM_ERR_MISMATCH,
                 "rank %d: ranks disagree on the %s of call %u (this rank: %s with %s %lld; "
                 "others pass %s from %lld to %lld): every rank must make the same calls with "
                 "the same count, dtype, op and root",
                 c->rank, field_name[i], c->seq, hier_kind_name(call->kind), field_name[i],
                 (long long)fields[i], field_name[i], (long long)lo, (long long)hi);
        return COMM_ERR_MISMATCH;
    }
    return COMM_OK;
}

void hier_break_intra(struct hier_comm *h, const char *msg, bool in_call)
{
    struct comm *in = h->intra;
    if (in == NULL)
        return;
    atomic_store(&in->aborted, 1);
    if (in_call) {
        /* Broken, as rt_break leaves a communicator whose call failed: its publication
         * is a failure, not a rank leaving (the CUDA transport drains a leaving rank's
         * calls first, which a failure must not wait for). */
        int expected = 0;
        atomic_compare_exchange_strong(&in->broken, &expected, (int)COMM_ERR_PEER);
    }
    in->ops->publish_failure(in, COMM_ERR_PEER, msg, in_call);
    in->ops->wake(in);
}

comm_status_t hier_watch(struct comm *c, void *arg)
{
    struct hier_comm *h = arg;
    struct comm *in = h->intra;
    if (in == NULL || in->shm == NULL || in->shm->same_process)
        return COMM_OK;
    pid_t self = getpid();
    for (int p = 0; p < in->nranks; p++) {
        const struct shm_rank *r = &in->shm->ranks[p];
        if (p == in->rank || r->pid == self || rt_proc_alive(r->pid, r->start_time))
            continue;
        int g = -1;
        for (int q = 0; q < c->nranks && g < 0; q++)
            if (h->host_of[q] == h->host && h->local_of[q] == p)
                g = q;
        rt_error(c, COMM_ERR_PEER,
                 "rank %d: rank %d of this host (pid %d) exited or was killed while this rank "
                 "waited in MPI (call %u); the job cannot continue: see rank %d's own output "
                 "for why and restart the job",
                 c->rank, g, (int)r->pid, c->seq, g);
        return COMM_ERR_PEER;
    }
    return COMM_OK;
}

void *hier_scratch(struct comm *c, int i, size_t bytes)
{
    struct hier_comm *h = hier_of(c);
    if (bytes <= h->scratch_bytes[i])
        return h->scratch[i];
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes) != 0) {
        rt_error(c, COMM_ERR_NOMEM, "rank %d: out of memory for %zu bytes of scratch", c->rank,
                 bytes);
        return NULL;
    }
    free(h->scratch[i]);
    h->scratch[i] = p;
    h->scratch_bytes[i] = bytes;
    return p;
}

/*
 * A failure of this rank (rt_break, in the calling thread): when it came before this
 * call's descriptor went out (a bad argument, an abort seen at entry), the descriptor
 * goes out now with the failure, so the peers of every host return COMM_ERR_PEER at
 * once; the ranks of this host learn it through the intra-host communicator.  From
 * comm_abort (in_call false): atomics only, and wake breaks the intra communicator.
 * comm_destroy of a healthy communicator publishes too: the peers are not in a call
 * with this rank then, and nothing is sent.
 */
static void hier_publish_failure(struct comm *c, comm_status_t status, const char *msg,
                                 bool in_call)
{
    struct hier_comm *h = hier_of(c);
    if (!in_call || atomic_load(&c->broken) == 0)
        return;
    if (!h->desc_sent || h->desc_seq != c->seq) {
        int64_t fields[D_FIELDS] = {0}, out[D_LEN];
        exchange(c, fields, status, rt_comm_deadline(c), out);
    }
    /* Every rank learns it now, whatever MPI call it waits in (a notice).  After the
     * exchange, so that the peers finish theirs rather than abandon it; not for a
     * mismatch, which every rank learns from the exchange itself. */
    if (status != COMM_ERR_MISMATCH)
        mpi_link_notify(c, &h->link, status);
    hier_break_intra(h, msg, true);
}

static void hier_wake(struct comm *c)
{
    struct hier_comm *h = hier_of(c);
    char msg[96];
    snprintf(msg, sizeof(msg), "rank %d called comm_abort", c->rank);
    hier_break_intra(h, msg, false);
}

static comm_status_t hier_setup(struct comm *c)
{
    /* comm_init_mpi made everything already (it needs MPI to agree on each step). */
    c->shm = NULL;
    return COMM_OK;
}

static void hier_teardown(struct comm *c)
{
    struct hier_comm *h = hier_of(c);
    if (h == NULL)
        return;
    if (h->intra != NULL)
        h->iops->destroy(h->intra);
    hier_cuda_close(c, h); /* after the intra-host communicator: its kernels have ended */
    mpi_link_free(&h->link);
    free(h->host_of);
    free(h->local_of);
    free(h->slice_rank_of);
    free(h->host_size);
    free(h->host_off);
    /* A broken communicator's waits may have given up on MPI requests that a rank coming
     * later still completes, writing their buffers: its scratch is never freed. */
    if (atomic_load(&c->broken) == 0) {
        free(h->scratch[0]);
        free(h->scratch[1]);
    }
    free(h);
    c->xport = NULL;
}

comm_status_t hier_check_counts(struct comm *c, const struct coll_call *call, const char *fn)
{
    /* MPI counts bytes in an int: every rank's blocks of one call together must fit. */
    size_t es = rt_dtype_size(call->dtype);
    bool blocks = call->kind == COLL_ALLGATHER || call->kind == COLL_ALLTOALL;
    if (blocks && es != 0 && call->count > (size_t)INT_MAX / es / (size_t)c->nranks) {
        rt_error(c, COMM_ERR_UNSUPPORTED,
                 "rank %d: %s: count %zu of %s over %d ranks is over 2 GiB in one call, more "
                 "than MPI counts in an int: split the call; this communicator stays usable",
                 c->rank, fn, call->count, rt_dtype_name(call->dtype), c->nranks);
        return COMM_ERR_UNSUPPORTED;
    }
    return COMM_OK;
}

static comm_status_t hier_validate(struct comm *c, const struct coll_call *call, const char *fn)
{
    if (call->stream != NULL) {
        rt_error(c, COMM_ERR_INVALID,
                 "rank %d: %s: stream must be NULL on a host communicator (it is %p)", c->rank, fn,
                 call->stream);
        return COMM_ERR_INVALID;
    }
    return hier_check_counts(c, call, fn);
}

static comm_status_t hier_mem_alloc(struct comm *c, size_t bytes, void **ptr)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes) != 0) {
        rt_error(c, COMM_ERR_NOMEM, "rank %d: comm_mem_alloc: out of memory for %zu bytes", c->rank,
                 bytes);
        return COMM_ERR_NOMEM;
    }
    *ptr = p;
    return COMM_OK;
}

static comm_status_t hier_mem_free(struct comm *c, void *ptr)
{
    (void)c;
    free(ptr);
    return COMM_OK;
}

/*
 * One of comm_split's handshakes (struct backend_ops.split_handshake): the descriptor
 * exchange of a split (kind COLL_SPLIT, the handshake's count), so that a rank making
 * another call gets COMM_ERR_MISMATCH on every host, then every rank's (a, b) in one
 * MPI_Iallgather, bounded by the timeout and comm_abort (its buffers mpi_ctl_new's).
 */
static comm_status_t hier_split_handshake(struct comm *c, uint64_t count, int64_t a, int64_t b,
                                          int64_t *all_a, int64_t *all_b, const char *what)
{
    struct hier_comm *h = hier_of(c);
    uint64_t deadline = rt_comm_deadline(c);
    struct coll_call call = {.kind = COLL_SPLIT, .count = count, .dtype = COMM_I64, .op = COMM_SUM};
    comm_status_t st = hier_begin(c, &call, deadline);
    if (st != COMM_OK)
        return st;
    int64_t *mine = mpi_ctl_new(2 * sizeof(int64_t) * ((size_t)c->nranks + 1));
    if (mine == NULL) {
        rt_error(c, COMM_ERR_NOMEM, "rank %d: out of memory for %s", c->rank, what);
        return COMM_ERR_NOMEM;
    }
    int64_t *all = mine + 2;
    mine[0] = a;
    mine[1] = b;
    MPI_Request req;
    int err = MPI_Iallgather(mine, 2, MPI_INT64_T, all, 2, MPI_INT64_T, h->link.world, &req);
    if (err != MPI_SUCCESS) {
        mpi_ctl_done(mine, true);
        return mpi_link_error(c, err, "MPI_Iallgather (comm_split)");
    }
    st = mpi_link_wait(c, &h->link, &req, 1, deadline, true, what);
    for (int p = 0; st == COMM_OK && p < c->nranks; p++) {
        if (all_a != NULL)
            all_a[p] = all[2 * p];
        if (all_b != NULL)
            all_b[p] = all[2 * p + 1];
    }
    mpi_ctl_done(mine, st == COMM_OK);
    return st;
}

static bool hier_probe(const struct transport_probe *p, char *why, size_t len)
{
    (void)p;
    snprintf(why, len, "made by comm_init_mpi only (libarcomm_mpi)");
    return false;
}

const struct backend_ops hier_backend = {
    .name = "mpi",
    .device = COMM_DEVICE_HOST,
    .knobs = NULL, /* its knobs are the intra-host communicator's and comm_init_mpi's */
    .probe = hier_probe,
    .setup = hier_setup,
    .teardown = hier_teardown,
    .resolve_knobs = NULL,
    .validate = hier_validate,
    .allreduce = hier_allreduce,
    .allreduce_add = hier_allreduce,
    .barrier = hier_barrier,
    .broadcast = hier_broadcast,
    .reduce = hier_reduce,
    .allgather = hier_allgather,
    .reduce_scatter = hier_reduce_scatter,
    .alltoall = hier_alltoall,
    .publish_failure = hier_publish_failure,
    .wake = hier_wake,
    .mem_alloc = hier_mem_alloc,
    .mem_free = hier_mem_free,
    .split_handshake = hier_split_handshake,
    .split_join = NULL, /* comm_init_mpi's (runtime/mpi), set in each communicator's table */
};
