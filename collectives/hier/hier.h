/* SPDX-License-Identifier: MIT */
/*
 * The hierarchical backend: a communicator over the ranks of several hosts, made by
 * comm_init_mpi.  It wraps an intra-host arcomm communicator (the ranks of this host,
 * over the usual transports) and the MPI communicators of the inter-host steps
 * (transports/mpi).  Every call starts with one descriptor exchange over all ranks
 * (what each rank calls, and its status), so that a disagreement is COMM_ERR_MISMATCH
 * on every rank before any output is written and a rank that failed before the call
 * reaches everyone; every inter-host step after it carries each rank's status too.
 * docs/multihost.md has the algorithms and their cost.
 */
#ifndef ARCOMM_HIER_H
#define ARCOMM_HIER_H

#include "arcomm_build.h"
#include "backend.h"
#include "mpi/mpi_link.h"

#include <stdbool.h>
#include <stddef.h>

/* At or above this many bytes (of the widened dtype) an allreduce takes the
 * reduce-scatter / per-slice allreduce / allgather scheme, where hosts are equal. */
#define HIER_LARGE_BYTES (64u * 1024u)
/* The inter-host steps move data in segments of this many bytes (256 KiB beat 1 and
 * 4 MiB for 1 MiB allreduces here, docs/multihost.md), up to
 * HIER_SEGS_IN_FLIGHT of them at once (every one a nonblocking MPI call). */
#define HIER_SEG_BYTES      (1u << 18)
#define HIER_SEGS_IN_FLIGHT 4
/* From this many bytes, over a power of two of hosts, the inter-host allreduce halves
 * the vector between the hosts (each combines its share) and gathers it back, instead of
 * exchanging all of it every round (hier_inter.c).  On two hosts of network namespaces
 * (TCP over veth, best of three) the exchange won at 256 KiB (122 against 155 us) and
 * halving at 1 MiB (364 against 681); with hosts emulated over shared memory halving
 * won from 256 KiB (79 against 93 us) and at 1 and 4 MiB on 4 hosts. */
#define HIER_HALVING_BYTES (1u << 20)

/*
 * What the algorithms call on the intra-host communicator: the public entry points,
 * handed down by comm_init_mpi (runtime/mpi), so that the runtime validates and
 * sequences the inner calls and this layer calls no entry point by name.
 */
struct hier_intra_ops {
    comm_status_t (*broadcast)(comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                               comm_dtype_t dtype, int root, void *stream);
    comm_status_t (*reduce)(comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                            comm_dtype_t dtype, comm_op_t op, int root, void *stream);
    comm_status_t (*allgather)(comm_t *comm, const void *sendbuf, void *recvbuf, size_t sendcount,
                               comm_dtype_t dtype, void *stream);
    comm_status_t (*reduce_scatter)(comm_t *comm, const void *sendbuf, void *recvbuf,
                                    size_t recvcount, comm_dtype_t dtype, comm_op_t op,
                                    void *stream);
    comm_status_t (*barrier)(comm_t *comm);
    comm_status_t (*destroy)(comm_t *comm);
    const char *(*last_error)(const comm_t *comm);
    /* Without entering it (rt_hook_comm_state): how its next call would start; the CUDA
     * staging asks it after waiting for its own GPU, so that a local peer's failure is
     * not sent to the other hosts as data. */
    comm_status_t (*state)(const comm_t *comm);
    /* out[i] = a[i] op b[i] with the host reduction's arithmetic (rt_hook_reduce_pair;
     * out may be a or b): the inter-host exchange combines the hosts' partial results as
     * the ranks of one host combine theirs, a the lower hosts' partial. */
    void (*combine)(void *out, const void *a, const void *b, size_t count, comm_dtype_t dtype,
                    comm_op_t op);
};

struct hier_comm {
    struct backend_ops ops;            /* hier_backend, named after both levels */
    char name[32];                     /* "shm+mpi" */
    comm_t *intra;                     /* the ranks of this host */
    const struct hier_intra_ops *iops; /* its entry points */
    struct mpi_link link;
    int local, nlocal; /* this rank's index on its host, the host's rank count */
    int host, nhosts;  /* this rank's host (its leader's rank among the leaders) */
    bool equal;        /* every host has nlocal ranks */
    /* Per rank of the communicator: its host, local index, rank in its slice. */
    int *host_of, *local_of, *slice_rank_of;
    int *host_size, *host_off; /* per host: ranks, first index in host-grouped order */
    uint32_t desc_seq;         /* the call whose descriptor went out last */
    bool desc_sent;            /* desc_seq is meaningful */
    void *scratch[2];          /* grown on demand, freed by teardown */
    size_t scratch_bytes[2];
    struct hier_cuda *cuda; /* CUDA buffers (hier_cuda.c): the staging; NULL on the host */
    int device_index;       /* CUDA: this rank's GPU */
};

static inline struct hier_comm *hier_of(struct comm *c)
{
    return (struct hier_comm *)c->xport;
}

/* The backend (hier_backend.c): comm_init_mpi fills a hier_comm and hands this table,
 * renamed, to libarcomm. */
extern const struct backend_ops hier_backend;

/*
 * The descriptor exchange at the start of call c->seq over every rank: status OK and
 * call's (collective, count, dtype, op, root).  COMM_ERR_MISMATCH on every rank when
 * they differ, COMM_ERR_PEER when a rank came with a failure.
 */
comm_status_t hier_begin(struct comm *c, const struct coll_call *call, uint64_t deadline);

/* "allreduce", "broadcast", ... for messages (libarcomm's table is its own). */
const char *hier_kind_name(enum coll_kind kind);

/* Breaks the intra-host communicator (its ranks, blocked or not, return COMM_ERR_PEER):
 * how a failure this rank learned in MPI reaches the rest of its host. */
void hier_break_intra(struct hier_comm *h, const char *msg, bool in_call);

/* The watch of every wait in MPI (struct mpi_link, arg: the hier_comm): a rank of this
 * host whose process is gone fails the call at once (COMM_ERR_PEER naming it) instead
 * of at the deadline, as the intra-host waits do in shared memory. */
comm_status_t hier_watch(struct comm *c, void *arg);

/* Scratch buffer i of at least bytes (NULL and an error on c when out of memory). */
void *hier_scratch(struct comm *c, int i, size_t bytes);

/* The collectives (hier_reduce.c, hier_move.c). */
comm_status_t hier_allreduce(struct comm *c, const struct coll_call *call);
comm_status_t hier_reduce(struct comm *c, const struct coll_call *call);
comm_status_t hier_reduce_scatter(struct comm *c, const struct coll_call *call);
comm_status_t hier_broadcast(struct comm *c, const struct coll_call *call);
comm_status_t hier_allgather(struct comm *c, const struct coll_call *call);
comm_status_t hier_alltoall(struct comm *c, const struct coll_call *call);
comm_status_t hier_barrier(struct comm *c);

/*
 * CUDA buffers (hier_cuda.c; HIER_CUDA: a CUDA build, or the GPU-less test build of the
 * CUDA path, HIER_FAKE_CUDA, where tests/mpi/fake_cuda stands in for the CUDA runtime).
 * hier_cuda_devices: the CUDA devices this process sees (0 when none, or no driver).
 * hier_cuda_open: the staging of h on CUDA device `device` (events; buffers grow on
 * demand), COMM_ERR_SYSTEM with the message on tc when it fails.  hier_cuda_close: frees
 * it once its copies are done (after the intra-host communicator is gone: its kernels
 * have ended), waiting 2 s at most (then its buffers stay, logged on c).
 * hier_cuda_adapt: ops (a copy of hier_backend) becomes the table of a CUDA communicator
 * of comm_init_mpi: every collective but comm_allreduce_add, stream-ordered, the host
 * waiting for the inter-host step (docs/multihost.md).
 */
#if ARCOMM_HAVE_CUDA || defined(HIER_FAKE_CUDA)
#define HIER_CUDA 1
#else
#define HIER_CUDA 0
#endif
struct hier_cuda;
int hier_cuda_devices(void);
comm_status_t hier_cuda_open(struct comm *tc, struct hier_comm *h, int device);
void hier_cuda_close(struct comm *c, struct hier_comm *h);
void hier_cuda_adapt(struct backend_ops *ops);

/* The checks every hierarchical call shares (hier_backend.c): MPI's int counts. */
comm_status_t hier_check_counts(struct comm *c, const struct coll_call *call, const char *fn);

/* hier_convert.c: the dtype reductions run in (f16, bf16: f32; the others: themselves),
 * and the conversions into and out of it.  hier_widen: n elements of dtype at src
 * into wd at dst.  hier_narrow: back, dividing by divisor first when it is > 1 (AVG). */
comm_dtype_t hier_work_dtype(comm_dtype_t dtype);
void hier_widen(const void *src, comm_dtype_t dtype, void *dst, size_t n);
void hier_narrow(const void *src, comm_dtype_t dtype, void *dst, size_t n, int divisor);
/* work[i] += addend[i % addend_count] for n elements of the work dtype of dtype, the
 * addend in dtype (f16, bf16 widened; integers wrap). */
void hier_add(void *work, comm_dtype_t dtype, const void *addend, size_t addend_count, size_t n);

/*
 * The wire codec the hosts' partial results of a reduction of n elements of dtype with op
 * travel in (docs/wire.md), or NULL for full width: ARCOMM_WIRE's codec (not none) for a
 * sum or average of f32, f16 or bf16 (an f32 work dtype) that it applies to, from
 * ARCOMM_WIRE_THRESHOLD's bytes of the call's message (agreed by every rank, so every rank
 * decides alike).  Host and CUDA buffers alike: the partials cross on the host.
 */
struct wire_row;
const struct wire_row *hier_inter_wire(const struct comm *c, comm_dtype_t dtype, comm_op_t op,
                                       size_t n);

#endif /* ARCOMM_HIER_H */
