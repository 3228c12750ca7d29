/* SPDX-License-Identifier: MIT */
/*
 * The CUDA kernels of the collectives, as the host code launches them (plain C structs
 * passed by value; kernels.cu holds the device code, one instance per dtype and op).
 */
#ifndef ARCOMM_COLL_CUDA_KERNELS_H
#define ARCOMM_COLL_CUDA_KERNELS_H

#include <stdint.h>

struct cuda_dcount;

#ifdef __cplusplus
extern "C" {
#endif

/* What every kernel of a call needs. */
struct cuda_kcommon {
    const void *send;
    void *recv;
    const void *addend; /* NULL, or addend_count elements added to every row */
    uint64_t count;
    uint64_t addend_count;
    uint8_t *regions; /* device address of rank 0's region; rank r's follows */
    uint64_t region_bytes;
    uint64_t timeout_ns;          /* 0 = wait forever (still ends on abort or a peer's failure) */
    struct cuda_dcount *counters; /* device: this rank's call counters (layout.h) */
    void *mirror;                 /* device address of this rank's struct cuda_count_line */
    /* Filled in by the kernels from *counters, never by the host (a graph replays them): */
    uint32_t seq;     /* call number */
    uint32_t release; /* counters are set to this on failure (cuda_release_waits) */
    uint32_t desc;    /* cuda_call_desc of this call */
    int32_t rank;
    int32_t nranks;
    int32_t dtype;  /* comm_dtype_t */
    int32_t op;     /* comm_op_t (AVG of float types only) */
    int32_t narrow; /* f32 sum rounded through bf16, bf16 on the wire */
    int32_t vec;    /* send, recv, addend 16-byte aligned: vector accesses */
    int32_t codec;  /* a block codec (enum wire_codec: int8, fp8) on the wire, else 0 */
};

/* Kernel path: one LL round (a launch per round). */
struct cuda_ll_args {
    struct cuda_kcommon c;
    uint64_t off_kstage; /* of sub-slot 0 within a region */
    uint64_t kslot_bytes;
    uint64_t rlo;   /* first element of the round */
    uint64_t rn;    /* elements of the round */
    uint32_t units; /* payload units of the round */
    uint32_t last;  /* the call's last round: its end moves the call number on */
    /* The round (flag cuda_ll_flag(round), sub-slot round % 2) is counters->kround. */
};

/* Copy path: the reduction kernel of one chunk (allreduce, reduce, reduce_scatter),
 * stream-ordered after its copies. */
struct cuda_cadd_args {
    struct cuda_kcommon c;
    const uint8_t *tmp;   /* device: this chunk's ring slot of the first peer */
    uint64_t peer_stride; /* bytes from one peer's ring to the next */
    uint64_t lo;          /* first element of the chunk */
    uint64_t n;           /* elements of the chunk */
    const uint8_t *own;   /* c.codec: this rank's encoded chunk (what its peers fetched) */
};

/*
 * Copy path: the copy-out kernel of one chunk of a data movement (broadcast, allgather,
 * alltoall), stream-ordered after its copies: nparts pieces of len bytes, src[i] (a
 * peer's chunk in the device ring, or this rank's own part of sendbuf) to dst[i] (in
 * recvbuf).  It writes nothing once this rank recorded a failure (a mismatch found by
 * the first wait, a peer's failure, a timeout): the copy engines only ever fill the
 * ring, so recvbuf stays untouched then.
 */
#define CUDA_CCOPY_PARTS 8 /* CUDA_MAX_RANKS */
struct cuda_ccopy_args {
    struct cuda_kcommon c;
    const uint8_t *src[CUDA_CCOPY_PARTS];
    uint8_t *dst[CUDA_CCOPY_PARTS];
    uint32_t nparts;
    uint64_t len;
};

/*
 * A copy stream's step (one spinning thread, bounded): publish one of this rank's
 * counters, then wait for a counter of every peer.  Values are relative to the call's
 * first chunk (counters->cur_base, taken by the begin kernel), never absolute: a graph
 * replays them.
 */
struct cuda_wait_args {
    struct cuda_kcommon c;
    uint32_t pub_off;   /* counter of struct cuda_ctrl set first (0 = none) ... */
    uint32_t pub_rel;   /* ... to cur_base + this */
    uint32_t peer_off;  /* counter of struct cuda_ctrl that every peer must move (0 = none) */
    uint32_t want_rel;  /* ... to at least cur_base + this */
    int32_t stage;      /* enum cuda_stage, for the failure record */
    int32_t check_call; /* first wait of a call: compare the peers' calls first */
};

/* Each returns a cudaError_t (0 = launched). */
/* A copy-path call's first kernel: takes its number and chunks chunks from *count, and
 * mirrors the counters into the host line mirror (struct cuda_count_line). */
int cuda_launch_begin(struct cuda_dcount *count, uint32_t chunks, void *mirror, void *stream);
int cuda_launch_wait(const struct cuda_wait_args *a, void *stream);
int cuda_launch_ll(const struct cuda_ll_args *a, unsigned blocks, void *stream);
int cuda_launch_cadd(const struct cuda_cadd_args *a, void *stream);
int cuda_launch_ccopy(const struct cuda_ccopy_args *a, void *stream);
/* dst[i] = bf16(src[i]), round to nearest even, NaN kept NaN. */
int cuda_launch_narrow(const float *src, void *dst, uint64_t count, void *stream);
/*
 * count elements of dtype (f32, f16, bf16) at src encoded in codec (WIRE_INT8, WIRE_FP8)
 * into dst (wire_bytes(codec, count) bytes, 4-byte aligned): one warp a block of 64, the
 * bytes transports/base/wire.c's encode writes.  With a block codec in a.c.codec,
 * cuda_launch_cadd decodes every rank's bytes (this rank's from a.own) in rank order.
 */
int cuda_launch_encode(int codec, int dtype, const void *src, void *dst, uint64_t count,
                       void *stream);

#ifdef __cplusplus
}
#endif

#endif /* ARCOMM_COLL_CUDA_KERNELS_H */
