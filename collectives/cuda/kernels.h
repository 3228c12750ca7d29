/*
 * The CUDA kernels of the allreduce paths, as the host code launches them (plain C
 * structs passed by value; kernels.cu holds the device code).
 */
#ifndef ARCOMM_COLL_CUDA_KERNELS_H
#define ARCOMM_COLL_CUDA_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What every kernel of a call needs. */
struct cuda_kcommon {
    const void *send;
    void *recv;
    const void *addend;     /* NULL, or addend_count elements added to every row */
    uint64_t count;
    uint64_t addend_count;
    uint8_t *regions;       /* device address of rank 0's region; rank r's follows */
    uint64_t region_bytes;
    uint64_t timeout_ns;    /* 0 = wait forever (still ends on abort or a peer's failure) */
    uint32_t seq;           /* call number */
    uint32_t desc;          /* cuda_call_desc of this call */
    uint32_t release;       /* counters are set to this on failure (cuda_release_waits) */
    int32_t rank;
    int32_t nranks;
    int32_t dtype;          /* COMM_F32, COMM_F16, COMM_BF16 */
    int32_t narrow;         /* f32 rounded through bf16, bf16 on the wire */
    int32_t vec;            /* send, recv, addend 16-byte aligned: vector accesses */
};

/* Kernel path: stage, publish, wait, sum; rounds beyond a sub-slot loop. */
struct cuda_kpath_args {
    struct cuda_kcommon c;
    uint64_t off_kstage;    /* of sub-slot 0 within a region */
    uint64_t kslot_bytes;
    uint64_t round_elems;
    uint32_t rounds;
    uint32_t round_base;    /* kernel-path rounds before this call */
};

/* Copy path: the add kernel that follows the chunks in on the caller's stream. */
struct cuda_cadd_args {
    struct cuda_kcommon c;
    const uint8_t *tmp;     /* device: [nranks - 1][tslots][chunk_max] */
    uint64_t chunk_max;
    uint32_t tslots;
    uint32_t *done;         /* device: [tslots] blocks finished per chunk slot */
    uint64_t chunk_elems;
    uint32_t chunks;
    uint32_t chunk_base;    /* copy-path chunks before this call */
};

/* A copy stream's wait for counters in mapped memory (a spinning thread). */
struct cuda_wait_args {
    struct cuda_kcommon c;
    uint32_t peer_off;  /* counter of struct cuda_ctrl that every peer must move ... */
    uint32_t peer_want; /* ... to at least this */
    uint32_t own_off;   /* with has_own: this rank's counter ... */
    uint32_t own_want;  /* ... to at least this */
    int32_t has_own;
    int32_t stage;      /* enum cuda_stage, for the failure record */
};

/* Each returns a cudaError_t (0 = launched). */
int cuda_launch_wait(const struct cuda_wait_args *a, void *stream);
int cuda_launch_kpath(const struct cuda_kpath_args *a, unsigned blocks, void *stream);
int cuda_launch_cadd(const struct cuda_cadd_args *a, unsigned blocks, void *stream);
/* dst[i] = bf16(src[i]), round to nearest even, NaN kept NaN. */
int cuda_launch_narrow(const float *src, void *dst, uint64_t count, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* ARCOMM_COLL_CUDA_KERNELS_H */
