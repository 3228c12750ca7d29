/* SPDX-License-Identifier: MIT */
/*
 * cuda-p2p's two-shot, the device code its kernels share (kernels_p2p.cu: full width and
 * bf16; kernels_p2p_codec.cu: int8 and fp8): the reads of the peers' RS pushes, the pushes
 * and copies of a block's part, and the bounded flag waits and signals.  The protocol is
 * described in kernels_p2p.cu.  Internal linkage: each including unit gets its own copy.
 */
#ifndef ARCOMM_CUDA_KERNELS_P2P_TS_CUH
#define ARCOMM_CUDA_KERNELS_P2P_TS_CUH

#include "kernels_p2p.h"
#include "cuda/p2p_layout.h"
#include "kernels_ll.cuh"

namespace
{

/* ---- two-shot ---- */

#define TS_THREADS 256 /* 512 capped registers at 128 and spilled (ptxas, sm_90) */

/* The peers' RS pushes of this rank's slice, in this rank's own region. */
template <typename T, typename W> struct ts_src {
    const uint8_t *mine;
    const cuda_p2p_geom *g;
    int nranks;
    uint32_t round;
    uint64_t origin; /* absolute element of the slice's start */
    typedef typename acc_of<T>::type A;
    __device__ __forceinline__ const W *at(int p, uint64_t i) const
    {
        return reinterpret_cast<const W *>(mine + cuda_p2p_ts_off(g, nranks, 0, round, p)) +
               (i - origin);
    }
    __device__ __forceinline__ void load8(int p, uint64_t i, A v[8]) const
    {
        load8_wire<T, W>(at(p, i), v);
    }
    __device__ __forceinline__ A load1(int p, uint64_t i) const
    {
        typedef typename uint_n<sizeof(W)>::t U;
        return wire<T, W>::val(__ldcg(reinterpret_cast<const U *>(at(p, i))));
    }
};

/* src[lo, hi) as wire elements into dst[lo, hi) (a peer's memory), this block's threads. */
template <typename T, typename W>
__device__ __forceinline__ void ts_push_wire(const T *src, W *dst, uint64_t lo, uint64_t hi,
                                             bool vec)
{
    typedef typename uint_n<sizeof(W)>::t U;
    for (uint64_t i = lo + (uint64_t)threadIdx.x * 8; i < hi; i += (uint64_t)blockDim.x * 8) {
        if (vec && i + 8 <= hi) {
            uint32_t w[2 * sizeof(T)];
            ld_words<sizeof(T), false>(src + i, w);
            if constexpr (std::is_same<T, W>::value) {
                st_words<sizeof(T)>(dst + i, w);
            } else {
                uint32_t o[2 * sizeof(W)];
#pragma unroll
                for (int j = 0; j < 2 * (int)sizeof(W); j++)
                    o[j] = 0;
#pragma unroll
                for (int k = 0; k < 8; k++)
                    word_put<sizeof(W)>(o, k,
                                        wire<T, W>::bits(of_bits<T>(word_elem<sizeof(T)>(w, k))));
                st_words<sizeof(W)>(dst + i, o);
            }
        } else {
            for (uint64_t k = i; k < hi && k < i + 8; k++)
                reinterpret_cast<U *>(dst)[k] = (U)wire<T, W>::bits(src[k]);
        }
    }
}

/* src[lo, hi) into dst[lo, hi), elements of T; cg: src is written by other GPUs or
 * processes (skip L1). */
template <typename T, bool CG>
__device__ __forceinline__ void ts_copy(const T *src, T *dst, uint64_t lo, uint64_t hi, bool vec)
{
    typedef typename uint_n<sizeof(T)>::t U;
    for (uint64_t i = lo + (uint64_t)threadIdx.x * 8; i < hi; i += (uint64_t)blockDim.x * 8) {
        if (vec && i + 8 <= hi) {
            uint32_t w[2 * sizeof(T)];
            ld_words<sizeof(T), CG>(src + i, w);
            st_words<sizeof(T)>(dst + i, w);
        } else {
            for (uint64_t k = i; k < hi && k < i + 8; k++) {
                const U *s = reinterpret_cast<const U *>(src) + k;
                reinterpret_cast<U *>(dst)[k] = CG ? __ldcg(s) : *s;
            }
        }
    }
}

/* Thread 0: every peer's (only >= 0: that peer's) flag of this block's part (kind 0: RS, 1: AG) for
 * this round, bounded; the peers' calls compared.  0, or the failure (recorded). */
__device__ int32_t ts_wait_flags(const uint8_t *mine, const cuda_p2p_geom *g, const cuda_kcommon &c,
                                 int kind, uint32_t round, uint32_t flag, int only = -1)
{
    const uint64_t start = now_ns();
    for (int q = 0; q < c.nranks; q++) {
        if (q == c.rank || (only >= 0 && q != only))
            continue;
        const cuda_ll_unit *u = reinterpret_cast<const cuda_ll_unit *>(
            mine + cuda_p2p_flag_off(g, c.nranks, kind, round, q, blockIdx.x));
        uint4 v;
        for (uint32_t polls = 1;; polls++) {
            v = ld_ll(u);
            if (v.y == flag && v.w == flag)
                break;
            if (polls > 16)
                __nanosleep(polls < 256 ? 64 : 512);
            if (polls % POLL_CHECK != 0)
                continue;
            int32_t who = q;
            int32_t st = ll_check(c, start, &who);
            if (st == COMM_ERR_TIMEOUT)
                who = q;
            if (st != 0) {
                v = ld_ll(u);
                if (v.y == flag && v.w == flag)
                    break;
                record_fail(c, st, st == COMM_ERR_MISMATCH ? CUDA_STAGE_KDESC : CUDA_STAGE_KWAIT,
                            who);
                return st;
            }
        }
        if (v.x != c.desc) {
            record_fail(c, COMM_ERR_MISMATCH, CUDA_STAGE_KDESC, q);
            return COMM_ERR_MISMATCH;
        }
    }
    /* What the peers wrote before their flags is visible to this block from here. */
    __threadfence_system();
    return 0;
}

/* After every thread's pushes of this block: the flags of kind into every peer. */
__device__ __forceinline__ void ts_signal_raw(uint8_t *const *peer, const cuda_p2p_geom *g,
                                              const cuda_kcommon &c, int kind, uint32_t round,
                                              uint32_t flag)
{
    __threadfence_system(); /* each thread: its pushes before the flag (system scope) */
    __syncthreads();
    if (threadIdx.x != 0)
        return;
    for (int q = 0; q < c.nranks; q++)
        if (q != c.rank)
            st_ll(reinterpret_cast<cuda_ll_unit *>(
                      peer[q] + cuda_p2p_flag_off(g, c.nranks, kind, round, c.rank, blockIdx.x)),
                  c.desc, c.seq, flag);
}

__device__ __forceinline__ void ts_signal(const cuda_p2p_ts_args &a, const cuda_kcommon &c,
                                          int kind, uint32_t round, uint32_t flag)
{
    ts_signal_raw(a.peer, &a.g, c, kind, round, flag);
}

} // namespace

#endif /* ARCOMM_CUDA_KERNELS_P2P_TS_CUH */
