/* SPDX-License-Identifier: MIT */
/*
 * The CUDA peer-to-peer kernels (kernels_p2p.cu), as the host code launches them.
 * Verified on one GPU (process ranks sharing an H200 under CUDA IPC, 2026-12-01 and -02:
 * tools/gpu-check.sh p2p); not yet on two GPUs.
 */
#ifndef ARCOMM_COLL_CUDA_KERNELS_P2P_H
#define ARCOMM_COLL_CUDA_KERNELS_P2P_H

#include "cuda/layout.h"
#include "cuda/p2p_layout.h"
#include "kernels.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One-shot: one LL round in push mode (p2p_layout.h), a launch per round. */
struct cuda_p2p_ll_args {
    struct cuda_kcommon c;
    uint8_t *peer[CUDA_MAX_RANKS]; /* every rank's device region, as this GPU addresses it */
    uint64_t area_bytes;           /* of an LL area */
    uint64_t rlo;                  /* first element of the round */
    uint64_t rn;                   /* elements of the round */
    uint32_t units;                /* payload units of the round */
    uint32_t last;                 /* the call's last round: its end moves the call number on */
    /* The round (flag cuda_ll_flag(round), sub-slot round % 2) is counters->kround. */
};

/* Two-shot: one round (reduce-scatter then all-gather through the peers' regions), a
 * launch per round of blocks blocks (the same count on every rank).  c.codec a block codec
 * (int8, fp8): the reduce-scatter leg carries encoded blocks, the slices and parts cut as
 * cuda_p2p_tplan_cut's align says (WIRE_BLOCK_ELEMS); else c.narrow picks bf16 or full
 * width (CUDA_VEC_ELEMS). */
struct cuda_p2p_ts_args {
    struct cuda_kcommon c;
    uint8_t *peer[CUDA_MAX_RANKS]; /* every rank's device region, as this GPU addresses it */
    struct cuda_p2p_geom g;        /* of every region */
    uint64_t rlo;                  /* first element of the round */
    uint64_t rn;                   /* elements of the round */
    uint32_t last;                 /* the call's last round */
};

/* Reduce_scatter: one round, the two-shot kernel's reduce-scatter half.  c.send is this
 * rank's own block (sendbuf + rank x count), c.recv its recvbuf.  Reduce takes the same
 * arguments (c.send = sendbuf, block = count): the peers push to the root alone. */
struct cuda_p2p_rs_args {
    struct cuda_kcommon c;
    uint8_t *peer[CUDA_MAX_RANKS]; /* every rank's device region, as this GPU addresses it */
    struct cuda_p2p_geom g;        /* of every region */
    const void *sendbuf;           /* the whole sendbuf: block q goes to rank q */
    uint64_t block;                /* elements of a block (the call's count) */
    uint64_t rlo;                  /* first element of the round within a block */
    uint64_t rn;                   /* elements of the round */
    int32_t root;                  /* reduce's root (reduce_scatter: unused) */
    uint32_t last;                 /* the call's last round */
};

enum cuda_p2p_mv { CUDA_P2P_MV_BROADCAST = 1, CUDA_P2P_MV_ALLGATHER = 2, CUDA_P2P_MV_ALLTOALL = 3 };

/* Broadcast, allgather, alltoall: one round of direct SM copies through the peers' AG
 * areas: bytes [lo, lo + n) of every block of the call. */
struct cuda_p2p_mv_args {
    struct cuda_kcommon c;
    uint8_t *peer[CUDA_MAX_RANKS]; /* every rank's device region, as this GPU addresses it */
    struct cuda_p2p_geom g;        /* of every region */
    uint64_t block;                /* bytes of a block: count x element size */
    uint64_t lo;                   /* first byte of the round within a block */
    uint64_t n;                    /* bytes of the round (at most g.slice_bytes) */
    int32_t kind;                  /* enum cuda_p2p_mv */
    int32_t root;                  /* broadcast's root */
    uint32_t last;                 /* the call's last round */
};

/* Each returns a cudaError_t (0 = launched). */
int cuda_launch_p2p_ll(const struct cuda_p2p_ll_args *a, unsigned blocks, void *stream);
int cuda_launch_p2p_ts(const struct cuda_p2p_ts_args *a, unsigned blocks, void *stream);
/* The two-shot with a block codec in a->c.codec (kernels_p2p_codec.cu); cuda_launch_p2p_ts
 * comes here for one. */
int cuda_launch_p2p_ts_codec(const struct cuda_p2p_ts_args *a, unsigned blocks, void *stream);
int cuda_launch_p2p_mv(const struct cuda_p2p_mv_args *a, unsigned blocks, void *stream);
int cuda_launch_p2p_rs(const struct cuda_p2p_rs_args *a, unsigned blocks, void *stream);
int cuda_launch_p2p_reduce(const struct cuda_p2p_rs_args *a, unsigned blocks, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* ARCOMM_COLL_CUDA_KERNELS_P2P_H */
