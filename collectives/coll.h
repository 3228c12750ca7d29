/* SPDX-License-Identifier: MIT */
/*
 * The collective algorithms.  The runtime validates a call and hands it to the
 * backend (backend.h); the host paths are built on the shm segment's primitives, and
 * every backend's calls start with the segment's arrival handshake.
 */
#ifndef ARCOMM_COLL_H
#define ARCOMM_COLL_H

#include "comm_base.h"
#include "knobs.h"
#include "shm/shm.h"

#include <stdbool.h>
#include <stddef.h>

/* Which collective a call is (published in its arrival word: peers compare it). */
enum coll_kind {
    COLL_ALLREDUCE = 1, /* also comm_allreduce_add (addend set) */
    COLL_BROADCAST,
    COLL_REDUCE,
    COLL_ALLGATHER,
    COLL_REDUCE_SCATTER,
    COLL_ALLTOALL,
    COLL_BARRIER,
    COLL_SPLIT,    /* comm_split and comm_dup: the parent's handshakes (runtime/split.c) */
    COLL_KIND_END, /* one past the last */
};

/*
 * One validated collective call.  count is the API's per-rank count: allgather's
 * sendcount, reduce_scatter's recvcount, alltoall's count per block.  root is
 * broadcast's and reduce's (0 for the others).  On ranks other than the root, broadcast's
 * send and reduce's recv may be NULL.
 */
struct coll_call {
    enum coll_kind kind;
    int root;
    const void *send;
    void *recv;
    const void *addend;  /* comm_allreduce_add, else NULL */
    size_t addend_count; /* with addend */
    size_t count;
    comm_dtype_t dtype;
    comm_op_t op;
    void *stream;
};

/* The host allreduce (with or without an addend): flag, one-pass or staged. */
comm_status_t coll_host_allreduce(struct comm *c, const struct coll_call *call);
/* The segment's barrier: every backend's (CUDA checks its GPU first). */
comm_status_t coll_host_barrier(struct comm *c);

/* Turns the "auto" knobs of the host paths into numbers for this host, rank count and
 * kind of ranks (all threads of one process, or not). */
void coll_host_resolve_knobs(struct rt_knobs *k, const struct rt_topo_summary *topo, int nranks,
                             bool same_process);

/*
 * The host path choices, the one formula the library and arinfo share (on resolved
 * knobs).  Does a message of bytes take the flag path (else the bulk path)?
 */
static inline bool coll_host_flag_path(const struct rt_knobs *k, size_t bytes)
{
    return k->flag_threshold != RT_SIZE_OFF && bytes <= k->flag_threshold;
}

/* Does a one-pass bulk call of bytes per rank stream its stores (all nranks' inputs and
 * outputs together reach ARCOMM_NT_THRESHOLD)? */
static inline bool coll_host_streams(const struct rt_knobs *k, int nranks, size_t bytes)
{
    return k->nt_threshold != RT_SIZE_OFF && 2 * (size_t)nranks * bytes >= k->nt_threshold;
}

/* Which host path a message of bytes (of dtype) takes: "flag" or "bulk". */
const char *coll_host_path_name(const struct rt_knobs *k, size_t bytes);

/* Is f32 narrowed to bf16 for a message of bytes? */
static inline bool coll_narrows(const struct rt_knobs *k, comm_dtype_t dtype, size_t bytes)
{
    return dtype == COMM_F32 && k->bf16_threshold != RT_SIZE_OFF && bytes >= k->bf16_threshold;
}

/* host_common.c: the arrival handshake every host call starts with. */

/* Fills and publishes this rank's arrival word for call c->seq (status OK, seq last). */
void coll_arrive(struct comm *c, const struct shm_arrival *mine);

/*
 * Waits for every peer's arrival at call c->seq, then checks they agree with this
 * rank's (count, dtype, op, path): COMM_ERR_MISMATCH on every rank otherwise.
 */
comm_status_t coll_wait_arrivals(struct comm *c, const char *what);

/* The [lo, hi) element range rank r reduces out of count (64-byte aligned cuts). */
void coll_slice(size_t count, size_t esize, int nranks, int r, size_t *lo, size_t *hi);

/* Alternating staging slot for the next phase that writes staging (all ranks alike). */
static inline uint32_t coll_next_stage_slot(struct comm *c)
{
    return c->shm->stage_slot++;
}

/* The host paths. */
comm_status_t coll_allreduce_flag(struct comm *c, const struct coll_call *call, bool narrow);
comm_status_t coll_allreduce_direct(struct comm *c, const struct coll_call *call, bool narrow);
comm_status_t coll_allreduce_staged(struct comm *c, const struct coll_call *call, bool narrow);

#endif /* ARCOMM_COLL_H */
